/*
 * The on-disk registry of run-time sandboxes (those the control socket adds
 * while the daemon runs), so that a daemon restart re-adopts them instead of
 * stranding the `agentsnet run` that uses one.
 *
 * Run-time sandboxes are recorded as <socket_dir>/registry/<id> ("profile
 * <name>"), outside every sandbox's own directory: a sandbox can write into
 * the directory it has mounted, so nothing the daemon trusts may live there.
 * A record is a few lines ("profile", then "owner", "registrant", "agent"
 * and "token": registry_read says what a missing one means), made by one
 * write, 0600 and O_NOFOLLOW, in a directory of the daemon's own (0700): the
 * ingress token, a secret, is read by nobody else.
 *
 * Invariants: a run-time sandbox is open only with its record written, and
 * its record and directory go when it is removed (registry_drop); engine_stop
 * leaves the records for the next start, whose registry_adopt re-opens each
 * through engine.c's sandbox_add_locked, dropping the ones whose owner
 * process is gone or whose registrant the policy no longer admits (at
 * engine_commit, once no old daemon still serves them: an upgrade's start
 * removes nothing until the old daemon has handed over).
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
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "core/an.h"
#include "core/ingress.h"
#include "core/layout.h"
#include "core/log.h"

/* A record's lines at their longest: a 63-byte profile, an owner, two uids, a token. */
#define REGISTRY_RECORD_BYTES 320u

static void registry_path(const struct engine *e, const char *id, char *out, size_t cap)
{
	/* Ids are at most 63 bytes and socket_dir a checked path: it always fits. */
	int ret = layout_registry_record(e->cfg->socket_dir, id, out, cap);
	AN_ASSERT(ret == 0);
}

/* The temporary name of <id>'s record while it is written, into <out>. */
static void registry_tmp_name(const char *id, char *out, size_t cap)
{
	int n = snprintf(out, cap, ".%s.new", id);
	AN_ASSERT(n > 0 && (size_t)n < cap);
}

/* Writes <len> bytes of <p> to <fd>, a short write resumed: 0, or the -errno that stopped it. */
static int write_whole(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int registry_write(const struct engine *e, const char *id, const char *profile_name,
		   const struct engine_owner *owner, uint32_t registrant, uint32_t agent_uid,
		   const char *token)
{
	char dir[PATH_MAX];

	int ret = layout_registry_dir(e->cfg->socket_dir, dir, sizeof(dir));
	if (ret != 0)
		return ret;
	int dfd = engine_dir_secure(dir, 0700);
	if (dfd < 0)
		return dfd;
	/* The record is <dir>/<id> (layout_registry_record), written whole beside it and
	 * synced, then renamed over it: a record is never seen half written, and a failed
	 * write (a full disk) leaves the one there as it was. The temporary name starts
	 * with '.', which no id does (registry_adopt skips it); one a crash left is
	 * removed first, and the new one made exclusively, so nothing in its place
	 * (a FIFO, a link) is ever opened. */
	char tmp[CONFIG_SANDBOX_ID_BYTES_MAX + 8];
	registry_tmp_name(id, tmp, sizeof(tmp));
	(void)unlinkat(dfd, tmp, 0);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd == -1) {
		ret = -errno;
		close(dfd);
		return ret;
	}
	char line[REGISTRY_RECORD_BYTES];
	int n = snprintf(line, sizeof(line), "profile %s\n", profile_name);
	if (owner != NULL && owner->pid > 0)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "owner %d %llu\n",
			      (int)owner->pid, (unsigned long long)owner->start_ticks);
	n += snprintf(line + n, sizeof(line) - (size_t)n, "registrant %u\n", registrant);
	if (agent_uid != ENGINE_AGENT_ANY)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "agent %u\n", agent_uid);
	n += snprintf(line + n, sizeof(line) - (size_t)n, "token %s\n", token);
	AN_ASSERT((size_t)n < sizeof(line));
	ret = write_whole(fd, line, (size_t)n);
	explicit_bzero(line, sizeof(line));
	if (ret == 0 && fsync(fd) == -1)
		ret = -errno;
	if (close(fd) == -1 && ret == 0)
		ret = -errno;
	if (ret == 0 && renameat(dfd, tmp, dfd, id) == -1)
		ret = -errno;
	if (ret != 0)
		(void)unlinkat(dfd, tmp, 0);
	close(dfd);
	return ret;
}

