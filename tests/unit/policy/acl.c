/*
 * policy/acl.c: lookup order (exact before wildcard, longest wildcard
 * first, never the apex), ports, tiers, IP literal rules, duplicates, the
 * table layout (probe chains from one home and across the table's end, the
 * Robin Hood order on every random set, the filter's false positives, keys
 * past a slot's bytes, cold rules, wildcard lengths, the probe limit), and
 * 100k generated rules built in well under a second.
 */
#include "../../../policy/acl.c"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "tests/unit/unit.h"

/* --- input that ends right before an inaccessible page ----------------------- */

static struct unit_guard guard;

/* Copies <len> bytes so that the last one is the last readable byte. */
static const char *guarded(const char *s, size_t len)
{
	return unit_guard_place(&guard, s, len);
}

/* --- rules ------------------------------------------------------------------- */

struct rule_spec {
	const char *host; /* "*.x" for wildcards */
	enum tier tier;
	const char *id;
	const uint16_t *ports;
	uint16_t port_count;
};

static void make_rule(struct acl_rule *r, const char *host, enum tier tier, const char *id)
{
	char norm[HOST_NORM_BYTES];
	enum acl_kind kind = ACL_KIND_NAME;
	bool wild = host[0] == '*';
	const char *why = NULL;

	memset(r, 0, sizeof(*r));
	int n = host_normalise(host + (wild ? 2 : 0), strlen(host) - (wild ? 2 : 0), norm,
			       sizeof(norm), &kind, &why);
	ck_assert_msg(n > 0, "%s: %s", host, why);
	r->host = pool_strndup(norm, (size_t)n);
	r->host_len = (uint32_t)n;
	r->kind = (uint8_t)(wild ? ACL_KIND_WILDCARD : kind);
	r->tier = (uint8_t)tier;
	r->id = pool_strndup(id, strlen(id));
	r->owner = pool_strndup("o", 1);
	r->reason = pool_strndup("r", 1);
	if (tier == TIER_LOCAL)
		r->upstream = pool_strndup("127.0.0.1:11434", 15);
}

static void set_ports(struct acl_rule *r, const uint16_t *ports, uint16_t n)
{
	r->ports = pool_calloc(n, sizeof(*r->ports));
	memcpy(r->ports, ports, n * sizeof(*ports));
	r->port_count = n;
}

static struct acl_rule *build(const struct rule_spec *specs, uint32_t n, struct acl *a)
{
	struct acl_rule *rules = pool_calloc(n, sizeof(*rules));
	uint32_t first = 0;
	uint32_t second = 0;

	for (uint32_t i = 0; i < n; i++) {
		make_rule(&rules[i], specs[i].host, specs[i].tier, specs[i].id);
		if (specs[i].port_count > 0)
			set_ports(&rules[i], specs[i].ports, specs[i].port_count);
	}
	ck_assert_int_eq(acl_build(a, rules, n, &first, &second), 0);
	return rules;
}

static void release(struct acl *a, struct acl_rule *rules, uint32_t n)
{
	acl_free(a);
	for (uint32_t i = 0; i < n; i++)
		acl_rule_free(&rules[i]);
	pool_free(rules);
}

static struct verdict decide(const struct acl *a, const char *host, uint16_t port)
{
	struct verdict v;

	acl_decide(a, guarded(host, strlen(host)), strlen(host), port, &v);
	return v;
}

/* The deciding rule's id, or "-" for none. */
static const char *rule_of(const struct acl *a, const char *host)
{
	struct verdict v = decide(a, host, 443);

	return v.rule != NULL ? v.rule : "-";
}

#define ck_assert_rule(a, host, want) ck_assert_str_eq(rule_of((a), (host)), (want))

/* --- lookup and decide ------------------------------------------------------------ */

START_TEST(test_exact_beats_wildcard)
{
	static const struct rule_spec specs[] = {
		{ "*.example.com", TIER_PASSTHROUGH, "wild", NULL, 0 },
		{ "a.example.com", TIER_FAKE, "exact", NULL, 0 },
	};
	struct acl a;
	struct acl_rule *rules = build(specs, 2, &a);

	ck_assert_rule(&a, "a.example.com", "exact");
	ck_assert_int_eq(decide(&a, "a.example.com", 443).tier, TIER_FAKE);
	ck_assert_rule(&a, "b.example.com", "wild");
	ck_assert_int_eq(decide(&a, "b.example.com", 443).tier, TIER_PASSTHROUGH);
	ck_assert_rule(&a, "x.a.example.com", "wild");
	/* The apex is not matched by *.example.com. */
	ck_assert_rule(&a, "example.com", "-");
	ck_assert_rule(&a, "com", "-");
	ck_assert_rule(&a, "notexample.com", "-");
	ck_assert_rule(&a, "example.com.evil", "-");
	release(&a, rules, 2);
}
END_TEST

START_TEST(test_longest_wildcard_wins)
{
	static const struct rule_spec specs[] = {
		{ "*.example.com", TIER_PASSTHROUGH, "w1", NULL, 0 },
		{ "*.b.example.com", TIER_FAKE, "w2", NULL, 0 },
		{ "*.c.b.example.com", TIER_INJECT, "w3", NULL, 0 },
	};
	struct acl a;
	struct acl_rule *rules = build(specs, 3, &a);

	ck_assert_rule(&a, "a.b.example.com", "w2");
	ck_assert_rule(&a, "x.y.a.b.example.com", "w2");
	ck_assert_rule(&a, "b.example.com", "w1");
	ck_assert_rule(&a, "c.b.example.com", "w2");
	ck_assert_rule(&a, "d.c.b.example.com", "w3");
	ck_assert_rule(&a, "z.example.com", "w1");
	ck_assert_rule(&a, "example.com", "-");
	ck_assert_int_eq(decide(&a, "d.c.b.example.com", 443).tier, TIER_INJECT);
	release(&a, rules, 3);
}
END_TEST

