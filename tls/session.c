/*
 * TLS sessions over a BIO pair, so io_uring owns every socket.
 *
 * Each session is an SSL whose read and write BIO is one half of a BIO pair
 * (BIO_new_bio_pair, TLS_SESSION_NET_BYTES each way, allocated once at init);
 * the caller holds the other half. Received ciphertext is copied in with
 * BIO_write (bounded by the free space), and ciphertext to send is shown in
 * place with BIO_nread0 and released with BIO_nread: no copy out, no
 * allocation per record here, and a full buffer is back-pressure
 * (WANT_WRITE), never growth. Rejected: BIO_s_mem (grows without bound and
 * can only be drained by copying) and a custom BIO method (more code for one
 * copy of the inbound bytes).
 *
 * Server: the SNI callback (servername, run while the ClientHello is
 * processed, before the certificate is chosen) hands the name to the caller,
 * which picks the leaf or refuses; OpenSSL parses the extension, so there is
 * no hand-written ClientHello parser here. Client: SNI and the expected name
 * (SSL_set1_host, or the IP through the verify parameters) are set before
 * the first flight, verification is mandatory, and a failure's text comes
 * from the verify result so the 502 can say why.
 *
 * OpenSSL's per-thread error queue is cleared before every call (so
 * SSL_get_error reads this call's failure) and after each failure is turned
 * into text. A failure is sticky: no later call reaches OpenSSL, so no
 * application data can follow a failed verification.
 * Later: kernel TLS after the handshake (docs/design.md section 6) replaces the
 * record layer here; these calls stay the fallback.
 */
#include "tls/session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/an.h"
#include "core/limits.h"
#include "tls/ca.h"
#include "tls/tls.h"

/* ALPN wire form: length-prefixed protocol names. Only HTTP/1.1 for now. */
static const unsigned char session_alpn[] = { 8, 'h', 't', 't', 'p', '/', '1', '.', '1' };

static_assert(TLS_SESSION_NET_BYTES <= INT_MAX, "BIO calls take int lengths");

/* Turns the failure into text (the first one wins) and makes it sticky. */
static enum tls_session_status fail(struct tls_session *s, int ssl_err, const char *op)
{
	AN_ASSERT(op != NULL);
	AN_ASSERT(s->ssl != NULL);
	s->failed = true;
	if (s->err[0] == '\0') {
		long vr = SSL_get_verify_result(s->ssl);
		unsigned long e = ERR_peek_error();
		const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;
		if (!s->server && vr != X509_V_OK)
			snprintf(s->err, sizeof(s->err), "certificate verify failed: %s",
				 X509_verify_cert_error_string(vr));
		else if (reason != NULL)
			snprintf(s->err, sizeof(s->err), "TLS %s: %s", op, reason);
		else if (ssl_err == SSL_ERROR_SYSCALL || ssl_err == SSL_ERROR_SSL)
			snprintf(s->err, sizeof(s->err),
				 "TLS %s: the peer closed without close_notify", op);
		else
			snprintf(s->err, sizeof(s->err), "TLS %s: failed (SSL error %d)", op,
				 ssl_err);
	}
	ERR_clear_error();
	return TLS_SESSION_ERROR;
}

/* What an OpenSSL call that returned <ret> means for the caller. */
static enum tls_session_status status_of(struct tls_session *s, int ret, const char *op)
{
	int e = SSL_get_error(s->ssl, ret);

	AN_ASSERT(ret <= 0);
	AN_ASSERT(!s->failed);
	switch (e) {
	case SSL_ERROR_WANT_READ:
		return TLS_SESSION_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return TLS_SESSION_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		s->read_closed = true;
		ERR_clear_error();
		return TLS_SESSION_CLOSED;
	default:
		return fail(s, e, op);
	}
}

