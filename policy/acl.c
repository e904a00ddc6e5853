/*
 * Host lookup: a compiled hash-trie over reversed labels per profile, and a
 * separate table for IP literals.
 *
 * The trie. A node is a path of reversed labels (api.example.com is "com" ->
 * "example" -> "api"), found by the XXH3 of its name (seeded with its kind),
 * not by a walk: every node a name can hit is known from the name. For
 * "a.b.example.com" those are the exact node and the wildcards b.example.com
 * and example.com (never the apex, never one label: the loader refuses
 * those). All their buckets are prefetched at once, so the misses overlap;
 * the most specific match wins: exact, then the longest wildcard. A hit reads
 * one bucket line, then one node line ("Layout" below): ~15-25 ns each from
 * L3, ~120-145 ns from DRAM on the bench VM. Immutable once built: lookups
 * take no lock and never allocate.
 *
 * Rejected: a pointer trie walked label by label (a dependent miss a label);
 * three strtabs (a rule read per hit); 8-byte {tag, node} slots at load 1/2
 * with 88-byte nodes (16 + 84 MB at 1M rules, nodes over 2-3 lines: hit p50
 * 140-380 ns); those slots eight to a bucket at load 0.8 (31% of buckets
 * spill, a miss reads 1.9 lines: misses at 100k rules 9 ns slower in 3 of 3
 * runs); 128-byte nodes inline in the slots (183 MB, probes over two lines:
 * slower); reading every candidate's bucket before any node (only the true
 * match has a tag hit, so nothing overlaps: p99 at 1M worse in 3 of 3 runs).
 *
 * Normalisation is the security boundary: every spelling of one host must
 * reach the same rule. Hence canonical inet_ntop text for IP literals, ASCII
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
#include "policy/acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <idn2.h>
#include <stdlib.h>
/* The hash inlined: a lookup hashes each candidate, and a call costs as much as a short hash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/an.h"
#include "core/pool.h"

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
	AN_ASSERT(cap >= ACL_HOST_NORM_BYTES);
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
	char in[ACL_HOST_NORM_BYTES * 4];
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
	if (len > ACL_NAME_BYTES_MAX + 1) {
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
			if (i - label_start > ACL_LABEL_BYTES_MAX) {
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
	if (len > ACL_NAME_BYTES_MAX) {
		*why = "host longer than 253 bytes";
		return -EINVAL;
	}
	if (label_start == len) {
		*why = "empty label";
		return -EINVAL;
	}
	if (len - label_start > ACL_LABEL_BYTES_MAX) {
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
 * acl_normalise for any input, byte by byte: the reference that decides every
 * refusal, IP literals and IDNs, and whatever normalise_fast leaves.
 */
