/*
 * libFuzzer driver for core/http1.c: every input is fed to the request parser,
 * the response parser and the chunked scanner, and the results are checked
 * against invariants rather than expected values:
 *   - results are one of the documented ones, with a reason exactly on -EPROTO;
 *   - head_len <= len, and every view lies inside the head (the "/" of an empty
 *     absolute-form path is the one view that may point elsewhere);
 *   - a head that parses also parses when cut at head_len, and one byte less
 *     is -EAGAIN (the parser never decides on bytes it has not seen);
 *   - an absolute-form head is rewritten by http1_write_origin_head into an
 *     exactly-sized buffer, one byte less is -EMSGSIZE, and the rewrite parses
 *     again with the same method and body framing and no field name with '_';
 *   - the chunked scanner gives the same answer for the whole input, for two
 *     pieces split anywhere, and for one byte at a time, and part by part,
 *     the kept parts alone a body with an empty trailer section;
 *   - http1_chunked_strip, split anywhere, consumes what the scanner does and
 *     keeps the same bytes as whole: the same data, in chunks framed by sizes
 *     and CRLFs alone (no extension, no trailer field).
 *
 * fuzz-sources: core/http1.c core/an.c core/reason.c core/pool.c
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/an.h"
#include "core/http1.h"
#include "core/pool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool view_inside(const char *p, size_t n, const char *buf, size_t len)
{
	uintptr_t lo = (uintptr_t)buf;
	uintptr_t at = (uintptr_t)p;

	if (p == NULL)
		return n == 0;
	return at >= lo && at - lo <= len && n <= len - (at - lo);
}

static void check_headers(const struct http1_header *h, uint32_t count, const char *buf, size_t len)
{
	AN_ASSERT(count <= LIMITS_HEADERS_MAX);
	for (uint32_t i = 0; i < count; i++) {
		AN_ASSERT(h[i].name_len > 0);
		AN_ASSERT(view_inside(h[i].name, h[i].name_len, buf, len));
		AN_ASSERT(view_inside(h[i].value, h[i].value_len, buf, len));
	}
}

static void check_request_views(const struct http1_request *req, const char *buf, size_t len)
{
	AN_ASSERT(req->method_len >= 1 && req->method_len <= 32);
	AN_ASSERT(view_inside(req->method, req->method_len, buf, len));
	AN_ASSERT(view_inside(req->target, req->target_len, buf, len));
	AN_ASSERT(view_inside(req->authority, req->authority_len, buf, len));
	AN_ASSERT(view_inside(req->host, req->host_len, buf, len));
	AN_ASSERT(view_inside(req->host_header, req->host_header_len, buf, len));
	if (!view_inside(req->path, req->path_len, buf, len))
		AN_ASSERT(req->path_len == 1 && req->path[0] == '/');
	AN_ASSERT(req->host_len <= LIMITS_HOST_BYTES_MAX);
	AN_ASSERT(req->version_minor <= 1);
	if (req->version_minor == 1)
		AN_ASSERT(req->host_header != NULL);
	bool has_authority = req->form == HTTP1_FORM_ABSOLUTE || req->form == HTTP1_FORM_AUTHORITY;
	AN_ASSERT(has_authority == (req->port != 0));
	AN_ASSERT(has_authority == (req->host_len != 0));
	AN_ASSERT(req->is_connect == (req->form == HTTP1_FORM_AUTHORITY));
	AN_ASSERT(req->body != HTTP1_BODY_CLOSE);
	if (req->body != HTTP1_BODY_LENGTH)
		AN_ASSERT(req->content_length == 0);
	check_headers(req->headers, req->header_count, buf, len);
}

/* The rewrite fits exactly, refuses one byte less, and parses again the same way. */
static void check_origin_head(const struct http1_request *req)
{
	size_t cap = req->head_len + 2 * LIMITS_HOST_BYTES_MAX;
	char *out = pool_malloc(cap);
	struct http1_request *again = pool_malloc(sizeof(*again));
	enum reason why;

	AN_ASSERT(out != NULL && again != NULL);
	ssize_t n = http1_write_origin_head(req, out, cap);
	AN_ASSERT(n > 0 && (size_t)n <= cap);
	AN_ASSERT(http1_write_origin_head(req, out, (size_t)n - 1) == -EMSGSIZE);
	AN_ASSERT(http1_write_origin_head(req, out, (size_t)n) == n);
	ssize_t rc = http1_parse_request(out, (size_t)n, again, &why);
	if (rc == -EPROTO) {
		/* Only a limit may refuse it: the rewrite can be a little longer. */
		AN_ASSERT(why == REASON_URI_TOO_LONG || why == REASON_HEADERS_TOO_LARGE);
	} else {
		AN_ASSERT(rc == n);
		AN_ASSERT(again->form == HTTP1_FORM_ORIGIN);
		AN_ASSERT(again->version_minor == 1);
		AN_ASSERT(again->method_len == req->method_len);
		AN_ASSERT(memcmp(again->method, req->method, req->method_len) == 0);
		AN_ASSERT(again->body == req->body);
		AN_ASSERT(again->content_length == req->content_length);
		AN_ASSERT(again->host_header_len == req->authority_len);
		/* No name with '_' is relayed (a CGI server reads it as the one with '-'). */
		for (uint32_t i = 0; i < again->header_count; i++)
			AN_ASSERT(memchr(again->headers[i].name, '_', again->headers[i].name_len) ==
				  NULL);
	}
	pool_free(again);
	pool_free(out);
}

