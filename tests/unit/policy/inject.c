/*
 * policy/inject.c, the credential-inject tier: a rule's `inject` and
 * `upstream_ca` (every validation rule at its limit N and N+1, with the exact
 * message and position), secret_env and secret_file (present, absent,
 * relative, absolute, too large, not regular, one trailing newline), that no
 * message ever holds a secret, that a secret is released only through the
 * wiping wrapper (the wrappers are defined here and check every buffer they
 * free), verdict.inject through policy_verdict_ops.decide, and the docs'
 * example.
 */
#include "../../../policy/inject.c"

#include <malloc.h>
#include <sys/stat.h>
#define POLICYTEST_OWN_FREE /* pool_free and pool_free_secret below watch the secrets */
#include "tests/unit/policy/policytest.h"

/*
 * Secrets under watch: no error message may hold one, and no buffer released
 * without a wipe (pool_free) may either. pool_free_secret counts the buffers
 * it wipes that held one, as the loader stores them (the secret, then a NUL).
 */
#define WATCH_MAX 8
static const char *watched[WATCH_MAX];
static uint32_t watched_count;
static uint32_t wipes[WATCH_MAX];

static void watch(const char *secret)
{
	ck_assert_uint_lt(watched_count, WATCH_MAX);
	ck_assert_uint_ge(strlen(secret), 4);
	watched[watched_count++] = secret;
}

void pool_free(void *p)
{
	if (p != NULL) {
		size_t n = malloc_usable_size(p);

		for (uint32_t i = 0; i < watched_count; i++)
			ck_assert_msg(memmem(p, n, watched[i], strlen(watched[i])) == NULL,
				      "a buffer holding secret %u was released without a wipe", i);
	}
	free(p);
}

void pool_free_secret(void *p, size_t len)
{
	if (p == NULL)
		return;
	for (uint32_t i = 0; i < watched_count; i++) {
		size_t n = strlen(watched[i]);

		if (len > n && memcmp(p, watched[i], n) == 0 && ((char *)p)[n] == '\0')
			wipes[i]++;
	}
	explicit_bzero(p, len);
	for (size_t i = 0; i < len; i++)
		ck_assert_uint_eq(((unsigned char *)p)[i], 0);
	free(p);
}

/* After every load of expect_ok and expect_error: no message holds a secret. */
static void expect_no_secret(int line)
{
	for (uint32_t i = 0; i < watched_count; i++)
		ck_assert_msg(strstr(err, watched[i]) == NULL, "line %d: secret %u in \"%s\"", line,
			      i, err);
}

static void setup(void)
{
	policytest_setup("/tmp/agentsnet-inject-XXXXXX");
	policytest_on_load = expect_no_secret;
	watched_count = 0;
	memset(wipes, 0, sizeof(wipes));
}

static const char *at(const char *yaml, const char *needle, const char *msg)
{
	return policytest_at("t.yaml", yaml, needle, msg);
}

/* Writes the <len> bytes at <data> to <dir>/<name>; returns the path (static). */
static const char *write_file(const char *name, const char *data, size_t len)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unit_spit(path, data, len);
	return path;
}

static const char *write_text(const char *name, const char *text)
{
	return write_file(name, text, strlen(text));
}

/*
 * One inject rule for a.test, its `inject` on line 9 in flow style:
 * INJ(x) is "      inject: {x}" (the '{' at column 15).
 */
#define IHEAD                                                                               \
	"version: 1\nprofiles:\n  p:\n    rules:\n    - host: a.test\n      tier: inject\n" \
	"      owner: o\n      reason: r\n"
#define INJ(fields) IHEAD "      inject: {" fields "}\n"
/* The usual fields but the secret's source. */
#define BASE    "header: X-Key, placeholder: placeholder-0001"
#define KEY_ENV "AGENTSNET_T_KEY"
#define KEY     "sk-test-LEAKCHECK-0001"

static void set_key(const char *value)
{
	ck_assert_int_eq(setenv(KEY_ENV, value, 1), 0);
}

/* a.test's credential (profile 0), which must be there. */
static const struct verdict_inject *inject_of_a(void)
{
	struct verdict v = decide(0, "a.test");

	ck_assert_int_eq(v.tier, TIER_INJECT);
	ck_assert_ptr_nonnull(v.inject);
	ck_assert_int_eq(verdict_refusal(&v), REASON_NONE);
	return v.inject;
}

static void expect_secret(const struct verdict_inject *vi, const char *secret)
{
	ck_assert_uint_eq(vi->secret_len, strlen(secret));
	ck_assert_str_eq(vi->secret, secret);
}

/* --- the schema ------------------------------------------------------------------------ */

