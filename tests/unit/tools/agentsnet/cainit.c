/*
 * Unit tests for tools/agentsnet/cainit.c: `agentsnet ca init` in temporary directories.
 *
 * The certificate is parsed back with OpenSSL and every property of the
 * contract is checked (version, subject, serial size, validity window,
 * critical basicConstraints CA:TRUE pathlen:0, critical keyUsage
 * keyCertSign+cRLSign, SKI, key type, the key matching the certificate);
 * `openssl verify` must accept ca.pem against itself and against the bundle.
 * The host roots are a file the test writes (a certificate from a first CA),
 * so the bundle's content is known exactly; one test uses the real
 * /etc/ssl/certs bundle when the host has it. Modes are checked under two
 * umasks, the O_EXCL and --force paths with the key compared byte for byte,
 * a failed write with RLIMIT_FSIZE, and days at 0, 1, 3650 and 3651.
 */
#include "../../../../tools/agentsnet/cainit.c"

#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include <openssl/asn1.h>
#include "tests/unit/unit.h"

/* ---- Helpers. ---- */

struct env {
	char base[64];    /* mkdtemp */
	char dir[128];    /* base/ca: created by ca_init */
	char roots[128];  /* base/roots.pem */
	char *roots_text; /* owned: what roots holds */
	size_t roots_len;
};

static void spit(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void path_in(char *out, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(out, cap, "%s/%s", dir, name);
	ck_assert_int_gt(n, 0);
	ck_assert_int_lt(n, (int)cap);
}

/* The contents of <dir>/<name> (owned, NUL-terminated), its length in *<len>. */
static char *slurp_in(const char *dir, const char *name, size_t *len)
{
	char path[PATH_MAX];

	path_in(path, sizeof(path), dir, name);
	return unit_slurp(path, len);
}

static int init_ca(const char *dir, const char *roots, uint32_t days, bool force, char *err,
		   size_t err_len)
{
	struct ca_options o = { .dir = dir, .host_roots = roots, .days = days, .force = force };
	struct ca_result r;

	int ret = ca_init(&o, &r, err, err_len);
	if (ret == 0) {
		char want[PATH_MAX + 16];
		char canon[PATH_MAX];
		ck_assert_ptr_nonnull(realpath(dir, canon));
		path_in(want, sizeof(want), canon, "ca.key");
		ck_assert_str_eq(r.key_path, want);
		path_in(want, sizeof(want), canon, "bundle.pem");
		ck_assert_str_eq(r.bundle_path, want);
		ck_assert_uint_eq(strlen(r.fingerprint), 95);
		ck_assert_int_eq(strncmp(r.subject_cn, "agentsnet demo CA ", 18), 0);
	}
	return ret;
}

/* A base directory with a roots file holding one certificate (from a throwaway CA). */
static void env_setup(struct env *e)
{
	char err[512], tmp_dir[160], tmp_cert[200];

	memset(e, 0, sizeof(*e));
	snprintf(e->base, sizeof(e->base), "/tmp/an-ca-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(e->base));
	path_in(e->dir, sizeof(e->dir), e->base, "ca");
	path_in(e->roots, sizeof(e->roots), e->base, "roots.pem");
	path_in(tmp_dir, sizeof(tmp_dir), e->base, "seed");
	/* The seed CA needs roots of its own: a file with a PEM header is enough for ca_init. */
	static const char stub[] = "-----BEGIN CERTIFICATE-----\nstub\n-----END CERTIFICATE-----\n";
	spit(e->roots, stub, sizeof(stub) - 1);
	ck_assert_int_eq(init_ca(tmp_dir, e->roots, 30, false, err, sizeof(err)), 0);
	path_in(tmp_cert, sizeof(tmp_cert), tmp_dir, "ca.pem");
	e->roots_text = unit_slurp(tmp_cert, &e->roots_len);
	spit(e->roots, e->roots_text, e->roots_len);
}

static void rm_rf(const char *path)
{
	char cmd[256];
	ck_assert_int_lt(snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path), (int)sizeof(cmd));
	ck_assert_int_eq(system(cmd), 0);
}

static void env_teardown(struct env *e)
{
	rm_rf(e->base);
	AN_FREE(&e->roots_text);
}

static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	}
	closedir(d);
	return n;
}

static mode_t mode_of(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	path_in(path, sizeof(path), dir, name);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode));
	return st.st_mode & 07777;
}

