/*
 * bench/tunnel: the load client and the origin of the CONNECT benchmarks in
 * bench/run.sh (wrk cannot send CONNECT).
 *
 *   tunnel origin --listen HOST:PORT [--http]
 *   tunnel throughput (--proxy HOST:PORT | --proxy-unix PATH | --direct)
 *          --target HOST:PORT [--authority NAME:PORT] [--streams N]
 *          [--seconds T] [--dir down|up]
 *   tunnel idle (--proxy HOST:PORT | --proxy-unix PATH) --authority NAME:PORT
 *          --count N [--hold-seconds T]
 *
 * The origin speaks a one-byte protocol: once a connection is up (directly or
 * through a tunnel) the client sends 'D' and the origin writes as fast as it
 * can, or 'U' and the origin reads and discards. Until then the connection is
 * idle, which is what the idle-memory benchmark holds open. With --http the
 * origin is instead a minimal HTTP/1.1 keep-alive responder (one fixed 200
 * per request head), the wrk origin when nginx is not installed.
 *
 * One epoll thread and fixed-size static tables, no allocation. The client
 * counts the bytes moved between a warm-up mark and the deadline and prints
 * one line for run.sh to parse. Rejected: a thread per stream (the load is
 * pinned to one core, where threads only add switches) and io_uring (the load
 * generator must not share the proxy's code paths, nor their bugs).
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

static_assert(TUNNEL_IDLE_MAX < TUNNEL_FDS_MAX, "idle tunnels need descriptors");
static_assert(TUNNEL_HEAD_BYTES_MAX < TUNNEL_BUF_BYTES, "the head is read into the buffer");

enum tunnel_mode {
	MODE_NONE = 0,
	MODE_ORIGIN,
	MODE_THROUGHPUT,
	MODE_IDLE,
};

/* Per-descriptor origin state. */
enum origin_state {
	ORIGIN_FREE = 0,
	ORIGIN_WAIT_CMD, /* accepted, no command byte yet: idle */
	ORIGIN_SOURCE,   /* 'D': writing as fast as the peer reads */
	ORIGIN_DISCARD,  /* 'U': reading and dropping */
	ORIGIN_HTTP,     /* --http: answering request heads */
};

struct tunnel_opts {
	enum tunnel_mode mode;
	const char *proxy_unix;
	const char *authority; /* CONNECT target "name:port" */
	struct sockaddr_in proxy;
	struct sockaddr_in target;
	struct sockaddr_in listen;
	bool have_proxy;
	bool have_target;
	bool have_listen;
	bool direct;
	bool http;
	bool up; /* throughput direction: client -> origin */
	uint32_t streams;
	uint32_t count;
	uint32_t seconds;
	uint32_t hold_seconds;
};

static char io_buf[TUNNEL_BUF_BYTES];
static uint8_t origin_states[TUNNEL_FDS_MAX];
static uint8_t origin_match[TUNNEL_FDS_MAX]; /* bytes of "\r\n\r\n" matched so far */
static int idle_fds[TUNNEL_IDLE_MAX];

static const char http_answer[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
				  "Content-Length: 13\r\n\r\nhello, bench\n";

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
	default:
		return -EINVAL;
	}
}

