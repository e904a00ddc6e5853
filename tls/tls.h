/*
 * What every tls/ module shares: the one-time OpenSSL set-up, the one-line
 * error messages of the load paths, reading the PEM files they load (a CA,
 * the operator's certificate), and time conversion and formatting.
 *
 * Everything under tls/ is OpenSSL 3 only (EVP and X509 APIs, nothing
 * deprecated). core/ never includes tls/ headers; the data-path calls of
 * tls/session.h take only plain C types, so a table of function pointers in
 * core/ can wrap them.
 */
#ifndef AN_TLS_TLS_H
#define AN_TLS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/types.h>

/*
 * Initialises OpenSSL (libssl and libcrypto, error strings loaded) and checks
 * that the library linked at run time is OpenSSL 3 or newer. Idempotent and
 * thread-safe (OpenSSL guards its own initialisation); call it once from
 * main() before any other tls_ function. Returns 0, -ENOTSUP (an older
 * library: <err> names the version found) or -EIO (initialisation failed);
 * <err> (<err_len> bytes) then holds one line.
 */
int tls_library_init(char *err, size_t err_len);

/*
 * Formats <fmt> into <err> (<err_len> bytes, 0 allowed) and returns <ret>,
 * which must be negative. For the load paths, so each failure is formatted
 * once, where it happens.
 */
__attribute__((format(printf, 4, 5))) int tls_fail(char *err, size_t err_len, int ret,
						   const char *fmt, ...);

/*
 * An OpenSSL failure: writes "<what>: <reason>" into <err>, where <reason> is
 * the oldest error on this thread's OpenSSL queue ("unknown error" when the
 * queue is empty), clears the queue and returns -EIO.
 */
int tls_fail_ossl(char *err, size_t err_len, const char *what);

/*
 * Converts <t> (UTCTime or GeneralizedTime) to seconds since the epoch in
 * *<s>. Returns 0, or -EINVAL when <t> does not parse.
 */
int tls_time_s(const ASN1_TIME *t, int64_t *s);

/*
 * Reads the whole regular file at <path>, at most <max> bytes, into owned
 * memory (*<buf>: *<len> bytes and a NUL; free it with pool_free_secret, as
 * it may hold a key); errors are one line naming it as <what> ("CA key",
 * "ingress.tls.cert"). A <secret> (a private key) must be the daemon's
 * user's and readable by it alone (core/keyfile.h), else -EPERM naming the
 * file and its owner or mode. On failure nothing is left allocated, and what
 * was read is wiped. 0 or -errno (-EINVAL: not a regular file; -EFBIG).
 */
int tls_read_file(const char *path, const char *what, size_t max, bool secret, char **buf,
		  size_t *len, char *err, size_t err_len);

/*
 * A pem_password_cb that never gives a passphrase: it sets the bool <arg>
 * points to (when not NULL), so the caller can say the key is encrypted.
 */
int tls_no_passphrase(char *buf, int size, int rwflag, void *arg);

/* Formats <s> (seconds since the epoch) as "YYYY-MM-DD HH:MM:SS UTC" into <out>/<cap>. */
void tls_format_date(int64_t s, char *out, size_t cap);

#endif /* AN_TLS_TLS_H */
