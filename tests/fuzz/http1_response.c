/*
 * libFuzzer driver for the response head rewriter of core/http1.c. Every input
 * http1_parse_response accepts is rewritten by http1_write_response_head with
 * each Connection argument the proxy may pass (none, "close", "keep-alive";
 * only none for an interim 1xx, which the proxy sends without one, and for a
 * 101, which keeps its own) into a buffer of exactly
 * HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX bytes that ends its heap allocation, so
 * ASan sees any write past the bound. Invariants, not expected values:
 *   - the writer never fails at that cap; the head grows by at most one byte
 *     per kept field, one in the status line and our Connection line, and so
 *     never by more than the bound's margin over LIMITS_RESPONSE_HEAD_BYTES_MAX;
 *   - the output is "HTTP/1.1 <3 digits> <phrase as received>" CRLF, field
 *     lines, a blank line, with no NUL and no CR or LF outside a CRLF;
 *   - http1_response_hop_by_hop marks exactly the fields an independent
 *     reading of RFC 9110 section 7.6.1 (as the header words it) calls
 *     hop-by-hop, and nothing in a 101;
 *   - the output's fields are the unmarked input fields in order, byte for
 *     byte, then our Connection field; none of them is hop-by-hop, and none
 *     is in the proxy's own namespace (X-Agent-*, any case);
 *   - the output parses again to the same status, phrase and body framing,
 *     with keep_alive as our argument says (every received Connection field
 *     is dropped, so nothing else can speak; a 101 keeps its own), and a
 *     second rewrite gives the same bytes.
 * Our parser must refuse an output over LIMITS_RESPONSE_HEAD_BYTES_MAX, or one
 * with more than LIMITS_HEADERS_MAX fields (100 kept fields plus our
 * Connection); only those skip the re-parse and the second rewrite.
 *
 * fuzz-sources: core/http1.c core/an.c core/reason.c core/pool.c
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "core/an.h"
#include "core/http1.h"
#include "core/pool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OUT_CAP ((size_t)HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX)
#define GROWTH_MAX \
	((size_t)HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX - (size_t)LIMITS_RESPONSE_HEAD_BYTES_MAX)
#define STATUS_FIXED_LEN 13u /* "HTTP/1.1 200 " */

/* One rewrite under test: the input, its marks, the argument and the buffers. */
struct rewrite {
	const struct http1_response *in;
	const bool *drop;
	const char *connection;
	char *out; /* OUT_CAP bytes, the end of a heap allocation */
	size_t out_len;
	uint32_t field_count; /* field lines in the output */
	char *again_out;      /* the same, for the second rewrite */
	struct http1_response *again;
};

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static char lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c + ('a' - 'A')) : c;
}

static bool views_eq_nocase(const char *a, size_t a_len, const char *b, size_t b_len)
{
	AN_ASSERT(a != NULL || a_len == 0);
	AN_ASSERT(b != NULL || b_len == 0);
	if (a_len != b_len)
		return false;
	for (size_t i = 0; i < a_len; i++) {
		if (lower(a[i]) != lower(b[i]))
			return false;
	}
	return true;
}

static bool lit_eq(const char *a, size_t a_len, const char *lit)
{
	return views_eq_nocase(a, a_len, lit, strlen(lit));
}

static bool views_eq(const char *a, size_t a_len, const char *b, size_t b_len)
{
	return a_len == b_len && (a_len == 0 || memcmp(a, b, a_len) == 0);
}

/* True when the comma-separated list <v>/<n> has an element equal to <name> (no case). */
static bool list_has(const char *v, size_t n, const char *name, size_t name_len)
{
	size_t i = 0;

	AN_ASSERT(v != NULL || n == 0);
	AN_ASSERT(name_len > 0);
	while (i <= n) {
		size_t j = i;
		while (j < n && v[j] != ',')
			j++;
		size_t a = i;
		size_t b = j;
		while (a < b && is_ows(v[a]))
			a++;
		while (b > a && is_ows(v[b - 1]))
			b--;
		if (views_eq_nocase(v + a, b - a, name, name_len))
			return true;
		i = j + 1;
	}
	return false;
}

/* Hop-by-hop by name alone, whatever Connection says. */
static bool hop_by_name(const char *name, size_t n)
{
	AN_ASSERT(name != NULL);
	AN_ASSERT(n > 0);
	if (n >= 6 && views_eq_nocase(name, 6, "proxy-", 6))
		return true;
	return lit_eq(name, n, "connection") || lit_eq(name, n, "keep-alive") ||
	       lit_eq(name, n, "te") || lit_eq(name, n, "trailer") || lit_eq(name, n, "upgrade");
}

/* True when a Connection field of <in> names <name> away (never "close" or framing). */
static bool hop_by_option(const struct http1_response *in, const char *name, size_t n)
{
	AN_ASSERT(in != NULL);
	AN_ASSERT(n > 0);
	if (lit_eq(name, n, "close") || lit_eq(name, n, "content-length") ||
	    lit_eq(name, n, "transfer-encoding"))
		return false;
	for (uint32_t i = 0; i < in->header_count; i++) {
		const struct http1_header *h = &in->headers[i];
		if (lit_eq(h->name, h->name_len, "connection") &&
		    list_has(h->value, h->value_len, name, n))
			return true;
	}
	return false;
}

