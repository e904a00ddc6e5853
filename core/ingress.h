/*
 * The ingress gateway's pure parts (docs/design.md sections 1 and 2): which
 * sandbox a public request is for, whether its path stays inside that
 * sandbox's prefix, what head the sandbox's agent is sent, and the table a
 * worker routes sandbox ids with. No I/O and no globals; core/gateway.c (the
 * PROXY header: core/conn.c) drives them on the worker that accepted the
 * request.
 *
 * A public path is <prefix>/<sandbox id>[/<rest>][?<query>] (the path
 * form). The agent is sent /<rest>[?<query>] ("/" when there is no rest): the
 * prefix belongs to the gateway, and the agent learns it from
 * X-Forwarded-Prefix. With per-sandbox origins (daemon.ingress.origins:
 * subdomain) a request whose Host is <id>.<public host> is sandbox <id>'s
 * whole (the origin form): the agent is sent the path as it came, and no
 * other sandbox's answer is ever served from that origin. Which socket a
 * request goes to is fixed by the id alone (the sandbox's own directory), so
 * no spelling of the rest can reach another sandbox; the path checks below
 * also keep traversal shapes away from the agent's own server.
 */
#ifndef AN_CORE_INGRESS_H
#define AN_CORE_INGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/config.h"
#include "core/http1.h"
#include "core/verdict.h"

/* A public request target split into its sandbox and the agent's path. */
struct ingress_target {
	/* The sandbox id, borrowed: from the target (the path form), or the
	 * Host's first label as the client spelled it (the origin form). */
	const char *id;
	size_t id_len;
	/* The rest, borrowed from the target: "" (then the agent is sent "/"),
	 * "/..." or "?..." (then "/" is put before it); the whole target on the
	 * origin form. */
	const char *rest;
	size_t rest_len;
	bool origin; /* routed by Host (the origin form), not by the path */
};

/*
 * How public requests name their sandbox: the path prefix and, with
 * per-sandbox origins, the public URL's host. Built once from the config
 * (ingress_site_init); views only.
 */
struct ingress_site {
	const char *prefix; /* "/callbacks": starts with '/', no trailing '/' */
	size_t prefix_len;
	/* The public URL's host without a trailing dot, NULL when origins are off;
	 * the port a Host must name (the URL's, or its scheme's), and whether a
	 * Host without a port names it (the URL has no port, or its scheme's). */
	const char *origin_host;
	size_t origin_host_len;
	uint16_t origin_port;
	bool origin_port_implied;
};

/*
 * Fills <site> for <prefix> and, when <origins>, the host and port of
 * <public_url> ("http://" or "https://", a host name, an optional port and
 * nothing after, as the loader checks it: docs/policy.md). Borrows both
 * strings, which must outlive <site>.
 */
void ingress_site_init(struct ingress_site *site, const char *prefix, const char *public_url,
		       bool origins);

/*
 * Routes a public request: its Host field value <host>/<host_len> (NULL
 * when it has none) and origin-form <target>/<len>.
 *
 * The origin form, when <site> has origins and <host> names a sub-domain of
 * the public host (ignoring case and one trailing dot) at the public port (a
 * Host without one names the scheme's): its first label is the id, and the
 * whole target is the sandbox's, checked as ingress_route checks a rest.
 * Only a label can be an id there (1-63 of [A-Za-z0-9-], not starting or
 * ending with '-'; the caller looks it up in lower case): a dot, an
 * underscore or an empty label makes it -ENOENT, never another sandbox's.
 * Any other Host (the public host itself, another name or port, an address,
 * none) leaves the path form, ingress_route under site->prefix.
 *
 * Returns 0 with <out> filled, -ENOENT (no sandbox named) or -EPERM (the
 * path is refused), as ingress_route. Borrows everything; writes only <out>.
 */
int ingress_route_request(const struct ingress_site *site, const char *host, size_t host_len,
			  const char *target, size_t len, struct ingress_target *out);

/*
 * Whether sandbox id <id>/<len> can be reached at an origin of its own: a
 * DNS label in lower case (1-63 of [a-z0-9-], not starting or ending with
 * '-'), since a host name is case-insensitive and an id is not. Others keep
 * the path form alone.
 */
bool ingress_id_is_origin(const char *id, size_t len);

