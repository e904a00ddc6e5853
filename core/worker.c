/*
 * The worker loop. One thread per core, pinned, owning one ring:
 *
 *   loop:  submit everything prepared and wait for at least one completion,
 *          bounded by the nearest timer or DNS deadline (one enter per turn;
 *          no wait while completions are deferred); expire timers; copy up
 *          to LIMITS_CQES_PER_TURN completions out and mark them seen in one
 *          step, then run their handlers (no handler runs from inside submit
 *          or reap), again while the CQ has more; then run a quantum of each
 *          sandbox's completions deferred at earlier turns, oldest first;
 *          then run resolver timeouts
 *          and re-arm receives that ran out of provided buffers; then, once
 *          WORKER_STATS_PUBLISH_MS has passed since the last time, copy the
 *          counters out for the control thread.
 *
 * Turns are shared (core/sched.c): a sandbox's completions past its quantum
 * of the turn wait in that sandbox's queue for the next turn, so one busy
 * sandbox cannot make a turn, and every other sandbox's answers submitted at
 * its end, as long as its own backlog. The quantum is
 * daemon.sandbox_completions_per_turn (docs/policy.md) while two sandboxes or
 * more have work, LIMITS_SANDBOX_CQES_ALONE while one alone has. A
 * deferred head receive of a conn reading a head first hands its bytes to the
 * conn (conn_cqe_defer): the buffers a flood's requests arrive in do not wait
 * there, where they would drain the ring every sandbox receives from.
 *
 * Counters: the worker owns them and bumps them with plain increments. Other
 * threads read only the published copy (relaxed atomic stores here, relaxed
 * loads there: one writer, so no read-modify-write and no lock). Publishing
 * on a clock rather than every turn keeps a busy worker's cost at ten copies
 * a second; a turn that leaves figures unpublished bounds the next wait by
 * the time left, so an idle worker is at most one interval late, then sleeps.
 * Rejected: atomic increments on the data path (a locked instruction each
 * event), and asking the worker through its command queue (a control-thread
 * wait on every worker, and a wake-up of each).
 *
 * Draining (engine_drain, a command): the listeners a successor takes over
 * stop accepting, requests that arrive are served with Connection: close or
 * refused daemon_stopping (core/conn.c, drain_answer), and the command is
 * completed once no conn is left or the drain's time is up.
 * Stopping: engine_stop writes the worker's eventfd; the worker stops its
 * accepts, aborts every live connection and keeps looping until nothing is in
 * flight, then checks that every pool is full again and reports a leak if not.
 */
#include "core/worker.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/compat.h"
#include "core/conn.h"
#include "core/deny.h"
#include "core/engine.h"
#include "core/http1.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/ud.h"
#include "core/watch.h"

static void accept_arm(struct worker *w, struct worker_listener *l)
{
	struct io_uring_sqe *sqe = ring_sqe(&w->ring);
	if (l->ingress) {
		l->peer_len = sizeof(l->peer);
		compat_prep_accept_direct_alloc(sqe, l->fd, (struct sockaddr *)&l->peer,
						&l->peer_len, SOCK_NONBLOCK);
	} else {
		io_uring_prep_multishot_accept_direct(sqe, l->fd, NULL, NULL, SOCK_NONBLOCK);
	}
	io_uring_sqe_set_data64(sqe, ud_encode(l, WORKER_OP_ACCEPT));
	l->armed = true;
}

static void wake_arm(struct worker *w)
{
	struct io_uring_sqe *sqe = ring_sqe(&w->ring);
	io_uring_prep_read(sqe, w->wake_fd, &w->wake_value, sizeof(w->wake_value), 0);
	io_uring_sqe_set_data64(sqe, ud_encode(w, WORKER_OP_WAKE));
}

/*
 * Pins the thread to one CPU of those it was allowed to run on (the set the
 * daemon was started with, e.g. by taskset), the <index>-th modulo their
 * count, so workers spread over the allowed cores and never onto others.
 */
static void pin_to_core(struct worker *w)
{
	cpu_set_t allowed;
	cpu_set_t one;

	if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0)
		return;
	int count = CPU_COUNT(&allowed);
	if (count <= 1)
		return;
	int want = (int)(w->index % (uint32_t)count);
	for (size_t cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || want-- > 0)
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0)
			log_warn("worker %u: could not pin to CPU %zu", w->index, cpu);
		return;
	}
}

/* At least twice the conns (each holds one entry at most), a power of two. */
static uint32_t rule_buckets_for(uint32_t conns_per_worker)
{
	uint32_t want = LIMITS_RULE_BUCKETS_PER_WORKER;

	while (want < RATELIMIT_TABLE_CAPACITY_MAX && want / 2 < conns_per_worker)
		want *= 2;
	AN_ASSERT((want & (want - 1)) == 0);
	return want;
}

static void leaves_prime(struct worker *w, const struct snapshot *s);
static void stats_turn(struct worker *w);

static_assert(UPPOOL_ENTRIES <= LIMITS_FILE_SLOTS_RESERVED,
	      "parked upstreams hold slots no conn's share may count on");

