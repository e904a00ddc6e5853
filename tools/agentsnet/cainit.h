/*
 * The demo root CA of `agentsnet ca init`: an ECDSA P-256 key, its
 * self-signed X.509v3 certificate and the bundle to mount as AGENT_CA_CERT
 * (the host's roots followed by the agentsnet CA), written into one directory.
 */
#ifndef AN_TOOLS_AGENTSNET_CAINIT_H
#define AN_TOOLS_AGENTSNET_CAINIT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Validity in days: the default is the CA/Browser Forum's leaf maximum, which
 * keeps a forgotten demo CA from outliving the demo by years; at most ten. */
#define CA_DAYS_DEFAULT 397u
#define CA_DAYS_MAX     3650u
/* Debian's ca-certificates bundle, the host roots the bundle starts with. */
#define CA_HOST_ROOTS_DEFAULT "/etc/ssl/certs/ca-certificates.crt"
/* Host roots file: Debian's is about 220 KiB; anything past this is not a bundle. */
#define CA_HOST_ROOTS_BYTES_MAX (16u * 1024u * 1024u)
/* The file names inside the CA directory. */
#define CA_KEY_NAME    "ca.key"
#define CA_CERT_NAME   "ca.pem"
#define CA_BUNDLE_NAME "bundle.pem"
/* SHA-256 as 32 colon-separated hex pairs, plus the NUL. */
#define CA_FINGERPRINT_BYTES 96u

struct ca_options {
	const char *dir;        /* borrowed: created 0700 (parents 0755) if missing */
	const char *host_roots; /* borrowed: NULL means CA_HOST_ROOTS_DEFAULT */
	uint32_t days;          /* 1..CA_DAYS_MAX */
	bool force;             /* replace an existing CA instead of refusing */
};

struct ca_result {
	char key_path[PATH_MAX];
	char cert_path[PATH_MAX];
	char bundle_path[PATH_MAX];
	char subject_cn[64];
	char fingerprint[CA_FINGERPRINT_BYTES]; /* SHA-256 of the DER certificate */
};

/*
 * Creates the CA in <o>->dir: ca.key (PKCS#8 PEM, mode 0600; created with
 * O_EXCL unless <o>->force, otherwise written to a temporary file and renamed
 * over the old one), ca.pem (0644: subject CN "agentsnet demo CA <8 hex>",
 * 128-bit random serial, valid from now - 1 h to now + <o>->days,
 * basicConstraints critical CA:TRUE pathlen:0, keyUsage critical
 * keyCertSign+cRLSign, subjectKeyIdentifier) and bundle.pem (0644: the host
 * roots, then ca.pem). Without <o>->force an existing ca.key, ca.pem or
 * bundle.pem is refused and nothing is written. On failure no new file is
 * left behind. Fills <r> on success.
 * Returns 0, -EINVAL (days 0 or > CA_DAYS_MAX, empty dir, path too long),
 * -EEXIST, -ENOENT (no host roots), -EPROTO (host roots hold no certificate),
 * -EFBIG (host roots too large), -EIO (an OpenSSL failure) or the -errno of
 * a failed system call; <err> (<err_len> bytes) then holds one line saying
 * what failed, with the path.
 */
int ca_init(const struct ca_options *o, struct ca_result *r, char *err, size_t err_len);

#endif /* AN_TOOLS_AGENTSNET_CAINIT_H */
