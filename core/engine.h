/*
 * The engine: what every worker shares and the calls the daemon makes to
 * start it, stop it, and add or remove sandboxes while it runs.
 *
 * The daemon loads the configuration and policy, then engine_start creates
 * the listeners of the sandboxes the file names, one worker thread per core
 * (each pinned, each with its own ring) and waits until all are serving.
 * Sandboxes added at run time (engine_sandbox_add, from the control socket)
 * are recorded in <socket_dir>/registry/ and re-adopted by the next start,
 * so a daemon restart does not strand a running sandbox. engine_stop asks
 * every worker to close its connections, joins them and reports leaks.
 *
 * Threads: the sandbox table is written only under <lock> by the control
 * path; a worker reads a sandbox only after a command for it reached the
 * worker through its queue (which orders the two), and a slot is reused only
 * after its worker has dropped every reference.
 *
 * Reload: engine_policy_swap publishes a new snapshot (core/snapshot.h) with
 * one pointer store; each worker adopts it at its next loop turn (a swap
 * wakes them all) and its new requests decide with it, while a request in
 * flight (an open tunnel, a forwarded exchange) keeps the one it began with.
 * What a sandbox's profile is lives in the snapshot, not in the sandbox, so
 * a reload that renames or reorders profiles cannot pair a sandbox with the
 * wrong one.
 */
#ifndef AN_CORE_ENGINE_H
#define AN_CORE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "core/config.h"
#include "core/notify.h"
#include "core/ratelimit.h"
#include "core/ring.h"
#include "core/snapshot.h"
#include "core/term.h"
#include "core/uidpool.h"
#include "core/verdict.h"

struct audit;
struct worker;

enum engine_sandbox_state {
	ENGINE_SANDBOX_FREE = 0, /* slot unused (or released after a removal) */
	ENGINE_SANDBOX_ACTIVE,
	ENGINE_SANDBOX_REMOVING, /* its worker is closing the listener and connections */
};

/* A sandbox whose agent's uid is not known: its egress socket is open to every uid. */
#define ENGINE_AGENT_ANY CONFIG_AGENT_ANY
/* Asked of engine_sandbox_add by root: a uid of the sandbox's own, from daemon.sandbox_uids. */
#define ENGINE_AGENT_NEW (UINT32_MAX - 1)

/*
 * The process a run-time sandbox lives as long as (`agentsnet run`), named by
 * pid and start time so a recycled pid is not mistaken for it. pid 0: none,
 * the registration is permanent until `sandbox rm`.
 */
struct engine_owner {
	int32_t pid;
	uint32_t uid;         /* the caller's user */
	uint64_t start_ticks; /* /proc/<pid>/stat field 22 */
};

/* A record a start could not adopt, tied to a process (an `agentsnet run`'s), while that runs. */
struct engine_kept_record {
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	struct engine_owner owner;
	uint32_t uid;   /* the agent's uid, of the pool when <holds_uid> */
	bool holds_uid; /* the pool's uid is given to this record */
};

/*
 * Reads the small file <path> (opened O_RDONLY | O_CLOEXEC | <flags>, O_NOFOLLOW
 * say) with one read of at most <cap> - 1 bytes into <buf>, NUL-terminated:
 * /proc files and the daemon's own records. Returns the bytes read, or -errno
 * (-ENODATA when it is empty). Any thread.
 */
ssize_t engine_read_small(const char *path, int flags, char *buf, size_t cap);

/* Fills <o> for process <pid>. 0, or -ESRCH when it is gone (or a zombie). Any thread. */
int engine_owner_of(int32_t pid, struct engine_owner *o);

