/*
 * The CONNECT tunnel, for the passthrough and local tiers and for a gateway
 * request the agent upgraded: the 200 goes to the client, the early data
 * (what the client sent after its head) up, then two independent relays, up
 * (client -> upstream) and down (upstream -> client).
 *
 * A relay waits with a poll (no buffer, no pipe: an idle tunnel holds
 * nothing), takes a pipe from the worker's pool and splices socket -> pipe ->
 * socket while data keeps coming, then gives the pipe back. With no pipe free
 * it copies through one provided buffer instead. EOF on one side becomes
 * shutdown(SHUT_WR) on the other; an error on either aborts both.
 *
 * A relay's states (enum relay_state): PRELUDE while the 200 or the early
 * data goes out, then POLL -> SPLICE_IN -> SPLICE_OUT (splice path) or
 * RECV -> SEND (copy path), round again, and SHUT -> DONE after the source's
 * EOF. Invariants: a relay holds a pipe or a provided buffer only while bytes
 * are in it; the conn closes when both relays are DONE. splice_in, splice_out
 * and on_relay stay in this one file, so the splice path inlines.
 */
#include "core/conn_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/an.h"
#include "core/pipepool.h"
#include "core/ring.h"
#include "core/timer.h"

static void relay_arm(struct conn *c, int dir);
static void up_prelude_step(struct conn *c);

/*
 * A splice-in of at least this much means the source is streaming: the relay
 * splices again at once instead of polling first. Sockets are non-blocking,
 * so a source that went quiet costs one -EAGAIN, never a blocked io-wq thread
 * (io_uring runs every splice in its worker threads).
 */
#define CONN_STREAMING_BYTES (16u * 1024u)

static void tunnel_start(struct conn *c)
{
	c->state = ST_TUNNEL;
	c->reason = REASON_NONE;
	audit_decision(c, true, 200);
	head_recv_stop(c);
	timer_arm(c->w->timers, &c->timer, c->w->e->cfg->idle_timeout_ms);
	tunnel_relay_start(c, reply_established, sizeof(reply_established) - 1);
}

void tunnel_relay_start(struct conn *c, const char *reply, uint32_t len)
{
	c->down.state = R_PRELUDE;
	c->out_ptr = reply;
	c->out_len = len;
	c->out_off = 0;
	prep_send(c, dir_op(DIR_DOWN, ROP_SEND), c->cfd, c->out_ptr, c->out_len);
	c->up.state = R_PRELUDE;
	if (c->flags & F_CLIENT_EOF)
		c->up.eof = true;
	up_prelude_step(c);
}

/*
 * The next early-data slice to forward: the head buffer's tail first, then
 * the FIFO. Returns its length (0: none) and sets *<p>.
 */
uint32_t early_peek(struct conn *c, const char **p)
{
	if (c->head != NULL && c->head_len + c->early_off < c->head_fill) {
		*p = c->head + c->head_len + c->early_off;
		return c->head_fill - c->head_len - c->early_off;
	}
	if (c->early_count == 0)
		return 0;
	uint16_t bid;
	uint32_t off;
	uint32_t n = early_front(c, &bid, &off);
	*p = (const char *)ring_buf(conn_ring(c), bid) + off;
	return n;
}

/* Marks <n> early bytes consumed (sent, or counted as body). */
void early_consume(struct conn *c, uint32_t n)
{
	if (c->head != NULL && c->head_len + c->early_off < c->head_fill) {
		AN_ASSERT(n <= c->head_fill - c->head_len - c->early_off);
		c->early_off += n;
		return;
	}
	AN_ASSERT(c->early_count > 0);
	early_advance(c, n);
}

