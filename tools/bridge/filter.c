/*
 * agentsnet-bridge's seccomp filters: the agent's, loaded before its exec, and the
 * bridge's own, loaded once the agent is forked (filter_build, filter_load, from
 * tools/bridge/main.c). Their tables and builders, apart from the relay they guard.
 */
#include "tools/bridge/bridge_int.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "core/an.h"

/* ---- The seccomp filters ------------------------------------------------------------------ */

/*
 * Two filters, both default-allow with errno refusals (an error the caller can report, where a
 * kill would look like a crash) and the native architecture only (filter_build). The agent's
 * refuses, by class, what an agent could use to leave its sandbox or reach its host:
 * - sockets: an allow-list of families, AF_UNIX, AF_INET and AF_INET6, what clients use; any
 *   other is EAFNOSUPPORT: AF_VSOCK (not namespaced: it reaches the host or the hypervisor),
 *   AF_PACKET, netlink (glibc's getaddrinfo does without it), and whatever a kernel adds next.
 *   In AF_INET and AF_INET6, an allow-list of protocols too: SOCK_STREAM with 0 or TCP,
 *   SOCK_DGRAM with 0, UDP or ICMP (ICMPv6 in AF_INET6: the unprivileged ping sockets of
 *   ping); any other is EPROTONOSUPPORT: SCTP, DCCP, MPTCP, UDP-Lite, L2TP/IP, SMC, each
 *   kernel code (and a module autoloaded) no client needs. SOCK_RAW, and SOCK_PACKET (an
 *   AF_PACKET socket in disguise), EPERM; socketpair() other than AF_UNIX.
 * - the terminal: TIOCSTI (it types into whoever reads the terminal: the operator's shell,
 *   once the agent has gone) and TIOCLINUX (the same on a virtual console), on any descriptor;
 *   TIOCSETD (each line discipline is kernel code a terminal reaches; N_TTY is the only one
 *   anything needs, and nothing an agent runs sets one).
 * - other processes: ptrace, process_vm_readv/writev (their memory), pidfd_getfd (their
 *   descriptors, the bridge's included) and kcmp.
 * - kernel keyrings: keyctl, add_key, request_key (the caller's keys are one lookup away).
 * - namespaces: every CLONE_NEW* flag of unshare and clone, and setns. A new user namespace
 *   would hand the agent every capability in it, and the kernel surface they open; the other
 *   flags matter where it holds some in the sandbox's own. clone3 passes its flags in memory a
 *   filter cannot read, so it is ENOSYS, and glibc falls back to clone.
 * - io_uring, whose socket and connect operations never pass through this filter.
 * - what no agent needs and kernel exploits do: bpf, perf_event_open, userfaultfd, module and
 *   kexec loading, the mount family (with capabilities in a user namespace, it would uncover
 *   what the sandbox's mounts hide), open_by_handle_at, swap, reboot, acct, port I/O, quotas.
 * The bridge's own filter (loaded by the bridge alone, once the agent is forked) refuses the
 * same, and what the bridge never does after start-up: exec, fork, vfork, clone, clone3,
 * pidfd_open, unshare. The kernel reads int arguments as 32 bits, so comparisons mask the low
 * 32: junk in the high half would otherwise miss a rule and still mean the value refused.
 */

struct filter_rule {
	int nr;
	int err;
	unsigned int argc;
	struct scmp_arg_cmp cmp[2];
};

#define FILTER_LOW32 0xffffffffull
/* The socket type's own bits; SOCK_NONBLOCK and SOCK_CLOEXEC sit above them. */
#define FILTER_SOCK_TYPE_MASK 0xfull
/* The families (each below 16) socket() may create, one bit each; socketpair(): AF_UNIX. */
#define FILTER_FAMILIES      (1u << AF_UNIX | 1u << AF_INET | 1u << AF_INET6)
#define FILTER_PAIR_FAMILIES (1u << AF_UNIX)
/* Every namespace flag. clone() cannot carry CLONE_NEWTIME: that bit is its exit signal's. */
#define FILTER_CLONE_NEW                                                                          \
	((uint64_t)(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | \
		    CLONE_NEWPID | CLONE_NEWNET))
#define FILTER_UNSHARE_NEW (FILTER_CLONE_NEW | (uint64_t)CLONE_NEWTIME)

static_assert(AF_UNIX < 16 && AF_INET < 16 && AF_INET6 < 16, "allowed families fit a nibble");

/* The types socket() may ask for in AF_INET and AF_INET6; SOCK_RAW and SOCK_PACKET then EPERM. */
static const uint32_t filter_inet_types[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_PACKET };

/* The protocols socket() may ask for in AF_INET and AF_INET6, by type (0: the type's default). */
struct filter_inet {
	int family;
	int type;
	uint32_t protocols[3];
	size_t n;
};

