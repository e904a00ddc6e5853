/*
 * Unit tests for tls/ca.c: loading the agentsnet CA and minting leaves.
 *
 * Each test makes its CA files in a temporary directory with OpenSSL calls
 * shaped like `agentsnet ca init`'s output (tools/agentsnet/cainit.c is not in the
 * library), with knobs for every way a CA can be wrong. Minted leaves are
 * parsed back field by field (version, serial, validity, names, each
 * extension and its criticality, key, signature algorithm) and verified
 * against the CA with an X509_STORE for the sslserver purpose and the host.
 * Limits are tested at N and N+1: leaf days, file size, name and label
 * lengths, the 64-byte CN bound. One test prints the mint time.
 */
#include "../../../tls/ca.c"

#include <check.h>
#include <stdint.h>

#include <openssl/core_names.h>

#include "tests/unit/tls/tlstest.h"
#include "tests/unit/unit.h"

static char ca_pem[PATH_MAX];
static char ca_key[PATH_MAX];

static void setup(void)
{
	char err[256];

	ck_assert_int_eq(tls_library_init(err, sizeof(err)), 0);
	tt_mkdir();
	tt_make_ca("ca", NULL, ca_pem, ca_key);
}

static void teardown(void)
{
	tt_rmdir();
}

static struct tls_ca *load_ok(const char *cert, const char *key, uint32_t days)
{
	char err[512];
	struct tls_ca *ca = NULL;

	int ret = tls_ca_load(cert, key, days, &ca, err, sizeof(err));
	ck_assert_msg(ret == 0, "load: %d %s", ret, err);
	ck_assert_ptr_nonnull(ca);
	ck_assert_str_eq(err, "");
	return ca;
}

/* Loads and expects <want>, with every word of <needles> (NULL-ended) in the message. */
static void load_fails(const char *cert, const char *key, uint32_t days, int want,
		       const char *const *needles)
{
	char err[512];
	struct tls_ca *ca = (struct tls_ca *)&err; /* must be cleared */

	int ret = tls_ca_load(cert, key, days, &ca, err, sizeof(err));
	ck_assert_int_eq(ret, want);
	ck_assert_ptr_null(ca);
	for (size_t i = 0; needles[i] != NULL; i++)
		ck_assert_msg(tt_has(err, needles[i]), "'%s' not in '%s'", needles[i], err);
}

static X509 *mint_ok(struct tls_ca *ca, const char *host, int64_t now)
{
	X509 *x = NULL;

	int ret = tls_leaf_mint(ca, host, strlen(host), now, &x);
	ck_assert_msg(ret == 0, "mint %s: %d", host, ret);
	ck_assert_ptr_nonnull(x);
	return x;
}

static int64_t time_of(const ASN1_TIME *t)
{
	int64_t s = 0;
	ck_assert_int_eq(tls_time_s(t, &s), 0);
	return s;
}

/* Verifies <x> against the CA alone, for TLS server use; 1 when it verifies. */
static int verify_leaf(struct tls_ca *ca, X509 *x, const char *host, const char *ip)
{
	X509_STORE *st = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();

	ck_assert_int_eq(X509_STORE_add_cert(st, tls_ca_cert(ca)), 1);
	ck_assert_int_eq(X509_STORE_CTX_init(ctx, st, x, NULL), 1);
	X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(ctx);
	ck_assert_int_eq(X509_VERIFY_PARAM_set_purpose(p, X509_PURPOSE_SSL_SERVER), 1);
	if (host != NULL)
		ck_assert_int_eq(X509_VERIFY_PARAM_set1_host(p, host, 0), 1);
	if (ip != NULL)
		ck_assert_int_eq(X509_VERIFY_PARAM_set1_ip_asc(p, ip), 1);
	int ok = X509_verify_cert(ctx);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(st);
	return ok;
}

static bool ext_critical(X509 *x, int nid)
{
	int i = X509_get_ext_by_NID(x, nid, -1);
	ck_assert_int_ge(i, 0);
	return X509_EXTENSION_get_critical(X509_get_ext(x, i)) == 1;
}