/* The sandboxes' shares of this worker's conns, and the refusal over one. */
static int share_setup(struct worker *w)
{
	const struct config *cfg = w->e->cfg;
	uint32_t capacity = share_capacity_for(w->conns.capacity, w->ring.file_slots);

	AN_ASSERT(capacity <= w->conns.capacity);
	int ret = share_init(&w->share, capacity, cfg->sandbox_share_percent);
	if (ret != 0) {
		log_error("worker %u: per-sandbox counts: %s", w->index, strerror(-ret));
		return ret;
	}
	const struct deny_info d = { .reason = REASON_CONNECTION_SHARE_EXCEEDED,
				     .retry_after_s = 1 };
	ssize_t n = deny_format(&d, w->share_reply, sizeof(w->share_reply));
	AN_ASSERT(n > 0);
	w->share_reply_len = (uint32_t)n;
	if (capacity < w->conns.capacity)
		log_info("worker %u: %u conns at most (%u direct descriptors, two a conn)",
			 w->index, capacity, w->ring.file_slots);
	return 0;
}

/* The turn-taking between sandboxes, with the configured quantum. */
static int sched_setup(struct worker *w)
{
	uint32_t shared = w->e->cfg->sandbox_completions_per_turn;
	struct sched_quanta quanta = {
		.shared = shared,
		.alone = shared > LIMITS_SANDBOX_CQES_ALONE ? shared : LIMITS_SANDBOX_CQES_ALONE,
		.shared_hold_ms = LIMITS_SCHED_SHARED_HOLD_MS,
	};

	AN_ASSERT(shared >= 1 && shared <= LIMITS_CQES_PER_TURN);
	int ret = sched_init(&w->sched, SHARE_KEYS, LIMITS_DEFERRED_CQES, quanta);
	if (ret != 0)
		log_error("worker %u: turn-taking: %s", w->index, strerror(-ret));
	return ret;
}

static int worker_setup(struct worker *w)
{
	const struct engine *e = w->e;
	const struct config *cfg = e->cfg;

	int ret = ring_init(&w->ring, &e->features, LIMITS_SQ_ENTRIES, LIMITS_CQ_ENTRIES,
			    LIMITS_FIXED_FILES_PER_WORKER, LIMITS_BUFRING_ENTRIES,
			    LIMITS_BUFRING_BUFFER_BYTES);
	if (ret != 0) {
		log_error("worker %u: io_uring set-up: %s", w->index, strerror(-ret));
		return ret;
	}
	ret = pool_init(&w->conns, "conns", sizeof(struct conn), cfg->conns_per_worker);
	if (ret == 0)
		ret =
		    pool_init(&w->heads, "heads", WORKER_HEAD_BUFFER_BYTES, cfg->conns_per_worker);
	if (ret != 0) {
		log_error("worker %u: pools: %s", w->index, strerror(-ret));
		return ret;
	}
	ret = share_setup(w);
	if (ret == 0)
		ret = sched_setup(w);
	if (ret != 0)
		return ret;
	uint32_t pipes = e->features.splice ? cfg->pipes_per_worker : 0;
	ret = pipepool_init(&w->pipes, pipes, LIMITS_PIPE_BYTES);
	if (ret != 0) {
		log_error("worker %u: pipe pool of %u: %s", w->index, pipes, strerror(-ret));
		return ret;
	}
	w->timers = pool_malloc(sizeof(*w->timers));
	w->resp_rewrite = pool_malloc(HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX);
	if (w->timers == NULL || w->resp_rewrite == NULL)
		return -ENOMEM;
	/* Zeroed pages are only touched by sandboxes with limits on this worker. */
	w->buckets = pool_calloc(LIMITS_SANDBOXES_MAX, sizeof(*w->buckets));
	/* Zero pages until a sandbox's traffic touches its entry. */
	w->sandbox_counts = pool_calloc(LIMITS_SANDBOXES_MAX, sizeof(*w->sandbox_counts));
	w->watch = pool_calloc(LIMITS_SANDBOXES_MAX, sizeof(*w->watch));
	if (w->buckets == NULL || w->sandbox_counts == NULL || w->watch == NULL)
		return -ENOMEM;
	ret = ratelimit_table_init(&w->rule_buckets, rule_buckets_for(cfg->conns_per_worker));
	if (ret != 0) {
		log_error("worker %u: per-rule limits table: %s", w->index, strerror(-ret));
		return ret;
	}
	if (e->term != NULL) {
		char err[256];
		w->term = e->term->worker_new(e->term_arg, w->index, err, sizeof(err));
		if (w->term == NULL) {
			log_error("worker %u: TLS: %s", w->index, err);
			return -ENOMEM;
		}
	}
	w->policy = snapshot_adopt(NULL, atomic_load_explicit(&e->current, memory_order_acquire),
				   w->index, &e->seen[w->index]);
	leaves_prime(w, w->policy);
	w->now_ms = timer_now_ms();
	timer_wheel_init(w->timers, w->now_ms);
	dns_init(&w->dns, &w->ring, cfg->dns_servers, cfg->dns_timeout_ms);
	w->audit = audit_ring_get(e->audit, w->index);
	uppool_init(&w->uppool, &w->ring, e->term);
	for (struct worker_listener *l = w->listeners; l != NULL; l = l->next)
		accept_arm(w, l);
	wake_arm(w);
	stats_turn(w); /* the leaves primed above: the first turn may be long in coming */
	return 0;
}

static void cmd_complete(struct worker *w, struct worker_cmd *cmd);

