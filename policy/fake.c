/*
 * The fake-response tier's compiler: a rule's `responses`, the canned answers
 * the engine gives an agent in place of the upstream's (in the terminated TLS
 * or in clear). An entry matches a method and a path (exact, or a prefix
 * ending in '*'); the first match wins, so an entry an earlier one covers is
 * refused as dead, and the last entry, with neither, is the default.
 *
 * A response is compiled here once: a head is the status line and the header
 * lines as written; a body_file is read at load, never again, and the bodies
 * of one load share a budget (POLICY_FAKE_BYTES_MAX). Nothing that could
 * frame or split a response (CR, LF, NUL, the framing headers) gets in.
 * verdict.fake comes from a table by rule index beside the acl, not from its
 * nodes: a host lookup carries no field only one tier needs. Choosing the
 * answer for a request is run time: policy.c's fake_response op.
 */
#include "policy/loader.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

/* The IANA registry's reason phrases; any other status gets an empty one (RFC 9112 4). */
static const struct {
	uint16_t status;
	const char *phrase;
} status_phrases[] = {
	{ 200, "OK" },
	{ 201, "Created" },
	{ 202, "Accepted" },
	{ 203, "Non-Authoritative Information" },
	{ 204, "No Content" },
	{ 205, "Reset Content" },
	{ 206, "Partial Content" },
	{ 207, "Multi-Status" },
	{ 208, "Already Reported" },
	{ 226, "IM Used" },
	{ 300, "Multiple Choices" },
	{ 301, "Moved Permanently" },
	{ 302, "Found" },
	{ 303, "See Other" },
	{ 304, "Not Modified" },
	{ 305, "Use Proxy" },
	{ 307, "Temporary Redirect" },
	{ 308, "Permanent Redirect" },
	{ 400, "Bad Request" },
	{ 401, "Unauthorized" },
	{ 402, "Payment Required" },
	{ 403, "Forbidden" },
	{ 404, "Not Found" },
	{ 405, "Method Not Allowed" },
	{ 406, "Not Acceptable" },
	{ 407, "Proxy Authentication Required" },
	{ 408, "Request Timeout" },
	{ 409, "Conflict" },
	{ 410, "Gone" },
	{ 411, "Length Required" },
	{ 412, "Precondition Failed" },
	{ 413, "Content Too Large" },
	{ 414, "URI Too Long" },
	{ 415, "Unsupported Media Type" },
	{ 416, "Range Not Satisfiable" },
	{ 417, "Expectation Failed" },
	{ 421, "Misdirected Request" },
	{ 422, "Unprocessable Content" },
	{ 423, "Locked" },
	{ 424, "Failed Dependency" },
	{ 425, "Too Early" },
	{ 426, "Upgrade Required" },
	{ 428, "Precondition Required" },
	{ 429, "Too Many Requests" },
	{ 431, "Request Header Fields Too Large" },
	{ 451, "Unavailable For Legal Reasons" },
	{ 500, "Internal Server Error" },
	{ 501, "Not Implemented" },
	{ 502, "Bad Gateway" },
	{ 503, "Service Unavailable" },
	{ 504, "Gateway Timeout" },
	{ 505, "HTTP Version Not Supported" },
	{ 506, "Variant Also Negotiates" },
	{ 507, "Insufficient Storage" },
	{ 508, "Loop Detected" },
	{ 510, "Not Extended" },
	{ 511, "Network Authentication Required" },
};

static const char *status_phrase(uint16_t status)
{
	AN_ASSERT(status >= 200 && status <= 599);
	for (size_t i = 0; i < AN_ARRAY_LEN(status_phrases); i++) {
		if (status_phrases[i].status == status)
			return status_phrases[i].phrase;
	}
	AN_ASSERT(status_phrases[0].status == 200);
	return "";
}

/*
 * Headers the engine writes itself: it frames the body (Content-Length) and
 * decides whether the connection stays open. A canned copy would contradict
 * it, which is how responses get smuggled.
 */
static const char *const framing_headers[] = {
	"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Upgrade",        "Proxy-Connection",  "Trailer",
};

