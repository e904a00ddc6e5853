/*
 * The service manager's notification protocol (core/notify.h). The socket is
 * opened once, at start, before any thread: a send is then a sendto() of the
 * state to the address kept here, which is safe from any thread.
 */
#include "core/notify.h"

#include <errno.h>
#include <stddef.h>
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
