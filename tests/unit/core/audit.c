/*
 * Unit tests for core/audit.c. The .c is included to reach its statics:
 * audit_setup (rings without the writer thread), writer_pass/writer_flush
 * (drive the writer by hand), format_record and put_ts.
 *
 * Every file the writer produces is checked by Python's json module (strict:
 * UTF-8 decoding, no duplicate keys, no NaN), through a small script written
 * into the test's temporary directory. The script prints each line as
 * "key=value" pairs with strings as the hex of their decoded UTF-8, so the
 * assertions compare decoded content, not our encoding of it. Without
 * python3 the suite is skipped (exit 77).
 */
#include "../../../core/audit.c"

#include <check.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include "tests/unit/unit.h"

static char tdir[64];

static const char checker_py[] =
    "import json, re, sys\n"
    "def pairs(items):\n"
    "    keys = [k for k, _ in items]\n"
    "    if len(keys) != len(set(keys)):\n"
    "        raise ValueError('duplicate key')\n"
    "    return dict(items)\n"
    "def const(name):\n"
    "    raise ValueError(name)\n"
    "def show(v):\n"
    "    if isinstance(v, str):\n"
    "        return 's:' + v.encode('utf-8').hex()\n"
    "    return json.dumps(v)\n"
    "TS = re.compile(r'\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{6}Z\\Z')\n"
    "ID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{16}\\Z')\n"
    "mode = sys.argv[1]\n"
    "ids = set()\n"
    "n = {'lines': 0, 'records': 0, 'drop_notices': 0, 'written': -1, 'dropped': -1}\n"
    "for raw in sys.stdin.buffer:\n"
    "    if not raw.endswith(b'\\n'):\n"
    "        raise ValueError('unterminated line')\n"
    "    o = json.loads(raw.decode('utf-8'), object_pairs_hook=pairs, parse_constant=const)\n"
    "    if not isinstance(o, dict) or not TS.match(o['ts']) or not ID.match(o['id']):\n"
    "        raise ValueError('bad head: ' + repr(o))\n"
    "    if o['id'] in ids:\n"
    "        raise ValueError('duplicate id ' + o['id'])\n"
    "    ids.add(o['id'])\n"
    "    n['lines'] += 1\n"
    "    if o['event'] != 'notice':\n"
    "        n['records'] += 1\n"
    "    if o['event'] == 'decision' and o['sandbox'] == 'mt':\n"
    "        ring = int(o['id'][9:], 16) >> 48\n"
    "        if o['host'] != 't%d-%d' % (ring, o['conn']):\n"
    "            raise ValueError('record mixed up: ' + repr(o))\n"
    "    if o.get('detail') == 'audit_dropped':\n"
    "        n['drop_notices'] += 1\n"
    "    if o.get('detail') == 'audit_closed':\n"
    "        n['written'] = o['written']\n"
    "        n['dropped'] = o['dropped']\n"
    "    if mode == 'dump':\n"
    "        print('keys=' + ','.join(o.keys()), ' '.join(k + '=' + show(v) for k, v in o.items()))\n"
    "if mode == 'count':\n"
    "    print(' '.join('%s=%d' % kv for kv in n.items()))\n";

/* ---- Fixture: a fresh temporary directory per test. ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void tpath(char *buf, size_t cap, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", tdir, name);
	ck_assert_int_lt(n, (int)cap);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
}

static void setup(void)
{
	char py[128];

	snprintf(tdir, sizeof(tdir), "/tmp/an-audit-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tdir));
	tpath(py, sizeof(py), "check.py");
	write_file(py, checker_py);
	umask(022);
}

static void teardown(void)
{
	nftw(tdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- The checker's output. ---- */

struct dump {
	char *text; /* owned */
	size_t len;
};

/* Runs the checker on <file> in <mode>; fails the test unless every line is valid. */
static void check_file(const char *file, const char *mode, struct dump *d)
{
	char cmd[512], py[128];

	tpath(py, sizeof(py), "check.py");
	snprintf(cmd, sizeof(cmd), "python3 %s %s < %s", py, mode, file);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	size_t cap = 1 << 16;
	d->text = pool_malloc(cap);
	d->len = 0;
	for (;;) {
		if (cap - d->len < 4096) {
			cap *= 2;
			d->text = pool_realloc(d->text, cap);
			ck_assert_ptr_nonnull(d->text);
		}
		size_t n = fread(d->text + d->len, 1, cap - d->len - 1, f);
		if (n == 0)
			break;
		d->len += n;
	}
	d->text[d->len] = '\0';
	int status = pclose(f);
	ck_assert_msg(status == 0, "checker failed on %s (status %d)", file, status);
}

static unsigned dump_lines(const struct dump *d)
{
	unsigned n = 0;
	for (size_t i = 0; i < d->len; i++)
		n += d->text[i] == '\n';
	return n;
}

/* The value of <key> on line <line> of <d>, into <buf>; "" when missing. */
static const char *dump_get(const struct dump *d, unsigned line, const char *key, char *buf,
			    size_t cap)
{
	const char *p = d->text;
	char pat[64];

	for (unsigned i = 0; i < line && p != NULL; i++) {
		p = strchr(p, '\n');
		p = p != NULL ? p + 1 : NULL;
	}
	ck_assert_ptr_nonnull(p);
	const char *end = strchr(p, '\n');
	snprintf(pat, sizeof(pat), "%s=", key);
	size_t plen = strlen(pat);
	buf[0] = '\0';
	for (const char *q = p; q != NULL && q < end; q = strchr(q, ' ')) {
		q += *q == ' ';
		if (strncmp(q, pat, plen) != 0)
			continue;
		size_t n = strcspn(q + plen, " \n");
		ck_assert_uint_lt(n, cap);
		memcpy(buf, q + plen, n);
		buf[n] = '\0';
		break;
	}
	return buf;
}

