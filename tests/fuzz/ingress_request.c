/*
 * libFuzzer driver for the ingress gateway's parsing (core/ingress.c on top
 * of core/http1.c), in the order core/conn.c and core/gateway.c run it: an input that starts
 * with the PROXY v2 signature goes to ingress_proxy_parse first and, when a
 * header is taken, the bytes after it go on; then http1_parse_request and,
 * for an origin-form head, ingress_route under "/callbacks", the method and
 * upgrade checks, and ingress_write_head. What the input does not spell (the
 * profile, the client's address and scheme, the output cap, a PROXY address
 * pair) comes from a generator seeded with a hash of the whole input, so an
 * input always replays the same way. The invariants, checked with AN_ASSERT:
 *   - PROXY: a taken header is 16..INGRESS_PROXY_BYTES_MAX bytes and one byte
 *     less is -EAGAIN; a shorter cut never refuses what the whole accepts; a
 *     written header of a random IPv4 or IPv6 pair parses back to its source;
 *   - ingress_route agrees with a model of its contract; a routed id is
 *     1..63 bytes of [A-Za-z0-9_.-] not starting with '.', and the agent's
 *     path has no "." or ".." segment and no %2F or %25;
 *   - with per-sandbox origins on, ingress_route_request agrees with a model:
 *     a Host <label>.hooks.fuzz.test:8090 (any case, one trailing dot) routes
 *     the whole target to the label, or is -ENOENT when it is no DNS label;
 *     any other Host leaves ingress_route's answer;
 *   - ingress_method_allowed and ingress_is_upgrade agree with models;
 *   - a written head fits its cap, is -EMSGSIZE exactly below its length and
 *     the same bytes at any cap above it; it is method SP "/"... HTTP/1.1
 *     (the rest with no agentsnet_token parameter, nor an Agentsnet-Token
 *     field below),
 *     CR and LF only as CRLF, ends in the blank line, has exactly one
 *     X-Forwarded-For (the gateway's), its X-Forwarded-Prefix, no field the
 *     gateway drops (nor any name with '_'), the client's framing fields and
 *     Host, and it parses
 *     again with the same method, path and body framing.
 *
 * fuzz-sources: core/ingress.c core/http1.c core/an.c core/reason.c core/pool.c
 * fuzz-libs: libxxhash
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/an.h"
#include "core/http1.h"
#include "core/ingress.h"
#include "core/pool.h"
#include "core/verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_PREFIX     "/callbacks"
#define FUZZ_AUTHORITY  "hooks.fuzz.test:8090" /* what a request without Host is given */
#define FUZZ_PREFIX_LEN (sizeof(FUZZ_PREFIX) - 1)
/* The public URL when origins are on: each sandbox is also <id>.hooks.fuzz.test:8090. */
#define FUZZ_ORIGIN_URL "http://hooks.fuzz.test:8090"
#define FUZZ_ID_MAX     63u
/* Any head written from a parsed one: the head, the Host twice more, the gateway's fields. */
#define FUZZ_OUT_BYTES (4u * LIMITS_HEAD_BYTES_MAX + 4096u)

static const unsigned char proxy_sig[12] = { 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
					     0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A };

/* Two profiles; the second strips a forwarding name too, which must not touch the gateway's. */
static const struct verdict_ingress profiles[2] = {
	{ .enabled = true,
	  .method_count = 2,
	  .methods = { "GET", "POST" },
	  .strip_count = 2,
	  .strip_headers = { "authorization", "x-api-key" },
	  .body_bytes_max = 1u << 20 },
	{ .enabled = true,
	  .method_count = 4,
	  .methods = { "GET", "HEAD", "PUT", "DELETE" },
	  .strip_count = 3,
	  .strip_headers = { "cookie", "x-debug", "x-forwarded-for" },
	  .body_bytes_max = 4096 },
};

/* ---- Parameters from the input ---- */

struct rng {
	uint64_t state;
};

static struct rng rng_seed(const uint8_t *data, size_t size)
{
	struct rng r = { .state = 0xcbf29ce484222325u };

	for (size_t i = 0; i < size; i++)
		r.state = (r.state ^ data[i]) * 0x100000001b3u;
	return r;
}

/* splitmix64 */
static uint64_t rng_next(struct rng *r)
{
	r->state += 0x9e3779b97f4a7c15u;
	uint64_t z = r->state;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static void rng_fill(struct rng *r, void *p, size_t n)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)rng_next(r);
}

