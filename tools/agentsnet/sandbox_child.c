/*
 * The child of `agentsnet run`'s clone, inside the new namespaces: it sets the
 * sandbox up and execs the bridge (child_main, started by tools/agentsnet/sandbox.c).
 *
 * Setup order matters: the uid/gid maps first (the child writes its own, "deny"
 * to setgroups before the gid map, as the kernel requires), the cgroup
 * namespace (it needs CAP_SYS_ADMIN in the user namespace), then RLIMIT_NPROC,
 * the other per-uid limits (below) and the names;
 * the mount tree private, so no mount leaks back to the host; every host file
 * the sandbox shows (its directory, the bridge, the CA, the probe, six device
 * nodes) opened O_PATH before anything is hidden; the root of its own
 * (tools/agentsnet/sandbox_root.c: the host's system directories read-only, the working
 * directory, the binds, the agent's home), the host's kept below it until the
 * last mount is made, then detached; a fresh /proc, its host-wide files
 * (key-users, timer_list, ...) replaced by /dev/null; a minimal
 * /dev: a small tmpfs with binds of null, zero, full, random, urandom and tty
 * (binds: mknod is refused in a user namespace; the binds keep no MS_NODEV), a
 * new devpts instance, a private /dev/shm and a new mqueue (the new IPC
 * namespace's queues), and nothing else of the host's (no disk, vsock, kvm,
 * fuse, tun, nor the host's /dev/pts, where the operator's other terminals
 * live); the agent's pty in that devpts; a fresh tmpfs over /run (which hides
 * the host's D-Bus and container-engine sockets, the control socket, every
 * other sandbox and /run/lock) with the directory bound read-only at
 * SANDBOX_MOUNT_DIR (read-only so the agent can neither unlink the daemon's
 * sockets nor rewrite sandbox.conf, which the daemon re-reads on restart;
 * connect() needs no write access to the mount); the other masks; the private
 * directories; a fresh sysfs, read-only (only `lo` in /sys/class/net, no host
 * cgroup tree: the agent can neither read the host's layout nor raise its own
 * limits; where the kernel refuses it, the host's /sys read-only instead, said
 * on stderr); `lo` up; and last the credentials:
 * every capability dropped (bounding set, ambient set, SECBIT_NOROOT locked,
 * no_new_privs), because a process holding CAP_SYS_ADMIN could simply unmount
 * the masks, and a fresh session keyring (after the switch to the agent's user,
 * so it is that user's; before the capabilities go), so the caller's keys are
 * out of reach.
 *
 * The kernel keeps some allowances per uid, whoever in it asks: queued signals
 * (RLIMIT_SIGPENDING, 96362 by default here), POSIX message queue bytes
 * (RLIMIT_MSGQUEUE, 800 KiB) and memory locked by SHM_LOCK or io_uring
 * (RLIMIT_MEMLOCK, 8 MiB), each checked as the uid's total against the
 * asking process's limit. Privileged, every sandbox's agent is the same
 * --user, whose host services share them too; so the sandbox's limits are
 * lowered (SANDBOX_SIGPENDING_MAX, SANDBOX_MSGQUEUE_BYTES,
 * SANDBOX_MEMLOCK_BYTES): it stops there while processes with the usual
 * limits keep room. Sandboxes of one --user still share: once the others hold
 * more than a sandbox's limit, it gets none. With a user namespace the kernel
 * counts per namespace, so each sandbox has its own count (charged to the
 * caller's uid as well, against the limits it had). Left shared: inotify
 * instances and watches (per-uid sysctls, not rlimits:
 * fs.inotify.max_user_instances is 128), which a sandbox as nobody can use up
 * for every other nobody, and pipe buffers (past fs.pipe-user-pages-soft the
 * uid's new pipes get one page); a uid per sandbox would be the full fix.
 *
 * So the agent's uid is what guards the rest of the file system. Unprivileged,
 * it is the caller's own, with the caller's supplementary groups: in a user
 * namespace the kernel forbids dropping them (setgroups is denied, so that a
 * group used as a deny rule cannot be shed). Privileged, a uid 0 without
 * capabilities would still own every root-owned file (/etc/passwd is 0644
 * root), so the sandbox switches to an unprivileged user (--user, default
 * nobody; never one in a privileged group) without any supplementary group,
 * between the securebits (NO_SETUID_FIXUP keeps the capabilities the last steps
 * need) and the final capset. Rejected: a user namespace mapping root inside to
 * that user, whose maps only the parent may write (one more handshake) and
 * which the host's sysctls may forbid even to root. The mounts happen before
 * the switch, so the bridge and the CA may live where that user cannot look (a
 * 0700 checkout); only the files themselves must be executable and readable.
 */
#include "tools/agentsnet/sandbox_int.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/keyctl.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"
#include "core/uid.h"
#include "tools/agentsnet/hostsock.h"

extern char **environ;

/* Every capability the kernel may know: PR_CAPBSET_DROP says EINVAL past the last. */
#define SANDBOX_CAPS_MAX           64
#define SANDBOX_MASK_TMPFS_OPTIONS "mode=0755,size=4k"
#define SANDBOX_SECUREBITS                                                                       \
	(SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |                         \
	 SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | \
	 SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)
/* The sandbox's /dev: a few nodes, links and mount points, nothing to store. */
#define SANDBOX_DEV_TMPFS_OPTIONS "mode=0755,size=64k"
#define SANDBOX_DEVPTS_OPTIONS    "newinstance,ptmxmode=0666,mode=0620"
#define SANDBOX_SHM_TMPFS_OPTIONS "mode=1777,size=1g"
/* What one sandbox may take of its uid's allowances, which every process of the uid shares. */
#define SANDBOX_SIGPENDING_MAX 1024u
#define SANDBOX_MSGQUEUE_BYTES (256u << 10)
#define SANDBOX_MEMLOCK_BYTES  (4u << 20)
/* The sandbox's host name (its own UTS namespace): the host's is none of the agent's business. */
#define SANDBOX_HOSTNAME   "agentsnet"
#define SANDBOX_DOMAINNAME "(none)"

