/*
 * Anomaly detectors, one state per sandbox on the worker that serves it: the
 * early warning for a prompt-injected agent trying to send data out.
 *
 * alert_observe() is fed every decision of a sandbox's requests and
 * alert_observe_upload() every request's bytes from the agent, with the
 * worker's clock; each returns the alerts the observation raised. It is pure
 * arithmetic over a fixed-size struct alert_state (all zero is a fresh one):
 * no lock, no allocation, no system call, so it stays on for every request.
 * What an alert leads to (the audit record, the counter, the webhook, the
 * quarantine) is the caller's.
 *
 * Detectors (docs/alerts.md says what each catches and how to tune it):
 *   refusals       at least `threshold` requests refused by the policy (what
 *                  the agent may not reach or send: alert_policy_refusal)
 *                  within `window_s`; limits and outages are not the agent's;
 *   refused_names  at least `threshold` (at most ALERT_NAME_KEEP) distinct host
 *                  names refused host_not_allowed under one suffix (the
 *                  caller's: the registrable domain) within `window_s`, the
 *                  shape of names that carry data;
 *   new_host       an allowed host first reached once the sandbox is past
 *                  `warmup_s` of its first request;
 *   request_spike  a minute's requests at least `factor` times the sandbox's
 *                  moving baseline (and at least `threshold`);
 *   upload         at least `bytes` sent by the agent within `window_s`;
 *   quiet_hours    a request between `from` and `to` (minutes of the UTC day);
 *   misdirected    a placeholder sent to a host that is not its rule's (always);
 *   credential_missing  an inject rule whose secret is missing (always).
 * Each detector alerts once per `cooldown_s`: one incident, one alert. When
 * refused_names fires, it speaks for the refusals too: refusals stays quiet
 * for its own cooldown from then on.
 *
 * Windows are counted in ALERT_SLOTS slots of window_s / ALERT_SLOTS (at
 * least a second) each: a sliding window exact to one slot.
 */
#ifndef AN_CORE_ALERT_H
#define AN_CORE_ALERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/reason.h"

enum alert_detector {
	ALERT_REFUSALS = 0,
	ALERT_REFUSED_NAMES,
	ALERT_NEW_HOST,
	ALERT_REQUEST_SPIKE,
	ALERT_UPLOAD,
	ALERT_QUIET_HOURS,
	ALERT_MISDIRECTED,
	ALERT_CREDENTIAL_MISSING,
	ALERT__COUNT,
};

/* The detector's name as the policy, the audit and the metrics spell it. */
const char *alert_detector_name(enum alert_detector d);

/* Whether <why> refuses what the agent asked for (not a limit, an outage or the daemon's state). */
bool alert_policy_refusal(enum reason why);

enum alert_action {
	ALERT_ACTION_NONE = 0,   /* an alert, nothing more */
	ALERT_ACTION_QUARANTINE, /* and the sandbox refuses every request until released */
};

/* One detector's settings; which fields mean something is the detector's. */
struct alert_detector_config {
	bool on;
	enum alert_action action;
	uint32_t threshold; /* refusals, refused_names: a count; request_spike: a floor */
	uint32_t window_s;  /* refusals, refused_names, upload */
	uint32_t factor;    /* request_spike: times the baseline */
	uint32_t warmup_s;  /* new_host */
	uint64_t bytes;     /* upload */
	uint16_t
	    from_min; /* quiet_hours: minutes of the UTC day, [from, to) wrapping at midnight */
	uint16_t to_min;
};

/* A profile's compiled `alerts:` (the global section, overridden per profile). */
struct alert_config {
	struct alert_detector_config detector[ALERT__COUNT];
	uint32_t cooldown_s;
};

/* The defaults every policy starts from: detectors on, thresholds a sound agent stays under. */
#define ALERT_REFUSALS_THRESHOLD      20u
#define ALERT_REFUSALS_WINDOW_S       60u
#define ALERT_REFUSED_NAMES_THRESHOLD 10u
#define ALERT_REFUSED_NAMES_WINDOW_S  60u
#define ALERT_NEW_HOST_WARMUP_S       600u
#define ALERT_SPIKE_FACTOR            10u
#define ALERT_SPIKE_FLOOR             600u /* requests in a minute */
#define ALERT_UPLOAD_BYTES            (256ull << 20)
#define ALERT_UPLOAD_WINDOW_S         300u
#define ALERT_COOLDOWN_S              300u
/* Fills <out> with the defaults (quiet_hours off: no hours named). */
void alert_config_defaults(struct alert_config *out);

