/*
 * The sandbox of `agentsnet run`: new network, mount, PID, IPC and UTS namespaces (and
 * a user namespace when the caller is not privileged) in which the bridge is
 * PID 1, only `lo` exists, and the only agentsnet sockets visible are the
 * sandbox's own, mounted at SANDBOX_MOUNT_DIR.
 */
#ifndef AN_TOOLS_AGENTSNET_SANDBOX_H
#define AN_TOOLS_AGENTSNET_SANDBOX_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/cgroup.h"
#include "tools/agentsnet/ptyrelay.h"

/* Where the sandbox's directory appears inside, on a fresh tmpfs over /run. */
#define SANDBOX_RUN_DIR   "/run"
#define SANDBOX_MOUNT_DIR "/run/agentsnet/sandbox"
/* Where the bridge and the CA file appear inside: /tmp is private there, so
 * neither may be looked up at its host path after the mounts. */
#define SANDBOX_BRIDGE_PATH    "/run/agentsnet/bridge"
#define SANDBOX_CA_PATH        "/run/agentsnet/ca.pem"
#define SANDBOX_EGRESS_SOCKET  "/run/agentsnet/sandbox/egress.sock"
#define SANDBOX_INGRESS_SOCKET "/run/agentsnet/sandbox/ingress.sock"
/* Where `agentsnet selftest`'s probe executable appears inside (sandbox_spec.probe). */
#define SANDBOX_PROBE_PATH "/run/agentsnet/probe"
/* The descriptor number the bridge finds the ingress listener at (--ingress-fd). */
#define SANDBOX_INGRESS_FD 3
/* Size of the sandbox's /run: pid files and locks, not a scratch disk. */
#define SANDBOX_RUN_TMPFS_OPTIONS "mode=0755,size=16m"
/* After a forwarded SIGTERM or SIGHUP, a hang-up, or a second SIGINT/SIGQUIT, the bridge gets
 * this long before SIGKILL (as `docker stop`). */
#define SANDBOX_TERM_GRACE_MS 10000u
/* Longest setup error the sandbox reports back before the bridge starts. */
#define SANDBOX_ERROR_BYTES 512u

/*
 * The entry the sandbox's /etc/passwd and /etc/group get when the host has
 * none for the agent's uid or gid (a uid daemon.sandbox_uids gave); files
 * past SANDBOX_IDENTITY_FILE_MAX bytes are left as they are.
 */
#define SANDBOX_AGENT_NAME        "agent"
#define SANDBOX_AGENT_HOME        "/tmp"
#define SANDBOX_AGENT_SHELL       "/bin/sh"
#define SANDBOX_IDENTITY_FILE_MAX (16 << 20)
/* Groups of the passwd user's list looked at by sandbox_user_parse (more: refused). */
#define SANDBOX_GROUPS_MAX 256

/*
 * The sandbox's file system is a root of its own (tools/agentsnet/sandbox_root.c): an
 * empty tmpfs holding, read-only, the host's system directories that exist
 * (SANDBOX_SYSTEM_DIRS: programs, libraries, configuration; a top-level
 * symlink such as /bin -> usr/bin is copied as a symlink), the working
 * directory read-write, what the operator names (agentsnet run --bind,
 * --ro-bind: at most SANDBOX_BINDS_MAX), an empty home of the agent's own at
 * $HOME where that is not in view otherwise, and what the sandbox makes itself
 * (/proc, /dev, /run, /tmp, /var/tmp, /sys). Nothing else of the host is there:
 * no /home, /root, /srv, /mnt, /media, /var, nor any top-level directory of the
 * host's own, so a socket a host process binds there, at any time and in any
 * network namespace, has no path the agent can name.
 */
#define SANDBOX_SYSTEM_DIRS \
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"
#define SANDBOX_BINDS_MAX 32u
/* The directories the sandbox makes itself: a bind may not be at or below one (it is covered). */
#define SANDBOX_MADE_DIRS "/proc", "/dev", "/run", "/tmp", "/var/tmp", "/sys"
/* Size of the root's own tmpfs: directories and mount points only (read-only once built). */
#define SANDBOX_ROOT_TMPFS_OPTIONS "mode=0755,size=1m"
/* Size of the agent's home when one is made for it (read-write, the agent's alone). */
#define SANDBOX_HOME_TMPFS_SIZE "1g"

