/*
 * `agentsnet selftest`: escape probes in a real sandbox, on the operator's
 * own host (tools/agentsnet/selftest.h). Three steps, all in this process:
 *
 * 1. Lay out on the host what an agent must not reach, each thing named
 *    after this process (agentsnet-selftest-<pid>) so no two runs collide: a
 *    TCP listener on every host address (loopback and getifaddrs, each its own
 *    port), an abstract Unix socket, pathname sockets (0666) in /tmp, /var/tmp
 *    and /dev/shm, a marker file in every world-writable directory (the known
 *    ones plus a walk of SELFTEST_WALK_DEPTH levels, deeper than the
 *    sandbox's own walk, so a directory it misses shows as OPEN), a POSIX
 *    queue, a SysV segment (0666), a key readable by its user in a session
 *    keyring joined for the purpose (the operator's is never touched), a
 *    second sandbox registered with the daemon, and a pty standing for the
 *    operator's terminal (raw: an injected byte stays in its input queue).
 * 2. Run `agentsnet run --probe agentsnet-probe -- SANDBOX_PROBE_PATH ...`
 *    (this same binary) as a child in a session of its own whose controlling
 *    terminal and stdin are that pty, as an operator's shell job would be;
 *    stdout a pipe (the probe's lines), stderr a pipe (shown with -v, or when
 *    the sandbox could not start). Every fixture travels as a probe argument.
 *    It gets SELFTEST_TIMEOUT_MS, then SIGTERM, then SIGKILL.
 * 3. Check from the host what the probe cannot see (a byte in the pty's input
 *    queue, a file the probe made showing in a host directory, a connection
 *    queued on a listener), fold that into the probe's lines, print them
 *    aligned and a summary. Every fixture is removed on every path, an
 *    interruption (SIGINT, SIGTERM, SIGHUP) included.
 *
 * A probe that does not report is OPEN ("no verdict"), never closed: a
 * selftest that cannot tell must not reassure. Rejected: running the probes
 * from this process in a sandbox of its own making (it would test a copy of
 * `agentsnet run`, not the real one).
 */
#include "tools/agentsnet/selftest.h"

#include <arpa/inet.h>
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <libgen.h>
#include <limits.h>
#include <linux/keyctl.h>
#include <linux/magic.h>
#include <mqueue.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "tools/agentsnet/ctl.h"
#include "tools/agentsnet/sandbox.h"
#include "tools/unixaddr.h"
#include "tools/walkfs.h"

/* As tools/agentsnet/main.c's defaults for `run`: keep them equal. */
#define SELFTEST_SOCKET_DIR     "/run/agentsnet"
#define SELFTEST_SOCKET_DIR_ENV "AGENTSNET_SOCKET_DIR"
#define SELFTEST_PROFILE        "default"
#define SELFTEST_PROBE_NAME     "agentsnet-probe"
#define SELFTEST_TAG            "agentsnet-selftest"
/* The whole probe run; then SIGTERM, and SIGKILL once `run`'s own grace is over. */
#define SELFTEST_TIMEOUT_MS 60000
#define SELFTEST_KILL_MS    (SANDBOX_TERM_GRACE_MS + 2000)
/* The limits the sandbox gets, and what the probes try to go past. */
#define SELFTEST_PIDS_MAX   64u
#define SELFTEST_MEMORY_MiB 256u
/* The vsock address the vsock probe connects to, should it get a socket: the host. */
#define SELFTEST_VSOCK           "2:1"
#define SELFTEST_LISTENERS_MAX   32u
#define SELFTEST_DIRS_MAX        128u
#define SELFTEST_PATH_BYTES      512u
#define SELFTEST_WALK_DEPTH      5
#define SELFTEST_WALK_DIRS_MAX   100000u
#define SELFTEST_NAMESERVERS_MAX 8u
#define SELFTEST_OUT_BYTES       (64u * 1024u)
#define SELFTEST_ARGS_MAX        1024u
#define SELFTEST_RESULTS_MAX     48u
#define SELFTEST_TEXT_BYTES      1200u
/* Key permissions (keyutils.h's, which <linux/keyctl.h> lacks). */
#define SELFTEST_KEY_POS_ALL    0x3f000000
#define SELFTEST_KEY_USR_VIEW   0x00010000
#define SELFTEST_KEY_USR_READ   0x00020000
#define SELFTEST_KEY_USR_SEARCH 0x00080000

/*
 * The probes tools/probe/main.c runs, each of which must report. Adding one: also
 * tools/probe/main.c's probes table and docs/sandbox.md.
 */
static const char *const selftest_probes[] = {
	"dns",          "tcp-host",      "vsock",
	"sockets",      "io-uring",      "unix-abstract",
	"unix-path",    "other-sandbox", "control-socket",
	"host-sockets", "terminal",      "ptrace-bridge",
	"fd-theft",     "host-pids",     "shared-dirs",
	"keyring",      "userns",        "mount",
	"pids",         "memory",        "unlisted-socket",
};

/* The world-writable places every Linux host may have; the walk finds the rest. */
static const char *const selftest_known_dirs[] = {
	"/tmp",      "/var/tmp",  "/dev/shm",   "/dev/mqueue",
	"/var/lock", "/run/lock", "/var/crash", "/var/metrics",
};

/* Where the pathname sockets go: the places a host service leaves its own. */
static const char *const selftest_socket_dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };

struct selftest_listener {
	int fd;
	char addr[INET6_ADDRSTRLEN + 8]; /* "1.2.3.4:port", "[::1]:port" */
};

struct selftest_dir {
	char path[SELFTEST_PATH_BYTES];
	char marker[SELFTEST_PATH_BYTES + 64];
	bool marker_made;
	bool appeared; /* the probe's file showed on the host */
};

struct selftest_result {
	char name[32];
	bool open;
	bool unlimited; /* "memory": no cgroup could hold it, and `run` said so (not an escape) */
	char text[SELFTEST_TEXT_BYTES];
};

