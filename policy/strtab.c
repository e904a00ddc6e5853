/*
 * Open-addressing string index keyed by XXH3-64.
 *
 * Slots are a power of two, probed linearly from hash & mask; the load factor
 * is kept at or below 1/2, so a miss ends at an empty slot after a few probes
 * on average. Each slot keeps the full 64-bit hash, so a probe compares two
 * integers and reads the key only on a hash match, and growing rehashes
 * without touching the keys. Keys are borrowed: the owners (rules, profiles,
 * sandboxes) keep their strings in separate allocations that never move.
 *
 * There is no delete: every table is filled once at load time and then only
 * read, which is what makes lock-free concurrent lookups trivially safe.
 * Rejected: chaining (a pointer chase per entry and an allocation per insert)
 * and a sorted array with binary search (log2(100k) = 17 string compares).
 */
#include "policy/strtab.h"

#include <errno.h>
#include <string.h>

#include <xxhash.h>

#include "core/an.h"
#include "core/pool.h"

uint64_t strtab_hash(const char *key, size_t len)
{
	return XXH3_64bits(key, len);
}

/* The smallest power of two holding <expected> entries at load factor 1/2. */
static uint32_t slots_for(uint32_t expected)
{
	uint32_t slots = 8;

	AN_ASSERT(expected <= STRTAB_ENTRIES_MAX);
	while (slots / 2 < expected)
		slots *= 2;
	AN_ASSERT(slots <= (1u << STRTAB_SLOTS_LOG2_MAX));
	return slots;
}

/* Places an entry known to be absent; the caller guarantees a free slot. */
static void place(struct strtab_slot *slots, uint32_t mask, const struct strtab_slot *e)
{
	uint32_t i = (uint32_t)e->hash & mask;

	AN_DASSERT(e->key != NULL);
	while (slots[i].key != NULL)
		i = (i + 1) & mask;
	slots[i] = *e;
}

static int resize(struct strtab *t, uint32_t slot_count)
{
	struct strtab_slot *slots = pool_calloc(slot_count, sizeof(*slots));

	AN_ASSERT((slot_count & (slot_count - 1)) == 0);
	AN_ASSERT(t->count < slot_count / 2 || t->count == 0);
	if (slots == NULL)
		return -ENOMEM;
	if (t->slots != NULL) {
		for (uint32_t i = 0; i <= t->mask; i++) {
			if (t->slots[i].key != NULL)
				place(slots, slot_count - 1, &t->slots[i]);
		}
	}
	pool_free(t->slots);
	t->slots = slots;
	t->mask = slot_count - 1;
	return 0;
}

int strtab_init(struct strtab *t, uint32_t expected)
{
	memset(t, 0, sizeof(*t));
	if (expected > STRTAB_ENTRIES_MAX)
		return -E2BIG;
	/* Empty stays unallocated: a profile with no IP rules costs no IP table. */
	if (expected == 0)
		return 0;
	return resize(t, slots_for(expected));
}

int strtab_find_hashed(const struct strtab *t, uint64_t hash, const char *key, size_t len,
		       uint32_t *value)
{
	AN_DASSERT(hash == strtab_hash(key, len));
	if (t->slots == NULL)
		return -ENOENT;
	AN_DASSERT(t->count <= t->mask / 2 + 1);
	for (uint32_t i = (uint32_t)hash & t->mask;; i = (i + 1) & t->mask) {
		const struct strtab_slot *s = &t->slots[i];

		if (s->key == NULL)
			return -ENOENT;
		if (s->hash == hash && s->key_len == len && memcmp(s->key, key, len) == 0) {
			*value = s->value;
			return 0;
		}
	}
}

int strtab_find(const struct strtab *t, const char *key, size_t len, uint32_t *value)
{
	return strtab_find_hashed(t, strtab_hash(key, len), key, len, value);
}

int strtab_insert(struct strtab *t, const char *key, size_t len, uint32_t value, uint32_t *existing)
{
	struct strtab_slot e = { strtab_hash(key, len), key, (uint32_t)len, value };

	AN_ASSERT(key != NULL);
	AN_ASSERT(len <= UINT32_MAX);
	if (strtab_find_hashed(t, e.hash, key, len, existing) == 0)
		return -EEXIST;
	if (t->count >= STRTAB_ENTRIES_MAX)
		return -E2BIG;
	if (t->slots == NULL || t->count + 1 > (t->mask + 1) / 2) {
		/* Doubling stays within 2^30 slots: count < 2^29 keeps mask + 1 <= 2^29. */
		int rc = resize(t, t->slots == NULL ? slots_for(1) : (t->mask + 1) * 2);

		if (rc != 0)
			return rc;
	}
	place(t->slots, t->mask, &e);
	t->count++;
	AN_ASSERT(t->count <= (t->mask + 1) / 2);
	return 0;
}

void strtab_free(struct strtab *t)
{
	AN_FREE(&t->slots);
	memset(t, 0, sizeof(*t));
}
