/*
 * Unit tests for tools/agentsnet/sandbox.c: the pure helpers, then real sandboxes.
 *
 * The namespace tests build a fake daemon layout in a directory of the
 * run's own (not world-writable, outside /tmp and /var/tmp, which the sandbox
 * replaces): control.sock, this sandbox's directory with a listening
 * egress.sock and sandbox.conf, and another sandbox's directory with its own
 * socket. The "bridge" is a two-line shell script (written at run time, in a
 * directory of its own) that execs its command, and the command is this test
 * binary again with --inside: it checks from within that it is PID 1, sees
 * only `lo` (up), can reach its egress socket but not the control socket nor
 * the other sandbox, sees a fresh /run, a read-only sandbox directory, the
 * probe, a new IPC namespace, a /dev of the expected entries only, private
 * and empty /tmp, /var/tmp, /dev/shm and /dev/mqueue (markers the test left
 * in the host's are not there), a session of its own without a controlling
 * terminal (the test runs it from one that has), a session keyring that is
 * not the caller's (whose key it cannot find), no supplementary group, the
 * environment of spec->envp only, the pids limit (forking until EAGAIN), no
 * capability, masks it cannot unmount, a sysfs of its own (only lo in
 * /sys/class/net, no cgroup tree), its own host name, and its share of the
 * uid's allowances (it queues at most SANDBOX_SIGPENDING_MAX signals and
 * SANDBOX_MSGQUEUE_BYTES of message queues); without a user namespace it runs as
 * nobody and cannot write a root-owned 0644 file. Each check has its own exit
 * code, so a failure says which one. They run as root, as root in a user
 * namespace (cgroup limits), and as nobody in a user namespace (RLIMIT_NPROC,
 * with more host processes of nobody's than the limit: they do not count),
 * each when the host allows it. A user namespace of the test's own with
 * user.max_user_namespaces = 0 stands for a host that forbids them: the
 * sysctl check and clone()'s ENOSPC must both say so. Signals: a SIGTERM sent
 * to the supervisor reaches the agent, and so does a ^C of the supervisor's
 * terminal; an agent that ignores SIGTERM is killed after
 * SANDBOX_TERM_GRACE_MS; one that ignores every signal is killed after the
 * (shortened) grace period once the caller's terminal hangs up, once
 * `agentsnet run` gets SIGHUP, and after a second SIGINT. A pty test runs the
 * agent with a terminal as stdin. The world-writable finder runs on trees of
 * the test's own (more world-writable directories below one parent than the
 * list holds end as that parent masked; a directory past its owner's budget is
 * masked, the walk going on elsewhere), and once on the host, timed.
 */
#include "../../../../tools/agentsnet/sandbox.c"
#include "../../../../tools/agentsnet/wwdirs.c"
#include "../../../../tools/agentsnet/sockmask.c"
#include "../../../../tools/agentsnet/sandbox_child.c"
#include "../../../../tools/agentsnet/sandbox_root.c"
#include "../../../../tools/agentsnet/hostsock.c"
#include "../../../../tools/agentsnet/ptyrelay.c"

#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <grp.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <sys/ipc.h>
#include <sys/random.h>
#include <sys/shm.h>
#include <sys/vfs.h>
#include <sys/un.h>
#include <termios.h>
#include "tests/unit/unit.h"

/* The f_type of an mqueue file system (the kernel's ipc/mqueue.c; not in linux/magic.h). */
#define TEST_MQUEUE_MAGIC 0x19800202
/* The pids limit of the inside runs; the agent forks up to this many more to see it hold. */
#define TEST_PIDS_MAX   32u
#define TEST_MEMORY_MAX (512ull << 20)
/* The grace period before SIGKILL in the tests that wait it out (term_grace_ms). */
#define TEST_GRACE_MS 1000
/* The /dev the sandbox shows, exactly. */
static const char *const dev_expected[] = { "fd",     "full",   "mqueue",  "null",   "ptmx",
					    "pts",    "random", "shm",     "stderr", "stdin",
					    "stdout", "tty",    "urandom", "zero" };

static const char *self_exe;
/* The run's own directory (0755, under /var/lib as root): every layout lives in
 * it, and main removes it whole, so a failed test (which ends before
 * layout_remove) leaves nothing behind either. */
static const char *run_dir;
/* Where self_exe is: bound into every sandbox (its root holds nothing of /var otherwise). */
static const char *exe_dir_path;

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

/* What may be bound: a canonical path, never "/" nor inside what the sandbox makes itself. */
START_TEST(bind_check)
{
	char err[256];

	ck_assert_int_eq(sandbox_bind_check("/var/lib/work", err, sizeof(err)), 0);
	ck_assert_int_eq(sandbox_bind_check("/home/me/.gitconfig", err, sizeof(err)), 0);
	ck_assert_int_eq(sandbox_bind_check("/etc/ssl", err, sizeof(err)), 0);
	ck_assert_int_eq(sandbox_bind_check("/runner", err, sizeof(err)), 0);
	ck_assert_int_eq(sandbox_bind_check("/tmpdata", err, sizeof(err)), 0);
	ck_assert_int_eq(sandbox_bind_check("/", err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "whole file system"));
	ck_assert_int_eq(sandbox_bind_check("relative/x", err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "not an absolute path"));
	const char *made[] = { "/proc",  "/proc/1/root",     "/dev/sda",
			       "/run",   "/run/docker.sock", "/tmp",
			       "/tmp/x", "/var/tmp/y",       "/sys/fs/cgroup" };
	for (size_t i = 0; i < AN_ARRAY_LEN(made); i++) {
		ck_assert_int_eq(sandbox_bind_check(made[i], err, sizeof(err)), -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, made[i]));
		ck_assert_ptr_nonnull(strstr(err, "makes its own"));
	}
}
END_TEST

