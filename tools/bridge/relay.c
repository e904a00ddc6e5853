/*
 * agentsnet-bridge's relay: a connection's two halves, each a pipe and non-blocking splice
 * (conn/half/pump), the ready queue and the accepts; the listeners, the loop and PID 1's
 * duties stay in tools/bridge/main.c, which dispatches the events here.
 */
#include "tools/bridge/bridge_int.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "core/an.h"

/* ---- Connections -------------------------------------------------------------------------- */

void fd_close(int *fd)
{
	AN_ASSERT(fd != NULL);
	if (*fd >= 0) {
		int rc = close(*fd);
		AN_ASSERT(rc == 0 || errno != EBADF);
	}
	*fd = -1;
}

/* Closes <*fd> with a reset (SO_LINGER 0), so the peer sees ECONNRESET rather than an EOF. */
static void fd_close_reset(int *fd)
{
	AN_ASSERT(fd != NULL);
	AN_ASSERT(*fd >= 0);
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	(void)setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	fd_close(fd);
}

static void set_nodelay(int fd)
{
	AN_ASSERT(fd >= 0);
	/* A relay must not add Nagle delays to writes the agent or its peer already sized. */
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

socklen_t unix_addr(struct sockaddr_un *sun, const char *path)
{
	AN_ASSERT(path != NULL);
	size_t len = strlen(path);
	AN_ASSERT(len < sizeof(sun->sun_path)); /* opts_check refused longer paths */
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path, path, len + 1);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

/* Takes a free slot, or NULL at the limit. The slot's descriptors are all -1. */
static struct bridge_conn *conn_take(struct bridge *b)
{
	AN_ASSERT(b->free_count + b->conns_in_use == b->conns_max);
	if (b->free_count == 0) {
		return NULL;
	}
	struct bridge_conn *c = &b->conns[b->free_stack[--b->free_count]];
	AN_ASSERT(!c->in_use);
	c->in_use = true;
	c->connecting = false;
	c->gen = b->gen_next++;
	for (int i = 0; i < 2; i++) {
		AN_ASSERT(c->fd[i] == -1);
		c->half[i] = (struct bridge_half){ .pipe_rd = -1, .pipe_wr = -1 };
	}
	b->conns_in_use++;
	AN_ASSERT(b->conns_in_use <= b->conns_max);
	return c;
}

/* Closes every descriptor of <c> (with a reset on the TCP side if <reset>) and frees it. */
void conn_close(struct bridge *b, struct bridge_conn *c, bool reset)
{
	AN_ASSERT(c->in_use);
	AN_ASSERT(b->conns_in_use > 0);
	int tcp = c->kind == CONN_EGRESS ? 0 : 1;
	if (reset && c->fd[tcp] >= 0) {
		fd_close_reset(&c->fd[tcp]);
	}
	for (int i = 0; i < 2; i++) {
		fd_close(&c->fd[i]);
		fd_close(&c->half[i].pipe_rd);
		fd_close(&c->half[i].pipe_wr);
	}
	c->in_use = false;
	b->free_stack[b->free_count++] = (uint32_t)(c - b->conns);
	b->conns_in_use--;
	if (b->conns_in_use < b->conns_max) {
		b->limit_logged = false;
	}
}

/* Logs a change of reachability of one relay target: once when it fails, once when back. */
static void target_state(bool *failing, bool ok, const char *what, const char *name, int err)
{
	AN_ASSERT(failing != NULL);
	AN_ASSERT(ok || err > 0);
	if (ok && *failing) {
		say("%s %s: reachable again", what, name);
	} else if (!ok && !*failing) {
		say("%s %s: %s (closing connections until it is back)", what, name, strerror(err));
	}
	*failing = !ok;
}

/* Connects <c>'s destination. Returns 0 (c->connecting tells if it is still in progress). */
static int conn_dial(struct bridge *b, struct bridge_conn *c)
{
	AN_ASSERT(c->fd[1] == -1);
	int family = c->kind == CONN_EGRESS ? AF_UNIX : AF_INET;
	c->fd[1] = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd[1] == -1) {
		return -errno;
	}
	int rc;
	if (c->kind == CONN_EGRESS) {
		struct sockaddr_un sun;
		socklen_t len = unix_addr(&sun, b->egress_path);
		/* A full backlog is EAGAIN here, not "in progress": the connection is refused. */
		rc = connect(c->fd[1], (struct sockaddr *)&sun, len);
		int err = rc == -1 ? errno : 0;
		target_state(&b->egress_failing, rc == 0, "egress socket", b->egress_path, err);
		return rc == 0 ? 0 : -err;
	}
	AN_ASSERT(ntohl(b->ingress_target.sin_addr.s_addr) == INADDR_LOOPBACK);
	set_nodelay(c->fd[1]);
	rc = connect(c->fd[1], (struct sockaddr *)&b->ingress_target, sizeof(b->ingress_target));
	if (rc == -1 && errno == EINPROGRESS) {
		c->connecting = true;
		return 0;
	}
	int err = rc == -1 ? errno : 0;
	target_state(&b->ingress_failing, rc == 0, "ingress port", b->ingress_name, err);
	return rc == 0 ? 0 : -err;
}