static bool is_framing_header(const char *name, size_t len)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(framing_headers); i++) {
		if (len == strlen(framing_headers[i]) &&
		    strncasecmp(name, framing_headers[i], len) == 0)
			return true;
	}
	return false;
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A rule path: '/' then RFC 3986 path bytes, and '*' only last (a prefix). NULL, or why not. */
static const char *path_invalid(const char *s, size_t len)
{
	AN_ASSERT(s != NULL || len == 0);
	if (len == 0 || s[0] != '/')
		return "a path starts with \"/\"";
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') ||
			     (c != '\0' && strchr("-._~!$&'()+,;=:@/", c));
		if (plain || (c == '*' && i == len - 1))
			continue;
		if (c == '*')
			return "'*' may only end a path, which then matches as a prefix (\"/v1/*\")";
		if (c == '?')
			return "the query is ignored in matching: leave out \"?...\"";
		if (c == '#')
			return "clients never send a fragment: leave out \"#...\"";
		if (c != '%')
			return "a byte outside RFC 3986 path characters (percent-encode it)";
		if (i + 2 >= len || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
			return "'%' must start an escape of two hex digits";
		i += 2;
	}
	AN_ASSERT(s[0] == '/');
	return NULL;
}

/* A response being read: its header lines wait here until the status line is known. */
struct response_build {
	struct policy_response *resp;
	yaml_mark_t start;
	yaml_mark_t headers; /* of the headers key */
	yaml_mark_t body;    /* of the body or body_file key */
	uint32_t seen;       /* keys given */
	uint32_t lines_len;
	uint32_t header_count;
	uint32_t name_off[POLICY_FAKE_HEADERS_MAX]; /* each header's name in lines */
	uint32_t name_len[POLICY_FAKE_HEADERS_MAX];
	char lines[POLICY_FAKE_HEAD_BYTES_MAX]; /* "Name: value\r\n" each, as written */
};

static int fail_head_size(struct loader *ld, yaml_mark_t m)
{
	return loader_fail(ld, m,
			   "the response's head (status line and headers) is longer than %u bytes",
			   POLICY_FAKE_HEAD_BYTES_MAX);
}

/* Appends <len> bytes at <s> to the header lines; false when the head would be too long. */
static bool lines_put(struct response_build *b, const char *s, size_t len)
{
	AN_ASSERT(b->lines_len <= sizeof(b->lines));
	if (len > sizeof(b->lines) - b->lines_len)
		return false;
	memcpy(b->lines + b->lines_len, s, len);
	b->lines_len += (uint32_t)len;
	AN_ASSERT(b->lines_len <= sizeof(b->lines));
	return true;
}

/* No control byte but HTAB (so never CR, LF or NUL), no whitespace at either end. NULL, or why not. */
static const char *header_value_invalid(const char *s, size_t len)
{
	AN_ASSERT(s != NULL);
	AN_ASSERT(len <= POLICY_FILE_BYTES_MAX); /* a scalar of the file */
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return "holds a control character (CR, LF, NUL, ...), which would break the head";
	}
	if (len > 0 && (s[0] == ' ' || s[0] == '\t' || s[len - 1] == ' ' || s[len - 1] == '\t'))
		return "begins or ends with whitespace";
	return NULL;
}