START_TEST(test_tier_needs_inject)
{
	set_key(KEY);
	watch(KEY);
	expect_error(IHEAD, "t.yaml:6:13: tier inject needs inject (the header, the placeholder, "
			    "and secret_env or secret_file)");
	static const char *const others[] = { "passthrough", "fake", "deny" };
	for (size_t i = 0; i < AN_ARRAY_LEN(others); i++) {
		const char *yaml = textf(
		    "version: 1\nprofiles:\n  p:\n    rules:\n    - host: a.test\n"
		    "      tier: %s\n      owner: o\n      reason: r\n%s"
		    "      inject: {" BASE ", secret_env: " KEY_ENV "}\n",
		    others[i],
		    strcmp(others[i], "fake") == 0 ? "      responses: [{status: 200}]\n" : "");
		expect_error(yaml, at(yaml, "inject:", "inject is only allowed with tier inject"));
	}
	static const char local[] =
	    "version: 1\nprofiles:\n  p:\n    rules:\n    - host: a.test\n"
	    "      inject: {" BASE ", secret_env: " KEY_ENV "}\n      tier: local\n"
	    "      upstream: \"127.0.0.1:1\"\n      owner: o\n      reason: r\n";
	expect_error(local, "t.yaml:6:7: inject is only allowed with tier inject");
	/* upstream_ca alone does not make an inject rule, nor is it allowed on another tier. */
	const char *ca = write_text("ca.pem", "not read\n");
	expect_error(textf(IHEAD "      upstream_ca: %s\n", ca),
		     "t.yaml:6:13: tier inject needs inject");
	expect_error(textf("version: 1\nprofiles:\n  p:\n    rules:\n"
			   "    - {host: a.test, tier: passthrough, owner: o, reason: r,\n"
			   "       upstream_ca: %s}\n",
			   ca),
		     "t.yaml:6:8: upstream_ca is only allowed with tier inject");
	/* The mapping itself. */
	expect_error(IHEAD "      inject: X-Key\n", "t.yaml:9:15: inject must be a mapping");
	expect_error(IHEAD "      inject: [X-Key]\n", "t.yaml:9:15: inject must be a mapping");
	expect_error(INJ(BASE ", secret_env: " KEY_ENV ", secret: x"),
		     at(INJ(BASE ", secret_env: " KEY_ENV ", secret: x"), "secret:",
			"unknown key \"secret\" in inject (expected one of: header, prefix, "
			"placeholder, secret_env, secret_file, require, upgrades)"));
	expect_error(INJ(BASE ", header: Y, secret_env: " KEY_ENV),
		     "t.yaml:9:62: duplicate key \"header\" in inject");
	expect_error(INJ("placeholder: placeholder-0001, secret_env: " KEY_ENV),
		     "t.yaml:9:15: missing mandatory key \"header\" in inject");
	expect_error(INJ("header: X-Key, secret_env: " KEY_ENV),
		     "t.yaml:9:15: missing mandatory key \"placeholder\" in inject");
	expect_error(INJ(BASE), "t.yaml:9:15: inject needs secret_env or secret_file: where the "
				"daemon reads the real credential");
	expect_error(INJ(BASE ", secret_env: " KEY_ENV ", secret_file: /x"),
		     at(INJ(BASE ", secret_env: " KEY_ENV ", secret_file: /x"), "secret_file",
			"secret_env and secret_file exclude each other"));
	expect_error(INJ(BASE ", secret_file: /x, secret_env: " KEY_ENV),
		     at(INJ(BASE ", secret_file: /x, secret_env: " KEY_ENV), "/x",
			"secret_file /x: open: No such file or directory"));
	expect_error(IHEAD "      inject: {" BASE ", secret_env: " KEY_ENV "}\n      inject: {}\n",
		     "t.yaml:10:7: duplicate key \"inject\" in a rule");
	/* An inject rule takes ports, limits, an instruction and an id like any served rule. */
	expect_ok(
	    INJ(BASE ", secret_env: " KEY_ENV) "      ports: [443]\n      limits: {concurrent: "
					       "2}\n      id: api\n      instruction: i\n");
	struct verdict v = decide(0, "a.test");
	ck_assert_uint_eq(v.rule_limits.concurrent, 2);
	ck_assert_str_eq(v.rule, "api");
	ck_assert_ptr_nonnull(v.inject);
	v = decide_port(0, "a.test", 80);
	ck_assert_int_eq(v.reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_ptr_null(v.inject);
}
END_TEST

START_TEST(test_header)
{
	set_key(KEY);
	watch(KEY);
	/* Every tchar but '_' (test_header_refused). */
	expect_ok(INJ("header: \"!#$%&'*+-.^`|~9aZ\", placeholder: placeholder-0001, "
		      "secret_env: " KEY_ENV));
	ck_assert_str_eq(inject_of_a()->header, "!#$%&'*+-.^`|~9aZ");
	ck_assert_uint_eq(inject_of_a()->header_len, 17);
	static const char *const bad[] = { "\"X Key\"",   "\"X:Key\"",    "\"\"",
					   "\"X\\tKey\"", "\"X\\u00e9\"", "X/Key" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(
		    textf(INJ("header: %s, placeholder: placeholder-0001, secret_env: " KEY_ENV),
			  bad[i]),
		    "t.yaml:9:24: invalid header \"");
		ck_assert_ptr_nonnull(
		    strstr(err, "\": use 1-64 bytes of RFC 9110 token characters"));
	}
	expect_error(INJ("header: [X], placeholder: placeholder-0001, secret_env: " KEY_ENV),
		     "t.yaml:9:24: header must be a string");
	/* Length: 64 bytes accepted, 65 refused. */
	char *h = repeat('h', POLICY_INJECT_HEADER_BYTES_MAX + 1);
	h[POLICY_INJECT_HEADER_BYTES_MAX] = '\0';
	expect_ok(
	    textf(INJ("header: %s, placeholder: placeholder-0001, secret_env: %s"), h, KEY_ENV));
	ck_assert_uint_eq(inject_of_a()->header_len, POLICY_INJECT_HEADER_BYTES_MAX);
	h[POLICY_INJECT_HEADER_BYTES_MAX] = 'h';
	expect_error(
	    textf(INJ("header: %s, placeholder: placeholder-0001, secret_env: %s"), h, KEY_ENV),
	    "t.yaml:9:24: invalid header \"hhhhhhhhhh");
	free(h);
}
END_TEST

START_TEST(test_header_refused)
{
	set_key(KEY);
	watch(KEY);
	/* The framing, hop-by-hop and routing headers, in any case. */
	static const char *const refused[] = {
		"Content-Length",
		"transfer-encoding",
		"CONNECTION",
		"Keep-Alive",
		"Upgrade",
		"Host",
		"te",
		"Trailer",
		"Proxy-",
		"Proxy-Connection",
		"proxy-authorization",
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(refused); i++) {
		expect_error(
		    textf(INJ("header: %s, placeholder: placeholder-0001, secret_env: " KEY_ENV),
			  refused[i]),
		    textf("t.yaml:9:24: header \"%s\" is refused: the daemon frames and routes the "
			  "request (Content-Length, Transfer-Encoding, Connection, Keep-Alive, "
			  "Upgrade, Proxy-*, Host, TE, Trailer)",
			  refused[i]));
	}
	/* A name with '_': the daemon never relays one, so it could never carry the secret. */
	static const char *const underscored[] = { "X_Api_Key", "_", "api_key" };
	for (size_t i = 0; i < AN_ARRAY_LEN(underscored); i++) {
		expect_error(
		    textf(INJ("header: %s, placeholder: placeholder-0001, secret_env: " KEY_ENV),
			  underscored[i]),
		    textf("t.yaml:9:24: header \"%s\" is refused: the daemon relays no request "
			  "field whose name holds '_' (a backend may read it as the name with '-')",
			  underscored[i]));
	}
	/* Near misses are ordinary headers. */
	static const char *const fine[] = { "Proxy",         "TEX",       "Hosts", "X-Host",
					    "Authorization", "x-api-key", "Cookie" };
	for (size_t i = 0; i < AN_ARRAY_LEN(fine); i++) {
		expect_ok(
		    textf(INJ("header: %s, placeholder: placeholder-0001, secret_env: " KEY_ENV),
			  fine[i]));
		ck_assert_str_eq(inject_of_a()->header, fine[i]);
	}
}
END_TEST

START_TEST(test_prefix)
{
	set_key(KEY);
	watch(KEY);
	/* Absent: "", as is an explicit empty prefix. */
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV));
	ck_assert_str_eq(inject_of_a()->prefix, "");
	ck_assert_uint_eq(inject_of_a()->prefix_len, 0);
	expect_ok(INJ(BASE ", prefix: \"\", secret_env: " KEY_ENV));
	ck_assert_str_eq(inject_of_a()->prefix, "");
	expect_ok(INJ(BASE ", prefix: \"Bearer \", secret_env: " KEY_ENV));
	ck_assert_str_eq(inject_of_a()->prefix, "Bearer ");
	ck_assert_uint_eq(inject_of_a()->prefix_len, 7);
	/* Bytes above ASCII are not control characters: a header value may hold them. */
	expect_ok(INJ(BASE ", prefix: \"Cl\\u00e9 \", secret_env: " KEY_ENV));
	ck_assert_str_eq(inject_of_a()->prefix, "Cl\xc3\xa9 ");
	static const struct {
		const char *prefix;
		size_t position;
	} bad[] = {
		{ "\"Bearer\\t\"", 7 },    { "\"\\rBearer \"", 1 }, { "\"Bea\\nrer \"", 4 },
		{ "\"Bearer \\x7f\"", 8 }, { "\"B\\0\"", 2 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(textf(INJ(BASE ", prefix: %s, secret_env: " KEY_ENV), bad[i].prefix),
			     textf("t.yaml:9:70: prefix has a control character (CR, LF, tab, ...) "
				   "at position %zu",
				   bad[i].position));
	}
	expect_error(INJ(BASE ", prefix: \" Bearer\", secret_env: " KEY_ENV),
		     "t.yaml:9:70: prefix must not begin with a space: a header's value is read "
		     "without its leading whitespace, so it would never match");
	/* Length: 64 bytes accepted, 65 refused; the prefix is never shown. */
	char *pre = repeat('P', POLICY_INJECT_PREFIX_BYTES_MAX + 1);
	pre[POLICY_INJECT_PREFIX_BYTES_MAX] = '\0';
	expect_ok(textf(INJ(BASE ", prefix: %s, secret_env: " KEY_ENV), pre));
	ck_assert_uint_eq(inject_of_a()->prefix_len, POLICY_INJECT_PREFIX_BYTES_MAX);
	pre[POLICY_INJECT_PREFIX_BYTES_MAX] = 'P';
	expect_error(textf(INJ(BASE ", prefix: %s, secret_env: " KEY_ENV), pre),
		     "t.yaml:9:70: prefix is longer than 64 bytes");
	ck_assert_ptr_null(strstr(err, "PPPP"));
	free(pre);
}
END_TEST

