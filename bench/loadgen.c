/*
 * bench/loadgen.c: the load client and the origin of the CONNECT benchmarks in
 * bench/run.sh (wrk cannot send CONNECT).
 *
 *   loadgen origin --listen HOST:PORT [--http] [--reset-pinged]
 *   loadgen throughput (--proxy HOST:PORT | --proxy-unix PATH | --direct)
 *           --target HOST:PORT [--authority NAME:PORT] [--streams N]
 *           [--seconds T] [--dir down|up]
 *   loadgen idle (--proxy HOST:PORT | --proxy-unix PATH | --direct)
 *           --target HOST:PORT [--authority NAME:PORT] --count N [--hold-seconds T]
 *   loadgen rate (--proxy HOST:PORT | --proxy-unix PATH | --direct)
 *           --target HOST:PORT [--authority NAME:PORT] [--concurrency C] [--seconds T]
 *   loadgen tls (--proxy HOST:PORT | --proxy-unix PATH | --direct --target HOST:PORT)
 *           [--authority NAME:PORT] --ca FILE [--sni NAME] [--path PATH]
 *           [--header "NAME: VALUE"] [--requests K | --handshakes]
 *           [--concurrency C] [--threads T] [--seconds T]
 *   loadgen quiet --sock-dir DIR [--prefix P] --count N [--rate R] [--seconds T]
 *           [--host NAME] [--flood-pid PID] [--phase-seconds S] [--settle-seconds S]
 *           [--warmup-seconds S]
 *
 * The origin speaks a one-byte protocol once a connection is up (directly or
 * through a tunnel): 'D' and it writes as fast as it can, 'U' and it reads
 * and discards, 'P' and it answers LOADGEN_PING_BYTES and waits for the next
 * command. Through a proxy, the first command follows a TLS ClientHello
 * record naming the CONNECT authority's host (what a real tunnel carries
 * first, and what agentsnetd's passthrough tier reads to check the server
 * name); the origin skips one such record at a connection's start. Until then the connection is idle, what the idle benchmark holds
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
 *
 * tls measures TLS interception and the fake-response tier: C connections
 * (split over --threads epoll threads, each with its own slots) each
 * CONNECT (unless --direct), do a full TLS handshake with OpenSSL that
 * verifies the leaf against --ca and the server name (SNI and host check:
 * a client that does not verify would flatter the server), then send K
 * keep-alive "GET PATH" requests one after the other (requests/s and their
 * latency), or with --handshakes one request and an abortive close
 * (handshakes/s, latency of the whole cycle). Sessions are never resumed.
 * --header adds one header line to every request, as an agent sends its
 * (placeholder) credential to the credential-inject tier.
 * It also counts the handshakes whose leaf carries a serial seen before in
 * the run: a proxy that mints afresh gives a new random serial, so that is
 * the client's view of the proxy's leaf cache. It prints one JSON line.
 * OpenSSL allocates its own session state; the rest is static.
 *
 * quiet is the client of bench.py's fairness scenario: N sandboxes, few
 * requests each. One keep-alive connection to each sandbox's egress socket
 * (DIR/sandboxes/PNNN/egress.sock), which asks "GET http://NAME/" R times a
 * second, the sandboxes' schedules spread evenly over a period (none fires
 * with another). Deadlines are absolute (a timerfd on CLOCK_MONOTONIC), so a
 * late send never shifts the ones after it. A latency counts from the send,
 * unless the request had to wait for the answer before it (that came after
 * it was due): then from when it was due, so a stall of the daemon counts
 * in full and is never hidden by a send it delayed (coordinated omission),
 * while this loop's own lateness (a timer's wake-up on a VM: about 100 us at
 * p99, even at real-time priority) is not counted against the daemon. That
 * is what the Python client this replaced counted; the lateness of the
 * sends is reported beside the latencies ("send_lag_p99_us"). With
 * --flood-pid the flood (wrk) is let run and stopped in turn (SIGCONT,
 * SIGSTOP), a phase each, starting running; a request counts in the figures
 * of the phase it was due in, unless due in that phase's first
 * --settle-seconds (the flood's requests in flight when it stopped are still
 * being answered then). --warmup-seconds first runs the schedule that long,
 * the flood running, and counts none of it: the first half second of a run
 * is slow with no flood at all (fresh connections on both sides: p99 1.3 to
 * 3 ms against 0.15 ms after, measured with a sleeping process as the
 * "flood"), and would always land in the first "on" phase. It prints one
 * JSON line: the figures over every counted request, over each kind of
 * phase ("on", "off") and each phase's own p99, and how many the warm-up had.
 * Rejected: a Python client (its own pauses, garbage collection and
 * millisecond timeouts, moved the p99 it measured from 0.1 to 2 ms).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/an.h"

/* Streams of one throughput run: far more than two cores can keep busy. */
#define LOADGEN_STREAMS_MAX 256u
/* Idle tunnels per process: the open-file limit here is 20,000 per process. */
#define LOADGEN_IDLE_MAX 19000u
/* Descriptors the origin tracks state for (indexed by fd). */
#define LOADGEN_FDS_MAX 65536u
/* One read or write: large enough to amortise the syscall at tens of Gbit/s. */
#define LOADGEN_BUF_BYTES (256u * 1024u)
/* The proxy's answer to CONNECT: a status line and a few headers. */
#define LOADGEN_HEAD_BYTES_MAX 4096u
/* Bytes moved before this mark are not counted (slow start, first faults). */
#define LOADGEN_WARMUP_NS 500000000ull
/* Blocking set-up steps (connect, CONNECT answer) give up after this. */
#define LOADGEN_IO_TIMEOUT_S 10
#define LOADGEN_EVENTS_MAX   256
/* Reads or writes per stream and event: a fast peer must not starve the rest. */
#define LOADGEN_PUMP_ROUNDS_MAX 16u
#define LOADGEN_SECONDS_MAX     600u
/* Cycles of one rate run in flight at once: 512 is past what one core drives. */
#define LOADGEN_RATE_CONCURRENCY_MAX 512u
/* The origin's answer to 'P': small, one segment, one read on the client. */
#define LOADGEN_PING_BYTES 64u
/* A rate run with more failed cycles than this share of all of them fails. */
#define LOADGEN_RATE_ERRORS_PCT_MAX 1u
/* Failed cycles described on stderr; the rest are only counted. */
#define LOADGEN_RATE_ERRORS_LOGGED_MAX 5u
/* How often a rate run looks for cycles stuck past LOADGEN_IO_TIMEOUT_S. */
#define LOADGEN_RATE_EXPIRE_NS 100000000ull
/*
 * Latency histogram: values below 2^SUB_BITS ns are exact, each power of two
 * above is split in 2^SUB_BITS buckets (under 3.2% error), and values are
 * clamped at 2^VALUE_BITS ns (68.7 s, past any cycle's timeout).
 */
#define LOADGEN_HIST_SUB_BITS   5u
#define LOADGEN_HIST_VALUE_BITS 36u
#define LOADGEN_HIST_BUCKETS \
	((LOADGEN_HIST_VALUE_BITS - LOADGEN_HIST_SUB_BITS + 1u) << LOADGEN_HIST_SUB_BITS)
/* Load threads of one tls run: the load has a core or two. */
#define LOADGEN_TLS_THREADS_MAX 8u
/* Keep-alive requests on one connection before a new one replaces it. */
#define LOADGEN_TLS_REQUESTS_MAX     100000000u
#define LOADGEN_TLS_REQUESTS_DEFAULT 10000u
/* Distinct leaf serials a thread remembers: a run talks to one host. */
#define LOADGEN_TLS_LEAVES_MAX 64u
/* RFC 5280 caps a serial at 20 octets; longer ones are never remembered. */
#define LOADGEN_TLS_SERIAL_BYTES_MAX 20u
/* The server name (SNI, verified) and the request head of a run. */
#define LOADGEN_TLS_NAME_BYTES_MAX    254u
#define LOADGEN_TLS_PATH_BYTES_MAX    512u
#define LOADGEN_TLS_HEADER_BYTES_MAX  512u
#define LOADGEN_TLS_REQUEST_BYTES_MAX 2048u
/* Response bodies are read into this and dropped. */
#define LOADGEN_TLS_SCRATCH_BYTES (16u * 1024u)
/* Quiet sandboxes of one quiet run: the fairness scenario has 100. */
#define LOADGEN_QUIET_MAX 1024u
/* A quiet sandbox's requests/s: past this it is no longer quiet. */
#define LOADGEN_QUIET_RATE_MAX 1000u
/* Phases of one quiet run, each with a histogram of its own (8 KiB). */
#define LOADGEN_QUIET_PHASES_MAX 512u
/* --phase-seconds, --settle-seconds and --warmup-seconds, read to the millisecond. */
#define LOADGEN_QUIET_PHASE_MS_MAX 60000u

static_assert(LOADGEN_IDLE_MAX < LOADGEN_FDS_MAX, "idle tunnels need descriptors");
static_assert(LOADGEN_HEAD_BYTES_MAX < LOADGEN_BUF_BYTES, "the head is read into the buffer");
static_assert((LOADGEN_RATE_CONCURRENCY_MAX & (LOADGEN_RATE_CONCURRENCY_MAX - 1u)) == 0,
	      "the rate queue is a power-of-two ring");
static_assert((uint64_t)LOADGEN_IO_TIMEOUT_S * 1000000000ull < (1ull << LOADGEN_HIST_VALUE_BITS),
	      "a cycle's timeout fits the histogram unclamped");
static_assert(LOADGEN_PING_BYTES < LOADGEN_HEAD_BYTES_MAX, "the ping answer is small");
static_assert(LOADGEN_TLS_THREADS_MAX <= LOADGEN_RATE_CONCURRENCY_MAX, "a thread has a slot");
static_assert(LOADGEN_QUIET_MAX <= LOADGEN_IDLE_MAX, "--count is read against LOADGEN_IDLE_MAX");
static_assert(LOADGEN_TLS_NAME_BYTES_MAX + LOADGEN_TLS_NAME_BYTES_MAX + 64u <
		  LOADGEN_HEAD_BYTES_MAX,
	      "a quiet request names the host twice");
static_assert(LOADGEN_TLS_NAME_BYTES_MAX + LOADGEN_TLS_PATH_BYTES_MAX +
		      LOADGEN_TLS_HEADER_BYTES_MAX + 64u <
		  LOADGEN_TLS_REQUEST_BYTES_MAX,
	      "a request head holds the path, the Host header and the --header line");