static void check_request(const char *buf, size_t len)
{
	struct http1_request *req = pool_malloc(sizeof(*req));
	enum reason why = REASON__COUNT;

	AN_ASSERT(req != NULL);
	ssize_t rc = http1_parse_request(buf, len, req, &why);
	if (rc == -EAGAIN) {
		AN_ASSERT(why == REASON_NONE);
		AN_ASSERT(len <= LIMITS_HEAD_BYTES_MAX);
	} else if (rc == -EPROTO) {
		AN_ASSERT(why == REASON_BAD_REQUEST || why == REASON_URI_TOO_LONG ||
			  why == REASON_HEADERS_TOO_LARGE);
	} else {
		AN_ASSERT(rc > 0 && (size_t)rc <= len);
		AN_ASSERT((size_t)rc <= LIMITS_HEAD_BYTES_MAX);
		AN_ASSERT(req->head_len == (size_t)rc);
		AN_ASSERT(why == REASON_NONE);
		check_request_views(req, buf, (size_t)rc);
		if (req->form == HTTP1_FORM_ABSOLUTE)
			check_origin_head(req);
		AN_ASSERT(http1_parse_request(buf, (size_t)rc - 1, req, &why) == -EAGAIN);
		AN_ASSERT(http1_parse_request(buf, (size_t)rc, req, &why) == rc);
	}
	pool_free(req);
}

static void check_response(const char *buf, size_t len)
{
	struct http1_response *resp = pool_malloc(sizeof(*resp));

	AN_ASSERT(resp != NULL);
	ssize_t rc = http1_parse_response(buf, len, resp);
	AN_ASSERT(rc > 0 || rc == -EAGAIN || rc == -EPROTO);
	if (rc == -EAGAIN)
		AN_ASSERT(len <= LIMITS_RESPONSE_HEAD_BYTES_MAX);
	if (rc > 0) {
		AN_ASSERT((size_t)rc <= len && (size_t)rc <= LIMITS_RESPONSE_HEAD_BYTES_MAX);
		AN_ASSERT(resp->head_len == (size_t)rc);
		AN_ASSERT(resp->status >= 100 && resp->status <= 599);
		AN_ASSERT(resp->version_minor <= 1);
		check_headers(resp->headers, resp->header_count, buf, (size_t)rc);
		enum http1_body b = http1_response_body(resp, false);
		AN_ASSERT(b == HTTP1_BODY_NONE || b == resp->body);
		AN_ASSERT(http1_response_body(resp, true) == HTTP1_BODY_NONE);
		AN_ASSERT(http1_parse_response(buf, (size_t)rc - 1, resp) == -EAGAIN);
	}
	pool_free(resp);
}

