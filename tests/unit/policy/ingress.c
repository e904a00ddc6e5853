/*
 * policy/ingress.c and policy/daemon.c, the ingress gateway's two sections: daemon.ingress
 * (listen, public_url, prefix, tls.cert and tls.key: each at its limit N and
 * N+1, every refusal with its exact "file:line:col: message", listen required
 * by the others, the config staged so a failed load changes nothing) and a
 * profile's
 * `ingress` (enabled, methods, strip_headers, body_bytes, limits: bounds,
 * duplicates, unknown keys, the defaults), what profile_ingress returns for
 * each profile, the built-in policy's gateway (and ingress_optional, which
 * only it sets), the docs' examples, and every allocation failing in turn.
 */
#include "../../../policy/ingress.c"

#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

#define MINIMAL "version: 1\nprofiles:\n  p:\n    rules: []\n"
/* daemon.ingress in flow style: DAEMON(x) is "daemon: {ingress: {x}}" on line 5. */
#define DAEMON(fields) MINIMAL "daemon: {ingress: {" fields "}}\n"
/* daemon.ingress.tls after a listen, flow style, on line 5: its '{' is at column 49. */
#define TLS(fields) DAEMON("listen: \"0.0.0.0:8443\", tls: {" fields "}")
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
}

/* A policy refused at the first <needle> of its text with <msg>. */
struct refusal {
	const char *yaml;
	const char *needle;
	const char *msg;
};

/* Each of the <n> policies of <cases> is refused as it says. */
static void expect_refusals(const struct refusal *cases, size_t n)
{
	for (size_t i = 0; i < n; i++)
		expect_error_at_needle(cases[i].yaml, cases[i].needle, cases[i].msg);
}

/* cfg's daemon.ingress listen, public_url and prefix (NULL: unset). */
static void expect_daemon(const char *listen, const char *public_url, const char *prefix)
{
	ck_assert_pstr_eq(cfg.ingress_listen, listen);
	ck_assert_pstr_eq(cfg.ingress_public_url, public_url);
	ck_assert_pstr_eq(cfg.ingress_prefix, prefix);
}

/* cfg's daemon.ingress.tls cert and key (NULL: unset). */
static void expect_tls(const char *cert, const char *key)
{
	ck_assert_pstr_eq(cfg.ingress_tls_cert, cert);
	ck_assert_pstr_eq(cfg.ingress_tls_key, key);
}

/* Each of the <n> values of <ok> as daemon.ingress.<key> (quoted, after a listen) loads as is. */
static void expect_daemon_values(const char *key, const char *const *ok, size_t n,
				 char *const *stored)
{
	for (size_t i = 0; i < n; i++) {
		expect_ok(textf(DAEMON("listen: \"0.0.0.0:8090\", %s: \"%s\""), key, ok[i]));
		ck_assert_str_eq(*stored, ok[i]);
	}
}

/* A value of a daemon.ingress key that is refused, and why. */
struct bad_value {
	const char *value;
	const char *why;
};

/*
 * Each of the <n> values of <bad> as daemon.ingress.<key> (quoted, after a
 * listen) is refused at the value with "invalid ingress.<key> "<shown>":
 * <why>", <shown> being shown(value): the value as the message shows it.
 */
static void expect_daemon_refused(const char *key, const struct bad_value *bad, size_t n,
				  const char *(*shown)(const char *value))
{
	for (size_t i = 0; i < n; i++) {
		const char *yaml =
		    textf(DAEMON("listen: \"0.0.0.0:8090\", %s: \"%s\""), key, bad[i].value);

		expect_error_at_needle(
		    yaml, textf("\"%s\"", bad[i].value),
		    textf("invalid ingress.%s \"%s\": %s", key, shown(bad[i].value), bad[i].why));
	}
}

/* --- daemon.ingress ---------------------------------------------------------------------- */

START_TEST(test_daemon_absent)
{
	expect_ok(MINIMAL);
	expect_daemon(NULL, NULL, "/callbacks");
	ck_assert(!cfg.ingress_optional);
	/* listen alone: the prefix keeps its default, the URL stays for the engine to make. */
	expect_ok(DAEMON("listen: \"0.0.0.0:8090\""));
	expect_daemon("0.0.0.0:8090", NULL, "/callbacks");
	ck_assert(!cfg.ingress_optional);
	/* Block style, every key. */
	expect_ok(MINIMAL "daemon:\n  ingress:\n    listen: \"[::]:443\"\n"
			  "    public_url: https://hooks.example.com\n    prefix: /hooks/v1\n");
	expect_daemon("[::]:443", "https://hooks.example.com", "/hooks/v1");
}
END_TEST

