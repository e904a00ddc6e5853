/*
 * The `alerts:` section: the settings of the anomaly detectors of
 * core/alert.h, globally (top level) and per profile (`profiles.<name>.alerts`),
 * compiled into one struct alert_config per profile, which the engine reads
 * through verdict_ops.profile_alerts.
 *
 * A section is a mapping of cooldown_s and of detectors by their
 * alert_detector_name(), each a mapping of `on`, `action` and the keys that
 * detector reads (detector_keys); or `false`, every detector off. Every key
 * is optional. A section is kept as written, each value with a bit saying it
 * was given, and nothing is merged while the document is read: the global
 * section may come after the profiles. Once all of it is read,
 * loader_alerts_finish compiles key by key: alert_config_defaults(), then the
 * global section's keys, then the profile's. So `refusals: {threshold: 50}`
 * in a profile keeps the global window_s, on and action, and `alerts: false`
 * at the top turns every detector off in every profile that does not turn
 * one on again.
 *
 * A profile without a section points at the policy's global config, so
 * 65536 profiles without one cost a pointer each; one with a section owns a
 * block, which stays put while the profiles array grows. Rejected: a
 * detector's section replacing the global one whole (overriding one
 * threshold would quietly reset the others to the defaults), and
 * `alerts: true` (it cannot say which hours quiet_hours means).
 *
 * Bounds are policy/policy.h's POLICY_ALERTS_*. The checks that need the
 * merged result (quiet_hours on needs both hours, and from must differ from
 * to) run on each compiled config, at the key of the section that made it
 * wrong; the global config is checked on its own as well, since every
 * profile without a section gets it.
 */
#include "policy/loader.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alert.h"
#include "core/an.h"
#include "core/pool.h"

static_assert(ALERT_REFUSALS_THRESHOLD <= POLICY_ALERTS_THRESHOLD_MAX &&
		  ALERT_REFUSED_NAMES_THRESHOLD <= POLICY_ALERTS_THRESHOLD_MAX &&
		  ALERT_SPIKE_FLOOR <= POLICY_ALERTS_THRESHOLD_MAX,
	      "the default thresholds are valid");
static_assert(ALERT_REFUSALS_WINDOW_S <= POLICY_ALERTS_SECONDS_MAX &&
		  ALERT_REFUSED_NAMES_WINDOW_S <= POLICY_ALERTS_SECONDS_MAX &&
		  ALERT_UPLOAD_WINDOW_S <= POLICY_ALERTS_SECONDS_MAX &&
		  ALERT_COOLDOWN_S <= POLICY_ALERTS_SECONDS_MAX,
	      "the default windows and cooldown are valid");
static_assert(ALERT_SPIKE_FACTOR >= POLICY_ALERTS_FACTOR_MIN &&
		  ALERT_SPIKE_FACTOR <= POLICY_ALERTS_FACTOR_MAX,
	      "the default factor is valid");
static_assert(ALERT_NEW_HOST_WARMUP_S <= POLICY_ALERTS_WARMUP_S_MAX &&
		  ALERT_UPLOAD_BYTES <= POLICY_ALERTS_BYTES_MAX,
	      "the default warm-up and upload ceiling are valid");

/* The keys of a detector's mapping, each a bit in policy_alerts.given. */
enum {
	AF_ON,
	AF_ACTION,
	AF_THRESHOLD,
	AF_WINDOW_S,
	AF_FACTOR,
	AF_WARMUP_S,
	AF_BYTES,
	AF_FROM,
	AF_TO,
	AF__COUNT
};
static const char *const field_names[] = {
	[AF_ON] = "on",
	[AF_ACTION] = "action",
	[AF_THRESHOLD] = "threshold",
	[AF_WINDOW_S] = "window_s",
	[AF_FACTOR] = "factor",
	[AF_WARMUP_S] = "warmup_s",
	[AF_BYTES] = "bytes",
	[AF_FROM] = "from",
	[AF_TO] = "to",
};
static_assert(AN_ARRAY_LEN(field_names) == AF__COUNT, "every detector key needs a name");
static_assert(AF__COUNT <= 16, "a bit per key fits policy_alerts.given");

/*
 * The keys each detector reads: `on` first and `action` last, the order
 * messages list them in. Checklist when adding a detector (core/alert.h):
 * its keys here, the table in docs/policy.md, and tests/unit/policy/alerts.c.
 */
