/*
 * policy/ingress.c, a profile's `ingress` section (enabled, methods,
 * strip_headers, body_bytes, limits, csp_sandbox, scope_cookies,
 * drop_origin_fields: bounds, duplicates, unknown keys, the
 * defaults), what profile_ingress returns for each profile, the built-in
 * policy's gateway (and ingress_optional, which only it sets), the docs'
 * examples, and every allocation of a load with the section and
 * daemon.ingress failing in turn. daemon.ingress itself, the gateway's
 * listener, is the daemon: section's (tests/unit/policy/daemon.c).
 */
#include "../../../policy/ingress.c"

#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

/* A profile without rules, where policytest.h's MINIMAL has one: the messages count from it. */
#undef MINIMAL
#define MINIMAL "version: 1\nprofiles:\n  p:\n    rules: []\n"
/* daemon.ingress in flow style: DAEMON(x) is "daemon: {ingress: {x}}" on line 5. */
#define DAEMON(fields) MINIMAL "daemon: {ingress: {" fields "}}\n"
/* Profile p's ingress in flow style: PROFILE(x) is "    ingress: {x}" on line 5. */
#define PROFILE(fields) MINIMAL "    ingress: {" fields "}\n"

/* The ingress of profile <index> of pol, through the table the engine uses. */
static const struct verdict_ingress *ingress(uint32_t index)
{
	const struct verdict_ingress *vi = policy_verdict_ops.profile_ingress(pol, index);

	ck_assert_ptr_nonnull(vi);
	return vi;
}

static void expect_methods(const struct verdict_ingress *vi, const char *const *want,
			   uint32_t count)
{
	ck_assert_uint_eq(vi->method_count, count);
	for (uint32_t i = 0; i < count; i++)
		ck_assert_str_eq(vi->methods[i], want[i]);
}

static const char *const default_methods[] = { "GET",   "HEAD",   "POST",   "PUT",
					       "PATCH", "DELETE", "OPTIONS" };

/* Every field of a profile without `ingress:` (or with an empty one). */
static void expect_defaults(const struct verdict_ingress *vi)
{
	ck_assert(vi->enabled);
	expect_methods(vi, default_methods, AN_ARRAY_LEN(default_methods));
	ck_assert_uint_eq(vi->strip_count, 0);
	ck_assert_uint_eq(vi->body_bytes_max, VERDICT_INGRESS_BODY_DEFAULT);
	ck_assert_uint_eq(vi->body_bytes_max, 10u * 1024u * 1024u);
	ck_assert_uint_eq(vi->limits.requests_per_second, 0);
	ck_assert_uint_eq(vi->limits.burst, 0);
	ck_assert_uint_eq(vi->limits.concurrent, 0);
	ck_assert(vi->csp_sandbox);
	ck_assert(vi->scope_cookies);
	ck_assert(vi->drop_origin_fields);
	ck_assert(!vi->token_required);
}

/* --- the built-in policy -------------------------------------------------------------------- */

