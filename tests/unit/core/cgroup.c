/*
 * Unit tests for core/cgroup.c: the making on fake hierarchies, then real cgroups.
 *
 * Fake: cgroup_create_env runs on plain directories under /tmp, with hooks
 * standing in for the kernel (a new cgroup gets its cgroup.procs, pids.max,
 * memory.* as plain files; they are taken away before its rmdir), so both
 * versions' layouts are checked on any machine: the limits and
 * subtree_control read back, the optional files (memsw, swap.max, oom.group)
 * written only when present, a missing hierarchy or controller refused only
 * when its limit is asked for, a live id refused without harm to it, a
 * failed create undone, the shared parent made again when another sandbox's
 * cleanup takes it away under a create, and no symlink ever followed.
 *
 * Real (as root, on whatever the host mounts at /sys/fs/cgroup): a child in
 * a cgroup with pids_max 8 forks until fork fails with EAGAIN, at exactly 8
 * processes in the cgroup, and with no limit forks 16; a child with memory_max 32 MiB is
 * OOM-killed touching 64 MiB, and without a limit is not; a live id is
 * refused; nobody can neither make a cgroup nor enter one, and a process put
 * in one cannot leave it or raise its limit once it is nobody; cgroup_remove
 * waits ~1 s on a busy cgroup and then says EBUSY, and removes it once empty;
 * cgroup_remove_now says EBUSY at once and keeps the cgroup for a later try; on
 * v1 the daemon's cgroup for another process is made below that process's own.
 * Every cgroup is named agentsnet/unit-<pid>-<test>; main() removes any a
 * failed test left, and fails if a passing one left any.
 *
 * Skipped (each records it with unit_skip() and returns): the twelve real tests
 * when not root or when the host has no cgroup hierarchy; real_v2_files on a
 * v1 host, so 1 of 24 on this project's test machine (v1 hybrid, its v2 tree
 * has no controller); real_v1_files, real_v1_nested and
 * real_v1_nested_under_another on a v2 host. The real pids, memory, exists,
 * unprivileged, leave, busy and remove_now tests run on either version.
 */
#include "../../../core/cgroup.c"

#include <check.h>
#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "tests/unit/unit.h"

#define MIB (1024u * 1024u)
/* A fake root: <run_dir>/root-XXXXXX. */
#define ROOT_BYTES 64

static pid_t main_pid;
/* The run's own directory: every fake root lives in it, and main removes it whole, so a
 * failed test (which ends before fake_root_remove) leaves nothing behind either. */
static char run_dir[32];

/* ---- The fake kernel. ---- */

static int fake_version;
static bool fake_swap = true;         /* memsw, swap.max and oom.group exist */
static bool fake_memory_limit = true; /* memory.limit_in_bytes exists (false: make v1 fail) */

static void fake_file(int dir_fd, const char *name, const char *text)
{
	int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void fake_made(int dir_fd, const char *path)
{
	fake_file(dir_fd, "cgroup.procs", "");
	if (fake_version == 2) {
		fake_file(dir_fd, "cgroup.controllers", "memory pids\n");
		fake_file(dir_fd, "cgroup.subtree_control", "\n");
		fake_file(dir_fd, "pids.max", "max\n");
		fake_file(dir_fd, "memory.max", "max\n");
		if (fake_swap) {
			fake_file(dir_fd, "memory.swap.max", "max\n");
			fake_file(dir_fd, "memory.oom.group", "0\n");
		}
	} else if (strstr(path, "/pids/") != NULL) {
		fake_file(dir_fd, "pids.max", "max\n");
	} else {
		if (fake_memory_limit)
			fake_file(dir_fd, "memory.limit_in_bytes", "9223372036854771712\n");
		if (fake_swap)
			fake_file(dir_fd, "memory.memsw.limit_in_bytes", "9223372036854771712\n");
	}
}

static void fake_unmaking(int parent_fd, const char *name)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return;
	DIR *d = fdopendir(fd);
	ck_assert_ptr_nonnull(d);
	for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
		if (e->d_type == DT_REG)
			ck_assert_int_eq(unlinkat(dirfd(d), e->d_name, 0), 0);
	}
	closedir(d);
}

static const struct cgroup_env fake_env = {
	.check_fs = false,
	.made = fake_made,
	.unmaking = fake_unmaking,
};

static int fake_create(struct cgroup_sandbox *cg, const char *root, const char *id,
		       uint64_t pids_max, uint64_t memory_max_bytes, char *err, size_t err_len)
{
	const struct cgroup_req rq = {
		.id = id,
		.pids_max = pids_max,
		.memory_max_bytes = memory_max_bytes,
		.env = &fake_env,
		.err = err,
		.err_len = err_len,
	};
	return cgroup_create_env(cg, root, fake_version, &rq);
}

static void put_file(const char *dir, const char *name, const char *text)
{
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	fake_file(fd, name, text);
	close(fd);
}

static void make_dir(const char *dir, const char *name)
{
	char path[PATH_MAX];

	ck_assert_int_eq(path_join(path, sizeof(path), dir, name), 0);
	ck_assert_int_eq(mkdir(path, 0755), 0);
}

/* A fake root for <version>: pids/ and (<memory>) memory/ for v1; the root's files for v2. */
static void fake_root(char *root, size_t cap, int version, bool memory)
{
	snprintf(root, cap, "%s/root-XXXXXX", run_dir);
	ck_assert_ptr_nonnull(mkdtemp(root));
	fake_version = version;
	fake_swap = true;
	fake_memory_limit = true;
	if (version == 2) {
		put_file(root, "cgroup.controllers",
			 "cpuset cpu io memory hugetlb pids rdma misc\n");
		put_file(root, "cgroup.subtree_control", "\n");
		return;
	}
	make_dir(root, "pids");
	if (memory)
		make_dir(root, "memory");
}

