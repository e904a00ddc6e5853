/*
 * The audit trail: per-producer SPSC rings of fixed records, drained by one
 * writer thread that formats JSON lines and appends them to the file.
 *
 * Producer: audit_claim hands out the zeroed slot at head unless the ring is
 * full; audit_commit stamps the time and publishes head with a release store.
 * The producer keeps the last tail it saw and reads the writer's cache line
 * only when the ring looks full: no lock, no syscall but clock_gettime (vDSO).
 * A full ring drops and counts the record; the data path never waits for the
 * disk. Rejected: a locked queue (a slow disk stalls every worker) and waking
 * the writer through an eventfd or futex (a syscall per record); the writer
 * polls, sleeping AUDIT_IDLE_SLEEP_NS when every ring is empty.
 *
 * Writer: takes at most AUDIT_BATCH_RECORDS per ring per pass into one
 * AUDIT_OUT_BYTES buffer, formats by hand (no stdio, locale or tz lock) and
 * write()s it whole, retrying EINTR and short writes. A failed write counts
 * its records as lost (audit_lost), cuts what it wrote of them off the file's
 * end so no torn line stays (a pipe, which cannot be cut, gets a newline
 * first instead), and sets audit_failing until a write succeeds again. While
 * failing, each write first tries an "audit_gap" notice of the records lost
 * so far and the time span since the first failure (one a second when there
 * is nothing else to write; for a regular file, only once its file system has
 * a buffer's worth of room); the first that lands ends the gap, and stderr
 * says so. Drops are reported in an
 * "audit_dropped" notice with the cumulative count (at most one per
 * AUDIT_DROP_NOTICE_NS, always one at close); the last line is an
 * "audit_closed" notice of the totals. audit_written counts ring records,
 * not the writer's own notices (whose ids use ring AUDIT_WRITER_INDEX).
 *
 * Rotation: audit_reopen asks the writer, which acts between two writes: what
 * it has formatted goes to the file it was formatted for, then the path is
 * opened afresh (a rotator moved the old file away), the old descriptor is
 * synced and closed, and the new file begins with an "audit_reopened" notice
 * of the records written so far. Each record is in one file, once; one that
 * cannot be opened leaves the writer on the file it had, and says so.
 *
 * Line schema, field order fixed (checklist: docs/ and the integration cases):
 *   {"ts","id","event","sandbox","conn","tier","decision","reason","rule","method",
 *    "host","port","path","status",["bytes_up","bytes_down","duration_ms": close
 *    only],"addr","detail"}; notices: {"ts","id","event","detail",counters...};
 *   ingress: {"ts","id","event","sandbox","conn","decision","reason","method","host",
 *    "path","status","bytes_up","bytes_down","duration_ms","client"}.
 * Empty strings and status 0 are null. A string is bounded by its array, never
 * by trust in its NUL, escaped per RFC 8259, and every byte that is not valid
 * UTF-8 (RFC 3629) becomes U+FFFD, so a line is valid JSON whatever was sent.
 */
#include "core/audit.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/pool.h"

/* Output buffer: one write() per pass under load, a few hundred records. */
#define AUDIT_OUT_BYTES (256u * 1024u)
/* Records taken from one ring per pass, so one busy worker cannot starve the rest. */
#define AUDIT_BATCH_RECORDS 512u
/* Writer's nap when every ring is empty: bounds audit latency and close time. */
#define AUDIT_IDLE_SLEEP_NS 2000000L
/* Under sustained overload, one drop notice a second is enough to see it. */
#define AUDIT_DROP_NOTICE_NS 1000000000ull
/* While writes fail and no record waits, the gap notice is tried again this often. */
#define AUDIT_RETRY_NS 1000000000ull
/* Rings: one per worker plus one for the control thread. */
#define AUDIT_RINGS_MAX (LIMITS_WORKERS_MAX + 1u)
/* Id layout: ring index above bit 48, a per-ring sequence below. */
#define AUDIT_ID_SEQ_BITS  48
#define AUDIT_WRITER_INDEX 0xffffu
#define AUDIT_RING_MASK    ((uint64_t)LIMITS_AUDIT_RING_RECORDS - 1u)
#define AUDIT_CACHE_LINE   64u

#define AUDIT_FIELD_BYTES(f) sizeof(((struct audit_record *)NULL)->f)
#define AUDIT_STRINGS_BYTES                                                                 \
	(AUDIT_FIELD_BYTES(sandbox) + AUDIT_FIELD_BYTES(method) + AUDIT_FIELD_BYTES(host) + \
	 AUDIT_FIELD_BYTES(rule) + AUDIT_FIELD_BYTES(path) + AUDIT_FIELD_BYTES(addr) +      \
	 AUDIT_FIELD_BYTES(detail))
/*
 * Longest line a record can format to: each string byte becomes at most six
 * ("\u00XX" or "\ufffd"), plus quotes, keys and numbers (under 400 bytes).
 * LIMITS_AUDIT_LINE_BYTES is the project-wide bound; this checks it holds.
 */
#define AUDIT_LINE_WORST_BYTES (6u * AUDIT_STRINGS_BYTES + 7u * 2u + 512u)
static_assert(AUDIT_LINE_WORST_BYTES <= LIMITS_AUDIT_LINE_BYTES, "audit line limit too small");

static_assert(AUDIT_RINGS_MAX < AUDIT_WRITER_INDEX, "ring indexes must not reach the writer's");
static_assert(2u * AUDIT_LINE_WORST_BYTES <= AUDIT_OUT_BYTES, "the buffer must hold two lines");
static_assert(LIMITS_AUDIT_RING_RECORDS <= (1u << 30), "ring positions fit comfortably");

