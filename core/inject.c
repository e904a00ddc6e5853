/*
 * A CONNECT to an inject rule is resolved and connected as a tunnel is; once
 * the upstream accepts, the conn terminates the agent's TLS as the fake tier
 * does and opens a TLS session of its own to the upstream, verified against
 * the rule's roots. Each request's head is rewritten with the placeholder
 * swapped for the secret (core/credential.c) and written into the upstream
 * session, its body after it as it arrives (trailer fields dropped: nothing
 * beside the swapped head reaches the upstream unchecked); the response is
 * relayed to the agent as it arrives (server-sent events reach the agent
 * record by record), its framing followed to know where it ends and its
 * trailer fields dropped (the head's checks never saw them). One exchange at a time; the upstream
 * connection serves the conn's next request. The upstream session sends no
 * application data before the upstream's certificate verified, so a failed
 * verification costs no credential: the agent gets 502 upstream_tls_failed.
 *
 * The response is masked on its way: the secret becomes asterisks wherever
 * it appears (inject_relay_limit), a redirect is decided as a request to its
 * target would be (inject_redirect_denied), and a refused one reaches the
 * agent as a refusal, never as itself. When the conn ends between exchanges
 * its verified upstream, slot and session, goes to the worker's pool
 * (core/uppool.h) for the next conn with the same host, port, roots and
 * secret (inject_park, inject_take_pooled). The TLS-termination pump
 * (core/tlsterm.c) drives both sessions through inject_pump; an exchange's
 * phase is c->inject_phase.
 */
#include "core/conn_int.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "core/an.h"
#include "core/credential.h"
#include "core/http1.h"
#include "core/log.h"
#include "core/mask.h"
#include "core/ring.h"
#include "core/timer.h"
#include "core/uppool.h"
#include "core/verdict.h"

static void inject_feed_upstream(struct conn *c);
static void inject_start(struct conn *c);
static void inject_deadline_arm(struct conn *c);
static void inject_upstream_end(struct conn *c, enum term_status st);

enum inject_phase {
	INJ_IDLE = 0, /* waiting for the agent's next request */
	INJ_REQUEST,  /* the rewritten head, then the body, into the upstream session */
	INJ_RESPONSE, /* the request is out: waiting for the end of the response */
};

static void inject_flush_up(struct conn *c)
{
	const uint8_t *data = NULL;

	if (c->upstream_tls == NULL || c->ufd < 0 || (c->ops & op_bit(dir_op(DIR_UP, ROP_SEND))))
		return;
	size_t n = conn_term(c)->out_peek(c->upstream_tls, &data);
	if (n > 0)
		prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, data, n);
}

void inject_recv_arm(struct conn *c)
{
	if (c->ufd < 0 || c->upstream_dead || c->down.holds_buf ||
	    (c->ops & op_bit(dir_op(DIR_DOWN, ROP_RECV))))
		return;
	prep_recv_select(c, dir_op(DIR_DOWN, ROP_RECV), c->ufd);
}

/*
 * Writes <len> bytes of the agent's request into the upstream's session; *<n>
 * says how many it took. The session may finish its handshake inside the
 * write, so a failure here is the upstream's (a certificate that does not
 * verify, a reset under the handshake), never the agent's: it ends the
 * upstream as a failed read does (inject_upstream_end, which answers the agent
 * while nothing of a response reached it; inject_pump writes that answer next
 * turn). Nothing goes into a session that ended: TERM_WANT_READ then.
 */
static enum term_status inject_upstream_write(struct conn *c, const void *data, size_t len,
					      size_t *n)
{
	*n = 0;
	if (c->upstream_dead)
		return TERM_WANT_READ;
	enum term_status st = conn_term(c)->write(c->upstream_tls, data, len, n);
	if (st != TERM_CLOSED && st != TERM_ERROR)
		return st;
	inject_upstream_end(c, st);
	return TERM_WANT_READ;
}

/* Rewrites request <req> (<head_len> bytes) into c->out, then sends it upstream. */
void inject_request(struct conn *c, const struct http1_request *req, size_t head_len)
{
	enum reason why = REASON_NONE;

	if (c->upstream_dead) {
		term_refuse(c, c->upstream_refusal != REASON_NONE ? (enum reason)c->upstream_refusal
								  : REASON_UPSTREAM_UNREACHABLE);
		return;
	}
	ssize_t head_out = credential_request_head(c->inject, req, c->head, head_len, c->out,
						   WORKER_HEAD_BUFFER_BYTES, &why);
	if (head_out < 0) {
		term_refuse(c, why);
		return;
	}
	if (req->body == HTTP1_BODY_LENGTH && req->content_length > LIMITS_TERM_REQUEST_BYTES_MAX) {
		term_refuse(c, REASON_BODY_TOO_LARGE); /* nothing of it went upstream */
		return;
	}
	c->term_req_bytes = 0;
	c->term_resp_bytes = 0;
	c->out_len = (uint32_t)head_out;
	c->out_off = 0;
	audit_decision(c, true, 0); /* the upstream's status is in the close record */
	c->req_body = (uint8_t)req->body;
	c->req_left = req->body == HTTP1_BODY_LENGTH ? req->content_length : 0;
	c->req_done = req->body == HTTP1_BODY_NONE;
	memset(&c->req_chunks, 0, sizeof(c->req_chunks));
	c->resp_head_done = false;
	c->resp_done = false;
	c->resp_started = false;
	c->head_method = req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0;
	c->keep_alive = req->keep_alive;
	c->inject_phase = INJ_REQUEST;
	c->resp_holding = false; /* no tail of an earlier response is held */
	c->resp_hold_over = false;
	term_drop(c, (uint32_t)head_len);
	inject_deadline_arm(c); /* a body that stalls: body_ms */
	hangup_watch(c);        /* the agent that leaves mid-body */
}

