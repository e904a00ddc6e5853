/*
 * Engine start and stop: listeners and worker threads.
 *
 * Each sandbox's egress socket is <socket_dir>/sandboxes/<id>/egress.sock, in
 * a directory of its own so a sandbox can be given that directory as a mount
 * (a file bind mount pins the inode and is stranded when the socket is
 * re-created). A path already bound by a live process is refused
 * (-EADDRINUSE): the daemon never unlinks a socket someone is serving. A
 * stale one (connect refused) is replaced. Sandboxes are spread over the
 * workers round-robin; the optional TCP listener is bound once per worker
 * with SO_REUSEPORT so the kernel spreads its connections over the cores.
 */
#include "core/engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/an.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/worker.h"

static int mkdir_one(const char *path, mode_t mode)
{
	if (mkdir(path, mode) == -1 && errno != EEXIST)
		return -errno;
	return 0;
}

static int mkdir_parents(const char *dir, mode_t mode)
{
	char tmp[PATH_MAX];

	if (strlen(dir) >= sizeof(tmp))
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof(tmp), "%s", dir);
	for (char *p = tmp + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		int ret = mkdir_one(tmp, mode);
		*p = '/';
		if (ret != 0)
			return ret;
	}
	return mkdir_one(tmp, mode);
}

/* -EADDRINUSE when a live process serves <sun>, 0 when the path is free or stale. */
static int socket_path_claim(const struct sockaddr_un *sun)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -errno;
	int ret = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
	int err = errno;
	close(fd);
	if (ret == 0)
		return -EADDRINUSE;
	if (err == ECONNREFUSED && unlink(sun->sun_path) == -1 && errno != ENOENT)
		return -errno;
	return 0;
}

