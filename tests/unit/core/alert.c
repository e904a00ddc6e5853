/*
 * core/alert.c: each detector at its threshold N-1 (no alert), N (one alert,
 * its evidence) and N+1 (none: the cooldown), its window sliding past old
 * observations, and what it must not count.
 */
#include "core/alert.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/unit.h"

#define T0_MS 1000000u /* a monotonic clock well past 0 */
#define NOON  720u     /* minutes of the UTC day */

static struct alert_config cfg;
static struct alert_state st;
static struct alert_event ev[ALERT__COUNT];

static void fresh(void)
{
	alert_config_defaults(&cfg);
	memset(&st, 0, sizeof(st));
	for (uint32_t d = 0; d < ALERT__COUNT; d++)
		cfg.detector[d].on = false;
}

/* One decision of <host>: refused for <why> (REASON_NONE: allowed); the alerts' count. */
static uint32_t see(const char *host, enum reason why, uint64_t now_ms)
{
	struct alert_request r = {
		.host = host, .host_len = strlen(host), .refused = why != REASON_NONE, .reason = why
	};
	const char *dot = strchr(host, '.');
	if (dot != NULL) {
		r.suffix = dot + 1;
		r.suffix_len = strlen(dot + 1);
	}
	return alert_observe(&st, &cfg, &r, now_ms, NOON, ev);
}

START_TEST(test_refusals_at_threshold)
{
	fresh();
	cfg.detector[ALERT_REFUSALS] =
	    (struct alert_detector_config){ .on = true, .threshold = 20, .window_s = 60 };
	for (uint32_t i = 0; i < 19; i++) /* N - 1 */
		ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, T0_MS + i * 100), 0);
	ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, T0_MS + 2000), 1); /* N */
	ck_assert_int_eq(ev[0].detector, ALERT_REFUSALS);
	ck_assert_uint_eq(ev[0].count, 20);
	ck_assert_uint_eq(ev[0].window_s, 60);
	ck_assert_str_eq(ev[0].host, "x.example");
	ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, T0_MS + 2100), 0); /* N + 1 */
	/* The cooldown over (300 s), the window holds only what came since: 1, then more. */
	uint64_t later = T0_MS + 400000;
	ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, later), 0);
	for (uint32_t i = 1; i < 19; i++)
		ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, later + i), 0);
	ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, later + 20), 1);
}
END_TEST

START_TEST(test_refusals_window_slides)
{
	fresh();
	cfg.detector[ALERT_REFUSALS] =
	    (struct alert_detector_config){ .on = true, .threshold = 20, .window_s = 60 };
	/* 19 at t, 19 more after the window passed: never 20 within 60 s. */
	for (uint32_t i = 0; i < 19; i++)
		ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, T0_MS), 0);
	for (uint32_t i = 0; i < 19; i++)
		ck_assert_uint_eq(see("x.example", REASON_HOST_NOT_ALLOWED, T0_MS + 61000), 0);
	/* Limits and outages are not the agent's doing. */
	for (uint32_t i = 0; i < 100; i++) {
		ck_assert_uint_eq(see("x.example", REASON_RATE_LIMITED, T0_MS + 61000), 0);
		ck_assert_uint_eq(see("x.example", REASON_UPSTREAM_UNREACHABLE, T0_MS + 61000), 0);
	}
	ck_assert_uint_eq(see("x.example", REASON_PRIVATE_ADDRESS, T0_MS + 61000), 1); /* 20th */
}
END_TEST

