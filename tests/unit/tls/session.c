/*
 * Unit tests for tls/session.c: server and client sessions run against each
 * other purely in memory, ciphertext pumped between their buffers.
 *
 * The server side is driven the way the engine will drive it: the SNI
 * callback compares the name with a CONNECT authority and takes the leaf
 * from a leafcache (minting on a miss). Checked: a full handshake with data
 * both ways and close_notify each way, on TLS 1.3 and 1.2; ALPN; the SNI
 * the callback saw; verification failures (wrong name, wrong IP, untrusted
 * CA, the system store) with their text, and that a failed client never
 * emits application data; IP-literal leaves (no SNI); a refused SNI; EOF
 * without close_notify; the inbound buffer at N and N+1 bytes; back-pressure
 * on the outbound buffer with a large transfer; a foreign leaf; bad hosts and
 * CA files. One test prints the handshake time.
 */
#include "../../../tls/session.c"

#include <check.h>
#include <pthread.h>
#include <signal.h>

#include "tls/leafcache.h"
#include "tests/unit/tls/tlstest.h"
#include "tests/unit/unit.h"

static char ca_pem[PATH_MAX], ca_key[PATH_MAX];
static struct tls_ca *ca;
static SSL_CTX *server_ctx;
static SSL_CTX *client_ctx;

/* What the SNI callback gets: the CONNECT authority it must match, and what it saw. */
struct sni_env {
	struct tls_leafcache cache;
	const char *authority; /* the CONNECT host */
	bool refuse;           /* refuse whatever the name */
	int calls;
	bool saw_null;
	char seen[LIMITS_HOST_BYTES_MAX + 1];
};

static void setup(void)
{
	char err[512];

	ck_assert_int_eq(tls_library_init(err, sizeof(err)), 0);
	tt_mkdir();
	tt_make_ca("ca", NULL, ca_pem, ca_key);
	ck_assert_int_eq(tls_ca_load(ca_pem, ca_key, 7, &ca, err, sizeof(err)), 0);
	server_ctx = tls_session_server_ctx_new(ca, err, sizeof(err));
	ck_assert_msg(server_ctx != NULL, "%s", err);
	client_ctx = tls_session_client_ctx_new(ca_pem, err, sizeof(err));
	ck_assert_msg(client_ctx != NULL, "%s", err);
}

/* For tests that abort: their teardown never runs, so nothing may be left on disk. */
static void setup_no_files(void)
{
	setup();
	tt_rmdir();
}

static void teardown(void)
{
	SSL_CTX_free(client_ctx);
	SSL_CTX_free(server_ctx);
	tls_ca_free(&ca);
	tt_rmdir();
}

/* The engine's check: the SNI (or, without one, the authority) must be the CONNECT host. */
static int on_sni(struct tls_session *s, const char *sni, size_t sni_len, void *arg)
{
	struct sni_env *env = arg;
	X509 *leaf = NULL;

	env->calls++;
	env->saw_null = sni == NULL;
	ck_assert_uint_eq(sni_len, sni != NULL ? strlen(sni) : 0);
	snprintf(env->seen, sizeof(env->seen), "%s", sni != NULL ? sni : "");
	const char *name = sni != NULL ? sni : env->authority;
	if (env->refuse || strcmp(name, env->authority) != 0)
		return -EACCES;
	int ret = tls_leafcache_get_or_mint(&env->cache, ca, name, strlen(name), time(NULL), &leaf);
	if (ret != 0)
		return ret;
	return tls_session_set_leaf(s, leaf);
}

static void env_init(struct sni_env *env, const char *authority)
{
	memset(env, 0, sizeof(*env));
	env->authority = authority;
	ck_assert_int_eq(tls_leafcache_init(&env->cache, 16), 0);
}

/* A server through the SNI callback and a client to <host>, handshaken. */
static void connect_pair(struct tls_session *c, struct tls_session *s, struct sni_env *env,
			 SSL_CTX *cctx, const char *host, enum tls_session_status *cs,
			 enum tls_session_status *ss)
{
	ck_assert_int_eq(tls_session_server_init(s, server_ctx, NULL, on_sni, env), 0);
	ck_assert_int_eq(tls_session_client_init(c, cctx, host, strlen(host)), 0);
	tt_handshake(c, s, cs, ss);
}

