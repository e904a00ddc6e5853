/*
 * Unit tests for core/mask.c, the inject tier's response masker: every whole
 * copy of the secret masked, with as many asterisks; a copy straddling two
 * reads masked whole, since the last secret_len - 1 bytes of a read wait;
 * that hold the same length whatever the bytes are (a prefix of the secret
 * or not: the timing oracle); nothing held once the caller says all; in a
 * chunked body, a copy cut by the framing masked in the data, the framing
 * left as it was, and the hold counted in data bytes; a body coded other
 * than identity is not readable (the inject tier refuses it).
 */
#include <signal.h>

#include "core/mask.h"
#include "tests/unit/unit.h"

static const char SECRET[] = "sk-live-0123456789";
#define SECRET_LEN ((uint32_t)(sizeof(SECRET) - 1))

START_TEST(test_copies_masked_whole)
{
	char buf[] = "a sk-live-0123456789 b sk-live-0123456789sk-live-0123456789 sk-live-012";
	uint32_t len = (uint32_t)strlen(buf);

	ck_assert_uint_eq(mask_relay_limit(buf, 0, len, SECRET, SECRET_LEN, true), len);
	ck_assert_str_eq(buf,
			 "a ****************** b ************************************ sk-live-012");
}
END_TEST

START_TEST(test_hold_is_the_same_whatever_the_tail)
{
	/* The tail begins the secret, or it is other bytes, or it is the secret less its
	 * last byte: the same number of bytes waits, so its delay says nothing. */
	const char *tails[] = { "xxxxxxxxxxxxxxxxxxxxxxxxsk-live-",
				"xxxxxxxxxxxxxxxxxxxxxxxxqqqqqqqq",
				"xxxxxxxxxxxxxxsk-live-012345678" };
	for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
		char buf[64];
		uint32_t len = (uint32_t)strlen(tails[i]);
		memcpy(buf, tails[i], len);
		ck_assert_uint_eq(mask_relay_limit(buf, 0, len, SECRET, SECRET_LEN, false),
				  len - (SECRET_LEN - 1));
		ck_assert_uint_eq(mask_relay_limit(buf, 5, len, SECRET, SECRET_LEN, false),
				  len - (SECRET_LEN - 1));
	}
	/* Fewer bytes than a hold: all of them wait, whatever they are. */
	char few[] = "abc";
	ck_assert_uint_eq(mask_relay_limit(few, 0, 3, SECRET, SECRET_LEN, false), 0);
	ck_assert_uint_eq(mask_relay_limit(few, 1, 3, SECRET, SECRET_LEN, false), 1);
	/* Once the caller says all: nothing waits. */
	ck_assert_uint_eq(mask_relay_limit(few, 0, 3, SECRET, SECRET_LEN, true), 3);
}
END_TEST

START_TEST(test_copy_straddling_two_reads)
{
	char buf[128];
	const char *first = "data: here it is sk-live-01234";
	const char *second = "56789 and more";
	uint32_t a = (uint32_t)strlen(first), b = (uint32_t)strlen(second);

	memcpy(buf, first, a);
	uint32_t sent = mask_relay_limit(buf, 0, a, SECRET, SECRET_LEN, false);
	/* Nothing of the copy's start went out. */
	ck_assert_uint_le(sent, (uint32_t)(strstr(first, "sk-") - first));
	memcpy(buf + a, second, b);
	uint32_t more = mask_relay_limit(buf, sent, a + b, SECRET, SECRET_LEN, true);
	ck_assert_uint_eq(more, a + b);
	buf[a + b] = '\0';
	ck_assert_str_eq(buf, "data: here it is ****************** and more");
}
END_TEST

START_TEST(test_one_byte_secret_holds_nothing)
{
	char buf[] = "abcabc";

	ck_assert_uint_eq(mask_relay_limit(buf, 0, 6, "b", 1, false), 6);
	ck_assert_str_eq(buf, "a*ca*c");
}
END_TEST

static char view_bytes[4096];
static uint16_t view_where[4096];

