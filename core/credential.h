/*
 * The inject tier's request head (core/inject.c): the agent's head rewritten
 * for the upstream, the placeholder swapped for the secret. Pure: no
 * allocation, no clock, no I/O; the caller owns both buffers. The rewrite
 * goes through the one head writer (http1_out) and the hop-by-hop table that
 * plain forwarding uses, so what the agent's proxy sees of the request
 * (Connection and the fields it names, Keep-Alive, TE, Proxy-*) never reaches
 * the origin.
 */
#ifndef AN_CORE_CREDENTIAL_H
#define AN_CORE_CREDENTIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/http1.h"
#include "core/reason.h"
#include "core/verdict.h"

/*
 * Writes the upstream's head for request <req> (parsed from the <head_len>
 * bytes at <head>, whose request line is copied as sent, without the empty
 * lines a client may send before it) into <out> (<cap> bytes): every field but
 * those http1_hop_by_hop marks (the hop-by-hop ones, every name with '_'), in
 * order, the credential header <in>->header whose value is exactly
 * <prefix><placeholder> with <prefix><secret> instead, any
 * Accept-Encoding replaced by "identity" (the response masker reads bytes as
 * sent), and an upgrade the rule allows kept with a Connection of ours.
 * Returns the head's length, or -1 with *<why>: bad_request when the request
 * carries the credential header more than once (never swapped twice),
 * headers_too_large when the rewritten head does not fit <cap> or the
 * bounds an agent's head is held to (LIMITS_HEAD_BYTES_MAX bytes,
 * LIMITS_HEADERS_MAX fields; a secret longer than its placeholder grows it,
 * our Accept-Encoding may add a field), credential_missing when the rule requires
 * the placeholder and no field held it, upgrade_refused for an upgrade the
 * rule does not allow. Borrows <in>, <req> and <head>; writes only <out>
 * and *<why>.
 */
ssize_t credential_request_head(const struct verdict_inject *in, const struct http1_request *req,
				const char *head, size_t head_len, char *out, size_t cap,
				enum reason *why);

#endif /* AN_CORE_CREDENTIAL_H */
