/*
 * Unit tests for core/clienthello.c, the passthrough tier's server-name
 * reader: a real ClientHello (OpenSSL's first flight, with and without a
 * name) read whole, at every prefix (NEED_MORE and nothing else until whole),
 * and re-recorded into fragments of every size; every input ending right
 * before a guard page; and the shapes a lenient reader would let a checker
 * and the server read differently (two server_name extensions, two names,
 * another name type, bytes past a list, a name that is no host name,
 * records of another type between the fragments) all MALFORMED.
 */
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include "core/an.h"
#include "core/clienthello.h"
#include "tests/unit/unit.h"

static struct unit_guard guard;
static uint8_t scratch[CLIENTHELLO_MESSAGE_BYTES_MAX + 4];

/* OpenSSL's first flight for server name <name> (NULL: none), in <out>; its length. */
static size_t openssl_hello(const char *name, uint8_t *out, size_t cap)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	ck_assert_ptr_nonnull(ctx);
	SSL *ssl = SSL_new(ctx);
	BIO *rbio = BIO_new(BIO_s_mem());
	BIO *wbio = BIO_new(BIO_s_mem());
	SSL_set_bio(ssl, rbio, wbio);
	if (name != NULL)
		ck_assert_int_eq(SSL_set_tlsext_host_name(ssl, name), 1);
	ck_assert_int_le(SSL_connect(ssl), 0); /* wants the server's answer */
	int n = BIO_read(wbio, out, (int)cap);
	ck_assert_int_gt(n, 0);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return (size_t)n;
}

static enum clienthello_result read_at_guard(const uint8_t *in, size_t len,
					     struct clienthello_name *out)
{
	const uint8_t *p = (const uint8_t *)unit_guard_place(&guard, in, len);
	return clienthello_server_name(p, len, scratch, sizeof(scratch), out);
}

/* The handshake message of one-record flight <flight>: its payload. */
static const uint8_t *message_of(const uint8_t *flight, size_t *len)
{
	*len = (size_t)flight[3] << 8 | flight[4];
	return flight + 5;
}

/* <msg>/<len> cut into records of <frag> payload bytes each, in <out>; the length. */
static size_t rerecord(const uint8_t *msg, size_t len, size_t frag, uint8_t *out)
{
	size_t n = 0;
	for (size_t off = 0; off < len; off += frag) {
		size_t k = len - off < frag ? len - off : frag;
		out[n++] = 22;
		out[n++] = 3;
		out[n++] = 1;
		out[n++] = (uint8_t)(k >> 8);
		out[n++] = (uint8_t)k;
		memcpy(out + n, msg + off, k);
		n += k;
	}
	return n;
}

/*
 * A minimal ClientHello flight in one record whose extensions block is
 * <exts>/<exts_len> (SIZE_MAX: no extensions block at all), in <out>.
 */
static size_t crafted_hello(const uint8_t *exts, size_t exts_len, uint8_t *out)
{
	uint8_t body[4096];
	size_t b = 0;
	body[b++] = 3;
	body[b++] = 3; /* legacy_version */
	memset(body + b, 0x5a, 32);
	b += 32;
	body[b++] = 0; /* session id */
	body[b++] = 0;
	body[b++] = 2;
	body[b++] = 0x13;
	body[b++] = 0x01; /* one cipher suite */
	body[b++] = 1;
	body[b++] = 0; /* null compression */
	if (exts_len != SIZE_MAX) {
		body[b++] = (uint8_t)(exts_len >> 8);
		body[b++] = (uint8_t)exts_len;
		if (exts_len > 0)
			memcpy(body + b, exts, exts_len);
		b += exts_len;
	}
	uint8_t msg[4096];
	msg[0] = 1;
	msg[1] = 0;
	msg[2] = (uint8_t)(b >> 8);
	msg[3] = (uint8_t)b;
	memcpy(msg + 4, body, b);
	return rerecord(msg, b + 4, 16384, out);
}

