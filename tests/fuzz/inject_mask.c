/*
 * libFuzzer driver for the inject tier's response masker (core/mask.c). The
 * input's first byte gives the secret's length (1..32), the next bytes the
 * secret (drawn from a small alphabet with the body's, so copies and near
 * copies are common; never '*', whose runs could otherwise join a masked
 * copy into a new one), the rest a response body cut into reads of lengths
 * the input also picks. The body goes through mask_relay_limit as the inject
 * relay feeds it: each read appended, what may go relayed, the held tail kept
 * for the next call, all of it at the end. Invariants:
 *   - what the agent got is as long as the body, each byte either the body's
 *     or '*', and it holds no copy of the secret;
 *   - a body byte becomes '*' only inside a copy of the secret;
 *   - each call holds back exactly min(secret_len - 1, what is unsent), whatever
 *     the bytes are (no timing signal), and nothing once told all.
 *
 * fuzz-sources: core/mask.c core/http1.c core/an.c core/reason.c core/pool.c
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/mask.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BODY_MAX 8192u

static const char ALPHABET[] = "ab-kK0\r\n";

static char letter(uint8_t b)
{
	return ALPHABET[b % (sizeof(ALPHABET) - 1)];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char body[BODY_MAX], buf[BODY_MAX], got[BODY_MAX];
	char secret[32];

	if (size < 2)
		return 0;
	uint32_t slen = 1u + data[0] % 32u;
	if (size < 1u + slen + 1u)
		return 0;
	for (uint32_t i = 0; i < slen; i++)
		secret[i] = letter(data[1 + i]);
	const uint8_t *rest = data + 1 + slen;
	size_t rest_len = size - 1 - slen;
	/* Even bytes: the body; odd bytes: read lengths. */
	uint32_t blen = 0;
	for (size_t i = 0; i < rest_len && blen < BODY_MAX; i += 2)
		body[blen++] = letter(rest[i]);

	uint32_t fill = 0, off = 0, sent = 0, cut = 1;
	while (fill < blen) {
		uint32_t n = 1u + (cut < rest_len ? rest[cut] % 64u : 7u);
		cut += 2;
		if (n > blen - fill)
			n = blen - fill;
		memcpy(buf + fill, body + fill, n);
		fill += n;
		uint32_t limit = mask_relay_limit(buf, off, fill, secret, slen, false);
		uint32_t keep = slen - 1 < fill - off ? slen - 1 : fill - off;
		if (limit != fill - keep)
			abort(); /* the hold depends on nothing but lengths */
		memcpy(got + sent, buf + off, limit - off);
		sent += limit - off;
		off = limit;
	}
	uint32_t limit = mask_relay_limit(buf, off, fill, secret, slen, true);
	if (limit != fill)
		abort();
	memcpy(got + sent, buf + off, limit - off);
	sent += limit - off;
	if (sent != blen)
		abort();
	for (uint32_t i = 0; i < blen; i++) {
		if (got[i] != body[i] && got[i] != '*')
			abort();
	}
	if (memmem(got, blen, secret, slen) != NULL)
		abort(); /* a copy reached the agent */
	/* A '*' only where a copy of the secret covered that byte of the body. */
	for (uint32_t i = 0; i < blen; i++) {
		if (got[i] != '*')
			continue;
		bool covered = false;
		for (uint32_t s = i + 1 >= slen ? i + 1 - slen : 0; s <= i && !covered; s++)
			covered = s + slen <= blen && memcmp(body + s, secret, slen) == 0;
		if (!covered)
			abort();
	}
	return 0;
}
