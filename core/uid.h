/*
 * A uid or gid written in decimal, as `--user UID:GID`, the control
 * protocol's `sandbox add ... owned UID` and the registry write them: 1 to 10
 * digits, below 4294967295, which the kernel reads as "unchanged" ((uid_t)-1)
 * and the daemon as "any uid" (ENGINE_AGENT_ANY). Header-only, libc only, so
 * the daemon and every tool share it.
 */
#ifndef AN_CORE_UID_H
#define AN_CORE_UID_H

#include <stdbool.h>
#include <stdint.h>

/* Parses all of <text> into *<out>; false (and *<out> untouched) when it is not one. */
static inline bool uid_parse(const char *text, uint32_t *out)
{
	uint64_t v = 0;
	int digits = 0;

	for (const char *p = text; *p != '\0'; p++, digits++) {
		if (*p < '0' || *p > '9' || digits == 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (digits == 0 || v >= UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

#endif /* AN_CORE_UID_H */
