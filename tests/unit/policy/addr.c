/*
 * policy/addr.c: every address class with both edges of each range, CIDR
 * parsing (accepted forms and every refusal), containment and the
 * allow_private rule (public always, multicast/unspecified never).
 */
#include "../../../policy/addr.c"

#include <check.h>
#include <stdlib.h>
#include "tests/unit/unit.h"

static struct sockaddr_storage ip(const char *text)
{
	struct sockaddr_storage ss;

	ck_assert_msg(addr_parse_ip(text, strlen(text), &ss) == 0, "parse %s", text);
	return ss;
}

static const char *class_of(const char *text)
{
	struct sockaddr_storage ss = ip(text);

	return addr_class_name(addr_classify((const struct sockaddr *)&ss));
}

struct class_case {
	const char *ip;
	const char *cls;
};

static const struct class_case class_cases[] = {
	/* IPv4 */
	{ "0.0.0.0", "unspecified" },
	{ "0.255.255.255", "unspecified" },
	{ "1.0.0.0", "public" },
	{ "8.8.8.8", "public" },
	{ "9.255.255.255", "public" },
	{ "10.0.0.0", "private" },
	{ "10.255.255.255", "private" },
	{ "11.0.0.0", "public" },
	{ "100.63.255.255", "public" },
	{ "100.64.0.0", "private" },
	{ "100.127.255.255", "private" },
	{ "100.128.0.0", "public" },
	{ "126.255.255.255", "public" },
	{ "127.0.0.0", "loopback" },
	{ "127.0.0.1", "loopback" },
	{ "127.255.255.255", "loopback" },
	{ "128.0.0.0", "public" },
	{ "169.253.255.255", "public" },
	{ "169.254.0.0", "link_local" },
	{ "169.254.169.253", "link_local" },
	{ "169.254.169.254", "metadata" },
	{ "169.254.169.255", "link_local" },
	{ "169.254.255.255", "link_local" },
	{ "169.255.0.0", "public" },
	{ "172.15.255.255", "public" },
	{ "172.16.0.0", "private" },
	{ "172.31.255.255", "private" },
	{ "172.32.0.0", "public" },
	{ "191.255.255.255", "public" },
	{ "192.0.0.0", "reserved" },
	{ "192.0.0.255", "reserved" },
	{ "192.0.1.0", "public" },
	{ "192.0.2.0", "reserved" },
	{ "192.0.2.255", "reserved" },
	{ "192.0.3.0", "public" },
	{ "192.88.98.255", "public" },
	{ "192.88.99.0", "translation" },
	{ "192.88.99.255", "translation" },
	{ "192.88.100.0", "public" },
	{ "192.167.255.255", "public" },
	{ "192.168.0.0", "private" },
	{ "192.168.255.255", "private" },
	{ "192.169.0.0", "public" },
	{ "198.17.255.255", "public" },
	{ "198.18.0.0", "reserved" },
	{ "198.19.255.255", "reserved" },
	{ "198.20.0.0", "public" },
	{ "198.51.99.255", "public" },
	{ "198.51.100.0", "reserved" },
	{ "198.51.100.255", "reserved" },
	{ "198.51.101.0", "public" },
	{ "203.0.112.255", "public" },
	{ "203.0.113.0", "reserved" },
	{ "203.0.113.255", "reserved" },
	{ "203.0.114.0", "public" },
	{ "223.255.255.255", "public" },
	{ "224.0.0.0", "multicast" },
	{ "239.255.255.255", "multicast" },
	{ "240.0.0.0", "reserved" },
	{ "255.255.255.254", "reserved" },
	{ "255.255.255.255", "reserved" },
	/* IPv6 */
	{ "::", "unspecified" },
	{ "::1", "loopback" },
	{ "::2", "mapped" },
	{ "::1.2.3.4", "mapped" },
	{ "::ffff:ffff:ffff", "mapped" },
	{ "::ffff:0:0", "mapped" },
	{ "::ffff:127.0.0.1", "mapped" },
	{ "::ffff:8.8.8.8", "mapped" },
	{ "::fffe:ffff:ffff", "reserved" },
	{ "::ffff:ffff", "mapped" },
	{ "::1:0:0:0", "reserved" },
	{ "::ffff:0:0:0", "reserved" },
	{ "64:ff9b::", "nat64" },
	{ "64:ff9b::8.8.8.8", "nat64" },
	{ "64:ff9b::ffff:ffff", "nat64" },
	{ "64:ff9b::1:0:0", "reserved" },
	{ "64:ff9b:1::", "nat64" },
	{ "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "nat64" },
	{ "64:ff9b:2::", "reserved" },
	{ "100::", "reserved" },
	{ "100::ffff:ffff:ffff:ffff", "reserved" },
	{ "100:0:0:1::", "reserved" },
	{ "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "2000::", "public" },
	{ "2001::", "translation" },
	{ "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "translation" },
	{ "2001:1::", "public" },
	{ "2001:2::", "reserved" },
	{ "2001:2:0:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "2001:2:1::", "public" },
	{ "2001:f:ffff:ffff:ffff:ffff:ffff:ffff", "public" },
	{ "2001:10::", "reserved" },
	{ "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "2001:20::", "public" },
	{ "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "public" },
	{ "2001:db8::", "reserved" },
	{ "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "2001:db9::", "public" },
	{ "2001:4860:4860::8888", "public" },
	{ "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public" },
	{ "2002::", "translation" },
	{ "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "translation" },
	{ "2003::", "public" },
	{ "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public" },
	{ "3fff::", "reserved" },
	{ "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "3fff:1000::", "public" },
	{ "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public" },
	{ "4000::", "reserved" },
	{ "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "fc00::", "ula" },
	{ "fd00:ec2::253", "ula" },
	{ "fd00:ec2::254", "metadata" },
	{ "fd00:ec2::255", "ula" },
	{ "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ula" },
	{ "fe00::", "reserved" },
	{ "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "fe80::", "link_local" },
	{ "fe80::1", "link_local" },
	{ "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link_local" },
	{ "fec0::", "reserved" },
	{ "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "reserved" },
	{ "ff00::", "multicast" },
	{ "ff02::1", "multicast" },
	{ "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast" },
};

START_TEST(test_classify_table)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(class_cases); i++) {
		const char *got = class_of(class_cases[i].ip);

		ck_assert_msg(strcmp(got, class_cases[i].cls) == 0, "%s: got %s, want %s",
			      class_cases[i].ip, got, class_cases[i].cls);
	}
}
END_TEST

START_TEST(test_classify_every_class_named)
{
	bool seen[ADDR__COUNT] = { false };

	for (size_t i = 0; i < AN_ARRAY_LEN(class_cases); i++) {
		struct sockaddr_storage ss = ip(class_cases[i].ip);

		seen[addr_classify((const struct sockaddr *)&ss)] = true;
	}
	for (int c = 0; c < ADDR__COUNT; c++) {
		ck_assert_msg(seen[c], "class %s has no case", addr_class_name((enum addr_class)c));
		ck_assert_ptr_nonnull(addr_class_name((enum addr_class)c));
	}
}
END_TEST

START_TEST(test_classify_non_ip_family)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	ss.ss_family = AF_UNIX;
	ck_assert_int_eq(addr_classify((const struct sockaddr *)&ss), ADDR_RESERVED);
	ck_assert(!addr_permitted(NULL, 0, (const struct sockaddr *)&ss));
}
END_TEST

START_TEST(test_parse_ip)
{
	static const char *const bad[] = {
		"",           "1.2.3",        "1.2.3.4.5",  "256.0.0.1", "01.2.3.4",
		"1.2.3.4 ",   "fe80::1%eth0", "[::1]",      ":::",       "1::2::3",
		"0x7f.0.0.1", "example.com",  "1.2.3.4/32",
	};
	struct sockaddr_storage ss;

	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++)
		ck_assert_msg(addr_parse_ip(bad[i], strlen(bad[i]), &ss) == -EINVAL, "%s", bad[i]);
	ck_assert_int_eq(addr_parse_ip("1.2.3.4", 7, &ss), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET);
	ck_assert_int_eq(addr_parse_ip("::1", 3, &ss), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET6);
	/* An embedded NUL never truncates the text to something valid. */
	ck_assert_int_eq(addr_parse_ip("1.2.3.4\0x", 9, &ss), -EINVAL);
	/* Length limit: 45 characters is the longest IPv6 text, 46 is refused. */
	const char *longest = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
	ck_assert_int_eq(strlen(longest), 45);
	ck_assert_int_eq(addr_parse_ip(longest, 45, &ss), 0);
	ck_assert_int_eq(addr_parse_ip("0ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", 46, &ss),
			 -EINVAL);
}
END_TEST

static int cidr(const char *text, struct addr_cidr *c, const char **why)
{
	return addr_cidr_parse(text, strlen(text), c, why);
}

START_TEST(test_cidr_parse_ok)
{
	struct addr_cidr c;
	const char *why = NULL;

	ck_assert_int_eq(cidr("10.0.0.0/8", &c, &why), 0);
	ck_assert_int_eq(c.family, AF_INET);
	ck_assert_int_eq(c.prefix_len, 8);
	ck_assert_int_eq(cidr("0.0.0.0/0", &c, &why), 0);
	ck_assert_int_eq(c.prefix_len, 0);
	ck_assert_int_eq(cidr("192.0.2.7/32", &c, &why), 0);
	ck_assert_int_eq(c.prefix_len, 32);
	ck_assert_int_eq(cidr("192.0.2.7", &c, &why), 0);
	ck_assert_int_eq(c.prefix_len, 32);
	ck_assert_int_eq(cidr("::1/128", &c, &why), 0);
	ck_assert_int_eq(c.family, AF_INET6);
	ck_assert_int_eq(c.prefix_len, 128);
	ck_assert_int_eq(cidr("::/0", &c, &why), 0);
	ck_assert_int_eq(cidr("fd00::/8", &c, &why), 0);
	ck_assert_int_eq(cidr("2001:db8::", &c, &why), 0);
	ck_assert_int_eq(c.prefix_len, 128);
	ck_assert_int_eq(cidr("::ffff:127.0.0.0/104", &c, &why), 0);
}
END_TEST

struct cidr_bad {
	const char *text;
	const char *why;
};

START_TEST(test_cidr_parse_errors)
{
	static const struct cidr_bad bad[] = {
		{ "", "not an IPv4 or IPv6 address" },
		{ "/8", "not an IPv4 or IPv6 address" },
		{ "10.0.0/8", "not an IPv4 or IPv6 address" },
		{ "example.com/8", "not an IPv4 or IPv6 address" },
		{ "10.0.0.0/", "prefix length must be 0..32" },
		{ "10.0.0.0/33", "prefix length must be 0..32" },
		{ "10.0.0.0/-1", "prefix length must be 0..32" },
		{ "10.0.0.0/+8", "prefix length must be 0..32" },
		{ "10.0.0.0/08", "prefix length must be 0..32" },
		{ "10.0.0.0/8/8", "prefix length must be 0..32" },
		{ "10.0.0.0/1000", "prefix length must be 0..32" },
		{ "10.0.0.0/8 ", "prefix length must be 0..32" },
		{ "::/129", "prefix length must be 0..128" },
		{ "10.0.0.1/8", "address has bits set beyond the prefix length" },
		{ "10.128.0.0/8", "address has bits set beyond the prefix length" },
		{ "10.0.0.1/31", "address has bits set beyond the prefix length" },
		{ "::1/127", "address has bits set beyond the prefix length" },
		{ "fe80::1%eth0/64", "IPv6 zone identifiers are not allowed" },
	};
	struct addr_cidr c;

	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *why = NULL;

		ck_assert_msg(cidr(bad[i].text, &c, &why) == -EINVAL, "%s accepted", bad[i].text);
		ck_assert_msg(why != NULL && strcmp(why, bad[i].why) == 0, "%s: why %s, want %s",
			      bad[i].text, why, bad[i].why);
	}
	/* Edges of the prefix bounds: 32 and 128 accepted, 33 and 129 refused above. */
	const char *why = NULL;
	ck_assert_int_eq(cidr("10.0.0.1/32", &c, &why), 0);
	ck_assert_int_eq(cidr("::1/128", &c, &why), 0);
}
END_TEST

static bool contains(const char *net, const char *addr)
{
	struct addr_cidr c;
	const char *why = NULL;
	struct sockaddr_storage ss = ip(addr);

	ck_assert_msg(cidr(net, &c, &why) == 0, "%s: %s", net, why);
	return addr_cidr_contains(&c, (const struct sockaddr *)&ss);
}

START_TEST(test_cidr_contains)
{
	ck_assert(contains("10.0.0.0/8", "10.0.0.0"));
	ck_assert(contains("10.0.0.0/8", "10.255.255.255"));
	ck_assert(!contains("10.0.0.0/8", "11.0.0.0"));
	ck_assert(!contains("10.0.0.0/8", "9.255.255.255"));
	ck_assert(contains("172.16.0.0/12", "172.31.0.1"));
	ck_assert(!contains("172.16.0.0/12", "172.32.0.1"));
	ck_assert(contains("0.0.0.0/0", "203.0.113.9"));
	ck_assert(contains("192.0.2.7", "192.0.2.7"));
	ck_assert(!contains("192.0.2.7", "192.0.2.6"));
	ck_assert(contains("::1/128", "::1"));
	ck_assert(!contains("::1/128", "::2"));
	ck_assert(contains("fe80::/10", "febf::1"));
	ck_assert(!contains("fe80::/10", "fec0::1"));
	ck_assert(contains("::/0", "2001:db8::1"));
	/* Families never mix: ::/0 does not contain IPv4, nor 0.0.0.0/0 mapped IPv6. */
	ck_assert(!contains("::/0", "127.0.0.1"));
	ck_assert(!contains("0.0.0.0/0", "::ffff:127.0.0.1"));
	ck_assert(contains("::ffff:127.0.0.0/104", "::ffff:127.0.0.1"));
}
END_TEST

static bool permitted(const char *const *nets, uint32_t n, const char *addr)
{
	struct addr_cidr list[8];
	const char *why = NULL;
	struct sockaddr_storage ss = ip(addr);

	ck_assert_uint_le(n, AN_ARRAY_LEN(list));
	for (uint32_t i = 0; i < n; i++)
		ck_assert_int_eq(cidr(nets[i], &list[i], &why), 0);
	return addr_permitted(list, n, (const struct sockaddr *)&ss);
}

START_TEST(test_permitted)
{
	static const char *const none[] = { NULL };
	static const char *const lo[] = { "127.0.0.0/8", "::1/128" };
	static const char *const all[] = { "0.0.0.0/0", "::/0" };

	ck_assert(permitted(none, 0, "8.8.8.8"));
	ck_assert(permitted(none, 0, "2001:4860:4860::8888"));
	static const char *const refused[] = {
		"127.0.0.1",        "::1",
		"10.1.2.3",         "169.254.169.254",
		"fd00:ec2::254",    "fc00::1",
		"fe80::1",          "::ffff:8.8.8.8",
		"64:ff9b::8.8.8.8", "2002:808:808::1",
		"2001::1",          "192.0.2.1",
		"0.0.0.0",          "::",
		"224.0.0.1",        "ff02::1",
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(refused); i++)
		ck_assert_msg(!permitted(none, 0, refused[i]), "%s permitted", refused[i]);
	ck_assert(permitted(lo, 2, "127.0.0.1"));
	ck_assert(permitted(lo, 2, "127.255.255.254"));
	ck_assert(permitted(lo, 2, "::1"));
	ck_assert(!permitted(lo, 2, "10.0.0.1"));
	/* The mapped form of an allowed IPv4 address is not allowed by the IPv4 entry. */
	ck_assert(!permitted(lo, 2, "::ffff:127.0.0.1"));
	/* Even "everything" never lets multicast or unspecified through. */
	ck_assert(permitted(all, 2, "10.0.0.1"));
	ck_assert(permitted(all, 2, "169.254.169.254"));
	ck_assert(!permitted(all, 2, "0.0.0.0"));
	ck_assert(!permitted(all, 2, "0.1.2.3"));
	ck_assert(!permitted(all, 2, "::"));
	ck_assert(!permitted(all, 2, "224.0.0.1"));
	ck_assert(!permitted(all, 2, "ff02::1"));
}
END_TEST

START_TEST(test_never_permitted)
{
	static const char *const never[] = { "224.0.0.0/4", "239.0.0.0/8", "0.0.0.0/8",
					     "0.0.0.0/32",  "ff00::/8",    "ff02::1",
					     "::/128" };
	static const char *const useful[] = { "224.0.0.0/3", "0.0.0.0/7", "0.0.0.0/0", "fe00::/7",
					      "::/127",      "::/0",      "10.0.0.0/8" };
	struct addr_cidr c;
	const char *why = NULL;

	for (size_t i = 0; i < AN_ARRAY_LEN(never); i++) {
		ck_assert_int_eq(cidr(never[i], &c, &why), 0);
		ck_assert_msg(addr_cidr_never_permitted(&c), "%s", never[i]);
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(useful); i++) {
		ck_assert_int_eq(cidr(useful[i], &c, &why), 0);
		ck_assert_msg(!addr_cidr_never_permitted(&c), "%s", useful[i]);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy/addr");
	TCase *tc = tcase_create("addr");

	tcase_add_test(tc, test_classify_table);
	tcase_add_test(tc, test_classify_every_class_named);
	tcase_add_test(tc, test_classify_non_ip_family);
	tcase_add_test(tc, test_parse_ip);
	tcase_add_test(tc, test_cidr_parse_ok);
	tcase_add_test(tc, test_cidr_parse_errors);
	tcase_add_test(tc, test_cidr_contains);
	tcase_add_test(tc, test_permitted);
	tcase_add_test(tc, test_never_permitted);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