/*
 * The commands posted after the worker's last turn, at its stop: adds and
 * route commands are the worker's, freed (a route add's token wiped first); a
 * removal's sender waits for it, and nothing is left to remove: completed.
 */
static void cmds_drop(struct worker *w)
{
	pthread_mutex_lock(&w->cmd_lock);
	struct worker_cmd *list = w->cmds;
	w->cmds = NULL;
	pthread_mutex_unlock(&w->cmd_lock);
	while (list != NULL) {
		struct worker_cmd *cmd = list;
		list = cmd->next;
		if (cmd->kind == WORKER_CMD_REMOVE || cmd->kind == WORKER_CMD_PING ||
		    cmd->kind == WORKER_CMD_DRAIN) {
			cmd_complete(w, cmd);
			continue;
		}
		explicit_bzero(cmd->token, sizeof(cmd->token));
		pool_free(cmd);
	}
}

static void worker_teardown(struct worker *w)
{
	bool leak = false;

	cmds_drop(w);

	if (pool_in_use(&w->conns) != 0 || pool_in_use(&w->heads) != 0 ||
	    pipepool_in_use(&w->pipes) != 0 || w->share.total != 0 || w->ring.bufs_out != 0 ||
	    w->dns.polls_pending != 0) {
		log_error("worker %u: leak at exit: conns=%u heads=%u pipes=%u buffers=%u "
			  "dns_polls=%u",
			  w->index, pool_in_use(&w->conns), pool_in_use(&w->heads),
			  pipepool_in_use(&w->pipes), w->ring.bufs_out, w->dns.polls_pending);
		leak = true;
		atomic_fetch_add(&w->e->leaks, 1);
	}
	log_info(
	    "worker %u: stopped: accepted=%llu requests=%llu denied=%llu splice=%llu "
	    "copy=%llu overload=%llu over_share=%llu upstreams_reused=%llu cqes=%llu enters=%llu "
	    "deferred=%llu shared_turns=%llu",
	    w->index, (unsigned long long)w->stats.accepted, (unsigned long long)w->stats.requests,
	    (unsigned long long)w->stats.denied, (unsigned long long)w->stats.splice_relays,
	    (unsigned long long)w->stats.copy_relays, (unsigned long long)w->stats.refused_overload,
	    (unsigned long long)w->stats.refused_share, (unsigned long long)w->uppool.reused,
	    (unsigned long long)w->stats.cqes, (unsigned long long)w->stats.enters,
	    (unsigned long long)w->sched.deferred, (unsigned long long)w->sched.shared_turns);
	if (w->policy != NULL)
		snapshot_leave(w->policy, w->index);
	w->policy = NULL;
	if (leak)
		return; /* keep the evidence; the process exits non-zero */
	pipepool_destroy(&w->pipes);
	share_destroy(&w->share);
	sched_destroy(&w->sched);
	pool_destroy(&w->conns);
	pool_destroy(&w->heads);
	ring_destroy(&w->ring);
	AN_FREE(&w->timers);
	AN_FREE(&w->resp_rewrite);
	AN_FREE(&w->buckets);
	AN_FREE(&w->sandbox_counts);
	AN_FREE(&w->watch);
	ratelimit_table_free(&w->rule_buckets);
	ingress_routes_free(&w->routes);
	if (w->term != NULL)
		w->e->term->worker_free(w->term);
	w->term = NULL;
}

/* Cancels <l>'s multishot accept, if armed; its last completion disarms it. */
static void accept_cancel(struct worker *w, struct worker_listener *l)
{
	if (!l->armed)
		return;
	struct io_uring_sqe *sqe = ring_sqe(&w->ring);
	io_uring_prep_cancel64(sqe, ud_encode(l, WORKER_OP_ACCEPT), 0);
	io_uring_sqe_set_data64(sqe, 0);
}

#define WORKER_ALL_SANDBOXES UINT32_MAX

/* Aborts every live conn of <sandbox> (or all, WORKER_ALL_SANDBOXES). */
static void conns_abort(struct worker *w, uint32_t sandbox)
{
	struct conn *c = w->live;

	while (c != NULL) {
		struct conn *next = c->live_next;
		if (sandbox == WORKER_ALL_SANDBOXES || c->sandbox == sandbox)
			conn_abort(c); /* may free c */
		c = next;
	}
}

static void worker_begin_stop(struct worker *w)
{
	w->stopping = true;
	if (w->drain_pending != NULL) {
		cmd_complete(w, w->drain_pending); /* the stop ends it */
		w->drain_pending = NULL;
	}
	for (struct worker_listener *l = w->listeners; l != NULL; l = l->next)
		accept_cancel(w, l);
	conns_abort(w, WORKER_ALL_SANDBOXES);
	uppool_drain(&w->uppool); /* after the conns: an aborted one parks nothing */
	dns_shutdown(&w->dns);
}

/* ---- run-time sandbox commands ------------------------------------------ */

int worker_listener_add(struct worker *w, int fd, uint32_t sandbox, bool tcp)
{
	struct worker_listener *l = pool_calloc(1, sizeof(*l));

	if (l == NULL)
		return -ENOMEM;
	*l = (struct worker_listener){ .w = w, .fd = fd, .sandbox = sandbox, .tcp = tcp };
	l->next = w->listeners;
	if (w->listeners != NULL)
		w->listeners->prev = l;
	w->listeners = l;
	w->listener_count++;
	return 0;
}

