/*
 * Unit tests for tls/leafcache.c: the per-worker LRU of leaves.
 *
 * Most tests store bare X509 objects that carry only a notAfter (all the
 * cache reads of a leaf), so eviction order, counters and expiry are checked
 * without signing anything; get_or_mint runs against a real CA. After every
 * step the cache's structure is walked (LRU links both ways, free list,
 * every entry findable through its bucket) so a broken link fails at the
 * step that broke it. Capacity and host length are tested at N and N+1;
 * AddressSanitizer's leak check catches a dropped reference.
 */
#include "../../../tls/leafcache.c"

#include <check.h>
#include <signal.h>

#include "tests/unit/tls/tlstest.h"
#include "tests/unit/unit.h"

#define NOW 1800000000

/* A stand-in leaf: only its notAfter matters to the cache. */
static X509 *leaf_until(int64_t not_after_s)
{
	X509 *x = X509_new();
	ck_assert_ptr_nonnull(x);
	ck_assert_ptr_nonnull(ASN1_TIME_set(X509_getm_notAfter(x), (time_t)not_after_s));
	return x;
}

static X509 *leaf(void)
{
	return leaf_until(NOW + 7 * 86400);
}

/* Walks every structure of <c> and checks it against count and capacity. */
static void check_shape(const struct tls_leafcache *c)
{
	uint32_t n = 0, prev = TLS_LEAFCACHE_NONE;

	for (uint32_t i = c->lru_head; i != TLS_LEAFCACHE_NONE; i = c->entries[i].lru_next) {
		const struct tls_leafcache_entry *e = &c->entries[i];
		ck_assert_uint_eq(e->lru_prev, prev);
		ck_assert_ptr_nonnull(e->leaf);
		ck_assert_uint_eq(find(c, e->hash, e->host, e->host_len), i);
		ck_assert_uint_eq(e->hash, XXH3_64bits(e->host, e->host_len));
		prev = i;
		ck_assert_uint_le(++n, c->capacity);
	}
	ck_assert_uint_eq(c->lru_tail, prev);
	ck_assert_uint_eq(n, c->count);
	uint32_t free_n = 0;
	for (uint32_t i = c->free_head; i != TLS_LEAFCACHE_NONE; i = c->entries[i].hash_next) {
		ck_assert_ptr_null(c->entries[i].leaf);
		ck_assert_uint_le(++free_n, c->capacity);
	}
	ck_assert_uint_eq(free_n + c->count, c->capacity);
}

/* The hosts from most to least recently used, joined by ',' into <out>. */
static const char *lru_order(const struct tls_leafcache *c, char *out, size_t cap)
{
	size_t len = 0;

	out[0] = '\0';
	for (uint32_t i = c->lru_head; i != TLS_LEAFCACHE_NONE; i = c->entries[i].lru_next)
		len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? "," : "",
					c->entries[i].host);
	ck_assert_uint_lt(len, cap);
	return out;
}

static void put_ok(struct tls_leafcache *c, const char *host, X509 *x)
{
	ck_assert_int_eq(tls_leafcache_put(c, host, strlen(host), x), 0);
	check_shape(c);
}

static X509 *get(struct tls_leafcache *c, const char *host, int64_t now)
{
	X509 *x = tls_leafcache_get(c, host, strlen(host), now);
	check_shape(c);
	return x;
}

START_TEST(test_init_capacity_limits)
{
	struct tls_leafcache c;

	ck_assert_int_eq(tls_leafcache_init(&c, 0), -EINVAL);
	ck_assert_int_eq(tls_leafcache_init(&c, 1), 0);
	ck_assert_uint_eq(c.bucket_mask + 1, 2);
	check_shape(&c);
	tls_leafcache_destroy(&c);
	ck_assert_int_eq(tls_leafcache_init(&c, TLS_LEAFCACHE_CAPACITY_MAX), 0);
	ck_assert_uint_eq(c.bucket_mask + 1, 2 * TLS_LEAFCACHE_CAPACITY_MAX);
	check_shape(&c);
	tls_leafcache_destroy(&c);
	ck_assert_ptr_null(c.entries);
	ck_assert_int_eq(tls_leafcache_init(&c, TLS_LEAFCACHE_CAPACITY_MAX + 1), -EINVAL);
	ck_assert_ptr_null(c.entries);
}
END_TEST