/*
 * The request's body goes no further (framed wrong, or past the cap): the
 * upstream, which holds part of it, is never used again, and the agent is
 * answered <why> in its place.
 */
static void inject_body_refused(struct conn *c, enum reason why)
{
	c->upstream_dead = true;
	c->upstream_reset = true;   /* it holds the body's part before the fault */
	c->inject_phase = INJ_IDLE; /* the answer goes to the agent, not upstream */
	c->out_len = 0;
	term_refuse(c, why);
	AN_ASSERT(c->term_close_after);
}

/*
 * Drops the <n> bytes of trailer fields at the front of the plaintext, which
 * <scanned> has framed: never forwarded (http1_chunked_scan_part), so no
 * field reaches the upstream beside the head the credential was swapped
 * into (a second Authorization, a Host) unchecked. They count towards the
 * body's cap as the rest of it does.
 */
static enum term_status inject_trailer_drop(struct conn *c, const struct http1_chunked *scanned,
					    uint32_t n)
{
	AN_ASSERT(c->req_body == HTTP1_BODY_CHUNKED);
	AN_ASSERT(n > 0 && n <= c->head_fill);
	c->req_chunks = *scanned;
	c->term_req_bytes += n;
	if (c->term_req_bytes > LIMITS_TERM_REQUEST_BYTES_MAX) {
		inject_body_refused(c, REASON_BODY_TOO_LARGE);
		return TERM_OK;
	}
	term_drop(c, n);
	return TERM_OK;
}

/* Request body bytes from the plaintext into the upstream session. */
static enum term_status inject_body(struct conn *c)
{
	struct http1_chunked probe = c->req_chunks;
	uint32_t take = c->head_fill;
	size_t n = 0;

	if (c->req_body == HTTP1_BODY_LENGTH && c->req_left < take)
		take = (uint32_t)c->req_left;
	if (c->req_body == HTTP1_BODY_CHUNKED) {
		bool trailer_field = false;
		ssize_t m = http1_chunked_scan_part(&probe, c->head, take, &trailer_field);
		if (m < 0) {
			inject_body_refused(c, REASON_BAD_REQUEST);
			return TERM_OK;
		}
		if (trailer_field)
			return inject_trailer_drop(c, &probe, (uint32_t)m);
		take = (uint32_t)m;
	}
	enum term_status st = take > 0 ? inject_upstream_write(c, c->head, take, &n) : TERM_OK;
	if (st != TERM_OK || n == 0) {
		if (take == 0 && c->req_body == HTTP1_BODY_CHUNKED && probe.done)
			c->req_done = true;
		return st;
	}
	if (c->req_body == HTTP1_BODY_CHUNKED)
		(void)http1_chunked_scan(&c->req_chunks, c->head, n);
	else
		c->req_left -= n;
	c->term_req_bytes += n;
	if (c->term_req_bytes > LIMITS_TERM_REQUEST_BYTES_MAX) {
		/* A chunked body past the cap: cut, the upstream sees the stream end early. */
		inject_body_refused(c, REASON_BODY_TOO_LARGE);
		return TERM_OK;
	}
	term_drop(c, (uint32_t)n);
	c->req_done = c->req_body == HTTP1_BODY_CHUNKED ? c->req_chunks.done : c->req_left == 0;
	return TERM_OK;
}

/* The agent's side: reads its plaintext, takes a request, writes it upstream. */
static enum term_status inject_agent_side(struct conn *c)
{
	if (c->out_len > 0 && c->inject_phase != INJ_REQUEST)
		return term_write_answer(c); /* a refusal */
	if (c->upgraded && c->head_fill > 0) {
		size_t n = 0;
		enum term_status st = inject_upstream_write(c, c->head, c->head_fill, &n);
		term_drop(c, (uint32_t)n);
		return st == TERM_OK && n == 0 ? TERM_WANT_WRITE : st;
	}
	if (c->upgraded) {
		uint32_t had = c->head_fill;
		enum term_status st = term_read_request(c);
		return st == TERM_OK && c->head_fill == had ? TERM_WANT_READ : st;
	}
	if (c->inject_phase == INJ_IDLE && term_request(c))
		return TERM_OK;
	if (c->inject_phase == INJ_REQUEST && c->out_off < c->out_len) {
		size_t n = 0;
		enum term_status st =
		    inject_upstream_write(c, c->out + c->out_off, c->out_len - c->out_off, &n);
		c->out_off += (uint32_t)n;
		if (c->out_off == c->out_len)
			c->out_len = 0;
		return st == TERM_OK && n == 0 ? TERM_WANT_WRITE : st;
	}
	if (c->inject_phase == INJ_REQUEST && !c->req_done && c->head_fill > 0) {
		enum term_status st = inject_body(c);
		if (st != TERM_OK || c->head_fill > 0)
			return st;
	}
	if (c->inject_phase == INJ_REQUEST && c->req_done) {
		c->inject_phase = INJ_RESPONSE;
		c->phase_since_ms = c->w->now_ms; /* the response head's deadline runs from here */
		inject_deadline_arm(c);
	}
	if (c->inject_phase == INJ_RESPONSE && c->head_fill >= LIMITS_HEAD_BYTES_MAX)
		return TERM_WANT_READ; /* a pipelined request waits for this response */
	uint32_t before = c->head_fill;
	enum term_status st = term_read_request(c);
	return st == TERM_OK && c->head_fill == before ? TERM_WANT_READ : st;
}

