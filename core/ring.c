/*
 * io_uring set-up, probing and buffers.
 *
 * Each worker builds its ring in its own thread with SINGLE_ISSUER and
 * DEFER_TASKRUN (completion work runs only when the worker waits, so it is
 * batched and never interrupts a handler), a sparse direct-descriptor table
 * the kernel allocates from (accept and socket "direct alloc"), and one
 * provided-buffer ring. Buffers are returned one at a time but published to
 * the kernel in one tail update per call; the kernel only takes a buffer when
 * data arrives, so an idle connection holds none. The probe runs once in the
 * main thread and decides which fast paths the workers use; each has a
 * fallback (see core/conn.c and core/tunnel.c), and AN_NO_SPLICE /
 * AN_NO_URING_SETSOCKOPT in the environment force the fallbacks for tests.
 */
#include "core/ring.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/an.h"
#include "core/compat.h"
#include "core/pool.h"

/* Submits of a full queue retried when the kernel refuses for a moment (ring_sqe). */
#define RING_SUBMIT_TRIES 1000u

static bool probe_setsockopt(struct io_uring *ring)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	bool ok = false;

	if (fd == -1)
		return false;
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (sqe != NULL) {
		compat_prep_setsockopt(sqe, fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct io_uring_cqe *cqe;
		if (io_uring_submit_and_wait(ring, 1) == 1 && io_uring_peek_cqe(ring, &cqe) == 0) {
			ok = cqe->res == 0;
			io_uring_cqe_seen(ring, cqe);
		}
	}
	int val = 0;
	socklen_t len = sizeof(val);
	if (ok && (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &val, &len) == -1 || val == 0))
		ok = false;
	close(fd);
	return ok;
}

int ring_probe(struct ring_features *out)
{
	struct io_uring ring;
	struct io_uring_params p;

	memset(out, 0, sizeof(*out));
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	int ret = io_uring_queue_init_params(8, &ring, &p);
	if (ret == 0) {
		out->single_issuer = true;
	} else {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(8, &ring, &p);
		if (ret != 0)
			return ret;
	}
	out->ext_arg = (p.features & IORING_FEAT_EXT_ARG) != 0;
	struct io_uring_probe *probe = io_uring_get_probe_ring(&ring);
	if (probe != NULL) {
		out->socket_direct = io_uring_opcode_supported(probe, IORING_OP_SOCKET);
		out->splice = io_uring_opcode_supported(probe, IORING_OP_SPLICE);
		/* Multishot recv and fd-keyed cancel arrived with the same kernels as
		 * IORING_OP_SOCKET (6.0); the opcode is the probe's best proxy. */
		out->multishot_recv = out->socket_direct;
		out->cancel_fd = out->socket_direct;
		if (io_uring_opcode_supported(probe, IORING_OP_URING_CMD))
			out->setsockopt_cmd = probe_setsockopt(&ring);
		io_uring_free_probe(probe);
	}
	io_uring_queue_exit(&ring);
	if (getenv("AN_NO_SPLICE") != NULL)
		out->splice = false;
	if (getenv("AN_NO_URING_SETSOCKOPT") != NULL)
		out->setsockopt_cmd = false;
	return 0;
}

void ring_features_describe(const struct ring_features *f, char *out, size_t cap)
{
	snprintf(out, cap,
		 "io_uring features: single_issuer+defer_taskrun=%s multishot_recv=%s "
		 "socket_direct=%s setsockopt_cmd=%s splice=%s ext_arg=%s",
		 f->single_issuer ? "yes" : "no", f->multishot_recv ? "yes" : "no",
		 f->socket_direct ? "yes" : "no", f->setsockopt_cmd ? "yes" : "no",
		 f->splice ? "yes" : "no", f->ext_arg ? "yes" : "no");
}

/* The mapping behind <buf_count> buffers of <buf_bytes>: the buffers, then held_next and held_len. */
static size_t ring_bufs_bytes(uint32_t buf_count, uint32_t buf_bytes)
{
	return (size_t)buf_count * buf_bytes + (size_t)buf_count * 2u * sizeof(uint16_t);
}