START_TEST(test_refused_names_at_threshold)
{
	char host[64];

	fresh();
	cfg.detector[ALERT_REFUSED_NAMES] =
	    (struct alert_detector_config){ .on = true, .threshold = 10, .window_s = 60 };
	for (uint32_t i = 0; i < 9; i++) { /* N - 1 distinct, each asked three times */
		snprintf(host, sizeof(host), "c%02u.exfil.example", i);
		for (int k = 0; k < 3; k++)
			ck_assert_uint_eq(see(host, REASON_HOST_NOT_ALLOWED, T0_MS + i), 0);
	}
	/* Names under other suffixes, more than the trackers, do not add to it. */
	for (uint32_t i = 0; i < 2 * ALERT_SUFFIXES; i++) {
		snprintf(host, sizeof(host), "a.other%u.example", i);
		ck_assert_uint_eq(see(host, REASON_HOST_NOT_ALLOWED, T0_MS + 10), 0);
	}
	/* Nor do names refused for another reason. */
	ck_assert_uint_eq(see("zz.exfil.example", REASON_PORT_NOT_ALLOWED, T0_MS + 11), 0);
	ck_assert_uint_eq(see("c09.exfil.example", REASON_HOST_NOT_ALLOWED, T0_MS + 12), 1); /* N */
	ck_assert_int_eq(ev[0].detector, ALERT_REFUSED_NAMES);
	ck_assert_uint_eq(ev[0].count, 10);
	ck_assert_str_eq(ev[0].suffix, "exfil.example");
	ck_assert_uint_eq(ev[0].name_count, ALERT_NAMES_MAX);
	ck_assert_str_eq(ev[0].names[0], "c09.exfil.example");
	ck_assert_str_eq(ev[0].names[1], "c08.exfil.example");
	ck_assert_uint_eq(see("c10.exfil.example", REASON_HOST_NOT_ALLOWED, T0_MS + 13), 0);
}
END_TEST

START_TEST(test_refused_names_window_slides)
{
	char host[64];

	fresh();
	cfg.detector[ALERT_REFUSED_NAMES] =
	    (struct alert_detector_config){ .on = true, .threshold = 10, .window_s = 60 };
	for (uint32_t i = 0; i < 9; i++) {
		snprintf(host, sizeof(host), "c%02u.exfil.example", i);
		ck_assert_uint_eq(see(host, REASON_HOST_NOT_ALLOWED, T0_MS), 0);
	}
	/* A minute later the nine are out of the window: the tenth name is the first. */
	ck_assert_uint_eq(see("c09.exfil.example", REASON_HOST_NOT_ALLOWED, T0_MS + 60000), 0);
	/* A threshold over ALERT_NAME_KEEP counts to ALERT_NAME_KEEP. */
	fresh();
	cfg.detector[ALERT_REFUSED_NAMES] =
	    (struct alert_detector_config){ .on = true, .threshold = 1000, .window_s = 60 };
	uint32_t alerts = 0;
	for (uint32_t i = 0; i < ALERT_NAME_KEEP; i++) {
		snprintf(host, sizeof(host), "d%02u.exfil.example", i);
		alerts += see(host, REASON_HOST_NOT_ALLOWED, T0_MS);
		ck_assert_uint_eq(alerts, i + 1 == ALERT_NAME_KEEP);
	}
}
END_TEST

/* A burst of encoded names trips both detectors' thresholds: one alert, the specific one. */
START_TEST(test_one_incident_one_alert)
{
	char host[64];
	uint32_t alerts = 0;

	alert_config_defaults(&cfg);
	memset(&st, 0, sizeof(st));
	for (uint32_t i = 0; i < 200; i++) {
		snprintf(host, sizeof(host), "%08x.exfil.example", i * 2654435761u);
		uint32_t n = see(host, REASON_HOST_NOT_ALLOWED, T0_MS + i * 10u);
		for (uint32_t k = 0; k < n; k++)
			ck_assert_int_eq(ev[k].detector, ALERT_REFUSED_NAMES);
		alerts += n;
	}
	ck_assert_uint_eq(alerts, 1);
}
END_TEST

START_TEST(test_new_host_after_warmup)
{
	fresh();
	cfg.detector[ALERT_NEW_HOST] =
	    (struct alert_detector_config){ .on = true, .warmup_s = 600 };
	ck_assert_uint_eq(see("a.example", REASON_NONE, T0_MS), 0);
	ck_assert_uint_eq(see("b.example", REASON_NONE, T0_MS + 599999), 0); /* learnt in warm-up */
	ck_assert_uint_eq(see("a.example", REASON_NONE, T0_MS + 600000), 0); /* known */
	ck_assert_uint_eq(see("c.example", REASON_NONE, T0_MS + 600000), 1); /* new, warm */
	ck_assert_int_eq(ev[0].detector, ALERT_NEW_HOST);
	ck_assert_str_eq(ev[0].host, "c.example");
	ck_assert_uint_eq(see("c.example", REASON_NONE, T0_MS + 600001), 0);
	ck_assert_uint_eq(see("d.example", REASON_NONE, T0_MS + 600002), 0); /* the cooldown */
	ck_assert_uint_eq(see("e.example", REASON_NONE, T0_MS + 600000 + 300000), 1);
	ck_assert_uint_eq(see("f.example", REASON_NOT_A_PROXY_REQUEST, T0_MS + 999999), 0);
}
END_TEST

