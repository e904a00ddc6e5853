/*
 * Unit tests for the control protocol (core/control.c).
 *
 * The .c is included, so the statics (read_line, split_words, u64_parse,
 * handle_limit, serve_one) are reached directly. TCase "parse" needs no
 * running engine (a zeroed one: the requests it checks never reach it):
 * the line's length at N and N+1 (control_handle's and read_line's, and
 * serve_one's answer through a socket pair), the line's deadline, the word
 * count, each bad_request answer's text, the uid and decimal parsers at
 * their bounds, and who may ask what (audit reopen, sandbox release).
 *
 * TCase "engine": a real engine (tests/unit/core/enginetest.h: engine_start
 * with one worker, a stub term) with a small policy:
 * `sandbox add` / `rm` / `ls` and each of their error answers, the id's
 * check (its length against the socket directory's room too), a caller registering for another uid, the per-user limit at N and
 * N+1, removal by the registrant or root only, `sandbox stats` showing a
 * user its own sandboxes only, and `release` and `url`'s refusals.
 */
#include "../../../core/control.c"

#include <check.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "core/audit.h"
#include "core/config.h"
#include "policy/policy.h"
#include "tests/unit/core/enginetest.h"
#include "tests/unit/unit.h"

/* The engine: zeroed for TCase "parse", running for "engine" (enginetest.h). */
static struct enginetest et;

/* control_handle's answer to <line> from <who> (NULL: the daemon itself), compared whole. */
static void expect_answer(const char *line, const struct verdict_caller *who, const char *want)
{
	size_t len = 0;
	char *out = control_handle(&et.eng, line, NULL, who, &len, NULL);

	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(out, want);
	ck_assert_uint_eq(len, strlen(want));
	pool_free(out);
}

/* "ping " padded with spaces to <n> bytes: a request line of exactly that length. */
static char *padded_ping(size_t n)
{
	char *line = pool_malloc(n + 1);

	ck_assert_ptr_nonnull(line);
	memset(line, ' ', n);
	memcpy(line, "ping", 4);
	line[n] = '\0';
	return line;
}

static void parse_setup(void)
{
	memset(&et.eng, 0, sizeof(et.eng));
}

#define PONG    "ok agentsnetd " CONTROL_VERSION "\n"
#define UNKNOWN "error bad_request unknown request (see docs/control.md)\n"
#define TOOLONG "error bad_request request line too long\n"

/* CONTROL_LINE_BYTES_MAX - 1 bytes are a request; one more is too long. */
START_TEST(test_line_length)
{
	char *line = padded_ping(CONTROL_LINE_BYTES_MAX - 1);

	expect_answer(line, NULL, PONG);
	pool_free(line);
	line = padded_ping(CONTROL_LINE_BYTES_MAX);
	expect_answer(line, NULL, TOOLONG);
	pool_free(line);
}
END_TEST

/* Words: runs of spaces separate them; 6 at most (7: unknown); an empty line is unknown. */
START_TEST(test_words)
{
	char buf[64];
	char *w[6];

	snprintf(buf, sizeof(buf), "  a  b c ");
	ck_assert_int_eq(split_words(buf, w, 6), 3);
	ck_assert_str_eq(w[0], "a");
	ck_assert_str_eq(w[2], "c");
	snprintf(buf, sizeof(buf), "1 2 3 4 5 6");
	ck_assert_int_eq(split_words(buf, w, 6), 6);
	snprintf(buf, sizeof(buf), "1 2 3 4 5 6 7");
	ck_assert_int_eq(split_words(buf, w, 6), 7);
	expect_answer("  ping  ", NULL, PONG);
	expect_answer("", NULL, UNKNOWN);
	expect_answer("ping ping", NULL, UNKNOWN);
	expect_answer("PING", NULL, UNKNOWN);
	expect_answer("sandbox", NULL, UNKNOWN);
	expect_answer("sandbox add a p owned 1 2", NULL, UNKNOWN);
	expect_answer("sandbox rm", NULL, UNKNOWN);
	expect_answer("sandbox rm a b", NULL, UNKNOWN);
	expect_answer("policy", NULL, UNKNOWN);
	expect_answer("stats now", NULL, UNKNOWN);
}
END_TEST

