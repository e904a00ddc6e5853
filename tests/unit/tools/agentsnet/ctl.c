/*
 * Unit tests for tools/agentsnet/ctl.c: the control protocol's client side.
 *
 * Parsing: every answer is placed so that its spare byte (the parser may
 * write one terminator past <len>) is the last byte before a PROT_NONE page;
 * well-formed answers of every verb, malformed first lines, control bytes,
 * unknown codes, `sandbox ls` counts and entries. Names: ids and profiles at
 * 63 and 64 bytes. Requests: every verb, bad arguments, and the buffer at
 * exactly the line's size and one byte short. The exchange runs against a
 * forked one-shot server on a real Unix socket: ok and error answers, no
 * socket (the "not running" message), a stale socket file, a server that
 * never answers (timeout), one that closes at once, an answer of exactly
 * CTL_REPLY_BYTES_MAX bytes and one byte more, and a path too long.
 */
#include "../../../../tools/agentsnet/ctl.c"

#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "tests/unit/unit.h"

/* ---- Guarded buffers. ---- */

struct guarded {
	char *map;
	size_t map_len;
	char *buf; /* <len> bytes of input, then the spare byte, then PROT_NONE */
};

static struct guarded guard(const char *s, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t data_pages = (len + 1 + page - 1) / page;
	struct guarded g = { .map_len = (data_pages + 1) * page };

	g.map = mmap(NULL, g.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(g.map, MAP_FAILED);
	ck_assert_int_eq(mprotect(g.map + data_pages * page, page, PROT_NONE), 0);
	g.buf = g.map + data_pages * page - (len + 1);
	memcpy(g.buf, s, len);
	g.buf[len] = 'X'; /* the spare byte holds garbage until the parser writes it */
	return g;
}

static void unguard(struct guarded *g)
{
	ck_assert_int_eq(munmap(g->map, g->map_len), 0);
}

/* Parses the <len> bytes of <s> in a guarded buffer; <r> points into it until unguard. */
static int parse_n(const char *s, size_t len, struct ctl_reply *r, struct guarded *g)
{
	*g = guard(s, len);
	return ctl_reply_parse(g->buf, len, r);
}

static int parse(const char *s, struct ctl_reply *r, struct guarded *g)
{
	return parse_n(s, strlen(s), r, g);
}

static int parse_rc(const char *s)
{
	struct ctl_reply r;
	struct guarded g;
	int ret = parse(s, &r, &g);
	unguard(&g);
	return ret;
}

/* ---- Names. ---- */

static void fill(char *buf, char c, size_t n)
{
	memset(buf, c, n);
	buf[n] = '\0';
}

START_TEST(ids)
{
	char name[80];

	ck_assert(ctl_id_valid("a"));
	ck_assert(ctl_id_valid("run-1234"));
	ck_assert(ctl_id_valid("A.b_c-D9"));
	ck_assert(ctl_id_valid("a."));
	ck_assert(ctl_id_valid("-x"));
	fill(name, 'x', CTL_ID_BYTES_MAX);
	ck_assert(ctl_id_valid(name));
	fill(name, 'x', CTL_ID_BYTES_MAX + 1);
	ck_assert(!ctl_id_valid(name));
	ck_assert(!ctl_id_valid(NULL));
	ck_assert(!ctl_id_valid(""));
	ck_assert(!ctl_id_valid("."));
	ck_assert(!ctl_id_valid(".hidden"));
	ck_assert(!ctl_id_valid(".."));
	ck_assert(!ctl_id_valid("a b"));
	ck_assert(!ctl_id_valid("a/b"));
	ck_assert(!ctl_id_valid("a\nb"));
	ck_assert(!ctl_id_valid("caf\xc3\xa9"));
	ck_assert(!ctl_id_valid("a:b"));
}
END_TEST

START_TEST(profiles)
{
	char name[80];

	ck_assert(ctl_profile_valid("default"));
	ck_assert(ctl_profile_valid("strict-2"));
	fill(name, 'p', CTL_PROFILE_BYTES_MAX);
	ck_assert(ctl_profile_valid(name));
	fill(name, 'p', CTL_PROFILE_BYTES_MAX + 1);
	ck_assert(!ctl_profile_valid(name));
	ck_assert(!ctl_profile_valid(""));
	ck_assert(!ctl_profile_valid(".x"));
	ck_assert(!ctl_profile_valid("a b"));
	ck_assert(!ctl_profile_valid(NULL));
}
END_TEST

/* ---- Requests. ---- */

static int fmt(char *out, size_t cap, int argc, const char *a0, const char *a1, const char *a2,
	       const char *a3)
{
	const char *argv[] = { a0, a1, a2, a3 };
	return ctl_request_format(out, cap, argc, argv);
}

START_TEST(requests)
{
	char out[CTL_REQUEST_BYTES_MAX];

	ck_assert_int_eq(fmt(out, sizeof(out), 1, "ping", NULL, NULL, NULL), 5);
	ck_assert_str_eq(out, "ping\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 1, "stats", NULL, NULL, NULL), 6);
	ck_assert_str_eq(out, "stats\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "policy", "reload", NULL, NULL), 14);
	ck_assert_str_eq(out, "policy reload\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "policy", "status", NULL, NULL), 14);
	ck_assert_str_eq(out, "policy status\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "policy", "drop", NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 3, "policy", "reload", "x", NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "sandbox", "ls", NULL, NULL), 11);
	ck_assert_str_eq(out, "sandbox ls\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 3, "sandbox", "rm", "box", NULL), 15);
	ck_assert_str_eq(out, "sandbox rm box\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 4, "sandbox", "rm", "box", "owned"), 21);
	ck_assert_str_eq(out, "sandbox rm box owned\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 4, "sandbox", "rm", "box", "mine"), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 4, "sandbox", "add", "box", "default"), 24);
	ck_assert_str_eq(out, "sandbox add box default\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "sandbox", "stats", NULL, NULL), 14);
	ck_assert_str_eq(out, "sandbox stats\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "audit", "reopen", NULL, NULL), 13);
	ck_assert_str_eq(out, "audit reopen\n");
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "audit", "rotate", NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 3, "audit", "reopen", "x", NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 3, "sandbox", "stats", "x", NULL), -EINVAL);
}
END_TEST

/* One `sandbox stats` line: every key in its place, nothing after the last value. */
START_TEST(stats_lines)
{
	struct ctl_stats_entry e;
	const char *good = "box-1 profile default owner 1000 pid 4242 uptime_s 90061 conns 3 "
			   "requests 18446744073709551615 refusals 7 bytes_up 1024 bytes_down 0";

	ck_assert_int_eq(ctl_stats_parse(good, &e), 0);
	ck_assert_str_eq(e.id, "box-1");
	ck_assert_str_eq(e.profile, "default");
	ck_assert_uint_eq(e.owner, 1000);
	ck_assert_int_eq(e.pid, 4242);
	ck_assert_uint_eq(e.uptime_s, 90061);
	ck_assert_uint_eq(e.conns, 3);
	ck_assert_uint_eq(e.requests, UINT64_MAX);
	ck_assert_uint_eq(e.refusals, 7);
	ck_assert_uint_eq(e.bytes_up, 1024);
	ck_assert_uint_eq(e.bytes_down, 0);
	ck_assert_int_eq(
	    ctl_stats_parse("box profile - owner 0 pid 0 uptime_s 0 conns 0 requests 0 "
			    "refusals 0 bytes_up 0 bytes_down 0",
			    &e),
	    0);
	const char *bad[] = {
		"",
		"box", /* cut short */
		"box profile default owner 1000 pid 1 uptime_s 1 conns 1 requests 1 refusals 1 "
		"bytes_up 1",
		/* a key out of its place */
		"box owner 1000 profile default pid 1 uptime_s 1 conns 1 requests 1 refusals 1 "
		"bytes_up 1 bytes_down 1",
		/* something after the last value */
		"box profile default owner 1 pid 1 uptime_s 1 conns 1 requests 1 refusals 1 bytes_up 1 "
		"bytes_down 1 extra",
		/* an id the daemon never gives */
		".box profile default owner 1 pid 1 uptime_s 1 conns 1 requests 1 refusals 1 "
		"bytes_up 1 bytes_down 1",
		/* not a number */
		"box profile default owner x pid 1 uptime_s 1 conns 1 requests 1 refusals 1 bytes_up 1 "
		"bytes_down 1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(ctl_stats_parse(bad[i], &e) == -EPROTO, "%s", bad[i]);
}
END_TEST

START_TEST(requests_refused)
{
	char out[CTL_REQUEST_BYTES_MAX];

	ck_assert_int_eq(fmt(out, sizeof(out), 2, "ping", "x", NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "stats", "x", NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 1, "sandbox", NULL, NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "sandbox", "nuke", NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 3, "sandbox", "ls", "x", NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 2, "sandbox", "rm", NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 3, "sandbox", "rm", ".x", NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 3, "sandbox", "add", "box", NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 4, "sandbox", "add", "a b", "default"), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 4, "sandbox", "add", "box", "de fault"), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 4, "sandbox", "add", "box\nping", "d"), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 1, "PING", NULL, NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, sizeof(out), 0, "ping", NULL, NULL, NULL), -EINVAL);
	ck_assert_int_eq(fmt(out, 0, 1, "ping", NULL, NULL, NULL), -EINVAL);
}
END_TEST

/* The longest request fits the limit; the buffer at the line's size + NUL and one short. */
START_TEST(request_sizes)
{
	char out[CTL_REQUEST_BYTES_MAX], id[80], profile[80];

	fill(id, 'i', CTL_ID_BYTES_MAX);
	fill(profile, 'p', CTL_PROFILE_BYTES_MAX);
	int n = fmt(out, sizeof(out), 4, "sandbox", "add", id, profile);
	ck_assert_int_eq(n, 12 + 63 + 1 + 63 + 1);
	ck_assert_int_lt(n, (int)sizeof(out));
	ck_assert_int_eq(fmt(out, 6, 1, "ping", NULL, NULL, NULL), 5);
	ck_assert_int_eq(fmt(out, 5, 1, "ping", NULL, NULL, NULL), -EMSGSIZE);
	ck_assert_str_eq(out, "");
}
END_TEST

/* ---- Answers. ---- */

START_TEST(answer_ok)
{
	struct ctl_reply r;
	struct guarded g;

	ck_assert_int_eq(parse("ok\n", &r, &g), 0);
	ck_assert(r.ok);
	ck_assert_str_eq(r.code, "");
	ck_assert_str_eq(r.text, "");
	ck_assert_ptr_null(r.more);
	ck_assert_uint_eq(r.more_count, 0);
	unguard(&g);
	ck_assert_int_eq(parse("ok agentsnetd 0.1.0\n", &r, &g), 0);
	ck_assert_str_eq(r.text, "agentsnetd 0.1.0");
	unguard(&g);
	ck_assert_int_eq(parse("ok /run/agent snet/sandboxes/a b/\n", &r, &g), 0);
	ck_assert_str_eq(r.text, "/run/agent snet/sandboxes/a b/");
	unguard(&g);
	ck_assert_int_eq(parse("ok \n", &r, &g), 0);
	ck_assert_str_eq(r.text, "");
	unguard(&g);
	ck_assert_int_eq(parse("ok\ttab\n", &r, &g), -EPROTO); /* "ok" must end the word */
	unguard(&g);
}
END_TEST

/* Without its final newline the last line still counts: the spare byte ends it. */
START_TEST(answer_no_final_newline)
{
	struct ctl_reply r;
	struct guarded g;

	ck_assert_int_eq(parse("ok /run/x", &r, &g), 0);
	ck_assert_str_eq(r.text, "/run/x");
	ck_assert_uint_eq(r.len, 10);
	unguard(&g);
	ck_assert_int_eq(parse("ok 1\na default /d", &r, &g), 0);
	ck_assert_uint_eq(r.more_count, 1);
	ck_assert_str_eq(r.more, "a default /d");
	ck_assert_ptr_null(ctl_reply_next(&r, r.more));
	unguard(&g);
}
END_TEST

START_TEST(answer_error)
{
	struct ctl_reply r;
	struct guarded g;

	ck_assert_int_eq(parse("error exists sandbox box exists\n", &r, &g), 0);
	ck_assert(!r.ok);
	ck_assert_str_eq(r.code, "exists");
	ck_assert_str_eq(r.text, "sandbox box exists");
	unguard(&g);
	ck_assert_int_eq(parse("error no_such_profile\n", &r, &g), 0);
	ck_assert_str_eq(r.code, "no_such_profile");
	ck_assert_str_eq(r.text, "");
	unguard(&g);
	/* A code this client does not know yet is kept for the operator. */
	ck_assert_int_eq(parse("error quota_exceeded too many\n", &r, &g), 0);
	ck_assert_str_eq(r.code, "quota_exceeded");
	unguard(&g);
}
END_TEST

START_TEST(answer_malformed)
{
	ck_assert_int_eq(parse_rc(""), -EPROTO);
	ck_assert_int_eq(parse_rc("\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("okay\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("OK\n"), -EPROTO);
	ck_assert_int_eq(parse_rc(" ok\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("error\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("error \n"), -EPROTO);
	ck_assert_int_eq(parse_rc("error  two spaces\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("error Exists x\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("error ex1sts x\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("errors x y\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("HTTP/1.1 200 OK\r\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("ok \x1b[2Jclear\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("ok x\r\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("ok x\x7f\n"), -EPROTO);
	ck_assert_int_eq(parse_rc("ok\nline \x01\n"), -EPROTO);
}
END_TEST

START_TEST(answer_nul_byte)
{
	struct ctl_reply r;
	struct guarded g;

	ck_assert_int_eq(parse_n("ok a\0b\n", 7, &r, &g), -EPROTO);
	unguard(&g);
	ck_assert_int_eq(parse_n("ok\n\0", 4, &r, &g), -EPROTO);
	unguard(&g);
}
END_TEST

/* Tabs are text; bytes >= 0x80 (UTF-8 paths) are too. */
START_TEST(answer_text_bytes)
{
	struct ctl_reply r;
	struct guarded g;

	ck_assert_int_eq(parse("ok a\tb /caf\xc3\xa9\n", &r, &g), 0);
	ck_assert_str_eq(r.text, "a\tb /caf\xc3\xa9");
	unguard(&g);
}
END_TEST

START_TEST(answer_lines)
{
	struct ctl_reply r;
	struct guarded g;

	ck_assert_int_eq(parse("ok 3\na p /d/a\n\nc p /d/c\n", &r, &g), 0);
	ck_assert_uint_eq(r.more_count, 3);
	const char *l = r.more;
	ck_assert_str_eq(l, "a p /d/a");
	l = ctl_reply_next(&r, l);
	ck_assert_str_eq(l, "");
	l = ctl_reply_next(&r, l);
	ck_assert_str_eq(l, "c p /d/c");
	ck_assert_ptr_null(ctl_reply_next(&r, l));
	ck_assert_int_eq(ctl_ls_check(&r), -EPROTO); /* the empty line is no entry */
	unguard(&g);
}
END_TEST

/* ---- sandbox ls. ---- */

static int ls_rc(const char *s)
{
	struct ctl_reply r;
	struct guarded g;
	int ret = parse(s, &r, &g);
	if (ret == 0)
		ret = ctl_ls_check(&r);
	unguard(&g);
	return ret;
}

START_TEST(ls_answers)
{
	ck_assert_int_eq(ls_rc("ok 0\n"), 0);
	ck_assert_int_eq(ls_rc("ok 1\nbox default /run/agentsnet/sandboxes/box/\n"), 0);
	ck_assert_int_eq(ls_rc("ok 2\na p /x\nb q /y z\n"), 0);
	ck_assert_int_eq(ls_rc("ok 2\na p /x\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 1\na p /x\nb q /y\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok one\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok -1\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 1 \na p /x\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 00000000001\na p /x\n"), -EPROTO); /* 11 digits */
	ck_assert_int_eq(ls_rc("ok 0000000001\na p /x\n"), 0);        /* 10 digits */
	ck_assert_int_eq(ls_rc("ok 99999999999999999999\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("error internal x\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 1\na p\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 1\na p relative\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 1\n.a p /x\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 1\na  /x\n"), -EPROTO);
	ck_assert_int_eq(ls_rc("ok 1\n p /x\n"), -EPROTO);
}
END_TEST

START_TEST(ls_entry_sizes)
{
	char line[256], id[80], profile[80];

	fill(id, 'i', CTL_ID_BYTES_MAX);
	fill(profile, 'p', CTL_PROFILE_BYTES_MAX);
	snprintf(line, sizeof(line), "ok 1\n%s %s /d\n", id, profile);
	ck_assert_int_eq(ls_rc(line), 0);
	fill(id, 'i', CTL_ID_BYTES_MAX + 1);
	snprintf(line, sizeof(line), "ok 1\n%s %s /d\n", id, profile);
	ck_assert_int_eq(ls_rc(line), -EPROTO);
	fill(id, 'i', 3);
	fill(profile, 'p', CTL_PROFILE_BYTES_MAX + 1);
	snprintf(line, sizeof(line), "ok 1\n%s %s /d\n", id, profile);
	ck_assert_int_eq(ls_rc(line), -EPROTO);
}
END_TEST

START_TEST(ls_parse_splits)
{
	struct ctl_ls_entry e;
	char line[] = "box strict /run/agentsnet/sandboxes/box with space/";
	char bad[] = "box strict";

	ck_assert_int_eq(ctl_ls_parse(line, &e), 0);
	ck_assert_str_eq(e.id, "box");
	ck_assert_str_eq(e.profile, "strict");
	ck_assert_str_eq(e.dir, "/run/agentsnet/sandboxes/box with space/");
	ck_assert_int_eq(ctl_ls_parse(bad, &e), -EPROTO);
	ck_assert_str_eq(bad, "box strict"); /* untouched on failure */
}
END_TEST

/* ---- The exchange, against a forked one-shot server. ---- */

enum server_mode { SERVE_ANSWER, SERVE_SILENT, SERVE_CLOSE, SERVE_BYTES, SERVE_TRICKLE };

struct server {
	char dir[64];
	char path[128];
	pid_t pid;
};

static void server_child(int lfd, enum server_mode mode, const char *answer, size_t bytes)
{
	char req[256];
	int c = accept(lfd, NULL, NULL);
	if (c == -1)
		_exit(10);
	ssize_t n = recv(c, req, sizeof(req) - 1, 0);
	if (n <= 0 || req[n - 1] != '\n')
		_exit(11);
	if (mode == SERVE_SILENT) {
		pause();
		_exit(0);
	}
	if (mode == SERVE_ANSWER && send(c, answer, strlen(answer), MSG_NOSIGNAL) == -1)
		_exit(12);
	if (mode == SERVE_TRICKLE) {
		/* "ok " and then a byte every 50 ms, never the newline. */
		if (send(c, "ok ", 3, MSG_NOSIGNAL) != 3)
			_exit(13);
		struct timespec gap = { .tv_sec = 0, .tv_nsec = 50000000L };
		while (send(c, "x", 1, MSG_NOSIGNAL) == 1)
			nanosleep(&gap, NULL);
		_exit(0);
	}
	if (mode == SERVE_BYTES) {
		/* "ok " then 'x' up to <bytes>, the last one a newline. */
		static char chunk[65536];
		memset(chunk, 'x', sizeof(chunk));
		memcpy(chunk, "ok ", 3);
		for (size_t sent = 0; sent < bytes;) {
			size_t len = bytes - sent < sizeof(chunk) ? bytes - sent : sizeof(chunk);
			if (sent + len == bytes)
				chunk[len - 1] = '\n';
			ssize_t m = send(c, chunk, len, MSG_NOSIGNAL);
			if (m <= 0)
				_exit(0); /* the client gave up: that is the point */
			sent += (size_t)m;
			memset(chunk, 'x', 3);
		}
	}
	close(c);
	_exit(0);
}

static void server_start(struct server *s, enum server_mode mode, const char *answer, size_t bytes)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(s->dir, sizeof(s->dir), "/tmp/an-ctl-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	snprintf(s->path, sizeof(s->path), "%s/control.sock", s->dir);
	memcpy(sa.sun_path, s->path, strlen(s->path) + 1);
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	s->pid = fork();
	ck_assert_int_ge(s->pid, 0);
	if (s->pid == 0)
		server_child(lfd, mode, answer, bytes);
	close(lfd);
}

static void server_stop(struct server *s)
{
	int st = 0;
	kill(s->pid, SIGKILL);
	ck_assert_int_eq(waitpid(s->pid, &st, 0), s->pid);
	unlink(s->path);
	ck_assert_int_eq(rmdir(s->dir), 0);
}

static int call(const struct server *s, const char *req, uint32_t timeout_ms, struct ctl_reply *r,
		char *err, size_t err_len)
{
	return ctl_call(s->path, req, timeout_ms, r, err, err_len);
}

START_TEST(call_ok_and_error)
{
	struct server s;
	struct ctl_reply r;
	char err[256];

	server_start(&s, SERVE_ANSWER, "ok agentsnetd 0.1.0\n", 0);
	ck_assert_int_eq(call(&s, "ping\n", 2000, &r, err, sizeof(err)), 0);
	ck_assert(r.ok);
	ck_assert_str_eq(r.text, "agentsnetd 0.1.0");
	ctl_reply_free(&r);
	ck_assert_ptr_null(r.buf);
	server_stop(&s);
	server_start(&s, SERVE_ANSWER, "error no_such_sandbox no sandbox x\n", 0);
	ck_assert_int_eq(call(&s, "sandbox rm x\n", 2000, &r, err, sizeof(err)), 0);
	ck_assert(!r.ok);
	ck_assert_str_eq(r.code, "no_such_sandbox");
	ck_assert_str_eq(r.text, "no sandbox x");
	ctl_reply_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(call_not_running)
{
	struct ctl_reply r;
	char err[256];

	int ret =
	    ctl_call("/tmp/an-no-such-dir/control.sock", "ping\n", 1000, &r, err, sizeof(err));
	ck_assert_int_eq(ret, -ENOENT);
	ck_assert(ctl_unreachable(ret));
	ck_assert(ctl_daemon_gone(ret));
	ck_assert_str_eq(err, "agentsnetd is not running (no control socket at "
			      "/tmp/an-no-such-dir/control.sock)");
	ck_assert_ptr_null(r.buf);
}
END_TEST

/* A socket file nobody listens on (a daemon that died without cleaning up). */
START_TEST(call_stale_socket)
{
	struct server s;
	struct ctl_reply r;
	char err[256];

	server_start(&s, SERVE_CLOSE, NULL, 0);
	server_stop(&s);
	ck_assert_int_eq(mkdir(s.dir, 0700), 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, s.path, strlen(s.path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	int ret = call(&s, "ping\n", 1000, &r, err, sizeof(err));
	ck_assert_int_eq(ret, -ECONNREFUSED);
	ck_assert(ctl_unreachable(ret));
	ck_assert(ctl_daemon_gone(ret));
	ck_assert_ptr_nonnull(strstr(err, "agentsnetd is not running"));
	unlink(s.path);
	rmdir(s.dir);
}
END_TEST

START_TEST(call_timeout)
{
	struct server s;
	struct ctl_reply r;
	char err[256];

	server_start(&s, SERVE_SILENT, NULL, 0);
	int ret = call(&s, "ping\n", 200, &r, err, sizeof(err));
	ck_assert_int_eq(ret, -ETIMEDOUT);
	ck_assert(ctl_unreachable(ret));
	ck_assert(!ctl_daemon_gone(ret)); /* busy, not gone: agentsnet run leaves its files */
	ck_assert(!ctl_daemon_gone(-EACCES) && !ctl_daemon_gone(-EPERM));
	ck_assert_ptr_nonnull(strstr(err, "did not answer"));
	ck_assert_ptr_null(r.buf);
	server_stop(&s);
}
END_TEST

/* A daemon that answers a byte every 50 ms is cut off at the call's deadline, not per read. */
START_TEST(call_timeout_trickle)
{
	struct server s;
	struct ctl_reply r;
	char err[256];
	struct timespec t0, t1;

	server_start(&s, SERVE_TRICKLE, NULL, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ret = call(&s, "ping\n", 300, &r, err, sizeof(err));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ck_assert_int_eq(ret, -ETIMEDOUT);
	ck_assert_ptr_nonnull(strstr(err, "did not answer"));
	ck_assert_ptr_null(r.buf);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	ck_assert_msg(secs < 2.0, "the call took %.2f s against a 0.3 s deadline", secs);
	server_stop(&s);
}
END_TEST

START_TEST(call_closed_without_answer)
{
	struct server s;
	struct ctl_reply r;
	char err[256];

	server_start(&s, SERVE_CLOSE, NULL, 0);
	ck_assert_int_eq(call(&s, "ping\n", 2000, &r, err, sizeof(err)), -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "malformed answer"));
	ck_assert_ptr_null(r.buf);
	server_stop(&s);
}
END_TEST

START_TEST(call_malformed)
{
	struct server s;
	struct ctl_reply r;
	char err[256];

	server_start(&s, SERVE_ANSWER, "hello\n", 0);
	ck_assert_int_eq(call(&s, "ping\n", 2000, &r, err, sizeof(err)), -EPROTO);
	ck_assert(!ctl_unreachable(-EPROTO));
	server_stop(&s);
}
END_TEST

/* An answer of exactly CTL_REPLY_BYTES_MAX bytes is read; one byte more is refused. */
START_TEST(call_answer_limit)
{
	struct server s;
	struct ctl_reply r;
	char err[256];

	server_start(&s, SERVE_BYTES, NULL, CTL_REPLY_BYTES_MAX);
	ck_assert_int_eq(call(&s, "sandbox ls\n", 5000, &r, err, sizeof(err)), 0);
	ck_assert(r.ok);
	ck_assert_uint_eq(strlen(r.text), CTL_REPLY_BYTES_MAX - 4);
	ctl_reply_free(&r);
	server_stop(&s);
	server_start(&s, SERVE_BYTES, NULL, CTL_REPLY_BYTES_MAX + 1);
	ck_assert_int_eq(call(&s, "sandbox ls\n", 5000, &r, err, sizeof(err)), -EMSGSIZE);
	ck_assert_ptr_null(r.buf);
	server_stop(&s);
}
END_TEST

START_TEST(call_path_too_long)
{
	struct ctl_reply r;
	char path[200], err[256];
	struct sockaddr_un sa;

	memset(path, 'a', sizeof(sa.sun_path));
	path[0] = '/';
	path[sizeof(sa.sun_path)] = '\0';
	ck_assert_int_eq(ctl_call(path, "ping\n", 1000, &r, err, sizeof(err)), -ENAMETOOLONG);
	path[sizeof(sa.sun_path) - 1] = '\0'; /* the longest that fits: no such file */
	ck_assert_int_eq(ctl_call(path, "ping\n", 1000, &r, err, sizeof(err)), -ENOENT);
}
END_TEST

static Suite *ctl_suite(void)
{
	Suite *s = suite_create("ctl");
	TCase *t = tcase_create("parse");
	TCase *x = tcase_create("exchange");

	tcase_add_test(t, ids);
	tcase_add_test(t, profiles);
	tcase_add_test(t, requests);
	tcase_add_test(t, requests_refused);
	tcase_add_test(t, request_sizes);
	tcase_add_test(t, answer_ok);
	tcase_add_test(t, answer_no_final_newline);
	tcase_add_test(t, answer_error);
	tcase_add_test(t, answer_malformed);
	tcase_add_test(t, answer_nul_byte);
	tcase_add_test(t, answer_text_bytes);
	tcase_add_test(t, answer_lines);
	tcase_add_test(t, ls_answers);
	tcase_add_test(t, ls_entry_sizes);
	tcase_add_test(t, ls_parse_splits);
	suite_add_tcase(s, t);
	tcase_set_timeout(x, 30);
	tcase_add_test(x, call_ok_and_error);
	tcase_add_test(x, call_not_running);
	tcase_add_test(x, call_stale_socket);
	tcase_add_test(x, call_timeout);
	tcase_add_test(x, call_timeout_trickle);
	tcase_add_test(x, call_closed_without_answer);
	tcase_add_test(x, call_malformed);
	tcase_add_test(x, stats_lines);
	tcase_add_test(x, call_answer_limit);
	tcase_add_test(x, call_path_too_long);
	suite_add_tcase(s, x);
	return s;
}

int main(void)
{
	return unit_run(ctl_suite());
}