static X509 *load_cert(const char *dir)
{
	char path[PATH_MAX];
	path_in(path, sizeof(path), dir, "ca.pem");
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	ck_assert_ptr_nonnull(x);
	return x;
}

static EVP_PKEY *load_key(const char *dir)
{
	char path[PATH_MAX];
	path_in(path, sizeof(path), dir, "ca.key");
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	ck_assert_ptr_nonnull(k);
	return k;
}

/* Seconds from now to <t> (negative: in the past). */
static long long seconds_from_now(const ASN1_TIME *t)
{
	int days = 0, secs = 0;
	ck_assert_int_eq(ASN1_TIME_diff(&days, &secs, NULL, t), 1);
	return (long long)days * 86400 + secs;
}

static bool have_openssl_cli(void)
{
	return system("command -v openssl >/dev/null 2>&1") == 0;
}

static int openssl_verify(const char *cafile, const char *cert)
{
	char cmd[1024];
	ck_assert_int_lt(snprintf(cmd, sizeof(cmd),
				  "openssl verify -CAfile '%s' '%s' >/dev/null 2>&1", cafile, cert),
			 (int)sizeof(cmd));
	return system(cmd);
}

/* ---- Files and modes. ---- */

static void check_files(const struct env *e)
{
	ck_assert_int_eq(entries(e->dir), 3); /* no temporary file left */
	ck_assert_int_eq(mode_of(e->dir, "ca.key"), 0600);
	ck_assert_int_eq(mode_of(e->dir, "ca.pem"), 0644);
	ck_assert_int_eq(mode_of(e->dir, "bundle.pem"), 0644);
	ck_assert_int_eq(mode_of(e->base, "ca"), 0700);
}

START_TEST(files_and_modes)
{
	struct env e;
	char err[512];
	env_setup(&e);
	ck_assert_int_eq(init_ca(e.dir, e.roots, CA_DAYS_DEFAULT, false, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	check_files(&e);
	env_teardown(&e);
}
END_TEST

/* The umask neither loosens the key nor tightens the certificate. */
START_TEST(modes_ignore_umask)
{
	static const mode_t masks[] = { 0, 077 };
	struct env e;
	char err[512];

	for (size_t i = 0; i < AN_ARRAY_LEN(masks); i++) {
		env_setup(&e);
		mode_t old = umask(masks[i]);
		int ret = init_ca(e.dir, e.roots, CA_DAYS_DEFAULT, false, err, sizeof(err));
		umask(old);
		ck_assert_int_eq(ret, 0);
		check_files(&e);
		env_teardown(&e);
	}
}
END_TEST

START_TEST(nested_dir_and_trailing_slash)
{
	struct env e;
	char dir[256], err[512];
	env_setup(&e);
	ck_assert_int_lt(snprintf(dir, sizeof(dir), "%s/a/b/", e.base), (int)sizeof(dir));
	ck_assert_int_eq(init_ca(dir, e.roots, 10, false, err, sizeof(err)), 0);
	ck_assert_int_eq(mode_of(e.base, "a") & 0700, 0700);
	ck_assert_int_eq(mode_of(e.base, "a/b"), 0700);
	ck_assert_int_eq(entries(dir), 3);
	env_teardown(&e);
}
END_TEST

/* An existing directory keeps its mode. */
START_TEST(existing_dir_kept)
{
	struct env e;
	char err[512];
	env_setup(&e);
	ck_assert_int_eq(mkdir(e.dir, 0750), 0);
	ck_assert_int_eq(chmod(e.dir, 0750), 0);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), 0);
	ck_assert_int_eq(mode_of(e.base, "ca"), 0750);
	env_teardown(&e);
}
END_TEST

/* ---- The certificate and key, parsed back. ---- */

