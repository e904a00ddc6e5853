/*
 * Unit tests for core/deny.c. The .c is included (its writers are static).
 *
 * Every response is taken apart by a strict HTTP/1.1 reader written here:
 * the status line, then header lines that must hold no control byte, each
 * name at most once, then the body, whose length must equal Content-Length.
 * The body goes to Python's json module (strict: one object, no duplicate
 * keys, no NaN), through a script written into a temporary file; it prints
 * each field as "key=value", strings as the hex of their decoded UTF-8, so
 * the assertions compare what a client decodes, not our spelling of it.
 * Without python3 the suite is skipped (exit 77). Output buffers end right
 * before a PROT_NONE page, so a write past <cap> crashes the test.
 */
#include "../../../core/deny.c"

#include <check.h>
#include <ctype.h>
#include <signal.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/audit.h"
#include "core/config.h"
#include "core/worker.h"
#include "policy/policy.h"
#include "tests/unit/unit.h"

static const char checker_py[] =
    "import json, sys\n"
    "def pairs(items):\n"
    "    keys = [k for k, _ in items]\n"
    "    if len(keys) != len(set(keys)):\n"
    "        raise ValueError('duplicate key')\n"
    "    return dict(items)\n"
    "def const(name):\n"
    "    raise ValueError(name)\n"
    "def show(v):\n"
    "    if v is None:\n"
    "        return 'null'\n"
    "    if isinstance(v, str):\n"
    "        return 's:' + v.encode('utf-8').hex()\n"
    "    if isinstance(v, int) and not isinstance(v, bool):\n"
    "        return 'n:%d' % v\n"
    "    raise ValueError('unexpected value ' + repr(v))\n"
    "raw = sys.stdin.buffer.read()\n"
    "if not raw.endswith(b'\\n'):\n"
    "    raise ValueError('body does not end with a newline')\n"
    "o = json.loads(raw.decode('utf-8'), object_pairs_hook=pairs, parse_constant=const)\n"
    "if not isinstance(o, dict):\n"
    "    raise ValueError('not an object')\n"
    "print('keys=' + ','.join(o.keys()))\n"
    "for k, v in o.items():\n"
    "    print(k + '=' + show(v))\n";

static char checker_path[64];
static char body_path[64];

#define AUDIT_ID "7609e7c7-0001000000000005"

/* ---- A strict reader for the response. ---- */

#define HDRS_MAX 32

struct header {
	char name[64];
	char value[4096];
};

struct response {
	unsigned status;
	char phrase[64];
	struct header h[HDRS_MAX];
	unsigned header_count;
	const char *body;
	size_t body_len;
};

static int is_token(char c)
{
	return isalnum((unsigned char)c) || c == '-';
}

/* Parses one header line [p, eol) into <h>. */
static void parse_header(const char *p, const char *eol, struct header *h)
{
	const char *colon = memchr(p, ':', (size_t)(eol - p));

	ck_assert_ptr_nonnull(colon);
	ck_assert_int_gt(colon - p, 0);
	ck_assert_int_lt(colon - p, (int)sizeof(h->name));
	for (const char *q = p; q < colon; q++)
		ck_assert_msg(is_token(*q), "bad header name byte 0x%02x", (unsigned char)*q);
	memcpy(h->name, p, (size_t)(colon - p));
	h->name[colon - p] = '\0';
	ck_assert_int_eq(colon[1], ' ');
	const char *v = colon + 2;
	ck_assert_int_lt(eol - v, (int)sizeof(h->value));
	for (const char *q = v; q < eol; q++) {
		unsigned char c = (unsigned char)*q;
		ck_assert_msg(c >= 0x20 && c != 0x7f, "control byte 0x%02x in %s", c, h->name);
	}
	memcpy(h->value, v, (size_t)(eol - v));
	h->value[eol - v] = '\0';
}

static const char *header_get(const struct response *r, const char *name)
{
	for (unsigned i = 0; i < r->header_count; i++) {
		if (strcasecmp(r->h[i].name, name) == 0)
			return r->h[i].value;
	}
	return NULL;
}

