/*
 * The sandbox of `agentsnet run`: new network, mount and PID namespaces (and
 * a user namespace when the caller is not privileged) in which the bridge is
 * PID 1, only `lo` exists, and the only agentsnet sockets visible are the
 * sandbox's own, mounted at SANDBOX_MOUNT_DIR.
 */
#ifndef AN_TOOLS_SANDBOX_H
#define AN_TOOLS_SANDBOX_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Where the sandbox's directory appears inside, on a fresh tmpfs over /run. */
#define SANDBOX_RUN_DIR   "/run"
#define SANDBOX_MOUNT_DIR "/run/agentsnet/sandbox"
/* Where the bridge and the CA file appear inside: /tmp is private there, so
 * neither may be looked up at its host path after the mounts. */
#define SANDBOX_BRIDGE_PATH    "/run/agentsnet/bridge"
#define SANDBOX_CA_PATH        "/run/agentsnet/ca.pem"
#define SANDBOX_EGRESS_SOCKET  "/run/agentsnet/sandbox/egress.sock"
#define SANDBOX_INGRESS_SOCKET "/run/agentsnet/sandbox/ingress.sock"
/* The descriptor number the bridge finds the ingress listener at (--ingress-fd). */
#define SANDBOX_INGRESS_FD 3
/* Size of the sandbox's /run: pid files and locks, not a scratch disk. */
#define SANDBOX_RUN_TMPFS_OPTIONS "mode=0755,size=16m"
/* The sandbox's private /tmp (half of RAM is the tmpfs default; bounded here). */
#define SANDBOX_TMP_TMPFS_OPTIONS "mode=1777,size=1g"
/* After a forwarded SIGTERM, the bridge gets this long before SIGKILL (as `docker stop`). */
#define SANDBOX_TERM_GRACE_MS 10000u
/* Longest setup error the sandbox reports back before the bridge starts. */
#define SANDBOX_ERROR_BYTES 512u

/* The agent's host identity when `agentsnet run` is privileged (--user). */
#define SANDBOX_DEFAULT_USER "nobody"
/* Supplementary groups kept from the passwd user's group list. */
#define SANDBOX_GROUPS_MAX 64

/* Who the agent is on the host: never uid 0, gid 0 or a member of group 0. */
struct sandbox_user {
	uid_t uid;
	gid_t gid;
	size_t group_count;
	gid_t groups[SANDBOX_GROUPS_MAX];
};

struct sandbox_spec {
	const char *dir;        /* borrowed: the sandbox's directory on the host (absolute) */
	const char *socket_dir; /* borrowed: the daemon's socket directory, canonical */
	const char *bridge;     /* borrowed: the bridge executable, absolute */
	const char *ca_path;    /* borrowed: NULL, or passed to the bridge as --ca */
	const char *public_url; /* borrowed: NULL, or passed to the bridge as --public-url */
	const char *cwd;        /* borrowed: NULL, or the directory the bridge starts in */
	int ingress_fd;         /* borrowed: listening ingress socket for the bridge, or -1 */
	char *const *cmd;       /* borrowed: the agent command, NULL-terminated, >= 1 word */
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
	pid_t pid;    /* the bridge, PID 1 of the sandbox's PID namespace */
	int alive_fd; /* owned: closing it (our exit) makes the sandbox's setup give up */
};

/*
 * Whether this process must add a user namespace: it lacks CAP_SYS_ADMIN (an
 * unprivileged user, or root in a container without it).
 */
bool sandbox_needs_userns(void);

/*
 * Parses --user: NAME or UID, optionally ":GROUP" (name or GID). A name (or a
 * UID with a passwd entry) brings its primary group and group list; a UID
 * without one needs ":GROUP". Root, group 0 and membership of group 0 are
 * refused: the point is an agent that cannot write what root owns. Returns 0,
 * or -EINVAL/-ENOENT/-EPERM with <err> (<err_len> bytes) saying why.
 */
int sandbox_user_parse(const char *text, struct sandbox_user *u, char *err, size_t err_len);

/*
 * Listens on <dir>/ingress.sock on the host side, before the sandbox exists:
 * inside, the sandbox's directory is read-only, so the bridge gets this
 * listener as a descriptor instead of binding the path itself. A stale socket
 * file is replaced. Returns the descriptor (close-on-exec) or -errno.
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
 * SIGCHLD) and sets SIGCHLD to its default action; stores the mask to give the
 * bridge in <old>. Call before any other step of a run, so a signal is never
 * lost between them.
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
 * success. Inside: uid/gid maps (userns), a private
 * mount tree, a fresh /proc, a tmpfs over /run with <s>->dir bound read-only at
 * SANDBOX_MOUNT_DIR, /var/run masked if it is a directory, /tmp/.X11-unix
 * masked, the socket directory masked when outside /run, `lo` up, every
 * capability dropped, the switch to <s>->user (without userns) and
 * no_new_privs set before the bridge is exec'd.
 * The signals of sandbox_signals_block must be blocked. Returns 0, or the
 * -errno of the failed step (clone, a mount, exec of the bridge...) with
 * <err> (<err_len> bytes) naming it; nothing is left running then.
 */
int sandbox_start(const struct sandbox_spec *s, struct sandbox *sb, char *err, size_t err_len);

/*
 * Waits for the bridge to exit, forwarding SIGINT, SIGTERM, SIGHUP and SIGQUIT
 * to it (those the caller did not ignore); the bridge is killed
 * SANDBOX_TERM_GRACE_MS after a forwarded SIGTERM if still alive. Its wait
 * status goes to <wstatus>; every process of the sandbox is gone by then.
 * Releases <sb>'s descriptor. Returns 0 or -errno of waitpid.
 */
int sandbox_wait(struct sandbox *sb, int *wstatus);

#endif /* AN_TOOLS_SANDBOX_H */
