/*
 * The sandbox's root (tools/agentsnet/sandbox.h, SANDBOX_SYSTEM_DIRS).
 *
 * Why a root of its own: masking what the host shows (a mask per socket file,
 * an instance per world-writable directory) covers what exists when the run
 * starts, in the network namespaces the run can list. A service that binds its
 * socket again later, or a container whose sockets are in another namespace's
 * list, leaves a path the agent can connect to, and a directory another
 * account may write is a place to leave one. A root that holds only what an
 * agent needs leaves no such path: what is not bound does not exist inside.
 * The masks stay, for what is in view (the working directory, the binds).
 *
 * Names are where a host user races us: the working directory, a bind and
 * every directory below them may be another account's, who can swap a name
 * for a symlink between any two system calls. So nothing is looked up twice:
 * 1. root_open, in `agentsnet run` before the clone: one O_PATH descriptor
 *    per source (each system directory the host has, the working directory
 *    as ".", each bind), its path read back from the descriptor and checked
 *    there; the target of each top-level symlink among the system directories.
 * 2. root_enter, in the child inside the new mount namespace: a tmpfs over the
 *    host's /tmp (this namespace only) is the stage, which no one else can
 *    see, let alone write. Each source is cloned as a detached tree
 *    (open_tree), made read-only, nosuid and nodev (system directories,
 *    --ro-bind) or nosuid and nodev (the working directory, --bind) all the
 *    way down while detached, then attached (move_mount) to a mount point
 *    reached from the stage's descriptor without following a symlink
 *    (openat2 RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH), in order of the paths'
 *    lengths (a parent before what it holds). A missing directory is made
 *    only on the stage's own tmpfs or the agent's home (made first, so a
 *    working directory below it is bound inside it), never inside a host
 *    directory bound there. Then the mount points the sandbox fills itself
 *    and pivot_root: the host's root stays at ROOT_HOST_DIR, because
 *    the later steps still bind from descriptors into it, and the kernel
 *    allows a fresh /proc and sysfs only while the host's are fully visible.
 * 3. root_leave, after every mount: the host's root detached, its mount
 *    point removed, and the root read-only, so the agent adds nothing there.
 * Before Linux 5.12 (no mount_setattr), binds are made by descriptor paths and
 * only their top mount made read-only.
 */
#include "tools/agentsnet/sandbox_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

/* Where the root is built: a tmpfs over the host's /tmp, seen only in this mount namespace. */
#define ROOT_STAGE "/tmp"

static const char *const system_dirs[] = { SANDBOX_SYSTEM_DIRS };
static const char *const made_dirs[] = { SANDBOX_MADE_DIRS };

static_assert(AN_ARRAY_LEN(system_dirs) <= 16u, "ROOT_SOURCES_MAX counts 16 system dirs");

/* ---- In the caller, before the clone ---- */

/* Whether <path> is in view through a source of <r> (bound already: a parent). */
static bool root_shows(const struct root_sources *r, const char *path)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->src[i].link[0] == '\0' && sandbox_path_under(path, r->src[i].path))
			return true;
	}
	return false;
}

static bool root_made(const char *path)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(made_dirs); i++) {
		if (sandbox_path_under(path, made_dirs[i]))
			return true;
	}
	return false;
}

/* Whether a canonical <path> is a real directory among the system directories. */
static bool under_system_dir(const char *path)
{
	struct stat st;

	for (size_t i = 0; i < AN_ARRAY_LEN(system_dirs); i++) {
		if (sandbox_path_under(path, system_dirs[i]) && lstat(system_dirs[i], &st) == 0 &&
		    S_ISDIR(st.st_mode))
			return true;
	}
	return false;
}

/* The path of what <fd> is open on, into <out> (PATH_MAX): 0, or -ENOENT when it has none. */
static int path_of(int fd, char *out)
{
	char link[32];

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, PATH_MAX - 1);
	if (n <= 0 || n >= PATH_MAX - 1)
		return n < 0 ? -errno : -ENAMETOOLONG;
	out[n] = '\0';
	/* Removed since ("... (deleted)"), or not on a file system we can name. */
	if (out[0] != '/' || (n > 10 && strcmp(out + n - 10, " (deleted)") == 0))
		return -ENOENT;
	return 0;
}

