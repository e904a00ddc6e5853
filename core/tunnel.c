/*
 * The CONNECT tunnel, for the passthrough and local tiers and for a gateway
 * request the agent upgraded: the 200 goes to the client, the early data
 * (what the client sent after its head) up, then two independent relays, up
 * (client -> upstream) and down (upstream -> client).
 *
 * A relay waits with a poll (no buffer, no pipe: an idle tunnel holds
 * nothing), takes a pipe from the worker's pool and splices socket -> pipe ->
 * socket while data keeps coming, then gives the pipe back. With no pipe free
 * it copies through one provided buffer instead. EOF on one side becomes
 * shutdown(SHUT_WR) on the other; an error on either aborts both.
 *
 * A relay's states (enum relay_state): PRELUDE while the 200 or the early
 * data goes out, then POLL -> SPLICE_IN -> SPLICE_OUT (splice path) or
 * RECV -> SEND (copy path), round again, and SHUT -> DONE after the source's
 * EOF. Invariants: a relay holds a pipe or a provided buffer only while bytes
 * are in it; the conn closes when both relays are DONE. splice_in, splice_out
 * and on_relay stay in this one file, so the splice path inlines.
 *
 * A passthrough tunnel first checks that it goes where its CONNECT said (no
 * domain fronting): the up relay starts in FIRST_FLIGHT, reading the
 * client's first bytes into the head buffer, after the CONNECT's head, and
 * sending nothing up. A TLS ClientHello must name the CONNECT host, or
 * none (core/clienthello.h), and so must a second one (after a TLS 1.3
 * HelloRetryRequest): the client's records are read until they are
 * encrypted (tls_watch_scan), then the relay is what it always was, so the
 * check costs a copy of the client's first flights; what TLS then encrypts
 * is not ours to read.
 * Plain HTTP/1 stays readable, so its every request is checked: the up relay
 * copies through the head buffer, frames each body (Content-Length, chunked)
 * to find the next head where the server will, and each head's target and
 * Host must name the CONNECT's host and port; an Upgrade, after which nothing
 * is HTTP, is refused. HTTP/2 in clear, whose :authority is not read here, is
 * refused; any other protocol passes. A refusal is sni_mismatch (or the
 * framing's own reason), audited with what the client named, and answered in
 * the client's protocol, a TLS unrecognized_name alert or the deny contract's
 * 403, while nothing from the upstream has reached the client; after that the
 * tunnel only closes. The rule's `server_name_check: false` skips the check.
 */
#include "core/conn_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "core/an.h"
#include "core/clienthello.h"
#include "core/http1.h"
#include "core/log.h"
#include "core/pipepool.h"
#include "core/pool.h"
#include "core/ring.h"
#include "core/timer.h"

static void relay_arm(struct conn *c, int dir);
static void up_prelude_step(struct conn *c);
static void first_flight_step(struct conn *c);
static void checked_up_step(struct conn *c);
static void relay_shut(struct conn *c, int dir);
static void relay_destination_failed(struct conn *c, int dir);
static void relay_maybe_done(struct conn *c);
static bool first_flight_buffer(struct conn *c);

/*
 * A splice-in of at least this much means the source is streaming: the relay
 * splices again at once instead of polling first. Sockets are non-blocking,
 * so a source that went quiet costs one -EAGAIN, never a blocked io-wq thread
 * (io_uring runs every splice in its worker threads).
 */
#define CONN_STREAMING_BYTES (16u * 1024u)

static void tunnel_start(struct conn *c)
{
	c->state = ST_TUNNEL;
	c->reason = REASON_NONE;
	audit_decision(c, true, 200);
	head_recv_stop(c);
	c->phase_since_ms = 0; /* the first flight's first byte sets it (first_flight_step) */
	timer_arm(c->w->timers, &c->timer, c->w->e->cfg->idle_timeout_ms);
	tunnel_relay_start(c, reply_established, sizeof(reply_established) - 1);
}

void tunnel_relay_start(struct conn *c, const char *reply, uint32_t len)
{
	c->down.state = R_PRELUDE;
	c->out_ptr = reply;
	c->out_len = len;
	c->out_off = 0;
	prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, c->out_ptr, c->out_len);
	c->up.state = c->tunnel_checks_name ? R_FIRST_FLIGHT : R_PRELUDE;
	if (c->flags & F_CLIENT_EOF)
		c->up.eof = true;
	if (c->up.state == R_FIRST_FLIGHT)
		first_flight_step(c);
	else
		up_prelude_step(c);
}

/* ---- the first flight's check ------------------------------------------ */

/* First-flight bytes read at most before the check must have an answer. */
#define TUNNEL_FIRST_FLIGHT_BYTES_MAX (CLIENTHELLO_MESSAGE_BYTES_MAX + 512u)

/* A fatal unrecognized_name alert (RFC 8446 section 6), in a record of the version a
 * ClientHello's record carries: what a TLS client can be told before any key, and
 * what the terminated tiers answer a server name that is not the CONNECT's. */
static const char tls_alert_unrecognized_name[] = "\x15\x03\x01\x00\x02\x02\x70";

/* The HTTP/2 connection preface (RFC 9113 section 3.4), as far as it names the protocol. */
static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* The ClientHello's joined handshake bytes: the worker's own, used within one call. */
static _Thread_local uint8_t clienthello_scratch[CLIENTHELLO_MESSAGE_BYTES_MAX + 4];

/* What a TLS tunnel's up relay still reads (tls_watch_scan). */
enum tunnel_tls_watch {
	TLS_WATCH_NONE = 0,
	TLS_WATCH_CLEAR, /* before the client's ChangeCipherSpec */
	TLS_WATCH_CCS,   /* after it */
	TLS_WATCH_OVER,  /* encrypted: what is checked goes up, then the splice relay */
};

#define TUNNEL_TLS_WATCH_BYTES (64u * 1024u)

