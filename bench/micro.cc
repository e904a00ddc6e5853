/*
 * Microbenchmarks of what agentsnetd runs per request, on Google Benchmark,
 * linked against the release objects (build/rel/libagentsnet.a).
 *
 *   http1_parse/<shape>    http1_parse_request on one request head: curl_get
 *                          (absolute-form GET as curl sends it to a proxy),
 *                          connect (CONNECT and three headers), browser_1k (a
 *                          browser-like absolute-form GET head of about 1 KiB).
 *   policy_lookup/<rules>/<hit|miss>
 *                          acl_decide, which is all policy_decide does per
 *                          request: host_normalise of the host as the client
 *                          sent it, the exact table, the wildcard suffixes,
 *                          the port check. 1k, 100k and 1M rules.
 *   policy_build/<rules>   acl_build of that table (a reload without libyaml), in ms.
 *   decision/1000000       acl_decide and the sandbox's rate check together:
 *                          the whole per-request decision.
 *   audit_emit             audit_next_id, audit_claim, filling the record as
 *                          core/conn.c's audit_decision does, audit_commit; the
 *                          writer thread runs, writing to /dev/null.
 *   baseline_lookup/1000000/<hit|miss>
 *                          the same lookups in a plain hash table of the same
 *                          keys (std::unordered_set of the rules' hosts and
 *                          suffixes): the host as sent, then each suffix after
 *                          a dot. No normalising, no ports, no tiers: the floor
 *                          policy_lookup and decision are measured against.
 *   baseline_build/1000000 that hash table built from the rules, in ms: the
 *                          floor of policy_build.
 *   baseline_sign          one ECDSA P-256 signature (SHA-256) of 512 bytes, a
 *                          new message each time, by EVP_DigestSign: the floor
 *                          of tls_leaf_mint.
 *   tls_leaf_mint          tls_leaf_mint of a leaf for a new host each time (what a
 *                          leaf-cache miss costs a worker: one ECDSA P-256 signature
 *                          and the certificate around it), and X509_free; the CA is
 *                          a throwaway P-256 one like `agentsnet ca init` makes,
 *                          written to a private temporary directory and loaded with
 *                          tls_ca_load.
 *
 * Rules are generated, distinct and deterministic: three in four exact hosts
 * of two to four labels, one in four "*.suffix"; a tenth list port 443, one in
 * twenty deny. The table is one profile: a profile is its own struct acl and a
 * lookup reads only its own, so more profiles change nothing per lookup. Hits
 * name uniformly drawn rules (a quarter through a wildcard, one or two labels
 * below it); misses have the same shapes with names no rule has, so each tries
 * the exact table and one to three suffixes. Lookups cycle through 64Ki hosts
 * each, so the caches see a realistic spread rather than one hot key (uniform
 * is the pessimistic end: real traffic repeats hosts). Every hit and miss is
 * checked once against the expected rule before timing. Note that the policy
 * loader caps a file at POLICY_RULES_MAX (2^18) rules: 1M is acl_build direct.
 *
 * Reading the JSON. Run with --benchmark_repetitions=N
 * --benchmark_report_aggregates_only=true --benchmark_format=json: each
 * benchmark gives entries with "run_type":"aggregate", "run_name" as above and
 * "aggregate_name" one of mean, median, stddev, cv. The median is the entry
 * whose "aggregate_name" is "median" ("name" is "<run_name>_median"); its
 * "cpu_time" (thread CPU time, in "time_unit": ns, ms for policy_build, us for
 * tls_leaf_mint) is the median over the repetitions of each repetition's mean
 * time per operation. That is not a per-operation p50, so http1_parse,
 * policy_lookup, decision and tls_leaf_mint also time PERCENTILE_SAMPLES
 * single operations (MINT_SAMPLES for a mint, which takes microseconds) with
 * the TSC after each run (outside the timed loop, the timer's own cost
 * subtracted) and report counters "p50_ns" and "p99_ns"; in the median entry
 * they are the median over the repetitions. The samples are fenced one by
 * one, so they are the latency of an isolated operation (no overlap of one
 * lookup's cache misses with the next), and they are quantised to the ~10 ns
 * a TSC read takes in this VM.
 * Rejected: timing every operation inside the loop (the TSC pair costs about
 * as much as a lookup and would distort the mean). For audit_emit read
 * cpu_time only: the writer thread shares the core under taskset, and its
 * share lands in real_time (its drain waits are untimed).
 *
 * Run (about 30 s on the 2-core VM):
 *   timeout 120 taskset -c 1 build/rel/bench/micro --benchmark_min_time=0.1 \
 *     --benchmark_repetitions=10 --benchmark_report_aggregates_only=true \
 *     --benchmark_format=json
 */