/* Capacity N = 3 filled to N, then N + 1 evicts the least recently used. */
START_TEST(test_lru_at_capacity)
{
	struct tls_leafcache c;
	char order[128];

	ck_assert_int_eq(tls_leafcache_init(&c, 3), 0);
	X509 *a = leaf(), *b = leaf(), *cc = leaf(), *d = leaf();
	put_ok(&c, "a.test", a);
	put_ok(&c, "b.test", b);
	put_ok(&c, "c.test", cc);
	ck_assert_uint_eq(c.count, 3);
	ck_assert_uint_eq(c.evictions, 0);
	ck_assert_str_eq(lru_order(&c, order, sizeof(order)), "c.test,b.test,a.test");
	ck_assert_ptr_eq(get(&c, "a.test", NOW), a);
	ck_assert_str_eq(lru_order(&c, order, sizeof(order)), "a.test,c.test,b.test");
	ck_assert_uint_eq(c.hits, 1);
	ck_assert_uint_eq(c.misses, 0);
	/* The fourth host: b is the least recently used. */
	put_ok(&c, "d.test", d);
	ck_assert_uint_eq(c.count, 3);
	ck_assert_uint_eq(c.evictions, 1);
	ck_assert_str_eq(lru_order(&c, order, sizeof(order)), "d.test,a.test,c.test");
	ck_assert_ptr_null(get(&c, "b.test", NOW));
	ck_assert_uint_eq(c.misses, 1);
	ck_assert_ptr_eq(get(&c, "c.test", NOW), cc);
	ck_assert_ptr_eq(get(&c, "a.test", NOW), a);
	ck_assert_ptr_eq(get(&c, "d.test", NOW), d);
	ck_assert_str_eq(lru_order(&c, order, sizeof(order)), "d.test,a.test,c.test");
	/* A hit at the head keeps the order. */
	ck_assert_ptr_eq(get(&c, "d.test", NOW), d);
	ck_assert_uint_eq(c.hits, 5);
	ck_assert_uint_eq(c.misses, 1);
	ck_assert_uint_eq(c.evictions, 1);
	ck_assert_uint_eq(c.expired, 0);
	tls_leafcache_destroy(&c);
}
END_TEST

START_TEST(test_replace_same_host)
{
	struct tls_leafcache c;
	char order[128];

	ck_assert_int_eq(tls_leafcache_init(&c, 2), 0);
	X509 *a1 = leaf(), *a2 = leaf(), *b = leaf();
	put_ok(&c, "a.test", a1);
	put_ok(&c, "b.test", b);
	/* The caller keeps a reference to the first leaf past its replacement. */
	ck_assert_int_eq(X509_up_ref(a1), 1);
	put_ok(&c, "a.test", a2);
	ck_assert_uint_eq(c.count, 2);
	ck_assert_uint_eq(c.evictions, 0);
	ck_assert_str_eq(lru_order(&c, order, sizeof(order)), "a.test,b.test");
	ck_assert_ptr_eq(get(&c, "a.test", NOW), a2);
	ck_assert_ptr_nonnull(X509_get0_notAfter(a1)); /* still ours */
	X509_free(a1);
	tls_leafcache_destroy(&c);
}
END_TEST