struct engine_sandbox {
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	/* Its profile by name (written under engine.lock); the index, and the
	 * profile's limits, are per snapshot: snapshot.sandboxes[slot]. */
	char profile_name[CONFIG_SANDBOX_ID_BYTES_MAX];
	uint32_t worker; /* the worker that owns its listener and connections */
	int listen_fd;   /* owned; the sandbox's egress socket, -1 when none */
	bool dynamic;    /* added at run time: recorded in the registry, removable */
	uint8_t state;   /* enum engine_sandbox_state; written under engine.lock */
	/* Live connections. Atomic: the TCP listener's sandbox is served by every
	 * worker (SO_REUSEPORT), a Unix one by its own worker only. */
	_Atomic uint32_t conns;
	char path[108];            /* the socket's path (sun_path) */
	struct engine_owner owner; /* pid 0: none (written under engine.lock) */
	uint32_t registrant;       /* who registered it (0: root, or the policy file) */
	uint32_t agent_uid;        /* who may connect besides root; ENGINE_AGENT_ANY: anyone */
	uint32_t generation;       /* bumped each time the slot opens: buckets follow it */
	uint64_t opened_ms;        /* CLOCK_MONOTONIC when the slot last opened */
	/* The gateway's limits for it, shared by every worker (core/ratelimit.h):
	 * its rate (reset when the slot opens) and its public requests open
	 * now (never reset: each request gives back what it took). */
	struct ratelimit_shared ingress_rate;
	_Atomic uint32_t ingress_open;
	/* Its access token on the gateway (core/ingress.h), drawn when the slot
	 * opens (or the registry's, re-adopted), wiped when it closes; written
	 * under engine.lock, read by the workers from their route tables only. */
	char ingress_token[CONFIG_INGRESS_TOKEN_BYTES];
	/* An alert whose action is quarantine put it there (core/watch.c): every
	 * request is refused quarantined until `sandbox release` clears it. Set by
	 * a worker, cleared by the control thread, false when the slot opens. */
	_Atomic bool quarantined;
};

struct watch_recent;

