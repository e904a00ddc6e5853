/*
 * The cgroup of one sandbox (core/cgroup.h): make <base>/agentsnet/<id> in
 * the v1 pids and memory hierarchies, or once in the cgroup2 tree, write the
 * limits, move the sandbox's first process in, remove the directories after.
 *
 * Every directory is reached one level at a time, each level opened with
 * O_PATH|O_DIRECTORY|O_NOFOLLOW and the next acted on with *at calls (mkdirat,
 * openat, unlinkat) relative to it: no path is ever resolved through a
 * symbolic link, so nobody who can write one level can redirect our writes
 * (the daemon's directories follow the same rule, issue 15). The sandbox's
 * own directory is made exclusively: EEXIST is refused, never reused, since
 * an existing cgroup's limits and members could be anyone's, and a failed
 * cgroup_create removes only what it made. The shared "agentsnet" parent is
 * made when missing; v1 removes it once empty (below the caller's own
 * cgroup, a parent left behind would keep its owner from removing that), so
 * a concurrent cgroup_create that finds it gone under it makes it again
 * (cgroup_make).
 *
 * v1: <base> is the caller's own cgroup in each hierarchy (/proc/self/cgroup), so a sandbox
 * stays inside the limits its caller had (a container's, a login session's) and adds its own.
 * v2 cannot nest so: the caller's cgroup holds processes, and the "no internal processes"
 * rule then forbids it to hand controllers to children; so <base> is the root there.
 *
 * v2: by the "no internal processes" rule <root>/agentsnet holds no process,
 * only sandboxes; pids and memory are enabled in the subtree_control of <root>
 * and of <root>/agentsnet, written only when missing (a host whose root
 * already delegates them, as systemd's does, is left alone). Besides pids.max
 * and memory.max, memory.swap.max = 0 keeps the limit from being dodged into
 * swap, and memory.oom.group = 1 makes an OOM kill the whole sandbox rather
 * than leave half of it running. v1 has no oom.group; memory.memsw.limit_in_bytes
 * (present when swap is accounted) is set equal to memory.limit_in_bytes.
 *
 * A hierarchy or controller whose limit is 0 is optional (used when present);
 * one whose limit is asked for and that is missing is -ENOENT naming it. The
 * detection (the file system magic of each level) is apart from the making,
 * which takes the version and an environment: the unit tests run the making
 * on plain directories, with hooks standing in for the kernel's files.
 */
#include "core/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"

/*
 * cgroup_remove retries an rmdir that says EBUSY: the kernel frees a cgroup a
 * moment after its last task is reaped. 100 x 10 ms bounds the wait at ~1 s.
 */
#define CGROUP_RMDIR_TRIES    100
#define CGROUP_RMDIR_PAUSE_NS 10000000L
/* cgroup_make's tries while the shared parent is taken away under it (each an rmdir of
 * another sandbox's cleanup, which succeeds only while the parent is empty). */
#define CGROUP_MAKE_TRIES 8
/* cgroup.controllers and cgroup.subtree_control hold a dozen short names at most. */
#define CGROUP_LIST_BYTES 512
/* A uint64_t or a pid_t in decimal, with its NUL. */
#define CGROUP_NUM_BYTES 24

/* Where the making acts: on the kernel's cgroup file systems, or on a unit test's plain dirs. */
struct cgroup_env {
	bool check_fs; /* each hierarchy must be a cgroup (v1) or cgroup2 mount */
	bool nest_own; /* v1: below the caller's own cgroup of each hierarchy (/proc/self/cgroup) */
	/* Tests only (NULL on the kernel): give a new cgroup the files the kernel would... */
	void (*made)(int dir_fd, const char *path);
	/* ...and take them away before its rmdir (<parent_fd> holds <name>); */
	void (*unmaking)(int parent_fd, const char *name);
	/* and act in the moment between finding the shared parent in <base_fd> and
	 * opening it, when a concurrent cgroup_remove may take it away. */
	void (*parent_found)(int base_fd);
};

static const struct cgroup_env cgroup_env_kernel = { .check_fs = true, .nest_own = true };

/* What cgroup_create was asked for. */
struct cgroup_req {
	const char *id;
	uint64_t pids_max;
	uint64_t memory_max_bytes;
	pid_t nest_pid; /* v1: whose own cgroup the sandbox's is made under (0: ours) */
	const struct cgroup_env *env;
	char *err;
	size_t err_len;
};

