/*
 * policy/hostname.c: normalisation (every refusal, each limit at N and N+1,
 * input ending right before a PROT_NONE page, the word-at-a-time path against
 * the byte-wise one on random hosts).
 */
#include "../../../policy/hostname.c"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/unit.h"

static struct unit_guard guard;

/* Copies <len> bytes so that the last one is the last readable byte. */
static const char *guarded(const char *s, size_t len)
{
	return unit_guard_place(&guard, s, len);
}

/* --- normalisation -------------------------------------------------------------- */

static int norm(const char *host, char *out, enum acl_kind *kind, const char **why)
{
	return host_normalise(guarded(host, strlen(host)), strlen(host), out, HOST_NORM_BYTES, kind,
			      why);
}

struct norm_case {
	const char *in;
	const char *out; /* NULL: refused */
	enum acl_kind kind;
	const char *why;
};

START_TEST(test_normalise_table)
{
	static const struct norm_case cases[] = {
		{ "example.com", "example.com", ACL_KIND_NAME, NULL },
		{ "EXAMPLE.Com", "example.com", ACL_KIND_NAME, NULL },
		{ "example.com.", "example.com", ACL_KIND_NAME, NULL },
		{ "localhost", "localhost", ACL_KIND_NAME, NULL },
		{ "a_b-c.example", "a_b-c.example", ACL_KIND_NAME, NULL },
		{ "123.example", "123.example", ACL_KIND_NAME, NULL },
		{ "xn--bcher-kva.example", "xn--bcher-kva.example", ACL_KIND_NAME, NULL },
		{ "192.0.2.1", "192.0.2.1", ACL_KIND_IP, NULL },
		{ "192.0.2.1.", "192.0.2.1", ACL_KIND_IP, NULL },
		{ "2001:DB8:0:0::1", "2001:db8::1", ACL_KIND_IP, NULL },
		{ "[2001:db8::1]", "2001:db8::1", ACL_KIND_IP, NULL },
		{ "::FFFF:192.0.2.1", "192.0.2.1", ACL_KIND_IP, NULL },
		{ "[::ffff:127.0.0.1]", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "::ffff:7f00:1", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "0:0:0:0:0:0:0:1", "::1", ACL_KIND_IP, NULL },
		{ "", NULL, ACL_KIND_IP, "empty host" },
		{ ".", NULL, ACL_KIND_NAME, "empty host" },
		{ "example.com..", NULL, ACL_KIND_NAME, "empty label" },
		{ ".example.com", NULL, ACL_KIND_NAME, "empty label" },
		{ "a..b", NULL, ACL_KIND_NAME, "empty label" },
		{ "a b.example", NULL, ACL_KIND_NAME,
		  "character outside [A-Za-z0-9-_.] (use the xn-- form of IDNs)" },
		{ "a*.example", NULL, ACL_KIND_NAME,
		  "character outside [A-Za-z0-9-_.] (use the xn-- form of IDNs)" },
		{ "b\xc3\xbc"
		  "cher.example",
		  "xn--bcher-kva.example", ACL_KIND_NAME, NULL },
		{ "B\xc3\x9c"
		  "CHER.example.",
		  "xn--bcher-kva.example", ACL_KIND_NAME, NULL },
		{ "\xff\xfe.example", NULL, ACL_KIND_NAME,
		  "not a valid internationalised domain name (IDNA2008)" },
		{ "a/b", NULL, ACL_KIND_NAME,
		  "character outside [A-Za-z0-9-_.] (use the xn-- form of IDNs)" },
		{ "1.2.3", "1.2.0.3", ACL_KIND_IP, NULL },
		{ "2130706433", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "0x7f.1", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "0X7F.0.0.1", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "127.1", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "017700000001", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "0x7f000001.", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "127.0.0.0x1", "127.0.0.1", ACL_KIND_IP, NULL },
		{ "01.2.3.4", "1.2.3.4", ACL_KIND_IP, NULL },
		{ "0", "0.0.0.0", ACL_KIND_IP, NULL },
		{ "4294967295", "255.255.255.255", ACL_KIND_IP, NULL },
		{ "4294967296", NULL, ACL_KIND_NAME,
		  "the last label is numeric but the host is not a valid IPv4 address" },
		{ "1.2.3.4.5", NULL, ACL_KIND_NAME,
		  "the last label is numeric but the host is not a valid IPv4 address" },
		{ "256.1.1.1", NULL, ACL_KIND_NAME,
		  "the last label is numeric but the host is not a valid IPv4 address" },
		{ "1.2.65536", NULL, ACL_KIND_NAME,
		  "the last label is numeric but the host is not a valid IPv4 address" },
		{ "09.1.1.1", NULL, ACL_KIND_NAME,
		  "the last label is numeric but the host is not a valid IPv4 address" },
		{ "example.1", NULL, ACL_KIND_NAME,
		  "the last label is numeric but the host is not a valid IPv4 address" },
		{ "example.0x", NULL, ACL_KIND_NAME,
		  "the last label is numeric but the host is not a valid IPv4 address" },
		{ "fe80::1%eth0", NULL, ACL_KIND_IP, "IPv6 zone identifiers are refused" },
		{ "[fe80::1%25eth0]", NULL, ACL_KIND_IP, "IPv6 zone identifiers are refused" },
		{ "[192.0.2.1]", NULL, ACL_KIND_IP, "invalid IPv6 address" },
		{ "[::1", NULL, ACL_KIND_IP, "invalid IPv6 address" },
		{ "1::2::3", NULL, ACL_KIND_IP, "invalid IPv6 address" },
		{ "example.com:443", NULL, ACL_KIND_IP, "invalid IPv6 address" },
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		char out[HOST_NORM_BYTES];
		enum acl_kind kind = ACL_KIND_WILDCARD;
		const char *why = NULL;
		int n = norm(cases[i].in, out, &kind, &why);

		if (cases[i].out != NULL) {
			ck_assert_msg(n >= 0, "%s refused: %s", cases[i].in, why);
			ck_assert_str_eq(out, cases[i].out);
			ck_assert_int_eq(n, strlen(cases[i].out));
		} else {
			ck_assert_msg(n == -EINVAL, "%s accepted as %s", cases[i].in, out);
			ck_assert_msg(strcmp(why, cases[i].why) == 0, "%s: why \"%s\"", cases[i].in,
				      why);
		}
		ck_assert_msg(kind == cases[i].kind, "%s: kind %d", cases[i].in, (int)kind);
	}
}
END_TEST