#define DETECTOR_KEYS_MAX 4u
struct detector_keys {
	uint32_t count;
	uint8_t field[DETECTOR_KEYS_MAX];
};
static const struct detector_keys detector_keys[ALERT__COUNT] = {
	[ALERT_REFUSALS] = { 4, { AF_ON, AF_THRESHOLD, AF_WINDOW_S, AF_ACTION } },
	[ALERT_REFUSED_NAMES] = { 4, { AF_ON, AF_THRESHOLD, AF_WINDOW_S, AF_ACTION } },
	[ALERT_NEW_HOST] = { 3, { AF_ON, AF_WARMUP_S, AF_ACTION } },
	[ALERT_REQUEST_SPIKE] = { 4, { AF_ON, AF_FACTOR, AF_THRESHOLD, AF_ACTION } },
	[ALERT_UPLOAD] = { 4, { AF_ON, AF_BYTES, AF_WINDOW_S, AF_ACTION } },
	[ALERT_QUIET_HOURS] = { 4, { AF_ON, AF_FROM, AF_TO, AF_ACTION } },
	[ALERT_MISDIRECTED] = { 2, { AF_ON, AF_ACTION } },
	[ALERT_CREDENTIAL_MISSING] = { 2, { AF_ON, AF_ACTION } },
};
static_assert(ALERT__COUNT == 8, "a new detector needs its keys in detector_keys");

/* "alerts.<detector>" and "alerts.<detector>.<key>": the names messages give. */
#define SECTION_BYTES 48u
#define WHAT_BYTES    64u

/* --- reading -------------------------------------------------------------------------- */

/* quiet_hours' from and to: "HH:MM", 00:00..23:59 (UTC), as minutes of the day. */
static int read_hhmm(struct loader *ld, const char *what, uint16_t *out)
{
	char shown[SHOW_BYTES];

	int rc = loader_scalar(ld, what, "a time \"HH:MM\"");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	bool ok = len == 5 && s[2] == ':';
	for (size_t i = 0; i < 5 && ok; i++)
		ok = i == 2 || (s[i] >= '0' && s[i] <= '9');
	unsigned hours = ok ? (unsigned)(s[0] - '0') * 10u + (unsigned)(s[1] - '0') : 0;
	unsigned minutes = ok ? (unsigned)(s[3] - '0') * 10u + (unsigned)(s[4] - '0') : 0;
	if (!ok || hours > 23 || minutes > 59)
		return loader_fail(ld, ld->ev.start_mark,
				   "%s must be a UTC time \"HH:MM\" (00:00..23:59), got \"%s\"",
				   what, loader_show(s, len, shown));
	*out = (uint16_t)(hours * 60u + minutes);
	AN_ASSERT(*out < 24u * 60u);
	return 0;
}

/* Reads an integer <min>..<max> into the uint32_t *<out>. */
static int read_u32(struct loader *ld, const char *what, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v = 0;

	int rc = loader_uint(ld, what, min, max, &v);
	if (rc == 0)
		*out = (uint32_t)v;
	return rc;
}

/* The value of key <f> of detector <d> (<what> its name) into s->cfg. */
static int read_field(struct loader *ld, struct policy_alerts *s, enum alert_detector d, uint32_t f,
		      const char *what)
{
	struct alert_detector_config *c = &s->cfg.detector[d];
	bool quarantine = false;
	int rc = 0;

	AN_ASSERT((unsigned)d < ALERT__COUNT);
	AN_ASSERT(f < AF__COUNT);
	switch (f) {
	case AF_ON:
		return loader_bool(ld, what, &c->on);
	case AF_ACTION:
		rc = loader_choice(ld, what, "none", "quarantine", &quarantine);
		c->action = quarantine ? ALERT_ACTION_QUARANTINE : ALERT_ACTION_NONE;
		return rc;
	case AF_THRESHOLD:
		return read_u32(ld, what, 1, POLICY_ALERTS_THRESHOLD_MAX, &c->threshold);
	case AF_WINDOW_S:
		return read_u32(ld, what, 1, POLICY_ALERTS_SECONDS_MAX, &c->window_s);
	case AF_FACTOR:
		return read_u32(ld, what, POLICY_ALERTS_FACTOR_MIN, POLICY_ALERTS_FACTOR_MAX,
				&c->factor);
	case AF_WARMUP_S:
		return read_u32(ld, what, 0, POLICY_ALERTS_WARMUP_S_MAX, &c->warmup_s);
	case AF_BYTES:
		return loader_uint(ld, what, 1, POLICY_ALERTS_BYTES_MAX, &c->bytes);
	case AF_FROM:
		rc = read_hhmm(ld, what, &c->from_min);
		s->quiet_from = ld->ev.start_mark;
		return rc;
	case AF_TO:
		rc = read_hhmm(ld, what, &c->to_min);
		s->quiet_to = ld->ev.start_mark;
		return rc;
	default:
		(void)AN_NEVER(true);
		return -EINVAL;
	}
}

