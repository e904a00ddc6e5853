/*
 * Unit tests for tools/sandbox.c: the pure helpers, then real sandboxes.
 *
 * The namespace tests build a fake daemon layout in a temporary socket
 * directory (outside /run, as a test daemon's is): control.sock, this
 * sandbox's directory with a listening egress.sock and sandbox.conf, and
 * another sandbox's directory with its own socket. The "bridge" is a
 * two-line shell script (written at run time, in a directory of its own)
 * that execs its command, and the command is this test binary again with
 * --inside: it checks from within that it is PID 1, sees only `lo` (up), can
 * reach its egress socket but not the control socket nor the other sandbox,
 * sees a fresh /run, a private /tmp, a read-only sandbox directory,
 * holds no capability and cannot unmount the masks; without a user namespace
 * it runs as nobody and cannot write a root-owned 0644 file. Each check has its own
 * exit code, so a failure says which one. They run as root, as root in a user
 * namespace, and as nobody in a user namespace, each when the host allows it.
 * A user namespace of the test's own with user.max_user_namespaces = 0 stands
 * for a host that forbids them: the sysctl check and clone()'s ENOSPC must both
 * say so. Signals: a SIGTERM sent to the supervisor reaches the agent; an agent that
 * ignores it is killed after SANDBOX_TERM_GRACE_MS.
 */
#include "../../../tools/sandbox.c"

#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/un.h>
#include "tests/unit/unit.h"

static const char *self_exe;
/* The run's own directory under /var/tmp: every layout lives in it, and main
 * removes it whole, so a failed test (which ends before layout_remove) leaves
 * nothing behind either. */
static const char *run_dir;

/* ---- Pure helpers. ---- */

START_TEST(path_under)
{
	ck_assert(sandbox_path_under("/run", "/run"));
	ck_assert(sandbox_path_under("/run/agentsnet", "/run"));
	ck_assert(sandbox_path_under("/run/agentsnet", "/run/"));
	ck_assert(sandbox_path_under("/run/a/b/c", "/run/a"));
	ck_assert(!sandbox_path_under("/runner", "/run"));
	ck_assert(!sandbox_path_under("/ru", "/run"));
	ck_assert(!sandbox_path_under("/var/run/x", "/run"));
	ck_assert(sandbox_path_under("/anything", "/"));
	ck_assert(!sandbox_path_under("/run", "/run/agentsnet"));
}
END_TEST

START_TEST(socket_dir_mask)
{
	ck_assert(!sandbox_socket_dir_needs_mask("/run/agentsnet", false));
	ck_assert(!sandbox_socket_dir_needs_mask("/run", true));
	ck_assert(sandbox_socket_dir_needs_mask("/tmp/an-test", false));
	ck_assert(sandbox_socket_dir_needs_mask("/runx/agentsnet", false));
	ck_assert(sandbox_socket_dir_needs_mask("/var/run/agentsnet", false));
	ck_assert(!sandbox_socket_dir_needs_mask("/var/run/agentsnet", true));
	ck_assert(sandbox_socket_dir_needs_mask("/var/runner", true));
}
END_TEST