/* Formats "<op> <dir>[/<name>]: <strerror(e)>" into <err>; returns -<e>. */
static int fail(char *err, size_t err_len, int e, const char *op, const char *dir, const char *name)
{
	AN_ASSERT(e > 0);
	AN_ASSERT(err != NULL || err_len == 0);
	snprintf(err, err_len, "%s %s%s%s: %s", op, dir, name != NULL ? "/" : "",
		 name != NULL ? name : "", strerror(e));
	return -e;
}

static int path_join(char *out, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(out, cap, "%s/%s", dir, name);

	if (n < 0 || (size_t)n >= cap) {
		out[0] = '\0';
		return -ENAMETOOLONG;
	}
	return 0;
}

/* <dir_fd>'s entry <name> as an O_PATH directory descriptor, never through a symlink. */
static int open_dir_at(int dir_fd, const char *name)
{
	int fd = openat(dir_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	return fd == -1 ? -errno : fd;
}

/* The absolute <path> opened one component at a time by open_dir_at; -errno on failure. */
static int open_dir_path(const char *path)
{
	AN_ASSERT(path[0] == '/');
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	for (const char *p = path; *p != '\0';) {
		size_t len = strcspn(p, "/");
		char name[NAME_MAX + 1];

		if (len == 0) {
			p++;
			continue;
		}
		if (len > NAME_MAX) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		int next = open_dir_at(fd, name);
		close(fd);
		if (next < 0)
			return next;
		fd = next;
		p += len;
	}
	AN_ASSERT(fd >= 0);
	return fd;
}

static bool fs_is(int fd, unsigned long magic)
{
	struct statfs st;

	return fstatfs(fd, &st) == 0 && (unsigned long)st.f_type == magic;
}

/* Writes <text> into <dir>/<name> (<dir_fd>: <dir>); an absent <optional> file is skipped. */
static int write_at(int dir_fd, const char *dir, const char *name, const char *text, bool optional,
		    char *err, size_t err_len)
{
	int fd = openat(dir_fd, name, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1 && errno == ENOENT && optional)
		return 0;
	if (fd == -1)
		return fail(err, err_len, errno, "open", dir, name);
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);
	int e = n == -1 ? errno : (size_t)n == len ? 0 : EIO;
	close(fd);
	return e == 0 ? 0 : fail(err, err_len, e, "write", dir, name);
}

/* Reads the short file <dir>/<name> into <buf> (<cap> bytes), NUL-terminated. */
static int read_at(int dir_fd, const char *dir, const char *name, char *buf, size_t cap, char *err,
		   size_t err_len)
{
	AN_ASSERT(cap > 1);
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return fail(err, err_len, errno, "open", dir, name);
	ssize_t n = read(fd, buf, cap - 1);
	int e = n == -1 ? errno : (size_t)n == cap - 1 ? EMSGSIZE : 0;
	close(fd);
	if (e != 0)
		return fail(err, err_len, e, "read", dir, name);
	buf[n] = '\0';
	return 0;
}

/* Whether the controller list <list> ("cpu memory pids", or "+pids" as written) names <word>. */
static bool has_word(const char *list, const char *word)
{
	size_t len = strlen(word);
	const char *p = strstr(list, word);

	while (p != NULL) {
		bool head = p == list || p[-1] == ' ' || p[-1] == '+';
		bool tail = p[len] == '\0' || p[len] == ' ' || p[len] == '\n';
		if (head && tail)
			return true;
		p = strstr(p + len, word);
	}
	return false;
}

/*
 * v2: enables pids and memory for the children of the cgroup <dir> (<dir_fd>)
 * where its cgroup.controllers offers them and they are not on yet. One whose
 * limit <rq> asks for and that is not offered is -ENOENT.
 */
static int v2_enable(int dir_fd, const char *dir, const struct cgroup_req *rq)
{
	static const char *const names[] = { "pids", "memory" };
	const bool need[] = { rq->pids_max != 0, rq->memory_max_bytes != 0 };
	char avail[CGROUP_LIST_BYTES], on[CGROUP_LIST_BYTES], cmd[32] = "";

	int rc =
	    read_at(dir_fd, dir, "cgroup.controllers", avail, sizeof(avail), rq->err, rq->err_len);
	if (rc == 0)
		rc = read_at(dir_fd, dir, "cgroup.subtree_control", on, sizeof(on), rq->err,
			     rq->err_len);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < AN_ARRAY_LEN(names); i++) {
		if (!has_word(avail, names[i]) && need[i]) {
			snprintf(rq->err, rq->err_len, "%s/cgroup.controllers: no %s controller",
				 dir, names[i]);
			return -ENOENT;
		}
		size_t used = strlen(cmd);
		if (has_word(avail, names[i]) && !has_word(on, names[i]))
			snprintf(cmd + used, sizeof(cmd) - used, "%s+%s", used > 0 ? " " : "",
				 names[i]);
	}
	if (cmd[0] == '\0')
		return 0;
	return write_at(dir_fd, dir, "cgroup.subtree_control", cmd, false, rq->err, rq->err_len);
}

