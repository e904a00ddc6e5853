/*
 * What the pieces of the policy loader share, for the files of policy/ only
 * (core/ and tools/ see policy/policy.h): the compiled policy's types, the
 * loader state one load threads through every section, and the functions one
 * piece calls in another. Where each piece is:
 *
 *   policy/yaml.c      the strict libyaml event reader: events, keys, scalars,
 *                      files named by a key, and the "name:line:col" messages;
 *   policy/host.c      hosts and addresses: a rule's host (normalised, wildcards
 *                      below a registrable domain), host:port, ip[:port];
 *   policy/daemon.c    the `daemon:` section, staged into a struct config and
 *                      applied once the whole load has passed;
 *   policy/resolver.c  the `resolver:` section: servers, static hosts, and the
 *                      private networks an upstream may be in;
 *   policy/fake.c      the fake-response tier's compiler: a rule's `responses`;
 *   policy/inject.c    the credential-inject tier's compiler: a rule's `inject`
 *                      and `upstream_ca`, the secret read and wiped;
 *   policy/profile.c   the `profiles:` section: a profile's rules, limits,
 *                      users and groups;
 *   policy/ingress.c   a profile's `ingress:` section, what the ingress gateway
 *                      lets through to its sandboxes;
 *   policy/alerts.c    the `alerts:` sections, global and a profile's: the
 *                      detectors' settings, merged key by key at the end;
 *   policy/policy.c    the document, sandboxes, the deny list, the limits every
 *                      section reads alike, the load itself, and the run-time
 *                      queries (verdict ops).
 *
 * Everything declared here that is not a type starts with loader_ (libyaml
 * owns yaml_). A section parser reads exactly the events its value may hold;
 * each returns 0, or -EINVAL/-ENOMEM with the message already formatted into
 * the loader's error buffer (loader_fail, loader_fail_oom), and the caller
 * returns that at once. Nothing here is thread-safe: a load runs on one
 * thread, and its struct loader is its own.
 */
#ifndef AN_POLICY_LOADER_H
#define AN_POLICY_LOADER_H

#include <arpa/inet.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <libpsl.h>
#include <yaml.h>

#include "core/alert.h"
#include "core/an.h"
#include "core/config.h"
#include "core/verdict.h"
#include "policy/acl.h"
#include "policy/addr.h"
#include "policy/policy.h"
#include "policy/strtab.h"

/*
 * An `alerts:` section (policy/alerts.c): the values of the keys it gave and
 * which it gave (given[d], bit AF_* of alerts.c, per detector) until the
 * load's end, when cfg becomes the compiled config (the defaults, then the
 * global section, then the profile's). The marks place the quiet_hours
 * checks that need the merged result.
 */
struct policy_alerts {
	struct alert_config cfg;
	uint16_t given[ALERT__COUNT];
	bool cooldown_given;
	yaml_mark_t quiet_on;   /* the key `on` of quiet_hours */
	yaml_mark_t quiet_from; /* the values of from and to */
	yaml_mark_t quiet_to;
};

struct policy_profile {
	char *name;
	struct verdict_limits limits; /* each sandbox on the profile gets its own */
	const struct verdict_ingress
	    *ingress;                       /* profile_ingress: &ingress_own->vi or the defaults */
	struct policy_ingress *ingress_own; /* owned; the `ingress:` section, NULL without one */
	/* profile_alerts: &alerts_own->cfg, or the policy's global one (set at the load's end) */
	const struct alert_config *alerts;
	struct policy_alerts *alerts_own; /* owned; the `alerts:` section, NULL without one */
	struct acl_rule *rules;           /* owned array of rule_count */
	uint32_t rule_count;
	uint32_t rule_cap;
	struct acl acl; /* indexes rules; built when the profile's rules are complete */
	/* Who besides root may register sandboxes on it (`users`, `groups`): ids, resolved at
	 * load; without either, every control-socket member unless it has an inject rule. */
	uint32_t *users;  /* owned */
	uint32_t *groups; /* owned */
	uint32_t user_count;
	uint32_t group_count;
	bool registrants_named; /* `users` or `groups` was given (even empty) */
	/* Its inject rules' credentials, one per distinct placeholder (placeholder_elsewhere's
	 * list; built with inject_by_rule); owned array, NULL without any. */
	const struct verdict_inject **injects;
	uint32_t inject_count;
};

