/*
 * policy/fake.c, the fake-response tier: a rule's `responses` (every
 * validation rule at its limit N and N+1, with the exact message), the
 * compiled heads byte for byte, body_file, first-match answers through
 * policy_verdict_ops.fake_response, and the embedded default policy's
 * answer.
 */
#include "../../../policy/fake.c"

#include <sys/stat.h>
#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup("/tmp/agentsnet-fake-XXXXXX");
}

/* Writes <len> bytes of <c> to <dir>/<name>; returns the path (static). */
static const char *write_file(const char *name, char c, size_t len)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	for (size_t i = 0; i < len; i++)
		ck_assert_int_ne(fputc(c, f), EOF);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

/*
 * One fake rule for a.test whose responses follow, from line 10; FLOW(x) is
 * one flow-style entry "      - {x}" (its first key at column 10).
 */
#define FHEAD                                                                             \
	"version: 1\nprofiles:\n  p:\n    rules:\n    - host: a.test\n      tier: fake\n" \
	"      owner: o\n      reason: r\n      responses:\n"
#define FLOW(entry) "      - {" entry "}\n"
#define DEFAULT     FLOW("status: 404")

/* The response a.test gives to <method> <path> (profile 0). */
static const struct verdict_response *answer(const char *method, const char *path)
{
	struct verdict v = decide(0, "a.test");

	ck_assert_int_eq(v.tier, TIER_FAKE);
	ck_assert_ptr_nonnull(v.fake);
	const struct verdict_response *r = policy_verdict_ops.fake_response(
	    pol, v.fake, method, strlen(method), path, strlen(path));
	ck_assert_ptr_nonnull(r);
	return r;
}

static void expect_head(const struct verdict_response *r, const char *head)
{
	ck_assert_str_eq(r->head, head);
	ck_assert_uint_eq(r->head_len, strlen(head));
	ck_assert_uint_eq(strlen(r->head), r->head_len);
}

static void expect_body(const struct verdict_response *r, const char *body, size_t len)
{
	ck_assert_uint_eq(r->body_len, len);
	if (len == 0) {
		ck_assert_ptr_null(r->body);
		return;
	}
	ck_assert_ptr_nonnull(r->body);
	ck_assert_mem_eq(r->body, body, len);
}

/* --- the schema ------------------------------------------------------------------------ */

START_TEST(test_tier_needs_responses)
{
	expect_error(
	    "version: 1\nprofiles:\n  p:\n    rules:\n    - host: a.test\n      tier: fake\n"
	    "      owner: o\n      reason: r\n",
	    "t.yaml:6:13: tier fake needs responses (the canned answers, the last one a default "
	    "without method and path)");
	static const char *const others[] = { "passthrough", "inject", "deny" };
	for (size_t i = 0; i < AN_ARRAY_LEN(others); i++) {
		expect_error(textf("version: 1\nprofiles:\n  p:\n    rules:\n    - host: a.test\n"
				   "      tier: %s\n      owner: o\n      reason: r\n"
				   "      responses: [{status: 200}]\n",
				   others[i]),
			     "t.yaml:9:7: responses is only allowed with tier fake");
	}
	expect_error("version: 1\nprofiles:\n  p:\n    rules:\n    - host: a.test\n"
		     "      responses: [{status: 200}]\n      tier: local\n"
		     "      upstream: \"127.0.0.1:1\"\n      owner: o\n      reason: r\n",
		     "t.yaml:6:7: responses is only allowed with tier fake");
	expect_error(FHEAD, "t.yaml:9:17: responses must be a sequence");
	expect_error(FHEAD "      - 200\n", "t.yaml:10:9: a response must be a mapping");
	expect_error(FHEAD "        []\n", "t.yaml:10:9: responses must not be empty");
	expect_error(FHEAD FLOW("status: 200, code: 1"),
		     "t.yaml:10:23: unknown key \"code\" in a response (expected one of: method, "
		     "path, status, headers, body, body_file)");
	expect_error(FHEAD FLOW("status: 200, status: 201"),
		     "t.yaml:10:23: duplicate key \"status\" in a response");
	expect_error(FHEAD FLOW("body: x"),
		     "t.yaml:10:9: missing mandatory key \"status\" in a response");
	expect_error(FHEAD DEFAULT "      responses: []\n",
		     "t.yaml:11:7: duplicate key \"responses\" in a rule");
	/* A fake rule may list ports and limits like any served rule. */
	expect_ok(FHEAD DEFAULT "      ports: [443]\n      limits: {concurrent: 2}\n");
	ck_assert_uint_eq(decide(0, "a.test").rule_limits.concurrent, 2);
}
END_TEST

START_TEST(test_responses_limit)
{
	struct gen g;

	/* 64 entries (63 and the default) accepted, 65 refused at the 65th. */
	gen_open(&g);
	fprintf(g.f, FHEAD);
	for (int i = 0; i < 63; i++)
		fprintf(g.f, FLOW("path: /p%d, status: 200"), i);
	long before_default = ftell(g.f);
	fprintf(g.f, DEFAULT);
	fflush(g.f);
	expect_ok(g.buf);
	ck_assert_uint_eq(answer("GET", "/p62")->status, 200);
	ck_assert_uint_eq(answer("GET", "/p63")->status, 404);
	fseek(g.f, before_default, SEEK_SET);
	fprintf(g.f, FLOW("path: /p63, status: 200") DEFAULT);
	expect_error(gen_close(&g), "t.yaml:74:9: responses has more than 64 entries");
	free(g.buf);
}
END_TEST