/* Opens <base>/agentsnet (<base_fd>: <base>), made (0755) when missing; its path in <path>. */
static int parent_open(int base_fd, const char *base, const struct cgroup_req *rq, char *path,
		       size_t cap)
{
	bool made = false;

	if (path_join(path, cap, base, CGROUP_PARENT_NAME) != 0)
		return fail(rq->err, rq->err_len, ENAMETOOLONG, "mkdir", base, CGROUP_PARENT_NAME);
	if (mkdirat(base_fd, CGROUP_PARENT_NAME, 0755) == 0)
		made = true;
	else if (errno != EEXIST)
		return fail(rq->err, rq->err_len, errno, "mkdir", base, CGROUP_PARENT_NAME);
	else if (rq->env->parent_found != NULL)
		rq->env->parent_found(base_fd);
	int fd = open_dir_at(base_fd, CGROUP_PARENT_NAME);
	if (fd < 0)
		return fail(rq->err, rq->err_len, -fd, "open", base, CGROUP_PARENT_NAME);
	if (made && rq->env->made != NULL)
		rq->env->made(fd, path);
	return fd;
}

/*
 * Makes <parent>/<id> (<parent_fd>: <parent>) exclusively and opens it. <path>
 * gets its path only once made, so an undo never removes what was there.
 */
static int child_make(int parent_fd, const char *parent, const struct cgroup_req *rq, char *path,
		      size_t cap)
{
	if (path_join(path, cap, parent, rq->id) != 0)
		return fail(rq->err, rq->err_len, ENAMETOOLONG, "mkdir", parent, rq->id);
	if (mkdirat(parent_fd, rq->id, 0755) == -1) {
		path[0] = '\0';
		return fail(rq->err, rq->err_len, errno, "mkdir", parent, rq->id);
	}
	int fd = open_dir_at(parent_fd, rq->id);
	if (fd < 0)
		return fail(rq->err, rq->err_len, -fd, "open", parent, rq->id);
	if (rq->env->made != NULL)
		rq->env->made(fd, path);
	return fd;
}

/* Makes <base>/agentsnet/<id> (<base_fd>: <base>), its path in <path>; returns it opened. */
static int cgroup_make(int base_fd, const char *base, const struct cgroup_req *rq, char *path,
		       size_t cap)
{
	char parent[PATH_MAX];

	int fd = -ENOENT;
	/* ENOENT: a cgroup_remove (v1, remove_parent_if_empty) took the empty parent away
	 * between our finding it and opening it, or between our opening it and our mkdir;
	 * once our <id> is in it, it stays. */
	for (int tries = 0; fd == -ENOENT && tries < CGROUP_MAKE_TRIES; tries++) {
		int parent_fd = parent_open(base_fd, base, rq, parent, sizeof(parent));
		if (parent_fd == -ENOENT) {
			fd = parent_fd;
			continue;
		}
		if (parent_fd < 0)
			return parent_fd;
		fd = child_make(parent_fd, parent, rq, path, cap);
		close(parent_fd);
	}
	return fd;
}

static void format_u64(char *text, uint64_t value)
{
	snprintf(text, CGROUP_NUM_BYTES, "%" PRIu64, value);
}

/* v1: the limit of the pids (<memory> false) or memory cgroup <dir> (<fd>). */
static int v1_limits(int fd, const char *dir, bool memory, const struct cgroup_req *rq)
{
	char text[CGROUP_NUM_BYTES];

	if (!memory && rq->pids_max != 0) {
		format_u64(text, rq->pids_max);
		return write_at(fd, dir, "pids.max", text, false, rq->err, rq->err_len);
	}
	if (!memory || rq->memory_max_bytes == 0)
		return 0;
	format_u64(text, rq->memory_max_bytes);
	int rc = write_at(fd, dir, "memory.limit_in_bytes", text, false, rq->err, rq->err_len);
	/* Second: the kernel wants memsw >= limit_in_bytes. Equal: no room left in swap. */
	if (rc == 0)
		rc = write_at(fd, dir, "memory.memsw.limit_in_bytes", text, true, rq->err,
			      rq->err_len);
	return rc;
}

