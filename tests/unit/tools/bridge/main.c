/*
 * Unit tests for tools/bridge/main.c (included with BRIDGE_NO_MAIN, so its statics are reachable).
 *
 * - The agent's environment: every row of the table, checked against an independent list of
 *   names, with and without a CA bundle; caller-set variables overwritten; --print-env's lines.
 * - Flags: loopback-only listen addresses, ports and socket paths at N and N+1.
 * - The seccomp filters, the agent's and the bridge's own: every rule is a real attempt in a
 *   child of its own, refused with the filter's errno under it, and (as root) not refused so
 *   without it; what a filter lets through ends as it does without one. In AF_INET and
 *   AF_INET6 every type and protocols 0-1023 (and beyond) swept. glibc's fork, threads and
 *   posix_spawn work under the agent's, and so do TCP, a resolver's UDP and ping's ICMP echo
 *   (as root, in a network namespace of the test's own); other architectures are killed.
 * - The relay, driven by bridge_turn() on a thread against a Unix server in the test: 10 MiB
 *   each way, byte-identical, with half-close; an absent or dying daemon; the connection limit
 *   at N and N+1; ingress, and what it does with a socket file already there.
 * - bridge_main() in a forked child with this binary as the agent (BRIDGE_TEST_PROBE selects
 *   what it checks): exit status, forwarded signals, the agent's environment, the filter with
 *   and without --no-seccomp, orphans reaped, the agent's group killed, job-control stops; the
 *   agent's session and terminal, the bridge's own filter, and the bridge not dumpable.
 * Each relay test ends with zero connections in use and no descriptor left open.
 */
#define BRIDGE_NO_MAIN
#include "../../../../tools/bridge/main.c"
#include "../../../../tools/bridge/filter.c"
#include "../../../../tools/bridge/relay.c"

#include <check.h>
#include <dirent.h>
#include <grp.h>
#include <linux/bpf.h>
#include <linux/kcmp.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/userfaultfd.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/ptrace.h>
#include <sys/quota.h>
#include <sys/syscall.h>
#include <sys/uio.h>
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

/* ---- The seccomp filters ---- */

/* What a filter does with a probe: refuses it with an errno, or lets it through (PASS), and
 * the probe then ends exactly as it does without a filter. */
#define PASS (-1)
/* Not a system call: vfork() from C, the one safe way to call it. */
#define PROBE_VFORK (-2L)
/* A kernel without the feature refuses it with the filter's errno too (vsock, say). */
#define PF_ABSENT_OK 1u
/* kernel.io_uring_disabled can refuse it with EPERM too. */
#define PF_URING 2u
/* The probe's own exit statuses when it could not run; anything else is 0 or an errno. */
#define PROBE_EXIT_SETUP 250
#define PROBE_EXIT_LOAD  251

/* Arguments that only exist in the probe's own process, resolved there (probe_arg). */
enum probe_ref {
	REF_VICTIM = 1, /* the pid of a process of the test's own (victim_start) */
	REF_SELF,       /* the probe's pid */
	REF_PIDFD,      /* a pidfd of the victim */
	REF_TTY,        /* a new pty's slave, the probe's controlling terminal */
	REF_NETNS,      /* the probe's network namespace */
	REF_BUF,        /* 256 zeroed bytes */
	REF_IOV,        /* an iovec over 16 bytes of REF_BUF, which the victim has too */
	REF_MISSING,    /* a path that does not exist */
	REF_EMPTY,      /* "" */
	REF_TMPFS,      /* "tmpfs" */
	REF_KEYTYPE,    /* "user" */
	REF_KEYDESC,    /* "an-probe" */
	REF_FSNAME,     /* a file system type that does not exist */
	REF_MODULE,     /* a module that does not exist */
	REF_TRUE,       /* "/bin/true" */
	REF_ARGV,       /* { "true", NULL } */
	REF_CLONE3,     /* clone_args for a plain child (SIGCHLD) */
	REF_BPF,        /* bpf_attr: a one-entry array map */
	REF_PERF,       /* perf_event_attr: the caller's task clock */
	REF_COUNT,
};
#define PROBE_REF_BASE (-0x5eed0000L)
#define REF(r)         (PROBE_REF_BASE - (long)(r))

struct probe {
	const char *what;
	long nr;    /* a system call, or PROBE_VFORK */
	long a[6];  /* literal arguments, or REF(...) */
	int agent;  /* under the agent's filter: the errno, or PASS */
	int bridge; /* under the bridge's own */
	unsigned int flags;
};

#define NOAF      EAFNOSUPPORT
#define NOPROTO   EPROTONOSUPPORT
#define V_HIGH(v) ((long)(0x100000000L | (v))) /* junk in the high half of an int argument */
/* Protocols glibc's <netinet/in.h> does not name. */
#define TEST_IPPROTO_L2TP 115
#define TEST_IPPROTO_SMC  256

