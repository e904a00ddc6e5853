/*
 * Unit tests for core/timer.c. Time is driven by explicit now_ms values (no
 * sleeping): a test arms entries at a known "now" (the last value the wheel
 * was given through timer_wheel_init or timer_wheel_expire), then advances
 * millisecond by millisecond, or tick by tick as the worker loop does with
 * timer_wheel_wait_ms, and records when each entry comes out.
 *
 * The contract under test (core/timer.h): an entry fires no earlier than its
 * delay and at most one tick later; a delay past the wheel's span is clamped
 * and fires early, which the owner detects and re-arms; expiry hands out at
 * most <max> entries per call and the rest on the next call; a clock jump of
 * several revolutions expires everything that is due.
 */
#include "../../../core/timer.c"

#include <check.h>
#include <stdint.h>
#include "tests/unit/unit.h"

#define T    LIMITS_TIMER_TICK_MS
#define SPAN ((uint64_t)(LIMITS_TIMER_SLOTS - 1) * LIMITS_TIMER_TICK_MS)

static struct timer_wheel wheel; /* large: static, not on the stack */

/* ---- Helpers. ---- */

/* Calls timer_wheel_expire at <now> until it returns less than asked or <cap> is full. */
static uint32_t drain(struct timer_wheel *w, uint64_t now, struct timer_entry **out, uint32_t cap)
{
	uint32_t total = 0;

	while (total < cap) {
		uint32_t max = cap - total < 16 ? cap - total : 16;
		uint32_t n = timer_wheel_expire(w, now, out + total, max);
		ck_assert_uint_le(n, max);
		total += n;
		if (n < max)
			break;
	}
	return total;
}

/*
 * Advances <w> one millisecond at a time from <from> to <until> and returns
 * the first time <e> came out (UINT64_MAX if it did not). Nothing else is
 * armed, so nothing else may come out.
 */
static uint64_t first_fire(struct timer_wheel *w, struct timer_entry *e, uint64_t from,
			   uint64_t until)
{
	struct timer_entry *out[4];

	for (uint64_t now = from; now <= until; now++) {
		uint32_t n = timer_wheel_expire(w, now, out, AN_ARRAY_LEN(out));
		if (n == 0)
			continue;
		ck_assert_uint_eq(n, 1);
		ck_assert_ptr_eq(out[0], e);
		ck_assert_int_eq(timer_armed(e), 0);
		ck_assert_uint_eq(w->armed, 0);
		return now;
	}
	return UINT64_MAX;
}

/* Puts the wheel at <now>: a fresh wheel, then one expire, as the worker would. */
static void wheel_at(struct timer_wheel *w, uint64_t start, uint64_t now)
{
	struct timer_entry *out[1];

	timer_wheel_init(w, start);
	ck_assert_uint_eq(timer_wheel_expire(w, now, out, 1), 0);
}

/* ---- Arming and disarming. ---- */

START_TEST(test_arm_disarm)
{
	struct timer_entry e = { 0 };
	struct timer_entry *out[4];

	timer_wheel_init(&wheel, 1000);
	ck_assert_uint_eq(wheel.armed, 0);
	/* A zeroed entry (as pool_take hands out) is disarmed; disarming it is a no-op. */
	ck_assert_int_eq(timer_armed(&e), 0);
	timer_disarm(&wheel, &e);
	ck_assert_uint_eq(wheel.armed, 0);

	timer_arm(&wheel, &e, 500);
	ck_assert_int_eq(timer_armed(&e), 1);
	ck_assert_uint_eq(wheel.armed, 1);
	timer_disarm(&wheel, &e);
	ck_assert_int_eq(timer_armed(&e), 0);
	ck_assert_uint_eq(wheel.armed, 0);
	timer_disarm(&wheel, &e);
	ck_assert_uint_eq(wheel.armed, 0);
	/* A disarmed entry never fires. */
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 1000 + 10 * 1000, out, 4), 0);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 11000), -1);
}
END_TEST

