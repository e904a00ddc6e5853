/*
 * policy/policy.c, and through it profiles (profile.c), which have no
 * suite of their own yet: the docs example and the built-in policy load and
 * mean
 * what they say; every error kind gives the exact "name:line:col: message";
 * every limit is tested at N and N+1; the caller's config is untouched on
 * failure; 100k rules load in well under a second; the verdict table works.
 */
#include "../../../policy/policy.c"

#include <time.h>
#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

/* CPU time of this process: other builds running beside the test do not count. */
static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- who may register sandboxes on a profile (users, groups) ---------------------------- */

static bool admits(const char *profile, uint32_t uid, uint32_t gid, const uint32_t *groups,
		   uint32_t n)
{
	struct verdict_caller who = { .uid = uid, .gid = gid, .groups = groups, .group_count = n };
	int index = policy_profile_index(pol, profile);

	ck_assert_int_ge(index, 0);
	return policy_profile_admits(pol, (uint32_t)index, &who);
}

#define INJECT_RULE                                                                   \
	"    - host: api.test\n      tier: inject\n      owner: o\n      reason: r\n" \
	"      inject: {header: X-Key, placeholder: placeholder-0001, secret_env: PATH}\n"

START_TEST(test_registrants)
{
	static const uint32_t staff[] = { 50, 4243 };

	/* Neither key: every caller, unless the profile has an inject rule (root only). */
	expect_ok("version: 1\nprofiles:\n  open:\n    rules:\n" RULE(
	    "a.test") "  keys:\n    rules:\n" INJECT_RULE);
	ck_assert(admits("open", 1000, 1000, NULL, 0));
	ck_assert(!admits("keys", 1000, 1000, NULL, 0));
	ck_assert(admits("keys", 0, 0, NULL, 0));
	/* Named: users by name or number, groups by name or number, primary or supplementary. */
	expect_ok("version: 1\nprofiles:\n  keys:\n    users: [root, 1000]\n    groups: [4243]\n"
		  "    rules:\n" INJECT_RULE "  shut:\n    users: []\n    rules:\n" RULE("a.test"));
	ck_assert(admits("keys", 1000, 1000, NULL, 0));
	ck_assert(!admits("keys", 1001, 1001, NULL, 0));
	ck_assert(admits("keys", 1001, 4243, NULL, 0));
	ck_assert(admits("keys", 1001, 1001, staff, 2));
	ck_assert(!admits("keys", 1001, 1001, staff, 1));
	ck_assert(!admits("shut", 1000, 1000, staff, 2)); /* an empty list: root only */
	ck_assert(admits("shut", 0, 0, NULL, 0));
	/* Unknown names are load errors, naming them. */
	expect_error("version: 1\nprofiles:\n  p:\n    users: [no-such-user-an]\n    rules: []\n",
		     "t.yaml:4:13: users: no such user 'no-such-user-an' on this host");
	expect_error("version: 1\nprofiles:\n  p:\n    groups: [no-such-group-an]\n"
		     "    rules: []\n",
		     "t.yaml:4:14: groups: no such group 'no-such-group-an' on this host");
	expect_error("version: 1\nprofiles:\n  p:\n    users: [\"\"]\n    rules: []\n",
		     "t.yaml:4:13: users: a user name or number of 1-255 bytes");
}
END_TEST

/* --- the documented example and the built-in policy ------------------------------------ */

static void expect_limits(struct verdict_limits l, uint32_t rate, uint32_t burst,
			  uint32_t concurrent)
{
	ck_assert_uint_eq(l.requests_per_second, rate);
	ck_assert_uint_eq(l.burst, burst);
	ck_assert_uint_eq(l.concurrent, concurrent);
}

