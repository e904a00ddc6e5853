/*
 * Host lookup for one profile: which rule, if any, decides a host.
 *
 * Names and wildcards live in one compiled hash-trie over reversed labels
 * (policy/acl.c says how it is laid out); IP literals in a table of their
 * own, never reached through a name. Built once, then only read.
 */
#ifndef AN_POLICY_ACL_H
#define AN_POLICY_ACL_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"
#include "core/verdict.h"
#include "policy/hostname.h"
#include "policy/strtab.h"

/*
 * One rule, as the policy loader builds it. Every pointer is owned by the
 * rule (released by acl_rule_free); an acl only borrows rules.
 */
struct acl_rule {
	char *id;          /* unique within the profile */
	char *host;        /* normalised; the suffix for ACL_KIND_WILDCARD */
	char *owner;       /* who asked for the rule */
	char *reason;      /* why it exists */
	char *instruction; /* one line for the agent, or NULL */
	char *upstream;    /* TIER_LOCAL: "host:port", else NULL */
	uint16_t *ports;   /* port_count allowed ports; NULL and 0: any port */
	uint32_t host_len;
	uint32_t line; /* where the host is written in the policy file (1-based) */
	uint32_t col;
	/* verdict.rule_index: dense over the snapshot; VERDICT_RULE_NONE for the global denies. */
	uint32_t index;
	struct verdict_limits limits; /* per sandbox on this rule; all zero: none */
	uint16_t port_count;
	uint8_t kind; /* enum acl_kind */
	uint8_t tier; /* enum tier */
	/* TIER_PASSTHROUGH: `server_name_check: false`, a tunnel may name another server. */
	bool server_name_any;
};

struct acl_node;         /* policy/acl.c: one key's slot, a cache line */
struct acl_filter_block; /* policy/acl.c: a line of the Bloom filter over every key */

/*
 * The host trie's tables (policy/acl.c). A zeroed one is empty. One mapping
 * holds the slots, the filter, then the tails of long keys.
 */
struct acl_trie {
	struct acl_node *slots;          /* owned: slot_count, at most half of them used */
	struct acl_filter_block *filter; /* filter_blocks, in that mapping */
	char *tails;                     /* key bytes past a slot's, in that mapping */
	size_t map_bytes;
	uint32_t slot_count;
	uint32_t filter_blocks;
	uint32_t names;        /* exact-name keys */
	uint32_t wildcards;    /* wildcard keys */
	uint64_t wild_lens[4]; /* bit n % 64 of word n / 64: a wildcard suffix is n bytes */
};

struct acl {
	struct acl_trie hosts;        /* exact names and wildcard suffixes */
	struct strtab ips;            /* canonical IP text -> rule index */
	const struct acl_rule *rules; /* borrowed */
	uint32_t rule_count;
};

/*
 * Indexes the <count> rules at <rules> (borrowed: they must outlive <a>, not
 * move and not change, since the trie keeps copies of their fields and
 * pointers and reads the rarer fields from the rules) into <a>. Returns 0;
 * -EEXIST when two rules have the same kind and host, with *<dup_first> <
 * *<dup_second> their indexes (<a> is left empty); -ENOMEM; or -E2BIG past
 * STRTAB_ENTRIES_MAX names or 4 GiB of long keys' tails, or for a key that would sit over 255 slots past
 * its home (never seen: at most half the slots are used). Control path only;
 * the result is immutable.
 */
int acl_build(struct acl *a, const struct acl_rule *rules, uint32_t count, uint32_t *dup_first,
	      uint32_t *dup_second);

/*
 * The rule deciding the normalised <host>/<len> of <kind> (ACL_KIND_NAME or
 * ACL_KIND_IP), or NULL. Names try the exact table, then each parent suffix
 * from longest to shortest among wildcards. Returns a borrowed rule.
 */
const struct acl_rule *acl_lookup(const struct acl *a, const char *host, size_t len,
				  enum acl_kind kind);

/* True when <r> allows <port>: it lists no ports, or lists this one. */
bool acl_port_allowed(const struct acl_rule *r, uint16_t port);

/*
 * The verdict for <host>/<len> as the client sent it, on <port>. Always fills
 * <out>: TIER_DENY/REASON_HOST_NOT_ALLOWED for a host that does not normalise
 * or that no rule matches (rule NULL), or that a deny rule matches;
 * TIER_DENY/REASON_PORT_NOT_ALLOWED when the rule lists other ports;
 * otherwise the rule's tier with REASON_NONE, and its index and limits
 * (rule_index is VERDICT_RULE_NONE and rule_limits zero on every TIER_DENY).
 * Pointers are borrowed from the rules. Data path: no allocation, thread-safe.
 */
void acl_decide(const struct acl *a, const char *host, size_t len, uint16_t port,
		struct verdict *out);

/* Releases what <r> owns and zeroes it. */
void acl_rule_free(struct acl_rule *r);

/* Releases the tables of <a> (never the rules) and zeroes it. */
void acl_free(struct acl *a);

#endif /* AN_POLICY_ACL_H */
