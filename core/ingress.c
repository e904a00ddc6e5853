/*
 * The ingress gateway's pure parts: routing a public target to a sandbox,
 * the checks on the path the agent is sent, and the head that goes to it.
 *
 * The sandbox is chosen by the id alone, so the path checks are not what
 * keeps a request inside its sandbox; they keep shapes that two parsers can
 * read two ways (dot segments, also with ";params", encoded separators,
 * double encoding, a NUL, overlong or otherwise invalid UTF-8 such as
 * %C0%AE for '.', code points NFKC folds into dots or slashes) away from the
 * agent's server, which we do not know. They refuse rather than normalise: a
 * caller that sends "/a/../b" gets a 400, never "/b". A segment is decoded
 * once, byte by byte, and judged as a whole: no decoded buffer, no second
 * pass.
 *
 * A per-sandbox origin is read from the Host alone: a sub-domain of the
 * public host at the public port names a sandbox by its first label, or no
 * sandbox (404), never the path form, so the origin <id>.<host> serves only
 * <id>'s answers whatever the path says; the public host itself, and any
 * other Host, keep the path form webhooks use. Only a DNS label can be such
 * an id: an id with a dot would be a sub-domain of another sandbox's origin,
 * which shares cookies with it.
 *
 * The agent's answers are isolated as they go out, since a browser takes a
 * public URL's pages for its origin's: on the path form, where every sandbox
 * shares one, a CSP sandbox field on every final answer (rejected: reading
 * Content-Type, which a browser reads otherwise: sniffing, SVG, XML), and no
 * cookie or origin-wide field that could act beyond the sandbox's part of
 * it; a cookie is read as conservatively as the browsers differ (each Path
 * judged, an over-long value refused), and dropped when in doubt.
 *
 * The head is rebuilt, not patched: the request line with the agent's path,
 * the client's fields minus hop-by-hop, forgeable forwarding and profile-
 * stripped ones, then the gateway's own forwarding fields. Framing fields
 * pass untouched (the parser has already refused every ambiguity), and a
 * Connection option never removes them or Host.
 *
 * A sandbox's access token is checked against the worker's own copy, which
 * came with its route (no read of another thread's memory on the data path),
 * in constant time, and both the parameter and the field that carry it are
 * the gateway's: taken from every request, whatever the profile, so that the
 * agent never learns whether a client sent one.
 *
 * The route table is open addressing with linear probing on XXH3 of the id,
 * ids (at most 63 bytes) and tokens stored inline so a hit costs two cache
 * lines, a memcmp and no pointer chase. Deletion leaves a tombstone unless the next entry is empty, when
 * it and the tombstones before it become empty again. The table is rebuilt
 * when live entries plus tombstones pass 70%, into a capacity that leaves it
 * at most half full (never smaller than now): put/del churn rebuilds in
 * place instead of growing. Rejected: chaining (an allocation per put) and
 * a sorted array (O(n) inserts when thousands of sandboxes come and go).
 *
 * The PROXY v2 reader judges each field as soon as its bytes arrive: -EAGAIN
 * means a valid header can still follow, anything else (say, HTTP sent to
 * the internal socket) is -EPROTO at once. TLVs are skipped unread.
 */
#include "core/ingress.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <xxhash.h>

#include "core/an.h"
#include "core/config.h"
#include "core/pool.h"

/* The longest sandbox id: CONFIG_SANDBOX_ID_BYTES_MAX counts the NUL. */
#define INGRESS_ID_BYTES_MAX (CONFIG_SANDBOX_ID_BYTES_MAX - 1u)
/* The first table: a worker with a few sandboxes never rebuilds. */
#define INGRESS_ROUTES_CAPACITY_MIN 64u
/* Far past any host's sandbox count; keeps capacity * 7 inside uint64_t math. */
#define INGRESS_ROUTES_CAPACITY_MAX (1u << 30)
/* Rebuild when (live + tombstones) / capacity would pass 7/10. */
#define INGRESS_ROUTES_LOAD_NUM 7u
#define INGRESS_ROUTES_LOAD_DEN 10u

static_assert(INGRESS_ID_BYTES_MAX <= UINT8_MAX, "id_len is a uint8_t");
static_assert((INGRESS_ROUTES_CAPACITY_MIN & (INGRESS_ROUTES_CAPACITY_MIN - 1)) == 0,
	      "capacities are powers of two");
static_assert((INGRESS_ROUTES_CAPACITY_MAX & (INGRESS_ROUTES_CAPACITY_MAX - 1)) == 0,
	      "capacities are powers of two");

enum route_state {
	ROUTE_EMPTY = 0, /* zeroed memory is an empty table */
	ROUTE_LIVE,
	ROUTE_TOMBSTONE,
};

struct ingress_route_entry {
	uint64_t hash;
	uint32_t slot;
	uint8_t state; /* enum route_state */
	uint8_t id_len;
	char id[INGRESS_ID_BYTES_MAX];   /* not NUL-terminated */
	char token[INGRESS_TOKEN_CHARS]; /* the sandbox's (core/ingress.h), not NUL-terminated */
};

/* ---- Routing and path checks ---- */

static bool id_byte_ok(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '.' || ch == '-';
}

/* The rule of engine_sandbox_id_valid, on a view: the id names a directory. */
static bool id_valid(const char *id, size_t n)
{
	AN_DASSERT(id != NULL || n == 0);
	if (n == 0 || n > INGRESS_ID_BYTES_MAX || id[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!id_byte_ok(id[i]))
			return false;
	}
	AN_DASSERT(id[0] != '.');
	return true;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The first byte <c> in [<p>, <end>), or <end>. */
static const char *find_byte(const char *p, const char *end, char c)
{
	AN_DASSERT(p <= end);
	while (p < end && *p != c)
		p++;
	AN_DASSERT(p == end || *p == c);
	return p;
}

/*
 * Code points that Unicode compatibility normalisation (NFKC) turns into
 * dots only, or into text holding '/' or '\': a server that normalises a
 * decoded path reads U+FF0E U+FF0E as "..", U+FF0F as "/", U+2100 as "a/c".
 * Every such code point of Unicode 14.
 */
static const uint32_t compat_separators[] = {
	0x2024, 0x2025, 0x2026, 0x2100, 0x2101, 0x2105, 0x2106,
	0xfe19, 0xfe30, 0xfe52, 0xfe68, 0xff0e, 0xff0f, 0xff3c,
};

static bool compat_separator(uint32_t cp)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(compat_separators); i++) {
		if (compat_separators[i] == cp)
			return true;
	}
	return false;
}

/*
 * UTF-8 read as RFC 3629 section 4 allows it, a byte at a time: shortest
 * form only (no C0 AE for '.', no E0 80 AF for '/'), no surrogates, nothing
 * past U+10FFFF. A zeroed struct is between code points.
 */
struct utf8_scan {
	uint32_t cp;    /* the code point so far, complete when need is 0 */
	uint8_t need;   /* continuation bytes still to come */
	uint8_t lo, hi; /* the range the next continuation byte must lie in */
};