enum loadgen_mode {
	MODE_NONE = 0,
	MODE_ORIGIN,
	MODE_THROUGHPUT,
	MODE_IDLE,
	MODE_RATE,
	MODE_TLS,
	MODE_QUIET,
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

struct loadgen_opts {
	enum loadgen_mode mode;
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
	const char *ca_file;  /* tls: the CA the server's leaf must chain to */
	const char *sni;      /* tls: the name sent and verified; default: the authority's */
	const char *path;     /* tls: the path asked for */
	const char *header;   /* tls: one more header line, "NAME: VALUE", or NULL */
	bool handshakes;      /* tls: one request per connection */
	uint32_t requests;    /* tls: keep-alive requests per connection */
	uint32_t threads;     /* tls: epoll threads sharing the connections */
	const char *sock_dir; /* quiet: DIR of DIR/sandboxes/<prefix>NNN/egress.sock */
	const char *prefix;   /* quiet: the sandboxes' id before their number */
	const char *host;     /* quiet: the host asked for */
	uint32_t rate;        /* quiet: requests/s of each sandbox */
	uint32_t flood_pid;   /* quiet: let run and stopped in turn; 0: none */
	uint32_t phase_ms;    /* quiet: how long the flood runs, then is stopped */
	uint32_t settle_ms;   /* quiet: the first part of a phase, not counted */
	uint32_t warmup_ms;   /* quiet: run before the first phase, not counted */
};

static char io_buf[LOADGEN_BUF_BYTES];
static uint8_t origin_states[LOADGEN_FDS_MAX];
static uint8_t origin_match[LOADGEN_FDS_MAX]; /* bytes of "\r\n\r\n" matched so far */
/* A leading TLS record being skipped: its header bytes seen (0..5; 6: skipped or
 * none), then its payload bytes left. */
static uint8_t origin_hello_head[LOADGEN_FDS_MAX];
static uint16_t origin_hello_left[LOADGEN_FDS_MAX];
/* Through a proxy: the ClientHello record sent before the first command. */
static char first_flight[512];
static size_t first_flight_len;
static void first_flight_build(const char *authority);
static bool origin_resets_pinged; /* --reset-pinged, set once at start */
static int idle_fds[LOADGEN_IDLE_MAX];

static const char http_answer[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
				  "Content-Length: 13\r\n\r\nhello, bench\n";
static const char ping_answer[] =
    "agentsnet bench origin: the answer to one 'P' command, 64 bytes\n";

static_assert(sizeof(ping_answer) - 1 == LOADGEN_PING_BYTES, "'P' answers LOADGEN_PING_BYTES");

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

/* Seconds with an optional fraction ("0.2") into whole milliseconds, <max_ms> at most. */
static int parse_ms(const char *s, uint32_t max_ms, uint32_t *out)
{
	char *end = NULL;

	AN_ASSERT(s != NULL);
	AN_ASSERT(max_ms > 0);
	errno = 0;
	double seconds = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(seconds >= 0.0) ||
	    seconds * 1000.0 > (double)max_ms)
		return -EINVAL;
	*out = (uint32_t)(seconds * 1000.0 + 0.5);
	AN_ASSERT(*out <= max_ms);
	return 0;
}

/* Whether <s> is a host name to put in a request line: no space, no control byte. */
static bool host_valid(const char *s)
{
	size_t len = strnlen(s, LOADGEN_TLS_NAME_BYTES_MAX);

	AN_ASSERT(s != NULL);
	if (len == 0 || len >= LOADGEN_TLS_NAME_BYTES_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f || s[i] == '/')
			return false;
	}
	return true;
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

/*
 * Whether <s> is one header line without its CRLF: a token name (RFC 9110
 * tchar), a colon, then a value of visible ASCII, spaces and tabs, and
 * shorter than LOADGEN_TLS_HEADER_BYTES_MAX.
 */
static bool header_valid(const char *s)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~";
	size_t len = strnlen(s, LOADGEN_TLS_HEADER_BYTES_MAX);
	size_t i = 0;

	AN_ASSERT(s != NULL);
	if (len >= LOADGEN_TLS_HEADER_BYTES_MAX)
		return false;
	while (i < len && (((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z') ||
			   (s[i] >= '0' && s[i] <= '9') || strchr(tchar, s[i]) != NULL))
		i++;
	if (i == 0 || i == len || s[i] != ':')
		return false;
	for (i++; i < len; i++) {
		if ((s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
			return false;
	}
	AN_ASSERT(i == len);
	return true;
}

static int opts_set(struct loadgen_opts *o, int opt, const char *arg)
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
		return parse_u32(arg, 1, LOADGEN_STREAMS_MAX, &o->streams);
	case 'n':
		return parse_u32(arg, 1, LOADGEN_IDLE_MAX, &o->count);
	case 'T':
		return parse_u32(arg, 1, LOADGEN_SECONDS_MAX, &o->seconds);
	case 'H':
		return parse_u32(arg, 1, 3600, &o->hold_seconds);
	case 'c':
		return parse_u32(arg, 1, LOADGEN_RATE_CONCURRENCY_MAX, &o->concurrency);
	case 'C':
		o->ca_file = arg;
		return 0;
	case 'S':
		o->sni = arg;
		return strlen(arg) < LOADGEN_TLS_NAME_BYTES_MAX ? 0 : -EINVAL;
	case 'P':
		o->path = arg;
		return arg[0] == '/' && strlen(arg) < LOADGEN_TLS_PATH_BYTES_MAX ? 0 : -EINVAL;
	case 'k':
		return parse_u32(arg, 1, LOADGEN_TLS_REQUESTS_MAX, &o->requests);
	case 'K':
		o->handshakes = true;
		return 0;
	case 'E':
		o->header = arg;
		return header_valid(arg) ? 0 : -EINVAL;
	case 'j':
		return parse_u32(arg, 1, LOADGEN_TLS_THREADS_MAX, &o->threads);
	case 'D':
		o->sock_dir = arg;
		return 0;
	case 'f':
		o->prefix = arg;
		return strlen(arg) < 64 ? 0 : -EINVAL;
	case 'o':
		o->host = arg;
		return host_valid(arg) ? 0 : -EINVAL;
	case 'v':
		return parse_u32(arg, 1, LOADGEN_QUIET_RATE_MAX, &o->rate);
	case 'F':
		return parse_u32(arg, 1, INT32_MAX, &o->flood_pid);
	case 'e':
		return parse_ms(arg, LOADGEN_QUIET_PHASE_MS_MAX, &o->phase_ms);
	case 'u':
		return parse_ms(arg, LOADGEN_QUIET_PHASE_MS_MAX, &o->settle_ms);
	case 'W':
		return parse_ms(arg, LOADGEN_QUIET_PHASE_MS_MAX, &o->warmup_ms);
	default:
		return -EINVAL;
	}
}

/* Whether a client mode has exactly one way to its peer, and what to ask it. */
static bool opts_peer_valid(const struct loadgen_opts *o)
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

/* Whether a quiet run's options fit its tables, and its phases leave time to count. */
static bool opts_quiet_valid(const struct loadgen_opts *o)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(o->mode == MODE_QUIET);
	if (o->sock_dir == NULL || o->count < 1 || o->count > LOADGEN_QUIET_MAX)
		return false;
	if (o->flood_pid == 0)
		return true;
	uint64_t phases = ((uint64_t)o->seconds * 1000u + o->phase_ms - 1u) / o->phase_ms;
	return o->phase_ms >= 1 && o->settle_ms < o->phase_ms && phases <= LOADGEN_QUIET_PHASES_MAX;
}

/* Whether the options make sense together for the chosen mode. */
static bool opts_valid(const struct loadgen_opts *o)
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
	case MODE_TLS:
		return opts_peer_valid(o) && o->ca_file != NULL && o->threads <= o->concurrency;
	case MODE_QUIET:
		return opts_quiet_valid(o);
	case MODE_NONE:
		return false;
	}
	return false;
}

static enum loadgen_mode mode_parse(const char *name)
{
	static const struct {
		const char *name;
		enum loadgen_mode mode;
	} modes[] = {
		{ "origin", MODE_ORIGIN }, { "throughput", MODE_THROUGHPUT },
		{ "idle", MODE_IDLE },     { "rate", MODE_RATE },
		{ "tls", MODE_TLS },       { "quiet", MODE_QUIET },
	};

	AN_ASSERT(name != NULL);
	/* Adding a mode: also its entry here, in opts_valid(), main() and usage(). */
	AN_ASSERT(AN_ARRAY_LEN(modes) == MODE_QUIET);
	for (size_t i = 0; i < AN_ARRAY_LEN(modes); i++) {
		if (strcmp(name, modes[i].name) == 0)
			return modes[i].mode;
	}
	return MODE_NONE;
}

static int opts_parse(int argc, char **argv, struct loadgen_opts *o)
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
		{ "ca", required_argument, NULL, 'C' },
		{ "sni", required_argument, NULL, 'S' },
		{ "path", required_argument, NULL, 'P' },
		{ "requests", required_argument, NULL, 'k' },
		{ "handshakes", no_argument, NULL, 'K' },
		{ "header", required_argument, NULL, 'E' },
		{ "threads", required_argument, NULL, 'j' },
		{ "sock-dir", required_argument, NULL, 'D' },
		{ "prefix", required_argument, NULL, 'f' },
		{ "host", required_argument, NULL, 'o' },
		{ "rate", required_argument, NULL, 'v' },
		{ "flood-pid", required_argument, NULL, 'F' },
		{ "phase-seconds", required_argument, NULL, 'e' },
		{ "settle-seconds", required_argument, NULL, 'u' },
		{ "warmup-seconds", required_argument, NULL, 'W' },
		{ NULL, 0, NULL, 0 },
	};

	AN_ASSERT(argc >= 1);
	AN_ASSERT(o != NULL);
	memset(o, 0, sizeof(*o));
	o->streams = 1;
	o->concurrency = 1;
	o->seconds = 5;
	o->hold_seconds = 600;
	o->path = "/";
	o->requests = LOADGEN_TLS_REQUESTS_DEFAULT;
	o->threads = 1;
	o->prefix = "q";
	o->host = "fake.bench";
	o->rate = 5;
	o->phase_ms = 1000;
	o->settle_ms = 200;
	if (argc < 2)
		return -EINVAL;
	o->mode = mode_parse(argv[1]);
	if (o->mode == MODE_NONE)
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
	if (!o->direct && o->authority != NULL)
		first_flight_build(o->authority);
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
	struct timeval tv = { .tv_sec = LOADGEN_IO_TIMEOUT_S, .tv_usec = 0 };

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
static socklen_t peer_addr_get(const struct loadgen_opts *o, union peer_addr *out)
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
static int dial(const struct loadgen_opts *o)
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

/* Writes "CONNECT <authority>" into <buf> (LOADGEN_HEAD_BYTES_MAX); returns its length. */
/*
 * A TLS 1.2-shaped ClientHello record (one cipher suite, no other extension)
 * whose server_name is the host of <authority> ("name:port"), in
 * first_flight. Enough for a proxy that reads the name; the origin skips it.
 */
static void first_flight_build(const char *authority)
{
	const char *colon = strrchr(authority, ':');
	size_t name_len = colon != NULL ? (size_t)(colon - authority) : strlen(authority);
	uint8_t *p = (uint8_t *)first_flight;
	size_t body = 2 + 32 + 1 + 4 + 2 + 2 + 9 + name_len;

	AN_ASSERT(name_len > 0 && 5 + 4 + body <= sizeof(first_flight));
	size_t n = 0;
	p[n++] = 22; /* handshake record, TLS 1.0 on the wire as clients send it */
	p[n++] = 3;
	p[n++] = 1;
	p[n++] = (uint8_t)((4 + body) >> 8);
	p[n++] = (uint8_t)(4 + body);
	p[n++] = 1; /* ClientHello */
	p[n++] = 0;
	p[n++] = (uint8_t)(body >> 8);
	p[n++] = (uint8_t)body;
	p[n++] = 3;
	p[n++] = 3;
	memset(p + n, 0x42, 32);
	n += 32;
	p[n++] = 0; /* no session id */
	p[n++] = 0;
	p[n++] = 2;
	p[n++] = 0x13;
	p[n++] = 0x01;
	p[n++] = 1;
	p[n++] = 0; /* null compression */
	p[n++] = (uint8_t)((9 + name_len) >> 8);
	p[n++] = (uint8_t)(9 + name_len);
	p[n++] = 0; /* server_name */
	p[n++] = 0;
	p[n++] = (uint8_t)((5 + name_len) >> 8);
	p[n++] = (uint8_t)(5 + name_len);
	p[n++] = (uint8_t)((3 + name_len) >> 8);
	p[n++] = (uint8_t)(3 + name_len);
	p[n++] = 0; /* host_name */
	p[n++] = (uint8_t)(name_len >> 8);
	p[n++] = (uint8_t)name_len;
	memcpy(p + n, authority, name_len);
	n += name_len;
	first_flight_len = n;
}