struct audit_ring {
	/* Producer's line: written by the producer, read by the writer. */
	_Alignas(AUDIT_CACHE_LINE) _Atomic uint64_t head;
	_Atomic uint64_t dropped;   /* single writer (the producer), any reader */
	uint64_t tail_seen;         /* producer only: the last tail it loaded */
	uint64_t seq;               /* producer only: for audit_next_id */
	struct audit_record *slots; /* owned, LIMITS_AUDIT_RING_RECORDS */
	uint32_t index;
	bool claimed; /* producer only: a claim awaits its commit */
	/* Writer's line. */
	_Alignas(AUDIT_CACHE_LINE) _Atomic uint64_t tail;
};

struct audit_name {
	const char *s;
	size_t len;
};

struct audit {
	/* Set by audit_open, read-only afterwards. */
	int fd;
	bool fd_owned;
	bool fd_regular;
	bool writer_started;
	uint32_t boot;
	uint32_t ring_count;
	struct audit_ring *rings; /* inside rings_raw, cache-line aligned */
	void *rings_raw;          /* owned */
	pthread_t writer;
	struct audit_name tiers[TIER__COUNT];
	struct audit_name reasons[REASON__COUNT];
	/* Written by the writer (or audit_close), read by anyone. */
	_Atomic bool stop;
	_Atomic uint64_t written;
	_Atomic uint64_t lost; /* records that were in a failed write */
	_Atomic uint64_t write_errors;
	_Atomic bool failing; /* the last write failed (audit_failing) */
	/* Reopening (audit_reopen): asked by any thread, done by the writer. */
	_Atomic uint64_t reopen_asked;
	_Atomic uint64_t reopen_done; /* the last ask the writer acted on */
	_Atomic int reopen_result;    /* and its outcome: 0 or -errno */
	char *path;                   /* owned; NULL: standard output, never reopened */
	/* Writer only. */
	char *out; /* owned, AUDIT_OUT_BYTES */
	size_t out_len;
	uint32_t out_records; /* ring records in out */
	bool write_failing;
	bool line_torn;        /* a failed write left a partial line the file could not lose */
	uint64_t gap_lost;     /* records lost since writes began to fail */
	uint64_t gap_from_us;  /* CLOCK_REALTIME of the first failed write of the gap */
	uint64_t gap_retry_ns; /* CLOCK_MONOTONIC of the last try to end it */
	uint64_t notice_seq;
	uint64_t dropped_reported;
	uint64_t drop_notice_ns;
	uint64_t ts_sec;
	size_t ts_len;
	char ts_text[32]; /* "YYYY-MM-DDTHH:MM:SS" of ts_sec */
};

static const char hex_digits[] = "0123456789abcdef";

/* Relaxed add for a counter that has a single writer: no locked instruction. */
static inline void counter_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/* ---- Formatting helpers: each writes at a cursor and returns the new one. ---- */

static inline char *put_bytes(char *p, const char *s, size_t len)
{
	memcpy(p, s, len);
	return p + len;
}

static inline char *put_lit(char *p, const char *s)
{
	return put_bytes(p, s, strlen(s));
}

static char *put_u64(char *p, uint64_t v)
{
	char tmp[20];
	size_t n = 0;

	do {
		tmp[sizeof(tmp) - 1 - n] = (char)('0' + v % 10u);
		v /= 10u;
		n++;
	} while (v != 0);
	AN_DASSERT(n <= sizeof(tmp));
	return put_bytes(p, tmp + sizeof(tmp) - n, n);
}

/* <v> in decimal, zero-padded to at least <width> digits. */
static char *put_padded(char *p, uint64_t v, size_t width)
{
	char tmp[20];
	size_t n = 0;

	AN_DASSERT(width <= sizeof(tmp));
	do {
		tmp[sizeof(tmp) - 1 - n] = (char)('0' + v % 10u);
		v /= 10u;
		n++;
	} while (v != 0 || n < width);
	return put_bytes(p, tmp + sizeof(tmp) - n, n);
}

static char *put_hex(char *p, uint64_t v, unsigned digits)
{
	AN_DASSERT(digits <= 16);
	for (unsigned i = 0; i < digits; i++) {
		p[digits - 1 - i] = hex_digits[v & 0xfu];
		v >>= 4;
	}
	return p + digits;
}

/*
 * Length of the valid UTF-8 sequence at <u> (at most <avail> bytes), or 0 if
 * none starts there: RFC 3629 section 4, so no overlong forms, no surrogates,
 * nothing above U+10FFFF. The lead byte fixes the range of the second byte.
 */
static size_t utf8_seq_len(const unsigned char *u, size_t avail)
{
	unsigned char c = u[0];
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else {
		return 0;
	}
	if (avail < n || u[1] < lo || u[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
	}
	return n;
}

/*
 * The field <s>, bounded by its array size <cap> whether or not it holds a
 * NUL, as a JSON string, or null when empty. Writes at most 6 * cap + 2.
 */
static char *put_json_str(char *p, const char *s, size_t cap)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t len = strnlen(s, cap);
	char *start = p;

	if (len == 0)
		return put_bytes(p, "null", 4);
	*p++ = '"';
	for (size_t i = 0; i < len;) {
		unsigned char c = u[i];
		if (AN_LIKELY(c >= 0x20 && c < 0x80 && c != '"' && c != '\\')) {
			*p++ = (char)c;
			i++;
		} else if (c == '"' || c == '\\') {
			*p++ = '\\';
			*p++ = (char)c;
			i++;
		} else if (c < 0x80) {
			p = put_bytes(p, "\\u00", 4);
			p = put_hex(p, c, 2);
			i++;
		} else {
			size_t n = utf8_seq_len(u + i, len - i);
			if (n == 0) {
				p = put_bytes(p, "\\ufffd", 6);
				i++;
			} else {
				p = put_bytes(p, s + i, n);
				i += n;
			}
		}
	}
	*p++ = '"';
	AN_ASSERT((size_t)(p - start) <= 6 * len + 2);
	return p;
}

