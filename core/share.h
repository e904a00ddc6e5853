/*
 * Each sandbox's share of a worker's connections (issue 15): a count per
 * sandbox of the conns the worker holds for it, from accept to free, and the
 * rule that decides whether one more may be admitted. One per worker, owned
 * and used by its thread only: no lock, no atomic.
 */
#ifndef AN_CORE_SHARE_H
#define AN_CORE_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/limits.h"

/* The key of the public listener's conns (the gateway), after the sandbox slots. */
#define SHARE_KEY_PUBLIC LIMITS_SANDBOXES_MAX
#define SHARE_KEYS       (LIMITS_SANDBOXES_MAX + 1u)

struct share {
	uint32_t *held;    /* owned, SHARE_KEYS counts: conns held per key */
	uint32_t capacity; /* conns the worker holds at most, all keys together */
	uint32_t total;    /* conns held, all keys together */
	uint32_t percent;  /* a key's share of what is free plus what it holds */
};

/*
 * The conns a worker can hold at most: its conn pool's <conns>, or as many as
 * its direct-descriptor table of <file_slots> can give two slots each (the
 * client's and the upstream's) after LIMITS_FILE_SLOTS_RESERVED, whichever is
 * fewer. At least 1 whenever <conns> is.
 */
uint32_t share_capacity_for(uint32_t conns, uint32_t file_slots);

/*
 * Sets up <s> for <capacity> conns in all, a key's share being <percent>
 * (1..100; 100: no share, only the capacity) of the conns free plus those it
 * holds. The counts are zeroed pages, touched only by keys in use. Returns 0
 * or -ENOMEM. <s> owns what it allocates until share_destroy.
 */
int share_init(struct share *s, uint32_t capacity, uint32_t percent);

/* Releases what <s> owns. Asserts that every conn was put back. */
void share_destroy(struct share *s);

/*
 * Whether <key> (a sandbox slot, or SHARE_KEY_PUBLIC) may hold one more conn:
 * the worker has room, and the key would then hold at most <percent> of the
 * conns free plus those it holds. Pure; worker thread only.
 */
bool share_admits(const struct share *s, uint32_t key);

/* Whether the worker holds all the conns it can: a refusal then is no one's share. */
bool share_full(const struct share *s);

/* Counts one more conn for <key>, which share_admits just admitted. */
void share_take(struct share *s, uint32_t key);

/* Counts one conn of <key> fewer: a conn share_take counted is freed. */
void share_put(struct share *s, uint32_t key);

#endif /* AN_CORE_SHARE_H */