/* The host's device nodes the sandbox's /dev holds (bound, never made). */
static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
#define SANDBOX_DEV_NODES AN_ARRAY_LEN(dev_nodes)

/* The O_PATH descriptors of what the sandbox shows of the host, opened before any mount. */
struct child_fds {
	int dir;
	int bridge;
	int ca;    /* -1: none */
	int probe; /* -1: none */
	int dev[SANDBOX_DEV_NODES];
};

/* ---- Inside the new namespaces, before the bridge runs. ---- */

/* Reports <err> and a message to the parent and exits; the exec never happens. */
_Noreturn void child_fail(int fd, int err, const char *fmt, ...)
{
	char msg[SANDBOX_ERROR_BYTES];
	int32_t code = err > 0 ? err : EIO;
	va_list ap;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(fmt != NULL);
	memcpy(msg, &code, sizeof(code));
	va_start(ap, fmt);
	vsnprintf(msg + sizeof(code), sizeof(msg) - sizeof(code), fmt, ap);
	va_end(ap);
	ssize_t n = write(fd, msg, sizeof(code) + strlen(msg + sizeof(code)));
	(void)n; /* nothing more to do if the parent is gone */
	_exit(127);
}

/* Blocks until the parent's "go" byte (it moved us into the cgroup); gives up if it is gone. */
static void wait_go(const struct child_ctx *c)
{
	char go = 0;
	ssize_t n;

	AN_ASSERT(c->alive_fd >= 0);
	do
		n = read(c->alive_fd, &go, 1);
	while (n == -1 && errno == EINTR);
	if (n != 1)
		_exit(127); /* the parent failed to place us, or died: nothing of the agent's ran */
	AN_ASSERT(go == 'g');
}

static int write_proc_file(const char *path, const char *text)
{
	AN_ASSERT(path != NULL);
	AN_ASSERT(text != NULL);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	ssize_t n = write(fd, text, strlen(text));
	int ret = n == (ssize_t)strlen(text) ? 0 : (n == -1 ? -errno : -EIO);
	close(fd);
	return ret;
}

/* The caller's uid and gid become 0 inside; setgroups must be denied before the gid map. */
static void map_ids(const struct child_ctx *c)
{
	char map[64];

	AN_ASSERT(c->s->userns);
	AN_ASSERT(c->err_fd >= 0);
	/* A caller that changed its uid is not dumpable, and then /proc/self is root's. */
	if (prctl(PR_GET_DUMPABLE, 0UL, 0UL, 0UL, 0UL) != 1)
		prctl(PR_SET_DUMPABLE, 1UL, 0UL, 0UL, 0UL);
	int ret = write_proc_file("/proc/self/setgroups", "deny");
	if (ret != 0 && ret != -ENOENT)
		child_fail(c->err_fd, -ret, "write /proc/self/setgroups: %s", strerror(-ret));
	snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)c->s->user.uid);
	ret = write_proc_file("/proc/self/uid_map", map);
	if (ret != 0)
		child_fail(c->err_fd, -ret, "write /proc/self/uid_map: %s", strerror(-ret));
	snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)c->s->user.gid);
	ret = write_proc_file("/proc/self/gid_map", map);
	if (ret != 0)
		child_fail(c->err_fd, -ret, "write /proc/self/gid_map: %s", strerror(-ret));
}

/*
 * The pids limit without a cgroup: RLIMIT_NPROC counts the processes of our
 * uid in the user namespace this process is in (and its children's), so in a
 * namespace of the sandbox's own it counts the sandbox's only.
 */
static void limit_nproc(const struct child_ctx *c)
{
	struct rlimit rl = { .rlim_cur = (rlim_t)c->nproc_max, .rlim_max = (rlim_t)c->nproc_max };

	AN_ASSERT(c->nproc_max > 0);
	AN_ASSERT(c->s->userns);
	if (setrlimit(RLIMIT_NPROC, &rl) == -1)
		child_fail(c->err_fd, errno, "setrlimit RLIMIT_NPROC %llu: %s",
			   (unsigned long long)c->nproc_max, strerror(errno));
}

/*
 * What this sandbox may take of its uid's kernel allowances. The kernel
 * counts queued signals, POSIX message queue bytes and memory locked with
 * SHM_LOCK (or registered with io_uring) per user, and checks the user's
 * total against the limit of the process asking: with these lowered, the
 * sandbox stops at its own limit while the uid's other processes, with the
 * usual limits (96362 signals, 800 KiB, 8 MiB by default), still find room.
 * RLIMIT_MEMLOCK also bounds each process's mlock(), at half the usual 8 MiB.
 * An inherited lower limit stays; none is raised.
 */
static void limit_allowances(const struct child_ctx *c)
{
	static const struct {
		int resource;
		rlim_t max;
		const char *name;
	} lims[] = {
		{ RLIMIT_SIGPENDING, SANDBOX_SIGPENDING_MAX, "RLIMIT_SIGPENDING" },
		{ RLIMIT_MSGQUEUE, SANDBOX_MSGQUEUE_BYTES, "RLIMIT_MSGQUEUE" },
		{ RLIMIT_MEMLOCK, SANDBOX_MEMLOCK_BYTES, "RLIMIT_MEMLOCK" },
	};
	struct rlimit rl;

	AN_ASSERT(c->err_fd >= 0);
	AN_ASSERT(AN_ARRAY_LEN(lims) == 3);
	for (size_t i = 0; i < AN_ARRAY_LEN(lims); i++) {
		if (getrlimit(lims[i].resource, &rl) == -1)
			child_fail(c->err_fd, errno, "getrlimit %s: %s", lims[i].name,
				   strerror(errno));
		if (rl.rlim_max > lims[i].max)
			rl.rlim_max = lims[i].max;
		if (rl.rlim_cur > rl.rlim_max)
			rl.rlim_cur = rl.rlim_max;
		if (setrlimit(lims[i].resource, &rl) == -1)
			child_fail(c->err_fd, errno, "setrlimit %s %llu: %s", lims[i].name,
				   (unsigned long long)rl.rlim_max, strerror(errno));
	}
}