/* http1_response_hop_by_hop against the header's own words. */
static void check_marks(const struct http1_response *in, const bool *drop)
{
	AN_ASSERT(in->header_count <= LIMITS_HEADERS_MAX);
	AN_ASSERT(drop != NULL);
	for (uint32_t i = 0; i < in->header_count; i++) {
		const struct http1_header *h = &in->headers[i];
		bool hop = in->status != 101 && (hop_by_name(h->name, h->name_len) ||
						 hop_by_option(in, h->name, h->name_len));
		AN_ASSERT(drop[i] == hop);
	}
}

/* The status line and the byte rules; returns the status line's length. */
static size_t check_bytes(const struct rewrite *rw)
{
	const char *o = rw->out;
	size_t len = rw->out_len;
	uint16_t st = rw->in->status;
	size_t line_len = STATUS_FIXED_LEN + rw->in->reason_len + 2;

	AN_ASSERT(len >= line_len + 2);
	AN_ASSERT(memcmp(o, "HTTP/1.1 ", 9) == 0);
	AN_ASSERT(o[9] == (char)('0' + st / 100) && o[10] == (char)('0' + st / 10 % 10));
	AN_ASSERT(o[11] == (char)('0' + st % 10) && o[12] == ' ');
	AN_ASSERT(
	    views_eq(o + STATUS_FIXED_LEN, rw->in->reason_len, rw->in->reason, rw->in->reason_len));
	AN_ASSERT(o[line_len - 2] == '\r' && o[line_len - 1] == '\n');
	AN_ASSERT(memcmp(o + len - 4, "\r\n\r\n", 4) == 0);
	for (size_t i = 0; i < len; i++) {
		AN_ASSERT(o[i] != '\0');
		if (o[i] == '\r')
			AN_ASSERT(i + 1 < len && o[i + 1] == '\n');
		if (o[i] == '\n')
			AN_ASSERT(i > 0 && o[i - 1] == '\r');
	}
	return line_len;
}

/* The output's next field line at *<pp> into <h>; false at the blank line. */
static bool out_next_field(const char **pp, const char *end, struct http1_header *h)
{
	const char *p = *pp;

	AN_ASSERT(p < end);
	const char *cr = memchr(p, '\r', (size_t)(end - p));
	AN_ASSERT(cr != NULL && cr + 1 < end);
	if (cr == p) {
		AN_ASSERT(cr + 2 == end);
		return false;
	}
	/* Names are tokens, so the first colon ends the name. */
	const char *colon = memchr(p, ':', (size_t)(cr - p));
	AN_ASSERT(colon != NULL && colon > p);
	AN_ASSERT(colon + 1 < cr && colon[1] == ' ');
	h->name = p;
	h->name_len = (size_t)(colon - p);
	h->value = colon + 2;
	h->value_len = (size_t)(cr - colon - 2);
	*pp = cr + 2;
	return true;
}

/* A field the output kept is not hop-by-hop (a 101 keeps them all). */
static void check_not_hop(const struct rewrite *rw, const struct http1_header *h)
{
	AN_ASSERT(h->name_len > 0);
	AN_ASSERT(rw->in != NULL);
	if (rw->in->status == 101)
		return;
	AN_ASSERT(!hop_by_name(h->name, h->name_len));
	AN_ASSERT(!hop_by_option(rw->in, h->name, h->name_len));
}

/* The output's fields: the unmarked input fields, in order, then our Connection. */
static void check_fields(struct rewrite *rw, size_t status_line_len)
{
	const char *p = rw->out + status_line_len;
	const char *end = rw->out + rw->out_len;
	struct http1_header h;
	uint32_t n = 0;

	AN_ASSERT(status_line_len < rw->out_len);
	for (uint32_t i = 0; i < rw->in->header_count; i++) {
		const struct http1_header *want = &rw->in->headers[i];
		if (rw->drop[i])
			continue;
		AN_ASSERT(out_next_field(&p, end, &h));
		AN_ASSERT(views_eq(h.name, h.name_len, want->name, want->name_len));
		AN_ASSERT(views_eq(h.value, h.value_len, want->value, want->value_len));
		check_not_hop(rw, &h);
		n++;
	}
	if (rw->connection != NULL) {
		AN_ASSERT(out_next_field(&p, end, &h));
		AN_ASSERT(views_eq(h.name, h.name_len, "Connection", 10));
		AN_ASSERT(views_eq(h.value, h.value_len, rw->connection, strlen(rw->connection)));
		n++;
	}
	AN_ASSERT(!out_next_field(&p, end, &h));
	rw->field_count = n;
}

