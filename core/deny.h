/*
 * The deny contract's wire form (docs/design.md section 4): every refusal is an
 * HTTP/1.1 response an agent can read, with X-Agent-Reason, X-Agent-
 * Instruction, X-Agent-Rule (when a rule decided) and a JSON body carrying
 * the same facts plus host, port, sandbox and the audit record id.
 */
#ifndef AN_CORE_DENY_H
#define AN_CORE_DENY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/reason.h"

struct deny_info {
	enum reason reason;      /* decides the status, see reason_status() */
	const char *rule;        /* NULL when no rule decided */
	const char *instruction; /* NULL: reason_instruction(reason) */
	const char *host;        /* may be NULL (unparseable request) */
	size_t host_len;
	uint16_t port;
	const char *sandbox;
	const char *audit_id;
	uint32_t retry_after_s; /* 429/503: Retry-After seconds; 0 omits it */
	/* private_address: the address the policy refused and its class, in the body; NULL:
	 * neither field. Only for a host the policy allows (nothing is told of others). */
	const char *address;
	const char *address_class;
	bool keep_alive; /* the connection stays open for the next request */
};

/*
 * Writes the whole response (head and body, "Connection: close", or
 * "Connection: keep-alive" with <d->keep_alive>) for <d> into
 * <out>/<cap>. Strings are escaped for JSON, and any control character in a
 * header value is replaced by a space so nothing can split the header block.
 * Returns the length, or -EMSGSIZE when <cap> is too small. Borrows <d>.
 */
ssize_t deny_format(const struct deny_info *d, char *out, size_t cap);

/*
 * A private_address refusal's audit detail ("address <a> class <c>", into
 * <detail>/<detail_cap>) and instruction (into <instruction>/<instruction_cap>)
 * for <host>/<host_len>, which resolved to <address> of class <address_class>
 * (docs/policy.md). The engine's refusal and `agentsnet check --resolve` both
 * write them here, so the two say the same.
 */
void deny_private_address_text(const char *host, size_t host_len, const char *address,
			       const char *address_class, char *detail, size_t detail_cap,
			       char *instruction, size_t instruction_cap);

#endif /* AN_CORE_DENY_H */
