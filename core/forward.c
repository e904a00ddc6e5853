/*
 * Absolute-form forwarding (FORWARD), for a plain http:// request through the
 * proxy and for every ingress gateway request: the head is rewritten in
 * origin form (http1_write_origin_head, or ingress_head for the gateway) and
 * sent up, then the bodies are copied through provided buffers with their
 * framing followed (Content-Length or chunked; the response also to its
 * close), only to know where each ends; trailer fields are dropped on the
 * way, both ways (the heads were checked, they would not be). The
 * client's bytes all take one path, the conn's early-data queue
 * (early_peek): what came with the head, what came before the upstream
 * connected, and each receive after, so what follows the body stays queued,
 * in order. The response head is collected in
 * c->resp and rewritten as the proxy forwards it (resp_head_rewrite: no
 * hop-by-hop field, our own Connection); interim 1xx heads pass before the
 * final one.
 *
 * An exchange is over when both c->req_done and c->resp_done hold and no
 * send or receive is in flight (request_finish): the conn then returns to
 * HEAD with the upstream kept (F_REUSABLE, keyed by host and port) for the
 * next request to the same host, what the client pipelined behind this one
 * carried over to the head buffer (head_carry); otherwise it lingers. A kept upstream that closed while idle
 * is retried once, fresh (fwd_no_response).
 */
#include "core/conn_int.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "core/an.h"
#include "core/http1.h"
#include "core/pool.h"
#include "core/ring.h"
#include "core/timer.h"

static void request_finish(struct conn *c);
static void fwd_up_step(struct conn *c);
static void fwd_down_recv(struct conn *c);
static void req_body_refused(struct conn *c);

/*
 * How many of <n> bytes at <p> are the request body's next part; sets
 * req_done, and *<drop> for a chunked body's trailer fields, which are never
 * forwarded (http1_chunked_scan_part): the head was checked and rewritten,
 * a trailer would reach the upstream unchecked (a Host, framing, an
 * Authorization beside an injected one).
 */
static int64_t req_frame(struct conn *c, const char *p, uint32_t n, bool *drop)
{
	*drop = false;
	if (c->req_done)
		return 0;
	if (c->req_body == HTTP1_BODY_LENGTH) {
		uint64_t m = c->req_left < n ? c->req_left : n;
		c->req_left -= m;
		c->req_done = c->req_left == 0;
		return (int64_t)m;
	}
	AN_ASSERT(c->req_body == HTTP1_BODY_CHUNKED);
	ssize_t m = http1_chunked_scan_part(&c->req_chunks, p, n, drop);
	if (m < 0)
		return m;
	if (c->ingress) {
		/* The gateway's body cap, counted on the wire: the stream is cut there. */
		if ((uint64_t)m > c->req_left) {
			c->reason = REASON_BODY_TOO_LARGE;
			return -1;
		}
		c->req_left -= (uint64_t)m;
	}
	c->req_done = c->req_chunks.done;
	return m;
}

/*
 * The request's body was framed wrong (a chunk line or its CRLF, a size too
 * large or not hex, junk after it) or passed the gateway's cap: the rest
 * never goes upstream, whose connection is dropped with the request
 * incomplete, so no upstream ever completes a request whose body was
 * malformed. The client is answered at once, 400 bad_request (413
 * body_too_large for the cap), unless a response already started to reach
 * it: then its connection closes.
 */
static void req_body_refused(struct conn *c)
{
	enum reason why =
	    c->reason == REASON_BODY_TOO_LARGE ? REASON_BODY_TOO_LARGE : REASON_BAD_REQUEST;

	c->flags |= F_NO_KEEPALIVE;
	c->keep_alive = false;
	c->upstream_reset = true; /* it holds the body's part before the fault */
	if (c->resp_head_done) {
		c->reason = (uint8_t)why;
		conn_close(c);
		return;
	}
	respond(c, why);
}

