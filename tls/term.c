/*
 * The engine's TLS termination: core/term.h over tls/session.h.
 *
 * One server SSL_CTX for the whole daemon (OpenSSL contexts may be shared by
 * threads once set up) and, per worker, a leaf cache (tls/leafcache.h), so
 * the data path takes no lock. A session remembers the host the client gave
 * to CONNECT, in normal form (ASCII lower case, one trailing dot dropped):
 * the ClientHello's SNI must be that host, or absent (clients send none for
 * IP literals), and the leaf shown is minted for it. A different SNI refuses
 * the handshake (an unrecognized_name alert) and is remembered, so the
 * engine can audit it as sni_mismatch. The cache counts its hits and misses;
 * the worker state adds the mints, and term_ops.counters hands the three to
 * the worker, which publishes them (the control socket's `stats`).
 *
 * The ingress gateway's public listener has a second server SSL_CTX holding
 * the operator's own chain and key, read once at start (the files are read
 * with open/read, so a failure names the file and the errno, and the key's
 * bytes are wiped once parsed); its sessions check no SNI: the public name
 * is the operator's business, not a policy decision. Either context may be
 * absent: a daemon with a gateway certificate and no CA has only the second.
 *
 * Rejected: minting the leaf before the ClientHello arrives (a client that
 * only probes would cost a signature for nothing; the cache makes the
 * callback cheap), one SSL_CTX per leaf (80 us and kilobytes each), and
 * SSL_CTX_use_PrivateKey_file for the operator's key (stdio buffers it
 * cannot wipe).
 */
#include "tls/term.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/an.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/pool.h"
#include "tls/ca.h"
#include "tls/leafcache.h"
#include "tls/session.h"
#include "tls/tls.h"

struct tls_term {
	struct tls_ca *ca;   /* owned; NULL: no CA, no terminated tiers */
	SSL_CTX *server_ctx; /* owned; NULL without a CA */
	SSL_CTX *public_ctx; /* owned; the operator's chain, NULL until tls_term_public_load */
};

/* Client contexts by roots file: rules name few, so a short list will do. */
#define TLS_TERM_CLIENT_CTX_MAX 16u

struct tls_term_client_ctx {
	char *ca_file; /* owned; NULL: the system roots */
	SSL_CTX *ctx;  /* owned */
};

struct tls_term_worker {
	struct tls_term *engine; /* borrowed */
	struct tls_leafcache leaves;
	uint64_t mints; /* leaves leaf_get signed into <leaves> */
	uint32_t client_count;
	struct tls_term_client_ctx clients[TLS_TERM_CLIENT_CTX_MAX];
};

struct tls_term_session {
	struct tls_session s; /* must not move: OpenSSL holds its address */
	struct tls_term_worker *w;
	bool sni_refused;
	uint16_t host_len;
	char host[LIMITS_HOST_BYTES_MAX + 1];
};

int tls_term_open(const char *cert_path, const char *key_path, uint32_t leaf_days,
		  struct tls_term **out, char *err, size_t cap)
{
	AN_ASSERT((cert_path == NULL) == (key_path == NULL));
	AN_ASSERT(out != NULL);
	*out = NULL;
	struct tls_term *e = pool_calloc(1, sizeof(*e));
	if (e == NULL)
		return -ENOMEM;
	if (cert_path == NULL) {
		*out = e;
		return 0;
	}
	int ret = tls_ca_load(cert_path, key_path, leaf_days ? leaf_days : TLS_CA_LEAF_DAYS_DEFAULT,
			      &e->ca, err, cap);
	if (ret == 0) {
		e->server_ctx = tls_session_server_ctx_new(e->ca, err, cap);
		ret = e->server_ctx != NULL ? 0 : -EIO;
	}
	if (ret != 0) {
		tls_term_close(&e);
		return ret;
	}
	*out = e;
	return 0;
}

int tls_term_ktls_probe(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	/* The ULP needs an established socket: a kernel that has it says so. */
	int ret = setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls")) == 0 ? 0 : -errno;
	close(fd);
	AN_ASSERT(ret <= 0);
	return ret == 0 || ret == -ENOTCONN ? 0 : ret;
}