/* A host path shown in the sandbox at the same path (agentsnet run --bind, --ro-bind). */
struct sandbox_bind {
	const char *path; /* borrowed: canonical, absolute (sandbox_bind_check) */
	bool read_only;
};

/* Default limits of one sandbox (agentsnet run --pids-max, --memory-max). */
#define SANDBOX_PIDS_MAX_DEFAULT   4096u
#define SANDBOX_MEMORY_MAX_DEFAULT (4ull << 30)

/*
 * Who the agent is on the host: never uid 0, gid 0, nor a user whose primary
 * or supplementary groups include a privileged one (root, disk, docker, adm,
 * shadow, sudo, kvm, ...: sandbox_group_privileged). Privileged, the agent runs
 * with no supplementary group; with a user namespace it keeps the caller's (the
 * kernel forbids dropping them there).
 */
struct sandbox_user {
	uid_t uid;
	gid_t gid;
};

/*
 * What one sandbox may use: processes (threads included) and memory, enforced
 * with a cgroup of its own (v2, or v1's pids and memory hierarchies), and
 * without one (an unprivileged caller whose cgroup is not delegated) the pids
 * limit with RLIMIT_NPROC inside the sandbox's user namespace. 0: no limit.
 */
struct sandbox_limits {
	uint64_t pids_max;
	uint64_t memory_max_bytes;
};

struct sandbox_spec {
	const char *dir;        /* borrowed: the sandbox's directory on the host (absolute) */
	const char *socket_dir; /* borrowed: the daemon's socket directory, canonical */
	const char *bridge;     /* borrowed: the bridge executable, absolute */
	const char *ca_path;    /* borrowed: NULL, or passed to the bridge as --ca */
	const char *public_url; /* borrowed: NULL, or passed to the bridge as --public-url */
	/*
	 * borrowed: NULL (the bridge starts in /), or this process's working directory
	 * (getcwd, for messages): that directory itself, opened as ".", is bound read-write
	 * at the path its descriptor names unless it is "/", made by the sandbox (then the
	 * sandbox's own is entered) or in view already, and the bridge starts there.
	 */
	const char *cwd;
	const struct sandbox_bind *binds; /* borrowed: what else the sandbox shows of the host */
	size_t n_binds;                   /* at most SANDBOX_BINDS_MAX */
	const char *probe; /* borrowed: NULL, or an executable bound at SANDBOX_PROBE_PATH */
	const char *id;    /* borrowed: the sandbox id (names its cgroup) */
	int ingress_fd;    /* borrowed: listening ingress socket for the bridge, or -1 */
	char *const *cmd;  /* borrowed: the agent command, NULL-terminated, >= 1 word */
	/*
	 * borrowed: the environment the bridge (and so the agent) starts with, NULL-terminated:
	 * tools/agentsnet/runenv.h's (runenv_init, then --env and --env-file), never the
	 * caller's whole environment.
	 */
	char *const *envp;
	struct sandbox_limits limits;
	/*
	 * When not NULL: asked for <limits> when this process can make no cgroup
	 * (unprivileged, none delegated), before the sandbox starts. It has the
	 * daemon make one and move this process into it (`sandbox limit`,
	 * core/runlimit.h), so the sandbox is born there; <pids_max> counts this
	 * process too. 0, or -errno with <err> (the run then warns, as without it).
	 */
	int (*limits_by_daemon)(void *arg, uint64_t pids_max, uint64_t memory_max_bytes, char *err,
				size_t err_len);
	void *limits_by_daemon_arg;
	/*
	 * With a user namespace (unprivileged caller): <user>'s uid and gid are
	 * the caller's own, mapped to 0 inside. Without (privileged caller): the
	 * sandbox switches to <user> before the bridge starts, so the agent
	 * holds no more on the host file system than that user does.
	 */
	bool userns;
	struct sandbox_user user;
	sigset_t child_mask; /* the signal mask the bridge starts with */
};

