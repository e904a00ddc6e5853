/*
 * bench/tunnel: the load client and the origin of the CONNECT benchmarks in
 * bench/run.sh (wrk cannot send CONNECT).
 *
 *   tunnel origin --listen HOST:PORT [--http] [--reset-pinged]
 *   tunnel throughput (--proxy HOST:PORT | --proxy-unix PATH | --direct)
 *          --target HOST:PORT [--authority NAME:PORT] [--streams N]
 *          [--seconds T] [--dir down|up]
 *   tunnel idle (--proxy HOST:PORT | --proxy-unix PATH | --direct)
 *          --target HOST:PORT [--authority NAME:PORT] --count N [--hold-seconds T]
 *   tunnel rate (--proxy HOST:PORT | --proxy-unix PATH | --direct)
 *          --target HOST:PORT [--authority NAME:PORT] [--concurrency C] [--seconds T]
 *
 * The origin speaks a one-byte protocol once a connection is up (directly or
 * through a tunnel): 'D' and it writes as fast as it can, 'U' and it reads
 * and discards, 'P' and it answers TUNNEL_PING_BYTES and waits for the next
 * command. Until then the connection is idle, what the idle benchmark holds
 * (--direct: through a TCP relay, which has no CONNECT). --http makes it a
 * minimal HTTP/1.1 keep-alive responder, the wrk origin without nginx. A
 * proxied client CONNECTs to --authority, by default --target; any 2xx status
 * line of HTTP/1.0 or 1.1 with any headers opens the tunnel (squid, tinyproxy).
 *
 * One epoll thread and fixed-size static tables, no allocation. throughput
 * counts the bytes moved between a warm-up mark and the deadline; rate keeps C
 * non-blocking cycles (connect, CONNECT, one ping, close) in flight and counts
 * those done in the same window, latencies in a log-linear histogram. Each
 * mode prints one line for run.sh. A cycle closes with RST, so the client has
 * no TIME_WAIT; a proxy then keeps one per cycle towards the origin, which
 * loopback reuses after 1 s (a cap near 28k cycles/s). --reset-pinged lifts it
 * (RST answers the proxy's FIN); it is off as real servers close in order.
 * Rejected: a thread per stream (the load is pinned to one core, where threads
 * only add switches) and io_uring (the load generator must not share the
 * proxy's code paths, nor their bugs).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"

/* Streams of one throughput run: far more than two cores can keep busy. */
#define TUNNEL_STREAMS_MAX 256u
/* Idle tunnels per process: the open-file limit here is 20,000 per process. */
#define TUNNEL_IDLE_MAX 19000u
/* Descriptors the origin tracks state for (indexed by fd). */
#define TUNNEL_FDS_MAX 65536u
/* One read or write: large enough to amortise the syscall at tens of Gbit/s. */
#define TUNNEL_BUF_BYTES (256u * 1024u)
/* The proxy's answer to CONNECT: a status line and a few headers. */
#define TUNNEL_HEAD_BYTES_MAX 4096u
/* Bytes moved before this mark are not counted (slow start, first faults). */
#define TUNNEL_WARMUP_NS 500000000ull
/* Blocking set-up steps (connect, CONNECT answer) give up after this. */
#define TUNNEL_IO_TIMEOUT_S 10
#define TUNNEL_EVENTS_MAX   256
/* Reads or writes per stream and event: a fast peer must not starve the rest. */
#define TUNNEL_PUMP_ROUNDS_MAX 16u
#define TUNNEL_SECONDS_MAX     600u
/* Cycles of one rate run in flight at once: 512 is past what one core drives. */
#define TUNNEL_RATE_CONCURRENCY_MAX 512u
/* The origin's answer to 'P': small, one segment, one read on the client. */
#define TUNNEL_PING_BYTES 64u
/* A rate run with more failed cycles than this share of all of them fails. */
#define TUNNEL_RATE_ERRORS_PCT_MAX 1u
/* Failed cycles described on stderr; the rest are only counted. */
#define TUNNEL_RATE_ERRORS_LOGGED_MAX 5u
/* How often a rate run looks for cycles stuck past TUNNEL_IO_TIMEOUT_S. */
#define TUNNEL_RATE_EXPIRE_NS 100000000ull
/*
 * Latency histogram: values below 2^SUB_BITS ns are exact, each power of two
 * above is split in 2^SUB_BITS buckets (under 3.2% error), and values are
 * clamped at 2^VALUE_BITS ns (68.7 s, past any cycle's timeout).
 */
#define TUNNEL_HIST_SUB_BITS   5u
#define TUNNEL_HIST_VALUE_BITS 36u
#define TUNNEL_HIST_BUCKETS \
	((TUNNEL_HIST_VALUE_BITS - TUNNEL_HIST_SUB_BITS + 1u) << TUNNEL_HIST_SUB_BITS)

static_assert(TUNNEL_IDLE_MAX < TUNNEL_FDS_MAX, "idle tunnels need descriptors");
static_assert(TUNNEL_HEAD_BYTES_MAX < TUNNEL_BUF_BYTES, "the head is read into the buffer");
static_assert((TUNNEL_RATE_CONCURRENCY_MAX & (TUNNEL_RATE_CONCURRENCY_MAX - 1u)) == 0,
	      "the rate queue is a power-of-two ring");
static_assert((uint64_t)TUNNEL_IO_TIMEOUT_S * 1000000000ull < (1ull << TUNNEL_HIST_VALUE_BITS),
	      "a cycle's timeout fits the histogram unclamped");
static_assert(TUNNEL_PING_BYTES < TUNNEL_HEAD_BYTES_MAX, "the ping answer is small");

enum tunnel_mode {
	MODE_NONE = 0,
	MODE_ORIGIN,
	MODE_THROUGHPUT,
	MODE_IDLE,
	MODE_RATE,
};

/* Per-descriptor origin state. */
enum origin_state {
	ORIGIN_FREE = 0,
	ORIGIN_WAIT_CMD, /* accepted, no command byte yet: idle */
	ORIGIN_PINGED,   /* answered a 'P', waiting for the next command */
	ORIGIN_SOURCE,   /* 'D': writing as fast as the peer reads */
	ORIGIN_DISCARD,  /* 'U': reading and dropping */
	ORIGIN_HTTP,     /* --http: answering request heads */
};

struct tunnel_opts {
	enum tunnel_mode mode;
	const char *proxy_unix;
	const char *authority;   /* CONNECT target "name:port" */
	const char *target_text; /* --target as given: the default authority */
	struct sockaddr_in proxy;
	struct sockaddr_in target;
	struct sockaddr_in listen;
	bool have_proxy;
	bool have_target;
	bool have_listen;
	bool direct;
	bool http;
	bool reset_pinged; /* origin: close pinged connections with RST */
	bool up;           /* throughput direction: client -> origin */
	uint32_t streams;
	uint32_t count;
	uint32_t seconds;
	uint32_t hold_seconds;
	uint32_t concurrency;
};

