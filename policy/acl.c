/*
 * Host lookup: a compiled hash-trie over reversed labels per profile, and a
 * separate table for IP literals.
 *
 * The trie. A node is a path of reversed labels (api.example.com is "com" ->
 * "example" -> "api"), found by the XXH3 of its name (seeded with its kind),
 * not by a walk: every node a name can hit is known from the name. For
 * "a.b.example.com" those are the exact node and the wildcards b.example.com
 * and example.com (never the apex, never one label: the loader refuses
 * those). The filter rules out most of those that have no node, the slots
 * of the rest are prefetched at once, so their misses overlap, and the most
 * specific match wins: exact, then the longest wildcard. A hit reads one slot
 * line, found from the hash alone ("Layout" below): ~15-25 ns from L3,
 * ~150 ns from DRAM on the bench VM. Immutable once built: lookups take no
 * lock and never allocate.
 *
 * Rejected: a pointer trie walked label by label (a dependent miss a label);
 * three strtabs (a rule read per hit); 8-byte {tag, node} slots at load 1/2
 * with 88-byte nodes (16 + 84 MB at 1M rules, nodes over 2-3 lines: hit p50
 * 140-380 ns); 64-byte buckets of twelve {16-bit tag, 24-bit node reference}
 * in front of 64-byte nodes (74 MB at 1M rules, the previous layout: a hit
 * read the bucket, then the node, two DRAM latencies one after the other,
 * hit p50 300-350 ns at 1M against 200-220 now, miss 60-180 against 50);
 * 128-byte nodes inline in the slots (183 MB, probes over two lines:
 * slower); prefetching four slots from home rather than two (no faster, 3
 * of 3 runs); prefetching the exact slot before the filter says it may hold
 * the key (no faster, and a miss then reads two lines).
 *
 * Hosts reach it normalised (policy/hostname.c): a rule's when the policy
 * loads, a request's in acl_decide, whose name path also yields the dots
 * the lookup needs.
 */
#include "policy/acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <stdlib.h>
/* The hash inlined: a lookup hashes each candidate, and a call costs as much as a short hash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/an.h"
#include "core/pool.h"

/*
 * Layout, for a million rules in one dependent cache line a hit. Every key,
 * name or wildcard suffix, is a 64-byte slot of one open-addressed table at
 * most half full (128 MB at 1M rules, 32 MB at the loader's cap of 2^18 a
 * file), placed by Robin Hood linear probing from its home slot
 * (multiply-shift of the hash: any count, no power of two). A slot holds what
 * a hit needs: the rule's id, indexes, up to NODE_PORTS ports, tier, how far
 * it sits from home, and the key's first NODE_KEY_INLINE bytes; a longer
 * key's rest is in a tail arena. A lookup computes each candidate's home from
 * its hash alone and prefetches it and the slot after it, which hold the key
 * for nine in ten hits: the key is checked in the line that was fetched
 * first, where a bucket of tags pointing at a node needed two lines one after
 * the other (~2 x 150 ns from DRAM on the bench VM). Robin Hood keeps probes
 * short and lets a probe stop at the first slot nearer its home than the
 * probe is. In front of the table, the filter (below) rules out all but 1% of
 * the candidates that have no slot, so a miss reads no table line at all, and
 * a hit reads no line for the other candidates. Rules with an instruction,
 * upstream, limits or more ports are cold: the slot says so and the verdict
 * is read from the rule. Table, filter and tails share one mapping, 2
 * MiB-aligned with MADV_HUGEPAGE when that large: with 4 KiB pages every probe
 * would also be a TLB miss. A bitmap of wildcard lengths skips suffixes no
 * wildcard could match.
 */

/* Ports a slot holds itself; a rule with more is read from the rule. */
#define NODE_PORTS 2u
/* Key bytes a slot holds; the rest of a longer key is in the tail arena. */
#define NODE_KEY_INLINE 34u
/* Slots per key, at least: the table is at most half full. */
#define SLOTS_PER_KEY 2u
/* Slots a lookup prefetches from home: nine keys in ten sit in the first two (four: no faster). */
#define SLOT_PREFETCH 2u
/* A slot sits at most this many slots past its home (its probe fits a byte). */
#define SLOT_PROBE_MAX UINT8_MAX

