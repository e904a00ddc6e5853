/*
 * A profile's `ingress:` section: what the ingress gateway lets through from
 * the outside to the profile's sandboxes (whether it is on, the methods, the
 * request headers it strips, the largest body, and the profile's ingress
 * limits), how it isolates their answers in a browser (csp_sandbox,
 * scope_cookies, drop_origin_fields: on by default), and whether a public
 * request needs the sandbox's token (token: required; none by default). The gateway's public listener itself is daemon.ingress, staged
 * into the config with the other daemon keys (policy/daemon.c).
 *
 * A profile without the section points at one static struct of defaults
 * (loader_ingress_default); one with it owns a block holding its struct
 * verdict_ingress and the names it points to, so the pointers the engine
 * borrows stay put while the profiles array grows, and 65536 profiles
 * without a section cost a pointer each. Every key is optional and an absent
 * one keeps its default; methods given replace the default list. Methods are
 * kept as written (the gateway compares them exactly, as clients send them);
 * header names are stored in lower case, and Host, Content-Length and
 * Transfer-Encoding cannot be stripped: the agent needs them to read the
 * request.
 */
#include "policy/loader.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/an.h"
#include "core/pool.h"
#include "core/verdict.h"

static const char *const ingress_default_methods[] = { VERDICT_INGRESS_METHODS_DEFAULT };
static_assert(AN_ARRAY_LEN(ingress_default_methods) >= 1 &&
		  AN_ARRAY_LEN(ingress_default_methods) <= VERDICT_INGRESS_METHODS_MAX,
	      "the default methods fit verdict_ingress");

/* What a profile without `ingress:`, or without one of its keys, gets: static, never freed. */
const struct verdict_ingress loader_ingress_default = {
	.enabled = true,
	.method_count = (uint32_t)AN_ARRAY_LEN(ingress_default_methods),
	.methods = { VERDICT_INGRESS_METHODS_DEFAULT },
	.body_bytes_max = VERDICT_INGRESS_BODY_DEFAULT,
	.csp_sandbox = true,
	.scope_cookies = true,
	.drop_origin_fields = true,
};

/* Every name one section can give, each with its NUL. */
#define INGRESS_TEXT_BYTES                                                      \
	(VERDICT_INGRESS_METHODS_MAX * (POLICY_INGRESS_METHOD_BYTES_MAX + 1u) + \
	 VERDICT_INGRESS_STRIP_MAX * (POLICY_INGRESS_HEADER_BYTES_MAX + 1u))
static_assert(INGRESS_TEXT_BYTES <= UINT16_MAX, "offsets into the names fit 16 bits");

/* A profile's `ingress` while it is read: the names wait here until the section is done. */
struct ingress_build {
	struct verdict_ingress vi; /* the defaults, then what the keys said; names set at the end */
	uint32_t method_count;
	uint32_t strip_count;
	uint32_t len; /* of text */
	uint16_t method_off[VERDICT_INGRESS_METHODS_MAX];
	uint16_t strip_off[VERDICT_INGRESS_STRIP_MAX];
	char text[INGRESS_TEXT_BYTES];
};

/* Appends <s>/<len> and a NUL (lower-cased when <lower>); returns its offset. */
static uint16_t ingress_put(struct ingress_build *b, const char *s, size_t len, bool lower)
{
	uint32_t off = b->len;

	AN_ASSERT(len <= POLICY_INGRESS_HEADER_BYTES_MAX);
	AN_ASSERT(len + 1 <= sizeof(b->text) - b->len);
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		b->text[off + i] = lower && c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
	}
	b->text[off + len] = '\0';
	b->len += (uint32_t)len + 1;
	AN_ASSERT(b->len <= sizeof(b->text));
	return (uint16_t)off;
}

/* True when the <count> names at <off> in <b> hold the <len> bytes at <s>. */
static bool ingress_has(const struct ingress_build *b, const uint16_t *off, uint32_t count,
			const char *s, size_t len)
{
	AN_ASSERT(count <= VERDICT_INGRESS_STRIP_MAX);
	AN_ASSERT(s != NULL);
	for (uint32_t i = 0; i < count; i++) {
		const char *name = b->text + off[i];
		if (strlen(name) == len && memcmp(name, s, len) == 0)
			return true;
	}
	return false;
}