static char io_buf[TUNNEL_BUF_BYTES];
static uint8_t origin_states[TUNNEL_FDS_MAX];
static uint8_t origin_match[TUNNEL_FDS_MAX]; /* bytes of "\r\n\r\n" matched so far */
static bool origin_resets_pinged;            /* --reset-pinged, set once at start */
static int idle_fds[TUNNEL_IDLE_MAX];

static const char http_answer[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
				  "Content-Length: 13\r\n\r\nhello, bench\n";
static const char ping_answer[] =
    "agentsnet bench origin: the answer to one 'P' command, 64 bytes\n";

static_assert(sizeof(ping_answer) - 1 == TUNNEL_PING_BYTES, "'P' answers TUNNEL_PING_BYTES");

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	char *end = NULL;

	AN_ASSERT(s != NULL);
	AN_ASSERT(min <= max);
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* "a.b.c.d:port" (port 0 allowed for a listener) into <out>. */
static int parse_addr(const char *s, struct sockaddr_in *out)
{
	char host[INET_ADDRSTRLEN];
	uint32_t port = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(out != NULL);
	const char *colon = strrchr(s, ':');
	if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	if (parse_u32(colon + 1, 0, 65535, &port) != 0)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	out->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &out->sin_addr) != 1)
		return -EINVAL;
	return 0;
}

static int opts_set(struct tunnel_opts *o, int opt, const char *arg)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(opt != 0);
	switch (opt) {
	case 'p':
		o->have_proxy = true;
		return parse_addr(arg, &o->proxy);
	case 'x':
		o->proxy_unix = arg;
		return strlen(arg) < sizeof(((struct sockaddr_un *)0)->sun_path) ? 0 : -EINVAL;
	case 't':
		o->have_target = true;
		o->target_text = arg;
		return parse_addr(arg, &o->target);
	case 'l':
		o->have_listen = true;
		return parse_addr(arg, &o->listen);
	case 'a':
		o->authority = arg;
		return strlen(arg) < 300 ? 0 : -EINVAL;
	case 'd':
		o->direct = true;
		return 0;
	case 'h':
		o->http = true;
		return 0;
	case 'R':
		o->reset_pinged = true;
		return 0;
	case 'r':
		o->up = strcmp(arg, "up") == 0;
		return o->up || strcmp(arg, "down") == 0 ? 0 : -EINVAL;
	case 's':
		return parse_u32(arg, 1, TUNNEL_STREAMS_MAX, &o->streams);
	case 'n':
		return parse_u32(arg, 1, TUNNEL_IDLE_MAX, &o->count);
	case 'T':
		return parse_u32(arg, 1, TUNNEL_SECONDS_MAX, &o->seconds);
	case 'H':
		return parse_u32(arg, 1, 3600, &o->hold_seconds);
	case 'c':
		return parse_u32(arg, 1, TUNNEL_RATE_CONCURRENCY_MAX, &o->concurrency);
	default:
		return -EINVAL;
	}
}

/* Whether a client mode has exactly one way to its peer, and what to ask it. */
static bool opts_peer_valid(const struct tunnel_opts *o)
{
	bool via_proxy = o->have_proxy || o->proxy_unix != NULL;

	AN_ASSERT(o != NULL);
	AN_ASSERT(o->mode != MODE_ORIGIN);
	if (o->have_proxy && o->proxy_unix != NULL)
		return false;
	if (o->direct)
		return o->have_target && !via_proxy;
	return via_proxy && o->authority != NULL;
}

/* Whether the options make sense together for the chosen mode. */
static bool opts_valid(const struct tunnel_opts *o)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(o->streams >= 1);
	AN_ASSERT(o->concurrency >= 1);
	switch (o->mode) {
	case MODE_ORIGIN:
		return o->have_listen;
	case MODE_THROUGHPUT:
	case MODE_RATE:
		return opts_peer_valid(o);
	case MODE_IDLE:
		return opts_peer_valid(o) && o->count >= 1;
	case MODE_NONE:
		return false;
	}
	return false;
}

static int opts_parse(int argc, char **argv, struct tunnel_opts *o)
{
	static const struct option longs[] = {
		{ "proxy", required_argument, NULL, 'p' },
		{ "proxy-unix", required_argument, NULL, 'x' },
		{ "target", required_argument, NULL, 't' },
		{ "listen", required_argument, NULL, 'l' },
		{ "authority", required_argument, NULL, 'a' },
		{ "direct", no_argument, NULL, 'd' },
		{ "http", no_argument, NULL, 'h' },
		{ "reset-pinged", no_argument, NULL, 'R' },
		{ "dir", required_argument, NULL, 'r' },
		{ "streams", required_argument, NULL, 's' },
		{ "count", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 'T' },
		{ "hold-seconds", required_argument, NULL, 'H' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};

	AN_ASSERT(argc >= 1);
	AN_ASSERT(o != NULL);
	memset(o, 0, sizeof(*o));
	o->streams = 1;
	o->concurrency = 1;
	o->seconds = 5;
	o->hold_seconds = 600;
	if (argc < 2)
		return -EINVAL;
	if (strcmp(argv[1], "origin") == 0)
		o->mode = MODE_ORIGIN;
	else if (strcmp(argv[1], "throughput") == 0)
		o->mode = MODE_THROUGHPUT;
	else if (strcmp(argv[1], "idle") == 0)
		o->mode = MODE_IDLE;
	else if (strcmp(argv[1], "rate") == 0)
		o->mode = MODE_RATE;
	else
		return -EINVAL;
	optind = 2;
	for (;;) {
		int opt = getopt_long(argc, argv, "", longs, NULL);
		if (opt == -1)
			break;
		if (opts_set(o, opt, optarg) != 0)
			return -EINVAL;
	}
	if (o->authority == NULL)
		o->authority = o->target_text;
	if (optind != argc || !opts_valid(o))
		return -EINVAL;
	return 0;
}

static int send_all(int fd, const char *p, size_t len)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(p != NULL || len == 0);
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = TUNNEL_IO_TIMEOUT_S, .tv_usec = 0 };

	AN_ASSERT(fd >= 0);
	AN_ASSERT(tv.tv_sec > 0);
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Where a client connects: the proxy (TCP or Unix) or, --direct, the target. */
union peer_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_un un;
};

