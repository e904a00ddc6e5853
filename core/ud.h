/*
 * user_data encoding, in exactly one place (docs/style.md section 7).
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
