/*
 * agentsnet-probe: the agent of `agentsnet selftest` (tools/agentsnet/selftest.c), run
 * inside a real `agentsnet run` sandbox at SANDBOX_PROBE_PATH. Every probe is
 * a real attempt that would succeed with its defence off, never a read of the
 * sandbox's configuration; the host's side of each (listeners, sockets,
 * markers, IPC objects, a key, a second sandbox) is named on the command line
 * (the table `opts`). One line per probe, "<probe> closed: <how>" or "<probe>
 * OPEN: <what got through>"; exit 0 when all are closed, else 1. Closed means:
 *   dns, tcp-host   no DNS answer in 1 s from --dns or 127.0.0.53; no connect to --tcp
 *   vsock, sockets  socket() refused for AF_VSOCK (x32 ABI too), every family but unix,
 *                   inet, inet6, raw IP, and inet protocols but TCP, UDP and ping
 *   io-uring        io_uring_setup refused, plain and SQPOLL
 *   unix-abstract, unix-path, other-sandbox, control-socket, unlisted-socket: connect
 *                   fails (unlisted-socket: --unlisted, a host socket bound in a network
 *                   namespace of its own outside every directory the sandbox shows)
 *   host-sockets    no socket file the agent can list accepts a connection (stream, else
 *                   datagram or seqpacket; 200 ms), the sandbox's own egress and ingress
 *                   aside: a walk of /, breadth first, no symlink followed, every mount but
 *                   the kernel's and remote ones, /proc, /sys, /dev skipped, within 100000
 *                   directories and 20 s; a walk cut short is OPEN ("no verdict": it
 *                   cannot vouch for what it did not see); up to 5 paths named when OPEN
 *   terminal        TIOCSTI refused on 0, 1, 2, /dev/tty and TIOCLINUX there and on
 *                   /dev/tty0 (an accepted TIOCSTI says OPEN; selftest decides whose)
 *   ptrace-bridge   PTRACE_SEIZE/ATTACH, process_vm_readv, /proc/<bridge>/mem, environ
 *   fd-theft        pidfd_getfd of fds 0..63, kcmp, /proc/<bridge>/fd/N
 *   host-pids       kill(0) and /proc/<pid> of the host's --host-pid: no such process
 *   shared-dirs     host markers unseen, the SysV segment and POSIX queue not found, a
 *                   file made in each --ww (selftest checks the host does not see it)
 *   keyring         KEYCTL_SEARCH, request_key, DESCRIBE/READ of --key-serial, add_key
 *   userns          unshare, clone, clone3 with CLONE_NEWUSER refused
 *   mount           a tmpfs mount refused
 *   pids, memory    fork refused by --pids (+ slack); a child touching 2 x --memory
 *                   killed or refused before the limit (+ 64 MiB)
 * Each probe runs in a child under an alarm: a filter that kills (SIGSYS) ends
 * only that probe ("closed: killed by SIGSYS"); one that died otherwise or hung
 * is OPEN with "no verdict", never closed.
 *
 * Static, libc only, no allocation (lists point into argv, buffers are
 * static): it runs on whatever file system the sandbox shows, without the
 * host's loader or libraries. It is bound into a sandbox only for selftest
 * (sandbox_spec.probe), never for an ordinary agent, which has no use for an
 * escape kit. Run by hand without a sandbox (with --bridge-pid a process of
 * yours: PID 1 there is the host's init), most probes say OPEN: that is how
 * each is shown able to fail.
 *
 * Two files: this one holds the options, the verdicts and the helpers, the terminal,
 * bridge, shared-state, privilege and limit probes, and the run; the network probes (dns
 * to unlisted-socket above) and host-sockets' walk are in tools/probe/net.c. What the two
 * share is tools/probe/probe_int.h.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kcmp.h>
#include <linux/keyctl.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <linux/tiocl.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "tools/probe/probe_int.h"
#include "tools/unixaddr.h"

#define PROBE_ALARM_S   30u /* one probe, start to verdict */
#define PROBE_FDS       64  /* the bridge's descriptors tried */
#define PROBE_PIDS_MAX  4096u
#define PROBE_PIDS_OVER 64u /* forks tried past --pids */
/* Processes over --pids still counted closed: a limit that is a little late still holds. */
#define PROBE_PIDS_SLACK  4u
#define PROBE_MEMORY_MAX  (16ull << 30)
#define PROBE_MEMORY_STEP (16u << 20) /* progress is reported every this many bytes */
#define PROBE_MEMORY_OVER (64ull << 20)
#define PROBE_MEMORY_WAIT 20000 /* ms without progress: stalled at the limit */
#define PROBE_NAME_WIDTH  15
#define PROBE_TTY_BYTE    '#' /* a comment, should it ever reach a shell */

static_assert(PROBE_TEXT_BYTES + 64 < PIPE_BUF, "a line is one atomic write");

struct probe_args args = { .bridge_pid = { 1, true } };

