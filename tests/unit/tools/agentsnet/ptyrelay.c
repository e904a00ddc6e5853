/*
 * Unit tests for tools/agentsnet/ptyrelay.c.
 *
 * The operator's terminal is a pty the test makes: the test holds its master
 * (it types there and reads what the terminal shows) and a forked "relay"
 * process has its slave on 0-2 as its controlling terminal, in front, as
 * `agentsnet run` would under an interactive shell. The relay process calls
 * ptyrelay_open, forks the "agent" (setsid, ptyrelay_child_stdio, TIOCSCTTY:
 * what the bridge does), ptyrelay_start, then polls the relay (and a
 * signalfd for SIGWINCH and SIGCHLD) until the agent exits, and
 * ptyrelay_close (twice). The agents are functions of this file:
 *
 * - keystrokes reach the agent and its output comes back, echoed once (the
 *   caller's terminal is raw meanwhile), and its last words survive its exit;
 *   the caller's settings are back afterwards, and keys typed ahead while the
 *   relay closes stay for the shell (TCSADRAIN, not TCSAFLUSH);
 * - a window-size change of the caller's terminal reaches the agent, with
 *   SIGWINCH; a ^C typed by the caller is the agent's SIGINT;
 * - TIOCSTI by the agent puts nothing into the caller's input, and the same
 *   agent given the caller's terminal directly does (so the test can fail);
 * - 200000 bytes each way, counted and summed; stdin alone a terminal (the
 *   agent's echo is dropped); descriptors and flags after ptyrelay_open;
 *   EOF of the caller's input and EIO of the master; the caller's terminal
 *   hanging up (reported), and ^D (not a hang-up); no terminal at all;
 * - a caller's terminal that is never read while the agent floods: the relay
 *   never blocks on it (written through a non-blocking description of its
 *   own, or with poll() before each chunk), and ptyrelay_close is bounded.
 *
 * Every wait is bounded: poll timeouts here, alarm() in the relay and the
 * agent, PR_SET_PDEATHSIG so an agent never outlives its relay.
 */
#include "../../../../tools/agentsnet/ptyrelay.c"

#include <check.h>
#include <ctype.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include "tests/unit/unit.h"

#define TEST_WAIT_MS     5000
#define TEST_FINISH_MS   15000
#define TEST_ROWS        30
#define TEST_COLS        100
#define TEST_OUT_BYTES   8192u
#define TEST_BULK_BYTES  200000u
#define TEST_INJECT      "PWNED\n"
#define TEST_STDIO_ALL   7u
#define TEST_STDIO_STDIN 1u
#define TEST_STALL_MS    2000
#define TEST_TICK_MS     100
#define TEST_CLOSE_MS    500

/* ---- The caller's terminal, as the test sees it ---- */

struct caller {
	int master; /* the test's side: typing, and what the terminal shows */
	int slave;  /* the caller's terminal the relay process has on 0-2 */
	struct termios before;
	char out[TEST_OUT_BYTES]; /* the last bytes the terminal showed */
	size_t out_len;
	size_t out_total; /* bytes it showed in all */
};

