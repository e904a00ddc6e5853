/*
 * What the tls/ suites share: a temporary directory, certificates and PEM
 * files made with OpenSSL calls (CAs as `agentsnet ca init` makes them, with
 * knobs to make them wrong), and a pump that runs two memory sessions against
 * each other: two tls_sessions, or a tls_session and a term session reached
 * through its ops (struct tt_wire).
 */
#ifndef AN_TESTS_UNIT_TLS_TLSTEST_H
#define AN_TESTS_UNIT_TLS_TLSTEST_H

#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tls/session.h"
#include "tls/tls.h"

/* How a test CA is made; a zeroed struct gives a good CA valid from -1 h to +30 days. */
struct tt_ca_opts {
	long not_before_s; /* relative to now; 0 means -3600 */
	long not_after_s;  /* relative to now; 0 means +30 days */
	bool not_ca;       /* basicConstraints CA:FALSE */
	bool no_ku;        /* no keyUsage at all */
	bool encrypt_key;  /* the key PEM encrypted with a passphrase */
	bool rsa;          /* an RSA-2048 key instead of P-256 */
};

static char tt_dir[64];

/* A fresh temporary directory in tt_dir; tt_rmdir removes it and its files. */
static inline void tt_mkdir(void)
{
	snprintf(tt_dir, sizeof(tt_dir), "/tmp/an-tls-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tt_dir));
}

static inline void tt_rmdir(void)
{
	char path[PATH_MAX];
	DIR *d = opendir(tt_dir);

	if (d == NULL)
		return;
	for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", tt_dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(tt_dir);
}

/* <tt_dir>/<name> into <out> (PATH_MAX bytes). */
static inline const char *tt_path(char *out, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", tt_dir, name);
	ck_assert_int_gt(n, 0);
	ck_assert_int_lt(n, PATH_MAX);
	return out;
}

/* Mode 0600: a key's file that others may read is refused at load. */
static inline void tt_spit(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fchmod(fileno(f), 0600), 0);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* Adds extension <nid> = <value> to <x>, issued by <issuer> (x itself when self-signed). */
static inline void tt_add_ext_by(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;

	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
	ck_assert_ptr_nonnull(ext);
	ck_assert_int_eq(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
}

/* tt_add_ext_by for a self-signed <x>. */
static inline void tt_add_ext(X509 *x, int nid, const char *value)
{
	tt_add_ext_by(x, x, nid, value);
}

/*
 * A new v3 certificate for <key>: a random positive serial, subject CN <cn>,
 * issued by <issuer> (NULL: itself), valid from <not_before> to <not_after>
 * (seconds since the epoch). Extensions and the signature are the caller's.
 */
static inline X509 *tt_cert_new(EVP_PKEY *key, const char *cn, X509 *issuer, time_t not_before,
				time_t not_after)
{
	unsigned char rnd[16];
	X509 *x = X509_new();

	ck_assert_ptr_nonnull(x);
	ck_assert_int_eq(X509_set_version(x, X509_VERSION_3), 1);
	ck_assert_int_eq(RAND_bytes(rnd, sizeof(rnd)), 1);
	rnd[0] |= 1;
	BIGNUM *bn = BN_bin2bn(rnd, sizeof(rnd), NULL);
	ck_assert_ptr_nonnull(BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)));
	BN_free(bn);
	X509_NAME *name = X509_get_subject_name(x);
	ck_assert_int_eq(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
						    (const unsigned char *)cn, -1, -1, 0),
			 1);
	ck_assert_int_eq(
	    X509_set_issuer_name(x, issuer != NULL ? X509_get_subject_name(issuer) : name), 1);
	ck_assert_ptr_nonnull(ASN1_TIME_set(X509_getm_notBefore(x), not_before));
	ck_assert_ptr_nonnull(ASN1_TIME_set(X509_getm_notAfter(x), not_after));
	ck_assert_int_eq(X509_set_pubkey(x, key), 1);
	return x;
}

/* A self-signed CA certificate for <key>, subject CN <cn>. */
static inline X509 *tt_ca_cert(EVP_PKEY *key, const char *cn, const struct tt_ca_opts *o)
{
	time_t now = time(NULL);
	X509 *x = tt_cert_new(key, cn, NULL, now + (o->not_before_s ? o->not_before_s : -3600),
			      now + (o->not_after_s ? o->not_after_s : 30 * 86400));

	tt_add_ext(x, NID_basic_constraints,
		   o->not_ca ? "critical,CA:FALSE" : "critical,CA:TRUE,pathlen:0");
	if (!o->no_ku)
		tt_add_ext(x, NID_key_usage,
			   o->not_ca ? "critical,digitalSignature"
				     : "critical,keyCertSign,cRLSign");
	tt_add_ext(x, NID_subject_key_identifier, "hash");
	ck_assert_int_gt(X509_sign(x, key, EVP_sha256()), 0);
	return x;
}

/*
 * Writes the <n> certificates of <certs> and then <key> (may be NULL) as PEM
 * into <path>; with <encrypt>, the key encrypted (AES-128-CBC, passphrase
 * "secret").
 */