/*
 * Writes the <len> bytes at <data> into <from>, of which the first <sent>
 * were already taken, and reads all <len> out of <to>, pumping as needed.
 */
static void transfer_from(struct tls_session *from, struct tls_session *to, const uint8_t *data,
			  size_t len, size_t sent)
{
	uint8_t *got = pool_malloc(len + 1);
	size_t recvd = 0;

	ck_assert_ptr_nonnull(got);
	for (int spins = 0; recvd < len; spins++) {
		ck_assert_int_lt(spins, 100000);
		if (sent < len) {
			size_t n = 0;
			enum tls_session_status st =
			    tls_session_write(from, data + sent, len - sent, &n);
			ck_assert(st == TLS_SESSION_OK || st == TLS_SESSION_WANT_WRITE);
			if (st == TLS_SESSION_WANT_WRITE)
				ck_assert_uint_eq(n, 0);
			sent += n;
		}
		ck_assert_uint_le(tls_session_out_pending(from), TLS_SESSION_NET_BYTES);
		tt_pump(from, to);
		for (;;) {
			size_t n = 0;
			enum tls_session_status st =
			    tls_session_read(to, got + recvd, len + 1 - recvd, &n);
			if (st != TLS_SESSION_OK) {
				ck_assert_int_eq(st, TLS_SESSION_WANT_READ);
				break;
			}
			recvd += n;
		}
		tt_pump(to, from); /* tickets, key updates */
	}
	ck_assert_uint_eq(recvd, len);
	ck_assert_int_eq(memcmp(got, data, len), 0);
	pool_free(got);
}

static void transfer(struct tls_session *from, struct tls_session *to, const uint8_t *data,
		     size_t len)
{
	transfer_from(from, to, data, len, 0);
}

static void expect_closed(struct tls_session *s)
{
	uint8_t buf[64];
	size_t n = 1;

	ck_assert_int_eq(tls_session_read(s, buf, sizeof(buf), &n), TLS_SESSION_CLOSED);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(tls_session_read(s, buf, sizeof(buf), &n), TLS_SESSION_CLOSED);
}

static void alpn_is_http11(struct tls_session *s)
{
	const unsigned char *p = NULL;
	unsigned int len = 0;

	SSL_get0_alpn_selected(s->ssl, &p, &len);
	ck_assert_uint_eq(len, 8);
	ck_assert_int_eq(memcmp(p, "http/1.1", 8), 0);
}

/* ---- Success. ---- */

static void run_exchange(SSL_CTX *cctx, int version)
{
	static const char req[] = "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
	static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	struct tls_session c, s;
	struct sni_env env;
	enum tls_session_status cs, ss;

	env_init(&env, "api.example.test");
	connect_pair(&c, &s, &env, cctx, "api.example.test", &cs, &ss);
	ck_assert_msg(cs == TLS_SESSION_OK, "client %d: %s", cs, tls_session_error(&c));
	ck_assert_msg(ss == TLS_SESSION_OK, "server %d: %s", ss, tls_session_error(&s));
	ck_assert_int_eq(SSL_version(c.ssl), version);
	ck_assert(tls_session_verified(&c));
	ck_assert(!tls_session_verified(&s));
	ck_assert_int_eq(env.calls, 1);
	ck_assert_str_eq(env.seen, "api.example.test");
	ck_assert_str_eq(tls_session_sni(&s), "api.example.test");
	ck_assert_int_eq(
	    X509_check_host(SSL_get0_peer_certificate(c.ssl), "api.example.test", 0, 0, NULL), 1);
	alpn_is_http11(&c);
	alpn_is_http11(&s);
	transfer(&c, &s, (const uint8_t *)req, sizeof(req) - 1);
	transfer(&s, &c, (const uint8_t *)resp, sizeof(resp) - 1);
	/* close_notify from the client, then the server's answer. */
	ck_assert_int_eq(tls_session_close(&c), TLS_SESSION_OK);
	ck_assert_int_eq(tls_session_close(&c), TLS_SESSION_OK); /* once */
	ck_assert_uint_gt(tt_pump(&c, &s), 0);
	expect_closed(&s);
	ck_assert_int_eq(tls_session_close(&s), TLS_SESSION_OK);
	ck_assert_uint_gt(tt_pump(&s, &c), 0);
	expect_closed(&c);
	ck_assert_str_eq(tls_session_error(&c), "");
	ck_assert_str_eq(tls_session_error(&s), "");
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	ck_assert_ptr_null(c.ssl);
	tls_leafcache_destroy(&env.cache);
}