/* Fills <out> with the client's peer address; returns its length. */
static socklen_t peer_addr_get(const struct tunnel_opts *o, union peer_addr *out)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(o->mode != MODE_ORIGIN);
	memset(out, 0, sizeof(*out));
	if (o->proxy_unix != NULL) {
		out->un.sun_family = AF_UNIX;
		memcpy(out->un.sun_path, o->proxy_unix, strlen(o->proxy_unix));
		return sizeof(out->un);
	}
	out->in = o->direct ? o->target : o->proxy;
	AN_ASSERT(out->in.sin_family == AF_INET);
	return sizeof(out->in);
}

/* A blocking connection to the client's peer (see peer_addr_get()). */
static int dial(const struct tunnel_opts *o)
{
	union peer_addr addr;
	int one = 1;

	AN_ASSERT(o != NULL);
	socklen_t addr_len = peer_addr_get(o, &addr);
	int fd = socket(addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	set_timeouts(fd);
	if (connect(fd, &addr.sa, addr_len) == -1) {
		int err = -errno;
		close(fd);
		return err;
	}
	if (addr.sa.sa_family == AF_INET)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	AN_ASSERT(fd >= 0);
	return fd;
}

/* Writes "CONNECT <authority>" into <buf> (TUNNEL_HEAD_BYTES_MAX); returns its length. */
static size_t connect_request(const char *authority, char *buf)
{
	AN_ASSERT(authority != NULL);
	AN_ASSERT(buf != NULL);
	int len = snprintf(buf, TUNNEL_HEAD_BYTES_MAX, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n",
			   authority, authority);
	AN_ASSERT(len > 0 && (size_t)len < TUNNEL_HEAD_BYTES_MAX);
	return (size_t)len;
}

/* Offset just past the empty line that ends the head in <buf>/<len>, or 0. */
static size_t head_end(const char *buf, size_t len)
{
	AN_ASSERT(buf != NULL || len == 0);
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		/* Lenient about bare LF line ends: the tunnel is all that matters. */
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

/* Whether <head> (<len> bytes, a complete head) starts "HTTP/1.0 2xx" or "HTTP/1.1 2xx". */
static bool head_status_2xx(const char *head, size_t len)
{
	static const char version[] = "HTTP/1.";

	AN_ASSERT(head != NULL);
	AN_ASSERT(len <= TUNNEL_HEAD_BYTES_MAX);
	if (len < sizeof(version) - 1 + 6 || memcmp(head, version, sizeof(version) - 1) != 0)
		return false;
	const char *p = head + sizeof(version) - 1;
	if ((p[0] != '0' && p[0] != '1') || p[1] != ' ' || p[2] != '2')
		return false;
	if (p[3] < '0' || p[3] > '9' || p[4] < '0' || p[4] > '9')
		return false;
	/* The reason phrase is optional, and some proxies drop its space too. */
	return p[5] == ' ' || p[5] == '\r' || p[5] == '\n';
}

/*
 * The proxy's answer to CONNECT, <len> bytes so far in <buf>. Returns the
 * head's length once it is complete with a 2xx status, 0 while incomplete,
 * -EPROTO for another status, -EMSGSIZE when TUNNEL_HEAD_BYTES_MAX bytes hold
 * no complete head. Borrows <buf>.
 */
static int head_parse(const char *buf, size_t len)
{
	AN_ASSERT(buf != NULL);
	AN_ASSERT(len <= TUNNEL_HEAD_BYTES_MAX);
	size_t end = head_end(buf, len);
	if (end == 0)
		return len == TUNNEL_HEAD_BYTES_MAX ? -EMSGSIZE : 0;
	if (!head_status_2xx(buf, end))
		return -EPROTO;
	AN_ASSERT(end <= len);
	return (int)end;
}

/*
 * Sends CONNECT <authority> and reads the answer's head. The origin stays
 * silent until it gets a command byte, so nothing past the head can arrive
 * yet, and bytes that do are a protocol error. Returns 0 on any 2xx, -EPROTO
 * on another status, -EMSGSIZE on an oversized head, or -errno.
 */
static int connect_tunnel(int fd, const char *authority)
{
	char req[TUNNEL_HEAD_BYTES_MAX];
	size_t got = 0;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(authority != NULL);
	int err = send_all(fd, req, connect_request(authority, req));
	if (err != 0)
		return err;
	for (;;) {
		AN_ASSERT(got < TUNNEL_HEAD_BYTES_MAX);
		ssize_t n = recv(fd, io_buf + got, TUNNEL_HEAD_BYTES_MAX - got, 0);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		got += (size_t)n;
		int head_len = head_parse(io_buf, got);
		if (head_len < 0)
			return head_len;
		if (head_len > 0)
			return (size_t)head_len == got ? 0 : -EPROTO;
	}
}

/* A connection ready for the origin protocol: dialled, tunnelled if proxied. */
static int open_stream(const struct tunnel_opts *o)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(o->mode == MODE_THROUGHPUT || o->mode == MODE_IDLE);
	AN_ASSERT(o->direct || o->authority != NULL);
	int fd = dial(o);
	if (fd < 0)
		return fd;
	if (!o->direct) {
		int err = connect_tunnel(fd, o->authority);
		if (err != 0) {
			close(fd);
			return err;
		}
	}
	return fd;
}

static int set_nonblocking(int fd)
{
	AN_ASSERT(fd >= 0);
	int flags = fcntl(fd, F_GETFL);
	if (flags == -1)
		return -errno;
	if (fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1)
		return -errno;
	AN_ASSERT((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
	return 0;
}

/*
 * One non-blocking transfer on <fd>, EINTR retried: a recv into <buf>/<cap>,
 * or with <out> a send from it. Returns the byte count (> 0), 0 when it
 * would block, -ECONNRESET when the peer closed, or -errno.
 */
static ssize_t io_some(int fd, bool out, void *buf, size_t cap)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(cap > 0);
	for (;;) {
		ssize_t n = out ? send(fd, buf, cap, MSG_NOSIGNAL) : recv(fd, buf, cap, 0);
		if (n > 0)
			return n;
		if (n == 0)
			return -ECONNRESET;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/*
 * Moves bytes on <fd> until it would block or TUNNEL_PUMP_ROUNDS_MAX calls
 * are done (level-triggered epoll calls again); adds them to *<bytes>.
 * Returns 0 or -errno (-ECONNRESET when the peer closed).
 */
static int pump_stream(int fd, bool up, uint64_t *bytes)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(bytes != NULL);
	for (uint32_t round = 0; round < TUNNEL_PUMP_ROUNDS_MAX; round++) {
		ssize_t n = io_some(fd, up, io_buf, sizeof(io_buf));
		if (n <= 0)
			return (int)n;
		*bytes += (uint64_t)n;
	}
	return 0;
}

/* Opens <o->streams> streams, commands them, and registers them with <ep>. */
static int throughput_open(const struct tunnel_opts *o, int ep, int *fds)
{
	const char cmd = o->up ? 'U' : 'D';

	AN_ASSERT(o->streams <= TUNNEL_STREAMS_MAX);
	AN_ASSERT(ep >= 0);
	for (uint32_t i = 0; i < o->streams; i++) {
		int fd = open_stream(o);
		if (fd < 0) {
			fprintf(stderr, "tunnel: stream %u: %s\n", i, strerror(-fd));
			return fd;
		}
		fds[i] = fd;
		struct epoll_event ev = { .events = o->up ? EPOLLOUT : EPOLLIN, .data.fd = fd };
		int err = send_all(fd, &cmd, 1);
		if (err == 0)
			err = set_nonblocking(fd);
		if (err == 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == -1)
			err = -errno;
		if (err != 0)
			return err;
	}
	return 0;
}

/*
 * Runs the event loop until <end_ns>, counting the bytes moved after <mark_ns>
 * into *<bytes> and the time they took (mark to the last event) into *<ns>.
 */
static int throughput_loop(int ep, bool up, uint64_t mark_ns, uint64_t end_ns, uint64_t *bytes,
			   uint64_t *ns)
{
	struct epoll_event evs[TUNNEL_EVENTS_MAX];
	uint64_t before_mark = 0;

	AN_ASSERT(mark_ns < end_ns);
	AN_ASSERT(*bytes == 0);
	for (uint64_t now = now_ns(); now < end_ns; now = now_ns()) {
		int n = epoll_wait(ep, evs, TUNNEL_EVENTS_MAX, 100);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		uint64_t *sum = now < mark_ns ? &before_mark : bytes;
		for (int i = 0; i < n; i++) {
			int err = pump_stream(evs[i].data.fd, up, sum);
			if (err != 0) {
				fprintf(stderr, "tunnel: stream failed: %s\n", strerror(-err));
				return err;
			}
		}
	}
	*ns = now_ns() - mark_ns;
	AN_ASSERT(*ns >= end_ns - mark_ns);
	return 0;
}

static int run_throughput(const struct tunnel_opts *o)
{
	int fds[TUNNEL_STREAMS_MAX];
	uint64_t bytes = 0;
	uint64_t ns = 0;

	AN_ASSERT(o->mode == MODE_THROUGHPUT);
	AN_ASSERT(o->seconds >= 1);
	for (uint32_t i = 0; i < TUNNEL_STREAMS_MAX; i++)
		fds[i] = -1;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep == -1)
		return -errno;
	int err = throughput_open(o, ep, fds);
	uint64_t start = now_ns();
	uint64_t mark = start + TUNNEL_WARMUP_NS;
	uint64_t end = mark + (uint64_t)o->seconds * 1000000000ull;
	if (err == 0)
		err = throughput_loop(ep, o->up, mark, end, &bytes, &ns);
	for (uint32_t i = 0; i < o->streams; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
	}
	close(ep);
	if (err != 0)
		return err;
	double seconds = (double)ns / 1e9;
	printf("throughput: streams=%u dir=%s seconds=%.3f bytes=%llu gbit_s=%.3f\n", o->streams,
	       o->up ? "up" : "down", seconds, (unsigned long long)bytes,
	       (double)bytes * 8.0 / (seconds * 1e9));
	return 0;
}

/* Holds <o->count> idle tunnels until SIGTERM, SIGINT or SIGUSR1 (bounded). */
static int run_idle(const struct tunnel_opts *o)
{
	struct timespec hold = { .tv_sec = (time_t)o->hold_seconds, .tv_nsec = 0 };
	uint32_t opened = 0;
	sigset_t set;
	int err = 0;

	AN_ASSERT(o->mode == MODE_IDLE);
	AN_ASSERT(o->count <= TUNNEL_IDLE_MAX);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	for (; opened < o->count; opened++) {
		int fd = open_stream(o);
		if (fd < 0) {
			fprintf(stderr, "tunnel: idle tunnel %u: %s\n", opened, strerror(-fd));
			err = fd;
			goto out_close;
		}
		idle_fds[opened] = fd;
	}
	printf("idle: ready %u\n", opened);
	fflush(stdout);
	if (sigtimedwait(&set, NULL, &hold) == -1 && errno == EAGAIN)
		fprintf(stderr, "tunnel: idle: no signal in %u s, closing\n", o->hold_seconds);
out_close:
	for (uint32_t i = 0; i < opened; i++)
		close(idle_fds[i]);
	return err;
}

/* ---- rate: connection cycles per second ---------------------------------- */

enum cycle_state {
	CYCLE_FREE = 0,   /* queued for the next start */
	CYCLE_CONNECTING, /* non-blocking connect in progress */
	CYCLE_HEAD,       /* CONNECT sent, reading the proxy's answer */
	CYCLE_PING,       /* 'P' sent, reading the origin's answer */
};

/* One connection's cycle; the slot is reused by the next cycle. */
struct rate_cycle {
	int fd; /* -1 while CYCLE_FREE */
	enum cycle_state state;
	uint32_t in_bytes; /* of the head (CYCLE_HEAD) or ping answer (CYCLE_PING) */
	uint64_t start_ns;
	char head[TUNNEL_HEAD_BYTES_MAX];
};

/* Log-linear latency histogram (see TUNNEL_HIST_SUB_BITS), in ns. */
struct rate_hist {
	uint64_t counts[TUNNEL_HIST_BUCKETS];
	uint64_t total;
};

struct rate_run {
	const struct tunnel_opts *o;
	union peer_addr addr;
	socklen_t addr_len;
	int ep;
	size_t request_len;
	char request[TUNNEL_HEAD_BYTES_MAX];
	uint64_t mark_ns;
	uint64_t end_ns;
	uint64_t expire_ns;      /* next scan for stuck cycles */
	uint64_t cycles_counted; /* completed between mark and end */
	uint64_t cycles_done;    /* completed before end, warm-up included */
	uint64_t errors;         /* failed during the run, warm-up included */
	uint32_t queue_head;
	uint32_t queue_len;
	uint32_t queue[TUNNEL_RATE_CONCURRENCY_MAX]; /* slots to start, oldest first */
	struct rate_cycle cycles[TUNNEL_RATE_CONCURRENCY_MAX];
	struct rate_hist hist;
};

static struct rate_run rate_state;

static uint32_t hist_index(uint64_t ns)
{
	const uint64_t clamp = (1ull << TUNNEL_HIST_VALUE_BITS) - 1u;

	if (ns > clamp)
		ns = clamp;
	if (ns < (1u << TUNNEL_HIST_SUB_BITS))
		return (uint32_t)ns;
	uint32_t exp = 63u - (uint32_t)__builtin_clzll(ns);
	AN_ASSERT(exp >= TUNNEL_HIST_SUB_BITS && exp < TUNNEL_HIST_VALUE_BITS);
	uint64_t sub = (ns >> (exp - TUNNEL_HIST_SUB_BITS)) - (1u << TUNNEL_HIST_SUB_BITS);
	uint32_t index =
	    ((exp - TUNNEL_HIST_SUB_BITS + 1u) << TUNNEL_HIST_SUB_BITS) + (uint32_t)sub;
	AN_ASSERT(index < TUNNEL_HIST_BUCKETS);
	return index;
}

/* The smallest value bucket <index> holds: hist_index(hist_floor(i)) == i. */
static uint64_t hist_floor(uint32_t index)
{
	AN_ASSERT(index < TUNNEL_HIST_BUCKETS);
	if (index < (1u << TUNNEL_HIST_SUB_BITS))
		return index;
	uint32_t exp = (index >> TUNNEL_HIST_SUB_BITS) + TUNNEL_HIST_SUB_BITS - 1u;
	uint64_t mantissa =
	    (index & ((1u << TUNNEL_HIST_SUB_BITS) - 1u)) + (1u << TUNNEL_HIST_SUB_BITS);
	uint64_t floor_ns = mantissa << (exp - TUNNEL_HIST_SUB_BITS);
	AN_ASSERT(hist_index(floor_ns) == index);
	return floor_ns;
}

static void hist_add(struct rate_hist *h, uint64_t ns)
{
	uint32_t index = hist_index(ns);

	AN_ASSERT(index < TUNNEL_HIST_BUCKETS);
	h->counts[index]++;
	h->total++;
	AN_ASSERT(h->total > 0);
}

/* The value at <permille> of the recorded ones, in µs (bucket floor; 0 if none). */
static double hist_percentile_us(const struct rate_hist *h, uint32_t permille)
{
	uint64_t seen = 0;

	AN_ASSERT(permille >= 1 && permille <= 1000);
	if (h->total == 0)
		return 0.0;
	uint64_t rank = (h->total * permille + 999u) / 1000u;
	AN_ASSERT(rank >= 1 && rank <= h->total);
	for (uint32_t i = 0; i < TUNNEL_HIST_BUCKETS; i++) {
		seen += h->counts[i];
		if (seen >= rank)
			return (double)hist_floor(i) / 1e3;
	}
	AN_ASSERT(!"the histogram's counts add up to its total");
	return 0.0;
}

static void rate_queue_push(struct rate_run *r, uint32_t slot)
{
	AN_ASSERT(r->queue_len < TUNNEL_RATE_CONCURRENCY_MAX);
	AN_ASSERT(r->cycles[slot].state == CYCLE_FREE);
	r->queue[(r->queue_head + r->queue_len) & (TUNNEL_RATE_CONCURRENCY_MAX - 1u)] = slot;
	r->queue_len++;
}

static uint32_t rate_queue_pop(struct rate_run *r)
{
	AN_ASSERT(r->queue_len > 0);
	uint32_t slot = r->queue[r->queue_head];
	r->queue_head = (r->queue_head + 1u) & (TUNNEL_RATE_CONCURRENCY_MAX - 1u);
	r->queue_len--;
	AN_ASSERT(slot < r->o->concurrency);
	return slot;
}

/*
 * Ends <c>'s connection with an abortive close: SO_LINGER 0 makes close()
 * send RST, so this side keeps no TIME_WAIT. At thousands of cycles/s an
 * orderly close from the client would park an ephemeral port per cycle for
 * 60 s and run the loopback range dry within seconds. The exchange is complete
 * (or failed) by then, so the reset loses nothing the benchmark needs; a real
 * client would not do this.
 */
static void cycle_close(struct rate_cycle *c)
{
	struct linger abortive = { .l_onoff = 1, .l_linger = 0 };

	AN_ASSERT(c->state != CYCLE_FREE);
	if (c->fd >= 0) {
		(void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
		close(c->fd);
	}
	c->fd = -1;
	c->state = CYCLE_FREE;
	AN_ASSERT(c->fd == -1);
}

/* Opens slot <slot>'s connection, non-blocking, and registers it edge-triggered. */
static int cycle_start(struct rate_run *r, uint32_t slot)
{
	struct rate_cycle *c = &r->cycles[slot];
	int one = 1;

	AN_ASSERT(c->state == CYCLE_FREE);
	AN_ASSERT(c->fd == -1);
	c->start_ns = now_ns();
	c->in_bytes = 0;
	c->state = CYCLE_CONNECTING;
	c->fd = socket(r->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd == -1)
		return -errno;
	if (r->addr.sa.sa_family == AF_INET)
		(void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A Unix socket connects at once (or fails EAGAIN on a full backlog). */
	if (connect(c->fd, &r->addr.sa, r->addr_len) == -1 && errno != EINPROGRESS)
		return -errno;
	/* One registration for the whole cycle: each step waits for a new edge. */
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLOUT | EPOLLET,
		.data.u64 = ((uint64_t)slot << 32) | (uint32_t)c->fd,
	};
	if (epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd, &ev) == -1)
		return -errno;
	return 0;
}

/* Sends the one byte <byte> on a connection that has nothing queued yet. */
static int send_byte(int fd, char byte)
{
	AN_ASSERT(fd >= 0);
	ssize_t n = send(fd, &byte, 1, MSG_NOSIGNAL);
	if (n == -1)
		return -errno;
	AN_ASSERT(n == 1);
	return 0;
}

static int cycle_send_ping(struct rate_cycle *c)
{
	AN_ASSERT(c->state == CYCLE_CONNECTING || c->state == CYCLE_HEAD);
	c->state = CYCLE_PING;
	c->in_bytes = 0;
	return send_byte(c->fd, 'P');
}

/* The connect finished: sends CONNECT (proxied) or the ping (--direct). */
static int cycle_on_connected(struct rate_run *r, struct rate_cycle *c)
{
	int so_error = 0;
	socklen_t len = sizeof(so_error);

	AN_ASSERT(c->state == CYCLE_CONNECTING);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == -1)
		return -errno;
	if (so_error != 0)
		return -so_error;
	if (r->o->direct)
		return cycle_send_ping(c);
	AN_ASSERT(r->request_len > 0);
	/* A fresh socket's send buffer takes the whole request. */
	ssize_t n = send(c->fd, r->request, r->request_len, MSG_NOSIGNAL);
	if (n == -1)
		return -errno;
	if ((size_t)n != r->request_len)
		return -EMSGSIZE;
	c->state = CYCLE_HEAD;
	return 0;
}

/* Reads the proxy's answer; on a 2xx head sends the ping. */
static int cycle_on_head(struct rate_cycle *c)
{
	AN_ASSERT(c->state == CYCLE_HEAD);
	for (;;) {
		AN_ASSERT(c->in_bytes < TUNNEL_HEAD_BYTES_MAX);
		ssize_t n = io_some(c->fd, false, c->head + c->in_bytes,
				    TUNNEL_HEAD_BYTES_MAX - c->in_bytes);
		if (n <= 0)
			return (int)n;
		c->in_bytes += (uint32_t)n;
		int head_len = head_parse(c->head, c->in_bytes);
		if (head_len < 0)
			return head_len;
		if (head_len == 0)
			continue;
		/* The origin is silent until pinged: more bytes are not its. */
		if ((uint32_t)head_len != c->in_bytes)
			return -EPROTO;
		return cycle_send_ping(c);
	}
}

/* Reads the origin's ping answer; returns 1 once all of it is in. */
static int cycle_on_ping(struct rate_cycle *c)
{
	char buf[TUNNEL_PING_BYTES + 1];

	AN_ASSERT(c->state == CYCLE_PING);
	for (;;) {
		AN_ASSERT(c->in_bytes < TUNNEL_PING_BYTES);
		ssize_t n = io_some(c->fd, false, buf, sizeof(buf));
		if (n <= 0)
			return (int)n;
		c->in_bytes += (uint32_t)n;
		if (c->in_bytes > TUNNEL_PING_BYTES)
			return -EPROTO;
		if (c->in_bytes == TUNNEL_PING_BYTES)
			return 1;
	}
}

/* Advances <c> on <events>: 1 when the cycle is complete, 0 to wait, or -errno. */
static int cycle_on_event(struct rate_run *r, struct rate_cycle *c, uint32_t events)
{
	AN_ASSERT(c->fd >= 0);
	switch (c->state) {
	case CYCLE_CONNECTING:
		if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0)
			return 0;
		return cycle_on_connected(r, c);
	case CYCLE_HEAD:
		return cycle_on_head(c);
	case CYCLE_PING:
		return cycle_on_ping(c);
	case CYCLE_FREE:
	default:
		AN_ASSERT(!"an event for a free cycle slot");
		return -EINVAL;
	}
}

