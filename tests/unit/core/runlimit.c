/*
 * Unit tests for core/runlimit.c's records of the cgroups it made: a record
 * is read back only when every directory it names is the daemon's making
 * under the hierarchies' root (".../agentsnet/<id>.<pid>", no ".."), since
 * what it names is removed as root; anything else is refused whole. And
 * what a daemon that may not make cgroups answers: unsupported, not a
 * failure (make_and_enter as uid 65534, on the host's real hierarchies).
 */
#include "../../../core/runlimit.c"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <unistd.h>

#include "tests/unit/unit.h"

#define ROOT "/sys/fs/cgroup"
#define NAME "run-1.42"

static char record[] = "/tmp/an-runlimit-record-XXXXXX";

static int read_text(const char *text, struct cgroup_sandbox *cg)
{
	FILE *f = fopen(record, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	memset(cg, 0, sizeof(*cg));
	return record_read(record, ROOT, NAME, cg);
}

static void setup(void)
{
	int fd = mkstemp(record);
	ck_assert_int_ge(fd, 0);
	close(fd);
}

static void teardown(void)
{
	unlink(record);
	memcpy(record + strlen(record) - 6, "XXXXXX", 6);
}

START_TEST(record_v1_and_v2)
{
	struct cgroup_sandbox cg;

	ck_assert_int_eq(read_text("v1\n" ROOT "/pids/agentsnet/" NAME "\n" ROOT
				   "/memory/a/b/agentsnet/" NAME "\n",
				   &cg),
			 0);
	ck_assert_int_eq(cg.version, 1);
	ck_assert_str_eq(cg.pids_dir, ROOT "/pids/agentsnet/" NAME);
	ck_assert_str_eq(cg.memory_dir, ROOT "/memory/a/b/agentsnet/" NAME);
	ck_assert_int_eq(read_text("v2\n" ROOT "/user.slice/agentsnet/" NAME "\n\n", &cg), 0);
	ck_assert_int_eq(cg.version, 2);
	ck_assert_str_eq(cg.memory_dir, "");
	/* One controller only (a v1 host with no memory hierarchy). */
	ck_assert_int_eq(read_text("v1\n" ROOT "/pids/agentsnet/" NAME "\n\n", &cg), 0);
}
END_TEST

/* Each one names something the daemon did not make for NAME: refused, <cg> untouched. */
START_TEST(record_refused)
{
	static const char *const bad[] = {
		"v1\n/etc/agentsnet/" NAME "\n\n",                    /* outside the root */
		"v1\n/sys/fs/cgroupX/agentsnet/" NAME "\n\n",         /* a sibling of it */
		"v1\n" ROOT "/pids/agentsnet/run-1.43\n\n",           /* another run's */
		"v1\n" ROOT "/pids/" NAME "\n\n",                     /* not under agentsnet/ */
		"v1\n" ROOT "/pids/../../etc/agentsnet/" NAME "\n\n", /* a way out */
		"v1\n" ROOT "/pids/agentsnet/" NAME "/../../x/agentsnet/" NAME "\n\n",
		"v3\n" ROOT "/pids/agentsnet/" NAME "\n\n",       /* no such version */
		"v1\n" ROOT "/pids/agentsnet/" NAME "\n",         /* cut short */
		"v1\n" ROOT "/pids/agentsnet/" NAME "\n\nmore\n", /* a line too many */
		"",
	};
	struct cgroup_sandbox cg;

	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		ck_assert_msg(read_text(bad[i], &cg) == -EINVAL, "accepted: %s", bad[i]);
		ck_assert_int_eq(cg.version, 0);
	}
}
END_TEST

START_TEST(record_is_not_followed)
{
	char link[] = "/tmp/an-runlimit-link-XXXXXX";
	struct cgroup_sandbox cg;

	ck_assert_int_eq(read_text("v1\n" ROOT "/pids/agentsnet/" NAME "\n\n", &cg), 0);
	int fd = mkstemp(link);
	ck_assert_int_ge(fd, 0);
	close(fd);
	unlink(link);
	ck_assert_int_eq(symlink(record, link), 0);
	ck_assert_int_eq(record_read(link, ROOT, NAME, &cg), -ELOOP);
	unlink(link);
}
END_TEST

/*
 * A daemon that may not make a cgroup where the hierarchies are (not root,
 * nothing delegated: mkdir's EACCES or EPERM; none mounted: ENOENT) answers
 * unsupported, the class the caller falls back on, never internal nor a
 * refusal's code. Run as nobody (dropped in the test's own process, which
 * check forks); as any user other than root it runs as that user.
 */
START_TEST(cannot_make_here_is_unsupported)
{
	struct runlimits l = { .root = ROOT };
	struct runlimit r = { .id = "unit-cannot" };
	char err[256];

	if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
			       setresuid(65534, 65534, 65534) != 0)) {
		unit_skip("root here cannot become nobody (a user namespace mapping only root)");
		return;
	}
	int rc = make_and_enter(&l, &r, getpid(), -1, 8, 0, err, sizeof(err));
	if (rc == 0)
		(void)cgroup_remove_now(&r.cg); /* nobody may make one here: leave nothing */
	ck_assert_msg(rc == -EOPNOTSUPP, "make_and_enter: %d (%s)", rc, err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("runlimit");
	TCase *tc = tcase_create("records");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, record_v1_and_v2);
	tcase_add_test(tc, record_refused);
	tcase_add_test(tc, record_is_not_followed);
	suite_add_tcase(s, tc);
	tc = tcase_create("cannot");
	tcase_add_test(tc, cannot_make_here_is_unsupported);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
