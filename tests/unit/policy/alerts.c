/*
 * policy/alerts.c, the `alerts:` sections: the defaults without any (the
 * built-in policy's too), a global section, a profile's merged over it key
 * by key (whichever comes first in the file), `alerts: false` at either
 * level, each bound at N-1, N and N+1 (and at its top, N and N+1), the
 * quiet hours, every refusal with its exact "name:line:col: message",
 * what profile_alerts returns for many profiles, the docs' examples, and
 * every allocation of a load with sections failing in turn.
 */
#include "../../../policy/alerts.c"

#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

/* A profile p without rules, on lines 2-4; GLOBAL(x) adds "alerts: {x}" on line 5. */
#define BASE           "version: 1\nprofiles:\n  p:\n    rules: []\n"
#define GLOBAL(fields) BASE "alerts: {" fields "}\n"
/* Profile p's alerts in flow style: PROFILE(x) is "    alerts: {x}" on line 5. */
#define PROFILE(fields) BASE "    alerts: {" fields "}\n"

/* The compiled config of profile <index> of pol, through the table the engine uses. */
static const struct alert_config *alerts(uint32_t index)
{
	ck_assert_ptr_nonnull(policy_verdict_ops.profile_alerts);
	const struct alert_config *a = policy_verdict_ops.profile_alerts(pol, index);

	ck_assert_ptr_nonnull(a);
	return a;
}

/* Asserts that detector <d> of <a> and <b> agree on every field. */
static void expect_detector_eq(const struct alert_config *a, const struct alert_config *b,
			       enum alert_detector d)
{
	const struct alert_detector_config *x = &a->detector[d];
	const struct alert_detector_config *y = &b->detector[d];

	ck_assert_msg(x->on == y->on, "%s.on", alert_detector_name(d));
	ck_assert_msg(x->action == y->action, "%s.action", alert_detector_name(d));
	ck_assert_uint_eq(x->threshold, y->threshold);
	ck_assert_uint_eq(x->window_s, y->window_s);
	ck_assert_uint_eq(x->factor, y->factor);
	ck_assert_uint_eq(x->warmup_s, y->warmup_s);
	ck_assert_uint_eq(x->bytes, y->bytes);
	ck_assert_uint_eq(x->from_min, y->from_min);
	ck_assert_uint_eq(x->to_min, y->to_min);
}

/* Asserts that <a> and <b> agree on every field (padding aside). */
static void expect_config_eq(const struct alert_config *a, const struct alert_config *b)
{
	ck_assert_uint_eq(a->cooldown_s, b->cooldown_s);
	for (uint32_t d = 0; d < ALERT__COUNT; d++)
		expect_detector_eq(a, b, (enum alert_detector)d);
}

/* The defaults, as core/alert.c gives them. */
static struct alert_config defaults(void)
{
	struct alert_config c;

	alert_config_defaults(&c);
	return c;
}

/* --- the defaults ----------------------------------------------------------------------- */

START_TEST(test_defaults)
{
	struct alert_config want = defaults();

	/* What core/alert.h promises: every detector on but quiet_hours, no action. */
	for (uint32_t d = 0; d < ALERT__COUNT; d++) {
		ck_assert(want.detector[d].on == (d != ALERT_QUIET_HOURS));
		ck_assert(want.detector[d].action == ALERT_ACTION_NONE);
	}
	expect_ok(BASE);
	expect_config_eq(alerts(0), &want);
	ck_assert_uint_eq(alerts(0)->cooldown_s, ALERT_COOLDOWN_S);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_REFUSALS].threshold, 20);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_UPLOAD].bytes, 256u << 20);
	/* An empty section, at either level, is no section. */
	expect_ok(GLOBAL(""));
	expect_config_eq(alerts(0), &want);
	expect_ok(PROFILE("refusals: {}"));
	expect_config_eq(alerts(0), &want);
	/* The built-in policy has no section: the defaults. */
	policy_free(pol);
	pol = NULL;
	ck_assert_int_eq(policy_load_or_default(NULL, &cfg, &pol, err, sizeof(err)), 0);
	ck_assert_ptr_null(strstr(policy_default_yaml(), "alerts"));
	expect_config_eq(alerts(0), &want);
}
END_TEST

/* --- the global section ------------------------------------------------------------------ */

/* The section of the task's example, every detector and key. */
#define FULL                                                                             \
	"alerts:\n"                                                                      \
	"  cooldown_s: 120\n"                                                            \
	"  refusals:      {on: true, threshold: 21, window_s: 61, action: quarantine}\n" \
	"  refused_names: {on: true, threshold: 11, window_s: 62}\n"                     \
	"  new_host:      {on: false, warmup_s: 601}\n"                                  \
	"  request_spike: {on: true, factor: 12, threshold: 601}\n"                      \
	"  upload:        {on: true, bytes: 268435457, window_s: 301, action: none}\n"   \
	"  quiet_hours:   {on: true, from: \"22:00\", to: \"06:30\"}\n"                  \
	"  misdirected:   {on: true, action: quarantine}\n"                              \
	"  credential_missing: {on: false}\n"

