/*
 * A TLS session over memory: the caller moves ciphertext between the session
 * and its socket, the session never touches a descriptor.
 *
 * Server sessions terminate an agent's TLS with a leaf the caller picks when
 * the ClientHello's SNI is known (before anything is sent back); client
 * sessions re-originate to an upstream, verifying its certificate and name.
 * After every call, the caller sends what tls_session_out_peek shows.
 *
 * The data-path calls (feed, handshake, read, write, out_peek, out_consume,
 * close, error) take only the session and plain C types, so a future table
 * of function pointers in core/ (struct tls_ops) can wrap them without
 * including this header; the constructors, which take OpenSSL types, stay
 * in tls/. A session is owned by one worker and is not thread-safe.
 */
#ifndef AN_TLS_SESSION_H
#define AN_TLS_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/types.h>

struct tls_ca;

/* Ciphertext buffered each way, allocated once per session: one full TLS 1.2
 * record (5 + 16384 + 2048 bytes) fits, so a record never waits on a second
 * send; an io_uring receive buffer (LIMITS_BUFRING_BUFFER_BYTES) fits too. */
#define TLS_SESSION_NET_BYTES (5u + 16384u + 2048u)
/* The failure text a session keeps for a 502 reason or an audit record. */
#define TLS_SESSION_ERR_BYTES 160u

enum tls_session_status {
	TLS_SESSION_OK = 0,     /* done, or progress made */
	TLS_SESSION_WANT_READ,  /* needs more ciphertext: feed it, then call again */
	TLS_SESSION_WANT_WRITE, /* the outbound buffer is full: send, consume, call again */
	TLS_SESSION_CLOSED,     /* the peer sent close_notify: nothing more to read */
	TLS_SESSION_ERROR,      /* fatal and sticky: see tls_session_error */
};

struct tls_session;

/*
 * Called on a server session while its ClientHello is processed (once per
 * ClientHello: twice after a TLS 1.3 HelloRetryRequest), with the SNI host
 * name (<sni>/<sni_len>, borrowed for the call, NUL-terminated; NULL
 * and 0 when the client sent none, as clients do for IP literals). The
 * callee compares it with the CONNECT authority and either calls
 * tls_session_set_leaf and returns 0, or returns a negative errno to refuse:
 * the handshake then fails with an unrecognized_name alert.
 */
typedef int (*tls_session_sni_fn)(struct tls_session *s, const char *sni, size_t sni_len,
				  void *arg);

/* Embeddable; the fields are the module's own. */
struct tls_session {
	SSL *ssl; /* owned; holds the inner half of the BIO pair */
	BIO *net; /* owned: our half, where ciphertext goes in and comes out */
	tls_session_sni_fn on_sni;
	void *sni_arg;
	size_t out_peeked; /* what the last out_peek showed: the most consume may take */
	bool server;
	bool handshake_done;
	bool eof_fed;     /* the transport reached end of file */
	bool read_closed; /* close_notify received */
	bool close_sent;  /* our close_notify queued */
	bool failed;      /* sticky: every later call returns TLS_SESSION_ERROR */
	char err[TLS_SESSION_ERR_BYTES];
};

/*
 * The SSL_CTX for server sessions of a worker: TLS 1.2 and 1.3, ALPN
 * http/1.1 when the client offers it, renegotiation off, no server-side
 * session cache (one stateless TLS 1.3 ticket), received plaintext wiped
 * from OpenSSL's buffers. The leaf key of <ca> (borrowed: <ca> must outlive
 * the context) is kept as the context's app data, which is this module's:
 * each session presents it with its leaf. With <ca> NULL the context has no
 * leaf key: the caller installs one certificate chain and key into it
 * (SSL_CTX_use_cert_and_key) before any session, and its sessions are made
 * with no leaf and no SNI callback (tls_session_set_leaf is not for them).
 * Returns an owned context (SSL_CTX_free), or NULL with <err> (<err_len>
 * bytes) holding one line. Start-up context.
 */
SSL_CTX *tls_session_server_ctx_new(const struct tls_ca *ca, char *err, size_t err_len);

/*
 * The SSL_CTX for client sessions to upstreams: TLS 1.2 and 1.3, peer
 * verification on, trusting the roots in the PEM file <ca_file> (borrowed),
 * or OpenSSL's default store (the system roots) when NULL; ALPN http/1.1;
 * renegotiation off. Returns an owned context, or NULL with <err> naming
 * <ca_file> and the fault. Start-up context.
 */
SSL_CTX *tls_session_client_ctx_new(const char *ca_file, char *err, size_t err_len);

/*
 * Makes <s> a server session on <ctx> (borrowed; the session keeps its own
 * reference). <leaf> (borrowed, may be NULL) is the certificate to present,
 * minted by the CA <ctx> was made from; <on_sni> (may be NULL) is called with
 * <arg> as described at tls_session_sni_fn, and may replace it. <s> must not
 * move until tls_session_destroy. Returns 0, -EINVAL (a leaf that does not
 * carry the context's key) or -ENOMEM/-EIO, with tls_session_error saying
 * which; <s> then needs no destroy.
 */