/* v1: <root>/<name> opened when it is a v1 hierarchy (a plain dir for tests), else -ENOENT. */
static int v1_hierarchy_open(int root_fd, const struct cgroup_env *env, const char *name)
{
	int fd = open_dir_at(root_fd, name);

	if (fd >= 0 && env->check_fs && !fs_is(fd, CGROUP_SUPER_MAGIC)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

/*
 * v1: the cgroup the cgroup file <file> (/proc/<pid>/cgroup: "N:pids:/a/b" lines) gives
 * for the hierarchy whose controllers include <name>, into <out>; "/" when it is not
 * listed; -EINVAL when two lines claim it.
 */
static int own_v1_path_in(const char *file, const char *name, char *out, size_t cap)
{
	char line[PATH_MAX + 64];
	int rc = -ENOENT;

	FILE *f = fopen(file, "re");
	if (f == NULL)
		return -errno;
	/*
	 * Every line is read: a cgroup's name may hold a newline (where a hierarchy is
	 * delegated, its user names them), which would make a line of its own. Two lines
	 * for one controller mean one is such a name: refused, never guessed.
	 */
	int claims = 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *ctrls = strchr(line, ':');
		char *path = ctrls != NULL ? strchr(ctrls + 1, ':') : NULL;
		if (path == NULL)
			continue;
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		for (char *tok = strtok_r(ctrls + 1, ",", &ctrls); tok != NULL;
		     tok = strtok_r(NULL, ",", &ctrls)) {
			if (strcmp(tok, name) != 0)
				continue;
			if (++claims == 1)
				rc = snprintf(out, cap, "%s", path) < (int)cap ? 0 : -ENAMETOOLONG;
		}
	}
	fclose(f);
	if (claims > 1)
		return -EINVAL;
	if (rc == -ENOENT)
		rc = snprintf(out, cap, "/") > 0 ? 0 : -EIO;
	return rc;
}

/* own_v1_path_in of process <pid>'s (0: ours) cgroup file. */
static int own_v1_path(const char *name, pid_t pid, char *out, size_t cap)
{
	char proc[40];

	if (pid > 0)
		snprintf(proc, sizeof(proc), "/proc/%d/cgroup", (int)pid);
	else
		snprintf(proc, sizeof(proc), "/proc/self/cgroup");
	return own_v1_path_in(proc, name, out, cap);
}

/*
 * v1: descends from the hierarchy <base> (<base_fd>, taken) into the own cgroup there of
 * process <pid> (0: ours), so that a sandbox stays inside the limits its caller had (a
 * container's, a session's); <base> grows by that path. Returns the new descriptor or
 * -errno.
 */
static int v1_nest_own(int base_fd, char *base, size_t cap, const char *name, pid_t pid)
{
	char own[PATH_MAX];

	int rc = own_v1_path(name, pid, own, sizeof(own));
	for (char *p = own, *save = NULL, *tok = NULL; rc == 0; p = NULL) {
		tok = strtok_r(p, "/", &save);
		if (tok == NULL)
			break;
		size_t len = strlen(base);
		if (strcmp(tok, "..") == 0 || strcmp(tok, ".") == 0 ||
		    snprintf(base + len, cap - len, "/%s", tok) >= (int)(cap - len)) {
			rc = -EINVAL;
			break;
		}
		int next = open_dir_at(base_fd, tok);
		close(base_fd);
		base_fd = next;
		rc = next < 0 ? next : 0;
	}
	if (rc != 0 && base_fd >= 0)
		close(base_fd);
	return rc != 0 ? rc : base_fd;
}

/* v1: the sandbox's cgroup in the hierarchy <name> of <root> (<root_fd>), its path in <path>. */
static int v1_create_one(int root_fd, const char *root, const char *name,
			 const struct cgroup_req *rq, char *path)
{
	char base[PATH_MAX];
	bool memory = strcmp(name, "memory") == 0;
	uint64_t limit = memory ? rq->memory_max_bytes : rq->pids_max;

	if (path_join(base, sizeof(base), root, name) != 0)
		return fail(rq->err, rq->err_len, ENAMETOOLONG, "open", root, name);
	int base_fd = v1_hierarchy_open(root_fd, rq->env, name);
	if (base_fd == -ENOENT && limit == 0)
		return 0;
	if (base_fd == -ENOENT) {
		snprintf(rq->err, rq->err_len,
			 "%s: no cgroup v1 %s hierarchy (the %s limit needs it)", base, name, name);
		return -ENOENT;
	}
	if (base_fd >= 0 && rq->env->nest_own)
		base_fd = v1_nest_own(base_fd, base, sizeof(base), name, rq->nest_pid);
	if (base_fd < 0)
		return fail(rq->err, rq->err_len, -base_fd, "open", base, NULL);
	int fd = cgroup_make(base_fd, base, rq, path, PATH_MAX);
	close(base_fd);
	if (fd < 0)
		return fd;
	int rc = v1_limits(fd, path, memory, rq);
	close(fd);
	return rc;
}

static int v1_create(struct cgroup_sandbox *cg, const char *root, const struct cgroup_req *rq)
{
	int root_fd = open_dir_path(root);
	if (root_fd < 0)
		return fail(rq->err, rq->err_len, -root_fd, "open", root, NULL);
	int rc = v1_create_one(root_fd, root, "pids", rq, cg->pids_dir);
	if (rc == 0)
		rc = v1_create_one(root_fd, root, "memory", rq, cg->memory_dir);
	close(root_fd);
	if (rc == 0 && cg->pids_dir[0] == '\0' && cg->memory_dir[0] == '\0') {
		snprintf(rq->err, rq->err_len, "%s: no cgroup v1 pids or memory hierarchy", root);
		return -ENOENT;
	}
	return rc;
}

/* v2: the limits of the sandbox's cgroup <dir> (<fd>). */
static int v2_limits(int fd, const char *dir, const struct cgroup_req *rq)
{
	char text[CGROUP_NUM_BYTES];
	int rc = 0;

	if (rq->pids_max != 0) {
		format_u64(text, rq->pids_max);
		rc = write_at(fd, dir, "pids.max", text, false, rq->err, rq->err_len);
	}
	if (rc == 0 && rq->memory_max_bytes != 0) {
		format_u64(text, rq->memory_max_bytes);
		rc = write_at(fd, dir, "memory.max", text, false, rq->err, rq->err_len);
		if (rc == 0)
			rc = write_at(fd, dir, "memory.swap.max", "0", true, rq->err, rq->err_len);
	}
	/* Absent before Linux 4.19, or without the memory controller: an OOM then kills one. */
	if (rc == 0)
		rc = write_at(fd, dir, "memory.oom.group", "1", true, rq->err, rq->err_len);
	return rc;
}

static int v2_create(struct cgroup_sandbox *cg, const char *root, const struct cgroup_req *rq)
{
	char parent[PATH_MAX];

	int root_fd = open_dir_path(root);
	if (root_fd < 0)
		return fail(rq->err, rq->err_len, -root_fd, "open", root, NULL);
	int rc = 0;
	if (rq->env->check_fs && !fs_is(root_fd, CGROUP2_SUPER_MAGIC)) {
		snprintf(rq->err, rq->err_len, "%s: not a cgroup2 file system", root);
		rc = -ENOENT;
	}
	if (rc == 0)
		rc = v2_enable(root_fd, root, rq);
	int parent_fd = rc == 0 ? parent_open(root_fd, root, rq, parent, sizeof(parent)) : rc;
	close(root_fd);
	if (parent_fd < 0)
		return parent_fd;
	rc = v2_enable(parent_fd, parent, rq);
	int fd =
	    rc == 0 ? child_make(parent_fd, parent, rq, cg->pids_dir, sizeof(cg->pids_dir)) : rc;
	close(parent_fd);
	if (fd < 0)
		return fd;
	rc = v2_limits(fd, cg->pids_dir, rq);
	close(fd);
	return rc;
}

/* rmdir of the cgroup <dir>, tried <tries> times while it is busy; a <dir> already gone is 0. */
static int remove_dir(const char *dir, const struct cgroup_env *env, int tries)
{
	char parent[PATH_MAX];
	const char *slash = strrchr(dir, '/');

	AN_ASSERT(slash != NULL && slash > dir && slash[1] != '\0');
	AN_ASSERT((size_t)(slash - dir) < sizeof(parent));
	memcpy(parent, dir, (size_t)(slash - dir));
	parent[slash - dir] = '\0';
	int fd = open_dir_path(parent);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	if (env->unmaking != NULL)
		env->unmaking(fd, slash + 1);
	int rc = -EBUSY;
	for (int i = 0; i < tries && rc == -EBUSY; i++) {
		const struct timespec pause = { .tv_nsec = CGROUP_RMDIR_PAUSE_NS };
		if (i > 0)
			nanosleep(&pause, NULL);
		rc = unlinkat(fd, slash + 1, AT_REMOVEDIR) == 0 ? 0 : -errno;
	}
	close(fd);
	return rc == -ENOENT ? 0 : rc;
}

/*
 * v1: the "agentsnet" parent of <dir>, removed when it is empty (another sandbox's cgroup
 * in it makes rmdir fail, which is fine): nested in the caller's own cgroup, a parent left
 * behind would keep whoever made that cgroup (a session manager) from removing it.
 */
static void remove_parent_if_empty(const char *dir)
{
	char up[PATH_MAX];

	int n = snprintf(up, sizeof(up), "%s", dir);
	for (int i = 0; i < 2 && n > 0; i++) {
		char *slash = strrchr(up, '/');
		if (slash == NULL || slash == up)
			return;
		*slash = '\0';
	}
	int fd = open_dir_path(up);
	if (fd < 0)
		return;
	(void)unlinkat(fd, CGROUP_PARENT_NAME, AT_REMOVEDIR);
	close(fd);
}

/*
 * Removes <cg>'s directories, each tried <tries> times while busy. With <keep_busy> a
 * directory still busy stays in <cg> (version kept) for a later try; else <cg> is zeroed.
 */
static int cgroup_remove_env(struct cgroup_sandbox *cg, const struct cgroup_env *env, int tries,
			     bool keep_busy)
{
	char *const dirs[] = { cg->pids_dir, cg->memory_dir };
	int rc = 0;

	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		int one = dirs[i][0] != '\0' ? remove_dir(dirs[i], env, tries) : 0;
		if (one != 0)
			rc = one;
		else if (dirs[i][0] != '\0' && cg->version == 1 && env->nest_own)
			remove_parent_if_empty(dirs[i]);
		if (one == 0 || !keep_busy)
			dirs[i][0] = '\0';
	}
	if (cg->pids_dir[0] == '\0' && cg->memory_dir[0] == '\0')
		memset(cg, 0, sizeof(*cg));
	return rc;
}

