/*
 * Unit tests for core/ratelimit.c: the burst, the refill, Retry-After that
 * is honoured (waiting that long finds a token), a reused slot, no limit;
 * then the per-rule table: capacity bounds at N and N+1, find or insert,
 * one entry per (sandbox, rule, generations), eviction of idle entries only
 * (the refill boundary at N and N+1), NULL when nothing is idle, and a
 * randomized run against a plain reference that checks the probing
 * invariant after every operation. Then the rules' answer on it
 * (ratelimit_rule_refusal): a full table refuses 429 with Retry-After 1,
 * the concurrent limit at N and N+1 spends no token, the rate at N-1 and
 * N ms. Last the shared limiter: its burst, a Retry-After that is
 * honoured, a slow rate, no limit, and two threads taking at once, which
 * together get exactly the burst.
 */
#include "../../../core/ratelimit.c"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/limits.h"
#include "tests/unit/unit.h"

START_TEST(burst_then_refused)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { .requests_per_second = 2, .burst = 3 };
	uint32_t retry = 0;

	for (int i = 0; i < 3; i++)
		ck_assert(ratelimit_take(&b, &l, 1, 1000, &retry));
	ck_assert(!ratelimit_take(&b, &l, 1, 1000, &retry));
	ck_assert_uint_eq(retry, 1); /* half a second to a token: one whole second */
	/* Refused requests take nothing, and the wait said is enough. */
	ck_assert(!ratelimit_take(&b, &l, 1, 1200, &retry));
	ck_assert(ratelimit_take(&b, &l, 1, 1000 + 1000 * retry, &retry));
}
END_TEST

START_TEST(slow_rate_retry_after)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { .requests_per_second = 1 };
	uint32_t retry = 0;

	ck_assert(ratelimit_take(&b, &l, 7, 50, &retry));
	ck_assert(!ratelimit_take(&b, &l, 7, 50, &retry));
	ck_assert_uint_eq(retry, 1);
	ck_assert(!ratelimit_take(&b, &l, 7, 1049, &retry));
	ck_assert(ratelimit_take(&b, &l, 7, 1050, &retry));
	/* Idle for long: the bucket fills to the burst (the rate), no further. */
	ck_assert(ratelimit_take(&b, &l, 7, 100000, &retry));
	ck_assert(!ratelimit_take(&b, &l, 7, 100000, &retry));
}
END_TEST

START_TEST(reused_slot_starts_full)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { .requests_per_second = 1, .burst = 1 };
	uint32_t retry = 0;

	ck_assert(ratelimit_take(&b, &l, 1, 10, &retry));
	ck_assert(!ratelimit_take(&b, &l, 1, 10, &retry));
	ck_assert(ratelimit_take(&b, &l, 2, 10, &retry)); /* another sandbox now */
}
END_TEST

/* A reload may lower the burst under a bucket that holds more: it keeps the new burst. */
START_TEST(lowered_burst_is_clamped)
{
	struct ratelimit b = { 0 };
	struct verdict_limits wide = { .requests_per_second = 1, .burst = 10 };
	struct verdict_limits narrow = { .requests_per_second = 1, .burst = 2 };
	uint32_t retry = 0;

	ck_assert(ratelimit_take(&b, &wide, 1, 1000, &retry)); /* 9 left */
	ck_assert(ratelimit_take(&b, &narrow, 1, 1000, &retry));
	ck_assert(ratelimit_take(&b, &narrow, 1, 1000, &retry));
	ck_assert(!ratelimit_take(&b, &narrow, 1, 1000, &retry));
	ck_assert_uint_eq(retry, 1);
	ck_assert_uint_le(b.milli_tokens, 2000);
}
END_TEST

START_TEST(unlimited)
{
	struct ratelimit b = { 0 };
	struct verdict_limits l = { 0 };
	uint32_t retry = 99;

	for (int i = 0; i < 100000; i++)
		ck_assert(ratelimit_take(&b, &l, 1, 0, &retry));
	ck_assert_uint_eq(retry, 99);
}
END_TEST

/* --- the per-rule table ---------------------------------------------------------------- */

static struct ratelimit_key key(uint32_t slot, uint32_t generation, uint32_t rule, uint64_t snap)
{
	return (struct ratelimit_key){ .snapshot_generation = snap,
				       .slot = slot,
				       .generation = generation,
				       .rule_index = rule };
}

