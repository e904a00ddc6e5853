/*
 * Hosts as clients and rules spell them, normalised to the one spelling the
 * host table compares (policy/hostname.c says what is read how, and why each
 * refusal). Pure functions: no state, no allocation, callable from any thread.
 */
#ifndef AN_POLICY_HOSTNAME_H
#define AN_POLICY_HOSTNAME_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"

/* Room for any normalised host: a 253-byte name or an IPv6 literal, plus a NUL. */
#define HOST_NORM_BYTES 256u
/* A DNS name in presentation form without the trailing dot (RFC 1035 section 2.3.4). */
#define HOST_NAME_BYTES_MAX  253u
#define HOST_LABEL_BYTES_MAX 63u
/* The dots of a normalised name, a bit a byte: bit i % 64 of word i / 64 for byte i. */
#define HOST_DOT_WORDS ((HOST_NORM_BYTES + 63u) / 64u)

static_assert(HOST_NAME_BYTES_MAX + 1 <= HOST_NORM_BYTES, "a name and its NUL must fit");
static_assert(HOST_NAME_BYTES_MAX + 2 <= LIMITS_HOST_BYTES_MAX, "a name and a trailing dot fit");

/* What a rule names, or a request asks for once normalised (a name or an IP literal). */
enum acl_kind {
	ACL_KIND_NAME = 0, /* exact host name */
	ACL_KIND_WILDCARD, /* "*.<host>": any name strictly below <host>, never <host> itself */
	ACL_KIND_IP,       /* IP literal, in canonical inet_ntop form */
};

/*
 * Normalises <host>/<len> as a client or a rule spells it into <out> (<cap> at
 * least HOST_NORM_BYTES), NUL-terminated. IP literals ("192.0.2.1", "::1",
 * "[::1]") become canonical inet_ntop text with *<kind> ACL_KIND_IP; names
 * are lower-cased, lose one trailing dot and get ACL_KIND_NAME. Refuses
 * (-EINVAL, *<why> a static message when <why> is not NULL) empty labels,
 * names over 253 bytes or labels over 63, bytes outside [A-Za-z0-9-_.], IPv6
 * zones, and names whose last label is numeric ("1.2.3", "0x7f.1",
 * "2130706433"), which some resolvers would read as an IPv4 address.
 * Returns the length written. Borrows <host>.
 */
int host_normalise(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
		   const char **why);

/*
 * host_normalise (<why> not NULL), and for a name its dots in <dots>, which
 * the host table's lookup reads (policy/acl.c): plain names get them from
 * the word-at-a-time pass that lowers them, at no extra cost.
 */
int host_normalise_dots(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
			const char **why, uint64_t dots[HOST_DOT_WORDS]);

/* The dots of the normalised name <name>/<len> (at most HOST_NAME_BYTES_MAX), a bit a byte. */
void host_name_dots(const char *name, size_t len, uint64_t dots[HOST_DOT_WORDS]);

#endif /* AN_POLICY_HOSTNAME_H */