struct selftest {
	/* The command line. */
	const char *socket_dir_arg, *bridge, *probe_arg, *user;
	bool verbose;
	char exe[PATH_MAX], probe[PATH_MAX], socket_dir[PATH_MAX], control[PATH_MAX];
	char tag[64], probe_tag[80], id[64], other_id[64], key_desc[80], mq_name[80];
	/* The fixtures (-1 / false: not made). */
	struct selftest_listener tcp[SELFTEST_LISTENERS_MAX];
	uint32_t tcp_n;
	int abstract_fd;
	struct {
		int fd;
		char path[SELFTEST_PATH_BYTES];
	} unix_socks[3];
	uint32_t unix_n;
	/* A socket no listing of the run's can hold: bound from a network namespace of its own
	 * by a child (pid), in a directory of the host's outside every directory the sandbox
	 * makes or binds (unlisted_dir). */
	pid_t unlisted_pid;
	char unlisted_dir[SELFTEST_PATH_BYTES], unlisted_path[SELFTEST_PATH_BYTES + 32];
	struct selftest_dir dirs[SELFTEST_DIRS_MAX];
	uint32_t dirs_n, dirs_dropped, walked;
	bool mq_made;
	int shm_id;
	uint32_t shm_key;
	long key_serial;
	bool other_added;
	char other_sock[PATH_MAX];
	char nameservers[SELFTEST_NAMESERVERS_MAX][INET6_ADDRSTRLEN];
	uint32_t nameservers_n;
	int pty_master, pty_slave;
	/* The run. */
	char *argv[SELFTEST_ARGS_MAX];
	uint32_t argc;
	char nums[5][24];
	char out[SELFTEST_OUT_BYTES], err[SELFTEST_OUT_BYTES];
	size_t out_len, err_len;
	int wstatus;
	bool exited, timed_out;
	size_t tty_out_bytes;
	/* The host's view after it. */
	int tty_queued;
	uint32_t accepted;
	struct selftest_result results[SELFTEST_RESULTS_MAX];
	uint32_t results_n;
};

static volatile sig_atomic_t selftest_stop;

static void on_stop(int sig)
{
	selftest_stop = sig;
}

__attribute__((format(printf, 2, 3))) static void verbose(const struct selftest *s, const char *fmt,
							  ...)
{
	va_list ap;

	if (!s->verbose)
		return;
	fputs("selftest: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Formats into <out>/<cap>: 0, or -ENAMETOOLONG when it does not fit. */
__attribute__((format(printf, 3, 4))) static int fmt(char *out, size_t cap, const char *f, ...)
{
	va_list ap;

	AN_ASSERT(cap > 0);
	va_start(ap, f);
	int n = vsnprintf(out, cap, f, ap);
	va_end(ap);
	return n >= 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

/* Formats the reason for a failed step into <why>/<cap>; returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t cap, const char *f, ...)
{
	va_list ap;

	AN_ASSERT(cap > 0);
	va_start(ap, f);
	vsnprintf(why, cap, f, ap);
	va_end(ap);
	return -1;
}

/* ---- Step 1: the fixtures ---- */

static int pty_open(struct selftest *s, char *why, size_t cap)
{
	char name[64];
	struct termios t;

	s->pty_master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s->pty_master == -1 || grantpt(s->pty_master) != 0 || unlockpt(s->pty_master) != 0 ||
	    ptsname_r(s->pty_master, name, sizeof(name)) != 0)
		return fail(why, cap, "a pty for the caller's terminal: %s", strerror(errno));
	s->pty_slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s->pty_slave == -1 || tcgetattr(s->pty_slave, &t) != 0)
		return fail(why, cap, "%s: %s", name, strerror(errno));
	/* Raw: a byte typed into it is neither echoed nor read by a line editor; it waits. */
	cfmakeraw(&t);
	if (tcsetattr(s->pty_slave, TCSANOW, &t) != 0)
		return fail(why, cap, "%s: raw mode: %s", name, strerror(errno));
	AN_ASSERT(s->pty_master >= 0);
	AN_ASSERT(s->pty_slave >= 0);
	return 0;
}

/* A listener on <sa>, its own port; skipped (0) when this host cannot bind there. */
static int listen_tcp(struct selftest *s, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_storage got;
	socklen_t got_len = sizeof(got);
	char host[INET6_ADDRSTRLEN];

	if (s->tcp_n == SELFTEST_LISTENERS_MAX)
		return 0;
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1 || bind(fd, sa, len) == -1 || listen(fd, 16) == -1 ||
	    getsockname(fd, (struct sockaddr *)&got, &got_len) == -1) {
		int err = errno;
		if (fd != -1)
			close(fd);
		return err == EADDRNOTAVAIL || err == EAFNOSUPPORT ? 0 : -err;
	}
	struct selftest_listener *l = &s->tcp[s->tcp_n++];
	l->fd = fd;
	if (got.ss_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&got;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		fmt(l->addr, sizeof(l->addr), "%s:%u", host, ntohs(in->sin_port));
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&got;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		fmt(l->addr, sizeof(l->addr), "[%s]:%u", host, ntohs(in6->sin6_port));
	}
	return 0;
}

/* 127.0.0.1, ::1 and every other address of the host's interfaces (link-local aside). */
static int listeners_open(struct selftest *s, char *why, size_t cap)
{
	struct sockaddr_in lo4 = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in6 lo6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct ifaddrs *ifs = NULL;

	int ret = listen_tcp(s, (struct sockaddr *)&lo4, sizeof(lo4));
	if (ret == 0)
		ret = listen_tcp(s, (struct sockaddr *)&lo6, sizeof(lo6));
	if (ret == 0 && getifaddrs(&ifs) == -1)
		ret = -errno;
	for (struct ifaddrs *i = ifs; ret == 0 && i != NULL; i = i->ifa_next) {
		const struct sockaddr *a = i->ifa_addr;
		if (a == NULL || (i->ifa_flags & IFF_LOOPBACK) != 0)
			continue;
		if (a->sa_family == AF_INET) {
			struct sockaddr_in in = *(const struct sockaddr_in *)a;
			in.sin_port = 0;
			ret = listen_tcp(s, (struct sockaddr *)&in, sizeof(in));
		} else if (a->sa_family == AF_INET6 &&
			   !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)a)->sin6_addr)) {
			struct sockaddr_in6 in6 = *(const struct sockaddr_in6 *)a;
			in6.sin6_port = 0;
			ret = listen_tcp(s, (struct sockaddr *)&in6, sizeof(in6));
		}
	}
	if (ifs != NULL)
		freeifaddrs(ifs);
	if (ret != 0 || s->tcp_n == 0)
		return fail(why, cap, "a TCP listener on this host: %s",
			    ret != 0 ? strerror(-ret) : "no address to bind");
	return 0;
}