/* The one SAN of <x>: its type, and its bytes copied into <out> (<cap> bytes). */
static int san_of(X509 *x, unsigned char *out, size_t cap, size_t *len, int *crit)
{
	GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, crit, NULL);

	ck_assert_ptr_nonnull(names);
	ck_assert_int_eq(sk_GENERAL_NAME_num(names), 1);
	GENERAL_NAME *gn = sk_GENERAL_NAME_value(names, 0);
	int type = 0;
	ASN1_STRING *v = GENERAL_NAME_get0_value(gn, &type);
	*len = (size_t)ASN1_STRING_length(v);
	ck_assert_uint_le(*len, cap);
	memcpy(out, ASN1_STRING_get0_data(v), *len);
	GENERAL_NAMES_free(names);
	return type;
}

/* ---- Loading. ---- */

START_TEST(test_load_ok)
{
	struct tls_ca *ca = load_ok(ca_pem, ca_key, TLS_CA_LEAF_DAYS_DEFAULT);
	EVP_PKEY *k = tls_ca_leaf_key(ca);
	char group[64];
	size_t len = 0;

	ck_assert_ptr_nonnull(k);
	ck_assert_int_eq(EVP_PKEY_is_a(k, "EC"), 1);
	ck_assert_int_eq(EVP_PKEY_get_group_name(k, group, sizeof(group), &len), 1);
	ck_assert_str_eq(group, "prime256v1");
	/* The leaf key is not the CA's key. */
	ck_assert_int_ne(EVP_PKEY_eq(k, X509_get0_pubkey(tls_ca_cert(ca))), 1);
	/* What leaves embed is the same public key, without the private scalar. */
	BIGNUM *priv = NULL;
	ck_assert_int_eq(EVP_PKEY_eq(ca->leaf_pub, k), 1);
	/* (OpenSSL 3.0 reports a public-only built-in key's scalar as zero.) */
	if (EVP_PKEY_get_bn_param(ca->leaf_pub, OSSL_PKEY_PARAM_PRIV_KEY, &priv) == 1)
		ck_assert(BN_is_zero(priv));
	BN_free(priv);
	priv = NULL;
	ck_assert_int_eq(EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_PRIV_KEY, &priv), 1);
	BN_clear_free(priv);
	ERR_clear_error();
	tls_ca_free(&ca);
	ck_assert_ptr_null(ca);
	tls_ca_free(&ca); /* NULL is accepted */
}
END_TEST

START_TEST(test_load_leaf_days_limits)
{
	static const char *const words[] = { "leaf validity", NULL };

	load_fails(ca_pem, ca_key, 0, -EINVAL, words);
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 1);
	tls_ca_free(&ca);
	ca = load_ok(ca_pem, ca_key, TLS_CA_LEAF_DAYS_MAX);
	tls_ca_free(&ca);
	load_fails(ca_pem, ca_key, TLS_CA_LEAF_DAYS_MAX + 1, -EINVAL, words);
}
END_TEST

START_TEST(test_load_missing_files)
{
	char missing[PATH_MAX];
	const char *const cert_words[] = { "CA certificate", tt_path(missing, "nope.pem"),
					   "No such file", NULL };
	load_fails(missing, ca_key, 7, -ENOENT, cert_words);
	const char *const key_words[] = { "CA key", missing, "No such file", NULL };
	load_fails(ca_pem, missing, 7, -ENOENT, key_words);
	const char *const dir_words[] = { tt_dir, "not a regular file", NULL };
	load_fails(tt_dir, ca_key, 7, -EINVAL, dir_words);
}
END_TEST

START_TEST(test_load_not_pem)
{
	char junk[PATH_MAX];

	tt_spit(tt_path(junk, "junk"), "hello\n", 6);
	const char *const cert_words[] = { junk, "no PEM certificate", NULL };
	load_fails(junk, ca_key, 7, -EINVAL, cert_words);
	const char *const key_words[] = { junk, "no PEM private key", NULL };
	load_fails(ca_pem, junk, 7, -EINVAL, key_words);
	/* The certificate where the key should be, and the reverse. */
	load_fails(ca_pem, ca_pem, 7, -EINVAL, key_words + 1);
	load_fails(ca_key, ca_key, 7, -EINVAL, cert_words + 1);
	char empty[PATH_MAX];
	tt_spit(tt_path(empty, "empty"), "", 0);
	load_fails(empty, ca_key, 7, -EINVAL, cert_words + 1);
}
END_TEST