/* The sandbox's own host and domain names, in its own UTS namespace. */
static void set_names(const struct child_ctx *c)
{
	AN_ASSERT(c->err_fd >= 0);
	AN_ASSERT(strlen(SANDBOX_HOSTNAME) < HOST_NAME_MAX);
	if (sethostname(SANDBOX_HOSTNAME, strlen(SANDBOX_HOSTNAME)) == -1)
		child_fail(c->err_fd, errno, "sethostname: %s", strerror(errno));
	if (setdomainname(SANDBOX_DOMAINNAME, strlen(SANDBOX_DOMAINNAME)) == -1)
		child_fail(c->err_fd, errno, "setdomainname: %s", strerror(errno));
}

void must_mount(const struct child_ctx *c, const char *src, const char *target, const char *type,
		unsigned long flags, const char *data)
{
	AN_ASSERT(target != NULL);
	AN_ASSERT(c->err_fd >= 0);
	if (mount(src, target, type, flags, data) == -1)
		child_fail(c->err_fd, errno, "mount %s on %s: %s",
			   type != NULL ? type : (src != NULL ? src : "(remount)"), target,
			   strerror(errno));
}

void must_mkdir(const struct child_ctx *c, const char *path, mode_t mode)
{
	AN_ASSERT(path != NULL);
	AN_ASSERT(path[0] == '/');
	if (mkdir(path, mode) == -1 && errno != EEXIST)
		child_fail(c->err_fd, errno, "mkdir %s: %s", path, strerror(errno));
	if (chmod(path, mode) == -1) /* the umask must not change it */
		child_fail(c->err_fd, errno, "chmod %s: %s", path, strerror(errno));
}

void must_symlink(const struct child_ctx *c, const char *target, const char *path)
{
	AN_ASSERT(target != NULL);
	AN_ASSERT(path[0] == '/');
	if (symlink(target, path) == -1)
		child_fail(c->err_fd, errno, "symlink %s: %s", path, strerror(errno));
}

static int must_open_path(const struct child_ctx *c, const char *path)
{
	AN_ASSERT(path != NULL);
	AN_ASSERT(c->err_fd >= 0);
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd == -1)
		child_fail(c->err_fd, errno, "open %s: %s", path, strerror(errno));
	return fd;
}

