/*
 * agentsnet-bridge: the sandbox's init (docs/design.md section 2). It relays 127.0.0.1:8080 to the
 * mounted egress socket and the mounted ingress socket to 127.0.0.1:$AGENT_INGRESS_PORT, sets
 * the variables of docs/design.md section 1 from one table (bridge_vars), forks the agent under a
 * seccomp filter and stays as its PID 1: signals forwarded, every child reaped, the agent's
 * status returned as its own (exit code, or 128 + signal).
 *
 * One thread and one epoll set do everything: listeners, relays and a signalfd. A relay
 * direction is a pipe and non-blocking splice, edge-triggered: it fills its pipe only when it
 * is empty, then drains it completely, so EAGAIN on the fill means "source dry" and on the
 * drain "destination full". A direction that used its byte budget yields to a ready queue. EOF
 * becomes shutdown(SHUT_WR) on the other side. The daemon going away ends the stream toward
 * the agent at once; when the daemon stops reading (an early 403, 413), what the agent still
 * sends is dropped, so the answer arrives whole, ended by a FIN. A failure on the agent's side
 * aborts both sides, with a reset toward TCP: the agent sees an error, never a hang. Rejected:
 * two blocking threads per connection (2048 threads against a pids limit); io_uring (the
 * bridge links only libc and libseccomp); a copy loop through user memory.
 *
 * The agent leads a session of its own (setsid) and takes the first standard descriptor that
 * is a terminal as its controlling one (`agentsnet run` gives it a pty of its own; under
 * `docker run -it` the bridge gives the terminal up first), so ^C and SIGWINCH reach it
 * directly; what is sent to the bridge is passed on. Its group is orphaned (its parent is in
 * another session): the kernel discards job-control stops for it. When it exits, what is left
 * of its group is killed. Containment (docs/design.md section 9): the agent's filter (below); the
 * bridge non-dumpable before it opens anything, and once the agent is forked under a filter of
 * its own, with errnos, not kills, so a sanitizer forking a symbolizer fails visibly (and
 * _exit skips LeakSanitizer's ptrace). Invariants: conns_in_use counts slots with in_use; a
 * free slot holds no descriptor; a slot is on the ready queue at most once.
 *
 * In files of their own: tools/bridge/relay.c (the relay's connections and halves),
 * tools/bridge/filter.c (the seccomp filters); tools/bridge/bridge_int.h what they share.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "tools/bridge/bridge_int.h"
#include "core/an.h"

/* Exit codes of the bridge's own failures, as env(1), timeout(1) and `docker run` use them. */
#define BRIDGE_EXIT_FAILURE  125
#define BRIDGE_EXIT_NOEXEC   126
#define BRIDGE_EXIT_NOTFOUND 127

#define BRIDGE_EGRESS_DEFAULT   "/run/agentsnet/sandbox/egress.sock"
#define BRIDGE_INGRESS_DEFAULT  "/run/agentsnet/sandbox/ingress.sock"
#define BRIDGE_LISTEN_DEFAULT   "127.0.0.1:8080"
#define BRIDGE_NO_PROXY_DEFAULT "localhost,127.0.0.1"
#define BRIDGE_INGRESS_PORT_DEF 8081

static_assert(BRIDGE_CONNS_MAX <= (1u << 20), "a slot index must fit the event word");
static_assert(BRIDGE_SPLICE_BYTES <= BRIDGE_PUMP_BYTES_MAX, "one fill fits the budget");

struct bridge_opts {
	const char *egress_path;
	const char *ingress_path;
	const char *ca_path;    /* NULL: no CA bundle mounted */
	const char *public_url; /* NULL: no public URL */
	const char *no_proxy;
	char **cmd;     /* borrowed from argv, NULL-terminated; NULL when none was given */
	int ingress_fd; /* an inherited ingress listener (--ingress-fd), or -1 */
	struct sockaddr_storage listen_sa;
	socklen_t listen_sa_len;
	uint16_t ingress_port;
	bool print_env;
	bool no_seccomp;
	bool help;
	char proxy_url[64];        /* http://<listen address>:<port> */
	char ingress_port_text[8]; /* decimal */
};

/*
 * Where each variable's value comes from. Adding a source: also extend var_value().
 */
enum var_src {
	VAR_PROXY,
	VAR_NO_PROXY,
	VAR_INGRESS_PORT,
	VAR_PUBLIC_URL,
	VAR_CA,
	VAR_ONE,
};

struct bridge_var {
	const char *name;
	enum var_src src;
	const char *reader; /* who reads it, for --help */
};

/*
 * The agent's environment: set in this order, printed by --print-env, listed by --help. A
 * variable the caller already set is overwritten: the sandbox's contract wins, because a proxy
 * or CA variable inherited from the image points at something this sandbox cannot reach.
 * The exception is AGENT_NO_PROXY, which the caller may set (and NO_PROXY/no_proxy follow it).
 * Without a CA bundle the CA variables are left as the caller set them. ALL_PROXY/all_proxy are
 * deliberately not set: clients read them with SOCKS semantics too, the listener speaks only
 * the HTTP proxy protocol, and every client that reads both prefers the scheme variables below.
 * Adding a runtime: add its variables here; the unit test checks every row.
 */