/* The mapping of detector <d> (its key just read) into <s>, each key given marked. */
static int read_detector(struct loader *ld, struct policy_alerts *s, enum alert_detector d)
{
	const struct detector_keys *dk = &detector_keys[d];
	const char *keys[DETECTOR_KEYS_MAX];
	char section[SECTION_BYTES], what[WHAT_BYTES];
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(dk->count >= 2 && dk->count <= DETECTOR_KEYS_MAX);
	snprintf(section, sizeof(section), "alerts.%s", alert_detector_name(d));
	for (uint32_t i = 0; i < dk->count; i++)
		keys[i] = field_names[dk->field[i]];
	const struct keyset ks = { section, keys, dk->count };
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, section);
	if (rc != 0)
		return rc;
	while ((rc = loader_key(ld, &ks, &seen, &key)) > 0) {
		uint32_t f = dk->field[key];
		snprintf(what, sizeof(what), "%s.%s", section, field_names[f]);
		if (d == ALERT_QUIET_HOURS && f == AF_ON)
			s->quiet_on = ld->key_mark;
		rc = read_field(ld, s, d, f, what);
		if (rc != 0)
			return rc;
		s->given[d] = (uint16_t)(s->given[d] | (1u << f));
	}
	AN_ASSERT(rc <= 0);
	return rc;
}

/* The keys of a section after its mapping's start: cooldown_s and the detectors. */
static int read_section(struct loader *ld, struct policy_alerts *s, const char *section)
{
	const char *keys[1 + ALERT__COUNT];
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(ld->ev.type == YAML_MAPPING_START_EVENT);
	keys[0] = "cooldown_s";
	for (uint32_t d = 0; d < ALERT__COUNT; d++)
		keys[1 + d] = alert_detector_name((enum alert_detector)d);
	const struct keyset ks = { section, keys, 1 + ALERT__COUNT };
	int rc = 0;
	while ((rc = loader_key(ld, &ks, &seen, &key)) > 0) {
		if (key == 0) {
			rc = read_u32(ld, "alerts.cooldown_s", 1, POLICY_ALERTS_SECONDS_MAX,
				      &s->cfg.cooldown_s);
			s->cooldown_given = rc == 0;
		} else {
			rc = read_detector(ld, s, (enum alert_detector)(key - 1));
		}
		if (rc != 0)
			return rc;
	}
	AN_ASSERT(rc <= 0);
	return rc;
}

/* `alerts: false`: every detector's `on` given, false. */
static void section_all_off(struct policy_alerts *s)
{
	for (uint32_t d = 0; d < ALERT__COUNT; d++) {
		s->cfg.detector[d].on = false;
		s->given[d] = (uint16_t)(s->given[d] | (1u << AF_ON));
	}
	AN_ASSERT(!s->cfg.detector[ALERT_REFUSALS].on);
}

int loader_alerts(struct loader *ld, struct policy_profile *pr)
{
	struct policy_alerts *s = &ld->p->alerts;

	if (pr != NULL) {
		AN_ASSERT(pr->alerts_own == NULL);
		s = pool_calloc(1, sizeof(*s));
		if (s == NULL)
			return loader_fail_oom(ld);
		pr->alerts_own = s;
	}
	int rc = loader_next(ld);
	if (rc != 0)
		return rc;
	if (ld->ev.type == YAML_MAPPING_START_EVENT)
		return read_section(ld, s, pr != NULL ? "a profile's alerts" : "alerts");
	bool is_false = ld->ev.type == YAML_SCALAR_EVENT &&
			ld->ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE && ev_len(ld) == 5 &&
			memcmp(ev_text(ld), "false", 5) == 0;
	if (!is_false)
		return loader_fail(ld, ld->ev.start_mark,
				   "alerts must be a mapping (cooldown_s and detectors) or false "
				   "(every detector off)");
	section_all_off(s);
	return 0;
}

/* --- compiling ------------------------------------------------------------------------ */