START_TEST(test_default_entry)
{
	/* One entry: it must be the default. */
	expect_ok(FHEAD FLOW("status: 200"));
	ck_assert_uint_eq(answer("DELETE", "/anything")->status, 200);
	expect_error(FHEAD FLOW("method: GET, status: 200"),
		     "t.yaml:10:9: the last response must be the default: an entry with neither "
		     "method nor path, for every other request");
	expect_error(FHEAD FLOW("path: /, status: 200"),
		     "t.yaml:10:9: the last response must be the default");
	expect_error(FHEAD DEFAULT FLOW("path: /, status: 200") FLOW("path: /b, status: 200"),
		     "t.yaml:11:9: no response may follow the default (the entry without method "
		     "and path, line 10): it answers every request");
	/* Two defaults: the second follows the first. */
	expect_error(FHEAD DEFAULT DEFAULT, "t.yaml:11:9: no response may follow the default");
	expect_error(FHEAD FLOW("path: /a, status: 200") DEFAULT FLOW("method: GET, status: 200"),
		     "t.yaml:12:9: no response may follow the default (the entry without method "
		     "and path, line 11)");
}
END_TEST

START_TEST(test_unreachable_entry)
{
	expect_error(FHEAD FLOW("method: GET, path: /a, status: 200")
			 FLOW("method: GET, path: /a, status: 201") DEFAULT,
		     "t.yaml:11:9: this response is never chosen: the one at line 10 matches "
		     "every request it would, and the first match wins");
	expect_error(FHEAD FLOW("path: /a, status: 200") FLOW("method: GET, path: /a, status: 201")
			 DEFAULT,
		     "t.yaml:11:9: this response is never chosen: the one at line 10");
	expect_error(FHEAD FLOW("path: \"/v1/*\", status: 200")
			 FLOW("method: POST, path: /v1/x, status: 201") DEFAULT,
		     "t.yaml:11:9: this response is never chosen: the one at line 10");
	expect_error(FHEAD FLOW("path: \"/v1/*\", status: 200")
			 FLOW("path: \"/v1/x/*\", status: 201") DEFAULT,
		     "t.yaml:11:9: this response is never chosen: the one at line 10");
	expect_error(FHEAD FLOW("method: GET, status: 200")
			 FLOW("method: GET, path: /, status: 201") DEFAULT,
		     "t.yaml:11:9: this response is never chosen: the one at line 10");
	/* Narrower first is fine, in every dimension. */
	expect_ok(FHEAD FLOW("method: GET, path: /a, status: 200") FLOW("path: /a, status: 201")
		      FLOW("method: GET, path: /b, status: 202") FLOW("method: POST, path: /b, "
								      "status: 203")
			  FLOW("path: /v1/x, status: 204") FLOW("path: \"/v1/*\", status: 205")
			      FLOW("path: \"/v1*\", status: 206") FLOW("path: /v2, status: 207")
				  FLOW("path: \"/v2/*\", status: 208")
				      FLOW("method: GET, status: 209") DEFAULT);
	ck_assert_uint_eq(answer("GET", "/a")->status, 200);
	ck_assert_uint_eq(answer("PUT", "/a")->status, 201);
	ck_assert_uint_eq(answer("GET", "/b")->status, 202);
	ck_assert_uint_eq(answer("POST", "/b")->status, 203);
	ck_assert_uint_eq(answer("PUT", "/b")->status, 404);
	ck_assert_uint_eq(answer("GET", "/v1/x")->status, 204);
	ck_assert_uint_eq(answer("GET", "/v1/xy")->status, 205);
	ck_assert_uint_eq(answer("GET", "/v1")->status, 206);
	ck_assert_uint_eq(answer("GET", "/v1x")->status, 206);
	ck_assert_uint_eq(answer("GET", "/v2")->status, 207);
	ck_assert_uint_eq(answer("GET", "/v2/")->status, 208);
	ck_assert_uint_eq(answer("GET", "/v3")->status, 209);
	ck_assert_uint_eq(answer("HEAD", "/v3")->status, 209); /* GET answers HEAD */
	ck_assert_uint_eq(answer("PUT", "/v3")->status, 404);
}
END_TEST

START_TEST(test_method)
{
	expect_ok(FHEAD FLOW("method: M-SEARCH, status: 200") FLOW("method: \"!#$%&'*+.^_`|~9\", "
								   "status: 201") DEFAULT);
	ck_assert_uint_eq(answer("M-SEARCH", "/")->status, 200);
	ck_assert_uint_eq(answer("!#$%&'*+.^_`|~9", "/")->status, 201);
	expect_error(FHEAD FLOW("method: get, status: 200") DEFAULT,
		     "t.yaml:10:18: method \"get\" would never match: methods are case-sensitive "
		     "and sent in upper case (\"GET\")");
	expect_error(FHEAD FLOW("method: \"G T\", status: 200") DEFAULT,
		     "t.yaml:10:18: invalid method \"G T\": an HTTP token of 1-32 bytes (\"GET\", "
		     "\"POST\")");
	expect_error(FHEAD FLOW("method: \"\", status: 200") DEFAULT,
		     "t.yaml:10:18: invalid method \"\"");
	expect_error(FHEAD FLOW("method: \"GET/\", status: 200") DEFAULT,
		     "t.yaml:10:18: invalid method \"GET/\"");
	expect_error(FHEAD FLOW("method: [GET], status: 200") DEFAULT,
		     "t.yaml:10:18: method must be a string");
	/* Length: 32 bytes accepted, 33 refused. */
	char *m = repeat('M', POLICY_FAKE_METHOD_BYTES_MAX + 1);
	m[POLICY_FAKE_METHOD_BYTES_MAX] = '\0';
	expect_ok(textf(FHEAD FLOW("method: %s, status: 200") DEFAULT, m));
	ck_assert_uint_eq(answer(m, "/")->status, 200);
	m[POLICY_FAKE_METHOD_BYTES_MAX] = 'M';
	expect_error(textf(FHEAD FLOW("method: %s, status: 200") DEFAULT, m),
		     "t.yaml:10:18: invalid method \"MMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMM\"");
	free(m);
}
END_TEST

