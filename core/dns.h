/*
 * Asynchronous name resolution on the worker's ring (the sandbox has no DNS;
 * the proxy resolves for it). c-ares does the protocol; its sockets are
 * polled through io_uring, so a lookup never blocks the worker and needs no
 * thread. One resolver per worker, owned by that worker's thread.
 */
#ifndef AN_CORE_DNS_H
#define AN_CORE_DNS_H

#include <ares.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/ring.h"
#include "core/ud.h"

/* Sockets c-ares may hold at once: a UDP and a TCP one for each of the 16 servers a
 * policy may name (POLICY_DNS_SERVERS_MAX), so no lookup is ever left without one. */
#define DNS_SOCKETS_MAX 32u
#define DNS_ADDRS_MAX   8u
#define DNS_OP_POLL     UD_OP_DNS_POLL /* user_data op of a resolver socket poll */

/*
 * Called once per dns_resolve that returned 0, from inside dns_on_cqe or
 * dns_tick (never from dns_resolve itself). <status> is 0 with <count> >= 1
 * addresses (port set), -ENOENT (no such name or no address), -ETIMEDOUT, or
 * -EIO (server failure). <addrs> is borrowed for the call.
 */
typedef void (*dns_done_fn)(void *arg, int status, const struct sockaddr_storage *addrs,
			    uint32_t count);

struct dns_poll {
	int fd;          /* -1: slot free */
	uint32_t wanted; /* POLLIN/POLLOUT c-ares asked for; 0: removing */
	uint32_t armed;  /* events of the poll in flight, 0 when none */
} __attribute__((aligned(16)));

struct dns {
	ares_channel channel; /* NULL until the first lookup */
	struct ring *ring;
	const char *servers; /* borrowed CSV, NULL: the system resolver */
	uint32_t timeout_ms;
	uint32_t queries;       /* lookups in flight */
	uint32_t polls_pending; /* polls in flight (for the leak check) */
	struct dns_poll polls[DNS_SOCKETS_MAX];
};

/* Global c-ares initialisation; once per process before any dns_init. */
int dns_library_init(void);
void dns_library_cleanup(void);

/* Prepares <d>; the channel itself is created on first use. Never fails. */
void dns_init(struct dns *d, struct ring *ring, const char *servers, uint32_t timeout_ms);
/*
 * Starts resolving <name> (NUL-terminated, IPv4 and IPv6) for <port>.
 * Returns 0 (<done> will run exactly once, later) or -errno (-ENOMEM, -EINVAL
 * for bad servers); on error <done> never runs.
 */
int dns_resolve(struct dns *d, const char *name, uint16_t port, dns_done_fn done, void *arg);
/* Handles the completion of a resolver socket poll (user_data op DNS_OP_POLL). */
void dns_on_cqe(struct dns *d, struct dns_poll *slot, int res);
/* Runs c-ares timeouts; call once per loop turn while queries are in flight. */
void dns_tick(struct dns *d);
/* Milliseconds until c-ares needs dns_tick, or -1 when idle. */
int32_t dns_wait_ms(struct dns *d);
/*
 * Cancels every lookup (their callbacks run with -ECANCELED) and destroys the
 * channel; polls still in flight are removed and must be reaped before the
 * ring goes away (polls_pending reaches 0).
 */
void dns_shutdown(struct dns *d);

#endif /* AN_CORE_DNS_H */
