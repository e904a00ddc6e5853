/*
 * The `profiles:` section: each profile's rules, its limits, and who may
 * register sandboxes on it (`users`, `groups`). A profile's `ingress:` is
 * ingress.c's, its `alerts:` alerts.c's, and a rule's `responses` and
 * `inject` are fake.c's and
 * inject.c's; a rule's host is read by host.c, normalised as the engine
 * normalises the host an agent asks for, so the two compare as bytes.
 *
 * A rule is read key by key into a struct acl_rule, then checked whole once
 * its mapping ends (rule_finish): the mandatory keys, the keys each tier
 * needs and refuses, the ports an inject rule sends its credential to, the
 * default id "<profile>/<n>" and its uniqueness in the profile, and inject
 * rules that share a placeholder sharing the secret too. An upstream is a
 * canonical "host:port" or a Unix socket's absolute path. `users` and
 * `groups` are resolved to ids at load, so a name this host does not know
 * is a load error.
 *
 * What needs the whole document stays in policy.c: a profile's host index
 * (acl.c) is built there, once the global deny list, which may come after
 * the profiles, has been copied into it.
 */
#include "policy/loader.h"

#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "core/an.h"
#include "core/pool.h"
#include "core/reason.h"
#include "policy/acl.h"
#include "policy/preset.h"
#include "policy/strtab.h"

/* A profile's and a rule's limits: the same keys and bounds, named apart in messages. */
static const struct keyset profile_limit_keyset = { "a profile's limits", loader_limit_keys,
						    AN_ARRAY_LEN(loader_limit_keys) };
static const struct keyset rule_limit_keyset = { "a rule's limits", loader_limit_keys,
						 AN_ARRAY_LEN(loader_limit_keys) };

/* --- rules ---------------------------------------------------------------- */

enum {
	RULE_HOST,
	RULE_PORTS,
	RULE_TIER,
	RULE_OWNER,
	RULE_REASON,
	RULE_INSTRUCTION,
	RULE_UPSTREAM,
	RULE_ID,
	RULE_LIMITS,
	RULE_RESPONSES,
	RULE_INJECT,
	RULE_UPSTREAM_CA,
	RULE_SERVER_NAME_CHECK,
	RULE__COUNT
};
static const char *const rule_keys[] = {
	[RULE_HOST] = "host",
	[RULE_PORTS] = "ports",
	[RULE_TIER] = "tier",
	[RULE_OWNER] = "owner",
	[RULE_REASON] = "reason",
	[RULE_INSTRUCTION] = "instruction",
	[RULE_UPSTREAM] = "upstream",
	[RULE_ID] = "id",
	[RULE_LIMITS] = "limits",
	[RULE_RESPONSES] = "responses",
	[RULE_INJECT] = "inject",
	[RULE_UPSTREAM_CA] = "upstream_ca",
	[RULE_SERVER_NAME_CHECK] = "server_name_check",
};
static_assert(AN_ARRAY_LEN(rule_keys) == RULE__COUNT, "every rule key needs a name");
static const struct keyset rule_keyset = { "a rule", rule_keys, RULE__COUNT };
static const uint32_t rule_mandatory =
    (1u << RULE_HOST) | (1u << RULE_TIER) | (1u << RULE_OWNER) | (1u << RULE_REASON);

struct profile_ctx {
	struct policy_profile *profile;
	struct strtab ids;          /* rule id -> index, for duplicates */
	struct strtab placeholders; /* an inject's placeholder -> index in p->injects */
};

static int port_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct acl_rule *r = ctx;
	uint64_t v = 0;

	AN_ASSERT(index < POLICY_RULE_PORTS_MAX && index == r->port_count);
	int rc = loader_uint(ld, "port", 1, 65535, &v);
	if (rc != 0)
		return rc;
	for (uint16_t i = 0; i < r->port_count; i++) {
		if (r->ports[i] == v)
			return loader_fail(ld, ld->ev.start_mark, "duplicate port %llu",
					   (unsigned long long)v);
	}
	r->ports[r->port_count++] = (uint16_t)v;
	AN_ASSERT(v >= 1 && v <= 65535);
	return 0;
}