START_TEST(test_placeholder)
{
	set_key(KEY);
	watch(KEY);
	/* Length: 7 bytes refused, 8 and 256 accepted, 257 refused; never shown. */
	static const struct {
		size_t len;
		bool ok;
	} lens[] = { { 0, false },
		     { POLICY_INJECT_PLACEHOLDER_BYTES_MIN - 1, false },
		     { POLICY_INJECT_PLACEHOLDER_BYTES_MIN, true },
		     { POLICY_INJECT_PLACEHOLDER_BYTES_MAX, true },
		     { POLICY_INJECT_PLACEHOLDER_BYTES_MAX + 1, false } };
	for (size_t i = 0; i < AN_ARRAY_LEN(lens); i++) {
		char *ph = repeat('Q', lens[i].len);
		const char *yaml =
		    textf(INJ("header: X-Key, placeholder: \"%s\", secret_env: " KEY_ENV), ph);

		if (lens[i].ok) {
			expect_ok(yaml);
			ck_assert_uint_eq(inject_of_a()->placeholder_len, lens[i].len);
			ck_assert_str_eq(inject_of_a()->placeholder, ph);
		} else {
			expect_error(yaml,
				     textf("t.yaml:9:44: placeholder must be 8-256 bytes, got %zu",
					   lens[i].len));
			ck_assert_ptr_null(strstr(err, "QQQQ"));
		}
		free(ph);
	}
	/* Visible ASCII only, the fault named by its position. */
	static const struct {
		const char *ph;
		size_t position;
	} bad[] = {
		{ "\"QzQzQz 1\"", 7 },        { "\"\\tQzQzQzQz\"", 1 }, { "\"QzQzQzQz\\x7f\"", 9 },
		{ "\"QzQz\\u00e9QzQz\"", 5 }, { "\"QzQzQzQz\\n\"", 9 }, { "\"QzQ\\0zQzQz\"", 4 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(
		    textf(INJ("header: X-Key, placeholder: %s, secret_env: " KEY_ENV), bad[i].ph),
		    textf("t.yaml:9:44: placeholder has a byte that is not visible ASCII "
			  "(0x21..0x7e) at position %zu",
			  bad[i].position));
		ck_assert_ptr_null(strstr(err, "QzQz"));
	}
	/* Every visible byte, and a plain number, are fine. */
	expect_ok(
	    INJ("header: X-Key, placeholder: \"!~\\\"#$%&'()*+,-./09:;<=>?@AZ[\\\\]^_`az{|}\", "
		"secret_env: " KEY_ENV));
	ck_assert_str_eq(inject_of_a()->placeholder, "!~\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}");
	expect_ok(INJ("header: X-Key, placeholder: 12345678, secret_env: " KEY_ENV));
	ck_assert_str_eq(inject_of_a()->placeholder, "12345678");
	expect_error(INJ("header: X-Key, placeholder: ~, secret_env: " KEY_ENV),
		     "t.yaml:9:44: placeholder must be a string");
}
END_TEST

/* --- the secret -------------------------------------------------------------------------- */

START_TEST(test_secret_env)
{
	set_key(KEY);
	watch(KEY);
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV));
	expect_secret(inject_of_a(), KEY);
	/* Absent, and present but empty. */
	ck_assert_int_eq(unsetenv("AGENTSNET_T_NONE"), 0);
	expect_error(INJ(BASE ", secret_env: AGENTSNET_T_NONE"),
		     "t.yaml:9:74: secret_env AGENTSNET_T_NONE: the daemon's environment has no "
		     "such variable");
	ck_assert_int_eq(setenv("AGENTSNET_T_EMPTY", "", 1), 0);
	expect_error(INJ(BASE ", secret_env: AGENTSNET_T_EMPTY"),
		     "t.yaml:9:74: secret_env AGENTSNET_T_EMPTY: the secret is empty");
	/* Names: POSIX's, any case; a bad one is not shown. */
	ck_assert_int_eq(setenv("_lower_9", KEY, 1), 0);
	expect_ok(INJ(BASE ", secret_env: _lower_9"));
	expect_secret(inject_of_a(), KEY);
	static const char *const bad[] = { "9KEY", "A-KEY",   "\"A KEY\"",         "\"\"",
					   "A.B",  "\"A=B\"", "sk-pasted-key-0001" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(textf(INJ(BASE ", secret_env: %s"), bad[i]),
			     "t.yaml:9:74: secret_env must name an environment variable: 1-255 of "
			     "[A-Za-z0-9_], not starting with a digit");
	}
	ck_assert_ptr_null(strstr(err, "pasted"));
	/* A name of 255 bytes accepted, 256 refused. */
	char *name = repeat('N', POLICY_INJECT_ENV_NAME_BYTES_MAX + 1);
	ck_assert_int_eq(setenv(name, KEY, 1), 0);
	name[POLICY_INJECT_ENV_NAME_BYTES_MAX] = '\0';
	ck_assert_int_eq(setenv(name, KEY, 1), 0);
	expect_ok(textf(INJ(BASE ", secret_env: %s"), name));
	name[POLICY_INJECT_ENV_NAME_BYTES_MAX] = 'N';
	expect_error(textf(INJ(BASE ", secret_env: %s"), name),
		     "t.yaml:9:74: secret_env must name an environment variable");
	free(name);
	/* Each load reads the environment again. */
	static const char second[] = "sk-test-LEAKCHECK-0002";
	watch(second);
	set_key(second);
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV));
	expect_secret(inject_of_a(), second);
}
END_TEST

