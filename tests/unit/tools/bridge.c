/*
 * Unit tests for tools/bridge.c (included with BRIDGE_NO_MAIN, so its statics are reachable).
 *
 * - The agent's environment: every row of the table, checked against an independent list of
 *   names, with and without a CA bundle; caller-set variables overwritten; --print-env's lines.
 * - Flags: loopback-only listen addresses, ports and socket paths at N and N+1.
 * - The seccomp filter, loaded in a forked child: the refused sockets and io_uring calls fail
 *   with EPERM, ordinary sockets still open, and other architectures are killed (SIGSYS).
 * - The relay, driven by bridge_turn() on a thread against a Unix server in the test: 10 MiB
 *   each way, byte-identical, with half-close; an absent or dying daemon; the connection limit
 *   at N and N+1; ingress, and what it does with a socket file already there.
 * - bridge_main() in a forked child with this binary as the agent (BRIDGE_TEST_PROBE selects
 *   what it checks): exit status, forwarded signals, the agent's environment, the filter with
 *   and without --no-seccomp, orphans reaped, the agent's group killed, job-control stops.
 * Each relay test ends with zero connections in use and no descriptor left open.
 */
#define BRIDGE_NO_MAIN
#include "../../../tools/bridge.c"

#include <check.h>
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include "tests/unit/unit.h"

#define TEST_STREAM_BYTES (10u << 20)
#define TEST_CHUNK_BYTES  (96u * 1024u + 7u) /* deliberately not a page multiple */

static char test_dir[64];
static struct bridge test_bridge;

/* ---- Helpers ---- */

static void dir_make(void)
{
	snprintf(test_dir, sizeof(test_dir), "/tmp/an-bridge-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(test_dir));
}

/* Fixture teardown: removes what a test left in its directory, then the directory. */
static void dir_remove(void)
{
	if (test_dir[0] == '\0') {
		return;
	}
	DIR *d = opendir(test_dir);
	if (d != NULL) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
				unlinkat(dirfd(d), e->d_name, 0);
			}
		}
		closedir(d);
	}
	rmdir(test_dir);
	test_dir[0] = '\0';
}

static void dir_path(char *out, size_t len, const char *name)
{
	int n = snprintf(out, len, "%s/%s", test_dir, name);
	ck_assert_int_lt(n, (int)len);
}

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	ck_assert_ptr_nonnull(d);
	while (readdir(d) != NULL) {
		n++;
	}
	closedir(d);
	return n;
}

/* Byte <off> of the test stream <seed>: position-based, so any split of reads verifies. */
static uint8_t stream_byte(uint64_t seed, uint64_t off)
{
	uint64_t z = (off >> 3) ^ (seed * 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	z ^= z >> 31;
	return (uint8_t)(z >> ((off & 7) * 8));
}

/* Writes <total> bytes of stream <seed>; returns the bytes written. */
static uint64_t stream_write(int fd, uint64_t seed, uint64_t total)
{
	static _Thread_local uint8_t buf[TEST_CHUNK_BYTES];
	uint64_t off = 0;
	while (off < total) {
		size_t len = total - off < sizeof(buf) ? (size_t)(total - off) : sizeof(buf);
		for (size_t i = 0; i < len; i++) {
			buf[i] = stream_byte(seed, off + i);
		}
		size_t done = 0;
		while (done < len) {
			ssize_t n = write(fd, buf + done, len - done);
			if (n <= 0) {
				return off + done;
			}
			done += (size_t)n;
		}
		off += len;
	}
	return off;
}

struct stream_result {
	uint64_t bytes;
	uint64_t bad; /* bytes that differ from the stream */
	int err;      /* errno of the read that ended it; 0 for EOF */
};

/* Reads until EOF or an error, checking every byte against stream <seed>. */
static struct stream_result stream_read(int fd, uint64_t seed)
{
	static _Thread_local uint8_t buf[TEST_CHUNK_BYTES];
	struct stream_result r = { 0 };
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == 0) {
			return r;
		}
		if (n < 0) {
			r.err = errno;
			return r;
		}
		for (ssize_t i = 0; i < n; i++) {
			r.bad += buf[i] != stream_byte(seed, r.bytes + (uint64_t)i);
		}
		r.bytes += (uint64_t)n;
	}
}

static int unix_listen(const char *path)
{
	struct sockaddr_un sun;
	socklen_t len = unix_addr(&sun, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, len), 0);
	ck_assert_int_eq(listen(fd, 64), 0);
	return fd;
}

static int unix_connect(const char *path)
{
	struct sockaddr_un sun;
	socklen_t len = unix_addr(&sun, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sun, len), 0);
	return fd;
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sin;
}

static uint16_t fd_port(int fd)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	return ntohs(sin.sin_port);
}

static int tcp_listen(void)
{
	struct sockaddr_in sin = loopback(0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(fd, 64), 0);
	return fd;
}

static int tcp_connect(uint16_t port)
{
	struct sockaddr_in sin = loopback(port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	return fd;
}

/* A port nothing listens on (bound, read, closed). */
static uint16_t port_free(void)
{
	int fd = tcp_listen();
	uint16_t port = fd_port(fd);
	close(fd);
	return port;
}

/* Waits up to <ms> for <fd> to be readable and reads one byte: 1, 0 (EOF) or -errno. */
static int read_one(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1) {
		return -ETIMEDOUT;
	}
	char c;
	ssize_t n = read(fd, &c, 1);
	return n >= 0 ? (int)n : -errno;
}

/* ---- The bridge's loop on a thread ---- */

static pthread_t loop_thread;
static atomic_bool loop_stop;

static void *loop_main(void *arg)
{
	struct bridge *b = arg;
	struct timespec deadline = { 0 };
	for (;;) {
		int rc = bridge_turn(b, 10);
		ck_assert_int_ge(rc, 0);
		if (!atomic_load(&loop_stop)) {
			continue;
		}
		if (b->conns_in_use == 0) {
			break;
		}
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (deadline.tv_sec == 0) {
			deadline = now;
			deadline.tv_sec += 10;
		} else if (now.tv_sec > deadline.tv_sec) {
			break;
		}
	}
	return NULL;
}

/* Starts a bridge listening on 127.0.0.1:<*port> (ephemeral) relaying to <egress>. */
static struct bridge *loop_start(const char *egress, uint32_t conns_max, uint16_t *port)
{
	struct bridge *b = &test_bridge;
	ck_assert_int_eq(bridge_init(b, conns_max), 0);
	b->egress_path = egress;
	struct sockaddr_in sin = loopback(0);
	ck_assert_int_eq(bridge_listen(b, (struct sockaddr *)&sin, sizeof(sin)), 0);
	*port = fd_port(b->tcp_fd);
	atomic_store(&loop_stop, false);
	ck_assert_int_eq(pthread_create(&loop_thread, NULL, loop_main, b), 0);
	return b;
}

/* Stops the loop once every relay has ended, checks that none is left, and destroys it. */
static void loop_end(struct bridge *b)
{
	atomic_store(&loop_stop, true);
	ck_assert_int_eq(pthread_join(loop_thread, NULL), 0);
	ck_assert_uint_eq(b->conns_in_use, 0);
	ck_assert_uint_eq(b->free_count, b->conns_max);
	ck_assert_uint_eq(b->ready_count, 0);
	bridge_destroy(b);
	ck_assert_int_eq(b->ep, -1);
}

/* ---- The agent's environment ---- */