START_TEST(test_daemon_listen)
{
	static const struct {
		const char *value;
		const char *stored;
	} ok[] = {
		{ "\"0.0.0.0:1\"", "0.0.0.0:1" },
		{ "\"0.0.0.0:65535\"", "0.0.0.0:65535" },
		{ "\"127.0.0.1:8090\"", "127.0.0.1:8090" },
		{ "\"192.0.2.7:80\"", "192.0.2.7:80" },
		{ "\"10.1.2.3:8443\"", "10.1.2.3:8443" },
		{ "\"[::]:8090\"", "[::]:8090" },
		{ "\"[2001:DB8:0::1]:443\"", "[2001:db8::1]:443" },
		{ "\"[::1]:9\"", "[::1]:9" },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(ok); i++) {
		expect_ok(textf(DAEMON("listen: %s"), ok[i].value));
		ck_assert_str_eq(cfg.ingress_listen, ok[i].stored);
	}
	static const struct {
		const char *value;
		const char *msg;
	} bad[] = {
		{ "\"0.0.0.0:0\"",
		  "invalid ingress.listen \"0.0.0.0:0\": the port must be 1..65535" },
		{ "\"0.0.0.0:65536\"",
		  "invalid ingress.listen \"0.0.0.0:65536\": the port must be 1..65535" },
		{ "\"0.0.0.0\"", "invalid ingress.listen \"0.0.0.0\": the port is missing" },
		{ "\"[::]\"", "invalid ingress.listen \"[::]\": the port is missing" },
		{ "\"gw.example.com:80\"",
		  "invalid ingress.listen \"gw.example.com:80\": not an IPv4 or IPv6 address" },
		{ "\"[192.0.2.1]:80\"",
		  "invalid ingress.listen \"[192.0.2.1]:80\": brackets are for IPv6 addresses" },
		{ "\"224.0.0.1:80\"", "ingress.listen cannot be a multicast address, which takes "
				      "no connections: name a local address, or 0.0.0.0 or [::] "
				      "for all" },
		{ "\"[ff02::1]:80\"", "ingress.listen cannot be a multicast address" },
		{ "8090", "invalid ingress.listen \"8090\": not an IPv4 or IPv6 address" },
		{ "[a]", "ingress.listen must be a string" },
		{ "~", "ingress.listen must be a string" },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *yaml = textf(DAEMON("listen: %s"), bad[i].value);
		expect_error_at_needle(yaml, bad[i].value, bad[i].msg);
	}
}
END_TEST

/* The message shows a public_url as loaded: escapes resolved, bytes outside ASCII '?'. */
static const char *url_shown(const char *value)
{
	return strstr(value, "\\t")       ? "https://gw.example.com?"
	       : strstr(value, "\\u00fc") ? "https://b??cher.example"
					  : value;
}

START_TEST(test_daemon_public_url)
{
	static const char *const ok[] = {
		"http://gw.example.com",
		"https://gw.example.com:8443",
		"https://192.0.2.1",
		"http://[2001:db8::1]:8090",
		"https://xn--bcher-kva.example",
		"https://a_b~c-d.example:1",
		"https://gw:65535",
	};
	expect_daemon_values("public_url", ok, AN_ARRAY_LEN(ok), &cfg.ingress_public_url);
	static const struct bad_value bad[] = {
		{ "https://gw.example.com/",
		  "drop the trailing '/': agents get <public_url><prefix>/<sandbox id>" },
		{ "https://gw.example.com/hooks",
		  "no path: the path agents get is ingress.prefix" },
		{ "https://gw.example.com/a/", "no path: the path agents get is ingress.prefix" },
		{ "https://gw.example.com?a=1", "no query (\"?...\")" },
		{ "https://gw.example.com#top", "no fragment (\"#...\")" },
		{ "https://user@gw.example.com",
		  "no user information (\"user@\"): the URL is handed to third parties" },
		{ "https://gw example.com", "a space, control character or non-ASCII byte (write "
					    "a name in its xn-- form)" },
		{ "https://gw.example.com\\t", "a space, control character or non-ASCII byte" },
		{ "https://b\\u00fccher.example", "a space, control character or non-ASCII byte" },
		{ "ftp://gw.example.com", "it must start with http:// or https://" },
		{ "HTTPS://gw.example.com", "it must start with http:// or https://" },
		{ "gw.example.com", "it must start with http:// or https://" },
		{ "", "it must start with http:// or https://" },
		{ "https://", "the host is missing" },
		{ "https://:443", "the host is empty" },
		{ "https://gw:0", "the port must be 1..65535" },
		{ "https://gw:65536", "the port must be 1..65535" },
		{ "https://gw:", "the port must be 1..65535" },
		{ "https://2001:db8::1",
		  "an IPv6 address goes in brackets (\"http://[2001:db8::1]:8090\")" },
		{ "https://[192.0.2.1]", "brackets hold an IPv6 address" },
		{ "https://[::1", "'[' without ']'" },
		{ "https://[::1]x", "expected ':' after ']'" },
		{ "https://g%41", "a byte that is not part of a host name" },
	};
	expect_daemon_refused("public_url", bad, AN_ARRAY_LEN(bad), url_shown);
	expect_error_at_needle(DAEMON("listen: \"0.0.0.0:8090\", public_url: 443"), "443",
			       "invalid ingress.public_url \"443\": it must start with http:// or "
			       "https://");
	expect_error_at_needle(DAEMON("listen: \"0.0.0.0:8090\", public_url: {}"), "{}",
			       "ingress.public_url must be a string");
}
END_TEST