/*
 * Adds what <fd> (O_PATH, ours now) is open on as a source, at the path the
 * descriptor names: a directory or a regular file, checked as a bind must be.
 */
static int add_fd(struct root_sources *r, int fd, const char *what, bool read_only, char *err,
		  size_t err_len)
{
	struct root_source *s = &r->src[r->n];
	struct stat st;

	AN_ASSERT(r->n < ROOT_SOURCES_MAX);
	int rc = path_of(fd, s->from);
	if (rc == 0)
		memcpy(s->path, s->from, strlen(s->from) + 1);
	if (rc == 0 && strlen(s->path) >= PATH_MAX - sizeof(ROOT_STAGE))
		rc = -ENAMETOOLONG;
	if (rc == 0 && fstat(fd, &st) != 0)
		rc = -errno;
	if (rc == 0 && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		rc = -EINVAL;
	if (rc != 0) {
		close(fd);
		snprintf(err, err_len, "%s: %s", what,
			 rc == -EINVAL ? "neither a directory nor a regular file" : strerror(-rc));
		return rc;
	}
	rc = sandbox_bind_check(s->path, err, err_len);
	if (rc != 0) {
		close(fd);
		return rc;
	}
	s->fd = fd;
	s->is_dir = S_ISDIR(st.st_mode);
	s->read_only = read_only;
	s->link[0] = '\0';
	r->n++;
	return 0;
}

/*
 * A system directory that is a symlink (/bin -> usr/bin) is copied as the
 * symlink when what it names is inside another system directory, and bound
 * at its own path otherwise (/opt -> /data/opt), so it works inside either way.
 */
static int add_system_dir(struct root_sources *r, const char *path, char *err, size_t err_len)
{
	char canon[PATH_MAX];
	struct stat st;

	if (lstat(path, &st) == -1 || (!S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode)))
		return 0; /* the host has none */
	int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1 || path_of(fd, canon) != 0 || strcmp(canon, "/") == 0) {
		if (fd >= 0)
			close(fd);
		return 0; /* dangling, or naming the whole host: nothing to show */
	}
	struct root_source *s = &r->src[r->n];
	ssize_t n = S_ISLNK(st.st_mode) ? readlink(path, s->link, sizeof(s->link) - 1) : -1;
	if (n > 0 && (size_t)n < sizeof(s->link) - 1 && under_system_dir(canon)) {
		close(fd);
		s->link[n] = '\0';
		snprintf(s->path, sizeof(s->path), "%s", path);
		s->fd = -1;
		s->is_dir = false;
		s->read_only = true;
		r->n++;
		return 0;
	}
	/* What it resolves to may not be shown (in /run, say): then it is not there. */
	if (add_fd(r, fd, path, true, err, err_len) != 0)
		return 0;
	/* Shown at its own name, whatever it resolved to. */
	snprintf(r->src[r->n - 1].path, sizeof(r->src[r->n - 1].path), "%s", path);
	return 0;
}

/*
 * A bind, opened by its path as given and through no symlink at all: a
 * symlink's target is chosen by whoever owns the symlink (another account, or
 * the agent through the working directory it writes), so following one could
 * bind anything they like. The path read back must be the one given (not
 * renamed meanwhile).
 */
