/*
 * Host normalisation: every spelling of one host reaches the same rule.
 *
 * This is the security boundary of the host table (policy/acl.c), which
 * compares bytes. Hence canonical inet_ntop text for IP literals, ASCII
 * lower case, one trailing dot dropped, and refusal of anything a resolver
 * might read differently from us (zones, empty labels, bytes outside the LDH
 * set plus underscore, numeric last labels that are no IPv4 address). A host
 * whose last label is a number is read as the WHATWG URL parser (browsers,
 * curl) reads it ("2130706433", "0x7f.1" and "127.1" are 127.0.0.1), an
 * IPv4-mapped IPv6 literal as its IPv4 address, and a name beyond ASCII as
 * its IDNA2008 A-label (libidn2). Plain names, nearly every request, take a
 * word-at-a-time path that accepts only what the byte-wise one accepts, with
 * the same output, and also yields the dots the lookup needs.
 */
#include "policy/hostname.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <idn2.h>

#include "core/an.h"

static bool is_name_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* WHATWG URL "ends in a number": a last label of digits or 0x-hex reads as IPv4. */
static bool label_is_numeric(const char *s, size_t len)
{
	size_t i = 0;

	AN_ASSERT(len > 0);
	if (len >= 2 && s[0] == '0' && s[1] == 'x') {
		for (i = 2; i < len; i++) {
			if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
				return false;
		}
		return true;
	}
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
	}
	AN_ASSERT(i == len);
	return true;
}

static int normalise_ip6(const char *host, size_t len, char *out, size_t cap, const char **why)
{
	AN_ASSERT(cap >= HOST_NORM_BYTES);
	AN_ASSERT(why != NULL);
	if (memchr(host, '%', len) != NULL) {
		*why = "IPv6 zone identifiers are refused";
		return -EINVAL;
	}
	if (len >= INET6_ADDRSTRLEN || memchr(host, '\0', len) != NULL) {
		*why = "invalid IPv6 address";
		return -EINVAL;
	}
	memcpy(out, host, len);
	out[len] = '\0';
	struct in6_addr a6;
	if (inet_pton(AF_INET6, out, &a6) != 1) {
		*why = "invalid IPv6 address";
		return -EINVAL;
	}
	/* ::ffff:a.b.c.d reaches a.b.c.d: it meets the IPv4 rules as that. */
	int family = IN6_IS_ADDR_V4MAPPED(&a6) ? AF_INET : AF_INET6;
	const void *bin = family == AF_INET ? (const void *)&a6.s6_addr[12] : (const void *)&a6;
	if (inet_ntop(family, bin, out, (socklen_t)cap) == NULL) {
		*why = "invalid IPv6 address";
		return -EINVAL;
	}
	return (int)strlen(out);
}

/* One part of a WHATWG IPv4 host: 0x-hex, 0-octal or decimal. 0, or -EINVAL. */
static int ipv4_part(const char *s, size_t len, uint64_t *out)
{
	unsigned base = 10;
	uint64_t v = 0;

	if (len == 0)
		return -EINVAL;
	if (len >= 2 && s[0] == '0' && s[1] == 'x') {
		base = 16;
		s += 2;
		len -= 2;
	} else if (len >= 2 && s[0] == '0') {
		base = 8;
		s++;
		len--;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned d = s[i] >= '0' && s[i] <= '9'   ? (unsigned)(s[i] - '0')
			     : s[i] >= 'a' && s[i] <= 'f' ? (unsigned)(s[i] - 'a' + 10)
							  : 99u;
		if (d >= base)
			return -EINVAL;
		v = v * base + d;
		if (v > UINT32_MAX)
			return -EINVAL; /* beyond any part's range: stop before overflowing */
	}
	*out = v;
	return 0;
}

/*
 * The lower-cased <s>/<len> (no trailing dot) as the WHATWG URL standard's
 * IPv4 parser reads a host whose last label is a number: one to four parts
 * of 0x-hex, 0-octal or decimal, the last filling the remaining bytes
 * ("2130706433", "0x7f.1", "017700000001" and "127.1" are all 127.0.0.1).
 * Browsers and curl connect to such hosts, so they must meet the IP rules.
 * Returns 0 with *<addr> in host order, or -EINVAL.
 */
