/*
 * A conn of the public listener reads a request head like any other; then
 * the path or the Host, not a policy rule, picks the sandbox (core/ingress.h), the
 * sandbox profile's `ingress` settings are applied (methods, body cap,
 * limits), and the request is forwarded to the sandbox's ingress socket
 * with the FORWARD machinery: the head rewritten for the agent, the bodies
 * copied with their framing, the conn kept alive with its upstream for the
 * next request to the same sandbox. A 101 turns the conn into a TUNNEL.
 * Each request gets one "ingress" audit record, written when it ends.
 *
 * With TLS on the public listener a first conn only decrypts and hands the
 * plaintext to a second one over the internal socket (the second part of
 * this file). A gateway listener's conn gets its front at the accept
 * (ingress_accepted, from core/modes.c); the spine then calls in here through
 * gateway_front's hooks: the PROXY header before the head (gateway_head_prefix),
 * the request's decision (ingress_decide) and its record (ingress_audit).
 */
#include "core/conn_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/an.h"
#include "core/ingress.h"
#include "core/layout.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/ring.h"
#include "core/timer.h"

/*
 * A conn of the public listener (no sandbox until a request names one), of
 * its TLS form (decrypting for the internal socket), or of the internal
 * socket (a decrypted one: who the client is comes in its PROXY header).
 */
void ingress_accepted(struct conn *c, const struct worker_listener *l)
{
	AN_ASSERT(l->ingress || l->internal);
	AN_ASSERT(l->sandbox == WORKER_NO_SANDBOX);
	if (l->internal) {
		c->ingress = true;
		c->ingress_proxied = true;
		c->front = &gateway_front;
		return;
	}
	c->ingress_tls = l->w->e->ingress_tls;
	c->ingress = !c->ingress_tls;
	size_t n = l->peer_len < sizeof(c->client) ? l->peer_len : sizeof(c->client);
	memcpy(&c->client, &l->peer, n);
	c->front = c->ingress_tls ? &gateway_tls_front : &gateway_front;
	if (c->ingress_tls)
		c->mode = &gateway_tls_mode; /* it connects at the accept: tlsrelay_connect */
}

/*
 * A conn of the gateway's internal socket starts with the PROXY v2 header
 * of the TLS relay that decrypts for it: the client's address is taken and
 * the header dropped from the head buffer. True when a head may follow.
 */
bool ingress_proxy_take(struct conn *c)
{
	struct sockaddr_storage src;

	AN_ASSERT(c->ingress_proxied && !c->ingress_proxy_done);
	ssize_t n = ingress_proxy_parse(c->head, c->head_fill, &src);
	if (n == -EAGAIN)
		return false;
	if (n < 0) {
		log_warn("ingress: a malformed PROXY header on %s",
			 c->w->e->ingress_internal.sun_path);
		conn_close(c);
		return false;
	}
	AN_ASSERT((uint32_t)n <= c->head_fill);
	if (src.ss_family != AF_INET && src.ss_family != AF_INET6) {
		conn_close(c); /* LOCAL: the relay always names its client */
		return false;
	}
	memcpy(&c->client, &src, sizeof(c->client));
	memmove(c->head, c->head + n, c->head_fill - (uint32_t)n);
	c->head_fill -= (uint32_t)n;
	c->ingress_proxy_done = true;
	return c->head_fill > 0;
}

/* A gateway request begins: its record counts from here. */
void ingress_begin(struct conn *c)
{
	AN_ASSERT(c->ingress);
	AN_ASSERT(!c->ingress_record || c->state == ST_HEAD);
	c->ingress_record = true;
	/* A gateway conn has no close record: its counters and clock are the request's. */
	c->bytes_up = 0;
	c->bytes_down = 0;
	c->up.bytes = 0;
	c->down.bytes = 0;
	c->start_ms = c->w->now_ms;
	c->ingress_id_len = 0;
	c->ingress_origin = false;
	c->decision_id = 0;
	c->status = 0;
	c->reason = REASON_NONE;
	c->rule = NULL;
	c->instruction = NULL;
}