/*
 * Skips the TLS record a proxied client sends before its first command, at
 * the start of <fd>'s bytes <buf>/<len>; returns how many of them it took.
 */
static size_t origin_hello_skip(int fd, const char *buf, size_t len)
{
	size_t i = 0;
	uint8_t *head = &origin_hello_head[fd];

	while (i < len && *head < 6) {
		if (*head == 0 && buf[i] != 22) {
			*head = 6; /* no record: commands from the first byte */
			break;
		}
		if (*head < 5) {
			if (*head == 3)
				origin_hello_left[fd] = (uint16_t)((uint8_t)buf[i] << 8);
			if (*head == 4)
				origin_hello_left[fd] |= (uint8_t)buf[i];
			(*head)++;
			i++;
			continue;
		}
		size_t k = len - i < origin_hello_left[fd] ? len - i : origin_hello_left[fd];
		i += k;
		origin_hello_left[fd] = (uint16_t)(origin_hello_left[fd] - k);
		if (origin_hello_left[fd] == 0)
			*head = 6;
	}
	return i;
}

static size_t connect_request(const char *authority, char *buf)
{
	AN_ASSERT(authority != NULL);
	AN_ASSERT(buf != NULL);
	int len = snprintf(buf, LOADGEN_HEAD_BYTES_MAX, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n",
			   authority, authority);
	AN_ASSERT(len > 0 && (size_t)len < LOADGEN_HEAD_BYTES_MAX);
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
	AN_ASSERT(len <= LOADGEN_HEAD_BYTES_MAX);
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
 * -EPROTO for another status, -EMSGSIZE when LOADGEN_HEAD_BYTES_MAX bytes hold
 * no complete head. Borrows <buf>.
 */
static int head_parse(const char *buf, size_t len)
{
	AN_ASSERT(buf != NULL);
	AN_ASSERT(len <= LOADGEN_HEAD_BYTES_MAX);
	size_t end = head_end(buf, len);
	if (end == 0)
		return len == LOADGEN_HEAD_BYTES_MAX ? -EMSGSIZE : 0;
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
	char req[LOADGEN_HEAD_BYTES_MAX];
	size_t got = 0;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(authority != NULL);
	int err = send_all(fd, req, connect_request(authority, req));
	if (err != 0)
		return err;
	for (;;) {
		AN_ASSERT(got < LOADGEN_HEAD_BYTES_MAX);
		ssize_t n = recv(fd, io_buf + got, LOADGEN_HEAD_BYTES_MAX - got, 0);
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
static int open_stream(const struct loadgen_opts *o)
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
 * Moves bytes on <fd> until it would block or LOADGEN_PUMP_ROUNDS_MAX calls
 * are done (level-triggered epoll calls again); adds them to *<bytes>.
 * Returns 0 or -errno (-ECONNRESET when the peer closed).
 */
static int pump_stream(int fd, bool up, uint64_t *bytes)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(bytes != NULL);
	for (uint32_t round = 0; round < LOADGEN_PUMP_ROUNDS_MAX; round++) {
		ssize_t n = io_some(fd, up, io_buf, sizeof(io_buf));
		if (n <= 0)
			return (int)n;
		*bytes += (uint64_t)n;
	}
	return 0;
}

/* Opens <o->streams> streams, commands them, and registers them with <ep>. */
static int throughput_open(const struct loadgen_opts *o, int ep, int *fds)
{
	const char cmd = o->up ? 'U' : 'D';

	AN_ASSERT(o->streams <= LOADGEN_STREAMS_MAX);
	AN_ASSERT(ep >= 0);
	for (uint32_t i = 0; i < o->streams; i++) {
		int fd = open_stream(o);
		if (fd < 0) {
			fprintf(stderr, "loadgen: stream %u: %s\n", i, strerror(-fd));
			return fd;
		}
		fds[i] = fd;
		struct epoll_event ev = { .events = o->up ? EPOLLOUT : EPOLLIN, .data.fd = fd };
		int err = o->direct ? 0 : send_all(fd, first_flight, first_flight_len);
		if (err == 0)
			err = send_all(fd, &cmd, 1);
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
	struct epoll_event evs[LOADGEN_EVENTS_MAX];
	uint64_t before_mark = 0;

	AN_ASSERT(mark_ns < end_ns);
	AN_ASSERT(*bytes == 0);
	for (uint64_t now = now_ns(); now < end_ns; now = now_ns()) {
		int n = epoll_wait(ep, evs, LOADGEN_EVENTS_MAX, 100);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		uint64_t *sum = now < mark_ns ? &before_mark : bytes;
		for (int i = 0; i < n; i++) {
			int err = pump_stream(evs[i].data.fd, up, sum);
			if (err != 0) {
				fprintf(stderr, "loadgen: stream failed: %s\n", strerror(-err));
				return err;
			}
		}
	}
	*ns = now_ns() - mark_ns;
	AN_ASSERT(*ns >= end_ns - mark_ns);
	return 0;
}

static int run_throughput(const struct loadgen_opts *o)
{
	int fds[LOADGEN_STREAMS_MAX];
	uint64_t bytes = 0;
	uint64_t ns = 0;

	AN_ASSERT(o->mode == MODE_THROUGHPUT);
	AN_ASSERT(o->seconds >= 1);
	for (uint32_t i = 0; i < LOADGEN_STREAMS_MAX; i++)
		fds[i] = -1;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep == -1)
		return -errno;
	int err = throughput_open(o, ep, fds);
	uint64_t start = now_ns();
	uint64_t mark = start + LOADGEN_WARMUP_NS;
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
static int run_idle(const struct loadgen_opts *o)
{
	struct timespec hold = { .tv_sec = (time_t)o->hold_seconds, .tv_nsec = 0 };
	uint32_t opened = 0;
	sigset_t set;
	int err = 0;

	AN_ASSERT(o->mode == MODE_IDLE);
	AN_ASSERT(o->count <= LOADGEN_IDLE_MAX);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	for (; opened < o->count; opened++) {
		int fd = open_stream(o);
		if (fd < 0) {
			fprintf(stderr, "loadgen: idle tunnel %u: %s\n", opened, strerror(-fd));
			err = fd;
			goto out_close;
		}
		idle_fds[opened] = fd;
	}
	printf("idle: ready %u\n", opened);
	fflush(stdout);
	if (sigtimedwait(&set, NULL, &hold) == -1 && errno == EAGAIN)
		fprintf(stderr, "loadgen: idle: no signal in %u s, closing\n", o->hold_seconds);
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
	char head[LOADGEN_HEAD_BYTES_MAX];
};

/* Log-linear latency histogram (see LOADGEN_HIST_SUB_BITS), in ns. */
struct rate_hist {
	uint64_t counts[LOADGEN_HIST_BUCKETS];
	uint64_t total;
};

struct rate_run {
	const struct loadgen_opts *o;
	union peer_addr addr;
	socklen_t addr_len;
	int ep;
	size_t request_len;
	char request[LOADGEN_HEAD_BYTES_MAX];
	uint64_t mark_ns;
	uint64_t end_ns;
	uint64_t expire_ns;      /* next scan for stuck cycles */
	uint64_t cycles_counted; /* completed between mark and end */
	uint64_t cycles_done;    /* completed before end, warm-up included */
	uint64_t errors;         /* failed during the run, warm-up included */
	uint32_t queue_head;
	uint32_t queue_len;
	uint32_t queue[LOADGEN_RATE_CONCURRENCY_MAX]; /* slots to start, oldest first */
	struct rate_cycle cycles[LOADGEN_RATE_CONCURRENCY_MAX];
	struct rate_hist hist;
};

static struct rate_run rate_state;

static uint32_t hist_index(uint64_t ns)
{
	const uint64_t clamp = (1ull << LOADGEN_HIST_VALUE_BITS) - 1u;

	if (ns > clamp)
		ns = clamp;
	if (ns < (1u << LOADGEN_HIST_SUB_BITS))
		return (uint32_t)ns;
	uint32_t exp = 63u - (uint32_t)__builtin_clzll(ns);
	AN_ASSERT(exp >= LOADGEN_HIST_SUB_BITS && exp < LOADGEN_HIST_VALUE_BITS);
	uint64_t sub = (ns >> (exp - LOADGEN_HIST_SUB_BITS)) - (1u << LOADGEN_HIST_SUB_BITS);
	uint32_t index =
	    ((exp - LOADGEN_HIST_SUB_BITS + 1u) << LOADGEN_HIST_SUB_BITS) + (uint32_t)sub;
	AN_ASSERT(index < LOADGEN_HIST_BUCKETS);
	return index;
}

/* The smallest value bucket <index> holds: hist_index(hist_floor(i)) == i. */
static uint64_t hist_floor(uint32_t index)
{
	AN_ASSERT(index < LOADGEN_HIST_BUCKETS);
	if (index < (1u << LOADGEN_HIST_SUB_BITS))
		return index;
	uint32_t exp = (index >> LOADGEN_HIST_SUB_BITS) + LOADGEN_HIST_SUB_BITS - 1u;
	uint64_t mantissa =
	    (index & ((1u << LOADGEN_HIST_SUB_BITS) - 1u)) + (1u << LOADGEN_HIST_SUB_BITS);
	uint64_t floor_ns = mantissa << (exp - LOADGEN_HIST_SUB_BITS);
	AN_ASSERT(hist_index(floor_ns) == index);
	return floor_ns;
}

static void hist_add(struct rate_hist *h, uint64_t ns)
{
	uint32_t index = hist_index(ns);

	AN_ASSERT(index < LOADGEN_HIST_BUCKETS);
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
	for (uint32_t i = 0; i < LOADGEN_HIST_BUCKETS; i++) {
		seen += h->counts[i];
		if (seen >= rank)
			return (double)hist_floor(i) / 1e3;
	}
	AN_ASSERT(!"the histogram's counts add up to its total");
	return 0.0;
}

static void rate_queue_push(struct rate_run *r, uint32_t slot)
{
	AN_ASSERT(r->queue_len < LOADGEN_RATE_CONCURRENCY_MAX);
	AN_ASSERT(r->cycles[slot].state == CYCLE_FREE);
	r->queue[(r->queue_head + r->queue_len) & (LOADGEN_RATE_CONCURRENCY_MAX - 1u)] = slot;
	r->queue_len++;
}

static uint32_t rate_queue_pop(struct rate_run *r)
{
	AN_ASSERT(r->queue_len > 0);
	uint32_t slot = r->queue[r->queue_head];
	r->queue_head = (r->queue_head + 1u) & (LOADGEN_RATE_CONCURRENCY_MAX - 1u);
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

/* A non-blocking connect on <fd> finished: 0, or why it failed (-errno). */
static int connect_result(int fd)
{
	int so_error = 0;
	socklen_t len = sizeof(so_error);

	AN_ASSERT(fd >= 0);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == -1)
		return -errno;
	return -so_error;
}

/* Sends <len> bytes of <buf> in one call: a fresh socket's buffer takes a request whole. */
static int send_whole(int fd, const void *buf, size_t len)
{
	AN_ASSERT(buf != NULL && len > 0);
	ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
	if (n == -1)
		return -errno;
	return (size_t)n == len ? 0 : -EMSGSIZE;
}

/*
 * Reads the proxy's answer to CONNECT into <head> (*<in_bytes> of it so far).
 * Returns 1 once a whole 2xx head is there and nothing after it (the far end
 * speaks only when spoken to: more bytes are not its), 0 when the socket has
 * no more for now, or -errno (head_parse's, or -EPROTO for extra bytes).
 */
static int proxy_head_read(int fd, char *head, uint32_t *in_bytes)
{
	for (;;) {
		AN_ASSERT(*in_bytes < LOADGEN_HEAD_BYTES_MAX);
		ssize_t n =
		    io_some(fd, false, head + *in_bytes, LOADGEN_HEAD_BYTES_MAX - *in_bytes);
		if (n <= 0)
			return (int)n;
		*in_bytes += (uint32_t)n;
		int head_len = head_parse(head, *in_bytes);
		if (head_len < 0)
			return head_len;
		if (head_len > 0)
			return (uint32_t)head_len == *in_bytes ? 1 : -EPROTO;
	}
}

/* The connect finished: sends CONNECT (proxied) or the ping (--direct). */
static int cycle_on_connected(struct rate_run *r, struct rate_cycle *c)
{
	AN_ASSERT(c->state == CYCLE_CONNECTING);
	int ret = connect_result(c->fd);
	if (ret != 0)
		return ret;
	if (r->o->direct)
		return cycle_send_ping(c);
	AN_ASSERT(r->request_len > 0);
	ret = send_whole(c->fd, r->request, r->request_len);
	if (ret == 0)
		c->state = CYCLE_HEAD;
	return ret;
}

/* Reads the proxy's answer; on a 2xx head sends the first flight and the ping. */
static int cycle_on_head(struct rate_cycle *c)
{
	AN_ASSERT(c->state == CYCLE_HEAD);
	int ret = proxy_head_read(c->fd, c->head, &c->in_bytes); /* the origin waits for the ping */
	if (ret != 1)
		return ret;
	char flight[sizeof(first_flight) + 1];
	memcpy(flight, first_flight, first_flight_len);
	flight[first_flight_len] = 'P';
	c->state = CYCLE_PING;
	c->in_bytes = 0;
	return send_whole(c->fd, flight, first_flight_len + 1);
}

/* Reads the origin's ping answer; returns 1 once all of it is in. */
static int cycle_on_ping(struct rate_cycle *c)
{
	char buf[LOADGEN_PING_BYTES + 1];

	AN_ASSERT(c->state == CYCLE_PING);
	for (;;) {
		AN_ASSERT(c->in_bytes < LOADGEN_PING_BYTES);
		ssize_t n = io_some(c->fd, false, buf, sizeof(buf));
		if (n <= 0)
			return (int)n;
		c->in_bytes += (uint32_t)n;
		if (c->in_bytes > LOADGEN_PING_BYTES)
			return -EPROTO;
		if (c->in_bytes == LOADGEN_PING_BYTES)
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
	if (r->errors < LOADGEN_RATE_ERRORS_LOGGED_MAX)
		fprintf(stderr, "loadgen: rate: cycle failed at %s: %s\n",
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

/* Fails the cycles in flight for longer than LOADGEN_IO_TIMEOUT_S. */
static void rate_expire(struct rate_run *r)
{
	const uint64_t limit_ns = (uint64_t)LOADGEN_IO_TIMEOUT_S * 1000000000ull;
	/* Read now, not at the loop's top: cycles started since are younger. */
	uint64_t now = now_ns();

	AN_ASSERT(r->o->concurrency <= LOADGEN_RATE_CONCURRENCY_MAX);
	for (uint32_t slot = 0; slot < r->o->concurrency; slot++) {
		struct rate_cycle *c = &r->cycles[slot];
		if (c->state == CYCLE_FREE)
			continue;
		AN_ASSERT(now >= c->start_ns);
		if (now - c->start_ns > limit_ns)
			rate_cycle_failed(r, slot, -ETIMEDOUT);
	}
	r->expire_ns = now + LOADGEN_RATE_EXPIRE_NS;
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

/*
 * The load loops' shared driver: until <end_ns>, <start> (re)starts what it
 * can and says how many slots wait for a retry, epoll's events go to
 * <on_event>, and <expire> scans for stuck slots once <*expire_ns> passes.
 * Slots that failed at once are retried 1 ms later, not in a spin; slots
 * freed by a batch of events restart only after it (no stale events).
 * 0, or -errno of epoll_wait.
 */
struct load_loop {
	void *run;
	int ep;
	uint64_t end_ns;
	const uint64_t *expire_ns;
	uint32_t (*start)(void *run);
	void (*on_event)(void *run, struct epoll_event *ev);
	void (*expire)(void *run);
};

static int load_loop_run(const struct load_loop *l)
{
	struct epoll_event evs[LOADGEN_EVENTS_MAX];

	AN_ASSERT(l->ep >= 0);
	AN_ASSERT(l->start != NULL && l->on_event != NULL && l->expire != NULL);
	for (uint64_t now = now_ns(); now < l->end_ns; now = now_ns()) {
		int timeout_ms = l->start(l->run) > 0 ? 1 : 100;
		int n = epoll_wait(l->ep, evs, LOADGEN_EVENTS_MAX, timeout_ms);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		for (int i = 0; i < n; i++)
			l->on_event(l->run, &evs[i]);
		if (now >= *l->expire_ns)
			l->expire(l->run);
	}
	return 0;
}

static uint32_t rate_loop_start(void *run)
{
	struct rate_run *r = run;

	rate_start_queued(r);
	return r->queue_len; /* still queued: failed at once */
}

static void rate_loop_event(void *run, struct epoll_event *ev)
{
	rate_on_event(run, ev);
}

static void rate_loop_expire(void *run)
{
	rate_expire(run);
}

/* Runs cycles until the deadline; every slot is either in flight or queued. */
static int rate_loop(struct rate_run *r)
{
	AN_ASSERT(r->mark_ns < r->end_ns);
	AN_ASSERT(r->queue_len == r->o->concurrency);
	const struct load_loop l = { .run = r,
				     .ep = r->ep,
				     .end_ns = r->end_ns,
				     .expire_ns = &r->expire_ns,
				     .start = rate_loop_start,
				     .on_event = rate_loop_event,
				     .expire = rate_loop_expire };
	return load_loop_run(&l);
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
		fprintf(stderr, "loadgen: rate: no cycle completed in the measured window\n");
		return -EIO;
	}
	if (r->errors * 100u > attempts * LOADGEN_RATE_ERRORS_PCT_MAX) {
		fprintf(stderr, "loadgen: rate: %llu of %llu cycles failed (more than %u%%)\n",
			(unsigned long long)r->errors, (unsigned long long)attempts,
			LOADGEN_RATE_ERRORS_PCT_MAX);
		return -EIO;
	}
	return 0;
}

/* Keeps <o->concurrency> cycles in flight for the warm-up and <o->seconds>. */
static int run_rate(const struct loadgen_opts *o)
{
	struct rate_run *r = &rate_state;

	AN_ASSERT(o->mode == MODE_RATE);
	AN_ASSERT(o->concurrency >= 1 && o->concurrency <= LOADGEN_RATE_CONCURRENCY_MAX);
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
	r->mark_ns = start + LOADGEN_WARMUP_NS;
	r->end_ns = r->mark_ns + (uint64_t)o->seconds * 1000000000ull;
	r->expire_ns = start + LOADGEN_RATE_EXPIRE_NS;
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

/* ---- tls: TLS sessions, keep-alive requests or handshakes --------------- */

enum tls_state {
	TLS_FREE = 0,   /* started again after the current batch of events */
	TLS_CONNECTING, /* non-blocking connect in progress */
	TLS_TUNNEL,     /* CONNECT sent, reading the proxy's answer */
	TLS_HANDSHAKE,  /* SSL_connect in progress */
	TLS_RESPONSE,   /* a request sent, reading its response */
};

/* What every thread of a run reads and none writes once the threads start. */
struct tls_plan {
	SSL_CTX *ctx;
	union peer_addr addr;
	socklen_t addr_len;
	size_t connect_len; /* 0 with --direct */
	size_t request_len;
	char name[LOADGEN_TLS_NAME_BYTES_MAX];
	char connect[LOADGEN_HEAD_BYTES_MAX];
	char request[LOADGEN_TLS_REQUEST_BYTES_MAX];
};

/* One connection; the slot is reused by the next one. */
struct tls_conn {
	int fd; /* -1 while TLS_FREE */
	enum tls_state state;
	SSL *ssl;           /* owned, from TLS_HANDSHAKE on */
	uint32_t requests;  /* answered on this connection */
	uint32_t in_bytes;  /* of the CONNECT answer or of the response head */
	uint32_t head_len;  /* of the response head; 0 while it is incomplete */
	uint64_t body_left; /* bytes of the response body still to come */
	uint64_t start_ns;  /* the connection's start */
	uint64_t step_ns;   /* the start, then each request's sending */
	char head[LOADGEN_HEAD_BYTES_MAX];
};

struct tls_serial {
	uint32_t len;
	unsigned char bytes[LOADGEN_TLS_SERIAL_BYTES_MAX];
};

/* One thread's share of a run: its slots, its counters, its histogram. */
struct tls_run {
	const struct loadgen_opts *o;
	const struct tls_plan *plan;
	struct tls_conn *conns;
	uint32_t conns_len;
	int ep;
	int err;
	uint64_t mark_ns;
	uint64_t end_ns;
	uint64_t expire_ns;       /* next scan for stuck connections */
	uint64_t done;            /* requests answered before the end, warm-up included */
	uint64_t counted;         /* requests (cycles, --handshakes) answered in the window */
	uint64_t handshakes;      /* completed in the window */
	uint64_t handshakes_done; /* completed before the end, warm-up included */
	uint64_t leaves_seen;     /* of those, the ones whose leaf serial was seen before */
	uint64_t errors;          /* failed connections, warm-up included */
	uint32_t leaves_len;
	struct tls_serial leaves[LOADGEN_TLS_LEAVES_MAX];
	struct rate_hist hist;
	char scratch[LOADGEN_TLS_SCRATCH_BYTES];
	pthread_t thread;
};

static struct tls_plan tls_plan_state;
static struct tls_conn tls_conns[LOADGEN_RATE_CONCURRENCY_MAX];
static struct tls_run tls_runs[LOADGEN_TLS_THREADS_MAX];
static struct rate_hist tls_hist_total;
static atomic_uint tls_errors_logged;

static const char *tls_state_name(enum tls_state state)
{
	switch (state) {
	case TLS_CONNECTING:
		return "connect";
	case TLS_TUNNEL:
		return "CONNECT answer";
	case TLS_HANDSHAKE:
		return "TLS handshake";
	case TLS_RESPONSE:
		return "response";
	case TLS_FREE:
	default:
		return "start";
	}
}

/*
 * The Content-Length of the complete head <head>/<len>, or -EPROTO without
 * one: the benchmark's servers frame every body so (chunked or
 * close-delimited answers would end the keep-alive run anyway).
 */
static int64_t head_content_length(const char *head, size_t len)
{
	static const char name[] = "\ncontent-length:";
	const size_t name_len = sizeof(name) - 1;

	AN_ASSERT(head != NULL);
	AN_ASSERT(len <= LOADGEN_HEAD_BYTES_MAX);
	for (size_t i = 0; i + name_len <= len; i++) {
		if (strncasecmp(head + i, name, name_len) != 0)
			continue;
		size_t j = i + name_len;
		while (j < len && (head[j] == ' ' || head[j] == '\t'))
			j++;
		int64_t value = 0;
		size_t digits = 0;
		for (; j < len && head[j] >= '0' && head[j] <= '9' && digits < 12; j++, digits++)
			value = value * 10 + (head[j] - '0');
		return digits == 0 ? -EPROTO : value;
	}
	return -EPROTO;
}

/* Maps a failed SSL call's <ret>: 0 to wait for the socket, or -errno. */
static int tls_want(SSL *ssl, int ret)
{
	AN_ASSERT(ssl != NULL);
	AN_ASSERT(ret <= 0);
	switch (SSL_get_error(ssl, ret)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		return -ECONNRESET;
	case SSL_ERROR_SYSCALL:
		return errno == 0 || errno == EAGAIN || errno == EINTR ? -ECONNRESET : -errno;
	default:
		return -EPROTO;
	}
}

/* A client context that verifies the leaf against <ca_file> and never resumes. */
static SSL_CTX *tls_ctx_new(const char *ca_file)
{
	AN_ASSERT(ca_file != NULL);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL)
		return NULL;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	/* Every handshake is a full one: resumption would measure something else. */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
		char why[256];
		ERR_error_string_n(ERR_get_error(), why, sizeof(why));
		fprintf(stderr, "loadgen: tls: --ca %s: %s\n", ca_file, why);
		SSL_CTX_free(ctx);
		return NULL;
	}
	AN_ASSERT(SSL_CTX_get_verify_mode(ctx) == SSL_VERIFY_PEER);
	return ctx;
}

/*
 * The server name (--sni, else the host of the authority, or of --target
 * with --direct) and the request head, whose Host is that name and the
 * port (left out when 443), as a client of https://NAME:PORT/ sends it,
 * then the --header line if there is one.
 */
static int tls_plan_names(const struct loadgen_opts *o, struct tls_plan *p)
{
	const char *authority = o->direct ? o->target_text : o->authority;
	struct in_addr ip;

	AN_ASSERT(authority != NULL);
	AN_ASSERT(o->path != NULL);
	const char *colon = strrchr(authority, ':');
	if (colon == NULL)
		return -EINVAL;
	const char *port = colon + 1;
	int len = o->sni != NULL ? snprintf(p->name, sizeof(p->name), "%s", o->sni)
				 : snprintf(p->name, sizeof(p->name), "%.*s",
					    (int)(colon - authority), authority);
	if (len <= 0 || (size_t)len >= sizeof(p->name))
		return -EINVAL;
	if (inet_pton(AF_INET, p->name, &ip) == 1) {
		fprintf(stderr, "loadgen: tls: %s is an address: name the host with --sni\n",
			p->name);
		return -EINVAL;
	}
	bool port_443 = strcmp(port, "443") == 0;
	len =
	    snprintf(p->request, sizeof(p->request), "GET %s HTTP/1.1\r\nHost: %s%s%s\r\n%s%s\r\n",
		     o->path, p->name, port_443 ? "" : ":", port_443 ? "" : port,
		     o->header != NULL ? o->header : "", o->header != NULL ? "\r\n" : "");
	if (len <= 0 || (size_t)len >= sizeof(p->request))
		return -EINVAL;
	p->request_len = (size_t)len;
	return 0;
}

static int tls_plan_init(const struct loadgen_opts *o, struct tls_plan *p)
{
	AN_ASSERT(o->mode == MODE_TLS);
	AN_ASSERT(o->ca_file != NULL);
	memset(p, 0, sizeof(*p));
	int err = tls_plan_names(o, p);
	if (err != 0)
		return err;
	p->addr_len = peer_addr_get(o, &p->addr);
	if (!o->direct)
		p->connect_len = connect_request(o->authority, p->connect);
	p->ctx = tls_ctx_new(o->ca_file);
	return p->ctx == NULL ? -EPROTO : 0;
}

/* Frees <c>'s session and resets its socket (no TIME_WAIT: see cycle_close()). */
static void tls_conn_close(struct tls_conn *c)
{
	struct linger abortive = { .l_onoff = 1, .l_linger = 0 };

	AN_ASSERT(c->state != TLS_FREE);
	SSL_free(c->ssl);
	c->ssl = NULL;
	if (c->fd >= 0) {
		(void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
		close(c->fd);
	}
	c->fd = -1;
	c->state = TLS_FREE;
	AN_ASSERT(c->ssl == NULL);
}

/* Says why <c> failed (with OpenSSL's reason and the verify result), for the first few. */
static void tls_log_failure(const struct tls_conn *c, int err)
{
	char why[256] = "";

	AN_ASSERT(err < 0);
	AN_ASSERT(c->state != TLS_FREE);
	unsigned long code = ERR_peek_last_error();
	if (code != 0)
		ERR_error_string_n(code, why, sizeof(why));
	long verify = c->ssl != NULL ? SSL_get_verify_result(c->ssl) : X509_V_OK;
	fprintf(stderr, "loadgen: tls: connection failed at %s: %s%s%s%s%s\n",
		tls_state_name(c->state), strerror(-err), code != 0 ? "; " : "", why,
		verify != X509_V_OK ? "; verify: " : "",
		verify != X509_V_OK ? X509_verify_cert_error_string(verify) : "");
}

static void tls_failed(struct tls_run *r, struct tls_conn *c, int err)
{
	AN_ASSERT(err < 0);
	AN_ASSERT(c->state != TLS_FREE);
	if (atomic_fetch_add(&tls_errors_logged, 1u) < LOADGEN_RATE_ERRORS_LOGGED_MAX)
		tls_log_failure(c, err);
	/* SSL_get_error reads this thread's queue: the next call must find it empty. */
	ERR_clear_error();
	r->errors++;
	tls_conn_close(c);
}

/* Opens slot <index>'s connection, non-blocking, registered edge-triggered once. */
static int tls_conn_start(struct tls_run *r, uint32_t index)
{
	struct tls_conn *c = &r->conns[index];
	int one = 1;

	AN_ASSERT(c->state == TLS_FREE);
	AN_ASSERT(c->fd == -1 && c->ssl == NULL);
	c->start_ns = now_ns();
	c->step_ns = c->start_ns;
	c->requests = 0;
	c->in_bytes = 0;
	c->state = TLS_CONNECTING;
	c->fd = socket(r->plan->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd == -1)
		return -errno;
	if (r->plan->addr.sa.sa_family == AF_INET)
		(void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, &r->plan->addr.sa, r->plan->addr_len) == -1 && errno != EINPROGRESS)
		return -errno;
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLOUT | EPOLLET,
		.data.u64 = ((uint64_t)index << 32) | (uint32_t)c->fd,
	};
	if (epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd, &ev) == -1)
		return -errno;
	return 0;
}

/* Whether the serial <bytes>/<len> was seen before by this thread (remembered if not). */
static bool tls_leaf_seen(struct tls_run *r, const unsigned char *bytes, int len)
{
	AN_ASSERT(bytes != NULL || len == 0);
	AN_ASSERT(r->leaves_len <= LOADGEN_TLS_LEAVES_MAX);
	if (len <= 0 || (size_t)len > LOADGEN_TLS_SERIAL_BYTES_MAX)
		return false;
	for (uint32_t i = 0; i < r->leaves_len; i++) {
		const struct tls_serial *s = &r->leaves[i];
		if (s->len == (uint32_t)len && memcmp(s->bytes, bytes, (size_t)len) == 0)
			return true;
	}
	if (r->leaves_len < LOADGEN_TLS_LEAVES_MAX) {
		struct tls_serial *s = &r->leaves[r->leaves_len++];
		s->len = (uint32_t)len;
		memcpy(s->bytes, bytes, (size_t)len);
	}
	return false;
}

/* Counts a completed handshake, and whether its leaf is one seen before. */
static void tls_note_leaf(struct tls_run *r, const struct tls_conn *c)
{
	/* Verified (SSL_VERIFY_PEER): the server did send a leaf. */
	X509 *leaf = SSL_get0_peer_certificate(c->ssl);
	AN_ASSERT(leaf != NULL);
	AN_ASSERT(SSL_get_verify_result(c->ssl) == X509_V_OK);
	const ASN1_INTEGER *serial = X509_get0_serialNumber(leaf);
	bool seen = tls_leaf_seen(r, ASN1_STRING_get0_data(serial), ASN1_STRING_length(serial));
	uint64_t now = now_ns();
	if (now < r->end_ns)
		r->handshakes_done++;
	if (now >= r->mark_ns && now < r->end_ns) {
		r->handshakes++;
		r->leaves_seen += seen ? 1u : 0u;
	}
}

/* Sends the run's request; a fresh or drained socket buffer takes it whole. */
static int tls_send_request(struct tls_run *r, struct tls_conn *c)
{
	AN_ASSERT(c->ssl != NULL);
	AN_ASSERT(r->plan->request_len > 0);
	int n = SSL_write(c->ssl, r->plan->request, (int)r->plan->request_len);
	if (n <= 0) {
		int err = tls_want(c->ssl, n);
		return err != 0 ? err : -EMSGSIZE;
	}
	AN_ASSERT((size_t)n == r->plan->request_len);
	c->state = TLS_RESPONSE;
	c->step_ns = now_ns();
	c->in_bytes = 0;
	c->head_len = 0;
	c->body_left = 0;
	return 0;
}

static int tls_on_handshake(struct tls_run *r, struct tls_conn *c)
{
	AN_ASSERT(c->state == TLS_HANDSHAKE);
	AN_ASSERT(c->ssl != NULL);
	int ret = SSL_connect(c->ssl);
	if (ret != 1)
		return tls_want(c->ssl, ret);
	tls_note_leaf(r, c);
	return tls_send_request(r, c);
}

/* Starts the handshake on <c>'s open tunnel (or direct connection). */
static int tls_begin(struct tls_run *r, struct tls_conn *c)
{
	AN_ASSERT(c->state == TLS_CONNECTING || c->state == TLS_TUNNEL);
	AN_ASSERT(c->ssl == NULL);
	c->ssl = SSL_new(r->plan->ctx);
	if (c->ssl == NULL)
		return -ENOMEM;
	c->state = TLS_HANDSHAKE;
	if (SSL_set_fd(c->ssl, c->fd) != 1 ||
	    SSL_set_tlsext_host_name(c->ssl, r->plan->name) != 1 ||
	    SSL_set1_host(c->ssl, r->plan->name) != 1)
		return -EPROTO;
	return tls_on_handshake(r, c);
}

/* The connect finished: sends CONNECT, or with --direct starts the handshake. */
static int tls_on_connected(struct tls_run *r, struct tls_conn *c)
{
	AN_ASSERT(c->state == TLS_CONNECTING);
	AN_ASSERT(r->o->direct || r->plan->connect_len > 0);
	int ret = connect_result(c->fd);
	if (ret != 0)
		return ret;
	if (r->o->direct)
		return tls_begin(r, c);
	ret = send_whole(c->fd, r->plan->connect, r->plan->connect_len);
	if (ret == 0)
		c->state = TLS_TUNNEL;
	return ret;
}

/* Reads the proxy's answer to CONNECT; on a 2xx head starts the handshake. */
static int tls_on_tunnel(struct tls_run *r, struct tls_conn *c)
{
	AN_ASSERT(c->state == TLS_TUNNEL);
	int ret = proxy_head_read(c->fd, c->head, &c->in_bytes); /* the server waits for us */
	if (ret != 1)
		return ret;
	c->in_bytes = 0;
	return tls_begin(r, c);
}

/* Once the response head in <c> is complete: checks it and sets what body is left. */
static int tls_response_head(struct tls_conn *c)
{
	AN_ASSERT(c->head_len == 0);
	AN_ASSERT(c->in_bytes <= LOADGEN_HEAD_BYTES_MAX);
	size_t end = head_end(c->head, c->in_bytes);
	if (end == 0)
		return c->in_bytes == LOADGEN_HEAD_BYTES_MAX ? -EMSGSIZE : 0;
	if (!head_status_2xx(c->head, end))
		return -EPROTO;
	int64_t length = head_content_length(c->head, end);
	if (length < 0)
		return (int)length;
	/* No pipelining: bytes past this body would answer nothing we sent. */
	uint64_t have = c->in_bytes - end;
	if (have > (uint64_t)length)
		return -EPROTO;
	c->head_len = (uint32_t)end;
	c->body_left = (uint64_t)length - have;
	return 0;
}

/* Reads the response to the request in flight; 1 once all of it is in. */
static int tls_on_response(struct tls_run *r, struct tls_conn *c)
{
	AN_ASSERT(c->state == TLS_RESPONSE);
	AN_ASSERT(c->ssl != NULL);
	while (c->head_len == 0) {
		int n = SSL_read(c->ssl, c->head + c->in_bytes,
				 (int)(LOADGEN_HEAD_BYTES_MAX - c->in_bytes));
		if (n <= 0)
			return tls_want(c->ssl, n);
		c->in_bytes += (uint32_t)n;
		int err = tls_response_head(c);
		if (err != 0)
			return err;
	}
	while (c->body_left > 0) {
		int n = SSL_read(c->ssl, r->scratch, (int)sizeof(r->scratch));
		if (n <= 0)
			return tls_want(c->ssl, n);
		if ((uint64_t)n > c->body_left)
			return -EPROTO;
		c->body_left -= (uint64_t)n;
	}
	return 1;
}

/* Counts <c>'s answered request; then the next request, or a new connection. */
static int tls_response_done(struct tls_run *r, struct tls_conn *c)
{
	uint64_t now = now_ns();

	AN_ASSERT(c->state == TLS_RESPONSE);
	AN_ASSERT(now >= c->step_ns && c->step_ns >= c->start_ns);
	if (now < r->end_ns)
		r->done++;
	if (now >= r->mark_ns && now < r->end_ns) {
		r->counted++;
		hist_add(&r->hist, now - (r->o->handshakes ? c->start_ns : c->step_ns));
	}
	c->requests++;
	if (r->o->handshakes || c->requests >= r->o->requests) {
		tls_conn_close(c);
		return 0;
	}
	return tls_send_request(r, c);
}

/* Advances <c> on <events>: 1 when a response is complete, 0 to wait, or -errno. */
static int tls_step(struct tls_run *r, struct tls_conn *c, uint32_t events)
{
	AN_ASSERT(c->fd >= 0);
	switch (c->state) {
	case TLS_CONNECTING:
		if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0)
			return 0;
		return tls_on_connected(r, c);
	case TLS_TUNNEL:
		return tls_on_tunnel(r, c);
	case TLS_HANDSHAKE:
		return tls_on_handshake(r, c);
	case TLS_RESPONSE:
		return tls_on_response(r, c);
	case TLS_FREE:
	default:
		AN_ASSERT(!"an event for a free tls slot");
		return -EINVAL;
	}
}

static void tls_on_event(struct tls_run *r, const struct epoll_event *ev)
{
	uint32_t index = (uint32_t)(ev->data.u64 >> 32);
	int fd = (int)(uint32_t)ev->data.u64;

	AN_ASSERT(index < r->conns_len);
	struct tls_conn *c = &r->conns[index];
	/* A connection closed earlier in this batch: its slot waits for the next. */
	if (c->state == TLS_FREE || c->fd != fd)
		return;
	int res = tls_step(r, c, ev->events);
	if (res == 1)
		res = tls_response_done(r, c);
	if (res < 0)
		tls_failed(r, c, res);
}

/* Starts every free slot; returns how many failed at once (retried next turn). */
static uint32_t tls_start_free(struct tls_run *r)
{
	uint32_t failed = 0;

	AN_ASSERT(r->conns_len >= 1);
	for (uint32_t i = 0; i < r->conns_len; i++) {
		if (r->conns[i].state != TLS_FREE)
			continue;
		int err = tls_conn_start(r, i);
		if (err != 0) {
			tls_failed(r, &r->conns[i], err);
			failed++;
		}
	}
	AN_ASSERT(failed <= r->conns_len);
	return failed;
}

/* Fails the connections stuck in one step for longer than LOADGEN_IO_TIMEOUT_S. */
static void tls_expire(struct tls_run *r)
{
	const uint64_t limit_ns = (uint64_t)LOADGEN_IO_TIMEOUT_S * 1000000000ull;
	uint64_t now = now_ns();

	AN_ASSERT(r->conns_len <= LOADGEN_RATE_CONCURRENCY_MAX);
	for (uint32_t i = 0; i < r->conns_len; i++) {
		struct tls_conn *c = &r->conns[i];
		if (c->state == TLS_FREE)
			continue;
		AN_ASSERT(now >= c->step_ns);
		if (now - c->step_ns > limit_ns)
			tls_failed(r, c, -ETIMEDOUT);
	}
	r->expire_ns = now + LOADGEN_RATE_EXPIRE_NS;
}

static uint32_t tls_loop_start(void *run)
{
	return tls_start_free(run);
}

static void tls_loop_event(void *run, struct epoll_event *ev)
{
	tls_on_event(run, ev);
}

static void tls_loop_expire(void *run)
{
	tls_expire(run);
}

static int tls_loop(struct tls_run *r)
{
	AN_ASSERT(r->mark_ns < r->end_ns);
	AN_ASSERT(r->ep >= 0);
	const struct load_loop l = { .run = r,
				     .ep = r->ep,
				     .end_ns = r->end_ns,
				     .expire_ns = &r->expire_ns,
				     .start = tls_loop_start,
				     .on_event = tls_loop_event,
				     .expire = tls_loop_expire };
	return load_loop_run(&l);
}

static void *tls_thread(void *arg)
{
	struct tls_run *r = arg;

	AN_ASSERT(r->conns_len >= 1);
	AN_ASSERT(r->plan->ctx != NULL);
	r->ep = epoll_create1(EPOLL_CLOEXEC);
	if (r->ep == -1) {
		r->err = -errno;
		return NULL;
	}
	for (uint32_t i = 0; i < r->conns_len; i++)
		r->conns[i].fd = -1;
	r->err = tls_loop(r);
	for (uint32_t i = 0; i < r->conns_len; i++) {
		if (r->conns[i].state != TLS_FREE)
			tls_conn_close(&r->conns[i]);
	}
	close(r->ep);
	return NULL;
}

/* Adds up the <threads> runs and prints the JSON line; fails on too many errors. */
static int tls_report(const struct loadgen_opts *o, const struct tls_run *runs, uint32_t threads)
{
	uint64_t done = 0, counted = 0, handshakes = 0, handshakes_done = 0, seen = 0, errors = 0;
	struct rate_hist *h = &tls_hist_total;

	AN_ASSERT(threads >= 1 && threads <= LOADGEN_TLS_THREADS_MAX);
	AN_ASSERT(o->seconds >= 1);
	memset(h, 0, sizeof(*h));
	for (uint32_t t = 0; t < threads; t++) {
		done += runs[t].done;
		counted += runs[t].counted;
		handshakes += runs[t].handshakes;
		handshakes_done += runs[t].handshakes_done;
		seen += runs[t].leaves_seen;
		errors += runs[t].errors;
		for (uint32_t i = 0; i < LOADGEN_HIST_BUCKETS; i++)
			h->counts[i] += runs[t].hist.counts[i];
		h->total += runs[t].hist.total;
	}
	AN_ASSERT(h->total == counted);
	printf("{\"mode\": \"tls\", \"shape\": \"%s\", \"concurrency\": %u, \"threads\": %u, "
	       "\"seconds\": %u, \"requests_per_conn\": %u, \"count\": %llu, \"per_s\": %.1f, "
	       "\"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, \"handshakes\": %llu, "
	       "\"handshakes_per_s\": %.1f, \"leaf_seen\": %llu, \"errors\": %llu, "
	       "\"count_total\": %llu, \"handshakes_total\": %llu}\n",
	       o->handshakes ? "handshakes" : "keepalive", o->concurrency, o->threads, o->seconds,
	       o->handshakes ? 1u : o->requests, (unsigned long long)counted,
	       (double)counted / (double)o->seconds, hist_percentile_us(h, 500),
	       hist_percentile_us(h, 990), hist_percentile_us(h, 999),
	       (unsigned long long)handshakes, (double)handshakes / (double)o->seconds,
	       (unsigned long long)seen, (unsigned long long)errors, (unsigned long long)done,
	       (unsigned long long)handshakes_done);
	fflush(stdout);
	if (counted == 0) {
		fprintf(stderr, "loadgen: tls: no request answered in the measured window\n");
		return -EIO;
	}
	if (errors * 100u > (done + errors) * LOADGEN_RATE_ERRORS_PCT_MAX) {
		fprintf(stderr, "loadgen: tls: %llu connections failed, %llu requests answered\n",
			(unsigned long long)errors, (unsigned long long)done);
		return -EIO;
	}
	return 0;
}

/* Gives thread <t> of <threads> its share of the <o->concurrency> slots. */
static void tls_run_init(struct tls_run *r, const struct loadgen_opts *o, uint32_t t,
			 uint32_t threads)
{
	uint32_t first = (uint32_t)((uint64_t)o->concurrency * t / threads);
	uint32_t last = (uint32_t)((uint64_t)o->concurrency * (t + 1u) / threads);

	AN_ASSERT(t < threads && threads <= o->concurrency);
	AN_ASSERT(first < last && last <= LOADGEN_RATE_CONCURRENCY_MAX);
	memset(r, 0, sizeof(*r));
	r->o = o;
	r->plan = &tls_plan_state;
	r->conns = &tls_conns[first];
	r->conns_len = last - first;
	r->ep = -1;
}

/* Runs <o->threads> threads over <o->concurrency> connections for the warm-up and
 * <o->seconds>, all with one window. */
static int run_tls(const struct loadgen_opts *o)
{
	uint32_t started = 0;
	int err;

	AN_ASSERT(o->mode == MODE_TLS);
	AN_ASSERT(o->threads >= 1 && o->threads <= o->concurrency);
	err = tls_plan_init(o, &tls_plan_state);
	if (err != 0)
		goto out_free_ctx;
	uint64_t mark = now_ns() + LOADGEN_WARMUP_NS;
	uint64_t end = mark + (uint64_t)o->seconds * 1000000000ull;
	for (; started < o->threads; started++) {
		struct tls_run *r = &tls_runs[started];
		tls_run_init(r, o, started, o->threads);
		r->mark_ns = mark;
		r->end_ns = end;
		r->expire_ns = now_ns() + LOADGEN_RATE_EXPIRE_NS;
		int ret = pthread_create(&r->thread, NULL, tls_thread, r);
		if (ret != 0) {
			err = -ret;
			break;
		}
	}
	for (uint32_t t = 0; t < started; t++) {
		pthread_join(tls_runs[t].thread, NULL);
		if (err == 0)
			err = tls_runs[t].err;
	}
	if (err == 0)
		err = tls_report(o, tls_runs, started);
out_free_ctx:
	SSL_CTX_free(tls_plan_state.ctx);
	tls_plan_state.ctx = NULL;
	return err;
}

/* ---- quiet: paced requests of many sandboxes, beside a flood ------------ */

/* One quiet sandbox's keep-alive connection and its request in flight. */
struct quiet_conn {
	int fd;
	bool busy;         /* a request is in flight */
	bool blocked;      /* the last answer came after the next request was due */
	uint32_t in_bytes; /* of its answer */
	uint64_t due_ns;   /* when the request in flight (or the next one) was due */
	uint64_t sent_ns;  /* when the one in flight went out */
	uint64_t start_ns; /* its latency counts from this: sent_ns or, blocked, due_ns */
	char answer[LOADGEN_HEAD_BYTES_MAX];
};

/* Latencies of a set of requests: their histogram and the largest. */
struct quiet_figures {
	struct rate_hist hist;
	uint64_t max_ns;
};

enum quiet_kind {
	QUIET_ON = 0, /* the flood runs: the even phases */
	QUIET_OFF,    /* the flood is stopped */
	QUIET_KINDS,
};

struct quiet_run {
	const struct loadgen_opts *o;
	int ep;
	int tfd; /* a timerfd armed at the next deadline, absolute */
	size_t request_len;
	char request[LOADGEN_HEAD_BYTES_MAX];
	uint64_t warmup_ns; /* the schedule's start: what is due before start_ns is not counted */
	uint64_t start_ns;  /* the first phase's start */
	uint64_t end_ns;
	uint64_t period_ns; /* between a sandbox's requests */
	uint64_t phase_ns;
	uint64_t settle_ns;
	uint64_t switch_ns;   /* the next phase's start (with a flood) */
	uint32_t phase_index; /* the phase the flood is in now */
	uint32_t phase_count;
	uint64_t answered; /* counted: due at start_ns or later */
	uint64_t warmup_answered;
	uint64_t errors;
	uint64_t non_200;
	struct quiet_figures every;
	struct quiet_figures kinds[QUIET_KINDS];
	struct rate_hist lags[QUIET_KINDS]; /* a send's lateness past its due time */
	struct rate_hist phases[LOADGEN_QUIET_PHASES_MAX];
	struct quiet_conn conns[LOADGEN_QUIET_MAX];
};

static struct quiet_run quiet_state;

/* epoll's data for the timerfd: past every connection's index. */
#define LOADGEN_QUIET_TIMER LOADGEN_QUIET_MAX

static void quiet_figures_add(struct quiet_figures *f, uint64_t ns)
{
	hist_add(&f->hist, ns);
	if (ns > f->max_ns)
		f->max_ns = ns;
	AN_ASSERT(f->max_ns >= ns);
}

/* Opens conn <index>'s connection to its sandbox's egress socket (blocking connect). */
static int quiet_open(struct quiet_run *r, uint32_t index)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct quiet_conn *c = &r->conns[index];

	AN_ASSERT(index < r->o->count);
	AN_ASSERT(c->fd == -1);
	int len = snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/sandboxes/%s%03u/egress.sock",
			   r->o->sock_dir, r->o->prefix, index);
	if (len < 0 || (size_t)len >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd == -1)
		return -errno;
	if (connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) == -1)
		return -errno;
	int err = set_nonblocking(c->fd);
	if (err != 0)
		return err;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = index };
	if (epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd, &ev) == -1)
		return -errno;
	c->busy = false;
	c->blocked = false;
	c->in_bytes = 0;
	return 0;
}