/*
 * Checks for the hot loops: libcheck records every passing ck_assert (a write
 * to its pipe), so these call it only once the check has failed, when it
 * prints both values.
 */
#define HOT_EQ(a, b)                                 \
	do {                                         \
		if ((uint64_t)(a) != (uint64_t)(b))  \
			ck_assert_uint_eq((a), (b)); \
	} while (0)
#define HOT_PTR_EQ(a, b)                            \
	do {                                        \
		if ((a) != (b))                     \
			ck_assert_ptr_eq((a), (b)); \
	} while (0)
#define HOT_TRUE(x)                   \
	do {                          \
		if (!(x))             \
			ck_assert(x); \
	} while (0)

/* Every occupied slot is reachable from its home, and the slots count the entries. */
static void check_index(const struct ratelimit_table *t)
{
	uint32_t used = 0;

	for (uint32_t j = 0; j <= t->mask; j++) {
		const struct ratelimit_slot *s = &t->slots[j];
		if (s->entry == 0)
			continue;
		used++;
		HOT_TRUE(s->entry <= t->count);
		const struct ratelimit_entry *e = &t->entries[s->entry - 1];
		HOT_EQ(s->hash, key_hash(&e->key));
		for (uint32_t i = s->hash & t->mask; i != j; i = (i + 1) & t->mask)
			HOT_TRUE(t->slots[i].entry != 0);
		HOT_PTR_EQ(ratelimit_table_find(t, &e->key), e);
	}
	HOT_EQ(used, t->count);
}

START_TEST(table_capacity_bounds)
{
	struct ratelimit_table t;

	ck_assert_int_eq(ratelimit_table_init(&t, 0), -EINVAL);
	ck_assert_ptr_null(t.entries);
	ck_assert_int_eq(ratelimit_table_init(&t, 3), -EINVAL);
	ck_assert_int_eq(ratelimit_table_init(&t, 1), 0);
	ck_assert_uint_eq(t.capacity, 1);
	ck_assert_uint_eq(t.mask, 1);
	ratelimit_table_free(&t);
	ck_assert_ptr_null(t.entries);
	ratelimit_table_free(&t); /* zeroed: accepted */
	ck_assert_int_eq(ratelimit_table_init(&t, RATELIMIT_TABLE_CAPACITY_MAX), 0);
	ck_assert_uint_eq(t.capacity, RATELIMIT_TABLE_CAPACITY_MAX);
	ratelimit_table_free(&t);
	ck_assert_int_eq(ratelimit_table_init(&t, RATELIMIT_TABLE_CAPACITY_MAX + 1), -EINVAL);
	ck_assert_int_eq(ratelimit_table_init(&t, RATELIMIT_TABLE_CAPACITY_MAX * 2), -EINVAL);
	ck_assert_int_eq(ratelimit_table_init(&t, LIMITS_RULE_BUCKETS_PER_WORKER), 0);
	ratelimit_table_free(&t);
}
END_TEST

START_TEST(table_insert_find)
{
	struct ratelimit_table t;
	const struct verdict_limits l = { .requests_per_second = 2, .burst = 4, .concurrent = 3 };
	const struct ratelimit_key k = key(7, 1, 12, 1);
	const struct ratelimit_key other = key(8, 1, 12, 1);

	ck_assert_int_eq(ratelimit_table_init(&t, 8), 0);
	ck_assert_ptr_null(ratelimit_table_find(&t, &k));
	struct ratelimit_entry *e = ratelimit_table_get(&t, &k, &l, 1000);
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(t.count, 1);
	ck_assert(key_eq(&e->key, &k));
	ck_assert(limits_eq(&e->limits, &l));
	ck_assert_uint_eq(e->conns, 0);
	ck_assert(!e->bucket.primed);
	e->conns = 2;
	ck_assert_ptr_eq(ratelimit_table_get(&t, &k, &l, 5000), e);
	ck_assert_ptr_eq(ratelimit_table_find(&t, &k), e);
	ck_assert_uint_eq(e->conns, 2);
	ck_assert_uint_eq(t.count, 1);
	ck_assert_ptr_null(ratelimit_table_find(&t, &other));
	check_index(&t);
	ratelimit_table_free(&t);
}
END_TEST

