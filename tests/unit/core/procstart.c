/*
 * Unit tests for core/procstart.c: a live process's start time, the same read
 * twice and unchanged by a command name made to look like the fields after it
 * (spaces, parentheses, a state letter); a zombie and a reaped process are
 * gone (-ESRCH).
 */
#include "../../../core/procstart.c"

#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include "tests/unit/unit.h"

START_TEST(own_start)
{
	uint64_t first = 0, again = 0;

	ck_assert_int_eq(proc_start_ticks(getpid(), &first), 0);
	ck_assert_int_eq(proc_start_ticks(getpid(), &again), 0);
	ck_assert_uint_eq(first, again);
	ck_assert_int_eq(proc_start_ticks(0, &again), 0); /* /proc/self */
	ck_assert_uint_eq(first, again);
}
END_TEST

/* A child named ") Z 1 2 (" is alive, started no earlier than its parent, its start unchanged. */
START_TEST(name_cannot_fool)
{
	uint64_t parent = 0, before = 0, after = 0;
	int ready[2];
	char byte = 0;

	ck_assert_int_eq(pipe(ready), 0);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		close(ready[0]);
		(void)prctl(PR_SET_NAME, ") Z 1 2 (", 0, 0, 0);
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		alarm(30);
		pause();
		_exit(0);
	}
	close(ready[1]);
	ck_assert_int_eq(read(ready[0], &byte, 1), 1);
	close(ready[0]);
	ck_assert_int_eq(proc_start_ticks(getpid(), &parent), 0);
	ck_assert_int_eq(proc_start_ticks(child, &before), 0);
	ck_assert_int_eq(proc_start_ticks(child, &after), 0);
	ck_assert_uint_eq(before, after);
	ck_assert_uint_ge(before, parent);
	ck_assert_int_eq(kill(child, SIGKILL), 0);
	/* Killed, not yet reaped: a zombie, gone all the same. */
	for (int i = 0; i < 200 && proc_start_ticks(child, &after) == 0; i++)
		usleep(10000);
	ck_assert_int_eq(proc_start_ticks(child, &after), -ESRCH);
	ck_assert_int_eq(waitpid(child, NULL, 0), child);
	ck_assert_int_eq(proc_start_ticks(child, &after), -ESRCH);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("procstart");
	TCase *tc = tcase_create("procstart");
	tcase_add_test(tc, own_start);
	tcase_add_test(tc, name_cannot_fool);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
