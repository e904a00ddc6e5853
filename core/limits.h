/*
 * Every limit in one place (docs/style.md section 8), with its unit in the name and
 * the reason for its value. Configurable limits have their default here and
 * their bounds checked where the configuration is loaded.
 */
#ifndef AN_CORE_LIMITS_H
#define AN_CORE_LIMITS_H

#include <assert.h>

/* Request line: longer than any URI a real client sends; 414 beyond it. */
#define LIMITS_REQUEST_LINE_BYTES_MAX 8192u
/* Whole request head, request line included: 431 beyond it (nginx/HAProxy use 8-16k). */
#define LIMITS_HEAD_BYTES_MAX 16384u
/* Header fields in one head: 431 beyond it. */
#define LIMITS_HEADERS_MAX 100u
/* Response head from an upstream (absolute-form forwarding): 502 beyond it. */
#define LIMITS_RESPONSE_HEAD_BYTES_MAX 16384u
/* Host names (RFC 1035 presentation form, 253 plus a trailing dot and slack). */
#define LIMITS_HOST_BYTES_MAX 255u

/* Provided-buffer ring: buffers per worker and bytes each (a page multiple). */
#define LIMITS_BUFRING_ENTRIES      1024u
#define LIMITS_BUFRING_BUFFER_BYTES 16384u
/* Completions reaped per loop turn: bounds the work between two submits. */
#define LIMITS_CQES_PER_TURN 256u
/* SQ and CQ sizes; the CQ is larger so multishot bursts never overflow it. */
#define LIMITS_SQ_ENTRIES 4096u
#define LIMITS_CQ_ENTRIES 16384u
/*
 * Completions of one sandbox a worker handles in one loop turn (core/sched.c)
 * while another sandbox has work too; the rest wait for the next turn. A
 * quiet sandbox's answer waits at most for the turn under way, and a turn
 * lasts about this many handlers of each busy sandbox, with the sends the
 * next enter runs for them (a flood's request costs the worker some 45 us
 * here, most of it in that enter). Measured with bench scenario 10 (100 quiet
 * sandboxes beside a flood of 1,000 connections, their p99 with the flood
 * over without): 8 made it 1.9x, 2 made it 2.4x, 1 made it 0.85x; 1 costs the
 * flood a quarter of its rate (16,000 requests/s against 22,000: an enter per
 * handler), which is the price of the others' latency and is paid only while
 * they have work (LIMITS_SANDBOX_CQES_ALONE).
 */
#define LIMITS_SANDBOX_CQES_PER_TURN 1u
/*
 * The quantum while one sandbox alone has had work for
 * LIMITS_SCHED_SHARED_HOLD_MS: a turn then shares the enter's cost between 8
 * of its handlers (32 served a lone flood no faster), and a sandbox whose work
 * arrives after a silence waits for at most such a turn, some 200 us under a
 * flood, before the shared quantum takes over.
 */
#define LIMITS_SANDBOX_CQES_ALONE 8u
/*
 * How long the shared quantum holds after the last turn that served two
 * sandboxes: a quiet sandbox asking once a second keeps every turn short.
 */
#define LIMITS_SCHED_SHARED_HOLD_MS 1000u
/*
 * A turn whose enter brought at least LIMITS_CQ_PULL_MIN completions asks the
 * kernel for more, without waiting, up to this many times (core/worker.c,
 * run_reaped): an enter runs a bounded part of the kernel's task-work list,
 * which serves every sandbox in arrival order.
 */
#define LIMITS_CQ_PULLS_PER_TURN 64u
#define LIMITS_CQ_PULL_MIN       16u
/* Completions a worker holds for later turns: as many as its CQ holds. */
#define LIMITS_DEFERRED_CQES LIMITS_CQ_ENTRIES

/* Connections per worker (client side); each tunnel also uses one upstream slot. */
#define LIMITS_CONNS_PER_WORKER_DEFAULT 32768u
/* Direct-descriptor table per ring: two per tunnel plus listeners and slack. */
#define LIMITS_FIXED_FILES_PER_WORKER 65536u

/* Direct descriptors a worker keeps back from its conns' share (core/share.h):
 * parked upstreams (core/uppool.h, 64) and slack; the rest is two per conn. */
