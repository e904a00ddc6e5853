/*
 * The sandbox's own terminal, relayed (contract: tools/agentsnet/ptyrelay.h).
 *
 * ptyrelay_open makes a pty on the host's /dev/ptmx (the slave through
 * TIOCGPTPEER: no path lookup; ptsname_r before Linux 4.13) with the caller's
 * settings and window size. The sandbox's first process gets the slave on the
 * std descriptors that were terminals, so TIOCSTI, TCSETS, TIOCSWINSZ and
 * reads by the agent reach only the pty, never the operator's terminal.
 *
 * The relay is two one-way pipes with a fixed buffer each (in the struct:
 * nothing is allocated): a direction reads only when its buffer is empty and
 * writes what is buffered, so a slow side holds the other back. The master is
 * ours alone and non-blocking. The caller's descriptors are not made so: their
 * open file description is the shell's too, where O_NONBLOCK would outlive us.
 * So input is one read per poll() readiness (EAGAIN still handled, for a shell
 * that left O_NONBLOCK set). Output never blocks: a terminal that takes nothing
 * (flow control, a frozen emulator, a stalled ssh) would otherwise keep the
 * caller from its signals, and the operator from ending a flooding agent. It
 * goes through a file description of our own, the caller's terminal opened
 * again through /proc/self/fd, O_NONBLOCK (the same device checked, r->out_own),
 * or, where that open fails, through the caller's descriptor in chunks of
 * PTYRELAY_TTY_CHUNK, each after poll() said POLLOUT. While output is pending
 * the relay waits for POLLOUT and reads no more of the master: the agent's
 * writes stall, nothing piles up here, and ptyrelay_close gives up on what is
 * left at its timeout. EIO (or POLLHUP) on
 * the master means every slave is closed: both directions stop, and a hung-up
 * master is no longer polled (no busy loop). EOF on the caller's input stops
 * only that direction: the agent may still be writing. A hang-up of the
 * caller's terminal (POLLHUP or EIO on its input, EOF there in raw mode, EIO
 * writing to it) also sets r->hangup, on which sandbox_wait ends the sandbox:
 * an agent that made its pty raw and ignores signals leaves the operator no
 * other way to stop it once the terminal is gone.
 *
 * Raw mode (cfmakeraw: the pty's own line discipline does echo, editing,
 * output processing, and turns ^C/^Z/^\ into the agent's signals) is entered
 * only when stdin is the caller's controlling terminal and the caller is in
 * front; a caller started in the background enters it at its first keystroke
 * in front. The settings go back with TCSADRAIN (TCSAFLUSH would drop keys
 * typed ahead for the shell) and SIGTTOU blocked, so that works from behind.
 */
#include "tools/agentsnet/ptyrelay.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"

/* Bytes written at most per POLLOUT to a caller's descriptor we could not open again. */
#define PTYRELAY_TTY_CHUNK 256u

static void dir_reset(struct ptyrelay_dir *d)
{
	d->len = 0;
	d->off = 0;
	d->eof = false;
}

static void relay_reset(struct ptyrelay *r)
{
	r->master = -1;
	r->slave = -1;
	r->in_fd = -1;
	r->out_fd = -1;
	r->out_own = false;
	for (size_t i = 0; i < AN_ARRAY_LEN(r->replace); i++)
		r->replace[i] = false;
	r->raw = false;
	r->hangup = false;
	dir_reset(&r->to_agent);
	dir_reset(&r->to_caller);
}

/* The caller's terminal that settings and window size are read from. */
static int caller_tty(const struct ptyrelay *r)
{
	return r->in_fd != -1 ? r->in_fd : r->out_fd;
}

static int open_slave(int master)
{
	char path[64];

	int fd = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd != -1 || (errno != EINVAL && errno != ENOTTY))
		return fd;
	int ret = ptsname_r(master, path, sizeof(path));
	if (ret != 0) {
		errno = ret;
		return -1;
	}
	return open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
}

/*
 * Moves <fd> above the std descriptors: with one of them closed at start, the
 * master could be opened as, say, fd 2, and our own stderr would then type
 * into the agent's input. Returns the descriptor, or -1 with errno (and <fd>
 * closed).
 */
static int above_std(int fd)
{
	if (fd > 2)
		return fd;
	int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	int saved = errno;
	close(fd);
	errno = saved;
	return moved;
}