static const struct probe probes[] = {
	/* Socket families: AF_UNIX, AF_INET and AF_INET6 only, as the kernel reads the int. */
	{ "AF_VSOCK", SYS_socket, { AF_VSOCK, SOCK_STREAM }, NOAF, NOAF, PF_ABSENT_OK },
	{ "AF_VSOCK, high bits",
	  SYS_socket,
	  { V_HIGH(AF_VSOCK), SOCK_STREAM },
	  NOAF,
	  NOAF,
	  PF_ABSENT_OK },
	{ "AF_NETLINK route", SYS_socket, { AF_NETLINK, SOCK_RAW, NETLINK_ROUTE }, NOAF, NOAF, 0 },
	{ "AF_NETLINK uevent",
	  SYS_socket,
	  { AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT },
	  NOAF,
	  NOAF,
	  0 },
	{ "AF_NETLINK, high bits",
	  SYS_socket,
	  { (long)(0x700000000L | AF_NETLINK), SOCK_DGRAM },
	  NOAF,
	  NOAF,
	  0 },
	{ "AF_PACKET raw", SYS_socket, { AF_PACKET, SOCK_RAW }, NOAF, NOAF, 0 },
	{ "AF_PACKET dgram", SYS_socket, { AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC }, NOAF, NOAF, 0 },
	{ "AF_XDP", SYS_socket, { AF_XDP, SOCK_RAW }, NOAF, NOAF, 0 },
	{ "socketpair AF_INET",
	  SYS_socketpair,
	  { AF_INET, SOCK_STREAM, 0, REF(REF_BUF) },
	  NOAF,
	  NOAF,
	  0 },
	{ "socketpair AF_NETLINK",
	  SYS_socketpair,
	  { AF_NETLINK, SOCK_DGRAM, 0, REF(REF_BUF) },
	  NOAF,
	  NOAF,
	  0 },
	/* Raw sockets, and SOCK_PACKET (AF_PACKET in disguise), in AF_INET and AF_INET6. */
	{ "AF_INET raw", SYS_socket, { AF_INET, SOCK_RAW, IPPROTO_ICMP }, EPERM, EPERM, 0 },
	{ "AF_INET raw, flags",
	  SYS_socket,
	  { AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_RAW },
	  EPERM,
	  EPERM,
	  0 },
	{ "AF_INET raw, high bits",
	  SYS_socket,
	  { V_HIGH(AF_INET), SOCK_RAW, IPPROTO_ICMP },
	  EPERM,
	  EPERM,
	  0 },
	{ "AF_INET6 raw", SYS_socket, { AF_INET6, SOCK_RAW, IPPROTO_ICMPV6 }, EPERM, EPERM, 0 },
	{ "AF_INET SOCK_PACKET", SYS_socket, { AF_INET, SOCK_PACKET }, EPERM, EPERM, 0 },
	{ "AF_INET6 SOCK_PACKET", SYS_socket, { AF_INET6, SOCK_PACKET }, EPERM, EPERM, 0 },
	/* Protocols in AF_INET and AF_INET6: TCP, UDP and ping, as the kernel reads the ints. */
	{ "MPTCP",
	  SYS_socket,
	  { AF_INET, SOCK_STREAM, IPPROTO_MPTCP },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "MPTCP, flags",
	  SYS_socket,
	  { AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_MPTCP },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "MPTCP, high bits",
	  SYS_socket,
	  { V_HIGH(AF_INET), V_HIGH(SOCK_STREAM), V_HIGH(IPPROTO_MPTCP) },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "MPTCPv6",
	  SYS_socket,
	  { AF_INET6, SOCK_STREAM, IPPROTO_MPTCP },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "UDP-Lite",
	  SYS_socket,
	  { AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "UDP-Litev6",
	  SYS_socket,
	  { AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDPLITE },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "SCTP stream",
	  SYS_socket,
	  { AF_INET, SOCK_STREAM, IPPROTO_SCTP },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "SCTP seqpacket",
	  SYS_socket,
	  { AF_INET6, SOCK_SEQPACKET, IPPROTO_SCTP },
	  NOPROTO,
	  NOPROTO,
	  0 },
	{ "AF_INET seqpacket", SYS_socket, { AF_INET, SOCK_SEQPACKET }, NOPROTO, NOPROTO, 0 },
	{ "AF_INET rdm", SYS_socket, { AF_INET, SOCK_RDM }, NOPROTO, NOPROTO, 0 },
	{ "DCCP", SYS_socket, { AF_INET, SOCK_DCCP, IPPROTO_DCCP }, NOPROTO, NOPROTO, 0 },
	{ "L2TP/IP",
	  SYS_socket,
	  { AF_INET, SOCK_DGRAM, TEST_IPPROTO_L2TP },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	{ "SMC",
	  SYS_socket,
	  { AF_INET, SOCK_STREAM, TEST_IPPROTO_SMC },
	  NOPROTO,
	  NOPROTO,
	  PF_ABSENT_OK },
	/* What clients use. */
	{ "AF_INET stream", SYS_socket, { AF_INET, SOCK_STREAM | SOCK_CLOEXEC }, PASS, PASS, 0 },
	{ "AF_INET TCP", SYS_socket, { AF_INET, SOCK_STREAM, IPPROTO_TCP }, PASS, PASS, 0 },
	{ "AF_INET TCP, high bits",
	  SYS_socket,
	  { AF_INET, V_HIGH(SOCK_STREAM), V_HIGH(IPPROTO_TCP) },
	  PASS,
	  PASS,
	  0 },
	{ "AF_INET dgram", SYS_socket, { AF_INET, SOCK_DGRAM }, PASS, PASS, 0 },
	{ "AF_INET UDP",
	  SYS_socket,
	  { AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP },
	  PASS,
	  PASS,
	  0 },
	{ "AF_INET ping", SYS_socket, { AF_INET, SOCK_DGRAM, IPPROTO_ICMP }, PASS, PASS, 0 },
	{ "AF_INET6 stream", SYS_socket, { AF_INET6, SOCK_STREAM }, PASS, PASS, 0 },
	{ "AF_INET6 TCP",
	  SYS_socket,
	  { AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP },
	  PASS,
	  PASS,
	  0 },
	{ "AF_INET6 UDP", SYS_socket, { AF_INET6, SOCK_DGRAM, IPPROTO_UDP }, PASS, PASS, 0 },
	{ "AF_INET6 ping", SYS_socket, { AF_INET6, SOCK_DGRAM, IPPROTO_ICMPV6 }, PASS, PASS, 0 },
	{ "AF_UNIX stream", SYS_socket, { AF_UNIX, SOCK_STREAM }, PASS, PASS, 0 },
	{ "AF_UNIX dgram", SYS_socket, { AF_UNIX, SOCK_DGRAM }, PASS, PASS, 0 },
	{ "AF_UNIX, high bits", SYS_socket, { V_HIGH(AF_UNIX), SOCK_STREAM }, PASS, PASS, 0 },
	{ "socketpair AF_UNIX",
	  SYS_socketpair,
	  { AF_UNIX, SOCK_STREAM, 0, REF(REF_BUF) },
	  PASS,
	  PASS,
	  0 },
	{ "socketpair AF_UNIX, high bits",
	  SYS_socketpair,
	  { V_HIGH(AF_UNIX), SOCK_DGRAM, 0, REF(REF_BUF) },
	  PASS,
	  PASS,
	  0 },
	/* The terminal, whichever descriptor it is on. */
	{ "TIOCSTI", SYS_ioctl, { REF(REF_TTY), TIOCSTI, REF(REF_BUF) }, EPERM, EPERM, 0 },
	{ "TIOCSTI, high bits",
	  SYS_ioctl,
	  { REF(REF_TTY), V_HIGH(TIOCSTI), REF(REF_BUF) },
	  EPERM,
	  EPERM,
	  0 },
	{ "TIOCLINUX", SYS_ioctl, { REF(REF_TTY), TIOCLINUX, REF(REF_BUF) }, EPERM, EPERM, 0 },
	{ "TIOCSETD N_TTY", SYS_ioctl, { REF(REF_TTY), TIOCSETD, REF(REF_BUF) }, EPERM, EPERM, 0 },
	{ "TIOCSETD, high bits",
	  SYS_ioctl,
	  { REF(REF_TTY), V_HIGH(TIOCSETD), REF(REF_BUF) },
	  EPERM,
	  EPERM,
	  0 },
	{ "TIOCGETD", SYS_ioctl, { REF(REF_TTY), TIOCGETD, REF(REF_BUF) }, PASS, PASS, 0 },
	{ "TIOCGWINSZ", SYS_ioctl, { REF(REF_TTY), TIOCGWINSZ, REF(REF_BUF) }, PASS, PASS, 0 },
	/* Other processes. */
	{ "ptrace", SYS_ptrace, { PTRACE_SEIZE, REF(REF_VICTIM) }, EPERM, EPERM, 0 },
	{ "process_vm_readv",
	  SYS_process_vm_readv,
	  { REF(REF_VICTIM), REF(REF_IOV), 1, REF(REF_IOV), 1 },
	  EPERM,
	  EPERM,
	  0 },
	{ "process_vm_writev",
	  SYS_process_vm_writev,
	  { REF(REF_VICTIM), REF(REF_IOV), 1, REF(REF_IOV), 1 },
	  EPERM,
	  EPERM,
	  0 },
	{ "pidfd_getfd", SYS_pidfd_getfd, { REF(REF_PIDFD), 0 }, EPERM, EPERM, 0 },
	{ "kcmp", SYS_kcmp, { REF(REF_SELF), REF(REF_VICTIM), KCMP_FILE, 0, 0 }, EPERM, EPERM, 0 },
	{ "pidfd_open", SYS_pidfd_open, { REF(REF_VICTIM) }, PASS, EPERM, 0 },
	/* Kernel keyrings. */
	{ "keyctl",
	  SYS_keyctl,
	  { KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0 },
	  EPERM,
	  EPERM,
	  0 },
	{ "add_key",
	  SYS_add_key,
	  { REF(REF_KEYTYPE), REF(REF_KEYDESC), REF(REF_BUF), 1, KEY_SPEC_PROCESS_KEYRING },
	  EPERM,
	  EPERM,
	  0 },
	{ "request_key",
	  SYS_request_key,
	  { REF(REF_KEYTYPE), REF(REF_KEYDESC), 0, KEY_SPEC_PROCESS_KEYRING },
	  EPERM,
	  EPERM,
	  0 },
	/* Namespaces. */
	{ "unshare CLONE_NEWUSER", SYS_unshare, { CLONE_NEWUSER }, EPERM, EPERM, 0 },
	{ "unshare CLONE_NEWNS", SYS_unshare, { CLONE_NEWNS }, EPERM, EPERM, 0 },
	{ "unshare CLONE_NEWPID", SYS_unshare, { CLONE_NEWPID }, EPERM, EPERM, 0 },
	{ "unshare CLONE_NEWNET", SYS_unshare, { CLONE_NEWNET }, EPERM, EPERM, 0 },
	{ "unshare CLONE_NEWUTS", SYS_unshare, { CLONE_NEWUTS }, EPERM, EPERM, 0 },
	{ "unshare CLONE_NEWIPC", SYS_unshare, { CLONE_NEWIPC }, EPERM, EPERM, 0 },
	{ "unshare CLONE_NEWCGROUP", SYS_unshare, { CLONE_NEWCGROUP }, EPERM, EPERM, 0 },
	{ "unshare CLONE_NEWTIME", SYS_unshare, { CLONE_NEWTIME }, EPERM, EPERM, 0 },
	{ "unshare CLONE_FILES", SYS_unshare, { CLONE_FILES }, PASS, EPERM, 0 },
	{ "clone CLONE_NEWUSER", SYS_clone, { CLONE_NEWUSER | SIGCHLD }, EPERM, EPERM, 0 },
	{ "clone CLONE_NEWNS", SYS_clone, { CLONE_NEWNS | SIGCHLD }, EPERM, EPERM, 0 },
	{ "clone CLONE_NEWPID", SYS_clone, { CLONE_NEWPID | SIGCHLD }, EPERM, EPERM, 0 },
	{ "clone CLONE_NEWNET", SYS_clone, { CLONE_NEWNET | SIGCHLD }, EPERM, EPERM, 0 },
	{ "clone CLONE_NEWUTS", SYS_clone, { CLONE_NEWUTS | SIGCHLD }, EPERM, EPERM, 0 },
	{ "clone CLONE_NEWIPC", SYS_clone, { CLONE_NEWIPC | SIGCHLD }, EPERM, EPERM, 0 },
	{ "clone CLONE_NEWCGROUP", SYS_clone, { CLONE_NEWCGROUP | SIGCHLD }, EPERM, EPERM, 0 },
	{ "setns", SYS_setns, { REF(REF_NETNS), CLONE_NEWNET }, EPERM, EPERM, 0 },
	/* New processes: the agent's own business, never the bridge's after start-up. */
	{ "clone", SYS_clone, { SIGCHLD }, PASS, EPERM, 0 },
	{ "clone3", SYS_clone3, { REF(REF_CLONE3), 64 }, ENOSYS, EPERM, PF_ABSENT_OK },
	{ "fork", SYS_fork, { 0 }, PASS, EPERM, 0 },
	{ "vfork", PROBE_VFORK, { 0 }, PASS, EPERM, 0 },
	{ "execve", SYS_execve, { REF(REF_TRUE), REF(REF_ARGV), 0 }, PASS, EPERM, 0 },
	{ "execveat",
	  SYS_execveat,
	  { AT_FDCWD, REF(REF_TRUE), REF(REF_ARGV), 0, 0 },
	  PASS,
	  EPERM,
	  0 },
	/* io_uring, whose socket and connect operations pass no filter. */
	{ "io_uring_setup", SYS_io_uring_setup, { 1, REF(REF_BUF) }, EPERM, EPERM, PF_URING },
	{ "io_uring_enter", SYS_io_uring_enter, { 0, 1 }, EPERM, EPERM, PF_URING },
	{ "io_uring_register", SYS_io_uring_register, { 0 }, EPERM, EPERM, PF_URING },
	/* The rest: arguments that fail harmlessly after the kernel's own permission check. */
	{ "bpf",
	  SYS_bpf,
	  { BPF_MAP_CREATE, REF(REF_BPF), sizeof(union bpf_attr) },
	  EPERM,
	  EPERM,
	  0 },
	{ "perf_event_open",
	  SYS_perf_event_open,
	  { REF(REF_PERF), 0, -1, -1, 0 },
	  EPERM,
	  EPERM,
	  0 },
	{ "userfaultfd", SYS_userfaultfd, { O_CLOEXEC | UFFD_USER_MODE_ONLY }, EPERM, EPERM, 0 },
	{ "kexec_load", SYS_kexec_load, { 0, 0, 0, 0x8000 }, EPERM, EPERM, 0 },
	{ "kexec_file_load", SYS_kexec_file_load, { -1, -1, 0, 0, 0x40000000 }, EPERM, EPERM, 0 },
	{ "init_module", SYS_init_module, { REF(REF_BUF), 0, REF(REF_EMPTY) }, EPERM, EPERM, 0 },
	{ "finit_module", SYS_finit_module, { -1, REF(REF_EMPTY), 0 }, EPERM, EPERM, 0 },
	{ "delete_module", SYS_delete_module, { REF(REF_MODULE), O_NONBLOCK }, EPERM, EPERM, 0 },
	{ "open_by_handle_at",
	  SYS_open_by_handle_at,
	  { AT_FDCWD, REF(REF_BUF), O_RDONLY },
	  EPERM,
	  EPERM,
	  0 },
	{ "mount",
	  SYS_mount,
	  { REF(REF_TMPFS), REF(REF_MISSING), REF(REF_TMPFS), 0, 0 },
	  EPERM,
	  EPERM,
	  0 },
	{ "umount2", SYS_umount2, { REF(REF_MISSING), 0 }, EPERM, EPERM, 0 },
	{ "pivot_root", SYS_pivot_root, { REF(REF_MISSING), REF(REF_MISSING) }, EPERM, EPERM, 0 },
	{ "move_mount",
	  SYS_move_mount,
	  { -1, REF(REF_EMPTY), -1, REF(REF_EMPTY), 0 },
	  EPERM,
	  EPERM,
	  0 },
	{ "open_tree", SYS_open_tree, { AT_FDCWD, REF(REF_MISSING), 0 }, EPERM, EPERM, 0 },
	{ "fsopen", SYS_fsopen, { REF(REF_FSNAME), 0 }, EPERM, EPERM, 0 },
	{ "fsconfig", SYS_fsconfig, { -1, 0, REF(REF_EMPTY), 0, 0 }, EPERM, EPERM, 0 },
	{ "fsmount", SYS_fsmount, { -1, 0, 0 }, EPERM, EPERM, 0 },
	{ "fspick", SYS_fspick, { AT_FDCWD, REF(REF_MISSING), 0 }, EPERM, EPERM, 0 },
	{ "mount_setattr", SYS_mount_setattr, { -1, REF(REF_EMPTY), 0, 0, 0 }, EPERM, EPERM, 0 },
	{ "swapon", SYS_swapon, { REF(REF_MISSING), 0 }, EPERM, EPERM, 0 },
	{ "swapoff", SYS_swapoff, { REF(REF_MISSING) }, EPERM, EPERM, 0 },
	{ "reboot", SYS_reboot, { 0, 0, 0, 0 }, EPERM, EPERM, 0 }, /* no magic: EINVAL */
	{ "acct", SYS_acct, { REF(REF_MISSING) }, EPERM, EPERM, 0 },
	{ "iopl", SYS_iopl, { 0 }, EPERM, EPERM, 0 },
	{ "ioperm", SYS_ioperm, { 0, 0, 0 }, EPERM, EPERM, 0 },
	{ "quotactl",
	  SYS_quotactl,
	  { QCMD(Q_GETINFO, USRQUOTA), REF(REF_MISSING), 0, REF(REF_BUF) },
	  EPERM,
	  EPERM,
	  0 },
	{ "quotactl_fd",
	  SYS_quotactl_fd,
	  { -1, QCMD(Q_GETINFO, USRQUOTA), 0, REF(REF_BUF) },
	  EPERM,
	  EPERM,
	  0 },
	{ "lookup_dcookie", SYS_lookup_dcookie, { 0, REF(REF_BUF), 0 }, EPERM, EPERM, 0 },
};

static pid_t probe_victim;
static uint8_t probe_buf[256];
static struct iovec probe_iov = { probe_buf, 16 };
static char *probe_argv[] = { "true", NULL };
static uint64_t probe_clone3[8] = { [4] = SIGCHLD }; /* exit_signal; 64 bytes: version 0 */
static const union bpf_attr probe_bpf = {
	.map_type = BPF_MAP_TYPE_ARRAY,
	.key_size = 4,
	.value_size = 4,
	.max_entries = 1,
};
static const struct perf_event_attr probe_perf = {
	.type = PERF_TYPE_SOFTWARE,
	.size = sizeof(struct perf_event_attr),
	.config = PERF_COUNT_SW_TASK_CLOCK,
	.disabled = 1,
	.exclude_kernel = 1,
	.exclude_hv = 1,
};

/* A process of the test's own, the other end of the cross-process probes. */
static void victim_start(void)
{
	probe_victim = fork();
	ck_assert_int_ge(probe_victim, 0);
	if (probe_victim == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;) {
			pause();
		}
	}
}

static void victim_stop(void)
{
	ck_assert_int_eq(kill(probe_victim, SIGKILL), 0);
	ck_assert_int_eq(waitpid(probe_victim, NULL, 0), probe_victim);
}

/* In a new session: a new pty's slave, opened as the controlling terminal, or -1. */
static long probe_tty(void)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	if (setsid() == -1 || m == -1 || grantpt(m) != 0 || unlockpt(m) != 0) {
		return -1;
	}
	const char *name = ptsname(m);
	return name != NULL ? open(name, O_RDWR) : -1;
}

