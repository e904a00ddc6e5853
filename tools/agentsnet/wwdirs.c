/*
 * The host's world-writable directories, for `agentsnet run`'s sandbox: the
 * parent lists them before the clone (ww_prepare, from tools/agentsnet/sandbox.c), and
 * the child gives each a private instance or masks it (mount_private).
 *
 * No shared host state: a world-writable directory is where another sandbox or
 * a host service can leave a socket or a file for the agent, and the agent one
 * for them. Each gets a private, empty tmpfs (the host's mode, nosuid, nodev,
 * bounded), mounted through a descriptor opened without following a symlink:
 * /tmp, /var/tmp, /var/lock, /var/crash, /var/metrics when they are
 * directories; every world-writable mount point of /proc/self/mountinfo (each
 * line read whole, up to SANDBOX_MOUNTINFO_LINE; a longer one fails the run);
 * and what a walk finds: at most SANDBOX_WW_DEPTH levels below /, each mount point
 * walked on its own file system (network, FUSE and automount ones not at all),
 * /proc, /sys, /dev and /run skipped (replaced or not writable), no symlink
 * followed (the test machine's ~3200 entries: 15 to 20 ms under sanitizers).
 * It fails closed without letting anyone who can make directories stop every
 * run: past SANDBOX_WW_MAX instances the list collapses (the entries below the
 * deepest directory holding two or more become that directory, masked: empty
 * and read-only; it held what the host let anyone write into), and the entries
 * a directory shows are charged to its owner (its group, if group-writable),
 * SANDBOX_WW_VISIT_MAX each: a directory read when its owner's budget is spent
 * is cut short and masked whole, so one who fills a directory of theirs hides
 * only their own. Neither masks / nor a directory holding the bridge, the
 * sandbox's directory, the probe, the CA or the working directory: a
 * collapse that needs one fails the run, naming it (only directly below those
 * can more than SANDBOX_WW_MAX world-writable directories do that); a cut
 * reads one to its end. One line on stderr names what is masked. What the
 * walk cannot find stays the operator's job, and `agentsnet selftest` reports
 * what the agent can reach: a world-writable directory deeper than that below
 * a mount point (/srv/a/b/shared), one made after the sandbox started, and
 * directories writable by a group or by the agent's own uid (unprivileged: the
 * caller's home).
 */
#include "tools/agentsnet/sandbox_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/an.h"

/* ---- The host's world-writable directories (the parent lists them, the child masks them). ---- */

/* Where the sandbox shows something else (/proc, /dev, /run), or what no one may write (/sys). */
static const char *const ww_replaced[] = { "/proc", "/sys", "/dev", "/run", "/var/run" };
/* The shared directories every host may have, masked whatever their mode. */
static const char *const ww_known[] = { "/tmp", "/var/tmp", "/var/lock", "/var/crash",
					"/var/metrics" };
/* File systems the walk never enters: remote (slow, or hung with their server), or automounted. */
static const char *const ww_unwalked[] = { "autofs", "nfs", "cifs",  "smb",       "ceph",  "fuse",
					   "9p",     "afs", "davfs", "glusterfs", "lustre" };

/* Whether <rel> is hidden already: under a replaced tree or a directory on the list. */
bool ww_covered(const struct ww_list *l, const char *rel)
{
	AN_ASSERT(rel[0] == '/');
	AN_ASSERT(l->n <= SANDBOX_WW_MAX);
	for (size_t i = 0; i < AN_ARRAY_LEN(ww_replaced); i++) {
		if (sandbox_path_under(rel, ww_replaced[i]))
			return true;
	}
	for (size_t i = 0; i < l->n; i++) {
		if (sandbox_path_under(rel, l->dirs[i].path))
			return true;
	}
	return false;
}

/* Which path of l->keep <rel> is or holds ("/" holds them all: 0), or -1 when none. */
int ww_kept(const struct ww_list *l, const char *rel)
{
	AN_ASSERT(rel[0] == '/');
	AN_ASSERT(l->n_keep <= SANDBOX_WW_KEEP);
	if (strcmp(rel, "/") == 0)
		return 0;
	for (size_t k = 0; k < l->n_keep; k++) {
		if (sandbox_path_under(l->keep[k], rel))
			return (int)k;
	}
	return -1;
}

