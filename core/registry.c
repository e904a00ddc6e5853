/*
 * The on-disk registry of run-time sandboxes (those the control socket adds
 * while the daemon runs), so that a daemon restart re-adopts them instead of
 * stranding the `agentsnet run` that uses one.
 *
 * Run-time sandboxes are recorded as <socket_dir>/registry/<id> ("profile
 * <name>"), outside every sandbox's own directory: a sandbox can write into
 * the directory it has mounted, so nothing the daemon trusts may live there.
 * A record is a few lines ("profile", then "owner", "registrant" and "agent":
 * registry_read says what a missing one means), made by one write, 0600 and
 * O_NOFOLLOW, in a directory of the daemon's own (0700).
 *
 * Invariants: a run-time sandbox is open only with its record written, and
 * its record and directory go when it is removed (registry_drop); engine_stop
 * leaves the records for the next start, whose registry_adopt re-opens each
 * through engine.c's sandbox_add_locked, dropping the ones whose owner
 * process is gone or whose registrant the policy no longer admits.
 *
 * Callers: engine.c alone (core/engine_int.h): registry_write and
 * registry_drop with engine.lock held (or at start-up), registry_adopt once
 * at start-up, once the workers serve (it takes the lock itself).
 */
#include "core/engine_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/an.h"
#include "core/layout.h"
#include "core/log.h"

static void registry_path(const struct engine *e, const char *id, char *out, size_t cap)
{
	/* Ids are at most 63 bytes and socket_dir a checked path: it always fits. */
	int ret = layout_registry_record(e->cfg->socket_dir, id, out, cap);
	AN_ASSERT(ret == 0);
}

int registry_write(const struct engine *e, const char *id, const char *profile_name,
		   const struct engine_owner *owner, uint32_t registrant, uint32_t agent_uid)
{
	char dir[PATH_MAX];
	char path[PATH_MAX];

	int ret = layout_registry_dir(e->cfg->socket_dir, dir, sizeof(dir));
	if (ret != 0)
		return ret;
	int dfd = engine_dir_secure(dir, 0700);
	if (dfd < 0)
		return dfd;
	close(dfd);
	registry_path(e, id, path, sizeof(path));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd == -1)
		return -errno;
	char line[192];
	int n = snprintf(line, sizeof(line), "profile %s\n", profile_name);
	if (owner != NULL && owner->pid > 0)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "owner %d %llu\n",
			      (int)owner->pid, (unsigned long long)owner->start_ticks);
	n += snprintf(line + n, sizeof(line) - (size_t)n, "registrant %u\n", registrant);
	if (agent_uid != ENGINE_AGENT_ANY)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "agent %u\n", agent_uid);
	AN_ASSERT((size_t)n < sizeof(line));
	ssize_t wrote = write(fd, line, (size_t)n);
	ret = wrote == n ? 0 : -EIO;
	close(fd);
	return ret;
}

/* Reads registry record <id>: "profile <name>" [+ "owner <pid> <ticks>"]. 0 or -errno. */
/*
 * Reads registry record <id>: "profile <name>", then optional "owner <pid>
 * <ticks>", "registrant <uid>" (a record without one: uid 0, so only root
 * may remove it) and "agent <uid>" (without: any uid may connect) lines.
 * 0 or -errno.
 */
static int registry_read(const struct engine *e, const char *id, char *profile, size_t cap,
			 struct engine_owner *owner, uint32_t *registrant, uint32_t *agent_uid)
{
	char path[PATH_MAX];
	char line[192];