START_TEST(test_path)
{
	expect_ok(FHEAD FLOW("path: \"/a-._~!$&'()+,;=:@/%2F\", status: 200") DEFAULT);
	ck_assert_uint_eq(answer("GET", "/a-._~!$&'()+,;=:@/%2F")->status, 200);
	ck_assert_uint_eq(answer("GET", "/a-._~!$&'()+,;=:@//")->status, 404);
	static const struct {
		const char *path;
		const char *why;
	} bad[] = {
		{ "v1", "a path starts with \"/\"" },
		{ "\"*\"", "a path starts with \"/\"" },
		{ "\"\"", "a path starts with \"/\"" },
		{ "\"/v1/*/x\"",
		  "'*' may only end a path, which then matches as a prefix (\"/v1/*\")" },
		{ "\"/a**\"", "'*' may only end a path" },
		{ "\"/a?b=1\"", "the query is ignored in matching: leave out \"?...\"" },
		{ "\"/a#top\"", "clients never send a fragment: leave out \"#...\"" },
		{ "\"/a b\"", "a byte outside RFC 3986 path characters (percent-encode it)" },
		{ "\"/a\\tb\"", "a byte outside RFC 3986 path characters" },
		{ "\"/\\u00e9\"", "a byte outside RFC 3986 path characters" },
		{ "\"/a%2\"", "'%' must start an escape of two hex digits" },
		{ "\"/a%zz\"", "'%' must start an escape of two hex digits" },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(textf(FHEAD FLOW("path: %s, status: 200") DEFAULT, bad[i].path),
			     "t.yaml:10:16: invalid path \"");
		ck_assert_msg(strstr(err, bad[i].why) != NULL, "%s: got \"%s\", want \"%s\"",
			      bad[i].path, err, bad[i].why);
	}
	/* Length: 2048 bytes accepted (with or without the '*'), 2049 refused. */
	char *p = repeat('p', POLICY_FAKE_PATH_BYTES_MAX);
	p[0] = '/';
	expect_ok(textf(FHEAD FLOW("path: %s, status: 200") DEFAULT, p));
	ck_assert_uint_eq(answer("GET", p)->status, 200);
	p[POLICY_FAKE_PATH_BYTES_MAX - 1] = '*';
	expect_ok(textf(FHEAD FLOW("path: \"%s\", status: 200") DEFAULT, p));
	p[POLICY_FAKE_PATH_BYTES_MAX - 1] = 'p';
	expect_error(textf(FHEAD FLOW("path: %sp, status: 200") DEFAULT, p),
		     "t.yaml:10:16: path is longer than 2048 bytes");
	free(p);
}
END_TEST

START_TEST(test_status)
{
	static const struct {
		const char *status;
		const char *want; /* NULL: accepted */
	} cases[] = {
		{ "200", NULL },
		{ "599", NULL },
		{ "199", "t.yaml:10:27: status 199 is refused: an interim (1xx) response cannot be "
			 "canned" },
		{ "100", "t.yaml:10:27: status 100 is refused: an interim (1xx) response" },
		{ "600", "t.yaml:10:27: status must be 200..599, got 600" },
		{ "99", "t.yaml:10:27: status must be 200..599, got 99" },
		{ "0", "t.yaml:10:27: status must be 200..599, got 0" },
		{ "-200", "t.yaml:10:27: status must be 200..599, got -200" },
		{ "99999999999999999999999",
		  "t.yaml:10:27: status must be 200..599, got 99999999999999999999999" },
		{ "0200", "t.yaml:10:27: status must not have leading zeros" },
		{ "\"200\"", "t.yaml:10:27: status must be an integer" },
		{ "2e2", "t.yaml:10:27: status must be an integer" },
		{ "~", "t.yaml:10:27: status must be an integer" },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		const char *yaml =
		    textf(FHEAD FLOW("path: /, status: %s") DEFAULT, cases[i].status);

		if (cases[i].want == NULL) {
			expect_ok(yaml);
			ck_assert_uint_eq(answer("GET", "/")->status,
					  (unsigned)strtoul(cases[i].status, NULL, 10));
		} else {
			expect_error(yaml, cases[i].want);
		}
	}
}
END_TEST

/* 204, 205 and 304 have no body; any other status may, and every status may go without. */
START_TEST(test_status_without_body)
{
	static const char *const bodiless[] = { "204", "205", "304" };

	write_file("b.txt", 'b', 1);
	for (size_t i = 0; i < AN_ARRAY_LEN(bodiless); i++) {
		const char *status = bodiless[i];

		expect_error(textf(FHEAD FLOW("status: %s, body: x"), status),
			     textf("t.yaml:10:23: status %s has no body: remove body", status));
		expect_error(textf(FHEAD FLOW("body: \"\", status: %s"), status),
			     textf("t.yaml:10:10: status %s has no body: remove body", status));
		expect_error(
		    textf(FHEAD FLOW("status: %s, body_file: %s/b.txt"), status, dir),
		    textf("t.yaml:10:23: status %s has no body: remove body_file", status));
		expect_ok(textf(FHEAD FLOW("status: %s"), status));
		expect_body(answer("GET", "/"), NULL, 0);
	}
	expect_ok(FHEAD FLOW("status: 203, body: x"));
	expect_body(answer("GET", "/"), "x", 1);
	expect_ok(FHEAD FLOW("status: 200"));
	expect_body(answer("GET", "/"), NULL, 0);
}
END_TEST

/* --- headers ------------------------------------------------------------------------- */