START_TEST(test_normalise_nul_byte)
{
	char out[HOST_NORM_BYTES];
	enum acl_kind kind;

	ck_assert_int_eq(
	    host_normalise(guarded("a\0b.example", 11), 11, out, sizeof(out), &kind, NULL),
	    -EINVAL);
	ck_assert_int_eq(host_normalise(guarded("1.2.3.4\0", 8), 8, out, sizeof(out), &kind, NULL),
			 -EINVAL);
	ck_assert_int_eq(host_normalise(guarded("::1\0", 4), 4, out, sizeof(out), &kind, NULL),
			 -EINVAL);
}
END_TEST

START_TEST(test_normalise_limits)
{
	char name[300];
	char out[HOST_NORM_BYTES];
	enum acl_kind kind;
	const char *why = NULL;

	/* Name length: 253 accepted, 254 refused; a trailing dot does not count. */
	unit_host_name(name, 253, 63);
	ck_assert_int_eq(norm(name, out, &kind, &why), 253);
	memcpy(name + 253, ".", 2);
	ck_assert_int_eq(norm(name, out, &kind, &why), 253);
	unit_host_name(name, 254, 63);
	ck_assert_int_eq(norm(name, out, &kind, &why), -EINVAL);
	ck_assert_str_eq(why, "host longer than 253 bytes");
	memcpy(name + 254, ".", 2);
	ck_assert_int_eq(norm(name, out, &kind, &why), -EINVAL);
	ck_assert_str_eq(why, "host longer than 253 bytes");
	/* Input far beyond the limit is refused without being copied. */
	unit_host_name(name, 299, 63);
	ck_assert_int_eq(norm(name, out, &kind, &why), -EINVAL);
	ck_assert_str_eq(why, "host longer than 253 bytes");
	/* Label length: 63 accepted, 64 refused. */
	unit_host_name(name, 63, 63);
	memcpy(name + 63, ".example", 9);
	ck_assert_int_eq(norm(name, out, &kind, &why), 71);
	unit_host_name(name, 64, 64);
	memcpy(name + 64, ".example", 9);
	ck_assert_int_eq(norm(name, out, &kind, &why), -EINVAL);
	ck_assert_str_eq(why, "label longer than 63 bytes");
	memcpy(name, "example.", 8);
	unit_host_name(name + 8, 64, 64);
	ck_assert_int_eq(norm(name, out, &kind, &why), -EINVAL);
	ck_assert_str_eq(why, "label longer than 63 bytes");
}
END_TEST