/*
 * Whether redirect <r> sends the agent somewhere its policy refuses: every
 * Location is read as clients read it (http1_location_target: "//host",
 * backslashes, any slashes after the scheme, userinfo), an absolute one is
 * decided as a request to it would be, and one no reading can place (another
 * scheme, a bad port, an encoded host) is refused. A relative one stays on
 * this host, which is allowed.
 */
static bool inject_redirect_denied(struct conn *c, const struct http1_response *r)
{
	const struct engine *e = c->w->e;
	const struct snapshot_sandbox *under = &c->snap->sandboxes[c->sandbox];

	for (uint32_t i = 0; i < r->header_count; i++) {
		const struct http1_header *h = &r->headers[i];
		struct http1_location to;
		struct verdict v;
		if (!http1_name_is(h->name, h->name_len, "location"))
			continue;
		http1_location_target(h->value, h->value_len, &to);
		if (to.kind == HTTP1_LOCATION_UNSAFE)
			return true;
		if (to.kind == HTTP1_LOCATION_RELATIVE)
			continue;
		e->ops->decide(c->snap->policy, under->profile, to.host, to.host_len, to.port, &v);
		if (verdict_refusal(&v) != REASON_NONE)
			return true; /* every Location is checked: a client may follow any of them */
	}
	return false;
}

/* Follows the response's framing over newly read bytes; sets resp_done at its end. */
static void inject_frame(struct conn *c)
{
	while (c->resp_scan < c->resp_fill && !c->resp_done) {
		char *p = c->resp + c->resp_scan;
		uint32_t avail = c->resp_fill - c->resp_scan;
		if (!c->resp_head_done) {
			struct http1_response r;
			ssize_t n = http1_parse_response(p, avail, &r);
			if (n == -EAGAIN)
				return;
			if (n < 0) {
				/* Malformed: never relayed as it is (its fields were not checked). */
				c->resp_refusal = (uint8_t)REASON_UPSTREAM_BAD_RESPONSE;
				return;
			}
			c->status = r.status;
			c->resp_keep_alive = r.keep_alive;
			if (r.status >= 300 && r.status < 400 && inject_redirect_denied(c, &r)) {
				c->resp_refusal = (uint8_t)REASON_REDIRECT_DENIED;
				return;
			}
			c->resp_body = (uint8_t)http1_response_body(&r, c->head_method);
			if (c->resp_body != HTTP1_BODY_NONE && !mask_readable_coding(&r)) {
				/* Asked for identity, sent coded: the masker could not read it. */
				c->resp_refusal = (uint8_t)REASON_UPSTREAM_BAD_RESPONSE;
				return;
			}
			if (r.status == 101) {
				/* WebSocket (or any upgrade): raw bytes both ways until one side ends. */
				c->resp_scan += (uint32_t)n;
				c->upgraded = true;
				c->resp_head_done = true;
				c->resp_body = HTTP1_BODY_CLOSE;
				c->resp_keep_alive = false;
				continue;
			}
			bool keep =
			    c->keep_alive && r.keep_alive && c->resp_body != HTTP1_BODY_CLOSE;
			/* One read is framed at a time with room for one head's growth: heads
			 * after it (interim ones piled into one read) must fit as well. */
			if (c->resp_fill + WORKER_HEAD_REWRITE_BYTES > WORKER_HEAD_BUFFER_BYTES) {
				c->resp_refusal = (uint8_t)REASON_UPSTREAM_BAD_RESPONSE;
				return;
			}
			c->resp_scan += resp_head_rewrite(c, &r, c->resp_scan, (uint32_t)n, keep);
			c->resp_left = r.content_length;
			memset(&c->resp_chunks, 0, sizeof(c->resp_chunks));
			memset(&c->resp_chunks_sent, 0, sizeof(c->resp_chunks_sent));
			c->resp_body_at = c->resp_scan;
			bool interim = r.status >= 100 && r.status < 200 && r.status != 101;
			c->resp_head_done = !interim;
			c->resp_done = !interim && c->resp_body == HTTP1_BODY_NONE;
			continue;
		}
		uint32_t take = avail;
		if (c->resp_body == HTTP1_BODY_LENGTH) {
			take = c->resp_left < avail ? (uint32_t)c->resp_left : avail;
			c->resp_left -= take;
			c->resp_done = c->resp_left == 0;
		} else if (c->resp_body == HTTP1_BODY_CHUNKED) {
			size_t kept = 0;
			ssize_t m = http1_chunked_strip(&c->resp_chunks, p, avail, &kept);
			if (m < 0) {
				/* A chunk framed wrong: none of this read goes on, and the
				 * response ends here (502 if nothing of it went yet; else the
				 * agent's connection closes, the body visibly short). */
				c->resp_refusal = (uint8_t)REASON_UPSTREAM_BAD_RESPONSE;
				return;
			}
			if (kept < (size_t)m) { /* trailer fields dropped: close their gap */
				memmove(p + kept, p + m, avail - (size_t)m);
				c->resp_fill -= (uint32_t)((size_t)m - kept);
			}
			take = (uint32_t)kept;
			c->resp_done = c->resp_chunks.done;
		}
		c->resp_scan += take;
		c->term_resp_bytes +=
		    take; /* the body's bytes (a chunked one's with its framing) */
	}
}

