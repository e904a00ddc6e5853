/*
 * A worker's types (HAProxy's -t.h split): struct worker, its listeners,
 * commands and counters, and its buffer sizes. A connection (core/conn.c and
 * its mode files) includes this header, never core/worker.h: it reads the
 * worker's pools, ring and limits through c->w, and never calls the worker
 * back (make lint checks both). The functions are in core/worker.h.
 */
#ifndef AN_CORE_WORKER_T_H
#define AN_CORE_WORKER_T_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <sys/socket.h>

#include "core/alert.h"
#include "core/config.h"
#include "core/counter.h"
#include "core/dns.h"
#include "core/ingress.h"
#include "core/pipepool.h"
#include "core/pool.h"
#include "core/ratelimit.h"
#include "core/reason.h"
#include "core/ring.h"
#include "core/sched.h"
#include "core/share.h"
#include "core/timer.h"
#include "core/ud.h"
#include "core/uppool.h"

struct conn;
struct engine;
struct audit_ring;
struct snapshot;

#define WORKER_OP_ACCEPT UD_OP_WORKER_ACCEPT /* a listener's multishot accept */
#define WORKER_OP_WAKE   UD_OP_WORKER_WAKE   /* the stop eventfd's read */
/* Leaves minted ahead per snapshot: the leaf cache's default capacity (tls/leafcache.h). */
#define WORKER_PRIME_MAX 1024u
/* A failing accept (descriptor table full, say) is retried this much later, not spun on. */
#define WORKER_ACCEPT_RETRY_MS 100u

struct worker_listener {
	struct worker *w;
	struct worker_listener *next; /* the worker's list */
	struct worker_listener *prev;
	int fd;           /* borrowed from the sandbox (or owned: TCP, see tcp) */
	uint32_t sandbox; /* index in engine->sandboxes */
	bool tcp;         /* TCP listener: owned by this worker (SO_REUSEPORT) */
	bool ingress;     /* the public listener (owned, SO_REUSEPORT): no sandbox */
	bool internal;    /* the gateway's internal listener (borrowed): PROXY v2 first */
	bool armed;       /* multishot accept in flight */
	bool paused;      /* accept failed: re-armed after WORKER_ACCEPT_RETRY_MS */
	bool removing;    /* its sandbox is being removed: freed once disarmed */
	bool handed_on;   /* draining: its queue is the next daemon's, never accepted from again */
	uint64_t retry_at_ms;
	/* The ingress listener accepts one at a time, into here: the gateway
	 * needs each client's address, which a multishot accept does not keep. */
	struct sockaddr_storage peer;
	socklen_t peer_len;
} __attribute__((aligned(16)));

/* worker_listener.sandbox, and conn.sandbox, of the public listener's conns before routing. */
#define WORKER_NO_SANDBOX UINT32_MAX

enum worker_cmd_kind {
	WORKER_CMD_ADD = 0,   /* start accepting on sandbox <sandbox>'s socket */
	WORKER_CMD_REMOVE,    /* stop accepting, abort its conns; done when all are gone */
	WORKER_CMD_ROUTE_ADD, /* the gateway routes <id> to <sandbox> (sent to every worker) */
	WORKER_CMD_ROUTE_DEL, /* ... no longer */
	WORKER_CMD_PING,  /* completed at once: the worker's loop turns (the watchdog's proof) */
	WORKER_CMD_DRAIN, /* engine_drain: done once no conn is left or the drain's time is up */
};

/* A request from the control path; the sender owns it and waits on <done> for removals. */
struct worker_cmd {
	struct worker_cmd *next;
	enum worker_cmd_kind kind;
	uint32_t sandbox;
	char id[CONFIG_SANDBOX_ID_BYTES_MAX]; /* the route commands' sandbox id */
	char
	    token[CONFIG_INGRESS_TOKEN_BYTES]; /* a route add's ingress token, wiped once applied */
	bool done; /* set under the worker's cmd_lock, signalled on cmd_done */
};

struct worker_stats {
	uint64_t accepted;
	uint64_t refused_overload; /* accepts answered 503 because the conn pool was empty */
	uint64_t refused_share;    /* accepts answered 429: the sandbox held its share */
	uint64_t requests;
	uint64_t denied;
	uint64_t splice_relays;
	uint64_t copy_relays;
	uint64_t cqes;
	uint64_t enters;
	uint64_t misdirected; /* requests refused placeholder_misdirected */
};