enum first_flight {
	FIRST_FLIGHT_WAIT = 0, /* more bytes are needed to tell */
	FIRST_FLIGHT_PASS,     /* it names the CONNECT's host, or no server at all */
	FIRST_FLIGHT_HTTP,     /* plain HTTP/1: every request is checked as it comes */
	FIRST_FLIGHT_TLS,      /* a ClientHello that passed: the next records are read too */
	FIRST_FLIGHT_REFUSE,   /* it names another server: sni_mismatch */
	FIRST_FLIGHT_BAD_HTTP, /* an HTTP/1 head the parser refuses: bad_request */
	FIRST_FLIGHT_UPGRADE,  /* an HTTP/1 request to switch protocols: upgrade_refused */
	FIRST_FLIGHT_TOO_LONG, /* an HTTP/1 head over the limit: headers_too_large */
	FIRST_FLIGHT_TIMEOUT,  /* an HTTP/1 head not whole within head_ms: request_timeout */
};

/* Whether first flight <p>/<n> begins with a TLS record (any type): a refusal is an alert. */
static bool flight_is_tls(const char *p, size_t n)
{
	return n > 0 && (uint8_t)p[0] >= 20 && (uint8_t)p[0] <= 24;
}

static bool host_is_ip_literal(const char *host)
{
	struct in6_addr a;
	return inet_pton(AF_INET, host, &a) == 1 || inet_pton(AF_INET6, host, &a) == 1;
}

/* A TLS first flight: its server name, or none where the CONNECT named an address. */
static enum first_flight tls_flight(const struct conn *c, const char *flight, size_t n,
				    char *detail, size_t cap, struct clienthello_name *hello)
{
	const uint8_t *p = (const uint8_t *)flight;
	struct clienthello_name sni;
	enum clienthello_result r =
	    clienthello_server_name(p, n, clienthello_scratch, sizeof(clienthello_scratch), &sni);

	*hello = sni;

	if (r == CLIENTHELLO_NEED_MORE)
		return FIRST_FLIGHT_WAIT;
	if (r == CLIENTHELLO_MALFORMED || r == CLIENTHELLO_NOT_TLS) {
		snprintf(detail, cap,
			 "a TLS ClientHello this proxy cannot read for its server name");
		return FIRST_FLIGHT_REFUSE;
	}
	if (sni.encrypted) {
		/* The name that counts is inside, encrypted to the server: whatever the outer
		 * name, a server that decrypts it serves the inner one (draft-ietf-tls-esni). */
		snprintf(detail, cap,
			 "an Encrypted Client Hello (its inner server name cannot be read)");
		return FIRST_FLIGHT_REFUSE;
	}
	if (r == CLIENTHELLO_NO_NAME)
		return FIRST_FLIGHT_PASS; /* it names no other server: the server picks its default,
					   * as it must for an address (RFC 6066) */
	if (!host_is_ip_literal(c->host) &&
	    clienthello_names_host(sni.name, sni.len, c->host, c->host_len))
		return FIRST_FLIGHT_PASS;
	snprintf(detail, cap, "TLS server name \"%.*s\" is not the CONNECT host", (int)sni.len,
		 sni.name);
	return FIRST_FLIGHT_REFUSE;
}

/*
 * One HTTP/1 request head at <p>/<n> in a tunnel: its target's authority and
 * its Host must name the CONNECT's host and port. On PASS, *<req> is the
 * parsed head (its body framing, its length).
 */
static enum first_flight http_head_check(const struct conn *c, const char *p, size_t n,
					 struct http1_request *req, char *detail, size_t cap)
{
	enum reason why;
	ssize_t len = http1_parse_request(p, n, req, &why);

	if (len == -EAGAIN)
		return n > LIMITS_HEAD_BYTES_MAX ? FIRST_FLIGHT_TOO_LONG : FIRST_FLIGHT_WAIT;
	if (len < 0) {
		snprintf(detail, cap, "an HTTP request in the tunnel: %s", reason_code(why));
		return why == REASON_HEADERS_TOO_LARGE ? FIRST_FLIGHT_TOO_LONG
						       : FIRST_FLIGHT_BAD_HTTP;
	}
	if (req->is_connect) {
		snprintf(detail, cap, "a CONNECT inside the tunnel");
		return FIRST_FLIGHT_REFUSE;
	}
	if (req->form == HTTP1_FORM_ABSOLUTE &&
	    (req->port != c->port ||
	     !clienthello_names_host(req->host, req->host_len, c->host, c->host_len))) {
		snprintf(detail, cap, "HTTP target \"%.*s\" is not the CONNECT host",
			 (int)req->authority_len, req->authority);
		return FIRST_FLIGHT_REFUSE;
	}
	if (req->host_header != NULL && !http1_host_names(req->host_header, req->host_header_len,
							  c->host, c->host_len, c->port)) {
		snprintf(detail, cap, "HTTP Host \"%.*s\" is not the CONNECT host",
			 (int)req->host_header_len, req->host_header);
		return FIRST_FLIGHT_REFUSE;
	}
	if ((http1_name_is(req->method, req->method_len, "GET") ||
	     http1_name_is(req->method, req->method_len, "HEAD")) &&
	    req->body != HTTP1_BODY_NONE &&
	    !(req->body == HTTP1_BODY_LENGTH && req->content_length == 0)) {
		/* Content on a GET has no meaning (RFC 9110 section 9.3.1), and a server that
		 * never reads it takes it for the next request, which was never checked. */
		snprintf(detail, cap, "a %.*s with content in a checked tunnel",
			 (int)req->method_len, req->method);
		return FIRST_FLIGHT_BAD_HTTP;
	}
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		if (http1_name_is(h->name, h->name_len, "expect") &&
		    !http1_name_is(h->value, h->value_len, "100-continue")) {
			/* An expectation a server refuses (417) before the body it then reads as
			 * the next request. */
			snprintf(detail, cap,
				 "an Expect other than 100-continue in a checked tunnel");
			return FIRST_FLIGHT_BAD_HTTP;
		}
	}
	if (http1_request_upgrades(req)) {
		/* What follows a 101 is no HTTP to check: an upgrade ends the checking. */
		snprintf(detail, cap, "an HTTP upgrade inside a checked tunnel");
		return FIRST_FLIGHT_UPGRADE;
	}
	return FIRST_FLIGHT_PASS;
}

