/*
 * The engine's view of TLS termination, for the tiers that answer or
 * re-originate inside the agent's TLS (fake-response, credential-inject).
 *
 * core/ may not include tls/ (dependencies point one way), so the daemon
 * installs this table (tls/term.h) when it has a CA; without one the
 * engine refuses CONNECTs to terminated tiers as tier_unavailable. Every
 * session call is made by the worker that owns the connection; sessions move
 * ciphertext through memory only: the engine's ring owns every socket.
 */
#ifndef AN_CORE_TERM_H
#define AN_CORE_TERM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum term_status {
	TERM_OK = 0,     /* done, or progress made */
	TERM_WANT_READ,  /* needs more ciphertext from the peer */
	TERM_WANT_WRITE, /* the outbound ciphertext must be sent first */
	TERM_CLOSED,     /* the peer sent close_notify */
	TERM_ERROR,      /* fatal and sticky; term_ops.error says why */
};

/*
 * One worker's leaf cache figures since it started (term_ops.counters). The
 * leaves minted ahead when a policy loads count too: priming is a get, and
 * a mint when it misses.
 */
struct term_counters {
	uint64_t leaf_hits;   /* a leaf was wanted and found in the cache */
	uint64_t leaf_misses; /* ... and not found, or found too close to its notAfter */
	uint64_t leaf_mints;  /* leaves signed and cached (a miss whose mint failed is not one) */
};

struct term_ops {
	/*
	 * What worker <worker> keeps for its sessions (a leaf cache), from the
	 * daemon's <arg>. NULL with one line in <err>/<cap> on failure. Worker
	 * thread, at start-up.
	 */
	void *(*worker_new)(void *arg, uint32_t worker, char *err, size_t cap);
	void (*worker_free)(void *worker_state);
	/*
	 * Writes <worker_state>'s counters since worker_new to *<out> (all 0
	 * for a term without a CA). A few loads, no lock: the owning worker
	 * only, which publishes them for other threads (core/worker.h). NULL:
	 * the back-end counts nothing, and every figure is 0.
	 */
	void (*counters)(const void *worker_state, struct term_counters *out);
	/* Mints (or keeps) the leaf for <host>/<host_len> in the worker's cache. 0 or -errno. */
	int (*prime)(void *worker_state, const char *host, size_t host_len);
	/*
	 * A server session for a client that sent CONNECT <host>/<host_len> (as
	 * the client spelled it; at most 255 bytes): its ClientHello must name
	 * the same host (or none), and it is shown a leaf for that host. NULL
	 * when out of memory.
	 */
	void *(*server_new)(void *worker_state, const char *host, size_t host_len);
	/*
	 * A client session to the upstream <host>/<host_len> (SNI for a name,
	 * and the name or address its certificate must carry), verified against
	 * the PEM roots in <ca_file> (NULL: the system roots). NULL when out of
	 * memory or when <ca_file> does not load (logged once per worker).
	 */
	void *(*client_new)(void *worker_state, const char *host, size_t host_len,
			    const char *ca_file);
	/*
	 * A server session for a client of the ingress gateway's TLS listener
	 * (daemon.ingress.tls): it is shown the operator's certificate chain,
	 * whatever its ClientHello names. NULL when the daemon has no such
	 * certificate, or out of memory.
	 */
	void *(*public_new)(void *worker_state);
	void (*session_free)(void *session);
	/* Takes up to <len> received bytes (copied); returns how many, -EPIPE after EOF. */
	ssize_t (*feed)(void *session, const void *buf, size_t len);
	/* The client's side reached end of file. */
	void (*feed_eof)(void *session);
	/* Steps the handshake (a client session sends its ClientHello). */
	enum term_status (*handshake)(void *session);
	/* Plaintext out of the session; completes the handshake first. */
	enum term_status (*read)(void *session, void *buf, size_t cap, size_t *n);
	/* Plaintext into the session (*<n> taken, possibly fewer than <len>). */
	enum term_status (*write)(void *session, const void *buf, size_t len, size_t *n);
	/* Queues close_notify (nothing before the handshake completed). */
	enum term_status (*close)(void *session);
	/* Ciphertext waiting to be sent (stable until consumed), and marking it sent. */
	size_t (*out_peek)(void *session, const uint8_t **data);
	void (*out_consume)(void *session, size_t n);
	/*
	 * True when the session may serve another connection's requests: its
	 * handshake is done, it neither failed nor saw a close either way, and
	 * nothing waits in it in either direction (no ciphertext unread, no
	 * plaintext undelivered, nothing unsent).
	 */
	bool (*idle)(void *session);
	/* True once the handshake completed (and from then on, whatever happens next). */
	bool (*established)(const void *session);
	/* True when the handshake failed because the ClientHello named another host. */
	bool (*sni_refused)(const void *session);
	/* Why the session failed, one line ("" when it did not). */
	const char *(*error)(const void *session);
};

#endif /* AN_CORE_TERM_H */