START_TEST(user_parse)
{
	struct sandbox_user u;
	char err[256];

	ck_assert_int_eq(sandbox_user_parse("nobody", &u, err, sizeof(err)), 0);
	ck_assert_uint_eq(u.uid, 65534);
	ck_assert_uint_ne(u.gid, 0);
	ck_assert_uint_ge(u.group_count, 1);
	for (size_t i = 0; i < u.group_count; i++)
		ck_assert_uint_ne(u.groups[i], 0);
	ck_assert_int_eq(sandbox_user_parse("4242:4243", &u, err, sizeof(err)), 0);
	ck_assert_uint_eq(u.uid, 4242);
	ck_assert_uint_eq(u.gid, 4243);
	ck_assert_uint_eq(u.group_count, 1);
	ck_assert_uint_eq(u.groups[0], 4243);
	ck_assert_int_eq(sandbox_user_parse("nobody:4243", &u, err, sizeof(err)), 0);
	ck_assert_uint_eq(u.uid, 65534);
	ck_assert_uint_eq(u.gid, 4243);
	ck_assert_int_eq(sandbox_user_parse("root", &u, err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "never runs as uid 0"));
	ck_assert_int_eq(sandbox_user_parse("0:4243", &u, err, sizeof(err)), -EPERM);
	ck_assert_int_eq(sandbox_user_parse("nobody:0", &u, err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "gid 0"));
	ck_assert_int_eq(sandbox_user_parse("nobody:root", &u, err, sizeof(err)), -EPERM);
	ck_assert_int_eq(sandbox_user_parse("4242", &u, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "no passwd entry"));
	ck_assert_int_eq(sandbox_user_parse("an-no-such-user", &u, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "no such user"));
	ck_assert_int_eq(sandbox_user_parse("nobody:an-no-such-group", &u, err, sizeof(err)),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "no such group"));
	ck_assert_int_eq(sandbox_user_parse("4294967295:1", &u, err, sizeof(err)), -ENOENT);
	const char *malformed[] = { "", ":", ":4243", "nobody:" };
	for (size_t i = 0; i < AN_ARRAY_LEN(malformed); i++)
		ck_assert_int_eq(sandbox_user_parse(malformed[i], &u, err, sizeof(err)), -EINVAL);
}
END_TEST

static struct sandbox_spec argv_spec(char **cmd)
{
	return (struct sandbox_spec){ .bridge = "/b", .cmd = cmd, .ingress_fd = -1 };
}

START_TEST(bridge_argv)
{
	char *cmd[] = { "curl", "-v", NULL };
	const char *argv[16];
	struct sandbox_spec s = argv_spec(cmd);

	ck_assert_int_eq(sandbox_bridge_argv(&s, argv, AN_ARRAY_LEN(argv)), 8);
	/* The bridge and the CA are exec'd and read at their in-sandbox paths. */
	ck_assert_str_eq(argv[0], SANDBOX_BRIDGE_PATH);
	ck_assert_str_eq(argv[1], "--egress");
	ck_assert_str_eq(argv[2], "/run/agentsnet/sandbox/egress.sock");
	ck_assert_str_eq(argv[3], "--ingress");
	ck_assert_str_eq(argv[4], "/run/agentsnet/sandbox/ingress.sock");
	ck_assert_str_eq(argv[5], "--");
	ck_assert_str_eq(argv[6], "curl");
	ck_assert_str_eq(argv[7], "-v");
	ck_assert_ptr_null(argv[8]);
	s.ca_path = "/ca.pem";
	s.public_url = "https://x/callbacks/id";
	ck_assert_int_eq(sandbox_bridge_argv(&s, argv, AN_ARRAY_LEN(argv)), 12);
	ck_assert_str_eq(argv[5], "--ca");
	ck_assert_str_eq(argv[6], SANDBOX_CA_PATH);
	ck_assert_str_eq(argv[7], "--public-url");
	ck_assert_str_eq(argv[8], "https://x/callbacks/id");
	ck_assert_str_eq(argv[9], "--");
	ck_assert_ptr_null(argv[12]);
}
END_TEST

/* The vector needs its words plus the NULL: cap n + 1 fits, cap n does not. */
START_TEST(bridge_argv_cap)
{
	char *cmd[] = { "sh", NULL };
	const char *argv[16];
	struct sandbox_spec s = argv_spec(cmd);

	s.ca_path = "/ca";
	ck_assert_int_eq(sandbox_bridge_argv(&s, argv, 10), 9);
	ck_assert_ptr_null(argv[9]);
	ck_assert_int_eq(sandbox_bridge_argv(&s, argv, 9), -E2BIG);
	ck_assert_int_eq(sandbox_bridge_argv(&s, argv, 3), -E2BIG);
}
END_TEST

