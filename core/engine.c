/*
 * The engine: start and stop, the sandbox table.
 *
 * engine_start checks the socket directory (the daemon's own, under
 * ancestors that are root's or its own), opens the policy file's sandboxes,
 * prepares one worker per core with its listeners, starts them and waits
 * until every one serves, then re-adopts the registry's run-time sandboxes.
 * engine_stop joins the workers and closes every listener, leaving the
 * registry for the next start.
 *
 * The sandbox table (LIMITS_SANDBOXES_MAX slots, at most as many active as
 * the descriptors allow) is written under engine.lock by the control path
 * (add, remove, the orphans' reaping, a reload) or at start-up. Sandboxes are
 * spread over the workers round-robin; a slot reaches its worker through a
 * command, and is reused only once that worker has dropped it.
 *
 * The sockets and the directories they are made in are core/listen.c's, the
 * on-disk registry of run-time sandboxes core/registry.c's, the policy swap
 * (a reload) core/reload.c's; what the four share is core/engine_int.h.
 * Called by the daemon (tools/agentsnetd/main.c) and the control socket
 * (core/control.c).
 */
#include "core/engine.h"
#include "core/engine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/ingress.h"
#include "core/layout.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/procstart.h"
#include "core/timer.h"
#include "core/watch.h"
#include "core/worker.h"

static uint32_t worker_count_for(const struct config *cfg)
{
	uint32_t n = cfg->workers;

	if (n == 0) {
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		n = cores > 0 ? (uint32_t)cores : 1u;
	}
	return n < LIMITS_WORKERS_MAX ? n : LIMITS_WORKERS_MAX;
}

bool engine_sandbox_id_valid(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n >= CONFIG_SANDBOX_ID_BYTES_MAX || id[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = id[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			  (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
		if (!ok)
			return false;
	}
	return true;
}

/* CLOCK_MONOTONIC in milliseconds: a sandbox's age. */
static uint64_t engine_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int sandbox_find(const struct engine *e, const char *id)
{
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state != ENGINE_SANDBOX_FREE && strcmp(sb->id, id) == 0)
			return (int)i;
	}
	return -1;
}

uint32_t engine_sandboxes_max_for(uint64_t nofile, uint32_t workers, uint32_t pipes_per_worker)
{
	uint64_t held = LIMITS_FDS_RESERVED + (uint64_t)workers * (2u * (uint64_t)pipes_per_worker +
								   LIMITS_FDS_PER_WORKER);
	uint64_t left = nofile > held ? nofile - held : 0;
	uint32_t max = left < LIMITS_SANDBOXES_MAX ? (uint32_t)left : LIMITS_SANDBOXES_MAX;
	AN_ASSERT(max <= LIMITS_SANDBOXES_MAX);
	return max;
}

/* The bound engine_sandboxes_max_for gives for this process, logged when it binds. */
static uint32_t sandboxes_max_here(const struct engine *e)
{
	struct rlimit nofile = { .rlim_cur = RLIM_INFINITY };

	if (getrlimit(RLIMIT_NOFILE, &nofile) != 0)
		nofile.rlim_cur = RLIM_INFINITY;
	uint32_t max =
	    engine_sandboxes_max_for(nofile.rlim_cur, e->worker_count, e->cfg->pipes_per_worker);
	if (max < LIMITS_SANDBOXES_MAX)
		log_info("at most %u sandboxes: one descriptor each, of %llu open files", max,
			 (unsigned long long)nofile.rlim_cur);
	return max;
}

/*
 * A free slot, allocating a new one past sandbox_used if needed; -ENOSPC when
 * full (LIMITS_SANDBOXES_MAX, or as many listeners as the descriptors allow),
 * -ENOMEM when a new one cannot be had.
 */
static int sandbox_slot(struct engine *e)
{
	if (e->sandbox_active >= e->sandboxes_max)
		return -ENOSPC;
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		if (e->sandboxes[i]->state == ENGINE_SANDBOX_FREE)
			return (int)i;
	}
	if (e->sandbox_used == LIMITS_SANDBOXES_MAX)
		return -ENOSPC;
	struct engine_sandbox *sb = pool_calloc(1, sizeof(*sb));
	if (sb == NULL)
		return -ENOMEM;
	sb->listen_fd = -1;
	e->sandboxes[e->sandbox_used] = sb;
	return (int)e->sandbox_used++;
}

struct snapshot *snapshot_now(const struct engine *e)
{
	return atomic_load_explicit(&e->current, memory_order_relaxed);
}

void snapshot_sandbox_set(const struct engine *e, struct snapshot *s, int idx, uint32_t profile)
{
	struct snapshot_sandbox *slot = &s->sandboxes[idx];

	AN_ASSERT(idx >= 0 && (uint32_t)idx < LIMITS_SANDBOXES_MAX);
	AN_ASSERT(profile < s->profiles);
	e->ops->profile_limits(s->policy, profile, &slot->limits);
	slot->profile = profile;
	slot->known = true;
}

/*
 * Sets <sb>'s ingress token: <token> (the registry's, INGRESS_TOKEN_CHARS of
 * base64url), or one drawn now from the kernel's random source. 0 or -errno.
 */
static int sandbox_token_set(struct engine_sandbox *sb, const char *token)
{
	uint8_t raw[INGRESS_TOKEN_RAW_BYTES];

	if (token != NULL) {
		AN_ASSERT(strlen(token) == INGRESS_TOKEN_CHARS);
		memcpy(sb->ingress_token, token, INGRESS_TOKEN_CHARS + 1);
		return 0;
	}
	/* At most 256 bytes: never a short read (getrandom(2)); the pool is ready by now. */
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		int err = errno;
		log_error("sandbox %s: getrandom for its ingress token: %s", sb->id, strerror(err));
		return -err;
	}
	ingress_token_encode(raw, sb->ingress_token);
	explicit_bzero(raw, sizeof(raw));
	AN_ASSERT(strlen(sb->ingress_token) == INGRESS_TOKEN_CHARS);
	return 0;
}

/* The manager's name for sandbox <id>'s listening socket (ENGINE_FDNAME_PREFIX). */
static void sandbox_fdname(const char *id, char *out, size_t cap)
{
	snprintf(out, cap, "%s%s", ENGINE_FDNAME_PREFIX, id);
}

static int inherited_by_name(const void *a, const void *b)
{
	return strcmp(((const struct notify_fd *)a)->name, ((const struct notify_fd *)b)->name);
}

int engine_inherited_take(struct engine *e, const char *name)
{
	struct notify_fd key = { .fd = -1 };

	if (e->inherited_count == 0 || strlen(name) >= sizeof(key.name))
		return -1;
	memcpy(key.name, name, strlen(name) + 1);
	struct notify_fd *hit = bsearch(&key, e->inherited, e->inherited_count,
					sizeof(*e->inherited), inherited_by_name);
	if (hit == NULL || hit->fd < 0)
		return -1;
	int fd = hit->fd;
	hit->fd = -1;
	return fd;
}