/* Feeds byte <b>: -1 when it cannot continue valid UTF-8, 1 when it ends a code point, else 0. */
static int utf8_step(struct utf8_scan *u, unsigned b)
{
	AN_DASSERT(b <= 0xff);
	if (u->need > 0) {
		if (b < u->lo || b > u->hi)
			return -1;
		u->cp = (u->cp << 6) | (b & 0x3fu);
		u->lo = 0x80;
		u->hi = 0xbf;
		u->need--;
		return u->need == 0 ? 1 : 0;
	}
	u->lo = 0x80;
	u->hi = 0xbf;
	if (b < 0x80) {
		u->cp = b;
		return 1;
	}
	if (b >= 0xc2 && b <= 0xdf) {
		u->cp = b & 0x1fu;
		u->need = 1;
	} else if (b >= 0xe0 && b <= 0xef) {
		u->cp = b & 0x0fu;
		u->need = 2;
		u->lo = b == 0xe0 ? 0xa0 : 0x80; /* E0 80..9F: an overlong */
		u->hi = b == 0xed ? 0x9f : 0xbf; /* ED A0..BF: a surrogate */
	} else if (b >= 0xf0 && b <= 0xf4) {
		u->cp = b & 0x07u;
		u->need = 3;
		u->lo = b == 0xf0 ? 0x90 : 0x80; /* F0 80..8F: an overlong */
		u->hi = b == 0xf4 ? 0x8f : 0xbf; /* F4 90..: past U+10FFFF */
	} else {
		return -1; /* a continuation byte first, C0, C1 (overlongs) or F5..FF */
	}
	AN_DASSERT(u->need > 0);
	return 0;
}

/* The byte at <s>[*<i>] as decoded: itself, or a %XX's value (*<i> then on its last digit). */
static int segment_byte(const char *s, size_t n, size_t *i)
{
	AN_DASSERT(*i < n);
	if (s[*i] != '%')
		return (unsigned char)s[*i];
	int hi = n - *i >= 3 ? hex_value(s[*i + 1]) : -1;
	int lo = n - *i >= 3 ? hex_value(s[*i + 2]) : -1;
	if (hi < 0 || lo < 0)
		return -1;
	*i += 2;
	AN_DASSERT(*i < n);
	return hi * 16 + lo;
}

/*
 * One segment (the bytes between two '/'), decoded as the agent's server
 * would. Refused: a raw '\', a bad escape, what decodes to a separator, a
 * second round of encoding or a NUL, bytes that are not shortest-form UTF-8,
 * a compat_separators code point, and a segment whose name (what comes
 * before its first ';', raw or %3B: the path parameters Tomcat and others
 * strip) is "." or "..", or is empty where the segment is not the <last>.
 */
static int segment_check(const char *s, size_t n, bool last)
{
	struct utf8_scan u = { 0 };
	size_t name_len = 0;
	size_t name_dots = 0;
	bool in_name = true;

	AN_DASSERT(s != NULL || n == 0);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\')
			return -EPERM;
		int v = segment_byte(s, n, &i);
		if (v < 0 || v == '/' || v == '\\' || v == '%' || v == 0)
			return -EPERM;
		int done = utf8_step(&u, (unsigned)v);
		if (done < 0 || (done > 0 && compat_separator(u.cp)))
			return -EPERM;
		in_name = in_name && v != ';';
		name_len += in_name;
		name_dots += in_name && v == '.';
	}
	AN_DASSERT(name_dots <= name_len);
	if (u.need > 0)
		return -EPERM; /* a sequence cut short */
	if (name_len == 0)
		return last ? 0 : -EPERM; /* "//" or "/;x/": merged by some servers, not others */
	return name_len == name_dots && name_dots <= 2 ? -EPERM : 0;
}

/* The path part of the rest: "" or "/" then segments. */
static int path_check(const char *p, size_t n)
{
	size_t seg = 0;

	AN_ASSERT(p != NULL || n == 0);
	AN_ASSERT(n == 0 || p[0] == '/');
	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		if (i > 0) {
			int rc = segment_check(p + seg, i - seg, i == n);
			if (rc != 0)
				return rc;
		}
		seg = i + 1;
	}
	return 0;
}

int ingress_route(const char *prefix, size_t prefix_len, const char *target, size_t len,
		  struct ingress_target *out)
{
	AN_ASSERT(prefix != NULL);
	AN_ASSERT(target != NULL || len == 0);
	AN_ASSERT(out != NULL);
	AN_ASSERT(prefix_len == 0 || prefix[prefix_len - 1] != '/');
	if (len <= prefix_len || memcmp(target, prefix, prefix_len) != 0 ||
	    target[prefix_len] != '/')
		return -ENOENT;
	const char *end = target + len;
	const char *id = target + prefix_len + 1;
	const char *p = id;
	while (p < end && *p != '/' && *p != '?')
		p++;
	if (!id_valid(id, (size_t)(p - id)))
		return -ENOENT;
	/* A fragment is never part of a request-target (RFC 9112 section 3.2), query included. */
	if (find_byte(p, end, '#') != end)
		return -EPERM;
	const char *query = find_byte(p, end, '?');
	int rc = path_check(p, (size_t)(query - p));
	if (rc != 0)
		return rc;
	out->id = id;
	out->id_len = (size_t)(p - id);
	out->rest = p;
	out->rest_len = (size_t)(end - p);
	out->origin = false;
	AN_ASSERT(out->rest_len == 0 || out->rest[0] == '/' || out->rest[0] == '?');
	return 0;
}

/* ---- Per-sandbox origins ---- */

/* A DNS label (RFC 1123 section 2.1): 1-63 of [A-Za-z0-9-], not starting or ending with '-'. */
static bool label_ok(const char *s, size_t n)
{
	AN_DASSERT(s != NULL || n == 0);
	if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-'))
			return false;
	}
	AN_DASSERT(n <= INGRESS_ID_BYTES_MAX);
	return true;
}

bool ingress_id_is_origin(const char *id, size_t len)
{
	AN_ASSERT(id != NULL || len == 0);
	if (!label_ok(id, len))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (id[i] >= 'A' && id[i] <= 'Z')
			return false;
	}
	AN_DASSERT(id_valid(id, len));
	return true;
}

/* The port <p>/<n> (the digits after a ':'), or 0 when it is not 1..65535 in decimal. */
static uint16_t port_value(const char *p, size_t n)
{
	uint32_t v = 0;

	AN_DASSERT(p != NULL || n == 0);
	if (n == 0 || n > 5)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		v = v * 10u + (uint32_t)(p[i] - '0');
	}
	AN_DASSERT(v <= 99999u);
	return v <= UINT16_MAX ? (uint16_t)v : 0;
}