/* Asserts that <a> is what FULL says. */
static void expect_full(const struct alert_config *a)
{
	const struct alert_detector_config *d = a->detector;

	ck_assert_uint_eq(a->cooldown_s, 120);
	ck_assert(d[ALERT_REFUSALS].on);
	ck_assert_uint_eq(d[ALERT_REFUSALS].threshold, 21);
	ck_assert_uint_eq(d[ALERT_REFUSALS].window_s, 61);
	ck_assert(d[ALERT_REFUSALS].action == ALERT_ACTION_QUARANTINE);
	ck_assert(d[ALERT_REFUSED_NAMES].on);
	ck_assert_uint_eq(d[ALERT_REFUSED_NAMES].threshold, 11);
	ck_assert_uint_eq(d[ALERT_REFUSED_NAMES].window_s, 62);
	ck_assert(d[ALERT_REFUSED_NAMES].action == ALERT_ACTION_NONE);
	ck_assert(!d[ALERT_NEW_HOST].on);
	ck_assert_uint_eq(d[ALERT_NEW_HOST].warmup_s, 601);
	ck_assert(d[ALERT_REQUEST_SPIKE].on);
	ck_assert_uint_eq(d[ALERT_REQUEST_SPIKE].factor, 12);
	ck_assert_uint_eq(d[ALERT_REQUEST_SPIKE].threshold, 601);
	ck_assert(d[ALERT_UPLOAD].on);
	ck_assert_uint_eq(d[ALERT_UPLOAD].bytes, 268435457);
	ck_assert_uint_eq(d[ALERT_UPLOAD].window_s, 301);
	ck_assert(d[ALERT_UPLOAD].action == ALERT_ACTION_NONE);
	ck_assert(d[ALERT_QUIET_HOURS].on);
	ck_assert_uint_eq(d[ALERT_QUIET_HOURS].from_min, 22 * 60);
	ck_assert_uint_eq(d[ALERT_QUIET_HOURS].to_min, 6 * 60 + 30);
	ck_assert(d[ALERT_MISDIRECTED].on);
	ck_assert(d[ALERT_MISDIRECTED].action == ALERT_ACTION_QUARANTINE);
	ck_assert(!d[ALERT_CREDENTIAL_MISSING].on);
	ck_assert(d[ALERT_CREDENTIAL_MISSING].action == ALERT_ACTION_NONE);
}

START_TEST(test_global)
{
	expect_ok(BASE FULL);
	expect_full(alerts(0));
	/* Before the profiles, as well as after them. */
	expect_ok("version: 1\n" FULL "profiles:\n  p:\n    rules: []\n");
	expect_full(alerts(0));
	/* A key left out keeps its default; the others stay as given. */
	expect_ok(GLOBAL("upload: {window_s: 10}"));
	struct alert_config want = defaults();
	want.detector[ALERT_UPLOAD].window_s = 10;
	expect_config_eq(alerts(0), &want);
	/* Block style, and hours written without quotes. */
	expect_ok(BASE "alerts:\n  quiet_hours:\n    on: true\n    from: 23:59\n    to: 00:00\n");
	ck_assert(alerts(0)->detector[ALERT_QUIET_HOURS].on);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_QUIET_HOURS].from_min, 23 * 60 + 59);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_QUIET_HOURS].to_min, 0);
}
END_TEST

/* --- a profile's section ----------------------------------------------------------------- */

/* Profiles a (a section), b (none) and c (a section), and a global section. */
#define PROFILES                            \
	"profiles:\n"                       \
	"  a:\n    rules: []\n"             \
	"    alerts:\n"                     \
	"      refusals: {threshold: 50}\n" \
	"      quiet_hours: {on: false}\n"  \
	"      new_host: {on: true}\n"      \
	"  b:\n    rules: []\n"             \
	"  c:\n    rules: []\n"             \
	"    alerts: {cooldown_s: 7, upload: {bytes: 5}, quiet_hours: {from: \"06:00\"}}\n"
#define PROFILES_GLOBAL                                                    \
	"alerts:\n"                                                        \
	"  cooldown_s: 100\n"                                              \
	"  refusals: {threshold: 30, window_s: 120, action: quarantine}\n" \
	"  new_host: {on: false, warmup_s: 5}\n"                           \
	"  quiet_hours: {on: true, from: \"22:00\", to: \"05:00\"}\n"