START_TEST(test_rearm_moves)
{
	struct timer_entry e = { 0 };

	timer_wheel_init(&wheel, 0);
	timer_arm(&wheel, &e, 500);
	timer_arm(&wheel, &e, 2000);
	ck_assert_uint_eq(wheel.armed, 1);
	ck_assert_uint_eq(first_fire(&wheel, &e, 0, 10000), 2000);

	/* Moving it earlier works too. */
	timer_arm(&wheel, &e, 3000);
	timer_arm(&wheel, &e, 300);
	ck_assert_uint_eq(wheel.armed, 1);
	ck_assert_uint_eq(first_fire(&wheel, &e, 2000, 10000), 2300);

	/* Re-arming after it fired arms it again, once. */
	timer_arm(&wheel, &e, 100);
	ck_assert_uint_eq(wheel.armed, 1);
	ck_assert_uint_eq(first_fire(&wheel, &e, 2300, 10000), 2400);
	ck_assert_uint_eq(first_fire(&wheel, &e, 2400, 10000), UINT64_MAX);
}
END_TEST

/* An entry re-armed with 0 from its expiry handler waits for the next tick (no loop). */
START_TEST(test_rearm_zero_in_handler)
{
	struct timer_entry e = { 0 };
	struct timer_entry *out[2];

	wheel_at(&wheel, 0, 1000);
	timer_arm(&wheel, &e, 0);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 1000, out, 2), 0);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 1100, out, 2), 1);
	timer_arm(&wheel, &e, 0);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 1100, out, 2), 0);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 1199, out, 2), 0);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 1200, out, 2), 1);
	ck_assert_ptr_eq(out[0], &e);
	ck_assert_uint_eq(wheel.armed, 0);
}
END_TEST

/* ---- Never early, at most one tick late. ---- */

START_TEST(test_never_early)
{
	static const uint64_t starts[] = { 0, 1, 50, 99, 100, 101, 150, 199, 12345, 987654321 };
	static const uint32_t delays[] = { 0,   1,   2,   50,  99,   100,  101,  150,
					   199, 200, 201, 999, 1000, 1001, 12345 };
	struct timer_entry e = { 0 };

	for (size_t i = 0; i < AN_ARRAY_LEN(starts); i++) {
		for (size_t j = 0; j < AN_ARRAY_LEN(delays); j++) {
			/* Armed both right after init and right after an expire call. */
			for (int via_expire = 0; via_expire < 2; via_expire++) {
				uint64_t s = starts[i];
				uint64_t due = s + delays[j];
				if (via_expire)
					wheel_at(&wheel, s >= 777 ? s - 777 : 0, s);
				else
					timer_wheel_init(&wheel, s);
				timer_arm(&wheel, &e, delays[j]);
				uint64_t f = first_fire(&wheel, &e, s, due + 2 * T);
				ck_assert_msg(f >= due && f <= due + T,
					      "start %llu delay %u (via expire %d): fired at %llu, "
					      "want [%llu, %llu]",
					      (unsigned long long)s, delays[j], via_expire,
					      (unsigned long long)f, (unsigned long long)due,
					      (unsigned long long)(due + T));
			}
		}
	}
}
END_TEST

/* The worker loop's way: sleep timer_wheel_wait_ms, then expire. */
START_TEST(test_loop_driven)
{
	struct timer_entry e = { 0 };
	struct timer_entry *out[4];

	wheel_at(&wheel, 0, 12345);
	timer_arm(&wheel, &e, 10000);
	uint64_t now = 12345;
	uint32_t steps = 0;
	for (;;) {
		int32_t wait = timer_wheel_wait_ms(&wheel, now);
		ck_assert_int_gt(wait, 0);
		ck_assert_int_le(wait, (int32_t)T);
		now += (uint64_t)wait;
		steps++;
		uint32_t n = timer_wheel_expire(&wheel, now, out, AN_ARRAY_LEN(out));
		if (n != 0) {
			ck_assert_uint_eq(n, 1);
			ck_assert_ptr_eq(out[0], &e);
			break;
		}
		ck_assert_uint_lt(steps, 1000);
	}
	ck_assert_uint_ge(now, 12345 + 10000);
	ck_assert_uint_le(now, 12345 + 10000 + T);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, now), -1);
}
END_TEST