/* ---- The word-at-a-time normaliser against the byte-wise one. ---- */

/* A host-like string: labels of 0 to 5 bytes (or up to 71), mostly name bytes, some others. */
static size_t random_host(uint64_t *s, char *out, size_t cap)
{
	static const char name_bytes[] = "abcxyzABCXYZ0189-_";
	static const char odd_bytes[] = "@[`{/:.\x80\xff\x00\x7f ";
	bool long_labels = unit_rng_next(s) % 8 == 0;
	uint32_t labels = 1 + (uint32_t)(unit_rng_next(s) % (long_labels ? 5 : 8));
	size_t len = 0;

	for (uint32_t l = 0; l < labels && len + 80 < cap; l++) {
		if (l > 0)
			out[len++] = '.';
		size_t n = (size_t)(unit_rng_next(s) % (long_labels ? 72 : 6));
		for (size_t i = 0; i < n; i++) {
			uint64_t r = unit_rng_next(s);
			out[len++] = r % 16 == 0 ? odd_bytes[(r >> 8) % (sizeof(odd_bytes) - 1)]
						 : name_bytes[(r >> 8) % (sizeof(name_bytes) - 1)];
		}
	}
	for (uint64_t r = unit_rng_next(s); r % 4 == 0 && len < cap; r /= 4)
		out[len++] = '.';
	return len;
}

START_TEST(test_normalise_fast_matches_full)
{
	enum { CASES = 300000 };
	char in[300], fast[HOST_NORM_BYTES], full[HOST_NORM_BYTES];
	uint64_t s = 0x1234567;
	uint32_t taken = 0, names = 0;

	for (uint32_t c = 0; c < CASES; c++) {
		size_t len = random_host(&s, in, sizeof(in));
		uint64_t dots[HOST_DOT_WORDS], want_dots[HOST_DOT_WORDS];
		enum acl_kind kind = ACL_KIND_WILDCARD;
		const char *why = NULL;
		int f = normalise_fast(guarded(in, len), len, fast, dots);
		int g = normalise_full(in, len, full, sizeof(full), &kind, &why);
		if (g >= 0 && kind == ACL_KIND_NAME)
			names++;
		if (f < 0) {
			/* What it leaves of plain names: last labels starting with a digit, IDNs. */
			if (g >= 0 && kind == ACL_KIND_NAME) {
				bool ascii = true;
				for (size_t i = 0; i < len; i++)
					ascii = ascii && (unsigned char)in[i] < 0x80;
				const char *last = strrchr(full, '.');
				last = last != NULL ? last + 1 : full;
				ck_assert_msg(!ascii || (*last >= '0' && *last <= '9'),
					      "fast path left \"%s\"", full);
			}
			continue;
		}
		taken++;
		ck_assert_msg(g == f, "%.*s: fast %d, full %d (%s)", (int)len, in, f, g, why);
		ck_assert_int_eq(kind, ACL_KIND_NAME);
		ck_assert_str_eq(fast, full);
		host_name_dots(full, (size_t)g, want_dots);
		for (size_t w = 0; w < HOST_DOT_WORDS; w++)
			ck_assert_uint_eq(dots[w], want_dots[w]);
	}
	/* Both paths must be exercised, and the fast one must take most names. */
	printf("acl: fast path took %u of %u cases, %u names\n", taken, (uint32_t)CASES, names);
	ck_assert_uint_gt(taken, CASES / 20);
	ck_assert_uint_lt(taken, CASES - CASES / 20);
	ck_assert_uint_gt(taken, names / 2);
}
END_TEST