	registry_path(e, id, path, sizeof(path));
	ssize_t n = engine_read_small(path, O_NOFOLLOW, line, sizeof(line));
	if (n < 0 && n != -ENODATA)
		return (int)n;
	if (n <= 8 || memcmp(line, "profile ", 8) != 0)
		return -EINVAL;
	*owner = (struct engine_owner){ 0 };
	*registrant = 0;
	*agent_uid = ENGINE_AGENT_ANY;
	for (char *next = strchr(line, '\n'); next != NULL && next[1] != '\0';
	     next = strchr(next + 1, '\n')) {
		int pid = 0;
		unsigned long long ticks = 0;
		unsigned uid = 0;
		if (strncmp(next + 1, "owner ", 6) == 0) {
			if (sscanf(next + 7, "%d %llu", &pid, &ticks) != 2 || pid <= 0)
				return -EINVAL;
			owner->pid = pid;
			owner->start_ticks = ticks;
		} else if (strncmp(next + 1, "registrant ", 11) == 0) {
			if (sscanf(next + 12, "%u", &uid) != 1)
				return -EINVAL;
			*registrant = uid;
		} else if (strncmp(next + 1, "agent ", 6) == 0) {
			if (sscanf(next + 7, "%u", &uid) != 1 || uid == ENGINE_AGENT_ANY)
				return -EINVAL;
			*agent_uid = uid;
		}
	}
	line[strcspn(line, "\n")] = '\0';
	size_t len = strlen(line + 8);
	if (len == 0 || len >= cap)
		return -EINVAL;
	memcpy(profile, line + 8, len + 1);
	return 0;
}

/* Removes a run-time sandbox's directory; what cannot go is logged and left. */
static void sandbox_dir_remove(const struct engine *e, const char *id)
{
	int ret = layout_sandbox_dir_remove(e->cfg->socket_dir, id);
	if (ret != 0)
		log_warn("sandbox %s: removing its directory: %s (left in place)", id,
			 strerror(-ret));
}

/* Removes run-time sandbox <id>'s record and directory. */
void registry_drop(const struct engine *e, const char *id)
{
	char path[PATH_MAX];

	registry_path(e, id, path, sizeof(path));
	unlink(path);
	sandbox_dir_remove(e, id);
}

/* Re-adopts every registry record; ones that no longer fit are logged and dropped. */
void registry_adopt(struct engine *e)
{
	char dir[PATH_MAX];
	char profile[CONFIG_SANDBOX_ID_BYTES_MAX];

	if (layout_registry_dir(e->cfg->socket_dir, dir, sizeof(dir)) != 0)
		return;
	DIR *d = opendir(dir);
	if (d == NULL)
		return;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char sandbox_dir[PATH_MAX];
		struct engine_owner owner = { 0 };
		struct engine_owner now = { 0 };
		uint32_t registrant = 0;
		uint32_t agent_uid = ENGINE_AGENT_ANY;
		int ret = engine_sandbox_id_valid(de->d_name)
			      ? registry_read(e, de->d_name, profile, sizeof(profile), &owner,
					      &registrant, &agent_uid)
			      : -EINVAL;
		if (ret == 0 && owner.pid > 0 &&
		    (engine_owner_of(owner.pid, &now) != 0 ||
		     now.start_ticks != owner.start_ticks)) {
			/* Its agentsnet run ended while the daemon was down: nothing to adopt. */
			registry_drop(e, de->d_name);
			log_info("sandbox %s: its owner (pid %d) is gone; record removed",
				 de->d_name, (int)owner.pid);
			continue;
		}
		if (ret == 0 &&
		    !registrant_admitted(e, snapshot_now(e)->policy, profile, registrant)) {
			/* Revoked while the daemon was down: as a reload would have done. */
			registry_drop(e, de->d_name);
			log_warn(
			    "sandbox %s: the policy no longer lets uid %u register on profile %s: "
			    "record removed",
			    de->d_name, registrant, profile);
			continue;
		}
		if (ret == 0) {
			pthread_mutex_lock(&e->lock);
			ret = sandbox_add_locked(e, de->d_name, profile, SANDBOX_FROM_REGISTRY,
						 owner.pid > 0 ? &owner : NULL, registrant,
						 agent_uid, sandbox_dir, sizeof(sandbox_dir), NULL);
			pthread_mutex_unlock(&e->lock);
		}
		if (ret == 0)
			log_info("sandbox %s: re-adopted (profile %s)", de->d_name, profile);
		else if (ret != -EEXIST)
			log_warn("sandbox %s: registry record not adopted: %s", de->d_name,
				 strerror(-ret));
	}
	closedir(d);
}