static void expect(const struct dump *d, unsigned line, const char *key, const char *want)
{
	char got[4096];

	dump_get(d, line, key, got, sizeof(got));
	ck_assert_msg(strcmp(got, want) == 0, "line %u, %s: got \"%s\", want \"%s\"", line, key,
		      got, want);
}

/* The checker's spelling of a string: "s:" and the hex of its bytes. */
static const char *sx(const void *bytes, size_t len, char *buf, size_t cap)
{
	const unsigned char *b = bytes;

	ck_assert_uint_lt(2 + 2 * len, cap);
	memcpy(buf, "s:", 2);
	for (size_t i = 0; i < len; i++) {
		buf[2 + 2 * i] = hex_digits[b[i] >> 4];
		buf[3 + 2 * i] = hex_digits[b[i] & 0xf];
	}
	buf[2 + 2 * len] = '\0';
	return buf;
}

static void expect_str(const struct dump *d, unsigned line, const char *key, const char *s)
{
	char want[4096];

	expect(d, line, key, sx(s, strlen(s), want, sizeof(want)));
}

static void count_expect(const struct dump *d, const char *key, long want)
{
	char got[64];

	dump_get(d, 0, key, got, sizeof(got));
	ck_assert_msg(got[0] != '\0', "count has no %s", key);
	ck_assert_int_eq(strtol(got, NULL, 10), want);
}

/* ---- Producing records. ---- */

static struct audit_record *claim_ok(struct audit_ring *r)
{
	struct audit_record *rec = audit_claim(r);
	ck_assert_ptr_nonnull(rec);
	rec->id = audit_next_id(r);
	return rec;
}

static void set_str(char *dst, size_t cap, const char *s)
{
	audit_copy(dst, cap, s, strlen(s));
}

#define SET(rec, field, s) set_str((rec)->field, sizeof((rec)->field), (s))

/* ---- Tests. ---- */

static const char *const conn_keys =
    "ts,id,event,sandbox,conn,tier,decision,reason,rule,method,host,port,path,status,addr,detail";
static const char *const close_keys =
    "ts,id,event,sandbox,conn,tier,decision,reason,rule,method,host,port,path,status,"
    "bytes_up,bytes_down,duration_ms,addr,detail";

static const char *const ingress_keys =
    "ts,id,event,sandbox,conn,decision,reason,method,host,path,status,bytes_up,bytes_down,"
    "duration_ms,client,detail";

static void produce_kinds(struct audit_ring *r, uint64_t *first_id)
{
	struct audit_record *rec = claim_ok(r);
	*first_id = rec->id;
	rec->kind = AUDIT_DECISION;
	rec->conn_id = 7;
	rec->tier = TIER_PASSTHROUGH;
	rec->allowed = true;
	rec->port = 443;
	SET(rec, sandbox, "sb1");
	SET(rec, rule, "github");
	SET(rec, method, "CONNECT");
	SET(rec, host, "github.com");
	SET(rec, addr, "140.82.112.3:443");
	audit_commit(r, rec);

	rec = claim_ok(r);
	rec->kind = AUDIT_DECISION;
	rec->conn_id = 8;
	rec->tier = TIER_DENY;
	rec->reason = REASON_HOST_NOT_ALLOWED;
	rec->port = 80;
	rec->status = 403;
	SET(rec, sandbox, "sb1");
	SET(rec, method, "GET");
	SET(rec, host, "evil.example");
	SET(rec, path, "/x?y=1");
	audit_commit(r, rec);

	rec = claim_ok(r);
	rec->kind = AUDIT_CLOSE;
	rec->conn_id = 7;
	rec->tier = TIER_PASSTHROUGH;
	rec->allowed = true;
	rec->port = 443;
	rec->bytes_up = 1234;
	rec->bytes_down = UINT64_MAX;
	rec->duration_ms = 5000;
	SET(rec, sandbox, "sb1");
	SET(rec, host, "github.com");
	SET(rec, addr, "[2001:db8::1]:443");
	SET(rec, detail, "upstream closed");
	audit_commit(r, rec);

	rec = claim_ok(r);
	rec->kind = AUDIT_NOTICE;
	SET(rec, detail, "started");
	audit_commit(r, rec);

	/* A public client whose TLS handshake failed: no sandbox, no request, a reason. */
	rec = claim_ok(r);
	rec->kind = AUDIT_INGRESS;
	rec->conn_id = 9;
	rec->reason = REASON_TLS_HANDSHAKE_FAILED;
	rec->bytes_up = 517;
	rec->duration_ms = 3;
	SET(rec, addr, "127.0.0.8:40000");
	SET(rec, detail, "tlsv1 alert unknown ca");
	audit_commit(r, rec);
}