static void caller_open(struct caller *c)
{
	struct winsize ws = { .ws_row = TEST_ROWS, .ws_col = TEST_COLS };

	c->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(c->master, 0);
	ck_assert_int_eq(grantpt(c->master), 0);
	ck_assert_int_eq(unlockpt(c->master), 0);
	ck_assert_int_eq(fcntl(c->master, F_SETFL, O_RDWR | O_NONBLOCK), 0);
	c->slave = ioctl(c->master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(c->slave, 0);
	ck_assert_int_eq(ioctl(c->slave, TIOCSWINSZ, &ws), 0);
	ck_assert_int_eq(tcgetattr(c->slave, &c->before), 0);
	c->out_len = 0;
	c->out_total = 0;
}

static void caller_close(struct caller *c)
{
	close(c->master);
	close(c->slave);
}

/* Reads what the terminal shows, waiting up to <timeout_ms>; false when nothing came. */
static bool caller_pump(struct caller *c, int timeout_ms)
{
	struct pollfd p = { .fd = c->master, .events = POLLIN };
	char buf[4096];

	if (poll(&p, 1, timeout_ms) != 1)
		return false;
	ssize_t n = read(c->master, buf, sizeof(buf));
	if (n <= 0)
		return false;
	if (c->out_len + (size_t)n > sizeof(c->out)) { /* keep the newer half */
		size_t keep = sizeof(c->out) / 2;
		memmove(c->out, c->out + c->out_len - keep, keep);
		c->out_len = keep;
	}
	memcpy(c->out + c->out_len, buf, (size_t)n);
	c->out_len += (size_t)n;
	c->out_total += (size_t)n;
	return true;
}

static int64_t test_ms(void)
{
	return now_ms();
}

/* Reads until the terminal has shown <needle>; fails the test after TEST_WAIT_MS. */
static void caller_expect(struct caller *c, const char *needle)
{
	int64_t deadline = test_ms() + TEST_WAIT_MS;

	while (memmem(c->out, c->out_len, needle, strlen(needle)) == NULL) {
		int64_t left = deadline - test_ms();
		size_t shown = c->out_len < 512 ? c->out_len : 512;
		ck_assert_msg(left > 0,
			      "the terminal never showed \"%s\"; it showed last: \"%.*s\"", needle,
			      (int)shown, c->out + c->out_len - shown);
		caller_pump(c, (int)left);
	}
}

static size_t caller_count(const struct caller *c, const char *needle)
{
	size_t n = 0;
	const char *p = c->out, *end = c->out + c->out_len;

	ck_assert_uint_lt(c->out_total, sizeof(c->out)); /* nothing dropped */
	while ((p = memmem(p, (size_t)(end - p), needle, strlen(needle))) != NULL) {
		n++;
		p++;
	}
	return n;
}

/* Types <len> bytes, reading the terminal meanwhile (it may echo). */
static void caller_type(struct caller *c, const void *bytes, size_t len)
{
	const char *b = bytes;
	int64_t deadline = test_ms() + TEST_WAIT_MS;

	for (size_t off = 0; off < len;) {
		struct pollfd p = { .fd = c->master, .events = POLLIN | POLLOUT };
		ck_assert_msg(test_ms() < deadline, "typing stalled at %zu of %zu bytes", off, len);
		ck_assert_int_ge(poll(&p, 1, 100), 0);
		if ((p.revents & POLLIN) != 0)
			caller_pump(c, 0);
		if ((p.revents & POLLOUT) == 0)
			continue;
		size_t chunk = len - off < 4096 ? len - off : 4096;
		ssize_t n = write(c->master, b + off, chunk);
		ck_assert_msg(n > 0 || errno == EAGAIN, "write: %s", strerror(errno));
		if (n > 0)
			off += (size_t)n;
	}
}

/* Bytes waiting in the caller's input (in canonical mode: complete lines only). */
static int caller_inq(const struct caller *c)
{
	int n = -1;

	ck_assert_int_eq(ioctl(c->slave, FIONREAD, &n), 0);
	return n;
}

static void termios_same(const struct termios *a, const struct termios *b)
{
	ck_assert_uint_eq(a->c_iflag, b->c_iflag);
	ck_assert_uint_eq(a->c_oflag, b->c_oflag);
	ck_assert_uint_eq(a->c_cflag, b->c_cflag);
	ck_assert_uint_eq(a->c_lflag, b->c_lflag);
	ck_assert_mem_eq(a->c_cc, b->c_cc, sizeof(a->c_cc));
}

static void termios_raw(const struct caller *c)
{
	struct termios t;

	ck_assert_int_eq(tcgetattr(c->slave, &t), 0);
	ck_assert_uint_eq(t.c_lflag & (ICANON | ECHO | ISIG | IEXTEN), 0);
	ck_assert_uint_eq(t.c_iflag & (ICRNL | IXON), 0);
	ck_assert_uint_eq(t.c_oflag & OPOST, 0);
}

/* ---- The agents (run in the agent process, on the relay's pty) ---- */

typedef int agent_fn(void);

static int agent_echo(void)
{
	char line[256];

	dprintf(1, "READY\n");
	ssize_t n = read(0, line, sizeof(line) - 1);
	if (n <= 0)
		return 1;
	for (ssize_t i = 0; i < n; i++)
		line[i] = (char)toupper((unsigned char)line[i]);
	dprintf(1, "GOT %.*s", (int)n, line);
	if (read(0, line, sizeof(line)) <= 0)
		return 2;
	dprintf(1, "LAST\n");
	return 0;
}

static int agent_winch(void)
{
	struct timespec wait = { .tv_sec = TEST_WAIT_MS / 1000 };
	struct winsize ws;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGWINCH);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (ioctl(0, TIOCGWINSZ, &ws) == -1)
		return 1;
	dprintf(1, "READY %ux%u\n", ws.ws_row, ws.ws_col);
	if (sigtimedwait(&set, NULL, &wait) != SIGWINCH) {
		dprintf(1, "NO SIGWINCH\n");
		return 2;
	}
	if (ioctl(0, TIOCGWINSZ, &ws) == -1)
		return 3;
	dprintf(1, "WINCH %ux%u\n", ws.ws_row, ws.ws_col);
	return 0;
}

static int agent_sigint(void)
{
	struct timespec wait = { .tv_sec = TEST_WAIT_MS / 1000 };
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	dprintf(1, "READY\n");
	if (sigtimedwait(&set, NULL, &wait) != SIGINT) {
		dprintf(1, "NO SIGINT\n");
		return 1;
	}
	dprintf(1, "GOT SIGINT\n");
	return 0;
}

/* Pushes TEST_INJECT into its terminal's input, as an attack on the operator's shell would. */
static int agent_tiocsti(void)
{
	for (const char *p = TEST_INJECT; *p != '\0'; p++) {
		if (ioctl(0, TIOCSTI, p) == -1) {
			dprintf(1, "TIOCSTI: %s\n", strerror(errno));
			return 1;
		}
	}
	dprintf(1, "INJECTED\n");
	return 0;
}

static int agent_bulk_out(void)
{
	char buf[4096];

	memset(buf, 'x', sizeof(buf));
	for (size_t off = 0; off < TEST_BULK_BYTES;) {
		size_t chunk =
		    TEST_BULK_BYTES - off < sizeof(buf) ? TEST_BULK_BYTES - off : sizeof(buf);
		ssize_t n = write(1, buf, chunk);
		if (n <= 0)
			return 1;
		off += (size_t)n;
	}
	dprintf(1, "\nEND\n");
	return 0;
}

