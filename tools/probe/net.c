/*
 * agentsnet-probe's network probes and its walk for socket files: dns, tcp-host, vsock,
 * sockets, io-uring, the Unix sockets named on the command line (unix-abstract, unix-path,
 * other-sandbox, control-socket, unlisted-socket) and host-sockets, which tries every socket
 * file the agent can list. tools/probe/main.c holds the options, the verdicts and helpers these
 * use (tools/probe/probe_int.h), the other probes and the run; what each probe calls closed is
 * said there, at the top. Part of the same static, libc-only, allocation-free program:
 * state is static, and each probe runs in a child of its own.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/io_uring.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "tools/probe/probe_int.h"
#include "tools/agentsnet/sandbox.h"
#include "tools/walkfs.h"

#define PROBE_RESOLVER "127.0.0.53" /* systemd-resolved's stub, tried always */
/* host-sockets: the walk's budgets, one connect's wait, the paths named when OPEN. */
#define PROBE_SOCK_DIRS_MAX    100000u
#define PROBE_SOCK_TIME_MS     20000u
#define PROBE_SOCK_QUEUE_BYTES (PROBE_SOCK_DIRS_MAX * 128u)
#define PROBE_SOCK_CONNECT_MS  200
#define PROBE_SOCK_NAMED       5u
#define PROBE_SOCK_PATH_BYTES  160u
/* What glibc's <netinet/in.h> does not name: two protocols. */
#define PROBE_IPPROTO_L2TP 115
#define PROBE_IPPROTO_SMC  256

/* ---- Network ---- */

/* A query for example.com A, recursion desired. */
static size_t dns_query(uint8_t *out, size_t cap, uint16_t id)
{
	static const uint8_t question[] = { 7,   'e', 'x', 'a', 'm', 'p', 'l', 'e', 3,
					    'c', 'o', 'm', 0,   0,   1,   0,   1 };
	const uint8_t head[12] = {
		(uint8_t)(id >> 8), (uint8_t)id, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0
	};

	AN_ASSERT(cap >= sizeof(head) + sizeof(question));
	memcpy(out, head, sizeof(head));
	memcpy(out + sizeof(head), question, sizeof(question));
	return sizeof(head) + sizeof(question);
}

/* One query to <server>:53: 0 when an answer came, or -errno (-ETIMEDOUT: none in time). */
static int dns_ask(const char *server)
{
	struct sockaddr_storage ss;
	socklen_t len;
	uint8_t q[64], a[512];

	if (parse_inet(server, 53, &ss, &len) != 0)
		return -EINVAL;
	int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	size_t qlen = dns_query(q, sizeof(q), (uint16_t)getpid());
	int ret = 0;
	if (connect(fd, (struct sockaddr *)&ss, len) == -1 || send(fd, q, qlen, 0) == -1) {
		ret = -errno;
	} else {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, PROBE_WAIT_MS);
		ret = n == -1 ? -errno : n == 0 ? -ETIMEDOUT : 0;
		if (ret == 0 && recv(fd, a, sizeof(a), 0) == -1)
			ret = -errno; /* ECONNREFUSED: an ICMP port unreachable came back */
	}
	close(fd);
	return ret;
}

void probe_dns(struct verdict *v)
{
	struct tally t = { 0 };

	for (uint32_t i = 0; i <= args.dns.n; i++) {
		const char *server = i < args.dns.n ? args.dns.v[i] : PROBE_RESOLVER;
		if (i < args.dns.n && strcmp(server, PROBE_RESOLVER) == 0)
			continue;
		int ret = dns_ask(server);
		if (ret == 0)
			say_open(v, "an answer from %s:53", server);
		else
			tally_add(&t, -ret, server);
	}
	tally_say(v, "no answer", &t);
}

