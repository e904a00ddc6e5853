/*
 * Handing listening sockets to a successor: the batches of core/handover.h.
 * Both sides block on the control connection. Each step has a deadline
 * (CLOCK_MONOTONIC, timer_now_ms) that bounds it whole: every wait polls for
 * what is left of it, so a peer trickling a byte at a time cannot stretch a
 * step past it; the socket's own timeouts stay as a backstop.
 */
#include "core/handover.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"
#include "core/timer.h"

#define HANDOVER_HEAD_MAX 32u /* "batch <k> <bytes>\n" */
#define HANDOVER_ACK      "next\n"

static int errno_or(int fallback)
{
	return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT
	       : errno != 0                            ? -errno
						       : fallback;
}

/* Waits until <sock> has <events> or <deadline_ms> passes: 0 or -ETIMEDOUT (or -errno). */
static int wait_until(int sock, short events, uint64_t deadline_ms)
{
	for (;;) {
		uint64_t now = timer_now_ms();
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = sock, .events = events };
		uint64_t left = deadline_ms - now;
		int n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (n > 0)
			return 0; /* ready, or an error or hang-up the call itself reports */
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int send_rest(int sock, const char *p, size_t len, uint64_t deadline_ms)
{
	while (len > 0) {
		int ret = wait_until(sock, POLLOUT, deadline_ms);
		if (ret != 0)
			return ret;
		ssize_t n = send(sock, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return errno_or(-EPIPE);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads the receiver's "next\n". 0, -EPROTO for anything else, or -errno. */
static int ack_read(int sock, uint64_t deadline_ms)
{
	char got[sizeof(HANDOVER_ACK) - 1];
	size_t have = 0;

	while (have < sizeof(got)) {
		int ret = wait_until(sock, POLLIN, deadline_ms);
		if (ret != 0)
			return ret;
		ssize_t n = recv(sock, got + have, sizeof(got) - have, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? -EPROTO : errno_or(-EPROTO);
		have += (size_t)n;
	}
	return memcmp(got, HANDOVER_ACK, sizeof(got)) == 0 ? 0 : -EPROTO;
}

/* One batch: <k> descriptors of <fds> with their names, in one sendmsg (and its rest). */
static int batch_send(int sock, const struct notify_fd *fds, uint32_t k, char *text,
		      uint64_t deadline_ms)
{
	alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * HANDOVER_BATCH_MAX)];
	char head[HANDOVER_HEAD_MAX];
	size_t text_len = 0;

	AN_ASSERT(k <= HANDOVER_BATCH_MAX);
	for (uint32_t i = 0; i < k; i++) {
		size_t len = strnlen(fds[i].name, NOTIFY_FDNAME_BYTES);
		AN_ASSERT(len > 0 && len < NOTIFY_FDNAME_BYTES);
		AN_ASSERT(memchr(fds[i].name, '\n', len) == NULL && fds[i].fd >= 0);
		memcpy(text + text_len, fds[i].name, len);
		text[text_len + len] = '\n';
		text_len += len + 1;
	}
	AN_ASSERT(text_len <= HANDOVER_TEXT_MAX);
	int head_len = snprintf(head, sizeof(head), "batch %" PRIu32 " %zu\n", k, text_len);
	AN_ASSERT(head_len > 0 && (size_t)head_len < sizeof(head));
	struct iovec iov[2] = { { .iov_base = head, .iov_len = (size_t)head_len },
				{ .iov_base = text, .iov_len = text_len } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = text_len > 0 ? 2 : 1 };
	if (k > 0) {
		memset(control, 0, sizeof(control));
		msg.msg_control = control;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * k);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * k);
		for (uint32_t i = 0; i < k; i++)
			memcpy(CMSG_DATA(c) + i * sizeof(int), &fds[i].fd, sizeof(int));
	}
	ssize_t n;
	int ret = wait_until(sock, POLLOUT, deadline_ms);
	if (ret != 0)
		return ret;
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return errno_or(-EPIPE);
	/* The descriptors went with the first byte; what did not fit follows plainly. */
	size_t sent = (size_t)n;
	if (sent < (size_t)head_len)
		return -EPIPE; /* a stream takes 32 bytes whole or fails: never seen */
	sent -= (size_t)head_len;
	return send_rest(sock, text + sent, text_len - sent, deadline_ms);
}

int handover_send(int sock, const struct notify_fd *fds, uint32_t count, uint64_t deadline_ms)
{
	char *text = pool_malloc(HANDOVER_TEXT_MAX);
	uint32_t done = 0;
	int ret = text != NULL ? 0 : -ENOMEM;

	while (ret == 0) {
		uint32_t k = count - done < HANDOVER_BATCH_MAX ? count - done : HANDOVER_BATCH_MAX;
		ret = batch_send(sock, fds + done, k, text, deadline_ms);
		if (ret != 0 || k == 0)
			break;
		ret = ack_read(sock, deadline_ms);
		done += k;
	}
	pool_free(text);
	return ret;
}

static void fds_close(const int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		(void)close(fds[i]);
}

/*
 * Reads one batch into <text> (its names) and <fds>, *<k> of each: 0, or
 * -errno with every descriptor of the batch closed.
 */
static int batch_receive(int sock, char *text, size_t *text_len, int *fds, uint32_t *k,
			 uint64_t deadline_ms)
{
	alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * HANDOVER_BATCH_MAX)];
	char head[HANDOVER_HEAD_MAX + 1];
	uint32_t got_fds = 0;
	size_t have = 0;

	/* The head first, a byte at a time up to its newline: its descriptors come with
	 * the first byte, and nothing past the head is read before its size is known. */
	while (have == 0 || head[have - 1] != '\n') {
		if (have == HANDOVER_HEAD_MAX) {
			fds_close(fds, got_fds);
			return -EPROTO;
		}
		struct iovec iov = { .iov_base = head + have, .iov_len = 1 };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (have == 0) {
			msg.msg_control = control;
			msg.msg_controllen = sizeof(control);
		}
		int ret = wait_until(sock, POLLIN, deadline_ms);
		if (ret != 0) {
			fds_close(fds, got_fds);
			return ret;
		}
		ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fds_close(fds, got_fds);
			return n == 0 ? -EPROTO : errno_or(-EPROTO);
		}
		for (struct cmsghdr *c = have == 0 ? CMSG_FIRSTHDR(&msg) : NULL; c != NULL;
		     c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t n_fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < n_fds; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (got_fds < HANDOVER_BATCH_MAX)
					fds[got_fds++] = fd;
				else
					(void)close(fd);
			}
		}
		bool truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
		have += (size_t)n;
		if (truncated) {
			fds_close(fds, got_fds);
			return -EPROTO;
		}
	}
	head[have] = '\0';
	uint32_t want_fds = 0;
	size_t want_text = 0;
	char tail = 0;
	if (sscanf(head, "batch %" SCNu32 " %zu%c", &want_fds, &want_text, &tail) != 3 ||
	    tail != '\n' || want_fds > HANDOVER_BATCH_MAX || want_fds != got_fds ||
	    want_text > HANDOVER_TEXT_MAX || (want_fds == 0) != (want_text == 0)) {
		fds_close(fds, got_fds);
		return -EPROTO;
	}
	for (size_t read_len = 0; read_len < want_text;) {
		int ret = wait_until(sock, POLLIN, deadline_ms);
		if (ret != 0) {
			fds_close(fds, got_fds);
			return ret;
		}
		ssize_t n = recv(sock, text + read_len, want_text - read_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fds_close(fds, got_fds);
			return n == 0 ? -EPROTO : errno_or(-EPROTO);
		}
		read_len += (size_t)n;
	}
	*text_len = want_text;
	*k = got_fds;
	return 0;
}