static const struct filter_inet filter_inet[] = {
	{ AF_INET, SOCK_STREAM, { 0, IPPROTO_TCP }, 2 },
	{ AF_INET, SOCK_DGRAM, { 0, IPPROTO_UDP, IPPROTO_ICMP }, 3 },
	{ AF_INET6, SOCK_STREAM, { 0, IPPROTO_TCP }, 2 },
	{ AF_INET6, SOCK_DGRAM, { 0, IPPROTO_UDP, IPPROTO_ICMPV6 }, 3 },
};

/* Refused to the agent and to the bridge, whatever the arguments: EPERM. */
static const int filter_refused[] = {
	SCMP_SYS(ptrace),
	SCMP_SYS(process_vm_readv),
	SCMP_SYS(process_vm_writev),
	SCMP_SYS(pidfd_getfd),
	SCMP_SYS(kcmp),
	SCMP_SYS(keyctl),
	SCMP_SYS(add_key),
	SCMP_SYS(request_key),
	SCMP_SYS(setns),
	SCMP_SYS(io_uring_setup),
	SCMP_SYS(io_uring_enter),
	SCMP_SYS(io_uring_register),
	SCMP_SYS(bpf),
	SCMP_SYS(perf_event_open),
	SCMP_SYS(userfaultfd),
	SCMP_SYS(kexec_load),
	SCMP_SYS(kexec_file_load),
	SCMP_SYS(init_module),
	SCMP_SYS(finit_module),
	SCMP_SYS(delete_module),
	SCMP_SYS(open_by_handle_at),
	SCMP_SYS(mount),
	SCMP_SYS(umount2),
	SCMP_SYS(pivot_root),
	SCMP_SYS(move_mount),
	SCMP_SYS(open_tree),
	SCMP_SYS(fsopen),
	SCMP_SYS(fsconfig),
	SCMP_SYS(fsmount),
	SCMP_SYS(fspick),
	SCMP_SYS(mount_setattr),
	SCMP_SYS(swapon),
	SCMP_SYS(swapoff),
	SCMP_SYS(reboot),
	SCMP_SYS(acct),
	SCMP_SYS(iopl),
	SCMP_SYS(ioperm),
	SCMP_SYS(quotactl),
	SCMP_SYS(quotactl_fd),
	SCMP_SYS(lookup_dcookie),
};

/* Refused to the bridge alone, whatever the arguments: EPERM. */
static const int filter_refused_bridge[] = {
	SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(fork),       SCMP_SYS(vfork),
	SCMP_SYS(clone),  SCMP_SYS(clone3),   SCMP_SYS(pidfd_open), SCMP_SYS(unshare),
};