/* The socket kept for sandbox <id> (engine_inherited_take); -1: none. */
static int inherited_take(struct engine *e, const char *id)
{
	char name[NOTIFY_FDNAME_BYTES];

	sandbox_fdname(id, name, sizeof(name));
	return engine_inherited_take(e, name);
}

int engine_stale_note(struct engine *e, const char *id)
{
	if (e->stale_count == e->stale_cap) {
		uint32_t cap = e->stale_cap > 0 ? 2 * e->stale_cap : 16;
		void *grown = pool_realloc(e->stale_ids, (size_t)cap * sizeof(*e->stale_ids));
		if (grown == NULL) {
			log_warn("sandbox %s: no memory to note its files for removal: left", id);
			return -ENOMEM;
		}
		e->stale_ids = grown;
		e->stale_cap = cap;
	}
	snprintf(e->stale_ids[e->stale_count++], sizeof(*e->stale_ids), "%s", id);
	return 0;
}

int engine_kept_record_note(struct engine *e, const char *id, const struct engine_owner *owner,
			    uint32_t uid, bool holds_uid)
{
	if (e->kept_record_count == e->kept_record_cap) {
		uint32_t cap = e->kept_record_cap > 0 ? 2 * e->kept_record_cap : 8;
		void *grown = pool_realloc(e->kept_records, (size_t)cap * sizeof(*e->kept_records));
		if (grown == NULL) {
			log_warn("sandbox %s: no memory to note its record's process: the record "
				 "and its uid kept until the daemon stops",
				 id);
			return -ENOMEM;
		}
		e->kept_records = grown;
		e->kept_record_cap = cap;
	}
	struct engine_kept_record *k = &e->kept_records[e->kept_record_count++];
	snprintf(k->id, sizeof(k->id), "%s", id);
	k->owner = *owner;
	k->uid = uid;
	k->holds_uid = holds_uid;
	return 0;
}

/* Sandbox <id> is noted for removal at engine_commit already. */
static bool stale_noted(const struct engine *e, const char *id)
{
	for (uint32_t i = 0; i < e->stale_count; i++)
		if (strcmp(e->stale_ids[i], id) == 0)
			return true;
	return false;
}

/*
 * Closes what was passed and nothing took, and has the manager forget them;
 * a sandbox's socket file goes at engine_commit, but for one whose registry
 * record registry_adopt kept (a start that could not adopt it): that record
 * and its directory stay for the next start.
 */
static void inherited_drop(struct engine *e)
{
	size_t prefix = strlen(ENGINE_FDNAME_PREFIX);

	for (uint32_t i = 0; i < e->inherited_count; i++) {
		const char *name = e->inherited[i].name;
		if (e->inherited[i].fd < 0)
			continue;
		log_info("%s passed %s, which names nothing this daemon serves: closed",
			 inherited_source(e), name);
		close(e->inherited[i].fd);
		e->inherited[i].fd = -1;
		if (e->manager != NULL)
			(void)notify_forget_fd(e->manager, name);
		const char *id = name + prefix;
		if (strncmp(name, ENGINE_FDNAME_PREFIX, prefix) == 0 &&
		    engine_sandbox_id_valid(id) && !(registry_has(e, id) && !stale_noted(e, id)))
			(void)engine_stale_note(e, id);
	}
	e->inherited_count = 0;
}

void engine_commit(struct engine *e)
{
	char dir[PATH_MAX];

	AN_ASSERT(!e->predecessor_serves);
	for (uint32_t i = 0; i < e->stale_count; i++) {
		const char *id = e->stale_ids[i];
		pthread_mutex_lock(&e->lock);
		bool served = sandbox_find(e, id) >= 0; /* registered again since the start */
		if (!served && registry_has(e, id)) {
			registry_drop(e, id); /* its record and directory */
			log_info("sandbox %s: not served by this daemon: its record and directory "
				 "removed",
				 id);
		} else if (!served &&
			   layout_sandbox_dir(e->cfg->socket_dir, id, dir, sizeof(dir)) == 0) {
			/* A file sandbox the policy dropped: its socket goes, as a reload's. */
			int dfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			struct stat st;
			if (dfd >= 0 &&
			    fstatat(dfd, "egress.sock", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISSOCK(st.st_mode) && unlinkat(dfd, "egress.sock", 0) == 0)
				log_info("sandbox %s: not served by this daemon: %s/egress.sock "
					 "removed",
					 id, dir);
			if (dfd >= 0)
				close(dfd);
		}
		pthread_mutex_unlock(&e->lock);
	}
	AN_FREE(&e->stale_ids);
	e->stale_count = 0;
	e->stale_cap = 0;
}

void engine_inet_listener_note(struct engine *e, const char *prefix, const char *name, int fd)
{
	uint32_t same = 0;

	AN_ASSERT(e->inet_listener_count < e->inet_listener_cap);
	for (uint32_t i = 0; i < e->inet_listener_count; i++)
		same += strncmp(e->inet_listeners[i].name, prefix, strlen(prefix)) == 0;
	struct notify_fd *n = &e->inet_listeners[e->inet_listener_count++];
	if (name != NULL)
		snprintf(n->name, sizeof(n->name), "%s", name);
	else
		snprintf(n->name, sizeof(n->name), "%s%u", prefix, same);
	n->fd = fd;
	/* Kept by the manager too, as each sandbox's socket is: a restart refuses no client. */
	if (e->manager != NULL) {
		int err = notify_store_fd(e->manager, n->name, fd);
		if (err != 0)
			log_warn("%s: the service manager keeps no copy of it: %s", n->name,
				 strerror(-err));
	}
}

int engine_handover_list(struct engine *e, uint32_t extra, struct notify_fd **out, uint32_t *count)
{
	pthread_mutex_lock(&e->lock);
	uint32_t cap = e->sandbox_used + e->inet_listener_count + 2 + extra;
	struct notify_fd *list = pool_calloc(cap, sizeof(*list));
	uint32_t n = 0;
	for (uint32_t i = 0; list != NULL && i < e->sandbox_used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state != ENGINE_SANDBOX_ACTIVE || sb->listen_fd < 0)
			continue;
		sandbox_fdname(sb->id, list[n].name, sizeof(list[n].name));
		list[n++].fd = sb->listen_fd;
	}
	pthread_mutex_unlock(&e->lock);
	if (list == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < e->inet_listener_count; i++)
		list[n++] = e->inet_listeners[i];
	if (e->ingress_internal_fd >= 0) {
		snprintf(list[n].name, sizeof(list[n].name), "%s", ENGINE_FDNAME_INGRESS_INTERNAL);
		list[n++].fd = e->ingress_internal_fd;
	}
	if (e->metrics_fd >= 0) {
		snprintf(list[n].name, sizeof(list[n].name), "%s", ENGINE_FDNAME_METRICS);
		list[n++].fd = e->metrics_fd;
	}
	AN_ASSERT(n + extra <= cap);
	*out = list;
	*count = n;
	return 0;
}

