/*
 * Control-protocol client for the CLI: format a request line, exchange it
 * over the daemon's Unix socket, parse the answer in place.
 *
 * The exchange is plain blocking I/O with SO_RCVTIMEO/SO_SNDTIMEO: the CLI
 * does one request at a time and must never hang on a wedged daemon. The
 * answer is read until the daemon closes (the protocol's end marker) into
 * a buffer that doubles up to CTL_REPLY_BYTES_MAX. The parser checks
 * every byte (no NUL, no control character but tab, so nothing the daemon
 * sends can move the operator's cursor or forge a line) and splits lines in
 * place; callers get views into the one owned buffer.
 *
 * Unknown error codes are accepted (a newer daemon may add one; its message
 * is still worth printing), an unknown first word is not. Requests are
 * checked here too, so a bad id is a usage error before anything is sent.
 */
#include "tools/agentsnet/ctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/uid.h"
#include "core/pool.h"

#define CTL_READ_FIRST_BYTES 4096u

static bool name_valid(const char *s, size_t max)
{
	size_t len = 0;

	AN_ASSERT(max > 0);
	if (s == NULL || s[0] == '\0' || s[0] == '.')
		return false;
	for (; s[len] != '\0'; len++) {
		char c = s[len];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
		if (!ok || len >= max)
			return false;
	}
	AN_ASSERT(len >= 1);
	AN_ASSERT(len <= max);
	return true;
}

bool ctl_id_valid(const char *id)
{
	return name_valid(id, CTL_ID_BYTES_MAX);
}

bool ctl_profile_valid(const char *name)
{
	return name_valid(name, CTL_PROFILE_BYTES_MAX);
}

/* Checks every byte and turns the newlines into NULs; returns the line count or -EPROTO. */
static int split_lines(char *buf, size_t *len)
{
	uint32_t lines = 0;

	AN_ASSERT(buf != NULL);
	AN_ASSERT(*len > 0);
	for (size_t i = 0; i < *len; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c == '\n') {
			buf[i] = '\0';
			lines++;
		} else if ((c < 0x20 && c != '\t') || c == 0x7f) {
			return -EPROTO;
		}
	}
	if (buf[*len - 1] != '\0') {
		buf[(*len)++] = '\0'; /* the caller's buffer has one byte to spare */
		lines++;
	}
	return (int)lines;
}

static int parse_first_line(char *line, struct ctl_reply *r)
{
	AN_ASSERT(line != NULL);
	AN_ASSERT(r->buf == line);
	if (strcmp(line, "ok") == 0 || strncmp(line, "ok ", 3) == 0) {
		r->ok = true;
		r->text = line[2] == '\0' ? "" : line + 3;
		return 0;
	}
	if (strncmp(line, "error ", 6) != 0)
		return -EPROTO;
	char *code = line + 6;
	size_t n = strspn(code, "abcdefghijklmnopqrstuvwxyz_");
	if (n == 0 || (code[n] != '\0' && code[n] != ' '))
		return -EPROTO;
	r->text = code[n] == '\0' ? "" : code + n + 1;
	code[n] = '\0';
	r->code = code;
	return 0;
}

int ctl_reply_parse(char *buf, size_t len, struct ctl_reply *r)
{
	AN_ASSERT(r != NULL);
	AN_ASSERT(buf != NULL);
	*r = (struct ctl_reply){ .buf = buf, .len = len, .code = "", .text = "" };
	if (len == 0)
		return -EPROTO;
	int lines = split_lines(buf, &r->len);
	if (lines < 0)
		return lines;
	AN_ASSERT(lines >= 1);
	int ret = parse_first_line(buf, r);
	if (ret != 0)
		return ret;
	r->more_count = (uint32_t)lines - 1;
	if (r->more_count > 0)
		r->more = buf + strlen(buf) + 1;
	if (r->more != NULL)
		AN_ASSERT(r->more < r->buf + r->len);
	return 0;
}

const char *ctl_reply_next(const struct ctl_reply *r, const char *line)
{
	AN_ASSERT(line >= r->buf);
	AN_ASSERT(line < r->buf + r->len);
	const char *next = line + strlen(line) + 1;
	return next < r->buf + r->len ? next : NULL;
}

void ctl_reply_free(struct ctl_reply *r)
{
	AN_ASSERT(r != NULL);
	if (r->has_fd)
		close(r->fd);
	pool_free(r->buf);
	*r = (struct ctl_reply){ .code = "", .text = "" };
	AN_ASSERT(r->buf == NULL);
}