/* A public_url of exactly <len> bytes: "https://" and a host of letters. */
static char *url_of(size_t len)
{
	char *url = repeat('a', len);

	memcpy(url, "https://", 8);
	return url;
}

START_TEST(test_daemon_public_url_limit)
{
	char *url = url_of(POLICY_INGRESS_PUBLIC_URL_BYTES_MAX);

	ck_assert_uint_eq(POLICY_INGRESS_PUBLIC_URL_BYTES_MAX, 2048);
	expect_ok(textf(DAEMON("listen: \"0.0.0.0:1\", public_url: %s"), url));
	ck_assert_uint_eq(strlen(cfg.ingress_public_url), 2048);
	free(url);
	url = url_of(POLICY_INGRESS_PUBLIC_URL_BYTES_MAX + 1);
	const char *yaml = textf(DAEMON("listen: \"0.0.0.0:1\", public_url: %s"), url);
	expect_error_at_needle(yaml, "https", "ingress.public_url is longer than 2048 bytes");
	free(url);
}
END_TEST

/* The message shows a prefix as loaded: the one escape resolved. */
static const char *prefix_shown(const char *value)
{
	return strcmp(value, "/a\\\\b") == 0 ? "/a\\b" : value;
}

START_TEST(test_daemon_prefix)
{
	static const char *const ok[] = {
		"/callbacks",      "/a",   "/hooks/v1", "/.well-known/hooks",
		"/a.b/c~d_e-f/G9", "/...", "/..a",      "/a..",
	};
	expect_daemon_values("prefix", ok, AN_ARRAY_LEN(ok), &cfg.ingress_prefix);
	static const struct bad_value bad[] = {
		{ "callbacks", "it must start with '/' (\"/callbacks\")" },
		{ "", "it must start with '/' (\"/callbacks\")" },
		{ "/", "name a path below the root (\"/callbacks\")" },
		{ "/callbacks/",
		  "drop the trailing '/': agents get <public_url><prefix>/<sandbox id>" },
		{ "//a", "an empty segment (\"//\")" },
		{ "/a//b", "an empty segment (\"//\")" },
		{ "/.", "a \".\" or \"..\" segment" },
		{ "/..", "a \".\" or \"..\" segment" },
		{ "/a/./b", "a \".\" or \"..\" segment" },
		{ "/a/../b", "a \".\" or \"..\" segment" },
		{ "/a/..", "a \".\" or \"..\" segment" },
		{ "/a%2Fb", "a byte outside [A-Za-z0-9._~-] in a segment" },
		{ "/a b", "a byte outside [A-Za-z0-9._~-] in a segment" },
		{ "/a?b", "a byte outside [A-Za-z0-9._~-] in a segment" },
		{ "/a\\\\b", "a byte outside [A-Za-z0-9._~-] in a segment" },
	};
	expect_daemon_refused("prefix", bad, AN_ARRAY_LEN(bad), prefix_shown);
	expect_error_at_needle(DAEMON("listen: \"0.0.0.0:8090\", prefix: [a]"), "[a]",
			       "ingress.prefix must be a string");
	/* 256 bytes accepted, 257 refused. */
	char *p = repeat('p', POLICY_INGRESS_PREFIX_BYTES_MAX + 1);
	p[0] = '/';
	p[POLICY_INGRESS_PREFIX_BYTES_MAX] = '\0';
	ck_assert_uint_eq(POLICY_INGRESS_PREFIX_BYTES_MAX, 256);
	expect_ok(textf(DAEMON("listen: \"0.0.0.0:8090\", prefix: %s"), p));
	ck_assert_uint_eq(strlen(cfg.ingress_prefix), 256);
	p[POLICY_INGRESS_PREFIX_BYTES_MAX] = 'p';
	const char *yaml = textf(DAEMON("listen: \"0.0.0.0:8090\", prefix: %s"), p);
	expect_error_at_needle(yaml, "/ppp", "ingress.prefix is longer than 256 bytes");
	free(p);
}
END_TEST

