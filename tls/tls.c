/*
 * The pieces every tls/ module shares.
 *
 * OpenSSL initialises itself on first use since 1.1.0, but an explicit
 * OPENSSL_init_ssl at start-up moves the cost (and any failure) out of the
 * first connection, and the version check refuses a 1.1 library a distro may
 * still ship beside 3.x: tls/ relies on 3.0 APIs (EVP_EC_gen,
 * SSL_CTX_load_verify_file, SSL_OP_CLEANSE_PLAINTEXT).
 *
 * Error text follows core's convention (a caller-owned err buffer, one line
 * naming what failed): the OpenSSL reason is taken from the oldest queued
 * error, which is the root cause (later entries are the callers' wrappers),
 * and the queue is cleared so a later SSL_get_error reads a clean queue.
 */
#include "tls/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/asn1.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "core/an.h"
#include "core/keyfile.h"
#include "core/pool.h"

int tls_library_init(char *err, size_t err_len)
{
	AN_ASSERT(err != NULL || err_len == 0);
	if (err_len > 0)
		err[0] = '\0';
	if (OpenSSL_version_num() < 0x30000000UL)
		return tls_fail(err, err_len, -ENOTSUP, "OpenSSL 3 required, found %s",
				OpenSSL_version(OPENSSL_VERSION));
	uint64_t opts = OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS;
	if (OPENSSL_init_ssl(opts, NULL) != 1)
		return tls_fail_ossl(err, err_len, "OPENSSL_init_ssl");
	AN_ASSERT(ERR_peek_error() == 0);
	return 0;
}

int tls_fail(char *err, size_t err_len, int ret, const char *fmt, ...)
{
	va_list ap;

	AN_ASSERT(ret < 0);
	AN_ASSERT(err != NULL || err_len == 0);
	if (err_len > 0) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return ret;
}

int tls_fail_ossl(char *err, size_t err_len, const char *what)
{
	unsigned long e = ERR_peek_error();
	const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;

	AN_ASSERT(what != NULL);
	AN_ASSERT(err != NULL || err_len == 0);
	int ret =
	    tls_fail(err, err_len, -EIO, "%s: %s", what, reason != NULL ? reason : "unknown error");
	ERR_clear_error();
	return ret;
}

int tls_time_s(const ASN1_TIME *t, int64_t *s)
{
	struct tm tm;

	AN_ASSERT(t != NULL);
	AN_ASSERT(s != NULL);
	memset(&tm, 0, sizeof(tm));
	if (ASN1_TIME_to_tm(t, &tm) != 1) {
		ERR_clear_error();
		return -EINVAL;
	}
	*s = (int64_t)timegm(&tm);
	return 0;
}

int tls_read_file(const char *path, const char *what, size_t max, bool secret, char **buf,
		  size_t *len, char *err, size_t err_len)
{
	struct stat st;
	char why[128];

	AN_ASSERT(path != NULL && what != NULL);
	AN_ASSERT(*buf == NULL);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd == -1)
		return tls_fail(err, err_len, -errno, "%s %s: %s", what, path, strerror(errno));
	int ret = fstat(fd, &st) == -1 ? -errno : 0;
	if (ret == 0 && !S_ISREG(st.st_mode))
		ret = -EINVAL;
	if (ret == 0 && secret && keyfile_check(&st, why, sizeof(why)) != 0) {
		close(fd);
		return tls_fail(err, err_len, -EPERM, "%s %s: %s", what, path, why);
	}
	if (ret == 0 && (uint64_t)st.st_size > max)
		ret = -EFBIG;
	size_t size = ret == 0 ? (size_t)st.st_size : 0;
	*buf = ret == 0 ? pool_malloc(size + 1) : NULL;
	if (ret == 0 && *buf == NULL)
		ret = -ENOMEM;
	size_t done = 0;
	while (ret == 0 && done < size) {
		ssize_t n = read(fd, *buf + done, size - done);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			ret = -errno;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	close(fd);
	if (ret != 0 && *buf != NULL) {
		pool_free_secret(*buf, size + 1); /* it may hold part of a key */
		*buf = NULL;
	}
	if (ret == -EINVAL)
		return tls_fail(err, err_len, ret, "%s %s: not a regular file", what, path);
	if (ret == -EFBIG)
		return tls_fail(err, err_len, ret, "%s %s: %jd bytes, more than %zu", what, path,
				(intmax_t)st.st_size, max);
	if (ret != 0)
		return tls_fail(err, err_len, ret, "%s %s: %s", what, path, strerror(-ret));
	(*buf)[done] = '\0';
	*len = done;
	return 0;
}

int tls_no_passphrase(char *buf, int size, int rwflag, void *arg)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	if (arg != NULL)
		*(bool *)arg = true;
	return 0;
}

void tls_format_date(int64_t s, char *out, size_t cap)
{
	struct tm tm;
	time_t t = (time_t)s;

	AN_ASSERT(out != NULL);
	AN_ASSERT(cap > 0);
	if (gmtime_r(&t, &tm) == NULL || strftime(out, cap, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
		snprintf(out, cap, "%jd", (intmax_t)s);
}