static void check_extensions(X509 *x)
{
	ck_assert_int_eq(X509_get_ext_count(x), 3);
	int i = X509_get_ext_by_NID(x, NID_basic_constraints, -1);
	ck_assert_int_ge(i, 0);
	ck_assert_int_eq(X509_EXTENSION_get_critical(X509_get_ext(x, i)), 1);
	BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(x, NID_basic_constraints, NULL, NULL);
	ck_assert_ptr_nonnull(bc);
	ck_assert_int_ne(bc->ca, 0);
	ck_assert_ptr_nonnull(bc->pathlen);
	ck_assert_int_eq(ASN1_INTEGER_get(bc->pathlen), 0);
	BASIC_CONSTRAINTS_free(bc);
	ck_assert_int_eq(X509_get_pathlen(x), 0);
	ck_assert_uint_ne(X509_get_extension_flags(x) & EXFLAG_CA, 0);
	i = X509_get_ext_by_NID(x, NID_key_usage, -1);
	ck_assert_int_ge(i, 0);
	ck_assert_int_eq(X509_EXTENSION_get_critical(X509_get_ext(x, i)), 1);
	ck_assert_uint_eq(X509_get_key_usage(x), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	i = X509_get_ext_by_NID(x, NID_subject_key_identifier, -1);
	ck_assert_int_ge(i, 0);
	ck_assert_int_eq(X509_EXTENSION_get_critical(X509_get_ext(x, i)), 0);
	const ASN1_OCTET_STRING *ski = X509_get0_subject_key_id(x);
	ck_assert_ptr_nonnull(ski);
	ck_assert_int_eq(ASN1_STRING_length(ski), 20); /* SHA-1 of the public key */
}

static void check_names_and_serial(X509 *x)
{
	char cn[128];

	ck_assert_int_eq(X509_get_version(x), X509_VERSION_3);
	ck_assert_int_eq(X509_NAME_cmp(X509_get_subject_name(x), X509_get_issuer_name(x)), 0);
	int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
					  (int)sizeof(cn));
	ck_assert_int_eq(n, 26);
	ck_assert_int_eq(strncmp(cn, "agentsnet demo CA ", 18), 0);
	ck_assert_uint_eq(strspn(cn + 18, "0123456789abcdef"), 8);
	BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	ck_assert_ptr_nonnull(bn);
	ck_assert_int_eq(BN_is_negative(bn), 0);
	ck_assert_int_gt(BN_num_bits(bn), 120); /* first byte non-zero */
	ck_assert_int_le(BN_num_bits(bn), 128);
	BN_free(bn);
}

static void check_validity(X509 *x, uint32_t days)
{
	long long before = seconds_from_now(X509_get0_notBefore(x));
	long long after = seconds_from_now(X509_get0_notAfter(x));
	ck_assert_int_le(before, -3600 + 60);
	ck_assert_int_ge(before, -3600 - 60);
	ck_assert_int_le(after, (long long)days * 86400);
	ck_assert_int_ge(after, (long long)days * 86400 - 60);
	ck_assert_int_eq(X509_cmp_current_time(X509_get0_notBefore(x)), -1);
	ck_assert_int_eq(X509_cmp_current_time(X509_get0_notAfter(x)), 1);
}

static void check_key(X509 *x, const char *dir)
{
	char group[32];
	size_t len = 0;
	EVP_PKEY *k = load_key(dir);

	ck_assert_int_eq(EVP_PKEY_get_base_id(k), EVP_PKEY_EC);
	ck_assert_int_eq(EVP_PKEY_get_group_name(k, group, sizeof(group), &len), 1);
	ck_assert_str_eq(group, "prime256v1");
	ck_assert_int_eq(X509_check_private_key(x, k), 1);
	ck_assert_int_eq(X509_verify(x, k), 1);
	ck_assert_int_eq(X509_get_signature_nid(x), NID_ecdsa_with_SHA256);
	EVP_PKEY_free(k);
}

static void check_ca(const char *dir, uint32_t days)
{
	X509 *x = load_cert(dir);
	check_names_and_serial(x);
	check_extensions(x);
	check_validity(x, days);
	check_key(x, dir);
	X509_free(x);
}

START_TEST(certificate_fields)
{
	static const uint32_t days[] = { 1, CA_DAYS_DEFAULT, CA_DAYS_MAX };
	struct env e;
	char err[512];

	for (size_t i = 0; i < AN_ARRAY_LEN(days); i++) {
		env_setup(&e);
		ck_assert_int_eq(init_ca(e.dir, e.roots, days[i], false, err, sizeof(err)), 0);
		check_ca(e.dir, days[i]);
		env_teardown(&e);
	}
}
END_TEST

