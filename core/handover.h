/*
 * Handing listening sockets to a successor (agentsnetd --upgrade).
 *
 * The old daemon's control thread sends every socket it listens on, each
 * under the name the service manager's store would give it ("sandbox.<id>",
 * "control"), over the control connection the new process opened and asked
 * on ("daemon handover", core/control.c). The new process takes them as it
 * takes $LISTEN_FDS (core/notify.h): a connection that arrives meanwhile
 * waits in the socket's queue, never refused, and is served by whichever
 * process accepts it.
 *
 * Wire, after the answer line "ok handover <count>": batches, each one
 * sendmsg of the text "batch <k> <bytes>\n" and <bytes> of names, one a
 * line, with the <k> descriptors in one SCM_RIGHTS message, in the names'
 * order; the receiver answers "next\n" to each, so that the stream never
 * holds two batches at once (a Unix stream would be free to deliver one's
 * text with the other's descriptors). A batch of none ends it.
 * Rejected: a message a descriptor (10,000 sandboxes, 10,000 round trips);
 * a second socket of its own (SOCK_SEQPACKET would keep the boundaries, and
 * be one more thing to secure).
 */
#ifndef AN_CORE_HANDOVER_H
#define AN_CORE_HANDOVER_H

#include <stdint.h>

#include "core/notify.h"

/* Descriptors a batch carries at most (the kernel's SCM_MAX_FD is 253). */
#define HANDOVER_BATCH_MAX 200u
/* A batch's text at most: its names, each under NOTIFY_FDNAME_BYTES with its newline. */
#define HANDOVER_TEXT_MAX (HANDOVER_BATCH_MAX * NOTIFY_FDNAME_BYTES)

/*
 * Sends the <count> descriptors of <fds> (each name non-empty, without a
 * newline, under NOTIFY_FDNAME_BYTES) on the blocking stream socket <sock>,
 * in batches, each once the receiver asked for it, then the empty batch.
 * The descriptors stay the caller's. 0, or -errno (-EPROTO: the receiver
 * answered something else; -ETIMEDOUT: <deadline_ms>, on timer_now_ms's
 * clock, passed before the whole exchange was done).
 */
int handover_send(int sock, const struct notify_fd *fds, uint32_t count, uint64_t deadline_ms);

/*
 * Receives what handover_send sends on <sock>, at most <cap> descriptors
 * into <out> (each made close-on-exec), their count into *<count>. 0, or
 * -errno: -E2BIG past <cap>, -EPROTO for a batch whose text does not read
 * as above or whose descriptors are not as many as its names; on an error
 * every descriptor received is closed and *<count> is 0; -ETIMEDOUT when
 * <deadline_ms> (timer_now_ms's clock) passed first.
 */
int handover_receive(int sock, struct notify_fd *out, uint32_t cap, uint32_t *count,
		     uint64_t deadline_ms);

/* How long the new daemon waits for the old one at each step, whole (the take, the ready). */
#define HANDOVER_WAIT_S 60

/*
 * The new daemon's side: connects to the running daemon's control socket at
 * <path>, asks "daemon handover", and receives every socket it listens on
 * into *<out> (owned; NULL when none), their count into *<count>; the
 * connection, kept for handover_ready, into *<conn>. 0, or -errno with
 * <why> (<cap> bytes) saying what failed or what the old daemon answered.
 */
int handover_take(const char *path, int *conn, struct notify_fd **out, uint32_t *count, char *why,
		  size_t cap);

/*
 * Tells the old daemon on <conn> that this one serves every socket ("ready")
 * and reads its "ok draining": from then on it serves no control request,
 * drains and stops. Closes <conn>. 0, or -errno (-EPROTO: another answer).
 */
int handover_ready(int conn);

#endif /* AN_CORE_HANDOVER_H */
