/*
 * Strict HTTP/1.1 heads (RFC 9112, RFC 9110) for a proxy that must never
 * disagree with an upstream about where a message ends: parsing them, and
 * rewriting them for the next hop.
 *
 * Approach: one forward pass over the bytes with a 256-entry class table, no
 * allocation, no copies, no state between calls: a caller with more bytes calls
 * again and the head is scanned from the start (heads are small). Results are
 * views into the caller's buffer. Limits are enforced by shortening the visible
 * buffer instead of counting per byte: the head is parsed inside its first
 * LIMITS_HEAD_BYTES_MAX bytes and the request line inside its first
 * LIMITS_REQUEST_LINE_BYTES_MAX + 2 bytes, so running out of bytes at such a
 * boundary means "too large", anywhere else "-EAGAIN". Sizes: the request line
 * runs from the method to its CRLF (leading empty lines excluded), head_len
 * from the first byte to the blank line, CRLFs included; both limits inclusive.
 *
 * Everything RFC 9112 calls invalid is refused rather than repaired (bare CR
 * or LF, obs-fold, whitespace before a colon, CTLs), and so is every framing
 * ambiguity a smuggling attack feeds on: duplicate Content-Length even when
 * equal, Transfer-Encoding with Content-Length, any request coding other than
 * a lone "chunked", Transfer-Encoding on HTTP/1.0, a request field name a
 * CGI server reads as a framing or forwarding one ("Transfer_Encoding").
 * Rejected alternative: picohttpparser-style leniency (it accepts bare LF),
 * which is right for a server and wrong for a proxy in front of servers we
 * do not know.
 *
 * A forwarded head, request or response, is rebuilt rather than patched in
 * place: our own HTTP/1.1 version, the fields minus the hop-by-hop ones (one
 * marking serves both directions) and, in a request, minus every name with
 * '_' (as nginx drops them), through a bounded writer judged once.
 * The chunked scanner is the one stateful piece: a byte-level state machine
 * that skips chunk data in bulk and never changes or copies the bytes. Its
 * size lines are read to the grammar, chunk extensions too (a quoted-string
 * a server reads to its closing quote must close before the CRLF).
 */
#include "core/http1.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "core/an.h"

/*
 * Byte classes, one bit each. The table is generated from these definitions and
 * tests/unit/core/http1.c checks every entry against them.
 */
#define HC_TCHAR  0x01u /* RFC 9110 5.6.2 tchar */
#define HC_TARGET 0x02u /* request-target byte: VCHAR except '#' (no fragments) */
#define HC_VALUE  0x04u /* field-value byte: HTAB, SP, VCHAR, obs-text */
#define HC_HOST   0x08u /* host name byte: ALPHA, DIGIT, "-._~" */
#define HC_IPV6   0x10u /* IPv6 literal byte: HEXDIG, ":", "." */
#define HC_HEX    0x20u /* HEXDIG */
#define HC_DIGIT  0x40u /* DIGIT */

/* clang-format off */
static const uint8_t http1_class[256] = {
	/* 0x00 */ 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	/* 0x08 */ 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	/* 0x10 */ 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	/* 0x18 */ 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	/* 0x20 */ 0x04, 0x07, 0x06, 0x05, 0x07, 0x07, 0x07, 0x07,
	/* 0x28 */ 0x06, 0x06, 0x07, 0x07, 0x06, 0x0f, 0x1f, 0x06,
	/* 0x30 */ 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f,
	/* 0x38 */ 0x7f, 0x7f, 0x16, 0x06, 0x06, 0x06, 0x06, 0x06,
	/* 0x40 */ 0x06, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x0f,
	/* 0x48 */ 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
	/* 0x50 */ 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
	/* 0x58 */ 0x0f, 0x0f, 0x0f, 0x06, 0x06, 0x06, 0x07, 0x0f,
	/* 0x60 */ 0x07, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x0f,
	/* 0x68 */ 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
	/* 0x70 */ 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
	/* 0x78 */ 0x0f, 0x0f, 0x0f, 0x06, 0x07, 0x06, 0x0f, 0x00,
	/* 0x80 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0x88 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0x90 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0x98 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xa0 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xa8 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xb0 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xb8 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xc0 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xc8 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xd0 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xd8 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xe0 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xe8 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xf0 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
	/* 0xf8 */ 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
};
/* clang-format on */

/*
 * Limits private to this parser. Checklist: they belong in core/limits.h next
 * to the others; move them there when that file is next edited.
 */
#define HTTP1_METHOD_BYTES_MAX     32u          /* longest registered method is 17 */
#define HTTP1_CHUNK_LINE_BYTES_MAX 4096u        /* size or trailer line, CRLF excluded */
#define HTTP1_CHUNK_SIZE_MAX       (1ull << 62) /* larger than any body we would relay */

static_assert(LIMITS_REQUEST_LINE_BYTES_MAX + 2 <= LIMITS_HEAD_BYTES_MAX,
	      "the request line window must fit in the head window");
static_assert(LIMITS_HEADERS_MAX <= UINT32_MAX, "header_count is a uint32_t");

/*
 * Internal results: 0, -EAGAIN (ran out of bytes), -EPROTO (malformed),
 * -E2BIG (too many fields), -ENAMETOOLONG (request line too long).
 */

/* What the framing fields of one head said, gathered while scanning it. */
struct framing {
	bool is_request;
	bool cl_seen;
	bool te_seen;
	bool te_chunked; /* the last coding seen so far is "chunked" */
	bool conn_close;
	bool conn_keep_alive;
	bool expect_continue;
	bool host_seen;
	uint64_t content_length;
	const char *host;
	size_t host_len;
};

static const char http1_root_path[] = "/";

static inline bool byte_is(char c, unsigned cls)
{
	return (http1_class[(uint8_t)c] & cls) != 0;
}

static inline bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static inline char ascii_lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c + ('a' - 'A')) : c;
}

bool http1_name_is(const char *name, size_t len, const char *lit)
{
	AN_DASSERT(lit != NULL);
	AN_DASSERT(name != NULL || len == 0);
	/* The literal's NUL ends the comparison, so no strlen is needed. */
	for (size_t i = 0; i < len; i++) {
		if (lit[i] == '\0' || ascii_lower(name[i]) != ascii_lower(lit[i]))
			return false;
	}
	return lit[len] == '\0';
}

/* Like http1_name_is for two views of <n> bytes each, neither NUL-terminated. */
static bool views_equal_nocase(const char *a, const char *b, size_t n)
{
	AN_DASSERT(a != NULL);
	AN_DASSERT(b != NULL);
	for (size_t i = 0; i < n; i++) {
		if (ascii_lower(a[i]) != ascii_lower(b[i]))
			return false;
	}
	return true;
}

/* Expects CRLF at *<pp>; a CR alone or an LF alone is a smuggling vector. */
static int parse_crlf(const char **pp, const char *end)
{
	const char *p = *pp;

	AN_DASSERT(p <= end);
	if (p == end)
		return -EAGAIN;
	if (*p != '\r')
		return -EPROTO;
	if (p + 1 == end)
		return -EAGAIN;
	if (p[1] != '\n')
		return -EPROTO;
	*pp = p + 2;
	return 0;
}

/* RFC 9112 section 2.2: a server SHOULD ignore empty lines before the request line. */
static int skip_empty_lines(const char **pp, const char *end)
{
	const char *p = *pp;

	AN_DASSERT(p <= end);
	while (p < end && *p == '\r') {
		int rc = parse_crlf(&p, end);
		if (rc != 0)
			return rc;
	}
	*pp = p;
	return p == end ? -EAGAIN : 0;
}

static int parse_method(const char **pp, const char *end, struct http1_request *req)
{
	const char *start = *pp;
	const char *stop = (size_t)(end - start) > HTTP1_METHOD_BYTES_MAX
			       ? start + HTTP1_METHOD_BYTES_MAX + 1
			       : end;
	const char *p = start;

	AN_DASSERT(start <= end);
	while (p < stop && byte_is(*p, HC_TCHAR))
		p++;
	size_t n = (size_t)(p - start);
	if (n > HTTP1_METHOD_BYTES_MAX)
		return -EPROTO;
	if (p == end)
		return -EAGAIN;
	if (n == 0 || *p != ' ')
		return -EPROTO;
	req->method = start;
	req->method_len = n;
	/* RFC 9110 section 9.1: methods are case-sensitive. */
	req->is_connect = n == 7 && memcmp(start, "CONNECT", 7) == 0;
	*pp = p + 1;
	AN_DASSERT(req->method_len >= 1);
	return 0;
}

