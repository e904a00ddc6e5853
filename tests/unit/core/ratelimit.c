/*
 * Unit tests for core/ratelimit.c: the burst, the refill, Retry-After that
 * is honoured (waiting that long finds a token), a reused slot, no limit.
 */
#include <check.h>

#include "core/ratelimit.h"
#include "tests/unit/unit.h"

START_TEST(burst_then_refused)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { .requests_per_second = 2, .burst = 3 };
	uint32_t retry = 0;

	for (int i = 0; i < 3; i++)
		ck_assert(ratelimit_take(&b, &l, 1, 1000, &retry));
	ck_assert(!ratelimit_take(&b, &l, 1, 1000, &retry));
	ck_assert_uint_eq(retry, 1); /* half a second to a token: one whole second */
	/* Refused requests take nothing, and the wait said is enough. */
	ck_assert(!ratelimit_take(&b, &l, 1, 1200, &retry));
	ck_assert(ratelimit_take(&b, &l, 1, 1000 + 1000 * retry, &retry));
}
END_TEST

START_TEST(slow_rate_retry_after)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { .requests_per_second = 1 };
	uint32_t retry = 0;

	ck_assert(ratelimit_take(&b, &l, 7, 50, &retry));
	ck_assert(!ratelimit_take(&b, &l, 7, 50, &retry));
	ck_assert_uint_eq(retry, 1);
	ck_assert(!ratelimit_take(&b, &l, 7, 1049, &retry));
	ck_assert(ratelimit_take(&b, &l, 7, 1050, &retry));
	/* Idle for long: the bucket fills to the burst (the rate), no further. */
	ck_assert(ratelimit_take(&b, &l, 7, 100000, &retry));
	ck_assert(!ratelimit_take(&b, &l, 7, 100000, &retry));
}
END_TEST

START_TEST(reused_slot_starts_full)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { .requests_per_second = 1, .burst = 1 };
	uint32_t retry = 0;

	ck_assert(ratelimit_take(&b, &l, 1, 10, &retry));
	ck_assert(!ratelimit_take(&b, &l, 1, 10, &retry));
	ck_assert(ratelimit_take(&b, &l, 2, 10, &retry)); /* another sandbox now */
}
END_TEST

START_TEST(unlimited)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { 0 };
	uint32_t retry = 99;

	for (int i = 0; i < 100000; i++)
		ck_assert(ratelimit_take(&b, &l, 1, 0, &retry));
	ck_assert_uint_eq(retry, 99);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core/ratelimit");
	TCase *tc = tcase_create("ratelimit");

	tcase_add_test(tc, burst_then_refused);
	tcase_add_test(tc, slow_rate_retry_after);
	tcase_add_test(tc, reused_slot_starts_full);
	tcase_add_test(tc, unlimited);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