/* A copy of ca.pem grown to <size> bytes with text before the PEM block. */
static void padded_copy(const char *path, size_t size)
{
	size_t len = 0;
	char *pem = unit_slurp(ca_pem, &len);
	ck_assert_uint_lt(len, size);
	char *buf = pool_malloc(size);
	ck_assert_ptr_nonnull(buf);
	memset(buf, 'x', size - len - 1);
	buf[size - len - 1] = '\n';
	memcpy(buf + size - len, pem, len);
	tt_spit(path, buf, size);
	pool_free(buf);
	pool_free(pem);
}

START_TEST(test_load_file_size_limit)
{
	char big[PATH_MAX];

	padded_copy(tt_path(big, "big.pem"), TLS_CA_FILE_BYTES_MAX);
	struct tls_ca *ca = load_ok(big, ca_key, 7);
	tls_ca_free(&ca);
	padded_copy(big, TLS_CA_FILE_BYTES_MAX + 1);
	const char *const words[] = { big, "65537 bytes", NULL };
	load_fails(big, ca_key, 7, -EFBIG, words);
}
END_TEST

START_TEST(test_load_key_mismatch)
{
	char other_pem[PATH_MAX], other_key[PATH_MAX];

	tt_make_ca("other", NULL, other_pem, other_key);
	const char *const words[] = { other_key, "is not the key of", ca_pem, NULL };
	load_fails(ca_pem, other_key, 7, -EINVAL, words);
}
END_TEST

/* A CA key others may read or write, or another user's: refused, naming it and why. */
START_TEST(test_load_key_file_mode)
{
	const char *const readable[] = { ca_key, "mode 0640: group or others may read it", NULL };
	const char *const writable[] = { ca_key, "mode 0602: group or others may write it", NULL };
	const char *const foreign[] = { ca_key, "owned by uid 65534", NULL };

	ck_assert_int_eq(chmod(ca_key, 0640), 0);
	load_fails(ca_pem, ca_key, 7, -EPERM, readable);
	ck_assert_int_eq(chmod(ca_key, 0602), 0);
	load_fails(ca_pem, ca_key, 7, -EPERM, writable);
	ck_assert_int_eq(chmod(ca_key, 0600), 0);
	ck_assert_int_eq(chmod(ca_pem, 0644), 0); /* the certificate is public */
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 7);
	tls_ca_free(&ca);
	if (geteuid() != 0) {
		unit_skip("its other-owner case needs root");
		return;
	}
	ck_assert_int_eq(chown(ca_key, 65534, 65534), 0);
	load_fails(ca_pem, ca_key, 7, -EPERM, foreign);
}
END_TEST

/*
 * CAs that must not load, each made with one fault: the message names the file
 * at fault and says what is wrong with it.
 */
START_TEST(test_load_bad_ca)
{
	static const struct {
		const char *name;
		struct tt_ca_opts o;
		bool key_at_fault; /* the message names the key file, not the certificate */
		const char *what;
		const char *what_more; /* NULL: nothing more to find */
		int want;
	} cases[] = {
		{ "leafish", { .not_ca = true }, false, "not a CA", NULL, -EINVAL },
		{ "expired",
		  { .not_before_s = -7200, .not_after_s = -60 },
		  false,
		  "expired on",
		  "UTC",
		  -EKEYEXPIRED },
		{ "future",
		  { .not_before_s = 3600, .not_after_s = 7200 },
		  false,
		  "not valid before",
		  NULL,
		  -EINVAL },
		{ "enc", { .encrypt_key = true }, true, "encrypted", NULL, -EINVAL },
	};
	char pem[PATH_MAX], key[PATH_MAX];

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		tt_make_ca(cases[i].name, &cases[i].o, pem, key);
		const char *const words[] = { cases[i].key_at_fault ? key : pem, cases[i].what,
					      cases[i].what_more, NULL };
		load_fails(pem, key, 7, cases[i].want, words);
	}
}
END_TEST