/* Key <f> of <from> over <to>. */
static void apply_field(struct alert_detector_config *to, const struct alert_detector_config *from,
			uint32_t f)
{
	AN_ASSERT(f < AF__COUNT);
	switch (f) {
	case AF_ON:
		to->on = from->on;
		break;
	case AF_ACTION:
		to->action = from->action;
		break;
	case AF_THRESHOLD:
		to->threshold = from->threshold;
		break;
	case AF_WINDOW_S:
		to->window_s = from->window_s;
		break;
	case AF_FACTOR:
		to->factor = from->factor;
		break;
	case AF_WARMUP_S:
		to->warmup_s = from->warmup_s;
		break;
	case AF_BYTES:
		to->bytes = from->bytes;
		break;
	case AF_FROM:
		to->from_min = from->from_min;
		break;
	case AF_TO:
		to->to_min = from->to_min;
		break;
	default:
		(void)AN_NEVER(true);
		break;
	}
}

/* The keys section <s> gave, over <c>. */
static void section_apply(struct alert_config *c, const struct policy_alerts *s)
{
	if (s->cooldown_given)
		c->cooldown_s = s->cfg.cooldown_s;
	for (uint32_t d = 0; d < ALERT__COUNT; d++) {
		AN_ASSERT(s->given[d] < (1u << AF__COUNT));
		for (uint32_t f = 0; f < AF__COUNT; f++) {
			if (s->given[d] & (1u << f))
				apply_field(&c->detector[d], &s->cfg.detector[d], f);
		}
	}
	AN_ASSERT(c->cooldown_s >= 1);
}

/*
 * The checks of compiled <c>, whose last section was <last> (the global
 * <global> itself, or a profile's over it): quiet_hours on needs both hours,
 * and from must differ from to. Only a key <last> gave can make a profile's
 * config wrong once the global one has passed, so the message is at it.
 */
static int compiled_check(struct loader *ld, const struct alert_config *c,
			  const struct policy_alerts *last, const struct policy_alerts *global)
{
	const struct alert_detector_config *q = &c->detector[ALERT_QUIET_HOURS];
	uint32_t given =
	    (uint32_t)global->given[ALERT_QUIET_HOURS] | last->given[ALERT_QUIET_HOURS];
	uint32_t last_given = last->given[ALERT_QUIET_HOURS];
	bool hours = (given & (1u << AF_FROM)) && (given & (1u << AF_TO));

	if (q->on && !hours)
		return loader_fail(
		    ld, (last_given & (1u << AF_ON)) ? last->quiet_on : global->quiet_on,
		    "alerts.quiet_hours: on: true needs both from and to (the quiet hours, "
		    "UTC \"HH:MM\")");
	if (hours && q->from_min == q->to_min) {
		bool to = (last_given & (1u << AF_TO)) || !(last_given & (1u << AF_FROM));
		const struct policy_alerts *at =
		    last_given & (1u << (to ? AF_TO : AF_FROM)) ? last : global;
		return loader_fail(
		    ld, to ? at->quiet_to : at->quiet_from,
		    "alerts.quiet_hours.%s must differ from %s (both %02u:%02u): the "
		    "quiet hours would be empty",
		    to ? "to" : "from", to ? "from" : "to", q->from_min / 60u, q->from_min % 60u);
	}
	AN_ASSERT(c->cooldown_s >= 1 && c->cooldown_s <= POLICY_ALERTS_SECONDS_MAX);
	return 0;
}

int loader_alerts_finish(struct loader *ld)
{
	struct policy *p = ld->p;
	struct alert_config c;

	AN_ASSERT(p->profile_count > 0);
	alert_config_defaults(&c);
	section_apply(&c, &p->alerts);
	int rc = compiled_check(ld, &c, &p->alerts, &p->alerts);
	if (rc != 0)
		return rc;
	p->alerts.cfg = c; /* given[] stays: the profiles' checks read it */
	for (uint32_t i = 0; i < p->profile_count; i++) {
		struct policy_profile *pr = &p->profiles[i];
		pr->alerts = &p->alerts.cfg;
		if (pr->alerts_own == NULL)
			continue;
		c = p->alerts.cfg;
		section_apply(&c, pr->alerts_own);
		rc = compiled_check(ld, &c, pr->alerts_own, &p->alerts);
		if (rc != 0)
			return rc;
		pr->alerts_own->cfg = c;
		pr->alerts = &pr->alerts_own->cfg;
	}
	AN_ASSERT(p->profiles[p->profile_count - 1].alerts != NULL);
	return 0;
}
