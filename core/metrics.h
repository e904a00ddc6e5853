/*
 * The Prometheus listener (daemon.metrics): GET /metrics on a loopback
 * address, answered in the text exposition format (version 0.0.4).
 *
 * One thread, serving one scrape at a time, as the control socket does: a
 * scrape is rare (every 15 s or so) and short. A scrape reads only what the
 * workers publish already (their counters, their decision and sandbox
 * counts: relaxed loads of single-writer counters), so it costs the data
 * path nothing, no atomic read-modify-write and no lock; the sandbox table's
 * lock is held while the per-sandbox series are gathered, as `sandbox stats`
 * holds it. The per-sandbox series are bounded: the busiest
 * daemon.metrics.sandboxes by requests each get their own, the rest are
 * summed under sandbox="_other", however many sandboxes come and go.
 *
 * Only a loopback address is accepted (policy/daemon.c): the series name every
 * sandbox, which is for the host's operators, never for the network.
 */
#ifndef AN_CORE_METRICS_H
#define AN_CORE_METRICS_H

#include <pthread.h>
#include <stddef.h>

struct engine;

/* The sandbox label of the series that sum every sandbox past the busiest. */
#define METRICS_OTHER_SANDBOXES "_other"

struct metrics {
	struct engine *e; /* borrowed */
	int listen_fd;    /* -1: not serving */
	int stop_fd;      /* eventfd: metrics_stop wakes the thread's poll */
	pthread_t thread;
};

/*
 * Listens on e->cfg->metrics_listen and starts the thread; with no address
 * configured, does nothing and returns 0. <kept> (or -1), the old daemon's
 * listener passed in an upgrade, is served instead when it listens on that
 * very address (else, and without an address, closed, and a listener made
 * anew). Sets e->metrics_fd, which the control thread's handover reads: call
 * it before control_start. 0 or -errno (logged).
 */
int metrics_start(struct metrics *m, struct engine *e, int kept);

/*
 * Stops the thread and closes the listener (nothing when it never started or
 * has stopped). After control_stop.
 */
void metrics_stop(struct metrics *m);

/*
 * The exposition as a scrape would get it now: owned text (pool memory) of
 * *<len> bytes, or NULL when out of memory. Any thread, after engine_start.
 */
char *metrics_render(struct engine *e, size_t *len);

#endif /* AN_CORE_METRICS_H */