/* The contract, written out independently of the table: name and where its value comes from. */
static const struct {
	const char *name;
	enum var_src src;
} expected_vars[] = {
	{ "AGENT_HTTP_PROXY", VAR_PROXY },
	{ "AGENT_HTTPS_PROXY", VAR_PROXY },
	{ "AGENT_NO_PROXY", VAR_NO_PROXY },
	{ "AGENT_INGRESS_PORT", VAR_INGRESS_PORT },
	{ "AGENT_PUBLIC_URL", VAR_PUBLIC_URL },
	{ "AGENT_CA_CERT", VAR_CA },
	{ "HTTP_PROXY", VAR_PROXY },
	{ "http_proxy", VAR_PROXY },
	{ "HTTPS_PROXY", VAR_PROXY },
	{ "https_proxy", VAR_PROXY },
	{ "NO_PROXY", VAR_NO_PROXY },
	{ "no_proxy", VAR_NO_PROXY },
	{ "NODE_USE_ENV_PROXY", VAR_ONE },
	{ "npm_config_proxy", VAR_PROXY },
	{ "npm_config_https_proxy", VAR_PROXY },
	{ "CARGO_HTTP_PROXY", VAR_PROXY },
	{ "NODE_EXTRA_CA_CERTS", VAR_CA },
	{ "REQUESTS_CA_BUNDLE", VAR_CA },
	{ "SSL_CERT_FILE", VAR_CA },
	{ "CURL_CA_BUNDLE", VAR_CA },
	{ "GIT_SSL_CAINFO", VAR_CA },
	{ "PIP_CERT", VAR_CA },
	{ "npm_config_cafile", VAR_CA },
	{ "CARGO_HTTP_CAINFO", VAR_CA },
	{ "DENO_CERT", VAR_CA },
	{ "AWS_CA_BUNDLE", VAR_CA },
};

static void env_clear(void)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(bridge_vars); i++) {
		unsetenv(bridge_vars[i].name);
	}
	unsetenv("AGENTSNET_EGRESS_SOCKET");
	unsetenv("AGENTSNET_INGRESS_SOCKET");
	unsetenv("ALL_PROXY");
	unsetenv("all_proxy");
}

static int parse(struct bridge_opts *o, char **argv)
{
	char err[256];
	int argc = 0;
	while (argv[argc] != NULL) {
		argc++;
	}
	return opts_parse(o, argc, argv, err, sizeof(err));
}

/* Parses <argv>, applies the environment and checks every expected variable's value. */
static void check_env(char **argv, const char *proxy, const char *ca, const char *url,
		      const char *no_proxy, const char *port)
{
	struct bridge_opts o;
	ck_assert_int_eq(parse(&o, argv), 0);
	ck_assert_int_eq(env_apply(&o), 0);
	for (size_t i = 0; i < AN_ARRAY_LEN(expected_vars); i++) {
		const char *want = NULL;
		switch (expected_vars[i].src) {
		case VAR_PROXY:
			want = proxy;
			break;
		case VAR_NO_PROXY:
			want = no_proxy;
			break;
		case VAR_INGRESS_PORT:
			want = port;
			break;
		case VAR_PUBLIC_URL:
			want = url;
			break;
		case VAR_CA:
			want = ca;
			break;
		case VAR_ONE:
			want = "1";
			break;
		}
		const char *got = getenv(expected_vars[i].name);
		if (want == NULL) {
			ck_assert_msg(got == NULL, "%s=%s, want unset", expected_vars[i].name, got);
		} else {
			ck_assert_msg(got != NULL, "%s unset, want %s", expected_vars[i].name,
				      want);
			ck_assert_str_eq(got, want);
		}
	}
	ck_assert_ptr_null(getenv("ALL_PROXY"));
	ck_assert_ptr_null(getenv("all_proxy"));
}

START_TEST(test_env_table_is_the_contract)
{
	ck_assert_uint_eq(AN_ARRAY_LEN(bridge_vars), AN_ARRAY_LEN(expected_vars));
	for (size_t i = 0; i < AN_ARRAY_LEN(expected_vars); i++) {
		ck_assert_str_eq(bridge_vars[i].name, expected_vars[i].name);
		ck_assert_int_eq(bridge_vars[i].src, expected_vars[i].src);
		ck_assert_ptr_nonnull(bridge_vars[i].reader);
		for (size_t j = 0; j < i; j++) {
			ck_assert_str_ne(bridge_vars[i].name, bridge_vars[j].name);
		}
	}
}
END_TEST

START_TEST(test_env_without_ca)
{
	env_clear();
	char *argv[] = { "bridge", "--", "true", NULL };
	check_env(argv, "http://127.0.0.1:8080", NULL, NULL, "localhost,127.0.0.1", "8081");
}
END_TEST

START_TEST(test_env_with_ca_and_flags)
{
	env_clear();
	setenv("AGENT_CA_CERT", "/env/ca.pem", 1);
	setenv("AGENT_INGRESS_PORT", "9000", 1);
	char *argv[] = { "bridge",
			 "--listen",
			 "127.0.0.2:3128",
			 "--ca",
			 "/run/agentsnet/ca-bundle.pem",
			 "--public-url",
			 "https://hooks.example/callbacks/sb1",
			 "--",
			 "true",
			 NULL };
	check_env(argv, "http://127.0.0.2:3128", "/run/agentsnet/ca-bundle.pem",
		  "https://hooks.example/callbacks/sb1", "localhost,127.0.0.1", "9000");
}
END_TEST

START_TEST(test_env_from_environment)
{
	env_clear();
	setenv("AGENT_CA_CERT", "/env/ca.pem", 1);
	setenv("AGENT_PUBLIC_URL", "https://pub.example/cb/x", 1);
	setenv("AGENT_NO_PROXY", "localhost,127.0.0.1,model.internal", 1);
	char *argv[] = { "bridge", "--ingress-port", "65535", "--listen", "[::1]:8080",
			 "--",     "true",           NULL };
	check_env(argv, "http://[::1]:8080", "/env/ca.pem", "https://pub.example/cb/x",
		  "localhost,127.0.0.1,model.internal", "65535");
}
END_TEST

START_TEST(test_env_overrides_caller)
{
	env_clear();
	setenv("HTTP_PROXY", "http://corp-proxy:3128", 1);
	setenv("https_proxy", "http://corp-proxy:3128", 1);
	setenv("NODE_USE_ENV_PROXY", "0", 1);
	setenv("SSL_CERT_FILE", "/image/certs.pem", 1);
	setenv("AGENT_INGRESS_PORT", "", 1); /* empty: the default */
	char *argv[] = { "bridge", "--", "true", NULL };
	struct bridge_opts o;
	ck_assert_int_eq(parse(&o, argv), 0);
	ck_assert_int_eq(env_apply(&o), 0);
	ck_assert_str_eq(getenv("HTTP_PROXY"), "http://127.0.0.1:8080");
	ck_assert_str_eq(getenv("https_proxy"), "http://127.0.0.1:8080");
	ck_assert_str_eq(getenv("NODE_USE_ENV_PROXY"), "1");
	ck_assert_str_eq(getenv("AGENT_INGRESS_PORT"), "8081");
	/* Without a CA bundle, the image's CA settings are its own business. */
	ck_assert_str_eq(getenv("SSL_CERT_FILE"), "/image/certs.pem");
}
END_TEST

/* --print-env: one NAME=VALUE per set variable, table order, and nothing else. */
static void check_print(char **argv, size_t lines_want)
{
	struct bridge_opts o;
	ck_assert_int_eq(parse(&o, argv), 0);
	ck_assert(o.print_env);
	char buf[8192];
	memset(buf, 0, sizeof(buf));
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
	ck_assert_ptr_nonnull(f);
	env_print(&o, f);
	ck_assert_int_eq(fclose(f), 0);
	size_t lines = 0;
	size_t row = 0;
	for (char *line = buf; *line != '\0';) {
		char *nl = strchr(line, '\n');
		ck_assert_ptr_nonnull(nl);
		*nl = '\0';
		char *eq = strchr(line, '=');
		ck_assert_ptr_nonnull(eq);
		*eq = '\0';
		while (row < AN_ARRAY_LEN(bridge_vars) &&
		       strcmp(bridge_vars[row].name, line) != 0) {
			row++;
		}
		ck_assert_msg(row < AN_ARRAY_LEN(bridge_vars), "line %s out of table order", line);
		ck_assert_str_eq(eq + 1, var_value(&o, bridge_vars[row].src));
		lines++;
		line = nl + 1;
	}
	ck_assert_uint_eq(lines, lines_want);
}