/* Fills r->master (non-blocking) and r->slave; on failure neither is left open. */
static int pty_create(struct ptyrelay *r, char *err, size_t err_len)
{
	const char *step = "posix_openpt";

	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m != -1)
		m = above_std(m);
	if (m == -1)
		goto out_err;
	step = "grantpt";
	if (grantpt(m) == -1)
		goto out_close;
	step = "unlockpt";
	if (unlockpt(m) == -1)
		goto out_close;
	step = "fcntl(O_NONBLOCK)";
	int fl = fcntl(m, F_GETFL);
	if (fl == -1 || fcntl(m, F_SETFL, fl | O_NONBLOCK) == -1)
		goto out_close;
	step = "open the pty's slave";
	int s = open_slave(m);
	if (s != -1)
		s = above_std(s);
	if (s == -1)
		goto out_close;
	r->master = m;
	r->slave = s;
	return 0;
out_close:;
	int ret = -errno;
	close(m);
	snprintf(err, err_len, "%s: %s", step, strerror(-ret));
	return ret;
out_err:
	ret = -errno;
	snprintf(err, err_len, "%s: %s", step, strerror(-ret));
	return ret;
}

/* Gives the slave the settings and window size of the caller's terminal <from>. */
static int slave_copy(int slave, int from, char *err, size_t err_len)
{
	struct termios t;
	struct winsize ws;

	AN_ASSERT(slave >= 0);
	AN_ASSERT(from >= 0);
	const char *step = "tcgetattr(the caller's terminal)";
	if (tcgetattr(from, &t) == -1)
		goto out_err;
	step = "tcsetattr(the pty's slave)";
	if (tcsetattr(slave, TCSANOW, &t) == -1)
		goto out_err;
	/* A terminal without a size (0x0, or none at all) leaves the pty's 0x0. */
	if (ioctl(from, TIOCGWINSZ, &ws) == -1)
		return 0;
	step = "TIOCSWINSZ(the pty's slave)";
	if (ioctl(slave, TIOCSWINSZ, &ws) == -1)
		goto out_err;
	return 0;
out_err:;
	int ret = -errno;
	snprintf(err, err_len, "%s: %s", step, strerror(-ret));
	return ret;
}

/*
 * The caller's terminal <fd> opened again, write-only and non-blocking: a file
 * description of our own, so O_NONBLOCK never reaches the shell's. -1 when
 * that fails, or opens another device (a pty master's path makes a new pty).
 */