static void quiet_close(struct quiet_conn *c)
{
	if (c->fd >= 0)
		close(c->fd); /* epoll forgets it with its last reference */
	c->fd = -1;
	c->busy = false;
	AN_ASSERT(c->fd == -1);
}

/*
 * Counts conn <index>'s failure and opens it again; its next request is due
 * now, so a broken connection skips no request and makes up none. 0, or
 * -errno when the socket cannot be opened again (the daemon is gone).
 */
static int quiet_failed(struct quiet_run *r, uint32_t index, int err)
{
	struct quiet_conn *c = &r->conns[index];

	AN_ASSERT(err < 0);
	AN_ASSERT(index < r->o->count);
	if (r->errors < LOADGEN_RATE_ERRORS_LOGGED_MAX)
		fprintf(stderr, "loadgen: quiet: sandbox %u: %s\n", index, strerror(-err));
	r->errors++;
	quiet_close(c);
	c->due_ns = now_ns();
	return quiet_open(r, index);
}

/* The phase a request due at <due_ns> counts in, or -1 (no flood, or settling). */
static int32_t quiet_phase_of(const struct quiet_run *r, uint64_t due_ns)
{
	AN_ASSERT(due_ns >= r->warmup_ns);
	if (r->o->flood_pid == 0 || due_ns < r->start_ns)
		return -1;
	uint64_t since = due_ns - r->start_ns;
	if (since % r->phase_ns < r->settle_ns)
		return -1;
	AN_ASSERT(since / r->phase_ns < r->phase_count);
	return (int32_t)(since / r->phase_ns);
}