/* One resolver.hosts entry: addresses with port 0. */
struct policy_host {
	char *name; /* normalised */
	struct sockaddr_storage *addrs;
	uint32_t name_len;
	uint32_t addr_count;
};

/* One canned response of a fake-response rule, compiled at load. */
struct policy_response {
	char *method; /* owned; NULL: any method */
	char *path;   /* owned; the exact path, or a prefix without its '*'; NULL: any path */
	char *head;   /* owned; vr.head */
	char *body;   /* owned; vr.body, NULL when the body is empty */
	uint32_t method_len;
	uint32_t path_len;
	uint32_t line; /* of the entry in the policy file (1-based), for messages */
	bool prefix;
	struct verdict_response vr; /* borrows head and body */
};

/* A fake-response rule's answers, the last one the default: the opaque verdict.fake. */
struct policy_fake {
	struct policy_response *responses; /* owned array of count */
	uint32_t count;
	uint32_t rule_index; /* the rule's verdict.rule_index */
};

/* A credential-inject rule, compiled at load: verdict.inject is &vi. */
struct policy_inject {
	char *header;      /* owned; vi.header */
	char *prefix;      /* owned; vi.prefix ("" when none) */
	char *placeholder; /* owned; vi.placeholder */
	char *secret;      /* owned; vi.secret; secret_cap bytes wiped when released */
	char *upstream_ca; /* owned; vi.upstream_ca, NULL for the system roots */
	uint32_t secret_cap;
	uint32_t rule_index;      /* the rule's verdict.rule_index */
	struct verdict_inject vi; /* borrows the strings above */
};

/* A profile's `ingress:` section, compiled at load: profile_ingress is &vi. */
struct policy_ingress {
	struct verdict_ingress vi; /* its methods and strip_headers borrow text (or the defaults) */
	char text[];               /* the names the section gave, each NUL-terminated */
};

struct policy {
	struct policy_profile *profiles;
	struct policy_alerts alerts; /* the global `alerts:` (all zero without one), compiled */
	struct policy_host *hosts;
	struct addr_cidr *allow;   /* resolver.allow_private */
	struct policy_fake *fakes; /* every fake rule's responses, in file order */
	/* rule_count entries, by verdict.rule_index (NULL for other tiers); NULL without fakes. */
	const struct policy_fake **fake_by_rule;
	struct policy_inject *injects; /* every inject rule's, in file order */
	/* As fake_by_rule, for inject rules; NULL without any. */
	const struct verdict_inject **inject_by_rule;
	struct strtab profile_index;
	struct strtab host_index;
	uint32_t profile_count;
	uint32_t profile_cap;
	uint32_t host_count;
	uint32_t host_cap;
	uint32_t allow_count;
	uint32_t allow_cap;
	uint32_t fake_count;
	uint32_t fake_cap;
	uint32_t inject_count;
	uint32_t inject_cap;
	uint32_t rule_count;
	/* Where the text came from (the file's path as given; owned), NULL: the embedded
	 * default; and the XXH3-128 of the text, in hex (policy_digest). */
	char *source;
	char digest[POLICY_DIGEST_HEX_BYTES + 1];
};

/* A sandbox's profile as written, resolved once every profile is known. */
struct sandbox_ref {
	char *profile;
	yaml_mark_t mark;
};