/* A slot of the host table: what a hit needs, then its key's first bytes. key_len 0: empty. */
struct acl_node {
	const char *id;
	uint32_t rule;       /* index into acl.rules */
	uint32_t rule_index; /* the rule's index over the snapshot (verdict.rule_index) */
	uint32_t tail;       /* key bytes past NODE_KEY_INLINE: offset into the tail arena */
	uint16_t ports[NODE_PORTS];
	uint8_t port_count;
	uint8_t tier;
	uint8_t kind; /* ACL_KIND_NAME or ACL_KIND_WILDCARD */
	uint8_t key_len;
	uint8_t cold;  /* instruction, upstream, limits or many ports: the verdict reads the rule */
	uint8_t probe; /* slots past its home */
	char key[NODE_KEY_INLINE];
};

static_assert(HOST_NAME_BYTES_MAX <= UINT8_MAX, "a key length fits a byte");
static_assert(sizeof(struct acl_node) == 64, "a slot is one cache line");
static_assert(NODE_PORTS <= UINT8_MAX, "a slot's port count fits a byte");

/* Mappings this large get huge pages (and a 2 MiB boundary): each would span over 512 small ones. */
#define ACL_HUGE_BYTES (2u << 20)
/* Nodes one name can hit: itself, and a wildcard per label below the top two. */
#define ACL_CANDIDATES_MAX (HOST_NAME_BYTES_MAX / 2 + 2)

static uint64_t node_hash(const char *key, size_t len, enum acl_kind kind)
{
	return XXH3_64bits_withSeed(key, len, (XXH64_hash_t)kind);
}

/* The home slot of hash <h>: its low half, scaled. */
static uint32_t slot_home(const struct acl_trie *t, uint64_t h)
{
	return (uint32_t)(((h & UINT32_MAX) * t->slot_count) >> 32);
}

static uint32_t slot_next(const struct acl_trie *t, uint32_t i)
{
	return i + 1 == t->slot_count ? 0 : i + 1;
}

/* Prefetches SLOT_PREFETCH slots from the home of <h>. */
static void slot_prefetch(const struct acl_trie *t, uint64_t h)
{
	uint32_t home = slot_home(t, h);

	for (uint32_t k = 0; k < SLOT_PREFETCH; k++) {
		__builtin_prefetch(&t->slots[home]);
		home = slot_next(t, home);
	}
}

/*
 * The filter: a split-block Bloom filter over every key, name or wildcard, in
 * 64-byte blocks of eight words. A key sets one bit in each word of one block,
 * so a query reads one line, and a candidate it rules out costs no table line.
 * At ten bits a key a block holds about 51 keys and a query for an absent key
 * passes about 1% of the time: (1 - e^(-51/64))^8.
 */
#define FILTER_WORDS        8u
#define FILTER_BITS_PER_KEY 10u

struct acl_filter_block {
	uint64_t words[FILTER_WORDS];
};

static_assert(sizeof(struct acl_filter_block) == 64, "a filter block is one cache line");

/*
 * The filter block of hash <h> (its high half, scaled) and, as <bits>, the bit
 * of each word: six bits of its low half a word, mixed up by one multiply so
 * that they do not follow the home slot's bits.
 */
static const struct acl_filter_block *filter_block(const struct acl_trie *t, uint64_t h,
						   uint64_t *bits)
{
	*bits = (h & UINT32_MAX) * 0x9e3779b97f4a7c15ull;
	return &t->filter[((h >> 32) * t->filter_blocks) >> 32];
}

/* Whether a key of hash <h> may be in <t>: false means it is not. */
static bool filter_may_hold(const struct acl_trie *t, uint64_t h)
{
	uint64_t bits;
	const struct acl_filter_block *b = filter_block(t, h, &bits);
	uint64_t all = 1;

	for (uint32_t w = 0; w < FILTER_WORDS; w++)
		all &= b->words[w] >> ((bits >> (16u + 6u * w)) & 63u);
	return all & 1u;
}