START_TEST(test_print_env)
{
	env_clear();
	size_t ca_rows = 0;
	for (size_t i = 0; i < AN_ARRAY_LEN(bridge_vars); i++) {
		ca_rows += bridge_vars[i].src == VAR_CA;
	}
	ck_assert_uint_eq(ca_rows, 11);
	char *plain[] = { "bridge", "--print-env", NULL };
	check_print(plain, AN_ARRAY_LEN(bridge_vars) - ca_rows - 1);
	char *all[] = { "bridge",       "--print-env", "--ca", "/ca.pem",
			"--public-url", "https://u/x", NULL };
	check_print(all, AN_ARRAY_LEN(bridge_vars));
}
END_TEST

/* ---- Flags ---- */

static int parse_listen_arg(const char *addr)
{
	char arg[128];
	snprintf(arg, sizeof(arg), "%s", addr);
	char *argv[] = { "bridge", "--listen", arg, "--", "true", NULL };
	struct bridge_opts o;
	return parse(&o, argv);
}

START_TEST(test_listen_loopback_only)
{
	env_clear();
	static const char *good[] = { "127.0.0.1:8080",    "127.0.0.1:1", "127.0.0.1:65535",
				      "127.255.255.254:9", "[::1]:8080",  "127.0.0.1:00080" };
	static const char *bad[] = {
		"0.0.0.0:8080",
		"10.0.0.1:8080",
		"192.168.1.10:8080",
		"128.0.0.1:80",
		"localhost:8080",
		"127.0.0.1",
		"127.0.0.1:",
		"127.0.0.1:0",
		"127.0.0.1:65536",
		"127.0.0.1:8080x",
		" 127.0.0.1:8080",
		"127.0.0.1:+80",
		"127.0.0.1:-1",
		"[::]:8080",
		"[::ffff:127.0.0.1]:80",
		"[::1]",
		"::1:8080",
		"[::1:8080",
		":8080",
		"",
		"127.1:8080",
		"[fe80::1]:80",
		"127.0.0.1:100000",
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(good); i++) {
		ck_assert_msg(parse_listen_arg(good[i]) == 0, "refused %s", good[i]);
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		ck_assert_msg(parse_listen_arg(bad[i]) == -EINVAL, "accepted '%s'", bad[i]);
	}
}
END_TEST

START_TEST(test_ports_and_paths)
{
	env_clear();
	struct bridge_opts o;
	char *p65535[] = { "b", "--ingress-port", "65535", "--", "true", NULL };
	char *p65536[] = { "b", "--ingress-port", "65536", "--", "true", NULL };
	char *p0[] = { "b", "--ingress-port", "0", "--", "true", NULL };
	ck_assert_int_eq(parse(&o, p65535), 0);
	ck_assert_uint_eq(o.ingress_port, 65535);
	ck_assert_int_eq(parse(&o, p65536), -EINVAL);
	ck_assert_int_eq(parse(&o, p0), -EINVAL);
	setenv("AGENT_INGRESS_PORT", "http", 1);
	char *plain[] = { "b", "--", "true", NULL };
	ck_assert_int_eq(parse(&o, plain), -EINVAL);
	unsetenv("AGENT_INGRESS_PORT");

	/* sun_path holds 107 bytes and a NUL: 107 is N, 108 is N + 1. */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	memset(path, 'a', sizeof(path));
	path[0] = '/';
	path[sizeof(path) - 2] = '\0';
	ck_assert_uint_eq(strlen(path), 107);
	char *at_n[] = { "b", "--egress", path, "--", "true", NULL };
	ck_assert_int_eq(parse(&o, at_n), 0);
	path[sizeof(path) - 2] = 'a';
	path[sizeof(path) - 1] = '\0';
	char *over_n[] = { "b", "--ingress", path, "--", "true", NULL };
	ck_assert_int_eq(parse(&o, over_n), -EINVAL);
	setenv("AGENTSNET_EGRESS_SOCKET", path, 1);
	ck_assert_int_eq(parse(&o, plain), -EINVAL);
	setenv("AGENTSNET_EGRESS_SOCKET", "/e/egress.sock", 1);
	ck_assert_int_eq(parse(&o, plain), 0);
	ck_assert_str_eq(o.egress_path, "/e/egress.sock");
}
END_TEST

START_TEST(test_command_and_text)
{
	env_clear();
	struct bridge_opts o;
	char *none[] = { "b", NULL };
	char *dashes[] = { "b", "--", NULL };
	char *unknown[] = { "b", "--frobnicate", "--", "true", NULL };
	char *missing[] = { "b", "--egress", NULL };
	char *bare[] = { "b", "--no-seccomp", "sh", "-c", "--listen", NULL };
	char *nl[] = { "b", "--public-url", "https://x/\nHTTP_PROXY=evil", "--", "true", NULL };
	char *print[] = { "b", "--print-env", NULL };
	char *help[] = { "b", "--help", NULL };
	ck_assert_int_eq(parse(&o, none), -EINVAL);
	ck_assert_int_eq(parse(&o, dashes), -EINVAL);
	ck_assert_int_eq(parse(&o, unknown), -EINVAL);
	ck_assert_int_eq(parse(&o, missing), -EINVAL);
	ck_assert_int_eq(parse(&o, nl), -EINVAL);
	ck_assert_int_eq(parse(&o, print), 0);
	ck_assert_int_eq(parse(&o, help), 0);
	ck_assert(o.help);
	/* The command starts at the first non-option; its own flags are its own. */
	ck_assert_int_eq(parse(&o, bare), 0);
	ck_assert(o.no_seccomp);
	ck_assert_str_eq(o.cmd[0], "sh");
	ck_assert_str_eq(o.cmd[2], "--listen");
	ck_assert_ptr_null(o.cmd[3]);
	setenv("AGENT_CA_CERT", "/ca\t.pem", 1);
	char *plain[] = { "b", "--", "true", NULL };
	ck_assert_int_eq(parse(&o, plain), -EINVAL);
}
END_TEST

/* ---- The seccomp filter ---- */

struct probe {
	const char *what;
	long nr;
	long a0, a1, a2;
	int want; /* EPERM: refused; 0: must succeed; -1: anything but EPERM */
};