static const char *cycle_state_name(enum cycle_state state)
{
	switch (state) {
	case CYCLE_CONNECTING:
		return "connect";
	case CYCLE_HEAD:
		return "CONNECT answer";
	case CYCLE_PING:
		return "ping";
	case CYCLE_FREE:
	default:
		return "start";
	}
}

/* Counts slot <slot>'s failure <err>, closes it, and queues a new cycle. */
static void rate_cycle_failed(struct rate_run *r, uint32_t slot, int err)
{
	struct rate_cycle *c = &r->cycles[slot];

	AN_ASSERT(err < 0);
	AN_ASSERT(c->state != CYCLE_FREE);
	if (r->errors < TUNNEL_RATE_ERRORS_LOGGED_MAX)
		fprintf(stderr, "tunnel: rate: cycle failed at %s: %s\n",
			cycle_state_name(c->state), strerror(-err));
	r->errors++;
	cycle_close(c);
	rate_queue_push(r, slot);
}

/* Counts slot <slot>'s completed cycle (and its latency, after the mark), queues the next. */
static void rate_cycle_done(struct rate_run *r, uint32_t slot)
{
	struct rate_cycle *c = &r->cycles[slot];
	uint64_t now = now_ns();

	AN_ASSERT(c->state == CYCLE_PING);
	AN_ASSERT(now >= c->start_ns);
	if (now < r->end_ns) {
		r->cycles_done++;
		if (now >= r->mark_ns) {
			r->cycles_counted++;
			hist_add(&r->hist, now - c->start_ns);
		}
	}
	cycle_close(c);
	rate_queue_push(r, slot);
}