/* A TCP endpoint of a random address and port, IPv6 when <v6>. */
static void random_endpoint(struct rng *r, bool v6, struct sockaddr_storage *a)
{
	memset(a, 0, sizeof(*a));
	if (v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)a;
		s6->sin6_family = AF_INET6;
		rng_fill(r, &s6->sin6_addr, sizeof(s6->sin6_addr));
		rng_fill(r, &s6->sin6_port, sizeof(s6->sin6_port));
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)a;
		s4->sin_family = AF_INET;
		rng_fill(r, &s4->sin_addr, sizeof(s4->sin_addr));
		rng_fill(r, &s4->sin_port, sizeof(s4->sin_port));
	}
	AN_ASSERT(a->ss_family == (v6 ? AF_INET6 : AF_INET));
}

/* ---- PROXY v2 ---- */

static bool same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
		const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)b;
		return memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0 &&
		       x->sin6_port == y->sin6_port;
	}
	const struct sockaddr_in *x = (const struct sockaddr_in *)a;
	const struct sockaddr_in *y = (const struct sockaddr_in *)b;
	return x->sin_addr.s_addr == y->sin_addr.s_addr && x->sin_port == y->sin_port;
}

/* A random pair written, cut short, and parsed back; a mixed pair is refused. */
static void check_proxy_round_trip(struct rng *r)
{
	struct sockaddr_storage src, dst, back;
	char hdr[INGRESS_PROXY_BYTES_MAX];
	bool v6 = (rng_next(r) & 1u) != 0;
	size_t want = v6 ? 16u + 36u : 16u + 12u;

	random_endpoint(r, v6, &src);
	random_endpoint(r, v6, &dst);
	const struct sockaddr *s = (const struct sockaddr *)&src;
	const struct sockaddr *d = (const struct sockaddr *)&dst;
	ssize_t n = ingress_proxy_write(s, d, hdr, sizeof(hdr));
	AN_ASSERT(n == (ssize_t)want);
	AN_ASSERT(ingress_proxy_write(s, d, hdr, want - 1) == -EMSGSIZE);
	AN_ASSERT(ingress_proxy_parse(hdr, want - 1, &back) == -EAGAIN);
	AN_ASSERT(ingress_proxy_parse(hdr, want, &back) == n);
	AN_ASSERT(same_source(&back, &src));
	random_endpoint(r, !v6, &dst);
	AN_ASSERT(ingress_proxy_write(s, d, hdr, sizeof(hdr)) == -EAFNOSUPPORT);
}

/* ingress_proxy_parse on an input with the signature: the header's length, or < 0. */
static ssize_t check_proxy(const char *buf, size_t len, struct sockaddr_storage *src, struct rng *r)
{
	struct sockaddr_storage again;
	ssize_t rc = ingress_proxy_parse(buf, len, src);

	AN_ASSERT(rc > 0 || rc == -EAGAIN || rc == -EPROTO);
	if (rc == -EAGAIN)
		AN_ASSERT(len < INGRESS_PROXY_BYTES_MAX);
	/* Fields are judged as they arrive: a cut refuses only what the whole refuses. */
	size_t cut = (size_t)(rng_next(r) % (len + 1));
	ssize_t part = ingress_proxy_parse(buf, cut, &again);
	if (part == -EPROTO)
		AN_ASSERT(rc == -EPROTO);
	if (rc <= 0)
		return rc;
	AN_ASSERT(part == (cut < (size_t)rc ? -EAGAIN : rc));
	AN_ASSERT(rc >= 16 && (size_t)rc <= len && (size_t)rc <= INGRESS_PROXY_BYTES_MAX);
	AN_ASSERT(src->ss_family == AF_INET || src->ss_family == AF_INET6 ||
		  src->ss_family == AF_UNSPEC);
	AN_ASSERT(ingress_proxy_parse(buf, (size_t)rc - 1, &again) == -EAGAIN);
	AN_ASSERT(ingress_proxy_parse(buf, (size_t)rc, &again) == rc);
	AN_ASSERT(memcmp(&again, src, sizeof(again)) == 0);
	return rc;
}

/* ---- Models of the contracts in core/ingress.h ---- */

static char lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* <s>/<n> equals NUL-terminated <lit>, ignoring ASCII case. */
static bool eq_nocase(const char *s, size_t n, const char *lit)
{
	if (strlen(lit) != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (lower(s[i]) != lower(lit[i]))
			return false;
	}
	return true;
}

static bool starts_nocase(const char *s, size_t n, const char *lit)
{
	return strlen(lit) <= n && eq_nocase(s, strlen(lit), lit);
}