static int parse_ports(struct loader *ld, struct acl_rule *r)
{
	AN_ASSERT(r->ports == NULL);
	r->ports = pool_calloc(POLICY_RULE_PORTS_MAX, sizeof(*r->ports));
	if (r->ports == NULL)
		return loader_fail_oom(ld);
	int rc = loader_seq(ld, "ports", POLICY_RULE_PORTS_MAX, true, port_item, r);
	if (rc != 0)
		return rc;
	uint16_t *fit = pool_realloc(r->ports, r->port_count * sizeof(*fit));
	if (fit != NULL)
		r->ports = fit;
	AN_ASSERT(r->port_count > 0);
	return 0;
}

static int parse_tier(struct loader *ld, struct acl_rule *r, yaml_mark_t *mark)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(mark != NULL);
	int rc = loader_scalar(ld, "tier", "a string");
	if (rc != 0)
		return rc;
	*mark = ld->ev.start_mark;
	for (uint32_t t = 0; t < TIER__COUNT; t++) {
		const char *name = reason_tier_name((enum tier)t);

		if (ev_len(ld) == strlen(name) && memcmp(ev_text(ld), name, ev_len(ld)) == 0) {
			r->tier = (uint8_t)t;
			return 0;
		}
	}
	AN_ASSERT(TIER__COUNT == 5);
	return loader_fail(
	    ld, ld->ev.start_mark,
	    "unknown tier \"%s\" (expected passthrough, local, fake, inject or deny)",
	    loader_show(ev_text(ld), ev_len(ld), shown));
}

/*
 * A local upstream that is a Unix socket: an absolute path that fits
 * sun_path with its NUL. Nothing is checked on disk: the server may start
 * after the daemon (a connect that fails is answered upstream_unreachable).
 */
static int parse_upstream_unix(struct loader *ld, struct acl_rule *r)
{
	char shown[SHOW_BYTES];
	const char *path = ev_text(ld);
	size_t len = ev_len(ld);

	AN_ASSERT(len > 0 && path[0] == '/');
	const char *why = len > POLICY_UPSTREAM_UNIX_BYTES_MAX ? "longer than a socket path may be"
			  : memchr(path, '\0', len) != NULL    ? "a NUL in the path"
							       : NULL;
	for (size_t i = 0; why == NULL && i < len; i++) {
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
			why = "a control character in the path";
	}
	if (why != NULL)
		return loader_fail(ld, ld->ev.start_mark, "invalid upstream \"%s\": %s",
				   loader_show(path, len, shown), why);
	r->upstream = pool_strndup(path, len);
	return r->upstream != NULL ? 0 : loader_fail_oom(ld);
}