void engine_hand_over(struct engine *e)
{
	atomic_store(&e->handed_over, true);
	if (e->stop_request != NULL)
		e->stop_request(e->stop_request_arg);
}

/*
 * Fills slot <idx> for <id> on profile <profile> of the current snapshot and
 * opens its socket; the slot stays FREE on failure. Caller holds the lock
 * (or is start-up).
 */
static int sandbox_open(struct engine *e, int idx, const char *id, uint32_t profile, bool dynamic,
			bool fresh, uint32_t agent_uid, const char *token)
{
	struct engine_sandbox *sb = e->sandboxes[idx];
	struct snapshot *now = snapshot_now(e);

	AN_ASSERT(sb->state == ENGINE_SANDBOX_FREE);
	AN_ASSERT(atomic_load_explicit(&sb->conns, memory_order_relaxed) == 0);
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	int ret = sandbox_token_set(sb, token);
	if (ret != 0)
		return ret;
	snprintf(sb->profile_name, sizeof(sb->profile_name), "%s",
		 e->ops->profile_name(now->policy, profile));
	snapshot_sandbox_set(e, now, idx, profile);
	sb->generation++;
	sb->opened_ms = engine_now_ms();
	__atomic_store_n(&sb->ingress_rate.tat_us, 0, __ATOMIC_RELAXED);
	sb->dynamic = dynamic;
	sb->agent_uid = agent_uid;
	atomic_store(&sb->quarantined, false);
	sb->worker = e->next_worker++ % e->worker_count;
	/* A uid of the pool is one sandbox's: given now (or named by the registry, re-adopted). */
	bool pooled = uidpool_contains(&e->uids, agent_uid);
	ret = pooled ? uidpool_take(&e->uids, agent_uid) : 0;
	if (ret != 0) {
		log_error("sandbox %s: uid %u is another sandbox's already", id, agent_uid);
		return -EBUSY;
	}
	int kept = inherited_take(e, id);
	ret = listen_unix(sb, e->cfg->socket_dir, fresh, kept, inherited_source(e),
			  e->predecessor_serves);
	if (ret != 0) {
		if (pooled)
			uidpool_release(&e->uids, agent_uid);
		if (kept >= 0 && e->manager != NULL) {
			char name[NOTIFY_FDNAME_BYTES];
			sandbox_fdname(id, name, sizeof(name));
			(void)notify_forget_fd(e->manager, name); /* listen_unix closed ours */
		}
		return ret;
	}
	if (e->manager != NULL) {
		char name[NOTIFY_FDNAME_BYTES];
		sandbox_fdname(id, name, sizeof(name));
		int err = notify_store_fd(e->manager, name, sb->listen_fd);
		if (err != 0)
			log_warn("sandbox %s: the service manager keeps no copy of its socket: %s",
				 id, strerror(-err));
	}
	sb->state = ENGINE_SANDBOX_ACTIVE;
	e->sandbox_active++;
	return 0;
}

/*
 * Closes sandbox <sb>'s slot. Its socket goes with it, and the manager's copy
 * too, unless <for_next>: the daemon stops, and a manager keeps the socket
 * (and its file) for the next one.
 */
static void sandbox_close(struct engine *e, struct engine_sandbox *sb, bool for_next)
{
	explicit_bzero(sb->ingress_token, sizeof(sb->ingress_token));
	if (sb->listen_fd >= 0) {
		close(sb->listen_fd);
		/* Kept for the next daemon: by the manager, or by a successor serving it already. */
		bool kept = (e->manager != NULL && notify_on(e->manager)) ||
			    atomic_load(&e->handed_over) || e->predecessor_serves;
		if (!for_next || !kept)
			unlink(sb->path);
		if (!for_next && e->manager != NULL) {
			char name[NOTIFY_FDNAME_BYTES];
			sandbox_fdname(sb->id, name, sizeof(name));
			(void)notify_forget_fd(e->manager, name);
		}
		sb->listen_fd = -1;
	}
	if (sb->state != ENGINE_SANDBOX_FREE) {
		e->sandbox_active--;
		uidpool_release(&e->uids, sb->agent_uid);
	}
	sb->state = ENGINE_SANDBOX_FREE;
}

ssize_t engine_read_small(const char *path, int flags, char *buf, size_t cap)
{
	AN_ASSERT(cap > 1);
	int fd = open(path, O_RDONLY | O_CLOEXEC | flags);
	if (fd == -1)
		return -errno;
	ssize_t n = read(fd, buf, cap - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return -err;
	buf[n] = '\0';
	return n > 0 ? n : -ENODATA;
}

int engine_owner_of(int32_t pid, struct engine_owner *o)
{
	uint64_t ticks = 0;

	if (proc_start_ticks(pid, &ticks) != 0)
		return -ESRCH;
	o->pid = pid;
	o->start_ticks = ticks;
	return 0;
}

static int sandboxes_open(struct engine *e)
{
	const struct config *cfg = e->cfg;

	e->sandboxes = pool_calloc(LIMITS_SANDBOXES_MAX, sizeof(*e->sandboxes));
	if (e->sandboxes == NULL)
		return -ENOMEM;
	/* A test's host check survives; no range (count 0): root's sandboxes get no uid. */
	if (cfg->sandbox_uid_count > 0 &&
	    uidpool_init(&e->uids, cfg->sandbox_uid_first, cfg->sandbox_uid_count,
			 e->uids.host_free) != 0)
		return -ENOMEM;
	e->tcp_sandbox = -1;
	for (uint32_t i = 0; i < cfg->sandbox_count; i++) {
		int idx = sandbox_slot(e);
		if (idx == -ENOSPC && e->sandbox_active >= e->sandboxes_max) {
			log_error(
			    "%u sandboxes in the policy file, room for %u (a descriptor each)",
			    cfg->sandbox_count, e->sandboxes_max);
			return -EMFILE;
		}
		if (idx < 0)
			return idx;
		const char *id = cfg->sandboxes[i].id;
		size_t room = layout_sandbox_id_room(cfg->socket_dir, false);
		if (strlen(id) > room) {
			log_error(
			    "sandbox %s (the policy file's): its id is %zu bytes; socket_dir %s "
			    "leaves room for %zu (its egress socket's path must fit the 107 "
			    "bytes of a Unix socket's)",
			    id, strlen(id), cfg->socket_dir, room);
			return -ENAMETOOLONG;
		}
		int ret = sandbox_open(e, idx, id, cfg->sandboxes[i].profile, false, false,
				       cfg->sandboxes[i].agent_uid, NULL);
		if (ret != 0)
			return ret;
		if (cfg->tcp_sandbox != NULL && strcmp(cfg->tcp_sandbox, id) == 0)
			e->tcp_sandbox = idx;
	}
	if (cfg->tcp_listen != NULL && e->tcp_sandbox < 0) {
		log_error("tcp_sandbox %s: no such sandbox",
			  cfg->tcp_sandbox ? cfg->tcp_sandbox : "");
		return -EINVAL;
	}
	return 0;
}

/* Supplementary groups of a registrant looked up for admission (more: only the first ones). */
#define ENGINE_REGISTRANT_GROUPS_MAX 256

/*
 * Whether <policy> still lets <uid> register on profile <profile_name>: its
 * groups as the host's group database has them now (the kernel's list at
 * registration is gone); a uid the host no longer knows is only itself.
 * Root, and the policy file's own registrations (uid 0), always are.
 */
bool registrant_admitted(const struct engine *e, const void *policy, const char *profile_name,
			 uint32_t uid)
{
	gid_t gids[ENGINE_REGISTRANT_GROUPS_MAX];
	uint32_t groups[ENGINE_REGISTRANT_GROUPS_MAX];
	char buf[4096];
	struct passwd pw, *found = NULL;

	int profile = e->ops->profile_index(policy, profile_name);
	if (uid == 0 || e->ops->profile_admits == NULL)
		return true;
	if (profile < 0)
		return false;
	struct verdict_caller who = { .uid = uid, .gid = UINT32_MAX, .groups = groups };
	if (getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &found) == 0 && found != NULL) {
		int n = ENGINE_REGISTRANT_GROUPS_MAX;
		who.gid = (uint32_t)pw.pw_gid;
		if (getgrouplist(pw.pw_name, pw.pw_gid, gids, &n) == -1)
			n = ENGINE_REGISTRANT_GROUPS_MAX; /* the first ones: a refusal errs safe */
		for (int i = 0; i < n; i++)
			groups[i] = (uint32_t)gids[i];
		who.group_count = (uint32_t)n;
	}
	return e->ops->profile_admits(policy, (uint32_t)profile, &who);
}