static int ipv4_whatwg(const char *s, size_t len, uint32_t *addr)
{
	uint64_t parts[4];
	size_t n = 0, start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != '.')
			continue;
		if (n == 4 || ipv4_part(s + start, i - start, &parts[n]) != 0)
			return -EINVAL;
		n++;
		start = i + 1;
	}
	AN_ASSERT(n >= 1 && n <= 4);
	uint64_t v = 0;
	for (size_t i = 0; i + 1 < n; i++) {
		if (parts[i] > 255)
			return -EINVAL;
		v |= parts[i] << (8 * (3 - i));
	}
	if (parts[n - 1] >= (1ull << (8 * (5 - n))))
		return -EINVAL;
	*addr = (uint32_t)(v | parts[n - 1]);
	return 0;
}

/*
 * A host with bytes beyond ASCII, as its IDNA2008 A-label form (libidn2,
 * non-transitional, NFC first) in <ace>/<cap>. Length, or -EINVAL.
 */
static int idna_to_ascii(const char *host, size_t len, char *ace, size_t cap)
{
	char in[HOST_NORM_BYTES * 4];
	char *res = NULL;

	if (len >= sizeof(in) || memchr(host, '\0', len) != NULL)
		return -EINVAL;
	memcpy(in, host, len);
	in[len] = '\0';
	int rc = idn2_to_ascii_8z(in, &res, IDN2_NONTRANSITIONAL | IDN2_NFC_INPUT);
	if (rc != IDN2_OK || res == NULL)
		return -EINVAL;
	size_t n = strlen(res);
	int ret = n < cap ? (int)n : -EINVAL;
	if (ret > 0)
		memcpy(ace, res, n + 1);
	idn2_free(res);
	return ret;
}

/* normalise_full for an ASCII host that is no IPv6 literal: a name or a WHATWG IPv4 address. */
static int normalise_name(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
			  const char **why)
{
	AN_ASSERT(len > 0);
	AN_ASSERT(*kind == ACL_KIND_IP);
	if (len > HOST_NAME_BYTES_MAX + 1) {
		*why = "host longer than 253 bytes";
		return -EINVAL;
	}
	if (host[len - 1] == '.')
		len--;
	/* One pass: lower case, byte and label checks. */
	size_t label_start = 0;
	for (size_t i = 0; i < len; i++) {
		char c = host[i];
		c = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
		out[i] = c;
		if (c == '.') {
			if (i == label_start) {
				*kind = ACL_KIND_NAME;
				*why = "empty label";
				return -EINVAL;
			}
			if (i - label_start > HOST_LABEL_BYTES_MAX) {
				*kind = ACL_KIND_NAME;
				*why = "label longer than 63 bytes";
				return -EINVAL;
			}
			label_start = i + 1;
			continue;
		}
		if (!is_name_byte((unsigned char)c)) {
			*kind = ACL_KIND_NAME;
			*why = "character outside [A-Za-z0-9-_.] (use the xn-- form of IDNs)";
			return -EINVAL;
		}
	}
	out[len] = '\0';
	uint32_t v4;
	if (label_start < len && label_is_numeric(out + label_start, len - label_start) &&
	    ipv4_whatwg(out, len, &v4) == 0) {
		struct in_addr a = { .s_addr = htonl(v4) };
		if (inet_ntop(AF_INET, &a, out, (socklen_t)cap) == NULL)
			return -EINVAL;
		return (int)strlen(out);
	}
	*kind = ACL_KIND_NAME;
	if (len == 0) {
		*why = "empty host";
		return -EINVAL;
	}
	if (len > HOST_NAME_BYTES_MAX) {
		*why = "host longer than 253 bytes";
		return -EINVAL;
	}
	if (label_start == len) {
		*why = "empty label";
		return -EINVAL;
	}
	if (len - label_start > HOST_LABEL_BYTES_MAX) {
		*why = "label longer than 63 bytes";
		return -EINVAL;
	}
	if (label_is_numeric(out + label_start, len - label_start)) {
		*why = "the last label is numeric but the host is not a valid IPv4 address";
		return -EINVAL;
	}
	return (int)len;
}

/*
 * host_normalise for any input, byte by byte: the reference that decides every
 * refusal, IP literals and IDNs, and whatever normalise_fast leaves.
 */
