/*
 * Unit tests for tools/agentsnet/selftest.c's pure parts: the probe's lines (verdicts,
 * padding, malformed lines, a line cut short, duplicates, a probe that never
 * reported and so is OPEN), the host's amendments (the terminal's TIOCSTI
 * rule, a listener that took a connection, text that does not fit),
 * resolv.conf (scopes, junk, more nameservers than kept), the world-writable
 * walk on a scratch tree (depth limit, symlinks not followed, modes), the
 * probe's command line, and the probe binary's host-sockets on a scratch root
 * (build/<kind>/agentsnet-probe, which must be built first: `make all` does).
 * The whole command runs in the integration tests (tests/integ/containment.py),
 * against a real daemon and sandbox.
 */
#include "../../../../tools/agentsnet/ctl.c"
#include "../../../../tools/agentsnet/selftest.c"

#include <check.h>
#include <libgen.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "tests/unit/unit.h"

static struct selftest st;

static void fresh(void)
{
	selftest_init(&st);
}

static void feed(const char *out)
{
	fresh();
	size_t len = strlen(out);
	ck_assert_uint_lt(len, sizeof(st.out));
	memcpy(st.out, out, len + 1);
	st.out_len = len;
	results_parse(&st);
}

START_TEST(line_parse)
{
	struct selftest_result r;

	ck_assert_int_eq(result_parse("dns            closed: no answer", &r), 0);
	ck_assert_str_eq(r.name, "dns");
	ck_assert(!r.open);
	ck_assert_str_eq(r.text, "no answer");
	ck_assert_int_eq(result_parse("control-socket OPEN: connected to /x", &r), 0);
	ck_assert_str_eq(r.name, "control-socket");
	ck_assert(r.open);
	ck_assert_str_eq(r.text, "connected to /x");
	ck_assert_int_eq(result_parse("x closed: ", &r), 0);
	ck_assert_str_eq(r.text, "");
}
END_TEST

START_TEST(line_malformed)
{
	static const char *const bad[] = {
		"",
		" dns closed: x",
		"dns",
		"dns closed",
		"dns closed:x",
		"dns open: x",
		"dns Closed: x",
		"dns OPEN x",
		"==2==LeakSanitizer has encountered a fatal error.",
		"a-name-of-exactly-thirty-two-byt closed: x",
	};
	struct selftest_result r;

	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++)
		ck_assert_msg(result_parse(bad[i], &r) == -EINVAL, "accepted \"%s\"", bad[i]);
	/* 31 bytes is the longest name that fits. */
	ck_assert_int_eq(result_parse("a-name-of-exactly-thirty-one-by closed: x", &r), 0);
}
END_TEST

START_TEST(missing_probes_are_open)
{
	feed("dns closed: a\nvsock OPEN: b\n");
	ck_assert_uint_eq(st.results_n, AN_ARRAY_LEN(selftest_probes));
	ck_assert(!result_find(&st, "dns")->open);
	ck_assert(result_find(&st, "vsock")->open);
	for (size_t i = 0; i < AN_ARRAY_LEN(selftest_probes); i++) {
		struct selftest_result *r = result_find(&st, selftest_probes[i]);
		ck_assert_ptr_nonnull(r);
		if (strcmp(r->name, "dns") != 0 && strcmp(r->name, "vsock") != 0) {
			ck_assert(r->open);
			ck_assert_ptr_nonnull(strstr(r->text, "no verdict"));
		}
	}
}
END_TEST

START_TEST(cut_and_repeated_lines)
{
	/* A line without its newline was cut short: it counts for nothing. */
	feed("dns closed: a\ndns OPEN: again\njunk line\nterminal closed: half");
	ck_assert(!result_find(&st, "dns")->open);
	ck_assert_str_eq(result_find(&st, "dns")->text, "a");
	ck_assert(result_find(&st, "terminal")->open);
	/* A probe this selftest does not know (a newer probe binary) is kept. */
	feed("brand-new closed: fine\n");
	ck_assert_ptr_nonnull(result_find(&st, "brand-new"));
	ck_assert_uint_eq(st.results_n, AN_ARRAY_LEN(selftest_probes) + 1);
}
END_TEST

