/*
 * Unit tests for core/sched.c: each sandbox's completions per loop turn. The
 * issue-15 flood in miniature, driven as core/worker.c drives it (what the
 * turn reaped first, then the waiting): one key with a thousand completions
 * ready and a hundred keys with one each; every quiet key is handled in the
 * first turn that sees it, before the flood's waiting ones, the flood a
 * quantum a turn, every key's completions in the order they came, none lost
 * and none left behind. Then the quanta's switch: a lone busy key has the
 * larger quantum, a turn that serves a second key and the turns of the hold
 * after it the shared one.
 */
#include <signal.h>

#include "core/an.h"
#include "core/sched.h"
#include "tests/unit/unit.h"

enum { KEYS = 1024, QUANTUM = 32, FLOODER = 1000, FLOOD = 1000, QUIET = 100 };

/* The same quantum shared or alone: the turn-taking without its switch. */
static struct sched_quanta fixed(uint32_t quantum)
{
	return (struct sched_quanta){ .shared = quantum, .alone = quantum, .shared_hold_ms = 0 };
}

/* The worker's quanta: one a key while keys share the turns, eight alone, a second's hold. */
static const struct sched_quanta WORKER_QUANTA = { .shared = 1,
						   .alone = 8,
						   .shared_hold_ms = 1000 };

/* What a test's "handlers" saw: per key, how many and the last sequence number. */
struct seen {
	uint32_t count[KEYS];
	uint32_t last[KEYS];
	uint32_t turn_of_first[KEYS];
	uint32_t handled_as[KEYS]; /* the last one's place among everything handled */
	uint32_t handled;
};

static void handle(struct seen *w, const struct sched_cqe *q, uint32_t turn)
{
	ck_assert_uint_lt(q->key, KEYS);
	/* A key's completions come in the order they were posted (ud is a sequence number). */
	if (w->count[q->key] > 0)
		ck_assert_uint_gt(q->ud, w->last[q->key]);
	else
		w->turn_of_first[q->key] = turn;
	w->last[q->key] = (uint32_t)q->ud;
	w->count[q->key]++;
	w->handled_as[q->key] = w->handled++;
}

/* One loop turn as the worker takes it, at <now_ms>: <n> new completions, then the waiting. */
static uint32_t turn(struct sched *s, struct seen *w, const struct sched_cqe *batch, uint32_t n,
		     uint32_t t, uint64_t now_ms)
{
	uint32_t ran = 0;
	struct sched_cqe q;

	sched_turn(s, now_ms);
	for (uint32_t i = 0; i < n; i++) {
		if (sched_admit(s, batch[i].key)) {
			handle(w, &batch[i], t);
			ran++;
		} else {
			ck_assert(sched_room(s, 1));
			sched_defer(s, &batch[i]);
		}
	}
	while (sched_next_waiting(s, &q)) {
		handle(w, &q, t);
		ran++;
	}
	return ran;
}

/* A flood's completions and the quiet keys' one each, interleaved as they might arrive. */
static uint32_t arrivals(struct sched_cqe *batch, uint64_t *seq)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < FLOOD; i++) {
		batch[n++] = (struct sched_cqe){ .ud = ++*seq, .key = FLOODER };
		if (i % 10 == 5 && i / 10 < QUIET)
			batch[n++] = (struct sched_cqe){ .ud = ++*seq, .key = i / 10 };
	}
	return n;
}

/* A scheduler of KEYS keys and nothing seen yet, and the flood's and the quiet keys'
 * first completions in <batch>: how many. */
static uint32_t flood_start(struct sched *s, struct seen *w, struct sched_cqe *batch, uint64_t *seq)
{
	memset(w, 0, sizeof(*w));
	ck_assert_int_eq(sched_init(s, KEYS, 2048, fixed(QUANTUM)), 0);
	return arrivals(batch, seq);
}

