/*
 * The policy file loader's top level and the compiled policy behind
 * policy_verdict_ops: the document, sandboxes, the global deny list, the
 * load itself, and the run-time queries. The rest of the loader has a file
 * per part (policy/loader.h, their shared header, lists them): the event
 * reader (yaml.c), hosts and addresses (host.c), the `daemon:`, `resolver:`
 * and `profiles:` sections (daemon.c, resolver.c, profile.c), and the
 * compilers of a rule's `responses` (fake.c) and `inject` (inject.c), of
 * a profile's `ingress:` (ingress.c), and of the `alerts:` sections, global
 * and a profile's (alerts.c).
 *
 * libyaml's event API drives a recursive descent that mirrors the schema:
 * one function per section, each reading exactly the events its value may
 * contain, so nothing is ever skipped: an unknown key, a wrong type or a bad
 * value stops the load at once with one "name:line:col: message" and nothing
 * changed. Rejected: the document API (a second tree of every node, and it
 * resolves aliases: an alias bomb) and a hand-written parser (docs/design.md
 * section 8). Aliases, anchors and tags are refused: a policy is reviewed.
 *
 * Keys of one mapping are matched against a small table and tracked in a
 * bitmask. Cross-references whose order is free (a sandbox's profile,
 * daemon.tcp_sandbox) are resolved after the whole document. A load builds a
 * fresh struct policy and a staged struct config; the caller's config is
 * written only after the last check passed. Uniqueness is checked with hash
 * tables, never pairwise: 100k rules load in well under a second. Each rule
 * gets an index dense over the file (verdict.rule_index), the engine's key
 * for its limits; the global denies copied into profiles get none.
 *
 * Checklist when adding a key: the key table and the switch of its section
 * (in the file that holds the section), docs/policy.md (example and
 * reference), and the suite named after that file in tests/unit/policy/.
 */
#include "policy/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpsl.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <yaml.h>

#include "core/an.h"
#include "core/pool.h"
#include "core/uid.h"
#include "policy/acl.h"
#include "policy/addr.h"
#include "policy/loader.h"
#include "policy/strtab.h"

/* --- limits ---------------------------------------------------------------- */

/* The keys of a profile's, a rule's and a profile's ingress limits alike. */
const char *const loader_limit_keys[] = { "requests_per_second", "burst", "concurrent" };

static bool limits_none(const struct verdict_limits *l)
{
	return l->requests_per_second == 0 && l->burst == 0 && l->concurrent == 0;
}

/* limits: {requests_per_second, burst, concurrent} (keys <ks>), each 1..POLICY_LIMIT_MAX. */
int loader_limits(struct loader *ld, const struct keyset *ks, struct verdict_limits *out)
{
	uint32_t seen = 0;
	uint32_t key = 0;
	uint64_t v = 0;

	AN_ASSERT(ks->keys == loader_limit_keys);
	AN_ASSERT(limits_none(out));
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "limits");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, ks, &seen, &key)) > 0) {
		AN_ASSERT(key < AN_ARRAY_LEN(loader_limit_keys));
		rc = loader_uint(ld, loader_limit_keys[key], 1, POLICY_LIMIT_MAX, &v);
		if (rc != 0)
			return rc;
		uint32_t *slot = key == 0   ? &out->requests_per_second
				 : key == 1 ? &out->burst
					    : &out->concurrent;
		*slot = (uint32_t)v;
	}
	if (rc == 0 && out->burst != 0 && out->requests_per_second == 0)
		return loader_fail(ld, start, "limits: burst needs requests_per_second");
	return rc;
}

/* --- sandboxes ------------------------------------------------------------- */

enum { SK_ID, SK_PROFILE, SK_UID, SK__COUNT };
static const char *const sandbox_keys[] = {
	[SK_ID] = "id", [SK_PROFILE] = "profile", [SK_UID] = "uid"
};
static const struct keyset sandbox_keyset = { "a sandbox", sandbox_keys, SK__COUNT };

/*
 * A sandbox's `uid`: the user its agent runs as, a number or a name (resolved
 * now): its egress socket is then that uid's, mode 0600, and a connection from
 * any other uid but root is refused (peer_not_agent).
 */
static int sandbox_uid(struct loader *ld, struct config_sandbox *sb)
{
	char name[256], shown[SHOW_BYTES];
	uint32_t uid = 0;

	int rc = loader_scalar(ld, "uid", "a number or a user name");
	if (rc != 0)
		return rc;
	size_t len = ev_len(ld);
	if (len == 0 || len >= sizeof(name))
		return loader_fail(ld, ld->ev.start_mark, "uid must be a number or a user name");
	memcpy(name, ev_text(ld), len);
	name[len] = '\0';
	if (!uid_parse(name, &uid) || uid == CONFIG_AGENT_ANY) {
		struct passwd *pw = getpwnam(name);
		if (pw == NULL)
			return loader_fail(ld, ld->ev.start_mark, "uid \"%s\": no such user",
					   loader_show(ev_text(ld), len, shown));
		uid = (uint32_t)pw->pw_uid;
	}
	sb->agent_uid = uid;
	return 0;
}