int worker_ingress_listener_add(struct worker *w, int fd, bool internal)
{
	int ret = worker_listener_add(w, fd, WORKER_NO_SANDBOX, false);

	AN_ASSERT(fd >= 0);
	if (ret == 0 && internal)
		w->listeners->internal = true;
	else if (ret == 0)
		w->listeners->ingress = true;
	return ret;
}

int worker_route_post(struct worker *w, enum worker_cmd_kind kind, const char *id, uint32_t sandbox,
		      const char *token)
{
	size_t len = strlen(id);

	AN_ASSERT(kind == WORKER_CMD_ROUTE_ADD || kind == WORKER_CMD_ROUTE_DEL);
	AN_ASSERT(len > 0 && len < CONFIG_SANDBOX_ID_BYTES_MAX);
	AN_ASSERT((kind == WORKER_CMD_ROUTE_ADD) == (token != NULL));
	struct worker_cmd *cmd = pool_calloc(1, sizeof(*cmd));
	if (cmd == NULL)
		return -ENOMEM;
	cmd->kind = kind;
	cmd->sandbox = sandbox;
	memcpy(cmd->id, id, len + 1);
	if (token != NULL)
		memcpy(cmd->token, token, sizeof(cmd->token));
	worker_cmd_post(w, cmd);
	return 0;
}

static void listener_unlink(struct worker *w, struct worker_listener *l)
{
	AN_ASSERT(!l->armed);
	AN_ASSERT(w->listener_count > 0);
	if (l->prev != NULL)
		l->prev->next = l->next;
	else
		w->listeners = l->next;
	if (l->next != NULL)
		l->next->prev = l->prev;
	if (l->paused)
		w->listeners_paused--;
	w->listener_count--;
	if (l->tcp || l->ingress)
		close(l->fd);
	pool_free(l);
}

void worker_listeners_free(struct worker *w)
{
	while (w->listeners != NULL) {
		w->listeners->armed = false;
		listener_unlink(w, w->listeners);
	}
}

void worker_cmd_post(struct worker *w, struct worker_cmd *cmd)
{
	uint64_t one = 1;

	pthread_mutex_lock(&w->cmd_lock);
	cmd->done = false;
	cmd->next = w->cmds;
	w->cmds = cmd;
	pthread_mutex_unlock(&w->cmd_lock);
	ssize_t ret = write(w->wake_fd, &one, sizeof(one));
	AN_ASSERT(ret == (ssize_t)sizeof(one));
}

int worker_cmd_wait(struct worker *w, struct worker_cmd *cmd, uint32_t timeout_ms)
{
	struct timespec until;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000u;
	until.tv_nsec += (long)(timeout_ms % 1000u) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&w->cmd_lock);
	while (!cmd->done && ret == 0)
		ret = pthread_cond_timedwait(&w->cmd_done, &w->cmd_lock, &until);
	bool done = cmd->done;
	pthread_mutex_unlock(&w->cmd_lock);
	return done ? 0 : -ETIMEDOUT;
}

static void cmd_complete(struct worker *w, struct worker_cmd *cmd)
{
	pthread_mutex_lock(&w->cmd_lock);
	cmd->done = true;
	pthread_cond_broadcast(&w->cmd_done);
	pthread_mutex_unlock(&w->cmd_lock);
}

static struct worker_listener *listener_of(struct worker *w, uint32_t sandbox)
{
	for (struct worker_listener *l = w->listeners; l != NULL; l = l->next) {
		if (l->sandbox == sandbox && !l->tcp && !l->ingress && !l->internal)
			return l;
	}
	return NULL;
}

/* Stops sandbox <cmd->sandbox>: no more accepts, every conn aborted. */
static void cmd_remove_begin(struct worker *w, struct worker_cmd *cmd)
{
	struct worker_listener *l = listener_of(w, cmd->sandbox);

	if (l != NULL) {
		l->removing = true;
		accept_cancel(w, l);
	}
	conns_abort(w, cmd->sandbox);
	cmd->next = w->removals;
	w->removals = cmd;
}

/* Applies a route command to the gateway's table of this worker; the token it carried is wiped. */
static void cmd_route(struct worker *w, struct worker_cmd *cmd)
{
	size_t len = strnlen(cmd->id, sizeof(cmd->id));

	AN_ASSERT(len > 0 && len < sizeof(cmd->id));
	if (cmd->kind == WORKER_CMD_ROUTE_DEL) {
		ingress_routes_del(&w->routes, cmd->id, len, cmd->sandbox);
		return;
	}
	AN_ASSERT(cmd->kind == WORKER_CMD_ROUTE_ADD);
	AN_ASSERT(strlen(cmd->token) == INGRESS_TOKEN_CHARS);
	if (ingress_routes_put(&w->routes, cmd->id, len, cmd->sandbox, cmd->token) != 0)
		log_error("worker %u: sandbox %s: no memory for its ingress route", w->index,
			  cmd->id);
	explicit_bzero(cmd->token, sizeof(cmd->token));
}

/* ---- drain (engine_drain) ----------------------------------------------- */

