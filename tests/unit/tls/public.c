/*
 * Unit tests for the ingress gateway's TLS in tls/term.c: the operator's
 * certificate (tls_term_public_load) and the sessions of public_new.
 *
 * Each test makes a throwaway root CA, an intermediate and a leaf for
 * hooks.example.test with OpenSSL calls, writes the chain (leaf first) and
 * the key as an operator would, loads them, and runs public_new's session
 * through the term ops against a client session over memory, the client
 * trusting only the root: the handshake verifies only if the intermediate
 * was sent. Checked: the leaf and chain the client sees, data both ways and
 * close_notify, TLS 1.2 and 1.3, ALPN (http/1.1 offered with h2, none for
 * h2 alone), any SNI or none; every load error with its exact message
 * (missing, not a regular file, not PEM, a corrupt certificate in first or
 * second place, encrypted or mismatched key, expired, not yet valid, a key
 * OpenSSL refuses), the file size at N and N+1; engines with no CA (no
 * server_new, prime -ENOENT) and with both contexts.
 */
#include "../../../tls/term.c"

#include <check.h>
#include <stdarg.h>

#include "tests/unit/tls/tlstest.h"
#include "tests/unit/unit.h"

#define HOST "hooks.example.test"

static const struct term_ops *const ops = &tls_term_ops;

/* The good set every test starts from: root -> intermediate -> leaf. */
static EVP_PKEY *root_key, *inter_key, *leaf_key;
static X509 *root, *inter, *leaf;
static char root_pem[PATH_MAX], chain_pem[PATH_MAX], key_pem[PATH_MAX];
static SSL_CTX *root_ctx; /* trusts root_pem only */
static char err[1024];

/* <fmt> formatted into one of a few rotating buffers (valid until four more calls). */
__attribute__((format(printf, 1, 2))) static const char *textf(const char *fmt, ...)
{
	static char bufs[4][PATH_MAX + 256];
	static unsigned next;
	va_list ap;

	char *out = bufs[next++ % AN_ARRAY_LEN(bufs)];
	va_start(ap, fmt);
	int n = vsnprintf(out, sizeof(bufs[0]), fmt, ap);
	va_end(ap);
	ck_assert_int_ge(n, 0);
	ck_assert_int_lt(n, (int)sizeof(bufs[0]));
	return out;
}

/*
 * A certificate for <key>, CN <cn>, valid from <not_before> to <not_after>
 * (seconds since the epoch), signed by <issuer>/<issuer_key> (NULL:
 * self-signed); a CA, or a server leaf for HOST.
 */