START_TEST(test_quiet_keys_are_served_in_the_first_turn)
{
	static struct sched_cqe batch[FLOOD + QUIET];
	static struct seen w;
	struct sched s;
	uint64_t seq = 0;
	uint32_t n = flood_start(&s, &w, batch, &seq);
	ck_assert_uint_eq(n, FLOOD + QUIET);
	/* The turn runs a quantum of the flood and every quiet key's completion. */
	ck_assert_uint_eq(turn(&s, &w, batch, n, 1, 0), QUANTUM + QUIET);
	for (uint32_t k = 0; k < QUIET; k++) {
		ck_assert_uint_eq(w.count[k], 1);
		ck_assert_uint_eq(w.turn_of_first[k], 1);
	}
	ck_assert_uint_eq(w.count[FLOODER], QUANTUM);
	ck_assert_uint_eq(s.count, FLOOD - QUANTUM);
	/* Then a quantum of the flood a turn, oldest first, until none waits. */
	uint32_t t = 1;
	uint64_t waits = s.count;
	while (s.count > 0) {
		uint32_t before = w.count[FLOODER];
		ck_assert_uint_le(turn(&s, &w, NULL, 0, ++t, 0), QUANTUM);
		ck_assert_uint_eq(w.count[FLOODER] - before,
				  s.count > 0 ? QUANTUM : FLOOD - before);
		waits += s.count;
	}
	ck_assert_uint_eq(t, (FLOOD + QUANTUM - 1) / QUANTUM);
	ck_assert_uint_eq(w.count[FLOODER], FLOOD);
	ck_assert_uint_eq(w.handled, FLOOD + QUIET);
	/* Each completion counted once for every turn it waited. */
	ck_assert_uint_eq(s.deferred, waits);
	sched_destroy(&s);
}
END_TEST

START_TEST(test_new_quiet_work_beats_an_old_backlog)
{
	static struct sched_cqe batch[FLOOD + QUIET];
	static struct seen w;
	struct sched s;
	uint64_t seq = 0;
	uint32_t n = flood_start(&s, &w, batch, &seq);
	(void)turn(&s, &w, batch, n, 1, 0);
	/* Turn 2: the backlog waits, yet a quiet key's new completion runs in this turn,
	 * after only a quantum of the flood; the flood's new ones queue behind its old. */
	struct sched_cqe more[3] = {
		{ .ud = ++seq, .key = FLOODER },
		{ .ud = ++seq, .key = 3 },
		{ .ud = ++seq, .key = FLOODER },
	};
	uint32_t before = w.handled;
	ck_assert_uint_eq(turn(&s, &w, more, 3, 2, 0), QUANTUM + 1);
	ck_assert_uint_eq(w.count[3], 2);
	/* ... first of all in its turn: its answer goes out ahead of the flood's. */
	ck_assert_uint_eq(w.handled_as[3], before);
	ck_assert_uint_eq(s.count, FLOOD - 2 * QUANTUM + 2);
	while (s.count > 0)
		(void)turn(&s, &w, NULL, 0, 3, 0);
	ck_assert_uint_eq(w.count[FLOODER], FLOOD + 2);
	ck_assert_uint_eq(w.last[FLOODER], (uint32_t)seq);
	sched_destroy(&s);
}
END_TEST

START_TEST(test_refused_key_stays_refused_for_the_turn)
{
	struct sched s;

	ck_assert_int_eq(sched_init(&s, KEYS, 64, fixed(2)), 0);
	sched_turn(&s, 0);
	ck_assert(sched_admit(&s, 5));
	ck_assert(sched_admit(&s, 5));
	/* N + 1 is refused, and stays refused whatever else runs. */
	ck_assert(!sched_admit(&s, 5));
	ck_assert(sched_admit(&s, 6));
	ck_assert(!sched_admit(&s, 5));
	/* The worker's own completions are never counted nor refused. */
	for (int i = 0; i < 100; i++)
		ck_assert(sched_admit(&s, SCHED_KEY_NONE));
	sched_turn(&s, 0);
	ck_assert(sched_admit(&s, 5));
	ck_assert(sched_admit(&s, KEYS - 1));
	sched_destroy(&s);
}
END_TEST