/* True when comma-separated list <v>/<n> has an element <name>/<len> (OWS trimmed, any case). */
static bool list_contains(const char *v, size_t n, const char *name, size_t len)
{
	size_t i = 0;

	while (i < n) {
		size_t j = i;
		while (j < n && v[j] != ',')
			j++;
		size_t a = i;
		size_t b = j;
		while (a < b && (v[a] == ' ' || v[a] == '\t'))
			a++;
		while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
			b--;
		if (b - a == len) {
			size_t k = 0;
			while (k < len && lower(v[a + k]) == lower(name[k]))
				k++;
			if (k == len)
				return true;
		}
		i = j + 1;
	}
	return false;
}

static bool model_upgrade(const struct http1_request *req)
{
	bool upgrade = false;
	bool listed = false;

	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		if (eq_nocase(h->name, h->name_len, "upgrade") && h->value_len > 0)
			upgrade = true;
		if (eq_nocase(h->name, h->name_len, "connection") &&
		    list_contains(h->value, h->value_len, "upgrade", 7))
			listed = true;
	}
	return req->version_minor == 1 && upgrade && listed;
}

static bool model_method_allowed(const struct verdict_ingress *in, const char *m, size_t n)
{
	for (uint32_t i = 0; i < in->method_count; i++) {
		if (strlen(in->methods[i]) == n && memcmp(in->methods[i], m, n) == 0)
			return true;
	}
	return false;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = lower(c);
	return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

/* A code point and its length decoded from <b>/<n> (no checks of the form): 0 when <b> is no lead. */
static size_t model_utf8_decode(const unsigned char *b, size_t n, uint32_t *cp)
{
	size_t len = b[0] < 0x80           ? 1
		     : (b[0] >> 5) == 0x6  ? 2
		     : (b[0] >> 4) == 0xe  ? 3
		     : (b[0] >> 3) == 0x1e ? 4
					   : 0;
	if (len == 0 || len > n)
		return 0;
	*cp = len == 1 ? b[0] : b[0] & (0x7fu >> len);
	for (size_t k = 1; k < len; k++) {
		if ((b[k] & 0xc0) != 0x80)
			return 0;
		*cp = (*cp << 6) | (b[k] & 0x3fu);
	}
	return len;
}

/* Whether <b>/<n> is UTF-8 as RFC 3629 allows: shortest forms, no surrogates, <= U+10FFFF. */
static bool model_utf8_ok(const unsigned char *b, size_t n, uint32_t *cps, size_t *cp_count)
{
	static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };

	*cp_count = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp = 0;
		size_t len = model_utf8_decode(b + i, n - i, &cp);
		if (len == 0 || cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		cps[(*cp_count)++] = cp;
		i += len;
	}
	return true;
}

/*
 * One segment percent-decoded, then judged: no raw backslash, no bad escape,
 * nothing that decodes to '/', backslash, '%' or NUL, UTF-8 in its shortest
 * form, no code point whose NFKC form is dots only or holds a slash (listed
 * here by hand from Unicode's data), and a name (the bytes before the first
 * decoded ';') that is not "." or "..", nor empty unless <last>.
 */
static bool model_segment_ok(const char *s, size_t n, bool last)
{
	static const uint32_t folded[] = { 0x2024, 0x2025, 0x2026, 0x2100, 0x2101, 0x2105, 0x2106,
					   0xfe19, 0xfe30, 0xfe52, 0xfe68, 0xff0e, 0xff0f, 0xff3c };
	unsigned char dec[LIMITS_REQUEST_LINE_BYTES_MAX];
	uint32_t cps[LIMITS_REQUEST_LINE_BYTES_MAX];
	size_t m = 0;
	size_t cp_count = 0;

	AN_ASSERT(n <= sizeof(dec));
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\')
			return false;
		if (s[i] != '%') {
			dec[m++] = (unsigned char)s[i];
			continue;
		}
		if (i + 2 >= n || hex_digit(s[i + 1]) < 0 || hex_digit(s[i + 2]) < 0)
			return false;
		dec[m++] = (unsigned char)(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
		i += 2;
	}
	for (size_t i = 0; i < m; i++) {
		if (dec[i] == '/' || dec[i] == '\\' || dec[i] == '%' || dec[i] == 0)
			return false;
	}
	if (!model_utf8_ok(dec, m, cps, &cp_count))
		return false;
	for (size_t i = 0; i < cp_count; i++) {
		for (size_t k = 0; k < sizeof(folded) / sizeof(folded[0]); k++) {
			if (cps[i] == folded[k])
				return false;
		}
	}
	const unsigned char *semi = memchr(dec, ';', m);
	size_t name = semi != NULL ? (size_t)(semi - dec) : m;
	if (name == 0)
		return last;
	return !((name == 1 && dec[0] == '.') || (name == 2 && dec[0] == '.' && dec[1] == '.'));
}