/* Starts every queued slot once; a start that fails at once waits for the next turn. */
static void rate_start_queued(struct rate_run *r)
{
	uint32_t starts = r->queue_len;

	AN_ASSERT(starts <= r->o->concurrency);
	for (uint32_t i = 0; i < starts; i++) {
		uint32_t slot = rate_queue_pop(r);
		int err = cycle_start(r, slot);
		if (err != 0)
			rate_cycle_failed(r, slot, err);
	}
	AN_ASSERT(r->queue_len <= starts);
}

/* Fails the cycles in flight for longer than TUNNEL_IO_TIMEOUT_S. */
static void rate_expire(struct rate_run *r)
{
	const uint64_t limit_ns = (uint64_t)TUNNEL_IO_TIMEOUT_S * 1000000000ull;
	/* Read now, not at the loop's top: cycles started since are younger. */
	uint64_t now = now_ns();

	AN_ASSERT(r->o->concurrency <= TUNNEL_RATE_CONCURRENCY_MAX);
	for (uint32_t slot = 0; slot < r->o->concurrency; slot++) {
		struct rate_cycle *c = &r->cycles[slot];
		if (c->state == CYCLE_FREE)
			continue;
		AN_ASSERT(now >= c->start_ns);
		if (now - c->start_ns > limit_ns)
			rate_cycle_failed(r, slot, -ETIMEDOUT);
	}
	r->expire_ns = now + TUNNEL_RATE_EXPIRE_NS;
}