/*
 * Writes sandbox <id>'s public URL, what the agent is told as
 * AGENT_PUBLIC_URL, to <out>/<cap>: "<scheme>://<id>.<authority>/" when
 * <origins> and ingress_id_is_origin(<id>), else "<base><prefix>/<id>"; then,
 * with a <token> (NULL: none), "?agentsnet_token=<token>" (after the '/' of
 * an origin, which a URL with a query needs). <base> is
 * "<scheme>://<authority>" (the public URL), <prefix> the path prefix. 0, or
 * -ENAMETOOLONG when it does not fit. Borrows the strings.
 */
int ingress_public_url(const char *base, const char *prefix, bool origins, const char *id,
		       const char *token, char *out, size_t cap);

/*
 * Splits origin-form <target>/<len> (as http1_parse_request gives it) under
 * <prefix>/<prefix_len> (no trailing '/', e.g. "/callbacks").
 *
 * Returns 0 with <out> filled;
 *   -ENOENT when the target is not <prefix> '/' <id> followed by '/', '?' or
 *           its end, or when <id> is not a sandbox id ([A-Za-z0-9_.-]{1,63},
 *           not starting with '.'; a percent sign is never part of one);
 *   -EPERM  when the rest tries to step out or to be read two ways: a
 *           segment whose name (what precedes its first ';', raw or %3B) is
 *           "." or ".." (also percent-encoded, in any case: "..;x", "%2e;"),
 *           or is empty and not the last ("//", "/;x/"); an encoded '/' or
 *           '\' (%2F, %5C), a raw '\', an encoded '%' (%25: double
 *           encoding), an encoded NUL (%00), a '%' not followed by two hex
 *           digits, decoded bytes that are not shortest-form UTF-8 (RFC 3629:
 *           %C0%AE, %E0%80%AE, %C1%9C, a stray continuation byte, a sequence
 *           cut short, a surrogate), a code point NFKC folds into dots alone
 *           or into text holding '/' or '\' (U+FF0E, U+FF0F, U+2025, ...), or
 *           a '#'.
 * Only the part before '?' is checked; the query goes to the agent as sent.
 */
int ingress_route(const char *prefix, size_t prefix_len, const char *target, size_t len,
		  struct ingress_target *out);

/* True when <in> accepts <method>/<len> (exact, case-sensitive: RFC 9110 section 9.1). */
bool ingress_method_allowed(const struct verdict_ingress *in, const char *method, size_t len);

/*
 * True when <req> asks to switch protocols (RFC 9110 section 7.8): HTTP/1.1,
 * an Upgrade header, and "upgrade" among the Connection tokens. The gateway
 * then relays both ways once the agent answers 101.
 */
bool ingress_is_upgrade(const struct http1_request *req);

/*
 * A sandbox's access token: 32 random bytes the daemon draws when it opens
 * the sandbox, in base64url without padding (RFC 4648 section 5). When the
 * sandbox's profile says `ingress.token: required`, a public request reaches
 * the agent only when it carries the token, in the query parameter
 * INGRESS_TOKEN_PARAM or the field INGRESS_TOKEN_FIELD; the gateway takes
 * both away from every request, so no agent sees one.
 */
#define INGRESS_TOKEN_CHARS     (CONFIG_INGRESS_TOKEN_BYTES - 1u)
#define INGRESS_TOKEN_RAW_BYTES 32u
#define INGRESS_TOKEN_PARAM     "agentsnet_token"
#define INGRESS_TOKEN_FIELD     "Agentsnet-Token"

/*
 * Writes the token of <raw> (INGRESS_TOKEN_RAW_BYTES bytes) to <out>
 * (CONFIG_INGRESS_TOKEN_BYTES): INGRESS_TOKEN_CHARS of [A-Za-z0-9_-] and a
 * NUL. Borrows <raw>.
 */
void ingress_token_encode(const uint8_t *raw, char *out);

/*
 * Whether request <req>, routed as <t>, carries <token> (INGRESS_TOKEN_CHARS
 * bytes): once at least, as the value of an INGRESS_TOKEN_PARAM parameter of
 * the query ('&'-separated; the name exact, the value as sent) or of an
 * INGRESS_TOKEN_FIELD field, and every such parameter and field holds it.
 * Each is compared in time that does not depend on where it differs. Borrows
 * everything.
 */