static int reopen_nonblock(int fd)
{
	char path[32];
	struct stat was, now;

	AN_ASSERT(fd >= 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int nb = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (nb != -1)
		nb = above_std(nb);
	if (nb == -1)
		return -1;
	if (fstat(fd, &was) == -1 || fstat(nb, &now) == -1 || !S_ISCHR(now.st_mode) ||
	    now.st_rdev != was.st_rdev || isatty(nb) != 1) {
		close(nb);
		return -1;
	}
	return nb;
}

/* Stops writing to the caller's terminal (gone, or we are closing). */
static void out_close(struct ptyrelay *r)
{
	if (r->out_own && r->out_fd != -1)
		close(r->out_fd);
	r->out_fd = -1;
	r->out_own = false;
}

int ptyrelay_open(struct ptyrelay *r, char *err, size_t err_len)
{
	AN_ASSERT(r != NULL);
	AN_ASSERT(err != NULL);
	AN_ASSERT(err_len > 0);
	relay_reset(r);
	bool any = false;
	for (int fd = 0; fd < 3; fd++) {
		r->replace[fd] = isatty(fd) == 1;
		any = any || r->replace[fd];
	}
	if (!any)
		return 0;
	r->in_fd = r->replace[0] ? 0 : -1;
	r->out_fd = r->replace[1] ? 1 : (r->replace[2] ? 2 : -1);
	int ret = pty_create(r, err, err_len);
	if (ret == 0)
		ret = slave_copy(r->slave, caller_tty(r), err, err_len);
	if (ret == 0 && r->out_fd != -1) {
		int nb = reopen_nonblock(r->out_fd);
		r->out_fd = nb != -1 ? nb : r->out_fd;
		r->out_own = nb != -1;
	}
	if (ret != 0) {
		if (r->master != -1) {
			close(r->slave);
			close(r->master);
		}
		relay_reset(r);
	}
	return ret;
}

/* Runs in a forked child: async-signal-safe calls only, no assertion (it may print). */
int ptyrelay_child_stdio(const struct ptyrelay *r)
{
	if (r->master == -1)
		return 0;
	for (int fd = 0; fd < 3; fd++) {
		if (!r->replace[fd])
			continue;
		if (dup2(r->slave, fd) == -1) /* the copy is not close-on-exec */
			return -errno;
	}
	/* Both above 2 (above_std): neither is one of the descriptors just set. */
	if (close(r->master) == -1 || close(r->slave) == -1)
		return -errno;
	return 0;
}

/* Raw mode on the caller's input, when it is our controlling terminal and we are in front. */
static int raw_enter(struct ptyrelay *r)
{
	struct termios t;

	if (r->raw || r->in_fd == -1)
		return 0;
	pid_t fg = tcgetpgrp(r->in_fd);
	if (fg == -1 || fg != getpgrp())
		return 0;
	if (tcgetattr(r->in_fd, &r->saved) == -1)
		return -errno;
	t = r->saved;
	cfmakeraw(&t);
	if (tcsetattr(r->in_fd, TCSADRAIN, &t) == -1)
		return -errno;
	r->raw = true;
	return 0;
}

static void raw_leave(struct ptyrelay *r)
{
	sigset_t ttou, old;

	if (!r->raw)
		return;
	AN_ASSERT(r->in_fd != -1);
	/* Blocked, SIGTTOU no longer stops a caller that was moved to the background. */
	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	int ret = pthread_sigmask(SIG_BLOCK, &ttou, &old);
	AN_ASSERT(ret == 0);
	while (tcsetattr(r->in_fd, TCSADRAIN, &r->saved) == -1 && errno == EINTR)
		;
	ret = pthread_sigmask(SIG_SETMASK, &old, NULL);
	AN_ASSERT(ret == 0);
	r->raw = false;
}

int ptyrelay_start(struct ptyrelay *r)
{
	AN_ASSERT(r != NULL);
	if (r->master == -1)
		return 0;
	if (r->slave != -1) {
		close(r->slave);
		r->slave = -1;
	}
	return raw_enter(r);
}

void ptyrelay_winch(struct ptyrelay *r)
{
	struct winsize ws;

	AN_ASSERT(r != NULL);
	if (r->master == -1 || caller_tty(r) == -1)
		return;
	if (ioctl(caller_tty(r), TIOCGWINSZ, &ws) == -1)
		return;
	(void)ioctl(r->master, TIOCSWINSZ, &ws);
}

size_t ptyrelay_poll_fds(const struct ptyrelay *r, struct pollfd *pfds)
{
	size_t n = 0;
	short events = 0;

	AN_ASSERT(r != NULL);
	AN_ASSERT(pfds != NULL);
	if (r->master == -1)
		return 0;
	if (r->in_fd != -1 && !r->to_agent.eof && r->to_agent.len == 0)
		pfds[n++] = (struct pollfd){ .fd = r->in_fd, .events = POLLIN };
	if (!r->to_caller.eof && r->to_caller.len == 0)
		events |= POLLIN;
	if (r->to_agent.len > 0)
		events |= POLLOUT;
	if (events != 0)
		pfds[n++] = (struct pollfd){ .fd = r->master, .events = events };
	if (r->to_caller.len > 0 && r->out_fd != -1)
		pfds[n++] = (struct pollfd){ .fd = r->out_fd, .events = POLLOUT };
	AN_ASSERT(n <= PTYRELAY_POLL_FDS);
	return n;
}

/*
 * Writes what <d> holds to <fd>, at most <max> bytes: 0, -EAGAIN (call again
 * when writable) or the write's -errno.
 */
static int dir_write(struct ptyrelay_dir *d, int fd, size_t max)
{
	AN_ASSERT(d->off < d->len);
	AN_ASSERT(max > 0);
	size_t len = d->len - d->off < max ? d->len - d->off : max;
	ssize_t n = write(fd, d->buf + d->off, len);
	if (n == -1)
		return errno == EINTR ? -EAGAIN : -errno;
	d->off += (size_t)n;
	AN_ASSERT(d->off <= d->len);
	if (d->off == d->len) {
		d->len = 0;
		d->off = 0;
	}
	return 0;
}

/* Reads into the empty <d> from <fd>: bytes read, 0 at EOF, -EAGAIN, or the read's -errno. */
static ssize_t dir_read(struct ptyrelay_dir *d, int fd)
{
	AN_ASSERT(d->len == 0);
	ssize_t n = read(fd, d->buf, sizeof(d->buf));
	if (n == -1)
		return errno == EINTR ? -EAGAIN : -errno;
	d->len = (size_t)n;
	d->off = 0;
	return n;
}

/* Nothing more goes to the agent: its side hung up, or we are closing. */
static void input_stop(struct ptyrelay *r)
{
	r->to_agent.eof = true;
	r->to_agent.len = 0;
	r->to_agent.off = 0;
}

/* The agent's side is gone (EIO: no slave left open): nothing more either way. */
static void master_gone(struct ptyrelay *r)
{
	input_stop(r);
	r->to_caller.eof = true;
}

static void agent_write(struct ptyrelay *r)
{
	if (r->to_agent.len == 0)
		return;
	int ret = dir_write(&r->to_agent, r->master, sizeof(r->to_agent.buf));
	if (ret != 0 && ret != -EAGAIN)
		input_stop(r); /* what the agent wrote last is still to be read (then EIO) */
}

/* The caller's own (blocking) descriptor: true when a chunk may be written without blocking. */
static bool caller_writable(const struct ptyrelay *r)
{
	struct pollfd p = { .fd = r->out_fd, .events = POLLOUT };

	if (r->out_own)
		return true;
	int n = poll(&p, 1, 0);
	return n == 1 && p.revents != 0; /* POLLERR or POLLHUP too: the write says what */
}

static void caller_write(struct ptyrelay *r)
{
	if (r->to_caller.len == 0 || !caller_writable(r))
		return;
	size_t max = r->out_own ? sizeof(r->to_caller.buf) : PTYRELAY_TTY_CHUNK;
	int ret = dir_write(&r->to_caller, r->out_fd, max);
	if (ret != 0 && ret != -EAGAIN) {
		/* The caller's terminal is gone (hang-up): what the agent writes is dropped. */
		r->to_caller.len = 0;
		r->to_caller.off = 0;
		out_close(r);
		r->hangup = r->hangup || ret == -EIO;
	}
}

static void caller_read(struct ptyrelay *r)
{
	if (r->to_agent.eof || r->to_agent.len != 0)
		return;
	(void)raw_enter(r); /* brought to the foreground since ptyrelay_start */
	ssize_t n = dir_read(&r->to_agent, r->in_fd);
	if (n > 0)
		agent_write(r);
	else if (n != -EAGAIN)
		r->to_agent.eof = true; /* EOF or hang-up: the pty stays open */
	/* Raw (VMIN 1), a read ends with no byte only once the terminal hung up. */
	if (n == -EIO || (n == 0 && r->raw))
		r->hangup = true;
}

/* POLLHUP on the caller's input: its terminal hung up; what was read still goes in. */
static void caller_hangup(struct ptyrelay *r)
{
	r->hangup = true;
	r->to_agent.eof = true;
}

static void master_read(struct ptyrelay *r)
{
	if (r->to_caller.eof || r->to_caller.len != 0)
		return;
	ssize_t n = dir_read(&r->to_caller, r->master);
	if (n > 0 && r->out_fd == -1)
		r->to_caller.len = 0; /* no terminal to show it on (only stdin was one) */
	else if (n > 0)
		caller_write(r);
	else if (n != -EAGAIN)
		master_gone(r);
}

void ptyrelay_on_poll(struct ptyrelay *r, const struct pollfd *pfds, size_t n)
{
	const short ready = POLLIN | POLLHUP | POLLERR | POLLNVAL;

	AN_ASSERT(r != NULL);
	AN_ASSERT(n <= PTYRELAY_POLL_FDS);
	for (size_t i = 0; i < n && r->master != -1; i++) {
		short ev = pfds[i].revents;
		if (ev == 0)
			continue;
		if (pfds[i].fd == r->in_fd && (ev & ready) != 0) {
			caller_read(r);
			if ((ev & POLLHUP) != 0)
				caller_hangup(r);
		} else if (pfds[i].fd == r->master) {
			/* POLLHUP: every slave is closed; keystrokes could only pile up. */
			if ((ev & (POLLHUP | POLLERR)) != 0)
				input_stop(r);
			if ((ev & POLLOUT) != 0)
				agent_write(r);
			if ((ev & ready) != 0)
				master_read(r);
		} else if (pfds[i].fd == r->out_fd) {
			caller_write(r);
		}
	}
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Copies the master's last output to the caller until EIO or <timeout_ms>. */
static void drain(struct ptyrelay *r, int timeout_ms)
{
	struct pollfd pfds[PTYRELAY_POLL_FDS];
	int64_t deadline = now_ms() + timeout_ms;

	input_stop(r);
	for (;;) {
		size_t n = ptyrelay_poll_fds(r, pfds);
		int64_t left = deadline - now_ms();
		if (n == 0 || left <= 0)
			return;
		int ret = poll(pfds, n, (int)left);
		if (ret == -1 && errno == EINTR)
			continue;
		if (ret <= 0)
			return;
		ptyrelay_on_poll(r, pfds, n);
	}
}

void ptyrelay_close(struct ptyrelay *r, int timeout_ms)
{
	AN_ASSERT(r != NULL);
	if (r->master == -1)
		return;
	if (r->slave != -1) { /* never started: without this, the master never says EIO */
		close(r->slave);
		r->slave = -1;
	}
	if (!r->to_caller.eof && timeout_ms > 0)
		drain(r, timeout_ms);
	raw_leave(r);
	close(r->master);
	out_close(r);
	relay_reset(r);
}