void ingress_site_init(struct ingress_site *site, const char *prefix, const char *public_url,
		       bool origins)
{
	AN_ASSERT(site != NULL);
	AN_ASSERT(prefix != NULL && prefix[0] == '/');
	*site = (struct ingress_site){ .prefix = prefix, .prefix_len = strlen(prefix) };
	if (!origins)
		return;
	AN_ASSERT(public_url != NULL && strstr(public_url, "://") != NULL);
	uint16_t scheme_port = strncmp(public_url, "https:", 6) == 0 ? 443 : 80;
	const char *host = strstr(public_url, "://") + 3;
	const char *colon = strchr(host, ':');
	size_t n = colon != NULL ? (size_t)(colon - host) : strlen(host);
	uint16_t port = colon != NULL ? port_value(colon + 1, strlen(colon + 1)) : scheme_port;
	AN_ASSERT(port != 0); /* the loader checked the URL */
	if (n > 0 && host[n - 1] == '.')
		n--;
	AN_ASSERT(n > 0);
	site->origin_host = host;
	site->origin_host_len = n;
	site->origin_port = port;
	site->origin_port_implied = port == scheme_port;
}

enum origin_match {
	ORIGIN_NONE,   /* not a sub-domain of the public host at its port: the path form */
	ORIGIN_LABEL,  /* <label>.<public host>: the label may be an id */
	ORIGIN_NOT_ID, /* a sub-domain whose first part no id can be */
};

/* What Host value <host>/<n> names for <site>; the first label into *<label>. */
static enum origin_match origin_of(const struct ingress_site *site, const char *host, size_t n,
				   const char **label, size_t *label_len)
{
	size_t h = site->origin_host_len;

	AN_DASSERT(site->origin_host == NULL || h > 0);
	if (site->origin_host == NULL || host == NULL || n == 0 || host[0] == '[')
		return ORIGIN_NONE; /* an IPv6 literal has no sub-domains */
	const char *colon = memchr(host, ':', n);
	size_t name = colon != NULL ? (size_t)(colon - host) : n;
	if (colon != NULL ? port_value(colon + 1, n - name - 1) != site->origin_port
			  : !site->origin_port_implied)
		return ORIGIN_NONE;
	if (name > 0 && host[name - 1] == '.')
		name--; /* "a1.hooks.example." is the same name */
	if (name <= h || host[name - h - 1] != '.' ||
	    strncasecmp(host + name - h, site->origin_host, h) != 0)
		return ORIGIN_NONE;
	*label = host;
	*label_len = name - h - 1;
	AN_DASSERT(*label_len < n);
	return label_ok(host, *label_len) ? ORIGIN_LABEL : ORIGIN_NOT_ID;
}

int ingress_route_request(const struct ingress_site *site, const char *host, size_t host_len,
			  const char *target, size_t len, struct ingress_target *out)
{
	const char *label = NULL;
	size_t label_len = 0;

	AN_ASSERT(site != NULL && out != NULL);
	AN_ASSERT(target != NULL || len == 0);
	enum origin_match m = origin_of(site, host, host_len, &label, &label_len);
	if (m == ORIGIN_NONE)
		return ingress_route(site->prefix, site->prefix_len, target, len, out);
	if (m == ORIGIN_NOT_ID || len == 0 || target[0] != '/')
		return -ENOENT;
	const char *end = target + len;
	if (find_byte(target, end, '#') != end)
		return -EPERM;
	int rc = path_check(target, (size_t)(find_byte(target, end, '?') - target));
	if (rc != 0)
		return rc;
	*out = (struct ingress_target){
		.id = label, .id_len = label_len, .rest = target, .rest_len = len, .origin = true
	};
	AN_ASSERT(id_valid(out->id, out->id_len));
	return 0;
}