static void rate_on_event(struct rate_run *r, const struct epoll_event *ev)
{
	uint32_t slot = (uint32_t)(ev->data.u64 >> 32);
	int fd = (int)(uint32_t)ev->data.u64;

	AN_ASSERT(slot < r->o->concurrency);
	struct rate_cycle *c = &r->cycles[slot];
	AN_ASSERT(c->state != CYCLE_FREE);
	AN_ASSERT(c->fd == fd);
	int res = cycle_on_event(r, c, ev->events);
	if (res < 0)
		rate_cycle_failed(r, slot, res);
	else if (res == 1)
		rate_cycle_done(r, slot);
}

/* Runs cycles until the deadline; every slot is either in flight or queued. */
static int rate_loop(struct rate_run *r)
{
	struct epoll_event evs[TUNNEL_EVENTS_MAX];

	AN_ASSERT(r->mark_ns < r->end_ns);
	AN_ASSERT(r->queue_len == r->o->concurrency);
	for (uint64_t now = now_ns(); now < r->end_ns; now = now_ns()) {
		rate_start_queued(r);
		/* Slots still queued failed at once: retry soon, not in a spin. */
		int timeout_ms = r->queue_len > 0 ? 1 : 100;
		int n = epoll_wait(r->ep, evs, TUNNEL_EVENTS_MAX, timeout_ms);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		/* Slots freed here are restarted only after the batch: no stale events. */
		for (int i = 0; i < n; i++)
			rate_on_event(r, &evs[i]);
		if (now >= r->expire_ns)
			rate_expire(r);
	}
	return 0;
}