START_TEST(test_roundtrip_kinds)
{
	char path[128], dir[128], id[AUDIT_ID_BYTES];
	struct audit *a = NULL;
	struct dump d;
	struct stat st;
	uint64_t first_id = 0;

	tpath(dir, sizeof(dir), "logs");
	tpath(path, sizeof(path), "logs/audit.log");
	ck_assert_int_eq(audit_open(path, 1, &a), 0);
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0750);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0640);
	produce_kinds(audit_ring_get(a, 0), &first_id);
	audit_format_id(a, first_id, id);
	audit_close(a);

	check_file(path, "dump", &d);
	ck_assert_uint_eq(dump_lines(&d), 6);
	expect(&d, 0, "keys", conn_keys);
	expect_str(&d, 0, "id", id);
	expect_str(&d, 0, "event", "decision");
	expect_str(&d, 0, "sandbox", "sb1");
	expect(&d, 0, "conn", "7");
	expect_str(&d, 0, "tier", "passthrough");
	expect_str(&d, 0, "decision", "allow");
	expect_str(&d, 0, "reason", "none");
	expect_str(&d, 0, "rule", "github");
	expect_str(&d, 0, "method", "CONNECT");
	expect_str(&d, 0, "host", "github.com");
	expect(&d, 0, "port", "443");
	expect(&d, 0, "path", "null");
	expect(&d, 0, "status", "null");
	expect_str(&d, 0, "addr", "140.82.112.3:443");
	expect(&d, 0, "detail", "null");

	expect(&d, 1, "keys", conn_keys);
	expect_str(&d, 1, "tier", "deny");
	expect_str(&d, 1, "decision", "deny");
	expect_str(&d, 1, "reason", "host_not_allowed");
	expect(&d, 1, "rule", "null");
	expect_str(&d, 1, "host", "evil.example");
	expect(&d, 1, "port", "80");
	expect_str(&d, 1, "path", "/x?y=1");
	expect(&d, 1, "status", "403");
	expect(&d, 1, "addr", "null");

	expect(&d, 2, "keys", close_keys);
	expect_str(&d, 2, "event", "close");
	expect(&d, 2, "bytes_up", "1234");
	expect(&d, 2, "bytes_down", "18446744073709551615");
	expect(&d, 2, "duration_ms", "5000");
	expect_str(&d, 2, "addr", "[2001:db8::1]:443");
	expect_str(&d, 2, "detail", "upstream closed");

	expect(&d, 3, "keys", "ts,id,event,detail");
	expect_str(&d, 3, "event", "notice");
	expect_str(&d, 3, "detail", "started");

	expect(&d, 4, "keys", ingress_keys);
	expect_str(&d, 4, "event", "ingress");
	expect(&d, 4, "sandbox", "null");
	expect_str(&d, 4, "decision", "deny");
	expect_str(&d, 4, "reason", "tls_handshake_failed");
	expect(&d, 4, "method", "null");
	expect(&d, 4, "status", "null");
	expect(&d, 4, "bytes_up", "517");
	expect_str(&d, 4, "client", "127.0.0.8:40000");
	expect_str(&d, 4, "detail", "tlsv1 alert unknown ca");

	expect(&d, 5, "keys", "ts,id,event,detail,written,dropped,lost");
	expect_str(&d, 5, "detail", "audit_closed");
	expect(&d, 5, "written", "5");
	expect(&d, 5, "dropped", "0");
	expect(&d, 5, "lost", "0");
	pool_free(d.text);
}
END_TEST

/* Hosts and the bytes the checker must decode them to. */
struct escape_case {
	const char *in;
	const char *want;
};

