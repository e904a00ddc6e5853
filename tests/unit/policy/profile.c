/*
 * policy/profile.c, the `profiles:` section: a rule's tier, ports, upstream
 * (host:port or a Unix socket's path) and id, each at its limit N and N+1;
 * a profile's name and limits, and who may register sandboxes on it (users,
 * groups); a rule's limits and the dense rule_index every served verdict
 * carries; the most rules and profiles a policy may hold; every refusal with
 * its exact "name:line:col: message".
 */
#include "../../../policy/profile.c"

#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

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

/* --- presets (policy/preset.h) --------------------------------------------------------- */

/* A profile "p" of presets <entries> (flow items) and no rules of its own. */
#define PRESETS(entries) "version: 1\nprofiles:\n  p:\n    presets: [" entries "]\n"

START_TEST(test_presets_expand)
{
	uint32_t count = 0;
	const struct preset *all = preset_all(&count);

	ck_assert_int_eq(setenv("AGENTSNET_TEST_KEY", "secret-1", 1), 0);
	/* The rules every profile holds beside its own (the built-in deny list). */
	expect_ok(PRESETS(""));
	uint32_t builtin = pol->profiles[0].rule_count;
	/* Every preset loads alone, and each of its hosts is its rule's, on the tier it says. */
	for (uint32_t i = 0; i < count; i++) {
		const struct preset *pr = &all[i];
		expect_ok(textf(pr->inject != NULL ? PRESETS("{name: %s@%u, secret_env: "
							     "AGENTSNET_TEST_KEY}")
						   : PRESETS("%s@%u"),
				pr->name, pr->version));
		ck_assert_uint_eq(pol->profiles[0].rule_count, builtin + pr->host_count);
		for (uint32_t h = 0; h < pr->host_count; h++) {
			const struct preset_host *host = &pr->hosts[h];
			ck_assert_ptr_null(strchr(host->host, '*'));
			struct verdict v = decide_port(0, host->host, host->ports[0]);
			ck_assert_str_eq(reason_tier_name(v.tier),
					 pr->inject != NULL ? "inject" : "passthrough");
			ck_assert_str_eq(v.rule, textf("%s.%s", pr->name, host->id));
			ck_assert_uint_eq(pol->profiles[0].rules[h].line, 4); /* the entry's */
		}
		/* Nothing else: the next port, or another name, is refused. */
		ck_assert_str_eq(reason_tier_name(decide_port(0, pr->hosts[0].host, 8443).tier),
				 "deny");
		ck_assert_str_eq(reason_tier_name(decide(0, "evil.example").tier), "deny");
	}
	/* Beside the profile's own rules, in the order the keys come. */
	expect_ok("version: 1\nprofiles:\n  p:\n    rules:\n" RULE(
	    "a.test") "    presets: [npm@1, github@1]\n");
	ck_assert_uint_eq(pol->profiles[0].rule_count, builtin + 1 + 1 + 6);
	ck_assert_str_eq(decide(0, "raw.githubusercontent.com").rule, "github.raw");
	ck_assert_str_eq(reason_tier_name(decide(0, "gist.githubusercontent.com").tier), "deny");
	/* A placeholder of the entry's own. */
	expect_ok(PRESETS("{name: openai@1, secret_env: AGENTSNET_TEST_KEY, placeholder: "
			  "sk-placeholder-9}"));
	ck_assert_str_eq(decide(0, "api.openai.com").inject->placeholder, "sk-placeholder-9");
}
END_TEST