START_TEST(test_new_host_table_full)
{
	char host[32];

	fresh();
	cfg.detector[ALERT_NEW_HOST] = (struct alert_detector_config){ .on = true, .warmup_s = 0 };
	cfg.cooldown_s = 1;
	uint32_t alerts = 0;
	for (uint32_t i = 0; i < ALERT_HOSTS_KEEP + 10; i++) {
		snprintf(host, sizeof(host), "h%u.example", i);
		alerts += see(host, REASON_NONE, T0_MS + i * 1000u); /* each past the cooldown */
	}
	ck_assert_uint_eq(alerts, ALERT_HOSTS_KEEP);
}
END_TEST

/* <n> requests within the minute beginning at <minute_ms>; the alerts. */
static uint32_t minute_of(uint64_t minute_ms, uint32_t n)
{
	uint32_t alerts = 0;
	for (uint32_t i = 0; i < n; i++)
		alerts += see("a.example", REASON_NONE, minute_ms + i % 59000u);
	return alerts;
}

START_TEST(test_spike_at_threshold)
{
	fresh();
	cfg.detector[ALERT_REQUEST_SPIKE] =
	    (struct alert_detector_config){ .on = true, .factor = 10, .threshold = 600 };
	uint64_t m0 = 60000u * 100u;
	for (uint32_t m = 0; m < ALERT_SPIKE_HISTORY; m++)
		ck_assert_uint_eq(minute_of(m0 + m * 60000u, 60), 0); /* a baseline of 60 */
	/* 10 x 60 = 600, the floor too: 599 requests tell nothing, the 600th does. */
	uint64_t spike = m0 + ALERT_SPIKE_HISTORY * 60000u;
	ck_assert_uint_eq(minute_of(spike, 599), 0);
	ck_assert_uint_eq(see("a.example", REASON_NONE, spike + 59000), 1);
	ck_assert_int_eq(ev[0].detector, ALERT_REQUEST_SPIKE);
	ck_assert_uint_eq(ev[0].count, 600);
	ck_assert_uint_eq(ev[0].baseline, 60);
	ck_assert_uint_eq(see("a.example", REASON_NONE, spike + 59001), 0);
	/* No history yet: no spike, however many. */
	fresh();
	cfg.detector[ALERT_REQUEST_SPIKE] =
	    (struct alert_detector_config){ .on = true, .factor = 10, .threshold = 600 };
	ck_assert_uint_eq(minute_of(m0, 5000), 0);
}
END_TEST

START_TEST(test_upload_at_threshold)
{
	fresh();
	cfg.detector[ALERT_UPLOAD] =
	    (struct alert_detector_config){ .on = true, .bytes = 1000, .window_s = 60 };
	ck_assert_uint_eq(alert_observe_upload(&st, &cfg, 999, T0_MS, ev), 0);
	ck_assert_uint_eq(alert_observe_upload(&st, &cfg, 1, T0_MS + 1, ev), 1);
	ck_assert_int_eq(ev[0].detector, ALERT_UPLOAD);
	ck_assert_uint_eq(ev[0].count, 1000);
	ck_assert_uint_eq(alert_observe_upload(&st, &cfg, 1, T0_MS + 2, ev), 0);
	fresh();
	cfg.detector[ALERT_UPLOAD] =
	    (struct alert_detector_config){ .on = true, .bytes = 1000, .window_s = 60 };
	ck_assert_uint_eq(alert_observe_upload(&st, &cfg, 999, T0_MS, ev), 0);
	ck_assert_uint_eq(alert_observe_upload(&st, &cfg, 999, T0_MS + 61000, ev), 0); /* slid */
}
END_TEST