/*
 * One sandbox's traffic on one worker, for `sandbox stats` (core/control.c):
 * the decisions this worker made for it and the bytes its closed connections
 * delivered, since its slot last opened (<generation>, the slot's
 * engine_sandbox.generation: an entry of an older one counts as zero). The
 * worker alone writes them, each a relaxed load and store (no atomic
 * read-modify-write on the data path); the control thread sums the workers'.
 */
struct worker_sandbox_counts {
	_Atomic uint32_t generation;
	_Atomic uint64_t requests; /* decisions, allowed or refused */
	_Atomic uint64_t refusals;
	_Atomic uint64_t bytes_up;
	_Atomic uint64_t bytes_down;
};

/*
 * What a worker decided, for the metrics (core/metrics.c): requests allowed
 * by tier, refused by reason (every decision record's), and how long the
 * policy took to decide, an upstream's TCP connect took, and the TLS
 * handshakes the daemon completed: with the agent (the fake and inject
 * tiers, from the CONNECT's 200) and with the inject tier's upstream (from
 * its ClientHello; a pooled session has none). Single writer, as
 * worker_sandbox_counts.
 */
struct worker_decision_counts {
	_Atomic uint64_t allowed[TIER__COUNT];
	_Atomic uint64_t refused[REASON__COUNT];
	struct latency_histogram decide;
	struct latency_histogram connect;
	struct latency_histogram tls_agent;
	struct latency_histogram tls_upstream;
};

/* One sandbox's detectors on a worker (core/watch.c), for the slot's <generation>. */
struct worker_watch_slot {
	uint32_t generation;
	struct alert_state state;
};

/* The alerts a worker raised, by detector, for the metrics. Single writer. */
struct worker_alert_counts {
	_Atomic uint64_t raised[ALERT__COUNT];
};

/* The sums of a sandbox's worker_sandbox_counts over the workers. */
struct worker_sandbox_sum {
	uint64_t requests;
	uint64_t refusals;
	uint64_t bytes_up;
	uint64_t bytes_down;
};

/*
 * How late the counters a worker publishes may be, at most: a worker copies
 * its counters out at the end of a loop turn once this long has passed since
 * its last copy, and one with unpublished figures waits no longer than that
 * for its next turn. A copy is a dozen stores; at most ten a second is free.
 */
#define WORKER_STATS_PUBLISH_MS 100u
/* The refusal of a conn over its sandbox's share, formatted once (core/deny.h). */
#define WORKER_SHARE_REPLY_BYTES 1024u
/* What the publication pads itself with on each side. */
#define WORKER_CACHE_LINE_BYTES 64u

/*
 * The figures the control socket's `stats` sums, as one worker published
 * them: sums since it started, except conns_open (conns in use now).
 * Checklist, adding one: here and in struct worker_published, stats_publish
 * and worker_counters_add in core/worker.c, the stats line in core/control.c
 * (appended: its keys never move), docs/control.md and STATS_KEYS in
 * tests/integ/sandbox.py.
 */
struct worker_counters {
	uint64_t conns_open; /* the conn pool's in-use count */
	uint64_t accepted;
	uint64_t refused_overload;
	uint64_t requests;
	uint64_t denied;
	uint64_t splice_relays;
	uint64_t copy_relays;
	uint64_t upstreams_reused; /* uppool.reused */
	uint64_t leaf_hits;        /* term_ops.counters; 0 without TLS */
	uint64_t leaf_misses;
	uint64_t leaf_mints;
	uint64_t misdirected;
};

/*
 * The same fields, written by the worker only (relaxed stores) and read by
 * any thread (relaxed loads, worker_counters_add): single writer, so no
 * read-modify-write is needed. Padded by a cache line on each side, so the
 * lines the fields occupy hold nothing else: the workers array is only as
 * aligned as malloc makes it (16 bytes), where an _Alignas(64) member would
 * be misaligned.
 */
struct worker_published {
	unsigned char pad_head[WORKER_CACHE_LINE_BYTES];
	_Atomic uint64_t conns_open;
	_Atomic uint64_t accepted;
	_Atomic uint64_t refused_overload;
	_Atomic uint64_t requests;
	_Atomic uint64_t denied;
	_Atomic uint64_t splice_relays;
	_Atomic uint64_t copy_relays;
	_Atomic uint64_t upstreams_reused;
	_Atomic uint64_t leaf_hits;
	_Atomic uint64_t leaf_misses;
	_Atomic uint64_t leaf_mints;
	_Atomic uint64_t misdirected;
	unsigned char pad_tail[WORKER_CACHE_LINE_BYTES];
};