static enum first_flight first_flight_check(const struct conn *c, const char *p, size_t n,
					    char *detail, size_t cap)
{
	size_t skip;

	if (n == 0)
		return FIRST_FLIGHT_WAIT;
	struct clienthello_name hello;
	if ((uint8_t)p[0] == 22) {
		enum first_flight v = tls_flight(c, p, n, detail, cap, &hello);
		return v == FIRST_FLIGHT_PASS ? FIRST_FLIGHT_TLS : v;
	}
	if ((uint8_t)p[0] >= 20 && (uint8_t)p[0] <= 24) {
		/* Another TLS record first (a ChangeCipherSpec, an alert): servers skip it and
		 * read the hello after it, so it is no other protocol, and nothing precedes a
		 * ClientHello in a TLS client's first flight. */
		if (n < 2)
			return FIRST_FLIGHT_WAIT;
		if (p[1] == 3) {
			snprintf(detail, cap, "a TLS record of type %u before the ClientHello",
				 (unsigned)(uint8_t)p[0]);
			return FIRST_FLIGHT_REFUSE;
		}
	}
	size_t h2 = n < sizeof(h2_preface) - 1 ? n : sizeof(h2_preface) - 1;
	if (memcmp(p, h2_preface, h2) == 0) {
		if (h2 < sizeof(h2_preface) - 1)
			return FIRST_FLIGHT_WAIT;
		snprintf(detail, cap, "HTTP/2 in clear (its :authority is not read here)");
		return FIRST_FLIGHT_REFUSE;
	}
	switch (http1_request_line_shape(p, n, &skip)) {
	case HTTP1_SHAPE_MAYBE:
		return FIRST_FLIGHT_WAIT;
	case HTTP1_SHAPE_YES:
		return FIRST_FLIGHT_HTTP; /* checked request by request: checked_up_step */
	case HTTP1_SHAPE_NOT:
	default:
		return FIRST_FLIGHT_PASS; /* another protocol: names no HTTP or TLS server */
	}
}

/*
 * The first flight names another server: refused, audited with <detail>, and
 * answered in the protocol the client speaks while nothing from the
 * upstream has reached it (the 200 is out, the down relay only polls).
 */
static void first_flight_refuse(struct conn *c, enum first_flight verdict, const char *detail,
				bool tls)
{
	const struct relay *down = &c->down;
	enum reason why = verdict == FIRST_FLIGHT_BAD_HTTP   ? REASON_BAD_REQUEST
			  : verdict == FIRST_FLIGHT_UPGRADE  ? REASON_UPGRADE_REFUSED
			  : verdict == FIRST_FLIGHT_TOO_LONG ? REASON_HEADERS_TOO_LARGE
			  : verdict == FIRST_FLIGHT_TIMEOUT  ? REASON_REQUEST_TIMEOUT
							     : REASON_SNI_MISMATCH;
	bool answerable = down->bytes == 0 && down->pipe == NULL && !down->holds_buf &&
			  (down->state == R_POLL || down->state == R_IDLE);

	c->up.state = R_IDLE;
	if (!answerable) {
		c->reason = (uint8_t)why;
		c->w->stats.denied++;
		audit_decision_detail(c, false, reason_status(why), detail);
		conn_close(c);
		return;
	}
	const struct refusal_extra x = {
		.detail = detail,
		.reply = tls ? tls_alert_unrecognized_name : NULL,
		.reply_len = tls ? (uint32_t)sizeof(tls_alert_unrecognized_name) - 1 : 0,
	};
	respond_with(c, why, &x);
}

/* The head buffer the first flight gathers in, taken again if a silent tunnel gave it
 * back: true, or false when the pool has none (the tunnel is closed: overloaded). */
static bool first_flight_buffer(struct conn *c)
{
	if (c->head != NULL)
		return true;
	c->head = pool_take(&c->w->heads);
	c->head_fill = 0;
	c->head_len = 0;
	c->early_off = 0;
	if (c->head != NULL)
		return true;
	log_debug("conn %llx: no head buffer for a first flight", (unsigned long long)c->id);
	conn_close(c);
	return false;
}

/*
 * The up relay's received <len> bytes (its provided buffer) join the head
 * buffer, taken again if the tunnel gave it back, and the provided buffer goes
 * back. False when no head buffer was left (the tunnel is closing).
 */
static bool client_bytes_keep(struct conn *c, uint32_t len)
{
	struct relay *r = &c->up;

	AN_ASSERT(r->holds_buf);
	if (!first_flight_buffer(c))
		return false;
	AN_ASSERT(c->head_fill + len <= WORKER_HEAD_BUFFER_BYTES);
	memcpy(c->head + c->head_fill, ring_buf(conn_ring(c), r->bid), len);
	c->head_fill += len;
	ring_buf_return(conn_ring(c), r->bid);
	r->holds_buf = false;
	return true;
}

/*
 * Moves the first flight on: the early data gathered behind the CONNECT's head,
 * then checked; passed, it goes up as early data; undecided, one more receive.
 * Waits for the cancelled head receive and for the 200's send, so that what
 * the client sent arrives in order and a refusal is the next thing it reads.
 */