static int add_bind(struct root_sources *r, const struct sandbox_bind *b, char *err, size_t err_len)
{
	struct open_how how = { .flags = O_PATH | O_CLOEXEC,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	char seen[PATH_MAX];

	int fd = (int)syscall(SYS_openat2, AT_FDCWD, b->path, &how, sizeof(how));
	if (fd < 0) {
		int e = errno;
		if (e == ELOOP)
			snprintf(err, err_len,
				 "%s: a symlink on the way; name the real path (a symlink leads "
				 "where its owner chooses)",
				 b->path);
		else
			snprintf(err, err_len, "%s: %s", b->path, strerror(e));
		return -e;
	}
	if (path_of(fd, seen) != 0 || strcmp(seen, b->path) != 0) {
		close(fd);
		snprintf(err, err_len, "%s: renamed while it was opened", b->path);
		return -ESTALE;
	}
	return add_fd(r, fd, b->path, b->read_only, err, err_len);
}

/*
 * The kernel's own file systems: a source holding one (a chroot's proc, sys
 * or dev under a workspace) would carry the host's processes, devices or
 * cgroups into the sandbox with it (a bind takes the mounts below its source).
 */
static const char *const kernel_fs[] = {
	"proc",    "sysfs",   "devtmpfs",   "devpts",      "cgroup",    "cgroup2",
	"debugfs", "tracefs", "securityfs", "bpf",         "configfs",  "efivarfs",
	"pstore",  "fusectl", "nsfs",       "binfmt_misc", "selinuxfs", "hugetlbfs",
	"mqueue",  "autofs",  "rpc_pipefs", "nfsd",
};

static bool kernel_fs_type(const char *type)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(kernel_fs); i++) {
		if (strcmp(type, kernel_fs[i]) == 0)
			return true;
	}
	return false;
}

/*
 * Refuses a source that holds, at or below it, a mount of a kernel file
 * system or another bind of the host's root (same device and root as "/"):
 * both would show the host whole. Returns 0, or -EPERM with <err> naming the
 * source, the mount and its type.
 */
static int check_mounts(const struct root_sources *r, char *err, size_t err_len)
{
	char root_dev[32] = "", root_root[PATH_MAX] = "";
	struct mountinfo_entry e;
	int rc = 0;

	char *line = pool_malloc(SANDBOX_MOUNTINFO_LINE + 2);
	FILE *f = line != NULL ? fopen("/proc/self/mountinfo", "re") : NULL;
	if (f == NULL) {
		pool_free(line);
		snprintf(err, err_len, "/proc/self/mountinfo: %s", strerror(errno));
		return -errno;
	}
	/* Twice: the host's root first, wherever its line is. */
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		rewind(f);
		while (rc == 0 && fgets(line, SANDBOX_MOUNTINFO_LINE + 2, f) != NULL) {
			if (!mountinfo_split(line, &e))
				continue;
			if (pass == 0 && strcmp(e.mount_point, "/") == 0) {
				snprintf(root_dev, sizeof(root_dev), "%s", e.devno);
				snprintf(root_root, sizeof(root_root), "%s", e.root);
			}
			if (pass == 0 || strcmp(e.mount_point, "/") == 0)
				continue;
			bool host_root =
			    strcmp(e.devno, root_dev) == 0 && strcmp(e.root, root_root) == 0;
			if (!host_root && !kernel_fs_type(e.type))
				continue;
			for (size_t i = 0; i < r->n && rc == 0; i++) {
				const struct root_source *s = &r->src[i];
				if (s->fd < 0 || !sandbox_path_under(e.mount_point, s->from))
					continue;
				snprintf(
				    err, err_len,
				    "%s holds %s at %s: bind the directories below it you need "
				    "instead",
				    s->from, host_root ? "a bind of the host's /" : e.type,
				    e.mount_point);
				rc = -EPERM;
			}
		}
	}
	fclose(f);
	pool_free(line);
	return rc;
}

void root_close(struct root_sources *r)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->src[i].fd >= 0)
			close(r->src[i].fd);
		r->src[i].fd = -1;
	}
	r->n = 0;
}