int handover_receive(int sock, struct notify_fd *out, uint32_t cap, uint32_t *count,
		     uint64_t deadline_ms)
{
	char *text = pool_malloc(HANDOVER_TEXT_MAX);
	int fds[HANDOVER_BATCH_MAX];
	uint32_t got = 0;
	int ret = text != NULL ? 0 : -ENOMEM;

	while (ret == 0) {
		size_t text_len = 0;
		uint32_t k = 0;
		ret = batch_receive(sock, text, &text_len, fds, &k, deadline_ms);
		if (ret != 0)
			break;
		if (k == 0)
			break; /* the end */
		/* Exactly <k> names, each 1..NOTIFY_FDNAME_BYTES - 1 bytes, each ended by a newline. */
		const char *p = text;
		const char *end = text + text_len;
		uint32_t i = 0;
		for (; ret == 0 && i < k; i++) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t len = nl != NULL ? (size_t)(nl - p) : 0;
			if (len == 0 || len >= NOTIFY_FDNAME_BYTES || memchr(p, '\0', len) != NULL)
				ret = -EPROTO;
			else if (got + i >= cap)
				ret = -E2BIG;
			else {
				memcpy(out[got + i].name, p, len);
				out[got + i].name[len] = '\0';
				out[got + i].fd = fds[i];
				p = nl + 1;
			}
		}
		if (ret == 0 && p != end)
			ret = -EPROTO;
		if (ret != 0) {
			fds_close(fds, k);
			break;
		}
		got += k;
		ret = send_rest(sock, HANDOVER_ACK, sizeof(HANDOVER_ACK) - 1, deadline_ms);
	}
	pool_free(text);
	if (ret != 0) {
		for (uint32_t i = 0; i < got; i++)
			(void)close(out[i].fd);
		got = 0;
	}
	*count = got;
	return ret;
}