void tls_term_close(struct tls_term **e)
{
	if (*e == NULL)
		return;
	SSL_CTX_free((*e)->public_ctx);
	SSL_CTX_free((*e)->server_ctx);
	tls_ca_free(&(*e)->ca);
	AN_FREE(e);
}

/* --- the public listener's certificate (daemon.ingress.tls) ------------------- */

/* What an error calls each file: the policy keys that name them. */
#define PUBLIC_CERT "ingress.tls.cert"
#define PUBLIC_KEY  "ingress.tls.key"

/* The operator's files, parsed, while they are checked. */
struct public_files {
	X509 *leaf; /* owned; the first certificate of the file */
	/* owned; the certificates after it, maybe none (STACK_OF(X509), spelled
	 * out: clang-format takes the macro for a call) */
	struct stack_st_X509 *chain;
	EVP_PKEY *key; /* owned */
};

/*
 * A PEM read of certificate <n> (from 1) of <path> found none: the end of the
 * chain (0, for n > 1) or the fault. Other PEM blocks (a key) are skipped by
 * the reader, as SSL_CTX_use_certificate_chain_file skips them.
 */
static int chain_end(const char *path, uint32_t n, char *err, size_t cap)
{
	char what[PATH_MAX + 64];
	unsigned long e = ERR_peek_last_error();
	bool none = ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE;

	AN_ASSERT(path != NULL);
	AN_ASSERT(n >= 1);
	if (none) {
		ERR_clear_error();
		if (n > 1)
			return 0;
		return tls_fail(err, cap, -EINVAL,
				PUBLIC_CERT " %s: no PEM certificate in the file", path);
	}
	snprintf(what, sizeof(what), PUBLIC_CERT " %s: certificate %u of the file does not parse",
		 path, n);
	tls_fail_ossl(err, cap, what);
	return -EINVAL;
}

/* The leaf (the first certificate) and the intermediates after it, from <buf>/<len>. */
static int parse_chain(struct public_files *f, const char *buf, size_t len, const char *path,
		       char *err, size_t cap)
{
	AN_ASSERT(f->leaf == NULL && f->chain == NULL);
	AN_ASSERT(len <= TLS_TERM_PUBLIC_FILE_BYTES_MAX);
	BIO *b = BIO_new_mem_buf(buf, (int)len);
	f->chain = sk_X509_new_null();
	if (b == NULL || f->chain == NULL) {
		BIO_free(b);
		return tls_fail(err, cap, -ENOMEM, PUBLIC_CERT " %s: out of memory", path);
	}
	ERR_clear_error();
	f->leaf = PEM_read_bio_X509_AUX(b, NULL, tls_no_passphrase, NULL);
	int ret = f->leaf != NULL ? 0 : chain_end(path, 1, err, cap);
	for (uint32_t n = 2; ret == 0; n++) {
		X509 *x = PEM_read_bio_X509(b, NULL, tls_no_passphrase, NULL);
		if (x == NULL) {
			ret = chain_end(path, n, err, cap);
			break;
		}
		if (sk_X509_push(f->chain, x) <= 0) {
			X509_free(x);
			ret = tls_fail(err, cap, -ENOMEM, PUBLIC_CERT " %s: out of memory", path);
		}
	}
	BIO_free(b);
	AN_ASSERT(ret != 0 || f->leaf != NULL);
	return ret;
}

/*
 * Whether NUL-terminated <buf> has a PEM block labelled "... PRIVATE KEY":
 * OpenSSL 3's decoder says "unsupported" alike for no key and a broken one.
 */