struct engine {
	const struct config *cfg; /* borrowed */
	/* The start-up policy (core/verdict.h): engine_start takes it, and from
	 * then on the engine owns it, even when the start fails. */
	const void *policy;
	const struct verdict_ops *ops; /* borrowed */
	/* Re-reads the policy file and calls engine_policy_swap; what `policy
	 * reload` on the control socket runs. Writes the outcome, one line, to
	 * <msg>. 0 or -errno. NULL: reload unsupported. */
	int (*reload)(void *reload_arg, char *msg, size_t cap);
	void *reload_arg;
	struct audit *audit; /* borrowed */
	/* TLS termination (core/term.h) and its argument; NULL without a CA:
	 * CONNECTs to terminated tiers are then refused tier_unavailable. */
	const struct term_ops *term;
	void *term_arg;
	struct ring_features features;
	uint32_t worker_count;
	struct worker *workers; /* owned array */
	pthread_mutex_t lock;   /* the sandbox table, for the control path */
	uint32_t sandbox_used;  /* slots handed out so far: indexes below it */
	uint32_t sandbox_active;
	uint32_t sandboxes_max; /* what the descriptor table holds (engine_sandboxes_max_for) */
	struct engine_sandbox **sandboxes; /* owned table of LIMITS_SANDBOXES_MAX slots */
	int tcp_sandbox;                   /* index served on the TCP listener, -1: none */
	uint32_t next_worker;              /* round-robin for new sandboxes */
	atomic_uint workers_ready;
	atomic_bool stop;
	atomic_uint leaks; /* workers that found a leak at exit */
	/* The published policy; written under <lock>, read by workers (acquire). */
	_Atomic(struct snapshot *) current;
	struct snapshot *retired; /* earlier ones not yet freed, under <lock> */
	_Atomic uint64_t *seen;   /* owned: per worker, the generation it adopted */
	/* The gateway serves (cfg.ingress_listen, and its port was had). Set at start. */
	bool ingress_on;
	/* The public listener speaks TLS (cfg.ingress_tls_cert, through term.public_new):
	 * each connection is decrypted and handed, with a PROXY v2 header, to the
	 * plain gateway on <ingress_internal> (<socket_dir>/internal/ingress.sock). */
	bool ingress_tls;
	int ingress_internal_fd; /* owned; the internal listener, -1: none */
	struct sockaddr_un ingress_internal;
	struct sockaddr_storage ingress_addr; /* the public listener's address (PROXY v2 dst) */
	/* engine.term has a CA (the fake and inject tiers); a term without one
	 * serves only the public listener's TLS. */
	bool term_has_ca;
	uint64_t reloads;                 /* snapshots published after the first */
	_Atomic uint64_t reloads_refused; /* reloads that left the running policy (the daemon's) */
	/* Bumped at each quarantine (core/watch.c): every worker then cuts the open
	 * connections of the sandboxes in quarantine (watch_quarantine_cut). */
	_Atomic uint32_t quarantine_epoch;
	/* The uids given to root's sandboxes (cfg.sandbox_uid_*), under <lock>; a
	 * test may set uids.host_free before engine_start. */
	struct uidpool uids;
	/* The service manager (core/notify.h; NULL: none): each sandbox's listening socket
	 * is handed to it to keep (FDSTORE=1, named ENGINE_FDNAME_PREFIX and the id), so
	 * that the next daemon, after a crash or a restart, is given it back and serves
	 * the connections that waited in its queue meanwhile. */
	const struct notify *manager;
	/* What it gave back at this start ($LISTEN_FDS), sorted by name by engine_start,
	 * which adopts each that is still a sandbox's socket and closes the rest; an
	 * entry taken has fd -1. Set before engine_start; the engine's from then on. */
	struct notify_fd *inherited;
	uint32_t inherited_count;
	/* Who passed them, for the logs: "the service manager" (NULL) or "the old daemon". */
	const char *inherited_from;
	/* The old daemon still serves the sockets it passed (an upgrade, until it
	 * acknowledged the new one's ready): a failed start leaves their files. */
	bool predecessor_serves;
	/* Sandboxes the start found kept or recorded that this daemon does not serve
	 * (a passed socket nothing took, a run-time record the policy no longer
	 * admits): their files go at engine_commit, once no predecessor serves
	 * them. Ids, pool-allocated; the start's and engine_commit's. */
	char (*stale_ids)[CONFIG_SANDBOX_ID_BYTES_MAX];
	uint32_t stale_count;
	uint32_t stale_cap;
	/* The records a start could not adopt that are tied to a process, with the uid
	 * of the pool each holds (their agents may run on as them): once that process
	 * is gone (its sandbox with it), engine_sandbox_reap_orphans removes the record
	 * and directory if they are still that record's, and gives the uid back.
	 * Under <lock>; pool-allocated. */
	struct engine_kept_record *kept_records;
	uint32_t kept_record_count;
	uint32_t kept_record_cap;
	/* The gateway's public listeners and the TCP listener's (SO_REUSEPORT, a
	 * worker's each, and any more a predecessor had), named "ingress.<n>" and
	 * "tcp.<n>" for a successor (engine_handover_list); made at start, unchanged
	 * after, closed with their workers. */
	struct notify_fd *inet_listeners;
	uint32_t inet_listener_count;
	uint32_t inet_listener_cap;
	/* A successor serves every socket this daemon listens on (engine_hand_over):
	 * the stop keeps their files, and its drain hands every listener on. */
	atomic_bool handed_over;
	/* The latest alerts (core/watch.h), for `alerts`; made by engine_start. */
	struct watch_recent *alerts_recent;
	struct webhook *alerts_webhook; /* owned; NULL: no daemon.alert_webhook */
	/* The metrics listener (core/metrics.h), for a successor; -1: none. Set by metrics_start. */
	int metrics_fd;
	/* Asks the daemon to stop, as SIGTERM does; called by engine_hand_over. NULL: none. */
	void (*stop_request)(void *arg);
	void *stop_request_arg;
	/* The drain under way (engine_drain): set before the workers are told of it,
	 * read-only after. A listener handed on stops accepting: what waits in its
	 * queue is the next daemon's. */
	struct {
		uint64_t until_ms;        /* the workers' clock (timer_now_ms) */
		bool sandboxes_handed_on; /* each sandbox's socket: a successor, or the manager */
		bool all_handed_on;       /* every listener: a successor takes them all */
	} drain;
};