/* The request's method, Host (as the client sent it) and public path, for answers and records. */
static void ingress_request_copy(struct conn *c, const struct http1_request *req)
{
	request_copy(c, req);
	size_t hlen = req->host_header != NULL && req->host_header_len <= LIMITS_HOST_BYTES_MAX
			  ? req->host_header_len
			  : 0;
	if (hlen > 0)
		memcpy(c->host, req->host_header, hlen);
	c->host[hlen] = '\0';
	c->host_len = (uint8_t)hlen;
	c->port = 0;
	AN_ASSERT(req->target >= c->head && req->target < c->head + c->head_len);
	c->path_off = (uint16_t)(req->target - c->head);
	/* A sandbox's token stays out of the audit: such a path is recorded without its query. */
	const struct ingress_target whole = { .rest = req->target, .rest_len = req->target_len };
	const char *query = memchr(req->target, '?', req->target_len);
	size_t len =
	    ingress_target_has_token(&whole) ? (size_t)(query - req->target) : req->target_len;
	c->path_len = (uint16_t)(len < UINT16_MAX ? len : UINT16_MAX);
}

/* "<prefix>/<id>": a prefix (POLICY_INGRESS_PREFIX_BYTES_MAX) and an id, with room to spare. */
#define GATEWAY_SCOPE_BYTES 512u
static_assert(GATEWAY_SCOPE_BYTES > 256u + 1u + CONFIG_SANDBOX_ID_BYTES_MAX,
	      "a prefix, '/' and an id fit");

/* The routed sandbox's profile's gateway settings, under the snapshot the request holds. */
static const struct verdict_ingress *ingress_rules(const struct conn *c)
{
	AN_ASSERT(c->ingress && c->snap != NULL && c->sandbox != WORKER_NO_SANDBOX);
	const struct snapshot_sandbox *under = &c->snap->sandboxes[c->sandbox];
	AN_ASSERT(under->known);
	return c->w->e->ops->profile_ingress(c->snap->policy, under->profile);
}

/* The request no longer counts as open against its sandbox's `concurrent`. */
void ingress_release(struct conn *c)
{
	if (!c->ingress_counted)
		return;
	struct engine_sandbox *sb = c->w->e->sandboxes[c->sandbox];
	uint32_t open = atomic_fetch_sub_explicit(&sb->ingress_open, 1, memory_order_relaxed);
	AN_ASSERT(open > 0);
	c->ingress_counted = false;
}

/*
 * The record of the gateway request that just ended (answered, refused or
 * cut): who sent what to which sandbox, and what came back. At most one per
 * request.
 */
void ingress_audit(struct conn *c)
{
	struct audit_ring *ar = c->w->audit;

	AN_ASSERT(c->ingress);
	if (!c->ingress_record)
		return;
	c->ingress_record = false;
	struct audit_record *rec = audit_claim(ar);
	if (rec == NULL)
		return;
	rec->kind = AUDIT_INGRESS;
	rec->id = c->decision_id != 0 ? c->decision_id : audit_next_id(ar);
	rec->allowed = c->reason == REASON_NONE;
	rec->status = c->status;
	record_common(c, rec);
	rec->bytes_up = c->bytes_up + c->up.bytes;
	rec->bytes_down = c->bytes_down + c->down.bytes;
	rec->duration_ms = (uint32_t)(c->w->now_ms - c->start_ms);
	addr_format(&c->client, rec->addr, sizeof(rec->addr));
	audit_commit(ar, rec);
}

/*
 * The sandbox's gateway limits, shared by every worker (any of them may
 * accept a request for any sandbox): requests open at once, then the rate.
 * A request let through holds one of `concurrent` until it ends.
 */
static enum reason ingress_limits_refusal(struct conn *c, const struct verdict_ingress *in)
{
	struct engine_sandbox *sb = c->w->e->sandboxes[c->sandbox];
	const struct verdict_limits *l = &in->limits;
	struct timespec now;
	uint32_t retry = 1;