static int agent_bulk_in(void)
{
	struct termios t;
	uint8_t buf[4096];
	uint32_t sum = 0;
	size_t total = 0;

	if (tcgetattr(0, &t) == -1)
		return 1;
	cfmakeraw(&t);
	if (tcsetattr(0, TCSANOW, &t) == -1)
		return 2;
	dprintf(1, "READY\n");
	while (total < TEST_BULK_BYTES) {
		ssize_t n = read(0, buf, sizeof(buf));
		if (n <= 0)
			return 3;
		for (ssize_t i = 0; i < n; i++)
			sum = sum * 31u + buf[i];
		total += (size_t)n;
	}
	dprintf(1, "GOT %zu %u\n", total, sum);
	return 0;
}

/* Writes until killed (a stalled terminal never takes it all). */
static int agent_flood(void)
{
	char buf[4096];

	memset(buf, 'y', sizeof(buf));
	for (;;) {
		if (write(1, buf, sizeof(buf)) <= 0)
			return 1;
	}
}

/* Only its stdin is the pty: it reads one line, and says nothing. */
static int agent_stdin_only(void)
{
	char line[64];

	ssize_t n = read(0, line, sizeof(line));
	return n == 3 && memcmp(line, "hi\n", 3) == 0 ? 0 : 1;
}

/* ---- The relay process ---- */

struct relay_report {
	int open_ret;
	int start_ret;
	int agent_status;
	int timed_out;
	int caller_bytes; /* bytes the caller's terminal offered the relay (FIONREAD) */
	int master_after; /* r->master after ptyrelay_close, twice */
};

static struct ptyrelay test_relay;

/* <tty> on the std descriptors of <mask> (bit 0: stdin), /dev/null on the others. */
static void stdio_put(int tty, unsigned mask)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	for (int fd = 0; fd < 3; fd++) {
		if (dup2((mask & (1u << fd)) != 0 ? tty : null, fd) == -1)
			_exit(90);
	}
	close(null);
}

/* A forked helper dies of SIGINT and SIGTERM (not by libcheck's handler, which kills the test). */
static void signals_default(void)
{
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
}

/* The relay process's controlling terminal is <tty>, and it is in front. */
static void session_take(int tty)
{
	signals_default();
	if (setsid() == -1 || ioctl(tty, TIOCSCTTY, 0) == -1)
		_exit(91);
}

static _Noreturn void agent_main(const struct ptyrelay *r, agent_fn *agent)
{
	sigset_t none;

	signals_default();
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(10);
	if (setsid() == -1)
		_exit(100);
	if (ptyrelay_child_stdio(r) != 0)
		_exit(101);
	/* Not fatal: with the caller's terminal left on 0 (a broken relay), this fails, and
	 * the agents must still try their attack for the tests to see it. */
	(void)ioctl(0, TIOCSCTTY, 0);
	_exit(agent());
}

/* Relays until the agent exits (SIGCHLD) or nothing happens for TEST_WAIT_MS. */
static void relay_loop(struct ptyrelay *r, int sfd, struct relay_report *rep)
{
	struct pollfd pfds[PTYRELAY_POLL_FDS + 1];
	struct signalfd_siginfo si;

	for (;;) {
		size_t n = ptyrelay_poll_fds(r, pfds);
		pfds[n] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		int ret = poll(pfds, n + 1, TEST_WAIT_MS);
		if (ret == -1 && errno == EINTR)
			continue;
		if (ret <= 0) {
			rep->timed_out = 1;
			return;
		}
		/* The agent's exit ends the loop at once: its last words are ptyrelay_close's. */
		if (pfds[n].revents != 0 && read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
			if (si.ssi_signo == SIGCHLD)
				return;
			ptyrelay_winch(r);
		}
		for (size_t i = 0; i < n; i++) {
			int q = 0;
			if (pfds[i].fd == r->in_fd && pfds[i].revents != 0 &&
			    ioctl(r->in_fd, FIONREAD, &q) == 0)
				rep->caller_bytes += q;
		}
		ptyrelay_on_poll(r, pfds, n);
	}
}

/* Writes 'S' on <report_fd> once started ('F' if not), then the relay_report. */
static _Noreturn void relay_main(int tty, unsigned mask, int report_fd, agent_fn *agent)
{
	struct relay_report rep = { 0 };
	char err[256];
	sigset_t set;

	alarm(20);
	session_take(tty);
	stdio_put(tty, mask);
	close(tty);
	sigemptyset(&set);
	sigaddset(&set, SIGWINCH);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	rep.open_ret = sfd == -1 ? -errno : ptyrelay_open(&test_relay, err, sizeof(err));
	if (rep.open_ret != 0 || test_relay.master == -1) {
		rep.open_ret = rep.open_ret != 0 ? rep.open_ret : -ENOTTY;
		(void)!write(report_fd, "F", 1);
		(void)!write(report_fd, &rep, sizeof(rep));
		_exit(0);
	}
	pid_t agent_pid = fork();
	if (agent_pid == 0)
		agent_main(&test_relay, agent);
	rep.start_ret = ptyrelay_start(&test_relay);
	(void)!write(report_fd, "S", 1);
	relay_loop(&test_relay, sfd, &rep);
	if (rep.timed_out)
		kill(agent_pid, SIGKILL);
	waitpid(agent_pid, &rep.agent_status, 0);
	ptyrelay_close(&test_relay, TEST_WAIT_MS);
	ptyrelay_close(&test_relay, TEST_WAIT_MS);
	rep.master_after = test_relay.master;
	(void)!write(report_fd, &rep, sizeof(rep));
	_exit(0);
}