/* ---- Ordering. ---- */

START_TEST(test_ordering)
{
	enum { N = 500 };
	static struct timer_entry e[N];
	static uint64_t due[N];
	static uint64_t fired[N];
	struct timer_entry *out[N];
	uint32_t x = 12345;
	uint64_t start = 5055;

	wheel_at(&wheel, 0, start);
	for (uint32_t i = 0; i < N; i++) {
		x = x * 1103515245u + 12345u;
		uint32_t delay = (x >> 8) % 60000u;
		e[i] = (struct timer_entry){ 0 };
		timer_arm(&wheel, &e[i], delay);
		due[i] = start + delay;
		fired[i] = 0;
	}
	ck_assert_uint_eq(wheel.armed, N);
	/* Step by an irregular stride; every entry fires once, on time. */
	uint32_t left = N;
	for (uint64_t now = start; left > 0; now += 37) {
		uint32_t n = drain(&wheel, now, out, N);
		for (uint32_t k = 0; k < n; k++) {
			uint32_t i = (uint32_t)(out[k] - e);
			ck_assert_uint_lt(i, N);
			ck_assert_uint_eq(fired[i], 0);
			fired[i] = now;
		}
		left -= n;
		ck_assert_uint_eq(wheel.armed, left);
		ck_assert_uint_lt(now, start + 60000 + 2 * T + 37);
	}
	for (uint32_t i = 0; i < N; i++) {
		ck_assert_uint_ge(fired[i], due[i]);
		ck_assert_uint_le(fired[i], due[i] + T + 37);
	}

	/* One big step: the batch comes out in tick order. */
	wheel_at(&wheel, 0, start);
	for (uint32_t i = 0; i < N; i++)
		timer_arm(&wheel, &e[i], (uint32_t)(due[i] - start));
	uint32_t n = drain(&wheel, start + 61000, out, N);
	ck_assert_uint_eq(n, N);
	for (uint32_t k = 1; k < N; k++)
		ck_assert_uint_le(out[k - 1]->expires_tick, out[k]->expires_tick);
	ck_assert_uint_eq(wheel.armed, 0);
}
END_TEST

/* ---- The wheel's span. ---- */

START_TEST(test_span_limit)
{
	static const uint64_t starts[] = { 1000, 1050, 1099 };
	struct timer_entry e = { 0 };

	for (size_t i = 0; i < AN_ARRAY_LEN(starts); i++) {
		uint64_t s = starts[i];
		/* N: the longest delay held exactly ends on the span's last tick. */
		uint32_t exact = (uint32_t)(SPAN - s % T);
		wheel_at(&wheel, 0, s);
		timer_arm(&wheel, &e, exact);
		uint64_t f = first_fire(&wheel, &e, s, s + SPAN + 2 * T);
		ck_assert_uint_ge(f, s + exact);
		ck_assert_uint_le(f, s + exact + T);

		/* N+1 and far beyond: clamped, so they fire at the span's end, early. */
		const uint32_t longer[] = { exact + 1, exact + T, 3600000u, UINT32_MAX };
		for (size_t j = 0; j < AN_ARRAY_LEN(longer); j++) {
			wheel_at(&wheel, 0, s);
			timer_arm(&wheel, &e, longer[j]);
			f = first_fire(&wheel, &e, s, s + SPAN + 2 * T);
			ck_assert_uint_eq(f, s + exact);
			ck_assert_uint_lt(f, s + longer[j]);
		}
	}
}
END_TEST