int ingress_public_url(const char *base, const char *prefix, bool origins, const char *id,
		       const char *token, char *out, size_t cap)
{
	const char *auth = strstr(base, "://");
	bool origin = origins && ingress_id_is_origin(id, strlen(id));
	int n;

	AN_ASSERT(auth != NULL && prefix != NULL && id != NULL);
	AN_ASSERT(out != NULL && cap > 0);
	if (origin)
		n = snprintf(out, cap, "%.*s%s.%s", (int)(auth + 3 - base), base, id, auth + 3);
	else
		n = snprintf(out, cap, "%s%s/%s", base, prefix, id);
	if (n > 0 && (size_t)n < cap && token != NULL)
		n += snprintf(out + n, cap - (size_t)n, "%s?" INGRESS_TOKEN_PARAM "=%s",
			      origin ? "/" : "", token);
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

bool ingress_method_allowed(const struct verdict_ingress *in, const char *method, size_t len)
{
	AN_ASSERT(in != NULL);
	AN_ASSERT(in->method_count <= VERDICT_INGRESS_METHODS_MAX);
	AN_ASSERT(method != NULL || len == 0);
	for (uint32_t i = 0; i < in->method_count; i++) {
		const char *m = in->methods[i];
		if (strlen(m) == len && memcmp(m, method, len) == 0)
			return true;
	}
	return false;
}

/* ---- The access token ---- */

static_assert((INGRESS_TOKEN_RAW_BYTES * 8u + 5u) / 6u == INGRESS_TOKEN_CHARS,
	      "the token is its raw bytes in base64url without padding");

void ingress_token_encode(const uint8_t *raw, char *out)
{
	static const char alphabet[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	uint32_t bits = 0;
	uint32_t held = 0;
	size_t n = 0;

	AN_ASSERT(raw != NULL && out != NULL);
	for (size_t i = 0; i < INGRESS_TOKEN_RAW_BYTES; i++) {
		bits = (bits << 8) | raw[i];
		held += 8;
		while (held >= 6) {
			held -= 6;
			out[n++] = alphabet[(bits >> held) & 0x3fu];
		}
	}
	if (held > 0)
		out[n++] = alphabet[(bits << (6 - held)) & 0x3fu];
	AN_ASSERT(n == INGRESS_TOKEN_CHARS);
	out[n] = '\0';
}

/*
 * Whether <v>/<n> is <token>, in time that depends on <n> alone: a guess
 * learns nothing from where it went wrong. The accumulator is volatile so
 * that no compiler turns the loop into an early exit.
 */
static bool token_equal(const char *v, size_t n, const char *token)
{
	volatile unsigned diff = n != INGRESS_TOKEN_CHARS;

	for (size_t i = 0; i < INGRESS_TOKEN_CHARS; i++)
		diff |= (unsigned char)token[i] ^ (unsigned char)(i < n ? v[i] : 0);
	return diff == 0;
}

/* The '&'-separated parameters of a query, one after the other. */
struct query_iter {
	const char *p;   /* the next parameter's start */
	const char *end; /* the query's */
	bool done;
};

/* The parameters of <t>'s query (after its first '?'); none without one. */
static struct query_iter query_params(const struct ingress_target *t)
{
	const char *end = t->rest + t->rest_len;
	const char *q = find_byte(t->rest, end, '?');

	return (struct query_iter){ .p = q < end ? q + 1 : end, .end = end, .done = q == end };
}

/* The next parameter into <param>/<n>; false once there is none. */
static bool query_next(struct query_iter *it, const char **param, size_t *n)
{
	if (it->done)
		return false;
	const char *amp = find_byte(it->p, it->end, '&');
	*param = it->p;
	*n = (size_t)(amp - it->p);
	it->done = amp == it->end;
	it->p = it->done ? it->end : amp + 1;
	AN_DASSERT(it->p <= it->end);
	return true;
}

/* Parameter <param>/<n> is the token's: its value, "" when it has none, into <value>/<len>. */
static bool token_param(const char *param, size_t n, const char **value, size_t *len)
{
	static const size_t name_len = sizeof(INGRESS_TOKEN_PARAM) - 1;

	if (n < name_len || memcmp(param, INGRESS_TOKEN_PARAM, name_len) != 0 ||
	    (n > name_len && param[name_len] != '='))
		return false;
	*value = n > name_len ? param + name_len + 1 : param + n;
	*len = n > name_len ? n - name_len - 1 : 0;
	return true;
}

bool ingress_target_has_token(const struct ingress_target *t)
{
	struct query_iter it = query_params(t);
	const char *param;
	const char *value;
	size_t n;
	size_t value_len;

	while (query_next(&it, &param, &n)) {
		if (token_param(param, n, &value, &value_len))
			return true;
	}
	return false;
}

bool ingress_token_carried(const struct http1_request *req, const struct ingress_target *t,
			   const char *token)
{
	struct query_iter it = query_params(t);
	const char *v;
	size_t n;
	size_t len;
	uint32_t carried = 0;
	bool all_equal = true;

	AN_ASSERT(req != NULL && token != NULL);
	while (query_next(&it, &v, &n)) {
		if (!token_param(v, n, &v, &len))
			continue;
		carried++;
		all_equal &= token_equal(v, len, token);
	}
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		if (!http1_name_is(h->name, h->name_len, INGRESS_TOKEN_FIELD))
			continue;
		carried++;
		all_equal &= token_equal(h->value, h->value_len, token);
	}
	AN_ASSERT(carried <= LIMITS_REQUEST_LINE_BYTES_MAX + LIMITS_HEADERS_MAX);
	return carried > 0 && all_equal;
}

/* <t>'s rest without its token parameters (nor the '?' when none is left) into <out>/<cap>. */
static size_t rest_without_token(const struct ingress_target *t, char *out, size_t cap)
{
	struct query_iter it = query_params(t);
	size_t path_len = (size_t)(it.p - t->rest) - 1;
	size_t kept = path_len;
	const char *param;
	const char *value;
	size_t n;
	size_t value_len;

	AN_ASSERT(!it.done && it.p[-1] == '?');
	AN_ASSERT(t->rest_len <= cap);
	memcpy(out, t->rest, path_len);
	while (query_next(&it, &param, &n)) {
		if (token_param(param, n, &value, &value_len))
			continue;
		out[kept] = kept == path_len ? '?' : '&';
		memcpy(out + kept + 1, param, n);
		kept += 1 + n;
	}
	AN_ASSERT(kept < t->rest_len);
	return kept;
}

/* ---- Upgrade and hop-by-hop fields ---- */

static bool list_has(const char *v, size_t n, const char *lit)
{
	const char *p = v;
	const char *elem;
	size_t elem_len;

	AN_DASSERT(v != NULL || n == 0);
	AN_DASSERT(lit != NULL);
	while (http1_list_next(&p, v + n, &elem, &elem_len)) {
		if (http1_name_is(elem, elem_len, lit))
			return true;
	}
	return false;
}

static bool header_is(const struct http1_header *h, const char *lit, size_t lit_len)
{
	return h->name_len == lit_len && http1_name_is(h->name, h->name_len, lit);
}

bool ingress_is_upgrade(const struct http1_request *req)
{
	bool upgrade = false;
	bool listed = false;

	AN_ASSERT(req != NULL);
	AN_ASSERT(req->header_count <= LIMITS_HEADERS_MAX);
	/* RFC 9110 section 7.8: a server ignores Upgrade in an HTTP/1.0 request. */
	if (req->version_minor != 1)
		return false;
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		/* An empty Upgrade names no protocol to switch to. */
		if (header_is(h, "upgrade", 7) && h->value_len > 0)
			upgrade = true;
		else if (header_is(h, "connection", 10) && !listed)
			listed = list_has(h->value, h->value_len, "upgrade");
	}
	return upgrade && listed;
}

/*
 * The forwarding fields only the gateway may write: a client's own would
 * reach the agent as if the gateway had vouched for them; and the token,
 * which is the gateway's to check.
 */
static bool head_gateway_drops(const char *name, size_t n)
{
	AN_DASSERT(name != NULL);
	AN_DASSERT(n > 0);
	if (n >= 12 && http1_name_is(name, 12, "x-forwarded-"))
		return true;
	return http1_name_is(name, n, "forwarded") || http1_name_is(name, n, "x-real-ip") ||
	       http1_name_is(name, n, INGRESS_TOKEN_FIELD);
}

static bool head_profile_strips(const struct verdict_ingress *in, const char *name, size_t n)
{
	AN_ASSERT(in->strip_count <= VERDICT_INGRESS_STRIP_MAX);
	AN_DASSERT(name != NULL);
	for (uint32_t i = 0; i < in->strip_count; i++) {
		if (http1_name_is(name, n, in->strip_headers[i]))
			return true;
	}
	return false;
}

/* Fields that never reach the agent: hop-by-hop, forwarding and profile-stripped ones. */
static void head_drops(const struct http1_request *req, const struct verdict_ingress *in,
		       bool *drop)
{
	AN_ASSERT(req->header_count <= LIMITS_HEADERS_MAX);
	AN_ASSERT(drop != NULL);
	http1_hop_by_hop(req, drop);
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		drop[i] = drop[i] || head_gateway_drops(h->name, h->name_len) ||
			  head_profile_strips(in, h->name, h->name_len);
	}
}

/* ---- Writing the head ---- */

static void out_str(struct http1_out *o, const char *s)
{
	http1_out_put(o, s, strlen(s));
}

/* <v>/<n> as the inside of an RFC 9110 quoted-string. */
static void out_quoted(struct http1_out *o, const char *v, size_t n)
{
	AN_DASSERT(v != NULL || n == 0);
	AN_DASSERT(o != NULL);
	for (size_t i = 0; i < n; i++) {
		if (v[i] == '"' || v[i] == '\\')
			http1_out_put(o, "\\", 1);
		http1_out_put(o, &v[i], 1);
	}
}

/* "Connection: Upgrade" and the client's Upgrade values, joined as one list. */
static void head_put_upgrade(struct http1_out *o, const struct http1_request *req)
{
	bool first = true;

	AN_ASSERT(req->header_count <= LIMITS_HEADERS_MAX);
	out_str(o, "Connection: Upgrade\r\nUpgrade: ");
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		if (!header_is(h, "upgrade", 7) || h->value_len == 0)
			continue;
		if (!first)
			http1_out_put(o, ", ", 2);
		http1_out_put(o, h->value, h->value_len);
		first = false;
	}
	AN_ASSERT(!first);
	http1_out_put(o, "\r\n", 2);
}

