/*
 * `agentsnet ca init`: the demo root CA, with OpenSSL 3's EVP and X509 APIs
 * only (no deprecated EC_KEY calls).
 *
 * Everything is built in memory first: the P-256 key (PEM held in an OpenSSL
 * secure-memory BIO, wiped when freed), the self-signed certificate, and the
 * bundle (the host roots, then the CA, so that a runtime whose CA variable
 * replaces the system store still verifies passthrough hosts). Then the
 * files are written through a descriptor of the directory (openat, no
 * symlink followed): ca.pem and bundle.pem to temporary names renamed into
 * place, so a reader never sees half a file; ca.key with O_EXCL under its
 * final name unless --force, so two concurrent inits can never both believe
 * they own the key. --force writes the key to a temporary name too and
 * renames it over the old one. Modes are set with fchmod, so the umask can't
 * loosen or tighten them. Any failure removes what this call created.
 *
 * The directory is created 0700 (its parents 0755) when missing; an existing
 * one keeps its mode. Rejected: writing the key through fopen (follows
 * symlinks, mode left to the umask) and adding an authorityKeyIdentifier (a
 * self-signed root needs none; verifiers match it by subject and SKI).
 */
#include "tools/agentsnet/cainit.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
#include "core/pool.h"
#include "tls/tls.h"

#define CA_SERIAL_BYTES 16u /* 128 random bits (RFC 5280 allows up to 20 octets) */
#define CA_CN_RANDOM    4u  /* bytes of the short random CN suffix: 8 hex digits */

enum { CA_FILE_KEY, CA_FILE_CERT, CA_FILE_BUNDLE, CA_FILE_COUNT };

/* One output file: its final name, the temporary name it is written under. */
struct ca_file {
	const char *name;
	char tmp[64];
	mode_t mode;
	bool exclusive; /* written under its final name, created with O_EXCL */
	bool written;   /* a file of ours exists (under tmp, or name if exclusive) */
};

struct ca_work {
	int dfd;
	char dir[PATH_MAX]; /* absolute */
	char *err;
	size_t err_len;
	char *roots; /* owned */
	size_t roots_len;
	EVP_PKEY *key;
	X509 *cert;
	BIO *key_pem;  /* secure memory */
	BIO *cert_pem; /* also the bundle's tail */
	char cn[64];
	struct ca_file files[CA_FILE_COUNT];
};

/* An OpenSSL failure: the library's own reason (tls_fail_ossl), then the queue is cleared. */
static int ossl_fail(struct ca_work *w, const char *what)
{
	AN_ASSERT(what != NULL);
	AN_ASSERT(w->err != NULL);
	return tls_fail_ossl(w->err, w->err_len, what);
}

static int check_options(const struct ca_options *o, char *err, size_t err_len)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(err != NULL);
	if (o->days == 0 || o->days > CA_DAYS_MAX)
		return tls_fail(err, err_len, -EINVAL, "--days %u: not 1..%u", o->days,
				CA_DAYS_MAX);
	if (o->dir == NULL || o->dir[0] == '\0')
		return tls_fail(err, err_len, -EINVAL, "--dir: empty");
	if (strlen(o->dir) >= PATH_MAX - 16)
		return tls_fail(err, err_len, -EINVAL, "--dir: path too long (%zu bytes)",
				strlen(o->dir));
	return 0;
}

/* mkdir -p: the parents 0755, the directory itself 0700; existing ones are kept. */
static int make_dirs(const char *dir, char *err, size_t err_len)
{
	char path[PATH_MAX];
	size_t len = strlen(dir);

	AN_ASSERT(len > 0);
	AN_ASSERT(len < sizeof(path));
	memcpy(path, dir, len + 1);
	while (len > 1 && path[len - 1] == '/')
		path[--len] = '\0';
	for (size_t i = 1; i <= len; i++) {
		if (path[i] != '/' && path[i] != '\0')
			continue;
		char c = path[i];
		path[i] = '\0';
		if (mkdir(path, c == '\0' ? 0700 : 0755) == -1 && errno != EEXIST)
			return tls_fail(err, err_len, -errno, "mkdir %s: %s", path,
					strerror(errno));
		path[i] = c;
	}
	return 0;
}

static int open_dir(struct ca_work *w, const char *dir)
{
	AN_ASSERT(dir != NULL);
	AN_ASSERT(w->dfd == -1);
	int ret = make_dirs(dir, w->err, w->err_len);
	if (ret != 0)
		return ret;
	w->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->dfd == -1)
		return tls_fail(w->err, w->err_len, -errno, "open %s: %s", dir, strerror(errno));
	if (realpath(dir, w->dir) == NULL)
		return tls_fail(w->err, w->err_len, -errno, "realpath %s: %s", dir,
				strerror(errno));
	if (strlen(w->dir) >= PATH_MAX - 16)
		return tls_fail(w->err, w->err_len, -EINVAL, "%s: path too long", w->dir);
	return 0;
}

