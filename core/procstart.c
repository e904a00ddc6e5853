/*
 * Process start times from /proc/<pid>/stat (core/procstart.h). The command
 * name (field 2) may hold spaces and parentheses, so fields are counted from
 * the last ')'; a zombie (state Z or X) counts as gone, since it has exited.
 */
#include "core/procstart.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int proc_start_ticks(int32_t pid, uint64_t *ticks)
{
	char path[64];
	char stat[1024];

	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/stat");
	else
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1)
		return -ESRCH;
	ssize_t n = read(fd, stat, sizeof(stat) - 1);
	close(fd);
	if (n <= 0)
		return -ESRCH;
	stat[n] = '\0';
	char *p = strrchr(stat, ')');
	if (p != NULL && (p[1] != ' ' || p[2] == 'Z' || p[2] == 'X'))
		return -ESRCH; /* exited, not yet reaped: gone all the same */
	for (int field = 2; p != NULL && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p == NULL)
		return -ESRCH;
	uint64_t value = 0;
	for (p++; *p >= '0' && *p <= '9'; p++)
		value = value * 10 + (uint64_t)(*p - '0');
	*ticks = value;
	return 0;
}