static void head_put_forwarding(struct http1_out *o, const struct http1_request *req,
				const struct ingress_client *c)
{
	size_t addr_len = strlen(c->addr);
	bool v6 = memchr(c->addr, ':', addr_len) != NULL;
	bool host = req->host_header != NULL && req->host_header_len > 0;

	AN_ASSERT(addr_len > 0);
	AN_ASSERT(strcmp(c->proto, "http") == 0 || strcmp(c->proto, "https") == 0);
	if (c->prefix != NULL)
		AN_ASSERT(c->prefix_len > 0 && c->prefix[0] == '/');
	http1_out_field(o, "X-Forwarded-For", 15, c->addr, addr_len);
	http1_out_field(o, "X-Forwarded-Proto", 17, c->proto, strlen(c->proto));
	if (host)
		http1_out_field(o, "X-Forwarded-Host", 16, req->host_header, req->host_header_len);
	if (c->prefix != NULL)
		http1_out_field(o, "X-Forwarded-Prefix", 18, c->prefix, c->prefix_len);
	/* RFC 7239 section 6: an IPv6 node is bracketed, so it must be quoted. */
	out_str(o, v6 ? "Forwarded: for=\"[" : "Forwarded: for=");
	http1_out_put(o, c->addr, addr_len);
	out_str(o, v6 ? "]\";proto=" : ";proto=");
	out_str(o, c->proto);
	if (host) {
		/* Always quoted: a port's ':' is not a token character. */
		out_str(o, ";host=\"");
		out_quoted(o, req->host_header, req->host_header_len);
		http1_out_put(o, "\"", 1);
	}
	http1_out_put(o, "\r\n", 2);
}

ssize_t ingress_write_head(const struct http1_request *req, const struct ingress_target *t,
			   const struct verdict_ingress *in, const struct ingress_client *c,
			   char *out, size_t cap)
{
	bool drop[LIMITS_HEADERS_MAX];
	struct http1_out o = { .p = out, .cap = cap };

	AN_ASSERT(req != NULL);
	AN_ASSERT(t != NULL);
	AN_ASSERT(in != NULL);
	AN_ASSERT(c != NULL);
	AN_ASSERT(out != NULL || cap == 0);
	AN_ASSERT(req->form == HTTP1_FORM_ORIGIN);
	AN_ASSERT(t->rest_len == 0 || t->rest[0] == '/' || t->rest[0] == '?');
	head_drops(req, in, drop);
	if (ingress_target_has_token(t)) {
		char rest[LIMITS_REQUEST_LINE_BYTES_MAX];
		size_t n = rest_without_token(t, rest, sizeof(rest));
		http1_out_request_line(&o, req->method, req->method_len, rest, n);
	} else {
		http1_out_request_line(&o, req->method, req->method_len, t->rest, t->rest_len);
	}
	http1_out_fields(&o, req, drop);
	if (req->host_header == NULL) {
		AN_ASSERT(c->authority != NULL && c->authority[0] != '\0');
		http1_out_field(&o, "Host", 4, c->authority, strlen(c->authority));
	}
	if (ingress_is_upgrade(req))
		head_put_upgrade(&o, req);
	head_put_forwarding(&o, req, c);
	return http1_out_end(&o);
}

/* ---- The agent's answers ---- */

/* RFC 6265bis section 5.6: a user agent ignores an attribute value longer than this. */
#define INGRESS_COOKIE_AV_BYTES_MAX 1024u

/*
 * Response fields whose effect reaches past the page they came with, to its
 * whole origin: on the path form, every sandbox's pages.
 */
static const char *const origin_fields[] = {
	"alt-svc",                   /* RFC 7838: where the origin's requests go */
	"clear-site-data",           /* wipes the origin's storage, its site's cookies */
	"nel",                       /* Network Error Logging: reports of its requests */
	"report-to",                 /* where those reports go */
	"service-worker-allowed",    /* a worker controlling paths above its own */
	"strict-transport-security", /* HTTPS only, for the host and its sub-domains */
};

/* One attribute of a Set-Cookie value (after its first ';'), trimmed as RFC 6265 5.2 does. */
struct cookie_av {
	const char *name;
	size_t name_len;
	const char *value; /* "" when the attribute has no '=' */
	size_t value_len;
};

/* <*s>/<*n> without leading and trailing SP and HTAB. */
static void wsp_trim(const char **s, size_t *n)
{
	while (*n > 0 && ((*s)[0] == ' ' || (*s)[0] == '\t')) {
		(*s)++;
		(*n)--;
	}
	while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
		(*n)--;
}

/* The attribute [<av>, <end>): its name up to the first '=', its value after it. */
static void cookie_av_split(const char *av, const char *end, struct cookie_av *out)
{
	const char *eq = find_byte(av, end, '=');

	AN_DASSERT(av <= end);
	out->name = av;
	out->name_len = (size_t)(eq - av);
	out->value = eq < end ? eq + 1 : end;
	out->value_len = (size_t)(end - out->value);
	wsp_trim(&out->name, &out->name_len);
	wsp_trim(&out->value, &out->value_len);
	AN_DASSERT(out->value + out->value_len <= end);
}

/* <p>/<n> is the sandbox's part of the shared origin: its scope, or a path ingress_route lets through below it. */
static bool cookie_path_inside(const struct ingress_answer *a, const char *p, size_t n)
{
	AN_DASSERT(!a->origin && a->scope_len > 0);
	if (n < a->scope_len || memcmp(p, a->scope, a->scope_len) != 0)
		return false;
	if (n > a->scope_len && p[a->scope_len] != '/')
		return false; /* "/callbacks/a1x" is another sandbox's */
	return path_check(p, n) == 0;
}

/*
 * The path a cookie is kept for, given Path value <v>/<n> (NULL: none),
 * into *<p> and *<len>: the value when it starts with '/', else the default
 * path, the request path up to its last '/' ("/" when that is the first:
 * RFC 6265 section 5.1.4).
 */
static void cookie_path(const struct ingress_answer *a, const char *v, size_t n, const char **p,
			size_t *len)
{
	size_t last = 0;

	if (v != NULL && n > 0 && v[0] == '/') {
		*p = v;
		*len = n;
		return;
	}
	AN_DASSERT(a->path_len > 0 && a->path[0] == '/');
	for (size_t i = 0; i < a->path_len; i++)
		last = a->path[i] == '/' ? i : last;
	*p = a->path;
	*len = last == 0 ? 1 : last;
}