START_TEST(test_handshake_tls13)
{
	run_exchange(client_ctx, TLS1_3_VERSION);
}
END_TEST

START_TEST(test_handshake_tls12)
{
	char err[256];
	SSL_CTX *c12 = tls_session_client_ctx_new(ca_pem, err, sizeof(err));

	ck_assert_ptr_nonnull(c12);
	ck_assert_int_eq(SSL_CTX_set_max_proto_version(c12, TLS1_2_VERSION), 1);
	run_exchange(c12, TLS1_2_VERSION);
	SSL_CTX_free(c12);
}
END_TEST

START_TEST(test_ip_literal)
{
	static const char *const ips[] = { "127.0.0.1", "::1" };

	for (size_t i = 0; i < AN_ARRAY_LEN(ips); i++) {
		struct tls_session c, s;
		struct sni_env env;
		enum tls_session_status cs, ss;

		env_init(&env, ips[i]);
		connect_pair(&c, &s, &env, client_ctx, ips[i], &cs, &ss);
		ck_assert_msg(cs == TLS_SESSION_OK, "%s: %s", ips[i], tls_session_error(&c));
		ck_assert_int_eq(ss, TLS_SESSION_OK);
		ck_assert(tls_session_verified(&c));
		/* RFC 6066: no SNI for an address; the callback fell back to the authority. */
		ck_assert_int_eq(env.calls, 1);
		ck_assert(env.saw_null);
		ck_assert_ptr_null(tls_session_sni(&s));
		ck_assert_ptr_null(tls_session_sni(&c));
		ck_assert_int_eq(X509_check_ip_asc(SSL_get0_peer_certificate(c.ssl), ips[i], 0), 1);
		tls_session_destroy(&c);
		tls_session_destroy(&s);
		tls_leafcache_destroy(&env.cache);
	}
}
END_TEST

/* A HelloRetryRequest (the client's key share is not a group the server takes). */
START_TEST(test_hello_retry)
{
	struct tls_session c, s;
	struct sni_env env;
	enum tls_session_status cs, ss;

	ck_assert_int_eq(SSL_CTX_set1_groups_list(server_ctx, "P-256"), 1);
	env_init(&env, "api.example.test");
	connect_pair(&c, &s, &env, client_ctx, "api.example.test", &cs, &ss);
	ck_assert_msg(cs == TLS_SESSION_OK, "%s", tls_session_error(&c));
	ck_assert_int_eq(ss, TLS_SESSION_OK);
	ck_assert(tls_session_verified(&c));
	ck_assert_int_ge(env.calls, 1);
	ck_assert_int_le(env.calls, 2);
	ck_assert_uint_eq(env.cache.misses, 1);
	printf("hello retry: SNI callback called %d times\n", env.calls);
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	tls_leafcache_destroy(&env.cache);
}
END_TEST

/* A leaf given at init, no callback: the caller already knew the host. */
START_TEST(test_leaf_at_init)
{
	struct tls_session c, s;
	enum tls_session_status cs, ss;
	X509 *leaf = NULL;

	ck_assert_int_eq(tls_leaf_mint(ca, "pre.example.test", 16, time(NULL), &leaf), 0);
	ck_assert_int_eq(tls_session_server_init(&s, server_ctx, leaf, NULL, NULL), 0);
	X509_free(leaf); /* the session holds its own reference */
	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "pre.example.test", 16), 0);
	tt_handshake(&c, &s, &cs, &ss);
	ck_assert_int_eq(cs, TLS_SESSION_OK);
	ck_assert_int_eq(ss, TLS_SESSION_OK);
	ck_assert(tls_session_verified(&c));
	tls_session_destroy(&c);
	tls_session_destroy(&s);
}
END_TEST