/* An owner with a deadline past the span re-arms on each early wake and ends on time. */
START_TEST(test_clamped_owner_rechecks)
{
	struct timer_entry e = { 0 };
	struct timer_entry *out[4];
	uint64_t start = 777;
	uint64_t deadline = start + 3 * SPAN + 4321;
	uint32_t wakes = 0;

	wheel_at(&wheel, 0, start);
	timer_arm(&wheel, &e, (uint32_t)(deadline - start));
	uint64_t now = start;
	for (;;) {
		int32_t wait = timer_wheel_wait_ms(&wheel, now);
		ck_assert_int_gt(wait, 0);
		now += (uint64_t)wait;
		uint32_t n = timer_wheel_expire(&wheel, now, out, AN_ARRAY_LEN(out));
		if (n == 0)
			continue;
		ck_assert_uint_eq(n, 1);
		wakes++;
		if (now >= deadline)
			break;
		timer_arm(&wheel, &e, (uint32_t)(deadline - now));
	}
	ck_assert_uint_le(now, deadline + T);
	ck_assert_uint_ge(wakes, 4);
	ck_assert_uint_le(wakes, 5);
}
END_TEST

/* ---- Batches. ---- */

START_TEST(test_many_in_one_slot)
{
	enum { N = 1000 };
	static struct timer_entry e[N];
	static uint8_t seen[N];
	struct timer_entry *out[64];

	wheel_at(&wheel, 0, 3000);
	for (uint32_t i = 0; i < N; i++) {
		e[i] = (struct timer_entry){ 0 };
		timer_arm(&wheel, &e[i], 1000);
		seen[i] = 0;
	}
	ck_assert_uint_eq(wheel.armed, N);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 3999, out, 64), 0);
	uint32_t total = 0;
	uint32_t n;
	do {
		n = timer_wheel_expire(&wheel, 4000, out, 64);
		for (uint32_t k = 0; k < n; k++) {
			uint32_t i = (uint32_t)(out[k] - e);
			ck_assert_uint_lt(i, N);
			ck_assert_uint_eq(seen[i], 0);
			ck_assert_int_eq(timer_armed(out[k]), 0);
			seen[i] = 1;
		}
		total += n;
		ck_assert_uint_eq(wheel.armed, N - total);
	} while (n == 64);
	ck_assert_uint_eq(total, N);
	ck_assert_uint_eq(n, N % 64);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 4000, out, 64), 0);
}
END_TEST

/* max smaller than the expired count: max now, the rest on the next call (N and N+1). */
START_TEST(test_expire_max)
{
	enum { N = 10 };
	struct timer_entry e[N];
	struct timer_entry *out[N + 1];

	wheel_at(&wheel, 0, 0);
	for (uint32_t i = 0; i < N; i++) {
		e[i] = (struct timer_entry){ 0 };
		timer_arm(&wheel, &e[i], (i + 1) * T);
	}
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 100 * T, out, 3), 3);
	ck_assert_uint_eq(wheel.armed, 7);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 100 * T, out, 3), 3);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 100 * T, out, 3), 3);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 100 * T, out, 3), 1);
	ck_assert_ptr_eq(out[0], &e[N - 1]);
	ck_assert_uint_eq(wheel.armed, 0);

	/* Exactly max expired: max, then 0. */
	wheel_at(&wheel, 0, 0);
	for (uint32_t i = 0; i < N; i++)
		timer_arm(&wheel, &e[i], (i + 1) * T);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 100 * T, out, N), N);
	for (uint32_t i = 0; i < N; i++)
		ck_assert_ptr_eq(out[i], &e[i]);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 100 * T, out, N), 0);

	/* max one above the count: all in one call. */
	for (uint32_t i = 0; i < N; i++)
		timer_arm(&wheel, &e[i], (i + 1) * T);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 200 * T, out, N + 1), N);
	ck_assert_uint_eq(wheel.armed, 0);
}
END_TEST