/* The path part of a rest, "" or "/" then segments. */
static bool model_path_ok(const char *p, size_t n)
{
	size_t start = 1;

	if (n == 0)
		return true;
	AN_ASSERT(p[0] == '/');
	for (size_t i = 1; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		if (!model_segment_ok(p + start, i - start, i == n))
			return false;
		start = i + 1;
	}
	return true;
}

static bool id_ok(const char *id, size_t n)
{
	if (n < 1 || n > FUZZ_ID_MAX || id[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
		if (!ok)
			return false;
	}
	return true;
}

/* What ingress_route must return for <target>/<len>, with the id's length in *<id_len>. */
static int model_route(const char *target, size_t len, size_t *id_len)
{
	if (len <= FUZZ_PREFIX_LEN || memcmp(target, FUZZ_PREFIX, FUZZ_PREFIX_LEN) != 0 ||
	    target[FUZZ_PREFIX_LEN] != '/')
		return -ENOENT;
	const char *id = target + FUZZ_PREFIX_LEN + 1;
	const char *end = target + len;
	size_t n = 0;
	while (id + n < end && id[n] != '/' && id[n] != '?')
		n++;
	if (!id_ok(id, n))
		return -ENOENT;
	const char *rest = id + n;
	size_t rest_len = (size_t)(end - rest);
	if (memchr(rest, '#', rest_len) != NULL)
		return -EPERM;
	const char *q = memchr(rest, '?', rest_len);
	if (!model_path_ok(rest, q != NULL ? (size_t)(q - rest) : rest_len))
		return -EPERM;
	*id_len = n;
	return 0;
}

/* The brief's own words for the agent's path: no "." or ".." segment, no %2F or %25. */
static bool path_plain(const char *p, size_t n)
{
	size_t start = 0;

	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		size_t seg = i - start;
		if (i > 0 && ((seg == 1 && p[start] == '.') ||
			      (seg == 2 && p[start] == '.' && p[start + 1] == '.')))
			return false;
		start = i + 1;
	}
	for (size_t i = 0; i + 3 <= n; i++) {
		if (starts_nocase(p + i, 3, "%2f") || memcmp(p + i, "%25", 3) == 0)
			return false;
	}
	return true;
}

static int check_route(const struct http1_request *req, struct ingress_target *t)
{
	size_t id_len = 0;
	int want = model_route(req->target, req->target_len, &id_len);
	int rc = ingress_route(FUZZ_PREFIX, FUZZ_PREFIX_LEN, req->target, req->target_len, t);

	AN_ASSERT(rc == want);
	if (rc != 0)
		return rc;
	AN_ASSERT(t->id == req->target + FUZZ_PREFIX_LEN + 1 && t->id_len == id_len);
	AN_ASSERT(id_ok(t->id, t->id_len));
	AN_ASSERT(t->rest == t->id + t->id_len);
	AN_ASSERT(t->rest + t->rest_len == req->target + req->target_len);
	AN_ASSERT(t->rest_len == 0 || t->rest[0] == '/' || t->rest[0] == '?');
	const char *q = memchr(t->rest, '?', t->rest_len);
	AN_ASSERT(path_plain(t->rest, q != NULL ? (size_t)(q - t->rest) : t->rest_len));
	return 0;
}

/* ---- The written head ---- */

/* One "name: value" line of a written head. */
struct head_field {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

/* The field line at *<pos>, moving past it; false at the blank line (which must end the head). */
static bool head_next(const char *out, size_t n, size_t *pos, struct head_field *f)
{
	const char *line = out + *pos;
	const char *eol = memmem(line, n - *pos, "\r\n", 2);

	AN_ASSERT(eol != NULL);
	size_t len = (size_t)(eol - line);
	*pos += len + 2;
	if (len == 0) {
		AN_ASSERT(*pos == n);
		return false;
	}
	const char *colon = memchr(line, ':', len);
	AN_ASSERT(colon != NULL && colon > line);
	f->name = line;
	f->name_len = (size_t)(colon - line);
	AN_ASSERT(len >= f->name_len + 2 && colon[1] == ' ');
	f->value = colon + 2;
	f->value_len = len - f->name_len - 2;
	return true;
}

static bool field_is(const struct head_field *f, const char *lit)
{
	return eq_nocase(f->name, f->name_len, lit);
}

static bool value_is(const struct head_field *f, const char *v, size_t n)
{
	return f->value_len == n && memcmp(f->value, v, n) == 0;
}

static uint32_t request_count(const struct http1_request *req, const char *lit)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < req->header_count; i++)
		k += eq_nocase(req->headers[i].name, req->headers[i].name_len, lit);
	return k;
}