/* Whether <l>'s queue is the next daemon's once a drain begins. */
static bool listener_handed_on(const struct worker *w, const struct worker_listener *l)
{
	if (l->internal)
		return false; /* only this daemon's TLS front connects to it */
	if (l->tcp || l->ingress)
		return w->e->drain.all_handed_on;
	return w->e->drain.sandboxes_handed_on;
}

/*
 * A drain begins: the listeners handed on stop accepting (for good), and each
 * conn learns it (conn_drain: one with nothing under way gets a short quiet
 * time). The drain is done at the first turn end with no conn left, or at the
 * drain's end (drain_check).
 */
static void drain_begin(struct worker *w, struct worker_cmd *cmd)
{
	AN_ASSERT(w->drain_pending == NULL);
	w->draining = true;
	w->drain_pending = cmd;
	for (struct worker_listener *l = w->listeners; l != NULL; l = l->next) {
		if (!listener_handed_on(w, l))
			continue;
		l->handed_on = true;
		if (l->paused) {
			l->paused = false;
			w->listeners_paused--;
		}
		accept_cancel(w, l);
	}
	for (struct conn *c = w->live; c != NULL; c = c->live_next)
		conn_drain(c);
}

static void stats_publish(struct worker *w);

/* The end of a loop turn while draining: done once no conn is left, or the time is up. */
static void drain_check(struct worker *w)
{
	if (w->live != NULL && w->now_ms < w->e->drain.until_ms)
		return;
	stats_publish(w); /* engine_drain counts what is left open */
	cmd_complete(w, w->drain_pending);
	w->drain_pending = NULL;
}

static void worker_policy_refresh(struct worker *w);

/*
 * Applies the commands posted since the last wake-up. One that brings a
 * sandbox to this worker (a listener, a gateway route) was posted after the
 * engine marked the sandbox known in its published snapshot, so the worker
 * adopts that snapshot before any conn can meet the sandbox: a conn never
 * finds its sandbox unknown to w->policy for want of a refresh.
 */
static void run_cmds(struct worker *w)
{
	bool sandbox_added = false;

	pthread_mutex_lock(&w->cmd_lock);
	struct worker_cmd *stack = w->cmds;
	w->cmds = NULL;
	pthread_mutex_unlock(&w->cmd_lock);
	/* Posted newest first: run them oldest first, or a sandbox's removal could
	 * run before its own add and then wait for a listener it never cancelled. */
	struct worker_cmd *list = NULL;
	while (stack != NULL) {
		struct worker_cmd *next = stack->next;
		stack->next = list;
		list = stack;
		stack = next;
	}
	while (list != NULL) {
		struct worker_cmd *cmd = list;
		list = cmd->next;
		if (cmd->kind == WORKER_CMD_REMOVE) {
			cmd_remove_begin(w, cmd);
			continue;
		}
		if (cmd->kind == WORKER_CMD_PING) {
			cmd_complete(w, cmd); /* the sender's: it waits on it */
			continue;
		}
		if (cmd->kind == WORKER_CMD_DRAIN) {
			drain_begin(w, cmd);
			continue;
		}
		if (cmd->kind == WORKER_CMD_ROUTE_ADD || cmd->kind == WORKER_CMD_ROUTE_DEL) {
			sandbox_added |= cmd->kind == WORKER_CMD_ROUTE_ADD;
			cmd_route(w, cmd);
			pool_free(cmd);
			continue;
		}
		const struct engine_sandbox *sb = w->e->sandboxes[cmd->sandbox];
		if (worker_listener_add(w, sb->listen_fd, cmd->sandbox, false) == 0)
			accept_arm(w, w->listeners);
		else
			log_error("worker %u: sandbox %s: no memory for its listener", w->index,
				  sb->id);
		sandbox_added = true;
		pool_free(cmd); /* adds are fire-and-forget: the worker owns them */
	}
	if (sandbox_added)
		worker_policy_refresh(w);
}

/* Completes removals whose listener is disarmed and whose conns are all gone. */
static void run_removals(struct worker *w)
{
	struct worker_cmd **pp = &w->removals;

	while (*pp != NULL) {
		struct worker_cmd *cmd = *pp;
		struct worker_listener *l = listener_of(w, cmd->sandbox);
		if ((l != NULL && l->armed) ||
		    atomic_load_explicit(&w->e->sandboxes[cmd->sandbox]->conns,
					 memory_order_relaxed) != 0) {
			pp = &cmd->next;
			continue;
		}
		if (l != NULL)
			listener_unlink(w, l);
		*pp = cmd->next;
		cmd_complete(w, cmd);
	}
}

static void dispatch(struct worker *w, const struct sched_cqe *q)
{
	uint32_t op = ud_op(q->ud);
	void *obj = ud_object(q->ud);

	if (q->ud == 0)
		return; /* untracked: skipped-on-success closes and cancels */
	if (op < CONN_OP_COUNT) {
		conn_on_cqe(obj, op, q->res, q->flags);
	} else if (op == WORKER_OP_ACCEPT) {
		struct worker_listener *l = obj;
		conn_on_accept(l, q->res, q->flags);
		if (l->armed || w->stopping || l->paused || l->removing || l->handed_on)
			return;
		if (q->res < 0 && q->res != -ECANCELED) {
			l->paused = true;
			l->retry_at_ms = w->now_ms + WORKER_ACCEPT_RETRY_MS;
			w->listeners_paused++;
		} else {
			accept_arm(w, l);
		}
	} else if (op == UPPOOL_OP) {
		uppool_on_cqe(&w->uppool, obj, q->res);
	} else if (op == DNS_OP_POLL) {
		dns_on_cqe(&w->dns, obj, q->res);
	} else if (op == WORKER_OP_WAKE) {
		if (atomic_load(&w->e->stop)) {
			if (!w->stopping)
				worker_begin_stop(w);
		} else {
			wake_arm(w);
			run_cmds(w);
		}
	} else {
		AN_ASSERT(!"unknown user_data op");
	}
}

