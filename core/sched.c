/*
 * Turn-taking between sandboxes on one worker.
 *
 * A worker used to handle every completion it reaped in arrival order before
 * submitting anything, so a turn lasted as long as the busiest sandbox made
 * it: one sandbox with a thousand busy connections made every other
 * sandbox's answer wait behind a thousand of its handlers. Now each loop turn
 * gives every key (a sandbox's share key, core/share.h; the public listener's
 * conns are one key) a quantum of LIMITS_SANDBOX_CQES_PER_TURN completions.
 * A completion over its key's quantum is deferred: copied, in order, to a
 * FIFO the worker serves first at its next turn, with fresh quanta. So one
 * turn handles at most a quantum of any key's completions; a quiet sandbox's
 * completion is handled in the first turn that sees it, and its answer is
 * submitted at the end of that turn, behind at most a quantum of each busy
 * sandbox's work. The worker does not wait in the kernel while anything is
 * deferred (core/worker.c, wait_ms), so a deferred completion costs a turn,
 * not a sleep.
 *
 * Order: a key's admission is monotone within a turn (once refused, refused
 * until the next turn), the FIFO is served oldest first before any new
 * completion, and a refused one goes back to its tail in the order it was
 * taken. So a key's completions, and with them a conn's (a conn has one key
 * for life), are handled in the order the kernel posted them; only the order
 * between keys changes, which the kernel never promised.
 *
 * Never starved: every turn, every key is admitted at least a quantum (at
 * least one) of its oldest waiting completions, so a key with n waiting is
 * served within ceil(n / quantum) turns, and turns follow each other without
 * a wait while any wait. Nothing is lost: the worker reaps only while the
 * FIFO has room for a whole batch; what it leaves stays in the kernel's CQ.
 * What a deferred completion references (its conn, its listener) lives on:
 * a conn is freed only once no completion of its is outstanding, a listener
 * once its accept is disarmed by its last completion.
 *
 * Memory: the FIFO (capacity entries of 24 bytes) and a turn stamp and count
 * per key, zeroed pages touched only by keys in use. Rejected: a deficit
 * round robin over per-key queues (a queue head and a link per key and per
 * entry, for the same bound: with a fixed quantum and every key served each
 * turn, the per-turn cap is that round robin with one round a turn); leaving
 * the excess in the kernel's CQ (it is one FIFO for every key: a quiet
 * sandbox's completion would wait behind the flood's); a byte budget (the
 * handlers' cost is per completion; bytes move in the kernel).
 */
#include "core/sched.h"

#include <errno.h>

#include "core/an.h"
#include "core/pool.h"

int sched_init(struct sched *s, uint32_t key_count, uint32_t capacity, uint32_t quantum)
{
	AN_ASSERT(capacity > 0 && (capacity & (capacity - 1)) == 0);
	AN_ASSERT(quantum >= 1);
	AN_ASSERT(key_count > 0 && key_count < SCHED_KEY_NONE);
	*s = (struct sched){
		.capacity = capacity, .key_count = key_count, .quantum = quantum, .turn = 1
	};
	s->fifo = pool_calloc(capacity, sizeof(*s->fifo));
	s->keys = pool_calloc(key_count, sizeof(*s->keys));
	if (s->fifo == NULL || s->keys == NULL) {
		AN_FREE(&s->fifo);
		AN_FREE(&s->keys);
		return -ENOMEM;
	}
	return 0;
}

void sched_destroy(struct sched *s)
{
	AN_ASSERT(s->count == 0);
	AN_FREE(&s->fifo);
	AN_FREE(&s->keys);
}

void sched_turn(struct sched *s)
{
	s->turn++;
	if (s->turn == 0) {
		/* Wrapped: a stamp left from 2^32 turns ago must not pass for this turn's. */
		for (uint32_t k = 0; k < s->key_count; k++)
			s->keys[k].turn = 0;
		s->turn = 1;
	}
	AN_ASSERT(s->turn != 0);
}

bool sched_admit(struct sched *s, uint32_t key)
{
	if (key == SCHED_KEY_NONE)
		return true;
	AN_ASSERT(key < s->key_count);
	struct sched_key *k = &s->keys[key];
	if (k->turn != s->turn) {
		k->turn = s->turn;
		k->used = 0;
	}
	AN_DASSERT(k->used <= s->quantum);
	if (k->used == s->quantum)
		return false;
	k->used++;
	return true;
}

bool sched_room(const struct sched *s, uint32_t n)
{
	AN_ASSERT(s->count <= s->capacity);
	return n <= s->capacity - s->count;
}

void sched_defer(struct sched *s, const struct sched_cqe *q)
{
	AN_ASSERT(q->key != SCHED_KEY_NONE && q->key < s->key_count);
	AN_ASSERT(s->count < s->capacity);
	s->fifo[(s->head + s->count) & (s->capacity - 1)] = *q;
	s->count++;
	s->deferred++;
}

bool sched_pop(struct sched *s, struct sched_cqe *out)
{
	if (s->count == 0)
		return false;
	*out = s->fifo[s->head & (s->capacity - 1)];
	s->head++;
	s->count--;
	AN_ASSERT(out->key < s->key_count);
	return true;
}