struct loader {
	yaml_parser_t parser;
	yaml_event_t ev;
	bool ev_live;  /* ev holds an event to delete */
	bool ev_again; /* the next loader_next hands out ev again */
	const char *name;
	const char *input;
	size_t input_len;
	char *err;
	size_t err_cap;
	yaml_mark_t key_mark; /* of the key loader_key read last */
	struct policy *p;
	psl_ctx_t *psl;        /* the Public Suffix List, loaded at the first wildcard */
	struct acl_rule *deny; /* the file's global deny list (owned) */
	uint32_t deny_count;
	uint32_t deny_cap;
	bool psl_tried;
	struct config next; /* staged: strings set and sandboxes read by this load */
	uint32_t uints_set; /* bit i: uint_fields[i] was given */
	uint32_t sandbox_cap;
	struct sandbox_ref *refs; /* parallel to next.sandboxes */
	struct strtab sandbox_ids;
	yaml_mark_t tcp_sandbox_mark;
	uint64_t fake_body_bytes; /* every response body read so far (POLICY_FAKE_BYTES_MAX) */
	bool embedded;            /* the built-in policy: cfg->ingress_optional */
};

struct keyset {
	const char *section;
	const char *const *keys;
	uint32_t count;
};

typedef int (*item_fn)(struct loader *ld, void *ctx, uint32_t index);

#define SHOW_BYTES     72u
#define HOSTPORT_BYTES (INET6_ADDRSTRLEN + sizeof("[]:65535"))

/* A "host[:port]" as written, split by loader_split_hostport: borrows the text. */
struct hostport {
	const char *host;
	size_t host_len;
	uint16_t port; /* 0: none given */
	bool bracketed;
};

/* Where a rule's keys are, for checks that need the whole rule. */
struct rule_marks {
	yaml_mark_t start;
	yaml_mark_t tier;
	yaml_mark_t ports;
	yaml_mark_t upstream;
	yaml_mark_t id;
	yaml_mark_t limits;
	yaml_mark_t responses;
	yaml_mark_t inject;
	yaml_mark_t upstream_ca;
	yaml_mark_t server_name_check;
	yaml_mark_t placeholder; /* the inject's placeholder value */
};

/* --- policy/yaml.c: the event reader --------------------------------------------------- */

/*
 * Copies <s>/<len> into <buf> (SHOW_BYTES) for a message: printable ASCII
 * kept, anything else '?', cut at 60 bytes with "...". Returns <buf>.
 */
const char *loader_show(const void *s, size_t len, char *buf);

/* The text of the current event, a scalar (borrowed from ld->ev: valid until the next event). */
static inline const char *ev_text(const struct loader *ld)
{
	AN_ASSERT(ld->ev.type == YAML_SCALAR_EVENT);
	return (const char *)ld->ev.data.scalar.value;
}

/* The length of ev_text(<ld>). */
static inline size_t ev_len(const struct loader *ld)
{
	AN_ASSERT(ld->ev.type == YAML_SCALAR_EVENT);
	return ld->ev.data.scalar.length;
}

/*
 * Formats "<name>:<line>:<col>: <message>" for the mark <m> into the
 * loader's error buffer (nothing without one). Returns -EINVAL, for the
 * caller to return.
 */
__attribute__((format(printf, 3, 4))) int loader_fail(struct loader *ld, yaml_mark_t m,
						      const char *fmt, ...);

/* Formats "<name>: out of memory". Returns -ENOMEM, for the caller to return. */
int loader_fail_oom(struct loader *ld);

/*
 * Makes the next event current in ld->ev (or hands out ld->ev again when
 * ld->ev_again is set). Refuses anchors, aliases and tags. 0, or an error
 * already formatted.
 */
int loader_next(struct loader *ld);

/*
 * Reads the start of a mapping or sequence (<type>); <what> names the value
 * in the message when it is something else. 0, or an error.
 */
int loader_start(struct loader *ld, yaml_event_type_t type, const char *what);

/*
 * Reads a scalar that is not null into ld->ev; <what> and <type> ("a
 * string") name the value and what was expected. 0, or an error.
 */
int loader_scalar(struct loader *ld, const char *what, const char *type);