START_TEST(test_embedded_default)
{
	ck_assert_int_eq(policy_load_or_default(NULL, &cfg, &pol, err, sizeof(err)), 0);
	expect_daemon("127.0.0.1:8090", NULL, "/callbacks");
	ck_assert(cfg.ingress_optional);
	ck_assert_uint_eq(policy_profile_count(pol), 1);
	const struct verdict_ingress *vi = ingress(0);
	ck_assert(vi->enabled);
	expect_methods(vi, default_methods, AN_ARRAY_LEN(default_methods));
	ck_assert_uint_eq(vi->strip_count, 0);
	ck_assert_uint_eq(vi->body_bytes_max, VERDICT_INGRESS_BODY_DEFAULT);
	ck_assert_uint_eq(vi->limits.requests_per_second, 50);
	ck_assert_uint_eq(vi->limits.burst, 100);
	ck_assert_uint_eq(vi->limits.concurrent, 0);
	/* The egress limits are another thing: the built-in profile has none. */
	struct verdict_limits l;
	policy_verdict_ops.profile_limits(pol, 0, &l);
	ck_assert_uint_eq(l.requests_per_second, 0);
	/* A failed load keeps it; a file's load clears it; no key can set it. */
	expect_error_at_needle(DAEMON("listen: 1"), "1}",
			       "invalid ingress.listen \"1\": not an IPv4 or IPv6 address");
	ck_assert(cfg.ingress_optional);
	expect_ok(DAEMON("listen: \"127.0.0.1:8090\""));
	ck_assert(!cfg.ingress_optional);
	expect_error_at_needle(DAEMON("listen: \"127.0.0.1:8090\", optional: true"), "optional",
			       "unknown key \"optional\" in daemon.ingress");
	/* The same text through policy_load_buffer is a file like any other. */
	policy_free(pol);
	pol = NULL;
	ck_assert_int_eq(policy_load_or_default(NULL, &cfg, &pol, err, sizeof(err)), 0);
	ck_assert(cfg.ingress_optional);
	expect_ok(policy_default_yaml());
	ck_assert_str_eq(cfg.ingress_listen, "127.0.0.1:8090");
	ck_assert(!cfg.ingress_optional);
}
END_TEST

/* The embedded text is the one docs/policy.md shows, and it stays the docs' last yaml block. */
START_TEST(test_embedded_docs)
{
	char *doc = docs_block("## The built-in policy");

	ck_assert_str_eq(doc, policy_default_yaml());
	pool_free(doc);
	ck_assert_ptr_nonnull(strstr(policy_default_yaml(), "listen: \"127.0.0.1:8090\""));
}
END_TEST

/* --- a profile's ingress --------------------------------------------------------------------- */

START_TEST(test_profile_defaults)
{
	expect_ok(MINIMAL);
	expect_defaults(ingress(0));
	expect_ok(PROFILE(""));
	expect_defaults(ingress(0));
	/* Block style, every key. */
	expect_ok(MINIMAL "    ingress:\n      enabled: false\n      methods:\n        - POST\n"
			  "      strip_headers:\n        - Cookie\n      body_bytes: 7\n"
			  "      limits:\n        concurrent: 3\n");
	const struct verdict_ingress *vi = ingress(0);
	ck_assert(!vi->enabled);
	static const char *const post[] = { "POST" };
	expect_methods(vi, post, 1);
	ck_assert_uint_eq(vi->strip_count, 1);
	ck_assert_str_eq(vi->strip_headers[0], "cookie");
	ck_assert_uint_eq(vi->body_bytes_max, 7);
	ck_assert_uint_eq(vi->limits.requests_per_second, 0);
	ck_assert_uint_eq(vi->limits.concurrent, 3);
	/* The slots past the count are empty. */
	ck_assert_ptr_null(vi->methods[1]);
	ck_assert_ptr_null(vi->strip_headers[1]);
}
END_TEST

START_TEST(test_profile_enabled)
{
	expect_ok(PROFILE("enabled: true"));
	ck_assert(ingress(0)->enabled);
	expect_ok(PROFILE("enabled: false"));
	ck_assert(!ingress(0)->enabled);
	expect_methods(ingress(0), default_methods, AN_ARRAY_LEN(default_methods));
	static const char *const bad[] = { "yes", "no", "\"true\"", "1", "False", "[]", "~" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *yaml = textf(PROFILE("enabled: %s"), bad[i]);
		expect_error_at_needle(yaml, textf("%s}", bad[i]), "enabled must be true or false");
	}
}
END_TEST

