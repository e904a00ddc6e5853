/*
 * Out-of-line half of core/an.h: the assertion failure path and the counter
 * of defensive checks that fired in release builds. Kept tiny and free of
 * other project dependencies so every module can assert.
 */
#include "core/an.h"

#include <stdio.h>
#include <stdlib.h>

_Atomic uint64_t an_never_hits;

_Noreturn void an_assert_fail(const char *file, int line, const char *expr)
{
	fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
	fflush(stderr);
	abort();
}