/* Puts <rel> at the end of <l>, dropping the entries below it (it hides them). */
void ww_put(struct ww_list *l, const char *rel, mode_t mode, bool masked)
{
	size_t kept = 0;

	AN_ASSERT(strcmp(rel, "/") != 0);
	AN_ASSERT(strlen(rel) < PATH_MAX);
	for (size_t i = 0; i < l->n; i++) {
		if (!sandbox_path_under(l->dirs[i].path, rel))
			l->dirs[kept++] = l->dirs[i];
	}
	l->n = kept;
	AN_ASSERT(l->n < AN_ARRAY_LEN(l->dirs));
	snprintf(l->dirs[l->n].path, sizeof(l->dirs[l->n].path), "%s", rel);
	l->dirs[l->n].mode = mode & 07777;
	l->dirs[l->n].masked = masked;
	l->n++;
}

static unsigned ww_depth(const char *rel)
{
	unsigned depth = 0;

	AN_ASSERT(rel[0] == '/');
	for (const char *p = rel; *p != '\0'; p++)
		depth += *p == '/' && p[1] != '\0';
	return depth;
}

static size_t ww_count_under(const struct ww_list *l, const char *dir)
{
	size_t n = 0;

	AN_ASSERT(dir[0] == '/');
	AN_ASSERT(strcmp(dir, "/") != 0);
	for (size_t i = 0; i < l->n; i++)
		n += sandbox_path_under(l->dirs[i].path, dir);
	return n;
}

/*
 * The deepest directory (not "/") holding two entries of <l> or more, into
 * <best>: one that l->keep allows to hide, else (return false) the deepest one
 * it does not, into l->blocked.
 */
static bool ww_common(struct ww_list *l, char *best)
{
	char a[PATH_MAX];
	unsigned best_depth = 0, blocked_depth = 0;

	AN_ASSERT(l->n >= 2);
	best[0] = '\0';
	l->blocked[0] = '\0';
	for (size_t i = 0; i < l->n; i++) {
		snprintf(a, sizeof(a), "%s", l->dirs[i].path);
		for (char *slash = strrchr(a, '/'); slash != NULL && slash != a;
		     slash = strrchr(a, '/')) {
			*slash = '\0'; /* the next ancestor of the entry */
			unsigned depth = ww_depth(a);
			if (depth <= best_depth)
				break; /* the others are shallower still */
			if (ww_count_under(l, a) < 2)
				continue;
			int k = ww_kept(l, a);
			if (k < 0) {
				memcpy(best, a, strlen(a) + 1);
				best_depth = depth;
			} else if (depth > blocked_depth) {
				memcpy(l->blocked, a, strlen(a) + 1);
				l->blocked_keep = (size_t)k;
				blocked_depth = depth;
			}
			break; /* shallower ones hold as much, and more of l->keep */
		}
	}
	return best[0] != '\0';
}

/*
 * Adds <rel> (not covered), dropping the entries below it; <masked>: hidden
 * whole. A full list is collapsed (entries sharing the deepest parent l->keep
 * lets us hide are replaced with that parent, masked) until it fits; -E2BIG
 * (l->blocked says where) when no such parent is left.
 */
static int ww_add(struct ww_list *l, const char *rel, mode_t mode, bool masked)
{
	char parent[PATH_MAX];

	AN_ASSERT(strcmp(rel, "/") != 0);
	AN_ASSERT(l->n <= SANDBOX_WW_MAX);
	ww_put(l, rel, mode, masked);
	while (l->n > SANDBOX_WW_MAX) {
		if (!ww_common(l, parent))
			return -E2BIG;
		ww_put(l, parent, 0755, true);
	}
	return 0;
}