static void first_flight_step(struct conn *c)
{
	struct relay *r = &c->up;
	char detail[128];

	if (c->state != ST_TUNNEL || r->state != R_FIRST_FLIGHT)
		return;
	if (c->ops & (op_bit(OP_HEAD_RECV) | op_bit(dir_op(DIR_UP, ROP_RECV))))
		return;
	if (c->down.state == R_PRELUDE)
		return; /* the 200 is still going out */
	if (c->early_count > 0 && !first_flight_buffer(c))
		return;
	while (c->early_count > 0) {
		uint16_t bid;
		uint32_t off;
		uint32_t n = early_front(c, &bid, &off);
		if (c->head_fill + n > WORKER_HEAD_BUFFER_BYTES) {
			first_flight_refuse(c, FIRST_FLIGHT_REFUSE,
					    "a first flight too long to check", false);
			return;
		}
		memcpy(c->head + c->head_fill, (const char *)ring_buf(conn_ring(c), bid) + off, n);
		c->head_fill += n;
		early_advance(c, n);
	}
	if (c->head == NULL || c->head_fill == c->head_len) {
		/* Nothing yet: a silent tunnel holds no buffer (an idle one, or one whose
		 * server speaks first); the receive takes one when bytes come. */
		if (c->head != NULL && !c->ingress)
			buffers_release(c);
		if (r->eof) {
			r->state = R_PRELUDE;
			up_prelude_step(c);
			return;
		}
		prep_recv_select(c, dir_op(DIR_UP, ROP_RECV), c->cfd);
		return;
	}
	if (c->phase_since_ms == 0)
		c->phase_since_ms = c->w->now_ms; /* the first byte: head_ms runs from here */
	const char *p = c->head + c->head_len;
	size_t n = c->head_fill - c->head_len;
	detail[0] = '\0';
	enum first_flight verdict = first_flight_check(c, p, n, detail, sizeof(detail));
	bool room = n < TUNNEL_FIRST_FLIGHT_BYTES_MAX &&
		    c->head_fill + conn_ring(c)->buf_bytes <= WORKER_HEAD_BUFFER_BYTES;
	if (verdict == FIRST_FLIGHT_WAIT && r->eof) {
		/* Ended before it named anything. A TLS hello cut short starts no session;
		 * anything else is read as HTTP, whose head left unfinished never goes up
		 * (a lenient server takes the end of the stream for the end of a head). */
		verdict = n == 0 || (uint8_t)p[0] == 22 ? FIRST_FLIGHT_PASS : FIRST_FLIGHT_HTTP;
	}
	if (verdict == FIRST_FLIGHT_WAIT && !room) {
		snprintf(detail, sizeof(detail), "a first flight over %u bytes",
			 TUNNEL_FIRST_FLIGHT_BYTES_MAX);
		verdict = FIRST_FLIGHT_REFUSE;
	}
	switch (verdict) {
	case FIRST_FLIGHT_WAIT:
		if (n > 0) /* held: the first flight's deadline now applies (tunnel_timer) */
			timer_arm(c->w->timers, &c->timer, 0);
		prep_recv_select(c, dir_op(DIR_UP, ROP_RECV), c->cfd);
		return;
	case FIRST_FLIGHT_PASS:
		r->state = R_PRELUDE;
		up_prelude_step(c);
		return;
	case FIRST_FLIGHT_TLS:
	case FIRST_FLIGHT_HTTP:
		/* The flight moves to the head buffer's start: from now on it holds
		 * what the client sent and did not go up yet (checked_up_step). */
		memmove(c->head, p, n);
		c->head_fill = (uint32_t)n;
		c->head_len = 0;
		c->tunnel_checked = 0;
		c->req_body = HTTP1_BODY_NONE;
		if (verdict == FIRST_FLIGHT_TLS) {
			c->tunnel_tls_watch = TLS_WATCH_CLEAR; /* the hello is read again there */
			r->state = R_IDLE;
			checked_up_step(c);
			return;
		}
		c->tunnel_http = true; /* its first head keeps the deadline its first byte began */
		r->state = R_IDLE;
		checked_up_step(c);
		return;
	default:
		first_flight_refuse(c, verdict, detail, flight_is_tls(p, n));
		return;
	}
}

/* A receive of the first flight completed: its bytes join the head buffer's. */
static void first_flight_recv(struct conn *c, int res)
{
	struct relay *r = &c->up;

	if (res == -ENOBUFS || res == -EAGAIN) {
		nobufs_wait(c); /* tunnel_buffers steps it again */
		return;
	}
	if (res < 0) {
		conn_close(c);
		return;
	}
	if (res == 0)
		r->eof = true;
	else if (!client_bytes_keep(c, (uint32_t)res))
		return;
	first_flight_step(c);
}

/* ---- TLS records after the first ClientHello ---------------------------- */

/*
 * A TLS 1.3 server may answer the first ClientHello with a HelloRetryRequest,
 * and the client then sends a second one, in clear, which may name another
 * server: so the client's records stay read until they are encrypted (its
 * first application_data record), and every ClientHello among them is checked
 * as the first was. After the client's ChangeCipherSpec a handshake record
 * may be a TLS 1.2 Finished, encrypted: only one shaped as a ClientHello (its
 * type, its length, version 3.3) is read then. Bounded: past
 * TUNNEL_TLS_WATCH_BYTES the client's flights are relayed unread.
 */

/* Whether the handshake record at <p>/<n> is shaped as a ClientHello's first. */
static bool record_shaped_as_hello(const uint8_t *p, size_t n)
{
	if (n < 11 || p[5] != 1 || p[9] != 3 || p[10] != 3)
		return false;
	size_t body = (size_t)p[6] << 16 | (size_t)p[7] << 8 | p[8];
	return body >= 38 && body <= CLIENTHELLO_MESSAGE_BYTES_MAX;
}

/*
 * Walks the client's records past c->tunnel_checked: what may go up is
 * counted in it, a ClientHello is checked (tls_flight). True while all is
 * well (a record not whole yet waits); false when it refused.
 */