/* Adds a rule refusing each of the <n> system calls <nrs> with <err>. */
static int filter_add_list(scmp_filter_ctx ctx, const int *nrs, size_t n, int err)
{
	AN_ASSERT(ctx != NULL);
	AN_ASSERT(err > 0);
	for (size_t i = 0; i < n; i++) {
		int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO((uint32_t)err), nrs[i], 0);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

/* Adds the <n> rules <rules>, each refusing its call with its errno when its arguments match. */
static int filter_add_rules(scmp_filter_ctx ctx, const struct filter_rule *rules, size_t n)
{
	AN_ASSERT(ctx != NULL);
	for (size_t i = 0; i < n; i++) {
		const struct filter_rule *r = &rules[i];
		AN_ASSERT(r->argc <= AN_ARRAY_LEN(r->cmp));
		int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO((uint32_t)r->err), r->nr,
						r->argc, r->cmp);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

/*
 * Refuses <nr> (socket or socketpair) with EAFNOSUPPORT unless its family, the low 32 bits of
 * argument 0, is one of <allowed> (a bit per family, each below 16). A filter can only test
 * equality under a mask, so "none of these" is spelled out: one of bits 4-31 set, or bits 0-3
 * equal to a family that is not allowed.
 */
static int filter_add_families(scmp_filter_ctx ctx, int nr, uint32_t allowed)
{
	AN_ASSERT(ctx != NULL);
	AN_ASSERT(allowed != 0 && allowed < (1u << 16));
	const uint32_t refuse = SCMP_ACT_ERRNO(EAFNOSUPPORT);
	for (unsigned int bit = 4; bit < 32; bit++) {
		uint64_t m = 1ull << bit;
		int rc = seccomp_rule_add(ctx, refuse, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, m, m));
		if (rc != 0) {
			return rc;
		}
	}
	for (uint64_t family = 0; family < 16; family++) {
		if ((allowed >> family & 1u) != 0) {
			continue;
		}
		int rc = seccomp_rule_add(ctx, refuse, nr, 1,
					  SCMP_A0(SCMP_CMP_MASKED_EQ, 0xfull, family));
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

/* Whether one of the <n> values <v>, shifted right by <shift>, is <x>. */
static bool filter_prefix_in(const uint32_t *v, size_t n, unsigned int shift, uint64_t x)
{
	for (size_t i = 0; i < n; i++) {
		if ((uint64_t)v[i] >> shift == x) {
			return true;
		}
	}
	return false;
}

/*
 * Refuses socket() with EPROTONOSUPPORT when the comparisons <pre> (<npre> of them, on earlier
 * arguments) hold and the low <bits> bits of argument <arg> are none of the <n> values
 * <allowed> (each below 2^<bits>). A filter can only test equality under a mask, so "none of
 * these" is spelled out: from the top bit down, the paths to the allowed values; each branch
 * off them that leads to none is a rule, its bits from there up fixed and the rest free. No
 * two rules overlap, and there are at most <bits> per allowed value.
 */
static int filter_add_none_of(scmp_filter_ctx ctx, const struct scmp_arg_cmp *pre,
			      unsigned int npre, unsigned int arg, unsigned int bits,
			      const uint32_t *allowed, size_t n)
{
	AN_ASSERT(ctx != NULL && npre < 3 && arg == npre && bits <= 32 && n > 0);
	const uint64_t all = bits == 32 ? FILTER_LOW32 : (1ull << bits) - 1;
	struct scmp_arg_cmp cmp[3];
	memcpy(cmp, pre, npre * sizeof(cmp[0]));
	for (unsigned int b = bits; b-- > 0;) {
		for (size_t i = 0; i < n; i++) {
			AN_ASSERT((allowed[i] & ~all) == 0);
			uint64_t node = (uint64_t)allowed[i] >> b;
			if (filter_prefix_in(allowed, i, b, node) ||
			    filter_prefix_in(allowed, n, b, node ^ 1u)) {
				continue; /* seen already, or its sibling leads to an allowed one */
			}
			cmp[npre] = (struct scmp_arg_cmp){ arg, SCMP_CMP_MASKED_EQ, all >> b << b,
							   (node ^ 1u) << b };
			int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT),
							SCMP_SYS(socket), npre + 1, cmp);
			if (rc != 0) {
				return rc;
			}
		}
	}
	return 0;
}

/*
 * In AF_INET and AF_INET6, refuses with EPROTONOSUPPORT a type (its low 4 bits; the flags sit
 * above) not in filter_inet_types, and a protocol (its low 32 bits) not in filter_inet.
 */
static int filter_add_inet(scmp_filter_ctx ctx)
{
	AN_ASSERT(ctx != NULL);
	const int families[] = { AF_INET, AF_INET6 };
	for (size_t i = 0; i < AN_ARRAY_LEN(families); i++) {
		struct scmp_arg_cmp fam =
		    SCMP_A0(SCMP_CMP_MASKED_EQ, FILTER_LOW32, (uint64_t)families[i]);
		int rc = filter_add_none_of(ctx, &fam, 1, 1, 4, filter_inet_types,
					    AN_ARRAY_LEN(filter_inet_types));
		if (rc != 0) {
			return rc;
		}
	}
	for (size_t i = 0; i < AN_ARRAY_LEN(filter_inet); i++) {
		const struct filter_inet *f = &filter_inet[i];
		const struct scmp_arg_cmp pre[] = {
			SCMP_A0(SCMP_CMP_MASKED_EQ, FILTER_LOW32, (uint64_t)f->family),
			SCMP_A1(SCMP_CMP_MASKED_EQ, FILTER_SOCK_TYPE_MASK, (uint64_t)f->type),
		};
		int rc = filter_add_none_of(ctx, pre, 2, 2, 32, f->protocols, f->n);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

/* Refuses <nr> with <err> when argument 0 has any bit of <flags> set: one rule per bit. */
static int filter_add_flags(scmp_filter_ctx ctx, int nr, uint64_t flags, int err)
{
	AN_ASSERT(ctx != NULL);
	AN_ASSERT(flags != 0);
	for (unsigned int bit = 0; bit < 64; bit++) {
		uint64_t m = 1ull << bit;
		if ((flags & m) == 0) {
			continue;
		}
		int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO((uint32_t)err), nr, 1,
					  SCMP_A0(SCMP_CMP_MASKED_EQ, m, m));
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

/* Raw and packet sockets of inet and inet6: EPERM (root's, and what ping has no need of). */
static int filter_add_raw(scmp_filter_ctx ctx)
{
	static const int families[] = { AF_INET, AF_INET6 };
	static const int types[] = { SOCK_RAW, SOCK_PACKET };

	for (size_t f = 0; f < AN_ARRAY_LEN(families); f++) {
		for (size_t t = 0; t < AN_ARRAY_LEN(types); t++) {
			int rc = seccomp_rule_add(
			    ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2,
			    SCMP_A0(SCMP_CMP_MASKED_EQ, FILTER_LOW32, (uint64_t)families[f]),
			    SCMP_A1(SCMP_CMP_MASKED_EQ, FILTER_SOCK_TYPE_MASK, (uint64_t)types[t]));
			if (rc != 0) {
				return rc;
			}
		}
	}
	return 0;
}

/* The rules both filters share: sockets, the terminal, and filter_refused. */
static int filter_add_common(scmp_filter_ctx ctx)
{
	AN_ASSERT(ctx != NULL);
	const struct filter_rule rules[] = {
		/* ioctl's command is an unsigned int to the kernel. */
		{ SCMP_SYS(ioctl),
		  EPERM,
		  1,
		  { SCMP_A1(SCMP_CMP_MASKED_EQ, FILTER_LOW32, TIOCSTI) } },
		{ SCMP_SYS(ioctl),
		  EPERM,
		  1,
		  { SCMP_A1(SCMP_CMP_MASKED_EQ, FILTER_LOW32, TIOCLINUX) } },
		{ SCMP_SYS(ioctl),
		  EPERM,
		  1,
		  { SCMP_A1(SCMP_CMP_MASKED_EQ, FILTER_LOW32, TIOCSETD) } },
	};
	int rc = filter_add_families(ctx, SCMP_SYS(socket), FILTER_FAMILIES);
	if (rc == 0) {
		rc = filter_add_families(ctx, SCMP_SYS(socketpair), FILTER_PAIR_FAMILIES);
	}
	if (rc == 0) {
		rc = filter_add_inet(ctx);
	}
	if (rc == 0) {
		rc = filter_add_raw(ctx);
	}
	if (rc == 0) {
		rc = filter_add_rules(ctx, rules, AN_ARRAY_LEN(rules));
	}
	if (rc == 0) {
		rc = filter_add_list(ctx, filter_refused, AN_ARRAY_LEN(filter_refused), EPERM);
	}
	return rc;
}

/* The rules of <kind> alone. */
static int filter_add_kind(scmp_filter_ctx ctx, enum filter_kind kind)
{
	AN_ASSERT(ctx != NULL);
	if (kind == FILTER_BRIDGE) {
		return filter_add_list(ctx, filter_refused_bridge,
				       AN_ARRAY_LEN(filter_refused_bridge), EPERM);
	}
	AN_ASSERT(kind == FILTER_AGENT);
	int rc = filter_add_flags(ctx, SCMP_SYS(unshare), FILTER_UNSHARE_NEW, EPERM);
	if (rc == 0) {
		rc = filter_add_flags(ctx, SCMP_SYS(clone), FILTER_CLONE_NEW, EPERM);
	}
	if (rc == 0) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	}
	return rc;
}

/*
 * Builds the filter <kind> into <*out> (owned by the caller: seccomp_release). Default allow.
 * Only the native architecture is in the filter, and any other (i386 through int 0x80, x32
 * through the x32 syscall bit, both of which would reach every call above under other
 * numbers) kills the process. Returns 0 or a negative errno from libseccomp.
 */
int filter_build(scmp_filter_ctx *out, enum filter_kind kind)
{
	AN_ASSERT(out != NULL);
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (ctx == NULL) {
		return -ENOMEM;
	}
	int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc == 0) {
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1);
	}
	if (rc == 0) {
		/* A binary tree of system calls: read and write do not walk past every rule. */
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	}
	if (rc == 0) {
		rc = filter_add_common(ctx);
	}
	if (rc == 0) {
		rc = filter_add_kind(ctx, kind);
	}
	if (rc != 0) {
		seccomp_release(ctx);
		return rc;
	}
	*out = ctx;
	AN_ASSERT(*out != NULL);
	return 0;
}

/*
 * Loads <ctx> into the calling process. Without no_new_privs where the kernel allows it (the
 * caller holds CAP_SYS_ADMIN in its user namespace), so setuid programs such as sudo keep
 * working in privileged sandboxes; the filter is inherited across every exec either way, so
 * no_new_privs adds nothing to it. Otherwise with no_new_privs. Returns 0 or -errno.
 */
int filter_load(scmp_filter_ctx ctx)
{
	AN_ASSERT(ctx != NULL);
	int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	if (rc == 0) {
		rc = seccomp_load(ctx);
	}
	if (rc == -EACCES || rc == -EPERM) {
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
		if (rc == 0) {
			rc = seccomp_load(ctx);
		}
	}
	AN_ASSERT(rc <= 0);
	return rc;
}