static int worker_prepare(struct engine *e, struct worker *w, uint32_t index)
{
	const struct config *cfg = e->cfg;

	w->index = index;
	w->e = e;
	pthread_mutex_init(&w->cmd_lock, NULL);
	pthread_cond_init(&w->cmd_done, NULL);
	w->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (w->wake_fd == -1)
		return -errno;
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state != ENGINE_SANDBOX_ACTIVE || sb->worker != index)
			continue;
		if (worker_listener_add(w, sb->listen_fd, i, false) != 0)
			return -ENOMEM;
	}
	for (uint32_t i = 0; e->ingress_on && i < e->sandbox_used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state == ENGINE_SANDBOX_ACTIVE &&
		    ingress_routes_put(&w->routes, sb->id, strlen(sb->id), i, sb->ingress_token) !=
			0)
			return -ENOMEM;
	}
	if (cfg->ingress_listen != NULL) {
		int ret = ingress_listen(e, w);
		if (ret != 0)
			return ret;
	}
	if (cfg->tcp_listen != NULL) {
		int fd = listen_tcp(e, w, cfg->tcp_listen);
		if (fd < 0)
			return fd;
		if (worker_listener_add(w, fd, (uint32_t)e->tcp_sandbox, true) != 0) {
			close(fd);
			return -ENOMEM;
		}
		engine_inet_listener_note(e, ENGINE_FDNAME_TCP, NULL, fd);
	}
	return 0;
}

static void worker_release(struct worker *w)
{
	worker_listeners_free(w);
	ingress_routes_free(&w->routes); /* a worker prepared and never started: its own */
	if (w->wake_fd > 0)
		close(w->wake_fd);
	w->wake_fd = -1;
	pthread_mutex_destroy(&w->cmd_lock);
	pthread_cond_destroy(&w->cmd_done);
}

static void sandboxes_close(struct engine *e)
{
	for (uint32_t i = 0; i < e->sandbox_used && e->sandboxes != NULL; i++) {
		sandbox_close(e, e->sandboxes[i], true);
		AN_FREE(&e->sandboxes[i]);
	}
	AN_FREE(&e->sandboxes);
	e->sandbox_used = 0;
	uidpool_free(&e->uids);
}

static void workers_join(struct engine *e, uint32_t started)
{
	atomic_store(&e->stop, true);
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
	if (e->ingress_internal_fd >= 0) {
		close(e->ingress_internal_fd);
		if (!atomic_load(&e->handed_over) && !e->predecessor_serves)
			unlink(e->ingress_internal.sun_path); /* else another daemon's too */
	}
	e->ingress_internal_fd = -1;
	AN_FREE(&e->inet_listeners); /* the workers closed them */
	e->inet_listener_count = 0;
}

/* Frees every snapshot: the workers are gone. One still held is a leak, kept as evidence. */
static void snapshots_free(struct engine *e)
{
	struct snapshot *s = atomic_load(&e->current);

	if (s == NULL && e->policy != NULL)
		e->ops->release(e->policy); /* the start failed before taking it */
	if (s != NULL)
		s->older = e->retired;
	else
		s = e->retired;
	while (s != NULL) {
		struct snapshot *older = s->older;
		if (atomic_load(&s->holders) == 0)
			snapshot_destroy(s, e->ops);
		s = older;
	}
	atomic_store(&e->current, NULL);
	e->retired = NULL;
	e->policy = NULL;
	AN_FREE(&e->seen);
}

/* The start-up snapshot, generation 1, of e->policy. 0 or -ENOMEM. */
static int snapshot_first(struct engine *e)
{
	AN_ASSERT(e->policy != NULL && e->worker_count > 0);
	e->seen = pool_calloc(e->worker_count, sizeof(*e->seen));
	struct snapshot *s =
	    e->seen != NULL ? snapshot_create(e->policy, 1, e->worker_count) : NULL;
	if (s == NULL)
		return -ENOMEM;
	s->profiles = e->ops->profile_count(e->policy);
	s->rules = e->ops->rule_count(e->policy);
	atomic_store_explicit(&e->current, s, memory_order_release);
	return 0;
}

/*
 * Sandbox <idx>'s token when its profile requires one (NULL: not), into
 * <token> (CONFIG_INGRESS_TOKEN_BYTES); -EACCES when <who> is neither root
 * nor its registrant. Caller holds the lock.
 */
static int sandbox_url_token(struct engine *e, int idx, const struct verdict_caller *who,
			     char *token, const char **out)
{
	const struct snapshot *now = snapshot_now(e);
	const struct engine_sandbox *sb = e->sandboxes[idx];

	*out = NULL;
	if (AN_NEVER(!now->sandboxes[idx].known))
		return -ENOENT;
	if (!e->ops->profile_ingress(now->policy, now->sandboxes[idx].profile)->token_required)
		return 0;
	if (who != NULL && who->uid != 0 && who->uid != sb->registrant)
		return -EACCES;
	memcpy(token, sb->ingress_token, CONFIG_INGRESS_TOKEN_BYTES);
	*out = token;
	return 0;
}

