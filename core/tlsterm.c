/*
 * Terminating the agent's TLS (TERM), for the fake and inject tiers and for
 * the public listener's TLS front: after the 200 in clear (none on the
 * public listener), the conn runs a server session of its own through
 * engine.term (core/term.h, memory BIOs: the ring still owns every socket).
 * The agent's ciphertext comes in one single-shot receive at a time
 * (term_recv_arm), queued in the early-data FIFO and fed as the session
 * drains, so a session whose plaintext waits slows the agent down by its TCP
 * window, never cuts it off; the session's ciphertext leaves through the
 * down relay's send, one send at a time, straight from the session's buffer
 * (term_flush).
 *
 * term_pump moves a conn as far as it goes without the network and hands the
 * plaintext to its mode: inject_pump (core/inject.c), tlsrelay_pump
 * (core/gateway.c) or term_pump_session (core/fake.c). A request inside the
 * session collects in the head buffer and is checked here (origin form, the
 * CONNECT's Host, no misdirected placeholder); a refusal is answered inside
 * the session (term_refuse). The session's end is audited (term_end), a
 * close_notify queued, and once it is out the conn lingers.
 */
#include "core/conn_int.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/an.h"
#include "core/deny.h"
#include "core/http1.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/ring.h"
#include "core/timer.h"

static uint32_t term_feed_waiting(struct conn *c);
static void term_handshakes_timed(struct conn *c);

/* Sends what the session has for the client; once a close is out, lingers. */
void term_flush(struct conn *c)
{
	const uint8_t *data = NULL;

	if (c->state != ST_TERM || (c->ops & op_bit(dir_op(DIR_DOWN, ROP_SEND))))
		return;
	size_t n = conn_term(c)->out_peek(c->client_tls, &data);
	if (n > 0) {
		c->down.state = R_SEND;
		prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, data, n);
	} else if (c->term_closing && c->client_reset) {
		conn_close(c); /* term_abort: no close_notify, no linger */
	} else if (c->term_closing) {
		linger_start(c);
	}
}

/*
 * The client's TLS handshake failed: an agent that does not trust the CA, a
 * public client with no protocol or cipher in common, bytes that are not
 * TLS. No HTTP answer can reach it, so the record is the only trace: on the
 * public listener an ingress record with the client's address, on a
 * terminated tier a decision record for the tunnel's host; either with the
 * session's reason in its detail.
 */
static void tls_failure_audit(struct conn *c, const char *why)
{
	struct audit_ring *ar = c->w->audit;

	AN_ASSERT(c->client_tls != NULL && !c->ingress);
	AN_ASSERT(why != NULL);
	c->reason = REASON_TLS_HANDSHAKE_FAILED;
	struct audit_record *rec = audit_claim(ar);
	if (rec == NULL)
		return;
	rec->kind = c->ingress_tls ? AUDIT_INGRESS : AUDIT_DECISION;
	rec->id = audit_next_id(ar);
	record_common(c, rec);
	audit_copy(rec->detail, sizeof(rec->detail), why, strlen(why));
	if (c->ingress_tls) {
		rec->bytes_up = c->bytes_up;
		rec->bytes_down = c->bytes_down;
		rec->duration_ms = (uint32_t)(c->w->now_ms - c->start_ms);
		addr_format(&c->client, rec->addr, sizeof(rec->addr));
	}
	audit_commit(ar, rec);
}

/* The session ended (<st> CLOSED or ERROR): audit why, queue close_notify. */
void term_end(struct conn *c, enum term_status st)
{
	const struct term_ops *t = conn_term(c);

	if (st == TERM_ERROR && t->sni_refused(c->client_tls)) {
		c->reason = REASON_SNI_MISMATCH;
		c->w->stats.denied++;
		audit_decision(c, false, reason_status(REASON_SNI_MISMATCH));
	} else if (st == TERM_ERROR && !t->established(c->client_tls)) {
		tls_failure_audit(c, t->error(c->client_tls));
	} else if (st == TERM_ERROR) {
		log_debug("conn %llx: TLS: %s", (unsigned long long)c->id, t->error(c->client_tls));
	}
	(void)t->close(c->client_tls); /* a full buffer drops it: the TCP close still ends us */
	c->term_closing = true;
}

void term_abort(struct conn *c)
{
	c->client_reset = true;
	c->term_closing = true;
}

/*
 * The answer to a request refused inside the session. Unless <keep>, the
 * conn closes after it and nothing read after the request is looked at;
 * with <keep> (a limit's 429 to a keep-alive request with no body, whose
 * head the caller dropped) the session waits for the next request.
 */
