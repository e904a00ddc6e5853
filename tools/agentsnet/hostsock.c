/*
 * The host's pathname Unix sockets (tools/agentsnet/hostsock.h), from the kernel.
 *
 * One NETLINK_SOCK_DIAG dump of AF_UNIX (SOCK_DIAG_BY_FAMILY, every state,
 * UDIAG_SHOW_NAME) per network namespace; each answer's UNIX_DIAG_NAME is the
 * bound address as bytes with its length. Rejected: /proc/net/unix, which
 * prints a path raw, so a name holding "\n" plus a forged line would hide the
 * real socket behind a path of the service's choosing; and walking the file
 * system for socket files, which costs a sandbox's start time in proportion to
 * the host's files instead of its sockets.
 *
 * The init process's namespace is reached with setns(CLONE_NEWNET) on the
 * calling thread, a netlink socket made there (it stays bound to that
 * namespace), and setns back; everything the dump needs after that is a
 * read of that socket.
 */
#include "tools/agentsnet/hostsock.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

/* One recv of the dump: the kernel fills up to a page-sized batch of messages. */
#define HOSTSOCK_RECV_BYTES 32768u
/* A dump that has not ended after this many reads is refused (a kernel bug, or a loop). */
#define HOSTSOCK_RECV_MAX 100000u
/* Directory levels a coarse listing looks through for what to hide (PATH_MAX / 64). */
#define HOSTSOCK_DEPTH_MAX 64u

static int add_path(struct hostsock_list *l, const char *name, size_t len)
{
	AN_ASSERT(len > 0 && name[0] == '/');
	AN_ASSERT(l->len <= l->cap);
	if (l->n >= HOSTSOCK_MAX || l->len + len + 1 > HOSTSOCK_MAX_BYTES)
		return -E2BIG;
	if (l->len + len + 1 > l->cap) {
		size_t cap = l->cap == 0 ? 4096 : l->cap * 2;
		while (cap < l->len + len + 1)
			cap *= 2;
		char *buf = pool_realloc(l->buf, cap);
		if (buf == NULL)
			return -ENOMEM;
		l->buf = buf;
		l->cap = cap;
	}
	memcpy(l->buf + l->len, name, len);
	l->buf[l->len + len] = '\0';
	l->len += len + 1;
	l->n++;
	return 0;
}