static void fake_root_remove(const char *root)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}

/*
 * The text of <path> (read to EOF: cgroup files say size 0, so unit_slurp's
 * fseek does not serve), a trailing newline dropped.
 */
static void read_text(const char *path, char *text, size_t cap)
{
	size_t len = 0;

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	while (len < cap - 1) {
		ssize_t n = read(fd, text + len, cap - 1 - len);
		ck_assert_msg(n >= 0, "read %s: %s", path, strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (len > 0 && text[len - 1] == '\n')
		len--;
	text[len] = '\0';
}

/* The file <dir>/<name> holds <want> (a trailing newline aside). */
static void expect_file(const char *dir, const char *name, const char *want)
{
	char path[PATH_MAX], text[CGROUP_LIST_BYTES];

	ck_assert_int_eq(path_join(path, sizeof(path), dir, name), 0);
	read_text(path, text, sizeof(text));
	ck_assert_msg(strcmp(text, want) == 0, "%s: \"%s\", want \"%s\"", path, text, want);
}

static bool exists(const char *dir, const char *name)
{
	char path[PATH_MAX];

	ck_assert_int_eq(path_join(path, sizeof(path), dir, name != NULL ? name : ""), 0);
	return faccessat(AT_FDCWD, path, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static void expect_contains(const char *text, const char *part)
{
	ck_assert_msg(strstr(text, part) != NULL, "\"%s\" lacks \"%s\"", text, part);
}

/* ---- Fake v1. ---- */

/*
 * The caller's own v1 cgroup, from its cgroup file: one line per hierarchy. A name that
 * holds a newline (a delegated hierarchy's user names its cgroups) makes a second line for
 * a controller: refused, never the first or the last guessed.
 */
START_TEST(own_v1_path_lines)
{
	char file[] = "/tmp/an-cgroup-file-XXXXXX", out[PATH_MAX];
	int fd = mkstemp(file);
	ck_assert_int_ge(fd, 0);
	const char *one = "5:memory:/a/b\n4:cpu,cpuacct:/c\n3:pids:/user.slice/x\n0::/u\n";
	ck_assert_int_eq(write(fd, one, strlen(one)), (ssize_t)strlen(one));
	ck_assert_int_eq(own_v1_path_in(file, "pids", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/user.slice/x");
	ck_assert_int_eq(own_v1_path_in(file, "memory", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/a/b");
	ck_assert_int_eq(own_v1_path_in(file, "cpuacct", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/c");
	ck_assert_int_eq(own_v1_path_in(file, "blkio", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/"); /* not listed */
	/* memory's cgroup named "b\n3:pids:/evil": pids claimed twice. */
	const char *two = "5:memory:/a/b\n3:pids:/evil\n3:pids:/user.slice/x\n";
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq(pwrite(fd, two, strlen(two), 0), (ssize_t)strlen(two));
	ck_assert_int_eq(own_v1_path_in(file, "pids", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(own_v1_path_in(file, "memory", out, sizeof(out)), 0);
	close(fd);
	unlink(file);
}
END_TEST

START_TEST(fake_v1_layout)
{
	char root[ROOT_BYTES], want[PATH_MAX], err[512];
	struct cgroup_sandbox cg;
	struct stat st;

	fake_root(root, sizeof(root), 1, true);
	ck_assert_int_eq(fake_create(&cg, root, "sbx-1", 8, 64 * MIB, err, sizeof(err)), 0);
	ck_assert_int_eq(cg.version, 1);
	snprintf(want, sizeof(want), "%s/pids/agentsnet/sbx-1", root);
	ck_assert_str_eq(cg.pids_dir, want);
	snprintf(want, sizeof(want), "%s/memory/agentsnet/sbx-1", root);
	ck_assert_str_eq(cg.memory_dir, want);
	expect_file(cg.pids_dir, "pids.max", "8");
	expect_file(cg.memory_dir, "memory.limit_in_bytes", "67108864");
	expect_file(cg.memory_dir, "memory.memsw.limit_in_bytes", "67108864");
	snprintf(want, sizeof(want), "%s/pids/agentsnet", root);
	ck_assert_int_eq(stat(want, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0755 & ~0022u);

	ck_assert_int_eq(cgroup_enter(&cg, 0, err, sizeof(err)), 0);
	expect_file(cg.pids_dir, "cgroup.procs", "0");
	expect_file(cg.memory_dir, "cgroup.procs", "0");
	ck_assert_int_eq(cgroup_enter(&cg, 4242, err, sizeof(err)), 0);
	expect_file(cg.pids_dir, "cgroup.procs", "4242");
	expect_file(cg.memory_dir, "cgroup.procs", "4242");

	struct cgroup_sandbox kept = cg;
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	ck_assert_int_eq(cg.version, 0);
	ck_assert(!exists(kept.pids_dir, NULL));
	ck_assert(!exists(kept.memory_dir, NULL));
	ck_assert(exists(want, NULL)); /* the shared parent stays */
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false),
			 0); /* version 0: nothing to do */
	fake_root_remove(root);
}
END_TEST

/* A limit of 0 writes nothing; no memsw file (swap not accounted) is no error. */
START_TEST(fake_v1_no_limit_no_memsw)
{
	char root[ROOT_BYTES], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 1, true);
	fake_swap = false;
	ck_assert_int_eq(fake_create(&cg, root, "a", 0, 0, err, sizeof(err)), 0);
	expect_file(cg.pids_dir, "pids.max", "max");
	expect_file(cg.memory_dir, "memory.limit_in_bytes", "9223372036854771712");
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	ck_assert_int_eq(fake_create(&cg, root, "b", 16, 32 * MIB, err, sizeof(err)), 0);
	expect_file(cg.memory_dir, "memory.limit_in_bytes", "33554432");
	ck_assert(!exists(cg.memory_dir, "memory.memsw.limit_in_bytes"));
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	fake_root_remove(root);
}
END_TEST

/* No memory hierarchy: fine without a memory limit, refused (naming it) with one. */
START_TEST(fake_v1_no_memory_hierarchy)
{
	char root[ROOT_BYTES], parent[PATH_MAX], want[PATH_MAX], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 1, false);
	ck_assert_int_eq(fake_create(&cg, root, "a", 8, 0, err, sizeof(err)), 0);
	ck_assert_str_eq(cg.memory_dir, "");
	expect_file(cg.pids_dir, "pids.max", "8");
	ck_assert_int_eq(cgroup_enter(&cg, 0, err, sizeof(err)), 0);
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);

	ck_assert_int_eq(fake_create(&cg, root, "b", 8, 64 * MIB, err, sizeof(err)), -ENOENT);
	snprintf(want, sizeof(want), "%s/memory: no cgroup v1 memory hierarchy", root);
	expect_contains(err, want);
	ck_assert_int_eq(cg.version, 0);
	snprintf(parent, sizeof(parent), "%s/pids/agentsnet", root);
	ck_assert(!exists(parent, "b")); /* the pids cgroup made first is undone */
	fake_root_remove(root);
}
END_TEST

/* A write that fails after both directories were made: both are removed. */
START_TEST(fake_v1_undo)
{
	char root[ROOT_BYTES], parent[PATH_MAX], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 1, true);
	fake_memory_limit = false;
	ck_assert_int_eq(fake_create(&cg, root, "u", 8, 64 * MIB, err, sizeof(err)), -ENOENT);
	expect_contains(err, "open ");
	expect_contains(err, "/memory/agentsnet/u/memory.limit_in_bytes: No such file");
	ck_assert_int_eq(cg.version, 0);
	ck_assert_str_eq(cg.pids_dir, "");
	snprintf(parent, sizeof(parent), "%s/pids/agentsnet", root);
	ck_assert(!exists(parent, "u"));
	snprintf(parent, sizeof(parent), "%s/memory/agentsnet", root);
	ck_assert(!exists(parent, "u"));
	fake_root_remove(root);
}
END_TEST

/* How many more times parent_taken_away removes the shared parent it was found. */
static int parent_removals;

/* A concurrent sandbox's cleanup (v1, the parent empty) taking the shared parent away. */
static void parent_taken_away(int base_fd)
{
	if (parent_removals == 0)
		return;
	parent_removals--;
	fake_unmaking(base_fd, "agentsnet");
	ck_assert_int_eq(unlinkat(base_fd, "agentsnet", AT_REMOVEDIR), 0);
}

/*
 * The shared parent found, then taken away before it is opened (another
 * sandbox's cleanup): the make goes round and makes it again, in each
 * hierarchy, and the sandbox's cgroup has its limits.
 */
START_TEST(fake_v1_parent_taken_away)
{
	char root[ROOT_BYTES], err[512];
	struct cgroup_sandbox cg;
	const struct cgroup_env env = {
		.made = fake_made,
		.unmaking = fake_unmaking,
		.parent_found = parent_taken_away,
	};
	struct cgroup_req rq = {
		.id = "first",
		.pids_max = 8,
		.memory_max_bytes = 64 * MIB,
		.env = &fake_env,
		.err = err,
		.err_len = sizeof(err),
	};

	fake_root(root, sizeof(root), 1, true);
	ck_assert_int_eq(cgroup_create_env(&cg, root, 1, &rq), 0); /* the parents made */
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	rq.env = &env;
	rq.id = "second";
	parent_removals = 2; /* the pids parent, then the memory one */
	ck_assert_msg(cgroup_create_env(&cg, root, 1, &rq) == 0, "%s", err);
	ck_assert_int_eq(parent_removals, 0);
	expect_file(cg.pids_dir, "pids.max", "8");
	expect_file(cg.memory_dir, "memory.limit_in_bytes", "67108864");
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	fake_root_remove(root);
}
END_TEST

/* A live id is refused, and the cgroup that holds it keeps its limits and its directory. */
START_TEST(fake_exists)
{
	char root[ROOT_BYTES], want[PATH_MAX], err[512];
	struct cgroup_sandbox cg, again;

	fake_root(root, sizeof(root), 1, true);
	ck_assert_int_eq(fake_create(&cg, root, "live", 8, 64 * MIB, err, sizeof(err)), 0);
	ck_assert_int_eq(fake_create(&again, root, "live", 4, 32 * MIB, err, sizeof(err)), -EEXIST);
	snprintf(want, sizeof(want), "mkdir %s/pids/agentsnet/live: File exists", root);
	ck_assert_str_eq(err, want);
	ck_assert_int_eq(again.version, 0);
	expect_file(cg.pids_dir, "pids.max", "8");
	expect_file(cg.memory_dir, "memory.limit_in_bytes", "67108864");
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	fake_root_remove(root);
}
END_TEST

/* No level is ever reached through a symlink: not to make, enter, nor remove. */
START_TEST(fake_symlinks)
{
	char root[ROOT_BYTES], link[PATH_MAX], elsewhere[PATH_MAX], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 1, true);
	make_dir(root, "elsewhere");
	snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", root);
	snprintf(link, sizeof(link), "%s/pids/agentsnet", root);
	ck_assert_int_eq(symlink(elsewhere, link), 0);
	ck_assert_int_lt(fake_create(&cg, root, "s", 8, 0, err, sizeof(err)), 0);
	expect_contains(err, link);
	ck_assert(!exists(elsewhere, "s"));

	/* A made cgroup swapped for a link: enter and remove refuse it. */
	ck_assert_int_eq(unlink(link), 0);
	ck_assert_int_eq(fake_create(&cg, root, "t", 8, 0, err, sizeof(err)), 0);
	put_file(elsewhere, "cgroup.procs", "");
	make_dir(elsewhere, "keep");
	snprintf(link, sizeof(link), "%s/pids/agentsnet/t", root);
	fake_unmaking(AT_FDCWD, link);
	ck_assert_int_eq(rmdir(link), 0);
	ck_assert_int_eq(symlink(elsewhere, link), 0);
	ck_assert_int_lt(cgroup_enter(&cg, 0, err, sizeof(err)), 0);
	expect_contains(err, link);
	expect_file(elsewhere, "cgroup.procs", "");
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), -ENOTDIR);
	ck_assert(exists(elsewhere, "keep"));
	fake_root_remove(root);
}
END_TEST

/* The fake's plain directories are not cgroup file systems: the kernel's env refuses them. */
START_TEST(fake_not_a_cgroup_fs)
{
	char root[ROOT_BYTES], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 1, true);
	ck_assert_int_eq(cgroup_create(&cg, root, "x", 8, 0, err, sizeof(err)), -ENOENT);
	expect_contains(err, root);
	expect_contains(err, "no cgroup hierarchy");
	ck_assert_int_eq(cg.version, 0);
	ck_assert(!exists(root, "pids/agentsnet"));
	fake_root_remove(root);
}
END_TEST

/* ---- Fake v2. ---- */

START_TEST(fake_v2_layout)
{
	char root[ROOT_BYTES], parent[PATH_MAX], want[PATH_MAX], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 2, false);
	ck_assert_int_eq(fake_create(&cg, root, "sbx-2", 8, 64 * MIB, err, sizeof(err)), 0);
	ck_assert_int_eq(cg.version, 2);
	snprintf(parent, sizeof(parent), "%s/agentsnet", root);
	snprintf(want, sizeof(want), "%s/agentsnet/sbx-2", root);
	ck_assert_str_eq(cg.pids_dir, want);
	ck_assert_str_eq(cg.memory_dir, "");
	expect_file(root, "cgroup.subtree_control", "+pids +memory");
	expect_file(parent, "cgroup.subtree_control", "+pids +memory");
	expect_file(parent, "cgroup.procs", ""); /* no internal process */
	expect_file(cg.pids_dir, "pids.max", "8");
	expect_file(cg.pids_dir, "memory.max", "67108864");
	expect_file(cg.pids_dir, "memory.swap.max", "0");
	expect_file(cg.pids_dir, "memory.oom.group", "1");
	ck_assert_int_eq(cgroup_enter(&cg, 0, err, sizeof(err)), 0);
	expect_file(cg.pids_dir, "cgroup.procs", "0");
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	ck_assert(!exists(want, NULL));
	ck_assert(exists(parent, NULL));
	fake_root_remove(root);
}
END_TEST

/* Controllers already on (systemd's root) are not written again; no swap.max is no error. */
START_TEST(fake_v2_already_on_no_swap)
{
	char root[ROOT_BYTES], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 2, false);
	fake_swap = false;
	snprintf(err, sizeof(err), "%s/cgroup.subtree_control", root);
	ck_assert_int_eq(unlink(err), 0);
	put_file(root, "cgroup.subtree_control", "cpu memory pids\n");
	ck_assert_int_eq(fake_create(&cg, root, "a", 8, 64 * MIB, err, sizeof(err)), 0);
	expect_file(root, "cgroup.subtree_control", "cpu memory pids");
	expect_file(cg.pids_dir, "memory.max", "67108864");
	ck_assert(!exists(cg.pids_dir, "memory.swap.max"));
	ck_assert(!exists(cg.pids_dir, "memory.oom.group"));
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	fake_root_remove(root);
}
END_TEST

/* A controller the root does not offer: refused (naming it) only when its limit is asked for. */
START_TEST(fake_v2_missing_controller)
{
	char root[ROOT_BYTES], want[PATH_MAX], err[512];
	struct cgroup_sandbox cg;

	fake_root(root, sizeof(root), 2, false);
	snprintf(want, sizeof(want), "%s/cgroup.controllers", root);
	ck_assert_int_eq(unlink(want), 0);
	put_file(root, "cgroup.controllers", "cpu memory\n");
	ck_assert_int_eq(fake_create(&cg, root, "a", 8, 0, err, sizeof(err)), -ENOENT);
	snprintf(want, sizeof(want), "%s/cgroup.controllers: no pids controller", root);
	ck_assert_str_eq(err, want);
	ck_assert(!exists(root, "agentsnet"));
	expect_file(root, "cgroup.subtree_control", "");

	ck_assert_int_eq(fake_create(&cg, root, "b", 0, 64 * MIB, err, sizeof(err)), 0);
	expect_file(root, "cgroup.subtree_control", "+memory");
	expect_file(cg.pids_dir, "pids.max", "max");
	ck_assert_int_eq(cgroup_remove_env(&cg, &fake_env, CGROUP_RMDIR_TRIES, false), 0);
	fake_root_remove(root);
}
END_TEST

START_TEST(word_lists)
{
	ck_assert(has_word("cpu memory pids\n", "pids"));
	ck_assert(has_word("memory", "memory"));
	ck_assert(has_word("+pids +memory", "pids"));
	ck_assert(!has_word("cpu hugetlb\n", "pids"));
	ck_assert(!has_word("mempids memoryx\n", "pids"));
	ck_assert(!has_word("mempids memoryx\n", "memory"));
	ck_assert(!has_word("", "pids"));
}
END_TEST

/* ---- Real cgroups (root only). ---- */

static bool real_ready(void)
{
	char base[PATH_MAX], err[512];
	const struct cgroup_req rq = { .err = err, .err_len = sizeof(err) };

	if (geteuid() != 0) {
		unit_skip("real cgroups need root");
		return false;
	}
	if (cgroup_detect(CGROUP_ROOT_DEFAULT, base, sizeof(base), &rq) < 0) {
		unit_skip("real cgroups: %s", err);
		return false;
	}
	return true;
}

static int real_version(void)
{
	char base[PATH_MAX];
	const struct cgroup_req rq = { 0 };

	return cgroup_detect(CGROUP_ROOT_DEFAULT, base, sizeof(base), &rq);
}

static const char *unit_id(char *id, size_t cap, const char *tag)
{
	snprintf(id, cap, "unit-%d-%s", (int)main_pid, tag);
	return id;
}

static void real_create(struct cgroup_sandbox *cg, const char *tag, uint64_t pids_max,
			uint64_t memory_max_bytes)
{
	char id[64], err[512];

	int rc = cgroup_create(cg, NULL, unit_id(id, sizeof(id), tag), pids_max, memory_max_bytes,
			       err, sizeof(err));
	ck_assert_msg(rc == 0, "cgroup_create %s: %d %s", id, rc, err);
}

static void real_remove(struct cgroup_sandbox *cg)
{
	struct cgroup_sandbox kept = *cg;

	ck_assert_int_eq(cgroup_remove(cg), 0);
	ck_assert(!exists(kept.pids_dir, NULL));
	if (kept.memory_dir[0] != '\0')
		ck_assert(!exists(kept.memory_dir, NULL));
}

/* The directory holding <cg>'s pids (v1) or memory files. */
static const char *memory_dir(const struct cgroup_sandbox *cg)
{
	return cg->version == 1 ? cg->memory_dir : cg->pids_dir;
}

struct fork_result {
	int count; /* children forked; -1: cgroup_enter failed */
	int err;   /* errno of the fork that failed, 0 when <want> were forked */
};

/* In a child: enter <cg>, fork up to <want> children that wait, report on <out>, end them. */
static _Noreturn void fork_many(const struct cgroup_sandbox *cg, int want, int out)
{
	struct fork_result r = { 0, 0 };
	char err[512], c;
	int hold[2];

	if (cgroup_enter(cg, 0, err, sizeof(err)) != 0 || pipe(hold) != 0) {
		r.count = -1;
		_exit(write(out, &r, sizeof(r)) == sizeof(r) ? 1 : 2);
	}
	while (r.count < want) {
		pid_t pid = fork();
		if (pid == -1) {
			r.err = errno;
			break;
		}
		if (pid == 0) {
			close(hold[1]);
			_exit(read(hold[0], &c, 1) == 0 ? 0 : 1);
		}
		r.count++;
	}
	ssize_t n = write(out, &r, sizeof(r));
	close(hold[1]);
	while (wait(NULL) > 0)
		continue;
	_exit(n == sizeof(r) ? 0 : 1);
}

static struct fork_result run_fork_many(const struct cgroup_sandbox *cg, int want)
{
	struct fork_result r;
	int p[2], status;

	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		close(p[0]);
		fork_many(cg, want, p[1]);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &r, sizeof(r)), sizeof(r));
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	return r;
}

START_TEST(real_pids_limit)
{
	struct cgroup_sandbox cg;

	if (!real_ready())
		return;
	real_create(&cg, "pids8", 8, 0);
	expect_file(cg.pids_dir, "pids.max", "8");
	struct fork_result r = run_fork_many(&cg, 16);
	ck_assert_int_eq(r.err, EAGAIN);
	ck_assert_int_ge(r.count, 1);
	ck_assert_int_eq(r.count + 1, 8); /* the entered child is one of the 8 */
	real_remove(&cg);
}
END_TEST

/* Without the limit the same child forks 16: real_pids_limit's failures are the limit's. */
START_TEST(real_pids_unlimited)
{
	struct cgroup_sandbox cg;

	if (!real_ready())
		return;
	real_create(&cg, "pids0", 0, 0);
	expect_file(cg.pids_dir, "pids.max", "max");
	struct fork_result r = run_fork_many(&cg, 16);
	ck_assert_int_eq(r.err, 0);
	ck_assert_int_eq(r.count, 16);
	real_remove(&cg);
}
END_TEST

/* A child that enters <cg> and touches <bytes> of fresh memory; its wait status. */
static int run_toucher(const struct cgroup_sandbox *cg, size_t bytes)
{
	char err[512];
	int status;

	pid_t pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		if (cgroup_enter(cg, 0, err, sizeof(err)) != 0)
			_exit(2);
		char *m =
		    mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			_exit(3);
		for (size_t i = 0; i < bytes; i += 4096)
			m[i] = 1;
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

START_TEST(real_memory_limit)
{
	struct cgroup_sandbox cg;

	if (!real_ready())
		return;
	real_create(&cg, "mem32", 0, 32 * MIB);
	expect_file(memory_dir(&cg), cg.version == 1 ? "memory.limit_in_bytes" : "memory.max",
		    "33554432");
	int status = run_toucher(&cg, 64 * MIB);
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		      "touching 64 MiB under a 32 MiB limit: status %#x", status);
	real_remove(&cg);
}
END_TEST

START_TEST(real_memory_unlimited)
{
	struct cgroup_sandbox cg;

	if (!real_ready())
		return;
	real_create(&cg, "mem0", 0, 0);
	int status = run_toucher(&cg, 64 * MIB);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
	real_remove(&cg);
}
END_TEST

START_TEST(real_v1_files)
{
	struct cgroup_sandbox cg;

	if (!real_ready())
		return;
	if (real_version() != 1) {
		unit_skip("the host's cgroups are v2");
		return;
	}
	real_create(&cg, "v1", 8, 64 * MIB);
	ck_assert_str_ne(cg.memory_dir, "");
	if (exists(cg.memory_dir, "memory.memsw.limit_in_bytes"))
		expect_file(cg.memory_dir, "memory.memsw.limit_in_bytes", "67108864");
	real_remove(&cg);
}
END_TEST

START_TEST(real_v2_files)
{
	char parent[PATH_MAX], path[PATH_MAX];
	struct cgroup_sandbox cg;

	if (!real_ready())
		return;
	/* This machine (v1 hybrid, no controller in its v2 tree) always skips here. */
	if (real_version() != 2) {
		unit_skip("the host's cgroups are v1");
		return;
	}
	real_create(&cg, "v2", 8, 64 * MIB);
	ck_assert_str_eq(cg.memory_dir, "");
	if (exists(cg.pids_dir, "memory.swap.max"))
		expect_file(cg.pids_dir, "memory.swap.max", "0");
	if (exists(cg.pids_dir, "memory.oom.group"))
		expect_file(cg.pids_dir, "memory.oom.group", "1");
	snprintf(parent, sizeof(parent), "%s", cg.pids_dir);
	*strrchr(parent, '/') = '\0';
	char on[CGROUP_LIST_BYTES];
	ck_assert_int_eq(path_join(path, sizeof(path), parent, "cgroup.subtree_control"), 0);
	read_text(path, on, sizeof(on));
	ck_assert(has_word(on, "pids") && has_word(on, "memory"));
	real_remove(&cg);
}
END_TEST

START_TEST(real_exists)
{
	char id[64], err[512];
	struct cgroup_sandbox cg, again;

	if (!real_ready())
		return;
	real_create(&cg, "live", 8, 0);
	ck_assert_int_eq(
	    cgroup_create(&again, NULL, unit_id(id, sizeof(id), "live"), 4, 0, err, sizeof(err)),
	    -EEXIST);
	expect_contains(err, "File exists");
	expect_contains(err, id);
	expect_file(cg.pids_dir, "pids.max", "8");
	real_remove(&cg);
}
END_TEST

static void become_nobody(void)
{
	if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
	    setresuid(65534, 65534, 65534) != 0)
		_exit(99);
}