	AN_ASSERT(!c->ingress_counted);
	if (l->requests_per_second == 0 && l->concurrent == 0)
		return REASON_NONE;
	uint32_t open = atomic_fetch_add_explicit(&sb->ingress_open, 1, memory_order_relaxed);
	c->ingress_counted = true;
	c->retry_after_s = 1;
	if (l->concurrent != 0 && open >= l->concurrent) {
		ingress_release(c);
		return REASON_CONCURRENCY_LIMITED;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	uint64_t now_us = (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
	if (!ratelimit_shared_take(&sb->ingress_rate, l, now_us, &retry)) {
		ingress_release(c);
		c->retry_after_s = retry;
		return REASON_RATE_LIMITED;
	}
	c->retry_after_s = 0;
	return REASON_NONE;
}

/* Routes <req> (core/ingress.h) as the daemon's gateway is reached: its prefix, its origins. */
static int gateway_route(const struct conn *c, const struct http1_request *req,
			 struct ingress_target *t)
{
	const struct config *cfg = c->w->e->cfg;
	struct ingress_site site;

	ingress_site_init(&site, cfg->ingress_prefix, cfg->ingress_public_url,
			  cfg->ingress_origins);
	return ingress_route_request(&site, req->host_header, req->host_header_len, req->target,
				     req->target_len, t);
}

/*
 * The id <t> names, a view into the head buffer. A host name is
 * case-insensitive: an origin's label is looked up, connected and recorded
 * in lower case, so it is lowered where it lies (Host then reaches the agent
 * so spelled, the same name).
 */
static void gateway_take_id(struct conn *c, const struct ingress_target *t)
{
	AN_ASSERT(t->id >= c->head && t->id + t->id_len <= c->head + c->head_len);
	AN_ASSERT(t->id_len > 0 && t->id_len < CONFIG_SANDBOX_ID_BYTES_MAX);
	c->ingress_id_off = (uint16_t)(t->id - c->head);
	c->ingress_id_len = (uint8_t)t->id_len;
	c->ingress_origin = t->origin;
	for (size_t i = 0; t->origin && i < t->id_len; i++) {
		char *ch = c->head + c->ingress_id_off + i;
		if (*ch >= 'A' && *ch <= 'Z')
			*ch = (char)(*ch - 'A' + 'a');
	}
}

/* Where the request goes, or why not: the sandbox, its profile's gateway settings, limits. */
static enum reason ingress_refusal(struct conn *c, const struct http1_request *req)
{
	struct worker *w = c->w;
	struct ingress_target t;

	if (req->form != HTTP1_FORM_ORIGIN)
		return REASON_BAD_REQUEST;
	if (audit_refuses(c))
		return REASON_AUDIT_UNAVAILABLE;
	int rc = gateway_route(c, req, &t);
	if (rc != 0)
		return rc == -EPERM ? REASON_PATH_NOT_ALLOWED : REASON_INGRESS_NOT_FOUND;
	gateway_take_id(c, &t);
	const char *token = NULL;
	int64_t slot =
	    ingress_routes_get(&w->routes, c->head + c->ingress_id_off, t.id_len, &token);
	if (slot < 0) {
		c->ingress_id_len = 0; /* no sandbox: the record names none */
		return REASON_INGRESS_NOT_FOUND;
	}
	c->sandbox = (uint32_t)slot;
	const struct snapshot_sandbox *under = snapshot_take(c);
	if (under == NULL)
		return REASON_INGRESS_NOT_FOUND;
	const struct verdict_ingress *in =
	    w->e->ops->profile_ingress(c->snap->policy, under->profile);
	AN_ASSERT(in != NULL);
	if (!in->enabled)
		return REASON_INGRESS_NOT_FOUND;
	if (in->token_required && !ingress_token_carried(req, &t, token))
		return REASON_INGRESS_TOKEN_REFUSED;
	if (!ingress_method_allowed(in, req->method, req->method_len))
		return REASON_METHOD_NOT_ALLOWED;
	if (req->body == HTTP1_BODY_LENGTH && req->content_length > in->body_bytes_max)
		return REASON_BODY_TOO_LARGE;
	return ingress_limits_refusal(c, in);
}

/*
 * A request without its sandbox's token is answered as one for no sandbox
 * is, 404 ingress_not_found naming none, so that the answer tells a client
 * nothing about which ids exist. Its record, the operator's, says what it
 * was and to which sandbox.
 */
static void gateway_refuse_token(struct conn *c)
{
	uint8_t id_len = c->ingress_id_len;

	AN_ASSERT(id_len > 0);
	c->ingress_id_len = 0;
	respond(c, REASON_INGRESS_NOT_FOUND);
	if (c->state != ST_RESPOND)
		return; /* closed instead: its record is written */
	c->ingress_id_len = id_len;
	c->reason = REASON_INGRESS_TOKEN_REFUSED;
}

void ingress_decide(struct conn *c, const struct http1_request *req)
{
	ingress_begin(c);
	c->requests++;
	c->w->stats.requests++;
	c->retry_after_s = 0;
	c->tier = TIER_LOCAL;
	c->inject = NULL;
	c->fake = NULL;
	ingress_request_copy(c, req);
	ingress_release(c);
	enum reason refusal = ingress_refusal(c, req);
	if (refusal == REASON_INGRESS_TOKEN_REFUSED) {
		gateway_refuse_token(c);
		return;
	}
	if (refusal != REASON_NONE) {
		respond(c, refusal);
		return;
	}
	struct http1_request closing;
	if ((req = drain_request(c, req, &closing)) == NULL)
		return;
	c->ingress_upgrade = ingress_is_upgrade(req);
	/* An upgrade carries no body: after the 101 the client's bytes are the new protocol's,
	 * and a body still coming would meet the tunnel's relay on the same socket. */
	if (c->ingress_upgrade && req->body != HTTP1_BODY_NONE) {
		respond(c, REASON_BAD_REQUEST);
		return;
	}
	c->keep_alive = req->keep_alive;
	c->client_http10 = req->version_minor == 0;
	c->head_method = req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0;
	c->req_body = (uint8_t)req->body;
	/* Chunked: what the cap still allows (req_frame counts it down). */
	c->req_left = req->body == HTTP1_BODY_CHUNKED ? ingress_rules(c)->body_bytes_max
						      : req->content_length;
	memset(&c->req_chunks, 0, sizeof(c->req_chunks));
	uint64_t key = XXH3_64bits(c->head + c->ingress_id_off, c->ingress_id_len);
	if (c->ufd >= 0 &&
	    (key != c->upstream_key || !(c->flags & F_REUSABLE) || c->ingress_upgrade))
		close_slot(c, &c->ufd);
	c->flags &= (uint8_t)~F_REUSABLE;
	c->upstream_key = key;
	c->reused_upstream = c->ufd >= 0;
	c->mode = &forward_mode;
	if (c->ufd >= 0)
		forward_start(c);
	else
		ingress_connect(c);
}

/*
 * Connects the routed sandbox's ingress socket, <socket_dir>/sandboxes/<id>/
 * ingress.sock. A sandbox can write its own directory, so the name is opened
 * O_PATH|O_NOFOLLOW and must be a socket, and the connect goes through
 * /proc/self/fd: a symlink planted there cannot send a public request to
 * another socket of the host (another sandbox's, a container runtime's).
 */
void ingress_connect(struct conn *c)
{
	const struct config *cfg = c->w->e->cfg;
	char id[CONFIG_SANDBOX_ID_BYTES_MAX], path[PATH_MAX];
	struct stat st;

	AN_ASSERT(c->ingress && c->ingress_id_len > 0 && c->head != NULL);
	memcpy(id, c->head + c->ingress_id_off, c->ingress_id_len);
	id[c->ingress_id_len] = '\0';
	if (c->connect_path_fd >= 0)
		close(c->connect_path_fd);
	c->connect_path_fd = -1;
	size_t n = layout_sandbox_dir(cfg->socket_dir, id, path, sizeof(path)) == 0 ? strlen(path)
										    : sizeof(path);
	int fd = n + sizeof("/ingress.sock") <= sizeof(path)
		     ? (memcpy(path + n, "/ingress.sock", sizeof("/ingress.sock")),
			open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC))
		     : -1;
	if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))) {
		close(fd);
		fd = -1;
	}
	if (fd < 0) {
		respond(c, REASON_AGENT_NOT_LISTENING); /* no `agentsnet run` holds the sandbox */
		return;
	}
	c->connect_path_fd = fd;
	struct sockaddr_un *sun = conn_unix(c);
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	snprintf(sun->sun_path, sizeof(sun->sun_path), "/proc/self/fd/%d", fd);
	c->flags |= F_UNIX_UP;
	c->addr_count = 1;
	c->addr_next = 0;
	c->connect_err = 0;
	connect_next(c);
}