struct sandbox {
	pid_t pid;           /* the bridge, PID 1 of the sandbox's PID namespace */
	int alive_fd;        /* owned: closing it (our exit) makes the sandbox's setup give up */
	struct ptyrelay pty; /* the agent's own terminal, relayed (pty.master -1: none) */
	struct cgroup_sandbox cgroup; /* the sandbox's cgroup (none: cgroup.version 0) */
};

/*
 * Whether this process must add a user namespace: it lacks CAP_SYS_ADMIN (an
 * unprivileged user, or root in a container without it).
 */
bool sandbox_needs_userns(void);

/*
 * Parses --user: NAME or UID, optionally ":GROUP" (name or GID). A name (or a
 * UID with a passwd entry) brings its primary group; a UID without one needs
 * ":GROUP". Refused: uid 0, gid 0, and a user whose primary group, ":GROUP" or
 * any group of its passwd group list is privileged (sandbox_group_privileged),
 * since such a user may own or reach what the sandbox exists to keep from the
 * agent. The agent then runs with no supplementary group. Returns 0, or
 * -EINVAL/-ENOENT/-EPERM with <err> (<err_len> bytes) saying why (naming the
 * group).
 */
int sandbox_user_parse(const char *text, struct sandbox_user *u, char *err, size_t err_len);

/*
 * Whether group <gid> grants privilege on a host: gid 0, or a group whose name
 * is on the list of groups that own devices, logs, secrets or an admin
 * daemon's socket (root, wheel, sudo, admin, adm, disk, kmem, shadow, docker,
 * lxd, kvm, libvirt, systemd-journal, ...; tools/agentsnet/sandbox.c has the list and
 * why each is there). An unknown gid is not privileged.
 */
bool sandbox_group_privileged(gid_t gid);

/*
 * Listens on <dir>/ingress.sock on the host side, before the sandbox exists
 * (mode 0660, made so by bind): what `agentsnet run` does itself when the
 * daemon passed no ingress socket with the registration (an older daemon;
 * the directory is the daemon's, so only root can). Inside, the sandbox's
 * directory is read-only, so the bridge gets the listener as a descriptor
 * instead of binding the path itself. A stale socket file is replaced.
 * Returns the descriptor (close-on-exec) or -errno.
 */
int sandbox_ingress_listen(const char *dir);

/*
 * Checks the sysctls that forbid unprivileged user namespaces
 * (kernel.unprivileged_userns_clone = 0, user.max_user_namespaces = 0).
 * Returns 0 or -EPERM with <err> (<err_len> bytes) saying which and how to
 * allow them.
 */
int sandbox_userns_allowed(char *err, size_t err_len);

/*
 * Blocks the signals sandbox_wait takes (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
 * SIGCHLD, and SIGWINCH for the pty relay) and sets SIGCHLD to its default
 * action; stores the mask to give the bridge in <old>. Call before any other
 * step of a run, so a signal is never lost between them.
 */
void sandbox_signals_block(sigset_t *old);

/* Whether a forwarded signal is pending (arrived before the sandbox existed); returns it or 0. */
int sandbox_signal_pending(void);

/*
 * Whether <path> is <dir> or below it, comparing whole components of two
 * canonical absolute paths ("/run" holds "/run/a", not "/runner").
 */
bool sandbox_path_under(const char *path, const char *dir);

/*
 * <path> written the one way into <out> (<cap> bytes): made absolute against
 * <cwd> when relative, "//", "/./" and a trailing "/" dropped. Nothing is
 * looked up: a bind names its path as it is, and the sandbox then refuses one
 * that goes through a symlink. Returns 0, -EINVAL for an empty path or one
 * with a ".." component, -ENAMETOOLONG.
 */
int sandbox_path_normal(const char *path, const char *cwd, char *out, size_t cap);