/* The isolation of the answers: on unless turned off, each on its own. */
START_TEST(test_profile_isolation)
{
	static const char *const keys[] = { "csp_sandbox", "scope_cookies", "drop_origin_fields" };
	static const char *const bad[] = { "yes", "\"false\"", "0", "[]", "~" };

	for (size_t k = 0; k < AN_ARRAY_LEN(keys); k++) {
		expect_ok(textf(PROFILE("%s: false"), keys[k]));
		const struct verdict_ingress *vi = ingress(0);
		ck_assert(vi->csp_sandbox == (k != 0));
		ck_assert(vi->scope_cookies == (k != 1));
		ck_assert(vi->drop_origin_fields == (k != 2));
		ck_assert(vi->enabled);
		expect_ok(textf(PROFILE("%s: true"), keys[k]));
		expect_defaults(ingress(0));
		for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++)
			expect_error_at_needle(textf(PROFILE("%s: %s"), keys[k], bad[i]),
					       textf("%s}", bad[i]),
					       textf("%s must be true or false", keys[k]));
	}
	expect_ok(PROFILE("csp_sandbox: false, scope_cookies: false, drop_origin_fields: false"));
	ck_assert(!ingress(0)->csp_sandbox);
	ck_assert(!ingress(0)->scope_cookies);
	ck_assert(!ingress(0)->drop_origin_fields);
}
END_TEST

START_TEST(test_profile_token)
{
	static const char *const bad[] = { "true", "Required", "\"\"", "[required]", "~", "1" };

	expect_ok(PROFILE("token: required"));
	ck_assert(ingress(0)->token_required);
	ck_assert(ingress(0)->enabled);
	expect_ok(PROFILE("token: none"));
	expect_defaults(ingress(0));
	expect_ok(PROFILE("token: \"required\""));
	ck_assert(ingress(0)->token_required);
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++)
		expect_error_at_needle(textf(PROFILE("token: %s"), bad[i]), textf("%s}", bad[i]),
				       "token must be \"required\" or \"none\"");
}
END_TEST

START_TEST(test_profile_methods)
{
	expect_ok(PROFILE("methods: [POST, GET, PROPFIND, MKCALENDAR]"));
	static const char *const four[] = { "POST", "GET", "PROPFIND", "MKCALENDAR" };
	expect_methods(ingress(0), four, 4);
	/* 15 letters accepted, 16 refused. */
	expect_ok(PROFILE("methods: [ABCDEFGHIJKLMNO]"));
	ck_assert_str_eq(ingress(0)->methods[0], "ABCDEFGHIJKLMNO");
	static const char *const bad[] = { "ABCDEFGHIJKLMNOP", "get", "Get", "GE-T", "GET1", "\"\"",
					   "\"G T\"" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *yaml = textf(PROFILE("methods: [GET, %s]"), bad[i]);
		const char *shown = strcmp(bad[i], "\"\"") == 0      ? ""
				    : strcmp(bad[i], "\"G T\"") == 0 ? "G T"
								     : bad[i];
		expect_error_at_needle(
		    yaml, textf("%s]", bad[i]),
		    textf("invalid method \"%s\" in ingress.methods: use 1-15 upper-case letters "
			  "(\"GET\", \"POST\"), as clients send methods (they are case-sensitive)",
			  shown));
	}
	const char *yaml = PROFILE("methods: [GET, POST, GET]");
	expect_error_at_needle(yaml, "GET]", "duplicate method \"GET\" in ingress.methods");
	expect_error_at_needle(PROFILE("methods: []"), "[]}", "methods must not be empty");
	expect_error_at_needle(PROFILE("methods: GET"), "GET", "methods must be a sequence");
	expect_error_at_needle(PROFILE("methods: [[GET]]"), "[GET]]", "a method must be a string");
	expect_error_at_needle(PROFILE("methods: [GET], methods: [PUT]"), "methods: [PUT",
			       "duplicate key \"methods\" in a profile's ingress");
}
END_TEST

/* "[<A>, <B>, ...]" of <n> distinct methods of upper-case letters (a textf text). */
static const char *methods_of(uint32_t n)
{
	struct gen g;

	gen_open(&g);
	for (uint32_t i = 0; i < n; i++)
		fprintf(g.f, "%sM%c%c", i == 0 ? "[" : ", ", 'A' + (char)(i / 26),
			'A' + (char)(i % 26));
	fprintf(g.f, "]");
	const char *text = textf("%s", gen_close(&g));
	free(g.buf);
	return text;
}

