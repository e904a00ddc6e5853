/*
 * What core/conn.c, the connection spine, and the files of its modes share,
 * and nothing else includes (the worker and the tests see core/conn.h): the
 * states, operation kinds and flags of a conn, the helpers that put its
 * operations on the ring, and the functions one file calls in another.
 *
 *   core/conn.c     the spine: lifetime, accept, request head, deciding,
 *                   resolving and connecting, refusals and linger, dispatch;
 *   core/record.c   its audit records: a decision a request, a close at the end;
 *   core/modes.c    which mode serves a conn, at its accept and its decision;
 *   core/tunnel.c   CONNECT passthrough: the 200, early data, the splice or
 *                   copy relay both ways, half-close;
 *   core/forward.c  absolute-form forwarding: the head rewritten in origin
 *                   form, the bodies' framing followed, upstream reuse;
 *   core/tlsterm.c  the agent's TLS terminated here (core/term.h): the
 *                   ciphertext queue, the session pump, refusals inside it;
 *   core/fake.c     the fake-response tier: the rule's answers, in TLS and
 *                   in clear;
 *   core/inject.c   the credential-inject tier: the swap, the request body,
 *                   the response relay, secret masking, upstream pooling;
 *   core/gateway.c  the ingress gateway: routing by path, the agent's head,
 *                   and the public listener's TLS front relay.
 *
 * Every function here runs on the conn's worker thread, takes a live conn
 * (not freed: its ops, cancels or lookup keep it) and returns nothing it
 * allocated; a conn's buffers, pipes and slots stay the conn's.
 */
#ifndef AN_CORE_CONN_INT_H
#define AN_CORE_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/conn.h"
#include "core/engine.h"
#include "core/http1.h"
#include "core/reason.h"
#include "core/snapshot.h"
#include "core/ring.h"
#include "core/term.h"
#include "core/ud.h"
#include "core/verdict.h"
#include "core/worker-t.h"

enum conn_state {
	ST_HEAD = 0,
	ST_RESOLVE,
	ST_CONNECT,
	ST_TUNNEL,
	ST_FORWARD,
	ST_RESPOND,
	ST_LINGER,
	ST_TERM, /* the client's TLS terminated here: a fake-response tunnel */
	ST_CLOSING,
};

/* Operation kinds; the up/down relay kinds are OP_DIR_BASE + dir * OP_DIR_COUNT + kind. */
enum conn_op {
	OP_HEAD_RECV = 0,
	OP_SOCKET,
	OP_CONNECT,
	OP_CONNECT_TIMEOUT,
	OP_NODELAY_U,
	OP_NODELAY_C,
	OP_PEERCRED,
	OP_CANCEL,
	OP_DIR_BASE,
};

enum relay_op {
	ROP_POLL = 0,
	ROP_SPLICE_IN,
	ROP_SPLICE_OUT,
	ROP_RECV,
	ROP_SEND,
	ROP_SHUT,
	OP_DIR_COUNT,
};

static_assert(OP_DIR_BASE + 2 * OP_DIR_COUNT <= CONN_OP_COUNT, "op codes must fit");
static_assert(CONN_OP_COUNT <= 32, "ops is a 32-bit mask");

enum relay_state {
	R_IDLE = 0,
	R_PRELUDE,      /* sending what must precede the relay (200 reply, early data) */
	R_FIRST_FLIGHT, /* up: reading the client's first bytes, held until checked */
	R_POLL,
	R_SPLICE_IN,
	R_SPLICE_OUT,
	R_RECV,
	R_SEND,
	R_SHUT,
	R_DONE,
};

enum { DIR_UP = 0, DIR_DOWN = 1 };

