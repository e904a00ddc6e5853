/*
 * Memory: the only place the project calls malloc/free (docs/style.md section 7).
 *
 * pool_malloc/pool_calloc/pool_free are the general wrappers for start-up and
 * control-path allocations. struct pool is a fixed-size object pool, sized once
 * at start-up from the configuration: the data path takes and puts objects and
 * never allocates. A pool is owned by one thread and is not thread-safe.
 */
#ifndef AN_CORE_POOL_H
#define AN_CORE_POOL_H

#include <stddef.h>
#include <stdint.h>

/* Returns owned memory of <size> bytes, or NULL when out of memory. */
void *pool_malloc(size_t size);
/* Returns owned zeroed memory for <n> objects of <size> bytes, or NULL. */
void *pool_calloc(size_t n, size_t size);
/*
 * Like pool_calloc, for a type aligned past what malloc gives (a cache line:
 * _Alignof(T)); <align> a power of two. Released with pool_free.
 */
void *pool_calloc_aligned(size_t n, size_t size, size_t align);
/* Resizes owned memory <p> to <size> bytes; NULL on failure (p stays valid). */
void *pool_realloc(void *p, size_t size);
/* Returns an owned copy of the <len> bytes at <s> plus a NUL, or NULL. */
char *pool_strndup(const char *s, size_t len);
/* Takes and releases <p>; NULL is accepted. */
void pool_free(void *p);
/* Wipes <len> bytes at <p> (not optimised away), then releases it. For secrets. */
void pool_free_secret(void *p, size_t len);

/* Frees *pp and clears the pointer, so no reachable pointer dangles. */
#define AN_FREE(pp)               \
	do {                      \
		pool_free(*(pp)); \
		*(pp) = NULL;     \
	} while (0)

struct pool {
	const char *name;      /* borrowed, for metrics and leak reports */
	unsigned char *slab;   /* owned: capacity * obj_size bytes */
	uint32_t *free_stack;  /* owned: indexes of free objects */
	uint32_t obj_size;     /* bytes per object, rounded to 16 */
	uint32_t capacity;     /* objects in the slab */
	uint32_t free_count;   /* objects available */
	uint32_t in_use_high;  /* high-water mark of objects in use */
	uint64_t failed_takes; /* takes refused because the pool was empty */
	uint32_t warm_max;     /* free objects kept resident; 0: all (see pool_set_warm_max) */
	uint32_t warm_free;    /* free objects whose pages are resident */
	uint8_t *cold;         /* owned when warm_max != 0: 1 when an object's pages were dropped */
};

/*
 * Creates a pool of <capacity> objects of <obj_size> bytes. The slab is
 * reserved with mmap and touched only as objects are used, so a large pool
 * costs memory only for its high-water mark. Returns 0 or -ENOMEM/-EINVAL.
 */
int pool_init(struct pool *p, const char *name, uint32_t obj_size, uint32_t capacity);
/* Releases the slab. Asserts that every object was put back (no leak). */
void pool_destroy(struct pool *p);
/* Returns a zeroed object owned by the caller, or NULL when the pool is empty. */
void *pool_take(struct pool *p);
/* Takes back <obj>, which must have come from pool_take on <p>. */
void pool_put(struct pool *p, void *obj);
/*
 * Keeps at most <warm_max> free objects resident; the pages of objects put
 * beyond that are given back to the kernel (MADV_DONTNEED) and fault in again,
 * zeroed, when taken. For pools of large buffers (<obj_size> a multiple of the
 * page size) whose peak use is far above their usual use: a burst must not
 * leave its memory resident. Returns 0, -EINVAL (objects not page multiples)
 * or -ENOMEM.
 */
int pool_set_warm_max(struct pool *p, uint32_t warm_max);
/* Objects currently taken. */
uint32_t pool_in_use(const struct pool *p);
/* Index of <obj> within the pool, stable for its lifetime. */
uint32_t pool_index(const struct pool *p, const void *obj);

#endif /* AN_CORE_POOL_H */
