/*
 * A published policy: the compiled snapshot the engine decides with, what
 * each sandbox slot means under it, and the counting that lets a reload swap
 * it while connections keep the one their request began with.
 *
 * The engine publishes one snapshot at a time (engine.current). A worker
 * adopts the newest at the top of each loop turn; a request takes the
 * worker's snapshot and holds it until the connection's next request or its
 * end, so an open tunnel keeps its verdict and its borrowed strings. A
 * snapshot is freed on the control path once no worker can reach it.
 */
#ifndef AN_CORE_SNAPSHOT_H
#define AN_CORE_SNAPSHOT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/verdict.h"

/* What sandbox slot <i> is under one snapshot. */
struct snapshot_sandbox {
	struct verdict_limits limits; /* its profile's */
	uint32_t profile;             /* index into the snapshot's profiles */
	bool known;                   /* false: the slot was not active when this was written */
};

/* One worker's use of a snapshot, written by that worker only. */
struct snapshot_use {
	uint32_t conns; /* requests of this worker's conns holding it */
	bool current;   /* the worker's snapshot for new requests */
} __attribute__((aligned(64)));

struct snapshot {
	const void *policy;  /* owned: released through verdict_ops.release */
	uint64_t generation; /* 1 at start-up, one more per reload */
	uint32_t rules;      /* for messages */
	uint32_t profiles;
	struct snapshot_sandbox *sandboxes; /* owned: LIMITS_SANDBOXES_MAX entries */
	struct snapshot_use *uses;          /* owned: one per worker */
	uint32_t worker_count;
	/* Workers that adopted it and have not let go (current, or conns > 0). */
	_Atomic uint32_t holders;
	struct snapshot *older; /* the engine's list of retired snapshots */
};

/*
 * A snapshot of <policy> (not yet owned: snapshot_destroy releases it through
 * <ops>) for <worker_count> workers, every sandbox slot unknown. NULL when out
 * of memory (then <policy> is untouched). Control path.
 */
struct snapshot *snapshot_create(const void *policy, uint64_t generation, uint32_t worker_count);

/* Releases <s>'s policy through <ops>->release and frees <s>. NULL is accepted. */
void snapshot_destroy(struct snapshot *s, const struct verdict_ops *ops);

/*
 * Worker <worker> moves from <from> (its snapshot, or NULL at start-up) to
 * <to>: <to> gains the worker as a holder, then *<seen> (the worker's
 * published generation) becomes to->generation, and <from> loses the worker
 * once none of its requests holds it. Returns <to>. Worker thread only.
 */
struct snapshot *snapshot_adopt(struct snapshot *from, struct snapshot *to, uint32_t worker,
				_Atomic uint64_t *seen);

/* Worker <worker> stops using <s> for new requests (it is stopping). Worker thread only. */
void snapshot_leave(struct snapshot *s, uint32_t worker);

/* A request of worker <worker> takes <s>, which must be that worker's current. */
void snapshot_get(struct snapshot *s, uint32_t worker);

/* The request lets <s> go; the last one of a retired snapshot drops the worker as holder. */
void snapshot_put(struct snapshot *s, uint32_t worker);

/*
 * True when no worker can reach retired snapshot <s> again: every worker
 * published a later generation in <seen> (<worker_count> of them) and none
 * holds it. Control path.
 */
bool snapshot_unreachable(const struct snapshot *s, const _Atomic uint64_t *seen,
			  uint32_t worker_count);

#endif /* AN_CORE_SNAPSHOT_H */