START_TEST(test_header_names)
{
	expect_ok(FHEAD FLOW("status: 200, headers: {\"!#$%&'*+-.^_`|~09azAZ\": v}"));
	expect_head(answer("GET", "/"), "HTTP/1.1 200 OK\r\n!#$%&'*+-.^_`|~09azAZ: v\r\n");
	static const char *const bad[] = { "\"X A\"", "\"X:A\"",      "\"X(A)\"",
					   "\"\"",    "\"X\\u00e9\"", "\"X\\tA\"" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(textf(FHEAD FLOW("status: 200, headers: {%s: v}"), bad[i]),
			     "t.yaml:10:33: invalid header name \"");
		ck_assert_msg(strstr(err, "\": use 1-64 bytes of RFC 9110 token characters") !=
				  NULL,
			      "%s", err);
	}
	expect_error(FHEAD FLOW("status: 200, headers: {[X]: v}"),
		     "t.yaml:10:33: keys in headers must be strings");
	expect_error(FHEAD FLOW("status: 200, headers: {~: v}"),
		     "t.yaml:10:33: keys in headers must be strings");
	expect_error(FHEAD FLOW("status: 200, headers: []"),
		     "t.yaml:10:32: headers must be a mapping");
	expect_error(FHEAD FLOW("status: 200, headers: {}"),
		     "t.yaml:10:32: headers must not be empty");
	/* A name of 64 bytes accepted, 65 refused. */
	char *name = repeat('N', POLICY_FAKE_HEADER_NAME_BYTES_MAX + 1);
	name[POLICY_FAKE_HEADER_NAME_BYTES_MAX] = '\0';
	expect_ok(textf(FHEAD FLOW("status: 200, headers: {%s: v}"), name));
	name[POLICY_FAKE_HEADER_NAME_BYTES_MAX] = 'N';
	expect_error(textf(FHEAD FLOW("status: 200, headers: {%s: v}"), name),
		     "t.yaml:10:33: invalid header name \"NNNN");
	free(name);
}
END_TEST

START_TEST(test_header_duplicates)
{
	expect_error(FHEAD FLOW("status: 200, headers: {X-A: 1, X-A: 2}"),
		     "t.yaml:10:41: duplicate header \"X-A\" (names are case-insensitive)");
	expect_error(
	    FHEAD FLOW("status: 200, headers: {Content-Type: a, content-TYPE: b}"),
	    "t.yaml:10:50: duplicate header \"content-TYPE\" (names are case-insensitive)");
	/* Prefixes of one another are different names. */
	expect_ok(FHEAD FLOW("status: 200, headers: {X-A: 1, X-AB: 2, X: 3}"));
	expect_head(answer("GET", "/"), "HTTP/1.1 200 OK\r\nX-A: 1\r\nX-AB: 2\r\nX: 3\r\n");
}
END_TEST

START_TEST(test_header_framing_refused)
{
	static const char *const framing[] = {
		"Content-Length", "Transfer-Encoding", "Connection",
		"Keep-Alive",     "Upgrade",           "Proxy-Connection",
		"Trailer",        "content-length",    "TRANSFER-ENCODING",
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(framing); i++) {
		expect_error(textf(FHEAD FLOW("status: 200, headers: {%s: x}"), framing[i]),
			     textf("t.yaml:10:33: header \"%s\" is refused: the daemon owns the "
				   "response's framing and connection (Content-Length, "
				   "Transfer-Encoding, Connection, Keep-Alive, Upgrade, "
				   "Proxy-Connection, Trailer)",
				   framing[i]));
	}
	/* Look-alikes are ordinary headers. */
	expect_ok(
	    FHEAD FLOW("status: 200, headers: {Content-Length2: 1, X-Connection: 2, Trailers: "
		       "3, Content-Type: 4}"));
}
END_TEST

START_TEST(test_header_values)
{
	static const struct {
		const char *value;
		const char *why;
	} bad[] = {
		{ "\"a\\rb\"",
		  "holds a control character (CR, LF, NUL, ...), which would break the "
		  "head" },
		{ "\"a\\nb\"", "holds a control character" },
		{ "\"a\\r\\nX-Injected: 1\"", "holds a control character" },
		{ "\"a\\0b\"", "holds a control character" },
		{ "\"a\\x01b\"", "holds a control character" },
		{ "\"a\\x7fb\"", "holds a control character" },
		{ "\"\\x1b[31m\"", "holds a control character" },
		{ "\" a\"", "begins or ends with whitespace" },
		{ "\"a \"", "begins or ends with whitespace" },
		{ "\"\\ta\"", "begins or ends with whitespace" },
		{ "\"a\\t\"", "begins or ends with whitespace" },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(textf(FHEAD FLOW("status: 200, headers: {X-V: %s}"), bad[i].value),
			     textf("t.yaml:10:38: the value of header \"X-V\" %s", bad[i].why));
	}
	expect_error(FHEAD FLOW("status: 200, headers: {X-V: [a]}"),
		     "t.yaml:10:38: a header value must be a string");
	expect_error(FHEAD FLOW("status: 200, headers: {X-V: ~}"),
		     "t.yaml:10:38: a header value must be a string");
	/* A tab inside, bytes beyond ASCII, an empty quoted value and a number as text are fine. */
	expect_ok(FHEAD FLOW("status: 200, headers: {X-T: \"a\\tb\", X-U: \"\\u00e9\", X-E: \"\", "
			     "X-N: 007}"));
	expect_head(answer("GET", "/"),
		    "HTTP/1.1 200 OK\r\nX-T: a\tb\r\nX-U: \xc3\xa9\r\nX-E: \r\nX-N: 007\r\n");
	/* A value of 1024 bytes accepted, 1025 refused. */
	char *v = repeat('v', POLICY_FAKE_HEADER_VALUE_BYTES_MAX + 1);
	v[POLICY_FAKE_HEADER_VALUE_BYTES_MAX] = '\0';
	expect_ok(textf(FHEAD FLOW("status: 200, headers: {X-V: %s}"), v));
	ck_assert_uint_eq(answer("GET", "/")->head_len, strlen("HTTP/1.1 200 OK\r\nX-V: \r\n") +
							    POLICY_FAKE_HEADER_VALUE_BYTES_MAX);
	v[POLICY_FAKE_HEADER_VALUE_BYTES_MAX] = 'v';
	expect_error(textf(FHEAD FLOW("status: 200, headers: {X-V: %s}"), v),
		     "t.yaml:10:38: the value of header \"X-V\" is longer than 1024 bytes");
	free(v);
}
END_TEST

