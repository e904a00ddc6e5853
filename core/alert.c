/*
 * Anomaly detectors (core/alert.h): pure arithmetic over one sandbox's
 * struct alert_state, fed by the worker that serves the sandbox.
 */
#include "core/alert.h"

#include <string.h>
#include <xxhash.h>

#include "core/an.h"

static const char *const detector_names[ALERT__COUNT] = {
	[ALERT_REFUSALS] = "refusals",       [ALERT_REFUSED_NAMES] = "refused_names",
	[ALERT_NEW_HOST] = "new_host",       [ALERT_REQUEST_SPIKE] = "request_spike",
	[ALERT_UPLOAD] = "upload",           [ALERT_QUIET_HOURS] = "quiet_hours",
	[ALERT_MISDIRECTED] = "misdirected", [ALERT_CREDENTIAL_MISSING] = "credential_missing",
};

const char *alert_detector_name(enum alert_detector d)
{
	AN_ASSERT((unsigned)d < ALERT__COUNT);
	return detector_names[d];
}

void alert_config_defaults(struct alert_config *out)
{
	memset(out, 0, sizeof(*out));
	out->cooldown_s = ALERT_COOLDOWN_S;
	out->detector[ALERT_REFUSALS] =
	    (struct alert_detector_config){ .on = true,
					    .threshold = ALERT_REFUSALS_THRESHOLD,
					    .window_s = ALERT_REFUSALS_WINDOW_S };
	out->detector[ALERT_REFUSED_NAMES] = (struct alert_detector_config){
		.on = true,
		.threshold = ALERT_REFUSED_NAMES_THRESHOLD,
		.window_s = ALERT_REFUSED_NAMES_WINDOW_S,
	};
	out->detector[ALERT_NEW_HOST] =
	    (struct alert_detector_config){ .on = true, .warmup_s = ALERT_NEW_HOST_WARMUP_S };
	out->detector[ALERT_REQUEST_SPIKE] = (struct alert_detector_config){
		.on = true, .factor = ALERT_SPIKE_FACTOR, .threshold = ALERT_SPIKE_FLOOR
	};
	out->detector[ALERT_UPLOAD] = (struct alert_detector_config){
		.on = true, .bytes = ALERT_UPLOAD_BYTES, .window_s = ALERT_UPLOAD_WINDOW_S
	};
	out->detector[ALERT_QUIET_HOURS] = (struct alert_detector_config){ .on = false };
	out->detector[ALERT_MISDIRECTED] = (struct alert_detector_config){ .on = true };
	out->detector[ALERT_CREDENTIAL_MISSING] = (struct alert_detector_config){ .on = true };
}

bool alert_policy_refusal(enum reason why)
{
	switch (why) {
	case REASON_HOST_NOT_ALLOWED:
	case REASON_PORT_NOT_ALLOWED:
	case REASON_PRIVATE_ADDRESS:
	case REASON_METHOD_NOT_ALLOWED:
	case REASON_SNI_MISMATCH:
	case REASON_HOST_MISMATCH:
	case REASON_REDIRECT_DENIED:
	case REASON_UPGRADE_REFUSED:
	case REASON_PLACEHOLDER_MISDIRECTED:
	case REASON_CREDENTIAL_MISSING:
		return true;
	default:
		return false;
	}
}

/* The window's slot length in seconds: window_s / ALERT_SLOTS, at least 1. */
static uint64_t slot_len_s(uint32_t window_s)
{
	return window_s / ALERT_SLOTS > 0 ? window_s / ALERT_SLOTS : 1;
}

/* Adds <n> at <now_s> to <w> (slots of <window_s>); the sum over the window. */
static uint64_t window_add(struct alert_window *w, uint32_t window_s, uint64_t now_s, uint64_t n)
{
	uint64_t slot = now_s / slot_len_s(window_s) + 1; /* 0 is "none yet" */
	if (slot > w->slot_at) {
		uint64_t gap = slot - w->slot_at;
		for (uint64_t k = 1; k <= gap && k <= ALERT_SLOTS; k++)
			w->counts[(w->slot_at + k) % ALERT_SLOTS] = 0;
		w->slot_at = slot;
	}
	/* A clock never goes back (CLOCK_MONOTONIC); an older slot counts in the newest. */
	w->counts[w->slot_at % ALERT_SLOTS] += n;
	uint64_t sum = 0;
	for (uint32_t i = 0; i < ALERT_SLOTS; i++)
		sum += w->counts[i];
	return sum;
}

