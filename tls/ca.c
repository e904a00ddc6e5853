/*
 * The agentsnet CA in the daemon: load once, then mint leaves on demand.
 *
 * Load reads ca.pem and ca.key into memory with open/read (so a failure
 * names the file and the errno, and the key bytes can be wiped right after
 * parsing, which BIO_new_file would not allow), parses them from read-only
 * memory BIOs, and refuses anything that would mint leaves no client
 * accepts: a certificate that is not a CA, a key that is not its key, a CA
 * outside its validity. A passphrase callback that answers nothing keeps
 * OpenSSL from ever prompting on a terminal.
 *
 * Minting is on the data path, so everything that is the same for every leaf
 * is done at load: the one leaf key pair (P-256) and its public half in the
 * form OpenSSL encodes fastest (make_leaf_pub), the SHA-256 method fetched
 * once (no implicit fetch per signature), and the five extensions that do
 * not depend on the host (basicConstraints, keyUsage, extKeyUsage, the SKI
 * of the shared key and the AKI pointing at the CA's SKI), prepared as
 * X509_EXTENSION objects that X509_add_ext copies into each leaf. Per leaf
 * remain the serial, validity, names, SAN and the one ECDSA signature.
 * Rejected: one key per leaf (a P-256 key generation per new host on the data
 * path, for no gain: a client trusts the leaf through the CA, and the key
 * never leaves this process), and building extensions from config strings
 * per leaf (parsing text on the data path).
 *
 * Invariant: a loaded struct tls_ca is never written again, so any number of
 * workers may mint from it at once; the CA key is used only through
 * EVP_PKEY signing, which OpenSSL 3 allows concurrently.
 */
#include "tls/ca.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "core/an.h"
#include "core/limits.h"
#include "core/pool.h"
#include "tls/tls.h"

/* RFC 1035: 253 bytes of presentation form without the trailing dot, labels <= 63. */
#define CA_DNS_NAME_BYTES_MAX  253u
#define CA_DNS_LABEL_BYTES_MAX 63u
/* X.520 ub-common-name: a longer host goes only into the SAN. */
#define CA_CN_BYTES_MAX 64u

static_assert(CA_DNS_NAME_BYTES_MAX <= LIMITS_HOST_BYTES_MAX, "a host core accepts fits");

enum { CA_EXT_BASIC, CA_EXT_KU, CA_EXT_EKU, CA_EXT_SKI, CA_EXT_AKI, CA_EXT_COUNT };

struct tls_ca {
	X509 *cert;                         /* owned: the agentsnet CA */
	EVP_PKEY *key;                      /* owned: its private key */
	EVP_PKEY *leaf_key;                 /* owned: the key pair of every leaf */
	EVP_PKEY *leaf_pub;                 /* owned: its public half, as leaves embed it */
	EVP_MD *md;                         /* owned: SHA-256 */
	X509_EXTENSION *exts[CA_EXT_COUNT]; /* owned: the host-independent leaf extensions */
	int64_t not_before_s;               /* the CA's validity */
	int64_t not_after_s;
	uint32_t leaf_days;
};

/* A host as a leaf names it: DNS (family 0) or an address of <family>. */
struct ca_name {
	const char *text;
	size_t len;
	int family;
	unsigned char addr[16];
	size_t addr_len;
};

static int parse_cert(struct tls_ca *ca, const char *buf, size_t len, const char *path, char *err,
		      size_t err_len)
{
	AN_ASSERT(ca->cert == NULL);
	AN_ASSERT(len <= TLS_CA_FILE_BYTES_MAX);
	BIO *b = BIO_new_mem_buf(buf, (int)len);
	if (b == NULL)
		return tls_fail_ossl(err, err_len, "BIO_new_mem_buf");
	ca->cert = PEM_read_bio_X509(b, NULL, tls_no_passphrase, NULL);
	BIO_free(b);
	if (ca->cert == NULL) {
		char what[PATH_MAX + 64];
		snprintf(what, sizeof(what), "CA certificate %s: no PEM certificate", path);
		tls_fail_ossl(err, err_len, what);
		return -EINVAL;
	}
	return 0;
}