/* A bind's path as written, made absolute and written the one way; nothing is resolved. */
START_TEST(path_normal)
{
	char out[64];

	ck_assert_int_eq(sandbox_path_normal("/var//lib/./x/", "/w", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/var/lib/x");
	ck_assert_int_eq(sandbox_path_normal("cache", "/home/me/proj", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/home/me/proj/cache");
	ck_assert_int_eq(sandbox_path_normal("./a//b", "/w/", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/w/a/b");
	ck_assert_int_eq(sandbox_path_normal("/", "/w", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/");
	ck_assert_int_eq(sandbox_path_normal(".", "/w", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/w");
	ck_assert_int_eq(sandbox_path_normal("", "/w", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(sandbox_path_normal("a/../b", "/w", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(sandbox_path_normal("/a/..", "/w", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(sandbox_path_normal("rel", NULL, out, sizeof(out)), -EINVAL);
	/* "/abc" is 4 bytes and a NUL: 5 fit, 4 do not. */
	ck_assert_int_eq(sandbox_path_normal("/abc", "/", out, 5), 0);
	ck_assert_int_eq(sandbox_path_normal("/abc", "/", out, 4), -ENAMETOOLONG);
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
	ck_assert_int_eq(sandbox_user_parse("4242:4243", &u, err, sizeof(err)), 0);
	ck_assert_uint_eq(u.uid, 4242);
	ck_assert_uint_eq(u.gid, 4243);
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

/* Group <name>, when this host has it, is privileged (<want>) and refused as ":GROUP" if so. */
static void check_group(const char *name, bool want)
{
	struct sandbox_user u;
	char err[256], text[64];

	const struct group *gr = getgrnam(name);
	if (gr == NULL) {
		unit_skip("no group %s here", name);
		return;
	}
	gid_t gid = gr->gr_gid;
	ck_assert_msg(sandbox_group_privileged(gid) == want, "group %s", name);
	snprintf(text, sizeof(text), "nobody:%s", name);
	int ret = sandbox_user_parse(text, &u, err, sizeof(err));
	ck_assert_int_eq(ret, want ? -EPERM : 0);
	if (want)
		ck_assert_msg(strstr(err, name) != NULL, "%s", err);
}

/* The first user (not root) who is privileged only through a supplementary group, if any. */
static bool find_member_of_privileged(char *name, size_t cap)
{
	gid_t groups[SANDBOX_GROUPS_MAX];
	bool found = false;

	setpwent();
	for (const struct passwd *pw = getpwent(); pw != NULL && !found; pw = getpwent()) {
		int n = SANDBOX_GROUPS_MAX;
		if (pw->pw_uid == 0 || sandbox_group_privileged(pw->pw_gid) ||
		    getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) == -1)
			continue;
		for (int i = 0; i < n && !found; i++)
			found = sandbox_group_privileged(groups[i]);
		if (found)
			snprintf(name, cap, "%s", pw->pw_name);
	}
	endpwent();
	return found;
}

/* The user the fixture below adds: no other privilege than its supplementary group 0. */
#define WHEEL_USER "an-unit-wheel"

/* Copies the file at <from> to <to>; with <wheel>, adds WHEEL_USER to group 0's members. */
static void copy_adding_wheel(const char *from, FILE *to, bool wheel)
{
	char line[4096];
	FILE *f = fopen(from, "r");

	ck_assert_msg(f != NULL, "open %s", from);
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t len = strcspn(line, "\n");
		line[len] = '\0';
		bool no_member = len > 0 && line[len - 1] == ':';
		if (wheel && strncmp(line, "root:x:0:", 9) == 0)
			fprintf(to, "%s%s%s\n", line, no_member ? "" : ",", WHEEL_USER);
		else
			fprintf(to, "%s\n", line);
	}
	fclose(f);
}

/*
 * The fixture a host may lack: as root, in a mount namespace of this test's own (its
 * forked child), /etc/passwd and /etc/group are bind-mounted copies that add WHEEL_USER
 * (uid and gid 4244, nothing privileged) as a member of group 0. Nothing on the host
 * changes, and nothing is left behind when the test dies. Writes the user's name to <name>.
 */
static void add_member_of_root(char *name, size_t cap)
{
	char dir[PATH_MAX], pw[PATH_MAX + 16], gr[PATH_MAX + 16];

	ck_assert_int_eq(unshare(CLONE_NEWNS), 0);
	ck_assert_int_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
	snprintf(dir, sizeof(dir), "%s/wheel-XXXXXX", run_dir);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(pw, sizeof(pw), "%s/passwd", dir);
	snprintf(gr, sizeof(gr), "%s/group", dir);
	FILE *f = fopen(pw, "w");
	ck_assert_ptr_nonnull(f);
	copy_adding_wheel("/etc/passwd", f, false);
	fprintf(f, "%s:x:4244:4244::/nonexistent:/usr/sbin/nologin\n", WHEEL_USER);
	ck_assert_int_eq(fclose(f), 0);
	f = fopen(gr, "w");
	ck_assert_ptr_nonnull(f);
	copy_adding_wheel("/etc/group", f, true);
	fprintf(f, "%s:x:4244:\n", WHEEL_USER);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(mount(pw, "/etc/passwd", NULL, MS_BIND, NULL), 0);
	ck_assert_int_eq(mount(gr, "/etc/group", NULL, MS_BIND, NULL), 0);
	snprintf(name, cap, "%s", WHEEL_USER);
}

START_TEST(group_privileged)
{
	struct sandbox_user u;
	char err[256], name[64];

	ck_assert(sandbox_group_privileged(0));
	ck_assert(!sandbox_group_privileged(4243)); /* no such group: not privileged */
	check_group("disk", true);
	check_group("adm", true);
	check_group("shadow", true);
	check_group("sudo", true);
	check_group("video", false);
	check_group("plugdev", false);
	check_group("nogroup", false);
	ck_assert_int_eq(sandbox_user_parse("nobody:disk", &u, err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "group disk"));
	if (geteuid() == 0) {
		add_member_of_root(name, sizeof(name));
	} else if (!find_member_of_privileged(name, sizeof(name))) {
		unit_skip("no user here is in a privileged group (as root the test makes one)");
		return;
	}
	ck_assert_int_eq(sandbox_user_parse(name, &u, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "is a member of group") != NULL, "%s", err);
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
	ck_assert_int_eq(sigismember(&now, SIGWINCH), 1);
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
		unit_skip("%s", err);
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

/* ---- The world-writable finder. ---- */

static void tree_dir(const char *root, const char *rel, mode_t mode)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s%s", root, rel);
	ck_assert_msg(mkdir(path, mode) == 0, "mkdir %s: %s", path, strerror(errno));
	ck_assert_int_eq(chmod(path, mode), 0);
}

static void tree_file(const char *root, const char *rel, const char *text)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s%s", root, rel);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* The entry of <l> for <rel>: its mode, or -1 when it is not listed. */
static int listed(const struct ww_list *l, const char *rel)
{
	for (size_t i = 0; i < l->n; i++) {
		if (strcmp(l->dirs[i].path, rel) == 0)
			return (int)l->dirs[i].mode;
	}
	return -1;
}

/* Whether <rel> is on <l> as a directory hidden whole. */
static bool is_masked(const struct ww_list *l, const char *rel)
{
	for (size_t i = 0; i < l->n; i++) {
		if (strcmp(l->dirs[i].path, rel) == 0)
			return l->dirs[i].masked;
	}
	return false;
}

static size_t masked_count(const struct ww_list *l)
{
	size_t n = 0;

	for (size_t i = 0; i < l->n; i++)
		n += l->dirs[i].masked;
	return n;
}

static void make_ww_tree(const char *t)
{
	static const struct {
		const char *rel;
		mode_t mode;
	} dirs[] = {
		{ "/tmp", 01777 },       { "/var", 0755 },         { "/var/tmp", 01777 },
		{ "/var/crash", 03777 }, { "/a", 0755 },           { "/a/b", 01777 },
		{ "/a/b/c", 01777 },     { "/d", 0755 },           { "/d/e", 0755 },
		{ "/d/e/f", 0777 },      { "/d/e/g", 0755 },       { "/d/e/g/h", 01777 },
		{ "/d/e/g/s p", 01777 }, { "/d/e/g/deep", 01777 }, { "/proc", 0755 },
		{ "/proc/x", 01777 },    { "/sys", 0755 },         { "/sys/x", 01777 },
		{ "/dev", 0755 },        { "/dev/x", 01777 },      { "/run", 0755 },
		{ "/run/x", 01777 },     { "/o", 0700 },           { "/o/w", 0777 },
	};
	char path[PATH_MAX], target[PATH_MAX];

	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++)
		tree_dir(t, dirs[i].rel, dirs[i].mode);
	snprintf(path, sizeof(path), "%s/l", t);
	snprintf(target, sizeof(target), "%s/a/b", t);
	ck_assert_int_eq(symlink(target, path), 0); /* never followed */
	snprintf(path, sizeof(path), "%s/var/lock", t);
	ck_assert_int_eq(symlink("../run/lock", path), 0);
	/* "/a/b/c" before "/": listed, then dropped once the walk lists /a/b. */
	tree_file(t, "/mountinfo",
		  "30 1 0:40 / /a/b/c rw - tmpfs tmpfs rw\n"
		  "1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
		  "31 1 0:41 / /d/e/g/h rw - tmpfs tmpfs rw\n"
		  "32 1 0:42 / /d/e/g/s\\040p rw - tmpfs tmpfs rw\n"
		  "33 1 0:43 / /proc/x rw - tmpfs tmpfs rw\n"
		  "34 1 0:44 / /no/such rw - tmpfs tmpfs rw\n"
		  "garbage\n");
	/* Only a remote root: nothing is walked, so only the known ones. */
	tree_file(t, "/mountinfo-nfs", "1 0 0:50 / / rw - nfs4 srv:/ rw\n");
}

START_TEST(ww_find_tree)
{
	char t[256], mi[PATH_MAX];
	struct ww_list *l = pool_calloc(1, sizeof(*l));

	ck_assert_ptr_nonnull(l);
	snprintf(t, sizeof(t), "%s/tree-XXXXXX", run_dir);
	ck_assert_ptr_nonnull(mkdtemp(t));
	make_ww_tree(t);
	snprintf(mi, sizeof(mi), "%s/mountinfo", t);
	l->visit_max = SANDBOX_WW_VISIT_MAX;
	ck_assert_int_eq(ww_find(l, t, mi), 0);
	for (size_t i = 0; i < l->n; i++)
		fprintf(stderr, "ww: %s %o\n", l->dirs[i].path, (unsigned)l->dirs[i].mode);
	ck_assert_int_eq(listed(l, "/tmp"), 01777);
	ck_assert_int_eq(listed(l, "/var/tmp"), 01777);
	ck_assert_int_eq(listed(l, "/var/crash"), 03777);
	ck_assert_int_eq(listed(l, "/a/b"), 01777);
	ck_assert_int_eq(listed(l, "/d/e/f"), 0777);
	ck_assert_int_eq(listed(l, "/d/e/g/h"), 01777); /* deep, but a mount point */
	ck_assert_int_eq(listed(l, "/d/e/g/s p"), 01777);
	ck_assert_int_eq(listed(l, "/o/w"), 0777); /* below a 0700 directory: still ours to see */
	ck_assert_uint_eq(l->n, 8); /* not /a/b/c, /l, /var/lock, /d/e/g/deep, /proc/x, ... */
	ck_assert_uint_eq(masked_count(l), 0);
	/* A remote root file system is not walked. */
	snprintf(mi, sizeof(mi), "%s/mountinfo-nfs", t);
	ck_assert_int_eq(ww_find(l, t, mi), 0);
	ck_assert_uint_eq(l->n, 3);
	ck_assert_int_eq(listed(l, "/var/crash"), 03777);
	ck_assert_int_eq(ww_find(l, t, "/no/such/mountinfo"), -ENOENT);
	pool_free(l);
}
END_TEST

/* A tree of its own below run_dir, with a mountinfo naming only its root; <l> ready to walk it. */
static struct ww_list *ww_tree(char *t, size_t cap, char *mi, size_t mi_cap)
{
	struct ww_list *l = pool_calloc(1, sizeof(*l));

	ck_assert_ptr_nonnull(l);
	snprintf(t, cap, "%s/ww-XXXXXX", run_dir);
	ck_assert_ptr_nonnull(mkdtemp(t));
	tree_file(t, "/mountinfo", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n");
	snprintf(mi, mi_cap, "%s/mountinfo", t);
	l->visit_max = SANDBOX_WW_VISIT_MAX;
	return l;
}

/* <n> directories of <mode> named <parent>/w0, w1, ... */
static void tree_dirs(const char *t, const char *parent, int n, mode_t mode)
{
	char rel[PATH_MAX];

	for (int i = 0; i < n; i++) {
		snprintf(rel, sizeof(rel), "%s/w%d", parent, i);
		tree_dir(t, rel, mode);
	}
}

static void ww_keep(struct ww_list *l, const char *rel, const char *what)
{
	snprintf(l->keep[l->n_keep], sizeof(l->keep[0]), "%s", rel);
	l->keep_what[l->n_keep++] = what;
}

/*
 * More world-writable directories below one parent than the list holds (an
 * attacker's 200, or more): that parent ends up masked whole, the deepest
 * one that holds them (not its parent), and the other entries stay as they
 * were. Hiding it is refused, naming it, when it holds what the sandbox needs.
 */
START_TEST(ww_collapse)
{
	char t[256], mi[PATH_MAX];
	int many = SANDBOX_WW_MAX + 64 > 200 ? SANDBOX_WW_MAX + 64 : 200;

	struct ww_list *l = ww_tree(t, sizeof(t), mi, sizeof(mi));
	tree_dir(t, "/s", 0755);
	tree_dir(t, "/s/p", 0755);
	tree_dirs(t, "/s/p", many, 01777);
	tree_dir(t, "/s/q", 0755);
	tree_dir(t, "/s/q/x", 01777);
	ck_assert_int_eq(ww_find(l, t, mi), 0);
	ck_assert_uint_eq(l->n, 2);
	ck_assert(is_masked(l, "/s/p"));
	ck_assert_int_eq(listed(l, "/s/q/x"), 01777);
	ck_assert(!is_masked(l, "/s/q/x"));
	/* The working directory below /s/p/w5: /s/p may not be hidden, nor /s. */
	ww_keep(l, "/s/p/w5/src", "the working directory");
	ck_assert_int_eq(ww_find(l, t, mi), -E2BIG);
	ck_assert_str_eq(l->blocked, "/s/p");
	ck_assert_str_eq(l->keep_what[l->blocked_keep], "the working directory");
	pool_free(l);
}
END_TEST

/* Fills <paths> with <n> socket paths "<dir>/s<i>.sock" from <at>; returns the next index. */
static size_t socket_paths(const char **paths, char (*names)[64], size_t at, const char *dir,
			   size_t n)
{
	for (size_t i = 0; i < n; i++, at++) {
		snprintf(names[at], sizeof(names[at]), "%s/s%zu.sock", dir, i);
		paths[at] = names[at];
	}
	return at;
}

/* Fills <paths> from 0 with one socket in each of <n> directories "<parent>/d<i>". */
static size_t sibling_socket_paths(const char **paths, char (*names)[64], const char *parent,
				   size_t n)
{
	char dir[64];
	size_t at = 0;

	for (size_t i = 0; i < n; i++) {
		snprintf(dir, sizeof(dir), "%s/d%zu", parent, i);
		at = socket_paths(paths, names, at, dir, 1);
	}
	return at;
}

/*
 * SANDBOX_SOCKET_MASKS_MAX + 300 sibling directories of one socket each under
 * <parent>, and <rest> sockets in <other>: collapsed into <parent> alone, the
 * <rest> left to mask one by one.
 */
static void collapse_siblings(struct child_ctx *c, const char *parent, const char *other,
			      size_t rest)
{
	static char names[SANDBOX_SOCKET_MASKS_MAX + 400][64];
	static const char *paths[SANDBOX_SOCKET_MASKS_MAX + 400];
	char err[512];

	c->ww->n = 0;
	size_t n = sibling_socket_paths(paths, names, parent, SANDBOX_SOCKET_MASKS_MAX + 300);
	n = socket_paths(paths, names, n, other, rest);
	ck_assert_int_eq(sockets_collapse(c, paths, n, err, sizeof(err)), (long)rest);
	ck_assert_uint_eq(c->ww->n, 1);
	ck_assert(is_masked(c->ww, parent));
}

/*
 * More host sockets left in view than the sandbox masks one by one: the
 * directories holding the most are hidden whole, never one holding what the
 * run keeps, nor /; when that is not enough the run is refused, saying why.
 */
START_TEST(sockets_collapse_dirs)
{
	enum { MANY = SANDBOX_SOCKET_MASKS_MAX + 76 };
	static char names[2 * MANY + 64][64];
	static const char *paths[2 * MANY + 64];
	struct child_ctx c = { 0 };
	char err[512];

	c.ww = pool_calloc(1, sizeof(*c.ww));
	ww_keep(c.ww, "/k/keep", "the working directory");
	size_t n = socket_paths(paths, names, 0, "/k", 5);
	n = socket_paths(paths, names, n, "/b", 10);
	n = socket_paths(paths, names, n, "/a/many", MANY);
	n = socket_paths(paths, names, n, "/a/many/sub", 3);
	n = socket_paths(paths, names, n, "/a/many-x", 2);
	n = socket_paths(paths, names, n, "", 1); /* "/s0.sock": never collapsed into "/" */
	ck_assert_int_eq(sockets_collapse(&c, paths, n, err, sizeof(err)), 5 + 10 + 2 + 1);
	ck_assert_uint_eq(c.ww->n, 1);
	ck_assert(is_masked(c.ww, "/a/many"));
	size_t left = 0;
	for (size_t i = 0; i < n; i++) {
		if (paths[i] == NULL)
			continue;
		left++;
		ck_assert_msg(!sandbox_path_under(paths[i], "/a/many"), "%s", paths[i]);
	}
	ck_assert_uint_eq(left, 18);

	/*
	 * A thousand and more sibling directories of one socket each (what anyone can make
	 * where they can write): hidden at their common parent in one step, not one
	 * directory at a time until SANDBOX_WW_MAX runs out.
	 */
	collapse_siblings(&c, "/var/lib/att", "/var/lib/svc", 4);
	/* The same under a directory the run keeps: hidden one level down instead. */
	ww_keep(c.ww, "/var/lib/att/d0/work", "the working directory");
	collapse_siblings(&c, "/var/lib/att/x", "/var/lib/att/d0", 2);
	c.ww->n_keep = 1;

	/* Only the kept directory (and /) hold them: refused. */
	c.ww->n = 0;
	n = socket_paths(paths, names, 0, "/k", MANY);
	n = socket_paths(paths, names, n, "", 2);
	ck_assert_int_eq(sockets_collapse(&c, paths, n, err, sizeof(err)), -E2BIG);
	ck_assert_msg(strstr(err, "Unix sockets bound in directories the sandbox shows") != NULL,
		      "%s", err);
	ck_assert_uint_eq(c.ww->n, 0);
	pool_free(c.ww);
}
END_TEST

/*
 * A coarse listing's directories (past hostsock's bounds): each hidden whole, those below
 * another dropped; more than the list has room for go up a level until they fit; one that
 * holds what the run keeps, or /, is refused naming it.
 */
START_TEST(sockets_hide_coarse_dirs)
{
	enum { MANY = SANDBOX_WW_MAX + 40 };
	static char names[MANY + 8][64];
	char *dirs[MANY + 8];
	struct child_ctx c = { 0 };
	char err[512];

	c.ww = pool_calloc(1, sizeof(*c.ww));
	ww_keep(c.ww, "/k/keep", "the working directory");
	size_t n = 0;
	snprintf(names[n], sizeof(names[n]), "/srv/a");
	dirs[n] = names[n];
	n++;
	snprintf(names[n], sizeof(names[n]), "/srv/a/b"); /* below /srv/a: dropped */
	dirs[n] = names[n];
	n++;
	ck_assert_int_eq(sockets_hide_dirs(&c, dirs, n, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.ww->n, 1);
	ck_assert(is_masked(c.ww, "/srv/a"));

	/* More sibling directories than the list holds: hidden at their parent. */
	c.ww->n = 0;
	n = 0;
	for (; n < MANY; n++) {
		snprintf(names[n], sizeof(names[n]), "/var/lib/att/d%zu", n);
		dirs[n] = names[n];
	}
	ck_assert_int_eq(sockets_hide_dirs(&c, dirs, n, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.ww->n, 1);
	ck_assert(is_masked(c.ww, "/var/lib/att"));

	/* The kept directory's ancestor, or /: refused, naming it. */
	c.ww->n = 0;
	snprintf(names[0], sizeof(names[0]), "/k");
	dirs[0] = names[0];
	ck_assert_int_eq(sockets_hide_dirs(&c, dirs, 1, err, sizeof(err)), -E2BIG);
	ck_assert_msg(strstr(err, "hiding /k,") != NULL && strstr(err, "/k/keep") != NULL, "%s",
		      err);
	snprintf(names[0], sizeof(names[0]), "/");
	dirs[0] = names[0];
	ck_assert_int_eq(sockets_hide_dirs(&c, dirs, 1, err, sizeof(err)), -E2BIG);
	ck_assert_msg(strstr(err, "would hide everything") != NULL, "%s", err);
	ck_assert_uint_eq(c.ww->n, 0);
	pool_free(c.ww);
}
END_TEST

/* More world-writable directories than the list holds, and only / holds them: refused. */
START_TEST(ww_find_full)
{
	char t[256], mi[PATH_MAX];

	struct ww_list *l = ww_tree(t, sizeof(t), mi, sizeof(mi));
	tree_dirs(t, "", SANDBOX_WW_MAX + 1, 01777);
	ck_assert_int_eq(ww_find(l, t, mi), -E2BIG);
	ck_assert_str_eq(l->blocked, "");
	pool_free(l);
}
END_TEST

/* A mountinfo: the root, then <mount_point> with a root field of <escapes> "\040"s. */
static void mountinfo_long(const char *t, size_t escapes, const char *mount_point)
{
	size_t cap = escapes * 4 + 256;
	char *text = pool_calloc(1, cap);

	ck_assert_ptr_nonnull(text);
	size_t len = (size_t)snprintf(text, cap, "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n40 1 8:1 /");
	for (size_t i = 0; i < escapes; i++, len += 4)
		memcpy(text + len, "\\040", 4);
	snprintf(text + len, cap - len, " %s rw - ext4 /dev/sda1 rw\n", mount_point);
	tree_file(t, "/mountinfo", text);
	pool_free(text);
}

/*
 * A bind mount whose mountinfo line is long (its escaped root: 10 KiB) and
 * whose world-writable mount point is out of the walk's reach is listed; a
 * line longer than any mountinfo line can be fails the search (line number
 * kept), rather than being skipped.
 */
START_TEST(ww_find_long_mountinfo)
{
	char t[256], mi[PATH_MAX];

	struct ww_list *l = ww_tree(t, sizeof(t), mi, sizeof(mi));
	tree_dir(t, "/x", 0755);
	tree_dir(t, "/x/y", 0755);
	tree_dir(t, "/x/y/z", 0755);
	tree_dir(t, "/x/y/z/share", 01777); /* below SANDBOX_WW_DEPTH: only mountinfo names it */
	mountinfo_long(t, 2560, "/x/y/z/share");
	ck_assert_int_eq(ww_find(l, t, mi), 0);
	ck_assert_int_eq(listed(l, "/x/y/z/share"), 01777);
	ck_assert_uint_eq(l->mountinfo_line_no, 2);
	mountinfo_long(t, SANDBOX_MOUNTINFO_LINE / 4, "/x/y/z/share");
	ck_assert_int_eq(ww_find(l, t, mi), -EOVERFLOW);
	ck_assert_uint_eq(l->mountinfo_line_no, 2);
	pool_free(l);
}
END_TEST

/*
 * A directory showing more entries than its owner's budget is cut short, and
 * masked whole: what its unread part holds is not left shared. The walk goes
 * on elsewhere (other owners have budgets of their own), and a directory that
 * holds what the sandbox needs is read to its end instead.
 */
START_TEST(ww_budget_cut)
{
	char t[256], mi[PATH_MAX], path[PATH_MAX];

	if (geteuid() != 0) {
		unit_skip("needs root to give directories another owner");
		return;
	}
	struct ww_list *l = ww_tree(t, sizeof(t), mi, sizeof(mi));
	tree_dir(t, "/o", 0755);
	const char *big[] = { "/o/big", "/o/keep" }; /* their entries: visited, never read */
	for (size_t i = 0; i < AN_ARRAY_LEN(big); i++) {
		tree_dir(t, big[i], 0755);
		tree_dirs(t, big[i], 40, 0755);
		snprintf(path, sizeof(path), "%s%s", t, big[i]);
		ck_assert_int_eq(chown(path, 4242, 4242), 0);
		snprintf(path, sizeof(path), "%s%s/w7", t, big[i]);
		ck_assert_int_eq(chmod(path, 01777), 0);
	}
	tree_dir(t, "/z", 0755);
	tree_dir(t, "/z/w", 01777);
	l->visit_max = 16; /* root's directories show 12 entries, 4242's 84 */
	ww_keep(l, "/o/keep/w3/src", "the working directory");
	ck_assert_int_eq(ww_find(l, t, mi), 0);
	for (size_t i = 0; i < l->n; i++)
		fprintf(stderr, "ww: %s %o%s\n", l->dirs[i].path, (unsigned)l->dirs[i].mode,
			l->dirs[i].masked ? " masked" : "");
	ck_assert(is_masked(l, "/o/big"));
	ck_assert_int_eq(listed(l, "/o/big/w7"), -1); /* hidden with /o/big */
	ck_assert_int_eq(listed(l, "/z/w"), 01777);
	ck_assert_int_eq(listed(l, "/o/keep/w7"), 01777);
	ck_assert_uint_eq(masked_count(l), 1);
	ck_assert_uint_eq(l->n, 3);
	pool_free(l);
}
END_TEST

START_TEST(mountinfo_parse)
{
	char line[] = "36 35 98:0 /mnt1 /mnt/a\\040b\\134c rw,noatime master:1 - ext3 /dev/root rw";
	char *mp = NULL, *type = NULL;

	ck_assert(mountinfo_fields(line, &mp, &type));
	ck_assert_str_eq(mp, "/mnt/a b\\c");
	ck_assert_str_eq(type, "ext3");
	char bad[] = "36 35 98:0 /mnt1 /mnt/a rw";
	ck_assert(!mountinfo_fields(bad, &mp, &type));
	ck_assert_uint_eq(ww_depth("/"), 0);
	ck_assert_uint_eq(ww_depth("/a"), 1);
	ck_assert_uint_eq(ww_depth("/a/b/c"), 3);
}
END_TEST

/* The real host, timed: what every `agentsnet run` pays before the clone. */
START_TEST(ww_find_host)
{
	struct ww_list *l = pool_calloc(1, sizeof(*l));
	struct timespec t0, t1;

	ck_assert_ptr_nonnull(l);
	l->visit_max = SANDBOX_WW_VISIT_MAX;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(ww_find(l, "/", "/proc/self/mountinfo"), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	fprintf(stderr, "ww_find /: %zu directories, %zu visited, %.2f ms\n", l->n, l->visited, ms);
	for (size_t i = 0; i < l->n; i++)
		fprintf(stderr, "  %s %o\n", l->dirs[i].path, (unsigned)l->dirs[i].mode);
	ck_assert_uint_eq(masked_count(l), 0);
	ck_assert_int_ge(listed(l, "/tmp"), 0);
	ck_assert_int_ge(listed(l, "/var/tmp"), 0);
	ck_assert_double_lt(ms, 250.0); /* ~20 ms budget; a shared machine's slack */
	pool_free(l);
}
END_TEST

/* ---- A fake daemon layout. ---- */

struct layout {
	char socket_dir[128];
	char bin_dir[128];
	char dir[192];   /* socket_dir/sandboxes/box */
	char other[192]; /* socket_dir/sandboxes/other */
	char bridge[192];
	/* listening: control, egress, the other's egress, a host service's, one reached through
	 * a symlinked directory, one whose name leads into the sandbox's own /run */
	int fds[6];
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

static void write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, mode), 0);
}

/* Who the agent is on the host: the caller with a user namespace, else nobody. */
static uid_t agent_uid(bool userns)
{
	struct sandbox_user u;
	char err[256];

	if (userns)
		return geteuid();
	ck_assert_int_eq(sandbox_user_parse("nobody", &u, err, sizeof(err)), 0);
	return u.uid;
}

/*
 * Listens on <bin_dir>/<link>/<name>, <link> a symlink to the directory <real>
 * made for it; with <retarget>, the link then points there instead.
 */
static int listen_through_link(const struct layout *l, const char *real, const char *link,
			       const char *name, const char *retarget)
{
	char dir[PATH_MAX], at[PATH_MAX], path[PATH_MAX + 64];

	snprintf(dir, sizeof(dir), "%s/%s", l->bin_dir, real);
	snprintf(at, sizeof(at), "%s/%s", l->bin_dir, link);
	snprintf(path, sizeof(path), "%s/%s", at, name);
	mkdir_open(dir);
	ck_assert_int_eq(symlink(dir, at), 0);
	int fd = listen_at(path);
	if (retarget != NULL) {
		ck_assert_int_eq(unlink(at), 0);
		ck_assert_int_eq(symlink(retarget, at), 0);
	}
	return fd;
}

static void layout_make(struct layout *l, bool userns)
{
	static const char script[] = "#!/bin/sh\n"
				     "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\n"
				     "shift\nexec \"$@\"\n";
	char path[PATH_MAX + 32];

	snprintf(l->socket_dir, sizeof(l->socket_dir), "%s/sock-XXXXXX", run_dir);
	snprintf(l->bin_dir, sizeof(l->bin_dir), "%s/bin-XXXXXX", run_dir);
	ck_assert_ptr_nonnull(mkdtemp(l->socket_dir));
	ck_assert_ptr_nonnull(mkdtemp(l->bin_dir));
	ck_assert_int_eq(chmod(l->socket_dir, 0755), 0);
	/* The agent's own (it leaves files here), never world-writable: the sandbox would
	 * give such a directory a private instance. */
	ck_assert_int_eq(chmod(l->bin_dir, 0755), 0);
	if (geteuid() == 0)
		ck_assert_int_eq(chown(l->bin_dir, agent_uid(userns), (gid_t)-1), 0);
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
	/* A host service's socket outside every directory the sandbox replaces (as
	 * /var/lib/mysql/mysql.sock): the sandbox must mask it. */
	snprintf(path, sizeof(path), "%s/service.sock", l->bin_dir);
	l->fds[3] = listen_at(path);
	/* Bound through a symlinked directory (/var/lib/mysql -> /data/mysql): masked too. */
	l->fds[4] = listen_through_link(l, "real", "linked", "service.sock", NULL);
	/* A name whose directory is then pointed at the sandbox's own /run: following it must
	 * not mask the sandbox's egress socket (inside_main connects to that). */
	l->fds[5] =
	    listen_through_link(l, "real2", "torun", "egress.sock", "/run/agentsnet/sandbox");
	snprintf(path, sizeof(path), "%s/sandbox.conf", l->dir);
	write_file(path, "profile default\n", 0644);
	snprintf(l->bridge, sizeof(l->bridge), "%s/bridge.sh", l->bin_dir);
	write_file(l->bridge, script, 0755);
	snprintf(path, sizeof(path), "%s/rootfile", l->bin_dir);
	write_file(path, "root's\n", 0644);
}

static void layout_remove(struct layout *l)
{
	char cmd[2 * PATH_MAX + 32];
	for (size_t i = 0; i < AN_ARRAY_LEN(l->fds); i++)
		close(l->fds[i]);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", l->socket_dir, l->bin_dir);
	ck_assert_int_eq(system(cmd), 0);
}

static struct sandbox_spec layout_spec(const struct layout *l, char **cmd, bool userns)
{
	static unsigned runs;
	static char id[64];
	struct sandbox_spec s = {
		.dir = l->dir,
		.socket_dir = l->socket_dir,
		.bridge = l->bridge,
		.cwd = "/tmp",
		.cmd = cmd,
		.id = id,
		.userns = userns,
		.user = { .uid = getuid(), .gid = getgid() },
		.ingress_fd = -1,
	};
	char err[256];
	/* The test's directories, named as an operator would: the root of its own shows
	 * nothing of the host's /var unless bound (the masks then still apply in them). */
	static struct sandbox_bind binds[2];
	binds[0] = (struct sandbox_bind){ .path = exe_dir_path, .read_only = true };
	binds[1] = (struct sandbox_bind){ .path = run_dir, .read_only = false };
	s.binds = strcmp(run_dir, exe_dir_path) == 0 ? binds + 1 : binds;
	s.n_binds = strcmp(run_dir, exe_dir_path) == 0 ? 1 : 2;
	/* .cwd names this process's own working directory, which the sandbox's is made from. */
	ck_assert_int_eq(chdir("/tmp"), 0);
	snprintf(id, sizeof(id), "an-unit-sandbox-%d-%u", (int)getpid(), runs++);
	if (!userns)
		ck_assert_int_eq(sandbox_user_parse("nobody", &s.user, err, sizeof(err)), 0);
	return s;
}

/* Whether this host lets us build the sandbox in this mode; records the skip if not. */
static bool can_run(bool userns)
{
	char err[512];

	if (!userns && sandbox_needs_userns()) {
		unit_skip("not privileged (no CAP_SYS_ADMIN)");
		return false;
	}
	if (userns && sandbox_userns_allowed(err, sizeof(err)) != 0) {
		unit_skip("%s", err);
		return false;
	}
	return true;
}

/* Runs <s> to its end; returns the wait status. Its cgroup, if any, is gone after. */
static int run_spec(struct sandbox_spec *s)
{
	struct sandbox sb;
	char err[SANDBOX_ERROR_BYTES], cg[PATH_MAX];
	int wstatus = -1;

	sandbox_signals_block(&s->child_mask);
	int ret = sandbox_start(s, &sb, err, sizeof(err));
	if (ret != 0)
		fprintf(stderr, "sandbox_start: %s\n", err);
	ck_assert_int_eq(ret, 0);
	ck_assert_int_gt(sb.pid, 0);
	snprintf(cg, sizeof(cg), "%s", sb.cgroup.pids_dir);
	ck_assert_int_eq(sandbox_wait(&sb, &wstatus), 0);
	ck_assert_int_eq(sb.alive_fd, -1);
	ck_assert_int_eq(kill(sb.pid, 0), -1); /* reaped */
	ck_assert_int_eq(sb.cgroup.version, 0);
	if (cg[0] != '\0')
		ck_assert_msg(access(cg, F_OK) == -1 && errno == ENOENT, "%s is left", cg);
	return wstatus;
}

static int run_in(const struct layout *l, char **cmd, bool userns)
{
	struct sandbox_spec s = layout_spec(l, cmd, userns);
	return run_spec(&s);
}

/* A new pty's master, its slave unlocked (O_NOCTTY, close-on-exec). */
static int pty_master_new(void)
{
	int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);

	ck_assert_int_ge(master, 0);
	ck_assert_int_eq(grantpt(master), 0);
	ck_assert_int_eq(unlockpt(master), 0);
	return master;
}

/* Makes a pty whose slave becomes our controlling terminal (we lead a new session). */
static int take_ctty(int *slave)
{
	int master = pty_master_new();

	ck_assert_int_ne(setsid(), -1);
	*slave = open(ptsname(master), O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(*slave, 0);
	ck_assert_int_eq(ioctl(*slave, TIOCSCTTY, 0), 0);
	return master;
}

/* What the test leaves on the host for the agent not to see, and looks for after. */
struct host_marks {
	char tag[48];
	key_t shm_key;
	char key_desc[64];
	char env[9][128];
	char *envp[10];
};

/* Names of this run's marks, made by the supervisor's parent so that it can remove them. */
static void host_marks_name(struct host_marks *m)
{
	static unsigned runs;

	memset(m, 0, sizeof(*m));
	snprintf(m->tag, sizeof(m->tag), "an-sbx-%d-%u", (int)getpid(), runs);
	m->shm_key = (key_t)(0x5a000000 | (((unsigned)getpid() * 16u + runs) & 0xffffffu));
	runs++;
}

static void host_marks_make(struct host_marks *m, bool userns)
{
	struct mq_attr attr = { .mq_maxmsg = 1, .mq_msgsize = 16 };
	char path[PATH_MAX], ns[64];

	const char *dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };
	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s-marker", dirs[i], m->tag);
		write_file(path, "host\n", 0644);
	}
	snprintf(path, sizeof(path), "/%s", m->tag);
	mqd_t q = mq_open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600, &attr);
	ck_assert_msg(q != (mqd_t)-1, "mq_open %s: %s", path, strerror(errno));
	mq_close(q);
	ck_assert_int_ge(shmget(m->shm_key, 4096, IPC_CREAT | 0600), 0);
	/* A session keyring of this run's own, holding a key the agent must not find. */
	ck_assert_int_ge(syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, m->tag), 0);
	snprintf(m->key_desc, sizeof(m->key_desc), "%s-key", m->tag);
	ck_assert_int_ge(
	    syscall(SYS_add_key, "user", m->key_desc, "secret", 6, KEY_SPEC_SESSION_KEYRING), 0);
	long ring = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
	ck_assert_int_gt(ring, 0);
	ssize_t n = readlink("/proc/self/ns/ipc", ns, sizeof(ns) - 1);
	ck_assert_int_gt(n, 0);
	ns[n] = '\0';
	/* Privileged, the agent loses the groups we hold; with a user namespace it keeps them. */
	int groups = userns ? getgroups(0, NULL) : 0;
	snprintf(m->env[0], sizeof(m->env[0]), "AN_SBX_TAG=%s", m->tag);
	snprintf(m->env[1], sizeof(m->env[1]), "AN_SBX_IPC=%s", ns);
	snprintf(m->env[2], sizeof(m->env[2]), "AN_SBX_KEYRING=%ld", ring);
	snprintf(m->env[3], sizeof(m->env[3]), "AN_SBX_KEY=%s", m->key_desc);
	snprintf(m->env[4], sizeof(m->env[4]), "AN_SBX_GROUPS=%d", groups);
	snprintf(m->env[5], sizeof(m->env[5]), "AN_SBX_PIDS=%u", TEST_PIDS_MAX);
	snprintf(m->env[6], sizeof(m->env[6]), "AN_SBX_SHM=%d", (int)m->shm_key);
	snprintf(m->env[7], sizeof(m->env[7]), "AN_SBX_ENV=yes");
	char host[HOST_NAME_MAX + 1] = "";
	ck_assert_int_eq(gethostname(host, sizeof(host)), 0);
	snprintf(m->env[8], sizeof(m->env[8]), "AN_SBX_HOST=%s", host);
	for (size_t i = 0; i < AN_ARRAY_LEN(m->env); i++)
		m->envp[i] = m->env[i];
	m->envp[AN_ARRAY_LEN(m->env)] = NULL;
	ck_assert_int_eq(setenv("AN_SBX_HOST_SECRET", "leaked", 1), 0); /* in environ only */
}

/* What the agent made in its /tmp, /var/tmp and /dev/shm stayed there. */
static void host_marks_check(const struct host_marks *m)
{
	char path[PATH_MAX];

	const char *dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };
	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s-inside", dirs[i], m->tag);
		ck_assert_msg(access(path, F_OK) == -1, "%s reached the host", path);
	}
}

/* Removes every mark, whatever the run did (a failed one ends early). */
static void host_marks_remove(const struct host_marks *m)
{
	const char *dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };
	const char *kinds[] = { "marker", "inside" };
	char path[PATH_MAX];

	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		for (size_t k = 0; k < AN_ARRAY_LEN(kinds); k++) {
			snprintf(path, sizeof(path), "%s/%s-%s", dirs[i], m->tag, kinds[k]);
			unlink(path);
		}
	}
	snprintf(path, sizeof(path), "/%s", m->tag);
	mq_unlink(path);
	int id = shmget(m->shm_key, 0, 0);
	if (id >= 0)
		shmctl(id, IPC_RMID, NULL);
}

/* The inside checks of one mode, run from a process that has a controlling terminal. */
static void check_inside_ctty(struct host_marks *m, bool userns)
{
	struct layout l;
	int slave = -1;

	int master = take_ctty(&slave);
	if (!userns)
		ck_assert_int_eq(setgroups(1, (gid_t[]){ 4242 }), 0); /* for the agent to lose */
	layout_make(&l, userns);
	host_marks_make(m, userns);
	char uid[16];
	snprintf(uid, sizeof(uid), "%u", userns ? 0U : (unsigned)agent_uid(false));
	char *cmd[] = { (char *)self_exe, "--inside", l.socket_dir, uid, l.bin_dir, NULL };
	struct sandbox_spec s = layout_spec(&l, cmd, userns);
	s.envp = m->envp;
	s.probe = l.bridge;
	s.limits = (struct sandbox_limits){ .pids_max = TEST_PIDS_MAX,
					    .memory_max_bytes = TEST_MEMORY_MAX };
	int st = run_spec(&s);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	host_marks_check(m);
	layout_remove(&l);
	close(slave);
	close(master);
}

static void check_inside(bool userns)
{
	struct host_marks m;

	host_marks_name(&m);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		check_inside_ctty(&m, userns);
		_exit(0);
	}
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	host_marks_remove(&m);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
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

/* Host processes of nobody's, more than the sandbox's pids limit: they must not count. */
static void host_sleepers(pid_t *pids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			pause();
			_exit(0);
		}
	}
}

/* An unprivileged user: a child that drops to nobody first (no delegated cgroup: RLIMIT_NPROC). */
START_TEST(inside_as_nobody)
{
	char dir[PATH_MAX];
	pid_t sleepers[TEST_PIDS_MAX + 8];

	if (geteuid() != 0) {
		unit_skip("needs root to become nobody");
		return;
	}
	if (!can_run(true))
		return;
	snprintf(dir, sizeof(dir), "%s/nobody-XXXXXX", run_dir);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chown(dir, 65534, 65534), 0);
	ck_assert_int_eq(chmod(dir, 0755), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
		    setresuid(65534, 65534, 65534) != 0)
			_exit(90);
		ck_assert(sandbox_needs_userns());
		run_dir = dir;
		host_sleepers(sleepers, AN_ARRAY_LEN(sleepers));
		check_inside(true);
		for (size_t i = 0; i < AN_ARRAY_LEN(sleepers); i++)
			kill(sleepers[i], SIGKILL);
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
	layout_make(&l, sandbox_needs_userns());
	char *cmd[] = { "/bin/sh", "-c", "exit 7", NULL };
	int st = run_in(&l, cmd, sandbox_needs_userns());
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 7);
	layout_remove(&l);
}
END_TEST

/* Neither cgroup layout holds a directory for <id> (v1 pids and memory, or v2). */
static void check_no_cgroup(const char *id)
{
	const char *dirs[] = { "pids/", "memory/", "" };
	char path[PATH_MAX];

	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		snprintf(path, sizeof(path), CGROUP_ROOT_DEFAULT "/%s" CGROUP_PARENT_NAME "/%s",
			 dirs[i], id);
		ck_assert_msg(access(path, F_OK) == -1, "%s is left", path);
	}
}

/* Setup errors come back with their step and errno; nothing keeps running, no cgroup stays. */
START_TEST(setup_errors)
{
	struct layout l;
	struct sandbox sb;
	char err[SANDBOX_ERROR_BYTES], hidden[PATH_MAX + 32];
	bool userns = sandbox_needs_userns();

	if (!can_run(userns))
		return;
	layout_make(&l, userns);
	char *cmd[] = { "/bin/true", NULL };
	struct sandbox_spec s = layout_spec(&l, cmd, userns);
	s.limits.pids_max = TEST_PIDS_MAX;
	sandbox_signals_block(&s.child_mask);
	/* A bridge that does not exist is named; one in a masked directory is
	 * fine: it is opened before the mounts and bound into /run/agentsnet. */
	snprintf(hidden, sizeof(hidden), "%s/no-such-bridge", l.socket_dir);
	s.bridge = hidden;
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "no-such-bridge"));
	check_no_cgroup(s.id);
	s.bridge = l.bridge;
	s.dir = "/tmp/an-no-such-sandbox-dir";
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "open /tmp/an-no-such-sandbox-dir"));
	s.dir = l.dir;
	s.ca_path = "/tmp/an-no-such-ca.pem";
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "an-no-such-ca.pem"));
	s.ca_path = NULL;
	s.probe = "/tmp/an-no-such-probe";
	ck_assert_int_eq(sandbox_start(&s, &sb, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "an-no-such-probe"));
	check_no_cgroup(s.id);
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
	layout_make(&l, true);
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
 * (--term or --ignore-term); returns once the agent's signal handling is set.
 */