/* Everything the sandbox shows of the host, opened before any mount hides it. */
static void open_sources(const struct child_ctx *c, struct child_fds *f)
{
	char path[32];

	AN_ASSERT(c->s->dir != NULL);
	AN_ASSERT(c->s->bridge != NULL);
	f->dir = open(c->s->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (f->dir == -1)
		child_fail(c->err_fd, errno, "open %s: %s", c->s->dir, strerror(errno));
	f->bridge = must_open_path(c, c->s->bridge);
	f->ca = c->s->ca_path != NULL ? must_open_path(c, c->s->ca_path) : -1;
	f->probe = c->s->probe != NULL ? must_open_path(c, c->s->probe) : -1;
	for (size_t i = 0; i < SANDBOX_DEV_NODES; i++) {
		snprintf(path, sizeof(path), "/dev/%s", dev_nodes[i]);
		f->dev[i] = must_open_path(c, path);
	}
}

/*
 * Remounts the bind at <target> read-only and nosuid, plus <flags> (MS_NODEV,
 * MS_NOEXEC). In a user namespace the flags the source mount was locked with
 * must be kept, or the kernel refuses: carry the atime ones over (the others
 * are only added).
 */
void bind_read_only(const struct child_ctx *c, const char *target, unsigned long flags)
{
	struct statvfs sv;

	AN_ASSERT(target != NULL);
	AN_ASSERT(c->err_fd >= 0);
	flags |= MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID;
	if (statvfs(target, &sv) == -1)
		child_fail(c->err_fd, errno, "statvfs %s: %s", target, strerror(errno));
	if (sv.f_flag & ST_NOATIME)
		flags |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		flags |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		flags |= MS_RELATIME;
	must_mount(c, NULL, target, NULL, flags, NULL);
}

/* Binds the file open at <fd> (O_PATH, opened before any mount) read-only onto <target>. */
static void bind_file(const struct child_ctx *c, int fd, const char *target, unsigned long flags)
{
	char src[64];

	AN_ASSERT(fd >= 0);
	int t = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (t == -1)
		child_fail(c->err_fd, errno, "create %s: %s", target, strerror(errno));
	close(t);
	snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
	must_mount(c, src, target, NULL, MS_BIND, NULL);
	bind_read_only(c, target, flags);
	close(fd);
}

/*
 * A /dev of the sandbox's own: the six nodes (bound: usable, so no MS_NODEV),
 * the usual links, a new devpts instance (no gid=: a user namespace may not
 * map the tty group), a private /dev/shm and the new IPC namespace's mqueue;
 * then read-only, so nothing is added to it later.
 */
static void mount_dev(const struct child_ctx *c, const int *node_fds)
{
	static const char *const links[][2] = {
		{ "/proc/self/fd", "/dev/fd" },       { "/proc/self/fd/0", "/dev/stdin" },
		{ "/proc/self/fd/1", "/dev/stdout" }, { "/proc/self/fd/2", "/dev/stderr" },
		{ "pts/ptmx", "/dev/ptmx" },
	};
	char target[32];

	AN_ASSERT(node_fds != NULL);
	must_mount(c, "tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, SANDBOX_DEV_TMPFS_OPTIONS);
	for (size_t i = 0; i < SANDBOX_DEV_NODES; i++) {
		snprintf(target, sizeof(target), "/dev/%s", dev_nodes[i]);
		bind_file(c, node_fds[i], target, MS_NOEXEC);
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(links); i++)
		must_symlink(c, links[i][0], links[i][1]);
	must_mkdir(c, "/dev/pts", 0755);
	must_mount(c, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		   SANDBOX_DEVPTS_OPTIONS);
	must_mkdir(c, "/dev/shm", 01777);
	must_mount(c, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
		   SANDBOX_SHM_TMPFS_OPTIONS);
	must_mkdir(c, "/dev/mqueue", 01777);
	must_mount(c, "mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	must_mount(c, NULL, "/dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
		   NULL);
}

/* A fresh /run holding only the sandbox's directory, at SANDBOX_MOUNT_DIR. */
static void mount_run(const struct child_ctx *c, const struct child_fds *f)
{
	char src[64];

	AN_ASSERT(f->dir >= 0);
	AN_ASSERT(sandbox_path_under(SANDBOX_MOUNT_DIR, SANDBOX_RUN_DIR));
	must_mount(c, "tmpfs", SANDBOX_RUN_DIR, "tmpfs", MS_NOSUID | MS_NODEV,
		   SANDBOX_RUN_TMPFS_OPTIONS);
	must_mkdir(c, "/run/agentsnet", 0755);
	must_mkdir(c, SANDBOX_MOUNT_DIR, 0755);
	must_mkdir(c, "/run/lock", 01777);
	snprintf(src, sizeof(src), "/proc/self/fd/%d", f->dir);
	must_mount(c, src, SANDBOX_MOUNT_DIR, NULL, MS_BIND, NULL);
	bind_read_only(c, SANDBOX_MOUNT_DIR, MS_NODEV | MS_NOEXEC);
	close(f->dir);
	bind_file(c, f->bridge, SANDBOX_BRIDGE_PATH, MS_NODEV);
	if (f->ca >= 0)
		bind_file(c, f->ca, SANDBOX_CA_PATH, MS_NODEV | MS_NOEXEC);
	if (f->probe >= 0)
		bind_file(c, f->probe, SANDBOX_PROBE_PATH, MS_NODEV);
}

static bool is_dir_nofollow(const char *path)
{
	struct stat st;

	AN_ASSERT(path != NULL);
	AN_ASSERT(path[0] == '/');
	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void mask(const struct child_ctx *c, const char *path)
{
	AN_ASSERT(strcmp(path, "/") != 0);
	AN_ASSERT(!sandbox_path_under(SANDBOX_MOUNT_DIR, path));
	must_mount(c, "tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
		   SANDBOX_MASK_TMPFS_OPTIONS);
}

/*
 * The other hiding places of host sockets. A real /var/run gets the new /run
 * (as where it is a symlink); the socket directory, and the sandboxes'
 * directory if the daemon keeps it elsewhere, are masked when outside /run.
 */
static void mask_host(const struct child_ctx *c)
{
	char parent[PATH_MAX];

	AN_ASSERT(c->s->socket_dir[0] == '/');
	AN_ASSERT(c->s->dir[0] == '/');
	bool var_run_dir = is_dir_nofollow("/var/run");
	if (var_run_dir)
		must_mount(c, SANDBOX_RUN_DIR, "/var/run", NULL, MS_BIND | MS_REC, NULL);
	/* Only where the root shows them (the working directory, a bind). */
	if (sandbox_socket_dir_needs_mask(c->s->socket_dir, var_run_dir) &&
	    is_dir_nofollow(c->s->socket_dir))
		mask(c, c->s->socket_dir);
	snprintf(parent, sizeof(parent), "%s", c->s->dir);
	char *slash = strrchr(parent, '/');
	if (slash != NULL && slash != parent) {
		*slash = '\0';
		if (!sandbox_path_under(parent, c->s->socket_dir) &&
		    sandbox_socket_dir_needs_mask(parent, var_run_dir) && is_dir_nofollow(parent))
			mask(c, parent);
	}
}

/*
 * A private, empty instance of the world-writable directory <d>, or for a
 * masked one an empty, read-only tmpfs. It is looked up again without
 * following a symlink, and mounted on through that descriptor; one gone by now
 * (hidden by an earlier mount, removed, or replaced) is no longer reachable at
 * that path, so there is nothing to hide.
 */
static void mount_private(const struct child_ctx *c, const struct ww_dir *d)
{
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	char target[64], options[64];

	AN_ASSERT(d->path[0] == '/');
	AN_ASSERT(strcmp(d->path, "/") != 0);
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, d->path, &how, sizeof(how));
	if (fd == -1 && errno == ENOSYS)
		fd = open(d->path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EACCES))
		return;
	if (fd == -1)
		child_fail(c->err_fd, errno, "open %s: %s", d->path, strerror(errno));
	snprintf(target, sizeof(target), "/proc/self/fd/%d", fd);
	snprintf(options, sizeof(options), "mode=%o,size=%s", (unsigned)d->mode,
		 SANDBOX_PRIVATE_TMPFS_SIZE);
	unsigned long flags = MS_NOSUID | MS_NODEV;
	if (d->masked) {
		snprintf(options, sizeof(options), "%s", SANDBOX_MASK_TMPFS_OPTIONS);
		flags |= MS_NOEXEC | MS_RDONLY;
	}
	if (mount("tmpfs", target, "tmpfs", flags, options) == -1)
		child_fail(c->err_fd, errno, "mount tmpfs on %s: %s", d->path, strerror(errno));
	close(fd);
}

/* Whether <path> (as resolved inside the sandbox) is below what the sandbox made itself. */
static bool socket_path_ours(const char *path)
{
	static const char *const made[] = { SANDBOX_RUN_DIR, "/dev", "/proc", "/sys" };

	for (size_t i = 0; i < AN_ARRAY_LEN(made); i++) {
		if (sandbox_path_under(path, made[i]))
			return true;
	}
	return false;
}

/*
 * A bind of the sandbox's /dev/null over the host's socket file <path>, where
 * connect() is then refused. It is looked up without following a symlink (or,
 * when a directory on the way is one, following it as the agent would, but
 * never into the sandbox's own mounts) and mounted on through that
 * descriptor; a path that is no longer a socket file we can reach (hidden,
 * removed, replaced, or behind a directory we may not search, which the agent
 * may not either) needs nothing. The mask is of the file found at the start:
 * a service that binds its socket again later (a restart) makes a new file
 * the mask does not cover; `agentsnet selftest` reports what is reachable.
 */
static void mask_socket(const struct child_ctx *c, const char *path)
{
	struct open_how how = { .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	char target[64], seen[PATH_MAX];
	struct stat st;

	AN_ASSERT(path[0] == '/');
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
	if (fd == -1 && (errno == ENOSYS || errno == ELOOP)) {
		/*
		 * A symlink on the way (/var/lib/mysql -> /data/mysql): the agent's connect
		 * follows it, so the mask must too; never into what the sandbox made itself
		 * (its /run, /dev, /proc, /sys), where a planted link could aim it at the
		 * sandbox's own egress socket. The last component is never followed.
		 */
		fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		snprintf(target, sizeof(target), "/proc/self/fd/%d", fd);
		ssize_t n = fd >= 0 ? readlink(target, seen, sizeof(seen) - 1) : -1;
		seen[n > 0 ? n : 0] = '\0';
		if (fd >= 0 && (n <= 0 || seen[0] != '/' || socket_path_ours(seen))) {
			close(fd);
			return;
		}
	}
	if (fd == -1 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EACCES))
		return;
	if (fd == -1)
		child_fail(c->err_fd, errno, "open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) == -1)
		child_fail(c->err_fd, errno, "stat %s: %s", path, strerror(errno));
	if (S_ISSOCK(st.st_mode)) {
		snprintf(target, sizeof(target), "/proc/self/fd/%d", fd);
		if (mount("/dev/null", target, NULL, MS_BIND, NULL) == -1)
			child_fail(c->err_fd, errno, "mount /dev/null on the socket %s: %s", path,
				   strerror(errno));
	}
	close(fd);
}

/*
 * The host's /sys, cgroup hierarchies included, read-only: an agent that
 * owns its cgroup's files (a delegated v1 hierarchy, or host uid 0 without
 * CAP_SYS_ADMIN) could otherwise raise its own limits or move itself out of
 * them; read, they still tell runtimes their limits. Before Linux 5.12 (no
 * mount_setattr) the cgroup hierarchies are hidden instead.
 */
static void sys_read_only(const struct child_ctx *c)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY };

	AN_ASSERT(c->err_fd >= 0);
	if (!is_dir_nofollow("/sys"))
		return;
	if (syscall(SYS_mount_setattr, AT_FDCWD, "/sys", AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &attr,
		    sizeof(attr)) == 0)
		return;
	if (errno == EINVAL)
		return; /* not a mount point: no sysfs here */
	if (errno != ENOSYS)
		child_fail(c->err_fd, errno, "mount_setattr /sys read-only: %s", strerror(errno));
	if (is_dir_nofollow("/sys/fs/cgroup"))
		mask(c, "/sys/fs/cgroup");
}