/* The agent's uid: a number below ENGINE_AGENT_NEW (4294967294), else bad_request. */
START_TEST(test_add_uid_text)
{
	const struct engine_owner owner = { .pid = 1 };
	const char *plain = "error bad_request the agent's uid is a number below 4294967294\n";
	const char *owned = "error bad_request the agent's uid is \"new\" or a number below "
			    "4294967294\n";
	size_t len = 0;

	expect_answer("sandbox add a p uid 4294967294", NULL, plain);
	expect_answer("sandbox add a p uid 4294967295", NULL, plain);
	expect_answer("sandbox add a p uid -1", NULL, plain);
	expect_answer("sandbox add a p uid x", NULL, plain);
	expect_answer("sandbox add a p uid new", NULL, plain); /* "new" is owned's alone */
	char *out =
	    control_handle(&et.eng, "sandbox add a p owned 4294967294", &owner, NULL, &len, NULL);
	ck_assert_str_eq(out, owned);
	pool_free(out);
	/* "owned" without a caller's pid, whatever follows. */
	expect_answer("sandbox add a p owned", NULL,
		      "error bad_request \"owned\" needs a caller pid\n");
	const struct engine_owner no_pid = { .pid = 0 };
	out = control_handle(&et.eng, "sandbox add a p owned new", &no_pid, NULL, &len, NULL);
	ck_assert_str_eq(out, "error bad_request \"owned\" needs a caller pid\n");
	pool_free(out);
}
END_TEST

/* Root's alone: audit reopen, sandbox release; and what a daemon without them answers. */
START_TEST(test_who_may)
{
	const struct verdict_caller user = { .uid = 1000, .gid = 1000 };
	const struct verdict_caller root = { .uid = 0 };

	expect_answer("audit reopen", &user, "error forbidden only root reopens the audit file\n");
	expect_answer("audit reopen", &root,
		      "error bad_request the audit goes to standard output\n");
	expect_answer("audit reopen", NULL,
		      "error bad_request the audit goes to standard output\n");
	expect_answer("sandbox release a", &user, "error forbidden only root lifts a quarantine\n");
	expect_answer("policy reload", &root, "error bad_request this daemon cannot reload\n");
}
END_TEST

/* A decimal uint64_t: digits only, at most UINT64_MAX (N passes, N+1 not), 20 digits at most. */
START_TEST(test_u64_parse)
{
	uint64_t v = 0;

	ck_assert(u64_parse("0", &v));
	ck_assert_uint_eq(v, 0);
	ck_assert(u64_parse("18446744073709551615", &v));
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert(!u64_parse("18446744073709551616", &v));
	ck_assert(!u64_parse("99999999999999999999", &v));
	ck_assert(u64_parse("00000000000000000007", &v)); /* 20 digits */
	ck_assert_uint_eq(v, 7);
	ck_assert(!u64_parse("000000000000000000007", &v)); /* 21 */
	ck_assert(!u64_parse("", &v));
	ck_assert(!u64_parse("1a", &v));
	ck_assert(!u64_parse("-1", &v));
	ck_assert(!u64_parse("+1", &v));
}
END_TEST

/* `sandbox limit`'s bad requests, answered before the caller's process is looked at. */
START_TEST(test_limit_text)
{
	const char *usage = "error bad_request sandbox limit <id> <pids_max> <memory_max_bytes>, "
			    "both decimal\n";
	const char *bad_id =
	    "error bad_id sandbox ids are [A-Za-z0-9_.-]{1,63}, not starting with '.'\n";
	const char *cases[][2] = {
		{ "sandbox limit a 1", usage },     { "sandbox limit a 1 2 3", usage },
		{ "sandbox limit a x 2", usage },   { "sandbox limit a 1 -2", usage },
		{ "sandbox limit .a 1 2", bad_id }, { "sandbox limit a/b 1 2", bad_id },
	};
	struct control ctl = { .e = &et.eng };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char line[64];
		struct answer a = { .fd = -1 };
		snprintf(line, sizeof(line), "%s", cases[i][0]);
		handle_limit(&ctl, line, -1, 1, &a);
		ck_assert_ptr_nonnull(a.text.p);
		ck_assert_msg(strcmp(a.text.p, cases[i][1]) == 0, "%s: %s", cases[i][0], a.text.p);
		textbuf_free(&a.text);
	}
}
END_TEST