static void start_helper(struct layout *l, const char *mode, struct sandbox *sb)
{
	static char ready[PATH_MAX + 8];
	char err[SANDBOX_ERROR_BYTES];
	bool userns = sandbox_needs_userns();

	layout_make(l, userns);
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

/*
 * A ^C typed on the supervisor's terminal (SIGINT, si_code SI_KERNEL) reaches
 * the agent too: in a session of its own, the agent is no longer in the
 * terminal's foreground process group, so only forwarding gets it there.
 */
START_TEST(terminal_sigint_forwarded)
{
	if (!can_run(sandbox_needs_userns()))
		return;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct layout l;
		struct sandbox sb;
		int slave = -1, st = -1;
		int master = take_ctty(&slave);
		start_helper(&l, "--term", &sb);
		ck_assert_int_eq(write(master, "\x03", 1), 1); /* the line discipline's ^C */
		ck_assert_int_eq(sandbox_wait(&sb, &st), 0);
		layout_remove(&l);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 99);
	}
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 43); /* the agent's SIGINT handler */
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

/* Milliseconds since <t0>. */
static long long ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000LL + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The bridge was killed when the (shortened) grace period was over, <ms> after it began. */
static void killed_after_grace(int st, long long ms)
{
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %#x", st);
	ck_assert_int_ge(ms, TEST_GRACE_MS - 50);
	ck_assert_int_lt(ms, 5 * TEST_GRACE_MS);
}

