/*
 * The sandbox uid pool (core/uidpool.h). A search skips whole words of given
 * uids, so picking one costs a scan of count / 64 words at worst, and one
 * host lookup per free uid tried (normally the first).
 */
#include "core/uidpool.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>

#include "core/an.h"
#include "core/pool.h"

bool uidpool_host_free(uint32_t uid)
{
	return getpwuid((uid_t)uid) == NULL && getgrgid((gid_t)uid) == NULL;
}

int uidpool_init(struct uidpool *p, uint32_t first, uint32_t count, uidpool_free_fn host_free)
{
	AN_ASSERT(count >= 1);
	AN_ASSERT((uint64_t)first + count - 1 < UINT32_MAX - 1);
	*p = (struct uidpool){ .first = first, .count = count };
	p->host_free = host_free != NULL ? host_free : uidpool_host_free;
	p->taken = pool_calloc((count + 63) / 64, sizeof(*p->taken));
	return p->taken != NULL ? 0 : -ENOMEM;
}

void uidpool_free(struct uidpool *p)
{
	AN_FREE(&p->taken);
	*p = (struct uidpool){ 0 };
}

bool uidpool_contains(const struct uidpool *p, uint32_t uid)
{
	return p->taken != NULL && uid >= p->first && uid - p->first < p->count;
}

static bool bit_get(const struct uidpool *p, uint32_t off)
{
	return (p->taken[off / 64] >> (off % 64)) & 1u;
}

static void bit_set(struct uidpool *p, uint32_t off, bool on)
{
	uint64_t mask = (uint64_t)1 << (off % 64);
	p->taken[off / 64] = on ? p->taken[off / 64] | mask : p->taken[off / 64] & ~mask;
}

int uidpool_pick(struct uidpool *p, uint32_t *uid)
{
	AN_ASSERT(p->taken != NULL);
	AN_ASSERT(p->cursor < p->count);
	uint32_t off = p->cursor;
	for (uint64_t tried = 0; tried < p->count;) {
		/* A word whose bits from <off> on are all given: on to the next word. */
		if (off % 64 == 0 && p->count - off >= 64 && p->taken[off / 64] == UINT64_MAX) {
			tried += 64;
			off = off + 64 < p->count ? off + 64 : 0;
			continue;
		}
		if (!bit_get(p, off) && p->host_free(p->first + off)) {
			p->cursor = off + 1 < p->count ? off + 1 : 0;
			*uid = p->first + off;
			AN_ASSERT(uidpool_contains(p, *uid));
			return 0;
		}
		tried++;
		off = off + 1 < p->count ? off + 1 : 0;
	}
	return -EUSERS;
}

int uidpool_take(struct uidpool *p, uint32_t uid)
{
	AN_ASSERT(uidpool_contains(p, uid));
	uint32_t off = uid - p->first;
	if (bit_get(p, off))
		return -EEXIST;
	bit_set(p, off, true);
	p->given++;
	return 0;
}

void uidpool_release(struct uidpool *p, uint32_t uid)
{
	if (!uidpool_contains(p, uid) || !bit_get(p, uid - p->first))
		return;
	bit_set(p, uid - p->first, false);
	AN_ASSERT(p->given > 0);
	p->given--;
}