/* A server_name extension naming <name> (type 0, one entry), in <out>; its length. */
static size_t sni_ext(const char *name, uint8_t *out)
{
	size_t n = strlen(name);
	out[0] = 0;
	out[1] = 0;
	out[2] = (uint8_t)((n + 5) >> 8);
	out[3] = (uint8_t)(n + 5);
	out[4] = (uint8_t)((n + 3) >> 8);
	out[5] = (uint8_t)(n + 3);
	out[6] = 0;
	out[7] = (uint8_t)(n >> 8);
	out[8] = (uint8_t)n;
	memcpy(out + 9, name, n);
	return n + 9;
}

START_TEST(test_openssl_hello_named)
{
	uint8_t flight[8192];
	struct clienthello_name out;
	size_t len = openssl_hello("api.example.com", flight, sizeof(flight));

	ck_assert_int_eq(read_at_guard(flight, len, &out), CLIENTHELLO_NAME);
	ck_assert_uint_eq(out.len, strlen("api.example.com"));
	ck_assert_int_eq(memcmp(out.name, "api.example.com", out.len), 0);
	/* Every strict prefix waits for more, and says nothing else. */
	for (size_t k = 0; k < len; k++)
		ck_assert_int_eq(read_at_guard(flight, k, &out), CLIENTHELLO_NEED_MORE);
	/* Bytes after the flight (early data) are not read. */
	memcpy(flight + len, "\x17\x03\x03\x00\x01x", 6);
	ck_assert_int_eq(read_at_guard(flight, len + 6, &out), CLIENTHELLO_NAME);
}
END_TEST

START_TEST(test_openssl_hello_fragmented)
{
	uint8_t flight[8192], split[65536];
	struct clienthello_name out;
	size_t len = openssl_hello("fragments.example", flight, sizeof(flight));
	size_t msg_len;
	const uint8_t *msg = message_of(flight, &msg_len);

	for (size_t frag = 1; frag <= msg_len; frag += frag < 8 ? 1 : 37) {
		size_t n = rerecord(msg, msg_len, frag, split);
		ck_assert_int_eq(read_at_guard(split, n, &out), CLIENTHELLO_NAME);
		ck_assert_int_eq(memcmp(out.name, "fragments.example", out.len), 0);
		for (size_t k = 0; k < n; k += 7)
			ck_assert_int_eq(read_at_guard(split, k, &out), CLIENTHELLO_NEED_MORE);
	}
	(void)len;
}
END_TEST

START_TEST(test_openssl_hello_unnamed)
{
	uint8_t flight[8192];
	struct clienthello_name out;
	size_t len = openssl_hello(NULL, flight, sizeof(flight));

	ck_assert_int_eq(read_at_guard(flight, len, &out), CLIENTHELLO_NO_NAME);
}
END_TEST

START_TEST(test_not_tls)
{
	struct clienthello_name out;

	ck_assert_int_eq(read_at_guard((const uint8_t *)"GET / HTTP/1.1\r\n", 16, &out),
			 CLIENTHELLO_NOT_TLS);
	ck_assert_int_eq(read_at_guard((const uint8_t *)"SSH-2.0-x\r\n", 11, &out),
			 CLIENTHELLO_NOT_TLS);
	ck_assert_int_eq(read_at_guard((const uint8_t *)"\x80\x2e\x01", 3, &out),
			 CLIENTHELLO_NOT_TLS); /* an SSLv2-style hello: no name to check */
	ck_assert_int_eq(read_at_guard((const uint8_t *)"", 0, &out), CLIENTHELLO_NEED_MORE);
}
END_TEST