START_TEST(test_secret_bytes)
{
	static const char yaml[] = INJ(BASE ", secret_env: " KEY_ENV);

	/* Length: 1 and 4096 bytes accepted, 4097 refused. */
	set_key("k");
	expect_ok(yaml);
	expect_secret(inject_of_a(), "k");
	char *big = repeat('K', POLICY_INJECT_SECRET_BYTES_MAX + 1);
	big[POLICY_INJECT_SECRET_BYTES_MAX] = '\0';
	set_key(big);
	expect_ok(yaml);
	expect_secret(inject_of_a(), big);
	big[POLICY_INJECT_SECRET_BYTES_MAX] = 'K';
	set_key(big);
	expect_error(yaml,
		     "t.yaml:9:74: secret_env " KEY_ENV ": the secret is longer than 4096 bytes");
	ck_assert_ptr_null(strstr(err, "KKKK"));
	free(big);
	/* Visible ASCII only: the fault is named by its position, the secret never shown. */
	static const struct {
		const char *secret;
		size_t position;
	} bad[] = {
		{ "sk-LEAKa-first sk-LEAKa-second", 15 }, { "\tsk-LEAKb-after-tab", 1 },
		{ "sk-LEAKc-before-cr\r", 19 },           { "sk-LEAKd\x7fsk-LEAKd-del", 9 },
		{ "sk-LEAKe-\xc3\xa9-utf8", 10 },         { "sk-LEAKf-newline\n", 17 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *want =
		    textf("t.yaml:9:74: secret_env " KEY_ENV ": the secret has a byte that is not "
			  "visible ASCII (0x21..0x7e) at position %zu: a header cannot carry a "
			  "space, tab, control character or non-ASCII byte there",
			  bad[i].position);

		set_key(bad[i].secret);
		expect_error(yaml, want);
		ck_assert_ptr_null(strstr(err, "LEAK"));
		ck_assert_uint_eq(strlen(err), strlen(want));
	}
}
END_TEST

START_TEST(test_secret_file)
{
	char yaml[1024];
	char name[256];

	watch(KEY);
	/* Absolute, relative to the policy's directory, and below it; one newline stripped. */
	char abs_path[256];
	snprintf(abs_path, sizeof(abs_path), "%s", write_text("abs.key", KEY "\n"));
	snprintf(yaml, sizeof(yaml), INJ(BASE ", secret_file: %s"), abs_path);
	expect_ok(yaml);
	expect_secret(inject_of_a(), KEY);
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	write_text("sub/rel.key", KEY);
	snprintf(name, sizeof(name), "%s/p.yaml", dir);
	expect_ok_at(__LINE__, name, INJ(BASE ", secret_file: sub/rel.key"));
	expect_secret(inject_of_a(), KEY);
	/* The same through policy_load_file. */
	write_text("p.yaml", INJ(BASE ", secret_file: sub/rel.key"));
	policy_free(pol);
	pol = NULL;
	ck_assert_msg(policy_load_file(name, &cfg, &pol, err, sizeof(err)) == 0, "%s", err);
	expect_secret(inject_of_a(), KEY);
	/* A name without '/': from the working directory; at the root: from "/". */
	ck_assert_int_eq(chdir(dir), 0);
	expect_ok_at(__LINE__, "p.yaml", INJ(BASE ", secret_file: abs.key"));
	expect_secret(inject_of_a(), KEY);
	expect_error_at(__LINE__, "/p.yaml", INJ(BASE ", secret_file: nonexistent.key"),
			"/p.yaml:9:75: secret_file /nonexistent.key: open: No such file or "
			"directory");
	expect_error_at(
	    __LINE__, name, INJ(BASE ", secret_file: missing.key"),
	    textf("%s/p.yaml:9:75: secret_file %s/missing.key: open: No such file or directory",
		  dir, dir));
	/* A symbolic link is followed (secret mounts are links). */
	char link[256];
	snprintf(link, sizeof(link), "%s/link.key", dir);
	ck_assert_int_eq(symlink(abs_path, link), 0);
	snprintf(yaml, sizeof(yaml), INJ(BASE ", secret_file: %s"), link);
	expect_ok(yaml);
	expect_secret(inject_of_a(), KEY);
	/* Others may read it, or write it: refused, naming the file and its mode (through
	 * the link too: the file checked is the file read). */
	char want[512];
	static const struct {
		mode_t mode;
		const char *what;
	} open_modes[] = {
		{ 0644, "read" }, { 0640, "read" }, { 0604, "read" }, { 0620, "write" }
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(open_modes); i++) {
		ck_assert_int_eq(chmod(abs_path, open_modes[i].mode), 0);
		snprintf(want, sizeof(want),
			 "t.yaml:9:75: secret_file %s: mode %04o: group or others may %s it; chmod "
			 "600 it",
			 link, (unsigned)open_modes[i].mode, open_modes[i].what);
		expect_error(yaml, want);
	}
	ck_assert_int_eq(chmod(abs_path, 0600), 0);
	if (geteuid() == 0) {
		/* Another user's file, however private: refused. */
		ck_assert_int_eq(chown(abs_path, 65534, 65534), 0);
		snprintf(
		    want, sizeof(want),
		    "t.yaml:9:75: secret_file %s: owned by uid 65534; the daemon runs as uid 0: "
		    "chown it",
		    link);
		expect_error(yaml, want);
		ck_assert_int_eq(chown(abs_path, 0, 0), 0);
	} else {
		unit_skip("its other-owner case needs root");
	}
	expect_ok(yaml);
	/* Each load reads the file again. */
	static const char rotated[] = "sk-test-LEAKCHECK-rotated";
	watch(rotated);
	write_text("abs.key", rotated);
	expect_ok(yaml);
	expect_secret(inject_of_a(), rotated);
}
END_TEST

START_TEST(test_secret_file_path)
{
	/* The path: 1-4095 bytes without control characters, never shown when refused. */
	expect_error(INJ(BASE ", secret_file: \"\""),
		     "t.yaml:9:75: secret_file must be a path of 1-4095 bytes without control "
		     "characters");
	expect_error(INJ(BASE ", secret_file: \"/a\\nb\""),
		     "t.yaml:9:75: secret_file must be a path of 1-4095 bytes");
	expect_error(INJ(BASE ", secret_file: [a]"), "t.yaml:9:75: secret_file must be a string");
	char *p = repeat('p', POLICY_PATH_BYTES_MAX + 1);
	p[0] = '/';
	expect_error(textf(INJ(BASE ", secret_file: %s"), p),
		     "t.yaml:9:75: secret_file must be a path of 1-4095 bytes");
	p[POLICY_PATH_BYTES_MAX] = '\0';
	expect_error(textf(INJ(BASE ", secret_file: %s"), p), "t.yaml:9:75: secret_file /pppppppp");
	ck_assert_ptr_nonnull(strstr(err, ": open: File name too long"));
	free(p);
}
END_TEST

START_TEST(test_secret_file_kinds)
{
	char path[256];

	/* A directory, a FIFO (which must not block the load) and a device are not regular files. */
	snprintf(path, sizeof(path), "%s/fifo", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	const char *const irregular[] = { dir, path, "/dev/null" };
	for (size_t i = 0; i < AN_ARRAY_LEN(irregular); i++) {
		expect_error(
		    textf(INJ(BASE ", secret_file: %s"), irregular[i]),
		    textf("t.yaml:9:75: secret_file %s: not a regular file", irregular[i]));
	}
	/* Unreadable (when not root, who reads everything). */
	const char *locked = write_text("locked.key", KEY);
	watch(KEY);
	ck_assert_int_eq(chmod(locked, 0), 0);
	unit_dac_override(false); /* as root too: without the capabilities that read everything */
	expect_error(textf(INJ(BASE ", secret_file: %s"), locked),
		     textf("t.yaml:9:75: secret_file %s: open: Permission denied", locked));
	unit_dac_override(true);
	/* Empty, or only the newline: an empty secret. */
	static const char *const empty[] = { "", "\n" };
	for (size_t i = 0; i < AN_ARRAY_LEN(empty); i++) {
		const char *f = write_text("empty.key", empty[i]);
		expect_error(textf(INJ(BASE ", secret_file: %s"), f),
			     textf("t.yaml:9:75: secret_file %s: the secret is empty", f));
	}
	/* One newline only: a second one, or a CR before it, is a control character. */
	static const struct {
		const char *text;
		size_t position;
	} bad[] = { { "sk-LEAKg-two\n\n", 13 },
		    { "sk-LEAKh-crlf\r\n", 14 },
		    { "\nsk-LEAKi-lead", 1 },
		    { "sk-LEAKj a\n", 9 } };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *f = write_text("bad.key", bad[i].text);
		expect_error(textf(INJ(BASE ", secret_file: %s"), f),
			     textf("t.yaml:9:75: secret_file %s: the secret has a byte that is not "
				   "visible ASCII (0x21..0x7e) at position %zu",
				   f, bad[i].position));
		ck_assert_ptr_null(strstr(err, "LEAK"));
	}
}
END_TEST

START_TEST(test_secret_file_size)
{
	char yaml[1024];

	snprintf(yaml, sizeof(yaml), INJ(BASE ", secret_file: %s/s.key"), dir);
	/* 4096 bytes, with or without the newline, accepted. */
	char *k = repeat('K', POLICY_INJECT_SECRET_BYTES_MAX + 2);
	k[POLICY_INJECT_SECRET_BYTES_MAX] = '\n';
	write_file("s.key", k, POLICY_INJECT_SECRET_BYTES_MAX);
	expect_ok(yaml);
	ck_assert_uint_eq(inject_of_a()->secret_len, POLICY_INJECT_SECRET_BYTES_MAX);
	write_file("s.key", k, POLICY_INJECT_SECRET_BYTES_MAX + 1);
	expect_ok(yaml);
	ck_assert_uint_eq(inject_of_a()->secret_len, POLICY_INJECT_SECRET_BYTES_MAX);
	ck_assert_int_eq(inject_of_a()->secret[POLICY_INJECT_SECRET_BYTES_MAX - 1], 'K');
	ck_assert_int_eq(inject_of_a()->secret[POLICY_INJECT_SECRET_BYTES_MAX], '\0');
	/* 4097 bytes without a newline: a secret one byte too long. */
	k[POLICY_INJECT_SECRET_BYTES_MAX] = 'K';
	write_file("s.key", k, POLICY_INJECT_SECRET_BYTES_MAX + 1);
	expect_error(yaml, textf("t.yaml:9:75: secret_file %s/s.key: the secret is longer than "
				 "4096 bytes",
				 dir));
	/* 4098 bytes: the file is too large, whatever it ends with. */
	k[POLICY_INJECT_SECRET_BYTES_MAX + 1] = '\n';
	write_file("s.key", k, POLICY_INJECT_SECRET_BYTES_MAX + 2);
	expect_error(yaml, textf("t.yaml:9:75: secret_file %s/s.key: larger than 4097 bytes", dir));
	ck_assert_ptr_null(strstr(err, "KKKK"));
	free(k);
}
END_TEST

/* --- the placeholder against the secret -------------------------------------------------- */

START_TEST(test_overlap)
{
	static const char msg[] = "the placeholder and the secret must not equal or contain each "
				  "other: the sandbox holds the placeholder";
	static const struct {
		const char *placeholder;
		const char *secret;
		bool ok;
	} cases[] = {
		{ "sk-LEAKk-same", "sk-LEAKk-same", false },
		{ "LEAKl-mid", "sk-LEAKl-mid-rest", false }, /* in the secret */
		{ "sk-LEAKm", "sk-LEAKm-rest", false },      /* its start */
		{ "LEAKn-end", "sk-LEAKn-end", false },      /* its end */
		{ "ph-sk-LEAKo-ph", "sk-LEAKo", false },     /* the secret in the placeholder */
		{ "placeholder-sk-1", "sk-LEAKp-1", true },  /* sharing bytes is fine */
		{ "sk-LEAKq-samE", "sk-LEAKq-same", true },  /* compared exactly */
		{ "sk-LEAKr-same", "sk-LEAKr-sam", false },  /* one byte longer */
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		const char *yaml =
		    textf(INJ("header: X-Key, placeholder: %s, secret_env: " KEY_ENV),
			  cases[i].placeholder);

		set_key(cases[i].secret);
		if (cases[i].ok) {
			expect_ok(yaml);
			expect_secret(inject_of_a(), cases[i].secret);
			continue;
		}
		expect_error(yaml, at(yaml, cases[i].placeholder, msg));
		/* The secret is in the policy file here: the message still shows neither. */
		ck_assert_ptr_null(strstr(err, "LEAK"));
	}
}
END_TEST

START_TEST(test_shared_placeholder)
{
	char yaml[2048];

	static const char other[] = "sk-test-LEAKCHECK-other";
	set_key(KEY);
	ck_assert_int_eq(setenv("AGENTSNET_T_OTHER", other, 1), 0);
	watch(KEY);
	watch(other);
	write_text("same.key", KEY "\n");
	/* One key for two hosts, from the environment and from a file: the same secret. */
	snprintf(yaml, sizeof(yaml),
		 "version: 1\nprofiles:\n  p:\n    rules:\n"
		 "    - {host: a.test, tier: inject, owner: o, reason: r,\n"
		 "       inject: {" BASE ", secret_env: " KEY_ENV "}}\n"
		 "    - {host: b.test, tier: inject, owner: o, reason: r,\n"
		 "       inject: {" BASE ", secret_file: %s/same.key}}\n",
		 dir);
	expect_ok(yaml);
	expect_secret(decide(0, "b.test").inject, KEY);
	ck_assert_ptr_ne(decide(0, "a.test").inject, decide(0, "b.test").inject);
	/* Another secret behind the same placeholder is refused, naming the first rule. */
	static const char clash[] =
	    "version: 1\nprofiles:\n  p:\n    rules:\n"
	    "    - {host: a.test, tier: inject, owner: o, reason: r, id: first,\n"
	    "       inject: {" BASE ", secret_env: " KEY_ENV "}}\n"
	    "    - {host: c.test, tier: passthrough, owner: o, reason: r}\n"
	    "    - {host: b.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {header: Y, placeholder: placeholder-0001, secret_env: "
	    "AGENTSNET_T_OTHER}}\n";
	expect_error(clash, "t.yaml:9:41: the placeholder is also rule \"first\"'s (line 5), with "
			    "another secret: give each secret its own placeholder");
	/* In another profile it may: a sandbox holds one profile's placeholders. */
	static const char profiles[] =
	    "version: 1\nprofiles:\n  p:\n    rules:\n"
	    "    - {host: a.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {" BASE ", secret_env: " KEY_ENV "}}\n"
	    "  q:\n    rules:\n"
	    "    - {host: b.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {" BASE ", secret_env: AGENTSNET_T_OTHER}}\n"
	    "    - {host: c.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {header: X-Key, placeholder: placeholder-0002, secret_env: " KEY_ENV
	    "}}\n";
	expect_ok(profiles);
	expect_secret(decide(0, "a.test").inject, KEY);
	expect_secret(decide(1, "b.test").inject, other);
	expect_secret(decide(1, "c.test").inject, KEY);
	ck_assert_ptr_null(decide(1, "a.test").inject);
	/* The default ids of the second profile are named. */
	static const char second[] =
	    "version: 1\nprofiles:\n  p:\n    rules: []\n  q:\n    rules:\n"
	    "    - {host: a.test, tier: passthrough, owner: o, reason: r}\n"
	    "    - {host: b.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {" BASE ", secret_env: " KEY_ENV "}}\n"
	    "    - {host: c.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {" BASE ", secret_env: AGENTSNET_T_OTHER}}\n";
	expect_error(second, "t.yaml:11:45: the placeholder is also rule \"q/2\"'s (line 8)");
}
END_TEST

START_TEST(test_require)
{
	set_key(KEY);
	watch(KEY);
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV));
	ck_assert(inject_of_a()->require);
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV ", require: true"));
	ck_assert(inject_of_a()->require);
	expect_ok(INJ(BASE ", require: false, secret_env: " KEY_ENV));
	ck_assert(!inject_of_a()->require);
	static const char *const bad[] = { "yes", "no",       "True",    "FALSE", "1",
					   "0",   "\"true\"", "'false'", "on" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		expect_error(textf(INJ(BASE ", secret_env: " KEY_ENV ", require: %s"), bad[i]),
			     "t.yaml:9:100: require must be true or false");
	}
	expect_error(INJ(BASE ", secret_env: " KEY_ENV ", require: ~"),
		     "t.yaml:9:100: require must be true or false");
	expect_error(INJ(BASE ", secret_env: " KEY_ENV ", require: [true]"),
		     "t.yaml:9:100: require must be true or false");
}
END_TEST