/* cgroup_create once the <version> and the <root> it serves are known. */
static int cgroup_create_env(struct cgroup_sandbox *cg, const char *root, int version,
			     const struct cgroup_req *rq)
{
	AN_ASSERT(version == 1 || version == 2);
	/* The caller validated it ([A-Za-z0-9_.-], no leading '.'): a '/' would walk elsewhere. */
	AN_ASSERT(rq->id[0] != '\0' && rq->id[0] != '.');
	AN_ASSERT(strchr(rq->id, '/') == NULL);
	memset(cg, 0, sizeof(*cg));
	if (rq->err_len > 0)
		rq->err[0] = '\0';
	int rc = version == 1 ? v1_create(cg, root, rq) : v2_create(cg, root, rq);
	if (rc != 0) {
		cgroup_remove_env(cg, rq->env, CGROUP_RMDIR_TRIES, false);
		AN_ASSERT(cg->version == 0);
		return rc;
	}
	cg->version = version;
	AN_ASSERT(cg->pids_dir[0] != '\0' || cg->memory_dir[0] != '\0');
	return 0;
}

/* Whether <root_fd>'s <name> is a cgroup2 mount whose cgroup.controllers offers pids or memory. */
static bool v2_has_controllers(int root_fd, const char *name)
{
	char list[CGROUP_LIST_BYTES];

	int fd = open_dir_at(root_fd, name);
	if (fd < 0)
		return false;
	bool yes = fs_is(fd, CGROUP2_SUPER_MAGIC) &&
		   read_at(fd, name, "cgroup.controllers", list, sizeof(list), NULL, 0) == 0 &&
		   (has_word(list, "pids") || has_word(list, "memory"));
	close(fd);
	return yes;
}