static void up_prelude_step(struct conn *c)
{
	struct relay *r = &c->up;

	if (c->state != ST_TUNNEL || r->state != R_PRELUDE)
		return;
	if (c->ops & op_bit(dir_op(DIR_UP, ROP_SEND)))
		return;
	const char *p;
	uint32_t n = early_peek(c, &p);
	if (n > 0) {
		prep_send(c, dir_op(DIR_UP, ROP_SEND), c->ufd, p, n);
		return;
	}
	if (c->ops & op_bit(OP_HEAD_RECV))
		return; /* the cancelled receive may still deliver bytes */
	/* An upgraded gateway request keeps its buffers: the 101 may still be
	 * going out of one, and its record needs the head's sandbox and path. */
	if (!c->ingress)
		buffers_release(c);
	r->state = R_IDLE;
	relay_arm(c, DIR_UP);
}

static void relay_shut(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);

	r->state = R_SHUT;
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_SHUT));
	io_uring_prep_shutdown(sqe, relay_dst(c, dir), SHUT_WR);
	sqe->flags |= IOSQE_FIXED_FILE;
}

static void relay_arm(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);

	AN_ASSERT(r->pipe == NULL);
	AN_ASSERT(!r->holds_buf);
	if (r->eof) {
		relay_shut(c, dir);
		return;
	}
	if (c->w->pipes.capacity > 0) {
		r->state = R_POLL;
		struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_POLL));
		io_uring_prep_poll_add(sqe, relay_src(c, dir), POLLIN);
		sqe->flags |= IOSQE_FIXED_FILE;
		return;
	}
	r->state = R_RECV;
	prep_recv_select(c, dir_op(dir, ROP_RECV), relay_src(c, dir));
}

static void splice_in(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_SPLICE_IN));

	AN_ASSERT(r->pipe_bytes < c->w->pipes.pipe_bytes);
	r->state = R_SPLICE_IN;
	io_uring_prep_splice(sqe, relay_src(c, dir), -1, r->pipe->write_fd, -1,
			     c->w->pipes.pipe_bytes - r->pipe_bytes,
			     SPLICE_F_FD_IN_FIXED | SPLICE_F_MOVE);
}

static void splice_out(struct conn *c, int dir)
{
	struct relay *r = relay_of(c, dir);
	struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_SPLICE_OUT));

	r->state = R_SPLICE_OUT;
	io_uring_prep_splice(sqe, r->pipe->read_fd, -1, relay_dst(c, dir), -1, r->pipe_bytes,
			     SPLICE_F_MOVE);
	sqe->flags |= IOSQE_FIXED_FILE;
}

/* Both directions finished cleanly: the tunnel is over. */
static void relay_maybe_done(struct conn *c)
{
	if (c->up.state == R_DONE && c->down.state == R_DONE)
		conn_close(c);
}