static const struct bridge_var bridge_vars[] = {
	{ "AGENT_HTTP_PROXY", VAR_PROXY, "the agent (docs/design.md section 1)" },
	{ "AGENT_HTTPS_PROXY", VAR_PROXY, "the agent" },
	{ "AGENT_NO_PROXY", VAR_NO_PROXY, "the agent (the caller may set it)" },
	{ "AGENT_INGRESS_PORT", VAR_INGRESS_PORT, "the agent: bind 127.0.0.1 on it for ingress" },
	{ "AGENT_PUBLIC_URL", VAR_PUBLIC_URL, "the agent: the URL third parties call back" },
	{ "AGENT_CA_CERT", VAR_CA, "the agent: the CA bundle (host roots + agentsnet CA)" },
	{ "HTTP_PROXY", VAR_PROXY, "Python, Go, Deno, Node >= 22.21, AWS SDKs, pip" },
	{ "http_proxy", VAR_PROXY, "curl (which ignores HTTP_PROXY), git, wget" },
	{ "HTTPS_PROXY", VAR_PROXY, "Python, Go, Deno, Node >= 22.21, AWS SDKs, pip" },
	{ "https_proxy", VAR_PROXY, "curl, git, wget" },
	{ "NO_PROXY", VAR_NO_PROXY, "most clients" },
	{ "no_proxy", VAR_NO_PROXY, "curl, git, wget" },
	{ "NODE_USE_ENV_PROXY", VAR_ONE, "Node >= 22.21 and 24: fetch and http use the above" },
	{ "npm_config_proxy", VAR_PROXY, "npm" },
	{ "npm_config_https_proxy", VAR_PROXY, "npm" },
	{ "CARGO_HTTP_PROXY", VAR_PROXY, "cargo" },
	{ "NODE_EXTRA_CA_CERTS", VAR_CA, "Node (added to its built-in roots)" },
	{ "REQUESTS_CA_BUNDLE", VAR_CA, "Python requests (replaces its roots)" },
	{ "SSL_CERT_FILE", VAR_CA, "OpenSSL users: Python ssl and urllib, Ruby, Go, uv" },
	{ "CURL_CA_BUNDLE", VAR_CA, "curl" },
	{ "GIT_SSL_CAINFO", VAR_CA, "git" },
	{ "PIP_CERT", VAR_CA, "pip" },
	{ "npm_config_cafile", VAR_CA, "npm" },
	{ "CARGO_HTTP_CAINFO", VAR_CA, "cargo" },
	{ "DENO_CERT", VAR_CA, "Deno" },
	{ "AWS_CA_BUNDLE", VAR_CA, "AWS CLI and SDKs" },
};

/* Signals the bridge passes on to the agent; SIGCHLD and SIGCONT it handles itself. */
static const int bridge_forwarded[] = {
	SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH
};

uint64_t ev_pack(enum ev_tag tag, uint32_t idx, uint32_t side, uint32_t gen)
{
	AN_ASSERT(idx < BRIDGE_CONNS_MAX);
	AN_ASSERT(side <= 1);
	return (uint64_t)gen << 32 | (uint64_t)idx << 4 | (uint64_t)side << 3 | (uint64_t)tag;
}

/* One line on stderr, prefixed; stderr is unbuffered, so it is written at once. */
void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0) {
		return;
	}
	fprintf(stderr, "agentsnet-bridge: %s\n", line);
}

/* ---- Options ------------------------------------------------------------------------------ */

/* Accepts 1..65535 in plain decimal, nothing else. Returns 0 or -EINVAL. */
static int parse_port(const char *s, uint16_t *out)
{
	AN_ASSERT(s != NULL);
	AN_ASSERT(out != NULL);
	uint32_t v = 0;
	size_t len = strlen(s);
	if (len == 0 || len > 5) {
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return -EINVAL;
		}
		v = v * 10u + (uint32_t)(s[i] - '0');
	}
	if (v == 0 || v > 65535u) {
		return -EINVAL;
	}
	*out = (uint16_t)v;
	return 0;
}

/*
 * Parses <s> as 127.x.y.z:port or [::1]:port into <o>'s listen address and proxy URL. Anything
 * else, names included (there is no resolver in a sandbox), is refused: -EINVAL.
 */
static int parse_listen(struct bridge_opts *o, const char *s)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(s != NULL);
	char host[INET6_ADDRSTRLEN];
	const char *colon = strrchr(s, ':');
	const char *h = s;
	size_t hlen = colon != NULL ? (size_t)(colon - s) : 0;
	bool v6 = s[0] == '[';
	if (v6) {
		h = s + 1;
		if (hlen < 2 || s[hlen - 1] != ']') {
			return -EINVAL;
		}
		hlen -= 2;
	}
	if (colon == NULL || hlen == 0 || hlen >= sizeof(host)) {
		return -EINVAL;
	}
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	uint16_t port;
	if (parse_port(colon + 1, &port) != 0) {
		return -EINVAL;
	}
	memset(&o->listen_sa, 0, sizeof(o->listen_sa));
	int n;
	if (v6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&o->listen_sa;
		if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1 ||
		    !IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)) {
			return -EINVAL;
		}
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		o->listen_sa_len = sizeof(*sin6);
		n = snprintf(o->proxy_url, sizeof(o->proxy_url), "http://[::1]:%u", port);
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&o->listen_sa;
		if (inet_pton(AF_INET, host, &sin->sin_addr) != 1 ||
		    (ntohl(sin->sin_addr.s_addr) >> 24) != 127u) {
			return -EINVAL;
		}
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		o->listen_sa_len = sizeof(*sin);
		n = snprintf(o->proxy_url, sizeof(o->proxy_url), "http://%s:%u", host, port);
	}
	AN_ASSERT(n > 0 && (size_t)n < sizeof(o->proxy_url));
	return 0;
}

/*
 * A value that goes into the environment and into --print-env's NAME=VALUE lines: not empty,
 * no control bytes (a newline would forge a line). Returns 0 or -EINVAL.
 */
static int check_text(const char *s)
{
	AN_ASSERT(s != NULL);
	if (s[0] == '\0') {
		return -EINVAL;
	}
	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			return -EINVAL;
		}
	}
	AN_ASSERT(strlen(s) > 0);
	return 0;
}

/* Returns the environment variable <name> when it is set and not empty, else <def>. */
static const char *env_or(const char *name, const char *def)
{
	AN_ASSERT(name != NULL);
	const char *v = getenv(name);
	return v != NULL && v[0] != '\0' ? v : def;
}