START_TEST(test_case_and_trailing_dot)
{
	static const struct rule_spec specs[] = {
		{ "Api.Example.COM.", TIER_PASSTHROUGH, "api", NULL, 0 },
		{ "*.CDN.example.com", TIER_PASSTHROUGH, "cdn", NULL, 0 },
	};
	struct acl a;
	struct acl_rule *rules = build(specs, 2, &a);

	ck_assert_rule(&a, "api.example.com", "api");
	ck_assert_rule(&a, "API.EXAMPLE.COM", "api");
	ck_assert_rule(&a, "api.example.com.", "api");
	ck_assert_rule(&a, "API.example.com.", "api");
	ck_assert_rule(&a, "api.example.com..", "-");
	ck_assert_rule(&a, ".api.example.com", "-");
	ck_assert_rule(&a, "X.Cdn.Example.Com.", "cdn");
	ck_assert_rule(&a, "cdn.example.com", "-");
	struct verdict v = decide(&a, "api.example.com..", 443);
	ck_assert_int_eq(v.tier, TIER_DENY);
	ck_assert_int_eq(v.reason, REASON_HOST_NOT_ALLOWED);
	ck_assert_ptr_null(v.rule);
	release(&a, rules, 2);
}
END_TEST

START_TEST(test_ports_and_tiers)
{
	static const uint16_t tls[] = { 443, 8443 };
	static const uint16_t edges[] = { 1, 65535 };
	static const struct rule_spec specs[] = {
		{ "tls.example", TIER_PASSTHROUGH, "tls", tls, 2 },
		{ "edges.example", TIER_PASSTHROUGH, "edges", edges, 2 },
		{ "any.example", TIER_FAKE, "any", NULL, 0 },
		{ "blocked.example", TIER_DENY, "blocked", NULL, 0 },
		{ "model.internal", TIER_LOCAL, "model", NULL, 0 },
	};
	struct acl a;
	struct acl_rule *rules = build(specs, 5, &a);
	rules[0].instruction = pool_strndup("use 443", 7);
	rules[3].instruction = pool_strndup("blocked", 7);
	/* Rules must not change under a built acl: rebuild after the edit. */
	uint32_t first = 0, second = 0;
	acl_free(&a);
	ck_assert_int_eq(acl_build(&a, rules, 5, &first, &second), 0);

	struct verdict v = decide(&a, "tls.example", 443);
	ck_assert_int_eq(v.tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(v.reason, REASON_NONE);
	ck_assert_str_eq(v.rule, "tls");
	ck_assert_str_eq(v.instruction, "use 443");
	ck_assert_ptr_null(v.upstream);
	ck_assert_int_eq(decide(&a, "tls.example", 8443).tier, TIER_PASSTHROUGH);
	v = decide(&a, "tls.example", 80);
	ck_assert_int_eq(v.tier, TIER_DENY);
	ck_assert_int_eq(v.reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_str_eq(v.rule, "tls");
	ck_assert_str_eq(v.instruction, "use 443");
	ck_assert_int_eq(decide(&a, "tls.example", 442).reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_int_eq(decide(&a, "tls.example", 444).reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_int_eq(decide(&a, "edges.example", 1).reason, REASON_NONE);
	ck_assert_int_eq(decide(&a, "edges.example", 65535).reason, REASON_NONE);
	ck_assert_int_eq(decide(&a, "edges.example", 2).reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_int_eq(decide(&a, "edges.example", 65534).reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_int_eq(decide(&a, "any.example", 1).tier, TIER_FAKE);
	ck_assert_int_eq(decide(&a, "any.example", 65535).tier, TIER_FAKE);
	v = decide(&a, "blocked.example", 443);
	ck_assert_int_eq(v.tier, TIER_DENY);
	ck_assert_int_eq(v.reason, REASON_HOST_NOT_ALLOWED);
	ck_assert_str_eq(v.rule, "blocked");
	ck_assert_str_eq(v.instruction, "blocked");
	v = decide(&a, "model.internal", 80);
	ck_assert_int_eq(v.tier, TIER_LOCAL);
	ck_assert_str_eq(v.upstream, "127.0.0.1:11434");
	v = decide(&a, "nothing.example", 443);
	ck_assert_int_eq(v.tier, TIER_DENY);
	ck_assert_int_eq(v.reason, REASON_HOST_NOT_ALLOWED);
	ck_assert_ptr_null(v.rule);
	ck_assert_ptr_null(v.instruction);
	release(&a, rules, 5);
}
END_TEST

START_TEST(test_ip_literal_rules)
{
	static const struct rule_spec specs[] = {
		{ "192.0.2.1", TIER_PASSTHROUGH, "v4", NULL, 0 },
		{ "2001:db8::1", TIER_PASSTHROUGH, "v6", NULL, 0 },
		{ "*.2.1.example", TIER_PASSTHROUGH, "wild", NULL, 0 },
	};
	struct acl a;
	struct acl_rule *rules = build(specs, 3, &a);

	ck_assert_int_eq(rules[0].kind, ACL_KIND_IP);
	ck_assert_int_eq(rules[1].kind, ACL_KIND_IP);
	ck_assert_rule(&a, "192.0.2.1", "v4");
	ck_assert_rule(&a, "192.0.2.1.", "v4");
	ck_assert_rule(&a, "192.0.2.2", "-");
	ck_assert_rule(&a, "::ffff:192.0.2.1", "v4");
	ck_assert_rule(&a, "[::FFFF:c000:201]", "v4");
	ck_assert_rule(&a, "2001:db8::1", "v6");
	ck_assert_rule(&a, "2001:DB8:0000:0:0:0:0:1", "v6");
	ck_assert_rule(&a, "[2001:db8::1]", "v6");
	ck_assert_rule(&a, "2001:db8::1%eth0", "-");
	ck_assert_rule(&a, "2001:db8::2", "-");
	/* Every spelling of an IPv4 address a client may send meets the same rule. */
	ck_assert_rule(&a, "3221225985", "v4");
	ck_assert_rule(&a, "0xc0.0.2.1", "v4");
	ck_assert_rule(&a, "192.0.513", "v4");
	ck_assert_rule(&a, "0300.0.2.1", "v4");
	ck_assert_rule(&a, "0300.0.2.2", "-");
	/* An IP literal never falls back to a wildcard. */
	ck_assert_rule(&a, "x.2.1.example", "wild");
	release(&a, rules, 3);
}
END_TEST

START_TEST(test_duplicates)
{
	struct acl_rule rules[4];
	struct acl a;
	uint32_t first = 99;
	uint32_t second = 99;

	make_rule(&rules[0], "a.example", TIER_PASSTHROUGH, "1");
	make_rule(&rules[1], "*.a.example", TIER_PASSTHROUGH, "2");
	make_rule(&rules[2], "192.0.2.1", TIER_PASSTHROUGH, "3");
	make_rule(&rules[3], "A.Example.", TIER_FAKE, "4");
	/* Apex and wildcard of one name are different hosts. */
	ck_assert_int_eq(acl_build(&a, rules, 3, &first, &second), 0);
	acl_free(&a);
	ck_assert_int_eq(acl_build(&a, rules, 4, &first, &second), -EEXIST);
	ck_assert_uint_eq(first, 0);
	ck_assert_uint_eq(second, 3);
	ck_assert_ptr_null(a.hosts.slots);
	for (int i = 0; i < 4; i++)
		acl_rule_free(&rules[i]);
}
END_TEST

START_TEST(test_empty_acl)
{
	struct acl a;
	uint32_t first = 0;
	uint32_t second = 0;

	ck_assert_int_eq(acl_build(&a, NULL, 0, &first, &second), 0);
	ck_assert_rule(&a, "example.com", "-");
	ck_assert_rule(&a, "192.0.2.1", "-");
	acl_free(&a);
}
END_TEST

/* --- scale --------------------------------------------------------------------------- */

#define GEN_RULES 100000u

static void gen_host(uint32_t i, char *buf, size_t cap)
{
	switch (i % 3) {
	case 0:
		snprintf(buf, cap, "host%u.zone%u.test", i, i % 97);
		break;
	case 1:
		snprintf(buf, cap, "*.w%u.test", i);
		break;
	default:
		snprintf(buf, cap, "10.%u.%u.%u", (i >> 16) & 255, (i >> 8) & 255, i & 255);
		break;
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint32_t check_table(const struct acl_trie *t);

START_TEST(test_100k_rules)
{
	struct acl_rule *rules = pool_calloc(GEN_RULES, sizeof(*rules));
	char host[64];
	char id[16];
	struct acl a;
	uint32_t first = 0;
	uint32_t second = 0;

	for (uint32_t i = 0; i < GEN_RULES; i++) {
		gen_host(i, host, sizeof(host));
		snprintf(id, sizeof(id), "r%u", i);
		make_rule(&rules[i], host, TIER_PASSTHROUGH, id);
	}
	double t0 = now_s();
	ck_assert_int_eq(acl_build(&a, rules, GEN_RULES, &first, &second), 0);
	double built = now_s() - t0;
	printf("acl: built %u rules in %.3f s\n", GEN_RULES, built);
	ck_assert_msg(built < 1.0, "build took %.3f s", built);
	/* Over 2 MiB: one mapping on a 2 MiB boundary, so huge pages can back all of it. */
	ck_assert_uint_ge(a.hosts.map_bytes, ACL_HUGE_BYTES);
	ck_assert_uint_eq((uintptr_t)a.hosts.slots % ACL_HUGE_BYTES, 0);
	ck_assert_uint_eq(a.hosts.map_bytes % ACL_HUGE_BYTES, 0);
	ck_assert_uint_eq((uintptr_t)a.hosts.filter % sizeof(struct acl_filter_block), 0);
	ck_assert_uint_eq(a.hosts.slot_count, SLOTS_PER_KEY * (a.hosts.names + a.hosts.wildcards));
	ck_assert_uint_eq(check_table(&a.hosts), a.hosts.names + a.hosts.wildcards);
	for (uint32_t i = 0; i < GEN_RULES; i++) {
		gen_host(i, host, sizeof(host));
		const char *q = host[0] == '*' ? host + 1 : host; /* ".w<i>.test" */
		char sub[80];
		snprintf(sub, sizeof(sub), "%s%s", host[0] == '*' ? "a" : "", q);
		snprintf(id, sizeof(id), "r%u", i);
		ck_assert_str_eq(rule_of(&a, sub), id);
		if (host[0] == '*')
			ck_assert_rule(&a, host + 2, "-"); /* the apex */
		snprintf(sub, sizeof(sub), "miss%u.zone%u.test", i, i % 97);
		ck_assert_rule(&a, sub, "-");
	}
	ck_assert_rule(&a, "10.255.255.255", "-");
	release(&a, rules, GEN_RULES);
}
END_TEST

/* ---- The trie against a naive reference, on random rule sets. ---- */

/* A name of <min_labels>..5 labels from a small alphabet, then ".com": rules and queries overlap. */
static size_t random_name(uint64_t *s, char *out, uint32_t min_labels)
{
	static const char *const labels[] = { "a",   "b",   "api",  "example", "com",
					      "net", "x-1", "evil", "b_2" };
	size_t len = 0;
	uint32_t count = min_labels + (uint32_t)(unit_rng_next(s) % (6 - min_labels));

	for (uint32_t i = 0; i < count; i++) {
		const char *l = labels[unit_rng_next(s) % AN_ARRAY_LEN(labels)];
		if (i > 0)
			out[len++] = '.';
		memcpy(out + len, l, strlen(l));
		len += strlen(l);
	}
	if (len == 0) {
		memcpy(out, "com", 4);
		return 3;
	}
	memcpy(out + len, ".com", 5);
	return len + 4;
}

/* The rule a naive scan picks for the normalised <q>: exact, else the longest wildcard. */
static int naive_pick(const struct acl_rule *rules, uint32_t n, const char *q, size_t len)
{
	int best = -1;
	size_t best_len = 0;

	for (uint32_t i = 0; i < n; i++) {
		const struct acl_rule *r = &rules[i];
		if (r->kind == ACL_KIND_NAME && r->host_len == len && memcmp(r->host, q, len) == 0)
			return (int)i;
		if (r->kind == ACL_KIND_WILDCARD && len > r->host_len + 1 &&
		    memcmp(q + len - r->host_len, r->host, r->host_len) == 0 &&
		    q[len - r->host_len - 1] == '.' && r->host_len > best_len) {
			best = (int)i;
			best_len = r->host_len;
		}
	}
	return best;
}

/* One random rule set of up to <rule_max> rules (seed <set>) against the naive scan. */
static void vs_naive_set(uint64_t set, uint32_t rule_max, uint32_t queries, uint32_t *agreed,
			 uint32_t *hits)
{
	char host[HOST_NORM_BYTES], query[HOST_NORM_BYTES + 4], norm[HOST_NORM_BYTES];
	uint64_t s = set * 0x9e3779b97f4a7c15ull;
	struct acl_rule *rules = pool_calloc(rule_max, sizeof(*rules));
	uint32_t n = 0;
	struct acl a;
	uint32_t first = 0, second = 0;

	for (uint32_t i = 0; i < rule_max; i++) {
		/* Wildcards of two labels or more: the loader refuses "*.com". */
		bool wild = unit_rng_next(&s) % 3 == 0;
		char spec[HOST_NORM_BYTES + 2], id[16];
		size_t len = random_name(&s, host, wild ? 1 : 0);
		snprintf(spec, sizeof(spec), "%s%.*s", wild ? "*." : "", (int)len, host);
		snprintf(id, sizeof(id), "r%u", n);
		make_rule(&rules[n], spec, TIER_PASSTHROUGH, id);
		/* Duplicates are the loader's to refuse: keep the first of each. */
		bool dup = false;
		for (uint32_t j = 0; j < n && !dup; j++)
			dup = rules[j].kind == rules[n].kind &&
			      rules[j].host_len == rules[n].host_len &&
			      memcmp(rules[j].host, rules[n].host, rules[n].host_len) == 0;
		if (dup)
			acl_rule_free(&rules[n]);
		else
			n++;
	}
	ck_assert_int_eq(acl_build(&a, rules, n, &first, &second), 0);
	check_table(&a.hosts);
	for (uint32_t q = 0; q < queries; q++) {
		size_t len = random_name(&s, query, 0);
		/* Client spellings: upper case and a trailing dot reach the same rule. */
		size_t at = (size_t)(unit_rng_next(&s) % len);
		if (unit_rng_next(&s) % 4 == 0 && query[at] >= 'a' && query[at] <= 'z')
			query[at] = (char)(query[at] - 'a' + 'A');
		if (unit_rng_next(&s) % 4 == 0)
			query[len++] = '.';
		enum acl_kind kind;
		int m = host_normalise(query, len, norm, sizeof(norm), &kind, NULL);
		ck_assert_int_gt(m, 0);
		int want = naive_pick(rules, n, norm, (size_t)m);
		struct verdict v;
		acl_decide(&a, guarded(query, len), len, 443, &v);
		const struct acl_rule *got = acl_lookup(&a, norm, (size_t)m, kind);
		ck_assert_int_eq(got == NULL ? -1 : (int)(got - rules), want);
		if (want < 0) {
			ck_assert_ptr_null(v.rule);
			ck_assert_int_eq(v.reason, REASON_HOST_NOT_ALLOWED);
		} else {
			ck_assert_str_eq(v.rule, rules[want].id);
			ck_assert_int_eq(v.tier, TIER_PASSTHROUGH);
			(*hits)++;
		}
		(*agreed)++;
	}
	release(&a, rules, n);
}

START_TEST(test_trie_vs_naive)
{
	enum { RULES = 200, QUERIES = 4000, SETS = 20, BIG_RULES = 5000, BIG_SETS = 3 };
	uint32_t agreed = 0, hits = 0;

	for (uint64_t set = 1; set <= SETS; set++)
		vs_naive_set(set, RULES, QUERIES, &agreed, &hits);
	/* Larger sets fill buckets until some spill. */
	for (uint64_t set = SETS + 1; set <= SETS + BIG_SETS; set++)
		vs_naive_set(set, BIG_RULES, QUERIES, &agreed, &hits);
	ck_assert_uint_eq(agreed, (uint32_t)QUERIES * (SETS + BIG_SETS));
	/* Both answers must be exercised, or the comparison proves little. */
	ck_assert_uint_gt(hits, agreed / 10);
	ck_assert_uint_lt(hits, agreed - agreed / 10);
}
END_TEST

/* ---- The table layout: slots, probe chains, the filter. ---- */

/* Rules r0, r1, ... for the <n> hosts at <hosts> ("*." for wildcards), built into <a>. */
static struct acl_rule *build_hosts(char (*hosts)[HOST_NORM_BYTES + 2], uint32_t n, struct acl *a)
{
	struct acl_rule *rules = pool_calloc(n, sizeof(*rules));
	uint32_t first = 0, second = 0;
	char id[16];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "r%u", i);
		make_rule(&rules[i], hosts[i], TIER_PASSTHROUGH, id);
	}
	ck_assert_int_eq(acl_build(a, rules, n, &first, &second), 0);
	return rules;
}

/* The home of name <name> in a table of <slots>. */
static uint32_t name_home(const char *name, uint32_t slots)
{
	const struct acl_trie t = { .slot_count = slots };

	return slot_home(&t, node_hash(name, strlen(name), ACL_KIND_NAME));
}

/* Up to <want> names "<prefix><i>.test", from <*next> on, whose home is slot <home> of <slots>. */
static uint32_t names_homed(uint32_t home, uint32_t slots, const char *prefix, uint32_t *next,
			    char (*out)[HOST_NORM_BYTES + 2], uint32_t want)
{
	uint32_t got = 0;

	for (; got < want; (*next)++) {
		char name[HOST_NORM_BYTES];
		snprintf(name, sizeof(name), "%s%u.test", prefix, *next);
		if (name_home(name, slots) == home)
			memcpy(out[got++], name, strlen(name) + 1);
	}
	return got;
}

/*
 * Checks the Robin Hood order of <t>: every used slot is <probe> past the home
 * of its key (rebuilt from its bytes and tail), and the slot before one with a
 * probe is used, with a probe at least one less. Returns the slots used.
 */
static uint32_t check_table(const struct acl_trie *t)
{
	char key[HOST_NAME_BYTES_MAX];
	uint32_t used = 0;

	for (uint32_t i = 0; i < t->slot_count; i++) {
		const struct acl_node *n = &t->slots[i];
		if (n->key_len == 0)
			continue;
		used++;
		size_t inline_len = n->key_len < NODE_KEY_INLINE ? n->key_len : NODE_KEY_INLINE;
		memcpy(key, n->key, inline_len);
		memcpy(key + inline_len, t->tails + n->tail, n->key_len - inline_len);
		uint32_t home = slot_home(t, node_hash(key, n->key_len, (enum acl_kind)n->kind));
		ck_assert_uint_eq((home + n->probe) % t->slot_count, i);
		if (n->probe > 0) {
			const struct acl_node *before =
			    &t->slots[i == 0 ? t->slot_count - 1 : i - 1];
			ck_assert_uint_gt(before->key_len, 0);
			ck_assert_uint_ge(before->probe + 1u, n->probe);
		}
	}
	ck_assert_uint_eq(used, t->names + t->wildcards);
	return used;
}

START_TEST(test_probe_chains)
{
	static char hosts[64][HOST_NORM_BYTES + 2];
	char miss[8][HOST_NORM_BYTES + 2];
	uint32_t next = 0;
	struct acl a;

	/* 12 names (24 slots), all homed in slot 0: slots 0-11, probes 0-11. */
	names_homed(0, 12 * SLOTS_PER_KEY, "f", &next, hosts, 12);
	struct acl_rule *rules = build_hosts(hosts, 12, &a);
	ck_assert_uint_eq(a.hosts.slot_count, 24);
	for (uint32_t i = 0; i < 24; i++) {
		ck_assert_uint_eq(a.hosts.slots[i].key_len != 0, i < 12);
		if (i < 12)
			ck_assert_uint_eq(a.hosts.slots[i].probe, i);
	}
	ck_assert_uint_eq(check_table(&a.hosts), 12);
	for (uint32_t i = 0; i < 12; i++)
		ck_assert_ptr_eq(acl_lookup(&a, hosts[i], strlen(hosts[i]), ACL_KIND_NAME),
				 &rules[i]);
	/* Absent names of that home walk the whole chain, filter or not. */
	names_homed(0, 24, "m", &next, miss, 8);
	for (uint32_t i = 0; i < 8; i++) {
		uint64_t h = node_hash(miss[i], strlen(miss[i]), ACL_KIND_NAME);
		ck_assert_ptr_null(slot_find(&a.hosts, h, miss[i], strlen(miss[i]), ACL_KIND_NAME));
		ck_assert_rule(&a, miss[i], "-");
	}
	release(&a, rules, 12);

	/* 13 homed in the last of 26 slots: the chain wraps to slots 0-11. */
	names_homed(25, 13 * SLOTS_PER_KEY, "s", &next, hosts, 13);
	rules = build_hosts(hosts, 13, &a);
	ck_assert_uint_eq(a.hosts.slots[25].probe, 0);
	ck_assert_uint_eq(a.hosts.slots[0].probe, 1);
	ck_assert_uint_eq(a.hosts.slots[11].probe, 12);
	ck_assert_uint_eq(a.hosts.slots[12].key_len, 0);
	ck_assert_uint_eq(check_table(&a.hosts), 13);
	for (uint32_t i = 0; i < 13; i++) {
		char id[16];
		snprintf(id, sizeof(id), "r%u", i);
		ck_assert_rule(&a, hosts[i], id);
	}
	names_homed(25, 26, "n", &next, miss, 8);
	for (uint32_t i = 0; i < 8; i++) {
		uint64_t h = node_hash(miss[i], strlen(miss[i]), ACL_KIND_NAME);
		ck_assert_ptr_null(slot_find(&a.hosts, h, miss[i], strlen(miss[i]), ACL_KIND_NAME));
	}
	release(&a, rules, 13);

	/*
	 * 64 names (128 slots): 20 homed in slot 4, 10 in slot 10, the rest
	 * anywhere. Robin Hood interleaves the two runs, and a probe for an absent
	 * name homed in slot 10 stops at the first slot nearer its home than it.
	 */
	names_homed(4, 128, "c", &next, hosts, 20);
	names_homed(10, 128, "d", &next, hosts + 20, 10);
	for (uint32_t i = 30; i < 64; i++)
		snprintf(hosts[i], sizeof(hosts[i]), "o%u.other.test", i);
	rules = build_hosts(hosts, 64, &a);
	ck_assert_uint_eq(check_table(&a.hosts), 64);
	for (uint32_t i = 0; i < 64; i++)
		ck_assert_ptr_eq(acl_lookup(&a, hosts[i], strlen(hosts[i]), ACL_KIND_NAME),
				 &rules[i]);
	names_homed(10, 128, "p", &next, miss, 8);
	for (uint32_t i = 0; i < 8; i++) {
		uint64_t h = node_hash(miss[i], strlen(miss[i]), ACL_KIND_NAME);
		ck_assert_ptr_null(slot_find(&a.hosts, h, miss[i], strlen(miss[i]), ACL_KIND_NAME));
		ck_assert_rule(&a, miss[i], "-");
	}
	release(&a, rules, 64);
}
END_TEST

START_TEST(test_filter)
{
	enum { KEYS = 20000, ABSENT = 100000 };
	static char hosts[KEYS][HOST_NORM_BYTES + 2];
	char name[48];
	struct acl a;
	uint32_t passed = 0;

	/* Ten bits a key: 20,000 keys in 391 blocks of 512 bits. */
	ck_assert_uint_eq(filter_blocks_for(KEYS), 391);
	ck_assert_uint_eq(filter_blocks_for(1), 1);
	for (uint32_t i = 0; i < KEYS; i++)
		snprintf(hosts[i], sizeof(hosts[i]), i % 4 ? "k%u.filter.test" : "*.w%u.test", i);
	struct acl_rule *rules = build_hosts(hosts, KEYS, &a);
	ck_assert_uint_eq(a.hosts.filter_blocks, 391);
	/* Every key passes (no false negatives), exact names and wildcard suffixes alike. */
	for (uint32_t i = 0; i < KEYS; i++) {
		const char *key = rules[i].host;
		uint64_t h = node_hash(key, strlen(key), (enum acl_kind)rules[i].kind);
		ck_assert(filter_may_hold(&a.hosts, h));
	}
	/* About 1% of absent keys pass (at most 2%), and a lookup of those still misses. */
	for (uint32_t i = 0; i < ABSENT; i++) {
		snprintf(name, sizeof(name), "absent%u.filter.test", i);
		uint64_t h = node_hash(name, strlen(name), ACL_KIND_NAME);
		if (!filter_may_hold(&a.hosts, h))
			continue;
		passed++;
		ck_assert_ptr_null(slot_find(&a.hosts, h, name, strlen(name), ACL_KIND_NAME));
		ck_assert_rule(&a, name, "-");
	}
	printf("acl: the filter passed %u of %u absent keys\n", passed, (unsigned)ABSENT);
	ck_assert_uint_gt(passed, 0);
	ck_assert_uint_le(passed, ABSENT / 50);
	/* One kind's key is not the other's: the hash is seeded with the kind. */
	ck_assert_rule(&a, "w0.test", "-");
	ck_assert_rule(&a, "x.w0.test", "r0");
	release(&a, rules, KEYS);
}
END_TEST

/* A name of exactly <len> bytes: labels of 60 <fill> bytes (the last shorter), then ".test". */
static void sized_name(char *out, size_t len, char fill)
{
	ck_assert_uint_ge(len, 6);
	unit_host_name(out, len - 5, 60);
	for (size_t i = 0; i < len - 5; i++)
		out[i] = out[i] == '.' ? '.' : fill;
	memcpy(out + len - 5, ".test", 6);
}

START_TEST(test_long_keys)
{
	/* A slot holds 34 key bytes: 34 is all inline; 35, 98, 99, 200 and 253 have a tail. */
	static const size_t lens[] = { 34, 35, 98, 99, 200, 253 };
	static char hosts[2 * AN_ARRAY_LEN(lens)][HOST_NORM_BYTES + 2];
	const uint32_t n = 2 * AN_ARRAY_LEN(lens);
	char query[HOST_NORM_BYTES + 4];
	struct acl a;
	size_t tails = 0;

	ck_assert_uint_eq(NODE_KEY_INLINE, 34);
	for (size_t i = 0; i < AN_ARRAY_LEN(lens); i++)
		tails += 2 * (lens[i] - NODE_KEY_INLINE);
	for (size_t i = 0; i < AN_ARRAY_LEN(lens); i++) {
		sized_name(hosts[2 * i], lens[i], 'e');
		/* A wildcard whose suffix has that length too. */
		hosts[2 * i + 1][0] = '*';
		hosts[2 * i + 1][1] = '.';
		sized_name(hosts[2 * i + 1] + 2, lens[i], 'w');
	}
	struct acl_rule *rules = build_hosts(hosts, n, &a);
	for (size_t i = 0; i < AN_ARRAY_LEN(lens); i++) {
		char id[16];
		snprintf(id, sizeof(id), "r%zu", 2 * i);
		ck_assert_uint_eq(rules[2 * i].host_len, lens[i]);
		ck_assert_rule(&a, hosts[2 * i], id);
		/* Keys that differ in one byte: the last inline one, and the last of all. */
		memcpy(query, hosts[2 * i], lens[i] + 1);
		query[NODE_KEY_INLINE - 1] = query[NODE_KEY_INLINE - 1] == '.' ? 'f' : '.';
		ck_assert_rule(&a, query, "-");
		memcpy(query, hosts[2 * i], lens[i] + 1);
		query[lens[i] - 1] = 'x';
		ck_assert_rule(&a, query, "-");
		/* Below the wildcard (while the name fits), and its apex. */
		snprintf(id, sizeof(id), "r%zu", 2 * i + 1);
		ck_assert_uint_eq(rules[2 * i + 1].host_len, lens[i]);
		if (lens[i] + 2 <= HOST_NAME_BYTES_MAX) {
			snprintf(query, sizeof(query), "x.%s", hosts[2 * i + 1] + 2);
			ck_assert_rule(&a, query, id);
		}
		ck_assert_rule(&a, hosts[2 * i + 1] + 2, "-");
	}
	/* The tails are packed after the filter, and every slot's tail is its key's rest. */
	ck_assert_uint_eq(check_table(&a.hosts), n);
	ck_assert_ptr_eq(a.hosts.tails, (char *)(a.hosts.filter + a.hosts.filter_blocks));
	size_t tail_end = 0;
	for (uint32_t i = 0; i < a.hosts.slot_count; i++) {
		const struct acl_node *node = &a.hosts.slots[i];
		if (node->key_len > NODE_KEY_INLINE) {
			size_t end = node->tail + node->key_len - NODE_KEY_INLINE;
			tail_end = end > tail_end ? end : tail_end;
			ck_assert_int_eq(memcmp(a.hosts.tails + node->tail,
						rules[node->rule].host + NODE_KEY_INLINE,
						node->key_len - NODE_KEY_INLINE),
					 0);
		}
	}
	ck_assert_uint_eq(tail_end, tails);
	release(&a, rules, n);
}
END_TEST

START_TEST(test_cold_rules)
{
	static const uint16_t two[] = { 80, 443 };
	static const uint16_t three[] = { 80, 443, 9443 };
	static const struct rule_spec specs[] = {
		{ "plain.example", TIER_PASSTHROUGH, "plain", NULL, 0 },
		{ "two.example", TIER_PASSTHROUGH, "two", two, 2 },
		{ "three.example", TIER_PASSTHROUGH, "three", three, 3 },
		{ "said.example", TIER_PASSTHROUGH, "said", NULL, 0 },
		{ "limited.example", TIER_PASSTHROUGH, "limited", NULL, 0 },
		{ "model.internal", TIER_LOCAL, "model", NULL, 0 },
		{ "*.cold.example", TIER_PASSTHROUGH, "wild", three, 3 },
	};
	const uint32_t n = AN_ARRAY_LEN(specs);
	struct acl a;
	struct acl_rule *rules = build(specs, n, &a);
	uint32_t first = 0, second = 0;

	rules[3].instruction = pool_strndup("be nice", 7);
	rules[4].limits = (struct verdict_limits){ 5, 10, 2 };
	for (uint32_t i = 0; i < n; i++)
		rules[i].index = 100 + i;
	acl_free(&a);
	ck_assert_int_eq(acl_build(&a, rules, n, &first, &second), 0);
	/* Two ports fit a slot (N); three (N + 1), an instruction, limits or an upstream do not. */
	static const bool cold[] = { false, false, true, true, true, true, true };
	for (uint32_t i = 0; i < n; i++) {
		const char *host = i + 1 < n ? rules[i].host : "x.cold.example";
		uint64_t dots[HOST_DOT_WORDS];
		host_name_dots(host, strlen(host), dots);
		const struct acl_node *node = trie_lookup(&a.hosts, host, strlen(host), dots);
		ck_assert_ptr_nonnull(node);
		ck_assert_uint_eq(node->rule, i);
		ck_assert_int_eq(node->cold, cold[i]);
	}
	/* Every verdict is the rule's, whichever way it was read. */
	static const uint16_t ports[] = { 80, 443, 9443, 1 };
	for (uint32_t i = 0; i < n; i++) {
		const char *host = i + 1 < n ? rules[i].host : "x.cold.example";
		for (size_t p = 0; p < AN_ARRAY_LEN(ports); p++) {
			struct verdict v = decide(&a, host, ports[p]);
			ck_assert_str_eq(v.rule, rules[i].id);
			ck_assert_ptr_eq(v.rule, rules[i].id);
			ck_assert_ptr_eq(v.instruction, rules[i].instruction);
			if (!acl_port_allowed(&rules[i], ports[p])) {
				ck_assert_int_eq(v.tier, TIER_DENY);
				ck_assert_int_eq(v.reason, REASON_PORT_NOT_ALLOWED);
				ck_assert_uint_eq(v.rule_index, VERDICT_RULE_NONE);
				continue;
			}
			ck_assert_int_eq(v.tier, rules[i].tier);
			ck_assert_int_eq(v.reason, REASON_NONE);
			ck_assert_ptr_eq(v.upstream, rules[i].upstream);
			ck_assert_uint_eq(v.rule_index, 100 + i);
			ck_assert_uint_eq(v.rule_limits.requests_per_second,
					  rules[i].limits.requests_per_second);
			ck_assert_uint_eq(v.rule_limits.burst, rules[i].limits.burst);
			ck_assert_uint_eq(v.rule_limits.concurrent, rules[i].limits.concurrent);
		}
	}
	ck_assert_str_eq(decide(&a, "model.internal", 1).upstream, "127.0.0.1:11434");
	release(&a, rules, n);
}
END_TEST

START_TEST(test_wildcard_lengths)
{
	char wide[HOST_NORM_BYTES + 2], query[HOST_NORM_BYTES + 4];
	struct acl a;

	/* Suffix lengths 7 (word 0 of the bitmap) and 100 (word 1). */
	wide[0] = '*';
	wide[1] = '.';
	sized_name(wide + 2, 100, 'v');
	static char hosts[3][HOST_NORM_BYTES + 2] = { "*.ab.test", "ab.test", "" };
	memcpy(hosts[2], wide, strlen(wide) + 1);
	struct acl_rule *rules = build_hosts(hosts, 3, &a);
	ck_assert(wild_len_present(&a.hosts, 7));
	ck_assert(wild_len_present(&a.hosts, 100));
	ck_assert(!wild_len_present(&a.hosts, 6));
	ck_assert(!wild_len_present(&a.hosts, 8));
	ck_assert(!wild_len_present(&a.hosts, 99));
	ck_assert_uint_eq(a.hosts.wild_lens[0], 1ull << 7);
	ck_assert_uint_eq(a.hosts.wild_lens[1], 1ull << (100 - 64));
	ck_assert_rule(&a, "x.ab.test", "r0");
	ck_assert_rule(&a, "y.x.ab.test", "r0");
	ck_assert_rule(&a, "ab.test", "r1");
	ck_assert_rule(&a, "x.abc.test", "-");
	ck_assert_rule(&a, "x.a.test", "-");
	snprintf(query, sizeof(query), "q.%s", wide + 2);
	ck_assert_rule(&a, query, "r2");
	snprintf(query, sizeof(query), "q.r.%s", wide + 2);
	ck_assert_rule(&a, query, "r2");
	release(&a, rules, 3);
}
END_TEST

START_TEST(test_probe_limit)
{
	/* A key may sit SLOT_PROBE_MAX (N) past its home, not one more. */
	struct acl_trie t = { .slot_count = 2 * (SLOT_PROBE_MAX + 2) };
	struct acl_node node = { .key_len = 1, .kind = ACL_KIND_NAME, .key = "k" };

	t.slots = pool_calloc(t.slot_count, sizeof(*t.slots));
	for (uint32_t i = 0; i <= SLOT_PROBE_MAX; i++)
		ck_assert_int_eq(slot_insert(&t, node, 0), 0);
	ck_assert_uint_eq(t.slots[SLOT_PROBE_MAX].probe, SLOT_PROBE_MAX);
	ck_assert_int_eq(slot_insert(&t, node, 0), -E2BIG);
	pool_free(t.slots);
	ck_assert_uint_eq(sizeof(struct acl_node), 64);
	ck_assert_uint_eq(offsetof(struct acl_node, key) + NODE_KEY_INLINE, 64);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy/acl");
	TCase *tc = tcase_create("acl");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_trie_vs_naive);
	tcase_add_test(tc, test_exact_beats_wildcard);
	tcase_add_test(tc, test_longest_wildcard_wins);
	tcase_add_test(tc, test_case_and_trailing_dot);
	tcase_add_test(tc, test_ports_and_tiers);
	tcase_add_test(tc, test_ip_literal_rules);
	tcase_add_test(tc, test_duplicates);
	tcase_add_test(tc, test_empty_acl);
	tcase_add_test(tc, test_100k_rules);
	tcase_add_test(tc, test_probe_chains);
	tcase_add_test(tc, test_filter);
	tcase_add_test(tc, test_long_keys);
	tcase_add_test(tc, test_cold_rules);
	tcase_add_test(tc, test_wildcard_lengths);
	tcase_add_test(tc, test_probe_limit);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