/* Finds the two separators of "<id> <profile> <dir>"; returns 0 or -EPROTO. */
static int ls_split(const char *line, size_t *id_len, size_t *profile_len)
{
	char id[CTL_ID_BYTES_MAX + 1], profile[CTL_PROFILE_BYTES_MAX + 1];

	AN_ASSERT(line != NULL);
	AN_ASSERT(id_len != NULL);
	AN_ASSERT(profile_len != NULL);
	const char *sp1 = strchr(line, ' ');
	const char *sp2 = sp1 != NULL ? strchr(sp1 + 1, ' ') : NULL;
	if (sp2 == NULL || sp2[1] != '/')
		return -EPROTO;
	*id_len = (size_t)(sp1 - line);
	*profile_len = (size_t)(sp2 - sp1 - 1);
	if (*id_len >= sizeof(id) || *profile_len >= sizeof(profile))
		return -EPROTO;
	memcpy(id, line, *id_len);
	id[*id_len] = '\0';
	memcpy(profile, sp1 + 1, *profile_len);
	profile[*profile_len] = '\0';
	return ctl_id_valid(id) && ctl_profile_valid(profile) ? 0 : -EPROTO;
}

int ctl_stats_parse(const char *line, struct ctl_stats_entry *e)
{
	char tail;

	AN_ASSERT(line != NULL && e != NULL);
	memset(e, 0, sizeof(*e));
	int n = sscanf(line,
		       "%63s profile %63s owner %" SCNu32 " pid %" SCNd32 " uptime_s %" SCNu64
		       " conns %" SCNu32 " requests %" SCNu64 " refusals %" SCNu64
		       " bytes_up %" SCNu64 " bytes_down %" SCNu64 "%c",
		       e->id, e->profile, &e->owner, &e->pid, &e->uptime_s, &e->conns, &e->requests,
		       &e->refusals, &e->bytes_up, &e->bytes_down, &tail);
	if (n != 10 || !ctl_id_valid(e->id) ||
	    (strcmp(e->profile, "-") != 0 && !ctl_profile_valid(e->profile)))
		return -EPROTO;
	return 0;
}

int ctl_ls_parse(char *line, struct ctl_ls_entry *e)
{
	size_t id_len = 0, profile_len = 0;

	AN_ASSERT(line != NULL);
	AN_ASSERT(e != NULL);
	int ret = ls_split(line, &id_len, &profile_len);
	if (ret != 0)
		return ret;
	line[id_len] = '\0';
	line[id_len + 1 + profile_len] = '\0';
	e->id = line;
	e->profile = line + id_len + 1;
	e->dir = line + id_len + 1 + profile_len + 1;
	return 0;
}