START_TEST(test_profile_methods_limit)
{
	ck_assert_uint_eq(VERDICT_INGRESS_METHODS_MAX, 16);
	expect_ok(textf(PROFILE("methods: %s"), methods_of(16)));
	ck_assert_uint_eq(ingress(0)->method_count, 16);
	ck_assert_str_eq(ingress(0)->methods[0], "MAA");
	ck_assert_str_eq(ingress(0)->methods[15], "MAP");
	const char *yaml = textf(PROFILE("methods: %s"), methods_of(17));
	expect_error_at_needle(yaml, "MAQ", "methods has more than 16 entries");
}
END_TEST

START_TEST(test_profile_strip_headers)
{
	expect_ok(PROFILE(
	    "strip_headers: [Cookie, X-Hub-Signature-256, AUTHORIZATION, \"x_a!#$%&'*+.^`|~\"]"));
	const struct verdict_ingress *vi = ingress(0);
	ck_assert_uint_eq(vi->strip_count, 4);
	ck_assert_str_eq(vi->strip_headers[0], "cookie");
	ck_assert_str_eq(vi->strip_headers[1], "x-hub-signature-256");
	ck_assert_str_eq(vi->strip_headers[2], "authorization");
	ck_assert_str_eq(vi->strip_headers[3], "x_a!#$%&'*+.^`|~");
	/* The methods stay the defaults. */
	expect_methods(vi, default_methods, AN_ARRAY_LEN(default_methods));
	expect_ok(PROFILE("strip_headers: []"));
	ck_assert_uint_eq(ingress(0)->strip_count, 0);
	/* Names the gateway removes anyway are accepted: they change nothing. */
	expect_ok(PROFILE("strip_headers: [Connection, X-Forwarded-For]"));
	ck_assert_uint_eq(ingress(0)->strip_count, 2);
	const char *yaml = PROFILE("strip_headers: [Cookie, X-A, cookie]");
	expect_error_at_needle(
	    yaml, "cookie]",
	    "duplicate header \"cookie\" in ingress.strip_headers (names are case-insensitive)");
	static const char *const kept[] = { "Host", "content-length", "Transfer-Encoding", "HOST" };
	for (size_t i = 0; i < AN_ARRAY_LEN(kept); i++) {
		yaml = textf(PROFILE("strip_headers: [%s]"), kept[i]);
		expect_error_at_needle(
		    yaml, kept[i],
		    textf("header \"%s\" cannot be stripped: the agent needs Host, Content-Length "
			  "and Transfer-Encoding to read the request",
			  kept[i]));
	}
	static const char *const bad[] = { "\"X A\"", "\"X:A\"", "\"\"", "\"X\\u00e9\"",
					   "\"(x)\"" };
	static const char *const shown[] = { "X A", "X:A", "", "X??", "(x)" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		yaml = textf(PROFILE("strip_headers: [%s]"), bad[i]);
		expect_error_at_needle(
		    yaml, bad[i],
		    textf("invalid header name \"%s\" in ingress.strip_headers: use 1-64 bytes "
			  "of RFC 9110 token characters",
			  shown[i]));
	}
	expect_error_at_needle(PROFILE("strip_headers: Cookie"), "Cookie",
			       "strip_headers must be a sequence");
	expect_error_at_needle(PROFILE("strip_headers: [{a: b}]"), "{a: b}",
			       "a header name must be a string");
}
END_TEST