START_TEST(test_host_bytes)
{
	struct tls_leafcache c;
	char host[LIMITS_HOST_BYTES_MAX + 2];
	X509 *x = leaf();

	ck_assert_int_eq(tls_leafcache_init(&c, 4), 0);
	memset(host, 'h', sizeof(host));
	ck_assert_int_eq(tls_leafcache_put(&c, host, LIMITS_HOST_BYTES_MAX + 1, x), -EINVAL);
	ck_assert_int_eq(tls_leafcache_put(&c, host, 0, x), -EINVAL);
	ck_assert_int_eq(tls_leafcache_put(&c, NULL, 3, x), -EINVAL);
	ck_assert_uint_eq(c.count, 0);
	ck_assert_int_eq(tls_leafcache_put(&c, host, LIMITS_HOST_BYTES_MAX, x), 0);
	ck_assert_ptr_eq(tls_leafcache_get(&c, host, LIMITS_HOST_BYTES_MAX, NOW), x);
	ck_assert_ptr_null(tls_leafcache_get(&c, host, LIMITS_HOST_BYTES_MAX + 1, NOW));
	ck_assert_ptr_null(tls_leafcache_get(&c, host, 0, NOW));
	ck_assert_ptr_null(tls_leafcache_get(&c, host, LIMITS_HOST_BYTES_MAX - 1, NOW));
	ck_assert_uint_eq(c.hits, 1);
	ck_assert_uint_eq(c.misses, 3);
	/* Byte for byte: case and a trailing dot make other keys. */
	X509 *y = leaf(), *z = leaf();
	put_ok(&c, "a.test", y);
	put_ok(&c, "A.test", z);
	ck_assert_ptr_eq(get(&c, "a.test", NOW), y);
	ck_assert_ptr_eq(get(&c, "A.test", NOW), z);
	ck_assert_ptr_null(get(&c, "a.test.", NOW));
	/* A leaf without a readable notAfter is refused and stays the caller's. */
	X509 *bad = X509_new();
	ASN1_STRING_set(X509_getm_notAfter(bad), "garbage", 7);
	ck_assert_int_eq(tls_leafcache_put(&c, "bad.test", 8, bad), -EINVAL);
	X509_free(bad);
	check_shape(&c);
	tls_leafcache_destroy(&c);
}
END_TEST

START_TEST(test_expiry)
{
	struct tls_leafcache c;
	int64_t na = NOW + TLS_LEAFCACHE_RENEW_S + 10;

	ck_assert_int_eq(tls_leafcache_init(&c, 4), 0);
	X509 *x = leaf_until(na);
	put_ok(&c, "e.test", x);
	/* Usable until RENEW_S before notAfter, and not a second longer. */
	ck_assert_ptr_eq(get(&c, "e.test", na - TLS_LEAFCACHE_RENEW_S - 1), x);
	ck_assert_uint_eq(c.hits, 1);
	ck_assert_ptr_null(get(&c, "e.test", na - TLS_LEAFCACHE_RENEW_S));
	ck_assert_uint_eq(c.expired, 1);
	ck_assert_uint_eq(c.misses, 1);
	ck_assert_uint_eq(c.count, 0);
	ck_assert_ptr_null(get(&c, "e.test", NOW));
	ck_assert_uint_eq(c.expired, 1);
	ck_assert_uint_eq(c.misses, 2);
	tls_leafcache_destroy(&c);
}
END_TEST

/* Many more hosts than entries: chains share buckets, the newest survive. */
START_TEST(test_churn)
{
	enum { CAP = 64, HOSTS = 1000 };
	struct tls_leafcache c;
	char host[32];

	ck_assert_int_eq(tls_leafcache_init(&c, CAP), 0);
	for (int i = 0; i < HOSTS; i++) {
		snprintf(host, sizeof(host), "h%d.test", i);
		put_ok(&c, host, leaf());
		if (i % 3 == 0) {
			snprintf(host, sizeof(host), "h%d.test", i / 2);
			get(&c, host, NOW);
		}
	}
	ck_assert_uint_eq(c.count, CAP);
	ck_assert_uint_eq(c.evictions, HOSTS - CAP);
	for (int i = HOSTS - CAP / 2; i < HOSTS; i++) {
		snprintf(host, sizeof(host), "h%d.test", i);
		ck_assert_ptr_nonnull(get(&c, host, NOW));
	}
	snprintf(host, sizeof(host), "h%d.test", 0);
	ck_assert_ptr_null(get(&c, host, NOW));
	tls_leafcache_destroy(&c);
}
END_TEST

