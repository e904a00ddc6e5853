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
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/an.h"
#include "core/log.h"
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
static int write_all(const struct webhook *wh, int fd, const char *buf, size_t len,
		     uint64_t deadline_ms)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n > 0) {
			buf += n;
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
 * Reads the answer's status line before <deadline_ms>: its status (100..599),
 * or -EPROTO (not HTTP/1.x NNN), -ETIMEDOUT, -ECANCELED, -errno.
 */
static int read_status(const struct webhook *wh, int fd, uint64_t deadline_ms)
{
	char line[256];
	size_t fill = 0;

	for (;;) {
		ssize_t n = recv(fd, line + fill, sizeof(line) - 1 - fill, 0);
		if (n > 0) {
			fill += (size_t)n;
			line[fill] = '\0';
			if (memchr(line, '\n', fill) != NULL || fill == sizeof(line) - 1)
				break;
			continue;
		}
		if (n == 0)
			break;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		int ret = wait_for(wh, fd, POLLIN, deadline_ms);
		if (ret != 0)
			return ret;
	}
	unsigned status = 0;
	char minor = 0;
	if (sscanf(line, "HTTP/1.%c %3u", &minor, &status) != 2 || status < 100 || status > 599)
		return -EPROTO;
	return (int)status;
}

/* One try of <body>: the receiver's status, or -errno (a transport failure). */
static int try_once(struct webhook *wh, const char *body, size_t body_len)
{
	char head[WEBHOOK_HEAD_BYTES];
	uint64_t deadline = timer_now_ms() + wh->timeout_ms;

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
	int fd = socket(wh->target.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int ret = 0;
	if (connect(fd, (const struct sockaddr *)&wh->target.addr, wh->target.addr_len) != 0) {
		ret = errno == EINPROGRESS ? wait_for(wh, fd, POLLOUT, deadline) : -errno;
		int err = 0;
		socklen_t err_len = sizeof(err);
		if (ret == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 &&
		    err != 0)
			ret = -err;
	}
	if (ret == 0)
		ret = write_all(wh, fd, head, (size_t)n, deadline);
	if (ret == 0)
		ret = write_all(wh, fd, body, body_len, deadline);
	if (ret == 0)
		ret = read_status(wh, fd, deadline);
	explicit_bzero(head, sizeof(head)); /* it held the authorization */
	close(fd);
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
	if (result > 0)
		log_warn("webhook: alert %llu (%s, sandbox %s) not delivered: http://%s%s "
			 "answered %d",
			 (unsigned long long)a->seq, alert_detector_name(a->ev.detector),
			 a->sandbox, wh->target.host, wh->target.path, result);
	else
		log_warn("webhook: alert %llu (%s, sandbox %s) not delivered: http://%s%s: %s",
			 (unsigned long long)a->seq, alert_detector_name(a->ev.detector),
			 a->sandbox, wh->target.host, wh->target.path,
			 result == -EPROTO ? "not an HTTP answer" : strerror(-result));
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

int webhook_start(struct webhook *wh, const char *url, const char *authorization,
		  uint32_t timeout_ms)
{
	char why[160];

	AN_ASSERT(url != NULL);
	*wh = (struct webhook){ .stop_fd = -1,
				.timeout_ms =
				    timeout_ms != 0 ? timeout_ms : WEBHOOK_TIMEOUT_MS_DEFAULT };
	if (webhook_target_parse(url, strlen(url), &wh->target, why, sizeof(why)) != 0) {
		log_error("webhook: the URL %s", why);
		return -EINVAL;
	}
	if (authorization != NULL) {
		wh->authorization = pool_strndup(authorization, strlen(authorization));
		if (wh->authorization == NULL)
			return -ENOMEM;
	}
	pthread_mutex_init(&wh->lock, NULL);
	pthread_cond_init(&wh->wake, NULL);
	wh->stop_fd = eventfd(0, EFD_CLOEXEC);
	int ret = wh->stop_fd < 0 ? -errno : -pthread_create(&wh->thread, NULL, webhook_main, wh);
	if (ret != 0) {
		log_error("webhook: cannot start its thread: %s", strerror(-ret));
		pthread_cond_destroy(&wh->wake);
		pthread_mutex_destroy(&wh->lock);
		webhook_stop(wh);
		return ret;
	}
	(void)pthread_setname_np(wh->thread, "an-webhook");
	wh->started = true;
	log_info("webhook: alerts go to http://%s%s", wh->target.host, wh->target.path);
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
	if (wh->stop_fd >= 0)
		close(wh->stop_fd);
	wh->stop_fd = -1;
	if (wh->authorization != NULL)
		pool_free_secret(wh->authorization, strlen(wh->authorization) + 1);
	wh->authorization = NULL;
}
