/*
 * The engine: what every worker shares (read-only after start-up) and the
 * calls the daemon makes to start and stop it.
 *
 * The daemon loads the configuration and policy, then engine_start creates
 * the sandbox listeners, one worker thread per core (each pinned, each with
 * its own ring) and waits until all are serving. engine_stop asks every
 * worker to close its connections, joins them and reports leaks.
 */
#ifndef AN_CORE_ENGINE_H
#define AN_CORE_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/config.h"
#include "core/ring.h"
#include "core/verdict.h"

struct audit;
struct worker;

struct engine_sandbox {
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	uint32_t profile;
	uint32_t worker; /* the worker that owns its listener and connections */
	int listen_fd;   /* owned; the sandbox's egress socket, -1 when none */
	char path[108];  /* the socket's path (sun_path) */
};

struct engine {
	const struct config *cfg;      /* borrowed */
	const void *policy;            /* borrowed snapshot, see core/verdict.h */
	const struct verdict_ops *ops; /* borrowed */
	struct audit *audit;           /* borrowed */
	struct ring_features features;
	uint32_t worker_count;
	struct worker *workers; /* owned array */
	uint32_t sandbox_count;
	struct engine_sandbox *sandboxes; /* owned array */
	int tcp_sandbox;                  /* index served on the TCP listener, -1: none */
	atomic_uint workers_ready;
	atomic_bool stop;
	atomic_uint leaks; /* workers that found a leak at exit */
};

/*
 * Creates listeners for every sandbox in <cfg> and starts the workers.
 * <e> must be zeroed with cfg, policy, ops and audit set. Returns 0 once every
 * worker is serving, or -errno with the cause logged (a socket path in use by
 * a live daemon is -EADDRINUSE). On failure nothing is left running.
 */
int engine_start(struct engine *e);

/*
 * Stops accepting, aborts every connection, joins the workers and closes the
 * listeners (unlinking their sockets). Returns 0, or -EFAULT when any worker
 * ended with a connection, buffer, pipe or operation still outstanding.
 */
int engine_stop(struct engine *e);

#endif /* AN_CORE_ENGINE_H */
