/*
 * A bounded, per-worker LRU cache of minted leaves: host -> leaf certificate.
 *
 * Every leaf of one CA carries the same key (tls/ca.h), so a certificate is
 * all a server session needs for a host (tls_session_set_leaf). One cache
 * per worker and NOT thread-safe, by design: a worker's connections are only
 * ever touched by that worker, so the cache needs no lock; two workers each
 * mint a leaf for a host they both see, which costs one signature each.
 */
#ifndef AN_TLS_LEAFCACHE_H
#define AN_TLS_LEAFCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/types.h>

#include "core/limits.h"

struct tls_ca;

/* Hosts a worker keeps leaves for: agents talk to few hosts, and an entry is
 * about 300 bytes plus the certificate's ~1 KiB, so the default is ~1.3 MiB. */
#define TLS_LEAFCACHE_CAPACITY_DEFAULT 1024u
#define TLS_LEAFCACHE_CAPACITY_MAX     65536u
/* A leaf this close to its notAfter is dropped and minted again, so a client
 * whose clock runs ahead of ours never sees an expired certificate. */
#define TLS_LEAFCACHE_RENEW_S 3600
/* The index that means "no entry". */
#define TLS_LEAFCACHE_NONE UINT32_MAX

struct tls_leafcache_entry {
	X509 *leaf;          /* owned reference; NULL when the entry is free */
	uint64_t hash;       /* XXH3-64 of host */
	int64_t not_after_s; /* the leaf's notAfter */
	uint32_t lru_prev;   /* towards the most recently used; NONE at the head */
	uint32_t lru_next;   /* towards the least recently used; NONE at the tail */
	uint32_t hash_next;  /* next in its bucket, or in the free list */
	uint16_t host_len;
	char host[LIMITS_HOST_BYTES_MAX + 1];
};

/* Counters are read directly; nothing else in here is for callers. */
struct tls_leafcache {
	struct tls_leafcache_entry *entries; /* owned: capacity entries */
	uint32_t *buckets;                   /* owned: heads of the hash chains */
	uint32_t bucket_mask;                /* buckets - 1; buckets >= 2 * capacity */
	uint32_t capacity;
	uint32_t count;     /* entries in use */
	uint32_t lru_head;  /* most recently used */
	uint32_t lru_tail;  /* least recently used: the next eviction */
	uint32_t free_head; /* unused entries, chained through hash_next */
	uint64_t hits;
	uint64_t misses;    /* gets that found nothing usable (expired ones included) */
	uint64_t evictions; /* entries dropped to make room */
	uint64_t expired;   /* entries dropped within TLS_LEAFCACHE_RENEW_S of notAfter */
};

/*
 * Makes <c> an empty cache of <capacity> (1..TLS_LEAFCACHE_CAPACITY_MAX)
 * entries, all allocated now: get and put never allocate. Returns 0,
 * -EINVAL (bad capacity) or -ENOMEM. Start-up context.
 */
int tls_leafcache_init(struct tls_leafcache *c, uint32_t capacity);

/* Drops every leaf reference, releases the memory and zeroes <c>. */
void tls_leafcache_destroy(struct tls_leafcache *c);

/*
 * Looks up <host>/<host_len> (borrowed, compared byte for byte: pass the
 * normalised form). A hit makes the entry the most recently used and returns
 * its leaf, borrowed: valid until the next put on <c>, the next get of the
 * same host, or destroy (take a reference, or hand it to
 * tls_session_set_leaf, before that). An entry within TLS_LEAFCACHE_RENEW_S
 * of its notAfter at <now_s> is dropped and counted as expired. Returns
 * NULL on a miss (counted) or for an empty or over-long host. O(1)
 * expected; the owning worker only.
 */
X509 *tls_leafcache_get(struct tls_leafcache *c, const char *host, size_t host_len, int64_t now_s);

/*
 * Stores <leaf> for <host>/<host_len> (1..LIMITS_HOST_BYTES_MAX bytes,
 * copied) as the most recently used entry, taking the caller's reference on
 * success. An entry already there for the host is replaced (its reference
 * dropped); a full cache first evicts the least recently used entry
 * (counted). Returns 0, or -EINVAL (empty or over-long host, or a leaf whose
 * notAfter does not parse), the caller then keeping its reference. O(1)
 * expected; the owning worker only.
 */
int tls_leafcache_put(struct tls_leafcache *c, const char *host, size_t host_len, X509 *leaf);

/*
 * tls_leafcache_get, then on a miss tls_leaf_mint(<ca>, ...) at <now_s> and
 * tls_leafcache_put. *<leaf> is borrowed as tls_leafcache_get's result is.
 * Returns 0, or tls_leaf_mint's error (-EINVAL, -EKEYEXPIRED, -ENOMEM, -EIO)
 * with *<leaf> NULL.
 */
int tls_leafcache_get_or_mint(struct tls_leafcache *c, const struct tls_ca *ca, const char *host,
			      size_t host_len, int64_t now_s, X509 **leaf);

#endif /* AN_TLS_LEAFCACHE_H */
