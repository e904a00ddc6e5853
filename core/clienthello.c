/*
 * The ClientHello reader (core/clienthello.h): two passes over the first
 * flight. The first walks the TLS records and copies their handshake
 * payloads into the caller's scratch until the message its header announces
 * is whole; the second reads that message field by field with a cursor that
 * refuses to step past what a length said. Every field is checked against
 * what RFC 8446 allows, so a hello a server would take apart differently
 * (two server names, a list with trailing bytes) is refused here.
 */
#include "core/clienthello.h"

#include <stdbool.h>
#include <string.h>

#define TLS_RECORD_HANDSHAKE       22u
#define TLS_RECORD_HEADER_BYTES    5u
#define TLS_RECORD_PAYLOAD_MAX     16384u /* 2^14, RFC 8446 section 5.1 */
#define TLS_HANDSHAKE_CLIENT_HELLO 1u
#define TLS_HANDSHAKE_HEADER_BYTES 4u
#define TLS_EXT_SERVER_NAME        0u
#define TLS_EXT_ECH                0xfe0du /* encrypted_client_hello (draft-ietf-tls-esni) */
#define TLS_EXT_ESNI               0xffceu /* encrypted_server_name (its drafts, deployed) */
#define TLS_SNI_HOST_NAME          0u
#define TLS_RANDOM_BYTES           32u
#define TLS_SESSION_ID_MAX         32u

/* A read position in a length-delimited field; every take checks what is left. */
struct cursor {
	const uint8_t *p;
	size_t left;
};

static bool take(struct cursor *c, size_t n, const uint8_t **out)
{
	if (c->left < n)
		return false;
	*out = c->p;
	c->p += n;
	c->left -= n;
	return true;
}

static bool take_u8(struct cursor *c, size_t *v)
{
	const uint8_t *b;
	if (!take(c, 1, &b))
		return false;
	*v = b[0];
	return true;
}

static bool take_u16(struct cursor *c, size_t *v)
{
	const uint8_t *b;
	if (!take(c, 2, &b))
		return false;
	*v = (size_t)b[0] << 8 | b[1];
	return true;
}

/* A sub-cursor over the next <n> bytes, which <c> skips. */
static bool take_field(struct cursor *c, size_t n, struct cursor *field)
{
	const uint8_t *b;
	if (!take(c, n, &b))
		return false;
	field->p = b;
	field->left = n;
	return true;
}

/* A host_name as RFC 6066 and RFC 5890 allow it: LDH labels (and '_', which
 * some services use), dots between them, at most one trailing. */
static bool host_name_valid(const uint8_t *n, size_t len)
{
	size_t label = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		uint8_t ch = n[i];
		if (ch == '.') {
			if (label == 0)
				return false; /* an empty label: "..", or a leading dot */
			label = 0;
			continue;
		}
		bool ldh = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			   (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
		if (!ldh || ++label > 63)
			return false;
	}
	return true;
}

/* The server_name extension's body: exactly one host_name, nothing after it. */
static enum clienthello_result server_name_read(struct cursor ext, struct clienthello_name *out)
{
	size_t list_len, type, name_len;
	struct cursor list;
	const uint8_t *name;

	if (!take_u16(&ext, &list_len) || list_len != ext.left ||
	    !take_field(&ext, list_len, &list))
		return CLIENTHELLO_MALFORMED;
	if (!take_u8(&list, &type) || type != TLS_SNI_HOST_NAME || !take_u16(&list, &name_len) ||
	    name_len != list.left || !take(&list, name_len, &name))
		return CLIENTHELLO_MALFORMED; /* another type, a second entry, or bytes past it */
	if (name_len > 255 || !host_name_valid(name, name_len))
		return CLIENTHELLO_MALFORMED;
	out->name = (const char *)name;
	out->len = name_len;
	return CLIENTHELLO_NAME;
}

/* The ClientHello body (after its 4-byte header), RFC 8446 section 4.1.2. */
static enum clienthello_result client_hello_read(struct cursor m, struct clienthello_name *out)
{
	const uint8_t *skip;
	size_t n, ext_total;
	struct cursor exts;
	enum clienthello_result found = CLIENTHELLO_NO_NAME;

	out->encrypted = false;

	if (!take(&m, 2 + TLS_RANDOM_BYTES, &skip)) /* legacy_version, random */
		return CLIENTHELLO_MALFORMED;
	if (!take_u8(&m, &n) || n > TLS_SESSION_ID_MAX || !take(&m, n, &skip))
		return CLIENTHELLO_MALFORMED;
	if (!take_u16(&m, &n) || n < 2 || n % 2 != 0 || !take(&m, n, &skip))
		return CLIENTHELLO_MALFORMED; /* cipher_suites */
	if (!take_u8(&m, &n) || n < 1 || !take(&m, n, &skip))
		return CLIENTHELLO_MALFORMED; /* legacy_compression_methods */
	if (m.left == 0)
		return CLIENTHELLO_NO_NAME; /* no extensions at all (before TLS 1.2: allowed) */
	if (!take_u16(&m, &ext_total) || ext_total != m.left || !take_field(&m, ext_total, &exts))
		return CLIENTHELLO_MALFORMED;
	while (exts.left > 0) {
		size_t type, len;
		struct cursor ext;
		if (!take_u16(&exts, &type) || !take_u16(&exts, &len) ||
		    !take_field(&exts, len, &ext))
			return CLIENTHELLO_MALFORMED;
		if (type == TLS_EXT_ECH || type == TLS_EXT_ESNI)
			out->encrypted = true;
		if (type != TLS_EXT_SERVER_NAME)
			continue;
		if (found != CLIENTHELLO_NO_NAME)
			return CLIENTHELLO_MALFORMED; /* a second server_name: which one is read? */
		found = server_name_read(ext, out);
		if (found == CLIENTHELLO_MALFORMED)
			return found;
	}
	return found;
}