void probe_tcp_host(struct verdict *v)
{
	struct tally t = { 0 };

	for (uint32_t i = 0; i < args.tcp.n; i++) {
		struct sockaddr_storage ss;
		socklen_t len;
		if (parse_inet(args.tcp.v[i], 0, &ss, &len) != 0) {
			tally_add(&t, EINVAL, args.tcp.v[i]);
			continue;
		}
		int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		int ret = fd == -1 ? -errno
				   : connect_wait(fd, (struct sockaddr *)&ss, len, PROBE_WAIT_MS);
		if (ret == 0)
			say_open(v, "connected to %s", args.tcp.v[i]);
		else
			tally_add(&t, -ret, args.tcp.v[i]);
		if (fd != -1)
			close(fd);
	}
	if (args.tcp.n == 0)
		say_closed(v, "no host listener given");
	tally_say(v, "", &t);
}

/* The x32 ABI's socket(AF_VSOCK): a filter that checks only x86-64 numbers misses it. */
static int vsock_x32(void)
{
#if defined(__x86_64__) && defined(__X32_SYSCALL_BIT)
	long fd = syscall(__X32_SYSCALL_BIT | __NR_socket, AF_VSOCK, SOCK_STREAM, 0);
	return fd >= 0 ? 0 : errno;
#else
	return ENOSYS;
#endif
}

void probe_vsock(struct verdict *v)
{
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		say_closed(v, "socket(AF_VSOCK): %s", ename(errno));
	} else {
		say_open(v, "socket(AF_VSOCK) created");
		unsigned int cid = 0, port = 0;
		if (args.vsock != NULL && sscanf(args.vsock, "%u:%u", &cid, &port) == 2) {
			struct sockaddr_vm vm = { .svm_family = AF_VSOCK,
						  .svm_cid = cid,
						  .svm_port = port };
			int ret =
			    connect_wait(fd, (struct sockaddr *)&vm, sizeof(vm), PROBE_WAIT_MS);
			say_open(v, "connect to CID %u port %u: %s", cid, port,
				 ret == 0 ? "connected" : ename(-ret));
		}
		close(fd);
	}
	struct outcome o = in_child(vsock_x32);
	if (o.err == 0)
		say_open(v, "x32 socket(AF_VSOCK) created");
	else
		say_closed(v, "x32 socket(AF_VSOCK): %s", ename(o.err));
}

static const char *family_name(int family)
{
	static const struct {
		int family;
		const char *name;
	} names[] = {
		{ AF_NETLINK, "AF_NETLINK" }, { AF_PACKET, "AF_PACKET" },
		{ AF_ALG, "AF_ALG" },         { AF_KEY, "AF_KEY" },
		{ AF_TIPC, "AF_TIPC" },       { AF_RDS, "AF_RDS" },
		{ AF_CAN, "AF_CAN" },         { AF_BLUETOOTH, "AF_BLUETOOTH" },
		{ AF_XDP, "AF_XDP" },         { AF_SMC, "AF_SMC" },
		{ AF_LLC, "AF_LLC" },         { AF_PPPOX, "AF_PPPOX" },
		{ AF_KCM, "AF_KCM" },         { AF_QIPCRTR, "AF_QIPCRTR" },
	};
	static char buf[24];

	for (size_t i = 0; i < AN_ARRAY_LEN(names); i++)
		if (names[i].family == family)
			return names[i].name;
	snprintf(buf, sizeof(buf), "family %d", family);
	return buf;
}

/* 0 when any type of <family> made a socket, else the most telling errno. */
static int family_try(int family, int protocol)
{
	static const int types[] = { SOCK_DGRAM, SOCK_STREAM, SOCK_SEQPACKET, SOCK_RAW };
	int err = EAFNOSUPPORT;

	for (size_t i = 0; i < AN_ARRAY_LEN(types); i++) {
		int fd = socket(family, types[i] | SOCK_CLOEXEC, protocol);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		/* "not this type" says less than "not this family" or "not you". */
		bool weak = errno == ESOCKTNOSUPPORT || errno == EPROTONOSUPPORT ||
			    errno == EPROTOTYPE || errno == EINVAL || errno == EOPNOTSUPP;
		if (!weak || i == 0)
			err = errno;
		if (!weak)
			break;
	}
	AN_ASSERT(err != 0);
	return err;
}

