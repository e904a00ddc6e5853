/*
 * The socket directory's layout (see core/layout.h). Paths are joined from
 * their parts and refused when they would be truncated: a truncated path names
 * some other file, which for a removal is the worst possible answer.
 */
#include "core/layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/an.h"

/* Writes <a><b><c> (<c> may be NULL) to <out>/<cap>; never a truncated path. */
static int join_path(char *out, size_t cap, const char *a, const char *b, const char *c)
{
	const char *parts[] = { a, b, c };
	size_t len = 0;

	AN_ASSERT(cap > 0);
	for (size_t i = 0; i < AN_ARRAY_LEN(parts) && parts[i] != NULL; i++) {
		size_t n = strlen(parts[i]);
		if (n >= cap - len) {
			out[0] = '\0';
			return -ENAMETOOLONG;
		}
		memcpy(out + len, parts[i], n);
		len += n;
	}
	out[len] = '\0';
	AN_ASSERT(len < cap);
	return 0;
}

int layout_sandbox_dir(const char *socket_dir, const char *id, char *out, size_t cap)
{
	AN_ASSERT(id[0] != '\0');
	return join_path(out, cap, socket_dir, "/sandboxes/", id);
}

size_t layout_sandbox_id_room(const char *socket_dir, bool with_ingress)
{
	const size_t cap = sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1;
	size_t fixed = strlen(socket_dir) + strlen("/sandboxes/") +
		       strlen(with_ingress ? "/" LAYOUT_INGRESS_SOCKET : "/" LAYOUT_EGRESS_SOCKET);
	return fixed < cap ? cap - fixed : 0;
}

int layout_registry_dir(const char *socket_dir, char *out, size_t cap)
{
	return join_path(out, cap, socket_dir, "/registry", NULL);
}

int layout_cgroups_dir(const char *socket_dir, char *out, size_t cap)
{
	return join_path(out, cap, socket_dir, "/cgroups", NULL);
}

int layout_registry_record(const char *socket_dir, const char *id, char *out, size_t cap)
{
	AN_ASSERT(id[0] != '\0');
	return join_path(out, cap, socket_dir, "/registry/", id);
}

int layout_registry_record_owner(const char *path, int *owner_pid, unsigned long long *owner_ticks)
{
	char text[1024]; /* a record is far shorter (core/registry.c) */
	struct stat st;
	int pid = 0;
	unsigned long long ticks = 0;

	*owner_pid = 0;
	*owner_ticks = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	int ret = fstat(fd, &st) != 0 ? -errno : S_ISREG(st.st_mode) ? 0 : -EINVAL;
	ssize_t n = ret == 0 ? read(fd, text, sizeof(text) - 1) : 0;
	if (n < 0)
		ret = -errno;
	close(fd);
	if (ret != 0)
		return ret;
	if (n == 0)
		return -EINVAL;
	text[n] = '\0';
	const char *line = strstr(text, "\nowner ");
	if (line != NULL && (sscanf(line + 7, "%d %llu", &pid, &ticks) != 2 || pid <= 0))
		ret = -EINVAL;
	explicit_bzero(text, sizeof(text)); /* the record's token line, the ingress secret */
	if (ret != 0)
		return ret;
	*owner_pid = pid;
	*owner_ticks = ticks;
	return 0;
}

/*
 * Empties the directory <fd> (owned by the caller, closed here): each entry
 * unlinked with unlinkat, a directory emptied first through a descriptor
 * opened O_NOFOLLOW relative to its parent, so no link is ever followed. At
 * most LAYOUT_REMOVE_DEPTH levels; -ELOOP past them. 0 or the first -errno.
 */
static int remove_entries(int fd, unsigned depth)
{
	int ret = 0;

	AN_ASSERT(fd >= 0);
	DIR *d = fdopendir(fd);
	if (d == NULL) {
		ret = -errno;
		close(fd);
		return ret;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0 || errno == ENOENT)
			continue;
		if (errno != EISDIR && errno != EPERM) {
			ret = ret != 0 ? ret : -errno;
			continue;
		}
		if (depth + 1 >= LAYOUT_REMOVE_DEPTH) {
			ret = ret != 0 ? ret : -ELOOP;
			continue;
		}
		int sub =
		    openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int sub_ret = sub >= 0 ? remove_entries(sub, depth + 1) : -errno;
		if (sub_ret == 0 && unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) == -1)
			sub_ret = -errno;
		if (sub_ret != 0 && ret == 0)
			ret = sub_ret;
	}
	closedir(d);
	return ret;
}

int layout_sandbox_dir_remove(const char *socket_dir, const char *id)
{
	char dir[PATH_MAX];

	int ret = layout_sandbox_dir(socket_dir, id, dir, sizeof(dir));
	if (ret != 0)
		return ret;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return errno == ENOENT ? 0 : -errno;
	ret = remove_entries(fd, 0);
	if (ret == 0 && rmdir(dir) == -1 && errno != ENOENT)
		ret = -errno;
	return ret;
}