START_TEST(all_reported)
{
	char out[4096] = "";

	for (size_t i = 0; i < AN_ARRAY_LEN(selftest_probes); i++) {
		size_t len = strlen(out);
		snprintf(out + len, sizeof(out) - len, "%-14s closed: fine\n", selftest_probes[i]);
	}
	feed(out);
	ck_assert_uint_eq(st.results_n, AN_ARRAY_LEN(selftest_probes));
	for (uint32_t i = 0; i < st.results_n; i++)
		ck_assert_msg(!st.results[i].open, "%s", st.results[i].name);
}
END_TEST

START_TEST(terminal_rule)
{
	struct selftest_result r = { .name = "terminal" };

	/* Accepted, and nothing in the caller's queue: it was the sandbox's own terminal. */
	r.open = true;
	fmt(r.text, sizeof(r.text), "TIOCSTI accepted on 0, /dev/tty");
	terminal_verdict(&r, 0);
	ck_assert(!r.open);
	ck_assert_ptr_nonnull(strstr(r.text, "only the sandbox's own terminal"));
	/* The same, with a byte in the caller's queue: OPEN, whatever the probe saw. */
	r.open = true;
	fmt(r.text, sizeof(r.text), "TIOCSTI accepted on 0");
	terminal_verdict(&r, 2);
	ck_assert(r.open);
	ck_assert_ptr_nonnull(strstr(r.text, "2 byte(s) typed into the caller's terminal"));
	r.open = false;
	fmt(r.text, sizeof(r.text), "TIOCSTI: EPERM on 0");
	terminal_verdict(&r, 1);
	ck_assert(r.open);
	ck_assert_ptr_nonnull(strstr(r.text, "(inside: TIOCSTI: EPERM on 0)"));
	/* TIOCLINUX accepted stays OPEN: no terminal of the sandbox's is a console. */
	r.open = true;
	fmt(r.text, sizeof(r.text), "TIOCSTI accepted on 0; TIOCLINUX accepted on /dev/tty0");
	terminal_verdict(&r, 0);
	ck_assert(r.open);
	r.open = false;
	fmt(r.text, sizeof(r.text), "TIOCSTI: EPERM on 0");
	terminal_verdict(&r, 0);
	ck_assert(!r.open);
	ck_assert_str_eq(r.text, "TIOCSTI: EPERM on 0; nothing reached the caller's terminal");
}
END_TEST

START_TEST(amend_does_not_overflow)
{
	struct selftest_result r = { .name = "x" };

	memset(r.text, 'a', sizeof(r.text) - 1);
	r.text[sizeof(r.text) - 1] = '\0';
	result_amend(&r, true, "what the host saw");
	ck_assert(r.open);
	ck_assert_uint_eq(strlen(r.text), sizeof(r.text) - 1);
	ck_assert(strncmp(r.text, "what the host saw (inside: ", 27) == 0);
}
END_TEST

START_TEST(listener_connection_is_open)
{
	char why[256];
	struct sockaddr_in lo = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	feed("tcp-host closed: ECONNREFUSED\n");
	ck_assert_int_eq(listen_tcp(&st, (struct sockaddr *)&lo, sizeof(lo)), 0);
	ck_assert_uint_eq(st.tcp_n, 1);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	ck_assert_int_eq(getsockname(st.tcp[0].fd, (struct sockaddr *)&ss, &len), 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&ss, len), 0);
	host_checks(&st);
	close(c);
	struct selftest_result *r = result_find(&st, "tcp-host");
	ck_assert(r->open);
	ck_assert_ptr_nonnull(strstr(r->text, "took 1 connection(s)"));
	ck_assert_ptr_nonnull(strstr(st.tcp[0].addr, "127.0.0.1:"));
	fixtures_close(&st);
	(void)why;
}
END_TEST