START_TEST(test_normalise_fast_limits)
{
	char name[300], out[HOST_NORM_BYTES];
	uint64_t dots[HOST_DOT_WORDS];

	/* 253 bytes taken, with or without a trailing dot; 254 left to the full path. */
	unit_host_name(name, 253, 63);
	ck_assert_int_eq(normalise_fast(guarded(name, 253), 253, out, dots), 253);
	ck_assert_str_eq(out, name);
	memcpy(name + 253, ".", 2);
	ck_assert_int_eq(normalise_fast(guarded(name, 254), 254, out, dots), 253);
	unit_host_name(name, 254, 63);
	ck_assert_int_eq(normalise_fast(guarded(name, 254), 254, out, dots), -1);
	/* Labels of 63 taken, 64 left, first, middle and last, in names past 63 bytes. */
	unit_host_name(name, 63, 63);
	memcpy(name + 63, ".example", 9);
	ck_assert_int_eq(normalise_fast(guarded(name, 71), 71, out, dots), 71);
	unit_host_name(name, 64, 64);
	memcpy(name + 64, ".example", 9);
	ck_assert_int_eq(normalise_fast(guarded(name, 72), 72, out, dots), -1);
	memcpy(name, "a.", 2);
	unit_host_name(name + 2, 63, 63);
	memcpy(name + 65, ".b", 3);
	ck_assert_int_eq(normalise_fast(guarded(name, 67), 67, out, dots), 67);
	ck_assert_uint_eq(dots[0], (1ull << 1));
	ck_assert_uint_eq(dots[1], (1ull << 1));
	unit_host_name(name + 2, 64, 64);
	memcpy(name + 66, ".b", 3);
	ck_assert_int_eq(normalise_fast(guarded(name, 68), 68, out, dots), -1);
	memcpy(name, "example.", 8);
	unit_host_name(name + 8, 64, 64);
	ck_assert_int_eq(normalise_fast(guarded(name, 72), 72, out, dots), -1);
	/* Short names (under a word), the tail word, and what it leaves. */
	ck_assert_int_eq(normalise_fast(guarded("A", 1), 1, out, dots), 1);
	ck_assert_str_eq(out, "a");
	ck_assert_int_eq(normalise_fast(guarded("Ab.Cd.E", 7), 7, out, dots), 7);
	ck_assert_str_eq(out, "ab.cd.e");
	ck_assert_int_eq(normalise_fast(guarded("ab.cd.ef", 8), 8, out, dots), 8);
	ck_assert_int_eq(normalise_fast(guarded("ab.cd.efg", 9), 9, out, dots), 9);
	ck_assert_uint_eq(dots[0], (1ull << 2) | (1ull << 5));
	ck_assert_int_eq(normalise_fast(guarded(".", 1), 1, out, dots), -1);
	ck_assert_int_eq(normalise_fast(guarded("a..", 3), 3, out, dots), -1);
	ck_assert_int_eq(normalise_fast(guarded("a..b", 4), 4, out, dots), -1);
	ck_assert_int_eq(normalise_fast(guarded(".a", 2), 2, out, dots), -1);
	ck_assert_int_eq(normalise_fast(guarded("a.9x", 4), 4, out, dots), -1);
	ck_assert_int_eq(normalise_fast(guarded("9x.a", 4), 4, out, dots), 4);
	ck_assert_int_eq(normalise_fast(guarded("a.b@", 4), 4, out, dots), -1);
	ck_assert_int_eq(normalise_fast(guarded("[::1]", 5), 5, out, dots), -1);
	ck_assert_int_eq(normalise_fast(guarded("", 0), 0, out, dots), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("policy/hostname");
	TCase *tc = tcase_create("hostname");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_normalise_table);
	tcase_add_test(tc, test_normalise_nul_byte);
	tcase_add_test(tc, test_normalise_limits);
	tcase_add_test(tc, test_normalise_fast_matches_full);
	tcase_add_test(tc, test_normalise_fast_limits);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