/* "<prefix>/<id>" of the routed request, the sandbox's part of the shared origin, in <buf>. */
static size_t gateway_scope(const struct conn *c, char *buf, size_t cap)
{
	const char *prefix = c->w->e->cfg->ingress_prefix;

	AN_ASSERT(c->ingress_id_len > 0);
	int n = snprintf(buf, cap, "%s/%.*s", prefix, (int)c->ingress_id_len,
			 c->head + c->ingress_id_off);
	AN_ASSERT(n > 0 && (size_t)n < cap);
	return (size_t)n;
}

/* Writes the agent's head for <req> into c->out (core/ingress.h). Bytes or -EMSGSIZE. */
ssize_t ingress_head(struct conn *c, const struct http1_request *req)
{
	const struct config *cfg = c->w->e->cfg;
	struct ingress_target t;
	char addr[INET6_ADDRSTRLEN] = "";
	char prefix[GATEWAY_SCOPE_BYTES];

	AN_ASSERT(c->ingress && c->out != NULL && c->snap != NULL);
	int rc = gateway_route(c, req, &t);
	AN_ASSERT(rc == 0 && t.origin == c->ingress_origin); /* the same head was routed before */
	if (c->client.sa.sa_family == AF_INET)
		inet_ntop(AF_INET, &c->client.v4.sin_addr, addr, sizeof(addr));
	else if (c->client.sa.sa_family == AF_INET6)
		inet_ntop(AF_INET6, &c->client.v6.sin6_addr, addr, sizeof(addr));
	size_t n = gateway_scope(c, prefix, sizeof(prefix));
	/* The public URL's authority (validated at load: a scheme, "://", no path). */
	const char *url = cfg->ingress_public_url;
	const char *authority = url != NULL && strstr(url, "://") != NULL ? strstr(url, "://") + 3
									  : cfg->ingress_listen;
	const struct ingress_client client = { .addr = addr,
					       .proto = c->ingress_proxied ? "https" : "http",
					       .prefix = t.origin ? NULL : prefix,
					       .prefix_len = t.origin ? 0 : n,
					       .authority = authority };
	return ingress_write_head(req, &t, ingress_rules(c), &client, c->out,
				  WORKER_HEAD_BUFFER_BYTES);
}