int tls_session_server_init(struct tls_session *s, SSL_CTX *ctx, X509 *leaf,
			    tls_session_sni_fn on_sni, void *arg);

/*
 * Makes <s> a client session on <ctx> (borrowed) to <host>/<host_len>
 * (1..LIMITS_HOST_BYTES_MAX bytes, copied): for a DNS name, sent as SNI and
 * required in the certificate's dNSName SANs; for an IP literal (dotted IPv4
 * or IPv6 text without brackets), no SNI (RFC 6066) and required as an
 * iPAddress SAN. Returns 0, -EINVAL (empty, over-long or NUL in <host>) or
 * -ENOMEM/-EIO; <s> then needs no destroy.
 */
int tls_session_client_init(struct tls_session *s, SSL_CTX *ctx, const char *host, size_t host_len);

/* Releases what <s> holds (its SSL, both BIO halves) and zeroes it. */
void tls_session_destroy(struct tls_session *s);

/*
 * Server sessions, before the certificate is sent (from the SNI callback, or
 * before the first handshake call): presents <leaf> (borrowed; the session
 * takes its own reference). Returns 0, or -EINVAL when <leaf> does not carry
 * the context's leaf key (it was minted by another CA instance).
 */
int tls_session_set_leaf(struct tls_session *s, X509 *leaf);

/*
 * Feeds up to <len> bytes of received ciphertext (borrowed, copied). Returns
 * the bytes taken: fewer than <len>, even 0, when the inbound buffer
 * (TLS_SESSION_NET_BYTES) is full; then read or step the handshake and feed
 * the rest. Returns -EPIPE after tls_session_feed_eof.
 */
ssize_t tls_session_feed(struct tls_session *s, const void *buf, size_t len);

/* The transport reached end of file: once what was fed is used, the session sees EOF. */
void tls_session_feed_eof(struct tls_session *s);

/*
 * Steps the handshake. Returns TLS_SESSION_OK once it is complete (and on
 * every later call), WANT_READ or WANT_WRITE, CLOSED (close_notify before
 * completion), or ERROR: on a client session a failed verification gives
 * "certificate verify failed: <reason>" (e.g. "Hostname mismatch", "unable
 * to get local issuer certificate") in tls_session_error.
 */
enum tls_session_status tls_session_handshake(struct tls_session *s);

/*
 * Reads up to <cap> (> 0) bytes of plaintext into <buf>, setting *<n>.
 * Completes the handshake first if needed. Returns OK with *<n> > 0,
 * WANT_READ or WANT_WRITE with *<n> 0, CLOSED once close_notify arrived (on
 * this and every later read), or ERROR (an EOF without close_notify is one:
 * a truncated response must not look complete).
 */
enum tls_session_status tls_session_read(struct tls_session *s, void *buf, size_t cap, size_t *n);

/*
 * Encrypts up to <len> bytes of plaintext at <buf>, setting *<n> to the bytes
 * taken (possibly fewer: call again with the rest). Completes the handshake
 * first: application data never leaves before the peer is verified. Returns
 * OK, WANT_WRITE (nothing taken: send, consume and call again with the same
 * bytes, which may move), WANT_READ (handshake still running) or ERROR.
 */
enum tls_session_status tls_session_write(struct tls_session *s, const void *buf, size_t len,
					  size_t *n);

/*
 * Queues close_notify (once; later calls return OK). Returns OK, WANT_WRITE
 * (buffer full: send, consume, call again) or ERROR. Before the handshake
 * completed there is nothing to close: returns OK and sends nothing.
 */
enum tls_session_status tls_session_close(struct tls_session *s);

/*
 * The ciphertext waiting to be sent: sets *<data> (borrowed) and returns its
 * length, 0 when nothing waits. The bytes stay valid and unchanged until
 * tls_session_out_consume takes them (later calls append behind them, never
 * over them), so an asynchronous send may point at them. A non-zero result
 * may be less than tls_session_out_pending: the rest follows after consume.
 */
size_t tls_session_out_peek(struct tls_session *s, const uint8_t **data);

/* Marks <n> bytes of the last out_peek as sent; <n> at most what it showed. */
void tls_session_out_consume(struct tls_session *s, size_t n);

/* All ciphertext waiting to be sent. */
size_t tls_session_out_pending(const struct tls_session *s);

/*
 * True when <s> is between messages and whole: handshake done, not failed,
 * no close_notify or end of file either way, and nothing buffered in either
 * direction (ciphertext fed but unread, plaintext decrypted but not read,
 * ciphertext not yet taken by out_peek/out_consume).
 */
bool tls_session_idle(struct tls_session *s);

/* True once the handshake of <s> completed (it stays true after a later failure or close). */
bool tls_session_established(const struct tls_session *s);

/* Why the session failed (one line, for a 502 reason or an audit record); "" if it did not. */
const char *tls_session_error(const struct tls_session *s);

/* The SNI host name the client sent (server) or sends (client); NULL when none. */
const char *tls_session_sni(const struct tls_session *s);

/* Client sessions: the handshake completed and the upstream's certificate verified for the host. */
bool tls_session_verified(const struct tls_session *s);

#endif /* AN_TLS_SESSION_H */