/* Asserts the merge of PROFILES over PROFILES_GLOBAL over the defaults. */
static void expect_merged(void)
{
	struct alert_config global = defaults();
	global.cooldown_s = 100;
	global.detector[ALERT_REFUSALS].threshold = 30;
	global.detector[ALERT_REFUSALS].window_s = 120;
	global.detector[ALERT_REFUSALS].action = ALERT_ACTION_QUARANTINE;
	global.detector[ALERT_NEW_HOST].on = false;
	global.detector[ALERT_NEW_HOST].warmup_s = 5;
	global.detector[ALERT_QUIET_HOURS].on = true;
	global.detector[ALERT_QUIET_HOURS].from_min = 22 * 60;
	global.detector[ALERT_QUIET_HOURS].to_min = 5 * 60;

	struct alert_config a = global;
	a.detector[ALERT_REFUSALS].threshold = 50; /* window_s, action, on: the global's */
	a.detector[ALERT_QUIET_HOURS].on = false;  /* the hours stay */
	a.detector[ALERT_NEW_HOST].on = true;      /* warmup_s: the global's */
	struct alert_config c = global;
	c.cooldown_s = 7;
	c.detector[ALERT_UPLOAD].bytes = 5; /* window_s: the default */
	c.detector[ALERT_QUIET_HOURS].from_min = 6 * 60;

	ck_assert_uint_eq(policy_profile_count(pol), 3);
	expect_config_eq(alerts(0), &a);
	expect_config_eq(alerts(1), &global);
	expect_config_eq(alerts(2), &c);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_REFUSALS].window_s, 120);
	ck_assert_uint_eq(alerts(2)->detector[ALERT_UPLOAD].window_s, ALERT_UPLOAD_WINDOW_S);
	/* Borrowed from the snapshot, never copied; a profile without a section shares the global. */
	ck_assert_ptr_eq(alerts(0), alerts(0));
	ck_assert_ptr_ne(alerts(0), alerts(1));
	ck_assert_ptr_ne(alerts(2), alerts(1));
}

START_TEST(test_profile_merge)
{
	expect_ok("version: 1\n" PROFILES_GLOBAL PROFILES);
	expect_merged();
	/* The global section after the profiles: the same. */
	expect_ok("version: 1\n" PROFILES PROFILES_GLOBAL);
	expect_merged();
	/* Without a global section, a profile's keys go over the defaults. */
	expect_ok(PROFILE("refusals: {threshold: 50, on: false}, cooldown_s: 1"));
	struct alert_config want = defaults();
	want.cooldown_s = 1;
	want.detector[ALERT_REFUSALS].threshold = 50;
	want.detector[ALERT_REFUSALS].on = false;
	expect_config_eq(alerts(0), &want);
	/* A profile may turn quiet_hours on with the global hours. */
	expect_ok(BASE "    alerts: {quiet_hours: {on: true}}\n"
		       "alerts: {quiet_hours: {from: \"01:00\", to: \"02:00\"}}\n");
	ck_assert(alerts(0)->detector[ALERT_QUIET_HOURS].on);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_QUIET_HOURS].from_min, 60);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_QUIET_HOURS].to_min, 120);
}
END_TEST

/* --- alerts: false ----------------------------------------------------------------------- */

/* Asserts that <a> has every detector off and the defaults otherwise. */
static void expect_all_off(const struct alert_config *a)
{
	struct alert_config want = defaults();

	for (uint32_t d = 0; d < ALERT__COUNT; d++)
		want.detector[d].on = false;
	expect_config_eq(a, &want);
}

START_TEST(test_false)
{
	expect_ok(BASE "alerts: false\n");
	expect_all_off(alerts(0));
	/* In one profile: the other keeps the global section. */
	expect_ok("version: 1\nalerts: {refusals: {threshold: 3}}\nprofiles:\n"
		  "  a:\n    rules: []\n    alerts: false\n  b:\n    rules: []\n");
	struct alert_config off = defaults();
	for (uint32_t d = 0; d < ALERT__COUNT; d++)
		off.detector[d].on = false;
	off.detector[ALERT_REFUSALS].threshold = 3;
	expect_config_eq(alerts(0), &off);
	ck_assert(alerts(1)->detector[ALERT_REFUSALS].on);
	ck_assert_uint_eq(alerts(1)->detector[ALERT_REFUSALS].threshold, 3);
	/* Off globally, one detector on again in a profile, its other keys the defaults. */
	expect_ok(PROFILE("refusals: {on: true}") "alerts: false\n");
	struct alert_config want = defaults();
	for (uint32_t d = 0; d < ALERT__COUNT; d++)
		want.detector[d].on = d == ALERT_REFUSALS;
	expect_config_eq(alerts(0), &want);
	/* Nothing else stands for a section. */
	static const char *const bad[] = { "true", "\"false\"", "False", "no", "~", "[a]", "0" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *msg = "alerts must be a mapping (cooldown_s and detectors) or false "
				  "(every detector off)";
		expect_error_at_needle(textf(BASE "alerts: %s\n", bad[i]), bad[i], msg);
		expect_error_at_needle(textf(BASE "    alerts: %s\n", bad[i]), bad[i], msg);
	}
}
END_TEST