/* Whether detector <d> may alert at <now_ms> (its cooldown passed), marking it if so. */
static bool cooled(struct alert_state *s, const struct alert_config *cfg, enum alert_detector d,
		   uint64_t now_ms)
{
	uint64_t last = s->last_alert_ms[d];
	if (last != 0 && now_ms + 1 - last < (uint64_t)cfg->cooldown_s * 1000u)
		return false;
	s->last_alert_ms[d] = now_ms + 1;
	return true;
}

/* Copies <p>/<n> into <out> (ALERT_NAME_BYTES): its last bytes when longer (the suffix tells). */
static void name_copy(char *out, const char *p, size_t n)
{
	if (n > ALERT_NAME_BYTES - 1) {
		p += n - (ALERT_NAME_BYTES - 1);
		n = ALERT_NAME_BYTES - 1;
	}
	memcpy(out, p, n);
	out[n] = '\0';
}

static struct alert_event *event_new(struct alert_event *out, uint32_t *n, enum alert_detector d,
				     const struct alert_config *cfg)
{
	struct alert_event *ev = &out[(*n)++];
	memset(ev, 0, sizeof(*ev));
	ev->detector = d;
	ev->action = cfg->detector[d].action;
	return ev;
}

static uint64_t hash_of(const char *p, size_t n)
{
	uint64_t h = XXH3_64bits(p, n);
	return h != 0 ? h : 1; /* 0 marks an empty entry */
}

/*
 * The tracker of suffix <h>: its own, else an unused one, else the one with
 * the fewest names (the least recent of those): names under many suffixes,
 * one each, never push out a suffix that gathers many.
 */
static struct alert_suffix *suffix_tracker(struct alert_state *s, uint64_t h, uint64_t now_s,
					   uint32_t window_s)
{
	struct alert_suffix *pick = NULL;

	for (uint32_t i = 0; i < ALERT_SUFFIXES; i++)
		if (s->suffixes[i].suffix == h)
			return &s->suffixes[i];
	for (uint32_t i = 0; i < ALERT_SUFFIXES && pick == NULL; i++)
		if (s->suffixes[i].suffix == 0)
			pick = &s->suffixes[i];
	if (pick == NULL) {
		pick = &s->suffixes[0];
		for (uint32_t i = 1; i < ALERT_SUFFIXES; i++) {
			const struct alert_suffix *t = &s->suffixes[i];
			uint32_t live = now_s - t->last_s >= window_s ? 0 : t->live;
			uint32_t pick_live = now_s - pick->last_s >= window_s ? 0 : pick->live;
			if (live < pick_live || (live == pick_live && t->last_s < pick->last_s))
				pick = &s->suffixes[i];
		}
	}
	memset(pick, 0, sizeof(*pick));
	pick->suffix = h;
	return pick;
}

/* Notes refused name <r>->host under its suffix at <now_s>; the distinct names within <window_s>. */
static uint32_t refused_name_note(struct alert_suffix *t, const struct alert_request *r,
				  uint64_t now_s, uint32_t window_s)
{
	uint32_t name = (uint32_t)hash_of(r->host, r->host_len);
	name = name != 0 ? name : 1;
	uint32_t live = 0, spot = ALERT_NAME_KEEP, oldest = ALERT_NAME_KEEP;
	bool seen = false;
	for (uint32_t i = 0; i < ALERT_NAME_KEEP; i++) {
		if (t->name_hash[i] != 0 && now_s - t->name_s[i] >= window_s)
			t->name_hash[i] = 0; /* out of the window */
		if (t->name_hash[i] == name) {
			t->name_s[i] = now_s;
			seen = true;
		}
		if (t->name_hash[i] == 0 && spot == ALERT_NAME_KEEP)
			spot = i;
		if (t->name_hash[i] != 0 &&
		    (oldest == ALERT_NAME_KEEP || t->name_s[i] < t->name_s[oldest]))
			oldest = i;
		live += t->name_hash[i] != 0;
	}
	if (!seen) {
		if (spot == ALERT_NAME_KEEP) { /* full: the oldest name makes room */
			spot = oldest;
			live--;
		}
		t->name_hash[spot] = name;
		t->name_s[spot] = now_s;
		live++;
		name_copy(t->sample[t->sampled++ % ALERT_NAMES_MAX], r->host, r->host_len);
	}
	t->last_s = now_s;
	t->live = live;
	return live;
}

