/*
 * The namespaces of `agentsnet run`, and the supervision of the bridge in them.
 *
 * One clone3() (fork-like: no separate stack, so the sanitizers see an ordinary
 * child; the legacy clone syscall with a NULL stack where clone3 is filtered)
 * creates the network, mount, PID, IPC and UTS namespaces at once, plus a user
 * namespace when we lack CAP_SYS_ADMIN. The host name inside is "agentsnet"
 * (not the sandbox id: the agent has that anyway, and one name is shorter than
 * any id), the NIS domain "(none)". The child is PID 1 of the new PID
 * namespace, sets the sandbox up, and execs the bridge, which therefore is the
 * namespace's init: when it exits every process in the sandbox is killed and
 * reaped, and the namespaces die with their last process.
 *
 * Before the clone the parent lists the host's world-writable directories
 * (below), makes the sandbox's cgroup when spec->limits asks for one
 * (core/cgroup.h), and opens a pty when a std descriptor is a terminal
 * (tools/agentsnet/ptyrelay.h). The child first blocks on a "go" byte, the first byte of
 * the alive pipe, which the parent writes once it has moved the child into the
 * cgroup: nothing of the agent's ever runs outside it, and then unshares a
 * cgroup namespace, rooted there (/proc/self/cgroup inside shows "/", never the
 * host's layout; without a cgroup of its own, the caller's is the root). Then
 * setsid(): the caller's terminal is never the sandbox's controlling terminal
 * (TIOCSTI on it would type into the operator's shell). The agent's terminal
 * is a pty made in the sandbox's own devpts once that is mounted (so it is
 * /dev/pts/0 inside, and ttyname() finds it), with the settings of the
 * host-side one ptyrelay_open made; its slave goes on the std descriptors that
 * were terminals, its master back to the parent over a socket (SCM_RIGHTS),
 * which relays that one instead.
 * The cgroup is the daemon's where it can make one (spec->limits_by_daemon,
 * core/runlimit.h: it moves this process in, so the child is born there, and
 * removes the cgroup with the sandbox, even after a SIGKILLed run); else our
 * own. Unprivileged, the pids limit is also RLIMIT_NPROC, which in a user
 * namespace of its own counts this sandbox's processes only. Only where neither
 * can make a cgroup is memory not limited (one line on stderr says so). RLIMIT_NPROC never binds host uid 0, so a caller that is root without
 * CAP_SYS_ADMIN gets no pids limit that way either.
 *
 * Setup errors travel back over a close-on-exec pipe (errno, then a message):
 * EOF with no bytes means the exec succeeded. The alive pipe, whose write end
 * only the parent holds, plus PR_SET_PDEATHSIG, makes the sandbox die with
 * `agentsnet run` even when that is SIGKILLed. The bridge is in a session of
 * its own, so no signal of the caller's terminal reaches it: sandbox_wait
 * forwards them all, whoever sent them. An agent may ignore them and make its
 * pty raw (^C, ^\ and ^Z are then bytes), so the operator keeps three ways to
 * stop it: SIGTERM, SIGHUP or a hang-up of the caller's terminal (the relay
 * reports it: EOF, EIO, POLLHUP; it is forwarded as SIGHUP), and a second
 * SIGINT or SIGQUIT each start the grace period after which the bridge, and
 * so the sandbox, is killed. One SIGINT only is forwarded: the agent may take
 * it as an interruption of its current work. Rejected: fork + unshare (an extra
 * process between us and PID 1), and a setuid helper.
 *
 * In files of their own: tools/agentsnet/wwdirs.c (the world-writable directories),
 * tools/agentsnet/sockmask.c (the host's socket files),
 * tools/agentsnet/sandbox_child.c (the child's setup);
 * tools/agentsnet/sandbox_int.h what they share.
 */
#include "tools/agentsnet/sandbox.h"
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

/* What the pty relay's output gets to drain once the bridge exited. */
#define SANDBOX_PTY_DRAIN_MS 1000

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

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