static int normalise_full(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
			  const char **why)
{
	AN_ASSERT(cap >= ACL_HOST_NORM_BYTES);
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
	char ace[ACL_HOST_NORM_BYTES];
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
/* Dots of a name, a bit a byte: bit i of word i / 64 for byte i. */
#define DOT_WORDS ((ACL_HOST_NORM_BYTES + 63u) / 64u)

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
static bool swar_lower(const char *host, size_t len, char *out, uint64_t dots[DOT_WORDS])
{
	size_t words = (len + 7u) / 8u;

	AN_ASSERT(len > 0);
	AN_ASSERT(words * 8u <= ACL_HOST_NORM_BYTES);
	memset(dots, 0, DOT_WORDS * sizeof(*dots));
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
static bool labels_ok(const uint64_t dots[DOT_WORDS], size_t len)
{
	uint64_t adjacent = 0;

	AN_ASSERT(len > 0 && len <= ACL_NAME_BYTES_MAX);
	if ((dots[0] & 1u) != 0 || ((dots[(len - 1) / 64u] >> ((len - 1) % 64u)) & 1u) != 0)
		return false;
	for (size_t w = 0; w < DOT_WORDS; w++)
		adjacent |=
		    dots[w] & ((dots[w] >> 1) | (w + 1 < DOT_WORDS ? dots[w + 1] << 63 : 0));
	if (adjacent != 0)
		return false;
	if (len <= ACL_LABEL_BYTES_MAX)
		return true; /* no label can be longer than the name */
	size_t start = 0;
	for (size_t w = 0; w < DOT_WORDS; w++) {
		for (uint64_t m = dots[w]; m != 0; m &= m - 1) {
			size_t at = 64u * w + (size_t)__builtin_ctzll(m);
			if (at - start > ACL_LABEL_BYTES_MAX)
				return false;
			start = at + 1;
		}
	}
	AN_ASSERT(start < len);
	return len - start <= ACL_LABEL_BYTES_MAX;
}

/* Where the last label of a name with <dots> starts. */
static size_t last_label(const uint64_t dots[DOT_WORDS])
{
	for (size_t w = DOT_WORDS; w-- > 0;) {
		if (dots[w] != 0)
			return 64u * w + 63u - (size_t)__builtin_clzll(dots[w]) + 1u;
	}
	return 0;
}

/*
 * The common case of acl_normalise, a word at a time: a name of bytes in
 * [A-Za-z0-9-_.] with at most one trailing dot, labels of 1 to 63 bytes and a
 * last label that does not start with a digit (so neither an IPv4 address nor
 * refused as numeric). Writes it lower-cased and NUL-terminated to <out>,
 * its dots to <dots>, and returns its length; -1 for anything else, which
 * normalise_full then decides. It accepts nothing that normalise_full refuses
 * and writes what it writes.
 */
static int normalise_fast(const char *host, size_t len, char *out, uint64_t dots[DOT_WORDS])
{
	AN_DASSERT(host != NULL || len == 0);
	if (len == 0 || len > ACL_NAME_BYTES_MAX + 1)
		return -1;
	if (!swar_lower(host, len, out, dots))
		return -1;
	if (out[len - 1] == '.') {
		len--;
		dots[len / 64u] &= ~(1ull << (len % 64u));
	}
	if (len == 0 || len > ACL_NAME_BYTES_MAX || !labels_ok(dots, len))
		return -1;
	size_t last = last_label(dots);
	if (out[last] >= '0' && out[last] <= '9')
		return -1;
	out[len] = '\0';
	AN_ASSERT(out[0] != '.');
	return (int)len;
}

/* The dots of the normalised name <name>/<len>, a bit a byte. */
static void name_dots(const char *name, size_t len, uint64_t dots[DOT_WORDS])
{
	AN_ASSERT(len <= ACL_NAME_BYTES_MAX);
	memset(dots, 0, DOT_WORDS * sizeof(*dots));
	for (size_t i = 0; i < len; i++)
		dots[i / 64u] |= (uint64_t)(name[i] == '.') << (i % 64u);
}

/* acl_normalise, and for a name its dots (a bit a byte) in <dots>. */
static int normalise_dots(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
			  const char **why, uint64_t dots[DOT_WORDS])
{
	AN_ASSERT(cap >= ACL_HOST_NORM_BYTES);
	AN_ASSERT(kind != NULL && why != NULL);
	int n = normalise_fast(host, len, out, dots);
	if (n >= 0) {
		*kind = ACL_KIND_NAME;
		return n;
	}
	n = normalise_full(host, len, out, cap, kind, why);
	if (n >= 0 && *kind == ACL_KIND_NAME)
		name_dots(out, (size_t)n, dots); /* the rare names the fast path leaves: IDNs */
	return n;
}

int acl_normalise(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
		  const char **why)
{
	uint64_t dots[DOT_WORDS];
	const char *unused;

	return normalise_dots(host, len, out, cap, kind, why != NULL ? why : &unused, dots);
}

/*
 * Layout, for a million rules in two cache lines a hit. Names and wildcards
 * have a table each, of 64-byte buckets: twelve slots of a 16-bit tag and a
 * 24-bit node reference, 6.4 keys a bucket on average, the bucket picked by
 * multiply-shift (any count, no power of two). A full bucket spills into the
 * next and marks it, so a probe goes on only where one did (1.5% of buckets):
 * 9.5 MB at 1M rules. A node starts on a cache line: the rule's id, indexes,
 * up to NODE_PORTS ports and tier, then its key, so keys up to 34 bytes take
 * one line. Rules with an instruction, upstream, limits or more ports are
 * cold: the node says so and the verdict is read from the rule. Tables and
 * nodes (in build order) share one mapping, 2 MiB-aligned with MADV_HUGEPAGE
 * when that large: with 4 KiB pages every probe would also be a TLB miss. A
 * bitmap of wildcard lengths skips suffixes no wildcard could match.
 */

/* Ports a node holds itself; a rule with more is read from the rule. */
#define NODE_PORTS 4u
/* Nodes start on a cache line, and references count in lines. */
#define NODE_ALIGN 64u

/* A node of the host trie: what a hit needs, then its key, from a 64-byte boundary. */
struct acl_node {
	const char *id;
	uint32_t rule;       /* index into acl.rules */
	uint32_t rule_index; /* the rule's index over the snapshot (verdict.rule_index) */
	uint16_t ports[NODE_PORTS];
	uint16_t port_count;
	uint8_t tier;
	uint8_t kind; /* ACL_KIND_NAME or ACL_KIND_WILDCARD */
	uint8_t key_len;
	uint8_t cold; /* instruction, upstream, limits or many ports: the verdict reads the rule */
	char key[];   /* key_len bytes, no NUL */
};

static_assert(ACL_NAME_BYTES_MAX <= UINT8_MAX, "a key length fits a byte");
static_assert(offsetof(struct acl_node, key) + 34u == NODE_ALIGN, "34 key bytes in the first line");

/*
 * A bucket: twelve slots, each a 16-bit tag (bits 32-47 of the key's hash) and
 * a 24-bit node reference (NODE_ALIGN units into the arena, plus one), filled
 * in order; <spill> marks a full bucket that some key passed to go on.
 */
#define BUCKET_SLOTS 12u
/* Keys per bucket on average, in tenths, at most: 6.4 of 12 (1.5% of buckets spill). */
#define BUCKET_LOAD_TENTHS 64u
/* Node references are 24-bit: the arena holds at most 2^24 - 1 lines (1 GiB). */
#define NODE_REFS_MAX ((1u << 24) - 1u)

struct acl_bucket {
	uint16_t tags[BUCKET_SLOTS];
	uint8_t refs[BUCKET_SLOTS][3]; /* little-endian */
	uint8_t used;                  /* slots filled, from the first */
	uint8_t spill;
	uint8_t unused[2];
};

static_assert(sizeof(struct acl_bucket) == 64, "a bucket is one cache line");
static_assert(BUCKET_SLOTS % 4u == 0, "bucket_match reads four tags a word");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "refs and words are read little-endian");

/* Mappings this large get huge pages (and a 2 MiB boundary): each would span over 512 small ones. */
#define ACL_HUGE_BYTES (2u << 20)
/* Nodes one name can hit: itself, and a wildcard per label below the top two. */
#define ACL_CANDIDATES_MAX (ACL_NAME_BYTES_MAX / 2 + 2)

static size_t node_bytes(size_t key_len)
{
	return (offsetof(struct acl_node, key) + key_len + NODE_ALIGN - 1) &
	       ~(size_t)(NODE_ALIGN - 1);
}

static const struct acl_node *node_at(const struct acl_trie *t, uint32_t ref)
{
	AN_DASSERT(ref > 0);
	return (const struct acl_node *)(const void *)(t->arena + (size_t)(ref - 1) * NODE_ALIGN);
}

static uint64_t node_hash(const char *key, size_t len, enum acl_kind kind)
{
	return XXH3_64bits_withSeed(key, len, (XXH64_hash_t)kind);
}

/* The home bucket of hash <h> among <buckets>: its low half, scaled (no power of two needed). */
static uint32_t bucket_of(uint64_t h, uint32_t buckets)
{
	return (uint32_t)(((h & UINT32_MAX) * buckets) >> 32);
}

/* Zeroed memory of <bytes>, on a 2 MiB boundary with huge pages when that large; NULL: no memory. */
static void *map_alloc(size_t bytes)
{
	size_t extra = bytes >= ACL_HUGE_BYTES ? ACL_HUGE_BYTES : 0;

	AN_ASSERT(bytes > 0);
	char *raw =
	    mmap(NULL, bytes + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	if (extra == 0)
		return raw;
	/* Trim to a 2 MiB boundary: every 2 MiB of the table can then be one huge page. */
	uintptr_t at = ((uintptr_t)raw + ACL_HUGE_BYTES - 1) & ~(uintptr_t)(ACL_HUGE_BYTES - 1);
	char *p = (char *)at;
	if (p > raw)
		(void)munmap(raw, (size_t)(p - raw));
	if (p + bytes < raw + bytes + extra)
		(void)munmap(p + bytes, (size_t)(raw + bytes + extra - (p + bytes)));
	(void)madvise(p, bytes, MADV_HUGEPAGE); /* advice: small pages still work */
	AN_ASSERT(((uintptr_t)p & (ACL_HUGE_BYTES - 1)) == 0);
	return p;
}

/* Slots of <b> whose tag is <tag>, as bits; the empty ones never match. */
static uint32_t bucket_match(const struct acl_bucket *b, uint16_t tag)
{
	const uint64_t low15 = 0x7fff7fff7fff7fffull;
	uint64_t pattern = 0x0001000100010001ull * tag;
	uint32_t match = 0;

	/* Four tags a word: the high bit of each lane that equals <tag>, then those four bits packed. */
	for (uint32_t w = 0; w < BUCKET_SLOTS / 4u; w++) {
		uint64_t x;
		memcpy(&x, &b->tags[4u * w], sizeof(x));
		x ^= pattern;
		uint64_t zero = ~(((x & low15) + low15) | x) & ~low15;
		uint64_t packed =
		    ((zero >> 15) * (1u + (1ull << 15) + (1ull << 30) + (1ull << 45))) >> 45;
		match |= (uint32_t)(packed & 0xfu) << (4u * w);
	}
	AN_DASSERT(b->used <= BUCKET_SLOTS);
	AN_DASSERT(match >> BUCKET_SLOTS == 0);
	return match & ((1u << b->used) - 1u);
}

static uint32_t bucket_ref(const struct acl_bucket *b, uint32_t slot)
{
	uint32_t ref;

	/* The fourth byte read is the next slot's, or used: within the bucket. */
	memcpy(&ref, b->refs[slot], sizeof(ref));
	return ref & NODE_REFS_MAX;
}

/* The node for <key>/<len> with hash <h> in the <n> buckets at <tab>, or NULL. */
static const struct acl_node *table_find(const struct acl_trie *t, const struct acl_bucket *tab,
					 uint32_t n, uint64_t h, const char *key, size_t len)
{
	uint16_t tag = (uint16_t)(h >> 32);
	uint32_t b = bucket_of(h, n);

	AN_DASSERT(n > 0);
	AN_DASSERT(len <= ACL_NAME_BYTES_MAX);
	for (uint32_t probes = 0; probes < n; probes++) {
		const struct acl_bucket *bk = &tab[b];
		for (uint32_t m = bucket_match(bk, tag); m != 0; m &= m - 1) {
			const struct acl_node *node =
			    node_at(t, bucket_ref(bk, (uint32_t)__builtin_ctz(m)));
			if (node->key_len == len && memcmp(node->key, key, len) == 0)
				return node;
		}
		if (bk->spill == 0)
			return NULL;
		b = b + 1 == n ? 0 : b + 1;
	}
	return NULL;
}

/* Files node <ref> with hash <h> in the <n> buckets at <tab>: home bucket, else the next with room. */
static void table_insert(struct acl_bucket *tab, uint32_t n, uint64_t h, uint32_t ref)
{
	uint32_t b = bucket_of(h, n);

	AN_ASSERT(ref != 0 && ref <= NODE_REFS_MAX);
	for (uint32_t probes = 0;; probes++) {
		AN_ASSERT(probes < n); /* the load is below one: some bucket has room */
		struct acl_bucket *bk = &tab[b];
		if (bk->used < BUCKET_SLOTS) {
			bk->tags[bk->used] = (uint16_t)(h >> 32);
			bk->refs[bk->used][0] = (uint8_t)ref;
			bk->refs[bk->used][1] = (uint8_t)(ref >> 8);
			bk->refs[bk->used][2] = (uint8_t)(ref >> 16);
			bk->used++;
			return;
		}
		bk->spill = 1;
		b = b + 1 == n ? 0 : b + 1;
	}
}

static void trie_free(struct acl_trie *t)
{
	if (t->buckets != NULL)
		munmap(t->buckets, t->map_bytes);
	memset(t, 0, sizeof(*t));
}

/* Whether an arena of <bytes> is within reach of a node reference. */
static bool arena_fits(size_t bytes)
{
	return bytes / NODE_ALIGN <= NODE_REFS_MAX;
}

static uint32_t buckets_for(uint32_t keys)
{
	return (uint32_t)(((uint64_t)keys * 10u + BUCKET_LOAD_TENTHS - 1) / BUCKET_LOAD_TENTHS);
}

/* Sizes <t> for the name and wildcard rules of <rules> and maps it. 0, -ENOMEM, -E2BIG. */
static int trie_map(struct acl_trie *t, const struct acl_rule *rules, uint32_t count, size_t *arena)
{
	uint64_t names = 0, wildcards = 0;

	*arena = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (rules[i].kind == ACL_KIND_IP)
			continue;
		AN_ASSERT(rules[i].host_len <= ACL_NAME_BYTES_MAX);
		names += rules[i].kind == ACL_KIND_NAME;
		wildcards += rules[i].kind == ACL_KIND_WILDCARD;
		*arena += node_bytes(rules[i].host_len);
	}
	if (names + wildcards == 0)
		return 0;
	if (names + wildcards > STRTAB_ENTRIES_MAX || !arena_fits(*arena))
		return -E2BIG;
	t->name_buckets = buckets_for((uint32_t)names);
	t->wild_buckets = buckets_for((uint32_t)wildcards);
	size_t tables = ((size_t)t->name_buckets + t->wild_buckets) * sizeof(struct acl_bucket);
	size_t round = tables + *arena >= ACL_HUGE_BYTES ? ACL_HUGE_BYTES : 4096u;
	t->map_bytes = (tables + *arena + round - 1) & ~(round - 1);
	t->buckets = map_alloc(t->map_bytes);
	if (t->buckets == NULL) {
		memset(t, 0, sizeof(*t));
		return -ENOMEM;
	}
	t->arena = (const char *)(t->buckets + t->name_buckets + t->wild_buckets);
	AN_ASSERT(((uintptr_t)t->arena & (NODE_ALIGN - 1)) == 0);
	return 0;
}

/* Writes the node of rule <i> at <n>. */
static void node_init(struct acl_node *n, const struct acl_rule *r, uint32_t i)
{
	bool cold = r->instruction != NULL || r->upstream != NULL || r->port_count > NODE_PORTS ||
		    r->limits.requests_per_second != 0 || r->limits.burst != 0 ||
		    r->limits.concurrent != 0;

	AN_ASSERT(r->kind == ACL_KIND_NAME || r->kind == ACL_KIND_WILDCARD);
	*n = (struct acl_node){ .id = r->id,
				.rule = i,
				.rule_index = r->index,
				.port_count = r->port_count,
				.tier = r->tier,
				.kind = r->kind,
				.key_len = (uint8_t)r->host_len,
				.cold = cold };
	if (!cold && r->port_count > 0)
		memcpy(n->ports, r->ports, r->port_count * sizeof(*r->ports));
	memcpy(n->key, r->host, r->host_len);
	AN_ASSERT(n->key_len == r->host_len);
}

/* Builds <t> from the name and wildcard rules of <rules>. 0, -EEXIST (*<dup>: the first), -ENOMEM, -E2BIG. */
static int trie_build(struct acl_trie *t, const struct acl_rule *rules, uint32_t count,
		      uint32_t *dup_first, uint32_t *dup_second)
{
	size_t arena = 0, off = 0;

	memset(t, 0, sizeof(*t));
	int rc = trie_map(t, rules, count, &arena);
	if (rc != 0 || t->buckets == NULL)
		return rc;
	struct acl_bucket *wild = t->buckets + t->name_buckets;
	char *nodes = (char *)(wild + t->wild_buckets);
	for (uint32_t i = 0; i < count; i++) {
		const struct acl_rule *r = &rules[i];
		if (r->kind == ACL_KIND_IP)
			continue;
		bool is_name = r->kind == ACL_KIND_NAME;
		struct acl_bucket *tab = is_name ? t->buckets : wild;
		uint32_t n = is_name ? t->name_buckets : t->wild_buckets;
		uint64_t h = node_hash(r->host, r->host_len, (enum acl_kind)r->kind);
		const struct acl_node *dup = table_find(t, tab, n, h, r->host, r->host_len);
		if (dup != NULL) {
			*dup_first = dup->rule;
			*dup_second = i;
			trie_free(t);
			return -EEXIST;
		}
		node_init((struct acl_node *)(void *)(nodes + off), r, i);
		table_insert(tab, n, h, (uint32_t)(off / NODE_ALIGN) + 1u);
		off += node_bytes(r->host_len);
		if (is_name) {
			t->names++;
		} else {
			t->wildcards++;
			t->wild_lens[r->host_len / 64u] |= 1ull << (r->host_len % 64u);
		}
	}
	AN_ASSERT(off == arena);
	AN_ASSERT(t->names + t->wildcards <= count);
	return 0;
}

/* Whether some wildcard suffix is <len> bytes long: no probe otherwise. */
static bool wild_len_present(const struct acl_trie *t, size_t len)
{
	return (t->wild_lens[len / 64u] >> (len % 64u)) & 1u;
}

/*
 * Hashes the wildcard candidates of <host>/<len> with dots <dots> into
 * <hashes> and <starts>, longest first, and prefetches their buckets: the
 * suffix after each dot but the last (a wildcard covers two labels or more),
 * when some wildcard has its length. Returns how many.
 */
static uint32_t wild_candidates(const struct acl_trie *t, const char *host, size_t len,
				const uint64_t dots[DOT_WORDS], uint64_t *hashes, uint8_t *starts)
{
	const struct acl_bucket *wild = t->buckets + t->name_buckets;
	size_t prev = SIZE_MAX; /* a dot is a candidate's once a later one is seen */
	uint32_t n = 0;

	for (size_t w = 0; w < DOT_WORDS; w++) {
		for (uint64_t m = dots[w]; m != 0; m &= m - 1) {
			size_t at = 64u * w + (size_t)__builtin_ctzll(m);
			size_t start = prev + 1;
			prev = at;
			if (start == 0 || !wild_len_present(t, len - start))
				continue;
			AN_ASSERT(n < ACL_CANDIDATES_MAX);
			hashes[n] = node_hash(host + start, len - start, ACL_KIND_WILDCARD);
			starts[n] = (uint8_t)start;
			__builtin_prefetch(&wild[bucket_of(hashes[n], t->wild_buckets)]);
			n++;
		}
	}
	AN_ASSERT(prev == SIZE_MAX || prev < len);
	return n;
}

/*
 * The most specific node for the normalised name <host>/<len> whose dots are
 * <dots>: the exact node, else the wildcard of the longest proper suffix of
 * two or more labels. Every candidate's bucket is prefetched before the first
 * is read, so their misses overlap.
 */
static const struct acl_node *trie_lookup(const struct acl_trie *t, const char *host, size_t len,
					  const uint64_t dots[DOT_WORDS])
{
	uint64_t hashes[ACL_CANDIDATES_MAX];
	uint8_t starts[ACL_CANDIDATES_MAX];
	uint32_t n = 0;

	AN_ASSERT(len <= ACL_NAME_BYTES_MAX);
	if (t->buckets == NULL)
		return NULL;
	uint64_t exact = node_hash(host, len, ACL_KIND_NAME);
	if (t->names > 0)
		__builtin_prefetch(&t->buckets[bucket_of(exact, t->name_buckets)]);
	if (t->wildcards > 0)
		n = wild_candidates(t, host, len, dots, hashes, starts);
	AN_ASSERT(n <= ACL_CANDIDATES_MAX);
	if (t->names > 0) {
		const struct acl_node *hit =
		    table_find(t, t->buckets, t->name_buckets, exact, host, len);
		if (hit != NULL)
			return hit;
	}
	const struct acl_bucket *wild = t->buckets + t->name_buckets;
	for (uint32_t i = 0; i < n; i++) {
		const struct acl_node *hit = table_find(t, wild, t->wild_buckets, hashes[i],
							host + starts[i], len - starts[i]);
		if (hit != NULL)
			return hit;
	}
	return NULL;
}

int acl_build(struct acl *a, const struct acl_rule *rules, uint32_t count, uint32_t *dup_first,
	      uint32_t *dup_second)
{
	uint32_t ips = 0;

	AN_ASSERT(rules != NULL || count == 0);
	AN_ASSERT(dup_first != NULL && dup_second != NULL);
	memset(a, 0, sizeof(*a));
	for (uint32_t i = 0; i < count; i++)
		ips += rules[i].kind == ACL_KIND_IP;
	int rc = trie_build(&a->hosts, rules, count, dup_first, dup_second);
	if (rc == 0)
		rc = strtab_init(&a->ips, ips);
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		const struct acl_rule *r = &rules[i];

		AN_ASSERT(r->host != NULL && r->host_len > 0);
		if (r->kind != ACL_KIND_IP)
			continue;
		rc = strtab_insert(&a->ips, r->host, r->host_len, i, dup_first);
		if (rc == -EEXIST)
			*dup_second = i;
	}
	if (rc != 0) {
		acl_free(a);
		return rc;
	}
	a->rules = rules;
	a->rule_count = count;
	AN_ASSERT(a->hosts.names + a->hosts.wildcards + a->ips.count == count);
	return 0;
}