/* Whether allowed host <h> is new to the sandbox (and now remembered, while there is room). */
static bool host_new(struct alert_state *s, uint64_t h)
{
	uint32_t i = (uint32_t)(h % ALERT_HOSTS);
	for (uint32_t probe = 0; probe < ALERT_HOSTS; probe++, i = (i + 1) % ALERT_HOSTS) {
		if (s->hosts[i] == h)
			return false;
		if (s->hosts[i] == 0)
			break;
	}
	if (s->host_count >= ALERT_HOSTS_KEEP)
		return false; /* the table is full: new hosts are no longer told apart */
	s->hosts[i] = h;
	s->host_count++;
	return true;
}

/* Folds <n> minutes of <requests> each into the baseline, a moving average over ALERT_SPIKE_KEEP. */
static void baseline_fold(struct alert_state *s, uint64_t requests, uint64_t n)
{
	for (uint64_t k = 0; k < n && k < ALERT_SPIKE_KEEP; k++) {
		uint64_t keep =
		    s->minutes_seen < ALERT_SPIKE_KEEP ? s->minutes_seen + 1u : ALERT_SPIKE_KEEP;
		uint64_t sample = requests * 1000u;
		s->baseline_milli = sample >= s->baseline_milli
					? s->baseline_milli + (sample - s->baseline_milli) / keep
					: s->baseline_milli - (s->baseline_milli - sample) / keep;
		s->minutes_seen++;
		requests = 0; /* the minutes after the one counted were quiet */
	}
}

/* Counts a request in its minute; whether the minute is now a spike over the baseline. */
static bool spike_note(struct alert_state *s, const struct alert_detector_config *d, uint64_t now_s)
{
	uint64_t minute = now_s / 60u + 1u;
	if (s->minute_at == 0) {
		s->minute_at = minute;
	} else if (minute > s->minute_at) {
		baseline_fold(s, s->minute_requests, minute - s->minute_at);
		s->minute_at = minute;
		s->minute_requests = 0;
	}
	s->minute_requests++;
	uint64_t floor_milli = s->baseline_milli > 1000u ? s->baseline_milli : 1000u;
	return s->minutes_seen >= ALERT_SPIKE_HISTORY && s->minute_requests >= d->threshold &&
	       s->minute_requests * 1000u >= (uint64_t)d->factor * floor_milli;
}

static bool in_quiet_hours(const struct alert_detector_config *d, uint32_t min_of_day)
{
	if (d->from_min < d->to_min)
		return min_of_day >= d->from_min && min_of_day < d->to_min;
	return min_of_day >= d->from_min || min_of_day < d->to_min; /* across midnight */
}

uint32_t alert_observe(struct alert_state *s, const struct alert_config *cfg,
		       const struct alert_request *r, uint64_t now_ms, uint32_t utc_min_of_day,
		       struct alert_event *out)
{
	const struct alert_detector_config *det = cfg->detector;
	uint64_t now_s = now_ms / 1000u;
	uint32_t n = 0;

