/*
 * Turn-taking between sandboxes on one worker: a deficit round robin, one
 * round a turn.
 *
 * A worker used to handle every completion it reaped in arrival order before
 * submitting anything, so a turn lasted as long as the busiest sandbox made
 * it: one sandbox with a thousand busy connections made every other
 * sandbox's answer wait behind a thousand of its handlers. Now each loop turn
 * gives every key (a sandbox's share key, core/share.h; the public listener's
 * conns are one key) a quantum of completions. A completion over its key's
 * quantum waits in its key's queue; a key with some waiting is on the ready
 * list. Each turn first runs what it reaped, each completion as its key's
 * quantum allows (sched_admit; a key with some waiting admits none: the new
 * one goes behind them), then visits the keys that were ready when it began,
 * once each, in order, and runs up to a quantum of each one's oldest
 * (sched_next_waiting); a key with some left goes to the list's end. So one
 * turn handles at most a quantum of any key's completions; a quiet sandbox's
 * completion is handled in the first turn that sees it, before the busy
 * sandboxes' waiting ones, and its answer is submitted at the end of that
 * turn, ahead of theirs (the ring takes requests in the order the handlers
 * made them). The worker does not wait in the kernel while anything waits
 * here (core/worker.c, wait_ms), so a deferred completion costs a turn, not a
 * sleep.
 *
 * The quantum: a turn lasts about a quantum of each busy key's handlers, and
 * a quiet key's answer waits for the turn under way, so the quantum is what
 * the busy cost the quiet. One is the fairest, but each turn costs an enter,
 * and a lone key's one-completion turns would cost it a quarter of its rate
 * for nobody's benefit. So a turn is shared (quanta.shared) once a second key
 * is served in it, and for quanta.shared_hold_ms after the last such turn;
 * otherwise a lone busy key has quanta.alone a turn, and a key whose work
 * comes after a silence waits for one such turn at most (its completion still
 * runs ahead of the busy key's waiting ones).
 *
 * Order: a key with completions waiting admits no new one (it queues behind
 * them), and its queue is served oldest first, only after the turn has
 * reaped all it reaps; a key without is admitted until its quantum is used,
 * then refused until the next turn, the refused queued in order. So a key's
 * completions, and with them a conn's (a conn has one key for life), are
 * handled in the order the kernel posted them; only the order between keys
 * changes, which the kernel never promised.
 *
 * Never starved: every turn visits every key that had some waiting when it
 * began, and admits at least a quantum (at least one) of its oldest, so a key
 * with n waiting is served within ceil(n / quantum) turns, and turns follow
 * each other without a wait while any wait. Nothing is lost: the worker reaps
 * only while there is room for a whole batch; what it leaves stays in the
 * kernel's CQ. What a waiting completion references (its conn, its listener)
 * lives on: a conn is freed only once no completion of its is outstanding, a
 * listener once its accept is disarmed by its last completion.
 *
 * Cost: a turn's work here is O(keys visited + completions run), never the
 * backlog's size. Memory: capacity nodes of 24 bytes (a free list, plus a
 * mark past which nodes were never used) and 24 bytes per key, zeroed pages
 * touched only by keys in use. Rejected: one FIFO for every key, served
 * oldest first with the refused put back at its tail (the first version):
 * each turn moved the whole backlog, 7.5% of the worker's time under a flood
 * of 1,000 connections, and with a quantum of 2 the flood's rate fell from
 * 52,000 to 15,000 requests/s; leaving the excess in the kernel's CQ (one
 * FIFO for every key: a quiet sandbox's completion would wait behind the
 * flood's); a byte budget (the handlers' cost is per completion; bytes move
 * in the kernel).
 */
#include "core/sched.h"

#include <errno.h>

#include "core/an.h"
#include "core/pool.h"

int sched_init(struct sched *s, uint32_t key_count, uint32_t capacity, struct sched_quanta quanta)
{
	AN_ASSERT(capacity > 0 && capacity < SCHED_NIL);
	AN_ASSERT(quanta.shared >= 1 && quanta.alone >= quanta.shared);
	AN_ASSERT(key_count > 0 && key_count < SCHED_KEY_NONE && key_count < SCHED_NIL);
	*s = (struct sched){ .capacity = capacity,
			     .key_count = key_count,
			     .quanta = quanta,
			     .quantum = quanta.alone,
			     .turn = 1,
			     .free_head = SCHED_NIL,
			     .ready_head = SCHED_NIL,
			     .ready_tail = SCHED_NIL };
	s->nodes = pool_calloc(capacity, sizeof(*s->nodes));
	s->keys = pool_calloc(key_count, sizeof(*s->keys));
	if (s->nodes == NULL || s->keys == NULL) {
		AN_FREE(&s->nodes);
		AN_FREE(&s->keys);
		return -ENOMEM;
	}
	return 0;
}