START_TEST(test_profile_strip_headers_limits)
{
	struct gen g;

	/* A name of 64 bytes accepted, 65 refused. */
	char *name = repeat('H', POLICY_INGRESS_HEADER_BYTES_MAX + 1);
	name[POLICY_INGRESS_HEADER_BYTES_MAX] = '\0';
	expect_ok(textf(PROFILE("strip_headers: [%s]"), name));
	ck_assert_uint_eq(strlen(ingress(0)->strip_headers[0]), 64);
	ck_assert_int_eq(ingress(0)->strip_headers[0][0], 'h');
	name[POLICY_INGRESS_HEADER_BYTES_MAX] = 'H';
	const char *yaml = textf(PROFILE("strip_headers: [%s]"), name);
	expect_error_at_needle(yaml, "HHH",
			       textf("invalid header name \"%.60s...\" in ingress.strip_headers: "
				     "use 1-64 bytes of RFC 9110 token characters",
				     name));
	free(name);
	/* 32 names accepted (every one the longest), 33 refused at the 33rd. */
	ck_assert_uint_eq(VERDICT_INGRESS_STRIP_MAX, 32);
	char *tail = repeat('a', POLICY_INGRESS_HEADER_BYTES_MAX - 5);
	gen_open(&g);
	fprintf(g.f, MINIMAL "    ingress:\n      strip_headers:\n");
	for (int i = 0; i < 32; i++)
		fprintf(g.f, "        - X-%02d-%s\n", i, tail);
	fflush(g.f);
	expect_ok(g.buf);
	ck_assert_uint_eq(ingress(0)->strip_count, 32);
	ck_assert_uint_eq(strlen(ingress(0)->strip_headers[31]), 64);
	ck_assert_str_eq(ingress(0)->strip_headers[31], textf("x-31-%s", tail));
	free(tail);
	fprintf(g.f, "        - X-32\n");
	expect_error(gen_close(&g), "t.yaml:39:11: strip_headers has more than 32 entries");
	free(g.buf);
}
END_TEST

START_TEST(test_profile_body_bytes)
{
	static const struct refusal bad[] = {
		{ PROFILE("body_bytes: 1073741825"), "1073741825",
		  "body_bytes must be 1..1073741824, got 1073741825" },
		{ PROFILE("body_bytes: 0"), "0}", "body_bytes must be 1..1073741824, got 0" },
		{ PROFILE("body_bytes: -1"), "-1", "body_bytes must be 1..1073741824, got -1" },
		{ PROFILE("body_bytes: 1MiB"), "1MiB", "body_bytes must be an integer" },
		{ PROFILE("body_bytes: \"10\""), "\"10\"", "body_bytes must be an integer" },
		{ PROFILE("body_bytes: 010"), "010", "body_bytes must not have leading zeros" },
	};

	expect_ok(PROFILE("body_bytes: 1"));
	ck_assert_uint_eq(ingress(0)->body_bytes_max, 1);
	expect_ok(PROFILE("body_bytes: 1073741824"));
	ck_assert_uint_eq(ingress(0)->body_bytes_max, POLICY_INGRESS_BODY_BYTES_MAX);
	ck_assert_uint_eq(POLICY_INGRESS_BODY_BYTES_MAX, 1073741824u);
	expect_refusals(bad, AN_ARRAY_LEN(bad));
}
END_TEST