static int parse_upstream(struct loader *ld, struct acl_rule *r)
{
	char norm[HOST_NORM_BYTES];
	char shown[SHOW_BYTES];
	char buf[HOST_NORM_BYTES + sizeof("[]:65535")];
	enum acl_kind kind = ACL_KIND_NAME;
	struct hostport hp;

	AN_ASSERT(r->upstream == NULL);
	int rc = loader_scalar(ld, "upstream", "a string");
	if (rc != 0)
		return rc;
	if (ev_len(ld) > 0 && ev_text(ld)[0] == '/')
		return parse_upstream_unix(ld, r);
	const char *why = loader_split_hostport(ev_text(ld), ev_len(ld), &hp);
	if (why == NULL && hp.port == 0)
		why = "expected host:port";
	int n = -1;
	if (why == NULL)
		n = host_normalise(hp.host, hp.host_len, norm, sizeof(norm), &kind, &why);
	bool v6 = n > 0 && kind == ACL_KIND_IP && memchr(norm, ':', (size_t)n) != NULL;
	if (why == NULL && hp.bracketed && !v6)
		why = "brackets are for IPv6 addresses";
	if (why != NULL || n < 0)
		return loader_fail(ld, ld->ev.start_mark, "invalid upstream \"%s\": %s",
				   loader_show(ev_text(ld), ev_len(ld), shown), why);
	snprintf(buf, sizeof(buf), v6 ? "[%s]:%u" : "%s:%u", norm, hp.port);
	r->upstream = pool_strndup(buf, strlen(buf));
	if (r->upstream == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(hp.port >= 1 && hp.port <= 65535);
	return 0;
}

/* Rule ids: [A-Za-z0-9_.:/@+-]{1,95}. */
static bool is_rule_id(const char *s, size_t len)
{
	if (len == 0 || len > POLICY_RULE_ID_BYTES_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || strchr("_.:/@+-", c) != NULL;
		if (!ok || c == '\0')
			return false;
	}
	AN_ASSERT(len <= POLICY_RULE_ID_BYTES_MAX);
	return true;
}

static int parse_rule_id(struct loader *ld, struct acl_rule *r, yaml_mark_t *mark)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(r->id == NULL);
	int rc = loader_scalar(ld, "id", "a string");
	if (rc != 0)
		return rc;
	*mark = ld->ev.start_mark;
	if (!is_rule_id(ev_text(ld), ev_len(ld)))
		return loader_fail(
		    ld, ld->ev.start_mark, "invalid rule id \"%s\": use 1-%u of [A-Za-z0-9_.:/@+-]",
		    loader_show(ev_text(ld), ev_len(ld), shown), POLICY_RULE_ID_BYTES_MAX);
	r->id = pool_strndup(ev_text(ld), ev_len(ld));
	if (r->id == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(r->id[0] != '\0');
	return 0;
}

/* Inject rules of one profile share a placeholder only when they share the secret too. */
static int inject_share(struct loader *ld, struct profile_ctx *pc, const struct acl_rule *r,
			yaml_mark_t m)
{
	const struct policy *p = ld->p;
	const struct acl_rule *rules = pc->profile->rules;
	uint32_t first = 0;

	AN_ASSERT(p->inject_count > 0);
	uint32_t i = p->inject_count - 1;
	const struct policy_inject *in = &p->injects[i];
	AN_ASSERT(in->rule_index == r->index);
	int rc =
	    strtab_insert(&pc->placeholders, in->placeholder, in->vi.placeholder_len, i, &first);
	if (rc == 0)
		return 0;
	if (rc != -EEXIST)
		return loader_fail_oom(ld);
	const struct policy_inject *other = &p->injects[first];
	if (other->vi.secret_len == in->vi.secret_len &&
	    memcmp(other->secret, in->secret, in->vi.secret_len) == 0)
		return 0;
	/* A profile's rules have consecutive indexes, in file order. */
	const struct acl_rule *o = &rules[other->rule_index - rules[0].index];
	AN_ASSERT(o->index == other->rule_index);
	return loader_fail(
	    ld, m,
	    "the placeholder is also rule \"%s\"'s (line %u), with another secret: give "
	    "each secret its own placeholder",
	    o->id, o->line);
}

static int rule_value(struct loader *ld, struct acl_rule *r, uint32_t key, struct rule_marks *m)
{
	AN_ASSERT(key < RULE__COUNT);
	AN_ASSERT(r != NULL && m != NULL);
	switch (key) {
	case RULE_HOST:
		return loader_rule_host(ld, r);
	case RULE_PORTS:
		m->ports = ld->key_mark;
		return parse_ports(ld, r);
	case RULE_TIER:
		return parse_tier(ld, r, &m->tier);
	case RULE_OWNER:
		return loader_text(ld, "owner", &r->owner);
	case RULE_REASON:
		return loader_text(ld, "reason", &r->reason);
	case RULE_INSTRUCTION:
		return loader_text(ld, "instruction", &r->instruction);
	case RULE_UPSTREAM:
		m->upstream = ld->key_mark;
		return parse_upstream(ld, r);
	case RULE_ID:
		return parse_rule_id(ld, r, &m->id);
	case RULE_LIMITS:
		m->limits = ld->key_mark;
		return loader_limits(ld, &rule_limit_keyset, &r->limits);
	case RULE_RESPONSES:
		m->responses = ld->key_mark;
		return loader_responses(ld, r);
	case RULE_INJECT:
		m->inject = ld->key_mark;
		return loader_inject(ld, r, m);
	case RULE_UPSTREAM_CA:
		m->upstream_ca = ld->key_mark;
		return loader_upstream_ca(ld, r);
	case RULE_SERVER_NAME_CHECK: {
		m->server_name_check = ld->key_mark;
		bool check = true;
		int rc = loader_bool(ld, "server_name_check", &check);
		r->server_name_any = !check;
		return rc;
	}
	default:
		(void)AN_NEVER(true);
		return -EINVAL;
	}
}

/*
 * The keys of one tier: each needed on its tier and refused on the others.
 * Checklist when a tier gets a key of its own: here, and docs/policy.md.
 */
static int rule_tier_keys(struct loader *ld, const struct acl_rule *r, uint32_t seen,
			  const struct rule_marks *m)
{
	AN_ASSERT(r->tier < TIER__COUNT);
	AN_ASSERT(m != NULL);
	if (r->tier == TIER_LOCAL && r->upstream == NULL)
		return loader_fail(ld, m->tier,
				   "tier local needs an upstream (\"host:port\" to relay to)");
	if (r->tier != TIER_LOCAL && r->upstream != NULL)
		return loader_fail(ld, m->upstream, "upstream is only allowed with tier local");
	if (r->tier == TIER_FAKE && !(seen & (1u << RULE_RESPONSES)))
		return loader_fail(
		    ld, m->tier,
		    "tier fake needs responses (the canned answers, the last one a default "
		    "without method and path)");
	if (r->tier != TIER_FAKE && (seen & (1u << RULE_RESPONSES)))
		return loader_fail(ld, m->responses, "responses is only allowed with tier fake");
	if (r->tier == TIER_INJECT && !(seen & (1u << RULE_INJECT)))
		return loader_fail(
		    ld, m->tier,
		    "tier inject needs inject (the header, the placeholder, and secret_env "
		    "or secret_file)");
	if (r->tier != TIER_INJECT && (seen & (1u << RULE_INJECT)))
		return loader_fail(ld, m->inject, "inject is only allowed with tier inject");
	if (r->tier != TIER_INJECT && (seen & (1u << RULE_UPSTREAM_CA)))
		return loader_fail(ld, m->upstream_ca,
				   "upstream_ca is only allowed with tier inject");
	if (r->tier != TIER_PASSTHROUGH && (seen & (1u << RULE_SERVER_NAME_CHECK)))
		return loader_fail(
		    ld, m->server_name_check,
		    "server_name_check is only allowed with tier passthrough (the "
		    "terminated tiers check the Host against the server name themselves)");
	return 0;
}

/* Whole-rule checks once every key is read, then the id (default "<profile>/<n>"). */
static int rule_finish(struct loader *ld, struct profile_ctx *pc, struct acl_rule *r,
		       uint32_t index, uint32_t seen, const struct rule_marks *m)
{
	char buf[POLICY_RULE_ID_BYTES_MAX + 1];
	uint32_t first = 0;

	AN_ASSERT(index < pc->profile->rule_count);
	int rc = loader_check_mandatory(ld, &rule_keyset, rule_mandatory, seen, m->start);
	if (rc == 0)
		rc = rule_tier_keys(ld, r, seen, m);
	if (rc != 0)
		return rc;
	if (r->tier == TIER_DENY && r->ports != NULL)
		return loader_fail(
		    ld, m->ports,
		    "ports cannot be combined with tier deny, which refuses every port");
	if (r->tier == TIER_DENY && (seen & (1u << RULE_LIMITS)))
		return loader_fail(
		    ld, m->limits,
		    "limits cannot be combined with tier deny, which serves no request");
	if (r->tier == TIER_INJECT) {
		rc = inject_share(ld, pc, r, m->placeholder);
		if (rc != 0)
			return rc;
	}
	/* A credential goes to HTTPS's port unless the rule names others (issue 17 item 6). */
	if (r->tier == TIER_INJECT && r->ports == NULL) {
		r->ports = pool_calloc(1, sizeof(*r->ports));
		if (r->ports == NULL)
			return loader_fail_oom(ld);
		r->ports[0] = POLICY_INJECT_PORT_DEFAULT;
		r->port_count = 1;
	}
	yaml_mark_t id_mark = r->id != NULL ? m->id : m->start;
	if (r->id == NULL) {
		snprintf(buf, sizeof(buf), "%s/%u", pc->profile->name, index + 1);
		r->id = pool_strndup(buf, strlen(buf));
		if (r->id == NULL)
			return loader_fail_oom(ld);
	}
	/* By its place among the profile's rules, which presets add to too (not <index>,
	 * its place in one sequence). */
	rc = strtab_insert(&pc->ids, r->id, strlen(r->id), (uint32_t)(r - pc->profile->rules),
			   &first);
	if (rc == -EEXIST)
		return loader_fail(ld, id_mark,
				   "duplicate rule id \"%s\" in profile \"%s\" (first at line %u)",
				   r->id, pc->profile->name, pc->profile->rules[first].line);
	if (rc != 0)
		return loader_fail_oom(ld);
	AN_ASSERT(r->owner != NULL && r->reason != NULL && r->host != NULL);
	return 0;
}

static int rule_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct profile_ctx *pc = ctx;
	struct policy_profile *pr = pc->profile;
	struct rule_marks m;
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(index <= pr->rule_count); /* presets add rules too */
	if (ld->p->rule_count >= POLICY_RULES_MAX)
		return loader_fail(ld, ld->ev.start_mark, "the policy has more than %u rules",
				   POLICY_RULES_MAX);
	struct acl_rule *rules =
	    loader_grow_array(pr->rules, &pr->rule_cap, pr->rule_count, sizeof(*rules));
	if (rules == NULL)
		return loader_fail_oom(ld);
	pr->rules = rules;
	struct acl_rule *r = &pr->rules[pr->rule_count++];
	/* Dense over the whole file, in file order: the key of the rule's per-sandbox limits. */
	r->index = ld->p->rule_count++;
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "a rule");
	if (rc != 0)
		return rc;
	memset(&m, 0, sizeof(m));
	m.start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &rule_keyset, &seen, &key)) > 0) {
		rc = rule_value(ld, r, key, &m);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	AN_ASSERT(ld->p->rule_count <= POLICY_RULES_MAX);
	return rule_finish(ld, pc, r, index, seen, &m);
}

