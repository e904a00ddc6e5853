/*
 * The host's socket files `agentsnet run`'s sandbox masks: the parent lists them
 * before the clone (sockets_prepare, from tools/agentsnet/sandbox.c), the child masks
 * each (mask_socket).
 *
 * A service's socket file outside the world-writable directories is a way out
 * (connect() finds a pathname socket through the file system, whatever the
 * network namespace): /var/lib/mysql/mysql.sock, a node's kubelet sockets, a
 * user's own daemon in a home directory. The parent asks the kernel for every
 * bound pathname socket (tools/agentsnet/hostsock.h: the caller's network namespace,
 * and the init process's when it may enter it), keeping those the mounts above
 * leave in view (only those count against hostsock's bound), and the child masks each of the rest that it still finds as a
 * socket (opened without following a symlink) with a bind of /dev/null, where
 * connect() is refused. Past hostsock's own bound (65,536, which anyone may
 * bind in directories of theirs) the listing turns coarse: the directories
 * holding the flood come as directory entries, each hidden whole
 * (sockets_hide_dirs). Past SANDBOX_SOCKET_MASKS_MAX, the directories holding
 * the most are hidden whole (the same masked entries as the walk's collapse,
 * never one holding what the run keeps): nobody who can bind sockets can make
 * runs fail or slow. Sockets bound in other network namespaces at paths the
 * sandbox sees are not listed; `agentsnet selftest` looks for them.
 */
#include "tools/agentsnet/sandbox_int.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/an.h"
#include "core/pool.h"
#include "tools/agentsnet/hostsock.h"

/*
 * Host socket files the sandbox masks one by one, at most (a bind mount each). Past it
 * the directories holding the most are hidden whole instead, as the walk's collapse does.
 */
#define SANDBOX_SOCKET_MASKS_MAX 1024u

/* Whether the mounts leave <path> in view (not a replaced or private directory, nor the
 * socket directory): hostsock's filter, <arg> the child_ctx. */
static bool socket_in_view(const char *path, void *arg)
{
	const struct child_ctx *c = arg;
	char parent[PATH_MAX];

	AN_ASSERT(path[0] == '/');
	/* A name the binder wrote with "." or ".." or "//" is not compared as text: the child
	 * looks it up, as the agent would. */
	if (strstr(path, "/./") != NULL || strstr(path, "/../") != NULL ||
	    strstr(path, "//") != NULL)
		return true;
	size_t len = strlen(path);
	if ((len >= 2 && strcmp(path + len - 2, "/.") == 0) ||
	    (len >= 3 && strcmp(path + len - 3, "/..") == 0))
		return true;
	if (ww_covered(c->ww, path) || sandbox_path_under(path, c->s->socket_dir))
		return false;
	snprintf(parent, sizeof(parent), "%s", c->s->dir);
	char *slash = strrchr(parent, '/');
	if (slash == NULL || slash == parent)
		return true;
	*slash = '\0';
	return !sandbox_path_under(path, parent);
}