static int parse_target_token(const char **pp, const char *end, struct http1_request *req)
{
	const char *start = *pp;
	const char *p = start;

	AN_DASSERT(start <= end);
	while (p < end && byte_is(*p, HC_TARGET))
		p++;
	if (p == end)
		return -EAGAIN;
	/* Empty target, a second SP, CR (HTTP/0.9), CTL, '#' or non-ASCII. */
	if (p == start || *p != ' ')
		return -EPROTO;
	req->target = start;
	req->target_len = (size_t)(p - start);
	*pp = p + 1;
	AN_DASSERT(req->target_len >= 1);
	return 0;
}

/* "HTTP/1.0" or "HTTP/1.1", nothing else; bytes present so far must match. */
static int parse_version(const char **pp, const char *end, uint8_t *minor)
{
	static const char want[] = "HTTP/1.";
	const char *p = *pp;
	size_t avail = (size_t)(end - p);
	size_t n = avail < 8 ? avail : 8;

	AN_DASSERT(p <= end);
	for (size_t i = 0; i < n && i < 7; i++) {
		if (p[i] != want[i])
			return -EPROTO;
	}
	if (n < 8)
		return -EAGAIN;
	if (p[7] != '0' && p[7] != '1')
		return -EPROTO;
	*minor = (uint8_t)(p[7] - '0');
	*pp = p + 8;
	AN_DASSERT(*minor <= 1);
	return 0;
}

static int parse_port(const char *p, const char *end, uint16_t *port)
{
	uint32_t v = 0;

	AN_DASSERT(p <= end);
	if (p == end)
		return -EPROTO;
	for (; p < end; p++) {
		if (!byte_is(*p, HC_DIGIT))
			return -EPROTO;
		v = v * 10u + (uint32_t)(*p - '0');
		if (v > 65535u)
			return -EPROTO;
	}
	if (v == 0)
		return -EPROTO;
	*port = (uint16_t)v;
	AN_DASSERT(*port != 0);
	return 0;
}

/* The inside of "[...]": an IPv6 address, optionally with a "%zone" suffix. */
static bool ipv6_literal_ok(const char *p, const char *end)
{
	bool colon = false;

	AN_DASSERT(p <= end);
	while (p < end && byte_is(*p, HC_IPV6)) {
		colon |= *p == ':';
		p++;
	}
	if (!colon)
		return false;
	if (p == end)
		return true;
	if (*p != '%' || p + 1 == end)
		return false;
	for (p++; p < end; p++) {
		if (!byte_is(*p, HC_HOST) && *p != '%')
			return false;
	}
	return true;
}

/*
 * Splits <s>/<n> as host[:port]. Refuses userinfo, an empty or overlong host,
 * characters outside the host set, and a port that is not 1..65535; without a
 * port, <port_required> refuses and otherwise <port_default> is used.
 */
static int parse_authority(const char *s, size_t n, bool port_required, uint16_t port_default,
			   struct http1_authority *out)
{
	const char *end = s + n;
	const char *p = s;

	AN_DASSERT(s != NULL);
	AN_DASSERT(out != NULL);
	if (n == 0)
		return -EPROTO;
	if (*s == '[') {
		const char *close = memchr(s, ']', n);
		if (close == NULL || !ipv6_literal_ok(s + 1, close))
			return -EPROTO;
		out->host = s + 1;
		out->host_len = (size_t)(close - s - 1);
		p = close + 1;
	} else {
		while (p < end && byte_is(*p, HC_HOST))
			p++;
		out->host = s;
		out->host_len = (size_t)(p - s);
	}
	if (out->host_len == 0 || out->host_len > LIMITS_HOST_BYTES_MAX)
		return -EPROTO;
	if (p == end) {
		out->port = port_default;
		return port_required ? -EPROTO : 0;
	}
	if (*p != ':')
		return -EPROTO;
	return parse_port(p + 1, end, &out->port);
}

int http1_authority_split(const char *s, size_t n, struct http1_authority *out)
{
	return parse_authority(s, n, true, 0, out);
}

static void request_set_authority(struct http1_request *req, const char *a, size_t n,
				  const struct http1_authority *au)
{
	AN_DASSERT(au->host >= a);
	AN_DASSERT(au->host + au->host_len <= a + n);
	req->authority = a;
	req->authority_len = n;
	req->host = au->host;
	req->host_len = au->host_len;
	req->port = au->port;
}

/* http://authority[/path][?query]; the scheme was matched by the caller. */
static int parse_absolute(struct http1_request *req)
{
	const char *a = req->target + 7;
	const char *end = req->target + req->target_len;
	const char *q = a;
	struct http1_authority au;

	AN_DASSERT(req->target_len >= 7);
	while (q < end && *q != '/' && *q != '?')
		q++;
	int rc = parse_authority(a, (size_t)(q - a), false, 80, &au);
	if (rc != 0)
		return rc;
	request_set_authority(req, a, (size_t)(q - a), &au);
	req->form = HTTP1_FORM_ABSOLUTE;
	if (q == end) {
		req->path = http1_root_path;
		req->path_len = 1;
	} else {
		/* "http://h?q" keeps "?q": http1_write_origin_head prefixes the "/". */
		req->path = q;
		req->path_len = (size_t)(end - q);
	}
	AN_DASSERT(req->port != 0);
	return 0;
}

/* RFC 9112 section 3.2: the four forms, each only where it is allowed. */
static int parse_target(struct http1_request *req)
{
	const char *t = req->target;
	size_t n = req->target_len;

	AN_ASSERT(t != NULL);
	AN_ASSERT(n > 0);
	if (req->is_connect) {
		struct http1_authority au;
		int rc = parse_authority(t, n, true, 0, &au);
		if (rc != 0)
			return rc;
		request_set_authority(req, t, n, &au);
		req->form = HTTP1_FORM_AUTHORITY;
		return 0;
	}
	if (t[0] == '/') {
		req->form = HTTP1_FORM_ORIGIN;
		req->path = t;
		req->path_len = n;
		return 0;
	}
	if (n == 1 && t[0] == '*') {
		req->form = HTTP1_FORM_ASTERISK;
		bool options = req->method_len == 7 && memcmp(req->method, "OPTIONS", 7) == 0;
		return options ? 0 : -EPROTO;
	}
	/* https:// and every other scheme: HTTPS goes through CONNECT. */
	if (n >= 7 && http1_name_is(t, 7, "http://"))
		return parse_absolute(req);
	return -EPROTO;
}

/* True when the request line ran out of bytes at <stop> already too long. */
static bool request_line_over(const char *line, const char *stop)
{
	size_t n = (size_t)(stop - line);

	AN_DASSERT(stop >= line);
	AN_DASSERT(n <= LIMITS_REQUEST_LINE_BYTES_MAX + 2);
	if (n > LIMITS_REQUEST_LINE_BYTES_MAX + 1)
		return true;
	/* N + 1 bytes are fine only when the last is the CR of the CRLF. */
	return n == LIMITS_REQUEST_LINE_BYTES_MAX + 1 && stop[-1] != '\r';
}

static int parse_request_line(const char **pp, const char *end, struct http1_request *req)
{
	const char *line = *pp;
	const char *stop = (size_t)(end - line) > LIMITS_REQUEST_LINE_BYTES_MAX + 2
			       ? line + LIMITS_REQUEST_LINE_BYTES_MAX + 2
			       : end;
	const char *p = line;

	AN_ASSERT(line < end);
	int rc = parse_method(&p, stop, req);
	if (rc == 0)
		rc = parse_target_token(&p, stop, req);
	if (rc == 0)
		rc = parse_version(&p, stop, &req->version_minor);
	if (rc == 0)
		rc = parse_crlf(&p, stop);
	if (rc == -EAGAIN && request_line_over(line, stop))
		return -ENAMETOOLONG;
	if (rc != 0)
		return rc;
	AN_ASSERT((size_t)(p - line) <= LIMITS_REQUEST_LINE_BYTES_MAX + 2);
	*pp = p;
	return parse_target(req);
}