static uint32_t reap(struct worker *w, struct sched_cqe *batch)
{
	struct io_uring_cqe *cqe;
	unsigned head;
	uint32_t n = 0;

	io_uring_for_each_cqe(&w->ring.uring, head, cqe)
	{
		batch[n].ud = cqe->user_data;
		batch[n].res = cqe->res;
		batch[n].flags = cqe->flags;
		if (++n == LIMITS_CQES_PER_TURN)
			break;
	}
	io_uring_cq_advance(&w->ring.uring, n);
	return n;
}

/*
 * The share key (core/share.h) completion <q> counts on, or SCHED_KEY_NONE
 * for the worker's own. Its conn or listener is alive: neither is freed while
 * one of its completions is outstanding, and deferred ones are.
 */
static uint32_t cqe_key(const struct sched_cqe *q)
{
	uint32_t op = ud_op(q->ud);

	if (q->ud == 0)
		return SCHED_KEY_NONE;
	if (op < CONN_OP_COUNT) {
		const struct conn *c = ud_object(q->ud);
		AN_DASSERT(c->share_key < SHARE_KEYS);
		return c->share_key;
	}
	if (op == WORKER_OP_ACCEPT) {
		const struct worker_listener *l = ud_object(q->ud);
		return l->sandbox == WORKER_NO_SANDBOX ? SHARE_KEY_PUBLIC : l->sandbox;
	}
	return SCHED_KEY_NONE;
}

/* Runs <q> now if its sandbox has some of this turn left, else defers it to the next. */
static void run_or_defer(struct worker *w, struct sched_cqe *q)
{
	q->key = cqe_key(q);
	if (sched_admit(&w->sched, q->key)) {
		dispatch(w, q);
		return;
	}
	AN_ASSERT(q->key != SCHED_KEY_NONE);
	if (ud_op(q->ud) < CONN_OP_COUNT)
		conn_cqe_defer(ud_object(q->ud), ud_op(q->ud), q->res, &q->flags);
	sched_defer(&w->sched, q);
}

/*
 * Runs the completions that waited from earlier turns, each sandbox's oldest
 * first, a quantum of each (core/sched.c); the rest wait for the next turn.
 */
static void run_deferred(struct worker *w)
{
	struct sched_cqe q;

	while (sched_next_waiting(&w->sched, &q))
		dispatch(w, &q);
}

/* Reaps and runs (or defers) what the CQ holds, a batch at a time, while there is room to defer. */
static uint32_t reap_all(struct worker *w, struct sched_cqe *batch)
{
	uint32_t n = LIMITS_CQES_PER_TURN;
	uint32_t total = 0;

	while (n == LIMITS_CQES_PER_TURN && sched_room(&w->sched, LIMITS_CQES_PER_TURN)) {
		n = reap(w, batch);
		w->stats.cqes += n;
		total += n;
		for (uint32_t i = 0; i < n; i++)
			run_or_defer(w, &batch[i]);
	}
	return total;
}

/*
 * This turn's completions. With DEFER_TASKRUN the kernel posts them from its
 * task-work list, one list for every sandbox in arrival order, and an enter
 * runs only a bounded number of its items (a score or so) before returning:
 * a quiet sandbox's completion would wait there behind a flood's, where no
 * turn-taking reaches it. So when an enter brought many, the turn asks for
 * more (GETEVENTS, no wait, with what the turn queued submitted) while the
 * list yields some and there is room to defer, at most
 * LIMITS_CQ_PULLS_PER_TURN times; the excess waits in the
 * sandboxes' queues, where each gets its turn. A light turn costs no extra
 * enter.
 */
static void run_reaped(struct worker *w, struct sched_cqe *batch)
{
	uint32_t got = reap_all(w, batch);

	for (uint32_t pulls = 0; pulls < LIMITS_CQ_PULLS_PER_TURN; pulls++) {
		if (got < LIMITS_CQ_PULL_MIN || !sched_room(&w->sched, LIMITS_CQES_PER_TURN))
			return;
		/* What the turn queued goes in with the pull: a stop (a receive's cancel)
		 * lands before that receive posts more behind it. */
		int ret = io_uring_submit_and_get_events(&w->ring.uring);
		if (ret >= 0)
			w->ring.sq_unsent = 0;
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			return;
		got = reap_all(w, batch);
	}
}

static void run_timers(struct worker *w)
{
	struct timer_entry *expired[64];
	uint32_t n;

	do {
		n = timer_wheel_expire(w->timers, w->now_ms, expired, AN_ARRAY_LEN(expired));
		for (uint32_t i = 0; i < n; i++) {
			struct conn *c =
			    (struct conn *)((char *)expired[i] - offsetof(struct conn, timer));
			conn_on_timer(c);
		}
	} while (n == AN_ARRAY_LEN(expired));
}

