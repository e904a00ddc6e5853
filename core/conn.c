/*
 * The connection state machine's spine (docs/design.md sections 3, 4 and 6): what
 * every conn goes through, whatever its mode. A conn starts in HEAD with a
 * multishot receive whose bytes are copied into a pooled head buffer and
 * re-parsed (heads are small; the parser is one pass). A complete head is
 * decided; an allowed one's name is resolved and every address checked
 * before a direct-descriptor socket connects (core/upstream.c). Every refusal goes through respond(): audit record first (its id
 * is in the answer), the deny-contract response, then LINGER, which drains
 * the client until EOF so the kernel never resets an answer still unread.
 *
 * Once decided, a conn runs in its mode, a file each (the map is in
 * core/conn_int.h), behind its table (c->mode, struct conn_mode): relay
 * completions in the mode's state, early data, the end and the records go
 * there. Which mode serves a conn is core/modes.c's to say, at the accept
 * and once a request is allowed, so the spine names no tier or mode.
 *
 * "Early data" is what the client sent after its head before the receive was
 * cancelled: the head buffer's tail plus a short FIFO of provided buffers,
 * forwarded before the relay starts (in TERM it queues ciphertext).
 *
 * Invariants: each operation kind has at most one SQE in flight (a bit in
 * c->ops); a conn is freed only in CLOSING with no op, cancel or lookup in
 * flight; buffers and pipes a conn holds are released only then or by the
 * completion that ends their use.
 */
#include "core/conn.h"
#include "core/conn_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/compat.h"
#include "core/deny.h"
#include "core/engine.h"
#include "core/log.h"
#include "core/ud.h"

#define CONN_LINGER_MS 2000u

/* A conn is most of what an idle tunnel costs (bench: idle memory per tunnel); a field
 * added past this budget goes into a mode's part of the union, or the budget is argued. */
static_assert(sizeof(struct conn) <= 1008, "struct conn over its budget");

