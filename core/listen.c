/*
 * The sockets the engine listens on, and the directories they are made in:
 * each sandbox's egress socket, the TCP listener, the gateway's public
 * listener and its internal one, and an owned sandbox's ingress socket.
 *
 * Each sandbox's egress socket is <socket_dir>/sandboxes/<id>/egress.sock, in
 * a directory of its own so a sandbox can be given that directory as a mount
 * (a file bind mount pins the inode and is stranded when the socket is
 * re-created). A path already bound by a live process is refused
 * (-EADDRINUSE): the daemon never unlinks a socket someone is serving. A
 * stale one (connect refused) is replaced, and so is anything else in its
 * place, a symlink never followed. The optional TCP listener is bound
 * once per worker with SO_REUSEPORT so the kernel spreads its connections
 * over the cores.
 *
 * Invariants: a socket or directory is made with its final mode and group
 * (the calling thread's own umask and fsgid set around bind or mkdir), never
 * fixed up by path afterwards; sockets are made only in directories that are
 * the daemon's own and writable by nobody else (engine_dir_secure), under a
 * socket directory whose every ancestor is root's or the daemon's
 * (engine_dir_ancestors_secure).
 *
 * Callers: engine.c at start-up and when it opens a sandbox
 * (core/engine_int.h), the control socket and the run-time limits
 * (engine_listen_unix, engine_dir_secure: core/engine.h), registry.c (the
 * registry's directory).
 */
#include "core/engine_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/an.h"
#include "core/http1.h"
#include "core/layout.h"
#include "core/log.h"
#include "core/worker.h"

/*
 * The calling thread's umask and file-system credentials, apart from the other
 * threads' (unshare(CLONE_FS) once per thread): a socket or directory is then
 * made with its final mode (and group) by setting them around bind or mkdir,
 * never fixed up afterwards by path, and no other thread's files see them.
 */
static int thread_fs_private(void)
{
	static _Thread_local bool done;

	if (done)
		return 0;
	if (unshare(CLONE_FS) == -1)
		return -errno;
	done = true;
	return 0;
}

static int mkdir_one(const char *path, mode_t mode)
{
	AN_ASSERT((mode & ~07777u) == 0);
	mode_t old = umask(~mode & 0777);
	int ret = mkdir(path, mode) == -1 && errno != EEXIST ? -errno : 0;
	umask(old);
	return ret;
}

int engine_mkdir_parents(const char *dir, mode_t mode)
{
	char tmp[PATH_MAX];

	if (strlen(dir) >= sizeof(tmp))
		return -ENAMETOOLONG;
	int ret = thread_fs_private();
	if (ret != 0)
		return ret;
	snprintf(tmp, sizeof(tmp), "%s", dir);
	for (char *p = tmp + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		ret = mkdir_one(tmp, mode);
		*p = '/';
		if (ret != 0)
			return ret;
	}
	return mkdir_one(tmp, mode);
}

/* Whether <st> is a directory of ours that nobody else may write into. */
static bool dir_ours(const struct stat *st)
{
	return S_ISDIR(st->st_mode) && st->st_uid == geteuid() && (st->st_mode & 022) == 0;
}