START_TEST(resolv_conf)
{
	char path[] = "/tmp/an-selftest-resolv-XXXXXX";
	int fd = mkstemp(path);
	static const char text[] = "# a comment\n"
				   "search example.org\n"
				   "nameserver 10.0.0.2\n"
				   "nameserver   fe80::1%eth0\n"
				   "nameserver not-an-address\n"
				   "nameserver 2001:db8::53 # trailing\n"
				   "options edns0\n"
				   "nameserver 1.1.1.1\nnameserver 1.1.1.2\nnameserver 1.1.1.3\n"
				   "nameserver 1.1.1.4\nnameserver 1.1.1.5\nnameserver 1.1.1.6\n"
				   "nameserver 1.1.1.7\n";

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	fresh();
	nameservers_read(&st, path);
	unlink(path);
	ck_assert_uint_eq(st.nameservers_n, SELFTEST_NAMESERVERS_MAX);
	ck_assert_str_eq(st.nameservers[0], "10.0.0.2");
	ck_assert_str_eq(st.nameservers[1], "fe80::1");
	ck_assert_str_eq(st.nameservers[2], "2001:db8::53");
	ck_assert_str_eq(st.nameservers[7], "1.1.1.5");
	fresh();
	nameservers_read(&st, "/nonexistent/resolv.conf");
	ck_assert_uint_eq(st.nameservers_n, 0);
}
END_TEST

static void mkdir_mode(const char *root, const char *rel, mode_t mode)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	ck_assert_msg(mkdir(path, mode) == 0, "mkdir %s", path);
	ck_assert_int_eq(chmod(path, mode), 0);
}

static bool found(const char *root, const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (uint32_t i = 0; i < st.dirs_n; i++)
		if (strcmp(st.dirs[i].path, path) == 0)
			return true;
	return false;
}