#define LIMITS_FILE_SLOTS_RESERVED 256u
/* A sandbox's share of a worker's conns, in percent of the conns free plus
 * those it holds (core/share.c): a lone sandbox may take three quarters of the
 * worker; whatever one floods with, a quarter stays for the others. */
#define LIMITS_SANDBOX_SHARE_PERCENT_DEFAULT 75u

/* Pipes per worker for splice relays. Each is two descriptors and up to
 * LIMITS_PIPE_BYTES of kernel pages; the kernel's per-user soft cap is 64 MiB
 * (docs/engine-notes.md), so 64 x 512 KiB per worker keeps two workers inside it.
 * 512 KiB measured best on loopback: the relay gathers up to 3/4 of a pipe
 * before sending, and fewer, larger sends mean fewer receiver wake-ups
 * (64 KiB: 0.33x direct; 256 KiB: 0.56x; 512 KiB: 0.70x; 1 MiB: 0.64x). */
#define LIMITS_PIPES_PER_WORKER_DEFAULT 64u
#define LIMITS_PIPE_BYTES               (512u * 1024u)

/* Timeouts (milliseconds). */
#define LIMITS_HEAD_TIMEOUT_MS_DEFAULT     10000u
#define LIMITS_CONNECT_TIMEOUT_MS_DEFAULT  10000u
#define LIMITS_DNS_TIMEOUT_MS_DEFAULT      5000u
#define LIMITS_IDLE_TIMEOUT_MS_DEFAULT     300000u
#define LIMITS_BODY_TIMEOUT_MS_DEFAULT     30000u
#define LIMITS_RESPONSE_TIMEOUT_MS_DEFAULT 300000u
/* A stop's drain (core/engine.h, engine_drain): what is in flight may finish this long. */
#define LIMITS_DRAIN_TIMEOUT_MS_DEFAULT 10000u
/* `daemon handover` (core/control.c): each step of the successor's, its "ready" last. */
#define LIMITS_HANDOVER_TIMEOUT_MS_DEFAULT 60000u
/*
 * During a drain, a connection with no request under way is closed once it
 * has sent nothing for this long: time for a client that just read an answer
 * to send its next request, which is served with Connection: close.
 */
#define LIMITS_DRAIN_IDLE_MS 1000u
/* Sandboxes with series of their own in the metrics by default (daemon.metrics.sandboxes). */
#define LIMITS_METRICS_SANDBOXES_DEFAULT 20u
/* The Retry-After of a daemon_stopping refusal: about what a restart takes. */
#define LIMITS_DRAIN_RETRY_AFTER_S 2u
/*
 * The inject tier holds back the tail of what it read that could begin a copy
 * of the secret, whatever it is, until the next read or this long (in timer
 * ticks: it goes between one and two ticks later): a hold that depended on
 * whether the tail matches would tell the agent, by its delay, how much of
 * the secret it had guessed (core/inject.c, inject_relay_limit).
 */
#define LIMITS_INJECT_HOLD_MS 100u
/* Timer wheel: slot width and slot count; must cover the longest timeout. */
#define LIMITS_TIMER_TICK_MS 100u
#define LIMITS_TIMER_SLOTS   4096u

/* Audit: records per per-worker ring (about 920 bytes each) and the worst-case
 * formatted line (every field full of bytes that need six-character escapes). */
#define LIMITS_AUDIT_RING_RECORDS 4096u
#define LIMITS_AUDIT_LINE_BYTES   8192u

/* Per-rule limit entries per worker (core/ratelimit.h): one per (sandbox, rule, snapshot)
 * in use, 80 bytes each with the index (5 MiB, touched as used). Twice the default
 * connections per worker, since an open connection holds at most one entry at a time:
 * those alone never fill it. A full table takes over idle entries; it answers 429 only
 * when none is idle. */
#define LIMITS_RULE_BUCKETS_PER_WORKER 65536u

/* Terminated tiers (fake, inject): one request body, one response body. A
 * request whose Content-Length says more is answered 413 before anything
 * goes upstream; a chunked one is cut there. A response past the cap is cut
 * and audited response_truncated. Large enough for model APIs' uploads and
 * streams, small enough that one agent cannot pull the host's bandwidth
 * through a credential for ever. */