/* The manager's name for sandbox <id>'s listening socket: this, then the id. */
#define ENGINE_FDNAME_PREFIX "sandbox."
/* ... for the gateway's public listeners and the TCP listener's: this, then a number. */
#define ENGINE_FDNAME_INGRESS "ingress."
#define ENGINE_FDNAME_TCP     "tcp."
/* ... for the gateway's internal socket (with TLS on the public listener). */
#define ENGINE_FDNAME_INGRESS_INTERNAL "internal.ingress"
/* ... for the metrics listener (core/metrics.h). */
#define ENGINE_FDNAME_METRICS "metrics"

/*
 * Every socket the daemon listens on for traffic, named as engine_start takes
 * them back (engine.inherited): each sandbox's, the gateway's public ones and
 * the TCP listener's, and the gateway's internal one; into *<out> (owned,
 * with room for <extra> more at its end), their count into *<count>. The
 * descriptors stay the engine's. 0 or -ENOMEM. Any thread, after engine_start.
 */
int engine_handover_list(struct engine *e, uint32_t extra, struct notify_fd **out, uint32_t *count);

/*
 * A successor serves every socket engine_handover_list gave it: marks the
 * engine handed over (its stop keeps the sockets' files, and its drain hands
 * every listener on) and asks the daemon to stop (e->stop_request).
 */
void engine_hand_over(struct engine *e);

/*
 * The sandboxes a daemon of <workers> workers with <pipes_per_worker> pipes
 * each can serve under an open-files limit of <nofile>: LIMITS_SANDBOXES_MAX,
 * or fewer where the descriptors left for listeners (limits.h,
 * LIMITS_FDS_RESERVED) are fewer; 0 when none are left. Pure.
 */
uint32_t engine_sandboxes_max_for(uint64_t nofile, uint32_t workers, uint32_t pipes_per_worker);

/*
 * Creates listeners for every sandbox in <cfg> and for every one recorded in
 * the registry, and starts the workers. <e> must be zeroed with cfg, policy,
 * ops and audit set. Returns 0 once every worker is serving, or -errno with
 * the cause logged (a socket path in use by a live daemon is -EADDRINUSE). On
 * failure nothing is left running.
 */
int engine_start(struct engine *e);

/*
 * This daemon alone serves (at once after engine_start, or once an upgrade's
 * old daemon took the hand-over): removes what the start left for a
 * predecessor to go on serving, the socket files (and a run-time sandbox's
 * record and directory) of every sandbox this daemon does not serve. A start
 * that fails before it has removed nothing the old daemon serves. Main
 * thread, once, after engine_start; engine_stop frees what it never ran for.
 */
void engine_commit(struct engine *e);

/*
 * Drains the workers ahead of engine_stop. <successor>: a process takes every
 * listening socket over (an upgrade); without one, each sandbox's socket is
 * still handed on when the service manager keeps it (e->manager), and the
 * rest are not. A listener handed on stops accepting, so a connection that
 * arrives meanwhile waits in its queue for the next daemon; the others go on
 * accepting. A request that arrives during the drain is served, its answer
 * closing its connection, when its listener is handed on, and is answered
 * 503 daemon_stopping with Retry-After when not. What was under way when the
 * drain began goes on; a connection with nothing under way is closed once it
 * has been quiet LIMITS_DRAIN_IDLE_MS. Returns, once every worker's conns are
 * gone or <drain_ms> has passed, how many conns are still open (engine_stop
 * aborts them). The main thread's, once, before engine_stop.
 */
uint64_t engine_drain(struct engine *e, bool successor, uint32_t drain_ms);

