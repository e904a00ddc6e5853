/*
 * Unit tests for core/credential.c, the inject tier's request head: the
 * placeholder swapped for the secret only in the rule's header and only when
 * the whole value is prefix plus placeholder; a repeated credential header
 * refused; hop-by-hop fields (Connection and what it names, Keep-Alive, TE,
 * Proxy-*) never written; Accept-Encoding made identity; the size checked at
 * the buffer's last byte (431 past it); credential_missing and
 * upgrade_refused; an allowed upgrade kept with a Connection of ours; the
 * request line sent without the empty lines a client may put before it.
 */
#include "core/credential.h"
#include "tests/unit/unit.h"

static const char SECRET[] = "sk-live-0123456789abcdef";

static struct verdict_inject rule(bool require, bool upgrades)
{
	struct verdict_inject in = {
		.header = "Authorization",
		.prefix = "Bearer ",
		.placeholder = "PLACEHOLDER",
		.secret = SECRET,
		.header_len = 13,
		.prefix_len = 7,
		.placeholder_len = 11,
		.secret_len = (uint32_t)(sizeof(SECRET) - 1),
		.require = require,
		.upgrades = upgrades,
	};
	return in;
}

/* Parses <head> and rewrites it into <out> (<cap> bytes): the length, or -1 with *why. */
static ssize_t rewrite(const struct verdict_inject *in, const char *head, char *out, size_t cap,
		       enum reason *why)
{
	struct http1_request req;
	enum reason parse_why = REASON_NONE;
	ssize_t n = http1_parse_request(head, strlen(head), &req, &parse_why);
	ck_assert_msg(n > 0, "the test's head does not parse: %s", head);
	*why = REASON_NONE;
	ssize_t len = credential_request_head(in, &req, head, (size_t)n, out, cap, why);
	if (len >= 0) {
		ck_assert_uint_le((size_t)len, cap);
		out[len < (ssize_t)cap ? len : (ssize_t)cap - 1] = '\0';
	}
	return len;
}

START_TEST(test_swapped_in_its_header_only)
{
	struct verdict_inject in = rule(true, false);
	char out[1024];
	enum reason why;

	ssize_t n = rewrite(&in,
			    "POST /v1/chat HTTP/1.1\r\nHost: api.example\r\n"
			    "authorization: bearer PLACEHOLDER\r\nX-Echo: Bearer PLACEHOLDER\r\n"
			    "Content-Length: 0\r\n\r\n",
			    out, sizeof(out), &why);
	ck_assert_int_gt(n, 0);
	ck_assert_str_eq(out, "POST /v1/chat HTTP/1.1\r\nHost: api.example\r\n"
			      "authorization: bearer sk-live-0123456789abcdef\r\n"
			      "X-Echo: Bearer PLACEHOLDER\r\nContent-Length: 0\r\n"
			      "Accept-Encoding: identity\r\n\r\n");
}
END_TEST

START_TEST(test_request_line_without_the_empty_lines_before_it)
{
	/* RFC 9112 section 2.2: empty lines before a request line are ignored; the
	 * upstream gets the request line itself, never an empty line in its place. */
	struct verdict_inject in = rule(true, false);
	char out[1024];
	enum reason why;

	ck_assert_int_gt(rewrite(&in,
				 "\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: a\r\n"
				 "Authorization: Bearer PLACEHOLDER\r\n\r\n",
				 out, sizeof(out), &why),
			 0);
	ck_assert_str_eq(out, "GET /v1/models HTTP/1.1\r\nHost: a\r\n"
			      "Authorization: Bearer sk-live-0123456789abcdef\r\n"
			      "Accept-Encoding: identity\r\n\r\n");
}
END_TEST

START_TEST(test_not_swapped_unless_the_whole_value)
{
	struct verdict_inject in = rule(false, false);
	const char *heads[] = {
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PLACEHOLDERx\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer xPLACEHOLDER\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic PLACEHOLDER\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer placeholder\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorizationX: Bearer PLACEHOLDER\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: Authorization: Bearer PLACEHOLDER\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		char out[1024];
		enum reason why;
		ck_assert_int_gt(rewrite(&in, heads[i], out, sizeof(out), &why), 0);
		ck_assert_msg(strstr(out, SECRET) == NULL, "swapped into: %s", heads[i]);
	}
	/* With the placeholder required, each of them is credential_missing. */
	in = rule(true, false);
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		char out[1024];
		enum reason why;
		ck_assert_int_eq(rewrite(&in, heads[i], out, sizeof(out), &why), -1);
		ck_assert_int_eq(why, REASON_CREDENTIAL_MISSING);
	}
}
END_TEST

START_TEST(test_repeated_header_refused)
{
	struct verdict_inject in = rule(false, false);
	const char *heads[] = {
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PLACEHOLDER\r\n"
		"Authorization: Bearer PLACEHOLDER\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PLACEHOLDER\r\n"
		"AUTHORIZATION: other\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: x\r\nauthorization: y\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		char out[1024];
		enum reason why;
		ck_assert_int_eq(rewrite(&in, heads[i], out, sizeof(out), &why), -1);
		ck_assert_int_eq(why, REASON_BAD_REQUEST);
	}
}
END_TEST

START_TEST(test_hop_by_hop_never_written)
{
	struct verdict_inject in = rule(true, false);
	char out[2048];
	enum reason why;

	ssize_t n = rewrite(&in,
			    "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret-Hop\r\n"
			    "X-Secret-Hop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
			    "Proxy-Authorization: Basic YWdlbnQ6cHc=\r\nProxy-Connection: close\r\n"
			    "Trailer: X\r\nAccept-Encoding: gzip, br\r\n"
			    "Authorization: Bearer PLACEHOLDER\r\nX-Kept: yes\r\n\r\n",
			    out, sizeof(out), &why);
	ck_assert_int_gt(n, 0);
	ck_assert_str_eq(out, "GET / HTTP/1.1\r\nHost: a\r\n"
			      "Authorization: Bearer sk-live-0123456789abcdef\r\nX-Kept: yes\r\n"
			      "Accept-Encoding: identity\r\n\r\n");
}
END_TEST