START_TEST(test_daemon_keys)
{
	static const struct refusal cases[] = {
		{ DAEMON("public_url: https://gw.example.com"), "public_url",
		  "ingress.public_url needs ingress.listen (the ip:port the gateway listens on)" },
		{ DAEMON("prefix: /hooks"), "prefix",
		  "ingress.prefix needs ingress.listen (the ip:port the gateway listens on)" },
		{ DAEMON("prefix: /hooks, public_url: https://gw.example.com"), "public_url",
		  "ingress.public_url needs ingress.listen" },
		{ DAEMON(""), "{}", "missing mandatory key \"listen\" in daemon.ingress" },
		{ DAEMON("listen: \"0.0.0.0:1\", port: 2"), "port",
		  "unknown key \"port\" in daemon.ingress (expected one of: listen, public_url, "
		  "prefix, tls)" },
		{ DAEMON("listen: \"0.0.0.0:1\", listen: \"0.0.0.0:2\""), "listen: \"0.0.0.0:2",
		  "duplicate key \"listen\" in daemon.ingress" },
		{ DAEMON("listen: \"0.0.0.0:1\", prefix: /a, prefix: /b"), "prefix: /b",
		  "duplicate key \"prefix\" in daemon.ingress" },
		{ MINIMAL "daemon: {ingress: \"0.0.0.0:8090\"}\n", "\"0.0.0.0",
		  "ingress must be a mapping" },
		{ MINIMAL "daemon: {ingress: {listen: \"0.0.0.0:1\"}, ingress: {listen: "
			  "\"0.0.0.0:2\"}}\n",
		  "ingress: {listen: \"0.0.0.0:2", "duplicate key \"ingress\" in daemon" },
		{ MINIMAL "daemon: {gateway: {}}\n", "gateway",
		  "unknown key \"gateway\" in daemon (expected one of: socket_dir, audit_log, "
		  "workers, conns_per_worker, pipes_per_worker, sandbox_share_percent, "
		  "sandbox_completions_per_turn, tcp_listen, tcp_sandbox, timeouts, control_group, "
		  "ca, leaf_days, ingress, sandbox_uids, sandboxes_per_user)" },
	};

	expect_refusals(cases, AN_ARRAY_LEN(cases));
}
END_TEST

START_TEST(test_daemon_tls)
{
	/* No tls: plain HTTP, nothing stored. */
	expect_ok(DAEMON("listen: \"0.0.0.0:8090\""));
	expect_tls(NULL, NULL);
	expect_ok(TLS("cert: /etc/an/hooks.pem, key: /etc/an/hooks.key"));
	ck_assert_str_eq(cfg.ingress_listen, "0.0.0.0:8443");
	expect_tls("/etc/an/hooks.pem", "/etc/an/hooks.key");
	/* The URL stays unset: https://<listen> is the engine's to make. */
	ck_assert_ptr_null(cfg.ingress_public_url);
	/* Nothing is read: the files need not exist. Block style, either order, every key. */
	expect_ok(MINIMAL "daemon:\n  ingress:\n    listen: \"[::]:443\"\n"
			  "    public_url: https://hooks.example.com\n    prefix: /h\n"
			  "    tls:\n      key: /nonexistent/k\n      cert: /nonexistent/c\n");
	expect_tls("/nonexistent/c", "/nonexistent/k");
	ck_assert_str_eq(cfg.ingress_public_url, "https://hooks.example.com");
	/* The same file for both (a PEM holding the chain and the key) is fine. */
	expect_ok(TLS("cert: /etc/an/all.pem, key: /etc/an/all.pem"));
	expect_tls("/etc/an/all.pem", "/etc/an/all.pem");
}
END_TEST

