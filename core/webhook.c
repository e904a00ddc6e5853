/*
 * The alert webhook's thread and its HTTP client (core/webhook.h).
 *
 * The thread waits on the queue's condition variable, takes the oldest
 * alert, formats it, and tries it until it is delivered, refused or out of
 * tries; each try is one connection: a non-blocking connect, the request
 * written whole, the status line read, every step under the try's one
 * deadline and woken at once by the stop's eventfd. Nothing here touches a
 * worker's state: a worker's only part is webhook_enqueue's copy.
 *
 * Rejected: a connection kept between alerts (alerts are rare, a relay may
 * restart between two, and a fresh connection has no state to get wrong);
 * delivering from the worker's ring (a receiver's stall would be every
 * sandbox's).
 */
#include "core/webhook.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/log.h"
#include "core/lookup.h"
#include "core/pool.h"
#include "core/timer.h"

/* The JSON of one alert at most (watch_alert_json's, every name escaped). */
#define WEBHOOK_BODY_BYTES 8192u
/* The request head at most: the path, the Host, the authorization and fixed fields. */
#define WEBHOOK_HEAD_BYTES (WEBHOOK_PATH_BYTES_MAX + WEBHOOK_AUTHORIZATION_BYTES_MAX + 512u)
/* The first wait before a try again; it doubles each time. */
#define WEBHOOK_BACKOFF_MS 500u

/* Waits for <events> on <fd> or the stop until <deadline_ms>: 0, -ETIMEDOUT, -ECANCELED. */
static int wait_for(const struct webhook *wh, int fd, short events, uint64_t deadline_ms)
{
	for (;;) {
		uint64_t now = timer_now_ms();
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		struct pollfd p[2] = { { .fd = fd, .events = events },
				       { .fd = wh->stop_fd, .events = POLLIN } };
		/* Without a socket (a wait between tries), the stop alone is polled. */
		struct pollfd *first = fd >= 0 ? &p[0] : &p[1];
		int n = poll(first, fd >= 0 ? 2 : 1, (int)(deadline_ms - now));
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n <= 0)
			continue;
		if (p[1].revents != 0)
			return -ECANCELED;
		if (p[0].revents != 0)
			return 0;
	}
}

