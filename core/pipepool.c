/*
 * Pipe pool. Pipes are ordinary descriptors (two per pipe) created at
 * start-up with O_NONBLOCK and O_CLOEXEC and grown to the configured size
 * once; the kernel backs a pipe's pages only while they hold data, so a full
 * pool of idle pipes costs descriptors and accounting, not memory. A pipe
 * whose replacement failed is retired: closed and never handed out again.
 */
#include "core/pipepool.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

static int pipe_open(struct pipe_pair *p, uint32_t pipe_bytes)
{
	int fds[2];

	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1)
		return -errno;
	/* Best effort: past the per-user soft cap the kernel refuses to grow it. */
	if (pipe_bytes != 0)
		(void)fcntl(fds[1], F_SETPIPE_SZ, (int)pipe_bytes);
	p->read_fd = fds[0];
	p->write_fd = fds[1];
	return 0;
}

static void pipe_close(struct pipe_pair *p)
{
	if (p->read_fd != -1)
		close(p->read_fd);
	if (p->write_fd != -1)
		close(p->write_fd);
	p->read_fd = -1;
	p->write_fd = -1;
}

int pipepool_init(struct pipepool *pp, uint32_t count, uint32_t pipe_bytes)
{
	*pp = (struct pipepool){ .pipe_bytes = pipe_bytes };
	if (count == 0)
		return 0;
	pp->pipes = pool_calloc(count, sizeof(*pp->pipes));
	pp->free_stack = pool_calloc(count, sizeof(*pp->free_stack));
	if (pp->pipes == NULL || pp->free_stack == NULL) {
		AN_FREE(&pp->pipes);
		AN_FREE(&pp->free_stack);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < count; i++) {
		int ret = pipe_open(&pp->pipes[i], pipe_bytes);
		if (ret == 0) {
			/* Relays size their splices by the smallest pipe actually made. */
			int got = fcntl(pp->pipes[i].write_fd, F_GETPIPE_SZ);
			if (got > 0 && (uint32_t)got < pp->pipe_bytes)
				pp->pipe_bytes = (uint32_t)got;
		}
		if (ret != 0) {
			pp->capacity = i;
			pp->free_count = i;
			pipepool_destroy(pp);
			return ret;
		}
		pp->free_stack[i] = i;
	}
	pp->capacity = count;
	pp->free_count = count;
	return 0;
}

void pipepool_destroy(struct pipepool *pp)
{
	AN_ASSERT(pp->free_count + pp->retired == pp->capacity);
	for (uint32_t i = 0; i < pp->capacity; i++)
		pipe_close(&pp->pipes[i]);
	AN_FREE(&pp->pipes);
	AN_FREE(&pp->free_stack);
	pp->capacity = 0;
	pp->free_count = 0;
}

struct pipe_pair *pipepool_take(struct pipepool *pp)
{
	if (pp->free_count == 0) {
		pp->failed_takes++;
		return NULL;
	}
	struct pipe_pair *p = &pp->pipes[pp->free_stack[--pp->free_count]];
	AN_ASSERT(p->read_fd != -1);
	return p;
}

void pipepool_put(struct pipepool *pp, struct pipe_pair *p, int dirty)
{
	AN_ASSERT(p >= pp->pipes);
	uint32_t idx = (uint32_t)(p - pp->pipes);
	AN_ASSERT(idx < pp->capacity);
	AN_ASSERT(pp->free_count + pp->retired < pp->capacity);
	if (dirty) {
		pipe_close(p);
		pp->replaced++;
		if (pipe_open(p, pp->pipe_bytes) != 0) {
			/* Retired: accounted as returned, never handed out again. */
			pp->retired++;
			return;
		}
	}
	pp->free_stack[pp->free_count++] = idx;
}

uint32_t pipepool_in_use(const struct pipepool *pp)
{
	return pp->capacity - pp->free_count - pp->retired;
}
