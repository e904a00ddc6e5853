/*
 * Token bucket in thousandths of a token, so a rate of one request a second
 * refills one unit per millisecond and the loop-turn clock (ms) is enough.
 * The capacity is the burst (the rate when the policy names none). A refused
 * request takes nothing: an agent that waits Retry-After seconds finds a
 * token. Rejected: a sliding-window log (memory per request) and a shared
 * bucket with atomics (a Unix sandbox has one worker, which owns its bucket).
 *
 * The per-rule table: entries in one array, filled in order and never moved,
 * found through a separate index of 8-byte slots (twice as many as entries:
 * linear probing at load <= 1/2), keyed with XXH3 of (snapshot generation,
 * sandbox slot, its generation, rule index). A key of another snapshot or
 * sandbox generation is simply another entry, so a reload or a reused slot
 * starts afresh without touching the old ones. Entries are never deleted
 * but taken over when the table is full, only from idle ones (no open
 * connection, bucket refilled to the burst: as good as new), found by a
 * clock hand; the victim's slot goes by backward-shift deletion, so no
 * tombstones pile up and every probe still ends at an empty slot. Nothing is
 * allocated after init. Rejected: an LRU list (two pointers per entry and a
 * write per hit) and evicting busy entries (that would hand a sandbox a
 * fresh burst and drop its connection count: a limit anyone could reset).
 */
#include "core/ratelimit.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "core/an.h"
#include "core/pool.h"

#define MILLI 1000u

bool ratelimit_shared_take(struct ratelimit_shared *s, const struct verdict_limits *l,
			   uint64_t now_us, uint32_t *retry_after_s)
{
	AN_ASSERT(s != NULL);
	AN_ASSERT(retry_after_s != NULL);
	if (l->requests_per_second == 0)
		return true;
	uint64_t burst = l->burst != 0 ? l->burst : l->requests_per_second;
	uint64_t interval = 1000000u / l->requests_per_second; /* >= 1: rates are <= 10^6 */
	uint64_t tolerance = (burst - 1) * interval; /* how far ahead the due time may run */
	uint64_t tat = atomic_load_explicit(&s->tat_us, memory_order_relaxed);
	for (;;) {
		uint64_t from = tat > now_us ? tat : now_us;
		if (from - now_us > tolerance) {
			uint64_t wait_us = from - now_us - tolerance;
			*retry_after_s = (uint32_t)((wait_us + 999999u) / 1000000u);
			return false;
		}
		if (atomic_compare_exchange_weak_explicit(&s->tat_us, &tat, from + interval,
							  memory_order_relaxed,
							  memory_order_relaxed))
			return true;
	}
}

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
	if (b->milli_tokens > cap)
		b->milli_tokens = cap; /* a reload lowered the burst */
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

/* --- the per-rule table ------------------------------------------------------------------- */

static_assert(sizeof(struct ratelimit_entry) == 64, "LIMITS_RULE_BUCKETS_PER_WORKER counts on it");
static_assert(sizeof(struct ratelimit_slot) == 8, "LIMITS_RULE_BUCKETS_PER_WORKER counts on it");
static_assert(RATELIMIT_TABLE_CAPACITY_MAX <= UINT32_MAX / 2, "slot indexes fit 32 bits");

static uint32_t key_hash(const struct ratelimit_key *k)
{
	/* Packed into words: the struct's padding must not reach the hash. */
	const uint64_t words[3] = { k->snapshot_generation, (uint64_t)k->slot << 32 | k->generation,
				    k->rule_index };

	return (uint32_t)XXH3_64bits(words, sizeof(words));
}

static bool key_eq(const struct ratelimit_key *a, const struct ratelimit_key *b)
{
	return a->snapshot_generation == b->snapshot_generation && a->slot == b->slot &&
	       a->generation == b->generation && a->rule_index == b->rule_index;
}

