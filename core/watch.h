/*
 * The anomaly detectors at work (issue 21): each worker feeds core/alert.c
 * the decisions and uploads of the sandboxes it serves, one state per
 * sandbox slot, and acts on what they raise: an "alert" audit record, a
 * counter for the metrics, the daemon's list of recent alerts (`alerts` on
 * the control socket) and, when the detector's action says so, the sandbox's
 * quarantine (every request refused `quarantined` until `sandbox release`).
 *
 * The data path takes no lock: a detector's arithmetic is the worker's own,
 * and only a raised alert (at most one per detector and sandbox per
 * cooldown) takes the recent list's mutex.
 */
#ifndef AN_CORE_WATCH_H
#define AN_CORE_WATCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/alert.h"
#include "core/config.h"

struct engine;

/* Alerts the daemon keeps for `alerts`: the latest, oldest dropped first. */
#define WATCH_RECENT 256u

struct watch_alert {
	uint64_t seq;   /* the daemon's count of alerts, this one's: 1, 2, ... */
	uint64_t ts_ms; /* CLOCK_REALTIME */
	char sandbox[CONFIG_SANDBOX_ID_BYTES_MAX];
	uint32_t registrant; /* the sandbox's: who besides root may see it */
	struct alert_event ev;
};

struct watch_recent {
	pthread_mutex_t lock;
	uint64_t raised; /* alerts so far; the ring holds the last WATCH_RECENT */
	struct watch_alert ring[WATCH_RECENT];
};

/* The recent list (e->alerts_recent). 0 or -ENOMEM. engine_start's, before the workers. */
int watch_start(struct engine *e);
/* Frees it; the workers are gone. */
void watch_stop(struct engine *e);

/*
 * Up to <cap> of the latest alerts, oldest first, into <out>: all for root
 * (<uid> 0), else those of the sandboxes <uid> registered. Their count. Any
 * thread.
 */
uint32_t watch_recent_copy(struct engine *e, uint32_t uid, struct watch_alert *out, uint32_t cap);

/*
 * Lifts sandbox <id>'s quarantine. 0, -ENOENT (no such sandbox), -EALREADY
 * (not in quarantine). The control thread's; the caller checked who asks.
 */
int watch_release(struct engine *e, const char *id);

/*
 * Cuts what is open of the sandboxes in quarantine, once each quarantine: a
 * connection relaying (a tunnel, a forwarded request and its body, a
 * terminated session) or about to (resolving, connecting) is aborted, its
 * close record saying quarantined; one reading a head or answering is left,
 * since its request is refused or answered anyway. The worker's, once a turn:
 * one atomic load when nothing changed.
 */
struct worker;
void watch_quarantine_cut(struct worker *w);

/* How often the bytes up of open connections are fed to the upload detector. */
#define WATCH_UPLOAD_SWEEP_MS 1000u

/*
 * Once WATCH_UPLOAD_SWEEP_MS have passed since the last time: what each open
 * connection's agent sent since, to its sandbox's upload detector (a tunnel
 * that stays open is counted as it goes, not at its end). The worker's, once
 * a turn; O(its live conns) a second.
 */
void watch_uploads_sweep(struct worker *w);

/* The JSON body of an alert (the webhook's and `alerts`'), NUL-ended, into <out>/<cap>. */
int watch_alert_json(const struct watch_alert *a, char *out, size_t cap);

#endif /* AN_CORE_WATCH_H */