/* For qsort of (const char *) entries. */
static int entry_order(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether <path> is <dir> or below it (<dir> without its trailing '/'; "/" holds all). */
static bool entry_under(const char *path, const char *dir, size_t dir_len)
{
	if (dir_len == 1)
		return true;
	return strncmp(path, dir, dir_len) == 0 && (path[dir_len] == '/' || path[dir_len] == '\0');
}

/*
 * The length of <path>'s ancestor <depth> levels below / ("/a/b" is depth 2 of
 * "/a/b/c/s.sock" and of "/a/b/c/"), or 0 when <path> is not that deep; a
 * directory entry's trailing '/' ends no level.
 */
static size_t entry_ancestor_len(const char *path, unsigned depth)
{
	const char *at = path;

	for (unsigned d = 0; d < depth; d++) {
		at = strchr(at + 1, '/');
		if (at == NULL || at[1] == '\0')
			return 0;
	}
	return (size_t)(at - path);
}

ptrdiff_t hostsock_pick_dir(const char *const *v, size_t n, size_t need,
			    bool (*may_hide)(const char *path, size_t len, void *arg), void *arg,
			    size_t *len)
{
	ptrdiff_t best = -1;
	size_t best_n = 0, best_len = 0;
	bool best_enough = false;

	AN_ASSERT(need > 0);
	for (unsigned depth = 1; depth <= HOSTSOCK_DEPTH_MAX; depth++) {
		bool any = false;
		for (size_t i = 0; i < n;) {
			size_t at = v[i] != NULL ? entry_ancestor_len(v[i], depth) : 0;
			if (at == 0) {
				i++;
				continue;
			}
			any = true;
			/* Sorted, the entries under a directory are contiguous. */
			size_t j = i + 1, count = 1;
			for (; j < n; j++) {
				if (v[j] == NULL)
					continue;
				if (!entry_under(v[j], v[i], at))
					break;
				count++;
			}
			bool enough = count >= need;
			/* Of those that finish, the one hiding fewest (then the deeper); while
			 * none does, the one hiding most (then the deeper). */
			bool deeper = count == best_n && at > best_len;
			bool better = enough ? !best_enough || count < best_n || deeper
					     : !best_enough && (count > best_n || deeper);
			if (better && (may_hide == NULL || may_hide(v[i], at, arg))) {
				best = (ptrdiff_t)i;
				best_n = count;
				best_len = at;
				best_enough = enough;
			}
			i = j;
		}
		if (!any)
			break;
	}
	*len = best_len;
	return best;
}

/*
 * Rewrites <l>'s entries sorted, without duplicates nor entries below a
 * directory entry, and, while they do not leave half the bounds free, hides
 * directories whole (hostsock_pick_dir) until they do: a flood of sockets (which
 * anyone may bind where they can write) ends as the few directories that hold
 * it, and a service's socket elsewhere keeps its own entry. Returns 0 or
 * -ENOMEM (<l> then unchanged).
 */
static int list_rebuild(struct hostsock_list *l)
{
	const char **v = pool_calloc(l->n + 1, sizeof(*v));
	char *dirs = pool_malloc(l->len + 1);
	size_t n = 0, dirs_used = 0;

	if (v == NULL || dirs == NULL) {
		pool_free(v);
		pool_free(dirs);
		return -ENOMEM;
	}
	for (const char *p = hostsock_next(l, NULL); p != NULL; p = hostsock_next(l, p))
		v[n++] = p;
	qsort(v, n, sizeof(*v), entry_order);
	size_t left = n;
	ptrdiff_t last = -1;
	for (size_t i = 0; i < n; i++) {
		/* A directory entry "/a/" sorts right before what it holds ("/a/b"). */
		if (last >= 0) {
			size_t len = strlen(v[last]);
			bool dir = v[last][len - 1] == '/';
			if (strcmp(v[i], v[last]) == 0 ||
			    (dir && strncmp(v[i], v[last], len) == 0)) {
				v[i] = NULL;
				left--;
				continue;
			}
		}
		last = (ptrdiff_t)i;
	}
	while (left >= HOSTSOCK_MAX / 2) {
		size_t len = 0;
		ptrdiff_t at =
		    hostsock_pick_dir(v, n, left - HOSTSOCK_MAX / 2 + 1, NULL, NULL, &len);
		if (at < 0)
			break; /* only sockets in /: as many as there are (bounded by the kernel) */
		AN_ASSERT(len + 2 <= l->len + 1 - dirs_used);
		char *d = dirs + dirs_used;
		memcpy(d, v[at], len);
		d[len] = '/';
		d[len + 1] = '\0';
		dirs_used += len + 2;
		for (size_t i = (size_t)at; i < n; i++) {
			if (v[i] != NULL && entry_under(v[i], d, len)) {
				v[i] = NULL;
				left--;
			}
		}
		v[at] = d;
		left++;
	}
	size_t cap = l->len + dirs_used + 1;
	char *out = pool_malloc(cap);
	if (out == NULL) {
		pool_free(v);
		pool_free(dirs);
		return -ENOMEM;
	}
	size_t kept = 0, used = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] == NULL)
			continue;
		size_t len = strlen(v[i]);
		memcpy(out + used, v[i], len + 1);
		used += len + 1;
		kept++;
	}
	pool_free(v);
	pool_free(dirs);
	pool_free(l->buf);
	l->buf = out;
	l->cap = cap;
	l->len = used;
	l->n = kept;
	l->coarse = true;
	return 0;
}

/*
 * A listed socket's path <name> (<len> bytes) into <l>; where the bounds
 * would be passed, the list is rewritten coarse first (tools/agentsnet/hostsock.h).
 */
static int add_listed(struct hostsock_list *l, const char *name, size_t len)
{
	if (l->n >= HOSTSOCK_MAX || l->len + len + 1 > HOSTSOCK_MAX_BYTES) {
		int ret = list_rebuild(l);
		if (ret != 0)
			return ret;
	}
	return add_path(l, name, len);
}