static uint32_t chunked(char *buf, uint32_t from, uint32_t to, bool all)
{
	struct mask_view view = { view_bytes, view_where, sizeof(view_bytes) };
	struct http1_chunked fresh;

	memset(&fresh, 0, sizeof(fresh));
	return mask_relay_limit_chunked(buf, from, to, &fresh, SECRET, SECRET_LEN, all, &view);
}

START_TEST(test_chunked_copy_cut_by_framing)
{
	/* The secret in three chunks: "sk-li", "ve-0123", "456789 ok". */
	char buf[] = "5\r\nsk-li\r\n7\r\nve-0123\r\n9\r\n456789 ok\r\n0\r\n\r\n";
	uint32_t len = (uint32_t)strlen(buf);

	ck_assert_uint_eq(chunked(buf, 0, len, true), len);
	ck_assert_str_eq(buf, "5\r\n*****\r\n7\r\n*******\r\n9\r\n****** ok\r\n0\r\n\r\n");
	/* The raw scan alone would not have seen it. */
	char raw[] = "5\r\nsk-li\r\n7\r\nve-0123\r\n9\r\n456789 ok\r\n0\r\n\r\n";
	(void)mask_relay_limit(raw, 0, len, SECRET, SECRET_LEN, true);
	ck_assert_ptr_nonnull(strstr(raw, "sk-li"));
}
END_TEST

START_TEST(test_chunked_hold_counts_data)
{
	/* 20 data bytes in two chunks, the second ending with a prefix of the secret or not:
	 * the last 17 (the secret less one) wait, from the 4th data byte on, either way; the
	 * framing before it goes. */
	const char *bodies[] = { "a\r\nxxxxxxxxxx\r\na\r\nxxxxxxxxxx\r\n",
				 "a\r\nxxxxxxxxxx\r\na\r\nxxsk-live-\r\n" };
	for (size_t i = 0; i < 2; i++) {
		char buf[64];
		uint32_t len = (uint32_t)strlen(bodies[i]);
		memcpy(buf, bodies[i], len);
		uint32_t limit = chunked(buf, 0, len, false);
		ck_assert_uint_eq(limit, 3 + 3); /* "a\r\n" then 3 data bytes */
	}
	/* No data yet (a size line alone): nothing to hold. */
	char line[] = "1f\r\n";
	ck_assert_uint_eq(chunked(line, 0, 4, false), 4);
}
END_TEST

/* Parses <head> as a response and asks whether the masker can read its body. */
static bool readable(const char *head)
{
	static struct http1_response r;
	ck_assert_int_gt(http1_parse_response(head, strlen(head), &r), 0);
	return mask_readable_coding(&r);
}

START_TEST(test_readable_coding)
{
	ck_assert(readable("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"));
	ck_assert(readable("HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\n\r\n"));
	ck_assert(readable("HTTP/1.1 200 OK\r\nContent-Encoding: Identity , \r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\ncontent-encoding: BR\r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\nContent-Encoding: identity, gzip\r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\n"
			    "Content-Encoding: deflate\r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\nContent-Encoding: x-identity\r\n\r\n"));
	/* Transfer codings: chunked alone is read; gzip before it, or alone, is not. */
	ck_assert(readable("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
	ck_assert(readable("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"));
	ck_assert(!readable("HTTP/1.1 200 OK\r\nTransfer-Encoding: deflate,chunked\r\n\r\n"));
}
END_TEST

START_TEST(test_empty_secret_aborts)
{
	char buf[] = "abc";

	(void)mask_relay_limit(buf, 0, 3, "", 0, true);
}
END_TEST

static Suite *mask_suite(void)
{
	Suite *s = suite_create("mask");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_copies_masked_whole);
	tcase_add_test(tc, test_hold_is_the_same_whatever_the_tail);
	tcase_add_test(tc, test_copy_straddling_two_reads);
	tcase_add_test(tc, test_one_byte_secret_holds_nothing);
	tcase_add_test(tc, test_chunked_copy_cut_by_framing);
	tcase_add_test(tc, test_chunked_hold_counts_data);
	tcase_add_test(tc, test_readable_coding);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_empty_secret_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	return unit_run(mask_suite());
}
