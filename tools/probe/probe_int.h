/*
 * What agentsnet-probe's two files share, and nothing else includes: tools/probe/main.c
 * (the options, the verdicts and their helpers, the terminal, bridge, shared-state,
 * privilege and limit probes, and the run) and tools/probe/net.c (the network probes
 * and the walk that tries every socket file). The probe is static and libc only, so
 * this header names libc's types and core/an.h's macros, nothing else of the project.
 */
#ifndef AN_TOOLS_PROBE_INT_H
#define AN_TOOLS_PROBE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PROBE_LIST_MAX     128u /* entries of one repeated option */
#define PROBE_TEXT_BYTES   1024u
#define PROBE_WAIT_MS      1000 /* a connect, a DNS answer */
#define PROBE_TALLY_ERRS   8
#define PROBE_TALLY_LABELS 4

struct list {
	const char *v[PROBE_LIST_MAX];
	uint32_t n;
};

struct num {
	uint64_t v;
	bool set;
};

/* The command line, as parsed (the table `opts` of tools/probe/main.c); lists point into argv. */
struct probe_args {
	struct num bridge_pid, host_pid, shm_key, key_serial, pids, memory, sockets_dirs;
	const char *vsock, *abstract, *other, *control, *unlisted, *tag, *mq, *key, *sockets_root;
	struct list dns, tcp, unix_paths, ww, markers, only;
};

/* Defined in tools/probe/main.c; set once by the options, read-only to the probes. */
extern struct probe_args args;

/* One probe's verdict: OPEN as soon as one say_open, and the text of each side. */
struct verdict {
	bool open;
	size_t open_len, closed_len;
	char open_text[PROBE_TEXT_BYTES];
	char closed_text[PROBE_TEXT_BYTES];
};

/* The outcomes of several attempts grouped by errno: "EPERM on a, b; ENOENT on c". */
struct tally {
	struct {
		int err;
		uint32_t count;
		const char *label[PROBE_TALLY_LABELS];
	} e[PROBE_TALLY_ERRS];
	uint32_t n;
};

struct outcome {
	int err; /* 0: the attempt succeeded; errno; or -signal that killed it */
};

/* ---- tools/probe/main.c ---- */

/* Something got through: the probe is OPEN, and this says what. */
__attribute__((format(printf, 2, 3))) void say_open(struct verdict *v, const char *fmt, ...);
/* An attempt that was stopped, and how. */
__attribute__((format(printf, 2, 3))) void say_closed(struct verdict *v, const char *fmt, ...);
/* "EPERM"; a negative <err> is a signal that killed the attempt: "killed by SIGSYS". */
const char *ename(int err);
/* Counts <err> (not 0) under <label>, which must outlive the tally; NULL: counted only. */
void tally_add(struct tally *t, int err, const char *label);
/* Says <t> as one closed text, "<what>: " first unless <what> is ""; nothing if empty. */
void tally_say(struct verdict *v, const char *what, const struct tally *t);
/* Parses "ADDR" (<port> given) or "ADDR:PORT" / "[ADDR6]:PORT" (<port> 0): 0 or -EINVAL. */
int parse_inet(const char *s, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);
/* A non-blocking connect of <fd>, waiting <ms>: 0 or -errno (-ETIMEDOUT). */
int connect_wait(int fd, const struct sockaddr *sa, socklen_t len, int ms);
/* Connects to the Unix socket <path> (@ first: abstract): 0, the socket in <fd>; or -errno. */
int unix_connect(const char *path, int *fd);
/* Runs <fn> (0 or an errno) in a child: a filter that kills stops only it. */
struct outcome in_child(int (*fn)(void));

/* ---- tools/probe/net.c: each probe adds its attempts to <v> ---- */

/* dns: no answer in PROBE_WAIT_MS from any --dns nor systemd-resolved's stub. */
void probe_dns(struct verdict *v);
/* tcp-host: no connect to any --tcp ADDR:PORT. */
void probe_tcp_host(struct verdict *v);
/* vsock: socket(AF_VSOCK) refused, the x32 ABI's too; else a connect to --vsock tried. */
void probe_vsock(struct verdict *v);
/* sockets: every family but unix, inet, inet6 refused, raw IP, inet protocols but TCP/UDP. */
void probe_sockets(struct verdict *v);
/* io-uring: io_uring_setup refused, plain and SQPOLL. */
void probe_io_uring(struct verdict *v);
/* unix-abstract, unix-path, other-sandbox, control-socket: a connect to each given fails. */
void probe_unix_abstract(struct verdict *v);
void probe_unix_path(struct verdict *v);
void probe_other_sandbox(struct verdict *v);
void probe_control_socket(struct verdict *v);
/* unlisted-socket: a connect to --unlisted fails; none given is no verdict (OPEN). */
void probe_unlisted_socket(struct verdict *v);
/* host-sockets: no socket file under / (or --sockets-root) accepts; a walk cut short is OPEN. */
void probe_host_sockets(struct verdict *v);

#endif
