/*
 * The inject tier's response masker: a memmem scan over what is not yet
 * relayed, and a hold of the last bytes that does not depend on what they
 * are (core/mask.h). A chunked body is scanned in its data alone: the data
 * bytes are gathered, with their places, into the caller's view, copies are
 * found there and masked in place. What it promises: an exact copy of the
 * secret in the body's data (or in a head, or in a body of another framing),
 * given whole in one call or held across calls, never leaves unmasked. What
 * it cannot: a copy encoded, truncated, or released by a hold that ran out
 * before its end came.
 */
#include "core/mask.h"

#include <string.h>

#include "core/an.h"

uint32_t mask_relay_limit(char *buf, uint32_t from, uint32_t to, const char *secret,
			  uint32_t secret_len, bool all)
{
	AN_ASSERT(secret_len > 0 && from <= to);
	for (char *p = buf + from; p < buf + to;) {
		p = memmem(p, (size_t)(buf + to - p), secret, secret_len);
		if (p == NULL)
			break;
		memset(p, '*', secret_len);
		p += secret_len;
	}
	if (all)
		return to;
	uint32_t keep = secret_len - 1;
	uint32_t avail = to - from;
	return to - (keep < avail ? keep : avail);
}

uint32_t mask_relay_limit_chunked(char *buf, uint32_t from, uint32_t to,
				  const struct http1_chunked *at_from, const char *secret,
				  uint32_t secret_len, bool all, struct mask_view *view)
{
	AN_ASSERT(secret_len > 0 && from <= to);
	AN_ASSERT(to - from <= view->cap && view->cap <= (uint32_t)UINT16_MAX + 1u);
	struct http1_chunked s = *at_from;
	uint32_t n = 0;
	for (uint32_t i = from; i < to;) {
		size_t off = 0, run = 0;
		ssize_t m = http1_chunked_next_data(&s, buf + i, to - i, &off, &run);
		if (m <= 0)
			break;
		for (size_t k = 0; k < run; k++) {
			view->bytes[n] = buf[i + off + k];
			view->where[n] = (uint16_t)(i + off + k - from);
			n++;
		}
		i += (uint32_t)m;
	}
	for (char *p = view->bytes; p < view->bytes + n;) {
		p = memmem(p, (size_t)(view->bytes + n - p), secret, secret_len);
		if (p == NULL)
			break;
		uint32_t first = (uint32_t)(p - view->bytes);
		for (uint32_t k = first; k < first + secret_len; k++)
			buf[from + view->where[k]] = '*';
		memset(p, '*', secret_len);
		p += secret_len;
	}
	uint32_t keep = secret_len - 1;
	if (all || keep == 0 || n == 0)
		return to;
	return from + view->where[n > keep ? n - keep : 0];
}

bool mask_readable_coding(const struct http1_response *r)
{
	for (uint32_t i = 0; i < r->header_count; i++) {
		const struct http1_header *h = &r->headers[i];
		/* A content coding other than identity, or a transfer coding other than
		 * chunked (gzip, deflate, compress, ...): the bytes are not the body's. */
		const char *plain;
		if (http1_name_is(h->name, h->name_len, "content-encoding"))
			plain = "identity";
		else if (http1_name_is(h->name, h->name_len, "transfer-encoding"))
			plain = "chunked";
		else
			continue;
		const char *p = h->value;
		const char *elem;
		size_t elem_len;
		while (http1_list_next(&p, h->value + h->value_len, &elem, &elem_len)) {
			if (!http1_name_is(elem, elem_len, plain))
				return false;
		}
	}
	return true;
}