START_TEST(test_crafted_shapes)
{
	uint8_t exts[1024], flight[8192];
	struct clienthello_name out;
	size_t n;

	/* The crafted hello with one good name reads: the shapes below differ in one thing. */
	n = sni_ext("good.example", exts);
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
			 CLIENTHELLO_NAME);
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(NULL, SIZE_MAX, flight), &out),
			 CLIENTHELLO_NO_NAME);
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(NULL, 0, flight), &out),
			 CLIENTHELLO_NO_NAME);

	/* An Encrypted Client Hello (or the ESNI draft's extension), beside a name or none:
	 * read, and said, since its inner name is what a server that decrypts it serves. */
	static const uint16_t encrypted[] = { 0xfe0d, 0xffce };
	for (size_t i = 0; i < AN_ARRAY_LEN(encrypted); i++) {
		n = sni_ext("good.example", exts);
		uint8_t ech[] = {
			(uint8_t)(encrypted[i] >> 8), (uint8_t)encrypted[i], 0, 2, 0xaa, 0xbb
		};
		memcpy(exts + n, ech, sizeof(ech));
		ck_assert_int_eq(
		    read_at_guard(flight, crafted_hello(exts, n + sizeof(ech), flight), &out),
		    CLIENTHELLO_NAME);
		ck_assert(out.encrypted);
		ck_assert_int_eq(
		    read_at_guard(flight, crafted_hello(ech, sizeof(ech), flight), &out),
		    CLIENTHELLO_NO_NAME);
		ck_assert(out.encrypted);
	}
	n = sni_ext("good.example", exts);
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
			 CLIENTHELLO_NAME);
	ck_assert(!out.encrypted);

	/* Two server_name extensions: a server may read the second. */
	n = sni_ext("good.example", exts);
	n += sni_ext("evil.example", exts + n);
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
			 CLIENTHELLO_MALFORMED);

	/* Two names in one list. */
	n = sni_ext("good.example", exts);
	memcpy(exts + n, "\x00\x00\x04evil", 7);
	exts[3] = (uint8_t)(exts[3] + 7);
	exts[5] = (uint8_t)(exts[5] + 7);
	n += 7;
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
			 CLIENTHELLO_MALFORMED);

	/* Another name type, and a list with a byte past its one name. */
	n = sni_ext("good.example", exts);
	exts[6] = 1;
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
			 CLIENTHELLO_MALFORMED);
	n = sni_ext("good.example", exts);
	exts[n++] = 0;
	exts[3]++;
	exts[5]++;
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
			 CLIENTHELLO_MALFORMED);

	/* Names that are no host name: a NUL, a slash, an empty label, a space, nothing. */
	const char *bad[] = { "good.example\0.evil", "a/b.example",
			      "a..example",          ".example",
			      "a b.example",         "" };
	size_t bad_len[] = { 18, 11, 10, 8, 11, 0 };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = sni_ext("xxxxxxxxxxxxxxxxxx", exts);
		memcpy(exts + 9, bad[i], bad_len[i]);
		n = 9 + bad_len[i];
		exts[2] = 0;
		exts[3] = (uint8_t)(bad_len[i] + 5);
		exts[4] = 0;
		exts[5] = (uint8_t)(bad_len[i] + 3);
		exts[7] = 0;
		exts[8] = (uint8_t)bad_len[i];
		ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
				 CLIENTHELLO_MALFORMED);
	}

	/* An extension whose length runs past the block. */
	n = sni_ext("good.example", exts);
	exts[3] = (uint8_t)(exts[3] + 1);
	ck_assert_int_eq(read_at_guard(flight, crafted_hello(exts, n, flight), &out),
			 CLIENTHELLO_MALFORMED);
}
END_TEST

