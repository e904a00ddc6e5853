/*
 * Unit tests for core/pool.c. The .c is included so that its calls to free()
 * can be watched: the headers it uses are included first, then free() is
 * redefined to a checker that, for the one pointer a test names, records
 * whether its bytes were already zero when released (pool_free_secret must
 * wipe before it frees). Every other pointer goes straight to the real free.
 *
 * Programmer errors (a leak at pool_destroy, a put of a pointer the pool never
 * handed out) abort; those tests run in libcheck's forked child and expect
 * SIGABRT. Inputs that must not be over-read are placed right before a
 * PROT_NONE page.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

static const void *watch_ptr;
static size_t watch_len;
static int watch_freed;
static int watch_zero;

static void test_free(void *p)
{
	if (p != NULL && p == watch_ptr) {
		const unsigned char *b = p;
		watch_zero = 1;
		for (size_t i = 0; i < watch_len; i++) {
			if (b[i] != 0)
				watch_zero = 0;
		}
		watch_freed++;
	}
	(free)(p);
}

#define free(p) test_free(p)
#include "../../../core/pool.c"
#undef free

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include "tests/unit/unit.h"

struct item {
	uint64_t a;
	uint32_t b;
	char pad[9];
};

/* ---- Helpers. ---- */

/* Maps two pages and makes the second PROT_NONE; returns the first. */
static unsigned char *guard_map(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *m =
	    mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	ck_assert_int_eq(mprotect(m + page, page, PROT_NONE), 0);
	return m;
}

static void guard_unmap(unsigned char *m)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	ck_assert_int_eq(munmap(m, 2 * page), 0);
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		if (b[i] != 0)
			return 0;
	}
	return 1;
}

/* ---- pool_init. ---- */

START_TEST(test_init_fields)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "items", sizeof(struct item), 10), 0);
	ck_assert_str_eq(p.name, "items");
	ck_assert_uint_eq(p.obj_size, 32);
	ck_assert_uint_eq(p.capacity, 10);
	ck_assert_uint_eq(p.free_count, 10);
	ck_assert_uint_eq(p.in_use_high, 0);
	ck_assert_uint_eq(p.failed_takes, 0);
	ck_assert_uint_eq(pool_in_use(&p), 0);
	pool_destroy(&p);
	ck_assert_ptr_null(p.slab);
	ck_assert_ptr_null(p.free_stack);
	/* A second destroy (or one after a failed init) is harmless. */
	pool_destroy(&p);

	ck_assert_int_eq(pool_init(&p, "one", 1, 1), 0);
	ck_assert_uint_eq(p.obj_size, 16);
	pool_destroy(&p);
	ck_assert_int_eq(pool_init(&p, "sixteen", 16, 1), 0);
	ck_assert_uint_eq(p.obj_size, 16);
	pool_destroy(&p);
	ck_assert_int_eq(pool_init(&p, "seventeen", 17, 1), 0);
	ck_assert_uint_eq(p.obj_size, 32);
	pool_destroy(&p);
}
END_TEST

START_TEST(test_init_refuses)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "zero-size", 0, 4), -EINVAL);
	ck_assert_int_eq(pool_init(&p, "zero-cap", 16, 0), -EINVAL);
	/* Rounding UINT32_MAX up to 16 wraps; the pool must refuse, not be empty-sized. */
	int ret = pool_init(&p, "wraps", UINT32_MAX, 1);
	ck_assert_msg(ret == -EINVAL || ret == -ENOMEM, "pool_init returned %d", ret);
	ck_assert_ptr_null(p.slab);
	pool_destroy(&p);
}
END_TEST

/* ---- take / put. ---- */

START_TEST(test_take_zeroed)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "items", sizeof(struct item), 4), 0);
	struct item *it = pool_take(&p);
	ck_assert_ptr_nonnull(it);
	ck_assert_int_eq(all_zero(it, p.obj_size), 1);
	/* Dirty the whole rounded object, not just sizeof(struct item). */
	memset(it, 0xa5, p.obj_size);
	pool_put(&p, it);
	struct item *again = pool_take(&p);
	ck_assert_ptr_eq(again, it);
	ck_assert_int_eq(all_zero(again, p.obj_size), 1);
	pool_put(&p, again);
	pool_destroy(&p);
}
END_TEST