const struct acl_rule *acl_lookup(const struct acl *a, const char *host, size_t len,
				  enum acl_kind kind)
{
	uint32_t index;

	AN_ASSERT(kind == ACL_KIND_NAME || kind == ACL_KIND_IP);
	AN_ASSERT(len < ACL_HOST_NORM_BYTES);
	if (kind == ACL_KIND_IP)
		return strtab_find(&a->ips, host, len, &index) == 0 ? &a->rules[index] : NULL;
	uint64_t dots[DOT_WORDS];
	name_dots(host, len, dots);
	const struct acl_node *n = trie_lookup(&a->hosts, host, len, dots);
	return n != NULL ? &a->rules[n->rule] : NULL;
}

bool acl_port_allowed(const struct acl_rule *r, uint16_t port)
{
	AN_ASSERT(r->ports != NULL || r->port_count == 0);
	if (r->port_count == 0)
		return true;
	for (uint16_t i = 0; i < r->port_count; i++) {
		if (r->ports[i] == port)
			return true;
	}
	return false;
}

/*
 * A verdict from what a hit carries: <tier>, ports, the strings it borrows,
 * and the rule's <rule_index> and <limits>, which only a served verdict gets.
 */
static void verdict_fill(struct verdict *out, const char *id, const char *instruction,
			 const char *upstream, const uint16_t *ports, uint16_t port_count,
			 uint8_t tier, uint16_t port, uint32_t rule_index,
			 const struct verdict_limits *limits)
{
	out->rule = id;
	out->instruction = instruction;
	/* A deny rule refuses on every port: "try another port" would mislead. */
	if (tier == TIER_DENY)
		return;
	const struct acl_rule probe = { .ports = (uint16_t *)(uintptr_t)ports,
					.port_count = port_count };
	if (!acl_port_allowed(&probe, port)) {
		out->reason = REASON_PORT_NOT_ALLOWED;
		return;
	}
	out->tier = (enum tier)tier;
	out->reason = REASON_NONE;
	out->upstream = upstream;
	out->rule_index = rule_index;
	out->rule_limits = *limits;
	AN_ASSERT(out->tier != TIER_LOCAL || out->upstream != NULL);
}