struct worker {
	uint32_t index;
	struct engine *e;
	pthread_t thread;
	int wake_fd; /* eventfd written by engine_stop */
	uint64_t wake_value;
	struct ring ring;
	struct pool conns;  /* struct conn */
	struct pool heads;  /* head/response buffers of LIMITS_HEAD_BYTES_MAX + slack */
	struct share share; /* each sandbox's conns on this worker, and its share (core/share.h) */
	struct sched sched; /* each sandbox's completions per loop turn (core/sched.h) */
	char share_reply[WORKER_SHARE_REPLY_BYTES]; /* answered to a conn over its share */
	uint32_t share_reply_len;
	struct pipepool pipes;
	struct timer_wheel *timers; /* owned (large) */
	struct ratelimit *buckets;  /* owned; one per sandbox slot (LIMITS_SANDBOXES_MAX) */
	struct ratelimit_table rule_buckets; /* per (sandbox, rule) limits of this worker */
	struct snapshot *policy;             /* what new requests decide with (core/snapshot.h) */
	void *term; /* engine.term's state for this worker, NULL without TLS */
	struct dns dns;
	struct audit_ring *audit;
	uint32_t listener_count;
	uint32_t listeners_paused;
	struct worker_listener *listeners; /* owned list */
	struct ingress_routes routes;      /* the gateway's sandbox ids (core/ingress.h) */
	struct uppool uppool;              /* idle inject upstreams (core/uppool.h) */
	char *
	    resp_rewrite; /* owned, HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX: a response head being rewritten */
	pthread_mutex_t cmd_lock; /* guards cmds and every cmd's done */
	pthread_cond_t cmd_done;
	struct worker_cmd *cmds;     /* queued by the control path, taken on wake-up */
	struct worker_cmd *removals; /* removals waiting for their conns to close */
	/* The watchdog's ping (engine_workers_answer): the main thread's alone, posted
	 * again only once it completed (ping_posted false). */
	struct worker_cmd ping;
	bool ping_posted;
	/* engine_drain's command (the main thread's), and the worker's hold on it
	 * from its start until it completes it (drain_pending: NULL once done). */
	struct worker_cmd drain;
	struct worker_cmd *drain_pending;
	bool draining;            /* a drain began: read by the conns (core/conn.c, drain_answer) */
	struct conn *live;        /* every conn not yet freed */
	uint32_t quarantine_seen; /* the engine's quarantine_epoch this worker has cut for */
	uint64_t uploads_swept_ms; /* the last watch_uploads_sweep, on now_ms's clock */
	struct conn *nobufs;       /* conns waiting for buffers to re-arm a receive */
	uint64_t now_ms;           /* loop-turn clock */
	uint64_t next_conn_seq;
	bool stopping;
	int start_error; /* set before workers_ready is bumped */
	struct worker_stats stats;
	struct worker_sandbox_counts *sandbox_counts; /* owned, LIMITS_SANDBOXES_MAX */
	struct worker_decision_counts decisions;
	struct worker_watch_slot *watch; /* owned, LIMITS_SANDBOXES_MAX: zero pages until used */
	struct worker_alert_counts alerts;
	uint64_t stats_due_ms;  /* the earliest loop-turn clock of the next publication */
	bool stats_unpublished; /* a turn ran since the last publication */
	struct worker_published published;
};

/* Free head buffers kept resident: enough for a busy worker's requests in flight;
 * a burst beyond it (thousands of tunnels opening at once) gives its pages back. */
#define WORKER_HEADS_WARM 256u
/*
 * A pooled head buffer: the head limit plus one receive, so a receive always
 * fits, plus what rewriting a response head in place may add to it (a byte a
 * field and a Connection field: core/http1.h, HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX).
 */
#define WORKER_HEAD_REWRITE_BYTES (LIMITS_HEADERS_MAX + 32u)
#define WORKER_HEAD_BUFFER_BYTES \
	(LIMITS_HEAD_BYTES_MAX + LIMITS_BUFRING_BUFFER_BYTES + WORKER_HEAD_REWRITE_BYTES)

#endif /* AN_CORE_WORKER_T_H */
