/*
 * libFuzzer driver for the inject tier's request head (core/credential.c).
 * The input's first byte picks the rule (require, upgrades) and, with the
 * second, the secret's length (1..1024: a JWT is longer than its
 * placeholder) and the output buffer's size (64..16,448 bytes); the rest is
 * a request head, parsed as the daemon parses one. Heads that do not parse
 * are not rewritten. Invariants, for every head that parses:
 *   - a refusal is one of bad_request (only with the credential header twice
 *     or more), headers_too_large, credential_missing (only when required),
 *     upgrade_refused (only with an Upgrade field the rule does not allow);
 *   - a rewrite fits its buffer, writes nothing past its length, and parses
 *     as a request with the same request line;
 *   - it holds no hop-by-hop field (Connection only as the upgrade's own,
 *     Upgrade only when the rule allows it), no name with '_', one
 *     Accept-Encoding: identity,
 *     and every other field of the agent's, in order, as sent, except the
 *     one credential field whose whole value was prefix plus placeholder;
 *   - a credential field a Connection field names is hop-by-hop, as
 *     RFC 9110 section 7.6.1 has it: never sent, never swapped (and with
 *     require, credential_missing);
 *   - the secret appears in it no more often than in what it kept of the
 *     agent's head, plus one if the placeholder was swapped, and then in the
 *     rule's header only.
 *
 * fuzz-sources: core/credential.c core/http1.c core/an.c core/reason.c core/pool.c
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/credential.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OUT_MAX 16448u

static size_t count_of(const char *hay, size_t n, const char *needle, size_t m)
{
	size_t count = 0;
	for (size_t i = 0; m <= n && i + m <= n; i++)
		count += memcmp(hay + i, needle, m) == 0;
	return count;
}

static bool name_is(const struct http1_header *h, const char *lit)
{
	return h->name_len == strlen(lit) && strncasecmp(h->name, lit, h->name_len) == 0;
}

/* Whether any Connection field of <req> lists <lit> among its tokens. */
static bool connection_names(const struct http1_request *req, const char *lit)
{
	size_t m = strlen(lit);
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		if (!name_is(h, "connection"))
			continue;
		size_t at = 0;
		while (at <= h->value_len) {
			const char *comma = memchr(h->value + at, ',', h->value_len - at);
			size_t end = comma != NULL ? (size_t)(comma - h->value) : h->value_len;
			size_t a = at, b = end;
			while (a < b && (h->value[a] == ' ' || h->value[a] == '\t'))
				a++;
			while (b > a && (h->value[b - 1] == ' ' || h->value[b - 1] == '\t'))
				b--;
			if (b - a == m && strncasecmp(h->value + a, lit, m) == 0)
				return true;
			at = end + 1;
		}
	}
	return false;
}

