/*
 * Project-wide macros: assertions, array length, and the free-and-clear idiom.
 *
 * AN_ASSERT is on in every build: a violated invariant in a proxy that holds
 * other people's connections is better as a crash with file and line than as
 * silent corruption. AN_DASSERT is compiled only with AN_DEBUG, for measured
 * hot loops. AN_NEVER/AN_ALWAYS wrap defensive "can't happen" checks: they
 * abort under AN_DEBUG and, in release builds, count the event and let the
 * caller take the safe path. None of them may have side effects that matter.
 */
#ifndef AN_CORE_AN_H
#define AN_CORE_AN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Prints "file:line: assertion failed: expr" to stderr and aborts. */
_Noreturn void an_assert_fail(const char *file, int line, const char *expr);

/* Events counted by AN_NEVER/AN_ALWAYS in release builds, for metrics. */
extern _Atomic uint64_t an_never_hits;

#define AN_ASSERT(x)                                            \
	do {                                                    \
		if (__builtin_expect(!(x), 0))                  \
			an_assert_fail(__FILE__, __LINE__, #x); \
	} while (0)

#ifdef AN_DEBUG
#define AN_DASSERT(x) AN_ASSERT(x)
#define AN_NEVER(x)   ((x) ? (an_assert_fail(__FILE__, __LINE__, "NEVER(" #x ")"), 1) : 0)
#else
#define AN_DASSERT(x) ((void)0)
#define AN_NEVER(x) \
	((x) ? (atomic_fetch_add_explicit(&an_never_hits, 1, memory_order_relaxed), 1) : 0)
#endif
#define AN_ALWAYS(x) (!AN_NEVER(!(x)))

#define AN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define AN_UNUSED __attribute__((unused))

#define AN_LIKELY(x)   __builtin_expect(!!(x), 1)
#define AN_UNLIKELY(x) __builtin_expect(!!(x), 0)

#endif /* AN_CORE_AN_H */