/* Days since 1970-01-01 to a proleptic Gregorian date, by 400-year eras. */
static void civil_from_days(uint64_t days, uint64_t *year, unsigned *month, unsigned *day)
{
	uint64_t z = days + 719468u; /* days since 0000-03-01 */
	uint64_t era = z / 146097u;
	unsigned doe = (unsigned)(z - era * 146097u);
	unsigned yoe = (doe - doe / 1460u + doe / 36524u - doe / 146096u) / 365u;
	unsigned doy = doe - (365u * yoe + yoe / 4u - yoe / 100u);
	unsigned mp = (5u * doy + 2u) / 153u; /* months since March */

	*day = doy - (153u * mp + 2u) / 5u + 1u;
	*month = mp < 10u ? mp + 3u : mp - 9u;
	*year = (uint64_t)yoe + era * 400u + (*month <= 2u ? 1u : 0u);
	AN_DASSERT(*month >= 1 && *month <= 12);
	AN_DASSERT(*day >= 1 && *day <= 31);
}

/* "YYYY-MM-DDTHH:MM:SS" for <sec> since the epoch, into <out>; returns the length. */
static size_t format_civil(char *out, uint64_t sec)
{
	uint64_t year;
	unsigned month, day;
	uint64_t tod = sec % 86400u;
	char *p = out;

	civil_from_days(sec / 86400u, &year, &month, &day);
	p = put_padded(p, year, 4);
	*p++ = '-';
	p = put_padded(p, month, 2);
	*p++ = '-';
	p = put_padded(p, day, 2);
	*p++ = 'T';
	p = put_padded(p, tod / 3600u, 2);
	*p++ = ':';
	p = put_padded(p, tod / 60u % 60u, 2);
	*p++ = ':';
	p = put_padded(p, tod % 60u, 2);
	return (size_t)(p - out);
}

/* "YYYY-MM-DDTHH:MM:SS.uuuuuuZ"; the date part is cached per second. */
static char *put_ts(struct audit *a, char *p, uint64_t ts_us)
{
	uint64_t sec = ts_us / 1000000u;

	if (a->ts_len == 0 || sec != a->ts_sec) {
		a->ts_len = format_civil(a->ts_text, sec);
		a->ts_sec = sec;
	}
	AN_DASSERT(a->ts_len < sizeof(a->ts_text));
	p = put_bytes(p, a->ts_text, a->ts_len);
	*p++ = '.';
	p = put_padded(p, ts_us % 1000000u, 6);
	*p++ = 'Z';
	return p;
}

/* The id as audit_format_id spells it, without the NUL. */
static char *put_id(const struct audit *a, char *p, uint64_t id)
{
	p = put_hex(p, a->boot, 8);
	*p++ = '-';
	return put_hex(p, id, 16);
}

static char *put_name(char *p, const struct audit_name *n)
{
	*p++ = '"';
	p = put_bytes(p, n->s, n->len);
	*p++ = '"';
	return p;
}

/* {"ts":..,"id":..,"event":.. : the head every line starts with. */
static char *put_head(struct audit *a, char *p, uint64_t ts_us, uint64_t id, enum audit_kind kind)
{
	static const char *const events[] = {
		[AUDIT_DECISION] = "decision", [AUDIT_CLOSE] = "close", [AUDIT_NOTICE] = "notice",
		[AUDIT_INGRESS] = "ingress",   [AUDIT_ALERT] = "alert",
	};

	AN_ASSERT((unsigned)kind < AN_ARRAY_LEN(events));
	p = put_lit(p, "{\"ts\":\"");
	p = put_ts(a, p, ts_us);
	p = put_lit(p, "\",\"id\":\"");
	p = put_id(a, p, id);
	p = put_lit(p, "\",\"event\":\"");
	p = put_lit(p, events[kind]);
	*p++ = '"';
	return p;
}

/* ,"sandbox":..,"conn":..: whose connection the record is about. */
static char *put_who(char *p, const struct audit_record *rec)
{
	p = put_lit(p, ",\"sandbox\":");
	p = put_json_str(p, rec->sandbox, sizeof(rec->sandbox));
	p = put_lit(p, ",\"conn\":");
	return put_u64(p, rec->conn_id);
}

/* ,"decision":..,"reason":..: what was decided and why. */
static char *put_verdict(const struct audit *a, char *p, const struct audit_record *rec)
{
	unsigned reason = rec->reason;

	AN_ASSERT(rec->kind == AUDIT_DECISION || rec->kind == AUDIT_CLOSE ||
		  rec->kind == AUDIT_INGRESS);
	if (AN_NEVER(reason >= REASON__COUNT))
		reason = REASON_NONE;
	p = put_lit(p, rec->allowed ? ",\"decision\":\"allow\"" : ",\"decision\":\"deny\"");
	p = put_lit(p, ",\"reason\":");
	p = put_name(p, &a->reasons[reason]);
	AN_DASSERT(reason < REASON__COUNT);
	return p;
}

/* ,"method":..,"host":..[,"port":..],"path":..,"status":..: the request and its answer. */
static char *put_request(char *p, const struct audit_record *rec, bool with_port)
{
	AN_ASSERT(rec->kind != AUDIT_NOTICE);
	if (with_port)
		AN_ASSERT(rec->kind != AUDIT_INGRESS);
	p = put_lit(p, ",\"method\":");
	p = put_json_str(p, rec->method, sizeof(rec->method));
	p = put_lit(p, ",\"host\":");
	p = put_json_str(p, rec->host, sizeof(rec->host));
	if (with_port) {
		p = put_lit(p, ",\"port\":");
		p = put_u64(p, rec->port);
	}
	p = put_lit(p, ",\"path\":");
	p = put_json_str(p, rec->path, sizeof(rec->path));
	p = put_lit(p, ",\"status\":");
	return rec->status == 0 ? put_bytes(p, "null", 4) : put_u64(p, rec->status);
}