enum opt_kind { OPT_STR, OPT_LIST, OPT_NUM };

/* The command line, one row per option (each takes one value; lists repeat). */
static const struct opt {
	const char *name;
	enum opt_kind kind;
	void *slot;
} opts[] = {
	{ "--bridge-pid", OPT_NUM, &args.bridge_pid }, /* the bridge: PID 1 in a sandbox */
	{ "--host-pid", OPT_NUM, &args.host_pid },     /* a process of the host */
	{ "--dns", OPT_LIST, &args.dns },              /* a nameserver address */
	{ "--tcp", OPT_LIST, &args.tcp },              /* ADDR:PORT, [ADDR6]:PORT */
	{ "--vsock", OPT_STR, &args.vsock },           /* CID:PORT to connect to */
	{ "--abstract", OPT_STR, &args.abstract },     /* abstract socket name, no '@' */
	{ "--unix", OPT_LIST, &args.unix_paths },      /* a pathname socket */
	{ "--other-sandbox", OPT_STR, &args.other },   /* another sandbox's egress socket */
	{ "--control", OPT_STR, &args.control },       /* the daemon's control socket */
	{ "--unlisted", OPT_STR, &args.unlisted },     /* a socket of another netns, no mask's */
	{ "--ww", OPT_LIST, &args.ww },                /* a world-writable directory */
	{ "--marker", OPT_LIST, &args.markers },       /* a host file that must not show */
	{ "--tag", OPT_STR, &args.tag },               /* name of the files made in --ww */
	{ "--shm-key", OPT_NUM, &args.shm_key },       /* the host's SysV segment */
	{ "--mq", OPT_STR, &args.mq },                 /* the host's POSIX queue, "/name" */
	{ "--key", OPT_STR, &args.key },               /* the host key's description */
	{ "--key-serial", OPT_NUM, &args.key_serial }, /* and its serial */
	{ "--pids", OPT_NUM, &args.pids },             /* the sandbox's pids limit */
	{ "--memory", OPT_NUM, &args.memory },         /* its memory limit, bytes */
	{ "--only", OPT_LIST, &args.only },            /* run only these probes */
	{ "--sockets-root", OPT_STR, &args.sockets_root }, /* host-sockets walks it, not / */
	{ "--sockets-dirs", OPT_NUM, &args.sockets_dirs }, /* and at most this many dirs */
};

/* ---- Verdicts ---- */

static void text_add(char *buf, size_t *len, const char *fmt, va_list ap)
{
	AN_ASSERT(*len < PROBE_TEXT_BYTES);
	if (*len + 3 >= PROBE_TEXT_BYTES)
		return;
	if (*len > 0) {
		memcpy(buf + *len, "; ", 3);
		*len += 2;
	}
	int n = vsnprintf(buf + *len, PROBE_TEXT_BYTES - *len, fmt, ap);
	if (n > 0)
		*len +=
		    (size_t)n < PROBE_TEXT_BYTES - *len ? (size_t)n : PROBE_TEXT_BYTES - 1 - *len;
	AN_ASSERT(*len < PROBE_TEXT_BYTES);
}

/* Something got through: the probe is OPEN, and this says what. */
__attribute__((format(printf, 2, 3))) void say_open(struct verdict *v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	text_add(v->open_text, &v->open_len, fmt, ap);
	va_end(ap);
	v->open = true;
}

/* An attempt that was stopped, and how. */
__attribute__((format(printf, 2, 3))) void say_closed(struct verdict *v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	text_add(v->closed_text, &v->closed_len, fmt, ap);
	va_end(ap);
}

/* "EPERM"; a negative <err> is a signal that killed the attempt: "killed by SIGSYS". */
const char *ename(int err)
{
	static char other[4][32];
	static unsigned int next;
	const char *s = err > 0 ? strerrorname_np(err) : err < 0 ? sigabbrev_np(-err) : "success";
	char *buf = other[next++ % 4];

	if (err < 0)
		snprintf(buf, sizeof(other[0]), "killed by SIG%s", s != NULL ? s : "?");
	else if (s == NULL)
		snprintf(buf, sizeof(other[0]), "errno %d", err);
	else
		return s;
	return buf;
}

/* <label> must outlive the tally (a literal, argv, a static buffer); NULL: counted only. */
void tally_add(struct tally *t, int err, const char *label)
{
	uint32_t i = 0;

	AN_ASSERT(err != 0);
	while (i < t->n && t->e[i].err != err)
		i++;
	if (i == PROBE_TALLY_ERRS)
		i = PROBE_TALLY_ERRS - 1; /* the last row takes what does not fit */
	else if (i == t->n)
		t->e[t->n++].err = err;
	if (label != NULL && t->e[i].count < PROBE_TALLY_LABELS)
		t->e[i].label[t->e[i].count] = label;
	t->e[i].count++;
	AN_ASSERT(t->n <= PROBE_TALLY_ERRS);
}