static int listen_unix(struct engine_sandbox *sb, const char *socket_dir)
{
	char dir[PATH_MAX];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	snprintf(dir, sizeof(dir), "%s/sandboxes/%s", socket_dir, sb->id);
	int n = snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/egress.sock", dir);
	if (n < 0 || (size_t)n >= sizeof(sun.sun_path)) {
		log_error("sandbox %s: socket path %s/egress.sock is longer than %zu bytes", sb->id,
			  dir, sizeof(sun.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	int ret = mkdir_parents(dir, 0755);
	if (ret == 0)
		ret = socket_path_claim(&sun);
	if (ret != 0) {
		log_error("sandbox %s: %s: %s", sb->id, sun.sun_path, strerror(-ret));
		return ret;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1 ||
	    chmod(sun.sun_path, 0666) == -1 || listen(fd, 4096) == -1) {
		ret = -errno;
		log_error("sandbox %s: %s: %s", sb->id, sun.sun_path, strerror(-ret));
		close(fd);
		return ret;
	}
	memcpy(sb->path, sun.sun_path, sizeof(sb->path));
	sb->listen_fd = fd;
	return 0;
}

static int parse_tcp_addr(const char *text, struct sockaddr_in *out)
{
	char host[64];
	const char *colon = strrchr(text, ':');

	if (colon == NULL || (size_t)(colon - text) >= sizeof(host))
		return -EINVAL;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	unsigned long port = 0;
	for (const char *d = colon + 1; *d != '\0'; d++) {
		if (*d < '0' || *d > '9' || port > 65535)
			return -EINVAL;
		port = port * 10 + (unsigned long)(*d - '0');
	}
	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	out->sin_port = htons((uint16_t)port);
	if (port == 0 || port > 65535 || inet_pton(AF_INET, host, &out->sin_addr) != 1)
		return -EINVAL;
	return 0;
}

static int listen_tcp(const char *text)
{
	struct sockaddr_in sin;
	int one = 1;

	if (parse_tcp_addr(text, &sin) != 0) {
		log_error("tcp_listen %s: not an IPv4 address:port", text);
		return -EINVAL;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == -1 ||
	    bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 || listen(fd, 4096) == -1) {
		int ret = -errno;
		log_error("tcp_listen %s: %s", text, strerror(-ret));
		close(fd);
		return ret;
	}
	return fd;
}

static uint32_t worker_count_for(const struct config *cfg)
{
	uint32_t n = cfg->workers;

	if (n == 0) {
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		n = cores > 0 ? (uint32_t)cores : 1u;
	}
	return n < LIMITS_WORKERS_MAX ? n : LIMITS_WORKERS_MAX;
}

static int sandboxes_open(struct engine *e)
{
	const struct config *cfg = e->cfg;

	e->sandbox_count = cfg->sandbox_count;
	e->sandboxes =
	    pool_calloc(cfg->sandbox_count ? cfg->sandbox_count : 1, sizeof(*e->sandboxes));
	if (e->sandboxes == NULL)
		return -ENOMEM;
	e->tcp_sandbox = -1;
	for (uint32_t i = 0; i < cfg->sandbox_count; i++) {
		struct engine_sandbox *sb = &e->sandboxes[i];
		AN_ASSERT(strlen(cfg->sandboxes[i].id) < sizeof(sb->id));
		snprintf(sb->id, sizeof(sb->id), "%s", cfg->sandboxes[i].id);
		sb->profile = cfg->sandboxes[i].profile;
		sb->worker = i % e->worker_count;
		sb->listen_fd = -1;
		if (cfg->tcp_sandbox != NULL && strcmp(cfg->tcp_sandbox, sb->id) == 0)
			e->tcp_sandbox = (int)i;
		int ret = listen_unix(sb, cfg->socket_dir);
		if (ret != 0)
			return ret;
	}
	if (cfg->tcp_listen != NULL && e->tcp_sandbox < 0) {
		log_error("tcp_sandbox %s: no such sandbox",
			  cfg->tcp_sandbox ? cfg->tcp_sandbox : "");
		return -EINVAL;
	}
	return 0;
}

static int worker_prepare(struct engine *e, struct worker *w, uint32_t index)
{
	const struct config *cfg = e->cfg;
	uint32_t n = 0;

	w->index = index;
	w->e = e;
	w->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (w->wake_fd == -1)
		return -errno;
	for (uint32_t i = 0; i < e->sandbox_count; i++)
		n += e->sandboxes[i].worker == index;
	n += cfg->tcp_listen != NULL;
	w->listeners = pool_calloc(n ? n : 1, sizeof(*w->listeners));
	if (w->listeners == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < e->sandbox_count; i++) {
		if (e->sandboxes[i].worker != index)
			continue;
		struct worker_listener *l = &w->listeners[w->listener_count++];
		*l = (struct worker_listener){ .w = w,
					       .fd = e->sandboxes[i].listen_fd,
					       .sandbox = i };
	}
	if (cfg->tcp_listen != NULL) {
		int fd = listen_tcp(cfg->tcp_listen);
		if (fd < 0)
			return fd;
		struct worker_listener *l = &w->listeners[w->listener_count++];
		*l = (struct worker_listener){
			.w = w, .fd = fd, .sandbox = (uint32_t)e->tcp_sandbox, .tcp = true
		};
	}
	return 0;
}

static void worker_release(struct worker *w)
{
	for (uint32_t i = 0; i < w->listener_count; i++) {
		if (w->listeners[i].tcp)
			close(w->listeners[i].fd);
	}
	AN_FREE(&w->listeners);
	if (w->wake_fd > 0)
		close(w->wake_fd);
	w->wake_fd = -1;
}

static void sandboxes_close(struct engine *e)
{
	for (uint32_t i = 0; i < e->sandbox_count && e->sandboxes != NULL; i++) {
		struct engine_sandbox *sb = &e->sandboxes[i];
		if (sb->listen_fd < 0)
			continue;
		close(sb->listen_fd);
		unlink(sb->path);
		sb->listen_fd = -1;
	}
	AN_FREE(&e->sandboxes);
}

static void workers_join(struct engine *e, uint32_t started)
{
	for (uint32_t i = 0; i < started; i++) {
		uint64_t one = 1;
		ssize_t ret = write(e->workers[i].wake_fd, &one, sizeof(one));
		AN_ASSERT(ret == (ssize_t)sizeof(one));
	}
	for (uint32_t i = 0; i < started; i++)
		pthread_join(e->workers[i].thread, NULL);
	for (uint32_t i = 0; i < e->worker_count; i++)
		worker_release(&e->workers[i]);
	AN_FREE(&e->workers);
	sandboxes_close(e);
}

int engine_start(struct engine *e)
{
	uint32_t started = 0;

	e->worker_count = worker_count_for(e->cfg);
	e->workers = pool_calloc(e->worker_count, sizeof(*e->workers));
	if (e->workers == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < e->worker_count; i++)
		e->workers[i].wake_fd = -1;
	int ret = sandboxes_open(e);
	for (uint32_t i = 0; ret == 0 && i < e->worker_count; i++)
		ret = worker_prepare(e, &e->workers[i], i);
	for (; ret == 0 && started < e->worker_count; started++) {
		ret = -pthread_create(&e->workers[started].thread, NULL, worker_main,
				      &e->workers[started]);
		if (ret != 0)
			break;
	}
	while (atomic_load(&e->workers_ready) < started)
		sched_yield();
	for (uint32_t i = 0; ret == 0 && i < started; i++)
		ret = e->workers[i].start_error;
	if (ret != 0) {
		workers_join(e, started);
		return ret;
	}
	log_info("serving %u sandboxes on %u workers%s%s", e->sandbox_count, e->worker_count,
		 e->cfg->tcp_listen ? ", tcp " : "", e->cfg->tcp_listen ? e->cfg->tcp_listen : "");
	return 0;
}

int engine_stop(struct engine *e)
{
	atomic_store(&e->stop, true);
	workers_join(e, e->worker_count);
	return atomic_load(&e->leaks) == 0 ? 0 : -EFAULT;
}
