/*
 * The socket directory's layout, in one place: the daemon creates it and
 * `agentsnet` cleans up after a daemon that is gone, so both must agree.
 *
 *   <socket_dir>/control.sock              the control socket
 *   <socket_dir>/sandboxes/<id>/           a sandbox's directory (mounted into it)
 *   <socket_dir>/sandboxes/<id>/egress.sock
 *   <socket_dir>/sandboxes/<id>/ingress.sock   an owned sandbox's (core/listen.c)
 *   <socket_dir>/registry/<id>             a run-time sandbox's record (never mounted)
 *   <socket_dir>/internal/ingress.sock     the TLS gateway's internal socket
 *
 * No dependency beyond libc, so any binary of the project may link it.
 */
#ifndef AN_CORE_LAYOUT_H
#define AN_CORE_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

/* Writes "<socket_dir>/sandboxes/<id>" to <out>/<cap>. 0 or -ENAMETOOLONG. */
int layout_sandbox_dir(const char *socket_dir, const char *id, char *out, size_t cap);
/* Writes "<socket_dir>/registry" to <out>/<cap>. 0 or -ENAMETOOLONG. */
int layout_registry_dir(const char *socket_dir, char *out, size_t cap);
/* Writes "<socket_dir>/registry/<id>" to <out>/<cap>. 0 or -ENAMETOOLONG. */
int layout_registry_record(const char *socket_dir, const char *id, char *out, size_t cap);

/*
 * Reads into *<owner_pid> and *<owner_ticks> the process registry record
 * <path> ties its sandbox to (its "owner <pid> <ticks>" line, as
 * core/registry.c writes it: its pid and start time, core/procstart.h; pid
 * 0: the record names none). The record is opened O_NOFOLLOW|O_NONBLOCK and
 * must be a regular file. 0, -ENOENT (no record), -EINVAL (not a record: not
 * a regular file, empty, or an owner line without a pid and start time), or
 * another -errno.
 */
int layout_registry_record_owner(const char *path, int *owner_pid, unsigned long long *owner_ticks);

/* Writes "<socket_dir>/cgroups" to <out>/<cap>: core/runlimit.c's records. 0 or -ENAMETOOLONG. */
int layout_cgroups_dir(const char *socket_dir, char *out, size_t cap);

/* The file names of a sandbox's sockets in its directory. */
#define LAYOUT_EGRESS_SOCKET  "egress.sock"
#define LAYOUT_INGRESS_SOCKET "ingress.sock"

/*
 * The longest sandbox id whose socket paths under <socket_dir> fit a Unix
 * socket address (sun_path: 107 bytes and its NUL):
 * "<socket_dir>/sandboxes/<id>/egress.sock", and with <with_ingress> (an
 * owned sandbox's) "<socket_dir>/sandboxes/<id>/ingress.sock", one byte
 * longer. 0 when none fits. Ids are at most 63 bytes; a socket directory over
 * 20 bytes leaves an owned sandbox fewer.
 */
size_t layout_sandbox_id_room(const char *socket_dir, bool with_ingress);

/* The TLS gateway's internal socket, under the socket directory. */
#define LAYOUT_INTERNAL_INGRESS_SOCKET "internal/ingress.sock"

/*
 * The longest socket directory whose sockets of fixed name (control.sock and
 * the longer internal/ingress.sock) fit a Unix socket address (107 bytes).
 */
#define LAYOUT_SOCKET_DIR_BYTES_MAX (107u - sizeof("/" LAYOUT_INTERNAL_INGRESS_SOCKET) + 1u)

/* The socket directory when neither the policy nor the command line names one. */
#define LAYOUT_SOCKET_DIR_DEFAULT "/run/agentsnet"

/* Directory levels below a sandbox's directory that its removal descends, at most. */
#define LAYOUT_REMOVE_DEPTH 16u

/*
 * Removes sandbox <id>'s directory completely: every entry, subdirectories
 * and theirs included (LAYOUT_REMOVE_DEPTH levels at most), then the
 * directory. Every step is an *at call relative to a descriptor opened
 * O_NOFOLLOW (unlinkat never follows a link), so a link planted anywhere in it
 * cannot make us delete anything else. Returns 0 (also when it was already
 * gone; a symlink in its place is -ENOTDIR or -ELOOP and stays) or the first
 * -errno (the directory then stays, for the operator to look at).
 */
int layout_sandbox_dir_remove(const char *socket_dir, const char *id);

#endif /* AN_CORE_LAYOUT_H */