static int sandbox_value(struct loader *ld, uint32_t key, uint32_t index)
{
	struct config_sandbox *sb = &ld->next.sandboxes[index];
	struct sandbox_ref *ref = &ld->refs[index];
	char shown[SHOW_BYTES];
	uint32_t first = 0;

	AN_ASSERT(key < SK__COUNT);
	AN_ASSERT(index < ld->next.sandbox_count);
	if (key == SK_UID)
		return sandbox_uid(ld, sb);
	int rc = loader_scalar(ld, sandbox_keys[key], "a string");
	if (rc != 0)
		return rc;
	if (!loader_is_id(ev_text(ld), ev_len(ld)))
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "invalid %s \"%s\": use 1-63 of [A-Za-z0-9_.-], not starting with '.'",
		    key == SK_ID ? "sandbox id" : "profile name",
		    loader_show(ev_text(ld), ev_len(ld), shown));
	char *copy = pool_strndup(ev_text(ld), ev_len(ld));
	if (copy == NULL)
		return loader_fail_oom(ld);
	if (key == SK_PROFILE) {
		ref->profile = copy;
		ref->mark = ld->ev.start_mark;
		return 0;
	}
	sb->id = copy;
	rc = strtab_insert(&ld->sandbox_ids, sb->id, ev_len(ld), index, &first);
	if (rc == -EEXIST)
		return loader_fail(ld, ld->ev.start_mark, "duplicate sandbox id \"%s\"", sb->id);
	AN_ASSERT(key == SK_ID);
	return rc == 0 ? 0 : loader_fail_oom(ld);
}

static int sandbox_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct config *next = &ld->next;
	uint32_t cap = ld->sandbox_cap;
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(ctx == NULL && index == next->sandbox_count);
	struct config_sandbox *sbs = loader_grow_array(next->sandboxes, &cap, index, sizeof(*sbs));
	if (sbs == NULL)
		return loader_fail_oom(ld);
	next->sandboxes = sbs;
	sbs[index].agent_uid = CONFIG_AGENT_ANY; /* no `uid`: any uid may connect */
	struct sandbox_ref *refs =
	    loader_grow_array(ld->refs, &ld->sandbox_cap, index, sizeof(*refs));
	if (refs == NULL)
		return loader_fail_oom(ld);
	ld->refs = refs;
	AN_ASSERT(cap == ld->sandbox_cap);
	next->sandbox_count++;
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "a sandbox");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &sandbox_keyset, &seen, &key)) > 0) {
		rc = sandbox_value(ld, key, index);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	return loader_check_mandatory(ld, &sandbox_keyset, (1u << SK_ID) | (1u << SK_PROFILE), seen,
				      start);
}

/* --- document --------------------------------------------------------------- */

static int parse_version(struct loader *ld)
{
	char shown[SHOW_BYTES];
	uint64_t v = 0;

	AN_ASSERT(ld->ev_live);
	int rc = loader_scalar(ld, "version", "an integer");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	size_t sign = len > 1 && s[0] == '-' ? 1 : 0;
	if (ld->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
	    !loader_parse_decimal(s + sign, len - sign, &v))
		return loader_fail(ld, ld->ev.start_mark, "version must be an integer");
	if (len != 1 || s[0] != '1')
		return loader_fail(ld, ld->ev.start_mark,
				   "unsupported policy version %s (this daemon reads version 1)",
				   loader_show(s, len, shown));
	AN_ASSERT(v == 1);
	return 0;
}

enum {
	TK_VERSION,
	TK_DAEMON,
	TK_RESOLVER,
	TK_PROFILES,
	TK_SANDBOXES,
	TK_DENY,
	TK_ALERTS,
	TK__COUNT
};
static const char *const top_keys[] = {
	[TK_VERSION] = "version",   [TK_DAEMON] = "daemon",       [TK_RESOLVER] = "resolver",
	[TK_PROFILES] = "profiles", [TK_SANDBOXES] = "sandboxes", [TK_DENY] = "deny",
	[TK_ALERTS] = "alerts",
};

/*
 * Known DNS-over-HTTPS endpoints: denied in every profile, even under an
 * allowing wildcard ("*.google" does not open dns.google), since an agent
 * that resolves names itself sidesteps the proxy's resolver and its checks.
 * A profile's exact rule for one of them still decides it: that is an
 * operator naming the host.
 */
static const char *const doh_hosts[] = {
	"dns.google",
	"dns.google.com",
	"cloudflare-dns.com",
	"mozilla.cloudflare-dns.com",
	"chrome.cloudflare-dns.com",
	"security.cloudflare-dns.com",
	"family.cloudflare-dns.com",
	"one.one.one.one",
	"1dot1dot1dot1.cloudflare-dns.com",
	"dns.quad9.net",
	"dns9.quad9.net",
	"dns10.quad9.net",
	"dns11.quad9.net",
	"doh.opendns.com",
	"dns.adguard.com",
	"dns.adguard-dns.com",
	"doh.cleanbrowsing.org",
	"dns.nextdns.io",
	"doh.dns.sb",
	"dns.alidns.com",
	"doh.pub",
	"doh.mullvad.net",
	"dns.mullvad.net",
	"ordns.he.net",
	"doh.libredns.gr",
	"dns.twnic.tw",
};

