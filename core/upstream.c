/*
 * Reaching a conn's upstream, once its request is allowed: the name resolved
 * (an IP literal, the policy's static table, or c-ares on the worker's
 * channel, under dns_timeout_ms), every address checked against the policy
 * (a local rule's upstream is the operator's and is not), then a direct
 * descriptor socket connecting to each address in turn under a linked
 * timeout. The first that connects goes to the conn's mode (c->mode->
 * connected); none: the refusal says why (private_address naming the first
 * address refused, dns_failed, upstream_timeout, upstream_unreachable), or a
 * TLS front's mode takes it (c->front->unreachable).
 *
 * Invariants: at most one lookup (F_DNS) or one socket and connect (with
 * their linked timeout) in flight per conn; an attempt whose timeout's own
 * completion is still due waits for it (c->connect_retry) before the next.
 */
#include "core/conn_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/an.h"
#include "core/compat.h"
#include "core/engine.h"
#include "core/log.h"
#include "core/timer.h"

/* Keeps the addresses the policy permits (all of them for a local upstream). */
static void addrs_accept(struct conn *c, const struct sockaddr_storage *addrs, uint32_t count)
{
	const struct engine *e = c->w->e;
	bool checked = c->upstream_local == NULL;

	c->addr_count = 0;
	c->addr_next = 0;
	const struct sockaddr *refused = NULL;
	for (uint32_t i = 0; i < count && c->addr_count < CONN_ADDRS_MAX; i++) {
		const struct sockaddr *sa = (const struct sockaddr *)&addrs[i];
		if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
			continue;
		if (checked && !e->ops->address_permitted(c->snap->policy, sa)) {
			refused = refused != NULL ? refused : sa;
			continue;
		}
		size_t len = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
						      : sizeof(struct sockaddr_in6);
		memcpy(&c->addrs[c->addr_count++], sa, len);
	}
	if (c->addr_count == 0) {
		if (refused != NULL)
			respond_private_address(c, refused);
		else
			respond(c, REASON_PRIVATE_ADDRESS); /* no IPv4 or IPv6 address at all */
		return;
	}
	connect_next(c);
}

static void on_dns(void *arg, int status, const struct sockaddr_storage *addrs, uint32_t count)
{
	struct conn *c = arg;

	c->flags &= (uint8_t)~F_DNS;
	if (c->state == ST_RESOLVE) {
		timer_disarm(c->w->timers, &c->timer);
		if (status != 0)
			respond(c, REASON_DNS_FAILED);
		else
			addrs_accept(c, addrs, count);
	}
	conn_maybe_free(c);
}

/* Parses an IP literal <host> (no brackets) with <port> into <out>. */
static bool literal_addr(const char *host, uint16_t port, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	struct sockaddr_in *v4 = (struct sockaddr_in *)out;
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(port);
		return true;
	}
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
	if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
		return true;
	}
	return false;
}

/*
 * A Unix socket upstream's address lives in the storage of c->addrs (it
 * holds four IPv6 addresses: more than a sockaddr_un), so a conn does not
 * grow for the rare local rule that names a socket.
 */
static_assert(sizeof(((struct conn *)0)->addrs) >= sizeof(struct sockaddr_un),
	      "a Unix socket address fits the address storage");

struct sockaddr_un *conn_unix(struct conn *c)
{
	return (struct sockaddr_un *)(void *)c->addrs;
}

/* Connects the local rule's Unix socket upstream (an absolute path, checked at load). */
static void unix_upstream_start(struct conn *c)
{
	struct sockaddr_un *sun = conn_unix(c);
	size_t len = strlen(c->upstream_local);

	AN_ASSERT(c->upstream_local[0] == '/' && len < sizeof(sun->sun_path));
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path, c->upstream_local, len + 1);
	c->flags |= F_UNIX_UP;
	c->addr_count = 1;
	c->addr_next = 0;
	connect_next(c);
}

/* Splits a local upstream "host:port" / "[v6]:port" into <host> (<cap> bytes) and <port>. */
static bool upstream_split(const char *up, char *host, size_t cap, uint16_t *port)
{
	struct http1_authority au;
	if (http1_authority_split(up, strlen(up), &au) != 0 || au.host_len >= cap)
		return false;
	memcpy(host, au.host, au.host_len);
	host[au.host_len] = '\0';
	*port = au.port;
	return true;
}