/* True when a Connection field of <req> lists <name>/<len>. */
static bool connection_lists(const struct http1_request *req, const char *name, size_t len)
{
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		if (eq_nocase(h->name, h->name_len, "connection") &&
		    list_contains(h->value, h->value_len, name, len))
			return true;
	}
	return false;
}

/* A field that came from the client: none the gateway always drops, strips or was told to. */
static void check_client_field(const struct head_field *f, const struct http1_request *req,
			       const struct verdict_ingress *in)
{
	static const char *const never[] = { "te", "trailer", "keep-alive", "x-real-ip",
					     "agentsnet-token" };

	for (size_t i = 0; i < AN_ARRAY_LEN(never); i++)
		AN_ASSERT(!field_is(f, never[i]));
	AN_ASSERT(!starts_nocase(f->name, f->name_len, "proxy-"));
	AN_ASSERT(!starts_nocase(f->name, f->name_len, "x-forwarded-"));
	AN_ASSERT(memchr(f->name, '_', f->name_len) == NULL); /* no X_Forwarded_For */
	for (uint32_t i = 0; i < in->strip_count; i++)
		AN_ASSERT(!field_is(f, in->strip_headers[i]));
	if (connection_lists(req, f->name, f->name_len))
		AN_ASSERT(field_is(f, "content-length") || field_is(f, "transfer-encoding") ||
			  field_is(f, "host") || field_is(f, "close"));
}

/* Forwarded: for=<addr> (IPv6 as "[addr]"), proto, and the Host quoted when there is one. */
static void check_forwarded(const struct head_field *f, const struct http1_request *req,
			    const struct ingress_client *c)
{
	char want[128];
	bool v6 = strchr(c->addr, ':') != NULL;
	int n = snprintf(want, sizeof(want), v6 ? "for=\"[%s]\";proto=%s" : "for=%s;proto=%s",
			 c->addr, c->proto);

	AN_ASSERT(n > 0 && (size_t)n < sizeof(want));
	AN_ASSERT(f->value_len >= (size_t)n && memcmp(f->value, want, (size_t)n) == 0);
	const char *p = f->value + n;
	size_t left = f->value_len - (size_t)n;
	if (req->host_header == NULL || req->host_header_len == 0) {
		AN_ASSERT(left == 0);
		return;
	}
	AN_ASSERT(left >= 8 && memcmp(p, ";host=\"", 7) == 0 && p[left - 1] == '"');
	size_t k = 0;
	for (size_t i = 7; i + 1 < left; i++) {
		bool esc = p[i] == '\\';
		if (esc)
			i++;
		AN_ASSERT(i + 1 < left && k < req->host_header_len && p[i] == req->host_header[k]);
		/* Exactly the quote and the backslash are escaped. */
		AN_ASSERT(esc == (p[i] == '"' || p[i] == '\\'));
		k++;
	}
	AN_ASSERT(k == req->host_header_len);
}

/* Fields counted by name, to compare with what the request had. */
struct head_counts {
	uint32_t xff;
	uint32_t xf_proto;
	uint32_t xf_host;
	uint32_t xf_prefix;
	uint32_t forwarded;
	uint32_t connection;
	uint32_t upgrade;
};

/* One field of the written head: the gateway's own are counted and their values checked. */
static void check_field(const struct head_field *f, const struct http1_request *req,
			const struct verdict_ingress *in, const struct ingress_client *c,
			struct head_counts *k)
{
	if (field_is(f, "x-forwarded-for")) {
		k->xff++;
		AN_ASSERT(value_is(f, c->addr, strlen(c->addr)));
	} else if (field_is(f, "x-forwarded-proto")) {
		k->xf_proto++;
		AN_ASSERT(value_is(f, c->proto, strlen(c->proto)));
	} else if (field_is(f, "x-forwarded-host")) {
		k->xf_host++;
		AN_ASSERT(value_is(f, req->host_header, req->host_header_len));
	} else if (field_is(f, "x-forwarded-prefix")) {
		k->xf_prefix++;
		AN_ASSERT(value_is(f, c->prefix, c->prefix_len));
	} else if (field_is(f, "forwarded")) {
		k->forwarded++;
		check_forwarded(f, req, c);
	} else if (field_is(f, "connection")) {
		k->connection++;
		AN_ASSERT(value_is(f, "Upgrade", 7));
	} else if (field_is(f, "upgrade")) {
		k->upgrade++;
		AN_ASSERT(f->value_len > 0);
	} else {
		check_client_field(f, req, in);
	}
}