/* upgrades: relayed by default; false refuses them; only a YAML boolean. */
START_TEST(test_upgrades)
{
	set_key(KEY);
	watch(KEY);
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV));
	ck_assert(inject_of_a()->upgrades);
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV ", upgrades: false"));
	ck_assert(!inject_of_a()->upgrades);
	ck_assert(inject_of_a()->require); /* the other default stands */
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV ", upgrades: true"));
	ck_assert(inject_of_a()->upgrades);
	expect_error(INJ(BASE ", secret_env: " KEY_ENV ", upgrades: no"),
		     "t.yaml:9:101: upgrades must be true or false");
}
END_TEST

/* The hosts whose leaves the engine mints at load: exact fake and inject hosts, in order. */
START_TEST(test_terminated_hosts)
{
	set_key(KEY);
	watch(KEY);
	expect_ok(
	    "version: 1\nprofiles:\n  p:\n    rules:\n"
	    "    - {host: a.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {header: x-key, placeholder: agentsnet-ph-0001, secret_env: " KEY_ENV
	    "}}\n"
	    "    - {host: b.test, tier: passthrough, owner: o, reason: r}\n"
	    "    - {host: \"*.c.test\", tier: fake, owner: o, reason: r, responses: [{status: "
	    "204}]}\n"
	    "  q:\n    rules:\n"
	    "    - {host: D.Test., tier: fake, owner: o, reason: r, responses: [{status: 204}]}\n");
	uint64_t cursor = 0;
	size_t len = 0;
	const char *h = policy_verdict_ops.terminated_host(pol, &cursor, &len);
	ck_assert_ptr_nonnull(h);
	ck_assert_str_eq(textf("%.*s", (int)len, h), "a.test");
	h = policy_verdict_ops.terminated_host(pol, &cursor, &len);
	ck_assert_ptr_nonnull(h);
	ck_assert_str_eq(textf("%.*s", (int)len, h), "d.test"); /* normalised; no wildcard */
	ck_assert_ptr_null(policy_verdict_ops.terminated_host(pol, &cursor, &len));
	ck_assert_ptr_null(policy_verdict_ops.terminated_host(pol, &cursor, &len));
}
END_TEST

