/*
 * What agentsnet-bridge's parts share, and nothing else includes: tools/bridge/main.c
 * (options, environment, listeners, loop, PID 1 duties), tools/bridge/relay.c (the
 * relay: connections and their halves) and tools/bridge/filter.c (the seccomp filters
 * of the agent and of the bridge itself). One file per job.
 */
#ifndef AN_TOOLS_BRIDGE_INT_H
#define AN_TOOLS_BRIDGE_INT_H

#include <netinet/in.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/*
 * The bridge's limits. They are the bridge's own (it links no other project module), so they
 * live here rather than in core/limits.h.
 */
/* Relayed connections at once: far above what one agent opens, and each costs 6 descriptors. */
#define BRIDGE_CONNS_MAX    1024u
#define BRIDGE_FDS_PER_CONN 6u
/* Descriptors kept for stdio, epoll, signalfd, listeners and the spare; the rest are relays. */
#define BRIDGE_FDS_RESERVED 32u
/* epoll events and accepts handled per loop turn, so no source starves the others. */
#define BRIDGE_EVENTS_PER_TURN  64
#define BRIDGE_ACCEPTS_PER_TURN 64u
/* Bytes one direction moves before it yields to the others: 16 default-sized pipes. */
#define BRIDGE_PUMP_BYTES_MAX (1u << 20)
/* Bytes asked of one splice into a pipe; the pipe's size is the real bound. */
#define BRIDGE_SPLICE_BYTES (1u << 20)

enum conn_kind {
	CONN_EGRESS,  /* fd[0] TCP from the agent, fd[1] the egress Unix socket */
	CONN_INGRESS, /* fd[0] Unix from the daemon, fd[1] TCP to the agent's port */
};

/* One direction of a relay: fd[side] -> pipe -> fd[1 - side]. */
struct bridge_half {
	int pipe_rd;
	int pipe_wr;
	uint32_t in_pipe; /* bytes spliced into the pipe and not yet out */
	bool eof;         /* the source reached end of stream */
	bool shut;        /* the destination was shut down for writing */
	bool src_unix;    /* the source is the daemon's socket (else the agent's TCP) */
	bool discard;     /* the daemon stopped reading: what the agent sends is dropped */
};

struct bridge_conn {
	int fd[2];
	struct bridge_half half[2];
	uint32_t gen; /* tells a stale event from one for the slot's current connection */
	enum conn_kind kind;
	bool connecting; /* fd[1] has a connect in progress */
	bool in_use;
	bool queued; /* on the ready queue; survives the slot's reuse (see ready_run) */
};

struct bridge {
	int ep;
	int sig_fd;     /* -1 when the caller handles signals (tests) */
	int tcp_fd;     /* the proxy listener */
	int ingress_fd; /* -1: no ingress */
	int spare_fd;   /* given up to accept-and-close when out of descriptors */
	int tty_fd;     /* the first standard descriptor that is a terminal, else -1 */
	const char *egress_path;
	const char *ingress_path;
	dev_t ingress_dev; /* the socket file we bound, removed on exit only if still ours */
	ino_t ingress_ino;
	struct sockaddr_in ingress_target;
	char ingress_name[24]; /* 127.0.0.1:<port>, for notices */
	pid_t agent_pid;
	int agent_status;
	bool agent_done;
	bool egress_failing; /* state-change logging: one line when it fails, one when back */
	bool ingress_failing;
	bool limit_logged;
	uint32_t conns_max;
	uint32_t conns_in_use;
	uint32_t gen_next;
	uint32_t free_count;
	uint32_t ready_count;
	struct rlimit nofile_orig;
	uint32_t free_stack[BRIDGE_CONNS_MAX];
	uint32_t ready[BRIDGE_CONNS_MAX];
	struct bridge_conn conns[BRIDGE_CONNS_MAX];
};

enum ev_tag {
	TAG_SIGNAL = 1,
	TAG_TCP_LISTEN,
	TAG_INGRESS_LISTEN,
	TAG_CONN,
};

enum pump {
	PUMP_WAIT,  /* waits for an edge on a socket */
	PUMP_YIELD, /* used its budget; on the ready queue */
	PUMP_DONE,  /* source at EOF and destination shut down */
	PUMP_ERROR,
};

enum filter_kind {
	FILTER_AGENT,  /* loaded by the agent before exec; inherited by everything it runs */
	FILTER_BRIDGE, /* loaded by the bridge once the agent is forked */
};

/* ---- tools/bridge/main.c ---- */

/* The epoll word of <tag>, slot <idx>, <side> and generation <gen>. */
uint64_t ev_pack(enum ev_tag tag, uint32_t idx, uint32_t side, uint32_t gen);
/* One line on stderr, prefixed; stderr is unbuffered, so it is written at once. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- tools/bridge/relay.c ---- */

/* Closes *<fd> if open and sets it to -1. */
void fd_close(int *fd);
/* Fills <sun> with <path> (opts_check bounded its length); the address's length. */
socklen_t unix_addr(struct sockaddr_un *sun, const char *path);
/* Closes every descriptor of <c> (with a reset on the TCP side if <reset>) and frees it. */
void conn_close(struct bridge *b, struct bridge_conn *c, bool reset);
/* An epoll event of a connection (<data> from ev_pack): connects, pumps, or closes it. */
void on_conn_event(struct bridge *b, uint64_t data, uint32_t events);
/* Pumps the connections that yielded, each popped first; one that yields again goes last. */
void ready_run(struct bridge *b);
/* Accepts what the listener <lfd> holds (BRIDGE_ACCEPTS_PER_TURN at most), relaying each. */
void on_accept(struct bridge *b, int lfd, enum conn_kind kind);

/* ---- tools/bridge/filter.c ---- */

/* Builds the filter of <kind> into <out> (native architecture only; any other kills):
 * 0 or a negative errno from libseccomp. */
int filter_build(scmp_filter_ctx *out, enum filter_kind kind);
/* Loads <ctx>: without no_new_privs where the kernel allows it, else with; 0 or -errno. */
int filter_load(scmp_filter_ctx ctx);

#endif