/* Drains <e>'s burst at <now_ms>: true when it held exactly <burst> tokens. */
static bool drain(struct ratelimit_entry *e, uint32_t burst, uint64_t now_ms)
{
	uint32_t retry = 0;

	for (uint32_t i = 0; i < burst; i++) {
		if (!ratelimit_take(&e->bucket, &e->limits, e->key.generation, now_ms, &retry))
			return false;
	}
	return !ratelimit_take(&e->bucket, &e->limits, e->key.generation, now_ms, &retry);
}

START_TEST(table_keys_isolated)
{
	struct ratelimit_table t;
	const struct verdict_limits l = { .requests_per_second = 1, .burst = 2 };
	const struct ratelimit_key keys[] = {
		key(1, 5, 3, 9),  /* the first sandbox on rule 3 */
		key(2, 5, 3, 9),  /* another sandbox on the same rule */
		key(1, 5, 4, 9),  /* the same sandbox on another rule */
		key(1, 6, 3, 9),  /* the slot reused by a new sandbox */
		key(1, 5, 3, 10), /* the same sandbox and rule after a reload */
	};
	struct ratelimit_entry *e[AN_ARRAY_LEN(keys)];
	uint32_t retry = 0;

	ck_assert_int_eq(ratelimit_table_init(&t, 8), 0);
	for (size_t i = 0; i < AN_ARRAY_LEN(keys); i++) {
		e[i] = ratelimit_table_get(&t, &keys[i], &l, 100);
		ck_assert_ptr_nonnull(e[i]);
		for (size_t j = 0; j < i; j++)
			ck_assert_ptr_ne(e[i], e[j]);
	}
	ck_assert_uint_eq(t.count, AN_ARRAY_LEN(keys));
	/* The first exhausts its bucket and opens a connection; nobody else is touched. */
	ck_assert(drain(e[0], 2, 100));
	e[0]->conns = 1;
	for (size_t i = 1; i < AN_ARRAY_LEN(keys); i++) {
		ck_assert_ptr_eq(ratelimit_table_get(&t, &keys[i], &l, 100), e[i]);
		ck_assert_uint_eq(e[i]->conns, 0);
		ck_assert(
		    ratelimit_take(&e[i]->bucket, &e[i]->limits, keys[i].generation, 100, &retry));
	}
	ck_assert(!ratelimit_take(&e[0]->bucket, &e[0]->limits, keys[0].generation, 100, &retry));
	ck_assert_uint_eq(retry, 1);
	check_index(&t);
	ratelimit_table_free(&t);
}
END_TEST

/*
 * A full table of 4: busy entries (a connection open, a bucket not yet
 * refilled) are never taken over; NULL then. The refill boundary at N and
 * N+1: a bucket of burst 2 at 1 token a second, one token short at 1000 ms,
 * is full at 2000 ms and not at 1999.
 */
START_TEST(table_evicts_only_idle)
{
	struct ratelimit_table t;
	const struct verdict_limits l = { .requests_per_second = 1, .burst = 2, .concurrent = 5 };
	struct ratelimit_entry *e[4];
	uint32_t retry = 0;

	ck_assert_int_eq(ratelimit_table_init(&t, 4), 0);
	for (uint32_t i = 0; i < 4; i++) {
		const struct ratelimit_key k = key(i, 1, 0, 1);

		e[i] = ratelimit_table_get(&t, &k, &l, 1000);
		ck_assert_ptr_nonnull(e[i]);
		e[i]->conns = 1;
	}
	/* e[0] is one token short of full from 1000 ms on; the rest hold a connection. */
	ck_assert(ratelimit_take(&e[0]->bucket, &e[0]->limits, 1, 1000, &retry));
	e[0]->conns = 0;
	const struct ratelimit_key fresh = key(99, 1, 1, 1);
	ck_assert_ptr_null(ratelimit_table_get(&t, &fresh, &l, 1999));
	ck_assert_uint_eq(t.full, 1);
	ck_assert_uint_eq(t.evictions, 0);
	for (uint32_t i = 0; i < 4; i++)
		ck_assert_ptr_eq(ratelimit_table_find(&t, &e[i]->key), e[i]);
	struct ratelimit_key gone = e[0]->key;
	struct ratelimit_entry *got = ratelimit_table_get(&t, &fresh, &l, 2000);
	ck_assert_ptr_eq(got, e[0]); /* the same storage, now the new key's */
	ck_assert(key_eq(&got->key, &fresh));
	ck_assert(!got->bucket.primed);
	ck_assert_uint_eq(got->conns, 0);
	ck_assert_uint_eq(t.evictions, 1);
	ck_assert_ptr_null(ratelimit_table_find(&t, &gone));
	for (uint32_t i = 1; i < 4; i++)
		ck_assert_ptr_eq(ratelimit_table_find(&t, &e[i]->key), e[i]);
	check_index(&t);
	/* Nothing idle again: the new entry holds a connection, the others still do. */
	got->conns = 1;
	ck_assert_ptr_null(ratelimit_table_get(&t, &gone, &l, 1000000));
	ck_assert_uint_eq(t.full, 2);
	/* A bucket never used is full: idle as soon as the last connection closes. */
	e[1]->conns = 0;
	ck_assert_ptr_eq(ratelimit_table_get(&t, &gone, &l, 1000000), e[1]);
	ck_assert_uint_eq(t.evictions, 2);
	check_index(&t);
	ratelimit_table_free(&t);
}
END_TEST