/* ,"bytes_up":..,"bytes_down":..,"duration_ms":..: what a finished exchange moved. */
static char *put_traffic(char *p, const struct audit_record *rec)
{
	AN_ASSERT(rec->kind == AUDIT_CLOSE || rec->kind == AUDIT_INGRESS);
	p = put_lit(p, ",\"bytes_up\":");
	p = put_u64(p, rec->bytes_up);
	p = put_lit(p, ",\"bytes_down\":");
	p = put_u64(p, rec->bytes_down);
	p = put_lit(p, ",\"duration_ms\":");
	return put_u64(p, rec->duration_ms);
}

/* The fields of decision and close records, after the head. */
static char *put_conn_fields(struct audit *a, char *p, const struct audit_record *rec)
{
	unsigned tier = rec->tier;

	AN_ASSERT(rec->kind == AUDIT_DECISION || rec->kind == AUDIT_CLOSE);
	if (AN_NEVER(tier >= TIER__COUNT))
		tier = TIER_DENY;
	p = put_who(p, rec);
	p = put_lit(p, ",\"tier\":");
	p = put_name(p, &a->tiers[tier]);
	p = put_verdict(a, p, rec);
	p = put_lit(p, ",\"rule\":");
	p = put_json_str(p, rec->rule, sizeof(rec->rule));
	p = put_request(p, rec, true);
	if (rec->kind == AUDIT_CLOSE)
		p = put_traffic(p, rec);
	p = put_lit(p, ",\"addr\":");
	p = put_json_str(p, rec->addr, sizeof(rec->addr));
	p = put_lit(p, ",\"detail\":");
	return put_json_str(p, rec->detail, sizeof(rec->detail));
}

/* The fields of an ingress record, after the head: the public request and its answer. */
static char *put_ingress_fields(struct audit *a, char *p, const struct audit_record *rec)
{
	AN_ASSERT(rec->kind == AUDIT_INGRESS);
	p = put_who(p, rec);
	p = put_verdict(a, p, rec);
	p = put_request(p, rec, false);
	p = put_traffic(p, rec);
	p = put_lit(p, ",\"client\":");
	p = put_json_str(p, rec->addr, sizeof(rec->addr));
	p = put_lit(p, ",\"detail\":");
	return put_json_str(p, rec->detail, sizeof(rec->detail));
}

/* The fields of an alert record, after the head (core/audit.h says which field holds what). */
static char *put_alert_fields(char *p, const struct audit_record *rec)
{
	AN_ASSERT(rec->kind == AUDIT_ALERT);
	p = put_lit(p, ",\"sandbox\":");
	p = put_json_str(p, rec->sandbox, sizeof(rec->sandbox));
	p = put_lit(p, ",\"detector\":");
	p = put_json_str(p, rec->rule, sizeof(rec->rule));
	p = put_lit(p, ",\"action\":");
	p = put_json_str(p, rec->method, sizeof(rec->method));
	p = put_lit(p, ",\"count\":");
	p = put_u64(p, rec->bytes_up);
	p = put_lit(p, ",\"window_s\":");
	p = put_u64(p, rec->duration_ms);
	p = put_lit(p, ",\"baseline\":");
	p = put_u64(p, rec->bytes_down);
	p = put_lit(p, ",\"host\":");
	p = put_json_str(p, rec->host, sizeof(rec->host));
	p = put_lit(p, ",\"suffix\":");
	p = put_json_str(p, rec->addr, sizeof(rec->addr));
	p = put_lit(p, ",\"names\":[");
	const char *names = rec->path;
	size_t left = strnlen(rec->path, sizeof(rec->path));
	bool first = true;
	while (left > 0) {
		const char *nl = memchr(names, '\n', left);
		size_t len = nl != NULL ? (size_t)(nl - names) : left;
		if (!first)
			*p++ = ',';
		first = false;
		p = put_json_str(p, names, len);
		size_t step = nl != NULL ? len + 1 : len;
		names += step;
		left -= step;
	}
	p = put_lit(p, "],\"detail\":");
	return put_json_str(p, rec->detail, sizeof(rec->detail));
}

/* One record as one JSON line into <buf> (AUDIT_LINE_WORST_BYTES); returns the length. */
static size_t format_record(struct audit *a, const struct audit_record *rec, char *buf)
{
	enum audit_kind kind = (enum audit_kind)rec->kind;
	char *p;

	if (AN_NEVER(rec->kind >= AUDIT__KINDS))
		kind = AUDIT_NOTICE;
	p = put_head(a, buf, rec->ts_us, rec->id, kind);
	if (kind == AUDIT_NOTICE) {
		p = put_lit(p, ",\"detail\":");
		p = put_json_str(p, rec->detail, sizeof(rec->detail));
	} else if (kind == AUDIT_INGRESS) {
		p = put_ingress_fields(a, p, rec);
	} else if (kind == AUDIT_ALERT) {
		p = put_alert_fields(p, rec);
	} else {
		p = put_conn_fields(a, p, rec);
	}
	*p++ = '}';
	*p++ = '\n';
	size_t len = (size_t)(p - buf);
	AN_ASSERT(len <= AUDIT_LINE_WORST_BYTES);
	return len;
}

