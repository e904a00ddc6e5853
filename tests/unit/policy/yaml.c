/*
 * policy/yaml.c, the strict event reader, through whole policies: unknown,
 * repeated and missing keys named with their section, values of the wrong
 * type, libyaml's own errors, anchors, aliases and tags refused, and the
 * one-line texts (owner, reason, instruction) at their limit N and N+1;
 * every refusal with its exact "name:line:col: message".
 */
#include "../../../policy/yaml.c"

#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

/* --- unknown, duplicate and missing keys ---------------------------------------------------- */

START_TEST(test_unknown_keys)
{
	expect_error(
	    MINIMAL "foo: 1\n",
	    "t.yaml:9:1: unknown key \"foo\" in the policy (expected one of: version, daemon, resolver, profiles, sandboxes, deny, alerts)");
	expect_error("version: 1\ndaemon:\n  workers: 1\n  sockets: /x\n",
		     "t.yaml:4:3: unknown key \"sockets\" in daemon (expected one of: socket_dir,");
	expect_error("version: 1\ndaemon:\n  timeouts:\n    head_ms: 5\n    tail_ms: 5\n",
		     "t.yaml:5:5: unknown key \"tail_ms\" in daemon.timeouts");
	expect_error("version: 1\nresolver:\n  nameservers: []\n",
		     "t.yaml:3:3: unknown key \"nameservers\" in resolver");
	expect_error("version: 1\nprofiles:\n  p:\n    rules: []\n    methods: []\n",
		     "t.yaml:5:5: unknown key \"methods\" in a profile (expected one of: rules, "
		     "presets, limits, ingress, users, groups, alerts)");
	expect_error(MINIMAL "      method: GET\n", "t.yaml:9:7: unknown key \"method\" in a rule");
	expect_error(MINIMAL "sandboxes:\n  - id: s\n    profile: p\n    user: x\n",
		     "t.yaml:12:5: unknown key \"user\" in a sandbox");
	/* Keys are case-sensitive, and control bytes are shown safely. */
	expect_error("Version: 1\n", "t.yaml:1:1: unknown key \"Version\" in the policy");
	expect_error("\"ver\\tsion\": 1\n", "t.yaml:1:1: unknown key \"ver?sion\" in the policy");
}
END_TEST

START_TEST(test_duplicate_keys)
{
	expect_error("version: 1\nversion: 1\n",
		     "t.yaml:2:1: duplicate key \"version\" in the policy");
	expect_error(HEAD "    - host: a.test\n      host: b.test\n",
		     "t.yaml:6:7: duplicate key \"host\" in a rule");
	expect_error("version: 1\ndaemon: {workers: 1, workers: 2}\n",
		     "t.yaml:2:22: duplicate key \"workers\" in daemon");
	expect_error("version: 1\nprofiles:\n  p: {rules: []}\n  p: {rules: []}\n",
		     "t.yaml:4:3: duplicate profile \"p\"");
}
END_TEST

START_TEST(test_missing_keys)
{
	expect_error("profiles:\n  p:\n    rules: []\n",
		     "t.yaml:1:1: missing mandatory key \"version\" in the policy");
	expect_error("# comment\n\nprofiles:\n  p:\n    rules: []\n",
		     "t.yaml:3:1: missing mandatory key \"version\" in the policy");
	expect_error("version: 1\n",
		     "t.yaml:1:1: missing mandatory key \"profiles\" in the policy");
	expect_error("version: 1\nprofiles:\n  p: {}\n",
		     "t.yaml:3:6: missing mandatory key \"rules\" in a profile");
	expect_error(HEAD "    - tier: passthrough\n      owner: o\n      reason: r\n",
		     "t.yaml:5:7: missing mandatory key \"host\" in a rule");
	expect_error(HEAD "    - host: a.test\n      owner: o\n      reason: r\n",
		     "t.yaml:5:7: missing mandatory key \"tier\" in a rule");
	expect_error(HEAD "    - host: a.test\n      tier: passthrough\n      reason: r\n",
		     "t.yaml:5:7: missing mandatory key \"owner\" in a rule");
	expect_error(HEAD "    - host: a.test\n      tier: passthrough\n      owner: o\n",
		     "t.yaml:5:7: missing mandatory key \"reason\" in a rule");
	expect_error(MINIMAL "sandboxes:\n  - profile: p\n",
		     "t.yaml:10:5: missing mandatory key \"id\" in a sandbox");
	expect_error(MINIMAL "sandboxes:\n  - id: s\n",
		     "t.yaml:10:5: missing mandatory key \"profile\" in a sandbox");
}
END_TEST