/* One "name: value" CRLF line; value trimmed of OWS on both sides. */
static int parse_field(const char **pp, const char *end, struct http1_header *h)
{
	const char *name = *pp;
	const char *p = name;

	AN_DASSERT(p < end);
	while (p < end && byte_is(*p, HC_TCHAR))
		p++;
	if (p == end)
		return -EAGAIN;
	/* RFC 9112 section 5.1: no whitespace between the name and the colon. */
	if (p == name || *p != ':')
		return -EPROTO;
	h->name = name;
	h->name_len = (size_t)(p - name);
	p++;
	while (p < end && is_ows(*p))
		p++;
	const char *value = p;
	while (p < end && byte_is(*p, HC_VALUE))
		p++;
	const char *last = p;
	int rc = parse_crlf(&p, end);
	if (rc != 0)
		return rc;
	while (last > value && is_ows(last[-1]))
		last--;
	h->value = value;
	h->value_len = (size_t)(last - value);
	*pp = p;
	AN_DASSERT(h->name_len > 0);
	return 0;
}

bool http1_list_next(const char **pp, const char *end, const char **elem, size_t *elem_len)
{
	const char *p = *pp;

	AN_DASSERT(p <= end);
	while (p < end && (is_ows(*p) || *p == ','))
		p++;
	if (p == end)
		return false;
	const char *start = p;
	while (p < end && *p != ',')
		p++;
	const char *last = p;
	while (last > start && is_ows(last[-1]))
		last--;
	*elem = start;
	*elem_len = (size_t)(last - start);
	*pp = p;
	AN_DASSERT(*elem_len > 0);
	return true;
}

static int framing_content_length(struct framing *fr, const char *v, size_t n)
{
	uint64_t x = 0;

	AN_DASSERT(fr != NULL);
	AN_DASSERT(v != NULL || n == 0);
	/* Duplicates are refused even when equal: RFC 9112 6.3 allows merging, we don't. */
	if (fr->cl_seen || fr->te_seen || n == 0)
		return -EPROTO;
	for (size_t i = 0; i < n; i++) {
		if (!byte_is(v[i], HC_DIGIT))
			return -EPROTO;
		uint64_t d = (uint64_t)(v[i] - '0');
		if (x > (UINT64_MAX - d) / 10u)
			return -EPROTO;
		x = x * 10u + d;
	}
	fr->cl_seen = true;
	fr->content_length = x;
	return 0;
}

/*
 * A request must carry exactly one "chunked" and nothing else. A response may
 * list codings: chunked must be last and appear once; any other final coding
 * means the body runs until close (RFC 9112 section 6.3, point 4).
 */
static int framing_transfer_encoding(struct framing *fr, const char *v, size_t n)
{
	const char *p = v;
	const char *elem;
	size_t elem_len;
	bool any = false;

	AN_DASSERT(fr != NULL);
	AN_DASSERT(v != NULL || n == 0);
	if (fr->cl_seen)
		return -EPROTO;
	if (fr->is_request) {
		if (fr->te_seen || !http1_name_is(v, n, "chunked"))
			return -EPROTO;
		fr->te_seen = true;
		fr->te_chunked = true;
		return 0;
	}
	while (http1_list_next(&p, v + n, &elem, &elem_len)) {
		if (fr->te_chunked)
			return -EPROTO;
		fr->te_chunked = http1_name_is(elem, elem_len, "chunked");
		any = true;
	}
	fr->te_seen = true;
	return any ? 0 : -EPROTO;
}

static void framing_connection(struct framing *fr, const char *v, size_t n)
{
	const char *p = v;
	const char *elem;
	size_t elem_len;

	AN_DASSERT(fr != NULL);
	AN_DASSERT(v != NULL || n == 0);
	while (http1_list_next(&p, v + n, &elem, &elem_len)) {
		if (http1_name_is(elem, elem_len, "close"))
			fr->conn_close = true;
		else if (http1_name_is(elem, elem_len, "keep-alive"))
			fr->conn_keep_alive = true;
	}
}

/* RFC 9112 section 3.2: one Host, empty or a valid authority. */
static int framing_host(struct framing *fr, const char *v, size_t n)
{
	struct http1_authority au;

	AN_DASSERT(fr->is_request);
	AN_DASSERT(v != NULL || n == 0);
	if (fr->host_seen)
		return -EPROTO;
	fr->host_seen = true;
	fr->host = v;
	fr->host_len = n;
	if (n == 0)
		return 0;
	return parse_authority(v, n, false, 0, &au);
}

/* Whether <name>'s first <n> bytes, any case and '_' read as '-', are lower-case <lit>'s. */
static bool name_as_cgi_reads(const char *name, const char *lit, size_t n)
{
	AN_DASSERT(name != NULL);
	AN_DASSERT(lit != NULL);
	for (size_t i = 0; i < n; i++) {
		char c = name[i] == '_' ? '-' : ascii_lower(name[i]);
		if (c != lit[i])
			return false;
	}
	return true;
}

/*
 * Whether request field name <name>/<n> is, as CGI and WSGI servers read
 * names (HTTP_CONTENT_LENGTH: '_' and '-' alike, any case), one the proxy
 * frames the request by (Content-Length, Transfer-Encoding) or removes or
 * writes itself (Keep-Alive, Proxy-*, the gateway's X-Forwarded-* and
 * X-Real-IP) while not being it: Transfer_Encoding beside a Content-Length
 * is a second body to such a backend, X_Forwarded_For a forged client.
 * Names without '-' (Host, Connection, TE, ...) have no such spelling.
 */
static bool name_underscore_lookalike(const char *name, size_t n)
{
	static const struct {
		const char *lit;
		size_t len;
		bool prefix;
	} owned[] = {
		{ "content-length", 14, false }, { "transfer-encoding", 17, false },
		{ "keep-alive", 10, false },     { "x-real-ip", 9, false },
		{ "proxy-", 6, true },           { "x-forwarded-", 12, true },
	};

	AN_DASSERT(memchr(name, '_', n) != NULL);
	for (size_t i = 0; i < AN_ARRAY_LEN(owned); i++) {
		bool fits = owned[i].prefix ? n >= owned[i].len : n == owned[i].len;
		if (fits && name_as_cgi_reads(name, owned[i].lit, owned[i].len))
			return true;
	}
	return false;
}

/* Dispatches on the name's length first: most fields are none of these. */
static int framing_apply(struct framing *fr, const struct http1_header *h)
{
	AN_DASSERT(h->name_len > 0);
	AN_DASSERT(h->value != NULL);
	if (fr->is_request && memchr(h->name, '_', h->name_len) != NULL &&
	    name_underscore_lookalike(h->name, h->name_len))
		return -EPROTO;
	switch (h->name_len) {
	case 4:
		if (fr->is_request && http1_name_is(h->name, 4, "host"))
			return framing_host(fr, h->value, h->value_len);
		break;
	case 6:
		if (fr->is_request && http1_name_is(h->name, 6, "expect"))
			fr->expect_continue |=
			    http1_name_is(h->value, h->value_len, "100-continue");
		break;
	case 10:
		if (http1_name_is(h->name, 10, "connection"))
			framing_connection(fr, h->value, h->value_len);
		break;
	case 14:
		if (http1_name_is(h->name, 14, "content-length"))
			return framing_content_length(fr, h->value, h->value_len);
		break;
	case 17:
		if (http1_name_is(h->name, 17, "transfer-encoding"))
			return framing_transfer_encoding(fr, h->value, h->value_len);
		break;
	default:
		break;
	}
	return 0;
}

/* Field lines up to and including the blank line. */
static int parse_fields(const char **pp, const char *end, struct http1_header *headers,
			uint32_t *count, struct framing *fr)
{
	const char *p = *pp;
	uint32_t n = 0;

	AN_ASSERT(headers != NULL);
	AN_ASSERT(p <= end);
	for (;;) {
		if (p == end)
			return -EAGAIN;
		if (*p == '\r')
			break;
		/* obs-fold (RFC 9112 section 5.2), a bare LF, or no name at all. */
		if (!byte_is(*p, HC_TCHAR))
			return -EPROTO;
		if (n == LIMITS_HEADERS_MAX)
			return -E2BIG;
		int rc = parse_field(&p, end, &headers[n]);
		if (rc != 0)
			return rc;
		rc = framing_apply(fr, &headers[n]);
		if (rc != 0)
			return rc;
		n++;
	}
	int rc = parse_crlf(&p, end);
	if (rc != 0)
		return rc;
	*count = n;
	*pp = p;
	AN_ASSERT(n <= LIMITS_HEADERS_MAX);
	return 0;
}