static int deny_item(struct loader *ld, void *ctx, uint32_t index)
{
	char id[32];

	AN_ASSERT(ctx == NULL && index == ld->deny_count);
	struct acl_rule *deny =
	    loader_grow_array(ld->deny, &ld->deny_cap, ld->deny_count, sizeof(*deny));
	if (deny == NULL)
		return loader_fail_oom(ld);
	ld->deny = deny;
	struct acl_rule *r = &ld->deny[ld->deny_count++];
	memset(r, 0, sizeof(*r));
	int rc = loader_rule_host(ld, r);
	if (rc != 0)
		return rc;
	snprintf(id, sizeof(id), "deny/%u", index + 1);
	r->id = pool_strndup(id, strlen(id));
	r->owner = pool_strndup("policy", 6);
	r->reason = pool_strndup("the policy's deny list", 22);
	r->tier = TIER_DENY;
	r->index = VERDICT_RULE_NONE;
	return r->id == NULL || r->owner == NULL || r->reason == NULL ? loader_fail_oom(ld) : 0;
}

/* Appends a deny rule for <host> of <kind> to <pr>, copying <from>'s texts. */
static int append_deny(struct loader *ld, struct policy_profile *pr, const char *host,
		       uint32_t host_len, enum acl_kind kind, const struct acl_rule *from)
{
	struct acl_rule *rules =
	    loader_grow_array(pr->rules, &pr->rule_cap, pr->rule_count, sizeof(*rules));
	if (rules == NULL)
		return loader_fail_oom(ld);
	pr->rules = rules;
	struct acl_rule *r = &pr->rules[pr->rule_count];
	*r = (struct acl_rule){ .host = pool_strndup(host, host_len),
				.host_len = host_len,
				.kind = (uint8_t)kind,
				.tier = TIER_DENY,
				.index = VERDICT_RULE_NONE, /* no limits: it serves nothing */
				.line = from != NULL ? from->line : 0,
				.col = from != NULL ? from->col : 0 };
	static const char doh_reason[] =
	    "a DNS-over-HTTPS endpoint: names are resolved by the proxy";
	static const char doh_instruction[] =
	    "DNS-over-HTTPS endpoints are refused; connect to hosts by name through the proxy, "
	    "which resolves them.";
	r->id = pool_strndup(from != NULL ? from->id : "deny/doh",
			     strlen(from != NULL ? from->id : "deny/doh"));
	r->owner = pool_strndup(from != NULL ? from->owner : "agentsnet",
				strlen(from != NULL ? from->owner : "agentsnet"));
	r->reason = pool_strndup(from != NULL ? from->reason : doh_reason,
				 strlen(from != NULL ? from->reason : doh_reason));
	if (from == NULL)
		r->instruction = pool_strndup(doh_instruction, sizeof(doh_instruction) - 1);
	pr->rule_count++; /* not in p->rule_count: that counts the rules the file wrote */
	if (r->host == NULL || r->id == NULL || r->owner == NULL || r->reason == NULL ||
	    (from == NULL && r->instruction == NULL))
		return loader_fail_oom(ld);
	return 0;
}

/* Indexes the profile's rules; the only error left to find is a repeated host. */
static int profile_build(struct loader *ld, struct policy_profile *pr)
{
	uint32_t first = 0;
	uint32_t second = 0;

	int rc = acl_build(&pr->acl, pr->rules, pr->rule_count, &first, &second);
	if (rc == -EEXIST) {
		const struct acl_rule *r = &pr->rules[second];
		yaml_mark_t m = { 0, r->line - 1, r->col - 1 };

		AN_ASSERT(first < second);
		return loader_fail(ld, m,
				   "duplicate host \"%s%s\" in profile \"%s\" (first at line %u)",
				   r->kind == ACL_KIND_WILDCARD ? "*." : "", r->host, pr->name,
				   pr->rules[first].line);
	}
	if (rc != 0)
		return loader_fail_oom(ld);
	AN_ASSERT(pr->acl.rule_count == pr->rule_count);
	return 0;
}

/*
 * The global deny entries (the DoH endpoints, then the file's `deny`) into
 * profile <pr>, each unless the profile already has a rule of that kind for
 * that host; then the profile's index.
 */
static int profile_finish(struct loader *ld, struct policy_profile *pr)
{
	struct strtab have[2] = { { 0 }, { 0 } }; /* names, wildcards */
	uint32_t unused = 0;
	int rc = strtab_init(&have[0],
			     pr->rule_count + (uint32_t)AN_ARRAY_LEN(doh_hosts) + ld->deny_count);
	if (rc == 0)
		rc = strtab_init(&have[1], pr->rule_count + ld->deny_count);
	for (uint32_t i = 0; i < pr->rule_count && rc == 0; i++) {
		const struct acl_rule *r = &pr->rules[i];
		if (r->kind == ACL_KIND_IP)
			continue;
		rc = strtab_insert(&have[r->kind == ACL_KIND_WILDCARD], r->host, r->host_len, i,
				   &unused);
		rc = rc == -EEXIST ? 0 : rc; /* the index build names duplicates */
	}
	uint32_t total = (uint32_t)AN_ARRAY_LEN(doh_hosts) + ld->deny_count;
	for (uint32_t i = 0; i < total && rc == 0; i++) {
		const struct acl_rule *from =
		    i < AN_ARRAY_LEN(doh_hosts) ? NULL : &ld->deny[i - AN_ARRAY_LEN(doh_hosts)];
		const char *host = from != NULL ? from->host : doh_hosts[i];
		uint32_t len = from != NULL ? from->host_len : (uint32_t)strlen(host);
		enum acl_kind kind = from != NULL ? (enum acl_kind)from->kind : ACL_KIND_NAME;
		struct strtab *t = kind == ACL_KIND_WILDCARD ? &have[1] : &have[0];
		if (kind == ACL_KIND_IP || strtab_find(t, host, len, &unused) == 0)
			continue;
		/* Keys must not move: insert the appended rule's own copy. */
		rc = append_deny(ld, pr, host, len, kind, from);
		if (rc == 0)
			rc = strtab_insert(t, pr->rules[pr->rule_count - 1].host, len, 0, &unused);
		rc = rc == -EEXIST ? 0 : rc;
	}
	strtab_free(&have[0]);
	strtab_free(&have[1]);
	if (rc == -ENOMEM || rc == -E2BIG)
		return loader_fail_oom(ld);
	return rc != 0 ? rc : profile_build(ld, pr);
}
static const struct keyset top_keyset = { "the policy", top_keys, TK__COUNT };