static int normalise_full(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
			  const char **why)
{
	AN_ASSERT(cap >= HOST_NORM_BYTES);
	AN_ASSERT(why != NULL);
	*kind = ACL_KIND_IP;
	if (len == 0) {
		*why = "empty host";
		return -EINVAL;
	}
	if (len >= 2 && host[0] == '[' && host[len - 1] == ']')
		return normalise_ip6(host + 1, len - 2, out, cap, why);
	if (memchr(host, ':', len) != NULL)
		return normalise_ip6(host, len, out, cap, why);
	char ace[HOST_NORM_BYTES];
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)host[i] < 0x80)
			continue;
		/* Rare (clients send the A-label themselves): libidn2 allocates. */
		int n = idna_to_ascii(host, len, ace, sizeof(ace));
		if (n < 0) {
			*kind = ACL_KIND_NAME;
			*why = "not a valid internationalised domain name (IDNA2008)";
			return -EINVAL;
		}
		host = ace;
		len = (size_t)n;
		break;
	}
	return normalise_name(host, len, out, cap, kind, why);
}

/* Eight bytes at a time, each below 0x80 (names are ASCII): one bit of 0x80 a byte. */
#define SWAR_ONES  0x0101010101010101ull
#define SWAR_HIGHS 0x8080808080808080ull

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "byte i of a word is bits 8i..8i+7");

/* The bytes of <w> (each below 0x80) within [<lo>, <hi>], as their high bits. No carry crosses. */
static uint64_t swar_in(uint64_t w, uint8_t lo, uint8_t hi)
{
	return (w + SWAR_ONES * (uint64_t)(0x80u - lo)) &
	       ~(w + SWAR_ONES * (uint64_t)(0x7fu - hi)) & SWAR_HIGHS;
}

/* The high bits of <highs> as eight bits, byte i to bit i (the terms never overlap). */
static uint64_t swar_bits(uint64_t highs)
{
	return ((highs >> 7) * 0x0102040810204080ull) >> 56;
}

/* Word <i> of <host>/<len>, the bytes past <len> read as 'a' (a name byte, no dot). */
static uint64_t host_word(const char *host, size_t len, size_t i)
{
	const uint64_t pad = SWAR_ONES * (uint64_t)'a';
	uint64_t w = 0;

	AN_DASSERT(host != NULL);
	AN_DASSERT(8u * i < len);
	if (8u * i + 8u <= len) {
		memcpy(&w, host + 8u * i, sizeof(w));
		return w;
	}
	size_t have = len - 8u * i; /* 1 to 7 */
	if (len >= 8u) {
		/* The last eight bytes, shifted down: no read past <len>. */
		memcpy(&w, host + len - 8u, sizeof(w));
		w >>= 8u * (8u - have);
	} else {
		memcpy(&w, host, have);
	}
	return w | pad << (8u * have);
}

/*
 * Writes the <len> bytes at <host> lower-cased to <out> a word at a time (up
 * to the next multiple of 8, padded with 'a') and sets the bit of every dot
 * in <dots>. False at the first word with a byte that is no name byte
 * ([a-z0-9-_.] once lower-cased) or not ASCII, which is not written.
 */
static bool swar_lower(const char *host, size_t len, char *out, uint64_t dots[HOST_DOT_WORDS])
{
	size_t words = (len + 7u) / 8u;

	AN_ASSERT(len > 0);
	AN_ASSERT(words * 8u <= HOST_NORM_BYTES);
	memset(dots, 0, HOST_DOT_WORDS * sizeof(*dots));
	for (size_t i = 0; i < words; i++) {
		uint64_t w = host_word(host, len, i);
		/* Bytes of 0x80 and up would break swar_in's no-carry rule. */
		if ((w & SWAR_HIGHS) != 0)
			return false;
		w |= swar_in(w, 'A', 'Z') >> 2; /* 0x80 >> 2 is the 0x20 of lower case */
		uint64_t ok = swar_in(w, 'a', 'z') | swar_in(w, '0', '9') | swar_in(w, '-', '.') |
			      swar_in(w, '_', '_');
		if ((~ok & SWAR_HIGHS) != 0)
			return false;
		memcpy(out + 8u * i, &w, sizeof(w));
		dots[i / 8u] |= swar_bits(swar_in(w, '.', '.')) << (8u * (i % 8u));
	}
	return true;
}