/* Domain value <v>/<n> widens nothing: the origin form's own host (a leading '.' ignored), or none. */
static bool cookie_domain_own(const struct ingress_answer *a, const char *v, size_t n)
{
	if (n > 0 && v[0] == '.') {
		v++;
		n--;
	}
	return a->origin && (n == 0 || (n == a->host_len && strncasecmp(v, a->host, n) == 0));
}

/* Whether Set-Cookie value <v>/<n> could set a cookie for more than this sandbox. */
static bool cookie_escapes(const struct ingress_answer *a, const char *v, size_t n)
{
	const char *end = v + n;
	const char *p = find_byte(v, end, ';');
	const char *path;
	size_t path_len;
	bool path_given = false;
	struct cookie_av av;

	while (p < end) {
		const char *next = find_byte(p + 1, end, ';');
		cookie_av_split(p + 1, next, &av);
		p = next;
		bool domain = av.name_len == 6 && http1_name_is(av.name, 6, "domain");
		if (!domain && !(av.name_len == 4 && http1_name_is(av.name, 4, "path")))
			continue;
		/* Ignored by some browsers and not others: which one they keep is unknown. */
		if (av.value_len > INGRESS_COOKIE_AV_BYTES_MAX)
			return true;
		if (domain && !cookie_domain_own(a, av.value, av.value_len))
			return true;
		if (domain || a->origin)
			continue;
		path_given = true;
		cookie_path(a, av.value, av.value_len, &path, &path_len);
		if (!cookie_path_inside(a, path, path_len))
			return true;
	}
	if (a->origin || path_given)
		return false;
	cookie_path(a, NULL, 0, &path, &path_len);
	return !cookie_path_inside(a, path, path_len);
}

/* Whether the gateway leaves field <h> of an answer out (ingress_write_response_head). */
static bool answer_drops(const struct ingress_answer *a, const struct http1_header *h)
{
	if (header_is(h, "set-cookie", 10))
		return a->in->scope_cookies && cookie_escapes(a, h->value, h->value_len);
	if (!a->in->drop_origin_fields)
		return false;
	if (a->origin)
		return header_is(h, "clear-site-data", 15);
	for (size_t i = 0; i < AN_ARRAY_LEN(origin_fields); i++) {
		if (header_is(h, origin_fields[i], strlen(origin_fields[i])))
			return true;
	}
	return false;
}

/* Sets <drop>[i] for each field of <resp> the gateway leaves out; their count. */
static uint32_t answer_drop_marks(const struct http1_response *resp, const struct ingress_answer *a,
				  bool *drop)
{
	uint32_t n = 0;

	AN_ASSERT(resp->header_count <= LIMITS_HEADERS_MAX);
	for (uint32_t i = 0; i < resp->header_count; i++) {
		drop[i] = answer_drops(a, &resp->headers[i]);
		n += drop[i];
	}
	AN_ASSERT(n <= resp->header_count);
	return n;
}

bool ingress_response_drops(const struct http1_response *resp, const struct ingress_answer *a)
{
	bool drop[LIMITS_HEADERS_MAX];

	AN_ASSERT(resp != NULL && a != NULL && a->in != NULL);
	return answer_drop_marks(resp, a, drop) > 0;
}

ssize_t ingress_write_response_head(const struct http1_response *resp, const char *connection,
				    const struct ingress_answer *a, char *out, size_t cap)
{
	bool drop[LIMITS_HEADERS_MAX];
	struct http1_response kept;
	const struct http1_response *head = resp;

	AN_ASSERT(resp != NULL && a != NULL && a->in != NULL);
	AN_ASSERT(a->path_len > 0 && a->path[0] == '/');
	if (!a->origin)
		AN_ASSERT(a->scope_len > 0 && a->scope[0] == '/');
	if (answer_drop_marks(resp, a, drop) > 0) {
		kept = *resp;
		kept.header_count = 0;
		for (uint32_t i = 0; i < resp->header_count; i++) {
			if (!drop[i])
				kept.headers[kept.header_count++] = resp->headers[i];
		}
		head = &kept;
	}
	ssize_t n = http1_write_response_head(head, connection, out, cap);
	if (n < 0 || !a->in->csp_sandbox || a->origin || resp->status < 200)
		return n;
	/* A field of its own: one the agent sent stays whole, and browsers enforce both. */
	AN_ASSERT(n >= 2 && out[n - 2] == '\r' && out[n - 1] == '\n');
	struct http1_out o = { .p = out, .cap = cap, .len = (size_t)n - 2 };
	http1_out_field(&o, "Content-Security-Policy", 23, "sandbox", 7);
	n = http1_out_end(&o);
	if (n > 0)
		AN_ASSERT((size_t)n <= cap);
	return n;
}

/* ---- The PROXY v2 header ---- */

/* Signature, version/command, family/transport, the block's 16-bit length. */
#define INGRESS_PROXY_HEAD_BYTES      16u
#define INGRESS_PROXY_BLOCK_BYTES_MAX (INGRESS_PROXY_BYTES_MAX - INGRESS_PROXY_HEAD_BYTES)
#define INGRESS_PROXY_V4_BLOCK_BYTES  12u /* src addr, dst addr, src port, dst port */
#define INGRESS_PROXY_V6_BLOCK_BYTES  36u
#define INGRESS_PROXY_VERSION         0x20u /* high nibble of byte 12 */
#define INGRESS_PROXY_CMD_LOCAL       0x0u
#define INGRESS_PROXY_CMD_PROXY       0x1u
#define INGRESS_PROXY_TCP4            0x11u /* AF_INET, SOCK_STREAM */
#define INGRESS_PROXY_TCP6            0x21u /* AF_INET6, SOCK_STREAM */

static_assert(INGRESS_PROXY_BLOCK_BYTES_MAX >= INGRESS_PROXY_V6_BLOCK_BYTES,
	      "an IPv6 address block fits");
static_assert(INGRESS_PROXY_BLOCK_BYTES_MAX <= UINT16_MAX, "the length field is 16 bits");

static const unsigned char proxy_sig[12] = { 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
					     0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A };

/* The address block a PROXY command needs for family byte <fam>, or 0 when we refuse it. */
static size_t proxy_block_need(uint8_t fam)
{
	if (fam == INGRESS_PROXY_TCP4)
		return INGRESS_PROXY_V4_BLOCK_BYTES;
	if (fam == INGRESS_PROXY_TCP6)
		return INGRESS_PROXY_V6_BLOCK_BYTES;
	return 0;
}