struct run {
	struct caller c;
	pid_t pid;
	int report_fd;
	struct relay_report rep;
};

static struct run test_run;

/* Waits up to TEST_WAIT_MS for one byte on <fd>. */
static char byte_wait(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b = 0;

	ck_assert_msg(poll(&p, 1, TEST_WAIT_MS) == 1, "no word from the relay process");
	ck_assert_int_eq(read(fd, &b, 1), 1);
	return b;
}

/* Starts the relay process (the caller's terminal on the std descriptors of <mask>). */
static void run_start(struct run *run, unsigned mask, agent_fn *agent)
{
	int p[2];

	caller_open(&run->c);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	run->pid = fork();
	ck_assert_int_ge(run->pid, 0);
	if (run->pid == 0) {
		close(p[0]);
		close(run->c.master);
		relay_main(run->c.slave, mask, p[1], agent);
	}
	close(p[1]);
	run->report_fd = p[0];
	char b = byte_wait(run->report_fd);
	ck_assert_msg(b == 'S', "the relay did not start");
}

/* Waits (bounded) for <pid>, reading the terminal meanwhile; returns its status. */
static int child_reap(struct caller *c, pid_t pid)
{
	int64_t deadline = test_ms() + TEST_FINISH_MS;
	int status = 0;

	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (test_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			ck_abort_msg("process %d did not exit in time", (int)pid);
		}
		caller_pump(c, 10);
	}
	while (caller_pump(c, 0))
		;
	return status;
}

/* Waits for the relay process; its report then says how the run went. */
static void run_finish(struct run *run)
{
	int status = child_reap(&run->c, run->pid);

	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "relay process status %#x",
		      status);
	ck_assert_int_eq(read(run->report_fd, &run->rep, sizeof(run->rep)),
			 (ssize_t)sizeof(run->rep));
	close(run->report_fd);
	ck_assert_int_eq(run->rep.open_ret, 0);
	ck_assert_int_eq(run->rep.start_ret, 0);
	ck_assert_int_eq(run->rep.timed_out, 0);
	ck_assert_int_eq(run->rep.master_after, -1);
}

static void agent_exited_ok(const struct run *run)
{
	int st = run->rep.agent_status;

	size_t shown = run->c.out_len < 512 ? run->c.out_len : 512;

	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "agent status %#x; it said last \"%.*s\"", st, (int)shown,
		      run->c.out + run->c.out_len - shown);
}

/* The run is over, the relay process reported, and the agent exited 0. */
static void run_end_ok(struct run *run)
{
	run_finish(run);
	agent_exited_ok(run);
}

/* ---- Tests through the relay ---- */

START_TEST(keystrokes_and_output)
{
	struct run *run = &test_run;
	struct termios after;

	run_start(run, TEST_STDIO_ALL, agent_echo);
	caller_expect(&run->c, "READY");
	termios_raw(&run->c);
	caller_type(&run->c, "hello\r", 6);
	caller_expect(&run->c, "GOT HELLO\r\n");
	/* Echoed once, by the agent's own pty: the caller's terminal does not echo. */
	ck_assert_uint_eq(caller_count(&run->c, "hello"), 1);
	caller_type(&run->c, "bye\r", 4);
	run_end_ok(run);
	caller_expect(&run->c, "LAST\r\n"); /* written just before it exited */
	ck_assert_int_eq(tcgetattr(run->c.slave, &after), 0);
	termios_same(&after, &run->c.before);
	ck_assert_int_eq(fcntl(run->c.slave, F_GETFL) & O_NONBLOCK, 0);
	ck_assert_int_eq(caller_inq(&run->c), 0);
	caller_close(&run->c);
}
END_TEST

START_TEST(window_size)
{
	struct run *run = &test_run;
	struct winsize ws = { .ws_row = 50, .ws_col = 132 };

	run_start(run, TEST_STDIO_ALL, agent_winch);
	caller_expect(&run->c, "READY 30x100"); /* copied by ptyrelay_open */
	ck_assert_int_eq(ioctl(run->c.slave, TIOCSWINSZ, &ws), 0);
	caller_expect(&run->c, "WINCH 50x132");
	run_end_ok(run);
	caller_close(&run->c);
}
END_TEST

START_TEST(ctrl_c_is_the_agents_sigint)
{
	struct run *run = &test_run;

	run_start(run, TEST_STDIO_ALL, agent_sigint);
	caller_expect(&run->c, "READY");
	caller_type(&run->c, "\x03", 1);
	caller_expect(&run->c, "GOT SIGINT");
	run_end_ok(run);
	caller_close(&run->c);
}
END_TEST

/* The same agent, given the caller's terminal itself: the byte does land there. */
static bool tiocsti_without_relay(void)
{
	struct caller c;

	caller_open(&c);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(c.master);
		alarm(10);
		session_take(c.slave);
		stdio_put(c.slave, TEST_STDIO_ALL);
		_exit(agent_tiocsti());
	}
	int status = child_reap(&c, pid);
	ck_assert(WIFEXITED(status));
	if (WEXITSTATUS(status) != 0) {
		unit_skip("TIOCSTI is refused here (%.*s): the relay half proves nothing",
			  (int)c.out_len, c.out);
		caller_close(&c);
		return false;
	}
	ck_assert_int_eq(caller_inq(&c), (int)strlen(TEST_INJECT));
	caller_close(&c);
	return true;
}