START_TEST(signals)
{
	sigset_t old, now;

	signal(SIGCHLD, SIG_IGN);
	sandbox_signals_block(&old);
	ck_assert_int_eq(sigprocmask(SIG_BLOCK, NULL, &now), 0);
	ck_assert_int_eq(sigismember(&now, SIGINT), 1);
	ck_assert_int_eq(sigismember(&now, SIGTERM), 1);
	ck_assert_int_eq(sigismember(&now, SIGHUP), 1);
	ck_assert_int_eq(sigismember(&now, SIGQUIT), 1);
	ck_assert_int_eq(sigismember(&now, SIGCHLD), 1);
	ck_assert_int_eq(sigismember(&old, SIGTERM), 0);
	ck_assert(!ignored(SIGCHLD));
	ck_assert_int_eq(sandbox_signal_pending(), 0);
	signal(SIGHUP, SIG_IGN);
	kill(getpid(), SIGHUP);
	ck_assert_int_eq(sandbox_signal_pending(), 0); /* ignored by our caller: not ours */
	kill(getpid(), SIGTERM);
	ck_assert_int_eq(sandbox_signal_pending(), SIGTERM);
}
END_TEST

START_TEST(sysctls)
{
	char err[512] = "";
	long v = 0;

	ck_assert_int_eq(read_sysctl("/proc/sys/kernel/cap_last_cap", &v), 0);
	ck_assert_int_gt(v, 30);
	ck_assert_int_eq(read_sysctl("/proc/sys/no/such", &v), -ENOENT);
	int ret = sandbox_userns_allowed(err, sizeof(err));
	if (ret != 0)
		ck_assert_ptr_nonnull(strstr(err, "not allowed on this host"));
	else
		ck_assert_str_eq(err, "");
}
END_TEST

/*
 * Enters a user namespace of our own whose user.max_user_namespaces is 0: any
 * further user namespace is then refused with ENOSPC, as on a host that
 * forbids them. Returns false (skip) when the host allows none at all.
 */
static bool forbid_userns(void)
{
	char err[512], map[64];

	if (sandbox_userns_allowed(err, sizeof(err)) != 0) {
		fprintf(stderr, "skip: %s\n", err);
		return false;
	}
	uid_t uid = geteuid();
	ck_assert_int_eq(unshare(CLONE_NEWUSER), 0);
	snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)uid);
	ck_assert_int_eq(write_proc_file("/proc/self/uid_map", map), 0);
	ck_assert_int_eq(write_proc_file("/proc/sys/user/max_user_namespaces", "0\n"), 0);
	return true;
}

START_TEST(userns_forbidden_by_sysctl)
{
	char err[512] = "";

	if (!forbid_userns())
		return;
	ck_assert_int_eq(sandbox_userns_allowed(err, sizeof(err)), -EPERM);
	ck_assert_str_eq(err, "unprivileged user namespaces are not allowed on this host "
			      "(/proc/sys/user/max_user_namespaces is 0): run agentsnet run as "
			      "root, or allow them with: sysctl -w user.max_user_namespaces=10000");
}
END_TEST

/* ---- A fake daemon layout. ---- */

struct layout {
	char socket_dir[64];
	char bin_dir[64];
	char dir[128];   /* socket_dir/sandboxes/box */
	char other[128]; /* socket_dir/sandboxes/other */
	char bridge[128];
	int fds[3]; /* listening: control, egress, the other's egress */
};