ssize_t ingress_proxy_write(const struct sockaddr *src, const struct sockaddr *dst, char *out,
			    size_t cap)
{
	AN_ASSERT(src != NULL);
	AN_ASSERT(dst != NULL);
	AN_ASSERT(out != NULL || cap == 0);
	if (src->sa_family != dst->sa_family ||
	    (src->sa_family != AF_INET && src->sa_family != AF_INET6))
		return -EAFNOSUPPORT;
	bool v6 = src->sa_family == AF_INET6;
	size_t addr_len = v6 ? sizeof(struct in6_addr) : sizeof(struct in_addr);
	size_t block = v6 ? INGRESS_PROXY_V6_BLOCK_BYTES : INGRESS_PROXY_V4_BLOCK_BYTES;
	size_t total = INGRESS_PROXY_HEAD_BYTES + block;
	if (cap < total)
		return -EMSGSIZE;
	unsigned char *p = (unsigned char *)out;
	memcpy(p, proxy_sig, sizeof(proxy_sig));
	p[12] = INGRESS_PROXY_VERSION | INGRESS_PROXY_CMD_PROXY;
	p[13] = v6 ? INGRESS_PROXY_TCP6 : INGRESS_PROXY_TCP4;
	p[14] = (unsigned char)(block >> 8);
	p[15] = (unsigned char)(block & 0xffu);
	/* Addresses and ports are already in network order in a sockaddr, as on the wire. */
	unsigned char *a = p + INGRESS_PROXY_HEAD_BYTES;
	if (v6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)src;
		const struct sockaddr_in6 *d6 = (const struct sockaddr_in6 *)dst;
		memcpy(a, &s6->sin6_addr, addr_len);
		memcpy(a + addr_len, &d6->sin6_addr, addr_len);
		memcpy(a + 2 * addr_len, &s6->sin6_port, 2);
		memcpy(a + 2 * addr_len + 2, &d6->sin6_port, 2);
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)src;
		const struct sockaddr_in *d4 = (const struct sockaddr_in *)dst;
		memcpy(a, &s4->sin_addr, addr_len);
		memcpy(a + addr_len, &d4->sin_addr, addr_len);
		memcpy(a + 2 * addr_len, &s4->sin_port, 2);
		memcpy(a + 2 * addr_len + 2, &d4->sin_port, 2);
	}
	AN_ASSERT(2 * addr_len + 4 == block);
	AN_ASSERT(total <= INGRESS_PROXY_BYTES_MAX);
	return (ssize_t)total;
}

/*
 * -EPROTO when the first <len> bytes (only the fixed 16 are looked at) can
 * start no header we accept, else 0: each field is judged once it is whole,
 * and the length's high byte alone once it can pass the limit.
 */
static int proxy_check_prefix(const unsigned char *b, size_t len)
{
	size_t n = len < sizeof(proxy_sig) ? len : sizeof(proxy_sig);

	AN_ASSERT(b != NULL || len == 0);
	if (n > 0 && memcmp(b, proxy_sig, n) != 0)
		return -EPROTO;
	if (len <= 12)
		return 0;
	unsigned cmd = b[12] & 0x0fu;
	if ((b[12] & 0xf0u) != INGRESS_PROXY_VERSION ||
	    (cmd != INGRESS_PROXY_CMD_LOCAL && cmd != INGRESS_PROXY_CMD_PROXY))
		return -EPROTO;
	if (len <= 13)
		return 0;
	/* LOCAL: the receiver keeps the real endpoints and ignores family and block. */
	size_t need = cmd == INGRESS_PROXY_CMD_PROXY ? proxy_block_need(b[13]) : 0;
	if (cmd == INGRESS_PROXY_CMD_PROXY && need == 0)
		return -EPROTO;
	if (len <= 14)
		return 0;
	if (((size_t)b[14] << 8) > INGRESS_PROXY_BLOCK_BYTES_MAX)
		return -EPROTO;
	if (len <= 15)
		return 0;
	size_t block = ((size_t)b[14] << 8) | b[15];
	if (block < need || block > INGRESS_PROXY_BLOCK_BYTES_MAX)
		return -EPROTO;
	AN_ASSERT(need <= block);
	return 0;
}

/* *<src> from the address block at <a> of a PROXY header with family byte <fam>. */
static void proxy_read_src(uint8_t fam, const unsigned char *a, struct sockaddr_storage *src)
{
	AN_ASSERT(proxy_block_need(fam) > 0);
	memset(src, 0, sizeof(*src));
	if (fam == INGRESS_PROXY_TCP6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)src;
		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, a, sizeof(s6->sin6_addr));
		memcpy(&s6->sin6_port, a + 2 * sizeof(s6->sin6_addr), 2);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)src;
		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, a, sizeof(s4->sin_addr));
		memcpy(&s4->sin_port, a + 2 * sizeof(s4->sin_addr), 2);
	}
	AN_ASSERT(src->ss_family == AF_INET || src->ss_family == AF_INET6);
}

ssize_t ingress_proxy_parse(const char *buf, size_t len, struct sockaddr_storage *src)
{
	const unsigned char *b = (const unsigned char *)buf;

	AN_ASSERT(buf != NULL || len == 0);
	AN_ASSERT(src != NULL);
	int rc = proxy_check_prefix(b, len);
	if (rc != 0)
		return rc;
	if (len < INGRESS_PROXY_HEAD_BYTES)
		return -EAGAIN;
	size_t total = INGRESS_PROXY_HEAD_BYTES + (((size_t)b[14] << 8) | b[15]);
	AN_ASSERT(total <= INGRESS_PROXY_BYTES_MAX);
	if (len < total)
		return -EAGAIN;
	/* What follows the address block (TLVs) is skipped unread. */
	if ((b[12] & 0x0fu) == INGRESS_PROXY_CMD_LOCAL) {
		memset(src, 0, sizeof(*src));
		src->ss_family = AF_UNSPEC;
	} else {
		proxy_read_src(b[13], b + INGRESS_PROXY_HEAD_BYTES, src);
	}
	AN_ASSERT(total <= len);
	return (ssize_t)total;
}

/* ---- The route table ---- */

static bool route_entry_is(const struct ingress_route_entry *e, uint64_t hash, const char *id,
			   size_t len)
{
	return e->state == ROUTE_LIVE && e->hash == hash && e->id_len == len &&
	       memcmp(e->id, id, len) == 0;
}

/* The index of <id>'s live entry, or r->capacity when it has none. */
static uint32_t routes_find(const struct ingress_routes *r, uint64_t hash, const char *id,
			    size_t len)
{
	uint32_t mask = r->capacity - 1;
	uint32_t i = (uint32_t)hash & mask;

	AN_ASSERT(r->capacity > 0);
	AN_ASSERT((r->capacity & mask) == 0);
	for (uint32_t n = 0; n < r->capacity; n++) {
		const struct ingress_route_entry *e = &r->entries[i];
		if (e->state == ROUTE_EMPTY)
			break;
		if (route_entry_is(e, hash, id, len))
			return i;
		i = (i + 1) & mask;
	}
	return r->capacity;
}

/* Where an id not in the table goes: the first tombstone or empty on its probe. */
static uint32_t routes_free_spot(const struct ingress_routes *r, uint64_t hash)
{
	uint32_t mask = r->capacity - 1;
	uint32_t i = (uint32_t)hash & mask;

	AN_ASSERT(r->capacity > 0);
	/* The load limit keeps at least 30% of the entries free. */
	AN_ASSERT(r->used + r->tombstones < r->capacity);
	while (r->entries[i].state == ROUTE_LIVE)
		i = (i + 1) & mask;
	return i;
}