/* c->flags */
#define F_TCP_CLIENT   0x01u /* accepted on the TCP listener */
#define F_HEAD_STOP    0x02u /* do not re-arm the head receive */
#define F_CLIENT_EOF   0x04u /* the client half-closed before the relay started */
#define F_REUSABLE     0x08u /* the open upstream may serve the next request */
#define F_DNS          0x10u /* a lookup is in flight: do not free */
#define F_NO_KEEPALIVE 0x20u /* close after this exchange */
#define F_NOBUFS       0x40u /* on the worker's nobufs list */
#define F_UNIX_UP      0x80u /* the local upstream is a Unix socket, in c->addrs (conn_unix) */

/*
 * A connection mode: what runs a conn's exchange once its request is decided,
 * behind one table, so that the spine names no mode (nginx's upstream
 * process_header, HAProxy's mux_ops). One const instance per mode, in the
 * mode's file; c->mode is set where the mode is chosen (core/modes.c,
 * ingress_decide) or handed over (a gateway request upgraded to a tunnel),
 * always before the conn enters <state>. The spine calls the hooks only while
 * c->state is the mode's <state> (conn_in_mode), connected only from
 * ST_CONNECT, end at any state. A NULL hook means the spine's own behaviour,
 * as said for each. Adding a mode: its instance below, the state it runs in,
 * and a case in core/modes.c.
 */
struct conn_mode {
	uint8_t state; /* ST_TUNNEL, ST_FORWARD or ST_TERM */
	/* The upstream is connected (c->ufd): start relaying. NULL: the mode never connects. */
	void (*connected)(struct conn *c);
	/* Completion <rop> of relay <dir>, result <res> and flags <cqe_flags>, in <state>. */
	void (*io)(struct conn *c, int dir, uint32_t rop, int res, uint32_t cqe_flags);
	/* Provided buffers are back: re-arms the receives that ran out, in <state>. */
	void (*buffers)(struct conn *c);
	/* ST_TERM modes: moves the plaintext as far as it goes (term_pump's step); else NULL. */
	void (*pump)(struct conn *c);
	/* The head receive's bytes, provided buffer <bid> of <len>, in <state>: takes the
	 * buffer. NULL: they are queued as early data, then early is called. */
	void (*client_data)(struct conn *c, uint16_t bid, uint32_t len);
	/* Early data was queued, or the head receive ended, in <state>: moves it on. */
	void (*early)(struct conn *c);
	/* The head receive saw the client's EOF in <state>. NULL: the relay will see it. */
	void (*client_eof)(struct conn *c);
	/* The conn's timer fired in <state>: true when it was the mode's own (the spine's
	 * idle check is skipped). NULL: the timer is always the idle timeout. */
	bool (*timer)(struct conn *c);
	/* Whether the upstream outlives the answer (end keeps it): linger leaves c->ufd. */
	bool (*parkable)(const struct conn *c);
	/* Before resolving an allowed request: takes a pooled upstream for it and goes on;
	 * true when it took one. NULL: every request resolves and connects. */
	bool (*pooled)(struct conn *c);
	/* Any state: the conn ends, no op of its own in flight, its slots still open. */
	void (*end)(struct conn *c);
	/* ST_TERM modes: nothing of a request has come and no answer is under way (a
	 * drain closes such a conn once quiet: conn_drain). NULL: never so. */
	bool (*awaiting_request)(const struct conn *c);
};

/*
 * A connection front: what a listener's conns do differently from the first
 * byte on, whatever mode runs their exchanges: the gateway's (the PROXY
 * header, routing by path, one record per request, the agent's socket as the
 * upstream) and the TLS front of its public listener. Set at the accept
 * (conn_mode_accepted) and never changed; NULL for a sandbox's listener,
 * whose conns are the spine's. Every hook is called at any state; NULL means
 * the spine's own behaviour, as said for each.
 */