static bool limits_eq(const struct verdict_limits *a, const struct verdict_limits *b)
{
	return a->requests_per_second == b->requests_per_second && a->burst == b->burst &&
	       a->concurrent == b->concurrent;
}

/*
 * True when forgetting <e> at <now_ms> changes no answer: no connection is
 * counted on it, and its bucket is full again (or was never used).
 */
static bool entry_idle(const struct ratelimit_entry *e, uint64_t now_ms)
{
	const struct ratelimit *b = &e->bucket;
	uint64_t rate = e->limits.requests_per_second;

	/* Taken with e->key.generation, so a reused slot never reaches an old bucket. */
	AN_DASSERT(!b->primed || b->generation == e->key.generation);
	if (e->conns != 0)
		return false;
	if (rate == 0 || !b->primed)
		return true;
	uint64_t cap = (e->limits.burst != 0 ? e->limits.burst : rate) * MILLI;
	AN_DASSERT(b->milli_tokens <= cap);
	if (b->milli_tokens >= cap)
		return true;
	uint64_t elapsed = now_ms > b->last_ms ? now_ms - b->last_ms : 0;
	/* ratelimit_take would refill elapsed x rate thousandths: compare without overflow. */
	return elapsed >= (cap - b->milli_tokens + rate - 1) / rate;
}

int ratelimit_table_init(struct ratelimit_table *t, uint32_t capacity)
{
	AN_ASSERT(t != NULL);
	memset(t, 0, sizeof(*t));
	if (capacity == 0 || capacity > RATELIMIT_TABLE_CAPACITY_MAX ||
	    (capacity & (capacity - 1)) != 0)
		return -EINVAL;
	t->slots = pool_calloc((size_t)capacity * 2, sizeof(*t->slots));
	t->entries = pool_calloc(capacity, sizeof(*t->entries));
	if (t->slots == NULL || t->entries == NULL) {
		ratelimit_table_free(t);
		return -ENOMEM;
	}
	t->capacity = capacity;
	t->mask = capacity * 2 - 1;
	AN_ASSERT(t->mask + 1 == 2 * t->capacity);
	AN_ASSERT(t->count == 0 && t->hand == 0);
	return 0;
}

void ratelimit_table_free(struct ratelimit_table *t)
{
	AN_ASSERT(t != NULL);
	AN_ASSERT(t->count <= t->capacity);
	AN_FREE(&t->slots);
	AN_FREE(&t->entries);
	memset(t, 0, sizeof(*t));
}

/* The slot holding the entry of <k> (hash <h>), or the empty slot where it would go. */
static uint32_t slot_probe(const struct ratelimit_table *t, const struct ratelimit_key *k,
			   uint32_t h)
{
	uint32_t i = h & t->mask;

	AN_DASSERT(t->count <= t->capacity);
	for (uint32_t n = 0; n <= t->mask; n++, i = (i + 1) & t->mask) {
		const struct ratelimit_slot *s = &t->slots[i];

		if (s->entry == 0)
			return i;
		if (s->hash == h && key_eq(&t->entries[s->entry - 1].key, k))
			return i;
	}
	AN_ASSERT(!"no empty slot: the index is kept at load <= 1/2");
	return 0;
}

/*
 * Empties slot <i> by backward-shift deletion: each later slot of the run
 * moves back into the hole unless its home lies cyclically in (hole, slot],
 * so every key stays reachable from its home without tombstones.
 */
static void slot_delete(struct ratelimit_table *t, uint32_t i)
{
	AN_ASSERT(t->slots[i].entry != 0);
	for (uint32_t j = (i + 1) & t->mask; t->slots[j].entry != 0; j = (j + 1) & t->mask) {
		uint32_t home = t->slots[j].hash & t->mask;

		if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
			t->slots[i] = t->slots[j];
			i = j;
		}
	}
	t->slots[i] = (struct ratelimit_slot){ 0, 0 };
	AN_ASSERT(t->slots[i].entry == 0);
}