#define OVERLOADED_BODY     "{\"reason\":\"overloaded\",\"status\":503}\n"
#define OVERLOADED_BODY_LEN "37"
static_assert(sizeof(OVERLOADED_BODY) - 1 == 37, "OVERLOADED_BODY_LEN is the body's length");
static const char reply_overloaded[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    "X-Agent-Reason: overloaded\r\nX-Agent-Instruction: The proxy is at its connection limit; "
    "retry after a short wait.\r\nRetry-After: 1\r\nConnection: close\r\n"
    "Content-Length: " OVERLOADED_BODY_LEN "\r\n\r\n" OVERLOADED_BODY;

/* What a connection accepted while its worker stops is told: the drain's answer, from static
 * memory (core/reason.c's daemon_stopping), with the drain's Retry-After. */
#define STOPPING_BODY     "{\"reason\":\"daemon_stopping\",\"status\":503}\n"
#define STOPPING_BODY_LEN "42"
static_assert(sizeof(STOPPING_BODY) - 1 == 42, "STOPPING_BODY_LEN is the body's length");
static_assert(LIMITS_DRAIN_RETRY_AFTER_S == 2, "reply_stopping's Retry-After is the drain's");
static const char reply_stopping[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    "X-Agent-Reason: daemon_stopping\r\nX-Agent-Instruction: The proxy is stopping or "
    "restarting and takes no new request; retry after the time in Retry-After.\r\n"
    "Retry-After: 2\r\nConnection: close\r\nContent-Length: " STOPPING_BODY_LEN
    "\r\n\r\n" STOPPING_BODY;

/* ---- small helpers ---------------------------------------------------- */

void close_slot(struct conn *c, int32_t *slot)
{
	AN_ASSERT(*slot >= 0);
	struct io_uring_sqe *sqe = ring_sqe(conn_ring(c));
	io_uring_prep_close_direct(sqe, (unsigned)*slot);
	io_uring_sqe_set_data64(sqe, 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	*slot = -1;
}

/* Closes <slot>, a TCP socket's, in a reset: SO_LINGER 0 first, hard-linked to the close. */
static void reset_slot(struct conn *c, int32_t *slot)
{
	static const struct linger reset = { .l_onoff = 1, .l_linger = 0 };

	if (c->w->e->features.setsockopt_cmd) {
		struct io_uring_sqe *sqe = ring_sqe(conn_ring(c));
		compat_prep_setsockopt(sqe, *slot, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
		io_uring_sqe_set_data64(sqe, 0);
		/* Hard-linked: the close runs whatever the option's outcome. */
		sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS;
	}
	close_slot(c, slot);
}

void upstream_close(struct conn *c)
{
	AN_ASSERT(c->ufd >= 0);
	if (c->upstream_reset)
		reset_slot(c, &c->ufd);
	else
		close_slot(c, &c->ufd);
	c->upstream_reset = false;
}

/* The client's slot closed, in a reset when the upstream's was passed on and the client is on TCP. */
static void client_close(struct conn *c)
{
	if (c->client_reset && (c->flags & F_TCP_CLIENT))
		reset_slot(c, &c->cfd);
	else
		close_slot(c, &c->cfd);
	c->client_reset = false;
}

void hangup_watch(struct conn *c)
{
	uint32_t op = dir_op(DIR_UP, ROP_POLL);

	if (c->req_done || (c->ops & op_bit(op)) || c->cfd < 0)
		return;
	struct io_uring_sqe *sqe = conn_sqe(c, op);
	io_uring_prep_poll_add(sqe, c->cfd, POLLHUP | POLLERR);
	sqe->flags |= IOSQE_FIXED_FILE;
}

bool hangup_seen(int res)
{
	return res > 0 && (res & (POLLHUP | POLLERR)) != 0;
}

const struct engine_sandbox *conn_sandbox(const struct conn *c)
{
	AN_DASSERT(c->sandbox != WORKER_NO_SANDBOX);
	return c->w->e->sandboxes[c->sandbox];
}

const char *conn_sandbox_id(const struct conn *c, char *buf)
{
	if (c->front != NULL && c->front->sandbox_id != NULL)
		return c->front->sandbox_id(c, buf);
	return conn_sandbox(c)->id;
}

uint64_t upstream_key(const char *host, size_t len, uint16_t port)
{
	return XXH3_64bits_withSeed(host, len, port);
}

/* ---- lifetime ------------------------------------------------------- */

/*
 * Queues provided buffer <bid> of <len> bytes behind the conn's early data,
 * chained through the ring's held_next. Bytes that fit in the room left in
 * the last buffer queued join it there, and <bid> goes back to the ring at
 * once: a client sending a few bytes a segment holds one buffer, not one a
 * segment (a send from that buffer already under way covers the bytes it
 * had; early_advance finds the rest).
 */
void early_push(struct conn *c, uint16_t bid, uint32_t len)
{
	struct ring *r = conn_ring(c);

	AN_ASSERT(len > 0 && len <= UINT16_MAX && len <= r->buf_bytes && bid < r->buf_count);
	if (c->early_count > 0) {
		uint16_t last = c->early_last;
		if (len <= r->buf_bytes - r->held_len[last]) {
			memcpy((char *)ring_buf(r, last) + r->held_len[last], ring_buf(r, bid),
			       len);
			r->held_len[last] = (uint16_t)(r->held_len[last] + len);
			ring_buf_return(r, bid);
			return;
		}
		r->held_next[last] = bid;
	} else {
		c->early_first = bid;
		c->early_read = 0;
	}
	r->held_len[bid] = (uint16_t)len;
	c->early_last = bid;
	AN_ASSERT(c->early_count < r->buf_count);
	c->early_count++;
}

/* The unread bytes of the oldest early buffer: their length; *<bid> and *<off> say where. */
uint32_t early_front(const struct conn *c, uint16_t *bid, uint32_t *off)
{
	const struct ring *r = &c->w->ring;

	AN_ASSERT(c->early_count > 0);
	*bid = c->early_first;
	*off = c->early_read;
	AN_ASSERT(c->early_read < r->held_len[c->early_first]);
	return r->held_len[c->early_first] - c->early_read;
}

/* Marks <n> bytes of the oldest early buffer read. A buffer read whole goes back to the ring. */
void early_advance(struct conn *c, uint32_t n)
{
	struct ring *r = conn_ring(c);
	uint16_t first = c->early_first;

	AN_ASSERT(c->early_count > 0);
	AN_ASSERT(c->early_read + n <= r->held_len[first]);
	c->early_read = (uint16_t)(c->early_read + n);
	if (c->early_read < r->held_len[first])
		return;
	c->early_read = 0;
	c->early_count--;
	if (c->early_count > 0)
		c->early_first = r->held_next[first];
	ring_buf_return(r, first);
}

static void early_release_all(struct conn *c)
{
	while (c->early_count > 0) {
		uint16_t bid;
		uint32_t off;
		early_advance(c, early_front(c, &bid, &off));
	}
}

void relay_release(struct conn *c, struct relay *r)
{
	if (r->holds_buf) {
		ring_buf_return(conn_ring(c), r->bid);
		r->holds_buf = false;
	}
	if (r->pipe != NULL) {
		pipepool_put(&c->w->pipes, r->pipe, r->pipe_bytes != 0);
		r->pipe = NULL;
		r->pipe_bytes = 0;
	}
}

void buffers_release(struct conn *c)
{
	if (c->head != NULL) {
		pool_put(&c->w->heads, c->head);
		c->head = NULL;
	}
	if (c->out != NULL) {
		pool_put(&c->w->heads, c->out);
		c->out = NULL;
	}
	if (c->resp != NULL) {
		pool_put(&c->w->heads, c->resp);
		c->resp = NULL;
	}
	c->head_fill = 0;
	c->head_len = 0;
	c->early_off = 0;
	c->resp_fill = 0;
	c->path_len = 0;
}

static void nobufs_unlink(struct conn *c)
{
	if ((c->flags & F_NOBUFS) == 0)
		return;
	for (struct conn **pp = &c->w->nobufs; *pp != NULL; pp = &(*pp)->nobufs_next) {
		if (*pp == c) {
			*pp = c->nobufs_next;
			break;
		}
	}
	c->flags &= (uint8_t)~F_NOBUFS;
}

/* The conn no longer counts against its last request's rule (it closed, or moved on). */
static void rule_limit_release(struct conn *c)
{
	if (c->rule_limit == NULL)
		return;
	AN_ASSERT(c->rule_limit->conns > 0);
	c->rule_limit->conns--;
	c->rule_limit = NULL;
}

void conn_maybe_free(struct conn *c)
{
	struct worker *w = c->w;

	if (c->state != ST_CLOSING || c->ops != 0 || c->cancels != 0 || (c->flags & F_DNS))
		return;
	/* Only now, with no op of ours left to resolve them, may the slots be reused. */
	if (c->mode != NULL && c->mode->end != NULL)
		c->mode->end(c); /* an upstream it may park */
	if (c->front != NULL && c->front->end != NULL)
		c->front->end(c); /* what it counts */
	if (c->cfd >= 0)
		client_close(c);
	if (c->ufd >= 0)
		upstream_close(c);
	conn_close_record(c);
	rule_limit_release(c);
	if (c->client_tls != NULL)
		w->e->term->session_free(c->client_tls);
	if (c->upstream_tls != NULL)
		w->e->term->session_free(c->upstream_tls);
	c->client_tls = NULL;
	c->upstream_tls = NULL;
	if (c->snap != NULL)
		snapshot_put(c->snap, w->index); /* after the record: it borrows the rule id */
	c->snap = NULL;
	share_put(&w->share, c->share_key);
	if (c->share_key != SHARE_KEY_PUBLIC) { /* a sandbox's listener: counted at the accept */
		struct engine_sandbox *sb = w->e->sandboxes[c->sandbox];
		uint32_t live = atomic_fetch_sub_explicit(&sb->conns, 1, memory_order_relaxed);
		AN_ASSERT(live > 0);
	}
	early_release_all(c);
	relay_release(c, &c->up);
	relay_release(c, &c->down);
	buffers_release(c);
	nobufs_unlink(c);
	timer_disarm(w->timers, &c->timer);
	if (c->live_prev != NULL)
		c->live_prev->live_next = c->live_next;
	else
		w->live = c->live_next;
	if (c->live_next != NULL)
		c->live_next->live_prev = c->live_prev;
	pool_put(&w->conns, c);
}

void conn_close_at(struct conn *c, int line)
{
	if (c->state == ST_CLOSING)
		return;
	static const char *const state_names[] = { "head",    "resolve", "connect", "tunnel",
						   "forward", "respond", "linger",  "term" };
	static_assert(AN_ARRAY_LEN(state_names) == ST_CLOSING, "a name per state");
	log_debug("conn %llx: closing in %s (conn.c:%d)", (unsigned long long)c->id,
		  state_names[c->state], line);
	c->state = ST_CLOSING;
	timer_disarm(c->w->timers, &c->timer);
	uint32_t pending = c->ops;
	for (uint32_t op = 0; op < CONN_OP_COUNT; op++) {
		if ((pending & op_bit(op)) == 0)
			continue;
		struct io_uring_sqe *sqe = ring_sqe(conn_ring(c));
		io_uring_prep_cancel64(sqe, ud_encode(c, op), 0);
		io_uring_sqe_set_data64(sqe, ud_encode(c, OP_CANCEL));
		c->cancels++;
	}
	/* The slots stay ours until conn_maybe_free: a splice runs on an io-wq
	 * thread and looks its fixed descriptor up when it starts, so a slot
	 * closed (and handed to a new socket) while one is queued would let it
	 * move another connection's bytes. */
}

void conn_abort(struct conn *c)
{
	conn_close(c);
	conn_maybe_free(c);
}

/* ---- accept ---------------------------------------------------------- */

/*
 * What a client of the gateway's TLS listener is told when refused at accept:
 * no session exists to carry an HTTP answer, and plaintext HTTP would read as
 * a broken record. A fatal internal_error alert (RFC 8446 section 6: an
 * alert sent before the handshake is a plaintext record; section 6.2: an
 * internal error unrelated to the peer makes it impossible to continue) says
 * "the server, not you" in the protocol the client speaks. The refusal's
 * reason is in its audit record.
 */
static const unsigned char reply_tls_refused[] = {
	0x15,       /* ContentType alert */
	0x03, 0x03, /* legacy_record_version TLS 1.2, as every TLS 1.3 record has it */
	0x00, 0x02, /* length */
	0x02,       /* AlertLevel fatal */
	0x50,       /* AlertDescription internal_error (80) */
};

/* True: <l>'s clients speak TLS before anything (the gateway's public listener with TLS). */
static bool listener_speaks_tls(const struct worker *w, const struct worker_listener *l)
{
	return l->ingress && !l->internal && w->e->ingress_tls;
}

/*
 * Sends the <len> bytes of static <reply> on accepted <slot> and closes it,
 * untracked; on a listener whose clients speak TLS, the TLS alert instead.
 * Hard-linked: a send that fails or falls short (a peer gone already) must
 * still close the slot, or a flood of resets would leak it.
 */
static void refuse_static(struct worker *w, const struct worker_listener *l, int slot,
			  const char *reply, size_t len)
{
	if (listener_speaks_tls(w, l)) {
		reply = (const char *)reply_tls_refused;
		len = sizeof(reply_tls_refused);
	}
	struct io_uring_sqe *sqe = ring_sqe(&w->ring);
	io_uring_prep_send(sqe, slot, reply, len, MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, 0);
	sqe = ring_sqe(&w->ring);
	io_uring_prep_close_direct(sqe, (unsigned)slot);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, 0);
}

/*
 * The decision record of a connection refused at accept, with no conn to
 * hang it on: <reason>, its status, <l>'s sandbox (none for the public
 * listener), a conn number of its own. Counted as a decision too.
 */
static void audit_accept_refusal(struct worker *w, const struct worker_listener *l,
				 enum reason reason)
{
	decision_count(w, false, TIER_DENY, reason);
	struct audit_record *rec = audit_claim(w->audit);
	if (rec == NULL)
		return; /* counted as dropped by the ring */
	rec->kind = AUDIT_DECISION;
	rec->id = audit_next_id(w->audit);
	rec->conn_id = ((uint64_t)w->index << 48) | ++w->next_conn_seq;
	rec->allowed = false;
	rec->status = reason_status(reason);
	rec->reason = (uint8_t)reason;
	if (l->sandbox != WORKER_NO_SANDBOX) {
		const char *id = w->e->sandboxes[l->sandbox]->id;
		audit_copy(rec->sandbox, sizeof(rec->sandbox), id, strlen(id));
	}
	audit_commit(w->audit, rec);
}

/*
 * The worker stops (its accepts cancelled, but this one completed first): answer
 * 503 daemon_stopping from static memory, close, and audit it; not an overload.
 */
static void refuse_stopping(struct worker *w, const struct worker_listener *l, int slot)
{
	refuse_static(w, l, slot, reply_stopping, sizeof(reply_stopping) - 1);
	audit_accept_refusal(w, l, REASON_DAEMON_STOPPING);
}

/* The conn pool is empty: answer 503 from static memory, close, and audit it. */
static void refuse_overloaded(struct worker *w, const struct worker_listener *l, int slot)
{
	refuse_static(w, l, slot, reply_overloaded, sizeof(reply_overloaded) - 1);
	w->stats.refused_overload++;
	audit_accept_refusal(w, l, REASON_OVERLOADED);
}

/*
 * <l>'s sandbox holds its share of the worker (core/share.h): answer 429 with
 * the worker's formatted refusal, close, and audit it. Nothing is taken from
 * any pool, so refusing costs the flood's target no more than its accept.
 */
static void refuse_over_share(struct worker *w, const struct worker_listener *l, int slot)
{
	AN_ASSERT(w->share_reply_len > 0);
	refuse_static(w, l, slot, w->share_reply, w->share_reply_len);
	w->stats.refused_share++;
	audit_accept_refusal(w, l, REASON_CONNECTION_SHARE_EXCEEDED);
}

void set_nodelay(struct conn *c, uint32_t op, int fd)
{
	if (!c->w->e->features.setsockopt_cmd)
		return;
	c->nodelay = 1;
	struct io_uring_sqe *sqe = conn_sqe(c, op);
	compat_prep_setsockopt(sqe, fd, IPPROTO_TCP, TCP_NODELAY, &c->nodelay, sizeof(c->nodelay));
	sqe->flags |= IOSQE_FIXED_FILE;
}

/*
 * Who may use a sandbox's egress socket is its agent's uid (and root): the
 * socket's owner and mode (0600) make the kernel refuse everyone else, and
 * the peer's credentials, read before the first byte, refuse and audit what
 * the mode lets past (a process with CAP_DAC_OVERRIDE that is not root).
 * Not for a sandbox open to any uid (ENGINE_AGENT_ANY), the TCP listener or
 * the gateway; not on a kernel without socket commands (logged at start).
 */
static bool peer_check_wanted(const struct conn *c, const struct worker_listener *l)
{
	if (l->tcp || l->ingress || l->internal || l->sandbox == WORKER_NO_SANDBOX)
		return false;
	return c->w->e->features.setsockopt_cmd &&
	       c->w->e->sandboxes[l->sandbox]->agent_uid != ENGINE_AGENT_ANY;
}

static void peer_ask(struct conn *c)
{
	static_assert(sizeof(c->peer) == sizeof(struct ucred), "conn.peer is a struct ucred");
	struct io_uring_sqe *sqe = conn_sqe(c, OP_PEERCRED);
	compat_prep_getsockopt(sqe, c->cfd, SO_PEERCRED, &c->peer, sizeof(c->peer));
	sqe->flags |= IOSQE_FIXED_FILE;
}

/* The peer's credentials came (<res>: their length, or -errno): the agent's or root's go on. */
static void peer_known(struct conn *c, int res)
{
	uint32_t agent = c->w->e->sandboxes[c->sandbox]->agent_uid;

	if (c->state != ST_HEAD)
		return; /* closing already (a timeout, a stop) */
	if (res == (int)sizeof(c->peer) && (c->peer.uid == agent || c->peer.uid == 0)) {
		head_recv_arm(c);
		return;
	}
	if (res != (int)sizeof(c->peer)) {
		/* Unknown: refused as a stranger would be (uid -1 in the record). */
		log_warn("worker %u: SO_PEERCRED: %s", c->w->index,
			 res < 0 ? strerror(-res) : "short answer");
		c->peer.uid = UINT32_MAX;
		c->peer.gid = UINT32_MAX;
		c->peer.pid = 0;
	}
	c->peer_refused = true;
	respond(c, REASON_PEER_NOT_AGENT);
}

void conn_on_accept(struct worker_listener *l, int res, uint32_t cqe_flags)
{
	struct worker *w = l->w;

	if ((cqe_flags & IORING_CQE_F_MORE) == 0)
		l->armed = false; /* the worker re-arms it */
	if (res < 0) {
		if (res != -ECANCELED)
			log_warn("worker %u: accept: %s", w->index, strerror(-res));
		return;
	}
	if (l->removing) {
		int32_t slot = res; /* the sandbox is going away: no answer to give */
		struct io_uring_sqe *sqe = ring_sqe(&w->ring);
		io_uring_prep_close_direct(sqe, (unsigned)slot);
		io_uring_sqe_set_data64(sqe, 0);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		return;
	}
	if (w->stopping) {
		refuse_stopping(w, l, res);
		return;
	}
	uint32_t share_key = l->sandbox == WORKER_NO_SANDBOX ? SHARE_KEY_PUBLIC : l->sandbox;
	if (!share_full(&w->share) && !share_admits(&w->share, share_key)) {
		refuse_over_share(w, l, res);
		return;
	}
	struct conn *c = share_full(&w->share) ? NULL : pool_take(&w->conns);
	if (c == NULL) {
		refuse_overloaded(w, l, res);
		return;
	}
	share_take(&w->share, share_key);
	c->share_key = share_key;
	if (!conn_mode_accepted(c, l))
		atomic_fetch_add_explicit(&w->e->sandboxes[l->sandbox]->conns, 1,
					  memory_order_relaxed);
	w->stats.accepted++;
	c->w = w;
	c->id = ((uint64_t)w->index << 48) | ++w->next_conn_seq;
	c->cfd = res;
	c->ufd = -1;
	c->sandbox = l->sandbox;
	c->connect_path_fd = -1;
	c->state = ST_HEAD;
	c->start_ms = w->now_ms;
	c->active_ms = w->now_ms;
	c->live_next = w->live;
	if (w->live != NULL)
		w->live->live_prev = c;
	w->live = c;
	if (l->tcp || l->ingress) {
		c->flags |= F_TCP_CLIENT;
		set_nodelay(c, OP_NODELAY_C, c->cfd);
	}
	if (c->front != NULL && c->front->accepted != NULL) {
		c->front->accepted(c);
		return;
	}
	head_deadline_arm(c);
	if (peer_check_wanted(c, l))
		peer_ask(c); /* the head is read once the peer is known to be the agent */
	else
		head_recv_arm(c);
}

/* ---- request head ------------------------------------------------------ */

void head_recv_arm(struct conn *c)
{
	AN_ASSERT(c->cfd >= 0);
	struct io_uring_sqe *sqe = conn_sqe(c, OP_HEAD_RECV);
	io_uring_prep_recv_multishot(sqe, c->cfd, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = RING_BGID;
}

void head_recv_stop(struct conn *c)
{
	c->flags |= F_HEAD_STOP;
	if ((c->ops & op_bit(OP_HEAD_RECV)) == 0)
		return;
	struct io_uring_sqe *sqe = ring_sqe(conn_ring(c));
	io_uring_prep_cancel64(sqe, ud_encode(c, OP_HEAD_RECV), 0);
	io_uring_sqe_set_data64(sqe, ud_encode(c, OP_CANCEL));
	c->cancels++;
}

void nobufs_wait(struct conn *c)
{
	if (c->flags & F_NOBUFS)
		return;
	c->flags |= F_NOBUFS;
	c->nobufs_next = c->w->nobufs;
	c->w->nobufs = c;
}

/* Whether <len> more bytes, the next request's, are kept while an answer goes out. */
static bool head_keeps(const struct conn *c, uint32_t len)
{
	/* Up to one head's worth past the answered one, as a receive in ST_HEAD would take:
	 * what a CONNECT among it brings early must fit a TLS session (term_start). Behind
	 * bytes still queued (head_carry), they queue too: head_data. */
	return c->state == ST_RESPOND && c->answer_keeps_conn && c->head != NULL &&
	       c->early_count == 0 && c->head_fill <= LIMITS_HEAD_BYTES_MAX &&
	       c->head_fill + len <= c->head_len + LIMITS_HEAD_BYTES_MAX &&
	       c->head_fill + len <= WORKER_HEAD_BUFFER_BYTES;
}

/*
 * The head deadline: daemon.timeouts.head_ms from the head's first byte (a
 * new connection's from its accept), absolute: bytes trickling in never
 * extend it. A kept connection waits for its next head's first byte as long
 * as the idle timeout allows.
 */
void head_deadline_arm(struct conn *c)
{
	timer_arm(c->w->timers, &c->timer, c->w->e->cfg->head_timeout_ms);
}

/* Appends buffer <bid>'s <len> bytes to the head buffer and gives the buffer back. */
static void head_append(struct conn *c, uint16_t bid, uint32_t len)
{
	struct ring *r = conn_ring(c);

	AN_ASSERT(c->head != NULL);
	/* The buffer always has room for one more receive past the limit. */
	AN_ASSERT(c->head_fill <= LIMITS_HEAD_BYTES_MAX);
	AN_ASSERT(c->head_fill + len <= WORKER_HEAD_BUFFER_BYTES);
	if (c->state == ST_HEAD && c->head_fill == 0 && c->requests > 0)
		head_deadline_arm(c); /* a kept connection's next head begins */
	memcpy(c->head + c->head_fill, ring_buf(r, bid), len);
	c->head_fill += len;
	ring_buf_return(r, bid);
}

static void head_data(struct conn *c, uint16_t bid, uint32_t len)
{
	struct ring *r = conn_ring(c);

	if (c->state == ST_HEAD && c->head_len == 0) {
		if (c->head == NULL) {
			c->head = pool_take(&c->w->heads);
			if (c->head == NULL) {
				ring_buf_return(r, bid);
				respond(c, REASON_OVERLOADED);
				return;
			}
		}
		head_append(c, bid, len);
		head_parse(c);
		return;
	}
	if (conn_in_mode(c) && c->mode->client_data != NULL) {
		c->mode->client_data(c, bid, len); /* takes the buffer */
		return;
	}
	if (head_keeps(c, len)) {
		/* The next request, sent while a fake answer goes out: kept for it. */
		head_append(c, bid, len);
		return;
	}
	if (c->state == ST_RESPOND && c->answer_keeps_conn && c->early_count > 0) {
		early_push(c, bid, len);
		return; /* behind what waits already: head_read_next carries it on */
	}
	if (c->state == ST_RESPOND || c->state == ST_LINGER || c->state == ST_CLOSING) {
		c->answer_keeps_conn = false; /* a request lost here must not be waited for */
		ring_buf_return(r, bid);
		return;
	}
	/* Early data: the client sent more before we answered. Keep it in order. */
	early_push(c, bid, len);
	/* Enough waits: what the client sends next stays in the kernel until the mode reads. */
	if (c->early_count >= CONN_EARLY_STOP_AT && !(c->flags & F_HEAD_STOP))
		head_recv_stop(c);
	if (conn_in_mode(c) && c->mode->early != NULL)
		c->mode->early(c);
}

bool head_recv_wanted(const struct conn *c)
{
	if (c->cfd < 0 || (c->flags & (F_HEAD_STOP | F_CLIENT_EOF)))
		return false;
	return c->state == ST_HEAD || c->state == ST_RESOLVE || c->state == ST_CONNECT ||
	       c->state == ST_RESPOND || c->state == ST_LINGER;
}

static void head_eof(struct conn *c)
{
	c->flags |= F_CLIENT_EOF;
	switch (c->state) {
	case ST_HEAD: /* a keep-alive client leaving, or one that gave up mid-head */
	case ST_LINGER:
		conn_close(c);
		break;
	case ST_RESOLVE:
	case ST_CONNECT:
		/* The agent may half-close after CONNECT's request; keep going, and
		 * shut the upstream's write side once the tunnel is up. */
		break;
	default:
		if (conn_in_mode(c) && c->mode->client_eof != NULL)
			c->mode->client_eof(c);
		break;
	}
}

static_assert(IORING_CQE_BUFFER_SHIFT == 16, "CONN_CQE_F_TAKEN sits in the buffer id's bits");

void conn_cqe_defer(struct conn *c, uint32_t op, int res, uint32_t *cqe_flags)
{
	AN_ASSERT(op < CONN_OP_COUNT);
	AN_ASSERT((c->ops & op_bit(op)) != 0 || op == OP_CANCEL);
	if (op != OP_HEAD_RECV || res <= 0)
		return;
	AN_ASSERT(*cqe_flags & IORING_CQE_F_BUFFER);
	uint16_t bid = (uint16_t)(*cqe_flags >> IORING_CQE_BUFFER_SHIFT);
	uint32_t len = (uint32_t)res;
	/* Only where its handler would copy the bytes, and only before a head is
	 * complete or while an answer goes out: its turn then parses them. */
	bool reading =
	    c->state == ST_HEAD && c->head_len == 0 && c->head_fill <= LIMITS_HEAD_BYTES_MAX;
	if (reading && c->head == NULL)
		c->head = pool_take(&c->w->heads);
	if (!(reading && c->head != NULL) && !head_keeps(c, len))
		return; /* waits with its buffer: handled as it came */
	ring_buf_taken(conn_ring(c), bid);
	c->active_ms = c->w->now_ms;
	head_append(c, bid, len);
	*cqe_flags = (*cqe_flags & IORING_CQE_F_MORE) | CONN_CQE_F_TAKEN;
	AN_ASSERT((*cqe_flags & IORING_CQE_F_BUFFER) == 0);
}

static void on_head_recv(struct conn *c, int res, uint32_t cqe_flags)
{
	bool more = (cqe_flags & IORING_CQE_F_MORE) != 0;
	bool out_of_buffers = false;

	if (!more)
		c->ops &= ~op_bit(OP_HEAD_RECV);
	if (res > 0 && (cqe_flags & CONN_CQE_F_TAKEN)) {
		/* Its bytes were taken in when it was deferred (conn_cqe_defer):
		 * parsed now if a head is still being read, else already kept. */
		AN_ASSERT((cqe_flags & IORING_CQE_F_BUFFER) == 0);
		if (c->state == ST_HEAD && c->head_len == 0)
			head_parse(c);
	} else if (res > 0) {
		AN_ASSERT(cqe_flags & IORING_CQE_F_BUFFER);
		uint16_t bid = (uint16_t)(cqe_flags >> IORING_CQE_BUFFER_SHIFT);
		ring_buf_taken(conn_ring(c), bid);
		c->active_ms = c->w->now_ms;
		head_data(c, bid, (uint32_t)res);
	} else if (res == 0) {
		head_eof(c);
	} else if (res == -ENOBUFS) {
		out_of_buffers = true;
	} else if (res != -ECANCELED && c->state == ST_HEAD) {
		conn_close(c);
	}
	if (c->state == ST_CLOSING)
		return;
	if (!more && head_recv_wanted(c) && (c->ops & op_bit(OP_HEAD_RECV)) == 0) {
		if (out_of_buffers)
			nobufs_wait(c); /* re-armed once buffers come back */
		else
			head_recv_arm(c);
	}
	if (!more && conn_in_mode(c) && c->mode->early != NULL)
		c->mode->early(c);
}

/* ---- deciding -------------------------------------------------------- */

void request_copy(struct conn *c, const struct http1_request *req)
{
	size_t mlen = req->method_len < sizeof(c->method) ? req->method_len : sizeof(c->method) - 1;
	memcpy(c->method, req->method, mlen);
	c->method_len = (uint8_t)mlen;
	size_t hlen =
	    req->host != NULL && req->host_len <= LIMITS_HOST_BYTES_MAX ? req->host_len : 0;
	if (hlen > 0)
		memcpy(c->host, req->host, hlen);
	c->host[hlen] = '\0';
	c->host_len = (uint8_t)hlen;
	c->port = req->port;
	c->path_len = 0;
	if (req->form == HTTP1_FORM_ABSOLUTE) {
		c->path_off = (uint16_t)(req->path - c->head);
		c->path_len = (uint16_t)(req->path_len < UINT16_MAX ? req->path_len : UINT16_MAX);
	}
}

/*
 * The deciding rule's limits for this sandbox (an entry of the worker's
 * table): connections on the rule at once, then its request rate. Checked
 * before the sandbox's own limits, so a request the rule refuses spends
 * none of the sandbox's tokens. A table with no idle entry left refuses
 * rather than let the request through unlimited (ratelimit_rule_refusal).
 */
static enum reason rule_limits_refusal(struct conn *c, const struct verdict *v)
{
	struct worker *w = c->w;
	const struct verdict_limits *l = &v->rule_limits;

	rule_limit_release(c);
	if (v->rule_index == VERDICT_RULE_NONE ||
	    (l->requests_per_second == 0 && l->concurrent == 0))
		return REASON_NONE;
	const struct ratelimit_key key = { .snapshot_generation = c->snap->generation,
					   .slot = c->sandbox,
					   .generation = conn_sandbox(c)->generation,
					   .rule_index = v->rule_index };
	return ratelimit_rule_refusal(&w->rule_buckets, &key, l, w->now_ms, &c->rule_limit,
				      &c->retry_after_s);
}

/*
 * The sandbox's limits on a request the policy allows: its connections at
 * once (checked on a connection's first request) and its request rate (a
 * bucket on this worker; the TCP listener's sandbox, served by every worker,
 * gets one per worker). Sets c->retry_after_s for the answer.
 */
static enum reason limits_refusal(struct conn *c, const struct verdict_limits *limits)
{
	const struct engine_sandbox *sb = conn_sandbox(c);
	struct worker *w = c->w;
	uint32_t retry = 0;

	/* Counted until one request passes, not only at the first: a refused
	 * connection stays open for the next request (refusal_keeps). */
	if (limits->concurrent != 0 && !c->admitted &&
	    atomic_load_explicit(&sb->conns, memory_order_relaxed) > limits->concurrent) {
		c->retry_after_s = 1;
		return REASON_CONCURRENCY_LIMITED;
	}
	if (!ratelimit_take(&w->buckets[c->sandbox], limits, sb->generation, w->now_ms, &retry)) {
		c->retry_after_s = retry;
		return REASON_RATE_LIMITED;
	}
	c->admitted = true;
	return REASON_NONE;
}

enum reason session_limits_refusal(struct conn *c)
{
	struct worker *w = c->w;
	const struct engine_sandbox *sb = conn_sandbox(c);
	uint32_t retry = 0;

	c->retry_after_s = 0;
	if (c->session_tokens_taken) {
		c->session_tokens_taken = false; /* the CONNECT took this request's tokens */
		return REASON_NONE;
	}
	struct ratelimit_entry *e = c->rule_limit;
	if (e != NULL &&
	    !ratelimit_take(&e->bucket, &e->limits, sb->generation, w->now_ms, &retry)) {
		c->retry_after_s = retry;
		return REASON_RATE_LIMITED;
	}
	/* The sandbox's bucket is shared with its requests in clear: the limits they are
	 * decided under (the worker's policy), the session's own if a reload dropped it. */
	const struct snapshot_sandbox *now = &w->policy->sandboxes[c->sandbox];
	const struct snapshot_sandbox *under = now->known ? now : &c->snap->sandboxes[c->sandbox];
	if (!ratelimit_take(&w->buckets[c->sandbox], &under->limits, sb->generation, w->now_ms,
			    &retry)) {
		c->retry_after_s = retry;
		return REASON_RATE_LIMITED;
	}
	return REASON_NONE;
}

/*
 * Whether the connection of request <req>, refused <why>, stays open for the
 * next request: a limit's 429 only (the agent is told to retry after a wait,
 * and a flood that reconnects after each refusal costs the worker an accept,
 * a close and an audit record more than it costs the flooder), and only
 * where HTTP/1.1 allows it with the framing intact: a keep-alive request with
 * no body (http1_request_bodiless). A CONNECT only with nothing sent after
 * its head: bytes an agent sends before the 200 (an optimistic ClientHello)
 * are not a request. tlsterm.c keeps a session's the same way.
 */
static bool refusal_keeps(const struct conn *c, const struct http1_request *req, enum reason why)
{
	if (why != REASON_RATE_LIMITED && why != REASON_CONCURRENCY_LIMITED)
		return false;
	if (!req->keep_alive || !http1_request_bodiless(req))
		return false;
	AN_ASSERT(c->head_len <= c->head_fill);
	return !req->is_connect || (c->head_fill == c->head_len && c->early_count == 0);
}

/*
 * Points the request about to be decided at the worker's snapshot (a kept-
 * alive conn moves on to a reloaded policy at its next request) and returns
 * what its sandbox is under it; NULL when the snapshot does not know the
 * sandbox (a reload dropped it). The worker adopted the published snapshot
 * before it applied the command that brought the sandbox (a listener, a
 * gateway route), so a sandbox added since its last turn is known here.
 */
const struct snapshot_sandbox *snapshot_take(struct conn *c)
{
	struct worker *w = c->w;

	if (c->snap != w->policy) {
		if (c->snap != NULL)
			snapshot_put(c->snap, w->index);
		snapshot_get(w->policy, w->index);
		c->snap = w->policy;
	}
	const struct snapshot_sandbox *sb = &c->snap->sandboxes[c->sandbox];
	return sb->known ? sb : NULL;
}

uint32_t refusal_retry_after_s(const struct conn *c, enum reason why)
{
	if (c->retry_after_s != 0)
		return c->retry_after_s;
	return reason_status(why) == 503 ? 1u : 0u; /* a 503 always says when to come back */
}

/* ---- drain (engine_drain) ---------------------------------------------- */

enum drain_answer drain_answer(const struct conn *c)
{
	const struct engine *e = c->w->e;

	if (!c->w->draining)
		return DRAIN_NONE;
	/* The gateway's conns (public, or through its TLS front) and the TCP listener's
	 * are handed on with every listener; a sandbox's with its socket. */
	bool handed_on = (c->flags & F_TCP_CLIENT) || c->ingress ? e->drain.all_handed_on
								 : e->drain.sandboxes_handed_on;
	return handed_on ? DRAIN_CLOSE : DRAIN_REFUSE;
}

const struct http1_request *drain_request(struct conn *c, const struct http1_request *req,
					  struct http1_request *closing)
{
	switch (drain_answer(c)) {
	case DRAIN_NONE:
		return req;
	case DRAIN_CLOSE:
		*closing = *req;
		closing->keep_alive = false;
		return closing;
	case DRAIN_REFUSE:
		break;
	}
	c->tier = TIER_DENY;
	c->rule = NULL;
	c->instruction = NULL;
	c->retry_after_s = LIMITS_DRAIN_RETRY_AFTER_S;
	respond(c, REASON_DAEMON_STOPPING);
	return NULL;
}

/* A terminated tunnel between its requests (its mode's awaiting_request). */
static bool conn_awaits_request(const struct conn *c)
{
	return conn_in_mode(c) && c->state == ST_TERM && c->mode->awaiting_request != NULL &&
	       c->mode->awaiting_request(c);
}

void conn_drain(struct conn *c)
{
	/* Waiting for a request that has not begun: a short wait, then the close. */
	if ((c->state == ST_HEAD && c->head_fill == 0) || conn_awaits_request(c))
		timer_arm(c->w->timers, &c->timer, LIMITS_DRAIN_IDLE_MS);
}

uint32_t conn_next_request_ms(const struct conn *c)
{
	return c->w->draining ? LIMITS_DRAIN_IDLE_MS : c->w->e->cfg->idle_timeout_ms;
}

bool conn_quarantined(const struct conn *c)
{
	return c->sandbox != WORKER_NO_SANDBOX && !c->ingress &&
	       atomic_load_explicit(&c->w->e->sandboxes[c->sandbox]->quarantined,
				    memory_order_relaxed);
}

void decide(struct conn *c, const struct http1_request *req)
{
	const struct engine *e = c->w->e;
	struct verdict v;

	c->requests++;
	c->w->stats.requests++;
	c->retry_after_s = 0;
	request_copy(c, req);
	if (req->form != HTTP1_FORM_ABSOLUTE && req->form != HTTP1_FORM_AUTHORITY) {
		respond(c, REASON_NOT_A_PROXY_REQUEST);
		return;
	}
	if (audit_refuses(c)) {
		c->tier = TIER_DENY; /* not the kept connection's last request's */
		c->rule = NULL;
		c->instruction = NULL;
		respond(c, REASON_AUDIT_UNAVAILABLE); /* nothing is served that goes unrecorded */
		return;
	}
	struct http1_request closing;
	if ((req = drain_request(c, req, &closing)) == NULL)
		return;
	const struct snapshot_sandbox *under = snapshot_take(c);
	if (under == NULL) {
		c->rule = NULL;
		c->instruction = NULL;
		respond(c, REASON_HOST_NOT_ALLOWED); /* never expected: fail closed */
		return;
	}
	if (conn_quarantined(c)) {
		c->tier = TIER_DENY;
		c->rule = NULL;
		c->instruction = NULL;
		respond(c, REASON_QUARANTINED); /* an alert's action: until `sandbox release` */
		return;
	}
	uint64_t deciding_us = timer_now_us();
	e->ops->decide(c->snap->policy, under->profile, c->host, c->host_len, c->port, &v);
	latency_observe(&c->w->decisions.decide, timer_now_us() - deciding_us);
	c->tier = (uint8_t)v.tier;
	c->rule = v.rule;
	c->instruction = v.instruction;
	enum reason refusal = verdict_refusal(&v);
	if (refusal == REASON_NONE)
		refusal = rule_limits_refusal(c, &v);
	if (refusal == REASON_NONE)
		refusal = limits_refusal(c, &under->limits);
	c->session_tokens_taken = refusal == REASON_NONE;
	if (refusal != REASON_NONE) {
		rule_limit_release(c); /* a refused request holds no connection on its rule */
		c->answer_keeps_conn = refusal_keeps(c, req, refusal);
		respond(c, refusal);
		return;
	}
	if (verdict_placeholder_misdirected(c, &v)) {
		rule_limit_release(c);
		respond(c, REASON_PLACEHOLDER_MISDIRECTED);
		return;
	}
	/* However the client spelled an address, the one the rule allowed is connected to. */
	size_t ip_len = strlen(v.ip);
	if (ip_len > 0 && ip_len < sizeof(c->host)) {
		memcpy(c->host, v.ip, ip_len + 1);
		c->host_len = (uint8_t)ip_len;
	}
	if (conn_mode_start(c, req, &v))
		return;
	c->keep_alive = req->keep_alive;
	c->client_http10 = req->version_minor == 0;
	c->head_method = req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0;
	c->req_body = (uint8_t)req->body;
	c->req_left = req->content_length;
	memset(&c->req_chunks, 0, sizeof(c->req_chunks));
	uint64_t key = upstream_key(c->host, c->host_len, c->port) ^ (uint64_t)v.tier;
	if (c->ufd >= 0 && (req->is_connect || key != c->upstream_key || !(c->flags & F_REUSABLE)))
		close_slot(c, &c->ufd);
	c->flags &= (uint8_t)~F_REUSABLE;
	c->upstream_key = key;
	c->reused_upstream = c->ufd >= 0;
	/* The upstream the last request left open (only a mode that marks it reusable
	 * does, and only for a request of the same form, host, port and tier) is
	 * connected already: the mode goes on over it. */
	if (c->ufd >= 0) {
		AN_ASSERT(c->mode->connected != NULL);
		c->mode->connected(c);
		return;
	}
	if (c->mode->pooled != NULL && c->mode->pooled(c))
		return;
	resolve_start(c);
}

void head_parse(struct conn *c)
{
	struct http1_request req;
	enum reason why = REASON_BAD_REQUEST;

	if (c->front != NULL && c->front->head_prefix != NULL && !c->front->head_prefix(c))
		return;
	ssize_t n = http1_parse_request(c->head, c->head_fill, &req, &why);
	if (n == -EAGAIN)
		return;
	timer_disarm(c->w->timers, &c->timer);
	if (n < 0) {
		if (c->front != NULL && c->front->request_refused != NULL)
			c->front->request_refused(c);
		c->host_len = 0;
		c->method_len = 0;
		c->path_len = 0;
		c->port = 0;
		c->rule = NULL;
		c->instruction = NULL;
		c->tier = TIER_DENY;
		respond(c, why);
		return;
	}
	c->head_len = (uint32_t)n;
	c->early_off = 0;
	if (c->front != NULL && c->front->decide != NULL)
		c->front->decide(c, &req);
	else
		decide(c, &req);
}

static_assert(WORKER_HEAD_BUFFER_BYTES > LIMITS_HEAD_BYTES_MAX,
	      "a head buffer holds a head's worth and a byte");

uint32_t head_carry(struct conn *c)
{
	uint32_t from = c->head_len + c->early_off;
	uint32_t n = c->head_fill > from ? c->head_fill - from : 0;

	AN_ASSERT(c->head != NULL);
	memmove(c->head, c->head + from, n);
	c->head_fill = n;
	c->head_len = 0;
	c->early_off = 0;
	c->path_len = 0;
	/* One byte past the limit: http1_parse_request then knows a head too large. */
	while (c->early_count > 0 && c->head_fill <= LIMITS_HEAD_BYTES_MAX) {
		uint16_t bid;
		uint32_t off;
		uint32_t len = early_front(c, &bid, &off);
		uint32_t room = LIMITS_HEAD_BYTES_MAX + 1 - c->head_fill;
		uint32_t take = len < room ? len : room;
		memcpy(c->head + c->head_fill, ring_buf(conn_ring(c), bid) + off, take);
		c->head_fill += take;
		early_advance(c, take);
	}
	if (c->early_count > 0)
		AN_ASSERT(c->head_fill == LIMITS_HEAD_BYTES_MAX + 1);
	return c->head_fill;
}

/* ---- refusals --------------------------------------------------------- */

/*
 * Sends c->out_ptr/out_len in RESPOND (a refusal, or a fake answer in clear)
 * and keeps reading, so the client's unread bytes never reset the answer.
 */
void respond_send(struct conn *c)
{
	AN_ASSERT(c->out_ptr != NULL && c->out_len > 0);
	c->out_off = 0;
	c->state = ST_RESPOND;
	c->down.state = R_PRELUDE;
	prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, c->out_ptr, c->out_len);
	c->flags &= (uint8_t)~F_HEAD_STOP;
	if (head_recv_wanted(c) && (c->ops & op_bit(OP_HEAD_RECV)) == 0)
		head_recv_arm(c);
	timer_arm(c->w->timers, &c->timer, CONN_LINGER_MS * 2);
}

void respond(struct conn *c, enum reason why)
{
	respond_with(c, why, NULL);
}

void respond_private_address(struct conn *c, const struct sockaddr *sa)
{
	char address[INET6_ADDRSTRLEN];
	char detail[128];
	char instruction[320];
	const void *bytes = sa->sa_family == AF_INET6
				? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
				: (const void *)&((const struct sockaddr_in *)sa)->sin_addr;

	if (inet_ntop(sa->sa_family, bytes, address, sizeof(address)) == NULL) {
		respond(c, REASON_PRIVATE_ADDRESS);
		return;
	}
	const char *class = c->w->e->ops->address_class(sa);
	deny_private_address_text(c->host, c->host_len, address, class, detail, sizeof(detail),
				  instruction, sizeof(instruction));
	const struct refusal_extra x = { .detail = detail,
					 .instruction = instruction,
					 .address = address,
					 .address_class = class };
	respond_with(c, REASON_PRIVATE_ADDRESS, &x);
}

void respond_with(struct conn *c, enum reason why, const struct refusal_extra *x)
{
	static const struct refusal_extra none = { 0 };
	const char *detail = (x != NULL ? x : &none)->detail;
	const char *reply = (x != NULL ? x : &none)->reply;
	uint32_t reply_len = (x != NULL ? x : &none)->reply_len;
	struct worker *w = c->w;
	char audit_id[AUDIT_ID_BYTES];
	char sandbox_id[CONFIG_SANDBOX_ID_BYTES_MAX];

	if (c->state == ST_CLOSING)
		return;
	if (c->ops & op_bit(dir_op(DIR_DOWN, ROP_SEND))) {
		conn_close(c); /* already answering: the client sees the connection end */
		return;
	}
	AN_ASSERT(why != REASON_NONE);
	c->reason = (uint8_t)why;
	/* Only decide() keeps a refused conn, and only for a limit (refusal_keeps). */
	c->answer_keeps_conn = c->answer_keeps_conn &&
			       (why == REASON_RATE_LIMITED || why == REASON_CONCURRENCY_LIMITED);
	w->stats.denied++;
	audit_decision_detail(c, false, reason_status(why), detail);
	audit_format_id(w->e->audit, c->decision_id, audit_id);
	if (c->ufd >= 0)
		upstream_close(c);
	if (c->front != NULL && c->front->client_speaks_tls) {
		if (c->state == ST_TERM) {
			conn_close(c); /* the session runs: a plaintext record would break it */
			return;
		}
		reply = (const char *)reply_tls_refused;
		reply_len = sizeof(reply_tls_refused);
	}
	if (reply != NULL) {
		c->answer_keeps_conn = false;
		c->out_ptr = reply;
		c->out_len = reply_len;
		respond_send(c);
		return;
	}
	/* Early-data buffers may still be under a send: they go when the conn does.
	 * Likewise the origin-form head in c->out: then the answer goes in c->resp. */
	char **buf = (c->ops & op_bit(dir_op(DIR_UP, ROP_SEND))) ? &c->resp : &c->out;
	if (*buf == NULL)
		*buf = pool_take(&w->heads);
	struct deny_info d = {
		.reason = why,
		.rule = c->rule,
		.instruction =
		    x != NULL && x->instruction != NULL ? x->instruction : c->instruction,
		.address = x != NULL ? x->address : NULL,
		.address_class = x != NULL ? x->address_class : NULL,
		.host = c->host_len ? c->host : NULL,
		.host_len = c->host_len,
		.port = c->port,
		.sandbox = conn_sandbox_id(c, sandbox_id),
		.audit_id = audit_id,
		.retry_after_s = refusal_retry_after_s(c, why),
		.keep_alive = c->answer_keeps_conn,
	};
	ssize_t n = *buf ? deny_format(&d, *buf, WORKER_HEAD_BUFFER_BYTES) : -ENOMEM;
	if (n > 0) {
		c->out_ptr = *buf;
		c->out_len = (uint32_t)n;
	} else {
		c->out_ptr = reply_overloaded;
		c->out_len = sizeof(reply_overloaded) - 1;
		c->answer_keeps_conn = false; /* it says Connection: close */
	}
	respond_send(c);
}

/* Our answer is out: shut our side and drain the client until EOF or timeout. */
void linger_start(struct conn *c)
{
	c->state = ST_LINGER;
	timer_arm(c->w->timers, &c->timer, CONN_LINGER_MS);
	bool parkable = c->mode != NULL && c->mode->parkable != NULL && c->mode->parkable(c);
	if (c->ufd >= 0 && !parkable)
		upstream_close(c); /* a parkable one waits for the conn's end: mode->end */
	if (c->ops & op_bit(dir_op(DIR_DOWN, ROP_SHUT)))
		return;
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(DIR_DOWN, ROP_SHUT));
	io_uring_prep_shutdown(sqe, c->cfd, SHUT_WR);
	sqe->flags |= IOSQE_FIXED_FILE;
	c->flags &= (uint8_t)~F_HEAD_STOP;
	if (c->flags & F_CLIENT_EOF)
		return; /* nothing left to drain: closed when the shutdown completes */
	if (head_recv_wanted(c) && (c->ops & op_bit(OP_HEAD_RECV)) == 0)
		head_recv_arm(c);
}

/* An answer that keeps the conn (a fake answer in clear, or a limit's 429: refusal_keeps)
 * is out: the conn goes back to reading the next head. */
static void head_read_next(struct conn *c)
{
	AN_ASSERT(c->state == ST_RESPOND && c->answer_keeps_conn);
	if ((c->flags & F_CLIENT_EOF) || c->head_fill < c->head_len) {
		linger_start(c);
		return;
	}
	uint32_t rest = head_carry(c);
	c->answer_keeps_conn = false;
	c->answer_body = NULL;
	c->answer_body_len = 0;
	c->rule = NULL;
	c->state = ST_HEAD;
	c->down.state = R_IDLE;
	if (rest > 0)
		head_deadline_arm(c);
	else
		timer_arm(c->w->timers, &c->timer, conn_next_request_ms(c));
	if (head_recv_wanted(c) && (c->ops & op_bit(OP_HEAD_RECV)) == 0)
		head_recv_arm(c);
	if (rest > 0)
		head_parse(c);
}

/* Relay-kind completions outside a mode's state: an answer's writes (RESPOND) and LINGER. */
static void answer_io(struct conn *c, int dir, uint32_t rop, int res)
{
	if (c->state == ST_RESPOND && dir == DIR_DOWN && rop == ROP_SEND) {
		if (res <= 0) {
			conn_close(c);
			return;
		}
		if (out_sent(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, c->out_ptr, res))
			return;
		if (c->answer_body_len > 0 && c->out_ptr != c->answer_body) {
			/* An answer with a body of its own (a fake one in clear): it follows. */
			c->out_ptr = c->answer_body;
			c->out_len = c->answer_body_len;
			c->out_off = 0;
			prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, c->out_ptr, c->out_len);
			return;
		}
		if (c->answer_keeps_conn)
			head_read_next(c);
		else
			linger_start(c);
		return;
	}
	if (c->state == ST_LINGER && rop == ROP_SHUT) {
		if (res < 0 || (c->flags & F_CLIENT_EOF))
			conn_close(c);
		return;
	}
	/* Anything else is a leftover of an abandoned relay: its resources are
	 * released with the conn. */
}

/* ---- dispatch --------------------------------------------------------- */

static void on_op(struct conn *c, uint32_t op, int res, uint32_t cqe_flags);

void conn_on_cqe(struct conn *c, uint32_t op, int res, uint32_t cqe_flags)
{
	if (op == OP_HEAD_RECV) {
		on_head_recv(c, res, cqe_flags);
	} else if (op == OP_CANCEL) {
		AN_ASSERT(c->cancels > 0);
		c->cancels--;
	} else {
		on_op(c, op, res, cqe_flags);
	}
	/* The one place a conn is freed: after its last completion was handled. */
	if (c->state == ST_CLOSING)
		conn_maybe_free(c);
}

static void on_op(struct conn *c, uint32_t op, int res, uint32_t cqe_flags)
{
	AN_ASSERT(op < CONN_OP_COUNT);
	AN_ASSERT(c->ops & op_bit(op));
	c->ops &= ~op_bit(op);
	switch (op) {
	case OP_SOCKET:
		upstream_on_socket(c, res);
		break;
	case OP_CONNECT:
		upstream_on_connect(c, res);
		break;
	case OP_CONNECT_TIMEOUT:
		if (c->connect_retry && c->state == ST_CONNECT) {
			c->connect_retry = false;
			connect_next(c);
		}
		break;
	case OP_NODELAY_U:
	case OP_NODELAY_C:
		if (res < 0)
			log_debug("setsockopt(TCP_NODELAY): %s", strerror(-res));
		break;
	case OP_PEERCRED:
		peer_known(c, res);
		break;
	default: {
		int dir = (int)((op - OP_DIR_BASE) / OP_DIR_COUNT);
		uint32_t rop = (op - OP_DIR_BASE) % OP_DIR_COUNT;
		struct relay *r = relay_of(c, dir);
		if (rop == ROP_RECV && res > 0) {
			AN_ASSERT(cqe_flags & IORING_CQE_F_BUFFER);
			r->bid = (uint16_t)(cqe_flags >> IORING_CQE_BUFFER_SHIFT);
			r->holds_buf = true;
			ring_buf_taken(conn_ring(c), r->bid);
		}
		/* A splice that finished after the tunnel did left its bytes in the
		 * pipe: counted, the pipe goes back dirty and is never handed to
		 * another connection with them. */
		if (c->state != ST_TUNNEL && rop == ROP_SPLICE_IN && res > 0 && r->pipe != NULL)
			r->pipe_bytes += (uint32_t)res;
		if (conn_in_mode(c))
			c->mode->io(c, dir, rop, res, cqe_flags);
		else
			answer_io(c, dir, rop, res);
		break;
	}
	}
}

void conn_on_timer(struct conn *c)
{
	struct worker *w = c->w;

	switch (c->state) {
	case ST_HEAD:
		if (c->head_fill == 0) {
			conn_close(c); /* idle keep-alive, or a client that never spoke */
		} else {
			if (c->front != NULL && c->front->request_refused != NULL)
				c->front->request_refused(c);
			respond(c, REASON_REQUEST_TIMEOUT);
		}
		break;
	case ST_RESOLVE:
		respond(c, REASON_DNS_FAILED);
		break;
	case ST_TUNNEL:
	case ST_FORWARD:
	case ST_TERM: {
		if (c->mode->timer != NULL && c->mode->timer(c))
			break;
		uint64_t idle_ms =
		    conn_awaits_request(c) ? conn_next_request_ms(c) : w->e->cfg->idle_timeout_ms;
		uint64_t quiet = w->now_ms - c->active_ms;
		if (quiet >= idle_ms)
			conn_close(c);
		else
			timer_arm(w->timers, &c->timer, (uint32_t)(idle_ms - quiet));
		break;
	}
	case ST_CONNECT:
		break; /* the linked timeout bounds the connect */
	default:
		conn_close(c);
		break;
	}
	conn_maybe_free(c);
}

void conn_on_buffers(struct conn *c)
{
	c->flags &= (uint8_t)~F_NOBUFS;
	if (c->state == ST_CLOSING) {
		conn_maybe_free(c);
		return;
	}
	if (head_recv_wanted(c) && (c->ops & op_bit(OP_HEAD_RECV)) == 0)
		head_recv_arm(c);
	if (conn_in_mode(c))
		c->mode->buffers(c);
	conn_maybe_free(c);
}