bool ingress_token_carried(const struct http1_request *req, const struct ingress_target *t,
			   const char *token);

/* Whether the query of <t> has an INGRESS_TOKEN_PARAM parameter (none reaches the agent). */
bool ingress_target_has_token(const struct ingress_target *t);

/* Who sent a public request, for the forwarding headers. */
struct ingress_client {
	const char *addr;  /* "192.0.2.1" or "2001:db8::1": no port, no brackets */
	const char *proto; /* "http" or "https": how it reached the gateway */
	/* The public path's prefix with the id, e.g. "/callbacks/a1"; NULL on the
	 * origin form, whose paths are the agent's from the root. */
	const char *prefix;
	size_t prefix_len;
	/* The gateway's public authority ("hooks.example.com", "127.0.0.1:8090"),
	 * sent as Host when the request has none: HTTP/1.0 allows that, the
	 * HTTP/1.1 the agent is sent does not (RFC 9112 section 3.2). */
	const char *authority;
};

/*
 * Writes the head the agent is sent for origin-form <req> routed as <t>:
 *   - the request line with the agent's path and HTTP/1.1, the query
 *     without its INGRESS_TOKEN_PARAM parameters (and without the '?' when
 *     nothing else is left);
 *   - every header of <req> except the hop-by-hop ones (Connection and the
 *     names it lists, Keep-Alive, TE, Trailer, Upgrade, Proxy-Connection,
 *     every Proxy-*), the forwarding ones a client could forge (Forwarded,
 *     every X-Forwarded-*, X-Real-IP), INGRESS_TOKEN_FIELD, and the names in
 *     <in>->strip_headers
 *     (compared ignoring case); Host is kept as the client sent it, and
 *     one without (HTTP/1.0) gets "Host: <c>->authority";
 *   - for an upgrade (ingress_is_upgrade): "Connection: Upgrade" and the
 *     client's Upgrade value;
 *   - the gateway's own X-Forwarded-For (<c>->addr), X-Forwarded-Proto,
 *     X-Forwarded-Host (the client's Host, omitted without one),
 *     X-Forwarded-Prefix (omitted on the origin form) and Forwarded (RFC
 *     7239: for, proto and host, an IPv6 address and any host with a port
 *     quoted);
 *   - the blank line.
 * Returns the bytes written, or -EMSGSIZE when <cap> is too small.
 */
ssize_t ingress_write_head(const struct http1_request *req, const struct ingress_target *t,
			   const struct verdict_ingress *in, const struct ingress_client *c,
			   char *out, size_t cap);

/*
 * One answer of an agent's to a public request, as the gateway relays it:
 * what isolates it from the other sandboxes' pages in a browser. On the path
 * form every sandbox shares one origin, so the answer may act only on its
 * sandbox's part of it; on the origin form the origin is its own, but a
 * cookie's Domain and Clear-Site-Data reach the registrable domain above it.
 */
struct ingress_answer {
	const struct verdict_ingress *in; /* csp_sandbox, scope_cookies, drop_origin_fields */
	bool origin;                      /* the request came by its sandbox's own origin */
	/* The path form: the sandbox's part of the origin, "<prefix>/<id>". */
	const char *scope;
	size_t scope_len;
	/* The public request's path, without the query: a cookie's default Path. */
	const char *path;
	size_t path_len;
	/* The origin form: its host name (the Host without a port or a trailing
	 * dot), the one Domain a cookie may name. */
	const char *host;
	size_t host_len;
};

/* Bytes ingress_write_response_head may add to a head: its Content-Security-Policy field. */
#define INGRESS_RESPONSE_ADDED_BYTES (sizeof("Content-Security-Policy: sandbox\r\n") - 1)

