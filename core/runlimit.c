/*
 * The daemon's cgroups for unprivileged runs (core/runlimit.h): who may ask,
 * the move checked through a pidfd, and the removal once the sandbox is gone.
 */
#include "core/runlimit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/an.h"
#include "core/layout.h"
#include "core/log.h"
#include "core/pool.h"

/* Owned sandboxes copied out of the table at once by runlimit_adopt. */
#define RUNLIMIT_ADOPT_BATCH 256

/* getsockopt: a pidfd of the peer as it connected (Linux 6.5; older glibc lacks the name). */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* A pidfd of the control connection's peer: SO_PEERPIDFD, else pidfd_open of <pid>. */
static int peer_pidfd(int sock, pid_t pid)
{
	int fd = -1;
	socklen_t len = sizeof(fd);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && fd >= 0)
		return fd;
	long got = syscall(SYS_pidfd_open, pid, 0);
	return got < 0 ? -errno : (int)got;
}

/* Whether the process behind <pidfd> has not exited (a pidfd polls readable once it has). */
static bool pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

struct owner_find {
	const char *id;
	bool found;
	struct engine_owner owner;
};

static void owner_find_one(void *arg, const struct engine_sandbox *sb)
{
	struct owner_find *f = arg;

	if (strcmp(sb->id, f->id) == 0) {
		f->found = true;
		f->owner = sb->owner;
	}
}

/* Whether sandbox <id> is registered, owned by the process <o> names (pid and start). */
static bool owned_by(struct engine *e, const char *id, const struct engine_owner *o, bool *found)
{
	struct owner_find f = { .id = id };

	engine_sandbox_foreach(e, &f, owner_find_one);
	if (found != NULL)
		*found = f.found;
	return f.found && f.owner.pid == o->pid && f.owner.start_ticks == o->start_ticks;
}

static int list_add(struct runlimits *l, struct runlimit *r)
{
	if (l->n == l->cap) {
		size_t cap = l->cap == 0 ? 8 : l->cap * 2;
		struct runlimit **v = pool_realloc(l->v, cap * sizeof(*v));
		if (v == NULL)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = r;
	return 0;
}

static bool list_has(const struct runlimits *l, const char *id, const struct engine_owner *o)
{
	for (size_t i = 0; i < l->n; i++) {
		const struct runlimit *r = l->v[i];
		if (strcmp(r->id, id) == 0 && r->owner.pid == o->pid &&
		    r->owner.start_ticks == o->start_ticks)
			return true;
	}
	return false;
}

/* ---- The records of the cgroups made (core/runlimit.h) ---- */

/* "<socket_dir>/cgroups" into <dir>, and with <name> "<dir>/<name>" into <path>. */
static int record_paths(const struct runlimits *l, const char *name, char *dir, char *path)
{
	if (l->socket_dir == NULL || layout_cgroups_dir(l->socket_dir, dir, PATH_MAX) != 0)
		return -ENOENT;
	int n = name != NULL ? snprintf(path, PATH_MAX, "%s/%s", dir, name) : 0;
	return n >= 0 && n < PATH_MAX ? 0 : -ENAMETOOLONG;
}

/* Records <r>'s cgroup under <name> (<id>.<pid>); logged when it cannot. */
static void record_write(const struct runlimits *l, const struct runlimit *r, const char *name)
{
	char dir[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX + 8], text[2 * PATH_MAX + 16];

	if (record_paths(l, name, dir, path) != 0)
		return;
	int dfd = engine_dir_secure(dir, 0700);
	if (dfd < 0)
		return; /* logged, naming the directory */
	close(dfd);
	int len = snprintf(text, sizeof(text), "v%d\n%s\n%s\n", r->cg.version, r->cg.pids_dir,
			   r->cg.memory_dir);
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	int rc =
	    fd >= 0 && len > 0 && (size_t)len < sizeof(text) && write(fd, text, (size_t)len) == len
		? 0
		: -(errno != 0 ? errno : EIO);
	if (fd >= 0)
		close(fd);
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc != 0) {
		unlink(tmp);
		log_warn("sandbox %s: recording its cgroup in %s: %s (a daemon restart while it "
			 "runs would leave it)",
			 r->id, path, strerror(-rc));
	}
}