static inline void tt_write_pem(const char *path, X509 *const *certs, size_t n, EVP_PKEY *key,
				bool encrypt)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fchmod(fileno(f), 0600), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(PEM_write_X509(f, certs[i]), 1);
	if (key != NULL && encrypt)
		ck_assert_int_eq(PEM_write_PrivateKey(f, key, EVP_aes_128_cbc(),
						      (const unsigned char *)"secret", 6, NULL,
						      NULL),
				 1);
	else if (key != NULL)
		ck_assert_int_eq(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
	ck_assert_int_eq(fclose(f), 0);
}

/* Writes <stem>.pem and <stem>.key into tt_dir; their paths into <cert>/<key> (PATH_MAX). */
static inline void tt_make_ca(const char *stem, const struct tt_ca_opts *o, char *cert, char *key)
{
	char name[128];
	static const struct tt_ca_opts defaults;

	o = o != NULL ? o : &defaults;
	EVP_PKEY *k = o->rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
	ck_assert_ptr_nonnull(k);
	X509 *x = tt_ca_cert(k, stem, o);
	snprintf(name, sizeof(name), "%s.pem", stem);
	tt_write_pem(tt_path(cert, name), &x, 1, NULL, false);
	snprintf(name, sizeof(name), "%s.key", stem);
	tt_write_pem(tt_path(key, name), NULL, 0, k, o->encrypt_key);
	X509_free(x);
	EVP_PKEY_free(k);
}

/*
 * How the pump reaches one side of a memory transport: the ciphertext it has
 * to send (out_peek, out_consume), where the other side's goes (feed), and a
 * step of its handshake (its status as an int). tt_session_wire is a
 * tls_session's; a term session's is made of its ops.
 */
struct tt_wire {
	size_t (*out_peek)(void *s, const uint8_t **data);
	void (*out_consume)(void *s, size_t n);
	ssize_t (*feed)(void *s, const void *buf, size_t len);
	int (*handshake)(void *s);
};

/* The tls_session calls behind tt_session_wire, taking the session as a void *. */
static inline size_t tt_session_out_peek(void *s, const uint8_t **data)
{
	return tls_session_out_peek(s, data);
}

static inline void tt_session_out_consume(void *s, size_t n)
{
	tls_session_out_consume(s, n);
}

static inline ssize_t tt_session_feed(void *s, const void *buf, size_t len)
{
	return tls_session_feed(s, buf, len);
}

static inline int tt_session_handshake(void *s)
{
	return (int)tls_session_handshake(s);
}

/* A tls_session as the pump reaches it. */
static const struct tt_wire tt_session_wire = {
	.out_peek = tt_session_out_peek,
	.out_consume = tt_session_out_consume,
	.feed = tt_session_feed,
	.handshake = tt_session_handshake,
};

/*
 * Moves everything <from> (reached through <fw>) has to send into <to>
 * (through <tw>), as far as <to> takes it; returns bytes moved.
 */
static inline size_t tt_move(const struct tt_wire *fw, void *from, const struct tt_wire *tw,
			     void *to)
{
	const uint8_t *p;
	size_t moved = 0;

	for (size_t n = fw->out_peek(from, &p); n > 0; n = fw->out_peek(from, &p)) {
		ssize_t w = tw->feed(to, p, n);
		ck_assert_int_ge(w, 0);
		fw->out_consume(from, (size_t)w);
		moved += (size_t)w;
		if ((size_t)w < n)
			break;
	}
	return moved;
}

/* tt_move between two tls_sessions. */
static inline size_t tt_pump(struct tls_session *from, struct tls_session *to)
{
	return tt_move(&tt_session_wire, from, &tt_session_wire, to);
}

/*
 * Steps the handshakes of <a> (through <aw>) and <b> (through <bw>), <a>
 * first, until neither moves; their final statuses in *<as> and *<bs>.
 */
static inline void tt_handshake_wire(const struct tt_wire *aw, void *a, int *as,
				     const struct tt_wire *bw, void *b, int *bs)
{
	for (int round = 0; round < 32; round++) {
		*as = aw->handshake(a);
		size_t moved = tt_move(aw, a, bw, b);
		*bs = bw->handshake(b);
		moved += tt_move(bw, b, aw, a);
		if (moved == 0)
			return;
	}
	ck_abort_msg("handshake did not settle in 32 rounds");
}

/* tt_handshake_wire of two tls_sessions; the final statuses in *<cs> and *<ss>. */
static inline void tt_handshake(struct tls_session *c, struct tls_session *s,
				enum tls_session_status *cs, enum tls_session_status *ss)
{
	int c_status, s_status;

	tt_handshake_wire(&tt_session_wire, c, &c_status, &tt_session_wire, s, &s_status);
	*cs = (enum tls_session_status)c_status;
	*ss = (enum tls_session_status)s_status;
}

/* A case-insensitive "does <hay> contain <needle>", for OpenSSL's varying capitalisation. */
static inline bool tt_has(const char *hay, const char *needle)
{
	return hay != NULL && strcasestr(hay, needle) != NULL;
}

#endif /* AN_TESTS_UNIT_TLS_TLSTEST_H */
