/*
 * What the suites of the policy loader's files (a suite here for each file
 * of it, named after the file) share: the state a test loads into, the
 * allocation wrappers that let the Nth allocation fail, the policy most cases
 * start from (HEAD, RULE, MINIMAL), loading a YAML buffer and expecting it to
 * load or to fail with a message (at a line and column found in the text),
 * each allocation of a load failing in turn, the verdict wrappers, texts for
 * generated policies, the examples of docs/policy.md, and a suite's one test
 * case.
 *
 * The state is a few globals (cfg, pol, err, dir) rather than a context
 * passed around: every test works on one loaded policy, and libcheck runs
 * each test in a process of its own, so nothing outlives a test but what
 * policytest_teardown removes. Each helper asserts with libcheck, so a
 * failure names the test; the expect_ macros add the caller's line.
 *
 * Include it once, after the "../../../policy/<file>.c" the suite tests (the
 * archive supplies the loader's other files), in a suite that is one file:
 * it defines pool_malloc and the other wrappers of core/pool.h, so
 * core/pool.o is not linked from the archive, and every file of the loader
 * allocates through them. A suite that watches what is
 * released (inject.c) defines POLICYTEST_OWN_FREE first and brings its own
 * pool_free and pool_free_secret.
 */
#ifndef AN_TESTS_UNIT_POLICY_POLICYTEST_H
#define AN_TESTS_UNIT_POLICY_POLICYTEST_H

#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/pool.h"
#include "core/verdict.h"
#include "policy/policy.h"
#include "tests/unit/unit.h"

static struct config cfg;
static struct policy *pol;
static char err[8192]; /* room for a message that names a 4095-byte path */
static char dir[64];   /* the test's fresh directory ("" when it has none), removed by teardown */

/* Called after each load of expect_ok_at and expect_error_at, with the caller's line; or NULL. */
static void (*policytest_on_load)(int line);

/* --- allocations ------------------------------------------------------------------------- */

static uint64_t alloc_count;   /* allocations since the test last set it to 0 */
static uint64_t alloc_fail_at; /* the allocation (counted from 1) that fails; 0: none */

/* Counts one allocation; whether it is the one that must fail. */
static inline bool alloc_fails(void)
{
	alloc_count++;
	return alloc_fail_at != 0 && alloc_count == alloc_fail_at;
}

void *pool_malloc(size_t size)
{
	return alloc_fails() ? NULL : malloc(size);
}

void *pool_calloc(size_t n, size_t size)
{
	return alloc_fails() ? NULL : calloc(n, size);
}

void *pool_realloc(void *p, size_t size)
{
	return alloc_fails() ? NULL : realloc(p, size);
}

char *pool_strndup(const char *s, size_t len)
{
	return alloc_fails() ? NULL : strndup(s, len);
}

#ifndef POLICYTEST_OWN_FREE
void pool_free(void *p)
{
	free(p);
}

void pool_free_secret(void *p, size_t len)
{
	if (p != NULL)
		explicit_bzero(p, len);
	free(p);
}
#endif

/* --- texts ------------------------------------------------------------------------------- */

#define POLICYTEST_TEXTS 4
static char *policytest_texts[POLICYTEST_TEXTS]; /* owned: what textf returned last */
static uint32_t policytest_text_next;

/*
 * printf into a text of any length (borrowed: it lives until the fourth call
 * after this one, or teardown), for a policy or a message used at once.
 */
static inline __attribute__((format(printf, 1, 2))) const char *textf(const char *fmt, ...)
{
	char *text = NULL;
	va_list ap;

	va_start(ap, fmt);
	int n = vasprintf(&text, fmt, ap);
	va_end(ap);
	ck_assert_int_ge(n, 0);
	uint32_t slot = policytest_text_next++ % POLICYTEST_TEXTS;
	free(policytest_texts[slot]);
	policytest_texts[slot] = text;
	return text;
}

/* <n> bytes of <c>, NUL-terminated (owned: free it). */
static inline char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* A growing text for a generated policy, written through g->f (owned: free g->buf). */
struct gen {
	char *buf;
	size_t len;
	FILE *f;
};

/* Starts <g> empty; g->buf holds what was written once g->f is flushed. */
static inline void gen_open(struct gen *g)
{
	g->f = open_memstream(&g->buf, &g->len);
	ck_assert_ptr_nonnull(g->f);
}

/* Ends the writing to <g>; returns its text, g->buf (owned by the caller). */
static inline const char *gen_close(struct gen *g)
{
	ck_assert_int_eq(fclose(g->f), 0);
	return g->buf;
}

/* "[<item>1, <item>2, ..., <item><n>", a flow sequence the caller closes (a textf text). */
static inline const char *flow_items(const char *item, int n)
{
	struct gen g;

	gen_open(&g);
	for (int i = 1; i <= n; i++)
		fprintf(g.f, "%s%s%d", i == 1 ? "[" : ", ", item, i);
	const char *text = textf("%s", gen_close(&g));
	free(g.buf);
	return text;
}

/* --- the policy most cases start from ---------------------------------------------------- */