struct nobody_result {
	int create_rc;
	int enter_rc;
	char create_err[512];
	char enter_err[512];
};

/* nobody can neither make a cgroup nor move itself into one root made. */
START_TEST(real_unprivileged)
{
	struct cgroup_sandbox cg, mine;
	struct nobody_result r;
	char id[64];
	int p[2], status;

	if (!real_ready())
		return;
	real_create(&cg, "root-made", 8, 0);
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		become_nobody();
		r.create_rc = cgroup_create(&mine, NULL, unit_id(id, sizeof(id), "nobody"), 8, 0,
					    r.create_err, sizeof(r.create_err));
		r.enter_rc = cgroup_enter(&cg, 0, r.enter_err, sizeof(r.enter_err));
		_exit(write(p[1], &r, sizeof(r)) == sizeof(r) ? 0 : 1);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &r, sizeof(r)), sizeof(r));
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(status, 0);
	ck_assert_msg(r.create_rc == -EACCES || r.create_rc == -EPERM, "create: %d %s", r.create_rc,
		      r.create_err);
	expect_contains(r.create_err, "mkdir " CGROUP_ROOT_DEFAULT "/");
	expect_contains(r.create_err, unit_id(id, sizeof(id), "nobody"));
	expect_contains(r.create_err, strerror(-r.create_rc));
	ck_assert_msg(r.enter_rc == -EACCES || r.enter_rc == -EPERM, "enter: %d %s", r.enter_rc,
		      r.enter_err);
	expect_contains(r.enter_err, "/cgroup.procs: ");
	real_remove(&cg);
}
END_TEST