static int top_value(struct loader *ld, uint32_t key)
{
	AN_ASSERT(key < TK__COUNT);
	AN_ASSERT(ld->p != NULL);
	switch (key) {
	case TK_VERSION:
		return parse_version(ld);
	case TK_DAEMON:
		return loader_daemon(ld);
	case TK_RESOLVER:
		return loader_resolver(ld);
	case TK_PROFILES:
		return loader_profiles(ld);
	case TK_SANDBOXES:
		return loader_seq(ld, "sandboxes", LIMITS_SANDBOXES_MAX, false, sandbox_item, NULL);
	case TK_DENY:
		return loader_seq(ld, "deny", POLICY_DENY_MAX, false, deny_item, NULL);
	case TK_ALERTS:
		return loader_alerts(ld, NULL);
	default:
		(void)AN_NEVER(true);
		return -EINVAL;
	}
}

static int parse_top(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(ld->p != NULL && ld->p->profile_count == 0);
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "the policy");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &top_keyset, &seen, &key)) > 0) {
		rc = top_value(ld, key);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	rc = loader_check_mandatory(ld, &top_keyset, (1u << TK_VERSION) | (1u << TK_PROFILES), seen,
				    start);
	AN_ASSERT(rc != 0 || ld->p->profile_count > 0);
	return rc;
}

/* Sandbox profiles and tcp_sandbox, once every profile and sandbox is known. */
static int resolve_refs(struct loader *ld)
{
	char shown[SHOW_BYTES];
	uint32_t index = 0;

	for (uint32_t i = 0; i < ld->next.sandbox_count; i++) {
		const struct sandbox_ref *ref = &ld->refs[i];

		AN_ASSERT(ref->profile != NULL);
		if (strtab_find(&ld->p->profile_index, ref->profile, strlen(ref->profile), &index))
			return loader_fail(ld, ref->mark, "unknown profile \"%s\"", ref->profile);
		ld->next.sandboxes[i].profile = index;
	}
	const char *tcp = ld->next.tcp_sandbox;
	if (tcp != NULL && strtab_find(&ld->sandbox_ids, tcp, strlen(tcp), &index) != 0)
		return loader_fail(ld, ld->tcp_sandbox_mark,
				   "tcp_sandbox \"%s\" is not a sandbox listed under sandboxes",
				   loader_show(tcp, strlen(tcp), shown));
	AN_ASSERT(ld->p->profile_count > 0);
	return 0;
}

static int parse_stream(struct loader *ld)
{
	int rc = loader_next(ld);

	if (rc != 0)
		return rc;
	AN_ASSERT(ld->ev.type == YAML_STREAM_START_EVENT);
	rc = loader_next(ld);
	if (rc != 0)
		return rc;
	if (ld->ev.type == YAML_STREAM_END_EVENT)
		return loader_fail(ld, ld->ev.start_mark, "the policy is empty");
	AN_ASSERT(ld->ev.type == YAML_DOCUMENT_START_EVENT);
	rc = parse_top(ld);
	if (rc == 0)
		rc = loader_next(ld);
	if (rc != 0)
		return rc;
	AN_ASSERT(ld->ev.type == YAML_DOCUMENT_END_EVENT);
	rc = loader_next(ld);
	if (rc != 0)
		return rc;
	if (ld->ev.type != YAML_STREAM_END_EVENT)
		return loader_fail(ld, ld->ev.start_mark, "only one YAML document is allowed");
	/* Built once the whole file is read: the deny list may come after the profiles. */
	for (uint32_t i = 0; i < ld->p->profile_count && rc == 0; i++)
		rc = profile_finish(ld, &ld->p->profiles[i]);
	/* Merged once the whole file is read: the global `alerts:` may come after the profiles. */
	if (rc == 0)
		rc = loader_alerts_finish(ld);
	if (rc == 0)
		rc = resolve_refs(ld);
	if (rc == 0)
		rc = loader_index_fakes(ld);
	return rc != 0 ? rc : loader_index_injects(ld);
}

/* --- load ------------------------------------------------------------------- */

static void loader_cleanup(struct loader *ld)
{
	for (uint32_t i = 0; i < ld->deny_count; i++)
		acl_rule_free(&ld->deny[i]);
	AN_FREE(&ld->deny);
	psl_free(ld->psl); /* the built-in list is left alone by psl_free */
	ld->psl = NULL;
	if (ld->ev_live)
		yaml_event_delete(&ld->ev);
	yaml_parser_delete(&ld->parser);
	/* Every slot up to the capacity is zeroed or owned, whoever took the sandboxes. */
	for (uint32_t i = 0; i < ld->sandbox_cap; i++)
		AN_FREE(&ld->refs[i].profile);
	AN_FREE(&ld->refs);
	strtab_free(&ld->sandbox_ids);
	config_free(&ld->next);
	policy_free(ld->p);
	ld->p = NULL;
}