static void on_relay(struct conn *c, int dir, uint32_t rop, int res, uint32_t cqe_flags)
{
	struct relay *r = relay_of(c, dir);
	struct worker *w = c->w;

	(void)cqe_flags;
	c->active_ms = w->now_ms;
	if (res < 0 && res != -EAGAIN && !(rop == ROP_RECV && res == -ENOBUFS)) {
		conn_close(c); /* reset, broken pipe, or cancelled: abort both ways */
		return;
	}
	switch (rop) {
	case ROP_POLL:
		if (r->poll_out) {
			r->poll_out = false;
			splice_out(c, dir);
			break;
		}
		r->pipe = pipepool_take(&w->pipes);
		if (r->pipe != NULL) {
			w->stats.splice_relays++;
			splice_in(c, dir);
		} else {
			w->stats.copy_relays++;
			r->state = R_RECV;
			prep_recv_select(c, dir_op(dir, ROP_RECV), relay_src(c, dir));
		}
		break;
	case ROP_SPLICE_IN:
		if (res == -EAGAIN || res == 0) {
			/* Source drained (or ended): flush what the pipe gathered first. */
			r->eof = res == 0;
			r->full_fill = false;
			if (r->pipe_bytes > 0) {
				splice_out(c, dir);
				break;
			}
			pipepool_put(&w->pipes, r->pipe, 0);
			r->pipe = NULL;
			relay_arm(c, dir); /* polls again, or shuts dst on EOF */
			break;
		}
		r->pipe_bytes += (uint32_t)res;
		r->bytes += (uint64_t)res;
		r->full_fill = (uint32_t)res >= CONN_STREAMING_BYTES;
		/* While the source streams, gather up to three quarters of a pipe
		 * before sending: fewer, larger sends mean fewer wake-ups of the
		 * receiver (the last quarter keeps a full pipe from ending a splice). */
		if (r->full_fill && r->pipe_bytes <= w->pipes.pipe_bytes / 4 * 3)
			splice_in(c, dir);
		else
			splice_out(c, dir);
		break;
	case ROP_SPLICE_OUT:
		if (res == -EAGAIN) {
			/* The destination's send buffer is full: wait until it drains. */
			r->poll_out = true;
			r->state = R_POLL;
			struct io_uring_sqe *sqe = conn_sqe(c, dir_op(dir, ROP_POLL));
			io_uring_prep_poll_add(sqe, relay_dst(c, dir), POLLOUT);
			sqe->flags |= IOSQE_FIXED_FILE;
			break;
		}
		if (res <= 0) {
			conn_close(c);
			break;
		}
		AN_ASSERT((uint32_t)res <= r->pipe_bytes);
		r->pipe_bytes -= (uint32_t)res;
		if (r->pipe_bytes > 0) {
			splice_out(c, dir);
		} else if (r->full_fill && !r->eof) {
			splice_in(c, dir);
		} else {
			pipepool_put(&w->pipes, r->pipe, 0);
			r->pipe = NULL;
			relay_arm(c, dir);
		}
		break;
	case ROP_RECV:
		if (res == -ENOBUFS || res == -EAGAIN) {
			r->state = R_IDLE;
			nobufs_wait(c);
		} else if (res == 0) {
			r->eof = true;
			relay_shut(c, dir);
		} else {
			r->buf_off = 0;
			r->buf_len = (uint32_t)res;
			r->bytes += (uint64_t)res;
			r->state = R_SEND;
			prep_send(c, dir_op(dir, ROP_SEND), relay_dst(c, dir),
				  ring_buf(conn_ring(c), r->bid), r->buf_len);
		}
		break;
	case ROP_SEND:
		if (r->state == R_PRELUDE) {
			if (dir == DIR_UP) {
				c->bytes_up += (uint64_t)res;
				early_consume(c, (uint32_t)res);
				up_prelude_step(c);
			} else {
				if (!out_sent(c, dir_op(dir, ROP_SEND), c->cfd, c->out_ptr, res)) {
					r->state = R_IDLE;
					relay_arm(c, dir);
				}
			}
			break;
		}
		r->buf_off += (uint32_t)res;
		if (r->buf_off < r->buf_len) {
			prep_send(c, dir_op(dir, ROP_SEND), relay_dst(c, dir),
				  ring_buf(conn_ring(c), r->bid) + r->buf_off,
				  r->buf_len - r->buf_off);
		} else {
			ring_buf_return(conn_ring(c), r->bid);
			r->holds_buf = false;
			relay_arm(c, dir);
		}
		break;
	case ROP_SHUT:
		r->state = R_DONE;
		relay_maybe_done(c);
		break;
	default:
		AN_ASSERT(!"unknown relay op");
	}
}

/* Buffers are back: each relay that waited for one (idle, holding nothing) is re-armed. */
static void tunnel_buffers(struct conn *c)
{
	for (int dir = DIR_UP; dir <= DIR_DOWN; dir++) {
		struct relay *r = relay_of(c, dir);
		if (r->state == R_IDLE && !r->holds_buf && r->pipe == NULL)
			relay_arm(c, dir);
	}
}

const struct conn_mode tunnel_mode = {
	.state = ST_TUNNEL,
	.connected = tunnel_start,
	.io = on_relay,
	.buffers = tunnel_buffers,
	.early = up_prelude_step,
};