/* --- upstream_ca -------------------------------------------------------------------------- */

/* An inject rule for a.test whose upstream_ca, on line 10, is <path> (at column 20). */
#define CA_RULE(path) INJ(BASE ", secret_env: " KEY_ENV) "      upstream_ca: " path "\n"

START_TEST(test_upstream_ca)
{
	char name[256];

	set_key(KEY);
	watch(KEY);
	expect_ok(INJ(BASE ", secret_env: " KEY_ENV));
	ck_assert_ptr_null(inject_of_a()->upstream_ca);
	/* Absolute; before or after inject and the tier; only checked, never read. */
	const char *ca = write_text("ca.pem", "");
	char abs_ca[256];
	snprintf(abs_ca, sizeof(abs_ca), "%s", ca);
	expect_ok(textf(CA_RULE("%s"), abs_ca));
	ck_assert_str_eq(inject_of_a()->upstream_ca, abs_ca);
	expect_ok(textf("version: 1\nprofiles:\n  p:\n    rules:\n    - upstream_ca: %s\n"
			"      inject: {" BASE ", secret_env: " KEY_ENV "}\n"
			"      host: a.test\n      tier: inject\n      owner: o\n      reason: r\n",
			abs_ca));
	ck_assert_str_eq(inject_of_a()->upstream_ca, abs_ca);
	/* Relative to the policy file's directory: the path the engine opens. */
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/certs", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	write_text("certs/corp.pem", "");
	snprintf(name, sizeof(name), "%s/p.yaml", dir);
	expect_ok_at(__LINE__, name, CA_RULE("certs/corp.pem"));
	ck_assert_str_eq(inject_of_a()->upstream_ca, textf("%s/certs/corp.pem", dir));
	/* A link is followed (/etc/ssl/certs is links). */
	char link[256];
	snprintf(link, sizeof(link), "%s/link.pem", dir);
	ck_assert_int_eq(symlink(abs_ca, link), 0);
	expect_ok(textf(CA_RULE("%s"), link));
	ck_assert_str_eq(inject_of_a()->upstream_ca, link);
}
END_TEST

START_TEST(test_upstream_ca_refused)
{
	char name[256];
	char link[256];

	set_key(KEY);
	watch(KEY);
	/* Missing, dangling, or not a regular file. */
	snprintf(name, sizeof(name), "%s/p.yaml", dir);
	expect_error_at(__LINE__, name, CA_RULE("missing.pem"),
			textf("%s/p.yaml:10:20: upstream_ca %s/missing.pem: stat: No such file or "
			      "directory",
			      dir, dir));
	snprintf(link, sizeof(link), "%s/dangling.pem", dir);
	ck_assert_int_eq(symlink("/nonexistent/ca.pem", link), 0);
	expect_error(textf(CA_RULE("%s"), link),
		     textf("t.yaml:10:20: upstream_ca %s: stat: No such file or directory", link));
	const char *const irregular[] = { dir, "/dev/null" };
	for (size_t i = 0; i < AN_ARRAY_LEN(irregular); i++) {
		expect_error(
		    textf(CA_RULE("%s"), irregular[i]),
		    textf("t.yaml:10:20: upstream_ca %s: not a regular file", irregular[i]));
	}
	expect_error(CA_RULE("\"\""),
		     "t.yaml:10:20: upstream_ca must be a path of 1-4095 bytes without control "
		     "characters");
	expect_error(CA_RULE("\"/a\\tb\""),
		     "t.yaml:10:20: upstream_ca must be a path of 1-4095 bytes");
	expect_error(CA_RULE("{}"), "t.yaml:10:20: upstream_ca must be a string");
	expect_error(textf(CA_RULE("%s") "      upstream_ca: /b\n", write_text("ca.pem", "")),
		     "t.yaml:11:7: duplicate key \"upstream_ca\" in a rule");
	/* 4095 bytes is a path the kernel refuses; 4096 is refused here. */
	char *p = repeat('p', POLICY_PATH_BYTES_MAX + 1);
	p[0] = '/';
	expect_error(textf(CA_RULE("%s"), p),
		     "t.yaml:10:20: upstream_ca must be a path of 1-4095 bytes");
	p[POLICY_PATH_BYTES_MAX] = '\0';
	expect_error(textf(CA_RULE("%s"), p), "t.yaml:10:20: upstream_ca /pppp");
	ck_assert_msg(strstr(err, ": stat: File name too long") != NULL, "%s", err);
	free(p);
}
END_TEST

/* --- the verdict ---------------------------------------------------------------------------- */

static const char second_key[] = "sk-test-LEAKCHECK-second";

/* Inject rules beside every other kind, in two profiles; returns the CA path (static). */
static const char *load_mixed(void)
{
	char yaml[2048];

	set_key(KEY);
	ck_assert_int_eq(setenv("AGENTSNET_T_SECOND", second_key, 1), 0);
	watch(KEY);
	watch(second_key);
	const char *ca = write_text("ca.pem", "");
	snprintf(
	    yaml, sizeof(yaml),
	    "version: 1\nprofiles:\n  p:\n    rules:\n"
	    "    - {host: a.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {" BASE ", prefix: \"Bearer \", secret_env: " KEY_ENV "}}\n"
	    "    - {host: b.test, tier: passthrough, owner: o, reason: r}\n"
	    "    - {host: \"*.c.test\", tier: inject, owner: o, reason: r, ports: [443],\n"
	    "       upstream_ca: %s,\n"
	    "       inject: {header: x-api-key, placeholder: placeholder-0002,\n"
	    "                secret_env: AGENTSNET_T_SECOND, require: false}}\n"
	    "    - {host: 192.0.2.1, tier: inject, owner: o, reason: r,\n"
	    "       inject: {" BASE ", secret_env: " KEY_ENV "}}\n"
	    "    - {host: d.test, tier: deny, owner: o, reason: r}\n"
	    "    - {host: e.test, tier: fake, owner: o, reason: r, responses: [{status: 200}]}\n"
	    "    - {host: f.test, tier: local, upstream: \"127.0.0.1:1\", owner: o, reason: r}\n"
	    "  q:\n    rules:\n"
	    "    - {host: a.test, tier: inject, owner: o, reason: r,\n"
	    "       inject: {header: X-Other, placeholder: placeholder-0003, "
	    "secret_env: AGENTSNET_T_SECOND}}\n",
	    ca);
	expect_ok(yaml);
	ck_assert_uint_eq(policy_rule_count(pol), 8);
	return ca;
}