/*
 * Reads a scalar that must be one of two words, <first> or <second> (case
 * as written): *<is_second> says which. Anything else is the error "<what>
 * must be "<first>" or "<second>"". 0, or an error.
 */
int loader_choice(struct loader *ld, const char *what, const char *first, const char *second,
		  bool *is_second);

/*
 * Reads the next key of a mapping with the keys of <ks> (at most 32),
 * tracked in the bitmask *<seen>: returns 1 with *<key> its index (and
 * ld->key_mark its position), 0 at the end of the mapping, or an error for
 * a non-string, unknown or repeated key.
 */
int loader_key(struct loader *ld, const struct keyset *ks, uint32_t *seen, uint32_t *key);

/* Fails at <m> for the first of the <mandatory> keys (not 0) missing from <seen>; else 0. */
int loader_check_mandatory(struct loader *ld, const struct keyset *ks, uint32_t mandatory,
			   uint32_t seen, yaml_mark_t m);

/*
 * Reads a sequence of at most <max> items (<nonempty>: at least one),
 * calling <fn> with <ctx> once per item, its first event pending. 0, the
 * first error of <fn>, or an error.
 */
int loader_seq(struct loader *ld, const char *what, uint32_t max, bool nonempty, item_fn fn,
	       void *ctx);

/*
 * Reads a mapping of 1..<max> free-form string keys, calling <fn> with <ctx>
 * once per entry, the key as ld->ev and ld->key_mark. 0, or an error.
 */
int loader_map(struct loader *ld, const char *what, uint32_t max, item_fn fn, void *ctx);

/* Parses 1 or more decimal digits of <s>/<len> into *<out> (saturating); false otherwise. */
bool loader_parse_decimal(const char *s, size_t len, uint64_t *out);

/*
 * Reads a plain decimal integer <min>..<max> (no sign, no leading zero) into
 * *<out>. 0, or an error naming <what>.
 */
int loader_uint(struct loader *ld, const char *what, uint64_t min, uint64_t max, uint64_t *out);

/* Reads true or false into *<out>. 0, or an error naming <what>. */
int loader_bool(struct loader *ld, const char *what, bool *out);

/* Whether <s>/<len> holds no C0 control byte and no DEL. */
bool loader_text_is_clean(const char *s, size_t len);

/* The 1-based position of the first byte of <s>/<len> that is not visible ASCII, or 0. */
size_t loader_first_invisible(const char *s, size_t len);

/*
 * Reads one line of text (owner, reason, instruction): 1..POLICY_TEXT_BYTES_MAX
 * bytes, no control byte, into *<out> (NULL before; returns owned). 0, or an
 * error.
 */
int loader_text(struct loader *ld, const char *what, char **out);

/* Whether <s>/<len> is a sandbox id or profile name: [A-Za-z0-9_.-]{1,63}, no leading '.'. */
bool loader_is_id(const char *s, size_t len);

/* Whether <s>/<len> is an RFC 9110 token (a method or a field name), 1 byte or more. */
bool loader_is_token(const char *s, size_t len);

/*
 * Makes room for one more element of <elem> bytes after <count> in <arr> of
 * *<cap> (doubling, zero-filled). Returns the array (perhaps moved, *<cap>
 * updated), or NULL when out of memory (<arr> still owned by the caller).
 */
void *loader_grow_array(void *arr, uint32_t *cap, uint32_t count, size_t elem);

/* A 0-based libyaml line or column as the 1-based uint32_t a rule stores (saturating). */
uint32_t loader_mark_u32(size_t v);

/*
 * Reads the path value of the key <what> (body_file, secret_file,
 * upstream_ca) into <path>/<cap> (at least POLICY_PATH_BYTES_MAX + 1): as
 * written when absolute, else from the policy file's directory. A refused
 * value is never shown. 0, or an error.
 */
int loader_file_value(struct loader *ld, const char *what, char *path, size_t cap);