START_TEST(tiocsti_stays_in_the_pty)
{
	struct run *run = &test_run;

	if (!tiocsti_without_relay())
		return;
	run_start(run, TEST_STDIO_ALL, agent_tiocsti);
	run_end_ok(run); /* it did inject: into its own pty */
	caller_expect(&run->c, "INJECTED");
	ck_assert_int_eq(run->rep.caller_bytes, 0); /* the relay was offered nothing */
	ck_assert_int_eq(caller_inq(&run->c), 0);
	caller_close(&run->c);
}
END_TEST

START_TEST(bulk_output)
{
	struct run *run = &test_run;

	run_start(run, TEST_STDIO_ALL, agent_bulk_out);
	caller_expect(&run->c, "\r\nEND\r\n");
	run_end_ok(run);
	ck_assert_uint_eq(run->c.out_total, TEST_BULK_BYTES + strlen("\r\nEND\r\n"));
	caller_close(&run->c);
}
END_TEST

START_TEST(bulk_input)
{
	static uint8_t bytes[TEST_BULK_BYTES];
	struct run *run = &test_run;
	uint32_t sum = 0;
	char want[64];

	for (size_t i = 0; i < sizeof(bytes); i++) {
		bytes[i] = (uint8_t)(i * 131u + i / 977u);
		sum = sum * 31u + bytes[i];
	}
	run_start(run, TEST_STDIO_ALL, agent_bulk_in);
	caller_expect(&run->c, "READY");
	caller_type(&run->c, bytes, sizeof(bytes));
	snprintf(want, sizeof(want), "GOT %u %u", TEST_BULK_BYTES, sum);
	caller_expect(&run->c, want);
	run_end_ok(run);
	caller_close(&run->c);
}
END_TEST

START_TEST(stdin_only)
{
	struct run *run = &test_run;

	run_start(run, TEST_STDIO_STDIN, agent_stdin_only);
	caller_type(&run->c, "hi\r", 3);
	run_end_ok(run);
	/* Raw, the caller's terminal echoes nothing, and the pty's echo has nowhere to go. */
	ck_assert_uint_eq(run->c.out_total, 0);
	caller_close(&run->c);
}
END_TEST

/*
 * Keys typed while the relay closes (it no longer reads them) are the shell's:
 * the restore must not flush them. No agent: the relay process opens, starts,
 * waits for the test's word, and closes.
 */