/* ---- Writer. ---- */

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;

	if (clock_gettime(clock, &ts) == -1 || ts.tv_sec < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Writes all of <buf>; *<done> says how much went out before an error. */
static int write_all(int fd, const char *buf, size_t len, size_t *done)
{
	*done = 0;
	while (*done < len) {
		ssize_t n = write(fd, buf + *done, len - *done);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		*done += (size_t)n;
	}
	AN_ASSERT(*done == len);
	return 0;
}

/*
 * Writes whole lines: <head_len> bytes at <head> (none: 0), then <len> at
 * <buf>, as one: on a failure, what of either went out is cut off the file's
 * end again, so the file keeps whole lines only, and neither counts as
 * written. Where the file cannot be cut (not a regular file), a newline goes
 * first at the next write instead, so the lines after the torn one still
 * parse. 0 or -errno.
 */
static int write_lines(struct audit *a, const char *head, size_t head_len, const char *buf,
		       size_t len)
{
	size_t done = 0, head_done = 0;
	int err = 0;

	if (a->line_torn) {
		err = write_all(a->fd, "\n", 1, &done);
		if (err != 0)
			return err;
		a->line_torn = false;
	}
	err = write_all(a->fd, head, head_len, &head_done);
	if (err == 0)
		err = write_all(a->fd, buf, len, &done);
	else
		done = 0;
	size_t cut = head_done + done;
	if (err == 0 || cut == 0)
		return err;
	off_t end = a->fd_regular ? lseek(a->fd, 0, SEEK_END) : -1;
	if (end < (off_t)cut || ftruncate(a->fd, end - (off_t)cut) != 0)
		a->line_torn = (done > 0 ? buf[done - 1] : head[head_done - 1]) != '\n';
	return err;
}

/*
 * While writes fail: the "audit_gap" notice (the records lost since the first
 * failure and its time span) formatted into <line>, which goes out with the
 * records waiting, before them, or with neither. Returns its length.
 */
static size_t writer_gap_notice(struct audit *a, char *line, uint64_t now_us)
{
	uint64_t id = ((uint64_t)AUDIT_WRITER_INDEX << AUDIT_ID_SEQ_BITS) | (a->notice_seq + 1);

	char *p = put_head(a, line, now_us, id, AUDIT_NOTICE);
	p = put_lit(p, ",\"detail\":\"audit_gap\",\"lost\":");
	p = put_u64(p, a->gap_lost);
	p = put_lit(p, ",\"from\":\"");
	p = put_ts(a, p, a->gap_from_us);
	p = put_lit(p, "\",\"to\":\"");
	p = put_ts(a, p, now_us);
	p = put_lit(p, "\"}\n");
	AN_ASSERT((size_t)(p - line) <= AUDIT_LINE_WORST_BYTES);
	return (size_t)(p - line);
}

/* The gap notice went out: the gap is over, and stderr says so. */
static void writer_gap_over(struct audit *a, uint64_t now_us)
{
	a->notice_seq++;
	log_warn("audit: writing again: %llu records lost in %llu ms (an audit_gap notice says "
		 "so)",
		 (unsigned long long)a->gap_lost,
		 (unsigned long long)((now_us - a->gap_from_us) / 1000u));
	a->write_failing = false;
	a->gap_lost = 0;
	atomic_store_explicit(&a->failing, false, memory_order_relaxed);
}

/*
 * While writes fail, whether the file is worth trying again: its file system
 * has a buffer's worth of room (a regular file; any other is tried). A write
 * that failed was cut off again, and the room that freed would let a few
 * small writes through on a disk still full, each ending the gap only for the
 * next to start another.
 */
static bool writer_has_room(const struct audit *a)
{
	struct statvfs fs;

	if (!a->fd_regular || fstatvfs(a->fd, &fs) != 0)
		return true;
	return (uint64_t)fs.f_bavail * fs.f_frsize >= AUDIT_OUT_BYTES;
}

/*
 * Writes the buffer out and accounts for its records, whatever the outcome.
 * While writes fail, the gap notice goes first, in the same write: the gap is
 * over only when the records after it landed too. Tried only once the file
 * has room (writer_has_room), and at least once a second with nothing waiting;
 * otherwise the records waiting join the gap unwritten.
 */
static void writer_flush(struct audit *a)
{
	char gap[AUDIT_LINE_WORST_BYTES];
	size_t gap_len = 0;
	uint64_t now_us = clock_ns(CLOCK_REALTIME) / 1000u;

	AN_ASSERT(a->out_len <= AUDIT_OUT_BYTES);
	if (a->write_failing) {
		bool due = clock_ns(CLOCK_MONOTONIC) - a->gap_retry_ns >= AUDIT_RETRY_NS;
		if ((a->out_len > 0 || due) && writer_has_room(a)) {
			a->gap_retry_ns = clock_ns(CLOCK_MONOTONIC);
			gap_len = writer_gap_notice(a, gap, now_us);
		} else if (a->out_len > 0) {
			counter_add(&a->lost, a->out_records);
			a->gap_lost += a->out_records;
			a->out_len = 0;
			a->out_records = 0;
			return;
		}
	}
	if (a->out_len == 0 && gap_len == 0)
		return;
	int err = write_lines(a, gap, gap_len, a->out, a->out_len);
	if (err == 0) {
		counter_add(&a->written, a->out_records);
		if (gap_len > 0)
			writer_gap_over(a, now_us);
	} else {
		counter_add(&a->write_errors, 1);
		counter_add(&a->lost, a->out_records);
		if (!a->write_failing) {
			fprintf(
			    stderr,
			    "agentsnetd: audit: write: %s (records lost until it succeeds again)\n",
			    strerror(-err));
			a->write_failing = true;
			a->gap_lost = 0;
			a->gap_from_us = now_us;
			a->gap_retry_ns = clock_ns(CLOCK_MONOTONIC);
			atomic_store_explicit(&a->failing, true, memory_order_relaxed);
		}
		a->gap_lost += a->out_records;
	}
	a->out_len = 0;
	a->out_records = 0;
}

/* Room for one more line of any record, flushing first if need be. */
static char *writer_reserve(struct audit *a)
{
	if (AUDIT_OUT_BYTES - a->out_len < AUDIT_LINE_WORST_BYTES)
		writer_flush(a);
	AN_ASSERT(AUDIT_OUT_BYTES - a->out_len >= AUDIT_LINE_WORST_BYTES);
	return a->out + a->out_len;
}

/* Formats up to AUDIT_BATCH_RECORDS published records of <r>, then frees their slots. */
static uint32_t ring_drain(struct audit *a, struct audit_ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t n = head - tail;

	AN_ASSERT(n <= LIMITS_AUDIT_RING_RECORDS);
	if (n > AUDIT_BATCH_RECORDS)
		n = AUDIT_BATCH_RECORDS;
	for (uint64_t i = 0; i < n; i++) {
		char *p = writer_reserve(a);
		a->out_len += format_record(a, &r->slots[(tail + i) & AUDIT_RING_MASK], p);
		a->out_records++;
	}
	AN_ASSERT(a->out_len <= AUDIT_OUT_BYTES);
	/* Release: the slots were read before the producer may reuse them. */
	atomic_store_explicit(&r->tail, tail + n, memory_order_release);
	return (uint32_t)n;
}

/* One pass over every ring; returns the records moved to the buffer. */
static uint64_t writer_pass(struct audit *a)
{
	uint64_t moved = 0;

	AN_ASSERT(a->ring_count > 0);
	for (uint32_t i = 0; i < a->ring_count; i++)
		moved += ring_drain(a, &a->rings[i]);
	return moved;
}

/* {"ts":..,"id":..,"event":"notice","detail":"<detail>" for the writer's own notices. */
static char *writer_notice_head(struct audit *a, const char *detail)
{
	char *p = writer_reserve(a);
	uint64_t id = ((uint64_t)AUDIT_WRITER_INDEX << AUDIT_ID_SEQ_BITS) | ++a->notice_seq;

	AN_ASSERT(a->notice_seq < (1ull << AUDIT_ID_SEQ_BITS));
	p = put_head(a, p, clock_ns(CLOCK_REALTIME) / 1000u, id, AUDIT_NOTICE);
	p = put_lit(p, ",\"detail\":\"");
	p = put_lit(p, detail);
	*p++ = '"';
	return p;
}

static void writer_notice_end(struct audit *a, char *p)
{
	*p++ = '}';
	*p++ = '\n';
	size_t len = (size_t)(p - (a->out + a->out_len));
	AN_ASSERT(len <= AUDIT_LINE_WORST_BYTES);
	a->out_len += len;
}

/* An "audit_dropped" notice if drops grew, at most one per interval unless <force>d. */
static void writer_report_drops(struct audit *a, bool force)
{
	uint64_t total = audit_dropped(a);

	AN_ASSERT(total >= a->dropped_reported);
	if (total == a->dropped_reported)
		return;
	uint64_t now = clock_ns(CLOCK_MONOTONIC);
	if (!force && a->drop_notice_ns != 0 && now - a->drop_notice_ns < AUDIT_DROP_NOTICE_NS)
		return;
	char *p = writer_notice_head(a, "audit_dropped");
	p = put_lit(p, ",\"dropped\":");
	p = put_u64(p, total);
	writer_notice_end(a, p);
	a->dropped_reported = total;
	a->drop_notice_ns = now;
}

static int audit_mkdir_parent(const char *path);

/*
 * Acts on an audit_reopen asked since the last: flushes what is formatted to
 * the file open now, opens the path afresh and writes to it from then on,
 * beginning with an "audit_reopened" notice; on failure keeps the file it had.
 */
static void writer_reopen(struct audit *a)
{
	uint64_t asked = atomic_load_explicit(&a->reopen_asked, memory_order_acquire);
	int fd = -1;

	if (asked == atomic_load_explicit(&a->reopen_done, memory_order_relaxed))
		return;
	writer_flush(a);
	int err = a->path == NULL ? -EINVAL : audit_mkdir_parent(a->path);
	if (err == 0) {
		fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		err = fd == -1 ? -errno : 0;
	}
	if (err == 0) {
		struct stat st;
		if (a->fd_regular && fsync(a->fd) == -1)
			log_error("audit: fsync before reopening: %s", strerror(errno));
		AN_ASSERT(a->fd_owned);
		(void)close(a->fd);
		a->fd = fd;
		a->fd_regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
		char *p = writer_notice_head(a, "audit_reopened");
		p = put_lit(p, ",\"written\":");
		p = put_u64(p, atomic_load_explicit(&a->written, memory_order_relaxed));
		writer_notice_end(a, p);
		writer_flush(a);
	} else {
		log_error("audit: reopen %s: %s (writing on to the file open before)",
			  a->path != NULL ? a->path : "-", strerror(-err));
	}
	atomic_store_explicit(&a->reopen_result, err, memory_order_relaxed);
	atomic_store_explicit(&a->reopen_done, asked, memory_order_release);
}

/* Drains what is left, writes the closing notice and makes the file durable. */
static void writer_final(struct audit *a)
{
	while (writer_pass(a) != 0) {
	}
	writer_report_drops(a, true);
	char *p = writer_notice_head(a, "audit_closed");
	/* The records still in the buffer go out with this line or not at all. */
	p = put_lit(p, ",\"written\":");
	p = put_u64(p, atomic_load_explicit(&a->written, memory_order_relaxed) + a->out_records);
	p = put_lit(p, ",\"dropped\":");
	p = put_u64(p, a->dropped_reported);
	p = put_lit(p, ",\"lost\":");
	p = put_u64(p, atomic_load_explicit(&a->lost, memory_order_relaxed));
	writer_notice_end(a, p);
	writer_flush(a);
	AN_ASSERT(a->out_len == 0);
	if (a->fd_regular && fsync(a->fd) == -1)
		log_error("audit: fsync: %s", strerror(errno));
}

static void *writer_main(void *arg)
{
	struct audit *a = arg;
	const struct timespec idle = { .tv_sec = 0, .tv_nsec = AUDIT_IDLE_SLEEP_NS };

	AN_ASSERT(a != NULL);
	AN_ASSERT(a->writer_started);
	for (;;) {
		/* Producers stopped before close set the flag: the final drain sees all. */
		if (atomic_load_explicit(&a->stop, memory_order_acquire))
			break;
		writer_reopen(a);
		uint64_t moved = writer_pass(a);
		writer_report_drops(a, false);
		writer_flush(a);
		if (moved == 0)
			nanosleep(&idle, NULL);
	}
	writer_final(a);
	return NULL;
}

/* ---- Set-up and tear-down. ---- */

/* Creates the directory holding <path> (not its ancestors) if it is missing. */
static int audit_mkdir_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];

	if (slash == NULL || slash == path)
		return 0;
	size_t len = (size_t)(slash - path);
	if (len >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, len);
	dir[len] = '\0';
	if (mkdir(dir, 0750) == -1 && errno != EEXIST)
		return -errno;
	AN_ASSERT(strlen(dir) == len);
	return 0;
}