	if (s->first_ms == 0)
		s->first_ms = now_ms + 1;
	if (det[ALERT_REQUEST_SPIKE].on && spike_note(s, &det[ALERT_REQUEST_SPIKE], now_s) &&
	    cooled(s, cfg, ALERT_REQUEST_SPIKE, now_ms)) {
		struct alert_event *ev = event_new(out, &n, ALERT_REQUEST_SPIKE, cfg);
		ev->count = s->minute_requests;
		ev->baseline = s->baseline_milli / 1000u;
		ev->window_s = 60;
	}
	if (det[ALERT_QUIET_HOURS].on && in_quiet_hours(&det[ALERT_QUIET_HOURS], utc_min_of_day) &&
	    cooled(s, cfg, ALERT_QUIET_HOURS, now_ms)) {
		struct alert_event *ev = event_new(out, &n, ALERT_QUIET_HOURS, cfg);
		ev->count = 1;
		name_copy(ev->host, r->host, r->host_len);
	}
	if (!r->refused) {
		bool warm =
		    now_ms + 1 - s->first_ms >= (uint64_t)det[ALERT_NEW_HOST].warmup_s * 1000u;
		if (det[ALERT_NEW_HOST].on && host_new(s, hash_of(r->host, r->host_len)) && warm &&
		    cooled(s, cfg, ALERT_NEW_HOST, now_ms)) {
			struct alert_event *ev = event_new(out, &n, ALERT_NEW_HOST, cfg);
			ev->count = 1;
			name_copy(ev->host, r->host, r->host_len);
		}
		return n;
	}
	if (!alert_policy_refusal(r->reason))
		return n;
	/* refused_names first: when it fires, it speaks for the incident, and the broader
	 * refusals detector stays quiet for its cooldown (one incident, one alert). */
	const struct alert_detector_config *d = &det[ALERT_REFUSED_NAMES];
	if (d->on && r->reason == REASON_HOST_NOT_ALLOWED) {
		const char *suffix = r->suffix != NULL ? r->suffix : r->host;
		size_t suffix_len = r->suffix != NULL ? r->suffix_len : r->host_len;
		struct alert_suffix *t =
		    suffix_tracker(s, hash_of(suffix, suffix_len), now_s, d->window_s);
		uint32_t names = refused_name_note(t, r, now_s, d->window_s);
		uint32_t want = d->threshold < ALERT_NAME_KEEP ? d->threshold : ALERT_NAME_KEEP;
		if (names >= want && cooled(s, cfg, ALERT_REFUSED_NAMES, now_ms)) {
			struct alert_event *ev = event_new(out, &n, ALERT_REFUSED_NAMES, cfg);
			ev->count = names;
			ev->window_s = d->window_s;
			name_copy(ev->suffix, suffix, suffix_len);
			for (uint32_t i = 0; i < ALERT_NAMES_MAX && i < t->sampled; i++)
				memcpy(ev->names[ev->name_count++],
				       t->sample[(t->sampled - 1 - i) % ALERT_NAMES_MAX],
				       ALERT_NAME_BYTES);
			(void)cooled(s, cfg, ALERT_REFUSALS, now_ms);
		}
	}
	d = &det[ALERT_REFUSALS];
	uint64_t refusals = d->on ? window_add(&s->refusals, d->window_s, now_s, 1) : 0;
	if (d->on && refusals >= d->threshold && cooled(s, cfg, ALERT_REFUSALS, now_ms)) {
		struct alert_event *ev = event_new(out, &n, ALERT_REFUSALS, cfg);
		ev->count = refusals;
		ev->window_s = d->window_s;
		name_copy(ev->host, r->host, r->host_len);
	}
	enum alert_detector always = r->reason == REASON_PLACEHOLDER_MISDIRECTED ? ALERT_MISDIRECTED
				     : r->reason == REASON_CREDENTIAL_MISSING
					 ? ALERT_CREDENTIAL_MISSING
					 : ALERT__COUNT;
	if (always != ALERT__COUNT && det[always].on && cooled(s, cfg, always, now_ms)) {
		struct alert_event *ev = event_new(out, &n, always, cfg);
		ev->count = 1;
		name_copy(ev->host, r->host, r->host_len);
	}
	AN_ASSERT(n <= ALERT__COUNT);
	return n;
}

uint32_t alert_observe_upload(struct alert_state *s, const struct alert_config *cfg, uint64_t bytes,
			      uint64_t now_ms, struct alert_event *out)
{
	const struct alert_detector_config *d = &cfg->detector[ALERT_UPLOAD];
	if (!d->on || bytes == 0)
		return 0;
	uint64_t sum = window_add(&s->upload, d->window_s, now_ms / 1000u, bytes);
	if (sum < d->bytes || !cooled(s, cfg, ALERT_UPLOAD, now_ms))
		return 0;
	uint32_t n = 0;
	struct alert_event *ev = event_new(out, &n, ALERT_UPLOAD, cfg);
	ev->count = sum;
	ev->window_s = d->window_s;
	return n;
}