static bool hop_by_hop(const struct http1_header *h)
{
	return (h->name_len >= 6 && strncasecmp(h->name, "proxy-", 6) == 0) || name_is(h, "te") ||
	       name_is(h, "trailer") || name_is(h, "keep-alive") || name_is(h, "connection");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char out[OUT_MAX], secret[1024];
	static struct http1_request req, got;

	if (size < 3)
		return 0;
	bool require = data[0] & 1, upgrades = data[0] & 2;
	size_t secret_len = 1 + (((size_t)data[0] >> 2) * 16 + data[1] % 16) % sizeof(secret);
	size_t cap = 64 + (size_t)data[1] * 64;
	const char *head = (const char *)data + 2;
	size_t len = size - 2;
	/* The secret: "SECRET" then letters, so a copy in the agent's head is possible. */
	for (size_t i = 0; i < secret_len; i++)
		secret[i] = "SECRET"[i % 6];
	struct verdict_inject in = { .header = "Authorization",
				     .prefix = "Bearer ",
				     .placeholder = "PH-0000",
				     .secret = secret,
				     .header_len = 13,
				     .prefix_len = 7,
				     .placeholder_len = 7,
				     .secret_len = (uint32_t)secret_len,
				     .require = require,
				     .upgrades = upgrades };
	enum reason why = REASON_NONE;
	ssize_t head_len = http1_parse_request(head, len, &req, &why);
	if (head_len <= 0)
		return 0;
	size_t creds = 0, upgrade_fields = 0, placeholders = 0;
	bool cred_hop = connection_names(&req, "authorization");
	for (uint32_t i = 0; i < req.header_count; i++) {
		const struct http1_header *h = &req.headers[i];
		creds += name_is(h, "authorization");
		upgrade_fields += name_is(h, "upgrade");
		placeholders += !cred_hop && name_is(h, "authorization") && h->value_len == 14 &&
				strncasecmp(h->value, "bearer ", 7) == 0 &&
				memcmp(h->value + 7, "PH-0000", 7) == 0;
	}
	memset(out, '#', sizeof(out));
	why = REASON_NONE;
	ssize_t n = credential_request_head(&in, &req, head, (size_t)head_len, out, cap, &why);
	if (n < 0) {
		if (why == REASON_BAD_REQUEST && creds >= 2)
			return 0;
		if (why == REASON_HEADERS_TOO_LARGE && creds < 2)
			return 0;
		if (why == REASON_CREDENTIAL_MISSING && require && placeholders == 0 && creds < 2)
			return 0;
		if (why == REASON_UPGRADE_REFUSED && !upgrades && upgrade_fields > 0)
			return 0;
		abort(); /* a refusal its input does not explain */
	}
	if (creds >= 2 || (size_t)n > cap || (require && placeholders == 0) ||
	    (!upgrades && upgrade_fields > 0))
		abort();
	for (size_t i = (size_t)n; i < cap; i++) {
		if (out[i] != '#')
			abort(); /* written past its length */
	}
	ssize_t again = http1_parse_request(out, (size_t)n, &got, &why);
	if (again != n || got.method_len != req.method_len ||
	    memcmp(got.method, req.method, req.method_len) != 0 ||
	    got.target_len != req.target_len || memcmp(got.target, req.target, req.target_len) != 0)
		abort(); /* not the same request */
	/* The agent's fields, in order, as sent; ours after them. */
	bool swapped = false, upgrade = upgrades && upgrade_fields > 0;
	uint32_t j = 0, identity = 0;
	for (uint32_t i = 0; i < got.header_count; i++) {
		const struct http1_header *h = &got.headers[i];
		if (hop_by_hop(h) &&
		    !(upgrade && name_is(h, "connection") && h->value_len == 7 &&
		      memcmp(h->value, "upgrade", 7) == 0 && i + 1 == got.header_count))
			abort(); /* a hop-by-hop field reached the origin */
		if (memchr(h->name, '_', h->name_len) != NULL)
			abort(); /* a name a CGI server reads as another */
		if (name_is(h, "accept-encoding")) {
			if (h->value_len != 8 || memcmp(h->value, "identity", 8) != 0)
				abort();
			identity++;
			continue;
		}
		if (name_is(h, "connection") || (name_is(h, "upgrade") && !upgrade))
			continue; /* checked above: only the upgrade's own */
		/* Agent fields not written (hop-by-hop, or named by Connection) are skipped. */
		while (j < req.header_count &&
		       !(req.headers[j].name_len == h->name_len &&
			 memcmp(req.headers[j].name, h->name, h->name_len) == 0))
			j++;
		if (j == req.header_count)
			abort(); /* a field the agent did not send, or out of order */
		const struct http1_header *a = &req.headers[j++];
		if (a->value_len == h->value_len && memcmp(a->value, h->value, h->value_len) == 0)
			continue;
		/* The one difference allowed: the placeholder swapped in the rule's header. */
		if (swapped || !name_is(h, "authorization") || a->value_len != 14 ||
		    h->value_len != 7 + secret_len || strncasecmp(a->value, "bearer ", 7) != 0 ||
		    memcmp(a->value + 7, "PH-0000", 7) != 0 || memcmp(h->value, a->value, 7) != 0 ||
		    memcmp(h->value + 7, secret, secret_len) != 0)
			abort();
		swapped = true;
	}
	if (identity != 1 || swapped != (placeholders == 1))
		abort();
	if (count_of(out, (size_t)n, secret, secret_len) >
	    count_of(head, (size_t)head_len, secret, secret_len) + (swapped ? 1 : 0))
		abort(); /* the secret somewhere else than its one field */
	return 0;
}
