/*
 * Unit tests for core/snapshot.c: when a retired snapshot may be freed. A
 * snapshot stays reachable while any worker has not published a later
 * generation, while it is some worker's current one, and while any request
 * of any worker holds it; it is released exactly once, through the ops.
 */
#include "../../../core/snapshot.c"

#include <check.h>
#include <signal.h>
#include <stdlib.h>

#include "tests/unit/unit.h"

static int releases;

static void count_release(const void *policy)
{
	(void)policy;
	releases++;
}

static const struct verdict_ops ops = { .release = count_release };
static const int policy_one = 1, policy_two = 2, policy_three = 3;

START_TEST(fresh_snapshot_has_no_sandbox)
{
	struct snapshot *s = snapshot_create(&policy_one, 1, 2);

	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(s->generation, 1);
	ck_assert(!s->sandboxes[0].known);
	ck_assert(!s->sandboxes[LIMITS_SANDBOXES_MAX - 1].known);
	releases = 0;
	snapshot_destroy(s, &ops);
	ck_assert_int_eq(releases, 1);
	snapshot_destroy(NULL, &ops);
	ck_assert_int_eq(releases, 1);
}
END_TEST

START_TEST(retired_is_freed_once_every_worker_moved_on)
{
	_Atomic uint64_t seen[2] = { 0, 0 };
	struct snapshot *one = snapshot_create(&policy_one, 1, 2);
	struct snapshot *two = snapshot_create(&policy_two, 2, 2);
	struct snapshot *w0 = snapshot_adopt(NULL, one, 0, &seen[0]);
	struct snapshot *w1 = snapshot_adopt(NULL, one, 1, &seen[1]);

	ck_assert_uint_eq(atomic_load(&one->holders), 2);
	/* Worker 0 moves on; worker 1 has not yet: it could still adopt one. */
	w0 = snapshot_adopt(w0, two, 0, &seen[0]);
	ck_assert_ptr_eq(w0, two);
	ck_assert_uint_eq(atomic_load(&one->holders), 1);
	ck_assert(!snapshot_unreachable(one, seen, 2));
	w1 = snapshot_adopt(w1, two, 1, &seen[1]);
	ck_assert_uint_eq(atomic_load(&one->holders), 0);
	ck_assert_uint_eq(atomic_load(&two->holders), 2);
	ck_assert(snapshot_unreachable(one, seen, 2));
	ck_assert(!snapshot_unreachable(two, seen, 2)); /* current: nobody is past it */
	releases = 0;
	snapshot_destroy(one, &ops);
	ck_assert_int_eq(releases, 1);
	snapshot_leave(w0, 0);
	snapshot_leave(w1, 1);
	snapshot_destroy(two, &ops);
}
END_TEST

START_TEST(a_request_keeps_its_snapshot)
{
	_Atomic uint64_t seen[1] = { 0 };
	struct snapshot *one = snapshot_create(&policy_one, 1, 1);
	struct snapshot *two = snapshot_create(&policy_two, 2, 1);
	struct snapshot *three = snapshot_create(&policy_three, 3, 1);
	struct snapshot *w = snapshot_adopt(NULL, one, 0, &seen[0]);

	snapshot_get(w, 0); /* a tunnel opened under one */
	snapshot_get(w, 0); /* and a second */
	w = snapshot_adopt(w, two, 0, &seen[0]);
	w = snapshot_adopt(w, three, 0, &seen[0]);
	/* two was current for a moment and nothing took it: gone at once. */
	ck_assert(snapshot_unreachable(two, seen, 1));
	ck_assert_uint_eq(atomic_load(&one->holders), 1);
	ck_assert(!snapshot_unreachable(one, seen, 1));
	snapshot_put(one, 0);
	ck_assert(!snapshot_unreachable(one, seen, 1));
	snapshot_put(one, 0); /* the last tunnel closes */
	ck_assert(snapshot_unreachable(one, seen, 1));
	/* Requests on the current snapshot never make it unreachable. */
	snapshot_get(w, 0);
	snapshot_put(w, 0);
	ck_assert_uint_eq(atomic_load(&three->holders), 1);
	snapshot_leave(w, 0);
	ck_assert_uint_eq(atomic_load(&three->holders), 0);
	releases = 0;
	snapshot_destroy(one, &ops);
	snapshot_destroy(two, &ops);
	snapshot_destroy(three, &ops);
	ck_assert_int_eq(releases, 3);
}
END_TEST

START_TEST(put_without_get_aborts)
{
	_Atomic uint64_t seen[1] = { 0 };
	struct snapshot *one = snapshot_create(&policy_one, 1, 1);

	(void)snapshot_adopt(NULL, one, 0, &seen[0]);
	snapshot_put(one, 0);
}
END_TEST

START_TEST(adopting_an_older_generation_aborts)
{
	_Atomic uint64_t seen[1] = { 0 };
	struct snapshot *one = snapshot_create(&policy_one, 1, 1);
	struct snapshot *two = snapshot_create(&policy_two, 2, 1);
	struct snapshot *w = snapshot_adopt(NULL, two, 0, &seen[0]);

	(void)snapshot_adopt(w, one, 0, &seen[0]);
}
END_TEST

static Suite *snapshot_suite(void)
{
	Suite *s = suite_create("snapshot");
	TCase *tc = tcase_create("reclaim");

	tcase_add_test(tc, fresh_snapshot_has_no_sandbox);
	tcase_add_test(tc, retired_is_freed_once_every_worker_moved_on);
	tcase_add_test(tc, a_request_keeps_its_snapshot);
	tcase_add_test_raise_signal(tc, put_without_get_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc, adopting_an_older_generation_aborts, SIGABRT);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(snapshot_suite());
}