/* --- bounds ------------------------------------------------------------------------------ */

/* A key of a detector ("" for cooldown_s) and its bounds. */
struct bound {
	const char *detector;
	const char *key;
	uint64_t min;
	uint64_t max;
	size_t offset; /* of the value in struct alert_detector_config (or alert_config) */
	bool wide;     /* a uint64_t */
};

#define BOUND(det, key, min, max, field, wide)                                          \
	{                                                                               \
		det, key, min, max, offsetof(struct alert_detector_config, field), wide \
	}
static const struct bound bounds[] = {
	{ "", "cooldown_s", 1, 86400, offsetof(struct alert_config, cooldown_s), false },
	BOUND("refusals", "threshold", 1, 1000000, threshold, false),
	BOUND("refusals", "window_s", 1, 86400, window_s, false),
	BOUND("refused_names", "threshold", 1, 1000000, threshold, false),
	BOUND("refused_names", "window_s", 1, 86400, window_s, false),
	BOUND("new_host", "warmup_s", 0, 604800, warmup_s, false),
	BOUND("request_spike", "factor", 2, 1000, factor, false),
	BOUND("request_spike", "threshold", 1, 1000000, threshold, false),
	BOUND("upload", "bytes", 1, 1125899906842624ull, bytes, true),
	BOUND("upload", "window_s", 1, 86400, window_s, false),
};

/* The policy with <b>'s key set to <value>, on line 5 (global) or 6 (profile p's). */
static const char *bound_yaml(const struct bound *b, const char *value, bool profile)
{
	if (b->detector[0] == '\0')
		return textf(profile ? BASE "    alerts: {%s: %s}\n" : BASE "alerts: {%s: %s}\n",
			     b->key, value);
	return textf(profile ? BASE "    alerts: {%s: {%s: %s}}\n"
			     : BASE "alerts: {%s: {%s: %s}}\n",
		     b->detector, b->key, value);
}

/* The value <b> names in profile p's compiled config. */
static uint64_t bound_value(const struct bound *b)
{
	const struct alert_config *a = alerts(0);
	const char *base = (const char *)a;
	bool found = b->detector[0] == '\0';
	uint64_t v64 = 0;
	uint32_t v32 = 0;

	for (uint32_t d = 0; d < ALERT__COUNT && !found; d++) {
		if (strcmp(alert_detector_name((enum alert_detector)d), b->detector) == 0) {
			base = (const char *)&a->detector[d];
			found = true;
		}
	}
	ck_assert_msg(found, "no detector %s", b->detector);
	if (b->wide) {
		memcpy(&v64, base + b->offset, sizeof(v64));
		return v64;
	}
	memcpy(&v32, base + b->offset, sizeof(v32));
	return v32;
}

/* Loads <b>'s key at <v> (either level), expecting it to load with that value, or a refusal. */
static void expect_bound(const struct bound *b, uint64_t v, bool ok)
{
	char value[32], needle[40], what[64], msg[160];

	/* Local buffers: textf keeps only its last few texts, and the loads below use it. */
	snprintf(value, sizeof(value), "%llu", (unsigned long long)v);
	snprintf(needle, sizeof(needle), "%s}", value); /* the value, where the message is */
	if (b->detector[0] == '\0')
		snprintf(what, sizeof(what), "alerts.%s", b->key);
	else
		snprintf(what, sizeof(what), "alerts.%s.%s", b->detector, b->key);
	snprintf(msg, sizeof(msg), "%s must be %llu..%llu, got %s", what,
		 (unsigned long long)b->min, (unsigned long long)b->max, value);
	for (int profile = 0; profile <= 1; profile++) {
		const char *yaml = bound_yaml(b, value, profile);
		if (ok) {
			expect_ok(yaml);
			ck_assert_uint_eq(bound_value(b), v);
		} else {
			expect_error_at_needle(yaml, needle, msg);
		}
	}
}

