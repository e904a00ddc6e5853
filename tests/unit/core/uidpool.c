/*
 * Unit tests for core/uidpool.c, with the host check replaced by a table of
 * "host accounts" the test sets. The contract under test (core/uidpool.h): a
 * uid is picked only when neither given nor known to the host; picks go round
 * the range from the cursor, so a uid given back is picked again only after
 * every other free one; whole words of given uids are skipped; a full range
 * (or one the host fills) is -EUSERS; take refuses a uid given already;
 * release of a uid outside the pool or not given changes nothing.
 */
#include "../../../core/uidpool.c"

#include <check.h>
#include <stdint.h>
#include "core/limits.h"
#include "tests/unit/unit.h"

#define FIRST 5000u

static bool host_known[1024]; /* offset from FIRST: the host has an account or group */
static uint32_t host_asked;

static bool fake_host_free(uint32_t uid)
{
	host_asked++;
	return !(uid >= FIRST && uid - FIRST < AN_ARRAY_LEN(host_known) && host_known[uid - FIRST]);
}

static void setup(struct uidpool *p, uint32_t count)
{
	memset(host_known, 0, sizeof(host_known));
	host_asked = 0;
	ck_assert_int_eq(uidpool_init(p, FIRST, count, fake_host_free), 0);
}

/* Picks and takes one uid, as the engine does for a new sandbox. */
static uint32_t give(struct uidpool *p)
{
	uint32_t uid = 0;

	ck_assert_int_eq(uidpool_pick(p, &uid), 0);
	ck_assert(uidpool_contains(p, uid));
	ck_assert_int_eq(uidpool_take(p, uid), 0);
	return uid;
}

START_TEST(test_contains)
{
	struct uidpool p;

	setup(&p, 10);
	ck_assert(!uidpool_contains(&p, FIRST - 1));
	ck_assert(uidpool_contains(&p, FIRST));
	ck_assert(uidpool_contains(&p, FIRST + 9));
	ck_assert(!uidpool_contains(&p, FIRST + 10));
	ck_assert(!uidpool_contains(&p, UINT32_MAX));
	uidpool_free(&p);
	/* A freed (or never set up) pool holds nothing. */
	ck_assert(!uidpool_contains(&p, FIRST));
}
END_TEST

START_TEST(test_round_robin)
{
	struct uidpool p;

	setup(&p, 4);
	ck_assert_uint_eq(give(&p), FIRST);
	ck_assert_uint_eq(give(&p), FIRST + 1);
	/* Given back: picked again only once the others were. */
	uidpool_release(&p, FIRST);
	ck_assert_uint_eq(give(&p), FIRST + 2);
	ck_assert_uint_eq(give(&p), FIRST + 3);
	ck_assert_uint_eq(give(&p), FIRST);
	ck_assert_uint_eq(p.given, 4);
	uint32_t uid = 0;
	ck_assert_int_eq(uidpool_pick(&p, &uid), -EUSERS);
	ck_assert_uint_eq(uid, 0);
	uidpool_release(&p, FIRST + 2);
	ck_assert_uint_eq(give(&p), FIRST + 2);
	uidpool_free(&p);
}
END_TEST

START_TEST(test_host_accounts_skipped)
{
	struct uidpool p;
	uint32_t uid = 0;

	setup(&p, 3);
	host_known[0] = true;
	host_known[2] = true;
	ck_assert_uint_eq(give(&p), FIRST + 1);
	/* The rest is the host's: nothing to give, and nothing was marked. */
	ck_assert_int_eq(uidpool_pick(&p, &uid), -EUSERS);
	ck_assert_uint_eq(p.given, 1);
	/* An account removed from the host: its uid may be given. */
	host_known[2] = false;
	ck_assert_uint_eq(give(&p), FIRST + 2);
	uidpool_free(&p);
}
END_TEST

START_TEST(test_take_and_release)
{
	struct uidpool p;

	setup(&p, 8);
	/* A registry record names a uid: it is given, and never picked while it is. */
	ck_assert_int_eq(uidpool_take(&p, FIRST), 0);
	ck_assert_int_eq(uidpool_take(&p, FIRST), -EEXIST);
	ck_assert_uint_eq(give(&p), FIRST + 1);
	ck_assert_uint_eq(p.given, 2);
	/* Releasing what is not given, or not the pool's, changes nothing. */
	uidpool_release(&p, FIRST + 5);
	uidpool_release(&p, FIRST - 1);
	uidpool_release(&p, FIRST + 8);
	ck_assert_uint_eq(p.given, 2);
	uidpool_release(&p, FIRST);
	uidpool_release(&p, FIRST);
	ck_assert_uint_eq(p.given, 1);
	uidpool_free(&p);
}
END_TEST

START_TEST(test_whole_words_skipped)
{
	struct uidpool p;

	/* 200 uids: three full words and a partial one. Give 130, then ask for the rest. */
	setup(&p, 200);
	for (uint32_t i = 0; i < 130; i++)
		ck_assert_uint_eq(give(&p), FIRST + i);
	/* Given back: 3, 64 and 199; the cursor is at 130, so 199 comes first, then 3, 64. */
	uidpool_release(&p, FIRST + 3);
	uidpool_release(&p, FIRST + 64);
	for (uint32_t i = 130; i < 199; i++)
		ck_assert_uint_eq(give(&p), FIRST + i);
	ck_assert_uint_eq(give(&p), FIRST + 199);
	host_asked = 0;
	ck_assert_uint_eq(give(&p), FIRST + 3);
	ck_assert_uint_eq(give(&p), FIRST + 64);
	/* The host was asked of free uids only: one each. */
	ck_assert_uint_eq(host_asked, 2);
	uint32_t uid = 0;
	host_asked = 0;
	ck_assert_int_eq(uidpool_pick(&p, &uid), -EUSERS);
	ck_assert_uint_eq(host_asked, 0);
	ck_assert_uint_eq(p.given, 200);
	uidpool_free(&p);
}
END_TEST

START_TEST(test_one_uid)
{
	struct uidpool p;
	uint32_t uid = 0;

	setup(&p, 1);
	ck_assert_uint_eq(give(&p), FIRST);
	ck_assert_int_eq(uidpool_pick(&p, &uid), -EUSERS);
	uidpool_release(&p, FIRST);
	ck_assert_uint_eq(give(&p), FIRST);
	uidpool_free(&p);
}
END_TEST

START_TEST(test_default_host_check)
{
	/* Root is every host's account and group; the default pool's first uid is no one's here. */
	ck_assert(!uidpool_host_free(0));
	ck_assert(uidpool_host_free(LIMITS_SANDBOX_UID_FIRST_DEFAULT));
}
END_TEST

static Suite *uidpool_suite(void)
{
	Suite *s = suite_create("uidpool");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_contains);
	tcase_add_test(tc, test_round_robin);
	tcase_add_test(tc, test_host_accounts_skipped);
	tcase_add_test(tc, test_take_and_release);
	tcase_add_test(tc, test_whole_words_skipped);
	tcase_add_test(tc, test_one_uid);
	tcase_add_test(tc, test_default_host_check);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(uidpool_suite());
}
