/*
 * c-ares on io_uring. c-ares reports which sockets it wants watched through
 * its socket-state callback; each gets a slot here and a one-shot poll SQE.
 * When a poll completes, c-ares processes that socket and the slot is re-armed
 * if c-ares still wants it. A slot c-ares drops is marked "removing" and its
 * poll is cancelled; the slot is reused only after that poll's CQE, so a new
 * socket that reuses the descriptor number never shares a slot with the old.
 * Timeouts are driven by dns_tick from the worker loop, whose wait is bounded
 * by dns_wait_ms. The channel is created lazily: a daemon whose policy never
 * needs DNS never reads /etc/resolv.conf.
 */
#include "core/dns.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/time.h>

#include "core/an.h"
#include "core/pool.h"
#include "core/ud.h"

struct dns_query {
	dns_done_fn done;
	void *arg;
	uint16_t port;
	struct dns *d;
};

int dns_library_init(void)
{
	int ret = ares_library_init(ARES_LIB_INIT_ALL);
	return ret == ARES_SUCCESS ? 0 : -ENOMEM;
}

void dns_library_cleanup(void)
{
	ares_library_cleanup();
}

static struct dns_poll *slot_find(struct dns *d, int fd)
{
	for (uint32_t i = 0; i < DNS_SOCKETS_MAX; i++) {
		if (d->polls[i].fd == fd && d->polls[i].wanted != 0)
			return &d->polls[i];
	}
	return NULL;
}

static struct dns_poll *slot_free(struct dns *d)
{
	for (uint32_t i = 0; i < DNS_SOCKETS_MAX; i++) {
		if (d->polls[i].fd == -1)
			return &d->polls[i];
	}
	return NULL;
}

static void slot_arm(struct dns *d, struct dns_poll *s)
{
	AN_ASSERT(s->armed == 0);
	AN_ASSERT(s->wanted != 0);
	struct io_uring_sqe *sqe = ring_sqe(d->ring);
	io_uring_prep_poll_add(sqe, s->fd, s->wanted);
	io_uring_sqe_set_data64(sqe, ud_encode(s, DNS_OP_POLL));
	s->armed = s->wanted;
	d->polls_pending++;
}

