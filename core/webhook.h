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
 * The URL is https:// to any host, or http:// to a loopback address (a
 * node-local relay: Alertmanager, Vector, a sidecar). An alert names
 * sandboxes and the hosts they tried, and an authorization value may go with
 * it: neither crosses a network in clear text. Over https the receiver's
 * certificate is verified against the system roots or the policy's
 * `ca_file`, for the URL's name or address, through the daemon's TLS client
 * (core/term.h's client session: core/ does not include tls/); a name is
 * resolved at each try, from the thread, with c-ares and the daemon's
 * `dns_servers`, so a receiver that moves is followed.
 */
#ifndef AN_CORE_WEBHOOK_H
#define AN_CORE_WEBHOOK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/limits.h"
#include "core/term.h"
#include "core/watch.h"

/* Alerts waiting for delivery at most. */
#define WEBHOOK_QUEUE 64u
/* Addresses of an https receiver's name tried at most, in the answer's order. */
#define WEBHOOK_ADDRESSES_MAX 8
/* Tries of one alert at most, the first included. */
#define WEBHOOK_ATTEMPTS 5u
/* The URL's bytes at most, and its path's. */
#define WEBHOOK_URL_BYTES_MAX  2048u
#define WEBHOOK_PATH_BYTES_MAX 1024u
/* An authorization value's bytes at most (a bearer token, a basic credential). */
#define WEBHOOK_AUTHORIZATION_BYTES_MAX 4096u
/* One try's time at most when the policy names none: connect, send, answer. */
#define WEBHOOK_TIMEOUT_MS_DEFAULT 5000u

/* Where alerts go: a parsed URL. */
struct webhook_target {
	bool tls;      /* https:// */
	uint16_t port; /* 1..65535 */
	/* http://: the loopback address, fixed at the parse. */
	struct sockaddr_storage addr;
	socklen_t addr_len;
	/* https://: the host as the URL names it, lower case, an IPv6 literal without its
	 * brackets: what is resolved, sent as SNI (a name) and checked in the certificate. */
	char name[LIMITS_HOST_BYTES_MAX + 1];
	char host[LIMITS_HOST_BYTES_MAX + 9];  /* the Host header: "127.0.0.1:9000", "[::1]:80" */
	char path[WEBHOOK_PATH_BYTES_MAX + 1]; /* origin form, "/" at least */
};

/*
 * Parses <url> (<len> bytes), scheme and host case-insensitive:
 *   https://HOST[:PORT][/PATH], HOST a DNS name (letters, digits, '-' and
 *     '.', labels of 1..63 bytes), an IPv4 literal or a bracketed IPv6 one;
 *     PORT 443 if none;
 *   http://ADDRESS[:PORT][/PATH], ADDRESS a loopback IPv4 literal, [::1] or
 *     localhost; PORT 80 if none.
 * PORT is 1..65535, PATH visible ASCII without '#'; no user part. 0 and *<t>
 * set, or -EINVAL with <why> (<cap> bytes) saying what is wrong. Pure.
 */
int webhook_target_parse(const char *url, size_t len, struct webhook_target *t, char *why,
			 size_t cap);

struct webhook {
	struct webhook_target target;
	char *authorization; /* owned (wiped at the end); NULL: no Authorization header */
	uint32_t timeout_ms;
	/* https:// only: the TLS client, its state (the thread's alone) and the roots to
	 * verify against (owned; NULL: the system's); the resolver's servers (owned; NULL:
	 * the system's). */
	const struct term_ops *term;
	void *term_state;
	char *ca_file;
	char *dns_servers;
	char tls_error[LIMITS_HOST_BYTES_MAX +
		       160]; /* the last TLS or lookup failure, for the log; the thread's */
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

/* How to reach the receiver: what the policy's daemon.alert_webhook says, and the daemon's. */
struct webhook_options {
	const char *url;           /* checked by the policy's loader, parsed again here */
	const char *authorization; /* copied; NULL: none */
	uint32_t timeout_ms;       /* a try's; 0: WEBHOOK_TIMEOUT_MS_DEFAULT */
	const char *ca_file;       /* https: PEM roots (copied); NULL: the system's */
	const char *dns_servers;   /* https: c-ares CSV; NULL: /etc/resolv.conf */
	/* https: the daemon's TLS client and its argument; NULL refuses an https URL. */
	const struct term_ops *term;
	void *term_arg;
};

/*
 * Starts delivering as <o> says. 0, -EINVAL (the URL, or https without a
 * TLS client) or -errno, logged; on failure nothing is left to stop.
 */
int webhook_start(struct webhook *wh, const struct webhook_options *o);

/* Queues <a> for delivery, or drops and counts it when WEBHOOK_QUEUE wait. Any thread; never
 * waits for the network. */
void webhook_enqueue(struct webhook *wh, const struct watch_alert *a);

/*
 * Stops the thread: the try under way ends within its timeout, what still
 * waits is dropped, counted and logged. Then frees what <wh> owns.
 */
void webhook_stop(struct webhook *wh);

#endif /* AN_CORE_WEBHOOK_H */
