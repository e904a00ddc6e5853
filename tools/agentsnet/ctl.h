/*
 * The client side of agentsnetd's control protocol (`<socket_dir>/control.sock`):
 * one request line, one or more answer lines, then the daemon closes.
 *
 *   ping                       -> ok agentsnetd <version>
 *   sandbox add <id> <profile> -> ok <directory> | error <code> <message>
 *   sandbox add <id> <profile> owned [<uid>] -> the same; with ok, the sandbox's
 *                                       listening ingress socket comes along
 *                                       (SCM_RIGHTS); <uid>: its agent's, the only
 *                                       one (with root) that may connect
 *   sandbox rm <id>            -> ok | error no_such_sandbox <message>
 *   sandbox ls                 -> ok <n>, then n lines "<id> <profile> <dir>"
 *   sandbox stats              -> ok <n>, then n lines "<id> profile <p> owner <uid> pid
 *                                 <pid> uptime_s <s> conns <c> requests <r> refusals <d>
 *                                 bytes_up <u> bytes_down <v>"
 *   audit reopen               -> ok audit reopened <path> | error <code> <message>
 *   policy reload              -> ok <what was loaded> | error reload_refused <why>
 *   policy status              -> ok generation <n> profiles <p> rules <r> reloads <k>
 *                                 ca <0|1> digest <hex> source embedded|file <path>
 *   stats                      -> ok workers <n> conns <c> ... (docs/control.md)
 */
#ifndef AN_TOOLS_AGENTSNET_CTL_H
#define AN_TOOLS_AGENTSNET_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTL_SOCKET_NAME "control.sock"
/* Sandbox ids: [A-Za-z0-9_.-]{1,63}, not starting with '.' (the daemon's rule). */
#define CTL_ID_BYTES_MAX 63u
/* Profile names: the same alphabet; the daemon answers no_such_profile for the rest. */
#define CTL_PROFILE_BYTES_MAX 63u
/* One request line, newline included: the longest is an add with both names at their max. */
#define CTL_REQUEST_BYTES_MAX 160u
/* An answer: `sandbox ls` of LIMITS_SANDBOXES_MAX sandboxes at about 300 bytes each fits. */
#define CTL_REPLY_BYTES_MAX (32u * 1024u * 1024u)
/* The daemon answers from its control thread at once; beyond this it is wedged. */
#define CTL_TIMEOUT_MS_DEFAULT 10000u

/* Exit codes of the CLI's control commands. */
enum ctl_exit {
	CTL_EXIT_OK = 0,          /* the daemon answered ok */
	CTL_EXIT_ERROR = 1,       /* it answered error, or the answer was malformed */
	CTL_EXIT_USAGE = 2,       /* bad command line; nothing was sent */
	CTL_EXIT_UNREACHABLE = 3, /* no daemon on the control socket */
};

/* A parsed answer. Every pointer points into buf. */
struct ctl_reply {
	char *buf;           /* owned: the answer, each line NUL-terminated in place */
	size_t len;          /* bytes of buf in use, terminators included */
	bool ok;             /* first word "ok" (else "error") */
	const char *code;    /* error: the code ([a-z_]+); ok: "" */
	const char *text;    /* ok: the rest of the first line (may be ""); error: the message */
	const char *more;    /* the first line after the first one, NULL when there is none */
	uint32_t more_count; /* lines after the first one */
	bool has_fd;         /* a descriptor came with the answer (SCM_RIGHTS): fd */
	int fd; /* owned while has_fd: take it (has_fd = false) or ctl_reply_free closes it */
};

/* One line of `sandbox ls`. Pointers into the line, which was split in place. */
struct ctl_ls_entry {
	const char *id;
	const char *profile;
	const char *dir;
};