/* A listening Unix socket at <path> ('@' first: abstract); the descriptor, or -errno. */
static int listen_unix(const char *path)
{
	struct sockaddr_un sun;

	int sa_len = unixaddr_fill(&sun, path);
	if (sa_len < 0)
		return sa_len;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sun, (socklen_t)sa_len) == -1 || listen(fd, 16) == -1) {
		int err = errno;
		close(fd);
		return -err;
	}
	/* Anyone may connect: a host service's socket often is that open. */
	if (path[0] != '@' && chmod(path, 0666) == -1) {
		int err = errno;
		close(fd);
		unlink(path);
		return -err;
	}
	return fd;
}

static int unix_open(struct selftest *s, char *why, size_t cap)
{
	char path[SELFTEST_PATH_BYTES];

	fmt(path, sizeof(path), "@%s", s->tag);
	s->abstract_fd = listen_unix(path);
	if (s->abstract_fd < 0)
		return fail(why, cap, "%s: %s", path, strerror(-s->abstract_fd));
	for (size_t i = 0; i < AN_ARRAY_LEN(selftest_socket_dirs); i++) {
		fmt(path, sizeof(path), "%s/%s.sock", selftest_socket_dirs[i], s->tag);
		int fd = listen_unix(path);
		if (fd < 0) {
			verbose(s, "no socket at %s: %s", path, strerror(-fd));
			continue;
		}
		s->unix_socks[s->unix_n].fd = fd;
		memcpy(s->unix_socks[s->unix_n++].path, path, sizeof(path));
	}
	if (s->unix_n == 0)
		return fail(why, cap, "no pathname socket could be made (/tmp: see -v)");
	return 0;
}

/* Adds directory <path> (world-writable, canonical) unless it is there already. */
static void dir_add(struct selftest *s, const char *path)
{
	for (uint32_t i = 0; i < s->dirs_n; i++)
		if (strcmp(s->dirs[i].path, path) == 0)
			return;
	if (s->dirs_n == SELFTEST_DIRS_MAX || strlen(path) >= SELFTEST_PATH_BYTES) {
		s->dirs_dropped++;
		return;
	}
	struct selftest_dir *d = &s->dirs[s->dirs_n++];
	memcpy(d->path, path, strlen(path) + 1);
	AN_ASSERT(d->marker_made == false);
}

/* The walk below <path> (<len> bytes of a PATH_MAX buffer), <fd> its directory. */
static void walk(struct selftest *s, int fd, char *path, size_t len, int depth)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;

	if (d == NULL) {
		close(fd);
		return;
	}
	while ((e = readdir(d)) != NULL && s->walked < SELFTEST_WALK_DIRS_MAX) {
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1 ||
		    !S_ISDIR(st.st_mode))
			continue;
		size_t n = strlen(e->d_name);
		if (len + 1 + n >= PATH_MAX)
			continue;
		path[len] = '/';
		memcpy(path + len + 1, e->d_name, n + 1);
		/* Below /, not the kernel's trees (/dev's shared places are on the known list). */
		bool top_skip =
		    depth == 1 && (strcmp(path, "/proc") == 0 || strcmp(path, "/sys") == 0 ||
				   strcmp(path, "/dev") == 0);
		s->walked++;
		if (!top_skip && (st.st_mode & S_IWOTH) != 0)
			dir_add(s, path);
		int sub = top_skip || depth >= SELFTEST_WALK_DEPTH
			      ? -1
			      : openat(dirfd(d), e->d_name,
				       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0 && walkfs_skipped(sub))
			close(sub);
		else if (sub >= 0)
			walk(s, sub, path, len + 1 + n, depth + 1);
		path[len] = '\0';
	}
	closedir(d);
}

/* The known places and the walk's finds, each with a marker file the agent must not see. */
static int dirs_open(struct selftest *s, char *why, size_t cap)
{
	static char path[PATH_MAX];
	char real[PATH_MAX];
	struct stat st;

	for (size_t i = 0; i < AN_ARRAY_LEN(selftest_known_dirs); i++)
		if (realpath(selftest_known_dirs[i], real) != NULL && stat(real, &st) == 0 &&
		    S_ISDIR(st.st_mode) && (st.st_mode & S_IWOTH) != 0)
			dir_add(s, real);
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		path[0] = '\0';
		walk(s, fd, path, 0, 1);
	}
	for (uint32_t i = 0; i < s->dirs_n; i++) {
		struct selftest_dir *d = &s->dirs[i];
		fmt(d->marker, sizeof(d->marker), "%s/%s.marker", d->path, s->tag);
		int m = open(d->marker, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (m == -1) {
			verbose(s, "no marker in %s: %s", d->path, strerror(errno));
			continue;
		}
		(void)fchmod(m, 0644); /* whatever the umask: any user may read it */
		d->marker_made = true;
		close(m);
	}
	verbose(s, "%u world-writable directories (walked %u, %u levels)%s", s->dirs_n, s->walked,
		SELFTEST_WALK_DEPTH, s->walked == SELFTEST_WALK_DIRS_MAX ? ", walk cut short" : "");
	if (s->dirs_dropped > 0)
		fprintf(stderr,
			"agentsnet selftest: note: %u more world-writable directories not "
			"tried (more than %u, or paths too long)\n",
			s->dirs_dropped, SELFTEST_DIRS_MAX);
	if (s->dirs_n == 0)
		return fail(why, cap, "no world-writable directory on this host (not even /tmp)");
	return 0;
}

/* The POSIX queue (skipped where the kernel has none) and the SysV segment, both 0666. */
static int ipc_open(struct selftest *s, char *why, size_t cap)
{
	struct mq_attr attr = { .mq_maxmsg = 1, .mq_msgsize = 16 };

	fmt(s->mq_name, sizeof(s->mq_name), "/%s", s->tag);
	mqd_t q = mq_open(s->mq_name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0666, &attr);
	if (q == (mqd_t)-1 && errno != ENOSYS)
		return fail(why, cap, "mq_open %s: %s", s->mq_name, strerror(errno));
	s->mq_made = q != (mqd_t)-1;
	if (s->mq_made)
		mq_close(q);
	else
		verbose(s, "no POSIX queue: this kernel has none");
	/* A key of our own: the first free one from a value derived from our pid. */
	for (uint32_t i = 0; i < 64 && s->shm_id == -1; i++) {
		s->shm_key = 0x414e0000u | (((uint32_t)getpid() + i) & 0xffffu);
		s->shm_id = shmget((key_t)s->shm_key, 4096, IPC_CREAT | IPC_EXCL | 0666);
		if (s->shm_id == -1 && errno != EEXIST)
			return fail(why, cap, "shmget: %s", strerror(errno));
	}
	if (s->shm_id == -1)
		return fail(why, cap, "shmget: no free key near %#x", s->shm_key);
	return 0;
}

