/*
 * A real engine for the unit suites that drive one (core/control.c,
 * core/engine.c, core/worker.c's exit TCase): a policy given as text, loaded
 * as the daemon loads a file, and a small daemon around it: one worker of 64
 * conns and 4 pipes, the resolver pointed at 127.0.0.1, its socket directory
 * and audit log under a directory of the suite's own, and a term back-end that
 * does no TLS (enginetest_stub_term) unless the suite brings one.
 *
 * enginetest_prepare() does everything engine_start() needs and stops short
 * of it, so that a suite can change the config (a per-user limit) or the term
 * first; enginetest_start() starts it; enginetest_release() releases what
 * prepare made once the engine is stopped (engine_stop is the suite's: its
 * result is what some suites test). Every step fails the running test through
 * libcheck on any error, naming the step.
 */
#ifndef AN_TESTS_UNIT_CORE_ENGINETEST_H
#define AN_TESTS_UNIT_CORE_ENGINETEST_H

#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/config.h"
#include "core/engine.h"
#include "core/ring.h"
#include "policy/policy.h"

/* The workers the stub term can serve: one state byte each. */
#define ENGINETEST_WORKERS_MAX 8u

/* What enginetest_prepare fills: the engine, its config and its audit log. */
struct enginetest {
	struct engine eng;
	struct config cfg;
	struct audit *audit;
};

AN_UNUSED static char enginetest_stub_state[ENGINETEST_WORKERS_MAX];

/* The stub term's worker state: one byte per worker, never TLS. */
static inline void *enginetest_stub_worker_new(void *arg, uint32_t index, char *err, size_t cap)
{
	(void)arg;
	(void)err;
	(void)cap;
	ck_assert_uint_lt(index, ENGINETEST_WORKERS_MAX);
	return &enginetest_stub_state[index];
}

/* Asserts <worker_state> is one the stub handed out. */
static inline void enginetest_stub_worker_free(void *worker_state)
{
	ptrdiff_t index = (const char *)worker_state - enginetest_stub_state;

	ck_assert_int_ge(index, 0);
	ck_assert_int_lt(index, (ptrdiff_t)ENGINETEST_WORKERS_MAX);
}

AN_UNUSED static const struct term_ops enginetest_stub_term = {
	.worker_new = enginetest_stub_worker_new, .worker_free = enginetest_stub_worker_free
};

/*
 * Fills <t> for engine_start: the policy <policy_text> loaded into its config,
 * the socket directory <dir>/<socket_subdir>, the audit log <dir>/audit.log
 * opened, one worker of 64 conns and 4 pipes, the resolver 127.0.0.1, the
 * kernel's io_uring probed, and <term> (NULL: enginetest_stub_term) with the
 * engine as its argument. <dir> exists and is the suite's; the paths must fit
 * 63 bytes.
 */
static inline void enginetest_prepare(struct enginetest *t, const char *dir,
				      const char *socket_subdir, const char *policy_text,
				      const struct term_ops *term)
{
	char err[512];
	char path[64];
	struct policy *pol = NULL;

	memset(t, 0, sizeof(*t));
	ck_assert_int_eq(config_init_defaults(&t->cfg), 0);
	int rc = policy_load_buffer("t.yaml", policy_text, strlen(policy_text), &t->cfg, &pol, err,
				    sizeof(err));
	ck_assert_msg(rc == 0, "policy: %s", err);
	ck_assert_int_lt(snprintf(path, sizeof(path), "%s/%s", dir, socket_subdir),
			 (int)sizeof(path));
	ck_assert_int_eq(config_set_string(&t->cfg.socket_dir, path), 0);
	ck_assert_int_lt(snprintf(path, sizeof(path), "%s/audit.log", dir), (int)sizeof(path));
	ck_assert_int_eq(config_set_string(&t->cfg.audit_path, path), 0);
	ck_assert_int_eq(config_set_string(&t->cfg.dns_servers, "127.0.0.1"), 0);
	t->cfg.workers = 1;
	t->cfg.conns_per_worker = 64; /* the pools of a small daemon: quick to make */
	t->cfg.pipes_per_worker = 4;
	ck_assert_int_eq(audit_open(t->cfg.audit_path, t->cfg.workers + 1, &t->audit), 0);
	rc = ring_probe(&t->eng.features);
	ck_assert_msg(rc == 0, "io_uring: %s", strerror(-rc));
	t->eng.cfg = &t->cfg;
	t->eng.policy = pol; /* the engine's from engine_start on */
	t->eng.ops = &policy_verdict_ops;
	t->eng.audit = t->audit;
	t->eng.term = term != NULL ? term : &enginetest_stub_term;
	t->eng.term_arg = &t->eng;
}

/* engine_start of what <t> prepared; the test fails if it does not start. */
static inline void enginetest_start(struct enginetest *t)
{
	int rc = engine_start(&t->eng);

	ck_assert_msg(rc == 0, "engine_start: %s", strerror(-rc));
}

/* Closes the audit log and frees the config, once the engine is stopped. */
static inline void enginetest_release(struct enginetest *t)
{
	audit_close(t->audit);
	t->audit = NULL;
	config_free(&t->cfg);
}

#endif /* AN_TESTS_UNIT_CORE_ENGINETEST_H */