/* Checks the options that came from flags or the environment; the message goes to <err>. */
static int opts_check(struct bridge_opts *o, char *err, size_t err_len)
{
	AN_ASSERT(o->egress_path != NULL);
	AN_ASSERT(o->ingress_path != NULL);
	struct sockaddr_un sun;
	const char *paths[] = { o->egress_path, o->ingress_path };
	for (size_t i = 0; i < AN_ARRAY_LEN(paths); i++) {
		if (check_text(paths[i]) != 0 || strlen(paths[i]) >= sizeof(sun.sun_path)) {
			snprintf(err, err_len, "socket path '%s': empty, too long or not text",
				 paths[i]);
			return -EINVAL;
		}
	}
	const char *texts[] = { o->ca_path, o->public_url, o->no_proxy };
	for (size_t i = 0; i < AN_ARRAY_LEN(texts); i++) {
		if (texts[i] != NULL && check_text(texts[i]) != 0) {
			snprintf(err, err_len, "'%s': control characters are refused", texts[i]);
			return -EINVAL;
		}
	}
	if (o->cmd == NULL && !o->print_env && !o->help) {
		snprintf(err, err_len, "no command given (agentsnet-bridge [options] -- CMD...)");
		return -EINVAL;
	}
	int n = snprintf(o->ingress_port_text, sizeof(o->ingress_port_text), "%u", o->ingress_port);
	AN_ASSERT(n > 0 && (size_t)n < sizeof(o->ingress_port_text));
	return 0;
}

/* Fills <o> with the defaults, which come from the environment (the contract's names). */
static int opts_defaults(struct bridge_opts *o, char *err, size_t err_len)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(err != NULL);
	memset(o, 0, sizeof(*o));
	o->egress_path = env_or("AGENTSNET_EGRESS_SOCKET", BRIDGE_EGRESS_DEFAULT);
	o->ingress_path = env_or("AGENTSNET_INGRESS_SOCKET", BRIDGE_INGRESS_DEFAULT);
	o->ca_path = env_or("AGENT_CA_CERT", NULL);
	o->public_url = env_or("AGENT_PUBLIC_URL", NULL);
	o->no_proxy = env_or("AGENT_NO_PROXY", BRIDGE_NO_PROXY_DEFAULT);
	o->ingress_port = BRIDGE_INGRESS_PORT_DEF;
	o->ingress_fd = -1;
	const char *port = env_or("AGENT_INGRESS_PORT", NULL);
	if (port != NULL && parse_port(port, &o->ingress_port) != 0) {
		snprintf(err, err_len, "AGENT_INGRESS_PORT '%s': not a port (1-65535)", port);
		return -EINVAL;
	}
	int rc = parse_listen(o, BRIDGE_LISTEN_DEFAULT);
	AN_ASSERT(rc == 0);
	return 0;
}

enum {
	OPT_EGRESS = 256,
	OPT_INGRESS,
	OPT_LISTEN,
	OPT_INGRESS_PORT,
	OPT_CA,
	OPT_PUBLIC_URL,
	OPT_PRINT_ENV,
	OPT_NO_SECCOMP,
	OPT_INGRESS_FD,
};

/* Accepts a descriptor number in plain decimal, 0..99999999. Returns 0 or -EINVAL. */
static int parse_fd(const char *s, int *out)
{
	AN_ASSERT(s != NULL);
	AN_ASSERT(out != NULL);
	size_t len = strlen(s);
	if (len == 0 || len > 8 || strspn(s, "0123456789") != len) {
		return -EINVAL;
	}
	int v = 0;
	for (size_t i = 0; i < len; i++) {
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

/* Applies the option <c> with its argument <arg> to <o>. Returns 0 or -EINVAL with <err>. */
static int opt_apply(struct bridge_opts *o, int c, char *arg, char *err, size_t err_len)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(err_len > 0);
	switch (c) {
	case OPT_EGRESS:
		o->egress_path = arg;
		return 0;
	case OPT_INGRESS:
		o->ingress_path = arg;
		return 0;
	case OPT_LISTEN:
		if (parse_listen(o, arg) != 0) {
			snprintf(err, err_len,
				 "--listen '%s': not a loopback address and port (127.0.0.1:8080 "
				 "or [::1]:8080)",
				 arg);
			return -EINVAL;
		}
		return 0;
	case OPT_INGRESS_PORT:
		if (parse_port(arg, &o->ingress_port) != 0) {
			snprintf(err, err_len, "--ingress-port '%s': not a port (1-65535)", arg);
			return -EINVAL;
		}
		return 0;
	case OPT_CA:
		o->ca_path = arg;
		return 0;
	case OPT_PUBLIC_URL:
		o->public_url = arg;
		return 0;
	case OPT_PRINT_ENV:
		o->print_env = true;
		return 0;
	case OPT_NO_SECCOMP:
		o->no_seccomp = true;
		return 0;
	case OPT_INGRESS_FD:
		if (parse_fd(arg, &o->ingress_fd) != 0) {
			snprintf(err, err_len, "--ingress-fd '%s': not a descriptor number", arg);
			return -EINVAL;
		}
		return 0;
	case 'h':
		o->help = true;
		return 0;
	default:
		return -EINVAL;
	}
}

/*
 * Parses <argv> into <o>: flags override the environment's defaults; the command starts at
 * "--" or at the first argument that is not an option. Returns 0, or -EINVAL with a message
 * in <err>. Borrows argv for the lifetime of <o>.
 */
static int opts_parse(struct bridge_opts *o, int argc, char **argv, char *err, size_t err_len)
{
	AN_ASSERT(argc >= 1);
	AN_ASSERT(err_len > 0);
	static const struct option longs[] = {
		{ "egress", required_argument, NULL, OPT_EGRESS },
		{ "ingress", required_argument, NULL, OPT_INGRESS },
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "ingress-port", required_argument, NULL, OPT_INGRESS_PORT },
		{ "ca", required_argument, NULL, OPT_CA },
		{ "public-url", required_argument, NULL, OPT_PUBLIC_URL },
		{ "print-env", no_argument, NULL, OPT_PRINT_ENV },
		{ "no-seccomp", no_argument, NULL, OPT_NO_SECCOMP },
		{ "ingress-fd", required_argument, NULL, OPT_INGRESS_FD },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	err[0] = '\0';
	if (opts_defaults(o, err, err_len) != 0) {
		return -EINVAL;
	}
	optind = 0; /* glibc: a full re-initialisation, so the parser can run more than once */
	opterr = 0;
	for (;;) {
		int c = getopt_long(argc, argv, "+h", longs, NULL);
		if (c == -1) {
			break;
		}
		if (opt_apply(o, c, optarg, err, err_len) != 0) {
			if (err[0] == '\0') {
				snprintf(err, err_len, "unknown option or missing value: '%s'",
					 argv[optind - 1]);
			}
			return -EINVAL;
		}
	}
	o->cmd = optind < argc ? &argv[optind] : NULL;
	return opts_check(o, err, err_len);
}

/* ---- The agent's environment -------------------------------------------------------------- */

/* Returns the value <src> gives under <o>, or NULL when the variable is not set. */
static const char *var_value(const struct bridge_opts *o, enum var_src src)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(o->proxy_url[0] != '\0');
	switch (src) {
	case VAR_PROXY:
		return o->proxy_url;
	case VAR_NO_PROXY:
		return o->no_proxy;
	case VAR_INGRESS_PORT:
		return o->ingress_port_text;
	case VAR_PUBLIC_URL:
		return o->public_url;
	case VAR_CA:
		return o->ca_path;
	case VAR_ONE:
		return "1";
	}
	(void)AN_NEVER(true);
	return NULL;
}