/* policy_load_buffer; <embedded>: <yaml> is the built-in policy. */
static int load_buffer(const char *name, const char *yaml, size_t len, bool embedded,
		       struct config *cfg, struct policy **out, char *err, size_t err_cap)
{
	struct loader ld = { .name = name, .input = yaml, .input_len = len, .embedded = embedded };

	AN_ASSERT(name != NULL && yaml != NULL);
	AN_ASSERT(cfg != NULL && out != NULL);
	AN_ASSERT(err != NULL || err_cap == 0);
	*out = NULL;
	ld.err = err;
	ld.err_cap = err_cap;
	if (err_cap > 0)
		err[0] = '\0';
	if (len > POLICY_FILE_BYTES_MAX) {
		if (err_cap > 0)
			snprintf(err, err_cap, "%s: larger than %u bytes", name,
				 POLICY_FILE_BYTES_MAX);
		return -EFBIG;
	}
	ld.p = pool_calloc(1, sizeof(*ld.p));
	if (ld.p == NULL)
		return loader_fail_oom(&ld);
	if (!yaml_parser_initialize(&ld.parser)) {
		policy_free(ld.p);
		return loader_fail_oom(&ld);
	}
	yaml_parser_set_input_string(&ld.parser, (const unsigned char *)yaml, len);
	int rc = parse_stream(&ld);
	if (rc == 0 && !embedded && (ld.p->source = pool_strndup(name, strlen(name))) == NULL)
		rc = loader_fail_oom(&ld);
	if (rc == 0) {
		XXH128_hash_t h = XXH3_128bits(yaml, len);
		snprintf(ld.p->digest, sizeof(ld.p->digest), "%016llx%016llx",
			 (unsigned long long)h.high64, (unsigned long long)h.low64);
	}
	if (rc == 0) {
		loader_apply_config(&ld, cfg);
		*out = ld.p;
		ld.p = NULL;
	}
	loader_cleanup(&ld);
	AN_ASSERT((rc == 0) == (*out != NULL));
	if (rc == 0)
		AN_ASSERT(cfg->ingress_optional == embedded);
	return rc;
}

int policy_load_buffer(const char *name, const char *yaml, size_t len, struct config *cfg,
		       struct policy **out, char *err, size_t err_cap)
{
	return load_buffer(name, yaml, len, false, cfg, out, err, err_cap);
}

int policy_load_or_default(const char *path, struct config *cfg, struct policy **out, char *err,
			   size_t err_cap)
{
	if (path != NULL)
		return policy_load_file(path, cfg, out, err, err_cap);
	const char *yaml = policy_default_yaml();
	return load_buffer("<embedded default policy>", yaml, strlen(yaml), true, cfg, out, err,
			   err_cap);
}

/* Reads all of <fd> into an owned buffer; at most POLICY_FILE_BYTES_MAX bytes. */
static int read_all(int fd, char **buf, size_t *len)
{
	size_t cap = 64 * 1024;
	size_t used = 0;
	char *b = pool_malloc(cap);

	AN_ASSERT(fd >= 0);
	AN_ASSERT(buf != NULL && len != NULL);
	if (b == NULL)
		return -ENOMEM;
	for (;;) {
		if (used == cap) {
			char *nb = cap > POLICY_FILE_BYTES_MAX ? NULL : pool_realloc(b, cap * 2);
			if (nb == NULL) {
				pool_free(b);
				return cap > POLICY_FILE_BYTES_MAX ? -EFBIG : -ENOMEM;
			}
			b = nb;
			cap *= 2;
		}
		ssize_t n = read(fd, b + used, cap - used);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			int e = errno;
			pool_free(b);
			return -e;
		}
		if (n == 0)
			break;
		used += (size_t)n;
	}
	*buf = b;
	*len = used;
	return used > POLICY_FILE_BYTES_MAX ? -EFBIG : 0;
}

int policy_load_file(const char *path, struct config *cfg, struct policy **out, char *err,
		     size_t err_cap)
{
	char *buf = NULL;
	size_t len = 0;

	AN_ASSERT(path != NULL && out != NULL);
	AN_ASSERT(err != NULL || err_cap == 0);
	*out = NULL;
	/* O_NONBLOCK: a FIFO or a device in the path's place never holds the open. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd == -1) {
		int e = errno;
		if (err_cap > 0)
			snprintf(err, err_cap, "%s: open: %s", path, strerror(e));
		return -e;
	}
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		if (err_cap > 0)
			snprintf(err, err_cap, "%s: fstat: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		bool dir = S_ISDIR(st.st_mode);
		close(fd);
		if (err_cap > 0)
			snprintf(err, err_cap, "%s: %s", path,
				 dir ? "read: Is a directory" : "not a regular file");
		return dir ? -EISDIR : -EINVAL;
	}
	if (st.st_size > POLICY_FILE_BYTES_MAX)
		rc = -EFBIG;
	if (rc == 0)
		rc = read_all(fd, &buf, &len);
	close(fd);
	if (rc == 0)
		rc = policy_load_buffer(path, buf, len, cfg, out, err, err_cap);
	else if (rc == -EFBIG && err_cap > 0)
		snprintf(err, err_cap, "%s: larger than %u bytes", path, POLICY_FILE_BYTES_MAX);
	else if (err_cap > 0)
		snprintf(err, err_cap, "%s: read: %s", path, strerror(-rc));
	/* The source by its absolute path: what another process, elsewhere, can open. */
	char absolute[PATH_MAX];
	if (rc == 0 && path[0] != '/' && realpath(path, absolute) != NULL) {
		char *kept = pool_strndup(absolute, strlen(absolute));
		if (kept != NULL) {
			pool_free((*out)->source);
			(*out)->source = kept;
		}
	}
	pool_free(buf);
	return rc;
}