/* One "Name: value" of a response's headers; the name is the key in ld->ev. */
static int header_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct response_build *b = ctx;
	char shown[SHOW_BYTES];

	AN_ASSERT(index == b->header_count);
	AN_ASSERT(index < POLICY_FAKE_HEADERS_MAX);
	size_t name_len = ev_len(ld);
	loader_show(ev_text(ld), name_len, shown);
	if (!loader_is_token(ev_text(ld), name_len) || name_len > POLICY_FAKE_HEADER_NAME_BYTES_MAX)
		return loader_fail(ld, ld->key_mark,
				   "invalid header name \"%s\": use 1-%u bytes of RFC 9110 token "
				   "characters",
				   shown, POLICY_FAKE_HEADER_NAME_BYTES_MAX);
	if (is_framing_header(ev_text(ld), name_len))
		return loader_fail(
		    ld, ld->key_mark,
		    "header \"%s\" is refused: the daemon owns the response's framing and "
		    "connection (Content-Length, Transfer-Encoding, Connection, "
		    "Keep-Alive, Upgrade, Proxy-Connection, Trailer)",
		    shown);
	for (uint32_t i = 0; i < b->header_count; i++) {
		if (b->name_len[i] == name_len &&
		    strncasecmp(b->lines + b->name_off[i], ev_text(ld), name_len) == 0)
			return loader_fail(ld, ld->key_mark,
					   "duplicate header \"%s\" (names are case-insensitive)",
					   shown);
	}
	b->name_off[index] = b->lines_len;
	b->name_len[index] = (uint32_t)name_len;
	yaml_mark_t name_mark = ld->key_mark;
	if (!lines_put(b, ev_text(ld), name_len) || !lines_put(b, ": ", 2))
		return fail_head_size(ld, name_mark);
	int rc = loader_scalar(ld, "a header value", "a string");
	if (rc != 0)
		return rc;
	if (ev_len(ld) > POLICY_FAKE_HEADER_VALUE_BYTES_MAX)
		return loader_fail(ld, ld->ev.start_mark,
				   "the value of header \"%s\" is longer than %u bytes", shown,
				   POLICY_FAKE_HEADER_VALUE_BYTES_MAX);
	const char *why = header_value_invalid(ev_text(ld), ev_len(ld));
	if (why != NULL)
		return loader_fail(ld, ld->ev.start_mark, "the value of header \"%s\" %s", shown,
				   why);
	if (!lines_put(b, ev_text(ld), ev_len(ld)) || !lines_put(b, "\r\n", 2))
		return fail_head_size(ld, name_mark);
	b->header_count++;
	AN_ASSERT(b->header_count <= POLICY_FAKE_HEADERS_MAX);
	return 0;
}

static int parse_response_method(struct loader *ld, struct policy_response *resp)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(resp->method == NULL);
	int rc = loader_scalar(ld, "method", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	loader_show(s, len, shown);
	if (!loader_is_token(s, len) || len > POLICY_FAKE_METHOD_BYTES_MAX)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "invalid method \"%s\": an HTTP token of 1-%u bytes (\"GET\", \"POST\")", shown,
		    POLICY_FAKE_METHOD_BYTES_MAX);
	for (size_t i = 0; i < len; i++) {
		if (s[i] >= 'a' && s[i] <= 'z')
			return loader_fail(
			    ld, ld->ev.start_mark,
			    "method \"%s\" would never match: methods are case-sensitive "
			    "and sent in upper case (\"GET\")",
			    shown);
	}
	resp->method = pool_strndup(s, len);
	if (resp->method == NULL)
		return loader_fail_oom(ld);
	resp->method_len = (uint32_t)len;
	AN_ASSERT(resp->method_len > 0);
	return 0;
}

static int parse_response_path(struct loader *ld, struct policy_response *resp)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(resp->path == NULL);
	int rc = loader_scalar(ld, "path", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	if (len > POLICY_FAKE_PATH_BYTES_MAX)
		return loader_fail(ld, ld->ev.start_mark, "path is longer than %u bytes",
				   POLICY_FAKE_PATH_BYTES_MAX);
	const char *why = path_invalid(s, len);
	if (why != NULL)
		return loader_fail(ld, ld->ev.start_mark, "invalid path \"%s\": %s",
				   loader_show(s, len, shown), why);
	resp->prefix = s[len - 1] == '*';
	resp->path_len = (uint32_t)len - resp->prefix;
	resp->path = pool_strndup(s, resp->path_len);
	if (resp->path == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(resp->path_len >= 1);
	AN_ASSERT(resp->path[0] == '/');
	return 0;
}

static int parse_response_status(struct loader *ld, struct policy_response *resp)
{
	char shown[SHOW_BYTES];
	uint64_t v = 0;

	AN_ASSERT(resp->vr.status == 0);
	int rc = loader_scalar(ld, "status", "an integer");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	size_t sign = len > 1 && s[0] == '-' ? 1 : 0;
	loader_show(s, len, shown);
	if (ld->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
	    !loader_parse_decimal(s + sign, len - sign, &v))
		return loader_fail(ld, ld->ev.start_mark, "status must be an integer");
	if (len - sign > 1 && s[sign] == '0')
		return loader_fail(ld, ld->ev.start_mark, "status must not have leading zeros");
	if (sign == 0 && v >= 100 && v <= 199)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "status %s is refused: an interim (1xx) response cannot be canned", shown);
	if (sign != 0 || v < 200 || v > 599)
		return loader_fail(ld, ld->ev.start_mark, "status must be 200..599, got %s", shown);
	resp->vr.status = (uint16_t)v;
	AN_ASSERT(resp->vr.status >= 200 && resp->vr.status <= 599);
	return 0;
}

