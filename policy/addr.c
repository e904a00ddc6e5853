/*
 * Address classification and the allow_private check.
 *
 * Two ordered tables of (prefix, length, class), one per family, scanned first
 * match wins: the more specific ranges that sit inside a broader one (the
 * metadata addresses inside link-local and ULA space, loopback and :: inside
 * the IPv4-compatible ::/96) come first. Anything in IPv6 that no row names and
 * that lies outside global unicast 2000::/3 is RESERVED: IANA has not assigned
 * it, so nothing legitimate lives there. A linear scan of about 20 rows costs
 * nanoseconds and runs once per upstream connect; a trie would buy nothing.
 *
 * IPv4-mapped, IPv4-compatible, NAT64 and 6to4/Teredo forms are classes of
 * their own rather than being unwrapped to the embedded IPv4 address: a
 * sandbox has no business reaching any of them, so they stay refused unless
 * allow_private names them explicitly in IPv6 form.
 *
 * Multicast and unspecified addresses are never permitted, even inside an
 * allow_private network: no TCP upstream can live there, and 0.0.0.0 or ::
 * reach the host itself on Linux.
 */
#include "policy/addr.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "core/an.h"

struct range4 {
	uint32_t net; /* host order */
	uint8_t len;
	uint8_t cls;
};

struct range6 {
	uint8_t prefix[16];
	uint8_t len;
	uint8_t cls;
};

#define V4(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (d))

static const struct range4 ranges4[] = {
	{ V4(0, 0, 0, 0), 8, ADDR_UNSPECIFIED },
	{ V4(127, 0, 0, 0), 8, ADDR_LOOPBACK },
	{ V4(169, 254, 169, 254), 32, ADDR_METADATA },
	{ V4(169, 254, 0, 0), 16, ADDR_LINK_LOCAL },
	{ V4(10, 0, 0, 0), 8, ADDR_PRIVATE },
	{ V4(172, 16, 0, 0), 12, ADDR_PRIVATE },
	{ V4(192, 168, 0, 0), 16, ADDR_PRIVATE },
	{ V4(100, 64, 0, 0), 10, ADDR_PRIVATE },
	{ V4(224, 0, 0, 0), 4, ADDR_MULTICAST },
	{ V4(240, 0, 0, 0), 4, ADDR_RESERVED }, /* includes 255.255.255.255 */
	{ V4(192, 0, 0, 0), 24, ADDR_RESERVED },
	{ V4(192, 0, 2, 0), 24, ADDR_RESERVED },
	{ V4(192, 88, 99, 0), 24, ADDR_TRANSLATION }, /* 6to4 relay anycast (RFC 7526) */
	{ V4(198, 18, 0, 0), 15, ADDR_RESERVED },
	{ V4(198, 51, 100, 0), 24, ADDR_RESERVED },
	{ V4(203, 0, 113, 0), 24, ADDR_RESERVED },
};

static const struct range6 ranges6[] = {
	{ { 0 }, 128, ADDR_UNSPECIFIED },
	{ { [15] = 1 }, 128, ADDR_LOOPBACK },
	{ { [10] = 0xff, [11] = 0xff }, 96, ADDR_MAPPED },
	{ { 0 }, 96, ADDR_MAPPED }, /* IPv4-compatible (deprecated, RFC 4291) */
	{ { 0x00, 0x64, 0xff, 0x9b }, 96, ADDR_NAT64 },
	{ { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 }, 48, ADDR_NAT64 },
	{ { 0x01, 0x00 }, 64, ADDR_RESERVED },                         /* discard (RFC 6666) */
	{ { 0x20, 0x01, 0x00, 0x00 }, 32, ADDR_TRANSLATION },          /* Teredo */
	{ { 0x20, 0x01, 0x00, 0x02, 0x00, 0x00 }, 48, ADDR_RESERVED }, /* benchmarking */
	{ { 0x20, 0x01, 0x00, 0x10 }, 28, ADDR_RESERVED },             /* ORCHID (deprecated) */
	{ { 0x20, 0x01, 0x0d, 0xb8 }, 32, ADDR_RESERVED },             /* documentation */
	{ { 0x20, 0x02 }, 16, ADDR_TRANSLATION },                      /* 6to4 */
	{ { 0x3f, 0xff }, 20, ADDR_RESERVED }, /* documentation (RFC 9637) */
	{ { 0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54 }, 128, ADDR_METADATA },
	{ { 0xfc }, 7, ADDR_ULA },
	{ { 0xfe, 0x80 }, 10, ADDR_LINK_LOCAL },
	{ { 0xfe, 0xc0 }, 10, ADDR_RESERVED }, /* site-local (deprecated, RFC 3879) */
	{ { 0xff }, 8, ADDR_MULTICAST },
};