START_TEST(test_load_short_err_buffer)
{
	char err[8];
	struct tls_ca *ca = NULL;

	ck_assert_int_eq(tls_ca_load("/nonexistent/ca.pem", ca_key, 7, &ca, err, sizeof(err)),
			 -ENOENT);
	ck_assert_uint_eq(strlen(err), sizeof(err) - 1);
	ck_assert_int_eq(tls_ca_load("/nonexistent/ca.pem", ca_key, 7, &ca, NULL, 0), -ENOENT);
}
END_TEST

START_TEST(test_load_rsa_and_no_key_usage)
{
	char pem[PATH_MAX], key[PATH_MAX];
	struct tt_ca_opts rsa = { .rsa = true };
	int64_t now = (int64_t)time(NULL);

	tt_make_ca("rsa", &rsa, pem, key);
	struct tls_ca *ca = load_ok(pem, key, 7);
	X509 *x = mint_ok(ca, "rsa.example.test", now);
	ck_assert_int_eq(X509_get_signature_nid(x), NID_sha256WithRSAEncryption);
	ck_assert_int_eq(verify_leaf(ca, x, "rsa.example.test", NULL), 1);
	X509_free(x);
	tls_ca_free(&ca);
	struct tt_ca_opts noku = { .no_ku = true };
	tt_make_ca("noku", &noku, pem, key);
	ca = load_ok(pem, key, 7);
	tls_ca_free(&ca);
}
END_TEST

/* ---- Minting. ---- */

START_TEST(test_mint_dns)
{
	struct tls_ca *ca = load_ok(ca_pem, ca_key, TLS_CA_LEAF_DAYS_DEFAULT);
	int64_t now = (int64_t)time(NULL);
	X509 *x = mint_ok(ca, "api.example.test", now);
	unsigned char san[256];
	size_t san_len = 0;
	int crit = -1;
	char cn[128];

	ck_assert_int_eq(X509_get_version(x), X509_VERSION_3);
	ck_assert_int_eq(time_of(X509_get0_notBefore(x)), now - TLS_CA_LEAF_BACKDATE_S);
	ck_assert_int_eq(time_of(X509_get0_notAfter(x)), now + 7 * 86400);
	ck_assert_int_eq(
	    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof(cn)),
	    16);
	ck_assert_str_eq(cn, "api.example.test");
	ck_assert_int_eq(
	    X509_NAME_cmp(X509_get_issuer_name(x), X509_get_subject_name(tls_ca_cert(ca))), 0);
	ck_assert_int_eq(san_of(x, san, sizeof(san), &san_len, &crit), GEN_DNS);
	ck_assert_int_eq(crit, 0);
	ck_assert_uint_eq(san_len, 16);
	ck_assert_int_eq(memcmp(san, "api.example.test", 16), 0);
	ck_assert_int_eq(X509_check_ca(x), 0);
	ck_assert(ext_critical(x, NID_basic_constraints));
	ck_assert(ext_critical(x, NID_key_usage));
	ck_assert(!ext_critical(x, NID_ext_key_usage));
	ck_assert_uint_eq(X509_get_key_usage(x), KU_DIGITAL_SIGNATURE);
	ck_assert_uint_eq(X509_get_extended_key_usage(x), XKU_SSL_SERVER);
	ck_assert_ptr_nonnull(X509_get0_subject_key_id(x));
	ck_assert_int_eq(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(x),
					       X509_get0_subject_key_id(tls_ca_cert(ca))),
			 0);
	ck_assert_int_eq(X509_get_signature_nid(x), NID_ecdsa_with_SHA256);
	ck_assert_int_eq(EVP_PKEY_eq(X509_get0_pubkey(x), tls_ca_leaf_key(ca)), 1);
	ck_assert_int_eq(verify_leaf(ca, x, "api.example.test", NULL), 1);
	ck_assert_int_ne(verify_leaf(ca, x, "other.example.test", NULL), 1);
	ck_assert_int_ne(X509_check_host(x, "example.test", 0, 0, NULL), 1);
	X509_free(x);
	tls_ca_free(&ca);
}
END_TEST

