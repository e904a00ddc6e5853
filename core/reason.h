/*
 * The deny contract's vocabulary: tiers, stable reason codes and the HTTP
 * status each code is answered with.
 *
 * Reason codes are a versioned public contract (docs/reasons.md): agents and
 * operators match on the strings, so a code is never renamed or reused; new
 * ones are appended. Checklist when adding a code: the enum, the table in
 * core/reason.c, docs/reasons.md, and a test that produces it.
 */
#ifndef AN_CORE_REASON_H
#define AN_CORE_REASON_H

#include <stdint.h>

/* Bumped when a code is added; never when one would be changed (it can't be). */
#define REASON_CONTRACT_VERSION 14

enum tier {
	TIER_DENY = 0,
	TIER_PASSTHROUGH,
	TIER_LOCAL,
	TIER_FAKE,
	TIER_INJECT,
	TIER__COUNT,
};

enum reason {
	REASON_NONE = 0,
	REASON_HOST_NOT_ALLOWED,
	REASON_PORT_NOT_ALLOWED,
	REASON_PRIVATE_ADDRESS,
	REASON_TIER_UNAVAILABLE,
	REASON_BAD_REQUEST,
	REASON_NOT_A_PROXY_REQUEST,
	REASON_URI_TOO_LONG,
	REASON_HEADERS_TOO_LARGE,
	REASON_BODY_TOO_LARGE,
	REASON_REQUEST_TIMEOUT,
	REASON_DNS_FAILED,
	REASON_UPSTREAM_UNREACHABLE,
	REASON_UPSTREAM_TIMEOUT,
	REASON_UPSTREAM_BAD_RESPONSE,
	REASON_OVERLOADED,
	REASON_METHOD_NOT_ALLOWED,
	REASON_RATE_LIMITED,
	REASON_CONCURRENCY_LIMITED,
	REASON_SNI_MISMATCH,
	REASON_HOST_MISMATCH,
	REASON_CREDENTIAL_MISSING,
	REASON_UPSTREAM_TLS_FAILED,
	REASON_REDIRECT_DENIED,
	REASON_RESPONSE_TRUNCATED,
	REASON_UPGRADE_REFUSED,
	REASON_INGRESS_NOT_FOUND,
	REASON_PATH_NOT_ALLOWED,
	REASON_AGENT_NOT_LISTENING,
	REASON_TLS_HANDSHAKE_FAILED,
	REASON_CONNECTION_SHARE_EXCEEDED,
	REASON_PEER_NOT_AGENT,
	REASON_PLACEHOLDER_MISDIRECTED,
	REASON_INGRESS_TOKEN_REFUSED,
	REASON_AUDIT_UNAVAILABLE,
	REASON_UPSTREAM_RESET,
	REASON_DAEMON_STOPPING,
	REASON_QUARANTINED,
	REASON__COUNT,
};

/* "passthrough", "deny", ...; the name used in policy files and audit records. */
const char *reason_tier_name(enum tier t);
/* The stable code, e.g. "host_not_allowed"; "none" for REASON_NONE. */
const char *reason_code(enum reason r);
/* The HTTP status a refusal with <r> is answered with (403, 429, 502, ...). */
uint16_t reason_status(enum reason r);
/* The status line's reason phrase for <status>, e.g. "Forbidden". */
const char *reason_phrase(uint16_t status);
/* A one-line instruction an agent can act on, used when no rule gives one. */
const char *reason_instruction(enum reason r);

#endif /* AN_CORE_REASON_H */