/* Feeds one piece to <s>; false once the scan has stopped (done or error). */
static bool chunked_feed(struct http1_chunked *s, const char *p, size_t n, ssize_t *used)
{
	ssize_t rc = http1_chunked_scan(s, p, n);

	if (rc < 0) {
		*used = rc;
		return false;
	}
	AN_ASSERT((size_t)rc <= n);
	if (!s->done)
		AN_ASSERT((size_t)rc == n);
	*used += rc;
	return !s->done;
}

/* Scans <len> bytes as two pieces split at <split>. */
static ssize_t chunked_two(const char *buf, size_t len, size_t split, struct http1_chunked *s)
{
	ssize_t used = 0;

	memset(s, 0, sizeof(*s));
	if (chunked_feed(s, buf, split, &used))
		chunked_feed(s, buf + split, len - split, &used);
	return used;
}

/* Scans <len> bytes one byte at a time. */
static ssize_t chunked_bytes(const char *buf, size_t len, struct http1_chunked *s)
{
	ssize_t used = 0;

	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < len; i++) {
		if (!chunked_feed(s, buf + i, 1, &used))
			break;
	}
	return used;
}

/*
 * Scans <len> bytes part by part (http1_chunked_scan_part): the parts tile what
 * http1_chunked_scan takes, and the kept ones, alone, are a chunked body that
 * scans to its end with no trailer field (what a relay that drops them sends).
 */
static ssize_t chunked_parts(const char *buf, size_t len, bool done)
{
	struct http1_chunked s = { 0 }, kept_scan = { 0 };
	size_t used = 0;

	while (used < len && !s.done) {
		bool field = false;
		ssize_t m = http1_chunked_scan_part(&s, buf + used, len - used, &field);
		if (m < 0)
			return m;
		AN_ASSERT(m > 0 && (size_t)m <= len - used);
		if (!field) {
			ssize_t k = http1_chunked_scan(&kept_scan, buf + used, (size_t)m);
			AN_ASSERT(k == m);
		}
		used += (size_t)m;
	}
	AN_ASSERT(s.done == done && kept_scan.done == done);
	return (ssize_t)used;
}

/* The data bytes of chunked <buf> (<len> bytes) into <out>: their count, or -1 on a fault. */
static ssize_t chunked_data(const char *buf, size_t len, char *out, bool *done)
{
	struct http1_chunked s = { 0 };
	size_t at = 0, n = 0;

	while (at < len && !s.done) {
		size_t off = 0, run = 0;
		ssize_t m = http1_chunked_next_data(&s, buf + at, len - at, &off, &run);
		if (m <= 0)
			return -1;
		memcpy(out + n, buf + at + off, run);
		n += run;
		at += (size_t)m;
	}
	*done = s.done;
	return (ssize_t)n;
}

/*
 * Strips <len> bytes in two pieces cut at <split>, each stripped in a copy of
 * its own: what was consumed is what the scanner takes (<want>); what was
 * kept is a chunked body of the same data that has neither a chunk extension
 * (no ';' nor blank in a size line) nor a trailer field, and is what one
 * piece stripped whole keeps.
 */