/* --- types, YAML ---------------------------------------------------------------------------- */

START_TEST(test_wrong_types)
{
	expect_error("version: 1\ndaemon: []\n", "t.yaml:2:9: daemon must be a mapping");
	expect_error("version: 1\ndaemon:\n", "t.yaml:2:8: daemon must be a mapping");
	expect_error("version: 1\nresolver: x\n", "t.yaml:2:11: resolver must be a mapping");
	expect_error("version: 1\nprofiles: []\n", "t.yaml:2:11: profiles must be a mapping");
	expect_error("version: 1\nprofiles:\n  p: [a]\n",
		     "t.yaml:3:6: a profile must be a mapping");
	expect_error("version: 1\nprofiles:\n  p:\n    rules: {}\n",
		     "t.yaml:4:12: rules must be a sequence");
	expect_error(HEAD "    - a.test\n", "t.yaml:5:7: a rule must be a mapping");
	expect_error(HEAD "    - host: a.test\n      tier: passthrough\n      owner: [o]\n",
		     "t.yaml:7:14: owner must be a string");
	expect_error(HEAD "    - host: a.test\n      tier: passthrough\n      owner:\n",
		     "t.yaml:7:13: owner must be a string");
	expect_error(HEAD "    - host: a.test\n      tier: passthrough\n      owner: \"\"\n",
		     "t.yaml:7:14: owner must not be empty");
	expect_error(HEAD "    - host: {a: b}\n", "t.yaml:5:13: host must be a string");
	expect_error(HEAD "    - host: a.test\n      ports: 443\n",
		     "t.yaml:6:14: ports must be a sequence");
	expect_error(HEAD "    - host: a.test\n      ports: [\"443\"]\n",
		     "t.yaml:6:15: port must be an integer");
	expect_error("version: 1\ndaemon:\n  workers: x\n",
		     "t.yaml:3:12: workers must be an integer");
	expect_error("version: 1\ndaemon:\n  workers: 1.5\n",
		     "t.yaml:3:12: workers must be an integer");
	expect_error("version: 1\ndaemon:\n  workers: 010\n",
		     "t.yaml:3:12: workers must not have leading zeros");
	expect_error("version: 1\ndaemon:\n  workers: -1\n",
		     "t.yaml:3:12: workers must be 0..64, got -1");
	expect_error("version: 1\ndaemon:\n  timeouts: 5\n",
		     "t.yaml:3:13: timeouts must be a mapping");
	expect_error("version: 1\nsandboxes: {}\n", "t.yaml:2:12: sandboxes must be a sequence");
	expect_error("version: 1\n[a]: 1\n", "t.yaml:2:1: keys in the policy must be strings");
	expect_error("version: 1\nprofiles:\n  [p]: {rules: []}\n",
		     "t.yaml:3:3: keys in profiles must be strings");
	expect_error("[]\n", "t.yaml:1:1: the policy must be a mapping");
	expect_error("", "t.yaml:1:1: the policy is empty");
	expect_error("# only a comment\n", "t.yaml:2:1: the policy is empty");
}
END_TEST

START_TEST(test_yaml_syntax)
{
	expect_error(
	    "version: 1\n- a\n",
	    "t.yaml:2:1: YAML: did not find expected key (while parsing a block mapping at line 1, column 1)");
	expect_error(
	    "version: 1\nversion 2\n",
	    "t.yaml:3:1: YAML: could not find expected ':' (while scanning a simple key at line 2, column 1)");
	expect_error(
	    "version: 1\nprofiles: {\n",
	    "t.yaml:3:1: YAML: did not find expected node content (while parsing a flow node");
	expect_error("version: 1\nprofiles:\n  p:\n\trules: []\n",
		     "t.yaml:4:1: YAML: found character that cannot start any token");
	expect_error(
	    HEAD "    - host: \"a\n",
	    "t.yaml:6:1: YAML: found unexpected end of stream (while scanning a quoted scalar at line 5, column 13)");
	/* Invalid UTF-8 is reported where it is. */
	expect_error("version: 1\nprofiles:\n  p\xff: {}\n", "t.yaml:3:4: YAML: invalid");
	expect_error("version: 1\n---\nversion: 1\n",
		     "t.yaml:1:1: missing mandatory key \"profiles\" in the policy");
	expect_error(MINIMAL "---\nversion: 1\n", "t.yaml:9:1: only one YAML document is allowed");
	expect_error("version: &v 1\n", "t.yaml:1:10: YAML anchors and aliases are not supported");
	expect_error("version: 1\nprofiles: &p {}\n",
		     "t.yaml:2:11: YAML anchors and aliases are not supported");
	expect_error("version: 1\nprofiles: *p\n",
		     "t.yaml:2:11: YAML anchors and aliases are not supported");
	expect_error(
	    HEAD "    - host: *.example.com\n",
	    "t.yaml:5:13: YAML reads an unquoted '*' as an alias: quote wildcard hosts (\"*.example.com\")");
	expect_error(HEAD "    - host: *\n",
		     "t.yaml:5:13: YAML reads an unquoted '*' as an alias: quote wildcard hosts");
	expect_error("version: !!int 1\n", "t.yaml:1:10: YAML tags are not supported");
	expect_error("version: 1\nprofiles: !!map {}\n",
		     "t.yaml:2:11: YAML tags are not supported");
}
END_TEST