extern "C" {
#include "core/audit.h"
#include "core/http1.h"
#include "core/limits.h"
#include "core/ratelimit.h"
#include "core/verdict.h"
#include "policy/acl.h"
#include "tls/ca.h"
#include "tls/tls.h"
}

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <memory>
#include <netinet/in.h>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unordered_set>
#include <unistd.h>
#include <vector>

#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace
{

/* ---- Single-operation timing, for the per-operation percentiles. ---- */

constexpr size_t PERCENTILE_SAMPLES = 1u << 14;

double tsc_ns_per_tick = 1.0;

#if defined(__x86_64__)
/* lfence keeps earlier work from drifting past the first read of the TSC. */
inline uint64_t tsc_begin()
{
	_mm_lfence();
	uint64_t t = __rdtsc();
	_mm_lfence();
	return t;
}

/* rdtscp waits for the timed work to finish; lfence keeps later work after it. */
inline uint64_t tsc_end()
{
	unsigned int aux;
	uint64_t t = __rdtscp(&aux);
	_mm_lfence();
	return t;
}
#else
inline uint64_t tsc_begin()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

inline uint64_t tsc_end()
{
	return tsc_begin();
}
#endif

/* Ticks to nanoseconds, against the steady clock over 20 ms. */
void tsc_calibrate()
{
	using clock = std::chrono::steady_clock;
	auto t0 = clock::now();
	uint64_t c0 = tsc_begin();
	while (clock::now() - t0 < std::chrono::milliseconds(20)) {
	}
	uint64_t c1 = tsc_end();
	auto t1 = clock::now();
	double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
	tsc_ns_per_tick = ns / (double)(c1 - c0);
}

uint64_t median_of(std::vector<uint64_t> &v)
{
	std::nth_element(v.begin(), v.begin() + (long)(v.size() / 2), v.end());
	return v[v.size() / 2];
}

/*
 * Times <op>(k) for k in [0, <samples>) one by one and sets the counters
 * p50_ns and p99_ns of <state>, less the median cost of an empty timing
 * pair. Call after the timed loop.
 */
template <typename Op>
void report_percentiles(benchmark::State &state, Op op, size_t samples = PERCENTILE_SAMPLES)
{
	static std::vector<uint64_t> ticks(PERCENTILE_SAMPLES);

	samples = std::min(samples, PERCENTILE_SAMPLES);
	for (size_t k = 0; k < samples; k++) {
		uint64_t t0 = tsc_begin();
		uint64_t t1 = tsc_end();
		ticks[k] = t1 - t0;
	}
	std::vector<uint64_t> empty(ticks.begin(), ticks.begin() + (long)samples);
	uint64_t overhead = median_of(empty);
	for (size_t k = 0; k < samples; k++) {
		uint64_t t0 = tsc_begin();
		op(k);
		uint64_t t1 = tsc_end();
		ticks[k] = t1 - t0 > overhead ? t1 - t0 - overhead : 0;
	}
	std::sort(ticks.begin(), ticks.begin() + (long)samples);
	state.counters["p50_ns"] = (double)ticks[samples / 2] * tsc_ns_per_tick;
	state.counters["p99_ns"] = (double)ticks[samples * 99 / 100] * tsc_ns_per_tick;
}

/* ---- http1_parse ---- */

const char curl_get_head[] = "GET http://example.com/index.html HTTP/1.1\r\n"
			     "Host: example.com\r\n"
			     "User-Agent: curl/7.88.1\r\n"
			     "Accept: */*\r\n"
			     "Proxy-Connection: Keep-Alive\r\n"
			     "\r\n";

const char connect_head[] = "CONNECT api.github.com:443 HTTP/1.1\r\n"
			    "Host: api.github.com:443\r\n"
			    "User-Agent: curl/7.88.1\r\n"
			    "Proxy-Connection: Keep-Alive\r\n"
			    "\r\n";

const char browser_1k_head[] =
    "GET http://docs.example.org/guide/getting-started/install.html?lang=en&v=2 HTTP/1.1\r\n"
    "Host: docs.example.org\r\n"
    "Proxy-Connection: keep-alive\r\n"
    "Upgrade-Insecure-Requests: 1\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36\r\n"
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
    "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7\r\n"
    "Referer: http://docs.example.org/guide/\r\n"
    "Accept-Encoding: gzip, deflate\r\n"
    "Accept-Language: en-GB,en-US;q=0.9,en;q=0.8,de;q=0.7\r\n"
    "Cache-Control: max-age=0\r\n"
    "DNT: 1\r\n"
    "Cookie: _ga=GA1.2.1234567890.1700000000; _gid=GA1.2.987654321.1712345678; "
    "session_id=5f2b8c9e1a7d4e3f9b0c6a2d8e4f1b7c; theme=dark; lang=en; "
    "consent=analytics%3Dfalse%26marketing%3Dfalse%26functional%3Dtrue; "
    "recently_viewed=install%2Cconfigure%2Cupgrade%2Ctroubleshooting; "
    "ab_bucket=docs-nav-v3; tz=Europe%2FLondon\r\n"
    "If-None-Match: W/\"5e1f-18c2b7a9d40\"\r\n"
    "If-Modified-Since: Tue, 02 Apr 2024 10:15:42 GMT\r\n"
    "\r\n";

void bm_http1_parse(benchmark::State &state, const char *head, size_t len)
{
	static struct http1_request req;
	enum reason why;

	if (http1_parse_request(head, len, &req, &why) != (ssize_t)len) {
		state.SkipWithError("the head does not parse whole");
		return;
	}
	for (auto _ : state) {
		ssize_t n = http1_parse_request(head, len, &req, &why);
		benchmark::DoNotOptimize(n);
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	state.SetBytesProcessed((int64_t)(state.iterations() * len));
	state.counters["head_bytes"] = (double)len;
	report_percentiles(state, [&](size_t) {
		ssize_t n = http1_parse_request(head, len, &req, &why);
		benchmark::DoNotOptimize(n);
	});
}

/* ---- policy_lookup and policy_build ---- */

constexpr uint32_t LOOKUP_HOSTS = 1u << 16;
constexpr uint16_t LOOKUP_PORT = 443;

const char *const label_words[] = { "api",    "cdn",     "static",   "img",    "auth",
				    "login",  "pkg",     "registry", "files",  "docs",
				    "media",  "assets",  "edge",     "data",   "storage",
				    "models", "uploads", "git",      "mirror", "telemetry" };
const char *const tld_words[] = { "com", "net", "io", "org", "dev", "ai", "co.uk", "cloud" };
uint16_t port_443[] = { 443 };

uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

const char *word(uint64_t r, unsigned shift)
{
	return label_words[(r >> shift) % (sizeof(label_words) / sizeof(label_words[0]))];
}

const char *tld(uint64_t r)
{
	return tld_words[(r >> 40) % (sizeof(tld_words) / sizeof(tld_words[0]))];
}

/* The label that makes name <index> unique: a bijection of 32 bits, in base 36. */
void unique_label(uint32_t index, char out[8])
{
	uint32_t x = (index * 0x9e3779b1u) ^ 0x5bd1e995u;
	char rev[8];
	size_t n = 0;

	do {
		rev[n++] = "0123456789abcdefghijklmnopqrstuvwxyz"[x % 36u];
		x /= 36u;
	} while (x != 0);
	for (size_t i = 0; i < n; i++)
		out[i] = rev[n - 1 - i];
	out[n] = '\0';
}

bool index_is_wildcard(uint32_t index)
{
	return splitmix(index) % 4u == 0;
}

/*
 * Name <index> as a rule spells it: an exact host of two to four labels, or
 * the suffix of a wildcard rule. Returns its length.
 */
int rule_host_text(uint32_t index, char *out, size_t cap)
{
	uint64_t r = splitmix(index);
	char id[8];

	unique_label(index, id);
	if (index_is_wildcard(index))
		return snprintf(out, cap, "%s-%s.%s", id, word(r, 8), tld(r));
	switch ((r >> 16) % 3u) {
	case 0:
		return snprintf(out, cap, "%s.%s-%s.%s", word(r, 24), id, word(r, 8), tld(r));
	case 1:
		return snprintf(out, cap, "%s%s.%s", id, word(r, 8), tld(r));
	default:
		return snprintf(out, cap, "%s.%s.%s.%s", word(r, 24), word(r, 32), id, tld(r));
	}
}

/* A host a client sends for name <index>: the name, or one or two labels below a suffix. */
int client_host_text(uint32_t index, uint64_t salt, char *out, size_t cap)
{
	char base[HOST_NORM_BYTES];
	uint64_t r = splitmix(salt);

	rule_host_text(index, base, sizeof(base));

	if (!index_is_wildcard(index))
		return snprintf(out, cap, "%s", base);
	if (r % 2u == 0)
		return snprintf(out, cap, "%s.%s", word(r, 8), base);
	return snprintf(out, cap, "%s-%u.%s.%s", word(r, 8), (unsigned)(r >> 50), word(r, 24),
			base);
}

/* Bytes that never move once placed: rules and acl tables borrow them. */
class text_arena
{
      public:
	explicit text_arena(size_t cap) : bytes_(new char[cap]), cap_(cap)
	{
	}
	char *put(const char *s, size_t len)
	{
		if (len + 1 > cap_ - used_) {
			fprintf(stderr, "micro: text arena full\n");
			abort();
		}
		char *p = bytes_.get() + used_;
		memcpy(p, s, len);
		p[len] = '\0';
		used_ += len + 1;
		return p;
	}

      private:
	std::unique_ptr<char[]> bytes_;
	size_t cap_;
	size_t used_ = 0;
};

struct host_ref {
	const char *text;
	uint32_t len;
	uint32_t rule; /* hits: the index of the rule that must decide it */
};

struct acl_fixture {
	explicit acl_fixture(uint32_t count)
	    : rule_count(count), arena((size_t)count * 80u + 2u * LOOKUP_HOSTS * 96u)
	{
	}
	~acl_fixture()
	{
		acl_free(&acl);
	}
	uint32_t rule_count;
	text_arena arena;
	std::vector<struct acl_rule> rules;
	struct acl acl = {};
	std::vector<host_ref> hits;
	std::vector<host_ref> misses;
};

void rules_generate(acl_fixture &f)
{
	char text[HOST_NORM_BYTES];

	f.rules.assign(f.rule_count, acl_rule{});
	for (uint32_t i = 0; i < f.rule_count; i++) {
		struct acl_rule &r = f.rules[i];
		uint64_t mix = splitmix((uint64_t)i << 32);
		int n = rule_host_text(i, text, sizeof(text));
		r.host = f.arena.put(text, (size_t)n);
		r.host_len = (uint32_t)n;
		r.kind = (uint8_t)(index_is_wildcard(i) ? ACL_KIND_WILDCARD : ACL_KIND_NAME);
		n = snprintf(text, sizeof(text), "r%u", (unsigned)i);
		r.id = f.arena.put(text, (size_t)n);
		r.tier = (uint8_t)(mix % 20u == 0   ? TIER_DENY
				   : mix % 20u == 1 ? TIER_FAKE
						    : TIER_PASSTHROUGH);
		if ((mix >> 8) % 10u == 0) {
			r.ports = port_443;
			r.port_count = 1;
		}
		r.line = i + 1;
		r.col = 9;
	}
}

/* Hits name uniformly drawn rules; misses use indexes past the last rule. */
void lookups_generate(acl_fixture &f)
{
	char text[HOST_NORM_BYTES];

	f.hits.resize(LOOKUP_HOSTS);
	f.misses.resize(LOOKUP_HOSTS);
	for (uint32_t k = 0; k < LOOKUP_HOSTS; k++) {
		uint32_t rule = (uint32_t)(splitmix(0x1000000000ull + k) % f.rule_count);
		int n = client_host_text(rule, k, text, sizeof(text));
		f.hits[k] = { f.arena.put(text, (size_t)n), (uint32_t)n, rule };
		uint32_t absent = f.rule_count + k;
		n = rule_host_text(absent, text, sizeof(text));
		if (index_is_wildcard(absent))
			n = snprintf(text, sizeof(text), "www.%s", std::string(text).c_str());
		f.misses[k] = { f.arena.put(text, (size_t)n), (uint32_t)n, UINT32_MAX };
	}
}

/* Every hit must reach its rule and every miss none; anything else is a generator bug. */
bool lookups_verify(const acl_fixture &f)
{
	struct verdict v;

	for (const host_ref &h : f.hits) {
		acl_decide(&f.acl, h.text, h.len, LOOKUP_PORT, &v);
		if (v.rule != f.rules[h.rule].id)
			return false;
	}
	for (const host_ref &h : f.misses) {
		acl_decide(&f.acl, h.text, h.len, LOOKUP_PORT, &v);
		if (v.rule != nullptr || v.reason != REASON_HOST_NOT_ALLOWED)
			return false;
	}
	return true;
}

/* One fixture at a time (the 1M one holds about 250 MB), built on first use. */
std::unique_ptr<acl_fixture> fixture_cached;

acl_fixture *fixture_for(uint32_t rule_count)
{
	uint32_t dup_first = 0;
	uint32_t dup_second = 0;

	if (fixture_cached && fixture_cached->rule_count == rule_count)
		return fixture_cached.get();
	fixture_cached.reset();
	auto f = std::make_unique<acl_fixture>(rule_count);
	rules_generate(*f);
	lookups_generate(*f);
	int rc = acl_build(&f->acl, f->rules.data(), rule_count, &dup_first, &dup_second);
	if (rc != 0) {
		fprintf(stderr, "micro: acl_build: %s (rules %u and %u)\n", strerror(-rc),
			dup_first, dup_second);
		return nullptr;
	}
	if (!lookups_verify(*f)) {
		fprintf(stderr, "micro: generated lookups do not decide as expected\n");
		return nullptr;
	}
	fixture_cached = std::move(f);
	return fixture_cached.get();
}

void bm_policy_lookup(benchmark::State &state, uint32_t rule_count, bool hit)
{
	static_assert((LOOKUP_HOSTS & (LOOKUP_HOSTS - 1)) == 0, "the mask needs a power of two");
	acl_fixture *f = fixture_for(rule_count);

	if (f == nullptr) {
		state.SkipWithError("fixture set-up failed (see stderr)");
		return;
	}
	const host_ref *hosts = hit ? f->hits.data() : f->misses.data();
	const struct acl *acl = &f->acl;
	uint32_t next = 0;
	for (auto _ : state) {
		const host_ref &h = hosts[next++ & (LOOKUP_HOSTS - 1)];
		struct verdict v;
		acl_decide(acl, h.text, h.len, LOOKUP_PORT, &v);
		benchmark::DoNotOptimize(v.rule);
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	report_percentiles(state, [&](size_t k) {
		const host_ref &h = hosts[(next + k) & (LOOKUP_HOSTS - 1)];
		struct verdict v;
		acl_decide(acl, h.text, h.len, LOOKUP_PORT, &v);
		benchmark::DoNotOptimize(v.rule);
	});
}

/*
 * The whole per-request decision: acl_decide (normalise, lookup, ports) and
 * the sandbox's rate check (ratelimit_take, on one of 1024 buckets, the clock
 * moving a millisecond a request so the limit never refuses).
 */
void bm_decision(benchmark::State &state, uint32_t rule_count)
{
	acl_fixture *f = fixture_for(rule_count);

	if (f == nullptr) {
		state.SkipWithError("fixture set-up failed (see stderr)");
		return;
	}
	static struct ratelimit buckets[1024];
	const struct verdict_limits limits = { 1000000, 1000000, 0 };
	const struct acl *acl = &f->acl;
	uint64_t now_ms = 1;
	uint32_t next = 0;
	auto one = [&](size_t k) {
		const host_ref &h = f->hits[(next + k) & (LOOKUP_HOSTS - 1)];
		struct verdict v;
		uint32_t retry = 0;
		acl_decide(acl, h.text, h.len, LOOKUP_PORT, &v);
		bool ok =
		    ratelimit_take(&buckets[(next + k) & 1023u], &limits, 1, now_ms++, &retry);
		benchmark::DoNotOptimize(v.rule);
		benchmark::DoNotOptimize(ok);
	};
	for (auto _ : state) {
		one(0);
		next++;
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	report_percentiles(state, one);
}

void bm_policy_build(benchmark::State &state, uint32_t rule_count)
{
	acl_fixture *f = fixture_for(rule_count);

	if (f == nullptr) {
		state.SkipWithError("fixture set-up failed (see stderr)");
		return;
	}
	for (auto _ : state) {
		struct acl built;
		uint32_t dup_first = 0;
		uint32_t dup_second = 0;
		int rc = acl_build(&built, f->rules.data(), rule_count, &dup_first, &dup_second);
		state.PauseTiming();
		if (rc != 0)
			state.SkipWithError("acl_build failed");
		acl_free(&built);
		state.ResumeTiming();
	}
	state.SetItemsProcessed((int64_t)state.iterations() * rule_count);
}

/* ---- baselines: what a plain hash table and a bare signature cost ---- */

using host_set = std::unordered_set<std::string_view>;

/* The rules' hosts (a wildcard's suffix as its key) in a plain hash table. */
void host_set_fill(const acl_fixture &f, host_set &set)
{
	for (const struct acl_rule &r : f.rules)
		set.emplace(r.host, r.host_len);
}

/* The host as sent, then each suffix after a dot: true when one is a key. */
bool host_set_find(const host_set &set, const host_ref &h)
{
	std::string_view q(h.text, h.len);

	for (;;) {
		if (set.find(q) != set.end())
			return true;
		size_t dot = q.find('.');
		if (dot == std::string_view::npos)
			return false;
		q.remove_prefix(dot + 1);
	}
}

host_set *baseline_set;
uint32_t baseline_set_rules;

void bm_baseline_lookup(benchmark::State &state, uint32_t rule_count, bool hit)
{
	acl_fixture *f = fixture_for(rule_count);
	if (f == nullptr) {
		state.SkipWithError("fixture set-up failed (see stderr)");
		return;
	}
	if (baseline_set == nullptr || baseline_set_rules != rule_count) {
		delete baseline_set;
		baseline_set = new host_set();
		host_set_fill(*f, *baseline_set);
		baseline_set_rules = rule_count;
	}
	const host_ref *hosts = hit ? f->hits.data() : f->misses.data();
	for (uint32_t k = 0; k < LOOKUP_HOSTS; k++) {
		if (host_set_find(*baseline_set, hosts[k]) != hit) {
			state.SkipWithError("the hash table decides a host otherwise");
			return;
		}
	}
	uint32_t next = 0;
	for (auto _ : state) {
		bool found = host_set_find(*baseline_set, hosts[next++ & (LOOKUP_HOSTS - 1)]);
		benchmark::DoNotOptimize(found);
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	report_percentiles(state, [&](size_t k) {
		bool found = host_set_find(*baseline_set, hosts[(next + k) & (LOOKUP_HOSTS - 1)]);
		benchmark::DoNotOptimize(found);
	});
}

void bm_baseline_build(benchmark::State &state, uint32_t rule_count)
{
	acl_fixture *f = fixture_for(rule_count);
	if (f == nullptr) {
		state.SkipWithError("fixture set-up failed (see stderr)");
		return;
	}
	for (auto _ : state) {
		auto set = std::make_unique<host_set>();
		host_set_fill(*f, *set);
		benchmark::DoNotOptimize(set->size());
		state.PauseTiming();
		set.reset();
		state.ResumeTiming();
	}
	state.SetItemsProcessed((int64_t)state.iterations() * rule_count);
}

/* ---- audit_emit ---- */

/*
 * One writer for the whole run, opened on first use and warmed (every slot
 * touched once), closed by main. committed counts what this driver published.
 */
struct audit_bench {
	struct audit *audit = nullptr;
	struct audit_ring *ring = nullptr;
	uint64_t committed = 0;
} audit_state;

const char *const audit_hosts[] = { "api.github.com",
				    "registry.npmjs.org",
				    "pypi.org",
				    "files.pythonhosted.org",
				    "objects.githubusercontent.com",
				    "huggingface.co",
				    "deb.debian.org",
				    "proxy.golang.org" };
constexpr size_t AUDIT_HOST_COUNT = sizeof(audit_hosts) / sizeof(audit_hosts[0]);
const char audit_sandbox[] = "agent-7f3a";
const char audit_path[] = "/v1/packages/some-library/versions/latest";

/* What core/conn.c's audit_decision and record_common write for an allowed request. */
void emit_decision(struct audit_ring *ring, uint64_t n)
{
	uint64_t id = audit_next_id(ring);
	struct audit_record *rec = audit_claim(ring);
	if (rec == nullptr)
		return;
	bool is_connect = n % 4u != 0;
	const char *host = audit_hosts[n % AUDIT_HOST_COUNT];
	rec->kind = AUDIT_DECISION;
	rec->id = id;
	rec->allowed = true;
	rec->status = 200;
	rec->conn_id = n;
	rec->port = is_connect ? 443 : 80;
	rec->tier = TIER_PASSTHROUGH;
	rec->reason = REASON_NONE;
	audit_copy(rec->sandbox, sizeof(rec->sandbox), audit_sandbox, strlen(audit_sandbox));
	audit_copy(rec->method, sizeof(rec->method), is_connect ? "CONNECT" : "GET",
		   is_connect ? 7 : 3);
	audit_copy(rec->host, sizeof(rec->host), host, strlen(host));
	audit_copy(rec->rule, sizeof(rec->rule), "default/12", 10);
	if (!is_connect)
		audit_copy(rec->path, sizeof(rec->path), audit_path, sizeof(audit_path) - 1);
	struct in_addr upstream;
	upstream.s_addr = htonl(0xc6336400u | (uint32_t)(n & 0xffu)); /* 198.51.100.x */
	char ip[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET, &upstream, ip, sizeof(ip));
	snprintf(rec->addr, sizeof(rec->addr), "%s:%u", ip, (unsigned)rec->port);
	audit_commit(ring, rec);
}

/* Waits (bounded, 10 s) until the writer has written every committed record. */
bool audit_wait_drained()
{
	const struct timespec nap = { 0, 50000 };

	for (int i = 0; i < 200000; i++) {
		if (audit_written(audit_state.audit) >= audit_state.committed)
			return true;
		nanosleep(&nap, nullptr);
	}
	return false;
}

bool audit_bench_open()
{
	if (audit_state.audit != nullptr)
		return true;
	if (audit_open("/dev/null", 1, &audit_state.audit) != 0)
		return false;
	audit_state.ring = audit_ring_get(audit_state.audit, 0);
	for (uint32_t i = 0; i < LIMITS_AUDIT_RING_RECORDS; i++)
		emit_decision(audit_state.ring, audit_state.committed++);
	return audit_wait_drained();
}

void audit_bench_close()
{
	audit_close(audit_state.audit);
	audit_state = audit_bench{};
}

/*
 * The slots the producer may fill without a drop. The writer counts a record
 * written only after freeing its slot, so committed - written never
 * under-counts the ring. Below a quarter of the ring, waits (untimed) for the
 * writer to empty it: the data path never waits, and a full ring would drop.
 */
uint64_t audit_room(benchmark::State &state)
{
	uint64_t in_ring = audit_state.committed - audit_written(audit_state.audit);

	if (in_ring < LIMITS_AUDIT_RING_RECORDS * 3u / 4u)
		return LIMITS_AUDIT_RING_RECORDS - in_ring;
	state.PauseTiming();
	if (!audit_wait_drained())
		state.SkipWithError("the audit writer did not drain the ring");
	state.ResumeTiming();
	return LIMITS_AUDIT_RING_RECORDS;
}

void bm_audit_emit(benchmark::State &state)
{
	if (!audit_bench_open()) {
		state.SkipWithError("audit_open(/dev/null) failed or did not drain");
		return;
	}
	uint64_t dropped_before = audit_dropped(audit_state.audit);
	uint64_t room = 0;
	for (auto _ : state) {
		if (room == 0)
			room = audit_room(state);
		emit_decision(audit_state.ring, audit_state.committed++);
		room--;
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	state.counters["dropped"] = (double)(audit_dropped(audit_state.audit) - dropped_before);
}

/* ---- tls_leaf_mint ---- */

/* A mint is ~10-50 us: this many single timings keep a repetition near 0.1 s. */
constexpr size_t MINT_SAMPLES = 2048;
constexpr int MINT_CA_DAYS = 2;

/* Adds extension <nid> = <value> to <x>, issued by itself. */
bool add_ext(X509 *x, int nid, const char *value)
{
	X509V3_CTX ctx;

	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
	bool ok = ext != nullptr && X509_add_ext(x, ext, -1) == 1;
	X509_EXTENSION_free(ext);
	return ok;
}

/* A self-signed P-256 CA as tools/agentsnet/cainit.c makes one (CA:TRUE, keyCertSign, SKI). */
X509 *mint_ca_cert(EVP_PKEY *key)
{
	X509 *x = X509_new();
	if (x == nullptr)
		return nullptr;
	X509_NAME *name = X509_get_subject_name(x);
	bool ok = X509_set_version(x, X509_VERSION_3) == 1 &&
		  ASN1_INTEGER_set(X509_get_serialNumber(x), 1) == 1 &&
		  X509_gmtime_adj(X509_getm_notBefore(x), -3600) != nullptr &&
		  X509_gmtime_adj(X509_getm_notAfter(x), 86400L * MINT_CA_DAYS) != nullptr &&
		  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
					     (const unsigned char *)"agentsnet micro CA", -1, -1,
					     0) == 1 &&
		  X509_set_issuer_name(x, name) == 1 && X509_set_pubkey(x, key) == 1 &&
		  add_ext(x, NID_basic_constraints, "critical,CA:TRUE") &&
		  add_ext(x, NID_key_usage, "critical,keyCertSign,cRLSign") &&
		  add_ext(x, NID_subject_key_identifier, "hash") &&
		  X509_sign(x, key, EVP_sha256()) > 0;
	if (!ok)
		X509_free(x);
	return ok ? x : nullptr;
}

/* 0600: tls_ca_load refuses a key group or others may read. */
bool write_pem(const std::string &path, X509 *cert, EVP_PKEY *key)
{
	int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : nullptr;
	if (f == nullptr) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	bool ok = cert != nullptr
		      ? PEM_write_X509(f, cert) == 1
		      : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
	return fclose(f) == 0 && ok;
}

/* The CA every mint uses, made and loaded on first use; freed by main. */
struct tls_ca *mint_ca;

struct tls_ca *mint_ca_get(std::string &why)
{
	char dir[] = "/tmp/agentsnet-micro.XXXXXX";
	char err[256] = "";

	if (mint_ca != nullptr)
		return mint_ca;
	if (tls_library_init(err, sizeof(err)) != 0 || mkdtemp(dir) == nullptr) {
		why = err[0] != '\0' ? err : "mkdtemp failed";
		return nullptr;
	}
	std::string cert_path = std::string(dir) + "/ca.pem";
	std::string key_path = std::string(dir) + "/ca.key";
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = key != nullptr ? mint_ca_cert(key) : nullptr;
	bool written = cert != nullptr && write_pem(cert_path, cert, nullptr) &&
		       write_pem(key_path, nullptr, key);
	int rc = written ? tls_ca_load(cert_path.c_str(), key_path.c_str(),
				       TLS_CA_LEAF_DAYS_DEFAULT, &mint_ca, err, sizeof(err))
			 : -EIO;
	unlink(cert_path.c_str());
	unlink(key_path.c_str());
	rmdir(dir);
	X509_free(cert);
	EVP_PKEY_free(key);
	if (rc != 0)
		why = written ? err : "making the throwaway CA failed";
	return rc == 0 ? mint_ca : nullptr;
}

void bm_tls_leaf_mint(benchmark::State &state)
{
	std::string why;
	struct tls_ca *ca = mint_ca_get(why);

	if (ca == nullptr) {
		state.SkipWithError(("CA set-up failed: " + why).c_str());
		return;
	}
	int64_t now = (int64_t)time(nullptr);
	uint64_t next = 0;
	bool failed = false;
	auto one = [&](size_t) {
		char host[64];
		int len = snprintf(host, sizeof(host), "h%llu.api.example.com",
				   (unsigned long long)next++);
		X509 *leaf = nullptr;
		failed |= tls_leaf_mint(ca, host, (size_t)len, now, &leaf) != 0;
		X509_free(leaf);
	};
	for (auto _ : state)
		one(0);
	state.SetItemsProcessed((int64_t)state.iterations());
	report_percentiles(state, one, MINT_SAMPLES);
	if (failed)
		state.SkipWithError("tls_leaf_mint failed");
}

/* One ECDSA P-256 signature of a new 512-byte message: what a mint cannot do without. */
void bm_baseline_sign(benchmark::State &state)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (key == nullptr || md == nullptr) {
		EVP_MD_CTX_free(md);
		EVP_PKEY_free(key);
		state.SkipWithError("no P-256 key");
		return;
	}
	unsigned char msg[512] = { 0 };
	unsigned char sig[128];
	uint64_t next = 0;
	bool failed = false;
	auto one = [&](size_t) {
		size_t sig_len = sizeof(sig);
		uint64_t n = next++;
		memcpy(msg, &n, sizeof(n));
		failed |= EVP_DigestSignInit(md, nullptr, EVP_sha256(), nullptr, key) != 1 ||
			  EVP_DigestSign(md, sig, &sig_len, msg, sizeof(msg)) != 1;
		benchmark::DoNotOptimize(sig_len);
	};
	for (auto _ : state)
		one(0);
	state.SetItemsProcessed((int64_t)state.iterations());
	report_percentiles(state, one, MINT_SAMPLES);
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(key);
	if (failed)
		state.SkipWithError("EVP_DigestSign failed");
}

void register_all()
{
	struct head_shape {
		const char *name;
		const char *head;
		size_t len;
	};
	static const head_shape shapes[] = {
		{ "http1_parse/curl_get", curl_get_head, sizeof(curl_get_head) - 1 },
		{ "http1_parse/connect", connect_head, sizeof(connect_head) - 1 },
		{ "http1_parse/browser_1k", browser_1k_head, sizeof(browser_1k_head) - 1 },
	};
	for (const head_shape &s : shapes)
		benchmark::RegisterBenchmark(s.name, bm_http1_parse, s.head, s.len);

	/* Grouped by size: the fixture cache keeps one table at a time. */
	static const uint32_t sizes[] = { 1000, 100000, 1000000 };
	for (uint32_t rules : sizes) {
		std::string base = "policy_lookup/" + std::to_string(rules);
		benchmark::RegisterBenchmark((base + "/hit").c_str(), bm_policy_lookup, rules,
					     true);
		benchmark::RegisterBenchmark((base + "/miss").c_str(), bm_policy_lookup, rules,
					     false);
		if (rules == 1000000) {
			benchmark::RegisterBenchmark(
			    (std::string("decision/") + std::to_string(rules)).c_str(), bm_decision,
			    rules);
			std::string floor = "baseline_lookup/" + std::to_string(rules);
			benchmark::RegisterBenchmark((floor + "/hit").c_str(), bm_baseline_lookup,
						     rules, true);
			benchmark::RegisterBenchmark((floor + "/miss").c_str(), bm_baseline_lookup,
						     rules, false);
			benchmark::RegisterBenchmark(
			    ("baseline_build/" + std::to_string(rules)).c_str(), bm_baseline_build,
			    rules)
			    ->Unit(benchmark::kMillisecond);
		}
		if (rules >= 100000)
			benchmark::RegisterBenchmark(
			    ("policy_build/" + std::to_string(rules)).c_str(), bm_policy_build,
			    rules)
			    ->Unit(benchmark::kMillisecond);
	}
	benchmark::RegisterBenchmark("audit_emit", bm_audit_emit);
	benchmark::RegisterBenchmark("tls_leaf_mint", bm_tls_leaf_mint)
	    ->Unit(benchmark::kMicrosecond);
	benchmark::RegisterBenchmark("baseline_sign", bm_baseline_sign)
	    ->Unit(benchmark::kMicrosecond);
}

} /* namespace */

int main(int argc, char **argv)
{
	tsc_calibrate();
	register_all();
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	delete baseline_set;
	fixture_cached.reset();
	audit_bench_close();
	tls_ca_free(&mint_ca);
	return 0;
}