START_TEST(test_profile_limits)
{
	static const char *const keys[] = { "requests_per_second", "burst", "concurrent" };

	expect_ok(PROFILE("limits: {requests_per_second: 1000000, burst: 1000000, "
			  "concurrent: 1000000}"));
	ck_assert_uint_eq(ingress(0)->limits.requests_per_second, 1000000);
	ck_assert_uint_eq(ingress(0)->limits.burst, 1000000);
	ck_assert_uint_eq(ingress(0)->limits.concurrent, 1000000);
	expect_ok(PROFILE("limits: {requests_per_second: 1, burst: 1, concurrent: 1}"));
	ck_assert_uint_eq(ingress(0)->limits.requests_per_second, 1);
	ck_assert_uint_eq(ingress(0)->limits.burst, 1);
	ck_assert_uint_eq(ingress(0)->limits.concurrent, 1);
	/* Apart from the profile's own limits. */
	struct verdict_limits l;
	policy_verdict_ops.profile_limits(pol, 0, &l);
	ck_assert_uint_eq(l.requests_per_second, 0);
	ck_assert_uint_eq(l.concurrent, 0);
	for (size_t i = 0; i < AN_ARRAY_LEN(keys); i++) {
		const char *pre = i == 1 ? "requests_per_second: 5, " : "";
		const char *yaml = textf(PROFILE("limits: {%s%s: 1000001}"), pre, keys[i]);
		expect_error_at_needle(yaml, "1000001",
				       textf("%s must be 1..1000000, got 1000001", keys[i]));
		yaml = textf(PROFILE("limits: {%s%s: 0}"), pre, keys[i]);
		expect_error_at_needle(yaml, "0}", textf("%s must be 1..1000000, got 0", keys[i]));
	}
	expect_error_at_needle(PROFILE("limits: {burst: 5}"), "{burst",
			       "limits: burst needs requests_per_second");
	expect_error_at_needle(PROFILE("limits: {rate: 5}"), "rate",
			       "unknown key \"rate\" in a profile's ingress limits (expected one "
			       "of: requests_per_second, burst, concurrent)");
	expect_error_at_needle(PROFILE("limits: {burst: 1, burst: 2}"), "burst: 2",
			       "duplicate key \"burst\" in a profile's ingress limits");
	expect_error_at_needle(PROFILE("limits: 5"), "5}", "limits must be a mapping");
}
END_TEST

START_TEST(test_profile_keys)
{
	expect_error_at_needle(PROFILE("paths: [/a]"), "paths",
			       "unknown key \"paths\" in a profile's ingress (expected one of: "
			       "enabled, methods, strip_headers, body_bytes, limits, csp_sandbox, "
			       "scope_cookies, drop_origin_fields, token)");
	expect_error_at_needle(PROFILE("enabled: true, enabled: false"), "enabled: false",
			       "duplicate key \"enabled\" in a profile's ingress");
	expect_error_at_needle(MINIMAL "    ingress: true\n", "true", "ingress must be a mapping");
	expect_error_at_needle(MINIMAL "    ingress: [enabled]\n", "[enabled]",
			       "ingress must be a mapping");
	expect_error(MINIMAL "    ingress: {}\n    ingress: {}\n",
		     "t.yaml:6:5: duplicate key \"ingress\" in a profile");
	/* A profile still needs its rules. */
	expect_error("version: 1\nprofiles:\n  p:\n    ingress: {}\n",
		     "t.yaml:4:5: missing mandatory key \"rules\" in a profile");
	expect_error("version: 1\nprofiles:\n  p:\n    rules: []\n    ingres: {}\n",
		     "t.yaml:5:5: unknown key \"ingres\" in a profile (expected one of: rules, "
		     "presets, limits, ingress, users, groups, alerts)");
}
END_TEST

/* --- profile_ingress -------------------------------------------------------------------------- */

START_TEST(test_op_per_profile)
{
	expect_ok(
	    "version: 1\nprofiles:\n"
	    "  a:\n    rules: []\n    ingress: {methods: [POST], strip_headers: [Cookie], "
	    "body_bytes: 100, limits: {requests_per_second: 5}}\n"
	    "  b:\n    rules: []\n"
	    "  c:\n    rules: []\n    ingress: {enabled: false, strip_headers: [X-A, X-B]}\n");
	ck_assert_uint_eq(policy_profile_count(pol), 3);
	const struct verdict_ingress *a = ingress(0);
	static const char *const post[] = { "POST" };
	ck_assert(a->enabled);
	expect_methods(a, post, 1);
	ck_assert_uint_eq(a->strip_count, 1);
	ck_assert_str_eq(a->strip_headers[0], "cookie");
	ck_assert_uint_eq(a->body_bytes_max, 100);
	ck_assert_uint_eq(a->limits.requests_per_second, 5);
	ck_assert_uint_eq(a->limits.burst, 0);
	expect_defaults(ingress(1));
	const struct verdict_ingress *c = ingress(2);
	ck_assert(!c->enabled);
	expect_methods(c, default_methods, AN_ARRAY_LEN(default_methods));
	ck_assert_uint_eq(c->strip_count, 2);
	ck_assert_str_eq(c->strip_headers[0], "x-a");
	ck_assert_str_eq(c->strip_headers[1], "x-b");
	/* The same settings each time: borrowed from the snapshot, never copied. */
	ck_assert_ptr_eq(ingress(0), a);
	ck_assert_ptr_eq(ingress(2), c);
	ck_assert_ptr_ne(ingress(0), ingress(1));
}
END_TEST