/* Prints the rate line; fails the run on too many errors or no cycle at all. */
static int rate_report(const struct rate_run *r)
{
	uint64_t attempts = r->cycles_done + r->errors;

	AN_ASSERT(r->cycles_counted <= r->cycles_done);
	AN_ASSERT(r->hist.total == r->cycles_counted);
	printf("rate: concurrency=%u seconds=%u cycles=%llu per_s=%.1f p50_us=%.1f p99_us=%.1f "
	       "p999_us=%.1f errors=%llu\n",
	       r->o->concurrency, r->o->seconds, (unsigned long long)r->cycles_counted,
	       (double)r->cycles_counted / (double)r->o->seconds, hist_percentile_us(&r->hist, 500),
	       hist_percentile_us(&r->hist, 990), hist_percentile_us(&r->hist, 999),
	       (unsigned long long)r->errors);
	fflush(stdout);
	if (r->cycles_counted == 0) {
		fprintf(stderr, "tunnel: rate: no cycle completed in the measured window\n");
		return -EIO;
	}
	if (r->errors * 100u > attempts * TUNNEL_RATE_ERRORS_PCT_MAX) {
		fprintf(stderr, "tunnel: rate: %llu of %llu cycles failed (more than %u%%)\n",
			(unsigned long long)r->errors, (unsigned long long)attempts,
			TUNNEL_RATE_ERRORS_PCT_MAX);
		return -EIO;
	}
	return 0;
}

/* Keeps <o->concurrency> cycles in flight for the warm-up and <o->seconds>. */
static int run_rate(const struct tunnel_opts *o)
{
	struct rate_run *r = &rate_state;

	AN_ASSERT(o->mode == MODE_RATE);
	AN_ASSERT(o->concurrency >= 1 && o->concurrency <= TUNNEL_RATE_CONCURRENCY_MAX);
	memset(r, 0, sizeof(*r));
	r->o = o;
	r->addr_len = peer_addr_get(o, &r->addr);
	if (!o->direct)
		r->request_len = connect_request(o->authority, r->request);
	r->ep = epoll_create1(EPOLL_CLOEXEC);
	if (r->ep == -1)
		return -errno;
	for (uint32_t slot = 0; slot < o->concurrency; slot++) {
		r->cycles[slot].fd = -1;
		rate_queue_push(r, slot);
	}
	uint64_t start = now_ns();
	r->mark_ns = start + TUNNEL_WARMUP_NS;
	r->end_ns = r->mark_ns + (uint64_t)o->seconds * 1000000000ull;
	r->expire_ns = start + TUNNEL_RATE_EXPIRE_NS;
	int err = rate_loop(r);
	for (uint32_t slot = 0; slot < o->concurrency; slot++) {
		if (r->cycles[slot].state != CYCLE_FREE)
			cycle_close(&r->cycles[slot]);
	}
	close(r->ep);
	if (err != 0)
		return err;
	return rate_report(r);
}

static int origin_listen(struct sockaddr_in *addr)
{
	socklen_t len = sizeof(*addr);
	int one = 1;

	AN_ASSERT(addr != NULL);
	AN_ASSERT(addr->sin_family == AF_INET);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)addr, sizeof(*addr)) == -1 || listen(fd, 4096) == -1 ||
	    getsockname(fd, (struct sockaddr *)addr, &len) == -1) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

static void origin_close(int ep, int fd)
{
	AN_ASSERT(fd >= 0 && (uint32_t)fd < TUNNEL_FDS_MAX);
	AN_ASSERT(origin_states[fd] != ORIGIN_FREE);
	/* --reset-pinged: RST frees the proxy's FIN_WAIT socket, no TIME_WAIT. */
	if (origin_resets_pinged && origin_states[fd] == ORIGIN_PINGED) {
		struct linger abortive = { .l_onoff = 1, .l_linger = 0 };
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
	}
	(void)epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	origin_states[fd] = ORIGIN_FREE;
	origin_match[fd] = 0;
	close(fd);
}

static void origin_accept(int ep, int lfd, bool http)
{
	int one = 1;

	AN_ASSERT(ep >= 0);
	AN_ASSERT(lfd >= 0);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1)
			return; /* EAGAIN, or a transient error the next event retries */
		if ((uint32_t)fd >= TUNNEL_FDS_MAX) {
			close(fd);
			continue;
		}
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == -1) {
			close(fd);
			continue;
		}
		origin_states[fd] = http ? ORIGIN_HTTP : ORIGIN_WAIT_CMD;
	}
}

/* Heads completed in <buf>/<len>, carrying the "\r\n\r\n" match across reads. */
static uint32_t http_heads(uint8_t *match, const char *buf, size_t len)
{
	static const char end[] = "\r\n\r\n";
	uint32_t heads = 0;

	AN_ASSERT(*match < 4);
	AN_ASSERT(buf != NULL);
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == end[*match]) {
			*match = (uint8_t)(*match + 1);
		} else {
			*match = buf[i] == '\r' ? 1 : 0;
		}
		if (*match == 4) {
			heads++;
			*match = 0;
		}
	}
	return heads;
}

/* Answers every complete request head; the answers are tiny, so a full send
 * buffer means a peer that does not read: it is dropped. */
static int origin_http(int fd, const char *buf, size_t len)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(origin_states[fd] == ORIGIN_HTTP);
	uint32_t heads = http_heads(&origin_match[fd], buf, len);
	for (uint32_t i = 0; i < heads; i++) {
		ssize_t n = send(fd, http_answer, sizeof(http_answer) - 1, MSG_NOSIGNAL);
		if (n != (ssize_t)(sizeof(http_answer) - 1))
			return -EAGAIN;
	}
	return 0;
}

/*
 * Runs the command bytes in <buf>/<len>: each 'P' is answered in place (the
 * connection is then ORIGIN_PINGED), 'D' and 'U' switch the connection for
 * good (bytes after them are ignored).
 * Returns 0, -EPROTO on an unknown byte, -EAGAIN when a ping answer does not
 * fit the send buffer (a peer that sends pings without reading is dropped).
 */