/* The policy header used by most cases: the first rule starts on line 5, column 7. */
#define HEAD "version: 1\nprofiles:\n  p:\n    rules:\n"
#define RULE(host) \
	"    - host: " host "\n      tier: passthrough\n      owner: o\n      reason: r\n"
#define MINIMAL HEAD RULE("a.test")

/* --- a test's state ---------------------------------------------------------------------- */

/*
 * Gives the test the default config, no policy, an empty message and, with
 * <dir_template> ("/tmp/name-XXXXXX"; NULL: none), a fresh directory in dir.
 */
static inline void policytest_setup(const char *dir_template)
{
	ck_assert_int_eq(config_init_defaults(&cfg), 0);
	pol = NULL;
	err[0] = '\0';
	dir[0] = '\0';
	if (dir_template != NULL) {
		snprintf(dir, sizeof(dir), "%s", dir_template);
		ck_assert_ptr_nonnull(mkdtemp(dir));
	}
}

/* Releases the policy, the config and the texts, and removes dir with all in it. */
static inline void policytest_teardown(void)
{
	char cmd[256];

	policy_free(pol);
	pol = NULL;
	config_free(&cfg);
	for (uint32_t i = 0; i < POLICYTEST_TEXTS; i++) {
		free(policytest_texts[i]);
		policytest_texts[i] = NULL;
	}
	if (dir[0] == '\0')
		return;
	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx '%s'; rm -rf '%s'", dir, dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* --- loading ----------------------------------------------------------------------------- */

/* Loads <yaml> as the file <name> into cfg and pol (the previous policy freed); its result. */
static inline int load_named(const char *name, const char *yaml)
{
	policy_free(pol);
	pol = NULL;
	return policy_load_buffer(name, yaml, strlen(yaml), &cfg, &pol, err, sizeof(err));
}

/* load_named as "t.yaml", the name every expected message starts with. */
static inline int load(const char *yaml)
{
	return load_named("t.yaml", yaml);
}

#define expect_ok(yaml)          expect_ok_at(__LINE__, "t.yaml", (yaml))
#define expect_error(yaml, want) expect_error_at(__LINE__, "t.yaml", (yaml), (want))

/* Asserts that <yaml>, loaded as <name>, loads; the message names the caller's <line>. */
static inline void expect_ok_at(int line, const char *name, const char *yaml)
{
	int rc = load_named(name, yaml);

	if (policytest_on_load != NULL)
		policytest_on_load(line);
	ck_assert_msg(rc == 0, "line %d: rc %d: %s", line, rc, err);
	ck_assert_ptr_nonnull(pol);
}

/* Asserts that <yaml>, loaded as <name>, is refused (-EINVAL) with a message starting <want>. */
static inline void expect_error_at(int line, const char *name, const char *yaml, const char *want)
{
	int rc = load_named(name, yaml);

	if (policytest_on_load != NULL)
		policytest_on_load(line);
	ck_assert_msg(rc == -EINVAL, "line %d: rc %d (want -EINVAL), err \"%s\"", line, rc, err);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
		      "line %d:\n  got  \"%s\"\n  want \"%s\"", line, err, want);
	ck_assert_ptr_null(pol);
}

/*
 * "<name>:<line>:<col>: <msg>" for the first <needle> of <yaml> (a textf
 * text): the place a refusal of <yaml> loaded as <name> must name.
 */
static inline const char *policytest_at(const char *name, const char *yaml, const char *needle,
					const char *msg)
{
	unsigned line = 1;
	unsigned col = 1;

	const char *hit = strstr(yaml, needle);
	ck_assert_msg(hit != NULL, "\"%s\" is not in the policy", needle);
	for (const char *c = yaml; c < hit; c++) {
		col = *c == '\n' ? 1 : col + 1;
		line += *c == '\n';
	}
	return textf("%s:%u:%u: %s", name, line, col, msg);
}

/* Loads <yaml> as "t.yaml", expecting a refusal at its first <needle> with <msg>. */
#define expect_error_at_needle(yaml, needle, msg)                              \
	do {                                                                   \
		const char *y_ = (yaml);                                       \
		expect_error_at(__LINE__, "t.yaml", y_,                        \
				policytest_at("t.yaml", y_, (needle), (msg))); \
	} while (0)

/* A policy refused at the first <needle> of its text with <msg>. */
struct refusal {
	const char *yaml;
	const char *needle;
	const char *msg;
};

/* Each of the <n> policies of <cases> is refused as it says. */
static inline void expect_refusals(const struct refusal *cases, size_t n)
{
	for (size_t i = 0; i < n; i++)
		expect_error_at_needle(cases[i].yaml, cases[i].needle, cases[i].msg);
}

/* cfg's daemon.ingress listen, public_url and prefix (NULL: unset). */
static inline void expect_daemon(const char *listen, const char *public_url, const char *prefix)
{
	ck_assert_pstr_eq(cfg.ingress_listen, listen);
	ck_assert_pstr_eq(cfg.ingress_public_url, public_url);
	ck_assert_pstr_eq(cfg.ingress_prefix, prefix);
}

