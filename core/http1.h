/*
 * HTTP/1.1 message heads (RFC 9112), parsed strictly and without allocation.
 *
 * Every function borrows its input: results are pointer+length views into the
 * caller's buffer, valid while the buffer is. Nothing here reads past <len>.
 * The parsers are incremental in the simplest way: call again with more bytes
 * and they start over (heads are small; re-scanning is cheaper than state).
 */
#ifndef AN_CORE_HTTP1_H
#define AN_CORE_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/limits.h"
#include "core/reason.h"

struct http1_header {
	const char *name;
	size_t name_len;
	const char *value; /* leading and trailing whitespace removed */
	size_t value_len;
};

enum http1_form {
	HTTP1_FORM_ORIGIN = 0, /* GET /path */
	HTTP1_FORM_ABSOLUTE,   /* GET http://host[:port]/path */
	HTTP1_FORM_AUTHORITY,  /* CONNECT host:port */
	HTTP1_FORM_ASTERISK,   /* OPTIONS * */
};

/* How the body of a message is delimited (RFC 9112 section 6.3). */
enum http1_body {
	HTTP1_BODY_NONE = 0,
	HTTP1_BODY_LENGTH,  /* exactly content_length bytes */
	HTTP1_BODY_CHUNKED, /* chunked transfer coding, scanned by http1_chunked_scan */
	HTTP1_BODY_CLOSE,   /* response only: until the upstream closes */
};

struct http1_request {
	const char *method;
	size_t method_len;
	const char *target; /* the request-target as sent */
	size_t target_len;
	enum http1_form form;
	/* Authority of absolute- and authority-form targets; host has no brackets. */
	const char *authority; /* host[:port] exactly as in the target */
	size_t authority_len;
	const char *host;
	size_t host_len;
	uint16_t port; /* explicit, or 80 for http:// (absolute form); never 0 on success */
	/* Absolute form: path and query to send upstream in origin form ("/" if empty). */
	const char *path;
	size_t path_len;
	uint8_t version_minor; /* 1 for HTTP/1.1, 0 for HTTP/1.0 */
	bool is_connect;
	bool keep_alive; /* HTTP/1.1 without "Connection: close", or 1.0 with keep-alive */
	bool expect_continue;
	enum http1_body body;    /* NONE, LENGTH or CHUNKED */
	uint64_t content_length; /* valid when body == HTTP1_BODY_LENGTH */
	const char *host_header; /* value of Host, NULL when absent */
	size_t host_header_len;
	uint32_t header_count;
	struct http1_header headers[LIMITS_HEADERS_MAX];
	size_t head_len; /* bytes from the request line to the blank line, inclusive */
};

struct http1_response {
	uint16_t status;
	/* The reason-phrase as received, possibly empty; never NULL on success. */
	const char *reason;
	size_t reason_len;
	uint8_t version_minor;
	bool keep_alive;
	enum http1_body body; /* before applying the request method; see http1_response_body */
	uint64_t content_length;
	uint32_t header_count;
	struct http1_header headers[LIMITS_HEADERS_MAX];
	size_t head_len;
};

/*
 * Parses the request head at <buf>/<len> into <req>.
 *
 * Returns head_len (> 0) when a whole head is present, -EAGAIN when more bytes
 * are needed (and the limits are not yet exceeded), or -EPROTO with *<why> set:
 *   REASON_URI_TOO_LONG       request line over LIMITS_REQUEST_LINE_BYTES_MAX;
 *   REASON_HEADERS_TOO_LARGE  head over LIMITS_HEAD_BYTES_MAX, or more than
 *                             LIMITS_HEADERS_MAX fields;
 *   REASON_BAD_REQUEST        anything RFC 9112 forbids or we refuse as a
 *                             smuggling risk: bare CR or LF, NUL or other CTLs,
 *                             obs-fold, whitespace before the colon, empty or
 *                             invalid field names, bad method token, version
 *                             other than HTTP/1.0 and 1.1, duplicate or
 *                             conflicting Content-Length, Transfer-Encoding with
 *                             Content-Length, Transfer-Encoding other than a
 *                             final "chunked", Transfer-Encoding on HTTP/1.0,
 *                             CONNECT whose target is not host:port, an
 *                             absolute form other than http:// (or with
 *                             userinfo), a missing or duplicate Host in HTTP/1.1,
 *                             a port that is not 1..65535, a field name with
 *                             '_' that a CGI or WSGI server reads ('_' as '-')
 *                             as Content-Length, Transfer-Encoding, Keep-Alive,
 *                             Proxy-*, X-Forwarded-* or X-Real-IP.
 * Leading empty lines (RFC 9112 section 2.2) are skipped and count in head_len.
 * Origin and asterisk forms parse successfully; refusing them is the caller's
 * policy. Borrows <buf>; writes only <req> and <why>.
 */
