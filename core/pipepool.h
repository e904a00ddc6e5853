/*
 * A bounded per-worker pool of pipes for splice relays (docs/engine-notes.md
 * "Pipes": a pipe per connection hits the kernel's per-user page cap near a
 * thousand connections, after which new pipes silently shrink and p99
 * collapses). A relay takes a pipe only while bytes are moving and puts it
 * back empty; when the pool is empty the relay copies instead.
 */
#ifndef AN_CORE_PIPEPOOL_H
#define AN_CORE_PIPEPOOL_H

#include <stdint.h>

struct pipe_pair {
	int read_fd;
	int write_fd;
};

struct pipepool {
	struct pipe_pair *pipes; /* owned, capacity entries */
	uint32_t *free_stack;    /* owned */
	uint32_t capacity;
	uint32_t free_count;
	uint32_t retired;      /* pipes whose replacement failed */
	uint32_t pipe_bytes;   /* capacity of the smallest pipe made (F_GETPIPE_SZ) */
	uint64_t failed_takes; /* takes refused: the relay copied instead */
	uint64_t replaced;     /* pipes closed with bytes inside and re-created */
};

/*
 * Creates <count> pipes of <pipe_bytes> each (0 pipes is valid: every relay
 * copies). Returns 0 or -errno (-EMFILE, -ENOMEM). On failure nothing leaks.
 */
int pipepool_init(struct pipepool *pp, uint32_t count, uint32_t pipe_bytes);
/* Closes every pipe. Asserts all were returned. */
void pipepool_destroy(struct pipepool *pp);
/* Returns an empty pipe owned by the caller, or NULL (counted) when none is free. */
struct pipe_pair *pipepool_take(struct pipepool *pp);
/*
 * Takes back <p>. <dirty> says bytes may remain inside (an aborted relay):
 * such a pipe is closed and replaced by a fresh one so no stale byte can
 * reach another connection; if that fails the pool shrinks by one.
 */
void pipepool_put(struct pipepool *pp, struct pipe_pair *p, int dirty);
/* Pipes currently taken. */
uint32_t pipepool_in_use(const struct pipepool *pp);

#endif /* AN_CORE_PIPEPOOL_H */