/* A stall of several revolutions: everything due comes out, the wheel keeps working. */
START_TEST(test_long_stall)
{
	enum { N = 50 };
	static struct timer_entry e[N];
	static uint8_t seen[N];
	struct timer_entry *out[N + 1];
	struct timer_entry late = { 0 };

	wheel_at(&wheel, 0, 500);
	for (uint32_t i = 0; i < N; i++) {
		e[i] = (struct timer_entry){ 0 };
		seen[i] = 0;
		timer_arm(&wheel, &e[i], i * 7919u);
	}
	timer_arm(&wheel, &late, UINT32_MAX);
	uint64_t now = 500 + 5 * SPAN + 1234;
	uint32_t n = drain(&wheel, now, out, N + 1);
	ck_assert_uint_eq(n, N + 1);
	for (uint32_t k = 0; k < n; k++) {
		if (out[k] == &late)
			continue;
		uint32_t i = (uint32_t)(out[k] - e);
		ck_assert_uint_lt(i, N);
		ck_assert_uint_eq(seen[i], 0);
		seen[i] = 1;
	}
	ck_assert_uint_eq(wheel.armed, 0);
	/* The last batch was full: one more call finds nothing and finishes the walk. */
	ck_assert_uint_eq(timer_wheel_expire(&wheel, now, out, 1), 0);
	ck_assert_uint_eq(wheel.now_tick, now / T);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, now), -1);
	/* After the stall, new entries keep their contract. */
	timer_arm(&wheel, &late, 250);
	uint64_t f = first_fire(&wheel, &late, now, now + 1000);
	ck_assert_uint_ge(f, now + 250);
	ck_assert_uint_le(f, now + 250 + T);

	/* Exactly one revolution late, and one more tick. */
	for (uint64_t extra = 0; extra < 2; extra++) {
		wheel_at(&wheel, 0, 0);
		timer_arm(&wheel, &e[0], 300);
		now = (LIMITS_TIMER_SLOTS + extra) * T + 300;
		ck_assert_uint_eq(drain(&wheel, now, out, N), 1);
		ck_assert_ptr_eq(out[0], &e[0]);
	}
}
END_TEST

/* A clock that goes back (it should not) fires nothing and breaks nothing. */
START_TEST(test_clock_back)
{
	struct timer_entry e = { 0 };
	struct timer_entry *out[2];

	wheel_at(&wheel, 0, 10000);
	timer_arm(&wheel, &e, 500);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 5000, out, 2), 0);
	ck_assert_uint_eq(wheel.armed, 1);
	ck_assert_uint_eq(first_fire(&wheel, &e, 10000, 20000), 10500);
}
END_TEST

/* ---- wait_ms and the clock. ---- */

START_TEST(test_wait_ms)
{
	struct timer_entry e = { 0 };
	struct timer_entry *out[2];

	timer_wheel_init(&wheel, 0);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 0), -1);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 12345), -1);
	timer_arm(&wheel, &e, 5000);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 0), (int32_t)T);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 1), (int32_t)T - 1);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, T - 1), 1);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, T), (int32_t)T);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 3 * T + 7), (int32_t)T - 7);
	timer_disarm(&wheel, &e);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 1), -1);
	timer_arm(&wheel, &e, 5000);
	ck_assert_uint_eq(timer_wheel_expire(&wheel, 5000, out, 2), 1);
	ck_assert_int_eq(timer_wheel_wait_ms(&wheel, 5000), -1);
}
END_TEST

START_TEST(test_now_ms)
{
	uint64_t a = timer_now_ms();
	uint64_t b = timer_now_ms();

	ck_assert_uint_gt(a, 0);
	ck_assert_uint_ge(b, a);
	ck_assert_uint_lt(b - a, 1000);
}
END_TEST

static Suite *timer_suite(void)
{
	Suite *s = suite_create("timer");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_arm_disarm);
	tcase_add_test(tc, test_rearm_moves);
	tcase_add_test(tc, test_rearm_zero_in_handler);
	tcase_add_test(tc, test_never_early);
	tcase_add_test(tc, test_loop_driven);
	tcase_add_test(tc, test_ordering);
	tcase_add_test(tc, test_span_limit);
	tcase_add_test(tc, test_clamped_owner_rechecks);
	tcase_add_test(tc, test_many_in_one_slot);
	tcase_add_test(tc, test_expire_max);
	tcase_add_test(tc, test_long_stall);
	tcase_add_test(tc, test_clock_back);
	tcase_add_test(tc, test_wait_ms);
	tcase_add_test(tc, test_now_ms);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(timer_suite());
}