START_TEST(walk_tree)
{
	static char path[PATH_MAX];
	char root[] = "/tmp/an-selftest-walk-XXXXXX", cmd[PATH_MAX + 16];

	ck_assert_ptr_nonnull(mkdtemp(root));
	mkdir_mode(root, "a", 0755);
	mkdir_mode(root, "a/open", 0777);
	mkdir_mode(root, "a/sticky", 01777);
	mkdir_mode(root, "a/closed", 0755);
	mkdir_mode(root, "a/closed/inner", 0757); /* others may write: found */
	mkdir_mode(root, "b", 0755);
	mkdir_mode(root, "b/2", 0755);
	mkdir_mode(root, "b/2/3", 0755);
	mkdir_mode(root, "b/2/3/4", 0755);
	mkdir_mode(root, "b/2/3/4/5", 0777); /* level 5: the deepest looked at */
	mkdir_mode(root, "b/2/3/4/5/6", 0777);
	snprintf(path, sizeof(path), "%s/link", root);
	ck_assert_int_eq(symlink("a/open", path), 0);
	fresh();
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	snprintf(path, sizeof(path), "%s", root);
	walk(&st, fd, path, strlen(root), 1);
	ck_assert_str_eq(path, root);
	ck_assert(found(root, "a/open"));
	ck_assert(found(root, "a/sticky"));
	ck_assert(found(root, "a/closed/inner"));
	ck_assert(found(root, "b/2/3/4/5"));
	ck_assert(!found(root, "b/2/3/4/5/6"));
	ck_assert(!found(root, "a/closed"));
	ck_assert(!found(root, "link"));
	ck_assert_uint_eq(st.dirs_n, 4);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(dirs_capped)
{
	char path[64];

	fresh();
	for (uint32_t i = 0; i < SELFTEST_DIRS_MAX + 3; i++) {
		snprintf(path, sizeof(path), "/x/%u", i);
		dir_add(&st, path);
		dir_add(&st, path); /* twice: kept once */
	}
	ck_assert_uint_eq(st.dirs_n, SELFTEST_DIRS_MAX);
	ck_assert_uint_eq(st.dirs_dropped, 6);
}
END_TEST

START_TEST(probe_command_line)
{
	fresh();
	memcpy(st.exe, "/bin/agentsnet", 15);
	memcpy(st.probe, "/bin/agentsnet-probe", 21);
	memcpy(st.socket_dir, "/run/agentsnet", 15);
	memcpy(st.control, "/run/agentsnet/control.sock", 28);
	for (uint32_t i = 0; i < SELFTEST_DIRS_MAX; i++) {
		snprintf(st.dirs[i].path, sizeof(st.dirs[i].path), "/d/%u", i);
		snprintf(st.dirs[i].marker, sizeof(st.dirs[i].marker), "/d/%u/m", i);
		st.dirs[i].marker_made = true;
	}
	st.dirs_n = SELFTEST_DIRS_MAX;
	for (uint32_t i = 0; i < SELFTEST_LISTENERS_MAX; i++)
		snprintf(st.tcp[i].addr, sizeof(st.tcp[i].addr), "10.0.0.%u:1", i);
	st.tcp_n = SELFTEST_LISTENERS_MAX;
	st.key_serial = 42;
	argv_build(&st);
	ck_assert_uint_lt(st.argc, SELFTEST_ARGS_MAX);
	ck_assert_ptr_null(st.argv[st.argc]);
	ck_assert_str_eq(st.argv[0], "/bin/agentsnet");
	ck_assert_str_eq(st.argv[1], "run");
	uint32_t dash = 0;
	while (dash < st.argc && strcmp(st.argv[dash], "--") != 0)
		dash++;
	ck_assert_str_eq(st.argv[dash + 1], SANDBOX_PROBE_PATH);
	/* Every probe option comes with its value. */
	for (uint32_t i = dash + 2; i < st.argc; i += 2) {
		ck_assert_msg(strncmp(st.argv[i], "--", 2) == 0, "%s", st.argv[i]);
		ck_assert_ptr_nonnull(st.argv[i + 1]);
	}
	ck_assert_str_eq(st.argv[st.argc - 1], "268435456");
}
END_TEST

START_TEST(host_sockets_expected)
{
	char out[4096] = "";
	bool listed = false;

	for (size_t i = 0; i < AN_ARRAY_LEN(selftest_probes); i++) {
		listed = listed || strcmp(selftest_probes[i], "host-sockets") == 0;
		if (strcmp(selftest_probes[i], "host-sockets") == 0)
			continue;
		size_t len = strlen(out);
		snprintf(out + len, sizeof(out) - len, "%-14s closed: fine\n", selftest_probes[i]);
	}
	ck_assert(listed);
	/* Every other probe closed, host-sockets silent: OPEN, no verdict. */
	feed(out);
	struct selftest_result *r = result_find(&st, "host-sockets");
	ck_assert_ptr_nonnull(r);
	ck_assert(r->open);
	ck_assert_ptr_nonnull(strstr(r->text, "no verdict"));
	feed("host-sockets   closed: 3 socket files seen (2 the sandbox's own), 9 directories "
	     "walked; connect: ECONNREFUSED (x1)\n");
	ck_assert(!result_find(&st, "host-sockets")->open);
}
END_TEST

/* A socket of <type> bound at <root>/<rel> (mode 0666), listening when a stream. */
static int sock_make(const char *root, const char *rel, int type)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt((size_t)snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/%s", root, rel),
			  sizeof(sun.sun_path));
	ck_assert_msg(bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0, "bind %s", sun.sun_path);
	ck_assert_int_eq(chmod(sun.sun_path, 0666), 0);
	if (type == SOCK_STREAM)
		ck_assert_int_eq(listen(fd, 8), 0);
	return fd;
}

/*
 * Runs the probe binary beside this test's build (build/<kind>/agentsnet-probe) on <root>,
 * walking at most <dirs> directories ("": the probe's own budget).
 */