/* <a>/<n> without one trailing dot: "example.com." and "example.com" name one host. */
static size_t host_undotted(const char *a, size_t n)
{
	return n > 1 && a[n - 1] == '.' ? n - 1 : n;
}

/* The methods of RFC 9110 section 9, PATCH (RFC 5789) and WebDAV's (RFC 4918): a
 * line that starts with one of them and a blank is a request to any server. */
static bool method_known(const char *p, size_t n)
{
	static const char *const methods[] = { "GET",    "HEAD",     "POST",      "PUT",
					       "DELETE", "CONNECT",  "OPTIONS",   "TRACE",
					       "PATCH",  "PROPFIND", "PROPPATCH", "MKCOL",
					       "COPY",   "MOVE",     "LOCK",      "UNLOCK" };
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		if (strlen(methods[i]) == n && strncasecmp(p, methods[i], n) == 0)
			return true;
	}
	return false;
}

enum http1_shape http1_request_line_shape(const char *p, size_t n, size_t *skip)
{
	size_t i = 0;

	while (i < n && (p[i] == '\r' || p[i] == '\n'))
		i++;
	*skip = i;
	if (i == n)
		return HTTP1_SHAPE_MAYBE;
	if (p[i] == ' ' || p[i] == '\t' || p[i] == '\v' || p[i] == '\f')
		return HTTP1_SHAPE_YES; /* a blank before the method: read (and refused) as HTTP */
	size_t line = n - i < LIMITS_REQUEST_LINE_BYTES_MAX ? n - i : LIMITS_REQUEST_LINE_BYTES_MAX;
	size_t j = i;
	while (j < i + line && (http1_class[(unsigned char)p[j]] & HC_TCHAR))
		j++;
	if (j == i)
		return HTTP1_SHAPE_NOT; /* no token first: a binary protocol */
	if (j == i + line)
		return line < LIMITS_REQUEST_LINE_BYTES_MAX ? HTTP1_SHAPE_MAYBE : HTTP1_SHAPE_YES;
	if (p[j] == '\r' || p[j] == '\n')
		return HTTP1_SHAPE_NOT; /* a token alone on its line: "SSH-2.0-x", "PING" */
	if (method_known(p + i, j - i))
		return HTTP1_SHAPE_YES; /* any separator (RFC 9112 section 3 lets a server split on
					 * any blank); HTTP/0.9's "GET /x" too */
	/* Another first word: a request only if its line names a version, in any case. A
	 * line too long to tell is read as HTTP (and refused), never passed unread. */
	const char *lf = memchr(p + i, '\n', line);
	size_t end = lf != NULL ? (size_t)(lf - p) : i + line;
	for (size_t k = j; k + 5 <= end; k++) {
		if (strncasecmp(p + k, "http/", 5) == 0)
			return HTTP1_SHAPE_YES;
	}
	if (lf == NULL)
		return line < LIMITS_REQUEST_LINE_BYTES_MAX ? HTTP1_SHAPE_MAYBE : HTTP1_SHAPE_YES;
	return HTTP1_SHAPE_NOT;
}

bool http1_request_upgrades(const struct http1_request *req)
{
	for (uint32_t i = 0; i < req->header_count; i++) {
		if (http1_name_is(req->headers[i].name, req->headers[i].name_len, "upgrade"))
			return true;
	}
	return false;
}

bool http1_request_bodiless(const struct http1_request *req)
{
	return req->body == HTTP1_BODY_NONE ||
	       (req->body == HTTP1_BODY_LENGTH && req->content_length == 0);
}

bool http1_host_names(const char *field, size_t field_len, const char *host, size_t host_len,
		      uint16_t port)
{
	struct http1_authority au;

	if (field_len == 0 || parse_authority(field, field_len, false, port, &au) != 0)
		return false;
	size_t a = host_undotted(au.host, au.host_len);
	size_t b = host_undotted(host, host_len);
	return a == b && views_equal_nocase(au.host, host, a) && au.port == port;
}

static int request_finish(struct http1_request *req, const struct framing *fr)
{
	AN_ASSERT(req->version_minor <= 1);
	AN_ASSERT(fr->is_request);
	if (req->version_minor == 1 && !fr->host_seen)
		return -EPROTO;
	/* RFC 9112 section 3.2: a CONNECT's target is nothing but an authority, and its
	 * Host names it; one naming another (or none) is a broken client or a probe. */
	if (req->is_connect && fr->host_seen &&
	    !http1_host_names(fr->host, fr->host_len, req->host, req->host_len, req->port))
		return -EPROTO;
	/* RFC 9112 section 6.1: HTTP/1.0 framing with Transfer-Encoding is faulty. */
	if (fr->te_seen && req->version_minor == 0)
		return -EPROTO;
	/* RFC 9110 section 9.3.6: CONNECT has no content; what follows is the tunnel. */
	if (req->is_connect && (fr->te_seen || fr->content_length > 0))
		return -EPROTO;
	if (fr->te_seen)
		req->body = HTTP1_BODY_CHUNKED;
	else if (fr->cl_seen && !req->is_connect)
		req->body = HTTP1_BODY_LENGTH;
	else
		req->body = HTTP1_BODY_NONE;
	req->content_length = req->body == HTTP1_BODY_LENGTH ? fr->content_length : 0;
	if (req->version_minor == 1)
		req->keep_alive = !fr->conn_close;
	else
		req->keep_alive = fr->conn_keep_alive && !fr->conn_close;
	req->expect_continue = fr->expect_continue;
	req->host_header = fr->host_seen ? fr->host : NULL;
	req->host_header_len = fr->host_seen ? fr->host_len : 0;
	return 0;
}

static void request_reset(struct http1_request *req)
{
	/* Field by field: zeroing the headers array would cost more than parsing. */
	req->method = NULL;
	req->method_len = 0;
	req->target = NULL;
	req->target_len = 0;
	req->form = HTTP1_FORM_ORIGIN;
	req->authority = NULL;
	req->authority_len = 0;
	req->host = NULL;
	req->host_len = 0;
	req->port = 0;
	req->path = NULL;
	req->path_len = 0;
	req->version_minor = 0;
	req->is_connect = false;
	req->keep_alive = false;
	req->expect_continue = false;
	req->body = HTTP1_BODY_NONE;
	req->content_length = 0;
	req->host_header = NULL;
	req->host_header_len = 0;
	req->header_count = 0;
	req->head_len = 0;
}

/* Maps an internal result to the API's, with the reason for a refusal. */
static ssize_t request_result(int rc, bool truncated, size_t head_len, enum reason *why)
{
	AN_DASSERT(rc <= 0);
	AN_DASSERT(head_len <= LIMITS_HEAD_BYTES_MAX);
	*why = REASON_NONE;
	switch (rc) {
	case 0:
		return (ssize_t)head_len;
	case -EAGAIN:
		if (!truncated)
			return -EAGAIN;
		*why = REASON_HEADERS_TOO_LARGE;
		return -EPROTO;
	case -E2BIG:
		*why = REASON_HEADERS_TOO_LARGE;
		return -EPROTO;
	case -ENAMETOOLONG:
		*why = REASON_URI_TOO_LONG;
		return -EPROTO;
	default:
		AN_ASSERT(rc == -EPROTO);
		*why = REASON_BAD_REQUEST;
		return -EPROTO;
	}
}

ssize_t http1_parse_request(const char *buf, size_t len, struct http1_request *req,
			    enum reason *why)
{
	struct framing fr = { .is_request = true };