/*
 * How many of <n> bytes at <p> are the response body's next part, as
 * req_frame; *<kept> of them, moved to the front of <p>, are what goes on: a
 * chunked body's trailer fields are dropped there (http1_chunked_strip),
 * so an upstream cannot reach the agent with a field its head check would
 * have removed (an X-Agent-Instruction of the proxy's contract, say). Bytes
 * past the response stay after the part.
 */
static int64_t resp_frame(struct conn *c, char *p, uint32_t n, uint32_t *kept)
{
	*kept = 0;
	if (c->resp_done)
		return 0;
	switch (c->resp_body) {
	case HTTP1_BODY_NONE:
		c->resp_done = true;
		return 0;
	case HTTP1_BODY_LENGTH: {
		uint64_t m = c->resp_left < n ? c->resp_left : n;
		c->resp_left -= m;
		c->resp_done = c->resp_left == 0;
		*kept = (uint32_t)m;
		return (int64_t)m;
	}
	case HTTP1_BODY_CHUNKED: {
		size_t k = 0;
		ssize_t m = http1_chunked_strip(&c->resp_chunks, p, n, &k);
		if (m >= 0) {
			c->resp_done = c->resp_chunks.done;
			*kept = (uint32_t)k;
		}
		return m;
	}
	default:
		*kept = n;
		return n; /* until the upstream closes */
	}
}

/*
 * Sends on the part of the <res> bytes the upstream just sent that belongs
 * to the current response, as resp_frame delimits it. Bytes past the
 * response are dropped and the conn is not kept alive. Returns the bytes
 * sent, 0 when the response had already ended (the buffer is back in the
 * ring), or -1 when the framing was malformed (the conn is closing).
 */
static int64_t resp_send_framed(struct conn *c, int res)
{
	struct relay *r = &c->down;
	char *p = (char *)ring_buf(conn_ring(c), r->bid);
	uint32_t kept = 0;

	AN_ASSERT(r->holds_buf);
	AN_ASSERT(res > 0);
	int64_t m = resp_frame(c, p, (uint32_t)res, &kept);
	if (m < 0) {
		ring_buf_return(conn_ring(c), r->bid);
		r->holds_buf = false;
		r->state = R_IDLE;
		conn_close(c);
		return -1;
	}
	if (m < res)
		c->flags |= F_NO_KEEPALIVE;
	r->state = R_SEND;
	r->buf_off = 0;
	r->buf_len = kept;
	if (kept == 0) {
		ring_buf_return(conn_ring(c), r->bid);
		r->holds_buf = false;
		if (m == 0)
			return 0;
		r->state = R_IDLE; /* trailer fields alone, dropped: the rest is still to come */
		fwd_down_recv(c);
		return m;
	}
	prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, p, kept);
	return m;
}

/*
 * The exchange's deadlines, from its last I/O (c->active_ms): while the
 * request body is still due, body_ms (it stalled); once the request is out
 * and no response head came, response_ms (the upstream is not answering);
 * idle_ms always. Returns the milliseconds left to the nearest, 0 when one
 * has passed, and that one in *<why> (REASON_NONE: idle).
 */
static uint64_t fwd_deadline(const struct conn *c, enum reason *why)
{
	const struct config *cfg = c->w->e->cfg;
	uint64_t quiet = c->w->now_ms - c->active_ms;
	uint64_t limit = cfg->idle_timeout_ms;

	*why = REASON_NONE;
	if (!c->req_done && cfg->body_timeout_ms <= limit) {
		limit = cfg->body_timeout_ms;
		*why = REASON_REQUEST_TIMEOUT;
	} else if (c->req_done && !c->resp_head_done && cfg->response_timeout_ms <= limit) {
		limit = cfg->response_timeout_ms;
		*why = REASON_UPSTREAM_TIMEOUT;
	} else if (c->req_done && !c->resp_head_done) {
		*why = REASON_UPSTREAM_TIMEOUT; /* idle first: still no answer */
	}
	return quiet >= limit ? 0 : limit - quiet;
}