/* --- randomized, against a reference ----------------------------------------------------- */

#define REF_KEYS 48u

struct ref_key {
	struct ratelimit_key key;
	struct verdict_limits limits;
	struct ratelimit bucket;
	uint32_t conns;
	bool present;
	struct ratelimit_entry *busy_at; /* where it was while it held a connection */
};

/* The reference's own idea of idle: written apart from entry_idle, in plain arithmetic. */
static bool ref_idle(const struct ref_key *r, uint64_t now_ms)
{
	if (r->conns != 0)
		return false;
	if (r->limits.requests_per_second == 0 || !r->bucket.primed)
		return true;
	uint64_t burst = r->limits.burst != 0 ? r->limits.burst : r->limits.requests_per_second;
	uint64_t elapsed = now_ms - r->bucket.last_ms;
	return r->bucket.milli_tokens + elapsed * r->limits.requests_per_second >= burst * 1000;
}

static void ref_init(struct ref_key *ref, uint64_t *seed)
{
	for (uint32_t i = 0; i < REF_KEYS; i++) {
		struct ref_key *r = &ref[i];
		uint32_t rate = (uint32_t)(unit_rng_next(seed) % 4);

		memset(r, 0, sizeof(*r));
		/* Few distinct slots and rules, so keys share every field but one. */
		r->key = key(i % 5, 1 + i % 2, i % 7, 1 + i % 3);
		r->limits = (struct verdict_limits){ .requests_per_second = rate,
						     .burst = rate != 0 && i % 2 ? rate * 3 : 0,
						     .concurrent = rate == 0 ? 2 : i % 3 };
	}
}

/* One ratelimit_table_get of ref[i] at <now_ms>, checked against the reference. */
static void ref_get(struct ratelimit_table *t, struct ref_key *ref, uint32_t i, uint64_t now_ms,
		    uint32_t *present)
{
	struct ref_key *r = &ref[i];
	bool any_idle = false;

	for (uint32_t j = 0; j < REF_KEYS; j++)
		any_idle |= ref[j].present && ref_idle(&ref[j], now_ms);
	struct ratelimit_entry *e = ratelimit_table_get(t, &r->key, &r->limits, now_ms);
	if (r->present) {
		HOT_TRUE(e != NULL);
	} else if (*present < t->capacity) {
		HOT_TRUE(e != NULL);
		r->present = true;
		(*present)++;
	} else if (!any_idle) {
		HOT_TRUE(e == NULL);
		return;
	} else {
		HOT_TRUE(e != NULL);
		/* Exactly one present key is gone, and the reference found it idle. */
		uint32_t gone = REF_KEYS;
		for (uint32_t j = 0; j < REF_KEYS; j++) {
			if (j == i || !ref[j].present || ratelimit_table_find(t, &ref[j].key))
				continue;
			HOT_EQ(gone, REF_KEYS);
			gone = j;
		}
		HOT_TRUE(gone < REF_KEYS);
		HOT_TRUE(ref_idle(&ref[gone], now_ms));
		ref[gone].present = false;
		memset(&ref[gone].bucket, 0, sizeof(ref[gone].bucket));
		r->present = true;
	}
	HOT_TRUE(key_eq(&e->key, &r->key));
	HOT_EQ(e->conns, r->conns);
	HOT_EQ(e->bucket.milli_tokens, r->bucket.milli_tokens);
	HOT_EQ(e->bucket.last_ms, r->bucket.last_ms);
	HOT_EQ(e->bucket.primed, r->bucket.primed);
	if (r->busy_at != NULL)
		HOT_PTR_EQ(e, r->busy_at);
}