/*
 * The sysfs files that tell of the host's kernel and firmware rather than the
 * sandbox: where the kernel's image lies in physical memory (vmcoreinfo), the
 * boot loader's parameters, the firmware's tables; hidden as /proc's are.
 */
static void mask_sys(const struct child_ctx *c)
{
	static const char *const files[] = { "/sys/kernel/vmcoreinfo" };
	static const char *const dirs[] = { "/sys/kernel/boot_params", "/sys/firmware" };
	struct stat st;

	for (size_t i = 0; i < AN_ARRAY_LEN(files); i++) {
		if (lstat(files[i], &st) == 0 && S_ISREG(st.st_mode)) {
			must_mount(c, "/dev/null", files[i], NULL, MS_BIND, NULL);
			bind_read_only(c, files[i], MS_NOEXEC);
		}
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(dirs); i++) {
		if (is_dir_nofollow(dirs[i]))
			mask(c, dirs[i]);
	}
}

/*
 * A sysfs of the sandbox's own over the host's, read-only: it shows the
 * sandbox's network namespace (only lo under /sys/class/net), and none of
 * the mounts below the host's /sys (the cgroup hierarchies, whose files tell
 * the host's layout, debugfs, securityfs, ...). The kernel allows it in a
 * user namespace too, which owns the network namespace, unless something
 * covers part of the host's sysfs; then the host's stays, read-only, and one
 * line says so.
 */
static void mount_sys(const struct child_ctx *c)
{
	AN_ASSERT(c->err_fd >= 0);
	AN_ASSERT(c->s != NULL);
	if (!is_dir_nofollow("/sys"))
		return;
	if (mount("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) ==
	    0) {
		mask_sys(c);
		return;
	}
	fprintf(stderr, "agentsnet: warning: no sysfs of the sandbox's own (%s); /sys is empty\n",
		strerror(errno));
	sys_read_only(c);
}

static void lo_up(const struct child_ctx *c)
{
	struct ifreq ifr;

	AN_ASSERT(c->err_fd >= 0);
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", sizeof("lo"));
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		child_fail(c->err_fd, errno, "socket(AF_INET): %s", strerror(errno));
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == -1)
		child_fail(c->err_fd, errno, "SIOCGIFFLAGS lo: %s", strerror(errno));
	ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) == -1)
		child_fail(c->err_fd, errno, "SIOCSIFFLAGS lo up: %s", strerror(errno));
	AN_ASSERT(ifr.ifr_flags & IFF_UP);
	close(fd);
}

/*
 * The files of the fresh /proc that still tell of the whole host, each
 * replaced by the sandbox's /dev/null where the kernel has it: which uids hold
 * keys (key-users), every task's timers and scheduling (timer_list,
 * sched_debug, latency_stats), kernel memory and symbols (kcore, kallsyms)
 * and the magic SysRq key. /proc/loadavg, stat, meminfo and uptime stay:
 * runtimes read them to size themselves (docs/sandbox.md).
 */