/*
 * The isolation of the answers to the request under way (core/ingress.h);
 * <scope> (GATEWAY_SCOPE_BYTES) holds its "<prefix>/<id>".
 */
static void gateway_answer(const struct conn *c, char *scope, struct ingress_answer *a)
{
	const char *path = c->head + c->path_off;
	const char *query = memchr(path, '?', c->path_len);
	const char *port = memchr(c->host, ':', c->host_len);
	size_t host_len = port != NULL ? (size_t)(port - c->host) : c->host_len;

	AN_ASSERT(c->ingress && c->sandbox != WORKER_NO_SANDBOX);
	AN_ASSERT(c->path_len > 0 && path[0] == '/');
	if (host_len > 0 && c->host[host_len - 1] == '.')
		host_len--;
	*a = (struct ingress_answer){
		.in = ingress_rules(c),
		.origin = c->ingress_origin,
		.scope = scope,
		.scope_len = gateway_scope(c, scope, GATEWAY_SCOPE_BYTES),
		.path = path,
		.path_len = query != NULL ? (size_t)(query - path) : c->path_len,
		.host = c->host,
		.host_len = host_len,
	};
}

ssize_t ingress_response_head(struct conn *c, const struct http1_response *resp,
			      const char *connection, char *out, size_t cap)
{
	char scope[GATEWAY_SCOPE_BYTES];
	struct ingress_answer a;

	gateway_answer(c, scope, &a);
	return ingress_write_response_head(resp, connection, &a, out, cap);
}

/*
 * A 101 the gateway must not relay whole (a Set-Cookie or an origin-wide
 * field: browsers take them from a WebSocket handshake too) is rewritten in
 * c->resp without them; it only shrinks, but for a byte a field where the
 * agent wrote no space after the colon. False when it did not fit.
 */