/* One entry of a profile's `users` or `groups`: a name, resolved now, or a number. */
struct registrant_ctx {
	uint32_t *ids;
	uint32_t *count;
	bool groups;
};

static int registrant_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct registrant_ctx *rc_ctx = ctx;
	const char *what = rc_ctx->groups ? "groups" : "users";
	char name[256];
	uint32_t id = 0;

	AN_ASSERT(index == *rc_ctx->count);
	int rc = loader_scalar(ld, what, "a name or a number");
	if (rc != 0)
		return rc;
	size_t len = ev_len(ld);
	if (len == 0 || len >= sizeof(name) || !loader_text_is_clean(ev_text(ld), len))
		return loader_fail(ld, ld->ev.start_mark, "%s: a %s name or number of 1-%zu bytes",
				   what, rc_ctx->groups ? "group" : "user", sizeof(name) - 1);
	memcpy(name, ev_text(ld), len);
	name[len] = '\0';
	char *end = NULL;
	errno = 0;
	unsigned long n = strtoul(name, &end, 10);
	if (name[0] >= '0' && name[0] <= '9' && *end == '\0' && errno == 0 && n < UINT32_MAX) {
		id = (uint32_t)n;
	} else if (rc_ctx->groups) {
		struct group *g = getgrnam(name);
		if (g == NULL)
			return loader_fail(ld, ld->ev.start_mark,
					   "groups: no such group '%s' on this host", name);
		id = (uint32_t)g->gr_gid;
	} else {
		struct passwd *pw = getpwnam(name);
		if (pw == NULL)
			return loader_fail(ld, ld->ev.start_mark,
					   "users: no such user '%s' on this host", name);
		id = (uint32_t)pw->pw_uid;
	}
	rc_ctx->ids[(*rc_ctx->count)++] = id;
	return 0;
}