static int parse_key(struct tls_ca *ca, const char *buf, size_t len, const char *path, char *err,
		     size_t err_len)
{
	bool asked = false;

	AN_ASSERT(ca->key == NULL);
	AN_ASSERT(len <= TLS_CA_FILE_BYTES_MAX);
	BIO *b = BIO_new_mem_buf(buf, (int)len);
	if (b == NULL)
		return tls_fail_ossl(err, err_len, "BIO_new_mem_buf");
	ca->key = PEM_read_bio_PrivateKey(b, NULL, tls_no_passphrase, &asked);
	BIO_free(b);
	if (ca->key != NULL)
		return 0;
	if (asked) {
		ERR_clear_error();
		return tls_fail(
		    err, err_len, -EINVAL,
		    "CA key %s: encrypted; agentsnet needs an unencrypted key (as `agentsnet ca init` writes)",
		    path);
	}
	char what[PATH_MAX + 64];
	snprintf(what, sizeof(what), "CA key %s: no PEM private key", path);
	tls_fail_ossl(err, err_len, what);
	return -EINVAL;
}

/* Reads and parses both files; the key's bytes are wiped whatever happens. */
static int load_files(struct tls_ca *ca, const char *cert_path, const char *key_path, char *err,
		      size_t err_len)
{
	char *buf = NULL;
	size_t len = 0;

	AN_ASSERT(cert_path != NULL);
	AN_ASSERT(key_path != NULL);
	int ret = tls_read_file(cert_path, "CA certificate", TLS_CA_FILE_BYTES_MAX, false, &buf,
				&len, err, err_len);
	if (ret == 0)
		ret = parse_cert(ca, buf, len, cert_path, err, err_len);
	AN_FREE(&buf);
	if (ret != 0)
		return ret;
	len = 0;
	ret = tls_read_file(key_path, "CA key", TLS_CA_FILE_BYTES_MAX, true, &buf, &len, err,
			    err_len);
	if (ret == 0)
		ret = parse_key(ca, buf, len, key_path, err, err_len);
	if (buf != NULL)
		pool_free_secret(buf, len + 1);
	return ret;
}

/* The certificate is a CA, the key is its key and of a type we sign with, it is valid now. */
static int check_ca(struct tls_ca *ca, const char *cert_path, const char *key_path, char *err,
		    size_t err_len)
{
	char date[64];

	AN_ASSERT(ca->cert != NULL);
	AN_ASSERT(ca->key != NULL);
	if (X509_check_ca(ca->cert) != 1)
		return tls_fail(
		    err, err_len, -EINVAL,
		    "CA certificate %s: not a CA (needs basicConstraints CA:TRUE and keyUsage keyCertSign)",
		    cert_path);
	if (!EVP_PKEY_is_a(ca->key, "EC") && !EVP_PKEY_is_a(ca->key, "RSA"))
		return tls_fail(err, err_len, -EINVAL, "CA key %s: a %s key; leaves need EC or RSA",
				key_path, EVP_PKEY_get0_type_name(ca->key));
	if (X509_check_private_key(ca->cert, ca->key) != 1) {
		ERR_clear_error();
		return tls_fail(err, err_len, -EINVAL, "CA key %s is not the key of %s", key_path,
				cert_path);
	}
	if (tls_time_s(X509_get0_notBefore(ca->cert), &ca->not_before_s) != 0 ||
	    tls_time_s(X509_get0_notAfter(ca->cert), &ca->not_after_s) != 0)
		return tls_fail(err, err_len, -EINVAL, "CA certificate %s: unreadable validity",
				cert_path);
	int64_t now = (int64_t)time(NULL);
	if (now >= ca->not_after_s) {
		tls_format_date(ca->not_after_s, date, sizeof(date));
		return tls_fail(
		    err, err_len, -EKEYEXPIRED,
		    "CA certificate %s: expired on %s (run `agentsnet ca init --force`)", cert_path,
		    date);
	}
	if (now < ca->not_before_s) {
		tls_format_date(ca->not_before_s, date, sizeof(date));
		return tls_fail(err, err_len, -EINVAL,
				"CA certificate %s: not valid before %s (is the clock right?)",
				cert_path, date);
	}
	return 0;
}