START_TEST(test_daemon_tls_refused)
{
	static const struct refusal bad[] = {
		{ TLS("cert: hooks.pem, key: /k"), "hooks.pem",
		  "ingress.tls.cert must be an absolute path" },
		{ TLS("cert: ./hooks.pem, key: /k"), "./hooks",
		  "ingress.tls.cert must be an absolute path" },
		{ TLS("cert: /c, key: \"-\""), "\"-\"",
		  "ingress.tls.key must be an absolute path" },
		{ TLS("cert: /c, key: \"\""), "\"\"", "ingress.tls.key must be an absolute path" },
		{ TLS("cert: \"/a\\nb\", key: /k"), "\"/a",
		  "ingress.tls.cert must be at most 4095 bytes without control characters" },
		{ TLS("cert: /c, key: \"/k\\tx\""), "\"/k",
		  "ingress.tls.key must be at most 4095 bytes without control characters" },
		{ TLS("cert: [/c], key: /k"), "[/c]", "ingress.tls.cert must be a string" },
		{ TLS("cert: /c, key: ~"), "~", "ingress.tls.key must be a string" },
		{ TLS("cert: /c, key: {a: 1}"), "{a: 1}", "ingress.tls.key must be a string" },
		{ TLS("cert: /c, key: /k, chain: /i"), "chain",
		  "unknown key \"chain\" in daemon.ingress.tls (expected one of: cert, key)" },
		{ TLS("cert: /c, cert: /d, key: /k"), "cert: /d",
		  "duplicate key \"cert\" in daemon.ingress.tls" },
		{ TLS("cert: /c, key: /k, key: /l"), "key: /l",
		  "duplicate key \"key\" in daemon.ingress.tls" },
	};

	expect_refusals(bad, AN_ARRAY_LEN(bad));
	/* Both are mandatory inside tls, reported at the mapping. */
	expect_error(TLS("cert: /c"), "t.yaml:5:49: missing mandatory key \"key\" in "
				      "daemon.ingress.tls");
	expect_error(TLS("key: /k"), "t.yaml:5:49: missing mandatory key \"cert\" in "
				     "daemon.ingress.tls");
	expect_error(TLS(""), "t.yaml:5:49: missing mandatory key \"cert\" in daemon.ingress.tls");
	expect_error(MINIMAL "daemon:\n  ingress:\n    listen: \"0.0.0.0:1\"\n    tls:\n"
			     "      cert: /c\n",
		     "t.yaml:9:7: missing mandatory key \"key\" in daemon.ingress.tls");
	/* tls is a mapping, once, and needs the listener. */
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: true"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: /etc/an/hooks.pem"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: ~"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: [/c, /k]"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: {cert: /c, key: /k}, tls: {}"),
		     "t.yaml:5:70: duplicate key \"tls\" in daemon.ingress");
	expect_error(DAEMON("tls: {cert: /c, key: /k}"),
		     "t.yaml:5:20: ingress.tls needs ingress.listen (the ip:port the gateway "
		     "listens on)");
	expect_error(MINIMAL "daemon: {tls: {cert: /c, key: /k}}\n",
		     "t.yaml:5:10: unknown key \"tls\" in daemon (expected one of:");
	/* Nothing of a refused load is kept. */
	expect_tls(NULL, NULL);
	ck_assert_ptr_null(cfg.ingress_listen);
}
END_TEST

/* Each path at POLICY_PATH_BYTES_MAX (4095) bytes is taken, at 4096 refused. */
START_TEST(test_daemon_tls_limit)
{
	char *p = repeat('p', POLICY_PATH_BYTES_MAX + 1);

	ck_assert_uint_eq(POLICY_PATH_BYTES_MAX, 4095);
	p[0] = '/';
	p[POLICY_PATH_BYTES_MAX] = '\0';
	expect_ok(textf(TLS("cert: %s, key: %s"), p, p));
	ck_assert_uint_eq(strlen(cfg.ingress_tls_cert), 4095);
	ck_assert_uint_eq(strlen(cfg.ingress_tls_key), 4095);
	ck_assert_str_eq(cfg.ingress_tls_cert, p);
	p[POLICY_PATH_BYTES_MAX] = 'p';
	expect_error(textf(TLS("cert: %s, key: /k"), p),
		     "t.yaml:5:56: ingress.tls.cert must be at most 4095 bytes without control "
		     "characters");
	/* "cert: /c, key: " is 15 bytes after the '{' at column 49. */
	expect_error(textf(TLS("cert: /c, key: %s"), p),
		     "t.yaml:5:65: ingress.tls.key must be at most 4095 bytes without control "
		     "characters");
	free(p);
	/* The refused loads kept the 4095-byte paths. */
	ck_assert_uint_eq(strlen(cfg.ingress_tls_cert), 4095);
	ck_assert_uint_eq(strlen(cfg.ingress_tls_key), 4095);
	/* The shortest absolute path. */
	expect_ok(TLS("cert: /, key: /"));
	ck_assert_str_eq(cfg.ingress_tls_cert, "/");
}
END_TEST