static const char *const class_names[] = {
	[ADDR_PUBLIC] = "public",           [ADDR_LOOPBACK] = "loopback",
	[ADDR_PRIVATE] = "private",         [ADDR_LINK_LOCAL] = "link_local",
	[ADDR_METADATA] = "metadata",       [ADDR_ULA] = "ula",
	[ADDR_MAPPED] = "mapped",           [ADDR_NAT64] = "nat64",
	[ADDR_TRANSLATION] = "translation", [ADDR_UNSPECIFIED] = "unspecified",
	[ADDR_MULTICAST] = "multicast",     [ADDR_RESERVED] = "reserved",
};
static_assert(AN_ARRAY_LEN(class_names) == ADDR__COUNT, "every address class needs a name");

/* True when the first <len> bits of <a> and <prefix> are equal. */
static bool prefix_match(const uint8_t *a, const uint8_t *prefix, unsigned len)
{
	unsigned full = len / 8;
	unsigned rest = len % 8;

	AN_DASSERT(len <= 128);
	if (memcmp(a, prefix, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xffu << (8 - rest));
	return (a[full] & mask) == (prefix[full] & mask);
}

/* Copies the address bytes of <sa> to <out>; returns the family, or 0 for a non-IP one. */
static int sa_bytes(const struct sockaddr *sa, uint8_t out[16])
{
	const char *base = (const char *)sa;

	memset(out, 0, 16);
	if (sa->sa_family == AF_INET) {
		memcpy(out, base + offsetof(struct sockaddr_in, sin_addr), 4);
		return AF_INET;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(out, base + offsetof(struct sockaddr_in6, sin6_addr), 16);
		return AF_INET6;
	}
	return 0;
}

static enum addr_class classify4(const uint8_t *b)
{
	uint32_t a = V4(b[0], b[1], b[2], b[3]);

	for (size_t i = 0; i < AN_ARRAY_LEN(ranges4); i++) {
		uint32_t mask = ranges4[i].len == 0 ? 0 : ~0u << (32 - ranges4[i].len);

		AN_DASSERT((ranges4[i].net & ~mask) == 0);
		if ((a & mask) == ranges4[i].net)
			return (enum addr_class)ranges4[i].cls;
	}
	return ADDR_PUBLIC;
}

static enum addr_class classify6(const uint8_t *b)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(ranges6); i++) {
		if (prefix_match(b, ranges6[i].prefix, ranges6[i].len))
			return (enum addr_class)ranges6[i].cls;
	}
	/* Outside 2000::/3 nothing is assigned for global unicast. */
	if ((b[0] & 0xe0) != 0x20)
		return ADDR_RESERVED;
	return ADDR_PUBLIC;
}

enum addr_class addr_classify(const struct sockaddr *sa)
{
	uint8_t b[16];

	AN_ASSERT(sa != NULL);
	switch (sa_bytes(sa, b)) {
	case AF_INET:
		return classify4(b);
	case AF_INET6:
		return classify6(b);
	default:
		return ADDR_RESERVED;
	}
}

const char *addr_class_name(enum addr_class c)
{
	AN_ASSERT((unsigned)c < ADDR__COUNT);
	AN_ASSERT(class_names[c] != NULL);
	return class_names[c];
}

int addr_parse_ip(const char *text, size_t len, struct sockaddr_storage *out)
{
	char buf[INET6_ADDRSTRLEN];

	AN_ASSERT(out != NULL);
	memset(out, 0, sizeof(*out));
	if (len == 0 || len >= sizeof(buf) || memchr(text, '\0', len) != NULL)
		return -EINVAL;
	memcpy(buf, text, len);
	buf[len] = '\0';
	if (memchr(buf, ':', len) != NULL) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;

		/* inet_pton refuses "%zone" already; say so explicitly anyway. */
		if (memchr(buf, '%', len) != NULL || inet_pton(AF_INET6, buf, &s6->sin6_addr) != 1)
			return -EINVAL;
		s6->sin6_family = AF_INET6;
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;

		if (inet_pton(AF_INET, buf, &s4->sin_addr) != 1)
			return -EINVAL;
		s4->sin_family = AF_INET;
	}
	AN_ASSERT(out->ss_family == AF_INET || out->ss_family == AF_INET6);
	return 0;
}