/* Sets every variable of the table that has a value. Returns 0 or -ENOMEM. */
static int env_apply(const struct bridge_opts *o)
{
	AN_ASSERT(o != NULL);
	size_t set = 0;
	for (size_t i = 0; i < AN_ARRAY_LEN(bridge_vars); i++) {
		const char *v = var_value(o, bridge_vars[i].src);
		if (v == NULL) {
			continue;
		}
		if (setenv(bridge_vars[i].name, v, 1) == -1) {
			return -errno;
		}
		set++;
	}
	AN_ASSERT(set <= AN_ARRAY_LEN(bridge_vars));
	return 0;
}

/* Writes what env_apply() would set, one NAME=VALUE line each, in table order. */
static void env_print(const struct bridge_opts *o, FILE *out)
{
	AN_ASSERT(o != NULL);
	AN_ASSERT(out != NULL);
	for (size_t i = 0; i < AN_ARRAY_LEN(bridge_vars); i++) {
		const char *v = var_value(o, bridge_vars[i].src);
		if (v != NULL) {
			fprintf(out, "%s=%s\n", bridge_vars[i].name, v);
		}
	}
}

static void usage(FILE *out)
{
	AN_ASSERT(out != NULL);
	fputs("usage: agentsnet-bridge [--egress PATH] [--ingress PATH | --ingress-fd FD]\n"
	      "                        [--listen 127.0.0.1:8080] [--ingress-port N] [--ca PATH]\n"
	      "                        [--public-url URL] [--print-env] [--no-seccomp]\n"
	      "                        -- CMD [ARGS...]\n"
	      "defaults: $AGENTSNET_EGRESS_SOCKET (" BRIDGE_EGRESS_DEFAULT "),\n"
	      "  $AGENTSNET_INGRESS_SOCKET (" BRIDGE_INGRESS_DEFAULT "),\n"
	      "  $AGENT_INGRESS_PORT (8081), $AGENT_CA_CERT, $AGENT_PUBLIC_URL, $AGENT_NO_PROXY\n"
	      "exit status: CMD's (128 + N if killed by signal N); 125 the bridge failed,\n"
	      "  126 CMD could not run, 127 CMD not found\n"
	      "the agent's environment (overrides the caller's):\n",
	      out);
	for (size_t i = 0; i < AN_ARRAY_LEN(bridge_vars); i++) {
		fprintf(out, "  %-24s %s\n", bridge_vars[i].name, bridge_vars[i].reader);
	}
}

/* ---- Listeners ---------------------------------------------------------------------------- */

static int epoll_add(struct bridge *b, int fd, uint64_t data)
{
	AN_ASSERT(b->ep >= 0);
	AN_ASSERT(fd >= 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = data };
	return epoll_ctl(b->ep, EPOLL_CTL_ADD, fd, &ev) == -1 ? -errno : 0;
}

/* Listens on the loopback TCP address <sa> (the proxy port). Returns 0 or -errno. */
static int bridge_listen(struct bridge *b, const struct sockaddr *sa, socklen_t len)
{
	AN_ASSERT(b->tcp_fd == -1);
	AN_ASSERT(sa->sa_family == AF_INET || sa->sa_family == AF_INET6);
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		return -errno;
	}
	int one = 1;
	int rc = 0;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
	    bind(fd, sa, len) == -1 || listen(fd, SOMAXCONN) == -1) {
		rc = -errno;
	}
	if (rc == 0) {
		rc = epoll_add(b, fd, ev_pack(TAG_TCP_LISTEN, 0, 0, 0));
	}
	if (rc != 0) {
		fd_close(&fd);
		return rc;
	}
	b->tcp_fd = fd;
	return 0;
}

/*
 * Makes <path> free for bind: removes a stale socket (no one accepts on it), but never a live
 * one (-EADDRINUSE: another bridge or the daemon serves it) or a file that is not a socket
 * (-EEXIST). Returns 0 or -errno.
 */
static int ingress_clear_stale(const char *path)
{
	AN_ASSERT(path != NULL);
	struct stat st;
	if (lstat(path, &st) == -1) {
		return errno == ENOENT ? 0 : -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		return -EEXIST;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		return -errno;
	}
	struct sockaddr_un sun;
	socklen_t len = unix_addr(&sun, path);
	int rc = connect(fd, (struct sockaddr *)&sun, len);
	int err = rc == -1 ? errno : 0;
	fd_close(&fd);
	if (rc == 0 || err == EAGAIN) {
		return -EADDRINUSE;
	}
	if (err != ECONNREFUSED) {
		return -err;
	}
	if (unlink(path) == -1 && errno != ENOENT) {
		return -errno;
	}
	AN_ASSERT(fd == -1);
	return 0;
}

static int ingress_bind(struct bridge *b, const char *path)
{
	AN_ASSERT(b->ingress_fd == -1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		return -errno;
	}
	struct sockaddr_un sun;
	socklen_t len = unix_addr(&sun, path);
	struct stat st;
	int rc = 0;
	/* The daemon connects from the host, as another user: the directory guards the file.
	 * Mode 0666 as bind makes it (the umask), never a chmod by path after. */
	mode_t old_mask = umask(0111);
	if (bind(fd, (struct sockaddr *)&sun, len) == -1) {
		rc = -errno;
	}
	umask(old_mask);
	if (rc == 0 && (lstat(path, &st) == -1 || listen(fd, SOMAXCONN) == -1)) {
		rc = -errno;
	}
	if (rc == 0) {
		rc = epoll_add(b, fd, ev_pack(TAG_INGRESS_LISTEN, 0, 0, 0));
	}
	if (rc != 0) {
		fd_close(&fd);
		return rc;
	}
	b->ingress_fd = fd;
	b->ingress_dev = st.st_dev;
	b->ingress_ino = st.st_ino;
	AN_ASSERT(b->ingress_fd >= 0);
	return 0;
}

