/*
 * TLS termination for the engine: the agentsnet CA and the server context of
 * the terminated tiers, the ingress gateway's public certificate and its
 * server context, and the table of operations (core/term.h) the daemon
 * installs into the engine.
 */
#ifndef AN_TLS_TERM_H
#define AN_TLS_TERM_H

#include <stddef.h>
#include <stdint.h>

#include "core/term.h"

struct tls_term;

/* daemon.ingress.tls's certificate chain or key file larger than this is not
 * one: a leaf and three RSA-4096 intermediates are about 8 KiB of PEM. */
#define TLS_TERM_PUBLIC_FILE_BYTES_MAX (64u * 1024u)

/*
 * Loads the CA at <cert_path>/<key_path> (tls_ca_load: leaves of <leaf_days>,
 * 0 for TLS_CA_LEAF_DAYS_DEFAULT) and makes the server context every worker
 * shares. Both paths NULL (never one of them) make an engine with no CA, for
 * a daemon that only serves the gateway's TLS (tls_term_public_load): its
 * server_new returns NULL and its prime -ENOENT; every other operation
 * works. On success *<out> is owned by the caller (tls_term_close) and is
 * the <arg> of tls_term_ops.worker_new. Returns 0 or -errno with one line
 * naming the file and the fault in <err>/<cap>. Start-up only, after
 * tls_library_init.
 */
int tls_term_open(const char *cert_path, const char *key_path, uint32_t leaf_days,
		  struct tls_term **out, char *err, size_t cap);

/*
 * Loads the certificate the ingress gateway's public listener shows
 * (daemon.ingress.tls) into a second server context of <e>: <cert_path> is
 * PEM, the leaf first and the intermediates after it (other PEM blocks are
 * skipped, as SSL_CTX_use_certificate_chain_file does); <key_path> its
 * unencrypted PEM private key (PKCS#8 or traditional), wiped from memory
 * once parsed. Both borrowed; each at most TLS_TERM_PUBLIC_FILE_BYTES_MAX.
 * Checks that the key is the leaf's and that the leaf is valid now (not
 * before its notBefore, not at or after its notAfter); intermediates are the
 * client's to verify. The context takes TLS 1.2 and 1.3 and, when the client
 * offers ALPN, selects "http/1.1" or (a client offering only others, h2
 * say) none. Then tls_term_ops.public_new gives sessions on it.
 * Returns 0, or -errno with one line in <err>/<cap> naming the file by its
 * policy key and the fault ("ingress.tls.cert /x.pem: no PEM certificate in
 * the file"): the -errno of open/read (-ENOENT, -EACCES, ...), -EINVAL (not
 * a regular file, no PEM certificate or key, a certificate or key that does
 * not parse, an encrypted key, a key that does not match the leaf, a leaf
 * not yet valid, a chain OpenSSL refuses, e.g. an RSA key under 2048 bits),
 * -EKEYEXPIRED (the leaf has expired), -EFBIG, -ENOMEM or -EIO. Once per
 * engine, at start-up, before any worker_new; a reload does not call it
 * again.
 */
int tls_term_public_load(struct tls_term *e, const char *cert_path, const char *key_path, char *err,
			 size_t cap);

/*
 * Probes kernel TLS: TCP_ULP "tls" on a fresh TCP socket. Returns 0 when the
 * kernel has it (the socket answers "not connected", not "no such ULP"),
 * else -errno: -ENOENT is a kernel without the tls module. Any thread.
 */
int tls_term_ktls_probe(void);

/* Releases *<e> (NULL accepted) once no worker uses it, and clears the pointer. */
void tls_term_close(struct tls_term **e);

/* The operations of core/term.h over OpenSSL sessions (tls/session.h). */
extern const struct term_ops tls_term_ops;

#endif /* AN_TLS_TERM_H */
