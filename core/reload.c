/*
 * The policy swap: a reload, as the engine applies it.
 *
 * engine_policy_swap checks the new policy against every active sandbox
 * first (each has its profile in it; a file sandbox's agent uid is
 * unchanged; the TCP listener's sandbox is still named), so that a reload is
 * taken whole or not at all. It then publishes the new snapshot with one
 * pointer store under engine.lock and wakes the workers, which adopt it
 * between completions; the swap drops no connection in flight. After it,
 * the file sandboxes the file adds are opened, the ones it drops removed,
 * and so is every run-time sandbox whose registrant the new policy no longer
 * admits to its profile; a sandbox removed has its connections aborted.
 *
 * The snapshots a swap retires are freed once no worker can reach them
 * (engine_policy_collect), outside the lock. The sandbox table is
 * core/engine.c's: this file reads it under engine.lock and changes it only
 * through the calls core/engine_int.h gives, but for a file sandbox's
 * profile_name, renamed when the file renames its profile (swap_fill).
 */
#include "core/engine.h"
#include "core/engine_int.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/an.h"
#include "core/log.h"
#include "core/snapshot.h"
#include "core/worker-t.h"

/* The index in <file> of file sandbox <id>, or -1 when the file no longer names it. */
static int file_sandbox_find(const struct config *file, const char *id)
{
	for (uint32_t i = 0; i < file->sandbox_count; i++) {
		if (strcmp(file->sandboxes[i].id, id) == 0)
			return (int)i;
	}
	return -1;
}

/*
 * The profile active sandbox <sb> has under <policy>: a file sandbox's from
 * <file> (-ESRCH: the file dropped it), a run-time one's by name (-ENOENT:
 * the new policy has no such profile).
 */
static int swap_profile_of(const struct engine *e, const struct engine_sandbox *sb,
			   const void *policy, const struct config *file)
{
	if (!sb->dynamic) {
		int at = file_sandbox_find(file, sb->id);
		return at < 0 ? -ESRCH : (int)file->sandboxes[at].profile;
	}
	return e->ops->profile_index(policy, sb->profile_name);
}

/* Checks every active sandbox has a profile under <policy>. Caller holds the lock. */
static int swap_check(const struct engine *e, const void *policy, const struct config *file,
		      char *err, size_t cap)
{
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		const struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state != ENGINE_SANDBOX_ACTIVE)
			continue;
		int profile = swap_profile_of(e, sb, policy, file);
		if (profile == -ENOENT) {
			snprintf(err, cap, "sandbox %s uses profile %s, which the new policy lacks",
				 sb->id, sb->profile_name);
			return -ENOENT;
		}
		if (profile == -ESRCH && (int)i == e->tcp_sandbox) {
			snprintf(err, cap,
				 "sandbox %s serves the TCP listener; the file must name it",
				 sb->id);
			return -ENOENT;
		}
		/* Its socket was made for one agent's uid: another means a new socket. */
		int named = sb->dynamic ? -1 : file_sandbox_find(file, sb->id);
		if (named >= 0 && file->sandboxes[named].agent_uid != sb->agent_uid) {
			snprintf(
			    err, cap,
			    "sandbox %s's uid changed; its socket is made for one uid: remove it "
			    "from the file, reload, then name it again",
			    sb->id);
			return -EINVAL;
		}
	}
	return 0;
}

/* Fills <s> for every active sandbox and renames file sandboxes' profiles. Under the lock. */
static void swap_fill(struct engine *e, struct snapshot *s, const struct config *file)
{
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state != ENGINE_SANDBOX_ACTIVE)
			continue;
		int profile = swap_profile_of(e, sb, s->policy, file);
		if (profile < 0)
			continue; /* a file sandbox the file dropped: removed after the swap */
		snapshot_sandbox_set(e, s, (int)i, (uint32_t)profile);
		if (!sb->dynamic)
			snprintf(sb->profile_name, sizeof(sb->profile_name), "%s",
				 e->ops->profile_name(s->policy, (uint32_t)profile));
	}
}

/* Opens the file sandboxes <file> names that are not running. Under the lock. */
static uint32_t swap_open_new(struct engine *e, const struct config *file)
{
	char dir[PATH_MAX];
	uint32_t opened = 0;

	for (uint32_t i = 0; i < file->sandbox_count; i++) {
		const char *id = file->sandboxes[i].id;
		if (sandbox_find(e, id) >= 0)
			continue;
		const char *profile =
		    e->ops->profile_name(snapshot_now(e)->policy, file->sandboxes[i].profile);
		int ret =
		    sandbox_add_locked(e, id, profile, SANDBOX_FROM_FILE, NULL, 0,
				       file->sandboxes[i].agent_uid, NULL, dir, sizeof(dir), NULL);
		if (ret == 0)
			opened++;
		else
			log_warn("reload: sandbox %s: not opened: %s", id, engine_err_text(ret));
	}
	return opened;
}

