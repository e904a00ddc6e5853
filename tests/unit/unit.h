/*
 * What every libcheck suite's main() shares: run the suite, turn the result
 * into an exit status (tests/run-unit.sh reads only that).
 */
#ifndef AN_TESTS_UNIT_UNIT_H
#define AN_TESTS_UNIT_UNIT_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/pool.h"

/* main()'s status for a suite that cannot run here (tests/run-unit.sh: skipped). */
#define UNIT_SKIP 77

/* Whether the shell command <probe> succeeds; prints "skip: <why>" when it does not. */
static inline bool unit_can(const char *probe, const char *why)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s >/dev/null 2>&1", probe);
	if (system(cmd) == 0)
		return true;
	printf("skip: %s\n", why);
	return false;
}

/* The whole file at <path> (owned: pool_free it), NUL-terminated; its length in *<len>. */
static inline char *unit_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	ck_assert_int_ge(n, 0);
	rewind(f);
	char *buf = pool_malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/*
 * Runs every test of <s> (taken), each in a child of its own whatever CK_FORK
 * says (the abort tests, and tests that change limits, need one). Returns
 * EXIT_SUCCESS when all passed, else EXIT_FAILURE.
 */
static inline int unit_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif /* AN_TESTS_UNIT_UNIT_H */
