/*
 * The socket directory's layout (see core/layout.h). Paths are joined from
 * their parts and refused when they would be truncated: a truncated path names
 * some other file, which for a removal is the worst possible answer.
 */
#include "core/layout.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
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

int layout_registry_dir(const char *socket_dir, char *out, size_t cap)
{
	return join_path(out, cap, socket_dir, "/registry", NULL);
}

int layout_registry_record(const char *socket_dir, const char *id, char *out, size_t cap)
{
	AN_ASSERT(id[0] != '\0');
	return join_path(out, cap, socket_dir, "/registry/", id);
}

int layout_sandbox_dir_remove(const char *socket_dir, const char *id)
{
	char dir[PATH_MAX];

	int ret = layout_sandbox_dir(socket_dir, id, dir, sizeof(dir));
	if (ret != 0)
		return ret;
	DIR *d = opendir(dir);
	if (d != NULL) {
		struct dirent *de;
		while ((de = readdir(d)) != NULL) {
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
				unlinkat(dirfd(d), de->d_name, 0);
		}
		closedir(d);
	}
	if (rmdir(dir) == -1 && errno != ENOENT)
		return -errno;
	return 0;
}