/* The name attribute of one unix_diag_msg: an absolute path is added, anything else skipped. */
static int take_message(struct hostsock_list *l, const struct nlmsghdr *h)
{
	const struct unix_diag_msg *m = NLMSG_DATA(h);

	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return -EPROTO;
	AN_ASSERT(m != NULL);
	size_t left = h->nlmsg_len - NLMSG_LENGTH(sizeof(*m));
	const struct nlattr *a = (const struct nlattr *)((const char *)m + NLMSG_ALIGN(sizeof(*m)));
	while (left >= sizeof(*a) && a->nla_len >= sizeof(*a) && a->nla_len <= left) {
		if ((a->nla_type & NLA_TYPE_MASK) == UNIX_DIAG_NAME) {
			const char *name = (const char *)(a + 1); /* nlattr is 4 bytes: aligned */
			size_t len = a->nla_len - sizeof(*a);
			/* sun_path's bytes; a path ends at its first NUL if the binder added one. */
			const char *nul = memchr(name, '\0', len);
			if (nul != NULL)
				len = (size_t)(nul - name);
			if (len == 0 || name[0] != '/' || len >= PATH_MAX)
				return 0;
			if (l->wanted != NULL) {
				char path[PATH_MAX];
				memcpy(path, name, len);
				path[len] = '\0';
				if (!l->wanted(path, l->wanted_arg))
					return 0;
			}
			return add_listed(l, name, len);
		}
		size_t step = ((size_t)a->nla_len + 3u) & ~(size_t)3u;
		if (step >= left)
			break;
		left -= step;
		a = (const struct nlattr *)((const char *)a + step);
	}
	return 0;
}

/* Reads the dump's answers from <fd> into <l> until NLMSG_DONE. */
static int read_dump(struct hostsock_list *l, int fd, uint32_t seq, char *err, size_t err_len)
{
	_Alignas(struct nlmsghdr) char buf[HOSTSOCK_RECV_BYTES];

	for (unsigned reads = 0; reads < HOSTSOCK_RECV_MAX; reads++) {
		ssize_t got = recv(fd, buf, sizeof(buf), 0);
		if (got == -1 && errno == EINTR)
			continue;
		if (got <= 0) {
			int e = got == 0 ? EPROTO : errno;
			snprintf(err, err_len, "read the kernel's list of Unix sockets: %s",
				 strerror(e));
			return -e;
		}
		size_t left = (size_t)got;
		for (const struct nlmsghdr *h = (const struct nlmsghdr *)buf; NLMSG_OK(h, left);
		     h = NLMSG_NEXT(h, left)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			int ret = 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				ret = h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error < 0
					  ? e->error
					  : -EPROTO;
			} else if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
				ret = take_message(l, h);
			}
			if (ret == -E2BIG) {
				snprintf(err, err_len,
					 "this host has more than %u Unix sockets bound to a path "
					 "(or %u bytes of their names)",
					 HOSTSOCK_MAX, HOSTSOCK_MAX_BYTES);
				return ret;
			}
			if (ret == -ENOENT) {
				snprintf(
				    err, err_len,
				    "the kernel cannot list its Unix sockets (no unix_diag: "
				    "CONFIG_UNIX_DIAG, or `modprobe unix_diag`), so the host's "
				    "socket files cannot be found to hide them");
				return ret;
			}
			if (ret < 0) {
				snprintf(err, err_len, "read the kernel's list of Unix sockets: %s",
					 strerror(-ret));
				return ret;
			}
		}
	}
	snprintf(err, err_len, "read the kernel's list of Unix sockets: no end after %u reads",
		 HOSTSOCK_RECV_MAX);
	return -EPROTO;
}