ssize_t http1_parse_request(const char *buf, size_t len, struct http1_request *req,
			    enum reason *why);

/*
 * Parses a response head. Returns head_len, -EAGAIN, or -EPROTO for a malformed
 * or oversize (LIMITS_RESPONSE_HEAD_BYTES_MAX) head, with the same strictness on
 * framing headers as requests. The status line may omit the SP before an empty
 * reason-phrase ("HTTP/1.1 204" CRLF); resp->reason then views zero bytes.
 * Borrows <buf>.
 */
ssize_t http1_parse_response(const char *buf, size_t len, struct http1_response *resp);

/*
 * The body framing of <resp> given the request it answers: NONE for 1xx, 204,
 * 304 and any response to HEAD, or 2xx to CONNECT; otherwise resp->body.
 */
enum http1_body http1_response_body(const struct http1_response *resp, bool request_was_head);

/* True when <name>/<len> equals <lit> ignoring ASCII case. */
bool http1_name_is(const char *name, size_t len, const char *lit);

/* Whether request <req> asks to switch protocols: it has an Upgrade field (RFC 9110 7.8). */
bool http1_request_upgrades(const struct http1_request *req);

/*
 * Whether request <req> has no body bytes after its head: none framed, or a
 * Content-Length of 0. A chunked body, even an empty one, has bytes (its last
 * chunk) that are not read yet.
 */
bool http1_request_bodiless(const struct http1_request *req);

/*
 * Steps through a comma-separated field value (RFC 9110 section 5.6.1): from
 * *<pp> up to <end>, skips commas and OWS, sets <elem>/<elem_len> to the next
 * element with its OWS trimmed, and moves *<pp> past it. Empty elements are
 * skipped, so a set element is never empty. Returns false, leaving <elem>
 * untouched, when no element is left. Borrows the value; the element is a
 * view into it. Start with *<pp> at the value's first byte.
 */
bool http1_list_next(const char **pp, const char *end, const char **elem, size_t *elem_len);

/*
 * Sets <drop>[i], for each of <req>'s header_count fields, to whether field i
 * is one a proxy never forwards: hop-by-hop (RFC 9110 section 7.6.1), that is
 * Connection, the fields its options name, Keep-Alive, TE, Trailer, Upgrade,
 * Proxy-Connection and every other Proxy-* field; and every field whose name
 * holds '_' (nginx's underscores_in_headers off), which a CGI or WSGI backend
 * reads as the name with '-' and so as a field the proxy checked, stripped or
 * wrote under that name. A Connection option never marks Content-Length,
 * Transfer-Encoding or Host: dropping framing would let the next hop read the
 * body as a second, unchecked request, and an HTTP/1.1 request must keep its
 * Host. "close" names no field. Every head the proxy writes for a request
 * (plain forwarding, the inject tier, the gateway) starts from this marking.
 * Writes every entry of <drop> (at least header_count of them) and nothing
 * else; callers then add drops of their own. Borrows <req>.
 */
void http1_hop_by_hop(const struct http1_request *req, bool *drop);

/*
 * Sets <drop>[i], for each of <resp>'s header_count fields, to whether field i
 * is hop-by-hop (RFC 9110 section 7.6.1): Connection, the fields its options
 * name, Keep-Alive, TE, Trailer, Upgrade, Proxy-Connection and every other
 * Proxy-* field (an origin's Proxy-Authenticate is not for the agent). A
 * Connection option never marks Content-Length or Transfer-Encoding: the next
 * hop must delimit the body as we did. "close" names no field. For a 101
 * response nothing is marked: its Connection and Upgrade are the protocol
 * switch itself, and callers relay a 101 head untouched. Writes every entry of
 * <drop> (at least header_count of them) and nothing else. Borrows <resp>.
 */
