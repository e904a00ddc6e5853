/*
 * What the parts of `agentsnet run`'s sandbox share, and nothing else includes:
 * tools/agentsnet/sandbox.c (the checks, the start and the supervision), tools/agentsnet/wwdirs.c
 * (the host's world-writable directories), tools/agentsnet/sockmask.c (the host's socket
 * files to mask), tools/agentsnet/sandbox_root.c (the sandbox's root) and
 * tools/agentsnet/sandbox_child.c (the child's setup inside the namespaces). One file per job; what the parent finds before the clone is the
 * child's to use, so its types live here.
 */
#ifndef AN_TOOLS_AGENTSNET_SANDBOX_INT_H
#define AN_TOOLS_AGENTSNET_SANDBOX_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tools/agentsnet/hostsock.h"
#include "tools/agentsnet/sandbox.h"

/* Size of each private instance of a world-writable directory (/tmp included). */
#define SANDBOX_PRIVATE_TMPFS_SIZE "1g"

/* World-writable directories given an instance of their own, at most (more: collapsed). */
#define SANDBOX_WW_MAX 256
/*
 * The walk: levels below / it looks at, and the directory entries it reads at
 * most from the directories of one owner (one budget per uid, or per gid for a
 * group-writable directory: whoever may add entries pays for them).
 */
#define SANDBOX_WW_DEPTH     3u
#define SANDBOX_WW_VISIT_MAX 32768u
/* Owners the walk keeps a budget of their own for; the others share the last one. */
#define SANDBOX_WW_OWNERS 64u
/* What no mask of the walk's may hide: the bridge, the directory, the probe, the CA, the cwd. */
#define SANDBOX_WW_KEEP 5u
/* A mountinfo line at worst: root and mount point of PATH_MAX bytes each, every byte escaped
 * to 4 (\040), plus the ids, options and source: read whole, or the run fails. */
#define SANDBOX_MOUNTINFO_LINE (64u << 10)

/* A world-writable host directory, by its path below the walk's root. */
struct ww_dir {
	char path[PATH_MAX];
	mode_t mode; /* the host directory's permission bits: its private instance gets them */
	bool masked; /* hidden whole (empty, read-only): a collapsed parent, or a walk cut short */
};

/* The entries the directories of one owner showed the walk (key: a uid, or a gid | 1 << 32). */
struct ww_owner {
	uint64_t key;
	size_t spent;
};

struct ww_list {
	size_t n;
	size_t visited;   /* directory entries the walk read, in all */
	size_t visit_max; /* per owner (SANDBOX_WW_VISIT_MAX): past it a directory is cut short */
	size_t n_keep;
	size_t n_owners;
	/* Paths below the root that no mask may hide (an ancestor of one neither), and what
	 * each is; set by the caller of ww_find. */
	char keep[SANDBOX_WW_KEEP][PATH_MAX];
	const char *keep_what[SANDBOX_WW_KEEP];
	char blocked[PATH_MAX]; /* -E2BIG: what a collapse would have had to hide */
	size_t blocked_keep;    /* and which of keep it holds */
	struct ww_owner owners[SANDBOX_WW_OWNERS];
	struct ww_dir dirs[SANDBOX_WW_MAX + 1]; /* + 1: the one a collapse makes room for */
	size_t mountinfo_line_no; /* -EOVERFLOW: the mountinfo line that did not fit */
	char mountinfo_line[SANDBOX_MOUNTINFO_LINE + 2]; /* + 2: its newline and NUL */
};

struct child_ctx {
	const struct sandbox_spec *s;
	const char **argv;          /* owned by sandbox_start */
	struct ww_list *ww;         /* owned by sandbox_start */
	struct root_sources *roots; /* owned by sandbox_start: opened before the clone */
	/* The host's socket files left in view by the mounts, each masked (owned by sandbox_start). */
	struct hostsock_list sockets;
	const struct ptyrelay *pty; /* the sandbox's: master -1 when none */
	uint64_t nproc_max;         /* RLIMIT_NPROC to set (no cgroup), or 0 */
	int err_fd;
	int alive_fd;
	int pty_fd; /* the child's end of the socket its pty's master goes back over, or -1 */
};

/* ---- tools/agentsnet/wwdirs.c ---- */

/* One line of /proc/self/mountinfo, split in place (the strings point into the line). */
struct mountinfo_entry {
	const char *devno; /* "major:minor" */
	char *root;        /* the mount's root within its file system, unescaped */
	char *mount_point; /* unescaped */
	char *type;        /* the file system type */
};