/* A refused load, even one whose tls section was fine, keeps the pair the config holds. */
START_TEST(test_daemon_tls_staged)
{
	expect_ok(TLS("cert: /a.pem, key: /a.key"));
	expect_error_at_needle(TLS("cert: /b.pem, key: /b.key") "sandboxes: [{id: s, profile: "
								"nope}]\n",
			       "nope", "unknown profile \"nope\"");
	expect_tls("/a.pem", "/a.key");
	/* The cert staged, then the key refused: neither changes. */
	expect_error_at_needle(TLS("cert: /b.pem, key: b.key"), "b.key}",
			       "ingress.tls.key must be an absolute path");
	expect_tls("/a.pem", "/a.key");
	expect_ok(TLS("key: /c.key, cert: /c.pem"));
	expect_tls("/c.pem", "/c.key");
	/* The daemon loads each file into a fresh config: a key not given keeps its value. */
	expect_ok(DAEMON("listen: \"0.0.0.0:8443\""));
	ck_assert_str_eq(cfg.ingress_tls_cert, "/c.pem");
	config_free(&cfg);
	ck_assert_int_eq(config_init_defaults(&cfg), 0);
	expect_tls(NULL, NULL);
	expect_ok(DAEMON("listen: \"0.0.0.0:8443\""));
	expect_tls(NULL, NULL);
}
END_TEST

/* A load that fails anywhere, even after daemon.ingress was read, leaves the config as it was. */
START_TEST(test_daemon_staged)
{
	expect_ok(DAEMON("listen: \"192.0.2.1:80\", public_url: http://a.example, prefix: /a"));
	expect_error_at_needle(
	    DAEMON(
		"listen: \"192.0.2.2:81\", public_url: http://b.example, prefix: /b") "sandboxes: [{id: s, profile: nope}]\n",
	    "nope", "unknown profile \"nope\"");
	expect_daemon("192.0.2.1:80", "http://a.example", "/a");
	expect_error_at_needle(DAEMON("listen: \"192.0.2.2:81\", prefix: /b//"), "/b//",
			       "invalid ingress.prefix \"/b//\": drop the trailing '/'");
	ck_assert_str_eq(cfg.ingress_listen, "192.0.2.1:80");
	ck_assert_str_eq(cfg.ingress_prefix, "/a");
	/* A later file without the section keeps what the config holds, like every daemon key. */
	expect_ok(MINIMAL);
	ck_assert_str_eq(cfg.ingress_listen, "192.0.2.1:80");
	ck_assert_str_eq(cfg.ingress_public_url, "http://a.example");
}
END_TEST

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
			       "enabled, methods, strip_headers, body_bytes, limits)");
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
		     "limits, ingress, users, groups)");
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

	tcase_add_test(tc, test_daemon_absent);
	tcase_add_test(tc, test_daemon_listen);
	tcase_add_test(tc, test_daemon_public_url);
	tcase_add_test(tc, test_daemon_public_url_limit);
	tcase_add_test(tc, test_daemon_prefix);
	tcase_add_test(tc, test_daemon_keys);
	tcase_add_test(tc, test_daemon_tls);
	tcase_add_test(tc, test_daemon_tls_refused);
	tcase_add_test(tc, test_daemon_tls_limit);
	tcase_add_test(tc, test_daemon_tls_staged);
	tcase_add_test(tc, test_daemon_staged);
	tcase_add_test(tc, test_embedded_default);
	tcase_add_test(tc, test_embedded_docs);
	tcase_add_test(tc, test_profile_defaults);
	tcase_add_test(tc, test_profile_enabled);
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