static int parse_registrants(struct loader *ld, struct policy_profile *pr, bool groups)
{
	uint32_t **ids = groups ? &pr->groups : &pr->users;
	uint32_t *count = groups ? &pr->group_count : &pr->user_count;

	AN_ASSERT(*ids == NULL);
	*ids = pool_calloc(POLICY_REGISTRANTS_MAX, sizeof(**ids));
	if (*ids == NULL)
		return loader_fail_oom(ld);
	pr->registrants_named = true;
	struct registrant_ctx ctx = { .ids = *ids, .count = count, .groups = groups };
	return loader_seq(ld, groups ? "groups" : "users", POLICY_REGISTRANTS_MAX, false,
			  registrant_item, &ctx);
}

/* --- presets (policy/preset.h) ------------------------------------------- */

/* <err> past its "<name>:LINE:COLUMN: " (loader_fail's), or all of it when it has none. */
static const char *message_of(const char *err, const char *name)
{
	size_t len = strlen(name);

	if (strncmp(err, name, len) != 0)
		return err;
	const char *c = err + len;
	for (int field = 0; field < 2; field++) {
		if (*c++ != ':' || *c < '0' || *c > '9')
			return err;
		while (*c >= '0' && *c <= '9')
			c++;
	}
	return c[0] == ':' && c[1] == ' ' ? c + 2 : err;
}

