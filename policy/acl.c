/*
 * Host lookup: a compiled hash-trie over reversed labels per profile, and a
 * separate table for IP literals.
 *
 * The trie. A node is a path of reversed labels ("com" -> "example" -> "api"
 * is api.example.com), found by hashing the path's name with XXH3 (seeded
 * with the node's kind), not by walking from the root: every node a name can
 * hit is known from the name alone. For "a.b.example.com" those are the
 * exact node a.b.example.com and the wildcard nodes b.example.com and
 * example.com ("*.b.example.com", "*.example.com"; a wildcard never matches
 * its apex and never sits on one label, which the loader refuses). The lookup
 * hashes them all and prefetches all their slots at once, so their cache and
 * TLB misses overlap instead of queuing, then takes the most specific match:
 * exact, then the longest wildcard.
 *
 * Layout, for a million rules in a few cache misses. Slots are 8 bytes (the
 * hash's high half as a tag, and a node offset), open addressing at load
 * 1/2, linear probing: 16 MB at 1M rules. A node carries its full key (the
 * full-string check on every hit), its kind and, copied from the rule,
 * everything a verdict needs (tier, id, instruction, upstream, ports, rule
 * index, limits), so a hit reads one slot and one node and never the rule.
 * Nodes sit in one arena in build order. Tables of 2 MiB or more are mapped
 * with MADV_HUGEPAGE: with 4 KiB pages every random probe would also be a
 * TLB miss.
 *
 * Immutable once built: lookups take no lock and never allocate.
 * Rejected: a pointer trie walked label by label (one dependent miss per
 * label); the earlier three strtabs (a rule read on every hit, 24-byte slots).
 *
 * Normalisation is the security boundary: the host arrives as the client
 * spelled it, and every spelling of one host must reach the same rule. Hence
 * canonical inet_ntop text for IP literals, ASCII lower case, one trailing
 * dot dropped, and refusal of anything a resolver might read differently from
 * us (zones, empty labels, bytes outside the LDH set plus underscore, numeric
 * last labels that are no IPv4 address). A host whose last label is a number
 * is read as the WHATWG URL parser reads it, as browsers and curl do
 * ("2130706433", "0x7f.1" and "127.1" are 127.0.0.1), an IPv4-mapped IPv6
 * literal as its IPv4 address, and a name beyond ASCII as its IDNA2008
 * A-label (libidn2): each then meets the rules its canonical form meets.
 */
#include "policy/acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <idn2.h>
#include <stdlib.h>
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

int acl_normalise(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
		  const char **why)
{
	const char *unused;

	AN_ASSERT(cap >= ACL_HOST_NORM_BYTES);
	AN_ASSERT(kind != NULL);
	if (why == NULL)
		why = &unused;
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

/* A node of the host trie: what a hit needs, then its key. */
struct acl_node {
	const char *id;
	const char *instruction;
	const char *upstream;
	const uint16_t *ports;
	uint32_t rule;       /* index into acl.rules */
	uint32_t rule_index; /* the rule's index over the snapshot (verdict.rule_index) */
	struct verdict_limits limits;
	uint16_t port_count;
	uint8_t tier;
	uint8_t kind; /* ACL_KIND_NAME or ACL_KIND_WILDCARD */
	uint8_t key_len;
	char key[]; /* key_len bytes, no NUL */
};

static_assert(ACL_NAME_BYTES_MAX <= UINT8_MAX, "a key length fits a byte");

/* Tables this large get huge pages: each would span over 512 small ones. */
#define ACL_HUGE_BYTES (2u << 20)
/* Nodes one name can hit: itself, and a wildcard per label below the top two. */
#define ACL_CANDIDATES_MAX (ACL_NAME_BYTES_MAX / 2 + 2)

static size_t node_bytes(size_t key_len)
{
	return (sizeof(struct acl_node) + key_len + 7u) & ~(size_t)7u;
}

static const struct acl_node *node_at(const struct acl_trie *t, uint32_t ref)
{
	AN_DASSERT(ref > 0);
	return (const struct acl_node *)(const void *)(t->arena + (size_t)(ref - 1) * 8u);
}

static uint64_t node_hash(const char *key, size_t len, enum acl_kind kind)
{
	return XXH3_64bits_withSeed(key, len, (XXH64_hash_t)kind);
}

/* Zeroed memory of <bytes>; huge pages asked for when that large. NULL when out of memory. */
static void *table_alloc(size_t bytes)
{
	if (bytes < ACL_HUGE_BYTES)
		return pool_calloc(1, bytes);
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE); /* advice: small pages still work */
	return p;
}

static void table_free(void *p, size_t bytes)
{
	if (p == NULL)
		return;
	if (bytes < ACL_HUGE_BYTES)
		pool_free(p);
	else
		munmap(p, bytes);
}

/* The node of <kind> for <key>/<len> whose hash is <h>, or NULL. */
static const struct acl_node *trie_find(const struct acl_trie *t, uint64_t h, enum acl_kind kind,
					const char *key, size_t len)
{
	uint32_t tag = (uint32_t)(h >> 32);

	AN_DASSERT(t->slots != NULL);
	for (uint32_t i = (uint32_t)h & t->mask;; i = (i + 1) & t->mask) {
		struct acl_slot s = t->slots[i];
		if (s.node == 0)
			return NULL;
		if (s.tag != tag)
			continue;
		const struct acl_node *n = node_at(t, s.node);
		if (n->kind == kind && n->key_len == len && memcmp(n->key, key, len) == 0)
			return n;
	}
}

