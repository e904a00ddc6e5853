/*
 * Unit tests for the leaf figures tls/term.c hands the worker through
 * term_ops.counters: hits and misses of the worker's leaf cache, and the
 * leaves minted into it.
 *
 * Each test makes a throwaway CA and drives a worker state through the
 * term ops only: prime (the load-time path) and a server session's
 * handshake against a client over memory (the on_sni path). Checked: a
 * first look-up misses and mints, the next ones hit, a host in another
 * spelling hits the same leaf, a host the minter refuses is a miss and no
 * mint, an empty or over-long host (N and N+1 bytes) is refused before the
 * cache; workers count apart; an engine without a CA counts nothing.
 */
#include "../../../tls/term.c"

#include <check.h>

#include "tests/unit/tls/tlstest.h"
#include "tests/unit/unit.h"

static const struct term_ops *const ops = &tls_term_ops;
static char ca_pem[PATH_MAX], ca_key[PATH_MAX];
static struct tls_term *eng;
static char err[512];

static void setup(void)
{
	tt_mkdir();
	tt_make_ca("ca", NULL, ca_pem, ca_key);
	ck_assert_int_eq(tls_term_open(ca_pem, ca_key, 0, &eng, err, sizeof(err)), 0);
}

static void teardown(void)
{
	tls_term_close(&eng);
	tt_rmdir();
}

static void *worker_of(struct tls_term *e, uint32_t index)
{
	void *w = ops->worker_new(e, index, err, sizeof(err));

	ck_assert_msg(w != NULL, "%s", err);
	return w;
}

#define expect_counters(w, hits, misses, mints) \
	expect_counters_at(__LINE__, (w), (hits), (misses), (mints))

static void expect_counters_at(int line, const void *w, uint64_t hits, uint64_t misses,
			       uint64_t mints)
{
	struct term_counters c = { .leaf_hits = 99, .leaf_misses = 99, .leaf_mints = 99 };

	ops->counters(w, &c);
	ck_assert_msg(c.leaf_hits == hits && c.leaf_misses == misses && c.leaf_mints == mints,
		      "line %d: hits %llu misses %llu mints %llu, want %llu %llu %llu", line,
		      (unsigned long long)c.leaf_hits, (unsigned long long)c.leaf_misses,
		      (unsigned long long)c.leaf_mints, (unsigned long long)hits,
		      (unsigned long long)misses, (unsigned long long)mints);
}

START_TEST(test_prime)
{
	void *w = worker_of(eng, 0);

	expect_counters(w, 0, 0, 0);
	ck_assert_int_eq(ops->prime(w, "a.example.test", 14), 0);
	expect_counters(w, 0, 1, 1);
	ck_assert_int_eq(ops->prime(w, "a.example.test", 14), 0);
	expect_counters(w, 1, 1, 1);
	/* The same host as a client may spell it: normal form, the same leaf. */
	ck_assert_int_eq(ops->prime(w, "A.Example.TEST.", 15), 0);
	expect_counters(w, 2, 1, 1);
	/* Not a host name the minter takes: a miss, no mint. */
	ck_assert_int_eq(ops->prime(w, "bad host", 8), -EINVAL);
	expect_counters(w, 2, 2, 1);
	ops->worker_free(w);
}
END_TEST

/* An empty host, and one past LIMITS_HOST_BYTES_MAX, never reach the cache; N bytes do. */
START_TEST(test_host_limit)
{
	char host[LIMITS_HOST_BYTES_MAX + 2];
	void *w = worker_of(eng, 0);

	ck_assert_int_eq(ops->prime(w, "", 0), -EINVAL);
	expect_counters(w, 0, 0, 0);
	/* Labels of 63 bytes, dots between, LIMITS_HOST_BYTES_MAX + 1 bytes in all. */
	for (size_t i = 0; i < sizeof(host); i++)
		host[i] = i % 64 == 63 ? '.' : 'a';
	ck_assert_int_eq(ops->prime(w, host, LIMITS_HOST_BYTES_MAX + 1), -EINVAL);
	expect_counters(w, 0, 0, 0);
	/* N bytes reach the cache: a miss (a 255-byte name is beyond the minter's 253). */
	ck_assert_int_eq(ops->prime(w, host, LIMITS_HOST_BYTES_MAX), -EINVAL);
	expect_counters(w, 0, 1, 0);
	ops->worker_free(w);
}
END_TEST

static int term_handshake(void *srv)
{
	return (int)ops->handshake(srv);
}

/* A server session's handshake for <host> on worker <w>, as a client trusting the CA. */
static void handshake_for(void *w, SSL_CTX *cctx, const char *host)
{
	struct tls_session c;
	int cs, ss;
	void *srv = ops->server_new(w, host, strlen(host));

	ck_assert_ptr_nonnull(srv);
	struct tt_wire srv_wire = {
		.out_peek = ops->out_peek,
		.out_consume = ops->out_consume,
		.feed = ops->feed,
		.handshake = term_handshake,
	};
	ck_assert_int_eq(tls_session_client_init(&c, cctx, host, strlen(host)), 0);
	tt_handshake_wire(&tt_session_wire, &c, &cs, &srv_wire, srv, &ss);
	ck_assert_msg(cs == TLS_SESSION_OK, "client %d: %s", cs, tls_session_error(&c));
	ck_assert_int_eq(ss, TERM_OK);
	tls_session_destroy(&c);
	ops->session_free(srv);
}

START_TEST(test_handshakes)
{
	SSL_CTX *cctx = tls_session_client_ctx_new(ca_pem, err, sizeof(err));
	void *w0 = worker_of(eng, 0);
	void *w1 = worker_of(eng, 1);

	ck_assert_msg(cctx != NULL, "%s", err);
	handshake_for(w0, cctx, "b.example.test");
	expect_counters(w0, 0, 1, 1);
	handshake_for(w0, cctx, "b.example.test");
	expect_counters(w0, 1, 1, 1);
	/* Each worker has its own cache, and counts its own. */
	expect_counters(w1, 0, 0, 0);
	handshake_for(w1, cctx, "b.example.test");
	expect_counters(w1, 0, 1, 1);
	expect_counters(w0, 1, 1, 1);
	ops->worker_free(w1);
	ops->worker_free(w0);
	SSL_CTX_free(cctx);
}
END_TEST

START_TEST(test_no_ca)
{
	struct tls_term *bare = NULL;

	ck_assert_int_eq(tls_term_open(NULL, NULL, 0, &bare, err, sizeof(err)), 0);
	void *w = worker_of(bare, 0);
	ck_assert_int_eq(ops->prime(w, "a.example.test", 14), -ENOENT);
	expect_counters(w, 0, 0, 0);
	ck_assert_ptr_null(ops->server_new(w, "a.example.test", 14));
	expect_counters(w, 0, 0, 0);
	ops->worker_free(w);
	tls_term_close(&bare);
}
END_TEST

static Suite *counters_suite(void)
{
	Suite *s = suite_create("tls/counters");
	TCase *tc = tcase_create("counters");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_prime);
	tcase_add_test(tc, test_host_limit);
	tcase_add_test(tc, test_handshakes);
	tcase_add_test(tc, test_no_ca);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(counters_suite());
}