/*
 * `sandbox limit` whose system call fails is answered internal, never with the
 * refusal an errno of that value would name: here the caller's pidfd cannot
 * be had (no descriptor left, EMFILE), which read "error forbidden".
 */
START_TEST(test_limit_system_failure)
{
	struct control ctl = { .e = &et.eng };
	struct answer a = { .fd = -1 };
	struct rlimit saved, low;
	char line[] = "sandbox limit s1 10 0";

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &saved), 0);
	int lowest_free = dup(0);
	ck_assert_int_ge(lowest_free, 0);
	close(lowest_free);
	low = saved;
	low.rlim_cur = (rlim_t)lowest_free; /* every descriptor below it is in use */
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	handle_limit(&ctl, line, -1, getpid(), &a);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0);
	ck_assert_ptr_nonnull(a.text.p);
	ck_assert_str_eq(a.text.p, "error internal pidfd of the caller: Too many open files\n");
	textbuf_free(&a.text);
	/* The codes: a refusal's errno names its refusal; the same errno from a system call does not. */
	ck_assert_str_eq(limit_answer_code(-EACCES), "forbidden");
	ck_assert_str_eq(limit_answer_code(ENGINE_ERR_SYSTEM(EACCES)), "internal");
	ck_assert_str_eq(limit_answer_code(-EEXIST), "exists");
	ck_assert_str_eq(limit_answer_code(ENGINE_ERR_SYSTEM(EEXIST)), "internal");
	ck_assert_str_eq(limit_answer_code(-ENOENT), "no_such_sandbox");
	ck_assert_str_eq(limit_answer_code(ENGINE_ERR_SYSTEM(ENOENT)), "internal");
}
END_TEST