/* ---- Failures. ---- */

/* Everything plaintext <s> can produce, which must be nothing: returns the bytes read. */
static size_t drain_plaintext(struct tls_session *s)
{
	uint8_t buf[4096];
	size_t total = 0, n = 0;

	while (tls_session_read(s, buf, sizeof(buf), &n) == TLS_SESSION_OK)
		total += n;
	return total;
}

/*
 * A client that wants to send <secret> the moment it can, against a server
 * presenting a leaf for <leaf_host>: returns the client's final status. The
 * server must never read a byte of plaintext.
 */
static enum tls_session_status eager_client(struct tls_session *c, struct tls_session *s,
					    const char *leaf_host)
{
	static const char secret[] = "Authorization: Bearer real-secret";
	enum tls_session_status st = TLS_SESSION_WANT_READ;
	X509 *leaf = NULL;

	ck_assert_int_eq(tls_leaf_mint(ca, leaf_host, strlen(leaf_host), time(NULL), &leaf), 0);
	ck_assert_int_eq(tls_session_server_init(s, server_ctx, leaf, NULL, NULL), 0);
	X509_free(leaf);
	for (int round = 0; round < 16 && st != TLS_SESSION_ERROR; round++) {
		size_t n = 99;
		st = tls_session_write(c, secret, sizeof(secret) - 1, &n);
		ck_assert_uint_eq(n, 0);
		tt_pump(c, s);
		tls_session_handshake(s);
		ck_assert_uint_eq(drain_plaintext(s), 0);
		tt_pump(s, c);
	}
	/* Once failed, nothing more comes out of the client, whatever it is asked. */
	size_t pending = tls_session_out_pending(c);
	size_t n = 99;
	ck_assert_int_eq(tls_session_write(c, secret, sizeof(secret) - 1, &n), TLS_SESSION_ERROR);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(tls_session_handshake(c), TLS_SESSION_ERROR);
	ck_assert_int_eq(tls_session_close(c), TLS_SESSION_ERROR);
	ck_assert_uint_eq(tls_session_out_pending(c), pending);
	tt_pump(c, s);
	ck_assert_uint_eq(drain_plaintext(s), 0);
	ck_assert(!tls_session_verified(c));
	return st;
}

START_TEST(test_wrong_name)
{
	struct tls_session c, s;

	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "b.example.test", 14), 0);
	ck_assert_int_eq(eager_client(&c, &s, "a.example.test"), TLS_SESSION_ERROR);
	ck_assert_msg(tt_has(tls_session_error(&c), "certificate verify failed: hostname mismatch"),
		      "%s", tls_session_error(&c));
	/* The server learns through the client's alert. */
	ck_assert_int_eq(tls_session_handshake(&s), TLS_SESSION_ERROR);
	ck_assert_msg(tt_has(tls_session_error(&s), "alert"), "%s", tls_session_error(&s));
	tls_session_destroy(&c);
	tls_session_destroy(&s);
}
END_TEST

START_TEST(test_wrong_ip)
{
	struct tls_session c, s;

	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "127.0.0.2", 9), 0);
	ck_assert_int_eq(eager_client(&c, &s, "127.0.0.1"), TLS_SESSION_ERROR);
	ck_assert_msg(tt_has(tls_session_error(&c), "IP address mismatch"), "%s",
		      tls_session_error(&c));
	tls_session_destroy(&c);
	tls_session_destroy(&s);
}
END_TEST