/*
 * Reads the open file <fd> of at most <max> bytes into the owned *<buf> of
 * *<len> bytes (and a NUL). Returns 0; -EINVAL (not a regular file), -EFBIG
 * (larger than <max>) or -EAGAIN (it grew while read), each with *<call>
 * NULL; or the -errno of *<call> ("fstat", "read"). What a failed read got is
 * wiped: the file may hold a secret.
 */
int loader_file_load(int fd, size_t max, char **buf, size_t *len, const char **call);

/*
 * The message for loader_file_load's <rc> (not 0) and <call> on the file
 * <path> of the key <what> whose limit is <max>, at the value. Returns the
 * error, for the caller to return.
 */
int loader_fail_file_load(struct loader *ld, const char *what, const char *path, int rc,
			  const char *call, size_t max);

/* --- policy/host.c: hosts and addresses ------------------------------------------------ */

/*
 * Splits <s>/<len>, "[v6]:port", "[v6]", "v6", "host:port" or "host", into
 * *<hp> (borrowing <s>; port 0 when none is given). NULL, or why not (a
 * static text for a message).
 */
const char *loader_split_hostport(const char *s, size_t len, struct hostport *hp);

/*
 * Writes <ss> (AF_INET or AF_INET6) as "ip", "ip:port" or "[ip6]:port"
 * (<port> 0: none) into <buf> of <cap> bytes, at least HOSTPORT_BYTES.
 */
void loader_format_addr(const struct sockaddr_storage *ss, uint16_t port, char *buf, size_t cap);

/*
 * Reads "<ip>[:port]" into <ss> and <port> (0: none given); the port is
 * mandatory when <port_required>, and brackets are for IPv6 only. 0, or an
 * error naming <what>.
 */
int loader_ip_port(struct loader *ld, const char *what, bool port_required,
		   struct sockaddr_storage *ss, uint16_t *port);

/*
 * Reads a rule's host: a name or an IP address, normalised (an IPv4 address
 * in dotted decimal only), or "*.<domain>" below a registrable domain. Sets
 * r->host (owned; NULL before), host_len, kind, line and col. 0, or an error.
 */
int loader_rule_host(struct loader *ld, struct acl_rule *r);

/* --- policy/daemon.c: the daemon: section ---------------------------------------------- */

/* Reads the `daemon:` mapping into the staged ld->next and ld->uints_set. 0, or an error. */
int loader_daemon(struct loader *ld);

/*
 * Moves what the load staged (daemon keys, resolver.servers, the sandboxes)
 * into <cfg>: the strings and sandboxes are handed over (ld->next no longer
 * holds them), integers not given keep <cfg>'s values. Cannot fail; call
 * only once the whole load has passed.
 */
void loader_apply_config(struct loader *ld, struct config *cfg);

/* --- policy/resolver.c: the resolver: section ------------------------------------------ */

/*
 * Reads the `resolver:` mapping: servers into the staged ld->next.dns_servers,
 * hosts and allow_private into ld->p. 0, or an error.
 */
int loader_resolver(struct loader *ld);

/* --- policy/profile.c: the profiles: section ------------------------------------------- */

/*
 * Reads the `profiles:` mapping into ld->p->profiles: 1..POLICY_PROFILES_MAX
 * profiles, each with its rules (dense verdict.rule_index, in file order),
 * limits, users and groups (resolved now) and ingress. A profile's host
 * index is not built here: the deny list may come later. 0, or an error.
 */
int loader_profiles(struct loader *ld);

/* --- policy/fake.c: a fake rule's responses -------------------------------------------- */

/*
 * Reads the `responses` of the fake rule <r> (its index set) into a new
 * entry of ld->p->fakes: 1..POLICY_FAKE_RESPONSES_MAX, the last the default.
 * 0, or an error (the entry then holds what policy_free releases).
 */
int loader_responses(struct loader *ld, const struct acl_rule *r);

/* Whether <r> is the default response: neither method nor path. */
bool loader_response_is_default(const struct policy_response *r);

