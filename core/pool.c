/*
 * Memory wrappers and fixed-size object pools.
 *
 * A pool is a slab of equal objects plus a stack of free indexes. The slab is
 * one anonymous mapping: the kernel backs a page only when an object on it is
 * first used, so sizing a pool for the configured maximum (say 64k conns) costs
 * address space, not memory, and an idle daemon stays small. The free stack is
 * LIFO so recently used (cache-warm) objects are reused first. Rejected: a
 * free list threaded through the objects (a use-after-put would corrupt it
 * silently; the separate stack plus the in-use assertion catch double puts in
 * tests). Objects are zeroed on take, so no state leaks between owners.
 * Pools of large buffers can bound how many free objects stay resident
 * (pool_set_warm_max): LIFO reuse keeps the warm ones on top of the stack, so
 * the usual load touches only those, and a burst's memory is returned.
 */
#include "core/pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/an.h"

void *pool_malloc(size_t size)
{
	return malloc(size);
}

void *pool_calloc(size_t n, size_t size)
{
	return calloc(n, size);
}

void *pool_calloc_aligned(size_t n, size_t size, size_t align)
{
	void *p = NULL;

	AN_ASSERT(align != 0 && (align & (align - 1)) == 0);
	if (size != 0 && n > SIZE_MAX / size)
		return NULL;
	size_t bytes = n * size;
	if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align,
			   bytes != 0 ? bytes : 1) != 0)
		return NULL;
	memset(p, 0, bytes);
	return p;
}

void *pool_realloc(void *p, size_t size)
{
	return realloc(p, size);
}

char *pool_strndup(const char *s, size_t len)
{
	char *d = malloc(len + 1);

	if (d == NULL)
		return NULL;
	memcpy(d, s, len);
	d[len] = '\0';
	return d;
}

void pool_free(void *p)
{
	free(p);
}

void pool_free_secret(void *p, size_t len)
{
	if (p == NULL)
		return;
	explicit_bzero(p, len);
	free(p);
}

int pool_init(struct pool *p, const char *name, uint32_t obj_size, uint32_t capacity)
{
	if (obj_size == 0 || capacity == 0)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->name = name;
	p->obj_size = (obj_size + 15u) & ~15u;
	p->capacity = capacity;
	size_t slab_bytes = (size_t)p->obj_size * capacity;
	void *slab =
	    mmap(NULL, slab_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (slab == MAP_FAILED)
		return -ENOMEM;
	p->free_stack = malloc(sizeof(*p->free_stack) * capacity);
	if (p->free_stack == NULL) {
		munmap(slab, slab_bytes);
		return -ENOMEM;
	}
	p->slab = slab;
	/* Index 0 on top: objects are handed out from the start of the slab. */
	for (uint32_t i = 0; i < capacity; i++)
		p->free_stack[i] = capacity - 1 - i;
	p->free_count = capacity;
	return 0;
}

void pool_destroy(struct pool *p)
{
	if (p->slab == NULL)
		return;
	AN_ASSERT(p->free_count == p->capacity);
	munmap(p->slab, (size_t)p->obj_size * p->capacity);
	AN_FREE(&p->free_stack);
	AN_FREE(&p->cold);
	p->slab = NULL;
}

void *pool_take(struct pool *p)
{
	if (p->free_count == 0) {
		p->failed_takes++;
		return NULL;
	}
	uint32_t idx = p->free_stack[--p->free_count];
	AN_DASSERT(idx < p->capacity);
	uint32_t used = p->capacity - p->free_count;
	if (used > p->in_use_high)
		p->in_use_high = used;
	unsigned char *obj = p->slab + (size_t)idx * p->obj_size;
	if (p->cold != NULL && p->cold[idx]) {
		p->cold[idx] = 0; /* MADV_DONTNEED pages fault in zeroed */
		return obj;
	}
	if (p->cold != NULL) {
		AN_ASSERT(p->warm_free > 0);
		p->warm_free--;
	}
	memset(obj, 0, p->obj_size);
	return obj;
}

int pool_set_warm_max(struct pool *p, uint32_t warm_max)
{
	long page = sysconf(_SC_PAGESIZE);

	if (page <= 0 || p->obj_size % (uint32_t)page != 0)
		return -EINVAL;
	AN_ASSERT(p->free_count == p->capacity);
	p->cold = pool_calloc(p->capacity, 1);
	if (p->cold == NULL)
		return -ENOMEM;
	/* A fresh slab is untouched: every object starts cold. */
	memset(p->cold, 1, p->capacity);
	p->warm_max = warm_max;
	p->warm_free = 0;
	return 0;
}

void pool_put(struct pool *p, void *obj)
{
	uint32_t idx = pool_index(p, obj);
	AN_ASSERT(p->free_count < p->capacity);
	if (p->cold != NULL) {
		AN_ASSERT(!p->cold[idx]);
		if (p->warm_free < p->warm_max) {
			p->warm_free++;
		} else {
			/* Best effort: on failure the pages just stay resident. */
			if (madvise(obj, p->obj_size, MADV_DONTNEED) == 0)
				p->cold[idx] = 1;
			else
				p->warm_free++;
		}
	}
	p->free_stack[p->free_count++] = idx;
}

uint32_t pool_in_use(const struct pool *p)
{
	return p->capacity - p->free_count;
}

uint32_t pool_index(const struct pool *p, const void *obj)
{
	const unsigned char *o = obj;
	AN_ASSERT(o >= p->slab);
	size_t off = (size_t)(o - p->slab);
	AN_ASSERT(off % p->obj_size == 0);
	AN_ASSERT(off / p->obj_size < p->capacity);
	return (uint32_t)(off / p->obj_size);
}
