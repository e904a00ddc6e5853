/*
 * Token bucket in thousandths of a token, so a rate of one request a second
 * refills one unit per millisecond and the loop-turn clock (ms) is enough.
 * The capacity is the burst (the rate when the policy names none). A refused
 * request takes nothing: an agent that waits Retry-After seconds finds a
 * token. Rejected: a sliding-window log (memory per request) and a shared
 * bucket with atomics (a Unix sandbox has one worker, which owns its bucket).
 */
#include "core/ratelimit.h"

#include "core/an.h"

#define MILLI 1000u

bool ratelimit_take(struct ratelimit *b, const struct verdict_limits *l, uint32_t generation,
		    uint64_t now_ms, uint32_t *retry_after_s)
{
	AN_ASSERT(b != NULL);
	AN_ASSERT(retry_after_s != NULL);
	if (l->requests_per_second == 0)
		return true;
	uint64_t burst = l->burst != 0 ? l->burst : l->requests_per_second;
	uint64_t cap = burst * MILLI;
	if (!b->primed || b->generation != generation) {
		*b = (struct ratelimit){ .milli_tokens = cap,
					 .last_ms = now_ms,
					 .generation = generation,
					 .primed = true };
	}
	if (now_ms > b->last_ms) {
		/* rate tokens a second = rate thousandths a millisecond */
		uint64_t refill = (now_ms - b->last_ms) * l->requests_per_second;
		b->milli_tokens = refill >= cap - b->milli_tokens ? cap : b->milli_tokens + refill;
		b->last_ms = now_ms;
	}
	AN_ASSERT(b->milli_tokens <= cap);
	if (b->milli_tokens >= MILLI) {
		b->milli_tokens -= MILLI;
		return true;
	}
	uint64_t missing = MILLI - b->milli_tokens;
	uint64_t wait_ms = (missing + l->requests_per_second - 1) / l->requests_per_second;
	*retry_after_s = (uint32_t)((wait_ms + 999) / 1000);
	AN_ASSERT(*retry_after_s >= 1);
	return false;
}