START_TEST(test_untrusted_ca)
{
	char pem[PATH_MAX], key[PATH_MAX], err[256];
	struct tls_session c, s;

	tt_make_ca("other", NULL, pem, key);
	SSL_CTX *other = tls_session_client_ctx_new(pem, err, sizeof(err));
	ck_assert_ptr_nonnull(other);
	ck_assert_int_eq(tls_session_client_init(&c, other, "api.example.test", 16), 0);
	ck_assert_int_eq(eager_client(&c, &s, "api.example.test"), TLS_SESSION_ERROR);
	ck_assert_msg(tt_has(tls_session_error(&c), "unable to get local issuer certificate"), "%s",
		      tls_session_error(&c));
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	SSL_CTX_free(other);
	/* The system store does not hold the agentsnet CA either. */
	SSL_CTX *sys = tls_session_client_ctx_new(NULL, err, sizeof(err));
	ck_assert_msg(sys != NULL, "%s", err);
	ck_assert_int_eq(tls_session_client_init(&c, sys, "api.example.test", 16), 0);
	ck_assert_int_eq(eager_client(&c, &s, "api.example.test"), TLS_SESSION_ERROR);
	ck_assert(tt_has(tls_session_error(&c), "certificate verify failed"));
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	SSL_CTX_free(sys);
}
END_TEST

START_TEST(test_sni_refused)
{
	struct tls_session c, s;
	struct sni_env env;
	enum tls_session_status cs, ss;

	/* The SNI names another host than the CONNECT authority. */
	env_init(&env, "api.example.test");
	connect_pair(&c, &s, &env, client_ctx, "evil.example.test", &cs, &ss);
	ck_assert_int_eq(ss, TLS_SESSION_ERROR);
	ck_assert_int_eq(cs, TLS_SESSION_ERROR);
	ck_assert_int_eq(env.calls, 1);
	ck_assert_str_eq(env.seen, "evil.example.test");
	ck_assert_str_eq(tls_session_sni(&s), "evil.example.test");
	ck_assert_msg(tt_has(tls_session_error(&s), "server name refused"), "%s",
		      tls_session_error(&s));
	ck_assert_msg(tt_has(tls_session_error(&c), "unrecognized name"), "%s",
		      tls_session_error(&c));
	ck_assert_uint_eq(env.cache.count, 0); /* nothing minted for a refused name */
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	tls_leafcache_destroy(&env.cache);
	/* A callback that refuses everything, on a matching name. */
	env_init(&env, "api.example.test");
	env.refuse = true;
	connect_pair(&c, &s, &env, client_ctx, "api.example.test", &cs, &ss);
	ck_assert_int_eq(ss, TLS_SESSION_ERROR);
	ck_assert_int_eq(cs, TLS_SESSION_ERROR);
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	tls_leafcache_destroy(&env.cache);
}
END_TEST

START_TEST(test_eof_without_close_notify)
{
	struct tls_session c, s;
	struct sni_env env;
	enum tls_session_status cs, ss;
	uint8_t buf[16];
	size_t n = 1;

	env_init(&env, "api.example.test");
	connect_pair(&c, &s, &env, client_ctx, "api.example.test", &cs, &ss);
	ck_assert_int_eq(cs, TLS_SESSION_OK);
	tls_session_feed_eof(&c);
	tls_session_feed_eof(&c); /* twice is harmless */
	ck_assert_int_eq(tls_session_feed(&c, "x", 1), -EPIPE);
	ck_assert_int_eq(tls_session_read(&c, buf, sizeof(buf), &n), TLS_SESSION_ERROR);
	ck_assert_uint_eq(n, 0);
	ck_assert_msg(tt_has(tls_session_error(&c), "eof") ||
			  tt_has(tls_session_error(&c), "without close_notify"),
		      "%s", tls_session_error(&c));
	ck_assert_int_eq(tls_session_read(&c, buf, sizeof(buf), &n), TLS_SESSION_ERROR);
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	tls_leafcache_destroy(&env.cache);
}
END_TEST

