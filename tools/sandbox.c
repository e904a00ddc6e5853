/*
 * The namespaces of `agentsnet run`, and the supervision of the bridge in them.
 *
 * One clone3() (fork-like: no separate stack, so the sanitizers see an
 * ordinary child; the legacy clone syscall with a NULL stack where clone3 is
 * filtered) creates the network, mount and PID namespaces at once, plus a user
 * namespace when we lack CAP_SYS_ADMIN. The child is PID 1 of the new PID
 * namespace, sets the sandbox up, and execs the bridge, which therefore is the
 * namespace's init: when it exits every process in the sandbox is killed and
 * reaped, and the namespaces die with their last process. Nothing to clean up.
 *
 * Setup order matters: the uid/gid maps first (the child writes its own,
 * "deny" to setgroups before the gid map, as the kernel requires); the mount
 * tree private, so no mount leaks back to the host; the sandbox's directory
 * opened (O_PATH) before anything is hidden; a fresh /proc for the new PID
 * namespace; a fresh tmpfs over /run (which hides the host's D-Bus and
 * container-engine sockets, the control socket and every other sandbox) with
 * the directory bound read-only at SANDBOX_MOUNT_DIR (read-only so the agent
 * can neither unlink the daemon's sockets nor rewrite sandbox.conf, which the
 * daemon re-reads on restart; connect() needs no write access to the mount);
 * then the other masks; `lo` up; and last every capability dropped (bounding
 * set, ambient set, SECBIT_NOROOT locked, no_new_privs), because a process
 * holding CAP_SYS_ADMIN could simply unmount the masks. The host file system
 * otherwise stays as it is: the agent keeps its tools, the CA file, its work.
 *
 * So the agent's uid is what guards that file system. Unprivileged, it is the
 * caller's own. Privileged, a uid 0 without capabilities would still own
 * every root-owned file (/etc/passwd is 0644 root), so the sandbox switches
 * to an unprivileged user (--user, default nobody) between the securebits
 * (NO_SETUID_FIXUP keeps the capabilities the last steps need) and the final
 * capset. Rejected: a user namespace mapping root inside to that user, whose
 * maps only the parent may write (one more handshake) and which the host's
 * sysctls may forbid even to root. (Root without CAP_SYS_ADMIN, as in a
 * container, gets the unprivileged path: a user namespace mapping its own
 * uid, so the agent is that container's root and no more.) The mounts
 * happen before the switch, so the bridge and the CA may live where that
 * user cannot look (a 0700 checkout); only the files themselves must be
 * executable and readable.
 *
 * Setup errors travel back over a close-on-exec pipe (errno, then a message):
 * EOF with no bytes means the exec succeeded. A second pipe, whose write end
 * only the parent holds, plus PR_SET_PDEATHSIG, makes the sandbox die with
 * `agentsnet run` even when that is SIGKILLed. Rejected: fork + unshare (an
 * extra process between us and PID 1), and a setuid helper.
 */
#include "tools/sandbox.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

extern char **environ;