/* --- one-line texts ------------------------------------------------------------------------- */

START_TEST(test_rule_text)
{
	expect_error(
	    MINIMAL "      instruction: \"line1\\nline2\"\n",
	    "t.yaml:9:20: instruction must be one line without control characters (no CR, LF, tab)");
	expect_error(MINIMAL "      instruction: \"a\\rb\"\n",
		     "t.yaml:9:20: instruction must be one line without control characters");
	expect_error(MINIMAL "      instruction: \"a\\tb\"\n",
		     "t.yaml:9:20: instruction must be one line without control characters");
	expect_error(MINIMAL "      instruction: \"a\\0b\"\n",
		     "t.yaml:9:20: instruction must be one line without control characters");
	expect_error(MINIMAL "      instruction: \"a\\x7fb\"\n",
		     "t.yaml:9:20: instruction must be one line without control characters");
	expect_error(MINIMAL "      instruction: |\n        one\n        two\n",
		     "t.yaml:9:20: instruction must be one line without control characters");
	expect_error(HEAD "    - host: a.test\n      tier: passthrough\n      owner: \"a\\nb\"\n",
		     "t.yaml:7:14: owner must be one line without control characters");
	expect_error(
	    HEAD
	    "    - host: a.test\n      tier: passthrough\n      owner: o\n      reason: \"\\u2028\\r\"\n",
	    "t.yaml:8:15: reason must be one line without control characters");
	expect_error(MINIMAL "      instruction: \"\"\n",
		     "t.yaml:9:20: instruction must not be empty");
	/* Non-ASCII text is fine: it is valid UTF-8 by the time libyaml hands it over. */
	expect_ok(MINIMAL
		  "      instruction: \"Nicht erlaubt: fragen Sie den Betreiber \xc3\xa4\"\n");
}
END_TEST

START_TEST(test_rule_text_limit)
{
	char text[POLICY_TEXT_BYTES_MAX + 2];

	memset(text, 'x', sizeof(text));
	text[POLICY_TEXT_BYTES_MAX] = '\0';
	expect_ok(textf(MINIMAL "      instruction: %s\n", text));
	ck_assert_uint_eq(strlen(decide_port(0, "a.test", 1).instruction), POLICY_TEXT_BYTES_MAX);
	text[POLICY_TEXT_BYTES_MAX] = 'x';
	text[POLICY_TEXT_BYTES_MAX + 1] = '\0';
	expect_error(textf(MINIMAL "      instruction: %s\n", text),
		     "t.yaml:9:20: instruction is longer than 512 bytes");
	expect_error(textf(HEAD "    - host: a.test\n      owner: %s\n", text),
		     "t.yaml:6:14: owner is longer than 512 bytes");
}
END_TEST

int main(void)
{
	TCase *tc;
	Suite *s = policytest_suite("policy/yaml", "yaml", setup, &tc);

	tcase_add_test(tc, test_unknown_keys);
	tcase_add_test(tc, test_duplicate_keys);
	tcase_add_test(tc, test_missing_keys);
	tcase_add_test(tc, test_wrong_types);
	tcase_add_test(tc, test_yaml_syntax);
	tcase_add_test(tc, test_rule_text);
	tcase_add_test(tc, test_rule_text_limit);
	return unit_run(s);
}
