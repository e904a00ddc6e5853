/*
 * Unit tests for the counters a worker publishes (core/worker.c) and the
 * control socket's `stats` line that sums them (core/control.c).
 *
 * The .c is included, so the statics (stats_turn, stats_publish, wait_ms)
 * are reached directly. Two workers are built by hand, with only what those
 * functions touch: the engine pointer, a small conn pool (its in-use count
 * is the published conns), a timer wheel (wait_ms asks it) and the loop
 * clock, which the tests move by hand. A stub term_ops hands out fixed leaf
 * figures. Checked: every field reaches its own published field; the
 * interval at N-1 and N ms; the wait bound while figures are unpublished,
 * and none once they are out; no TLS, a back-end without the op, a worker
 * without a term state; sums over two workers and the exact `stats` line.
 *
 * The leak check at exit (TCase "exit"): a real engine (engine_start, one
 * worker thread running this file's worker_main, engine_stop) with a small
 * policy and no sandbox. A stub term's worker_new, which worker_setup calls
 * on the worker's own thread once its pools exist, takes one conn from the
 * worker's pool and keeps it: the worker's teardown must count a leak and
 * engine_stop return -EFAULT (the daemon then exits 1 and audits
 * daemon_stopped_with_leak). Without the take, the same cycle must stop clean:
 * 0, no leak, and the teardown went all the way (the term state freed).
 */
#include "../../../core/worker.c"

#include <check.h>

#include "core/audit.h"
#include "core/config.h"
#include "core/control.h"
#include "policy/policy.h"
#include "tests/unit/core/enginetest.h"
#include "tests/unit/unit.h"

#define WT_CONNS   4u
#define WT_T0_MS   1000u
#define WT_WORKERS 2u

static struct engine eng;
static struct worker wk[WT_WORKERS];
static void *taken[WT_WORKERS][WT_CONNS];
static uint32_t taken_count[WT_WORKERS];
static char stub_state[WT_WORKERS];
static struct term_counters stub_leaf[WT_WORKERS];

static void stub_counters(const void *worker_state, struct term_counters *out)
{
	ptrdiff_t i = (const char *)worker_state - stub_state;

	ck_assert_int_ge(i, 0);
	ck_assert_int_lt(i, WT_WORKERS);
	*out = stub_leaf[i];
}

static const struct term_ops stub_term = { .counters = stub_counters };
static const struct term_ops stub_term_silent; /* no counters op */

static void setup(void)
{
	memset(&eng, 0, sizeof(eng));
	memset(wk, 0, sizeof(wk));
	memset(taken_count, 0, sizeof(taken_count));
	memset(stub_leaf, 0, sizeof(stub_leaf));
	eng.worker_count = WT_WORKERS;
	eng.workers = wk;
	eng.term = &stub_term;
	for (uint32_t i = 0; i < WT_WORKERS; i++) {
		struct worker *w = &wk[i];
		w->index = i;
		w->e = &eng;
		w->term = &stub_state[i];
		ck_assert_int_eq(pool_init(&w->conns, "conns", 64, WT_CONNS), 0);
		w->timers = pool_malloc(sizeof(*w->timers));
		ck_assert_ptr_nonnull(w->timers);
		timer_wheel_init(w->timers, WT_T0_MS);
		w->now_ms = WT_T0_MS;
	}
}

static void teardown(void)
{
	for (uint32_t i = 0; i < WT_WORKERS; i++) {
		for (uint32_t j = 0; j < taken_count[i]; j++)
			pool_put(&wk[i].conns, taken[i][j]);
		ck_assert_uint_eq(pool_in_use(&wk[i].conns), 0);
		pool_destroy(&wk[i].conns);
		AN_FREE(&wk[i].timers);
	}
}

static void take_conns(uint32_t worker, uint32_t n)
{
	for (uint32_t j = 0; j < n; j++) {
		ck_assert_uint_lt(taken_count[worker], WT_CONNS);
		taken[worker][taken_count[worker]] = pool_take(&wk[worker].conns);
		ck_assert_ptr_nonnull(taken[worker][taken_count[worker]]);
		taken_count[worker]++;
	}
}