/* Every capability the kernel may know: PR_CAPBSET_DROP says EINVAL past the last. */
#define SANDBOX_CAPS_MAX           64
#define SANDBOX_MASK_TMPFS_OPTIONS "mode=0755,size=4k"
#define SANDBOX_SECUREBITS                                                                       \
	(SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |                         \
	 SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | \
	 SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

struct child_ctx {
	const struct sandbox_spec *s;
	const char *const *argv;
	int err_fd;
	int alive_fd;
};

/* ---- Parent-side helpers, pure enough to unit-test. ---- */

bool sandbox_path_under(const char *path, const char *dir)
{
	AN_ASSERT(path != NULL);
	AN_ASSERT(path[0] == '/');
	AN_ASSERT(dir != NULL);
	AN_ASSERT(dir[0] == '/');
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	if (len == 1)
		return true; /* everything is under "/" */
	return strncmp(path, dir, len) == 0 && (path[len] == '\0' || path[len] == '/');
}

bool sandbox_socket_dir_needs_mask(const char *socket_dir, bool var_run_is_dir)
{
	AN_ASSERT(socket_dir != NULL);
	AN_ASSERT(socket_dir[0] == '/');
	if (sandbox_path_under(socket_dir, SANDBOX_RUN_DIR))
		return false;
	return !(var_run_is_dir && sandbox_path_under(socket_dir, "/var/run"));
}

int sandbox_bridge_argv(const struct sandbox_spec *s, const char **argv, size_t cap)
{
	size_t n = 0;

	AN_ASSERT(s->bridge != NULL);
	AN_ASSERT(s->cmd != NULL);
	AN_ASSERT(s->cmd[0] != NULL);
	const char *head[] = { SANDBOX_BRIDGE_PATH, "--egress", SANDBOX_EGRESS_SOCKET, "--ingress",
			       SANDBOX_INGRESS_SOCKET };
	for (size_t i = 0; i < AN_ARRAY_LEN(head) && n < cap; i++)
		argv[n++] = head[i];
	if (s->ingress_fd >= 0 && n + 2 <= cap) {
		static char fd_text[12];
		snprintf(fd_text, sizeof(fd_text), "%d", SANDBOX_INGRESS_FD);
		argv[n++] = "--ingress-fd";
		argv[n++] = fd_text;
	}
	if (s->ca_path != NULL && n + 2 <= cap) {
		argv[n++] = "--ca";
		argv[n++] = SANDBOX_CA_PATH;
	}
	if (s->public_url != NULL && n + 2 <= cap) {
		argv[n++] = "--public-url";
		argv[n++] = s->public_url;
	}
	if (n < cap)
		argv[n++] = "--";
	for (size_t i = 0; s->cmd[i] != NULL && n < cap; i++)
		argv[n++] = s->cmd[i];
	if (n >= cap)
		return -E2BIG;
	argv[n] = NULL;
	return (int)n;
}

/* A decimal id below 2^32 - 1 ((uid_t)-1 means "unchanged" to the kernel). */
static bool parse_id(const char *text, uint32_t *out)
{
	uint64_t v = 0;

	AN_ASSERT(text != NULL);
	AN_ASSERT(out != NULL);
	if (*text == '\0')
		return false;
	for (const char *p = text; *p != '\0'; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
		if (v >= UINT32_MAX)
			return false;
	}
	*out = (uint32_t)v;
	return true;
}

static int user_refuse(const struct sandbox_user *u, char *err, size_t err_len)
{
	AN_ASSERT(u != NULL);
	AN_ASSERT(err != NULL);
	if (u->uid == 0 || u->gid == 0) {
		snprintf(err, err_len,
			 "--user: the agent never runs as %s 0 on the host (it could write what "
			 "root owns); name an unprivileged user",
			 u->uid == 0 ? "uid" : "gid");
		return -EPERM;
	}
	for (size_t i = 0; i < u->group_count; i++) {
		if (u->groups[i] == 0) {
			snprintf(err, err_len,
				 "--user: uid %u is a member of group 0 (root); name a user that "
				 "is not",
				 (unsigned)u->uid);
			return -EPERM;
		}
	}
	return 0;
}

int sandbox_user_parse(const char *text, struct sandbox_user *u, char *err, size_t err_len)
{
	char name[256];
	uint32_t id = 0;

	AN_ASSERT(text != NULL);
	AN_ASSERT(u != NULL);
	memset(u, 0, sizeof(*u));
	const char *colon = strchr(text, ':');
	size_t len = colon != NULL ? (size_t)(colon - text) : strlen(text);
	if (len == 0 || len >= sizeof(name) || (colon != NULL && colon[1] == '\0')) {
		snprintf(err, err_len, "--user %s: expected USER or UID, optionally :GROUP", text);
		return -EINVAL;
	}
	memcpy(name, text, len);
	name[len] = '\0';
	bool numeric = parse_id(name, &id);
	struct passwd *pw = numeric ? getpwuid((uid_t)id) : getpwnam(name);
	if (pw == NULL && !numeric) {
		snprintf(err, err_len, "--user %s: no such user", name);
		return -ENOENT;
	}
	u->uid = pw != NULL ? pw->pw_uid : (uid_t)id;
	if (colon != NULL) {
		struct group *gr = parse_id(colon + 1, &id) ? NULL : getgrnam(colon + 1);
		if (gr == NULL && !parse_id(colon + 1, &id)) {
			snprintf(err, err_len, "--user %s: no such group %s", text, colon + 1);
			return -ENOENT;
		}
		u->gid = gr != NULL ? gr->gr_gid : (gid_t)id;
	} else if (pw != NULL) {
		u->gid = pw->pw_gid;
	} else {
		snprintf(err, err_len,
			 "--user %s: uid %s has no passwd entry; give its group too "
			 "(--user %s:GID)",
			 text, name, name);
		return -ENOENT;
	}
	if (pw != NULL && colon == NULL) {
		int n = SANDBOX_GROUPS_MAX;
		if (getgrouplist(pw->pw_name, u->gid, u->groups, &n) == -1) {
			snprintf(err, err_len, "--user %s: in more than %d groups", name,
				 SANDBOX_GROUPS_MAX);
			return -E2BIG;
		}
		u->group_count = (size_t)n;
	} else {
		u->groups[0] = u->gid; /* only the group asked for */
		u->group_count = 1;
	}
	return user_refuse(u, err, err_len);
}

static_assert(CAP_SYS_ADMIN < 32 && CAP_NET_ADMIN < 32 && CAP_SETPCAP < 32,
	      "the capabilities sandbox_needs_userns checks are in the first word");

static bool has_caps(const int *caps, size_t n)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	AN_ASSERT(caps != NULL);
	AN_ASSERT(n > 0);
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) == -1)
		return false;
	for (size_t i = 0; i < n; i++) {
		if ((data[caps[i] / 32].effective & (1u << (caps[i] % 32))) == 0)
			return false;
	}
	return true;
}