/* The bits of what a process in the cgroup could not do once nobody. */
#define LEAVE_STILL_IN 1 /* /proc/self/cgroup names the sandbox's cgroup */
#define LEAVE_NO_OUT   2 /* the hierarchy root's cgroup.procs refused */
#define LEAVE_NO_RAISE 4 /* its own pids.max refused */
#define LEAVE_NO_ELSE  8 /* cgroup_enter of another (looser) cgroup refused */
#define LEAVE_ALL      15

static int leave_attempts(const struct cgroup_sandbox *cg, const struct cgroup_sandbox *loose,
			  const char *id)
{
	char hierarchy[PATH_MAX], path[PATH_MAX], err[512], text[4096];
	int bits = 0;

	/* <hierarchy>/agentsnet/<id> -> <hierarchy>/cgroup.procs */
	snprintf(hierarchy, sizeof(hierarchy), "%s", cg->pids_dir);
	for (int i = 0; i < 2; i++)
		*strrchr(hierarchy, '/') = '\0';
	if (path_join(path, sizeof(path), hierarchy, "cgroup.procs") != 0)
		return 0;
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd == -1 && errno == EACCES)
		bits |= LEAVE_NO_OUT;
	fd = openat(AT_FDCWD, cg->pids_dir, O_PATH | O_DIRECTORY);
	if (write_at(fd, cg->pids_dir, "pids.max", "max", false, err, sizeof(err)) == -EACCES)
		bits |= LEAVE_NO_RAISE;
	if (cgroup_enter(loose, 0, err, sizeof(err)) == -EACCES)
		bits |= LEAVE_NO_ELSE;
	fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd == -1 ? -1 : read(fd, text, sizeof(text) - 1);
	text[n > 0 ? n : 0] = '\0';
	if (strstr(text, id) != NULL)
		bits |= LEAVE_STILL_IN;
	return bits;
}

