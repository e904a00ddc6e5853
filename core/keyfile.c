/*
 * The ownership and mode check of a secret's file (core/keyfile.h). It takes
 * the stat of the descriptor the loader then reads, never of a path looked up
 * again, so the file checked is the file read. Group or others' write access
 * is refused too: whoever may write the key may replace it.
 */
#include "core/keyfile.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "core/an.h"

int keyfile_check(const struct stat *st, char *why, size_t cap)
{
	AN_ASSERT(st != NULL);
	AN_ASSERT(why != NULL && cap > 0);
	if (st->st_uid != geteuid()) {
		snprintf(why, cap, "owned by uid %u; the daemon runs as uid %u: chown it",
			 (unsigned)st->st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if ((st->st_mode & 077) != 0) {
		snprintf(why, cap, "mode %04o: group or others may %s it; chmod 600 it",
			 (unsigned)(st->st_mode & 07777),
			 (st->st_mode & 044) != 0 ? "read" : "write");
		return -EPERM;
	}
	return 0;
}