/* Whether <root_fd>'s <name> is a v1 hierarchy. */
static bool v1_has_hierarchy(int root_fd, const char *name)
{
	int fd = v1_hierarchy_open(root_fd, &cgroup_env_kernel, name);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/*
 * Which version serves <root>, and the directory it is made under (<base>):
 * 2 and <root> when <root> is a cgroup2 mount; 1 and <root> when it holds a v1
 * pids or memory hierarchy; 2 and <root>/unified when only a hybrid host's v2
 * tree offers them. Else -ENOENT (or the -errno of opening <root>).
 */
static int cgroup_detect(const char *root, char *base, size_t cap, const struct cgroup_req *rq)
{
	int version = -ENOENT;
	bool unified = false;

	int root_fd = open_dir_path(root);
	if (root_fd < 0)
		return fail(rq->err, rq->err_len, -root_fd, "open", root, NULL);
	if (fs_is(root_fd, CGROUP2_SUPER_MAGIC))
		version = 2;
	else if (v1_has_hierarchy(root_fd, "pids") || v1_has_hierarchy(root_fd, "memory"))
		version = 1;
	else if (v2_has_controllers(root_fd, "unified"))
		unified = true;
	close(root_fd);
	/* Trailing slashes would double in every path made from <base>. */
	size_t len = strlen(root);
	while (len > 1 && root[len - 1] == '/')
		len--;
	int n = snprintf(base, cap, "%.*s%s", (int)len, root, unified ? "/unified" : "");
	if (n < 0 || (size_t)n >= cap)
		return fail(rq->err, rq->err_len, ENAMETOOLONG, "open", root, NULL);
	if (unified)
		version = 2;
	if (version < 0)
		snprintf(rq->err, rq->err_len,
			 "%s: no cgroup hierarchy (neither cgroup2 nor v1 pids or memory)", root);
	return version;
}

/*
 * Mounts the caller's pids and memory hierarchies at CGROUP_ROOT_DEFAULT in a mount
 * namespace of this process's own, for a caller whose namespace shows none there (`ip
 * netns exec` mounts a fresh sysfs, which hides /sys/fs/cgroup's mounts). The hierarchies
 * come from /proc/self/cgroup: a v1 line naming pids or memory is mounted with its whole
 * controller list (mounting an existing hierarchy's exact list joins it), else the v2 tree.
 * The mounts are this process's and its children's only (a slave namespace, gone with
 * them). Returns 0, or -errno (-EPERM for a caller without CAP_SYS_ADMIN).
 */
static int mount_hierarchies(void)
{
	char line[PATH_MAX + 64];
	bool v1 = false;

	if (unshare(CLONE_NEWNS) == -1)
		return -errno;
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) == -1)
		return -errno;
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (f == NULL)
		return -errno;
	int rc = mount("tmpfs", CGROUP_ROOT_DEFAULT, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		       "mode=0755,size=64k") == 0
		     ? 0
		     : -errno;
	while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
		char *ctrls = strchr(line, ':');
		char *end = ctrls != NULL ? strchr(ctrls + 1, ':') : NULL;
		if (end == NULL)
			continue;
		*end = '\0';
		ctrls++;
		for (size_t i = 0; i < 2 && rc == 0; i++) {
			const char *name = i == 0 ? "pids" : "memory";
			char list[CGROUP_LIST_BYTES], dir[64];
			snprintf(list, sizeof(list), "%s", ctrls);
			for (size_t k = 0; list[k] != '\0'; k++)
				list[k] = list[k] == ',' ? ' ' : list[k];
			if (!has_word(list, name))
				continue;
			snprintf(dir, sizeof(dir), "%s/%s", CGROUP_ROOT_DEFAULT, name);
			rc = mkdir(dir, 0755) == 0 && mount("cgroup", dir, "cgroup", 0, ctrls) == 0
				 ? 0
				 : -errno;
			v1 = true;
		}
	}
	fclose(f);
	if (rc == 0 && !v1) {
		umount2(CGROUP_ROOT_DEFAULT, MNT_DETACH);
		rc = mount("cgroup2", CGROUP_ROOT_DEFAULT, "cgroup2", 0, NULL) == 0 ? 0 : -errno;
	}
	return rc;
}

