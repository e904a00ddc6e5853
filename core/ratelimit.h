/*
 * Request rates and connection counts, kept by the worker that serves them
 * (no locks, no atomics), refilled from the loop-turn clock: a token bucket
 * per sandbox for its profile's limits, and a worker-local table of one
 * bucket and one connection count per (sandbox, rule) for rules' limits.
 *
 * Limits that every worker must share (the ingress gateway's: any worker
 * may accept a public request for any sandbox) use ratelimit_shared: the
 * generic cell rate algorithm, whose whole state is one "theoretical
 * arrival time", so a take is one compare-and-swap and never a lock.
 */
#ifndef AN_CORE_RATELIMIT_H
#define AN_CORE_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/verdict.h"

/* Largest ratelimit_table: twice the most connections a worker may hold (2^20). */
#define RATELIMIT_TABLE_CAPACITY_MAX (1u << 21)

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

/*
 * A rate limit any thread may take from. Zeroed: unused (every take is then
 * on time). The field is read and written only with the compiler's atomic
 * builtins (ratelimit.c), so this header stays plain C a C++ benchmark can
 * include.
 */
struct ratelimit_shared {
	uint64_t tat_us; /* when the next request is due, microseconds */
};

/*
 * Takes one request at <now_us> (a monotonic clock) under <l>'s
 * requests_per_second and burst (0: unlimited, always true): at most burst
 * at once, then one each 1/rate second. Returns true when the request may
 * go; false with *<retry_after_s> (>= 1) the whole seconds until one may.
 * Any thread, lock-free.
 */
bool ratelimit_shared_take(struct ratelimit_shared *s, const struct verdict_limits *l,
			   uint64_t now_us, uint32_t *retry_after_s);

/* Whose limits an entry of a ratelimit_table keeps. All four fields are the key. */
struct ratelimit_key {
	uint64_t snapshot_generation; /* of the policy snapshot the rule index is from */
	uint32_t slot;                /* the sandbox's slot */
	uint32_t generation;          /* the slot's generation: a reused slot is a new sandbox */
	uint32_t rule_index;          /* verdict.rule_index, never VERDICT_RULE_NONE */
};

/* One sandbox's use of one rule under one snapshot. */
struct ratelimit_entry {
	struct ratelimit_key key;
	struct ratelimit bucket;      /* the rule's requests_per_second/burst for this sandbox */
	struct verdict_limits limits; /* the rule's, as given when the entry was made */
	uint32_t conns;               /* the caller's count of connections open on the rule */
};

/* Index slot: the low half of the key's XXH3 and the entry (index plus one; 0: empty). */
struct ratelimit_slot {
	uint32_t hash;
	uint32_t entry;
};

/* A zeroed table is uninitialised; ratelimit_table_init makes it usable. */
struct ratelimit_table {
	struct ratelimit_slot *slots;    /* owned; 2 x capacity, so probing runs at load <= 1/2 */
	struct ratelimit_entry *entries; /* owned; capacity, filled in order, never moved */
	uint32_t capacity;               /* a power of two */
	uint32_t count;                  /* entries in use */
	uint32_t mask;                   /* slots - 1 */
	uint32_t hand;                   /* where the next eviction scan starts */
	uint64_t evictions;              /* idle entries reused for another key */
	uint64_t full;                   /* gets answered NULL: nothing was evictable */
};

/*
 * Makes <t> an empty table of <capacity> entries (a power of two,
 * 1..RATELIMIT_TABLE_CAPACITY_MAX; the engine's default is
 * LIMITS_RULE_BUCKETS_PER_WORKER). Returns 0, -EINVAL for another capacity
 * (then <t> is zeroed), or -ENOMEM. Start-up only: this is the table's only
 * allocation. Memory is touched as entries are used.
 */
int ratelimit_table_init(struct ratelimit_table *t, uint32_t capacity);

/* Releases what <t> owns and zeroes it; a zeroed <t> is accepted. */
void ratelimit_table_free(struct ratelimit_table *t);

/*
 * The entry of <k> (borrowed), made when missing with a full bucket
 * (bucket.primed false), conns 0 and <l> (the rule's verdict.rule_limits,
 * not all zero) as its limits. For a key that exists, <l> must equal the
 * limits it was made with (the snapshot generation and rule index fix them).
 *
 * When all <capacity> entries are in use, a missing key takes over one
 * entry that is idle at <now_ms>: conns 0 and its bucket refilled to its
 * burst (never primed, or no requests_per_second, counts as refilled), so it
 * is indistinguishable from a fresh one and forgetting it changes no answer.
 * When none is idle, returns NULL: the caller must refuse the request with
 * 429 (rate_limited, Retry-After: 1) rather than serve it unlimited
 * (ratelimit_rule_refusal does). Finding a victim scans the entries from a
 * clock hand: O(1) amortised while idle entries are common, O(capacity)
 * when none is.
 *
 * The caller takes tokens with ratelimit_take(&e->bucket, &e->limits,
 * e->key.generation, now_ms, ...) and counts its connections in e->conns
 * (increment when one opens on the rule, decrement when it closes). An
 * entry never moves and is only taken over at conns 0: a connection counted
 * in conns may keep the pointer until it decrements; any other pointer is
 * valid only until the next ratelimit_table_get.
 *
 * Worker thread only: one table per worker, no locks, no atomics.
 */
struct ratelimit_entry *ratelimit_table_get(struct ratelimit_table *t,
					    const struct ratelimit_key *k,
					    const struct verdict_limits *l, uint64_t now_ms);

/*
 * The per-rule limits' answer to one request of key <k> under its rule's
 * limits <l> (verdict.rule_limits, not all zero) at <now_ms>, from <t>:
 *   - REASON_RATE_LIMITED, *<retry_after_s> 1, when <t> has no entry for <k>
 *     and none to give (ratelimit_table_get's NULL: refused, never unlimited);
 *   - REASON_CONCURRENCY_LIMITED, *<retry_after_s> 1, when l->concurrent is
 *     set and the entry counts that many connections already (no token taken);
 *   - REASON_RATE_LIMITED, *<retry_after_s> ratelimit_take's (>= 1), when the
 *     entry's bucket has no token;
 *   - else REASON_NONE, *<retry_after_s> 0: a token taken and the
 *     connection counted (conns + 1) in *<entry>, which the caller keeps
 *     until that connection is done on the rule, then decrements its conns.
 * *<entry> is NULL on every refusal. Worker thread only.
 */
enum reason ratelimit_rule_refusal(struct ratelimit_table *t, const struct ratelimit_key *k,
				   const struct verdict_limits *l, uint64_t now_ms,
				   struct ratelimit_entry **entry, uint32_t *retry_after_s);

/* The entry of <k>, or NULL; never makes or evicts one. Worker thread only. */
struct ratelimit_entry *ratelimit_table_find(const struct ratelimit_table *t,
					     const struct ratelimit_key *k);

#endif /* AN_CORE_RATELIMIT_H */