/* Every field line of <out>/<n>, then the counts against the request. */
static void check_head_fields(const char *out, size_t n, const struct http1_request *req,
			      const struct verdict_ingress *in, const struct ingress_client *c)
{
	struct head_counts k = { 0 };
	struct head_field f;
	uint32_t cl = 0, te = 0, host = 0;
	const char *eol = memmem(out, n, "\r\n", 2);

	AN_ASSERT(eol != NULL);
	size_t pos = (size_t)(eol - out) + 2;
	while (head_next(out, n, &pos, &f)) {
		check_field(&f, req, in, c, &k);
		cl += field_is(&f, "content-length");
		te += field_is(&f, "transfer-encoding");
		host += field_is(&f, "host");
	}
	/* Exactly one X-Forwarded-For, whatever the client sent or the profile strips. */
	AN_ASSERT(k.xff == 1);
	AN_ASSERT(k.xf_proto == 1 && k.xf_prefix == 1 && k.forwarded == 1);
	AN_ASSERT(k.xf_host == (req->host_header != NULL && req->host_header_len > 0 ? 1u : 0u));
	uint32_t up = ingress_is_upgrade(req) ? 1u : 0u;
	AN_ASSERT(k.connection == up && k.upgrade == up);
	AN_ASSERT(cl == request_count(req, "content-length"));
	AN_ASSERT(te == request_count(req, "transfer-encoding"));
	AN_ASSERT(host == request_count(req, "host") + (req->host_header == NULL ? 1u : 0u));
}

/*
 * What the agent's target is for rest <r>/<n>: its query's '&'-separated
 * parameters kept in order but those named exactly agentsnet_token, and no
 * '?' when none is kept; into <out> (<n> bytes at least).
 */
static size_t model_agent_rest(const char *r, size_t n, char *out)
{
	const char *q = memchr(r, '?', n);
	size_t path = q != NULL ? (size_t)(q - r) : n;
	size_t m = path;
	bool first = true;

	memcpy(out, r, path);
	for (size_t i = path + 1; q != NULL && i <= n;) {
		const char *amp = memchr(r + i, '&', n - i);
		size_t end = amp != NULL ? (size_t)(amp - r) : n;
		size_t len = end - i;
		bool token = len >= 15 && memcmp(r + i, "agentsnet_token", 15) == 0 &&
			     (len == 15 || r[i + 15] == '=');
		if (!token) {
			out[m++] = first ? '?' : '&';
			memcpy(out + m, r + i, len);
			m += len;
			first = false;
		}
		i = end + 1;
	}
	AN_ASSERT(m <= n);
	return m;
}

/* The request line, the line endings, the blank line and the prefix field. */
static void check_head_text(const char *out, size_t n, const struct http1_request *req,
			    const struct ingress_target *t, const struct ingress_client *c)
{
	char want[FUZZ_PREFIX_LEN + FUZZ_ID_MAX + 64];
	char rest[LIMITS_REQUEST_LINE_BYTES_MAX];
	size_t rest_len = model_agent_rest(t->rest, t->rest_len, rest);
	size_t m = req->method_len;
	bool slash = rest_len == 0 || rest[0] == '?';
	size_t line = m + 1 + (slash ? 1 : 0) + rest_len + sizeof(" HTTP/1.1\r\n") - 1;

	AN_ASSERT(n >= line + 2 && memcmp(out + n - 4, "\r\n\r\n", 4) == 0);
	AN_ASSERT(memcmp(out, req->method, m) == 0 && out[m] == ' ' && out[m + 1] == '/');
	AN_ASSERT(memcmp(out + m + 1 + (slash ? 1 : 0), rest, rest_len) == 0);
	AN_ASSERT(memcmp(out + line - 11, " HTTP/1.1\r\n", 11) == 0);
	for (size_t i = 0; i < n; i++) {
		if (out[i] == '\r')
			AN_ASSERT(i + 1 < n && out[i + 1] == '\n');
		if (out[i] == '\n')
			AN_ASSERT(i > 0 && out[i - 1] == '\r');
	}
	int w = snprintf(want, sizeof(want), "\r\nX-Forwarded-Prefix: %.*s\r\n", (int)c->prefix_len,
			 c->prefix);
	AN_ASSERT(w > 0 && (size_t)w < sizeof(want));
	AN_ASSERT(memmem(out, n, want, (size_t)w) != NULL);
}

