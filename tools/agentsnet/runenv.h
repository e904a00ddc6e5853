/*
 * The agent's environment, as `agentsnet run` builds it: never the caller's
 * whole environment (the operator's shell holds real API keys, and one of
 * them in the sandbox defeats the inject tier). An allow-list of variables
 * that configure a terminal session and carry no secret (RUNENV_ALLOWED:
 * PATH, HOME, LANG, the LC_ categories, TERM, TZ, ...), then what the caller asked for with
 * --env NAME (the caller's value), --env NAME=VALUE and --env-file FILE
 * (lines of NAME=VALUE, '#' comments and blank lines; the last word wins).
 * Every variable of the caller's that is dropped and looks like a credential
 * (its name says KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, AUTH...; or its
 * value starts like a known key format) is named on stderr, never its value.
 */
#ifndef AN_TOOLS_AGENTSNET_RUNENV_H
#define AN_TOOLS_AGENTSNET_RUNENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Variables the agent's environment may hold in all, and an --env-file's longest line. */
#define RUNENV_VARS_MAX   4096u
#define RUNENV_LINE_BYTES 65536u

struct runenv {
	char **vars;  /* owned: NAME=VALUE strings, NULL-terminated (the envp) */
	size_t count; /* entries before the NULL */
	size_t cap;
};

/* Whether <name> is on the allow-list passed to every agent without --env. */
bool runenv_allowed(const char *name);

/* Whether variable <name> with <value> looks like a credential (for the warning). */
bool runenv_looks_secret(const char *name, const char *value);

/* Starts <e> from <caller_env> (NULL-terminated) through the allow-list. Returns 0, -ENOMEM or
 * -E2BIG. */
int runenv_init(struct runenv *e, char *const *caller_env);

/*
 * Applies one --env argument: NAME (the value from <caller_env>, or an error
 * when the caller has no such variable) or NAME=VALUE. A NAME must be
 * [A-Za-z_][A-Za-z0-9_]*. Returns 0, or -EINVAL/-ENOENT/-ENOMEM, or -E2BIG when the
 * environment would hold more than RUNENV_VARS_MAX variables, with <err> (<err_len> bytes)
 * saying why.
 */
int runenv_set(struct runenv *e, const char *arg, char *const *caller_env, char *err,
	       size_t err_len);

/*
 * Applies --env-file <path>. A fault of a line is "<path>:<line>: <fault>" (-EINVAL,
 * -EMSGSIZE, -E2BIG); one of the file is "<path>: <fault>" (-ENOENT, -EISDIR, ...).
 * Returns 0 or that -errno with <err>.
 */
int runenv_load_file(struct runenv *e, const char *path, char *err, size_t err_len);

/*
 * Writes to <out> one line naming the caller's variables that were dropped
 * and look like credentials (how to pass one on: --env NAME), nothing when
 * there is none.
 */
void runenv_warn_dropped(const struct runenv *e, char *const *caller_env, FILE *out);

void runenv_free(struct runenv *e);

#endif /* AN_TOOLS_AGENTSNET_RUNENV_H */