/*
 * The operator's terminal hangs up while the agent ignores every signal: the
 * relay sees it (the terminal is not the supervisor's controlling one here, so
 * no SIGHUP of the kernel's comes), forwards SIGHUP, and the agent is killed
 * once the grace period is over.
 */
START_TEST(hangup_ends_sandbox)
{
	struct timespec t0;
	int p[2], st = 0;
	char b = 0;

	if (!can_run(sandbox_needs_userns()))
		return;
	int master = pty_master_new();
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct layout l;
		struct sandbox sb;
		int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
		close(master);
		for (int fd = 0; fd < 3; fd++)
			ck_assert_int_eq(dup2(slave, fd), fd);
		term_grace_ms = TEST_GRACE_MS;
		start_helper(&l, "--ignore-all", &sb);
		ck_assert_int_eq(write(p[1], "r", 1), 1);
		ck_assert_int_eq(sandbox_wait(&sb, &st), 0);
		layout_remove(&l);
		_exit(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : 99);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &b, 1), 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	close(master); /* the terminal hangs up */
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	long long ms = ms_since(&t0);
	close(p[0]);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	ck_assert_int_ge(ms, TEST_GRACE_MS - 50);
	ck_assert_int_lt(ms, 5 * TEST_GRACE_MS);
}
END_TEST