static void record_drop(const struct runlimits *l, const char *name)
{
	char dir[PATH_MAX], path[PATH_MAX];

	if (record_paths(l, name, dir, path) == 0 && unlink(path) != 0 && errno != ENOENT)
		log_warn("cgroup record %s: %s", path, strerror(errno));
}

/*
 * Whether <path> is "" or a cgroup the daemon made under <root> for <name>:
 * ".../agentsnet/<name>", no "..": a record is the daemon's own file, but
 * what it names is removed by root, so it must name nothing else.
 */
static bool record_dir_ok(const char *path, const char *root, const char *name)
{
	char tail[CONFIG_SANDBOX_ID_BYTES_MAX + 32];

	if (path[0] == '\0')
		return true;
	snprintf(tail, sizeof(tail), "/" CGROUP_PARENT_NAME "/%s", name);
	size_t n = strlen(path), t = strlen(tail), r = strlen(root);
	return strncmp(path, root, r) == 0 && path[r] == '/' && n > t &&
	       strcmp(path + n - t, tail) == 0 && strstr(path, "/..") == NULL;
}

/* Reads the record <path> of <name> into <cg>: 0, or -EINVAL for one that is not ours. */
static int record_read(const char *path, const char *root, const char *name,
		       struct cgroup_sandbox *cg)
{
	char text[2 * PATH_MAX + 16];

	ssize_t n = engine_read_small(path, O_NOFOLLOW, text, sizeof(text));
	if (n < 0)
		return n == -ENODATA ? -EINVAL : (int)n;
	char *pids = strchr(text, '\n');
	char *memory = pids != NULL ? strchr(pids + 1, '\n') : NULL;
	char *end = memory != NULL ? strchr(memory + 1, '\n') : NULL;
	if (end == NULL || end[1] != '\0' ||
	    (strncmp(text, "v1\n", 3) != 0 && strncmp(text, "v2\n", 3) != 0))
		return -EINVAL;
	*pids++ = '\0';
	*memory++ = '\0';
	*end = '\0';
	if (strlen(pids) >= sizeof(cg->pids_dir) || strlen(memory) >= sizeof(cg->memory_dir) ||
	    !record_dir_ok(pids, root, name) || !record_dir_ok(memory, root, name))
		return -EINVAL;
	cg->version = text[1] - '0';
	memcpy(cg->pids_dir, pids, strlen(pids) + 1);
	memcpy(cg->memory_dir, memory, strlen(memory) + 1);
	return 0;
}

/* Drops the record of <r>'s cgroup, gone now. */
static void record_drop_of(const struct runlimits *l, const struct runlimit *r)
{
	char name[CONFIG_SANDBOX_ID_BYTES_MAX + 16];

	snprintf(name, sizeof(name), "%s.%d", r->id, (int)r->owner.pid);
	record_drop(l, name);
}

/* Whether <l> holds the cgroup named <name> (<id>.<pid>). */
static bool list_has_name(const struct runlimits *l, const char *name)
{
	char have[CONFIG_SANDBOX_ID_BYTES_MAX + 16];

	for (size_t i = 0; i < l->n; i++) {
		snprintf(have, sizeof(have), "%s.%d", l->v[i]->id, (int)l->v[i]->owner.pid);
		if (strcmp(have, name) == 0)
			return true;
	}
	return false;
}

/* One record no run is back for: its cgroup removed now, or listed to retry while busy. */
static void record_sweep_one(struct runlimits *l, const char *dir, const char *name)
{
	char path[PATH_MAX];
	const char *root = l->root != NULL ? l->root : CGROUP_ROOT_DEFAULT;
	struct runlimit *r = pool_calloc(1, sizeof(*r));
	const char *dot = strrchr(name, '.');

	if (r == NULL)
		return;
	int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
	size_t id_len = dot != NULL ? (size_t)(dot - name) : 0;
	int rc = n > 0 && (size_t)n < sizeof(path) && id_len > 0 && id_len < sizeof(r->id)
		     ? record_read(path, root, name, &r->cg)
		     : -EINVAL;
	if (rc == 0) {
		memcpy(r->id, name, id_len);
		r->owner.pid = -1; /* no process is its owner: never kept for one */
		rc = cgroup_remove_now(&r->cg);
	}
	if (rc == -EBUSY && list_add(l, r) == 0) {
		log_info("sandbox %s: its run's cgroup is still busy; removed once empty", r->id);
		return;
	}
	if (rc == 0 || rc == -ENOENT)
		log_info("cgroup %s of a run that ended while no daemon ran: removed", name);
	else
		log_warn("cgroup record %s: %s (left)", path, strerror(-rc));
	if (rc != -EINVAL)
		record_drop(l, name);
	pool_free(r);
}

