/*
 * Each sandbox's share of a worker's connections.
 *
 * A conn is counted against its key (its sandbox's slot, or SHARE_KEY_PUBLIC
 * for the gateway's) from the moment it is accepted, before it has sent a
 * byte, until it is freed: a connection that never sends a head holds a pool
 * object and a descriptor like any other, so it counts like any other.
 *
 * The rule: key k holding h conns may take one more while the worker has room
 * and h + 1 <= p% of (free + h), free being the conns the worker can still
 * hold. A lone sandbox may so take p% of the worker (75% by default); once it
 * stops at its share, 100 - p% stays free for the others, and a key holding
 * few conns is admitted on less free room than one holding many, so as the
 * worker fills the largest holders are refused first. Several sandboxes
 * flooding at once each stop at p% of what the others left (the n-th at
 * (1 - p%)^n free); p = 100 is no share at all (only the capacity).
 *
 * The capacity is the smaller of the conn pool and half the direct-descriptor
 * table (less a reserve for parked upstreams): each conn may come to hold two
 * slots, its client's and its upstream's, so conns admitted within it never
 * fail another sandbox's accept or upstream socket for want of a slot.
 *
 * Memory: one uint32_t per sandbox slot, zeroed pages touched only by slots in
 * use (256 KiB reserved per worker). Rejected: the engine's atomic count per
 * sandbox (a locked instruction per accept and free, shared by every worker,
 * and it cannot say what this worker holds); a fixed quota per sandbox (a
 * lone sandbox could never use an idle worker, or 65,536 quotas never fit).
 */
#include "core/share.h"

#include <errno.h>

#include "core/an.h"
#include "core/pool.h"

uint32_t share_capacity_for(uint32_t conns, uint32_t file_slots)
{
	uint32_t by_slots = 0;

	if (file_slots > LIMITS_FILE_SLOTS_RESERVED)
		by_slots = (file_slots - LIMITS_FILE_SLOTS_RESERVED) / 2u;
	if (by_slots == 0)
		by_slots = 1;
	uint32_t capacity = conns < by_slots ? conns : by_slots;
	AN_ASSERT(capacity <= conns);
	if (conns > 0)
		AN_ASSERT(capacity >= 1);
	return capacity;
}

int share_init(struct share *s, uint32_t capacity, uint32_t percent)
{
	AN_ASSERT(percent >= 1 && percent <= 100);
	AN_ASSERT(capacity > 0);
	*s = (struct share){ .capacity = capacity, .percent = percent };
	s->held = pool_calloc(SHARE_KEYS, sizeof(*s->held));
	if (s->held == NULL)
		return -ENOMEM;
	return 0;
}

void share_destroy(struct share *s)
{
	AN_ASSERT(s->total == 0);
	AN_FREE(&s->held);
}

bool share_admits(const struct share *s, uint32_t key)
{
	AN_ASSERT(key < SHARE_KEYS);
	AN_ASSERT(s->total <= s->capacity);
	uint32_t held = s->held[key];
	AN_DASSERT(held <= s->total);
	if (s->total >= s->capacity)
		return false;
	uint64_t room = (uint64_t)(s->capacity - s->total) + held;
	return ((uint64_t)held + 1u) * 100u <= room * s->percent;
}

bool share_full(const struct share *s)
{
	AN_ASSERT(s->total <= s->capacity);
	return s->total == s->capacity;
}

void share_take(struct share *s, uint32_t key)
{
	AN_ASSERT(key < SHARE_KEYS);
	AN_ASSERT(s->total < s->capacity);
	s->held[key]++;
	s->total++;
	AN_ASSERT(s->held[key] <= s->total);
}

void share_put(struct share *s, uint32_t key)
{
	AN_ASSERT(key < SHARE_KEYS);
	AN_ASSERT(s->held[key] > 0);
	AN_ASSERT(s->total > 0);
	s->held[key]--;
	s->total--;
}