START_TEST(test_bounds)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(bounds); i++) {
		const struct bound *b = &bounds[i];
		if (b->min > 0)
			expect_bound(b, b->min - 1, false);
		expect_bound(b, b->min, true);
		expect_bound(b, b->min + 1, true);
		expect_bound(b, b->max - 1, true);
		expect_bound(b, b->max, true);
		expect_bound(b, b->max + 1, false);
	}
	/* warmup_s from 0: no sign, no leading zeros, an integer. */
	expect_error_at_needle(GLOBAL("new_host: {warmup_s: -1}"), "-1",
			       "alerts.new_host.warmup_s must be 0..604800, got -1");
	expect_error_at_needle(GLOBAL("upload: {bytes: 010}"), "010",
			       "alerts.upload.bytes must not have leading zeros");
	expect_error_at_needle(GLOBAL("upload: {bytes: \"5\"}"), "\"5\"",
			       "alerts.upload.bytes must be an integer");
	expect_error_at_needle(GLOBAL("cooldown_s: 1.5"), "1.5",
			       "alerts.cooldown_s must be an integer");
	expect_error_at_needle(GLOBAL("cooldown_s: 99999999999999999999999"), "999",
			       "alerts.cooldown_s must be 1..86400, got 99999999999999999999999");
}
END_TEST

/* --- quiet hours ------------------------------------------------------------------------- */

START_TEST(test_quiet_hours)
{
	/* 00:00 and 23:59 are the ends of the day; across midnight or within it. */
	static const struct {
		const char *from, *to;
		uint16_t from_min, to_min;
	} good[] = {
		{ "00:00", "23:59", 0, 1439 },
		{ "23:59", "00:00", 1439, 0 },
		{ "09:05", "17:30", 545, 1050 },
		{ "00:00", "00:01", 0, 1 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(good); i++) {
		expect_ok(textf(GLOBAL("quiet_hours: {on: true, from: \"%s\", to: \"%s\"}"),
				good[i].from, good[i].to));
		const struct alert_detector_config *q = &alerts(0)->detector[ALERT_QUIET_HOURS];
		ck_assert(q->on);
		ck_assert_uint_eq(q->from_min, good[i].from_min);
		ck_assert_uint_eq(q->to_min, good[i].to_min);
	}
	static const char *const bad[] = { "24:00", "23:60", "7:00",  "07:0",  "07-00", "07:000",
					   "",      "ab:cd", "-1:00", "12:5x", "0700",  " 7:00" };
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *yaml =
		    textf(GLOBAL("quiet_hours: {from: \"%s\", to: \"01:00\"}"), bad[i]);
		expect_error_at_needle(
		    yaml, textf("\"%s\"", bad[i]),
		    textf("alerts.quiet_hours.from must be a UTC time \"HH:MM\" (00:00..23:59), "
			  "got \"%s\"",
			  bad[i]));
		yaml = textf(PROFILE("quiet_hours: {to: \"%s\"}"), bad[i]);
		expect_error_at_needle(
		    yaml, textf("\"%s\"", bad[i]),
		    textf("alerts.quiet_hours.to must be a UTC time \"HH:MM\" (00:00..23:59), "
			  "got \"%s\"",
			  bad[i]));
	}
	expect_error_at_needle(GLOBAL("quiet_hours: {from: 1320}"), "1320",
			       "alerts.quiet_hours.from must be a UTC time \"HH:MM\"");
	expect_error_at_needle(GLOBAL("quiet_hours: {from: ~}"), "~",
			       "alerts.quiet_hours.from must be a time \"HH:MM\"");
	/* Hours without on: true are kept, and harmless. */
	expect_ok(GLOBAL("quiet_hours: {from: \"01:00\", to: \"02:00\"}"));
	ck_assert(!alerts(0)->detector[ALERT_QUIET_HOURS].on);
	ck_assert_uint_eq(alerts(0)->detector[ALERT_QUIET_HOURS].to_min, 120);
}
END_TEST

