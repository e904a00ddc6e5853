/*
 * Who may read a file that holds a secret (an injected credential's
 * secret_file, the CA key, the ingress gateway's TLS key): the daemon's user
 * alone. Sandboxes see the host's file system, so a key file that group or
 * others may read is readable by every agent that runs as one of them
 * (`nobody` included), and a file someone else owns is one they can rewrite
 * or open to others at any time. Such a file is refused at load, naming it
 * and its mode, never used with a warning.
 */
#ifndef AN_CORE_KEYFILE_H
#define AN_CORE_KEYFILE_H

#include <stddef.h>
#include <sys/stat.h>

/*
 * Checks <st> (fstat of the open file) for a secret: 0 when the daemon's
 * effective uid owns it and neither group nor others may read or write it;
 * otherwise -EPERM with <why> (<cap> bytes) saying what is wrong and what
 * to do ("mode 0644: group or others may read it; chmod 600 it", "owned by
 * uid 1000; the daemon runs as uid 0: chown it").
 */
int keyfile_check(const struct stat *st, char *why, size_t cap);

#endif /* AN_CORE_KEYFILE_H */