/*
 * Takes <fd>, a listening Unix stream socket the caller passed down (the daemon binds an
 * owned sandbox's ingress socket in its own directory and hands it to agentsnet run with the
 * registration, which passes it as --ingress-fd). The socket file is not the bridge's, so the
 * bridge never removes it. Returns 0,
 * -ENOTSOCK or -EINVAL (not a listening Unix stream socket; <fd> is then left alone).
 */
static int ingress_adopt(struct bridge *b, int fd)
{
	AN_ASSERT(b->ingress_fd == -1);
	AN_ASSERT(fd >= 0);
	struct stat st;
	if (fstat(fd, &st) == -1) {
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		return -ENOTSOCK;
	}
	int domain = 0;
	int type = 0;
	int listening = 0;
	socklen_t len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1 ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1 ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == -1) {
		return -errno;
	}
	if (domain != AF_UNIX || type != SOCK_STREAM || listening != 1) {
		return -EINVAL;
	}
	int fl = fcntl(fd, F_GETFL);
	/* Close-on-exec: the agent must not hold, or accept on, the ingress listener. */
	if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) == -1) {
		return -errno;
	}
	int rc = epoll_add(b, fd, ev_pack(TAG_INGRESS_LISTEN, 0, 0, 0));
	if (rc == 0) {
		b->ingress_fd = fd;
	}
	return rc;
}

/*
 * Listens for ingress on the inherited listener <fd> or, when <fd> is -1, on the socket
 * <path>, and relays to 127.0.0.1:<port>. Optional: on failure (no directory, not writable, a
 * live socket there, a bad descriptor) prints one notice and returns -errno; the bridge runs
 * on without ingress.
 */
static int bridge_ingress(struct bridge *b, const char *path, int fd, uint16_t port)
{
	AN_ASSERT(path != NULL);
	AN_ASSERT(port > 0);
	memset(&b->ingress_target, 0, sizeof(b->ingress_target));
	b->ingress_target.sin_family = AF_INET;
	b->ingress_target.sin_port = htons(port);
	b->ingress_target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int n = snprintf(b->ingress_name, sizeof(b->ingress_name), "127.0.0.1:%u", port);
	AN_ASSERT(n > 0 && (size_t)n < sizeof(b->ingress_name));
	if (fd >= 0) {
		int rc = ingress_adopt(b, fd);
		if (rc != 0) {
			say("ingress disabled: --ingress-fd %d: %s", fd,
			    rc == -EINVAL ? "not a listening Unix stream socket" : strerror(-rc));
		}
		return rc;
	}
	int rc = ingress_clear_stale(path);
	if (rc == 0) {
		rc = ingress_bind(b, path);
	}
	if (rc != 0) {
		const char *why = rc == -EADDRINUSE ? "a live socket is already there"
				  : rc == -EEXIST   ? "there is a file that is not a socket"
						    : strerror(-rc);
		say("ingress disabled: %s: %s", path, why);
		return rc;
	}
	b->ingress_path = path;
	return 0;
}

/* Removes the ingress socket file, only if it is still the one this bridge bound. */
static void ingress_remove(struct bridge *b)
{
	if (b->ingress_path == NULL) {
		return;
	}
	AN_ASSERT(b->ingress_fd >= 0);
	struct stat st;
	if (lstat(b->ingress_path, &st) == 0 && st.st_dev == b->ingress_dev &&
	    st.st_ino == b->ingress_ino) {
		(void)unlink(b->ingress_path);
	}
	b->ingress_path = NULL;
	AN_ASSERT(b->ingress_path == NULL);
}

/* ---- The bridge's state ------------------------------------------------------------------- */

/* Sets <b> up with no listener and at most <conns_max> relays. Returns 0 or -errno. */
static int bridge_init(struct bridge *b, uint32_t conns_max)
{
	AN_ASSERT(conns_max >= 1);
	AN_ASSERT(conns_max <= BRIDGE_CONNS_MAX);
	memset(b, 0, sizeof(*b));
	b->sig_fd = b->tcp_fd = b->ingress_fd = b->tty_fd = -1;
	b->conns_max = conns_max;
	for (uint32_t i = 0; i < BRIDGE_CONNS_MAX; i++) {
		struct bridge_conn *c = &b->conns[i];
		c->fd[0] = c->fd[1] = -1;
		for (int s = 0; s < 2; s++) {
			c->half[s].pipe_rd = c->half[s].pipe_wr = -1;
		}
	}
	for (uint32_t i = 0; i < conns_max; i++) {
		b->free_stack[i] = conns_max - 1 - i;
	}
	b->free_count = conns_max;
	b->ep = epoll_create1(EPOLL_CLOEXEC);
	if (b->ep == -1) {
		return -errno;
	}
	b->spare_fd = eventfd(0, EFD_CLOEXEC);
	if (b->spare_fd == -1) {
		int err = errno;
		fd_close(&b->ep);
		return -err;
	}
	return 0;
}

/* Closes every relay, listener and descriptor of <b>, and removes its ingress socket. */
static void bridge_destroy(struct bridge *b)
{
	AN_ASSERT(b->conns_in_use <= b->conns_max);
	for (uint32_t i = 0; i < b->conns_max; i++) {
		if (b->conns[i].in_use) {
			conn_close(b, &b->conns[i], false);
		}
	}
	ingress_remove(b);
	fd_close(&b->tcp_fd);
	fd_close(&b->ingress_fd);
	fd_close(&b->sig_fd);
	fd_close(&b->spare_fd);
	fd_close(&b->ep);
	AN_ASSERT(b->conns_in_use == 0);
}

/*
 * Raises the soft descriptor limit to what BRIDGE_CONNS_MAX relays need (the hard limit caps
 * it) and returns how many relays fit. The caller's limit goes to <orig>, for the agent.
 */