	AN_ASSERT(req != NULL);
	AN_ASSERT(why != NULL);
	AN_ASSERT(buf != NULL || len == 0);
	request_reset(req);
	*why = REASON_NONE;
	if (len == 0)
		return -EAGAIN;
	size_t lim = len < LIMITS_HEAD_BYTES_MAX ? len : LIMITS_HEAD_BYTES_MAX;
	const char *end = buf + lim;
	const char *p = buf;
	int rc = skip_empty_lines(&p, end);
	if (rc == 0)
		rc = parse_request_line(&p, end, req);
	if (rc == 0)
		rc = parse_fields(&p, end, req->headers, &req->header_count, &fr);
	if (rc == 0)
		rc = request_finish(req, &fr);
	if (rc == 0)
		req->head_len = (size_t)(p - buf);
	AN_ASSERT(req->head_len <= len);
	return request_result(rc, len > lim, req->head_len, why);
}

/* The status code: three digits, 100..599; bytes present so far must match. */
static int parse_status(const char **pp, const char *end, uint16_t *status)
{
	const char *p = *pp;
	size_t avail = (size_t)(end - p);
	size_t n = avail < 3 ? avail : 3;

	AN_DASSERT(p <= end);
	for (size_t i = 0; i < n; i++) {
		if (!byte_is(p[i], HC_DIGIT))
			return -EPROTO;
	}
	if (n < 3)
		return -EAGAIN;
	if (p[0] < '1' || p[0] > '5')
		return -EPROTO;
	*status = (uint16_t)((p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0'));
	*pp = p + 3;
	AN_DASSERT(*status >= 100 && *status <= 599);
	return 0;
}

/*
 * HTTP/1.x SP status [SP reason-phrase] CRLF. The phrase means nothing to us
 * (RFC 9112 section 4); it is kept as a view only so a rewritten head can carry it.
 */
static int parse_status_line(const char **pp, const char *end, struct http1_response *resp)
{
	const char *p = *pp;

	AN_DASSERT(p <= end);
	int rc = parse_version(&p, end, &resp->version_minor);
	if (rc != 0)
		return rc;
	if (p == end)
		return -EAGAIN;
	if (*p != ' ')
		return -EPROTO;
	p++;
	rc = parse_status(&p, end, &resp->status);
	if (rc != 0)
		return rc;
	/* Some servers omit the SP before an empty phrase; that is harmless. */
	const char *reason = p;
	if (p < end && *p == ' ') {
		p++;
		reason = p;
		while (p < end && byte_is(*p, HC_VALUE))
			p++;
	}
	const char *reason_end = p;
	rc = parse_crlf(&p, end);
	if (rc != 0)
		return rc;
	resp->reason = reason;
	resp->reason_len = (size_t)(reason_end - reason);
	*pp = p;
	AN_DASSERT(resp->status >= 100);
	AN_DASSERT(resp->reason_len == 0 || reason[-1] == ' ');
	return 0;
}

static int response_finish(struct http1_response *resp, const struct framing *fr)
{
	AN_ASSERT(!fr->is_request);
	AN_ASSERT(resp->version_minor <= 1);
	if (fr->te_seen && resp->version_minor == 0)
		return -EPROTO;
	if (fr->te_seen)
		resp->body = fr->te_chunked ? HTTP1_BODY_CHUNKED : HTTP1_BODY_CLOSE;
	else if (fr->cl_seen)
		resp->body = HTTP1_BODY_LENGTH;
	else
		resp->body = HTTP1_BODY_CLOSE;
	resp->content_length = resp->body == HTTP1_BODY_LENGTH ? fr->content_length : 0;
	if (resp->version_minor == 1)
		resp->keep_alive = !fr->conn_close;
	else
		resp->keep_alive = fr->conn_keep_alive && !fr->conn_close;
	return 0;
}

ssize_t http1_parse_response(const char *buf, size_t len, struct http1_response *resp)
{
	struct framing fr = { .is_request = false };

	AN_ASSERT(resp != NULL);
	AN_ASSERT(buf != NULL || len == 0);
	resp->status = 0;
	resp->reason = NULL;
	resp->reason_len = 0;
	resp->version_minor = 0;
	resp->keep_alive = false;
	resp->body = HTTP1_BODY_NONE;
	resp->content_length = 0;
	resp->header_count = 0;
	resp->head_len = 0;
	if (len == 0)
		return -EAGAIN;
	size_t lim = len < LIMITS_RESPONSE_HEAD_BYTES_MAX ? len : LIMITS_RESPONSE_HEAD_BYTES_MAX;
	const char *end = buf + lim;
	const char *p = buf;
	int rc = parse_status_line(&p, end, resp);
	if (rc == 0)
		rc = parse_fields(&p, end, resp->headers, &resp->header_count, &fr);
	if (rc == 0)
		rc = response_finish(resp, &fr);
	if (rc == -EAGAIN)
		return len > lim ? -EPROTO : -EAGAIN;
	if (rc != 0)
		return -EPROTO;
	resp->head_len = (size_t)(p - buf);
	AN_ASSERT(resp->head_len <= lim);
	return (ssize_t)resp->head_len;
}

enum http1_body http1_response_body(const struct http1_response *resp, bool request_was_head)
{
	AN_ASSERT(resp != NULL);
	AN_ASSERT(resp->status >= 100 && resp->status <= 599);
	/* RFC 9112 section 6.3, points 1 and 2 (CONNECT is never forwarded as HTTP). */
	if (request_was_head || resp->status < 200 || resp->status == 204 || resp->status == 304)
		return HTTP1_BODY_NONE;
	return resp->body;
}

/* ---- Writing heads ---- */

void http1_out_put(struct http1_out *o, const char *s, size_t n)
{
	AN_DASSERT(o->len <= o->cap);
	AN_DASSERT(s != NULL || n == 0);
	if (o->overflow || n > o->cap - o->len) {
		o->overflow = true;
		return;
	}
	if (n > 0)
		memcpy(o->p + o->len, s, n);
	o->len += n;
	AN_DASSERT(o->len <= o->cap);
}

void http1_out_field(struct http1_out *o, const char *name, size_t name_len, const char *value,
		     size_t value_len)
{
	AN_DASSERT(name != NULL);
	AN_DASSERT(name_len > 0);
	http1_out_put(o, name, name_len);
	http1_out_put(o, ": ", 2);
	http1_out_put(o, value, value_len);
	http1_out_put(o, "\r\n", 2);
}

void http1_out_request_line(struct http1_out *o, const char *method, size_t method_len,
			    const char *path, size_t path_len)
{
	AN_DASSERT(method != NULL);
	AN_DASSERT(method_len > 0);
	AN_DASSERT(path != NULL || path_len == 0);
	http1_out_put(o, method, method_len);
	http1_out_put(o, " ", 1);
	if (path_len == 0 || path[0] != '/')
		http1_out_put(o, "/", 1);
	http1_out_put(o, path, path_len);
	http1_out_put(o, " HTTP/1.1\r\n", 11);
}

/* Appends each field of <h>/<n> whose <drop> entry is false, in order. */
static void out_headers(struct http1_out *o, const struct http1_header *h, uint32_t n,
			const bool *drop)
{
	AN_ASSERT(n <= LIMITS_HEADERS_MAX);
	AN_ASSERT(drop != NULL || n == 0);
	for (uint32_t i = 0; i < n; i++) {
		if (!drop[i])
			http1_out_field(o, h[i].name, h[i].name_len, h[i].value, h[i].value_len);
	}
}

void http1_out_fields(struct http1_out *o, const struct http1_request *req, const bool *drop)
{
	AN_ASSERT(req != NULL);
	AN_ASSERT(o != NULL);
	out_headers(o, req->headers, req->header_count, drop);
}

ssize_t http1_out_end(struct http1_out *o)
{
	AN_ASSERT(o != NULL);
	http1_out_put(o, "\r\n", 2);
	if (o->overflow)
		return -EMSGSIZE;
	AN_ASSERT(o->len <= o->cap);
	return (ssize_t)o->len;
}

/* Fields a proxy never forwards (RFC 9110 section 7.6.1), whatever Connection says. */
static bool hop_by_hop_always(const char *name, size_t n)
{
	AN_DASSERT(name != NULL);
	AN_DASSERT(n > 0);
	if (n >= 6 && http1_name_is(name, 6, "proxy-"))
		return true;
	switch (n) {
	case 2:
		return http1_name_is(name, n, "te");
	case 7:
		return http1_name_is(name, n, "trailer") || http1_name_is(name, n, "upgrade");
	case 10:
		return http1_name_is(name, n, "connection") || http1_name_is(name, n, "keep-alive");
	default:
		return false;
	}
}

/*
 * Marks in <drop> the fields of <h>/<n> named by <tok>, one Connection option.
 * <keep_host>: a request's Host is never named away.
 */
static void hop_by_hop_named(const struct http1_header *h, uint32_t n, const char *tok,
			     size_t tok_len, bool keep_host, bool *drop)
{
	AN_DASSERT(tok_len > 0);
	AN_DASSERT(n <= LIMITS_HEADERS_MAX);
	/*
	 * Framing fields stay whatever Connection says: dropping Content-Length
	 * would let the body be read by the next hop as a second, unchecked
	 * message. Host stays too: an HTTP/1.1 request must carry one.
	 */
	if (http1_name_is(tok, tok_len, "close") || http1_name_is(tok, tok_len, "content-length") ||
	    http1_name_is(tok, tok_len, "transfer-encoding"))
		return;
	if (keep_host && http1_name_is(tok, tok_len, "host"))
		return;
	for (uint32_t j = 0; j < n; j++) {
		if (!drop[j] && h[j].name_len == tok_len &&
		    views_equal_nocase(h[j].name, tok, tok_len))
			drop[j] = true;
	}
}

/*
 * The marking both directions share (RFC 9110 section 7.6.1): the fields
 * hop-by-hop by name, then those each Connection option names.
 */
static void hop_by_hop_mark(const struct http1_header *h, uint32_t n, bool keep_host, bool *drop)
{
	AN_ASSERT(n <= LIMITS_HEADERS_MAX);
	AN_ASSERT(drop != NULL || n == 0);
	for (uint32_t i = 0; i < n; i++)
		drop[i] = hop_by_hop_always(h[i].name, h[i].name_len);
	for (uint32_t i = 0; i < n; i++) {
		const char *p = h[i].value;
		const char *tok;
		size_t tok_len;
		if (h[i].name_len != 10 || !http1_name_is(h[i].name, 10, "connection"))
			continue;
		while (http1_list_next(&p, h[i].value + h[i].value_len, &tok, &tok_len))
			hop_by_hop_named(h, n, tok, tok_len, keep_host, drop);
	}
}

void http1_hop_by_hop(const struct http1_request *req, bool *drop)
{
	AN_ASSERT(req != NULL);
	AN_ASSERT(drop != NULL);
	hop_by_hop_mark(req->headers, req->header_count, true, drop);
	/* nginx's underscores_in_headers off: a backend that reads '_' as '-' would take
	 * such a field for one the proxy checked, stripped or wrote under the other
	 * spelling (a profile's strip_headers, a Connection option, an inject header). */
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		drop[i] = drop[i] || memchr(h->name, '_', h->name_len) != NULL;
	}
}

void http1_response_hop_by_hop(const struct http1_response *resp, bool *drop)
{
	AN_ASSERT(resp != NULL);
	AN_ASSERT(drop != NULL);
	/* RFC 9110 section 7.8: a 101's Upgrade and Connection are what the tunnel is made of. */
	if (resp->status == 101) {
		for (uint32_t i = 0; i < resp->header_count; i++)
			drop[i] = false;
		return;
	}
	hop_by_hop_mark(resp->headers, resp->header_count, false, drop);
}

/* The hop-by-hop fields, and Host: the origin head writes its own. */
static void origin_head_drops(const struct http1_request *req, bool *drop)
{
	AN_ASSERT(req->header_count <= LIMITS_HEADERS_MAX);
	AN_ASSERT(drop != NULL);
	http1_hop_by_hop(req, drop);
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		drop[i] = drop[i] || http1_name_is(h->name, h->name_len, "host");
	}
}