struct conn_front {
	/* The conn ends, after its mode's end: no op of its own in flight, its slots open. */
	void (*end)(struct conn *c);
	/* The conn is accepted and set up; starts it instead of reading a head. */
	void (*accepted)(struct conn *c);
	/* The head buffer holds the client's next bytes; consumes what comes before a
	 * head. True when a head may follow; false to wait, or closed. */
	bool (*head_prefix)(struct conn *c);
	/* Decides parsed request <req> instead of the spine's decide. */
	void (*decide)(struct conn *c, const struct http1_request *req);
	/* A request is refused before it is decided (a bad or late head). */
	void (*request_refused)(struct conn *c);
	/* No address of the upstream is left to try; answers or closes. */
	void (*unreachable)(struct conn *c);
	/* the sandbox's id for answers and records, in <buf>
	 * (CONFIG_SANDBOX_ID_BYTES_MAX) or static. NULL: the accepting sandbox's. */
	const char *(*sandbox_id)(const struct conn *c, char *buf);
	/* Writes the conn's close record instead of the spine's. */
	void (*close_record)(struct conn *c);
	/* A request's decision writes no record; close_record writes its one. */
	bool record_at_end;
	/* Its client speaks TLS before anything, so no HTTP answer can reach it: a
	 * refusal (audited as any) is a TLS alert before the session runs, a close
	 * once it does (respond_with). */
	bool client_speaks_tls;
};

/* core/modes.c: which mode serves a conn. */
/* A conn accepted on <l>: sets a gateway listener's conn's front (and the TLS front's
 * mode); false for a sandbox's listener, whose conns have none. */
bool conn_mode_accepted(struct conn *c, const struct worker_listener *l);
/*
 * Request <req> is allowed by <v>: sets the mode that serves it (c->mode and
 * its tier's state). True when it was answered here (a fake answer, or a
 * refusal through respond); false when the spine goes on to the upstream.
 */
bool conn_mode_start(struct conn *c, const struct http1_request *req, const struct verdict *v);

/* Whether <c> runs in its mode's state, where the mode handles its relays' completions. */
static inline bool conn_in_mode(const struct conn *c)
{
	if (c->state != ST_TUNNEL && c->state != ST_FORWARD && c->state != ST_TERM)
		return false;
	AN_ASSERT(c->mode != NULL);
	AN_ASSERT(c->mode->state == c->state);
	return true;
}

/* The answer to an allowed CONNECT, before the tunnel or the terminated session. */
static const char reply_established[] = "HTTP/1.1 200 Connection Established\r\n\r\n";

/* Closes both sides; the debug log names the line that decided it. */
void conn_close_at(struct conn *c, int line);
#define conn_close(c) conn_close_at((c), __LINE__)

/* ---- operations on the ring (inline: the relay's hot path) --------------- */

static inline struct ring *conn_ring(struct conn *c)
{
	return &c->w->ring;
}

static inline uint32_t op_bit(uint32_t op)
{
	AN_DASSERT(op < CONN_OP_COUNT);
	return 1u << op;
}

static inline uint32_t dir_op(int dir, uint32_t rop)
{
	return OP_DIR_BASE + (uint32_t)dir * OP_DIR_COUNT + rop;
}

static inline struct relay *relay_of(struct conn *c, int dir)
{
	return dir == DIR_UP ? &c->up : &c->down;
}

static inline int relay_src(const struct conn *c, int dir)
{
	return dir == DIR_UP ? c->cfd : c->ufd;
}

static inline int relay_dst(const struct conn *c, int dir)
{
	return dir == DIR_UP ? c->ufd : c->cfd;
}

static inline struct io_uring_sqe *conn_sqe(struct conn *c, uint32_t op)
{
	AN_ASSERT((c->ops & op_bit(op)) == 0);
	struct io_uring_sqe *sqe = ring_sqe(conn_ring(c));
	c->ops |= op_bit(op);
	io_uring_sqe_set_data64(sqe, ud_encode(c, op));
	return sqe;
}