static void parse_response(const char *buf, size_t len, struct response *r)
{
	const char *end = buf + len;

	memset(r, 0, sizeof(*r));
	ck_assert_int_ge(len, 17);
	ck_assert_mem_eq(buf, "HTTP/1.1 ", 9);
	ck_assert_msg(isdigit((unsigned char)buf[9]) && isdigit((unsigned char)buf[10]) &&
			  isdigit((unsigned char)buf[11]) && buf[12] == ' ',
		      "bad status line");
	r->status = (unsigned)((buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0'));
	const char *eol = memmem(buf, len, "\r\n", 2);
	ck_assert_ptr_nonnull(eol);
	ck_assert_int_lt(eol - (buf + 13), (int)sizeof(r->phrase));
	memcpy(r->phrase, buf + 13, (size_t)(eol - (buf + 13)));
	const char *p = eol + 2;
	for (;;) {
		eol = memmem(p, (size_t)(end - p), "\r\n", 2);
		ck_assert_ptr_nonnull(eol);
		/* No bare CR or LF inside the head. */
		ck_assert_ptr_null(memchr(p, '\n', (size_t)(eol - p)));
		ck_assert_ptr_null(memchr(p, '\r', (size_t)(eol - p)));
		if (eol == p)
			break;
		ck_assert_uint_lt(r->header_count, HDRS_MAX);
		struct header *h = &r->h[r->header_count];
		parse_header(p, eol, h);
		ck_assert_msg(header_get(r, h->name) == NULL, "header %s twice", h->name);
		r->header_count++;
		p = eol + 2;
	}
	r->body = eol + 2;
	r->body_len = (size_t)(end - r->body);
	const char *cl = header_get(r, "Content-Length");
	ck_assert_ptr_nonnull(cl);
	char *cl_end;
	unsigned long n = strtoul(cl, &cl_end, 10);
	ck_assert_int_eq(*cl_end, '\0');
	ck_assert_uint_eq(n, r->body_len);
}

/* ---- The JSON body, decoded by Python. ---- */

struct json_dump {
	char text[32768];
};

static void decode_body(const struct response *r, struct json_dump *j)
{
	char cmd[256];

	FILE *f = fopen(body_path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(r->body, 1, r->body_len, f), r->body_len);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(cmd, sizeof(cmd), "python3 %s < %s", checker_path, body_path);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(j->text, 1, sizeof(j->text) - 1, f);
	j->text[n] = '\0';
	int status = pclose(f);
	ck_assert_msg(status == 0, "invalid JSON body (status %d): %.*s", status, (int)r->body_len,
		      r->body);
}

static void json_expect(const struct json_dump *j, const char *key, const char *want)
{
	char pat[64];
	size_t plen = (size_t)snprintf(pat, sizeof(pat), "%s=", key);

	for (const char *p = j->text; *p != '\0';) {
		const char *eol = strchr(p, '\n');
		ck_assert_ptr_nonnull(eol);
		if (strncmp(p, pat, plen) == 0) {
			size_t n = (size_t)(eol - p) - plen;
			ck_assert_msg(n == strlen(want) && memcmp(p + plen, want, n) == 0,
				      "%s: got \"%.*s\", want \"%s\"", key, (int)n, p + plen, want);
			return;
		}
		p = eol + 1;
	}
	ck_abort_msg("%s missing from the body: %s", key, j->text);
}

/* The checker's spelling of a JSON string that holds <len> bytes, each as its own code point. */
static const char *sx(const void *bytes, size_t len, char *buf, size_t cap)
{
	static const char hx[] = "0123456789abcdef";
	const unsigned char *b = bytes;
	size_t o = 2;

	memcpy(buf, "s:", 2);
	for (size_t i = 0; i < len; i++) {
		unsigned char u[2] = { b[i], 0 };
		size_t un = 1;
		if (b[i] >= 0x80) {
			u[0] = (unsigned char)(0xc0 | (b[i] >> 6));
			u[1] = (unsigned char)(0x80 | (b[i] & 0x3f));
			un = 2;
		}
		for (size_t k = 0; k < un; k++) {
			ck_assert_uint_lt(o + 2, cap);
			buf[o++] = hx[u[k] >> 4];
			buf[o++] = hx[u[k] & 15];
		}
	}
	buf[o] = '\0';
	return buf;
}

static const char *sxs(const char *s, char *buf, size_t cap)
{
	return sx(s, strlen(s), buf, cap);
}

/* ---- Formatting into guarded buffers. ---- */

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

struct guarded {
	unsigned char *map;
	size_t map_len;
};

/* A buffer of <cap> bytes that ends right before a PROT_NONE page. */
static char *guarded_buf(struct guarded *g, size_t cap)
{
	size_t page = page_size();
	size_t pages = (cap + page - 1) / page + 1;

	g->map_len = pages * page;
	g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(g->map, MAP_FAILED);
	ck_assert_int_eq(mprotect(g->map + g->map_len - page, page, PROT_NONE), 0);
	return (char *)g->map + g->map_len - page - cap;
}

static void guarded_free(struct guarded *g)
{
	ck_assert_int_eq(munmap(g->map, g->map_len), 0);
}

static char out_big[65536];

/* Formats <d> into a large buffer; returns the length (asserted positive). */
static size_t format_big(const struct deny_info *d)
{
	ssize_t n = deny_format(d, out_big, sizeof(out_big));

	ck_assert_int_gt(n, 0);
	ck_assert_int_lt(n, (ssize_t)sizeof(out_big));
	return (size_t)n;
}

static struct deny_info base_info(enum reason r)
{
	return (struct deny_info){
		.reason = r,
		.host = "example.com",
		.host_len = 11,
		.port = 443,
		.sandbox = "agent-1",
		.audit_id = AUDIT_ID,
	};
}

/* ---- Tests. ---- */

START_TEST(test_every_reason)
{
	struct response r;
	struct json_dump j;
	char want[1024], tmp[64];

	for (unsigned i = REASON_NONE + 1; i < REASON__COUNT; i++) {
		struct deny_info d = base_info((enum reason)i);
		size_t n = format_big(&d);
		parse_response(out_big, n, &r);
		ck_assert_uint_eq(r.status, reason_status(d.reason));
		ck_assert_str_eq(r.phrase, reason_phrase(r.status));
		ck_assert_str_ne(r.phrase, "Error");
		ck_assert_str_eq(header_get(&r, "X-Agent-Reason"), reason_code(d.reason));
		ck_assert_str_eq(header_get(&r, "X-Agent-Instruction"),
				 reason_instruction(d.reason));
		ck_assert_ptr_null(header_get(&r, "X-Agent-Rule"));
		ck_assert_str_eq(header_get(&r, "X-Agent-Audit-Id"), AUDIT_ID);
		ck_assert_ptr_null(header_get(&r, "Retry-After"));
		ck_assert_str_eq(header_get(&r, "Connection"), "close");
		ck_assert_str_eq(header_get(&r, "Content-Type"), "application/json");
		ck_assert_str_eq(header_get(&r, "Cache-Control"), "no-store");
		ck_assert_uint_eq(r.header_count, 7);

		decode_body(&r, &j);
		json_expect(&j, "keys",
			    "reason,status,instruction,host,port,sandbox,rule,audit_id");
		json_expect(&j, "reason", sxs(reason_code(d.reason), want, sizeof(want)));
		snprintf(tmp, sizeof(tmp), "n:%u", reason_status(d.reason));
		json_expect(&j, "status", tmp);
		json_expect(&j, "instruction",
			    sxs(reason_instruction(d.reason), want, sizeof(want)));
		json_expect(&j, "host", sxs("example.com", want, sizeof(want)));
		json_expect(&j, "port", "n:443");
		json_expect(&j, "sandbox", sxs("agent-1", want, sizeof(want)));
		json_expect(&j, "rule", "null");
		json_expect(&j, "audit_id", sxs(AUDIT_ID, want, sizeof(want)));
	}
}
END_TEST

START_TEST(test_rule_retry_instruction)
{
	struct response r;
	struct json_dump j;
	char want[256];

	struct deny_info d = base_info(REASON_OVERLOADED);
	d.rule = "github-ro";
	d.retry_after_s = 7;
	d.instruction = "Ask the operator for more connections.";
	d.port = 65535;
	size_t n = format_big(&d);
	parse_response(out_big, n, &r);
	ck_assert_uint_eq(r.status, 503);
	ck_assert_str_eq(header_get(&r, "X-Agent-Rule"), "github-ro");
	ck_assert_str_eq(header_get(&r, "Retry-After"), "7");
	ck_assert_str_eq(header_get(&r, "X-Agent-Instruction"), d.instruction);
	ck_assert_uint_eq(r.header_count, 9);
	decode_body(&r, &j);
	json_expect(&j, "rule", sxs("github-ro", want, sizeof(want)));
	json_expect(&j, "instruction", sxs(d.instruction, want, sizeof(want)));
	json_expect(&j, "port", "n:65535");

	/* The largest Retry-After and port 0. */
	d.retry_after_s = UINT32_MAX;
	d.port = 0;
	n = format_big(&d);
	parse_response(out_big, n, &r);
	ck_assert_str_eq(header_get(&r, "Retry-After"), "4294967295");
	decode_body(&r, &j);
	json_expect(&j, "port", "n:0");
}
END_TEST

/* private_address names the refused address and its class after the port; both or neither. */
START_TEST(test_address)
{
	struct response r;
	struct json_dump j;
	char want[256];

	struct deny_info d = base_info(REASON_PRIVATE_ADDRESS);
	d.address = "fd00:ec2::254";
	d.address_class = "metadata";
	size_t n = format_big(&d);
	parse_response(out_big, n, &r);
	ck_assert_uint_eq(r.status, 403);
	decode_body(&r, &j);
	json_expect(
	    &j, "keys",
	    "reason,status,instruction,host,port,address,address_class,sandbox,rule,audit_id");
	json_expect(&j, "address", sxs("fd00:ec2::254", want, sizeof(want)));
	json_expect(&j, "address_class", sxs("metadata", want, sizeof(want)));

	d.address_class = NULL; /* half a pair is none */
	n = format_big(&d);
	parse_response(out_big, n, &r);
	decode_body(&r, &j);
	json_expect(&j, "keys", "reason,status,instruction,host,port,sandbox,rule,audit_id");
}
END_TEST

/* A limit's 429 on a connection kept for the next request says so; nothing else changes. */
/* The private_address refusal's words, the engine's and `agentsnet check --resolve`'s. */
START_TEST(test_private_address_text)
{
	char detail[128];
	char instruction[320];

	deny_private_address_text("inside.test:ignored", 11, "10.0.0.5", "private", detail,
				  sizeof(detail), instruction, sizeof(instruction));
	ck_assert_str_eq(detail, "address 10.0.0.5 class private");
	ck_assert_str_eq(instruction,
			 "inside.test resolved to 10.0.0.5, a private address, which this sandbox "
			 "may not reach; if it should, the operator adds it to "
			 "resolver.allow_private. Do not retry.");
	/* Cut to the buffers, never past them. */
	deny_private_address_text("h", 1, "fd00::1", "ula", detail, 8, instruction, 8);
	ck_assert_str_eq(detail, "address");
	ck_assert_str_eq(instruction, "h resol");
}
END_TEST

/* Refused before any resolution: a credential in clear, a terminated tier with no CA. */
START_TEST(test_mode_refusal)
{
	static const struct {
		enum tier tier;
		bool is_connect;
		bool has_ca;
		enum reason want;
	} cases[] = {
		{ TIER_INJECT, true, true, REASON_NONE },
		{ TIER_INJECT, false, true, REASON_TIER_UNAVAILABLE },
		{ TIER_INJECT, true, false, REASON_TIER_UNAVAILABLE },
		{ TIER_FAKE, true, false, REASON_TIER_UNAVAILABLE },
		{ TIER_FAKE, false, false, REASON_NONE }, /* plain http: answered in clear */
		{ TIER_FAKE, true, true, REASON_NONE },
		{ TIER_PASSTHROUGH, true, false, REASON_NONE },
		{ TIER_LOCAL, false, false, REASON_NONE },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		struct verdict v = { .tier = cases[i].tier };
		ck_assert_msg(verdict_mode_refusal(&v, cases[i].is_connect, cases[i].has_ca) ==
				  cases[i].want,
			      "case %zu", i);
	}
}
END_TEST

START_TEST(test_keep_alive)
{
	struct response r;
	struct response closed;

	struct deny_info d = base_info(REASON_RATE_LIMITED);
	d.retry_after_s = 2;
	size_t n = format_big(&d);
	parse_response(out_big, n, &closed);
	ck_assert_str_eq(header_get(&closed, "Connection"), "close");
	d.keep_alive = true;
	n = format_big(&d);
	parse_response(out_big, n, &r);
	ck_assert_uint_eq(r.status, 429);
	ck_assert_str_eq(header_get(&r, "Connection"), "keep-alive");
	ck_assert_str_eq(header_get(&r, "Retry-After"), "2");
	ck_assert_uint_eq(r.header_count, closed.header_count);
	ck_assert_uint_eq(r.body_len, closed.body_len);
}
END_TEST

/* Unknown facts are JSON null, and a missing audit id sends no header. */
START_TEST(test_nulls)
{
	struct response r;
	struct json_dump j;

	struct deny_info d = { .reason = REASON_BAD_REQUEST };
	size_t n = format_big(&d);
	parse_response(out_big, n, &r);
	ck_assert_uint_eq(r.status, 400);
	ck_assert_ptr_null(header_get(&r, "X-Agent-Audit-Id"));
	ck_assert_ptr_null(header_get(&r, "X-Agent-Rule"));
	decode_body(&r, &j);
	json_expect(&j, "keys", "reason,status,instruction,host,port,sandbox,rule,audit_id");
	json_expect(&j, "host", "null");
	json_expect(&j, "sandbox", "null");
	json_expect(&j, "rule", "null");
	json_expect(&j, "audit_id", "null");
	json_expect(&j, "port", "n:0");
}
END_TEST

START_TEST(test_host_escaped)
{
	struct response r;
	struct json_dump j;
	unsigned char host[300];
	char want[4096];
	size_t len = 0;

	/* Quote, backslash, every control byte (NUL included), DEL, 0x80 and up. */
	memcpy(host, "a\"b\\c/", 6);
	len = 6;
	for (unsigned c = 0; c < 0x20; c++)
		host[len++] = (unsigned char)c;
	host[len++] = 0x7f;
	for (unsigned c = 0x80; c <= 0xff; c += 0x11)
		host[len++] = (unsigned char)c;
	host[len++] = 0xc3; /* UTF-8 for U+00E9, shown byte by byte */
	host[len++] = 0xa9;
	memcpy(host + len, "z", 1);
	len++;

	struct deny_info d = base_info(REASON_HOST_NOT_ALLOWED);
	d.host = (const char *)host;
	d.host_len = len;
	size_t n = format_big(&d);
	parse_response(out_big, n, &r);
	/* The body is plain printable ASCII: nothing raw got through. */
	for (size_t i = 0; i + 1 < r.body_len; i++) {
		unsigned char c = (unsigned char)r.body[i];
		ck_assert_msg(c >= 0x20 && c < 0x7f, "raw byte 0x%02x at %zu", c, i);
	}
	ck_assert_int_eq(r.body[r.body_len - 1], '\n');
	decode_body(&r, &j);
	json_expect(&j, "host", sx(host, len, want, sizeof(want)));

	/* host_len, not a NUL, ends the host. */
	d.host = "exa\0mple.com-and-more";
	d.host_len = 11;
	n = format_big(&d);
	parse_response(out_big, n, &r);
	decode_body(&r, &j);
	json_expect(&j, "host", sx("exa\0mple.com", 11, want, sizeof(want)));
}
END_TEST

/* CR/LF in a header value never splits the header block. */
START_TEST(test_header_injection)
{
	struct response r;
	struct json_dump j;
	char want[1024];

	struct deny_info d = base_info(REASON_HOST_NOT_ALLOWED);
	d.rule = "r1";
	size_t n = format_big(&d);
	parse_response(out_big, n, &r);
	unsigned baseline = r.header_count;

	d.instruction = "line one\r\nX-Evil: 1\r\n\r\n<html>\tend\x7f";
	d.rule = "r1\nSet-Cookie: a=b";
	d.audit_id = "id\r\nX-Other: 2";
	n = format_big(&d);
	parse_response(out_big, n, &r);
	ck_assert_uint_eq(r.header_count, baseline);
	ck_assert_ptr_null(header_get(&r, "X-Evil"));
	ck_assert_ptr_null(header_get(&r, "Set-Cookie"));
	ck_assert_ptr_null(header_get(&r, "X-Other"));
	ck_assert_str_eq(header_get(&r, "X-Agent-Instruction"),
			 "line one  X-Evil: 1    <html> end ");
	ck_assert_str_eq(header_get(&r, "X-Agent-Rule"), "r1 Set-Cookie: a=b");
	ck_assert_str_eq(header_get(&r, "X-Agent-Audit-Id"), "id  X-Other: 2");
	/* The body keeps the original text, escaped. */
	decode_body(&r, &j);
	json_expect(&j, "instruction", sxs(d.instruction, want, sizeof(want)));
	json_expect(&j, "rule", sxs(d.rule, want, sizeof(want)));
	json_expect(&j, "audit_id", sxs(d.audit_id, want, sizeof(want)));
}
END_TEST

START_TEST(test_default_instruction)
{
	struct response r;
	struct json_dump j;
	char want[1024];

	struct deny_info d = base_info(REASON_PORT_NOT_ALLOWED);
	d.instruction = NULL;
	size_t n = format_big(&d);
	parse_response(out_big, n, &r);
	ck_assert_str_eq(header_get(&r, "X-Agent-Instruction"),
			 reason_instruction(REASON_PORT_NOT_ALLOWED));
	decode_body(&r, &j);
	json_expect(&j, "instruction",
		    sxs(reason_instruction(REASON_PORT_NOT_ALLOWED), want, sizeof(want)));

	/* A rule's instruction replaces the default everywhere. */
	d.instruction = "Use port 443.";
	n = format_big(&d);
	ck_assert_ptr_null(memmem(out_big, n, reason_instruction(REASON_PORT_NOT_ALLOWED),
				  strlen(reason_instruction(REASON_PORT_NOT_ALLOWED))));
}
END_TEST

/* The exact size fits; one byte less is -EMSGSIZE, with nothing written past <cap>. */
static void check_exact_fit(const struct deny_info *d)
{
	struct guarded g;
	size_t len = format_big(d);

	char *out = guarded_buf(&g, len);
	ck_assert_int_eq(deny_format(d, out, len), (ssize_t)len);
	ck_assert_mem_eq(out, out_big, len);
	guarded_free(&g);

	out = guarded_buf(&g, len - 1);
	ck_assert_int_eq(deny_format(d, out, len - 1), -EMSGSIZE);
	guarded_free(&g);

	/* Cut inside the body, inside the head, and at nothing at all. */
	static const size_t cuts[] = { 0, 1, 9, 100 };
	for (size_t i = 0; i < AN_ARRAY_LEN(cuts); i++) {
		out = guarded_buf(&g, cuts[i]);
		ck_assert_int_eq(deny_format(d, out, cuts[i]), -EMSGSIZE);
		guarded_free(&g);
	}
	out = guarded_buf(&g, len - 10);
	ck_assert_int_eq(deny_format(d, out, len - 10), -EMSGSIZE);
	guarded_free(&g);
}

START_TEST(test_exact_size)
{
	struct deny_info d = base_info(REASON_HOST_NOT_ALLOWED);
	check_exact_fit(&d);
	d.rule = "some-rule";
	d.retry_after_s = 1;
	check_exact_fit(&d);
	d = (struct deny_info){ .reason = REASON_BAD_REQUEST };
	check_exact_fit(&d);
}
END_TEST

/*
 * The largest refusal a real connection can carry: a host of LIMITS_HOST_BYTES_MAX
 * bytes that all need six-character escapes, a policy instruction of
 * POLICY_TEXT_BYTES_MAX bytes of UTF-8, and the longest rule, sandbox and audit ids.
 * It must format (into the worker's head buffer) and fit exactly as any other.
 */
START_TEST(test_largest)
{
	static char host[LIMITS_HOST_BYTES_MAX];
	static char instruction[POLICY_TEXT_BYTES_MAX + 1];
	static char rule[POLICY_RULE_ID_BYTES_MAX + 1];
	static char sandbox[CONFIG_SANDBOX_ID_BYTES_MAX];
	static char audit_id[AUDIT_ID_BYTES];
	struct response r;
	struct json_dump j;
	static char want[8192];

	memset(host, 0xff, sizeof(host));
	for (size_t i = 0; i + 1 < POLICY_TEXT_BYTES_MAX; i += 2) {
		instruction[i] = (char)0xc3;
		instruction[i + 1] = (char)0xa9;
	}
	memset(rule, 'r', sizeof(rule) - 1);
	memset(sandbox, 's', sizeof(sandbox) - 1);
	memset(audit_id, 'a', sizeof(audit_id) - 1);
	struct deny_info d = {
		.reason = REASON_OVERLOADED,
		.rule = rule,
		.instruction = instruction,
		.host = host,
		.host_len = sizeof(host),
		.port = 65535,
		.sandbox = sandbox,
		.audit_id = audit_id,
		.retry_after_s = UINT32_MAX,
	};
	ssize_t n = deny_format(&d, out_big, sizeof(out_big));
	ck_assert_int_gt(n, 0);
	ck_assert_int_le(n, (ssize_t)WORKER_HEAD_BUFFER_BYTES);
	parse_response(out_big, (size_t)n, &r);
	ck_assert_uint_eq(r.status, 503);
	ck_assert_uint_eq(strlen(header_get(&r, "X-Agent-Instruction")), POLICY_TEXT_BYTES_MAX);
	decode_body(&r, &j);
	json_expect(&j, "host", sx(host, sizeof(host), want, sizeof(want)));
	json_expect(&j, "rule", sxs(rule, want, sizeof(want)));
	json_expect(&j, "sandbox", sxs(sandbox, want, sizeof(want)));
	json_expect(&j, "audit_id", sxs(audit_id, want, sizeof(want)));
	check_exact_fit(&d);
}
END_TEST

START_TEST(test_none_aborts)
{
	struct deny_info d = base_info(REASON_NONE);
	(void)deny_format(&d, out_big, sizeof(out_big));
}
END_TEST

static void setup(void)
{
	int fd;

	snprintf(checker_path, sizeof(checker_path), "/tmp/an-deny-py-XXXXXX");
	fd = mkstemp(checker_path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, checker_py, sizeof(checker_py) - 1),
			 (ssize_t)sizeof(checker_py) - 1);
	close(fd);
	snprintf(body_path, sizeof(body_path), "/tmp/an-deny-body-XXXXXX");
	fd = mkstemp(body_path);
	ck_assert_int_ge(fd, 0);
	close(fd);
}

static void teardown(void)
{
	unlink(checker_path);
	unlink(body_path);
}

static Suite *deny_suite(void)
{
	Suite *s = suite_create("deny");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_every_reason);
	tcase_add_test(tc, test_rule_retry_instruction);
	tcase_add_test(tc, test_keep_alive);
	tcase_add_test(tc, test_address);
	tcase_add_test(tc, test_private_address_text);
	tcase_add_test(tc, test_mode_refusal);
	tcase_add_test(tc, test_nulls);
	tcase_add_test(tc, test_host_escaped);
	tcase_add_test(tc, test_header_injection);
	tcase_add_test(tc, test_default_instruction);
	tcase_add_test(tc, test_exact_size);
	tcase_add_test(tc, test_largest);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_none_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	if (!unit_can("python3 -c 'import json'", "python3 is needed to validate the JSON bodies"))
		return UNIT_SKIP;
	return unit_run(deny_suite());
}