/* Many profiles: the names stay valid while the profiles array grows under them. */
START_TEST(test_op_many_profiles)
{
	struct gen g;

	gen_open(&g);
	fprintf(g.f, "version: 1\nprofiles:\n");
	for (int i = 0; i < 300; i++)
		fprintf(g.f,
			"  p%d:\n    rules: []\n    ingress: {methods: [M%c%c], "
			"strip_headers: [X-%d], body_bytes: %d}\n",
			i, 'A' + i / 26 % 26, 'A' + i % 26, i, i + 1);
	expect_ok(gen_close(&g));
	free(g.buf);
	ck_assert_uint_eq(policy_profile_count(pol), 300);
	for (uint32_t i = 0; i < 300; i++) {
		const struct verdict_ingress *vi = ingress(i);
		char m[4] = { 'M', (char)('A' + i / 26 % 26), (char)('A' + i % 26), '\0' };

		ck_assert_uint_eq(vi->method_count, 1);
		ck_assert_str_eq(vi->methods[0], m);
		ck_assert_str_eq(vi->strip_headers[0], textf("x-%u", i));
		ck_assert_uint_eq(vi->body_bytes_max, i + 1);
	}
}
END_TEST

/* --- the docs ---------------------------------------------------------------------------------- */

START_TEST(test_docs_example)
{
	char *yaml = docs_block(NULL);

	ck_assert_int_eq(setenv("EXAMPLE_API_KEY", "sk-example-docs-0123456789", 1), 0);
	expect_ok(yaml);
	pool_free(yaml);
	ck_assert_str_eq(cfg.ingress_listen, "0.0.0.0:8090");
	ck_assert_str_eq(cfg.ingress_public_url, "https://hooks.example.com");
	ck_assert_str_eq(cfg.ingress_prefix, "/callbacks");
	ck_assert_str_eq(cfg.ingress_tls_cert, "/etc/agentsnet/hooks.pem");
	ck_assert_str_eq(cfg.ingress_tls_key, "/etc/agentsnet/hooks.key");
	ck_assert(!cfg.ingress_optional);
	const struct verdict_ingress *vi = ingress(0);
	static const char *const two[] = { "GET", "POST" };
	ck_assert(vi->enabled);
	expect_methods(vi, two, 2);
	ck_assert_uint_eq(vi->strip_count, 1);
	ck_assert_str_eq(vi->strip_headers[0], "cookie");
	ck_assert_uint_eq(vi->body_bytes_max, 1048576);
	ck_assert_uint_eq(vi->limits.requests_per_second, 20);
	ck_assert_uint_eq(vi->limits.burst, 40);
	ck_assert_uint_eq(vi->limits.concurrent, 16);
	expect_defaults(ingress(1));
}
END_TEST

START_TEST(test_docs_section)
{
	char *yaml = docs_policy("### Profile `ingress`");

	expect_ok(yaml);
	free(yaml);
	const struct verdict_ingress *vi = ingress(0);
	static const char *const post[] = { "POST" };
	expect_methods(vi, post, 1);
	ck_assert_uint_eq(vi->strip_count, 2);
	ck_assert_str_eq(vi->strip_headers[0], "cookie");
	ck_assert_str_eq(vi->strip_headers[1], "authorization");
	ck_assert_uint_eq(vi->body_bytes_max, 1048576);
	ck_assert_uint_eq(vi->limits.requests_per_second, 10);
	ck_assert_uint_eq(vi->limits.burst, 20);
	ck_assert_uint_eq(vi->limits.concurrent, 8);
	ck_assert(!ingress(1)->enabled);
	expect_methods(ingress(1), default_methods, AN_ARRAY_LEN(default_methods));
}
END_TEST