static int socket_order(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* hostsock_pick_dir's filter: a directory the list has room for that holds nothing kept. */
static bool collapse_may_hide(const char *path, size_t len, void *arg)
{
	const struct child_ctx *c = arg;
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%.*s", (int)len, path);
	return ww_kept(c->ww, dir) < 0 && c->ww->n < SANDBOX_WW_MAX;
}

/*
 * Past SANDBOX_SOCKET_MASKS_MAX sockets: hides directories whole (masked ww
 * entries) until the rest fit, never / nor one holding what the run keeps.
 * Each step hides the directory, at any depth, holding the fewest of them
 * that is enough to finish (the deeper of equals), or failing that the one
 * holding the most: a thousand sibling directories of one socket each (or a
 * tree of them) are hidden at their common parent in one step, not one by
 * one until the hidden directories run out. Sorted by strcmp, the sockets
 * under any directory are contiguous. Returns the sockets left to mask one
 * by one, or -E2BIG with <err>.
 */
static long sockets_collapse(struct child_ctx *c, const char **paths, size_t n, char *err,
			     size_t err_len)
{
	char dir[PATH_MAX];
	size_t left = n;

	AN_ASSERT(n > SANDBOX_SOCKET_MASKS_MAX);
	qsort(paths, n, sizeof(*paths), socket_order);
	while (left > SANDBOX_SOCKET_MASKS_MAX) {
		size_t best_len = 0;
		ptrdiff_t best = hostsock_pick_dir(paths, n, left - SANDBOX_SOCKET_MASKS_MAX,
						   collapse_may_hide, c, &best_len);
		if (best < 0) {
			snprintf(err, err_len,
				 "this host has %zu Unix sockets bound in directories the sandbox "
				 "shows, and they cannot be hidden within %u masks and %d hidden "
				 "directories without hiding what the run needs",
				 n, SANDBOX_SOCKET_MASKS_MAX, SANDBOX_WW_MAX);
			return -E2BIG;
		}
		snprintf(dir, sizeof(dir), "%.*s", (int)best_len, paths[best]);
		ww_put(c->ww, dir, 0755, true);
		for (size_t i = 0; i < n; i++) {
			if (paths[i] != NULL && sandbox_path_under(paths[i], dir)) {
				paths[i] = NULL;
				left--;
			}
		}
	}
	return (long)left;
}

/*
 * A coarse listing's directories (tools/agentsnet/hostsock.h; <dirs>, <n>, without their
 * trailing '/', writable), each hidden whole as a masked entry: sorted, those
 * below another dropped, and while they outnumber the room left in the list,
 * each taken one level up. Never / nor a directory holding what the run
 * keeps: -E2BIG with <err> naming it.
 */
static int sockets_hide_dirs(struct child_ctx *c, char **dirs, size_t n, char *err, size_t err_len)
{
	for (;;) {
		qsort(dirs, n, sizeof(*dirs), socket_order);
		size_t kept = 0;
		for (size_t i = 0; i < n; i++) {
			/* Sorted, a directory's descendants follow it ("/a", "/a/b", "/a-c"). */
			if (ww_covered(c->ww, dirs[i]) ||
			    (kept > 0 && sandbox_path_under(dirs[i], dirs[kept - 1])))
				continue;
			dirs[kept++] = dirs[i];
		}
		n = kept;
		if (c->ww->n + n <= SANDBOX_WW_MAX || (n == 1 && strcmp(dirs[0], "/") == 0))
			break;
		for (size_t i = 0; i < n; i++) {
			char *slash = strrchr(dirs[i], '/');
			AN_ASSERT(slash != NULL);
			slash[slash == dirs[i] ? 1 : 0] = '\0'; /* "/a" -> "/", "/a/b" -> "/a" */
		}
	}
	for (size_t i = 0; i < n; i++) {
		int k = ww_kept(c->ww, dirs[i]);
		if (k >= 0) {
			snprintf(err, err_len,
				 "this host has more Unix sockets bound in directories the sandbox "
				 "shows than can be hidden one by one, and hiding %s, which holds "
				 "them, would hide %s",
				 dirs[i],
				 strcmp(dirs[i], "/") == 0 ? "everything" : c->ww->keep[k]);
			return -E2BIG;
		}
		ww_put(c->ww, dirs[i], 0755, true);
	}
	return 0;
}

int sockets_prepare(struct child_ctx *c, char *err, size_t err_len)
{
	struct hostsock_list all = { .wanted = socket_in_view, .wanted_arg = c };
	const char **paths = NULL;
	char **dirs = NULL;
	char *dir_text = NULL;
	size_t n = 0, n_dirs = 0;

	int ret = hostsock_list_host(&all, err, err_len);
	if (ret < 0)
		goto out;
	paths = pool_calloc(all.n + 1, sizeof(*paths));
	dirs = pool_calloc(all.n + 1, sizeof(*dirs));
	dir_text = pool_malloc(all.len + 1);
	if (paths == NULL || dirs == NULL || dir_text == NULL) {
		snprintf(err, err_len, "out of memory");
		ret = -ENOMEM;
		goto out;
	}
	/* A coarse listing's entries ending in '/' are directories (tools/agentsnet/hostsock.h). */
	if (all.len > 0)
		memcpy(dir_text, all.buf, all.len);
	for (const char *p = hostsock_next(&all, NULL); p != NULL; p = hostsock_next(&all, p)) {
		size_t len = strlen(p);
		if (p[len - 1] != '/') {
			paths[n++] = p;
			continue;
		}
		char *d = dir_text + (p - all.buf);
		if (len > 1)
			d[len - 1] = '\0';
		dirs[n_dirs++] = d;
	}
	if (n_dirs > 0) {
		ret = sockets_hide_dirs(c, dirs, n_dirs, err, err_len);
		if (ret < 0)
			goto out;
		size_t kept = 0;
		for (size_t i = 0; i < n; i++) {
			if (!ww_covered(c->ww, paths[i]))
				paths[kept++] = paths[i];
		}
		n = kept;
	}
	if (n > SANDBOX_SOCKET_MASKS_MAX) {
		long left = sockets_collapse(c, paths, n, err, err_len);
		if (left < 0) {
			ret = (int)left;
			goto out;
		}
	}
	for (size_t i = 0; i < n && ret == 0; i++) {
		if (paths[i] != NULL)
			ret = hostsock_add(&c->sockets, paths[i]);
	}
	if (ret < 0)
		snprintf(err, err_len, "the host's socket files to hide: %s", strerror(-ret));
out:
	pool_free(paths);
	pool_free(dirs);
	pool_free(dir_text);
	hostsock_free(&all);
	return ret;
}