ssize_t http1_write_origin_head(const struct http1_request *req, char *out, size_t cap)
{
	bool drop[LIMITS_HEADERS_MAX];
	struct http1_out o = { .p = out, .cap = cap };

	AN_ASSERT(req != NULL);
	AN_ASSERT(out != NULL || cap == 0);
	AN_ASSERT(req->form == HTTP1_FORM_ABSOLUTE || req->form == HTTP1_FORM_ORIGIN);
	/* Origin form (a terminated tier's inner request) keeps its own Host. */
	bool absolute = req->form == HTTP1_FORM_ABSOLUTE;
	const char *path = absolute ? req->path : req->target;
	size_t path_len = absolute ? req->path_len : req->target_len;
	const char *authority = absolute ? req->authority : req->host_header;
	size_t authority_len = absolute ? req->authority_len : req->host_header_len;
	AN_ASSERT(path != NULL && path_len > 0);
	origin_head_drops(req, drop);
	http1_out_request_line(&o, req->method, req->method_len, path, path_len);
	http1_out_fields(&o, req, drop);
	if (authority != NULL)
		http1_out_field(&o, "Host", 4, authority, authority_len);
	return http1_out_end(&o);
}

/* "HTTP/1.1 <status> <reason>" CRLF: our version (RFC 9110 section 6.2), their phrase. */
static void out_status_line(struct http1_out *o, uint16_t status, const char *reason,
			    size_t reason_len)
{
	char line[] = "HTTP/1.1 000 ";

	AN_ASSERT(status >= 100);
	AN_ASSERT(status <= 999);
	AN_ASSERT(reason != NULL || reason_len == 0);
	line[9] = (char)('0' + status / 100);
	line[10] = (char)('0' + status / 10 % 10);
	line[11] = (char)('0' + status % 10);
	http1_out_put(o, line, sizeof(line) - 1);
	http1_out_put(o, reason, reason_len);
	http1_out_put(o, "\r\n", 2);
}

/* Whether <c> is one the URL parser drops anywhere in a value (tab, LF, CR). */
static bool location_ignored(char c)
{
	return c == '\t' || c == '\n' || c == '\r';
}

/*
 * Copies <value> to <out> (at most <cap> bytes) as the URL parser sees it:
 * no leading or trailing C0 control or space, no tab or line break, '\\'
 * as '/'. Returns the length, or -1 when it does not fit or a control byte
 * is left inside.
 */
static ssize_t location_clean(const char *value, size_t len, char *out, size_t cap)
{
	size_t start = 0, end = len, n = 0;

	while (start < end && (unsigned char)value[start] <= 0x20)
		start++;
	while (end > start && (unsigned char)value[end - 1] <= 0x20)
		end--;
	for (size_t i = start; i < end; i++) {
		char c = value[i];
		if (location_ignored(c))
			continue;
		if ((unsigned char)c < 0x20 || c == 0x7f || n == cap)
			return -1;
		out[n++] = c == '\\' ? '/' : c;
	}
	return (ssize_t)n;
}

void http1_location_target(const char *value, size_t len, struct http1_location *out)
{
	char buf[HTTP1_LOCATION_BYTES_MAX];

	AN_ASSERT(value != NULL || len == 0);
	*out = (struct http1_location){ .kind = HTTP1_LOCATION_UNSAFE };
	ssize_t n = location_clean(value, len, buf, sizeof(buf));
	if (n < 0)
		return;
	size_t at = 0, end = (size_t)n;
	uint16_t port = 443;
	/* A scheme: ALPHA *(ALPHA / DIGIT / "+" / "-" / ".") ":". */
	size_t s = 0;
	while (s < end &&
	       (isalnum((unsigned char)buf[s]) || buf[s] == '+' || buf[s] == '-' || buf[s] == '.'))
		s++;
	bool scheme = s > 0 && s < end && buf[s] == ':' && isalpha((unsigned char)buf[0]);
	if (scheme) {
		if (s == 5 && strncasecmp(buf, "https", 5) == 0)
			port = 443;
		else if (s == 4 && strncasecmp(buf, "http", 4) == 0)
			port = 80;
		else
			return; /* another scheme: nothing to decide it by */
		at = s + 1;
		while (at < end && buf[at] == '/')
			at++;
	} else if (end - at >= 2 && buf[0] == '/' && buf[1] == '/') {
		while (at < end && buf[at] == '/')
			at++;
	} else {
		out->kind = HTTP1_LOCATION_RELATIVE;
		return;
	}
	/* The authority, up to the path, query or fragment; the userinfo before its last '@'. */
	size_t auth_end = at;
	while (auth_end < end && buf[auth_end] != '/' && buf[auth_end] != '?' &&
	       buf[auth_end] != '#')
		auth_end++;
	const char *at_sign = memrchr(buf + at, '@', auth_end - at);
	size_t host_at = at_sign != NULL ? (size_t)(at_sign - buf) + 1 : at;
	size_t host_end = auth_end;
	const char *colon = memrchr(buf + host_at, ':', host_end - host_at);
	if (colon != NULL && memchr(colon, ']', (size_t)(buf + host_end - colon)) == NULL) {
		uint32_t p = 0;
		size_t digits = 0;
		for (const char *d = colon + 1; d < buf + host_end; d++, digits++) {
			if (!isdigit((unsigned char)*d) || digits == 5)
				return;
			p = p * 10 + (uint32_t)(*d - '0');
		}
		if (digits > 0) {
			if (p == 0 || p > 65535)
				return;
			port = (uint16_t)p;
		}
		host_end = (size_t)(colon - buf);
	}
	if (host_end - host_at >= 2 && buf[host_at] == '[' && buf[host_end - 1] == ']') {
		host_at++;
		host_end--;
	}
	if (host_end == host_at || memchr(buf + host_at, '%', host_end - host_at) != NULL)
		return; /* no host, or one percent-decoding could turn into another */
	/* The host is a view into <value>: the cleaning kept its bytes, maybe at other offsets. */
	const char *found = memmem(value, len, buf + host_at, host_end - host_at);
	if (found == NULL)
		return; /* tabs or line breaks inside the host: nothing to view */
	out->kind = HTTP1_LOCATION_ABSOLUTE;
	out->host = found;
	out->host_len = host_end - host_at;
	out->port = port;
}