static void mask_proc(const struct child_ctx *c)
{
	static const char *const host_wide[] = {
		"/proc/key-users", "/proc/timer_list", "/proc/sched_debug",   "/proc/latency_stats",
		"/proc/kcore",     "/proc/kallsyms",   "/proc/sysrq-trigger",
	};
	struct stat st;

	for (size_t i = 0; i < AN_ARRAY_LEN(host_wide); i++) {
		if (lstat(host_wide[i], &st) == -1 || !S_ISREG(st.st_mode))
			continue;
		must_mount(c, "/dev/null", host_wide[i], NULL, MS_BIND, NULL);
		bind_read_only(c, host_wide[i], MS_NOEXEC); /* read: empty, no EACCES */
	}
}

/*
 * The working directory as the root shows it (root_open read its path from
 * the descriptor bound): one not shown becomes "/".
 */
static void enter_cwd(const struct child_ctx *c)
{
	const char *cwd = c->roots->cwd[0] != '\0' ? c->roots->cwd : NULL;

	AN_ASSERT(c->s != NULL);
	AN_ASSERT(cwd == NULL || cwd[0] == '/');
	if (cwd != NULL && chdir(cwd) == 0)
		return;
	if (cwd != NULL && errno == EACCES)
		fprintf(stderr, "agentsnet: %s is not reachable by uid %u; starting in /\n", cwd,
			(unsigned)getuid());
	else if (cwd != NULL || (c->s->cwd != NULL && strcmp(c->s->cwd, "/") != 0))
		fprintf(stderr, "agentsnet: %s is hidden in the sandbox; starting in /\n",
			cwd != NULL ? cwd : c->s->cwd);
	if (chdir("/") == -1)
		child_fail(c->err_fd, errno, "chdir /: %s", strerror(errno));
}

static void check_visible(const struct child_ctx *c)
{
	static const char hint[] = "it lives under /run or the socket directory";

	AN_ASSERT(c->s->bridge != NULL);
	AN_ASSERT(c->err_fd >= 0);
	if (access(SANDBOX_BRIDGE_PATH, X_OK) == -1)
		child_fail(c->err_fd, errno,
			   "the bridge %s is not executable inside the sandbox (%s?): %s",
			   c->s->bridge, hint, strerror(errno));
	if (c->s->ca_path != NULL && access(SANDBOX_CA_PATH, R_OK) == -1)
		child_fail(c->err_fd, errno,
			   "the CA %s is not readable inside the sandbox (%s?): %s", c->s->ca_path,
			   hint, strerror(errno));
	if (c->s->probe != NULL && access(SANDBOX_PROBE_PATH, X_OK) == -1)
		child_fail(c->err_fd, errno,
			   "the probe %s is not executable inside the sandbox (%s?): %s",
			   c->s->probe, hint, strerror(errno));
}

/*
 * The switch to the agent's user, without any supplementary group; the
 * securebits keep the capabilities across it.
 */
static void become_user(const struct child_ctx *c)
{
	const struct sandbox_user *u = &c->s->user;

	AN_ASSERT(u->uid != 0);
	AN_ASSERT(u->gid != 0);
	if (setgroups(0, NULL) == -1)
		child_fail(c->err_fd, errno, "setgroups: %s", strerror(errno));
	if (setresgid(u->gid, u->gid, u->gid) == -1)
		child_fail(c->err_fd, errno, "setresgid %u: %s", (unsigned)u->gid, strerror(errno));
	if (setresuid(u->uid, u->uid, u->uid) == -1)
		child_fail(c->err_fd, errno, "setresuid %u: %s", (unsigned)u->uid, strerror(errno));
	AN_ASSERT(getuid() == u->uid && geteuid() == u->uid);
	AN_ASSERT(getgid() == u->gid && getegid() == u->gid);
}

/* A new, empty session keyring: the caller's (and the keys it holds) is no longer ours. */
static void join_keyring(const struct child_ctx *c)
{
	AN_ASSERT(c->err_fd >= 0);
	AN_ASSERT(c->s != NULL);
	if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) == -1 && errno != ENOSYS)
		child_fail(c->err_fd, errno, "keyctl(KEYCTL_JOIN_SESSION_KEYRING): %s",
			   strerror(errno));
}

static void drop_privileges(const struct child_ctx *c)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	AN_ASSERT(c->err_fd >= 0);
	for (unsigned long cap = 0; cap < SANDBOX_CAPS_MAX; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0UL, 0UL, 0UL) == -1 && errno != EINVAL)
			child_fail(c->err_fd, errno, "PR_CAPBSET_DROP %lu: %s", cap,
				   strerror(errno));
	}
	if (prctl(PR_CAP_AMBIENT, (unsigned long)PR_CAP_AMBIENT_CLEAR_ALL, 0UL, 0UL, 0UL) == -1 &&
	    errno != EINVAL)
		child_fail(c->err_fd, errno, "PR_CAP_AMBIENT_CLEAR_ALL: %s", strerror(errno));
	if (prctl(PR_SET_SECUREBITS, (unsigned long)SANDBOX_SECUREBITS, 0UL, 0UL, 0UL) == -1)
		child_fail(c->err_fd, errno, "PR_SET_SECUREBITS: %s", strerror(errno));
	if (!c->s->userns)
		become_user(c);
	join_keyring(c);
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) == -1)
		child_fail(c->err_fd, errno, "capset: %s", strerror(errno));
	if (prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) == -1)
		child_fail(c->err_fd, errno, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
	int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0UL, 0UL, 0UL, 0UL);
	AN_ASSERT(nnp == 1);
}

/* Dies with the parent from now on; if it is already gone, gives up. */
static void watch_parent(const struct child_ctx *c)
{
	struct pollfd p = { .fd = c->alive_fd, .events = POLLIN };

	AN_ASSERT(c->alive_fd >= 0);
	AN_ASSERT(c->err_fd >= 0);
	if (prctl(PR_SET_PDEATHSIG, (unsigned long)SIGKILL, 0UL, 0UL, 0UL) == -1)
		child_fail(c->err_fd, errno, "PR_SET_PDEATHSIG: %s", strerror(errno));
	if (poll(&p, 1, 0) != 0)
		_exit(127);
}

