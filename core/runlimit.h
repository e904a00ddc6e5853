/*
 * The cgroups the daemon makes for unprivileged `agentsnet run` callers.
 *
 * A run's pids and memory limits need a cgroup. Root's run makes its own
 * (core/cgroup.h); an unprivileged caller can only where the host delegated a
 * cgroup subtree to it (systemd's user@.service on cgroup v2). Elsewhere (cgroup
 * v1 hosts, containers without delegation, this project's test machine) the
 * memory of its sandbox would have no bound at all, so the run asks the daemon,
 * which is root: `sandbox limit <id> <pids_max> <memory_max_bytes>`.
 *
 * The daemon makes <id>.<pid> (core/cgroup.h's layout, nested on v1 in the
 * caller's own cgroup so a container's limits still hold) and moves the caller
 * itself into it; the sandbox the caller then starts is born inside, and every
 * process of it counts, the caller too (it asks for one more pid). Nothing lets
 * one user move another's process: the request must come from the very process
 * that registered <id> as owned (pid and start time), that process is named by
 * a pidfd (SO_PEERPIDFD, or pidfd_open checked against the registration), and
 * the move counts only if the pidfd's process is still alive after it (a pid is
 * reused only after its process is reaped, so a live one was never replaced).
 * Limits a caller gives are its own to choose: they bind only its own sandbox.
 *
 * The cgroup goes when its sandbox does: each control tick (runlimit_collect)
 * removes the cgroups whose sandbox is no longer registered to the same owner,
 * one rmdir each, again on later ticks while the caller (still inside) exits.
 * One per owned sandbox at most, so the list is bounded by the sandbox table.
 * The control thread alone uses a runlimits.
 *
 * A cgroup outlives a daemon that stops while its run is inside (rmdir says
 * EBUSY). So each one made is recorded in <socket_dir>/cgroups/<id>.<pid>
 * (the daemon's directory, 0700; the file 0600: its version and directories),
 * removed with the cgroup. A daemon that starts takes back the cgroups of the
 * runs it re-adopts (runlimit_adopt), and removes the recorded ones of runs
 * that ended meanwhile, or retries each tick while one is still busy.
 */
#ifndef AN_CORE_RUNLIMIT_H
#define AN_CORE_RUNLIMIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/cgroup.h"
#include "core/engine.h"

struct runlimit {
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	struct engine_owner owner; /* who asked: the sandbox's owner then */
	struct cgroup_sandbox cg;
};

struct runlimits {
	struct runlimit **v; /* owned */
	size_t n, cap;
	const char *root;       /* the hierarchies' mount point: CGROUP_ROOT_DEFAULT, or a test's */
	const char *socket_dir; /* borrowed: where the records live; NULL: none kept */
};

/*
 * Makes sandbox <id>'s cgroup with <pids_max> and <memory_max_bytes> (0: no
 * limit of that kind, not both) and moves the caller into it. <peer> is the
 * control connection's SO_PEERCRED, <sock> the connection (for its pidfd).
 * Returns 0, or -errno with <err>: -ENOENT (no such sandbox), -EACCES (<id> is
 * not owned by the calling process), -EEXIST (already limited), -EINVAL (no
 * limit), -ESRCH (the caller died during the move; nothing is left),
 * -EOPNOTSUPP (the host has no hierarchy or controller for a limit asked
 * for, or none this daemon may make a cgroup in: cgroup_create_under's
 * ENOENT, EACCES, EPERM, EROFS), -ENOMEM, or ENGINE_ERR_SYSTEM(errno) when
 * another system call failed (the caller's pidfd, the cgroup's making, the
 * move), kept apart from the refusals above.
 */
int runlimit_apply(struct runlimits *l, struct engine *e, const char *id, int sock, pid_t peer_pid,
		   uint64_t pids_max, uint64_t memory_max_bytes, char *err, size_t err_len);

/*
 * At the daemon's start: takes back the cgroups an earlier daemon made for the
 * owned sandboxes it re-adopted, found where each owner process is now
 * (agentsnet/<id>.<pid>), so they are removed with their sandbox as well; then
 * removes every other recorded cgroup (its run ended while no daemon ran), or
 * keeps it on the list, retried each tick, while it is busy.
 */
void runlimit_adopt(struct runlimits *l, struct engine *e);

/* Removes the cgroups of sandboxes that are gone (one try each; busy ones wait a tick). */
void runlimit_collect(struct runlimits *l, struct engine *e);

/* At the daemon's stop: one try at every cgroup left, then frees the list. */
void runlimit_free(struct runlimits *l);

#endif /* AN_CORE_RUNLIMIT_H */