/* The exchange is over: back to idle for the next request, or the end. */
static void inject_exchange_done(struct conn *c)
{
	c->resp_fill = 0;
	c->resp_off = 0;
	c->resp_scan = 0;
	c->resp_head_done = false;
	c->resp_done = false;
	c->resp_holding = false;
	c->resp_hold_over = false;
	c->inject_phase = INJ_IDLE;
	timer_arm(c->w->timers, &c->timer, conn_next_request_ms(c));
	if (!c->resp_keep_alive || !c->keep_alive || c->upstream_dead)
		term_end(c, TERM_CLOSED);
}

/*
 * How far the response may be relayed: the secret is masked wherever it
 * appears (an upstream that echoes request headers must not hand it to the
 * agent), with as many asterisks, so the framing stays true. Until the
 * response ends, the last bytes read (as many as the secret less one) wait
 * for the next read, since a copy may straddle two, or for the hold's time
 * (LIMITS_INJECT_HOLD_MS, inject_timer), whichever comes first; then
 * they go as they are. They wait whatever they are: a wait only for a tail
 * that begins the secret would tell the agent, by its delay, that the bytes
 * it had the upstream reflect were a prefix of the secret (a key can be
 * recovered a byte at a time so). What masking cannot promise: a copy the
 * upstream sends in pieces further apart than the hold, cuts short, or
 * transforms (truncates, reverses) reaches the agent as sent; a copy split by
 * chunk framing is read across it, and a coded body is refused.
 */
static uint32_t inject_relay_limit(struct conn *c)
{
	static _Thread_local char view_bytes[WORKER_HEAD_BUFFER_BYTES];
	static _Thread_local uint16_t view_where[WORKER_HEAD_BUFFER_BYTES];
	static const struct http1_chunked body_start;
	const struct verdict_inject *in = c->inject;

	/* All of it once nothing more will come after it, or the hold is over. */
	bool all = c->resp_done || c->resp_hold_over || c->upstream_dead;
	if (!c->resp_head_done || c->resp_body != HTTP1_BODY_CHUNKED)
		return mask_relay_limit(c->resp, c->resp_off, c->resp_scan, in->secret,
					in->secret_len, all);
	/* A chunked body: its data is scanned across the chunks' framing; what is left of
	 * the head before it, as it is. */
	uint32_t body = c->resp_body_at > c->resp_off ? c->resp_body_at : c->resp_off;
	if (body > c->resp_scan)
		body = c->resp_scan;
	if (c->resp_off < body)
		(void)mask_relay_limit(c->resp, c->resp_off, body, in->secret, in->secret_len,
				       true);
	struct mask_view view = { view_bytes, view_where, WORKER_HEAD_BUFFER_BYTES };
	const struct http1_chunked *at = body > c->resp_off ? &body_start : &c->resp_chunks_sent;
	return mask_relay_limit_chunked(c->resp, body, c->resp_scan, at, in->secret, in->secret_len,
					all, &view);
}

/*
 * The exchange's deadline, as forward_mode's (core/forward.c): while the
 * request body is due, body_ms from the agent's last byte; once the request
 * is out and no byte of a response reached the agent, response_ms from the
 * request's end. Returns its time (UINT64_MAX: none now) and *<why>.
 */
static uint64_t inject_deadline(const struct conn *c, enum reason *why)
{
	const struct config *cfg = c->w->e->cfg;

	*why = REASON_NONE;
	if (c->inject_phase == INJ_REQUEST && !c->req_done) {
		*why = REASON_REQUEST_TIMEOUT;
		return c->active_ms + cfg->body_timeout_ms;
	}
	if (c->inject_phase == INJ_RESPONSE && !c->resp_head_done && !c->resp_started) {
		*why = REASON_UPSTREAM_TIMEOUT;
		return c->phase_since_ms + cfg->response_timeout_ms;
	}
	return UINT64_MAX;
}

static bool inject_awaiting_request(const struct conn *c)
{
	return c->inject_phase == INJ_IDLE && term_awaiting_request(c);
}

/* How long <c> may be quiet: the idle timeout, or between requests conn_next_request_ms. */
static uint64_t inject_idle_ms(const struct conn *c)
{
	return inject_awaiting_request(c) ? conn_next_request_ms(c) : c->w->e->cfg->idle_timeout_ms;
}