static uint32_t nofile_raise(struct rlimit *orig)
{
	AN_ASSERT(orig != NULL);
	const rlim_t want = (rlim_t)BRIDGE_CONNS_MAX * BRIDGE_FDS_PER_CONN + BRIDGE_FDS_RESERVED;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == -1) {
		rl.rlim_cur = rl.rlim_max = 1024;
	}
	*orig = rl;
	if (rl.rlim_cur < want) {
		struct rlimit raised = rl;
		raised.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
		if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
			rl = raised;
		}
	}
	rlim_t fit = rl.rlim_cur > BRIDGE_FDS_RESERVED + BRIDGE_FDS_PER_CONN
			 ? (rl.rlim_cur - BRIDGE_FDS_RESERVED) / BRIDGE_FDS_PER_CONN
			 : 1;
	uint32_t n = fit < BRIDGE_CONNS_MAX ? (uint32_t)fit : BRIDGE_CONNS_MAX;
	AN_ASSERT(n >= 1 && n <= BRIDGE_CONNS_MAX);
	return n;
}

/* ---- PID 1 duties ------------------------------------------------------------------------- */

static void signal_set(sigset_t *set)
{
	AN_ASSERT(set != NULL);
	sigemptyset(set);
	for (size_t i = 0; i < AN_ARRAY_LEN(bridge_forwarded); i++) {
		sigaddset(set, bridge_forwarded[i]);
	}
	sigaddset(set, SIGCHLD);
	sigaddset(set, SIGCONT);
	AN_ASSERT(sigismember(set, SIGCHLD) == 1);
}

/* The first standard descriptor that is a terminal, or -1: the agent's terminal to be. */
static int tty_find(void)
{
	for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
		if (isatty(fd)) {
			return fd;
		}
	}
	return -1;
}

/*
 * Takes SIGHUP and SIGCONT off the bridge's queue (both are blocked) when they were sent by
 * the bridge itself, as TIOCNOTTY does: those never reach the agent. One sent by anyone else
 * is raised again, so the loop passes it on.
 */
static void tty_hangup_drain(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCONT);
	const struct timespec now = { 0 };
	pid_t self = getpid();
	bool again[2] = { false, false };
	for (;;) {
		siginfo_t si;
		int sig = sigtimedwait(&set, &si, &now);
		if (sig == -1 && errno == EINTR) {
			continue;
		}
		if (sig == -1) {
			break;
		}
		if (si.si_code != SI_USER || si.si_pid != self) {
			again[sig == SIGCONT] = true;
		}
	}
	if (again[0]) {
		(void)kill(self, SIGHUP);
	}
	if (again[1]) {
		(void)kill(self, SIGCONT);
	}
}

/*
 * When the bridge leads a session whose controlling terminal is <b->tty_fd> (an image's
 * entrypoint under `docker run -it`), gives the terminal up, so that the agent's session can
 * take it. The kernel then sends SIGHUP and SIGCONT to the terminal's foreground group, the
 * bridge's: they are blocked by now, and dropped before the agent exists. A terminal that
 * belongs to another session (a shell's, above the bridge) is left alone: the agent then runs
 * with no controlling terminal, and the terminal's signals reach the bridge, which passes
 * them on.
 */
static void tty_release(const struct bridge *b)
{
	AN_ASSERT(b->agent_pid == 0);
	if (b->tty_fd < 0 || getsid(0) != getpid() || tcgetsid(b->tty_fd) != getpid()) {
		return;
	}
	if (ioctl(b->tty_fd, TIOCNOTTY) == -1) {
		say("TIOCNOTTY: %s (the agent gets no controlling terminal)", strerror(errno));
		return;
	}
	tty_hangup_drain();
}

/* SIGCONT: continues the agent's group, which someone may have stopped (SIGSTOP) with it. */
static void on_sigcont(struct bridge *b)
{
	if (b->agent_pid > 0 && !b->agent_done) {
		(void)kill(-b->agent_pid, SIGCONT);
	}
}

/* Records the agent's end: its exit code, or 128 + signal. */
static void agent_changed(struct bridge *b, int st)
{
	AN_ASSERT(b->agent_pid > 0);
	AN_ASSERT(!b->agent_done);
	if (WIFEXITED(st)) {
		b->agent_status = WEXITSTATUS(st);
		b->agent_done = true;
	} else if (WIFSIGNALED(st)) {
		b->agent_status = 128 + WTERMSIG(st);
		b->agent_done = true;
	}
}

/*
 * Reaps every child that exited, orphans re-parented to the bridge included. Each is looked
 * at before it is reaped: when it is the agent, what is left of its process group is killed
 * first, while the agent's zombie still holds the group's id (so the id cannot have been
 * reused by someone else's group). Stops are not waited for: the agent's group is orphaned,
 * so the kernel discards SIGTSTP, SIGTTIN and SIGTTOU for it, and whoever sends SIGSTOP
 * continues it.
 */
static void reap_children(struct bridge *b)
{
	AN_ASSERT(b->agent_pid > 0);
	for (;;) {
		siginfo_t si = { 0 };
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == -1) {
			if (errno == EINTR) {
				continue;
			}
			AN_ASSERT(errno == ECHILD);
			return;
		}
		if (si.si_pid == 0) {
			return;
		}
		bool mine = si.si_pid == b->agent_pid && !b->agent_done;
		if (mine) {
			(void)kill(-b->agent_pid, SIGKILL);
		}
		int st;
		pid_t pid = waitpid(si.si_pid, &st, WNOHANG);
		if (pid == si.si_pid && mine) {
			agent_changed(b, st);
		}
	}
}

/*
 * Handles the queued signals: SIGCHLD reaps, SIGCONT continues the agent's group, the rest go
 * to the agent. A terminal signals only its own session's foreground group: the agent's when
 * it took the terminal, else the bridge's, never both, so passing every one on never
 * delivers one twice.
 */