/*
 * Reads preset <p>'s rules, as <a> fills them in, into the profile: the
 * file's parser is set aside and the rule reader runs on the preset's YAML.
 * A fault is reported at <at>, the presets entry, with the preset named; the
 * rules' line is the entry's.
 */
static int preset_read(struct loader *ld, struct profile_ctx *pc, const struct preset *p,
		       const struct preset_args *a, yaml_mark_t at)
{
	char why[256];
	char *yaml = pool_malloc(PRESET_YAML_BYTES_MAX);

	if (yaml == NULL)
		return loader_fail_oom(ld);
	int n = preset_rules_yaml(p, a, yaml, PRESET_YAML_BYTES_MAX, why, sizeof(why));
	if (n < 0) {
		pool_free(yaml);
		return loader_fail(ld, at, "preset %s", why);
	}
	yaml_parser_t file_parser = ld->parser;
	yaml_event_t file_ev = ld->ev;
	bool file_ev_live = ld->ev_live;
	const char *file_input = ld->input;
	size_t file_input_len = ld->input_len;
	uint32_t first_rule = pc->profile->rule_count;
	AN_ASSERT(!ld->ev_again);
	ld->ev_live = false;
	ld->input = yaml;
	ld->input_len = (size_t)n;
	int rc = 0;
	if (!yaml_parser_initialize(&ld->parser)) {
		rc = loader_fail_oom(ld);
	} else {
		yaml_parser_set_input_string(&ld->parser, (const unsigned char *)yaml, (size_t)n);
		rc = loader_next(ld); /* the stream's start */
		if (rc == 0)
			rc = loader_next(ld); /* the document's */
		if (rc == 0)
			rc = loader_seq(ld, "rules", POLICY_RULES_MAX, false, rule_item, pc);
		if (ld->ev_live)
			yaml_event_delete(&ld->ev);
		yaml_parser_delete(&ld->parser);
	}
	ld->parser = file_parser;
	ld->ev = file_ev;
	ld->ev_live = file_ev_live;
	ld->ev_again = false;
	ld->input = file_input;
	ld->input_len = file_input_len;
	explicit_bzero(yaml, (size_t)n); /* it named the secret's file or variable */
	pool_free(yaml);
	for (uint32_t i = first_rule; i < pc->profile->rule_count; i++) {
		pc->profile->rules[i].line = loader_mark_u32(at.line);
		pc->profile->rules[i].col = loader_mark_u32(at.column);
	}
	if (rc == -EINVAL && ld->err_cap > 0) {
		/* "<file>:L:C: message" at the preset's own text: the message, at the entry. */
		char *msg = pool_strndup(ld->err, strnlen(ld->err, ld->err_cap));
		if (msg == NULL)
			return loader_fail_oom(ld);
		rc = loader_fail(ld, at, "preset %s@%u: %s", p->name, p->version,
				 message_of(msg, ld->name));
		pool_free(msg);
	}
	return rc;
}