/* What the engine does with an entry: a request, a connection opening or closing. */
static void ref_use(struct ratelimit_table *t, struct ref_key *r, uint64_t op, uint64_t now_ms)
{
	struct ratelimit_entry *e = ratelimit_table_find(t, &r->key);
	uint32_t retry_e = 0, retry_r = 0;

	HOT_TRUE(e != NULL);
	if (op == 0) {
		bool got =
		    ratelimit_take(&e->bucket, &e->limits, e->key.generation, now_ms, &retry_e);
		bool want =
		    ratelimit_take(&r->bucket, &r->limits, r->key.generation, now_ms, &retry_r);
		HOT_EQ(got, want);
		HOT_EQ(retry_e, retry_r);
	} else if (op == 1 && r->conns < 3) {
		e->conns++;
		r->conns++;
		r->busy_at = e;
	} else if (r->conns > 0) {
		e->conns--;
		r->conns--;
		if (r->conns == 0)
			r->busy_at = NULL;
	}
}

/* <ops> random operations on a table of <capacity>; adds its evictions and NULLs to <sums>. */
static void table_random_run(uint32_t capacity, uint64_t seed, uint32_t ops, uint64_t sums[2])
{
	struct ratelimit_table t;
	struct ref_key ref[REF_KEYS];
	uint32_t present = 0;
	uint64_t now_ms = 1;

	HOT_EQ(ratelimit_table_init(&t, capacity), 0);
	ref_init(ref, &seed);
	for (uint32_t n = 0; n < ops; n++) {
		uint64_t roll = unit_rng_next(&seed);
		uint32_t i = (uint32_t)(roll % REF_KEYS);

		now_ms += (roll >> 8) % 4 == 0 ? (roll >> 16) % 1500 : 0;
		ref_get(&t, ref, i, now_ms, &present);
		if (ref[i].present)
			ref_use(&t, &ref[i], (roll >> 24) % 3, now_ms);
		for (uint32_t j = 0; j < REF_KEYS; j++)
			HOT_EQ(ratelimit_table_find(&t, &ref[j].key) != NULL, ref[j].present);
		HOT_EQ(t.count, present);
		check_index(&t);
	}
	sums[0] += t.evictions;
	sums[1] += t.full;
	ratelimit_table_free(&t);
}

START_TEST(shared_burst_then_refused)
{
	struct ratelimit_shared s = { 0 };
	struct verdict_limits l = { .requests_per_second = 2, .burst = 3 };
	uint32_t retry = 0;
	uint64_t t0 = 5000000u;

	for (int i = 0; i < 3; i++)
		ck_assert(ratelimit_shared_take(&s, &l, t0, &retry));
	ck_assert(!ratelimit_shared_take(&s, &l, t0, &retry));
	ck_assert_uint_eq(retry, 1); /* half a second to the next: one whole second */
	/* One interval (0.5 s) later exactly one more goes, then none at once. */
	ck_assert(!ratelimit_shared_take(&s, &l, t0 + 499999u, &retry));
	ck_assert(ratelimit_shared_take(&s, &l, t0 + 500000u, &retry));
	ck_assert(!ratelimit_shared_take(&s, &l, t0 + 500000u, &retry));
	/* Waiting what it said always finds room. */
	ck_assert(ratelimit_shared_take(&s, &l, t0 + 500000u + 1000000u * retry, &retry));
}
END_TEST

START_TEST(shared_slow_rate_and_unlimited)
{
	struct ratelimit_shared s = { 0 };
	struct verdict_limits slow = { .requests_per_second = 1, .burst = 1 };
	struct verdict_limits none = { 0 };
	uint32_t retry = 0;

	ck_assert(ratelimit_shared_take(&s, &slow, 1000000u, &retry));
	ck_assert(!ratelimit_shared_take(&s, &slow, 1000001u, &retry));
	ck_assert_uint_eq(retry, 1);
	ck_assert(ratelimit_shared_take(&s, &slow, 2000000u, &retry));
	for (int i = 0; i < 1000; i++)
		ck_assert(ratelimit_shared_take(&s, &none, 0, &retry));
}
END_TEST