static void filter_add(struct acl_trie *t, uint64_t h)
{
	uint64_t bits;
	struct acl_filter_block *b = (struct acl_filter_block *)filter_block(t, h, &bits);

	for (uint32_t w = 0; w < FILTER_WORDS; w++)
		b->words[w] |= 1ull << ((bits >> (16u + 6u * w)) & 63u);
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

/* Whether some wildcard suffix is <len> bytes long: no probe otherwise. */
static bool wild_len_present(const struct acl_trie *t, size_t len)
{
	return (t->wild_lens[len / 64u] >> (len % 64u)) & 1u;
}

/*
 * Hashes the wildcard candidates of <host>/<len> with dots <dots> into
 * <hashes> and <starts>, longest first: the suffix after each dot but the last
 * (a wildcard covers two labels or more), when some wildcard has its length.
 * Prefetches their filter blocks. Returns how many.
 */
static uint32_t wild_candidates(const struct acl_trie *t, const char *host, size_t len,
				const uint64_t dots[HOST_DOT_WORDS], uint64_t *hashes,
				uint8_t *starts)
{
	size_t prev = SIZE_MAX; /* a dot is a candidate's once a later one is seen */
	uint32_t n = 0;

	for (size_t w = 0; w < HOST_DOT_WORDS; w++) {
		for (uint64_t m = dots[w]; m != 0; m &= m - 1) {
			size_t at = 64u * w + (size_t)__builtin_ctzll(m);
			size_t start = prev + 1;
			prev = at;
			if (start == 0 || !wild_len_present(t, len - start))
				continue;
			AN_ASSERT(n < ACL_CANDIDATES_MAX);
			uint64_t bits;
			hashes[n] = node_hash(host + start, len - start, ACL_KIND_WILDCARD);
			starts[n] = (uint8_t)start;
			__builtin_prefetch(filter_block(t, hashes[n], &bits));
			n++;
		}
	}
	AN_ASSERT(prev == SIZE_MAX || prev < len);
	return n;
}

/* Whether the key of slot <n> is <key>/<len> of <kind>. */
static bool slot_is(const struct acl_trie *t, const struct acl_node *n, const char *key, size_t len,
		    enum acl_kind kind)
{
	if (n->key_len != len || n->kind != kind)
		return false;
	if (len <= NODE_KEY_INLINE)
		return memcmp(n->key, key, len) == 0;
	return memcmp(n->key, key, NODE_KEY_INLINE) == 0 &&
	       memcmp(t->tails + n->tail, key + NODE_KEY_INLINE, len - NODE_KEY_INLINE) == 0;
}

/*
 * The slot of <key>/<len> of <kind> with hash <h>, or NULL. Probes from home
 * until an empty slot, or one nearer its home than this probe is (Robin Hood:
 * the key would have taken it), which happens within SLOT_PROBE_MAX + 1.
 */
static const struct acl_node *slot_find(const struct acl_trie *t, uint64_t h, const char *key,
					size_t len, enum acl_kind kind)
{
	uint32_t i = slot_home(t, h);

	AN_DASSERT(len > 0 && len <= HOST_NAME_BYTES_MAX);
	for (uint32_t probe = 0; probe <= SLOT_PROBE_MAX; probe++) {
		const struct acl_node *n = &t->slots[i];
		if (n->key_len == 0 || n->probe < probe)
			return NULL;
		if (slot_is(t, n, key, len, kind))
			return n;
		i = slot_next(t, i);
	}
	return NULL;
}

/*
 * Files <node> (probe 0) with hash <h>: Robin Hood, so a slot goes to whichever
 * key is further from its home. 0; -E2BIG when a key would sit more than
 * SLOT_PROBE_MAX past its home (the table is left unusable).
 */
static int slot_insert(struct acl_trie *t, struct acl_node node, uint64_t h)
{
	uint32_t i = slot_home(t, h);

	AN_ASSERT(node.key_len > 0 && node.probe == 0);
	for (uint32_t steps = 0; steps < t->slot_count; steps++) {
		struct acl_node *n = &t->slots[i];
		if (n->key_len == 0) {
			*n = node;
			return 0;
		}
		if (n->probe < node.probe) {
			struct acl_node evicted = *n;
			*n = node;
			node = evicted;
		}
		if (node.probe == SLOT_PROBE_MAX)
			return -E2BIG;
		node.probe++;
		i = slot_next(t, i);
	}
	AN_ASSERT(!"the table is at most half full: some slot is empty");
	return -E2BIG;
}

static void trie_free(struct acl_trie *t)
{
	if (t->slots != NULL)
		munmap(t->slots, t->map_bytes);
	memset(t, 0, sizeof(*t));
}

static uint32_t filter_blocks_for(uint32_t keys)
{
	const uint32_t bits = FILTER_WORDS * 64u;

	return (uint32_t)(((uint64_t)keys * FILTER_BITS_PER_KEY + bits - 1) / bits);
}

/* Sizes <t> for the name and wildcard rules of <rules> and maps it. 0, -ENOMEM, -E2BIG. */
static int trie_map(struct acl_trie *t, const struct acl_rule *rules, uint32_t count)
{
	uint64_t keys = 0, tails = 0;

	for (uint32_t i = 0; i < count; i++) {
		if (rules[i].kind == ACL_KIND_IP)
			continue;
		AN_ASSERT(rules[i].host_len > 0 && rules[i].host_len <= HOST_NAME_BYTES_MAX);
		keys++;
		if (rules[i].host_len > NODE_KEY_INLINE)
			tails += rules[i].host_len - NODE_KEY_INLINE;
	}
	if (keys == 0)
		return 0;
	static_assert((uint64_t)STRTAB_ENTRIES_MAX * SLOTS_PER_KEY <= UINT32_MAX,
		      "slots fit 32 bits");
	if (keys > STRTAB_ENTRIES_MAX || tails > UINT32_MAX)
		return -E2BIG;
	t->slot_count = (uint32_t)(keys * SLOTS_PER_KEY);
	t->filter_blocks = filter_blocks_for((uint32_t)keys);
	size_t bytes = (size_t)t->slot_count * sizeof(struct acl_node) +
		       (size_t)t->filter_blocks * sizeof(struct acl_filter_block) + (size_t)tails;
	size_t round = bytes >= ACL_HUGE_BYTES ? ACL_HUGE_BYTES : 4096u;
	t->map_bytes = (bytes + round - 1) & ~(round - 1);
	t->slots = map_alloc(t->map_bytes);
	if (t->slots == NULL) {
		memset(t, 0, sizeof(*t));
		return -ENOMEM;
	}
	t->filter = (struct acl_filter_block *)(void *)(t->slots + t->slot_count);
	t->tails = (char *)(t->filter + t->filter_blocks);
	return 0;
}

/* The slot of rule <i>, its key's rest (if any) written at <*tail_used> in the tail arena. */
static struct acl_node node_of(struct acl_trie *t, const struct acl_rule *r, uint32_t i,
			       size_t *tail_used)
{
	bool cold = r->instruction != NULL || r->upstream != NULL || r->port_count > NODE_PORTS ||
		    r->server_name_any || r->limits.requests_per_second != 0 ||
		    r->limits.burst != 0 || r->limits.concurrent != 0;
	struct acl_node n = { .id = r->id,
			      .rule = i,
			      .rule_index = r->index,
			      .tier = r->tier,
			      .kind = r->kind,
			      .key_len = (uint8_t)r->host_len,
			      .cold = cold };

	AN_ASSERT(r->kind == ACL_KIND_NAME || r->kind == ACL_KIND_WILDCARD);
	if (!cold && r->port_count > 0) {
		memcpy(n.ports, r->ports, r->port_count * sizeof(*r->ports));
		n.port_count = (uint8_t)r->port_count;
	}
	memcpy(n.key, r->host, r->host_len < NODE_KEY_INLINE ? r->host_len : NODE_KEY_INLINE);
	if (r->host_len > NODE_KEY_INLINE) {
		n.tail = (uint32_t)*tail_used;
		memcpy(t->tails + *tail_used, r->host + NODE_KEY_INLINE,
		       r->host_len - NODE_KEY_INLINE);
		*tail_used += r->host_len - NODE_KEY_INLINE;
	}
	AN_ASSERT(n.key_len == r->host_len);
	return n;
}

/* Builds <t> from the name and wildcard rules of <rules>. 0, -EEXIST (*<dup>: the first), -ENOMEM, -E2BIG. */
static int trie_build(struct acl_trie *t, const struct acl_rule *rules, uint32_t count,
		      uint32_t *dup_first, uint32_t *dup_second)
{
	size_t tail_used = 0;

	memset(t, 0, sizeof(*t));
	int rc = trie_map(t, rules, count);
	if (rc != 0 || t->slots == NULL)
		return rc;
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		const struct acl_rule *r = &rules[i];
		if (r->kind == ACL_KIND_IP)
			continue;
		enum acl_kind kind = (enum acl_kind)r->kind;
		uint64_t h = node_hash(r->host, r->host_len, kind);
		const struct acl_node *dup = slot_find(t, h, r->host, r->host_len, kind);
		if (dup != NULL) {
			*dup_first = dup->rule;
			*dup_second = i;
			rc = -EEXIST;
			break;
		}
		rc = slot_insert(t, node_of(t, r, i, &tail_used), h);
		filter_add(t, h);
		if (kind == ACL_KIND_NAME) {
			t->names++;
		} else {
			t->wildcards++;
			t->wild_lens[r->host_len / 64u] |= 1ull << (r->host_len % 64u);
		}
	}
	if (rc != 0) {
		trie_free(t);
		return rc;
	}
	AN_ASSERT(t->names + t->wildcards <= count);
	return 0;
}