/*
 * A session keyring of our own first (the operator's is never touched), then a
 * key in it that its user may view, read and search, as many a tool's key is.
 * Where keyrings are refused to everyone (a container's filter), there is none.
 */
static int key_open(struct selftest *s, char *why, size_t cap)
{
	static const char payload[] = "agentsnet selftest canary";
	const long perm = SELFTEST_KEY_POS_ALL | SELFTEST_KEY_USR_VIEW | SELFTEST_KEY_USR_READ |
			  SELFTEST_KEY_USR_SEARCH;

	fmt(s->key_desc, sizeof(s->key_desc), "%s:%d", SELFTEST_TAG, (int)getpid());
	if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) == -1) {
		if (errno == ENOSYS || errno == EPERM) {
			verbose(s, "no key: keyrings refused here (%s)", strerror(errno));
			return 0;
		}
		return fail(why, cap, "a session keyring: %s", strerror(errno));
	}
	s->key_serial = syscall(SYS_add_key, "user", s->key_desc, payload, sizeof(payload) - 1,
				KEY_SPEC_SESSION_KEYRING);
	if (s->key_serial == -1 || syscall(SYS_keyctl, KEYCTL_SETPERM, s->key_serial, perm) == -1)
		return fail(why, cap, "add_key: %s", strerror(errno));
	return 0;
}

/* The daemon's answer to <words>, or an error in <why>: 0 or -1. */
static int control_call(const struct selftest *s, int n, const char *const *words,
			struct ctl_reply *r, char *why, size_t cap)
{
	char req[CTL_REQUEST_BYTES_MAX], err[PATH_MAX + 128];

	AN_ASSERT(n >= 1);
	*r = (struct ctl_reply){ .code = "", .text = "" };
	if (ctl_request_format(req, sizeof(req), n, words) < 0)
		return fail(why, cap, "bad control request");
	int ret = ctl_call(s->control, req, CTL_TIMEOUT_MS_DEFAULT, r, err, sizeof(err));
	if (ret != 0 && ctl_unreachable(ret) && ret != -EACCES)
		return fail(why, cap, "agentsnetd is not running (no control socket at %s)",
			    s->control);
	if (ret != 0)
		return fail(why, cap, "%s", err);
	if (!r->ok)
		return fail(why, cap, "agentsnetd: error %s: %s", r->code, r->text);
	return 0;
}

/* A second sandbox: its egress socket is what another agent's policy would be. */
static int other_open(struct selftest *s, char *why, size_t cap)
{
	const char *words[] = { "sandbox", "add", s->other_id, SELFTEST_PROFILE };
	struct ctl_reply r;

	int ret = control_call(s, (int)AN_ARRAY_LEN(words), words, &r, why, cap);
	if (ret == 0) {
		s->other_added = true;
		if (r.text[0] != '/' ||
		    fmt(s->other_sock, sizeof(s->other_sock), "%s/egress.sock", r.text) != 0)
			ret =
			    fail(why, cap, "sandbox %s: bad directory \"%s\"", s->other_id, r.text);
	}
	ctl_reply_free(&r);
	return ret;
}

/* The host's nameservers (<path>: /etc/resolv.conf), the only addresses the dns probe may ask. */
static void nameservers_read(struct selftest *s, const char *path)
{
	char line[512];
	FILE *f = fopen(path, "re");

	while (f != NULL && fgets(line, sizeof(line), f) != NULL &&
	       s->nameservers_n < SELFTEST_NAMESERVERS_MAX) {
		char addr[INET6_ADDRSTRLEN + 16], *pct;
		unsigned char bin[sizeof(struct in6_addr)];
		if (sscanf(line, " nameserver %61s", addr) != 1)
			continue;
		pct = strchr(addr, '%');
		if (pct != NULL)
			*pct = '\0'; /* a scope: the probe asks the address only */
		if (inet_pton(AF_INET, addr, bin) == 1 || inet_pton(AF_INET6, addr, bin) == 1)
			memcpy(s->nameservers[s->nameservers_n++], addr, strlen(addr) + 1);
	}
	if (f != NULL)
		fclose(f);
}

/*
 * In the child of unlisted_open: a network namespace of its own (and a user
 * namespace first when unprivileged), then the socket, world-connectable;
 * says so on <ready> and holds it until the parent is gone or kills it.
 */
static _Noreturn void unlisted_child(const char *path, int ready)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0UL, 0UL, 0UL);
	/* Without CAP_SYS_ADMIN, a user namespace first, which grants it for the new one. */
	if (unshare(CLONE_NEWNET) == -1 &&
	    (errno != EPERM || unshare(CLONE_NEWUSER | CLONE_NEWNET) == -1)) {
		dprintf(ready, "unshare: %s", strerror(errno));
		_exit(1);
	}
	int fd = listen_unix(path);
	if (fd < 0) {
		dprintf(ready, "%s: %s", path, strerror(-fd));
		_exit(1);
	}
	if (write(ready, "+", 1) != 1)
		_exit(1);
	close(ready);
	for (;;)
		pause();
}

/*
 * The socket of the unlisted-socket probe: in a new directory of the host's
 * that no sandbox shows (/var/lib as root, else the caller's home, never
 * below the working directory `run` is given, "/"), bound in a network
 * namespace of its own, so `agentsnet run`'s listing of the host's sockets
 * does not hold it and no mask of the run's covers it.
 */
static int unlisted_open(struct selftest *s, char *why, size_t cap)
{
	const char *home = getenv("HOME");
	const char *base = geteuid() == 0 ? "/var/lib" : home;
	char msg[256];
	int pipefd[2];

	if (base == NULL || base[0] != '/')
		return fail(why, cap,
			    "unlisted-socket: no directory to make its socket in "
			    "(not root, and HOME is not set)");
	fmt(s->unlisted_dir, sizeof(s->unlisted_dir), "%s/.%s-unlisted", base, s->tag);
	if (mkdir(s->unlisted_dir, 0755) == -1 || chmod(s->unlisted_dir, 0755) == -1) {
		int err = errno;
		s->unlisted_dir[0] = '\0';
		return fail(why, cap, "mkdir %s/.%s-unlisted: %s", base, s->tag, strerror(err));
	}
	fmt(s->unlisted_path, sizeof(s->unlisted_path), "%s/unlisted.sock", s->unlisted_dir);
	if (pipe2(pipefd, O_CLOEXEC) == -1)
		return fail(why, cap, "pipe: %s", strerror(errno));
	s->unlisted_pid = fork();
	if (s->unlisted_pid == 0) {
		close(pipefd[0]);
		unlisted_child(s->unlisted_path, pipefd[1]);
	}
	close(pipefd[1]);
	ssize_t n = s->unlisted_pid > 0 ? read(pipefd[0], msg, sizeof(msg) - 1) : -1;
	close(pipefd[0]);
	if (n == 1 && msg[0] == '+')
		return 0;
	msg[n > 0 ? n : 0] = '\0';
	return fail(why, cap, "unlisted-socket: the socket in a namespace of its own: %s",
		    s->unlisted_pid > 0 ? msg : strerror(errno));
}

