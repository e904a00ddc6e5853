/*
 * Unit tests for core/ingress.c. Requests are real bytes run through
 * http1_parse_request; targets and heads are placed so they end right before
 * a PROT_NONE page, so reading past a target's <len> or writing one byte
 * past a head's <cap> crashes the test instead of passing by luck.
 */
#include "../../../core/ingress.c"

#include <arpa/inet.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include "tests/unit/unit.h"

#define HEAD_BYTES_MAX 8192u
/* Two sandbox tokens (core/ingress.h): 43 characters of base64url each. */
#define TOKEN_A "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
#define TOKEN_B "__________________________________________8"

static struct unit_guard guard_in;
static struct unit_guard guard_out;

static const struct verdict_ingress ingress_default = {
	.enabled = true,
	.method_count = 7,
	.methods = { VERDICT_INGRESS_METHODS_DEFAULT },
	.body_bytes_max = VERDICT_INGRESS_BODY_DEFAULT,
};

static int route_n(const char *s, size_t n, struct ingress_target *t)
{
	return ingress_route("/callbacks", 10, unit_guard_place(&guard_in, s, n), n, t);
}

static int route(const char *s, struct ingress_target *t)
{
	return route_n(s, strlen(s), t);
}

/* Parses <s>, which must be one whole request head. */
static void parse(const char *s, struct http1_request *req)
{
	enum reason why;
	size_t n = strlen(s);

	ck_assert_int_eq(http1_parse_request(unit_guard_place(&guard_in, s, n), n, req, &why),
			 (ssize_t)n);
	ck_assert_int_eq(why, REASON_NONE);
}

/* Parses <s> (one whole request head) into <req>; routes its target under /callbacks. */
static int parse_route(const char *s, struct http1_request *req, struct ingress_target *t)
{
	parse(s, req);
	return ingress_route("/callbacks", 10, req->target, req->target_len, t);
}

/* ---- Routing ---- */

/* Each of the <n> targets of <cases> routes to <want>. */
static void expect_routes(const char *const *cases, size_t n, int want)
{
	struct ingress_target t;

	for (size_t i = 0; i < n; i++)
		ck_assert_msg(route(cases[i], &t) == want, "%s: %d, want %d", cases[i],
			      route(cases[i], &t), want);
}

START_TEST(test_route_not_found)
{
	static const char *const cases[] = {
		"/",
		"/other/a",
		"/callbacksx/a",
		"/Callbacks/a",
		"/callbacks",
		"/callbacks/",
		"/callbacks?x=1",
		"/callbacks/?x=1",
		"/callbacks//x",
		"/callbacks/.a",
		"/callbacks/./x",
		"/callbacks/../x",
		"/callbacks/a%2e",
		"/callbacks/%61",
		"/callbacks/a%2f..%2fb",
		"/callbacks/a%2F..%2Fb/x",
		"/callbacks/a:b",
		"/callbacks/a~b",
		"/callbacks/a#b",
		"/callbacks/a\\b",
		"/callbacks/a+b",
		"callbacks/a",
	};
	struct ingress_target t;

	expect_routes(cases, AN_ARRAY_LEN(cases), -ENOENT);
	ck_assert_int_eq(route_n("", 0, &t), -ENOENT);
}
END_TEST

START_TEST(test_route_id_length)
{
	char target[128];
	struct ingress_target t;
	char id[65];

	/* 63 bytes (the limit) routes; 64 does not, whatever follows it. */
	memset(id, 'x', sizeof(id));
	id[63] = '\0';
	snprintf(target, sizeof(target), "/callbacks/%s", id);
	ck_assert_int_eq(route(target, &t), 0);
	ck_assert_uint_eq(t.id_len, 63);
	ck_assert_uint_eq(t.rest_len, 0);
	snprintf(target, sizeof(target), "/callbacks/%s/x?y", id);
	ck_assert_int_eq(route(target, &t), 0);
	ck_assert_uint_eq(t.id_len, 63);
	ck_assert_uint_eq(t.rest_len, 4);
	id[63] = 'x';
	id[64] = '\0';
	snprintf(target, sizeof(target), "/callbacks/%s", id);
	ck_assert_int_eq(route(target, &t), -ENOENT);
	snprintf(target, sizeof(target), "/callbacks/%s/x", id);
	ck_assert_int_eq(route(target, &t), -ENOENT);
	/* One byte, and every byte class an id may hold. */
	ck_assert_int_eq(route("/callbacks/a", &t), 0);
	ck_assert_uint_eq(t.id_len, 1);
	ck_assert_int_eq(route("/callbacks/Az09_.-/x", &t), 0);
	ck_assert_uint_eq(t.id_len, 7);
	ck_assert_int_eq(memcmp(t.id, "Az09_.-", 7), 0);
	ck_assert_int_eq(route("/callbacks/a..b", &t), 0);
}
END_TEST

/* Routes <s> and checks the id and rest it splits into. */
static void check_split(const char *s, const char *id, const char *rest)
{
	struct ingress_target t;

	ck_assert_msg(route(s, &t) == 0, "%s", s);
	ck_assert_uint_eq(t.id_len, strlen(id));
	ck_assert_int_eq(memcmp(t.id, id, t.id_len), 0);
	ck_assert_uint_eq(t.rest_len, strlen(rest));
	ck_assert_int_eq(memcmp(t.rest, rest, t.rest_len), 0);
}

START_TEST(test_route_splits)
{
	check_split("/callbacks/a", "a", "");
	check_split("/callbacks/a/", "a", "/");
	check_split("/callbacks/a?x=1", "a", "?x=1");
	check_split("/callbacks/a?", "a", "?");
	check_split("/callbacks/a/hook?x=%2F", "a", "/hook?x=%2F");
	check_split("/callbacks/sb-1/a/b/", "sb-1", "/a/b/");
	check_split("/callbacks/a/a/b/c.json", "a", "/a/b/c.json");
	/* Not dot segments: more dots, or dots beside other bytes. */
	check_split("/callbacks/a/...", "a", "/...");
	check_split("/callbacks/a/.x/x./..x/x..", "a", "/.x/x./..x/x..");
	check_split("/callbacks/a/%2e%2e%2e", "a", "/%2e%2e%2e");
	check_split("/callbacks/a/%2ex", "a", "/%2ex");
	/* Other encodings are left to the agent. */
	check_split("/callbacks/a/%41%7e%3F%23%20", "a", "/%41%7e%3F%23%20");
	/* The query is not checked. */
	check_split("/callbacks/a/x?y=../..", "a", "/x?y=../..");
	check_split("/callbacks/a?//..%2f%25%00%\\", "a", "?//..%2f%25%00%\\");
	check_split("/callbacks/a/x?a?b", "a", "/x?a?b");
}
END_TEST

START_TEST(test_route_refused)
{
	static const char *const cases[] = {
		/* Dot segments, raw and encoded in any case and mix. */
		"/callbacks/a/.",
		"/callbacks/a/..",
		"/callbacks/a/./x",
		"/callbacks/a/../x",
		"/callbacks/a/x/.",
		"/callbacks/a/x/..",
		"/callbacks/a/x/..?q",
		"/callbacks/a/x/../",
		"/callbacks/a/%2e",
		"/callbacks/a/%2E",
		"/callbacks/a/%2e%2e",
		"/callbacks/a/%2E%2E",
		"/callbacks/a/%2e%2E",
		"/callbacks/a/.%2e",
		"/callbacks/a/%2e.",
		"/callbacks/a/.%2E/x",
		"/callbacks/a/%2e/x",
		/* Aimed at another sandbox. */
		"/callbacks/a/../b/x",
		"/callbacks/a/%2e%2e/b",
		"/callbacks/a/..%2fb",
		"/callbacks/a/x/../../b",
		/* Encoded separators and a raw backslash. */
		"/callbacks/a/x%2fy",
		"/callbacks/a/x%2Fy",
		"/callbacks/a/%2F",
		"/callbacks/a/x%5cy",
		"/callbacks/a/x%5Cy",
		"/callbacks/a/x\\y",
		"/callbacks/a/\\",
		"/callbacks/a/..\\x",
		/* Double encoding, NUL, broken escapes. */
		"/callbacks/a/x%25y",
		"/callbacks/a/%252e%252e",
		"/callbacks/a/x%00",
		"/callbacks/a/%00/x",
		"/callbacks/a/x%",
		"/callbacks/a/x%2",
		"/callbacks/a/x%2?q",
		"/callbacks/a/x%zz",
		"/callbacks/a/x%g0",
		"/callbacks/a/x%0g",
		"/callbacks/a/%%32%65",
		/* Empty segments. */
		"/callbacks/a//",
		"/callbacks/a//x",
		"/callbacks/a/x//y",
		"/callbacks/a/x//",
		/* Fragments. */
		"/callbacks/a/x#f",
		"/callbacks/a/#",
		"/callbacks/a?x#f",
	};

	expect_routes(cases, AN_ARRAY_LEN(cases), -EPERM);
}
END_TEST

/* Readings of '.', '/' and '\' a plain decoder does not see (issue 18 item 5). */
START_TEST(test_route_refused_encodings)
{
	static const char *const cases[] = {
		/* A dot segment with path parameters, raw or encoded ';'. */
		"/callbacks/a/..;",
		"/callbacks/a/..;/b",
		"/callbacks/a/..;x=1/b",
		"/callbacks/a/.;",
		"/callbacks/a/.;x/b",
		"/callbacks/a/%2e%2e;/b",
		"/callbacks/a/%2E%2e;jsessionid=1",
		"/callbacks/a/..%3b/b",
		"/callbacks/a/..%3Bx",
		"/callbacks/a/.%3b",
		"/callbacks/a/x/..;",
		"/callbacks/a/x/..;?q",
		/* A segment whose name is empty, but for the last. */
		"/callbacks/a/;/b",
		"/callbacks/a/;x/b",
		"/callbacks/a/x/%3b/y",
		/* Overlong forms of '.', '/', '\', NUL and 'A', in 2, 3 and 4 bytes, and
		 * the 5- and 6-byte forms RFC 3629 removed. */
		"/callbacks/a/%c0%ae",
		"/callbacks/a/%C0%AE%C0%AE/b",
		"/callbacks/a/%c0%ae%c0%ae%c0%af",
		"/callbacks/a/x%c0%afy",
		"/callbacks/a/x%c1%9cy",
		"/callbacks/a/x%c1%81",
		"/callbacks/a/x%c0%80",
		"/callbacks/a/%e0%80%ae",
		"/callbacks/a/x%e0%80%af",
		"/callbacks/a/x%e0%81%9c",
		"/callbacks/a/x%e0%9f%bf",
		"/callbacks/a/x%f0%80%80%af",
		"/callbacks/a/x%f0%8f%bf%bf",
		"/callbacks/a/x%f8%80%80%80%af",
		"/callbacks/a/x%fc%80%80%80%80%af",
		/* Other invalid UTF-8: stray continuations, sequences cut short or broken
		 * by an ASCII byte, a surrogate, past U+10FFFF, bytes never valid. */
		"/callbacks/a/x%80",
		"/callbacks/a/x%bf",
		"/callbacks/a/x%c3",
		"/callbacks/a/x%c3/y",
		"/callbacks/a/x%c3y",
		"/callbacks/a/x%c3%c3%a9",
		"/callbacks/a/x%e2%82",
		"/callbacks/a/x%e2%82?q",
		"/callbacks/a/x%f0%9f%98",
		"/callbacks/a/x%ed%a0%80",
		"/callbacks/a/x%ed%bf%bf",
		"/callbacks/a/x%f4%90%80%80",
		"/callbacks/a/x%f5%80%80%80",
		"/callbacks/a/x%fe",
		"/callbacks/a/x%ff",
		/* Code points NFKC folds into dots or a separator. */
		"/callbacks/a/%ef%bc%8e%ef%bc%8e/b",
		"/callbacks/a/%ef%bc%8e",
		"/callbacks/a/.%ef%bc%8e",
		"/callbacks/a/x%ef%bc%8fy",
		"/callbacks/a/x%EF%BC%BCy",
		"/callbacks/a/%e2%80%a5",
		"/callbacks/a/%e2%80%a4%e2%80%a4",
		"/callbacks/a/x%e2%80%a6",
		"/callbacks/a/%e2%84%80",
		"/callbacks/a/%e2%84%81",
		"/callbacks/a/%e2%84%85",
		"/callbacks/a/%e2%84%86",
		"/callbacks/a/%ef%b8%99",
		"/callbacks/a/%ef%b8%b0",
		"/callbacks/a/%ef%b9%92",
		"/callbacks/a/x%ef%b9%a8",
	};

	expect_routes(cases, AN_ARRAY_LEN(cases), -EPERM);
}
END_TEST