START_TEST(test_mint_serials_and_shared_key)
{
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 7);
	int64_t now = (int64_t)time(NULL);
	X509 *a = mint_ok(ca, "a.example.test", now);
	X509 *b = mint_ok(ca, "a.example.test", now);

	for (int i = 0; i < 2; i++) {
		BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(i ? b : a), NULL);
		ck_assert_ptr_nonnull(bn);
		ck_assert_int_eq(BN_is_negative(bn), 0);
		ck_assert_int_eq(BN_num_bytes(bn), TLS_CA_SERIAL_BYTES);
		BN_free(bn);
	}
	ck_assert_int_ne(ASN1_INTEGER_cmp(X509_get0_serialNumber(a), X509_get0_serialNumber(b)), 0);
	ck_assert_int_eq(EVP_PKEY_eq(X509_get0_pubkey(a), X509_get0_pubkey(b)), 1);
	ck_assert_int_eq(
	    ASN1_OCTET_STRING_cmp(X509_get0_subject_key_id(a), X509_get0_subject_key_id(b)), 0);
	X509_free(a);
	X509_free(b);
	tls_ca_free(&ca);
}
END_TEST

START_TEST(test_mint_ip)
{
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 7);
	int64_t now = (int64_t)time(NULL);
	unsigned char san[32];
	size_t len = 0;
	int crit = -1;

	X509 *x = mint_ok(ca, "127.0.0.1", now);
	ck_assert_int_eq(san_of(x, san, sizeof(san), &len, &crit), GEN_IPADD);
	ck_assert_uint_eq(len, 4);
	ck_assert_int_eq(memcmp(san, "\x7f\0\0\x01", 4), 0);
	ck_assert_int_eq(X509_check_ip_asc(x, "127.0.0.1", 0), 1);
	ck_assert_int_ne(X509_check_ip_asc(x, "127.0.0.2", 0), 1);
	ck_assert_int_ne(
	    X509_check_host(x, "127.0.0.1", 0, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, NULL), 1);
	ck_assert_int_eq(verify_leaf(ca, x, NULL, "127.0.0.1"), 1);
	X509_free(x);
	x = mint_ok(ca, "2001:db8::1", now);
	ck_assert_int_eq(san_of(x, san, sizeof(san), &len, &crit), GEN_IPADD);
	ck_assert_uint_eq(len, 16);
	ck_assert_int_eq(X509_check_ip_asc(x, "2001:db8:0::1", 0), 1);
	ck_assert_int_eq(verify_leaf(ca, x, NULL, "2001:db8::1"), 1);
	ck_assert_int_ne(verify_leaf(ca, x, NULL, "2001:db8::2"), 1);
	X509_free(x);
	tls_ca_free(&ca);
}
END_TEST

/* A name of <len> bytes: labels of 63 'a's (the last one shorter), with 'z' as the TLD's end. */
static void make_name(char *out, size_t len)
{
	for (size_t i = 0; i < len; i++)
		out[i] = (i % 64 == 63) ? '.' : 'a';
	out[len - 1] = 'z';
	out[len] = '\0';
}

/* "aaa...a.com", <len> bytes in all. */
static void dot_com(char *out, size_t len)
{
	ck_assert_uint_ge(len, 5);
	memset(out, 'a', len - 4);
	memcpy(out + len - 4, ".com", 5);
	ck_assert_uint_eq(strlen(out), len);
}