/* In inet and inet6, protocols other than TCP, UDP and ping: kernel code no client needs. */
static void inet_protocols(struct verdict *v)
{
	static const struct {
		int type, protocol;
		const char *name;
	} protos[] = {
		{ SOCK_STREAM, IPPROTO_MPTCP, "MPTCP" },
		{ SOCK_STREAM, IPPROTO_SCTP, "SCTP" },
		{ SOCK_SEQPACKET, IPPROTO_SCTP, "SCTP seqpacket" },
		{ SOCK_DCCP, IPPROTO_DCCP, "DCCP" },
		{ SOCK_DGRAM, IPPROTO_UDPLITE, "UDP-Lite" },
		{ SOCK_DGRAM, PROBE_IPPROTO_L2TP, "L2TP/IP" },
		{ SOCK_STREAM, PROBE_IPPROTO_SMC, "SMC" },
	};
	struct tally t = { 0 };

	for (int inet6 = 0; inet6 < 2; inet6++) {
		for (size_t i = 0; i < AN_ARRAY_LEN(protos); i++) {
			int fd = socket(inet6 ? AF_INET6 : AF_INET, protos[i].type | SOCK_CLOEXEC,
					protos[i].protocol);
			if (fd >= 0) {
				say_open(v, "socket(%s, %s) created",
					 inet6 ? "AF_INET6" : "AF_INET", protos[i].name);
				close(fd);
			} else {
				tally_add(&t, errno, inet6 ? NULL : protos[i].name);
			}
		}
	}
	tally_say(v, "other inet protocols", &t);
}

void probe_sockets(struct verdict *v)
{
	struct tally t = { 0 };
	uint32_t tried = 0;

	for (int family = 1; family < AF_MAX; family++) {
		if (family == AF_UNIX || family == AF_INET || family == AF_INET6 ||
		    family == AF_VSOCK)
			continue;
		tried++;
		int err = family_try(family, 0);
		if (err == 0)
			say_open(v, "socket(%s) created", family_name(family));
		else
			tally_add(&t, err, NULL);
	}
	say_closed(v, "%u families other than unix, inet, inet6 tried", tried);
	tally_say(v, "refused", &t);
	memset(&t, 0, sizeof(t));
	int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
	if (fd >= 0)
		say_open(v, "raw socket(AF_INET, IPPROTO_ICMP) created");
	else
		tally_add(&t, errno, "inet");
	if (fd >= 0)
		close(fd);
	fd = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6);
	if (fd >= 0)
		say_open(v, "raw socket(AF_INET6, IPPROTO_ICMPV6) created");
	else
		tally_add(&t, errno, "inet6");
	if (fd >= 0)
		close(fd);
	tally_say(v, "raw", &t);
	inet_protocols(v);
}

void probe_io_uring(struct verdict *v)
{
	static const struct {
		uint32_t flags;
		const char *name;
	} rings[] = { { 0, "io_uring_setup" }, { IORING_SETUP_SQPOLL, "io_uring_setup(SQPOLL)" } };
	struct tally t = { 0 };

	for (size_t i = 0; i < AN_ARRAY_LEN(rings); i++) {
		struct io_uring_params p = { .flags = rings[i].flags, .sq_thread_idle = 10 };
		long fd = syscall(SYS_io_uring_setup, 4, &p);
		if (fd >= 0) {
			say_open(v, "%s made a ring", rings[i].name);
			close((int)fd);
		} else {
			tally_add(&t, errno, rings[i].name);
		}
	}
	tally_say(v, "", &t);
}