void http1_response_hop_by_hop(const struct http1_response *resp, bool *drop);

/*
 * A bounded writer for a message head into the caller's buffer: start it as
 * { .p = buf, .cap = cap }. <len> counts the bytes written. The first write
 * that does not fit sets <overflow> and from then on nothing is written, so a
 * head is written whole with no check per call and judged once by
 * http1_out_end. Owns nothing; <p> stays the caller's.
 */
struct http1_out {
	char *p;
	size_t cap;
	size_t len;
	bool overflow;
};

/* Appends <s>/<n> to <o>, or sets o->overflow when it does not fit. Borrows <s>. */
void http1_out_put(struct http1_out *o, const char *s, size_t n);

/* Appends the field line "<name>: <value>" CRLF to <o>. Borrows both views. */
void http1_out_field(struct http1_out *o, const char *name, size_t name_len, const char *value,
		     size_t value_len);

/*
 * Appends the request line "<method> <path> HTTP/1.1" CRLF to <o>, with a "/"
 * before <path> when it is empty or does not start with one ("?q" becomes
 * "/?q"). Borrows both views; <method_len> is never 0.
 */
void http1_out_request_line(struct http1_out *o, const char *method, size_t method_len,
			    const char *path, size_t path_len);

/*
 * Appends each of <req>'s fields whose <drop> entry is false, in order and as
 * received (name, ": ", trimmed value, CRLF). Borrows <req> and <drop>.
 */
void http1_out_fields(struct http1_out *o, const struct http1_request *req, const bool *drop);

/*
 * Ends the head with its blank line. Returns the head's length (<= o->cap),
 * or -EMSGSIZE when any write did not fit.
 */
ssize_t http1_out_end(struct http1_out *o);

/*
 * Writes the head to send upstream for an absolute-form <req>: the request
 * line in origin form with HTTP/1.1, every header except those
 * http1_hop_by_hop marks (Connection and the names it lists, Keep-Alive, TE,
 * Trailer, Upgrade, every Proxy-* field, every name with '_') and Host, then "Host:
 * <authority>" (RFC 9112 section 3.2.2: a proxy replaces Host with the
 * target's authority), then the blank line. An origin-form <req> (a
 * terminated tier's inner request) keeps its own Host instead. Returns the
 * bytes written, or -EMSGSIZE when <cap> is too small. Borrows <req>.
 */
ssize_t http1_write_origin_head(const struct http1_request *req, char *out, size_t cap);

/* A host:port split into its parts: views into the text, the host without brackets. */
struct http1_authority {
	const char *host;
	size_t host_len;
	uint16_t port;
};

/*
 * Splits <s>/<n>, "host:port" or "[v6]:port", as a CONNECT target is split
 * (the one splitter of the tree: configured upstreams and listen addresses
 * too): 0, or -EPROTO for userinfo, an empty host or one over
 * LIMITS_HOST_BYTES_MAX, a byte outside the host set, a bad IPv6 literal, or
 * a port that is missing or not 1..65535. Borrows <s>; writes only <out>.
 */
int http1_authority_split(const char *s, size_t n, struct http1_authority *out);

/*
 * Whether Host field value <field>/<field_len> names <host>:<port> (RFC 9112
 * section 3.2): the same host, ignoring case, brackets and one trailing dot,
 * and the same port; a value without a port names <port>. An empty or
 * malformed value names nothing. Borrows both views.
 */
bool http1_host_names(const char *field, size_t field_len, const char *host, size_t host_len,
		      uint16_t port);

/* What the first bytes of a stream say of it (http1_request_line_shape). */
enum http1_shape {
	HTTP1_SHAPE_NOT,   /* another protocol's first line, or binary */
	HTTP1_SHAPE_MAYBE, /* it could still be either */
	HTTP1_SHAPE_YES,   /* a request to some server: read it as HTTP */
};