/* One line of `sandbox stats`, parsed (ctl_stats_parse). */
struct ctl_stats_entry {
	char id[CTL_ID_BYTES_MAX + 1];
	char profile[CTL_PROFILE_BYTES_MAX + 1]; /* "-": none */
	uint32_t owner; /* the uid that registered it (0: root, the file) */
	int32_t pid;    /* the process it lives with (0: none) */
	uint64_t uptime_s;
	uint32_t conns;
	uint64_t requests; /* decisions, allowed or refused */
	uint64_t refusals;
	uint64_t bytes_up;
	uint64_t bytes_down;
};

/* Parses one `sandbox stats` line into <e>: every key in its place, nothing after. 0 or -EPROTO. */
int ctl_stats_parse(const char *line, struct ctl_stats_entry *e);

/* Whether <id> is a valid sandbox id. */
bool ctl_id_valid(const char *id);
/* Whether <name> is a valid profile name (same alphabet and length as ids). */
bool ctl_profile_valid(const char *name);

/*
 * Parses the <len> bytes at <buf> as an answer, in place: newlines become NULs.
 * Takes <buf> (allocated with pool_malloc, <len> + 1 bytes) into <r> in every
 * case, so the caller frees it with ctl_reply_free. A missing final
 * newline is accepted; an empty answer, a NUL or other control byte (tab
 * aside), a first word other than "ok"/"error", an error without a code or a
 * malformed code are -EPROTO. Codes the client does not know are kept (a newer
 * daemon may add some). Returns 0 or -EPROTO.
 */
int ctl_reply_parse(char *buf, size_t len, struct ctl_reply *r);
/* Steps through the lines after the first: pass <r>->more, then the previous result. */
const char *ctl_reply_next(const struct ctl_reply *r, const char *line);
/* Releases the buffer of <r> (a zeroed <r> is accepted) and zeroes it. */
void ctl_reply_free(struct ctl_reply *r);

/*
 * Checks the answer to `sandbox ls`: ok, first line a count <= the number
 * of lines that follow and equal to it, each line an entry. Returns 0 or
 * -EPROTO.
 */
int ctl_ls_check(const struct ctl_reply *r);
/* Splits one `sandbox ls` line in place into <e>. Returns 0 or -EPROTO. */
int ctl_ls_parse(char *line, struct ctl_ls_entry *e);

/*
 * Formats the request line for <argv>/<argc> (e.g. {"sandbox", "add", id,
 * profile}) into <out> (<cap> bytes), newline included, after checking the
 * verb and its arguments (ids and profiles as above). Returns the length, or
 * -EINVAL (unknown verb, wrong argument count, bad id or profile) or
 * -EMSGSIZE (does not fit).
 */
int ctl_request_format(char *out, size_t cap, int argc, const char *const *argv);

/*
 * Sends <request> (one line, newline included) to the control socket at
 * <path> and reads the answer until the daemon closes, all of it (connect,
 * send and every read) within <timeout_ms>. On success <r> owns the parsed
 * answer (ok or error). Returns 0, or -ENOENT/-ECONNREFUSED/-EACCES and the
 * other connect errors (the daemon is not reachable), -ENAMETOOLONG (<path>
 * does not fit a socket address), -ETIMEDOUT, -EMSGSIZE (answer over
 * CTL_REPLY_BYTES_MAX), -EPROTO (malformed answer), -ENOMEM. <err>
 * (<err_len> bytes) then says what failed. Blocking; for the CLI only.
 */
int ctl_call(const char *path, const char *request, uint32_t timeout_ms, struct ctl_reply *r,
	     char *err, size_t err_len);

/* Whether a ctl_call error means "the daemon is not reachable" (exit 3). */
bool ctl_unreachable(int err);

/*
 * Whether a ctl_call error means the daemon is gone: no control socket, or
 * nothing listens on it. Not a timeout or a refused permission (a daemon
 * may be there, busy or out of reach), so only this lets `agentsnet run`
 * remove its sandbox's files itself.
 */
bool ctl_daemon_gone(int err);

#endif /* AN_TOOLS_AGENTSNET_CTL_H */