START_TEST(test_lifo_and_index)
{
	struct pool p;
	void *obj[3];

	ck_assert_int_eq(pool_init(&p, "items", sizeof(struct item), 3), 0);
	for (uint32_t i = 0; i < 3; i++) {
		obj[i] = pool_take(&p);
		ck_assert_ptr_nonnull(obj[i]);
		/* Handed out from the start of the slab. */
		ck_assert_uint_eq(pool_index(&p, obj[i]), i);
		ck_assert_ptr_eq(obj[i], p.slab + (size_t)i * p.obj_size);
	}
	ck_assert_uint_eq(pool_in_use(&p), 3);
	pool_put(&p, obj[0]);
	pool_put(&p, obj[2]);
	ck_assert_uint_eq(pool_in_use(&p), 1);
	/* Last put, first taken. */
	ck_assert_ptr_eq(pool_take(&p), obj[2]);
	ck_assert_ptr_eq(pool_take(&p), obj[0]);
	ck_assert_uint_eq(pool_index(&p, obj[1]), 1);
	for (uint32_t i = 0; i < 3; i++)
		pool_put(&p, obj[i]);
	ck_assert_uint_eq(pool_in_use(&p), 0);
	pool_destroy(&p);
}
END_TEST

/* Capacity N: N takes succeed and distinct, take N+1 is refused and counted. */
START_TEST(test_capacity_limit)
{
	enum { N = 64 };
	struct pool p;
	void *obj[N];

	ck_assert_int_eq(pool_init(&p, "items", sizeof(struct item), N), 0);
	for (uint32_t i = 0; i < N; i++) {
		obj[i] = pool_take(&p);
		ck_assert_ptr_nonnull(obj[i]);
		ck_assert_uint_eq(pool_in_use(&p), i + 1);
		ck_assert_uint_eq(p.in_use_high, i + 1);
		for (uint32_t j = 0; j < i; j++)
			ck_assert_ptr_ne(obj[i], obj[j]);
		/* Each object is writable over its whole size (no overlap found by ASan). */
		memset(obj[i], (int)i, p.obj_size);
	}
	ck_assert_uint_eq(p.failed_takes, 0);
	ck_assert_ptr_null(pool_take(&p));
	ck_assert_uint_eq(p.failed_takes, 1);
	ck_assert_ptr_null(pool_take(&p));
	ck_assert_uint_eq(p.failed_takes, 2);
	ck_assert_uint_eq(pool_in_use(&p), N);
	ck_assert_uint_eq(p.in_use_high, N);
	/* Objects kept their contents: no take wrote over another one. */
	for (uint32_t i = 0; i < N; i++) {
		const unsigned char *b = obj[i];
		ck_assert_uint_eq(b[0], i);
		ck_assert_uint_eq(b[p.obj_size - 1], i);
	}
	/* One back: a take succeeds again, and the failure count stays. */
	pool_put(&p, obj[N - 1]);
	obj[N - 1] = pool_take(&p);
	ck_assert_ptr_nonnull(obj[N - 1]);
	ck_assert_uint_eq(p.failed_takes, 2);
	for (uint32_t i = 0; i < N; i++)
		pool_put(&p, obj[i]);
	ck_assert_uint_eq(pool_in_use(&p), 0);
	pool_destroy(&p);
}
END_TEST

START_TEST(test_in_use_high)
{
	struct pool p;
	void *obj[5];

	ck_assert_int_eq(pool_init(&p, "items", 8, 5), 0);
	for (uint32_t i = 0; i < 3; i++)
		obj[i] = pool_take(&p);
	ck_assert_uint_eq(p.in_use_high, 3);
	pool_put(&p, obj[2]);
	pool_put(&p, obj[1]);
	ck_assert_uint_eq(pool_in_use(&p), 1);
	ck_assert_uint_eq(p.in_use_high, 3);
	obj[1] = pool_take(&p);
	ck_assert_uint_eq(p.in_use_high, 3);
	obj[2] = pool_take(&p);
	obj[3] = pool_take(&p);
	ck_assert_uint_eq(p.in_use_high, 4);
	for (uint32_t i = 0; i < 4; i++)
		pool_put(&p, obj[i]);
	ck_assert_uint_eq(p.in_use_high, 4);
	ck_assert_uint_eq(pool_in_use(&p), 0);
	pool_destroy(&p);
}
END_TEST

/* ---- Programmer errors: these run in a forked child and must abort. ---- */

START_TEST(test_destroy_leak_aborts)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "leaky", 8, 2), 0);
	ck_assert_ptr_nonnull(pool_take(&p));
	pool_destroy(&p);
}
END_TEST

START_TEST(test_put_foreign_heap_aborts)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "items", 16, 2), 0);
	void *obj = pool_take(&p);
	ck_assert_ptr_nonnull(obj);
	void *foreign = pool_malloc(16);
	ck_assert_ptr_nonnull(foreign);
	pool_put(&p, foreign);
}
END_TEST