/* The answer on <c> is whole at <now>, its status <status>: counts it, schedules the next. */
static void quiet_done(struct quiet_run *r, struct quiet_conn *c, uint64_t now, uint32_t status)
{
	AN_ASSERT(c->busy);
	AN_ASSERT(now >= c->sent_ns && c->sent_ns >= c->due_ns);
	AN_ASSERT(c->start_ns == c->sent_ns || c->start_ns == c->due_ns);
	uint64_t latency_ns = now - c->start_ns;
	bool counted = c->due_ns >= r->start_ns;
	if (counted)
		quiet_figures_add(&r->every, latency_ns);
	int32_t phase = quiet_phase_of(r, c->due_ns);
	if (phase >= 0) {
		uint32_t kind = (uint32_t)phase & 1u;
		quiet_figures_add(&r->kinds[kind], latency_ns);
		if (c->start_ns == c->sent_ns) /* a blocked send's lag is the daemon's */
			hist_add(&r->lags[kind], c->sent_ns - c->due_ns);
		hist_add(&r->phases[phase], latency_ns);
	}
	r->answered += counted;
	r->warmup_answered += !counted;
	r->non_200 += status != 200;
	c->busy = false;
	c->in_bytes = 0;
	c->due_ns += r->period_ns;
	c->blocked = now > c->due_ns;
}