bool sandbox_needs_userns(void)
{
	/* Mounts, `lo` and dropping the bounding set, in namespaces the host's user owns. */
	static const int caps[] = { CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP };

	AN_ASSERT(AN_ARRAY_LEN(caps) == 3);
	return !has_caps(caps, AN_ARRAY_LEN(caps));
}

/* Reads a sysctl holding one integer: 0, -errno, or -EINVAL when it is not one. */
static int read_sysctl(const char *path, long *value)
{
	char buf[32];

	AN_ASSERT(path != NULL);
	AN_ASSERT(value != NULL);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	int saved = errno;
	close(fd);
	if (n <= 0)
		return n == 0 ? -EINVAL : -saved;
	buf[n] = '\0';
	char *end = NULL;
	*value = strtol(buf, &end, 10);
	return end != buf && (*end == '\n' || *end == '\0') ? 0 : -EINVAL;
}

int sandbox_userns_allowed(char *err, size_t err_len)
{
	static const struct {
		const char *path, *sysctl, *fix;
	} knobs[] = {
		{ "/proc/sys/kernel/unprivileged_userns_clone", "kernel.unprivileged_userns_clone",
		  "1" },
		{ "/proc/sys/user/max_user_namespaces", "user.max_user_namespaces", "10000" },
	};
	long v = 0;

	AN_ASSERT(err != NULL);
	AN_ASSERT(err_len > 0);
	for (size_t i = 0; i < AN_ARRAY_LEN(knobs); i++) {
		if (read_sysctl(knobs[i].path, &v) != 0 || v != 0)
			continue;
		snprintf(err, err_len,
			 "unprivileged user namespaces are not allowed on this host (%s is 0): run "
			 "agentsnet run as root, or allow them with: sysctl -w %s=%s",
			 knobs[i].path, knobs[i].sysctl, knobs[i].fix);
		return -EPERM;
	}
	return 0;
}

void sandbox_signals_block(sigset_t *old)
{
	sigset_t set;

	AN_ASSERT(old != NULL);
	sigemptyset(&set);
	for (size_t i = 0; i < AN_ARRAY_LEN(forwarded); i++)
		sigaddset(&set, forwarded[i]);
	sigaddset(&set, SIGCHLD);
	int ret = sigprocmask(SIG_BLOCK, &set, old);
	AN_ASSERT(ret == 0);
	/* An inherited SIG_IGN would make the kernel reap the bridge before we see it. */
	signal(SIGCHLD, SIG_DFL);
}

static bool ignored(int sig)
{
	struct sigaction sa;

	AN_ASSERT(sig > 0);
	AN_ASSERT(sig < NSIG);
	return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
}