/* Whether the options make sense together for the chosen mode. */
static bool opts_valid(const struct tunnel_opts *o)
{
	bool via_proxy = o->have_proxy || o->proxy_unix != NULL;

	AN_ASSERT(o != NULL);
	AN_ASSERT(o->streams >= 1);
	if (o->have_proxy && o->proxy_unix != NULL)
		return false;
	switch (o->mode) {
	case MODE_ORIGIN:
		return o->have_listen;
	case MODE_THROUGHPUT:
		if (o->direct)
			return o->have_target && !via_proxy;
		return via_proxy && o->authority != NULL;
	case MODE_IDLE:
		return via_proxy && o->authority != NULL && o->count >= 1;
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
		{ "dir", required_argument, NULL, 'r' },
		{ "streams", required_argument, NULL, 's' },
		{ "count", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 'T' },
		{ "hold-seconds", required_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};

	AN_ASSERT(argc >= 1);
	AN_ASSERT(o != NULL);
	memset(o, 0, sizeof(*o));
	o->streams = 1;
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

/* A blocking connection to the proxy (TCP or Unix) or, --direct, the target. */
static int dial(const struct tunnel_opts *o)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	const struct sockaddr *sa = (const struct sockaddr *)&o->proxy;
	socklen_t sa_len = sizeof(o->proxy);
	int one = 1;

	AN_ASSERT(o != NULL);
	AN_ASSERT(o->mode != MODE_ORIGIN);
	if (o->proxy_unix != NULL) {
		memcpy(sun.sun_path, o->proxy_unix, strlen(o->proxy_unix));
		sa = (const struct sockaddr *)&sun;
		sa_len = sizeof(sun);
	} else if (o->direct) {
		sa = (const struct sockaddr *)&o->target;
	}
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	set_timeouts(fd);
	if (connect(fd, sa, sa_len) == -1) {
		int err = -errno;
		close(fd);
		return err;
	}
	if (sa->sa_family == AF_INET)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/*
 * Sends CONNECT <authority> and reads the answer's head. The origin stays
 * silent until it gets a command byte, so nothing past the head can arrive
 * yet. Returns 0 on "200", -EPROTO on another status, or -errno.
 */
static int connect_tunnel(int fd, const char *authority)
{
	char req[TUNNEL_HEAD_BYTES_MAX];
	size_t got = 0;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(authority != NULL);
	int len = snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority,
			   authority);
	AN_ASSERT(len > 0 && (size_t)len < sizeof(req));
	int err = send_all(fd, req, (size_t)len);
	if (err != 0)
		return err;
	while (got < TUNNEL_HEAD_BYTES_MAX - 1) {
		ssize_t n = recv(fd, io_buf + got, TUNNEL_HEAD_BYTES_MAX - 1 - got, 0);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		got += (size_t)n;
		io_buf[got] = '\0';
		if (strstr(io_buf, "\r\n\r\n") != NULL)
			break;
	}
	if (strncmp(io_buf, "HTTP/1.1 200", 12) != 0 && strncmp(io_buf, "HTTP/1.0 200", 12) != 0)
		return -EPROTO;
	return 0;
}

/* A connection ready for the origin protocol: dialled, tunnelled if proxied. */
static int open_stream(const struct tunnel_opts *o)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(o->mode == MODE_THROUGHPUT || o->mode == MODE_IDLE);
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
 * Moves bytes on <fd> until it would block or TUNNEL_PUMP_ROUNDS_MAX calls
 * are done (level-triggered epoll calls again); adds them to *<bytes>.
 * Returns 0 or -errno (-ECONNRESET when the peer closed).
 */
static int pump_stream(int fd, bool up, uint64_t *bytes)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(bytes != NULL);
	for (uint32_t round = 0; round < TUNNEL_PUMP_ROUNDS_MAX; round++) {
		ssize_t n = up ? send(fd, io_buf, sizeof(io_buf), MSG_NOSIGNAL)
			       : recv(fd, io_buf, sizeof(io_buf), 0);
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
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

/* Readable connection: the command byte, data to discard, or HTTP heads. */
static int origin_on_read(int ep, int fd)
{
	AN_ASSERT(fd >= 0 && (uint32_t)fd < TUNNEL_FDS_MAX);
	AN_ASSERT(origin_states[fd] != ORIGIN_FREE);
	for (;;) {
		ssize_t n = recv(fd, io_buf, sizeof(io_buf), 0);
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return -ECONNRESET;
		if (origin_states[fd] == ORIGIN_HTTP) {
			if (origin_http(fd, io_buf, (size_t)n) != 0)
				return -EAGAIN;
		} else if (origin_states[fd] == ORIGIN_WAIT_CMD) {
			if (io_buf[0] == 'U') {
				origin_states[fd] = ORIGIN_DISCARD;
			} else if (io_buf[0] == 'D') {
				struct epoll_event ev = { .events = EPOLLOUT, .data.fd = fd };
				origin_states[fd] = ORIGIN_SOURCE;
				return epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) == -1 ? -errno : 0;
			} else {
				return -EPROTO;
			}
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
	fprintf(stderr,
		"usage:\n"
		"  tunnel origin --listen HOST:PORT [--http]\n"
		"  tunnel throughput (--proxy HOST:PORT | --proxy-unix PATH | --direct)\n"
		"         --target HOST:PORT [--authority NAME:PORT] [--streams N]\n"
		"         [--seconds T] [--dir down|up]\n"
		"  tunnel idle (--proxy HOST:PORT | --proxy-unix PATH) --authority NAME:PORT\n"
		"         --count N [--hold-seconds T]\n");
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
