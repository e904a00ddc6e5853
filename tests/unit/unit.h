/*
 * What every libcheck suite's main() shares: run the suite, turn the result
 * into an exit status (tests/run-unit.sh reads only that). And the helpers
 * more than one suite needs: recording a skip, probing a tool, reading a whole
 * file, a Unix socket's address, and guard areas for parsers and writers that must stay inside their
 * bounds.
 *
 * A skip is never silent. libcheck knows only pass and fail, so a test that
 * cannot run (all or part of its checks) here calls unit_skip() and returns:
 * the skip is printed ("SKIP: <test>: <why>") and appended to the file named
 * by $AN_UNIT_SKIP_FILE, which tests/run-unit.sh sets, counts and prints in
 * its summary; with CI=true, a skip that is not on the allowlist in
 * docs/testing.md ("Skips") fails the run. A bare `printf("skip...")` and
 * `return` is what this replaces: run-unit.sh fails a log that holds one.
 */
#ifndef AN_TESTS_UNIT_UNIT_H
#define AN_TESTS_UNIT_UNIT_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/pool.h"

/* main()'s status for a suite that cannot run here (tests/run-unit.sh: skipped). */
#define UNIT_SKIP 77

/* The environment variable naming the file each skip is appended to (one line each). */
#define UNIT_SKIP_FILE_ENV "AN_UNIT_SKIP_FILE"

/* How long a skip's line may be; a longer reason is cut, never split. */
#define UNIT_SKIP_LINE_BYTES_MAX 512u

/*
 * Records that <test> skips (the rest of) its checks for the reason <fmt>,
 * <ap>: prints "SKIP: <test>: <why>" on stderr and appends the same line, with
 * one write (O_APPEND: whole lines even from the suite's forked children), to
 * the file named by $AN_UNIT_SKIP_FILE when it is set. A failure to record
 * aborts (a failed test, or a crashed suite from main()): a skip that no one
 * can count must not pass. No ck_assert here: main() may call it too.
 */
static inline void unit_skip_record(const char *test, const char *fmt, va_list ap)
{
	char why[UNIT_SKIP_LINE_BYTES_MAX], line[UNIT_SKIP_LINE_BYTES_MAX + 64];

	vsnprintf(why, sizeof(why), fmt, ap);
	for (char *c = why; *c != '\0'; c++) {
		if (*c == '\n')
			*c = ' ';
	}
	int n = snprintf(line, sizeof(line), "SKIP: %s: %s\n", test, why);
	if (n <= 0)
		abort();
	size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
	line[len - 1] = '\n';
	fputs(line, stderr);
	const char *path = getenv(UNIT_SKIP_FILE_ENV);
	if (path == NULL || path[0] == '\0')
		return;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd == -1 || write(fd, line, len) != (ssize_t)len || close(fd) == -1) {
		fprintf(stderr, "cannot record a skip in %s: %s\n", path, strerror(errno));
		abort();
	}
}

/*
 * Records that the running test skips (the rest of) its checks, for the
 * reason <fmt> (printf-style, no newline): see unit_skip_record(). The caller
 * returns right after. Returns true, so that a helper can say
 * `return !unit_skip(...)` for "go on or not".
 */
__attribute__((format(printf, 1, 2))) static inline bool unit_skip(const char *fmt, ...)
{
	va_list ap;
	const char *test = tcase_name();

	va_start(ap, fmt);
	unit_skip_record(test != NULL ? test : "(suite)", fmt, ap);
	va_end(ap);
	return true;
}

/* Records that the whole suite skips, from main() before unit_run(), for the reason <fmt>. */
__attribute__((format(printf, 1, 2))) static inline void unit_suite_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	unit_skip_record("(suite)", fmt, ap);
	va_end(ap);
}

/* Whether the shell command <probe> succeeds; records the suite's skip for <why> when not. */
static inline bool unit_can(const char *probe, const char *why)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s >/dev/null 2>&1", probe);
	if (system(cmd) == 0)
		return true;
	unit_suite_skip("%s", why);
	return false;
}

/*
 * Drops (<on> false) or gives back (<on> true, when permitted) the effective
 * CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH of the calling thread, so that a
 * check of "an unreadable file is refused" runs as root too, instead of being
 * left out because root reads everything. Unprivileged, it changes nothing.
 */