/* Writes a response whose head is exactly <head_len> bytes (status 200) to <g>. */
static void gen_head_of(struct gen *g, size_t head_len)
{
	size_t left = head_len - strlen("HTTP/1.1 200 OK\r\n");

	fprintf(g->f, "      - status: 200\n        headers:\n");
	for (int i = 0; left > 0; i++) {
		/* "H<i>: <value>\r\n" is the name, four bytes and the value. */
		int name_len = snprintf(NULL, 0, "H%d", i);
		size_t value = left - (size_t)name_len - 4;
		if (value > POLICY_FAKE_HEADER_VALUE_BYTES_MAX)
			value = POLICY_FAKE_HEADER_VALUE_BYTES_MAX;
		char *text = repeat('v', value);
		fprintf(g->f, "          H%d: %s\n", i, text);
		free(text);
		left -= (size_t)name_len + 4 + value;
	}
}

START_TEST(test_header_limits)
{
	struct gen g;

	/* 32 headers accepted, 33 refused at the 33rd. */
	gen_open(&g);
	fprintf(g.f, FHEAD "      - status: 200\n        headers:\n");
	for (uint32_t i = 0; i < POLICY_FAKE_HEADERS_MAX; i++)
		fprintf(g.f, "          X-%u: %u\n", i, i);
	fflush(g.f);
	expect_ok(g.buf);
	const struct verdict_response *r = answer("GET", "/");
	ck_assert_ptr_nonnull(strstr(r->head, "\r\nX-0: 0\r\nX-1: 1\r\n"));
	ck_assert_ptr_nonnull(strstr(r->head, "\r\nX-31: 31\r\n"));
	fprintf(g.f, "          X-32: 32\n");
	expect_error(gen_close(&g), "t.yaml:44:11: headers has more than 32 entries");
	free(g.buf);
	/* The whole head: 8192 bytes accepted, 8193 refused at the headers key. */
	gen_open(&g);
	fprintf(g.f, FHEAD);
	gen_head_of(&g, POLICY_FAKE_HEAD_BYTES_MAX);
	expect_ok(gen_close(&g));
	free(g.buf);
	r = answer("GET", "/");
	ck_assert_uint_eq(r->head_len, POLICY_FAKE_HEAD_BYTES_MAX);
	ck_assert_uint_eq(strlen(r->head), POLICY_FAKE_HEAD_BYTES_MAX);
	ck_assert_mem_eq(r->head + r->head_len - 2, "\r\n", 2);
	gen_open(&g);
	fprintf(g.f, FHEAD);
	gen_head_of(&g, POLICY_FAKE_HEAD_BYTES_MAX + 1);
	expect_error(gen_close(&g), "t.yaml:11:9: the response's head (status line and headers) is "
				    "longer than 8192 bytes");
	free(g.buf);
	/* Far over: refused at the header that no longer fits. */
	gen_open(&g);
	fprintf(g.f, FHEAD "      - status: 200\n        headers:\n");
	char *v = repeat('v', POLICY_FAKE_HEADER_VALUE_BYTES_MAX);
	for (int i = 0; i < 9; i++)
		fprintf(g.f, "          X-%d: %s\n", i, v);
	free(v);
	expect_error(gen_close(&g), "t.yaml:19:11: the response's head (status line and headers) "
				    "is longer than 8192 bytes");
	free(g.buf);
}
END_TEST

/* --- the compiled head ------------------------------------------------------------------ */

START_TEST(test_head_bytes)
{
	expect_ok(FHEAD
		  "      - method: GET\n        path: /v1/models\n        status: 200\n"
		  "        headers: {Content-Type: application/json, X-Served-By: agentsnet}\n"
		  "        body: '{\"data\": []}'\n" FLOW("path: /teapot, status: 299")
		      FLOW("path: /gone, status: 410, headers: {Retry-After: \"120\"}")
			  FLOW("path: /err, status: 511") "      - status: 404\n"
							  "        body: \"not here\\n\"\n");
	const struct verdict_response *r = answer("GET", "/v1/models");
	expect_head(r, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		       "X-Served-By: agentsnet\r\n");
	expect_body(r, "{\"data\": []}", 12);
	ck_assert_uint_eq(r->status, 200);
	/* An unregistered status: an empty reason phrase, its space kept (RFC 9112 section 4). */
	expect_head(answer("GET", "/teapot"), "HTTP/1.1 299 \r\n");
	expect_head(answer("GET", "/gone"), "HTTP/1.1 410 Gone\r\nRetry-After: 120\r\n");
	expect_head(answer("GET", "/err"), "HTTP/1.1 511 Network Authentication Required\r\n");
	r = answer("GET", "/nope");
	expect_head(r, "HTTP/1.1 404 Not Found\r\n");
	expect_body(r, "not here\n", 9);
	ck_assert_uint_eq(r->status, 404);
	/* Every registered phrase is the one a status line carries. */
	for (size_t i = 0; i < AN_ARRAY_LEN(status_phrases); i++) {
		expect_ok(textf(FHEAD FLOW("status: %u"), status_phrases[i].status));
		expect_head(answer("GET", "/"),
			    textf("HTTP/1.1 %u %s\r\n", status_phrases[i].status,
				  status_phrases[i].phrase));
	}
	ck_assert_str_eq(status_phrase(418), "");
	ck_assert_str_eq(status_phrase(226), "IM Used");
}
END_TEST

START_TEST(test_inline_body)
{
	/* YAML block scalars, escapes and a NUL inside the body. */
	expect_ok(FHEAD "      - path: /block\n        status: 200\n        body: |\n"
			"          line one\n          line two\n" FLOW("path: /nul, status: 200, "
									"body: \"a\\0b\\r\\n\"")
			    FLOW("path: /empty, status: 200, body: \"\"") DEFAULT);
	expect_body(answer("GET", "/block"), "line one\nline two\n", 18);
	expect_body(answer("GET", "/nul"), "a\0b\r\n", 5);
	expect_body(answer("GET", "/empty"), NULL, 0);
	expect_error(FHEAD FLOW("status: 200, body: ~"), "t.yaml:10:29: body must be a string");
	expect_error(FHEAD FLOW("status: 200, body: [x]"), "t.yaml:10:29: body must be a string");
	/* 1 MiB accepted, one byte more refused. */
	char *body = repeat('b', POLICY_FAKE_BODY_BYTES_MAX + 1);
	body[POLICY_FAKE_BODY_BYTES_MAX] = '\0';
	expect_ok(textf(FHEAD FLOW("status: 200, body: %s"), body));
	ck_assert_uint_eq(answer("GET", "/")->body_len, POLICY_FAKE_BODY_BYTES_MAX);
	body[POLICY_FAKE_BODY_BYTES_MAX] = 'b';
	expect_error(textf(FHEAD FLOW("status: 200, body: %s"), body),
		     "t.yaml:10:29: body is larger than 1048576 bytes");
	free(body);
	expect_error(FHEAD FLOW("status: 200, body: x, body_file: /x"),
		     "t.yaml:10:32: body and body_file exclude each other");
	expect_error(FHEAD FLOW("body_file: /nonexistent, body: x, status: 200"),
		     "t.yaml:10:21: body_file /nonexistent: open: No such file or directory");
}
END_TEST