static const struct probe probes[] = {
	{ "AF_VSOCK", SYS_socket, AF_VSOCK, SOCK_STREAM, 0, EPERM },
	{ "AF_VSOCK, high bits", SYS_socket, (long)(0x100000000L | AF_VSOCK), SOCK_STREAM, 0,
	  EPERM },
	{ "AF_VSOCK dgram", SYS_socket, AF_VSOCK, SOCK_DGRAM | SOCK_CLOEXEC, 0, EPERM },
	{ "AF_PACKET raw", SYS_socket, AF_PACKET, SOCK_RAW, 0, EPERM },
	{ "AF_PACKET dgram", SYS_socket, AF_PACKET, SOCK_DGRAM, 0, EPERM },
	{ "AF_INET raw", SYS_socket, AF_INET, SOCK_RAW, IPPROTO_ICMP, EPERM },
	{ "AF_INET raw, flags", SYS_socket, AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC,
	  IPPROTO_RAW, EPERM },
	{ "AF_INET6 raw", SYS_socket, AF_INET6, SOCK_RAW, IPPROTO_ICMPV6, EPERM },
	{ "NETLINK_ROUTE raw", SYS_socket, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, EPERM },
	{ "NETLINK_ROUTE dgram", SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_ROUTE,
	  EPERM },
	{ "NETLINK_ROUTE, high bits", SYS_socket, AF_NETLINK, SOCK_DGRAM,
	  (long)(0x700000000L | NETLINK_ROUTE), EPERM },
	{ "io_uring_setup", SYS_io_uring_setup, 1, 0, 0, EPERM },
	{ "io_uring_enter", SYS_io_uring_enter, 0, 1, 0, EPERM },
	{ "io_uring_register", SYS_io_uring_register, 0, 0, 0, EPERM },
	{ "AF_INET stream", SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0, 0 },
	{ "AF_INET dgram", SYS_socket, AF_INET, SOCK_DGRAM, 0, 0 },
	{ "AF_INET6 stream", SYS_socket, AF_INET6, SOCK_STREAM, 0, -1 },
	{ "AF_UNIX stream", SYS_socket, AF_UNIX, SOCK_STREAM, 0, 0 },
	{ "AF_UNIX dgram", SYS_socket, AF_UNIX, SOCK_DGRAM, 0, 0 },
	{ "NETLINK_KOBJECT_UEVENT dgram", SYS_socket, AF_NETLINK, SOCK_DGRAM,
	  NETLINK_KOBJECT_UEVENT, -1 },
};

static size_t probe_index(const char *what)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(probes); i++) {
		if (strcmp(probes[i].what, what) == 0) {
			return i;
		}
	}
	ck_abort_msg("no probe %s", what);
	return 0;
}

/* io_uring is open to this process (kernel.io_uring_disabled is 0 or absent). */
static bool uring_enabled(void)
{
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	int v = 0;
	if (f != NULL) {
		if (fscanf(f, "%d", &v) != 1) {
			v = 0;
		}
		fclose(f);
	}
	return v == 0;
}

/* In a child: loads the filter (unless <bare>), runs every probe, reports each errno on <fd>. */
static _Noreturn void probe_child(int fd, bool bare)
{
	int errs[AN_ARRAY_LEN(probes)];
	if (!bare) {
		scmp_filter_ctx ctx = NULL;
		if (filter_build(&ctx) != 0 || filter_load(ctx) != 0) {
			_exit(3);
		}
		seccomp_release(ctx);
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(probes); i++) {
		const struct probe *p = &probes[i];
		/* io_uring_setup needs a zeroed parameter block. */
		uint64_t params[16] = { 0 };
		long a1 = p->nr == SYS_io_uring_setup ? (long)params : p->a1;
		long rc = syscall(p->nr, p->a0, a1, p->a2, 0L, 0L, 0L);
		errs[i] = rc >= 0 ? 0 : errno;
		if (rc >= 0) {
			close((int)rc);
		}
	}
	ssize_t n = write(fd, errs, sizeof(errs));
	_exit(n == (ssize_t)sizeof(errs) ? 0 : 4);
}

static void run_probes(bool bare, int *errs)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		probe_child(p[1], bare);
	}
	close(p[1]);
	ssize_t n = read(p[0], errs, sizeof(int) * AN_ARRAY_LEN(probes));
	close(p[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st), "probe child killed by signal %d", WTERMSIG(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	ck_assert_int_eq(n, (ssize_t)(sizeof(int) * AN_ARRAY_LEN(probes)));
}

START_TEST(test_filter_refuses_side_doors)
{
	int errs[AN_ARRAY_LEN(probes)];
	run_probes(false, errs);
	for (size_t i = 0; i < AN_ARRAY_LEN(probes); i++) {
		const struct probe *p = &probes[i];
		if (p->want == -1) {
			ck_assert_msg(errs[i] != EPERM, "%s: EPERM", p->what);
		} else {
			ck_assert_msg(errs[i] == p->want, "%s: errno %d (%s), want %d", p->what,
				      errs[i], strerror(errs[i]), p->want);
		}
	}
}
END_TEST

/* Without the filter, the same calls are not refused with EPERM (as root): the filter matters. */
START_TEST(test_filter_matters)
{
	if (geteuid() != 0) {
		return; /* unprivileged, raw and packet sockets are EPERM anyway */
	}
	int errs[AN_ARRAY_LEN(probes)];
	run_probes(true, errs);
	for (size_t i = 0; i < AN_ARRAY_LEN(probes); i++) {
		if (probes[i].want == EPERM && strncmp(probes[i].what, "io_uring", 8) != 0) {
			ck_assert_msg(errs[i] != EPERM, "%s: EPERM without the filter",
				      probes[i].what);
		}
	}
	if (uring_enabled()) {
		ck_assert_int_ne(errs[probe_index("io_uring_setup")], EPERM);
	}
}
END_TEST

/* Another architecture's system call (x32 or i386 entry) kills the agent. */
static int run_foreign(int abi)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		scmp_filter_ctx ctx = NULL;
		if (filter_build(&ctx) != 0 || filter_load(ctx) != 0) {
			_exit(3);
		}
		if (abi == 0) {
			(void)syscall(0x40000000L | SYS_getpid);
		} else {
			long ret;
			__asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
			(void)ret;
		}
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st), "a foreign system call returned (exit %d)", WEXITSTATUS(st));
	return WTERMSIG(st);
}

START_TEST(test_filter_kills_other_arches)
{
	ck_assert_int_eq(run_foreign(0), SIGSYS);
	ck_assert_int_eq(run_foreign(1), SIGSYS);
}
END_TEST

/* no_new_privs only when the kernel requires it: as root it is not set, as nobody it is. */
START_TEST(test_filter_no_new_privs)
{
	for (int as_nobody = 0; as_nobody < 2; as_nobody++) {
		if (geteuid() != 0 && !as_nobody) {
			continue;
		}
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			if (as_nobody && geteuid() == 0 &&
			    (setgid(65534) != 0 || setuid(65534) != 0)) {
				_exit(5);
			}
			scmp_filter_ctx ctx = NULL;
			if (filter_build(&ctx) != 0 || filter_load(ctx) != 0) {
				_exit(3);
			}
			_exit(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 ? 1 : 0);
		}
		int st;
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert(WIFEXITED(st));
		ck_assert_int_eq(WEXITSTATUS(st), as_nobody ? 1 : 0);
	}
}
END_TEST

/* ---- The relay ---- */

struct peer {
	int fd;
	uint64_t seed_out;    /* what it sends */
	uint64_t seed_in;     /* what it expects */
	bool reply_after_eof; /* read everything first, then send (strict half-close) */
	uint64_t sent;
	struct stream_result got;
};

static void *writer_main(void *arg)
{
	struct peer *p = arg;
	p->sent = stream_write(p->fd, p->seed_out, TEST_STREAM_BYTES);
	shutdown(p->fd, SHUT_WR);
	return NULL;
}

/* Both directions of one connection: concurrently, or reply-after-EOF. */
static void *peer_main(void *arg)
{
	struct peer *p = arg;
	if (p->reply_after_eof) {
		p->got = stream_read(p->fd, p->seed_in);
		writer_main(p);
		return NULL;
	}
	pthread_t w;
	ck_assert_int_eq(pthread_create(&w, NULL, writer_main, p), 0);
	p->got = stream_read(p->fd, p->seed_in);
	ck_assert_int_eq(pthread_join(w, NULL), 0);
	return NULL;
}

static void *accept_peer_main(void *arg)
{
	struct peer *p = arg;
	int lfd = p->fd;
	p->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(p->fd, 0);
	peer_main(p);
	close(p->fd);
	return NULL;
}