START_TEST(test_records_and_messages)
{
	uint8_t exts[512], flight[8192], bad[8192];
	struct clienthello_name out;
	size_t n = sni_ext("good.example", exts);
	size_t len = crafted_hello(exts, n, flight);

	/* Another record type, an SSL 2 version, an empty record, a record too long. */
	memcpy(bad, flight, len);
	bad[0] = 23;
	ck_assert_int_eq(read_at_guard(bad, len, &out), CLIENTHELLO_NOT_TLS);
	memcpy(bad, flight, len);
	bad[1] = 2;
	ck_assert_int_eq(read_at_guard(bad, len, &out), CLIENTHELLO_MALFORMED);
	ck_assert_int_eq(read_at_guard((const uint8_t *)"\x16\x03\x01\x00\x00", 5, &out),
			 CLIENTHELLO_MALFORMED);
	ck_assert_int_eq(read_at_guard((const uint8_t *)"\x16\x03\x01\x40\x01", 5, &out),
			 CLIENTHELLO_MALFORMED);
	/* Another handshake message than ClientHello, known from its first byte. */
	ck_assert_int_eq(read_at_guard((const uint8_t *)"\x16\x03\x01\x00\x04\x02", 6, &out),
			 CLIENTHELLO_MALFORMED);
	/* A message longer than the reader's bound. */
	ck_assert_int_eq(
	    read_at_guard((const uint8_t *)"\x16\x03\x01\x00\x04\x01\x00\x40\x01", 9, &out),
	    CLIENTHELLO_MALFORMED);
	/* An alert record between two fragments of the hello. */
	size_t msg_len;
	const uint8_t *msg = message_of(flight, &msg_len);
	size_t a = rerecord(msg, 10, 10, bad);
	memcpy(bad + a, "\x15\x03\x03\x00\x02\x01\x00", 7);
	a += 7;
	a += rerecord(msg + 10, msg_len - 10, 16384, bad + a);
	ck_assert_int_eq(read_at_guard(bad, a, &out), CLIENTHELLO_MALFORMED);
	/* A session id over 32 bytes. */
	memcpy(bad, flight, len);
	bad[5 + 4 + 34] = 33;
	ck_assert_int_eq(read_at_guard(bad, len, &out), CLIENTHELLO_MALFORMED);
	/* The scratch too small for the message: refused, never written past. */
	ck_assert_int_eq(clienthello_server_name(flight, len, scratch, 8, &out),
			 CLIENTHELLO_MALFORMED);
}
END_TEST

/* A first flight of a record header alone waits, whatever the scratch held before
 * (a worker's scratch keeps the last hello's bytes: they must never decide). */
START_TEST(test_header_alone_ignores_stale_scratch)
{
	uint8_t flight[8192];
	struct clienthello_name out;
	size_t len = openssl_hello("stale.example", flight, sizeof(flight));

	for (int fill = 0; fill < 256; fill += 85) {
		memset(scratch, fill, sizeof(scratch));
		ck_assert_int_eq(read_at_guard(flight, 5, &out), CLIENTHELLO_NEED_MORE);
	}
	memset(scratch, 0x01, sizeof(scratch));
	ck_assert_int_eq(read_at_guard((const uint8_t *)"\x16\x03\x01\x00\x04", 5, &out),
			 CLIENTHELLO_NEED_MORE);
	memset(scratch, 0x02, sizeof(scratch));
	ck_assert_int_eq(read_at_guard(flight, len, &out), CLIENTHELLO_NAME);
}
END_TEST

START_TEST(test_names_host)
{
	ck_assert(clienthello_names_host("api.example.com", 15, "api.example.com", 15));
	ck_assert(clienthello_names_host("API.Example.COM", 15, "api.example.com", 15));
	ck_assert(clienthello_names_host("api.example.com.", 16, "api.example.com", 15));
	ck_assert(clienthello_names_host("api.example.com", 15, "API.example.com.", 16));
	ck_assert(!clienthello_names_host("api.example.co", 14, "api.example.com", 15));
	ck_assert(!clienthello_names_host("evil.example.com", 16, "api.example.com", 15));
	ck_assert(!clienthello_names_host("x.api.example.com", 17, "api.example.com", 15));
	ck_assert(!clienthello_names_host(".", 1, ".", 1));
	ck_assert(!clienthello_names_host("", 0, "", 0));
}
END_TEST

static Suite *clienthello_suite(void)
{
	Suite *s = suite_create("clienthello");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_openssl_hello_named);
	tcase_add_test(tc, test_openssl_hello_fragmented);
	tcase_add_test(tc, test_openssl_hello_unnamed);
	tcase_add_test(tc, test_not_tls);
	tcase_add_test(tc, test_crafted_shapes);
	tcase_add_test(tc, test_records_and_messages);
	tcase_add_test(tc, test_header_alone_ignores_stale_scratch);
	tcase_add_test(tc, test_names_host);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run(clienthello_suite());
}