/* What a record holds of a sandbox, beside its profile (registry_read). */
struct registry_record {
	struct engine_owner owner;
	uint32_t registrant;
	uint32_t agent_uid;
	char token[CONFIG_INGRESS_TOKEN_BYTES]; /* "": none recorded (an older daemon's) */
};

/* "token <43 characters of base64url>": the token of record line <v>, into <token>. */
static int registry_token(const char *v, char *token)
{
	size_t n = strcspn(v, "\n");

	if (n != INGRESS_TOKEN_CHARS || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
						  "vwxyz0123456789-_") < n)
		return -EINVAL;
	memcpy(token, v, n);
	token[n] = '\0';
	return 0;
}

/*
 * Reads registry record <id>: "profile <name>", then optional "owner <pid>
 * <ticks>", "registrant <uid>" (a record without one: uid 0, so only root
 * may remove it), "agent <uid>" (without: any uid may connect) and "token
 * <token>" (without: a new one is drawn) lines. 0 or -errno.
 */
static int registry_read(const struct engine *e, const char *id, char *profile, size_t cap,
			 struct registry_record *rec)
{
	char path[PATH_MAX];
	char line[REGISTRY_RECORD_BYTES];

	registry_path(e, id, path, sizeof(path));
	ssize_t n = engine_read_small(path, O_NOFOLLOW, line, sizeof(line));
	if (n < 0 && n != -ENODATA)
		return (int)n;
	if (n <= 8 || memcmp(line, "profile ", 8) != 0)
		return -EINVAL;
	*rec = (struct registry_record){ .agent_uid = ENGINE_AGENT_ANY };
	int ret = 0;
	for (char *next = strchr(line, '\n'); ret == 0 && next != NULL && next[1] != '\0';
	     next = strchr(next + 1, '\n')) {
		int pid = 0;
		unsigned long long ticks = 0;
		unsigned uid = 0;
		if (strncmp(next + 1, "owner ", 6) == 0) {
			if (sscanf(next + 7, "%d %llu", &pid, &ticks) != 2 || pid <= 0)
				ret = -EINVAL;
			rec->owner.pid = pid;
			rec->owner.start_ticks = ticks;
		} else if (strncmp(next + 1, "registrant ", 11) == 0) {
			if (sscanf(next + 12, "%u", &uid) != 1)
				ret = -EINVAL;
			rec->registrant = uid;
		} else if (strncmp(next + 1, "agent ", 6) == 0) {
			if (sscanf(next + 7, "%u", &uid) != 1 || uid == ENGINE_AGENT_ANY)
				ret = -EINVAL;
			rec->agent_uid = uid;
		} else if (strncmp(next + 1, "token ", 6) == 0) {
			ret = registry_token(next + 7, rec->token);
		}
	}
	line[strcspn(line, "\n")] = '\0';
	size_t len = strlen(line + 8);
	if (ret == 0 && (len == 0 || len >= cap))
		ret = -EINVAL;
	if (ret == 0)
		memcpy(profile, line + 8, len + 1);
	explicit_bzero(line, sizeof(line));
	return ret;
}

int registry_registrant(const struct engine *e, const char *id, uint32_t *registrant,
			struct engine_owner *owner)
{
	char profile[CONFIG_SANDBOX_ID_BYTES_MAX];
	struct registry_record rec;