/*
 * Builds ld->p->fake_by_rule (verdict.fake by rule index; none without
 * fakes) once ld->p->fakes no longer moves. 0, or -ENOMEM (formatted).
 */
int loader_index_fakes(struct loader *ld);

/* Releases what <f> holds (not <f>) and zeroes it. */
void loader_fake_free(struct policy_fake *f);

/* --- policy/inject.c: an inject rule's credential -------------------------------------- */

/*
 * Reads the `inject` mapping of rule <r> into its entry of ld->p->injects
 * (made at its first inject or upstream_ca key), reading the secret from the
 * environment or its file; <m> holds the rule's marks so far, and gets the
 * placeholder's. 0, or an error that names no secret, placeholder or prefix.
 */
int loader_inject(struct loader *ld, const struct acl_rule *r, struct rule_marks *m);

/*
 * Reads rule <r>'s `upstream_ca` (a regular file, read by the engine) into
 * its inject entry. 0, or an error.
 */
int loader_upstream_ca(struct loader *ld, const struct acl_rule *r);

/*
 * Builds ld->p->inject_by_rule (verdict.inject by rule index; none without
 * injects) once ld->p->injects no longer moves, and each profile's list of
 * distinct placeholders (policy_profile.injects). 0, or -ENOMEM (formatted).
 */
int loader_index_injects(struct loader *ld);

/* Whether inject rules <a> and <b> give the sandbox the same placeholder. Pure. */
bool inject_same_placeholder(const struct verdict_inject *a, const struct verdict_inject *b);

/*
 * Whether <buf>/<len> holds one of profile <pr>'s placeholders other than
 * <own>'s (NULL: any): verdict_ops.placeholder_elsewhere. Pure.
 */
bool inject_placeholder_elsewhere(const struct policy_profile *pr, const char *buf, size_t len,
				  const struct verdict_inject *own);

/* Wipes the secret of <in>, then releases the rest (not <in>) and zeroes it. */
void loader_inject_free(struct policy_inject *in);

/* --- policy/ingress.c: a profile's ingress: section ------------------------------------ */

/* What a profile without `ingress:` points at: static, never freed. */
extern const struct verdict_ingress loader_ingress_default;

/*
 * Reads the `ingress:` mapping of the profile <pr> (pr->ingress still the
 * defaults) into a block pr->ingress_own (owned) that pr->ingress then
 * points into. 0, or an error.
 */
int loader_ingress(struct loader *ld, struct policy_profile *pr);

/* --- policy/alerts.c: the alerts: sections -------------------------------------------- */

/*
 * Reads an `alerts:` value, a mapping or `false` (every detector off), of
 * the top level (<pr> NULL: into ld->p->alerts) or of profile <pr> (into a
 * block pr->alerts_own it allocates). Nothing is merged yet: the global
 * section may come after the profiles. 0, or an error.
 */
int loader_alerts(struct loader *ld, struct policy_profile *pr);

/*
 * Compiles every section once the whole document is read: the global one
 * over the defaults (alert_config_defaults), then each profile's over that;
 * points each profile's alerts at its config. Fails for a compiled
 * quiet_hours that is on without both hours, or whose from equals its to,
 * at the key of the section that made it so. 0, or an error.
 */
int loader_alerts_finish(struct loader *ld);

/* --- policy/policy.c: the limits a profile, a rule and an ingress: section read -------- */

/* The keys of every `limits` mapping: requests_per_second, burst, concurrent. */
#define LOADER_LIMIT_KEY_COUNT 3u
extern const char *const loader_limit_keys[LOADER_LIMIT_KEY_COUNT];

/*
 * Reads a `limits` mapping with the keys of <ks> (whose keys are
 * loader_limit_keys) into *<out>, all zero before: each 1..POLICY_LIMIT_MAX,
 * and burst only with requests_per_second. 0, or an error.
 */
int loader_limits(struct loader *ld, const struct keyset *ks, struct verdict_limits *out);

#endif /* AN_POLICY_LOADER_H */