/*
 * forward_mode's timer: a deadline passed is answered while the protocol
 * still allows it, 408 request_timeout for a stalled body, 504
 * upstream_timeout for a response head that never came (audited through
 * respond); once the response began, the connection closes. Else the timer
 * is armed again for the nearest deadline. Always the mode's own.
 */
static bool fwd_timer(struct conn *c)
{
	enum reason why;
	uint64_t left = fwd_deadline(c, &why);

	if (left > 0) {
		timer_arm(c->w->timers, &c->timer, (uint32_t)left);
		return true;
	}
	c->flags |= F_NO_KEEPALIVE;
	c->keep_alive = false;
	if (why == REASON_NONE || c->resp_head_done)
		conn_close(c);
	else
		respond(c, why);
	return true;
}

void forward_start(struct conn *c)
{
	struct http1_request req;
	enum reason why;

	c->state = ST_FORWARD;
	c->reason = REASON_NONE;
	head_recv_stop(c);
	/* Re-parse: the head buffer is unchanged, so this cannot fail. */
	ssize_t n = http1_parse_request(c->head, c->head_len, &req, &why);
	AN_ASSERT(n == (ssize_t)c->head_len);
	if (c->out == NULL)
		c->out = pool_take(&c->w->heads);
	ssize_t len = c->out == NULL ? -1
		      : c->ingress
			  ? ingress_head(c, &req)
			  : http1_write_origin_head(&req, c->out, WORKER_HEAD_BUFFER_BYTES);
	if (len < 0) {
		respond(c, c->out ? REASON_HEADERS_TOO_LARGE : REASON_OVERLOADED);
		return;
	}
	c->out_len = (uint32_t)len;
	c->out_off = 0;
	c->req_done = c->req_body == HTTP1_BODY_NONE ||
		      (c->req_body == HTTP1_BODY_LENGTH && c->req_left == 0);
	c->resp_done = false;
	c->resp_head_done = false;
	c->resp_fill = 0;
	memset(&c->resp_chunks, 0, sizeof(c->resp_chunks));
	c->up.state = R_IDLE;
	c->down.state = R_IDLE;
	c->active_ms = c->w->now_ms;
	timer_arm(c->w->timers, &c->timer, (uint32_t)fwd_deadline(c, &why));
	hangup_watch(c); /* request_finish cancels it and waits for its end */
	fwd_up_step(c);
	fwd_down_recv(c);
}

/* The client hung up (or the poll was cancelled: <res> -ECANCELED). */
static void on_fwd_hangup(struct conn *c, int res)
{
	if (hangup_seen(res) && c->state == ST_FORWARD && !c->req_done) {
		c->upstream_reset = true; /* it holds part of a request: reset at once */
		conn_close(c);
		return;
	}
	request_finish(c); /* it may have waited for this poll's end */
}

/*
 * Sends the request body's next part waiting in the early-data queue, trailer
 * fields before it dropped. True when that moved the exchange on (a send is
 * out, the body was refused, or it ended), false when nothing waits.
 */
static bool fwd_body_next(struct conn *c)
{
	struct relay *r = &c->up;
	const char *p;
	uint32_t n = early_peek(c, &p);

	for (; n > 0; n = early_peek(c, &p)) {
		bool drop = false;
		int64_t m = req_frame(c, p, n, &drop);
		if (m < 0) {
			req_body_refused(c);
			return true;
		}
		/* Bytes past the body are the next request: request_finish carries them. */
		if (m == 0) {
			request_finish(c);
			return true;
		}
		if (drop) {
			early_consume(c, (uint32_t)m);
			continue;
		}
		r->state = R_PRELUDE;
		r->buf_off = 0;
		r->buf_len = (uint32_t)m;
		prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, p, (size_t)m);
		return true;
	}
	return false;
}