void tally_say(struct verdict *v, const char *what, const struct tally *t)
{
	char buf[PROBE_TEXT_BYTES];
	size_t len = 0;

	for (uint32_t i = 0; i < t->n && len < sizeof(buf); i++) {
		int n = snprintf(buf + len, sizeof(buf) - len, "%s%s", i > 0 ? "; " : "",
				 ename(t->e[i].err));
		uint32_t shown = 0;
		for (; n > 0 && shown < PROBE_TALLY_LABELS && t->e[i].label[shown] != NULL &&
		       len + (size_t)n < sizeof(buf);
		     shown++)
			n += snprintf(buf + len + (size_t)n, sizeof(buf) - len - (size_t)n, "%s%s",
				      shown == 0 ? " on " : ", ", t->e[i].label[shown]);
		if (n > 0 && len + (size_t)n < sizeof(buf) && t->e[i].count > shown)
			n += snprintf(buf + len + (size_t)n, sizeof(buf) - len - (size_t)n,
				      shown > 0 ? " and %u more" : " (x%u)", t->e[i].count - shown);
		if (n < 0)
			return;
		len += (size_t)n;
	}
	if (t->n > 0)
		say_closed(v, "%s%s%.*s", what, what[0] != '\0' ? ": " : "", (int)sizeof(buf), buf);
}

/* ---- Helpers ---- */

/* Parses "ADDR" (<port> given) or "ADDR:PORT" / "[ADDR6]:PORT" (<port> 0). */
int parse_inet(const char *s, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[INET6_ADDRSTRLEN];
	const char *end = s + strlen(s);

	memset(ss, 0, sizeof(*ss));
	if (port == 0) {
		const char *colon = strrchr(s, ':');
		unsigned long p = 0;
		if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) > 5)
			return -EINVAL;
		for (const char *c = colon + 1; *c != '\0'; c++) {
			if (*c < '0' || *c > '9')
				return -EINVAL;
			p = p * 10 + (unsigned long)(*c - '0');
		}
		if (p == 0 || p > 65535)
			return -EINVAL;
		port = (uint16_t)p;
		end = colon;
		if (s[0] == '[' && end > s + 1 && end[-1] == ']') {
			s++;
			end--;
		}
	}
	if ((size_t)(end - s) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, (size_t)(end - s));
	host[end - s] = '\0';
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		*len = sizeof(*sin);
	} else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		*len = sizeof(*sin6);
	} else {
		return -EINVAL;
	}
	return 0;
}

/* A non-blocking connect of <fd>, waiting <ms>: 0 or -errno (-ETIMEDOUT). */
int connect_wait(int fd, const struct sockaddr *sa, socklen_t len, int ms)
{
	int soerr = 0;
	socklen_t soerr_len = sizeof(soerr);

	AN_ASSERT(fd >= 0);
	if (connect(fd, sa, len) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int n = poll(&p, 1, ms);
	if (n == -1)
		return -errno;
	if (n == 0)
		return -ETIMEDOUT;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &soerr_len) == -1)
		return -errno;
	AN_ASSERT(soerr >= 0);
	return -soerr;
}

/* Connects to the Unix socket <path> (@ first: abstract): 0, the socket in <fd>; or -errno. */
int unix_connect(const char *path, int *fd)
{
	struct sockaddr_un sun;

	*fd = -1;
	int sa_len = unixaddr_fill(&sun, path);
	if (sa_len < 0)
		return sa_len;
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s == -1)
		return -errno;
	int ret = connect_wait(s, (struct sockaddr *)&sun, (socklen_t)sa_len, PROBE_WAIT_MS);
	if (ret == -EAGAIN)
		ret = 0; /* the backlog is full: the listener is there all the same */
	if (ret != 0) {
		close(s);
		return ret;
	}
	*fd = s;
	return 0;
}

/* Runs <fn> (0 or an errno) in a child: a filter that kills stops only it. */
struct outcome in_child(int (*fn)(void))
{
	int status;

	pid_t pid = fork();
	if (pid == -1)
		return (struct outcome){ errno };
	if (pid == 0) {
		int err = fn();
		_exit(err > 0 && err < 255 ? err : err == 0 ? 0 : 255);
	}
	while (waitpid(pid, &status, 0) == -1)
		if (errno != EINTR)
			return (struct outcome){ errno };
	if (WIFSIGNALED(status))
		return (struct outcome){ -WTERMSIG(status) };
	AN_ASSERT(WIFEXITED(status));
	return (struct outcome){ WEXITSTATUS(status) };
}

static const char *fd_kind(int fd)
{
	struct stat st;

	if (fstat(fd, &st) == -1)
		return "a descriptor";
	return S_ISSOCK(st.st_mode)   ? "a socket"
	       : S_ISFIFO(st.st_mode) ? "a pipe"
	       : S_ISCHR(st.st_mode)  ? "a character device"
	       : S_ISREG(st.st_mode)  ? "a file"
	       : S_ISDIR(st.st_mode)  ? "a directory"
				      : "a descriptor";
}