/*
 * Whether <path> (canonical, absolute) may be bound into the sandbox: not "/"
 * (the whole host), not at or below a directory the sandbox makes itself
 * (SANDBOX_MADE_DIRS, which would cover it). Returns 0 or -EINVAL with <err>
 * (<err_len> bytes) saying why, naming the path.
 */
int sandbox_bind_check(const char *path, char *err, size_t err_len);

/*
 * Whether the socket directory <socket_dir> (canonical) needs its own mask
 * inside the sandbox, because it lies outside the fresh /run and outside a
 * real-directory /var/run (<var_run_is_dir>), which shows that same /run.
 */
bool sandbox_socket_dir_needs_mask(const char *socket_dir, bool var_run_is_dir);

/*
 * Builds the bridge's argument vector for <s> into <argv> (<cap> slots, NULL
 * terminated): the bridge, --egress and --ingress at SANDBOX_MOUNT_DIR,
 * --ca and --public-url when set, "--", then the command. Borrows every
 * string. Returns the number of words or -E2BIG.
 */
int sandbox_bridge_argv(const struct sandbox_spec *s, const char **argv, size_t cap);

/*
 * Creates the sandbox for <s> and starts the bridge in it; <sb> is filled on
 * success. Inside: uid/gid maps (userns), a session of its own (setsid: the
 * caller's terminal is never the sandbox's controlling terminal), a private
 * mount tree whose root is the sandbox's own (see SANDBOX_SYSTEM_DIRS), a fresh /proc, new IPC and UTS namespaces, a minimal /dev (null, zero,
 * full, random, urandom, tty, a private devpts instance, a private /dev/shm and
 * /dev/mqueue), a tmpfs over /run with <s>->dir bound read-only at
 * SANDBOX_MOUNT_DIR, /var/run masked if it is a directory, the socket directory
 * masked when outside /run, a private, empty instance of every world-writable
 * directory of the host (/tmp, /var/tmp, and the others it finds; past
 * SANDBOX_WW_MAX, or where the search's budget ran out, a parent hidden whole,
 * empty and read-only), /dev/null bound over every host socket file still in
 * view (tools/agentsnet/hostsock.h; past SANDBOX_SOCKET_MASKS_MAX, directories hidden
 * whole instead, at whatever depth holds them: sockets_collapse), `lo` up, a fresh session keyring, the cgroup and limits
 * of <s>->limits, lower per-uid rlimits (queued signals, POSIX message queue
 * bytes, locked memory), the host name "agentsnet", a fresh sysfs read-only
 * (the host's /sys read-only where the kernel refuses one), every capability
 * dropped, the switch to <s>->user (without userns) and no_new_privs set before
 * the bridge is exec'd with <s>->envp. When any of the caller's stdin, stdout
 * and stderr is a terminal, those get a pty of the sandbox's own instead
 * (sb->pty), relayed by sandbox_wait. The signals of sandbox_signals_block must
 * be blocked. Returns 0, or the -errno of the failed step (clone, a mount, exec
 * of the bridge...) with <err> (<err_len> bytes) naming it; nothing is left
 * running then.
 */
int sandbox_start(const struct sandbox_spec *s, struct sandbox *sb, char *err, size_t err_len);

/*
 * Waits for the bridge to exit, forwarding SIGINT, SIGTERM, SIGHUP and SIGQUIT
 * to it (those the caller did not ignore), and relaying the sandbox's pty
 * (keystrokes in, output out, window-size changes) when there is one; the
 * bridge is killed SANDBOX_TERM_GRACE_MS after a forwarded SIGTERM or SIGHUP, a
 * hang-up of the caller's terminal (forwarded as SIGHUP) or a second SIGINT or
 * SIGQUIT, if still alive. Its wait status goes to <wstatus>; every process of
 * the sandbox is gone by then, the caller's terminal is restored and the cgroup
 * removed. Releases <sb>'s descriptors. Returns 0 or -errno of waitpid.
 */
int sandbox_wait(struct sandbox *sb, int *wstatus);

#endif /* AN_TOOLS_AGENTSNET_SANDBOX_H */