/* --- allocation failures --------------------------------------------------------------------- */

/* cfg's daemon.ingress as test_allocation_failures sets it before each load. */
static void alloc_reset(void)
{
	ck_assert_int_eq(config_set_string(&cfg.ingress_listen, "192.0.2.1:1"), 0);
	ck_assert_int_eq(config_set_string(&cfg.ingress_public_url, NULL), 0);
	ck_assert_int_eq(config_set_string(&cfg.ingress_prefix, "/callbacks"), 0);
	ck_assert_int_eq(config_set_string(&cfg.ingress_tls_cert, NULL), 0);
	ck_assert_int_eq(config_set_string(&cfg.ingress_tls_key, NULL), 0);
}

/* A load that got through: it is whole; cfg is set back for the next. */
static void alloc_loaded(void)
{
	ck_assert_str_eq(ingress(0)->methods[1], "PUT");
	ck_assert_str_eq(cfg.ingress_listen, "[::]:8090");
	ck_assert_str_eq(cfg.ingress_tls_key, "/t.key");
	alloc_reset();
}

/* A load that failed: cfg is as it was. */
static void alloc_failed(void)
{
	ck_assert_str_eq(cfg.ingress_listen, "192.0.2.1:1");
	ck_assert_ptr_null(cfg.ingress_public_url);
	ck_assert_str_eq(cfg.ingress_prefix, "/callbacks");
	ck_assert_ptr_null(cfg.ingress_tls_cert);
	ck_assert_ptr_null(cfg.ingress_tls_key);
}

/* Every allocation of a load with both sections fails in turn: a clean -ENOMEM, nothing changed. */
START_TEST(test_allocation_failures)
{
	static const char yaml[] =
	    "version: 1\ndaemon: {ingress: {listen: \"[::]:8090\", public_url: https://h.example, "
	    "prefix: /h, tls: {cert: /t.pem, key: /t.key}}}\nprofiles:\n"
	    "  a:\n    rules: []\n    ingress: {methods: [POST, PUT], strip_headers: [Cookie]}\n"
	    "  b:\n    rules: []\n    ingress: {enabled: false}\n";

	ck_assert_int_eq(config_set_string(&cfg.ingress_listen, "192.0.2.1:1"), 0);
	uint64_t total = count_allocations(yaml);
	ck_assert_uint_gt(total, 10);
	alloc_reset();
	expect_allocation_failures(yaml, total, alloc_loaded, alloc_failed);
}
END_TEST

int main(void)
{
	TCase *tc;
	Suite *s = policytest_suite("policy/ingress", "ingress", setup, &tc);

	tcase_add_test(tc, test_embedded_default);
	tcase_add_test(tc, test_embedded_docs);
	tcase_add_test(tc, test_profile_defaults);
	tcase_add_test(tc, test_profile_enabled);
	tcase_add_test(tc, test_profile_isolation);
	tcase_add_test(tc, test_profile_token);
	tcase_add_test(tc, test_profile_methods);
	tcase_add_test(tc, test_profile_methods_limit);
	tcase_add_test(tc, test_profile_strip_headers);
	tcase_add_test(tc, test_profile_strip_headers_limits);
	tcase_add_test(tc, test_profile_body_bytes);
	tcase_add_test(tc, test_profile_limits);
	tcase_add_test(tc, test_profile_keys);
	tcase_add_test(tc, test_op_per_profile);
	tcase_add_test(tc, test_op_many_profiles);
	tcase_add_test(tc, test_docs_example);
	tcase_add_test(tc, test_docs_section);
	tcase_add_test(tc, test_allocation_failures);
	return unit_run(s);
}