/* Connects to <path>; on success says what got through (and the daemon's answer to <ask>). */
static void unix_try(struct verdict *v, const char *path, const char *ask, struct tally *t)
{
	char answer[128];
	int fd;

	int ret = unix_connect(path, &fd);
	if (ret != 0) {
		tally_add(t, -ret, path);
		return;
	}
	ssize_t n = -1;
	if (ask != NULL && send(fd, ask, strlen(ask), MSG_NOSIGNAL) > 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, PROBE_WAIT_MS) == 1)
			n = recv(fd, answer, sizeof(answer) - 1, 0);
	}
	if (n > 0) {
		answer[n] = '\0';
		answer[strcspn(answer, "\r\n")] = '\0';
		say_open(v, "connected to %s, which answered \"%s\"", path, answer);
	} else {
		say_open(v, "connected to %s", path);
	}
	close(fd);
}

static void unix_probe(struct verdict *v, const char *const *paths, uint32_t n, const char *ask)
{
	struct tally t = { 0 };

	for (uint32_t i = 0; i < n; i++)
		unix_try(v, paths[i], ask, &t);
	if (n == 0)
		say_closed(v, "no host socket given");
	tally_say(v, "connect", &t);
}

void probe_unix_abstract(struct verdict *v)
{
	static char name[110];

	if (args.abstract == NULL) {
		unix_probe(v, NULL, 0, NULL);
		return;
	}
	snprintf(name, sizeof(name), "@%s", args.abstract);
	const char *paths[] = { name };
	unix_probe(v, paths, 1, NULL);
}

void probe_unix_path(struct verdict *v)
{
	unix_probe(v, args.unix_paths.v, args.unix_paths.n, NULL);
}

void probe_other_sandbox(struct verdict *v)
{
	const char *paths[] = { args.other };
	unix_probe(v, paths, args.other != NULL ? 1 : 0, NULL);
}

void probe_control_socket(struct verdict *v)
{
	const char *paths[] = { args.control };
	unix_probe(v, paths, args.control != NULL ? 1 : 0, "ping\n");
}

/*
 * A host socket the run could not have masked (bound in a network namespace of its own,
 * outside everything the sandbox shows): only the sandbox's root of its own keeps it out.
 * Without one given there is nothing to try, which is no verdict.
 */
void probe_unlisted_socket(struct verdict *v)
{
	const char *paths[] = { args.unlisted };

	if (args.unlisted == NULL) {
		say_open(v, "no verdict: no --unlisted socket given");
		return;
	}
	unix_probe(v, paths, 1, NULL);
}

/* ---- Socket files anywhere in the file system ---- */

/* The sandbox's own sockets, below the walk's root: expected, so not tried. */
static const char *const sock_own[] = { SANDBOX_EGRESS_SOCKET, SANDBOX_INGRESS_SOCKET };

/* The walk's state (one walk per process: the probe runs in a child of its own). */
static struct sock_walk {
	char path[PATH_MAX]; /* the directory being read, then "/name" */
	size_t root_len;     /* the root's bytes in path ("" for /) */
	/* Directories still to read, in the order found: paths below the root, NUL-ended. */
	char queue[PROBE_SOCK_QUEUE_BYTES];
	size_t head, tail;
	uint32_t queued, dirs, seen, own, open;
	char named[PROBE_SOCK_NAMED][PROBE_SOCK_PATH_BYTES]; /* the first sockets that accepted */
	struct tally refused;
	struct timespec start;
	const char *cut; /* NULL, or why the walk stopped short */
} sw;

static uint64_t sock_elapsed_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)(now.tv_sec - sw.start.tv_sec) * 1000u +
	       (uint64_t)((now.tv_nsec - sw.start.tv_nsec) / 1000000);
}

/*
 * Connects to socket file <name> in directory <dfd>, as a stream, else (EPROTOTYPE: another
 * type's) a datagram or seqpacket socket, waiting PROBE_SOCK_CONNECT_MS: 0 when it accepted
 * (a full backlog counts: the listener is there), or the errno. Relative to the directory,
 * so no path is too long; a name too long for sun_path goes through its O_PATH descriptor.
 */