/* Creates <c>'s two pipes and registers both sockets, edge-triggered. Returns 0 or -errno. */
static int conn_arm(struct bridge *b, struct bridge_conn *c)
{
	AN_ASSERT(c->fd[0] >= 0);
	AN_ASSERT(c->fd[1] >= 0);
	for (int i = 0; i < 2; i++) {
		int p[2];
		if (pipe2(p, O_NONBLOCK | O_CLOEXEC) == -1) {
			return -errno;
		}
		c->half[i].pipe_rd = p[0];
		c->half[i].pipe_wr = p[1];
	}
	uint32_t idx = (uint32_t)(c - b->conns);
	for (uint32_t side = 0; side < 2; side++) {
		struct epoll_event ev = {
			.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			.data.u64 = ev_pack(TAG_CONN, idx, side, c->gen),
		};
		if (epoll_ctl(b->ep, EPOLL_CTL_ADD, c->fd[side], &ev) == -1) {
			return -errno;
		}
	}
	return 0;
}

/* Takes the accepted <fd> (of <kind>) and relays it, or closes it if it cannot be served. */
static void conn_open(struct bridge *b, enum conn_kind kind, int fd)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(b->conns_in_use <= b->conns_max);
	struct bridge_conn *c = conn_take(b);
	if (c == NULL) {
		if (!b->limit_logged) {
			say("%u connections open: closing new ones until some end", b->conns_max);
			b->limit_logged = true;
		}
		if (kind == CONN_EGRESS) {
			fd_close_reset(&fd);
		}
		fd_close(&fd);
		return;
	}
	c->kind = kind;
	c->fd[0] = fd;
	/* half[i] reads fd[i]; the daemon's Unix socket is fd[1] for egress, fd[0] for ingress. */
	c->half[0].src_unix = kind == CONN_INGRESS;
	c->half[1].src_unix = kind == CONN_EGRESS;
	if (kind == CONN_EGRESS) {
		set_nodelay(fd);
	}
	int rc = conn_dial(b, c);
	if (rc == 0) {
		rc = conn_arm(b, c);
	}
	if (rc != 0) {
		conn_close(b, c, true);
	}
}

/* Where discarded bytes go: one buffer, as the bridge has one thread. */
static uint8_t bridge_discard_buf[16384];

/* Reads and drops what <fd> holds, up to one buffer. Returns bytes, 0 at EOF, or -errno. */
static ssize_t discard_read(int fd)
{
	AN_ASSERT(fd >= 0);
	ssize_t n = read(fd, bridge_discard_buf, sizeof(bridge_discard_buf));
	AN_ASSERT(n <= (ssize_t)sizeof(bridge_discard_buf));
	return n >= 0 ? n : -errno;
}

/*
 * A write to the daemon's socket failed: the daemon stopped reading, typically after an early
 * answer (403, 413) and a close. From now on the direction drops what the agent still sends,
 * so the answer coming the other way reaches the agent and the final close is a FIN; closing
 * with the agent's data unread would send a reset, which destroys the answer still in flight.
 */
