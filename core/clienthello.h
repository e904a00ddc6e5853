/*
 * The server name a TLS client asks for, read from its first flight without
 * terminating anything: what the passthrough tier checks against the CONNECT
 * host, so that a tunnel admitted for one name cannot carry a handshake for
 * another (domain fronting by SNI).
 *
 * A pure reader over the bytes the client sent first: TLS records of type
 * handshake (RFC 8446 section 5.1), whose payloads are joined into the one
 * ClientHello message (section 4.1.2), then its server_name extension (RFC
 * 6066 section 3). It is strict where a lenient reader would let a checker
 * and the server disagree on the name: exactly one server_name extension,
 * holding exactly one host_name of LDH bytes; every length exactly filled;
 * anything else is MALFORMED, never a guess. No allocation, no state between
 * calls: the caller gathers bytes and calls again until it gets an answer.
 */
#ifndef AN_CORE_CLIENTHELLO_H
#define AN_CORE_CLIENTHELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A ClientHello message longer than this is not read: MALFORMED (real ones are under 4 KiB). */
#define CLIENTHELLO_MESSAGE_BYTES_MAX 16384u

enum clienthello_result {
	CLIENTHELLO_NEED_MORE = 0, /* a prefix of a well-formed first flight so far */
	CLIENTHELLO_NAME,          /* a ClientHello naming a server: *<name> */
	CLIENTHELLO_NO_NAME,       /* a well-formed ClientHello without server_name */
	CLIENTHELLO_NOT_TLS,       /* the first byte is not a TLS handshake record's */
	CLIENTHELLO_MALFORMED,     /* TLS, but not a ClientHello this reader accepts */
};

/*
 * What a ClientHello names: the server name, <len> bytes (1..255, no NUL) into
 * the caller's scratch (NAME only); and whether it carries an Encrypted
 * Client Hello (encrypted_client_hello, 0xfe0d, or the ESNI draft's 0xffce),
 * whose inner name this reader cannot see (NAME and NO_NAME).
 */
struct clienthello_name {
	const char *name;
	size_t len;
	bool encrypted;
	size_t records_len; /* NAME, NO_NAME: the bytes of the records that carry the message */
};

/*
 * Reads the first flight <in>/<len> a client sent on a tunnel. The handshake
 * bytes of its records are joined in <scratch>, of <scratch_cap> bytes (at
 * least CLIENTHELLO_MESSAGE_BYTES_MAX + 4 to read every message this reader
 * accepts; a message that does not fit is MALFORMED). On CLIENTHELLO_NAME,
 * *<out> points into <scratch>. Bytes after the ClientHello's last record
 * (early data, say) are not looked at. NEED_MORE only while <in> is a
 * strict prefix of a flight that could still be accepted.
 */
enum clienthello_result clienthello_server_name(const uint8_t *in, size_t len, uint8_t *scratch,
						size_t scratch_cap, struct clienthello_name *out);

/*
 * Whether server name <sni>/<sni_len> names host <host>/<host_len> (the
 * CONNECT's, as decided): ASCII case-insensitive, one trailing dot on either
 * side ignored.
 */
bool clienthello_names_host(const char *sni, size_t sni_len, const char *host, size_t host_len);

#endif /* AN_CORE_CLIENTHELLO_H */
