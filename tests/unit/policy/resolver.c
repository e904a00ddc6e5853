/*
 * policy/resolver.c, the `resolver:` section: servers (written back
 * canonically into the config), static hosts and what the static_lookup op
 * answers for them, and allow_private through the address_permitted op;
 * each list at its limit N and N+1, every refusal with its exact
 * "name:line:col: message".
 */
#include "../../../policy/resolver.c"

#include <arpa/inet.h>
#include <sys/socket.h>
#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

/* --- resolver ---------------------------------------------------------------------------------- */

START_TEST(test_resolver_servers)
{
	expect_ok(MINIMAL
		  "resolver:\n  servers: [192.0.2.53, \"192.0.2.54:5353\", \"2001:DB8::53\", "
		  "\"[2001:db8::54]:53\", \"[::1]\"]\n");
	ck_assert_str_eq(cfg.dns_servers,
			 "192.0.2.53,192.0.2.54:5353,2001:db8::53,[2001:db8::54]:53,::1");
	expect_error("version: 1\nresolver:\n  servers: []\n",
		     "t.yaml:3:12: servers must not be empty");
	expect_error("version: 1\nresolver:\n  servers: [dns.google]\n",
		     "t.yaml:3:13: invalid DNS server \"dns.google\": not an IPv4 or IPv6 address");
	expect_error(
	    "version: 1\nresolver:\n  servers: [\"[192.0.2.1]:53\"]\n",
	    "t.yaml:3:13: invalid DNS server \"[192.0.2.1]:53\": brackets are for IPv6 addresses");
	expect_error("version: 1\nresolver:\n  servers: [\"192.0.2.1:\"]\n",
		     "t.yaml:3:13: invalid DNS server \"192.0.2.1:\": the port must be 1..65535");
	expect_error("version: 1\nresolver:\n  servers: [\"[::1\"]\n",
		     "t.yaml:3:13: invalid DNS server \"[::1\": '[' without ']'");
	expect_error("version: 1\nresolver:\n  servers: [\"[::1]53\"]\n",
		     "t.yaml:3:13: invalid DNS server \"[::1]53\": expected ':' after ']'");
	/* 16 servers accepted, 17 refused. */
	expect_ok(textf(MINIMAL "resolver:\n  servers: %s]\n", flow_items("192.0.2.", 16)));
	expect_error(textf(MINIMAL "resolver:\n  servers: %s]\n", flow_items("192.0.2.", 17)),
		     "t.yaml:10:");
	ck_assert_msg(strstr(err, ": servers has more than 16 entries") != NULL, "%s", err);
}
END_TEST

static int lookup(const char *host, uint16_t port, struct sockaddr_storage *out, int cap)
{
	return policy_verdict_ops.static_lookup(pol, host, strlen(host), port, out, cap);
}

START_TEST(test_resolver_hosts)
{
	struct sockaddr_storage out[20];

	expect_ok(MINIMAL "resolver:\n  hosts:\n    Origin.Test.: [127.0.0.1, \"::1\"]\n"
			  "    other.test: [192.0.2.9]\n");
	ck_assert_int_eq(lookup("origin.test", 8443, out, 20), 2);
	ck_assert_int_eq(out[0].ss_family, AF_INET);
	ck_assert_uint_eq(ntohs(((struct sockaddr_in *)&out[0])->sin_port), 8443);
	ck_assert_uint_eq(ntohl(((struct sockaddr_in *)&out[0])->sin_addr.s_addr), 0x7f000001);
	ck_assert_int_eq(out[1].ss_family, AF_INET6);
	ck_assert_uint_eq(ntohs(((struct sockaddr_in6 *)&out[1])->sin6_port), 8443);
	ck_assert_int_eq(lookup("ORIGIN.test.", 1, out, 1), 1);
	ck_assert_int_eq(lookup("origin.test", 1, out, 0), 0);
	ck_assert_int_eq(lookup("other.test", 1, out, 20), 1);
	ck_assert_int_eq(lookup("nope.test", 1, out, 20), 0);
	ck_assert_int_eq(lookup("127.0.0.1", 1, out, 20), 0);
	ck_assert_int_eq(lookup("", 1, out, 20), 0);
	expect_error(
	    "version: 1\nresolver:\n  hosts:\n    a.test: [127.0.0.1]\n    A.TEST: [::2]\n",
	    "t.yaml:5:5: duplicate host \"a.test\" in resolver.hosts");
	expect_error("version: 1\nresolver:\n  hosts:\n    \"*.a.test\": [127.0.0.1]\n",
		     "t.yaml:4:5: invalid host \"*.a.test\" in resolver.hosts: character outside");
	expect_error(
	    "version: 1\nresolver:\n  hosts:\n    127.0.0.1: [127.0.0.1]\n",
	    "t.yaml:4:5: invalid host \"127.0.0.1\" in resolver.hosts: an IP literal needs no static entry");
	expect_error(
	    "version: 1\nresolver:\n  hosts:\n    a.test: [localhost]\n",
	    "t.yaml:4:14: invalid address \"localhost\" for a.test: expected an IPv4 or IPv6 literal");
	expect_error("version: 1\nresolver:\n  hosts:\n    a.test: [\"fe80::1%eth0\"]\n",
		     "t.yaml:4:14: invalid address \"fe80::1%eth0\" for a.test");
	expect_error("version: 1\nresolver:\n  hosts:\n    a.test: []\n",
		     "t.yaml:4:13: a.test must not be empty");
	expect_error("version: 1\nresolver:\n  hosts:\n    a.test: 127.0.0.1\n",
		     "t.yaml:4:13: a.test must be a sequence");
	expect_error("version: 1\nresolver:\n  hosts: {}\n",
		     "t.yaml:3:10: hosts must not be empty");
	/* 16 addresses per name accepted, 17 refused. */
	expect_ok(
	    textf(MINIMAL "resolver:\n  hosts:\n    a.test: %s]\n", flow_items("10.0.0.", 16)));
	ck_assert_int_eq(lookup("a.test", 1, out, 20), 16);
	expect_error(
	    textf(MINIMAL "resolver:\n  hosts:\n    a.test: %s]\n", flow_items("10.0.0.", 17)),
	    "t.yaml:11:");
	ck_assert_msg(strstr(err, ": a.test has more than 16 entries") != NULL, "%s", err);
}
END_TEST