/* Hands the ingress listener to the bridge at SANDBOX_INGRESS_FD (not close-on-exec). */
static void pass_ingress(const struct child_ctx *c)
{
	int fd = c->s->ingress_fd;

	if (fd < 0)
		return;
	if (fd == SANDBOX_INGRESS_FD) {
		if (fcntl(fd, F_SETFD, 0) == -1)
			child_fail(c->err_fd, errno, "fcntl ingress: %s", strerror(errno));
		return;
	}
	/* dup2 leaves the new descriptor without FD_CLOEXEC; a descriptor already
	 * at that number (close-on-exec, like every other) is replaced. */
	if (dup2(fd, SANDBOX_INGRESS_FD) == -1)
		child_fail(c->err_fd, errno, "dup2 ingress: %s", strerror(errno));
}

/* <fd> moved above the std descriptors (close-on-exec), which the pty's slave is put on. */
static int fd_above_std(const struct child_ctx *c, int fd, const char *what)
{
	AN_ASSERT(what != NULL);
	if (fd == -1)
		child_fail(c->err_fd, errno, "%s: %s", what, strerror(errno));
	if (fd > 2)
		return fd;
	int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (moved == -1)
		child_fail(c->err_fd, errno, "%s: %s", what, strerror(errno));
	close(fd);
	return moved;
}

/* Gives the slave <to> the settings and window size ptyrelay_open gave the slave <from>. */
static void pty_copy(const struct child_ctx *c, int from, int to)
{
	struct termios t;
	struct winsize ws;

	AN_ASSERT(from >= 0);
	AN_ASSERT(to >= 0);
	if (tcgetattr(from, &t) == -1 || tcsetattr(to, TCSANOW, &t) == -1)
		child_fail(c->err_fd, errno, "the sandbox's pty settings: %s", strerror(errno));
	if (ioctl(from, TIOCGWINSZ, &ws) == 0 && ioctl(to, TIOCSWINSZ, &ws) == -1)
		child_fail(c->err_fd, errno, "the sandbox's pty size: %s", strerror(errno));
}

/* Sends the master <fd> to the parent, which relays it from now on. */
static void pty_send(const struct child_ctx *c, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = "p", .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };

	AN_ASSERT(c->pty_fd >= 0);
	AN_ASSERT(fd >= 0);
	memset(cbuf, 0, sizeof(cbuf));
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
	if (sendmsg(c->pty_fd, &msg, MSG_NOSIGNAL) != 1)
		child_fail(c->err_fd, errno, "passing the sandbox's pty: %s", strerror(errno));
}

/*
 * The agent's terminal, made in the sandbox's own devpts (so it is
 * /dev/pts/0 there, ttyname() finds it, and nothing of the host's devpts is
 * referred to): a new pty with the settings and size of the one ptyrelay_open
 * made on the host, whose master goes to the parent (it relays that one
 * instead) and whose slave goes on the std descriptors that were terminals.
 */
static void pty_inside(const struct child_ctx *c)
{
	static struct ptyrelay inside; /* the child's copy of memory: nothing shared */
	int unlock = 0;

	AN_ASSERT(c->pty->master >= 0);
	AN_ASSERT(c->pty->slave >= 0);
	int m = fd_above_std(c, open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC),
			     "open /dev/pts/ptmx");
	if (ioctl(m, TIOCSPTLCK, &unlock) == -1)
		child_fail(c->err_fd, errno, "unlock the sandbox's pty: %s", strerror(errno));
	int s = fd_above_std(c, ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC),
			     "open the sandbox's pty slave");
	pty_copy(c, c->pty->slave, s);
	/* The agent's own, as a login's terminal is (made by root here without userns). */
	if (!c->s->userns && fchown(s, c->s->user.uid, (gid_t)-1) == -1)
		child_fail(c->err_fd, errno, "chown the sandbox's pty: %s", strerror(errno));
	pty_send(c, m);
	inside = *c->pty;
	inside.master = m;
	inside.slave = s;
	int ret = ptyrelay_child_stdio(&inside);
	if (ret != 0)
		child_fail(c->err_fd, -ret, "the pty's slave on stdin/stdout/stderr: %s",
			   strerror(-ret));
	close(c->pty->master);
	close(c->pty->slave);
	close(c->pty_fd);
}

/* Whether a line of the passwd or group text <text>/<len> has <id> as its third field. */
static bool id_listed(const char *text, size_t len, unsigned id)
{
	char want[16];
	int n = snprintf(want, sizeof(want), "%u", id);

	AN_ASSERT(n > 0 && (size_t)n < sizeof(want));
	for (size_t at = 0; at < len;) {
		const char *line = text + at;
		const char *end = memchr(line, '\n', len - at);
		size_t line_len = end != NULL ? (size_t)(end - line) : len - at;
		const char *field = line;
		/* The third field starts after the second colon. */
		for (int colons = 0; colons < 2 && field != NULL; colons++) {
			field = memchr(field, ':', line_len - (size_t)(field - line));
			field = field != NULL ? field + 1 : NULL;
		}
		size_t left = field != NULL ? line_len - (size_t)(field - line) : 0;
		if (field != NULL && left > (size_t)n && field[n] == ':' &&
		    memcmp(field, want, (size_t)n) == 0)
			return true;
		at += line_len + 1;
	}
	return false;
}

/*
 * Binds over <etc> a file of <len> bytes of <text>, read-only: made in the
 * sandbox's own /run, bound, then unlinked there.
 */