/* The budget the entries of the directory <st> are charged to: whoever may add entries. */
static size_t *ww_budget(struct ww_list *l, const struct stat *st)
{
	uint64_t key = (st->st_mode & S_IWGRP) ? (1ull << 32) | st->st_gid : st->st_uid;

	AN_ASSERT(l->n_owners <= SANDBOX_WW_OWNERS);
	for (size_t i = 0; i < l->n_owners; i++) {
		if (l->owners[i].key == key)
			return &l->owners[i].spent;
	}
	if (l->n_owners == SANDBOX_WW_OWNERS)
		return &l->owners[SANDBOX_WW_OWNERS - 1].spent; /* the rest share the last */
	l->owners[l->n_owners] = (struct ww_owner){ .key = key };
	return &l->owners[l->n_owners++].spent;
}

/* <root> followed by <rel> ("/" + "/tmp" is "/tmp"). */
static int ww_join(char *out, size_t cap, const char *root, const char *rel)
{
	AN_ASSERT(root[0] == '/');
	AN_ASSERT(rel[0] == '/');
	int n = strcmp(root, "/") == 0 ? snprintf(out, cap, "%s", rel)
				       : snprintf(out, cap, "%s%s", root, rel);
	return n >= 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static int ww_walk(struct ww_list *l, int fd, char *rel, size_t rel_len, unsigned depth, dev_t dev);

/* Looks at <name> in <parent> (<rel>, at <depth>): listed when world-writable, else walked. */
static int ww_visit(struct ww_list *l, int parent, const char *name, char *rel, unsigned depth,
		    dev_t dev)
{
	struct stat st;

	AN_ASSERT(depth <= SANDBOX_WW_DEPTH);
	AN_ASSERT(parent >= 0);
	if (ww_covered(l, rel))
		return 0;
	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == -1 || !S_ISDIR(st.st_mode) ||
	    st.st_dev != dev)
		return 0; /* another file system is walked from its own mount point */
	if (st.st_mode & S_IWOTH)
		return ww_add(l, rel, st.st_mode, false);
	if (depth == SANDBOX_WW_DEPTH)
		return 0;
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return 0; /* unreadable to us: the agent (our uid, or less) cannot list it either */
	return ww_walk(l, fd, rel, strlen(rel), depth, dev);
}

/*
 * Reads the directory open at <fd> (taken), <rel> at <depth>, on device <dev>,
 * charging each entry to its owner's budget. Once that is spent, the rest of
 * the directory goes unread: it is cut short, and hidden whole (masked) so
 * that nothing it holds stays shared, unless l->keep forbids hiding it (then
 * it is read to its end).
 */
static int ww_walk(struct ww_list *l, int fd, char *rel, size_t rel_len, unsigned depth, dev_t dev)
{
	struct stat st;
	bool cut = false;
	int ret = 0;

	AN_ASSERT(rel_len < PATH_MAX);
	AN_ASSERT(depth < SANDBOX_WW_DEPTH);
	DIR *d = fstat(fd, &st) == 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		close(fd);
		return 0;
	}
	size_t *spent = ww_budget(l, &st);
	bool kept = ww_kept(l, rel) >= 0;
	while (ret == 0) {
		const struct dirent *de = readdir(d);
		if (de == NULL)
			break;
		cut = !kept && *spent >= l->visit_max;
		if (cut)
			break;
		(*spent)++;
		l->visited++;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
			continue;
		size_t base = rel_len == 1 ? 0 : rel_len; /* "/" + "a" is "/a" */
		int n = snprintf(rel + base, PATH_MAX - base, "/%s", de->d_name);
		if (n > 0 && (size_t)n < PATH_MAX - base)
			ret = ww_visit(l, dirfd(d), de->d_name, rel, depth + 1, dev);
		rel[rel_len] = '\0';
	}
	closedir(d);
	if (ret == 0 && cut && !ww_covered(l, rel))
		ret = ww_add(l, rel, st.st_mode, true);
	return ret;
}

/* Walks the mount at <rel> below <root> (fstype <type>) when it is near enough and local. */
static int ww_walk_mount(struct ww_list *l, const char *root, const char *rel, const char *type)
{
	char path[PATH_MAX], walked[PATH_MAX];
	struct stat st;

	AN_ASSERT(rel[0] == '/');
	AN_ASSERT(type != NULL);
	unsigned depth = ww_depth(rel);
	for (size_t i = 0; i < AN_ARRAY_LEN(ww_unwalked); i++) {
		if (strncmp(type, ww_unwalked[i], strlen(ww_unwalked[i])) == 0)
			return 0;
	}
	if (depth >= SANDBOX_WW_DEPTH || ww_join(path, sizeof(path), root, rel) != 0)
		return 0;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return 0;
	if (fstat(fd, &st) == -1) {
		close(fd);
		return 0;
	}
	snprintf(walked, sizeof(walked), "%s", rel);
	return ww_walk(l, fd, walked, strlen(walked), depth, st.st_dev);
}