START_TEST(test_queues_keep_order_and_reuse_nodes)
{
	struct sched s;
	struct sched_cqe q;

	/* Room for 8, filled and emptied five times: nodes are taken back and given again. */
	ck_assert_int_eq(sched_init(&s, KEYS, 8, fixed(1)), 0);
	sched_turn(&s, 0);
	ck_assert(!sched_next_waiting(&s, &q));
	for (uint64_t round = 0; round < 5; round++) {
		/* Keys 1 and 2 interleaved; key 1 became ready first. */
		for (uint64_t i = 0; i < 8; i++) {
			ck_assert(sched_room(&s, (uint32_t)(8 - i)));
			sched_defer(&s, &(struct sched_cqe){ .ud = round * 8 + i,
							     .res = -(int32_t)i,
							     .flags = 7,
							     .key = 1 + (uint32_t)(i % 2) });
		}
		ck_assert(!sched_room(&s, 1));
		/* A quantum of 1: one of each key a turn, key 1 then key 2, each oldest first. */
		for (uint64_t t = 0; t < 4; t++) {
			sched_turn(&s, 0);
			for (uint64_t k = 0; k < 2; k++) {
				ck_assert(sched_next_waiting(&s, &q));
				ck_assert_uint_eq(q.key, 1 + k);
				ck_assert_uint_eq(q.ud, round * 8 + 2 * t + k);
				ck_assert_int_eq(q.res, -(int32_t)(2 * t + k));
				ck_assert_uint_eq(q.flags, 7);
			}
			ck_assert(!sched_next_waiting(&s, &q));
		}
		ck_assert_uint_eq(s.count, 0);
		ck_assert_uint_eq(s.ready_count, 0);
	}
	/* Eight nodes were ever needed, and no more were taken. */
	ck_assert_uint_eq(s.fresh, 8);
	sched_destroy(&s);
}
END_TEST

START_TEST(test_busy_keys_take_turns)
{
	enum { BUSY = 3, EACH = 10, Q = 2 };
	struct sched s;
	struct sched_cqe q;
	uint32_t got[BUSY] = { 0 };

	ck_assert_int_eq(sched_init(&s, KEYS, 64, fixed(Q)), 0);
	sched_turn(&s, 0);
	for (uint32_t i = 0; i < EACH; i++)
		for (uint32_t k = 0; k < BUSY; k++)
			sched_defer(&s, &(struct sched_cqe){ .ud = i, .key = 10 + k });
	/* Each turn, each busy key a quantum, in the order they became ready, oldest first. */
	for (uint32_t t = 0; t < EACH / Q; t++) {
		sched_turn(&s, 0);
		for (uint32_t k = 0; k < BUSY; k++) {
			for (uint32_t j = 0; j < Q; j++) {
				ck_assert(sched_next_waiting(&s, &q));
				ck_assert_uint_eq(q.key, 10 + k);
				ck_assert_uint_eq(q.ud, got[k]++);
			}
		}
		ck_assert(!sched_next_waiting(&s, &q));
		/* A key with some waiting admits no new completion: it goes behind them. */
		if (s.count > 0) {
			ck_assert(!sched_admit(&s, 10));
			ck_assert(sched_admit(&s, 20));
		}
	}
	ck_assert_uint_eq(s.count, 0);
	/* Once its queue is empty, a key is admitted again (quantum whole at the turn). */
	sched_turn(&s, 0);
	ck_assert(sched_admit(&s, 10));
	sched_destroy(&s);
}
END_TEST