START_TEST(test_quiet_hours_checks)
{
	static const char need[] = "alerts.quiet_hours: on: true needs both from and to (the "
				   "quiet hours, UTC \"HH:MM\")";
	/* on: true without hours, or with one, at either level: at the key on. */
	expect_error_at_needle(GLOBAL("quiet_hours: {on: true}"), "on: true", need);
	expect_error_at_needle(GLOBAL("quiet_hours: {on: true, from: \"01:00\"}"), "on: true",
			       need);
	expect_error_at_needle(GLOBAL("quiet_hours: {to: \"01:00\", on: true}"), "on: true", need);
	expect_error_at_needle(PROFILE("quiet_hours: {on: true}"), "on: true", need);
	/* A global on: true is checked whole, even when every profile has its own hours. */
	expect_error_at_needle("version: 1\nalerts: {quiet_hours: {on: true}}\nprofiles:\n  p:\n"
			       "    rules: []\n    alerts: {quiet_hours: {from: \"01:00\", to: "
			       "\"02:00\"}}\n",
			       "on: true", need);
	/* The profile's on with one hour of its own and one of the global's: fine. */
	expect_ok("version: 1\nalerts: {quiet_hours: {from: \"01:00\"}}\nprofiles:\n  p:\n"
		  "    rules: []\n    alerts: {quiet_hours: {on: true, to: \"02:00\"}}\n");
	/* The profile's on without the hours: at the profile's on, after a global section. */
	expect_error_at_needle("version: 1\nalerts: {quiet_hours: {from: \"01:00\"}}\nprofiles:\n"
			       "  p:\n    rules: []\n    alerts: {quiet_hours: {on: true}}\n",
			       "on: true}}\n", need);

	/* from == to: empty hours, at the key that made them so. */
	expect_error_at_needle(
	    GLOBAL("quiet_hours: {from: \"06:00\", to: \"06:00\"}"), "\"06:00\"}",
	    "alerts.quiet_hours.to must differ from from (both 06:00): the quiet hours would "
	    "be empty");
	expect_error_at_needle(GLOBAL("quiet_hours: {to: \"00:00\", from: \"00:00\", on: false}"),
			       "\"00:00\", from",
			       "alerts.quiet_hours.to must differ from from (both 00:00)");
	expect_error_at_needle("version: 1\nprofiles:\n  p:\n    rules: []\n"
			       "    alerts: {quiet_hours: {from: \"06:00\"}}\n"
			       "alerts: {quiet_hours: {from: \"22:00\", to: \"06:00\"}}\n",
			       "\"06:00\"",
			       "alerts.quiet_hours.from must differ from to (both 06:00)");
	expect_error_at_needle(
	    "version: 1\nprofiles:\n  p:\n    rules: []\n"
	    "    alerts: {quiet_hours: {to: \"22:00\"}}\n"
	    "alerts: {quiet_hours: {on: true, from: \"22:00\", to: \"06:00\"}}\n",
	    "\"22:00\"}}", "alerts.quiet_hours.to must differ from from (both 22:00)");
	/* Even off: the hours a profile ends up with are never empty. */
	expect_error_at_needle(PROFILE("quiet_hours: {from: \"13:14\", to: \"13:14\"}"),
			       "\"13:14\"}", "alerts.quiet_hours.to must differ from from");
}
END_TEST

/* --- refusals ----------------------------------------------------------------------------- */