/* What stays the agent's to read: valid UTF-8 at each boundary, parameters on names. */
START_TEST(test_route_utf8_and_params)
{
	check_split("/callbacks/a/caf%c3%a9", "a", "/caf%c3%a9");
	check_split("/callbacks/a/%C2%80%df%bf", "a", "/%C2%80%df%bf");
	check_split("/callbacks/a/%e0%a0%80%ed%9f%bf%ee%80%80%ef%bf%bf", "a",
		    "/%e0%a0%80%ed%9f%bf%ee%80%80%ef%bf%bf");
	check_split("/callbacks/a/%f0%90%80%80%f0%9f%98%80%f4%8f%bf%bf", "a",
		    "/%f0%90%80%80%f0%9f%98%80%f4%8f%bf%bf");
	/* Neighbours of the folded code points. */
	check_split("/callbacks/a/%e2%80%a3%e2%80%a7%ef%bc%8d%ef%bc%90", "a",
		    "/%e2%80%a3%e2%80%a7%ef%bc%8d%ef%bc%90");
	/* Parameters on a name that is not a dot segment, and after the last one. */
	check_split("/callbacks/a/x;y=1/z", "a", "/x;y=1/z");
	check_split("/callbacks/a/..x;/...;y", "a", "/..x;/...;y");
	check_split("/callbacks/a/x;..", "a", "/x;..");
	check_split("/callbacks/a/x%3b..%3b", "a", "/x%3b..%3b");
	check_split("/callbacks/a/;jsessionid=1", "a", "/;jsessionid=1");
	check_split("/callbacks/a/x/;", "a", "/x/;");
	/* Bytes past the path are the query's: not checked. */
	check_split("/callbacks/a/x?%c0%ae;..%ff", "a", "/x?%c0%ae;..%ff");
}
END_TEST

START_TEST(test_route_other_prefix)
{
	struct ingress_target t;
	const char *s = "/hooks/v1/abc/x";

	ck_assert_int_eq(ingress_route("/hooks/v1", 9, s, strlen(s), &t), 0);
	ck_assert_uint_eq(t.id_len, 3);
	ck_assert_int_eq(memcmp(t.id, "abc", 3), 0);
	ck_assert_int_eq(ingress_route("/hooks/v1", 9, "/hooks/v2/abc", 13, &t), -ENOENT);
	/* The target is read only up to <len>. */
	ck_assert_int_eq(ingress_route("/hooks", 6, "/hooks/abc/../x", 10, &t), 0);
	ck_assert_uint_eq(t.rest_len, 0);
}
END_TEST

START_TEST(test_route_parsed_request)
{
	struct http1_request req;
	struct ingress_target t;

	ck_assert_int_eq(
	    parse_route("GET /callbacks/sb1/hook?x=%2F HTTP/1.1\r\nHost: h\r\n\r\n", &req, &t), 0);
	ck_assert_uint_eq(t.id_len, 3);
	ck_assert_int_eq(memcmp(t.id, "sb1", 3), 0);
	ck_assert_uint_eq(t.rest_len, 11);
	ck_assert_int_eq(memcmp(t.rest, "/hook?x=%2F", 11), 0);
	ck_assert_int_eq(
	    parse_route("GET /callbacks/sb1/%2e%2e/sb2/ HTTP/1.1\r\nHost: h\r\n\r\n", &req, &t),
	    -EPERM);
}
END_TEST

/* ---- Per-sandbox origins ---- */

/* The site of a gateway at <public_url> under /callbacks, origins on. */
static struct ingress_site site_of(const char *public_url)
{
	struct ingress_site site;

	ingress_site_init(&site, "/callbacks", public_url, true);
	return site;
}

/* Routes <target> with Host <host> (NULL: none) at <site>; the Host is guarded too. */
static int route_host(const struct ingress_site *site, const char *host, const char *target,
		      struct ingress_target *t)
{
	static struct unit_guard guard_host;
	size_t n = host != NULL ? strlen(host) : 0;
	const char *h = host != NULL ? unit_guard_place(&guard_host, host, n) : NULL;

	return ingress_route_request(
	    site, h, n, unit_guard_place(&guard_in, target, strlen(target)), strlen(target), t);
}

/* <host> and <target> route to sandbox <id> on the origin form, the whole target its rest. */
static void check_origin(const struct ingress_site *site, const char *host, const char *target,
			 const char *id)
{
	struct ingress_target t;

	ck_assert_msg(route_host(site, host, target, &t) == 0, "%s %s", host, target);
	ck_assert_msg(t.origin, "%s: not the origin form", host);
	ck_assert_uint_eq(t.id_len, strlen(id));
	ck_assert_int_eq(memcmp(t.id, id, t.id_len), 0);
	ck_assert_uint_eq(t.rest_len, strlen(target));
}

/* <host> leaves the path form: /callbacks/p1/x routes to p1, /p1/x nowhere. */
static void check_path_form(const struct ingress_site *site, const char *host)
{
	struct ingress_target t;

	ck_assert_msg(route_host(site, host, "/callbacks/p1/x", &t) == 0, "%s", host);
	ck_assert_msg(!t.origin, "%s: routed by Host", host);
	ck_assert_uint_eq(t.id_len, 2);
	ck_assert_int_eq(memcmp(t.id, "p1", 2), 0);
	ck_assert_int_eq(route_host(site, host, "/p1/x", &t), -ENOENT);
}

START_TEST(test_origin_matching)
{
	struct ingress_site site = site_of("https://hooks.example.com");

	ck_assert_str_eq(site.prefix, "/callbacks");
	ck_assert_uint_eq(site.origin_host_len, 17);
	ck_assert_uint_eq(site.origin_port, 443);
	ck_assert(site.origin_port_implied);
	check_origin(&site, "a1.hooks.example.com", "/", "a1");
	check_origin(&site, "a1.hooks.example.com", "/x/y?q=1", "a1");
	/* The whole path is the sandbox's: a path naming another sandbox stays in a1. */
	check_origin(&site, "a1.hooks.example.com", "/callbacks/b2/x", "a1");
	/* Case, the scheme's port, one trailing dot. */
	check_origin(&site, "A1.Hooks.EXAMPLE.com", "/", "A1");
	check_origin(&site, "a1.hooks.example.com:443", "/", "a1");
	check_origin(&site, "a1.hooks.example.com.", "/", "a1");
	check_origin(&site, "a1.hooks.example.com.:443", "/", "a1");
	check_origin(&site, "x-9.hooks.example.com", "/", "x-9");
	/* The public host itself, another host, port or an address: the path form. */
	check_path_form(&site, "hooks.example.com");
	check_path_form(&site, "HOOKS.example.com.:443");
	check_path_form(&site, "a1.hooks.example.com:8443");
	check_path_form(&site, "a1.hooks.example.com:80");
	check_path_form(&site, "a1.hooks.example.com:");
	check_path_form(&site, "a1.hooks.example.com:4430");
	check_path_form(&site, "a1.hooks.example.com:x");
	check_path_form(&site, "a1.hooks.example.com..");
	check_path_form(&site, "a1.hooks.example.co");
	check_path_form(&site, "a1hooks.example.com");
	check_path_form(&site, "a1.xhooks.example.com");
	check_path_form(&site, "a1.hooks.example.com.evil.test");
	check_path_form(&site, "example.com");
	check_path_form(&site, "192.0.2.1");
	check_path_form(&site, "[2001:db8::1]:443");
	check_path_form(&site, "");
	check_path_form(&site, NULL);
}
END_TEST