void resolve_start(struct conn *c)
{
	const struct engine *e = c->w->e;
	struct sockaddr_storage addrs[CONN_ADDRS_MAX];
	char name[LIMITS_HOST_BYTES_MAX + 1];
	uint16_t port = c->port;

	memcpy(name, c->host, (size_t)c->host_len + 1);
	c->flags &= (uint8_t)~F_UNIX_UP;
	if (c->upstream_local != NULL && c->upstream_local[0] == '/') {
		unix_upstream_start(c);
		return;
	}
	if (c->upstream_local != NULL &&
	    !upstream_split(c->upstream_local, name, sizeof(name), &port)) {
		respond(c, REASON_TIER_UNAVAILABLE);
		return;
	}
	if (literal_addr(name, port, &addrs[0])) {
		addrs_accept(c, addrs, 1);
		return;
	}
	int n = e->ops->static_lookup(c->snap->policy, name, strlen(name), port, addrs,
				      (int)CONN_ADDRS_MAX);
	if (n > 0) {
		addrs_accept(c, addrs, (uint32_t)n);
		return;
	}
	c->state = ST_RESOLVE;
	c->flags |= F_DNS;
	timer_arm(c->w->timers, &c->timer, e->cfg->dns_timeout_ms); /* conn_on_timer: dns_failed */
	int ret = dns_resolve(&c->w->dns, name, port, on_dns, c);
	if (ret != 0) {
		c->flags &= (uint8_t)~F_DNS;
		respond(c, REASON_DNS_FAILED);
	}
}

void connect_next(struct conn *c)
{
	if (c->addr_next >= c->addr_count) {
		bool timed_out = c->connect_err == -ETIMEDOUT || c->connect_err == -ECANCELED;
		c->addr_next = 0;
		if (c->front != NULL && c->front->unreachable != NULL)
			c->front->unreachable(c);
		else
			respond(c,
				timed_out ? REASON_UPSTREAM_TIMEOUT : REASON_UPSTREAM_UNREACHABLE);
		return;
	}
	c->state = ST_CONNECT;
	struct io_uring_sqe *sqe = conn_sqe(c, OP_SOCKET);
	int family = (c->flags & F_UNIX_UP) ? AF_UNIX : c->addrs[c->addr_next].sa.sa_family;
	/* Direct descriptors are never inherited: SOCK_CLOEXEC is refused for them. */
	io_uring_prep_socket_direct_alloc(sqe, family, SOCK_STREAM | SOCK_NONBLOCK, 0, 0);
}

void upstream_on_socket(struct conn *c, int res)
{
	if (c->state != ST_CONNECT) {
		if (res >= 0) {
			int32_t slot = res;
			close_slot(c, &slot);
		}
		return;
	}
	if (res < 0) {
		log_warn("socket: %s", strerror(-res));
		respond(c, REASON_OVERLOADED);
		return;
	}
	c->ufd = res;
	const union conn_addr *a = &c->addrs[c->addr_next];
	socklen_t len = a->sa.sa_family == AF_INET ? sizeof(a->v4) : sizeof(a->v6);
	if (c->flags & F_UNIX_UP)
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
				  strlen(conn_unix(c)->sun_path) + 1);
	else
		set_nodelay(c, OP_NODELAY_U, c->ufd);
	c->connect_started_us = (uint32_t)timer_now_us();
	struct io_uring_sqe *sqe = conn_sqe(c, OP_CONNECT);
	io_uring_prep_connect(sqe, c->ufd, &a->sa, len);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_LINK;
	uint32_t ms = c->w->e->cfg->connect_timeout_ms;
	c->connect_ts.tv_sec = ms / 1000u;
	c->connect_ts.tv_nsec = (long long)(ms % 1000u) * 1000000;
	sqe = conn_sqe(c, OP_CONNECT_TIMEOUT);
	io_uring_prep_link_timeout(sqe, &c->connect_ts, 0);
}

void upstream_on_connect(struct conn *c, int res)
{
	if (c->connect_path_fd >= 0) {
		close(c->connect_path_fd); /* the connect has resolved the path it named */
		c->connect_path_fd = -1;
	}
	if (c->state != ST_CONNECT)
		return;
	if (res < 0) {
		c->connect_err = res == -ECANCELED ? -ETIMEDOUT : res;
		close_slot(c, &c->ufd);
		c->addr_next++;
		/* The linked timeout's own completion may come later (after the next
		 * address's socket, even): that attempt arms its timeout only once it has. */
		if (c->ops & op_bit(OP_CONNECT_TIMEOUT)) {
			c->connect_retry = true;
			return;
		}
		connect_next(c);
		return;
	}
	AN_ASSERT(c->mode != NULL && c->mode->connected != NULL);
	latency_observe(&c->w->decisions.connect,
			(uint32_t)((uint32_t)timer_now_us() - c->connect_started_us));
	c->mode->connected(c);
}
