/*
 * What every tls/ module shares: the one-time OpenSSL set-up, the one-line
 * error messages of the load paths, and ASN.1 time conversion.
 *
 * Everything under tls/ is OpenSSL 3 only (EVP and X509 APIs, nothing
 * deprecated). core/ never includes tls/ headers; the data-path calls of
 * tls/session.h take only plain C types, so a table of function pointers in
 * core/ can wrap them.
 */
#ifndef AN_TLS_TLS_H
#define AN_TLS_TLS_H

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

#endif /* AN_TLS_TLS_H */
