/*
 * The sandbox's root (tools/sandbox.h, SANDBOX_SYSTEM_DIRS): built by the
 * clone's child inside the new mount namespace, before anything else is
 * mounted there.
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
 * Three steps:
 * 1. root_open, before any mount: an O_PATH descriptor of every source (each
 *    system directory the host has, the working directory, each bind), and
 *    the target of each top-level symlink among the system directories.
 * 2. root_enter: a tmpfs mounted over the host's /tmp (in this mount
 *    namespace only) becomes the root. The sources are bound in order of
 *    their length (a parent before what it holds), each recursive (a bind
 *    keeps the mounts below it; a user namespace refuses one that would
 *    uncover what they cover), then read-only, nosuid and nodev (system
 *    directories, --ro-bind) or nosuid and nodev (the working directory,
 *    --bind), below as well where the kernel has mount_setattr; the mount
 *    points the sandbox fills itself; the agent's home; then pivot_root. The
 *    host's root stays at ROOT_HOST_DIR, because the later steps still bind
 *    from descriptors into it, and the kernel allows a fresh /proc and sysfs
 *    only while the host's are fully visible.
 * 3. root_leave, after every mount: the host's root detached, its mount
 *    point removed, and the root read-only, so the agent adds nothing there.
 */
#include "tools/sandbox_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/an.h"

/* Where the root is built: a tmpfs over the host's /tmp, seen only in this mount namespace. */
#define ROOT_STAGE "/tmp"

static const char *const system_dirs[] = { SANDBOX_SYSTEM_DIRS };
static const char *const made_dirs[] = { SANDBOX_MADE_DIRS };

static_assert(AN_ARRAY_LEN(system_dirs) <= 16u, "ROOT_SOURCES_MAX counts 16 system dirs");

/* Whether <path> is in view through a source of <r> already bound (a parent). */
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