/* Two CAs never share a key, serial or name. */
START_TEST(each_ca_is_new)
{
	struct env e;
	char err[512], other[160];
	env_setup(&e);
	path_in(other, sizeof(other), e.base, "other");
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), 0);
	ck_assert_int_eq(init_ca(other, e.roots, 10, false, err, sizeof(err)), 0);
	X509 *a = load_cert(e.dir), *b = load_cert(other);
	ck_assert_int_ne(ASN1_INTEGER_cmp(X509_get0_serialNumber(a), X509_get0_serialNumber(b)), 0);
	ck_assert_int_ne(X509_NAME_cmp(X509_get_subject_name(a), X509_get_subject_name(b)), 0);
	EVP_PKEY *k = load_key(e.dir);
	ck_assert_int_ne(X509_check_private_key(b, k), 1);
	ERR_clear_error();
	EVP_PKEY_free(k);
	X509_free(a);
	X509_free(b);
	env_teardown(&e);
}
END_TEST

START_TEST(openssl_verify_accepts)
{
	struct env e;
	char err[512], cert[PATH_MAX], bundle[PATH_MAX];

	if (!have_openssl_cli()) {
		unit_skip("no openssl command");
		return;
	}
	env_setup(&e);
	ck_assert_int_eq(init_ca(e.dir, e.roots, CA_DAYS_DEFAULT, false, err, sizeof(err)), 0);
	path_in(cert, sizeof(cert), e.dir, "ca.pem");
	path_in(bundle, sizeof(bundle), e.dir, "bundle.pem");
	ck_assert_int_eq(openssl_verify(cert, cert), 0);
	ck_assert_int_eq(openssl_verify(bundle, cert), 0);
	/* The host root in the bundle verifies too: the bundle carries both. */
	char seed[PATH_MAX];
	path_in(seed, sizeof(seed), e.base, "seed/ca.pem");
	ck_assert_int_eq(openssl_verify(bundle, seed), 0);
	ck_assert_int_ne(openssl_verify(cert, seed), 0);
	env_teardown(&e);
}
END_TEST

/* ---- The bundle. ---- */

START_TEST(bundle_is_roots_then_ca)
{
	struct env e;
	char err[512];
	size_t bundle_len = 0, cert_len = 0;

	env_setup(&e);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), 0);
	char *bundle = slurp_in(e.dir, "bundle.pem", &bundle_len);
	char *cert = slurp_in(e.dir, "ca.pem", &cert_len);
	ck_assert_uint_eq(bundle_len, e.roots_len + cert_len);
	ck_assert_int_eq(memcmp(bundle, e.roots_text, e.roots_len), 0);
	ck_assert_int_eq(memcmp(bundle + e.roots_len, cert, cert_len), 0);
	AN_FREE(&bundle);
	AN_FREE(&cert);
	env_teardown(&e);
}
END_TEST

/* Roots without a final newline get one, so our BEGIN line starts a line. */
START_TEST(bundle_roots_without_newline)
{
	struct env e;
	char err[512];
	size_t bundle_len = 0;

	env_setup(&e);
	ck_assert_int_eq(e.roots_text[e.roots_len - 1], '\n');
	spit(e.roots, e.roots_text, e.roots_len - 1);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), 0);
	char *bundle = slurp_in(e.dir, "bundle.pem", &bundle_len);
	ck_assert_int_eq(memcmp(bundle, e.roots_text, e.roots_len), 0);
	ck_assert_int_eq(strncmp(bundle + e.roots_len, "-----BEGIN CERTIFICATE-----", 27), 0);
	AN_FREE(&bundle);
	env_teardown(&e);
}
END_TEST

/* The default roots: the host's bundle, then the CA; every host root still verifies. */
START_TEST(bundle_with_host_roots)
{
	struct env e;
	char err[512], path[PATH_MAX];
	size_t bundle_len = 0, host_len = 0;

	if (access(CA_HOST_ROOTS_DEFAULT, R_OK) != 0) {
		unit_skip("no %s", CA_HOST_ROOTS_DEFAULT);
		return;
	}
	env_setup(&e);
	ck_assert_int_eq(init_ca(e.dir, NULL, 10, false, err, sizeof(err)), 0);
	char *host = unit_slurp(CA_HOST_ROOTS_DEFAULT, &host_len);
	char *bundle = slurp_in(e.dir, "bundle.pem", &bundle_len);
	ck_assert_uint_ge(bundle_len, host_len);
	ck_assert_int_eq(memcmp(bundle, host, host_len), 0);
	ck_assert_ptr_nonnull(strstr(bundle + host_len, "-----BEGIN CERTIFICATE-----"));
	if (have_openssl_cli()) {
		char cert[PATH_MAX];
		path_in(cert, sizeof(cert), e.dir, "ca.pem");
		path_in(path, sizeof(path), e.dir, "bundle.pem");
		ck_assert_int_eq(openssl_verify(path, cert), 0);
	}
	AN_FREE(&host);
	AN_FREE(&bundle);
	env_teardown(&e);
}
END_TEST