/* Whether the labels between the dots of a <len>-byte name are 1 to 63 bytes long. */
static bool labels_ok(const uint64_t dots[HOST_DOT_WORDS], size_t len)
{
	uint64_t adjacent = 0;

	AN_ASSERT(len > 0 && len <= HOST_NAME_BYTES_MAX);
	if ((dots[0] & 1u) != 0 || ((dots[(len - 1) / 64u] >> ((len - 1) % 64u)) & 1u) != 0)
		return false;
	for (size_t w = 0; w < HOST_DOT_WORDS; w++)
		adjacent |=
		    dots[w] & ((dots[w] >> 1) | (w + 1 < HOST_DOT_WORDS ? dots[w + 1] << 63 : 0));
	if (adjacent != 0)
		return false;
	if (len <= HOST_LABEL_BYTES_MAX)
		return true; /* no label can be longer than the name */
	size_t start = 0;
	for (size_t w = 0; w < HOST_DOT_WORDS; w++) {
		for (uint64_t m = dots[w]; m != 0; m &= m - 1) {
			size_t at = 64u * w + (size_t)__builtin_ctzll(m);
			if (at - start > HOST_LABEL_BYTES_MAX)
				return false;
			start = at + 1;
		}
	}
	AN_ASSERT(start < len);
	return len - start <= HOST_LABEL_BYTES_MAX;
}

/* Where the last label of a name with <dots> starts. */
static size_t last_label(const uint64_t dots[HOST_DOT_WORDS])
{
	for (size_t w = HOST_DOT_WORDS; w-- > 0;) {
		if (dots[w] != 0)
			return 64u * w + 63u - (size_t)__builtin_clzll(dots[w]) + 1u;
	}
	return 0;
}

/*
 * The common case of host_normalise, a word at a time: a name of bytes in
 * [A-Za-z0-9-_.] with at most one trailing dot, labels of 1 to 63 bytes and a
 * last label that does not start with a digit (so neither an IPv4 address nor
 * refused as numeric). Writes it lower-cased and NUL-terminated to <out>,
 * its dots to <dots>, and returns its length; -1 for anything else, which
 * normalise_full then decides. It accepts nothing that normalise_full refuses
 * and writes what it writes.
 */
static int normalise_fast(const char *host, size_t len, char *out, uint64_t dots[HOST_DOT_WORDS])
{
	AN_DASSERT(host != NULL || len == 0);
	if (len == 0 || len > HOST_NAME_BYTES_MAX + 1)
		return -1;
	if (!swar_lower(host, len, out, dots))
		return -1;
	if (out[len - 1] == '.') {
		len--;
		dots[len / 64u] &= ~(1ull << (len % 64u));
	}
	if (len == 0 || len > HOST_NAME_BYTES_MAX || !labels_ok(dots, len))
		return -1;
	size_t last = last_label(dots);
	if (out[last] >= '0' && out[last] <= '9')
		return -1;
	out[len] = '\0';
	AN_ASSERT(out[0] != '.');
	return (int)len;
}

void host_name_dots(const char *name, size_t len, uint64_t dots[HOST_DOT_WORDS])
{
	AN_ASSERT(len <= HOST_NAME_BYTES_MAX);
	memset(dots, 0, HOST_DOT_WORDS * sizeof(*dots));
	for (size_t i = 0; i < len; i++)
		dots[i / 64u] |= (uint64_t)(name[i] == '.') << (i % 64u);
}

int host_normalise_dots(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
			const char **why, uint64_t dots[HOST_DOT_WORDS])
{
	AN_ASSERT(cap >= HOST_NORM_BYTES);
	AN_ASSERT(kind != NULL && why != NULL);
	int n = normalise_fast(host, len, out, dots);
	if (n >= 0) {
		*kind = ACL_KIND_NAME;
		return n;
	}
	n = normalise_full(host, len, out, cap, kind, why);
	if (n >= 0 && *kind == ACL_KIND_NAME)
		host_name_dots(out, (size_t)n,
			       dots); /* the rare names the fast path leaves: IDNs */
	return n;
}

int host_normalise(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
		   const char **why)
{
	uint64_t dots[HOST_DOT_WORDS];
	const char *unused;

	return host_normalise_dots(host, len, out, cap, kind, why != NULL ? why : &unused, dots);
}