/* The head parses again as what the agent is meant to see; only a limit may refuse it. */
static void check_head_parses(const char *out, size_t n, const struct http1_request *req,
			      const struct ingress_target *t)
{
	struct http1_request *again = pool_malloc(sizeof(*again));
	enum reason why = REASON_NONE;
	char rest[LIMITS_REQUEST_LINE_BYTES_MAX];
	size_t rest_len = model_agent_rest(t->rest, t->rest_len, rest);
	bool slash = rest_len == 0 || rest[0] == '?';

	AN_ASSERT(again != NULL);
	ssize_t rc = http1_parse_request(out, n, again, &why);
	if (rc == -EPROTO) {
		/* The forwarding fields make it longer and add up to 7 fields. */
		AN_ASSERT(why == REASON_HEADERS_TOO_LARGE);
	} else {
		AN_ASSERT(rc == (ssize_t)n);
		AN_ASSERT(again->form == HTTP1_FORM_ORIGIN && again->version_minor == 1);
		AN_ASSERT(again->method_len == req->method_len &&
			  memcmp(again->method, req->method, req->method_len) == 0);
		AN_ASSERT(again->target_len == rest_len + (slash ? 1 : 0));
		AN_ASSERT(memcmp(again->target + (slash ? 1 : 0), rest, rest_len) == 0);
		AN_ASSERT(again->body == req->body && again->content_length == req->content_length);
		/* Host as the client sent it; the gateway's authority for one without (1.0). */
		size_t want =
		    req->host_header != NULL ? req->host_header_len : strlen(FUZZ_AUTHORITY);
		AN_ASSERT(again->host_header_len == want);
	}
	pool_free(again);
}

static size_t pick_cap(size_t n, uint64_t x)
{
	AN_ASSERT(n > 0);
	switch (x % 5u) {
	case 0:
		return n;
	case 1:
		return n - 1;
	case 2:
		return 0;
	case 3:
		return (size_t)((x >> 8) % n);
	default:
		return n + (size_t)((x >> 8) % 64u);
	}
}

/* The same head at a cap from the input: whole at or above its length, -EMSGSIZE below. */
static void check_capped(const struct http1_request *req, const struct ingress_target *t,
			 const struct verdict_ingress *in, const struct ingress_client *c,
			 const char *full, size_t n, struct rng *r)
{
	size_t cap = pick_cap(n, rng_next(r));
	/* Exactly <cap> bytes, so a write past it is an ASan report. */
	char *out = pool_malloc(cap > 0 ? cap : 1);

	AN_ASSERT(out != NULL);
	ssize_t rc = ingress_write_head(req, t, in, c, out, cap);
	AN_ASSERT(rc < 0 || (size_t)rc <= cap);
	if (cap >= n) {
		AN_ASSERT(rc == (ssize_t)n);
		AN_ASSERT(memcmp(out, full, n) == 0);
	} else {
		AN_ASSERT(rc == -EMSGSIZE);
	}
	pool_free(out);
}

/* The client's address: the PROXY source when there is one, else random by an input bit. */
static void client_addr(const struct sockaddr_storage *src, struct rng *r, char *addr, size_t cap)
{
	struct sockaddr_storage a;
	const struct sockaddr_storage *from = src;

	if (src->ss_family != AF_INET && src->ss_family != AF_INET6) {
		random_endpoint(r, (rng_next(r) & 1u) != 0, &a);
		from = &a;
	}
	const void *p = from->ss_family == AF_INET6
			    ? (const void *)&((const struct sockaddr_in6 *)from)->sin6_addr
			    : (const void *)&((const struct sockaddr_in *)from)->sin_addr;
	AN_ASSERT(inet_ntop(from->ss_family, p, addr, (socklen_t)cap) != NULL);
	AN_ASSERT(addr[0] != '\0');
}

static void check_write(const struct http1_request *req, const struct ingress_target *t,
			const struct verdict_ingress *in, const struct sockaddr_storage *src,
			struct rng *r)
{
	char addr[INET6_ADDRSTRLEN];
	char prefix[FUZZ_PREFIX_LEN + 1 + FUZZ_ID_MAX + 1];
	char *out = pool_malloc(FUZZ_OUT_BYTES);

	AN_ASSERT(out != NULL);
	client_addr(src, r, addr, sizeof(addr));
	int pn = snprintf(prefix, sizeof(prefix), "%s/%.*s", FUZZ_PREFIX, (int)t->id_len, t->id);
	AN_ASSERT(pn > 0 && (size_t)pn < sizeof(prefix));
	const struct ingress_client c = { .addr = addr,
					  .proto = (rng_next(r) & 1u) != 0 ? "https" : "http",
					  .prefix = prefix,
					  .prefix_len = (size_t)pn,
					  .authority = FUZZ_AUTHORITY };
	ssize_t n = ingress_write_head(req, t, in, &c, out, FUZZ_OUT_BYTES);
	AN_ASSERT(n > 0 && (size_t)n <= FUZZ_OUT_BYTES);
	check_head_text(out, (size_t)n, req, t, &c);
	check_head_fields(out, (size_t)n, req, in, &c);
	check_head_parses(out, (size_t)n, req, t);
	check_capped(req, t, in, &c, out, (size_t)n, r);
	pool_free(out);
}

