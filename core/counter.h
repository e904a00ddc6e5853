/*
 * Counters with one writer (a worker) and any number of readers (the control
 * and metrics threads): the writer adds with a relaxed load and store, never
 * a locked read-modify-write, and readers take relaxed loads; a reader may
 * see a figure a moment old, never a torn one.
 */
#ifndef AN_CORE_COUNTER_H
#define AN_CORE_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

/* Adds <value> to <at>, whose one writer is the caller. */
static inline void counter_add(_Atomic uint64_t *at, uint64_t value)
{
	atomic_store_explicit(at, atomic_load_explicit(at, memory_order_relaxed) + value,
			      memory_order_relaxed);
}

/*
 * A latency histogram (core/metrics.c prints it in Prometheus form): each
 * bucket counts the observations at most its bound (LATENCY_BOUNDS_US) and
 * above the one before, the last those above every bound; and their sum.
 */
#define LATENCY_BOUNDS 19u
#define LATENCY_BOUNDS_US                                                                         \
	{                                                                                         \
		5u, 10u, 25u, 50u, 100u, 250u, 500u, 1000u, 2500u, 5000u, 10000u, 25000u, 50000u, \
		    100000u, 250000u, 500000u, 1000000u, 2500000u, 10000000u                      \
	}
struct latency_histogram {
	_Atomic uint64_t buckets[LATENCY_BOUNDS + 1];
	_Atomic uint64_t sum_us;
};

/* Counts one observation of <us> microseconds in <h>, whose one writer is the caller. */
static inline void latency_observe(struct latency_histogram *h, uint64_t us)
{
	static const uint32_t bounds[LATENCY_BOUNDS] = LATENCY_BOUNDS_US;
	uint32_t i = 0;

	while (i < LATENCY_BOUNDS && us > bounds[i])
		i++;
	counter_add(&h->buckets[i], 1);
	counter_add(&h->sum_us, us);
}

#endif /* AN_CORE_COUNTER_H */