static int fixtures_open(struct selftest *s, char *why, size_t cap)
{
	int ret = pty_open(s, why, cap);

	if (ret == 0)
		ret = listeners_open(s, why, cap);
	if (ret == 0)
		ret = unix_open(s, why, cap);
	if (ret == 0)
		ret = dirs_open(s, why, cap);
	if (ret == 0)
		ret = ipc_open(s, why, cap);
	if (ret == 0)
		ret = key_open(s, why, cap);
	if (ret == 0)
		ret = other_open(s, why, cap);
	if (ret == 0)
		ret = unlisted_open(s, why, cap);
	nameservers_read(s, "/etc/resolv.conf");
	return ret;
}

/* Removes every fixture that was made; safe after a partial setup. */
static void fixtures_close(struct selftest *s)
{
	char path[SELFTEST_PATH_BYTES + 64], why[256];
	struct ctl_reply r;

	if (s->other_added) {
		const char *words[] = { "sandbox", "rm", s->other_id };
		if (control_call(s, (int)AN_ARRAY_LEN(words), words, &r, why, sizeof(why)) != 0)
			fprintf(stderr, "agentsnet selftest: sandbox rm %s: %s\n", s->other_id,
				why);
		ctl_reply_free(&r);
	}
	if (s->unlisted_pid > 0) {
		kill(s->unlisted_pid, SIGKILL);
		waitpid(s->unlisted_pid, NULL, 0);
	}
	if (s->unlisted_dir[0] != '\0') {
		unlink(s->unlisted_path);
		rmdir(s->unlisted_dir);
	}
	if (s->key_serial > 0)
		syscall(SYS_keyctl, KEYCTL_INVALIDATE, s->key_serial);
	if (s->shm_id != -1)
		shmctl(s->shm_id, IPC_RMID, NULL);
	if (s->mq_made)
		mq_unlink(s->mq_name);
	for (uint32_t i = 0; i < s->dirs_n; i++) {
		if (s->dirs[i].marker_made)
			unlink(s->dirs[i].marker);
		if (fmt(path, sizeof(path), "%s/%s.probe", s->dirs[i].path, s->tag) == 0)
			unlink(path);
	}
	for (uint32_t i = 0; i < s->unix_n; i++) {
		close(s->unix_socks[i].fd);
		unlink(s->unix_socks[i].path);
	}
	if (s->abstract_fd >= 0)
		close(s->abstract_fd);
	for (uint32_t i = 0; i < s->tcp_n; i++)
		close(s->tcp[i].fd);
	if (s->pty_slave >= 0)
		close(s->pty_slave);
	if (s->pty_master >= 0)
		close(s->pty_master);
}

/* ---- Step 2: the sandbox ---- */

static void arg(struct selftest *s, const char *a)
{
	AN_ASSERT(a != NULL);
	AN_ASSERT(s->argc + 2 < SELFTEST_ARGS_MAX); /* argv_build's counts keep it so */
	s->argv[s->argc++] = (char *)(uintptr_t)a;
	s->argv[s->argc] = NULL;
}

static void arg2(struct selftest *s, const char *name, const char *value)
{
	arg(s, name);
	arg(s, value);
}

/* The fixtures, as the probe's arguments (tools/probe/main.c's opts table). */
static void argv_probe(struct selftest *s)
{
	fmt(s->nums[0], sizeof(s->nums[0]), "%d", (int)getpid());
	fmt(s->nums[1], sizeof(s->nums[1]), "%u", s->shm_key);
	fmt(s->nums[2], sizeof(s->nums[2]), "%ld", s->key_serial);
	fmt(s->nums[3], sizeof(s->nums[3]), "%u", SELFTEST_PIDS_MAX);
	fmt(s->nums[4], sizeof(s->nums[4]), "%llu", (unsigned long long)SELFTEST_MEMORY_MiB << 20);
	arg2(s, "--host-pid", s->nums[0]);
	for (uint32_t i = 0; i < s->nameservers_n; i++)
		arg2(s, "--dns", s->nameservers[i]);
	for (uint32_t i = 0; i < s->tcp_n; i++)
		arg2(s, "--tcp", s->tcp[i].addr);
	arg2(s, "--vsock", SELFTEST_VSOCK);
	arg2(s, "--abstract", s->tag);
	for (uint32_t i = 0; i < s->unix_n; i++)
		arg2(s, "--unix", s->unix_socks[i].path);
	arg2(s, "--other-sandbox", s->other_sock);
	arg2(s, "--control", s->control);
	arg2(s, "--unlisted", s->unlisted_path);
	for (uint32_t i = 0; i < s->dirs_n; i++) {
		arg2(s, "--ww", s->dirs[i].path);
		if (s->dirs[i].marker_made)
			arg2(s, "--marker", s->dirs[i].marker);
	}
	arg2(s, "--tag", s->probe_tag);
	arg2(s, "--shm-key", s->nums[1]);
	if (s->mq_made)
		arg2(s, "--mq", s->mq_name);
	if (s->key_serial > 0) {
		arg2(s, "--key", s->key_desc);
		arg2(s, "--key-serial", s->nums[2]);
	}
	arg2(s, "--pids", s->nums[3]);
	arg2(s, "--memory", s->nums[4]);
}

static void argv_build(struct selftest *s)
{
	static char pids[16], memory[16];
	static_assert(SELFTEST_ARGS_MAX > 4 * (SELFTEST_DIRS_MAX + SELFTEST_LISTENERS_MAX) + 80,
		      "every fixture fits the probe's command line");

	s->argc = 0;
	fmt(pids, sizeof(pids), "%u", SELFTEST_PIDS_MAX);
	fmt(memory, sizeof(memory), "%uM", SELFTEST_MEMORY_MiB);
	arg(s, s->exe);
	arg(s, "run");
	arg2(s, "--socket-dir", s->socket_dir);
	if (s->bridge != NULL)
		arg2(s, "--bridge", s->bridge);
	if (s->user != NULL)
		arg2(s, "--user", s->user);
	arg2(s, "--sandbox", s->id);
	arg2(s, "--probe", s->probe);
	arg2(s, "--pids-max", pids);
	arg2(s, "--memory-max", memory);
	arg(s, "--");
	arg(s, SANDBOX_PROBE_PATH);
	argv_probe(s);
	AN_ASSERT(s->argv[s->argc] == NULL);
}

