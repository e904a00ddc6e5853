/*
 * The service manager's notification protocol (systemd's sd_notify(3); other
 * managers speak it too): a state is one datagram of "KEY=VALUE" lines sent to
 * the AF_UNIX socket $NOTIFY_SOCKET names, a file system path or, when it
 * begins with '@', an abstract name. $WATCHDOG_USEC asks for "WATCHDOG=1" at
 * least that often, for the process $WATCHDOG_PID names (any, when unset).
 *
 * Written here rather than linked from libsystemd: the protocol is one
 * sendto() whose format is a documented stable interface, and a root network
 * daemon links nothing it does not need. Used by the daemon's main thread and
 * its reload (control thread or main thread): notify_send is a single
 * datagram, so concurrent senders never interleave within a state.
 */
#ifndef AN_CORE_NOTIFY_H
#define AN_CORE_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

struct notify {
	int fd; /* owned datagram socket; -1: no manager to tell */
	struct sockaddr_un addr;
	socklen_t addr_len;
	uint64_t watchdog_usec; /* 0: no watchdog asked of this process */
};

/*
 * Reads the manager's variables from the environment into <n> and removes
 * them from it, so that no child the process starts takes the manager's
 * messages for its own. Returns 0, with n->fd -1 when $NOTIFY_SOCKET is unset
 * (nothing to tell) and n->watchdog_usec 0 when no watchdog is asked of this
 * process; -EINVAL when $NOTIFY_SOCKET names no socket address (empty, not an
 * absolute path nor '@', longer than sun_path) or $WATCHDOG_USEC is no number
 * of microseconds; or -errno from socket(). On an error <n> is off (fd -1).
 */
int notify_open(struct notify *n);

/*
 * Sends <state>, "KEY=VALUE" lines ("READY=1\nSTATUS=serving"), as one
 * datagram. Never blocks: a manager that does not read loses the message.
 * 0 (also when <n> is off), or -errno.
 */
int notify_send(const struct notify *n, const char *state);

/* Whether the manager listens: notify_send reaches someone. */
bool notify_on(const struct notify *n);

/* Closes <n>'s socket; <n> is then off. */
void notify_close(struct notify *n);

/* A descriptor the manager keeps for the process, and its name (FDNAME: no ':'). */
#define NOTIFY_FDNAME_BYTES 256u
struct notify_fd {
	char name[NOTIFY_FDNAME_BYTES];
	int fd;
};

/*
 * Hands <fd> to the manager to keep under <name> (FDSTORE=1, the descriptor
 * sent with SCM_RIGHTS): systemd gives it back when it starts the service
 * again ($LISTEN_FDS), after a crash or a restart. 0 (also when <n> is off),
 * or -errno.
 */
int notify_store_fd(const struct notify *n, const char *name, int fd);

/* Asks the manager to close what it keeps under <name> (FDSTOREREMOVE=1). 0 or -errno. */
int notify_forget_fd(const struct notify *n, const char *name);

/*
 * The descriptors the manager passed to this process ($LISTEN_FDS from 3 on,
 * for $LISTEN_PID, named by $LISTEN_FDNAMES), at most <cap> into <out>, each
 * made close-on-exec; the variables are removed. Returns how many (0: none
 * passed, or passed to another process), or -EINVAL for variables that do not
 * read as the protocol says (the descriptors are then closed).
 */
int notify_listen_fds(struct notify_fd *out, uint32_t cap);

#endif /* AN_CORE_NOTIFY_H */