/* What a detector saw: its evidence, for the record and the webhook. */
#define ALERT_NAMES_MAX  3u  /* refused names quoted as a sample */
#define ALERT_NAME_BYTES 48u /* each cut to its last ALERT_NAME_BYTES - 1 bytes */
struct alert_event {
	enum alert_detector detector;
	enum alert_action action;
	uint64_t count;              /* refusals, distinct names, requests, bytes: the detector's */
	uint64_t baseline;           /* request_spike: the baseline per minute */
	uint32_t window_s;           /* over which <count> was seen (0: one request) */
	char host[ALERT_NAME_BYTES]; /* the request's host (new_host, misdirected, ...) */
	char suffix[ALERT_NAME_BYTES]; /* refused_names: the suffix */
	char names[ALERT_NAMES_MAX][ALERT_NAME_BYTES];
	uint32_t name_count;
};

#define ALERT_SLOTS      10u /* a window's slots */
#define ALERT_HOSTS      64u /* new_host's table; past ALERT_HOSTS_KEEP hosts, no new_host alert */
#define ALERT_HOSTS_KEEP 48u
#define ALERT_SUFFIXES \
	4u /* suffixes refused_names follows at once (the one with fewest names goes) */
#define ALERT_NAME_KEEP     32u /* distinct refused names counted under one suffix: threshold's bound */
#define ALERT_SPIKE_KEEP    60u /* minutes the spike baseline averages over */
#define ALERT_SPIKE_HISTORY 5u  /* minutes of history before a spike can be told */

/* A sliding count over a window of ALERT_SLOTS slots. */
struct alert_window {
	uint64_t slot_at; /* the newest slot's number (now_s / slot length) */
	uint64_t counts[ALERT_SLOTS];
};

/* The distinct refused names under one suffix seen within the window. */
struct alert_suffix {
	uint64_t suffix;                     /* its hash; 0: unused */
	uint64_t last_s;                     /* the newest name's time */
	uint32_t live;                       /* names within the window, at last_s */
	uint32_t name_hash[ALERT_NAME_KEEP]; /* 0: empty */
	uint64_t name_s[ALERT_NAME_KEEP];
	char sample[ALERT_NAMES_MAX][ALERT_NAME_BYTES]; /* the latest names, in a ring */
	uint32_t sampled;
};

/* One sandbox's detectors on one worker. All zero: nothing seen yet. */
struct alert_state {
	uint64_t first_ms;                    /* the first request's time, plus 1; 0: none yet */
	uint64_t last_alert_ms[ALERT__COUNT]; /* plus 1; 0: never */
	struct alert_window refusals;
	struct alert_window upload;
	struct alert_suffix suffixes[ALERT_SUFFIXES];
	/* new_host: hashes of the allowed hosts reached, open addressing; 0 is empty. */
	uint64_t hosts[ALERT_HOSTS];
	uint32_t host_count;
	/* request_spike: this minute's requests, and the average per minute before. */
	uint64_t minute_at; /* the minute's number, plus 1; 0: none yet */
	uint64_t minute_requests;
	uint64_t baseline_milli; /* requests per minute, times 1000 */
	uint32_t minutes_seen;
};

/* One decided request, as the detectors see it. */
struct alert_request {
	const char *host; /* as decided (normalised), <host_len> bytes */
	size_t host_len;
	const char *suffix; /* the host's registrable domain (refused_names); NULL: the host */
	size_t suffix_len;
	bool refused;
	enum reason reason; /* when refused */
};

/*
 * Feeds one decided request of the sandbox of <s> (<cfg>: its profile's) at
 * <now_ms> (a monotonic clock, ms) and <utc_min_of_day> (0..1439). The alerts
 * it raised go to <out> (room for ALERT__COUNT); their count.
 */
uint32_t alert_observe(struct alert_state *s, const struct alert_config *cfg,
		       const struct alert_request *r, uint64_t now_ms, uint32_t utc_min_of_day,
		       struct alert_event *out);

/*
 * Feeds <bytes> sent by the sandbox's agent (a request's, at its end) at
 * <now_ms>. 1 with the upload alert in *<out>, or 0.
 */
uint32_t alert_observe_upload(struct alert_state *s, const struct alert_config *cfg, uint64_t bytes,
			      uint64_t now_ms, struct alert_event *out);

#endif /* AN_CORE_ALERT_H */
