/*
 * The Unix sockets of this host that are bound to a path: what `agentsnet run`
 * hides from its agent besides the directories it replaces whole.
 *
 * A socket file is a way out of the sandbox whatever the sandbox's network
 * namespace: connect() finds a pathname socket through the file system. A
 * fresh /run and private world-writable directories hide most of them (D-Bus,
 * systemd, container runtimes, ssh-agent, X11), but a service may keep its
 * socket anywhere it can write (/var/lib/mysql/mysql.sock, a node's kubelet
 * and device-plugin sockets, a user's own daemon in a home directory). The
 * kernel knows every bound socket of a network namespace; hostsock asks it
 * (sock_diag, UNIX_DIAG_NAME), so a name is exact: a path holding a newline is
 * one path, never two lines of /proc/net/unix a service could forge.
 *
 * It lists the caller's namespace and, when the caller may enter it, the init
 * process's (a root caller in a namespace of its own still hides the host's
 * services). Sockets bound in other namespaces at paths the sandbox sees are
 * not listed; `agentsnet selftest`'s host-sockets probe finds those.
 */
#ifndef AN_TOOLS_AGENTSNET_HOSTSOCK_H
#define AN_TOOLS_AGENTSNET_HOSTSOCK_H

#include <stdbool.h>
#include <stddef.h>

/* Paths held at most (hostsock_add past it: -E2BIG), and their bytes in all. */
#define HOSTSOCK_MAX       65536u
#define HOSTSOCK_MAX_BYTES (HOSTSOCK_MAX * 64u)

/*
 * Absolute paths, each NUL-terminated, one after the other in buf. A listing
 * stores only the paths <wanted> says yes to (NULL: all): what is skipped
 * there counts against no bound.
 *
 * A listing never fails for the number of sockets (anyone may bind a hundred
 * thousand where they can write): where they would pass the bounds, it turns
 * coarse. Duplicates are merged, and directories that hold many entries
 * become one entry each, written with a trailing '/' ("/a/b/"), chosen as the
 * fewest-holding directory that frees enough (else the most-holding), until
 * half the bounds are free; a socket elsewhere keeps its own entry. Whoever
 * hides the list must hide such a directory whole.
 */
struct hostsock_list {
	size_t n;
	size_t len;  /* bytes of buf used */
	size_t cap;  /* bytes of buf allocated */
	bool coarse; /* some entries are directories (ending in '/') */
	char *buf;
	bool (*wanted)(const char *path, void *arg);
	void *wanted_arg;
};

/*
 * Appends to <l> the absolute path of every Unix socket bound in the network
 * namespace <netns_fd> (-1: the caller's) that l->wanted accepts. Abstract
 * names and relative paths are skipped (the first reaches no file system, the second names a file only
 * from its binder's working directory). Returns 0 or -errno with <err>
 * (<err_len> bytes) naming the step; on failure <l> keeps what it held.
 */
int hostsock_list_netns(struct hostsock_list *l, int netns_fd, char *err, size_t err_len);

/*
 * hostsock_list_netns of the caller's namespace, then of the init process's
 * when that is another one and the caller may enter it (CAP_SYS_ADMIN);
 * without that right only the caller's is listed. The calling thread is back in
 * its own namespace on return (if it cannot return, the process aborts: it
 * would otherwise go on in another namespace). Same returns.
 */
int hostsock_list_host(struct hostsock_list *l, char *err, size_t err_len);

/* Appends the absolute path <path> to <l>: 0, -E2BIG past the bounds above, or -ENOMEM. */
int hostsock_add(struct hostsock_list *l, const char *path);

/* The path after <prev> (NULL: the first), or NULL past the last. */
const char *hostsock_next(const struct hostsock_list *l, const char *prev);

/*
 * The directory to hide next among the sorted paths <v> (<n> of them; NULL
 * for those already hidden) so that at least <need> go: at any depth below /,
 * the one holding the fewest that is enough (the deeper of equals), or failing
 * that the one holding the most (the deeper of equals), among those
 * <may_hide> accepts (NULL: all; it is given the directory as the first <len>
 * bytes of <path>). Returns the index of the first path under it, its length
 * in *<len>; -1 when none qualifies. A thousand sibling directories of one
 * socket each are hidden at their parent in one step. Pure.
 */
ptrdiff_t hostsock_pick_dir(const char *const *v, size_t n, size_t need,
			    bool (*may_hide)(const char *path, size_t len, void *arg), void *arg,
			    size_t *len);

/* Frees <l>'s paths; <l> is then empty and may be used again. */
void hostsock_free(struct hostsock_list *l);

#endif