int root_open(const struct sandbox_spec *s, struct root_sources *r, char *err, size_t err_len)
{
	AN_ASSERT(s->n_binds <= SANDBOX_BINDS_MAX);
	r->n = 0;
	r->cwd[0] = '\0';
	for (size_t i = 0; i < AN_ARRAY_LEN(system_dirs); i++) {
		int rc = add_system_dir(r, system_dirs[i], err, err_len);
		if (rc != 0)
			return rc;
	}
	for (size_t i = 0; i < s->n_binds; i++) {
		int rc = add_bind(r, &s->binds[i], err, err_len);
		if (rc != 0)
			return rc;
	}
	/* The workspace, read-write: this process's own, never looked up by name. */
	if (s->cwd == NULL)
		return check_mounts(r, err, err_len);
	char cwd[PATH_MAX];
	int fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || path_of(fd, cwd) != 0) {
		if (fd >= 0)
			close(fd);
		return check_mounts(r, err, err_len); /* gone: the bridge starts in / */
	}
	if (strcmp(cwd, "/") == 0) {
		close(fd);
		return check_mounts(r, err, err_len); /* the whole host: not bound */
	}
	snprintf(r->cwd, sizeof(r->cwd), "%s", cwd);
	if (root_made(cwd)) {
		close(fd);
		return check_mounts(r, err, err_len); /* the sandbox's own /tmp, empty */
	}
	if (root_shows(r, cwd)) {
		close(fd);
		return check_mounts(r, err, err_len); /* in view already, as its parent is shown */
	}
	int rc = add_fd(r, fd, "the working directory", false, err, err_len);
	return rc == 0 ? check_mounts(r, err, err_len) : rc;
}

/* ---- In the child, inside the new mount namespace ---- */