/* Counts a body of <len> bytes at <m> against the per-response and whole-file limits. */
static int body_account(struct loader *ld, const char *what, uint64_t len, yaml_mark_t m)
{
	AN_ASSERT(ld->fake_body_bytes <= POLICY_FAKE_BYTES_MAX);
	if (len > POLICY_FAKE_BODY_BYTES_MAX)
		return loader_fail(ld, m, "%s is larger than %u bytes", what,
				   POLICY_FAKE_BODY_BYTES_MAX);
	if (len > POLICY_FAKE_BYTES_MAX - ld->fake_body_bytes)
		return loader_fail(ld, m,
				   "the bodies of all responses together are larger than %u bytes",
				   POLICY_FAKE_BYTES_MAX);
	ld->fake_body_bytes += len;
	AN_ASSERT(ld->fake_body_bytes <= POLICY_FAKE_BYTES_MAX);
	return 0;
}

/* Takes <buf> (owned, <len> bytes) as the body of <resp>; an empty body is NULL. */
static void body_set(struct policy_response *resp, char *buf, size_t len)
{
	AN_ASSERT(resp->body == NULL);
	AN_ASSERT(len <= POLICY_FAKE_BODY_BYTES_MAX);
	if (len == 0)
		AN_FREE(&buf);
	resp->body = buf;
	resp->vr.body = buf;
	resp->vr.body_len = (uint32_t)len;
}

static int parse_response_body(struct loader *ld, struct policy_response *resp)
{
	AN_ASSERT(resp->body == NULL);
	int rc = loader_scalar(ld, "body", "a string");
	if (rc != 0)
		return rc;
	size_t len = ev_len(ld);
	rc = body_account(ld, "body", len, ld->ev.start_mark);
	if (rc != 0)
		return rc;
	/* Not pool_strndup: a body may hold NUL bytes ("\0" in a double-quoted scalar). */
	char *buf = pool_malloc(len + 1);
	if (buf == NULL)
		return loader_fail_oom(ld);
	memcpy(buf, ev_text(ld), len);
	buf[len] = '\0';
	body_set(resp, buf, len);
	AN_ASSERT(resp->vr.body_len == len);
	return 0;
}

/*
 * body_file: read once, here. O_NOFOLLOW refuses a symbolic link as the last
 * component: a body is served to agents, and a reviewer reading the policy
 * must see which file that is (a link beside the policy could point at a
 * key). O_NONBLOCK keeps a FIFO from hanging the load; fstat then refuses it.
 */
static int parse_response_body_file(struct loader *ld, struct policy_response *resp)
{
	char path[PATH_MAX];
	const char *call = NULL;
	char *buf = NULL;
	size_t len = 0;

	AN_ASSERT(resp->body == NULL);
	int rc = loader_file_value(ld, "body_file", path, sizeof(path));
	if (rc != 0)
		return rc;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd == -1 && errno == ELOOP)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "body_file %s: a symbolic link is refused (name the file itself)", path);
	if (fd == -1)
		return loader_fail(ld, ld->ev.start_mark, "body_file %s: open: %s", path,
				   strerror(errno));
	rc = loader_file_load(fd, POLICY_FAKE_BODY_BYTES_MAX, &buf, &len, &call);
	close(fd);
	if (rc != 0)
		return loader_fail_file_load(ld, "body_file", path, rc, call,
					     POLICY_FAKE_BODY_BYTES_MAX);
	rc = body_account(ld, "body_file", len, ld->ev.start_mark);
	if (rc != 0) {
		pool_free(buf);
		return rc;
	}
	body_set(resp, buf, len);
	AN_ASSERT(resp->vr.body_len == len);
	return 0;
}

enum { RSP_METHOD, RSP_PATH, RSP_STATUS, RSP_HEADERS, RSP_BODY, RSP_BODY_FILE, RSP__COUNT };
static const char *const response_keys[] = {
	[RSP_METHOD] = "method",   [RSP_PATH] = "path", [RSP_STATUS] = "status",
	[RSP_HEADERS] = "headers", [RSP_BODY] = "body", [RSP_BODY_FILE] = "body_file",
};
static_assert(AN_ARRAY_LEN(response_keys) == RSP__COUNT, "every response key needs a name");
static const struct keyset response_keyset = { "a response", response_keys, RSP__COUNT };
#define RSP_BODIES ((1u << RSP_BODY) | (1u << RSP_BODY_FILE))