static const struct escape_case escape_cases[] = {
	{ "a\"b\\c", "a\"b\\c" },
	{ "\x01\n\t\x1f\x7f end", "\x01\n\t\x1f\x7f end" },
	{ "\xff", "\xef\xbf\xbd" },
	{ "\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd" },                 /* overlong '/' */
	{ "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* surrogate */
	{ "x\xe2\x82", "x\xef\xbf\xbd\xef\xbf\xbd" },               /* truncated */
	{ "\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* > U+10FFFF */
	{ "\xe0\x80\xaf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* overlong '/' */
	{ "\xf0\x8f\xbf\xbf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* overlong */
	{ "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", /* valid, up to U+10FFFF */
	  "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf" },
	{ "\xc2\x80\xe0\xa0\x80\xf0\x90\x80\x80\xed\x9f\xbf", /* range edges */
	  "\xc2\x80\xe0\xa0\x80\xf0\x90\x80\x80\xed\x9f\xbf" },
	{ "\x80 \xbf", "\xef\xbf\xbd \xef\xbf\xbd" }, /* lone continuation bytes */
};

START_TEST(test_escaping)
{
	char path[128], want[4096], big[300];
	struct audit *a = NULL;
	struct dump d;
	unsigned n = AN_ARRAY_LEN(escape_cases);

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_open(path, 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	for (unsigned i = 0; i < n; i++) {
		struct audit_record *rec = claim_ok(r);
		SET(rec, host, escape_cases[i].in);
		/* Every string field goes through the same escaper. */
		SET(rec, sandbox, "s\"1");
		SET(rec, method, "G\\T");
		SET(rec, rule, "r\n");
		SET(rec, path, "/\"");
		SET(rec, addr, "\x02");
		SET(rec, detail, "\xfe");
		audit_commit(r, rec);
	}
	/* A full field: 255 bytes and the NUL, from a longer source. */
	memset(big, 'h', sizeof(big));
	struct audit_record *rec = claim_ok(r);
	audit_copy(rec->host, sizeof(rec->host), big, sizeof(big));
	audit_commit(r, rec);
	/* No NUL at all: the writer must stop at the array's end. */
	rec = claim_ok(r);
	memset(rec->host, 'z', sizeof(rec->host));
	memset(rec->detail, 'd', sizeof(rec->detail));
	audit_commit(r, rec);
	rec = claim_ok(r);
	memset(rec->host, 0xff, sizeof(rec->host));
	audit_commit(r, rec);
	audit_close(a);

	check_file(path, "dump", &d);
	ck_assert_uint_eq(dump_lines(&d), n + 4);
	for (unsigned i = 0; i < n; i++) {
		expect_str(&d, i, "host", escape_cases[i].want);
		expect_str(&d, i, "sandbox", "s\"1");
		expect_str(&d, i, "method", "G\\T");
		expect_str(&d, i, "rule", "r\n");
		expect_str(&d, i, "path", "/\"");
		expect_str(&d, i, "addr", "\x02");
		expect_str(&d, i, "detail", "\xef\xbf\xbd");
	}
	expect(&d, n, "host", sx(big, 255, want, sizeof(want)));
	memset(big, 'z', sizeof(big));
	expect(&d, n + 1, "host", sx(big, 256, want, sizeof(want)));
	memset(big, 'd', sizeof(big));
	expect(&d, n + 1, "detail", sx(big, 128, want, sizeof(want)));
	char fffd[256 * 3];
	for (unsigned i = 0; i < 256; i++)
		memcpy(fffd + 3 * i, "\xef\xbf\xbd", 3);
	expect(&d, n + 2, "host", sx(fffd, sizeof(fffd), want, sizeof(want)));
	pool_free(d.text);
}
END_TEST

/* Our own spelling, checked on the raw bytes: \u00XX for controls, DEL kept. */
START_TEST(test_escaping_raw)
{
	char line[AUDIT_LINE_WORST_BYTES];
	struct audit *a = NULL;
	struct audit_record rec;
	char path[128];

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_setup(path, 1, &a), 0);
	memset(&rec, 0, sizeof(rec));
	SET(&rec, host, "q\"b\\\x01\n\x1f\x7f\xff\xc3\xa9");
	size_t len = format_record(a, &rec, line);
	line[len] = '\0';
	ck_assert_ptr_nonnull(strstr(line, ",\"host\":\"q\\\"b\\\\\\u0001\\u000a\\u001f\x7f"
					   "\\ufffd\xc3\xa9\","));
	ck_assert_ptr_nonnull(strstr(line, ",\"sandbox\":null,"));
	ck_assert_int_eq(line[len - 1], '\n');
	ck_assert_ptr_null(memchr(line, '\n', len - 1));
	audit_close(a);
}
END_TEST

/* Every string field full, with no NUL, of bytes that take six to escape. */
static void fill_worst(struct audit_record *rec, unsigned char c)
{
	memset(rec, 0, sizeof(*rec));
	rec->kind = AUDIT_CLOSE;
	rec->ts_us = UINT64_MAX;
	rec->id = UINT64_MAX;
	rec->conn_id = UINT64_MAX;
	rec->bytes_up = UINT64_MAX;
	rec->bytes_down = UINT64_MAX;
	rec->duration_ms = UINT32_MAX;
	rec->port = UINT16_MAX;
	rec->status = UINT16_MAX;
	rec->tier = TIER_PASSTHROUGH;
	rec->reason = REASON_UPSTREAM_BAD_RESPONSE;
	memset(rec->sandbox, c, sizeof(rec->sandbox));
	memset(rec->method, c, sizeof(rec->method));
	memset(rec->host, c, sizeof(rec->host));
	memset(rec->rule, c, sizeof(rec->rule));
	memset(rec->path, c, sizeof(rec->path));
	memset(rec->addr, c, sizeof(rec->addr));
	memset(rec->detail, c, sizeof(rec->detail));
}

START_TEST(test_worst_case_line)
{
	static char line[AUDIT_LINE_WORST_BYTES];
	struct audit_record rec;
	struct audit *a = NULL;
	char path[128];
	struct dump d;
	const unsigned char fills[] = { 0x01, 0xff, '"', 0x80 };

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_setup(path, 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	for (unsigned i = 0; i < AN_ARRAY_LEN(fills); i++) {
		fill_worst(&rec, fills[i]);
		size_t len = format_record(a, &rec, line);
		ck_assert_uint_le(len, AUDIT_LINE_WORST_BYTES);
		if (fills[i] != '"')
			ck_assert_uint_ge(len, 6 * AUDIT_STRINGS_BYTES);
		struct audit_record *slot = claim_ok(r);
		uint64_t id = slot->id;
		fill_worst(slot, fills[i]);
		slot->id = id;
		audit_commit(r, slot);
	}
	audit_close(a);
	check_file(path, "dump", &d);
	ck_assert_uint_eq(dump_lines(&d), AN_ARRAY_LEN(fills) + 1);
	expect(&d, 0, "port", "65535");
	expect(&d, 0, "conn", "18446744073709551615");
	expect(&d, 0, "duration_ms", "4294967295");
	expect_str(&d, 0, "reason", "upstream_bad_response");
	pool_free(d.text);
}
END_TEST

static void wait_written(struct audit *a, uint64_t want)
{
	for (int i = 0; i < 10000 && audit_written(a) < want; i++)
		usleep(1000);
	ck_assert_uint_eq(audit_written(a), want);
}

START_TEST(test_ring_full)
{
	char path[128];
	struct audit *a = NULL;
	struct dump d;
	static const struct audit_record zero;

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_setup(path, 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	for (uint32_t i = 0; i < LIMITS_AUDIT_RING_RECORDS; i++) {
		struct audit_record *rec = claim_ok(r);
		rec->conn_id = i;
		SET(rec, host, "full.example");
		audit_commit(r, rec);
	}
	ck_assert_uint_eq(audit_dropped(a), 0);
	ck_assert_ptr_null(audit_claim(r));
	ck_assert_uint_eq(audit_dropped(a), 1);
	ck_assert_ptr_null(audit_claim(r));
	ck_assert_uint_eq(audit_dropped(a), 2);

	/* Once the writer runs, the ring wraps and slots come back zeroed. */
	ck_assert_int_eq(audit_start(a), 0);
	wait_written(a, LIMITS_AUDIT_RING_RECORDS);
	for (uint32_t i = 0; i < LIMITS_AUDIT_RING_RECORDS; i++) {
		struct audit_record *rec = audit_claim(r);
		ck_assert_ptr_nonnull(rec);
		ck_assert_int_eq(memcmp(rec, &zero, sizeof(zero)), 0);
		rec->id = audit_next_id(r);
		audit_commit(r, rec);
	}
	ck_assert_uint_eq(audit_dropped(a), 2);
	audit_close(a);

	check_file(path, "count", &d);
	count_expect(&d, "lines", 2 * LIMITS_AUDIT_RING_RECORDS + 2);
	count_expect(&d, "records", 2 * LIMITS_AUDIT_RING_RECORDS);
	count_expect(&d, "written", 2 * LIMITS_AUDIT_RING_RECORDS);
	count_expect(&d, "dropped", 2);
	count_expect(&d, "drop_notices", 1);
	pool_free(d.text);
}
END_TEST

/* Drop notices: the first at once, then at most one per interval unless forced. */
START_TEST(test_drop_notice_interval)
{
	char path[128];
	struct audit *a = NULL;

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_setup(path, 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	writer_report_drops(a, false);
	ck_assert_uint_eq(a->out_len, 0);
	for (uint32_t i = 0; i < LIMITS_AUDIT_RING_RECORDS; i++)
		audit_commit(r, claim_ok(r));
	ck_assert_ptr_null(audit_claim(r));
	writer_report_drops(a, false);
	size_t one = a->out_len;
	ck_assert_uint_gt(one, 0);
	const char *want = "\"detail\":\"audit_dropped\",\"dropped\":1}\n";
	ck_assert_ptr_nonnull(memmem(a->out, a->out_len, want, strlen(want)));
	ck_assert_ptr_null(audit_claim(r));
	writer_report_drops(a, false);
	ck_assert_uint_eq(a->out_len, one);
	writer_report_drops(a, true);
	ck_assert_uint_gt(a->out_len, one);
	ck_assert_uint_eq(a->dropped_reported, 2);
	audit_close(a);
}
END_TEST

struct producer {
	struct audit *a;
	uint32_t ring;
	uint64_t refused;
};

#define PRODUCED_PER_THREAD 100000u

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	struct audit_ring *r = audit_ring_get(p->a, p->ring);

	for (uint32_t i = 0; i < PRODUCED_PER_THREAD; i++) {
		struct audit_record *rec = audit_claim(r);
		if (rec == NULL) {
			p->refused++;
			continue;
		}
		rec->id = audit_next_id(r);
		rec->conn_id = i;
		rec->port = 443;
		SET(rec, sandbox, "mt");
		snprintf(rec->host, sizeof(rec->host), "t%u-%u", p->ring, i);
		audit_commit(r, rec);
	}
	return NULL;
}

START_TEST(test_two_producers)
{
	char path[128];
	struct audit *a = NULL;
	struct producer prod[2];
	pthread_t th[2];
	struct dump d;

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_open(path, 2, &a), 0);
	for (uint32_t i = 0; i < 2; i++) {
		prod[i] = (struct producer){ .a = a, .ring = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, producer_main, &prod[i]), 0);
	}
	for (uint32_t i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	uint64_t refused = prod[0].refused + prod[1].refused;
	ck_assert_uint_eq(audit_dropped(a), refused);
	audit_close(a);

	check_file(path, "count", &d);
	char got[64];
	long written = strtol(dump_get(&d, 0, "written", got, sizeof(got)), NULL, 10);
	count_expect(&d, "records", written);
	count_expect(&d, "dropped", (long)refused);
	ck_assert_int_eq(written + (long)refused, 2 * PRODUCED_PER_THREAD);
	long notices = strtol(dump_get(&d, 0, "drop_notices", got, sizeof(got)), NULL, 10);
	if (refused > 0)
		ck_assert_int_ge(notices, 1);
	else
		ck_assert_int_eq(notices, 0);
	pool_free(d.text);
}
END_TEST

START_TEST(test_open_errors)
{
	char path[PATH_MAX + 64], file[128];
	struct audit *a = NULL;

	tpath(file, sizeof(file), "plain");
	write_file(file, "x");
	tpath(path, sizeof(path), "plain/audit.log");
	ck_assert_int_eq(audit_open(path, 1, &a), -ENOTDIR);
	tpath(path, sizeof(path), "plain/sub/audit.log");
	ck_assert_int_eq(audit_open(path, 1, &a), -ENOTDIR);
	tpath(path, sizeof(path), "missing/deeper/audit.log");
	ck_assert_int_eq(audit_open(path, 1, &a), -ENOENT);
	tpath(path, sizeof(path), "");
	ck_assert_int_eq(audit_open(path, 1, &a), -EISDIR);
	memset(path, 'd', sizeof(path) - 1);
	path[0] = '/';
	memcpy(path + sizeof(path) - 12, "/audit.log", 11);
	ck_assert_int_eq(audit_open(path, 1, &a), -ENAMETOOLONG);
	ck_assert_ptr_null(a);

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_open(path, 0, &a), -EINVAL);
	ck_assert_int_eq(audit_open(path, AUDIT_RINGS_MAX + 1, &a), -EINVAL);
	ck_assert_ptr_null(a);
	ck_assert_int_eq(audit_open(path, AUDIT_RINGS_MAX, &a), 0);
	struct audit_ring *last = audit_ring_get(a, AUDIT_RINGS_MAX - 1);
	ck_assert_uint_eq(audit_next_id(last) >> AUDIT_ID_SEQ_BITS, AUDIT_RINGS_MAX - 1);
	audit_close(a);
}
END_TEST

/* -EACCES needs a user the permissions apply to: as root, a child drops to nobody. */
START_TEST(test_open_eacces)
{
	char dir[128], path[128];

	tpath(dir, sizeof(dir), "ro");
	tpath(path, sizeof(path), "ro/audit.log");
	ck_assert_int_eq(chmod(tdir, 0755), 0);
	ck_assert_int_eq(mkdir(dir, 0555), 0);
	pid_t pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		struct audit *a = NULL;
		if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0)
			_exit(100);
		_exit(-audit_open(path, 1, &a));
	}
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WIFEXITED(status), 1);
	ck_assert_int_eq(WEXITSTATUS(status), EACCES);
}
END_TEST

START_TEST(test_stdout)
{
	char path[128];
	struct audit *a = NULL;
	struct dump d;

	tpath(path, sizeof(path), "stdout.log");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	fflush(stdout);
	int saved = dup(STDOUT_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_eq(dup2(fd, STDOUT_FILENO), STDOUT_FILENO);
	ck_assert_int_eq(audit_open("-", 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	struct audit_record *rec = claim_ok(r);
	SET(rec, host, "stdout.example");
	audit_commit(r, rec);
	audit_close(a);
	/* Standard output is borrowed: still open after close. */
	ck_assert_int_ne(fcntl(STDOUT_FILENO, F_GETFD), -1);
	ck_assert_int_eq(dup2(saved, STDOUT_FILENO), STDOUT_FILENO);
	close(saved);
	close(fd);

	check_file(path, "dump", &d);
	ck_assert_uint_eq(dump_lines(&d), 2);
	expect_str(&d, 0, "host", "stdout.example");
	pool_free(d.text);
}
END_TEST

static int cmp_str(const void *x, const void *y)
{
	return strcmp(x, y);
}

START_TEST(test_format_id)
{
	char path[128], id[AUDIT_ID_BYTES], again[AUDIT_ID_BYTES], boot[16];
	struct audit *a = NULL;
	enum { IDS = 20000 };

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_setup(path, 2, &a), 0);
	struct audit_ring *r0 = audit_ring_get(a, 0), *r1 = audit_ring_get(a, 1);
	ck_assert_uint_eq(audit_next_id(r0), 1);
	ck_assert_uint_eq(audit_next_id(r0), 2);
	ck_assert_uint_eq(audit_next_id(r1), (1ull << 48) | 1);

	ck_assert_int_eq(audit_format_id(a, 0x0123456789abcdefull, id), 25);
	ck_assert_int_eq(audit_format_id(a, 0x0123456789abcdefull, again), 25);
	ck_assert_str_eq(id, again);
	snprintf(boot, sizeof(boot), "%08" PRIx32 "-", a->boot);
	ck_assert_int_eq(strncmp(id, boot, 9), 0);
	ck_assert_str_eq(id + 9, "0123456789abcdef");
	ck_assert_int_eq(audit_format_id(a, 0, id), 25);
	ck_assert_str_eq(id + 9, "0000000000000000");
	ck_assert_int_eq(audit_format_id(a, UINT64_MAX, id), 25);
	ck_assert_str_eq(id + 9, "ffffffffffffffff");

	char(*ids)[AUDIT_ID_BYTES] = pool_calloc(IDS, AUDIT_ID_BYTES);
	ck_assert_ptr_nonnull(ids);
	for (unsigned i = 0; i < IDS; i++) {
		uint64_t v = audit_next_id(i % 2 ? r1 : r0);
		ck_assert_int_eq(audit_format_id(a, v, ids[i]), 25);
		ck_assert_uint_eq(strtoull(ids[i] + 9, NULL, 16), v);
	}
	qsort(ids, IDS, AUDIT_ID_BYTES, cmp_str);
	for (unsigned i = 1; i < IDS; i++)
		ck_assert_str_ne(ids[i - 1], ids[i]);
	pool_free(ids);
	audit_close(a);
}
END_TEST

START_TEST(test_copy)
{
	char dst[8];

	audit_copy(dst, sizeof(dst), "abcdefg", 7); /* N: exactly fits */
	ck_assert_str_eq(dst, "abcdefg");
	audit_copy(dst, sizeof(dst), "abcdefgh", 8); /* N + 1: truncated */
	ck_assert_str_eq(dst, "abcdefg");
	audit_copy(dst, sizeof(dst), NULL, 0);
	ck_assert_str_eq(dst, "");
	audit_copy(dst, 1, "abc", 3);
	ck_assert_str_eq(dst, "");
	audit_copy(dst, sizeof(dst), "abcd\xe2\x82\xac", 7); /* a whole euro sign fits */
	ck_assert_str_eq(dst, "abcd\xe2\x82\xac");
	audit_copy(dst, sizeof(dst), "abcde\xe2\x82\xac", 8); /* it does not: cut before */
	ck_assert_str_eq(dst, "abcde");
	audit_copy(dst, sizeof(dst), "abcdef\xc3\xa9", 8);
	ck_assert_str_eq(dst, "abcdef");
	audit_copy(dst, sizeof(dst), "abc\xf0\x9f\x98\x80z", 8); /* 4 bytes end at the cut */
	ck_assert_str_eq(dst, "abc\xf0\x9f\x98\x80");
	audit_copy(dst, sizeof(dst), "abcd\xf0\x9f\x98\x80", 8);
	ck_assert_str_eq(dst, "abcd");
	/* Invalid runs of continuation bytes are cut where they fall. */
	audit_copy(dst, sizeof(dst), "a\x80\x80\x80\x80\x80\x80\x80\x80", 9);
	ck_assert_uint_eq(strlen(dst), 7);
	audit_copy(dst, 4, "\xe2\x82\xac\xe2\x82\xac", 6);
	ck_assert_str_eq(dst, "\xe2\x82\xac");
	audit_copy(dst, 3, "\xe2\x82\xac", 3);
	ck_assert_str_eq(dst, "");
}
END_TEST

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void expect_ts(struct audit *a, uint64_t ts_us)
{
	char got[64], want[64];
	struct tm tm;
	time_t sec = (time_t)(ts_us / 1000000u);

	*put_ts(a, got, ts_us) = '\0';
	ck_assert_ptr_nonnull(gmtime_r(&sec, &tm));
	size_t n = strftime(want, sizeof(want), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(want + n, sizeof(want) - n, ".%06uZ", (unsigned)(ts_us % 1000000u));
	ck_assert_str_eq(got, want);
}

START_TEST(test_timestamp)
{
	char path[128], got[64];
	struct audit *a = NULL;
	uint64_t seed = 0x9e3779b97f4a7c15ull;

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_setup(path, 1, &a), 0);
	*put_ts(a, got, 0) = '\0';
	ck_assert_str_eq(got, "1970-01-01T00:00:00.000000Z");
	*put_ts(a, got, 1796107352123456ull) = '\0';
	ck_assert_str_eq(got, "2026-12-01T06:42:32.123456Z");
	*put_ts(a, got, 1796107352999999ull) = '\0'; /* same second: the cached date */
	ck_assert_str_eq(got, "2026-12-01T06:42:32.999999Z");
	expect_ts(a, 951782400000000ull);    /* 2000-02-29 */
	expect_ts(a, 4107542399999999ull);   /* 2100-02-28T23:59:59 */
	expect_ts(a, 253402300799999999ull); /* 9999-12-31T23:59:59 */
	for (unsigned i = 0; i < 200000; i++)
		expect_ts(a, xorshift(&seed) % 253402300800000000ull);
	audit_close(a);
}
END_TEST

/* A full disk: records in the failed write are lost and counted, the ring still drains. */
START_TEST(test_write_error)
{
	struct audit *a = NULL;

	ck_assert_int_eq(audit_setup("/dev/full", 1, &a), 0);
	ck_assert_int_eq(a->fd_regular, 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	for (unsigned i = 0; i < 10; i++)
		audit_commit(r, claim_ok(r));
	ck_assert_uint_eq(writer_pass(a), 10);
	writer_flush(a);
	ck_assert_uint_eq(atomic_load(&a->write_errors), 1);
	ck_assert_uint_eq(atomic_load(&a->lost), 10);
	ck_assert_uint_eq(audit_written(a), 0);
	ck_assert_uint_eq(a->out_len, 0);
	ck_assert_int_eq(a->line_torn, 0);
	ck_assert(audit_failing(a));
	audit_commit(r, claim_ok(r));
	audit_close(a);
}
END_TEST

/*
 * A write cut short (file size limit): what it wrote is cut off the file again,
 * so no torn line stays, and the writer says it is failing. The first write
 * that lands once it can is the audit_gap notice (the records lost, from when
 * to when), then what followed; the closing notice counts the loss too.
 */
/*
 * Rotation under load: while two producers commit 100,000 records each, the
 * file is moved away and reopened five times. Every record is in exactly one
 * of the six files (the checker refuses a duplicate id in their concatenation,
 * and the count is what was written), and each file after the first begins
 * with the "audit_reopened" notice of the records written before it.
 */
#define REOPENS 5u

START_TEST(test_reopen_under_load)
{
	char path[128], moved[REOPENS][144], all[128], cmd[1024];
	struct audit *a = NULL;
	struct producer prod[2];
	pthread_t th[2];
	struct dump d;
	char got[64];

	tpath(path, sizeof(path), "audit.log");
	tpath(all, sizeof(all), "all.log");
	ck_assert_int_eq(audit_open(path, 2, &a), 0);
	for (uint32_t i = 0; i < 2; i++) {
		prod[i] = (struct producer){ .a = a, .ring = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, producer_main, &prod[i]), 0);
	}
	for (uint32_t i = 0; i < REOPENS; i++) {
		snprintf(moved[i], sizeof(moved[i]), "%s.%u", path, i + 1);
		ck_assert_int_eq(rename(path, moved[i]), 0);
		ck_assert_int_eq(audit_reopen(a, 5000), 0);
		usleep(2000);
	}
	for (uint32_t i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	uint64_t refused = prod[0].refused + prod[1].refused;
	audit_close(a);

	int n = snprintf(cmd, sizeof(cmd), "cat");
	for (uint32_t i = 0; i < REOPENS; i++)
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " %s", moved[i]);
	snprintf(cmd + n, sizeof(cmd) - (size_t)n, " %s > %s", path, all);
	ck_assert_int_eq(system(cmd), 0);
	check_file(all, "count", &d);
	long written = strtol(dump_get(&d, 0, "written", got, sizeof(got)), NULL, 10);
	count_expect(&d, "records", written);
	ck_assert_int_eq(written + (long)refused, 2 * PRODUCED_PER_THREAD);
	pool_free(d.text);
	for (uint32_t i = 1; i <= REOPENS; i++) {
		check_file(i < REOPENS ? moved[i] : path, "dump", &d);
		expect_str(&d, 0, "detail", "audit_reopened");
		pool_free(d.text);
	}
}
END_TEST

/* A path that cannot be opened any more: the writer stays on the file it has. */
START_TEST(test_reopen_fails)
{
	char dir[128], path[160];
	struct audit *a = NULL;

	tpath(dir, sizeof(dir), "logs");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/audit.log", dir);
	ck_assert_int_eq(audit_open(path, 1, &a), 0);
	ck_assert(audit_reopenable(a));
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	write_file(dir, "a file where the directory was\n"); /* mkdir and open both fail */
	ck_assert_int_eq(audit_reopen(a, 5000), -ENOTDIR);
	struct audit_ring *r = audit_ring_get(a, 0);
	struct audit_record *rec = claim_ok(r);
	SET(rec, host, "kept.example");
	audit_commit(r, rec);
	audit_close(a); /* written to the unlinked file: nothing lost, nothing at <path> */
	ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/* Standard output is never reopened. */
START_TEST(test_reopen_stdout)
{
	struct audit *a = NULL;

	ck_assert_int_eq(audit_open("-", 1, &a), 0);
	ck_assert(!audit_reopenable(a));
	ck_assert_int_eq(audit_reopen(a, 1000), -EINVAL);
	audit_close(a);
}
END_TEST

START_TEST(test_torn_write)
{
	char path[128];
	struct audit *a = NULL;
	struct rlimit old, small = { .rlim_cur = 4096 };
	struct dump d;
	size_t len = 0;

	tpath(path, sizeof(path), "audit.log");
	ck_assert_int_eq(audit_setup(path, 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	for (unsigned i = 0; i < 40; i++) {
		struct audit_record *rec = claim_ok(r);
		SET(rec, host, "torn.example");
		audit_commit(r, rec);
	}
	signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	small.rlim_max = old.rlim_max;
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
	ck_assert_uint_eq(writer_pass(a), 40);
	ck_assert(!audit_failing(a));
	writer_flush(a);
	ck_assert_uint_eq(atomic_load(&a->lost), 40);
	ck_assert_uint_eq(audit_lost(a), 40);
	ck_assert(audit_failing(a));
	ck_assert_int_eq(a->line_torn, 0); /* cut off, not left to be ended */
	char *text = unit_slurp(path, &len);
	ck_assert_uint_eq(len, 0);
	pool_free(text);
	/* Still failing: the gap notice goes with the next records or not at all, and
	 * nothing of a write that fails stays in the file. */
	for (unsigned i = 0; i < 40; i++)
		audit_commit(r, claim_ok(r));
	ck_assert_uint_eq(writer_pass(a), 40);
	writer_flush(a);
	ck_assert_uint_eq(audit_lost(a), 80);
	ck_assert(audit_failing(a));
	text = unit_slurp(path, &len);
	ck_assert_uint_eq(len, 0);
	pool_free(text);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	struct audit_record *rec = claim_ok(r);
	SET(rec, host, "after.example");
	audit_commit(r, rec);
	ck_assert_uint_eq(writer_pass(a), 1);
	writer_flush(a);
	ck_assert(!audit_failing(a));
	audit_close(a);

	check_file(path, "dump", &d);
	ck_assert_uint_eq(dump_lines(&d), 3);
	expect_str(&d, 0, "event", "notice");
	expect_str(&d, 0, "detail", "audit_gap");
	expect(&d, 0, "lost", "80");
	char from[4096], to[4096];
	dump_get(&d, 0, "from", from, sizeof(from));
	dump_get(&d, 0, "to", to, sizeof(to));
	ck_assert_msg(strncmp(from, "s:", 2) == 0 && strncmp(to, "s:", 2) == 0 &&
			  strcmp(from, to) <= 0,
		      "the gap's span: %s .. %s", from, to);
	expect_str(&d, 1, "host", "after.example");
	expect(&d, 2, "written", "1");
	expect(&d, 2, "lost", "80");
	pool_free(d.text);
}
END_TEST

START_TEST(test_claim_twice_aborts)
{
	struct audit *a = NULL;

	ck_assert_int_eq(audit_setup("/dev/null", 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	ck_assert_ptr_nonnull(audit_claim(r));
	audit_claim(r);
}
END_TEST

START_TEST(test_commit_bad_tier_aborts)
{
	struct audit *a = NULL;

	ck_assert_int_eq(audit_setup("/dev/null", 1, &a), 0);
	struct audit_ring *r = audit_ring_get(a, 0);
	struct audit_record *rec = claim_ok(r);
	rec->tier = TIER__COUNT;
	audit_commit(r, rec);
}
END_TEST

static Suite *audit_suite(void)
{
	Suite *s = suite_create("audit");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_roundtrip_kinds);
	tcase_add_test(tc, test_escaping);
	tcase_add_test(tc, test_escaping_raw);
	tcase_add_test(tc, test_worst_case_line);
	tcase_add_test(tc, test_ring_full);
	tcase_add_test(tc, test_drop_notice_interval);
	tcase_add_test(tc, test_two_producers);
	tcase_add_test(tc, test_open_errors);
	tcase_add_test(tc, test_open_eacces);
	tcase_add_test(tc, test_stdout);
	tcase_add_test(tc, test_format_id);
	tcase_add_test(tc, test_copy);
	tcase_add_test(tc, test_timestamp);
	tcase_add_test(tc, test_write_error);
	tcase_add_test(tc, test_torn_write);
	tcase_add_test(tc, test_reopen_under_load);
	tcase_add_test(tc, test_reopen_fails);
	tcase_add_test(tc, test_reopen_stdout);
	suite_add_tcase(s, tc);
	/* Programmer errors abort; no fixture, as a crashed test cannot clean up. */
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_claim_twice_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_commit_bad_tier_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	if (!unit_can("python3 -c 'import json'", "python3 is needed to validate the JSON lines"))
		return UNIT_SKIP;
	return unit_run(audit_suite());
}