/* ---- The terminal ---- */

static void probe_terminal(struct verdict *v)
{
	static const char *const labels[] = { "0", "1", "2", "/dev/tty", "/dev/tty0" };
	int fds[] = { 0, 1, 2, -1, -1 };
	struct tally sti = { 0 }, lin = { 0 };
	char sti_ok[64] = "", lin_ok[64] = "";

	fds[3] = open("/dev/tty", O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fds[3] == -1)
		tally_add(&sti, errno, "open /dev/tty");
	/* The virtual console, where TIOCLINUX means something (a sandbox shows none). */
	fds[4] = open("/dev/tty0", O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fds[4] == -1)
		tally_add(&lin, errno, "open /dev/tty0");
	for (size_t i = 0; i < AN_ARRAY_LEN(fds); i++) {
		if (fds[i] == -1)
			continue;
		char byte = PROBE_TTY_BYTE;
		if (i < 4 && ioctl(fds[i], TIOCSTI, &byte) == 0)
			snprintf(sti_ok + strlen(sti_ok), sizeof(sti_ok) - strlen(sti_ok), "%s%s",
				 sti_ok[0] != '\0' ? ", " : "", labels[i]);
		else if (i < 4)
			tally_add(&sti, errno, labels[i]);
		/* A harmless subcode: reads the shift state; the filter refuses them all. */
		char sub = TIOCL_GETSHIFTSTATE;
		if (ioctl(fds[i], TIOCLINUX, &sub) == 0)
			snprintf(lin_ok + strlen(lin_ok), sizeof(lin_ok) - strlen(lin_ok), "%s%s",
				 lin_ok[0] != '\0' ? ", " : "", labels[i]);
		else
			tally_add(&lin, errno, labels[i]);
	}
	for (size_t i = 3; i < AN_ARRAY_LEN(fds); i++)
		if (fds[i] != -1)
			close(fds[i]);
	/* The selftest reads "TIOCSTI accepted" first: only the host knows whose terminal. */
	if (sti_ok[0] != '\0')
		say_open(v, "TIOCSTI accepted on %s", sti_ok);
	if (lin_ok[0] != '\0')
		say_open(v, "TIOCLINUX accepted on %s", lin_ok);
	tally_say(v, "TIOCSTI", &sti);
	tally_say(v, "TIOCLINUX", &lin);
}

/* ---- The bridge ---- */

/* Lets a tracee we attached to (or seized) go again. */
static void trace_release(pid_t pid, bool seized)
{
	int status;

	if (seized)
		ptrace(PTRACE_INTERRUPT, pid, 0, 0);
	for (int i = 0; i < 200; i++) {
		if (waitpid(pid, &status, __WALL | WNOHANG) > 0)
			break;
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	ptrace(PTRACE_DETACH, pid, 0, 0);
}

/* An address mapped in <pid> (its first mapping), else one of ours (static: likely the same). */
static uintptr_t mapped_in(pid_t pid)
{
	static const char here[16] = "agentsnet-probe";
	char path[64], line[128];
	uintptr_t addr = (uintptr_t)here;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1)
		return addr;
	ssize_t n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n > 0) {
		line[n] = '\0';
		unsigned long long a = 0;
		if (sscanf(line, "%llx-", &a) == 1)
			addr = (uintptr_t)a;
	}
	return addr;
}

static void vm_read(struct verdict *v, struct tally *t, pid_t pid)
{
	char buf[16];
	uintptr_t addr = mapped_in(pid);
	struct iovec local = { buf, sizeof(buf) }, remote = { (void *)addr, sizeof(buf) };

	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	if (n >= 0)
		say_open(v, "process_vm_readv read %zd bytes of PID %d", n, (int)pid);
	else if (errno == EFAULT)
		say_open(v, "process_vm_readv of PID %d permitted (EFAULT at %#lx)", (int)pid,
			 (unsigned long)addr);
	else
		tally_add(t, errno, "process_vm_readv");
}

static void proc_read(struct verdict *v, struct tally *t, pid_t pid, const char *file, char *path,
		      size_t cap)
{
	char buf[256];

	snprintf(path, cap, "/proc/%d/%s", (int)pid, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1) {
		tally_add(t, errno, path);
		return;
	}
	ssize_t n = strcmp(file, "mem") == 0 ? pread(fd, buf, sizeof(buf), (off_t)mapped_in(pid))
					     : read(fd, buf, sizeof(buf));
	if (n >= 0)
		say_open(v, "opened %s (read %zd bytes)", path, n);
	else
		say_open(v, "opened %s (read: %s)", path, ename(errno));
	close(fd);
}

