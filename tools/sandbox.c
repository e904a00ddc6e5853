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
 * (tools/ptyrelay.h). The child first blocks on a "go" byte, the first byte of
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
 * Setup order matters: the uid/gid maps first (the child writes its own, "deny"
 * to setgroups before the gid map, as the kernel requires), the cgroup
 * namespace (it needs CAP_SYS_ADMIN in the user namespace), then RLIMIT_NPROC,
 * the other per-uid limits (below) and the names;
 * the mount tree private, so no mount leaks back to the host; every host file
 * the sandbox shows (its directory, the bridge, the CA, the probe, six device
 * nodes) opened O_PATH before anything is hidden; a fresh /proc; a minimal
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
 * In files of their own: tools/wwdirs.c (the world-writable directories),
 * tools/sockmask.c (the host's socket files); tools/sandbox_int.h what they
 * share.
 */
#include "tools/sandbox.h"
#include "tools/sandbox_int.h"

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
#include "tools/hostsock.h"

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
/* Size of each private instance of a world-writable directory (/tmp included). */
#define SANDBOX_PRIVATE_TMPFS_SIZE "1g"
/* What one sandbox may take of its uid's allowances, which every process of the uid shares. */
#define SANDBOX_SIGPENDING_MAX 1024u
#define SANDBOX_MSGQUEUE_BYTES (256u << 10)
#define SANDBOX_MEMLOCK_BYTES  (4u << 20)
/* The sandbox's host name (its own UTS namespace): the host's is none of the agent's business. */
#define SANDBOX_HOSTNAME   "agentsnet"
#define SANDBOX_DOMAINNAME "(none)"
/* What the pty relay's output gets to drain once the bridge exited. */
#define SANDBOX_PTY_DRAIN_MS 1000

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

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

static void must_symlink(const struct child_ctx *c, const char *target, const char *path)
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
static void bind_read_only(const struct child_ctx *c, const char *target, unsigned long flags)
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
	    0)
		return;
	fprintf(stderr,
		"agentsnet: warning: no sysfs of the sandbox's own (%s); it sees the host's "
		"/sys, read-only\n",
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
 * Binds over <etc> (/etc/passwd or /etc/group) a copy with <line> added when
 * no entry has <id>: made in the sandbox's own /run, bound read-only, then
 * unlinked there. A host without the file, or with one over
 * SANDBOX_IDENTITY_FILE_MAX, is left as it is.
 */
static void identity_file(const struct child_ctx *c, const char *etc, unsigned id, const char *line)
{
	char made[64];

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
	snprintf(made, sizeof(made), "/run/agentsnet/%s", strrchr(etc, '/') + 1);
	int out = open(made, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out == -1 || write(out, text, len) != (ssize_t)len || fchmod(out, 0644) == -1)
		child_fail(c->err_fd, errno, "write %s: %s", made, strerror(errno));
	close(out);
	pool_free(text);
	must_mount(c, made, etc, NULL, MS_BIND, NULL);
	bind_read_only(c, etc, MS_NODEV | MS_NOEXEC);
	if (unlink(made) == -1)
		child_fail(c->err_fd, errno, "unlink %s: %s", made, strerror(errno));
}

/*
 * The agent's own entry in the sandbox's /etc/passwd and /etc/group when the
 * host has none for its uid or gid (a uid daemon.sandbox_uids gave, or
 * --user UID:GID): tools ask who they are (whoami, Python's getpass, Node's
 * os.userInfo(), ssh) and fail without one. The host's files are untouched.
 */
static void identity_files(const struct child_ctx *c)
{
	char line[128];
	const struct sandbox_user *u = &c->s->user;

	if (c->s->userns)
		return; /* the agent is root inside, whom every passwd file lists */
	snprintf(line, sizeof(line), SANDBOX_AGENT_NAME ":x:%u:%u:agentsnet sandbox agent:%s:%s\n",
		 (unsigned)u->uid, (unsigned)u->gid, SANDBOX_AGENT_HOME, SANDBOX_AGENT_SHELL);
	identity_file(c, "/etc/passwd", (unsigned)u->uid, line);
	snprintf(line, sizeof(line), SANDBOX_AGENT_NAME ":x:%u:\n", (unsigned)u->gid);
	identity_file(c, "/etc/group", (unsigned)u->gid, line);
}

static _Noreturn void child_main(const struct child_ctx *c)
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
	must_mount(c, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_dev(c, f.dev);
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

	AN_ASSERT(c->argv == NULL && c->ww == NULL);
	while (s->cmd[words] != NULL)
		words++;
	size_t cap = words + 16;
	c->argv = pool_calloc(cap, sizeof(*c->argv));
	c->ww = pool_calloc(1, sizeof(*c->ww));
	if (c->argv == NULL || c->ww == NULL) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	int ret = sandbox_bridge_argv(s, c->argv, cap);
	AN_ASSERT(ret > 0); /* sized above */
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
