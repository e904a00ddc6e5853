/*
 * What every libcheck suite's main() shares: run the suite, turn the result
 * into an exit status (tests/run-unit.sh reads only that).
 */
#ifndef AN_TESTS_UNIT_UNIT_H
#define AN_TESTS_UNIT_UNIT_H

#include <check.h>
#include <stdlib.h>

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