START_TEST(test_get_or_mint_hit_ratio)
{
	enum { HOSTS = 100, LOOKUPS = 10000 };
	char pem[PATH_MAX], key[PATH_MAX], err[256], host[32];
	struct tls_ca *ca = NULL;
	struct tls_leafcache c;
	int64_t now = (int64_t)time(NULL);

	ck_assert_int_eq(tls_library_init(err, sizeof(err)), 0);
	tt_mkdir();
	tt_make_ca("ca", NULL, pem, key);
	ck_assert_int_eq(tls_ca_load(pem, key, 7, &ca, err, sizeof(err)), 0);
	ck_assert_int_eq(tls_leafcache_init(&c, 128), 0);
	X509 *first = NULL, *again = NULL;
	ck_assert_int_eq(tls_leafcache_get_or_mint(&c, ca, "x.test", 6, now, &first), 0);
	ck_assert_int_eq(tls_leafcache_get_or_mint(&c, ca, "x.test", 6, now, &again), 0);
	ck_assert_ptr_eq(first, again);
	ck_assert_int_eq(X509_check_host(first, "x.test", 0, 0, NULL), 1);
	ck_assert_int_eq(tls_leafcache_get_or_mint(&c, ca, "bad host", 8, now, &again), -EINVAL);
	ck_assert_ptr_null(again);
	for (int i = 0; i < LOOKUPS; i++) {
		X509 *x = NULL;
		int n = snprintf(host, sizeof(host), "h%d.test", i % HOSTS);
		ck_assert_int_eq(tls_leafcache_get_or_mint(&c, ca, host, (size_t)n, now, &x), 0);
		ck_assert_int_eq(X509_check_host(x, host, (size_t)n, 0, NULL), 1);
	}
	check_shape(&c);
	/* One miss per host, then hits: 99% over the run. */
	ck_assert_uint_eq(c.misses, 2 + HOSTS);
	ck_assert_uint_eq(c.hits, 1 + LOOKUPS - HOSTS);
	ck_assert_uint_eq(c.evictions, 0);
	printf("leafcache: %lu hits, %lu misses over %d lookups\n", (unsigned long)c.hits,
	       (unsigned long)c.misses, LOOKUPS);
	tls_leafcache_destroy(&c);
	tls_ca_free(&ca);
	tt_rmdir();
}
END_TEST

START_TEST(test_put_null_leaf_aborts)
{
	struct tls_leafcache c;

	ck_assert_int_eq(tls_leafcache_init(&c, 2), 0);
	tls_leafcache_put(&c, "a.test", 6, NULL);
}
END_TEST

static Suite *leafcache_suite(void)
{
	Suite *s = suite_create("tls_leafcache");
	TCase *tc = tcase_create("lru");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_init_capacity_limits);
	tcase_add_test(tc, test_lru_at_capacity);
	tcase_add_test(tc, test_replace_same_host);
	tcase_add_test(tc, test_host_bytes);
	tcase_add_test(tc, test_expiry);
	tcase_add_test(tc, test_churn);
	tcase_add_test(tc, test_get_or_mint_hit_ratio);
	suite_add_tcase(s, tc);
	TCase *ta = tcase_create("abort");
	tcase_add_test_raise_signal(ta, test_put_null_leaf_aborts, SIGABRT);
	suite_add_tcase(s, ta);
	return s;
}

int main(void)
{
	return unit_run(leafcache_suite());
}