/*
 * Writes the head the public client is sent for the agent's parsed <resp>,
 * as http1_write_response_head writes it (with <connection>), less:
 *   - with in->scope_cookies, each Set-Cookie the browser could keep for
 *     more than this sandbox (RFC 6265 sections 5.1.4 and 5.2, read
 *     conservatively): a Domain attribute (on the origin form, one naming
 *     another host than its own), an attribute value over 1024 bytes
 *     (RFC 6265bis ignores it, keeping another), and on the path form any
 *     Path, or the default path when none is given (the request path's
 *     directory), that is not a->scope or below it with a path
 *     ingress_route would let through;
 *   - with in->drop_origin_fields, the fields that act on a whole origin:
 *     on the path form Alt-Svc, Clear-Site-Data, NEL, Report-To,
 *     Service-Worker-Allowed and Strict-Transport-Security; on the origin
 *     form Clear-Site-Data (its "cookies" clear the registrable domain);
 * plus, with in->csp_sandbox, on the path form, for a final status (200 and
 * up), "Content-Security-Policy: sandbox" as a field of its own beside any
 * the agent sent: whatever the Content-Type says, the browser may render
 * the answer as a document (HTML, XHTML, SVG, XML, a sniffed or missing
 * type), and the sandbox directive then gives it an opaque origin, no
 * scripts, no forms, no cookies, no storage of the shared one. A 101 gets
 * the drops, never the field. Returns the bytes written, or -EMSGSIZE when
 * <cap> is too small. Borrows <resp> and <a>; writes only <out>.
 */
ssize_t ingress_write_response_head(const struct http1_response *resp, const char *connection,
				    const struct ingress_answer *a, char *out, size_t cap);

/* Whether ingress_write_response_head would leave out a field of <resp> (for a 101: any). */
bool ingress_response_drops(const struct http1_response *resp, const struct ingress_answer *a);

/*
 * The PROXY protocol, version 2 (binary), with which the gateway's TLS
 * listener hands each decrypted connection to the plain one over the
 * daemon's internal socket: who the client is, since the plain side sees
 * only the daemon itself. Only TCP over IPv4 and IPv6 (PROXY command) and
 * LOCAL are used; TLVs are skipped.
 */
#define INGRESS_PROXY_BYTES_MAX 232u /* 16-byte header + the largest address block we accept */

/*
 * Writes the PROXY v2 header for a TCP connection from <src> to <dst> (both
 * AF_INET or both AF_INET6) to <out>/<cap>. Returns its length, -EAFNOSUPPORT
 * for other families or a mixed pair, or -EMSGSIZE.
 */
ssize_t ingress_proxy_write(const struct sockaddr *src, const struct sockaddr *dst, char *out,
			    size_t cap);

/*
 * Parses a PROXY v2 header at the start of <buf>/<len>. Returns its length
 * with the source address in *<src> (family AF_UNSPEC for a LOCAL command),
 * -EAGAIN when more bytes are needed, or -EPROTO: not the v2 signature, a
 * version other than 2, a command other than LOCAL/PROXY, a family other than
 * TCP over IPv4/IPv6 for PROXY, an address block too short for its family or
 * longer than INGRESS_PROXY_BYTES_MAX allows.
 */
ssize_t ingress_proxy_parse(const char *buf, size_t len, struct sockaddr_storage *src);

/*
 * A worker's sandbox ids -> sandbox slots: open addressing on XXH3 of the
 * id, full-id comparison on a hit, grown as it fills. Written and read by
 * one thread (the worker, from the commands the control path posts).
 */
struct ingress_route_entry;
struct ingress_routes {
	struct ingress_route_entry *entries; /* owned; capacity entries */
	uint32_t capacity;                   /* a power of two, or 0 before the first put */
	uint32_t used;                       /* live entries */
	uint32_t tombstones;                 /* removed entries not yet reclaimed */
};

/*
 * Maps <id>/<len> (a valid sandbox id) to <slot> and its <token>
 * (INGRESS_TOKEN_CHARS bytes, copied), replacing any mapping. 0 or -ENOMEM.
 */
int ingress_routes_put(struct ingress_routes *r, const char *id, size_t len, uint32_t slot,
		       const char *token);

/* Removes <id>'s mapping when it is <slot> (a later re-add of the id is left alone). */
void ingress_routes_del(struct ingress_routes *r, const char *id, size_t len, uint32_t slot);

/*
 * The slot of <id>/<len>, or -1 when none; its token (INGRESS_TOKEN_CHARS
 * bytes, no NUL, valid until the table changes) into *<token> unless NULL.
 */
int64_t ingress_routes_get(const struct ingress_routes *r, const char *id, size_t len,
			   const char **token);

/* Frees the table and zeroes <r>. */
void ingress_routes_free(struct ingress_routes *r);

#endif /* AN_CORE_INGRESS_H */