/* Writes <len> bytes of <buf> to <fd> before <deadline_ms>: 0 or -errno. */
static int write_all(const struct webhook *wh, int fd, const void *buf, size_t len,
		     uint64_t deadline_ms)
{
	const char *at = buf;

	while (len > 0) {
		ssize_t n = send(fd, at, len, MSG_NOSIGNAL);
		if (n > 0) {
			at += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		int ret = wait_for(wh, fd, POLLOUT, deadline_ms);
		if (ret != 0)
			return ret;
	}
	return 0;
}

/*
 * One try's connection: a socket, and over https the TLS client session on
 * it (NULL over http). Every call below keeps to the try's deadline.
 */
struct link {
	int fd;
	void *tls;
};

/* Over https, fails the try with the session's reason kept for the log: -EBADMSG. */
static int tls_failed(struct webhook *wh, const struct link *l)
{
	snprintf(wh->tls_error, sizeof(wh->tls_error), "TLS: %s", wh->term->error(l->tls));
	return -EBADMSG;
}

/* Sends the ciphertext the session has waiting: 0 or -errno. */
static int tls_flush(struct webhook *wh, const struct link *l, uint64_t deadline_ms)
{
	const uint8_t *data;
	size_t n;

	while ((n = wh->term->out_peek(l->tls, &data)) > 0) {
		int ret = write_all(wh, l->fd, data, n, deadline_ms);
		if (ret != 0)
			return ret;
		wh->term->out_consume(l->tls, n);
	}
	return 0;
}

/* Reads what ciphertext the socket has into the session (its end too): 0 or -errno. */
static int tls_pull(struct webhook *wh, const struct link *l, uint64_t deadline_ms)
{
	uint8_t buf[16384];

	for (;;) {
		ssize_t n = recv(l->fd, buf, sizeof(buf), 0);
		if (n == 0) {
			wh->term->feed_eof(l->tls);
			return 0;
		}
		if (n > 0) {
			for (size_t fed = 0; fed < (size_t)n;) {
				ssize_t took = wh->term->feed(l->tls, buf + fed, (size_t)n - fed);
				if (took <= 0)
					return took < 0 ? (int)took : -EPROTO;
				fed += (size_t)took;
			}
			return 0;
		}
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		int ret = wait_for(wh, l->fd, POLLIN, deadline_ms);
		if (ret != 0)
			return ret;
	}
}

/* Over https, the handshake, the receiver's certificate verified: 0 or -errno. */
static int link_handshake(struct webhook *wh, const struct link *l, uint64_t deadline_ms)
{
	for (;;) {
		enum term_status st = wh->term->handshake(l->tls);
		int ret = tls_flush(wh, l, deadline_ms);
		if (ret != 0)
			return ret;
		if (st == TERM_OK && wh->term->established(l->tls))
			return 0;
		if (st == TERM_ERROR || st == TERM_CLOSED)
			return tls_failed(wh, l);
		if (st == TERM_WANT_READ && (ret = tls_pull(wh, l, deadline_ms)) != 0)
			return ret;
	}
}

/* Sends <len> bytes of <buf> (encrypted over https): 0 or -errno. */
static int link_send(struct webhook *wh, const struct link *l, const char *buf, size_t len,
		     uint64_t deadline_ms)
{
	if (l->tls == NULL)
		return write_all(wh, l->fd, buf, len, deadline_ms);
	while (len > 0) {
		size_t took = 0;
		enum term_status st = wh->term->write(l->tls, buf, len, &took);
		int ret = tls_flush(wh, l, deadline_ms);
		if (ret != 0)
			return ret;
		if (st == TERM_ERROR || st == TERM_CLOSED)
			return tls_failed(wh, l);
		if (st == TERM_WANT_READ && (ret = tls_pull(wh, l, deadline_ms)) != 0)
			return ret;
		buf += took;
		len -= took;
	}
	return 0;
}

/* Receives up to <cap> bytes into <buf>: how many, 0 at the end, or -errno. */
static ssize_t link_recv(struct webhook *wh, const struct link *l, char *buf, size_t cap,
			 uint64_t deadline_ms)
{
	for (;;) {
		if (l->tls != NULL) {
			size_t n = 0;
			enum term_status st = wh->term->read(l->tls, buf, cap, &n);
			if (st == TERM_OK && n > 0)
				return (ssize_t)n;
			if (st == TERM_CLOSED)
				return 0;
			if (st == TERM_ERROR)
				return tls_failed(wh, l);
			int ret = tls_flush(wh, l, deadline_ms);
			if (ret == 0 && st == TERM_WANT_READ)
				ret = tls_pull(wh, l, deadline_ms);
			if (ret != 0)
				return ret;
			continue;
		}
		ssize_t n = recv(l->fd, buf, cap, 0);
		if (n >= 0)
			return n;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		int ret = wait_for(wh, l->fd, POLLIN, deadline_ms);
		if (ret != 0)
			return ret;
	}
}

/*
 * Reads the answer's status line before <deadline_ms>: its status (100..599),
 * or -EPROTO (not HTTP/1.x NNN), -ETIMEDOUT, -ECANCELED, -errno.
 */
static int read_status(struct webhook *wh, const struct link *l, uint64_t deadline_ms)
{
	char line[256];
	size_t fill = 0;

	for (;;) {
		ssize_t n = link_recv(wh, l, line + fill, sizeof(line) - 1 - fill, deadline_ms);
		if (n < 0)
			return (int)n;
		if (n == 0)
			break;
		fill += (size_t)n;
		line[fill] = '\0';
		if (memchr(line, '\n', fill) != NULL || fill == sizeof(line) - 1)
			break;
	}
	line[fill] = '\0';
	unsigned status = 0;
	char minor = 0;
	if (sscanf(line, "HTTP/1.%c %3u", &minor, &status) != 2 || status < 100 || status > 599)
		return -EPROTO;
	return (int)status;
}

/* A non-blocking socket connected to <addr> before <deadline_ms>: the fd, or -errno. */
static int connect_to(const struct webhook *wh, const struct sockaddr *addr, socklen_t len,
		      uint64_t deadline_ms)
{
	int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int ret = 0;
	if (connect(fd, addr, len) != 0) {
		ret = errno == EINPROGRESS ? wait_for(wh, fd, POLLOUT, deadline_ms) : -errno;
		int err = 0;
		socklen_t err_len = sizeof(err);
		if (ret == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 &&
		    err != 0)
			ret = -err;
	}
	if (ret != 0) {
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * The try's connection before <deadline_ms>: http, to the loopback address;
 * https, to each address the name resolves to in turn, until one connects,
 * then the handshake. 0 and *<l>, or -errno (*<l> holds nothing).
 */
static int link_open(struct webhook *wh, struct link *l, uint64_t deadline_ms)
{
	*l = (struct link){ .fd = -1 };
	if (!wh->target.tls) {
		l->fd = connect_to(wh, (const struct sockaddr *)&wh->target.addr,
				   wh->target.addr_len, deadline_ms);
		return l->fd < 0 ? l->fd : 0;
	}
	struct sockaddr_storage addrs[WEBHOOK_ADDRESSES_MAX];
	uint64_t now = timer_now_ms();
	int count =
	    lookup_addresses(wh->dns_servers, wh->target.name, wh->target.port,
			     (uint32_t)(deadline_ms > now ? deadline_ms - now : 1), wh->stop_fd,
			     addrs, WEBHOOK_ADDRESSES_MAX, wh->tls_error, sizeof(wh->tls_error));
	if (count < 0)
		return count;
	int ret = -EHOSTUNREACH;
	for (int i = 0; i < count && l->fd < 0; i++) {
		const struct sockaddr *sa = (const struct sockaddr *)&addrs[i];
		ret = connect_to(wh, sa,
				 sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
							  : sizeof(struct sockaddr_in6),
				 deadline_ms);
		if (ret >= 0)
			l->fd = ret;
		if (ret == -ECANCELED || ret == -ETIMEDOUT)
			break;
	}
	if (l->fd < 0)
		return ret;
	l->tls = wh->term->client_new(wh->term_state, wh->target.name, strlen(wh->target.name),
				      wh->ca_file);
	ret = l->tls == NULL ? -ENOMEM : link_handshake(wh, l, deadline_ms);
	if (ret == -ENOMEM)
		snprintf(wh->tls_error, sizeof(wh->tls_error),
			 "TLS: no client session (out of memory, or %s does not load)",
			 wh->ca_file != NULL ? wh->ca_file : "the system roots");
	return ret;
}

static void link_close(struct webhook *wh, struct link *l)
{
	if (l->tls != NULL)
		wh->term->session_free(l->tls);
	if (l->fd >= 0)
		close(l->fd);
	*l = (struct link){ .fd = -1 };
}

/* One try of <body>: the receiver's status, or -errno (a transport failure). */
static int try_once(struct webhook *wh, const char *body, size_t body_len)
{
	char head[WEBHOOK_HEAD_BYTES];
	uint64_t deadline = timer_now_ms() + wh->timeout_ms;
	struct link l;

	int n = snprintf(head, sizeof(head),
			 "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: agentsnetd\r\n"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n%s%s%s"
			 "Connection: close\r\n\r\n",
			 wh->target.path, wh->target.host, body_len,
			 wh->authorization != NULL ? "Authorization: " : "",
			 wh->authorization != NULL ? wh->authorization : "",
			 wh->authorization != NULL ? "\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof(head))
		return -ENOSPC;
	int ret = link_open(wh, &l, deadline);
	if (ret == 0)
		ret = link_send(wh, &l, head, (size_t)n, deadline);
	if (ret == 0)
		ret = link_send(wh, &l, body, body_len, deadline);
	if (ret == 0)
		ret = read_status(wh, &l, deadline);
	explicit_bzero(head, sizeof(head)); /* it held the authorization */
	link_close(wh, &l);
	return ret;
}

/* Whether a try that got <result> (a status or -errno) may be tried again. */
static bool worth_again(int result)
{
	if (result < 0)
		return result != -ECANCELED && result != -ENOSPC;
	return result == 408 || result == 429 || result >= 500;
}

/* Tries <a> until it is delivered, refused, out of tries or stopped, and counts the outcome. */
static void deliver(struct webhook *wh, const struct watch_alert *a)
{
	char body[WEBHOOK_BODY_BYTES];
	int len = watch_alert_json(a, body, sizeof(body));
	int result = -ENOSPC;

	if (len < 0) {
		atomic_fetch_add(&wh->failed, 1);
		log_error("webhook: alert %llu does not fit %u bytes; not sent",
			  (unsigned long long)a->seq, WEBHOOK_BODY_BYTES);
		return;
	}
	for (uint32_t attempt = 1; attempt <= WEBHOOK_ATTEMPTS; attempt++) {
		if (attempt > 1) {
			atomic_fetch_add(&wh->retried, 1);
			uint64_t wait = (uint64_t)WEBHOOK_BACKOFF_MS << (attempt - 2);
			if (wait_for(wh, -1, 0, timer_now_ms() + wait) == -ECANCELED) {
				result = -ECANCELED;
				break;
			}
		}
		result = try_once(wh, body, (size_t)len);
		if (result >= 200 && result <= 299) {
			atomic_fetch_add(&wh->delivered, 1);
			if (attempt > 1)
				log_info("webhook: alert %llu (%s, sandbox %s) delivered at try %u",
					 (unsigned long long)a->seq,
					 alert_detector_name(a->ev.detector), a->sandbox, attempt);
			return;
		}
		if (!worth_again(result))
			break;
	}
	if (result == -ECANCELED) {
		atomic_fetch_add(&wh->dropped, 1);
		log_warn("webhook: alert %llu (%s, sandbox %s) not delivered: the daemon stops",
			 (unsigned long long)a->seq, alert_detector_name(a->ev.detector),
			 a->sandbox);
		return;
	}
	atomic_fetch_add(&wh->failed, 1);
	const char *scheme = wh->target.tls ? "https" : "http";
	if (result > 0)
		log_warn("webhook: alert %llu (%s, sandbox %s) not delivered: %s://%s%s "
			 "answered %d",
			 (unsigned long long)a->seq, alert_detector_name(a->ev.detector),
			 a->sandbox, scheme, wh->target.host, wh->target.path, result);
	else
		log_warn("webhook: alert %llu (%s, sandbox %s) not delivered: %s://%s%s: %s",
			 (unsigned long long)a->seq, alert_detector_name(a->ev.detector),
			 a->sandbox, scheme, wh->target.host, wh->target.path,
			 result == -EPROTO ? "not an HTTP answer"
			 : result == -EBADMSG || result == -EHOSTUNREACH || result == -ENOMEM
			     ? wh->tls_error
			     : strerror(-result));
}

static void *webhook_main(void *arg)
{
	struct webhook *wh = arg;
	struct watch_alert a;

	for (;;) {
		pthread_mutex_lock(&wh->lock);
		while (wh->count == 0 && !wh->stopping)
			pthread_cond_wait(&wh->wake, &wh->lock);
		if (wh->stopping) {
			pthread_mutex_unlock(&wh->lock);
			break;
		}
		a = wh->queue[wh->head];
		wh->head = (wh->head + 1) % WEBHOOK_QUEUE;
		wh->count--;
		pthread_mutex_unlock(&wh->lock);
		deliver(wh, &a);
	}
	return NULL;
}

/* Over https: the TLS client's state and the resolver's servers. 0, or -errno logged. */
static int tls_open(struct webhook *wh, const struct webhook_options *o)
{
	char err[160];

	if (o->term == NULL) {
		log_error("webhook: the URL is https:// and this daemon has no TLS client");
		return -EINVAL;
	}
	wh->term = o->term;
	wh->term_state = o->term->worker_new(o->term_arg, UINT32_MAX, err, sizeof(err));
	if (wh->term_state == NULL) {
		log_error("webhook: TLS: %s", err);
		return -ENOMEM;
	}
	if (o->ca_file != NULL &&
	    (wh->ca_file = pool_strndup(o->ca_file, strlen(o->ca_file))) == NULL)
		return -ENOMEM;
	if (o->dns_servers != NULL &&
	    (wh->dns_servers = pool_strndup(o->dns_servers, strlen(o->dns_servers))) == NULL)
		return -ENOMEM;
	return 0;
}

/* What <wh> owns but its thread: for webhook_start's failures and webhook_stop. */
static void release(struct webhook *wh)
{
	if (wh->stop_fd >= 0)
		close(wh->stop_fd);
	wh->stop_fd = -1;
	if (wh->authorization != NULL)
		pool_free_secret(wh->authorization, strlen(wh->authorization) + 1);
	wh->authorization = NULL;
	AN_FREE(&wh->dns_servers);
	if (wh->term_state != NULL)
		wh->term->worker_free(wh->term_state);
	wh->term_state = NULL;
	AN_FREE(&wh->ca_file);
}

int webhook_start(struct webhook *wh, const struct webhook_options *o)
{
	char why[160];

	AN_ASSERT(o != NULL && o->url != NULL);
	*wh = (struct webhook){ .stop_fd = -1,
				.timeout_ms = o->timeout_ms != 0 ? o->timeout_ms
								 : WEBHOOK_TIMEOUT_MS_DEFAULT };
	if (webhook_target_parse(o->url, strlen(o->url), &wh->target, why, sizeof(why)) != 0) {
		log_error("webhook: the URL %s", why);
		return -EINVAL;
	}
	int ret = wh->target.tls ? tls_open(wh, o) : 0;
	if (ret == 0 && o->authorization != NULL) {
		wh->authorization = pool_strndup(o->authorization, strlen(o->authorization));
		if (wh->authorization == NULL)
			ret = -ENOMEM;
	}
	if (ret == 0 && (wh->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0)
		ret = -errno;
	if (ret != 0) {
		release(wh);
		return ret;
	}
	pthread_mutex_init(&wh->lock, NULL);
	pthread_cond_init(&wh->wake, NULL);
	ret = -pthread_create(&wh->thread, NULL, webhook_main, wh);
	if (ret != 0) {
		log_error("webhook: cannot start its thread: %s", strerror(-ret));
		pthread_cond_destroy(&wh->wake);
		pthread_mutex_destroy(&wh->lock);
		release(wh);
		return ret;
	}
	(void)pthread_setname_np(wh->thread, "an-webhook");
	wh->started = true;
	log_info("webhook: alerts go to %s://%s%s%s%s", wh->target.tls ? "https" : "http",
		 wh->target.host, wh->target.path, wh->ca_file != NULL ? ", verified against " : "",
		 wh->ca_file != NULL ? wh->ca_file : "");
	return 0;
}

void webhook_enqueue(struct webhook *wh, const struct watch_alert *a)
{
	bool queued = false;

	pthread_mutex_lock(&wh->lock); /* rare: once per alert */
	if (wh->count < WEBHOOK_QUEUE && !wh->stopping) {
		wh->queue[(wh->head + wh->count) % WEBHOOK_QUEUE] = *a;
		wh->count++;
		queued = true;
		pthread_cond_signal(&wh->wake);
	}
	pthread_mutex_unlock(&wh->lock);
	if (!queued)
		atomic_fetch_add(&wh->dropped, 1);
}

void webhook_stop(struct webhook *wh)
{
	uint32_t left = 0;

	if (wh->started) {
		pthread_mutex_lock(&wh->lock);
		wh->stopping = true;
		left = wh->count;
		wh->count = 0;
		pthread_cond_signal(&wh->wake);
		pthread_mutex_unlock(&wh->lock);
		uint64_t one = 1;
		if (write(wh->stop_fd, &one, sizeof(one)) != sizeof(one))
			log_error("webhook: stop: %s", strerror(errno));
		pthread_join(wh->thread, NULL);
		wh->started = false;
		pthread_mutex_destroy(&wh->lock);
		pthread_cond_destroy(&wh->wake);
	}
	if (left > 0) {
		atomic_fetch_add(&wh->dropped, left);
		log_warn("webhook: %u alerts not delivered: the daemon stops (each is in the audit "
			 "log)",
			 left);
	}
	release(wh);
}
