/*
 * The agentsnet CA inside the daemon: loaded once from the files
 * `agentsnet ca init` writes (ca.pem, ca.key), then used to mint the leaf
 * certificates of the terminated tiers (fake-response, credential-inject).
 *
 * A loaded CA is read-only: tls_leaf_mint may run on every worker at once.
 * Every leaf carries the same key pair, generated once at load, so the data
 * path never generates a key; a leaf costs one ECDSA signature.
 */
#ifndef AN_TLS_CA_H
#define AN_TLS_CA_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/types.h>

/* Leaf validity in days: short, since a leaf is minted again in microseconds;
 * long enough that a per-worker cache rarely throws one away. At most the
 * CA/Browser Forum's 397 days, whatever the configuration says. */
#define TLS_CA_LEAF_DAYS_DEFAULT 7u
#define TLS_CA_LEAF_DAYS_MAX     397u
/* Leaves start this long before "now", for clients whose clocks are behind. */
#define TLS_CA_LEAF_BACKDATE_S 3600
/* ca.pem or ca.key larger than this is not a CA file (a P-256 pair is < 1 KiB). */
#define TLS_CA_FILE_BYTES_MAX (64u * 1024u)
/* Leaf serials: 128 random bits, as tools/agentsnet/cainit.c gives the CA. */
#define TLS_CA_SERIAL_BYTES 16u

/* Opaque: the CA certificate and key, the shared leaf key, prepared extensions. */
struct tls_ca;

/*
 * Loads the CA certificate (PEM, the first certificate in <cert_path>) and
 * its private key (unencrypted PEM, PKCS#8 or traditional, at <key_path>),
 * both borrowed, and generates the shared leaf key (ECDSA P-256). Checks
 * that the certificate is a CA (basicConstraints CA:TRUE, keyUsage
 * keyCertSign when present), that the key is the certificate's, and that
 * the CA is valid now. Leaves minted from it last <leaf_days> days
 * (1..TLS_CA_LEAF_DAYS_MAX), never past the CA's own notAfter. The file
 * holding the key is wiped from memory once parsed.
 * On success *<out> is owned by the caller (tls_ca_free). Returns 0, or
 * -EINVAL (bad <leaf_days>, not a regular file, not PEM, not a CA, a key
 * neither EC nor RSA, key/certificate mismatch, encrypted key, not yet
 * valid), -EKEYEXPIRED (the CA has expired), -EFBIG
 * (a file over TLS_CA_FILE_BYTES_MAX), -ENOMEM, -EIO (an OpenSSL failure) or
 * the -errno of open/read (-ENOENT, -EACCES, ...); <err> (<err_len> bytes)
 * then holds one line naming the file and the fault. Start-up context only.
 */
int tls_ca_load(const char *cert_path, const char *key_path, uint32_t leaf_days,
		struct tls_ca **out, char *err, size_t err_len);

/* Releases *<ca> (NULL accepted), wiping its keys, and clears the pointer. */
void tls_ca_free(struct tls_ca **ca);

/* The CA certificate (borrowed, valid while <ca> is). */
X509 *tls_ca_cert(const struct tls_ca *ca);

/* The key pair every leaf of <ca> carries (borrowed, valid while <ca> is). */
EVP_PKEY *tls_ca_leaf_key(const struct tls_ca *ca);

/*
 * Mints a leaf certificate for <host>/<host_len> (borrowed): a DNS name in
 * the normalised form core/ gives (no trailing dot; letters, digits, '-' and
 * '_'; labels of 1..63 bytes; at most 253 bytes) or an IP literal (dotted
 * IPv4, or IPv6 text without brackets). The leaf is X.509v3 with a random
 * 128-bit serial, subject CN=<host> when it fits in 64 bytes (the subject is
 * empty otherwise, and the SAN critical), subjectAltName dNSName or
 * iPAddress, basicConstraints critical CA:FALSE, keyUsage critical
 * digitalSignature, extKeyUsage serverAuth, subjectKeyIdentifier and
 * authorityKeyIdentifier; valid from <now_s> - TLS_CA_LEAF_BACKDATE_S (never
 * before the CA) to <now_s> + leaf_days (never after the CA); carrying
 * tls_ca_leaf_key() and signed by the CA with SHA-256.
 * On success *<leaf> is an owned reference (X509_free). Returns 0, -EINVAL
 * (<host> is neither form), -EKEYEXPIRED (the CA is not valid at <now_s>),
 * -ENOMEM or -EIO (an OpenSSL failure; this thread's OpenSSL error queue is
 * cleared). Never generates a key. Any thread, concurrently.
 */
int tls_leaf_mint(const struct tls_ca *ca, const char *host, size_t host_len, int64_t now_s,
		  X509 **leaf);

#endif /* AN_TLS_CA_H */