static void term_refuse_as(struct conn *c, enum reason why, bool keep)
{
	char audit_id[AUDIT_ID_BYTES];

	c->reason = (uint8_t)why;
	c->w->stats.denied++;
	audit_decision(c, false, reason_status(why));
	audit_format_id(c->w->e->audit, c->decision_id, audit_id);
	struct deny_info d = { .reason = why,
			       .rule = c->rule,
			       .instruction = c->instruction,
			       .host = c->host,
			       .host_len = c->host_len,
			       .port = c->port,
			       .sandbox = conn_sandbox(c)->id,
			       .audit_id = audit_id,
			       .retry_after_s = refusal_retry_after_s(c, why),
			       .keep_alive = keep };
	ssize_t n = deny_format(&d, c->out, WORKER_HEAD_BUFFER_BYTES);
	c->out_len = n > 0 ? (uint32_t)n : 0;
	c->out_off = 0;
	c->answer_body = NULL;
	c->answer_body_len = 0;
	c->term_close_after = !keep;
	if (!keep)
		c->head_fill = 0; /* nothing after a refused request is read */
	if (n <= 0)
		term_end(c, TERM_CLOSED);
}

void term_refuse(struct conn *c, enum reason why)
{
	term_refuse_as(c, why, false);
}

bool term_awaiting_request(const struct conn *c)
{
	return c->out_len == 0 && c->head_fill == 0 && c->term_skip == 0 && !c->term_chunked &&
	       !c->term_closing;
}

/* Drops <n> bytes from the front of the plaintext in the head buffer. */
void term_drop(struct conn *c, uint32_t n)
{
	AN_ASSERT(n <= c->head_fill);
	memmove(c->head, c->head + n, c->head_fill - n);
	c->head_fill -= n;
}

/* Discards request body bytes; false on a malformed chunked body (then refused). */
static bool term_skip_body(struct conn *c)
{
	if (c->term_skip > 0) {
		uint32_t n = c->term_skip < c->head_fill ? (uint32_t)c->term_skip : c->head_fill;
		c->term_skip -= n;
		term_drop(c, n);
	}
	if (!c->term_chunked || c->head_fill == 0)
		return true;
	ssize_t n = http1_chunked_scan(&c->req_chunks, c->head, c->head_fill);
	if (n < 0)
		return false;
	term_drop(c, (uint32_t)n);
	if (c->req_chunks.done)
		c->term_chunked = false;
	return true;
}

/*
 * Takes the next request out of the plaintext, if a whole head is there and
 * no answer is being written: checks it, frames its answer. Returns true
 * when an answer (or a refusal) was started.
 */
bool term_request(struct conn *c)
{
	struct http1_request req;
	enum reason why = REASON_BAD_REQUEST;

	if (c->out_len > 0 || c->term_closing)
		return false;
	if (!term_skip_body(c)) {
		term_refuse(c, REASON_BAD_REQUEST);
		return true;
	}
	if (c->term_skip > 0 || c->term_chunked || c->head_fill == 0)
		return false;
	ssize_t n = http1_parse_request(c->head, c->head_fill, &req, &why);
	if (n == -EAGAIN)
		return false;
	c->retry_after_s = 0;
	c->requests++;
	c->w->stats.requests++;
	/* c->host and c->port stay the CONNECT's: every audit names that host. */
	size_t mlen = n > 0 && req.method_len < sizeof(c->method) ? req.method_len : 0;
	memcpy(c->method, req.method, mlen);
	c->method_len = (uint8_t)mlen;
	c->path_len = 0;
	if (n < 0 || req.form != HTTP1_FORM_ORIGIN) {
		term_refuse(c, n < 0 ? why : REASON_BAD_REQUEST);
		return true;
	}
	c->path_off = (uint16_t)(req.target - c->head);
	c->path_len = (uint16_t)req.target_len;
	if (req.host_header != NULL && !http1_host_names(req.host_header, req.host_header_len,
							 c->host, c->host_len, c->port)) {
		term_refuse(c, REASON_HOST_MISMATCH);
		return true;
	}
	if (placeholder_misdirected(c, c->head, (size_t)n, c->inject)) {
		term_refuse(c, REASON_PLACEHOLDER_MISDIRECTED);
		return true;
	}
	if (audit_refuses(c)) {
		term_refuse(c, REASON_AUDIT_UNAVAILABLE);
		return true;
	}
	if (conn_quarantined(c)) {
		term_refuse(c, REASON_QUARANTINED); /* a session opened before the alert */
		return true;
	}
	switch (drain_answer(c)) {
	case DRAIN_NONE:
		break;
	case DRAIN_CLOSE:
		req.keep_alive = false; /* served; its answer closes the session */
		break;
	case DRAIN_REFUSE:
		c->retry_after_s = LIMITS_DRAIN_RETRY_AFTER_S;
		term_refuse(c, REASON_DAEMON_STOPPING);
		return true;
	}
	why = session_limits_refusal(c);
	if (why != REASON_NONE) {
		/* As in clear (conn.c, refusal_keeps): retried on this session after Retry-After. */
		bool keep = req.keep_alive && http1_request_bodiless(&req);
		if (keep)
			term_drop(c, (uint32_t)n);
		term_refuse_as(c, why, keep);
		return true;
	}
	if (c->inject != NULL) {
		inject_request(c, &req, (size_t)n);
		return true;
	}
	term_answer(c, &req);
	c->term_skip = req.body == HTTP1_BODY_LENGTH ? req.content_length : 0;
	c->term_chunked = req.body == HTTP1_BODY_CHUNKED;
	memset(&c->req_chunks, 0, sizeof(c->req_chunks));
	term_drop(c, (uint32_t)n);
	return true;
}

