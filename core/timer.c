/*
 * Hashed timer wheel. Slot = expires_tick mod LIMITS_TIMER_SLOTS; each slot is
 * a circular doubly-linked list with a sentinel, so disarm needs no search.
 * Advancing walks the slots between the last processed tick and now, taking
 * entries whose expires_tick has come (an entry clamped to the span sits in a
 * slot visited once per revolution, so the check by tick, not by slot, keeps
 * it correct). Rejected: a heap (O(log n) per arm on every request, and most
 * timers are re-armed or disarmed long before they fire).
 */
#include "core/timer.h"

#include <stddef.h>
#include <time.h>

#include "core/an.h"

uint64_t timer_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t timer_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void timer_wheel_init(struct timer_wheel *w, uint64_t now_ms)
{
	w->now_tick = now_ms / LIMITS_TIMER_TICK_MS;
	w->now_ms = now_ms;
	w->armed = 0;
	for (uint32_t i = 0; i < LIMITS_TIMER_SLOTS; i++) {
		w->slots[i].next = &w->slots[i];
		w->slots[i].prev = &w->slots[i];
	}
}

static void unlink_entry(struct timer_entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = NULL;
	e->prev = NULL;
}

void timer_disarm(struct timer_wheel *w, struct timer_entry *e)
{
	if (!timer_armed(e))
		return;
	AN_ASSERT(w->armed > 0);
	unlink_entry(e);
	w->armed--;
}

void timer_arm(struct timer_wheel *w, struct timer_entry *e, uint32_t delay_ms)
{
	timer_disarm(w, e);
	/* The deadline's own tick boundary: counting whole ticks from now_tick would
	 * fire up to a tick early when the clock is part-way through a tick. */
	uint64_t due_tick =
	    (w->now_ms + delay_ms + LIMITS_TIMER_TICK_MS - 1) / LIMITS_TIMER_TICK_MS;
	AN_ASSERT(due_tick >= w->now_tick);
	/* Never the tick being processed: a handler re-arming with 0 must not loop. */
	if (due_tick == w->now_tick)
		due_tick = w->now_tick + 1;
	if (due_tick - w->now_tick >= LIMITS_TIMER_SLOTS)
		due_tick = w->now_tick + LIMITS_TIMER_SLOTS - 1;
	e->expires_tick = due_tick;
	struct timer_entry *head = &w->slots[e->expires_tick & (LIMITS_TIMER_SLOTS - 1)];
	e->next = head->next;
	e->prev = head;
	head->next->prev = e;
	head->next = e;
	w->armed++;
	AN_ASSERT(timer_armed(e));
}

uint32_t timer_wheel_expire(struct timer_wheel *w, uint64_t now_ms, struct timer_entry **out,
			    uint32_t max)
{
	uint64_t target = now_ms / LIMITS_TIMER_TICK_MS;
	uint32_t n = 0;

	AN_ASSERT(max > 0);
	if (now_ms > w->now_ms)
		w->now_ms = now_ms;
	/* A long stall must not walk more than one revolution. */
	if (target > w->now_tick + LIMITS_TIMER_SLOTS)
		w->now_tick = target - LIMITS_TIMER_SLOTS;
	while (w->now_tick <= target) {
		struct timer_entry *head = &w->slots[w->now_tick & (LIMITS_TIMER_SLOTS - 1)];
		struct timer_entry *e = head->next;
		while (e != head) {
			struct timer_entry *next = e->next;
			if (e->expires_tick <= target) {
				unlink_entry(e);
				w->armed--;
				out[n++] = e;
				if (n == max)
					return n;
			}
			e = next;
		}
		if (w->now_tick == target)
			break;
		w->now_tick++;
	}
	return n;
}

int32_t timer_wheel_wait_ms(const struct timer_wheel *w, uint64_t now_ms)
{
	if (w->armed == 0)
		return -1;
	uint64_t next_ms = (now_ms / LIMITS_TIMER_TICK_MS + 1) * LIMITS_TIMER_TICK_MS;
	return (int32_t)(next_ms - now_ms);
}
