/*
 * The engine's view of the policy: one verdict per request, through a table
 * of functions the daemon installs at start-up.
 *
 * core/ may not include policy/ (dependencies point one way), so the engine
 * sees the compiled policy only as an opaque snapshot plus these operations.
 * The snapshot is immutable; every pointer a verdict carries is borrowed from
 * it and stays valid while the snapshot does.
 */
#ifndef AN_CORE_VERDICT_H
#define AN_CORE_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/reason.h"

/*
 * A profile's or a rule's limits, applied to each sandbox on its own (a
 * rule's: per sandbox per rule); 0 is unlimited, and all zero is no limit.
 */
struct verdict_limits {
	uint32_t requests_per_second;
	uint32_t burst;      /* tokens a bucket holds; 0: requests_per_second */
	uint32_t concurrent; /* connections open at once */
};

/*
 * What the ingress gateway applies to requests for a sandbox on a profile
 * (the profile's `ingress:` section, or the defaults), immutable and
 * borrowed from the snapshot.
 */
#define VERDICT_INGRESS_METHODS_MAX 16u
#define VERDICT_INGRESS_STRIP_MAX   32u
/* The methods a profile without `ingress.methods` accepts. */
#define VERDICT_INGRESS_METHODS_DEFAULT "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"
/* Request body bytes a profile without `ingress.body_bytes` accepts (413 past it). */
#define VERDICT_INGRESS_BODY_DEFAULT (10u * 1024u * 1024u)
struct verdict_ingress {
	bool enabled; /* false (`ingress: {enabled: false}`): the public path is 404 */
	/* Accepted methods, upper-case RFC 9110 tokens, compared exactly; a
	 * request with any other is answered 405. Never empty. */
	uint32_t method_count;
	const char *methods[VERDICT_INGRESS_METHODS_MAX];
	/* Header names (lower case) removed from every request before the sandbox sees it,
	 * beside the hop-by-hop and forwarding headers the gateway always removes. */
	uint32_t strip_count;
	const char *strip_headers[VERDICT_INGRESS_STRIP_MAX];
	uint64_t body_bytes_max; /* request body cap, 1.. (413 before the sandbox sees a byte) */
	struct verdict_limits limits; /* per sandbox: rate (429) and requests open at once */
	/* What isolates the sandbox's answers from the other sandboxes' in a
	 * browser (core/ingress.h, ingress_write_response_head), each on unless
	 * the profile turns it off: on the path form, Content-Security-Policy:
	 * sandbox on every final answer; a Set-Cookie whose Path leaves the
	 * sandbox's or that has a Domain dropped; the fields that act on a whole
	 * origin dropped. */
	bool csp_sandbox;
	bool scope_cookies;
	bool drop_origin_fields;
	/* `token: required`: a public request reaches the sandbox only with its
	 * token (core/ingress.h); without it, the answer to a sandbox that does
	 * not exist. */
	bool token_required;
};

/* verdict.rule_index when no rule's limits apply. */
#define VERDICT_RULE_NONE UINT32_MAX

/*
 * A canned answer of the fake-response tier, immutable and borrowed from the
 * snapshot. <head> is the status line and the rule's header lines, each
 * ending in CRLF, without the blank line and without Content-Length,
 * Transfer-Encoding or Connection, which the engine adds (it owns framing
 * and keep-alive). Nothing in <head> can hold a bare CR or LF: the loader
 * refuses such values.
 */
struct verdict_response {
	const char *head; /* head_len bytes, NUL-terminated */
	const char *body; /* body_len bytes; NULL when body_len is 0 */
	uint32_t head_len;
	uint32_t body_len;
	uint16_t status;
};

/*
 * A credential-inject rule, immutable and borrowed from the snapshot. In each
 * request the sandbox sends, the header <header> (compared without regard to
 * case) whose value is <prefix><placeholder> has it replaced by
 * <prefix><secret>. The secret never leaves the policy's memory except on the
 * TLS connection to the upstream.
 */
struct verdict_inject {
	const char *header;      /* e.g. "Authorization", "x-api-key" */
	const char *prefix;      /* e.g. "Bearer "; "" for none */
	const char *placeholder; /* what the sandbox holds */
	const char *secret;      /* the real value (never logged, audited or answered) */
	const char *
	    upstream_ca; /* PEM file the upstream's certificate must chain to; NULL: system roots */
	uint32_t header_len;
	uint32_t prefix_len;
	uint32_t placeholder_len;
	uint32_t secret_len;
	bool require;  /* a request without the placeholder is refused, not forwarded as is */
	bool upgrades; /* an Upgrade request (WebSocket) is relayed; false: 403 upgrade_refused */
};