/* Writes the answer's next plaintext into the session. */
enum term_status term_write_answer(struct conn *c)
{
	uint32_t total = c->out_len + c->answer_body_len;
	const char *p = c->out_off < c->out_len ? c->out + c->out_off
						: c->answer_body + (c->out_off - c->out_len);
	uint32_t len = c->out_off < c->out_len ? c->out_len - c->out_off : total - c->out_off;
	size_t n = 0;

	enum term_status st = conn_term(c)->write(c->client_tls, p, len, &n);
	if (st != TERM_OK)
		return st;
	c->out_off += (uint32_t)n;
	if (c->out_off < total)
		return TERM_OK;
	c->out_len = 0;
	c->answer_body = NULL;
	c->answer_body_len = 0;
	timer_arm(c->w->timers, &c->timer, conn_next_request_ms(c));
	if (c->term_close_after)
		term_end(c, TERM_CLOSED);
	return TERM_OK;
}

/* Reads plaintext into the head buffer. */
enum term_status term_read_request(struct conn *c)
{
	uint32_t room = LIMITS_HEAD_BYTES_MAX - c->head_fill;
	size_t n = 0;

	if (room == 0) {
		term_refuse(c, REASON_HEADERS_TOO_LARGE);
		return TERM_OK;
	}
	enum term_status st = conn_term(c)->read(c->client_tls, c->head + c->head_fill, room, &n);
	if (st == TERM_OK)
		c->head_fill += (uint32_t)n;
	return st;
}

/* Rounds of feeding and pumping one call makes at most (each feeds some waiting bytes). */
#define TERM_PUMP_ROUNDS_MAX 41u

/*
 * Moves the sessions as far as they go without the network, then sends:
 * waiting ciphertext is fed as the session makes room, and once none waits
 * the paused receive resumes.
 */
void term_pump(struct conn *c)
{
	for (uint32_t round = 0; round < TERM_PUMP_ROUNDS_MAX && c->state == ST_TERM; round++) {
		uint32_t fed = term_feed_waiting(c);
		AN_ASSERT(c->mode->state == ST_TERM);
		c->mode->pump(c);
		if (fed == 0)
			break;
	}
	term_handshakes_timed(c);
	term_recv_arm(c);
}

/*
 * Observes each handshake under way (c->agent_tls_timed, ->upstream_tls_timed)
 * that has completed: every session moves in term_pump, so this is at most
 * one pump late. A handshake that fails is not a duration.
 */
static void term_handshakes_timed(struct conn *c)
{
	const struct term_ops *t = conn_term(c);
	struct worker_decision_counts *d = &c->w->decisions;

	if (c->agent_tls_timed && c->client_tls != NULL && t->established(c->client_tls)) {
		c->agent_tls_timed = false;
		latency_observe(&d->tls_agent,
				(uint32_t)((uint32_t)timer_now_us() - c->agent_tls_started_us));
	}
	if (c->upstream_tls_timed && c->upstream_tls != NULL && t->established(c->upstream_tls)) {
		c->upstream_tls_timed = false;
		latency_observe(&d->tls_upstream,
				(uint32_t)((uint32_t)timer_now_us() - c->upstream_tls_started_us));
	}
}

