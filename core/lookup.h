/*
 * A blocking name lookup with c-ares, for the threads and programs that may
 * wait (the alert webhook's thread, `agentsnet check --resolve`), never a
 * worker (core/dns.h is the workers' resolver, on their rings).
 *
 * It asks what the workers ask, the way they ask it: the policy's resolver
 * servers (else /etc/resolv.conf), /etc/hosts first, IPv4 and IPv6, two
 * tries within the timeout; the policy's static hosts are the caller's to
 * consult first (verdict_ops.static_lookup), as the engine does.
 */
#ifndef AN_CORE_LOOKUP_H
#define AN_CORE_LOOKUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Resolves <name> (NUL-terminated) for <port> with the servers of <servers>
 * (c-ares CSV "ip[:port],..."; NULL: the system's), giving up after
 * <timeout_ms> or as soon as <cancel_fd> (an eventfd or pipe; -1: none)
 * becomes readable. Writes up to <cap> IPv4 and IPv6 addresses, port set,
 * in the order the answer gave them. Returns how many (at least one), or
 * -EHOSTUNREACH (no address, with c-ares's reason in <why>/<why_cap>),
 * -ETIMEDOUT, -ECANCELED, -EINVAL (<servers> refused), -ENOMEM.
 */
int lookup_addresses(const char *servers, const char *name, uint16_t port, uint32_t timeout_ms,
		     int cancel_fd, struct sockaddr_storage *out, int cap, char *why,
		     size_t why_cap);

#endif /* AN_CORE_LOOKUP_H */