START_TEST(test_mint_name_lengths)
{
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 7);
	int64_t now = (int64_t)time(NULL);
	char name[300];
	unsigned char san[300];
	size_t len = 0;
	int crit = -1;
	X509 *x = NULL;

	/* CN bound: 64 bytes keeps the CN, 65 drops it and makes the SAN critical. */
	dot_com(name, 64);
	x = mint_ok(ca, name, now);
	ck_assert_int_eq(X509_NAME_entry_count(X509_get_subject_name(x)), 1);
	san_of(x, san, sizeof(san), &len, &crit);
	ck_assert_int_eq(crit, 0);
	X509_free(x);
	dot_com(name, 65);
	x = mint_ok(ca, name, now);
	ck_assert_int_eq(X509_NAME_entry_count(X509_get_subject_name(x)), 0);
	ck_assert_int_eq(san_of(x, san, sizeof(san), &len, &crit), GEN_DNS);
	ck_assert_int_eq(crit, 1);
	ck_assert_uint_eq(len, 65);
	X509_free(x);
	/* Whole name: 253 bytes at most. */
	make_name(name, 253);
	x = mint_ok(ca, name, now);
	ck_assert_int_eq(verify_leaf(ca, x, name, NULL), 1);
	X509_free(x);
	make_name(name, 254);
	ck_assert_int_eq(tls_leaf_mint(ca, name, 254, now, &x), -EINVAL);
	ck_assert_ptr_null(x);
	tls_ca_free(&ca);
}
END_TEST

START_TEST(test_mint_label_lengths)
{
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 7);
	int64_t now = (int64_t)time(NULL);
	char name[128];
	X509 *x = NULL;

	memset(name, 'a', 63);
	memcpy(name + 63, ".test", 6);
	x = mint_ok(ca, name, now);
	X509_free(x);
	memset(name, 'a', 64);
	memcpy(name + 64, ".test", 6);
	ck_assert_int_eq(tls_leaf_mint(ca, name, strlen(name), now, &x), -EINVAL);
	tls_ca_free(&ca);
}
END_TEST

START_TEST(test_mint_bad_hosts)
{
	static const char *const bad[] = {
		"",
		".",
		"a..b",
		".a",
		"a.",
		"a b",
		"1.2.3",
		"127.1",
		"[::1]",
		"*.example.com",
		"exa%mple.com",
		"ex/ample.com",
		"::1::",
		"1.2.3.256",
	};
	static const char *const good[] = { "localhost",      "a-b.example", "_srv.example.test",
					    "x1.example.com", "EXAMPLE.com", "a.1b" };
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 7);
	int64_t now = (int64_t)time(NULL);
	X509 *x = NULL;

	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++)
		ck_assert_msg(tls_leaf_mint(ca, bad[i], strlen(bad[i]), now, &x) == -EINVAL,
			      "%s minted", bad[i]);
	ck_assert_int_eq(tls_leaf_mint(ca, "a\0b.com", 7, now, &x), -EINVAL);
	ck_assert_int_eq(tls_leaf_mint(ca, NULL, 0, now, &x), -EINVAL);
	ck_assert_ptr_null(x);
	for (size_t i = 0; i < AN_ARRAY_LEN(good); i++) {
		x = mint_ok(ca, good[i], now);
		X509_free(x);
	}
	tls_ca_free(&ca);
}
END_TEST

START_TEST(test_mint_clamped_to_ca)
{
	char pem[PATH_MAX], key[PATH_MAX];
	struct tt_ca_opts o = { .not_before_s = -60, .not_after_s = 2 * 86400 };
	int64_t now = (int64_t)time(NULL);

	tt_make_ca("short", &o, pem, key);
	struct tls_ca *ca = load_ok(pem, key, 7);
	int64_t ca_nb = time_of(X509_get0_notBefore(tls_ca_cert(ca)));
	int64_t ca_na = time_of(X509_get0_notAfter(tls_ca_cert(ca)));
	X509 *x = mint_ok(ca, "short.example.test", now);
	ck_assert_int_eq(time_of(X509_get0_notBefore(x)), ca_nb);
	ck_assert_int_eq(time_of(X509_get0_notAfter(x)), ca_na);
	X509_free(x);
	/* The last second of the CA still mints; its notAfter does not. */
	x = mint_ok(ca, "short.example.test", ca_na - 1);
	ck_assert_int_eq(time_of(X509_get0_notAfter(x)), ca_na);
	X509_free(x);
	x = NULL;
	ck_assert_int_eq(tls_leaf_mint(ca, "short.example.test", 18, ca_na, &x), -EKEYEXPIRED);
	ck_assert_int_eq(tls_leaf_mint(ca, "short.example.test", 18, ca_nb - 1, &x), -EKEYEXPIRED);
	ck_assert_ptr_null(x);
	tls_ca_free(&ca);
}
END_TEST