/* Splits mountinfo <line> (NUL-terminated, changed) into <e>; false when it is not one. */
bool mountinfo_split(char *line, struct mountinfo_entry *e);

/* Whether <rel> is hidden already: under a replaced tree or a directory on the list. */
bool ww_covered(const struct ww_list *l, const char *rel);
/* Which path of l->keep <rel> is or holds ("/" holds them all: 0), or -1 when none. */
int ww_kept(const struct ww_list *l, const char *rel);
/* Puts <rel> at the end of <l>, dropping the entries below it (it hides them). */
void ww_put(struct ww_list *l, const char *rel, mode_t mode, bool masked);
/* Lists the host's world-writable directories for the child; -errno with <err> set. */
int ww_prepare(struct ww_list *l, const struct sandbox_spec *s, char *err, size_t err_len);
/* One line on stderr naming the directories the sandbox hides whole, if any. */
void ww_report(const struct ww_list *l);

/* ---- tools/agentsnet/sockmask.c ---- */

/* Lists the host's socket files the mounts leave in view into c->sockets, hiding
 * directories whole (masked entries of c->ww) past the masks' bound; -errno with <err>. */
int sockets_prepare(struct child_ctx *c, char *err, size_t err_len);

/* ---- tools/agentsnet/sandbox_root.c ---- */

/* One source of the sandbox's root: a host directory or file, or a symlink to copy. */
struct root_source {
	char path[PATH_MAX]; /* where it is inside: its host path, or a system directory's name */
	char from[PATH_MAX]; /* its host path, read from the descriptor */
	int fd;              /* O_PATH, opened by the caller before the clone; -1 for a symlink */
	bool read_only;
	bool is_dir;
	char link[256]; /* a top-level symlink's target, copied as it is ("" when not one) */
};

/* SANDBOX_SYSTEM_DIRS, the working directory and the binds: everything root_enter shows. */
#define ROOT_SOURCES_MAX (16u + 1u + SANDBOX_BINDS_MAX)

struct root_sources {
	size_t n;
	/* The working directory as bound (its descriptor's path), "" when it is not: the
	 * bridge starts there. */
	char cwd[PATH_MAX];
	struct root_source src[ROOT_SOURCES_MAX];
};

/*
 * In `agentsnet run`'s own process, before the clone: opens every source of
 * the root (<s>'s system directories, working directory, binds), each once.
 * The working directory is "." itself, never looked up by name, and each
 * path is read back from its descriptor and checked there (sandbox_bind_check):
 * a name a host user swaps for a symlink between the caller's check and the
 * open cannot bind "/" or anything the checks refuse. Returns 0, or -errno
 * with <err> naming the path; root_close releases the descriptors either way.
 */
int root_open(const struct sandbox_spec *s, struct root_sources *r, char *err, size_t err_len);
void root_close(struct root_sources *r);
/*
 * In the child, in the new mount namespace before any mount: opens each
 * source again there (a bind needs a mount of this namespace), by the path
 * its first descriptor named, following no symlink, and fails unless it is
 * the very file the first descriptor is open on (device and inode).
 */
void root_reopen(const struct child_ctx *c, struct root_sources *r);
/*
 * In the child: builds the root from <r> on a tmpfs, with the agent's home,
 * and pivots into it, the host's root kept at ROOT_HOST_DIR until root_leave.
 */
void root_enter(const struct child_ctx *c, struct root_sources *r);
/* Detaches the host's root (after every bind from a descriptor) and makes "/" read-only. */
void root_leave(const struct child_ctx *c);
/* Where the host's root is between root_enter and root_leave. */
#define ROOT_HOST_DIR "/.agentsnet-host"

/* ---- tools/agentsnet/sandbox_child.c ---- */

/* Reports <err> and a message to the parent over <fd> and exits; the exec never happens. */
__attribute__((format(printf, 3, 4))) _Noreturn void child_fail(int fd, int err, const char *fmt,
								...);
/* mount(2), mkdir(2) with exactly <mode>, symlink(2): on failure child_fail naming the path. */
void must_mount(const struct child_ctx *c, const char *src, const char *target, const char *type,
		unsigned long flags, const char *data);
void must_mkdir(const struct child_ctx *c, const char *path, mode_t mode);
void must_symlink(const struct child_ctx *c, const char *target, const char *path);
/* Remounts the bind at <target> read-only and nosuid, plus <flags>, keeping locked atime flags. */
void bind_read_only(const struct child_ctx *c, const char *target, unsigned long flags);

/* The clone's child: sets the sandbox up and execs the bridge; on failure reports over
 * c->err_fd and exits 127. Never returns. */
_Noreturn void child_main(const struct child_ctx *c);

#endif