static inline void prep_send(struct conn *c, uint32_t op, int fd, const void *p, size_t len)
{
	struct io_uring_sqe *sqe = conn_sqe(c, op);
	io_uring_prep_send(sqe, fd, p, len, MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE;
}

static inline void prep_recv_select(struct conn *c, uint32_t op, int fd)
{
	struct io_uring_sqe *sqe = conn_sqe(c, op);
	io_uring_prep_recv(sqe, fd, NULL, conn_ring(c)->buf_bytes, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = RING_BGID;
}

/*
 * <res> more bytes of the outgoing message at <base> (c->out_len of them)
 * went out; sends the rest on <fd> as <op>. True while some is left.
 */
static inline bool out_sent(struct conn *c, uint32_t op, int fd, const char *base, int res)
{
	AN_ASSERT(res >= 0);
	AN_ASSERT(c->out_off + (uint32_t)res <= c->out_len);
	c->out_off += (uint32_t)res;
	if (c->out_off == c->out_len)
		return false;
	prep_send(c, op, fd, base + c->out_off, c->out_len - c->out_off);
	return true;
}

/* The engine's TLS termination table (core/term.h), NULL without TLS support. */
static inline const struct term_ops *conn_term(const struct conn *c)
{
	return c->w->e->term;
}

/* ---- the spine: core/conn.c ---------------------------------------------- */

/*
 * Closes a direct descriptor. The close references no conn memory, so it is
 * not tracked: its completion is skipped on success, and a failure (which
 * would mean the slot was already empty) arrives with user_data 0.
 */
void close_slot(struct conn *c, int32_t *slot);
/*
 * Closes the upstream's slot (c->ufd, which must be open). With
 * c->upstream_reset, in a reset: SO_LINGER 0 first, hard-linked to the close,
 * so an upstream holding a request cut short (the agent left mid-body, or the
 * body was refused) sees the connection fail at once, never a FIN it could
 * read as the body's end after reading on through what was buffered.
 */
void upstream_close(struct conn *c);
/*
 * While a request's body goes up (c->req_done false), a one-shot poll on the
 * client for its hangup, POLLHUP or POLLERR: its socket closed or reset, not
 * only its writing half, which a client may shut once its body is sent. A
 * relay reads the client only once the upstream took what went, so without it
 * an agent that leaves while a slow upstream holds a send would be noticed only
 * when the upstream had read on. Its completion comes to the mode's io as the
 * up direction's ROP_POLL (which forwarding and the terminated tiers have no
 * other use for); hangup_seen(res) says whether the client left, and the mode
 * then resets its upstream (c->upstream_reset) and closes. Cancelled with the
 * conn; a mode that goes on to another request waits for its end first
 * (forwarding's request_finish: a CONNECT may follow).
 */
void hangup_watch(struct conn *c);
bool hangup_seen(int res);
/* The conn's sandbox; <c> must have one (not WORKER_NO_SANDBOX). */
const struct engine_sandbox *conn_sandbox(const struct conn *c);
/* The key of upstream <host>/<len>:<port> in the worker's reuse lists. */
uint64_t upstream_key(const char *host, size_t len, uint16_t port);
/* The id of the conn's sandbox as a string, in <buf> (CONFIG_SANDBOX_ID_BYTES_MAX) or static. */
const char *conn_sandbox_id(const struct conn *c, char *buf);

/* Audit records (core/record.c). */

/* Formats address <a> as "ip:port", "[ip6]:port" or "unix:path" into <out> (<cap> bytes). */
void addr_format(const union conn_addr *a, char *out, size_t cap);
/* Fills what every record of <c> carries: ids, sandbox, tier, reason, method, host, rule. */
void record_common(const struct conn *c, struct audit_record *rec);
/* Writes the decision record for the current request; sets c->decision_id. */
void audit_decision(struct conn *c, bool allowed, uint16_t status);
/* Counts a decision of <w> for the metrics: allowed on <tier>, or refused <why>. */
void decision_count(struct worker *w, bool allowed, enum tier tier, enum reason why);
/* The same, with <detail> (NULL: none) in the record: what a reason code alone
 * does not say (the server name a tunnel's client sent, say). Never a secret. */
void audit_decision_detail(struct conn *c, bool allowed, uint16_t status, const char *detail);
/* Writes the record that ends <c> (its front's own, if it has one): bytes each way,
 * duration, the last request's outcome. Once, from the conn's free. */
void conn_close_record(struct conn *c);
/* Whether a request is refused 503 audit_unavailable now: the audit log cannot be
 * written (audit_failing) and the policy says so (daemon.audit_failure: refuse). */
bool audit_refuses(const struct conn *c);

/*
 * Queues provided buffer <bid> of <len> bytes behind the conn's early data
 * (the conn holds it until early_advance has read it whole). Never fails:
 * the chain is bounded by the ring's buffers.
 */
void early_push(struct conn *c, uint16_t bid, uint32_t len);
/* The unread bytes of the oldest early buffer: their length; *<bid> and *<off> say where. */
uint32_t early_front(const struct conn *c, uint16_t *bid, uint32_t *off);
/* Marks <n> bytes of the oldest early buffer read; a buffer read whole goes back. */
void early_advance(struct conn *c, uint32_t n);
/* Gives back what relay <r> holds: its provided buffer and its pipe (a pipe with bytes
 * left in it is replaced by a fresh one). */
void relay_release(struct conn *c, struct relay *r);
/* Gives the head, out and response buffers back to the worker's pool. */
void buffers_release(struct conn *c);

/* Arms the multishot receive of the request head on the client socket. */
void head_recv_arm(struct conn *c);
/* Stops the head receive for good (F_HEAD_STOP), cancelling the one in flight. */
void head_recv_stop(struct conn *c);
/* Arms the head deadline (head_ms) for a head whose first byte is here or was at the accept. */
void head_deadline_arm(struct conn *c);
/* Whether the head receive should run in the conn's state. */
bool head_recv_wanted(const struct conn *c);
/* Waits on the worker's nobufs list: conn_on_buffers re-arms the receive. */
void nobufs_wait(struct conn *c);
/* Parses the head buffer; on a complete head, decides. */
void head_parse(struct conn *c);
/*
 * Moves what the client sent past the request just served (early_peek's
 * bytes: the rest of the head buffer, then the early queue) to the front of
 * the head buffer for the next head_parse, up to LIMITS_HEAD_BYTES_MAX + 1
 * bytes (enough to find a head or to know it too large); the rest stays
 * queued behind it, in order. Returns the bytes now in the head buffer.
 */
uint32_t head_carry(struct conn *c);

/* Copies what the request's record and answer need (method, host, port, path) into <c>. */
void request_copy(struct conn *c, const struct http1_request *req);
/*
 * Points the request about to be decided at the worker's snapshot and
 * returns its sandbox under it; NULL when the snapshot does not know it.
 */
const struct snapshot_sandbox *snapshot_take(struct conn *c);
/* Whether <c>'s sandbox is in an alert's quarantine (core/watch.h): its requests are refused. */
bool conn_quarantined(const struct conn *c);
/* Decides request <req> (proxy form) against the policy: refuses, or starts its tier. */
void decide(struct conn *c, const struct http1_request *req);
/*
 * The rate limits on a request inside a terminated session (fake, inject),
 * which decide() never sees: a token of the session's rule (its entry, taken
 * at the CONNECT) and of the sandbox's bucket. The CONNECT took those of the
 * session's first request, so a session of one request costs one token, as
 * a request in clear does, and a flood of handshakes is limited too. Sets
 * c->retry_after_s; REASON_RATE_LIMITED or REASON_NONE.
 */
enum reason session_limits_refusal(struct conn *c);

/* The Retry-After of <c>'s refusal <why>: c->retry_after_s, else 1 for a 503, else none. */
uint32_t refusal_retry_after_s(const struct conn *c, enum reason why);

/* What a request that arrives while the worker drains (engine_drain) gets. */
enum drain_answer {
	DRAIN_NONE = 0, /* no drain: served as ever */
	DRAIN_CLOSE,    /* served, its answer closing the conn: a successor takes the next one */
	DRAIN_REFUSE,   /* answered 503 daemon_stopping: no successor takes its listener */
};
/* <c>'s new request's answer under a drain: by whether its listener is handed on. */
enum drain_answer drain_answer(const struct conn *c);
/*
 * Decides <req> of <c> under a drain: returns <req>, or <closing> (a copy of it
 * that says Connection: close) for DRAIN_CLOSE, or NULL once <c> was refused
 * daemon_stopping (DRAIN_REFUSE).
 */
const struct http1_request *drain_request(struct conn *c, const struct http1_request *req,
					  struct http1_request *closing);

/* ---- core/watch.c: the anomaly detectors ---------------------------------- */

/* Feeds <c>'s decision (allowed, or refused c->reason) to its sandbox's detectors. */
void watch_decision(struct conn *c, bool allowed);
/*
 * Feeds what the agent sent on <c> since the last call to its sandbox's upload
 * detector: whole KiB once a second while it is open (watch_uploads_sweep), so
 * a tunnel that stays open is counted as it goes, and the rest <at_end>.
 */
void watch_upload(struct conn *c, bool at_end);

/* ---- core/upstream.c: resolving and connecting --------------------------- */

/*
 * Resolves the allowed request's host (or the local rule's upstream) and
 * connects to the first address the policy permits; refuses when none.
 */
void resolve_start(struct conn *c);
/* The Unix socket address of a local upstream, stored in c->addrs (F_UNIX_UP). */
struct sockaddr_un *conn_unix(struct conn *c);
/* Opens a socket to the next address; none left: refuses (or closes a TLS front conn). */
void connect_next(struct conn *c);
/* The completions of connect_next's socket and of its connect (OP_SOCKET, OP_CONNECT). */
void upstream_on_socket(struct conn *c, int res);
void upstream_on_connect(struct conn *c, int res);

/* ---- core/conn.c, for the files above --------------------------------------- */

/* Sets TCP_NODELAY on <fd> (an op of its own, <op>: OP_NODELAY_C or OP_NODELAY_U). */
void set_nodelay(struct conn *c, uint32_t op, int fd);
/* Frees <c> when it is CLOSING with nothing left in flight; else nothing. */
void conn_maybe_free(struct conn *c);

/*
 * Sends c->out_ptr/out_len in RESPOND (a refusal, or a fake answer in clear)
 * and keeps reading, so the client's unread bytes never reset the answer.
 */
void respond_send(struct conn *c);
/* Refuses the request for <why>: audit record, deny-contract answer, then linger. */
void respond(struct conn *c, enum reason why);
/* What a refusal says beyond its reason (respond_with); every field may be NULL. */
struct refusal_extra {
	const char *detail; /* the decision record's detail */
	const char *reply;  /* static: what the client gets instead of the deny contract's
				  * answer (a TLS alert where it speaks TLS, say); it closes */
	uint32_t reply_len;
	const char *instruction; /* instead of the rule's or the reason's */
	const char *address;     /* private_address: the address refused and its class */
	const char *address_class;
};
/* respond, with <x>'s detail, reply, instruction and address. */
void respond_with(struct conn *c, enum reason why, const struct refusal_extra *x);
/*
 * Refuses <c>'s request private_address, naming <sa>, the first address the
 * policy refused, and its class in the record's detail, the answer's body and
 * its instruction (the host is one the policy allows: nothing is learned of
 * another).
 */
void respond_private_address(struct conn *c, const struct sockaddr *sa);
/* Our answer is out: shut our side and drain the client until EOF or timeout. */
void linger_start(struct conn *c);

/* ---- the modes: what the spine and the other modes call ------------------ */

/* core/tunnel.c */
/* The CONNECT tunnel and an upgraded gateway request: ST_TUNNEL. */
extern const struct conn_mode tunnel_mode;
/* The next early-data slice to forward: its length (0: none), *<p> where. */
uint32_t early_peek(struct conn *c, const char **p);
/* Marks <n> early bytes consumed (sent, or counted as body). */
void early_consume(struct conn *c, uint32_t n);
/*
 * Starts the relay both ways (core/tunnel.c): the <len> bytes at <reply> (the
 * CONNECT's 200, the gateway's 101 head) go to the client first, then each
 * side's bytes to the other. The caller has set the state, mode and timer.
 */
void tunnel_relay_start(struct conn *c, const char *reply, uint32_t len);

/* core/forward.c */
/* Absolute-form forwarding and the gateway's requests: ST_FORWARD. */
extern const struct conn_mode forward_mode;
/* The absolute-form request is connected: its origin-form head goes up. */
void forward_start(struct conn *c);
/*
 * Rewrites the response head <resp>, the <n> bytes at <at> in c->resp, as
 * the proxy forwards it (the gateway's as ingress_response_head writes it);
 * c->resp_fill grows by at most WORKER_HEAD_REWRITE_BYTES. Returns the new
 * head's length, or 0 for a gateway head that would grow more (its added
 * field on a head at the limits): the caller answers 502.
 */
uint32_t resp_head_rewrite(struct conn *c, const struct http1_response *resp, uint32_t at,
			   uint32_t n, bool keep);

/* core/tlsterm.c */
/*
 * The completions of the agent's side of a terminated session (<dir>, <rop>,
 * <res>): the 200 and ciphertext sent, ciphertext received. False when the
 * completion is not one of those: the upstream side's, the mode's own.
 */
bool term_io(struct conn *c, int dir, uint32_t rop, int res);
/* The CONNECT is allowed on a terminated tier: answer 200, then terminate its TLS. */
void term_start(struct conn *c);
/* Moves the sessions as far as they go without the network, then sends and receives. */
void term_pump(struct conn *c);
/* Sends what the session has for the client; once a close is out, lingers. */
void term_flush(struct conn *c);
/* The session ended (<st> CLOSED or ERROR): audit why, queue close_notify. */
void term_end(struct conn *c, enum term_status st);
/*
 * The stream the agent reads was cut by its upstream (a reset): what the
 * session holds goes out, then the connection closes with no close_notify
 * (a reset on TCP), so that the agent's TLS reads a truncation, not the end.
 */
void term_abort(struct conn *c);
/* The answer to a request refused inside the session; the conn closes after it. */
void term_refuse(struct conn *c, enum reason why);
/* The terminated session waits for its next request: no answer, body or head bytes pending. */
bool term_awaiting_request(const struct conn *c);
/* Drops <n> bytes from the front of the plaintext in the head buffer. */
void term_drop(struct conn *c, uint32_t n);
/* Takes the next request out of the plaintext; true when an answer or refusal started. */
bool term_request(struct conn *c);
/* Writes the answer's next plaintext into the session. */
enum term_status term_write_answer(struct conn *c);
/* Reads plaintext into the head buffer. */
enum term_status term_read_request(struct conn *c);
/* The agent's ciphertext, <len> bytes in provided buffer <bid>: queued, then fed. */
void term_ciphertext(struct conn *c, uint16_t bid, uint32_t len);
/* Receives the agent's next ciphertext, unless some still waits or it ended. */
void term_recv_arm(struct conn *c);
/* The agent closed its side: the session sees the end. */
void term_eof(struct conn *c);
/* The head receive's last bytes, <len> in buffer <bid>, once a session began: ciphertext. */
void term_client_data(struct conn *c, uint16_t bid, uint32_t len);

/* core/fake.c */
/* The fake tier inside a CONNECT: ST_TERM, never connected. */
extern const struct conn_mode fake_mode;
/* Frames the rule's answer to <req> (origin form) in c->out, and audits it. */
void term_answer(struct conn *c, const struct http1_request *req);
/* An absolute-form request to a fake host: the rule's answer in clear, through RESPOND. */
void fake_plain(struct conn *c, const struct http1_request *req);

/* core/inject.c */
/* The credential-inject tier: ST_TERM, with a TLS session of its own upstream. */
extern const struct conn_mode inject_mode;
/*
 * Whether head <head>/<len> carries a placeholder of the sandbox where its
 * rule (<own>, NULL: none) does not send it; counted when so.
 */
bool placeholder_misdirected(struct conn *c, const char *head, size_t len,
			     const struct verdict_inject *own);
/*
 * The same for the head of <c> under verdict <v>, whatever its tier: the
 * spine's guard before any mode starts (a placeholder is the sandbox's, and
 * may leave only towards its own rule).
 */
bool verdict_placeholder_misdirected(struct conn *c, const struct verdict *v);
/* Rewrites request <req> (<head_len> bytes) into c->out, then sends it upstream. */
void inject_request(struct conn *c, const struct http1_request *req, size_t head_len);
/* Receives the upstream's next ciphertext, unless one runs, a buffer waits or it ended. */
void inject_recv_arm(struct conn *c);

/* core/gateway.c */
/* A gateway conn, from its accept: its requests routed to a sandbox's agent (they run on
 * forward_mode, and tunnel_mode once the agent switched protocols). */
extern const struct conn_front gateway_front;
/* The public listener's TLS front: its conns only decrypt, relaying plaintext to the
 * internal socket, in gateway_tls_mode (ST_TERM). */
extern const struct conn_front gateway_tls_front;
extern const struct conn_mode gateway_tls_mode;
/*
 * A conn accepted on <l>, the public listener, its TLS form or the internal
 * socket: what kind of gateway conn it is, and the public client's address.
 */
void ingress_accepted(struct conn *c, const struct worker_listener *l);
/*
 * Takes the PROXY v2 header off the head buffer of a conn of the internal
 * socket. True when a head may follow; false to wait for more, or (malformed
 * or LOCAL) with the conn closed.
 */
bool ingress_proxy_take(struct conn *c);
/* A gateway request begins: its record counts from here. */
void ingress_begin(struct conn *c);
/* The request no longer counts as open against its sandbox's `concurrent`. */
void ingress_release(struct conn *c);
/* Writes the record of the gateway request that just ended; at most one per request. */
void ingress_audit(struct conn *c);
/* Routes gateway request <req> by its path to a sandbox, checks it, connects it. */
void ingress_decide(struct conn *c, const struct http1_request *req);
/* Connects the routed sandbox's ingress socket, never through a symlink. */
void ingress_connect(struct conn *c);
/* Writes the agent's head for <req> into c->out (core/ingress.h). Bytes or -EMSGSIZE. */
ssize_t ingress_head(struct conn *c, const struct http1_request *req);
/*
 * Writes the public client's head for the agent's answer <resp> into
 * <out>/<cap>, isolated from the other sandboxes' (ingress_write_response_head)
 * and with <connection> as http1_write_response_head takes it. Bytes or
 * -EMSGSIZE.
 */
ssize_t ingress_response_head(struct conn *c, const struct http1_response *resp,
			      const char *connection, char *out, size_t cap);
/*
 * The agent switched protocols (101, the <n> bytes of parsed <resp> at the
 * start of c->resp): from then on the conn is a tunnel both ways.
 */
void ingress_upgraded(struct conn *c, const struct http1_response *resp, uint32_t n);
/* A conn of the public TLS listener: its session, then the internal socket's connect. */
void tlsrelay_connect(struct conn *c);

#endif /* AN_CORE_CONN_INT_H */