/* A socket pair: [0] the daemon's end, [1] the client's. */
static void pair(int sv[2])
{
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

/* read_line: up to '\n' (a '\r' before it dropped), N-1 bytes of line, N: -EMSGSIZE. */
START_TEST(test_read_line)
{
	char buf[16];
	int sv[2];

	pair(sv);
	ck_assert_int_eq(write(sv[1], "ping\r\nrest", 10), 10);
	ck_assert_int_eq(read_line(sv[0], buf, sizeof(buf), timer_now_ms() + 25000), 4);
	ck_assert_str_eq(buf, "ping");
	close(sv[0]);
	close(sv[1]);
	/* cap 16: 14 bytes and '\n' fit in 15 bytes read */
	pair(sv);
	ck_assert_int_eq(write(sv[1], "aaaaaaaaaaaaaa\n", 15), 15);
	ck_assert_int_eq(read_line(sv[0], buf, sizeof(buf), timer_now_ms() + 25000), 14);
	close(sv[0]);
	close(sv[1]);
	pair(sv);
	ck_assert_int_eq(write(sv[1], "aaaaaaaaaaaaaaa\n", 16), 16);
	ck_assert_int_eq(read_line(sv[0], buf, sizeof(buf), timer_now_ms() + 25000), -EMSGSIZE);
	close(sv[0]);
	close(sv[1]);
	/* EOF without '\n': what came is the line. */
	pair(sv);
	ck_assert_int_eq(write(sv[1], "ping", 4), 4);
	shutdown(sv[1], SHUT_WR);
	ck_assert_int_eq(read_line(sv[0], buf, sizeof(buf), timer_now_ms() + 25000), 4);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/*
 * The deadline: a line that has not come whole by then is what came so far
 * (here "pi", no newline), however open the client's end still is; a
 * deadline already past reads nothing at all.
 */
START_TEST(test_read_line_deadline)
{
	char buf[16];
	int sv[2];

	pair(sv);
	ck_assert_int_eq(write(sv[1], "pi", 2), 2);
	uint64_t t0 = timer_now_ms();
	ck_assert_int_eq(read_line(sv[0], buf, sizeof(buf), t0 + 100), 2);
	ck_assert_uint_ge(timer_now_ms(), t0 + 100);
	ck_assert_str_eq(buf, "pi");
	ck_assert_int_eq(write(sv[1], "ng\n", 3), 3);
	ck_assert_int_eq(read_line(sv[0], buf, sizeof(buf), timer_now_ms()), 0);
	ck_assert_str_eq(buf, "");
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* serve_one on a socket pair with <req> sent (and the client's writes shut): the answer. */
static char *serve(const char *req, size_t n)
{
	static char got[4096];
	struct control ctl = { .e = &et.eng, .listen_fd = -1, .stop_fd = -1 };
	int sv[2];
	size_t have = 0;

	pair(sv);
	ck_assert_int_eq(write(sv[1], req, n), (ssize_t)n);
	serve_one(&ctl, sv[0]);
	close(sv[0]);
	for (ssize_t r; (r = read(sv[1], got + have, sizeof(got) - 1 - have)) > 0;)
		have += (size_t)r;
	got[have] = '\0';
	close(sv[1]);
	return got;
}

/* Through the socket: the line's N-1 bytes and '\n' are served, N bytes are too long. */
START_TEST(test_serve_one)
{
	char *line = padded_ping(CONTROL_LINE_BYTES_MAX - 1);

	line[CONTROL_LINE_BYTES_MAX - 2] = '\n'; /* 510 bytes and the newline: 511 read */
	ck_assert_str_eq(serve(line, CONTROL_LINE_BYTES_MAX - 1), PONG);
	pool_free(line);
	line = padded_ping(CONTROL_LINE_BYTES_MAX);
	line[CONTROL_LINE_BYTES_MAX - 1] = '\n';
	ck_assert_str_eq(serve(line, CONTROL_LINE_BYTES_MAX), TOOLONG);
	pool_free(line);
	ck_assert_str_eq(serve("bogus\n", 6), UNKNOWN);
	ck_assert_str_eq(serve("sandbox limit a x 1\n", 20),
			 "error bad_request sandbox limit <id> <pids_max> <memory_max_bytes>, "
			 "both decimal\n");
}
END_TEST

/* --- a real engine: sandbox add, rm, ls ---------------------------------------------------- */

#define CT_POLICY                                                                        \
	"version: 1\nprofiles:\n  p:\n    rules:\n"                                      \
	"    - host: a.test\n      tier: passthrough\n      owner: o\n      reason: r\n" \
	"  shut:\n    users: [root]\n    rules:\n"                                       \
	"    - host: a.test\n      tier: passthrough\n      owner: o\n      reason: r\n"

static char dir[] = "/tmp/anc-XXXXXX";
/* The socket directory's name in <dir>: "sock" makes it 20 bytes, the most that leaves room for
 * a 63-byte id (layout_sandbox_id_room). */
static const char *sockets = "sock";

/*
 * Empties the suite's directory (made by main, removed after every test ran,
 * so that a failed test, whose teardown does not run, leaves nothing behind).
 */
static void dir_clear(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/sock* '%s/audit.log'", dir, dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void engine_setup(void)
{
	dir_clear();
	enginetest_prepare(&et, dir, sockets, CT_POLICY, NULL);
	et.cfg.sandboxes_per_user = 2;
	enginetest_start(&et);
}

static void engine_teardown(void)
{
	ck_assert_int_eq(engine_stop(&et.eng), 0);
	enginetest_release(&et);
	dir_clear();
}

/* "ok <socket_dir>/sandboxes/<id>\n", the answer to a plain add of <id>. */
static void expect_added(const char *line, const struct verdict_caller *who, const char *id)
{
	char want[256];

	snprintf(want, sizeof(want), "ok %s/sandboxes/%s\n", et.cfg.socket_dir, id);
	expect_answer(line, who, want);
}

START_TEST(test_add_rm_ls)
{
	char want[512];

	expect_answer("sandbox ls", NULL, "ok 0\n");
	expect_added("sandbox add s1 p", NULL, "s1");
	expect_answer("sandbox add s1 p", NULL, "error exists sandbox s1 is already registered\n");
	expect_answer("sandbox add s2 nope", NULL,
		      "error no_such_profile the policy has no profile nope\n");
	expect_answer("sandbox add .s p", NULL,
		      "error bad_id sandbox ids are [A-Za-z0-9_.-]{1,63}, not starting with '.'\n");
	snprintf(want, sizeof(want), "ok 1\ns1 p %s/sandboxes/s1\n", et.cfg.socket_dir);
	expect_answer("sandbox ls", NULL, want);
	expect_answer("sandbox rm s2", NULL, "error no_such_sandbox no run-time sandbox s2\n");
	expect_answer("sandbox rm s1", NULL, "ok\n");
	expect_answer("sandbox rm s1", NULL, "error no_such_sandbox no run-time sandbox s1\n");
	expect_answer("sandbox ls", NULL, "ok 0\n");
}
END_TEST

/* A client of <path> that sent "ping": its socket, the answer not yet read. */
static int ping_sent(const char *path)
{
	struct sockaddr_un sun = unit_unix_addr(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	ck_assert_int_eq(write(fd, "ping\n", 5), 5);
	return fd;
}

/*
 * An upgrade's control thread, held until the hand-over is taken: a caller
 * waits in the queue, unanswered, and is answered once it is released; a
 * held thread stops when told to.
 */
START_TEST(test_held_until_released)
{
	struct control ctl;
	char answer[64] = { 0 };

	ck_assert_int_eq(control_start(&ctl, &et.eng, (gid_t)-1, -1, true), 0);
	int fd = ping_sent(ctl.path);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 300), 0); /* nobody serves it yet */
	control_release(&ctl);
	ck_assert_int_eq(poll(&p, 1, 5000), 1);
	ck_assert_int_gt(read(fd, answer, sizeof(answer) - 1), 0);
	ck_assert_msg(strncmp(answer, "ok agentsnetd ", 14) == 0, "%s", answer);
	close(fd);
	control_stop(&ctl);

	ck_assert_int_eq(control_start(&ctl, &et.eng, (gid_t)-1, -1, true), 0);
	fd = ping_sent(ctl.path);
	control_stop(&ctl); /* held: ends without serving */
	p.fd = fd;
	ck_assert_int_eq(poll(&p, 1, 5000), 1);
	ck_assert_int_le(read(fd, answer, sizeof(answer) - 1), 0); /* closed, unanswered */
	close(fd);
}
END_TEST

/* control_handle's answer to <line> from process <owner>, as root, compared whole. */
static void expect_answer_from(const char *line, const struct engine_owner *owner, const char *want)
{
	const struct verdict_caller root = { .uid = 0 };
	size_t len = 0;
	char *out = control_handle(&et.eng, line, owner, &root, &len, NULL);

	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(out, want);
	pool_free(out);
}

/*
 * `sandbox rm <id> owned`: the calling process's registration only; another
 * process's (or one tied to none) is left, told not_owner; without a caller's
 * pid it is a bad request.
 */
START_TEST(test_rm_owned)
{
	struct engine_owner self = { 0 }, other;
	const char *not_owner = "error not_owner sandbox s1 is not the calling process's "
				"registration (registered without \"owned\", or again since): left "
				"as it is\n";

	ck_assert_int_eq(engine_owner_of(getpid(), &self), 0);
	other = self;
	other.start_ticks++;
	expect_added("sandbox add s1 p", NULL, "s1");
	expect_answer_from("sandbox rm s1 owned", &self, not_owner);
	expect_answer("sandbox rm s1", NULL, "ok\n");
	size_t len = 0;
	char *out = control_handle(&et.eng, "sandbox add s1 p owned", &self, NULL, &len, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_msg(strncmp(out, "ok ", 3) == 0, "%s", out);
	pool_free(out);
	expect_answer_from("sandbox rm s1 owned", &other, not_owner);
	expect_answer("sandbox rm s1 owned", NULL,
		      "error bad_request \"owned\" needs a caller pid\n");
	expect_answer_from("sandbox rm s1 owned", &self, "ok\n");
	expect_answer_from("sandbox rm s1 owned", &self,
			   "error no_such_sandbox no run-time sandbox s1\n");
}
END_TEST

/*
 * A socket or file step that fails is told as what it is, with its errno,
 * never as a refusal whose code an errno of the same value names (a full
 * disk's ENOSPC read "the daemon serves its maximum number of sandboxes", a
 * missing directory's ENOENT "no such profile"); nothing of the sandbox is
 * left. Here the registry's directory is writable by others, which the
 * daemon refuses to write a record into (EPERM).
 */
START_TEST(test_add_step_failed)
{
	char path[PATH_MAX];

	expect_added("sandbox add s1 p", NULL, "s1");
	snprintf(path, sizeof(path), "%s/registry", et.cfg.socket_dir);
	ck_assert_int_eq(chmod(path, 0777), 0);
	expect_answer("sandbox add s2 p", NULL,
		      "error internal sandbox s2: its socket or record: Operation not permitted\n");
	ck_assert_int_eq(chmod(path, 0700), 0);
	snprintf(path, sizeof(path), "ok 1\ns1 p %s/sandboxes/s1\n", et.cfg.socket_dir);
	expect_answer("sandbox ls", NULL, path);
	expect_added("sandbox add s2 p", NULL, "s2");
	/* The encoding: an errno comes back whole, and is no refusal's code. */
	ck_assert_int_eq(engine_err_errno(ENGINE_ERR_SYSTEM(ENOSPC)), ENOSPC);
	ck_assert_int_eq(engine_err_errno(ENGINE_ERR_SYSTEM(ENOENT)), ENOENT);
	ck_assert_int_eq(engine_err_errno(-ENOSPC), 0);
	ck_assert_int_eq(engine_err_errno(-ENOENT), 0);
	for (int e = 1; e < ENGINE_ERR_SYSTEM_BASE; e++) {
		ck_assert_int_lt(ENGINE_ERR_SYSTEM(e),
				 -4095); /* below every -errno the kernel has */
		ck_assert_int_eq(engine_err_errno(ENGINE_ERR_SYSTEM(e)), e);
		ck_assert_int_eq(engine_err_errno(-e), 0);
	}
	ck_assert_str_eq(engine_err_text(ENGINE_ERR_SYSTEM(ENOSPC)), strerror(ENOSPC));
	ck_assert_str_eq(engine_err_text(-EEXIST), strerror(EEXIST));
}
END_TEST

/* The id: 63 bytes pass, 64 are refused. */
START_TEST(test_add_id_length)
{
	char line[128], id[65];

	memset(id, 'a', 64);
	id[63] = '\0';
	snprintf(line, sizeof(line), "sandbox add %s p", id);
	expect_added(line, NULL, id);
	id[63] = 'a';
	id[64] = '\0';
	snprintf(line, sizeof(line), "sandbox add %s p", id);
	expect_answer(line, NULL,
		      "error bad_id sandbox ids are [A-Za-z0-9_.-]{1,63}, not starting with '.'\n");
}
END_TEST

/*
 * An id longer than the socket directory leaves room for: a 22-byte one
 * leaves a sandbox without an ingress socket 62 bytes, so a 63-byte id is
 * refused (bad_id, saying both lengths), with nothing made, and a 62-byte one
 * is added.
 */
START_TEST(test_add_id_room)
{
	char line[128], want[512], id[64], path[256];
	struct stat st;

	engine_teardown();
	sockets = "sock56";
	engine_setup();
	ck_assert_uint_eq(strlen(et.cfg.socket_dir), 22);
	memset(id, 'a', 63);
	id[63] = '\0';
	snprintf(line, sizeof(line), "sandbox add %s p", id);
	snprintf(want, sizeof(want),
		 "error bad_id sandbox id %s is 63 bytes; the daemon's socket_dir %s leaves room "
		 "for 62 (its socket's path would be over the 107 bytes a Unix socket's holds)\n",
		 id, et.cfg.socket_dir);
	expect_answer(line, NULL, want);
	snprintf(path, sizeof(path), "%s/sandboxes/%s", et.cfg.socket_dir, id);
	ck_assert_int_eq(lstat(path, &st), -1);
	id[62] = '\0';
	snprintf(line, sizeof(line), "sandbox add %s p", id);
	expect_added(line, NULL, id);
	sockets = "sock";
}
END_TEST

/*
 * Who may: a user registers for its own uid only and on a profile that
 * admits it, holds daemon.sandboxes_per_user (2) at most (the 3rd is
 * refused), and removes its own; another user may not remove it, root may.
 */
START_TEST(test_add_who)
{
	const struct verdict_caller u = { .uid = 4242, .gid = 4242 };
	const struct verdict_caller other = { .uid = 4343, .gid = 4343 };
	const struct verdict_caller root = { .uid = 0 };

	expect_answer("sandbox add x shut", &u,
		      "error forbidden uid 4242 may not register sandboxes on profile shut (the "
		      "policy's profiles.shut.users and groups; a profile with an inject rule "
		      "names who may)\n");
	expect_answer("sandbox add x p uid 4343", &u,
		      "error forbidden uid 4242 may register sandboxes for its own uid only, not "
		      "for uid 4343\n");
	expect_added("sandbox add u1 p", &u, "u1");
	expect_added("sandbox add u2 p uid 4242", &u, "u2");
	expect_answer("sandbox add u3 p", &u,
		      "error limit uid 4242 holds 2 sandboxes already (daemon.sandboxes_per_user); "
		      "remove one first\n");
	expect_added("sandbox add o1 p", &other, "o1"); /* the limit is per user */
	expect_added("sandbox add r1 shut", &root, "r1");
	expect_answer("sandbox rm u1", &other,
		      "error forbidden sandbox u1 was registered by uid 4242: only that user or "
		      "root may remove it\n");
	expect_answer("sandbox rm u1", &u, "ok\n");
	expect_added("sandbox add u3 p", &u, "u3"); /* one removed: room again */
	expect_answer("sandbox rm u2", &root, "ok\n");
}
END_TEST

/* How many lines <text> has, and whether line <n> (0: the first) starts with <prefix>. */
static uint32_t lines_of(const char *text)
{
	uint32_t n = 0;

	for (const char *c = text; *c != '\0'; c++)
		n += *c == '\n';
	return n;
}

static bool line_starts(const char *text, uint32_t n, const char *prefix)
{
	for (; n > 0 && text != NULL; n--) {
		text = strchr(text, '\n');
		text = text != NULL ? text + 1 : NULL;
	}
	return text != NULL && strncmp(text, prefix, strlen(prefix)) == 0;
}

/*
 * `sandbox stats`: a user other than root is shown the sandboxes it
 * registered only (another tenant's traffic is not its to see), root all;
 * `sandbox release` and `sandbox url` of a sandbox that is not in
 * quarantine, or with no ingress gateway.
 */
START_TEST(test_stats_own)
{
	const struct verdict_caller u = { .uid = 4242, .gid = 4242 };
	const struct verdict_caller other = { .uid = 4343, .gid = 4343 };
	const struct verdict_caller root = { .uid = 0 };
	size_t len = 0;

	expect_added("sandbox add u1 p", &u, "u1");
	expect_added("sandbox add o1 p", &other, "o1");
	expect_added("sandbox add r1 p", &root, "r1");
	char *out = control_handle(&et.eng, "sandbox stats", NULL, &u, &len, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_uint_eq(lines_of(out), 2);
	ck_assert(line_starts(out, 0, "ok 1"));
	ck_assert_msg(line_starts(out, 1, "u1 profile p owner 4242 pid 0 uptime_s "), "%s", out);
	pool_free(out);
	out = control_handle(&et.eng, "sandbox stats", NULL, &root, &len, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_uint_eq(lines_of(out), 4);
	ck_assert(line_starts(out, 0, "ok 3"));
	pool_free(out);
	expect_answer("sandbox release u1", &root,
		      "error not_quarantined sandbox u1 is not in quarantine\n");
	expect_answer("sandbox release nope", &root, "error no_such_sandbox nope\n");
	expect_answer("sandbox url u1", &u,
		      "error no_ingress the daemon serves no ingress gateway\n");
}
END_TEST

static Suite *control_suite(void)
{
	Suite *s = suite_create("core/control");
	TCase *tc = tcase_create("parse");

	tcase_add_checked_fixture(tc, parse_setup, NULL);
	tcase_add_test(tc, test_line_length);
	tcase_add_test(tc, test_words);
	tcase_add_test(tc, test_add_uid_text);
	tcase_add_test(tc, test_who_may);
	tcase_add_test(tc, test_u64_parse);
	tcase_add_test(tc, test_limit_text);
	tcase_add_test(tc, test_limit_system_failure);
	tcase_add_test(tc, test_read_line);
	tcase_add_test(tc, test_read_line_deadline);
	tcase_add_test(tc, test_serve_one);
	suite_add_tcase(s, tc);
	tc = tcase_create("engine");
	tcase_add_checked_fixture(tc, engine_setup, engine_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_add_rm_ls);
	tcase_add_test(tc, test_rm_owned);
	tcase_add_test(tc, test_held_until_released);
	tcase_add_test(tc, test_add_step_failed);
	tcase_add_test(tc, test_add_id_length);
	tcase_add_test(tc, test_add_id_room);
	tcase_add_test(tc, test_add_who);
	tcase_add_test(tc, test_stats_own);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return unit_run_in_dir(control_suite(), dir);
}