static void fwd_up_step(struct conn *c)
{
	struct relay *r = &c->up;

	if (c->state != ST_FORWARD || (c->ops & op_bit(dir_op(DIR_UP, ROP_SEND))) ||
	    (c->ops & op_bit(dir_op(DIR_UP, ROP_RECV))))
		return;
	if (c->out_off < c->out_len) {
		prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, c->out + c->out_off,
			  c->out_len - c->out_off);
		return;
	}
	if (c->req_done) {
		request_finish(c);
		return;
	}
	if (fwd_body_next(c))
		return;
	if (c->ops & op_bit(OP_HEAD_RECV))
		return; /* the cancelled head receive may still deliver body bytes */
	r->state = R_RECV;
	prep_recv_select(c, dir_op(DIR_UP, ROP_RECV), c->cfd);
}

static void on_fwd_up(struct conn *c, uint32_t rop, int res)
{
	struct relay *r = &c->up;

	if (res <= 0 && !(rop == ROP_RECV && (res == -ENOBUFS || res == -EAGAIN))) {
		if (c->ingress && rop == ROP_SEND && !c->resp_head_done &&
		    (c->ops & op_bit(dir_op(DIR_DOWN, ROP_RECV)))) {
			/* The bridge closed as the agent's port refused it: the down
			 * receive sees the end and answers agent_not_listening. */
			r->state = R_IDLE;
			c->flags |= F_NO_KEEPALIVE;
			return;
		}
		c->upstream_reset = !c->req_done; /* it holds part of a request: never a FIN */
		conn_close(c); /* client gone mid-body, or upstream refused our bytes */
		return;
	}
	r->state = R_IDLE;
	if (rop == ROP_RECV && res < 0) {
		nobufs_wait(c);
		return;
	}
	if (rop == ROP_RECV) {
		/* Queued like early data (the receive is armed only when none waits):
		 * framed and sent from there, and bytes past the body stay queued. */
		r->holds_buf = false;
		early_push(c, r->bid, (uint32_t)res);
		fwd_up_step(c);
		return;
	}
	AN_ASSERT(rop == ROP_SEND);
	c->bytes_up += (uint64_t)res;
	if (c->out_off < c->out_len) {
		c->out_off += (uint32_t)res;
		fwd_up_step(c);
		return;
	}
	r->buf_off += (uint32_t)res;
	early_consume(c, (uint32_t)res);
	if (r->buf_off < r->buf_len) {
		const char *p;
		early_peek(c, &p);
		r->state = R_PRELUDE;
		prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, p, r->buf_len - r->buf_off);
		return;
	}
	fwd_up_step(c);
}

static void fwd_down_recv(struct conn *c)
{
	if (c->state != ST_FORWARD || c->resp_done || (c->ops & op_bit(dir_op(DIR_DOWN, ROP_RECV))))
		return;
	c->down.state = R_RECV;
	prep_recv_select(c, dir_op(DIR_DOWN, ROP_RECV), c->ufd);
}

/* The upstream closed or failed before answering. */
static void fwd_no_response(struct conn *c)
{
	if (c->reused_upstream && c->req_body == HTTP1_BODY_NONE &&
	    !(c->ops & op_bit(dir_op(DIR_UP, ROP_SEND)))) {
		/* A kept-alive upstream closed while idle: retry once, fresh. */
		c->reused_upstream = false;
		close_slot(c, &c->ufd);
		c->out_off = 0;
		c->state = ST_CONNECT;
		if (c->ingress)
			ingress_connect(c);
		else
			connect_next(c);
		return;
	}
	/* The bridge took the connection, but nothing listens on the agent's port. */
	respond(c, c->ingress ? REASON_AGENT_NOT_LISTENING : REASON_UPSTREAM_UNREACHABLE);
}