enum { PE_NAME, PE_SECRET_FILE, PE_SECRET_ENV, PE_PLACEHOLDER, PE__COUNT };
static const char *const preset_entry_keys[] = { [PE_NAME] = "name",
						 [PE_SECRET_FILE] = "secret_file",
						 [PE_SECRET_ENV] = "secret_env",
						 [PE_PLACEHOLDER] = "placeholder" };
static const struct keyset preset_entry_keyset = { "a presets entry", preset_entry_keys,
						   PE__COUNT };

/* A presets entry: "name@version", or {name: ..., secret_file | secret_env: ..., placeholder: ...}. */
static int preset_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct profile_ctx *pc = ctx;
	char *values[PE__COUNT] = { NULL };
	char why[256];
	uint32_t seen = 0;
	uint32_t key = 0;
	int rc = 0;

	(void)index;
	AN_ASSERT(ld->ev_again);
	yaml_mark_t at = ld->ev.start_mark;
	if (ld->ev.type == YAML_SCALAR_EVENT) {
		rc = loader_scalar(ld, "a presets entry", "a string");
		if (rc == 0 && !loader_text_is_clean(ev_text(ld), ev_len(ld)))
			rc = loader_fail(ld, at, "a presets entry has a control character");
		if (rc == 0 && (values[PE_NAME] = pool_strndup(ev_text(ld), ev_len(ld))) == NULL)
			rc = loader_fail_oom(ld);
	} else {
		rc = loader_start(ld, YAML_MAPPING_START_EVENT, "a presets entry");
		while (rc == 0 && (rc = loader_key(ld, &preset_entry_keyset, &seen, &key)) > 0) {
			rc = loader_scalar(ld, preset_entry_keys[key], "a string");
			if (rc == 0 && !loader_text_is_clean(ev_text(ld), ev_len(ld)))
				rc =
				    loader_fail(ld, ld->ev.start_mark, "%s has a control character",
						preset_entry_keys[key]);
			if (rc == 0 &&
			    (values[key] = pool_strndup(ev_text(ld), ev_len(ld))) == NULL)
				rc = loader_fail_oom(ld);
		}
		if (rc == 0 && values[PE_NAME] == NULL)
			rc = loader_fail(ld, at,
					 "missing mandatory key \"name\" in a presets entry");
	}
	const struct preset *p = NULL;
	if (rc == 0 &&
	    (p = preset_find(values[PE_NAME], strlen(values[PE_NAME]), why, sizeof(why))) == NULL)
		rc = loader_fail(ld, at, "%s", why);
	if (rc == 0) {
		const struct preset_args a = { .secret_file = values[PE_SECRET_FILE],
					       .secret_env = values[PE_SECRET_ENV],
					       .placeholder = values[PE_PLACEHOLDER] };
		rc = preset_read(ld, pc, p, &a, at);
	}
	for (uint32_t i = 0; i < PE__COUNT; i++)
		pool_free(values[i]);
	return rc;
}