START_TEST(typeahead_kept)
{
	struct caller c;
	struct termios after;
	int p[2], q[2];

	caller_open(&c);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(q, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char err[256];
		alarm(10);
		session_take(c.slave);
		stdio_put(c.slave, TEST_STDIO_ALL);
		if (ptyrelay_open(&test_relay, err, sizeof(err)) != 0 ||
		    ptyrelay_start(&test_relay) != 0 || !test_relay.raw)
			_exit(80);
		(void)!write(p[1], "S", 1);
		if (byte_wait(q[0]) != 'G')
			_exit(81);
		ptyrelay_close(&test_relay, TEST_WAIT_MS);
		_exit(0);
	}
	ck_assert_int_eq(byte_wait(p[0]), 'S');
	termios_raw(&c);
	ck_assert_int_eq(write(c.master, "ls\r", 3), 3);
	for (int i = 0; i < 100 && caller_inq(&c) < 3; i++)
		usleep(10 * 1000);
	ck_assert_int_eq(caller_inq(&c), 3);
	ck_assert_int_eq(write(q[1], "G", 1), 1);
	int status = child_reap(&c, pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
	ck_assert_int_eq(tcgetattr(c.slave, &after), 0);
	termios_same(&after, &c.before);
	ck_assert_int_eq(caller_inq(&c), 3);
	caller_close(&c);
}
END_TEST

/* ---- ptyrelay_open and the relay's edges, in the test process ---- */

/* Saves the std descriptors in <saved> and puts <fds> on them. */
static void stdio_swap(int saved[3], const int fds[3])
{
	for (int fd = 0; fd < 3; fd++) {
		saved[fd] = dup(fd);
		ck_assert_int_ge(saved[fd], 0);
		ck_assert_int_eq(dup2(fds[fd], fd), fd);
	}
}

static void stdio_restore(const int saved[3])
{
	for (int fd = 0; fd < 3; fd++) {
		ck_assert_int_eq(dup2(saved[fd], fd), fd);
		close(saved[fd]);
	}
}

START_TEST(open_copies_settings)
{
	struct caller c;
	struct termios t, got;
	struct winsize ws;
	char err[256];
	int saved[3];

	caller_open(&c);
	t = c.before;
	t.c_cc[VKILL] = 0x0b;
	t.c_lflag &= ~(tcflag_t)ECHOK;
	ck_assert_int_eq(tcsetattr(c.slave, TCSANOW, &t), 0);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(null, 0);
	stdio_swap(saved, (const int[3]){ null, c.slave, c.slave });
	int ret = ptyrelay_open(&test_relay, err, sizeof(err));
	stdio_restore(saved);
	ck_assert_msg(ret == 0, "%s", err);
	struct ptyrelay *r = &test_relay;
	ck_assert_int_ge(r->master, 0);
	ck_assert_int_ge(r->slave, 0);
	ck_assert_int_eq(r->in_fd, -1);
	ck_assert(!r->replace[0] && r->replace[1] && r->replace[2]);
	/* Output: the caller's terminal opened again, non-blocking; the caller's own file
	 * description (the shell's too) left blocking. */
	struct stat caller_st, out_st;
	ck_assert(r->out_own);
	ck_assert_int_gt(r->out_fd, 2);
	ck_assert_int_eq(fstat(c.slave, &caller_st), 0);
	ck_assert_int_eq(fstat(r->out_fd, &out_st), 0);
	ck_assert_uint_eq(out_st.st_rdev, caller_st.st_rdev);
	ck_assert_int_ne(fcntl(r->out_fd, F_GETFL) & O_NONBLOCK, 0);
	ck_assert_int_ne(fcntl(r->out_fd, F_GETFD) & FD_CLOEXEC, 0);
	ck_assert_int_eq(fcntl(c.slave, F_GETFL) & O_NONBLOCK, 0);
	ck_assert_int_ne(fcntl(r->master, F_GETFL) & O_NONBLOCK, 0);
	ck_assert_int_eq(fcntl(r->slave, F_GETFL) & O_NONBLOCK, 0);
	ck_assert_int_ne(fcntl(r->master, F_GETFD) & FD_CLOEXEC, 0);
	ck_assert_int_ne(fcntl(r->slave, F_GETFD) & FD_CLOEXEC, 0);
	ck_assert_int_eq(tcgetattr(r->slave, &got), 0);
	termios_same(&got, &t);
	ck_assert_int_eq(ioctl(r->slave, TIOCGWINSZ, &ws), 0);
	ck_assert_uint_eq(ws.ws_row, TEST_ROWS);
	ck_assert_uint_eq(ws.ws_col, TEST_COLS);
	/* Closed without ever starting: the parent's slave goes too, so no drain wait. */
	int64_t t0 = test_ms();
	ptyrelay_close(r, TEST_WAIT_MS);
	ck_assert_int_lt(test_ms() - t0, 1000);
	ck_assert_int_eq(r->master, -1);
	ck_assert_int_eq(r->slave, -1);
	ptyrelay_close(r, TEST_WAIT_MS);
	ck_assert_int_eq(tcgetattr(c.slave, &got), 0);
	termios_same(&got, &t); /* stdin was no terminal: never raw */
	close(null);
	caller_close(&c);
}
END_TEST

/* With stderr closed at start, the new descriptors must not take its place. */
START_TEST(std_descriptor_closed)
{
	struct caller c;
	char err[256];
	int saved[3];

	caller_open(&c);
	stdio_swap(saved, (const int[3]){ c.slave, c.slave, c.slave });
	close(2);
	int ret = ptyrelay_open(&test_relay, err, sizeof(err));
	int fd2 = fcntl(2, F_GETFD);
	stdio_restore(saved);
	ck_assert_msg(ret == 0, "%s", err);
	ck_assert_int_eq(fd2, -1); /* still closed */
	ck_assert_int_gt(test_relay.master, 2);
	ck_assert_int_gt(test_relay.slave, 2);
	ck_assert(test_relay.replace[0] && test_relay.replace[1] && !test_relay.replace[2]);
	ck_assert_int_eq(test_relay.in_fd, 0);
	ck_assert_int_gt(test_relay.out_fd, 2); /* the terminal on 1, opened again */
	ptyrelay_close(&test_relay, TEST_WAIT_MS);
	caller_close(&c);
}
END_TEST

START_TEST(no_terminal)
{
	struct pollfd pfds[PTYRELAY_POLL_FDS];
	struct stat before, after;
	char err[256] = "";
	int saved[3];

	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(null, 0);
	memset(&test_relay, 0xa5, sizeof(test_relay));
	stdio_swap(saved, (const int[3]){ null, null, null });
	int ret = ptyrelay_open(&test_relay, err, sizeof(err));
	ck_assert_int_eq(fstat(0, &before), 0);
	int child = ptyrelay_child_stdio(&test_relay);
	ck_assert_int_eq(fstat(0, &after), 0);
	stdio_restore(saved);
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(child, 0);
	ck_assert_uint_eq(before.st_rdev, after.st_rdev);
	ck_assert_int_eq(test_relay.master, -1);
	ck_assert_int_eq(test_relay.slave, -1);
	ck_assert_int_eq(test_relay.in_fd, -1);
	ck_assert_int_eq(test_relay.out_fd, -1);
	ck_assert(!test_relay.replace[0] && !test_relay.replace[1] && !test_relay.replace[2]);
	ck_assert_int_eq(ptyrelay_start(&test_relay), 0);
	ck_assert(!test_relay.raw);
	ptyrelay_winch(&test_relay);
	ck_assert_uint_eq(ptyrelay_poll_fds(&test_relay, pfds), 0);
	ptyrelay_on_poll(&test_relay, pfds, 0);
	ptyrelay_close(&test_relay, TEST_WAIT_MS);
	ptyrelay_close(&test_relay, TEST_WAIT_MS);
	ck_assert_int_eq(test_relay.master, -1);
	close(null);
}
END_TEST

/* Polls and moves once; returns how many descriptors the relay waited for. */
static size_t relay_turn(struct ptyrelay *r)
{
	struct pollfd pfds[PTYRELAY_POLL_FDS];

	size_t n = ptyrelay_poll_fds(r, pfds);
	if (n > 0 && poll(pfds, n, 200) > 0)
		ptyrelay_on_poll(r, pfds, n);
	return n;
}

/* Reads what the agent's side got, up to <cap> bytes within a second. */
static size_t slave_read(int slave, char *buf, size_t cap)
{
	struct pollfd p = { .fd = slave, .events = POLLIN };

	if (poll(&p, 1, 1000) != 1)
		return 0;
	ssize_t n = read(slave, buf, cap);
	return n > 0 ? (size_t)n : 0;
}

/*
 * White-box: the caller's input and output are pipes here. EOF of the input
 * stops reading it but leaves the pty working; the master's EIO (every slave
 * closed) ends both directions and leaves nothing to poll (no busy loop).
 */
START_TEST(eof_and_eio)
{
	struct ptyrelay *r = &test_relay;
	struct termios t;
	char err[256], buf[64];
	int in[2], out[2];

	relay_reset(r);
	ck_assert_int_eq(pty_create(r, err, sizeof(err)), 0);
	ck_assert_int_eq(tcgetattr(r->slave, &t), 0);
	cfmakeraw(&t);
	ck_assert_int_eq(tcsetattr(r->slave, TCSANOW, &t), 0);
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	r->in_fd = in[0];
	r->out_fd = out[1];
	ck_assert_int_eq(write(in[1], "abc", 3), 3);
	close(in[1]);
	for (int i = 0; i < 10 && !r->to_agent.eof; i++)
		relay_turn(r);
	ck_assert(r->to_agent.eof);
	ck_assert_uint_eq(slave_read(r->slave, buf, sizeof(buf)), 3);
	ck_assert_mem_eq(buf, "abc", 3);
	ck_assert_int_ge(r->master, 0);
	ck_assert_int_eq(write(r->slave, "out", 3), 3);
	relay_turn(r);
	ck_assert_int_eq(read(out[0], buf, sizeof(buf)), 3);
	ck_assert_mem_eq(buf, "out", 3);
	close(r->slave);
	r->slave = -1;
	for (int i = 0; i < 10 && !r->to_caller.eof; i++)
		relay_turn(r);
	ck_assert(r->to_caller.eof);
	ck_assert_uint_eq(relay_turn(r), 0);
	ptyrelay_close(r, TEST_WAIT_MS);
	ck_assert_int_eq(r->master, -1);
	close(in[0]);
	close(out[0]);
	close(out[1]);
}
END_TEST

/*
 * White-box: the caller's input and output are a terminal, not raw. Its EOF
 * (^D) stops reading it and is no hang-up; the terminal's hang-up (its master
 * closed) is, reported until the end, and the input is no longer polled;
 * EIO writing to it is one too.
 */
START_TEST(hangup_reported)
{
	struct ptyrelay *r = &test_relay;
	struct pollfd pfds[PTYRELAY_POLL_FDS];
	struct caller c;
	char err[256];

	relay_reset(r);
	ck_assert_int_eq(pty_create(r, err, sizeof(err)), 0);
	caller_open(&c);
	r->in_fd = c.slave;
	r->out_fd = c.slave;
	ck_assert_int_eq(write(c.master, "\x04", 1), 1); /* ^D: EOF, canonical */
	for (int i = 0; i < 10 && !r->to_agent.eof; i++)
		relay_turn(r);
	ck_assert(r->to_agent.eof);
	ck_assert(!r->hangup);
	r->to_agent.eof = false; /* read it again */
	close(c.master);
	for (int i = 0; i < 10 && !r->hangup; i++)
		relay_turn(r);
	ck_assert(r->hangup);
	ck_assert(r->to_agent.eof);
	size_t n = ptyrelay_poll_fds(r, pfds);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_ne(pfds[i].fd, c.slave);
	relay_turn(r);
	ck_assert(r->hangup);
	/* The output side alone: a write to the hung-up terminal says EIO. */
	r->hangup = false;
	ck_assert_int_eq(write(r->slave, "out", 3), 3);
	for (int i = 0; i < 10 && r->out_fd != -1; i++)
		relay_turn(r);
	ck_assert_int_eq(r->out_fd, -1);
	ck_assert(r->hangup);
	ptyrelay_close(r, TEST_WAIT_MS);
	ck_assert_int_eq(r->master, -1);
	close(c.slave);
}
END_TEST

/* ---- A caller's terminal that takes nothing ---- */

struct stall_report {
	int open_ret;
	int out_own;        /* the relay wrote through a description of its own */
	int ticks;          /* timer expiries the loop saw */
	int64_t max_gap_ms; /* longest wait between two of them */
	size_t pending;     /* agent's output the relay still held at the end */
	int64_t close_ms;   /* ptyrelay_close(TEST_CLOSE_MS) took */
};

/* The relay's loop for TEST_STALL_MS, with a timer: it must see each tick. */
static void stall_loop(struct ptyrelay *r, int tfd, struct stall_report *rep)
{
	struct pollfd pfds[PTYRELAY_POLL_FDS + 1];
	int64_t end = now_ms() + TEST_STALL_MS, last = now_ms();
	uint64_t expiries;

	while (now_ms() < end) {
		size_t n = ptyrelay_poll_fds(r, pfds);
		pfds[n] = (struct pollfd){ .fd = tfd, .events = POLLIN };
		if (poll(pfds, n + 1, 1000) == -1 && errno != EINTR)
			_exit(92);
		if (pfds[n].revents != 0 && read(tfd, &expiries, sizeof(expiries)) > 0) {
			int64_t t = now_ms();
			rep->max_gap_ms = t - last > rep->max_gap_ms ? t - last : rep->max_gap_ms;
			last = t;
			rep->ticks++;
		}
		ptyrelay_on_poll(r, pfds, n);
	}
	int64_t t = now_ms();
	rep->max_gap_ms = t - last > rep->max_gap_ms ? t - last : rep->max_gap_ms;
	rep->pending = r->to_caller.len - r->to_caller.off;
}

/*
 * The relay process of the stall tests: <tty> on 0-2, a flooding agent; with
 * <blocking>, the caller's own descriptor is written (as when opening the
 * terminal again failed). Writes its stall_report on <report_fd>.
 */
static _Noreturn void stall_main(int tty, int report_fd, bool blocking)
{
	struct itimerspec its = { .it_interval = { 0, TEST_TICK_MS * 1000000L },
				  .it_value = { 0, TEST_TICK_MS * 1000000L } };
	struct stall_report rep = { 0 };
	struct ptyrelay *r = &test_relay;
	char err[256];

	alarm(20);
	signals_default();
	stdio_put(tty, TEST_STDIO_ALL);
	close(tty);
	rep.open_ret = ptyrelay_open(r, err, sizeof(err));
	if (rep.open_ret != 0 || r->master == -1) {
		(void)!write(report_fd, &rep, sizeof(rep));
		_exit(0);
	}
	if (blocking && r->out_own) {
		close(r->out_fd);
		r->out_fd = 1;
		r->out_own = false;
	}
	rep.out_own = r->out_own;
	pid_t agent_pid = fork();
	if (agent_pid == 0)
		agent_main(r, agent_flood);
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	if (ptyrelay_start(r) != 0 || tfd == -1 || timerfd_settime(tfd, 0, &its, NULL) == -1)
		_exit(93);
	stall_loop(r, tfd, &rep);
	kill(agent_pid, SIGKILL);
	waitpid(agent_pid, NULL, 0);
	int64_t t0 = now_ms();
	ptyrelay_close(r, TEST_CLOSE_MS);
	rep.close_ms = now_ms() - t0;
	(void)!write(report_fd, &rep, sizeof(rep));
	_exit(0);
}

/*
 * The caller's terminal is never read (its buffer full), the agent floods:
 * the relay keeps returning to poll (a 100 ms timer is seen throughout), the
 * agent's output waits in the relay (nothing more is read meanwhile), and
 * ptyrelay_close gives up at its timeout.
 */
static void check_stall(bool blocking)
{
	struct stall_report rep = { 0 };
	struct pollfd p;
	struct caller c;
	int fds[2], status = 0, unread = 0;

	caller_open(&c);
	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(fds[0]);
		close(c.master);
		stall_main(c.slave, fds[1], blocking);
	}
	close(fds[1]);
	p = (struct pollfd){ .fd = fds[0], .events = POLLIN };
	bool reported = poll(&p, 1, TEST_STALL_MS + TEST_CLOSE_MS + TEST_WAIT_MS) == 1 &&
			read(fds[0], &rep, sizeof(rep)) == (ssize_t)sizeof(rep);
	ck_assert_int_eq(ioctl(c.master, FIONREAD, &unread), 0);
	if (!reported)
		kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	close(fds[0]);
	caller_close(&c);
	ck_assert_msg(reported, "the relay blocked on the stalled terminal (status %#x)", status);
	fprintf(stderr,
		"stall%s: %d ticks, max gap %lld ms, %zu pending, close %lld ms, %d unread\n",
		blocking ? " (blocking)" : "", rep.ticks, (long long)rep.max_gap_ms, rep.pending,
		(long long)rep.close_ms, unread);
	ck_assert_int_eq(rep.open_ret, 0);
	ck_assert_int_eq(rep.out_own, !blocking);
	ck_assert_int_ge(rep.ticks, TEST_STALL_MS / TEST_TICK_MS / 2);
	ck_assert_int_lt(rep.max_gap_ms, 1000);
	ck_assert_uint_gt(rep.pending, 0); /* the terminal was full: output waited */
	ck_assert_int_gt(unread, 0);
	ck_assert_int_lt(rep.close_ms, TEST_CLOSE_MS + 1000);
}