struct shared_racer {
	struct ratelimit_shared *s;
	const struct verdict_limits *l;
	uint32_t granted;
};

static void *shared_race(void *arg)
{
	struct shared_racer *r = arg;
	uint32_t retry = 0;

	for (int i = 0; i < 100000; i++)
		r->granted += ratelimit_shared_take(r->s, r->l, 7000000u, &retry) ? 1u : 0u;
	return NULL;
}

START_TEST(shared_two_threads_get_the_burst)
{
	struct ratelimit_shared s = { 0 };
	struct verdict_limits l = { .requests_per_second = 1000, .burst = 5000 };
	struct shared_racer a = { &s, &l, 0 }, b = { &s, &l, 0 };
	pthread_t ta, tb;

	ck_assert_int_eq(pthread_create(&ta, NULL, shared_race, &a), 0);
	ck_assert_int_eq(pthread_create(&tb, NULL, shared_race, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	ck_assert_uint_eq(a.granted + b.granted, 5000); /* at one instant: the burst, no more */
}
END_TEST

START_TEST(table_random_vs_reference)
{
	static const uint32_t capacities[] = { 1, 2, 8, 16, 32 };

	uint64_t all_full = 0;

	for (size_t c = 0; c < AN_ARRAY_LEN(capacities); c++) {
		uint64_t sums[2] = { 0, 0 };

		for (uint64_t seed = 1; seed <= 4; seed++)
			table_random_run(capacities[c], seed * 0x9e3779b97f4a7c15ull, 20000, sums);
		/* Every size must have taken entries over, or the run proves little. */
		ck_assert_uint_gt(sums[0], 100);
		all_full += sums[1];
	}
	/* And a full table with nothing idle must have been met, too. */
	ck_assert_uint_gt(all_full, 100);
}
END_TEST

/* --- the per-rule limits' answer ---------------------------------------------------------- */

/* One ratelimit_rule_refusal: its reason; the entry and Retry-After in *<e>, *<retry>. */
static enum reason rule_ask(struct ratelimit_table *t, uint32_t rule,
			    const struct verdict_limits *l, uint64_t now_ms,
			    struct ratelimit_entry **e, uint32_t *retry)
{
	const struct ratelimit_key k = key(1, 1, rule, 1);
	static struct ratelimit_entry stale;

	*e = &stale; /* every answer sets it: NULL on a refusal */
	*retry = 77;
	return ratelimit_rule_refusal(t, &k, l, now_ms, e, retry);
}

/*
 * A table of one entry, held by a connection: another rule's request is
 * refused 429 with Retry-After 1, never let through unlimited; once the
 * holder is gone and its bucket refilled (N-1 ms: not yet; N: yes), the
 * entry is the other rule's.
 */
START_TEST(rule_refusal_full_table)
{
	struct ratelimit_table t;
	const struct verdict_limits l = { .requests_per_second = 1, .burst = 1 };
	struct ratelimit_entry *e = NULL, *held = NULL;
	uint32_t retry = 0;

	ck_assert_int_eq(ratelimit_table_init(&t, 1), 0);
	ck_assert_int_eq(rule_ask(&t, 3, &l, 1000, &held, &retry), REASON_NONE);
	ck_assert_ptr_nonnull(held);
	ck_assert_uint_eq(held->conns, 1);
	ck_assert_uint_eq(retry, 0);
	ck_assert_int_eq(rule_ask(&t, 4, &l, 1000, &e, &retry), REASON_RATE_LIMITED);
	ck_assert_ptr_null(e);
	ck_assert_uint_eq(retry, 1);
	ck_assert_uint_eq(t.full, 1);
	ck_assert_uint_eq(held->conns, 1); /* the holder's entry is untouched */
	ck_assert_uint_eq(held->key.rule_index, 3);
	held->conns--; /* its connection closes; its bucket is empty until 2000 */
	ck_assert_int_eq(rule_ask(&t, 4, &l, 1999, &e, &retry), REASON_RATE_LIMITED);
	ck_assert_uint_eq(retry, 1);
	ck_assert_uint_eq(t.full, 2);
	ck_assert_int_eq(rule_ask(&t, 4, &l, 2000, &e, &retry), REASON_NONE);
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(e->key.rule_index, 4);
	ck_assert_uint_eq(e->conns, 1);
	ck_assert_uint_eq(t.evictions, 1);
	ratelimit_table_free(&t);
}
END_TEST

/*
 * The rule's connections at once: N pass, N+1 is refused (Retry-After 1)
 * without spending a token or counting a connection; one closing lets the
 * next in, on the token the refusal left.
 */
START_TEST(rule_refusal_concurrent)
{
	struct ratelimit_table t;
	const struct verdict_limits l = { .requests_per_second = 1, .burst = 3, .concurrent = 2 };
	struct ratelimit_entry *e = NULL, *first = NULL;
	uint32_t retry = 0;

	ck_assert_int_eq(ratelimit_table_init(&t, 4), 0);
	ck_assert_int_eq(rule_ask(&t, 0, &l, 500, &first, &retry), REASON_NONE);
	ck_assert_int_eq(rule_ask(&t, 0, &l, 500, &e, &retry), REASON_NONE);
	ck_assert_ptr_eq(e, first); /* one entry per (sandbox, rule, generations) */
	ck_assert_uint_eq(first->conns, 2);
	ck_assert_int_eq(rule_ask(&t, 0, &l, 500, &e, &retry), REASON_CONCURRENCY_LIMITED);
	ck_assert_ptr_null(e);
	ck_assert_uint_eq(retry, 1);
	ck_assert_uint_eq(first->conns, 2);
	first->conns--;
	ck_assert_int_eq(rule_ask(&t, 0, &l, 500, &e, &retry), REASON_NONE); /* the 3rd token */
	ck_assert_ptr_eq(e, first);
	ck_assert_uint_eq(first->conns, 2);
	ck_assert_uint_eq(retry, 0);
	ratelimit_table_free(&t);
}
END_TEST

/* The rule's rate: the burst passes, the next is refused with the bucket's Retry-After. */
START_TEST(rule_refusal_rate)
{
	struct ratelimit_table t;
	const struct verdict_limits l = { .requests_per_second = 2, .burst = 2 };
	struct ratelimit_entry *e = NULL, *first = NULL;
	uint32_t retry = 0;

	ck_assert_int_eq(ratelimit_table_init(&t, 4), 0);
	ck_assert_int_eq(rule_ask(&t, 9, &l, 100, &first, &retry), REASON_NONE);
	ck_assert_int_eq(rule_ask(&t, 9, &l, 100, &e, &retry), REASON_NONE);
	ck_assert_uint_eq(first->conns, 2); /* no concurrent limit: every one counted */
	ck_assert_int_eq(rule_ask(&t, 9, &l, 100, &e, &retry), REASON_RATE_LIMITED);
	ck_assert_ptr_null(e);
	ck_assert_uint_eq(retry, 1);
	ck_assert_uint_eq(first->conns, 2);
	/* Half a second makes one token: N-1 ms refused, N ms served. */
	ck_assert_int_eq(rule_ask(&t, 9, &l, 599, &e, &retry), REASON_RATE_LIMITED);
	ck_assert_int_eq(rule_ask(&t, 9, &l, 600, &e, &retry), REASON_NONE);
	ck_assert_uint_eq(first->conns, 3);
	ratelimit_table_free(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core/ratelimit");
	TCase *tc = tcase_create("ratelimit");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, burst_then_refused);
	tcase_add_test(tc, slow_rate_retry_after);
	tcase_add_test(tc, reused_slot_starts_full);
	tcase_add_test(tc, lowered_burst_is_clamped);
	tcase_add_test(tc, unlimited);
	tcase_add_test(tc, table_capacity_bounds);
	tcase_add_test(tc, table_insert_find);
	tcase_add_test(tc, table_keys_isolated);
	tcase_add_test(tc, table_evicts_only_idle);
	tcase_add_test(tc, table_random_vs_reference);
	tcase_add_test(tc, rule_refusal_full_table);
	tcase_add_test(tc, rule_refusal_concurrent);
	tcase_add_test(tc, rule_refusal_rate);
	tcase_add_test(tc, shared_burst_then_refused);
	tcase_add_test(tc, shared_slow_rate_and_unlimited);
	tcase_add_test(tc, shared_two_threads_get_the_burst);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