/* In the child: the operator's terminal as controlling terminal and stdin; never returns. */
static _Noreturn void child_exec(struct selftest *s, int out_fd, int err_fd)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	if (setsid() == -1 || ioctl(s->pty_slave, TIOCSCTTY, 0) == -1 ||
	    dup2(s->pty_slave, 0) == -1 || dup2(out_fd, 1) == -1 || dup2(err_fd, 2) == -1)
		_exit(126);
	close_range(3, ~0u, 0);
	/* No working directory to bind: the probes see the sandbox's bare root. */
	if (chdir("/") == -1)
		_exit(126);
	execv(s->exe, s->argv);
	dprintf(2, "agentsnet selftest: %s: %s\n", s->exe, strerror(errno));
	_exit(127);
}

/* Appends what <fd> has to <buf> (bytes past its size are dropped); false at EOF. */
static bool drain(int fd, char *buf, size_t cap, size_t *len)
{
	char tmp[4096];

	ssize_t n = read(fd, tmp, sizeof(tmp));
	if (n == -1 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	size_t keep = (size_t)n < cap - 1 - *len ? (size_t)n : cap - 1 - *len;
	memcpy(buf + *len, tmp, keep);
	*len += keep;
	buf[*len] = '\0';
	return true;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Escalates on a child past its time or after a signal to us: SIGTERM, later SIGKILL. */
static void child_deadline(struct selftest *s, pid_t pid, int64_t start, int *sent)
{
	int64_t t = now_ms() - start;

	if (*sent == 0 && (t > SELFTEST_TIMEOUT_MS || selftest_stop != 0)) {
		s->timed_out = selftest_stop == 0;
		kill(pid, SIGTERM);
		*sent = SIGTERM;
	} else if (*sent == SIGTERM && t > SELFTEST_TIMEOUT_MS + SELFTEST_KILL_MS) {
		kill(pid, SIGKILL);
		*sent = SIGKILL;
	}
}

/* Reads the child's stdout, stderr and terminal until it exited and its pipes closed. */
static void child_watch(struct selftest *s, pid_t pid, int out_fd, int err_fd)
{
	bool out_open = true, err_open = true;
	int64_t start = now_ms(), exited_at = 0;
	int sent = 0;

	while (!s->exited || ((out_open || err_open) && now_ms() - exited_at < 2000)) {
		struct pollfd p[3] = { { out_open ? out_fd : -1, POLLIN, 0 },
				       { err_open ? err_fd : -1, POLLIN, 0 },
				       { s->pty_master, POLLIN, 0 } };
		int n = poll(p, 3, 100);
		if (n > 0 && p[0].revents != 0)
			out_open = drain(out_fd, s->out, sizeof(s->out), &s->out_len);
		if (n > 0 && p[1].revents != 0)
			err_open = drain(err_fd, s->err, sizeof(s->err), &s->err_len);
		if (n > 0 && (p[2].revents & POLLIN) != 0) {
			/* What the relay shows on the caller's terminal: the agent's output. */
			char sink[4096];
			ssize_t got = read(s->pty_master, sink, sizeof(sink));
			s->tty_out_bytes += got > 0 ? (size_t)got : 0;
		}
		if (!s->exited && waitpid(pid, &s->wstatus, WNOHANG) == pid) {
			s->exited = true;
			exited_at = now_ms();
		}
		if (!s->exited)
			child_deadline(s, pid, start, &sent);
	}
	AN_ASSERT(s->exited);
}

static int sandbox_run(struct selftest *s, char *why, size_t cap)
{
	int out[2], err[2];

	argv_build(s);
	if (s->verbose) {
		fputs("selftest: running", stderr);
		for (uint32_t i = 0; i < s->argc; i++)
			fprintf(stderr, " %s", s->argv[i]);
		fputc('\n', stderr);
	}
	if (pipe2(out, O_CLOEXEC) == -1)
		return fail(why, cap, "pipe2: %s", strerror(errno));
	if (pipe2(err, O_CLOEXEC) == -1) {
		close(out[0]);
		close(out[1]);
		return fail(why, cap, "pipe2: %s", strerror(errno));
	}
	fflush(NULL);
	pid_t pid = selftest_stop == 0 ? fork() : -1;
	if (pid == 0)
		child_exec(s, out[1], err[1]);
	int fork_err = errno;
	close(out[1]);
	close(err[1]);
	if (pid != -1)
		child_watch(s, pid, out[0], err[0]);
	close(out[0]);
	close(err[0]);
	if (pid == -1)
		return fail(why, cap, "fork: %s",
			    selftest_stop != 0 ? "interrupted" : strerror(fork_err));
	return 0;
}

/* ---- Step 3: the verdicts ---- */

/* Parses "<probe> <closed|OPEN>: <text>" (the probe pads the name); -EINVAL otherwise. */
static int result_parse(const char *line, struct selftest_result *r)
{
	size_t name_len = strcspn(line, " ");
	const char *rest = line + name_len;

	if (name_len == 0 || name_len >= sizeof(r->name))
		return -EINVAL;
	rest += strspn(rest, " ");
	bool open = strncmp(rest, "OPEN: ", 6) == 0;
	if (!open && strncmp(rest, "closed: ", 8) != 0)
		return -EINVAL;
	memcpy(r->name, line, name_len);
	r->name[name_len] = '\0';
	r->open = open;
	fmt(r->text, sizeof(r->text), "%s", rest + (open ? 6 : 8));
	return 0;
}

static struct selftest_result *result_find(struct selftest *s, const char *name)
{
	for (uint32_t i = 0; i < s->results_n; i++)
		if (strcmp(s->results[i].name, name) == 0)
			return &s->results[i];
	return NULL;
}

static void results_parse(struct selftest *s)
{
	char *line = s->out;

	while (*line != '\0' && s->results_n < SELFTEST_RESULTS_MAX) {
		char *end = strchr(line, '\n');
		if (end == NULL)
			break; /* a line cut short: no verdict */
		*end = '\0';
		struct selftest_result *r = &s->results[s->results_n];
		if (result_parse(line, r) != 0)
			verbose(s, "not a verdict: %s", line);
		else if (result_find(s, r->name) != NULL)
			verbose(s, "probe %s reported twice; the first line counts", r->name);
		else
			s->results_n++;
		line = end + 1;
	}
	/* A probe that did not report is OPEN: a selftest that cannot tell must not reassure. */
	for (size_t i = 0; i < AN_ARRAY_LEN(selftest_probes); i++) {
		if (result_find(s, selftest_probes[i]) != NULL ||
		    s->results_n == SELFTEST_RESULTS_MAX)
			continue;
		struct selftest_result *r = &s->results[s->results_n++];
		fmt(r->name, sizeof(r->name), "%s", selftest_probes[i]);
		r->open = true;
		fmt(r->text, sizeof(r->text), "no verdict (the probe %s)",
		    s->timed_out ? "ran out of time" : "did not report it");
	}
}

/* Puts <what> before <r>'s text, making it OPEN when <open>. */
static void result_amend(struct selftest_result *r, bool open, const char *what)
{
	char old[SELFTEST_TEXT_BYTES];

	memcpy(old, r->text, sizeof(old));
	if (open && !r->open)
		fmt(r->text, sizeof(r->text), "%s (inside: %s)", what, old);
	else
		fmt(r->text, sizeof(r->text), "%s; %s", old, what);
	r->open = r->open || open;
}

/*
 * The terminal: a TIOCSTI the sandbox accepted reached a terminal; only the
 * host can say whose. A byte in the caller's input queue is OPEN; none, and
 * the probe's terminal was the sandbox's own.
 */
static void terminal_verdict(struct selftest_result *r, int queued)
{
	char text[SELFTEST_TEXT_BYTES];

	if (queued > 0) {
		fmt(text, sizeof(text), "%d byte(s) typed into the caller's terminal", queued);
		result_amend(r, true, text);
	} else if (r->open && strncmp(r->text, "TIOCSTI accepted", 16) == 0 &&
		   strstr(r->text, "TIOCLINUX accepted") == NULL) {
		memcpy(text, r->text, sizeof(text));
		fmt(r->text, sizeof(r->text),
		    "%s, which reached only the sandbox's own terminal; nothing reached the "
		    "caller's",
		    text);
		r->open = false;
	} else if (!r->open) {
		result_amend(r, false, "nothing reached the caller's terminal");
	}
}

/* Connections queued on listener <fd>: each one an agent got through to the host. */
static uint32_t listener_drain(int fd)
{
	uint32_t n = 0;

	AN_ASSERT(fd >= 0);
	for (uint32_t i = 0; i < 1024; i++) {
		int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (c >= 0)
			close(c);
		if (c < 0 && errno != ECONNABORTED) /* aborted: it got through, then reset */
			break;
		n++;
	}
	return n;
}

static void host_checks(struct selftest *s)
{
	char path[SELFTEST_PATH_BYTES + 64], text[SELFTEST_TEXT_BYTES];
	struct stat st;
	uint32_t appeared = 0;
	const char *first = NULL;

	if (ioctl(s->pty_slave, FIONREAD, &s->tty_queued) == -1)
		s->tty_queued = 0;
	for (uint32_t i = 0; i < s->tcp_n; i++)
		s->accepted += listener_drain(s->tcp[i].fd);
	for (uint32_t i = 0; i < s->dirs_n; i++) {
		if (fmt(path, sizeof(path), "%s/%s.probe", s->dirs[i].path, s->tag) != 0 ||
		    lstat(path, &st) != 0)
			continue;
		s->dirs[i].appeared = true;
		if (appeared++ == 0)
			first = s->dirs[i].path;
	}
	struct selftest_result *r = result_find(s, "terminal");
	if (r != NULL)
		terminal_verdict(r, s->tty_queued);
	r = result_find(s, "tcp-host");
	if (r != NULL && s->accepted > 0) {
		fmt(text, sizeof(text), "the host's listeners took %u connection(s)", s->accepted);
		result_amend(r, true, text);
	}
	r = result_find(s, "shared-dirs");
	if (r != NULL && appeared > 0) {
		fmt(text, sizeof(text), "the probe's file appeared on the host in %s%s", first,
		    appeared > 1 ? " and more" : "");
		result_amend(r, true, text);
	} else if (r != NULL && !r->open) {
		result_amend(r, false, "none appeared on the host");
	}
}

/*
 * The memory probe of an unprivileged run on a host that delegates no cgroup to the caller:
 * nothing can limit the sandbox's memory there, and `agentsnet run` said so on stderr. That
 * is a resource limit missing, not a way out of the sandbox, so it is reported as
 * "not limited" (with how to get one) and does not fail the selftest; a memory probe that
 * got through where `run` claimed a cgroup stays OPEN.
 */
static void memory_verdict(struct selftest *s)
{
	struct selftest_result *r = result_find(s, "memory");

	if (r == NULL || !r->open || strstr(s->err, "its memory is not limited") == NULL)
		return;
	r->open = false;
	r->unlimited = true;
	result_amend(r, false,
		     "no cgroup is delegated to this user (agentsnet run said so): run as root, "
		     "or delegate a cgroup v2 subtree");
}

static int report(const struct selftest *s)
{
	int width = 0;
	uint32_t open = 0, unlimited = 0;

	for (uint32_t i = 0; i < s->results_n; i++) {
		int len = (int)strlen(s->results[i].name);
		width = len > width ? len : width;
	}
	for (uint32_t i = 0; i < s->results_n; i++) {
		const struct selftest_result *r = &s->results[i];
		printf("%-*s %s: %s\n", width, r->name,
		       r->open ? "OPEN" : (r->unlimited ? "not-limited" : "closed"), r->text);
		open += r->open ? 1 : 0;
		unlimited += r->unlimited ? 1 : 0;
	}
	printf("selftest: %u closed, %u OPEN", s->results_n - open - unlimited, open);
	if (unlimited > 0)
		printf(", %u not limited", unlimited);
	printf("\n");
	if (fflush(stdout) != 0)
		return SELFTEST_EXIT_FAILED;
	return open > 0 ? SELFTEST_EXIT_OPEN : 0;
}

/* What `agentsnet run` printed, and how it ended: always when it failed, else with -v. */
static void run_explain(const struct selftest *s, bool failed)
{
	if (!failed && !s->verbose)
		return;
	if (s->err_len > 0)
		fprintf(stderr, "selftest: agentsnet run said:\n%s%s", s->err,
			s->err[s->err_len - 1] == '\n' ? "" : "\n");
	if (WIFEXITED(s->wstatus))
		fprintf(stderr, "selftest: agentsnet run exited %d%s\n", WEXITSTATUS(s->wstatus),
			s->timed_out ? " (stopped: out of time)" : "");
	else if (WIFSIGNALED(s->wstatus))
		fprintf(stderr, "selftest: agentsnet run was killed by signal %d%s\n",
			WTERMSIG(s->wstatus), s->timed_out ? " (stopped: out of time)" : "");
	verbose(s,
		"host side: %d byte(s) queued on the caller's terminal, %zu shown on it, %u "
		"connection(s) on the listeners",
		s->tty_queued, s->tty_out_bytes, s->accepted);
}

/* ---- The command ---- */

static const char selftest_usage[] =
    "usage: agentsnet selftest [--socket-dir DIR] [--bridge PATH] [--probe PATH] [--user USER] "
    "[-v]\n";

static int selftest_parse(int argc, char **argv, struct selftest *s)
{
	static const struct option longs[] = {
		{ "socket-dir", required_argument, NULL, 's' },
		{ "bridge", required_argument, NULL, 'b' },
		{ "probe", required_argument, NULL, 'x' },
		{ "user", required_argument, NULL, 'U' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	AN_ASSERT(argc >= 1);
	AN_ASSERT(strcmp(argv[0], "selftest") == 0);
	optind = 0;
	while ((opt = getopt_long(argc, argv, "v", longs, NULL)) != -1) {
		if (opt == 's')
			s->socket_dir_arg = optarg;
		else if (opt == 'b')
			s->bridge = optarg;
		else if (opt == 'x')
			s->probe_arg = optarg;
		else if (opt == 'U')
			s->user = optarg;
		else if (opt == 'v')
			s->verbose = true;
		else if (opt == 'h')
			return fputs(selftest_usage, stdout) >= 0 ? 0 : 1;
		else
			return fprintf(stderr, "agentsnet: selftest: unknown option\n%s",
				       selftest_usage),
			       CTL_EXIT_USAGE;
	}
	if (optind != argc)
		return fprintf(stderr, "agentsnet: selftest takes no arguments\n%s",
			       selftest_usage),
		       CTL_EXIT_USAGE;
	return -1;
}

/* This binary, the probe (default: next to it), the socket directory and its daemon. */
static int selftest_resolve(struct selftest *s, char *why, size_t cap)
{
	char cand[PATH_MAX], dir[PATH_MAX];
	struct ctl_reply r;

	ssize_t n = readlink("/proc/self/exe", s->exe, sizeof(s->exe) - 1);
	if (n <= 0)
		return fail(why, cap, "/proc/self/exe: %s", strerror(errno));
	s->exe[n] = '\0';
	memcpy(dir, s->exe, (size_t)n + 1);
	if (s->probe_arg == NULL &&
	    fmt(cand, sizeof(cand), "%s/%s", dirname(dir), SELFTEST_PROBE_NAME) != 0)
		return fail(why, cap, "%s: path too long", s->exe);
	const char *probe = s->probe_arg != NULL ? s->probe_arg : cand;
	if (realpath(probe, s->probe) == NULL || access(s->probe, X_OK) == -1)
		return fail(why, cap, "%s: %s (build it with `make build/rel/%s`, or pass --probe)",
			    probe, strerror(errno), SELFTEST_PROBE_NAME);
	const char *env = getenv(SELFTEST_SOCKET_DIR_ENV);
	const char *sd = s->socket_dir_arg != NULL       ? s->socket_dir_arg
			 : env != NULL && env[0] != '\0' ? env
							 : SELFTEST_SOCKET_DIR;
	fmt(s->control, sizeof(s->control), "%s/%s", sd, CTL_SOCKET_NAME);
	if (realpath(sd, s->socket_dir) == NULL)
		return fail(why, cap, "agentsnetd is not running (no control socket at %s)",
			    s->control);
	if (fmt(s->control, sizeof(s->control), "%s/%s", s->socket_dir, CTL_SOCKET_NAME) != 0)
		return fail(why, cap, "%s: path too long", s->socket_dir);
	const char *ping[] = { "ping" };
	int ret = control_call(s, 1, ping, &r, why, cap);
	ctl_reply_free(&r);
	return ret;
}

static void selftest_init(struct selftest *s)
{
	memset(s, 0, sizeof(*s));
	s->abstract_fd = -1;
	s->unlisted_pid = -1;
	s->shm_id = -1;
	s->pty_master = -1;
	s->pty_slave = -1;
	fmt(s->tag, sizeof(s->tag), "%s-%d", SELFTEST_TAG, (int)getpid());
	fmt(s->probe_tag, sizeof(s->probe_tag), "%s.probe", s->tag);
	fmt(s->id, sizeof(s->id), "selftest-%d", (int)getpid());
	fmt(s->other_id, sizeof(s->other_id), "selftest-%d-other", (int)getpid());
	AN_ASSERT(ctl_id_valid(s->id));
	AN_ASSERT(ctl_id_valid(s->other_id));
}

int selftest_main(int argc, char **argv)
{
	static struct selftest s;
	struct sigaction sa = { .sa_handler = on_stop };
	char why[PATH_MAX + 256] = "";

	selftest_init(&s);
	int rc = selftest_parse(argc, argv, &s);
	if (rc >= 0)
		return rc;
	if (selftest_resolve(&s, why, sizeof(why)) != 0) {
		fprintf(stderr, "agentsnet: %s\n", why);
		return SELFTEST_EXIT_FAILED;
	}
	/* No SA_RESTART: the watch loop's poll returns, and every fixture is removed. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	int ret = fixtures_open(&s, why, sizeof(why));
	if (ret == 0)
		ret = sandbox_run(&s, why, sizeof(why));
	if (ret == 0) {
		results_parse(&s);
		host_checks(&s);
		memory_verdict(&s);
	}
	fixtures_close(&s);
	if (ret == 0 && selftest_stop != 0)
		ret = fail(why, sizeof(why), "interrupted by signal %d", (int)selftest_stop);
	/* Nothing came back: `run` could not start the sandbox, and says why. */
	if (ret == 0 && s.out_len == 0)
		ret = fail(why, sizeof(why), "the probe reported nothing (see above)");
	if (ret == 0 || s.exited)
		run_explain(&s, ret != 0);
	if (ret != 0) {
		fprintf(stderr, "agentsnet selftest: %s\n", why);
		return SELFTEST_EXIT_FAILED;
	}
	return report(&s);
}