static void check_peer(const struct peer *p)
{
	ck_assert_uint_eq(p->sent, TEST_STREAM_BYTES);
	ck_assert_int_eq(p->got.err, 0);
	ck_assert_uint_eq(p->got.bytes, TEST_STREAM_BYTES);
	ck_assert_uint_eq(p->got.bad, 0);
}

/* 10 MiB each way through the bridge: agent (TCP) <-> bridge <-> daemon (Unix). */
static void relay_streams(bool server_replies_after_eof)
{
	dir_make();
	int fds_before = fd_count();
	char egress[128];
	dir_path(egress, sizeof(egress), "egress.sock");
	int lfd = unix_listen(egress);
	uint16_t port;
	struct bridge *b = loop_start(egress, BRIDGE_CONNS_MAX, &port);
	struct peer server = { .fd = lfd, .seed_out = 2, .seed_in = 1 };
	server.reply_after_eof = server_replies_after_eof;
	pthread_t st;
	ck_assert_int_eq(pthread_create(&st, NULL, accept_peer_main, &server), 0);
	struct peer client = { .fd = tcp_connect(port), .seed_out = 1, .seed_in = 2 };
	peer_main(&client);
	ck_assert_int_eq(pthread_join(st, NULL), 0);
	close(client.fd);
	check_peer(&client);
	check_peer(&server);
	loop_end(b);
	close(lfd);
	unlink(egress);
	ck_assert_int_eq(fd_count(), fds_before);
}

START_TEST(test_relay_10mib_both_ways)
{
	relay_streams(false);
}
END_TEST

START_TEST(test_relay_half_close)
{
	relay_streams(true);
}
END_TEST

/* No daemon: the agent's connection is reset at once, never left hanging. */
START_TEST(test_relay_no_daemon)
{
	dir_make();
	int fds_before = fd_count();
	char egress[128];
	dir_path(egress, sizeof(egress), "egress.sock");
	uint16_t port;
	struct bridge *b = loop_start(egress, 4, &port);
	for (int stale = 0; stale < 2; stale++) {
		if (stale) {
			close(unix_listen(egress)); /* a socket file no one serves any more */
		}
		int fd = tcp_connect(port);
		ck_assert_int_eq(read_one(fd, 2000), -ECONNRESET);
		close(fd);
	}
	loop_end(b);
	unlink(egress);
	ck_assert_int_eq(fd_count(), fds_before);
}
END_TEST

/* The daemon goes away mid-connection: the agent sees EOF or a reset, never a hang. */
START_TEST(test_relay_daemon_dies)
{
	dir_make();
	char egress[128];
	dir_path(egress, sizeof(egress), "egress.sock");
	int lfd = unix_listen(egress);
	uint16_t port;
	struct bridge *b = loop_start(egress, 4, &port);
	for (int unread = 0; unread < 2; unread++) {
		int fd = tcp_connect(port);
		int up = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		ck_assert_int_ge(up, 0);
		ck_assert_int_eq(write(fd, "GET", 3), 3);
		if (!unread) {
			char buf[3];
			ck_assert_int_eq(read(up, buf, sizeof(buf)), 3);
		} else {
			usleep(50 * 1000); /* left unread, so the close is a reset */
		}
		close(up);
		int rc = read_one(fd, 2000);
		ck_assert_msg(rc == 0 || rc == -ECONNRESET, "read: %d", rc);
		close(fd);
	}
	loop_end(b);
	close(lfd);
}
END_TEST

struct early {
	int lfd;
	uint64_t answer_bytes;
};

/* The daemon reads a request head, answers (1 MiB, more than the socket buffers hold) and
 * closes without reading the body: the way a 403 or 413 ends an upload. */
static void *early_main(void *arg)
{
	struct early *e = arg;
	int fd = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	char head[64];
	ck_assert_int_gt(read(fd, head, sizeof(head)), 0);
	ck_assert_uint_eq(stream_write(fd, 7, e->answer_bytes), e->answer_bytes);
	close(fd);
	return NULL;
}

static void *upload_main(void *arg)
{
	int fd = *(int *)arg;
	(void)stream_write(fd, 6, TEST_STREAM_BYTES); /* may fail part-way; either is fine */
	return NULL;
}

/* An answer sent before the daemon stops reading reaches the agent whole, ended by EOF, not
 * cut off by a reset, while the agent is still uploading. */
START_TEST(test_relay_early_answer)
{
	signal(SIGPIPE, SIG_IGN);
	dir_make();
	char egress[128];
	dir_path(egress, sizeof(egress), "egress.sock");
	struct early e = { .lfd = unix_listen(egress), .answer_bytes = 1u << 20 };
	uint16_t port;
	struct bridge *b = loop_start(egress, 4, &port);
	pthread_t dt;
	ck_assert_int_eq(pthread_create(&dt, NULL, early_main, &e), 0);
	int agent = tcp_connect(port);
	pthread_t ut;
	ck_assert_int_eq(pthread_create(&ut, NULL, upload_main, &agent), 0);
	usleep(200 * 1000); /* the agent reads only once the daemon is gone */
	struct stream_result r = stream_read(agent, 7);
	ck_assert_int_eq(r.err, 0);
	ck_assert_uint_eq(r.bytes, e.answer_bytes);
	ck_assert_uint_eq(r.bad, 0);
	ck_assert_int_eq(pthread_join(ut, NULL), 0);
	ck_assert_int_eq(pthread_join(dt, NULL), 0);
	close(agent);
	loop_end(b);
	close(e.lfd);
}
END_TEST

/* At the limit (N open), connection N + 1 is closed at once; the N still work; one ends, and
 * a new one is served again. */
START_TEST(test_relay_conn_limit)
{
	dir_make();
	char egress[128];
	dir_path(egress, sizeof(egress), "egress.sock");
	int lfd = unix_listen(egress);
	uint16_t port;
	struct bridge *b = loop_start(egress, 2, &port);
	int agent[3];
	int daemon[3];
	for (int i = 0; i < 2; i++) {
		agent[i] = tcp_connect(port);
		daemon[i] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		ck_assert_int_ge(daemon[i], 0);
	}
	agent[2] = tcp_connect(port);
	ck_assert_int_eq(read_one(agent[2], 2000), -ECONNRESET);
	close(agent[2]);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(write(agent[i], "p", 1), 1);
		ck_assert_int_eq(read_one(daemon[i], 2000), 1);
		ck_assert_int_eq(write(daemon[i], "q", 1), 1);
		ck_assert_int_eq(read_one(agent[i], 2000), 1);
	}
	close(agent[0]);
	close(daemon[0]);
	usleep(50 * 1000);
	agent[2] = tcp_connect(port);
	daemon[2] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(daemon[2], 0);
	ck_assert_int_eq(write(daemon[2], "q", 1), 1);
	ck_assert_int_eq(read_one(agent[2], 2000), 1);
	for (int i = 1; i < 3; i++) {
		close(agent[i]);
		close(daemon[i]);
	}
	loop_end(b);
	close(lfd);
}
END_TEST

static void buf_force(int fd, int opt, int bytes)
{
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)), 0);
}

static int fd_unread(int fd)
{
	int n = 0;
	ck_assert_int_eq(ioctl(fd, FIONREAD, &n), 0);
	return n;
}

/*
 * A direction that used its budget yields, and the ready queue brings it back although no
 * socket will signal again: the daemon sent everything at once and went quiet, and the
 * buffers are forced large enough that nothing the bridge writes blocks. The loop runs on
 * this thread, so each turn is seen. Needs root for the forced buffer sizes.
 */