/*
 * Stops accepting, aborts every connection, joins the workers and closes the
 * listeners (unlinking their sockets; registry records stay for the next
 * start). Returns 0, or -EFAULT when any worker ended with a connection,
 * buffer, pipe or operation still outstanding.
 */
int engine_stop(struct engine *e);

/*
 * A failed socket or file step of a sandbox's add, as engine_sandbox_add
 * returns it: ENGINE_ERR_SYSTEM(<errno>), below every -errno (the kernel's
 * are under 4096). engine_err_errno gives the errno back, 0 for any other
 * result; engine_err_text says what any result means (strerror's words).
 */
#define ENGINE_ERR_SYSTEM_BASE    4096
#define ENGINE_ERR_SYSTEM(errnum) (-ENGINE_ERR_SYSTEM_BASE - (errnum))

static inline int engine_err_errno(int ret)
{
	return ret <= -ENGINE_ERR_SYSTEM_BASE ? -ret - ENGINE_ERR_SYSTEM_BASE : 0;
}

const char *engine_err_text(int ret);

/*
 * Adds sandbox <id> on profile <profile_name> while the engine runs: creates
 * its directory and listening socket, records it in the registry (with
 * <owner> when not NULL: a later start drops the record if that process is
 * gone, and so does engine_sandbox_reap_orphans while it runs) and hands it
 * to a worker. The directory is the daemon's (0755, writable by nobody else),
 * made fresh: whatever was in its place is removed first. With <ingress_fd>
 * (an owned sandbox, whose `agentsnet run` holds its ingress), the daemon
 * also makes <dir>/ingress.sock (0600) and puts its listening descriptor
 * there for the caller to pass on and close (-1 on failure). Writes the
 * sandbox's directory to <dir>/<cap>. With <who> (the control socket's
 * caller), the profile must admit it (verdict_ops.profile_admits: -EACCES
 * otherwise) and it is recorded as the sandbox's registrant (NULL: root).
 * *<agent_uid> is the uid the sandbox's agent runs as: its egress socket is
 * then that uid's, mode 0600 (only it and root may connect); a caller other
 * than root always registers for its own uid (another: -EACCES), and root
 * may give ENGINE_AGENT_ANY (mode 0666: any uid, as for the policy file's
 * sandboxes) or ENGINE_AGENT_NEW: a uid of daemon.sandbox_uids no other
 * sandbox holds, given until the sandbox is removed, is written back to
 * *<agent_uid>. A uid of that range is never named by a caller (-ERANGE).
 * Returns 0,
 * -EINVAL (<id> is not [A-Za-z0-9_.-]{1,63} or starts with '.'),
 * -ENAMETOOLONG (<id> is longer than the socket directory leaves room for,
 * with its ingress socket or without: layout_sandbox_id_room), -ENOENT (no
 * such profile), -EEXIST (also: <id> has a record a start could not adopt,
 * and <who> is neither root nor its registrant), -ENOSPC
 * (LIMITS_SANDBOXES_MAX reached), -EUSERS (every uid of the range is
 * given), -ERANGE, -EDQUOT (<who>, not root, holds
 * daemon.sandboxes_per_user sandboxes already), -ENOMEM, or
 * ENGINE_ERR_SYSTEM(errno) when a socket or file step failed (its errno
 * kept apart from the refusals: a full disk is not a full table, nor a
 * missing directory a missing profile). Control path only (takes the lock).
 */
int engine_sandbox_add(struct engine *e, const char *id, const char *profile_name,
		       const struct engine_owner *owner, const struct verdict_caller *who,
		       uint32_t *agent_uid, char *dir, size_t cap, int *ingress_fd);