/* Without --force, an existing CA is never touched. */
static int check_absent(struct ca_work *w)
{
	struct stat st;

	AN_ASSERT(w->dfd >= 0);
	AN_ASSERT(w->files[0].name != NULL);
	for (size_t i = 0; i < CA_FILE_COUNT; i++) {
		const char *name = w->files[i].name;
		if (fstatat(w->dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			return tls_fail(w->err, w->err_len, -EEXIST,
					"%s/%s exists: pass --force to replace the CA", w->dir,
					name);
		if (errno != ENOENT)
			return tls_fail(w->err, w->err_len, -errno, "%s/%s: %s", w->dir, name,
					strerror(errno));
	}
	return 0;
}

static int read_fd_all(int fd, char *buf, size_t len)
{
	size_t done = 0;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(buf != NULL || len == 0);
	while (done < len) {
		ssize_t n = read(fd, buf + done, len - done);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (int)done;
}

/* The host roots: a regular file that holds at least one PEM certificate. */
static int read_roots(struct ca_work *w, const char *path)
{
	static const char hint[] = "install ca-certificates, or pass --roots FILE";
	struct stat st;

	AN_ASSERT(path != NULL);
	AN_ASSERT(w->roots == NULL);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1)
		return tls_fail(w->err, w->err_len, -errno, "host roots %s: %s (%s)", path,
				strerror(errno), hint);
	int ret = fstat(fd, &st) == -1 ? -errno : 0;
	if (ret == 0 && !S_ISREG(st.st_mode))
		ret = -EINVAL;
	if (ret == 0 && (uint64_t)st.st_size > CA_HOST_ROOTS_BYTES_MAX)
		ret = -EFBIG;
	if (ret == 0) {
		w->roots = pool_malloc((size_t)st.st_size + 1);
		ret = w->roots == NULL ? -ENOMEM : read_fd_all(fd, w->roots, (size_t)st.st_size);
	}
	close(fd);
	if (ret < 0)
		return tls_fail(w->err, w->err_len, ret, "host roots %s: %s", path, strerror(-ret));
	w->roots_len = (size_t)ret;
	w->roots[w->roots_len] = '\0';
	if (strstr(w->roots, "-----BEGIN CERTIFICATE-----") == NULL)
		return tls_fail(w->err, w->err_len, -EPROTO,
				"host roots %s: no PEM certificate (%s)", path, hint);
	return 0;
}

static int add_ext(struct ca_work *w, int nid, const char *value)
{
	X509V3_CTX ctx;

	AN_ASSERT(w->cert != NULL);
	AN_ASSERT(value != NULL);
	X509V3_set_ctx(&ctx, w->cert, w->cert, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
	if (ext == NULL)
		return ossl_fail(w, value);
	int ok = X509_add_ext(w->cert, ext, -1);
	X509_EXTENSION_free(ext);
	return ok == 1 ? 0 : ossl_fail(w, "X509_add_ext");
}

/* A positive, non-zero 128-bit serial, and the CN's random suffix. */
static int set_serial_and_cn(struct ca_work *w)
{
	unsigned char rnd[CA_SERIAL_BYTES + CA_CN_RANDOM];

	AN_ASSERT(w->cert != NULL);
	AN_ASSERT(sizeof(w->cn) > sizeof("agentsnet demo CA ") + 2 * CA_CN_RANDOM);
	if (RAND_bytes(rnd, (int)sizeof(rnd)) != 1)
		return ossl_fail(w, "RAND_bytes");
	rnd[0] |= rnd[0] == 0 ? 1 : 0;
	BIGNUM *bn = BN_bin2bn(rnd, (int)CA_SERIAL_BYTES, NULL);
	int ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(w->cert)) != NULL;
	BN_free(bn);
	if (!ok)
		return ossl_fail(w, "serial");
	const unsigned char *s = rnd + CA_SERIAL_BYTES;
	snprintf(w->cn, sizeof(w->cn), "agentsnet demo CA %02x%02x%02x%02x", s[0], s[1], s[2],
		 s[3]);
	X509_NAME *name = X509_get_subject_name(w->cert);
	if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)w->cn, -1,
				       -1, 0) != 1 ||
	    X509_set_issuer_name(w->cert, name) != 1)
		return ossl_fail(w, "subject");
	return 0;
}