static_assert(LIMITS_RESPONSE_HEAD_BYTES_MAX <= LIMITS_HEAD_BYTES_MAX &&
		  HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX - LIMITS_RESPONSE_HEAD_BYTES_MAX <=
		      WORKER_HEAD_REWRITE_BYTES,
	      "a rewritten response head and the receive that completed it fit a head buffer");

/*
 * Rewrites the response head <resp>, the <n> bytes at <at> in c->resp, as
 * the proxy forwards it (http1_write_response_head): HTTP/1.1, no hop-by-hop
 * field, and our own Connection field when the client's connection ends
 * after this response (<keep> false; none for an interim one) or stays open
 * for an HTTP/1.0 client. The bytes after the head move up behind the new
 * one: c->resp_fill grows by at most WORKER_HEAD_REWRITE_BYTES, which the
 * caller left free. A gateway conn's head is ingress_response_head's, which
 * isolates the agent's answer and may not fit that: 0 then, and nothing moved.
 * Returns the new head's length.
 */
uint32_t resp_head_rewrite(struct conn *c, const struct http1_response *resp, uint32_t at,
			   uint32_t n, bool keep)
{
	bool interim = resp->status < 200;
	const char *connection = interim            ? NULL
				 : !keep            ? "close"
				 : c->client_http10 ? "keep-alive"
						    : NULL;

	AN_ASSERT(n > 0 && at + n <= c->resp_fill);
	AN_ASSERT(resp->status != 101);
	/* What the head may grow to in place; the gateway's, which adds a field, may not fit. */
	size_t cap = (size_t)n + WORKER_HEAD_REWRITE_BYTES;
	if (cap > HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX)
		cap = HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX;
	ssize_t m = c->ingress
			? ingress_response_head(c, resp, connection, c->w->resp_rewrite, cap)
			: http1_write_response_head(resp, connection, c->w->resp_rewrite, cap);
	if (m < 0 && c->ingress)
		return 0;
	uint32_t tail = c->resp_fill - at - n;
	AN_ASSERT(m > 0 && at + (size_t)m + tail <= WORKER_HEAD_BUFFER_BYTES);
	memmove(c->resp + at + m, c->resp + at + n, tail);
	memcpy(c->resp + at, c->w->resp_rewrite, (size_t)m);
	c->resp_fill = at + (uint32_t)m + tail;
	return (uint32_t)m;
}

/* Parses the response head gathered in c->resp; sends it, rewritten, when complete. */
static void fwd_resp_head(struct conn *c)
{
	struct http1_response resp;

	ssize_t n = http1_parse_response(c->resp, c->resp_fill, &resp);
	if (n == -EAGAIN) {
		fwd_down_recv(c);
		return;
	}
	bool upgrade = resp.status == 101 && c->ingress && c->ingress_upgrade;
	if (n < 0 || (resp.status == 101 && !upgrade)) {
		respond(c, REASON_UPSTREAM_BAD_RESPONSE);
		return;
	}
	if (upgrade) {
		ingress_upgraded(c, &resp, (uint32_t)n);
		return;
	}
	bool interim = resp.status >= 100 && resp.status < 200;
	uint32_t rest = c->resp_fill - (uint32_t)n;
	int64_t body_now = 0;
	if (!interim) {
		c->resp_head_done = true;
		c->resp_body = (uint8_t)http1_response_body(&resp, c->head_method);
		c->resp_left = resp.content_length;
		c->resp_keep_alive = resp.keep_alive;
		/* The body bytes that came with the head are framed before it goes: a
		 * chunk framed wrong there is answered 502, the head never relayed. */
		uint32_t kept = 0;
		int64_t framed = resp_frame(c, c->resp + n, rest, &kept);
		if (framed < 0) {
			respond(c, REASON_UPSTREAM_BAD_RESPONSE);
			return;
		}
		if (kept < framed) { /* trailer fields dropped: close the gap they left */
			uint32_t gap = (uint32_t)framed - kept;
			memmove(c->resp + n + kept, c->resp + n + framed, rest - (uint32_t)framed);
			c->resp_fill -= gap;
			rest -= gap;
		}
		body_now = kept;
	}
	bool keep = c->keep_alive && resp.keep_alive && !(c->flags & F_NO_KEEPALIVE) &&
		    http1_response_body(&resp, c->head_method) != HTTP1_BODY_CLOSE;
	uint32_t head_len = resp_head_rewrite(c, &resp, 0, (uint32_t)n, keep);
	if (head_len == 0) {
		respond(c, REASON_UPSTREAM_BAD_RESPONSE);
		return;
	}
	if (!interim)
		audit_decision(c, true, resp.status);
	c->resp_head_len = head_len;
	uint32_t send_len = c->resp_head_len;
	if (!interim) {
		if ((uint64_t)body_now < rest)
			c->flags |= F_NO_KEEPALIVE; /* bytes past the response: don't reuse */
		send_len += (uint32_t)body_now;
	}
	c->down.state = R_PRELUDE;
	c->down.buf_off = 0;
	c->down.buf_len = send_len;
	prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, c->resp, send_len);
}