enum clienthello_result clienthello_server_name(const uint8_t *in, size_t len, uint8_t *scratch,
						size_t scratch_cap, struct clienthello_name *out)
{
	const uint8_t *start = in;
	size_t joined = 0;  /* handshake bytes gathered in scratch */
	size_t message = 0; /* the whole message's length, header included; 0: unknown yet */

	out->name = NULL;
	out->len = 0;
	out->encrypted = false;
	out->records_len = 0;
	if (len == 0)
		return CLIENTHELLO_NEED_MORE;
	if (in[0] != TLS_RECORD_HANDSHAKE)
		return CLIENTHELLO_NOT_TLS;
	while (message == 0 || joined < message) {
		if (len < TLS_RECORD_HEADER_BYTES) {
			/* A record header so far: its type and version must already hold. */
			if ((len >= 1 && in[0] != TLS_RECORD_HANDSHAKE) || (len >= 2 && in[1] != 3))
				return CLIENTHELLO_MALFORMED;
			return CLIENTHELLO_NEED_MORE;
		}
		size_t payload = (size_t)in[3] << 8 | in[4];
		if (in[0] != TLS_RECORD_HANDSHAKE || in[1] != 3 || payload == 0 ||
		    payload > TLS_RECORD_PAYLOAD_MAX)
			return CLIENTHELLO_MALFORMED; /* no interleaving, no empty records */
		size_t have = len - TLS_RECORD_HEADER_BYTES;
		size_t want = payload < have ? payload : have;
		if (message != 0 && want > message - joined)
			want =
			    message - joined; /* a second message in the record: not ours to read */
		if (joined + want > scratch_cap)
			return CLIENTHELLO_MALFORMED;
		memcpy(scratch + joined, in + TLS_RECORD_HEADER_BYTES, want);
		joined += want;
		if (message == 0 && joined >= TLS_HANDSHAKE_HEADER_BYTES) {
			if (scratch[0] != TLS_HANDSHAKE_CLIENT_HELLO)
				return CLIENTHELLO_MALFORMED;
			size_t body =
			    (size_t)scratch[1] << 16 | (size_t)scratch[2] << 8 | scratch[3];
			if (body > CLIENTHELLO_MESSAGE_BYTES_MAX ||
			    TLS_HANDSHAKE_HEADER_BYTES + body > scratch_cap)
				return CLIENTHELLO_MALFORMED;
			message = TLS_HANDSHAKE_HEADER_BYTES + body;
			if (joined > message)
				joined = message;
		}
		if (message == 0 && joined > 0 && scratch[0] != TLS_HANDSHAKE_CLIENT_HELLO)
			return CLIENTHELLO_MALFORMED;
		if (message != 0 && joined == message) {
			size_t record = TLS_RECORD_HEADER_BYTES + payload;
			out->records_len = (size_t)(in - start) + (record < len ? record : len);
			break; /* whole: what follows in this record or after is not read */
		}
		if (have < payload)
			return CLIENTHELLO_NEED_MORE; /* this record is not whole yet */
		in += TLS_RECORD_HEADER_BYTES + payload;
		len -= TLS_RECORD_HEADER_BYTES + payload;
		if (len == 0)
			return CLIENTHELLO_NEED_MORE;
	}
	struct cursor m = { scratch + TLS_HANDSHAKE_HEADER_BYTES,
			    message - TLS_HANDSHAKE_HEADER_BYTES };
	return client_hello_read(m, out);
}

/* One trailing dot off, as names are compared everywhere in the policy. */
static size_t without_trailing_dot(const char *s, size_t len)
{
	return len > 0 && s[len - 1] == '.' ? len - 1 : len;
}

bool clienthello_names_host(const char *sni, size_t sni_len, const char *host, size_t host_len)
{
	sni_len = without_trailing_dot(sni, sni_len);
	host_len = without_trailing_dot(host, host_len);
	if (sni_len != host_len || sni_len == 0)
		return false;
	for (size_t i = 0; i < sni_len; i++) {
		unsigned char a = (unsigned char)sni[i], b = (unsigned char)host[i];
		if (a >= 'A' && a <= 'Z')
			a = (unsigned char)(a - 'A' + 'a');
		if (b >= 'A' && b <= 'Z')
			b = (unsigned char)(b - 'A' + 'a');
		if (a != b)
			return false;
	}
	return true;
}