static X509 *make_cert(EVP_PKEY *key, const char *cn, bool ca, X509 *issuer, EVP_PKEY *issuer_key,
		       time_t not_before, time_t not_after)
{
	X509 *x = tt_cert_new(key, cn, issuer, not_before, not_after);
	X509 *by = issuer != NULL ? issuer : x;

	tt_add_ext_by(x, by, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
	tt_add_ext_by(x, by, NID_key_usage,
		      ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
	tt_add_ext_by(x, by, NID_subject_key_identifier, "hash");
	if (issuer != NULL)
		tt_add_ext_by(x, by, NID_authority_key_identifier, "keyid:always");
	if (!ca) {
		tt_add_ext_by(x, by, NID_ext_key_usage, "serverAuth");
		tt_add_ext_by(x, by, NID_subject_alt_name, "DNS:" HOST);
	}
	ck_assert_int_gt(X509_sign(x, issuer_key != NULL ? issuer_key : key, EVP_sha256()), 0);
	return x;
}

/* A leaf for HOST with <key>, signed by the intermediate, valid from -1 h to +30 days. */
static X509 *make_leaf(EVP_PKEY *key)
{
	time_t now = time(NULL);

	return make_cert(key, HOST, false, inter, inter_key, now - 3600, now + 30 * 86400);
}

/* The chain file an operator installs: <l> then the intermediate. */
static void write_chain(const char *path, X509 *l)
{
	X509 *const certs[] = { l, inter };

	tt_write_pem(path, certs, 2, NULL, false);
}

static void setup(void)
{
	ck_assert_int_eq(tls_library_init(err, sizeof(err)), 0);
	tt_mkdir();
	time_t now = time(NULL);
	root_key = EVP_EC_gen("P-256");
	inter_key = EVP_EC_gen("P-256");
	leaf_key = EVP_EC_gen("P-256");
	ck_assert(root_key != NULL && inter_key != NULL && leaf_key != NULL);
	root = make_cert(root_key, "test root", true, NULL, NULL, now - 3600, now + 90 * 86400);
	inter = make_cert(inter_key, "test intermediate", true, root, root_key, now - 3600,
			  now + 60 * 86400);
	leaf = make_leaf(leaf_key);
	tt_write_pem(tt_path(root_pem, "root.pem"), &root, 1, NULL, false);
	write_chain(tt_path(chain_pem, "chain.pem"), leaf);
	tt_write_pem(tt_path(key_pem, "leaf.key"), NULL, 0, leaf_key, false);
	root_ctx = tls_session_client_ctx_new(root_pem, err, sizeof(err));
	ck_assert_msg(root_ctx != NULL, "%s", err);
}

static void teardown(void)
{
	SSL_CTX_free(root_ctx);
	X509_free(leaf);
	X509_free(inter);
	X509_free(root);
	EVP_PKEY_free(leaf_key);
	EVP_PKEY_free(inter_key);
	EVP_PKEY_free(root_key);
	tt_rmdir();
}

/* An engine with no CA and the public certificate <cert>/<key> loaded. */
static struct tls_term *open_public(const char *cert, const char *key)
{
	struct tls_term *e = NULL;

	ck_assert_int_eq(tls_term_open(NULL, NULL, 0, &e, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(e);
	int ret = tls_term_public_load(e, cert, key, err, sizeof(err));
	ck_assert_msg(ret == 0, "load: %d: %s", ret, err);
	ck_assert_ptr_nonnull(e->public_ctx);
	return e;
}

static void *worker_of(struct tls_term *e)
{
	void *w = ops->worker_new(e, 0, err, sizeof(err));

	ck_assert_msg(w != NULL, "%s", err);
	return w;
}

/* ---- Driving a term session against a client, through the ops only. ---- */

/* ops->handshake, its status as an int (struct tt_wire). */
static int term_handshake(void *srv)
{
	return (int)ops->handshake(srv);
}

/* A term session as the pump reaches it: through its ops only. */
static struct tt_wire term_wire(void)
{
	return (struct tt_wire){
		.out_peek = ops->out_peek,
		.out_consume = ops->out_consume,
		.feed = ops->feed,
		.handshake = term_handshake,
	};
}

/* Moves what the term session <srv> has to send into the client <c>; returns bytes moved. */
static size_t pump_out(void *srv, struct tls_session *c)
{
	struct tt_wire srv_wire = term_wire();

	return tt_move(&srv_wire, srv, &tt_session_wire, c);
}

/* Moves what the client <c> has to send into the term session <srv>. */
static size_t pump_in(struct tls_session *c, void *srv)
{
	struct tt_wire srv_wire = term_wire();

	return tt_move(&tt_session_wire, c, &srv_wire, srv);
}

/* Steps the client <c> and the term session <srv> until neither moves; their statuses. */
static void handshake(struct tls_session *c, void *srv, enum tls_session_status *cs,
		      enum term_status *ss)
{
	struct tt_wire srv_wire = term_wire();
	int c_status, s_status;

	tt_handshake_wire(&tt_session_wire, c, &c_status, &srv_wire, srv, &s_status);
	*cs = (enum tls_session_status)c_status;
	*ss = (enum term_status)s_status;
}

/* A client session on <cctx> for <host> against a fresh public_new of <w>, handshaken. */
static void *connect_public(void *w, SSL_CTX *cctx, const char *host, struct tls_session *c)
{
	enum tls_session_status cs;
	enum term_status ss;
	void *srv = ops->public_new(w);

	ck_assert_ptr_nonnull(srv);
	ck_assert_int_eq(tls_session_client_init(c, cctx, host, strlen(host)), 0);
	handshake(c, srv, &cs, &ss);
	ck_assert_msg(cs == TLS_SESSION_OK, "client %d: %s", cs, tls_session_error(c));
	ck_assert_msg(ss == TERM_OK, "server %d: %s", ss, ops->error(srv));
	return srv;
}

/* The ALPN protocol <s> agreed on, "" for none. */
static const char *alpn_of(const SSL *ssl)
{
	static char out[32];
	const unsigned char *p = NULL;
	unsigned int len = 0;

	SSL_get0_alpn_selected(ssl, &p, &len);
	ck_assert_uint_lt(len, sizeof(out));
	memcpy(out, p != NULL ? (const char *)p : "", len);
	out[len] = '\0';
	return out;
}

/* The client sees the operator's leaf, and the intermediate after it. */
static void expect_operator_chain(const struct tls_session *c)
{
	X509 *peer = SSL_get0_peer_certificate(c->ssl);
	STACK_OF(X509) *chain = SSL_get_peer_cert_chain(c->ssl);

	ck_assert_ptr_nonnull(peer);
	ck_assert_int_eq(X509_cmp(peer, leaf), 0);
	ck_assert_ptr_nonnull(chain);
	ck_assert_int_eq(sk_X509_num(chain), 2);
	ck_assert_int_eq(X509_cmp(sk_X509_value(chain, 1), inter), 0);
}

/* ---- Success. ---- */

static void run_exchange(SSL_CTX *cctx, int version)
{
	static const char req[] = "POST /callbacks/agent-1/hook HTTP/1.1\r\nHost: " HOST
				  "\r\nContent-Length: 2\r\n\r\nhi";
	static const char resp[] = "HTTP/1.1 204 No Content\r\n\r\n";
	char buf[256];
	struct tls_session c;
	size_t n = 0;

	struct tls_term *e = open_public(chain_pem, key_pem);
	void *w = worker_of(e);
	void *srv = connect_public(w, cctx, HOST, &c);
	ck_assert_int_eq(SSL_version(c.ssl), version);
	ck_assert(
	    tls_session_verified(&c)); /* through the intermediate: the root alone is trusted */
	expect_operator_chain(&c);
	ck_assert_str_eq(alpn_of(c.ssl), "http/1.1");
	ck_assert(!ops->sni_refused(srv));
	ck_assert_str_eq(ops->error(srv), "");
	/* Client to server. */
	ck_assert_int_eq(tls_session_write(&c, req, sizeof(req) - 1, &n), TLS_SESSION_OK);
	ck_assert_uint_eq(n, sizeof(req) - 1);
	pump_in(&c, srv);
	ck_assert_int_eq(ops->read(srv, buf, sizeof(buf), &n), TERM_OK);
	ck_assert_uint_eq(n, sizeof(req) - 1);
	ck_assert_int_eq(memcmp(buf, req, n), 0);
	ck_assert_int_eq(ops->read(srv, buf, sizeof(buf), &n), TERM_WANT_READ);
	/* Server to client. */
	ck_assert_int_eq(ops->write(srv, resp, sizeof(resp) - 1, &n), TERM_OK);
	ck_assert_uint_eq(n, sizeof(resp) - 1);
	pump_out(srv, &c);
	ck_assert_int_eq(tls_session_read(&c, buf, sizeof(buf), &n), TLS_SESSION_OK);
	ck_assert_uint_eq(n, sizeof(resp) - 1);
	ck_assert_int_eq(memcmp(buf, resp, n), 0);
	/* close_notify each way. */
	ck_assert_int_eq(ops->close(srv), TERM_OK);
	ck_assert_uint_gt(pump_out(srv, &c), 0);
	ck_assert_int_eq(tls_session_read(&c, buf, sizeof(buf), &n), TLS_SESSION_CLOSED);
	ck_assert_int_eq(tls_session_close(&c), TLS_SESSION_OK);
	ck_assert_uint_gt(pump_in(&c, srv), 0);
	ck_assert_int_eq(ops->read(srv, buf, sizeof(buf), &n), TERM_CLOSED);
	tls_session_destroy(&c);
	ops->session_free(srv);
	ops->worker_free(w);
	tls_term_close(&e);
	ck_assert_ptr_null(e);
}

START_TEST(test_exchange_tls13)
{
	run_exchange(root_ctx, TLS1_3_VERSION);
}
END_TEST

START_TEST(test_exchange_tls12)
{
	SSL_CTX *c12 = tls_session_client_ctx_new(root_pem, err, sizeof(err));

	ck_assert_ptr_nonnull(c12);
	ck_assert_int_eq(SSL_CTX_set_max_proto_version(c12, TLS1_2_VERSION), 1);
	run_exchange(c12, TLS1_2_VERSION);
	SSL_CTX_free(c12);
}
END_TEST

/* Nothing older than TLS 1.2 is taken, as on the terminated tiers. */
START_TEST(test_tls12_minimum)
{
	struct tls_term *e = open_public(chain_pem, key_pem);

	ck_assert_int_eq(SSL_CTX_get_min_proto_version(e->public_ctx), TLS1_2_VERSION);
	ck_assert_int_eq(SSL_CTX_get_max_proto_version(e->public_ctx), 0); /* up to TLS 1.3 */
	tls_term_close(&e);
}
END_TEST

/* ALPN: http/1.1 when offered beside h2, nothing when h2 is all the client speaks. */
START_TEST(test_alpn)
{
	static const unsigned char both[] = {
		2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'
	};
	static const unsigned char h2[] = { 2, 'h', '2' };
	static const struct {
		const unsigned char *protos;
		unsigned int len;
		const char *want;
	} cases[] = {
		{ both, sizeof(both), "http/1.1" },
		{ h2, sizeof(h2), "" },
		{ NULL, 0, "" }, /* no ALPN at all */
	};
	struct tls_term *e = open_public(chain_pem, key_pem);
	void *w = worker_of(e);

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		struct tls_session c;
		enum tls_session_status cs;
		enum term_status ss;
		void *srv = ops->public_new(w);

		ck_assert_ptr_nonnull(srv);
		ck_assert_int_eq(tls_session_client_init(&c, root_ctx, HOST, strlen(HOST)), 0);
		/* SSL_set_alpn_protos returns 0 on success. */
		ck_assert_int_eq(SSL_set_alpn_protos(c.ssl, cases[i].protos, cases[i].len), 0);
		handshake(&c, srv, &cs, &ss);
		ck_assert_msg(cs == TLS_SESSION_OK, "case %zu: %s", i, tls_session_error(&c));
		ck_assert_int_eq(ss, TERM_OK);
		ck_assert_str_eq(alpn_of(c.ssl), cases[i].want);
		ck_assert_str_eq(alpn_of(((struct tls_term_session *)srv)->s.ssl), cases[i].want);
		tls_session_destroy(&c);
		ops->session_free(srv);
	}
	ops->worker_free(w);
	tls_term_close(&e);
}
END_TEST

/* Any SNI, or none, gets the operator's chain: nothing is checked against it. */
START_TEST(test_any_sni)
{
	static const char *const hosts[] = { "other.example.net", "192.0.2.1", HOST };
	char cerr[256];
	SSL_CTX *nv = tls_session_client_ctx_new(root_pem, cerr, sizeof(cerr));
	struct tls_term *e = open_public(chain_pem, key_pem);
	void *w = worker_of(e);

	ck_assert_ptr_nonnull(nv);
	SSL_CTX_set_verify(nv, SSL_VERIFY_NONE, NULL); /* the name is the client's concern */
	for (size_t i = 0; i < AN_ARRAY_LEN(hosts); i++) {
		struct tls_session c;
		void *srv = connect_public(w, nv, hosts[i], &c);
		const char *sni = tls_session_sni(&((struct tls_term_session *)srv)->s);

		expect_operator_chain(&c);
		ck_assert(!ops->sni_refused(srv));
		if (i == 1)
			ck_assert_ptr_null(sni); /* RFC 6066: no SNI for an address */
		else
			ck_assert_str_eq(sni, hosts[i]);
		tls_session_destroy(&c);
		ops->session_free(srv);
	}
	ops->worker_free(w);
	tls_term_close(&e);
	SSL_CTX_free(nv);
}
END_TEST

/* One file holding the chain and the key serves as both (the key block is skipped as a cert). */
START_TEST(test_combined_file)
{
	char both[PATH_MAX];
	X509 *const certs[] = { leaf, inter };
	struct tls_session c;

	tt_write_pem(tt_path(both, "both.pem"), certs, 2, leaf_key, false);
	struct tls_term *e = open_public(both, both);
	void *w = worker_of(e);
	void *srv = connect_public(w, root_ctx, HOST, &c);
	ck_assert(tls_session_verified(&c));
	expect_operator_chain(&c);
	tls_session_destroy(&c);
	ops->session_free(srv);
	ops->worker_free(w);
	tls_term_close(&e);
}
END_TEST

/* A leaf alone (no intermediates) loads; a client that trusts only the root cannot verify it. */
START_TEST(test_leaf_only)
{
	char only[PATH_MAX];
	struct tls_session c;
	enum tls_session_status cs;
	enum term_status ss;

	tt_write_pem(tt_path(only, "leaf.pem"), &leaf, 1, NULL, false);
	struct tls_term *e = open_public(only, key_pem);
	void *w = worker_of(e);
	void *srv = ops->public_new(w);
	ck_assert_ptr_nonnull(srv);
	ck_assert_int_eq(tls_session_client_init(&c, root_ctx, HOST, strlen(HOST)), 0);
	handshake(&c, srv, &cs, &ss);
	ck_assert_int_eq(cs, TLS_SESSION_ERROR);
	ck_assert_str_eq(tls_session_error(&c),
			 "certificate verify failed: unable to get local issuer certificate");
	tls_session_destroy(&c);
	ops->session_free(srv);
	ops->worker_free(w);
	tls_term_close(&e);
}
END_TEST

/* ---- Engines without a CA, or with both contexts. ---- */

START_TEST(test_no_ca)
{
	struct tls_term *e = NULL;
	struct tls_session c;

	/* No CA, no public certificate: nothing to serve, the rest still works. */
	ck_assert_int_eq(tls_term_open(NULL, NULL, 0, &e, err, sizeof(err)), 0);
	ck_assert_ptr_null(e->ca);
	ck_assert_ptr_null(e->server_ctx);
	void *w = worker_of(e);
	ck_assert_ptr_null(ops->server_new(w, HOST, strlen(HOST)));
	ck_assert_int_eq(ops->prime(w, HOST, strlen(HOST)), -ENOENT);
	ck_assert_ptr_null(ops->public_new(w));
	void *up = ops->client_new(w, HOST, strlen(HOST), root_pem);
	ck_assert_ptr_nonnull(up);
	ops->session_free(up);
	ops->worker_free(w);
	tls_term_close(&e);
	/* No CA, a public certificate: public_new works, server_new still does not. */
	e = open_public(chain_pem, key_pem);
	w = worker_of(e);
	ck_assert_ptr_null(ops->server_new(w, HOST, strlen(HOST)));
	ck_assert_int_eq(ops->prime(w, HOST, strlen(HOST)), -ENOENT);
	void *srv = connect_public(w, root_ctx, HOST, &c);
	ck_assert(tls_session_verified(&c));
	tls_session_destroy(&c);
	ops->session_free(srv);
	ops->worker_free(w);
	tls_term_close(&e);
	ops->session_free(NULL);
	tls_term_close(&e); /* NULL accepted */
}
END_TEST

/* The agentsnet CA's context and the operator's, side by side in one engine. */
START_TEST(test_with_ca)
{
	char ca_pem[PATH_MAX], ca_key[PATH_MAX];
	struct tls_term *e = NULL;
	struct tls_session c, a;
	enum tls_session_status cs;
	enum term_status ss;

	tt_make_ca("ca", NULL, ca_pem, ca_key);
	ck_assert_int_eq(tls_term_open(ca_pem, ca_key, 0, &e, err, sizeof(err)), 0);
	ck_assert_int_eq(tls_term_public_load(e, chain_pem, key_pem, err, sizeof(err)), 0);
	void *w = worker_of(e);
	ck_assert_int_eq(ops->prime(w, "api.example.test", 16), 0);
	/* A terminated-tier session: the minted leaf, the SNI checked. */
	SSL_CTX *agent_ctx = tls_session_client_ctx_new(ca_pem, err, sizeof(err));
	ck_assert_ptr_nonnull(agent_ctx);
	void *tier = ops->server_new(w, "api.example.test", 16);
	ck_assert_ptr_nonnull(tier);
	ck_assert_int_eq(tls_session_client_init(&a, agent_ctx, "api.example.test", 16), 0);
	handshake(&a, tier, &cs, &ss);
	ck_assert_msg(cs == TLS_SESSION_OK, "%s", tls_session_error(&a));
	ck_assert_int_eq(ss, TERM_OK);
	ck_assert(tls_session_verified(&a));
	ck_assert_int_ne(X509_cmp(SSL_get0_peer_certificate(a.ssl), leaf), 0);
	/* The public session: the operator's chain. */
	void *srv = connect_public(w, root_ctx, HOST, &c);
	ck_assert(tls_session_verified(&c));
	expect_operator_chain(&c);
	tls_session_destroy(&c);
	tls_session_destroy(&a);
	ops->session_free(srv);
	ops->session_free(tier);
	ops->worker_free(w);
	SSL_CTX_free(agent_ctx);
	tls_term_close(&e);
}
END_TEST

/* ---- Load errors. ---- */

/*
 * Loads <cert>/<key> into a fresh engine, expecting <ret> and exactly the
 * message <want>; the engine is left without a public context and a later
 * good load still works.
 */
#define expect_load_error(cert, key, ret, want) \
	expect_load_error_at(__LINE__, (cert), (key), (ret), (want), false)
/* As expect_load_error, <want> being only the start of the message. */
#define expect_load_error_prefix(cert, key, ret, want) \
	expect_load_error_at(__LINE__, (cert), (key), (ret), (want), true)

static void expect_load_error_at(int line, const char *cert, const char *key, int ret,
				 const char *want, bool prefix)
{
	struct tls_term *e = NULL;

	ck_assert_int_eq(tls_term_open(NULL, NULL, 0, &e, err, sizeof(err)), 0);
	err[0] = '\0';
	int got = tls_term_public_load(e, cert, key, err, sizeof(err));
	ck_assert_msg(got == ret, "line %d: ret %d (want %d): %s", line, got, ret, err);
	if (prefix)
		ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
			      "line %d:\n  got  \"%s\"\n  want \"%s...\"", line, err, want);
	else
		ck_assert_msg(strcmp(err, want) == 0, "line %d:\n  got  \"%s\"\n  want \"%s\"",
			      line, err, want);
	ck_assert_ptr_null(strchr(err, '\n'));
	ck_assert_ptr_null(e->public_ctx);
	void *w = worker_of(e);
	ck_assert_ptr_null(ops->public_new(w));
	ops->worker_free(w);
	ck_assert_int_eq(tls_term_public_load(e, chain_pem, key_pem, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(e->public_ctx);
	tls_term_close(&e);
}

START_TEST(test_error_missing)
{
	char nope[PATH_MAX];

	tt_path(nope, "nope.pem");
	expect_load_error(nope, key_pem, -ENOENT,
			  textf("ingress.tls.cert %s: No such file or directory", nope));
	expect_load_error(chain_pem, nope, -ENOENT,
			  textf("ingress.tls.key %s: No such file or directory", nope));
	/* A directory is not a file. */
	expect_load_error(tt_dir, key_pem, -EINVAL,
			  textf("ingress.tls.cert %s: not a regular file", tt_dir));
	expect_load_error(chain_pem, tt_dir, -EINVAL,
			  textf("ingress.tls.key %s: not a regular file", tt_dir));
}
END_TEST

/* A key others may read or write, or another user's: refused at load, naming it and why. */
START_TEST(test_error_key_file_mode)
{
	char key[PATH_MAX];

	/* A key of its own: expect_load_error loads the good one again after each. */
	tt_write_pem(tt_path(key, "modes.key"), NULL, 0, leaf_key, false);
	ck_assert_int_eq(chmod(key, 0644), 0);
	expect_load_error(
	    chain_pem, key, -EPERM,
	    textf("ingress.tls.key %s: mode 0644: group or others may read it; chmod 600 it", key));
	ck_assert_int_eq(chmod(key, 0620), 0);
	expect_load_error(
	    chain_pem, key, -EPERM,
	    textf("ingress.tls.key %s: mode 0620: group or others may write it; chmod 600 it",
		  key));
	/* The certificate is public: its mode is not checked. */
	ck_assert_int_eq(chmod(key, 0600), 0);
	ck_assert_int_eq(chmod(chain_pem, 0644), 0);
	struct tls_term *e = NULL;
	ck_assert_int_eq(tls_term_open(NULL, NULL, 0, &e, err, sizeof(err)), 0);
	ck_assert_msg(tls_term_public_load(e, chain_pem, key, err, sizeof(err)) == 0, "%s", err);
	tls_term_close(&e);
	if (geteuid() != 0) {
		unit_skip("its other-owner case needs root");
		return;
	}
	ck_assert_int_eq(chown(key, 65534, 65534), 0);
	expect_load_error(chain_pem, key, -EPERM,
			  textf("ingress.tls.key %s: owned by uid 65534; the daemon runs as uid 0: "
				"chown it",
				key));
}
END_TEST

START_TEST(test_error_not_pem)
{
	static const char text[] = "this is not a certificate\n";
	static const char corrupt[] = "-----BEGIN CERTIFICATE-----\nAAAA!!!!\n"
				      "-----END CERTIFICATE-----\n";
	char bad[PATH_MAX], empty[PATH_MAX], keyonly[PATH_MAX], certonly[PATH_MAX];
	char second[PATH_MAX];

	tt_spit(tt_path(bad, "bad.pem"), text, sizeof(text) - 1);
	tt_spit(tt_path(empty, "empty.pem"), "", 0);
	tt_write_pem(tt_path(keyonly, "keyonly.pem"), NULL, 0, leaf_key, false);
	tt_write_pem(tt_path(certonly, "certonly.pem"), &leaf, 1, NULL, false);
	const char *msg = "no PEM certificate in the file";
	expect_load_error(bad, key_pem, -EINVAL, textf("ingress.tls.cert %s: %s", bad, msg));
	expect_load_error(empty, key_pem, -EINVAL, textf("ingress.tls.cert %s: %s", empty, msg));
	expect_load_error(keyonly, key_pem, -EINVAL,
			  textf("ingress.tls.cert %s: %s", keyonly, msg));
	msg = "no PEM private key in the file";
	expect_load_error(chain_pem, bad, -EINVAL, textf("ingress.tls.key %s: %s", bad, msg));
	expect_load_error(chain_pem, empty, -EINVAL, textf("ingress.tls.key %s: %s", empty, msg));
	expect_load_error(chain_pem, certonly, -EINVAL,
			  textf("ingress.tls.key %s: %s", certonly, msg));
	/* A key block that does not decode. */
	static const char broken[] = "-----BEGIN PRIVATE KEY-----\nMIIBAAAA\n"
				     "-----END PRIVATE KEY-----\n";
	tt_spit(bad, broken, sizeof(broken) - 1);
	expect_load_error_prefix(
	    chain_pem, bad, -EINVAL,
	    textf("ingress.tls.key %s: the private key does not parse: ", bad));
	/* A PEM block that does not decode: first, or after a good leaf. */
	tt_spit(bad, corrupt, sizeof(corrupt) - 1);
	expect_load_error_prefix(bad, key_pem, -EINVAL,
				 textf("ingress.tls.cert %s: certificate 1 of the file does not "
				       "parse: ",
				       bad));
	tt_write_pem(tt_path(second, "second.pem"), &leaf, 1, NULL, false);
	FILE *f = fopen(second, "a");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputs(corrupt, f), 1);
	ck_assert_int_eq(fclose(f), 0);
	expect_load_error_prefix(second, key_pem, -EINVAL,
				 textf("ingress.tls.cert %s: certificate 2 of the file does not "
				       "parse: ",
				       second));
}
END_TEST

START_TEST(test_error_key)
{
	char other[PATH_MAX], rsa[PATH_MAX], enc[PATH_MAX];
	EVP_PKEY *k = EVP_EC_gen("P-256");
	EVP_PKEY *r = EVP_RSA_gen(2048);

	ck_assert(k != NULL && r != NULL);
	tt_write_pem(tt_path(other, "other.key"), NULL, 0, k, false);
	tt_write_pem(tt_path(rsa, "rsa.key"), NULL, 0, r, false);
	expect_load_error(chain_pem, other, -EINVAL,
			  textf("ingress.tls.key %s: the key does not match the certificate (the "
				"first of ingress.tls.cert %s)",
				other, chain_pem));
	/* Another type of key altogether. */
	expect_load_error(chain_pem, rsa, -EINVAL,
			  textf("ingress.tls.key %s: the key does not match the certificate (the "
				"first of ingress.tls.cert %s)",
				rsa, chain_pem));
	/* The intermediate's key is not the leaf's, though the file holds its certificate. */
	tt_write_pem(other, NULL, 0, inter_key, false);
	expect_load_error(chain_pem, other, -EINVAL,
			  textf("ingress.tls.key %s: the key does not match the certificate (the "
				"first of ingress.tls.cert %s)",
				other, chain_pem));
	/* Encrypted: the daemon never prompts. */
	tt_write_pem(tt_path(enc, "enc.key"), NULL, 0, leaf_key, true);
	expect_load_error(
	    chain_pem, enc, -EINVAL,
	    textf("ingress.tls.key %s: encrypted; the daemon needs an unencrypted key", enc));
	EVP_PKEY_free(k);
	EVP_PKEY_free(r);
}
END_TEST

START_TEST(test_error_validity)
{
	char path[PATH_MAX];

	/* Expired on 2026-01-01 00:00:00 UTC (1767225600), valid from 2025-01-01. */
	X509 *old = make_cert(leaf_key, HOST, false, inter, inter_key, 1735689600, 1767225600);
	write_chain(tt_path(path, "old.pem"), old);
	expect_load_error(path, key_pem, -EKEYEXPIRED,
			  textf("ingress.tls.cert %s: expired on 2026-01-01 00:00:00 UTC", path));
	X509_free(old);
	/* notAfter is the last valid second: one that ended a second ago has expired. */
	time_t now = time(NULL);
	old = make_cert(leaf_key, HOST, false, inter, inter_key, now - 86400, now - 1);
	write_chain(path, old);
	expect_load_error_prefix(path, key_pem, -EKEYEXPIRED,
				 textf("ingress.tls.cert %s: expired on ", path));
	X509_free(old);
	/* Not valid before 2100-01-01 (4102444800). */
	X509 *early = make_cert(leaf_key, HOST, false, inter, inter_key, 4102444800, 4133980800);
	write_chain(tt_path(path, "early.pem"), early);
	expect_load_error(path, key_pem, -EINVAL,
			  textf("ingress.tls.cert %s: not valid before 2100-01-01 00:00:00 UTC "
				"(is the clock right?)",
				path));
	X509_free(early);
	/* Valid from a second ago to an hour ahead: loads. */
	X509 *fresh = make_cert(leaf_key, HOST, false, inter, inter_key, now - 1, now + 3600);
	write_chain(path, fresh);
	struct tls_term *e = open_public(path, key_pem);
	tls_term_close(&e);
	X509_free(fresh);
}
END_TEST

/* A chain OpenSSL's security level refuses (a 1024-bit RSA leaf) fails the load, not a client. */
START_TEST(test_error_weak_key)
{
	char cert[PATH_MAX], key[PATH_MAX];
	EVP_PKEY *weak = EVP_RSA_gen(1024);

	ck_assert_ptr_nonnull(weak);
	X509 *l = make_leaf(weak);
	write_chain(tt_path(cert, "weak.pem"), l);
	tt_write_pem(tt_path(key, "weak.key"), NULL, 0, weak, false);
	expect_load_error_prefix(cert, key, -EINVAL,
				 textf("ingress.tls.cert %s: not usable: ", cert));
	printf("weak key: %s\n", err);
	X509_free(l);
	EVP_PKEY_free(weak);
}
END_TEST

/* Writes <pem>/<len> padded with comment lines to exactly <size> bytes into <path>. */
static void write_padded(const char *path, const char *pem, size_t len, size_t size)
{
	char *buf = pool_malloc(size);

	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_lt(len, size);
	memcpy(buf, pem, len);
	for (size_t i = len; i < size; i++)
		buf[i] = (i - len) % 64 == 63 ? '\n' : 'x';
	buf[size - 1] = '\n';
	tt_spit(path, buf, size);
	pool_free(buf);
}

/* Each file at TLS_TERM_PUBLIC_FILE_BYTES_MAX loads, one byte more is refused. */
START_TEST(test_file_size_limit)
{
	char cert[PATH_MAX], key[PATH_MAX];
	size_t chain_len = 0, key_len = 0;
	char *chain = unit_slurp(chain_pem, &chain_len);
	char *k = unit_slurp(key_pem, &key_len);

	ck_assert_uint_eq(TLS_TERM_PUBLIC_FILE_BYTES_MAX, 65536);
	write_padded(tt_path(cert, "big.pem"), chain, chain_len, TLS_TERM_PUBLIC_FILE_BYTES_MAX);
	write_padded(tt_path(key, "big.key"), k, key_len, TLS_TERM_PUBLIC_FILE_BYTES_MAX);
	struct tls_term *e = open_public(cert, key);
	tls_term_close(&e);
	write_padded(cert, chain, chain_len, TLS_TERM_PUBLIC_FILE_BYTES_MAX + 1);
	expect_load_error(cert, key_pem, -EFBIG,
			  textf("ingress.tls.cert %s: 65537 bytes, more than 65536", cert));
	write_padded(key, k, key_len, TLS_TERM_PUBLIC_FILE_BYTES_MAX + 1);
	expect_load_error(chain_pem, key, -EFBIG,
			  textf("ingress.tls.key %s: 65537 bytes, more than 65536", key));
	pool_free_secret(k, key_len + 1);
	pool_free(chain);
}
END_TEST

static Suite *public_suite(void)
{
	Suite *s = suite_create("tls/public");
	TCase *tc = tcase_create("public");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_exchange_tls13);
	tcase_add_test(tc, test_exchange_tls12);
	tcase_add_test(tc, test_tls12_minimum);
	tcase_add_test(tc, test_alpn);
	tcase_add_test(tc, test_any_sni);
	tcase_add_test(tc, test_combined_file);
	tcase_add_test(tc, test_leaf_only);
	tcase_add_test(tc, test_no_ca);
	tcase_add_test(tc, test_with_ca);
	tcase_add_test(tc, test_error_missing);
	tcase_add_test(tc, test_error_key_file_mode);
	tcase_add_test(tc, test_error_not_pem);
	tcase_add_test(tc, test_error_key);
	tcase_add_test(tc, test_error_validity);
	tcase_add_test(tc, test_error_weak_key);
	tcase_add_test(tc, test_file_size_limit);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(public_suite());
}