static int audit_open_fd(struct audit *a, const char *path)
{
	struct stat st;

	if (strcmp(path, "-") == 0) {
		a->fd = STDOUT_FILENO;
	} else {
		int err = audit_mkdir_parent(path);
		if (err != 0)
			return err;
		a->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (a->fd == -1)
			return -errno;
		a->fd_owned = true;
		a->path = pool_strndup(path, strlen(path));
		if (a->path == NULL)
			return -ENOMEM;
	}
	a->fd_regular = fstat(a->fd, &st) == 0 && S_ISREG(st.st_mode);
	AN_ASSERT(a->fd >= 0);
	return 0;
}

/* The run's nonce in every id; not a secret, so a weak fallback is acceptable. */
static uint32_t audit_boot_nonce(void)
{
	uint32_t boot = 0;
	ssize_t n;

	do {
		n = getrandom(&boot, sizeof(boot), 0);
	} while (n == -1 && errno == EINTR);
	if (n != (ssize_t)sizeof(boot)) {
		uint64_t t = clock_ns(CLOCK_REALTIME);
		boot = (uint32_t)(t ^ (t >> 32) ^ ((uint64_t)getpid() << 16));
	}
	return boot;
}

static void audit_names_init(struct audit *a)
{
	for (unsigned t = 0; t < TIER__COUNT; t++) {
		a->tiers[t].s = reason_tier_name((enum tier)t);
		a->tiers[t].len = strlen(a->tiers[t].s);
		/* Emitted unescaped: must stay plain identifiers. */
		AN_ASSERT(strspn(a->tiers[t].s, "abcdefghijklmnopqrstuvwxyz_") == a->tiers[t].len);
	}
	for (unsigned r = 0; r < REASON__COUNT; r++) {
		a->reasons[r].s = reason_code((enum reason)r);
		a->reasons[r].len = strlen(a->reasons[r].s);
		AN_ASSERT(strspn(a->reasons[r].s, "abcdefghijklmnopqrstuvwxyz_") ==
			  a->reasons[r].len);
	}
}