static int listen_at(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(chmod(path, 0777), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	return fd;
}

static void mkdir_open(const char *path)
{
	ck_assert_int_eq(mkdir(path, 0755), 0);
	ck_assert_int_eq(chmod(path, 0755), 0);
}

static void layout_make(struct layout *l)
{
	static const char script[] = "#!/bin/sh\n"
				     "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\n"
				     "shift\nexec \"$@\"\n";
	char path[192];

	/* Under /var/tmp: the sandbox's /tmp is a private one, and the tests pass
	 * files both ways through bin_dir. */
	snprintf(l->socket_dir, sizeof(l->socket_dir), "%s/sock-XXXXXX", run_dir);
	snprintf(l->bin_dir, sizeof(l->bin_dir), "%s/bin-XXXXXX", run_dir);
	ck_assert_ptr_nonnull(mkdtemp(l->socket_dir));
	ck_assert_ptr_nonnull(mkdtemp(l->bin_dir));
	ck_assert_int_eq(chmod(l->socket_dir, 0755), 0);
	/* 01777: the agent (nobody, without a user namespace) leaves files here. */
	ck_assert_int_eq(chmod(l->bin_dir, 01777), 0);
	snprintf(path, sizeof(path), "%s/sandboxes", l->socket_dir);
	mkdir_open(path);
	snprintf(l->dir, sizeof(l->dir), "%s/sandboxes/box", l->socket_dir);
	snprintf(l->other, sizeof(l->other), "%s/sandboxes/other", l->socket_dir);
	mkdir_open(l->dir);
	mkdir_open(l->other);
	snprintf(path, sizeof(path), "%s/control.sock", l->socket_dir);
	l->fds[0] = listen_at(path);
	snprintf(path, sizeof(path), "%s/egress.sock", l->dir);
	l->fds[1] = listen_at(path);
	snprintf(path, sizeof(path), "%s/egress.sock", l->other);
	l->fds[2] = listen_at(path);
	snprintf(path, sizeof(path), "%s/sandbox.conf", l->dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("profile default\n", f);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(l->bridge, sizeof(l->bridge), "%s/bridge.sh", l->bin_dir);
	f = fopen(l->bridge, "w");
	ck_assert_ptr_nonnull(f);
	fputs(script, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(l->bridge, 0755), 0);
	snprintf(path, sizeof(path), "%s/rootfile", l->bin_dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("root's\n", f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0644), 0);
}

static void layout_remove(struct layout *l)
{
	char cmd[256];
	for (size_t i = 0; i < AN_ARRAY_LEN(l->fds); i++)
		close(l->fds[i]);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", l->socket_dir, l->bin_dir);
	ck_assert_int_eq(system(cmd), 0);
}

static struct sandbox_spec layout_spec(const struct layout *l, char **cmd, bool userns)
{
	struct sandbox_spec s = {
		.dir = l->dir,
		.socket_dir = l->socket_dir,
		.bridge = l->bridge,
		.cwd = "/tmp",
		.cmd = cmd,
		.userns = userns,
		.user = { .uid = getuid(), .gid = getgid() },
		.ingress_fd = -1,
	};
	char err[256];
	if (!userns)
		ck_assert_int_eq(
		    sandbox_user_parse(SANDBOX_DEFAULT_USER, &s.user, err, sizeof(err)), 0);
	return s;
}

/* Whether this host lets us build the sandbox in this mode; prints why not. */
static bool can_run(bool userns)
{
	char err[512];

	if (!userns && sandbox_needs_userns()) {
		fprintf(stderr, "skip: not privileged (no CAP_SYS_ADMIN)\n");
		return false;
	}
	if (userns && sandbox_userns_allowed(err, sizeof(err)) != 0) {
		fprintf(stderr, "skip: %s\n", err);
		return false;
	}
	return true;
}

/* Runs <cmd> in a sandbox of <l>; returns the wait status. */
static int run_in(const struct layout *l, char **cmd, bool userns)
{
	struct sandbox_spec s = layout_spec(l, cmd, userns);
	struct sandbox sb;
	char err[SANDBOX_ERROR_BYTES];
	int wstatus = -1;

	sandbox_signals_block(&s.child_mask);
	int ret = sandbox_start(&s, &sb, err, sizeof(err));
	if (ret != 0)
		fprintf(stderr, "sandbox_start: %s\n", err);
	ck_assert_int_eq(ret, 0);
	ck_assert_int_gt(sb.pid, 0);
	ck_assert_int_eq(sandbox_wait(&sb, &wstatus), 0);
	ck_assert_int_eq(sb.alive_fd, -1);
	ck_assert_int_eq(kill(sb.pid, 0), -1); /* reaped */
	return wstatus;
}

static void check_inside(bool userns)
{
	struct layout l;

	layout_make(&l);
	char uid[16];
	snprintf(uid, sizeof(uid), "%u",
		 userns ? 0U : (unsigned)layout_spec(&l, NULL, userns).user.uid);
	char *cmd[] = { (char *)self_exe, "--inside", l.socket_dir, uid, l.bin_dir, NULL };
	int st = run_in(&l, cmd, userns);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	layout_remove(&l);
}

START_TEST(inside_as_root)
{
	if (can_run(false))
		check_inside(false);
}
END_TEST

START_TEST(inside_as_root_in_userns)
{
	if (can_run(true))
		check_inside(true);
}
END_TEST

/* An unprivileged user: a child that drops to nobody first. */
START_TEST(inside_as_nobody)
{
	if (geteuid() != 0 || !can_run(true)) {
		fprintf(stderr, "skip: needs root to become nobody, and user namespaces\n");
		return;
	}
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
		    setresuid(65534, 65534, 65534) != 0)
			_exit(90);
		ck_assert(sandbox_needs_userns());
		check_inside(true);
		_exit(0);
	}
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

START_TEST(exit_status_passes)
{
	struct layout l;

	if (!can_run(sandbox_needs_userns()))
		return;
	layout_make(&l);
	char *cmd[] = { "/bin/sh", "-c", "exit 7", NULL };
	int st = run_in(&l, cmd, sandbox_needs_userns());
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 7);
	layout_remove(&l);
}
END_TEST

