/*
 * A string-keyed index: maps a borrowed byte string to a uint32_t value.
 *
 * Used by the policy loader (profile names, sandbox ids, rule ids, the static
 * resolver table) and by the ACL (hosts). Filled at load time, then only read:
 * lookups never allocate and may run concurrently on every worker.
 */
#ifndef AN_POLICY_STRTAB_H
#define AN_POLICY_STRTAB_H

#include <stddef.h>
#include <stdint.h>

/* Entries at most; a table never grows beyond 2^STRTAB_SLOTS_LOG2_MAX slots. */
#define STRTAB_SLOTS_LOG2_MAX 30u
#define STRTAB_ENTRIES_MAX    (1u << (STRTAB_SLOTS_LOG2_MAX - 1u))

struct strtab_slot {
	uint64_t hash;   /* XXH3-64 of the key */
	const char *key; /* borrowed; NULL marks an empty slot */
	uint32_t key_len;
	uint32_t value;
};

/* A zeroed struct strtab is a valid empty table. */
struct strtab {
	struct strtab_slot *slots; /* owned; mask + 1 slots, or NULL when empty */
	uint32_t mask;
	uint32_t count;
};

/* XXH3-64 of <key>/<len>: the hash every table here uses. */
uint64_t strtab_hash(const char *key, size_t len);

/*
 * Makes <t> an empty table with room for <expected> entries without growing
 * (0: nothing allocated until the first insert). Returns 0, -ENOMEM, or
 * -E2BIG when <expected> exceeds STRTAB_ENTRIES_MAX.
 */
int strtab_init(struct strtab *t, uint32_t expected);

/*
 * Maps <key>/<len> to <value>. <key> is borrowed and must outlive the table
 * (and must not move). Grows the table as needed (load factor at most 1/2).
 * Returns 0; -EEXIST with *<existing> set to the value already stored for an
 * equal key (the table is unchanged); -ENOMEM; or -E2BIG when full.
 */
int strtab_insert(struct strtab *t, const char *key, size_t len, uint32_t value,
		  uint32_t *existing);

/*
 * Finds <key>/<len>, whose hash the caller computed with strtab_hash as <hash>.
 * Returns 0 with *<value> set, or -ENOENT. Never allocates.
 */
int strtab_find_hashed(const struct strtab *t, uint64_t hash, const char *key, size_t len,
		       uint32_t *value);

/* strtab_find_hashed with the hash computed here. */
int strtab_find(const struct strtab *t, const char *key, size_t len, uint32_t *value);

/* Releases the slots (never the keys) and zeroes <t>. */
void strtab_free(struct strtab *t);

#endif /* AN_POLICY_STRTAB_H */