#define count_allocations(yaml) count_allocations_at(__LINE__, (yaml))

/* Asserts that <yaml> loads (as expect_ok_at); returns how many allocations the load made. */
static inline uint64_t count_allocations_at(int line, const char *yaml)
{
	alloc_count = 0;
	expect_ok_at(line, "t.yaml", yaml);
	return alloc_count;
}

/* load of <yaml> with its <n>th allocation (counted from 1) made to fail; its result. */
static inline int load_failing(uint64_t n, const char *yaml)
{
	alloc_count = 0;
	alloc_fail_at = n;
	int rc = load(yaml);
	alloc_fail_at = 0;
	return rc;
}

/* Asserts that the load whose <n>th allocation failed (result <rc>) failed cleanly. */
static inline void expect_out_of_memory(uint64_t n, int rc)
{
	ck_assert_msg(rc == -ENOMEM, "allocation %llu: rc %d: %s", (unsigned long long)n, rc, err);
	ck_assert_str_eq(err, "t.yaml: out of memory");
	ck_assert_ptr_null(pol);
}

/*
 * Loads <yaml> with each of its first <total> allocations failing in turn
 * (count_allocations tells how many a load makes). A load that fails must
 * fail cleanly (expect_out_of_memory), and then <failed> checks what it left;
 * one that loads (only a shrinking realloc may fail without failing the
 * load) is checked by <loaded>. Either callback may be NULL.
 */
static inline void expect_allocation_failures(const char *yaml, uint64_t total,
					      void (*loaded)(void), void (*failed)(void))
{
	for (uint64_t n = 1; n <= total; n++) {
		int rc = load_failing(n, yaml);
		if (rc == 0) {
			if (loaded != NULL)
				loaded();
			continue;
		}
		expect_out_of_memory(n, rc);
		if (failed != NULL)
			failed();
	}
}

/* --- verdicts ---------------------------------------------------------------------------- */

/* pol's verdict for <host>:<port> in <profile>; every field is poisoned first, to be filled. */
static inline struct verdict decide_port(uint32_t profile, const char *host, uint16_t port)
{
	struct verdict v;

	memset(&v, 0xa5, sizeof(v));
	policy_verdict_ops.decide(pol, profile, host, strlen(host), port, &v);
	return v;
}

/* decide_port on port 443. */
static inline struct verdict decide(uint32_t profile, const char *host)
{
	return decide_port(profile, host, 443);
}

/* Asserts that <l> is {<rate>, <burst>, <concurrent>}. */
static inline void expect_limits(struct verdict_limits l, uint32_t rate, uint32_t burst,
				 uint32_t concurrent)
{
	ck_assert_uint_eq(l.requests_per_second, rate);
	ck_assert_uint_eq(l.burst, burst);
	ck_assert_uint_eq(l.concurrent, concurrent);
}

/* --- docs/policy.md ---------------------------------------------------------------------- */

/* The whole of docs/policy.md, NUL-terminated (owned: pool_free it). */
static inline char *docs_text(void)
{
	static const char suffix[] = "tests/unit/policy/policytest.h";
	size_t root = strlen(__FILE__) - strlen(suffix);
	char path[4096];
	size_t len = 0;

	ck_assert_str_eq(&__FILE__[root], suffix);
	snprintf(path, sizeof(path), "%.*sdocs/policy.md", (int)root, __FILE__);
	return unit_slurp(path, &len);
}

/*
 * The first ```yaml block of docs/policy.md after <after> (NULL: from the
 * start), its last newline included (owned: pool_free it).
 */
static inline char *docs_block(const char *after)
{
	char *text = docs_text();
	const char *from = after != NULL ? strstr(text, after) : text;

	ck_assert_ptr_nonnull(from);
	const char *start = strstr(from, "```yaml\n");
	ck_assert_ptr_nonnull(start);
	start += strlen("```yaml\n");
	const char *end = strstr(start, "\n```");
	ck_assert_ptr_nonnull(end);
	char *block = pool_strndup(start, (size_t)(end - start) + 1);
	pool_free(text);
	return block;
}

/* The block docs_block(<after>) as a whole policy: "version: 1" first (owned: free it). */
static inline char *docs_policy(const char *after)
{
	char *block = docs_block(after);
	char *yaml = NULL;

	ck_assert_int_ge(asprintf(&yaml, "version: 1\n%s", block), 0);
	pool_free(block);
	return yaml;
}

/* --- the suite ----------------------------------------------------------------------------- */

/*
 * A suite <name> of one test case <tcase_name> (in *<tc>, for the caller to
 * add its tests to): <setup> and policytest_teardown around each test, each
 * test given 60 s.
 */
static inline Suite *policytest_suite(const char *name, const char *tcase_name, void (*setup)(void),
				      TCase **tc)
{
	Suite *s = suite_create(name);

	*tc = tcase_create(tcase_name);
	tcase_add_checked_fixture(*tc, setup, policytest_teardown);
	tcase_set_timeout(*tc, 60);
	suite_add_tcase(s, *tc);
	return s;
}

#endif /* AN_TESTS_UNIT_POLICY_POLICYTEST_H */