static void probe_ptrace_bridge(struct verdict *v)
{
	static char mem[64], environ_path[64];
	pid_t pid = (pid_t)args.bridge_pid.v;
	struct tally t = { 0 };

	if (ptrace(PTRACE_SEIZE, pid, 0, 0) == 0) {
		say_open(v, "PTRACE_SEIZE of PID %d", (int)pid);
		trace_release(pid, true);
	} else {
		tally_add(&t, errno, "PTRACE_SEIZE");
	}
	if (ptrace(PTRACE_ATTACH, pid, 0, 0) == 0) {
		say_open(v, "PTRACE_ATTACH of PID %d", (int)pid);
		trace_release(pid, false);
	} else {
		tally_add(&t, errno, "PTRACE_ATTACH");
	}
	vm_read(v, &t, pid);
	proc_read(v, &t, pid, "mem", mem, sizeof(mem));
	proc_read(v, &t, pid, "environ", environ_path, sizeof(environ_path));
	tally_say(v, "", &t);
}

/* pidfd_getfd of the bridge's descriptors: EBADF (no such fd) means the access was granted. */
static void fd_getfd(struct verdict *v, struct tally *t, pid_t pid)
{
	int taken = 0, first = -1;
	const char *kind = "";

	long pidfd = syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		tally_add(t, errno, "pidfd_open");
		return;
	}
	int fd = 0;
	for (; fd < PROBE_FDS; fd++) {
		long got = syscall(SYS_pidfd_getfd, (int)pidfd, fd, 0);
		if (got >= 0 && taken++ == 0) {
			first = fd;
			kind = fd_kind((int)got);
		}
		if (got >= 0)
			close((int)got);
		else if (errno != EBADF)
			break;
	}
	if (fd < PROBE_FDS)
		tally_add(t, errno, "pidfd_getfd");
	if (taken > 0)
		say_open(v, "pidfd_getfd took %d of PID %d's descriptors (fd %d: %s)", taken,
			 (int)pid, first, kind);
	else if (fd == PROBE_FDS)
		say_open(v, "pidfd_getfd of PID %d permitted (no descriptor below %d)", (int)pid,
			 PROBE_FDS);
	close((int)pidfd);
}

static void probe_fd_theft(struct verdict *v)
{
	static char fd_dir[64];
	pid_t pid = (pid_t)args.bridge_pid.v;
	struct tally t = { 0 };

	fd_getfd(v, &t, pid);
	long same = syscall(SYS_kcmp, getpid(), pid, KCMP_FILE, 0, 0);
	if (same >= 0)
		say_open(v, "kcmp of PID %d's descriptors permitted", (int)pid);
	else
		tally_add(&t, errno, "kcmp");
	int opened = 0, n = 0;
	snprintf(fd_dir, sizeof(fd_dir), "/proc/%d/fd", (int)pid);
	for (; n < PROBE_FDS; n++) {
		char path[96];
		snprintf(path, sizeof(path), "%s/%d", fd_dir, n);
		/* O_PATH: reaching the file is the theft; no device is opened for real. */
		int fd = open(path, O_PATH | O_CLOEXEC);
		if (fd >= 0) {
			opened++;
			close(fd);
		} else if (errno != ENOENT) {
			break;
		}
	}
	if (n < PROBE_FDS)
		tally_add(&t, errno, fd_dir);
	if (opened > 0)
		say_open(v, "opened %d of %s", opened, fd_dir);
	tally_say(v, "", &t);
}

static void probe_host_pids(struct verdict *v)
{
	char path[64];
	struct stat st;

	if (!args.host_pid.set) {
		say_closed(v, "no host PID given");
		return;
	}
	pid_t pid = (pid_t)args.host_pid.v;
	if (kill(pid, 0) == 0 || errno == EPERM)
		say_open(v, "kill(%d, 0) found the host's process", (int)pid);
	else
		say_closed(v, "kill(%d, 0): %s", (int)pid, ename(errno));
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) == 0)
		say_open(v, "%s exists", path);
	else
		say_closed(v, "%s: %s", path, ename(errno));
}

/* ---- Shared host state ---- */

static void make_files(struct verdict *v)
{
	struct tally t = { 0 };
	uint32_t made = 0;

	for (uint32_t i = 0; i < args.ww.n && args.tag != NULL; i++) {
		char path[4096];
		int n = snprintf(path, sizeof(path), "%s/%s", args.ww.v[i], args.tag);
		if (n < 0 || (size_t)n >= sizeof(path)) {
			tally_add(&t, ENAMETOOLONG, args.ww.v[i]);
			continue;
		}
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd >= 0 || errno == EEXIST)
			made++;
		else
			tally_add(&t, errno, args.ww.n <= PROBE_TALLY_LABELS ? args.ww.v[i] : NULL);
		if (fd >= 0)
			close(fd);
	}
	if (made > 0)
		say_closed(v, "made a file in %u of %u directories (the host looks for them)", made,
			   args.ww.n);
	tally_say(v, "no file made", &t);
}