bool http1_proxy_field(const char *name, size_t name_len)
{
	return name_len >= 8 && strncasecmp(name, "x-agent-", 8) == 0;
}

ssize_t http1_write_response_head(const struct http1_response *resp, const char *connection,
				  char *out, size_t cap)
{
	bool drop[LIMITS_HEADERS_MAX];
	struct http1_out o = { .p = out, .cap = cap };

	AN_ASSERT(resp != NULL);
	AN_ASSERT(out != NULL || cap == 0);
	AN_ASSERT(resp->header_count <= LIMITS_HEADERS_MAX);
	/* A 101 keeps its own Connection: a second one would contradict it. */
	if (resp->status == 101)
		AN_ASSERT(connection == NULL);
	if (connection != NULL)
		AN_ASSERT(connection[0] != '\0');
	if (connection != NULL)
		AN_ASSERT(strpbrk(connection, "\r\n") == NULL);
	http1_response_hop_by_hop(resp, drop);
	/* The proxy's own namespace: an upstream never speaks to the agent as the proxy. */
	for (uint32_t i = 0; i < resp->header_count; i++)
		drop[i] =
		    drop[i] || http1_proxy_field(resp->headers[i].name, resp->headers[i].name_len);
	out_status_line(&o, resp->status, resp->reason, resp->reason_len);
	out_headers(&o, resp->headers, resp->header_count, drop);
	if (connection != NULL)
		http1_out_field(&o, "Connection", 10, connection, strlen(connection));
	return http1_out_end(&o);
}

/* Chunked body states; 0 must be the start so a zeroed struct is ready. */
enum chunk_state {
	CHUNK_SIZE = 0,        /* hex digits of the chunk size */
	CHUNK_SIZE_BWS,        /* BWS before a ';': after the size or an extension */
	CHUNK_EXT_NAME_START,  /* after ';': BWS, then the extension's name */
	CHUNK_EXT_NAME,        /* the name's token */
	CHUNK_EXT_NAME_BWS,    /* BWS after the name: '=' or ';' follows */
	CHUNK_EXT_VALUE_START, /* after '=': BWS, then a token or a quoted-string */
	CHUNK_EXT_TOKEN,       /* a token value */
	CHUNK_EXT_QUOTED,      /* inside a quoted-string value */
	CHUNK_EXT_QUOTED_PAIR, /* after a backslash inside it */
	CHUNK_EXT_QUOTED_END,  /* its closing quote seen */
	CHUNK_SIZE_LF,         /* CR of the size line seen; the last state of the line */
	CHUNK_DATA,            /* chunk_left bytes of data */
	CHUNK_DATA_CR,         /* CRLF after the data */
	CHUNK_DATA_LF,
	CHUNK_TRAILER, /* start of a trailer line, or the final CRLF */
	CHUNK_TRAILER_NAME,
	CHUNK_TRAILER_VALUE,
	CHUNK_TRAILER_LF,
	CHUNK_FINAL_LF,
	CHUNK_ERROR, /* sticky: a malformed body stays malformed */
};

static int chunk_line_grow(struct http1_chunked *s)
{
	AN_DASSERT(s->line_len <= HTTP1_CHUNK_LINE_BYTES_MAX);
	if (s->line_len == HTTP1_CHUNK_LINE_BYTES_MAX)
		return -EPROTO;
	s->line_len++;
	return 0;
}

/* qdtext (RFC 9110 section 5.6.4): a field-value byte but DQUOTE and backslash. */
static inline bool is_qdtext(char c)
{
	return byte_is(c, HC_VALUE) && c != '"' && c != '\\';
}

/*
 * The state after byte <c> of a chunk extension (RFC 9112 section 7.1.1), read
 * exactly: *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] ).
 * A bare ';', a name-less or value-less '=', an open quote, a CTL, or BWS
 * before the CRLF is CHUNK_ERROR: a server that reads the line another way
 * (up to a quote's end, say) would find another size or another end of the
 * body. A CR ends the line only where an extension may end.
 */
static enum chunk_state chunk_ext_next(enum chunk_state at, char c)
{
	AN_DASSERT(at >= CHUNK_EXT_NAME_START);
	AN_DASSERT(at < CHUNK_SIZE_LF);
	switch (at) {
	case CHUNK_EXT_NAME_START:
		if (is_ows(c))
			return CHUNK_EXT_NAME_START;
		return byte_is(c, HC_TCHAR) ? CHUNK_EXT_NAME : CHUNK_ERROR;
	case CHUNK_EXT_NAME:
		if (byte_is(c, HC_TCHAR))
			return CHUNK_EXT_NAME;
		if (c == '\r')
			return CHUNK_SIZE_LF;
		/* fallthrough */
	case CHUNK_EXT_NAME_BWS:
		if (c == '=')
			return CHUNK_EXT_VALUE_START;
		if (c == ';')
			return CHUNK_EXT_NAME_START;
		return is_ows(c) ? CHUNK_EXT_NAME_BWS : CHUNK_ERROR;
	case CHUNK_EXT_VALUE_START:
		if (is_ows(c))
			return CHUNK_EXT_VALUE_START;
		if (c == '"')
			return CHUNK_EXT_QUOTED;
		return byte_is(c, HC_TCHAR) ? CHUNK_EXT_TOKEN : CHUNK_ERROR;
	case CHUNK_EXT_QUOTED:
		if (c == '"')
			return CHUNK_EXT_QUOTED_END;
		if (c == '\\')
			return CHUNK_EXT_QUOTED_PAIR;
		return is_qdtext(c) ? CHUNK_EXT_QUOTED : CHUNK_ERROR;
	case CHUNK_EXT_QUOTED_PAIR:
		return byte_is(c, HC_VALUE) ? CHUNK_EXT_QUOTED : CHUNK_ERROR;
	case CHUNK_EXT_TOKEN:
		if (byte_is(c, HC_TCHAR))
			return CHUNK_EXT_TOKEN;
		/* fallthrough */
	default: /* CHUNK_EXT_QUOTED_END: the value is whole */
		if (c == '\r')
			return CHUNK_SIZE_LF;
		if (c == ';')
			return CHUNK_EXT_NAME_START;
		return is_ows(c) ? CHUNK_SIZE_BWS : CHUNK_ERROR;
	}
}

static int chunk_ext_step(struct http1_chunked *s, char c)
{
	enum chunk_state next = chunk_ext_next((enum chunk_state)s->state, c);

	if (next == CHUNK_ERROR)
		return -EPROTO;
	s->state = (uint32_t)next;
	AN_DASSERT(s->state <= CHUNK_SIZE_LF);
	return c == '\r' ? 0 : chunk_line_grow(s);
}