/* The status of a complete head's status line "HTTP/1.x NNN", or 0 if it has none. */
static uint32_t quiet_status(const char *head, size_t len)
{
	static const char version[] = "HTTP/1.";

	AN_ASSERT(head != NULL);
	if (len < sizeof(version) - 1 + 5 || memcmp(head, version, sizeof(version) - 1) != 0)
		return 0;
	const char *p = head + (sizeof(version) - 1) + 2; /* past "HTTP/1.x " */
	uint32_t status = 0;
	for (uint32_t i = 0; i < 3; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		status = status * 10u + (uint32_t)(p[i] - '0');
	}
	AN_ASSERT(status <= 999);
	return status;
}

/*
 * Whether <c>'s answer is whole: 1 and its status in *<status>, 0 while
 * some is missing, -EPROTO for bytes past its body (the daemon speaks only
 * when spoken to), -EMSGSIZE when it does not fit the buffer. Its body is
 * framed by Content-Length; none means none (as the Python client it replaced read it).
 */
static int quiet_answer_whole(const struct quiet_conn *c, uint32_t *status)
{
	size_t head_len = head_end(c->answer, c->in_bytes);

	AN_ASSERT(c->in_bytes <= sizeof(c->answer));
	if (head_len == 0)
		return c->in_bytes == sizeof(c->answer) ? -EMSGSIZE : 0;
	int64_t body_len = head_content_length(c->answer, head_len);
	if (body_len < 0)
		body_len = 0;
	uint64_t whole = head_len + (uint64_t)body_len;
	if (whole > sizeof(c->answer))
		return -EMSGSIZE;
	if (c->in_bytes > whole)
		return -EPROTO;
	if (c->in_bytes < whole)
		return 0;
	*status = quiet_status(c->answer, head_len);
	return 1;
}