static long probe_need(long v)
{
	if (v < 0) {
		_exit(PROBE_EXIT_SETUP);
	}
	return v;
}

/* <a> itself, or what REF(...) stands for in the probe's process. */
static long probe_arg(long a)
{
	if (a > PROBE_REF_BASE || a <= REF(REF_COUNT)) {
		return a;
	}
	switch ((enum probe_ref)(PROBE_REF_BASE - a)) {
	case REF_VICTIM:
		return probe_victim;
	case REF_SELF:
		return getpid();
	case REF_PIDFD:
		return probe_need(syscall(SYS_pidfd_open, probe_victim, 0));
	case REF_TTY:
		return probe_need(probe_tty());
	case REF_NETNS:
		return probe_need(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
	case REF_BUF:
		return (long)probe_buf;
	case REF_IOV:
		return (long)&probe_iov;
	case REF_MISSING:
		return (long)"/nonexistent/an-probe";
	case REF_EMPTY:
		return (long)"";
	case REF_TMPFS:
		return (long)"tmpfs";
	case REF_KEYTYPE:
		return (long)"user";
	case REF_KEYDESC:
		return (long)"an-probe";
	case REF_FSNAME:
		return (long)"an-no-such-fs";
	case REF_MODULE:
		return (long)"an_no_such_module";
	case REF_TRUE:
		return (long)"/bin/true";
	case REF_ARGV:
		return (long)probe_argv;
	case REF_CLONE3:
		return (long)probe_clone3;
	case REF_BPF:
		return (long)&probe_bpf;
	case REF_PERF:
		return (long)&probe_perf;
	case REF_COUNT:
		break;
	}
	_exit(PROBE_EXIT_SETUP);
}

static long probe_vfork(void)
{
	pid_t pid = vfork();
	if (pid == 0) {
		_exit(0);
	}
	return pid;
}

/* Whether <p> makes a new process, which ends at once. */
static bool probe_forks(const struct probe *p)
{
	return p->nr == SYS_clone || p->nr == SYS_clone3 || p->nr == SYS_fork ||
	       p->nr == PROBE_VFORK;
}

/* In a child of its own: the arguments, the filter (if any), the call; exits with its errno. */
static _Noreturn void probe_child(const struct probe *p, scmp_filter_ctx filter)
{
	long a[6];
	for (size_t i = 0; i < AN_ARRAY_LEN(a); i++) {
		a[i] = probe_arg(p->a[i]);
	}
	if (filter != NULL && filter_load(filter) != 0) {
		_exit(PROBE_EXIT_LOAD);
	}
	long rc = p->nr == PROBE_VFORK ? probe_vfork()
				       : syscall(p->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	int err = rc == -1 ? errno : 0;
	if (rc == 0 && probe_forks(p)) {
		_exit(0); /* the new process */
	}
	if (rc > 0 && probe_forks(p)) {
		(void)waitpid((pid_t)rc, NULL, 0);
	}
	_exit(err);
}

/* Runs <p> under <filter> (NULL: none) and returns 0 or the errno it failed with. */
static int probe_run(const struct probe *p, scmp_filter_ctx filter)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		probe_child(p, filter);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st), "%s: killed by signal %d", p->what, WTERMSIG(st));
	int code = WEXITSTATUS(st);
	ck_assert_msg(code != PROBE_EXIT_SETUP, "%s: its arguments could not be set up", p->what);
	ck_assert_msg(code != PROBE_EXIT_LOAD, "%s: the filter did not load", p->what);
	return code;
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