/* chunk-size [ chunk-ext ] CRLF (RFC 9112 section 7.1); the extension's bytes above. */
static int chunk_size_step(struct http1_chunked *s, char c)
{
	AN_DASSERT(s->state <= CHUNK_SIZE_LF);
	AN_DASSERT(s->chunk_left <= HTTP1_CHUNK_SIZE_MAX);
	switch (s->state) {
	case CHUNK_SIZE:
		if (byte_is(c, HC_HEX)) {
			uint64_t d = byte_is(c, HC_DIGIT) ? (uint64_t)(c - '0')
							  : (uint64_t)(ascii_lower(c) - 'a' + 10);
			if (s->chunk_left > (HTTP1_CHUNK_SIZE_MAX - d) / 16u)
				return -EPROTO;
			s->chunk_left = s->chunk_left * 16u + d;
			return chunk_line_grow(s);
		}
		if (s->line_len == 0)
			return -EPROTO;
		if (c == '\r')
			s->state = CHUNK_SIZE_LF;
		else if (c == ';')
			s->state = CHUNK_EXT_NAME_START;
		else if (is_ows(c))
			s->state = CHUNK_SIZE_BWS;
		else
			return -EPROTO;
		return c == '\r' ? 0 : chunk_line_grow(s);
	case CHUNK_SIZE_BWS:
		/* BWS only ever comes before a ';' here: "5 " CRLF is no chunk line. */
		if (c == ';')
			s->state = CHUNK_EXT_NAME_START;
		else if (!is_ows(c))
			return -EPROTO;
		return chunk_line_grow(s);
	case CHUNK_SIZE_LF:
		if (c != '\n')
			return -EPROTO;
		s->state = s->chunk_left == 0 ? CHUNK_TRAILER : CHUNK_DATA;
		s->line_len = 0;
		return 0;
	default:
		return chunk_ext_step(s, c);
	}
}

/* The CRLF after data, trailer fields and the final CRLF; 1 when the message ends. */
static int chunk_tail_step(struct http1_chunked *s, char c)
{
	AN_DASSERT(s->state >= CHUNK_DATA_CR);
	AN_DASSERT(s->state < CHUNK_ERROR);
	switch (s->state) {
	case CHUNK_DATA_CR:
		s->state = CHUNK_DATA_LF;
		return c == '\r' ? 0 : -EPROTO;
	case CHUNK_DATA_LF:
		s->state = CHUNK_SIZE;
		s->chunk_left = 0;
		s->line_len = 0;
		return c == '\n' ? 0 : -EPROTO;
	case CHUNK_TRAILER:
		if (c == '\r') {
			s->state = CHUNK_FINAL_LF;
			return 0;
		}
		/* A leading SP or HTAB would be obs-fold. */
		s->state = CHUNK_TRAILER_NAME;
		return byte_is(c, HC_TCHAR) ? chunk_line_grow(s) : -EPROTO;
	case CHUNK_TRAILER_NAME:
		if (c == ':')
			s->state = CHUNK_TRAILER_VALUE;
		else if (!byte_is(c, HC_TCHAR))
			return -EPROTO;
		return chunk_line_grow(s);
	case CHUNK_TRAILER_VALUE:
		if (c == '\r') {
			s->state = CHUNK_TRAILER_LF;
			return 0;
		}
		return byte_is(c, HC_VALUE) ? chunk_line_grow(s) : -EPROTO;
	case CHUNK_TRAILER_LF:
		s->state = CHUNK_TRAILER;
		s->line_len = 0;
		return c == '\n' ? 0 : -EPROTO;
	default:
		return c == '\n' ? 1 : -EPROTO;
	}
}

ssize_t http1_chunked_next_data(struct http1_chunked *s, const char *buf, size_t len,
				size_t *data_off, size_t *data_len)
{
	size_t i = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(buf != NULL || len == 0);
	*data_off = 0;
	*data_len = 0;
	if (s->done)
		return 0;
	if (s->state == CHUNK_ERROR)
		return -EPROTO;
	while (i < len) {
		if (s->state == CHUNK_DATA) {
			/* Data is not inspected: the run is reported whole. */
			uint64_t n = len - i < s->chunk_left ? len - i : s->chunk_left;
			*data_off = i;
			*data_len = (size_t)n;
			i += (size_t)n;
			s->chunk_left -= n;
			if (s->chunk_left == 0)
				s->state = CHUNK_DATA_CR;
			return (ssize_t)i;
		}
		int rc = s->state <= CHUNK_SIZE_LF ? chunk_size_step(s, buf[i])
						   : chunk_tail_step(s, buf[i]);
		i++;
		if (rc < 0) {
			s->state = CHUNK_ERROR;
			return -EPROTO;
		}
		if (rc > 0) {
			s->done = true;
			return (ssize_t)i;
		}
		if (s->state == CHUNK_TRAILER)
			return (ssize_t)i; /* a trailer field may begin: its caller's part */
	}
	AN_ASSERT(i == len);
	return (ssize_t)len;
}

/* Whether byte <c>, next for <s>, is in a trailer field line (RFC 9112 section 7.1.2). */
static bool chunk_in_trailer_field(const struct http1_chunked *s, char c)
{
	return (s->state == CHUNK_TRAILER && c != '\r') || s->state == CHUNK_TRAILER_NAME ||
	       s->state == CHUNK_TRAILER_VALUE || s->state == CHUNK_TRAILER_LF;
}

ssize_t http1_chunked_scan_part(struct http1_chunked *s, const char *buf, size_t len,
				bool *trailer_field)
{
	size_t i = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(buf != NULL || len == 0);
	*trailer_field = false;
	if (s->state == CHUNK_ERROR)
		return -EPROTO;
	if (s->done || len == 0)
		return 0;
	bool field = chunk_in_trailer_field(s, buf[0]);
	while (i < len && !s->done && chunk_in_trailer_field(s, buf[i]) == field) {
		size_t off = 0, run = 0;
		ssize_t m = http1_chunked_next_data(s, buf + i, len - i, &off, &run);
		if (m < 0)
			return m;
		AN_ASSERT(m > 0);
		i += (size_t)m;
	}
	*trailer_field = field;
	AN_ASSERT(i > 0);
	return (ssize_t)i;
}

/*
 * Whether byte <c>, next for <s>, is part of a chunk extension: from the BWS or
 * ';' after the size up to the line's CR (RFC 9112 section 7.1.1).
 */
static bool chunk_in_extension(const struct http1_chunked *s, char c)
{
	if (s->state == CHUNK_SIZE)
		return s->line_len > 0 && !byte_is(c, HC_HEX) && c != '\r';
	return s->state >= CHUNK_SIZE_BWS && s->state < CHUNK_SIZE_LF && c != '\r';
}

ssize_t http1_chunked_strip(struct http1_chunked *s, char *buf, size_t len, size_t *kept)
{
	size_t at = 0, out = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(buf != NULL || len == 0);
	while (at < len && !s->done) {
		if (s->state == CHUNK_ERROR)
			return -EPROTO;
		size_t off = 0, run = 0;
		if (s->state == CHUNK_DATA) {
			ssize_t m = http1_chunked_next_data(s, buf + at, len - at, &off, &run);
			AN_ASSERT(m > 0 && off == 0 && run == (size_t)m);
			memmove(buf + out, buf + at, (size_t)m);
			out += (size_t)m;
			at += (size_t)m;
			continue;
		}
		/* A framing byte at a time: kept unless an extension's or a trailer field's. */
		bool drop = chunk_in_extension(s, buf[at]) || chunk_in_trailer_field(s, buf[at]);
		ssize_t m = http1_chunked_next_data(s, buf + at, 1, &off, &run);
		if (m < 0)
			return m;
		AN_ASSERT(m == 1);
		if (!drop)
			buf[out++] = buf[at];
		at++;
	}
	*kept = out;
	return (ssize_t)at;
}

ssize_t http1_chunked_scan(struct http1_chunked *s, const char *buf, size_t len)
{
	size_t i = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(buf != NULL || len == 0);
	if (s->done)
		return 0;
	while (i < len && !s->done) {
		size_t off = 0, run = 0;
		ssize_t m = http1_chunked_next_data(s, buf + i, len - i, &off, &run);
		if (m < 0)
			return m;
		AN_ASSERT(m > 0);
		i += (size_t)m;
	}
	if (s->state == CHUNK_ERROR)
		return -EPROTO;
	return (ssize_t)i;
}