/*
 * Keeps the <n> candidates at <hashes> and <starts> that the filter does not
 * rule out, in order, and prefetches their slots. Returns how many.
 */
static uint32_t wild_filter(const struct acl_trie *t, uint64_t *hashes, uint8_t *starts, uint32_t n)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (!filter_may_hold(t, hashes[i]))
			continue;
		hashes[kept] = hashes[i];
		starts[kept] = starts[i];
		slot_prefetch(t, hashes[kept]);
		kept++;
	}
	return kept;
}

/*
 * The most specific node for the normalised name <host>/<len> whose dots are
 * <dots>: the exact node, else the wildcard of the longest proper suffix of
 * two or more labels. The filter drops most candidates that have no slot
 * before any slot is read, and the slots of the rest are prefetched before
 * the first is read, so their misses overlap.
 */
static const struct acl_node *trie_lookup(const struct acl_trie *t, const char *host, size_t len,
					  const uint64_t dots[HOST_DOT_WORDS])
{
	uint64_t hashes[ACL_CANDIDATES_MAX];
	uint8_t starts[ACL_CANDIDATES_MAX];
	uint64_t bits;
	uint32_t n = 0;

	AN_ASSERT(len <= HOST_NAME_BYTES_MAX);
	if (t->slots == NULL)
		return NULL;
	uint64_t exact = node_hash(host, len, ACL_KIND_NAME);
	__builtin_prefetch(filter_block(t, exact, &bits));
	if (t->wildcards > 0)
		n = wild_candidates(t, host, len, dots, hashes, starts);
	bool exact_may = t->names > 0 && filter_may_hold(t, exact);
	if (exact_may)
		slot_prefetch(t, exact);
	n = wild_filter(t, hashes, starts, n);
	AN_ASSERT(n <= ACL_CANDIDATES_MAX);
	if (exact_may) {
		const struct acl_node *hit = slot_find(t, exact, host, len, ACL_KIND_NAME);
		if (hit != NULL)
			return hit;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct acl_node *hit =
		    slot_find(t, hashes[i], host + starts[i], len - starts[i], ACL_KIND_WILDCARD);
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
	AN_ASSERT(len < HOST_NORM_BYTES);
	if (kind == ACL_KIND_IP)
		return strtab_find(&a->ips, host, len, &index) == 0 ? &a->rules[index] : NULL;
	uint64_t dots[HOST_DOT_WORDS];
	host_name_dots(host, len, dots);
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
	out->server_name_any = out->tier == TIER_PASSTHROUGH && r->server_name_any;
}

static_assert(sizeof(((struct verdict *)0)->ip) == INET6_ADDRSTRLEN, "any address text fits");

void acl_decide(const struct acl *a, const char *host, size_t len, uint16_t port,
		struct verdict *out)
{
	char norm[HOST_NORM_BYTES];
	enum acl_kind kind;

	AN_ASSERT(out != NULL);
	AN_ASSERT(host != NULL || len == 0);
	memset(out, 0, sizeof(*out));
	out->tier = TIER_DENY;
	out->reason = REASON_HOST_NOT_ALLOWED;
	out->rule_index = VERDICT_RULE_NONE;
	uint64_t dots[HOST_DOT_WORDS];
	const char *why;
	int n = host_normalise_dots(host, len, norm, sizeof(norm), &kind, &why, dots);
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
	if (r != NULL) {
		verdict_fill(out, r->id, r->instruction, r->upstream, r->ports, r->port_count,
			     r->tier, port, r->index, &r->limits);
		out->server_name_any = out->tier == TIER_PASSTHROUGH && r->server_name_any;
	}
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
