/*
 * The sandbox's own terminal. When the caller of `agentsnet run` has a
 * terminal on stdin, stdout or stderr, the agent never gets that terminal (on
 * it, TIOCSTI would type into the operator's shell, and TCSETS, TIOCSWINSZ
 * or a read would reach it): it gets the slave of a new pty on those same
 * descriptors, and `agentsnet run` relays between the pty's master and the
 * caller's terminal, which it puts in raw mode meanwhile (so ^C, ^Z and ^\
 * are bytes the pty turns into the agent's own signals), passing window-size
 * changes on with TIOCSWINSZ (the kernel then signals SIGWINCH to the agent).
 * The relay never blocks on the caller's terminal: a stalled one (flow
 * control, a frozen emulator or ssh) stalls the agent's output, not the
 * caller's poll loop. The caller's terminal settings are restored on every
 * exit path.
 */
#ifndef AN_TOOLS_AGENTSNET_PTYRELAY_H
#define AN_TOOLS_AGENTSNET_PTYRELAY_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <termios.h>

/* Bytes buffered per direction between a read and its write. */
#define PTYRELAY_BUF_BYTES 16384u
/* pollfds that ptyrelay_poll_fds fills at most. */
#define PTYRELAY_POLL_FDS 4u

struct ptyrelay_dir {
	uint8_t buf[PTYRELAY_BUF_BYTES];
	size_t len; /* bytes in buf */
	size_t off; /* bytes of buf already written */
	bool eof;   /* the source ended (or failed) */
};

struct ptyrelay {
	int master;      /* -1: no pty (no std descriptor is a terminal) */
	int slave;       /* open until ptyrelay_child_stdio's caller (the parent) closes it */
	int in_fd;       /* the caller's terminal we read keystrokes from, or -1 */
	int out_fd;      /* where the master's output goes: the caller's terminal (see out_own) */
	bool out_own;    /* out_fd is ours, non-blocking (else the caller's own descriptor) */
	bool replace[3]; /* which of stdin, stdout, stderr the sandbox gets the slave on */
	bool raw;        /* saved holds the caller's settings to restore */
	bool hangup;     /* the caller's terminal hung up (see ptyrelay_on_poll) */
	struct termios saved;
	struct ptyrelay_dir to_agent;  /* in_fd -> master */
	struct ptyrelay_dir to_caller; /* master -> out_fd */
};

/*
 * Opens a pty when any of descriptors 0-2 is a terminal (otherwise leaves
 * r->master at -1 and returns 0): the slave gets the caller's terminal
 * settings and window size; raw mode is not entered yet. Returns 0 or -errno
 * with <err> (<err_len> bytes) naming the step.
 */
int ptyrelay_open(struct ptyrelay *r, char *err, size_t err_len);

/*
 * In the sandbox's first process, after setsid(): puts the slave on the
 * descriptors of r->replace (dup2) and closes the master and the slave's
 * original descriptor. It does not make the slave a controlling terminal:
 * the agent's own session does that (the bridge). Returns 0 or -errno.
 */
int ptyrelay_child_stdio(const struct ptyrelay *r);

/*
 * In the parent once the child has the slave: closes the parent's slave
 * descriptor and puts the caller's terminal in raw mode when it is the input
 * and the caller is in its foreground process group. Returns 0 or -errno.
 */
int ptyrelay_start(struct ptyrelay *r);

/* Copies the caller's window size to the pty (the kernel signals SIGWINCH inside). */
void ptyrelay_winch(struct ptyrelay *r);

/*
 * Fills <pfds> (at least PTYRELAY_POLL_FDS entries) with what the relay
 * waits for now; returns how many. 0 when there is no pty.
 */
size_t ptyrelay_poll_fds(const struct ptyrelay *r, struct pollfd *pfds);

/*
 * Moves what <pfds> (<n>, as filled by ptyrelay_poll_fds and polled) says is
 * ready. Sets r->hangup (it stays set) when the caller's terminal hung up:
 * POLLHUP or EIO on its input, EOF there in raw mode (where only a hang-up
 * ends a read), or EIO writing to it; the relay goes on with the agent's side.
 */
void ptyrelay_on_poll(struct ptyrelay *r, const struct pollfd *pfds, size_t n);

/*
 * After the bridge exited: copies what the master still holds to the caller
 * (until EOF/EIO, at most <timeout_ms>, even when the caller's terminal takes
 * nothing), restores the caller's terminal and
 * closes every descriptor. Safe to call on a relay without a pty, and twice.
 */
void ptyrelay_close(struct ptyrelay *r, int timeout_ms);

#endif /* AN_TOOLS_AGENTSNET_PTYRELAY_H */