static bool has_key_block(const char *buf)
{
	static const char begin[] = "-----BEGIN ";
	static const char label[] = "PRIVATE KEY-----";

	AN_ASSERT(buf != NULL);
	for (const char *p = strstr(buf, begin); p != NULL; p = strstr(p + 1, begin)) {
		size_t line = strcspn(p, "\r\n");
		AN_ASSERT(line >= sizeof(begin) - 1);
		if (line >= sizeof(begin) - 1 + sizeof(label) - 1 &&
		    memcmp(p + line - (sizeof(label) - 1), label, sizeof(label) - 1) == 0)
			return true;
	}
	return false;
}

static int parse_key(struct public_files *f, const char *buf, size_t len, const char *path,
		     char *err, size_t cap)
{
	char what[PATH_MAX + 64];
	bool asked = false;

	AN_ASSERT(f->key == NULL);
	AN_ASSERT(len <= TLS_TERM_PUBLIC_FILE_BYTES_MAX);
	BIO *b = BIO_new_mem_buf(buf, (int)len);
	if (b == NULL)
		return tls_fail(err, cap, -ENOMEM, PUBLIC_KEY " %s: out of memory", path);
	ERR_clear_error();
	f->key = PEM_read_bio_PrivateKey(b, NULL, tls_no_passphrase, &asked);
	BIO_free(b);
	if (f->key != NULL)
		return 0;
	if (asked) {
		ERR_clear_error();
		return tls_fail(err, cap, -EINVAL,
				PUBLIC_KEY " %s: encrypted; the daemon needs an unencrypted key",
				path);
	}
	if (!has_key_block(buf)) {
		ERR_clear_error();
		return tls_fail(err, cap, -EINVAL, PUBLIC_KEY " %s: no PEM private key in the file",
				path);
	}
	snprintf(what, sizeof(what), PUBLIC_KEY " %s: the private key does not parse", path);
	tls_fail_ossl(err, cap, what);
	return -EINVAL;
}

/* The key is the leaf's, and the leaf is valid now (clients check both; say which fails). */
static int public_check(const struct public_files *f, const char *cert_path, const char *key_path,
			char *err, size_t cap)
{
	char date[64];
	int64_t not_before = 0, not_after = 0;

	AN_ASSERT(f->leaf != NULL);
	AN_ASSERT(f->key != NULL);
	if (X509_check_private_key(f->leaf, f->key) != 1) {
		ERR_clear_error();
		return tls_fail(err, cap, -EINVAL,
				PUBLIC_KEY " %s: the key does not match the certificate "
					   "(the first of " PUBLIC_CERT " %s)",
				key_path, cert_path);
	}
	if (tls_time_s(X509_get0_notBefore(f->leaf), &not_before) != 0 ||
	    tls_time_s(X509_get0_notAfter(f->leaf), &not_after) != 0)
		return tls_fail(err, cap, -EINVAL, PUBLIC_CERT " %s: unreadable validity",
				cert_path);
	int64_t now = (int64_t)time(NULL);
	if (now >= not_after) {
		tls_format_date(not_after, date, sizeof(date));
		return tls_fail(err, cap, -EKEYEXPIRED, PUBLIC_CERT " %s: expired on %s", cert_path,
				date);
	}
	if (now < not_before) {
		tls_format_date(not_before, date, sizeof(date));
		return tls_fail(err, cap, -EINVAL,
				PUBLIC_CERT " %s: not valid before %s (is the clock right?)",
				cert_path, date);
	}
	return 0;
}

/* The public server context: the session defaults (TLS 1.2+, ALPN http/1.1) and the chain. */
static int public_install(struct tls_term *e, const struct public_files *f, const char *cert_path,
			  char *err, size_t cap)
{
	char what[PATH_MAX + 64];

	AN_ASSERT(e->public_ctx == NULL);
	AN_ASSERT(f->leaf != NULL && f->key != NULL && f->chain != NULL);
	SSL_CTX *ctx = tls_session_server_ctx_new(NULL, err, cap);
	if (ctx == NULL)
		return -EIO;
	/* Also refuses what OpenSSL's security level forbids (a 1024-bit RSA key, SHA-1). */
	if (SSL_CTX_use_cert_and_key(ctx, f->leaf, f->key, f->chain, 1) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(what, sizeof(what), PUBLIC_CERT " %s: not usable", cert_path);
		tls_fail_ossl(err, cap, what);
		SSL_CTX_free(ctx);
		return -EINVAL;
	}
	e->public_ctx = ctx;
	return 0;
}

