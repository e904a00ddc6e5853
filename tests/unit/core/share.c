/*
 * Unit tests for core/share.c: each sandbox's share of a worker's conns. The
 * issue-15 flood in miniature: one key fills what it may, and the others must
 * still be admitted; the capacity follows the descriptor table; a key at its
 * share is refused at N + 1 and admitted again once one of its conns goes.
 */
#include <signal.h>

#include "core/an.h"
#include "core/share.h"
#include "tests/unit/unit.h"

enum { FLOODER = 7, QUIET = 8, OTHER = 9 };

/* Takes conns for <key> while the share admits them; returns how many it took. */
static uint32_t fill(struct share *s, uint32_t key)
{
	uint32_t n = 0;

	while (share_admits(s, key)) {
		share_take(s, key);
		n++;
	}
	return n;
}

static void drain(struct share *s, uint32_t key, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		share_put(s, key);
}

START_TEST(test_capacity_is_pool_or_half_the_table)
{
	/* Two slots a conn, after the reserve. */
	ck_assert_uint_eq(share_capacity_for(32768, 20000),
			  (20000 - LIMITS_FILE_SLOTS_RESERVED) / 2);
	ck_assert_uint_eq(share_capacity_for(64, 20000), 64);
	ck_assert_uint_eq(share_capacity_for(32768, 65536),
			  (65536 - LIMITS_FILE_SLOTS_RESERVED) / 2);
	/* A table no larger than the reserve still admits one conn. */
	ck_assert_uint_eq(share_capacity_for(64, LIMITS_FILE_SLOTS_RESERVED), 1);
	ck_assert_uint_eq(share_capacity_for(64, 0), 1);
}
END_TEST

START_TEST(test_lone_sandbox_takes_its_percent)
{
	struct share s;

	ck_assert_int_eq(share_init(&s, 100, 75), 0);
	/* h + 1 <= 75% of (free + h): with nobody else, free + h is 100. */
	ck_assert_uint_eq(fill(&s, FLOODER), 75);
	ck_assert_uint_eq(s.held[FLOODER], 75);
	ck_assert_uint_eq(s.total, 75);
	/* N + 1 is refused; one conn gone, one more is admitted. */
	ck_assert(!share_admits(&s, FLOODER));
	ck_assert(!share_full(&s));
	share_put(&s, FLOODER);
	ck_assert(share_admits(&s, FLOODER));
	share_take(&s, FLOODER);
	ck_assert(!share_admits(&s, FLOODER));
	drain(&s, FLOODER, 75);
	ck_assert_uint_eq(s.total, 0);
	share_destroy(&s);
}
END_TEST

START_TEST(test_flood_leaves_room_for_others)
{
	struct share s;

	ck_assert_int_eq(share_init(&s, 1000, 75), 0);
	uint32_t flood = fill(&s, FLOODER);
	ck_assert_uint_eq(flood, 750);
	/* The quiet sandbox, arriving after the flood, gets 75% of what is left. */
	ck_assert(share_admits(&s, QUIET));
	uint32_t quiet = fill(&s, QUIET);
	ck_assert_uint_eq(quiet, 187);
	/* A third still finds room: the flooder holds most, so it stops first. */
	ck_assert(share_admits(&s, OTHER));
	ck_assert(!share_admits(&s, FLOODER));
	ck_assert(!share_admits(&s, QUIET));
	/* The public listener's conns are a key of their own. */
	ck_assert(share_admits(&s, SHARE_KEY_PUBLIC));
	share_take(&s, SHARE_KEY_PUBLIC);
	share_put(&s, SHARE_KEY_PUBLIC);
	drain(&s, FLOODER, flood);
	drain(&s, QUIET, quiet);
	share_destroy(&s);
}
END_TEST

START_TEST(test_many_floods_never_overfill)
{
	struct share s;
	uint32_t took[40];

	ck_assert_int_eq(share_init(&s, 500, 75), 0);
	for (uint32_t k = 0; k < AN_ARRAY_LEN(took); k++) {
		took[k] = fill(&s, k);
		ck_assert_uint_le(s.total, 500);
	}
	/* Each came after the last and took 75% of what it found, never all of it. */
	ck_assert_uint_eq(took[0], 375);
	ck_assert_uint_eq(took[1], 93);
	for (uint32_t k = 0; k < AN_ARRAY_LEN(took); k++)
		drain(&s, k, took[k]);
	ck_assert_uint_eq(s.total, 0);
	share_destroy(&s);
}
END_TEST

START_TEST(test_hundred_percent_is_capacity_only)
{
	struct share s;

	ck_assert_int_eq(share_init(&s, 64, 100), 0);
	ck_assert_uint_eq(fill(&s, FLOODER), 64);
	ck_assert(share_full(&s));
	ck_assert(!share_admits(&s, QUIET));
	drain(&s, FLOODER, 64);
	ck_assert(share_admits(&s, QUIET));
	share_destroy(&s);
}
END_TEST

START_TEST(test_last_key_is_in_bounds)
{
	struct share s;

	ck_assert_int_eq(share_init(&s, 16, 75), 0);
	ck_assert(share_admits(&s, SHARE_KEYS - 1));
	share_take(&s, SHARE_KEYS - 1);
	ck_assert_uint_eq(s.held[SHARE_KEYS - 1], 1);
	share_put(&s, SHARE_KEYS - 1);
	share_destroy(&s);
}
END_TEST

START_TEST(test_key_past_the_end_aborts)
{
	struct share s;

	ck_assert_int_eq(share_init(&s, 16, 75), 0);
	(void)share_admits(&s, SHARE_KEYS);
}
END_TEST

START_TEST(test_put_unheld_aborts)
{
	struct share s;

	ck_assert_int_eq(share_init(&s, 16, 75), 0);
	share_take(&s, FLOODER);
	share_put(&s, QUIET);
}
END_TEST

START_TEST(test_destroy_with_conns_held_aborts)
{
	struct share s;

	ck_assert_int_eq(share_init(&s, 16, 75), 0);
	share_take(&s, FLOODER);
	share_destroy(&s);
}
END_TEST

static Suite *share_suite(void)
{
	Suite *s = suite_create("share");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_capacity_is_pool_or_half_the_table);
	tcase_add_test(tc, test_lone_sandbox_takes_its_percent);
	tcase_add_test(tc, test_flood_leaves_room_for_others);
	tcase_add_test(tc, test_many_floods_never_overfill);
	tcase_add_test(tc, test_hundred_percent_is_capacity_only);
	tcase_add_test(tc, test_last_key_is_in_bounds);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_key_past_the_end_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_unheld_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_destroy_with_conns_held_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	return unit_run(share_suite());
}