/* Removes the file sandboxes <file> no longer names (their conns are aborted). */
static uint32_t swap_close_dropped(struct engine *e, const struct config *file)
{
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	uint32_t removed = 0;

	for (bool found = true; found;) {
		found = false;
		pthread_mutex_lock(&e->lock);
		for (uint32_t i = 0; i < e->sandbox_used && !found; i++) {
			const struct engine_sandbox *sb = e->sandboxes[i];
			found = sb->state == ENGINE_SANDBOX_ACTIVE && !sb->dynamic &&
				file_sandbox_find(file, sb->id) < 0;
			if (found)
				memcpy(id, sb->id, sizeof(id));
		}
		pthread_mutex_unlock(&e->lock);
		if (found && sandbox_remove(e, id, true, NULL, NULL, NULL) != 0)
			break; /* removed meanwhile: nothing else can be left */
		removed += found;
	}
	return removed;
}

/*
 * Removes every run-time sandbox whose registrant the new policy no longer
 * admits to its profile (profiles.<name>.users and groups): a revoked
 * account keeps no sandbox on a profile, nor its credentials, past a reload.
 * Logged, one line each. Returns how many.
 */
static uint32_t swap_close_unadmitted(struct engine *e)
{
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	uint32_t removed = 0;

	for (uint32_t from = 0;;) {
		bool found = false;
		uint32_t registrant = 0;
		char profile[CONFIG_SANDBOX_ID_BYTES_MAX];
		pthread_mutex_lock(&e->lock);
		const void *policy = snapshot_now(e)->policy;
		for (; from < e->sandbox_used && !found; from++) {
			const struct engine_sandbox *sb = e->sandboxes[from];
			found = sb->state == ENGINE_SANDBOX_ACTIVE && sb->dynamic &&
				!registrant_admitted(e, policy, sb->profile_name, sb->registrant);
			if (found) {
				memcpy(id, sb->id, sizeof(id));
				memcpy(profile, sb->profile_name, sizeof(profile));
				registrant = sb->registrant;
			}
		}
		pthread_mutex_unlock(&e->lock);
		if (!found)
			break;
		log_warn("sandbox %s: the policy no longer lets uid %u register on profile %s: "
			 "removed",
			 id, registrant, profile);
		removed += sandbox_remove(e, id, false, NULL, NULL, NULL) == 0;
	}
	return removed;
}

static void workers_wake(struct engine *e)
{
	for (uint32_t i = 0; i < e->worker_count; i++) {
		uint64_t one = 1;
		ssize_t ret = write(e->workers[i].wake_fd, &one, sizeof(one));
		AN_ASSERT(ret == (ssize_t)sizeof(one));
	}
}

int engine_policy_swap(struct engine *e, const void *policy, const struct config *file, char *err,
		       size_t cap)
{
	AN_ASSERT(policy != NULL && file != NULL);
	pthread_mutex_lock(&e->lock);
	struct snapshot *old = snapshot_now(e);
	AN_ASSERT(old != NULL);
	int ret = swap_check(e, policy, file, err, cap);
	struct snapshot *s =
	    ret == 0 ? snapshot_create(policy, old->generation + 1, e->worker_count) : NULL;
	if (s == NULL) {
		if (ret == 0)
			snprintf(err, cap, "out of memory");
		pthread_mutex_unlock(&e->lock);
		return ret == 0 ? -ENOMEM : ret;
	}
	s->profiles = e->ops->profile_count(policy);
	s->rules = e->ops->rule_count(policy);
	swap_fill(e, s, file);
	old->older = e->retired;
	e->retired = old;
	atomic_store_explicit(&e->current, s, memory_order_release);
	e->reloads++;
	uint32_t opened = swap_open_new(e, file);
	pthread_mutex_unlock(&e->lock);
	workers_wake(e);
	uint32_t removed = swap_close_dropped(e, file);
	uint32_t revoked = swap_close_unadmitted(e);
	snprintf(err, cap,
		 "policy generation %llu: %u profiles, %u rules; sandboxes +%u -%u, %u whose "
		 "registrant the policy no longer admits",
		 (unsigned long long)s->generation, s->profiles, s->rules, opened,
		 removed + revoked, revoked);
	engine_policy_collect(e);
	return 0;
}

void engine_policy_collect(struct engine *e)
{
	struct snapshot *unreachable = NULL;

	pthread_mutex_lock(&e->lock);
	for (struct snapshot **pp = &e->retired; *pp != NULL;) {
		struct snapshot *s = *pp;
		if (!snapshot_unreachable(s, e->seen, e->worker_count)) {
			pp = &s->older;
			continue;
		}
		*pp = s->older;
		s->older = unreachable;
		unreachable = s;
	}
	pthread_mutex_unlock(&e->lock);
	/* Outside the lock: a million-rule policy takes milliseconds to unmap. */
	while (unreachable != NULL) {
		struct snapshot *next = unreachable->older;
		log_debug("policy generation %llu freed",
			  (unsigned long long)unreachable->generation);
		snapshot_destroy(unreachable, e->ops);
		unreachable = next;
	}
}