static int sock_connect(int dfd, const char *name)
{
	static const int types[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int pfd = -1, err = 0;

	if (strlen(name) < sizeof(sun.sun_path)) {
		if (fchdir(dfd) == -1)
			return errno;
		memcpy(sun.sun_path, name, strlen(name) + 1);
	} else {
		pfd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (pfd == -1)
			return errno;
		snprintf(sun.sun_path, sizeof(sun.sun_path), "/proc/self/fd/%d", pfd);
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(types); i++) {
		int fd = socket(AF_UNIX, types[i] | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		int ret = fd == -1 ? -errno
				   : connect_wait(fd, (struct sockaddr *)&sun, sizeof(sun),
						  PROBE_SOCK_CONNECT_MS);
		if (fd != -1)
			close(fd);
		err = ret == -EAGAIN ? 0 : -ret;
		if (err != EPROTOTYPE)
			break;
	}
	if (pfd != -1)
		close(pfd);
	return err;
}

/* <path> into a slot of sw.named, its end cut to "..." when it does not fit. */
static void path_show(char *out, const char *path)
{
	size_t n = strlen(path);

	if (n < PROBE_SOCK_PATH_BYTES) {
		memcpy(out, path, n + 1);
		return;
	}
	memcpy(out, path, PROBE_SOCK_PATH_BYTES - 4);
	memcpy(out + PROBE_SOCK_PATH_BYTES - 4, "...", 4);
}

/* Socket file <name> in <dfd>, whose path is sw.path: the sandbox's own, or tried. */
static void sock_found(int dfd, const char *name)
{
	const char *below = sw.path + sw.root_len;

	if (sock_elapsed_ms() >= PROBE_SOCK_TIME_MS) {
		sw.cut = "time budget";
		return;
	}
	sw.seen++;
	for (size_t i = 0; i < AN_ARRAY_LEN(sock_own); i++) {
		if (strcmp(below, sock_own[i]) == 0) {
			sw.own++;
			return;
		}
	}
	int err = sock_connect(dfd, name);
	if (err != 0) {
		tally_add(&sw.refused, err, NULL);
		return;
	}
	if (sw.open < PROBE_SOCK_NAMED)
		path_show(sw.named[sw.open], sw.path);
	sw.open++;
}

/* What getdents64 returns, one after another (glibc names it only with _LARGEFILE64_SOURCE). */
struct probe_dirent {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* Queues directory <below> (its path below the root), within PROBE_SOCK_DIRS_MAX in all. */
static void sock_queue(const char *below)
{
	size_t n = strlen(below) + 1;

	uint64_t most = args.sockets_dirs.set && args.sockets_dirs.v < PROBE_SOCK_DIRS_MAX
			    ? args.sockets_dirs.v
			    : PROBE_SOCK_DIRS_MAX;
	if (sw.queued >= most || n > sizeof(sw.queue) - sw.tail) {
		sw.cut = "directory budget";
		return;
	}
	memcpy(sw.queue + sw.tail, below, n);
	sw.tail += n;
	sw.queued++;
}

/* Entry <name> (<type> as getdents says it) of directory <dfd>, sw.path's first <len> bytes. */
static void sock_entry(int dfd, const char *name, unsigned char type, size_t len)
{
	struct stat st;
	size_t n = strlen(name);

	if (len + 1 + n >= sizeof(sw.path))
		return;
	sw.path[len] = '/';
	memcpy(sw.path + len + 1, name, n + 1);
	if (type == DT_UNKNOWN && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		type = S_ISSOCK(st.st_mode) ? DT_SOCK : S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
	const char *below = sw.path + sw.root_len;
	bool kernel =
	    strcmp(below, "/proc") == 0 || strcmp(below, "/sys") == 0 || strcmp(below, "/dev") == 0;
	if (type == DT_SOCK)
		sock_found(dfd, name);
	else if (type == DT_DIR && !kernel)
		sock_queue(below);
	sw.path[len] = '\0';
}

/*
 * Reads the next queued directory, below <root_fd>: its socket files tried, its directories
 * queued. Opened without following a symbolic link (a queued path holds none: each of its
 * parts was a directory when listed); not read when on a kernel or remote file system.
 */
static void sock_visit(int root_fd)
{
	char buf[4096] __attribute__((aligned(8)));
	const char *below = sw.queue + sw.head;
	size_t len = sw.root_len + strlen(below);

	sw.head += strlen(below) + 1;
	AN_ASSERT(sw.head <= sw.tail);
	if (len >= sizeof(sw.path))
		return;
	memcpy(sw.path + sw.root_len, below, len - sw.root_len + 1);
	int fd = openat(root_fd, below[0] == '/' ? below + 1 : ".",
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return; /* unreadable to the agent, or gone */
	if (walkfs_skipped(fd)) {
		close(fd);
		return;
	}
	sw.dirs++;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			const struct probe_dirent *e = (const struct probe_dirent *)(buf + off);
			off += e->d_reclen;
			if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
				sock_entry(fd, e->d_name, e->d_type, len);
		}
	}
	close(fd);
}

/*
 * The walk, breadth first (sockets live near the top: /run, /tmp, /var/lib/<service>, and a
 * deep /usr must not use the budget up), into every mount but the kernel's and remote ones,
 * /proc, /sys and /dev skipped, within PROBE_SOCK_DIRS_MAX directories and PROBE_SOCK_TIME_MS.
 */
static void sock_walk(int root_fd)
{
	sock_queue("");
	while (sw.head < sw.tail) {
		if (sock_elapsed_ms() >= PROBE_SOCK_TIME_MS) {
			sw.cut = "time budget";
			break;
		}
		sock_visit(root_fd);
	}
}

/*
 * Every socket file the agent can list, tried: a pathname socket is a way to whatever
 * listens on it, the host's services, another sandbox's egress (under that sandbox's name and
 * policy), a daemon's control socket, wherever on the file system it is.
 */
void probe_host_sockets(struct verdict *v)
{
	const char *root = args.sockets_root != NULL ? args.sockets_root : "/";
	size_t root_len = strlen(root);

	while (root_len > 0 && root[root_len - 1] == '/')
		root_len--;
	if (root_len >= sizeof(sw.path) / 2) {
		say_open(v, "no verdict: %s: %s", root, ename(ENAMETOOLONG));
		return;
	}
	memcpy(sw.path, root, root_len);
	sw.path[root_len] = '\0';
	sw.root_len = root_len;
	clock_gettime(CLOCK_MONOTONIC, &sw.start);
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1) {
		say_open(v, "no verdict: %s: %s", root, ename(errno));
		return;
	}
	sock_walk(fd);
	close(fd);
	char walked[160];
	snprintf(walked, sizeof(walked),
		 "%u socket files seen (%u the sandbox's own), %u directories walked%s%s", sw.seen,
		 sw.own, sw.dirs, sw.cut != NULL ? ", partial: " : "",
		 sw.cut != NULL ? sw.cut : "");
	if (sw.open > 0) {
		char named[PROBE_SOCK_NAMED * (PROBE_SOCK_PATH_BYTES + 2)] = "";
		size_t len = 0;
		for (uint32_t i = 0; i < sw.open && i < PROBE_SOCK_NAMED; i++) {
			int n = snprintf(named + len, sizeof(named) - len, "%s%s",
					 i > 0 ? ", " : "", sw.named[i]);
			if (n < 0 || (size_t)n >= sizeof(named) - len)
				break;
			len += (size_t)n;
		}
		say_open(v, "%u accepted a connection: %s%s; %s", sw.open, named,
			 sw.open > PROBE_SOCK_NAMED ? ", ..." : "", walked);
	} else if (sw.cut != NULL) {
		/* A walk cut short cannot say the rest holds no socket: never closed then. */
		say_open(v, "no verdict: the walk stopped before it saw everything; %s", walked);
	}
	say_closed(v, "%s", walked);
	tally_say(v, "connect", &sw.refused);
}