START_TEST(test_verdict_inject)
{
	const char *ca = load_mixed();
	struct verdict v = decide(0, "A.TEST.");
	ck_assert_int_eq(v.tier, TIER_INJECT);
	ck_assert_uint_eq(v.rule_index, 0);
	const struct verdict_inject *a = v.inject;
	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(a->header, "X-Key");
	ck_assert_uint_eq(a->header_len, 5);
	ck_assert_str_eq(a->prefix, "Bearer ");
	ck_assert_uint_eq(a->prefix_len, 7);
	ck_assert_str_eq(a->placeholder, "placeholder-0001");
	ck_assert_uint_eq(a->placeholder_len, 16);
	expect_secret(a, KEY);
	ck_assert_ptr_null(a->upstream_ca);
	ck_assert(a->require);
	ck_assert_ptr_null(v.fake);
	ck_assert_ptr_null(v.upstream);
	ck_assert_int_eq(verdict_refusal(&v), REASON_NONE);
	/* The verdict borrows the snapshot: the same pointer every time. */
	ck_assert_ptr_eq(decide(0, "a.test").inject, a);
	v = decide(0, "x.y.c.test");
	ck_assert_int_eq(v.tier, TIER_INJECT);
	ck_assert_str_eq(v.inject->header, "x-api-key");
	ck_assert_str_eq(v.inject->prefix, "");
	expect_secret(v.inject, second_key);
	ck_assert_str_eq(v.inject->upstream_ca, ca);
	ck_assert(!v.inject->require);
	ck_assert_ptr_eq(decide(0, "3221225985").inject, decide(0, "192.0.2.1").inject);
	expect_secret(decide(0, "192.0.2.1").inject, KEY);
	v = decide(1, "a.test");
	ck_assert_str_eq(v.inject->header, "X-Other");
	expect_secret(v.inject, second_key);
}
END_TEST