/* Every probe under the filter <kind>: each refusal with its errno, each pass as without. */
static void check_filter(enum filter_kind kind)
{
	scmp_filter_ctx ctx = NULL;
	ck_assert_int_eq(filter_build(&ctx, kind), 0);
	victim_start();
	for (size_t i = 0; i < AN_ARRAY_LEN(probes); i++) {
		const struct probe *p = &probes[i];
		int want = kind == FILTER_AGENT ? p->agent : p->bridge;
		int got = probe_run(p, ctx);
		if (want == PASS) {
			int bare = probe_run(p, NULL);
			ck_assert_msg(got == bare, "%s: '%s' under the filter, '%s' without",
				      p->what, strerror(got), strerror(bare));
		} else {
			ck_assert_msg(got == want, "%s: '%s', want '%s'", p->what, strerror(got),
				      strerror(want));
		}
	}
	victim_stop();
	seccomp_release(ctx);
}

START_TEST(test_filter_agent)
{
	check_filter(FILTER_AGENT);
}
END_TEST

START_TEST(test_filter_bridge)
{
	check_filter(FILTER_BRIDGE);
}
END_TEST

/*
 * Without a filter, no probe fails with the errno a filter refuses it with (as root, to whom
 * the kernel refuses none of them): each refusal above is the filter's, so removing a rule
 * fails its probe.
 */