static int audit_rings_init(struct audit *a, uint32_t count)
{
	size_t bytes = (size_t)count * sizeof(struct audit_ring) + AUDIT_CACHE_LINE;

	a->rings_raw = pool_calloc(1, bytes);
	if (a->rings_raw == NULL)
		return -ENOMEM;
	uintptr_t at =
	    ((uintptr_t)a->rings_raw + AUDIT_CACHE_LINE - 1) & ~(uintptr_t)(AUDIT_CACHE_LINE - 1);
	a->rings = (struct audit_ring *)at;
	a->ring_count = count;
	for (uint32_t i = 0; i < count; i++) {
		struct audit_ring *r = &a->rings[i];
		r->index = i;
		r->slots = pool_calloc(LIMITS_AUDIT_RING_RECORDS, sizeof(*r->slots));
		if (r->slots == NULL)
			return -ENOMEM;
	}
	AN_ASSERT(at % AUDIT_CACHE_LINE == 0);
	return 0;
}

/* Releases everything <a> owns; the writer is not running. */
static void audit_destroy(struct audit *a)
{
	AN_ASSERT(a != NULL);
	if (a->rings != NULL) {
		for (uint32_t i = 0; i < a->ring_count; i++)
			AN_FREE(&a->rings[i].slots);
	}
	a->rings = NULL;
	AN_FREE(&a->rings_raw);
	AN_FREE(&a->out);
	AN_FREE(&a->path);
	if (a->fd_owned && close(a->fd) == -1)
		log_error("audit: close: %s", strerror(errno));
	pool_free(a);
}

/* audit_open without the writer thread (tests drive the writer by hand). */
static int audit_setup(const char *path, uint32_t rings, struct audit **out)
{
	AN_ASSERT(path != NULL);
	AN_ASSERT(out != NULL);
	if (rings == 0 || rings > AUDIT_RINGS_MAX)
		return -EINVAL;
	struct audit *a = pool_calloc(1, sizeof(*a));
	if (a == NULL)
		return -ENOMEM;
	a->fd = -1;
	a->boot = audit_boot_nonce();
	audit_names_init(a);
	a->out = pool_malloc(AUDIT_OUT_BYTES);
	int err = a->out == NULL ? -ENOMEM : audit_rings_init(a, rings);
	if (err == 0)
		err = audit_open_fd(a, path);
	if (err != 0) {
		audit_destroy(a);
		return err;
	}
	*out = a;
	return 0;
}