static bool tls_watch_scan(struct conn *c)
{
	char detail[128];

	while (c->tunnel_tls_watch != TLS_WATCH_OVER && c->tunnel_checked < c->head_fill) {
		const uint8_t *p = (const uint8_t *)c->head + c->tunnel_checked;
		size_t n = c->head_fill - c->tunnel_checked;
		if (p[0] < 20 || p[0] > 24 || p[0] == 23 || (n > 1 && p[1] != 3) ||
		    c->up.bytes + c->tunnel_checked > TUNNEL_TLS_WATCH_BYTES) {
			/* Encrypted now (application_data), or no TLS the server will take:
			 * told from the first byte, so a client that waits is not waited for. */
			c->tunnel_tls_watch = TLS_WATCH_OVER;
			break;
		}
		if (n < 5)
			return true;
		size_t record = 5 + ((size_t)p[3] << 8 | p[4]);
		if (p[0] == 20)
			c->tunnel_tls_watch = TLS_WATCH_CCS;
		bool hello = p[0] == 22 && (c->tunnel_tls_watch == TLS_WATCH_CLEAR
						? n > 5 && p[5] == 1
						: record_shaped_as_hello(p, n));
		if (hello || (p[0] == 22 && c->tunnel_tls_watch == TLS_WATCH_CLEAR && n < 6)) {
			if (n < 6)
				return true; /* its first byte says whether it is a hello */
			detail[0] = '\0';
			struct clienthello_name sni;
			enum first_flight verdict =
			    tls_flight(c, (const char *)p, n, detail, sizeof(detail), &sni);
			if (verdict == FIRST_FLIGHT_WAIT) {
				if (n >= TUNNEL_FIRST_FLIGHT_BYTES_MAX)
					verdict = FIRST_FLIGHT_REFUSE;
				else
					return true;
			}
			if (verdict != FIRST_FLIGHT_PASS) {
				first_flight_refuse(c, verdict, detail, true);
				return false;
			}
			c->tunnel_checked += (uint32_t)sni.records_len;
			continue;
		}
		if (n < record)
			return true; /* cleared whole, so that the next header is found */
		c->tunnel_checked += (uint32_t)record;
	}
	if (c->tunnel_tls_watch == TLS_WATCH_OVER)
		c->tunnel_checked = c->head_fill;
	return true;
}

/* ---- plain HTTP in a checked tunnel ------------------------------------ */

/*
 * Walks the head buffer's unchecked bytes (from c->tunnel_checked): each
 * request head is checked (http_head_check), its body framed by its
 * Content-Length or chunked coding, so that the next head is found where the
 * server will find it. Stops at a head not whole yet. True while all is
 * well; false when it refused (the conn is answering or closing).
 */
static bool http_tunnel_scan(struct conn *c)
{
	char detail[128];

	while (c->tunnel_checked < c->head_fill) {
		const char *p = c->head + c->tunnel_checked;
		size_t n = c->head_fill - c->tunnel_checked;
		if (c->req_body == HTTP1_BODY_LENGTH) {
			size_t k = n < c->req_left ? n : (size_t)c->req_left;
			c->tunnel_checked += (uint32_t)k;
			c->req_left -= k;
			if (c->req_left == 0)
				c->req_body = HTTP1_BODY_NONE;
			continue;
		}
		if (c->req_body == HTTP1_BODY_CHUNKED) {
			ssize_t k = http1_chunked_scan(&c->req_chunks, p, n);
			if (k < 0) {
				first_flight_refuse(c, FIRST_FLIGHT_BAD_HTTP,
						    "a chunked body framed wrong in the tunnel",
						    false);
				return false;
			}
			c->tunnel_checked += (uint32_t)k;
			if (c->req_chunks.done)
				c->req_body = HTTP1_BODY_NONE;
			continue;
		}
		size_t skip;
		struct http1_request req;
		enum first_flight verdict;
		detail[0] = '\0';
		switch (http1_request_line_shape(p, n, &skip)) {
		case HTTP1_SHAPE_MAYBE:
			verdict =
			    n > LIMITS_HEAD_BYTES_MAX ? FIRST_FLIGHT_TOO_LONG : FIRST_FLIGHT_WAIT;
			break;
		case HTTP1_SHAPE_YES:
			verdict =
			    http_head_check(c, p + skip, n - skip, &req, detail, sizeof(detail));
			break;
		case HTTP1_SHAPE_NOT:
		default:
			snprintf(detail, sizeof(detail),
				 "bytes that are no HTTP request after one");
			verdict = FIRST_FLIGHT_BAD_HTTP;
			break;
		}
		if (verdict == FIRST_FLIGHT_WAIT && n > LIMITS_HEAD_BYTES_MAX)
			verdict = FIRST_FLIGHT_TOO_LONG; /* empty lines before it count too */
		if (verdict == FIRST_FLIGHT_WAIT) {
			/* A head began: head_ms from its first byte; tunnel_timer arms the nearer. */
			if (c->phase_since_ms == 0)
				c->phase_since_ms = c->w->now_ms;
			timer_arm(c->w->timers, &c->timer, 0);
			return true;
		}
		if (verdict != FIRST_FLIGHT_PASS) {
			first_flight_refuse(c, verdict, detail, false);
			return false;
		}
		c->tunnel_checked += (uint32_t)(skip + req.head_len);
		c->phase_since_ms =
		    0; /* whole: the next head's deadline starts with its first byte */
		c->req_body = (uint8_t)req.body;
		c->req_left = req.content_length;
		memset(&c->req_chunks, 0, sizeof(c->req_chunks));
		if (req.body == HTTP1_BODY_LENGTH && req.content_length == 0)
			c->req_body = HTTP1_BODY_NONE;
	}
	return true;
}

/*
 * The up relay while the client's bytes are read before they go up (plain
 * HTTP, and TLS until it is encrypted), one operation at a time: what is
 * checked goes up (a send from the head buffer), then the next receive joins
 * the head buffer behind what is left. The client's EOF shuts the upstream's
 * write side; a head or record it left unfinished never goes up.
 */