enum { PK_RULES, PK_PRESETS, PK_LIMITS, PK_INGRESS, PK_USERS, PK_GROUPS, PK_ALERTS, PK__COUNT };
static const char *const profile_keys[] = {
	[PK_RULES] = "rules",     [PK_PRESETS] = "presets", [PK_LIMITS] = "limits",
	[PK_INGRESS] = "ingress", [PK_USERS] = "users",     [PK_GROUPS] = "groups",
	[PK_ALERTS] = "alerts",
};
static_assert(AN_ARRAY_LEN(profile_keys) == PK__COUNT, "every profile key needs a name");
static const struct keyset profile_keyset = { "a profile", profile_keys, PK__COUNT };

static int parse_profile(struct loader *ld, struct policy_profile *pr)
{
	struct profile_ctx pc = { .profile = pr };
	uint32_t seen = 0;
	uint32_t key = 0;

	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "a profile");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while (rc == 0 && (rc = loader_key(ld, &profile_keyset, &seen, &key)) > 0) {
		AN_ASSERT(key < PK__COUNT);
		if (key == PK_RULES)
			rc = loader_seq(ld, "rules", POLICY_RULES_MAX, false, rule_item, &pc);
		else if (key == PK_PRESETS)
			rc = loader_seq(ld, "presets", POLICY_PRESETS_MAX, false, preset_item, &pc);
		else if (key == PK_LIMITS)
			rc = loader_limits(ld, &profile_limit_keyset, &pr->limits);
		else if (key == PK_USERS || key == PK_GROUPS)
			rc = parse_registrants(ld, pr, key == PK_GROUPS);
		else if (key == PK_ALERTS)
			rc = loader_alerts(ld, pr);
		else
			rc = loader_ingress(ld, pr);
	}
	strtab_free(&pc.ids);
	strtab_free(&pc.placeholders);
	/* rules, presets or both: a profile names what it may reach. */
	if (rc == 0 && (seen & (1u << PK_PRESETS)) == 0)
		rc = loader_check_mandatory(ld, &profile_keyset, 1u << PK_RULES, seen, start);
	AN_ASSERT(rc <= 0);
	return rc;
}

static int profile_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct policy *p = ld->p;
	char shown[SHOW_BYTES];
	uint32_t first = 0;

	AN_ASSERT(ctx == NULL && index == p->profile_count);
	if (!loader_is_id(ev_text(ld), ev_len(ld)))
		return loader_fail(
		    ld, ld->key_mark,
		    "invalid profile name \"%s\": use 1-63 of [A-Za-z0-9_.-], not starting with '.'",
		    loader_show(ev_text(ld), ev_len(ld), shown));
	struct policy_profile *profiles =
	    loader_grow_array(p->profiles, &p->profile_cap, p->profile_count, sizeof(*profiles));
	if (profiles == NULL)
		return loader_fail_oom(ld);
	p->profiles = profiles;
	struct policy_profile *pr = &p->profiles[p->profile_count++];
	pr->ingress = &loader_ingress_default;
	pr->name = pool_strndup(ev_text(ld), ev_len(ld));
	if (pr->name == NULL)
		return loader_fail_oom(ld);
	int rc = strtab_insert(&p->profile_index, pr->name, ev_len(ld), index, &first);
	if (rc == -EEXIST)
		return loader_fail(ld, ld->key_mark, "duplicate profile \"%s\"", pr->name);
	if (rc != 0)
		return loader_fail_oom(ld);
	AN_ASSERT(p->profile_index.count == p->profile_count);
	return parse_profile(ld, pr);
}

/* Profiles by name, each one's keys read by parse_profile. */
int loader_profiles(struct loader *ld)
{
	return loader_map(ld, "profiles", POLICY_PROFILES_MAX, profile_item, NULL);
}