int sandbox_signal_pending(void)
{
	sigset_t pending;

	AN_ASSERT(AN_ARRAY_LEN(forwarded) > 0);
	int ret = sigpending(&pending);
	AN_ASSERT(ret == 0);
	for (size_t i = 0; i < AN_ARRAY_LEN(forwarded); i++) {
		if (sigismember(&pending, forwarded[i]) == 1 && !ignored(forwarded[i]))
			return forwarded[i];
	}
	return 0;
}

/* ---- Inside the new namespaces, before the bridge runs. ---- */

/* Reports <err> and a message to the parent and exits; the exec never happens. */
__attribute__((format(printf, 3, 4))) static _Noreturn void child_fail(int fd, int err,
								       const char *fmt, ...)
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

static void must_mount(const struct child_ctx *c, const char *src, const char *target,
		       const char *type, unsigned long flags, const char *data)
{
	AN_ASSERT(target != NULL);
	AN_ASSERT(c->err_fd >= 0);
	if (mount(src, target, type, flags, data) == -1)
		child_fail(c->err_fd, errno, "mount %s on %s: %s",
			   type != NULL ? type : (src != NULL ? src : "(remount)"), target,
			   strerror(errno));
}

static void must_mkdir(const struct child_ctx *c, const char *path, mode_t mode)
{
	AN_ASSERT(path != NULL);
	AN_ASSERT(path[0] == '/');
	if (mkdir(path, mode) == -1 && errno != EEXIST)
		child_fail(c->err_fd, errno, "mkdir %s: %s", path, strerror(errno));
	if (chmod(path, mode) == -1) /* the umask must not change it */
		child_fail(c->err_fd, errno, "chmod %s: %s", path, strerror(errno));
}

/*
 * Remounts the bind at <target> read-only, nosuid, nodev, noexec. In a user
 * namespace the flags the source mount was locked with must be kept, or the
 * kernel refuses: carry the atime ones over (the others are only added).
 */