/*
 * Whether <p>/<n>, the first bytes a client sent on a stream, begin what
 * some HTTP/1 server would take for a request, read wider than the grammar
 * on purpose (the caller then parses it strictly and refuses what fails):
 * after the empty lines a server ignores (RFC 9112 section 2.2, *<skip> of
 * them), YES for a line that starts with a blank, with a known method and a
 * blank (HTTP/0.9's "GET /x" too), or with any token whose line holds
 * "HTTP/" in any case, and for a first line too long to tell
 * (LIMITS_REQUEST_LINE_BYTES_MAX); NOT for a first byte that begins no token
 * (a binary protocol), a token alone on its line ("SSH-2.0-x"), or a line
 * of another protocol ("EHLO x", "a1 LOGIN u p"); MAYBE while it could still
 * be either. Pure.
 */
enum http1_shape http1_request_line_shape(const char *p, size_t n, size_t *skip);

/* A Location value longer than this is not read (UNSAFE): a request line's bound. */
#define HTTP1_LOCATION_BYTES_MAX LIMITS_REQUEST_LINE_BYTES_MAX

/* Where a Location field sends the client (http1_location_target). */
enum http1_location_kind {
	HTTP1_LOCATION_RELATIVE = 0, /* a path on the same host: "/x", "x", "?q", "#f" */
	HTTP1_LOCATION_ABSOLUTE,     /* another authority: host and port below */
	HTTP1_LOCATION_UNSAFE,       /* one no check can place: another scheme, a bad port, ... */
};

struct http1_location {
	enum http1_location_kind kind;
	const char *host; /* ABSOLUTE: a view into the value, brackets of an IPv6 literal removed */
	size_t host_len;
	uint16_t port; /* ABSOLUTE: the explicit port, or the scheme's (80, 443; 443 with none) */
};

/*
 * Reads a Location value as HTTP clients and browsers do (the WHATWG URL
 * parser's rules for http and https), relative to an https request: leading
 * and trailing spaces and control bytes ignored, tabs and line breaks
 * anywhere ignored, a backslash read as a slash, "//host" (no scheme) and
 * "http:" or "https:" followed by any number of slashes (none included) an
 * authority, whose userinfo (up to the last '@') is skipped. A value the rules
 * above cannot reduce to a path or to host[:port] with a port of 1..65535,
 * another scheme, an empty host, or a byte that could hide an authority from
 * this reading (a control byte, a percent sign before the path) is UNSAFE:
 * the caller refuses it. Borrows <value>; writes only <out>.
 */
void http1_location_target(const char *value, size_t len, struct http1_location *out);

/*
 * Whether field <name> is in the proxy's own namespace, X-Agent-* (ignoring
 * case): the fields of its refusals (docs/reasons.md). No upstream's, nor an
 * agent's answer to a public client, is ever relayed, so no peer can speak
 * as the proxy.
 */
bool http1_proxy_field(const char *name, size_t name_len);

/*
 * Writes the head to send downstream for the parsed <resp>: the status line
 * "HTTP/1.1 <status> <reason>" CRLF (our own version, RFC 9110 section 6.2,
 * whatever the upstream spoke; the status as 3 digits from resp->status, which
 * must be 100..999; the received reason-phrase, so an empty one leaves
 * "HTTP/1.1 204 " CRLF), then every field http1_response_hop_by_hop does not
 * mark and that is not the proxy's own (http1_proxy_field), in order,
 * duplicates kept, as received (name, ": ", trimmed value),
 * then "Connection: <connection>" CRLF when <connection> is not NULL (a
 * non-empty token such as "close" or "keep-alive"; a close-delimited body
 * needs "close"), then the blank line. A 101 is meant to be relayed untouched;
 * given one, every field is kept and <connection> must be NULL.
 * Returns the bytes written (<= <cap>), or -EMSGSIZE when <cap> is too small;
 * <out> then holds nothing usable. A <cap> of HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX
 * always suffices with "close" or "keep-alive". Borrows <resp> and
 * <connection>; writes only <out>, which must not overlap the buffer <resp>
 * views (the head cannot be rewritten in place: it may grow).
 */