/* Gives every counter of worker <i> a value of its own, from <base> up. */
static void set_counters(uint32_t i, uint64_t base)
{
	struct worker *w = &wk[i];

	w->stats.accepted = base + 1;
	w->stats.refused_overload = base + 2;
	w->stats.requests = base + 3;
	w->stats.denied = base + 4;
	w->stats.splice_relays = base + 5;
	w->stats.copy_relays = base + 6;
	w->uppool.reused = base + 7;
	stub_leaf[i] = (struct term_counters){ .leaf_hits = base + 8,
					       .leaf_misses = base + 10,
					       .leaf_mints = base + 9 };
	w->stats.misdirected = base + 11;
	w->stats.cqes = base + 100; /* not published */
	w->stats.enters = base + 200;
}

static struct worker_counters read_one(uint32_t i)
{
	struct worker_counters sum = { 0 };

	worker_counters_add(&wk[i], &sum);
	return sum;
}

START_TEST(test_every_field)
{
	set_counters(0, 0);
	take_conns(0, 3);
	stats_turn(&wk[0]);
	struct worker_counters c = read_one(0);
	ck_assert_uint_eq(c.conns_open, 3);
	ck_assert_uint_eq(c.accepted, 1);
	ck_assert_uint_eq(c.refused_overload, 2);
	ck_assert_uint_eq(c.requests, 3);
	ck_assert_uint_eq(c.denied, 4);
	ck_assert_uint_eq(c.splice_relays, 5);
	ck_assert_uint_eq(c.copy_relays, 6);
	ck_assert_uint_eq(c.upstreams_reused, 7);
	ck_assert_uint_eq(c.leaf_hits, 8);
	ck_assert_uint_eq(c.leaf_misses, 10);
	ck_assert_uint_eq(c.leaf_mints, 9);
	ck_assert_uint_eq(c.misdirected, 11);
	ck_assert(!wk[0].stats_unpublished);
	ck_assert_uint_eq(wk[0].stats_due_ms, WT_T0_MS + WORKER_STATS_PUBLISH_MS);
	/* The other worker published nothing: all zero. */
	struct worker_counters other = read_one(1);
	ck_assert_uint_eq(other.accepted, 0);
	ck_assert_uint_eq(other.leaf_hits, 0);
	/* All fields lie between the pads: nothing else shares their cache lines. */
	ck_assert_uint_ge(offsetof(struct worker_published, conns_open),
			  offsetof(struct worker_published, pad_head) + WORKER_CACHE_LINE_BYTES);
	ck_assert_uint_ge(offsetof(struct worker_published, pad_tail),
			  offsetof(struct worker_published, misdirected) + sizeof(uint64_t));
	ck_assert_uint_eq(sizeof(((struct worker_published *)0)->pad_tail),
			  WORKER_CACHE_LINE_BYTES);
}
END_TEST

/* Publishes at the interval (N ms after the last), not a millisecond before it (N - 1). */
START_TEST(test_interval)
{
	struct worker *w = &wk[0];

	stats_turn(w); /* the first turn publishes at once: due 0 */
	ck_assert_int_eq(wait_ms(w), -1);
	w->stats.accepted = 5;
	w->now_ms = WT_T0_MS + WORKER_STATS_PUBLISH_MS - 1;
	stats_turn(w);
	ck_assert_uint_eq(read_one(0).accepted, 0);
	ck_assert(w->stats_unpublished);
	ck_assert_int_eq(wait_ms(w), 1); /* wakes when due, with nothing else to wait for */
	w->now_ms = WT_T0_MS + WORKER_STATS_PUBLISH_MS;
	stats_turn(w);
	ck_assert_uint_eq(read_one(0).accepted, 5);
	ck_assert(!w->stats_unpublished);
	ck_assert_int_eq(wait_ms(w), -1); /* all out: an idle worker sleeps */
	/* Any turn inside the interval costs one more wake-up at most, at its end. */
	w->now_ms += WORKER_STATS_PUBLISH_MS / 2;
	stats_turn(w);
	ck_assert_int_eq(wait_ms(w), (int32_t)(WORKER_STATS_PUBLISH_MS / 2));
	w->now_ms += WORKER_STATS_PUBLISH_MS / 2;
	stats_turn(w);
	ck_assert_int_eq(wait_ms(w), -1);
}
END_TEST