START_TEST(test_filter_matters)
{
	if (geteuid() != 0) {
		/* Unprivileged, raw sockets, mount and the rest are EPERM anyway. */
		unit_skip("needs root (unprivileged, the kernel refuses the probes anyway)");
		return;
	}
	victim_start();
	bool uring = uring_enabled();
	for (size_t i = 0; i < AN_ARRAY_LEN(probes); i++) {
		const struct probe *p = &probes[i];
		if ((p->flags & PF_URING) != 0 && !uring) {
			continue;
		}
		int bare = probe_run(p, NULL);
		int wants[] = { p->agent, p->bridge };
		for (size_t k = 0; k < AN_ARRAY_LEN(wants); k++) {
			if (wants[k] == PASS ||
			    ((p->flags & PF_ABSENT_OK) != 0 && bare == wants[k])) {
				continue;
			}
			ck_assert_msg(bare != wants[k], "%s: '%s' without a filter", p->what,
				      strerror(bare));
		}
	}
	victim_stop();
}
END_TEST

static void *thread_main(void *arg)
{
	return arg;
}

/* Under the agent's filter (clone3 is ENOSYS), glibc's fork, threads and posix_spawn work. */
START_TEST(test_filter_agent_spawns)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		scmp_filter_ctx ctx = NULL;
		if (filter_build(&ctx, FILTER_AGENT) != 0 || filter_load(ctx) != 0) {
			_exit(3);
		}
		int st;
		pid_t child = fork();
		if (child == 0) {
			_exit(7);
		}
		if (child == -1 || waitpid(child, &st, 0) != child || WEXITSTATUS(st) != 7) {
			_exit(4);
		}
		pthread_t t;
		static int token;
		void *got = NULL;
		if (pthread_create(&t, NULL, thread_main, &token) != 0 ||
		    pthread_join(t, &got) != 0 || got != &token) {
			_exit(5);
		}
		char *argv[] = { "sh", "-c", "exit 9", NULL };
		if (posix_spawn(&child, "/bin/sh", NULL, NULL, argv, environ) != 0 ||
		    waitpid(child, &st, 0) != child || WEXITSTATUS(st) != 9) {
			_exit(6);
		}
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st), "killed by signal %d", WTERMSIG(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

/*
 * A system call of another ABI, in a child: x32 (the x32 bit on a native call) or i386
 * (int 0x80), under the agent's filter when <filtered>. Returns the wait status.
 */
static int run_foreign(bool i386, bool filtered)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* no sanitizer report for the fault expected below */
		scmp_filter_ctx ctx = NULL;
		if (filtered && (filter_build(&ctx, FILTER_AGENT) != 0 || filter_load(ctx) != 0)) {
			_exit(3);
		}
		if (!i386) {
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
	return st;
}

/*
 * Another architecture's system call kills the agent. The filter sees every x32 call, whatever
 * the kernel's x32 support, so that case is always checked. A kernel without ia32 emulation
 * (ia32_emulation=0, or no CONFIG_IA32_EMULATION, as on some hosts) faults int 0x80 before
 * any filter runs: the same call without the filter tells which kind of kernel this is, and
 * the i386 case is checked wherever the kernel would serve it.
 */
START_TEST(test_filter_kills_other_arches)
{
	int st = run_foreign(false, true);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "x32: wait status %#x", st);
	int bare = run_foreign(true, false);
	bool served = WIFEXITED(bare) && WEXITSTATUS(bare) == 0;
	ck_assert_msg(served || (WIFSIGNALED(bare) && WTERMSIG(bare) == SIGSEGV),
		      "i386 without a filter: wait status %#x", bare);
	if (served) {
		st = run_foreign(true, true);
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "i386: wait status %#x",
			      st);
	}
}
END_TEST