int engine_dir_secure(const char *path, mode_t mode)
{
	struct stat st;

	int ret = engine_mkdir_parents(path, mode);
	int fd = ret == 0 ? open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : ret;
	if (fd == -1)
		fd = -errno;
	if (fd < 0) {
		log_error("%s: %s", path, strerror(-fd));
		return fd;
	}
	if (fstat(fd, &st) == -1 || !dir_ours(&st)) {
		log_error("%s: owned by uid %u, mode %04o: the daemon's directories must be its "
			  "own and writable by nobody else (a symlink, or anyone's write access, "
			  "would let them redirect the sockets it makes)",
			  path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	return fd;
}

int engine_dir_ancestors_secure(const char *path)
{
	char tmp[PATH_MAX];
	struct stat st;

	if (path[0] != '/' || strlen(path) >= sizeof(tmp))
		return -EINVAL;
	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *slash = strrchr(tmp, '/'); slash != NULL; slash = strrchr(tmp, '/')) {
		*slash = '\0';
		const char *dir = slash == tmp ? "/" : tmp;
		if (lstat(dir, &st) == -1) {
			int e = errno;
			log_error("%s: %s", dir, strerror(e));
			return -e;
		}
		/* A symlink is followed by every lookup, so it counts as its target: see it. */
		if (S_ISLNK(st.st_mode) && stat(dir, &st) == -1) {
			int e = errno;
			log_error("%s: %s", dir, strerror(e));
			return -e;
		}
		bool owner_ok = st.st_uid == 0 || st.st_uid == geteuid();
		bool write_ok = (st.st_mode & 022) == 0 || (st.st_mode & S_ISVTX) != 0;
		if (!S_ISDIR(st.st_mode) || !owner_ok || !write_ok) {
			log_error(
			    "%s (above %s): owned by uid %u, mode %04o: every directory above the "
			    "socket directory must be root's or the daemon's, and writable by "
			    "nobody else unless sticky (whoever may rename an entry there can "
			    "redirect the daemon's sockets)",
			    dir, path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
			return -EPERM;
		}
		if (slash == tmp)
			break;
	}
	return 0;
}

/*
 * Connects to <addr> without waiting: -EADDRINUSE when a process listens
 * there (a full backlog included) or a datagram socket is bound there,
 * -ECONNREFUSED when nothing listens, or another -errno (-ENOENT: no such
 * name).
 */
static int socket_probe(const struct sockaddr_un *addr)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1)
		return -errno;
	int ret = connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0 ? 0 : -errno;
	close(fd);
	/* EPROTOTYPE: a datagram socket is bound there, someone's, not ours to remove. */
	return ret == 0 || ret == -EAGAIN || ret == -EPROTOTYPE ? -EADDRINUSE : ret;
}

/*
 * -EADDRINUSE when a live process serves <sun>, 0 when the path is free or
 * was stale (removed), or another -errno. The name is probed through a
 * descriptor of the name itself (O_PATH|O_NOFOLLOW), the connect going by
 * /proc/self/fd: a symlink or any other file in the socket's place is
 * removed, never followed, so the daemon never connects, as root, to a
 * socket elsewhere on the host that a link planted here points at. Without
 * /proc the connect goes by the name, just seen to be a socket in a
 * directory nobody else may write (engine_dir_secure).
 */