	int ret = registry_read(e, id, profile, sizeof(profile), &rec);
	if (ret == 0)
		*registrant = rec.registrant;
	if (ret == 0 && owner != NULL)
		*owner = rec.owner;
	explicit_bzero(&rec, sizeof(rec));
	return ret;
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
	char tmp[CONFIG_SANDBOX_ID_BYTES_MAX + 8];

	registry_path(e, id, path, sizeof(path));
	unlink(path);
	/* A temporary a crash left beside it holds the token too. */
	registry_tmp_name(id, tmp, sizeof(tmp));
	char *slash = strrchr(path, '/');
	AN_ASSERT(slash != NULL);
	int n = snprintf(slash + 1, sizeof(path) - (size_t)(slash + 1 - path), "%s", tmp);
	if (n > 0 && (size_t)n < sizeof(path) - (size_t)(slash + 1 - path))
		unlink(path);
	sandbox_dir_remove(e, id);
}

bool registry_has(const struct engine *e, const char *id)
{
	char path[PATH_MAX];
	struct stat st;

	registry_path(e, id, path, sizeof(path));
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
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
		struct registry_record rec;
		struct engine_owner now = { 0 };
		int ret = engine_sandbox_id_valid(de->d_name)
			      ? registry_read(e, de->d_name, profile, sizeof(profile), &rec)
			      : -EINVAL;
		if (ret == 0 && rec.owner.pid > 0 &&
		    (engine_owner_of(rec.owner.pid, &now) != 0 ||
		     now.start_ticks != rec.owner.start_ticks)) {
			/* Its agentsnet run ended while the daemon was down: nothing to adopt. */
			(void)engine_stale_note(e, de->d_name);
			log_info("sandbox %s: its owner (pid %d) is gone; record removed",
				 de->d_name, (int)rec.owner.pid);
			explicit_bzero(&rec, sizeof(rec));
			continue;
		}
		if (ret == 0 &&
		    !registrant_admitted(e, snapshot_now(e)->policy, profile, rec.registrant)) {
			/* Revoked while the daemon was down: as a reload would have done. */
			(void)engine_stale_note(e, de->d_name);
			log_warn(
			    "sandbox %s: the policy no longer lets uid %u register on profile %s: "
			    "record removed",
			    de->d_name, rec.registrant, profile);
			explicit_bzero(&rec, sizeof(rec));
			continue;
		}
		bool held = false;
		if (ret == 0) {
			pthread_mutex_lock(&e->lock);
			ret = sandbox_add_locked(e, de->d_name, profile, SANDBOX_FROM_REGISTRY,
						 rec.owner.pid > 0 ? &rec.owner : NULL,
						 rec.registrant, rec.agent_uid,
						 rec.token[0] != '\0' ? rec.token : NULL,
						 sandbox_dir, sizeof(sandbox_dir), NULL);
			/* Not adopted, the record stays for the next start (a full table, a
			 * socket that could not be made): so does its uid of the pool, given to
			 * no other sandbox meanwhile, since its agent may run on as it. */
			if (ret != 0 && ret != -EEXIST && uidpool_contains(&e->uids, rec.agent_uid))
				held = uidpool_take(&e->uids, rec.agent_uid) == 0;
			/* Until its process is gone (engine_sandbox_reap_orphans). */
			if (ret != 0 && ret != -EEXIST && rec.owner.pid > 0)
				(void)engine_kept_record_note(e, de->d_name, &rec.owner,
							      rec.agent_uid, held);
			pthread_mutex_unlock(&e->lock);
		}
		explicit_bzero(&rec, sizeof(rec));
		if (ret == 0)
			log_info("sandbox %s: re-adopted (profile %s)", de->d_name, profile);
		else if (ret != -EEXIST)
			log_warn(
			    "sandbox %s: registry record not adopted: %s; the record stays for "
			    "the next start%s",
			    de->d_name, engine_err_text(ret), held ? ", and its uid with it" : "");
	}
	closedir(d);
}