/* no_new_privs only when the kernel requires it: as root it is not set, as nobody it is. */
START_TEST(test_filter_no_new_privs)
{
	for (int as_nobody = 0; as_nobody < 2; as_nobody++) {
		if (geteuid() != 0 && !as_nobody) {
			unit_skip("its root case needs root");
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
			if (filter_build(&ctx, FILTER_AGENT) != 0 || filter_load(ctx) != 0) {
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

/* ---- Sockets in AF_INET and AF_INET6, every type and protocol ---- */

/* Protocols the sweep tries beyond 0-1023: junk in the high half, large and negative ones. */
static const long sweep_far[] = {
	V_HIGH(0),
	V_HIGH(IPPROTO_TCP),
	V_HIGH(IPPROTO_UDP),
	V_HIGH(IPPROTO_ICMP),
	V_HIGH(IPPROTO_ICMPV6),
	(long)(0xffffffff00000000UL | IPPROTO_TCP),
	1L << 16,
	(1L << 16) | IPPROTO_TCP,
	(1L << 31) | IPPROTO_UDP,
	0x7fffffffL,
	-1L,
};
#define SWEEP_PROTOCOLS (1024 + (long)AN_ARRAY_LEN(sweep_far))

/* The protocols of the allow-list, and the families, as the sweep indexes them. */
static const uint32_t sweep_known[] = { 0, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, IPPROTO_ICMPV6 };
static const long sweep_families[] = { AF_INET, AF_INET6 };

/* A mismatch the sweep found, sent to the test by its child. */
struct sweep_miss {
	long family, type, protocol;
	int got, want;
};

/* Whether the allow-list has <type> (its low 4 bits) and <protocol> (its low 32) in <family>. */
static bool sweep_allowed(long family, long type, long protocol)
{
	uint32_t t = (uint32_t)type & 0xfu;
	uint32_t p = (uint32_t)protocol;
	uint32_t ping = family == AF_INET ? IPPROTO_ICMP : IPPROTO_ICMPV6;
	return (t == SOCK_STREAM && (p == 0 || p == IPPROTO_TCP)) ||
	       (t == SOCK_DGRAM && (p == 0 || p == IPPROTO_UDP || p == ping));
}

/* socket() as the sweep calls it: 0 or the errno; a socket made is closed. */
static int sweep_call(long family, long type, long protocol)
{
	long fd = syscall(SYS_socket, family, type, protocol);
	if (fd < 0) {
		return errno;
	}
	close((int)fd);
	return 0;
}

/* Without a filter: what each allowed pair does, by family, type (1 or 2) and sweep_known. */
static int sweep_bare[2][2][AN_ARRAY_LEN(sweep_known)];

static void sweep_bare_fill(void)
{
	for (size_t f = 0; f < 2; f++) {
		for (long t = SOCK_STREAM; t <= SOCK_DGRAM; t++) {
			for (size_t k = 0; k < AN_ARRAY_LEN(sweep_known); k++) {
				long fam = sweep_families[f];
				sweep_bare[f][t - 1][k] = sweep_allowed(fam, t, sweep_known[k])
							      ? sweep_call(fam, t, sweep_known[k])
							      : -1;
			}
		}
	}
}

/* What socket(<family> (index <f>), <type>, <protocol>) should do under the agent's filter. */
static int sweep_want(size_t f, long type, long protocol)
{
	uint32_t t = (uint32_t)type & 0xfu;
	if (t == SOCK_RAW || t == SOCK_PACKET) {
		return EPERM;
	}
	if (!sweep_allowed(sweep_families[f], type, protocol)) {
		return EPROTONOSUPPORT;
	}
	for (size_t k = 0; k < AN_ARRAY_LEN(sweep_known); k++) {
		if (sweep_known[k] == (uint32_t)protocol) {
			return sweep_bare[f][t - 1][k];
		}
	}
	AN_ASSERT(false); /* sweep_known lists every allowed protocol */
	return -1;
}

/* The sweep's child: every pair under the agent's filter; writes the first mismatch to <fd>. */
static _Noreturn void sweep_child(int fd)
{
	sweep_bare_fill();
	scmp_filter_ctx ctx = NULL;
	if (filter_build(&ctx, FILTER_AGENT) != 0 || filter_load(ctx) != 0) {
		_exit(PROBE_EXIT_LOAD);
	}
	for (size_t f = 0; f < AN_ARRAY_LEN(sweep_families); f++) {
		for (long t = 0; t < 16; t++) {
			const long types[] = { t, t | SOCK_NONBLOCK | SOCK_CLOEXEC, V_HIGH(t) };
			for (size_t i = 0; i < AN_ARRAY_LEN(types) * SWEEP_PROTOCOLS; i++) {
				long type = types[i / SWEEP_PROTOCOLS];
				long p = (long)(i % SWEEP_PROTOCOLS);
				long proto = p < 1024 ? p : sweep_far[p - 1024];
				int want = sweep_want(f, type, proto);
				int got = sweep_call(sweep_families[f], type, proto);
				if (got != want) {
					struct sweep_miss m = { sweep_families[f], type, proto, got,
								want };
					(void)!write(fd, &m, sizeof(m));
					_exit(1);
				}
			}
		}
	}
	_exit(0);
}

/*
 * In AF_INET and AF_INET6, every type (bare, with SOCK_NONBLOCK | SOCK_CLOEXEC, with junk in
 * the high half) with protocols 0-1023 and some far beyond, under the agent's filter: each
 * pair off the allow-list is refused with its errno, SOCK_RAW and SOCK_PACKET EPERM, the rest
 * EPROTONOSUPPORT (so none reaches the kernel); each on it ends as it does without a filter.
 */
START_TEST(test_filter_inet_sweep)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		sweep_child(p[1]);
	}
	close(p[1]);
	struct sweep_miss m = { 0 };
	ssize_t n = read(p[0], &m, sizeof(m));
	close(p[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(n <= 0, "socket(%ld, %#lx, %#lx): '%s', want '%s'", m.family,
		      (unsigned long)m.type, (unsigned long)m.protocol, strerror(m.got),
		      strerror(m.want));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "wait status %#x", st);
}
END_TEST

/* ---- What clients do, under the agent's filter ---- */

/* The loopback address of <family>, port <port>, in <ss>; returns its length. */
static socklen_t client_addr(struct sockaddr_storage *ss, int family, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		s6->sin6_addr = in6addr_loopback;
		return sizeof(*s6);
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	s4->sin_family = AF_INET;
	s4->sin_port = htons(port);
	s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sizeof(*s4);
}

/* A socket bound to the loopback of <family> on a port of the kernel's; its port in <*port>. */
static int client_bound(int family, int type, int protocol, uint16_t *port)
{
	struct sockaddr_storage ss;
	socklen_t len = client_addr(&ss, family, 0);
	int fd = socket(family, type | SOCK_CLOEXEC, protocol);
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
		return -1;
	}
	*port = ntohs(((struct sockaddr_in *)&ss)->sin_port); /* same offset in sin6 */
	return fd;
}

/* One byte each way over TCP (as curl, git, node and pip connect): 0 or -1. */
static int client_tcp(int family)
{
	uint16_t port;
	int l = client_bound(family, SOCK_STREAM, IPPROTO_TCP, &port);
	struct sockaddr_storage ss;
	socklen_t len = client_addr(&ss, family, port);
	int c = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l < 0 || listen(l, 1) != 0 || c < 0 ||
	    (connect(c, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS)) {
		return -1;
	}
	int a = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	char x = 'q';
	int ok = a >= 0 && write(a, &x, 1) == 1 && read_one(c, 2000) == 1 ? 0 : -1;
	close(a);
	close(c);
	close(l);
	return ok;
}

/* A question and its answer over UDP, as a resolver asks: 0 or -1. */
static int client_udp(int family)
{
	uint16_t port;
	int srv = client_bound(family, SOCK_DGRAM, IPPROTO_UDP, &port);
	struct sockaddr_storage ss;
	socklen_t len = client_addr(&ss, family, port);
	int c = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	char q[12] = "an-question";
	struct sockaddr_storage from;
	socklen_t from_len = sizeof(from);
	if (srv < 0 || c < 0 || sendto(c, q, sizeof(q), 0, (struct sockaddr *)&ss, len) != 12 ||
	    recvfrom(srv, q, sizeof(q), 0, (struct sockaddr *)&from, &from_len) != 12 ||
	    sendto(srv, q, 1, 0, (struct sockaddr *)&from, from_len) != 1) {
		return -1;
	}
	int ok = read_one(c, 2000) == 1 ? 0 : -1;
	close(c);
	close(srv);
	return ok;
}

/* An echo request and its reply over a ping socket (ICMP, or ICMPv6), as ping sends: 0 or -1. */
static int client_ping(int family)
{
	bool v6 = family == AF_INET6;
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
	struct sockaddr_storage ss;
	socklen_t len = client_addr(&ss, family, 0);
	/* type, code, checksum (the kernel's), identifier (the kernel's), sequence, payload */
	uint8_t echo[16] = { v6 ? 128 : 8, 0, 0, 0, 0, 0, 0, 1, 'a', 'n' };
	uint8_t reply[64];
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (fd < 0 || sendto(fd, echo, sizeof(echo), 0, (struct sockaddr *)&ss, len) != 16 ||
	    poll(&p, 1, 2000) != 1 || recv(fd, reply, sizeof(reply), 0) != 16) {
		return -1;
	}
	close(fd);
	return reply[0] == (v6 ? 129 : 0) && reply[7] == 1 ? 0 : -1;
}

/* The loopback interface up, in the caller's network namespace: 0 or -1. */
static int client_lo_up(void)
{
	struct ifreq ifr = { .ifr_name = "lo" };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
		return -1;
	}
	ifr.ifr_flags |= IFF_UP;
	int rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	close(fd);
	return rc;
}

/* In a network namespace of its own where everyone may ping: each client, each family. */
static _Noreturn void clients_child(void)
{
	int fd = -1;
	if (unshare(CLONE_NEWNET) != 0 || client_lo_up() != 0 ||
	    (fd = open("/proc/sys/net/ipv4/ping_group_range", O_WRONLY | O_CLOEXEC)) < 0 ||
	    write(fd, "0 2147483647", 12) != 12) {
		_exit(PROBE_EXIT_SETUP);
	}
	close(fd);
	scmp_filter_ctx ctx = NULL;
	if (filter_build(&ctx, FILTER_AGENT) != 0 || filter_load(ctx) != 0) {
		_exit(PROBE_EXIT_LOAD);
	}
	const int families[] = { AF_INET, AF_INET6 };
	for (int i = 0; i < 2; i++) {
		if (client_tcp(families[i]) != 0) {
			_exit(10 + i);
		}
		if (client_udp(families[i]) != 0) {
			_exit(20 + i);
		}
		if (client_ping(families[i]) != 0) {
			_exit(30 + i);
		}
	}
	_exit(0);
}

/*
 * Under the agent's filter, what curl, git, node and python do with the network works: TCP
 * (protocol 0 and IPPROTO_TCP), a resolver's UDP question and answer, and ping's ICMP echo
 * over an unprivileged ping socket, in IPv4 and IPv6, on a loopback of the test's own (as
 * root: a network namespace where ping sockets are allowed to everyone).
 */
START_TEST(test_filter_agent_clients)
{
	if (geteuid() != 0) {
		unit_skip("needs root");
		return;
	}
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		clients_child();
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st), "killed by signal %d", WTERMSIG(st));
	ck_assert_msg(WEXITSTATUS(st) == 0, "exit %d (10: TCP, 20: UDP, 30: ping; +1: IPv6)",
		      WEXITSTATUS(st));
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
		unit_skip("needs root");
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
	if (getpgrp() != getpid() || getsid(0) != getpid()) {
		return 14; /* a session, and so a group, of its own */
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

/* The agent cannot reach into the bridge, its parent: no ptrace, no memory, no descriptor. */
static int probe_dumpable(void)
{
	pid_t bridge = getppid();
	if (syscall(SYS_ptrace, PTRACE_SEIZE, bridge, 0L, 0L) != -1 || errno != EPERM) {
		return 30;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)bridge);
	if (open(path, O_RDONLY | O_CLOEXEC) != -1) {
		return 31;
	}
	long pidfd = syscall(SYS_pidfd_open, bridge, 0);
	if (pidfd == -1) {
		return 32;
	}
	if (syscall(SYS_pidfd_getfd, pidfd, 0L, 0L) != -1 || errno != EPERM) {
		return 33;
	}
	return 0;
}

