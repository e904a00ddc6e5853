/*
 * A process's start time, which tells it from a later one given the same pid:
 * field 22 of /proc/<pid>/stat, in clock ticks since boot: the same in every
 * pid namespace, shifted in a time namespace of another boot time (whose
 * readers then never match the daemon's record: nothing is taken for the
 * same process that is not). The daemon ties an owned sandbox to its caller
 * by pid and start time (core/engine.h, struct engine_owner), and `agentsnet
 * run` checks a registry record is its own the same way. libc only, so the
 * daemon and every tool share it.
 */
#ifndef AN_CORE_PROCSTART_H
#define AN_CORE_PROCSTART_H

#include <stdint.h>

/*
 * Reads process <pid>'s start time into *<ticks> (<pid> 0: the calling
 * process's, from /proc/self, right whichever pid namespace /proc shows). 0,
 * or -ESRCH when it is gone, a zombie, or its stat cannot be read or parsed.
 */
int proc_start_ticks(int32_t pid, uint64_t *ticks);

#endif /* AN_CORE_PROCSTART_H */
