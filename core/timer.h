/*
 * Per-worker hashed timer wheel (docs/engine-notes.md "Timers": one wheel driven
 * by the loop's wait timeout, not a timeout SQE per connection).
 *
 * Entries are embedded in their owners; arming and disarming are O(1) and
 * never allocate. Resolution is LIMITS_TIMER_TICK_MS: a timer fires between
 * its delay and one tick later. The wheel is owned by one thread.
 */
#ifndef AN_CORE_TIMER_H
#define AN_CORE_TIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"

struct timer_entry {
	struct timer_entry *next; /* NULL when not armed */
	struct timer_entry *prev;
	uint64_t expires_tick;
};

struct timer_wheel {
	uint64_t now_tick;                            /* ticks processed so far */
	uint64_t now_ms;                              /* latest clock given to init/expire */
	uint32_t armed;                               /* entries currently armed */
	struct timer_entry slots[LIMITS_TIMER_SLOTS]; /* list heads (sentinels) */
};

/* Monotonic milliseconds (CLOCK_MONOTONIC_COARSE is too coarse for ticks). */
uint64_t timer_now_ms(void);
/* CLOCK_MONOTONIC in microseconds: for the latency histograms (core/worker-t.h). */
uint64_t timer_now_us(void);
/* Initialises an empty wheel whose clock starts at <now_ms>. */
void timer_wheel_init(struct timer_wheel *w, uint64_t now_ms);
/*
 * Arms <e> to fire <delay_ms> after the wheel's clock, which is the latest
 * <now_ms> given to timer_wheel_init or timer_wheel_expire (re-arming moves
 * it). Delays longer than the wheel's span are clamped to it; the owner
 * re-checks its own deadline when the entry fires, so clamping only costs an
 * early wake-up.
 */
void timer_arm(struct timer_wheel *w, struct timer_entry *e, uint32_t delay_ms);
/* Disarms <e> if armed. */
void timer_disarm(struct timer_wheel *w, struct timer_entry *e);
static inline bool timer_armed(const struct timer_entry *e)
{
	return e->next != NULL;
}
/*
 * Advances the wheel to <now_ms> and moves up to <max> expired entries into
 * <out> (disarmed). Returns how many; call again while it returns <max>.
 */
uint32_t timer_wheel_expire(struct timer_wheel *w, uint64_t now_ms, struct timer_entry **out,
			    uint32_t max);
/* Milliseconds until the next tick boundary when anything is armed, else -1. */
int32_t timer_wheel_wait_ms(const struct timer_wheel *w, uint64_t now_ms);

#endif /* AN_CORE_TIMER_H */
