/*
 * The file systems a walk of the whole tree does not enter: kernel interfaces
 * (proc, sysfs, cgroup, debugfs, ...), where nothing a host service leaves
 * lives, and remote or user ones (NFS, SMB, FUSE, automount), which can be
 * slow or hang. `agentsnet selftest` (its search for world-writable
 * directories) and the probe (its search for socket files) skip the same
 * ones. Header-only (static inline), as tools/unixaddr.h, so the static probe
 * shares it with the CLI.
 */
#ifndef AN_TOOLS_WALKFS_H
#define AN_TOOLS_WALKFS_H

#include <linux/magic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/statfs.h>

/* Not in every linux/magic.h. */
#define WALKFS_SMB_MAGIC  0xfe534d42
#define WALKFS_CIFS_MAGIC 0xff534d42

/* Whether the file system of the open directory <fd> is one to skip (or cannot be told). */
static inline bool walkfs_skipped(int fd)
{
	static const int64_t skip[] = {
		PROC_SUPER_MAGIC,   SYSFS_MAGIC,       CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC,
		DEBUGFS_MAGIC,      TRACEFS_MAGIC,     SECURITYFS_MAGIC,   BPF_FS_MAGIC,
		PSTOREFS_MAGIC,     NFS_SUPER_MAGIC,   FUSE_SUPER_MAGIC,   AUTOFS_SUPER_MAGIC,
		DEVPTS_SUPER_MAGIC, HUGETLBFS_MAGIC,   BINFMTFS_MAGIC,     NSFS_MAGIC,
		WALKFS_SMB_MAGIC,   WALKFS_CIFS_MAGIC,
	};
	struct statfs f;

	if (fstatfs(fd, &f) == -1)
		return true;
	for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++) {
		/* f_type is a signed long: a magic with the top bit set may come either way. */
		if ((int64_t)(uint32_t)f.f_type == skip[i] || (int64_t)f.f_type == skip[i])
			return true;
	}
	return false;
}

#endif /* AN_TOOLS_WALKFS_H */