/* Adds the host path <path> (canonical) as a source, opened O_PATH. */
static void add_source(const struct child_ctx *c, struct root_sources *r, const char *path,
		       bool read_only)
{
	struct stat st;

	AN_ASSERT(r->n < ROOT_SOURCES_MAX);
	AN_ASSERT(path[0] == '/' && strcmp(path, "/") != 0);
	struct root_source *s = &r->src[r->n];
	int len = snprintf(s->path, sizeof(s->path), "%s", path);
	if (len <= 0 || (size_t)len >= sizeof(s->path) - sizeof(ROOT_STAGE))
		child_fail(c->err_fd, ENAMETOOLONG, "%s: path too long for the sandbox", path);
	s->fd = open(path, O_PATH | O_CLOEXEC);
	if (s->fd == -1)
		child_fail(c->err_fd, errno, "open %s: %s", path, strerror(errno));
	if (fstat(s->fd, &st) == -1)
		child_fail(c->err_fd, errno, "stat %s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		child_fail(c->err_fd, EINVAL, "%s: neither a directory nor a regular file", path);
	s->is_dir = S_ISDIR(st.st_mode);
	s->read_only = read_only;
	s->link[0] = '\0';
	r->n++;
}

/*
 * A system directory that is a symlink (/bin -> usr/bin) is copied as the
 * symlink when what it names is inside another system directory, and bound
 * at its own path otherwise (/opt -> /data/opt), so it works inside either way.
 */
static void add_system_dir(const struct child_ctx *c, struct root_sources *r, const char *path)
{
	char canon[PATH_MAX];
	struct stat st;

	if (lstat(path, &st) == -1)
		return; /* the host has none */
	if (!S_ISLNK(st.st_mode)) {
		if (S_ISDIR(st.st_mode))
			add_source(c, r, path, true);
		return;
	}
	if (realpath(path, canon) == NULL)
		return; /* dangling on the host: nothing to show */
	struct root_source *s = &r->src[r->n];
	ssize_t n = readlink(path, s->link, sizeof(s->link) - 1);
	if (n > 0 && (size_t)n < sizeof(s->link) - 1 && strcmp(canon, path) != 0 &&
	    under_system_dir(canon)) {
		s->link[n] = '\0';
		snprintf(s->path, sizeof(s->path), "%s", path);
		s->fd = -1;
		s->is_dir = false;
		s->read_only = true;
		r->n++;
		return;
	}
	add_source(c, r, canon, true);
	snprintf(r->src[r->n - 1].path, sizeof(r->src[r->n - 1].path), "%s", path);
}

void root_open(const struct child_ctx *c, struct root_sources *r)
{
	const struct sandbox_spec *s = c->s;

	AN_ASSERT(s->n_binds <= SANDBOX_BINDS_MAX);
	r->n = 0;
	for (size_t i = 0; i < AN_ARRAY_LEN(system_dirs); i++)
		add_system_dir(c, r, system_dirs[i]);
	for (size_t i = 0; i < s->n_binds; i++)
		add_source(c, r, s->binds[i].path, s->binds[i].read_only);
	/* The workspace, read-write, unless the whole host, made by the sandbox, or shown already. */
	if (s->cwd != NULL && strcmp(s->cwd, "/") != 0 && !root_made(s->cwd) &&
	    !root_shows(r, s->cwd))
		add_source(c, r, s->cwd, false);
}

/* "<ROOT_STAGE><path>" into <out> (PATH_MAX bytes). */
static void staged(const char *path, char *out)
{
	AN_ASSERT(path[0] == '/');
	int n = snprintf(out, PATH_MAX, ROOT_STAGE "%s", path);
	AN_ASSERT(n > 0 && n < PATH_MAX);
}

/*
 * Makes directory <at> (staged) unless it is one; a symlink on the way is
 * refused (-ELOOP): a copied one may be absolute, and while the host's root
 * is still "/" it would lead out of the stage, onto the host.
 */
static int make_dir(const char *at)
{
	struct stat st;

	if (lstat(at, &st) == 0)
		return S_ISDIR(st.st_mode) ? 0 : S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR;
	if (errno != ENOENT)
		return -errno;
	return mkdir(at, 0755) == 0 ? 0 : -errno;
}

/* Makes every missing directory of <path> (below the stage) on the root's tmpfs, mode 0755. */
static int make_parents(const char *path, bool last_too)
{
	char at[PATH_MAX];

	staged(path, at);
	size_t base = sizeof(ROOT_STAGE) - 1;
	for (char *p = at + base + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		int ret = make_dir(at);
		*p = '/';
		if (ret < 0)
			return ret;
	}
	return last_too ? make_dir(at) : 0;
}

/*
 * Sets <attr> on the mount at <target> and every mount below it; before
 * Linux 5.12 (no mount_setattr), read-only on the top one only.
 */
static void restrict_tree(const struct child_ctx *c, const char *target, uint64_t attr)
{
	struct mount_attr ma = { .attr_set = attr };

	if (syscall(SYS_mount_setattr, AT_FDCWD, target, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &ma,
		    sizeof(ma)) == 0)
		return;
	if (errno != ENOSYS)
		child_fail(c->err_fd, errno, "mount_setattr %s: %s", target, strerror(errno));
	if (attr & MOUNT_ATTR_RDONLY)
		bind_read_only(c, target, MS_NODEV);
}

static void bind_source(const struct child_ctx *c, const struct root_source *s)
{
	char target[PATH_MAX], from[64];

	staged(s->path, target);
	if (s->link[0] != '\0') {
		int ret = make_parents(s->path, false);
		if (ret < 0 || symlink(s->link, target) == -1)
			child_fail(c->err_fd, ret < 0 ? -ret : errno, "symlink %s: %s", s->path,
				   strerror(ret < 0 ? -ret : errno));
		return;
	}
	AN_ASSERT(s->fd >= 0);
	int ret = make_parents(s->path, s->is_dir);
	if (ret == 0 && !s->is_dir) {
		int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
		ret = fd >= 0 ? 0 : -errno;
		if (fd >= 0)
			close(fd);
	}
	if (ret < 0)
		child_fail(c->err_fd, -ret, "the mount point of %s in the sandbox: %s", s->path,
			   strerror(-ret));
	snprintf(from, sizeof(from), "/proc/self/fd/%d", s->fd);
	must_mount(c, from, target, NULL, MS_BIND | MS_REC, NULL);
	uint64_t attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	restrict_tree(c, target, s->read_only ? attr | MOUNT_ATTR_RDONLY : attr);
}

static int by_length(const void *a, const void *b)
{
	size_t la = strlen(((const struct root_source *)a)->path);
	size_t lb = strlen(((const struct root_source *)b)->path);
	return la < lb ? -1 : la > lb;
}

/* The value of HOME in the agent's environment, or NULL. */
static const char *agent_home(const struct sandbox_spec *s)
{
	for (char *const *e = s->envp; e != NULL && *e != NULL; e++) {
		if (strncmp(*e, "HOME=", 5) == 0)
			return *e + 5;
	}
	return NULL;
}

/*
 * An empty home of the agent's own at $HOME, where nothing shows one: tools
 * write their settings and caches there, and the host's home (keys, tokens,
 * other projects) stays out of view unless bound. Not under a directory the
 * sandbox makes (a home in /tmp is the private /tmp's), nor below a
 * read-only bind (said on stderr).
 */
static void make_home(const struct child_ctx *c, const struct root_sources *r)
{
	char target[PATH_MAX], options[96];
	struct stat st;

	const char *home = agent_home(c->s);
	if (home == NULL || home[0] != '/' || strcmp(home, "/") == 0 || root_made(home) ||
	    strlen(home) >= PATH_MAX - sizeof(ROOT_STAGE) || strstr(home, "/..") != NULL)
		return;
	staged(home, target);
	if (root_shows(r, home) || lstat(target, &st) == 0)
		return; /* in view: the host's, through a bind */
	int ret = make_parents(home, true);
	if (ret < 0) {
		fprintf(stderr, "agentsnet: no home of its own for the agent at %s: %s\n", home,
			strerror(-ret));
		return;
	}
	/* In a user namespace the agent is root inside: its uid and gid there are 0. */
	unsigned uid = c->s->userns ? 0u : (unsigned)c->s->user.uid;
	unsigned gid = c->s->userns ? 0u : (unsigned)c->s->user.gid;
	snprintf(options, sizeof(options), "mode=0700,uid=%u,gid=%u,size=%s", uid, gid,
		 SANDBOX_HOME_TMPFS_SIZE);
	must_mount(c, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options);
}

void root_enter(const struct child_ctx *c, struct root_sources *r)
{
	static const char *const skeleton[] = { "/proc", "/dev", "/run", "/tmp", "/var", "/sys" };
	char path[PATH_MAX];

	AN_ASSERT(r->n <= ROOT_SOURCES_MAX);
	must_mount(c, "tmpfs", ROOT_STAGE, "tmpfs", MS_NOSUID | MS_NODEV,
		   SANDBOX_ROOT_TMPFS_OPTIONS);
	qsort(r->src, r->n, sizeof(r->src[0]), by_length);
	for (size_t i = 0; i < r->n; i++)
		bind_source(c, &r->src[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(skeleton); i++) {
		staged(skeleton[i], path);
		if (mkdir(path, 0755) == -1 && errno != EEXIST)
			child_fail(c->err_fd, errno, "mkdir %s: %s", skeleton[i], strerror(errno));
	}
	staged("/var/tmp", path);
	if (mkdir(path, 01777) == -1 && errno != EEXIST)
		child_fail(c->err_fd, errno, "mkdir /var/tmp: %s", strerror(errno));
	staged("/var/run", path);
	if (symlink("../run", path) == -1 && errno != EEXIST)
		child_fail(c->err_fd, errno, "symlink /var/run: %s", strerror(errno));
	/* The private /tmp and /var/tmp, whatever the host's are. */
	must_mount(c, "tmpfs", ROOT_STAGE "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
		   "mode=1777,size=" SANDBOX_PRIVATE_TMPFS_SIZE);
	must_mount(c, "tmpfs", ROOT_STAGE "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
		   "mode=1777,size=" SANDBOX_PRIVATE_TMPFS_SIZE);
	make_home(c, r);
	staged(ROOT_HOST_DIR, path);
	must_mkdir(c, path, 0700);
	if (syscall(SYS_pivot_root, ROOT_STAGE, path) == -1)
		child_fail(c->err_fd, errno, "pivot_root into the sandbox's root: %s",
			   strerror(errno));
	if (chdir("/") == -1)
		child_fail(c->err_fd, errno, "chdir /: %s", strerror(errno));
	for (size_t i = 0; i < r->n; i++) {
		if (r->src[i].fd >= 0)
			close(r->src[i].fd);
	}
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