static int half_discard_start(struct bridge_half *h)
{
	AN_ASSERT(!h->src_unix);
	AN_ASSERT(!h->discard);
	while (h->in_pipe > 0) {
		ssize_t n = discard_read(h->pipe_rd);
		if (n <= 0) {
			return n == 0 ? -EIO : (int)n;
		}
		h->in_pipe -= (uint32_t)n;
	}
	h->discard = true;
	return 0;
}

/* Empties the pipe into <dst>: PUMP_DONE when empty, PUMP_WAIT when <dst> is full, or
 * PUMP_ERROR. */
static enum pump half_drain(struct bridge_half *h, int dst)
{
	AN_ASSERT(dst >= 0);
	while (h->in_pipe > 0) {
		ssize_t n = splice(h->pipe_rd, NULL, dst, NULL, h->in_pipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			AN_ASSERT((size_t)n <= h->in_pipe);
			h->in_pipe -= (uint32_t)n;
			continue;
		}
		int err = n == -1 ? errno : EIO; /* 0 cannot happen with bytes in the pipe */
		if (err == EINTR) {
			continue;
		}
		if (err == EAGAIN) {
			return PUMP_WAIT;
		}
		bool daemon_gone = err == EPIPE || err == ECONNRESET || err == ENOTCONN;
		if (h->src_unix || !daemon_gone || half_discard_start(h) != 0) {
			return PUMP_ERROR; /* the agent's side failed: nothing more can reach it */
		}
	}
	AN_ASSERT(h->in_pipe == 0);
	return PUMP_DONE;
}

/*
 * Moves one direction of a relay until a socket would block, the budget is used, or the
 * stream ends. Fills the pipe only when it is empty (see the design comment for why). The
 * daemon's socket reports its close as ECONNRESET when it left bytes of ours unread, and only
 * once everything it sent has been read: that is an end of stream, not a failure. A reset on
 * the agent's side is a failure: the caller aborts the connection.
 */
static enum pump half_pump(struct bridge_half *h, int src, int dst)
{
	AN_ASSERT(src >= 0 && dst >= 0);
	AN_ASSERT(h->pipe_rd >= 0 && h->pipe_wr >= 0);
	uint32_t moved = 0;
	while (!h->shut) {
		enum pump drained = half_drain(h, dst);
		if (drained != PUMP_DONE) {
			return drained;
		}
		if (h->eof) {
			if (shutdown(dst, SHUT_WR) == -1 && errno != ENOTCONN && !h->discard) {
				return PUMP_ERROR;
			}
			h->shut = true;
			break;
		}
		if (moved >= BRIDGE_PUMP_BYTES_MAX) {
			return PUMP_YIELD;
		}
		ssize_t n = h->discard ? discard_read(src)
				       : splice(src, NULL, h->pipe_wr, NULL, BRIDGE_SPLICE_BYTES,
						SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n == -1) {
			n = -errno;
		}
		if (n > 0) {
			AN_ASSERT((size_t)n <= BRIDGE_SPLICE_BYTES);
			h->in_pipe = h->discard ? 0 : (uint32_t)n;
			moved += (uint32_t)n;
		} else if (n == -EAGAIN) {
			return PUMP_WAIT; /* the pipe is empty, so only the source can be dry */
		} else if (n == 0 || (n != -EINTR && h->src_unix)) {
			h->eof = true;
		} else if (n != -EINTR) {
			return PUMP_ERROR;
		}
	}
	return PUMP_DONE;
}

static void ready_push(struct bridge *b, struct bridge_conn *c)
{
	AN_ASSERT(c->in_use);
	if (c->queued) {
		return;
	}
	AN_ASSERT(b->ready_count < BRIDGE_CONNS_MAX);
	c->queued = true;
	b->ready[b->ready_count++] = (uint32_t)(c - b->conns);
}

