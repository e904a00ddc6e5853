/*
 * The alert webhook (issue 21): every alert the detectors raise is POSTed as
 * JSON (watch_alert_json) to the operator's URL, from a thread of its own, so
 * a slow or dead receiver never holds a worker. A worker only copies the
 * alert into a bounded queue under a mutex; past WEBHOOK_QUEUE waiting, the
 * newest is dropped and counted (the audit record of it is written anyway).
 *
 * Delivery: one connection a POST, HTTP/1.1 with Connection: close; a 2xx
 * answer delivers it. A failure to connect, a timeout, a 408, 429 or 5xx is
 * tried again, up to WEBHOOK_ATTEMPTS times, after 0.5, 1, 2 and 4 s; any
 * other answer fails it at once (the receiver refused this body and would
 * refuse it again). Every outcome is counted (stats, metrics) and a failure
 * is logged with the receiver's status or the error.
 *
 * The URL is http:// to a loopback address: a node-local relay (Alertmanager,
 * Vector, a sidecar) that forwards alerts on, over TLS, to where they page.
 * An alert names sandboxes and the hosts they tried, and an authorization
 * value may go with it: neither crosses a network in clear text.
 */
#ifndef AN_CORE_WEBHOOK_H
#define AN_CORE_WEBHOOK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/watch.h"

/* Alerts waiting for delivery at most. */
#define WEBHOOK_QUEUE 64u
/* Tries of one alert at most, the first included. */
#define WEBHOOK_ATTEMPTS 5u
/* The URL's bytes at most, and its path's. */
#define WEBHOOK_URL_BYTES_MAX  2048u
#define WEBHOOK_PATH_BYTES_MAX 1024u
/* An authorization value's bytes at most (a bearer token, a basic credential). */
#define WEBHOOK_AUTHORIZATION_BYTES_MAX 4096u
/* One try's time at most when the policy names none: connect, send, answer. */
#define WEBHOOK_TIMEOUT_MS_DEFAULT 5000u

/* Where alerts go: a parsed http:// URL. */
struct webhook_target {
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char host[64];                         /* the Host header: "127.0.0.1:9000", "[::1]:80" */
	char path[WEBHOOK_PATH_BYTES_MAX + 1]; /* origin form, "/" at least */
};

/*
 * Parses <url> (<len> bytes): http://ADDRESS[:PORT][/PATH], ADDRESS a loopback
 * IPv4 literal, [::1] or localhost, PORT 1..65535 (80 if none), PATH visible
 * ASCII without '#'. 0 and *<t> set, or -EINVAL with <why> (<cap> bytes)
 * saying what is wrong. Pure.
 */
int webhook_target_parse(const char *url, size_t len, struct webhook_target *t, char *why,
			 size_t cap);

struct webhook {
	struct webhook_target target;
	char *authorization; /* owned (wiped at the end); NULL: no Authorization header */
	uint32_t timeout_ms;
	pthread_t thread;
	bool started;
	int stop_fd;          /* an eventfd written at the stop: wakes every wait of a try */
	pthread_mutex_t lock; /* the queue and stopping */
	pthread_cond_t wake;  /* signalled on a new alert and at the stop */
	bool stopping;
	uint32_t head;  /* the oldest waiting */
	uint32_t count; /* waiting */
	struct watch_alert queue[WEBHOOK_QUEUE];
	/* Counters, written by their one writer, read by any thread. */
	_Atomic uint64_t delivered; /* answered 2xx */
	_Atomic uint64_t failed;    /* refused, or every try failed */
	_Atomic uint64_t dropped;   /* the queue was full, or the daemon stopped first */
	_Atomic uint64_t retried;   /* tries after the first */
};

/*
 * Starts delivering to <url> (checked by the policy's loader, parsed again
 * here), with <authorization> (copied; NULL: none) and <timeout_ms> a try.
 * 0, -EINVAL (the URL) or -errno; on failure nothing is left to stop.
 */
int webhook_start(struct webhook *wh, const char *url, const char *authorization,
		  uint32_t timeout_ms);

/* Queues <a> for delivery, or drops and counts it when WEBHOOK_QUEUE wait. Any thread; never
 * waits for the network. */
void webhook_enqueue(struct webhook *wh, const struct watch_alert *a);

/*
 * Stops the thread: the try under way ends within its timeout, what still
 * waits is dropped, counted and logged. Then frees what <wh> owns.
 */
void webhook_stop(struct webhook *wh);

#endif /* AN_CORE_WEBHOOK_H */