START_TEST(test_size_checked_at_the_last_byte)
{
	struct verdict_inject in = rule(true, false);
	const char *head = "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PLACEHOLDER\r\n\r\n";
	char out[1024];
	enum reason why;

	ssize_t n = rewrite(&in, head, out, sizeof(out), &why);
	ck_assert_int_gt(n, 0);
	/* Exactly its length fits; one byte less is 431, and nothing past the cap is written. */
	char exact[1024];
	memset(exact, '#', sizeof(exact));
	struct http1_request req;
	enum reason pw;
	ssize_t hl = http1_parse_request(head, strlen(head), &req, &pw);
	ck_assert_int_eq(
	    credential_request_head(&in, &req, head, (size_t)hl, exact, (size_t)n, &why), n);
	ck_assert_int_eq(memcmp(exact, out, (size_t)n), 0);
	memset(exact, '#', sizeof(exact));
	ck_assert_int_eq(
	    credential_request_head(&in, &req, head, (size_t)hl, exact, (size_t)n - 1, &why), -1);
	ck_assert_int_eq(why, REASON_HEADERS_TOO_LARGE);
	for (size_t i = (size_t)n - 1; i < sizeof(exact); i++)
		ck_assert_int_eq(exact[i], '#');
}
END_TEST

START_TEST(test_secret_longer_than_its_placeholder_grows_to_431)
{
	/* A token hundreds of bytes longer than its placeholder (a JWT, an OAuth
	 * token) outgrows the buffer: refused, never written past it. */
	static char secret[600];
	memset(secret, 'S', sizeof(secret) - 1);
	struct verdict_inject in = rule(true, false);
	in.secret = secret;
	in.secret_len = (uint32_t)(sizeof(secret) - 1);
	char head[4096];
	int hl = snprintf(head, sizeof(head),
			  "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PLACEHOLDER\r\n\r\n");
	char out[256];
	enum reason why;
	ck_assert_int_gt(hl, 0);
	ck_assert_int_eq(rewrite(&in, head, out, sizeof(out), &why), -1);
	ck_assert_int_eq(why, REASON_HEADERS_TOO_LARGE);
}
END_TEST

START_TEST(test_bounds_of_an_agents_head)
{
	/* LIMITS_HEADERS_MAX fields in, Accept-Encoding added: one too many for any head
	 * we accept, so it is 431; one field fewer fits. Bytes: never over the head bound. */
	struct verdict_inject in = rule(false, false);
	static char head[LIMITS_HEAD_BYTES_MAX], out[LIMITS_HEAD_BYTES_MAX * 2];
	enum reason why;
	for (uint32_t fields = LIMITS_HEADERS_MAX - 1; fields <= LIMITS_HEADERS_MAX; fields++) {
		size_t n = (size_t)snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nHost: a\r\n");
		for (uint32_t i = 1; i < fields; i++)
			n += (size_t)snprintf(head + n, sizeof(head) - n, "X-%u: v\r\n", i);
		n += (size_t)snprintf(head + n, sizeof(head) - n, "\r\n");
		ssize_t len = rewrite(&in, head, out, sizeof(out), &why);
		if (fields < LIMITS_HEADERS_MAX) {
			ck_assert_int_gt(len, 0);
		} else {
			ck_assert_int_eq(len, -1);
			ck_assert_int_eq(why, REASON_HEADERS_TOO_LARGE);
		}
	}
	static char big[LIMITS_HEAD_BYTES_MAX];
	memset(big, 'v', sizeof(big));
	in.secret = big;
	in.secret_len = LIMITS_HEAD_BYTES_MAX - 64;
	ck_assert_int_eq(
	    rewrite(&in, "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PLACEHOLDER\r\n\r\n",
		    out, sizeof(out), &why),
	    -1);
	ck_assert_int_eq(why, REASON_HEADERS_TOO_LARGE);
}
END_TEST

START_TEST(test_upgrade)
{
	const char *head = "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
			   "Upgrade: websocket\r\nAuthorization: Bearer PLACEHOLDER\r\n\r\n";
	char out[1024];
	enum reason why;

	struct verdict_inject in = rule(true, false);
	ck_assert_int_eq(rewrite(&in, head, out, sizeof(out), &why), -1);
	ck_assert_int_eq(why, REASON_UPGRADE_REFUSED);

	in = rule(true, true);
	ck_assert_int_gt(rewrite(&in, head, out, sizeof(out), &why), 0);
	ck_assert_str_eq(out, "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n"
			      "Authorization: Bearer sk-live-0123456789abcdef\r\n"
			      "Accept-Encoding: identity\r\nConnection: upgrade\r\n\r\n");
}
END_TEST

static Suite *credential_suite(void)
{
	Suite *s = suite_create("credential");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_swapped_in_its_header_only);
	tcase_add_test(tc, test_request_line_without_the_empty_lines_before_it);
	tcase_add_test(tc, test_not_swapped_unless_the_whole_value);
	tcase_add_test(tc, test_repeated_header_refused);
	tcase_add_test(tc, test_hop_by_hop_never_written);
	tcase_add_test(tc, test_size_checked_at_the_last_byte);
	tcase_add_test(tc, test_secret_longer_than_its_placeholder_grows_to_431);
	tcase_add_test(tc, test_bounds_of_an_agents_head);
	tcase_add_test(tc, test_upgrade);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(credential_suite());
}