/* --- body_file ---------------------------------------------------------------------------- */

START_TEST(test_body_file_paths)
{
	char yaml[1024];
	char name[128];

	write_file("abs.txt", 'a', 3);
	snprintf(yaml, sizeof(yaml),
		 FHEAD FLOW("path: /abs, status: 200, body_file: %s/abs.txt")
		     FLOW("path: /rel, status: 200, body_file: rel.txt")
			 FLOW("path: /sub, status: 200, body_file: sub/s.txt") DEFAULT,
		 dir);
	/* Relative to the policy file's directory, whatever the working directory is. */
	write_file("rel.txt", 'r', 2);
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	write_file("sub/s.txt", 's', 1);
	snprintf(name, sizeof(name), "%s/p.yaml", dir);
	expect_ok_at(__LINE__, name, yaml);
	expect_body(answer("GET", "/abs"), "aaa", 3);
	expect_body(answer("GET", "/rel"), "rr", 2);
	expect_body(answer("GET", "/sub"), "s", 1);
	/* The same through policy_load_file. */
	FILE *f = fopen(name, "w");
	ck_assert_ptr_nonnull(f);
	fputs(yaml, f);
	fclose(f);
	policy_free(pol);
	pol = NULL;
	ck_assert_msg(policy_load_file(name, &cfg, &pol, err, sizeof(err)) == 0, "%s", err);
	expect_body(answer("GET", "/rel"), "rr", 2);
	/* A name without '/': relative to the working directory. */
	ck_assert_int_eq(chdir(dir), 0);
	expect_ok_at(__LINE__, "p.yaml", yaml);
	expect_body(answer("GET", "/rel"), "rr", 2);
	/* A policy at the root resolves "x" as "/x". */
	expect_error_at(__LINE__, "/p.yaml", FHEAD FLOW("status: 200, body_file: nonexistent.txt"),
			"/p.yaml:10:34: body_file /nonexistent.txt: open: No such file or "
			"directory");
	expect_error_at(
	    __LINE__, name, FHEAD FLOW("status: 200, body_file: missing.txt"),
	    textf("%s/p.yaml:10:34: body_file %s/missing.txt: open: No such file or directory", dir,
		  dir));
	expect_error(FHEAD FLOW("status: 200, body_file: \"\""),
		     "t.yaml:10:34: body_file must be a path of 1-4095 bytes without control "
		     "characters");
	expect_error(FHEAD FLOW("status: 200, body_file: \"a\\nb\""),
		     "t.yaml:10:34: body_file must be a path of 1-4095 bytes");
	expect_error(FHEAD FLOW("status: 200, body_file: [a]"),
		     "t.yaml:10:34: body_file must be a string");
}
END_TEST

#define BODY_FILE(path) FHEAD FLOW("status: 200, body_file: " path)