/* One of ingress.methods: compared exactly by the gateway, so written as clients send it. */
static int ingress_method_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct ingress_build *b = ctx;
	char shown[SHOW_BYTES];

	AN_ASSERT(index == b->method_count);
	AN_ASSERT(index < VERDICT_INGRESS_METHODS_MAX);
	int rc = loader_scalar(ld, "a method", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	bool upper = len >= 1 && len <= POLICY_INGRESS_METHOD_BYTES_MAX;
	for (size_t i = 0; i < len && upper; i++)
		upper = s[i] >= 'A' && s[i] <= 'Z';
	loader_show(s, len, shown);
	if (!upper)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "invalid method \"%s\" in ingress.methods: use 1-%u upper-case letters "
		    "(\"GET\", \"POST\"), as clients send methods (they are case-sensitive)",
		    shown, POLICY_INGRESS_METHOD_BYTES_MAX);
	if (ingress_has(b, b->method_off, b->method_count, s, len))
		return loader_fail(ld, ld->ev.start_mark,
				   "duplicate method \"%s\" in ingress.methods", shown);
	b->method_off[index] = ingress_put(b, s, len, false);
	b->method_count++;
	AN_ASSERT(b->method_count <= VERDICT_INGRESS_METHODS_MAX);
	return 0;
}

/*
 * Headers the agent needs to read the request: without Host an HTTP/1.1
 * request is invalid (RFC 9112 section 3.2), and without Content-Length or
 * Transfer-Encoding the body the gateway relays would be framed one way for
 * the gateway and another for the agent, which is request smuggling.
 */
static const char *const ingress_kept_headers[] = { "host", "content-length", "transfer-encoding" };

/* One of ingress.strip_headers: a field name, stored in lower case. */
static int ingress_strip_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct ingress_build *b = ctx;
	char shown[SHOW_BYTES];

	AN_ASSERT(index == b->strip_count);
	AN_ASSERT(index < VERDICT_INGRESS_STRIP_MAX);
	int rc = loader_scalar(ld, "a header name", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	loader_show(s, len, shown);
	if (!loader_is_token(s, len) || len > POLICY_INGRESS_HEADER_BYTES_MAX)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "invalid header name \"%s\" in ingress.strip_headers: use 1-%u bytes "
		    "of RFC 9110 token characters",
		    shown, POLICY_INGRESS_HEADER_BYTES_MAX);
	uint16_t off = ingress_put(b, s, len, true);
	const char *lower = b->text + off;
	for (size_t i = 0; i < AN_ARRAY_LEN(ingress_kept_headers); i++) {
		if (strcmp(lower, ingress_kept_headers[i]) == 0)
			return loader_fail(
			    ld, ld->ev.start_mark,
			    "header \"%s\" cannot be stripped: the agent needs Host, "
			    "Content-Length and Transfer-Encoding to read the request",
			    shown);
	}
	if (ingress_has(b, b->strip_off, b->strip_count, lower, len))
		return loader_fail(ld, ld->ev.start_mark,
				   "duplicate header \"%s\" in ingress.strip_headers (names are "
				   "case-insensitive)",
				   shown);
	b->strip_off[index] = off;
	b->strip_count++;
	AN_ASSERT(b->strip_count <= VERDICT_INGRESS_STRIP_MAX);
	return 0;
}

enum {
	IG_ENABLED,
	IG_METHODS,
	IG_STRIP,
	IG_BODY,
	IG_LIMITS,
	IG_CSP,
	IG_COOKIES,
	IG_ORIGIN_FIELDS,
	IG_TOKEN,
	IG__COUNT
};
static const char *const ingress_keys[] = {
	[IG_ENABLED] = "enabled",       [IG_METHODS] = "methods",
	[IG_STRIP] = "strip_headers",   [IG_BODY] = "body_bytes",
	[IG_LIMITS] = "limits",         [IG_CSP] = "csp_sandbox",
	[IG_COOKIES] = "scope_cookies", [IG_ORIGIN_FIELDS] = "drop_origin_fields",
	[IG_TOKEN] = "token",
};
static_assert(AN_ARRAY_LEN(ingress_keys) == IG__COUNT, "every ingress key needs a name");
static const struct keyset ingress_keyset = { "a profile's ingress", ingress_keys, IG__COUNT };
static const struct keyset ingress_limit_keyset = { "a profile's ingress limits", loader_limit_keys,
						    AN_ARRAY_LEN(loader_limit_keys) };