static void checked_up_step(struct conn *c)
{
	struct relay *r = &c->up;

	if (c->state != ST_TUNNEL || (!c->tunnel_http && c->tunnel_tls_watch == TLS_WATCH_NONE) ||
	    r->state == R_SHUT || r->state == R_DONE)
		return;
	if (c->ops & (op_bit(dir_op(DIR_UP, ROP_SEND)) | op_bit(dir_op(DIR_UP, ROP_RECV))))
		return;
	if (!(c->tunnel_http ? http_tunnel_scan(c) : tls_watch_scan(c)))
		return;
	if (c->tunnel_tls_watch == TLS_WATCH_OVER && c->head_fill == 0) {
		/* The client's flights are encrypted from here: the splice relay takes over. */
		c->tunnel_tls_watch = TLS_WATCH_NONE;
		buffers_release(c);
		r->state = R_IDLE;
		relay_arm(c, DIR_UP);
		return;
	}
	if (c->tunnel_checked > 0) {
		r->state = R_SEND;
		prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, c->head, c->tunnel_checked);
		return;
	}
	if (r->eof) {
		relay_shut(c, DIR_UP);
		return;
	}
	if (c->head_fill == 0)
		buffers_release(c); /* between requests the tunnel holds no buffer */
	AN_ASSERT(c->head_fill + conn_ring(c)->buf_bytes <= WORKER_HEAD_BUFFER_BYTES);
	r->state = R_RECV;
	prep_recv_select(c, dir_op(DIR_UP, ROP_RECV), c->cfd);
}

/* A completion of that up relay (checked_up_step). */
static void checked_up_io(struct conn *c, uint32_t rop, int res)
{
	struct relay *r = &c->up;

	if (rop == ROP_SHUT) {
		r->state = R_DONE;
		relay_maybe_done(c);
		return;
	}
	if (res == -ENOBUFS || res == -EAGAIN) {
		r->state = R_IDLE;
		nobufs_wait(c); /* tunnel_buffers steps it again */
		return;
	}
	if (res == -ECANCELED) {
		conn_close(c);
		return;
	}
	if (rop == ROP_SEND && res <= 0) {
		r->state = R_IDLE;
		relay_destination_failed(c, DIR_UP);
		return;
	}
	if (rop == ROP_RECV && res < 0) {
		/* The client reset: what is checked still goes up (checked_up_step), the
		 * rest never does, and then the upstream is reset (relay_shut). */
		r->eof = true;
		r->reset = true;
		r->state = R_IDLE;
		checked_up_step(c);
		return;
	}
	if (rop == ROP_RECV) {
		if (res == 0)
			r->eof = true;
		else if (!client_bytes_keep(c, (uint32_t)res))
			return;
	} else {
		/* Sent: what is left moves to the buffer's start. */
		uint32_t sent = (uint32_t)res;
		AN_ASSERT(sent <= c->tunnel_checked);
		memmove(c->head, c->head + sent, c->head_fill - sent);
		c->head_fill -= sent;
		c->tunnel_checked -= sent;
		r->bytes += sent;
	}
	r->state = R_IDLE;
	checked_up_step(c);
}

/*
 * tunnel_mode's timer: a first flight that began but named nothing within
 * head_ms of the 200 ("G", then silence: a request line held back to wait
 * the check out) is refused, as a head that never completes is; one not
 * begun waits (a server speaks first in some protocols). Else the idle
 * timeout, armed for the nearer of the two.
 */
static bool tunnel_timer(struct conn *c)
{
	const struct config *cfg = c->w->e->cfg;
	uint64_t now = c->w->now_ms;
	bool first = c->up.state == R_FIRST_FLIGHT && c->head != NULL && c->head_fill > c->head_len;
	bool head = c->tunnel_http && c->req_body == HTTP1_BODY_NONE && c->head != NULL &&
		    c->head_fill > c->tunnel_checked;
	bool held = (first || head) && c->phase_since_ms != 0;

	if (held && now - c->phase_since_ms >= cfg->head_timeout_ms) {
		char detail[96];
		snprintf(detail, sizeof(detail), "%s within %u ms",
			 first ? "a first flight that named nothing" : "a request head not whole",
			 cfg->head_timeout_ms);
		if (c->ops & op_bit(dir_op(DIR_UP, ROP_RECV)))
			c->up.state = R_IDLE; /* the receive's completion is a leftover now */
		first_flight_refuse(
		    c, first ? FIRST_FLIGHT_REFUSE : FIRST_FLIGHT_TIMEOUT, detail,
		    first && flight_is_tls(c->head + c->head_len, c->head_fill - c->head_len));
		return true;
	}
	uint64_t quiet = now - c->active_ms;
	if (quiet >= cfg->idle_timeout_ms) {
		conn_close(c);
		return true;
	}
	uint64_t left = cfg->idle_timeout_ms - quiet;
	if (held && c->phase_since_ms + cfg->head_timeout_ms - now < left)
		left = c->phase_since_ms + cfg->head_timeout_ms - now;
	timer_arm(c->w->timers, &c->timer, (uint32_t)left);
	return true;
}

/* Early data was queued, or the cancelled head receive ended: the up relay takes it. */
static void tunnel_early(struct conn *c)
{
	if (c->up.state == R_FIRST_FLIGHT)
		first_flight_step(c);
	else
		up_prelude_step(c);
}

/*
 * The next early-data slice to forward: the head buffer's tail first, then
 * the FIFO. Returns its length (0: none) and sets *<p>.
 */
uint32_t early_peek(struct conn *c, const char **p)
{
	if (c->head != NULL && c->head_len + c->early_off < c->head_fill) {
		*p = c->head + c->head_len + c->early_off;
		return c->head_fill - c->head_len - c->early_off;
	}
	if (c->early_count == 0)
		return 0;
	uint16_t bid;
	uint32_t off;
	uint32_t n = early_front(c, &bid, &off);
	*p = (const char *)ring_buf(conn_ring(c), bid) + off;
	return n;
}

