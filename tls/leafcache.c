/*
 * The per-worker leaf cache: a hash table and an LRU list over one array of
 * entries allocated at init.
 *
 * Entries are addressed by 32-bit index, not pointer: the hash chains
 * (singly linked through hash_next, from a power-of-two bucket array at
 * least twice the capacity, so chains stay short) and the LRU list (doubly
 * linked through lru_prev/lru_next, head most recent) are intrusive, and
 * unused entries form a free list through hash_next. A get is a hash, a
 * bucket walk comparing the 64-bit hash first and the host bytes only on a
 * hash match, and an unlink/relink at the head; a put at capacity takes
 * the tail. Nothing allocates after init, and the host is copied into the
 * entry so the cache never borrows a connection's buffer.
 *
 * Each entry holds one reference to its X509; dropping an entry drops it.
 * A connection that still uses an evicted leaf is unaffected: its SSL took
 * its own reference. Expiry is checked on get, against the leaf's notAfter
 * read once at put. Rejected: storing a ready SSL_CTX per host (an SSL_CTX
 * costs far more memory and time to build than a certificate, and the key is
 * the same for every leaf anyway), and a clock read in here (the worker
 * passes the time it already has).
 */
#include "tls/leafcache.h"

#include <errno.h>
#include <string.h>

#include <openssl/x509.h>
#include <xxhash.h>

#include "core/an.h"
#include "core/pool.h"
#include "tls/ca.h"
#include "tls/tls.h"

static_assert(LIMITS_HOST_BYTES_MAX <= UINT16_MAX, "host_len is 16 bits");
static_assert(TLS_LEAFCACHE_CAPACITY_MAX <= (UINT32_MAX >> 2), "buckets fit in 32 bits");

int tls_leafcache_init(struct tls_leafcache *c, uint32_t capacity)
{
	AN_ASSERT(c != NULL);
	memset(c, 0, sizeof(*c));
	if (capacity == 0 || capacity > TLS_LEAFCACHE_CAPACITY_MAX)
		return -EINVAL;
	uint32_t buckets = 1;
	while (buckets < 2 * capacity)
		buckets *= 2;
	c->entries = pool_calloc(capacity, sizeof(*c->entries));
	c->buckets = pool_calloc(buckets, sizeof(*c->buckets));
	if (c->entries == NULL || c->buckets == NULL) {
		AN_FREE(&c->entries);
		AN_FREE(&c->buckets);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < buckets; i++)
		c->buckets[i] = TLS_LEAFCACHE_NONE;
	for (uint32_t i = 0; i < capacity; i++)
		c->entries[i].hash_next = i + 1 < capacity ? i + 1 : TLS_LEAFCACHE_NONE;
	c->bucket_mask = buckets - 1;
	c->capacity = capacity;
	c->lru_head = TLS_LEAFCACHE_NONE;
	c->lru_tail = TLS_LEAFCACHE_NONE;
	c->free_head = 0;
	AN_ASSERT((buckets & (buckets - 1)) == 0);
	return 0;
}

void tls_leafcache_destroy(struct tls_leafcache *c)
{
	AN_ASSERT(c != NULL);
	AN_ASSERT(c->entries != NULL || c->count == 0);
	for (uint32_t i = 0; c->entries != NULL && i < c->capacity; i++)
		X509_free(c->entries[i].leaf);
	AN_FREE(&c->entries);
	AN_FREE(&c->buckets);
	memset(c, 0, sizeof(*c));
}

static uint32_t find(const struct tls_leafcache *c, uint64_t hash, const char *host, size_t len)
{
	AN_DASSERT(len > 0);
	AN_DASSERT(host != NULL);
	uint32_t i = c->buckets[hash & c->bucket_mask];
	while (i != TLS_LEAFCACHE_NONE) {
		const struct tls_leafcache_entry *e = &c->entries[i];
		if (e->hash == hash && e->host_len == len && memcmp(e->host, host, len) == 0)
			return i;
		i = e->hash_next;
	}
	return TLS_LEAFCACHE_NONE;
}

static void lru_unlink(struct tls_leafcache *c, uint32_t i)
{
	struct tls_leafcache_entry *e = &c->entries[i];

	AN_DASSERT(i < c->capacity);
	AN_DASSERT(e->leaf != NULL);
	if (e->lru_prev != TLS_LEAFCACHE_NONE)
		c->entries[e->lru_prev].lru_next = e->lru_next;
	else
		c->lru_head = e->lru_next;
	if (e->lru_next != TLS_LEAFCACHE_NONE)
		c->entries[e->lru_next].lru_prev = e->lru_prev;
	else
		c->lru_tail = e->lru_prev;
	e->lru_prev = TLS_LEAFCACHE_NONE;
	e->lru_next = TLS_LEAFCACHE_NONE;
}