static void trie_free(struct acl_trie *t)
{
	table_free(t->slots, t->slots_bytes);
	table_free(t->arena, t->arena_bytes);
	memset(t, 0, sizeof(*t));
}

/* Builds <t> from the name and wildcard rules of <rules>. 0, -EEXIST (*<dup>: the first), -ENOMEM, -E2BIG. */
static int trie_build(struct acl_trie *t, const struct acl_rule *rules, uint32_t count,
		      uint32_t *dup_first, uint32_t *dup_second)
{
	size_t nodes = 0, arena = 0;

	memset(t, 0, sizeof(*t));
	for (uint32_t i = 0; i < count; i++) {
		if (rules[i].kind == ACL_KIND_IP)
			continue;
		AN_ASSERT(rules[i].host_len <= ACL_NAME_BYTES_MAX);
		nodes++;
		arena += node_bytes(rules[i].host_len);
	}
	if (nodes == 0)
		return 0;
	if (nodes > STRTAB_ENTRIES_MAX || arena / 8u >= UINT32_MAX)
		return -E2BIG;
	uint32_t slots = 8;
	while (slots / 2 < nodes)
		slots *= 2;
	t->slots_bytes = (size_t)slots * sizeof(struct acl_slot);
	t->arena_bytes = arena;
	t->slots = table_alloc(t->slots_bytes);
	t->arena = table_alloc(t->arena_bytes);
	if (t->slots == NULL || t->arena == NULL) {
		trie_free(t);
		return -ENOMEM;
	}
	t->mask = slots - 1;
	size_t off = 0;
	for (uint32_t i = 0; i < count; i++) {
		const struct acl_rule *r = &rules[i];
		if (r->kind == ACL_KIND_IP)
			continue;
		enum acl_kind kind = (enum acl_kind)r->kind;
		uint64_t h = node_hash(r->host, r->host_len, kind);
		const struct acl_node *dup = trie_find(t, h, kind, r->host, r->host_len);
		if (dup != NULL) {
			*dup_first = dup->rule;
			*dup_second = i;
			trie_free(t);
			return -EEXIST;
		}
		struct acl_node *n = (struct acl_node *)(void *)(t->arena + off);
		*n = (struct acl_node){ .id = r->id,
					.instruction = r->instruction,
					.upstream = r->upstream,
					.ports = r->ports,
					.rule = i,
					.rule_index = r->index,
					.limits = r->limits,
					.port_count = r->port_count,
					.tier = r->tier,
					.kind = r->kind,
					.key_len = (uint8_t)r->host_len };
		memcpy(n->key, r->host, r->host_len);
		uint32_t slot = (uint32_t)h & t->mask;
		while (t->slots[slot].node != 0)
			slot = (slot + 1) & t->mask;
		t->slots[slot] = (struct acl_slot){ .tag = (uint32_t)(h >> 32),
						    .node = (uint32_t)(off / 8u) + 1u };
		off += node_bytes(r->host_len);
		if (kind == ACL_KIND_NAME)
			t->names++;
		else
			t->wildcards++;
	}
	AN_ASSERT(off == arena);
	AN_ASSERT(t->names + t->wildcards == nodes);
	return 0;
}

/*
 * The most specific node for the normalised name <host>/<len>: the exact
 * node, else the wildcard of the longest proper suffix of two or more labels.
 */
static const struct acl_node *trie_lookup(const struct acl_trie *t, const char *host, size_t len)
{
	uint64_t hashes[ACL_CANDIDATES_MAX];
	uint8_t starts[ACL_CANDIDATES_MAX];
	uint32_t n = 0;

	AN_ASSERT(len <= ACL_NAME_BYTES_MAX);
	if (t->slots == NULL)
		return NULL;
	uint64_t exact = node_hash(host, len, ACL_KIND_NAME);
	if (t->names > 0)
		__builtin_prefetch(&t->slots[(uint32_t)exact & t->mask]);
	/* Proper suffixes of at least two labels, longest first: hashed and prefetched together. */
	for (const char *dot = t->wildcards > 0 ? memchr(host, '.', len) : NULL; dot != NULL;) {
		const char *suffix = dot + 1;
		size_t suffix_len = len - (size_t)(suffix - host);
		dot = memchr(suffix, '.', suffix_len);
		if (dot == NULL)
			break;
		AN_ASSERT(n < ACL_CANDIDATES_MAX);
		hashes[n] = node_hash(suffix, suffix_len, ACL_KIND_WILDCARD);
		starts[n++] = (uint8_t)(suffix - host);
		__builtin_prefetch(&t->slots[(uint32_t)hashes[n - 1] & t->mask]);
	}
	if (t->names > 0) {
		const struct acl_node *hit = trie_find(t, exact, ACL_KIND_NAME, host, len);
		if (hit != NULL)
			return hit;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct acl_node *hit =
		    trie_find(t, hashes[i], ACL_KIND_WILDCARD, host + starts[i], len - starts[i]);
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
	const struct acl_node *n = trie_lookup(&a->hosts, host, len);
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
	int n = acl_normalise(host, len, norm, sizeof(norm), &kind, NULL);
	if (n < 0)
		return;
	if (kind == ACL_KIND_IP && (size_t)n < sizeof(out->ip))
		memcpy(out->ip, norm, (size_t)n + 1);
	if (kind == ACL_KIND_NAME) {
		/* The node holds all a verdict needs: the rule itself is not read. */
		const struct acl_node *hit = trie_lookup(&a->hosts, norm, (size_t)n);
		if (hit != NULL)
			verdict_fill(out, hit->id, hit->instruction, hit->upstream, hit->ports,
				     hit->port_count, hit->tier, port, hit->rule_index,
				     &hit->limits);
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
