/*
 * The inject tier's response masker: a memmem scan over what is not yet
 * relayed, and a hold of the last bytes that does not depend on what they
 * are (core/mask.h). What it promises: an exact copy of the secret that the
 * caller gives it whole, in one call or held across calls, never leaves
 * unmasked. What it cannot: a copy split by chunk framing, encoded,
 * truncated, or released by a hold that ran out before its end came.
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