/* True when one more entry (not reusing a tombstone) would pass the load limit. */
static bool routes_too_full(const struct ingress_routes *r)
{
	uint64_t taken = (uint64_t)r->used + r->tombstones + 1u;

	AN_ASSERT(r->used + r->tombstones <= r->capacity);
	AN_ASSERT(r->capacity == 0 || r->entries != NULL);
	return taken * INGRESS_ROUTES_LOAD_DEN > (uint64_t)r->capacity * INGRESS_ROUTES_LOAD_NUM;
}

/* The capacity that holds used + 1 entries at most half full, never below the current one. */
static uint64_t routes_next_capacity(const struct ingress_routes *r)
{
	uint64_t cap =
	    r->capacity > INGRESS_ROUTES_CAPACITY_MIN ? r->capacity : INGRESS_ROUTES_CAPACITY_MIN;

	AN_ASSERT((cap & (cap - 1)) == 0);
	while (((uint64_t)r->used + 1u) * 2u > cap)
		cap *= 2u;
	AN_ASSERT(cap >= r->capacity);
	return cap;
}

/* Moves the live entries into a new array of <capacity>, dropping every tombstone. */
static int routes_rebuild(struct ingress_routes *r, uint64_t capacity)
{
	AN_ASSERT((capacity & (capacity - 1)) == 0);
	AN_ASSERT(((uint64_t)r->used + 1u) * 2u <= capacity);
	if (capacity > INGRESS_ROUTES_CAPACITY_MAX)
		return -ENOMEM;
	struct ingress_route_entry *entries = pool_calloc((size_t)capacity, sizeof(*entries));
	if (entries == NULL)
		return -ENOMEM;
	struct ingress_routes next = {
		.entries = entries,
		.capacity = (uint32_t)capacity,
		.used = 0,
		.tombstones = 0,
	};
	for (uint32_t i = 0; i < r->capacity; i++) {
		const struct ingress_route_entry *e = &r->entries[i];
		if (e->state != ROUTE_LIVE)
			continue;
		next.entries[routes_free_spot(&next, e->hash)] = *e;
		next.used++;
	}
	AN_ASSERT(next.used == r->used);
	if (r->entries != NULL)
		explicit_bzero(r->entries, (size_t)r->capacity * sizeof(*r->entries));
	pool_free(r->entries);
	*r = next;
	return 0;
}

int ingress_routes_put(struct ingress_routes *r, const char *id, size_t len, uint32_t slot,
		       const char *token)
{
	AN_ASSERT(r != NULL);
	AN_ASSERT(id_valid(id, len));
	AN_ASSERT(token != NULL && memchr(token, '\0', INGRESS_TOKEN_CHARS) == NULL);
	uint64_t hash = XXH3_64bits(id, len);
	if (r->capacity > 0) {
		uint32_t i = routes_find(r, hash, id, len);
		if (i < r->capacity) {
			r->entries[i].slot = slot;
			memcpy(r->entries[i].token, token, INGRESS_TOKEN_CHARS);
			return 0;
		}
	}
	uint32_t spot = r->capacity > 0 ? routes_free_spot(r, hash) : 0;
	bool reuse = r->capacity > 0 && r->entries[spot].state == ROUTE_TOMBSTONE;
	if (!reuse && routes_too_full(r)) {
		int rc = routes_rebuild(r, routes_next_capacity(r));
		if (rc != 0)
			return rc;
		spot = routes_free_spot(r, hash);
	}
	struct ingress_route_entry *e = &r->entries[spot];
	if (e->state == ROUTE_TOMBSTONE)
		r->tombstones--;
	e->hash = hash;
	e->slot = slot;
	e->state = ROUTE_LIVE;
	e->id_len = (uint8_t)len;
	memcpy(e->id, id, len);
	memcpy(e->token, token, INGRESS_TOKEN_CHARS);
	r->used++;
	AN_ASSERT((uint64_t)(r->used + r->tombstones) * INGRESS_ROUTES_LOAD_DEN <=
		  (uint64_t)r->capacity * INGRESS_ROUTES_LOAD_NUM);
	return 0;
}

/*
 * Empties entry <i> and the tombstones just before it. Safe because entry
 * i + 1 is empty: a probe that reaches one of them stops at i + 1 anyway.
 */
static void routes_reclaim(struct ingress_routes *r, uint32_t i)
{
	uint32_t mask = r->capacity - 1;

	AN_ASSERT(r->entries[(i + 1) & mask].state == ROUTE_EMPTY);
	AN_ASSERT(r->entries[i].state != ROUTE_LIVE);
	r->entries[i] = (struct ingress_route_entry){ .state = ROUTE_EMPTY };
	for (uint32_t j = (i - 1) & mask; j != i; j = (j - 1) & mask) {
		if (r->entries[j].state != ROUTE_TOMBSTONE)
			break;
		r->entries[j].state = ROUTE_EMPTY;
		r->tombstones--;
	}
}

void ingress_routes_del(struct ingress_routes *r, const char *id, size_t len, uint32_t slot)
{
	AN_ASSERT(r != NULL);
	AN_ASSERT(id != NULL || len == 0);
	/* Only valid ids are ever put, so nothing else can be removed. */
	if (r->capacity == 0 || !id_valid(id, len))
		return;
	uint32_t i = routes_find(r, XXH3_64bits(id, len), id, len);
	if (i == r->capacity || r->entries[i].slot != slot)
		return;
	struct ingress_route_entry *e = &r->entries[i];
	*e = (struct ingress_route_entry){ .state = ROUTE_TOMBSTONE };
	r->used--;
	if (r->entries[(i + 1) & (r->capacity - 1)].state == ROUTE_EMPTY)
		routes_reclaim(r, i);
	else
		r->tombstones++;
	AN_ASSERT(r->used + r->tombstones < r->capacity);
}

int64_t ingress_routes_get(const struct ingress_routes *r, const char *id, size_t len,
			   const char **token)
{
	AN_ASSERT(r != NULL);
	AN_ASSERT(id != NULL || len == 0);
	if (r->capacity == 0 || len == 0 || len > INGRESS_ID_BYTES_MAX)
		return -1;
	uint32_t i = routes_find(r, XXH3_64bits(id, len), id, len);
	if (i == r->capacity)
		return -1;
	AN_ASSERT(r->entries[i].state == ROUTE_LIVE);
	if (token != NULL)
		*token = r->entries[i].token;
	return (int64_t)r->entries[i].slot;
}

void ingress_routes_free(struct ingress_routes *r)
{
	AN_ASSERT(r != NULL);
	AN_ASSERT(r->used + r->tombstones <= r->capacity);
	if (r->entries != NULL)
		explicit_bzero(r->entries, (size_t)r->capacity * sizeof(*r->entries));
	AN_FREE(&r->entries);
	r->capacity = 0;
	r->used = 0;
	r->tombstones = 0;
}