struct verdict {
	enum tier tier;
	enum reason reason;      /* REASON_NONE unless tier == TIER_DENY */
	const char *rule;        /* id of the deciding rule, NULL when no rule matched */
	const char *instruction; /* the rule's text for the agent, NULL for the default */
	const char *upstream;    /* TIER_LOCAL: "host:port" to relay to, else NULL */
	/* TIER_FAKE: the rule's responses (verdict_ops.fake_response), else NULL. */
	const void *fake;
	/* TIER_INJECT: what to swap in, else NULL. */
	const struct verdict_inject *inject;
	/*
	 * The deciding rule as a dense index over the whole snapshot
	 * (0..rule_count-1, stable for the snapshot's life, not across reloads),
	 * the key of its per-sandbox limits; VERDICT_RULE_NONE when no rule
	 * matched and on every TIER_DENY verdict (a deny rule, a port the rule
	 * does not list, the global deny list): a refusal has nothing to limit.
	 */
	uint32_t rule_index;
	/* That rule's limits, all zero when it has none or rule_index is NONE. */
	struct verdict_limits rule_limits;
	/* TIER_PASSTHROUGH: the rule lets a CONNECT tunnel's TLS server name (SNI) or
	 * plain-HTTP Host name another host than the CONNECT's (`server_name_check:
	 * false`); false: checked, sni_mismatch. Always false on other tiers. */
	bool server_name_any;
	/* An IP literal host in canonical text ("2130706433" is "127.0.0.1"), the
	 * address to connect to; "" for a name. INET6_ADDRSTRLEN bytes. */
	char ip[46];
};

/* Who asks the control socket for something: its credentials (SO_PEERCRED, SO_PEERGROUPS). */
struct verdict_caller {
	uint32_t uid;
	uint32_t gid;
	const uint32_t *groups; /* supplementary groups, group_count of them */
	uint32_t group_count;
};

struct alert_config;

struct verdict_ops {
	/*
	 * Decides <host>/<host_len> (as the client sent it, not normalised) on
	 * <port> for profile <profile>. Always fills every field of <out>
	 * (rule_index and rule_limits too: NONE and zero on a refusal); never
	 * fails.
	 */
	void (*decide)(const void *policy, uint32_t profile, const char *host, size_t host_len,
		       uint16_t port, struct verdict *out);
	/*
	 * Writes <host>/<len> as decide reads it (a name in ASCII lower case with
	 * one trailing dot removed, an IP literal in canonical text) into <out>
	 * (<cap> bytes), NUL-terminated: the name audit records carry, so one
	 * search finds every spelling of a host. Returns its length, or -1 for
	 * a host no rule can name (decide refuses it) or one over <cap>. Pure;
	 * callable from any thread. May be NULL: records keep the spelling.
	 */
	int (*normalise_host)(const char *host, size_t len, char *out, size_t cap);
	/*
	 * Looks <host> up in the policy's static resolver table. Writes up to
	 * <cap> addresses with <port> set and returns how many (0: not listed).
	 */
	int (*static_lookup)(const void *policy, const char *host, size_t host_len, uint16_t port,
			     struct sockaddr_storage *out, int cap);
	/*
	 * True when <sa> may be connected to: a public unicast address, or a
	 * private/loopback/link-local/ULA/mapped one that the policy names in
	 * resolver.allow_private.
	 */
	bool (*address_permitted)(const void *policy, const struct sockaddr *sa);
	/* The name of <sa>'s address class ("private", "loopback", ...: docs/policy.md). */
	const char *(*address_class)(const struct sockaddr *sa);
	/* The index of profile <name> (NUL-terminated), or -ENOENT. */
	int (*profile_index)(const void *policy, const char *name);
	/* Whether <who> may register sandboxes on profile <index> (root always may). */
	bool (*profile_admits)(const void *policy, uint32_t index,
			       const struct verdict_caller *who);
	/* The name of profile <index> (borrowed from the snapshot). */
	const char *(*profile_name)(const void *policy, uint32_t index);
	/* The limits of profile <index>. */
	void (*profile_limits)(const void *policy, uint32_t index, struct verdict_limits *out);
	/* The ingress settings of profile <index>; never NULL (the defaults when it has none). */
	const struct verdict_ingress *(*profile_ingress)(const void *policy, uint32_t index);
	/*
	 * The compiled `alerts:` of profile <index> (core/alert.h): the global
	 * section overridden by the profile's, over the defaults; never NULL,
	 * borrowed from the policy. NULL op: every profile has the defaults.
	 */
	const struct alert_config *(*profile_alerts)(const void *policy, uint32_t index);
	/*
	 * Whether <buf>/<len> (a request head a sandbox on profile <profile> sent)
	 * holds the placeholder of one of the profile's inject rules, other than
	 * <own>'s placeholder (NULL: any): the credential would go elsewhere than
	 * its rule sends it. Scans each distinct placeholder once; false at once
	 * for a profile without inject rules.
	 */
	bool (*placeholder_elsewhere)(const void *policy, uint32_t profile, const char *buf,
				      size_t len, const struct verdict_inject *own);
	/* Profiles and rules in the snapshot. */
	uint32_t (*profile_count)(const void *policy);
	uint32_t (*rule_count)(const void *policy);
	/*
	 * The response of fake-response rule <fake> (verdict.fake) for a request
	 * <method>/<method_len> of <path>/<path_len> (origin form, the query
	 * included; matching ignores it): the first of the rule's responses whose
	 * method and path match. Never NULL: a rule always ends in a default.
	 */
	const struct verdict_response *(*fake_response)(const void *policy, const void *fake,
							const char *method, size_t method_len,
							const char *path, size_t path_len);
	/*
	 * The hosts fake and inject rules name exactly (not wildcards),
	 * normalised: start with *<cursor> 0; each call returns the next, its
	 * length in *<len>, and moves the cursor on; NULL after the last. The
	 * engine mints their leaves before their first handshake.
	 */
	const char *(*terminated_host)(const void *policy, uint64_t *cursor, size_t *len);
	/* Frees the snapshot; no operation may be called on it afterwards. Control path. */
	void (*release)(const void *policy);
	/*
	 * What the policy was loaded from: the file's path as given, NULL for
	 * the embedded default; *<digest> the hex digest of its text (its
	 * bytes, not the files it names). NULL op: nothing is known.
	 */
	const char *(*source)(const void *policy, const char **digest);
};