/* SIGHUP for `agentsnet run` (its terminal closed): forwarded, then the grace period. */
START_TEST(sighup_ends_sandbox)
{
	struct layout l;
	struct sandbox sb;
	struct timespec t0;
	int st = -1;

	if (!can_run(sandbox_needs_userns()))
		return;
	term_grace_ms = TEST_GRACE_MS;
	start_helper(&l, "--ignore-all", &sb);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	kill(getpid(), SIGHUP);
	ck_assert_int_eq(sandbox_wait(&sb, &st), 0);
	killed_after_grace(st, ms_since(&t0));
	layout_remove(&l);
}
END_TEST

/* A child that ignores SIGINT and SIGQUIT, for on_signal to send them to. */
static pid_t interrupt_target(void)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		signal(SIGINT, SIG_IGN);
		signal(SIGQUIT, SIG_IGN);
		for (int i = 0; i < 100; i++)
			usleep(100 * 1000);
		_exit(0);
	}
	return pid;
}

/*
 * One SIGINT (or SIGQUIT) is only forwarded: the agent may handle it as it
 * likes. A second one, from the operator's other shell, starts the grace
 * period, after which an agent that ignores them is killed.
 */
START_TEST(second_interrupt_kills)
{
	struct layout l;
	struct sandbox sb, fake = { .pid = interrupt_target() };
	struct waiter w = { .sb = &fake };
	struct timespec t0;
	int st = -1;

	on_signal(&w, SIGINT);
	ck_assert(!w.armed);
	on_signal(&w, SIGQUIT);
	ck_assert(w.armed);
	kill(fake.pid, SIGKILL);
	waitpid(fake.pid, NULL, 0);
	if (!can_run(sandbox_needs_userns()))
		return;
	term_grace_ms = TEST_GRACE_MS;
	start_helper(&l, "--ignore-all", &sb);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t op = fork();
	ck_assert_int_ge(op, 0);
	if (op == 0) {
		kill(getppid(), SIGINT);
		usleep(300 * 1000); /* the first one taken: two pending would be one */
		kill(getppid(), SIGINT);
		_exit(0);
	}
	ck_assert_int_eq(sandbox_wait(&sb, &st), 0);
	ck_assert_int_eq(waitpid(op, NULL, 0), op);
	killed_after_grace(st, ms_since(&t0) - 300);
	layout_remove(&l);
}
END_TEST