START_TEST(test_verdict_no_inject)
{
	struct verdict v;

	load_mixed();
	/* Every other verdict carries none: other tiers, refusals, no rule. */
	static const struct {
		uint32_t profile;
		const char *host;
		uint16_t port;
	} none[] = {
		{ 0, "b.test", 443 },    { 0, "d.test", 443 },     { 0, "e.test", 443 },
		{ 0, "f.test", 443 },    { 0, "nope.test", 443 },  { 0, "c.test", 443 },
		{ 0, "x.c.test", 80 },   { 0, "dns.google", 443 }, { 1, "b.test", 443 },
		{ 0, "bad..host", 443 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(none); i++) {
		v = decide_port(none[i].profile, none[i].host, none[i].port);
		ck_assert_msg(v.tier != TIER_INJECT, "%s", none[i].host);
		ck_assert_msg(v.inject == NULL, "%s: inject set", none[i].host);
	}
	ck_assert_int_eq(decide_port(0, "x.c.test", 80).reason, REASON_PORT_NOT_ALLOWED);
	/* An inject rule without ports sends its credential to 443 only (issue 17 item 6). */
	ck_assert_int_eq(decide_port(0, "a.test", 443).tier, TIER_INJECT);
	static const uint16_t elsewhere[] = { 80, 444, 8443, 22, 1 };
	for (size_t i = 0; i < AN_ARRAY_LEN(elsewhere); i++) {
		v = decide_port(0, "a.test", elsewhere[i]);
		ck_assert_msg(v.inject == NULL, "a.test:%u: inject set", elsewhere[i]);
		ck_assert_int_eq(v.reason, REASON_PORT_NOT_ALLOWED);
		ck_assert_ptr_null(decide_port(0, "192.0.2.1", elsewhere[i]).inject);
	}
	ck_assert_ptr_nonnull(decide(0, "e.test").fake);
}
END_TEST

/* A head carrying a placeholder of the profile where its rule does not send it (item 7). */
START_TEST(test_placeholder_elsewhere)
{
	const struct verdict_ops *ops = &policy_verdict_ops;

	load_mixed();
	const struct verdict_inject *a = decide(0, "a.test").inject;
	const struct verdict_inject *ip = decide(0, "192.0.2.1").inject;
	const struct verdict_inject *c = decide(0, "x.c.test").inject;
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(c);
	static const char in_query[] = "GET /x?k=placeholder-0002 HTTP/1.1\r\nHost: b.test\r\n\r\n";
	static const char in_header[] =
	    "GET / HTTP/1.1\r\nHost: e.test\r\nX-Key: Bearer placeholder-0001\r\n\r\n";
	static const char other_profile[] = "GET / HTTP/1.1\r\nX-Other: placeholder-0003\r\n\r\n";
	static const char none[] = "GET /placeholder-000 HTTP/1.1\r\nX-Key: placeholder\r\n\r\n";
	/* To a host without an inject rule (passthrough, fake): elsewhere. */
	ck_assert(ops->placeholder_elsewhere(pol, 0, in_query, strlen(in_query), NULL));
	ck_assert(ops->placeholder_elsewhere(pol, 0, in_header, strlen(in_header), NULL));
	/* To the rule that gives it: its own; to another inject rule's host: elsewhere. */
	ck_assert(!ops->placeholder_elsewhere(pol, 0, in_query, strlen(in_query), c));
	ck_assert(ops->placeholder_elsewhere(pol, 0, in_query, strlen(in_query), a));
	ck_assert(ops->placeholder_elsewhere(pol, 0, in_header, strlen(in_header), c));
	/* a.test and 192.0.2.1 give the same placeholder: each is the other's own. */
	ck_assert(!ops->placeholder_elsewhere(pol, 0, in_header, strlen(in_header), a));
	ck_assert(!ops->placeholder_elsewhere(pol, 0, in_header, strlen(in_header), ip));
	/* A sandbox holds its own profile's placeholders: q's is not p's, nor p's q's. */
	ck_assert(!ops->placeholder_elsewhere(pol, 0, other_profile, strlen(other_profile), NULL));
	ck_assert(ops->placeholder_elsewhere(pol, 1, other_profile, strlen(other_profile), NULL));
	ck_assert(!ops->placeholder_elsewhere(pol, 1, in_query, strlen(in_query), NULL));
	/* Parts of one are not one; the length bounds the scan. */
	ck_assert(!ops->placeholder_elsewhere(pol, 0, none, strlen(none), NULL));
	ck_assert(!ops->placeholder_elsewhere(pol, 0, in_query, 20, NULL));
	ck_assert(ops->placeholder_elsewhere(pol, 0, in_query, 25, NULL));
}
END_TEST

/* --- the secret's memory ---------------------------------------------------------------------- */

START_TEST(test_secret_wiped)
{
	static const char file_key[] = "sk-test-LEAKCHECK-file";
	char yaml[1024];

	set_key(KEY);
	watch(KEY);
	watch(file_key);
	write_text("f.key", "sk-test-LEAKCHECK-file\n");
	snprintf(yaml, sizeof(yaml),
		 "version: 1\nprofiles:\n  p:\n    rules:\n"
		 "    - {host: a.test, tier: inject, owner: o, reason: r,\n"
		 "       inject: {" BASE ", secret_env: " KEY_ENV "}}\n"
		 "    - {host: b.test, tier: inject, owner: o, reason: r,\n"
		 "       inject: {header: X-Key, placeholder: placeholder-0002, secret_file: "
		 "%s/f.key}}\n"
		 "  q:\n    rules:\n"
		 "    - {host: a.test, tier: inject, owner: o, reason: r,\n"
		 "       inject: {" BASE ", secret_env: " KEY_ENV "}}\n",
		 dir);
	/* Freeing the policy wipes every secret it holds, each in its own buffer. */
	expect_ok(yaml);
	ck_assert_ptr_ne(decide(0, "a.test").inject->secret, decide(1, "a.test").inject->secret);
	ck_assert_uint_eq(wipes[0], 0);
	policy_free(pol);
	pol = NULL;
	ck_assert_uint_eq(wipes[0], 2);
	ck_assert_uint_eq(wipes[1], 1);
	/* So does a failed load, for the secrets it had read. */
	memset(wipes, 0, sizeof(wipes));
	char failing[1100];
	snprintf(failing, sizeof(failing), "%s    - {host: c.test, tier: inject, owner: o}\n",
		 yaml);
	expect_error(failing, "t.yaml:13:7: missing mandatory key \"reason\" in a rule");
	ck_assert_uint_eq(wipes[0], 2);
	ck_assert_uint_eq(wipes[1], 1);
	/* A secret refused after it was read from a file is wiped before it is freed. */
	memset(wipes, 0, sizeof(wipes));
	write_text("f.key", "sk-test-LEAKCHECK-file \n");
	expect_error(yaml, "t.yaml:8:76: secret_file");
	ck_assert_ptr_nonnull(strstr(err, "at position 23"));
	/* (pool_free checks that no buffer released unwiped held a watched secret.) */
}
END_TEST

/* The docs' example of the section loads and decides as it says. */
START_TEST(test_docs_example)
{
	char *yaml = docs_policy("### Rule `inject`");
	char sub[128];

	snprintf(sub, sizeof(sub), "%s/secrets", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	watch("sk-openai-LEAK");
	watch("sk-ant-LEAK");
	watch("gw-LEAK-token");
	write_text("secrets/anthropic.key", "sk-ant-LEAK\n");
	write_text("secrets/gateway.token", "gw-LEAK-token");
	write_text("corp-ca.pem", "");
	/* Without the variable: the message the page shows. */
	ck_assert_int_eq(unsetenv("OPENAI_API_KEY"), 0);
	char name[256];
	snprintf(name, sizeof(name), "%s/policy.yaml", dir);
	ck_assert_int_eq(load_named("policy.yaml", yaml), -EINVAL);
	ck_assert_str_eq(err, "policy.yaml:13:23: secret_env OPENAI_API_KEY: the daemon's "
			      "environment has no such variable");
	/* The page shows it, once its lines are joined and its runs of spaces folded. */
	char *flat = docs_text();
	for (char *c = flat; *c != '\0'; c++) {
		if (*c == '\n')
			*c = ' ';
	}
	for (char *c = strstr(flat, "  "); c != NULL; c = strstr(c, "  "))
		memmove(c, c + 1, strlen(c));
	ck_assert_msg(strstr(flat, err) != NULL, "docs/policy.md does not show \"%s\"", err);
	pool_free(flat);
	ck_assert_int_eq(setenv("OPENAI_API_KEY", "sk-openai-LEAK", 1), 0);
	expect_ok_at(__LINE__, name, yaml);
	free(yaml);
	const struct verdict_inject *vi = decide(0, "api.openai.com").inject;
	ck_assert_str_eq(vi->header, "Authorization");
	ck_assert_str_eq(vi->prefix, "Bearer ");
	ck_assert_str_eq(vi->placeholder, "agentsnet-placeholder-openai");
	expect_secret(vi, "sk-openai-LEAK");
	ck_assert(vi->require);
	ck_assert_ptr_null(vi->upstream_ca);
	vi = decide(0, "api.anthropic.com").inject;
	ck_assert_str_eq(vi->header, "x-api-key");
	ck_assert_str_eq(vi->prefix, "");
	expect_secret(vi, "sk-ant-LEAK");
	ck_assert(!vi->require);
	vi = decide(0, "models.corp.example").inject;
	ck_assert_str_eq(vi->placeholder, "agentsnet-placeholder-gateway");
	expect_secret(vi, "gw-LEAK-token");
	ck_assert_str_eq(vi->upstream_ca, textf("%s/corp-ca.pem", dir));
	ck_assert_ptr_null(decide_port(0, "models.corp.example", 80).inject);
}
END_TEST

/* Every allocation of a load with inject rules fails in turn: -ENOMEM, nothing leaked or kept. */
START_TEST(test_allocation_failures)
{
	char yaml[1024];

	set_key(KEY);
	watch(KEY);
	write_text("f.key", "sk-test-LEAKCHECK-file\n");
	watch("sk-test-LEAKCHECK-file");
	const char *ca = write_text("ca.pem", "");
	snprintf(yaml, sizeof(yaml),
		 "version: 1\nprofiles:\n  p:\n    rules:\n"
		 "    - {host: a.test, tier: inject, owner: o, reason: r, upstream_ca: %s,\n"
		 "       inject: {" BASE ", prefix: \"Bearer \", secret_env: " KEY_ENV "}}\n"
		 "    - {host: b.test, tier: inject, owner: o, reason: r,\n"
		 "       inject: {header: X-Key, placeholder: placeholder-0002, secret_file: "
		 "%s/f.key}}\n",
		 ca, dir);
	uint64_t total = count_allocations(yaml);
	ck_assert_uint_gt(total, 20);
	for (uint64_t n = 1; n <= total; n++) {
		memset(wipes, 0, sizeof(wipes));
		int rc = load_failing(n, yaml);
		if (rc == 0) {
			/* Only a shrinking realloc may fail without failing the load. */
			expect_secret(decide(0, "b.test").inject, "sk-test-LEAKCHECK-file");
			continue;
		}
		expect_out_of_memory(n, rc);
		/* Whatever was read was wiped: one buffer each at most. */
		ck_assert_uint_le(wipes[0], 1);
		ck_assert_uint_le(wipes[1], 1);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy/inject");
	TCase *tc = tcase_create("inject");

	tcase_add_checked_fixture(tc, setup, policytest_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_tier_needs_inject);
	tcase_add_test(tc, test_header);
	tcase_add_test(tc, test_header_refused);
	tcase_add_test(tc, test_prefix);
	tcase_add_test(tc, test_placeholder);
	tcase_add_test(tc, test_secret_env);
	tcase_add_test(tc, test_secret_bytes);
	tcase_add_test(tc, test_secret_file);
	tcase_add_test(tc, test_secret_file_path);
	tcase_add_test(tc, test_secret_file_kinds);
	tcase_add_test(tc, test_secret_file_size);
	tcase_add_test(tc, test_overlap);
	tcase_add_test(tc, test_shared_placeholder);
	tcase_add_test(tc, test_require);
	tcase_add_test(tc, test_upgrades);
	tcase_add_test(tc, test_terminated_hosts);
	tcase_add_test(tc, test_upstream_ca);
	tcase_add_test(tc, test_upstream_ca_refused);
	tcase_add_test(tc, test_verdict_inject);
	tcase_add_test(tc, test_verdict_no_inject);
	tcase_add_test(tc, test_placeholder_elsewhere);
	tcase_add_test(tc, test_secret_wiped);
	tcase_add_test(tc, test_docs_example);
	tcase_add_test(tc, test_allocation_failures);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
