/*
 * The control socket: how operators and `agentsnet run` add, remove and list
 * sandboxes while the daemon runs (docs/control.md).
 *
 * <socket_dir>/control.sock, mode 0660, served by one thread: one request
 * line per connection, answered with "ok ..." or "error <code> <message>"
 * lines, then closed. It is never visible inside a sandbox (agentsnet run
 * mounts a fresh /run over it).
 */
#ifndef AN_CORE_CONTROL_H
#define AN_CORE_CONTROL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/runlimit.h"

struct engine;
struct engine_owner;
struct verdict_caller;

struct control {
	struct engine *e; /* borrowed */
	int listen_fd;
	int stop_fd;    /* eventfd: control_stop wakes the thread's poll */
	int release_fd; /* eventfd: control_release ends <held> */
	bool held;      /* the thread's: neither accepting nor reaping until released */
	pthread_t thread;
	char path[108];
	struct runlimits limits; /* the cgroups made for unprivileged runs (core/runlimit.h) */
	bool handed_over; /* a new daemon serves the socket (daemon handover): the thread ended */
};

/*
 * Creates the control socket under <e>'s socket_dir (a stale one is
 * replaced, a live one is -EADDRINUSE), owned by group <group> when it is not
 * -1, and starts its thread. <kept> (or -1), the old daemon's control socket
 * passed in an upgrade, is served instead when it listens at that path (else
 * closed), its file given <group> (the daemon's own gid when -1) and mode
 * 0660 first, so that a group the new policy drops loses access at once.
 * With <held> (an upgrade, until the old daemon took the hand-over) the
 * thread neither accepts nor reaps until control_release: a request it
 * served meanwhile would be lost if the hand-over then failed, the old
 * daemon serving on without it; callers wait in the socket's queue.
 * Returns 0 or -errno (logged).
 */
int control_start(struct control *ctl, struct engine *e, gid_t group, int kept, bool held);

/* Ends control_start's <held>: the thread accepts and reaps from now on. */
void control_release(struct control *ctl);

/* Stops the thread (held or not), closes and unlinks the socket. */
void control_stop(struct control *ctl);

/*
 * Handles one request line <line> (NUL-terminated, no newline) and returns
 * the whole answer (lines ending in '\n'), owned by the caller (pool_free),
 * with its length in *<len>; NULL when out of memory. A descriptor that goes
 * with the answer (an owned sandbox's listening ingress socket) is put in
 * *<fd> for the caller to send and close, else -1; with <fd> NULL it is
 * closed here. <who> is the caller, whose rights `sandbox add` and `sandbox
 * rm` check (NULL: none checked, for tests). Exposed for tests.
 */
char *control_handle(struct engine *e, const char *line, const struct engine_owner *owner,
		     const struct verdict_caller *who, size_t *len, int *fd);

#endif /* AN_CORE_CONTROL_H */