/* What a Host must be to name an origin of FUZZ_ORIGIN_URL: a label into *<label_len>. */
static bool model_origin_host(const char *h, size_t n, size_t *label_len)
{
	static const char suffix[] = ".hooks.fuzz.test";
	size_t suffix_len = sizeof(suffix) - 1;
	const char *colon = h != NULL ? memchr(h, ':', n) : NULL;

	if (colon == NULL || n == 0 || h[0] == '[')
		return false; /* no port: the scheme's (80), not the URL's 8090 */
	size_t name = (size_t)(colon - h);
	size_t port_len = n - name - 1;
	unsigned long port = 0;
	for (size_t i = 0; i < port_len; i++) {
		if (colon[1 + i] < '0' || colon[1 + i] > '9')
			return false;
		port = port * 10 + (unsigned long)(colon[1 + i] - '0');
	}
	if (port_len == 0 || port_len > 5 || port != 8090)
		return false;
	if (name > 0 && h[name - 1] == '.')
		name--;
	/* ".hooks.fuzz.test" itself is under it too: an empty label, which no id is. */
	if (name < suffix_len || !starts_nocase(h + name - suffix_len, suffix_len, suffix))
		return false;
	*label_len = name - suffix_len;
	return true;
}

/* A DNS label, 1-63 of [A-Za-z0-9-] without a '-' at either end. */
static bool model_label(const char *s, size_t n)
{
	if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = lower(s[i]);
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return false;
	}
	return true;
}

/* ingress_route_request with origins on agrees with the models: the Host picks the form. */
static void check_origin_route(const struct http1_request *req)
{
	struct ingress_site site;
	struct ingress_target t;
	size_t label_len = 0;

	ingress_site_init(&site, FUZZ_PREFIX, FUZZ_ORIGIN_URL, true);
	int rc = ingress_route_request(&site, req->host_header, req->host_header_len, req->target,
				       req->target_len, &t);
	if (!model_origin_host(req->host_header, req->host_header_len, &label_len)) {
		size_t id_len = 0;
		AN_ASSERT(rc == model_route(req->target, req->target_len, &id_len));
		AN_ASSERT(rc != 0 || !t.origin);
		return;
	}
	const char *end = req->target + req->target_len;
	const char *q = memchr(req->target, '?', req->target_len);
	int want = !model_label(req->host_header, label_len)           ? -ENOENT
		   : memchr(req->target, '#', req->target_len) != NULL ? -EPERM
		   : !model_path_ok(req->target, (size_t)((q != NULL ? q : end) - req->target))
		       ? -EPERM
		       : 0;
	AN_ASSERT(rc == want);
	if (rc != 0)
		return;
	AN_ASSERT(t.origin);
	AN_ASSERT(t.id == req->host_header && t.id_len == label_len);
	AN_ASSERT(t.rest == req->target && t.rest_len == req->target_len);
}

static void check_request(const char *buf, size_t len, const struct sockaddr_storage *src,
			  struct rng *r)
{
	struct http1_request *req = pool_malloc(sizeof(*req));
	struct ingress_target t;
	enum reason why = REASON_NONE;

	AN_ASSERT(req != NULL);
	ssize_t rc = http1_parse_request(buf, len, req, &why);
	if (rc > 0 && req->form == HTTP1_FORM_ORIGIN)
		check_origin_route(req);
	if (rc > 0 && req->form == HTTP1_FORM_ORIGIN && check_route(req, &t) == 0) {
		const struct verdict_ingress *in = &profiles[rng_next(r) & 1u];
		AN_ASSERT(ingress_method_allowed(in, req->method, req->method_len) ==
			  model_method_allowed(in, req->method, req->method_len));
		AN_ASSERT(ingress_is_upgrade(req) == model_upgrade(req));
		check_write(req, &t, in, src, r);
	}
	pool_free(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct sockaddr_storage src;
	struct rng r = rng_seed(data, size);

	memset(&src, 0, sizeof(src));
	src.ss_family = AF_UNSPEC;
	check_proxy_round_trip(&r);
	if (size >= sizeof(proxy_sig) && memcmp(buf, proxy_sig, sizeof(proxy_sig)) == 0) {
		ssize_t n = check_proxy(buf, size, &src, &r);
		if (n < 0)
			return 0;
		buf += n;
		size -= (size_t)n;
	}
	check_request(buf, size, &src, &r);
	return 0;
}