START_TEST(test_quiet_hours)
{
	struct alert_request r = { .host = "a.example", .host_len = 9 };

	fresh();
	cfg.detector[ALERT_QUIET_HOURS] =
	    (struct alert_detector_config){ .on = true, .from_min = 22 * 60, .to_min = 6 * 60 };
	ck_assert_uint_eq(alert_observe(&st, &cfg, &r, T0_MS, 21 * 60 + 59, ev), 0);
	ck_assert_uint_eq(alert_observe(&st, &cfg, &r, T0_MS, 6 * 60, ev), 0);
	ck_assert_uint_eq(alert_observe(&st, &cfg, &r, T0_MS, 3 * 60, ev), 1); /* past midnight */
	ck_assert_int_eq(ev[0].detector, ALERT_QUIET_HOURS);
	cfg.detector[ALERT_QUIET_HOURS].from_min = 60;
	cfg.detector[ALERT_QUIET_HOURS].to_min = 120;
	memset(&st, 0, sizeof(st));
	ck_assert_uint_eq(alert_observe(&st, &cfg, &r, T0_MS, 59, ev), 0);
	ck_assert_uint_eq(alert_observe(&st, &cfg, &r, T0_MS, 120, ev), 0);
	ck_assert_uint_eq(alert_observe(&st, &cfg, &r, T0_MS, 60, ev), 1);
}
END_TEST

START_TEST(test_always_alerts)
{
	fresh();
	cfg.detector[ALERT_MISDIRECTED].on = true;
	cfg.detector[ALERT_CREDENTIAL_MISSING].on = true;
	cfg.detector[ALERT_MISDIRECTED].action = ALERT_ACTION_QUARANTINE;
	ck_assert_uint_eq(see("evil.example", REASON_PLACEHOLDER_MISDIRECTED, T0_MS), 1);
	ck_assert_int_eq(ev[0].detector, ALERT_MISDIRECTED);
	ck_assert_int_eq(ev[0].action, ALERT_ACTION_QUARANTINE);
	ck_assert_str_eq(ev[0].host, "evil.example");
	ck_assert_uint_eq(see("evil.example", REASON_PLACEHOLDER_MISDIRECTED, T0_MS + 1), 0);
	ck_assert_uint_eq(see("api.example", REASON_CREDENTIAL_MISSING, T0_MS + 2), 1);
	ck_assert_int_eq(ev[0].detector, ALERT_CREDENTIAL_MISSING);
	ck_assert_int_eq(ev[0].action, ALERT_ACTION_NONE);
	/* Off: nothing. */
	fresh();
	ck_assert_uint_eq(see("evil.example", REASON_PLACEHOLDER_MISDIRECTED, T0_MS), 0);
}
END_TEST

START_TEST(test_defaults_and_names)
{
	struct alert_config d;

	alert_config_defaults(&d);
	for (uint32_t i = 0; i < ALERT__COUNT; i++) {
		ck_assert_ptr_nonnull(alert_detector_name((enum alert_detector)i));
		ck_assert_int_eq(d.detector[i].on, i != ALERT_QUIET_HOURS);
	}
	ck_assert_str_eq(alert_detector_name(ALERT_REFUSED_NAMES), "refused_names");
	ck_assert_uint_eq(d.cooldown_s, ALERT_COOLDOWN_S);
	ck_assert(!alert_policy_refusal(REASON_RATE_LIMITED));
	ck_assert(alert_policy_refusal(REASON_HOST_NOT_ALLOWED));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core/alert");
	TCase *tc = tcase_create("alert");

	tcase_add_test(tc, test_refusals_at_threshold);
	tcase_add_test(tc, test_refusals_window_slides);
	tcase_add_test(tc, test_refused_names_at_threshold);
	tcase_add_test(tc, test_refused_names_window_slides);
	tcase_add_test(tc, test_one_incident_one_alert);
	tcase_add_test(tc, test_new_host_after_warmup);
	tcase_add_test(tc, test_new_host_table_full);
	tcase_add_test(tc, test_spike_at_threshold);
	tcase_add_test(tc, test_upload_at_threshold);
	tcase_add_test(tc, test_quiet_hours);
	tcase_add_test(tc, test_always_alerts);
	tcase_add_test(tc, test_defaults_and_names);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
