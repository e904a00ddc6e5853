/*
 * policy/host.c, a rule's host as a policy writes it: normalised as the
 * engine normalises the host an agent asks for, so two spellings of one
 * host are one rule (an A-label and its Unicode name), the IPv4 forms and
 * zones a rule may not use, wildcards only below a registrable domain (the
 * Public Suffix List's explicit entries), and every refusal with its exact
 * "name:line:col: message". The "host:port" and "ip[:port]" values it
 * reads are tested with the sections that hold them (daemon.c, resolver.c,
 * and profile.c's upstream).
 */
#include "../../../policy/host.c"

#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

START_TEST(test_rule_hosts)
{
	expect_error(HEAD "    - host: \"*\"\n", "t.yaml:5:13: host \"*\" is refused: name a host");
	expect_error(
	    HEAD "    - host: \"*.com\"\n",
	    "t.yaml:5:13: host \"*.com\" is refused: a wildcard must be below a registrable domain (\"*.example.com\", not \"*.com\")");
	expect_error(HEAD "    - host: \"*.com.\"\n", "t.yaml:5:13: host \"*.com.\" is refused");
	expect_error(HEAD "    - host: \"*.\"\n", "t.yaml:5:13: invalid host \"*.\": empty host");
	expect_error(
	    HEAD "    - host: \"*example.com\"\n",
	    "t.yaml:5:13: invalid host \"*example.com\": a wildcard is \"*.\" followed by a domain");
	expect_error(HEAD "    - host: \"*.*.example.com\"\n",
		     "t.yaml:5:13: invalid host \"*.*.example.com\": character outside");
	expect_error(HEAD "    - host: a.*.example.com\n",
		     "t.yaml:5:13: invalid host \"a.*.example.com\": character outside");
	expect_error(
	    HEAD "    - host: \"*.10.0.0.1\"\n",
	    "t.yaml:5:13: invalid host \"*.10.0.0.1\": a wildcard cannot cover IP addresses");
	expect_error(
	    HEAD "    - host: \"fe80::1%eth0\"\n",
	    "t.yaml:5:13: invalid host \"fe80::1%eth0\": IPv6 zone identifiers are refused");
	expect_error(HEAD "    - host: 1.2.3\n",
		     "t.yaml:5:13: invalid host \"1.2.3\": write the IPv4 address in dotted "
		     "decimal, as 1.2.0.3");
	expect_error(HEAD "    - host: \"2130706433\"\n",
		     "t.yaml:5:13: invalid host \"2130706433\": write the IPv4 address in "
		     "dotted decimal, as 127.0.0.1");
	expect_error(HEAD "    - host: 1.2.3.4.5\n",
		     "t.yaml:5:13: invalid host \"1.2.3.4.5\": the last label is numeric");
	expect_error(HEAD "    - host: \"\"\n", "t.yaml:5:13: invalid host \"\": empty host");
	expect_error(HEAD "    - host: \"a\\nb\"\n",
		     "t.yaml:5:13: invalid host \"a?b\": character");
	/* A name beyond ASCII is its A-label: the two spellings are one host. */
	expect_error(HEAD RULE("b\xc3\xbc"
			       "cher.example") RULE("xn--bcher-kva.example"),
		     "t.yaml:9:13: duplicate host \"xn--bcher-kva.example\"");
	/* Public suffixes (the list's explicit entries) take no wildcard; names below them do. */
	expect_error(HEAD RULE("\"*.co.uk\""),
		     "t.yaml:5:13: host \"*.co.uk\" is refused: co.uk is a public suffix");
	expect_error(HEAD RULE("\"*.github.io\""),
		     "t.yaml:5:13: host \"*.github.io\" is refused: github.io is a public suffix");
	/* ... and where a preset lists the exact hosts under one, the refusal points to it. */
	expect_error(HEAD RULE("\"*.githubusercontent.com\""),
		     "t.yaml:5:13: host \"*.githubusercontent.com\" is refused: "
		     "githubusercontent.com is a public suffix, where anyone may register names; "
		     "the github@1 preset lists the exact hosts under it that its clients use "
		     "(presets: [github@1])");
	/* A host a preset holds, named again by a rule of the profile: one of them must go. */
	expect_error(
	    HEAD RULE("registry.npmjs.org") "    presets: [npm@1]\n",
	    "t.yaml:9:15: duplicate host \"registry.npmjs.org\" in profile \"p\" (first at "
	    "line 5)");
	expect_ok(HEAD RULE("\"*.example.co.uk\"") RULE("\"*.corp.internal\""));
	expect_ok(HEAD RULE("\"*.bbc.co.uk\"") RULE("\"[2001:db8::1]\"") RULE("192.0.2.1")
		      RULE("\"*.example.com\"") RULE("example.com"));
	ck_assert_int_eq(decide(0, "a.bbc.co.uk").tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide(0, "a.co.uk").tier, TIER_DENY);
	ck_assert_int_eq(decide(0, "2001:db8:0::1").tier, TIER_PASSTHROUGH);
	ck_assert_int_eq(decide(0, "example.com").tier, TIER_PASSTHROUGH);
}
END_TEST

int main(void)
{
	TCase *tc;
	Suite *s = policytest_suite("policy/host", "host", setup, &tc);

	tcase_add_test(tc, test_rule_hosts);
	return unit_run(s);
}