START_TEST(test_waiting_key_refused_before_its_turn)
{
	struct sched s;
	struct sched_cqe q;

	ck_assert_int_eq(sched_init(&s, KEYS, 8, fixed(4)), 0);
	sched_turn(&s, 0);
	sched_defer(&s, &(struct sched_cqe){ .ud = 1, .key = 5 });
	/* The next turn reaps first: a new one of key 5 must not pass the one waiting,
	 * though the key's quantum is whole; it goes behind it, and both run in order. */
	sched_turn(&s, 0);
	ck_assert(!sched_admit(&s, 5));
	sched_defer(&s, &(struct sched_cqe){ .ud = 2, .key = 5 });
	ck_assert(!sched_admit(&s, 5));
	sched_defer(&s, &(struct sched_cqe){ .ud = 3, .key = 5 });
	for (uint64_t ud = 1; ud <= 3; ud++) {
		ck_assert(sched_next_waiting(&s, &q));
		ck_assert_uint_eq(q.ud, ud);
	}
	ck_assert(!sched_next_waiting(&s, &q));
	ck_assert_uint_eq(s.count, 0);
	/* Its queue empty, the key has the last of its quantum. */
	ck_assert(sched_admit(&s, 5));
	ck_assert(!sched_admit(&s, 5));
	sched_destroy(&s);
}
END_TEST

START_TEST(test_turn_stamp_wraps)
{
	struct sched s;

	ck_assert_int_eq(sched_init(&s, KEYS, 8, fixed(1)), 0);
	sched_turn(&s, 0);
	ck_assert(sched_admit(&s, 2));
	/* 2^32 turns later the stamp would match again: the wrap clears the stamps. */
	s.turn = UINT32_MAX;
	s.keys[2].turn = 1;
	s.keys[2].used = 1;
	sched_turn(&s, 0);
	ck_assert_uint_eq(s.turn, 1);
	ck_assert(sched_admit(&s, 2));
	sched_destroy(&s);
}
END_TEST

START_TEST(test_destroy_with_waiting_aborts)
{
	struct sched s;

	ck_assert_int_eq(sched_init(&s, KEYS, 8, fixed(1)), 0);
	sched_defer(&s, &(struct sched_cqe){ .ud = 1, .key = 1 });
	sched_destroy(&s);
}
END_TEST

START_TEST(test_defer_past_capacity_aborts)
{
	struct sched s;

	ck_assert_int_eq(sched_init(&s, KEYS, 2, fixed(1)), 0);
	for (int i = 0; i < 3; i++)
		sched_defer(&s, &(struct sched_cqe){ .ud = 1, .key = 1 });
}
END_TEST

START_TEST(test_key_past_the_end_aborts)
{
	struct sched s;

	ck_assert_int_eq(sched_init(&s, KEYS, 8, fixed(1)), 0);
	(void)sched_admit(&s, KEYS);
}
END_TEST

/* How many of <key>'s waiting completions one turn at <now_ms> runs. */
static uint32_t waiting_run(struct sched *s, uint32_t key, uint64_t now_ms)
{
	struct sched_cqe q;
	uint32_t n = 0;

	sched_turn(s, now_ms);
	while (sched_next_waiting(s, &q)) {
		ck_assert_uint_eq(q.key, key);
		n++;
	}
	return n;
}

START_TEST(test_lone_busy_key_has_the_alone_quantum)
{
	struct sched s;

	ck_assert_int_eq(sched_init(&s, KEYS, 64, WORKER_QUANTA), 0);
	for (uint64_t i = 0; i < 20; i++)
		sched_defer(&s, &(struct sched_cqe){ .ud = i, .key = FLOODER });
	/* Alone, it has eight a turn, never the shared one. */
	ck_assert_uint_eq(waiting_run(&s, FLOODER, 0), 8);
	ck_assert_uint_eq(waiting_run(&s, FLOODER, 5000), 8);
	ck_assert_uint_eq(waiting_run(&s, FLOODER, 5001), 4);
	ck_assert_uint_eq(s.shared_turns, 0);
	sched_destroy(&s);
}
END_TEST