/* The bound only shortens a wait: a nearer deadline stays the nearer one. */
START_TEST(test_wait_bound)
{
	struct worker *w = &wk[0];

	stats_turn(w);
	w->now_ms += 50;
	stats_turn(w); /* due in 50 */
	take_conns(0, 1);
	w->nobufs = taken[0][0]; /* waiting for buffers: re-checked every 10 ms */
	ck_assert_int_eq(wait_ms(w), 10);
	w->now_ms += 45;
	stats_turn(w); /* due in 5 */
	ck_assert_int_eq(wait_ms(w), 5);
	w->nobufs = NULL;
	ck_assert_int_eq(wait_ms(w), 5);
}
END_TEST

START_TEST(test_no_tls)
{
	set_counters(0, 0);
	eng.term = NULL;
	stats_turn(&wk[0]);
	ck_assert_uint_eq(read_one(0).leaf_hits, 0);
	ck_assert_uint_eq(read_one(0).accepted, 1);
	/* A back-end without the op. */
	eng.term = &stub_term_silent;
	wk[0].now_ms += WORKER_STATS_PUBLISH_MS;
	stats_turn(&wk[0]);
	ck_assert_uint_eq(read_one(0).leaf_misses, 0);
	/* A term, but no state for this worker: stats_publish does not call it. */
	eng.term = &stub_term;
	wk[0].term = NULL;
	wk[0].now_ms += WORKER_STATS_PUBLISH_MS;
	stats_turn(&wk[0]);
	ck_assert_uint_eq(read_one(0).leaf_mints, 0);
	/* And with both: the figures appear. */
	wk[0].term = &stub_state[0];
	wk[0].now_ms += WORKER_STATS_PUBLISH_MS;
	stats_turn(&wk[0]);
	ck_assert_uint_eq(read_one(0).leaf_mints, 9);
}
END_TEST