/* Marks <n> early bytes consumed (sent, or counted as body). */
void early_consume(struct conn *c, uint32_t n)
{
	if (c->head != NULL && c->head_len + c->early_off < c->head_fill) {
		AN_ASSERT(n <= c->head_fill - c->head_len - c->early_off);
		c->early_off += n;
		return;
	}
	AN_ASSERT(c->early_count > 0);
	early_advance(c, n);
}

static void up_prelude_step(struct conn *c)
{
	struct relay *r = &c->up;

	if (c->state != ST_TUNNEL || r->state != R_PRELUDE)
		return;
	if (c->ops & op_bit(dir_op(DIR_UP, ROP_SEND)))
		return;
	const char *p;
	uint32_t n = early_peek(c, &p);
	if (n > 0) {
		prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, p, n);
		return;
	}
	if (c->ops & op_bit(OP_HEAD_RECV))
		return; /* the cancelled receive may still deliver bytes */
	/* An upgraded gateway request keeps its buffers: the 101 may still be
	 * going out of one, and its record needs the head's sandbox and path. */
	if (!c->ingress)
		buffers_release(c);
	r->state = R_IDLE;
	relay_arm(c, DIR_UP);
}

/*
 * The source's last byte is at the destination: its EOF becomes the
 * destination's (shutdown of its write side), or, after a failure
 * (r->reset), the destination is reset and the conn ends: the far side must
 * not read a cut stream as a whole one, and nothing more can go to the side
 * that failed. The client's reset is sent only on TCP (the agent's Unix
 * socket carries none).
 */
static void relay_shut(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);

	if (r->reset) {
		r->state = R_DONE;
		if (dir == DIR_UP)
			c->upstream_reset = true;
		else
			c->client_reset = true;
		conn_close(c);
		return;
	}
	r->state = R_SHUT;
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_SHUT));
	io_uring_prep_shutdown(sqe, relay_dst(c, dir), SHUT_WR);
	sqe->flags |= IOSQE_FIXED_FILE;
}

static void relay_arm(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);

	AN_ASSERT(r->pipe == NULL);
	AN_ASSERT(!r->holds_buf);
	if (r->eof) {
		relay_shut(c, dir);
		return;
	}
	if (c->w->pipes.capacity > 0) {
		r->state = R_POLL;
		struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_POLL));
		io_uring_prep_poll_add(sqe, relay_src(c, dir), POLLIN);
		sqe->flags |= IOSQE_FIXED_FILE;
		return;
	}
	r->state = R_RECV;
	prep_recv_select(c, dir_op(dir, ROP_RECV), relay_src(c, dir));
}

static void splice_in(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_SPLICE_IN));

	AN_ASSERT(r->pipe_bytes < c->w->pipes.pipe_bytes);
	r->state = R_SPLICE_IN;
	io_uring_prep_splice(sqe, relay_src(c, dir), -1, r->pipe->write_fd, -1,
			     c->w->pipes.pipe_bytes - r->pipe_bytes,
			     SPLICE_F_FD_IN_FIXED | SPLICE_F_MOVE);
}

static void splice_out(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_SPLICE_OUT));

	r->state = R_SPLICE_OUT;
	io_uring_prep_splice(sqe, r->pipe->read_fd, -1, relay_dst(c, dir), -1, r->pipe_bytes,
			     SPLICE_F_MOVE);
	sqe->flags |= IOSQE_FIXED_FILE;
}

/* Both directions finished cleanly: the tunnel is over. */
static void relay_maybe_done(struct conn *c)
{
	if (c->up.state == R_DONE && c->down.state == R_DONE)
		conn_close(c);
}

/*
 * A relay's source failed (a reset, or another error reading it): the bytes
 * it gave before are delivered first, as at an EOF (a reset's error comes
 * only after the data that came ahead of it), and then relay_shut resets the
 * destination instead of ending it. The upstream's failure is the close
 * record's reason (upstream_reset).
 */
static void relay_source_failed(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);

	r->eof = true;
	r->reset = true;
	r->full_fill = false;
	if (dir == DIR_DOWN && c->reason == REASON_NONE)
		c->reason = REASON_UPSTREAM_RESET;
	if (r->pipe != NULL && r->pipe_bytes > 0) {
		splice_out(c, dir);
		return;
	}
	if (r->pipe != NULL) {
		pipepool_put(&c->w->pipes, r->pipe, 0);
		r->pipe = NULL;
	}
	r->state = R_IDLE;
	relay_shut(c, dir);
}

/*
 * A relay's destination failed (reset, or gone): what the relay held for it
 * is dropped and the relay is over. The side that failed may still have sent
 * bytes first, which the other relay reads and delivers before it meets the
 * failure itself and ends the conn; an other relay already over, or still in
 * its prelude, ends it now.
 */
static void relay_destination_failed(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);
	const struct relay *other = relay_of(c, dir == DIR_UP ? DIR_DOWN : DIR_UP);

	relay_release(c, r);
	r->state = R_DONE;
	if (other->state == R_DONE || other->state == R_PRELUDE || other->state == R_FIRST_FLIGHT)
		conn_close(c);
}

/* A relay operation failed with <res>: its source's or its destination's fault (or a cancel). */
static void relay_failed(struct conn *c, int dir, uint32_t rop, int res)
{
	struct relay *r = relay_of(c, dir);

	if (res == -ECANCELED || r->state == R_PRELUDE) {
		conn_close(c);
		return;
	}
	bool from_source =
	    rop == ROP_SPLICE_IN || rop == ROP_RECV || (rop == ROP_POLL && !r->poll_out);
	if (from_source)
		relay_source_failed(c, dir);
	else
		relay_destination_failed(c, dir);
}