START_TEST(test_relay_yield_resumes)
{
	if (geteuid() != 0) {
		return;
	}
	dir_make();
	char ingress[128];
	dir_path(ingress, sizeof(ingress), "ingress.sock");
	int agent_lfd = tcp_listen();
	struct bridge *b = &test_bridge;
	ck_assert_int_eq(bridge_init(b, 4), 0);
	ck_assert_int_eq(bridge_ingress(b, ingress, -1, fd_port(agent_lfd)), 0);
	int daemon = unix_connect(ingress);
	for (int i = 0; i < 100 && (b->conns_in_use == 0 || b->conns[0].connecting); i++) {
		ck_assert_int_ge(bridge_turn(b, 10), 0);
	}
	struct bridge_conn *c = &b->conns[0]; /* the first slot taken */
	ck_assert(c->in_use);
	ck_assert(!c->connecting);
	int agent = accept4(agent_lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(agent, 0);
	const int big = 32 << 20;
	buf_force(daemon, SO_SNDBUFFORCE, big);
	buf_force(c->fd[1], SO_SNDBUFFORCE, big);
	const uint64_t total = 4u * BRIDGE_PUMP_BYTES_MAX;
	ck_assert_uint_eq(stream_write(daemon, 5, total), total);
	ck_assert_int_eq(fd_unread(c->fd[0]), (int)total);
	bool yielded = false;
	for (int i = 0; i < 50 && fd_unread(c->fd[0]) > 0; i++) {
		ck_assert_int_ge(bridge_turn(b, 10), 0);
		yielded = yielded || b->ready_count > 0;
	}
	ck_assert_int_eq(fd_unread(c->fd[0]), 0);
	ck_assert(yielded);
	shutdown(daemon, SHUT_WR);
	for (int i = 0; i < 50 && !c->half[0].shut; i++) {
		ck_assert_int_ge(bridge_turn(b, 10), 0);
	}
	struct stream_result r = stream_read(agent, 5);
	ck_assert_uint_eq(r.bytes, total);
	ck_assert_uint_eq(r.bad, 0);
	close(agent);
	close(daemon);
	for (int i = 0; i < 100 && b->conns_in_use > 0; i++) {
		ck_assert_int_ge(bridge_turn(b, 10), 0);
	}
	ck_assert_uint_eq(b->conns_in_use, 0);
	bridge_destroy(b);
	close(agent_lfd);
}
END_TEST

/* Ingress: the daemon (Unix) <-> bridge <-> the agent's port (TCP), 10 MiB each way. */
START_TEST(test_ingress_relay)
{
	dir_make();
	int fds_before = fd_count();
	char ingress[128];
	dir_path(ingress, sizeof(ingress), "ingress.sock");
	int agent_lfd = tcp_listen();
	uint16_t unused;
	struct bridge *b = loop_start("/nonexistent/egress.sock", 8, &unused);
	ck_assert_int_eq(bridge_ingress(b, ingress, -1, fd_port(agent_lfd)), 0);
	struct stat st;
	ck_assert_int_eq(stat(ingress, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0666);
	struct peer agent = { .fd = agent_lfd, .seed_out = 4, .seed_in = 3 };
	pthread_t at;
	ck_assert_int_eq(pthread_create(&at, NULL, accept_peer_main, &agent), 0);
	struct peer daemon = { .fd = unix_connect(ingress), .seed_out = 3, .seed_in = 4 };
	peer_main(&daemon);
	ck_assert_int_eq(pthread_join(at, NULL), 0);
	close(daemon.fd);
	check_peer(&agent);
	check_peer(&daemon);
	/* Nothing on the agent's port: the daemon's connection ends at once. */
	close(agent_lfd);
	int fd = unix_connect(ingress);
	ck_assert_int_eq(read_one(fd, 2000), 0);
	close(fd);
	loop_end(b);
	ck_assert_int_eq(stat(ingress, &st), -1); /* removed on destroy */
	ck_assert_int_eq(fd_count(), fds_before);
}
END_TEST

/* What ingress does with the path: a stale socket is replaced; a live socket, a file that is
 * not a socket or a missing directory disable ingress and leave the path alone. */
START_TEST(test_ingress_existing_path)
{
	dir_make();
	char path[128];
	dir_path(path, sizeof(path), "ingress.sock");
	struct bridge *b = &test_bridge;
	ck_assert_int_eq(bridge_init(b, 4), 0);
	close(unix_listen(path)); /* stale */
	ck_assert_int_eq(bridge_ingress(b, path, -1, 8081), 0);
	/* A second bridge finds the first one's live socket and leaves it. */
	static struct bridge other;
	ck_assert_int_eq(bridge_init(&other, 4), 0);
	ck_assert_int_eq(bridge_ingress(&other, path, -1, 8081), -EADDRINUSE);
	bridge_destroy(&other);
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	/* The file was replaced behind the bridge's back: destroy leaves the new one. */
	ck_assert_int_eq(unlink(path), 0);
	int f = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	ck_assert_int_ge(f, 0);
	close(f);
	bridge_destroy(b);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_int_eq(bridge_init(b, 4), 0);
	ck_assert_int_eq(bridge_ingress(b, path, -1, 8081), -EEXIST);
	ck_assert_int_eq(stat(path, &st), 0);
	char missing[160];
	dir_path(missing, sizeof(missing), "no-such-dir/ingress.sock");
	ck_assert_int_eq(bridge_ingress(b, missing, -1, 8081), -ENOENT);
	ck_assert_int_eq(b->ingress_fd, -1);
	bridge_destroy(b);
	unlink(path);
}
END_TEST

/* An ingress listener passed down (--ingress-fd): adopted, kept from the agent, relayed; the
 * caller's socket file is left in place. Anything but a listening Unix stream socket is
 * refused and left alone. */
START_TEST(test_ingress_inherited_fd)
{
	dir_make();
	char path[128];
	dir_path(path, sizeof(path), "ingress.sock");
	int agent_lfd = tcp_listen();
	int lfd = unix_listen(path);
	ck_assert_int_eq(fcntl(lfd, F_SETFD, 0), 0);
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	int unbound = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(unbound, 0);
	struct bridge *b = &test_bridge;
	ck_assert_int_eq(bridge_init(b, 4), 0);
	ck_assert_int_eq(bridge_ingress(b, path, p[0], 8081), -ENOTSOCK);
	ck_assert_int_eq(bridge_ingress(b, path, unbound, 8081), -EINVAL);
	ck_assert_int_eq(bridge_ingress(b, path, agent_lfd, 8081), -EINVAL); /* TCP */
	ck_assert_int_eq(fcntl(p[0], F_GETFD), 0);                           /* left alone */
	ck_assert_int_eq(bridge_ingress(b, path, lfd, fd_port(agent_lfd)), 0);
	ck_assert_int_eq(b->ingress_fd, lfd);
	ck_assert_int_eq(fcntl(lfd, F_GETFD), FD_CLOEXEC);
	int daemon = unix_connect(path);
	int agent = -1;
	for (int i = 0; i < 200 && agent < 0; i++) {
		ck_assert_int_ge(bridge_turn(b, 10), 0);
		agent = accept4(agent_lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	}
	ck_assert_int_ge(agent, 0);
	ck_assert_int_eq(write(daemon, "w", 1), 1);
	char c = 0;
	for (int i = 0; i < 200 && read(agent, &c, 1) != 1; i++) {
		ck_assert_int_ge(bridge_turn(b, 10), 0);
	}
	ck_assert_int_eq(c, 'w');
	close(agent);
	close(daemon);
	for (int i = 0; i < 200 && b->conns_in_use > 0; i++) {
		ck_assert_int_ge(bridge_turn(b, 10), 0);
	}
	ck_assert_uint_eq(b->conns_in_use, 0);
	bridge_destroy(b);
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	close(p[0]);
	close(p[1]);
	close(unbound);
	close(agent_lfd);
	struct bridge_opts o;
	char *good[] = { "b", "--ingress-fd", "3", "--", "true", NULL };
	char *bad[] = { "b", "--ingress-fd", "-1", "--", "true", NULL };
	char *text[] = { "b", "--ingress-fd", "three", "--", "true", NULL };
	ck_assert_int_eq(parse(&o, good), 0);
	ck_assert_int_eq(o.ingress_fd, 3);
	ck_assert_int_eq(parse(&o, bad), -EINVAL);
	ck_assert_int_eq(parse(&o, text), -EINVAL);
	char *none[] = { "b", "--", "true", NULL };
	ck_assert_int_eq(parse(&o, none), 0);
	ck_assert_int_eq(o.ingress_fd, -1);
}
END_TEST

/* ---- bridge_main(), with this binary as the agent ---- */

static int probe_env(void)
{
	const char *want = getenv("BRIDGE_TEST_PROXY");
	const char *got = getenv("HTTP_PROXY");
	if (want == NULL || got == NULL || strcmp(want, got) != 0) {
		return 10;
	}
	if (getenv("NODE_USE_ENV_PROXY") == NULL || strcmp(getenv("NODE_USE_ENV_PROXY"), "1")) {
		return 11;
	}
	sigset_t mask;
	sigprocmask(SIG_SETMASK, NULL, &mask);
	for (int sig = 1; sig < SIGRTMIN; sig++) {
		struct sigaction sa;
		if (sigismember(&mask, sig) == 1) {
			return 12;
		}
		if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) {
			return 13;
		}
	}
	if (getpgrp() != getpid()) {
		return 14;
	}
	int pdeath = 0;
	if (prctl(PR_GET_PDEATHSIG, &pdeath) != 0 || pdeath != SIGKILL) {
		return 15;
	}
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur != strtoul(getenv("BRIDGE_TEST_NOFILE"), NULL, 10)) {
		return 16;
	}
	return 0;
}

static void probe_signal_handler(int sig)
{
	_exit(sig);
}

/* Runs as the agent when BRIDGE_TEST_PROBE is set; returns its exit status. */
static int probe_main(const char *what)
{
	if (strcmp(what, "env") == 0) {
		return probe_env();
	}
	if (strcmp(what, "uring") == 0) {
		uint64_t params[16] = { 0 };
		long fd = syscall(SYS_io_uring_setup, 1, params);
		return fd >= 0 ? 1 : errno == EPERM ? 0 : 2;
	}
	if (strcmp(what, "signals") == 0) {
		for (size_t i = 0; i < AN_ARRAY_LEN(bridge_forwarded); i++) {
			signal(bridge_forwarded[i], probe_signal_handler);
		}
		if (write(3, "r", 1) != 1) {
			return 20;
		}
		for (;;) {
			pause();
		}
	}
	return 99;
}

struct run {
	pid_t pid;
	int ready_fd; /* the agent's fd 3 */
	int err_fd;   /* the bridge's and the agent's stderr */
	char listen[32];
	char ingress[128];
};

/* Forks a bridge (in its own process group, so job-control stops stay inside the test). */
static void run_start(struct run *r, const char *probe, char **extra, char **cmd)
{
	int ready[2];
	int err[2];
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(err), 0);
	snprintf(r->listen, sizeof(r->listen), "127.0.0.1:%u", port_free());
	dir_path(r->ingress, sizeof(r->ingress), "ingress.sock");
	r->pid = fork();
	ck_assert_int_ge(r->pid, 0);
	if (r->pid == 0) {
		/* Dies with the test, even when libcheck's timeout kills it mid-run. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		setpgid(0, 0);
		dup2(ready[1], 3);
		dup2(err[1], 2);
		char *argv[32] = { "agentsnet-bridge",
				   "--listen",
				   r->listen,
				   "--ingress",
				   r->ingress,
				   "--egress",
				   "/nonexistent/egress.sock" };
		int argc = 7;
		for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
			argv[argc++] = extra[i];
		}
		argv[argc++] = "--";
		for (int i = 0; cmd[i] != NULL; i++) {
			argv[argc++] = cmd[i];
		}
		argv[argc] = NULL;
		if (probe != NULL) {
			setenv("BRIDGE_TEST_PROBE", probe, 1);
		}
		char proxy[64];
		snprintf(proxy, sizeof(proxy), "http://%s", r->listen);
		setenv("BRIDGE_TEST_PROXY", proxy, 1);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		dup2(null, 0);
		_exit(bridge_main(argc, argv));
	}
	close(ready[1]);
	close(err[1]);
	r->ready_fd = ready[0];
	r->err_fd = err[0];
}

/* Waits up to 20 s for a state change of <pid> (<flags> as for waitpid); kills it after that. */
static int wait_timed(pid_t pid, int flags)
{
	int st = 0;
	for (int i = 0; i < 2000; i++) {
		pid_t got = waitpid(pid, &st, flags | WNOHANG);
		ck_assert_int_ne(got, -1);
		if (got == pid) {
			return st;
		}
		usleep(10 * 1000);
	}
	kill(pid, SIGKILL);
	ck_abort_msg("the bridge %d did not change state in 20 s", (int)pid);
	return st;
}

/* Waits for the bridge and returns its exit status; its stderr goes to <err> (may be NULL). */
static int run_wait(struct run *r, char *err, size_t err_len)
{
	int st = wait_timed(r->pid, 0);
	ck_assert_msg(WIFEXITED(st), "the bridge was killed by signal %d", WTERMSIG(st));
	char buf[4096];
	size_t len = 0;
	struct pollfd p = { .fd = r->err_fd, .events = POLLIN };
	while (len < sizeof(buf) - 1 && poll(&p, 1, 5000) == 1) {
		ssize_t n = read(r->err_fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0) {
			break;
		}
		len += (size_t)n;
	}
	buf[len] = '\0';
	if (err != NULL) {
		snprintf(err, err_len, "%s", buf);
	}
	close(r->ready_fd);
	close(r->err_fd);
	struct stat sst;
	ck_assert_msg(stat(r->ingress, &sst) == -1, "ingress socket left behind");
	return WEXITSTATUS(st);
}

static int run_cmd(char **extra, char **cmd, char *err, size_t err_len)
{
	struct run r;
	run_start(&r, NULL, extra, cmd);
	return run_wait(&r, err, err_len);
}

START_TEST(test_main_exit_status)
{
	dir_make();
	char err[4096];
	char *exit7[] = { "sh", "-c", "echo agent >&2; exit 7", NULL };
	ck_assert_int_eq(run_cmd(NULL, exit7, err, sizeof(err)), 7);
	/* "ready" comes before anything the agent writes. */
	char *ready = strstr(err, "agentsnet-bridge: ready\n");
	char *agent = strstr(err, "agent\n");
	ck_assert_ptr_nonnull(ready);
	ck_assert_ptr_nonnull(agent);
	ck_assert(ready < agent);
	char *killed[] = { "sh", "-c", "kill -KILL $$", NULL };
	ck_assert_int_eq(run_cmd(NULL, killed, NULL, 0), 128 + SIGKILL);
	char *termed[] = { "sh", "-c", "kill -TERM $$", NULL };
	ck_assert_int_eq(run_cmd(NULL, termed, NULL, 0), 128 + SIGTERM);
	char *zero[] = { "true", NULL };
	ck_assert_int_eq(run_cmd(NULL, zero, NULL, 0), 0);
	char *missing[] = { "/nonexistent/agent", NULL };
	ck_assert_int_eq(run_cmd(NULL, missing, err, sizeof(err)), 127);
	ck_assert_ptr_nonnull(strstr(err, "exec /nonexistent/agent"));
	char plain[160];
	dir_path(plain, sizeof(plain), "not-executable");
	int f = open(plain, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
	ck_assert_int_ge(f, 0);
	close(f);
	char *noexec[] = { plain, NULL };
	ck_assert_int_eq(run_cmd(NULL, noexec, NULL, 0), 126);
	char *badca[] = { "--ca", "/nonexistent/ca.pem", NULL };
	ck_assert_int_eq(run_cmd(badca, zero, err, sizeof(err)), BRIDGE_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(err, "CA bundle /nonexistent/ca.pem"));
}
END_TEST

START_TEST(test_main_forwards_signals)
{
	dir_make();
	char *self[] = { "/proc/self/exe", NULL };
	for (size_t i = 0; i < AN_ARRAY_LEN(bridge_forwarded); i++) {
		struct run r;
		run_start(&r, "signals", NULL, self);
		ck_assert_int_eq(read_one(r.ready_fd, 10000), 1);
		ck_assert_int_eq(kill(r.pid, bridge_forwarded[i]), 0);
		ck_assert_int_eq(run_wait(&r, NULL, 0), bridge_forwarded[i]);
	}
}
END_TEST

START_TEST(test_main_agent_environment)
{
	dir_make();
	struct rlimit rl;
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	char nofile[32];
	snprintf(nofile, sizeof(nofile), "%lu", (unsigned long)rl.rlim_cur);
	setenv("BRIDGE_TEST_NOFILE", nofile, 1);
	/* Under what the bridge wants, so it raises its own and must restore the agent's. */
	rl.rlim_cur = 1024;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	snprintf(nofile, sizeof(nofile), "%lu", (unsigned long)rl.rlim_cur);
	setenv("BRIDGE_TEST_NOFILE", nofile, 1);
	setenv("HTTP_PROXY", "http://corp:3128", 1);
	signal(SIGHUP, SIG_IGN); /* the agent gets default dispositions anyway */
	struct run r;
	char *self[] = { "/proc/self/exe", NULL };
	run_start(&r, "env", NULL, self);
	ck_assert_int_eq(run_wait(&r, NULL, 0), 0);
}
END_TEST

START_TEST(test_main_filter_and_no_seccomp)
{
	dir_make();
	char *self[] = { "/proc/self/exe", NULL };
	struct run r;
	run_start(&r, "uring", NULL, self);
	ck_assert_int_eq(run_wait(&r, NULL, 0), 0); /* EPERM under the filter */
	char *bare[] = { "--no-seccomp", NULL };
	char err[4096];
	run_start(&r, "uring", bare, self);
	/* io_uring works without it (when the kernel lets this process have it at all). */
	ck_assert_int_eq(run_wait(&r, err, sizeof(err)), uring_enabled() ? 1 : 0);
	ck_assert_ptr_nonnull(strstr(err, "--no-seccomp"));
}
END_TEST

/* An orphan re-parented to the bridge is reaped: it is gone, not a zombie, while the agent
 * still runs. */
START_TEST(test_main_reaps_orphans)
{
	dir_make();
	char script[512];
	snprintf(script, sizeof(script),
		 "(sh -c 'echo $$ > %s/orphan' &) ; sleep 0.3; "
		 "pid=$(cat %s/orphan); test -n \"$pid\" || exit 3; "
		 "for i in 1 2 3 4 5 6 7 8 9 10; do test -e /proc/$pid || exit 0; sleep 0.1; done; "
		 "exit 4",
		 test_dir, test_dir);
	char *cmd[] = { "sh", "-c", script, NULL };
	ck_assert_int_eq(run_cmd(NULL, cmd, NULL, 0), 0);
}
END_TEST

/* What is left of the agent's process group dies with it. */
START_TEST(test_main_kills_agent_group)
{
	dir_make();
	char script[256];
	snprintf(script, sizeof(script), "sleep 60 & echo $! > %s/left; exit 0", test_dir);
	char *cmd[] = { "sh", "-c", script, NULL };
	ck_assert_int_eq(run_cmd(NULL, cmd, NULL, 0), 0);
	char path[160];
	dir_path(path, sizeof(path), "left");
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	long pid = 0;
	ck_assert_int_eq(fscanf(f, "%ld", &pid), 1);
	fclose(f);
	ck_assert_int_gt(pid, 1);
	int i = 0;
	while (kill((pid_t)pid, 0) == 0 && i++ < 100) {
		usleep(20 * 1000);
	}
	ck_assert_msg(kill((pid_t)pid, 0) == -1, "the agent's child %ld outlived it", pid);
}
END_TEST

/* A job-control stop of the agent stops the bridge's group; SIGCONT resumes both. */
START_TEST(test_main_job_control_stop)
{
	dir_make();
	struct run r;
	char *cmd[] = { "sh", "-c", "kill -TSTP $$; exit 5", NULL };
	run_start(&r, NULL, NULL, cmd);
	int st = wait_timed(r.pid, WUNTRACED);
	ck_assert_msg(WIFSTOPPED(st), "the bridge did not stop (status %#x)", st);
	ck_assert_int_eq(WSTOPSIG(st), SIGTSTP);
	ck_assert_int_eq(kill(r.pid, SIGCONT), 0);
	ck_assert_int_eq(run_wait(&r, NULL, 0), 5);
}
END_TEST

static Suite *bridge_suite(void)
{
	Suite *s = suite_create("bridge");
	TCase *env = tcase_create("env");
	tcase_add_checked_fixture(env, NULL, dir_remove);
	tcase_add_test(env, test_env_table_is_the_contract);
	tcase_add_test(env, test_env_without_ca);
	tcase_add_test(env, test_env_with_ca_and_flags);
	tcase_add_test(env, test_env_from_environment);
	tcase_add_test(env, test_env_overrides_caller);
	tcase_add_test(env, test_print_env);
	tcase_add_test(env, test_listen_loopback_only);
	tcase_add_test(env, test_ports_and_paths);
	tcase_add_test(env, test_command_and_text);
	suite_add_tcase(s, env);
	TCase *filter = tcase_create("filter");
	tcase_add_checked_fixture(filter, NULL, dir_remove);
	tcase_add_test(filter, test_filter_refuses_side_doors);
	tcase_add_test(filter, test_filter_matters);
	tcase_add_test(filter, test_filter_kills_other_arches);
	tcase_add_test(filter, test_filter_no_new_privs);
	suite_add_tcase(s, filter);
	TCase *relay = tcase_create("relay");
	tcase_add_checked_fixture(relay, NULL, dir_remove);
	tcase_set_timeout(relay, 60);
	tcase_add_test(relay, test_relay_10mib_both_ways);
	tcase_add_test(relay, test_relay_half_close);
	tcase_add_test(relay, test_relay_no_daemon);
	tcase_add_test(relay, test_relay_daemon_dies);
	tcase_add_test(relay, test_relay_early_answer);
	tcase_add_test(relay, test_relay_conn_limit);
	tcase_add_test(relay, test_relay_yield_resumes);
	tcase_add_test(relay, test_ingress_relay);
	tcase_add_test(relay, test_ingress_existing_path);
	tcase_add_test(relay, test_ingress_inherited_fd);
	suite_add_tcase(s, relay);
	TCase *pid1 = tcase_create("pid1");
	tcase_add_checked_fixture(pid1, NULL, dir_remove);
	tcase_set_timeout(pid1, 60);
	tcase_add_test(pid1, test_main_exit_status);
	tcase_add_test(pid1, test_main_forwards_signals);
	tcase_add_test(pid1, test_main_agent_environment);
	tcase_add_test(pid1, test_main_filter_and_no_seccomp);
	tcase_add_test(pid1, test_main_reaps_orphans);
	tcase_add_test(pid1, test_main_kills_agent_group);
	tcase_add_test(pid1, test_main_job_control_stop);
	suite_add_tcase(s, pid1);
	return s;
}

int main(void)
{
	const char *probe = getenv("BRIDGE_TEST_PROBE");
	if (probe != NULL) {
		return probe_main(probe);
	}
	return unit_run(bridge_suite());
}