START_TEST(test_foreign_leaf)
{
	char err[256];
	struct tls_ca *other = NULL;
	struct tls_session s;
	X509 *leaf = NULL;

	/* Same CA files, another load: another leaf key. */
	ck_assert_int_eq(tls_ca_load(ca_pem, ca_key, 7, &other, err, sizeof(err)), 0);
	ck_assert_int_eq(tls_leaf_mint(other, "x.test", 6, time(NULL), &leaf), 0);
	ck_assert_int_eq(tls_session_server_init(&s, server_ctx, leaf, NULL, NULL), -EINVAL);
	ck_assert(tt_has(tls_session_error(&s), "leaf does not carry the leaf key"));
	ck_assert_ptr_null(s.ssl);
	X509_free(leaf);
	tls_ca_free(&other);
}
END_TEST

/* ---- Buffers. ---- */

START_TEST(test_feed_bound)
{
	struct tls_session s;
	uint8_t *junk = pool_calloc(1, TLS_SESSION_NET_BYTES + 1);

	ck_assert_ptr_nonnull(junk);
	ck_assert_int_eq(tls_session_server_init(&s, server_ctx, NULL, NULL, NULL), 0);
	ck_assert_int_eq(tls_session_feed(&s, junk, TLS_SESSION_NET_BYTES), TLS_SESSION_NET_BYTES);
	ck_assert_int_eq(tls_session_feed(&s, junk, 1), 0);
	tls_session_destroy(&s);
	ck_assert_int_eq(tls_session_server_init(&s, server_ctx, NULL, NULL, NULL), 0);
	ck_assert_int_eq(tls_session_feed(&s, junk, TLS_SESSION_NET_BYTES + 1),
			 TLS_SESSION_NET_BYTES);
	/* Zeros are no TLS record: the server fails, and says so. */
	ck_assert_int_eq(tls_session_handshake(&s), TLS_SESSION_ERROR);
	ck_assert_str_ne(tls_session_error(&s), "");
	tls_session_destroy(&s);
	pool_free(junk);
}
END_TEST

START_TEST(test_large_transfer_backpressure)
{
	enum { LEN = 1 << 20 };
	struct tls_session c, s;
	struct sni_env env;
	enum tls_session_status cs, ss;
	uint8_t *data = pool_malloc(LEN);

	ck_assert_ptr_nonnull(data);
	for (size_t i = 0; i < LEN; i++)
		data[i] = (uint8_t)(i * 31 + (i >> 8));
	env_init(&env, "api.example.test");
	connect_pair(&c, &s, &env, client_ctx, "api.example.test", &cs, &ss);
	ck_assert_int_eq(cs, TLS_SESSION_OK);
	/* Undrained, the server fills its outbound buffer and then pushes back. */
	size_t taken = 0, n = 0;
	enum tls_session_status st = TLS_SESSION_OK;
	while (st == TLS_SESSION_OK && taken < LEN) {
		st = tls_session_write(&s, data + taken, LEN - taken, &n);
		taken += n;
	}
	ck_assert_int_eq(st, TLS_SESSION_WANT_WRITE);
	ck_assert_uint_eq(tls_session_out_pending(&s), TLS_SESSION_NET_BYTES);
	ck_assert_uint_lt(taken, LEN);
	/* Drained, everything arrives, in order; the retried write goes on where it stopped. */
	transfer_from(&s, &c, data, LEN, taken);
	pool_free(data);
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	tls_leafcache_destroy(&env.cache);
}
END_TEST