/*
 * Reads what <master> gives until EOF/EIO (the last slave closed) or 20 s;
 * once "ready" came, resizes the terminal (the supervisor gets SIGWINCH).
 */
static size_t master_drain(int master, char *buf, size_t cap)
{
	struct winsize ws = { .ws_row = 33, .ws_col = 99 };
	struct pollfd p = { .fd = master, .events = POLLIN };
	bool resized = false;
	size_t len = 0;

	while (len + 1 < cap && poll(&p, 1, 20000) == 1) {
		ssize_t n = read(master, buf + len, cap - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
		if (!resized && strstr(buf, "ready") != NULL) {
			ck_assert_int_eq(ioctl(master, TIOCSWINSZ, &ws), 0);
			resized = true;
		}
	}
	buf[len] = '\0';
	return len;
}

/* Runs `--tty` in a sandbox from a supervisor whose std descriptors are a terminal's. */
static _Noreturn void pty_supervisor(int master, int slave)
{
	struct layout l;
	struct termios before, after;

	close(master);
	for (int fd = 0; fd < 3; fd++)
		ck_assert_int_eq(dup2(slave, fd), fd);
	ck_assert_int_eq(tcgetattr(0, &before), 0);
	bool userns = sandbox_needs_userns();
	layout_make(&l, userns);
	char *cmd[] = { (char *)self_exe, "--tty", NULL };
	int st = run_in(&l, cmd, userns);
	ck_assert_int_eq(tcgetattr(0, &after), 0);
	layout_remove(&l);
	if (before.c_lflag != after.c_lflag || before.c_iflag != after.c_iflag ||
	    before.c_oflag != after.c_oflag)
		_exit(98); /* the caller's terminal was not restored */
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 99);
}