/* Parses a prefix length: 1-3 decimal digits, no sign, no leading zero. -1 when invalid. */
static int parse_prefix_len(const char *s, size_t len)
{
	int v = 0;

	if (len == 0 || len > 3 || (len > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	AN_ASSERT(v >= 0 && v <= 999);
	return v;
}

/* True when every bit of <b> after the first <len> is zero (of <bits> in all). */
static bool host_bits_zero(const uint8_t *b, unsigned len, unsigned bits)
{
	AN_ASSERT(len <= bits);
	AN_ASSERT(bits == 32 || bits == 128);
	for (unsigned i = len; i < bits; i++) {
		if (b[i / 8] & (0x80u >> (i % 8)))
			return false;
	}
	return true;
}

int addr_cidr_parse(const char *text, size_t len, struct addr_cidr *out, const char **why)
{
	const char *slash = memchr(text, '/', len);
	size_t ip_len = slash != NULL ? (size_t)(slash - text) : len;
	struct sockaddr_storage ss;
	uint8_t b[16];

	AN_ASSERT(out != NULL);
	AN_ASSERT(why != NULL);
	memset(out, 0, sizeof(*out));
	if (memchr(text, '%', ip_len) != NULL) {
		*why = "IPv6 zone identifiers are not allowed";
		return -EINVAL;
	}
	if (addr_parse_ip(text, ip_len, &ss) != 0) {
		*why = "not an IPv4 or IPv6 address";
		return -EINVAL;
	}
	int family = sa_bytes((const struct sockaddr *)&ss, b);
	unsigned bits = family == AF_INET ? 32 : 128;
	int plen = (int)bits;
	if (slash != NULL)
		plen = parse_prefix_len(slash + 1, len - ip_len - 1);
	if (plen < 0 || plen > (int)bits) {
		*why = family == AF_INET ? "prefix length must be 0..32"
					 : "prefix length must be 0..128";
		return -EINVAL;
	}
	if (!host_bits_zero(b, (unsigned)plen, bits)) {
		*why = "address has bits set beyond the prefix length";
		return -EINVAL;
	}
	memcpy(out->bytes, b, sizeof(out->bytes));
	out->family = (uint16_t)family;
	out->prefix_len = (uint8_t)plen;
	return 0;
}

bool addr_cidr_contains(const struct addr_cidr *c, const struct sockaddr *sa)
{
	uint8_t b[16];

	AN_ASSERT(c->family == AF_INET || c->family == AF_INET6);
	AN_ASSERT(c->prefix_len <= (c->family == AF_INET ? 32 : 128));
	if (sa_bytes(sa, b) != c->family)
		return false;
	return prefix_match(b, c->bytes, c->prefix_len);
}

bool addr_cidr_never_permitted(const struct addr_cidr *c)
{
	static const uint8_t v4_multicast[16] = { 224 };
	static const uint8_t v6_multicast[16] = { 0xff };
	static const uint8_t zero[16] = { 0 };

	AN_ASSERT(c->family == AF_INET || c->family == AF_INET6);
	if (c->family == AF_INET) {
		return (c->prefix_len >= 4 && prefix_match(c->bytes, v4_multicast, 4)) ||
		       (c->prefix_len >= 8 && prefix_match(c->bytes, zero, 8));
	}
	AN_ASSERT(c->prefix_len <= 128);
	return (c->prefix_len >= 8 && prefix_match(c->bytes, v6_multicast, 8)) ||
	       (c->prefix_len == 128 && prefix_match(c->bytes, zero, 128));
}

bool addr_permitted(const struct addr_cidr *allow, uint32_t count, const struct sockaddr *sa)
{
	enum addr_class c = addr_classify(sa);

	AN_ASSERT(allow != NULL || count == 0);
	if (c == ADDR_PUBLIC)
		return true;
	if (c == ADDR_MULTICAST || c == ADDR_UNSPECIFIED)
		return false;
	for (uint32_t i = 0; i < count; i++) {
		if (addr_cidr_contains(&allow[i], sa))
			return true;
	}
	return false;
}