static void on_signals(struct bridge *b)
{
	AN_ASSERT(b->sig_fd >= 0);
	bool reap = false;
	for (;;) {
		struct signalfd_siginfo si;
		ssize_t n = read(b->sig_fd, &si, sizeof(si));
		if (n == -1 && errno == EINTR) {
			continue;
		}
		if (n != (ssize_t)sizeof(si)) {
			AN_ASSERT(n == -1 && errno == EAGAIN);
			break;
		}
		int sig = (int)si.ssi_signo;
		if (sig == SIGCHLD) {
			reap = true;
		} else if (sig == SIGCONT) {
			on_sigcont(b);
		} else if (b->agent_pid > 0 && !b->agent_done) {
			(void)kill(b->agent_pid, sig);
		}
	}
	if (reap && b->agent_pid > 0) {
		reap_children(b);
	}
}

/* ---- The loop ----------------------------------------------------------------------------- */

static void on_event(struct bridge *b, const struct epoll_event *ev)
{
	AN_ASSERT(b->ep >= 0);
	uint64_t data = ev->data.u64;
	AN_ASSERT((data & 7u) >= TAG_SIGNAL);
	switch ((enum ev_tag)(data & 7u)) {
	case TAG_SIGNAL:
		on_signals(b);
		break;
	case TAG_TCP_LISTEN:
		on_accept(b, b->tcp_fd, CONN_EGRESS);
		break;
	case TAG_INGRESS_LISTEN:
		on_accept(b, b->ingress_fd, CONN_INGRESS);
		break;
	case TAG_CONN:
		on_conn_event(b, data, ev->events);
		break;
	default:
		(void)AN_NEVER(true);
		break;
	}
}

/*
 * Waits up to <timeout_ms> (-1: forever; 0 while connections are queued) for events, handles
 * them, then pumps the queued connections. Returns the number of events or -errno.
 */
static int bridge_turn(struct bridge *b, int timeout_ms)
{
	AN_ASSERT(b->ep >= 0);
	struct epoll_event evs[BRIDGE_EVENTS_PER_TURN];
	int n = epoll_wait(b->ep, evs, BRIDGE_EVENTS_PER_TURN, b->ready_count > 0 ? 0 : timeout_ms);
	if (n == -1) {
		return errno == EINTR ? 0 : -errno;
	}
	for (int i = 0; i < n; i++) {
		on_event(b, &evs[i]);
	}
	ready_run(b);
	AN_ASSERT(b->conns_in_use <= b->conns_max);
	return n;
}

/* ---- Start-up ----------------------------------------------------------------------------- */

/*
 * In the forked child: a session of the agent's own, with the bridge's terminal as its
 * controlling terminal when no other session holds it; death with the bridge, the caller's
 * descriptor limit, the filter, the default signal mask and dispositions, then exec. Never
 * returns.
 */
static _Noreturn void child_exec(struct bridge *b, scmp_filter_ctx filter, char **cmd, pid_t parent,
				 int go_fd)
{
	AN_ASSERT(cmd != NULL && cmd[0] != NULL);
	AN_ASSERT(parent > 0);
	/* A fork is never a group leader, so this fails only if the kernel is broken. */
	if (setsid() == -1) {
		say("setsid: %s", strerror(errno));
		_exit(BRIDGE_EXIT_FAILURE);
	}
	if (b->tty_fd >= 0) {
		(void)ioctl(b->tty_fd, TIOCSCTTY, 0); /* 0: never steal it from another session */
	}
	/* Without the bridge there is no network: end with it rather than run on, stranded. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != parent) {
		_exit(BRIDGE_EXIT_FAILURE);
	}
	(void)setrlimit(RLIMIT_NOFILE, &b->nofile_orig);
	/* Not a step of the agent's before the bridge is under its own filter: the bridge says
	 * so with a byte (or ends, and the agent with it). */
	char go = 0;
	ssize_t got;
	do
		got = read(go_fd, &go, 1);
	while (got == -1 && errno == EINTR);
	if (got != 1) {
		_exit(BRIDGE_EXIT_FAILURE);
	}
	(void)close(go_fd);
	if (filter != NULL) {
		int rc = filter_load(filter);
		if (rc != 0) {
			say("seccomp: %s", strerror(-rc));
			_exit(BRIDGE_EXIT_FAILURE);
		}
	}
	for (int sig = 1; sig < NSIG; sig++) {
		(void)signal(sig, SIG_DFL); /* EINVAL for SIGKILL, SIGSTOP and libc's own */
	}
	sigset_t none;
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	execvp(cmd[0], cmd);
	int err = errno;
	say("exec %s: %s", cmd[0], strerror(err));
	_exit(err == ENOENT ? BRIDGE_EXIT_NOTFOUND : BRIDGE_EXIT_NOEXEC);
}

/* Signals, descriptors, listeners, environment; prints its own errors. Returns 0 or -errno. */
static int bridge_setup(struct bridge *b, const struct bridge_opts *o)
{
	AN_ASSERT(o->cmd != NULL);
	AN_ASSERT(o->listen_sa_len > 0);
	struct rlimit orig;
	uint32_t conns_max = nofile_raise(&orig);
	int rc = bridge_init(b, conns_max);
	if (rc != 0) {
		say("epoll: %s", strerror(-rc));
		return rc;
	}
	b->nofile_orig = orig;
	sigset_t set;
	signal_set(&set);
	/* Blocked before the fork, so a signal sent before the loop runs is queued, not lost. */
	if (sigprocmask(SIG_BLOCK, &set, NULL) == -1) {
		return -errno;
	}
	(void)signal(SIGPIPE, SIG_IGN); /* a closed peer is EPIPE from splice */
	(void)signal(SIGTTOU, SIG_IGN); /* notices to a terminal, from a background group */
	b->egress_path = o->egress_path;
	b->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	rc = b->sig_fd == -1 ? -errno : epoll_add(b, b->sig_fd, TAG_SIGNAL);
	if (rc != 0) {
		say("signalfd: %s", strerror(-rc));
		return rc;
	}
	rc = bridge_listen(b, (const struct sockaddr *)&o->listen_sa, o->listen_sa_len);
	if (rc != 0) {
		say("listen on %s: %s", o->proxy_url + strlen("http://"), strerror(-rc));
		return rc;
	}
	(void)bridge_ingress(b, o->ingress_path, o->ingress_fd, o->ingress_port);
	struct stat st;
	if (stat(o->egress_path, &st) == -1) {
		say("egress socket %s: %s (the daemon's sandbox directory is not mounted?)",
		    o->egress_path, strerror(errno));
	}
	rc = env_apply(o);
	if (rc != 0) {
		say("setenv: %s", strerror(-rc));
	}
	return rc;
}