/*
 * The caller's terminal on stdin: the agent gets a pty of the sandbox's own
 * (its first, /dev/pts/0 of a new devpts), not the caller's; its output is
 * relayed, and so is a change of the caller's window size; the caller's
 * terminal settings are back after.
 */
START_TEST(pty_relayed)
{
	char out[4096];
	int slave = -1;

	if (!can_run(sandbox_needs_userns()))
		return;
	int master = pty_master_new();
	char name[64];
	snprintf(name, sizeof(name), "%s", ptsname(master));
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		ck_assert_int_ne(setsid(), -1);
		slave = open(name, O_RDWR);
		ck_assert_int_ge(slave, 0);
		pty_supervisor(master, slave);
	}
	master_drain(master, out, sizeof(out));
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(strstr(out, "tty=/dev/pts/0 ctty=none") != NULL, "output: %s", out);
	ck_assert_msg(strstr(out, "size=33x99") != NULL, "output: %s", out); /* SIGWINCH relayed */
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	close(master);
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

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v != NULL ? v : dflt;
}

/* /dev holds exactly dev_expected, read-only, and its nodes work. */
static bool dev_minimal(void)
{
	char buf[16];
	size_t seen = 0;

	DIR *d = opendir("/dev");
	if (d == NULL)
		return false;
	for (struct dirent *de = readdir(d); de != NULL; de = readdir(d)) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		bool known = false;
		for (size_t i = 0; i < AN_ARRAY_LEN(dev_expected) && !known; i++)
			known = strcmp(de->d_name, dev_expected[i]) == 0;
		if (!known)
			fprintf(stderr, "inside: /dev/%s is not expected\n", de->d_name);
		seen += known ? 1 : 1000;
	}
	closedir(d);
	if (open("/dev/an-added", O_CREAT | O_WRONLY | O_CLOEXEC, 0600) != -1 || errno != EROFS)
		return false; /* read-only: nothing is added to it */
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
	bool works = null >= 0 && write(null, "x", 1) == 1 && zero >= 0 &&
		     read(zero, buf, sizeof(buf)) == (ssize_t)sizeof(buf) && buf[0] == 0 &&
		     full >= 0 && write(full, "x", 1) == -1 && errno == ENOSPC &&
		     getrandom(buf, sizeof(buf), 0) == (ssize_t)sizeof(buf);
	close(null);
	close(zero);
	close(full);
	return seen == AN_ARRAY_LEN(dev_expected) && works;
}

/* A devpts of our own: only ptmx (and a relayed pty's 0), and a new pty can be made. */
static bool devpts_private(void)
{
	int n = count_entries("/dev/pts");
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	bool ok = (n == 1 || (n == 2 && access("/dev/pts/0", F_OK) == 0)) && m >= 0;
	if (m >= 0)
		close(m);
	return ok;
}

/* /tmp, /var/tmp and /dev/shm are empty (no host marker), ours to write, and private. */
static int shared_dirs_private(const char *tag)
{
	const char *dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };
	char path[PATH_MAX];

	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		if (count_entries(dirs[i]) != 0)
			return 16 + (int)i * 15; /* 16, 31, 46 */
		snprintf(path, sizeof(path), "%s/%s-inside", dirs[i], tag);
		int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
		if (fd == -1)
			return 32;
		close(fd);
	}
	return 0;
}

/* Not the host's IPC namespace: another one, its mqueue (empty) mounted, no host shm. */
static bool ipc_private(void)
{
	char ns[64];
	struct statfs sf;

	ssize_t n = readlink("/proc/self/ns/ipc", ns, sizeof(ns) - 1);
	if (n <= 0)
		return false;
	ns[n] = '\0';
	key_t key = (key_t)strtol(env_or("AN_SBX_SHM", "0"), NULL, 10);
	return strcmp(ns, env_or("AN_SBX_IPC", "")) != 0 && statfs("/dev/mqueue", &sf) == 0 &&
	       sf.f_type == TEST_MQUEUE_MAGIC && count_entries("/dev/mqueue") == 0 &&
	       shmget(key, 0, 0) == -1 && errno == ENOENT;
}

/* Not the caller's session keyring, and not its key. */
static bool keyring_fresh(void)
{
	long ring = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
	long host = strtol(env_or("AN_SBX_KEYRING", "0"), NULL, 10);
	long key = syscall(SYS_keyctl, KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING, "user",
			   env_or("AN_SBX_KEY", ""), 0);
	return ring > 0 && ring != host && key == -1 && errno == ENOKEY;
}

/* Our own cgroup's pids.max (v1 or v2) into <path>; false when we are in none. */
static bool own_pids_max(char *path, size_t cap)
{
	char line[512];
	bool found = false;

	FILE *f = fopen("/proc/self/cgroup", "re");
	if (f == NULL)
		return false;
	while (!found && fgets(line, sizeof(line), f) != NULL) {
		line[strcspn(line, "\n")] = '\0';
		const char *v1 = strstr(line, ":pids:/");
		if (v1 != NULL)
			snprintf(path, cap, "/sys/fs/cgroup/pids%s/pids.max", v1 + 6);
		else if (strncmp(line, "0::/", 4) == 0)
			snprintf(path, cap, "/sys/fs/cgroup%s/pids.max", line + 3);
		found = (v1 != NULL || strncmp(line, "0::/", 4) == 0) && access(path, F_OK) == 0;
	}
	fclose(f);
	return found;
}

/* /sys read-only: the agent cannot raise its pids limit, whoever owns the file. */
static bool sys_locked(void)
{
	struct statvfs sv;
	char path[PATH_MAX];

	if (statvfs("/sys", &sv) != 0 || !(sv.f_flag & ST_RDONLY))
		return false;
	if (!own_pids_max(path, sizeof(path)))
		return true; /* no pids cgroup of ours (the RLIMIT_NPROC runs) */
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0)
		close(fd);
	return fd == -1 && statvfs(path, &sv) == 0 && (sv.f_flag & ST_RDONLY);
}

/* Forks until the pids limit says EAGAIN: it must come, near the limit. */
static bool pids_limited(void)
{
	long limit = strtol(env_or("AN_SBX_PIDS", "0"), NULL, 10);
	long n = 0;

	if (limit <= 0)
		return false;
	for (; n < limit + 8; n++) {
		pid_t pid = fork();
		if (pid == 0) {
			pause();
			_exit(0);
		}
		if (pid == -1)
			break;
	}
	int err = errno;
	kill(-1, SIGKILL); /* PID 1: every other process of the namespace */
	while (wait(NULL) > 0)
		;
	if (err != EAGAIN || n >= limit + 8 || n < limit / 2)
		fprintf(stderr, "inside: %ld forks under a limit of %ld (%s)\n", n, limit,
			strerror(err));
	return err == EAGAIN && n <= limit && n >= limit / 2;
}

/* Queues SIGRTMIN (blocked) until the kernel refuses: how many it took. Consumes them after. */
static long sigpending_fill(void)
{
	struct timespec zero = { 0 };
	union sigval v = { .sival_int = 0 };
	sigset_t rt;
	long n = 0;

	sigemptyset(&rt);
	sigaddset(&rt, SIGRTMIN);
	sigprocmask(SIG_BLOCK, &rt, NULL);
	while (n < 4 * (long)SANDBOX_SIGPENDING_MAX && sigqueue(getpid(), SIGRTMIN, v) == 0)
		n++;
	int err = errno;
	while (sigtimedwait(&rt, NULL, &zero) == SIGRTMIN)
		;
	return err == EAGAIN ? n : -1;
}

/* Opens POSIX message queues of 10 x 8 KiB until the kernel refuses: how many it took. */
static long msgqueue_fill(void)
{
	struct mq_attr attr = { .mq_maxmsg = 10, .mq_msgsize = 8192 };
	char name[32];
	long n = 0;

	for (; n < 64; n++) {
		snprintf(name, sizeof(name), "/an-fill-%ld", n);
		mqd_t q = mq_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600, &attr);
		if (q == (mqd_t)-1)
			break;
		mq_close(q);
	}
	int err = errno;
	for (long i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "/an-fill-%ld", i);
		mq_unlink(name);
	}
	return err == EMFILE ? n : -1;
}

/*
 * The uid's allowances: this sandbox stops at its share, however much the
 * host's limits give. The kernel checks the uid's total (privileged: the
 * host's nobody, whose other processes may hold some already; so no queue at
 * all is no failure), against the limit of the process asking.
 */
static bool allowances_limited(void)
{
	const struct {
		int resource;
		rlim_t max;
	} lims[] = { { RLIMIT_SIGPENDING, SANDBOX_SIGPENDING_MAX },
		     { RLIMIT_MSGQUEUE, SANDBOX_MSGQUEUE_BYTES },
		     { RLIMIT_MEMLOCK, SANDBOX_MEMLOCK_BYTES } };
	struct rlimit rl;

	for (size_t i = 0; i < AN_ARRAY_LEN(lims); i++) {
		if (getrlimit(lims[i].resource, &rl) != 0 || rl.rlim_max > lims[i].max)
			return false;
	}
	long sigs = sigpending_fill(), queues = msgqueue_fill();
	if (sigs < 0 || sigs > (long)SANDBOX_SIGPENDING_MAX || queues < 0 ||
	    queues * 10 * 8192 > (long)SANDBOX_MSGQUEUE_BYTES) {
		fprintf(stderr, "inside: %ld signals queued, %ld message queues\n", sigs, queues);
		return false;
	}
	return true;
}

