/*
 * A sandbox's request rate: a token bucket per sandbox, kept by the worker
 * that serves it (no locks, no atomics), refilled from the loop-turn clock.
 */
#ifndef AN_CORE_RATELIMIT_H
#define AN_CORE_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/verdict.h"

/* A zeroed bucket is unused: the first take fills it to the burst. */
struct ratelimit {
	uint64_t milli_tokens; /* tokens x 1000 */
	uint64_t last_ms;      /* when it was last refilled */
	uint32_t generation;   /* the sandbox slot's generation it belongs to */
	bool primed;
};

/*
 * Takes one token for a request at <now_ms> under <l> (l->requests_per_second
 * 0: unlimited, always true). A bucket of another <generation> (the slot was
 * reused by a new sandbox) starts full again. Returns true when the request
 * may go; false with *<retry_after_s> (>= 1) the whole seconds until a token
 * is there.
 */
bool ratelimit_take(struct ratelimit *b, const struct verdict_limits *l, uint32_t generation,
		    uint64_t now_ms, uint32_t *retry_after_s);

#endif /* AN_CORE_RATELIMIT_H */