int engine_ingress_url(struct engine *e, const char *id, const struct verdict_caller *who,
		       char *out, size_t cap)
{
	const struct config *cfg = e->cfg;
	char token_buf[CONFIG_INGRESS_TOKEN_BYTES];
	const char *token = NULL;

	AN_ASSERT(id != NULL && out != NULL);
	if (!e->ingress_on)
		return -ENOTCONN;
	pthread_mutex_lock(&e->lock);
	int idx = sandbox_find(e, id);
	int ret = idx >= 0 ? sandbox_url_token(e, idx, who, token_buf, &token) : -ENOENT;
	pthread_mutex_unlock(&e->lock);
	if (ret != 0)
		return ret;
	char base[128]; /* "https://[<IPv6 address>]:<port>" at most */
	const char *scheme = e->ingress_tls ? "https" : "http";
	int n = snprintf(base, sizeof(base), "%s://%s", scheme, cfg->ingress_listen);
	if (n < 0 || (size_t)n >= sizeof(base))
		return -ENAMETOOLONG;
	ret = ingress_public_url(cfg->ingress_public_url != NULL ? cfg->ingress_public_url : base,
				 cfg->ingress_prefix, cfg->ingress_origins, id, token, out, cap);
	explicit_bzero(token_buf, sizeof(token_buf));
	return ret;
}

int engine_start(struct engine *e)
{
	uint32_t started = 0;

	pthread_mutex_init(&e->lock, NULL);
	e->worker_count = worker_count_for(e->cfg);
	e->workers = pool_calloc(e->worker_count, sizeof(*e->workers));
	int ret = e->workers != NULL ? snapshot_first(e) : -ENOMEM;
	if (ret != 0) {
		AN_FREE(&e->workers);
		snapshots_free(e);
		pthread_mutex_destroy(&e->lock);
		return ret;
	}
	for (uint32_t i = 0; i < e->worker_count; i++)
		e->workers[i].wake_fd = -1;
	e->ingress_on = e->cfg->ingress_listen != NULL;
	e->ingress_tls = e->ingress_on && e->cfg->ingress_tls_cert != NULL;
	e->ingress_internal_fd = -1;
	e->metrics_fd = -1; /* metrics_start's, after the start */
	/* Everything below is made in it: it must be ours, writable by nobody else, and so
	 * must every directory above it be (root's or ours, or sticky). */
	ret = engine_dir_ancestors_secure(e->cfg->socket_dir);
	if (ret == 0)
		ret = engine_dir_secure(e->cfg->socket_dir, 0755);
	if (ret >= 0) {
		close(ret);
		ret = 0;
	}
	e->sandboxes_max = sandboxes_max_here(e);
	if (e->inherited_count > 0)
		qsort(e->inherited, e->inherited_count, sizeof(*e->inherited), inherited_by_name);
	e->inet_listener_cap = 2 * e->worker_count + e->inherited_count;
	e->inet_listeners = pool_calloc(e->inet_listener_cap, sizeof(*e->inet_listeners));
	if (ret == 0 && e->inet_listeners == NULL)
		ret = -ENOMEM;
	if (ret == 0)
		ret = watch_start(e);
	if (ret == 0)
		ret = sandboxes_open(e);
	if (ret == 0 && e->ingress_tls)
		ret = ingress_internal_open(e);
	for (uint32_t i = 0; ret == 0 && i < e->worker_count; i++)
		ret = worker_prepare(e, &e->workers[i], i);
	if (ret == 0)
		ret = inet_listeners_adopt_rest(e);
	for (; ret == 0 && started < e->worker_count; started++) {
		ret = -pthread_create(&e->workers[started].thread, NULL, worker_main,
				      &e->workers[started]);
		if (ret != 0)
			break;
		char name[16]; /* what top -H, ps -L and /proc/<pid>/task/<tid>/comm show */
		snprintf(name, sizeof(name), "an-worker%u", started % 1000u);
		(void)pthread_setname_np(e->workers[started].thread, name);
	}
	while (atomic_load(&e->workers_ready) < started)
		sched_yield();
	for (uint32_t i = 0; ret == 0 && i < started; i++)
		ret = e->workers[i].start_error;
	if (ret != 0) {
		workers_join(e, started);
		snapshots_free(e);
		watch_stop(e);
		pthread_mutex_destroy(&e->lock);
		return ret;
	}
	registry_adopt(e);
	inherited_drop(e); /* every sandbox that could take its socket back has */
	if (!e->features.setsockopt_cmd)
		log_warn("io_uring has no socket commands (Linux 6.7): an egress socket admits its "
			 "agent's uid by its mode alone; connections are not checked against it "
			 "(peer_not_agent)");
	size_t id_room = layout_sandbox_id_room(e->cfg->socket_dir, true);
	if (id_room == 0)
		log_warn(
		    "socket_dir %s is %zu bytes: no owned sandbox (agentsnet run's) can have its "
		    "sockets there, and its add is refused (bad_id), since a Unix socket's path "
		    "holds 107 bytes; a socket_dir of 20 bytes or fewer takes any id",
		    e->cfg->socket_dir, strlen(e->cfg->socket_dir));
	else if (id_room < CONFIG_SANDBOX_ID_BYTES_MAX - 1)
		log_warn("socket_dir %s leaves room for sandbox ids of %zu bytes (one more without "
			 "an ingress socket), not %u: a longer id's socket path would be over the "
			 "107 bytes a Unix socket's holds, and its add is refused (bad_id); a "
			 "socket_dir of 20 bytes or fewer takes any id",
			 e->cfg->socket_dir, id_room, CONFIG_SANDBOX_ID_BYTES_MAX - 1);
	log_info("serving %u sandboxes on %u workers%s%s%s%s", e->sandbox_active, e->worker_count,
		 e->cfg->tcp_listen ? ", tcp " : "", e->cfg->tcp_listen ? e->cfg->tcp_listen : "",
		 e->ingress_on ? ", ingress " : "", e->ingress_on ? e->cfg->ingress_listen : "");
	return 0;
}

int engine_stop(struct engine *e)
{
	AN_FREE(&e->stale_ids); /* engine_commit never ran: a start that did not commit */
	e->stale_count = 0;
	AN_FREE(&e->kept_records);
	e->kept_record_count = e->kept_record_cap = 0;
	workers_join(e, e->worker_count);
	snapshots_free(e);
	watch_stop(e);
	pthread_mutex_destroy(&e->lock);
	return atomic_load(&e->leaks) == 0 ? 0 : -EFAULT;
}

/*
 * Tells every worker's gateway that <id> is (or is no longer) sandbox slot
 * <idx>. A worker that gets no command (out of memory: logged) answers 404
 * for the sandbox; a removed one's stale route leads to a socket that is
 * gone (502), never to another sandbox: the socket's path is the id's.
 */