/* What the output's keep_alive must be: ours, or for a 101 what its own fields say. */
static bool expect_keep_alive(const struct http1_response *in, const char *connection)
{
	AN_ASSERT(in != NULL);
	AN_ASSERT(in->status != 101 || connection == NULL);
	if (in->status != 101)
		return connection == NULL || strcmp(connection, "close") != 0;
	for (uint32_t i = 0; i < in->header_count; i++) {
		const struct http1_header *h = &in->headers[i];
		if (lit_eq(h->name, h->name_len, "connection") &&
		    list_has(h->value, h->value_len, "close", 5))
			return false;
	}
	return true;
}

/* Parses the output again; false when our parser must refuse it (see the top). */
static bool check_reparse(struct rewrite *rw)
{
	const struct http1_response *in = rw->in;
	struct http1_response *again = rw->again;

	ssize_t rc = http1_parse_response(rw->out, rw->out_len, again);
	if (rw->out_len > LIMITS_RESPONSE_HEAD_BYTES_MAX || rw->field_count > LIMITS_HEADERS_MAX) {
		AN_ASSERT(rc == -EPROTO);
		return false;
	}
	AN_ASSERT(rc == (ssize_t)rw->out_len);
	AN_ASSERT(again->head_len == rw->out_len);
	AN_ASSERT(again->version_minor == 1);
	AN_ASSERT(again->status == in->status);
	AN_ASSERT(views_eq(again->reason, again->reason_len, in->reason, in->reason_len));
	AN_ASSERT(again->body == in->body);
	AN_ASSERT(again->content_length == in->content_length);
	AN_ASSERT(again->keep_alive == expect_keep_alive(in, rw->connection));
	AN_ASSERT(again->header_count == rw->field_count);
	return true;
}

/* A second rewrite of the output, with the same argument, changes nothing. */
static void check_idempotent(const struct rewrite *rw)
{
	AN_ASSERT(rw->again->head_len == rw->out_len);
	AN_ASSERT(rw->again_out != rw->out);
	ssize_t m = http1_write_response_head(rw->again, rw->connection, rw->again_out, OUT_CAP);
	AN_ASSERT(m == (ssize_t)rw->out_len);
	AN_ASSERT(memcmp(rw->again_out, rw->out, rw->out_len) == 0);
}

static void check_rewrite(struct rewrite *rw, const char *connection)
{
	const struct http1_response *in = rw->in;
	size_t kept = 0;

	AN_ASSERT(in->head_len > 0);
	AN_ASSERT(in->status != 101 || connection == NULL);
	rw->connection = connection;
	ssize_t m = http1_write_response_head(in, connection, rw->out, OUT_CAP);
	AN_ASSERT(m > 0 && (size_t)m <= OUT_CAP);
	rw->out_len = (size_t)m;
	AN_ASSERT(rw->out_len <= in->head_len + GROWTH_MAX);
	for (uint32_t i = 0; i < in->header_count; i++)
		kept += rw->drop[i] ? 0u : 1u;
	size_t conn_line = connection == NULL ? 0 : 14 + strlen(connection);
	AN_ASSERT(rw->out_len <= in->head_len + kept + 1 + conn_line);
	size_t status_line_len = check_bytes(rw);
	check_fields(rw, status_line_len);
	if (check_reparse(rw))
		check_idempotent(rw);
}

static void check_input(const char *buf, size_t len, struct rewrite *rw, struct http1_response *in)
{
	static const char *const args[] = { NULL, "close", "keep-alive" };
	bool drop[LIMITS_HEADERS_MAX];

	AN_ASSERT(buf != NULL || len == 0);
	AN_ASSERT(rw->out != NULL && rw->again_out != NULL && rw->again != NULL);
	ssize_t n = http1_parse_response(buf, len, in);
	if (n <= 0)
		return;
	AN_ASSERT((size_t)n == in->head_len && (size_t)n <= LIMITS_RESPONSE_HEAD_BYTES_MAX);
	AN_ASSERT(in->status >= 100 && in->status <= 599);
	AN_ASSERT(in->reason != NULL);
	http1_response_hop_by_hop(in, drop);
	check_marks(in, drop);
	/* The writer drops the proxy's own namespace too: no X-Agent-* from an upstream. */
	for (uint32_t i = 0; i < in->header_count; i++)
		drop[i] = drop[i] || (in->headers[i].name_len >= 8 &&
				      strncasecmp(in->headers[i].name, "x-agent-", 8) == 0);
	rw->in = in;
	rw->drop = drop;
	/* The proxy sends an interim response without Connection; a 101 keeps its own. */
	size_t n_args = in->status < 200 ? 1 : AN_ARRAY_LEN(args);
	for (size_t i = 0; i < n_args; i++)
		check_rewrite(rw, args[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rewrite rw = { .out = pool_malloc(OUT_CAP), .again_out = pool_malloc(OUT_CAP) };
	struct http1_response *in = pool_malloc(sizeof(*in));

	rw.again = pool_malloc(sizeof(*rw.again));
	AN_ASSERT(in != NULL);
	check_input((const char *)data, size, &rw, in);
	pool_free(rw.again);
	pool_free(in);
	pool_free(rw.again_out);
	pool_free(rw.out);
	return 0;
}
