/*
 * The blocking lookup (core/lookup.h): one c-ares channel a lookup, its
 * sockets polled beside the cancel descriptor until the answer, the
 * deadline or the cancel. A channel a lookup costs a read of resolv.conf;
 * the callers look up rarely (an alert, a command), so nothing is kept.
 */
#include "core/lookup.h"

#include <ares.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "core/an.h"
#include "core/timer.h"

struct lookup {
	bool done;
	int status;
	struct ares_addrinfo *result;
};

static void lookup_done(void *arg, int status, int timeouts, struct ares_addrinfo *result)
{
	struct lookup *lk = arg;

	(void)timeouts;
	lk->done = true;
	lk->status = status;
	lk->result = result;
}

/* Runs <channel> until the lookup is done, <deadline_ms> or <cancel_fd>: 0 or -errno. */
static int lookup_run(ares_channel channel, const struct lookup *lk, uint64_t deadline_ms,
		      int cancel_fd)
{
	while (!lk->done) {
		ares_socket_t socks[ARES_GETSOCK_MAXNUM];
		struct pollfd p[ARES_GETSOCK_MAXNUM + 1];
		nfds_t n = 0;
		/* The bitmask's writable half reaches bit 31: read it unsigned, not through the
		 * macros' signed shifts. */
		unsigned bits = (unsigned)ares_getsock(channel, socks, ARES_GETSOCK_MAXNUM);
		for (unsigned i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
			bool readable = (bits & (1u << i)) != 0;
			bool writable = (bits & (1u << (i + ARES_GETSOCK_MAXNUM))) != 0;
			short events = (short)((readable ? POLLIN : 0) | (writable ? POLLOUT : 0));
			if (events != 0)
				p[n++] = (struct pollfd){ .fd = socks[i], .events = events };
		}
		p[n] = (struct pollfd){ .fd = cancel_fd, .events = POLLIN };
		uint64_t now = timer_now_ms();
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		struct timeval cap = { .tv_sec = (time_t)((deadline_ms - now) / 1000u),
				       .tv_usec =
					   (suseconds_t)((deadline_ms - now) % 1000u) * 1000 };
		struct timeval wait;
		struct timeval *tv = ares_timeout(channel, &cap, &wait);
		int ms = (int)(tv->tv_sec * 1000 + tv->tv_usec / 1000);
		int ready = poll(p, cancel_fd >= 0 ? n + 1 : n, ms > 0 ? ms : 1);
		if (ready < 0 && errno != EINTR)
			return -errno;
		if (cancel_fd >= 0 && p[n].revents != 0)
			return -ECANCELED;
		if (ready <= 0) {
			ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD); /* timeouts */
			continue;
		}
		for (nfds_t i = 0; i < n; i++) {
			if (p[i].revents == 0)
				continue;
			bool readable = (p[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
			bool writable = (p[i].revents & POLLOUT) != 0;
			ares_process_fd(channel, readable ? p[i].fd : ARES_SOCKET_BAD,
					writable ? p[i].fd : ARES_SOCKET_BAD);
		}
	}
	return 0;
}

int lookup_addresses(const char *servers, const char *name, uint16_t port, uint32_t timeout_ms,
		     int cancel_fd, struct sockaddr_storage *out, int cap, char *why,
		     size_t why_cap)
{
	/* Two tries, the second given twice the first's time, as the workers' (core/dns.c). */
	struct ares_options opts = { .timeout = (int)(timeout_ms / 3 ? timeout_ms / 3 : 1),
				     .tries = 2 };
	struct ares_addrinfo_hints hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct lookup lk = { 0 };
	ares_channel channel = NULL;
	char service[8];

	AN_ASSERT(name != NULL && out != NULL && cap > 0);
	if (ares_init_options(&channel, &opts, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES) != ARES_SUCCESS)
		return -ENOMEM;
	if (servers != NULL && ares_set_servers_ports_csv(channel, servers) != ARES_SUCCESS) {
		ares_destroy(channel);
		snprintf(why, why_cap, "the resolver servers %s are refused", servers);
		return -EINVAL;
	}
	snprintf(service, sizeof(service), "%u", port);
	ares_getaddrinfo(channel, name, service, &hints, lookup_done, &lk);
	int ret = lookup_run(channel, &lk, timer_now_ms() + timeout_ms, cancel_fd);
	if (ret != 0)
		ares_cancel(channel); /* lookup_done runs, with ARES_ECANCELLED */
	ares_destroy(channel);
	AN_ASSERT(lk.done);
	int count = 0;
	if (ret == 0 && lk.status == ARES_SUCCESS && lk.result != NULL) {
		for (const struct ares_addrinfo_node *a = lk.result->nodes;
		     a != NULL && count < cap; a = a->ai_next) {
			if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
			    (size_t)a->ai_addrlen > sizeof(out[0]))
				continue;
			memset(&out[count], 0, sizeof(out[0]));
			memcpy(&out[count++], a->ai_addr, (size_t)a->ai_addrlen);
		}
	}
	if (lk.result != NULL)
		ares_freeaddrinfo(lk.result);
	if (ret != 0)
		return ret;
	if (count == 0) {
		snprintf(why, why_cap, "%s does not resolve: %s", name,
			 lk.status != ARES_SUCCESS ? ares_strerror(lk.status) : "no address");
		return -EHOSTUNREACH;
	}
	return count;
}