static void routes_post(struct engine *e, enum worker_cmd_kind kind, const char *id, uint32_t idx)
{
	const char *token = kind == WORKER_CMD_ROUTE_ADD ? e->sandboxes[idx]->ingress_token : NULL;

	AN_ASSERT(kind == WORKER_CMD_ROUTE_ADD || kind == WORKER_CMD_ROUTE_DEL);
	AN_ASSERT(idx < LIMITS_SANDBOXES_MAX);
	for (uint32_t i = 0; e->ingress_on && i < e->worker_count; i++) {
		if (worker_route_post(&e->workers[i], kind, id, idx, token) != 0)
			log_error("sandbox %s: no memory for worker %u's ingress route", id, i);
	}
}

/*
 * Opens sandbox <id> on profile <profile_name> of the current snapshot and
 * hands it to a worker: a run-time one (from the control socket or the
 * registry) is also recorded in the registry. Caller holds the lock. As
 * engine_sandbox_add.
 */
int sandbox_add_locked(struct engine *e, const char *id, const char *profile_name,
		       enum sandbox_origin origin, const struct engine_owner *owner,
		       uint32_t registrant, uint32_t agent_uid, const char *token, char *dir,
		       size_t cap, int *ingress_fd)
{
	bool dynamic = origin != SANDBOX_FROM_FILE;

	int profile = e->ops->profile_index(snapshot_now(e)->policy, profile_name);
	if (profile < 0)
		return -ENOENT;
	if (sandbox_find(e, id) >= 0)
		return -EEXIST;
	struct worker_cmd *cmd = pool_calloc(1, sizeof(*cmd));
	int idx = cmd != NULL ? sandbox_slot(e) : -ENOMEM;
	int ret = idx < 0 ? idx : 0;
	bool stepped = ret == 0; /* from here a failure is a socket or file step's */
	/* A registration's directory is made fresh, also over a record a restart could not
	 * adopt: an agent of that record's that still runs, its mount of the old directory,
	 * never reaches a sandbox registered again (maybe on another profile). */
	bool had_record = dynamic && registry_has(e, id);
	if (ret == 0)
		ret = sandbox_open(e, idx, id, (uint32_t)profile, dynamic,
				   origin == SANDBOX_FROM_CONTROL, agent_uid, token);
	(void)layout_sandbox_dir(e->cfg->socket_dir, id, dir, cap);
	/* The record is written last, so that no failed step replaces one there before. */
	if (ret == 0 && ingress_fd != NULL) {
		int fd = ingress_socket_make(id, dir);
		ret = fd < 0 ? fd : 0;
		*ingress_fd = fd < 0 ? -1 : fd;
	}
	/* A record re-adopted with its token is the record there: not written again, so a
	 * full disk does not keep a restart from serving it. */
	if (ret == 0 && dynamic && (origin == SANDBOX_FROM_CONTROL || token == NULL))
		ret = registry_write(e, id, profile_name, owner, registrant, agent_uid,
				     e->sandboxes[idx]->ingress_token);
	if (ret != 0 && ingress_fd != NULL && *ingress_fd >= 0) {
		close(*ingress_fd);
		*ingress_fd = -1;
		ingress_socket_remove(dir);
	}
	if (ret != 0 && idx >= 0 && e->sandboxes[idx]->state == ENGINE_SANDBOX_ACTIVE) {
		sandbox_close(e, e->sandboxes[idx], false);
		/* Only a record this add made goes: one there before (a record a restart could
		 * not adopt) stays for the next start, with its directory (registry_adopt). */
		if (origin == SANDBOX_FROM_CONTROL && !had_record)
			registry_drop(e, id);
	}
	if (ret != 0) {
		pool_free(cmd);
		return stepped && ret != -ENOMEM ? ENGINE_ERR_SYSTEM(-ret) : ret;
	}
	struct engine_sandbox *sb = e->sandboxes[idx];
	sb->owner = owner != NULL ? *owner : (struct engine_owner){ 0 };
	sb->registrant = registrant;
	*cmd = (struct worker_cmd){ .kind = WORKER_CMD_ADD, .sandbox = (uint32_t)idx };
	worker_cmd_post(&e->workers[sb->worker], cmd); /* the worker frees it */
	routes_post(e, WORKER_CMD_ROUTE_ADD, id, (uint32_t)idx);
	return 0;
}

/* The sandboxes <uid> registered that are still there (removing ones too). Caller holds the lock. */
static uint32_t registered_by(const struct engine *e, uint32_t uid)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		n += sb->state != ENGINE_SANDBOX_FREE && sb->dynamic && sb->registrant == uid;
	}
	return n;
}

/*
 * Who the agent of a sandbox <who> registers runs as, into *<agent_uid>: a
 * caller other than root its own uid only; root any uid outside the pool, or
 * one the pool gives now (ENGINE_AGENT_NEW). Caller holds the lock. 0,
 * -EACCES, -ERANGE or -EUSERS (as engine_sandbox_add).
 */
static int agent_uid_settle(struct engine *e, const struct verdict_caller *who, uint32_t *agent_uid)
{
	bool root = who == NULL || who->uid == 0;

	if (!root) {
		if (*agent_uid != ENGINE_AGENT_ANY && *agent_uid != who->uid)
			return -EACCES;
		*agent_uid = who->uid;
	}
	if (*agent_uid == ENGINE_AGENT_NEW)
		return e->uids.taken != NULL ? uidpool_pick(&e->uids, agent_uid) : -EUSERS;
	/* The pool's uids are given by the pool alone, so that one names one sandbox. */
	if (uidpool_contains(&e->uids, *agent_uid))
		return -ERANGE;
	return 0;
}

const char *engine_err_text(int ret)
{
	int err = engine_err_errno(ret);
	return strerror(err != 0 ? err : -ret);
}