START_TEST(test_origin_not_an_id)
{
	struct ingress_site site = site_of("http://hooks.example.com:8090");
	static const char *const hosts[] = {
		/* Not one DNS label: never another sandbox's origin, never the path form. */
		".hooks.example.com:8090",
		"b.a1.hooks.example.com:8090",
		"a_1.hooks.example.com:8090",
		"-a1.hooks.example.com:8090",
		"a1-.hooks.example.com:8090",
		"a%31.hooks.example.com:8090",
		"a1~.hooks.example.com:8090",
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.hooks.example.com:8090",
	};
	struct ingress_target t;

	ck_assert_uint_eq(site.origin_port, 8090);
	ck_assert(!site.origin_port_implied);
	for (size_t i = 0; i < AN_ARRAY_LEN(hosts); i++) {
		ck_assert_msg(route_host(&site, hosts[i], "/callbacks/p1/x", &t) == -ENOENT, "%s",
			      hosts[i]);
		ck_assert_int_eq(route_host(&site, hosts[i], "/x", &t), -ENOENT);
	}
	/* 63 bytes is a label; the port must be named, the scheme's is not the URL's. */
	check_origin(
	    &site,
	    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.hooks.example."
	    "com:8090",
	    "/", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
	check_path_form(&site, "a1.hooks.example.com");
	check_path_form(&site, "a1.hooks.example.com:80");
}
END_TEST

START_TEST(test_origin_path_checks)
{
	struct ingress_site site = site_of("https://hooks.example.com.");
	static const char *const refused[] = {
		"/..",    "/../x", "/x/%2e%2e/y", "/..;/x", "/%c0%ae%c0%ae/x",
		"/x%2fy", "/x\\y", "//x",         "/x#f",   "/%ef%bc%8f",
	};
	struct ingress_target t;

	ck_assert_uint_eq(site.origin_host_len, 17); /* the URL's trailing dot is not compared */
	check_origin(&site, "a1.hooks.example.com", "/x", "a1");
	for (size_t i = 0; i < AN_ARRAY_LEN(refused); i++)
		ck_assert_msg(route_host(&site, "a1.hooks.example.com", refused[i], &t) == -EPERM,
			      "%s", refused[i]);
	/* The query is the agent's. */
	check_origin(&site, "a1.hooks.example.com", "/x?..%2f%c0", "a1");
	ck_assert_int_eq(route_host(&site, "a1.hooks.example.com", "*", &t), -ENOENT);
}
END_TEST

START_TEST(test_origins_off)
{
	struct ingress_site site;
	struct ingress_target t;

	ingress_site_init(&site, "/callbacks", "https://hooks.example.com", false);
	ck_assert_ptr_null(site.origin_host);
	check_path_form(&site, "a1.hooks.example.com");
	check_path_form(&site, "b.a1.hooks.example.com");
	ingress_site_init(&site, "/callbacks", NULL, false);
	ck_assert_int_eq(route_host(&site, "a1.hooks.example.com", "/x", &t), -ENOENT);
}
END_TEST

START_TEST(test_id_is_origin)
{
	ck_assert(ingress_id_is_origin("a1", 2));
	ck_assert(ingress_id_is_origin("0", 1));
	ck_assert(ingress_id_is_origin("x-y-9", 5));
	ck_assert(!ingress_id_is_origin("A1", 2));
	ck_assert(!ingress_id_is_origin("a.b", 3));
	ck_assert(!ingress_id_is_origin("a_b", 3));
	ck_assert(!ingress_id_is_origin("-a", 2));
	ck_assert(!ingress_id_is_origin("a-", 2));
	ck_assert(!ingress_id_is_origin("", 0));
}
END_TEST

START_TEST(test_public_url)
{
	char out[64];
	static const struct {
		const char *public_url, *prefix;
		bool origins;
		const char *id, *want;
	} cases[] = {
		{ "https://hooks.example.com", "/callbacks", true, "a1",
		  "https://a1.hooks.example.com" },
		{ "http://hooks.example.com:8090", "/cb", true, "a1",
		  "http://a1.hooks.example.com:8090" },
		/* An id no origin can have, or origins off: the path form. */
		{ "https://hooks.example.com", "/callbacks", true, "A1",
		  "https://hooks.example.com/callbacks/A1" },
		{ "https://hooks.example.com", "/callbacks", true, "a.b",
		  "https://hooks.example.com/callbacks/a.b" },
		{ "http://127.0.0.1:8090", "/callbacks", false, "a1",
		  "http://127.0.0.1:8090/callbacks/a1" },
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		ck_assert_int_eq(ingress_public_url(cases[i].public_url, cases[i].prefix,
						    cases[i].origins, cases[i].id, NULL, out,
						    sizeof(out)),
				 0);
		ck_assert_str_eq(out, cases[i].want);
	}
	/* Exactly the room it needs, then one byte less. */
	ck_assert_int_eq(ingress_public_url("http://h.example", "/c", true, "a1", NULL, out, 20),
			 0);
	ck_assert_str_eq(out, "http://a1.h.example");
	ck_assert_int_eq(ingress_public_url("http://h.example", "/c", true, "a1", NULL, out, 19),
			 -ENAMETOOLONG);
}
END_TEST

/* ---- The agent's answers ---- */

static const struct verdict_ingress isolating = {
	.enabled = true,
	.method_count = 1,
	.methods = { "GET" },
	.body_bytes_max = 1,
	.csp_sandbox = true,
	.scope_cookies = true,
	.drop_origin_fields = true,
};

/* An answer on the path form to GET <path> (no query) under /callbacks/a1, with <in>. */
static struct ingress_answer path_answer(const struct verdict_ingress *in, const char *path)
{
	return (struct ingress_answer){ .in = in,
					.scope = "/callbacks/a1",
					.scope_len = 13,
					.path = path,
					.path_len = strlen(path) };
}

/* An answer on a1's own origin, a1.hooks.example.com, to GET /x. */
static struct ingress_answer origin_answer(const struct verdict_ingress *in)
{
	return (struct ingress_answer){ .in = in,
					.origin = true,
					.path = "/x",
					.path_len = 2,
					.host = "a1.hooks.example.com",
					.host_len = 20 };
}

/*
 * Parses response head <s> and checks the head written for it under <a> is
 * <want>, at exactly its length (every cap below: -EMSGSIZE, nothing past it).
 */
static void check_answer(const char *s, const struct ingress_answer *a, const char *connection,
			 const char *want)
{
	struct http1_response resp;
	size_t len = strlen(s);
	size_t n = strlen(want);

	ck_assert_int_eq(http1_parse_response(unit_guard_place(&guard_in, s, len), len, &resp),
			 (ssize_t)len);
	ssize_t rc =
	    ingress_write_response_head(&resp, connection, a, unit_guard_end(&guard_out, n), n);
	ck_assert_int_eq(rc, (ssize_t)n);
	ck_assert_int_eq(memcmp(unit_guard_end(&guard_out, n), want, n), 0);
	for (size_t cap = 0; cap < n; cap++)
		ck_assert_int_eq(ingress_write_response_head(&resp, connection, a,
							     unit_guard_end(&guard_out, cap), cap),
				 -EMSGSIZE);
	/* Whether anything is left out agrees with the written head. */
	bool dropped = false;
	for (uint32_t i = 0; i < resp.header_count; i++) {
		const struct http1_header *h = &resp.headers[i];
		char line[512];
		int m = snprintf(line, sizeof(line), "%.*s: %.*s\r\n", (int)h->name_len, h->name,
				 (int)h->value_len, h->value);
		ck_assert(m > 0 && (size_t)m < sizeof(line));
		dropped = dropped || memmem(want, n, line, (size_t)m) == NULL;
	}
	if (resp.status != 101)
		ck_assert(ingress_response_drops(&resp, a) == dropped);
}

/* One Set-Cookie value under <a>: whether the written head keeps it. */
static bool cookie_kept(const struct ingress_answer *a, const char *value)
{
	char head[4096];
	char out[4096 + 64];
	struct http1_response resp;

	int n = snprintf(head, sizeof(head), "HTTP/1.1 204 \r\nSet-Cookie: %s\r\n\r\n", value);
	ck_assert(n > 0 && (size_t)n < sizeof(head));
	ck_assert_int_eq(http1_parse_response(head, (size_t)n, &resp), n);
	ssize_t m = ingress_write_response_head(&resp, NULL, a, out, sizeof(out));
	ck_assert_int_gt(m, 0);
	out[m] = '\0';
	ck_assert(ingress_response_drops(&resp, a) == (strstr(out, "Set-Cookie") == NULL));
	return strstr(out, "Set-Cookie") != NULL;
}

START_TEST(test_answer_csp)
{
	struct ingress_answer a = path_answer(&isolating, "/callbacks/a1/page");
	struct ingress_answer o = origin_answer(&isolating);
	struct verdict_ingress off = isolating;
	struct ingress_answer a_off = path_answer(&off, "/callbacks/a1/page");

	off.csp_sandbox = false;
	/* Every final answer on the path form, whatever its type, or none. */
	check_answer("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\n", &a,
		     NULL,
		     "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n"
		     "Content-Security-Policy: sandbox\r\n\r\n");
	check_answer("HTTP/1.1 200 OK\r\nContent-Type: image/svg+xml\r\n\r\n", &a, "close",
		     "HTTP/1.1 200 OK\r\nContent-Type: image/svg+xml\r\nConnection: close\r\n"
		     "Content-Security-Policy: sandbox\r\n\r\n");
	check_answer("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", &a, "keep-alive",
		     "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n"
		     "Content-Security-Policy: sandbox\r\n\r\n");
	check_answer("HTTP/1.1 304 Not Modified\r\n\r\n", &a, NULL,
		     "HTTP/1.1 304 Not Modified\r\nContent-Security-Policy: sandbox\r\n\r\n");
	check_answer("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n", &a, NULL,
		     "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
		     "Content-Security-Policy: sandbox\r\n\r\n");
	/* The agent's own policy stays whole beside it. */
	check_answer("HTTP/1.1 200 OK\r\nContent-Security-Policy: default-src 'self'\r\n\r\n", &a,
		     NULL,
		     "HTTP/1.1 200 OK\r\nContent-Security-Policy: default-src 'self'\r\n"
		     "Content-Security-Policy: sandbox\r\n\r\n");
	/* Not on an interim answer, not on the origin form, not when turned off. */
	check_answer("HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n", &a, NULL,
		     "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n");
	check_answer("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n", &o, NULL,
		     "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n");
	check_answer("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n", &a_off, NULL,
		     "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n");
}
END_TEST

START_TEST(test_answer_cookies_path_form)
{
	static const char *const kept[] = {
		"a=1; Path=/callbacks/a1",
		"a=1; Path=/callbacks/a1/",
		"a=1; Path=/callbacks/a1/x/y",
		"a=1; path=/callbacks/a1; Secure; HttpOnly; SameSite=Lax",
		"a=1;Path=/callbacks/a1  ;Max-Age=60",
		"a=1; PATH =\t/callbacks/a1",
		"a=1; Path=/callbacks/a1; Path=/callbacks/a1/y",
		/* No Path, or one not starting with '/': the default, /callbacks/a1/oauth. */
		"a=1",
		"a=1; Secure",
		"a=1; Path=",
		"a=1; Path=x",
		"a=1; Pathx=/",
		"a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT",
	};
	static const char *const dropped[] = {
		"a=1; Path=/",
		"a=1; Path=/callbacks",
		"a=1; Path=/callbacks/",
		"a=1; Path=/callbacks/a",
		"a=1; Path=/callbacks/a10",
		"a=1; Path=/callbacks/a1x",
		"a=1; Path=/CALLBACKS/a1",
		"a=1; Path=/callbacks/a1; Path=/",
		"a=1; Path=/; Path=/callbacks/a1",
		"a=1; Path=/callbacks/a1/../b2",
		"a=1; Path=/callbacks/a1/%2e%2e/b2",
		"a=1; Path=/callbacks/a1%2f..%2fb2",
		"a=1; Path=/callbacks/a1//x",
		"a=1; Path=/callbacks/a1; Domain=hooks.example.com",
		"a=1; Domain=.hooks.example.com",
		"a=1; domain=",
		"__Host-a=1; Path=/; Secure",
		" a=1 ; path = / ",
	};
	struct ingress_answer a = path_answer(&isolating, "/callbacks/a1/oauth/cb");
	struct verdict_ingress off = isolating;
	char lng[1200];

	for (size_t i = 0; i < AN_ARRAY_LEN(kept); i++)
		ck_assert_msg(cookie_kept(&a, kept[i]), "dropped: %s", kept[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(dropped); i++)
		ck_assert_msg(!cookie_kept(&a, dropped[i]), "kept: %s", dropped[i]);
	/* A Path value of 1024 bytes is read; past that, RFC 6265bis ignores it and would keep
	 * the default path, here /callbacks: dropped. */
	a = path_answer(&isolating, "/callbacks/a1");
	int n = snprintf(lng, sizeof(lng), "a=1; Path=/callbacks/a1/%01010d", 0);
	ck_assert_int_eq(n, 10 + 1024);
	ck_assert(cookie_kept(&a, lng));
	snprintf(lng, sizeof(lng), "a=1; Path=/callbacks/a1/%01011d", 0);
	ck_assert(!cookie_kept(&a, lng));
	/* The default path is the request path's directory: inside only below the id. */
	a = path_answer(&isolating, "/callbacks/a1");
	ck_assert(!cookie_kept(&a, "a=1"));
	ck_assert(!cookie_kept(&a, "a=1; Path=x"));
	ck_assert(cookie_kept(&a, "a=1; Path=/callbacks/a1"));
	a = path_answer(&isolating, "/callbacks/a1/");
	ck_assert(cookie_kept(&a, "a=1"));
	a = path_answer(&isolating, "/callbacks/a1/cb");
	ck_assert(cookie_kept(&a, "a=1"));
	/* scope_cookies: false lets each through. */
	off.scope_cookies = false;
	a = path_answer(&off, "/callbacks/a1");
	for (size_t i = 0; i < AN_ARRAY_LEN(dropped); i++)
		ck_assert_msg(cookie_kept(&a, dropped[i]), "dropped: %s", dropped[i]);
}
END_TEST

START_TEST(test_answer_cookies_origin_form)
{
	static const char *const kept[] = {
		"a=1",
		"a=1; Path=/",
		"__Host-a=1; Path=/; Secure",
		"a=1; Domain=a1.hooks.example.com",
		"a=1; Domain=.A1.Hooks.Example.COM",
		"a=1; Domain=",
	};
	static const char *const dropped[] = {
		"a=1; Domain=hooks.example.com",
		"a=1; Domain=.hooks.example.com",
		"a=1; Domain=example.com",
		"a=1; Domain=b2.hooks.example.com",
		"a=1; Domain=a1.hooks.example.com.evil.test",
		"a=1; Domain=x.a1.hooks.example.com",
		"a=1; Domain=a1.hooks.example.com; Domain=hooks.example.com",
	};
	struct ingress_answer o = origin_answer(&isolating);

	for (size_t i = 0; i < AN_ARRAY_LEN(kept); i++)
		ck_assert_msg(cookie_kept(&o, kept[i]), "dropped: %s", kept[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(dropped); i++)
		ck_assert_msg(!cookie_kept(&o, dropped[i]), "kept: %s", dropped[i]);
}
END_TEST

START_TEST(test_answer_origin_fields)
{
	static const char head[] =
	    "HTTP/1.1 200 OK\r\n"
	    "Alt-Svc: h2=\"evil.test:443\"\r\n"
	    "clear-site-data: \"cookies\", \"storage\"\r\n"
	    "NEL: {\"report_to\":\"g\",\"max_age\":86400}\r\n"
	    "Report-To: {\"group\":\"g\",\"endpoints\":[]}\r\n"
	    "SERVICE-WORKER-ALLOWED: /\r\n"
	    "Strict-Transport-Security: max-age=63072000; includeSubDomains\r\n"
	    "Link: </s.css>; rel=preload\r\n"
	    "X-Frame-Options: DENY\r\n"
	    "Set-Cookie: a=1; Path=/callbacks/a1\r\n"
	    "Set-Cookie: b=1; Path=/\r\n"
	    "\r\n";
	struct ingress_answer a = path_answer(&isolating, "/callbacks/a1/x");
	struct ingress_answer o = origin_answer(&isolating);
	struct verdict_ingress keep = isolating;

	check_answer(head, &a, NULL,
		     "HTTP/1.1 200 OK\r\n"
		     "Link: </s.css>; rel=preload\r\n"
		     "X-Frame-Options: DENY\r\n"
		     "Set-Cookie: a=1; Path=/callbacks/a1\r\n"
		     "Content-Security-Policy: sandbox\r\n\r\n");
	/* Its own origin's: only what reaches the registrable domain. */
	check_answer(head, &o, NULL,
		     "HTTP/1.1 200 OK\r\n"
		     "Alt-Svc: h2=\"evil.test:443\"\r\n"
		     "NEL: {\"report_to\":\"g\",\"max_age\":86400}\r\n"
		     "Report-To: {\"group\":\"g\",\"endpoints\":[]}\r\n"
		     "SERVICE-WORKER-ALLOWED: /\r\n"
		     "Strict-Transport-Security: max-age=63072000; includeSubDomains\r\n"
		     "Link: </s.css>; rel=preload\r\n"
		     "X-Frame-Options: DENY\r\n"
		     "Set-Cookie: a=1; Path=/callbacks/a1\r\n"
		     "Set-Cookie: b=1; Path=/\r\n\r\n");
	/* Each key on its own: all three off relays the head as it came. */
	keep.drop_origin_fields = false;
	keep.scope_cookies = false;
	keep.csp_sandbox = false;
	a = path_answer(&keep, "/callbacks/a1/x");
	check_answer(head, &a, NULL, head);
}
END_TEST

START_TEST(test_answer_upgrade)
{
	struct ingress_answer a = path_answer(&isolating, "/callbacks/a1/ws");

	/* A 101 keeps its Connection and Upgrade, loses the cookie, gains no field. */
	check_answer("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		     "Connection: Upgrade\r\nSet-Cookie: a=1; Path=/\r\n"
		     "Sec-WebSocket-Accept: x\r\n\r\n",
		     &a, NULL,
		     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		     "Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n");
}
END_TEST

/* ---- The access token ---- */

START_TEST(test_token_encode)
{
	uint8_t raw[INGRESS_TOKEN_RAW_BYTES];
	char out[CONFIG_INGRESS_TOKEN_BYTES];

	for (size_t i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)i;
	ingress_token_encode(raw, out);
	ck_assert_str_eq(out, TOKEN_A);
	memset(raw, 0xff, sizeof(raw));
	ingress_token_encode(raw, out);
	ck_assert_str_eq(out, TOKEN_B);
	ck_assert_uint_eq(strlen(TOKEN_A), INGRESS_TOKEN_CHARS);
}
END_TEST

/* Whether request head <s> carries TOKEN_A. */
static bool carries(const char *s)
{
	struct http1_request req;
	struct ingress_target t;

	ck_assert_int_eq(parse_route(s, &req, &t), 0);
	return ingress_token_carried(&req, &t, TOKEN_A);
}

START_TEST(test_token_carried)
{
	static const char *const yes[] = {
		"GET /callbacks/a1/x?agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1?agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?a=1&agentsnet_token=" TOKEN_A
		"&b=2 HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x HTTP/1.1\r\nHost: h\r\nAgentsnet-Token: " TOKEN_A "\r\n\r\n",
		"GET /callbacks/a1/x HTTP/1.1\r\nHost: h\r\nagentsnet-token:  " TOKEN_A " \r\n\r\n",
		/* Every copy is the token. */
		"GET /callbacks/a1/x?agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n"
		"Agentsnet-Token: " TOKEN_A "\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet_token=" TOKEN_A "&agentsnet_token=" TOKEN_A
		" HTTP/1.1\r\nHost: h\r\n\r\n",
	};
	static const char *const no[] = {
		"GET /callbacks/a1/x HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?a=1 HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet_token=" TOKEN_B " HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet_token= HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet_token HTTP/1.1\r\nHost: h\r\n\r\n",
		/* A prefix, one byte more, another case, an encoded name: not the token. */
		"GET /callbacks/a1/x?agentsnet_token=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh"
		" HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet_token=" TOKEN_A "x HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet_token=aaecawqfbgcicqolda0odxarehmufrywgbkagxwdhh8"
		" HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?Agentsnet_Token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet%5Ftoken=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?xagentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x?a=1;agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		/* In the path, not the query. */
		"GET /callbacks/a1/agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		/* One copy wrong spoils the right one. */
		"GET /callbacks/a1/x?agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n"
		"Agentsnet-Token: " TOKEN_B "\r\n\r\n",
		"GET /callbacks/a1/x?agentsnet_token=" TOKEN_B "&agentsnet_token=" TOKEN_A
		" HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /callbacks/a1/x HTTP/1.1\r\nHost: h\r\nAgentsnet-Token: " TOKEN_A
		"\r\nAgentsnet-Token: x\r\n\r\n",
		/* Another field that merely holds it. */
		"GET /callbacks/a1/x HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer " TOKEN_A
		"\r\n\r\n",
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(yes); i++)
		ck_assert_msg(carries(yes[i]), "refused: %s", yes[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(no); i++)
		ck_assert_msg(!carries(no[i]), "carried: %s", no[i]);
}
END_TEST

START_TEST(test_routes_token)
{
	struct ingress_routes r = { 0 };
	const char *token = NULL;

	ck_assert_int_eq(ingress_routes_put(&r, "a1", 2, 3, TOKEN_A), 0);
	ck_assert_int_eq(ingress_routes_get(&r, "a1", 2, &token), 3);
	ck_assert_int_eq(memcmp(token, TOKEN_A, INGRESS_TOKEN_CHARS), 0);
	/* A re-add (the id opened again) brings its new token. */
	ck_assert_int_eq(ingress_routes_put(&r, "a1", 2, 4, TOKEN_B), 0);
	ck_assert_int_eq(ingress_routes_get(&r, "a1", 2, &token), 4);
	ck_assert_int_eq(memcmp(token, TOKEN_B, INGRESS_TOKEN_CHARS), 0);
	token = NULL;
	ck_assert_int_eq(ingress_routes_get(&r, "a2", 2, &token), -1);
	ck_assert_ptr_null(token);
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_public_url_token)
{
	char out[128];

	ck_assert_int_eq(ingress_public_url("https://hooks.example.com", "/callbacks", false, "a1",
					    TOKEN_A, out, sizeof(out)),
			 0);
	ck_assert_str_eq(out, "https://hooks.example.com/callbacks/a1?agentsnet_token=" TOKEN_A);
	ck_assert_int_eq(ingress_public_url("https://hooks.example.com", "/callbacks", true, "a1",
					    TOKEN_A, out, sizeof(out)),
			 0);
	ck_assert_str_eq(out, "https://a1.hooks.example.com/?agentsnet_token=" TOKEN_A);
	ck_assert_int_eq(ingress_public_url("http://h.example", "/c", false, "a1", TOKEN_A, out,
					    sizeof("http://h.example/c/a1?agentsnet_token=") +
						INGRESS_TOKEN_CHARS - 1),
			 -ENAMETOOLONG);
}
END_TEST

/* ---- Methods and upgrades ---- */

START_TEST(test_method_allowed)
{
	static const char *const yes[] = { "GET",   "HEAD",   "POST",   "PUT",
					   "PATCH", "DELETE", "OPTIONS" };
	static const char *const no[] = { "get", "Get", "GE", "GETS", "CONNECT", "TRACE", "" };
	struct verdict_ingress only_post = { .enabled = true, .method_count = 1 };

	for (size_t i = 0; i < AN_ARRAY_LEN(yes); i++)
		ck_assert_msg(ingress_method_allowed(&ingress_default, yes[i], strlen(yes[i])),
			      "%s", yes[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(no); i++)
		ck_assert_msg(!ingress_method_allowed(&ingress_default, no[i], strlen(no[i])), "%s",
			      no[i]);
	/* A view, not a C string: "GETX" cut to 3 is GET. */
	ck_assert(ingress_method_allowed(&ingress_default, "GETX", 3));
	only_post.methods[0] = "POST";
	ck_assert(ingress_method_allowed(&only_post, "POST", 4));
	ck_assert(!ingress_method_allowed(&only_post, "GET", 3));
	ck_assert(!ingress_method_allowed(&only_post, "POS", 3));
}
END_TEST

struct upgrade_case {
	const char *head;
	bool upgrade;
};

START_TEST(test_upgrade_detection)
{
	static const struct upgrade_case cases[] = {
		{ "GET /callbacks/a/ws HTTP/1.1\r\nHost: h\r\n"
		  "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
		  true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
		  true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n"
		  "Connection: UPGRADE\r\nUpgrade: websocket\r\n\r\n",
		  true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nConnection: ,upgrade ,\r\nUpgrade: websocket\r\n\r\n",
		  true },
		/* HTTP/1.0, no Upgrade, an empty Upgrade, or Connection not listing it. */
		{ "GET / HTTP/1.0\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		  false },
		{ "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade:\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nUpgrade: websocket\r\n\r\n",
		  false },
		{ "GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrades\r\nUpgrade: websocket\r\n\r\n",
		  false },
		{ "GET / HTTP/1.1\r\nHost: h\r\nX-Connection: upgrade\r\nUpgrade: websocket\r\n\r\n",
		  false },
		{ "GET / HTTP/1.1\r\nHost: h\r\n\r\n", false },
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		struct http1_request req;

		parse(cases[i].head, &req);
		ck_assert_msg(ingress_is_upgrade(&req) == cases[i].upgrade, "%s: %d, want %d",
			      cases[i].head, ingress_is_upgrade(&req), cases[i].upgrade);
	}
}
END_TEST

/* ---- Writing the head ---- */

static const struct ingress_client client_v4 = {
	.addr = "192.0.2.1",
	.proto = "http",
	.prefix = "/callbacks/a1",
	.prefix_len = 13,
	.authority = "hooks.example:8090",
};

static const struct ingress_client client_v6 = {
	.addr = "2001:db8::1",
	.proto = "https",
	.prefix = "/callbacks/a1",
	.prefix_len = 13,
	.authority = "hooks.example",
};

/* What the gateway adds for client_v4 to a head with Host <host> (a literal), and its end. */
#define ADDED_V4(host)                                              \
	"X-Forwarded-For: 192.0.2.1\r\n"                            \
	"X-Forwarded-Proto: http\r\n"                               \
	"X-Forwarded-Host: " host "\r\n"                            \
	"X-Forwarded-Prefix: /callbacks/a1\r\n"                     \
	"Forwarded: for=192.0.2.1;proto=http;host=\"" host "\"\r\n" \
	"\r\n"

/* The same for a head that names no host. */
#define ADDED_V4_NO_HOST                          \
	"X-Forwarded-For: 192.0.2.1\r\n"          \
	"X-Forwarded-Proto: http\r\n"             \
	"X-Forwarded-Prefix: /callbacks/a1\r\n"   \
	"Forwarded: for=192.0.2.1;proto=http\r\n" \
	"\r\n"

/*
 * Parses and routes <s>, writes its head into a buffer of exactly the size
 * it needs (after checking every smaller cap fails) and compares it with
 * <want> byte for byte.
 */
static void check_head(const char *s, const struct verdict_ingress *in,
		       const struct ingress_client *c, const char *want)
{
	struct http1_request req;
	struct ingress_target t;
	char got[HEAD_BYTES_MAX + 1];
	size_t n = strlen(want);

	ck_assert_int_eq(parse_route(s, &req, &t), 0);
	ck_assert_uint_le(n, HEAD_BYTES_MAX);
	ssize_t rc = ingress_write_head(&req, &t, in, c, unit_guard_end(&guard_out, n), n);
	ck_assert_int_ge(rc, 0);
	memcpy(got, unit_guard_end(&guard_out, n), (size_t)rc);
	got[rc] = '\0';
	ck_assert_str_eq(got, want);
	ck_assert_int_eq(rc, (ssize_t)n);
	/* Every cap one byte or more too small fails, without writing past it. */
	for (size_t cap = 0; cap < n; cap++)
		ck_assert_int_eq(
		    ingress_write_head(&req, &t, in, c, unit_guard_end(&guard_out, cap), cap),
		    -EMSGSIZE);
	/* Room to spare changes nothing. */
	ck_assert_int_eq(
	    ingress_write_head(&req, &t, in, c, unit_guard_end(&guard_out, n + 100), n + 100),
	    (ssize_t)n);
}

/* A head and what the agent must get for it from client_v4 under ingress_default. */
struct head_case {
	const char *in;
	const char *want;
};

static void check_heads_v4(const struct head_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++)
		check_head(cases[i].in, &ingress_default, &client_v4, cases[i].want);
}

START_TEST(test_head_strips)
{
	struct verdict_ingress in = ingress_default;

	in.strip_count = 2;
	in.strip_headers[0] = "cookie";
	in.strip_headers[1] = "x-internal-token";
	check_head("POST /callbacks/a1/hook?x=1 HTTP/1.1\r\n"
		   "Host: example.com:8090\r\n"
		   "Connection: keep-alive, X-Secret\r\n"
		   "Keep-Alive: timeout=5\r\n"
		   "X-Secret: s\r\n"
		   "TE: trailers\r\n"
		   "Trailer: X-T\r\n"
		   "Upgrade: websocket\r\n"
		   "Proxy-Connection: keep-alive\r\n"
		   "Proxy-Authorization: Basic eA==\r\n"
		   "X-Forwarded-For: 6.6.6.6\r\n"
		   "x-forwarded-host: evil\r\n"
		   "X-FORWARDED-PROTO: https\r\n"
		   "X-Forwarded-Prefix: /evil\r\n"
		   "X-Forwarded-Anything: 1\r\n"
		   "Forwarded: for=6.6.6.6\r\n"
		   "FORWARDED: for=6.6.6.7\r\n"
		   "X-Real-IP: 6.6.6.6\r\n"
		   "x-real-ip: 6.6.6.7\r\n"
		   "COOKIE: c=1\r\n"
		   "X-Internal-TOKEN: t\r\n"
		   "X-Forwardedness: kept\r\n"
		   "X-Internal-Tokens: kept\r\n"
		   "Content-Length: 5\r\n"
		   "User-Agent: ua\r\n"
		   "\r\n",
		   &in, &client_v4,
		   "POST /hook?x=1 HTTP/1.1\r\n"
		   "Host: example.com:8090\r\n"
		   "X-Forwardedness: kept\r\n"
		   "X-Internal-Tokens: kept\r\n"
		   "Content-Length: 5\r\n"
		   "User-Agent: ua\r\n" ADDED_V4("example.com:8090"));
}
END_TEST

START_TEST(test_head_connection_keeps_framing)
{
	/* A Connection option never removes framing or Host. */
	static const struct head_case cases[] = {
		{ "POST /callbacks/a1/x HTTP/1.1\r\n"
		  "Host: h\r\n"
		  "Connection: close, Content-Length, Host, x-a\r\n"
		  "X-A: 1\r\n"
		  "Content-Length: 2\r\n"
		  "\r\n",
		  "POST /x HTTP/1.1\r\n"
		  "Host: h\r\n"
		  "Content-Length: 2\r\n" ADDED_V4("h") },
		{ "POST /callbacks/a1/x HTTP/1.1\r\n"
		  "Transfer-Encoding: chunked\r\n"
		  "Connection: transfer-encoding\r\n"
		  "Host: h\r\n"
		  "\r\n",
		  "POST /x HTTP/1.1\r\n"
		  "Transfer-Encoding: chunked\r\n"
		  "Host: h\r\n" ADDED_V4("h") },
	};

	check_heads_v4(cases, AN_ARRAY_LEN(cases));
}
END_TEST

START_TEST(test_head_ipv6_and_no_host)
{
	/* HTTP/1.0 without Host: the agent's HTTP/1.1 gets the gateway's authority
	 * as Host (RFC 9112 section 3.2), and no host= nor X-Forwarded-Host. */
	check_head("GET /callbacks/a1/x HTTP/1.0\r\n"
		   "Accept: */*\r\n"
		   "\r\n",
		   &ingress_default, &client_v6,
		   "GET /x HTTP/1.1\r\n"
		   "Accept: */*\r\n"
		   "Host: hooks.example\r\n"
		   "X-Forwarded-For: 2001:db8::1\r\n"
		   "X-Forwarded-Proto: https\r\n"
		   "X-Forwarded-Prefix: /callbacks/a1\r\n"
		   "Forwarded: for=\"[2001:db8::1]\";proto=https\r\n"
		   "\r\n");
	/* An empty Host is kept as sent and names no host. */
	check_head("GET /callbacks/a1/x HTTP/1.1\r\n"
		   "Host:\r\n"
		   "\r\n",
		   &ingress_default, &client_v4,
		   "GET /x HTTP/1.1\r\n"
		   "Host: \r\n" ADDED_V4_NO_HOST);
	check_head("GET /callbacks/a1/x HTTP/1.1\r\n"
		   "Host: [2001:db8::2]:8443\r\n"
		   "\r\n",
		   &ingress_default, &client_v6,
		   "GET /x HTTP/1.1\r\n"
		   "Host: [2001:db8::2]:8443\r\n"
		   "X-Forwarded-For: 2001:db8::1\r\n"
		   "X-Forwarded-Proto: https\r\n"
		   "X-Forwarded-Host: [2001:db8::2]:8443\r\n"
		   "X-Forwarded-Prefix: /callbacks/a1\r\n"
		   "Forwarded: for=\"[2001:db8::1]\";proto=https;host=\"[2001:db8::2]:8443\"\r\n"
		   "\r\n");
}
END_TEST

/* A request line with Host h, and the request line the agent gets with it. */
#define PATH_CASE(line, want)                                                    \
	{                                                                        \
		line "\r\nHost: h\r\n\r\n", want "\r\nHost: h\r\n" ADDED_V4("h") \
	}

START_TEST(test_head_paths)
{
	static const struct head_case cases[] = {
		PATH_CASE("GET /callbacks/a1 HTTP/1.1", "GET / HTTP/1.1"),
		PATH_CASE("GET /callbacks/a1?q HTTP/1.1", "GET /?q HTTP/1.1"),
		PATH_CASE("DELETE /callbacks/a1/ HTTP/1.1", "DELETE / HTTP/1.1"),
		PATH_CASE("GET /callbacks/a1/a/b/?x=%2F&y HTTP/1.1", "GET /a/b/?x=%2F&y HTTP/1.1"),
	};

	check_heads_v4(cases, AN_ARRAY_LEN(cases));
}
END_TEST

START_TEST(test_head_origin_form)
{
	static const char head[] = "GET /callbacks/b2/x?q=1 HTTP/1.1\r\n"
				   "Host: A1.hooks.example.com\r\n"
				   "X-Forwarded-Prefix: /evil\r\n"
				   "\r\n";
	static const char want[] =
	    "GET /callbacks/b2/x?q=1 HTTP/1.1\r\n"
	    "Host: A1.hooks.example.com\r\n"
	    "X-Forwarded-For: 192.0.2.1\r\n"
	    "X-Forwarded-Proto: https\r\n"
	    "X-Forwarded-Host: A1.hooks.example.com\r\n"
	    "Forwarded: for=192.0.2.1;proto=https;host=\"A1.hooks.example.com\"\r\n"
	    "\r\n";
	const struct ingress_client c = { .addr = "192.0.2.1",
					  .proto = "https",
					  .authority = "hooks.example.com" };
	struct ingress_site site = site_of("https://hooks.example.com");
	struct http1_request req;
	struct ingress_target t;
	char out[HEAD_BYTES_MAX];

	/* The whole path as sent, and no prefix: the origin's paths are the agent's. */
	parse(head, &req);
	ck_assert_int_eq(ingress_route_request(&site, req.host_header, req.host_header_len,
					       req.target, req.target_len, &t),
			 0);
	ck_assert(t.origin);
	ssize_t n = ingress_write_head(&req, &t, &ingress_default, &c, out, sizeof(out));
	ck_assert_int_eq(n, (ssize_t)strlen(want));
	ck_assert_int_eq(memcmp(out, want, (size_t)n), 0);
}
END_TEST

START_TEST(test_head_token_stripped)
{
	/* The token never reaches the agent: the field, and each parameter of the query. */
	static const struct head_case cases[] = {
		{ "GET /callbacks/a1/x?agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n"
		  "Agentsnet-Token: " TOKEN_A "\r\n\r\n",
		  "GET /x HTTP/1.1\r\nHost: h\r\n" ADDED_V4("h") },
		{ "GET /callbacks/a1/x?a=1&agentsnet_token=" TOKEN_A
		  "&b=&&c HTTP/1.1\r\nHost: h\r\n"
		  "\r\n",
		  "GET /x?a=1&b=&&c HTTP/1.1\r\nHost: h\r\n" ADDED_V4("h") },
		{ "GET /callbacks/a1/x?agentsnet_token=" TOKEN_B "&agentsnet_token&q HTTP/1.1\r\n"
		  "Host: h\r\n\r\n",
		  "GET /x?q HTTP/1.1\r\nHost: h\r\n" ADDED_V4("h") },
		{ "GET /callbacks/a1?agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		  "GET / HTTP/1.1\r\nHost: h\r\n" ADDED_V4("h") },
		{ "GET /callbacks/a1/?&agentsnet_token=" TOKEN_A " HTTP/1.1\r\nHost: h\r\n\r\n",
		  "GET /? HTTP/1.1\r\nHost: h\r\n" ADDED_V4("h") },
		/* Names that only resemble it are the agent's. */
		{ "GET /callbacks/a1/x?agentsnet_tokens=1&xagentsnet_token=2 HTTP/1.1\r\nHost: h\r\n"
		  "Agentsnet-Tokens: 3\r\n\r\n",
		  "GET /x?agentsnet_tokens=1&xagentsnet_token=2 HTTP/1.1\r\nHost: h\r\n"
		  "Agentsnet-Tokens: 3\r\n" ADDED_V4("h") },
	};

	check_heads_v4(cases, AN_ARRAY_LEN(cases));
}
END_TEST

START_TEST(test_head_upgrade)
{
	static const struct head_case cases[] = {
		{ "GET /callbacks/a1/ws HTTP/1.1\r\n"
		  "Host: h:8090\r\n"
		  "Connection: keep-alive, Upgrade\r\n"
		  "Upgrade: websocket\r\n"
		  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		  "Sec-WebSocket-Version: 13\r\n"
		  "\r\n",
		  "GET /ws HTTP/1.1\r\n"
		  "Host: h:8090\r\n"
		  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		  "Sec-WebSocket-Version: 13\r\n"
		  "Connection: Upgrade\r\n"
		  "Upgrade: websocket\r\n" ADDED_V4("h:8090") },
		/* Two Upgrade lines are one list (RFC 9110 section 5.3). */
		{ "GET /callbacks/a1/ws HTTP/1.1\r\n"
		  "Host: h\r\n"
		  "Upgrade: foo/1\r\n"
		  "Connection: upgrade\r\n"
		  "Upgrade: websocket\r\n"
		  "\r\n",
		  "GET /ws HTTP/1.1\r\n"
		  "Host: h\r\n"
		  "Connection: Upgrade\r\n"
		  "Upgrade: foo/1, websocket\r\n" ADDED_V4("h") },
		/* HTTP/1.0 is not an upgrade: both fields go, nothing replaces them. */
		{ "GET /callbacks/a1/ws HTTP/1.0\r\n"
		  "Connection: Upgrade\r\n"
		  "Upgrade: websocket\r\n"
		  "\r\n",
		  "GET /ws HTTP/1.1\r\n"
		  "Host: hooks.example:8090\r\n" ADDED_V4_NO_HOST },
	};

	check_heads_v4(cases, AN_ARRAY_LEN(cases));
}
END_TEST

START_TEST(test_head_msgsize_large)
{
	/* A head near the parser's limit still fits a buffer of exactly its size. */
	static char req_text[LIMITS_HEAD_BYTES_MAX];
	static char want[HEAD_BYTES_MAX * 2];
	struct http1_request req;
	struct ingress_target t;
	char value[4001];

	memset(value, 'v', sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	snprintf(req_text, sizeof(req_text),
		 "GET /callbacks/a1/x HTTP/1.1\r\nHost: h\r\nX-A: %s\r\nX-B: %s\r\n\r\n", value,
		 value);
	int n = snprintf(want, sizeof(want),
			 "GET /x HTTP/1.1\r\nHost: h\r\nX-A: %s\r\nX-B: %s\r\n" ADDED_V4("h"),
			 value, value);
	ck_assert_int_eq(parse_route(req_text, &req, &t), 0);
	char *out = unit_guard_end(&guard_out, (size_t)n);
	ck_assert_int_eq(ingress_write_head(&req, &t, &ingress_default, &client_v4, out, (size_t)n),
			 n);
	ck_assert_int_eq(memcmp(out, want, (size_t)n), 0);
	out = unit_guard_end(&guard_out, (size_t)n - 1);
	ck_assert_int_eq(
	    ingress_write_head(&req, &t, &ingress_default, &client_v4, out, (size_t)n - 1),
	    -EMSGSIZE);
}
END_TEST

/* ---- The route table ---- */

static size_t id_of(char *buf, size_t cap, uint32_t i)
{
	int n = snprintf(buf, cap, "sb-%u", i);

	if (n <= 0) /* not ck_assert: the churn test calls this 300k times */
		ck_abort_msg("snprintf: %d", n);
	return (size_t)n;
}

/* Puts the id "sb-<i>" with <slot>; the put must succeed. */
static void put_id(struct ingress_routes *r, uint32_t i, uint32_t slot)
{
	char id[32];
	size_t n = id_of(id, sizeof(id), i);

	ck_assert_int_eq(ingress_routes_put(r, id, n, slot, TOKEN_A), 0);
}

/* put_id without an assertion, for the churn loops: 1 when the put failed. */
static uint32_t put_id_fault(struct ingress_routes *r, uint32_t i, uint32_t slot)
{
	char id[32];
	int n = snprintf(id, sizeof(id), "sb-%u", i);

	return ingress_routes_put(r, id, (size_t)n, slot, TOKEN_A) != 0;
}

/* Deletes the id "sb-<i>" where it has <slot>. */
static void del_id(struct ingress_routes *r, uint32_t i, uint32_t slot)
{
	char id[32];
	size_t n = id_of(id, sizeof(id), i);

	ingress_routes_del(r, id, n, slot);
}

/* The slot of the id "sb-<i>", -1 for none. */
static int64_t get_id(const struct ingress_routes *r, uint32_t i)
{
	char id[32];
	size_t n = id_of(id, sizeof(id), i);

	return ingress_routes_get(r, id, n, NULL);
}

START_TEST(test_routes_basic)
{
	struct ingress_routes r = { 0 };

	ck_assert_int_eq(ingress_routes_get(&r, "a", 1, NULL), -1);
	ingress_routes_del(&r, "a", 1, 0);
	ck_assert_int_eq(ingress_routes_put(&r, "a", 1, 7, TOKEN_A), 0);
	ck_assert_uint_eq(r.capacity, INGRESS_ROUTES_CAPACITY_MIN);
	ck_assert_int_eq(ingress_routes_get(&r, "a", 1, NULL), 7);
	ck_assert_int_eq(ingress_routes_get(&r, "b", 1, NULL), -1);
	ck_assert_int_eq(ingress_routes_get(&r, "ab", 2, NULL), -1);
	ck_assert_int_eq(ingress_routes_get(&r, "", 0, NULL), -1);
	/* A view: "ab" cut to 1 is "a". */
	ck_assert_int_eq(ingress_routes_get(&r, "ab", 1, NULL), 7);
	/* Replacing keeps one entry. */
	ck_assert_int_eq(ingress_routes_put(&r, "a", 1, 0, TOKEN_A), 0);
	ck_assert_int_eq(ingress_routes_get(&r, "a", 1, NULL), 0);
	ck_assert_uint_eq(r.used, 1);
	ck_assert_int_eq(ingress_routes_put(&r, "b", 1, UINT32_MAX, TOKEN_A), 0);
	ck_assert_int_eq(ingress_routes_get(&r, "b", 1, NULL), (int64_t)UINT32_MAX);
	ingress_routes_del(&r, "a", 1, 0);
	ck_assert_int_eq(ingress_routes_get(&r, "a", 1, NULL), -1);
	ck_assert_int_eq(ingress_routes_get(&r, "b", 1, NULL), (int64_t)UINT32_MAX);
	ck_assert_uint_eq(r.used, 1);
	/* Deleting twice, or an id never added, changes nothing. */
	ingress_routes_del(&r, "a", 1, 0);
	ingress_routes_del(&r, "c", 1, 0);
	/* Nor does an id that could never have been put. */
	ingress_routes_del(&r, ".b", 2, UINT32_MAX);
	ingress_routes_del(&r, "b/", 2, UINT32_MAX);
	ck_assert_uint_eq(r.used, 1);
	ingress_routes_free(&r);
	ck_assert_ptr_null(r.entries);
	ck_assert_uint_eq(r.capacity, 0);
	ck_assert_uint_eq(r.used, 0);
	ck_assert_uint_eq(r.tombstones, 0);
	ck_assert_int_eq(ingress_routes_get(&r, "b", 1, NULL), -1);
	/* Freeing an empty table is fine. */
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_routes_stale_del)
{
	struct ingress_routes r = { 0 };

	ck_assert_int_eq(ingress_routes_put(&r, "a", 1, 1, TOKEN_A), 0);
	/* The sandbox is removed and re-added (slot 2) before the old removal lands. */
	ck_assert_int_eq(ingress_routes_put(&r, "a", 1, 2, TOKEN_A), 0);
	ingress_routes_del(&r, "a", 1, 1);
	ck_assert_int_eq(ingress_routes_get(&r, "a", 1, NULL), 2);
	ingress_routes_del(&r, "a", 1, 2);
	ck_assert_int_eq(ingress_routes_get(&r, "a", 1, NULL), -1);
	ck_assert_uint_eq(r.used, 0);
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_routes_id_length)
{
	struct ingress_routes r = { 0 };
	char id[64];

	memset(id, 'z', sizeof(id));
	ck_assert_int_eq(ingress_routes_put(&r, id, 63, 63, TOKEN_A), 0);
	ck_assert_int_eq(ingress_routes_put(&r, id, 62, 62, TOKEN_A), 0);
	ck_assert_int_eq(ingress_routes_get(&r, id, 63, NULL), 63);
	ck_assert_int_eq(ingress_routes_get(&r, id, 62, NULL), 62);
	/* 64 bytes cannot be an id: never found. */
	ck_assert_int_eq(ingress_routes_get(&r, id, 64, NULL), -1);
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_routes_full_compare)
{
	struct ingress_routes r = { 0 };

	ck_assert_int_eq(ingress_routes_put(&r, "sb-a", 4, 1, TOKEN_A), 0);
	/* Another id under the same hash (as a collision would be) is not a hit. */
	uint32_t i = routes_find(&r, XXH3_64bits("sb-a", 4), "sb-a", 4);
	ck_assert_uint_lt(i, r.capacity);
	r.entries[i].id[3] = 'b';
	ck_assert_int_eq(ingress_routes_get(&r, "sb-a", 4, NULL), -1);
	r.entries[i].id[3] = 'a';
	ck_assert_int_eq(ingress_routes_get(&r, "sb-a", 4, NULL), 1);
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_routes_growth)
{
	enum { IDS = 5000 };
	struct ingress_routes r = { 0 };

	for (uint32_t i = 0; i < IDS; i++) {
		put_id(&r, i, i);
		ck_assert_uint_eq(r.used, i + 1);
		ck_assert_uint_eq(r.capacity & (r.capacity - 1), 0);
		ck_assert_uint_le((uint64_t)(r.used + r.tombstones) * 10, (uint64_t)r.capacity * 7);
	}
	ck_assert_uint_eq(r.capacity, 8192);
	for (uint32_t i = 0; i < IDS; i++)
		ck_assert_int_eq(get_id(&r, i), i);
	for (uint32_t i = 0; i < IDS; i += 2)
		del_id(&r, i, i);
	ck_assert_uint_eq(r.used, IDS / 2);
	for (uint32_t i = 0; i < IDS; i++)
		ck_assert_int_eq(get_id(&r, i), i % 2 == 0 ? -1 : (int64_t)i);
	ck_assert_int_eq(ingress_routes_get(&r, "sb-5000", 7, NULL), -1);
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_routes_churn)
{
	struct ingress_routes r = { 0 };

	/*
	 * A standing population, and 100k sandboxes that come and go beside it. The loops
	 * count faults and assert once: every ck_assert writes to libcheck's pipe, and 400k
	 * of them outlast the test's timeout on a loaded 2-core machine.
	 */
	uint32_t faults = 0;
	for (uint32_t i = 0; i < 40; i++)
		put_id(&r, 1000000u + i, i);
	for (uint32_t i = 0; i < 100000; i++) {
		faults += put_id_fault(&r, i, i);
		faults += get_id(&r, i) != i;
		del_id(&r, i, i);
		faults += get_id(&r, i) != -1;
		faults += r.capacity > INGRESS_ROUTES_CAPACITY_MIN * 2;
		faults += r.used != 40;
	}
	ck_assert_uint_eq(faults, 0);
	/* 41 live at most: rebuilt once into 128 entries, then in place. */
	ck_assert_uint_eq(r.capacity, INGRESS_ROUTES_CAPACITY_MIN * 2);
	for (uint32_t i = 0; i < 40; i++)
		ck_assert_int_eq(get_id(&r, 1000000u + i), i);
	ingress_routes_free(&r);
	/* Alone, one id added and removed over and over stays in the first table. */
	for (uint32_t i = 0; i < 100000; i++) {
		faults += put_id_fault(&r, i, i);
		del_id(&r, i, i);
		faults += r.capacity != INGRESS_ROUTES_CAPACITY_MIN;
		faults += r.used != 0;
	}
	ck_assert_uint_eq(faults, 0);
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_routes_tombstones)
{
	struct ingress_routes r = { 0 };

	/* 30 live ids (never more than half of 64), then every other one removed. */
	for (uint32_t i = 0; i < 30; i++)
		put_id(&r, i, i);
	ck_assert_uint_eq(r.capacity, INGRESS_ROUTES_CAPACITY_MIN);
	for (uint32_t i = 0; i < 30; i += 2)
		del_id(&r, i, i);
	ck_assert_uint_eq(r.used, 15);
	ck_assert_uint_le(r.tombstones, 15);
	/* Re-adding reuses tombstones or rebuilds in place; nothing is lost. */
	for (uint32_t i = 0; i < 30; i += 2)
		put_id(&r, i, i + 100);
	ck_assert_uint_eq(r.used, 30);
	ck_assert_uint_eq(r.capacity, INGRESS_ROUTES_CAPACITY_MIN);
	for (uint32_t i = 0; i < 30; i++)
		ck_assert_int_eq(get_id(&r, i), i % 2 == 0 ? i + 100 : i);
	/* Removing everything leaves no tombstones behind. */
	for (uint32_t i = 0; i < 30; i++)
		del_id(&r, i, i % 2 == 0 ? i + 100 : i);
	ck_assert_uint_eq(r.used, 0);
	ck_assert_uint_eq(r.tombstones, 0);
	for (uint32_t i = 0; i < r.capacity; i++)
		ck_assert_uint_eq(r.entries[i].state, ROUTE_EMPTY);
	ingress_routes_free(&r);
}
END_TEST

START_TEST(test_routes_tombstone_reuse)
{
	struct ingress_routes r = { 0 };
	char id[32];
	uint32_t mask = INGRESS_ROUTES_CAPACITY_MIN - 1;

	for (uint32_t i = 0; i < 40; i++)
		put_id(&r, i, i);
	ck_assert_uint_eq(r.capacity, INGRESS_ROUTES_CAPACITY_MIN);
	/* An id sitting at its home entry with a live entry after it. */
	uint32_t pick = UINT32_MAX;
	for (uint32_t i = 0; i < 40 && pick == UINT32_MAX; i++) {
		size_t n = id_of(id, sizeof(id), i);
		uint64_t h = XXH3_64bits(id, n);
		uint32_t at = routes_find(&r, h, id, n);
		if (at == ((uint32_t)h & mask) && r.entries[(at + 1) & mask].state == ROUTE_LIVE)
			pick = i;
	}
	ck_assert_uint_ne(pick, UINT32_MAX);
	size_t n = id_of(id, sizeof(id), pick);
	uint32_t at = routes_find(&r, XXH3_64bits(id, n), id, n);
	/* Removed, it leaves a tombstone: a probe through it must go on. */
	ingress_routes_del(&r, id, n, pick);
	ck_assert_uint_eq(r.tombstones, 1);
	ck_assert_uint_eq(r.entries[at].state, ROUTE_TOMBSTONE);
	ck_assert_int_eq(ingress_routes_get(&r, id, n, NULL), -1);
	for (uint32_t i = 0; i < 40; i++)
		ck_assert_int_eq(get_id(&r, i), i == pick ? -1 : (int64_t)i);
	/* Put back, it takes the tombstone. */
	ck_assert_int_eq(ingress_routes_put(&r, id, n, 99, TOKEN_A), 0);
	ck_assert_uint_eq(r.tombstones, 0);
	ck_assert_uint_eq(r.entries[at].state, ROUTE_LIVE);
	ck_assert_int_eq(ingress_routes_get(&r, id, n, NULL), 99);
	ingress_routes_free(&r);
}
END_TEST

/* ---- PROXY v2 ---- */

/* 192.0.2.1:54321 -> 198.51.100.7:443, built by hand from the spec. */
static const unsigned char proxy_v4_bytes[28] = {
	0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, /* signature */
	0x21, 0x11, 0x00, 0x0C, /* v2 PROXY, TCP over IPv4, 12 bytes follow */
	192,  0,    2,    1,    /* src addr */
	198,  51,   100,  7,    /* dst addr */
	0xD4, 0x31,             /* src port 54321 */
	0x01, 0xBB,             /* dst port 443 */
};

/* [2001:db8::1]:8080 -> [2001:db8::2]:443. */
static const unsigned char proxy_v6_bytes[52] = {
	0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, /* signature */
	0x21, 0x21, 0x00, 0x24,                         /* v2 PROXY, TCP over IPv6, 36 follow */
	0x20, 0x01, 0x0D, 0xB8, 0x00, 0x00, 0x00, 0x00, /* src addr 2001:db8:0:0: */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, /* 0:0:0:1 */
	0x20, 0x01, 0x0D, 0xB8, 0x00, 0x00, 0x00, 0x00, /* dst addr 2001:db8:0:0: */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, /* 0:0:0:2 */
	0x1F, 0x90,                                     /* src port 8080 */
	0x01, 0xBB,                                     /* dst port 443 */
};

/* A connection's two ends, and the header that carries them (NULL: not built by hand). */
struct proxy_pair {
	const char *src;
	uint16_t src_port;
	const char *dst;
	uint16_t dst_port;
	const unsigned char *bytes;
	size_t len;
};

/* The two headers above, with the addresses they carry. */
static const struct proxy_pair proxy_fixed[] = {
	{ "192.0.2.1", 54321, "198.51.100.7", 443, proxy_v4_bytes, sizeof(proxy_v4_bytes) },
	{ "2001:db8::1", 8080, "2001:db8::2", 443, proxy_v6_bytes, sizeof(proxy_v6_bytes) },
};

/* <addr>:<port> into <ss>, zeroed first: IPv6 when <addr> has a ':', else IPv4. */
static void sa_of(struct sockaddr_storage *ss, const char *addr, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(addr, ':') == NULL) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		ck_assert_int_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
		return;
	}
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	s6->sin6_family = AF_INET6;
	s6->sin6_port = htons(port);
	ck_assert_int_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
}

/* The two ends of <p> into <src> and <dst>. */
static void sa_pair(const struct proxy_pair *p, struct sockaddr_storage *src,
		    struct sockaddr_storage *dst)
{
	sa_of(src, p->src, p->src_port);
	sa_of(dst, p->dst, p->dst_port);
}

/* Parses the first <n> bytes of <b>, placed to end right before the guard page. */
static ssize_t proxy_parse_n(const unsigned char *b, size_t n, struct sockaddr_storage *src)
{
	return ingress_proxy_parse(unit_guard_place(&guard_in, b, n), n, src);
}

/* ingress_proxy_write of <src> -> <dst> into <out>/<cap>. */
static ssize_t proxy_write(const struct sockaddr_storage *src, const struct sockaddr_storage *dst,
			   char *out, size_t cap)
{
	return ingress_proxy_write((const struct sockaddr *)src, (const struct sockaddr *)dst, out,
				   cap);
}

/* A header of INGRESS_PROXY_BYTES_MAX bytes: the fixed 16 as given, zeros after. */
static void proxy_head(unsigned char *b, uint8_t ver_cmd, uint8_t fam, uint16_t block)
{
	memset(b, 0, INGRESS_PROXY_BYTES_MAX);
	memcpy(b, proxy_v4_bytes, 12);
	b[12] = ver_cmd;
	b[13] = fam;
	b[14] = (unsigned char)(block >> 8);
	b[15] = (unsigned char)block;
}

/* proxy_head, then proxy_v4_bytes's 12-byte address block after the fixed 16. */
static void proxy_head_v4(unsigned char *b, uint8_t ver_cmd, uint8_t fam, uint16_t block)
{
	proxy_head(b, ver_cmd, fam, block);
	memcpy(b + 16, proxy_v4_bytes + 16, 12);
}

/* That <ss> is the source <addr>:<port>; an IPv6 one with no flow label or scope. */
static void check_src(const struct sockaddr_storage *ss, const char *addr, uint16_t port)
{
	struct sockaddr_storage want;

	sa_of(&want, addr, port);
	ck_assert_int_eq(ss->ss_family, want.ss_family);
	if (want.ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
		const struct sockaddr_in *w4 = (const struct sockaddr_in *)&want;

		ck_assert_uint_eq(ntohs(s4->sin_port), port);
		ck_assert_mem_eq(&s4->sin_addr, &w4->sin_addr, sizeof(w4->sin_addr));
		return;
	}
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	const struct sockaddr_in6 *w6 = (const struct sockaddr_in6 *)&want;

	ck_assert_uint_eq(ntohs(s6->sin6_port), port);
	ck_assert_mem_eq(&s6->sin6_addr, &w6->sin6_addr, sizeof(w6->sin6_addr));
	ck_assert_uint_eq(s6->sin6_flowinfo, 0);
	ck_assert_uint_eq(s6->sin6_scope_id, 0);
}

START_TEST(test_proxy_round_trip)
{
	static const struct proxy_pair pairs[] = {
		{ "203.0.113.250", 1, "10.0.0.1", 65535, NULL, 28 },
		{ "2001:db8:1:2:3:4:5:6", 65535, "::1", 8443, NULL, 52 },
	};
	char out[INGRESS_PROXY_BYTES_MAX];
	struct sockaddr_storage got, src, dst;

	for (size_t i = 0; i < AN_ARRAY_LEN(pairs); i++) {
		const struct proxy_pair *p = &pairs[i];

		sa_pair(p, &src, &dst);
		ssize_t n = proxy_write(&src, &dst, out, sizeof(out));
		ck_assert_int_eq(n, (ssize_t)p->len);
		ck_assert_int_eq(proxy_parse_n((unsigned char *)out, (size_t)n, &got),
				 (ssize_t)p->len);
		check_src(&got, p->src, p->src_port);
	}
}
END_TEST

START_TEST(test_proxy_exact_bytes)
{
	char out[INGRESS_PROXY_BYTES_MAX];
	struct sockaddr_storage got, src, dst;

	for (size_t i = 0; i < AN_ARRAY_LEN(proxy_fixed); i++) {
		const struct proxy_pair *p = &proxy_fixed[i];

		sa_pair(p, &src, &dst);
		ck_assert_int_eq(proxy_write(&src, &dst, out, sizeof(out)), (ssize_t)p->len);
		ck_assert_mem_eq(out, p->bytes, p->len);
		/* And read independently of the writer: a mirrored bug would pass a round trip. */
		ck_assert_int_eq(proxy_parse_n(p->bytes, p->len, &got), (ssize_t)p->len);
		check_src(&got, p->src, p->src_port);
	}
}
END_TEST

/* Every strict prefix of <b>/<total> is -EAGAIN and leaves *src alone; the whole is <total>. */
static void check_prefixes(const unsigned char *b, size_t total)
{
	struct sockaddr_storage got, before;

	memset(&before, 0xA5, sizeof(before));
	for (size_t n = 0; n < total; n++) {
		got = before;
		ck_assert_int_eq(proxy_parse_n(b, n, &got), -EAGAIN);
		ck_assert_mem_eq(&got, &before, sizeof(got));
	}
	ck_assert_int_eq(proxy_parse_n(b, total, &got), (ssize_t)total);
}

START_TEST(test_proxy_prefixes_again)
{
	unsigned char b[INGRESS_PROXY_BYTES_MAX];

	check_prefixes(proxy_v4_bytes, sizeof(proxy_v4_bytes));
	check_prefixes(proxy_v6_bytes, sizeof(proxy_v6_bytes));
	proxy_head(b, 0x20, 0x00, 0);
	check_prefixes(b, 16);
	proxy_head(b, 0x21, 0x11, 12 + 7);
	check_prefixes(b, 16 + 12 + 7);
	proxy_head(b, 0x21, 0x21, INGRESS_PROXY_BYTES_MAX - 16);
	check_prefixes(b, INGRESS_PROXY_BYTES_MAX);
}
END_TEST

START_TEST(test_proxy_bad_signature)
{
	unsigned char b[sizeof(proxy_v4_bytes)];
	struct sockaddr_storage got;

	for (size_t i = 0; i < 12; i++) {
		memcpy(b, proxy_v4_bytes, sizeof(b));
		b[i] ^= 0x40;
		/* Refused as soon as the wrong byte is seen, not when the header is whole. */
		for (size_t n = i + 1; n <= sizeof(b); n++)
			ck_assert_int_eq(proxy_parse_n(b, n, &got), -EPROTO);
		ck_assert_int_eq(proxy_parse_n(b, i, &got), -EAGAIN);
	}
	/* Plain HTTP and a PROXY v1 line are refused on their first byte. */
	ck_assert_int_eq(proxy_parse_n((const unsigned char *)"G", 1, &got), -EPROTO);
	ck_assert_int_eq(proxy_parse_n((const unsigned char *)"PROXY TCP4 ", 11, &got), -EPROTO);
	/* A v1 line's "\r\n" start is no v2 signature either once the third byte differs. */
	ck_assert_int_eq(proxy_parse_n((const unsigned char *)"\r\nG", 3, &got), -EPROTO);
}
END_TEST

struct proxy_bad {
	uint8_t ver_cmd;
	uint8_t fam;
	uint16_t block;
	size_t decided; /* the shortest prefix that is already -EPROTO */
};

START_TEST(test_proxy_bad_fields)
{
	static const struct proxy_bad cases[] = {
		{ 0x11, 0x11, 12, 13 },  /* version 1 */
		{ 0x01, 0x11, 12, 13 },  /* version 0 */
		{ 0x31, 0x11, 12, 13 },  /* version 3 */
		{ 0xF1, 0x11, 12, 13 },  /* version 15 */
		{ 0x22, 0x11, 12, 13 },  /* command 2 */
		{ 0x2F, 0x11, 12, 13 },  /* command 15 */
		{ 0x21, 0x12, 12, 14 },  /* UDP over IPv4 */
		{ 0x21, 0x22, 36, 14 },  /* UDP over IPv6 */
		{ 0x21, 0x31, 216, 14 }, /* UNIX stream */
		{ 0x21, 0x00, 0, 14 },   /* UNSPEC with PROXY */
		{ 0x21, 0x10, 12, 14 },  /* IPv4, unspecified transport */
		{ 0x21, 0x01, 12, 14 },  /* unspecified family, stream */
		{ 0x21, 0x11, 11, 16 },  /* too short for IPv4 */
		{ 0x21, 0x11, 0, 16 },   /* no IPv4 block at all */
		{ 0x21, 0x21, 35, 16 },  /* too short for IPv6 */
		{ 0x21, 0x21, 12, 16 },  /* an IPv4-sized block for IPv6 */
	};
	unsigned char b[INGRESS_PROXY_BYTES_MAX];
	struct sockaddr_storage got;

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		const struct proxy_bad *c = &cases[i];
		proxy_head(b, c->ver_cmd, c->fam, c->block);
		ck_assert_int_eq(proxy_parse_n(b, c->decided - 1, &got), -EAGAIN);
		ck_assert_int_eq(proxy_parse_n(b, c->decided, &got), -EPROTO);
		ck_assert_int_eq(proxy_parse_n(b, sizeof(b), &got), -EPROTO);
	}
}
END_TEST

START_TEST(test_proxy_length_limit)
{
	const uint16_t max = INGRESS_PROXY_BYTES_MAX - 16;
	unsigned char b[INGRESS_PROXY_BYTES_MAX + 1];
	struct sockaddr_storage got;

	/* N: the whole header is INGRESS_PROXY_BYTES_MAX bytes. */
	proxy_head_v4(b, 0x21, 0x11, max);
	ck_assert_int_eq(proxy_parse_n(b, INGRESS_PROXY_BYTES_MAX - 1, &got), -EAGAIN);
	ck_assert_int_eq(proxy_parse_n(b, INGRESS_PROXY_BYTES_MAX, &got), INGRESS_PROXY_BYTES_MAX);
	check_src(&got, "192.0.2.1", 54321);
	proxy_head(b, 0x20, 0x00, max);
	ck_assert_int_eq(proxy_parse_n(b, INGRESS_PROXY_BYTES_MAX, &got), INGRESS_PROXY_BYTES_MAX);
	/* N + 1: refused from the length field on, never waited for. */
	uint8_t cmds[] = { 0x20, 0x21 };
	for (size_t i = 0; i < AN_ARRAY_LEN(cmds); i++) {
		proxy_head(b, cmds[i], 0x21, (uint16_t)(max + 1));
		ck_assert_int_eq(proxy_parse_n(b, 15, &got), -EAGAIN);
		ck_assert_int_eq(proxy_parse_n(b, 16, &got), -EPROTO);
		ck_assert_int_eq(proxy_parse_n(b, INGRESS_PROXY_BYTES_MAX, &got), -EPROTO);
	}
	/* A high length byte that no valid header has is refused before the low one. */
	uint16_t highs[] = { 0x0100, 0xFFFF };
	for (size_t i = 0; i < AN_ARRAY_LEN(highs); i++) {
		proxy_head(b, 0x21, 0x21, highs[i]);
		ck_assert_int_eq(proxy_parse_n(b, 14, &got), -EAGAIN);
		ck_assert_int_eq(proxy_parse_n(b, 15, &got), -EPROTO);
	}
}
END_TEST

struct proxy_local {
	uint8_t fam;
	uint16_t block;
	bool v4_block; /* proxy_v4_bytes's address block after the fixed 16 */
	ssize_t len;
};

START_TEST(test_proxy_local)
{
	static const struct proxy_local cases[] = {
		{ 0x00, 0, false, 16 }, /* the usual LOCAL: no family, no block */
		{ 0x11, 12, true, 28 }, /* an address block: skipped, not read */
		{ 0x12, 3, false, 19 }, /* LOCAL ignores the family byte and the block's size */
		{ 0x21, 5, false, 21 },
	};
	unsigned char b[INGRESS_PROXY_BYTES_MAX];
	struct sockaddr_storage got;

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		const struct proxy_local *c = &cases[i];

		memset(&got, 0xA5, sizeof(got));
		if (c->v4_block)
			proxy_head_v4(b, 0x20, c->fam, c->block);
		else
			proxy_head(b, 0x20, c->fam, c->block);
		ck_assert_int_eq(proxy_parse_n(b, sizeof(b), &got), c->len);
		ck_assert_int_eq(got.ss_family, AF_UNSPEC);
	}
}
END_TEST

START_TEST(test_proxy_tlvs_skipped)
{
	static const char tail[] = "GET / HTTP/1.1\r\n";
	static const unsigned char tlv[] = { 0x04, 0x00, 0x04, 'a', 'b', 'c', 'd' }; /* NOOP */
	unsigned char b[INGRESS_PROXY_BYTES_MAX + sizeof(tail)];
	struct sockaddr_storage got;

	memcpy(b, proxy_v4_bytes, sizeof(proxy_v4_bytes));
	b[15] = 12 + sizeof(tlv);
	memcpy(b + 28, tlv, sizeof(tlv));
	memcpy(b + 28 + sizeof(tlv), tail, sizeof(tail) - 1);
	/* The request after the header is the caller's: only the header is counted. */
	size_t n = 28 + sizeof(tlv) + sizeof(tail) - 1;
	ck_assert_int_eq(proxy_parse_n(b, n, &got), 28 + (ssize_t)sizeof(tlv));
	check_src(&got, "192.0.2.1", 54321);
	/* IPv6 with TLV bytes up to the limit. */
	memset(b, 0x5A, sizeof(b));
	memcpy(b, proxy_v6_bytes, sizeof(proxy_v6_bytes));
	b[15] = INGRESS_PROXY_BYTES_MAX - 16;
	ck_assert_int_eq(proxy_parse_n(b, sizeof(b), &got), INGRESS_PROXY_BYTES_MAX);
	check_src(&got, "2001:db8::1", 8080);
}
END_TEST

START_TEST(test_proxy_write_families)
{
	char out[INGRESS_PROXY_BYTES_MAX];
	char before[sizeof(out)];
	struct sockaddr_storage v4, v6;
	struct sockaddr_un un = { .sun_family = AF_UNIX, .sun_path = "/run/x" };
	struct sockaddr none = { .sa_family = AF_UNSPEC };
	const struct sockaddr *pairs[][2] = {
		{ (struct sockaddr *)&v4, (struct sockaddr *)&v6 },
		{ (struct sockaddr *)&v6, (struct sockaddr *)&v4 },
		{ (struct sockaddr *)&un, (struct sockaddr *)&un },
		{ (struct sockaddr *)&v4, (struct sockaddr *)&un },
		{ (struct sockaddr *)&un, (struct sockaddr *)&v6 },
		{ &none, &none },
	};

	sa_of(&v4, "192.0.2.1", 1);
	sa_of(&v6, "2001:db8::1", 1);
	memset(before, 0xA5, sizeof(before));
	for (size_t i = 0; i < AN_ARRAY_LEN(pairs); i++) {
		memcpy(out, before, sizeof(out));
		ck_assert_int_eq(ingress_proxy_write(pairs[i][0], pairs[i][1], out, sizeof(out)),
				 -EAFNOSUPPORT);
		ck_assert_mem_eq(out, before, sizeof(out));
	}
}
END_TEST

/* Writes <p>'s ends into exactly <len> - 1 and then <len> bytes before the guard page. */
static void check_write_cap(const struct proxy_pair *p)
{
	struct sockaddr_storage src, dst;
	size_t need = p->len;
	char *out = unit_guard_end(&guard_out, need - 1);

	sa_pair(p, &src, &dst);
	memset(out, 0xA5, need - 1);
	ck_assert_int_eq(proxy_write(&src, &dst, out, need - 1), -EMSGSIZE);
	for (size_t i = 0; i < need - 1; i++)
		ck_assert_uint_eq((unsigned char)out[i], 0xA5);
	out = unit_guard_end(&guard_out, need);
	ck_assert_int_eq(proxy_write(&src, &dst, out, need), (ssize_t)need);
	ck_assert_mem_eq(out, p->bytes, need);
}

START_TEST(test_proxy_write_cap)
{
	struct sockaddr_storage src, dst;

	for (size_t i = 0; i < AN_ARRAY_LEN(proxy_fixed); i++)
		check_write_cap(&proxy_fixed[i]);
	sa_pair(&proxy_fixed[0], &src, &dst);
	ck_assert_int_eq(proxy_write(&src, &dst, NULL, 0), -EMSGSIZE);
}
END_TEST

static Suite *ingress_suite(void)
{
	Suite *s = suite_create("ingress");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_route_not_found);
	tcase_add_test(tc, test_route_id_length);
	tcase_add_test(tc, test_route_splits);
	tcase_add_test(tc, test_route_refused);
	tcase_add_test(tc, test_route_refused_encodings);
	tcase_add_test(tc, test_route_utf8_and_params);
	tcase_add_test(tc, test_route_other_prefix);
	tcase_add_test(tc, test_origin_matching);
	tcase_add_test(tc, test_token_encode);
	tcase_add_test(tc, test_token_carried);
	tcase_add_test(tc, test_head_token_stripped);
	tcase_add_test(tc, test_routes_token);
	tcase_add_test(tc, test_public_url_token);
	tcase_add_test(tc, test_answer_csp);
	tcase_add_test(tc, test_answer_cookies_path_form);
	tcase_add_test(tc, test_answer_cookies_origin_form);
	tcase_add_test(tc, test_answer_origin_fields);
	tcase_add_test(tc, test_answer_upgrade);
	tcase_add_test(tc, test_origin_not_an_id);
	tcase_add_test(tc, test_origin_path_checks);
	tcase_add_test(tc, test_origins_off);
	tcase_add_test(tc, test_id_is_origin);
	tcase_add_test(tc, test_public_url);
	tcase_add_test(tc, test_route_parsed_request);
	tcase_add_test(tc, test_method_allowed);
	tcase_add_test(tc, test_upgrade_detection);
	tcase_add_test(tc, test_head_strips);
	tcase_add_test(tc, test_head_connection_keeps_framing);
	tcase_add_test(tc, test_head_ipv6_and_no_host);
	tcase_add_test(tc, test_head_paths);
	tcase_add_test(tc, test_head_origin_form);
	tcase_add_test(tc, test_head_upgrade);
	tcase_add_test(tc, test_head_msgsize_large);
	tcase_add_test(tc, test_routes_basic);
	tcase_add_test(tc, test_routes_stale_del);
	tcase_add_test(tc, test_routes_id_length);
	tcase_add_test(tc, test_routes_full_compare);
	tcase_add_test(tc, test_routes_growth);
	tcase_add_test(tc, test_routes_churn);
	tcase_add_test(tc, test_routes_tombstones);
	tcase_add_test(tc, test_routes_tombstone_reuse);
	tcase_add_test(tc, test_proxy_round_trip);
	tcase_add_test(tc, test_proxy_exact_bytes);
	tcase_add_test(tc, test_proxy_prefixes_again);
	tcase_add_test(tc, test_proxy_bad_signature);
	tcase_add_test(tc, test_proxy_bad_fields);
	tcase_add_test(tc, test_proxy_length_limit);
	tcase_add_test(tc, test_proxy_local);
	tcase_add_test(tc, test_proxy_tlvs_skipped);
	tcase_add_test(tc, test_proxy_write_families);
	tcase_add_test(tc, test_proxy_write_cap);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(ingress_suite());
}