static void records_sweep(struct runlimits *l)
{
	char dir[PATH_MAX], path[PATH_MAX];

	if (record_paths(l, NULL, dir, path) != 0)
		return;
	DIR *d = opendir(dir);
	if (d == NULL)
		return;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		if (de->d_name[0] == '.' || (n > 4 && strcmp(de->d_name + n - 4, ".new") == 0) ||
		    list_has_name(l, de->d_name))
			continue;
		record_sweep_one(l, dir, de->d_name);
	}
	closedir(d);
}

/* Makes <r>'s cgroup, nested under <pid>'s own, and moves <pid> in while <pidfd> lives. */
static int make_and_enter(const struct runlimits *l, struct runlimit *r, pid_t pid, int pidfd,
			  uint64_t pids_max, uint64_t memory_max_bytes, char *err, size_t err_len)
{
	char name[CONFIG_SANDBOX_ID_BYTES_MAX + 16];

	snprintf(name, sizeof(name), "%s.%d", r->id, (int)pid);
	int rc = cgroup_create_under(&r->cg, l->root, name, pid, pids_max, memory_max_bytes, err,
				     err_len);
	/* No hierarchy or controller for it, or none this daemon may make a cgroup in
	 * (core/cgroup.h: the caller falls back): unsupported here, not a failure. */
	bool cannot_here = rc == -ENOENT || rc == -EACCES || rc == -EPERM || rc == -EROFS;
	if (rc != 0)
		return cannot_here ? -EOPNOTSUPP : rc;
	rc = cgroup_enter(&r->cg, pid, err, err_len);
	/* Alive after the write: the pid was still its own when written (never reused). */
	if (rc == 0 && !pidfd_alive(pidfd)) {
		snprintf(err, err_len, "the caller exited while it was moved");
		rc = -ESRCH;
	}
	if (rc != 0)
		(void)cgroup_remove(&r->cg);
	return rc;
}

int runlimit_apply(struct runlimits *l, struct engine *e, const char *id, int sock, pid_t peer_pid,
		   uint64_t pids_max, uint64_t memory_max_bytes, char *err, size_t err_len)
{
	struct engine_owner now = { 0 };
	bool found = false;

	AN_ASSERT(err_len > 0);
	err[0] = '\0';
	if (pids_max == 0 && memory_max_bytes == 0) {
		snprintf(err, err_len, "no limit asked for");
		return -EINVAL;
	}
	if (peer_pid <= 0) {
		snprintf(err, err_len, "the caller's process is not known");
		return -EACCES;
	}
	int pidfd = peer_pidfd(sock, peer_pid);
	if (pidfd < 0) {
		snprintf(err, err_len, "pidfd of the caller: %s", strerror(-pidfd));
		return pidfd == -ESRCH ? -ESRCH : ENGINE_ERR_SYSTEM(-pidfd);
	}
	/* Read while the pidfd's process lives: then <now> is that process's, not a successor's. */
	int rc = engine_owner_of(peer_pid, &now) == 0 && pidfd_alive(pidfd) ? 0 : -ESRCH;
	if (rc != 0)
		snprintf(err, err_len, "the caller exited");
	else if (!owned_by(e, id, &now, &found)) {
		snprintf(err, err_len,
			 found ? "sandbox %s is not owned by the calling process" : "no sandbox %s",
			 id);
		rc = found ? -EACCES : -ENOENT;
	} else if (list_has(l, id, &now)) {
		snprintf(err, err_len, "sandbox %s has its cgroup already", id);
		rc = -EEXIST;
	}
	struct runlimit *r = rc == 0 ? pool_calloc(1, sizeof(*r)) : NULL;
	if (rc == 0 && r == NULL) {
		snprintf(err, err_len, "out of memory");
		rc = -ENOMEM;
	}
	if (rc == 0) {
		snprintf(r->id, sizeof(r->id), "%s", id);
		r->owner = now;
		rc =
		    make_and_enter(l, r, peer_pid, pidfd, pids_max, memory_max_bytes, err, err_len);
		/* Any other failure of the making or the move (an EEXIST of a cgroup left
		 * behind, an EACCES of cgroup.procs) is the system's, not a refusal whose code
		 * an errno of the same value names. */
		if (rc != 0 && rc != -EOPNOTSUPP && rc != -ESRCH)
			rc = ENGINE_ERR_SYSTEM(-rc);
	}
	if (rc == 0) {
		rc = list_add(l, r); /* 0 or -ENOMEM */
		if (rc != 0) {
			/* The caller stays in it: leave the cgroup to the kernel's empty-tree rules. */
			snprintf(err, err_len, "out of memory");
			(void)cgroup_remove_now(&r->cg);
		}
	}
	if (rc == 0) {
		char name[CONFIG_SANDBOX_ID_BYTES_MAX + 16];
		snprintf(name, sizeof(name), "%s.%d", id, (int)peer_pid);
		record_write(l, r, name);
	}
	if (rc != 0)
		pool_free(r);
	close(pidfd);
	return rc;
}