/* Setup errors come back with their step and errno; nothing keeps running. */
START_TEST(setup_errors)
{
	struct layout l;
	struct sandbox sb;
	char err[SANDBOX_ERROR_BYTES], hidden[192];
	bool userns = sandbox_needs_userns();

	if (!can_run(userns))
		return;
	layout_make(&l);
	char *cmd[] = { "/bin/true", NULL };
	struct sandbox_spec s = layout_spec(&l, cmd, userns);
	sandbox_signals_block(&s.child_mask);
	/* A bridge that does not exist is named; one in a masked directory is
	 * fine: it is opened before the mounts and bound into /run/agentsnet. */
	snprintf(hidden, sizeof(hidden), "%s/no-such-bridge", l.socket_dir);
	s.bridge = hidden;
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "no-such-bridge"));
	s.bridge = l.bridge;
	s.dir = "/tmp/an-no-such-sandbox-dir";
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "open /tmp/an-no-such-sandbox-dir"));
	s.dir = l.dir;
	s.ca_path = "/tmp/an-no-such-ca.pem";
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "an-no-such-ca.pem"));
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* every child reaped */
	ck_assert_int_eq(errno, ECHILD);
	layout_remove(&l);
}
END_TEST

/* Waits (10 s at most) for the agent to say its SIGTERM handler is set. */
static void wait_ready(const char *path)
{
	for (int i = 0; i < 1000 && access(path, F_OK) != 0; i++)
		usleep(10 * 1000);
	ck_assert_int_eq(access(path, F_OK), 0);
}

/* clone() itself refused: said plainly, and nothing runs without isolation. */
START_TEST(userns_clone_refused)
{
	struct layout l;
	struct sandbox sb;
	char err[SANDBOX_ERROR_BYTES];

	if (!forbid_userns())
		return;
	layout_make(&l);
	char *cmd[] = { "/bin/true", NULL };
	struct sandbox_spec s = layout_spec(&l, cmd, true);
	sandbox_signals_block(&s.child_mask);
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(err, "unprivileged user namespaces are not allowed on this "
					  "host (clone(CLONE_NEWUSER): No space left on device)"));
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	layout_remove(&l);
}
END_TEST

/*
 * Makes <l> and starts this binary in a sandbox of it as `<mode> READY`
 * (--term or --ignore-term); returns once the agent's SIGTERM handling is set.
 */
static void start_helper(struct layout *l, const char *mode, struct sandbox *sb)
{
	static char ready[192];
	char err[SANDBOX_ERROR_BYTES];
	bool userns = sandbox_needs_userns();

	layout_make(l);
	snprintf(ready, sizeof(ready), "%s/ready", l->bin_dir);
	static char *cmd[4];
	cmd[0] = (char *)self_exe;
	cmd[1] = (char *)mode;
	cmd[2] = ready;
	cmd[3] = NULL;
	struct sandbox_spec s = layout_spec(l, cmd, userns);
	sandbox_signals_block(&s.child_mask);
	ck_assert_int_eq(sandbox_start(&s, sb, err, sizeof(err)), 0);
	wait_ready(ready);
}

/* A SIGTERM for `agentsnet run` reaches the agent, which exits its own way. */
START_TEST(sigterm_forwarded)
{
	struct layout l;
	struct sandbox sb;
	int st = -1;

	if (!can_run(sandbox_needs_userns()))
		return;
	start_helper(&l, "--term", &sb);
	kill(getpid(), SIGTERM);
	ck_assert_int_eq(sandbox_wait(&sb, &st), 0);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 42);
	layout_remove(&l);
}
END_TEST