/*
 * Builds the agent's filter into <*agent> and the bridge's own into <*own> (both owned by the
 * caller; both NULL under --no-seccomp). Returns 0 or -errno, having said which failed.
 */
static int filters_build(const struct bridge_opts *o, scmp_filter_ctx *agent, scmp_filter_ctx *own)
{
	AN_ASSERT(agent != NULL && own != NULL);
	*agent = *own = NULL;
	if (o->no_seccomp) {
		say("--no-seccomp: neither the agent nor the bridge runs under a filter (tests only)");
		return 0;
	}
	int rc = filter_build(agent, FILTER_AGENT);
	if (rc == 0) {
		rc = filter_build(own, FILTER_BRIDGE);
		if (rc != 0) {
			seccomp_release(*agent);
			*agent = NULL;
		}
	}
	if (rc != 0) {
		say("seccomp filter: %s", strerror(-rc));
	}
	return rc;
}

/* The loop while the agent runs. Returns the agent's status, or 125 if the loop failed. */
static int bridge_wait(struct bridge *b)
{
	AN_ASSERT(b->agent_pid > 0);
	AN_ASSERT(b->sig_fd >= 0);
	int status;
	for (;;) {
		int rc = bridge_turn(b, -1);
		if (rc < 0) {
			say("epoll_wait: %s", strerror(-rc));
			/* The agent too: it may not have its own group yet. */
			(void)kill(-b->agent_pid, SIGKILL);
			(void)kill(b->agent_pid, SIGKILL);
			status = BRIDGE_EXIT_FAILURE;
			break;
		}
		if (b->agent_done) {
			status = b->agent_status;
			break;
		}
	}
	bridge_destroy(b);
	return status;
}

/*
 * Forks the agent (under <filter>, when not NULL), puts the bridge under <own> (released
 * here; the agent never inherits it), and only then lets the agent go on to its filter and
 * exec, so no code of the agent's runs beside an unfiltered bridge. Returns the agent's
 * pid, or -errno with no agent left.
 */
static pid_t agent_start(struct bridge *b, const struct bridge_opts *o, scmp_filter_ctx filter,
			 scmp_filter_ctx own)
{
	AN_ASSERT(b->agent_pid == 0);
	pid_t parent = getpid();
	int go[2] = { -1, -1 };
	bool piped = pipe2(go, O_CLOEXEC) == 0;
	pid_t pid = piped ? fork() : -1;
	if (pid == 0) {
		(void)close(go[1]);
		child_exec(b, filter, o->cmd, parent, go[0]);
	}
	if (pid == -1) {
		int err = errno;
		say("%s: %s", piped ? "fork" : "pipe", strerror(err));
		if (piped) {
			(void)close(go[0]);
			(void)close(go[1]);
		}
		if (own != NULL) {
			seccomp_release(own);
		}
		return -err;
	}
	(void)close(go[0]);
	int rc = own != NULL ? filter_load(own) : 0;
	if (own != NULL) {
		seccomp_release(own);
	}
	ssize_t sent = -1;
	if (rc == 0) {
		do
			sent = write(go[1], "g", 1);
		while (sent == -1 && errno == EINTR);
	}
	(void)close(go[1]);
	if (rc != 0 || sent != 1) {
		if (rc != 0)
			say("seccomp (the bridge's own filter): %s", strerror(-rc));
		else
			say("starting the agent: %s", strerror(errno));
		(void)kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		return rc != 0 ? rc : -EPIPE;
	}
	return pid;
}

/* Runs the agent <o->cmd> under the bridge and returns the bridge's exit status. */
static int bridge_run(struct bridge *b, const struct bridge_opts *o)
{
	AN_ASSERT(o->cmd != NULL && o->cmd[0] != NULL);
	AN_ASSERT(b != NULL);
	if (o->ca_path != NULL && access(o->ca_path, R_OK) == -1) {
		say("CA bundle %s: %s", o->ca_path, strerror(errno));
		return BRIDGE_EXIT_FAILURE;
	}
	scmp_filter_ctx filter = NULL;
	scmp_filter_ctx own = NULL;
	int rc = bridge_setup(b, o);
	if (rc == 0) {
		rc = filters_build(o, &filter, &own);
	}
	if (rc != 0) {
		bridge_destroy(b);
		return BRIDGE_EXIT_FAILURE;
	}
	if (getpid() != 1) {
		(void)prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphans come to the bridge, as to init */
	}
	b->tty_fd = tty_find();
	tty_release(b);
	say("ready");
	pid_t pid = agent_start(b, o, filter, own);
	if (filter != NULL) {
		seccomp_release(filter);
	}
	if (pid < 0) {
		bridge_destroy(b);
		return BRIDGE_EXIT_FAILURE;
	}
	b->agent_pid = pid;
	return bridge_wait(b);
}

/* Parses the command line and runs; returns the process's exit status. */
static int bridge_main(int argc, char **argv)
{
	AN_ASSERT(argc >= 1);
	AN_ASSERT(argv[argc] == NULL);
	/* First of all: an agent of the same uid may not ptrace the bridge, read its memory or
	 * take its descriptors. */
	if (prctl(PR_SET_DUMPABLE, 0) == -1) {
		say("prctl(PR_SET_DUMPABLE): %s", strerror(errno));
		return BRIDGE_EXIT_FAILURE;
	}
	static struct bridge bridge;
	struct bridge_opts o;
	char err[256];
	if (opts_parse(&o, argc, argv, err, sizeof(err)) != 0) {
		say("%s (see --help)", err);
		return BRIDGE_EXIT_FAILURE;
	}
	if (o.help) {
		usage(stdout);
		return 0;
	}
	if (o.print_env) {
		env_print(&o, stdout);
		return 0;
	}
	return bridge_run(&bridge, &o);
}

#ifndef BRIDGE_NO_MAIN
int main(int argc, char **argv)
{
	int status = bridge_main(argc, argv);
	/* _exit: nothing that runs at exit (a sanitizer's report, say) may change the status;
	 * LeakSanitizer's exit-time check, which would ptrace the bridge, never runs. */
	fflush(NULL);
	_exit(status);
}
#endif