static void run_nobufs(struct worker *w)
{
	/* Re-arm only once half the buffers are back (liburing's proxy advice). */
	if (w->nobufs == NULL || w->ring.bufs_out > w->ring.buf_count / 2)
		return;
	struct conn *list = w->nobufs;
	w->nobufs = NULL;
	while (list != NULL) {
		struct conn *c = list;
		list = c->nobufs_next;
		c->nobufs_next = NULL;
		conn_on_buffers(c);
	}
}

static void run_paused_accepts(struct worker *w)
{
	if (w->listeners_paused == 0 || w->stopping)
		return;
	for (struct worker_listener *l = w->listeners; l != NULL; l = l->next) {
		if (!l->paused || w->now_ms < l->retry_at_ms)
			continue;
		l->paused = false;
		w->listeners_paused--;
		accept_arm(w, l);
	}
}

/* ---- counters for other threads ----------------------------------------- */

static inline void publish_one(_Atomic uint64_t *at, uint64_t value)
{
	atomic_store_explicit(at, value, memory_order_relaxed);
}

void worker_sandbox_sum_add(const struct worker *w, uint32_t sandbox, uint32_t generation,
			    struct worker_sandbox_sum *sum)
{
	AN_ASSERT(sandbox < LIMITS_SANDBOXES_MAX);
	if (w->sandbox_counts == NULL)
		return;
	const struct worker_sandbox_counts *s = &w->sandbox_counts[sandbox];
	if (atomic_load_explicit(&s->generation, memory_order_acquire) != generation)
		return;
	sum->requests += atomic_load_explicit(&s->requests, memory_order_relaxed);
	sum->refusals += atomic_load_explicit(&s->refusals, memory_order_relaxed);
	sum->bytes_up += atomic_load_explicit(&s->bytes_up, memory_order_relaxed);
	sum->bytes_down += atomic_load_explicit(&s->bytes_down, memory_order_relaxed);
}

/* Copies <w>'s counters to w->published: a dozen plain stores, no lock. Worker thread only. */
static void stats_publish(struct worker *w)
{
	const struct term_ops *t = w->e->term;
	struct worker_published *p = &w->published;
	struct term_counters leaf = { 0 };

	if (t != NULL && w->term != NULL && t->counters != NULL)
		t->counters(w->term, &leaf);
	AN_ASSERT(leaf.leaf_mints <= leaf.leaf_misses);
	AN_ASSERT(pool_in_use(&w->conns) <= w->conns.capacity);
	publish_one(&p->conns_open, pool_in_use(&w->conns));
	publish_one(&p->accepted, w->stats.accepted);
	publish_one(&p->refused_overload, w->stats.refused_overload);
	publish_one(&p->requests, w->stats.requests);
	publish_one(&p->denied, w->stats.denied);
	publish_one(&p->splice_relays, w->stats.splice_relays);
	publish_one(&p->copy_relays, w->stats.copy_relays);
	publish_one(&p->upstreams_reused, w->uppool.reused);
	publish_one(&p->leaf_hits, leaf.leaf_hits);
	publish_one(&p->leaf_misses, leaf.leaf_misses);
	publish_one(&p->leaf_mints, leaf.leaf_mints);
	publish_one(&p->misdirected, w->stats.misdirected);
}

/* The end of a loop turn: publish when the interval is up, else note what is pending. */
static void stats_turn(struct worker *w)
{
	if (w->now_ms < w->stats_due_ms) {
		AN_DASSERT(w->stats_due_ms - w->now_ms <= WORKER_STATS_PUBLISH_MS);
		w->stats_unpublished = true;
		return;
	}
	stats_publish(w);
	w->stats_due_ms = w->now_ms + WORKER_STATS_PUBLISH_MS;
	w->stats_unpublished = false;
}

static inline uint64_t published_one(const _Atomic uint64_t *at)
{
	return atomic_load_explicit(at, memory_order_relaxed);
}

void worker_counters_add(const struct worker *w, struct worker_counters *sum)
{
	AN_ASSERT(w != NULL && sum != NULL);
	const struct worker_published *p = &w->published;
	uint64_t accepted = published_one(&p->accepted);
	sum->conns_open += published_one(&p->conns_open);
	sum->accepted += accepted;
	sum->refused_overload += published_one(&p->refused_overload);
	sum->requests += published_one(&p->requests);
	sum->denied += published_one(&p->denied);
	sum->splice_relays += published_one(&p->splice_relays);
	sum->copy_relays += published_one(&p->copy_relays);
	sum->upstreams_reused += published_one(&p->upstreams_reused);
	sum->leaf_hits += published_one(&p->leaf_hits);
	sum->leaf_misses += published_one(&p->leaf_misses);
	sum->leaf_mints += published_one(&p->leaf_mints);
	sum->misdirected += published_one(&p->misdirected);
	AN_ASSERT(sum->accepted >= accepted);
}