static int audit_start(struct audit *a)
{
	sigset_t all, old;

	AN_ASSERT(!a->writer_started);
	/* The writer takes no signals: they belong to the daemon's main thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	a->writer_started = true;
	int err = pthread_create(&a->writer, NULL, writer_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0) {
		a->writer_started = false;
		return -err;
	}
	pthread_setname_np(a->writer, "an-audit");
	return 0;
}

/* ---- Public API. ---- */

int audit_open(const char *path, uint32_t rings, struct audit **out)
{
	struct audit *a = NULL;

	AN_ASSERT(path != NULL);
	AN_ASSERT(out != NULL);
	int err = audit_setup(path, rings, &a);
	if (err != 0)
		return err;
	err = audit_start(a);
	if (err != 0) {
		audit_destroy(a);
		return err;
	}
	*out = a;
	return 0;
}

struct audit_ring *audit_ring_get(struct audit *a, uint32_t index)
{
	AN_ASSERT(a != NULL);
	AN_ASSERT(index < a->ring_count);
	return &a->rings[index];
}

uint64_t audit_next_id(struct audit_ring *r)
{
	AN_ASSERT(r->index < AUDIT_RINGS_MAX);
	AN_ASSERT(r->seq + 1 < (1ull << AUDIT_ID_SEQ_BITS));
	return ((uint64_t)r->index << AUDIT_ID_SEQ_BITS) | ++r->seq;
}

int audit_format_id(const struct audit *a, uint64_t id, char *out)
{
	AN_ASSERT(a != NULL);
	AN_ASSERT(out != NULL);
	char *p = put_id(a, out, id);
	*p = '\0';
	int len = (int)(p - out);
	AN_ASSERT(len < AUDIT_ID_BYTES);
	return len;
}

struct audit_record *audit_claim(struct audit_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

	AN_ASSERT(!r->claimed);
	AN_DASSERT(head - r->tail_seen <= LIMITS_AUDIT_RING_RECORDS);
	if (head - r->tail_seen >= LIMITS_AUDIT_RING_RECORDS) {
		/* Acquire: the writer finished reading the slots it released. */
		r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
		if (head - r->tail_seen >= LIMITS_AUDIT_RING_RECORDS) {
			counter_add(&r->dropped, 1);
			return NULL;
		}
	}
	struct audit_record *rec = &r->slots[head & AUDIT_RING_MASK];
	memset(rec, 0, sizeof(*rec));
	r->claimed = true;
	return rec;
}

void audit_commit(struct audit_ring *r, struct audit_record *rec)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

	AN_ASSERT(r->claimed);
	AN_ASSERT(rec == &r->slots[head & AUDIT_RING_MASK]);
	AN_ASSERT(rec->kind < AUDIT__KINDS);
	AN_ASSERT(rec->tier < TIER__COUNT);
	AN_ASSERT(rec->reason < REASON__COUNT);
	rec->ts_us = clock_ns(CLOCK_REALTIME) / 1000u;
	r->claimed = false;
	/* Release: the record's contents before the head that publishes it. */
	atomic_store_explicit(&r->head, head + 1, memory_order_release);
}

void audit_copy(char *dst, size_t cap, const char *s, size_t len)
{
	AN_ASSERT(dst != NULL);
	AN_ASSERT(cap > 0);
	size_t n = len < cap - 1 ? len : cap - 1;
	if (n < len) {
		/* Cut before a split UTF-8 sequence (at most 3 continuation bytes back). */
		size_t back = 0;
		while (back < 3 && back < n && ((unsigned char)s[n - back] & 0xc0) == 0x80)
			back++;
		if (((unsigned char)s[n - back] & 0xc0) == 0xc0)
			n -= back;
	}
	if (n > 0)
		memcpy(dst, s, n);
	dst[n] = '\0';
	AN_ASSERT(n < cap);
}

uint64_t audit_dropped(const struct audit *a)
{
	uint64_t total = 0;

	AN_ASSERT(a != NULL);
	for (uint32_t i = 0; i < a->ring_count; i++)
		total += atomic_load_explicit(&a->rings[i].dropped, memory_order_relaxed);
	return total;
}

uint64_t audit_written(const struct audit *a)
{
	AN_ASSERT(a != NULL);
	return atomic_load_explicit(&a->written, memory_order_relaxed);
}

uint64_t audit_lost(const struct audit *a)
{
	AN_ASSERT(a != NULL);
	return atomic_load_explicit(&a->lost, memory_order_relaxed);
}

bool audit_failing(const struct audit *a)
{
	return a != NULL && atomic_load_explicit(&a->failing, memory_order_relaxed);
}

/* How often audit_reopen looks whether the writer has acted. */
#define AUDIT_REOPEN_POLL_NS 1000000L

bool audit_reopenable(const struct audit *a)
{
	return a->path != NULL;
}

int audit_reopen(struct audit *a, uint32_t timeout_ms)
{
	const struct timespec poll = { .tv_sec = 0, .tv_nsec = AUDIT_REOPEN_POLL_NS };

	AN_ASSERT(a != NULL && a->writer_started);
	if (a->path == NULL)
		return -EINVAL;
	uint64_t mine = atomic_fetch_add_explicit(&a->reopen_asked, 1, memory_order_release) + 1;
	for (uint64_t waited_ns = 0; waited_ns <= (uint64_t)timeout_ms * 1000000u;
	     waited_ns += AUDIT_REOPEN_POLL_NS) {
		if (atomic_load_explicit(&a->reopen_done, memory_order_acquire) >= mine)
			return atomic_load_explicit(&a->reopen_result, memory_order_relaxed);
		nanosleep(&poll, NULL);
	}
	return -ETIMEDOUT;
}

void audit_close(struct audit *a)
{
	if (a == NULL)
		return;
	AN_ASSERT(a->out != NULL);
	if (a->writer_started) {
		atomic_store_explicit(&a->stop, true, memory_order_release);
		int err = pthread_join(a->writer, NULL);
		AN_ASSERT(err == 0);
	} else {
		writer_final(a);
	}
	for (uint32_t i = 0; i < a->ring_count; i++)
		AN_ASSERT(!a->rings[i].claimed);
	audit_destroy(a);
}