/*
 * What the engine answers for <v>: REASON_NONE when it serves the request,
 * else the refusal. The one place this is decided: core/conn.c and
 * `agentsnet check` both call it. Tiers the engine does not serve yet
 * (inject) are refused as tier_unavailable; a local rule needs its upstream,
 * a fake rule its responses. (Over TLS a fake rule also needs the daemon's
 * CA: the engine checks that itself.)
 */
static inline enum reason verdict_refusal(const struct verdict *v)
{
	if (v->tier == TIER_DENY)
		return v->reason != REASON_NONE ? v->reason : REASON_HOST_NOT_ALLOWED;
	if (v->tier == TIER_FAKE)
		return v->fake != NULL ? REASON_NONE : REASON_TIER_UNAVAILABLE;
	if (v->tier == TIER_INJECT)
		return v->inject != NULL ? REASON_NONE : REASON_TIER_UNAVAILABLE;
	if (v->tier != TIER_PASSTHROUGH && v->tier != TIER_LOCAL)
		return REASON_TIER_UNAVAILABLE;
	if (v->tier == TIER_LOCAL && v->upstream == NULL)
		return REASON_TIER_UNAVAILABLE;
	return REASON_NONE;
}

/*
 * What the engine answers, before any resolution or connection, for an
 * allowed <v> (verdict_refusal REASON_NONE) of a request that is a CONNECT
 * or not (<is_connect>), on a daemon that has a CA or not (<has_ca>): a
 * terminated tier needs the CA to sign the agent's leaf, and a credential
 * never goes out in clear (an inject rule refuses plain http://). REASON_NONE
 * or REASON_TIER_UNAVAILABLE. core/modes.c and `agentsnet check` both call it.
 */
static inline enum reason verdict_mode_refusal(const struct verdict *v, bool is_connect,
					       bool has_ca)
{
	if (v->tier == TIER_INJECT && (!is_connect || !has_ca))
		return REASON_TIER_UNAVAILABLE;
	if (v->tier == TIER_FAKE && is_connect && !has_ca)
		return REASON_TIER_UNAVAILABLE;
	return REASON_NONE;
}

#endif /* AN_CORE_VERDICT_H */
