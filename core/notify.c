/*
 * The service manager's notification protocol (core/notify.h). The socket is
 * opened once, at start, before any thread: a send is then a sendto() of the
 * state to the address kept here, which is safe from any thread.
 */
#include "core/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/an.h"

/* Parses <text> as a whole decimal number; false for anything else (empty, a sign, junk). */
static bool decimal_parse(const char *text, uint64_t *out)
{
	uint64_t v = 0;

	if (text == NULL || *text == '\0')
		return false;
	for (const char *p = text; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9u) / 10u)
			return false;
		v = v * 10u + (uint64_t)(*p - '0');
	}
	*out = v;
	return true;
}

/* The watchdog asked of this process by $WATCHDOG_USEC and $WATCHDOG_PID: 0 none, or -EINVAL. */
static int watchdog_read(uint64_t *usec)
{
	const char *usec_text = getenv("WATCHDOG_USEC");
	const char *pid_text = getenv("WATCHDOG_PID");
	uint64_t pid = 0;

	*usec = 0;
	if (usec_text == NULL)
		return 0;
	if (!decimal_parse(usec_text, usec) || *usec == 0)
		return -EINVAL;
	if (pid_text != NULL && (!decimal_parse(pid_text, &pid) || pid != (uint64_t)getpid()))
		*usec = 0; /* asked of another process (our parent's, say): not ours */
	return 0;
}

/* Fills <n>'s address from <name>: a path, or '@' and an abstract name. 0 or -EINVAL. */
static int address_parse(struct notify *n, const char *name)
{
	size_t len = strlen(name);

	memset(&n->addr, 0, sizeof(n->addr));
	n->addr.sun_family = AF_UNIX;
	if (len < 2 || (name[0] != '/' && name[0] != '@') || len > sizeof(n->addr.sun_path))
		return -EINVAL;
	if (name[0] == '/' && len == sizeof(n->addr.sun_path))
		return -EINVAL; /* a path needs its NUL */
	memcpy(n->addr.sun_path, name, len);
	if (name[0] == '@')
		n->addr.sun_path[0] = '\0'; /* abstract: the name is the bytes after the NUL */
	n->addr_len =
	    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '/' ? 1u : 0u));
	return 0;
}

int notify_open(struct notify *n)
{
	const char *name = getenv("NOTIFY_SOCKET");

	memset(n, 0, sizeof(*n));
	n->fd = -1;
	int ret = watchdog_read(&n->watchdog_usec);
	if (ret == 0 && name != NULL)
		ret = address_parse(n, name);
	if (ret == 0 && name != NULL) {
		n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (n->fd < 0)
			ret = -errno;
	}
	(void)unsetenv("NOTIFY_SOCKET");
	(void)unsetenv("WATCHDOG_USEC");
	(void)unsetenv("WATCHDOG_PID");
	if (ret != 0) {
		n->watchdog_usec = 0;
		n->fd = -1;
	}
	if (n->fd < 0)
		n->watchdog_usec = 0; /* nobody to tell it to */
	return ret;
}

int notify_send(const struct notify *n, const char *state)
{
	AN_ASSERT(state != NULL);
	if (n->fd < 0)
		return 0;
	ssize_t sent = sendto(n->fd, state, strlen(state), MSG_NOSIGNAL | MSG_DONTWAIT,
			      (const struct sockaddr *)&n->addr, n->addr_len);
	if (sent < 0)
		return -errno;
	return (size_t)sent == strlen(state) ? 0 : -EMSGSIZE;
}

bool notify_on(const struct notify *n)
{
	return n->fd >= 0;
}

void notify_close(struct notify *n)
{
	if (n->fd >= 0)
		(void)close(n->fd);
	n->fd = -1;
	n->watchdog_usec = 0;
}

int notify_store_fd(const struct notify *n, const char *name, int fd)
{
	char state[NOTIFY_FDNAME_BYTES + 32];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control = { 0 };

	AN_ASSERT(name != NULL && strchr(name, ':') == NULL && fd >= 0);
	if (n->fd < 0)
		return 0;
	int len = snprintf(state, sizeof(state), "FDSTORE=1\nFDNAME=%s\n", name);
	if (len < 0 || (size_t)len >= sizeof(state))
		return -ENAMETOOLONG;
	struct iovec iov = { .iov_base = state, .iov_len = (size_t)len };
	struct msghdr msg = { .msg_name = (void *)&n->addr,
			      .msg_namelen = n->addr_len,
			      .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(n->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? -errno : 0;
}

int notify_forget_fd(const struct notify *n, const char *name)
{
	char state[NOTIFY_FDNAME_BYTES + 32];

	AN_ASSERT(name != NULL);
	int len = snprintf(state, sizeof(state), "FDSTOREREMOVE=1\nFDNAME=%s\n", name);
	if (len < 0 || (size_t)len >= sizeof(state))
		return -ENAMETOOLONG;
	return notify_send(n, state);
}

/* The first fd the manager passes ($LISTEN_FDS counts from it: sd_listen_fds(3)). */
#define NOTIFY_LISTEN_FDS_START 3

int notify_listen_fds(struct notify_fd *out, uint32_t cap)
{
	const char *pid_text = getenv("LISTEN_PID");
	const char *count_text = getenv("LISTEN_FDS");
	const char *names = getenv("LISTEN_FDNAMES");
	uint64_t pid = 0, count = 0;
	int ret = 0;

	if (count_text == NULL)
		return 0;
	if (!decimal_parse(count_text, &count) || count > INT32_MAX - NOTIFY_LISTEN_FDS_START ||
	    (pid_text != NULL && !decimal_parse(pid_text, &pid)))
		ret = -EINVAL;
	else if (pid_text == NULL || pid != (uint64_t)getpid())
		count = 0; /* another process's (our parent's, say) */
	for (uint64_t i = 0; ret == 0 && i < count; i++) {
		int fd = NOTIFY_LISTEN_FDS_START + (int)i;
		size_t len = 0;
		if (names != NULL) {
			len = strcspn(names, ":");
			if (len == 0 || len >= NOTIFY_FDNAME_BYTES)
				ret = -EINVAL;
		}
		if (ret == 0 && (fcntl(fd, F_SETFD, FD_CLOEXEC) == -1 || i >= cap))
			ret = i >= cap ? -E2BIG : -EBADF;
		if (ret == 0) {
			memcpy(out[i].name, names != NULL ? names : "unknown",
			       names != NULL ? len : sizeof("unknown"));
			out[i].name[names != NULL ? len : sizeof("unknown") - 1] = '\0';
			out[i].fd = fd;
			names = names != NULL && names[len] == ':' ? names + len + 1 : NULL;
		}
	}
	if (ret != 0) {
		for (uint64_t i = 0; i < count; i++)
			(void)close(NOTIFY_LISTEN_FDS_START + (int)i);
		count = 0;
	}
	(void)unsetenv("LISTEN_PID");
	(void)unsetenv("LISTEN_FDS");
	(void)unsetenv("LISTEN_FDNAMES");
	return ret != 0 ? ret : (int)count;
}