/* --- the compiled policy ------------------------------------------------------ */

static const char default_yaml[] =
    "# agentsnet built-in policy: used when no policy file is given.\n"
    "version: 1\n"
    "daemon:\n"
    "  ingress:\n"
    "    listen: \"127.0.0.1:8090\"   # the gateway for webhooks to the sandboxes\n"
    "profiles:\n"
    "  default:\n"
    "    ingress:\n"
    "      limits:                   # for each sandbox: a flood cannot starve the others\n"
    "        requests_per_second: 50\n"
    "        burst: 100\n"
    "    rules:\n"
    "      - host: example.com\n"
    "        tier: fake\n"
    "        owner: agentsnet\n"
    "        reason: \"demo task target: answered locally by the fake-response tier\"\n"
    "        responses:\n"
    "          - status: 200          # the default: every method and path\n"
    "            headers:\n"
    "              Content-Type: text/html; charset=utf-8\n"
    "            body: |\n"
    "              <!doctype html>\n"
    "              <html>\n"
    "              <head><title>Answered by agentsnet</title></head>\n"
    "              <body>\n"
    "              <h1>Answered by agentsnet</h1>\n"
    "              <p>This page was answered by agentsnet's fake-response tier.\n"
    "              Nothing left the host: no request reached example.com.</p>\n"
    "              </body>\n"
    "              </html>\n"
    "      - host: ollama.internal\n"
    "        tier: local\n"
    "        upstream: \"127.0.0.1:11434\"\n"
    "        owner: agentsnet\n"
    "        reason: local model server\n"
    "sandboxes:\n"
    "  - id: default\n"
    "    profile: default\n";

const char *policy_default_yaml(void)
{
	AN_ASSERT(default_yaml[sizeof(default_yaml) - 1] == '\0');
	return default_yaml;
}

const char *policy_source(const struct policy *p)
{
	return p->source;
}

const char *policy_digest(const struct policy *p)
{
	AN_ASSERT(strlen(p->digest) == POLICY_DIGEST_HEX_BYTES);
	return p->digest;
}

void policy_free(struct policy *p)
{
	if (p == NULL)
		return;
	AN_FREE(&p->source);
	AN_ASSERT(p->profile_count <= p->profile_cap);
	AN_ASSERT(p->host_count <= p->host_cap);
	for (uint32_t i = 0; i < p->profile_count; i++) {
		struct policy_profile *pr = &p->profiles[i];

		acl_free(&pr->acl);
		for (uint32_t j = 0; j < pr->rule_count; j++)
			acl_rule_free(&pr->rules[j]);
		AN_FREE(&pr->rules);
		AN_FREE(&pr->name);
		AN_FREE(&pr->ingress_own);
		AN_FREE(&pr->alerts_own);
		AN_FREE(&pr->users);
		AN_FREE(&pr->groups);
		AN_FREE(&pr->injects);
	}
	for (uint32_t i = 0; i < p->host_count; i++) {
		AN_FREE(&p->hosts[i].name);
		AN_FREE(&p->hosts[i].addrs);
	}
	for (uint32_t i = 0; i < p->fake_count; i++)
		loader_fake_free(&p->fakes[i]);
	AN_FREE(&p->fakes);
	AN_FREE(&p->fake_by_rule);
	for (uint32_t i = 0; i < p->inject_count; i++)
		loader_inject_free(&p->injects[i]);
	AN_FREE(&p->injects);
	AN_FREE(&p->inject_by_rule);
	AN_FREE(&p->profiles);
	AN_FREE(&p->hosts);
	AN_FREE(&p->allow);
	strtab_free(&p->profile_index);
	strtab_free(&p->host_index);
	pool_free(p);
}

bool policy_profile_admits(const struct policy *p, uint32_t index, const struct verdict_caller *who)
{
	AN_ASSERT(p != NULL && who != NULL);
	AN_ASSERT(index < p->profile_count);
	const struct policy_profile *pr = &p->profiles[index];
	if (who->uid == 0)
		return true;
	if (!pr->registrants_named) {
		for (uint32_t j = 0; j < pr->rule_count; j++) {
			if (pr->rules[j].tier == TIER_INJECT)
				return false; /* another team's credentials: never open by default */
		}
		return true;
	}
	for (uint32_t i = 0; i < pr->user_count; i++) {
		if (pr->users[i] == who->uid)
			return true;
	}
	for (uint32_t i = 0; i < pr->group_count; i++) {
		if (pr->groups[i] == who->gid)
			return true;
		for (uint32_t k = 0; k < who->group_count; k++) {
			if (pr->groups[i] == who->groups[k])
				return true;
		}
	}
	return false;
}

static bool policy_profile_admits_op(const void *policy, uint32_t index,
				     const struct verdict_caller *who)
{
	return policy_profile_admits(policy, index, who);
}

int policy_profile_index(const struct policy *p, const char *name)
{
	uint32_t index = 0;

	AN_ASSERT(p != NULL && name != NULL);
	if (strtab_find(&p->profile_index, name, strlen(name), &index) != 0)
		return -ENOENT;
	AN_ASSERT(index < p->profile_count);
	return (int)index;
}