static void bind_made_file(const struct child_ctx *c, const char *etc, const char *text, size_t len)
{
	char made[64];

	AN_ASSERT(etc[0] == '/');
	snprintf(made, sizeof(made), "/run/agentsnet/%s", strrchr(etc, '/') + 1);
	int out = open(made, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out == -1 || write(out, text, len) != (ssize_t)len || fchmod(out, 0644) == -1)
		child_fail(c->err_fd, errno, "write %s: %s", made, strerror(errno));
	close(out);
	must_mount(c, made, etc, NULL, MS_BIND, NULL);
	bind_read_only(c, etc, MS_NODEV | MS_NOEXEC);
	if (unlink(made) == -1)
		child_fail(c->err_fd, errno, "unlink %s: %s", made, strerror(errno));
}

/*
 * Binds over <etc> (/etc/passwd or /etc/group) a copy with <line> added when
 * no entry has <id>: made in the sandbox's own /run, bound read-only, then
 * unlinked there. A host without the file, or with one over
 * SANDBOX_IDENTITY_FILE_MAX, is left as it is.
 */
static void identity_file(const struct child_ctx *c, const char *etc, unsigned id, const char *line)
{
	int fd = open(etc, O_RDONLY | O_CLOEXEC);
	if (fd == -1 && errno == ENOENT)
		return;
	if (fd == -1)
		child_fail(c->err_fd, errno, "open %s: %s", etc, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) ||
	    st.st_size > SANDBOX_IDENTITY_FILE_MAX) {
		close(fd);
		return;
	}
	size_t cap = (size_t)st.st_size + strlen(line) + 2;
	char *text = pool_malloc(cap);
	if (text == NULL)
		child_fail(c->err_fd, ENOMEM, "%s: out of memory", etc);
	size_t len = 0;
	for (ssize_t n = 1; n > 0 && len<(size_t)st.st_size; len += n> 0 ? (size_t)n : 0)
		n = read(fd, text + len, (size_t)st.st_size - len);
	close(fd);
	if (id_listed(text, len, id)) {
		pool_free(text);
		return;
	}
	if (len > 0 && text[len - 1] != '\n')
		text[len++] = '\n';
	memcpy(text + len, line, strlen(line));
	len += strlen(line);
	AN_ASSERT(len <= cap);
	bind_made_file(c, etc, text, len);
	pool_free(text);
}

/*
 * The sandbox's /etc/hostname, and the agent's own entry in the sandbox's /etc/passwd and /etc/group when the
 * host has none for its uid or gid (a uid daemon.sandbox_uids gave, or
 * --user UID:GID): tools ask who they are (whoami, Python's getpass, Node's
 * os.userInfo(), ssh) and fail without one. The host's files are untouched.
 */
static void identity_files(const struct child_ctx *c)
{
	char line[128];
	const struct sandbox_user *u = &c->s->user;

	struct stat st;

	/* The host's name is none of the agent's business: the sandbox's, as uname says. */
	if (lstat("/etc/hostname", &st) == 0 && S_ISREG(st.st_mode))
		bind_made_file(c, "/etc/hostname", SANDBOX_HOSTNAME "\n",
			       sizeof(SANDBOX_HOSTNAME "\n") - 1);
	if (c->s->userns)
		return; /* the agent is root inside, whom every passwd file lists */
	snprintf(line, sizeof(line), SANDBOX_AGENT_NAME ":x:%u:%u:agentsnet sandbox agent:%s:%s\n",
		 (unsigned)u->uid, (unsigned)u->gid, SANDBOX_AGENT_HOME, SANDBOX_AGENT_SHELL);
	identity_file(c, "/etc/passwd", (unsigned)u->uid, line);
	snprintf(line, sizeof(line), SANDBOX_AGENT_NAME ":x:%u:\n", (unsigned)u->gid);
	identity_file(c, "/etc/group", (unsigned)u->gid, line);
}

_Noreturn void child_main(const struct child_ctx *c)
{
	struct child_fds f;

	AN_ASSERT(c->s != NULL);
	AN_ASSERT(c->argv[0] != NULL);
	wait_go(c);
	/* Descriptors the caller leaked to us could reach hidden directories. */
	if (close_range(3U, ~0U, CLOSE_RANGE_CLOEXEC) == -1)
		child_fail(c->err_fd, errno, "close_range: %s", strerror(errno));
	if (setsid() == -1)
		child_fail(c->err_fd, errno, "setsid: %s", strerror(errno));
	if (c->s->userns)
		map_ids(c);
	/* Rooted at the cgroup the go byte put us in (CAP_SYS_ADMIN still ours): no host path. */
	if (unshare(CLONE_NEWCGROUP) == -1)
		child_fail(c->err_fd, errno, "unshare(CLONE_NEWCGROUP): %s", strerror(errno));
	if (c->nproc_max > 0)
		limit_nproc(c);
	limit_allowances(c);
	set_names(c);
	must_mount(c, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	open_sources(c, &f);
	root_reopen(c, c->roots);
	root_enter(c, c->roots);
	must_mount(c, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_dev(c, f.dev);
	mask_proc(c);
	if (c->pty->master >= 0)
		pty_inside(c);
	mount_run(c, &f);
	identity_files(c);
	mask_host(c);
	/* Last, so the masks above still found their mount points (a socket directory in /tmp). */
	for (size_t i = 0; i < c->ww->n; i++)
		mount_private(c, &c->ww->dirs[i]);
	for (const char *p = hostsock_next(&c->sockets, NULL); p != NULL;
	     p = hostsock_next(&c->sockets, p))
		mask_socket(c, p);
	mount_sys(c);
	root_leave(c);
	lo_up(c);
	drop_privileges(c);
	/* As the agent's user from here: what it cannot reach is a clear error now. */
	enter_cwd(c);
	check_visible(c);
	watch_parent(c);
	if (sigprocmask(SIG_SETMASK, &c->s->child_mask, NULL) == -1)
		child_fail(c->err_fd, errno, "sigprocmask: %s", strerror(errno));
	pass_ingress(c);
	char *const *envp = c->s->envp != NULL ? c->s->envp : environ;
	execve(c->argv[0], (char *const *)c->argv, envp);
	child_fail(c->err_fd, errno, "exec %s: %s", c->argv[0], strerror(errno));
}
