/*
 * The cgroup of one `agentsnet run` sandbox: a pids and a memory limit that
 * every process of the sandbox (threads included) counts against, and that
 * nothing inside can raise or leave (the agent holds no capability, and the
 * cgroup files are not writable by it).
 *
 * cgroup v2 (a cgroup2 file system at /sys/fs/cgroup, as on current
 * distributions): <root>/agentsnet/<id>, with pids and memory enabled in the
 * subtree_control of the levels above. cgroup v1 (this project's test machine,
 * and older hosts): <v1 root>/pids/agentsnet/<id> and <v1 root>/memory/agentsnet/<id>.
 * A hybrid host whose v2 tree has no controller uses v1.
 *
 * `agentsnet run` makes its sandbox's cgroup itself where it may (root, or a
 * delegated subtree); for an unprivileged run elsewhere the daemon makes it
 * (core/runlimit.h), so both link this module.
 */
#ifndef AN_CORE_CGROUP_H
#define AN_CORE_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Where the hierarchies are mounted; tests may point them elsewhere (cgroup_create's root). */
#define CGROUP_ROOT_DEFAULT "/sys/fs/cgroup"
/* The directory under each hierarchy that holds every sandbox's cgroup. */
#define CGROUP_PARENT_NAME "agentsnet"

struct cgroup_sandbox {
	int version;               /* 0: none made; 1 or 2 */
	char pids_dir[PATH_MAX];   /* v1: the pids cgroup; v2: the one cgroup ("" when none) */
	char memory_dir[PATH_MAX]; /* v1: the memory cgroup ("" when none or v2) */
};

/*
 * Makes the sandbox <id>'s cgroup(s) under <root> (CGROUP_ROOT_DEFAULT) and
 * writes <pids_max> and <memory_max_bytes> (0: no limit of that kind) into
 * them. A cgroup of that name that already exists is refused (-EEXIST), never
 * reused: its limits or members could be someone else's. Returns 0 with
 * <cg> filled, -ENOENT/-EACCES/-EPERM/-EROFS when this caller cannot make a
 * cgroup here (no hierarchy, an unprivileged caller without delegation: the
 * caller then falls back), or another -errno, with <err> (<err_len> bytes)
 * naming the file and the fault. <cg> is zeroed (version 0) on failure.
 */
int cgroup_create(struct cgroup_sandbox *cg, const char *root, const char *id, uint64_t pids_max,
		  uint64_t memory_max_bytes, char *err, size_t err_len);

/*
 * cgroup_create for another process's sandbox: on v1 the cgroup is made under
 * process <nest_pid>'s own cgroup of each hierarchy (/proc/<nest_pid>/cgroup;
 * 0: ours), so it stays inside the limits that process had; v2 as
 * cgroup_create. For the daemon, which makes the cgroup an unprivileged
 * `agentsnet run` cannot (core/runlimit.h).
 */
int cgroup_create_under(struct cgroup_sandbox *cg, const char *root, const char *id, pid_t nest_pid,
			uint64_t pids_max, uint64_t memory_max_bytes, char *err, size_t err_len);

/*
 * Moves process <pid> (0: the caller) into <cg>. Call it for the sandbox's
 * first process before that runs anything of the agent's: children follow
 * their parent. Returns 0 or -errno with <err> naming the file.
 */
int cgroup_enter(const struct cgroup_sandbox *cg, pid_t pid, char *err, size_t err_len);

/*
 * Removes <cg>'s directories once their processes are gone (rmdir, retried
 * for a short while: the kernel empties a cgroup a moment after its last
 * process is reaped). Leaves <cg> at version 0. Returns 0 or -errno of the
 * last rmdir (-EBUSY: something still runs in it).
 */
int cgroup_remove(struct cgroup_sandbox *cg);

/*
 * One try of cgroup_remove, for a caller that comes back later: a directory
 * still busy stays in <cg> (-EBUSY), the removed ones leave it; <cg> is
 * version 0 once all are gone. Returns 0 or the -errno of the last rmdir.
 */
int cgroup_remove_now(struct cgroup_sandbox *cg);

/*
 * Fills <cg> with the cgroups process <pid> is in (under <root>, NULL:
 * CGROUP_ROOT_DEFAULT) whose path ends in agentsnet/<name>: how a restarted
 * daemon finds again the cgroup it made for a run that is still inside.
 * Returns 0, -ENOENT (in none of that name), or -errno.
 */
int cgroup_of_process(struct cgroup_sandbox *cg, const char *root, pid_t pid, const char *name);

/*
 * Makes sure this process sees the cgroup hierarchies at CGROUP_ROOT_DEFAULT:
 * where its mount namespace shows none there (`ip netns exec` mounts a fresh
 * sysfs), mounts them in a mount namespace of its own, as cgroup_create does.
 * Call it while the process has one thread (unshare(CLONE_NEWNS) needs that).
 * Returns 0, or -errno (no hierarchy; -EPERM without CAP_SYS_ADMIN).
 */
int cgroup_hierarchies_ensure(void);

#endif /* AN_CORE_CGROUP_H */
