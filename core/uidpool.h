/*
 * The uids the daemon gives the sandboxes root starts, one each, as Android
 * gives each app one: `daemon.sandbox_uids` (first, count). A uid names a
 * sandbox only if nothing else runs as it, so a uid is given to one sandbox
 * at a time, never while the host knows it as an account or a group (the
 * agent runs with the same number as its gid), and a freed one only after
 * every other free uid of the range was given since (the search goes round
 * from where the last one ended): a process that outlived its sandbox could
 * otherwise pass for the next.
 *
 * One bit per uid, allocated once; no lock of its own (the engine's lock).
 */
#ifndef AN_CORE_UIDPOOL_H
#define AN_CORE_UIDPOOL_H

#include <stdbool.h>
#include <stdint.h>

/* Whether <uid> may be given: false when the host knows it (getpwuid, getgrgid). */
typedef bool (*uidpool_free_fn)(uint32_t uid);

struct uidpool {
	uint32_t first;
	uint32_t count;
	uint32_t cursor;           /* offset where the next search starts */
	uint32_t given;            /* bits set */
	uint64_t *taken;           /* owned: bit i set while uid first + i is a sandbox's */
	uidpool_free_fn host_free; /* borrowed; NULL: uidpool_host_free */
};

/* The default host check: no passwd entry and no group entry for <uid>. */
bool uidpool_host_free(uint32_t uid);

/*
 * Sets <p> up for uids <first>..<first> + <count> - 1 (count >= 1, the last
 * below UINT32_MAX - 1), with <host_free> (NULL: uidpool_host_free). 0 or
 * -ENOMEM.
 */
int uidpool_init(struct uidpool *p, uint32_t first, uint32_t count, uidpool_free_fn host_free);
void uidpool_free(struct uidpool *p);

/* Whether <uid> is one of the pool's (given or not). */
bool uidpool_contains(const struct uidpool *p, uint32_t uid);

/*
 * Picks the next free uid at or after the cursor (wrapping once round the
 * range) that the host does not know, into *<uid>, and moves the cursor past
 * it; uidpool_take then gives it. 0, or -EUSERS when every uid is given or
 * known to the host.
 */
int uidpool_pick(struct uidpool *p, uint32_t *uid);

/*
 * Marks <uid> (one of the pool's) given: one uidpool_pick chose, or one a
 * registry record re-adopted at start names. 0, or -EEXIST when it is given
 * already.
 */
int uidpool_take(struct uidpool *p, uint32_t uid);

/* Gives <uid> back; a uid outside the pool, or not given, is left alone. */
void uidpool_release(struct uidpool *p, uint32_t uid);

#endif /* AN_CORE_UIDPOOL_H */