static void on_fwd_down_recv(struct conn *c, int res)
{
	struct relay *r = &c->down;
	struct ring *ring = conn_ring(c);

	if (res == -ENOBUFS || res == -EAGAIN) {
		r->state = R_IDLE;
		nobufs_wait(c);
		return;
	}
	if (res < 0 && c->resp_head_done) {
		/* A reset after the answer began: what came before it is out, and the agent's
		 * stream is cut (a reset on TCP), never ended as if the body were whole. */
		c->reason = REASON_UPSTREAM_RESET;
		c->client_reset = true;
		conn_close(c);
		return;
	}
	if (res <= 0) {
		if (c->resp_head_done && c->resp_body == HTTP1_BODY_CLOSE) {
			c->resp_done = true;
			c->flags |= F_NO_KEEPALIVE;
			request_finish(c);
		} else if (!c->resp_head_done && c->resp_fill == 0) {
			fwd_no_response(c);
		} else if (!c->resp_head_done) {
			respond(c, REASON_UPSTREAM_BAD_RESPONSE);
		} else {
			conn_close(c); /* cut mid-body: the client sees the short body */
		}
		return;
	}
	if (!c->resp_head_done) {
		if (c->resp == NULL)
			c->resp = pool_take(&c->w->heads);
		if (c->resp == NULL) {
			ring_buf_return(ring, r->bid);
			r->holds_buf = false;
			conn_close(c);
			return;
		}
		AN_ASSERT(c->resp_fill + (uint32_t)res <= WORKER_HEAD_BUFFER_BYTES);
		memcpy(c->resp + c->resp_fill, ring_buf(ring, r->bid), (size_t)res);
		c->resp_fill += (uint32_t)res;
		ring_buf_return(ring, r->bid);
		r->holds_buf = false;
		fwd_resp_head(c);
		return;
	}
	if (resp_send_framed(c, res) == 0)
		request_finish(c);
}

static void on_fwd_down_send(struct conn *c, int res)
{
	struct relay *r = &c->down;

	if (res <= 0) {
		conn_close(c);
		return;
	}
	c->bytes_down += (uint64_t)res;
	r->buf_off += (uint32_t)res;
	if (r->buf_off < r->buf_len) {
		const char *base =
		    r->state == R_PRELUDE ? c->resp : (const char *)ring_buf(conn_ring(c), r->bid);
		prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, base + r->buf_off,
			  r->buf_len - r->buf_off);
		return;
	}
	if (r->state == R_SEND && r->holds_buf) {
		ring_buf_return(conn_ring(c), r->bid);
		r->holds_buf = false;
	}
	if (r->state == R_PRELUDE && !c->resp_head_done) {
		/* An interim (1xx) response went out: the final one follows it. */
		uint32_t rest = c->resp_fill - c->resp_head_len;
		memmove(c->resp, c->resp + c->resp_head_len, rest);
		c->resp_fill = rest;
		r->state = R_IDLE;
		if (rest > 0)
			fwd_resp_head(c);
		else
			fwd_down_recv(c);
		return;
	}
	r->state = R_IDLE;
	if (c->resp_done)
		request_finish(c);
	else
		fwd_down_recv(c);
}