void sched_destroy(struct sched *s)
{
	AN_ASSERT(s->count == 0 && s->ready_count == 0);
	AN_FREE(&s->nodes);
	AN_FREE(&s->keys);
}

void sched_turn(struct sched *s, uint64_t now_ms)
{
	if (s->keys_served >= 2)
		s->shared_until_ms = now_ms + s->quanta.shared_hold_ms;
	s->keys_served = 0;
	s->quantum = now_ms < s->shared_until_ms ? s->quanta.shared : s->quanta.alone;
	if (s->quantum == s->quanta.shared)
		s->shared_turns++;
	s->deferred += s->count; /* each still waiting has waited one more turn */
	s->turn++;
	if (s->turn == 0) {
		/* Wrapped: a stamp left from 2^32 turns ago must not pass for this turn's. */
		for (uint32_t k = 0; k < s->key_count; k++)
			s->keys[k].turn = 0;
		s->turn = 1;
	}
	AN_ASSERT(s->turn != 0);
	s->round_left = s->ready_count;
}

/*
 * Counts one completion of <k> against this turn's quantum; false once it is
 * used. The second key served in a turn makes the rest of the turn shared: a
 * key that has had more than the shared quantum already has its turn's share.
 */
static bool quantum_take(struct sched *s, struct sched_key *k)
{
	if (k->turn != s->turn) {
		k->turn = s->turn;
		k->used = 0;
		if (++s->keys_served == 2 && s->quantum != s->quanta.shared) {
			s->quantum = s->quanta.shared;
			s->shared_turns++;
		}
	}
	if (k->used >= s->quantum)
		return false;
	k->used++;
	return true;
}

bool sched_admit(struct sched *s, uint32_t key)
{
	if (key == SCHED_KEY_NONE)
		return true;
	AN_ASSERT(key < s->key_count);
	struct sched_key *k = &s->keys[key];
	if (k->waiting > 0)
		return false; /* behind its own waiting ones */
	return quantum_take(s, k);
}

bool sched_room(const struct sched *s, uint32_t n)
{
	AN_ASSERT(s->count <= s->capacity);
	return n <= s->capacity - s->count;
}

static void ready_push(struct sched *s, uint32_t key)
{
	s->keys[key].next_ready = SCHED_NIL;
	if (s->ready_tail == SCHED_NIL)
		s->ready_head = key;
	else
		s->keys[s->ready_tail].next_ready = key;
	s->ready_tail = key;
	s->ready_count++;
}

static uint32_t ready_pop(struct sched *s)
{
	uint32_t key = s->ready_head;
	AN_ASSERT(key != SCHED_NIL && s->ready_count > 0);
	s->ready_head = s->keys[key].next_ready;
	if (s->ready_head == SCHED_NIL)
		s->ready_tail = SCHED_NIL;
	s->ready_count--;
	return key;
}

void sched_defer(struct sched *s, const struct sched_cqe *q)
{
	AN_ASSERT(q->key != SCHED_KEY_NONE && q->key < s->key_count);
	AN_ASSERT(s->count < s->capacity);
	uint32_t i;
	if (s->free_head != SCHED_NIL) {
		i = s->free_head;
		s->free_head = s->nodes[i].next;
	} else {
		AN_ASSERT(s->fresh < s->capacity);
		i = s->fresh++;
	}
	s->nodes[i] =
	    (struct sched_node){ .ud = q->ud, .res = q->res, .flags = q->flags, .next = SCHED_NIL };
	struct sched_key *k = &s->keys[q->key];
	if (k->waiting == 0) {
		k->head = i;
		ready_push(s, q->key);
	} else {
		s->nodes[k->tail].next = i;
	}
	k->tail = i;
	k->waiting++;
	s->count++;
}

bool sched_next_waiting(struct sched *s, struct sched_cqe *out)
{
	while (s->round_left > 0) {
		uint32_t key = s->ready_head;
		struct sched_key *k = &s->keys[key];
		AN_ASSERT(k->waiting > 0);
		if (quantum_take(s, k)) {
			uint32_t i = k->head;
			*out = (struct sched_cqe){ .ud = s->nodes[i].ud,
						   .res = s->nodes[i].res,
						   .flags = s->nodes[i].flags,
						   .key = key };
			k->head = s->nodes[i].next;
			s->nodes[i].next = s->free_head;
			s->free_head = i;
			s->count--;
			if (--k->waiting == 0) {
				(void)ready_pop(s);
				s->round_left--;
			}
			return true;
		}
		/* Its quantum is used: it has the rest at the next turn, after the others. */
		ready_push(s, ready_pop(s));
		s->round_left--;
	}
	return false;
}
