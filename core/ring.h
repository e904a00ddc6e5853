/*
 * One io_uring per worker: set-up with the flags the engine relies on, the
 * start-up feature probe, SQE acquisition that never fails, and the
 * per-worker provided-buffer ring that multishot and buffer-select receives
 * draw from.
 */
#ifndef AN_CORE_RING_H
#define AN_CORE_RING_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What this kernel supports, probed once at start-up (ring_probe). */
struct ring_features {
	bool single_issuer;  /* IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN */
	bool multishot_recv; /* IORING_RECV_MULTISHOT with provided buffers */
	bool socket_direct;  /* IORING_OP_SOCKET into the fixed table */
	/* SOCKET_URING_OP_SETSOCKOPT via IORING_OP_URING_CMD, and GETSOCKOPT with it (both 6.7) */
	bool setsockopt_cmd;
	bool splice;    /* IORING_OP_SPLICE */
	bool cancel_fd; /* IORING_ASYNC_CANCEL_FD */
	bool ext_arg;   /* IORING_FEAT_EXT_ARG: wait with a timeout, no timeout SQE */
};

struct ring {
	struct io_uring uring;
	struct io_uring_buf_ring *br; /* owned; the provided-buffer ring, group RING_BGID */
	unsigned char *buf_base;      /* owned; buf_count * buf_bytes */
	uint32_t buf_count;
	uint32_t buf_bytes;
	uint32_t bufs_out; /* buffers handed to us by CQEs and not yet returned */
	/* Per buffer, buf_count entries each, in buf_base's mapping after the buffers:
	 * for a buffer a conn holds in a chain (its early data, core/conn.c), the next
	 * buffer of that chain and the bytes it holds. */
	uint16_t *held_next;
	uint16_t *held_len;
	uint32_t sq_unsent;  /* SQEs prepared since the last submit */
	uint32_t file_slots; /* the fixed-file table's size, as registered */
};

#define RING_BGID 0

/*
 * Probes the running kernel with a throw-away ring and fills <out>. Returns 0,
 * or -errno when io_uring itself is unusable (the daemon cannot run).
 */
int ring_probe(struct ring_features *out);

/* One line naming every probed feature, for the start-up log. */
void ring_features_describe(const struct ring_features *f, char *out, size_t cap);

/*
 * Sets up <r> in the calling thread (SINGLE_ISSUER binds the ring to it):
 * <sq_entries>/<cq_entries>, a sparse fixed-file table of <fixed_files> slots
 * (at most RLIMIT_NOFILE: the kernel's cap) all available to direct allocation, and <buf_count> provided buffers of
 * <buf_bytes>. Returns 0 or -errno (-ENOMEM, -EINVAL, ...).
 */
int ring_init(struct ring *r, const struct ring_features *f, uint32_t sq_entries,
	      uint32_t cq_entries, uint32_t fixed_files, uint32_t buf_count, uint32_t buf_bytes);

/* Releases everything <r> owns. Asserts every provided buffer came back. */
void ring_destroy(struct ring *r);

/*
 * Returns an SQE for the caller to prepare, submitting the queue first when
 * it is full. Never NULL: a ring that cannot take SQEs aborts (programmer
 * error: LIMITS_SQ_ENTRIES bounds what one turn prepares).
 */
struct io_uring_sqe *ring_sqe(struct ring *r);

/* Buffer <bid>'s memory, borrowed while the caller holds the buffer. */
static inline unsigned char *ring_buf(struct ring *r, uint16_t bid)
{
	return r->buf_base + (size_t)bid * r->buf_bytes;
}

/* Notes that a CQE handed buffer <bid> to the caller. */
void ring_buf_taken(struct ring *r, uint16_t bid);
/* Gives buffer <bid> back to the kernel for future receives. */
void ring_buf_return(struct ring *r, uint16_t bid);

#endif /* AN_CORE_RING_H */