static void probe_shared_dirs(struct verdict *v)
{
	struct tally t = { 0 };
	struct stat st;

	/* Named when few; counted when the walk found many (the OPEN ones are always named). */
	bool named = args.markers.n <= PROBE_TALLY_LABELS;
	for (uint32_t i = 0; i < args.markers.n; i++)
		if (stat(args.markers.v[i], &st) == 0)
			say_open(v, "the host's %s is visible", args.markers.v[i]);
		else
			tally_add(&t, errno, named ? args.markers.v[i] : NULL);
	tally_say(v, "host markers", &t);
	make_files(v);
	if (args.shm_key.set) {
		int id = shmget((key_t)(int32_t)(uint32_t)args.shm_key.v, 0, 0);
		if (id >= 0 || errno == EACCES)
			say_open(v, "the host's SysV segment (key %#llx) is reachable%s",
				 (unsigned long long)args.shm_key.v, id >= 0 ? "" : " (EACCES)");
		else
			say_closed(v, "shmget: %s", ename(errno));
	}
	if (args.mq != NULL) {
		mqd_t q = mq_open(args.mq, O_RDONLY | O_NONBLOCK);
		if (q != (mqd_t)-1 || errno == EACCES)
			say_open(v, "the host's POSIX queue %s is reachable%s", args.mq,
				 q != (mqd_t)-1 ? "" : " (EACCES)");
		else
			say_closed(v, "mq_open: %s", ename(errno));
		if (q != (mqd_t)-1)
			mq_close(q);
	}
}

static void probe_keyring(struct verdict *v)
{
	static const char type[] = "user";
	char buf[256];
	struct tally t = { 0 };

	if (args.key != NULL) {
		long id =
		    syscall(SYS_keyctl, KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING, type, args.key, 0);
		if (id >= 0)
			say_open(v, "KEYCTL_SEARCH found the host's key \"%s\"", args.key);
		else
			tally_add(&t, errno, "KEYCTL_SEARCH");
		id = syscall(SYS_request_key, type, args.key, NULL, 0);
		if (id >= 0)
			say_open(v, "request_key found the host's key");
		else
			tally_add(&t, errno, "request_key");
	}
	if (args.key_serial.set) {
		long serial = (long)args.key_serial.v;
		if (syscall(SYS_keyctl, KEYCTL_DESCRIBE, serial, buf, sizeof(buf)) >= 0)
			say_open(v, "KEYCTL_DESCRIBE of the host key's serial");
		else
			tally_add(&t, errno, "KEYCTL_DESCRIBE");
		long n = syscall(SYS_keyctl, KEYCTL_READ, serial, buf, sizeof(buf));
		if (n >= 0)
			say_open(v, "KEYCTL_READ of the host key's serial (%ld bytes)", n);
		else
			tally_add(&t, errno, "KEYCTL_READ");
	}
	long id = syscall(SYS_add_key, type, "agentsnet-probe", "x", 1, KEY_SPEC_SESSION_KEYRING);
	if (id >= 0) {
		say_open(v, "add_key accepted");
		syscall(SYS_keyctl, KEYCTL_INVALIDATE, id);
	} else {
		tally_add(&t, errno, "add_key");
	}
	tally_say(v, "", &t);
}

/* ---- Privilege ---- */

static int userns_unshare(void)
{
	return unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
}

/* The child of a raw clone shares nothing it could corrupt: it only exits. */
static int reap_clone(long pid)
{
	int status;

	if (pid == 0)
		syscall(SYS_exit_group, 0);
	if (pid < 0)
		return errno;
	waitpid((pid_t)pid, &status, __WALL);
	return 0;
}

static int userns_clone(void)
{
	return reap_clone(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0));
}

static int userns_clone3(void)
{
	struct clone_args ca = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };

	return reap_clone(syscall(SYS_clone3, &ca, sizeof(ca)));
}

static void probe_userns(struct verdict *v)
{
	static const struct {
		int (*fn)(void);
		const char *name;
	} tries[] = { { userns_unshare, "unshare" },
		      { userns_clone, "clone" },
		      { userns_clone3, "clone3" } };
	struct tally t = { 0 };

	for (size_t i = 0; i < AN_ARRAY_LEN(tries); i++) {
		struct outcome o = in_child(tries[i].fn);
		if (o.err == 0)
			say_open(v, "%s(CLONE_NEWUSER) made a user namespace", tries[i].name);
		else
			tally_add(&t, o.err, tries[i].name);
	}
	tally_say(v, "", &t);
}