uint32_t policy_profile_count(const struct policy *p)
{
	AN_ASSERT(p != NULL);
	return p->profile_count;
}

const char *policy_profile_name(const struct policy *p, uint32_t index)
{
	AN_ASSERT(p != NULL);
	AN_ASSERT(index < p->profile_count);
	return p->profiles[index].name;
}

uint32_t policy_rule_count(const struct policy *p)
{
	AN_ASSERT(p != NULL);
	return p->rule_count;
}

void policy_terminated_rules(const struct policy *p, void *arg,
			     void (*fn)(void *arg, const char *profile, const char *rule,
					enum tier tier, uint32_t line))
{
	AN_ASSERT(p != NULL && fn != NULL);
	for (uint32_t i = 0; i < p->profile_count; i++) {
		const struct policy_profile *pr = &p->profiles[i];
		for (uint32_t j = 0; j < pr->rule_count; j++) {
			const struct acl_rule *r = &pr->rules[j];
			if (r->tier == TIER_FAKE || r->tier == TIER_INJECT)
				fn(arg, pr->name, r->id, (enum tier)r->tier, r->line);
		}
	}
}

static void policy_decide(const void *snapshot, uint32_t profile, const char *host, size_t host_len,
			  uint16_t port, struct verdict *out)
{
	const struct policy *p = snapshot;

	AN_ASSERT(p != NULL);
	AN_ASSERT(profile < p->profile_count);
	acl_decide(&p->profiles[profile].acl, host, host_len, port, out);
	/* Every served verdict has its rule's index: the key of its responses or credential. */
	out->fake = NULL;
	if (out->tier == TIER_FAKE) {
		AN_DASSERT(out->rule_index < p->rule_count);
		AN_DASSERT(p->fake_by_rule != NULL);
		out->fake = p->fake_by_rule[out->rule_index];
		AN_DASSERT(out->fake != NULL);
	}
	out->inject = NULL;
	if (out->tier == TIER_INJECT) {
		AN_DASSERT(out->rule_index < p->rule_count);
		AN_DASSERT(p->inject_by_rule != NULL);
		out->inject = p->inject_by_rule[out->rule_index];
		AN_DASSERT(out->inject != NULL);
	}
	/* The engine keys per-rule limits by the index: a refusal must carry none. */
	if (out->tier == TIER_DENY)
		AN_DASSERT(out->rule_index == VERDICT_RULE_NONE);
	if (out->rule_index == VERDICT_RULE_NONE)
		AN_DASSERT(limits_none(&out->rule_limits));
	else
		AN_DASSERT(out->rule_index < p->rule_count);
}

static int policy_normalise_host(const char *host, size_t len, char *out, size_t cap)
{
	char norm[HOST_NORM_BYTES];
	enum acl_kind kind;

	AN_ASSERT(host != NULL || len == 0);
	AN_ASSERT(out != NULL);
	int n = host_normalise(host, len, norm, sizeof(norm), &kind, NULL);
	if (n < 0 || (size_t)n >= cap)
		return -1;
	memcpy(out, norm, (size_t)n + 1);
	return n;
}

static int policy_static_lookup(const void *snapshot, const char *host, size_t host_len,
				uint16_t port, struct sockaddr_storage *out, int cap)
{
	const struct policy *p = snapshot;
	char norm[HOST_NORM_BYTES];
	enum acl_kind kind;
	uint32_t index = 0;

	AN_ASSERT(p != NULL);
	AN_ASSERT(out != NULL || cap <= 0);
	int n = host_normalise(host, host_len, norm, sizeof(norm), &kind, NULL);
	if (n < 0 || kind != ACL_KIND_NAME || cap <= 0)
		return 0;
	if (strtab_find(&p->host_index, norm, (size_t)n, &index) != 0)
		return 0;
	const struct policy_host *h = &p->hosts[index];
	int count = h->addr_count < (uint32_t)cap ? (int)h->addr_count : cap;
	for (int i = 0; i < count; i++) {
		out[i] = h->addrs[i];
		if (out[i].ss_family == AF_INET)
			((struct sockaddr_in *)&out[i])->sin_port = htons(port);
		else
			((struct sockaddr_in6 *)&out[i])->sin6_port = htons(port);
	}
	return count;
}

static bool policy_address_permitted(const void *snapshot, const struct sockaddr *sa)
{
	const struct policy *p = snapshot;

	AN_ASSERT(p != NULL);
	AN_ASSERT(sa != NULL);
	return addr_permitted(p->allow, p->allow_count, sa);
}

static const char *policy_address_class(const struct sockaddr *sa)
{
	return addr_class_name(addr_classify(sa));
}

static int policy_profile_index_op(const void *policy, const char *name)
{
	return policy_profile_index(policy, name);
}

static const char *policy_profile_name_op(const void *policy, uint32_t index)
{
	return policy_profile_name(policy, index);
}

static void policy_profile_limits_op(const void *policy, uint32_t index, struct verdict_limits *out)
{
	const struct policy *p = policy;

	AN_ASSERT(index < p->profile_count);
	AN_ASSERT(out != NULL);
	*out = p->profiles[index].limits;
}

