/*
 * Address checks: what kind of address a resolved (or literal) upstream is,
 * and whether the policy lets a sandbox connect to it (docs/design.md section 3).
 *
 * The proxy resolves names itself and connects to the address it checked, so
 * these checks are what stops a sandbox from reaching the host's loopback, the
 * LAN, a cloud metadata service or any of their IPv4-in-IPv6 spellings.
 */
#ifndef AN_POLICY_ADDR_H
#define AN_POLICY_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Address classes. Checklist when adding one: the tables in policy/addr.c
 * (ranges and names), docs/policy.md, tests/unit/policy/addr.c.
 */
enum addr_class {
	ADDR_PUBLIC = 0,  /* global unicast: the only class permitted by default */
	ADDR_LOOPBACK,    /* 127/8, ::1 */
	ADDR_PRIVATE,     /* RFC 1918, CGNAT 100.64/10 */
	ADDR_LINK_LOCAL,  /* 169.254/16, fe80::/10 */
	ADDR_METADATA,    /* 169.254.169.254, fd00:ec2::254 (cloud instance metadata) */
	ADDR_ULA,         /* fc00::/7 */
	ADDR_MAPPED,      /* ::ffff:0:0/96 and IPv4-compatible ::/96 */
	ADDR_NAT64,       /* 64:ff9b::/96, 64:ff9b:1::/48 */
	ADDR_TRANSLATION, /* 6to4 2002::/16 and 192.88.99/24, Teredo 2001::/32 */
	ADDR_UNSPECIFIED, /* 0/8, :: */
	ADDR_MULTICAST,   /* 224/4, ff00::/8 */
	ADDR_RESERVED,    /* documentation, benchmarking, 240/4, ..., and non-IP families */
	ADDR__COUNT,
};

/* An IPv4 or IPv6 network: <family> AF_INET or AF_INET6, host bits zero. */
struct addr_cidr {
	uint8_t bytes[16]; /* network order; IPv4 uses the first 4 */
	uint16_t family;
	uint8_t prefix_len; /* 0..32 or 0..128 */
};

/*
 * The class of <sa> (AF_INET or AF_INET6; any other family is
 * ADDR_RESERVED). Borrows <sa>; pure, callable from any thread.
 */
enum addr_class addr_classify(const struct sockaddr *sa);

/* "public", "loopback", "link_local", ...: the name used in logs and audit records. */
const char *addr_class_name(enum addr_class c);

/*
 * Parses the IPv4 or IPv6 literal <text>/<len> (no brackets, no port, no zone
 * "%eth0") into <out> with port 0. Returns 0 or -EINVAL. Borrows <text>.
 */
int addr_parse_ip(const char *text, size_t len, struct sockaddr_storage *out);

/*
 * Parses "<ip>/<prefix>" (or a bare "<ip>", meaning /32 or /128) into <out>.
 * Refuses zones, prefix lengths out of range or spelled with a sign or leading
 * zero, and host bits set beyond the prefix (a typo more often than not).
 * Returns 0, or -EINVAL with *<why> set to a static message.
 */
int addr_cidr_parse(const char *text, size_t len, struct addr_cidr *out, const char **why);

/* True when <sa> is of <c>'s family and inside it. Borrows both. */
bool addr_cidr_contains(const struct addr_cidr *c, const struct sockaddr *sa);

/*
 * True when <c> lies wholly inside multicast or unspecified space, which
 * addr_permitted never allows: such an allow_private entry can never match.
 */
bool addr_cidr_never_permitted(const struct addr_cidr *c);

/*
 * True when a sandbox may connect to <sa>: its class is ADDR_PUBLIC, or it is
 * neither multicast nor unspecified and lies inside one of the <count> networks
 * at <allow> (resolver.allow_private). Borrows everything; thread-safe.
 */
bool addr_permitted(const struct addr_cidr *allow, uint32_t count, const struct sockaddr *sa);

#endif /* AN_POLICY_ADDR_H */