/* Arms the timer for the nearer of the exchange's deadline and the idle timeout. */
static void inject_deadline_arm(struct conn *c)
{
	enum reason why;
	uint64_t now = c->w->now_ms;
	uint64_t at = inject_deadline(c, &why);
	uint64_t idle_at = c->active_ms + inject_idle_ms(c);

	if (c->resp_holding)
		return; /* the hold's timer is shorter than either, and re-arms this */
	if (idle_at < at)
		at = idle_at;
	timer_arm(c->w->timers, &c->timer, (uint32_t)(at > now ? at - now : 0));
}

/*
 * inject_mode's timer. A held response tail's hold is over: the tail goes to
 * the agent now. A deadline passed is answered while nothing of a response
 * reached the agent: 408 request_timeout for a stalled body, 504
 * upstream_timeout for a response head that never came, audited, and the
 * upstream, holding a request cut short, is never used again. Else the idle
 * timeout, as the spine's; the timer is re-armed for the nearest.
 */
static bool inject_timer(struct conn *c)
{
	enum reason why;
	uint64_t now = c->w->now_ms;

	if (c->resp_holding) {
		c->resp_holding = false;
		c->resp_hold_over = true;
		inject_deadline_arm(c);
		term_pump(c);
		return true;
	}
	if (now >= inject_deadline(c, &why) && why != REASON_NONE) {
		c->upstream_dead = true;
		c->inject_phase = INJ_IDLE;
		c->out_len = 0;
		term_refuse(c, why);
		term_pump(c);
		return true;
	}
	if (now - c->active_ms >= inject_idle_ms(c)) {
		conn_close(c);
		return true;
	}
	inject_deadline_arm(c);
	return true;
}

/*
 * Writes what of the response may go to the agent now (inject_relay_limit).
 * TERM_OK with *<wrote> false when nothing is due; else the write's status.
 * A failure of the write is the agent's session's: it ends the agent's side
 * (term_end), never the upstream's.
 */
static enum term_status inject_relay_write(struct conn *c, bool *wrote)
{
	uint32_t limit = inject_relay_limit(c);
	size_t n = 0;

	*wrote = false;
	if (limit < c->resp_scan && !c->resp_holding) {
		/* A tail waits: for the next read, or the hold's time at most. */
		c->resp_holding = true;
		timer_arm(c->w->timers, &c->timer, LIMITS_INJECT_HOLD_MS);
	}
	if (c->resp_off >= limit)
		return TERM_OK;
	*wrote = true;
	enum term_status st =
	    conn_term(c)->write(c->client_tls, c->resp + c->resp_off, limit - c->resp_off, &n);
	if (c->resp_head_done && c->resp_body == HTTP1_BODY_CHUNKED &&
	    c->resp_off + n > c->resp_body_at) {
		/* The framing state follows what went, for the masker's next look. */
		uint32_t from = c->resp_off > c->resp_body_at ? c->resp_off : c->resp_body_at;
		(void)http1_chunked_scan(&c->resp_chunks_sent, c->resp + from,
					 c->resp_off + n - from);
	}
	c->resp_off += (uint32_t)n;
	c->resp_started |= n > 0 && c->resp_head_done; /* interim heads start nothing */
	if (st == TERM_CLOSED || st == TERM_ERROR) {
		term_end(c, st);
		return TERM_WANT_WRITE;
	}
	return st == TERM_OK && n == 0 ? TERM_WANT_WRITE : st;
}

/* The upstream's side: reads its plaintext and relays it to the agent. */
static enum term_status inject_upstream_side(struct conn *c)
{
	const struct term_ops *t = conn_term(c);
	size_t n = 0;
	bool wrote = false;