static void probe_mount(struct verdict *v)
{
	static const char *const bases[] = { "/tmp", "/dev/shm", "/var/tmp" };
	char dir[64];
	int err = 0;

	for (size_t i = 0; i < AN_ARRAY_LEN(bases); i++) {
		snprintf(dir, sizeof(dir), "%s/agentsnet-probe-%d.mnt", bases[i], (int)getpid());
		err = mkdir(dir, 0700) == 0 ? 0 : errno;
		if (err == 0)
			break;
	}
	if (err != 0) {
		say_closed(v, "no directory to mount on (%s)", ename(err));
		return;
	}
	if (mount("agentsnet-probe", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k") ==
	    0) {
		say_open(v, "mounted a tmpfs on %s", dir);
		umount2(dir, MNT_DETACH);
	} else {
		say_closed(v, "mount(tmpfs): %s", ename(errno));
	}
	rmdir(dir);
}

/* ---- Limits ---- */

static void probe_pids(struct verdict *v)
{
	static pid_t kids[PROBE_PIDS_MAX + PROBE_PIDS_OVER];
	uint32_t n = 0;
	int err = 0;

	if (!args.pids.set || args.pids.v == 0 || args.pids.v > PROBE_PIDS_MAX) {
		say_closed(v, "not tried (--pids 1..%u not given)", PROBE_PIDS_MAX);
		return;
	}
	uint32_t limit = (uint32_t)args.pids.v;
	pid_t self = getpid();
	for (; n < limit + PROBE_PIDS_OVER; n++) {
		pid_t pid = fork();
		if (pid == -1) {
			err = errno;
			break;
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != self)
				_exit(0);
			for (;;)
				pause();
		}
		kids[n] = pid;
	}
	for (uint32_t i = 0; i < n; i++)
		kill(kids[i], SIGKILL);
	for (uint32_t i = 0; i < n; i++)
		waitpid(kids[i], NULL, 0);
	/* The forks, this probe, the probe's main process and the bridge. */
	uint32_t procs = n + 3;
	if (err == 0)
		say_open(v, "%u processes ran, past the limit of %u", procs, limit);
	else if (procs <= limit + PROBE_PIDS_SLACK)
		say_closed(v, "fork refused (%s) at %u processes, limit %u", ename(err), procs,
			   limit);
	else
		say_open(v, "fork refused (%s) only at %u processes, limit %u", ename(err), procs,
			 limit);
}

/* In a child: touches <bytes>, writing the MiB done to <fd> every PROBE_MEMORY_STEP. */
static _Noreturn void memory_touch(int fd, uint64_t bytes)
{
	char *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		int32_t e = -errno;
		(void)!write(fd, &e, sizeof(e));
		_exit(2);
	}
	for (uint64_t off = 0; off < bytes; off += 4096) {
		m[off] = 1;
		if ((off + 4096) % PROBE_MEMORY_STEP == 0) {
			int32_t mib = (int32_t)((off + 4096) >> 20);
			(void)!write(fd, &mib, sizeof(mib));
		}
	}
	_exit(0);
}

/* Reads the child's progress until it ends or stalls: the last MiB count, or -errno. */
static int32_t memory_watch(int fd, pid_t pid, bool *stalled)
{
	int32_t last = 0, got;

	*stalled = false;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, PROBE_MEMORY_WAIT);
		if (n == 0) {
			*stalled = true;
			kill(pid, SIGKILL);
			return last;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 || read(fd, &got, sizeof(got)) != (ssize_t)sizeof(got))
			return last;
		last = got;
	}
}