/* Reads what conn <index> has; counts its answer once whole. 0, or -errno to reopen it. */
static int quiet_on_readable(struct quiet_run *r, uint32_t index)
{
	struct quiet_conn *c = &r->conns[index];
	uint32_t status = 0;

	AN_ASSERT(c->fd >= 0);
	for (;;) {
		if (c->in_bytes == sizeof(c->answer))
			return -EMSGSIZE;
		ssize_t n =
		    io_some(c->fd, false, c->answer + c->in_bytes, sizeof(c->answer) - c->in_bytes);
		if (n <= 0)
			return (int)n;
		if (!c->busy)
			return -EPROTO; /* bytes that answer nothing */
		c->in_bytes += (uint32_t)n;
		int whole = quiet_answer_whole(c, &status);
		if (whole < 0)
			return whole;
		if (whole == 1)
			quiet_done(r, c, now_ns(), status);
	}
}

/*
 * Sends the request of every idle conn that is due by <now>. Returns the
 * earliest due time of those still idle (INT64_MAX if none), or -errno when
 * a failed conn cannot be opened again.
 */
static int64_t quiet_send_due(struct quiet_run *r, uint64_t now)
{
	uint64_t next_ns = UINT64_MAX;

	AN_ASSERT(r->request_len > 0);
	for (uint32_t i = 0; i < r->o->count; i++) {
		struct quiet_conn *c = &r->conns[i];
		if (c->busy)
			continue;
		if (c->due_ns > now) {
			next_ns = c->due_ns < next_ns ? c->due_ns : next_ns;
			continue;
		}
		c->sent_ns = now_ns();
		c->start_ns = c->blocked ? c->due_ns : c->sent_ns;
		int err = send_whole(c->fd, r->request, r->request_len);
		if (err == 0) {
			c->busy = true;
			continue;
		}
		err = quiet_failed(r, i, err);
		if (err != 0)
			return err;
		next_ns = c->due_ns < next_ns ? c->due_ns : next_ns; /* due now: the next turn */
	}
	AN_ASSERT(next_ns >= now);
	return next_ns == UINT64_MAX ? INT64_MAX : (int64_t)next_ns;
}

/* Arms the timerfd at <at_ns> on CLOCK_MONOTONIC, absolute. */
static int quiet_arm(const struct quiet_run *r, uint64_t at_ns)
{
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(at_ns / 1000000000ull),
						.tv_nsec = (long)(at_ns % 1000000000ull) } };

	AN_ASSERT(at_ns > 0); /* zero would disarm it */
	AN_ASSERT(r->tfd >= 0);
	if (timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL) == -1)
		return -errno;
	return 0;
}

/* The flood's next phase begins: stops it or lets it run again. */
static int quiet_switch(struct quiet_run *r)
{
	AN_ASSERT(r->o->flood_pid != 0);
	AN_ASSERT(r->switch_ns <= now_ns());
	r->phase_index++;
	r->switch_ns += r->phase_ns;
	int sig = r->phase_index % 2u == QUIET_ON ? SIGCONT : SIGSTOP;
	if (kill((pid_t)r->o->flood_pid, sig) == -1)
		return -errno;
	return 0;
}

/* Handles one epoll event: the timer (nothing to do but drain it) or a readable conn. */
static int quiet_on_event(struct quiet_run *r, const struct epoll_event *ev)
{
	uint64_t ticks;

	if (ev->data.u64 == LOADGEN_QUIET_TIMER) {
		/* Drained: a level-triggered timerfd with ticks unread would wake every wait. */
		ssize_t n = read(r->tfd, &ticks, sizeof(ticks));
		AN_ASSERT(n == (ssize_t)sizeof(ticks) || (n == -1 && errno == EAGAIN));
		return 0;
	}
	uint32_t index = (uint32_t)ev->data.u64;
	AN_ASSERT(index < r->o->count);
	int err = quiet_on_readable(r, index);
	if (err == 0)
		return 0;
	return quiet_failed(r, index, err);
}

/* Until the end: phases switched, due requests sent, answers read. 0, or -errno. */
static int quiet_loop(struct quiet_run *r)
{
	struct epoll_event evs[LOADGEN_EVENTS_MAX];

	AN_ASSERT(r->start_ns < r->end_ns);
	AN_ASSERT(r->phase_index == 0);
	for (uint64_t now = now_ns(); now < r->end_ns; now = now_ns()) {
		while (r->o->flood_pid != 0 && now >= r->switch_ns) {
			int err = quiet_switch(r);
			if (err != 0)
				return err;
		}
		int64_t next = quiet_send_due(r, now);
		if (next < 0)
			return (int)next;
		uint64_t wake_ns = (uint64_t)next < r->end_ns ? (uint64_t)next : r->end_ns;
		if (r->o->flood_pid != 0 && r->switch_ns < wake_ns)
			wake_ns = r->switch_ns;
		int err = quiet_arm(r, wake_ns);
		if (err != 0)
			return err;
		int n = epoll_wait(r->ep, evs, LOADGEN_EVENTS_MAX, -1);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		for (int i = 0; i < n && err == 0; i++)
			err = quiet_on_event(r, &evs[i]);
		if (err != 0)
			return err;
	}
	return 0;
}