	enum term_status wst = inject_relay_write(c, &wrote);
	if (wrote)
		return wst;
	if (c->resp_off > 0 && c->resp_off < c->resp_fill) {
		/* What is held back moves to the front, so the buffer never fills with it. */
		uint32_t rest = c->resp_fill - c->resp_off;
		memmove(c->resp, c->resp + c->resp_off, rest);
		c->resp_scan -= c->resp_off;
		c->resp_body_at = c->resp_body_at > c->resp_off ? c->resp_body_at - c->resp_off : 0;
		c->resp_fill = rest;
		c->resp_off = 0;
	}
	if (c->resp_done && c->resp_off == c->resp_scan && c->inject_phase == INJ_RESPONSE) {
		inject_exchange_done(c);
		return TERM_OK;
	}
	if (c->resp_off == c->resp_fill) {
		c->resp_fill = c->resp_off = c->resp_scan = 0;
		c->resp_body_at = 0; /* it began at or before what went */
	}
	/* While a head is awaited, its rewrite's growth stays free (resp_head_rewrite). */
	uint32_t cap =
	    WORKER_HEAD_BUFFER_BYTES - (c->resp_head_done ? 0 : WORKER_HEAD_REWRITE_BYTES);
	uint32_t room = c->resp_fill < cap ? cap - c->resp_fill : 0;
	if (room == 0)
		return TERM_WANT_WRITE; /* a head larger than the buffer: refused below */
	enum term_status st = t->read(c->upstream_tls, c->resp + c->resp_fill, room, &n);
	if (st != TERM_OK)
		return st;
	c->resp_fill += (uint32_t)n;
	c->resp_hold_over = false; /* a new tail: held as long as any */
	inject_frame(c);
	if (c->resp_refusal != REASON_NONE) {
		enum reason why = (enum reason)c->resp_refusal;
		c->resp_refusal = REASON_NONE;
		c->resp_fill = c->resp_off = c->resp_scan = 0;
		c->upstream_dead = true; /* never reused after a response it got wrong */
		c->inject_phase = INJ_IDLE;
		c->out_len = 0;
		if (!c->resp_started) {
			term_refuse(c, why); /* nothing of it was relayed: the refusal instead */
		} else {
			c->reason = (uint8_t)why; /* in its close record; nothing more is written */
			term_end(c, TERM_CLOSED);
		}
	} else if (c->term_resp_bytes > LIMITS_TERM_RESPONSE_BYTES_MAX) {
		/* The body passed the limit in this read (no read follows one that did): its
		 * bytes past the limit are dropped, those before it relayed, and then the
		 * session is cut (inject_pump: no close_notify, so the agent cannot take the
		 * short body for the whole). */
		uint32_t over = (uint32_t)(c->term_resp_bytes - LIMITS_TERM_RESPONSE_BYTES_MAX);
		AN_ASSERT(over <= c->resp_scan - c->resp_off);
		c->resp_scan -= over;
		c->resp_fill = c->resp_scan;
		c->term_resp_bytes = LIMITS_TERM_RESPONSE_BYTES_MAX;
		c->reason = REASON_RESPONSE_TRUNCATED;
		audit_decision(c, false, reason_status(REASON_RESPONSE_TRUNCATED));
		c->upstream_dead = true;
	}
	return TERM_OK;
}

/* The upstream's session ended (<st>): finish what can be finished, refuse the rest. */
static void inject_upstream_end(struct conn *c, enum term_status st)
{
	const struct term_ops *t = conn_term(c);

	c->upstream_dead = true;
	/* A close-delimited body ends with the upstream, with or without a close_notify
	 * (many servers close TCP only): what came is the whole body, relayed as it came;
	 * never at a reset, which cut it. */
	if (c->resp_head_done && c->resp_body == HTTP1_BODY_CLOSE && !c->upgraded &&
	    !c->upstream_aborted) {
		c->resp_scan = c->resp_fill;
		c->resp_done = true;
	}
	/* Once a byte of the response went to the agent, nothing else is ever written on it:
	 * the rest due is relayed and the conn ends (inject_pump), short if the upstream was. */
	if (c->resp_done || c->resp_started)
		return;
	/* Nothing of a response: the upstream dropped the connection (as forwarding says it);
	 * part of a head: a response it got wrong. */
	bool tls = st == TERM_ERROR && strstr(t->error(c->upstream_tls), "verify") != NULL;
	bool nothing = c->resp_fill == 0 && !c->resp_head_done;
	c->upstream_refusal = (uint8_t)(tls       ? REASON_UPSTREAM_TLS_FAILED
					: nothing ? REASON_UPSTREAM_UNREACHABLE
						  : REASON_UPSTREAM_BAD_RESPONSE);
	if (st == TERM_ERROR)
		log_debug("conn %llx: upstream TLS: %s", (unsigned long long)c->id,
			  t->error(c->upstream_tls));
	if (c->inject_phase != INJ_IDLE) {
		c->inject_phase = INJ_IDLE;
		c->out_len = 0; /* what was left of the request goes nowhere */
		term_refuse(c, (enum reason)c->upstream_refusal);
	} else if (st == TERM_CLOSED) {
		term_end(c, TERM_CLOSED); /* an idle upstream left: the agent reconnects */
	}
}

static void inject_pump(struct conn *c)
{
	for (uint32_t turn = 0; c->state == ST_TERM && !c->term_closing; turn++) {
		AN_ASSERT(turn < 1000000u);
		inject_feed_upstream(c);
		bool was_dead = c->upstream_dead;
		enum term_status a = inject_agent_side(c);
		if (a == TERM_CLOSED || a == TERM_ERROR) {
			term_end(c, a);
			break;
		}
		bool wrote = false;
		bool dead = c->upstream_dead; /* as it was before this turn's upstream step */
		if (dead && !was_dead)
			continue; /* it ended under the agent's write: what it left is next */
		/* The upstream gone, what it sent is still relayed (never more: a tail that
		 * could begin the secret waits for an end that will not come). */
		enum term_status u = dead ? inject_relay_write(c, &wrote) : inject_upstream_side(c);
		if (dead && !wrote)
			u = TERM_WANT_READ;
		if (!dead && (u == TERM_CLOSED || u == TERM_ERROR))
			inject_upstream_end(c, u);
		else if (dead && (u == TERM_CLOSED || u == TERM_ERROR))
			break;
		else if (a != TERM_OK && u != TERM_OK)
			break;
	}
	/* A response relayed whole, or cut short by its upstream after it began: the end. */
	bool all_out =
	    c->resp_off == c->resp_scan || (!c->resp_done && c->resp_off >= inject_relay_limit(c));
	if (c->upstream_dead && (c->resp_done || c->resp_started) && all_out && !c->term_closing &&
	    c->state == ST_TERM) {
		if (c->reason == REASON_RESPONSE_TRUNCATED) {
			term_abort(c); /* cut at the limit: never to be read as whole */
		} else if (c->upstream_aborted && c->inject_phase == INJ_RESPONSE &&
			   !c->resp_done) {
			c->reason = REASON_UPSTREAM_RESET;
			term_abort(c); /* cut by a reset: the agent must not read it as whole */
		} else {
			term_end(c, TERM_CLOSED);
		}
	}
	term_flush(c);
	inject_flush_up(c);
}