/* Decodes mountinfo's octal escapes (\040 for a space) in place. */
static void mountinfo_unescape(char *s)
{
	char *out = s;

	AN_ASSERT(s != NULL);
	for (const char *p = s; *p != '\0'; p++) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
		    p[3] >= '0' && p[3] <= '7') {
			*out++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 3;
		} else {
			*out++ = *p;
		}
	}
	*out = '\0';
}

bool mountinfo_split(char *line, struct mountinfo_entry *e)
{
	char *fields[5];
	char *p = line;

	AN_ASSERT(line != NULL);
	for (int field = 0; field < 5; field++) {
		fields[field] = p;
		p = strchr(p, ' ');
		if (p == NULL)
			return false;
		*p++ = '\0';
	}
	char *dash = strstr(p, " - ");
	if (dash == NULL || fields[4][0] != '/' || fields[3][0] != '/')
		return false;
	e->devno = fields[2];
	e->root = fields[3];
	e->mount_point = fields[4];
	e->type = dash + 3;
	char *type_end = strchr(e->type, ' ');
	if (type_end != NULL)
		*type_end = '\0';
	mountinfo_unescape(e->root);
	mountinfo_unescape(e->mount_point);
	return true;
}

/* Splits a mountinfo line: its mount point (field 5) and file system type (after " - "). */
static bool mountinfo_fields(char *line, char **mount_point, char **type)
{
	struct mountinfo_entry e;

	if (!mountinfo_split(line, &e))
		return false;
	*mount_point = e.mount_point;
	*type = e.type;
	return true;
}

/* One mount: listed when its directory is world-writable, else walked. */
static int ww_mount(struct ww_list *l, const char *root, const char *rel, const char *type)
{
	char path[PATH_MAX];
	struct stat st;

	AN_ASSERT(rel[0] == '/');
	AN_ASSERT(root[0] == '/');
	if (strcmp(rel, "/") != 0 && ww_covered(l, rel))
		return 0;
	if (strcmp(rel, "/") != 0 && ww_join(path, sizeof(path), root, rel) == 0 &&
	    lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IWOTH))
		return ww_add(l, rel, st.st_mode, false);
	return ww_walk_mount(l, root, rel, type);
}

/*
 * Lists the world-writable directories below <root> ("/"; a test's tree)
 * into <l> (l->visit_max and l->keep set): the known ones that are
 * directories, the world-writable mount points of <mountinfo> (paths below
 * <root>), and what the walk finds; plus, masked, the directories a collapse
 * or a spent budget hides whole. Returns 0, -E2BIG when more than
 * SANDBOX_WW_MAX would have needed l->blocked hidden, -EOVERFLOW when line
 * l->mountinfo_line_no of <mountinfo> is longer than SANDBOX_MOUNTINFO_LINE
 * (never skipped: its mount point could be a world-writable one), or -errno of
 * opening or reading <mountinfo>.
 */
static int ww_find(struct ww_list *l, const char *root, const char *mountinfo)
{
	char path[PATH_MAX];
	struct stat st;
	int ret = 0;

	AN_ASSERT(l->visit_max > 0);
	l->n = 0;
	l->visited = 0;
	l->n_owners = 0;
	l->blocked[0] = '\0';
	l->mountinfo_line_no = 0;
	for (size_t i = 0; i < AN_ARRAY_LEN(ww_known) && ret == 0; i++) {
		if (ww_join(path, sizeof(path), root, ww_known[i]) == 0 && lstat(path, &st) == 0 &&
		    S_ISDIR(st.st_mode))
			ret = ww_add(l, ww_known[i], st.st_mode, false);
	}
	FILE *f = fopen(mountinfo, "re");
	if (f == NULL)
		return -errno;
	char *line = l->mountinfo_line;
	while (ret == 0 && fgets(line, sizeof(l->mountinfo_line), f) != NULL) {
		l->mountinfo_line_no++;
		if (line[strlen(line) - 1] != '\n' && !feof(f)) {
			ret = -EOVERFLOW;
			break;
		}
		char *mount_point = NULL, *type = NULL;
		if (mountinfo_fields(line, &mount_point, &type))
			ret = ww_mount(l, root, mount_point, type);
	}
	if (ret == 0 && ferror(f))
		ret = -EIO;
	fclose(f);
	return ret;
}