ssize_t http1_write_response_head(const struct http1_response *resp, const char *connection,
				  char *out, size_t cap);

/*
 * The longest head http1_write_response_head writes for a head that parsed,
 * given a <connection> no longer than "keep-alive": each field may grow by one
 * byte (the SP after its colon), the status line by one (the SP before an
 * empty phrase), "Connection: keep-alive" CRLF adds 24; everything else only
 * shrinks (trimmed values, dropped fields).
 */
#define HTTP1_RESPONSE_HEAD_OUT_BYTES_MAX \
	(LIMITS_RESPONSE_HEAD_BYTES_MAX + LIMITS_HEADERS_MAX + 32u)

/* Incremental scanner for a chunked body: finds where the message ends. */
struct http1_chunked {
	uint64_t chunk_left; /* data bytes left in the current chunk */
	uint32_t state;      /* private to core/http1.c */
	uint32_t line_len;   /* bytes of the current size or trailer line */
	bool done;           /* the last chunk and trailer section are complete */
};

/*
 * Scans <len> bytes of a chunked body that continue the stream <s> has seen so
 * far. Returns the bytes that belong to this message (== len unless the message
 * ended inside the buffer; then s->done is set), or -EPROTO on a malformed size
 * line (a size that is not hex, a chunk extension outside RFC 9112 section
 * 7.1.1's grammar: a bare ';', a name-less or value-less '=', an unclosed
 * quoted-string, a CTL, BWS before the CRLF), a chunk size over 2^62, a size
 * or trailer line over 4 KiB, a malformed trailer field, or bare CR/LF.
 * The bytes are only inspected, never changed: the relay forwards them as-is.
 */
ssize_t http1_chunked_scan(struct http1_chunked *s, const char *buf, size_t len);

/*
 * As http1_chunked_scan, but stops right after the first run of chunk data in
 * <buf>, and right after a line a trailer field may follow (the last chunk's,
 * each trailer field's): *<data_off> and *<data_len> say where that run lies
 * (*<data_len> 0: none in what was scanned). Returns the bytes scanned (0
 * once the message ended), or -EPROTO as http1_chunked_scan would. A caller
 * that calls it again on the rest sees every data byte of the body exactly
 * once.
 */
ssize_t http1_chunked_next_data(struct http1_chunked *s, const char *buf, size_t len,
				size_t *data_off, size_t *data_len);

/*
 * As http1_chunked_scan, one part at a time: returns the bytes of the part
 * that starts <buf> and *<trailer_field> says which it is: true for trailer
 * field lines (RFC 9112 section 7.1.2: every field of the trailer section,
 * each with its CRLF), false for everything else (the chunks, the last
 * chunk's line, the final CRLF). A relay that sends the false parts and
 * drops the true ones sends the body with an empty trailer section, which
 * is still a valid chunked body; the proxy then never forwards a field a
 * head check did not see. Returns 0 once the message ended (or for <len>
 * 0), -EPROTO as http1_chunked_scan. Borrows <buf>; inspects it only.
 */
ssize_t http1_chunked_scan_part(struct http1_chunked *s, const char *buf, size_t len,
				bool *trailer_field);

/*
 * As http1_chunked_scan over <len> bytes at <buf>, dropping in place what a
 * relay never passes on: the trailer fields (http1_chunked_scan_part's true
 * parts) and every chunk extension (from the BWS or ';' after a size to the
 * line's CR). The bytes kept move down to the front of <buf>, in order, and
 * *<kept> says how many there are. Returns the bytes of <buf> that belonged
 * to the message (those past it are left where they were, after the consumed
 * span; the caller moves them if it wants them), or -EPROTO as
 * http1_chunked_scan (*<kept> then unset). What a relay sends from it is the
 * body's data in its chunks and an empty trailer section: neither part can
 * carry what the proxy's checks never saw, a field of its own contract
 * (X-Agent-Instruction) in a trailer, or a copy of a secret the inject
 * masker looks for in the data alone (core/mask.h) in an extension.
 */
ssize_t http1_chunked_strip(struct http1_chunked *s, char *buf, size_t len, size_t *kept);

#endif /* AN_CORE_HTTP1_H */
