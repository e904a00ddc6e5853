/*
 * Published policy snapshots and their reclamation.
 *
 * No reference count is touched per request across cores: each worker
 * counts its own requests on a snapshot in its own cache line (uses[w]), and
 * only when it starts or stops holding a snapshot at all does it touch the
 * shared <holders> count. A worker holds a snapshot while it is its current
 * one or any of its requests still uses it.
 *
 * Freeing needs one more fact: a worker that loaded the published pointer
 * but has not yet counted itself a holder must not see the snapshot freed
 * under it. So a worker publishes the generation it adopted (seen) after
 * counting itself, and the control path frees a retired snapshot only once
 * every worker has published a later generation (none can adopt it any more)
 * and the holders are zero (none uses it). The release store of seen orders
 * the holder increment before it; the release decrement of holders orders the
 * worker's last reads before the free.
 *
 * Rejected: an atomic count per request (a cache line bouncing between
 * cores on every request) and epochs per loop turn (a quiet worker blocked in
 * io_uring_enter would hold every reload's memory until its next event).
 */
#include "core/snapshot.h"

#include "core/an.h"
#include "core/limits.h"
#include "core/pool.h"

struct snapshot *snapshot_create(const void *policy, uint64_t generation, uint32_t worker_count)
{
	AN_ASSERT(policy != NULL);
	AN_ASSERT(worker_count > 0 && worker_count <= LIMITS_WORKERS_MAX);
	struct snapshot *s = pool_calloc(1, sizeof(*s));
	if (s == NULL)
		return NULL;
	/* Zeroed pages: only the slots in use are ever touched. */
	s->sandboxes = pool_calloc(LIMITS_SANDBOXES_MAX, sizeof(*s->sandboxes));
	s->uses =
	    pool_calloc_aligned(worker_count, sizeof(*s->uses), _Alignof(struct snapshot_use));
	if (s->sandboxes == NULL || s->uses == NULL) {
		AN_FREE(&s->sandboxes);
		AN_FREE(&s->uses);
		pool_free(s);
		return NULL;
	}
	s->policy = policy;
	s->generation = generation;
	s->worker_count = worker_count;
	atomic_init(&s->holders, 0);
	return s;
}

void snapshot_destroy(struct snapshot *s, const struct verdict_ops *ops)
{
	if (s == NULL)
		return;
	AN_ASSERT(atomic_load_explicit(&s->holders, memory_order_acquire) == 0);
	ops->release(s->policy);
	AN_FREE(&s->sandboxes);
	AN_FREE(&s->uses);
	pool_free(s);
}

static void holder_drop(struct snapshot *s)
{
	uint32_t before = atomic_fetch_sub_explicit(&s->holders, 1, memory_order_release);
	AN_ASSERT(before > 0);
}

struct snapshot *snapshot_adopt(struct snapshot *from, struct snapshot *to, uint32_t worker,
				_Atomic uint64_t *seen)
{
	AN_ASSERT(to != NULL && worker < to->worker_count);
	AN_ASSERT(from == NULL || from->generation < to->generation);
	atomic_fetch_add_explicit(&to->holders, 1, memory_order_relaxed);
	to->uses[worker].current = true;
	atomic_store_explicit(seen, to->generation, memory_order_release);
	if (from != NULL)
		snapshot_leave(from, worker);
	return to;
}

void snapshot_leave(struct snapshot *s, uint32_t worker)
{
	AN_ASSERT(worker < s->worker_count);
	AN_ASSERT(s->uses[worker].current);
	s->uses[worker].current = false;
	if (s->uses[worker].conns == 0)
		holder_drop(s);
}

void snapshot_get(struct snapshot *s, uint32_t worker)
{
	AN_DASSERT(worker < s->worker_count);
	AN_DASSERT(s->uses[worker].current);
	s->uses[worker].conns++;
}

void snapshot_put(struct snapshot *s, uint32_t worker)
{
	AN_DASSERT(worker < s->worker_count);
	AN_ASSERT(s->uses[worker].conns > 0);
	if (--s->uses[worker].conns == 0 && !s->uses[worker].current)
		holder_drop(s);
}

bool snapshot_unreachable(const struct snapshot *s, const _Atomic uint64_t *seen,
			  uint32_t worker_count)
{
	AN_ASSERT(worker_count == s->worker_count);
	for (uint32_t i = 0; i < worker_count; i++) {
		if (atomic_load_explicit(&seen[i], memory_order_acquire) <= s->generation)
			return false;
	}
	return atomic_load_explicit(&s->holders, memory_order_acquire) == 0;
}