static void bind_read_only(const struct child_ctx *c, const char *target, bool exec)
{
	struct statvfs sv;
	unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV;

	if (!exec)
		flags |= MS_NOEXEC;
	AN_ASSERT(target != NULL);
	AN_ASSERT(c->err_fd >= 0);
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

/* A fresh /run holding only the sandbox's directory, at SANDBOX_MOUNT_DIR. */
/* Binds the file open at <fd> (O_PATH, opened before any mount) read-only onto <target>. */
static void bind_file(const struct child_ctx *c, int fd, const char *target, bool exec)
{
	char src[64];

	AN_ASSERT(fd >= 0);
	int t = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (t == -1)
		child_fail(c->err_fd, errno, "create %s: %s", target, strerror(errno));
	close(t);
	snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
	must_mount(c, src, target, NULL, MS_BIND, NULL);
	bind_read_only(c, target, exec);
	close(fd);
}

static void mount_run(const struct child_ctx *c, int dir_fd, int bridge_fd, int ca_fd)
{
	char src[64];

	AN_ASSERT(dir_fd >= 0);
	AN_ASSERT(sandbox_path_under(SANDBOX_MOUNT_DIR, SANDBOX_RUN_DIR));
	must_mount(c, "tmpfs", SANDBOX_RUN_DIR, "tmpfs", MS_NOSUID | MS_NODEV,
		   SANDBOX_RUN_TMPFS_OPTIONS);
	must_mkdir(c, "/run/agentsnet", 0755);
	must_mkdir(c, SANDBOX_MOUNT_DIR, 0755);
	must_mkdir(c, "/run/lock", 01777);
	snprintf(src, sizeof(src), "/proc/self/fd/%d", dir_fd);
	must_mount(c, src, SANDBOX_MOUNT_DIR, NULL, MS_BIND, NULL);
	bind_read_only(c, SANDBOX_MOUNT_DIR, false);
	close(dir_fd);
	bind_file(c, bridge_fd, SANDBOX_BRIDGE_PATH, true);
	if (ca_fd >= 0)
		bind_file(c, ca_fd, SANDBOX_CA_PATH, false);
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
	if (sandbox_socket_dir_needs_mask(c->s->socket_dir, var_run_dir))
		mask(c, c->s->socket_dir);
	snprintf(parent, sizeof(parent), "%s", c->s->dir);
	char *slash = strrchr(parent, '/');
	if (slash != NULL && slash != parent) {
		*slash = '\0';
		if (!sandbox_path_under(parent, c->s->socket_dir) &&
		    sandbox_socket_dir_needs_mask(parent, var_run_dir))
			mask(c, parent);
	}
	/*
	 * A private /tmp, last so the masks above still find their mount points:
	 * the host's /tmp holds sockets of its own (tmux, screen, ssh-agent, X11),
	 * and a tmux socket is a shell on the host.
	 */
	if (is_dir_nofollow("/tmp"))
		must_mount(c, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
			   SANDBOX_TMP_TMPFS_OPTIONS);
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

/* The working directory, looked up again in the new tree: a hidden one becomes "/". */
static void enter_cwd(const struct child_ctx *c)
{
	const char *cwd = c->s->cwd;

	AN_ASSERT(c->s != NULL);
	AN_ASSERT(cwd == NULL || cwd[0] == '/');
	if (cwd != NULL && chdir(cwd) == 0)
		return;
	if (cwd != NULL && errno == EACCES)
		fprintf(stderr, "agentsnet: %s is not reachable by uid %u; starting in /\n", cwd,
			(unsigned)getuid());
	else if (cwd != NULL)
		fprintf(stderr, "agentsnet: %s is hidden in the sandbox; starting in /\n", cwd);
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
}

/* The switch to the agent's user; the securebits keep the capabilities across it. */
static void become_user(const struct child_ctx *c)
{
	const struct sandbox_user *u = &c->s->user;

	AN_ASSERT(u->uid != 0);
	AN_ASSERT(u->gid != 0);
	if (setgroups(u->group_count, u->groups) == -1)
		child_fail(c->err_fd, errno, "setgroups: %s", strerror(errno));
	if (setresgid(u->gid, u->gid, u->gid) == -1)
		child_fail(c->err_fd, errno, "setresgid %u: %s", (unsigned)u->gid, strerror(errno));
	if (setresuid(u->uid, u->uid, u->uid) == -1)
		child_fail(c->err_fd, errno, "setresuid %u: %s", (unsigned)u->uid, strerror(errno));
	AN_ASSERT(getuid() == u->uid && geteuid() == u->uid);
	AN_ASSERT(getgid() == u->gid && getegid() == u->gid);
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

int sandbox_ingress_listen(const char *dir)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	AN_ASSERT(dir != NULL);
	int n = snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/ingress.sock", dir);
	if (n < 0 || (size_t)n >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	struct stat st;
	if (lstat(sun.sun_path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(sun.sun_path); /* ours from an earlier run of this sandbox id */
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1 ||
	    chmod(sun.sun_path, 0660) == -1 || listen(fd, SOMAXCONN) == -1) {
		int err = -errno;
		close(fd);
		return err;
	}
	AN_ASSERT(fd >= 0);
	return fd;
}

static _Noreturn void child_main(const struct child_ctx *c)
{
	AN_ASSERT(c->s != NULL);
	AN_ASSERT(c->argv[0] != NULL);
	/* Descriptors the caller leaked to us could reach hidden directories. */
	if (close_range(3U, ~0U, CLOSE_RANGE_CLOEXEC) == -1)
		child_fail(c->err_fd, errno, "close_range: %s", strerror(errno));
	if (c->s->userns)
		map_ids(c);
	must_mount(c, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	int dir_fd = open(c->s->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir_fd == -1)
		child_fail(c->err_fd, errno, "open %s: %s", c->s->dir, strerror(errno));
	int bridge_fd = open(c->s->bridge, O_PATH | O_CLOEXEC);
	if (bridge_fd == -1)
		child_fail(c->err_fd, errno, "open %s: %s", c->s->bridge, strerror(errno));
	int ca_fd = -1;
	if (c->s->ca_path != NULL) {
		ca_fd = open(c->s->ca_path, O_PATH | O_CLOEXEC);
		if (ca_fd == -1)
			child_fail(c->err_fd, errno, "open %s: %s", c->s->ca_path, strerror(errno));
	}
	must_mount(c, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_run(c, dir_fd, bridge_fd, ca_fd);
	mask_host(c);
	lo_up(c);
	drop_privileges(c);
	/* As the agent's user from here: what it cannot reach is a clear error now. */
	enter_cwd(c);
	check_visible(c);
	watch_parent(c);
	if (sigprocmask(SIG_SETMASK, &c->s->child_mask, NULL) == -1)
		child_fail(c->err_fd, errno, "sigprocmask: %s", strerror(errno));
	pass_ingress(c);
	execve(c->argv[0], (char *const *)c->argv, environ);
	child_fail(c->err_fd, errno, "exec %s: %s", c->argv[0], strerror(errno));
}

/* ---- Starting and supervising. ---- */

static pid_t spawn(uint64_t flags)
{
	struct clone_args ca = { .flags = flags, .exit_signal = SIGCHLD };

	AN_ASSERT(flags & CLONE_NEWPID);
	AN_ASSERT((flags & CSIGNAL) == 0);
	long pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == -1 && errno == ENOSYS)
		pid = syscall(SYS_clone, (unsigned long)flags | SIGCHLD, 0UL, 0UL, 0UL, 0UL);
	return (pid_t)pid;
}

/* Reads the child's setup error, if any: 0 when the pipe closed empty (exec happened). */
static int read_setup_error(int fd, char *err, size_t err_len)
{
	char buf[SANDBOX_ERROR_BYTES];
	size_t len = 0;
	int32_t code = 0;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(err != NULL);
	AN_ASSERT(err_len > 0);
	for (;;) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == sizeof(buf) - 1)
			break;
	}
	if (len < sizeof(code))
		return 0;
	memcpy(&code, buf, sizeof(code));
	buf[len] = '\0';
	snprintf(err, err_len, "%s", buf + sizeof(code));
	return code > 0 ? -code : -EIO;
}

static int clone_failed(const struct sandbox_spec *s, int err, char *msg, size_t msg_len)
{
	AN_ASSERT(err > 0);
	AN_ASSERT(msg != NULL);
	if (s->userns && (err == EPERM || err == ENOSPC || err == EUSERS))
		snprintf(msg, msg_len,
			 "unprivileged user namespaces are not allowed on this host "
			 "(clone(CLONE_NEWUSER): %s): run agentsnet run as root, or allow them "
			 "(sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, "
			 "kernel.apparmor_restrict_unprivileged_userns)",
			 strerror(err));
	else
		snprintf(msg, msg_len, "clone(CLONE_NEWNET|CLONE_NEWNS|CLONE_NEWPID%s): %s",
			 s->userns ? "|CLONE_NEWUSER" : "", strerror(err));
	return -err;
}

/* A setup step refused in a user namespace: say where such a restriction comes from. */
static void userns_hint(char *err, size_t err_len)
{
	long v = 0;
	size_t len = strlen(err);

	AN_ASSERT(err != NULL);
	AN_ASSERT(len < err_len);
	if (read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", &v) == 0 &&
	    v != 0)
		snprintf(
		    err + len, err_len - len,
		    " (AppArmor restricts unprivileged user namespaces here: "
		    "kernel.apparmor_restrict_unprivileged_userns = %ld; run as root, or allow "
		    "them)",
		    v);
}

static int start_child(const struct sandbox_spec *s, const char *const *argv, struct sandbox *sb,
		       char *err, size_t err_len)
{
	struct child_ctx c = { .s = s, .argv = argv };
	int efd[2], afd[2];

	AN_ASSERT(argv[0] != NULL);
	AN_ASSERT(sb != NULL);
	if (pipe2(efd, O_CLOEXEC) == -1)
		return -errno;
	if (pipe2(afd, O_CLOEXEC) == -1) {
		int ret = -errno;
		close(efd[0]);
		close(efd[1]);
		return ret;
	}
	uint64_t flags =
	    CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | (s->userns ? CLONE_NEWUSER : 0);
	pid_t pid = spawn(flags);
	if (pid == 0) {
		close(efd[0]);
		close(afd[1]);
		c.err_fd = efd[1];
		c.alive_fd = afd[0];
		child_main(&c);
	}
	int saved = errno;
	close(efd[1]);
	close(afd[0]);
	int ret = pid == -1 ? clone_failed(s, saved, err, err_len)
			    : read_setup_error(efd[0], err, err_len);
	close(efd[0]);
	if (ret != 0 && pid > 0)
		waitpid(pid, NULL, 0);
	if (ret != 0) {
		close(afd[1]);
		return ret;
	}
	*sb = (struct sandbox){ .pid = pid, .alive_fd = afd[1] };
	return 0;
}

int sandbox_start(const struct sandbox_spec *s, struct sandbox *sb, char *err, size_t err_len)
{
	size_t words = 0;

	AN_ASSERT(s->dir != NULL);
	AN_ASSERT(s->socket_dir != NULL);
	AN_ASSERT(err != NULL);
	AN_ASSERT(err_len > 0);
	while (s->cmd[words] != NULL)
		words++;
	size_t cap = words + 16;
	const char **argv = pool_calloc(cap, sizeof(*argv));
	if (argv == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	int ret = sandbox_bridge_argv(s, argv, cap);
	AN_ASSERT(ret > 0); /* sized above */
	ret = start_child(s, argv, sb, err, err_len);
	if (ret == -EPERM && s->userns)
		userns_hint(err, err_len);
	pool_free(argv);
	return ret;
}

/* Waits for one of <set>: the signal, 0 when <deadline> passed, or -EINTR. */
static int next_signal(const sigset_t *set, const struct timespec *deadline, siginfo_t *si)
{
	struct timespec now, left;

	AN_ASSERT(set != NULL);
	AN_ASSERT(si != NULL);
	if (deadline == NULL) {
		int sig = sigwaitinfo(set, si);
		return sig == -1 ? -EINTR : sig;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t ns =
	    (deadline->tv_sec - now.tv_sec) * 1000000000LL + (deadline->tv_nsec - now.tv_nsec);
	if (ns <= 0)
		return 0;
	left = (struct timespec){ .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };
	int sig = sigtimedwait(set, si, &left);
	if (sig == -1)
		return errno == EAGAIN ? 0 : -EINTR;
	return sig;
}

static void arm_deadline(struct timespec *deadline)
{
	AN_ASSERT(deadline != NULL);
	AN_ASSERT(SANDBOX_TERM_GRACE_MS > 0);
	clock_gettime(CLOCK_MONOTONIC, deadline);
	deadline->tv_sec += SANDBOX_TERM_GRACE_MS / 1000;
	deadline->tv_nsec += (long)(SANDBOX_TERM_GRACE_MS % 1000) * 1000000L;
	if (deadline->tv_nsec >= 1000000000L) {
		deadline->tv_sec++;
		deadline->tv_nsec -= 1000000000L;
	}
}

/*
 * A signal the terminal sent (SI_KERNEL: ^C, ^\, hang-up) already reached the
 * whole foreground process group, the bridge included; forwarding it too would
 * deliver it twice (and "press ^C again to quit" agents would quit).
 */
int sandbox_wait(struct sandbox *sb, int *wstatus)
{
	struct timespec deadline;
	bool armed = false;
	sigset_t set;
	siginfo_t si;
	int ret = 0;

	AN_ASSERT(sb->pid > 0);
	AN_ASSERT(wstatus != NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; i < AN_ARRAY_LEN(forwarded); i++) {
		if (!ignored(forwarded[i]))
			sigaddset(&set, forwarded[i]);
	}
	for (;;) {
		pid_t r = waitpid(sb->pid, wstatus, WNOHANG);
		if (r == sb->pid || (r == -1 && errno != EINTR)) {
			ret = r == -1 ? -errno : 0;
			break;
		}
		int sig = next_signal(&set, armed ? &deadline : NULL, &si);
		if (sig == 0) {
			kill(sb->pid, SIGKILL);
			armed = false;
		}
		if (sig <= 0 || sig == SIGCHLD || si.si_code == SI_KERNEL)
			continue;
		kill(sb->pid, sig);
		if (sig == SIGTERM && !armed) {
			arm_deadline(&deadline);
			armed = true;
		}
	}
	close(sb->alive_fd);
	sb->alive_fd = -1;
	return ret;
}