/*
 * Removes run-time sandbox <id>: its worker stops accepting and aborts its
 * connections; then the socket, registry record and directory are removed.
 * Waits for the worker as long as it takes, logging every 5 s that it still
 * closes the sandbox's connections. With <who> (the control
 * socket's caller; NULL: the daemon itself), only its registrant or root may:
 * -EACCES otherwise, with the registrant's uid in *<registrant> (may be
 * NULL). With <only_owner> (an `agentsnet run` unregistering at its end, the
 * reaper), only the registration tied to that process (pid and start time)
 * is removed: -ESTALE, and nothing removed, when the id is registered
 * otherwise (again, by another process, since). An id not served whose
 * record a start could not adopt has that record and its directory removed,
 * by the same rules (a malformed record: root alone, and no owner's); its
 * uid of the pool stays given while the process it is tied to runs
 * (engine_sandbox_reap_orphans gives it back). Returns 0, -ENOENT,
 * -EPERM (the sandbox comes from the policy file), -EACCES, -ESTALE, or
 * ENGINE_ERR_SYSTEM(errno) (a record unreadable).
 */
int engine_sandbox_remove(struct engine *e, const char *id, const struct verdict_caller *who,
			  const struct engine_owner *only_owner, uint32_t *registrant);

/*
 * Removes every run-time sandbox whose owner process is gone (an
 * `agentsnet run` that was SIGKILLed cannot unregister itself), as
 * engine_sandbox_remove does, and logs each; gives back the uid of the pool
 * of each record a start could not adopt whose process is gone, with its
 * record and directory while they are still that record's. The owners are checked outside
 * the lock, so adds and removes are not held up by /proc reads. Returns how
 * many were removed. Control path only.
 */
uint32_t engine_sandbox_reap_orphans(struct engine *e);

/*
 * Publishes <policy> in place of the current snapshot. <file> is what the
 * policy file now says (its sandboxes, with profile indexes into <policy>):
 * a file sandbox that is running takes the profile the file gives it, one
 * the file newly names is opened, one it no longer names is removed; a
 * run-time sandbox keeps its profile by name. When some running sandbox's
 * profile is not in <policy>, nothing changes and -ENOENT is returned with
 * the sandbox and profile named in <err>/<cap>; <policy> is then still the
 * caller's. On 0 the engine owns <policy>; new requests decide with it once
 * each worker has woken (at once: every worker is woken). -ENOMEM likewise
 * leaves everything as it was. Control path only (takes the lock).
 */
int engine_policy_swap(struct engine *e, const void *policy, const struct config *file, char *err,
		       size_t cap);

/*
 * Whether every worker's loop still turns: each is sent a ping it completes
 * on its next turn, and waited for up to <timeout_ms> (a worker at most that
 * long). 0 when all answered; -ETIMEDOUT with *<late> the first that did not
 * (its ping stays posted and is waited for again on the next call). For the
 * service manager's watchdog; the main thread only, while the engine runs.
 */
int engine_workers_answer(struct engine *e, uint32_t timeout_ms, uint32_t *late);

/*
 * One line for the service manager's STATUS into <out> (<cap> bytes): the
 * sandboxes served, the connections open (as the workers last published them)
 * and the policy generation. Any thread, while the engine runs.
 */
void engine_status_line(struct engine *e, char *out, size_t cap);

/* Frees every retired snapshot no worker can reach any more. Control path only. */
void engine_policy_collect(struct engine *e);

/* One active sandbox as `sandbox stats` shows it (engine_sandbox_stats). */
struct engine_sandbox_view {
	const struct engine_sandbox *sb;
	uint64_t uptime_s; /* since its slot opened (a re-adopted one: since this daemon's start) */
	uint32_t conns;    /* open now */
	uint64_t requests; /* decisions since it opened, allowed or refused */
	uint64_t refusals;
	uint64_t bytes_up; /* delivered by its closed connections, each way */
	uint64_t bytes_down;
};

/*
 * Calls <fn> for every active sandbox, under the lock, with its traffic as the
 * workers last counted it (relaxed loads of their single-writer counters).
 * Control path.
 */