/* The CONNECT is allowed on a fake rule: answer 200, then terminate its TLS. */
void term_start(struct conn *c)
{
	struct worker *w = c->w;
	const struct term_ops *t = conn_term(c);

	bool ca = t != NULL && w->term != NULL && w->e->term_has_ca;
	c->client_tls = ca ? t->server_new(w->term, c->host, c->host_len) : NULL;
	if (c->client_tls == NULL) {
		respond(c, !ca ? REASON_TIER_UNAVAILABLE : REASON_OVERLOADED);
		return;
	}
	if (c->out == NULL)
		c->out = pool_take(&w->heads);
	if (c->out == NULL) {
		respond(c, REASON_OVERLOADED);
		return;
	}
	/* Whatever followed the CONNECT head is the start of the ClientHello: the session
	 * takes one head's worth; more, sent before the 200, is no client's handshake. */
	uint32_t early = c->head_fill - c->head_len;
	ssize_t fed = early > 0 ? t->feed(c->client_tls, c->head + c->head_len, early) : 0;
	if (fed != (ssize_t)early) {
		respond(c, REASON_BAD_REQUEST);
		return;
	}
	audit_decision(c, true, 200);
	c->state = ST_TERM;
	c->agent_tls_started_us = (uint32_t)timer_now_us();
	c->agent_tls_timed = true;
	/* What came while the upstream was connected (inject) stays in the early
	 * FIFO: the first pump feeds it, in order, after this. */
	c->head_fill = 0;
	c->head_len = 0;
	c->path_len = 0;
	c->down.state = R_PRELUDE;
	c->down.buf_off = 0;
	prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, reply_established,
		  sizeof(reply_established) - 1);
	head_recv_stop(c); /* from now on one receive at a time, as the session drains */
	term_recv_arm(c);
	timer_arm(w->timers, &c->timer, w->e->cfg->head_timeout_ms);
}

/*
 * Feeds the agent's ciphertext waiting in the early FIFO into its session, as
 * far as the session takes it. Returns the bytes fed.
 */
static uint32_t term_feed_waiting(struct conn *c)
{
	const struct term_ops *t = conn_term(c);
	struct ring *r = conn_ring(c);
	uint32_t fed = 0;

	while (c->early_count > 0) {
		uint16_t bid;
		uint32_t off;
		uint32_t len = early_front(c, &bid, &off);
		ssize_t n = t->feed(c->client_tls, ring_buf(r, bid) + off, len);
		if (n <= 0)
			break;
		fed += (uint32_t)n;
		early_advance(c, (uint32_t)n);
		if ((uint32_t)n < len)
			break;
	}
	return fed;
}

/*
 * The agent's ciphertext, <len> bytes in provided buffer <bid>: queued, then
 * fed as the session drains. The receive that brings it is single-shot and
 * armed only when nothing waits (term_recv_arm), so while the session is
 * full (its plaintext waits on the upstream) the agent is slowed down by its
 * TCP window, never cut off.
 */
void term_ciphertext(struct conn *c, uint16_t bid, uint32_t len)
{
	early_push(c, bid, len);
	term_pump(c);
}

/* Receives the agent's next ciphertext, unless some still waits or it ended. */
void term_recv_arm(struct conn *c)
{
	if (c->state != ST_TERM || c->early_count > 0 || (c->flags & F_CLIENT_EOF) ||
	    (c->ops & op_bit(dir_op(DIR_UP, ROP_RECV))))
		return;
	prep_recv_select(c, dir_op(DIR_UP, ROP_RECV), c->cfd);
}

static void on_term_recv(struct conn *c, int res)
{
	struct relay *r = &c->up;

	if (res > 0) {
		r->holds_buf = false; /* the queue holds it now */
		c->active_ms = c->w->now_ms;
		term_ciphertext(c, r->bid, (uint32_t)res);
	} else if (res == 0) {
		c->flags |= F_CLIENT_EOF;
		c->mode->client_eof(c); /* term_eof, and what the mode makes of the agent's end */
	} else if (res == -ENOBUFS) {
		nobufs_wait(c); /* re-armed by conn_on_buffers */
	} else {
		conn_close(c);
	}
}

void term_client_data(struct conn *c, uint16_t bid, uint32_t len)
{
	/* The last of the head receive, cancelled when the session began. */
	c->active_ms = c->w->now_ms;
	term_ciphertext(c, bid, len); /* takes the buffer */
}

void term_eof(struct conn *c)
{
	conn_term(c)->feed_eof(c->client_tls);
	term_pump(c);
}

static void on_term_send(struct conn *c, int res)
{
	if (res <= 0) {
		conn_close(c);
		return;
	}
	if (c->down.state == R_PRELUDE) {
		c->down.buf_off += (uint32_t)res;
		uint32_t left = (uint32_t)sizeof(reply_established) - 1 - c->down.buf_off;
		if (left > 0) {
			prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd,
				  reply_established + c->down.buf_off, left);
			return;
		}
	} else {
		/* The agent's session's bytes, as its socket took them. */
		c->bytes_down += (uint64_t)res;
		conn_term(c)->out_consume(c->client_tls, (size_t)res);
	}
	c->down.state = R_IDLE;
	term_pump(c);
}

bool term_io(struct conn *c, int dir, uint32_t rop, int res)
{
	if (dir == DIR_DOWN && rop == ROP_SEND)
		on_term_send(c, res);
	else if (dir == DIR_UP && rop == ROP_RECV)
		on_term_recv(c, res);
	else
		return false;
	return true;
}