int cgroup_create(struct cgroup_sandbox *cg, const char *root, const char *id, uint64_t pids_max,
		  uint64_t memory_max_bytes, char *err, size_t err_len)
{
	return cgroup_create_under(cg, root, id, 0, pids_max, memory_max_bytes, err, err_len);
}

int cgroup_create_under(struct cgroup_sandbox *cg, const char *root, const char *id, pid_t nest_pid,
			uint64_t pids_max, uint64_t memory_max_bytes, char *err, size_t err_len)
{
	AN_ASSERT(nest_pid >= 0);
	const struct cgroup_req rq = {
		.id = id,
		.pids_max = pids_max,
		.memory_max_bytes = memory_max_bytes,
		.nest_pid = nest_pid,
		.env = &cgroup_env_kernel,
		.err = err,
		.err_len = err_len,
	};
	char base[PATH_MAX];

	memset(cg, 0, sizeof(*cg));
	int version =
	    cgroup_detect(root != NULL ? root : CGROUP_ROOT_DEFAULT, base, sizeof(base), &rq);
	/* Hidden from this mount namespace (ip netns exec): mount them for ourselves (not for
	 * another's process: the daemon, threaded, did so at its start). */
	if (version == -ENOENT && nest_pid == 0 &&
	    (root == NULL || strcmp(root, CGROUP_ROOT_DEFAULT) == 0) && mount_hierarchies() == 0)
		version = cgroup_detect(CGROUP_ROOT_DEFAULT, base, sizeof(base), &rq);
	if (version < 0)
		return version;
	return cgroup_create_env(cg, base, version, &rq);
}