/*
 * The worker's pool (core/uppool.h) keeps an upstream for the next agent
 * connection when this one ends between exchanges: same host, port, roots
 * and secret. Taken, it is checked against the policy the request was just
 * decided with (its address must still be permitted), and the conn goes
 * straight to terminating the agent's TLS, with no connect and no upstream
 * handshake.
 */
static struct uppool_key inject_pool_key(const struct conn *c)
{
	const struct verdict_inject *in = c->inject;

	AN_ASSERT(in != NULL);
	return (struct uppool_key){ .host = c->host,
				    .host_len = c->host_len,
				    .port = c->port,
				    .ca_file = in->upstream_ca,
				    .secret = in->secret,
				    .secret_len = in->secret_len };
}

/* inject_mode's pooled: takes a pooled upstream for the inject rule; true when it took one. */
static bool inject_take_pooled(struct conn *c)
{
	struct worker *w = c->w;
	const struct uppool_key k = inject_pool_key(c);
	struct sockaddr_storage addr;
	int32_t fd = -1;
	void *session = NULL;

	AN_ASSERT(c->ufd < 0 && c->upstream_tls == NULL);
	if (!w->e->term_has_ca || !uppool_take(&w->uppool, &k, &fd, &session, &addr))
		return false;
	c->ufd = fd;
	c->upstream_tls = session; /* the conn's now: freed with it whatever happens next */
	size_t len =
	    addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memcpy(&c->addrs[0], &addr, len);
	c->addr_count = 1;
	c->addr_next = 0;
	if (!w->e->ops->address_permitted(c->snap->policy, (const struct sockaddr *)&addr)) {
		/* a reload took the address away */
		respond_private_address(c, (const struct sockaddr *)&addr);
		return true;
	}
	c->reused_upstream = true;
	c->state = ST_CONNECT;
	inject_start(c);
	return true;
}

/*
 * Whether the request head <head>/<len> carries one of the sandbox's
 * placeholders where its rule does not send it (<own>: the inject rule the
 * request goes to, NULL: none): an agent steered to send its credential
 * elsewhere. Counted when so; the caller refuses placeholder_misdirected.
 */
bool placeholder_misdirected(struct conn *c, const char *head, size_t len,
			     const struct verdict_inject *own)
{
	const struct verdict_ops *ops = c->w->e->ops;

	AN_ASSERT(c->snap != NULL);
	if (ops->placeholder_elsewhere == NULL ||
	    !ops->placeholder_elsewhere(c->snap->policy, c->snap->sandboxes[c->sandbox].profile,
					head, len, own))
		return false;
	c->w->stats.misdirected++;
	return true;
}

/*
 * The spine's guard, on every tier: whether the head of <c> carries a
 * placeholder of the sandbox that the rule of <v> does not send.
 */
bool verdict_placeholder_misdirected(struct conn *c, const struct verdict *v)
{
	return placeholder_misdirected(c, c->head, c->head_len, v->inject);
}

/* True when the upstream may serve another agent connection (see inject_park). */
static bool inject_parkable(const struct conn *c)
{
	const struct term_ops *t = conn_term(c);

	if (c->inject == NULL || c->upstream_tls == NULL || c->ufd < 0 || c->w->stopping)
		return false;
	if (c->upstream_dead || c->upgraded || c->inject_phase != INJ_IDLE || c->resp_fill != 0 ||
	    c->down.holds_buf || c->requests == 0 || !c->resp_keep_alive)
		return false;
	return t->idle(c->upstream_tls);
}

/*
 * At the conn's end (no op of its own in flight any more): hands a parkable
 * upstream, slot and session, to the worker's pool. True when it took them.
 */
static bool inject_park(struct conn *c)
{
	struct worker *w = c->w;

	if (!inject_parkable(c))
		return false;
	const struct uppool_key k = inject_pool_key(c);
	const union conn_addr *a = &c->addrs[c->addr_next < c->addr_count ? c->addr_next : 0];
	socklen_t len = a->sa.sa_family == AF_INET6 ? sizeof(a->v6) : sizeof(a->v4);
	AN_ASSERT(c->addr_count > 0);
	if (!uppool_park(&w->uppool, &k, &a->sa, len, c->ufd, c->upstream_tls, w->now_ms))
		return false;
	c->ufd = -1;
	c->upstream_tls = NULL;
	return true;
}