int ctl_ls_check(const struct ctl_reply *r)
{
	size_t id_len, profile_len;
	uint64_t n = 0;

	AN_ASSERT(r != NULL);
	AN_ASSERT(r->text != NULL);
	if (!r->ok || r->text[0] == '\0' || strlen(r->text) > 10)
		return -EPROTO;
	for (const char *p = r->text; *p != '\0'; p++) {
		if (*p < '0' || *p > '9')
			return -EPROTO;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	if (n != r->more_count)
		return -EPROTO;
	for (const char *l = r->more; l != NULL; l = ctl_reply_next(r, l)) {
		if (ls_split(l, &id_len, &profile_len) != 0)
			return -EPROTO;
	}
	return 0;
}

/* 1 to 20 decimal digits. */
static bool decimal_valid(const char *text)
{
	size_t len = strspn(text, "0123456789");

	return len > 0 && len <= 20 && text[len] == '\0';
}

static int format_checked(char *out, size_t cap, int argc, const char *const *argv)
{
	AN_ASSERT(argc >= 1);
	AN_ASSERT(argv[0] != NULL);
	if ((strcmp(argv[0], "ping") == 0 || strcmp(argv[0], "stats") == 0 ||
	     strcmp(argv[0], "alerts") == 0) &&
	    argc == 1)
		return snprintf(out, cap, "%s\n", argv[0]);
	if (strcmp(argv[0], "policy") == 0 && argc == 2 &&
	    (strcmp(argv[1], "reload") == 0 || strcmp(argv[1], "status") == 0))
		return snprintf(out, cap, "policy %s\n", argv[1]);
	if (strcmp(argv[0], "audit") == 0 && argc == 2 && strcmp(argv[1], "reopen") == 0)
		return snprintf(out, cap, "audit reopen\n");
	if (strcmp(argv[0], "sandbox") != 0 || argc < 2)
		return -EINVAL;
	if ((strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "stats") == 0) && argc == 2)
		return snprintf(out, cap, "sandbox %s\n", argv[1]);
	if (strcmp(argv[1], "rm") == 0 && argc == 3 && ctl_id_valid(argv[2]))
		return snprintf(out, cap, "sandbox rm %s\n", argv[2]);
	/* "owned": only the calling process's registration of that id (core/control.c). */
	if (strcmp(argv[1], "rm") == 0 && argc == 4 && ctl_id_valid(argv[2]) &&
	    strcmp(argv[3], "owned") == 0)
		return snprintf(out, cap, "sandbox rm %s owned\n", argv[2]);
	if (strcmp(argv[1], "url") == 0 && argc == 3 && ctl_id_valid(argv[2]))
		return snprintf(out, cap, "sandbox url %s\n", argv[2]);
	if (strcmp(argv[1], "release") == 0 && argc == 3 && ctl_id_valid(argv[2]))
		return snprintf(out, cap, "sandbox release %s\n", argv[2]);
	if (strcmp(argv[1], "add") == 0 && argc == 4 && ctl_id_valid(argv[2]) &&
	    ctl_profile_valid(argv[3]))
		return snprintf(out, cap, "sandbox add %s %s\n", argv[2], argv[3]);
	/* "owned": the registration lives only as long as the calling process. */
	if (strcmp(argv[1], "add") == 0 && argc == 5 && ctl_id_valid(argv[2]) &&
	    ctl_profile_valid(argv[3]) && strcmp(argv[4], "owned") == 0)
		return snprintf(out, cap, "sandbox add %s %s owned\n", argv[2], argv[3]);
	/* A lasting registration for an agent's uid: its egress socket is that uid's. */
	if (strcmp(argv[1], "add") == 0 && argc == 6 && ctl_id_valid(argv[2]) &&
	    ctl_profile_valid(argv[3]) && strcmp(argv[4], "uid") == 0 &&
	    uid_parse(argv[5], &(uint32_t){ 0 }))
		return snprintf(out, cap, "sandbox add %s %s uid %s\n", argv[2], argv[3], argv[5]);
	/* And the uid its agent runs as (only it and root may connect), or "new": one of its own. */
	if (strcmp(argv[1], "add") == 0 && argc == 6 && ctl_id_valid(argv[2]) &&
	    ctl_profile_valid(argv[3]) && strcmp(argv[4], "owned") == 0 &&
	    (strcmp(argv[5], "new") == 0 || uid_parse(argv[5], &(uint32_t){ 0 })))
		return snprintf(out, cap, "sandbox add %s %s owned %s\n", argv[2], argv[3],
				argv[5]);
	/* The run's cgroup, made by the daemon (core/runlimit.h): two decimal limits. */
	if (strcmp(argv[1], "limit") == 0 && argc == 5 && ctl_id_valid(argv[2]) &&
	    decimal_valid(argv[3]) && decimal_valid(argv[4]))
		return snprintf(out, cap, "sandbox limit %s %s %s\n", argv[2], argv[3], argv[4]);
	return -EINVAL;
}

int ctl_request_format(char *out, size_t cap, int argc, const char *const *argv)
{
	AN_ASSERT(out != NULL);
	AN_ASSERT(argv != NULL);
	if (argc < 1 || cap == 0)
		return -EINVAL;
	int n = format_checked(out, cap, argc, argv);
	if (n < 0)
		return n;
	if ((size_t)n >= cap) {
		out[0] = '\0';
		return -EMSGSIZE;
	}
	AN_ASSERT(out[n - 1] == '\n');
	return n;
}

bool ctl_daemon_gone(int err)
{
	AN_ASSERT(err <= 0);
	return err == -ENOENT || err == -ENOTDIR || err == -ECONNREFUSED;
}

bool ctl_unreachable(int err)
{
	AN_ASSERT(err <= 0);
	switch (err) {
	case -ENOENT:
	case -ENOTDIR:
	case -ECONNREFUSED:
	case -EACCES:
	case -EPERM:
	case -ETIMEDOUT:
	case -ECONNRESET:
	case -EPIPE:
		return true;
	default:
		return false;
	}
}

static int connect_failed(int ret, const char *path, char *err, size_t err_len)
{
	AN_ASSERT(ret < 0);
	AN_ASSERT(path != NULL);
	if (ret == -ENOENT || ret == -ENOTDIR)
		snprintf(err, err_len, "agentsnetd is not running (no control socket at %s)", path);
	else if (ret == -ECONNREFUSED)
		snprintf(err, err_len, "agentsnetd is not running (nothing listens on %s)", path);
	else if (ret == -EACCES || ret == -EPERM)
		snprintf(
		    err, err_len,
		    "cannot reach agentsnetd: %s: %s (the control socket is for its owner and group)",
		    path, strerror(-ret));
	else
		snprintf(err, err_len, "cannot reach agentsnetd: connect %s: %s", path,
			 strerror(-ret));
	return ret;
}