static void lru_push_head(struct tls_leafcache *c, uint32_t i)
{
	struct tls_leafcache_entry *e = &c->entries[i];

	AN_DASSERT(i < c->capacity);
	AN_DASSERT(e->lru_prev == TLS_LEAFCACHE_NONE);
	e->lru_next = c->lru_head;
	if (c->lru_head != TLS_LEAFCACHE_NONE)
		c->entries[c->lru_head].lru_prev = i;
	c->lru_head = i;
	if (c->lru_tail == TLS_LEAFCACHE_NONE)
		c->lru_tail = i;
}

/* Takes entry <i> out of its bucket's chain. */
static void hash_unlink(struct tls_leafcache *c, uint32_t i)
{
	uint32_t *link = &c->buckets[c->entries[i].hash & c->bucket_mask];

	AN_ASSERT(*link != TLS_LEAFCACHE_NONE);
	while (*link != i) {
		link = &c->entries[*link].hash_next;
		AN_ASSERT(*link != TLS_LEAFCACHE_NONE);
	}
	*link = c->entries[i].hash_next;
}

/* Drops entry <i> and its leaf reference, returning it to the free list. */
static void release(struct tls_leafcache *c, uint32_t i)
{
	struct tls_leafcache_entry *e = &c->entries[i];

	AN_ASSERT(e->leaf != NULL);
	AN_ASSERT(c->count > 0);
	hash_unlink(c, i);
	lru_unlink(c, i);
	X509_free(e->leaf);
	e->leaf = NULL;
	e->hash_next = c->free_head;
	c->free_head = i;
	c->count--;
}

X509 *tls_leafcache_get(struct tls_leafcache *c, const char *host, size_t host_len, int64_t now_s)
{
	AN_ASSERT(c->entries != NULL);
	AN_ASSERT(host != NULL || host_len == 0);
	if (host_len == 0 || host_len > LIMITS_HOST_BYTES_MAX) {
		c->misses++;
		return NULL;
	}
	uint32_t i = find(c, XXH3_64bits(host, host_len), host, host_len);
	if (i == TLS_LEAFCACHE_NONE) {
		c->misses++;
		return NULL;
	}
	if (c->entries[i].not_after_s - TLS_LEAFCACHE_RENEW_S <= now_s) {
		release(c, i);
		c->expired++;
		c->misses++;
		return NULL;
	}
	if (c->lru_head != i) {
		lru_unlink(c, i);
		lru_push_head(c, i);
	}
	c->hits++;
	return c->entries[i].leaf;
}

/* A free entry, evicting the least recently used one when there is none. */
static uint32_t take_entry(struct tls_leafcache *c)
{
	AN_ASSERT(c->count <= c->capacity);
	if (c->free_head == TLS_LEAFCACHE_NONE) {
		AN_ASSERT(c->count == c->capacity);
		release(c, c->lru_tail);
		c->evictions++;
	}
	uint32_t i = c->free_head;
	AN_ASSERT(i != TLS_LEAFCACHE_NONE);
	c->free_head = c->entries[i].hash_next;
	return i;
}

int tls_leafcache_put(struct tls_leafcache *c, const char *host, size_t host_len, X509 *leaf)
{
	int64_t not_after_s;

	AN_ASSERT(c->entries != NULL);
	AN_ASSERT(leaf != NULL);
	if (host == NULL || host_len == 0 || host_len > LIMITS_HOST_BYTES_MAX)
		return -EINVAL;
	if (tls_time_s(X509_get0_notAfter(leaf), &not_after_s) != 0)
		return -EINVAL;
	uint64_t hash = XXH3_64bits(host, host_len);
	uint32_t i = find(c, hash, host, host_len);
	if (i != TLS_LEAFCACHE_NONE) {
		release(c, i);
	}
	i = take_entry(c);
	struct tls_leafcache_entry *e = &c->entries[i];
	e->leaf = leaf;
	e->hash = hash;
	e->not_after_s = not_after_s;
	e->host_len = (uint16_t)host_len;
	memcpy(e->host, host, host_len);
	e->host[host_len] = '\0';
	uint32_t *bucket = &c->buckets[hash & c->bucket_mask];
	e->hash_next = *bucket;
	*bucket = i;
	e->lru_prev = TLS_LEAFCACHE_NONE;
	lru_push_head(c, i);
	c->count++;
	AN_ASSERT(c->count <= c->capacity);
	return 0;
}

int tls_leafcache_get_or_mint(struct tls_leafcache *c, const struct tls_ca *ca, const char *host,
			      size_t host_len, int64_t now_s, X509 **leaf)
{
	AN_ASSERT(ca != NULL);
	AN_ASSERT(leaf != NULL);
	*leaf = tls_leafcache_get(c, host, host_len, now_s);
	if (*leaf != NULL)
		return 0;
	X509 *x = NULL;
	int ret = tls_leaf_mint(ca, host, host_len, now_s, &x);
	if (ret != 0)
		return ret;
	ret = tls_leafcache_put(c, host, host_len, x);
	if (ret != 0) {
		X509_free(x);
		return ret;
	}
	*leaf = x;
	return 0;
}
