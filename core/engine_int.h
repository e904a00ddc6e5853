/*
 * What core/engine.c and its parts share, and nothing else includes (the
 * daemon, the control socket and the tests see core/engine.h):
 *
 *   core/engine.c    start and stop, the workers, the sandbox table (add,
 *                    remove, reap);
 *   core/reload.c    the policy swap (a reload) and the retired snapshots'
 *                    collection;
 *   core/listen.c    the sockets the engine listens on (each sandbox's
 *                    egress socket, the TCP listener, the gateway's public
 *                    and internal listeners, an owned sandbox's ingress
 *                    socket) and the directories they are made in;
 *   core/registry.c  the on-disk registry of run-time sandboxes
 *                    (<socket_dir>/registry/<id>) and its re-adoption at start.
 *
 * The sandbox table is engine.c's: the others change a sandbox only through
 * the slot engine.c hands them, with engine.lock held (or at start-up,
 * before any worker runs), as each contract below says; reload.c besides
 * renames a file sandbox's profile (profile_name) when the file does.
 */
#ifndef AN_CORE_ENGINE_INT_H
#define AN_CORE_ENGINE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"
#include "core/snapshot.h"

/* Where a sandbox comes from: what its directory may be, and whether the registry has it. */
enum sandbox_origin {
	SANDBOX_FROM_FILE,     /* the policy file (a reload): its directory kept if ours */
	SANDBOX_FROM_CONTROL,  /* registered now: a fresh directory, a registry record */
	SANDBOX_FROM_REGISTRY, /* re-adopted after a restart: its directory kept if ours */
};

/* ---- core/engine.c ----------------------------------------------------- */

/* The snapshot published now. Caller holds the lock, or is start-up (the only writers). */
struct snapshot *snapshot_now(const struct engine *e);

/* The slot of sandbox <id>, active or being removed, or -1. Under the lock (or at start-up). */
int sandbox_find(const struct engine *e, const char *id);

/*
 * Records in <s> that slot <idx> is on profile <profile> of s->policy. Caller
 * holds the lock (or is start-up).
 */
void snapshot_sandbox_set(const struct engine *e, struct snapshot *s, int idx, uint32_t profile);

/*
 * Removes sandbox <id>: a run-time one, or with <file> one from the policy
 * file; as engine_sandbox_remove (<who>, <only_owner>, <registrant_out>).
 * Waits until its worker has closed its connections. Takes the lock: the
 * caller must not hold it. 0, -ENOENT, -EPERM (<file> and <id> disagree on
 * where the sandbox comes from), -EACCES, -ESTALE or ENGINE_ERR_SYSTEM(errno).
 */
int sandbox_remove(struct engine *e, const char *id, bool file, const struct verdict_caller *who,
		   const struct engine_owner *only_owner, uint32_t *registrant_out);

/*
 * Whether <policy> still lets <uid> register on profile <profile_name> (the
 * host's group database as it is now; uid 0 always is). Control path or start-up.
 */
bool registrant_admitted(const struct engine *e, const void *policy, const char *profile_name,
			 uint32_t uid);

/*
 * Opens sandbox <id> from <origin> and hands it to a worker, recording a
 * run-time one in the registry; as engine_sandbox_add. <token> is its
 * ingress token as the registry recorded it (NULL: a new one is drawn).
 * Caller holds the lock.
 */
int sandbox_add_locked(struct engine *e, const char *id, const char *profile_name,
		       enum sandbox_origin origin, const struct engine_owner *owner,
		       uint32_t registrant, uint32_t agent_uid, const char *token, char *dir,
		       size_t cap, int *ingress_fd);

/* Who passed e->inherited, for the logs. */
static inline const char *inherited_source(const struct engine *e)
{
	return e->inherited_from != NULL ? e->inherited_from : "the service manager";
}

/*
 * The descriptor named <name> that a predecessor passed (e->inherited,
 * sorted), taken out of it; -1: none.
 */
int engine_inherited_take(struct engine *e, const char *name);

/*
 * Records inet listener <fd> for a successor (e->inet_listeners) as <name>
 * (a predecessor's name for it) or, when NULL, "<prefix><n>", and hands it to
 * the service manager to keep (FDSTORE), as each sandbox's socket is.
 */
void engine_inet_listener_note(struct engine *e, const char *prefix, const char *name, int fd);

/*
 * Sandbox <id>'s files (its socket, a run-time one's record and directory)
 * are removed at engine_commit: at once when no predecessor serves them.
 * Start-up only (the main thread). 0 or -ENOMEM (logged; then left in place).
 */
int engine_stale_note(struct engine *e, const char *id);