static void chunked_strip(const char *buf, size_t len, size_t split, ssize_t want)
{
	static char copy[1 << 16], whole[1 << 16], stripped[1 << 16];
	static char data_in[1 << 16], data_out[1 << 16];
	struct http1_chunked s = { 0 }, one = { 0 };
	size_t got_kept = 0, used = 0;

	if (len > sizeof(copy))
		return;
	ssize_t rc = 0;
	for (size_t at = 0, n = split; at < len && rc >= 0 && !s.done; at += n, n = len - at) {
		size_t kept = 0;
		memcpy(copy, buf + at, n);
		rc = http1_chunked_strip(&s, copy, n, &kept);
		if (rc < 0)
			break;
		AN_ASSERT(kept <= (size_t)rc && (size_t)rc <= n);
		AN_ASSERT(memcmp(copy + rc, buf + at + (size_t)rc, n - (size_t)rc) == 0);
		memcpy(stripped + got_kept, copy, kept);
		got_kept += kept;
		used += (size_t)rc;
	}
	if (want < 0) {
		AN_ASSERT(rc == -EPROTO);
		return;
	}
	AN_ASSERT(rc >= 0 && used == (size_t)want);
	/* Split anywhere, the same bytes as whole. */
	size_t one_kept = 0;
	memcpy(whole, buf, (size_t)want);
	AN_ASSERT(http1_chunked_strip(&one, whole, (size_t)want, &one_kept) == want);
	AN_ASSERT(one_kept == got_kept && memcmp(whole, stripped, got_kept) == 0);
	/* The same data; a whole body stays whole, with nothing but sizes and CRLFs framing it. */
	bool done_in = false, done_out = false;
	ssize_t din = chunked_data(buf, (size_t)want, data_in, &done_in);
	ssize_t dout = chunked_data(stripped, got_kept, data_out, &done_out);
	AN_ASSERT(din >= 0 && dout == din && memcmp(data_in, data_out, (size_t)din) == 0);
	AN_ASSERT(done_out == done_in);
	struct http1_chunked again = { 0 };
	for (size_t at = 0; at < got_kept;) {
		bool field = false;
		ssize_t m = http1_chunked_scan_part(&again, stripped + at, got_kept - at, &field);
		AN_ASSERT(m > 0 && !field);
		at += (size_t)m;
	}
	/* Outside the data, hex digits, CR and LF alone: no extension, no trailer field. */
	struct http1_chunked frame = { 0 };
	for (size_t at = 0; at < got_kept && !frame.done;) {
		size_t off = 0, run = 0;
		ssize_t m =
		    http1_chunked_next_data(&frame, stripped + at, got_kept - at, &off, &run);
		AN_ASSERT(m > 0);
		for (size_t i = 0; i < (size_t)m; i++) {
			char c = stripped[at + i];
			if (run > 0 && i >= off && i < off + run)
				continue;
			AN_ASSERT(c == '\r' || c == '\n' || (c >= '0' && c <= '9') ||
				  (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'));
		}
		at += (size_t)m;
	}
}

static void check_chunked(const char *buf, size_t len)
{
	struct http1_chunked whole;
	struct http1_chunked piece;

	if (len == 0)
		return;
	ssize_t rc = chunked_two(buf, len, len, &whole);
	AN_ASSERT(rc == -EPROTO || (rc >= 0 && (size_t)rc <= len));
	if (rc >= 0 && !whole.done)
		AN_ASSERT((size_t)rc == len);
	size_t split = (size_t)(uint8_t)buf[0] % (len + 1);
	AN_ASSERT(chunked_two(buf, len, split, &piece) == rc);
	AN_ASSERT(piece.done == whole.done);
	AN_ASSERT(chunked_bytes(buf, len, &piece) == rc);
	AN_ASSERT(piece.done == whole.done);
	if (rc >= 0)
		AN_ASSERT(chunked_parts(buf, len, whole.done) == rc);
	else
		AN_ASSERT(chunked_parts(buf, len, false) == -EPROTO);
	chunked_strip(buf, len, split, rc);
	if (whole.done)
		AN_ASSERT(http1_chunked_scan(&whole, buf, len) == 0);
	if (rc == -EPROTO)
		AN_ASSERT(http1_chunked_scan(&whole, buf, len) == -EPROTO);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;

	check_request(buf, size);
	check_response(buf, size);
	check_chunked(buf, size);
	return 0;
}