START_TEST(real_cannot_leave)
{
	struct cgroup_sandbox cg, loose;
	char id[64], err[512];
	int status;

	if (!real_ready())
		return;
	real_create(&cg, "tight", 8, 32 * MIB);
	real_create(&loose, "loose", 0, 0);
	pid_t pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		if (cgroup_enter(&cg, 0, err, sizeof(err)) != 0)
			_exit(100);
		become_nobody();
		_exit(leave_attempts(&cg, &loose, unit_id(id, sizeof(id), "tight")));
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), LEAVE_ALL);
	real_remove(&loose);
	real_remove(&cg);
}
END_TEST

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A cgroup with a live process: EBUSY after ~1 s of retries; once it is reaped, removed. */
/* A child that enters <cg> and waits: its pid; closing *<release> lets it exit 0. */
static pid_t child_in(const struct cgroup_sandbox *cg, int *release)
{
	char err[512], c = 'x';
	int hold[2], ready[2];

	ck_assert_int_eq(pipe(hold), 0);
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		close(hold[1]);
		if (cgroup_enter(cg, 0, err, sizeof(err)) != 0 || write(ready[1], &c, 1) != 1)
			_exit(2);
		_exit(read(hold[0], &c, 1) == 0 ? 0 : 1);
	}
	close(hold[0]);
	close(ready[1]);
	/* Once the child is in: a remove racing its enter would find the cgroup empty. */
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	close(ready[0]);
	*release = hold[1];
	return pid;
}