START_TEST(test_mint_time)
{
	enum { ROUNDS = 2000 };
	struct tls_ca *ca = load_ok(ca_pem, ca_key, 7);
	int64_t now = (int64_t)time(NULL);
	char host[64];
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < ROUNDS; i++) {
		X509 *x = NULL;
		int n = snprintf(host, sizeof(host), "h%d.example.test", i);
		ck_assert_int_eq(tls_leaf_mint(ca, host, (size_t)n, now, &x), 0);
		X509_free(x);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double us =
	    ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3);
	printf("tls_leaf_mint: %.1f us per leaf (%d leaves)\n", us / ROUNDS, ROUNDS);
	tls_ca_free(&ca);
}
END_TEST

/* ---- tls/tls.c. ---- */

START_TEST(test_tls_helpers)
{
	char err[64];
	int64_t s = 0;

	ck_assert_int_eq(tls_library_init(err, sizeof(err)), 0);
	ck_assert_int_eq(tls_library_init(NULL, 0), 0);
	ck_assert_int_eq(tls_fail(NULL, 0, -EINVAL, "x %d", 1), -EINVAL);
	ck_assert_int_eq(tls_fail(err, sizeof(err), -ENOENT, "x %d", 1), -ENOENT);
	ck_assert_str_eq(err, "x 1");
	ERR_clear_error();
	ck_assert_int_eq(tls_fail_ossl(err, sizeof(err), "what"), -EIO);
	ck_assert_str_eq(err, "what: unknown error");
	ASN1_TIME *t = ASN1_TIME_new();
	ck_assert_int_eq(ASN1_TIME_set_string(t, "20300102030405Z"), 1);
	ck_assert_int_eq(tls_time_s(t, &s), 0);
	ck_assert_int_eq(s, 1893553445);
	ASN1_STRING_set(t, "garbage", 7);
	ck_assert_int_eq(tls_time_s(t, &s), -EINVAL);
	ck_assert_int_eq(ERR_peek_error(), 0);
	ASN1_TIME_free(t);
}
END_TEST

static Suite *ca_suite(void)
{
	Suite *s = suite_create("tls_ca");
	TCase *tc = tcase_create("load");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_load_ok);
	tcase_add_test(tc, test_load_leaf_days_limits);
	tcase_add_test(tc, test_load_missing_files);
	tcase_add_test(tc, test_load_not_pem);
	tcase_add_test(tc, test_load_file_size_limit);
	tcase_add_test(tc, test_load_key_mismatch);
	tcase_add_test(tc, test_load_bad_ca);
	tcase_add_test(tc, test_load_short_err_buffer);
	tcase_add_test(tc, test_load_rsa_and_no_key_usage);
	tcase_add_test(tc, test_tls_helpers);
	tcase_add_test(tc, test_load_key_file_mode);
	suite_add_tcase(s, tc);
	TCase *tm = tcase_create("mint");
	tcase_set_timeout(tm, 60);
	tcase_add_checked_fixture(tm, setup, teardown);
	tcase_add_test(tm, test_mint_dns);
	tcase_add_test(tm, test_mint_serials_and_shared_key);
	tcase_add_test(tm, test_mint_ip);
	tcase_add_test(tm, test_mint_name_lengths);
	tcase_add_test(tm, test_mint_label_lengths);
	tcase_add_test(tm, test_mint_bad_hosts);
	tcase_add_test(tm, test_mint_clamped_to_ca);
	tcase_add_test(tm, test_mint_time);
	suite_add_tcase(s, tm);
	return s;
}

int main(void)
{
	return unit_run(ca_suite());
}
