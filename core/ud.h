/*
 * user_data encoding and the op codes' registry, in exactly one place
 * (docs/style.md section 7).
 *
 * A CQE's user_data is the address of the object the operation belongs to,
 * shifted left by UD_OP_BITS, with the operation code in the low bits. The
 * objects (conns, listeners, DNS poll slots, the worker's wake-up) are all
 * 16-byte aligned and live in user space below 2^47, so the shift loses
 * nothing; the asserts check both facts on every encode.
 */
#ifndef AN_CORE_UD_H
#define AN_CORE_UD_H

#include <assert.h>
#include <stdint.h>

#include "core/an.h"

#define UD_OP_BITS 8u
#define UD_OP_MASK ((1u << UD_OP_BITS) - 1u)

static_assert(UD_OP_BITS + 48u <= 64u, "pointer and op must fit in user_data");

/*
 * The op space, one registry: every module's codes are given here, each in a
 * range of its own, and the asserts keep the ranges apart and in UD_OP_MASK.
 * A module names its codes after these (CONN_OP_COUNT, WORKER_OP_ACCEPT, ...).
 *
 *   0x00 .. UD_OP_CONN_END - 1   a conn's operations (core/conn_int.h, enum conn_op)
 *   UD_OP_WORKER_ACCEPT          a listener's multishot accept (core/worker.c)
 *   UD_OP_WORKER_WAKE            the worker's wake-up eventfd read (core/worker.c)
 *   UD_OP_UPPOOL                 a pooled upstream's watch (core/uppool.c)
 *   UD_OP_DNS_POLL               a resolver socket's poll (core/dns.c)
 *
 * A user_data of 0 is an operation nobody tracks (a close or cancel whose
 * success is skipped); objects are never at address 0, so no code meets it.
 */
#define UD_OP_CONN_END      24u
#define UD_OP_WORKER_ACCEPT 0xe0u
#define UD_OP_WORKER_WAKE   0xe1u
#define UD_OP_UPPOOL        0xe2u
#define UD_OP_DNS_POLL      0xf0u

static_assert(UD_OP_CONN_END <= UD_OP_WORKER_ACCEPT, "a conn's ops end below the worker's");
static_assert(UD_OP_WORKER_ACCEPT < UD_OP_WORKER_WAKE, "one code each");
static_assert(UD_OP_WORKER_WAKE < UD_OP_UPPOOL, "one code each");
static_assert(UD_OP_UPPOOL < UD_OP_DNS_POLL, "one code each");
static_assert(UD_OP_DNS_POLL <= UD_OP_MASK, "every op fits in UD_OP_BITS");

static inline uint64_t ud_encode(const void *obj, uint32_t op)
{
	uint64_t addr = (uint64_t)(uintptr_t)obj;

	AN_DASSERT(op <= UD_OP_MASK);
	AN_DASSERT(addr >> 48 == 0);
	return (addr << UD_OP_BITS) | op;
}

static inline void *ud_object(uint64_t ud)
{
	return (void *)(uintptr_t)(ud >> UD_OP_BITS);
}

static inline uint32_t ud_op(uint64_t ud)
{
	return (uint32_t)(ud & UD_OP_MASK);
}

#endif /* AN_CORE_UD_H */
