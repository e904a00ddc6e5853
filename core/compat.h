/*
 * The one place that bridges Debian's liburing 2.3 (and its 6.1 uapi headers)
 * to the newer kernel this daemon runs on.
 *
 * Helpers liburing 2.3 lacks are defined here on top of what it has; uapi
 * constants newer than 6.1 are defined under #ifndef with their kernel values.
 * Nothing here decides whether a feature is used: core/ring.c probes the
 * kernel at start-up and every caller checks the probed feature bit.
 */
#ifndef AN_CORE_COMPAT_H
#define AN_CORE_COMPAT_H

#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#ifndef IORING_CQE_F_BUF_MORE
#define IORING_CQE_F_BUF_MORE (1U << 4)
#endif
#ifndef IORING_RECVSEND_BUNDLE
#define IORING_RECVSEND_BUNDLE (1U << 4)
#endif
#ifndef IORING_FEAT_RECVSEND_BUNDLE
#define IORING_FEAT_RECVSEND_BUNDLE (1U << 14)
#endif
#ifndef IOU_PBUF_RING_INC
#define IOU_PBUF_RING_INC 2
#endif

/* Socket commands through IORING_OP_URING_CMD (Linux 6.7). */
#ifndef SOCKET_URING_OP_SETSOCKOPT
#define SOCKET_URING_OP_GETSOCKOPT 2
#define SOCKET_URING_OP_SETSOCKOPT 3
#endif

/*
 * Prepares setsockopt(<fd>, <level>, <optname>, <optval>, <optlen>) as a
 * socket uring command. The 6.1 uapi has no names for these SQE fields, so
 * they are written through the fields they alias: cmd_op is the low half of
 * off, level and optname are the halves of addr, optlen is file_index and
 * optval is addr3. <optval> must stay valid until the completion.
 */
static inline void compat_prep_setsockopt(struct io_uring_sqe *sqe, int fd, int level, int optname,
					  const void *optval, uint32_t optlen)
{
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
	sqe->off = SOCKET_URING_OP_SETSOCKOPT;
	sqe->addr = (uint64_t)(uint32_t)level | ((uint64_t)(uint32_t)optname << 32);
	sqe->file_index = optlen;
	sqe->addr3 = (uint64_t)(uintptr_t)optval;
}

/*
 * Prepares getsockopt(<fd>, SOL_SOCKET, <optname>, <optval>, <optlen>) as a
 * socket command (SOCKET_URING_OP_GETSOCKOPT, Linux 6.7, with SETSOCKOPT; the
 * kernel takes SOL_SOCKET only): the same fields as compat_prep_setsockopt.
 * The completion is the option's length, or -errno.
 */
static inline void compat_prep_getsockopt(struct io_uring_sqe *sqe, int fd, int optname,
					  void *optval, uint32_t optlen)
{
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
	sqe->off = SOCKET_URING_OP_GETSOCKOPT;
	sqe->addr = (uint64_t)(uint32_t)SOL_SOCKET | ((uint64_t)(uint32_t)optname << 32);
	sqe->file_index = optlen;
	sqe->addr3 = (uint64_t)(uintptr_t)optval;
}

/*
 * liburing 2.4's io_uring_setup_buf_ring: maps page-aligned memory for a
 * provided-buffer ring of <entries> (a power of two) and registers it as
 * group <bgid>. Returns the ring or NULL with *<err> = -errno.
 */
static inline struct io_uring_buf_ring *
compat_setup_buf_ring(struct io_uring *ring, unsigned int entries, int bgid, int *err)
{
	size_t ring_bytes = entries * sizeof(struct io_uring_buf);
	void *mem =
	    mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);

	if (mem == MAP_FAILED) {
		*err = -errno;
		return NULL;
	}
	struct io_uring_buf_reg reg;
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)mem;
	reg.ring_entries = entries;
	reg.bgid = (uint16_t)bgid;
	int ret = io_uring_register_buf_ring(ring, &reg, 0);
	if (ret != 0) {
		munmap(mem, ring_bytes);
		*err = ret;
		return NULL;
	}
	struct io_uring_buf_ring *br = mem;
	io_uring_buf_ring_init(br);
	*err = 0;
	return br;
}

/* liburing 2.4's io_uring_free_buf_ring. Returns 0 or -errno from unregister. */
static inline int compat_free_buf_ring(struct io_uring *ring, struct io_uring_buf_ring *br,
				       unsigned int entries, int bgid)
{
	int ret = io_uring_unregister_buf_ring(ring, bgid);

	munmap(br, entries * sizeof(struct io_uring_buf));
	return ret;
}

/*
 * A single-shot accept into a direct descriptor the kernel picks (the CQE's
 * res is the slot), keeping the peer's address in <addr>. liburing 2.3's
 * io_uring_prep_accept_direct writes file_index + 1 as given, so passing it
 * IORING_FILE_INDEX_ALLOC would wrap to 0 (a plain descriptor); the field
 * must hold IORING_FILE_INDEX_ALLOC itself, as later versions write it.
 */
static inline void compat_prep_accept_direct_alloc(struct io_uring_sqe *sqe, int fd,
						   struct sockaddr *addr, socklen_t *addrlen,
						   int flags)
{
	io_uring_prep_accept_direct(sqe, fd, addr, addrlen, flags, IORING_FILE_INDEX_ALLOC - 1);
}

#endif /* AN_CORE_COMPAT_H */