int cgroup_enter(const struct cgroup_sandbox *cg, pid_t pid, char *err, size_t err_len)
{
	const char *const dirs[] = { cg->pids_dir, cg->memory_dir };
	char text[CGROUP_NUM_BYTES];

	AN_ASSERT(cg->version == 1 || cg->version == 2);
	AN_ASSERT(pid >= 0);
	/* "0" is the writer itself, in v1 and v2 alike. */
	snprintf(text, sizeof(text), "%d", (int)pid);
	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		if (dirs[i][0] == '\0')
			continue;
		int fd = open_dir_path(dirs[i]);
		if (fd < 0)
			return fail(err, err_len, -fd, "open", dirs[i], NULL);
		int rc = write_at(fd, dirs[i], "cgroup.procs", text, false, err, err_len);
		close(fd);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int cgroup_remove(struct cgroup_sandbox *cg)
{
	return cgroup_remove_env(cg, &cgroup_env_kernel, CGROUP_RMDIR_TRIES, false);
}

int cgroup_remove_now(struct cgroup_sandbox *cg)
{
	AN_ASSERT(cg->version == 1 || cg->version == 2);
	return cgroup_remove_env(cg, &cgroup_env_kernel, 1, true);
}

/* Whether cgroup <path> (as /proc/<pid>/cgroup shows it) is <parent>/agentsnet/<name>. */
static bool path_is_named(const char *path, const char *name)
{
	size_t len = strlen(path), name_len = strlen(name), parent_len = strlen(CGROUP_PARENT_NAME);

	if (len < name_len + parent_len + 2 || strcmp(path + len - name_len, name) != 0)
		return false;
	const char *slash = path + len - name_len - 1;
	return *slash == '/' && strncmp(slash - parent_len, CGROUP_PARENT_NAME, parent_len) == 0 &&
	       slash - parent_len > path && slash[-(ptrdiff_t)parent_len - 1] == '/';
}

int cgroup_of_process(struct cgroup_sandbox *cg, const char *root, pid_t pid, const char *name)
{
	char proc[40], line[PATH_MAX + 64], base[PATH_MAX], err[PATH_MAX + 128];
	const struct cgroup_req rq = {
		.id = name, .env = &cgroup_env_kernel, .err = err, .err_len = sizeof(err)
	};

	AN_ASSERT(pid > 0);
	memset(cg, 0, sizeof(*cg));
	int version =
	    cgroup_detect(root != NULL ? root : CGROUP_ROOT_DEFAULT, base, sizeof(base), &rq);
	if (version < 0)
		return version;
	snprintf(proc, sizeof(proc), "/proc/%d/cgroup", (int)pid);
	FILE *f = fopen(proc, "re");
	if (f == NULL)
		return -errno;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *ctrls = strchr(line, ':');
		char *path = ctrls != NULL ? strchr(ctrls + 1, ':') : NULL;
		if (path == NULL)
			continue;
		*path++ = '\0';
		ctrls++;
		path[strcspn(path, "\n")] = '\0';
		if (!path_is_named(path, name))
			continue;
		char *dir = NULL;
		const char *sub = "";
		if (version == 2 && ctrls[0] == '\0') {
			dir = cg->pids_dir;
		} else if (version == 1) {
			char list[CGROUP_LIST_BYTES];
			snprintf(list, sizeof(list), "%s", ctrls);
			for (char *c = list; *c != '\0'; c++)
				*c = *c == ',' ? ' ' : *c;
			dir = has_word(list, "pids")     ? cg->pids_dir
			      : has_word(list, "memory") ? cg->memory_dir
							 : NULL;
			sub = dir == cg->pids_dir ? "/pids" : "/memory";
		}
		if (dir != NULL && snprintf(dir, PATH_MAX, "%s%s%s", base, sub, path) >= PATH_MAX)
			dir[0] = '\0';
	}
	fclose(f);
	if (cg->pids_dir[0] == '\0' && cg->memory_dir[0] == '\0')
		return -ENOENT;
	cg->version = version;
	return 0;
}

int cgroup_hierarchies_ensure(void)
{
	char base[PATH_MAX], err[PATH_MAX + 128];
	const struct cgroup_req rq = {
		.id = "-", .env = &cgroup_env_kernel, .err = err, .err_len = sizeof(err)
	};

	int version = cgroup_detect(CGROUP_ROOT_DEFAULT, base, sizeof(base), &rq);
	if (version != -ENOENT)
		return version < 0 ? version : 0;
	int rc = mount_hierarchies();
	if (rc == 0)
		rc = cgroup_detect(CGROUP_ROOT_DEFAULT, base, sizeof(base), &rq);
	return rc < 0 ? rc : 0;
}