static inline void unit_dac_override(bool on)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	const uint32_t bits = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);

	ck_assert_int_eq(syscall(SYS_capget, &hdr, data), 0);
	if (on)
		data[0].effective |= bits & data[0].permitted;
	else
		data[0].effective &= ~bits;
	ck_assert_int_eq(syscall(SYS_capset, &hdr, data), 0);
}

/* <path> as a Unix socket's address, for bind or connect; the test fails when it does not fit. */
static inline struct sockaddr_un unit_unix_addr(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	ck_assert_uint_lt(strlen(path), sizeof(sun.sun_path));
	memcpy(sun.sun_path, path, strlen(path) + 1);
	return sun;
}

/*
 * Writes the <len> bytes at <data> to <path>, replacing what was there, mode
 * 0600 (the daemon refuses a secret's file that others may read).
 */
static inline void unit_spit(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "open %s", path);
	ck_assert_int_eq(fchmod(fileno(f), 0600), 0);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* The whole file at <path> (owned: pool_free it), NUL-terminated; its length in *<len>. */
static inline char *unit_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	ck_assert_int_ge(n, 0);
	rewind(f);
	char *buf = pool_malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* How many usable bytes a guard area has before its PROT_NONE page (rounded up to pages). */
#define UNIT_GUARD_AREA_BYTES (64u * 1024u)

/*
 * A guard area: bytes that end right before a PROT_NONE page, so that input
 * placed at its end makes a parser that reads one byte past its length crash,
 * and a buffer placed there makes a writer that writes one byte past its cap
 * crash, instead of passing by luck. A zeroed struct (a test's static) is
 * mapped on first use; the mapping lives as long as the test's process.
 */
struct unit_guard {
	char *base;
	size_t size; /* usable bytes before the PROT_NONE page */
};

/* Maps <g>: UNIT_GUARD_AREA_BYTES (page-rounded) read-write, then one PROT_NONE page. */
static inline void unit_guard_init(struct unit_guard *g)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t size = (UNIT_GUARD_AREA_BYTES + page - 1) / page * page;
	char *m =
	    mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	ck_assert_int_eq(mprotect(m + size, page, PROT_NONE), 0);
	g->base = m;
	g->size = size;
}

/* Where <n> bytes must start in <g> to end right before its guard page. */
static inline char *unit_guard_end(struct unit_guard *g, size_t n)
{
	if (g->base == NULL)
		unit_guard_init(g);
	ck_assert_uint_le(n, g->size);
	return g->base + g->size - n;
}

/* A copy of the <n> bytes at <s> in <g>, ending right before its guard page (borrowed). */
static inline const char *unit_guard_place(struct unit_guard *g, const void *s, size_t n)
{
	char *dst = unit_guard_end(g, n);

	if (n > 0)
		memcpy(dst, s, n);
	return dst;
}

/* The next of a xorshift64 sequence whose state is *<s> (never 0): test inputs, not secrets. */
static inline uint64_t unit_rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A DNS name of <len> bytes at <buf> (NUL after it) made of <label>-byte labels of 'a', the last one shorter. */
static inline void unit_host_name(char *buf, size_t len, size_t label)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (i + 1) % (label + 1) == 0 ? '.' : 'a';
	buf[len] = '\0';
	if (buf[len - 1] == '.')
		buf[len - 1] = 'a';
}

/*
 * Runs every test of <s> (taken), each in a child of its own whatever CK_FORK
 * says (the abort tests, and tests that change limits, need one). Returns
 * EXIT_SUCCESS when all passed, else EXIT_FAILURE.
 */
static inline int unit_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/*
 * unit_run for a suite that works in a directory of its own: makes <dir> (a
 * mkdtemp template, filled in here) first and removes it after every test ran,
 * failed ones too (whose teardowns do not run). EXIT_FAILURE also when the
 * directory cannot be made or removed.
 */
static inline int unit_run_in_dir(Suite *s, char *dir)
{
	char cmd[128];

	if (mkdtemp(dir) == NULL)
		return EXIT_FAILURE;
	int ret = unit_run(s);
	int n = snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (n <= 0 || (size_t)n >= sizeof(cmd))
		return EXIT_FAILURE;
	return system(cmd) == 0 ? ret : EXIT_FAILURE;
}

#endif /* AN_TESTS_UNIT_UNIT_H */