/*
 * The public half of the leaf key, as X509_set_pubkey takes it. OpenSSL 3.0
 * encodes a provider key's SubjectPublicKeyInfo through a new encoder and
 * decoder context on every call (~130 us, most of a mint); a key decoded by
 * d2i_PublicKey from its encoded point is encoded by the built-in EC method
 * (~3 us). Same point; the parameters alone are copied in first, so the
 * private scalar is not in it. Should a later OpenSSL decode it otherwise,
 * leaves are still right, only slower.
 */
static int make_leaf_pub(struct tls_ca *ca, char *err, size_t err_len)
{
	unsigned char *point = NULL;

	AN_ASSERT(ca->leaf_key != NULL);
	AN_ASSERT(ca->leaf_pub == NULL);
	size_t len = EVP_PKEY_get1_encoded_public_key(ca->leaf_key, &point);
	EVP_PKEY *pub = EVP_PKEY_new();
	bool ok = len > 0 && pub != NULL && EVP_PKEY_copy_parameters(pub, ca->leaf_key) == 1;
	if (ok) {
		const unsigned char *p = point;
		ok = d2i_PublicKey(EVP_PKEY_EC, &pub, &p, (long)len) != NULL;
	}
	OPENSSL_free(point);
	if (!ok || EVP_PKEY_eq(pub, ca->leaf_key) != 1) {
		EVP_PKEY_free(pub);
		return tls_fail_ossl(err, err_len, "leaf public key");
	}
	ca->leaf_pub = pub;
	return 0;
}

/* The extensions every leaf shares, built against a probe carrying the leaf key. */
static int prepare_exts(struct tls_ca *ca, char *err, size_t err_len)
{
	static const struct {
		int nid;
		const char *value;
	} exts[CA_EXT_COUNT] = {
		[CA_EXT_BASIC] = { NID_basic_constraints, "critical,CA:FALSE" },
		[CA_EXT_KU] = { NID_key_usage, "critical,digitalSignature" },
		[CA_EXT_EKU] = { NID_ext_key_usage, "serverAuth" },
		[CA_EXT_SKI] = { NID_subject_key_identifier, "hash" },
		/* The CA's SKI; its issuer and serial only if it has none. */
		[CA_EXT_AKI] = { NID_authority_key_identifier, "keyid,issuer" },
	};
	X509V3_CTX ctx;

	AN_ASSERT(ca->leaf_pub != NULL);
	AN_ASSERT(ca->exts[0] == NULL);
	X509 *probe = X509_new();
	if (probe == NULL || X509_set_pubkey(probe, ca->leaf_pub) != 1) {
		X509_free(probe);
		return tls_fail_ossl(err, err_len, "leaf template");
	}
	X509V3_set_ctx(&ctx, ca->cert, probe, NULL, NULL, 0);
	int ret = 0;
	for (size_t i = 0; i < CA_EXT_COUNT && ret == 0; i++) {
		ca->exts[i] = X509V3_EXT_nconf_nid(NULL, &ctx, exts[i].nid, exts[i].value);
		if (ca->exts[i] == NULL)
			ret = tls_fail_ossl(err, err_len, exts[i].value);
	}
	X509_free(probe);
	return ret;
}

int tls_ca_load(const char *cert_path, const char *key_path, uint32_t leaf_days,
		struct tls_ca **out, char *err, size_t err_len)
{
	AN_ASSERT(out != NULL);
	AN_ASSERT(err != NULL || err_len == 0);
	*out = NULL;
	if (err_len > 0)
		err[0] = '\0';
	if (leaf_days == 0 || leaf_days > TLS_CA_LEAF_DAYS_MAX)
		return tls_fail(err, err_len, -EINVAL, "leaf validity %u days: not 1..%u",
				leaf_days, TLS_CA_LEAF_DAYS_MAX);
	struct tls_ca *ca = pool_calloc(1, sizeof(*ca));
	if (ca == NULL)
		return tls_fail(err, err_len, -ENOMEM, "CA: out of memory");
	ca->leaf_days = leaf_days;
	int ret = load_files(ca, cert_path, key_path, err, err_len);
	if (ret == 0)
		ret = check_ca(ca, cert_path, key_path, err, err_len);
	if (ret == 0) {
		ca->leaf_key = EVP_EC_gen("P-256");
		ca->md = EVP_MD_fetch(NULL, "SHA256", NULL);
		if (ca->leaf_key == NULL || ca->md == NULL)
			ret = tls_fail_ossl(err, err_len, "leaf key (P-256) and SHA-256");
	}
	if (ret == 0)
		ret = make_leaf_pub(ca, err, err_len);
	if (ret == 0)
		ret = prepare_exts(ca, err, err_len);
	if (ret != 0) {
		tls_ca_free(&ca);
		return ret;
	}
	*out = ca;
	return 0;
}