START_TEST(test_body_file_kinds)
{
	char path[256];

	/* A directory, a FIFO (which must not block the load) and a device are not regular files. */
	snprintf(path, sizeof(path), "%s/fifo", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	const char *const irregular[] = { dir, path, "/dev/null" };
	for (size_t i = 0; i < AN_ARRAY_LEN(irregular); i++) {
		expect_error(textf(BODY_FILE("%s"), irregular[i]),
			     textf("t.yaml:10:34: body_file %s: not a regular file", irregular[i]));
	}
	/* A symbolic link as the last component is refused, even to a regular file. */
	const char *target = write_file("target.txt", 't', 4);
	char link[256];
	snprintf(link, sizeof(link), "%s/link.txt", dir);
	ck_assert_int_eq(symlink(target, link), 0);
	expect_error(textf(BODY_FILE("%s"), link),
		     textf("t.yaml:10:34: body_file %s: a symbolic link is refused (name the file "
			   "itself)",
			   link));
	/* Unreadable (as root too: without the capabilities that read everything). */
	snprintf(path, sizeof(path), "%s/secret.txt", dir);
	write_file("secret.txt", 's', 1);
	ck_assert_int_eq(chmod(path, 0), 0);
	unit_dac_override(false);
	expect_error(textf(BODY_FILE("%s"), path),
		     textf("t.yaml:10:34: body_file %s: open: Permission denied", path));
	unit_dac_override(true);
	/* An empty file is an empty body. */
	expect_ok(textf(BODY_FILE("%s"), write_file("empty.txt", 'e', 0)));
	expect_body(answer("GET", "/"), NULL, 0);
}
END_TEST

START_TEST(test_body_file_size)
{
	/* 1 MiB accepted, one byte more refused, and binary content kept as it is. */
	const char *path = write_file("max.bin", '\0', POLICY_FAKE_BODY_BYTES_MAX);
	expect_ok(textf(BODY_FILE("%s"), path));
	const struct verdict_response *r = answer("GET", "/");
	ck_assert_uint_eq(r->body_len, POLICY_FAKE_BODY_BYTES_MAX);
	ck_assert_int_eq(r->body[0], 0);
	ck_assert_int_eq(r->body[POLICY_FAKE_BODY_BYTES_MAX - 1], 0);
	path = write_file("over.bin", 'x', POLICY_FAKE_BODY_BYTES_MAX + 1);
	expect_error(textf(BODY_FILE("%s"), path),
		     textf("t.yaml:10:34: body_file %s: larger than 1048576 bytes", path));
}
END_TEST

/* Every body of the file together: 64 MiB accepted, one byte more refused. */
START_TEST(test_bodies_total)
{
	static const char second[] = "      responses: [{path: /, status: 200, body: %s}, "
				     "{status: 200}]\n";
	const char *path = write_file("mib.bin", 'm', POLICY_FAKE_BODY_BYTES_MAX);
	uint32_t n = POLICY_FAKE_BYTES_MAX / POLICY_FAKE_BODY_BYTES_MAX;
	struct gen g;

	ck_assert_uint_eq(n, POLICY_FAKE_RESPONSES_MAX);
	for (int over = 0; over < 2; over++) {
		gen_open(&g);
		fprintf(g.f, FHEAD);
		for (uint32_t i = 0; i + 1 < n; i++)
			fprintf(g.f, FLOW("path: /%u, status: 200, body_file: %s"), i, path);
		fprintf(g.f, FLOW("status: 200, body_file: %s"), path);
		/* A second fake rule: an empty body more fits, one byte more does not. */
		fprintf(g.f, "    - host: b.test\n      tier: fake\n      owner: o\n"
			     "      reason: r\n");
		fprintf(g.f, second, over ? "x" : "\"\"");
		const char *yaml = gen_close(&g);
		if (over == 0) {
			expect_ok(yaml);
			ck_assert_uint_eq(answer("GET", "/62")->body_len,
					  POLICY_FAKE_BODY_BYTES_MAX);
			ck_assert_uint_eq(answer("GET", "/x")->body_len,
					  POLICY_FAKE_BODY_BYTES_MAX);
		} else {
			expect_error(yaml,
				     textf("t.yaml:%u:%zu: the bodies of all responses together "
					   "are larger than 67108864 bytes",
					   10 + n + 4, strstr(second, "%s") - second + 1));
		}
		free(g.buf);
	}
}
END_TEST

/* --- matching -------------------------------------------------------------------------- */

START_TEST(test_first_match)
{
	expect_ok(FHEAD FLOW("method: GET, path: /v1/models, status: 200")
		      FLOW("method: HEAD, path: /v1/models, status: 201")
			  FLOW("path: /v1/models, status: 202") FLOW("path: \"/v1/*\", status: 203")
			      FLOW("method: POST, status: 204") FLOW("path: \"/*\", status: 205")
				  DEFAULT);
	static const struct {
		const char *method;
		const char *path;
		uint16_t status;
	} cases[] = {
		{ "GET", "/v1/models", 200 },
		{ "HEAD", "/v1/models", 200 }, /* a GET entry answers HEAD too */
		{ "PUT", "/v1/models", 202 },
		{ "get", "/v1/models", 202 },  /* methods are case-sensitive */
		{ "GETX", "/v1/models", 202 }, /* ... and compared whole */
		{ "GE", "/v1/models", 202 },
		{ "GET", "/v1/models?limit=1", 200 }, /* the query is ignored */
		{ "GET", "/v1/models?", 200 },
		{ "GET", "/v1/models/", 203 },   /* an exact path is exact */
		{ "GET", "/v1/Models", 203 },    /* and case-sensitive */
		{ "GET", "/v1/models%2F", 203 }, /* and not decoded */
		{ "GET", "/v1/", 203 },          /* a prefix includes itself */
		{ "GET", "/v1/a?b=/v2", 203 },
		{ "GET", "/v1", 205 }, /* the prefix "/v1/" needs its slash */
		{ "POST", "/v1", 204 },
		{ "POST", "/v1/x", 203 }, /* first match wins */
		{ "GET", "/", 205 },
		{ "GET", "/?v1/models", 205 },
		{ "GET", "*", 404 }, /* not a path: only the default */
		{ "GET", "", 404 },
		{ "GET", "?x", 404 },
		{ "", "", 404 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		const struct verdict_response *r = answer(cases[i].method, cases[i].path);
		ck_assert_msg(r->status == cases[i].status, "%s %s: got %u, want %u",
			      cases[i].method, cases[i].path, r->status, cases[i].status);
	}
	/* NULL views of length 0 are accepted. */
	struct verdict v = decide(0, "a.test");
	ck_assert_uint_eq(policy_verdict_ops.fake_response(pol, v.fake, NULL, 0, NULL, 0)->status,
			  404);
	/* The answer points into the snapshot: the same response every time. */
	ck_assert_ptr_eq(answer("GET", "/v1/models"), answer("GET", "/v1/models?x"));
}
END_TEST

START_TEST(test_verdict_fake)
{
	expect_ok(
	    "version: 1\nprofiles:\n  p:\n    rules:\n"
	    "    - {host: a.test, tier: fake, owner: o, reason: r, responses: [{status: 201}]}\n"
	    "    - {host: b.test, tier: passthrough, owner: o, reason: r}\n"
	    "    - {host: \"*.c.test\", tier: fake, owner: o, reason: r, ports: [443],\n"
	    "       responses: [{status: 202}]}\n"
	    "    - {host: 192.0.2.1, tier: fake, owner: o, reason: r, responses: [{status: "
	    "203}]}\n"
	    "    - {host: d.test, tier: deny, owner: o, reason: r}\n"
	    "  q:\n    rules:\n"
	    "    - {host: a.test, tier: fake, owner: o, reason: r, responses: [{status: 204}]}\n"
	    "    - {host: e.test, tier: local, upstream: \"127.0.0.1:1\", owner: o, reason: r}\n");
	static const struct {
		uint32_t profile;
		const char *host;
		uint16_t status; /* 0: not a fake verdict */
	} cases[] = {
		{ 0, "a.test", 201 },     { 0, "A.TEST.", 201 },  { 0, "x.c.test", 202 },
		{ 0, "3221225985", 203 }, { 1, "a.test", 204 },   { 0, "b.test", 0 },
		{ 0, "d.test", 0 },       { 0, "nope.test", 0 },  { 0, "c.test", 0 },
		{ 1, "e.test", 0 },       { 0, "dns.google", 0 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		struct verdict v = decide(cases[i].profile, cases[i].host);
		if (cases[i].status == 0) {
			ck_assert_int_ne(v.tier, TIER_FAKE);
			ck_assert_ptr_null(v.fake);
			continue;
		}
		ck_assert_int_eq(v.tier, TIER_FAKE);
		ck_assert_ptr_nonnull(v.fake);
		ck_assert_uint_eq(
		    policy_verdict_ops.fake_response(pol, v.fake, "GET", 3, "/", 1)->status,
		    cases[i].status);
		ck_assert_int_eq(verdict_refusal(&v), REASON_NONE);
	}
	/* A port the fake rule does not list is refused, with no responses. */
	struct verdict v;
	policy_verdict_ops.decide(pol, 0, "x.c.test", 8, 80, &v);
	ck_assert_int_eq(v.reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_ptr_null(v.fake);
	ck_assert_uint_eq(policy_rule_count(pol), 7);
}
END_TEST

/* The docs' example of the section loads and answers as it says. */
START_TEST(test_docs_example)
{
	char *yaml = docs_policy("### Rule `responses`");

	expect_ok(yaml);
	free(yaml);
	struct verdict v = decide(0, "api.example.com");
	ck_assert_int_eq(v.tier, TIER_FAKE);
	const struct verdict_response *r =
	    policy_verdict_ops.fake_response(pol, v.fake, "GET", 3, "/v1/models", 10);
	expect_head(r, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		       "X-Served-By: agentsnet\r\n");
	expect_body(r, "{\"data\": []}", 12);
	r = policy_verdict_ops.fake_response(pol, v.fake, "POST", 4, "/v1/chat", 8);
	expect_head(r, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
		       "Retry-After: 120\r\n");
	r = policy_verdict_ops.fake_response(pol, v.fake, "GET", 3, "/v1/chat", 8);
	expect_head(r, "HTTP/1.1 404 Not Found\r\n");
	expect_body(r, "not here\n", 9);
}
END_TEST

/* --- the embedded default ----------------------------------------------------------------- */

START_TEST(test_default_policy)
{
	const char *yaml = policy_default_yaml();

	ck_assert_int_eq(policy_load_buffer("<embedded default policy>", yaml, strlen(yaml), &cfg,
					    &pol, err, sizeof(err)),
			 0);
	struct verdict v = decide(0, "example.com");
	ck_assert_int_eq(v.tier, TIER_FAKE);
	ck_assert_int_eq(verdict_refusal(&v), REASON_NONE);
	const struct verdict_response *r =
	    policy_verdict_ops.fake_response(pol, v.fake, "GET", 3, "/", 1);
	expect_head(r, "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n");
	ck_assert_uint_eq(r->status, 200);
	ck_assert_uint_gt(r->body_len, 0);
	ck_assert_uint_eq(strlen(r->body), r->body_len);
	ck_assert_ptr_nonnull(strstr(r->body, "<!doctype html>"));
	ck_assert_ptr_nonnull(strstr(r->body, "agentsnet's fake-response tier"));
	ck_assert_ptr_nonnull(strstr(r->body, "Nothing left the host"));
	/* Every method and path gets the same page. */
	ck_assert_ptr_eq(policy_verdict_ops.fake_response(pol, v.fake, "POST", 4, "/a/b?c", 6), r);
	ck_assert_ptr_null(decide(0, "ollama.internal").fake);
	ck_assert_ptr_null(cfg.ca_cert);
	ck_assert_uint_eq(cfg.leaf_days, 0);
}
END_TEST

/* Every allocation of a load with responses fails in turn: a clean -ENOMEM, nothing leaked. */
START_TEST(test_allocation_failures)
{
	char yaml[1024];

	write_file("b.txt", 'b', 10);
	snprintf(yaml, sizeof(yaml),
		 FHEAD FLOW("method: GET, path: \"/a/*\", status: 200, headers: {X-A: 1, X-B: 2}, "
			    "body: x") FLOW("path: /f, status: 201, body_file: %s/b.txt") DEFAULT
		 "daemon: {ca: {cert: /c, key: /k}, leaf_days: 3}\n",
		 dir);
	uint64_t total = count_allocations(yaml);
	ck_assert_uint_gt(total, 20);
	for (uint64_t n = 1; n <= total; n++) {
		int rc = load_failing(n, yaml);
		if (rc == 0) {
			/* Only a shrinking realloc may fail without failing the load. */
			expect_body(answer("GET", "/f"), "bbbbbbbbbb", 10);
			continue;
		}
		expect_out_of_memory(n, rc);
		ck_assert_str_eq(cfg.ca_cert, "/c");
		ck_assert_uint_eq(cfg.leaf_days, 3);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy/fake");
	TCase *tc = tcase_create("fake");

	tcase_add_checked_fixture(tc, setup, policytest_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_tier_needs_responses);
	tcase_add_test(tc, test_responses_limit);
	tcase_add_test(tc, test_default_entry);
	tcase_add_test(tc, test_unreachable_entry);
	tcase_add_test(tc, test_method);
	tcase_add_test(tc, test_path);
	tcase_add_test(tc, test_status);
	tcase_add_test(tc, test_status_without_body);
	tcase_add_test(tc, test_header_names);
	tcase_add_test(tc, test_header_duplicates);
	tcase_add_test(tc, test_header_framing_refused);
	tcase_add_test(tc, test_header_values);
	tcase_add_test(tc, test_header_limits);
	tcase_add_test(tc, test_head_bytes);
	tcase_add_test(tc, test_inline_body);
	tcase_add_test(tc, test_body_file_paths);
	tcase_add_test(tc, test_body_file_kinds);
	tcase_add_test(tc, test_body_file_size);
	tcase_add_test(tc, test_bodies_total);
	tcase_add_test(tc, test_first_match);
	tcase_add_test(tc, test_verdict_fake);
	tcase_add_test(tc, test_docs_example);
	tcase_add_test(tc, test_default_policy);
	tcase_add_test(tc, test_allocation_failures);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