START_TEST(stalled_terminal)
{
	check_stall(false);
}
END_TEST

START_TEST(stalled_terminal_blocking_fd)
{
	check_stall(true);
}
END_TEST

static Suite *ptyrelay_suite(void)
{
	Suite *s = suite_create("ptyrelay");
	TCase *t = tcase_create("open");
	TCase *n = tcase_create("relay");

	tcase_set_timeout(t, 20);
	tcase_add_test(t, open_copies_settings);
	tcase_add_test(t, std_descriptor_closed);
	tcase_add_test(t, no_terminal);
	tcase_add_test(t, eof_and_eio);
	tcase_add_test(t, hangup_reported);
	suite_add_tcase(s, t);
	tcase_set_timeout(n, 40);
	tcase_add_test(n, keystrokes_and_output);
	tcase_add_test(n, window_size);
	tcase_add_test(n, ctrl_c_is_the_agents_sigint);
	tcase_add_test(n, tiocsti_stays_in_the_pty);
	tcase_add_test(n, bulk_output);
	tcase_add_test(n, bulk_input);
	tcase_add_test(n, stdin_only);
	tcase_add_test(n, typeahead_kept);
	tcase_add_test(n, stalled_terminal);
	tcase_add_test(n, stalled_terminal_blocking_fd);
	suite_add_tcase(s, n);
	return s;
}

int main(void)
{
	return unit_run(ptyrelay_suite());
}