START_TEST(roots_missing_or_empty)
{
	struct env e;
	char err[512], missing[PATH_MAX];

	env_setup(&e);
	path_in(missing, sizeof(missing), e.base, "no-such-roots.pem");
	ck_assert_int_eq(init_ca(e.dir, missing, 10, false, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, missing));
	ck_assert_ptr_nonnull(strstr(err, "ca-certificates"));
	ck_assert_int_eq(access(e.dir, F_OK), -1); /* nothing created */
	spit(e.roots, "not a certificate\n", 18);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "no PEM certificate"));
	ck_assert_int_eq(init_ca(e.dir, e.base, 10, false, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(access(e.dir, F_OK), -1);
	env_teardown(&e);
}
END_TEST

/* ---- Limits and refusals. ---- */

START_TEST(days_limits)
{
	struct env e;
	char err[512];

	env_setup(&e);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 0, false, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "--days 0: not 1..3650");
	ck_assert_int_eq(init_ca(e.dir, e.roots, CA_DAYS_MAX + 1, false, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "--days 3651: not 1..3650");
	ck_assert_int_eq(access(e.dir, F_OK), -1);
	ck_assert_int_eq(init_ca(e.dir, e.roots, CA_DAYS_MAX, false, err, sizeof(err)), 0);
	env_teardown(&e);
}
END_TEST

START_TEST(bad_dir)
{
	struct env e;
	char err[512], file[PATH_MAX];
	static char longdir[PATH_MAX + 8];

	env_setup(&e);
	ck_assert_int_eq(init_ca("", e.roots, 10, false, err, sizeof(err)), -EINVAL);
	memset(longdir, 'a', sizeof(longdir) - 1);
	longdir[0] = '/';
	ck_assert_int_eq(init_ca(longdir, e.roots, 10, false, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "too long"));
	path_in(file, sizeof(file), e.base, "plain-file");
	spit(file, "x", 1);
	ck_assert_int_eq(init_ca(file, e.roots, 10, false, err, sizeof(err)), -ENOTDIR);
	env_teardown(&e);
}
END_TEST

/* Without --force an existing CA is refused and left byte for byte as it was. */
START_TEST(exclusive_without_force)
{
	static const char *const names[] = { "ca.key", "ca.pem", "bundle.pem" };
	struct env e;
	char err[512], path[PATH_MAX];
	size_t len_before = 0, len_after = 0;

	env_setup(&e);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), 0);
	char *before = slurp_in(e.dir, "ca.key", &len_before);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), -EEXIST);
	ck_assert_ptr_nonnull(strstr(err, "--force"));
	char *after = slurp_in(e.dir, "ca.key", &len_after);
	ck_assert_uint_eq(len_before, len_after);
	ck_assert_int_eq(memcmp(before, after, len_before), 0);
	ck_assert_int_eq(entries(e.dir), 3);
	AN_FREE(&before);
	AN_FREE(&after);
	/* Any one of the three is enough to refuse, and nothing new appears. */
	for (size_t i = 0; i < AN_ARRAY_LEN(names); i++) {
		rm_rf(e.dir);
		ck_assert_int_eq(mkdir(e.dir, 0700), 0);
		path_in(path, sizeof(path), e.dir, names[i]);
		spit(path, "old", 3);
		ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), -EEXIST);
		ck_assert_ptr_nonnull(strstr(err, names[i]));
		ck_assert_int_eq(entries(e.dir), 1);
	}
	env_teardown(&e);
}
END_TEST

/* A symlink named ca.key counts as existing, and --force replaces the link, not its target. */
START_TEST(symlinked_key)
{
	struct env e;
	char err[512], link[PATH_MAX], target[PATH_MAX];
	size_t len = 0;

	env_setup(&e);
	ck_assert_int_eq(mkdir(e.dir, 0700), 0);
	path_in(target, sizeof(target), e.base, "victim");
	spit(target, "precious", 8);
	path_in(link, sizeof(link), e.dir, "ca.key");
	ck_assert_int_eq(symlink(target, link), 0);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), -EEXIST);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, true, err, sizeof(err)), 0);
	char *victim = unit_slurp(target, &len);
	ck_assert_str_eq(victim, "precious");
	ck_assert_int_eq(mode_of(e.dir, "ca.key"), 0600); /* a regular file now */
	AN_FREE(&victim);
	env_teardown(&e);
}
END_TEST