static int response_value(struct loader *ld, struct response_build *b, uint32_t key)
{
	AN_ASSERT(key < RSP__COUNT);
	AN_ASSERT(b->seen & (1u << key));
	switch (key) {
	case RSP_METHOD:
		return parse_response_method(ld, b->resp);
	case RSP_PATH:
		return parse_response_path(ld, b->resp);
	case RSP_STATUS:
		return parse_response_status(ld, b->resp);
	case RSP_HEADERS:
		b->headers = ld->key_mark;
		return loader_map(ld, "headers", POLICY_FAKE_HEADERS_MAX, header_item, b);
	case RSP_BODY:
	case RSP_BODY_FILE:
		b->body = ld->key_mark;
		if ((b->seen & RSP_BODIES) == RSP_BODIES)
			return loader_fail(ld, ld->key_mark,
					   "body and body_file exclude each other");
		return key == RSP_BODY ? parse_response_body(ld, b->resp)
				       : parse_response_body_file(ld, b->resp);
	default:
		(void)AN_NEVER(true);
		return -EINVAL;
	}
}

/* Whole-response checks, then the head: the status line and the header lines. */
static int response_finish(struct loader *ld, struct response_build *b)
{
	struct policy_response *resp = b->resp;
	char status_line[64];

	int rc = loader_check_mandatory(ld, &response_keyset, 1u << RSP_STATUS, b->seen, b->start);
	if (rc != 0)
		return rc;
	uint16_t status = resp->vr.status;
	/* RFC 9110 sections 15.3.5, 15.3.6 and 15.4.5: these never carry content. */
	if ((b->seen & RSP_BODIES) && (status == 204 || status == 205 || status == 304))
		return loader_fail(ld, b->body, "status %u has no body: remove %s", status,
				   (b->seen & (1u << RSP_BODY)) ? "body" : "body_file");
	int n = snprintf(status_line, sizeof(status_line), "HTTP/1.1 %u %s\r\n", status,
			 status_phrase(status));
	AN_ASSERT(n > 0);
	AN_ASSERT((size_t)n < sizeof(status_line));
	size_t head_len = (size_t)n + b->lines_len;
	if (head_len > POLICY_FAKE_HEAD_BYTES_MAX)
		return fail_head_size(ld, b->headers);
	resp->head = pool_malloc(head_len + 1);
	if (resp->head == NULL)
		return loader_fail_oom(ld);
	memcpy(resp->head, status_line, (size_t)n);
	memcpy(resp->head + n, b->lines, b->lines_len);
	resp->head[head_len] = '\0';
	resp->vr.head = resp->head;
	resp->vr.head_len = (uint32_t)head_len;
	AN_ASSERT(resp->vr.body != NULL || resp->vr.body_len == 0);
	return 0;
}

bool loader_response_is_default(const struct policy_response *r)
{
	return r->method == NULL && r->path == NULL;
}

/* True when every request <later> would answer is answered by <earlier> first. */
static bool response_covers(const struct policy_response *earlier,
			    const struct policy_response *later)
{
	AN_ASSERT(earlier != later);
	bool method = earlier->method == NULL ||
		      (later->method != NULL && later->method_len == earlier->method_len &&
		       memcmp(later->method, earlier->method, later->method_len) == 0);
	if (!method || earlier->path == NULL)
		return method;
	if (later->path == NULL || later->path_len < earlier->path_len)
		return false;
	if (!earlier->prefix && (later->prefix || later->path_len != earlier->path_len))
		return false;
	AN_ASSERT(earlier->path_len > 0);
	return memcmp(later->path, earlier->path, earlier->path_len) == 0;
}

/* A rule's responses while they are read. */
struct responses_ctx {
	struct policy_fake *fake;
	yaml_mark_t last; /* where the last entry read starts */
};