static bool gateway_upgrade_isolate(struct conn *c, const struct http1_response *resp, uint32_t n)
{
	char scope[GATEWAY_SCOPE_BYTES];
	struct ingress_answer a;

	gateway_answer(c, scope, &a);
	if (!ingress_response_drops(resp, &a))
		return true;
	uint32_t tail = c->resp_fill - n;
	size_t room = WORKER_HEAD_BUFFER_BYTES - tail;
	ssize_t m = ingress_write_response_head(
	    resp, NULL, &a, c->w->resp_rewrite,
	    room < HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX ? room : HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX);
	if (m < 0)
		return false;
	memmove(c->resp + m, c->resp + n, tail);
	memcpy(c->resp, c->w->resp_rewrite, (size_t)m);
	c->resp_fill = (uint32_t)m + tail;
	AN_ASSERT(c->resp_fill <= WORKER_HEAD_BUFFER_BYTES);
	return true;
}

/*
 * The agent switched protocols (101 to an upgrade request): its answer goes
 * to the client (without what gateway_upgrade_isolate drops), and from then
 * on the conn is a tunnel both ways.
 */
void ingress_upgraded(struct conn *c, const struct http1_response *resp, uint32_t n)
{
	uint32_t up_ops = op_bit(dir_op(DIR_UP, ROP_SEND)) | op_bit(dir_op(DIR_UP, ROP_RECV)) |
			  op_bit(dir_op(DIR_UP, ROP_POLL)) | op_bit(dir_op(DIR_UP, ROP_SPLICE_IN)) |
			  op_bit(dir_op(DIR_UP, ROP_SPLICE_OUT));

	AN_ASSERT(c->ingress && c->ingress_upgrade);
	AN_ASSERT(c->resp != NULL && c->resp_fill > 0);
	if (c->ops & up_ops) {
		/* Answered before the request was out, or while the client's side still moves:
		 * not a peer to trust, and the tunnel cannot take that side over. */
		conn_close(c);
		return;
	}
	if (!gateway_upgrade_isolate(c, resp, n)) {
		respond(c, REASON_UPSTREAM_BAD_RESPONSE);
		return;
	}
	audit_decision(c, true, 101);
	c->state = ST_TUNNEL;
	c->mode = &tunnel_mode;
	timer_arm(c->w->timers, &c->timer, c->w->e->cfg->idle_timeout_ms);
	tunnel_relay_start(c, c->resp, c->resp_fill);
}

/* A gateway conn's sandbox is its routed request's: "" before a request is routed. */
static const char *gateway_sandbox_id(const struct conn *c, char *buf)
{
	size_t n = c->head != NULL ? c->ingress_id_len : 0;
	AN_ASSERT(c->ingress);
	AN_ASSERT(n < CONFIG_SANDBOX_ID_BYTES_MAX);
	if (n > 0)
		memcpy(buf, c->head + c->ingress_id_off, n);
	buf[n] = '\0';
	return buf;
}

/* A conn of the internal socket reads the relay's PROXY header before its first head. */
static bool gateway_head_prefix(struct conn *c)
{
	if (!c->ingress_proxied || c->ingress_proxy_done)
		return true;
	return ingress_proxy_take(c);
}

/* The sandbox's ingress socket refused the connect, or its backlog is full. */
static void gateway_unreachable(struct conn *c)
{
	respond(c, REASON_AGENT_NOT_LISTENING);
}

/* The conn's end: the socket's O_PATH, and the request's place in `concurrent`. */
static void gateway_end(struct conn *c)
{
	if (c->connect_path_fd >= 0)
		close(c->connect_path_fd);
	c->connect_path_fd = -1;
	ingress_release(c);
}

/*
 * The gateway's requests run on forwarding (forward_mode, core/forward.c) and,
 * once upgraded, on the tunnel (tunnel_mode, core/tunnel.c); what makes them
 * the gateway's is this front, from the accept on: the PROXY header, routing
 * by path, one record per request written when it ends, the agent's socket
 * as the upstream.
 */