int tls_term_public_load(struct tls_term *e, const char *cert_path, const char *key_path, char *err,
			 size_t cap)
{
	struct public_files f = { NULL, NULL, NULL };
	char *buf = NULL;
	size_t len = 0;

	AN_ASSERT(e != NULL && e->public_ctx == NULL);
	AN_ASSERT(cert_path != NULL && key_path != NULL);
	int ret = tls_read_file(cert_path, PUBLIC_CERT, TLS_TERM_PUBLIC_FILE_BYTES_MAX, false, &buf,
				&len, err, cap);
	if (ret == 0)
		ret = parse_chain(&f, buf, len, cert_path, err, cap);
	AN_FREE(&buf);
	if (ret == 0)
		ret = tls_read_file(key_path, PUBLIC_KEY, TLS_TERM_PUBLIC_FILE_BYTES_MAX, true,
				    &buf, &len, err, cap);
	if (ret == 0)
		ret = parse_key(&f, buf, len, key_path, err, cap);
	if (buf != NULL)
		pool_free_secret(buf, len + 1);
	if (ret == 0)
		ret = public_check(&f, cert_path, key_path, err, cap);
	if (ret == 0)
		ret = public_install(e, &f, cert_path, err, cap);
	X509_free(f.leaf);
	sk_X509_pop_free(f.chain, X509_free);
	EVP_PKEY_free(f.key); /* the context keeps its own reference */
	AN_ASSERT((ret == 0) == (e->public_ctx != NULL));
	return ret;
}

static void *worker_new(void *arg, uint32_t worker, char *err, size_t cap)
{
	struct tls_term_worker *w = pool_calloc(1, sizeof(*w));

	AN_ASSERT(arg != NULL);
	if (w == NULL || tls_leafcache_init(&w->leaves, TLS_LEAFCACHE_CAPACITY_DEFAULT) != 0) {
		snprintf(err, cap, "worker %u: leaf cache: out of memory", worker);
		pool_free(w);
		return NULL;
	}
	w->engine = arg;
	return w;
}

static void worker_counters(const void *worker_state, struct term_counters *out)
{
	const struct tls_term_worker *w = worker_state;

	AN_ASSERT(w != NULL && out != NULL);
	AN_ASSERT(w->mints <= w->leaves.misses);
	*out = (struct term_counters){ .leaf_hits = w->leaves.hits,
				       .leaf_misses = w->leaves.misses,
				       .leaf_mints = w->mints };
}

static void worker_free(void *worker_state)
{
	struct tls_term_worker *w = worker_state;

	if (w == NULL)
		return;
	tls_leafcache_destroy(&w->leaves);
	for (uint32_t i = 0; i < w->client_count; i++) {
		SSL_CTX_free(w->clients[i].ctx);
		AN_FREE(&w->clients[i].ca_file);
	}
	pool_free(w);
}