/* The index of an idle entry from the clock hand on, or UINT32_MAX when none is. */
static uint32_t victim_find(struct ratelimit_table *t, uint64_t now_ms)
{
	uint32_t emask = t->capacity - 1;

	AN_ASSERT(t->count == t->capacity);
	for (uint32_t n = 0; n < t->capacity; n++) {
		uint32_t i = (t->hand + n) & emask;

		if (entry_idle(&t->entries[i], now_ms)) {
			t->hand = (i + 1) & emask;
			return i;
		}
	}
	return UINT32_MAX;
}

/* Takes entry <victim> from its key: its slot goes, and *<slot> is re-probed for <k>. */
static void victim_evict(struct ratelimit_table *t, uint32_t victim, const struct ratelimit_key *k,
			 uint32_t h, uint32_t *slot)
{
	const struct ratelimit_key *old = &t->entries[victim].key;
	uint32_t at = slot_probe(t, old, key_hash(old));

	AN_ASSERT(t->slots[at].entry == victim + 1);
	slot_delete(t, at);
	t->evictions++;
	/* The shift may have moved slots across the empty one found before. */
	*slot = slot_probe(t, k, h);
	AN_ASSERT(t->slots[*slot].entry == 0);
}

struct ratelimit_entry *ratelimit_table_get(struct ratelimit_table *t,
					    const struct ratelimit_key *k,
					    const struct verdict_limits *l, uint64_t now_ms)
{
	AN_ASSERT(t->entries != NULL);
	AN_ASSERT(k->rule_index != VERDICT_RULE_NONE);
	AN_DASSERT(l->requests_per_second != 0 || l->concurrent != 0);
	uint32_t h = key_hash(k);
	uint32_t slot = slot_probe(t, k, h);
	if (t->slots[slot].entry != 0) {
		struct ratelimit_entry *e = &t->entries[t->slots[slot].entry - 1];
		AN_ASSERT(limits_eq(&e->limits, l)); /* one key, one rule of one snapshot */
		return e;
	}
	uint32_t index = t->count;
	if (index == t->capacity) {
		index = victim_find(t, now_ms);
		if (index == UINT32_MAX) {
			t->full++;
			return NULL;
		}
		victim_evict(t, index, k, h, &slot);
	} else {
		t->count++;
	}
	struct ratelimit_entry *e = &t->entries[index];
	*e = (struct ratelimit_entry){ .key = *k, .limits = *l };
	t->slots[slot] = (struct ratelimit_slot){ .hash = h, .entry = index + 1 };
	AN_ASSERT(t->count <= t->capacity);
	return e;
}

struct ratelimit_entry *ratelimit_table_find(const struct ratelimit_table *t,
					     const struct ratelimit_key *k)
{
	AN_ASSERT(t->entries != NULL);
	AN_ASSERT(k != NULL);
	uint32_t slot = slot_probe(t, k, key_hash(k));
	uint32_t entry = t->slots[slot].entry;
	return entry != 0 ? &t->entries[entry - 1] : NULL;
}

enum reason ratelimit_rule_refusal(struct ratelimit_table *t, const struct ratelimit_key *k,
				   const struct verdict_limits *l, uint64_t now_ms,
				   struct ratelimit_entry **entry, uint32_t *retry_after_s)
{
	uint32_t retry = 0;

	*entry = NULL;
	*retry_after_s = 1;
	struct ratelimit_entry *e = ratelimit_table_get(t, k, l, now_ms);
	if (e == NULL)
		return REASON_RATE_LIMITED; /* nothing idle to reuse: refused, not unlimited */
	if (l->concurrent != 0 && e->conns >= l->concurrent)
		return REASON_CONCURRENCY_LIMITED;
	if (!ratelimit_take(&e->bucket, &e->limits, k->generation, now_ms, &retry)) {
		*retry_after_s = retry;
		return REASON_RATE_LIMITED;
	}
	*retry_after_s = 0;
	e->conns++;
	*entry = e;
	return REASON_NONE;
}