START_TEST(test_presets_refused)
{
	static const struct refusal bad[] = {
		{ PRESETS("npm"), "npm",
		  "preset \"npm\" needs a version, \"npm@1\": a version never changes, so the "
		  "policy says which list it means" },
		{ PRESETS("npm@2"), "npm@2",
		  "preset \"npm@2\" has no such version (there is: npm@1)" },
		{ PRESETS("npm@"), "npm@",
		  "preset \"npm@\" has no such version (there is: npm@1)" },
		{ PRESETS("npm@01x"), "npm@01x",
		  "preset \"npm@01x\" has no such version (there is: npm@1)" },
		{ PRESETS("left-pad@1"), "left-pad",
		  "no preset \"left-pad@1\" (there are: anthropic, crates, debian, github, gitlab, "
		  "gomod, google-ai, maven, npm, openai, pypi, ubuntu)" },
		{ PRESETS("anthropic@1"), "anthropic",
		  "preset anthropic@1 injects a credential: name exactly one of secret_file and "
		  "secret_env ({name: anthropic@1, secret_file: PATH})" },
		{ PRESETS("{name: anthropic@1, secret_env: A, secret_file: /b}"), "{name",
		  "preset anthropic@1 injects a credential: name exactly one of secret_file and "
		  "secret_env ({name: anthropic@1, secret_file: PATH})" },
		{ PRESETS("{name: npm@1, secret_env: AGENTSNET_TEST_KEY}"), "{name",
		  "preset npm@1 is a passthrough preset: it takes no secret_file, secret_env or "
		  "placeholder" },
		{ PRESETS("{name: anthropic@1, secret_env: AGENTSNET_NO_SUCH_KEY}"), "{name",
		  "preset anthropic@1: secret_env AGENTSNET_NO_SUCH_KEY: the daemon's environment "
		  "has no such variable" },
		{ PRESETS(
		      "{name: anthropic@1, secret_env: AGENTSNET_TEST_KEY, placeholder: short}"),
		  "{name", "preset anthropic@1: placeholder must be 8-256 bytes, got 5" },
		{ PRESETS("{name: anthropic@1, secret_env: \"A\\tB\"}"), "\"A",
		  "secret_env has a control character" },
		{ PRESETS("{name: anthropic@1, secret_file: \"key\\0junk\"}"), "\"key",
		  "secret_file has a control character" },
		{ PRESETS("\"npm@1\\0x\""), "\"npm", "a presets entry has a control character" },
		{ PRESETS("{secret_env: A}"), "{secret",
		  "missing mandatory key \"name\" in a presets entry" },
		{ PRESETS("{name: npm@1, version: 2}"), "version: 2",
		  "unknown key \"version\" in a presets entry (expected one of: name, secret_file, "
		  "secret_env, placeholder)" },
		{ PRESETS("npm@1, npm@1"), "npm@1]",
		  "preset npm@1: duplicate rule id \"npm.registry\" in profile \"p\" (first at line "
		  "4)" },
		{ PRESETS("[npm@1]"), "[npm@1]", "a presets entry must be a mapping" },
	};
	/* A duplicate id names where its first rule is, presets' rules counted. */
	expect_error("version: 1\nprofiles:\n  p:\n    rules:\n" RULE("a.test")
			 RULE("b.test") "    presets: [pypi@1, npm@1, pypi@1]\n",
		     "t.yaml:13:30: preset pypi@1: duplicate rule id \"pypi.index\" in profile "
		     "\"p\" (first at line 13)");
	ck_assert_int_eq(setenv("AGENTSNET_TEST_KEY", "secret-1", 1), 0);
	ck_assert_int_eq(unsetenv("AGENTSNET_NO_SUCH_KEY"), 0);
	expect_refusals(bad, AN_ARRAY_LEN(bad));
	/* Neither rules nor presets: a profile must name what it may reach. */
	expect_error("version: 1\nprofiles:\n  p:\n    limits: {concurrent: 1}\n",
		     "t.yaml:4:5: missing mandatory key \"rules\" in a profile");
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

/* --- a profile's limits ------------------------------------------------------------------ */

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

/*
 * `server_name_check` (issue 18 item 4): a passthrough rule checks by default,
 * `false` lets its tunnels name other servers; the verdict says so for that
 * rule alone (name, wildcard and address rules), and the key is refused on
 * every other tier and as a non-boolean.
 */
START_TEST(test_rule_server_name_check)
{
	expect_ok(HEAD RULE(
	    "checked.test") "    - {host: any.test, tier: passthrough, owner: o, reason: r,\n"
			    "       server_name_check: false}\n"
			    "    - {host: \"*.w.test\", tier: passthrough, owner: o, reason: r,\n"
			    "       server_name_check: false}\n"
			    "    - {host: 192.0.2.1, tier: passthrough, owner: o, reason: r,\n"
			    "       server_name_check: false}\n"
			    "    - {host: on.test, tier: passthrough, owner: o, reason: r,\n"
			    "       server_name_check: true}\n");
	ck_assert(!decide(0, "checked.test").server_name_any);
	ck_assert(decide(0, "any.test").server_name_any);
	ck_assert(decide(0, "a.w.test").server_name_any);
	ck_assert(decide(0, "192.0.2.1").server_name_any);
	ck_assert(!decide(0, "on.test").server_name_any);
	ck_assert(!decide(0, "other.test").server_name_any);
	static const char *const others[] = { "local", "fake", "inject", "deny" };
	for (size_t i = 0; i < AN_ARRAY_LEN(others); i++) {
		const char *yaml = textf(HEAD "    - host: a.test\n      tier: %s\n      owner: o\n"
					      "      reason: r\n      server_name_check: false\n",
					 others[i]);
		/* Another tier's own mandatory keys are missing or come first: the message
		 * names this key only once those pass, so the deny rule is the one shown. */
		if (strcmp(others[i], "deny") == 0)
			expect_error(yaml, "t.yaml:9:7: server_name_check is only allowed with "
					   "tier passthrough");
		else
			ck_assert_int_eq(load(yaml), -EINVAL);
	}
	expect_error(HEAD RULE("a.test") "      server_name_check: sometimes\n",
		     "t.yaml:9:26: server_name_check must be true or false");
}
END_TEST

/* --- the most rules and profiles --------------------------------------------------------- */

/* Short lines, so that POLICY_RULES_MAX rules fit in POLICY_FILE_BYTES_MAX. */
static void gen_short_rules(FILE *f, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		fprintf(f, "    - {host: h%x.t,tier: deny,owner: o,reason: r}\n", i);
}

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

int main(void)
{
	TCase *tc;
	Suite *s = policytest_suite("policy/profile", "profile", setup, &tc);

	tcase_add_test(tc, test_rule_tier);
	tcase_add_test(tc, test_presets_expand);
	tcase_add_test(tc, test_presets_refused);
	tcase_add_test(tc, test_rule_ports);
	tcase_add_test(tc, test_rule_ports_limit);
	tcase_add_test(tc, test_rule_server_name_check);
	tcase_add_test(tc, test_rule_upstream);
	tcase_add_test(tc, test_rule_ids);
	tcase_add_test(tc, test_profiles);
	tcase_add_test(tc, test_profile_limits);
	tcase_add_test(tc, test_registrants);
	tcase_add_test(tc, test_rule_limits_bounds);
	tcase_add_test(tc, test_rule_limits_errors);
	tcase_add_test(tc, test_rule_limits_verdict);
	tcase_add_test(tc, test_rule_limits_docs);
	tcase_add_test(tc, test_rules_limit);
	tcase_add_test(tc, test_profiles_limit);
	return unit_run(s);
}