/* ingress.token: "required" (a public request needs the sandbox's token) or "none". */
static int ingress_token_value(struct loader *ld, bool *required)
{
	bool none = false;
	int rc = loader_choice(ld, "token", "required", "none", &none);

	*required = rc == 0 && !none;
	return rc;
}

static int ingress_value(struct loader *ld, struct ingress_build *b, uint32_t key)
{
	struct verdict_ingress *vi = &b->vi;
	uint64_t v = 0;

	AN_ASSERT(key < IG__COUNT);
	AN_ASSERT(b->vi.method_count >= 1);
	switch (key) {
	case IG_ENABLED:
		return loader_bool(ld, "enabled", &vi->enabled);
	case IG_METHODS:
		return loader_seq(ld, "methods", VERDICT_INGRESS_METHODS_MAX, true,
				  ingress_method_item, b);
	case IG_STRIP:
		return loader_seq(ld, "strip_headers", VERDICT_INGRESS_STRIP_MAX, false,
				  ingress_strip_item, b);
	case IG_BODY: {
		int rc = loader_uint(ld, "body_bytes", 1, POLICY_INGRESS_BODY_BYTES_MAX, &v);
		if (rc == 0)
			vi->body_bytes_max = v;
		return rc;
	}
	case IG_LIMITS:
		return loader_limits(ld, &ingress_limit_keyset, &vi->limits);
	case IG_CSP:
		return loader_bool(ld, "csp_sandbox", &vi->csp_sandbox);
	case IG_COOKIES:
		return loader_bool(ld, "scope_cookies", &vi->scope_cookies);
	case IG_ORIGIN_FIELDS:
		return loader_bool(ld, "drop_origin_fields", &vi->drop_origin_fields);
	case IG_TOKEN:
		return ingress_token_value(ld, &vi->token_required);
	default:
		(void)AN_NEVER(true);
		return -EINVAL;
	}
}

/* The section into a block of <pr>'s own, its names with it; given methods replace the defaults. */
static int ingress_finish(struct loader *ld, struct policy_profile *pr,
			  const struct ingress_build *b, uint32_t seen)
{
	AN_ASSERT(pr->ingress_own == NULL);
	AN_ASSERT(b->len <= sizeof(b->text));
	struct policy_ingress *own = pool_malloc(sizeof(*own) + b->len);
	if (own == NULL)
		return loader_fail_oom(ld);
	pr->ingress_own = own;
	own->vi = b->vi;
	memcpy(own->text, b->text, b->len);
	if (seen & (1u << IG_METHODS)) {
		AN_ASSERT(b->method_count >= 1);
		memset(own->vi.methods, 0, sizeof(own->vi.methods));
		own->vi.method_count = b->method_count;
		for (uint32_t i = 0; i < b->method_count; i++)
			own->vi.methods[i] = own->text + b->method_off[i];
	}
	own->vi.strip_count = b->strip_count;
	for (uint32_t i = 0; i < b->strip_count; i++)
		own->vi.strip_headers[i] = own->text + b->strip_off[i];
	pr->ingress = &own->vi;
	AN_ASSERT(own->vi.method_count >= 1);
	AN_ASSERT(own->vi.body_bytes_max >= 1);
	return 0;
}

/* A profile's `ingress`: every key optional, each absent one keeps its default. */
int loader_ingress(struct loader *ld, struct policy_profile *pr)
{
	struct ingress_build b;
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(pr->ingress == &loader_ingress_default);
	AN_ASSERT(pr->ingress_own == NULL);
	memset(&b, 0, offsetof(struct ingress_build, text));
	b.vi = loader_ingress_default;
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "ingress");
	if (rc != 0)
		return rc;
	while ((rc = loader_key(ld, &ingress_keyset, &seen, &key)) > 0) {
		rc = ingress_value(ld, &b, key);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	return ingress_finish(ld, pr, &b, seen);
}