static void on_relay(struct conn *c, int dir, uint32_t rop, int res, uint32_t cqe_flags)
{
	struct relay *r = relay_of(c, dir);
	struct worker *w = c->w;

	(void)cqe_flags;
	c->active_ms = w->now_ms;
	if (r->state == R_FIRST_FLIGHT && rop == ROP_RECV) {
		first_flight_recv(c, res);
		return;
	}
	if (dir == DIR_UP && (c->tunnel_http || c->tunnel_tls_watch != TLS_WATCH_NONE)) {
		checked_up_io(c, rop, res);
		return;
	}
	if (res < 0 && res != -EAGAIN && !(rop == ROP_RECV && res == -ENOBUFS)) {
		relay_failed(c, dir, rop, res);
		return;
	}
	switch (rop) {
	case ROP_POLL:
		if (r->poll_out) {
			r->poll_out = false;
			splice_out(c, dir);
			break;
		}
		r->pipe = pipepool_take(&w->pipes);
		if (r->pipe != NULL) {
			w->stats.splice_relays++;
			splice_in(c, dir);
		} else {
			w->stats.copy_relays++;
			r->state = R_RECV;
			prep_recv_select(c, dir_op(dir, ROP_RECV), relay_src(c, dir));
		}
		break;
	case ROP_SPLICE_IN:
		if (res == -EAGAIN || res == 0) {
			/* Source drained (or ended): flush what the pipe gathered first. */
			r->eof = res == 0;
			r->full_fill = false;
			if (r->pipe_bytes > 0) {
				splice_out(c, dir);
				break;
			}
			pipepool_put(&w->pipes, r->pipe, 0);
			r->pipe = NULL;
			relay_arm(c, dir); /* polls again, or shuts dst on EOF */
			break;
		}
		r->pipe_bytes += (uint32_t)res;
		r->full_fill = (uint32_t)res >= CONN_STREAMING_BYTES;
		/* While the source streams, gather up to three quarters of a pipe
		 * before sending: fewer, larger sends mean fewer wake-ups of the
		 * receiver (the last quarter keeps a full pipe from ending a splice). */
		if (r->full_fill && r->pipe_bytes <= w->pipes.pipe_bytes / 4 * 3)
			splice_in(c, dir);
		else
			splice_out(c, dir);
		break;
	case ROP_SPLICE_OUT:
		if (res == -EAGAIN) {
			/* The destination's send buffer is full: wait until it drains. */
			r->poll_out = true;
			r->state = R_POLL;
			struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_POLL));
			io_uring_prep_poll_add(sqe, relay_dst(c, dir), POLLOUT);
			sqe->flags |= IOSQE_FIXED_FILE;
			break;
		}
		if (res == 0) {
			relay_destination_failed(c, dir);
			break;
		}
		AN_ASSERT((uint32_t)res <= r->pipe_bytes);
		r->pipe_bytes -= (uint32_t)res;
		r->bytes +=
		    (uint64_t)res; /* delivered, not taken: a pipe's unsent bytes never count */
		if (r->pipe_bytes > 0) {
			splice_out(c, dir);
		} else if (r->full_fill && !r->eof) {
			splice_in(c, dir);
		} else {
			pipepool_put(&w->pipes, r->pipe, 0);
			r->pipe = NULL;
			relay_arm(c, dir);
		}
		break;
	case ROP_RECV:
		if (res == -ENOBUFS || res == -EAGAIN) {
			r->state = R_IDLE;
			nobufs_wait(c);
		} else if (res == 0) {
			r->eof = true;
			relay_shut(c, dir);
		} else {
			if (c->w->pipes.capacity == 0)
				c->w->stats.copy_relays++; /* no splice at all (docs/control.md) */
			r->buf_off = 0;
			r->buf_len = (uint32_t)res;
			r->state = R_SEND;
			prep_send(c, dir_op(dir, ROP_SEND), relay_dst(c, dir),
				  ring_buf(conn_ring(c), r->bid), r->buf_len);
		}
		break;
	case ROP_SEND:
		if (r->state == R_PRELUDE) {
			if (dir == DIR_UP) {
				c->bytes_up += (uint64_t)res;
				early_consume(c, (uint32_t)res);
				up_prelude_step(c);
			} else {
				if (!out_sent(c, dir_op(dir, ROP_SEND), c->cfd, c->out_ptr, res)) {
					r->state = R_IDLE;
					relay_arm(c, dir);
					first_flight_step(c); /* it waited for the 200 */
				}
			}
			break;
		}
		r->buf_off += (uint32_t)res;
		r->bytes += (uint64_t)res; /* delivered */
		if (r->buf_off < r->buf_len) {
			prep_send(c, dir_op(dir, ROP_SEND), relay_dst(c, dir),
				  ring_buf(conn_ring(c), r->bid) + r->buf_off,
				  r->buf_len - r->buf_off);
		} else {
			ring_buf_return(conn_ring(c), r->bid);
			r->holds_buf = false;
			relay_arm(c, dir);
		}
		break;
	case ROP_SHUT:
		r->state = R_DONE;
		relay_maybe_done(c);
		break;
	default:
		AN_ASSERT(!"unknown relay op");
	}
}

/* Buffers are back: each relay that waited for one (idle, holding nothing) is re-armed. */
static void tunnel_buffers(struct conn *c)
{
	for (int dir = DIR_UP; dir <= DIR_DOWN; dir++) {
		struct relay *r = relay_of(c, dir);
		if (dir == DIR_UP && (c->tunnel_http || c->tunnel_tls_watch != TLS_WATCH_NONE))
			continue;
		if (r->state == R_IDLE && !r->holds_buf && r->pipe == NULL)
			relay_arm(c, dir);
	}
	first_flight_step(c);
	checked_up_step(c);
}

const struct conn_mode tunnel_mode = {
	.state = ST_TUNNEL,
	.connected = tunnel_start,
	.io = on_relay,
	.buffers = tunnel_buffers,
	.early = tunnel_early,
	.timer = tunnel_timer,
};
