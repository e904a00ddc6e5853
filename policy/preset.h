/*
 * Presets: curated, versioned host lists for what agents really use (package
 * registries, source hosts, model APIs), named in a profile as
 * `presets: [npm@1, github@1, {name: anthropic@1, secret_file: ...}]`.
 *
 * A preset expands into rules, written here as YAML text and read by the
 * profile's own rule reader (policy/profile.c), so every check a rule of the
 * file gets, a preset's rules get too (a secret file's owner and mode, a
 * placeholder shared with another rule, a duplicate id). A released version
 * never changes: a host added or removed makes a new version, and a policy
 * keeps the version it names until its owner moves it on.
 *
 * Pure: no I/O, no loader state; policy/profile.c does the reading.
 */
#ifndef AN_POLICY_PRESET_H
#define AN_POLICY_PRESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A preset's generated rules at most, in bytes of YAML. */
#define PRESET_YAML_BYTES_MAX 8192u

/* One host of a preset: a rule of its own. */
struct preset_host {
	const char *id;     /* the rule's id, "<preset>.<id>" in the policy */
	const char *host;   /* exact: a preset never holds a wildcard */
	uint16_t ports[2];  /* 0 ends the list early */
	const char *reason; /* which client contacts it, and for what */
};

/* A credential-inject preset's header convention (its SDK's). */
struct preset_inject {
	const char *header;
	const char *prefix;
	const char *placeholder; /* the default; an entry may name its own */
	const char *env;         /* the variable the SDK reads its key from (docs only) */
};

struct preset {
	const char *name;
	uint32_t version;
	const char *what; /* one line for `agentsnet check` and the docs */
	const struct preset_host *hosts;
	uint32_t host_count;
	const struct preset_inject *inject; /* NULL: passthrough */
	/* A private public-suffix entry whose wildcard the loader refuses, that this
	 * preset lists the exact hosts of ("githubusercontent.com"); NULL: none. */
	const char *covers_suffix;
};

/* What a presets entry gives besides the name: an inject preset's secret and placeholder. */
struct preset_args {
	const char *secret_file; /* exactly one of the two for an inject preset, */
	const char *secret_env;  /* neither for a passthrough one */
	const char *placeholder; /* NULL: the preset's */
};

/* Every preset, every version, in name order; *<count> set. */
const struct preset *preset_all(uint32_t *count);

/*
 * The preset <label>/<len> names ("npm@1"): its entry, or NULL with <why>
 * (<cap> bytes) saying what is wrong (no version, no such preset, no such
 * version: the versions there are).
 */
const struct preset *preset_find(const char *label, size_t len, char *why, size_t cap);

/*
 * Writes preset <p>'s rules as a YAML block sequence into <out>/<cap>, with
 * <a>'s secret and placeholder in an inject preset's rules (each value
 * quoted; ASCII without control characters, else refused). The length, or
 * -EINVAL with <why> (a secret missing, given twice, or given to a
 * passthrough preset; a value not ASCII), -ENOSPC.
 */
int preset_rules_yaml(const struct preset *p, const struct preset_args *a, char *out, size_t cap,
		      char *why, size_t why_cap);

/* The preset that lists the hosts under the suffix <suffix> (NUL-terminated); NULL: none. */
const struct preset *preset_covering(const char *suffix);

#endif /* AN_POLICY_PRESET_H */