#define LIMITS_TERM_REQUEST_BYTES_MAX  (64ull << 20)
#define LIMITS_TERM_RESPONSE_BYTES_MAX (1ull << 30)

/* Worker threads: at most this many, whatever the core count. */
#define LIMITS_WORKERS_MAX 64u
/* Sandboxes a daemon serves. */
#define LIMITS_SANDBOXES_MAX 65536u
/*
 * The uids (and gids, the same numbers) the daemon gives the sandboxes root
 * starts, one each (`daemon.sandbox_uids`): 0x70000000 on, one per sandbox
 * the daemon may serve. Outside every range a host hands out by convention:
 * login and system accounts (below 60000), systemd's dynamic users
 * (61184..65519), subordinate ids for user namespaces (/etc/subuid, from
 * 100000 in blocks of 65536) and systemd's containers (524288..1879048191).
 */
#define LIMITS_SANDBOX_UID_FIRST_DEFAULT 1879048192u
#define LIMITS_SANDBOX_UID_COUNT_DEFAULT LIMITS_SANDBOXES_MAX
/*
 * Sandboxes a caller other than root may hold registered at once
 * (`daemon.sandboxes_per_user`): one member of the control group cannot take
 * every slot, or every descriptor, from the others. Root's are not counted.
 */
#define LIMITS_SANDBOXES_PER_USER_DEFAULT 1024u
/*
 * Each sandbox's listener is one regular descriptor, so the open-files limit
 * (RLIMIT_NOFILE, 20,000 here) bounds the sandboxes too: a daemon serves at
 * most that limit less what everything else may hold at once (engine.h,
 * engine_sandboxes_max_for): each worker's pipes (two descriptors each) and
 * its ring, eventfd and TCP listeners, then LIMITS_FDS_RESERVED for the
 * control socket and its clients, the audit file, the registry, TLS files,
 * the gateway's per-request socket lookups and a sandbox's ingress socket
 * while it is handed over.
 */
#define LIMITS_FDS_RESERVED   1024u
#define LIMITS_FDS_PER_WORKER 8u

static_assert((LIMITS_BUFRING_ENTRIES & (LIMITS_BUFRING_ENTRIES - 1)) == 0,
	      "buffer ring size must be a power of two");
static_assert(LIMITS_DEFERRED_CQES >= 2 * LIMITS_CQES_PER_TURN,
	      "the waiting completions must take a reaped batch beside what already waits");
static_assert(LIMITS_SANDBOX_CQES_PER_TURN >= 1, "every sandbox gets a turn");
static_assert(LIMITS_SANDBOX_CQES_ALONE >= LIMITS_SANDBOX_CQES_PER_TURN &&
		  LIMITS_SANDBOX_CQES_ALONE <= LIMITS_CQES_PER_TURN,
	      "a lone sandbox's quantum is at least the shared one and at most a batch");
static_assert((LIMITS_TIMER_SLOTS & (LIMITS_TIMER_SLOTS - 1)) == 0,
	      "timer slots must be a power of two");
static_assert(LIMITS_FILE_SLOTS_RESERVED < LIMITS_FIXED_FILES_PER_WORKER / 2,
	      "the reserve must leave most of the table to conns");
static_assert(LIMITS_SANDBOX_SHARE_PERCENT_DEFAULT <= 100u, "a share is a percentage");
static_assert(LIMITS_REQUEST_LINE_BYTES_MAX < LIMITS_HEAD_BYTES_MAX,
	      "the request line is part of the head");
static_assert((LIMITS_AUDIT_RING_RECORDS & (LIMITS_AUDIT_RING_RECORDS - 1)) == 0,
	      "audit ring size must be a power of two");
static_assert((LIMITS_RULE_BUCKETS_PER_WORKER & (LIMITS_RULE_BUCKETS_PER_WORKER - 1)) == 0,
	      "the per-rule table's capacity must be a power of two");
static_assert(LIMITS_RULE_BUCKETS_PER_WORKER >= 2 * LIMITS_CONNS_PER_WORKER_DEFAULT,
	      "open connections alone must not fill the per-rule table");

#endif /* AN_CORE_LIMITS_H */