static const struct verdict_ingress *policy_profile_ingress_op(const void *policy, uint32_t index)
{
	const struct policy *p = policy;

	AN_ASSERT(p != NULL);
	AN_ASSERT(index < p->profile_count);
	const struct verdict_ingress *vi = p->profiles[index].ingress;
	AN_ASSERT(vi != NULL);
	AN_DASSERT(vi->method_count >= 1);
	AN_DASSERT(vi->body_bytes_max >= 1);
	return vi;
}

static const struct alert_config *policy_profile_alerts_op(const void *policy, uint32_t index)
{
	const struct policy *p = policy;

	AN_ASSERT(p != NULL);
	AN_ASSERT(index < p->profile_count);
	const struct alert_config *a = p->profiles[index].alerts;
	AN_ASSERT(a != NULL);
	AN_DASSERT(a->cooldown_s >= 1);
	return a;
}

static bool policy_placeholder_elsewhere_op(const void *policy, uint32_t profile, const char *buf,
					    size_t len, const struct verdict_inject *own)
{
	const struct policy *p = policy;

	AN_ASSERT(profile < p->profile_count);
	return inject_placeholder_elsewhere(&p->profiles[profile], buf, len, own);
}

static uint32_t policy_profile_count_op(const void *policy)
{
	return policy_profile_count(policy);
}

static uint32_t policy_rule_count_op(const void *policy)
{
	return policy_rule_count(policy);
}

static bool response_matches(const struct policy_response *r, const char *method, size_t method_len,
			     const char *path, size_t path_len)
{
	/* HEAD is GET without the body (RFC 9110 section 9.3.2): a GET entry answers it. */
	bool head_as_get = method_len == 4 && memcmp(method, "HEAD", 4) == 0 &&
			   r->method_len == 3 && r->method != NULL &&
			   memcmp(r->method, "GET", 3) == 0;
	if (r->method != NULL && !head_as_get &&
	    (method_len != r->method_len || memcmp(method, r->method, method_len) != 0))
		return false;
	if (r->path == NULL)
		return true;
	if (r->prefix)
		return path_len >= r->path_len && memcmp(path, r->path, r->path_len) == 0;
	return path_len == r->path_len && memcmp(path, r->path, path_len) == 0;
}

static const struct verdict_response *policy_fake_response_op(const void *policy, const void *fake,
							      const char *method, size_t method_len,
							      const char *path, size_t path_len)
{
	const struct policy *p = policy;
	const struct policy_fake *f = fake;

	AN_ASSERT(p != NULL);
	AN_ASSERT(f >= p->fakes && f < p->fakes + p->fake_count);
	AN_DASSERT(f->count >= 1);
	AN_DASSERT(loader_response_is_default(&f->responses[f->count - 1]));
	AN_ASSERT(method != NULL || method_len == 0);
	AN_ASSERT(path != NULL || path_len == 0);
	/* Routes name paths; the query never decides (RFC 9110 section 4.2.1 sets it apart). */
	const char *query = path_len > 0 ? memchr(path, '?', path_len) : NULL;
	if (query != NULL)
		path_len = (size_t)(query - path);
	for (uint32_t i = 0; i + 1 < f->count; i++) {
		if (response_matches(&f->responses[i], method, method_len, path, path_len))
			return &f->responses[i].vr;
	}
	return &f->responses[f->count - 1].vr;
}

/* The cursor is (profile << 32 | rule): the next rule to look at. */
static const char *policy_terminated_host_op(const void *policy, uint64_t *cursor, size_t *len)
{
	const struct policy *p = policy;

	AN_ASSERT(p != NULL && cursor != NULL && len != NULL);
	for (uint32_t i = (uint32_t)(*cursor >> 32); i < p->profile_count; i++) {
		const struct policy_profile *pr = &p->profiles[i];
		uint32_t first = i == (uint32_t)(*cursor >> 32) ? (uint32_t)*cursor : 0;
		for (uint32_t j = first; j < pr->rule_count; j++) {
			const struct acl_rule *r = &pr->rules[j];
			if ((r->tier != TIER_FAKE && r->tier != TIER_INJECT) ||
			    r->kind == ACL_KIND_WILDCARD)
				continue;
			*cursor = ((uint64_t)i << 32) | (j + 1u);
			*len = r->host_len;
			return r->host;
		}
	}
	*cursor = (uint64_t)p->profile_count << 32;
	return NULL;
}

/* The engine owns its snapshots and hands each back here once unreachable. */
static void policy_release_op(const void *policy)
{
	policy_free((struct policy *)(uintptr_t)policy);
}

static const char *policy_source_op(const void *policy, const char **digest)
{
	const struct policy *p = policy;

	*digest = policy_digest(p);
	return policy_source(p);
}

const struct verdict_ops policy_verdict_ops = {
	.decide = policy_decide,
	.normalise_host = policy_normalise_host,
	.static_lookup = policy_static_lookup,
	.address_permitted = policy_address_permitted,
	.address_class = policy_address_class,
	.profile_index = policy_profile_index_op,
	.profile_admits = policy_profile_admits_op,
	.profile_name = policy_profile_name_op,
	.profile_limits = policy_profile_limits_op,
	.profile_ingress = policy_profile_ingress_op,
	.profile_alerts = policy_profile_alerts_op,
	.placeholder_elsewhere = policy_placeholder_elsewhere_op,
	.profile_count = policy_profile_count_op,
	.rule_count = policy_rule_count_op,
	.fake_response = policy_fake_response_op,
	.terminated_host = policy_terminated_host_op,
	.release = policy_release_op,
	.source = policy_source_op,
};