START_TEST(test_keys)
{
	static const struct refusal cases[] = {
		/* An unknown detector, at either level. */
		{ GLOBAL("refusal: {on: false}"), "refusal",
		  "unknown key \"refusal\" in alerts (expected one of: cooldown_s, refusals, "
		  "refused_names, new_host, request_spike, upload, quiet_hours, misdirected, "
		  "credential_missing)" },
		{ PROFILE("exfil: {}"), "exfil",
		  "unknown key \"exfil\" in a profile's alerts (expected one of: cooldown_s, "
		  "refusals," },
		{ GLOBAL("Refusals: {}"), "Refusals", "unknown key \"Refusals\" in alerts" },
		/* A key the detector does not read. */
		{ GLOBAL("new_host: {threshold: 5}"), "threshold",
		  "unknown key \"threshold\" in alerts.new_host (expected one of: on, warmup_s, "
		  "action)" },
		{ GLOBAL("refusals: {enabled: true}"), "enabled",
		  "unknown key \"enabled\" in alerts.refusals (expected one of: on, threshold, "
		  "window_s, action)" },
		{ GLOBAL("request_spike: {window_s: 60}"), "window_s",
		  "unknown key \"window_s\" in alerts.request_spike (expected one of: on, factor, "
		  "threshold, action)" },
		{ GLOBAL("upload: {threshold: 1}"), "threshold",
		  "unknown key \"threshold\" in alerts.upload (expected one of: on, bytes, "
		  "window_s, action)" },
		{ GLOBAL("quiet_hours: {hours: 5}"), "hours: 5",
		  "unknown key \"hours\" in alerts.quiet_hours (expected one of: on, from, to, "
		  "action)" },
		{ PROFILE("misdirected: {threshold: 1}"), "threshold",
		  "unknown key \"threshold\" in alerts.misdirected (expected one of: on, action)" },
		{ GLOBAL("credential_missing: {off: true}"), "off",
		  "unknown key \"off\" in alerts.credential_missing (expected one of: on, action)" },
		/* Repeated keys. */
		{ GLOBAL("cooldown_s: 1, cooldown_s: 2"), "cooldown_s: 2",
		  "duplicate key \"cooldown_s\" in alerts" },
		{ GLOBAL("upload: {}, upload: {}"), "upload: {}}",
		  "duplicate key \"upload\" in alerts" },
		{ GLOBAL("upload: {bytes: 1, bytes: 2}"), "bytes: 2",
		  "duplicate key \"bytes\" in alerts.upload" },
		{ BASE "alerts: {}\nalerts: false\n", "alerts: false",
		  "duplicate key \"alerts\" in the policy" },
		/* Values of the wrong kind. */
		{ GLOBAL("refusals: true"), "true", "alerts.refusals must be a mapping" },
		{ GLOBAL("refusals: false"), "false", "alerts.refusals must be a mapping" },
		{ PROFILE("quiet_hours: [on]"), "[on]", "alerts.quiet_hours must be a mapping" },
		{ GLOBAL("refusals: {on: yes}"), "yes",
		  "alerts.refusals.on must be true or false" },
		{ GLOBAL("upload: {on: \"true\"}"), "\"true\"",
		  "alerts.upload.on must be true or false" },
		{ GLOBAL("misdirected: {on: ~}"), "~",
		  "alerts.misdirected.on must be true or false" },
		{ GLOBAL("refusals: {action: block}"), "block",
		  "alerts.refusals.action must be \"none\" or \"quarantine\"" },
		{ PROFILE("misdirected: {action: Quarantine}"), "Quarantine",
		  "alerts.misdirected.action must be \"none\" or \"quarantine\"" },
		{ GLOBAL("upload: {action: ~}"), "~",
		  "alerts.upload.action must be \"none\" or \"quarantine\"" },
		{ GLOBAL("refusals: {threshold: many}"), "many",
		  "alerts.refusals.threshold must be an integer" },
		{ GLOBAL("1: {}"), "1: {}", "unknown key \"1\" in alerts" },
		{ GLOBAL("[a]: {}"), "[a]", "keys in alerts must be strings" },
	};
	expect_refusals(cases, AN_ARRAY_LEN(cases));
	/* Every detector takes `on` and `action`, and {on: false} alone. */
	for (uint32_t d = 0; d < ALERT__COUNT; d++) {
		const char *name = alert_detector_name((enum alert_detector)d);
		expect_ok(textf(GLOBAL("%s: {on: false}"), name));
		ck_assert(!alerts(0)->detector[d].on);
		expect_ok(textf(PROFILE("%s: {action: quarantine}"), name));
		ck_assert(alerts(0)->detector[d].action == ALERT_ACTION_QUARANTINE);
		ck_assert(alerts(0)->detector[d].on == (d != ALERT_QUIET_HOURS));
		expect_ok(textf(GLOBAL("%s: {action: none}"), name));
		ck_assert(alerts(0)->detector[d].action == ALERT_ACTION_NONE);
	}
	expect_error(BASE "    alerts: {}\n    alerts: false\n",
		     "t.yaml:6:5: duplicate key \"alerts\" in a profile");
	/* The profile still needs its rules; its keys list alerts. */
	expect_error("version: 1\nprofiles:\n  p:\n    alerts: false\n",
		     "t.yaml:4:5: missing mandatory key \"rules\" in a profile");
	expect_error(BASE "    alert: {}\n",
		     "t.yaml:5:5: unknown key \"alert\" in a profile (expected one of: rules, "
		     "presets, limits, ingress, users, groups, alerts)");
}
END_TEST

/* Every message names the file, line and column: a file name other than t.yaml, too. */
START_TEST(test_message_names_file)
{
	expect_error_at(__LINE__, "/etc/agentsnet/policy.yaml",
			"version: 1\nprofiles:\n  p:\n    rules: []\n    alerts:\n"
			"      refusals:\n        window_s: 0\n",
			"/etc/agentsnet/policy.yaml:7:19: alerts.refusals.window_s must be "
			"1..86400, got 0");
	expect_error_at(__LINE__, "x.yaml", BASE "alerts:\n  quiet_hours:\n    on: true\n",
			"x.yaml:7:5: alerts.quiet_hours: on: true needs both from and to");
}
END_TEST

/* --- profile_alerts ----------------------------------------------------------------------- */

/* Many profiles: each its own config, where it stays while the profiles array grows. */
START_TEST(test_op_many_profiles)
{
	struct gen g;

	gen_open(&g);
	fprintf(g.f, "version: 1\nalerts: {refusals: {window_s: 7}}\nprofiles:\n");
	for (int i = 0; i < 300; i++) {
		fprintf(g.f, "  p%d:\n    rules: []\n", i);
		if (i % 3 != 2)
			fprintf(g.f, "    alerts: {refusals: {threshold: %d}}\n", i + 1);
	}
	expect_ok(gen_close(&g));
	free(g.buf);
	ck_assert_uint_eq(policy_profile_count(pol), 300);
	ck_assert_uint_eq(policy_verdict_ops.profile_count(pol), 300);
	for (uint32_t i = 0; i < 300; i++) {
		const struct alert_detector_config *r = &alerts(i)->detector[ALERT_REFUSALS];
		ck_assert_uint_eq(r->threshold, i % 3 != 2 ? i + 1 : ALERT_REFUSALS_THRESHOLD);
		ck_assert_uint_eq(r->window_s, 7);
		if (i % 3 == 2)
			ck_assert_ptr_eq(alerts(i), alerts(2));
	}
}
END_TEST