START_TEST(force_replaces)
{
	struct env e;
	char err[512], path[PATH_MAX];
	size_t len_before = 0, len_after = 0;

	env_setup(&e);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, false, err, sizeof(err)), 0);
	path_in(path, sizeof(path), e.dir, "ca.key");
	char *before = unit_slurp(path, &len_before);
	ck_assert_int_eq(chmod(path, 0644), 0); /* a loosened old key must not stay loose */
	ck_assert_int_eq(init_ca(e.dir, e.roots, 20, true, err, sizeof(err)), 0);
	char *after = unit_slurp(path, &len_after);
	ck_assert(len_before != len_after || memcmp(before, after, len_before) != 0);
	check_files(&e);
	check_ca(e.dir, 20);
	AN_FREE(&before);
	AN_FREE(&after);
	/* --force on an empty directory is a plain init. */
	rm_rf(e.dir);
	ck_assert_int_eq(init_ca(e.dir, e.roots, 10, true, err, sizeof(err)), 0);
	check_files(&e);
	env_teardown(&e);
}
END_TEST

/* A failed rename in the commit (ca.pem is a directory) leaves the old key and no temporaries. */
START_TEST(force_commit_failure_cleans_up)
{
	struct env e;
	char err[512], path[PATH_MAX];
	size_t len = 0;

	env_setup(&e);
	ck_assert_int_eq(mkdir(e.dir, 0700), 0);
	path_in(path, sizeof(path), e.dir, "ca.key");
	spit(path, "old key", 7);
	path_in(path, sizeof(path), e.dir, "ca.pem");
	ck_assert_int_eq(mkdir(path, 0700), 0); /* a file can't be renamed over a directory */
	ck_assert_int_lt(init_ca(e.dir, e.roots, 10, true, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "rename"));
	char *key = slurp_in(e.dir, "ca.key", &len);
	ck_assert_str_eq(key, "old key");
	AN_FREE(&key);
	ck_assert_int_eq(entries(e.dir), 3); /* ca.key, ca.pem/ and the bundle committed first */
	env_teardown(&e);
}
END_TEST

/* A write that fails (RLIMIT_FSIZE below the bundle's size) leaves nothing behind. */
START_TEST(write_failure_cleans_up)
{
	struct env e;
	char err[512];
	struct rlimit rl = { .rlim_cur = 4096, .rlim_max = RLIM_INFINITY };

	if (access(CA_HOST_ROOTS_DEFAULT, R_OK) != 0) {
		unit_skip("no %s", CA_HOST_ROOTS_DEFAULT);
		return;
	}
	env_setup(&e);
	signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	ck_assert_int_eq(init_ca(e.dir, NULL, 10, false, err, sizeof(err)), -EFBIG);
	ck_assert_ptr_nonnull(strstr(err, "bundle.pem"));
	ck_assert_int_eq(entries(e.dir), 0);
	rl.rlim_cur = RLIM_INFINITY;
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	ck_assert_int_eq(init_ca(e.dir, NULL, 10, false, err, sizeof(err)), 0);
	env_teardown(&e);
}
END_TEST

static Suite *ca_suite(void)
{
	Suite *s = suite_create("ca");
	TCase *t = tcase_create("init");

	tcase_set_timeout(t, 60);
	tcase_add_test(t, files_and_modes);
	tcase_add_test(t, modes_ignore_umask);
	tcase_add_test(t, nested_dir_and_trailing_slash);
	tcase_add_test(t, existing_dir_kept);
	tcase_add_test(t, certificate_fields);
	tcase_add_test(t, each_ca_is_new);
	tcase_add_test(t, openssl_verify_accepts);
	tcase_add_test(t, bundle_is_roots_then_ca);
	tcase_add_test(t, bundle_roots_without_newline);
	tcase_add_test(t, bundle_with_host_roots);
	tcase_add_test(t, roots_missing_or_empty);
	tcase_add_test(t, days_limits);
	tcase_add_test(t, bad_dir);
	tcase_add_test(t, exclusive_without_force);
	tcase_add_test(t, symlinked_key);
	tcase_add_test(t, force_replaces);
	tcase_add_test(t, force_commit_failure_cleans_up);
	tcase_add_test(t, write_failure_cleans_up);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return unit_run(ca_suite());
}