/* An agent that ignores SIGTERM is killed once the grace period is over. */
START_TEST(sigterm_grace_then_kill)
{
	struct layout l;
	struct sandbox sb;
	struct timespec t0, t1;
	int st = -1;

	if (!can_run(sandbox_needs_userns()))
		return;
	start_helper(&l, "--ignore-term", &sb);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	kill(getpid(), SIGTERM);
	ck_assert_int_eq(sandbox_wait(&sb, &st), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ck_assert(WIFSIGNALED(st));
	ck_assert_int_eq(WTERMSIG(st), SIGKILL);
	long long ms = (t1.tv_sec - t0.tv_sec) * 1000LL + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	ck_assert_int_ge(ms, SANDBOX_TERM_GRACE_MS - 50);
	ck_assert_int_lt(ms, SANDBOX_TERM_GRACE_MS + 5000);
	layout_remove(&l);
}
END_TEST

/* ---- The checks made inside the sandbox (this binary, as PID 1). ---- */

static int connect_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int ret = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
	close(fd);
	return ret;
}

static int connect_tcp(const char *ip, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	inet_pton(AF_INET, ip, &sa.sin_addr);
	int ret = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
	close(fd);
	return ret;
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	if (d == NULL)
		return -errno;
	while ((de = readdir(d)) != NULL)
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

/* Interfaces in /proc/net/dev (two header lines, then one per interface). */
static int interfaces(void)
{
	char line[256];
	int n = 0;
	FILE *f = fopen("/proc/net/dev", "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		n++;
	fclose(f);
	return n - 2;
}

static bool no_caps(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	if (syscall(SYS_capget, &hdr, d) != 0)
		return false;
	return (d[0].effective | d[1].effective | d[0].permitted | d[1].permitted) == 0 &&
	       prctl(PR_CAPBSET_READ, (unsigned long)CAP_SYS_ADMIN, 0UL, 0UL, 0UL) == 0 &&
	       prctl(PR_GET_NO_NEW_PRIVS, 0UL, 0UL, 0UL, 0UL) == 1;
}

/* <uid>: who the agent should be, as seen inside (0 in a user namespace). */
static int inside_main(const char *socket_dir, const char *uid, const char *bin_dir)
{
	char path[256], cwd[256];

	if (getpid() != 1)
		return 10;
	bool userns = strcmp(uid, "0") == 0;
	if (getuid() != (uid_t)strtoul(uid, NULL, 10) || geteuid() != getuid())
		return 25;
	snprintf(path, sizeof(path), "%s/rootfile", bin_dir);
	if (!userns && (open(path, O_WRONLY | O_APPEND) != -1 || errno != EACCES))
		return 26; /* root's file, mode 0644: not the agent's to write */
	if (connect_unix(SANDBOX_EGRESS_SOCKET) != 0)
		return 11;
	snprintf(path, sizeof(path), "%s/control.sock", socket_dir);
	if (connect_unix(path) != -ENOENT)
		return 12;
	snprintf(path, sizeof(path), "%s/sandboxes/other/egress.sock", socket_dir);
	if (connect_unix(path) != -ENOENT)
		return 13;
	if (count_entries(socket_dir) != 0)
		return 14;
	if (count_entries("/run") != 2 || count_entries("/run/agentsnet") != 2)
		return 15; /* agentsnet and lock; sandbox and bridge (no CA here) */
	if (count_entries("/tmp/.X11-unix") > 0 || count_entries("/tmp") != 0)
		return 16; /* a private, empty /tmp: no host socket in it */
	if (open("/run/agentsnet/sandbox/x", O_CREAT | O_WRONLY, 0600) != -1 || errno != EROFS)
		return 17;
	if (unlink("/run/agentsnet/sandbox/sandbox.conf") != -1 || errno != EROFS)
		return 18;
	if (interfaces() != 1 || connect_tcp("127.0.0.1", 1) != -ECONNREFUSED)
		return 19; /* lo only, and up */
	if (connect_tcp("10.255.255.1", 80) != -ENETUNREACH)
		return 20;
	if (!no_caps())
		return 21;
	if (umount2("/run", MNT_DETACH) != -1 || errno != EPERM)
		return 22;
	if (getcwd(cwd, sizeof(cwd)) == NULL || strcmp(cwd, "/tmp") != 0)
		return 23;
	if (count_entries("/proc") < 0 || access("/proc/2", F_OK) == 0)
		return 24; /* a fresh /proc: nobody but us */
	return 0;
}

static void on_term(int sig)
{
	(void)sig;
	_exit(42);
}

/* --inside SOCKET_DIR UID BIN_DIR, or --term/--ignore-term READY_FILE (created once the handler is set). */
static int helper_main(int argc, char **argv)
{
	if (strcmp(argv[1], "--inside") == 0 && argc == 5)
		_exit(inside_main(argv[2], argv[3], argv[4]));
	if (argc != 3)
		_exit(51);
	if (strcmp(argv[1], "--term") == 0)
		signal(SIGTERM, on_term);
	else
		signal(SIGTERM, SIG_IGN);
	int fd = open(argv[2], O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
	if (fd == -1)
		_exit(52);
	close(fd);
	for (int i = 0; i < 300; i++)
		usleep(100 * 1000);
	_exit(50);
}

static Suite *sandbox_suite(void)
{
	Suite *s = suite_create("sandbox");
	TCase *t = tcase_create("helpers");
	TCase *n = tcase_create("namespaces");

	tcase_add_test(t, path_under);
	tcase_add_test(t, socket_dir_mask);
	tcase_add_test(t, user_parse);
	tcase_add_test(t, bridge_argv);
	tcase_add_test(t, bridge_argv_cap);
	tcase_add_test(t, signals);
	tcase_add_test(t, sysctls);
	tcase_add_test(t, userns_forbidden_by_sysctl);
	suite_add_tcase(s, t);
	tcase_set_timeout(n, 40);
	tcase_add_test(n, inside_as_root);
	tcase_add_test(n, inside_as_root_in_userns);
	tcase_add_test(n, inside_as_nobody);
	tcase_add_test(n, exit_status_passes);
	tcase_add_test(n, setup_errors);
	tcase_add_test(n, userns_clone_refused);
	tcase_add_test(n, sigterm_forwarded);
	tcase_add_test(n, sigterm_grace_then_kill);
	suite_add_tcase(s, n);
	return s;
}

/*
 * The tests run this binary inside sandboxes, also as nobody: it must sit
 * where every user can reach it, which the build tree of a clone in a 0700
 * directory (mktemp -d) is not. So it runs from a copy in a directory of
 * its own (01777), which also holds every layout.
 */
static int copy_self(char *dir, size_t dir_cap, char *exe, size_t exe_cap)
{
	char buf[65536];

	/* Not under /tmp: the sandbox has a private one. */
	snprintf(dir, dir_cap, "/var/tmp/an-sbx-exe-XXXXXX");
	/* 01777: the nobody test makes its layout in here too. */
	if (mkdtemp(dir) == NULL || chmod(dir, 01777) != 0)
		return -1;
	snprintf(exe, exe_cap, "%s/sandbox-test", dir);
	int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	int out = open(exe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	int rc = in >= 0 && out >= 0 ? 0 : -1;
	for (ssize_t n; rc == 0 && (n = read(in, buf, sizeof(buf))) != 0;)
		rc = n > 0 && write(out, buf, (size_t)n) == n ? 0 : -1;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) != 0)
		rc = -1;
	return rc;
}

int main(int argc, char **argv)
{
	static char exe[PATH_MAX];
	static char exe_dir[PATH_MAX];

	if (argc >= 2 && strncmp(argv[1], "--", 2) == 0)
		return helper_main(argc, argv);
	if (copy_self(exe_dir, sizeof(exe_dir), exe, sizeof(exe)) != 0) {
		perror("sandbox test: copying the test binary");
		return 1;
	}
	self_exe = exe;
	run_dir = exe_dir;
	int rc = unit_run(sandbox_suite());
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", exe_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "sandbox test: could not remove %s\n", exe_dir);
	return rc;
}