/* Lets child_in's <pid> exit and reaps it: it must have been in its cgroup. */
static void child_end(pid_t pid, int release)
{
	int status;

	close(release);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(status, 0);
}

START_TEST(real_remove_busy)
{
	struct cgroup_sandbox cg;
	int release;

	if (!real_ready())
		return;
	real_create(&cg, "busy", 8, 32 * MIB);
	pid_t pid = child_in(&cg, &release);
	struct cgroup_sandbox copy = cg;
	double t0 = now_s();
	ck_assert_int_eq(cgroup_remove(&copy), -EBUSY);
	ck_assert_double_ge(now_s() - t0, 0.8);
	ck_assert_int_eq(copy.version, 0);
	ck_assert(exists(cg.pids_dir, NULL));
	child_end(pid, release);
	real_remove(&cg);
}
END_TEST

/* v1: a sandbox made by a caller in cgroup A is made below A, inside A's limits. */
START_TEST(real_v1_nested)
{
	struct cgroup_sandbox outer;
	char id[64], err[512], want[PATH_MAX + 128];

	if (!real_ready())
		return;
	if (real_version() != 1) {
		unit_skip("the host's cgroups are v2");
		return;
	}
	real_create(&outer, "outer", 64, 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct cgroup_sandbox inner;
		if (cgroup_enter(&outer, 0, err, sizeof(err)) != 0 ||
		    cgroup_create(&inner, NULL, unit_id(id, sizeof(id), "inner"), 8, 0, err,
				  sizeof(err)) != 0)
			_exit(2);
		snprintf(want, sizeof(want), "%s/%s/%s", outer.pids_dir, CGROUP_PARENT_NAME, id);
		int same = strcmp(inner.pids_dir, want) == 0;
		_exit(cgroup_remove(&inner) == 0 && same ? 0 : 3);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "a cgroup made from inside %s was not made below it (status %d)",
		      outer.pids_dir, st);
	real_remove(&outer);
}
END_TEST