static int origin_commands(int ep, int fd, const char *buf, size_t len)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(origin_states[fd] == ORIGIN_WAIT_CMD || origin_states[fd] == ORIGIN_PINGED);
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == 'U') {
			origin_states[fd] = ORIGIN_DISCARD;
			return 0;
		}
		if (buf[i] == 'D') {
			struct epoll_event ev = { .events = EPOLLOUT, .data.fd = fd };
			origin_states[fd] = ORIGIN_SOURCE;
			return epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) == -1 ? -errno : 0;
		}
		if (buf[i] != 'P')
			return -EPROTO;
		ssize_t n = send(fd, ping_answer, TUNNEL_PING_BYTES, MSG_NOSIGNAL);
		if (n != (ssize_t)TUNNEL_PING_BYTES)
			return -EAGAIN;
		origin_states[fd] = ORIGIN_PINGED;
	}
	AN_ASSERT(origin_states[fd] == ORIGIN_WAIT_CMD || origin_states[fd] == ORIGIN_PINGED);
	return 0;
}

/* Readable connection: command bytes, data to discard, or HTTP heads. */
static int origin_on_read(int ep, int fd)
{
	AN_ASSERT(fd >= 0 && (uint32_t)fd < TUNNEL_FDS_MAX);
	AN_ASSERT(origin_states[fd] != ORIGIN_FREE);
	for (;;) {
		ssize_t n = io_some(fd, false, io_buf, sizeof(io_buf));
		if (n <= 0)
			return (int)n;
		if (origin_states[fd] == ORIGIN_HTTP) {
			if (origin_http(fd, io_buf, (size_t)n) != 0)
				return -EAGAIN;
		} else if (origin_states[fd] == ORIGIN_WAIT_CMD ||
			   origin_states[fd] == ORIGIN_PINGED) {
			int err = origin_commands(ep, fd, io_buf, (size_t)n);
			if (err != 0)
				return err;
			/* A source is driven by EPOLLOUT from now on. */
			if (origin_states[fd] == ORIGIN_SOURCE)
				return 0;
		}
	}
}

static int origin_on_write(int fd)
{
	uint64_t ignored = 0;

	AN_ASSERT(fd >= 0 && (uint32_t)fd < TUNNEL_FDS_MAX);
	AN_ASSERT(origin_states[fd] == ORIGIN_SOURCE);
	return pump_stream(fd, true, &ignored);
}

/* A signalfd for SIGTERM and SIGINT, so the origin stops by its PID cleanly. */
static int stop_signal_fd(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	AN_ASSERT(sigismember(&set, SIGTERM) == 1);
	if (sigprocmask(SIG_BLOCK, &set, NULL) == -1)
		return -errno;
	int fd = signalfd(-1, &set, SFD_CLOEXEC);
	if (fd == -1)
		return -errno;
	AN_ASSERT(fd >= 0);
	return fd;
}

static int origin_loop(int ep, int lfd, int sfd, bool http)
{
	struct epoll_event evs[TUNNEL_EVENTS_MAX];

	AN_ASSERT(lfd >= 0);
	AN_ASSERT(sfd >= 0);
	for (;;) {
		int n = epoll_wait(ep, evs, TUNNEL_EVENTS_MAX, -1);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			int err = 0;
			if (fd == sfd)
				return 0;
			if (fd == lfd) {
				origin_accept(ep, lfd, http);
				continue;
			}
			if (origin_states[fd] == ORIGIN_SOURCE)
				err = origin_on_write(fd);
			else
				err = origin_on_read(ep, fd);
			if (err != 0)
				origin_close(ep, fd);
		}
	}
}

static int run_origin(struct tunnel_opts *o)
{
	struct epoll_event ev = { .events = EPOLLIN };
	char host[INET_ADDRSTRLEN];
	int err;

	AN_ASSERT(o->mode == MODE_ORIGIN);
	AN_ASSERT(o->have_listen);
	origin_resets_pinged = o->reset_pinged;
	int sfd = stop_signal_fd();
	if (sfd < 0)
		return sfd;
	int lfd = origin_listen(&o->listen);
	if (lfd < 0) {
		err = lfd;
		goto out_close_sfd;
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep == -1) {
		err = -errno;
		goto out_close_lfd;
	}
	ev.data.fd = lfd;
	err = epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) == -1 ? -errno : 0;
	ev.data.fd = sfd;
	if (err == 0 && epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) == -1)
		err = -errno;
	if (err != 0)
		goto out_close_ep;
	inet_ntop(AF_INET, &o->listen.sin_addr, host, sizeof(host));
	printf("origin: listening %s:%u\n", host, ntohs(o->listen.sin_port));
	fflush(stdout);
	err = origin_loop(ep, lfd, sfd, o->http);
	for (uint32_t fd = 0; fd < TUNNEL_FDS_MAX; fd++) {
		if (origin_states[fd] != ORIGIN_FREE)
			origin_close(ep, (int)fd);
	}
out_close_ep:
	close(ep);
out_close_lfd:
	close(lfd);
out_close_sfd:
	close(sfd);
	return err;
}

static void usage(void)
{
	fprintf(
	    stderr,
	    "usage:\n"
	    "  tunnel origin --listen HOST:PORT [--http] [--reset-pinged]\n"
	    "  tunnel throughput (--proxy HOST:PORT | --proxy-unix PATH | --direct)\n"
	    "         --target HOST:PORT [--authority NAME:PORT] [--streams N]\n"
	    "         [--seconds T] [--dir down|up]\n"
	    "  tunnel idle (--proxy HOST:PORT | --proxy-unix PATH | --direct)\n"
	    "         --target HOST:PORT [--authority NAME:PORT] --count N [--hold-seconds T]\n"
	    "  tunnel rate (--proxy HOST:PORT | --proxy-unix PATH | --direct)\n"
	    "         --target HOST:PORT [--authority NAME:PORT] [--concurrency C] [--seconds T]\n"
	    "\n"
	    "Proxied, the CONNECT authority defaults to --target. The origin's commands:\n"
	    "'D' sends, 'U' discards, 'P' answers %u bytes and waits for the next.\n",
	    TUNNEL_PING_BYTES);
}

int main(int argc, char **argv)
{
	struct tunnel_opts o;
	int err;

	if (opts_parse(argc, argv, &o) != 0) {
		usage();
		return 2;
	}
	AN_ASSERT(o.mode != MODE_NONE);
	signal(SIGPIPE, SIG_IGN);
	switch (o.mode) {
	case MODE_ORIGIN:
		err = run_origin(&o);
		break;
	case MODE_THROUGHPUT:
		err = run_throughput(&o);
		break;
	case MODE_IDLE:
		err = run_idle(&o);
		break;
	case MODE_RATE:
		err = run_rate(&o);
		break;
	case MODE_NONE:
	default:
		AN_ASSERT(!"opts_parse accepted no mode");
		err = -EINVAL;
		break;
	}
	if (err != 0)
		fprintf(stderr, "tunnel: %s\n", strerror(-err));
	return err == 0 ? 0 : 1;
}
