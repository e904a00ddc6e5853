/*
 * TLS termination for the engine: the agentsnet CA, one server context, and
 * the table of operations (core/term.h) the daemon installs into the engine.
 */
#ifndef AN_TLS_ENGINE_H
#define AN_TLS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "core/term.h"

struct tls_engine;

/*
 * Loads the CA at <cert_path>/<key_path> (tls_ca_load: leaves of <leaf_days>,
 * 0 for TLS_CA_LEAF_DAYS_DEFAULT) and makes the server context every worker
 * shares. On success *<out> is owned by the caller (tls_engine_close) and is
 * the <arg> of tls_term_ops.worker_new. Returns 0 or -errno with one line
 * naming the file and the fault in <err>/<cap>. Start-up only, after
 * tls_library_init.
 */
int tls_engine_open(const char *cert_path, const char *key_path, uint32_t leaf_days,
		    struct tls_engine **out, char *err, size_t cap);

/*
 * Probes kernel TLS: TCP_ULP "tls" on a fresh TCP socket. Returns 0 when the
 * kernel has it (the socket answers "not connected", not "no such ULP"),
 * else -errno: -ENOENT is a kernel without the tls module. Any thread.
 */
int tls_engine_ktls_probe(void);

/* Releases *<e> (NULL accepted) once no worker uses it, and clears the pointer. */
void tls_engine_close(struct tls_engine **e);

/* The operations of core/term.h over OpenSSL sessions (tls/session.h). */
extern const struct term_ops tls_term_ops;

#endif /* AN_TLS_ENGINE_H */