START_TEST(test_stats_line)
{
	size_t len = 0;

	set_counters(0, 0);
	set_counters(1, 1000);
	take_conns(0, 1);
	take_conns(1, 2);
	stats_turn(&wk[0]);
	stats_turn(&wk[1]);
	struct worker_counters sum = { 0 };
	worker_counters_add(&wk[0], &sum);
	worker_counters_add(&wk[1], &sum);
	ck_assert_uint_eq(sum.conns_open, 3);
	ck_assert_uint_eq(sum.accepted, 1002);
	ck_assert_uint_eq(sum.leaf_mints, 1018);
	char *out = control_handle(&eng, "stats", NULL, NULL, &len, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(
	    out, "ok workers 2 conns 3 accepted 1002 refused_overload 1004 "
		 "requests 1006 denied 1008 splice_relays 1010 copy_relays 1012 "
		 "upstreams_reused 1014 leaf_hits 1016 leaf_misses 1020 "
		 "leaf_mints 1018 audit_written 0 audit_dropped 0 misdirected 1022 audit_lost 0 "
		 "audit_failing 0 webhook_delivered 0 webhook_failed 0 webhook_dropped 0\n");
	ck_assert_uint_eq(len, strlen(out));
	pool_free(out);
	/* Unpublished changes do not show; `stats` never waits on a worker. */
	wk[1].stats.accepted = 5000;
	out = control_handle(&eng, "stats", NULL, NULL, &len, NULL);
	ck_assert_ptr_nonnull(strstr(out, " accepted 1002 "));
	pool_free(out);
	out = control_handle(&eng, "stats now", NULL, NULL, &len, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(strncmp(out, "error bad_request ", 18), 0);
	pool_free(out);
}
END_TEST

/* --- the leak check at exit ------------------------------------------------------------- */

#define WT_EXIT_POLICY                              \
	"version: 1\nprofiles:\n  p:\n    rules:\n" \
	"    - host: a.test\n      tier: passthrough\n      owner: o\n      reason: r\n"

/* The exit TCase's engine (tests/unit/core/enginetest.h), its config and audit log. */
static struct enginetest exit_et;
static char exit_dir[] = "/tmp/an-unit-worker-XXXXXX";
static bool exit_take;      /* worker_new keeps one conn from the worker's pool */
static void *exit_taken;    /* the conn it kept */
static uint32_t exit_frees; /* worker_free calls: the teardown's clean path ran */
/*
 * The worker as worker_new left it, the conn taken: engine_stop frees the
 * workers' array, and what a leaking worker keeps as evidence (its pools, its
 * ring) must stay reachable, or LeakSanitizer would fail the test at exit.
 */
static struct worker exit_evidence;

/* Worker thread, in worker_setup once the pools exist. */
static void *exit_worker_new(void *arg, uint32_t index, char *err, size_t cap)
{
	struct engine *e = arg;
	struct worker *w = &e->workers[index];

	(void)err;
	(void)cap;
	if (exit_take) {
		exit_taken = pool_take(&w->conns);
		if (exit_taken == NULL)
			return NULL; /* engine_start fails: the test says so */
		exit_evidence = *w;
	}
	return &stub_state[index];
}

static void exit_worker_free(void *worker_state)
{
	ck_assert_ptr_eq(worker_state, &stub_state[0]);
	exit_frees++;
}

static const struct term_ops exit_term = { .worker_new = exit_worker_new,
					   .worker_free = exit_worker_free };

static void exit_setup(void)
{
	exit_take = false;
	exit_taken = NULL;
	exit_frees = 0;
	ck_assert_ptr_nonnull(mkdtemp(exit_dir));
	enginetest_prepare(&exit_et, exit_dir, "run", WT_EXIT_POLICY, &exit_term);
}

static void exit_teardown(void)
{
	char cmd[128];

	enginetest_release(&exit_et);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", exit_dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Starts the engine (one worker, serving) and stops it: engine_stop's result. */
static int exit_cycle(void)
{
	int rc = engine_start(&exit_et.eng);

	ck_assert_msg(rc == 0, "engine_start: %s", strerror(-rc));
	ck_assert_uint_eq(exit_et.eng.worker_count, 1);
	ck_assert_uint_eq(atomic_load(&exit_et.eng.workers_ready), 1);
	return engine_stop(&exit_et.eng);
}

/* A clean stop: nothing taken, nothing counted, 0 (the daemon's exit status 0). */
START_TEST(test_exit_clean)
{
	ck_assert_int_eq(exit_cycle(), 0);
	ck_assert_uint_eq(atomic_load(&exit_et.eng.leaks), 0);
	ck_assert_uint_eq(exit_frees, 1);
}
END_TEST

/* One conn still out of its pool at the worker's exit: a leak, and -EFAULT (exit status 1). */
START_TEST(test_exit_leak)
{
	exit_take = true;
	ck_assert_int_eq(exit_cycle(), -EFAULT);
	ck_assert_ptr_nonnull(exit_taken);
	ck_assert_uint_eq(atomic_load(&exit_et.eng.leaks), 1);
	ck_assert_uint_eq(pool_in_use(&exit_evidence.conns), 1);
	ck_assert_uint_eq(exit_frees, 0); /* the evidence is kept: no teardown past the check */
}
END_TEST

static Suite *worker_suite(void)
{
	Suite *s = suite_create("core/worker");
	TCase *tc = tcase_create("stats");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_every_field);
	tcase_add_test(tc, test_interval);
	tcase_add_test(tc, test_wait_bound);
	tcase_add_test(tc, test_no_tls);
	tcase_add_test(tc, test_stats_line);
	suite_add_tcase(s, tc);
	tc = tcase_create("exit");
	tcase_add_checked_fixture(tc, exit_setup, exit_teardown);
	tcase_add_test(tc, test_exit_clean);
	tcase_add_test(tc, test_exit_leak);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(worker_suite());
}