/*
 * The verdict of a hit on node <n>: from the node alone, which holds all a
 * plain rule's verdict needs, or for a cold one from its rule.
 */
static void node_verdict(const struct acl *a, const struct acl_node *n, uint16_t port,
			 struct verdict *out)
{
	static const struct verdict_limits none;

	AN_ASSERT(n->rule < a->rule_count);
	if (!n->cold) {
		verdict_fill(out, n->id, NULL, NULL, n->ports, n->port_count, n->tier, port,
			     n->rule_index, &none);
		return;
	}
	const struct acl_rule *r = &a->rules[n->rule];
	AN_ASSERT(r->id == n->id);
	verdict_fill(out, r->id, r->instruction, r->upstream, r->ports, r->port_count, r->tier,
		     port, r->index, &r->limits);
}

static_assert(sizeof(((struct verdict *)0)->ip) == INET6_ADDRSTRLEN, "any address text fits");

void acl_decide(const struct acl *a, const char *host, size_t len, uint16_t port,
		struct verdict *out)
{
	char norm[ACL_HOST_NORM_BYTES];
	enum acl_kind kind;

	AN_ASSERT(out != NULL);
	AN_ASSERT(host != NULL || len == 0);
	memset(out, 0, sizeof(*out));
	out->tier = TIER_DENY;
	out->reason = REASON_HOST_NOT_ALLOWED;
	out->rule_index = VERDICT_RULE_NONE;
	uint64_t dots[DOT_WORDS];
	const char *why;
	int n = normalise_dots(host, len, norm, sizeof(norm), &kind, &why, dots);
	if (n < 0)
		return;
	if (kind == ACL_KIND_IP && (size_t)n < sizeof(out->ip))
		memcpy(out->ip, norm, (size_t)n + 1);
	if (kind == ACL_KIND_NAME) {
		const struct acl_node *hit = trie_lookup(&a->hosts, norm, (size_t)n, dots);
		if (hit != NULL)
			node_verdict(a, hit, port, out);
		return;
	}
	const struct acl_rule *r = acl_lookup(a, norm, (size_t)n, kind);
	if (r != NULL)
		verdict_fill(out, r->id, r->instruction, r->upstream, r->ports, r->port_count,
			     r->tier, port, r->index, &r->limits);
}

void acl_rule_free(struct acl_rule *r)
{
	AN_FREE(&r->id);
	AN_FREE(&r->host);
	AN_FREE(&r->owner);
	AN_FREE(&r->reason);
	AN_FREE(&r->instruction);
	AN_FREE(&r->upstream);
	AN_FREE(&r->ports);
	memset(r, 0, sizeof(*r));
}

void acl_free(struct acl *a)
{
	trie_free(&a->hosts);
	strtab_free(&a->ips);
	memset(a, 0, sizeof(*a));
}