const struct conn_front gateway_front = {
	.end = gateway_end,
	.head_prefix = gateway_head_prefix,
	.decide = ingress_decide,
	.request_refused = ingress_begin,
	.unreachable = gateway_unreachable,
	.sandbox_id = gateway_sandbox_id,
	.close_record = ingress_audit,
	.record_at_end = true,
};

/* ---- ingress gateway over TLS ------------------------------------------ */

/*
 * With daemon.ingress.tls the public listener's conns only decrypt: each
 * connects to the gateway's internal socket, sends the client's address
 * there in a PROXY v2 header, and relays plaintext both ways through the
 * session (the operator's certificate, term.public_new), so the gateway
 * proper, on the other end, is the same code with or without TLS. The
 * client's ciphertext comes in through the terminated tiers' receive (one
 * at a time, as the session drains); plaintext goes out of c->out one send
 * at a time, and what the gateway answers is written into the session from
 * the down relay's buffer, which is held until the session took it all.
 */

void tlsrelay_connect(struct conn *c)
{
	struct worker *w = c->w;
	const struct term_ops *t = conn_term(c);

	AN_ASSERT(c->ingress_tls && w->e->ingress_tls);
	c->mode = &gateway_tls_mode;
	c->client_tls = t != NULL && w->term != NULL ? t->public_new(w->term) : NULL;
	c->out = c->client_tls != NULL ? pool_take(&w->heads) : NULL;
	if (c->out == NULL) {
		respond(c, REASON_OVERLOADED); /* no session or buffer: the alert, audited */
		return;
	}
	memcpy(conn_unix(c), &w->e->ingress_internal, sizeof(struct sockaddr_un));
	c->flags |= F_UNIX_UP;
	c->addr_count = 1;
	c->addr_next = 0;
	c->connect_err = 0;
	timer_arm(w->timers, &c->timer, w->e->cfg->head_timeout_ms);
	connect_next(c);
}

/* Connected to the internal socket: the PROXY header first, then both ways. */
static void tlsrelay_start(struct conn *c)
{
	const struct engine *e = c->w->e;

	AN_ASSERT(c->ingress_tls && c->client_tls != NULL && c->out != NULL);
	ssize_t n = ingress_proxy_write(&c->client.sa, (const struct sockaddr *)&e->ingress_addr,
					c->out, WORKER_HEAD_BUFFER_BYTES);
	if (n <= 0) {
		respond(c, REASON_OVERLOADED); /* no PROXY header to send: the alert, audited */
		return;
	}
	c->state = ST_TERM;
	c->down.state = R_IDLE;
	c->out_len = (uint32_t)n;
	c->out_off = 0;
	prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, c->out, c->out_len);
	term_recv_arm(c);
	inject_recv_arm(c);
	timer_arm(c->w->timers, &c->timer, e->cfg->idle_timeout_ms);
}

/* The client sent close_notify: the gateway reads the end of its requests. */
static void tlsrelay_shut_up(struct conn *c)
{
	if (c->ingress_shut_up || (c->ops & op_bit(dir_op(DIR_UP, ROP_SHUT))))
		return;
	c->ingress_shut_up = true;
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(DIR_UP, ROP_SHUT));
	io_uring_prep_shutdown(sqe, c->ufd, SHUT_WR);
	sqe->flags |= IOSQE_FIXED_FILE;
}

/* Client plaintext out of the session into c->out, sent to the gateway. True: progress. */
static bool tlsrelay_up(struct conn *c, enum term_status *st)
{
	size_t n = 0;

	if (c->out_off < c->out_len || c->ingress_shut_up ||
	    (c->ops & op_bit(dir_op(DIR_UP, ROP_SEND))))
		return false;
	*st = conn_term(c)->read(c->client_tls, c->out, WORKER_HEAD_BUFFER_BYTES, &n);
	if (*st == TERM_CLOSED)
		tlsrelay_shut_up(c);
	if (*st != TERM_OK || n == 0)
		return false;
	c->out_len = (uint32_t)n;
	c->out_off = 0;
	prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, c->out, c->out_len);
	return true;
}