struct adopt_list {
	size_t n;
	struct {
		char id[CONFIG_SANDBOX_ID_BYTES_MAX];
		struct engine_owner owner;
	} v[RUNLIMIT_ADOPT_BATCH];
	size_t skip, seen; /* owned sandboxes before this batch, and seen in this walk */
};

static void adopt_one(void *arg, const struct engine_sandbox *sb)
{
	struct adopt_list *a = arg;

	if (sb->owner.pid <= 0)
		return;
	if (a->seen++ < a->skip || a->n == RUNLIMIT_ADOPT_BATCH)
		return;
	snprintf(a->v[a->n].id, sizeof(a->v[a->n].id), "%s", sb->id);
	a->v[a->n].owner = sb->owner;
	a->n++;
}

void runlimit_adopt(struct runlimits *l, struct engine *e)
{
	struct adopt_list *a = pool_calloc(1, sizeof(*a));

	if (a == NULL)
		return;
	/* In batches, so the table's lock is never held over a /proc read. */
	for (bool more = true; more;) {
		a->n = 0;
		a->seen = 0;
		engine_sandbox_foreach(e, a, adopt_one);
		more = a->seen > a->skip + a->n;
		a->skip += a->n;
		for (size_t i = 0; i < a->n; i++) {
			char name[CONFIG_SANDBOX_ID_BYTES_MAX + 16];
			struct runlimit *r = pool_calloc(1, sizeof(*r));
			if (r == NULL)
				break;
			snprintf(name, sizeof(name), "%s.%d", a->v[i].id, (int)a->v[i].owner.pid);
			snprintf(r->id, sizeof(r->id), "%s", a->v[i].id);
			r->owner = a->v[i].owner;
			if (cgroup_of_process(&r->cg, l->root, a->v[i].owner.pid, name) != 0 ||
			    list_add(l, r) != 0) {
				pool_free(r);
				continue;
			}
			log_info("sandbox %s: its run's cgroup adopted (pid %d)", r->id,
				 (int)r->owner.pid);
		}
		if (a->n == 0)
			break;
	}
	pool_free(a);
	records_sweep(l);
}

void runlimit_collect(struct runlimits *l, struct engine *e)
{
	size_t kept = 0;

	for (size_t i = 0; i < l->n; i++) {
		struct runlimit *r = l->v[i];
		if (owned_by(e, r->id, &r->owner, NULL)) {
			l->v[kept++] = r;
			continue;
		}
		int rc = cgroup_remove_now(&r->cg);
		if (rc == -EBUSY && r->cg.version != 0) {
			l->v[kept++] = r; /* the caller is still in it: next tick */
			continue;
		}
		if (rc != 0)
			log_warn("sandbox %s: its cgroup: rmdir: %s", r->id, strerror(-rc));
		else
			record_drop_of(l, r);
		pool_free(r);
	}
	l->n = kept;
}

void runlimit_free(struct runlimits *l)
{
	for (size_t i = 0; i < l->n; i++) {
		struct runlimit *r = l->v[i];
		int rc = cgroup_remove_now(&r->cg);
		if (rc != 0)
			log_warn("sandbox %s: its cgroup left at stop: %s (the next daemon removes "
				 "it once empty)",
				 r->id, strerror(-rc));
		else
			record_drop_of(l, r);
		pool_free(r);
	}
	AN_FREE(&l->v);
	l->n = 0;
	l->cap = 0;
}
