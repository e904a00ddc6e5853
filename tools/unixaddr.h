/*
 * The address of a Unix socket named the way agentsnet's tools name them: a path, or
 * '@' then a name for the abstract namespace. Header-only (static inline), so the static
 * probe, which links no project module but core/an.o, shares it with the CLI.
 */
#ifndef AN_TOOLS_UNIXADDR_H
#define AN_TOOLS_UNIXADDR_H

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/*
 * Fills <sun> for <path> and returns the address length to pass to bind or connect
 * (an abstract name has no terminator: its length is the address's), or -ENAMETOOLONG
 * for an empty or too long <path>.
 */
static inline int unixaddr_fill(struct sockaddr_un *sun, const char *path)
{
	size_t len = strlen(path);

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (len == 0 || len >= sizeof(sun->sun_path))
		return -ENAMETOOLONG;
	memcpy(sun->sun_path, path, len);
	if (path[0] == '@')
		sun->sun_path[0] = '\0';
	return (int)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '@' ? 0 : 1));
}

#endif /* AN_TOOLS_UNIXADDR_H */