/* A cgroup namespace rooted at the sandbox's cgroup: every line of /proc/self/cgroup is "/". */
static bool cgroup_ns_root(void)
{
	char line[512];
	size_t n = 0, root = 0;

	FILE *f = fopen("/proc/self/cgroup", "re");
	if (f == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL) {
		n++;
		size_t len = strcspn(line, "\n");
		bool at_root = len >= 2 && line[len - 2] == ':' && line[len - 1] == '/';
		root += at_root;
		if (!at_root)
			fprintf(stderr, "inside: /proc/self/cgroup: %s", line);
	}
	fclose(f);
	return n > 0 && root == n;
}

/* Only lo under /sys/class/net (a sysfs of our own), no host cgroup tree, our own host name. */
static int host_hidden(void)
{
	char name[HOST_NAME_MAX + 1];

	if (count_entries("/sys/class/net") != 1 || access("/sys/class/net/lo", F_OK) != 0 ||
	    count_entries("/sys/fs/cgroup") > 0)
		return 44;
	if (gethostname(name, sizeof(name)) != 0 || strcmp(name, SANDBOX_HOSTNAME) != 0 ||
	    strcmp(name, env_or("AN_SBX_HOST", "")) == 0)
		return 45;
	return 0;
}

/* What an agent of the new checks must see (the envp-based runs of check_inside). */
static int inside_hardened(const char *bin_dir)
{
	struct statvfs sv;

	(void)bin_dir;
	if (strcmp(env_or("AN_SBX_ENV", ""), "yes") != 0 || getenv("AN_SBX_HOST_SECRET") != NULL)
		return 38; /* spec->envp, never environ (the checks below read it) */
	if (!ipc_private())
		return 27;
	if (!dev_minimal())
		return 28;
	if (!devpts_private())
		return 29;
	int ret = shared_dirs_private(env_or("AN_SBX_TAG", "x"));
	if (ret != 0)
		return ret;
	if (getsid(0) != getpid())
		return 33; /* a session of its own */
	if (open("/dev/tty", O_RDWR | O_CLOEXEC) != -1 || errno != ENXIO)
		return 34; /* and no controlling terminal */
	if (!keyring_fresh())
		return 35;
	if (getgroups(0, NULL) != (int)strtol(env_or("AN_SBX_GROUPS", "-1"), NULL, 10))
		return 36;
	if (access(SANDBOX_PROBE_PATH, X_OK) != 0 || statvfs(SANDBOX_PROBE_PATH, &sv) != 0 ||
	    !(sv.f_flag & ST_RDONLY))
		return 37;
	if (!sys_locked())
		return 40;
	if (!cgroup_ns_root())
		return 47;
	ret = host_hidden();
	if (ret != 0)
		return ret;
	if (!allowances_limited())
		return 46;
	if (!pids_limited())
		return 39;
	return 0;
}

/* <uid>: who the agent should be, as seen inside (0 in a user namespace). */
static int inside_main(const char *socket_dir, const char *uid, const char *bin_dir)
{
	char path[PATH_MAX], cwd[256];

	if (getpid() != 1)
		return 10;
	bool userns = strcmp(uid, "0") == 0;
	if (getuid() != (uid_t)strtoul(uid, NULL, 10) || geteuid() != getuid())
		return 25;
	snprintf(path, sizeof(path), "%s/rootfile", bin_dir);
	if (!userns && (open(path, O_WRONLY | O_APPEND) != -1 || errno != EACCES))
		return 26; /* root's file, mode 0644: not the agent's to write */
	snprintf(path, sizeof(path), "%s/service.sock", bin_dir);
	if (connect_unix(path) != -ECONNREFUSED)
		return 48; /* the host service's socket, masked by /dev/null */
	snprintf(path, sizeof(path), "%s/linked/service.sock", bin_dir);
	if (connect_unix(path) != -ECONNREFUSED)
		return 49; /* the same, reached through a symlinked directory */
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
	if (count_entries("/run") != 2 || count_entries("/run/agentsnet") != 3)
		return 15; /* agentsnet and lock; sandbox, bridge and probe (no CA here) */
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
	return inside_hardened(bin_dir);
}

static void on_term(int sig)
{
	(void)sig;
	_exit(42);
}

static void on_int(int sig)
{
	(void)sig;
	_exit(43);
}

/*
 * --tty: says which terminal stdin is and whether it has a controlling one,
 * makes it its controlling terminal, says "ready", then the window size once
 * a SIGWINCH came (10 s at most).
 */
static int tty_main(void)
{
	const char *name = ttyname(0);
	int fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
	bool none = fd == -1 && errno == ENXIO;
	struct timespec wait = { .tv_sec = 10 };
	struct winsize ws = { 0 };
	sigset_t winch;

	sigemptyset(&winch);
	sigaddset(&winch, SIGWINCH);
	sigprocmask(SIG_BLOCK, &winch, NULL);
	printf("tty=%s ctty=%s\n", name != NULL ? name : "(none)", none ? "none" : "some");
	/* As the bridge does for the agent: a window-size change signals the foreground. */
	if (ioctl(0, TIOCSCTTY, 0) == 0)
		printf("ready\n");
	fflush(stdout);
	if (sigtimedwait(&winch, NULL, &wait) == SIGWINCH && ioctl(0, TIOCGWINSZ, &ws) == 0)
		printf("size=%ux%u\n", (unsigned)ws.ws_row, (unsigned)ws.ws_col);
	fflush(stdout);
	return 0;
}

/*
 * --inside SOCKET_DIR UID BIN_DIR, --tty, or --term/--ignore-term/--ignore-all
 * READY_FILE (created once the handlers are set; --ignore-all ignores every
 * signal it can, as a hostile agent would).
 */
static int helper_main(int argc, char **argv)
{
	if (strcmp(argv[1], "--inside") == 0 && argc == 5)
		_exit(inside_main(argv[2], argv[3], argv[4]));
	if (strcmp(argv[1], "--tty") == 0)
		_exit(tty_main());
	if (argc != 3)
		_exit(51);
	if (strcmp(argv[1], "--term") == 0) {
		signal(SIGTERM, on_term);
		signal(SIGINT, on_int);
	} else if (strcmp(argv[1], "--ignore-all") == 0) {
		for (int sig = 1; sig < NSIG; sig++) {
			if (sig != SIGKILL && sig != SIGSTOP)
				signal(sig, SIG_IGN); /* glibc's own two say EINVAL */
		}
	} else {
		signal(SIGTERM, SIG_IGN);
	}
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
	tcase_add_test(t, bind_check);
	tcase_add_test(t, path_normal);
	tcase_add_test(t, user_parse);
	tcase_add_test(t, group_privileged);
	tcase_add_test(t, bridge_argv);
	tcase_add_test(t, bridge_argv_cap);
	tcase_add_test(t, signals);
	tcase_add_test(t, sysctls);
	tcase_add_test(t, userns_forbidden_by_sysctl);
	tcase_add_test(t, ww_find_tree);
	tcase_add_test(t, sockets_collapse_dirs);
	tcase_add_test(t, sockets_hide_coarse_dirs);
	tcase_add_test(t, ww_find_full);
	tcase_add_test(t, ww_find_long_mountinfo);
	tcase_add_test(t, ww_collapse);
	tcase_add_test(t, ww_budget_cut);
	tcase_add_test(t, mountinfo_parse);
	tcase_add_test(t, ww_find_host);
	suite_add_tcase(s, t);
	tcase_set_timeout(n, 40);
	tcase_add_test(n, inside_as_root);
	tcase_add_test(n, inside_as_root_in_userns);
	tcase_add_test(n, inside_as_nobody);
	tcase_add_test(n, exit_status_passes);
	tcase_add_test(n, setup_errors);
	tcase_add_test(n, userns_clone_refused);
	tcase_add_test(n, sigterm_forwarded);
	tcase_add_test(n, terminal_sigint_forwarded);
	tcase_add_test(n, sigterm_grace_then_kill);
	tcase_add_test(n, hangup_ends_sandbox);
	tcase_add_test(n, sighup_ends_sandbox);
	tcase_add_test(n, second_interrupt_kills);
	tcase_add_test(n, pty_relayed);
	suite_add_tcase(s, n);
	return s;
}

/*
 * The tests run this binary inside sandboxes, also as nobody: it must sit
 * where every user can reach it, which the build tree of a clone in a 0700
 * directory (mktemp -d) is not, and not below a world-writable directory,
 * which the sandbox replaces with an empty one. So it runs from a copy in a
 * 0755 directory of its own (under /var/lib as root, else $HOME), which also
 * holds every layout.
 */
static int copy_self(char *dir, size_t dir_cap, char *exe, size_t exe_cap)
{
	char buf[65536];

	const char *base = geteuid() == 0 ? "/var/lib" : getenv("HOME");
	if (base == NULL)
		return -1;
	snprintf(dir, dir_cap, "%s/an-sbx-test-XXXXXX", base);
	if (mkdtemp(dir) == NULL || chmod(dir, 0755) != 0)
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
	exe_dir_path = exe_dir;
	int rc = unit_run(sandbox_suite());
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", exe_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "sandbox test: could not remove %s\n", exe_dir);
	return rc;
}