static void probe_memory(struct verdict *v)
{
	int p[2], status = 0;
	bool stalled = false;

	if (!args.memory.set || args.memory.v == 0 || args.memory.v > PROBE_MEMORY_MAX / 2) {
		say_closed(v, "not tried (--memory not given)");
		return;
	}
	uint64_t limit_mib = args.memory.v >> 20, bytes = 2 * args.memory.v + PROBE_MEMORY_OVER;
	if (pipe2(p, O_CLOEXEC) == -1) {
		say_open(v, "no verdict: pipe2: %s", ename(errno));
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		memory_touch(p[1], bytes);
	}
	close(p[1]);
	int32_t mib = pid == -1 ? -errno : memory_watch(p[0], pid, &stalled);
	close(p[0]);
	if (pid != -1)
		waitpid(pid, &status, 0);
	if (mib < 0)
		say_closed(v, "mmap of %llu MiB: %s", (unsigned long long)(bytes >> 20),
			   ename(-mib));
	else if (pid != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		say_open(v, "touched %d MiB, limit %llu MiB", mib, (unsigned long long)limit_mib);
	else if ((uint64_t)mib > limit_mib + (PROBE_MEMORY_OVER >> 20))
		say_open(v, "stopped only at %d MiB, limit %llu MiB", mib,
			 (unsigned long long)limit_mib);
	else
		say_closed(v, "%s at %d MiB, limit %llu MiB",
			   stalled               ? "stalled"
			   : WIFSIGNALED(status) ? ename(-WTERMSIG(status))
						 : "failed",
			   mib, (unsigned long long)limit_mib);
}

/* ---- The run ---- */

/*
 * The probes, in the order they run (memory last: an OOM kill that misses may
 * take the sandbox with it). Adding one: also tools/agentsnet/selftest.c's
 * selftest_probes, and docs/sandbox.md's table.
 */
static const struct probe {
	const char *name;
	void (*run)(struct verdict *v);
} probes[] = {
	{ "dns", probe_dns },
	{ "tcp-host", probe_tcp_host },
	{ "vsock", probe_vsock },
	{ "sockets", probe_sockets },
	{ "io-uring", probe_io_uring },
	{ "unix-abstract", probe_unix_abstract },
	{ "unix-path", probe_unix_path },
	{ "other-sandbox", probe_other_sandbox },
	{ "control-socket", probe_control_socket },
	{ "host-sockets", probe_host_sockets },
	{ "terminal", probe_terminal },
	{ "ptrace-bridge", probe_ptrace_bridge },
	{ "fd-theft", probe_fd_theft },
	{ "host-pids", probe_host_pids },
	{ "shared-dirs", probe_shared_dirs },
	{ "keyring", probe_keyring },
	{ "userns", probe_userns },
	{ "mount", probe_mount },
	{ "pids", probe_pids },
	{ "memory", probe_memory },
	{ "unlisted-socket", probe_unlisted_socket },
};

/* One line, one write(): lines of successive probes never interleave. */
static void emit(const char *name, bool open, const char *text)
{
	char line[PROBE_TEXT_BYTES + 64];

	AN_ASSERT(strlen(name) <= PROBE_NAME_WIDTH);
	int n = snprintf(line, sizeof(line), "%-*s %s: %s\n", PROBE_NAME_WIDTH, name,
			 open ? "OPEN" : "closed", text[0] != '\0' ? text : "nothing got through");
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	for (ssize_t off = 0; off < n;) {
		ssize_t w = write(1, line + off, (size_t)(n - off));
		if (w == -1 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		off += w;
	}
}

/* Runs <p> in a child of its own; returns whether it is OPEN. */
static bool probe_run(const struct probe *p)
{
	static struct verdict v;
	char text[64];
	int status;

	pid_t pid = fork();
	if (pid == 0) {
		alarm(PROBE_ALARM_S);
		p->run(&v);
		emit(p->name, v.open, v.open ? v.open_text : v.closed_text);
		_exit(v.open ? 1 : 0);
	}
	if (pid == -1) {
		snprintf(text, sizeof(text), "no verdict: fork: %s", ename(errno));
		emit(p->name, true, text);
		return true;
	}
	while (waitpid(pid, &status, 0) == -1)
		AN_ASSERT(errno == EINTR);
	if (WIFEXITED(status) && WEXITSTATUS(status) <= 1)
		return WEXITSTATUS(status) == 1;
	bool sys = WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
		snprintf(text, sizeof(text), "no verdict: no answer in %u s", PROBE_ALARM_S);
	else if (WIFSIGNALED(status))
		snprintf(text, sizeof(text), "%s%s", sys ? "" : "no verdict: the probe was ",
			 ename(-WTERMSIG(status)));
	else
		snprintf(text, sizeof(text), "no verdict: the probe exited %d",
			 WEXITSTATUS(status));
	emit(p->name, !sys, text);
	return !sys;
}

static int parse_num(const char *s, struct num *out)
{
	uint64_t v = 0;

	if (*s == '\0' || strlen(s) > 19)
		return -EINVAL;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = (struct num){ v, true };
	return 0;
}

static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i += 2) {
		size_t k = 0;
		while (k < AN_ARRAY_LEN(opts) && strcmp(argv[i], opts[k].name) != 0)
			k++;
		if (k == AN_ARRAY_LEN(opts) || i + 1 >= argc) {
			fprintf(stderr, "agentsnet-probe: %s: unknown option or no value\n",
				argv[i]);
			return -EINVAL;
		}
		const char *val = argv[i + 1];
		struct list *l = opts[k].slot;
		if (opts[k].kind == OPT_STR) {
			*(const char **)opts[k].slot = val;
		} else if (opts[k].kind == OPT_NUM && parse_num(val, opts[k].slot) != 0) {
			fprintf(stderr, "agentsnet-probe: %s %s: not a number\n", argv[i], val);
			return -EINVAL;
		} else if (opts[k].kind == OPT_LIST && l->n == PROBE_LIST_MAX) {
			fprintf(stderr, "agentsnet-probe: %s: more than %u\n", argv[i],
				PROBE_LIST_MAX);
			return -E2BIG;
		} else if (opts[k].kind == OPT_LIST) {
			l->v[l->n++] = val;
		}
	}
	return 0;
}

static bool wanted(const char *name)
{
	for (uint32_t i = 0; i < args.only.n; i++)
		if (strcmp(args.only.v[i], name) == 0)
			return true;
	return args.only.n == 0;
}

int main(int argc, char **argv)
{
	uint32_t open = 0;

	AN_ASSERT(argc >= 0);
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: agentsnet-probe [--OPTION VALUE]...: run by `agentsnet selftest` "
		       "inside a sandbox (tools/probe/main.c)\n");
		return 0;
	}
	if (parse_args(argc, argv) != 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < AN_ARRAY_LEN(probes); i++)
		if (wanted(probes[i].name))
			open += probe_run(&probes[i]) ? 1 : 0;
	/* _exit: nothing to flush, and LeakSanitizer's scan at exit needs ptrace, refused. */
	_exit(open > 0 ? 1 : 0);
}