static int open_socket(const char *path, uint32_t timeout_ms, char *err, size_t err_len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };

	AN_ASSERT(path != NULL);
	AN_ASSERT(timeout_ms > 0);
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, err_len, "control socket path %s: longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		snprintf(err, err_len, "socket: %s", strerror(errno));
		return -errno;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == -1 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == -1 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
		/* A full backlog makes a blocking connect time out with EAGAIN. */
		int ret = errno == EAGAIN ? -ETIMEDOUT : -errno;
		close(fd);
		return connect_failed(ret, path, err, err_len);
	}
	return fd;
}

static uint64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/*
 * Lets the next send or receive on <fd> wait only for what is left until
 * <deadline_ms> (monotonic), so that the whole call, not each read, is
 * bounded: a daemon that answers a byte a second is cut off too. Returns 0,
 * or -ETIMEDOUT once the deadline has passed.
 */
static int deadline_arm(int fd, uint64_t deadline_ms)
{
	uint64_t now = monotonic_ms();

	if (now >= deadline_ms)
		return -ETIMEDOUT;
	uint64_t left = deadline_ms - now;
	struct timeval tv = { .tv_sec = (time_t)(left / 1000u),
			      .tv_usec = (suseconds_t)(left % 1000u) * 1000 };
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == -1 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == -1)
		return -errno;
	return 0;
}

static int send_all(int fd, const char *data, size_t len, uint64_t deadline_ms)
{
	AN_ASSERT(fd >= 0);
	AN_ASSERT(data != NULL);
	while (len > 0) {
		int armed = deadline_arm(fd, deadline_ms);
		if (armed != 0)
			return armed;
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* recv() that also takes a descriptor sent with the bytes (SCM_RIGHTS) into *<passed>. */
static ssize_t recv_with_fd(int fd, char *buf, size_t len, int *passed)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };

	ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&msg) : NULL; c != NULL;
	     c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < count; i++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*passed < 0)
				*passed = got; /* the first one; any other is not ours to keep */
			else
				close(got);
		}
	}
	return n;
}

/*
 * Reads until the peer closes into *buf (owned, one spare byte); returns the
 * length. A full buffer at the limit reads one more byte: EOF then means the
 * answer was exactly CTL_REPLY_BYTES_MAX bytes long, a byte means more.
 */
static ssize_t recv_all(int fd, char **buf, int *passed, uint64_t deadline_ms)
{
	size_t cap = CTL_READ_FIRST_BYTES, len = 0;
	char probe;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(*buf == NULL);
	*buf = pool_malloc(cap + 1);
	if (*buf == NULL)
		return -ENOMEM;
	for (;;) {
		if (len == cap && cap < CTL_REPLY_BYTES_MAX) {
			size_t next = 2 * cap < CTL_REPLY_BYTES_MAX ? 2 * cap : CTL_REPLY_BYTES_MAX;
			char *p = pool_realloc(*buf, next + 1);
			if (p == NULL)
				return -ENOMEM;
			*buf = p;
			cap = next;
		}
		bool full = len == cap;
		int armed = deadline_arm(fd, deadline_ms);
		if (armed != 0)
			return armed;
		ssize_t n =
		    recv_with_fd(fd, full ? &probe : *buf + len, full ? 1 : cap - len, passed);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (n == 0)
			return (ssize_t)len;
		if (full)
			return -EMSGSIZE;
		len += (size_t)n;
	}
}

int ctl_call(const char *path, const char *request, uint32_t timeout_ms, struct ctl_reply *r,
	     char *err, size_t err_len)
{
	char *buf = NULL;

	AN_ASSERT(request != NULL);
	AN_ASSERT(strchr(request, '\n') != NULL);
	AN_ASSERT(r != NULL);
	AN_ASSERT(err != NULL);
	*r = (struct ctl_reply){ .code = "", .text = "" };
	uint64_t deadline_ms = monotonic_ms() + timeout_ms;
	int fd = open_socket(path, timeout_ms, err, err_len);
	if (fd < 0)
		return fd;
	int passed = -1;
	ssize_t ret = send_all(fd, request, strlen(request), deadline_ms);
	if (ret == 0)
		ret = recv_all(fd, &buf, &passed, deadline_ms);
	close(fd);
	if (ret == -ETIMEDOUT)
		snprintf(err, err_len, "agentsnetd did not answer on %s within %u ms", path,
			 timeout_ms);
	else if (ret < 0)
		snprintf(err, err_len, "control socket %s: %s", path, strerror((int)-ret));
	if (ret < 0) {
		pool_free(buf);
		if (passed >= 0)
			close(passed);
		return (int)ret;
	}
	int pret = ctl_reply_parse(buf, (size_t)ret, r);
	if (pret == 0 && passed >= 0) {
		r->has_fd = true;
		r->fd = passed;
	} else if (passed >= 0) {
		close(passed);
	}
	if (pret != 0) {
		snprintf(err, err_len, "malformed answer from agentsnetd on %s", path);
		ctl_reply_free(r);
	}
	return pret;
}