START_TEST(test_out_peek_stable)
{
	struct tls_session c, s;
	struct sni_env env;
	enum tls_session_status cs, ss;
	const uint8_t *p1 = NULL, *p2 = NULL;
	uint8_t copy[256];
	size_t n = 0;

	env_init(&env, "api.example.test");
	connect_pair(&c, &s, &env, client_ctx, "api.example.test", &cs, &ss);
	ck_assert_int_eq(cs, TLS_SESSION_OK);
	ck_assert_uint_eq(tls_session_out_peek(&c, &p1), 0);
	ck_assert_ptr_null(p1);
	ck_assert_int_eq(tls_session_write(&c, "first", 5, &n), TLS_SESSION_OK);
	size_t len1 = tls_session_out_peek(&c, &p1);
	ck_assert_uint_gt(len1, 5);
	ck_assert_uint_le(len1, sizeof(copy));
	memcpy(copy, p1, len1);
	/* An asynchronous send may hold p1: later writes go behind it. */
	ck_assert_int_eq(tls_session_write(&c, "second", 6, &n), TLS_SESSION_OK);
	size_t len2 = tls_session_out_peek(&c, &p2);
	ck_assert_ptr_eq(p2, p1);
	ck_assert_uint_gt(len2, len1);
	ck_assert_int_eq(memcmp(p1, copy, len1), 0);
	ck_assert_uint_eq(tls_session_out_pending(&c), len2);
	/* Consumed in two steps, as two short sends would. */
	tls_session_out_consume(&c, 3);
	ck_assert_int_eq(tls_session_feed(&s, p1, 3), 3);
	ck_assert_uint_eq(tls_session_out_pending(&c), len2 - 3);
	tt_pump(&c, &s);
	uint8_t buf[32];
	size_t got = 0;
	while (tls_session_read(&s, buf + got, sizeof(buf) - got, &n) == TLS_SESSION_OK)
		got += n;
	ck_assert_uint_eq(got, 11);
	ck_assert_int_eq(memcmp(buf, "firstsecond", 11), 0);
	tls_session_destroy(&c);
	tls_session_destroy(&s);
	tls_leafcache_destroy(&env.cache);
}
END_TEST

START_TEST(test_consume_too_much_aborts)
{
	struct tls_session c;
	const uint8_t *p = NULL;

	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "a.test", 6), 0);
	ck_assert_int_eq(tls_session_handshake(&c), TLS_SESSION_WANT_READ);
	size_t len = tls_session_out_peek(&c, &p);
	ck_assert_uint_gt(len, 0);
	tls_session_out_consume(&c, len + 1);
}
END_TEST

/* ---- Construction. ---- */

START_TEST(test_close_before_handshake)
{
	struct tls_session c;

	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "a.test", 6), 0);
	ck_assert_int_eq(tls_session_close(&c), TLS_SESSION_OK);
	ck_assert_uint_eq(tls_session_out_pending(&c), 0);
	ck_assert_str_eq(tls_session_sni(&c), "a.test");
	tls_session_destroy(&c);
}
END_TEST

START_TEST(test_client_bad_hosts)
{
	struct tls_session c;
	char host[LIMITS_HOST_BYTES_MAX + 2];

	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "", 0), -EINVAL);
	ck_assert(tt_has(tls_session_error(&c), "bad upstream host"));
	ck_assert_ptr_null(c.ssl);
	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "a\0b", 3), -EINVAL);
	memset(host, 'a', sizeof(host));
	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, host, LIMITS_HOST_BYTES_MAX + 1),
			 -EINVAL);
	ck_assert_int_eq(tls_session_client_init(&c, client_ctx, host, LIMITS_HOST_BYTES_MAX), 0);
	tls_session_destroy(&c);
}
END_TEST

START_TEST(test_client_ctx_bad_files)
{
	char path[PATH_MAX], err[512];

	tt_path(path, "missing.pem");
	ck_assert_ptr_null(tls_session_client_ctx_new(path, err, sizeof(err)));
	ck_assert_msg(tt_has(err, path) && tt_has(err, "No such file"), "%s", err);
	tt_path(path, "junk.pem");
	tt_spit(path, "junk\n", 5);
	ck_assert_ptr_null(tls_session_client_ctx_new(path, err, sizeof(err)));
	ck_assert_msg(tt_has(err, path) && tt_has(err, "no PEM certificate loaded"), "%s", err);
	ck_assert_int_eq(ERR_peek_error(), 0);
}
END_TEST

/* Workers mint from one CA and present leaves at once (the CA is shared read-only). */
static void *mint_worker(void *arg)
{
	char host[32];
	long id = (long)arg;

	for (int i = 0; i < 100; i++) {
		struct tls_session s;
		X509 *leaf = NULL;
		int n = snprintf(host, sizeof(host), "w%ld-%d.example.test", id, i);
		if (tls_leaf_mint(ca, host, (size_t)n, time(NULL), &leaf) != 0)
			return (void *)1;
		int ret = tls_session_server_init(&s, server_ctx, leaf, NULL, NULL);
		X509_free(leaf);
		if (ret != 0)
			return (void *)2;
		tls_session_destroy(&s);
	}
	return NULL;
}