/* What the walk's masks must leave visible: canonical, or as given when that fails. */
static void ww_keep_set(struct ww_list *l, const struct sandbox_spec *s)
{
	static const char *const what[SANDBOX_WW_KEEP] = {
		"the bridge",  "the sandbox's directory", "the probe",
		"the CA file", "the working directory",
	};
	const char *paths[SANDBOX_WW_KEEP] = { s->bridge, s->dir, s->probe, s->ca_path, s->cwd };

	AN_ASSERT(l != NULL);
	AN_ASSERT(AN_ARRAY_LEN(what) == AN_ARRAY_LEN(paths));
	l->n_keep = 0;
	for (size_t i = 0; i < SANDBOX_WW_KEEP; i++) {
		if (paths[i] == NULL || paths[i][0] != '/')
			continue;
		char *k = l->keep[l->n_keep];
		if (realpath(paths[i], k) == NULL)
			snprintf(k, PATH_MAX, "%s", paths[i]);
		l->keep_what[l->n_keep++] = what[i];
	}
}

/* One line on stderr naming the directories the sandbox hides whole, if any. */
void ww_report(const struct ww_list *l)
{
	char names[768];
	size_t len = 0, n = 0;

	AN_ASSERT(l->n <= SANDBOX_WW_MAX);
	names[0] = '\0';
	for (size_t i = 0; i < l->n; i++) {
		if (!l->dirs[i].masked)
			continue;
		n++;
		int w = len < sizeof(names) ? snprintf(names + len, sizeof(names) - len, "%s%s",
						       n > 1 ? ", " : "", l->dirs[i].path)
					    : 0;
		len += w > 0 ? (size_t)w : 0;
	}
	if (n == 0)
		return;
	fprintf(stderr,
		"agentsnet: the sandbox hides %zu director%s of the host whole, empty and "
		"read-only (world-writable directories below it, too many to give each an "
		"instance, or too many entries to search): %s%s\n",
		n, n == 1 ? "y" : "ies", names, len >= sizeof(names) ? "..." : "");
}

/* Lists the host's world-writable directories for the child; -errno with <err> set. */
int ww_prepare(struct ww_list *l, const struct sandbox_spec *s, char *err, size_t err_len)
{
	AN_ASSERT(l != NULL);
	AN_ASSERT(err != NULL);
	l->visit_max = SANDBOX_WW_VISIT_MAX;
	ww_keep_set(l, s);
	int ret = ww_find(l, "/", "/proc/self/mountinfo");
	if (ret == -E2BIG && l->blocked[0] == '\0')
		snprintf(err, err_len,
			 "this host has more than %d world-writable directories, and no directory "
			 "but / holds two of them: the sandbox gives each an instance of its own, "
			 "and will not leave one shared",
			 SANDBOX_WW_MAX);
	else if (ret == -E2BIG)
		snprintf(err, err_len,
			 "more than %d world-writable directories: hiding them needs %s hidden "
			 "whole, which holds %s (%s); remove some of them, or run from elsewhere",
			 SANDBOX_WW_MAX, l->blocked, l->keep_what[l->blocked_keep],
			 l->keep[l->blocked_keep]);
	else if (ret == -EOVERFLOW)
		snprintf(err, err_len,
			 "read /proc/self/mountinfo: line %zu is longer than %u bytes; the sandbox "
			 "will not leave the mount it names unexamined",
			 l->mountinfo_line_no, SANDBOX_MOUNTINFO_LINE);
	else if (ret != 0)
		snprintf(err, err_len, "read /proc/self/mountinfo: %s", strerror(-ret));
	return ret;
}