static int ring_bufs_init(struct ring *r, uint32_t buf_count, uint32_t buf_bytes)
{
	int err = 0;
	size_t bytes = ring_bufs_bytes(buf_count, buf_bytes);
	void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (base == MAP_FAILED)
		return -ENOMEM;
	r->br = compat_setup_buf_ring(&r->uring, buf_count, RING_BGID, &err);
	if (r->br == NULL) {
		munmap(base, bytes);
		return err;
	}
	r->buf_base = base;
	r->buf_count = buf_count;
	r->buf_bytes = buf_bytes;
	r->held_next = (uint16_t *)(r->buf_base + (size_t)buf_count * buf_bytes);
	r->held_len = r->held_next + buf_count;
	int mask = io_uring_buf_ring_mask(buf_count);
	for (uint32_t i = 0; i < buf_count; i++)
		io_uring_buf_ring_add(r->br, r->buf_base + (size_t)i * buf_bytes, buf_bytes,
				      (unsigned short)i, mask, (int)i);
	io_uring_buf_ring_advance(r->br, (int)buf_count);
	return 0;
}

int ring_init(struct ring *r, const struct ring_features *f, uint32_t sq_entries,
	      uint32_t cq_entries, uint32_t fixed_files, uint32_t buf_count, uint32_t buf_bytes)
{
	struct io_uring_params p;

	AN_ASSERT((buf_count & (buf_count - 1)) == 0);
	AN_ASSERT(buf_count <= 32768);
	memset(r, 0, sizeof(*r));
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
	if (f->single_issuer)
		p.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	p.cq_entries = cq_entries;
	int ret = io_uring_queue_init_params(sq_entries, &r->uring, &p);
	if (ret != 0)
		return ret;
	/* The kernel caps a ring's file table at RLIMIT_NOFILE (fixed at 20,000 here). */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < fixed_files)
		fixed_files = (uint32_t)nofile.rlim_cur;
	ret = io_uring_register_files_sparse(&r->uring, fixed_files);
	if (ret != 0)
		goto out_exit;
	r->file_slots = fixed_files;
	ret = io_uring_register_ring_fd(&r->uring);
	if (ret < 0)
		goto out_exit;
	ret = ring_bufs_init(r, buf_count, buf_bytes);
	if (ret != 0)
		goto out_exit;
	return 0;
out_exit:
	io_uring_queue_exit(&r->uring);
	return ret;
}

void ring_destroy(struct ring *r)
{
	AN_ASSERT(r->bufs_out == 0);
	if (r->br != NULL)
		compat_free_buf_ring(&r->uring, r->br, r->buf_count, RING_BGID);
	if (r->buf_base != NULL)
		munmap(r->buf_base, ring_bufs_bytes(r->buf_count, r->buf_bytes));
	io_uring_queue_exit(&r->uring);
	memset(r, 0, sizeof(*r));
}

struct io_uring_sqe *ring_sqe(struct ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);

	if (AN_UNLIKELY(sqe == NULL)) {
		/* The queue filled inside a turn (a burst of closes): submit what is in it.
		 * The kernel may refuse for a moment (-EAGAIN: no memory for requests;
		 * -EBUSY: completions it could not post yet; -EINTR): try again, a
		 * millisecond apart, before calling it our bug. */
		int ret = io_uring_submit(&r->uring);
		for (unsigned tries = 0; tries < RING_SUBMIT_TRIES && ret < 0 &&
					 (ret == -EAGAIN || ret == -EBUSY || ret == -EINTR);
		     tries++) {
			if (ret != -EINTR)
				usleep(1000);
			ret = io_uring_submit(&r->uring);
		}
		AN_ASSERT(ret >= 0);
		r->sq_unsent = 0;
		sqe = io_uring_get_sqe(&r->uring);
	}
	AN_ASSERT(sqe != NULL);
	r->sq_unsent++;
	return sqe;
}

void ring_buf_taken(struct ring *r, uint16_t bid)
{
	AN_ASSERT(bid < r->buf_count);
	r->bufs_out++;
	AN_ASSERT(r->bufs_out <= r->buf_count);
}

void ring_buf_return(struct ring *r, uint16_t bid)
{
	AN_ASSERT(bid < r->buf_count);
	AN_ASSERT(r->bufs_out > 0);
	io_uring_buf_ring_add(r->br, ring_buf(r, bid), r->buf_bytes, bid,
			      io_uring_buf_ring_mask(r->buf_count), 0);
	io_uring_buf_ring_advance(r->br, 1);
	r->bufs_out--;
}