/* One line from <fd>, a byte at a time (what follows it may carry descriptors). */
static int line_read(int fd, char *buf, size_t cap, uint64_t deadline_ms)
{
	size_t len = 0;

	while (len + 1 < cap) {
		char ch;
		int ret = wait_until(fd, POLLIN, deadline_ms);
		if (ret != 0)
			return ret;
		ssize_t n = recv(fd, &ch, 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? -EPROTO : errno_or(-EPROTO);
		if (ch == '\n') {
			buf[len] = '\0';
			return 0;
		}
		buf[len++] = ch;
	}
	return -EPROTO;
}

int handover_take(const char *path, int *conn, struct notify_fd **out, uint32_t *count, char *why,
		  size_t cap)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = HANDOVER_WAIT_S };
	char line[128];
	uint32_t want = 0;
	char tail = 0;

	*conn = -1;
	*out = NULL;
	*count = 0;
	if (strlen(path) >= sizeof(sun.sun_path)) {
		snprintf(why, cap, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
	    connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
		int ret = -errno;
		snprintf(why, cap, "no daemon answers on %s: %s", path, strerror(-ret));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	uint64_t deadline_ms = timer_now_ms() + HANDOVER_WAIT_S * 1000u; /* the whole take */
	int ret = send_rest(fd, "daemon handover\n", strlen("daemon handover\n"), deadline_ms);
	if (ret == 0)
		ret = line_read(fd, line, sizeof(line), deadline_ms);
	if (ret == 0 && (sscanf(line, "ok handover %" SCNu32 "%c", &want, &tail) != 1)) {
		snprintf(why, cap, "the daemon on %s answered: %s", path, line);
		ret = -EPROTO;
	} else if (ret != 0) {
		snprintf(why, cap, "the daemon on %s: %s", path, strerror(-ret));
	}
	struct notify_fd *list = NULL;
	if (ret == 0 && want > 0 && (list = pool_calloc(want, sizeof(*list))) == NULL)
		ret = -ENOMEM;
	uint32_t got = 0;
	if (ret == 0) {
		ret = handover_receive(fd, list, want, &got, deadline_ms);
		if (ret == 0 && got != want) {
			for (uint32_t i = 0; i < got; i++)
				(void)close(list[i].fd);
			ret = -EPROTO;
		}
		if (ret != 0)
			snprintf(why, cap, "receiving the sockets from %s: %s", path,
				 strerror(-ret));
	}
	if (ret != 0) {
		pool_free(list);
		close(fd);
		return ret;
	}
	*conn = fd;
	*out = list;
	*count = got;
	return 0;
}

int handover_ready(int conn)
{
	char line[64];
	uint64_t deadline_ms = timer_now_ms() + HANDOVER_WAIT_S * 1000u;

	int ret = send_rest(conn, "ready\n", strlen("ready\n"), deadline_ms);
	if (ret == 0)
		ret = line_read(conn, line, sizeof(line), deadline_ms);
	if (ret == 0 && strcmp(line, "ok draining") != 0)
		ret = -EPROTO;
	close(conn);
	return ret;
}