int sandbox_path_normal(const char *path, const char *cwd, char *out, size_t cap)
{
	size_t n = 0;

	AN_ASSERT(cap > 1);
	if (path[0] == '\0' || (path[0] != '/' && (cwd == NULL || cwd[0] != '/')))
		return -EINVAL;
	for (int part = path[0] == '/' ? 1 : 0; part < 2; part++) {
		const char *p = part == 0 ? cwd : path;
		while (*p != '\0') {
			while (*p == '/')
				p++;
			size_t len = strcspn(p, "/");
			if (len == 2 && p[0] == '.' && p[1] == '.')
				return -EINVAL;
			if (len > 0 && !(len == 1 && p[0] == '.')) {
				if (n + 1 + len >= cap)
					return -ENAMETOOLONG;
				out[n++] = '/';
				memcpy(out + n, p, len);
				n += len;
			}
			p += len;
		}
	}
	if (n == 0)
		out[n++] = '/';
	out[n] = '\0';
	return 0;
}

int sandbox_bind_check(const char *path, char *err, size_t err_len)
{
	static const char *const made[] = { SANDBOX_MADE_DIRS };

	AN_ASSERT(path != NULL);
	AN_ASSERT(err != NULL);
	if (path[0] != '/') {
		snprintf(err, err_len, "%s: not an absolute path", path);
		return -EINVAL;
	}
	if (strcmp(path, "/") == 0) {
		snprintf(err, err_len, "/: the host's whole file system is never bound");
		return -EINVAL;
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(made); i++) {
		if (sandbox_path_under(path, made[i])) {
			snprintf(err, err_len,
				 "%s: inside %s, which the sandbox makes its own (it would be "
				 "covered)",
				 path, made[i]);
			return -EINVAL;
		}
	}
	return 0;
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

/*
 * Groups whose members hold more than a user should lend an agent. Left off:
 * video and render (GPUs, cameras: common for compute work, and no path to
 * root by themselves; the sandbox's /dev has no such node anyway), plugdev
 * (removable media through udisks, which asks polkit for anything more),
 * audio, lp, cdrom.
 */
static const char *const privileged_groups[] = {
	"root",            /* gid 0's name, and any group so named */
	"wheel",           /* sudo / su (Red Hat, Arch, SUSE) */
	"sudo",            /* sudo (Debian, Ubuntu) */
	"admin",           /* sudo (Ubuntu before 12.04) */
	"adm",             /* reads /var/log: other users' and services' secrets */
	"disk",            /* raw block devices: every file of every disk */
	"kmem",            /* /dev/kmem, /dev/port: kernel memory */
	"mem",             /* /dev/mem on some distributions: physical memory */
	"shadow",          /* reads /etc/shadow: password hashes */
	"ssl-cert",        /* reads /etc/ssl/private: the host's TLS keys */
	"docker",          /* the Docker socket: root on the host */
	"podman",          /* where made, the rootful Podman socket: root on the host */
	"lxd",             /* the LXD socket: root on the host */
	"incus-admin",     /* the Incus socket: root on the host */
	"microk8s",        /* the MicroK8s API: root on the host */
	"kvm",             /* /dev/kvm: a large kernel attack surface */
	"libvirt",         /* the libvirt socket: VMs with host devices, root-equivalent */
	"libvirt-qemu",    /* owns the images and sockets of libvirt's guests */
	"systemd-journal", /* reads every unit's journal */
	"systemd-network", /* owns networkd's state and configuration */
	"netdev",          /* configures network devices (NetworkManager, wpa_supplicant) */
	"input",           /* /dev/input: every keystroke of the console (a keylogger) */
	"tty",             /* writes to every terminal: input into others' sessions */
	"dialout",         /* serial devices: modems, consoles of other machines */
	"lpadmin",         /* administers CUPS (printers, their filters, its files) */
	"sys",             /* CUPS administration (its default SystemGroup) */
	"staff",           /* Debian: writes /usr/local, which root's PATH runs first */
	"utmp",            /* writes utmp/wtmp: forges who is logged in */
};

bool sandbox_group_privileged(gid_t gid)
{
	AN_ASSERT(AN_ARRAY_LEN(privileged_groups) > 0);
	if (gid == 0)
		return true;
	const struct group *gr = getgrgid(gid);
	if (gr == NULL || gr->gr_name == NULL)
		return false;
	for (size_t i = 0; i < AN_ARRAY_LEN(privileged_groups); i++) {
		if (strcmp(gr->gr_name, privileged_groups[i]) == 0)
			return true;
	}
	return false;
}

/* -EPERM with <err> when <gid> is privileged; <who> says how the user holds it. */
static int group_refuse(const char *text, gid_t gid, const char *who, char *err, size_t err_len)
{
	AN_ASSERT(text != NULL);
	AN_ASSERT(who != NULL);
	if (!sandbox_group_privileged(gid))
		return 0;
	const struct group *gr = getgrgid(gid);
	snprintf(err, err_len,
		 "--user %s: %s group %s (gid %u), which is privileged on a host (it owns devices, "
		 "logs, secrets or an admin socket); name a user outside it",
		 text, who, gr != NULL && gr->gr_name != NULL ? gr->gr_name : "root",
		 (unsigned)gid);
	return -EPERM;
}

static int user_refuse(const char *text, const struct sandbox_user *u, const struct passwd *pw,
		       char *err, size_t err_len)
{
	gid_t groups[SANDBOX_GROUPS_MAX];

	AN_ASSERT(u != NULL);
	AN_ASSERT(err != NULL);
	if (u->uid == 0 || u->gid == 0) {
		snprintf(err, err_len,
			 "--user: the agent never runs as %s 0 on the host (it could write what "
			 "root owns); name an unprivileged user",
			 u->uid == 0 ? "uid" : "gid");
		return -EPERM;
	}
	int ret = group_refuse(text, u->gid, "runs in", err, err_len);
	if (ret != 0 || pw == NULL)
		return ret;
	int n = SANDBOX_GROUPS_MAX;
	if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) == -1) {
		snprintf(err, err_len, "--user %s: in more than %d groups", text,
			 SANDBOX_GROUPS_MAX);
		return -E2BIG;
	}
	for (int i = 0; i < n && ret == 0; i++)
		ret = group_refuse(text, groups[i], "is a member of", err, err_len);
	return ret;
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
	bool numeric = uid_parse(name, &id);
	struct passwd *pw = numeric ? getpwuid((uid_t)id) : getpwnam(name);
	if (pw == NULL && !numeric) {
		snprintf(err, err_len, "--user %s: no such user", name);
		return -ENOENT;
	}
	u->uid = pw != NULL ? pw->pw_uid : (uid_t)id;
	if (colon != NULL) {
		struct group *gr = uid_parse(colon + 1, &id) ? NULL : getgrnam(colon + 1);
		if (gr == NULL && !uid_parse(colon + 1, &id)) {
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
	return user_refuse(text, u, pw, err, err_len);
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
	sigaddset(&set, SIGWINCH); /* relayed to the sandbox's pty by sandbox_wait */
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
	/* Mode 0660 as bind makes it (the umask), never a chmod by path after. */
	mode_t old = umask(0117);
	int ret = bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1 ? -errno : 0;
	umask(old);
	if (ret == 0 && listen(fd, SOMAXCONN) == -1)
		ret = -errno;
	if (ret != 0) {
		close(fd);
		return ret;
	}
	AN_ASSERT(fd >= 0);
	return fd;
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
		snprintf(
		    msg, msg_len,
		    "clone(CLONE_NEWNET|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC|CLONE_NEWUTS%s): %s",
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

/* Moves the new child into the sandbox's cgroup, then lets it go (the "go" byte). */
static int release_child(const struct sandbox *sb, pid_t pid, int go_fd, char *err, size_t err_len)
{
	AN_ASSERT(pid > 0);
	AN_ASSERT(go_fd >= 0);
	if (sb->cgroup.version != 0) {
		int ret = cgroup_enter(&sb->cgroup, pid, err, err_len);
		if (ret != 0)
			return ret;
	}
	ssize_t n = write(go_fd, "g", 1);
	if (n != 1) {
		int ret = n == -1 ? -errno : -EIO;
		snprintf(err, err_len, "starting the sandbox: %s", strerror(-ret));
		return ret;
	}
	return 0;
}

/*
 * Takes the master of the pty the child made in the sandbox's devpts (it sent
 * it before its exec) in place of the host-side one ptyrelay_open made.
 */
static int receive_pty(struct sandbox *sb, int sock, char *err, size_t err_len)
{
	char byte = 0, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	int fd = -1;

	AN_ASSERT(sb->pty.master >= 0);
	AN_ASSERT(sock >= 0);
	ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	const struct cmsghdr *cm = n == 1 ? CMSG_FIRSTHDR(&msg) : NULL;
	if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
	if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1) {
		snprintf(err, err_len, "the sandbox's pty did not come back");
		if (fd >= 0)
			close(fd);
		return -EPROTO;
	}
	close(sb->pty.master);
	sb->pty.master = fd;
	return 0;
}

/* The pipes (and the pty's socket) between us and the child; -errno, nothing left open. */
static int child_channels(bool pty, int efd[2], int afd[2], int pfd[2])
{
	int ret = 0;

	AN_ASSERT(efd != NULL && afd != NULL);
	pfd[0] = pfd[1] = -1;
	if (pipe2(efd, O_CLOEXEC) == -1)
		return -errno;
	if (pipe2(afd, O_CLOEXEC) == -1) {
		ret = -errno;
		goto out_efd;
	}
	if (pty && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pfd) == -1) {
		ret = -errno;
		goto out_afd;
	}
	return 0;
out_afd:
	close(afd[0]);
	close(afd[1]);
out_efd:
	close(efd[0]);
	close(efd[1]);
	return ret;
}

static int start_child(struct child_ctx *c, struct sandbox *sb, char *err, size_t err_len)
{
	const struct sandbox_spec *s = c->s;
	int efd[2], afd[2], pfd[2];

	AN_ASSERT(c->argv[0] != NULL);
	AN_ASSERT(sb != NULL);
	int ret = child_channels(sb->pty.master >= 0, efd, afd, pfd);
	if (ret != 0)
		return ret;
	uint64_t flags = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
			 (s->userns ? CLONE_NEWUSER : 0);
	pid_t pid = spawn(flags);
	if (pid == 0) {
		close(efd[0]);
		close(afd[1]);
		if (pfd[0] >= 0)
			close(pfd[0]);
		c->err_fd = efd[1];
		c->alive_fd = afd[0];
		c->pty_fd = pfd[1];
		child_main(c);
	}
	int saved = errno;
	close(efd[1]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	/* Our read end stays open until the go byte is written: no SIGPIPE if the child died. */
	ret = pid == -1 ? clone_failed(s, saved, err, err_len)
			: release_child(sb, pid, afd[1], err, err_len);
	close(afd[0]);
	if (ret == 0)
		ret = read_setup_error(efd[0], err, err_len);
	close(efd[0]);
	if (ret == 0 && pfd[0] >= 0)
		ret = receive_pty(sb, pfd[0], err, err_len);
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (ret != 0 && pid > 0) {
		kill(pid, SIGKILL); /* still waiting for its go byte, exiting, or exec'd */
		waitpid(pid, NULL, 0);
	}
	if (ret != 0) {
		close(afd[1]);
		return ret;
	}
	sb->pid = pid;
	sb->alive_fd = afd[1];
	return 0;
}

/*
 * The cgroup for spec->limits. Without one it may make (unprivileged, not
 * delegated), the pids limit becomes the child's RLIMIT_NPROC (<nproc_max>)
 * and one line on stderr says what is not limited; privileged, that is an
 * error naming the file.
 */
static int limits_apply(const struct sandbox_spec *s, struct sandbox *sb, uint64_t *nproc_max,
			char *err, size_t err_len)
{
	const struct sandbox_limits *lim = &s->limits;

	AN_ASSERT(nproc_max != NULL);
	*nproc_max = 0;
	if (lim->pids_max == 0 && lim->memory_max_bytes == 0)
		return 0;
	AN_ASSERT(s->id != NULL);
	char daemon_err[SANDBOX_ERROR_BYTES];
	daemon_err[0] = '\0';
	/* The daemon's cgroup first: it is removed with the sandbox even after a SIGKILLed run.
	 * The caller, moved in with the sandbox, counts as one more process. */
	uint64_t pids_with_caller = lim->pids_max > 0 ? lim->pids_max + 1 : 0;
	if (s->limits_by_daemon != NULL &&
	    s->limits_by_daemon(s->limits_by_daemon_arg, pids_with_caller, lim->memory_max_bytes,
				daemon_err, sizeof(daemon_err)) == 0) {
		*nproc_max = s->userns ? lim->pids_max : 0;
		return 0;
	}
	int ret = cgroup_create(&sb->cgroup, CGROUP_ROOT_DEFAULT, s->id, lim->pids_max,
				lim->memory_max_bytes, err, err_len);
	if (ret == 0)
		return 0;
	bool not_ours = ret == -EACCES || ret == -EPERM || ret == -ENOENT || ret == -EROFS;
	if (!s->userns || !not_ours) {
		size_t len = strlen(err);
		snprintf(err + len, err_len - len,
			 "%s%s (--pids-max 0 --memory-max 0 runs the sandbox without limits)",
			 daemon_err[0] != '\0' ? "; agentsnetd: " : "", daemon_err);
		return ret;
	}
	*nproc_max = lim->pids_max;
	/* RLIMIT_NPROC never binds host uid 0 (the kernel exempts INIT_USER). */
	bool pids_unbound = lim->pids_max > 0 && s->user.uid == 0;
	if (lim->memory_max_bytes > 0 || pids_unbound)
		fprintf(stderr,
			"agentsnet: warning: no cgroup of its own for this sandbox (%s; none is "
			"delegated to this user%s%s): %s\n",
			err, daemon_err[0] != '\0' ? "; agentsnetd: " : "", daemon_err,
			pids_unbound ? "neither its memory nor its processes are limited"
				     : "its memory is not limited (its processes are, with "
				       "RLIMIT_NPROC)");
	err[0] = '\0';
	return 0;
}

/* The argument vector and the world-writable directories, both the child's to use. */
static int child_prepare(struct child_ctx *c, char *err, size_t err_len)
{
	const struct sandbox_spec *s = c->s;
	size_t words = 0;

	AN_ASSERT(c->argv == NULL && c->ww == NULL && c->roots == NULL);
	while (s->cmd[words] != NULL)
		words++;
	size_t cap = words + 16;
	c->argv = pool_calloc(cap, sizeof(*c->argv));
	c->ww = pool_calloc(1, sizeof(*c->ww));
	c->roots = pool_calloc(1, sizeof(*c->roots));
	if (c->argv == NULL || c->ww == NULL || c->roots == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	int ret = sandbox_bridge_argv(s, c->argv, cap);
	AN_ASSERT(ret > 0); /* sized above */
	/* Opened here, once: the child binds these descriptors, never a name again. */
	ret = root_open(s, c->roots, err, err_len);
	if (ret == 0)
		ret = ww_prepare(c->ww, s, err, err_len);
	if (ret == 0)
		ret = sockets_prepare(c, err, err_len);
	if (ret == 0)
		ww_report(c->ww);
	return ret;
}

static void child_release(struct child_ctx *c)
{
	AN_ASSERT(c != NULL);
	AN_ASSERT(c->s != NULL);
	pool_free(c->argv);
	c->argv = NULL;
	pool_free(c->ww);
	c->ww = NULL;
	if (c->roots != NULL)
		root_close(c->roots);
	pool_free(c->roots);
	c->roots = NULL;
	hostsock_free(&c->sockets);
}

/* Kills the bridge started a moment ago and reaps it (a step after its exec failed). */
static void stop_child(struct sandbox *sb)
{
	AN_ASSERT(sb->pid > 0);
	AN_ASSERT(sb->alive_fd >= 0);
	kill(sb->pid, SIGKILL);
	waitpid(sb->pid, NULL, 0);
	close(sb->alive_fd);
	sb->alive_fd = -1;
}

int sandbox_start(const struct sandbox_spec *s, struct sandbox *sb, char *err, size_t err_len)
{
	struct child_ctx c = { .s = s, .pty = &sb->pty };

	AN_ASSERT(s->dir != NULL);
	AN_ASSERT(s->socket_dir != NULL);
	AN_ASSERT(err != NULL);
	AN_ASSERT(err_len > 0);
	memset(sb, 0, sizeof(*sb));
	sb->pid = -1;
	sb->alive_fd = -1;
	sb->pty.master = -1;
	int ret = child_prepare(&c, err, err_len);
	if (ret != 0)
		goto out_free;
	ret = limits_apply(s, sb, &c.nproc_max, err, err_len);
	if (ret != 0)
		goto out_free;
	ret = ptyrelay_open(&sb->pty, err, err_len);
	if (ret != 0)
		goto out_cgroup;
	ret = start_child(&c, sb, err, err_len);
	if (ret == -EPERM && s->userns)
		userns_hint(err, err_len);
	if (ret != 0)
		goto out_pty;
	ret = ptyrelay_start(&sb->pty);
	if (ret != 0) {
		snprintf(err, err_len, "the sandbox's terminal: %s", strerror(-ret));
		stop_child(sb);
		goto out_pty;
	}
	child_release(&c);
	return 0;
out_pty:
	ptyrelay_close(&sb->pty, 0);
out_cgroup:
	cgroup_remove(&sb->cgroup);
out_free:
	child_release(&c);
	return ret;
}

/* Nanoseconds until <deadline> (0 when it passed). */
static int64_t ns_left(const struct timespec *deadline)
{
	struct timespec now;

	AN_ASSERT(deadline != NULL);
	AN_ASSERT(deadline->tv_nsec < 1000000000L);
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t ns =
	    (deadline->tv_sec - now.tv_sec) * 1000000000LL + (deadline->tv_nsec - now.tv_nsec);
	return ns > 0 ? ns : 0;
}

/* Waits for one of <set>: the signal, 0 when <deadline> passed, or -EINTR. */
static int next_signal(const sigset_t *set, const struct timespec *deadline, siginfo_t *si)
{
	AN_ASSERT(set != NULL);
	AN_ASSERT(si != NULL);
	if (deadline == NULL) {
		int sig = sigwaitinfo(set, si);
		return sig == -1 ? -EINTR : sig;
	}
	int64_t ns = ns_left(deadline);
	if (ns == 0)
		return 0;
	struct timespec left = { .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };
	int sig = sigtimedwait(set, si, &left);
	if (sig == -1)
		return errno == EAGAIN ? 0 : -EINTR;
	return sig;
}

/* SANDBOX_TERM_GRACE_MS; a unit test shortens it. */
static uint32_t term_grace_ms = SANDBOX_TERM_GRACE_MS;

static void arm_deadline(struct timespec *deadline)
{
	AN_ASSERT(deadline != NULL);
	AN_ASSERT(term_grace_ms > 0);
	clock_gettime(CLOCK_MONOTONIC, deadline);
	deadline->tv_sec += term_grace_ms / 1000;
	deadline->tv_nsec += (long)(term_grace_ms % 1000) * 1000000L;
	if (deadline->tv_nsec >= 1000000000L) {
		deadline->tv_sec++;
		deadline->tv_nsec -= 1000000000L;
	}
}

/* sandbox_wait's state: the bridge, and the grace period that ends in SIGKILL. */
struct waiter {
	struct sandbox *sb;
	struct timespec deadline;
	bool armed;
	bool hangup;         /* the relay's hang-up was acted on */
	unsigned interrupts; /* SIGINTs and SIGQUITs forwarded */
};

/*
 * One signal for the bridge (0: the grace period is over). The bridge is in a
 * session of its own, so a signal the caller's terminal sent (SI_KERNEL: ^C,
 * ^\, hang-up) reached only us, and is forwarded like any other. SIGTERM,
 * SIGHUP (the operator's terminal is gone: nobody is left to stop an agent
 * that ignores it) and a second SIGINT or SIGQUIT (a second ^C means "now")
 * start the grace period, after which the bridge is killed.
 */
static void on_signal(struct waiter *w, int sig)
{
	AN_ASSERT(w->sb->pid > 0);
	AN_ASSERT(sig >= 0);
	if (sig == 0) {
		kill(w->sb->pid, SIGKILL);
		w->armed = false;
		return;
	}
	if (sig == SIGWINCH) {
		ptyrelay_winch(&w->sb->pty);
		return;
	}
	if (sig == SIGCHLD)
		return;
	kill(w->sb->pid, sig);
	if (sig == SIGINT || sig == SIGQUIT)
		w->interrupts++;
	bool stop = sig == SIGTERM || sig == SIGHUP || w->interrupts >= 2;
	if (stop && !w->armed) {
		arm_deadline(&w->deadline);
		w->armed = true;
	}
}

/* The caller's terminal hung up (the relay saw it): as a SIGHUP, once. */
static void on_hangup(struct waiter *w)
{
	AN_ASSERT(w->sb->pty.hangup);
	AN_ASSERT(!w->hangup);
	w->hangup = true;
	on_signal(w, SIGHUP);
}

/* 1 once the bridge is reaped (status in <wstatus>), 0 while it runs, or -errno. */
static int reap(pid_t pid, int *wstatus)
{
	AN_ASSERT(pid > 0);
	AN_ASSERT(wstatus != NULL);
	pid_t r = waitpid(pid, wstatus, WNOHANG);
	if (r == pid)
		return 1;
	return r == -1 && errno != EINTR ? -errno : 0;
}

/* Without a pty: signals only. */
static int wait_signals(struct waiter *w, const sigset_t *set, int *wstatus)
{
	siginfo_t si;

	AN_ASSERT(set != NULL);
	AN_ASSERT(w->sb->pty.master < 0);
	for (;;) {
		int ret = reap(w->sb->pid, wstatus);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		int sig = next_signal(set, w->armed ? &w->deadline : NULL, &si);
		if (sig >= 0)
			on_signal(w, sig);
	}
}

/* With a pty: the signals (read from <sfd>, a signalfd) and the relay, in one poll(). */
static int wait_relay(struct waiter *w, int sfd, int *wstatus)
{
	struct pollfd pfds[1 + PTYRELAY_POLL_FDS];
	struct signalfd_siginfo info;

	AN_ASSERT(sfd >= 0);
	AN_ASSERT(w->sb->pty.master >= 0);
	for (;;) {
		int ret = reap(w->sb->pid, wstatus);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		int64_t ns = w->armed ? ns_left(&w->deadline) : -1;
		if (ns == 0) {
			on_signal(w, 0);
			continue;
		}
		pfds[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		size_t n = ptyrelay_poll_fds(&w->sb->pty, pfds + 1);
		int timeout_ms = ns < 0 ? -1 : (int)((ns + 999999) / 1000000);
		if (poll(pfds, 1 + n, timeout_ms) == -1)
			continue; /* EINTR (a stop and continue) */
		while ((pfds[0].revents & POLLIN) && read(sfd, &info, sizeof(info)) == sizeof(info))
			on_signal(w, (int)info.ssi_signo);
		ptyrelay_on_poll(&w->sb->pty, pfds + 1, n);
		if (w->sb->pty.hangup && !w->hangup)
			on_hangup(w);
	}
}

int sandbox_wait(struct sandbox *sb, int *wstatus)
{
	struct waiter w = { .sb = sb };
	sigset_t set;
	int ret = 0;

	AN_ASSERT(sb->pid > 0);
	AN_ASSERT(wstatus != NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; i < AN_ARRAY_LEN(forwarded); i++) {
		if (!ignored(forwarded[i]))
			sigaddset(&set, forwarded[i]);
	}
	if (sb->pty.master >= 0) {
		sigaddset(&set, SIGWINCH);
		int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
		if (sfd >= 0) {
			ret = wait_relay(&w, sfd, wstatus);
			close(sfd);
		} else {
			/* Unrelayed, the agent would hang on its output, and the caller's
			 * terminal stay raw: stop it, say so. */
			fprintf(stderr, "agentsnet: signalfd: %s; stopping the sandbox\n",
				strerror(errno));
			kill(sb->pid, SIGKILL);
			ret = waitpid(sb->pid, wstatus, 0) == sb->pid ? 0 : -errno;
		}
	} else {
		ret = wait_signals(&w, &set, wstatus);
	}
	ptyrelay_close(&sb->pty, SANDBOX_PTY_DRAIN_MS);
	close(sb->alive_fd);
	sb->alive_fd = -1;
	if (sb->cgroup.version != 0) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", sb->cgroup.pids_dir);
		int err = cgroup_remove(&sb->cgroup);
		if (err != 0)
			fprintf(stderr, "agentsnet: warning: could not remove the cgroup %s: %s\n",
				dir, strerror(-err));
	}
	return ret;
}
