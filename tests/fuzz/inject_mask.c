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
 * With the first byte's high bit set the body goes chunked, in chunks whose
 * sizes the input picks, through mask_relay_limit_chunked as the inject relay
 * calls it (the framing state advanced over what went): the framing reaches
 * the agent byte for byte, the data as above (no copy in the data read
 * across chunks, '*' only inside one), and each call holds exactly the last
 * min(secret_len - 1, unsent data bytes) data bytes and what follows them.
 *
 * fuzz-sources: core/mask.c core/http1.c core/an.c core/reason.c core/pool.c
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

#define STREAM_MAX (BODY_MAX * 6u + 16u)

/* Whether <got> (<len> bytes) is <body> with only whole copies of <secret> masked. */
static void check_masked(const char *got, const char *body, uint32_t len, const char *secret,
			 uint32_t slen)
{
	for (uint32_t i = 0; i < len; i++) {
		if (got[i] != body[i] && got[i] != '*')
			abort();
	}
	if (memmem(got, len, secret, slen) != NULL)
		abort(); /* a copy reached the agent */
	/* A '*' only where a copy of the secret covered that byte of the body. */
	for (uint32_t i = 0; i < len; i++) {
		if (got[i] != '*' || body[i] == '*')
			continue;
		bool covered = false;
		for (uint32_t s = i + 1 >= slen ? i + 1 - slen : 0; s <= i && !covered; s++)
			covered = s + slen <= len && memcmp(body + s, secret, slen) == 0;
		if (!covered)
			abort();
	}
}

/* The chunked mode: <body> framed in chunks, relayed in reads, as the inject relay does. */
static void relay_chunked(const char *body, uint32_t blen, const uint8_t *rest, size_t rest_len,
			  const char *secret, uint32_t slen)
{
	static char stream[STREAM_MAX], buf[STREAM_MAX], got[STREAM_MAX], data[BODY_MAX];
	static bool is_data[STREAM_MAX];
	static char view_bytes[STREAM_MAX];
	static uint16_t view_where[STREAM_MAX];
	uint32_t len = 0, k = 1;

	for (uint32_t at = 0; at < blen;) {
		uint32_t n = 1u + (k < rest_len ? rest[k] % 24u : 5u);
		k += 4;
		if (n > blen - at)
			n = blen - at;
		uint32_t line = (uint32_t)snprintf(stream + len, 16, "%x\r\n", n);
		memset(is_data + len, 0, line);
		len += line;
		memcpy(stream + len, body + at, n);
		memset(is_data + len, 1, n);
		len += n;
		memcpy(stream + len, "\r\n", 2);
		memset(is_data + len, 0, 2);
		len += 2;
		at += n;
	}
	memcpy(stream + len, "0\r\n\r\n", 5);
	memset(is_data + len, 0, 5);
	len += 5;
	struct http1_chunked sent = { 0 };
	struct mask_view view = { view_bytes, view_where, STREAM_MAX };
	uint32_t fill = 0, off = 0, cut = 3;
	while (fill < len) {
		uint32_t n = 1u + (cut < rest_len ? rest[cut] % 64u : 7u);
		cut += 4;
		if (n > len - fill)
			n = len - fill;
		memcpy(buf + fill, stream + fill, n);
		fill += n;
		uint32_t limit =
		    mask_relay_limit_chunked(buf, off, fill, &sent, secret, slen, false, &view);
		/* The hold: the last min(slen - 1, data bytes) data bytes and what follows. */
		uint32_t unsent_data = 0;
		for (uint32_t i = off; i < fill; i++)
			unsent_data += is_data[i];
		uint32_t keep = slen - 1 < unsent_data ? slen - 1 : unsent_data;
		uint32_t want = fill;
		for (uint32_t held = 0; keep > 0 && held < keep; want--)
			held += is_data[want - 1];
		if (limit != want)
			abort(); /* the hold depends on nothing but lengths and framing */
		memcpy(got + off, buf + off, limit - off);
		(void)http1_chunked_scan(&sent, buf + off, limit - off);
		off = limit;
	}
	uint32_t limit = mask_relay_limit_chunked(buf, off, fill, &sent, secret, slen, true, &view);
	if (limit != fill)
		abort();
	memcpy(got + off, buf + off, limit - off);
	/* The framing byte for byte; the data, read across the chunks, masked. */
	uint32_t dlen = 0;
	for (uint32_t i = 0; i < len; i++) {
		if (!is_data[i] && got[i] != stream[i])
			abort();
		if (is_data[i])
			data[dlen++] = got[i];
	}
	if (dlen != blen)
		abort();
	check_masked(data, body, blen, secret, slen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char body[BODY_MAX], buf[BODY_MAX], got[BODY_MAX];
	char secret[32];

	if (size < 2)
		return 0;
	uint32_t slen = 1u + (data[0] & 0x7fu) % 32u;
	if (size < 1u + slen + 1u)
		return 0;
	for (uint32_t i = 0; i < slen; i++)
		secret[i] = letter(data[1 + i]);
	const uint8_t *rest = data + 1 + slen;
	size_t rest_len = size - 1 - slen;
	/* Even bytes: the body; odd bytes: read lengths (and chunk sizes). */
	uint32_t blen = 0;
	for (size_t i = 0; i < rest_len && blen < BODY_MAX; i += 2)
		body[blen++] = letter(rest[i]);
	if (data[0] & 0x80) {
		relay_chunked(body, blen, rest, rest_len, secret, slen);
		return 0;
	}

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
	check_masked(got, body, blen, secret, slen);
	return 0;
}