static int32_t wait_ms(struct worker *w)
{
	if (w->sched.count > 0)
		return 0; /* deferred completions: take the next turn at once */
	int32_t t = timer_wheel_wait_ms(w->timers, w->now_ms);
	int32_t d = dns_wait_ms(&w->dns);

	if (d >= 0 && (t < 0 || d < t))
		t = d;
	if (w->nobufs != NULL && (t < 0 || t > 10))
		t = 10;
	if (w->listeners_paused > 0 && (t < 0 || t > (int32_t)WORKER_ACCEPT_RETRY_MS))
		t = (int32_t)WORKER_ACCEPT_RETRY_MS;
	if (w->uppool.parked > 0 && (t < 0 || t > 1000))
		t = 1000; /* parked upstreams expire on the loop's clock */
	if (w->drain_pending != NULL) {
		uint64_t until = w->e->drain.until_ms;
		uint64_t left = until > w->now_ms ? until - w->now_ms : 0;
		if (t < 0 || (uint64_t)t > left)
			t = (int32_t)(left < INT32_MAX ? left : INT32_MAX);
	}
	if (w->stats_unpublished) {
		/* Unpublished figures: wake when they are due, not at the next event. */
		AN_ASSERT(w->stats_due_ms > w->now_ms);
		AN_ASSERT(w->stats_due_ms - w->now_ms <= WORKER_STATS_PUBLISH_MS);
		int32_t due = (int32_t)(w->stats_due_ms - w->now_ms);
		if (t < 0 || t > due)
			t = due;
	}
	return t;
}

static bool worker_drained(const struct worker *w)
{
	if (!w->stopping || w->live != NULL || w->dns.polls_pending != 0 ||
	    !uppool_quiet(&w->uppool) || w->sched.count != 0)
		return false;
	/* Every cancelled accept must have posted its last completion too. */
	for (const struct worker_listener *l = w->listeners; l != NULL; l = l->next) {
		if (l->armed)
			return false;
	}
	return true;
}

/*
 * Mints the leaves of the hosts <s>'s fake and inject rules name exactly, so
 * their first handshake finds one (at most the cache's worth; a reload re-runs
 * it, keeping the leaves already there). About 30 us a host, on this worker.
 */
static void leaves_prime(struct worker *w, const struct snapshot *s)
{
	const struct engine *e = w->e;
	uint64_t cursor = 0;
	size_t len = 0;
	uint32_t n = 0;

	if (e->term == NULL || w->term == NULL || !e->term_has_ca)
		return;
	for (const char *h; n < WORKER_PRIME_MAX &&
			    (h = e->ops->terminated_host(s->policy, &cursor, &len)) != NULL;
	     n++) {
		int ret = e->term->prime(w->term, h, len);
		if (ret != 0)
			log_warn("worker %u: leaf for %.*s: %s", w->index, (int)len, h,
				 strerror(-ret));
	}
	if (n > 0)
		log_info("worker %u: leaves ready for %u hosts of policy generation %llu", w->index,
			 n, (unsigned long long)s->generation);
}

/*
 * Moves <w> to the engine's published snapshot if it is newer than w->policy:
 * at every loop turn, and when a command brings a sandbox (run_cmds).
 */
static void worker_policy_refresh(struct worker *w)
{
	struct snapshot *now = atomic_load_explicit(&w->e->current, memory_order_acquire);

	AN_DASSERT(now != NULL && w->policy != NULL);
	if (now == w->policy)
		return;
	w->policy = snapshot_adopt(w->policy, now, w->index, &w->e->seen[w->index]);
	leaves_prime(w, now);
}

static void worker_loop(struct worker *w)
{
	struct sched_cqe batch[LIMITS_CQES_PER_TURN];

	while (!worker_drained(w)) {
		int32_t t = wait_ms(w);
		struct __kernel_timespec ts = { .tv_sec = t / 1000,
						.tv_nsec = (t % 1000) * 1000000L };
		struct io_uring_cqe *cqe = NULL;
		int ret = io_uring_submit_and_wait_timeout(&w->ring.uring, &cqe, 1,
							   t >= 0 ? &ts : NULL, NULL);
		w->ring.sq_unsent = 0;
		w->stats.enters++;
		if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			log_error("worker %u: io_uring_enter: %s", w->index, strerror(-ret));
		w->now_ms = timer_now_ms();
		worker_policy_refresh(w);
		/* Timers first: this also moves the wheel's clock to now, so timers
		 * the handlers below arm count from now, not from the last wake-up. */
		run_timers(w);
		sched_turn(&w->sched, w->now_ms);
		/* What arrived first, then what waited: a quiet sandbox's answer goes
		 * into the ring ahead of a busy one's quantum (core/sched.c). */
		run_reaped(w, batch);
		run_deferred(w);
		watch_quarantine_cut(w);
		watch_uploads_sweep(w);
		dns_tick(&w->dns);
		run_nobufs(w);
		run_paused_accepts(w);
		if (w->uppool.parked > 0)
			uppool_expire(&w->uppool, w->now_ms);
		if (w->removals != NULL)
			run_removals(w);
		if (w->drain_pending != NULL)
			drain_check(w);
		stats_turn(w);
	}
	/* Submit the last closes so the kernel releases every descriptor. */
	io_uring_submit(&w->ring.uring);
}

void *worker_main(void *arg)
{
	struct worker *w = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pin_to_core(w);
	w->start_error = worker_setup(w);
	atomic_fetch_add(&w->e->workers_ready, 1);
	if (w->start_error != 0)
		return NULL;
	worker_loop(w);
	worker_teardown(w);
	return NULL;
}