static int dump(struct hostsock_list *l, int sock, char *err, size_t err_len)
{
	static uint32_t seq;
	struct {
		struct nlmsghdr h;
		struct unix_diag_req r;
	} req = {
		.h = { .nlmsg_len = sizeof(req),
		       .nlmsg_type = SOCK_DIAG_BY_FAMILY,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
		       .nlmsg_seq = ++seq },
		.r = { .sdiag_family = AF_UNIX,
		       .udiag_states = ~0U,
		       .udiag_show = UDIAG_SHOW_NAME },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };

	AN_ASSERT(sock >= 0);
	if (sendto(sock, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) == -1) {
		int e = errno;
		snprintf(err, err_len, "ask the kernel for its Unix sockets (sock_diag): %s",
			 strerror(e));
		return -e;
	}
	return read_dump(l, sock, req.h.nlmsg_seq, err, err_len);
}

static int diag_socket(char *err, size_t err_len)
{
	int sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (sock == -1) {
		int e = errno;
		snprintf(err, err_len, "socket(AF_NETLINK, NETLINK_SOCK_DIAG): %s", strerror(e));
		return -e;
	}
	return sock;
}

int hostsock_list_netns(struct hostsock_list *l, int netns_fd, char *err, size_t err_len)
{
	int self = -1;

	AN_ASSERT(l != NULL);
	AN_ASSERT(err != NULL);
	if (netns_fd >= 0) {
		self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (self == -1) {
			int e = errno;
			snprintf(err, err_len, "open /proc/thread-self/ns/net: %s", strerror(e));
			return -e;
		}
		if (setns(netns_fd, CLONE_NEWNET) == -1) {
			int e = errno;
			snprintf(err, err_len, "enter a network namespace: %s", strerror(e));
			close(self);
			return -e;
		}
	}
	int sock = diag_socket(err, err_len);
	if (self >= 0) {
		/* Going on in the other namespace would make every later socket there. */
		if (setns(self, CLONE_NEWNET) == -1)
			an_assert_fail(__FILE__, __LINE__,
				       "setns back to our own network namespace");
		close(self);
	}
	if (sock < 0)
		return sock;
	size_t n = l->n, len = l->len;
	bool coarse = l->coarse;
	int ret = dump(l, sock, err, err_len);
	close(sock);
	/* A list that turned coarse was rewritten: what it held is gone (the caller fails). */
	if (ret < 0 && l->coarse == coarse) {
		l->n = n;
		l->len = len;
	}
	return ret;
}

/* Whether the init process's network namespace is another than ours: 1, 0, or -errno. */
static int init_netns_other(int *init_fd)
{
	struct stat ours, init;

	*init_fd = open("/proc/1/ns/net", O_RDONLY | O_CLOEXEC);
	if (*init_fd == -1)
		return -errno;
	if (fstat(*init_fd, &init) == -1 || stat("/proc/thread-self/ns/net", &ours) == -1) {
		int e = errno;
		close(*init_fd);
		*init_fd = -1;
		return -e;
	}
	return init.st_dev != ours.st_dev || init.st_ino != ours.st_ino;
}

int hostsock_list_host(struct hostsock_list *l, char *err, size_t err_len)
{
	int init_fd = -1;

	AN_ASSERT(l != NULL);
	int ret = hostsock_list_netns(l, -1, err, err_len);
	if (ret < 0)
		return ret;
	int other = init_netns_other(&init_fd);
	if (other <= 0)
		return 0; /* the same namespace, or one we may not look into (unprivileged) */
	ret = hostsock_list_netns(l, init_fd, err, err_len);
	close(init_fd);
	/* Entering it needs CAP_SYS_ADMIN over it: without that, ours is what we can list. */
	return ret == -EPERM ? 0 : ret;
}

int hostsock_add(struct hostsock_list *l, const char *path)
{
	AN_ASSERT(path != NULL && path[0] == '/');
	return add_path(l, path, strlen(path));
}

const char *hostsock_next(const struct hostsock_list *l, const char *prev)
{
	AN_ASSERT(l != NULL);
	const char *next = prev == NULL ? l->buf : prev + strlen(prev) + 1;
	if (l->len == 0 || next >= l->buf + l->len)
		return NULL;
	return next;
}

void hostsock_free(struct hostsock_list *l)
{
	AN_ASSERT(l != NULL);
	pool_free(l->buf);
	*l = (struct hostsock_list){ .wanted = l->wanted, .wanted_arg = l->wanted_arg };
}
