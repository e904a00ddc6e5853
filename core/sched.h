/*
 * Turn-taking between sandboxes on one worker (issue 15): how many of a
 * sandbox's completions a loop turn handles, and the per-sandbox queues where
 * the rest wait for the next turns. One per worker, owned and used by its thread only: no
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

/* A waiting completion: the CQE's fields, and the next of its key's queue. */
struct sched_node {
	uint64_t ud;
	int32_t res;
	uint32_t flags;
	uint32_t next; /* SCHED_NIL: the last of its key's queue (or of the free list) */
};

/* The index that names no node and no key. */
#define SCHED_NIL UINT32_MAX

/*
 * A key's use of the current turn (valid while turn equals the scheduler's)
 * and its queue of waiting completions, oldest first (head and tail valid
 * while waiting > 0); next_ready links the keys that have some waiting.
 */
struct sched_key {
	uint32_t turn;
	uint32_t used;
	uint32_t waiting;
	uint32_t head;
	uint32_t tail;
	uint32_t next_ready;
};

/*
 * A key's quantum, the completions it may have handled in one turn: <shared>
 * while two or more keys have work, <alone> (at least <shared>) while one key
 * alone has had work for <shared_hold_ms>. A turn in which a second key is
 * served is shared from then on, and the shared quantum holds for
 * <shared_hold_ms> after the last such turn.
 */
struct sched_quanta {
	uint32_t shared;
	uint32_t alone;
	uint32_t shared_hold_ms;
};

struct sched {
	struct sched_node *nodes; /* owned, capacity entries: the waiting and the free */
	struct sched_key *keys;   /* owned, key_count entries (zeroed pages touched on use) */
	uint32_t capacity;
	uint32_t count;      /* completions waiting, every key's */
	uint32_t free_head;  /* free nodes once used, SCHED_NIL: none */
	uint32_t fresh;      /* nodes from here to capacity were never used */
	uint32_t ready_head; /* the keys with completions waiting, in turn order */
	uint32_t ready_tail;
	uint32_t ready_count;
	uint32_t round_left; /* keys of the ready list this turn has still to visit */
	uint32_t key_count;
	struct sched_quanta quanta;
	uint32_t quantum;     /* this turn's: quanta.shared or quanta.alone */
	uint32_t keys_served; /* keys that have had a completion handled in this turn */
	uint32_t turn;
	uint64_t shared_until_ms; /* the shared quantum holds for turns that start before it */
	uint64_t deferred;        /* turns completions waited, summed (a counter for the logs) */
	uint64_t shared_turns;    /* turns that ran with the shared quantum (a counter) */
};

/*
 * Sets up <s> for keys 0..<key_count>-1, <capacity> waiting completions at
 * most, and the <quanta> (shared at least 1, alone at least shared). Returns 0
 * or -ENOMEM; <s> owns what it allocates until sched_destroy.
 */
int sched_init(struct sched *s, uint32_t key_count, uint32_t capacity, struct sched_quanta quanta);

/* Releases what <s> owns. Asserts that no completion is still waiting. */
void sched_destroy(struct sched *s);

/*
 * Starts a loop turn at <now_ms> (a monotonic clock, never going back): every
 * key's quantum is whole again, shared or alone as the last turns had one key
 * or more (struct sched_quanta), and the round over the keys with completions
 * waiting starts at the one after where the last turn stopped.
 */
void sched_turn(struct sched *s, uint64_t now_ms);

/*
 * Takes into *<out> the next waiting completion this turn may run, counting
 * it against its key: the keys with some waiting in turn, each up to its
 * quantum, oldest first within a key. False once no waiting completion may
 * run in this turn (each key with some left has used its quantum, or none
 * waits). Costs O(1) a call and a key: never the whole backlog.
 */
bool sched_next_waiting(struct sched *s, struct sched_cqe *out);

/*
 * Whether a completion of <key> just reaped may be handled in this turn;
 * counts it against the key's quantum if so. SCHED_KEY_NONE is always
 * admitted. A key that has completions waiting is refused (the new one goes
 * behind them, sched_defer), and so is one whose quantum is used, until the
 * next sched_turn. The worker admits what it reaps before it takes the
 * waiting (sched_next_waiting), which keeps each key's completions in order
 * (see core/sched.c).
 */
bool sched_admit(struct sched *s, uint32_t key);

/* Whether <n> more completions can wait. */
bool sched_room(const struct sched *s, uint32_t n);

/* Queues *<q> (copied) behind its key's waiting ones; needs room (sched_room). Never
 * SCHED_KEY_NONE. */
void sched_defer(struct sched *s, const struct sched_cqe *q);

#endif /* AN_CORE_SCHED_H */
