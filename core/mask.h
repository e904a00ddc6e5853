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

#endif /* AN_CORE_MASK_H */