static int socket_path_claim(const struct sockaddr_un *sun)
{
	int path_fd = open(sun->sun_path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (path_fd == -1)
		return errno == ENOENT ? 0 : -errno;
	struct stat st;
	int ret = fstat(path_fd, &st) == -1 ? -errno : 0;
	bool stale = ret == 0 && !S_ISSOCK(st.st_mode);
	if (ret == 0 && !stale) {
		struct sockaddr_un via = { .sun_family = AF_UNIX };
		snprintf(via.sun_path, sizeof(via.sun_path), "/proc/self/fd/%d", path_fd);
		ret = socket_probe(&via);
		if (ret == -ENOENT && access("/proc/self/fd", F_OK) != 0) {
			ret = socket_probe(sun);
			ret = ret == -ENOENT ? 0 : ret; /* gone meanwhile: free */
		}
		stale = ret == -ECONNREFUSED;
	}
	close(path_fd);
	if (stale)
		ret = unlink(sun->sun_path) == -1 && errno != ENOENT ? -errno : 0;
	return ret;
}

int engine_listen_unix(const char *path, mode_t mode, uid_t owner, gid_t group, bool nonblock)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	AN_ASSERT((mode & ~0777u) == 0);
	if (strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	memcpy(sun.sun_path, path, strlen(path) + 1);
	int ret = thread_fs_private();
	if (ret == 0)
		ret = socket_path_claim(&sun);
	if (ret != 0)
		return ret;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	if (fd == -1)
		return -errno;
	/*
	 * The file gets its mode and group as bind makes it (the thread's own umask and
	 * fsgid). An owner other than the daemon cannot be had that way (bind creates the
	 * file as the fsuid, which must be able to write the directory), so it is set right
	 * after, by lchown in the daemon's own directory (engine_dir_secure: nobody else can
	 * put another name there); until then the file is the daemon's, and its mode lets
	 * nobody else connect.
	 */
	AN_ASSERT(owner == (uid_t)-1 || (mode & 077) == 0); /* only its owner (and root) */
	mode_t old_mask = umask(~mode & 0777);
	int old_fsgid = group != (gid_t)-1 ? setfsgid(group) : -1;
	ret = bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1 ? -errno : 0;
	if (group != (gid_t)-1)
		setfsgid((gid_t)old_fsgid);
	umask(old_mask);
	if (ret == 0 && owner != (uid_t)-1 && lchown(path, owner, (gid_t)-1) == -1)
		ret = -errno;
	if (ret == 0 && listen(fd, 4096) == -1)
		ret = -errno;
	if (ret != 0) {
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * Makes sandbox <id>'s directory in <socket_dir>/sandboxes, never reusing what
 * it did not make: <fresh> (a new registration) removes whatever is in its
 * place first (completely, core/layout.h) and makes it exclusively; otherwise
 * (a sandbox of the policy file, or one re-adopted after a restart, whose
 * `agentsnet run` may still have the directory mounted) an existing one is
 * kept only if it is a directory of ours that nobody else can write. 0 or
 * -errno, logged naming the directory.
 */
static int sandbox_dir_make(const char *socket_dir, const char *id, bool fresh, const char *dir)
{
	char parent[PATH_MAX];
	struct stat st;

	int ret = layout_sandbox_dir(socket_dir, "x", parent, sizeof(parent));
	AN_ASSERT(ret == 0); /* shorter than <dir>, which fitted */
	parent[strlen(parent) - 2] = '\0';
	int pfd = engine_dir_secure(parent, 0755);
	if (pfd < 0)
		return pfd;
	if (fresh) {
		ret = layout_sandbox_dir_remove(socket_dir, id);
		if (ret != 0)
			log_error("sandbox %s: %s is left from before and cannot be removed: %s",
				  id, dir, strerror(-ret));
	}
	if (ret == 0) {
		mode_t old = umask(022);
		ret = mkdirat(pfd, id, 0755) == -1 ? -errno : 0;
		umask(old);
	}
	if (ret == -EEXIST && !fresh) {
		int fd = openat(pfd, id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		/* Only what is there decides: a failure of our own (no descriptor left) is its. */
		bool theirs = fd == -1 && (errno == ENOTDIR || errno == ELOOP);
		ret = fd == -1 ? -errno : fstat(fd, &st) == -1 ? -errno : 0;
		theirs = theirs || (ret == 0 && !dir_ours(&st));
		if (fd >= 0)
			close(fd);
		if (theirs) {
			ret = -EPERM;
			log_error(
			    "sandbox %s: %s exists and is not a directory of the daemon's that "
			    "nobody else can write: refused (remove it)",
			    id, dir);
		} else if (ret != 0) {
			log_error("sandbox %s: %s: %s", id, dir, strerror(-ret));
		}
	} else if (ret != 0 && ret != -ENOTEMPTY) {
		log_error("sandbox %s: mkdir %s: %s", id, dir, strerror(-ret));
	}
	close(pfd);
	return ret;
}

bool engine_socket_listening(int fd, bool nonblock)
{
	int listening = 0, type = 0;
	socklen_t len = sizeof(int);

	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening)
		return false;
	len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
		return false;
	int flags = fcntl(fd, F_GETFL);
	return flags != -1 &&
	       fcntl(fd, F_SETFL, nonblock ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) == 0;
}

/* Whether <fd> is a stream socket bound at <path> and listening, made non-blocking. */
static bool unix_listening_at(int fd, const char *path)
{
	struct sockaddr_un sun = { 0 };
	socklen_t len = sizeof(sun);

	if (getsockname(fd, (struct sockaddr *)&sun, &len) != 0 || sun.sun_family != AF_UNIX ||
	    len <= offsetof(struct sockaddr_un, sun_path) ||
	    strncmp(sun.sun_path, path, sizeof(sun.sun_path)) != 0)
		return false;
	return engine_socket_listening(fd, true);
}

/* The owner and mode listen_unix gives <sb>'s socket. */
static void socket_wanted(const struct engine_sandbox *sb, uid_t *owner, mode_t *mode)
{
	bool any = sb->agent_uid == ENGINE_AGENT_ANY;
	*owner = any ? geteuid() : (uid_t)sb->agent_uid;
	*mode = any ? 0666 : 0600;
}

/*
 * Whether <fd>, given back by the service manager, still is the listening
 * socket at sb->path with the owner and mode listen_unix would give it: then
 * it is the sandbox's, with what waits in its queue. *<bound_here> says
 * whether it was bound at the path at all (then the file is its, and may be
 * replaced if it does not fit).
 */
static bool inherited_fits(const struct engine_sandbox *sb, int fd, bool *bound_here,
			   struct stat *st)
{
	struct sockaddr_un sun = { 0 };
	socklen_t len = sizeof(sun);
	uid_t owner;
	mode_t mode;

	memset(st, 0, sizeof(*st));
	*bound_here = getsockname(fd, (struct sockaddr *)&sun, &len) == 0 &&
		      sun.sun_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path) &&
		      strncmp(sun.sun_path, sb->path, sizeof(sun.sun_path)) == 0;
	if (!*bound_here || !unix_listening_at(fd, sb->path))
		return false;
	socket_wanted(sb, &owner, &mode);
	return lstat(sb->path, st) == 0 && S_ISSOCK(st->st_mode) && (st->st_mode & 0777) == mode &&
	       st->st_uid == owner;
}

int listen_unix(struct engine_sandbox *sb, const char *socket_dir, bool fresh, int inherited,
		const char *from, bool predecessor_serves)
{
	char dir[PATH_MAX];
	uid_t owner;
	mode_t mode;

	socket_wanted(sb, &owner, &mode);
	int ret = layout_sandbox_dir(socket_dir, sb->id, dir, sizeof(dir));
	int n = ret == 0 ? snprintf(sb->path, sizeof(sb->path), "%s/egress.sock", dir) : 0;
	if (ret == 0 && (n < 0 || (size_t)n >= sizeof(sb->path))) {
		log_error("sandbox %s: socket path %s/egress.sock is longer than %zu bytes", sb->id,
			  dir, sizeof(sb->path) - 1);
		ret = -ENAMETOOLONG;
	}
	if (ret == 0)
		ret = sandbox_dir_make(socket_dir, sb->id, fresh, dir);
	if (ret != 0) {
		if (inherited >= 0)
			close(
			    inherited); /* the manager still keeps it; dropped at the start's end */
		return ret;
	}
	if (inherited >= 0) {
		bool bound_here = false;
		struct stat st;
		if (!fresh && inherited_fits(sb, inherited, &bound_here, &st)) {
			log_info("sandbox %s: serving the socket %s kept", sb->id, from);
			sb->listen_fd = inherited;
			return 0;
		}
		close(inherited);
		if (bound_here && predecessor_serves && lstat(sb->path, &st) == 0) {
			/* Its file is the old daemon's, serving its agent: never taken from it. */
			log_error(
			    "sandbox %s: the socket %s passed, %s, is uid %u's with mode %04o, "
			    "and this policy makes it uid %u's with mode %04o: an upgrade "
			    "keeps every socket as it is, so the old daemon goes on serving; "
			    "restart the daemon to apply the change",
			    sb->id, from, sb->path, (unsigned)st.st_uid,
			    (unsigned)(st.st_mode & 07777), (unsigned)owner, (unsigned)mode);
			return -EEXIST;
		}
		/* Its file is the kept socket's, which the manager still holds open: made anew. */
		if (bound_here && unlink(sb->path) == -1 && errno != ENOENT)
			log_warn("sandbox %s: unlink %s: %s", sb->id, sb->path, strerror(errno));
	}
	/* An agent's uid known: its alone (and root's); the kernel refuses everyone else. */
	bool any = sb->agent_uid == ENGINE_AGENT_ANY;
	int fd = engine_listen_unix(sb->path, mode, any ? (uid_t)-1 : owner, (gid_t)-1, true);
	if (fd < 0) {
		log_error("sandbox %s: %s: %s", sb->id, sb->path, strerror(-fd));
		if (fresh) /* made for this add alone: nothing of it stays */
			(void)layout_sandbox_dir_remove(socket_dir, sb->id);
		return fd;
	}
	sb->listen_fd = fd;
	return 0;
}

/* "a.b.c.d:port" or "[v6]:port" (as the loader normalised it) into <out>. 0 or -EINVAL. */
static int parse_inet_addr(const char *text, struct sockaddr_storage *out, socklen_t *len)
{
	char host[64];
	struct http1_authority au;

	if (http1_authority_split(text, strlen(text), &au) != 0 || au.host_len >= sizeof(host))
		return -EINVAL;
	memcpy(host, au.host, au.host_len);
	host[au.host_len] = '\0';
	uint16_t port = au.port;
	memset(out, 0, sizeof(*out));
	struct sockaddr_in *v4 = (struct sockaddr_in *)out;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(port);
		*len = sizeof(*v4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
		*len = sizeof(*v6);
		return 0;
	}
	return -EINVAL;
}

/*
 * A listening TCP socket on <text> (with <reuseport>, SO_REUSEPORT: one per
 * worker); <what> names it in logs.
 */
static int listen_inet_as(const char *what, const char *text, bool reuseport)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	int one = 1;

	if (parse_inet_addr(text, &ss, &len) != 0) {
		log_error("%s %s: not an address:port", what, text);
		return -EINVAL;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
	    (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == -1) ||
	    bind(fd, (struct sockaddr *)&ss, len) == -1 || listen(fd, 4096) == -1) {
		int ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

static int listen_inet(const char *what, const char *text)
{
	return listen_inet_as(what, text, true);
}

int engine_listen_inet(const char *text, bool nonblock)
{
	int fd = listen_inet_as("metrics.listen", text, false);

	if (fd >= 0 && !nonblock && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
		int ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

bool engine_inet_listening_on(int fd, const char *text)
{
	struct sockaddr_storage want, have;
	socklen_t want_len = 0, have_len = sizeof(have);

	if (parse_inet_addr(text, &want, &want_len) != 0 ||
	    getsockname(fd, (struct sockaddr *)&have, &have_len) != 0 || have_len != want_len ||
	    memcmp(&have, &want, want_len) != 0)
		return false;
	return engine_socket_listening(fd, true);
}

/*
 * The socket named <prefix><index> a predecessor passed, when it listens on
 * <text>; else -1 (one that does not is closed: a changed address).
 */
static int inet_inherited(struct engine *e, const char *prefix, uint32_t index, const char *text)
{
	char name[NOTIFY_FDNAME_BYTES];

	snprintf(name, sizeof(name), "%s%u", prefix, index);
	int fd = engine_inherited_take(e, name);
	if (fd < 0)
		return -1;
	if (engine_inet_listening_on(fd, text))
		return fd;
	log_info("%s passed %s, which does not listen on %s: closed", inherited_source(e), name,
		 text);
	close(fd);
	if (e->manager != NULL)
		(void)notify_forget_fd(e->manager, name);
	return -1;
}

int listen_tcp(struct engine *e, const struct worker *w, const char *text)
{
	int fd = inet_inherited(e, ENGINE_FDNAME_TCP, w->index, text);

	if (fd >= 0)
		return fd;
	fd = listen_inet("tcp_listen", text);
	if (fd < 0 && fd != -EINVAL)
		log_error("tcp_listen %s: %s", text, strerror(-fd));
	return fd;
}

/*
 * The public listener of worker <w>: -errno when it cannot be had. On the
 * embedded default (cfg.ingress_optional) a port already taken turns the
 * gateway off with a warning instead, for every worker, and gives 0.
 */
int ingress_listen(struct engine *e, struct worker *w)
{
	const struct config *cfg = e->cfg;

	AN_ASSERT(cfg->ingress_listen != NULL);
	if (!e->ingress_on)
		return 0;
	int fd = inet_inherited(e, ENGINE_FDNAME_INGRESS, w->index, cfg->ingress_listen);
	if (fd < 0)
		fd = listen_inet("ingress.listen", cfg->ingress_listen);
	if (fd == -EADDRINUSE && cfg->ingress_optional && w->index == 0) {
		log_warn("ingress %s: %s: the gateway is off (give the daemon another "
			 "address with --ingress ADDR)",
			 cfg->ingress_listen, strerror(-fd));
		e->ingress_on = false;
		return 0;
	}
	if (fd < 0) {
		if (fd != -EINVAL)
			log_error("ingress %s: %s", cfg->ingress_listen, strerror(-fd));
		return fd;
	}
	if (worker_ingress_listener_add(w, fd, false) != 0) {
		close(fd);
		return -ENOMEM;
	}
	engine_inet_listener_note(e, ENGINE_FDNAME_INGRESS, NULL, fd);
	if (e->ingress_tls && worker_ingress_listener_add(w, e->ingress_internal_fd, true) != 0)
		return -ENOMEM;
	return 0;
}

int inet_listeners_adopt_rest(struct engine *e)
{
	const struct config *cfg = e->cfg;
	uint32_t next = 0;

	for (uint32_t i = 0; i < e->inherited_count; i++) {
		struct notify_fd *kept = &e->inherited[i];
		bool ingress =
		    strncmp(kept->name, ENGINE_FDNAME_INGRESS, strlen(ENGINE_FDNAME_INGRESS)) == 0;
		bool tcp = strncmp(kept->name, ENGINE_FDNAME_TCP, strlen(ENGINE_FDNAME_TCP)) == 0;
		const char *text = ingress && e->ingress_on     ? cfg->ingress_listen
				   : tcp && e->tcp_sandbox >= 0 ? cfg->tcp_listen
								: NULL;
		if (kept->fd < 0 || text == NULL || !engine_inet_listening_on(kept->fd, text))
			continue; /* closed with the rest (inherited_drop) */
		struct worker *w = &e->workers[next++ % e->worker_count];
		int ret = ingress
			      ? worker_ingress_listener_add(w, kept->fd, false)
			      : worker_listener_add(w, kept->fd, (uint32_t)e->tcp_sandbox, true);
		if (ret != 0)
			return ret;
		log_info("%s passed %s, more than this daemon's workers make: worker %u serves it",
			 inherited_source(e), kept->name, w->index);
		engine_inet_listener_note(e, ingress ? ENGINE_FDNAME_INGRESS : ENGINE_FDNAME_TCP,
					  kept->name, kept->fd);
		kept->fd = -1;
	}
	return 0;
}

_Static_assert(LAYOUT_SOCKET_DIR_BYTES_MAX + sizeof("/" LAYOUT_INTERNAL_INGRESS_SOCKET) <=
		   sizeof(((struct sockaddr_un *)0)->sun_path),
	       "the internal socket's path fits under any socket_dir the policy takes");
_Static_assert(sizeof("/" LAYOUT_INTERNAL_INGRESS_SOCKET) >= sizeof("/control.sock"),
	       "the internal socket's is the longest fixed path under socket_dir");

/*
 * With TLS on the public listener: the internal socket the decrypted
 * connections come back in on, in a directory only the daemon may enter
 * (no sandbox mounts it). 0 or -errno, logged.
 */
int ingress_internal_open(struct engine *e)
{
	const struct config *cfg = e->cfg;
	char dir[PATH_MAX];
	socklen_t len = 0;

	AN_ASSERT(e->ingress_tls && e->ingress_internal_fd < 0);
	if (parse_inet_addr(cfg->ingress_listen, &e->ingress_addr, &len) != 0)
		return -EINVAL;
	struct sockaddr_un *sun = &e->ingress_internal;
	int m = snprintf(sun->sun_path, sizeof(sun->sun_path), "%s/" LAYOUT_INTERNAL_INGRESS_SOCKET,
			 cfg->socket_dir);
	if (m <= 0 || (size_t)m >= sizeof(sun->sun_path)) {
		log_error("ingress: %s/" LAYOUT_INTERNAL_INGRESS_SOCKET ": path too long",
			  cfg->socket_dir);
		return -ENAMETOOLONG;
	}
	snprintf(dir, sizeof(dir), "%s", sun->sun_path);
	*strrchr(dir, '/') = '\0'; /* <socket_dir>/internal */
	sun->sun_family = AF_UNIX;
	int ret = engine_dir_secure(dir, 0700);
	if (ret >= 0) {
		close(ret);
		ret = 0;
	}
	int kept = ret == 0 ? engine_inherited_take(e, ENGINE_FDNAME_INGRESS_INTERNAL) : -1;
	if (kept >= 0 && unix_listening_at(kept, sun->sun_path)) {
		e->ingress_internal_fd = kept; /* the old daemon's TLS front may still connect */
		return 0;
	}
	if (kept >= 0)
		close(kept);
	int fd =
	    ret == 0 ? engine_listen_unix(sun->sun_path, 0600, (uid_t)-1, (gid_t)-1, true) : ret;
	if (fd < 0) {
		log_error("ingress: %s: %s", sun->sun_path, strerror(-fd));
		return fd;
	}
	e->ingress_internal_fd = fd;
	return 0;
}

/* <dir>/ingress.sock into <path>: 0, or -ENAMETOOLONG. */
static int ingress_socket_path(const char *dir, char path[PATH_MAX])
{
	int n = snprintf(path, PATH_MAX, "%s/" LAYOUT_INGRESS_SOCKET, dir);
	return n > 0 && n < PATH_MAX ? 0 : -ENAMETOOLONG;
}

/*
 * The ingress socket of owned sandbox <id>, <dir>/ingress.sock, made by the
 * daemon in its own directory (mode 0600: only the daemon connects) and
 * listening; the caller passes it to the owner, whose bridge accepts on it.
 * The fd, or -errno (logged).
 */
int ingress_socket_make(const char *id, const char *dir)
{
	char path[PATH_MAX];

	int fd = ingress_socket_path(dir, path);
	if (fd == 0)
		fd = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, false);
	if (fd < 0)
		log_error("sandbox %s: %s/ingress.sock: %s", id, dir, strerror(-fd));
	return fd;
}

void ingress_socket_remove(const char *dir)
{
	char path[PATH_MAX];

	if (ingress_socket_path(dir, path) == 0)
		(void)unlink(path);
}