/* v1: the daemon's cgroup for another process is made below that process's own. */
START_TEST(real_v1_nested_under_another)
{
	struct cgroup_sandbox outer, inner;
	char id[64], err[512], want[PATH_MAX + 128];
	int release;

	if (!real_ready())
		return;
	if (real_version() != 1) {
		unit_skip("the host's cgroups are v2");
		return;
	}
	real_create(&outer, "outer2", 64, 0);
	pid_t pid = child_in(&outer, &release);
	int rc = cgroup_create_under(&inner, NULL, unit_id(id, sizeof(id), "under"), pid, 8, 0, err,
				     sizeof(err));
	ck_assert_msg(rc == 0, "cgroup_create_under: %d %s", rc, err);
	snprintf(want, sizeof(want), "%s/%s/%s", outer.pids_dir, CGROUP_PARENT_NAME, id);
	ck_assert_str_eq(inner.pids_dir, want);
	ck_assert_int_eq(cgroup_enter(&inner, pid, err, sizeof(err)), 0);
	child_end(pid, release);
	real_remove(&inner);
	real_remove(&outer);
}
END_TEST

/* cgroup_remove_now: one try; a busy cgroup stays in <cg> for the next, then goes. */
START_TEST(real_remove_now)
{
	struct cgroup_sandbox cg;
	int release;

	if (!real_ready())
		return;
	real_create(&cg, "now", 8, 32 * MIB);
	pid_t pid = child_in(&cg, &release);
	struct cgroup_sandbox kept = cg;
	ck_assert_int_eq(cgroup_remove_now(&cg), -EBUSY);
	ck_assert_int_ne(cg.version, 0);
	ck_assert_str_eq(cg.pids_dir, kept.pids_dir);
	ck_assert(exists(kept.pids_dir, NULL));
	child_end(pid, release);
	int rc = -EBUSY;
	for (int i = 0; i < 100 && rc == -EBUSY; i++) {
		rc = cgroup_remove_now(&cg);
		if (rc == -EBUSY)
			usleep(10000);
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(cg.version, 0);
	ck_assert(!exists(kept.pids_dir, NULL));
}
END_TEST

static Suite *cgroup_suite(void)
{
	Suite *s = suite_create("cgroup");
	TCase *f = tcase_create("fake");
	tcase_add_test(f, own_v1_path_lines);
	tcase_add_test(f, fake_v1_layout);
	tcase_add_test(f, fake_v1_no_limit_no_memsw);
	tcase_add_test(f, fake_v1_no_memory_hierarchy);
	tcase_add_test(f, fake_v1_undo);
	tcase_add_test(f, fake_v1_parent_taken_away);
	tcase_add_test(f, fake_exists);
	tcase_add_test(f, fake_symlinks);
	tcase_add_test(f, fake_not_a_cgroup_fs);
	tcase_add_test(f, fake_v2_layout);
	tcase_add_test(f, fake_v2_already_on_no_swap);
	tcase_add_test(f, fake_v2_missing_controller);
	tcase_add_test(f, word_lists);
	suite_add_tcase(s, f);
	TCase *r = tcase_create("real");
	tcase_set_timeout(r, 30);
	tcase_add_test(r, real_pids_limit);
	tcase_add_test(r, real_pids_unlimited);
	tcase_add_test(r, real_memory_limit);
	tcase_add_test(r, real_memory_unlimited);
	tcase_add_test(r, real_v1_files);
	tcase_add_test(r, real_v2_files);
	tcase_add_test(r, real_exists);
	tcase_add_test(r, real_unprivileged);
	tcase_add_test(r, real_cannot_leave);
	tcase_add_test(r, real_remove_busy);
	tcase_add_test(r, real_v1_nested);
	tcase_add_test(r, real_v1_nested_under_another);
	tcase_add_test(r, real_remove_now);
	suite_add_tcase(s, r);
	return s;
}

/* Removes every agentsnet/unit-<main_pid>-* cgroup a test left; returns how many there were. */
static int sweep(void)
{
	static const char *const parents[] = {
		CGROUP_ROOT_DEFAULT "/pids/" CGROUP_PARENT_NAME,
		CGROUP_ROOT_DEFAULT "/memory/" CGROUP_PARENT_NAME,
		CGROUP_ROOT_DEFAULT "/" CGROUP_PARENT_NAME,
		CGROUP_ROOT_DEFAULT "/unified/" CGROUP_PARENT_NAME,
	};
	char prefix[64], path[PATH_MAX];
	int left = 0;

	char own[2][PATH_MAX + 64];
	const char *names[2] = { "pids", "memory" };
	snprintf(prefix, sizeof(prefix), "unit-%d-", (int)main_pid);
	for (size_t i = 0; i < AN_ARRAY_LEN(parents) + 2; i++) {
		const char *parent = i < AN_ARRAY_LEN(parents) ? parents[i] : NULL;
		if (parent == NULL) { /* v1: below this process's own cgroup (own_v1_path) */
			size_t k = i - AN_ARRAY_LEN(parents);
			char mine[PATH_MAX - 64];
			if (own_v1_path(names[k], 0, mine, sizeof(mine)) != 0 ||
			    strcmp(mine, "/") == 0)
				continue;
			snprintf(own[k], sizeof(own[k]), CGROUP_ROOT_DEFAULT "/%s%s/%s", names[k],
				 mine, CGROUP_PARENT_NAME);
			parent = own[k];
		}
		DIR *d = opendir(parent);
		if (d == NULL)
			continue;
		for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
			if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", parent, e->d_name);
			int rc = remove_dir(path, &cgroup_env_kernel, CGROUP_RMDIR_TRIES);
			fprintf(stderr, "cgroup test: left behind: %s (%s)\n", path,
				rc == 0 ? "removed" : strerror(-rc));
			left++;
		}
		closedir(d);
	}
	return left;
}

int main(void)
{
	char cmd[64];

	main_pid = getpid();
	snprintf(run_dir, sizeof(run_dir), "/tmp/an-cgroup-test-XXXXXX");
	if (mkdtemp(run_dir) == NULL) {
		perror("cgroup test: mkdtemp");
		return EXIT_FAILURE;
	}
	int rc = unit_run(cgroup_suite());
	if (sweep() != 0)
		rc = EXIT_FAILURE;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "cgroup test: could not remove %s\n", run_dir);
		rc = EXIT_FAILURE;
	}
	return rc;
}