static int probe_exec_dirs(const char *root, const char *dirs, char *out, size_t cap)
{
	char self[PATH_MAX], exe[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int p[2], status;

	ck_assert_int_gt(n, 0);
	self[n] = '\0';
	snprintf(exe, sizeof(exe), "%s/../../../../agentsnet-probe", dirname(self));
	ck_assert_msg(access(exe, X_OK) == 0, "%s: not built (make it first)", exe);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], 1);
		if (dirs[0] != '\0')
			execl(exe, exe, "--only", "host-sockets", "--bridge-pid", "1",
			      "--sockets-root", root, "--sockets-dirs", dirs, (char *)NULL);
		else
			execl(exe, exe, "--only", "host-sockets", "--bridge-pid", "1",
			      "--sockets-root", root, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	size_t len = 0;
	while (len + 1 < cap && (n = read(p[0], out + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "probe status %#x", status);
	return WEXITSTATUS(status);
}

static int probe_exec(const char *root, char *out, size_t cap)
{
	return probe_exec_dirs(root, "", out, cap);
}

/*
 * The probe binary's host-sockets on a scratch root: sockets that accept (a listener, a
 * datagram socket three levels down) are OPEN and named; a stale one (no listener) is not;
 * the sandbox's own egress socket is counted and skipped; /proc is not walked, nor a
 * symbolic link (to a listener outside the root). With only the stale one: closed.
 */
START_TEST(host_sockets_probe)
{
	char root[] = "/tmp/an-selftest-hs-XXXXXX", away[] = "/tmp/an-selftest-away-XXXXXX";
	char out[4096], path[PATH_MAX], cmd[2 * PATH_MAX];

	ck_assert_ptr_nonnull(mkdtemp(root));
	ck_assert_ptr_nonnull(mkdtemp(away));
	int far = sock_make(away, "far.sock", SOCK_STREAM);
	mkdir_mode(root, "a", 0755);
	mkdir_mode(root, "c", 0755);
	mkdir_mode(root, "c/d", 0755);
	mkdir_mode(root, "c/d/e", 0755);
	mkdir_mode(root, "proc", 0755);
	mkdir_mode(root, "run", 0755);
	mkdir_mode(root, "run/agentsnet", 0755);
	mkdir_mode(root, "run/agentsnet/sandbox", 0755);
	close(sock_make(root, "stale.sock", SOCK_STREAM)); /* its file stays: ECONNREFUSED */
	int fds[] = {
		sock_make(root, "a/listen.sock", SOCK_STREAM),
		sock_make(root, "c/d/e/dgram.sock", SOCK_DGRAM),
		sock_make(root, "proc/kernel.sock", SOCK_STREAM),
		sock_make(root, "run/agentsnet/sandbox/egress.sock", SOCK_STREAM),
	};
	snprintf(path, sizeof(path), "%s/link", root);
	ck_assert_int_eq(symlink(away, path), 0);
	ck_assert_int_eq(probe_exec(root, out, sizeof(out)), 1);
	ck_assert_msg(strncmp(out, "host-sockets    OPEN: 2 accepted a connection: ", 47) == 0,
		      "%s", out);
	ck_assert_msg(strstr(out, "/a/listen.sock") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "/c/d/e/dgram.sock") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "4 socket files seen (1 the sandbox's own)") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "far.sock") == NULL && strstr(out, "kernel") == NULL, "%s", out);
	for (size_t i = 0; i < AN_ARRAY_LEN(fds); i++)
		close(fds[i]);
	close(far);
	snprintf(cmd, sizeof(cmd), "rm -rf %s/a %s/c %s/proc %s/run %s/link %s", root, root, root,
		 root, root, away);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(probe_exec(root, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "host-sockets    closed: 1 socket files seen (0 the sandbox's "
				  "own), 1 directories walked; connect: ECONNREFUSED") == out,
		      "%s", out);
	/* A walk cut short cannot vouch for what it did not see: OPEN, never closed. */
	mkdir_mode(root, "x", 0755);
	mkdir_mode(root, "y", 0755);
	ck_assert_int_eq(probe_exec_dirs(root, "2", out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "host-sockets    OPEN: no verdict: the walk stopped before it "
				  "saw everything") == out,
		      "%s", out);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *selftest_suite(void)
{
	Suite *s = suite_create("selftest");
	TCase *t = tcase_create("verdicts");
	TCase *h = tcase_create("host");

	tcase_add_test(t, line_parse);
	tcase_add_test(t, line_malformed);
	tcase_add_test(t, missing_probes_are_open);
	tcase_add_test(t, cut_and_repeated_lines);
	tcase_add_test(t, all_reported);
	tcase_add_test(t, terminal_rule);
	tcase_add_test(t, amend_does_not_overflow);
	tcase_add_test(t, host_sockets_expected);
	suite_add_tcase(s, t);
	tcase_add_test(h, listener_connection_is_open);
	tcase_add_test(h, resolv_conf);
	tcase_add_test(h, walk_tree);
	tcase_add_test(h, dirs_capped);
	tcase_add_test(h, probe_command_line);
	tcase_add_test(h, host_sockets_probe);
	suite_add_tcase(s, h);
	return s;
}

int main(void)
{
	return unit_run(selftest_suite());
}