static int make_cert(struct ca_work *w, uint32_t days)
{
	AN_ASSERT(w->key != NULL);
	AN_ASSERT(days > 0);
	AN_ASSERT(days <= CA_DAYS_MAX);
	w->cert = X509_new();
	if (w->cert == NULL || X509_set_version(w->cert, X509_VERSION_3) != 1)
		return ossl_fail(w, "X509_new");
	int ret = set_serial_and_cn(w);
	if (ret != 0)
		return ret;
	/* An hour of slack for hosts whose clocks are behind ours. */
	if (X509_gmtime_adj(X509_getm_notBefore(w->cert), -3600) == NULL ||
	    X509_time_adj_ex(X509_getm_notAfter(w->cert), (int)days, 0, NULL) == NULL)
		return ossl_fail(w, "validity");
	if (X509_set_pubkey(w->cert, w->key) != 1)
		return ossl_fail(w, "X509_set_pubkey");
	ret = add_ext(w, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
	if (ret == 0)
		ret = add_ext(w, NID_key_usage, "critical,keyCertSign,cRLSign");
	if (ret == 0)
		ret = add_ext(w, NID_subject_key_identifier, "hash");
	if (ret != 0)
		return ret;
	if (X509_sign(w->cert, w->key, EVP_sha256()) <= 0)
		return ossl_fail(w, "X509_sign");
	return 0;
}

static int make_material(struct ca_work *w, uint32_t days)
{
	AN_ASSERT(w->key == NULL);
	AN_ASSERT(w->cert == NULL);
	w->key = EVP_EC_gen("P-256");
	if (w->key == NULL)
		return ossl_fail(w, "generate P-256 key");
	int ret = make_cert(w, days);
	if (ret != 0)
		return ret;
	w->key_pem = BIO_new(BIO_s_secmem());
	w->cert_pem = BIO_new(BIO_s_mem());
	if (w->key_pem == NULL || w->cert_pem == NULL)
		return ossl_fail(w, "BIO_new");
	if (PEM_write_bio_PrivateKey(w->key_pem, w->key, NULL, NULL, 0, NULL, NULL) != 1)
		return ossl_fail(w, "PEM_write_bio_PrivateKey");
	if (PEM_write_bio_X509(w->cert_pem, w->cert) != 1)
		return ossl_fail(w, "PEM_write_bio_X509");
	return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(data != NULL || len == 0);
	while (len > 0) {
		ssize_t n = write(fd, data, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

static size_t bio_view(BIO *b, const char **data)
{
	char *p = NULL;
	long n = BIO_get_mem_data(b, &p);

	AN_ASSERT(n >= 0);
	AN_ASSERT(p != NULL || n == 0);
	*data = p;
	return (size_t)n;
}

/* Writes <a> then <b> to <f> (its temporary name, or its final one with O_EXCL), synced. */
static int write_file(struct ca_work *w, struct ca_file *f, const char *a, size_t a_len,
		      const char *b, size_t b_len)
{
	AN_ASSERT(!f->written);
	AN_ASSERT(w->dfd >= 0);
	const char *name = f->exclusive ? f->name : f->tmp;
	int fd = openat(w->dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd == -1)
		return tls_fail(w->err, w->err_len, -errno, "create %s/%s: %s", w->dir, name,
				strerror(errno));
	f->written = true;
	int ret = fchmod(fd, f->mode) == -1 ? -errno : 0;
	if (ret == 0)
		ret = write_all(fd, a, a_len);
	if (ret == 0)
		ret = write_all(fd, b, b_len);
	if (ret == 0 && fsync(fd) == -1)
		ret = -errno;
	if (close(fd) == -1 && ret == 0)
		ret = -errno;
	if (ret != 0)
		return tls_fail(w->err, w->err_len, ret, "write %s/%s: %s", w->dir, name,
				strerror(-ret));
	return 0;
}

static int write_files(struct ca_work *w)
{
	const char *key, *cert;
	size_t key_len = bio_view(w->key_pem, &key);
	size_t cert_len = bio_view(w->cert_pem, &cert);

	AN_ASSERT(key_len > 0);
	AN_ASSERT(cert_len > 0);
	/* The roots file may lack its final newline; PEM needs one before our BEGIN line. */
	bool nl = w->roots_len > 0 && w->roots[w->roots_len - 1] != '\n';
	if (nl)
		w->roots[w->roots_len++] = '\n';
	int ret = write_file(w, &w->files[CA_FILE_CERT], cert, cert_len, NULL, 0);
	if (ret == 0)
		ret = write_file(w, &w->files[CA_FILE_BUNDLE], w->roots, w->roots_len, cert,
				 cert_len);
	if (ret == 0)
		ret = write_file(w, &w->files[CA_FILE_KEY], key, key_len, NULL, 0);
	return ret;
}

/*
 * Renames the temporary files into place, the key last: until then a failure
 * still discards an O_EXCL key, so no key is left without its certificate.
 */
static int commit_files(struct ca_work *w)
{
	AN_ASSERT(w->dfd >= 0);
	AN_ASSERT(w->files[CA_FILE_KEY].written);
	static_assert(CA_FILE_KEY == 0, "the key is committed last");
	for (size_t i = CA_FILE_COUNT; i-- > 0;) {
		struct ca_file *f = &w->files[i];
		if (!f->exclusive && renameat(w->dfd, f->tmp, w->dfd, f->name) == -1)
			return tls_fail(w->err, w->err_len, -errno, "rename %s/%s: %s", w->dir,
					f->name, strerror(errno));
		f->written = false;
	}
	if (fsync(w->dfd) == -1)
		return tls_fail(w->err, w->err_len, -errno, "fsync %s: %s", w->dir,
				strerror(errno));
	return 0;
}

static void discard_files(struct ca_work *w)
{
	AN_ASSERT(w->dfd >= 0);
	AN_ASSERT(w->files[0].name != NULL);
	for (size_t i = 0; i < CA_FILE_COUNT; i++) {
		struct ca_file *f = &w->files[i];
		if (f->written)
			unlinkat(w->dfd, f->exclusive ? f->name : f->tmp, 0);
		f->written = false;
	}
}

static int init_files(struct ca_work *w, bool force)
{
	static const char *const names[CA_FILE_COUNT] = { CA_KEY_NAME, CA_CERT_NAME,
							  CA_BUNDLE_NAME };
	unsigned char rnd[4];

	AN_ASSERT(w->dfd == -1);
	AN_ASSERT(AN_ARRAY_LEN(w->files) == CA_FILE_COUNT);
	if (RAND_bytes(rnd, (int)sizeof(rnd)) != 1)
		return ossl_fail(w, "RAND_bytes");
	for (size_t i = 0; i < CA_FILE_COUNT; i++) {
		struct ca_file *f = &w->files[i];
		f->name = names[i];
		f->mode = i == CA_FILE_KEY ? 0600 : 0644;
		f->exclusive = i == CA_FILE_KEY && !force;
		snprintf(f->tmp, sizeof(f->tmp), ".%s.tmp-%02x%02x%02x%02x", names[i], rnd[0],
			 rnd[1], rnd[2], rnd[3]);
	}
	return 0;
}

static int fill_result(struct ca_work *w, struct ca_result *r)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;

	AN_ASSERT(w->cert != NULL);
	AN_ASSERT(strlen(w->dir) < PATH_MAX - 16);
	memset(r, 0, sizeof(*r));
	int n = snprintf(r->key_path, sizeof(r->key_path), "%s/%s", w->dir, CA_KEY_NAME);
	n |= snprintf(r->cert_path, sizeof(r->cert_path), "%s/%s", w->dir, CA_CERT_NAME);
	n |= snprintf(r->bundle_path, sizeof(r->bundle_path), "%s/%s", w->dir, CA_BUNDLE_NAME);
	n |= snprintf(r->subject_cn, sizeof(r->subject_cn), "%s", w->cn);
	AN_ASSERT(n > 0);
	AN_ASSERT(n < PATH_MAX); /* open_dir refused directories this long */
	if (X509_digest(w->cert, EVP_sha256(), md, &md_len) != 1)
		return ossl_fail(w, "X509_digest");
	AN_ASSERT(md_len * 3 <= sizeof(r->fingerprint));
	for (unsigned int i = 0; i < md_len; i++)
		snprintf(r->fingerprint + 3 * i, 4, i + 1 < md_len ? "%02X:" : "%02X", md[i]);
	return 0;
}

static int run(struct ca_work *w, const struct ca_options *o, struct ca_result *r)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(r != NULL);
	/* The roots first: a host without them gets no directory either. */
	int ret = read_roots(w, o->host_roots != NULL ? o->host_roots : CA_HOST_ROOTS_DEFAULT);
	if (ret == 0)
		ret = init_files(w, o->force);
	if (ret == 0)
		ret = open_dir(w, o->dir);
	if (ret == 0 && !o->force)
		ret = check_absent(w);
	if (ret == 0)
		ret = make_material(w, o->days);
	if (ret == 0)
		ret = write_files(w);
	if (ret == 0)
		ret = commit_files(w);
	if (ret == 0)
		ret = fill_result(w, r);
	if (ret != 0 && w->dfd >= 0)
		discard_files(w);
	return ret;
}

int ca_init(const struct ca_options *o, struct ca_result *r, char *err, size_t err_len)
{
	struct ca_work w = { .dfd = -1, .err = err, .err_len = err_len };

	AN_ASSERT(err != NULL);
	AN_ASSERT(err_len > 0);
	err[0] = '\0';
	int ret = check_options(o, err, err_len);
	if (ret == 0)
		ret = run(&w, o, r);
	BIO_free(w.key_pem);
	BIO_free(w.cert_pem);
	X509_free(w.cert);
	EVP_PKEY_free(w.key);
	pool_free(w.roots);
	if (w.dfd >= 0)
		close(w.dfd);
	return ret;
}