START_TEST(test_docs_example)
{
	char *yaml = docs_block(NULL);

	/* The inject rule's secret_env: the test runs in a child of its own. */
	ck_assert_int_eq(setenv("EXAMPLE_API_KEY", "sk-example-docs-0123456789", 1), 0);
	expect_ok(yaml);
	pool_free(yaml);
	ck_assert_uint_eq(policy_profile_count(pol), 2);
	ck_assert_uint_eq(policy_rule_count(pol), 8);
	ck_assert_int_eq(policy_profile_index(pol, "default"), 0);
	ck_assert_int_eq(policy_profile_index(pol, "bench"), 1);
	ck_assert_int_eq(policy_profile_index(pol, "nope"), -ENOENT);
	ck_assert_str_eq(policy_profile_name(pol, 1), "bench");
	ck_assert_str_eq(cfg.socket_dir, "/run/agentsnet");
	ck_assert_str_eq(cfg.audit_path, "/var/log/agentsnet/audit.jsonl");
	ck_assert_str_eq(cfg.tcp_listen, "127.0.0.1:18080");
	ck_assert_str_eq(cfg.tcp_sandbox, "bench");
	ck_assert_str_eq(cfg.dns_servers, "127.0.0.1:53,::1,[::1]:5353");
	ck_assert_uint_eq(cfg.workers, 0);
	ck_assert_uint_eq(cfg.conns_per_worker, 32768);
	ck_assert_uint_eq(cfg.pipes_per_worker, 128);
	ck_assert_uint_eq(cfg.sandbox_share_percent, 75);
	ck_assert_uint_eq(cfg.sandbox_completions_per_turn, 8);
	ck_assert_uint_eq(cfg.head_timeout_ms, 10000);
	ck_assert_uint_eq(cfg.connect_timeout_ms, 10000);
	ck_assert_uint_eq(cfg.dns_timeout_ms, 5000);
	ck_assert_uint_eq(cfg.idle_timeout_ms, 300000);
	ck_assert_uint_eq(cfg.sandbox_uid_first, 1879048192);
	ck_assert_uint_eq(cfg.sandbox_uid_count, 65536);
	ck_assert_uint_eq(cfg.sandboxes_per_user, 1024);
	ck_assert_uint_eq(cfg.sandbox_count, 2);
	ck_assert_str_eq(cfg.sandboxes[0].id, "agent-1");
	ck_assert_uint_eq(cfg.sandboxes[0].agent_uid, 1000);
	ck_assert_uint_eq(cfg.sandboxes[1].agent_uid, CONFIG_AGENT_ANY);
	ck_assert_uint_eq(cfg.sandboxes[0].profile, 0);
	ck_assert_str_eq(cfg.sandboxes[1].id, "bench");
	ck_assert_uint_eq(cfg.sandboxes[1].profile, 1);

	struct verdict v = decide(0, "origin.test");
	ck_assert_int_eq(v.tier, TIER_PASSTHROUGH);
	ck_assert_str_eq(v.rule, "origin");
	ck_assert_str_eq(v.instruction, "Use origin.test only for the integration tests.");
	v = decide_port(0, "origin.test", 80);
	ck_assert_int_eq(v.reason, REASON_PORT_NOT_ALLOWED);
	ck_assert_int_eq(decide(0, "a.pkg.example.org").tier, TIER_PASSTHROUGH);
	ck_assert_str_eq(decide(0, "a.pkg.example.org").rule, "default/2");
	ck_assert_int_eq(decide(0, "pkg.example.org").reason, REASON_HOST_NOT_ALLOWED);
	v = decide_port(0, "ollama.internal", 80);
	ck_assert_int_eq(v.tier, TIER_LOCAL);
	ck_assert_str_eq(v.upstream, "127.0.0.1:11434");
	ck_assert_uint_eq(v.rule_index, 2);
	expect_limits(v.rule_limits, 2, 4, 2);
	struct verdict_limits l;
	policy_verdict_ops.profile_limits(pol, 0, &l);
	expect_limits(l, 50, 100, 64);
	v = decide(0, "Example.COM.");
	ck_assert_int_eq(v.tier, TIER_FAKE);
	ck_assert_ptr_nonnull(v.fake);
	const struct verdict_response *r =
	    policy_verdict_ops.fake_response(pol, v.fake, "GET", 3, "/v1/models", 10);
	ck_assert_str_eq(r->head, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n");
	ck_assert_uint_eq(r->body_len, strlen("{\"data\": []}"));
	ck_assert_uint_eq(
	    policy_verdict_ops.fake_response(pol, v.fake, "GET", 3, "/v1/x", 5)->status, 404);
	ck_assert_uint_eq(policy_verdict_ops.fake_response(pol, v.fake, "GET", 3, "/", 1)->status,
			  200);
	ck_assert_str_eq(cfg.ca_cert, "/etc/agentsnet/ca.pem");
	ck_assert_str_eq(cfg.ca_key, "/etc/agentsnet/ca.key");
	ck_assert_uint_eq(cfg.leaf_days, 7);
	ck_assert_ptr_null(decide(0, "origin.test").fake);
	v = decide(0, "api.example.net");
	ck_assert_int_eq(v.tier, TIER_INJECT);
	ck_assert_ptr_nonnull(v.inject);
	ck_assert_str_eq(v.inject->header, "Authorization");
	ck_assert_str_eq(v.inject->prefix, "Bearer ");
	ck_assert_str_eq(v.inject->placeholder, "agentsnet-placeholder-example");
	ck_assert_str_eq(v.inject->secret, "sk-example-docs-0123456789");
	ck_assert_ptr_null(v.inject->upstream_ca);
	ck_assert(v.inject->require);
	ck_assert_ptr_null(decide(0, "origin.test").inject);
	ck_assert_int_eq(decide_port(0, "10.0.0.7", 80).tier, TIER_PASSTHROUGH);
	v = decide(0, "tracker.example.com");
	ck_assert_int_eq(v.tier, TIER_DENY);
	ck_assert_int_eq(v.reason, REASON_HOST_NOT_ALLOWED);
	ck_assert_str_eq(v.rule, "default/7");
	ck_assert_int_eq(decide_port(1, "origin.test", 80).tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide(1, "example.com").tier, TIER_DENY);
}
END_TEST

START_TEST(test_default_policy)
{
	expect_ok(policy_default_yaml());
	ck_assert_uint_eq(policy_profile_count(pol), 1);
	ck_assert_uint_eq(policy_rule_count(pol), 2);
	ck_assert_uint_eq(cfg.sandbox_count, 1);
	ck_assert_str_eq(cfg.sandboxes[0].id, "default");
	ck_assert_uint_eq(cfg.sandboxes[0].profile, 0);
	/* No daemon section: the defaults stay. */
	ck_assert_str_eq(cfg.socket_dir, "/run/agentsnet");
	ck_assert_ptr_null(cfg.tcp_listen);
	ck_assert_ptr_null(cfg.dns_servers);
	ck_assert_uint_eq(cfg.conns_per_worker, LIMITS_CONNS_PER_WORKER_DEFAULT);
	ck_assert_uint_eq(cfg.sandbox_uid_first, LIMITS_SANDBOX_UID_FIRST_DEFAULT);
	ck_assert_uint_eq(cfg.sandbox_uid_count, LIMITS_SANDBOX_UID_COUNT_DEFAULT);
	ck_assert_uint_eq(cfg.sandboxes_per_user, LIMITS_SANDBOXES_PER_USER_DEFAULT);
	struct verdict v = decide(0, "example.com");
	ck_assert_int_eq(v.tier, TIER_FAKE);
	ck_assert_str_eq(v.rule, "default/1");
	v = decide_port(0, "ollama.internal", 11434);
	ck_assert_int_eq(v.tier, TIER_LOCAL);
	ck_assert_str_eq(v.upstream, "127.0.0.1:11434");
	ck_assert_str_eq(v.rule, "default/2");
	ck_assert_int_eq(decide(0, "www.example.com").tier, TIER_DENY);
	ck_assert_int_eq(decide(0, "github.com").tier, TIER_DENY);
	/* The docs show the same text. */
	char *doc = docs_block("## The built-in policy");
	ck_assert_str_eq(doc, policy_default_yaml());
	pool_free(doc);
}
END_TEST

/* --- a sandbox's uid --------------------------------------------------------------------- */

START_TEST(test_sandbox_uid)
{
	expect_ok(MINIMAL
		  "sandboxes:\n  - {id: a, profile: p}\n  - {id: b, profile: p, uid: 4242}\n"
		  "  - {id: c, profile: p, uid: nobody}\n  - {id: d, profile: p, uid: 0}\n");
	ck_assert_uint_eq(cfg.sandbox_count, 4);
	ck_assert_uint_eq(cfg.sandboxes[0].agent_uid, CONFIG_AGENT_ANY);
	ck_assert_uint_eq(cfg.sandboxes[1].agent_uid, 4242);
	ck_assert_uint_eq(cfg.sandboxes[2].agent_uid, 65534);
	ck_assert_uint_eq(cfg.sandboxes[3].agent_uid, 0);
	expect_error(MINIMAL "sandboxes:\n  - {id: a, profile: p, uid: an-no-such-user}\n",
		     "t.yaml:10:30: uid \"an-no-such-user\": no such user");
	expect_error(MINIMAL "sandboxes:\n  - {id: a, profile: p, uid: 4294967295}\n",
		     "t.yaml:10:30: uid \"4294967295\": no such user");
	expect_error(MINIMAL "sandboxes:\n  - {id: a, profile: p, uid: [1]}\n",
		     "t.yaml:10:30: uid must be a number or a user name");
}
END_TEST

/* --- version ----------------------------------------------------------------------------- */

START_TEST(test_version)
{
	expect_error("version: 2\n",
		     "t.yaml:1:10: unsupported policy version 2 (this daemon reads version 1)");
	expect_error("version: 0\n", "t.yaml:1:10: unsupported policy version 0");
	expect_error("version: -1\n", "t.yaml:1:10: unsupported policy version -1");
	expect_error("version: 99999999999999999999999\n",
		     "t.yaml:1:10: unsupported policy version 99999999999999999999999");
	expect_error("version: 01\n", "t.yaml:1:10: unsupported policy version 01");
	expect_error("version: \"1\"\n", "t.yaml:1:10: version must be an integer");
	expect_error("version: 1.0\n", "t.yaml:1:10: version must be an integer");
	expect_error("version: [1]\n", "t.yaml:1:10: version must be an integer");
	expect_error("version:\n", "t.yaml:1:9: version must be an integer");
	expect_error("version: ~\n", "t.yaml:1:10: version must be an integer");
}
END_TEST

/* --- rules ------------------------------------------------------------------------------- */

START_TEST(test_rule_tier)
{
	expect_error(
	    HEAD "    - host: a.test\n      tier: allow\n",
	    "t.yaml:6:13: unknown tier \"allow\" (expected passthrough, local, fake, inject or deny)");
	expect_error(HEAD "    - host: a.test\n      tier: Passthrough\n",
		     "t.yaml:6:13: unknown tier \"Passthrough\"");
	static const char *const tiers[] = { "passthrough", "fake", "inject", "deny" };
	for (size_t i = 0; i < AN_ARRAY_LEN(tiers); i++) {
		/* A fake rule needs its responses (tests/unit/policy/fake.c), an inject rule
		 * its credential (tests/unit/policy/inject.c). */
		const char *extra =
		    strcmp(tiers[i], "fake") == 0 ? "      responses: [{status: 200}]\n"
		    : strcmp(tiers[i], "inject") == 0
			? "      inject: {header: X-Key, placeholder: placeholder-1, "
			  "secret_env: AGENTSNET_TEST_KEY}\n"
			: "";
		ck_assert_int_eq(setenv("AGENTSNET_TEST_KEY", "secret-1", 1), 0);
		expect_ok(textf(HEAD "    - host: a.test\n      tier: %s\n      owner: o\n"
				     "      reason: r\n%s",
				tiers[i], extra));
		/* Port 443: an inject rule without ports has only that one (issue 17 item 6). */
		ck_assert_str_eq(reason_tier_name(decide_port(0, "a.test", 443).tier),
				 strcmp(tiers[i], "deny") == 0 ? "deny" : tiers[i]);
	}
}
END_TEST

START_TEST(test_rule_duplicate_host)
{
	expect_error(HEAD RULE("a.test") RULE("A.Test."),
		     "t.yaml:9:13: duplicate host \"a.test\" in profile \"p\" (first at line 5)");
	expect_error(
	    HEAD RULE("\"*.a.test\"") RULE("b.test") RULE("\"*.A.TEST\""),
	    "t.yaml:13:13: duplicate host \"*.a.test\" in profile \"p\" (first at line 5)");
	expect_error(
	    HEAD RULE("\"2001:db8::1\"") RULE("\"2001:DB8:0::1\""),
	    "t.yaml:9:13: duplicate host \"2001:db8::1\" in profile \"p\" (first at line 5)");
	/* The same host in two profiles, and apex plus wildcard, are fine. */
	expect_ok(HEAD RULE("a.test") RULE("\"*.a.test\"") "  q:\n    rules:\n" RULE("a.test"));
}
END_TEST

START_TEST(test_rule_ports)
{
	expect_error(HEAD "    - host: a.test\n      ports: [0]\n",
		     "t.yaml:6:15: port must be 1..65535, got 0");
	expect_error(HEAD "    - host: a.test\n      ports: [443, 65536]\n",
		     "t.yaml:6:20: port must be 1..65535, got 65536");
	expect_error(HEAD "    - host: a.test\n      ports: [443, 443]\n",
		     "t.yaml:6:20: duplicate port 443");
	expect_error(HEAD "    - host: a.test\n      ports: []\n",
		     "t.yaml:6:14: ports must not be empty");
	expect_ok(
	    HEAD
	    "    - host: a.test\n      ports: [1, 65535]\n      tier: passthrough\n      owner: o\n      reason: r\n");
	ck_assert_int_eq(decide_port(0, "a.test", 1).tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide_port(0, "a.test", 65535).tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide_port(0, "a.test", 2).reason, REASON_PORT_NOT_ALLOWED);
	expect_error(
	    HEAD
	    "    - host: a.test\n      tier: deny\n      ports: [80]\n      owner: o\n      reason: r\n",
	    "t.yaml:7:7: ports cannot be combined with tier deny");
}
END_TEST

START_TEST(test_rule_ports_limit)
{
	/* 64 ports accepted, 65 refused. */
	expect_ok(textf(HEAD "    - host: a.test\n      ports: %s]\n      tier: passthrough\n"
			     "      owner: o\n      reason: r\n",
			flow_items("", 64)));
	ck_assert_int_eq(decide_port(0, "a.test", 64).tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide_port(0, "a.test", 65).reason, REASON_PORT_NOT_ALLOWED);
	expect_error(textf(HEAD "    - host: a.test\n      ports: %s]\n", flow_items("", 65)),
		     "t.yaml:6:");
	ck_assert_msg(strstr(err, ": ports has more than 64 entries") != NULL, "%s", err);
}
END_TEST

START_TEST(test_rule_upstream)
{
	expect_error(HEAD
		     "    - host: m.internal\n      tier: local\n      owner: o\n      reason: r\n",
		     "t.yaml:6:13: tier local needs an upstream (\"host:port\" to relay to)");
	expect_error(HEAD RULE("a.test") "      upstream: 127.0.0.1:1\n",
		     "t.yaml:9:7: upstream is only allowed with tier local");
	expect_error(HEAD "    - host: m.internal\n      upstream: 127.0.0.1\n",
		     "t.yaml:6:17: invalid upstream \"127.0.0.1\": expected host:port");
	expect_error(HEAD "    - host: m.internal\n      upstream: 127.0.0.1:0\n",
		     "t.yaml:6:17: invalid upstream \"127.0.0.1:0\": the port must be 1..65535");
	expect_error(
	    HEAD "    - host: m.internal\n      upstream: 127.0.0.1:65536\n",
	    "t.yaml:6:17: invalid upstream \"127.0.0.1:65536\": the port must be 1..65535");
	expect_error(
	    HEAD "    - host: m.internal\n      upstream: \"[10.0.0.1]:80\"\n",
	    "t.yaml:6:17: invalid upstream \"[10.0.0.1]:80\": brackets are for IPv6 addresses");
	expect_error(HEAD "    - host: m.internal\n      upstream: \"::1:80\"\n",
		     "t.yaml:6:17: invalid upstream \"::1:80\": expected host:port");
	expect_error(HEAD "    - host: m.internal\n      upstream: \"a b:80\"\n",
		     "t.yaml:6:17: invalid upstream \"a b:80\": character outside");
	expect_ok(
	    HEAD
	    "    - host: m1.internal\n      tier: local\n      upstream: \"[::1]:8080\"\n      owner: o\n      reason: r\n"
	    "    - host: m2.internal\n      tier: local\n      upstream: Models.LAN:65535\n      owner: o\n      reason: r\n"
	    "    - host: m3.internal\n      tier: local\n      upstream: 127.0.0.1:1\n      owner: o\n      reason: r\n");
	ck_assert_str_eq(decide_port(0, "m1.internal", 80).upstream, "[::1]:8080");
	ck_assert_str_eq(decide_port(0, "m2.internal", 80).upstream, "models.lan:65535");
	ck_assert_str_eq(decide_port(0, "m3.internal", 80).upstream, "127.0.0.1:1");
	/* A Unix socket path: 107 bytes fit sun_path with the NUL, 108 do not. */
	char path[POLICY_UPSTREAM_UNIX_BYTES_MAX + 2];
	for (int over = 0; over < 2; over++) {
		size_t len = POLICY_UPSTREAM_UNIX_BYTES_MAX + (size_t)over;
		memset(path, 's', len);
		path[0] = '/';
		path[len] = '\0';
		const char *yaml =
		    textf(HEAD "    - host: m.internal\n      tier: local\n      upstream: %s\n"
			       "      owner: o\n      reason: r\n",
			  path);
		if (over == 0) {
			expect_ok(yaml);
			ck_assert_str_eq(decide_port(0, "m.internal", 80).upstream, path);
		} else {
			expect_error(yaml, "t.yaml:7:17: invalid upstream \"/sss");
			ck_assert_msg(strstr(err, "longer than a socket path may be") != NULL, "%s",
				      err);
		}
	}
	expect_error(HEAD "    - host: m.internal\n      upstream: \"/run/a\\tb.sock\"\n",
		     "t.yaml:6:17: invalid upstream \"/run/a");
	ck_assert_msg(strstr(err, "a control character in the path") != NULL, "%s", err);
}
END_TEST

START_TEST(test_rule_ids)
{
	expect_ok(HEAD RULE("a.test") RULE("b.test") "      id: named\n" RULE("c.test"));
	ck_assert_str_eq(decide_port(0, "a.test", 1).rule, "p/1");
	ck_assert_str_eq(decide_port(0, "b.test", 1).rule, "named");
	ck_assert_str_eq(decide_port(0, "c.test", 1).rule, "p/3");
	expect_error(HEAD RULE("a.test") "      id: x\n" RULE("b.test") "      id: x\n",
		     "t.yaml:14:11: duplicate rule id \"x\" in profile \"p\" (first at line 5)");
	/* An explicit id may collide with a default one: reported at the later rule. */
	expect_error(HEAD RULE("a.test") "      id: p/2\n" RULE("b.test"),
		     "t.yaml:10:7: duplicate rule id \"p/2\" in profile \"p\" (first at line 5)");
	expect_error(MINIMAL "      id: \"a b\"\n",
		     "t.yaml:9:11: invalid rule id \"a b\": use 1-95 of [A-Za-z0-9_.:/@+-]");
	expect_error(MINIMAL "      id: \"\"\n", "t.yaml:9:11: invalid rule id \"\"");
	/* 95 bytes accepted, 96 refused. */
	char id[POLICY_RULE_ID_BYTES_MAX + 2];
	memset(id, 'i', sizeof(id));
	id[POLICY_RULE_ID_BYTES_MAX] = '\0';
	expect_ok(textf(MINIMAL "      id: %s\n", id));
	ck_assert_str_eq(decide_port(0, "a.test", 1).rule, id);
	id[POLICY_RULE_ID_BYTES_MAX] = 'i';
	id[POLICY_RULE_ID_BYTES_MAX + 1] = '\0';
	expect_error(textf(MINIMAL "      id: %s\n", id), "t.yaml:9:11: invalid rule id");
}
END_TEST

START_TEST(test_profiles)
{
	expect_error("version: 1\nprofiles: {}\n", "t.yaml:2:11: profiles must not be empty");
	expect_error(
	    "version: 1\nprofiles:\n  .p: {rules: []}\n",
	    "t.yaml:3:3: invalid profile name \".p\": use 1-63 of [A-Za-z0-9_.-], not starting with '.'");
	expect_error("version: 1\nprofiles:\n  \"a/b\": {rules: []}\n",
		     "t.yaml:3:3: invalid profile name \"a/b\"");
	expect_error("version: 1\nprofiles:\n  ~: {rules: []}\n",
		     "t.yaml:3:3: keys in profiles must be strings");
	/* Empty rules: a profile that refuses everything. */
	expect_ok("version: 1\nprofiles:\n  none: {rules: []}\n");
	ck_assert_int_eq(decide(0, "a.test").reason, REASON_HOST_NOT_ALLOWED);
	/* Name length: 63 accepted, 64 refused; the longest default rule id fits. */
	char name[66];
	memset(name, 'n', sizeof(name));
	name[63] = '\0';
	expect_ok(textf("version: 1\nprofiles:\n  %s:\n    rules:\n" RULE("a.test"), name));
	ck_assert_int_eq(policy_profile_index(pol, name), 0);
	ck_assert_uint_eq(strlen(decide_port(0, "a.test", 1).rule), 65);
	name[63] = 'n';
	name[64] = '\0';
	expect_error(textf("version: 1\nprofiles:\n  %s:\n    rules: []\n", name),
		     "t.yaml:3:3: invalid profile name");
}
END_TEST

/* --- sandboxes ---------------------------------------------------------------------------- */

START_TEST(test_sandboxes)
{
	expect_error(MINIMAL "sandboxes:\n  - id: s\n    profile: q\n",
		     "t.yaml:11:14: unknown profile \"q\"");
	expect_error(MINIMAL "sandboxes:\n  - {id: s, profile: p}\n  - {id: s, profile: p}\n",
		     "t.yaml:11:10: duplicate sandbox id \"s\"");
	expect_error(
	    MINIMAL "sandboxes:\n  - {id: .s, profile: p}\n",
	    "t.yaml:10:10: invalid sandbox id \".s\": use 1-63 of [A-Za-z0-9_.-], not starting with '.'");
	expect_error(MINIMAL "sandboxes:\n  - {id: a/b, profile: p}\n",
		     "t.yaml:10:10: invalid sandbox id \"a/b\"");
	expect_error(MINIMAL "sandboxes:\n  - {id: s, profile: \"p q\"}\n",
		     "t.yaml:10:22: invalid profile name \"p q\"");
	/* Profiles may come after the sandboxes that use them. */
	expect_ok("version: 1\nsandboxes:\n  - {id: s1, profile: b}\n  - {id: s2, profile: a}\n"
		  "profiles:\n  a: {rules: []}\n  b: {rules: []}\n");
	ck_assert_uint_eq(cfg.sandbox_count, 2);
	ck_assert_uint_eq(cfg.sandboxes[0].profile, 1);
	ck_assert_uint_eq(cfg.sandboxes[1].profile, 0);
	/* Id length: 63 accepted, 64 refused. */
	char id[66];
	memset(id, 's', sizeof(id));
	id[63] = '\0';
	expect_ok(textf(MINIMAL "sandboxes:\n  - {id: %s, profile: p}\n", id));
	ck_assert_str_eq(cfg.sandboxes[0].id, id);
	id[63] = 's';
	id[64] = '\0';
	expect_error(textf(MINIMAL "sandboxes:\n  - {id: %s, profile: p}\n", id),
		     "t.yaml:10:10: invalid sandbox id");
}
END_TEST

/* --- large policies and their limits ---------------------------------------------------------- */

static void gen_rules(FILE *f, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		fprintf(f,
			"    - {host: h%u.example.test, tier: passthrough, owner: o, reason: r}\n",
			i);
}

/* Short lines, so that POLICY_RULES_MAX rules fit in POLICY_FILE_BYTES_MAX. */
static void gen_short_rules(FILE *f, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		fprintf(f, "    - {host: h%x.t,tier: deny,owner: o,reason: r}\n", i);
}

/*
 * About 0.2 s in a release build, most of it libyaml. Under ASan every one of
 * libyaml's ~2M allocations goes through the sanitizer's allocator, which
 * triples the time; the bound there only catches a gross (e.g. quadratic) loss.
 */
#if defined(__SANITIZE_ADDRESS__)
#define LOAD_100K_SECONDS_MAX 3.0
#else
#define LOAD_100K_SECONDS_MAX 1.0
#endif

START_TEST(test_100k_rules_fast)
{
	struct gen g;

	gen_open(&g);
	fprintf(g.f, "version: 1\nprofiles:\n  p:\n    rules:\n");
	gen_rules(g.f, 0, 100000);
	fprintf(g.f, "sandboxes: [{id: s, profile: p}]\n");
	const char *yaml = gen_close(&g);
	double t0 = now_s();
	ck_assert_int_eq(load(yaml), 0);
	double took = now_s() - t0;
	printf("policy: loaded 100000 rules (%zu bytes) in %.3f s\n", g.len, took);
	ck_assert_msg(took < LOAD_100K_SECONDS_MAX, "load took %.3f s", took);
	ck_assert_uint_eq(policy_rule_count(pol), 100000);
	ck_assert_int_eq(decide(0, "h0.example.test").tier, TIER_PASSTHROUGH);
	ck_assert_str_eq(decide(0, "h99999.example.test").rule, "p/100000");
	ck_assert_int_eq(decide(0, "h100000.example.test").tier, TIER_DENY);
	pool_free(g.buf);
}
END_TEST

START_TEST(test_rules_limit)
{
	struct gen g;

	/* POLICY_RULES_MAX over two profiles loads; one more is refused at its position. */
	gen_open(&g);
	fprintf(g.f, "version: 1\nprofiles:\n  p:\n    rules:\n");
	gen_short_rules(g.f, 0, POLICY_RULES_MAX / 2);
	fprintf(g.f, "  q:\n    rules:\n");
	gen_short_rules(g.f, 0, POLICY_RULES_MAX / 2);
	fflush(g.f);
	ck_assert_int_eq(load(g.buf), 0);
	ck_assert_uint_eq(policy_rule_count(pol), POLICY_RULES_MAX);
	policy_free(pol);
	pol = NULL;
	gen_short_rules(g.f, POLICY_RULES_MAX / 2, 1);
	expect_error(gen_close(&g), textf("t.yaml:%u:7: the policy has more than %u rules",
					  4 + POLICY_RULES_MAX + 2 + 1, POLICY_RULES_MAX));
	pool_free(g.buf);
}
END_TEST

START_TEST(test_sandboxes_limit)
{
	struct gen g;

	gen_open(&g);
	fprintf(g.f, MINIMAL "sandboxes:\n");
	for (uint32_t i = 0; i < LIMITS_SANDBOXES_MAX; i++)
		fprintf(g.f, "  - {id: s%u, profile: p}\n", i);
	fflush(g.f);
	ck_assert_int_eq(load(g.buf), 0);
	ck_assert_uint_eq(cfg.sandbox_count, LIMITS_SANDBOXES_MAX);
	fprintf(g.f, "  - {id: x, profile: p}\n");
	expect_error(gen_close(&g), textf("t.yaml:%u:5: sandboxes has more than %u entries",
					  9 + LIMITS_SANDBOXES_MAX + 1, LIMITS_SANDBOXES_MAX));
	/* The failed load left the previous sandboxes in place. */
	ck_assert_uint_eq(cfg.sandbox_count, LIMITS_SANDBOXES_MAX);
	pool_free(g.buf);
}
END_TEST

START_TEST(test_profiles_limit)
{
	struct gen g;

	gen_open(&g);
	fprintf(g.f, "version: 1\nprofiles:\n");
	for (uint32_t i = 0; i < POLICY_PROFILES_MAX; i++)
		fprintf(g.f, "  p%u: {rules: []}\n", i);
	fflush(g.f);
	ck_assert_int_eq(load(g.buf), 0);
	ck_assert_uint_eq(policy_profile_count(pol), POLICY_PROFILES_MAX);
	ck_assert_int_eq(policy_profile_index(pol, "p65535"), 65535);
	fprintf(g.f, "  x: {rules: []}\n");
	expect_error(gen_close(&g), textf("t.yaml:%u:3: profiles has more than %u entries",
					  2 + POLICY_PROFILES_MAX + 1, POLICY_PROFILES_MAX));
	pool_free(g.buf);
}
END_TEST

/* --- atomicity, files ----------------------------------------------------------------------- */

START_TEST(test_failure_leaves_config)
{
	expect_ok(MINIMAL "sandboxes: [{id: keep, profile: p}]\ndaemon: {workers: 5}\n");
	expect_error(MINIMAL "sandboxes: [{id: new, profile: p}]\n"
			     "daemon: {workers: 7, socket_dir: /x, audit_log: /y}\n"
			     "resolver: {servers: [192.0.2.1]}\nbad: 1\n",
		     "t.yaml:12:1: unknown key \"bad\"");
	ck_assert_uint_eq(cfg.workers, 5);
	ck_assert_str_eq(cfg.socket_dir, "/run/agentsnet");
	ck_assert_str_eq(cfg.audit_path, "/var/log/agentsnet/audit.jsonl");
	ck_assert_ptr_null(cfg.dns_servers);
	ck_assert_uint_eq(cfg.sandbox_count, 1);
	ck_assert_str_eq(cfg.sandboxes[0].id, "keep");
	/* A successful load replaces the sandboxes; keys it does not give stay. */
	expect_ok(MINIMAL "sandboxes: [{id: a, profile: p}, {id: b, profile: p}]\n");
	ck_assert_uint_eq(cfg.sandbox_count, 2);
	ck_assert_uint_eq(cfg.workers, 5);
	expect_ok(MINIMAL);
	ck_assert_uint_eq(cfg.sandbox_count, 0);
	ck_assert_ptr_null(cfg.sandboxes);
}
END_TEST

START_TEST(test_error_buffer)
{
	char small[16];

	ck_assert_int_eq(
	    policy_load_buffer("t.yaml", "version: 2\n", 11, &cfg, &pol, small, sizeof(small)),
	    -EINVAL);
	ck_assert_str_eq(small, "t.yaml:1:10: un");
	ck_assert_int_eq(policy_load_buffer("t.yaml", "version: 2\n", 11, &cfg, &pol, NULL, 0),
			 -EINVAL);
	ck_assert_ptr_null(pol);
	/* Not NUL-terminated: only <len> bytes are read. */
	ck_assert_int_eq(policy_load_buffer("t.yaml", MINIMAL "garbage", strlen(MINIMAL), &cfg,
					    &pol, err, sizeof(err)),
			 0);
}
END_TEST

START_TEST(test_files)
{
	char path[] = "/tmp/agentsnet-policy-XXXXXX";
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, MINIMAL, strlen(MINIMAL)), (ssize_t)strlen(MINIMAL));
	ck_assert_int_eq(policy_load_file(path, &cfg, &pol, err, sizeof(err)), 0);
	ck_assert_uint_eq(policy_rule_count(pol), 1);
	policy_free(pol);
	pol = NULL;
	ck_assert_int_eq(write(fd, "bad: 1\n", 7), 7);
	ck_assert_int_eq(policy_load_file(path, &cfg, &pol, err, sizeof(err)), -EINVAL);
	const char *want = textf("%s:9:1: unknown key \"bad\"", path);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
	/* Size: exactly the limit is read (and is then invalid YAML), one byte more is refused. */
	ck_assert_int_eq(ftruncate(fd, POLICY_FILE_BYTES_MAX), 0);
	ck_assert_int_eq(policy_load_file(path, &cfg, &pol, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(ftruncate(fd, POLICY_FILE_BYTES_MAX + 1), 0);
	ck_assert_int_eq(policy_load_file(path, &cfg, &pol, err, sizeof(err)), -EFBIG);
	ck_assert_str_eq(err, textf("%s: larger than 67108864 bytes", path));
	close(fd);
	unlink(path);
	ck_assert_int_eq(policy_load_file(path, &cfg, &pol, err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err, textf("%s: open: No such file or directory", path));
	ck_assert_int_eq(policy_load_file("/tmp", &cfg, &pol, err, sizeof(err)), -EISDIR);
	ck_assert_str_eq(err, "/tmp: read: Is a directory");
	/* The buffer form refuses the same size. */
	ck_assert_int_eq(
	    policy_load_buffer("big", "", POLICY_FILE_BYTES_MAX + 1u, &cfg, &pol, err, sizeof(err)),
	    -EFBIG);
	ck_assert_ptr_null(pol);
}
END_TEST

/* Every allocation of a full load fails in turn: a clean -ENOMEM, nothing leaked or changed. */
START_TEST(test_allocation_failures)
{
	char *yaml = docs_block(NULL);

	ck_assert_int_eq(setenv("EXAMPLE_API_KEY", "sk-example-docs-0123456789", 1), 0);

	uint64_t total = count_allocations(yaml);
	ck_assert_uint_gt(total, 50);
	for (uint64_t n = 1; n <= total; n++) {
		int rc = load_failing(n, yaml);
		if (rc == 0) {
			/* Only a shrinking realloc may fail without failing the load. */
			ck_assert_uint_eq(policy_rule_count(pol), 8);
			continue;
		}
		expect_out_of_memory(n, rc);
		ck_assert_str_eq(cfg.tcp_listen, "127.0.0.1:18080");
		ck_assert_uint_eq(cfg.sandbox_count, 2);
	}
	pool_free(yaml);
}
END_TEST

START_TEST(test_profile_limits)
{
	expect_ok(HEAD RULE("a.test") "  q:\n    limits: {requests_per_second: 5, burst: 10, "
				      "concurrent: 3}\n    rules:\n" RULE("b.test"));
	expect_error(
	    HEAD RULE("a.test") "  q:\n    limits: {burst: 10}\n    rules:\n" RULE("b.test"),
	    "t.yaml:10:13: limits: burst needs requests_per_second");
	expect_error(HEAD RULE("a.test") "  q:\n    limits: {requests_per_second: 0}\n",
		     "t.yaml:10:35: requests_per_second");
	expect_error(HEAD RULE("a.test") "  q:\n    limits: {rate: 5}\n",
		     "t.yaml:10:14: unknown key \"rate\" in a profile's limits");
}
END_TEST

START_TEST(test_global_deny)
{
	/* The DoH endpoints: denied under an allowing wildcard, not against an exact rule. */
	expect_ok(HEAD RULE("\"*.cloudflare-dns.com\"")
		      RULE("\"*.example.net\"") "  exact:\n    rules:\n" RULE(
			  "dns.google") "deny: [bad.example.net, \"*.worse.example.net\"]\n");
	struct verdict v = decide(0, "mozilla.cloudflare-dns.com");
	ck_assert_int_eq(v.tier, TIER_DENY);
	ck_assert_str_eq(v.rule, "deny/doh");
	ck_assert_ptr_nonnull(strstr(v.instruction, "DNS-over-HTTPS"));
	ck_assert_int_eq(decide(0, "dns.google").tier, TIER_DENY);
	ck_assert_int_eq(decide(0, "www.cloudflare-dns.com").tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide(0, "good.example.net").tier, TIER_PASSTHROUGH);
	v = decide(0, "bad.example.net");
	ck_assert_int_eq(v.tier, TIER_DENY);
	ck_assert_str_eq(v.rule, "deny/1");
	ck_assert_str_eq(decide(0, "a.worse.example.net").rule, "deny/2");
	ck_assert_int_eq(decide(1, "dns.google").tier, TIER_PASSTHROUGH);
	expect_error(HEAD RULE("a.test") "deny: [\"*.com\"]\n",
		     "t.yaml:9:8: host \"*.com\" is refused");
}
END_TEST

/* --- rule limits ------------------------------------------------------------------------- */

#define LIMITED(host, limits) RULE(host) "      limits: " limits "\n"

/* Each key at its bounds, N and N+1: 1 and 0, 1000000 and 1000001. */
START_TEST(test_rule_limits_bounds)
{
	expect_ok(HEAD LIMITED("a.test", "{requests_per_second: 1, burst: 1, concurrent: 1}"));
	expect_limits(decide(0, "a.test").rule_limits, 1, 1, 1);
	expect_ok(HEAD LIMITED("a.test", "{requests_per_second: 1000000, burst: 1000000, "
					 "concurrent: 1000000}"));
	expect_limits(decide(0, "a.test").rule_limits, 1000000, 1000000, 1000000);
	expect_error(HEAD LIMITED("a.test", "{requests_per_second: 0}"),
		     "t.yaml:9:37: requests_per_second must be 1..1000000, got 0");
	expect_error(HEAD LIMITED("a.test", "{requests_per_second: 1000001}"),
		     "t.yaml:9:37: requests_per_second must be 1..1000000, got 1000001");
	expect_error(HEAD LIMITED("a.test", "{requests_per_second: 1, burst: 0}"),
		     "t.yaml:9:47: burst must be 1..1000000, got 0");
	expect_error(HEAD LIMITED("a.test", "{requests_per_second: 1, burst: 1000001}"),
		     "t.yaml:9:47: burst must be 1..1000000, got 1000001");
	expect_error(HEAD LIMITED("a.test", "{concurrent: 0}"),
		     "t.yaml:9:28: concurrent must be 1..1000000, got 0");
	expect_error(HEAD LIMITED("a.test", "{concurrent: 1000001}"),
		     "t.yaml:9:28: concurrent must be 1..1000000, got 1000001");
}
END_TEST

START_TEST(test_rule_limits_errors)
{
	expect_error(HEAD LIMITED("a.test", "{rate: 5}"),
		     "t.yaml:9:16: unknown key \"rate\" in a rule's limits (expected one of: "
		     "requests_per_second, burst, concurrent)");
	expect_error(HEAD LIMITED("a.test", "{burst: 10}"),
		     "t.yaml:9:15: limits: burst needs requests_per_second");
	expect_error(HEAD LIMITED("a.test", "{concurrent: 1, concurrent: 2}"),
		     "t.yaml:9:31: duplicate key \"concurrent\" in a rule's limits");
	expect_error(HEAD LIMITED("a.test", "5"), "t.yaml:9:15: limits must be a mapping");
	expect_error(HEAD LIMITED("a.test", "{concurrent: -1}"),
		     "t.yaml:9:28: concurrent must be 1..1000000, got -1");
	expect_error(HEAD RULE("a.test") "      limits: {concurrent: 1}\n      limits: {}\n",
		     "t.yaml:10:7: duplicate key \"limits\" in a rule");
	/* A deny rule serves nothing, whichever order the keys come in. */
	expect_error(
	    HEAD "    - host: a.test\n      limits: {concurrent: 1}\n      tier: deny\n"
		 "      owner: o\n      reason: r\n",
	    "t.yaml:6:7: limits cannot be combined with tier deny, which serves no request");
	/* An empty mapping sets no limit, as for a profile. */
	expect_ok(HEAD LIMITED("a.test", "{}"));
	expect_limits(decide(0, "a.test").rule_limits, 0, 0, 0);
	ck_assert_uint_eq(decide(0, "a.test").rule_index, 0);
}
END_TEST

/*
 * rule_index is dense over the whole file, in file order across profiles, and
 * comes with the rule's limits on every served verdict, through names,
 * wildcards and IP literals alike; every refusal has none.
 */
START_TEST(test_rule_limits_verdict)
{
	expect_ok(
	    HEAD LIMITED("a.test", "{requests_per_second: 5, burst: 10, concurrent: 3}") RULE(
		"b.test") LIMITED("\"*.c.test\"", "{concurrent: 7}")
		LIMITED("192.0.2.1", "{requests_per_second: 9}") "  q:\n    rules:\n" LIMITED(
		    "a.test",
		    "{requests_per_second: 2}") "    - host: d.test\n      tier: deny\n      owner: o\n      reason: r\n"
						"    - host: e.test\n      ports: [80]\n      tier: passthrough\n"
						"      owner: o\n      reason: r\n      limits: {concurrent: 4}\n");
	ck_assert_uint_eq(policy_rule_count(pol), 7);
	ck_assert_int_eq(decide(0, "A.test.").tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide(0, "3221225985").tier, TIER_PASSTHROUGH);
	static const struct {
		uint32_t profile;
		const char *host;
		uint16_t port;
		uint32_t rule_index;
		uint32_t rate;
		uint32_t burst;
		uint32_t concurrent;
	} served[] = {
		{ 0, "A.test.", 443, 0, 5, 10, 3 },
		{ 0, "b.test", 443, 1, 0, 0, 0 },
		{ 0, "x.y.c.test", 443, 2, 0, 0, 7 },
		{ 0, "3221225985", 443, 3, 9, 0, 0 }, /* 192.0.2.1, through the IP table */
		{ 1, "a.test", 443, 4, 2, 0,
		  0 }, /* the same host in another profile: another rule */
		{ 1, "e.test", 80, 6, 0, 0, 4 },
	};
	struct verdict v;
	for (size_t i = 0; i < AN_ARRAY_LEN(served); i++) {
		v = decide_port(served[i].profile, served[i].host, served[i].port);
		ck_assert_uint_eq(v.rule_index, served[i].rule_index);
		expect_limits(v.rule_limits, served[i].rate, served[i].burst, served[i].concurrent);
	}
	/* Refusals: no rule, a deny rule, a port the rule does not list, the DoH list. */
	static const struct {
		uint32_t profile;
		const char *host;
		uint16_t port;
		enum reason reason;
	} refused[] = {
		{ 0, "nope.test", 443, REASON_HOST_NOT_ALLOWED },
		{ 0, "c.test", 443, REASON_HOST_NOT_ALLOWED }, /* a wildcard's apex */
		{ 0, "bad..test", 443, REASON_HOST_NOT_ALLOWED },
		{ 0, "192.0.2.2", 443, REASON_HOST_NOT_ALLOWED },
		{ 1, "d.test", 443, REASON_HOST_NOT_ALLOWED },
		{ 1, "e.test", 443, REASON_PORT_NOT_ALLOWED },
		{ 0, "dns.google", 443, REASON_HOST_NOT_ALLOWED },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(refused); i++) {
		v = decide_port(refused[i].profile, refused[i].host, refused[i].port);
		ck_assert_int_eq(v.tier, TIER_DENY);
		ck_assert_int_eq(v.reason, refused[i].reason);
		ck_assert_uint_eq(v.rule_index, VERDICT_RULE_NONE);
		expect_limits(v.rule_limits, 0, 0, 0);
	}
}
END_TEST

/* The example of docs/policy.md's "Rule `limits`" section loads and means what it says. */
START_TEST(test_rule_limits_docs)
{
	char *yaml = docs_policy("### Rule `limits`");

	expect_ok(yaml);
	free(yaml);
	struct verdict v = decide(0, "api.search.example");
	ck_assert_int_eq(v.tier, TIER_PASSTHROUGH);
	ck_assert_uint_eq(v.rule_index, 0);
	expect_limits(v.rule_limits, 1, 5, 2);
	struct verdict_limits l;
	policy_verdict_ops.profile_limits(pol, 0, &l);
	expect_limits(l, 100, 0, 32);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy/policy");
	TCase *tc = tcase_create("policy");

	tcase_add_checked_fixture(tc, setup, policytest_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_docs_example);
	tcase_add_test(tc, test_profile_limits);
	tcase_add_test(tc, test_global_deny);
	tcase_add_test(tc, test_rule_limits_bounds);
	tcase_add_test(tc, test_rule_limits_errors);
	tcase_add_test(tc, test_rule_limits_verdict);
	tcase_add_test(tc, test_rule_limits_docs);
	tcase_add_test(tc, test_default_policy);
	tcase_add_test(tc, test_sandbox_uid);
	tcase_add_test(tc, test_version);
	tcase_add_test(tc, test_rule_tier);
	tcase_add_test(tc, test_rule_duplicate_host);
	tcase_add_test(tc, test_rule_ports);
	tcase_add_test(tc, test_rule_ports_limit);
	tcase_add_test(tc, test_rule_upstream);
	tcase_add_test(tc, test_rule_ids);
	tcase_add_test(tc, test_profiles);
	tcase_add_test(tc, test_sandboxes);
	tcase_add_test(tc, test_100k_rules_fast);
	tcase_add_test(tc, test_rules_limit);
	tcase_add_test(tc, test_sandboxes_limit);
	tcase_add_test(tc, test_profiles_limit);
	tcase_add_test(tc, test_failure_leaves_config);
	tcase_add_test(tc, test_registrants);
	tcase_add_test(tc, test_error_buffer);
	tcase_add_test(tc, test_files);
	tcase_add_test(tc, test_allocation_failures);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