/* Both ends: TLS 1.2+, no renegotiation, partial and moving writes, plaintext wiped. */
static int ctx_common(SSL_CTX *ctx, char *err, size_t err_len)
{
	AN_ASSERT(ctx != NULL);
	AN_ASSERT(err != NULL || err_len == 0);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
		return tls_fail_ossl(err, err_len, "SSL_CTX_set_min_proto_version");
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CLEANSE_PLAINTEXT |
				     SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	return 0;
}

static int on_servername(SSL *ssl, int *alert, void *arg)
{
	struct tls_session *s = SSL_get_app_data(ssl);

	(void)arg;
	AN_ASSERT(s != NULL);
	AN_ASSERT(s->server);
	if (s->on_sni == NULL)
		return SSL_TLSEXT_ERR_OK;
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	int ret = s->on_sni(s, name, name != NULL ? strlen(name) : 0, s->sni_arg);
	if (ret == 0)
		return SSL_TLSEXT_ERR_OK;
	AN_ASSERT(ret < 0);
	/* The name came from the network: it stays out of the text; tls_session_sni has it. */
	snprintf(s->err, sizeof(s->err), "TLS handshake: server name refused (%s)", strerror(-ret));
	*alert = SSL_AD_UNRECOGNIZED_NAME;
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* HTTP/1.1 when the client offers it; otherwise no ALPN at all (HTTP/1.1 by default). */
static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *out_len,
		   const unsigned char *in, unsigned int in_len, void *arg)
{
	unsigned char *sel = NULL;

	(void)ssl;
	(void)arg;
	AN_ASSERT(out != NULL);
	AN_ASSERT(in != NULL || in_len == 0);
	if (SSL_select_next_proto(&sel, out_len, session_alpn, sizeof(session_alpn), in, in_len) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

SSL_CTX *tls_session_server_ctx_new(const struct tls_ca *ca, char *err, size_t err_len)
{
	AN_ASSERT(err != NULL || err_len == 0);
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (ctx == NULL) {
		tls_fail_ossl(err, err_len, "SSL_CTX_new (server)");
		return NULL;
	}
	int ret = ctx_common(ctx, err, err_len);
	/* The key goes in with each leaf (tls_session_set_leaf): installing it here too
	 * would make OpenSSL re-derive parameters on every certificate it is given.
	 * Without a CA the caller installs its own certificate and key instead. */
	if (ret == 0 && ca != NULL && SSL_CTX_set_app_data(ctx, tls_ca_leaf_key(ca)) != 1)
		ret = tls_fail_ossl(err, err_len, "SSL_CTX_set_app_data");
	if (ret == 0 && SSL_CTX_set_num_tickets(ctx, 1) != 1)
		ret = tls_fail_ossl(err, err_len, "SSL_CTX_set_num_tickets");
	if (ret != 0) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
	/* Stateful resumption would grow a per-context cache; TLS 1.3 tickets need none. */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_tlsext_servername_callback(ctx, on_servername);
	SSL_CTX_set_alpn_select_cb(ctx, on_alpn, NULL);
	AN_ASSERT(SSL_CTX_get_min_proto_version(ctx) == TLS1_2_VERSION);
	return ctx;
}

static int load_roots(SSL_CTX *ctx, const char *ca_file, char *err, size_t err_len)
{
	AN_ASSERT(ctx != NULL);
	AN_ASSERT(err != NULL || err_len == 0);
	if (ca_file == NULL) {
		if (SSL_CTX_set_default_verify_paths(ctx) != 1)
			return tls_fail_ossl(err, err_len, "system roots");
		return 0;
	}
	if (access(ca_file, R_OK) == -1)
		return tls_fail(err, err_len, -errno, "upstream CA file %s: %s", ca_file,
				strerror(errno));
	if (SSL_CTX_load_verify_file(ctx, ca_file) != 1) {
		char what[PATH_MAX + 64];
		snprintf(what, sizeof(what), "upstream CA file %s: no PEM certificate loaded",
			 ca_file);
		tls_fail_ossl(err, err_len, what);
		return -EINVAL;
	}
	return 0;
}

SSL_CTX *tls_session_client_ctx_new(const char *ca_file, char *err, size_t err_len)
{
	AN_ASSERT(err != NULL || err_len == 0);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL) {
		tls_fail_ossl(err, err_len, "SSL_CTX_new (client)");
		return NULL;
	}
	int ret = ctx_common(ctx, err, err_len);
	if (ret == 0)
		ret = load_roots(ctx, ca_file, err, err_len);
	/* SSL_CTX_set_alpn_protos returns 0 on success. */
	if (ret == 0 && SSL_CTX_set_alpn_protos(ctx, session_alpn, sizeof(session_alpn)) != 0)
		ret = tls_fail_ossl(err, err_len, "SSL_CTX_set_alpn_protos");
	if (ret != 0) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	X509_VERIFY_PARAM_set_hostflags(SSL_CTX_get0_param(ctx),
					X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	AN_ASSERT(SSL_CTX_get_verify_mode(ctx) == SSL_VERIFY_PEER);
	return ctx;
}

/* The SSL and the BIO pair; on failure nothing is left to destroy. */
static int session_init(struct tls_session *s, SSL_CTX *ctx, bool server)
{
	BIO *inner = NULL;

	AN_ASSERT(s != NULL);
	AN_ASSERT(ctx != NULL);
	memset(s, 0, sizeof(*s));
	s->server = server;
	s->ssl = SSL_new(ctx);
	if (s->ssl == NULL ||
	    BIO_new_bio_pair(&inner, TLS_SESSION_NET_BYTES, &s->net, TLS_SESSION_NET_BYTES) != 1) {
		tls_fail_ossl(s->err, sizeof(s->err), "TLS session");
		SSL_free(s->ssl);
		s->ssl = NULL;
		return -ENOMEM;
	}
	SSL_set_bio(s->ssl, inner, inner); /* one reference, taken by the SSL */
	SSL_set_app_data(s->ssl, s);
	if (server)
		SSL_set_accept_state(s->ssl);
	else
		SSL_set_connect_state(s->ssl);
	return 0;
}

/* Keeps the error text for the caller, releases the rest. */
static int session_init_fail(struct tls_session *s, int ret)
{
	char err[TLS_SESSION_ERR_BYTES];

	AN_ASSERT(ret < 0);
	AN_ASSERT(s->ssl != NULL);
	memcpy(err, s->err, sizeof(err));
	tls_session_destroy(s);
	memcpy(s->err, err, sizeof(err));
	s->failed = true;
	return ret;
}

int tls_session_server_init(struct tls_session *s, SSL_CTX *ctx, X509 *leaf,
			    tls_session_sni_fn on_sni, void *arg)
{
	int ret = session_init(s, ctx, true);

	AN_ASSERT(on_sni != NULL || arg == NULL);
	if (ret != 0)
		return ret;
	s->on_sni = on_sni;
	s->sni_arg = arg;
	if (leaf != NULL) {
		ret = tls_session_set_leaf(s, leaf);
		if (ret != 0)
			return session_init_fail(s, ret);
	}
	AN_ASSERT(s->server);
	return 0;
}

/* The expected name: SNI and a dNSName check, or an iPAddress check and no SNI. */
static int set_peer_name(struct tls_session *s, const char *name)
{
	unsigned char addr[16];

	AN_ASSERT(name != NULL);
	AN_ASSERT(!s->server);
	X509_VERIFY_PARAM *param = SSL_get0_param(s->ssl);
	size_t addr_len = 0;
	if (inet_pton(AF_INET, name, addr) == 1)
		addr_len = 4;
	else if (inet_pton(AF_INET6, name, addr) == 1)
		addr_len = 16;
	bool ok = addr_len > 0 ? X509_VERIFY_PARAM_set1_ip(param, addr, addr_len) == 1
			       : SSL_set_tlsext_host_name(s->ssl, name) == 1 &&
				     SSL_set1_host(s->ssl, name) == 1;
	if (!ok)
		return tls_fail_ossl(s->err, sizeof(s->err), "TLS session: expected peer name");
	return 0;
}

int tls_session_client_init(struct tls_session *s, SSL_CTX *ctx, const char *host, size_t host_len)
{
	char name[LIMITS_HOST_BYTES_MAX + 1];

	AN_ASSERT(host != NULL || host_len == 0);
	AN_ASSERT(ctx != NULL);
	if (host_len == 0 || host_len > LIMITS_HOST_BYTES_MAX || memchr(host, '\0', host_len)) {
		memset(s, 0, sizeof(*s));
		snprintf(s->err, sizeof(s->err), "TLS session: bad upstream host (%zu bytes)",
			 host_len);
		s->failed = true;
		return -EINVAL;
	}
	memcpy(name, host, host_len);
	name[host_len] = '\0';
	int ret = session_init(s, ctx, false);
	if (ret == 0)
		ret = set_peer_name(s, name);
	if (ret != 0 && s->ssl != NULL)
		return session_init_fail(s, ret);
	return ret;
}

void tls_session_destroy(struct tls_session *s)
{
	AN_ASSERT(s != NULL);
	AN_ASSERT(s->ssl != NULL || s->net == NULL);
	SSL_free(s->ssl); /* and the inner BIO half */
	BIO_free(s->net);
	memset(s, 0, sizeof(*s));
}

int tls_session_set_leaf(struct tls_session *s, X509 *leaf)
{
	AN_ASSERT(s->server);
	AN_ASSERT(leaf != NULL);
	EVP_PKEY *key = SSL_CTX_get_app_data(SSL_get_SSL_CTX(s->ssl));
	AN_ASSERT(key != NULL);
	/* Refuses (PRIVATE_KEY_MISMATCH) a leaf that does not carry the key. */
	if (SSL_use_cert_and_key(s->ssl, leaf, key, NULL, 1) != 1) {
		ERR_clear_error();
		snprintf(s->err, sizeof(s->err), "TLS session: leaf does not carry the leaf key");
		return -EINVAL;
	}
	return 0;
}

ssize_t tls_session_feed(struct tls_session *s, const void *buf, size_t len)
{
	AN_ASSERT(s->net != NULL);
	AN_ASSERT(buf != NULL || len == 0);
	if (s->eof_fed)
		return -EPIPE;
	size_t room = BIO_ctrl_get_write_guarantee(s->net);
	size_t n = len < room ? len : room;
	if (n == 0)
		return 0;
	AN_ASSERT(n <= TLS_SESSION_NET_BYTES);
	int w = BIO_write(s->net, buf, (int)n);
	AN_ASSERT(w == (int)n);
	return (ssize_t)n;
}

void tls_session_feed_eof(struct tls_session *s)
{
	AN_ASSERT(s->net != NULL);
	AN_ASSERT(s->ssl != NULL);
	if (!s->eof_fed)
		BIO_shutdown_wr(s->net);
	s->eof_fed = true;
}

enum tls_session_status tls_session_handshake(struct tls_session *s)
{
	AN_ASSERT(s->ssl != NULL);
	AN_ASSERT(!s->handshake_done || SSL_is_init_finished(s->ssl));
	if (s->failed)
		return TLS_SESSION_ERROR;
	if (s->handshake_done)
		return TLS_SESSION_OK;
	ERR_clear_error();
	int ret = SSL_do_handshake(s->ssl);
	if (ret != 1)
		return status_of(s, ret, "handshake");
	s->handshake_done = true;
	return TLS_SESSION_OK;
}

enum tls_session_status tls_session_read(struct tls_session *s, void *buf, size_t cap, size_t *n)
{
	AN_ASSERT(buf != NULL);
	AN_ASSERT(cap > 0);
	*n = 0;
	if (s->failed)
		return TLS_SESSION_ERROR;
	if (s->read_closed)
		return TLS_SESSION_CLOSED;
	enum tls_session_status st = tls_session_handshake(s);
	if (st != TLS_SESSION_OK)
		return st;
	ERR_clear_error();
	if (SSL_read_ex(s->ssl, buf, cap, n) == 1)
		return TLS_SESSION_OK;
	AN_ASSERT(*n == 0);
	return status_of(s, 0, "read");
}

enum tls_session_status tls_session_write(struct tls_session *s, const void *buf, size_t len,
					  size_t *n)
{
	AN_ASSERT(buf != NULL || len == 0);
	AN_ASSERT(n != NULL);
	*n = 0;
	/* The handshake first, explicitly: nothing is encrypted for an unverified peer. */
	enum tls_session_status st = tls_session_handshake(s);
	if (st != TLS_SESSION_OK || len == 0)
		return st;
	ERR_clear_error();
	if (SSL_write_ex(s->ssl, buf, len, n) == 1)
		return TLS_SESSION_OK;
	*n = 0;
	return status_of(s, 0, "write");
}

enum tls_session_status tls_session_close(struct tls_session *s)
{
	AN_ASSERT(s->ssl != NULL);
	AN_ASSERT(!s->close_sent || s->handshake_done);
	if (s->failed)
		return TLS_SESSION_ERROR;
	if (!s->handshake_done || s->close_sent)
		return TLS_SESSION_OK;
	ERR_clear_error();
	int ret = SSL_shutdown(s->ssl);
	if (ret < 0)
		return status_of(s, ret, "close");
	s->close_sent = true;
	return TLS_SESSION_OK;
}

size_t tls_session_out_peek(struct tls_session *s, const uint8_t **data)
{
	char *p = NULL;

	AN_ASSERT(s->net != NULL);
	AN_ASSERT(data != NULL);
	int n = BIO_nread0(s->net, &p);
	if (n <= 0) {
		*data = NULL;
		s->out_peeked = 0;
		return 0;
	}
	AN_ASSERT(p != NULL);
	*data = (const uint8_t *)p;
	s->out_peeked = (size_t)n;
	return (size_t)n;
}

void tls_session_out_consume(struct tls_session *s, size_t n)
{
	char *p = NULL;

	AN_ASSERT(n <= s->out_peeked);
	AN_ASSERT(s->net != NULL);
	if (n == 0)
		return;
	int done = BIO_nread(s->net, &p, (int)n);
	AN_ASSERT(done == (int)n);
	s->out_peeked -= n;
}

size_t tls_session_out_pending(const struct tls_session *s)
{
	AN_ASSERT(s->net != NULL);
	return BIO_ctrl_pending(s->net);
}

bool tls_session_established(const struct tls_session *s)
{
	AN_ASSERT(s != NULL);
	return s->handshake_done;
}

bool tls_session_idle(struct tls_session *s)
{
	AN_ASSERT(s->ssl != NULL);
	AN_ASSERT(s->net != NULL);
	if (!s->handshake_done || s->failed || s->eof_fed || s->read_closed || s->close_sent)
		return false;
	return BIO_ctrl_pending(s->net) == 0 && BIO_ctrl_pending(SSL_get_rbio(s->ssl)) == 0 &&
	       SSL_has_pending(s->ssl) == 0;
}

const char *tls_session_error(const struct tls_session *s)
{
	AN_ASSERT(s != NULL);
	return s->err;
}

const char *tls_session_sni(const struct tls_session *s)
{
	AN_ASSERT(s->ssl != NULL);
	return SSL_get_servername(s->ssl, TLSEXT_NAMETYPE_host_name);
}

bool tls_session_verified(const struct tls_session *s)
{
	AN_ASSERT(s->ssl != NULL);
	if (s->server || !s->handshake_done || s->failed)
		return false;
	return SSL_get_verify_result(s->ssl) == X509_V_OK && SSL_get0_peer_certificate(s->ssl);
}