START_TEST(test_second_key_makes_the_turn_shared)
{
	struct sched s;

	ck_assert_int_eq(sched_init(&s, KEYS, 64, WORKER_QUANTA), 0);
	sched_turn(&s, 100);
	for (int i = 0; i < 8; i++)
		ck_assert(sched_admit(&s, FLOODER));
	ck_assert(!sched_admit(&s, FLOODER));
	/* A quiet key's completion runs, and the rest of the turn is shared: the
	 * busy key, past one already, stays refused, and so does the quiet key's
	 * second. */
	ck_assert(sched_admit(&s, 7));
	ck_assert(!sched_admit(&s, 7));
	ck_assert(!sched_admit(&s, FLOODER));
	ck_assert_uint_eq(s.shared_turns, 1);
	/* The turns of the second after it are shared, though the busy key is alone in them. */
	for (uint64_t now = 101; now < 1101; now += 250) {
		sched_turn(&s, now);
		ck_assert(sched_admit(&s, FLOODER));
		ck_assert(!sched_admit(&s, FLOODER));
	}
	/* A second after the turn that followed the last shared one, it has its eight again. */
	sched_turn(&s, 1101);
	for (int i = 0; i < 8; i++)
		ck_assert(sched_admit(&s, FLOODER));
	ck_assert(!sched_admit(&s, FLOODER));
	ck_assert_uint_eq(s.shared_turns, 5);
	sched_destroy(&s);
}
END_TEST

START_TEST(test_shared_turns_hold_while_a_quiet_key_asks)
{
	static struct seen w;
	struct sched s;
	uint64_t seq = 0;
	uint64_t now = 0;

	memset(&w, 0, sizeof(w));
	ck_assert_int_eq(sched_init(&s, KEYS, 4096, WORKER_QUANTA), 0);
	/* The flood alone for a while: 3,000 completions waiting, 8 a turn. */
	for (uint32_t i = 0; i < 3000; i++)
		sched_defer(&s, &(struct sched_cqe){ .ud = ++seq, .key = FLOODER });
	for (uint32_t t = 0; t < 10; t++, now++)
		ck_assert_uint_eq(turn(&s, &w, NULL, 0, (uint32_t)now, now), 8);
	/* A quiet key asks every 400 ms: from its first turn on, each turn runs one
	 * of the flood's, with the quiet key's own first. */
	for (uint32_t t = 0; t < 2000; t++, now++) {
		struct sched_cqe quiet = { .ud = ++seq, .key = 3 };
		bool asks = t % 400 == 0;
		uint32_t before = w.count[FLOODER];
		ck_assert_uint_eq(turn(&s, &w, &quiet, asks ? 1 : 0, (uint32_t)now, now),
				  asks ? 2 : 1);
		ck_assert_uint_eq(w.count[FLOODER], before + 1);
		if (asks)
			ck_assert_uint_lt(w.handled_as[3], w.handled_as[FLOODER]);
	}
	/* The quiet key gone silent, a second on the flood has its eight again. */
	now += 1000;
	ck_assert_uint_eq(turn(&s, &w, NULL, 0, (uint32_t)now, now), 8);
	while (s.count > 0)
		(void)turn(&s, &w, NULL, 0, (uint32_t)now, now);
	ck_assert_uint_eq(w.count[FLOODER], 3000);
	sched_destroy(&s);
}
END_TEST

static Suite *sched_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_quiet_keys_are_served_in_the_first_turn);
	tcase_add_test(tc, test_new_quiet_work_beats_an_old_backlog);
	tcase_add_test(tc, test_refused_key_stays_refused_for_the_turn);
	tcase_add_test(tc, test_queues_keep_order_and_reuse_nodes);
	tcase_add_test(tc, test_busy_keys_take_turns);
	tcase_add_test(tc, test_waiting_key_refused_before_its_turn);
	tcase_add_test(tc, test_turn_stamp_wraps);
	tcase_add_test(tc, test_lone_busy_key_has_the_alone_quantum);
	tcase_add_test(tc, test_second_key_makes_the_turn_shared);
	tcase_add_test(tc, test_shared_turns_hold_while_a_quiet_key_asks);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_destroy_with_waiting_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_defer_past_capacity_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_key_past_the_end_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	return unit_run(sched_suite());
}