/* Both halves of an exchange are done: keep the conn for the next request or close. */
static void request_finish(struct conn *c)
{
	/* The cancelled head receive counts too: its last completion may still
	 * bring early bytes, and it re-runs this function when it arrives. */
	uint32_t busy = op_bit(dir_op(DIR_UP, ROP_SEND)) | op_bit(dir_op(DIR_UP, ROP_RECV)) |
			op_bit(dir_op(DIR_DOWN, ROP_SEND)) | op_bit(dir_op(DIR_DOWN, ROP_RECV)) |
			op_bit(OP_HEAD_RECV);
	uint32_t hangup = op_bit(dir_op(DIR_UP, ROP_POLL));

	if (c->state != ST_FORWARD || !c->req_done || !c->resp_done || (c->ops & busy))
		return;
	if (c->ops & hangup) {
		/* The body's hangup watch ends first: on_fwd_hangup comes back here. */
		struct io_uring_sqe *sqe = ring_sqe(conn_ring(c));
		io_uring_prep_cancel64(sqe, ud_encode(c, dir_op(DIR_UP, ROP_POLL)), 0);
		io_uring_sqe_set_data64(sqe, ud_encode(c, OP_CANCEL));
		c->cancels++;
		return;
	}
	if (c->ingress) {
		ingress_audit(c);
		ingress_release(c); /* an idle conn holds no request open */
	}
	bool keep = c->keep_alive && c->resp_keep_alive && !(c->flags & F_NO_KEEPALIVE) &&
		    c->resp_body != HTTP1_BODY_CLOSE;
	if (!keep) {
		linger_start(c);
		return;
	}
	/* What the client sent past this request, whichever read brought it, is the next
	 * request: kept and served (or refused, audited) as one, never dropped unread. */
	uint32_t next_len = head_carry(c);
	char *head = c->head;
	c->head = NULL; /* kept across the release below */
	buffers_release(c);
	c->head = head;
	c->head_fill = next_len;
	c->flags |= F_REUSABLE;
	c->flags &= (uint8_t)~F_HEAD_STOP;
	c->rule = NULL;
	c->state = ST_HEAD;
	c->up.state = R_IDLE;
	c->down.state = R_IDLE;
	head_recv_arm(c);
	if (next_len > 0)
		head_deadline_arm(c); /* the next head began already */
	else
		timer_arm(c->w->timers, &c->timer, conn_next_request_ms(c));
	if (next_len > 0)
		head_parse(c);
}

static void fwd_io(struct conn *c, int dir, uint32_t rop, int res, uint32_t cqe_flags)
{
	(void)cqe_flags;
	if (dir == DIR_UP && rop == ROP_POLL) {
		on_fwd_hangup(c, res);
		return;
	}
	c->active_ms = c->w->now_ms;
	if (dir == DIR_UP)
		on_fwd_up(c, rop, res);
	else if (rop == ROP_RECV)
		on_fwd_down_recv(c, res);
	else if (rop == ROP_SEND)
		on_fwd_down_send(c, res);
}

/* Buffers are back: the body or response receive that waited for one goes on. */
static void fwd_buffers(struct conn *c)
{
	if (c->up.state == R_IDLE)
		fwd_up_step(c);
	if (c->down.state == R_IDLE)
		fwd_down_recv(c);
}

const struct conn_mode forward_mode = {
	.state = ST_FORWARD,
	.connected = forward_start,
	.io = fwd_io,
	.buffers = fwd_buffers,
	.early = fwd_up_step,
	.timer = fwd_timer,
};