/* The upstream accepted an inject CONNECT: terminate both TLS sessions. */
static void inject_start(struct conn *c)
{
	struct worker *w = c->w;
	const struct term_ops *t = conn_term(c);

	c->resp = c->resp != NULL ? c->resp : pool_take(&w->heads);
	bool ca = t != NULL && w->term != NULL && w->e->term_has_ca;
	bool pooled = c->upstream_tls != NULL; /* taken from the worker's pool: already verified */
	if (!pooled)
		c->upstream_tls =
		    ca && c->resp != NULL
			? t->client_new(w->term, c->host, c->host_len, c->inject->upstream_ca)
			: NULL;
	if (c->upstream_tls == NULL || c->resp == NULL) {
		respond(c, !ca ? REASON_TIER_UNAVAILABLE : REASON_OVERLOADED);
		return;
	}
	term_start(c);
	if (c->state != ST_TERM)
		return;
	if (!pooled) {
		c->upstream_tls_started_us = (uint32_t)timer_now_us();
		c->upstream_tls_timed = true;
		(void)t->handshake(
		    c->upstream_tls); /* the ClientHello, while the agent's arrives */
	}
	inject_flush_up(c);
	inject_recv_arm(c);
}

static void on_inject_recv(struct conn *c, int res)
{
	struct relay *r = &c->down;
	const struct term_ops *t = conn_term(c);

	if (res > 0) {
		r->buf_off = 0;
		r->buf_len = (uint32_t)res;
		/* Idle is no byte either way: a long answer streams on. */
		c->active_ms = c->w->now_ms;
	} else if (res == 0 || (res < 0 && res != -ENOBUFS)) {
		/* A reset comes after the bytes ahead of it, which are all in: what the session
		 * made of them is still relayed (inject_pump), then the agent's stream is cut. */
		if (res < 0)
			c->upstream_aborted = true;
		t->feed_eof(c->upstream_tls);
	}
	if (c->state != ST_TERM)
		return;
	if (res == -ENOBUFS)
		nobufs_wait(c); /* re-armed by conn_on_buffers */
	term_pump(c);
}

/*
 * Feeds the upstream's ciphertext held in the down relay's buffer into its
 * session; once all of it went in, the buffer goes back and the next receive
 * is armed. While the agent reads slowly the session stays full, the buffer
 * stays held and the upstream is not read: its TCP window slows it down.
 */
static void inject_feed_upstream(struct conn *c)
{
	struct relay *r = &c->down;

	if (!r->holds_buf || c->upstream_tls == NULL)
		return;
	const uint8_t *p = ring_buf(conn_ring(c), r->bid) + r->buf_off;
	ssize_t n = conn_term(c)->feed(c->upstream_tls, p, r->buf_len - r->buf_off);
	if (n > 0)
		r->buf_off += (uint32_t)n;
	if (r->buf_off < r->buf_len)
		return;
	ring_buf_return(conn_ring(c), r->bid);
	r->holds_buf = false;
	inject_recv_arm(c);
}

static void on_inject_send(struct conn *c, int res)
{
	if (res <= 0) {
		/* The upstream's socket refused its session's bytes (a reset): ended as a
		 * reset read ends it, the agent answered while no response reached it. */
		c->upstream_aborted = true;
		if (!c->upstream_dead)
			inject_upstream_end(c, TERM_ERROR);
		term_pump(c);
		return;
	}
	c->bytes_up += (uint64_t)res; /* the upstream session's bytes, as its socket took them */
	conn_term(c)->out_consume(c->upstream_tls, (size_t)res);
	term_pump(c);
}

static void inject_io(struct conn *c, int dir, uint32_t rop, int res, uint32_t cqe_flags)
{
	(void)cqe_flags;
	if (term_io(c, dir, rop, res))
		return;
	if (dir == DIR_UP && rop == ROP_POLL) {
		/* The agent hung up: mid-body, its upstream, holding a request cut short, is reset. */
		if (hangup_seen(res) && c->inject_phase == INJ_REQUEST && !c->req_done) {
			c->upstream_reset = true;
			conn_close(c);
		}
		return;
	}
	if (dir == DIR_DOWN && rop == ROP_RECV)
		on_inject_recv(c, res);
	else if (dir == DIR_UP && rop == ROP_SEND)
		on_inject_send(c, res);
}

/* Buffers are back: the upstream's receive, then the agent's. */
static void inject_buffers(struct conn *c)
{
	inject_recv_arm(c);
	term_recv_arm(c);
}

/* At the conn's end: a verified upstream between exchanges serves the next conn. */
static void inject_end(struct conn *c)
{
	if (c->inject != NULL && c->ufd >= 0)
		(void)inject_park(c);
	if (c->inject_phase == INJ_REQUEST && !c->req_done)
		c->upstream_reset = true; /* the agent left mid-body: never a close_notify */
}

/* The agent's end: mid-body, its upstream, holding a request cut short, is reset. */
static void inject_client_eof(struct conn *c)
{
	if (c->inject_phase == INJ_REQUEST && !c->req_done)
		c->upstream_reset = true;
	term_eof(c);
}

const struct conn_mode inject_mode = {
	.state = ST_TERM,
	.connected = inject_start,
	.io = inject_io,
	.buffers = inject_buffers,
	.pump = inject_pump,
	.client_data = term_client_data,
	.client_eof = inject_client_eof,
	.timer = inject_timer,
	.pooled = inject_take_pooled,
	.parkable = inject_parkable,
	.end = inject_end,
	.awaiting_request = inject_awaiting_request,
};