void root_reopen(const struct child_ctx *c, struct root_sources *r)
{
	struct stat was, now;

	for (size_t i = 0; i < r->n; i++) {
		struct root_source *s = &r->src[i];
		if (s->fd < 0)
			continue;
		struct open_how how = { .flags = O_PATH | O_CLOEXEC | O_NOFOLLOW,
					.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
		int fd = (int)syscall(SYS_openat2, AT_FDCWD, s->from, &how, sizeof(how));
		int rc = fd >= 0 ? 0 : -errno;
		if (rc == 0 && (fstat(fd, &now) != 0 || fstat(s->fd, &was) != 0))
			rc = -errno;
		if (rc == 0 && (now.st_dev != was.st_dev || now.st_ino != was.st_ino))
			rc = -ESTALE;
		if (rc != 0)
			child_fail(c->err_fd, -rc,
				   "%s changed while the sandbox was made (a symlink or another "
				   "file put in its place?): %s",
				   s->from, strerror(-rc));
		close(s->fd);
		s->fd = fd;
	}
}

/* The stage: its descriptor and device, so nothing is ever made outside it. */
struct stage {
	int fd;
	dev_t dev;
	dev_t home_dev; /* the agent's home's tmpfs, ours too (0: none) */
};

/* Whether a directory on device <dev> is ours to make mount points in: no one else's. */
static bool stage_owns(const struct stage *st, dev_t dev)
{
	return dev == st->dev || (st->home_dev != 0 && dev == st->home_dev);
}

/* Opens <name> in <dir>, O_PATH, following no symlink and staying beneath <dir>. */
static int open_beneath(int dir, const char *name, int flags)
{
	struct open_how how = { .flags =
				    (uint64_t)(unsigned)(O_PATH | O_CLOEXEC | O_NOFOLLOW | flags),
				.resolve =
				    RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH };
	int fd = (int)syscall(SYS_openat2, dir, name, &how, sizeof(how));
	return fd >= 0 ? fd : -errno;
}

/*
 * The mount point for <path> (absolute, canonical) below the stage, as an
 * O_PATH descriptor: every component opened from the one before without
 * following a symlink; one that is missing made (a directory, or for the last
 * one of a file source an empty file), but only in a directory of the
 * stage's own tmpfs: inside a host directory bound there, -EXDEV. <made>
 * says whether the last one was made now.
 */
static int mount_point(const struct stage *st, const char *path, bool is_dir, bool *made)
{
	char name[NAME_MAX + 1];
	struct stat sb;

	AN_ASSERT(path[0] == '/' && path[1] != '\0');
	*made = false;
	int dir = dup(st->fd);
	for (const char *p = path + 1; dir >= 0;) {
		const char *end = strchr(p, '/');
		size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
		if (len == 0 || len > NAME_MAX || (len <= 2 && p[0] == '.' && p[len - 1] == '.')) {
			close(dir);
			return -EINVAL;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		bool last = end == NULL;
		bool want_dir = !last || is_dir;
		int fd = open_beneath(dir, name, want_dir ? O_DIRECTORY : 0);
		if (fd == -ENOENT) {
			/* Made only where no one but us can write: the stage's tmpfs. */
			int rc = fstat(dir, &sb) == 0 ? (stage_owns(st, sb.st_dev) ? 0 : -EXDEV)
						      : -errno;
			if (rc == 0 && want_dir)
				rc = mkdirat(dir, name, 0755) == 0 ? 0 : -errno;
			if (rc == 0 && !want_dir) {
				int f = openat(dir, name,
					       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
					       0444);
				rc = f >= 0 ? 0 : -errno;
				if (f >= 0)
					close(f);
			}
			fd = rc == 0 ? open_beneath(dir, name, want_dir ? O_DIRECTORY : 0) : rc;
			*made = last && fd >= 0;
		}
		close(dir);
		if (fd < 0)
			return fd;
		if (last) {
			if (!want_dir && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
				close(fd);
				return -EINVAL;
			}
			return fd;
		}
		dir = fd;
		p = end + 1;
	}
	return -errno;
}

/* Before Linux 5.12: a recursive bind through the descriptors, its top made read-only. */
static void bind_fallback(const struct child_ctx *c, const struct root_source *s, int target)
{
	char from[32], to[32];

	snprintf(from, sizeof(from), "/proc/self/fd/%d", s->fd);
	snprintf(to, sizeof(to), "/proc/self/fd/%d", target);
	must_mount(c, from, to, NULL, MS_BIND | MS_REC, NULL);
	if (!s->read_only)
		return;
	char staged[PATH_MAX + sizeof(ROOT_STAGE)];
	snprintf(staged, sizeof(staged), ROOT_STAGE "%s", s->path);
	bind_read_only(c, staged, MS_NODEV);
}

/*
 * Binds source <s> at its path below the stage: a detached clone of its tree,
 * restricted all the way down, then attached to the mount point's descriptor.
 */
static void bind_source(const struct child_ctx *c, const struct stage *st,
			const struct root_source *s)
{
	bool made = false;

	AN_ASSERT(s->fd >= 0);
	int target = mount_point(st, s->path, s->is_dir, &made);
	if (target < 0)
		child_fail(c->err_fd, -target, "the mount point of %s in the sandbox: %s", s->path,
			   strerror(-target));
	/* Inside another bind, the mount point is the host's: it must be the source itself. */
	struct stat at, src;
	if (!made &&
	    (fstat(target, &at) != 0 || fstat(s->fd, &src) != 0 ||
	     (!stage_owns(st, at.st_dev) && (at.st_dev != src.st_dev || at.st_ino != src.st_ino))))
		child_fail(c->err_fd, ESTALE,
			   "%s changed while the sandbox was made (renamed or replaced inside the "
			   "bind that holds it)",
			   s->path);
	int tree = (int)syscall(SYS_open_tree, s->fd, "",
				OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
	if (tree < 0 && errno == ENOSYS) {
		bind_fallback(c, s, target);
		close(target);
		return;
	}
	if (tree < 0)
		child_fail(c->err_fd, errno, "open_tree %s: %s", s->path, strerror(errno));
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
					       (s->read_only ? MOUNT_ATTR_RDONLY : 0) };
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
		    sizeof(attr)) != 0) {
		if (errno != ENOSYS)
			child_fail(c->err_fd, errno, "mount_setattr %s: %s", s->path,
				   strerror(errno));
		close(tree);
		bind_fallback(c, s, target);
		close(target);
		return;
	}
	if (syscall(SYS_move_mount, tree, "", target, "",
		    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
		child_fail(c->err_fd, errno, "move_mount %s: %s", s->path, strerror(errno));
	close(tree);
	close(target);
}

/* Copies the top-level symlink <s> onto the stage. */
static void copy_link(const struct child_ctx *c, const struct stage *st,
		      const struct root_source *s)
{
	AN_ASSERT(s->path[0] == '/' && strchr(s->path + 1, '/') == NULL);
	if (symlinkat(s->link, st->fd, s->path + 1) != 0)
		child_fail(c->err_fd, errno, "symlink %s: %s", s->path, strerror(errno));
}

static int by_length(const void *a, const void *b)
{
	size_t la = strlen(((const struct root_source *)a)->path);
	size_t lb = strlen(((const struct root_source *)b)->path);
	return la < lb ? -1 : la > lb;
}

/*
 * $HOME of the agent's environment, written the one way (no "//", "/./",
 * trailing "/"), into <out> (PATH_MAX): true, or false for none, a relative
 * one, or one with "..".
 */
static bool agent_home(const struct sandbox_spec *s, char *out)
{
	const char *home = NULL;
	size_t n = 0;

	for (char *const *e = s->envp; e != NULL && *e != NULL; e++) {
		if (strncmp(*e, "HOME=", 5) == 0)
			home = *e + 5;
	}
	if (home == NULL || home[0] != '/')
		return false;
	for (const char *p = home; *p != '\0';) {
		while (*p == '/')
			p++;
		size_t len = strcspn(p, "/");
		if (len == 0 || (len == 1 && p[0] == '.')) {
			p += len;
			continue;
		}
		if (len == 2 && p[0] == '.' && p[1] == '.')
			return false;
		if (n + 1 + len >= PATH_MAX - sizeof(ROOT_STAGE))
			return false;
		out[n++] = '/';
		memcpy(out + n, p, len);
		n += len;
		p += len;
	}
	out[n] = '\0';
	return n > 0;
}

/*
 * An empty home of the agent's own at $HOME, where nothing shows one: tools
 * write their settings and caches there, and the host's home (keys, tokens,
 * other projects) stays out of view unless bound. Made before the binds, on
 * the stage, so a working directory below it (~/project) is bound inside it
 * and the rest of it is the agent's to write; not where a source shows the
 * host's (a bind at or above it), not below a directory the sandbox makes (a
 * home in /tmp is the private /tmp's), nor where the host's root is parked.
 */
static void make_home(const struct child_ctx *c, struct stage *st, const struct root_sources *r)
{
	char home[PATH_MAX], target[32], options[96];
	struct stat sb;
	bool made = false;

	if (!agent_home(c->s, home) || root_made(home) || root_shows(r, home) ||
	    sandbox_path_under(home, ROOT_HOST_DIR))
		return;
	int fd = mount_point(st, home, true, &made);
	if (fd < 0 || !made) {
		if (fd < 0)
			fprintf(stderr, "agentsnet: no home of its own for the agent at %s: %s\n",
				home, strerror(-fd));
		if (fd >= 0)
			close(fd);
		return;
	}
	/* In a user namespace the agent is root inside: its uid and gid there are 0. */
	unsigned uid = c->s->userns ? 0u : (unsigned)c->s->user.uid;
	unsigned gid = c->s->userns ? 0u : (unsigned)c->s->user.gid;
	snprintf(options, sizeof(options), "mode=0700,uid=%u,gid=%u,size=%s", uid, gid,
		 SANDBOX_HOME_TMPFS_SIZE);
	snprintf(target, sizeof(target), "/proc/self/fd/%d", fd);
	must_mount(c, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options);
	close(fd);
	fd = open_beneath(st->fd, home + 1, O_DIRECTORY);
	if (fd < 0 || fstat(fd, &sb) != 0)
		child_fail(c->err_fd, fd < 0 ? -fd : errno, "the agent's home %s: %s", home,
			   strerror(fd < 0 ? -fd : errno));
	st->home_dev = sb.st_dev;
	close(fd);
}

/*
 * Makes directory <rel> of the root's own (<mode> exactly) or, with <link>,
 * the symlink: only where its parent is the stage's own tmpfs and nothing is
 * there yet. A bound host directory (--bind /var) and what is below it are
 * the host's: never made in, never chmod'ed. Returns whether it was made.
 */
static bool stage_entry(const struct child_ctx *c, const struct stage *st, const char *rel,
			mode_t mode, const char *link)
{
	char parent[32];
	struct stat sb;

	const char *slash = strrchr(rel, '/');
	snprintf(parent, sizeof(parent), "%.*s", slash != NULL ? (int)(slash - rel) : 1,
		 slash != NULL ? rel : ".");
	if (fstatat(st->fd, rel, &sb, AT_SYMLINK_NOFOLLOW) == 0)
		return false; /* there already: a bind's, or ours */
	if (errno != ENOENT)
		child_fail(c->err_fd, errno, "stat /%s: %s", rel, strerror(errno));
	if (fstatat(st->fd, parent, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode) ||
	    sb.st_dev != st->dev)
		return false; /* inside a host directory: not ours to change */
	int rc = link != NULL ? symlinkat(link, st->fd, rel) : mkdirat(st->fd, rel, mode);
	if (rc == 0 && link == NULL)
		rc = fchmodat(st->fd, rel, mode, 0); /* the umask must not change it */
	if (rc != 0)
		child_fail(c->err_fd, errno, "%s /%s: %s", link != NULL ? "symlink" : "mkdir", rel,
			   strerror(errno));
	return true;
}

/*
 * A private tmpfs (mode 1777) on directory <rel>, reached from the stage
 * without following a symlink; none when there is no such directory (a bound
 * host /var whose tmp is a symlink: it then leads into the private /tmp).
 */
static void stage_private(const struct child_ctx *c, const struct stage *st, const char *rel)
{
	char target[32];

	int fd = open_beneath(st->fd, rel, O_DIRECTORY);
	if (fd < 0)
		return;
	snprintf(target, sizeof(target), "/proc/self/fd/%d", fd);
	must_mount(c, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV,
		   "mode=1777,size=" SANDBOX_PRIVATE_TMPFS_SIZE);
	close(fd);
}

void root_enter(const struct child_ctx *c, struct root_sources *r)
{
	static const char *const skeleton[] = { "proc", "dev", "run", "tmp", "var", "sys" };
	struct stage st;
	struct stat sb;

	AN_ASSERT(r->n <= ROOT_SOURCES_MAX);
	must_mount(c, "tmpfs", ROOT_STAGE, "tmpfs", MS_NOSUID | MS_NODEV,
		   SANDBOX_ROOT_TMPFS_OPTIONS);
	st.fd = open(ROOT_STAGE, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (st.fd < 0 || fstat(st.fd, &sb) != 0)
		child_fail(c->err_fd, errno, "the sandbox's root: %s", strerror(errno));
	st.dev = sb.st_dev;
	st.home_dev = 0;
	make_home(c, &st, r);
	qsort(r->src, r->n, sizeof(r->src[0]), by_length);
	for (size_t i = 0; i < r->n; i++) {
		if (r->src[i].link[0] != '\0')
			copy_link(c, &st, &r->src[i]);
		else
			bind_source(c, &st, &r->src[i]);
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(skeleton); i++)
		stage_entry(c, &st, skeleton[i], 0755, NULL);
	stage_entry(c, &st, "var/tmp", 01777, NULL);
	stage_entry(c, &st, "var/run", 0, "../run");
	/* The private /tmp and /var/tmp, whatever the host's are. */
	stage_private(c, &st, "tmp");
	stage_private(c, &st, "var/tmp");
	if (!stage_entry(c, &st, ROOT_HOST_DIR + 1, 0700, NULL))
		child_fail(c->err_fd, EEXIST, "%s: already in the sandbox's root", ROOT_HOST_DIR);
	close(st.fd);
	if (syscall(SYS_pivot_root, ROOT_STAGE, ROOT_STAGE ROOT_HOST_DIR) == -1)
		child_fail(c->err_fd, errno, "pivot_root into the sandbox's root: %s",
			   strerror(errno));
	if (chdir("/") == -1)
		child_fail(c->err_fd, errno, "chdir /: %s", strerror(errno));
	root_close(r);
}

void root_leave(const struct child_ctx *c)
{
	AN_ASSERT(c->err_fd >= 0);
	if (umount2(ROOT_HOST_DIR, MNT_DETACH) == -1)
		child_fail(c->err_fd, errno, "detach the host's root: %s", strerror(errno));
	if (rmdir(ROOT_HOST_DIR) == -1)
		child_fail(c->err_fd, errno, "rmdir %s: %s", ROOT_HOST_DIR, strerror(errno));
	must_mount(c, NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
		   NULL);
}