static bool permitted(const char *text)
{
	struct sockaddr_storage ss;

	ck_assert_int_eq(addr_parse_ip(text, strlen(text), &ss), 0);
	return policy_verdict_ops.address_permitted(pol, (const struct sockaddr *)&ss);
}

START_TEST(test_resolver_allow_private)
{
	expect_ok(MINIMAL);
	ck_assert(permitted("8.8.8.8"));
	ck_assert(!permitted("127.0.0.1"));
	ck_assert(!permitted("10.0.0.7"));
	expect_ok(MINIMAL "resolver:\n  allow_private: [127.0.0.0/8, \"::1/128\", 10.0.0.7]\n");
	ck_assert(permitted("127.0.0.1"));
	ck_assert(permitted("::1"));
	ck_assert(permitted("10.0.0.7"));
	ck_assert(!permitted("10.0.0.8"));
	ck_assert(!permitted("::ffff:127.0.0.1"));
	ck_assert(permitted("8.8.8.8"));
	expect_ok(MINIMAL "resolver:\n  allow_private: []\n");
	expect_error(
	    "version: 1\nresolver:\n  allow_private: [10.0.0.1/8]\n",
	    "t.yaml:3:19: invalid CIDR \"10.0.0.1/8\": address has bits set beyond the prefix length");
	expect_error("version: 1\nresolver:\n  allow_private: [10.0.0.0/33]\n",
		     "t.yaml:3:19: invalid CIDR \"10.0.0.0/33\": prefix length must be 0..32");
	expect_error("version: 1\nresolver:\n  allow_private: [private]\n",
		     "t.yaml:3:19: invalid CIDR \"private\": not an IPv4 or IPv6 address");
	expect_error(
	    "version: 1\nresolver:\n  allow_private:\n    - 10.0.0.0/8\n    - 224.0.0.0/4\n",
	    "t.yaml:5:7: allow_private entry \"224.0.0.0/4\" can never match");
	expect_error("version: 1\nresolver:\n  allow_private: [\"::/128\"]\n",
		     "t.yaml:3:19: allow_private entry \"::/128\" can never match");
	/* 256 networks accepted, 257 refused. */
	struct gen g;
	gen_open(&g);
	fprintf(g.f, MINIMAL "resolver:\n  allow_private:\n");
	for (int i = 0; i < 256; i++)
		fprintf(g.f, "    - 10.%d.0.0/16\n", i);
	fflush(g.f);
	ck_assert_int_eq(load(g.buf), 0);
	fprintf(g.f, "    - 11.0.0.0/16\n");
	expect_error(gen_close(&g), "t.yaml:267:7: allow_private has more than 256 entries");
	pool_free(g.buf);
}
END_TEST

/* --- resolver.hosts at its limit ------------------------------------------------------------ */

START_TEST(test_static_hosts_limit)
{
	struct gen g;

	gen_open(&g);
	fprintf(g.f, MINIMAL "resolver:\n  hosts:\n");
	for (uint32_t i = 0; i < POLICY_STATIC_HOSTS_MAX; i++)
		fprintf(g.f, "    h%u.test: [10.0.0.1]\n", i);
	fflush(g.f);
	ck_assert_int_eq(load(g.buf), 0);
	struct sockaddr_storage out[1];
	ck_assert_int_eq(lookup("h65535.test", 1, out, 1), 1);
	fprintf(g.f, "    x.test: [10.0.0.1]\n");
	expect_error(gen_close(&g),
		     textf("t.yaml:%u:5: hosts has more than %u entries",
			   10 + POLICY_STATIC_HOSTS_MAX + 1, POLICY_STATIC_HOSTS_MAX));
	pool_free(g.buf);
}
END_TEST

int main(void)
{
	TCase *tc;
	Suite *s = policytest_suite("policy/resolver", "resolver", setup, &tc);

	tcase_add_test(tc, test_resolver_servers);
	tcase_add_test(tc, test_resolver_hosts);
	tcase_add_test(tc, test_resolver_allow_private);
	tcase_add_test(tc, test_static_hosts_limit);
	return unit_run(s);
}
