/*
 * A worker: one thread, one ring, and everything its connections use (pools,
 * buffers, pipes, timers, resolver, audit ring). Workers share nothing; each
 * sandbox's listener and connections live on exactly one worker. Its types
 * are in core/worker-t.h; this header is what the engine and the control
 * path call.
 */
#ifndef AN_CORE_WORKER_H
#define AN_CORE_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/worker-t.h"

/* The thread body: set-up, loop, tear-down. <arg> is the struct worker. */
void *worker_main(void *arg);

/*
 * Queues <cmd> for worker <w> and wakes it; the worker runs commands in the
 * order they were posted. Any thread. For WORKER_CMD_REMOVE the caller then
 * waits with worker_cmd_wait.
 */
void worker_cmd_post(struct worker *w, struct worker_cmd *cmd);
/* Waits until <w> has completed <cmd>, at most <timeout_ms>. 0 or -ETIMEDOUT. */
int worker_cmd_wait(struct worker *w, struct worker_cmd *cmd, uint32_t timeout_ms);
/* Adds a listener for sandbox <sandbox> on <fd> before the worker starts. 0 or -ENOMEM. */
int worker_listener_add(struct worker *w, int fd, uint32_t sandbox, bool tcp);
/*
 * Adds the public listener <fd> (the worker owns it), or with <internal> the
 * gateway's internal listener (the engine owns it), before the worker
 * starts. 0 or -ENOMEM.
 */
int worker_ingress_listener_add(struct worker *w, int fd, bool internal);
/*
 * Posts route command <kind> (WORKER_CMD_ROUTE_ADD or _DEL) for sandbox <id>
 * in slot <sandbox>, with its ingress <token> for an ADD (NULL for a DEL), to
 * worker <w>, which frees it. Any thread; 0 or -ENOMEM.
 */
int worker_route_post(struct worker *w, enum worker_cmd_kind kind, const char *id, uint32_t sandbox,
		      const char *token);
/*
 * Adds the counters worker <w> last published to *<sum>, field by field
 * (relaxed loads). Each figure is at most WORKER_STATS_PUBLISH_MS (plus one
 * loop turn) behind the worker's own, and never goes back between two
 * calls (conns_open aside: it is a level); the figures of one call may come
 * from two consecutive publications. Any thread, while the engine runs
 * (from engine_start's return until engine_stop frees the workers).
 */
void worker_counters_add(const struct worker *w, struct worker_counters *sum);

/*
 * Adds <w>'s counts of slot <sandbox> (written by its connections: core/record.c)
 * to <sum>, when they belong to the slot's
 * <generation> (relaxed loads: a view, not a snapshot). Any thread.
 */
void worker_sandbox_sum_add(const struct worker *w, uint32_t sandbox, uint32_t generation,
			    struct worker_sandbox_sum *sum);
/* Frees the listeners (closing owned TCP ones). The worker thread has ended. */
void worker_listeners_free(struct worker *w);

#endif /* AN_CORE_WORKER_H */
