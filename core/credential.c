/*
 * The credential swap in a request head, pure (core/credential.h): the one
 * place the secret is written into anything. The field is ours only when its
 * name is the rule's header (any case) and its whole value is the rule's
 * prefix (any case) followed by the placeholder (exact): a placeholder inside
 * another value, or after other text, is left as it is, so an agent cannot
 * have the secret written where it chooses.
 */
#include "core/credential.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "core/an.h"
#include "core/limits.h"

/* Whether field name <name>/<len> is the rule's credential header. */
static bool credential_header_is(const struct verdict_inject *in, const char *name, size_t len)
{
	return len == in->header_len && strncasecmp(name, in->header, len) == 0;
}

/*
 * Writes field <h> to <o>, the credential swapped in when its value is the
 * placeholder (with the rule's prefix). Returns whether it was swapped; a
 * field that does not fit sets o->overflow.
 */
static bool credential_field(const struct verdict_inject *in, const struct http1_header *h,
			     struct http1_out *o)
{
	bool ours = credential_header_is(in, h->name, h->name_len) &&
		    h->value_len == (size_t)in->prefix_len + in->placeholder_len &&
		    strncasecmp(h->value, in->prefix, in->prefix_len) == 0 &&
		    memcmp(h->value + in->prefix_len, in->placeholder, in->placeholder_len) == 0;
	if (!ours) {
		http1_out_field(o, h->name, h->name_len, h->value, h->value_len);
		return false;
	}
	http1_out_put(o, h->name, h->name_len);
	http1_out_put(o, ": ", 2);
	http1_out_put(o, h->value, in->prefix_len);
	http1_out_put(o, in->secret, in->secret_len);
	http1_out_put(o, "\r\n", 2);
	return true;
}

/* How many of <req>'s fields are the rule's credential header (by name). */
static uint32_t credential_header_count(const struct verdict_inject *in,
					const struct http1_request *req)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < req->header_count; i++)
		n += credential_header_is(in, req->headers[i].name, req->headers[i].name_len);
	return n;
}

ssize_t credential_request_head(const struct verdict_inject *in, const struct http1_request *req,
				const char *head, size_t head_len, char *out, size_t cap,
				enum reason *why)
{
	/* The request line as sent, from its method: empty lines before it are not sent. */
	const char *line = req->method;
	AN_ASSERT(line >= head && line < head + head_len); /* <req> was parsed from <head> */
	const char *eol = memchr(line, '\n', (size_t)(head + head_len - line));
	bool drop[LIMITS_HEADERS_MAX];
	bool swapped = false;

	AN_ASSERT(eol != NULL);
	AN_ASSERT(req->header_count <= LIMITS_HEADERS_MAX);
	/* One credential a request: a repeated header is refused, never swapped twice. */
	if (credential_header_count(in, req) > 1) {
		*why = REASON_BAD_REQUEST;
		return -1;
	}
	bool wants_upgrade = http1_request_upgrades(req);
	bool upgrade = in->upgrades && wants_upgrade;
	/* The upstream's head is held to the bounds of the agent's (http1_parse_request). */
	struct http1_out o = { .p = out,
			       .cap = cap < LIMITS_HEAD_BYTES_MAX ? cap : LIMITS_HEAD_BYTES_MAX };
	uint32_t fields = 1 + (upgrade ? 1u : 0u); /* ours: Accept-Encoding, Connection */
	http1_hop_by_hop(req, drop);
	http1_out_put(&o, line, (size_t)(eol - line) + 1);
	for (uint32_t i = 0; i < req->header_count; i++) {
		const struct http1_header *h = &req->headers[i];
		if (upgrade && http1_name_is(h->name, h->name_len, "upgrade"))
			drop[i] = false;
		/* The masker reads the response as sent: no compression is asked for. */
		if (http1_name_is(h->name, h->name_len, "accept-encoding"))
			drop[i] = true;
		if (drop[i])
			continue;
		swapped |= credential_field(in, h, &o);
		fields++;
	}
	http1_out_field(&o, "Accept-Encoding", 15, "identity", 8);
	if (upgrade)
		http1_out_field(&o, "Connection", 10, "upgrade", 7);
	ssize_t len = http1_out_end(&o);
	if (len < 0 || fields > LIMITS_HEADERS_MAX) {
		*why = REASON_HEADERS_TOO_LARGE;
		return -1;
	}
	if (!swapped && in->require) {
		*why = REASON_CREDENTIAL_MISSING;
		return -1;
	}
	if (!in->upgrades && wants_upgrade) {
		*why = REASON_UPGRADE_REFUSED; /* at once: the agent falls back */
		return -1;
	}
	return len;
}
