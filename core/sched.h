/*
 * Turn-taking between sandboxes on one worker (issue 15): how many of a
 * sandbox's completions a loop turn handles, and the FIFO where the rest wait
 * for the next turn. One per worker, owned and used by its thread only: no
 * lock, no atomic, nothing allocated after sched_init.
 */
#ifndef AN_CORE_SCHED_H
#define AN_CORE_SCHED_H

#include <stdbool.h>
#include <stdint.h>

/* The key of a completion that is never deferred (the worker's own: wake-up, DNS, pool). */
#define SCHED_KEY_NONE UINT32_MAX

/* A completion copied out of the CQ, with the key (share key, core/share.h) it counts on. */
struct sched_cqe {
	uint64_t ud;
	int32_t res;
	uint32_t flags;
	uint32_t key; /* SCHED_KEY_NONE: never deferred */
};

/* A key's use of the current turn: valid while turn equals the scheduler's. */
struct sched_key {
	uint32_t turn;
	uint32_t used;
};

struct sched {
	struct sched_cqe *fifo; /* owned, capacity entries: completions waiting, oldest first */
	struct sched_key *keys; /* owned, key_count entries (zeroed pages touched on use) */
	uint32_t capacity;      /* a power of two */
	uint32_t head;          /* the oldest entry's index (free-running; masked) */
	uint32_t count;         /* entries waiting */
	uint32_t key_count;
	uint32_t quantum; /* completions a key may have handled in one turn */
	uint32_t turn;
	uint64_t deferred; /* turns completions waited, summed (a counter for the logs) */
};

/*
 * Sets up <s> for keys 0..<key_count>-1, <capacity> (a power of two) waiting
 * completions at most, and <quantum> (at least 1) completions of a key per
 * turn. Returns 0 or -ENOMEM; <s> owns what it allocates until sched_destroy.
 */
int sched_init(struct sched *s, uint32_t key_count, uint32_t capacity, uint32_t quantum);

/* Releases what <s> owns. Asserts that no completion is still waiting. */
void sched_destroy(struct sched *s);

/* Starts a loop turn: every key's quantum is whole again. */
void sched_turn(struct sched *s);

/*
 * Whether a completion of <key> may be handled in this turn; counts it if so.
 * SCHED_KEY_NONE is always admitted. Once it has said no to a key, it says no
 * to that key until the next sched_turn (what keeps a key's completions in
 * order: see core/sched.c).
 */
bool sched_admit(struct sched *s, uint32_t key);

/* Whether <n> more completions fit in the FIFO. */
bool sched_room(const struct sched *s, uint32_t n);

/* Appends *<q> (copied) to the FIFO, which must have room (sched_room). Never SCHED_KEY_NONE. */
void sched_defer(struct sched *s, const struct sched_cqe *q);

/* Takes the oldest waiting completion into *<out>; false when none waits. */
bool sched_pop(struct sched *s, struct sched_cqe *out);

#endif /* AN_CORE_SCHED_H */