/* <in>/<len> in normal form into <out> (cap > len): lower case, one trailing dot dropped. */
static size_t host_normal(const char *in, size_t len, char *out)
{
	if (len > 0 && in[len - 1] == '.')
		len--;
	for (size_t i = 0; i < len; i++) {
		char ch = in[i];
		out[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
	}
	out[len] = '\0';
	return len;
}

/*
 * <w>'s leaf for <host>/<host_len> (normal form), minted on a miss; as
 * tls_leafcache_get_or_mint. A call that succeeds after a miss (every miss
 * is counted) minted and cached a leaf: that is the mint counted.
 */
static int leaf_get(struct tls_term_worker *w, const char *host, size_t host_len, X509 **leaf)
{
	uint64_t misses = w->leaves.misses;

	AN_ASSERT(w->engine->ca != NULL);
	int ret = tls_leafcache_get_or_mint(&w->leaves, w->engine->ca, host, host_len,
					    (int64_t)time(NULL), leaf);
	AN_ASSERT(w->leaves.misses - misses <= 1);
	if (ret == 0 && w->leaves.misses != misses)
		w->mints++;
	return ret;
}

static int prime(void *worker_state, const char *host, size_t host_len)
{
	struct tls_term_worker *w = worker_state;
	char name[LIMITS_HOST_BYTES_MAX + 1];
	X509 *leaf = NULL;

	if (w->engine->ca == NULL)
		return -ENOENT;
	if (host_len == 0 || host_len > LIMITS_HOST_BYTES_MAX)
		return -EINVAL;
	size_t n = host_normal(host, host_len, name);
	return leaf_get(w, name, n, &leaf);
}

/* The ClientHello arrived: check its SNI against the CONNECT host, then show the leaf. */
static int on_sni(struct tls_session *s, const char *sni, size_t sni_len, void *arg)
{
	struct tls_term_session *es = arg;
	char name[LIMITS_HOST_BYTES_MAX + 1];
	X509 *leaf = NULL;

	AN_ASSERT(&es->s == s);
	if (sni != NULL) {
		size_t n = sni_len <= LIMITS_HOST_BYTES_MAX ? host_normal(sni, sni_len, name) : 0;
		if (n != es->host_len || memcmp(name, es->host, n) != 0) {
			es->sni_refused = true;
			return -EPERM;
		}
	}
	int ret = leaf_get(es->w, es->host, es->host_len, &leaf);
	if (ret != 0)
		return ret;
	return tls_session_set_leaf(s, leaf);
}

/* A session of worker <w> for <host> (kept in normal form), not yet initialised. */
static struct tls_term_session *session_alloc(struct tls_term_worker *w, const char *host,
					      size_t host_len)
{
	if (host_len == 0 || host_len > LIMITS_HOST_BYTES_MAX)
		return NULL;
	struct tls_term_session *es = pool_calloc(1, sizeof(*es));
	if (es == NULL)
		return NULL;
	es->w = w;
	es->host_len = (uint16_t)host_normal(host, host_len, es->host);
	return es;
}

static void *server_new(void *worker_state, const char *host, size_t host_len)
{
	struct tls_term_worker *w = worker_state;
	struct tls_term_session *es =
	    w->engine->server_ctx != NULL ? session_alloc(w, host, host_len) : NULL;

	if (es == NULL)
		return NULL;
	AN_ASSERT(w->engine->ca != NULL);
	if (tls_session_server_init(&es->s, w->engine->server_ctx, NULL, on_sni, es) != 0) {
		pool_free(es);
		return NULL;
	}
	return es;
}

/* The worker's client context for <ca_file> (NULL: system roots), made on first use. */
static SSL_CTX *client_ctx(struct tls_term_worker *w, const char *ca_file)
{
	char err[256];

	for (uint32_t i = 0; i < w->client_count; i++) {
		const char *have = w->clients[i].ca_file;
		if ((have == NULL && ca_file == NULL) ||
		    (have != NULL && ca_file != NULL && strcmp(have, ca_file) == 0))
			return w->clients[i].ctx;
	}
	if (w->client_count == TLS_TERM_CLIENT_CTX_MAX)
		return NULL;
	SSL_CTX *ctx = tls_session_client_ctx_new(ca_file, err, sizeof(err));
	if (ctx == NULL) {
		log_warn("TLS: upstream roots %s: %s", ca_file ? ca_file : "(system)", err);
		return NULL;
	}
	struct tls_term_client_ctx *slot = &w->clients[w->client_count];
	slot->ca_file = ca_file != NULL ? pool_strndup(ca_file, strlen(ca_file)) : NULL;
	if (ca_file != NULL && slot->ca_file == NULL) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	slot->ctx = ctx;
	w->client_count++;
	return ctx;
}

static void *client_new(void *worker_state, const char *host, size_t host_len, const char *ca_file)
{
	struct tls_term_worker *w = worker_state;
	SSL_CTX *ctx = client_ctx(w, ca_file);
	struct tls_term_session *es = ctx != NULL ? session_alloc(w, host, host_len) : NULL;

	if (es == NULL)
		return NULL;
	if (tls_session_client_init(&es->s, ctx, es->host, es->host_len) != 0) {
		pool_free(es);
		return NULL;
	}
	return es;
}

/* A session of the public listener: the operator's chain, whatever the SNI; no host kept. */
static void *public_new(void *worker_state)
{
	struct tls_term_worker *w = worker_state;

	AN_ASSERT(w != NULL);
	AN_ASSERT(w->engine != NULL);
	if (w->engine->public_ctx == NULL)
		return NULL;
	struct tls_term_session *es = pool_calloc(1, sizeof(*es));
	if (es == NULL)
		return NULL;
	es->w = w;
	if (tls_session_server_init(&es->s, w->engine->public_ctx, NULL, NULL, NULL) != 0) {
		pool_free(es);
		return NULL;
	}
	AN_ASSERT(es->host_len == 0);
	return es;
}

static void session_free(void *session)
{
	struct tls_term_session *es = session;

	if (es == NULL)
		return;
	tls_session_destroy(&es->s);
	pool_free(es);
}

static enum term_status status_of(enum tls_session_status st)
{
	static_assert((int)TLS_SESSION_OK == (int)TERM_OK &&
			  (int)TLS_SESSION_WANT_READ == (int)TERM_WANT_READ &&
			  (int)TLS_SESSION_WANT_WRITE == (int)TERM_WANT_WRITE &&
			  (int)TLS_SESSION_CLOSED == (int)TERM_CLOSED &&
			  (int)TLS_SESSION_ERROR == (int)TERM_ERROR,
		      "the two status enums agree");
	return (enum term_status)st;
}

static ssize_t feed(void *session, const void *buf, size_t len)
{
	return tls_session_feed(&((struct tls_term_session *)session)->s, buf, len);
}

static void feed_eof(void *session)
{
	tls_session_feed_eof(&((struct tls_term_session *)session)->s);
}

static enum term_status session_handshake(void *session)
{
	return status_of(tls_session_handshake(&((struct tls_term_session *)session)->s));
}

static enum term_status session_read(void *session, void *buf, size_t cap, size_t *n)
{
	return status_of(tls_session_read(&((struct tls_term_session *)session)->s, buf, cap, n));
}

static enum term_status session_write(void *session, const void *buf, size_t len, size_t *n)
{
	return status_of(tls_session_write(&((struct tls_term_session *)session)->s, buf, len, n));
}

static enum term_status session_close(void *session)
{
	return status_of(tls_session_close(&((struct tls_term_session *)session)->s));
}

static size_t out_peek(void *session, const uint8_t **data)
{
	return tls_session_out_peek(&((struct tls_term_session *)session)->s, data);
}

static void out_consume(void *session, size_t n)
{
	tls_session_out_consume(&((struct tls_term_session *)session)->s, n);
}

static bool session_idle(void *session)
{
	return tls_session_idle(&((struct tls_term_session *)session)->s);
}

static bool established(const void *session)
{
	return tls_session_established(&((const struct tls_term_session *)session)->s);
}

static bool sni_refused(const void *session)
{
	return ((const struct tls_term_session *)session)->sni_refused;
}

static const char *session_error(const void *session)
{
	return tls_session_error(&((const struct tls_term_session *)session)->s);
}

const struct term_ops tls_term_ops = {
	.worker_new = worker_new,
	.worker_free = worker_free,
	.counters = worker_counters,
	.prime = prime,
	.server_new = server_new,
	.client_new = client_new,
	.public_new = public_new,
	.session_free = session_free,
	.feed = feed,
	.feed_eof = feed_eof,
	.handshake = session_handshake,
	.read = session_read,
	.write = session_write,
	.close = session_close,
	.out_peek = out_peek,
	.out_consume = out_consume,
	.idle = session_idle,
	.established = established,
	.sni_refused = sni_refused,
	.error = session_error,
};