/*
 * Notes that the record of run-time sandbox <id>, which a start could not
 * adopt, is tied to process <owner> (pid > 0) and, with <holds_uid>, holds
 * <uid> of the pool (engine.h, engine_kept_record). Caller holds the lock. 0
 * or -ENOMEM (logged; the record and uid are then kept until the daemon
 * stops).
 */
int engine_kept_record_note(struct engine *e, const char *id, const struct engine_owner *owner,
			    uint32_t uid, bool holds_uid);

/* ---- core/listen.c ----------------------------------------------------- */

/*
 * Makes <sb>'s directory under <socket_dir> (<fresh>: whatever was there
 * removed first, and the directory removed again when its socket cannot be
 * made; otherwise kept only if ours) and its egress socket in it,
 * its agent's alone (0600) or anyone's (0666); sets sb->path and
 * sb->listen_fd. <inherited> (or -1), the listening socket the service
 * manager kept for this sandbox, is taken instead of a new one when the
 * sandbox is not <fresh> and it still is the socket at the path, listening,
 * with the owner and mode it would be made with; else it is closed (and the
 * path, which it held, made anew). <from> names who kept it, for the log.
 * When <predecessor_serves> (an upgrade: the old daemon still serves that
 * file), a socket bound at the path that does not fit is never replaced:
 * -EEXIST, logged naming the sandbox, the owner and mode it has and those it
 * would need, and the old daemon goes on serving it.
 * 0 or -errno, logged.
 */
int listen_unix(struct engine_sandbox *sb, const char *socket_dir, bool fresh, int inherited,
		const char *from, bool predecessor_serves);

/*
 * The TCP listener on "addr:port" <text> (SO_REUSEPORT: one per worker) for
 * worker <w>: a predecessor's "tcp.<index>" when it passed one listening
 * there, else a new one. fd or -errno, logged.
 */
int listen_tcp(struct engine *e, const struct worker *w, const char *text);

/*
 * After every worker's listeners: the gateway's and the TCP listener's
 * sockets a predecessor with more workers passed, each still listening where
 * the configuration says, spread over the workers (their queues hold
 * connections that must be served). 0 or -ENOMEM. Start-up only.
 */
int inet_listeners_adopt_rest(struct engine *e);

/*
 * Adds the gateway's public listener (and with TLS the internal one) to
 * worker <w>; on the optional default a port in use turns the gateway off
 * (e->ingress_on) and gives 0. 0 or -errno, logged. Start-up only.
 */
int ingress_listen(struct engine *e, struct worker *w);

/* With TLS on the public listener: opens e->ingress_internal_fd. 0 or -errno, logged. Start-up. */
int ingress_internal_open(struct engine *e);

/* Owned sandbox <id>'s <dir>/ingress.sock, listening, 0600. The fd or -errno, logged. */
int ingress_socket_make(const char *id, const char *dir);

/* Removes <dir>/ingress.sock, the socket ingress_socket_make made (its fd closed first). */
void ingress_socket_remove(const char *dir);

/* ---- core/registry.c --------------------------------------------------- */

/*
 * Writes run-time sandbox <id>'s record (profile, owner, registrant, agent
 * uid, ingress token: the record is the daemon's alone, 0600 in a 0700
 * directory, as the token's secrecy needs), whole or not at all: written
 * beside it and renamed over any record there, which a failure leaves as it
 * was. 0 or -errno.
 */
int registry_write(const struct engine *e, const char *id, const char *profile_name,
		   const struct engine_owner *owner, uint32_t registrant, uint32_t agent_uid,
		   const char *token);

/* Removes run-time sandbox <id>'s record and directory; what cannot go is logged. */
void registry_drop(const struct engine *e, const char *id);

/* Whether run-time sandbox <id> has a record. */
bool registry_has(const struct engine *e, const char *id);

/*
 * The uid that registered run-time sandbox <id>, from its record (0: root, or
 * a record without one), into *<registrant>, and, when <owner> is not NULL,
 * the process it is tied to into *<owner> (pid 0: none). 0, or -errno
 * (-EINVAL: the record is malformed).
 */
int registry_registrant(const struct engine *e, const char *id, uint32_t *registrant,
			struct engine_owner *owner);

/*
 * Re-adopts every registry record through sandbox_add_locked; ones whose
 * owner is gone, whose registrant the policy no longer admits or that no
 * longer fit are logged and dropped (at engine_commit: an upgrade's old
 * daemon may still serve them). Start-up, once the workers serve.
 */
void registry_adopt(struct engine *e);

#endif /* AN_CORE_ENGINE_INT_H */