void tls_ca_free(struct tls_ca **cap)
{
	AN_ASSERT(cap != NULL);
	struct tls_ca *ca = *cap;
	if (ca == NULL)
		return;
	AN_ASSERT(ca->leaf_pub == NULL || ca->leaf_key != NULL);
	for (size_t i = 0; i < CA_EXT_COUNT; i++)
		X509_EXTENSION_free(ca->exts[i]);
	EVP_MD_free(ca->md);
	EVP_PKEY_free(ca->leaf_pub);
	EVP_PKEY_free(ca->leaf_key); /* OpenSSL clears private key material as it frees */
	EVP_PKEY_free(ca->key);
	X509_free(ca->cert);
	AN_FREE(cap);
}

X509 *tls_ca_cert(const struct tls_ca *ca)
{
	AN_ASSERT(ca != NULL);
	return ca->cert;
}

EVP_PKEY *tls_ca_leaf_key(const struct tls_ca *ca)
{
	AN_ASSERT(ca != NULL);
	return ca->leaf_key;
}

/* A DNS name in the form core/ normalises to; an all-numeric last label is an IP spelling. */
static bool dns_name_ok(const char *s, size_t len)
{
	size_t label = 0;
	bool numeric = true;

	AN_ASSERT(s != NULL);
	AN_ASSERT(len > 0);
	if (len > CA_DNS_NAME_BYTES_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '.') {
			if (label == 0)
				return false;
			label = 0;
			numeric = true;
			continue;
		}
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
		bool digit = c >= '0' && c <= '9';
		if (!alpha && !digit && c != '-' && c != '_')
			return false;
		numeric = numeric && digit;
		if (++label > CA_DNS_LABEL_BYTES_MAX)
			return false;
	}
	return label > 0 && !numeric;
}

/* Classifies <host>; <buf> (LIMITS_HOST_BYTES_MAX + 1 bytes) holds its NUL-terminated copy. */
static int parse_name(const char *host, size_t len, char *buf, struct ca_name *n)
{
	AN_ASSERT(host != NULL || len == 0);
	AN_ASSERT(n != NULL);
	if (len == 0 || len > CA_DNS_NAME_BYTES_MAX || memchr(host, '\0', len) != NULL)
		return -EINVAL;
	memcpy(buf, host, len);
	buf[len] = '\0';
	*n = (struct ca_name){ .text = buf, .len = len };
	if (inet_pton(AF_INET, buf, n->addr) == 1) {
		n->family = AF_INET;
		n->addr_len = 4;
	} else if (inet_pton(AF_INET6, buf, n->addr) == 1) {
		n->family = AF_INET6;
		n->addr_len = 16;
	} else if (!dns_name_ok(buf, len)) {
		return -EINVAL;
	}
	return 0;
}

/* A positive, non-zero serial of TLS_CA_SERIAL_BYTES random bytes. */
static int set_serial(X509 *x)
{
	unsigned char rnd[TLS_CA_SERIAL_BYTES];

	AN_ASSERT(x != NULL);
	AN_ASSERT(X509_get_serialNumber(x) != NULL);
	static_assert(TLS_CA_SERIAL_BYTES <= 20, "RFC 5280 allows 20 octets");
	if (RAND_bytes(rnd, (int)sizeof(rnd)) != 1)
		return -EIO;
	rnd[0] = rnd[0] == 0 ? 1 : rnd[0];
	BIGNUM *bn = BN_bin2bn(rnd, (int)sizeof(rnd), NULL);
	bool ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
	BN_free(bn);
	return ok ? 0 : -EIO;
}