static void slot_cancel(struct dns *d, struct dns_poll *s)
{
	struct io_uring_sqe *sqe = ring_sqe(d->ring);
	io_uring_prep_poll_remove(sqe, ud_encode(s, DNS_OP_POLL));
	/* The remove's own CQE is not needed: skip it. */
	io_uring_sqe_set_data64(sqe, 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

static void sock_state_cb(void *data, ares_socket_t fd, int readable, int writable)
{
	struct dns *d = data;
	uint32_t wanted = (readable ? POLLIN : 0u) | (writable ? POLLOUT : 0u);
	struct dns_poll *s = slot_find(d, fd);

	if (s == NULL && wanted == 0)
		return;
	if (s == NULL) {
		s = slot_free(d);
		if (AN_NEVER(s == NULL))
			return; /* more than two a server: the lookup times out (counted) */
		s->fd = fd;
		s->armed = 0;
	}
	s->wanted = wanted;
	if (s->armed != 0 && s->armed != wanted)
		slot_cancel(d, s);
	else if (s->armed == 0 && wanted != 0)
		slot_arm(d, s);
	else if (wanted == 0 && s->armed == 0)
		s->fd = -1;
}

void dns_init(struct dns *d, struct ring *ring, const char *servers, uint32_t timeout_ms)
{
	memset(d, 0, sizeof(*d));
	d->ring = ring;
	d->servers = servers;
	d->timeout_ms = timeout_ms;
	for (uint32_t i = 0; i < DNS_SOCKETS_MAX; i++)
		d->polls[i].fd = -1;
}

static int channel_open(struct dns *d)
{
	struct ares_options opts;

	memset(&opts, 0, sizeof(opts));
	opts.sock_state_cb = sock_state_cb;
	opts.sock_state_cb_data = d;
	/* Two tries, the second given twice the first's time (c-ares doubles it each round):
	 * with one server the lookup gives up at timeout_ms, as the conn's deadline does
	 * (resolve_start); with more, that deadline answers first. */
	opts.timeout = (int)(d->timeout_ms / 3 ? d->timeout_ms / 3 : 1);
	opts.tries = 2;
	int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
	if (ares_init_options(&d->channel, &opts, mask) != ARES_SUCCESS) {
		d->channel = NULL;
		return -ENOMEM;
	}
	if (d->servers != NULL &&
	    ares_set_servers_ports_csv(d->channel, d->servers) != ARES_SUCCESS) {
		ares_destroy(d->channel);
		d->channel = NULL;
		return -EINVAL;
	}
	return 0;
}

static int status_to_errno(int status)
{
	switch (status) {
	case ARES_SUCCESS:
		return 0;
	case ARES_ENOTFOUND:
	case ARES_ENODATA:
	case ARES_ENONAME:
	case ARES_EBADNAME:
		return -ENOENT;
	case ARES_ETIMEOUT:
		return -ETIMEDOUT;
	case ARES_ECANCELLED:
	case ARES_EDESTRUCTION:
		return -ECANCELED;
	default:
		return -EIO;
	}
}

static uint32_t addrs_collect(const struct ares_addrinfo *res, uint16_t port,
			      struct sockaddr_storage *out)
{
	uint32_t n = 0;

	for (const struct ares_addrinfo_node *a = res ? res->nodes : NULL;
	     a != NULL && n < DNS_ADDRS_MAX; a = a->ai_next) {
		if (a->ai_family == AF_INET && a->ai_addrlen >= sizeof(struct sockaddr_in)) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&out[n];
			memcpy(sin, a->ai_addr, sizeof(*sin));
			sin->sin_port = htons(port);
			n++;
		} else if (a->ai_family == AF_INET6 &&
			   a->ai_addrlen >= sizeof(struct sockaddr_in6)) {
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out[n];
			memcpy(sin6, a->ai_addr, sizeof(*sin6));
			sin6->sin6_port = htons(port);
			n++;
		}
	}
	return n;
}

static void addrinfo_cb(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
	struct dns_query *q = arg;
	struct sockaddr_storage addrs[DNS_ADDRS_MAX];
	uint32_t n = 0;

	(void)timeouts;
	int err = status_to_errno(status);
	if (err == 0) {
		n = addrs_collect(res, q->port, addrs);
		if (n == 0)
			err = -ENOENT;
	}
	if (res != NULL)
		ares_freeaddrinfo(res);
	AN_ASSERT(q->d->queries > 0);
	q->d->queries--;
	dns_done_fn done = q->done;
	void *done_arg = q->arg;
	pool_free(q);
	done(done_arg, err, addrs, n);
}

int dns_resolve(struct dns *d, const char *name, uint16_t port, dns_done_fn done, void *arg)
{
	struct ares_addrinfo_hints hints;

	if (d->channel == NULL) {
		int ret = channel_open(d);
		if (ret != 0)
			return ret;
	}
	struct dns_query *q = pool_malloc(sizeof(*q));
	if (q == NULL)
		return -ENOMEM;
	*q = (struct dns_query){ .done = done, .arg = arg, .port = port, .d = d };
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	d->queries++;
	ares_getaddrinfo(d->channel, name, NULL, &hints, addrinfo_cb, q);
	return 0;
}

void dns_on_cqe(struct dns *d, struct dns_poll *s, int res)
{
	AN_ASSERT(d->polls_pending > 0);
	d->polls_pending--;
	uint32_t fired = res > 0 ? (uint32_t)res : 0;
	s->armed = 0;
	if (s->wanted == 0) {
		s->fd = -1;
		return;
	}
	if (d->channel != NULL) {
		int fd = s->fd;
		ares_socket_t rfd = (fired & (POLLIN | POLLERR | POLLHUP)) ? fd : ARES_SOCKET_BAD;
		ares_socket_t wfd = (fired & (POLLOUT | POLLERR)) ? fd : ARES_SOCKET_BAD;
		ares_process_fd(d->channel, rfd, wfd);
	}
	/* The callback above may have dropped or re-armed the slot. */
	if (s->fd != -1 && s->wanted != 0 && s->armed == 0)
		slot_arm(d, s);
	else if (s->wanted == 0 && s->armed == 0)
		s->fd = -1;
}

void dns_tick(struct dns *d)
{
	if (d->channel != NULL && d->queries > 0)
		ares_process_fd(d->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
}

int32_t dns_wait_ms(struct dns *d)
{
	struct timeval tv;

	if (d->channel == NULL || d->queries == 0)
		return -1;
	struct timeval *t = ares_timeout(d->channel, NULL, &tv);
	if (t == NULL)
		return -1;
	return (int32_t)(t->tv_sec * 1000 + t->tv_usec / 1000) + 1;
}

void dns_shutdown(struct dns *d)
{
	if (d->channel == NULL)
		return;
	ares_cancel(d->channel);
	ares_destroy(d->channel);
	d->channel = NULL;
	AN_ASSERT(d->queries == 0);
	for (uint32_t i = 0; i < DNS_SOCKETS_MAX; i++) {
		struct dns_poll *s = &d->polls[i];
		if (s->fd != -1 && s->armed != 0) {
			s->wanted = 0;
			slot_cancel(d, s);
		} else if (s->fd != -1) {
			s->fd = -1;
		}
	}
}
