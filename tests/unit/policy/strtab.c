/*
 * policy/strtab.c: empty tables, insert and find, duplicates, keys that differ
 * only in length or past a NUL, growth from empty keeping every entry, presized
 * tables that never move, and the entry limit at init.
 */
#include "../../../policy/strtab.c"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include "tests/unit/unit.h"

START_TEST(test_empty)
{
	struct strtab t;
	uint32_t v = 7;

	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(strtab_find(&t, "a", 1, &v), -ENOENT);
	ck_assert_int_eq(strtab_init(&t, 0), 0);
	ck_assert_ptr_null(t.slots);
	ck_assert_int_eq(strtab_find(&t, "", 0, &v), -ENOENT);
	ck_assert_uint_eq(v, 7);
	strtab_free(&t);
}
END_TEST

START_TEST(test_insert_find_duplicate)
{
	static const char keys[] = "abc\0abd";
	struct strtab t;
	uint32_t v = 0;

	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(strtab_insert(&t, "abc", 3, 1, &v), 0);
	ck_assert_int_eq(strtab_insert(&t, "ab", 2, 2, &v), 0);
	ck_assert_int_eq(strtab_insert(&t, keys, 7, 3, &v), 0);
	ck_assert_int_eq(strtab_insert(&t, "", 0, 4, &v), 0);
	ck_assert_uint_eq(t.count, 4);
	ck_assert_int_eq(strtab_find(&t, "abc", 3, &v), 0);
	ck_assert_uint_eq(v, 1);
	ck_assert_int_eq(strtab_find(&t, "ab", 2, &v), 0);
	ck_assert_uint_eq(v, 2);
	ck_assert_int_eq(strtab_find(&t, keys, 7, &v), 0);
	ck_assert_uint_eq(v, 3);
	ck_assert_int_eq(strtab_find(&t, "", 0, &v), 0);
	ck_assert_uint_eq(v, 4);
	ck_assert_int_eq(strtab_find(&t, "a", 1, &v), -ENOENT);
	ck_assert_int_eq(strtab_find(&t, keys, 4, &v), -ENOENT);
	ck_assert_int_eq(strtab_insert(&t, "abc", 3, 9, &v), -EEXIST);
	ck_assert_uint_eq(v, 1);
	ck_assert_uint_eq(t.count, 4);
	ck_assert_int_eq(strtab_find(&t, "abc", 3, &v), 0);
	ck_assert_uint_eq(v, 1);
	ck_assert_uint_eq(strtab_hash("abc", 3), XXH3_64bits("abc", 3));
	strtab_free(&t);
	ck_assert_ptr_null(t.slots);
	ck_assert_uint_eq(t.count, 0);
}
END_TEST

#define MANY 50000u

START_TEST(test_growth_keeps_entries)
{
	static char keys[MANY][12];
	struct strtab t;
	uint32_t v = 0;

	memset(&t, 0, sizeof(t));
	for (uint32_t i = 0; i < MANY; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%u", i);
		ck_assert_int_eq(strtab_insert(&t, keys[i], strlen(keys[i]), i, &v), 0);
		ck_assert_uint_le(t.count * 2, t.mask + 1);
	}
	for (uint32_t i = 0; i < MANY; i++) {
		ck_assert_int_eq(strtab_find(&t, keys[i], strlen(keys[i]), &v), 0);
		ck_assert_uint_eq(v, i);
	}
	ck_assert_int_eq(strtab_find(&t, "k50000", 6, &v), -ENOENT);
	strtab_free(&t);
}
END_TEST

START_TEST(test_presized_never_moves)
{
	static char keys[1000][8];
	struct strtab t;
	uint32_t v = 0;

	ck_assert_int_eq(strtab_init(&t, 1000), 0);
	const struct strtab_slot *slots = t.slots;
	ck_assert_uint_eq(t.mask + 1, 2048);
	for (uint32_t i = 0; i < 1000; i++) {
		snprintf(keys[i], sizeof(keys[i]), "%u", i);
		ck_assert_int_eq(strtab_insert(&t, keys[i], strlen(keys[i]), i, &v), 0);
	}
	ck_assert_ptr_eq(t.slots, slots);
	strtab_free(&t);
	/* The entry limit: at most STRTAB_ENTRIES_MAX, refused beyond. */
	ck_assert_int_eq(strtab_init(&t, STRTAB_ENTRIES_MAX + 1), -E2BIG);
	ck_assert_ptr_null(t.slots);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy/strtab");
	TCase *tc = tcase_create("strtab");

	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_insert_find_duplicate);
	tcase_add_test(tc, test_growth_keeps_entries);
	tcase_add_test(tc, test_presized_never_moves);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