static int response_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct responses_ctx *rctx = ctx;
	struct policy_fake *f = rctx->fake;
	struct response_build b;
	uint32_t key = 0;

	AN_ASSERT(index < POLICY_FAKE_RESPONSES_MAX);
	AN_ASSERT(index == f->count);
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "a response");
	if (rc != 0)
		return rc;
	memset(&b, 0, offsetof(struct response_build, lines));
	b.resp = &f->responses[index];
	b.start = ld->ev.start_mark;
	b.headers = b.start;
	f->count = index + 1; /* from here on, policy_free releases what the entry holds */
	b.resp->line = loader_mark_u32(b.start.line);
	if (index > 0 && loader_response_is_default(&f->responses[index - 1]))
		return loader_fail(
		    ld, b.start,
		    "no response may follow the default (the entry without method and "
		    "path, line %u): it answers every request",
		    f->responses[index - 1].line);
	while ((rc = loader_key(ld, &response_keyset, &b.seen, &key)) > 0) {
		rc = response_value(ld, &b, key);
		if (rc != 0)
			return rc;
	}
	if (rc == 0)
		rc = response_finish(ld, &b);
	for (uint32_t i = 0; i < index && rc == 0; i++) {
		if (response_covers(&f->responses[i], b.resp))
			return loader_fail(
			    ld, b.start,
			    "this response is never chosen: the one at line %u matches "
			    "every request it would, and the first match wins",
			    f->responses[i].line);
	}
	rctx->last = b.start;
	return rc;
}

/* A fake rule's `responses`: 1..POLICY_FAKE_RESPONSES_MAX entries, the last one the default. */
int loader_responses(struct loader *ld, const struct acl_rule *r)
{
	struct policy *p = ld->p;

	AN_ASSERT(p->fake_count == 0 || p->fakes[p->fake_count - 1].rule_index < r->index);
	struct policy_fake *fakes =
	    loader_grow_array(p->fakes, &p->fake_cap, p->fake_count, sizeof(*fakes));
	if (fakes == NULL)
		return loader_fail_oom(ld);
	p->fakes = fakes;
	struct policy_fake *f = &p->fakes[p->fake_count++];
	f->rule_index = r->index;
	f->responses = pool_calloc(POLICY_FAKE_RESPONSES_MAX, sizeof(*f->responses));
	if (f->responses == NULL)
		return loader_fail_oom(ld);
	struct responses_ctx ctx = { .fake = f };
	int rc = loader_seq(ld, "responses", POLICY_FAKE_RESPONSES_MAX, true, response_item, &ctx);
	if (rc != 0)
		return rc;
	if (!loader_response_is_default(&f->responses[f->count - 1]))
		return loader_fail(
		    ld, ctx.last,
		    "the last response must be the default: an entry with neither method "
		    "nor path, for every other request");
	/* Shrinking cannot fail in practice; keep the larger block if it does. */
	struct policy_response *fit = pool_realloc(f->responses, f->count * sizeof(*fit));
	if (fit != NULL)
		f->responses = fit;
	AN_ASSERT(f->count >= 1 && f->count <= POLICY_FAKE_RESPONSES_MAX);
	return 0;
}

/* verdict.fake by rule index, once p->fakes no longer moves. */
int loader_index_fakes(struct loader *ld)
{
	struct policy *p = ld->p;

	AN_ASSERT(p->fake_by_rule == NULL);
	AN_ASSERT(p->fake_count <= p->rule_count);
	if (p->fake_count == 0)
		return 0;
	p->fake_by_rule = pool_calloc(p->rule_count, sizeof(*p->fake_by_rule));
	if (p->fake_by_rule == NULL)
		return loader_fail_oom(ld);
	for (uint32_t i = 0; i < p->fake_count; i++) {
		const struct policy_fake *f = &p->fakes[i];

		AN_ASSERT(f->rule_index < p->rule_count);
		AN_ASSERT(p->fake_by_rule[f->rule_index] == NULL);
		p->fake_by_rule[f->rule_index] = f;
	}
	return 0;
}

void loader_fake_free(struct policy_fake *f)
{
	AN_ASSERT(f->count <= POLICY_FAKE_RESPONSES_MAX);
	AN_ASSERT(f->responses != NULL || f->count == 0);
	for (uint32_t i = 0; i < f->count; i++) {
		struct policy_response *r = &f->responses[i];

		AN_FREE(&r->method);
		AN_FREE(&r->path);
		AN_FREE(&r->head);
		AN_FREE(&r->body);
	}
	AN_FREE(&f->responses);
	memset(f, 0, sizeof(*f));
}