int engine_sandbox_add(struct engine *e, const char *id, const char *profile_name,
		       const struct engine_owner *owner, const struct verdict_caller *who,
		       uint32_t *agent_uid, char *dir, size_t cap, int *ingress_fd)
{
	if (ingress_fd != NULL)
		*ingress_fd = -1;
	if (!engine_sandbox_id_valid(id))
		return -EINVAL;
	/* Refused as it is, before any step: its sockets' paths could not be made. */
	if (strlen(id) > layout_sandbox_id_room(e->cfg->socket_dir, ingress_fd != NULL))
		return -ENAMETOOLONG;
	pthread_mutex_lock(&e->lock);
	const void *policy = snapshot_now(e)->policy;
	int profile = e->ops->profile_index(policy, profile_name);
	int ret = 0;
	/* Asked of the snapshot the sandbox will be added on, under the same lock. */
	if (profile >= 0 && who != NULL && e->ops->profile_admits != NULL &&
	    !e->ops->profile_admits(policy, (uint32_t)profile, who))
		ret = -EACCES;
	/* A record a start could not adopt is its registrant's still (its agent may run on):
	 * only that uid or root registers its id again. */
	uint32_t kept_by = 0;
	if (ret == 0 && profile >= 0 && who != NULL && who->uid != 0 && sandbox_find(e, id) < 0 &&
	    registry_has(e, id)) {
		int read = registry_registrant(e, id, &kept_by, NULL);
		/* A malformed record is root's, as registry_read says of one without a registrant. */
		if (read == -EINVAL || (read == 0 && kept_by != who->uid))
			ret = -EEXIST;
		else if (read != 0)
			ret = ENGINE_ERR_SYSTEM(-read);
	}
	/* A caller other than root registers for its own uid, never for someone else's. */
	if (ret == 0 && profile >= 0 && sandbox_find(e, id) < 0)
		ret = agent_uid_settle(e, who, agent_uid);
	if (ret == 0 && who != NULL && who->uid != 0 && e->cfg->sandboxes_per_user != 0 &&
	    registered_by(e, who->uid) >= e->cfg->sandboxes_per_user)
		ret = -EDQUOT;
	/* A uid of the pool becomes the sandbox's in sandbox_open, and free again when it closes. */
	if (ret == 0)
		ret = sandbox_add_locked(e, id, profile_name, SANDBOX_FROM_CONTROL, owner,
					 who != NULL ? who->uid : 0, *agent_uid, NULL, dir, cap,
					 ingress_fd);
	pthread_mutex_unlock(&e->lock);
	return ret;
}

int engine_workers_answer(struct engine *e, uint32_t timeout_ms, uint32_t *late)
{
	int ret = 0;

	AN_ASSERT(e->workers != NULL && late != NULL);
	for (uint32_t i = 0; i < e->worker_count; i++) {
		struct worker *w = &e->workers[i];
		if (w->ping_posted)
			continue; /* still unanswered since the last call */
		w->ping = (struct worker_cmd){ .kind = WORKER_CMD_PING };
		worker_cmd_post(w, &w->ping);
		w->ping_posted = true;
	}
	for (uint32_t i = 0; i < e->worker_count; i++) {
		struct worker *w = &e->workers[i];
		if (worker_cmd_wait(w, &w->ping, timeout_ms) == 0) {
			w->ping_posted = false;
		} else if (ret == 0) {
			*late = i;
			ret = -ETIMEDOUT;
		}
	}
	return ret;
}

uint64_t engine_drain(struct engine *e, bool successor, uint32_t drain_ms)
{
	struct worker_counters open = { 0 };

	AN_ASSERT(e->workers != NULL);
	e->drain.until_ms = timer_now_ms() + drain_ms;
	/* A manager keeps every listener a successor would take but the internal one. */
	e->drain.all_handed_on = successor || e->manager != NULL;
	e->drain.sandboxes_handed_on = e->drain.all_handed_on;
	for (uint32_t i = 0; i < e->worker_count; i++) {
		struct worker *w = &e->workers[i];
		w->drain = (struct worker_cmd){ .kind = WORKER_CMD_DRAIN };
		worker_cmd_post(w, &w->drain);
	}
	/* Each worker completes it by the drain's end, a turn late at most; a wedged
	 * one is not waited for past a second more (engine_stop then joins it). */
	for (uint32_t i = 0; i < e->worker_count; i++)
		(void)worker_cmd_wait(&e->workers[i], &e->workers[i].drain, drain_ms + 1000u);
	for (uint32_t i = 0; i < e->worker_count; i++)
		worker_counters_add(&e->workers[i], &open);
	return open.conns_open;
}

void engine_status_line(struct engine *e, char *out, size_t cap)
{
	struct worker_counters sum = { 0 };

	AN_ASSERT(e->workers != NULL && cap > 0);
	for (uint32_t i = 0; i < e->worker_count; i++)
		worker_counters_add(&e->workers[i], &sum);
	pthread_mutex_lock(&e->lock);
	uint32_t sandboxes = e->sandbox_active;
	uint64_t generation = atomic_load_explicit(&e->current, memory_order_acquire)->generation;
	pthread_mutex_unlock(&e->lock);
	snprintf(out, cap, "serving %u sandboxes, %llu connections, policy generation %llu",
		 sandboxes, (unsigned long long)sum.conns_open, (unsigned long long)generation);
}

/* Whether <a> and <b> are one process: its pid, and its start time (the pid may be reused). */
static bool owner_same(const struct engine_owner *a, const struct engine_owner *b)
{
	return a->pid > 0 && a->pid == b->pid && a->start_ticks == b->start_ticks;
}

/*
 * Removes the record of run-time sandbox <id> that a start could not adopt,
 * with its directory, for its registrant or root (<who> NULL: root), and with
 * <only_owner> only for the process it is tied to; its uid of the pool stays
 * given while that process runs (its agent may run on; kept_records_reap).
 * Caller holds the lock. As sandbox_remove.
 */
static int kept_record_remove(struct engine *e, const char *id, const struct verdict_caller *who,
			      const struct engine_owner *only_owner, uint32_t *registrant_out)
{
	uint32_t kept_by = 0;
	struct engine_owner kept_owner = { 0 };
	int read = registry_registrant(e, id, &kept_by, &kept_owner);

	/* A malformed record is root's, as registry_read says of one without a registrant. */
	if (read != 0 && read != -EINVAL)
		return ENGINE_ERR_SYSTEM(-read);
	if (who != NULL && who->uid != 0 && (read != 0 || who->uid != kept_by)) {
		if (registrant_out != NULL)
			*registrant_out = kept_by;
		return -EACCES;
	}
	if (only_owner != NULL && (read != 0 || !owner_same(&kept_owner, only_owner)))
		return -ESTALE;
	registry_drop(e, id);
	log_info("sandbox %s: its record, which a start could not adopt, removed", id);
	return 0;
}