START_TEST(test_put_other_pool_aborts)
{
	struct pool p, q;

	ck_assert_int_eq(pool_init(&p, "p", 16, 2), 0);
	ck_assert_int_eq(pool_init(&q, "q", 16, 2), 0);
	ck_assert_ptr_nonnull(pool_take(&p));
	void *obj = pool_take(&q);
	ck_assert_ptr_nonnull(obj);
	pool_put(&p, obj);
}
END_TEST

START_TEST(test_put_misaligned_aborts)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "items", 32, 2), 0);
	unsigned char *obj = pool_take(&p);
	ck_assert_ptr_nonnull(obj);
	pool_put(&p, obj + 8);
}
END_TEST

START_TEST(test_put_past_end_aborts)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "items", 32, 2), 0);
	ck_assert_ptr_nonnull(pool_take(&p));
	/* The first address after the slab: aligned like an object, but index N. */
	pool_put(&p, p.slab + (size_t)p.obj_size * p.capacity);
}
END_TEST

START_TEST(test_put_into_full_pool_aborts)
{
	struct pool p;

	ck_assert_int_eq(pool_init(&p, "items", 32, 2), 0);
	void *obj = pool_take(&p);
	ck_assert_ptr_nonnull(obj);
	pool_put(&p, obj);
	/* A double put when nothing is out. */
	pool_put(&p, obj);
}
END_TEST

/* ---- The allocation wrappers. ---- */

START_TEST(test_strndup)
{
	unsigned char *m = guard_map();
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	/* Five bytes with no NUL, ending right at the PROT_NONE page. */
	char *src = (char *)m + page - 5;
	memcpy(src, "hello", 5);

	char *d = pool_strndup(src, 5);
	ck_assert_ptr_nonnull(d);
	ck_assert_ptr_ne(d, src);
	ck_assert_str_eq(d, "hello");
	AN_FREE(&d);
	ck_assert_ptr_null(d);

	d = pool_strndup(src, 3);
	ck_assert_str_eq(d, "hel");
	AN_FREE(&d);

	d = pool_strndup(src + 5, 0);
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(d, "");
	AN_FREE(&d);

	/* Exactly <len> bytes are copied, NULs included, then one NUL is added. */
	d = pool_strndup("a\0b", 3);
	ck_assert_mem_eq(d, "a\0b\0", 4);
	AN_FREE(&d);
	guard_unmap(m);
}
END_TEST

START_TEST(test_free_secret)
{
	enum { LEN = 100 };
	unsigned char *s = pool_malloc(LEN);

	ck_assert_ptr_nonnull(s);
	memset(s, 0x5a, LEN);
	watch_ptr = s;
	watch_len = LEN;
	watch_freed = 0;
	watch_zero = 0;
	pool_free_secret(s, LEN);
	ck_assert_int_eq(watch_freed, 1);
	ck_assert_int_eq(watch_zero, 1);

	/* The control: pool_free releases without wiping. */
	s = pool_malloc(LEN);
	ck_assert_ptr_nonnull(s);
	memset(s, 0x5a, LEN);
	watch_ptr = s;
	watch_freed = 0;
	watch_zero = 0;
	pool_free(s);
	ck_assert_int_eq(watch_freed, 1);
	ck_assert_int_eq(watch_zero, 0);
	watch_ptr = NULL;

	pool_free_secret(NULL, 10);
	pool_free(NULL);
}
END_TEST

START_TEST(test_wrappers)
{
	unsigned char *c = pool_calloc(10, 7);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(all_zero(c, 70), 1);
	memset(c, 1, 70);
	unsigned char *r = pool_realloc(c, 700);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r[69], 1);
	AN_FREE(&r);
	ck_assert_ptr_null(r);
	char *m = pool_malloc(1);
	ck_assert_ptr_nonnull(m);
	AN_FREE(&m);
}
END_TEST

static Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_init_fields);
	tcase_add_test(tc, test_init_refuses);
	tcase_add_test(tc, test_take_zeroed);
	tcase_add_test(tc, test_lifo_and_index);
	tcase_add_test(tc, test_capacity_limit);
	tcase_add_test(tc, test_in_use_high);
	tcase_add_test(tc, test_strndup);
	tcase_add_test(tc, test_free_secret);
	tcase_add_test(tc, test_wrappers);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_destroy_leak_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_foreign_heap_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_other_pool_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_misaligned_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_past_end_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_into_full_pool_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	return unit_run(pool_suite());
}