/* subjectAltName: the one dNSName or iPAddress; critical when the subject is empty. */
static int add_san(X509 *x, const struct ca_name *n)
{
	AN_ASSERT(x != NULL);
	AN_ASSERT(n->len > 0);
	bool ip = n->family != 0;
	GENERAL_NAMES *names = GENERAL_NAMES_new();
	GENERAL_NAME *gn = GENERAL_NAME_new();
	ASN1_STRING *v = ip ? ASN1_OCTET_STRING_new() : ASN1_IA5STRING_new();
	bool ok = names != NULL && gn != NULL && v != NULL;
	if (ok && ip)
		ok = ASN1_OCTET_STRING_set(v, n->addr, (int)n->addr_len) == 1;
	else if (ok)
		ok = ASN1_STRING_set(v, n->text, (int)n->len) == 1;
	if (!ok) {
		ASN1_STRING_free(v);
		GENERAL_NAME_free(gn);
		GENERAL_NAMES_free(names);
		return -ENOMEM;
	}
	GENERAL_NAME_set0_value(gn, ip ? GEN_IPADD : GEN_DNS, v); /* gn takes v */
	if (sk_GENERAL_NAME_push(names, gn) <= 0) {
		GENERAL_NAME_free(gn);
		GENERAL_NAMES_free(names);
		return -ENOMEM;
	}
	int crit = n->len > CA_CN_BYTES_MAX ? 1 : 0;
	ok = X509_add1_ext_i2d(x, NID_subject_alt_name, names, crit, X509V3_ADD_DEFAULT) == 1;
	GENERAL_NAMES_free(names);
	return ok ? 0 : -EIO;
}

/* Everything of a leaf but its signature. */
static int fill_leaf(const struct tls_ca *ca, X509 *x, const struct ca_name *n, int64_t nb_s,
		     int64_t na_s)
{
	AN_ASSERT(nb_s < na_s);
	AN_ASSERT(ca->leaf_pub != NULL);
	if (X509_set_version(x, X509_VERSION_3) != 1 || set_serial(x) != 0)
		return -EIO;
	if (ASN1_TIME_set(X509_getm_notBefore(x), (time_t)nb_s) == NULL ||
	    ASN1_TIME_set(X509_getm_notAfter(x), (time_t)na_s) == NULL)
		return -EIO;
	if (X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) != 1)
		return -EIO;
	if (n->len <= CA_CN_BYTES_MAX &&
	    X509_NAME_add_entry_by_NID(X509_get_subject_name(x), NID_commonName, MBSTRING_ASC,
				       (const unsigned char *)n->text, (int)n->len, -1, 0) != 1)
		return -EIO;
	if (X509_set_pubkey(x, ca->leaf_pub) != 1)
		return -EIO;
	for (size_t i = 0; i < CA_EXT_COUNT; i++) {
		if (X509_add_ext(x, ca->exts[i], -1) != 1)
			return -EIO;
	}
	return add_san(x, n);
}

int tls_leaf_mint(const struct tls_ca *ca, const char *host, size_t host_len, int64_t now_s,
		  X509 **leaf)
{
	char buf[LIMITS_HOST_BYTES_MAX + 1];
	struct ca_name n;

	AN_ASSERT(ca != NULL);
	AN_ASSERT(leaf != NULL);
	*leaf = NULL;
	int ret = parse_name(host, host_len, buf, &n);
	if (ret != 0)
		return ret;
	if (now_s < ca->not_before_s || now_s >= ca->not_after_s)
		return -EKEYEXPIRED;
	int64_t nb_s = now_s - TLS_CA_LEAF_BACKDATE_S;
	int64_t na_s = now_s + (int64_t)ca->leaf_days * 86400;
	nb_s = nb_s < ca->not_before_s ? ca->not_before_s : nb_s;
	na_s = na_s > ca->not_after_s ? ca->not_after_s : na_s;
	X509 *x = X509_new();
	if (x == NULL)
		return -ENOMEM;
	ret = fill_leaf(ca, x, &n, nb_s, na_s);
	if (ret == 0 && X509_sign(x, ca->key, ca->md) <= 0)
		ret = -EIO;
	if (ret != 0) {
		X509_free(x);
		ERR_clear_error();
		return ret;
	}
	AN_DASSERT(X509_get_version(x) == X509_VERSION_3);
	*leaf = x;
	return 0;
}