int sandbox_remove(struct engine *e, const char *id, bool file, const struct verdict_caller *who,
		   const struct engine_owner *only_owner, uint32_t *registrant_out)
{
	struct worker_cmd cmd = { .kind = WORKER_CMD_REMOVE };

	pthread_mutex_lock(&e->lock);
	int idx = sandbox_find(e, id);
	if (idx < 0 && !file && engine_sandbox_id_valid(id) && registry_has(e, id)) {
		int ret = kept_record_remove(e, id, who, only_owner, registrant_out);
		pthread_mutex_unlock(&e->lock);
		return ret;
	}
	int ret = idx < 0 ? -ENOENT : 0;
	struct engine_sandbox *sb = idx >= 0 ? e->sandboxes[idx] : NULL;
	if (ret == 0 && (sb->dynamic == file || sb->state != ENGINE_SANDBOX_ACTIVE))
		ret = sb->state != ENGINE_SANDBOX_ACTIVE || sb->dynamic ? -ENOENT : -EPERM;
	/* Only the user who registered it, or root, may take it away. */
	if (ret == 0 && who != NULL && who->uid != 0 && who->uid != sb->registrant)
		ret = -EACCES;
	/* A removal for one process's registration leaves any other under that id. */
	if (ret == 0 && only_owner != NULL && !owner_same(&sb->owner, only_owner))
		ret = -ESTALE;
	if (ret != 0) {
		if (ret == -EACCES && registrant_out != NULL)
			*registrant_out = sb->registrant;
		pthread_mutex_unlock(&e->lock);
		return ret;
	}
	sb->state = ENGINE_SANDBOX_REMOVING;
	routes_post(e, WORKER_CMD_ROUTE_DEL, id, (uint32_t)idx);
	cmd.sandbox = (uint32_t)idx;
	struct worker *w = &e->workers[sb->worker];
	worker_cmd_post(w, &cmd);
	pthread_mutex_unlock(&e->lock);
	/* The worker must be done with the slot before it is released. */
	while (worker_cmd_wait(w, &cmd, 5000) != 0)
		log_warn("sandbox %s: still closing its connections", id);
	pthread_mutex_lock(&e->lock);
	sandbox_close(e, sb, false);
	if (!file)
		registry_drop(e, id);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

int engine_sandbox_remove(struct engine *e, const char *id, const struct verdict_caller *who,
			  const struct engine_owner *only_owner, uint32_t *registrant)
{
	return sandbox_remove(e, id, false, who, only_owner, registrant);
}

struct owned_sandbox {
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	struct engine_owner owner;
};

static bool owner_alive(const struct engine_owner *o)
{
	struct engine_owner now;

	AN_ASSERT(o->pid > 0);
	if (kill(o->pid, 0) == -1 && errno == ESRCH)
		return false;
	return engine_owner_of(o->pid, &now) == 0 && now.start_ticks == o->start_ticks;
}

/*
 * Kept record <k>'s process is gone, and the sandbox it ran with it: the
 * record and the directory go while they are still that record's (not
 * removed, not registered again since), and the uid of the pool it held is
 * given back. Whether <k> was still noted.
 */
static bool kept_record_reap(struct engine *e, const struct engine_kept_record *k)
{
	uint32_t registrant = 0;
	struct engine_owner recorded = { 0 };
	bool noted = false;

	pthread_mutex_lock(&e->lock);
	for (uint32_t i = 0; i < e->kept_record_count && !noted; i++) {
		const struct engine_kept_record *at = &e->kept_records[i];
		if (strcmp(at->id, k->id) != 0 || !owner_same(&at->owner, &k->owner))
			continue;
		e->kept_records[i] = e->kept_records[--e->kept_record_count];
		noted = true;
	}
	if (noted && sandbox_find(e, k->id) < 0 && registry_has(e, k->id) &&
	    registry_registrant(e, k->id, &registrant, &recorded) == 0 &&
	    owner_same(&recorded, &k->owner)) {
		registry_drop(e, k->id);
		log_info("sandbox %s: its owner (pid %d) is gone; its record, which a start could "
			 "not adopt, removed with its directory",
			 k->id, (int)k->owner.pid);
	}
	if (noted && k->holds_uid) {
		uidpool_release(&e->uids, k->uid);
		log_info("sandbox %s: uid %u, which its record held, given back", k->id, k->uid);
	}
	pthread_mutex_unlock(&e->lock);
	return noted;
}

/* kept_record_reap for every kept record whose process is gone; owners checked outside the lock. */
static void kept_records_reap(struct engine *e)
{
	pthread_mutex_lock(&e->lock);
	uint32_t count = e->kept_record_count;
	struct engine_kept_record *list = count > 0 ? pool_calloc(count, sizeof(*list)) : NULL;
	if (list != NULL)
		memcpy(list, e->kept_records, (size_t)count * sizeof(*list));
	pthread_mutex_unlock(&e->lock);
	for (uint32_t i = 0; list != NULL && i < count; i++)
		if (!owner_alive(&list[i].owner))
			(void)kept_record_reap(e, &list[i]);
	pool_free(list);
}

uint32_t engine_sandbox_reap_orphans(struct engine *e)
{
	uint32_t owned = 0, removed = 0;

	pthread_mutex_lock(&e->lock);
	uint32_t used = e->sandbox_used;
	struct owned_sandbox *list = used > 0 ? pool_calloc(used, sizeof(*list)) : NULL;
	for (uint32_t i = 0; list != NULL && i < used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state != ENGINE_SANDBOX_ACTIVE || !sb->dynamic || sb->owner.pid <= 0)
			continue;
		memcpy(list[owned].id, sb->id, sizeof(sb->id));
		list[owned++].owner = sb->owner;
	}
	pthread_mutex_unlock(&e->lock);
	AN_ASSERT(owned <= used);
	for (uint32_t i = 0; i < owned; i++) {
		if (owner_alive(&list[i].owner))
			continue;
		/* -ENOENT: removed meanwhile (its agentsnet run ran `sandbox rm` after all);
		 * -ESTALE: registered again meanwhile, by a process that is not gone. */
		int ret = engine_sandbox_remove(e, list[i].id, NULL, &list[i].owner, NULL);
		if (ret == 0) {
			removed++;
			log_info("sandbox %s: its owner (pid %d) is gone; removed", list[i].id,
				 (int)list[i].owner.pid);
		} else if (ret != -ENOENT && ret != -ESTALE) {
			log_warn("sandbox %s: its owner is gone, but removing it failed: %s",
				 list[i].id, strerror(-ret));
		}
	}
	pool_free(list);
	kept_records_reap(e);
	return removed;
}

void engine_sandbox_stats(struct engine *e, void *arg,
			  void (*fn)(void *arg, const struct engine_sandbox_view *v))
{
	uint64_t now_ms = engine_now_ms();

	pthread_mutex_lock(&e->lock);
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		struct worker_sandbox_sum sum = { 0 };
		if (sb->state != ENGINE_SANDBOX_ACTIVE)
			continue;
		for (uint32_t k = 0; k < e->worker_count; k++)
			worker_sandbox_sum_add(&e->workers[k], i, sb->generation, &sum);
		struct engine_sandbox_view v = {
			.sb = sb,
			.uptime_s = (now_ms - sb->opened_ms) / 1000u,
			.conns = atomic_load_explicit(&sb->conns, memory_order_relaxed),
			.requests = sum.requests,
			.refusals = sum.refusals,
			.bytes_up = sum.bytes_up,
			.bytes_down = sum.bytes_down,
		};
		fn(arg, &v);
	}
	pthread_mutex_unlock(&e->lock);
}

void engine_sandbox_foreach(struct engine *e, void *arg,
			    void (*fn)(void *arg, const struct engine_sandbox *sb))
{
	pthread_mutex_lock(&e->lock);
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		if (e->sandboxes[i]->state == ENGINE_SANDBOX_ACTIVE)
			fn(arg, e->sandboxes[i]);
	}
	pthread_mutex_unlock(&e->lock);
}