/* The Seccomp_filters line of /proc/<pid>/status, or -1. */
static int seccomp_filters(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		return -1;
	}
	char line[256];
	int n = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "Seccomp_filters: %d", &n) == 1) {
			break;
		}
	}
	fclose(f);
	return n;
}

/* The agent has one filter more than the test (its own), and so has the bridge (another). */
static int probe_seccomp(void)
{
	int base = (int)strtol(getenv("BRIDGE_TEST_FILTERS"), NULL, 10);
	int more = (int)strtol(getenv("BRIDGE_TEST_FILTERS_MORE"), NULL, 10);
	if (seccomp_filters(getpid()) != base + more) {
		return 34;
	}
	return seccomp_filters(getppid()) == base + more ? 0 : 35;
}

/* The agent's terminal is its own: its session's, in its foreground; TIOCSTI as expected. */
static int probe_own_tty(void)
{
	int fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
	if (getsid(0) != getpid() || fd == -1) {
		return 40;
	}
	if (tcgetsid(fd) != getpid() || tcgetpgrp(fd) != getpid()) {
		return 41;
	}
	char c = '#';
	int rc = ioctl(fd, TIOCSTI, &c);
	const char *want = getenv("BRIDGE_TEST_TIOCSTI");
	if (strcmp(want, "EPERM") == 0 && (rc != -1 || errno != EPERM)) {
		return 42;
	}
	if (strcmp(want, "works") == 0 && rc != 0) {
		return 43;
	}
	return 0;
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
	if (strcmp(what, "dumpable") == 0) {
		return probe_dumpable();
	}
	if (strcmp(what, "seccomp") == 0) {
		return probe_seccomp();
	}
	if (strcmp(what, "tty") == 0) {
		return probe_own_tty();
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

/* How run_start's bridge starts, as `agentsnet run` or an image's entrypoint would run it. */
struct run_how {
	int tty;     /* >= 0: its stdin, in a session of its own (else /dev/null, in a group) */
	bool ctty;   /* the tty is the bridge's session's controlling terminal (docker run -it) */
	bool nobody; /* as root: the bridge runs as nobody, dumpable as an exec would leave it */
};

/* In the bridge's process, before bridge_main: its session, stdin and identity. */
static void run_how_apply(const struct run_how *how)
{
	if (how->tty >= 0) {
		if (setsid() == -1 || (how->ctty && ioctl(how->tty, TIOCSCTTY, 0) == -1) ||
		    dup2(how->tty, 0) == -1) {
			_exit(90);
		}
	} else {
		setpgid(0, 0); /* job-control stops stay inside the test */
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		dup2(null, 0);
	}
	if (how->nobody && geteuid() == 0) {
		if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
			_exit(91);
		}
		/* The change of uid made the process non-dumpable (an exec would have made it
		 * dumpable again) and cleared its death signal. */
		prctl(PR_SET_DUMPABLE, 1);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	}
}

static void run_start_how(struct run *r, const char *probe, char **extra, char **cmd,
			  const struct run_how *how);

/* Forks a bridge with /dev/null as stdin, in a process group of its own. */
static void run_start(struct run *r, const char *probe, char **extra, char **cmd)
{
	const struct run_how plain = { .tty = -1 };
	run_start_how(r, probe, extra, cmd, &plain);
}

static void run_start_how(struct run *r, const char *probe, char **extra, char **cmd,
			  const struct run_how *how)
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
		run_how_apply(how);
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

static int run_finish(struct run *r, int st, char *err, size_t err_len);

/* Waits for the bridge and returns its exit status; its stderr goes to <err> (may be NULL). */
static int run_wait(struct run *r, char *err, size_t err_len)
{
	return run_finish(r, wait_timed(r->pid, 0), err, err_len);
}

/* What run_wait does once the bridge ended with wait status <st>. */
static int run_finish(struct run *r, int st, char *err, size_t err_len)
{
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

/*
 * A job-control stop never holds the agent: its group is orphaned (the bridge, its parent, is
 * in another session), so the kernel discards SIGTSTP, SIGTTIN and SIGTTOU for it, and no
 * stop reaches the bridge either.
 */
START_TEST(test_main_job_control_stop)
{
	dir_make();
	struct run r;
	char *cmd[] = { "sh", "-c", "kill -TSTP $$; kill -TTIN $$; kill -TTOU $$; exit 5", NULL };
	run_start(&r, NULL, NULL, cmd);
	int st = wait_timed(r.pid, WUNTRACED);
	ck_assert_msg(!WIFSTOPPED(st), "the bridge stopped on signal %d", WSTOPSIG(st));
	ck_assert_int_eq(run_finish(&r, st, NULL, 0), 5);
}
END_TEST

/* The filter count of /proc/self/status, in the test's environment, for the seccomp probe. */
static void filters_expect(int more)
{
	char n[16];
	snprintf(n, sizeof(n), "%d", seccomp_filters(getpid()));
	setenv("BRIDGE_TEST_FILTERS", n, 1);
	snprintf(n, sizeof(n), "%d", more);
	setenv("BRIDGE_TEST_FILTERS_MORE", n, 1);
}

/* The agent runs under its filter and the bridge under its own, which the agent does not
 * inherit (one filter each); --no-seccomp leaves both without. */
START_TEST(test_main_filters_loaded)
{
	dir_make();
	ck_assert_int_ge(seccomp_filters(getpid()), 0);
	char *self[] = { "/proc/self/exe", NULL };
	struct run r;
	filters_expect(1);
	run_start(&r, "seccomp", NULL, self);
	ck_assert_int_eq(run_wait(&r, NULL, 0), 0);
	char *bare[] = { "--no-seccomp", NULL };
	filters_expect(0);
	run_start(&r, "seccomp", bare, self);
	ck_assert_int_eq(run_wait(&r, NULL, 0), 0);
}
END_TEST

/*
 * The bridge is not dumpable: an agent of the same uid (nobody, when the test runs as root:
 * root's capabilities would pass any check) can neither ptrace it, open its memory nor take
 * its descriptors. Without the filter, so that only the bridge's own defence is tested.
 */
START_TEST(test_main_bridge_not_dumpable)
{
	dir_make();
	char *self[] = { "/proc/self/exe", NULL };
	char *bare[] = { "--no-seccomp", NULL };
	const struct run_how how = { .tty = -1, .nobody = true };
	struct run r;
	run_start_how(&r, "dumpable", bare, self, &how);
	ck_assert_int_eq(run_wait(&r, NULL, 0), 0);
}
END_TEST

/*
 * An agent pod (docs/fleet.md): the sandbox's directory is the daemon's (root's, 0755) and the
 * bridge runs as the sandbox's uid, so it cannot make the ingress socket there. It says
 * "ingress disabled" naming the path and why, makes nothing, and runs the agent all the same.
 * The control: as root, in the same directory, the socket is made and nothing is said.
 */
START_TEST(test_main_ingress_disabled)
{
	if (geteuid() != 0) {
		unit_skip("needs root (to run the bridge as nobody beside a directory of root's)");
		return;
	}
	dir_make();
	ck_assert_int_eq(chmod(test_dir, 0755), 0);
	char err[4096];
	char want[512];
	char *exit7[] = { "sh", "-c", "exit 7", NULL };
	const struct run_how as_pod = { .tty = -1, .nobody = true };
	struct run r;
	run_start_how(&r, NULL, NULL, exit7, &as_pod);
	ck_assert_int_eq(run_wait(&r, err, sizeof(err)), 7);
	snprintf(want, sizeof(want), "agentsnet-bridge: ingress disabled: %s: %s\n", r.ingress,
		 strerror(EACCES));
	ck_assert_msg(strstr(err, want) != NULL, "stderr %s lacks %s", err, want);
	ck_assert_ptr_nonnull(strstr(err, "agentsnet-bridge: ready\n"));
	/* The control: root may write the directory, so ingress is made and not disabled. */
	char *check[] = { "sh", "-c", "test -S \"$0\" && exit 7", r.ingress, NULL };
	run_start(&r, NULL, NULL, check);
	ck_assert_int_eq(run_wait(&r, err, sizeof(err)), 7);
	ck_assert_msg(strstr(err, "ingress disabled") == NULL, "as root: %s", err);
}
END_TEST

/*
 * With a pty as stdin, the agent's session takes it as its controlling terminal, both when
 * the bridge has no controlling terminal (agentsnet run) and when its session held this one
 * (docker run -it: the bridge gives it up, and the hang-up that sends is not passed on, or
 * the agent would die of it). TIOCSTI on it is EPERM under the filter, and works without it
 * as root.
 */
START_TEST(test_main_agent_terminal)
{
	dir_make();
	char *self[] = { "/proc/self/exe", NULL };
	char *bare[] = { "--no-seccomp", NULL };
	for (int i = 0; i < 4; i++) {
		bool ctty = (i & 1) != 0;
		bool filtered = (i & 2) == 0;
		int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
		ck_assert_int_ge(m, 0);
		ck_assert_int_eq(grantpt(m), 0);
		ck_assert_int_eq(unlockpt(m), 0);
		int slave = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
		ck_assert_int_ge(slave, 0);
		const char *tiocsti = filtered ? "EPERM" : geteuid() == 0 ? "works" : "any";
		setenv("BRIDGE_TEST_TIOCSTI", tiocsti, 1);
		const struct run_how how = { .tty = slave, .ctty = ctty };
		struct run r;
		run_start_how(&r, "tty", filtered ? NULL : bare, self, &how);
		close(slave);
		char err[4096];
		int status = run_wait(&r, err, sizeof(err));
		ck_assert_msg(status == 0, "ctty %d, filtered %d: status %d: %s", ctty, filtered,
			      status, err);
		close(m);
	}
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
	tcase_set_timeout(filter, 60);
	tcase_add_test(filter, test_filter_agent);
	tcase_add_test(filter, test_filter_bridge);
	tcase_add_test(filter, test_filter_matters);
	tcase_add_test(filter, test_filter_agent_spawns);
	tcase_add_test(filter, test_filter_inet_sweep);
	tcase_add_test(filter, test_filter_agent_clients);
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
	tcase_add_test(pid1, test_main_filters_loaded);
	tcase_add_test(pid1, test_main_bridge_not_dumpable);
	tcase_add_test(pid1, test_main_agent_terminal);
	tcase_add_test(pid1, test_main_ingress_disabled);
	suite_add_tcase(s, pid1);
	return s;
}

int main(void)
{
	const char *probe = getenv("BRIDGE_TEST_PROBE");
	if (probe != NULL) {
		/* _exit: LeakSanitizer's check at exit would ptrace, which the filter refuses. */
		_exit(probe_main(probe));
	}
	return unit_run(bridge_suite());
}