/* The median of <values> (<n> > 0 of them), which it sorts. */
static double median_of(double *values, uint32_t n)
{
	AN_ASSERT(n > 0);
	for (uint32_t i = 1; i < n; i++) {
		double v = values[i];
		uint32_t j = i;
		for (; j > 0 && values[j - 1] > v; j--)
			values[j] = values[j - 1];
		values[j] = v;
	}
	AN_ASSERT(values[0] <= values[n - 1]);
	return n % 2u ? values[n / 2u] : (values[n / 2u - 1u] + values[n / 2u]) / 2.0;
}

/* Prints "p50_us": .. "max_us": .. of <f>, null for percentiles of none. */
static void quiet_print_figures(const struct quiet_figures *f)
{
	const struct rate_hist *h = &f->hist;

	printf("\"requests\": %llu, ", (unsigned long long)h->total);
	if (h->total == 0) {
		printf("\"p50_us\": null, \"p99_us\": null, \"p999_us\": null, \"max_us\": 0");
		return;
	}
	printf("\"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f",
	       hist_percentile_us(h, 500), hist_percentile_us(h, 990), hist_percentile_us(h, 999),
	       (double)f->max_ns / 1e3);
}

/* Prints "phase_p99_us": each phase's p99, by kind, and "median_p99_us": their medians. */
static void quiet_print_phases(const struct quiet_run *r)
{
	static double p99s[QUIET_KINDS][LOADGEN_QUIET_PHASES_MAX];
	static const char *const names[QUIET_KINDS] = { "on", "off" };
	uint32_t n[QUIET_KINDS] = { 0, 0 };

	AN_ASSERT(r->phase_count <= LOADGEN_QUIET_PHASES_MAX);
	printf(", \"phase_p99_us\": {\"on\": [");
	for (uint32_t kind = 0; kind < QUIET_KINDS; kind++) {
		printf("%s", kind == QUIET_ON ? "" : "], \"off\": [");
		for (uint32_t i = kind; i < r->phase_count; i += 2u) {
			if (r->phases[i].total == 0)
				continue;
			p99s[kind][n[kind]] = hist_percentile_us(&r->phases[i], 990);
			printf("%s%.1f", n[kind] ? ", " : "", p99s[kind][n[kind]]);
			n[kind]++;
		}
	}
	printf("]}, \"median_p99_us\": {");
	for (uint32_t kind = 0; kind < QUIET_KINDS; kind++) {
		printf("%s\"%s\": ", kind == QUIET_ON ? "" : ", ", names[kind]);
		if (n[kind] == 0)
			printf("null");
		else
			printf("%.1f", median_of(p99s[kind], n[kind]));
	}
	printf("}");
}

/* Prints the run's JSON line; fails it when no request was answered. */
static int quiet_report(const struct quiet_run *r, uint64_t unanswered)
{
	static const char *const names[QUIET_KINDS] = { "on", "off" };

	AN_ASSERT(r->every.hist.total == r->answered);
	printf("{\"errors\": %llu, \"non_200\": %llu, \"unanswered\": %llu, \"seconds\": %.3f, "
	       "\"warmup_requests\": %llu, ",
	       (unsigned long long)r->errors, (unsigned long long)r->non_200,
	       (unsigned long long)unanswered, (double)(now_ns() - r->start_ns) / 1e9,
	       (unsigned long long)r->warmup_answered);
	quiet_print_figures(&r->every);
	for (uint32_t kind = 0; kind < QUIET_KINDS && r->o->flood_pid != 0; kind++) {
		const struct rate_hist *lag = &r->lags[kind];
		printf(", \"%s\": {", names[kind]);
		quiet_print_figures(&r->kinds[kind]);
		printf(", \"send_lag_p99_us\": %.1f}", hist_percentile_us(lag, 990));
	}
	if (r->o->flood_pid != 0)
		quiet_print_phases(r);
	printf("}\n");
	fflush(stdout);
	AN_ASSERT(r->kinds[QUIET_ON].hist.total + r->kinds[QUIET_OFF].hist.total <= r->answered);
	if (r->answered == 0) {
		fprintf(stderr, "loadgen: quiet: no request answered\n");
		return -EIO;
	}
	return 0;
}

/* The schedule: each conn's first request due within the first period, spread evenly. */
static void quiet_plan(struct quiet_run *r, const struct loadgen_opts *o)
{
	int len = snprintf(r->request, sizeof(r->request),
			   "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", o->host, o->host);

	AN_ASSERT(len > 0 && (size_t)len < sizeof(r->request));
	r->request_len = (size_t)len;
	r->period_ns = 1000000000ull / o->rate;
	r->phase_ns = (uint64_t)o->phase_ms * 1000000ull;
	r->settle_ns = (uint64_t)o->settle_ms * 1000000ull;
	r->warmup_ns = now_ns();
	r->start_ns = r->warmup_ns + (uint64_t)o->warmup_ms * 1000000ull;
	r->end_ns = r->start_ns + (uint64_t)o->seconds * 1000000000ull;
	r->switch_ns = r->start_ns + r->phase_ns;
	r->phase_count = (uint32_t)((r->end_ns - r->start_ns + r->phase_ns - 1u) / r->phase_ns);
	for (uint32_t i = 0; i < o->count; i++)
		r->conns[i].due_ns = r->warmup_ns + r->period_ns * i / o->count;
	AN_ASSERT(o->flood_pid == 0 || r->phase_count <= LOADGEN_QUIET_PHASES_MAX);
}

/*
 * Opens every conn, then runs the schedule for <o->seconds> (the flood let
 * run at the start and at the end, whatever happened) and prints the JSON.
 */
static int run_quiet(const struct loadgen_opts *o)
{
	struct quiet_run *r = &quiet_state;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = LOADGEN_QUIET_TIMER };
	int err = 0;

	AN_ASSERT(o->mode == MODE_QUIET);
	AN_ASSERT(o->count >= 1 && o->count <= LOADGEN_QUIET_MAX);
	memset(r, 0, sizeof(*r)); /* also touches every page before the clock starts */
	r->o = o;
	for (uint32_t i = 0; i < LOADGEN_QUIET_MAX; i++)
		r->conns[i].fd = -1;
	r->ep = epoll_create1(EPOLL_CLOEXEC);
	if (r->ep == -1)
		return -errno;
	r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (r->tfd == -1 || epoll_ctl(r->ep, EPOLL_CTL_ADD, r->tfd, &ev) == -1) {
		err = -errno;
		goto out_close;
	}
	for (uint32_t i = 0; i < o->count && err == 0; i++)
		err = quiet_open(r, i);
	if (err != 0)
		goto out_close;
	quiet_plan(r, o);
	if (o->flood_pid != 0 && kill((pid_t)o->flood_pid, SIGCONT) == -1)
		err = -errno;
	if (err == 0)
		err = quiet_loop(r);
	if (o->flood_pid != 0)
		(void)kill((pid_t)o->flood_pid, SIGCONT);
	uint64_t unanswered = 0;
	for (uint32_t i = 0; i < o->count; i++)
		unanswered += r->conns[i].busy;
	if (err == 0)
		err = quiet_report(r, unanswered);
out_close:
	for (uint32_t i = 0; i < o->count; i++)
		quiet_close(&r->conns[i]);
	if (r->tfd != -1)
		close(r->tfd);
	close(r->ep);
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
	AN_ASSERT(fd >= 0 && (uint32_t)fd < LOADGEN_FDS_MAX);
	AN_ASSERT(origin_states[fd] != ORIGIN_FREE);
	/* --reset-pinged: RST frees the proxy's FIN_WAIT socket, no TIME_WAIT. */
	if (origin_resets_pinged && origin_states[fd] == ORIGIN_PINGED) {
		struct linger abortive = { .l_onoff = 1, .l_linger = 0 };
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
	}
	(void)epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	origin_states[fd] = ORIGIN_FREE;
	origin_match[fd] = 0;
	origin_hello_head[fd] = 0;
	origin_hello_left[fd] = 0;
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
		if ((uint32_t)fd >= LOADGEN_FDS_MAX) {
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
	size_t start = origin_states[fd] == ORIGIN_WAIT_CMD ? origin_hello_skip(fd, buf, len) : 0;
	for (size_t i = start; i < len; i++) {
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
		ssize_t n = send(fd, ping_answer, LOADGEN_PING_BYTES, MSG_NOSIGNAL);
		if (n != (ssize_t)LOADGEN_PING_BYTES)
			return -EAGAIN;
		origin_states[fd] = ORIGIN_PINGED;
	}
	AN_ASSERT(origin_states[fd] == ORIGIN_WAIT_CMD || origin_states[fd] == ORIGIN_PINGED);
	return 0;
}

/* Readable connection: command bytes, data to discard, or HTTP heads. */
static int origin_on_read(int ep, int fd)
{
	AN_ASSERT(fd >= 0 && (uint32_t)fd < LOADGEN_FDS_MAX);
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

	AN_ASSERT(fd >= 0 && (uint32_t)fd < LOADGEN_FDS_MAX);
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
	struct epoll_event evs[LOADGEN_EVENTS_MAX];

	AN_ASSERT(lfd >= 0);
	AN_ASSERT(sfd >= 0);
	for (;;) {
		int n = epoll_wait(ep, evs, LOADGEN_EVENTS_MAX, -1);
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

static int run_origin(struct loadgen_opts *o)
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
	for (uint32_t fd = 0; fd < LOADGEN_FDS_MAX; fd++) {
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
	    "  loadgen origin --listen HOST:PORT [--http] [--reset-pinged]\n"
	    "  loadgen throughput (--proxy HOST:PORT | --proxy-unix PATH | --direct)\n"
	    "          --target HOST:PORT [--authority NAME:PORT] [--streams N]\n"
	    "          [--seconds T] [--dir down|up]\n"
	    "  loadgen idle (--proxy HOST:PORT | --proxy-unix PATH | --direct)\n"
	    "          --target HOST:PORT [--authority NAME:PORT] --count N [--hold-seconds T]\n"
	    "  loadgen rate (--proxy HOST:PORT | --proxy-unix PATH | --direct)\n"
	    "          --target HOST:PORT [--authority NAME:PORT] [--concurrency C] [--seconds T]\n"
	    "  loadgen tls (--proxy HOST:PORT | --proxy-unix PATH | --direct --target HOST:PORT)\n"
	    "          [--authority NAME:PORT] --ca FILE [--sni NAME] [--path PATH]\n"
	    "          [--header \"NAME: VALUE\"] [--requests K | --handshakes]\n"
	    "          [--concurrency C] [--threads T] [--seconds T]\n"
	    "  loadgen quiet --sock-dir DIR [--prefix P] --count N [--rate R] [--seconds T]\n"
	    "          [--host NAME] [--flood-pid PID] [--phase-seconds S] [--settle-seconds S]\n"
	    "          [--warmup-seconds S]\n"
	    "\n"
	    "Proxied, the CONNECT authority defaults to --target. The origin's commands:\n"
	    "'D' sends, 'U' discards, 'P' answers %u bytes and waits for the next.\n",
	    LOADGEN_PING_BYTES);
}

int main(int argc, char **argv)
{
	struct loadgen_opts o;
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
	case MODE_TLS:
		err = run_tls(&o);
		break;
	case MODE_QUIET:
		err = run_quiet(&o);
		break;
	case MODE_NONE:
	default:
		AN_ASSERT(!"opts_parse accepted no mode");
		err = -EINVAL;
		break;
	}
	if (err != 0)
		fprintf(stderr, "loadgen: %s\n", strerror(-err));
	return err == 0 ? 0 : 1;
}