START_TEST(test_concurrent_mint)
{
	pthread_t t[4];

	for (long i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, mint_worker, (void *)i), 0);
	for (int i = 0; i < 4; i++) {
		void *ret = (void *)99;
		ck_assert_int_eq(pthread_join(t[i], &ret), 0);
		ck_assert_ptr_null(ret);
	}
}
END_TEST

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* Handshakes with each side's calls timed apart: the server's share is the proxy's cost. */
START_TEST(test_handshake_time)
{
	enum { ROUNDS = 300 };
	struct sni_env env;
	double side_us[2] = { 0, 0 }, t0 = now_us();

	env_init(&env, "api.example.test");
	for (int i = 0; i < ROUNDS; i++) {
		struct tls_session c, s;
		enum tls_session_status cs = TLS_SESSION_WANT_READ, ss = TLS_SESSION_WANT_READ;
		double t = now_us();
		ck_assert_int_eq(tls_session_client_init(&c, client_ctx, "api.example.test", 16),
				 0);
		side_us[0] += now_us() - t;
		t = now_us();
		ck_assert_int_eq(tls_session_server_init(&s, server_ctx, NULL, on_sni, &env), 0);
		side_us[1] += now_us() - t;
		for (int round = 0; round < 8 && (cs != TLS_SESSION_OK || ss != TLS_SESSION_OK);
		     round++) {
			t = now_us();
			cs = tls_session_handshake(&c);
			side_us[0] += now_us() - t;
			tt_pump(&c, &s);
			t = now_us();
			ss = tls_session_handshake(&s);
			side_us[1] += now_us() - t;
			tt_pump(&s, &c);
		}
		ck_assert_int_eq(cs, TLS_SESSION_OK);
		ck_assert_int_eq(ss, TLS_SESSION_OK);
		tls_session_destroy(&c);
		tls_session_destroy(&s);
	}
	double total = now_us() - t0;
	printf("handshake TLS 1.3 (leaf cached): %.1f us per pair in all; client side %.1f us, "
	       "server side %.1f us (%d rounds)\n",
	       total / ROUNDS, side_us[0] / ROUNDS, side_us[1] / ROUNDS, ROUNDS);
	ck_assert_uint_eq(env.cache.misses, 1);
	tls_leafcache_destroy(&env.cache);
}
END_TEST

static Suite *session_suite(void)
{
	Suite *s = suite_create("tls_session");
	TCase *tc = tcase_create("session");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_handshake_tls13);
	tcase_add_test(tc, test_handshake_tls12);
	tcase_add_test(tc, test_ip_literal);
	tcase_add_test(tc, test_hello_retry);
	tcase_add_test(tc, test_leaf_at_init);
	tcase_add_test(tc, test_wrong_name);
	tcase_add_test(tc, test_wrong_ip);
	tcase_add_test(tc, test_untrusted_ca);
	tcase_add_test(tc, test_sni_refused);
	tcase_add_test(tc, test_eof_without_close_notify);
	tcase_add_test(tc, test_foreign_leaf);
	tcase_add_test(tc, test_feed_bound);
	tcase_add_test(tc, test_large_transfer_backpressure);
	tcase_add_test(tc, test_out_peek_stable);
	tcase_add_test(tc, test_close_before_handshake);
	tcase_add_test(tc, test_client_bad_hosts);
	tcase_add_test(tc, test_client_ctx_bad_files);
	tcase_add_test(tc, test_concurrent_mint);
	tcase_add_test(tc, test_handshake_time);
	suite_add_tcase(s, tc);
	TCase *ta = tcase_create("abort");
	tcase_add_checked_fixture(ta, setup_no_files, teardown);
	tcase_add_test_raise_signal(ta, test_consume_too_much_aborts, SIGABRT);
	suite_add_tcase(s, ta);
	return s;
}

int main(void)
{
	return unit_run(session_suite());
}
