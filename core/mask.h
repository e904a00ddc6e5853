/*
 * The inject tier's response masker (core/inject.c): every copy of the
 * secret in what the upstream sent becomes as many asterisks before it
 * reaches the agent, so its framing stays true. Pure: no allocation, no
 * clock, no I/O; the caller owns the buffer and decides when a hold is over.
 */
#ifndef AN_CORE_MASK_H
#define AN_CORE_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/http1.h"

/*
 * Masks every copy of <secret> (<secret_len> bytes, at least 1) that lies
 * wholly in buf[<from>, <to>) with '*', scanning left to right, and returns
 * how far from <from> the bytes may go to the agent now: <to> when <all> (the
 * response ended, the upstream is gone, or the hold's time is up), else <to>
 * less the last min(<secret_len> - 1, <to> - <from>) bytes, whatever they are,
 * since a copy may straddle this read and the next (the caller calls again
 * with the same <from> once more bytes are in, so a copy is masked whole
 * before any of it goes). The held length never depends on the bytes: a hold
 * that did would tell the agent, by its delay, how much of the secret the
 * bytes it had reflected matched.
 */
uint32_t mask_relay_limit(char *buf, uint32_t from, uint32_t to, const char *secret,
			  uint32_t secret_len, bool all);

/* The caller's scratch for mask_relay_limit_chunked: <cap> bytes and places. */
struct mask_view {
	char *bytes;
	uint16_t *where; /* each byte's place in the buffer, from <from> */
	uint32_t cap;    /* at most 65536 */
};

/*
 * As mask_relay_limit for buf[<from>, <to>) holding a chunked body from the
 * point where its framing state was *<at_from> (not changed): the copies are
 * looked for in the body's data alone, across chunk boundaries (an upstream
 * may split a copy with framing), and masked where their bytes lie; the hold
 * is the last min(<secret_len> - 1, data bytes) data bytes and what follows
 * them, whatever they are. <to> - <from> is at most <view>->cap. Framing the
 * upstream got wrong ends the scan there (the caller refuses it).
 */
uint32_t mask_relay_limit_chunked(char *buf, uint32_t from, uint32_t to,
				  const struct http1_chunked *at_from, const char *secret,
				  uint32_t secret_len, bool all, struct mask_view *view);

/*
 * Whether the body of response <r> is as the masker reads it: it names no
 * content coding but "identity" (Content-Encoding, RFC 9110 section 8.4) and
 * no transfer coding but "chunked" (Transfer-Encoding, RFC 9112 section 6.1).
 * A coded body (gzip, br, ...), either way, would hide a copy of the secret
 * from the masker, so the inject tier, which asks for identity, refuses any
 * other answer (502 upstream_bad_response) before a byte of it reaches the
 * agent.
 */
bool mask_readable_coding(const struct http1_response *r);

#endif /* AN_CORE_MASK_H */