/* --- the docs ------------------------------------------------------------------------------ */

START_TEST(test_docs_section)
{
	char *yaml = docs_policy("### `alerts`");

	expect_ok(yaml);
	free(yaml);
	ck_assert_uint_eq(policy_profile_count(pol), 2);
	const struct alert_config *coder = alerts(0);
	const struct alert_config *batch = alerts(1);
	ck_assert_uint_eq(batch->cooldown_s, 300);
	ck_assert(batch->detector[ALERT_REFUSALS].action == ALERT_ACTION_QUARANTINE);
	ck_assert(batch->detector[ALERT_QUIET_HOURS].on);
	ck_assert_uint_eq(batch->detector[ALERT_QUIET_HOURS].from_min, 22 * 60);
	ck_assert_uint_eq(batch->detector[ALERT_QUIET_HOURS].to_min, 6 * 60);
	ck_assert(!batch->detector[ALERT_CREDENTIAL_MISSING].on);
	ck_assert(batch->detector[ALERT_MISDIRECTED].action == ALERT_ACTION_QUARANTINE);
	ck_assert_uint_eq(coder->detector[ALERT_REFUSALS].threshold, 50);
	ck_assert_uint_eq(coder->detector[ALERT_REFUSALS].window_s, 60);
	ck_assert(coder->detector[ALERT_REFUSALS].action == ALERT_ACTION_QUARANTINE);
	ck_assert(!coder->detector[ALERT_QUIET_HOURS].on);
	/* The documented values are the defaults, but for those the example changes. */
	struct alert_config want = defaults();
	want.detector[ALERT_REFUSALS].action = ALERT_ACTION_QUARANTINE;
	want.detector[ALERT_QUIET_HOURS] = batch->detector[ALERT_QUIET_HOURS];
	want.detector[ALERT_MISDIRECTED].action = ALERT_ACTION_QUARANTINE;
	want.detector[ALERT_CREDENTIAL_MISSING].on = false;
	expect_config_eq(batch, &want);
}
END_TEST

START_TEST(test_docs_example)
{
	char *yaml = docs_block(NULL);

	ck_assert_int_eq(setenv("EXAMPLE_API_KEY", "sk-example-docs-0123456789", 1), 0);
	expect_ok(yaml);
	pool_free(yaml);
	struct alert_config global = defaults();
	global.detector[ALERT_MISDIRECTED].action = ALERT_ACTION_QUARANTINE;
	global.detector[ALERT_QUIET_HOURS].on = true;
	global.detector[ALERT_QUIET_HOURS].from_min = 22 * 60;
	global.detector[ALERT_QUIET_HOURS].to_min = 6 * 60;
	struct alert_config def = global;
	def.detector[ALERT_REFUSALS].threshold = 50;
	expect_config_eq(alerts(0), &def);
	for (uint32_t d = 0; d < ALERT__COUNT; d++)
		global.detector[d].on = false;
	expect_config_eq(alerts(1), &global); /* bench: alerts: false, over the global section */
}
END_TEST

/* --- allocation failures ------------------------------------------------------------------ */

static void alloc_loaded(void)
{
	ck_assert_uint_eq(alerts(0)->detector[ALERT_REFUSALS].threshold, 50);
	ck_assert(!alerts(1)->detector[ALERT_UPLOAD].on);
}

/* Every allocation of a load with sections fails in turn: a clean -ENOMEM each time. */
START_TEST(test_allocation_failures)
{
	static const char yaml[] = "version: 1\nalerts: {upload: {on: false}}\nprofiles:\n"
				   "  a:\n    rules: []\n    alerts: {refusals: {threshold: 50}}\n"
				   "  b:\n    rules: []\n"
				   "  c:\n    rules: []\n    alerts: false\n";

	uint64_t total = count_allocations(yaml);
	ck_assert_uint_gt(total, 4);
	expect_allocation_failures(yaml, total, alloc_loaded, NULL);
}
END_TEST

int main(void)
{
	TCase *tc;
	Suite *s = policytest_suite("policy/alerts", "alerts", setup, &tc);

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_global);
	tcase_add_test(tc, test_profile_merge);
	tcase_add_test(tc, test_false);
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_quiet_hours);
	tcase_add_test(tc, test_quiet_hours_checks);
	tcase_add_test(tc, test_keys);
	tcase_add_test(tc, test_message_names_file);
	tcase_add_test(tc, test_op_many_profiles);
	tcase_add_test(tc, test_docs_section);
	tcase_add_test(tc, test_docs_example);
	tcase_add_test(tc, test_allocation_failures);
	return unit_run(s);
}