/* The gateway's answer, from the down relay's buffer into the session. True: progress. */
static bool tlsrelay_down(struct conn *c, enum term_status *st)
{
	struct relay *r = &c->down;
	size_t n = 0;

	if (!r->holds_buf)
		return false;
	AN_ASSERT(r->buf_off < r->buf_len);
	*st = conn_term(c)->write(c->client_tls, ring_buf(conn_ring(c), r->bid) + r->buf_off,
				  r->buf_len - r->buf_off, &n);
	r->buf_off += (uint32_t)n;
	if (r->buf_off == r->buf_len) {
		ring_buf_return(conn_ring(c), r->bid);
		r->holds_buf = false;
		inject_recv_arm(c);
	}
	return n > 0;
}

static void tlsrelay_pump(struct conn *c)
{
	for (uint32_t turn = 0; c->state == ST_TERM && !c->term_closing; turn++) {
		enum term_status up = TERM_OK, down = TERM_OK;
		AN_ASSERT(turn < 1000000u);
		bool moved = tlsrelay_up(c, &up);
		moved |= tlsrelay_down(c, &down);
		if (up == TERM_ERROR || down == TERM_ERROR || down == TERM_CLOSED) {
			term_end(c, up == TERM_ERROR ? up : down);
			break;
		}
		if (!moved)
			break;
	}
	term_flush(c);
}

static void on_tlsrelay_send(struct conn *c, int res)
{
	if (res <= 0) {
		conn_close(c); /* the gateway side went away mid-request */
		return;
	}
	c->bytes_up += (uint64_t)res; /* the public client's plaintext, to the sandbox */
	if (!out_sent(c, dir_op(DIR_UP, ROP_SEND), c->ufd, c->out, res))
		term_pump(c);
}

static void on_tlsrelay_recv(struct conn *c, int res)
{
	struct relay *r = &c->down;

	if (res > 0) {
		r->buf_off = 0;
		r->buf_len = (uint32_t)res;
		c->active_ms = c->w->now_ms;
		term_pump(c);
	} else if (res == -ENOBUFS) {
		nobufs_wait(c); /* re-armed by conn_on_buffers */
	} else if (res == 0) {
		term_end(c, TERM_CLOSED); /* the gateway is done: close_notify, then linger */
		term_flush(c);
	} else {
		conn_close(c);
	}
}

static void gateway_tls_io(struct conn *c, int dir, uint32_t rop, int res, uint32_t cqe_flags)
{
	(void)cqe_flags;
	if (term_io(c, dir, rop, res))
		return;
	if (dir == DIR_DOWN && rop == ROP_RECV)
		on_tlsrelay_recv(c, res);
	else if (dir == DIR_UP && rop == ROP_SEND)
		on_tlsrelay_send(c, res);
}

/* Buffers are back: the internal socket's receive, then the client's. */
static void gateway_tls_buffers(struct conn *c)
{
	inject_recv_arm(c);
	term_recv_arm(c);
}

/*
 * The internal socket took no connection (its backlog full, or gone): the
 * daemon's own fault, told as an overload, the TLS alert (respond_with).
 */
static void tlsrelay_unreachable(struct conn *c)
{
	log_warn("ingress: %s: %s", c->w->e->ingress_internal.sun_path, strerror(-c->connect_err));
	respond(c, REASON_OVERLOADED);
}

/* It only decrypts: the conn it hands the requests to routes them. */
static const char *tlsrelay_sandbox_id(const struct conn *c, char *buf)
{
	(void)c;
	(void)buf;
	return "";
}

/* None: its requests are recorded by the conns it hands them to. */
static void tlsrelay_close_record(struct conn *c)
{
	(void)c;
}

const struct conn_mode gateway_tls_mode = {
	.state = ST_TERM,
	.connected = tlsrelay_start,
	.io = gateway_tls_io,
	.buffers = gateway_tls_buffers,
	.pump = tlsrelay_pump,
	.client_data = term_client_data,
	.client_eof = term_eof,
};

const struct conn_front gateway_tls_front = {
	.accepted = tlsrelay_connect,
	.unreachable = tlsrelay_unreachable,
	.sandbox_id = tlsrelay_sandbox_id,
	.close_record = tlsrelay_close_record,
	.client_speaks_tls = true,
};