/* Runs both directions of <c>, then closes it when both ended or one failed. */
static void conn_pump(struct bridge *b, struct bridge_conn *c)
{
	AN_ASSERT(c->in_use);
	AN_ASSERT(!c->connecting);
	enum pump up = half_pump(&c->half[0], c->fd[0], c->fd[1]);
	if (up == PUMP_ERROR) {
		conn_close(b, c, true);
		return;
	}
	enum pump down = half_pump(&c->half[1], c->fd[1], c->fd[0]);
	if (down == PUMP_ERROR) {
		conn_close(b, c, true);
	} else if (up == PUMP_DONE && down == PUMP_DONE) {
		conn_close(b, c, false);
	} else if (up == PUMP_YIELD || down == PUMP_YIELD) {
		ready_push(b, c);
	}
}

/* Finishes <c>'s connect in progress. Returns true when <c> is still open and connected. */
static bool conn_connected(struct bridge *b, struct bridge_conn *c, uint32_t side, uint32_t ev)
{
	AN_ASSERT(c->connecting);
	AN_ASSERT(c->kind == CONN_INGRESS);
	if (side == 0) {
		/* The daemon gave up before the agent answered: do not wait for the connect. */
		if ((ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
			conn_close(b, c, true);
		}
		return false;
	}
	if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) {
		return false;
	}
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) == -1) {
		err = errno;
	}
	target_state(&b->ingress_failing, err == 0, "ingress port", b->ingress_name, err);
	if (err != 0) {
		conn_close(b, c, true);
		return false;
	}
	c->connecting = false;
	return true;
}

void on_conn_event(struct bridge *b, uint64_t data, uint32_t events)
{
	uint32_t idx = (uint32_t)(data >> 4) & 0xfffffffu;
	uint32_t side = (uint32_t)(data >> 3) & 1u;
	AN_ASSERT(idx < b->conns_max);
	struct bridge_conn *c = &b->conns[idx];
	if (!c->in_use || c->gen != (uint32_t)(data >> 32)) {
		return; /* an event for a connection closed earlier in this batch */
	}
	if (c->connecting && !conn_connected(b, c, side, events)) {
		return;
	}
	AN_ASSERT(!c->connecting);
	conn_pump(b, c);
}

/*
 * Pumps the connections that yielded. Each is popped before it is pumped, and one that yields
 * again goes to the back, so the queue never holds a slot twice. A popped slot may have been
 * closed (and even reused) since it was queued: pumping a connection with nothing to move is
 * harmless, and a reused one still connecting is skipped.
 */
void ready_run(struct bridge *b)
{
	uint32_t n = b->ready_count;
	AN_ASSERT(n <= BRIDGE_CONNS_MAX);
	for (uint32_t i = 0; i < n; i++) {
		struct bridge_conn *c = &b->conns[b->ready[i]];
		AN_ASSERT(c->queued);
		c->queued = false;
		if (c->in_use && !c->connecting) {
			conn_pump(b, c);
		}
	}
	AN_ASSERT(b->ready_count >= n);
	b->ready_count -= n;
	memmove(b->ready, b->ready + n, b->ready_count * sizeof(b->ready[0]));
}

/*
 * Out of descriptors with a connection waiting: a level-triggered listener would wake the loop
 * for it forever. Gives up the spare descriptor to accept the connection and close it at once.
 */
static void accept_shed(struct bridge *b, int lfd)
{
	AN_ASSERT(lfd >= 0);
	fd_close(&b->spare_fd);
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	fd_close(&fd);
	b->spare_fd = eventfd(0, EFD_CLOEXEC);
	AN_ASSERT(fd == -1);
}

void on_accept(struct bridge *b, int lfd, enum conn_kind kind)
{
	AN_ASSERT(lfd >= 0);
	AN_ASSERT(kind == CONN_EGRESS || kind == CONN_INGRESS);
	for (uint32_t i = 0; i < BRIDGE_ACCEPTS_PER_TURN; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			conn_open(b, kind, fd);
			continue;
		}
		if (errno == EMFILE || errno == ENFILE) {
			if (b->spare_fd < 0) {
				return; /* nothing to give up; the next turn retries */
			}
			accept_shed(b, lfd);
		} else if (errno != ECONNABORTED && errno != EINTR && errno != EPROTO) {
			return; /* EAGAIN: drained; ENOBUFS, ENOMEM: the next turn retries */
		}
	}
}