void engine_sandbox_stats(struct engine *e, void *arg,
			  void (*fn)(void *arg, const struct engine_sandbox_view *v));

/* Calls <fn> for every active sandbox, under the lock. */
void engine_sandbox_foreach(struct engine *e, void *arg,
			    void (*fn)(void *arg, const struct engine_sandbox *sb));

/*
 * Writes sandbox <id>'s public URL (the gateway's base, its prefix, "/<id>";
 * with per-sandbox origins, its own origin when it can have one; with its
 * token when its profile requires one: ingress_public_url; what the agent is
 * told as AGENT_PUBLIC_URL) to <out>/<cap>. <who> is the caller (NULL: the
 * daemon itself). 0, -ENOTCONN (the daemon has no gateway), -ENOENT (no such
 * sandbox), -EACCES (the URL holds the token, and <who> is neither root nor
 * the sandbox's registrant) or -ENAMETOOLONG. Control path (takes the lock).
 */
int engine_ingress_url(struct engine *e, const char *id, const struct verdict_caller *who,
		       char *out, size_t cap);

/* True when <id> is a valid sandbox id. */
bool engine_sandbox_id_valid(const char *id);

/*
 * Creates <dir> and its missing parents with exactly <mode> (whatever the
 * umask); existing ones are left as they are. 0 or -errno. Any thread (the
 * calling thread's umask becomes its own, apart from the others').
 */
int engine_mkdir_parents(const char *dir, mode_t mode);

/*
 * engine_mkdir_parents(<dir>, <mode>), then <dir> opened O_PATH without
 * following a symlink and checked: a directory owned by the daemon's uid that
 * neither group nor others may write (so no one else can put a link or a file
 * where the daemon makes its sockets). Returns that descriptor (the caller
 * closes it), or -errno logged naming the directory: -EPERM when it is
 * someone else's or writable by others. Any thread.
 */
int engine_dir_secure(const char *dir, mode_t mode);

/*
 * Checks every directory above the absolute <dir> (not <dir> itself), up to
 * "/": each must be owned by root or the daemon's uid and not writable by
 * group or others unless sticky (/tmp), since whoever may rename an entry
 * there could swap the socket directory for another. Returns 0, or -errno
 * logged naming the directory (-EPERM: not safe). engine_start runs it on
 * the socket directory.
 */
int engine_dir_ancestors_secure(const char *dir);

/*
 * Listens on the Unix socket <path>, made by bind with its final <mode> and,
 * unless (gid_t)-1, <group> (the calling thread's umask and fsgid set around
 * bind: no chmod by path after). Unless (uid_t)-1, <owner> is given the file
 * right after bind by lchown (bind makes it as the daemon, which alone may
 * write the directory); <mode> must then have no group or other bit, so until
 * then nobody but the daemon may connect. A stale socket file is
 * replaced; one a live process still serves is left alone: -EADDRINUSE.
 * <path>'s directory must be the daemon's own (engine_dir_secure). Returns
 * the descriptor or -errno (-ENAMETOOLONG past sun_path). Any thread.
 */
int engine_listen_unix(const char *path, mode_t mode, uid_t owner, gid_t group, bool nonblock);

/*
 * Whether <fd> is a stream socket that listens (one passed by a predecessor),
 * made <nonblock> or blocking as its server wants it.
 */
bool engine_socket_listening(int fd, bool nonblock);

/*
 * Whether <fd> is a stream socket listening on "addr:port" <text> (as the
 * loader normalised it) exactly, made non-blocking: a predecessor's listener
 * that still fits what this daemon's policy asks for.
 */
bool engine_inet_listening_on(int fd, const char *text);

/*
 * A listening TCP socket on "address:port" <text>, its own (no SO_REUSEPORT:
 * no other process may share the port), <nonblock> or blocking. The fd, or
 * -errno (-EINVAL: not an address:port, logged).
 */
int engine_listen_inet(const char *text, bool nonblock);

#endif /* AN_CORE_ENGINE_H */
