/*
 * The detectors at work on a worker (core/watch.h). A conn's decision and
 * its end feed its sandbox's state (w->watch[slot], zeroed when the slot
 * opened again since: its generation); each alert raised is written as an
 * "alert" audit record through the worker's own ring, counted, added to the
 * daemon's recent list and, for a quarantine, marks the sandbox.
 */
#include "core/watch.h"

#include <errno.h>
#include <libpsl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/conn_int.h"
#include "core/counter.h"
#include "core/engine.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/snapshot.h"
#include "core/webhook.h"

int watch_start(struct engine *e)
{
	e->alerts_recent = pool_calloc(1, sizeof(*e->alerts_recent));
	if (e->alerts_recent == NULL)
		return -ENOMEM;
	pthread_mutex_init(&e->alerts_recent->lock, NULL);
	if (e->cfg->alert_webhook_url == NULL)
		return 0;
	e->alerts_webhook = pool_calloc(1, sizeof(*e->alerts_webhook));
	const struct webhook_options o = { .url = e->cfg->alert_webhook_url,
					   .authorization = e->cfg->alert_webhook_authorization,
					   .timeout_ms = e->cfg->alert_webhook_timeout_ms,
					   .ca_file = e->cfg->alert_webhook_ca_file,
					   .dns_servers = e->cfg->dns_servers,
					   .term = e->term,
					   .term_arg = e->term_arg };
	int ret = e->alerts_webhook == NULL ? -ENOMEM : webhook_start(e->alerts_webhook, &o);
	if (ret != 0) {
		AN_FREE(&e->alerts_webhook);
		watch_stop(e);
	}
	return ret;
}

void watch_stop(struct engine *e)
{
	if (e->alerts_webhook != NULL) {
		webhook_stop(e->alerts_webhook);
		AN_FREE(&e->alerts_webhook);
	}
	if (e->alerts_recent == NULL)
		return;
	pthread_mutex_destroy(&e->alerts_recent->lock);
	AN_FREE(&e->alerts_recent);
}

/* The defaults, for a policy back-end without profile_alerts (a test's). */
static struct alert_config watch_defaults;
static pthread_once_t watch_defaults_once = PTHREAD_ONCE_INIT;

static void watch_defaults_fill(void)
{
	alert_config_defaults(&watch_defaults);
}

/* The profile's detectors for <c>'s request (its snapshot's), or the defaults. */
static const struct alert_config *config_of(const struct conn *c)
{
	const struct engine *e = c->w->e;

	if (e->ops->profile_alerts != NULL)
		return e->ops->profile_alerts(c->snap->policy,
					      c->snap->sandboxes[c->sandbox].profile);
	(void)pthread_once(&watch_defaults_once, watch_defaults_fill);
	return &watch_defaults;
}

/* <c>'s sandbox's state on its worker, fresh if the slot opened again since it was used. */
static struct alert_state *state_of(const struct conn *c)
{
	struct worker_watch_slot *slot = &c->w->watch[c->sandbox];
	uint32_t generation = c->w->e->sandboxes[c->sandbox]->generation;

	if (slot->generation != generation) {
		memset(&slot->state, 0, sizeof(slot->state));
		slot->generation = generation;
	}
	return &slot->state;
}

/* The minutes of the UTC day now (quiet_hours), from the coarse clock: no system call. */
static uint32_t utc_minute_of_day(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME_COARSE, &ts) != 0)
		return 0;
	return (uint32_t)((ts.tv_sec / 60) % (24 * 60));
}

/* One sentence on what <ev> saw, into <out>/<cap>. */
static void event_detail(const struct alert_event *ev, char *out, size_t cap)
{
	switch (ev->detector) {
	case ALERT_REFUSALS:
		snprintf(out, cap, "%llu requests refused by the policy within %u s",
			 (unsigned long long)ev->count, ev->window_s);
		break;
	case ALERT_REFUSED_NAMES:
		snprintf(out, cap, "%llu distinct names under %s refused within %u s",
			 (unsigned long long)ev->count, ev->suffix, ev->window_s);
		break;
	case ALERT_NEW_HOST:
		snprintf(out, cap, "first request to %s after the warm-up", ev->host);
		break;
	case ALERT_REQUEST_SPIKE:
		snprintf(out, cap, "%llu requests in a minute against a baseline of %llu",
			 (unsigned long long)ev->count, (unsigned long long)ev->baseline);
		break;
	case ALERT_UPLOAD:
		snprintf(out, cap, "%llu bytes sent by the agent within %u s",
			 (unsigned long long)ev->count, ev->window_s);
		break;
	case ALERT_QUIET_HOURS:
		snprintf(out, cap, "a request to %s inside the quiet hours", ev->host);
		break;
	case ALERT_MISDIRECTED:
		snprintf(out, cap, "a placeholder sent to %s, not its rule's host", ev->host);
		break;
	case ALERT_CREDENTIAL_MISSING:
		snprintf(out, cap, "an inject rule for %s has no secret", ev->host);
		break;
	default:
		(void)AN_NEVER(true);
		out[0] = '\0';
	}
}

/* The "alert" record of <ev> for sandbox <sb>, through the worker's ring. */
static void alert_record(struct worker *w, const struct engine_sandbox *sb,
			 const struct alert_event *ev)
{
	struct audit_record *rec = audit_claim(w->audit);
	if (rec == NULL)
		return; /* counted as dropped by the ring */
	memset(rec, 0, sizeof(*rec));
	rec->kind = AUDIT_ALERT;
	rec->id = audit_next_id(w->audit);
	rec->tier = TIER_DENY;
	rec->reason = REASON_NONE;
	audit_copy(rec->sandbox, sizeof(rec->sandbox), sb->id, strlen(sb->id));
	const char *detector = alert_detector_name(ev->detector);
	audit_copy(rec->rule, sizeof(rec->rule), detector, strlen(detector));
	const char *action = ev->action == ALERT_ACTION_QUARANTINE ? "quarantine" : "none";
	audit_copy(rec->method, sizeof(rec->method), action, strlen(action));
	rec->bytes_up = ev->count;
	rec->bytes_down = ev->baseline;
	rec->duration_ms = ev->window_s;
	audit_copy(rec->host, sizeof(rec->host), ev->host, strlen(ev->host));
	audit_copy(rec->addr, sizeof(rec->addr), ev->suffix, strlen(ev->suffix));
	size_t off = 0;
	for (uint32_t i = 0; i < ev->name_count; i++) {
		int n = snprintf(rec->path + off, sizeof(rec->path) - off, "%s\n", ev->names[i]);
		if (n < 0 || (size_t)n >= sizeof(rec->path) - off)
			break;
		off += (size_t)n;
	}
	event_detail(ev, rec->detail, sizeof(rec->detail));
	audit_commit(w->audit, rec);
}

/*
 * A sandbox went into quarantine: every worker (this one at its next turn,
 * the others woken through their eventfd) cuts what it has open.
 */
static void quarantine_announce(struct worker *w)
{
	struct engine *e = w->e;
	uint64_t one = 1;

	atomic_fetch_add_explicit(&e->quarantine_epoch, 1, memory_order_release);
	for (uint32_t i = 0; i < e->worker_count; i++) {
		if (i == w->index)
			continue;
		if (write(e->workers[i].wake_fd, &one, sizeof(one)) != sizeof(one))
			log_error("worker %u: waking worker %u for a quarantine: %s", w->index, i,
				  strerror(errno));
	}
}

void watch_quarantine_cut(struct worker *w)
{
	struct engine *e = w->e;
	uint32_t epoch = atomic_load_explicit(&e->quarantine_epoch, memory_order_acquire);

	if (epoch == w->quarantine_seen)
		return;
	w->quarantine_seen = epoch;
	for (struct conn *c = w->live, *next; c != NULL; c = next) {
		next = c->live_next;
		if (c->sandbox == WORKER_NO_SANDBOX || c->ingress ||
		    !atomic_load_explicit(&e->sandboxes[c->sandbox]->quarantined,
					  memory_order_relaxed))
			continue;
		if (c->state != ST_TUNNEL && c->state != ST_FORWARD && c->state != ST_TERM &&
		    c->state != ST_RESOLVE && c->state != ST_CONNECT)
			continue;
		log_info("conn %llx: sandbox %s is in quarantine: cut", (unsigned long long)c->id,
			 e->sandboxes[c->sandbox]->id);
		c->reason = (uint8_t)REASON_QUARANTINED;
		conn_abort(c); /* may free c, never another */
	}
}

/* Everything an alert leads to: the record, the counter, the recent list, a quarantine. */
static void alert_raise(struct worker *w, uint32_t slot, const struct alert_event *ev)
{
	struct engine *e = w->e;
	struct engine_sandbox *sb = e->sandboxes[slot];
	struct timespec now;

	alert_record(w, sb, ev);
	counter_add(&w->alerts.raised[ev->detector], 1);
	if (ev->action == ALERT_ACTION_QUARANTINE && !atomic_exchange(&sb->quarantined, true)) {
		log_warn("sandbox %s: quarantined by the %s alert; `agentsnet sandbox release %s` "
			 "lifts it",
			 sb->id, alert_detector_name(ev->detector), sb->id);
		quarantine_announce(w);
	}
	(void)clock_gettime(CLOCK_REALTIME, &now);
	struct watch_recent *recent = e->alerts_recent;
	pthread_mutex_lock(&recent->lock); /* rare: once per detector and cooldown */
	struct watch_alert *a = &recent->ring[recent->raised % WATCH_RECENT];
	a->seq = ++recent->raised;
	a->ts_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
	snprintf(a->sandbox, sizeof(a->sandbox), "%s", sb->id);
	a->registrant = sb->registrant;
	a->ev = *ev;
	struct watch_alert sent = *a;
	pthread_mutex_unlock(&recent->lock);
	if (e->alerts_webhook != NULL)
		webhook_enqueue(e->alerts_webhook, &sent); /* a copy: the thread posts it */
}

/* Whether <c> is a sandbox's own request the detectors see (not the gateway's public ones). */
static bool watched(const struct conn *c)
{
	return c->sandbox != WORKER_NO_SANDBOX && !c->ingress && c->snap != NULL &&
	       c->w->watch != NULL && c->w->e->alerts_recent != NULL;
}

void watch_decision(struct conn *c, bool allowed)
{
	struct alert_event events[ALERT__COUNT];
	char host[LIMITS_HOST_BYTES_MAX + 1];

	if (!watched(c))
		return;
	const struct alert_config *cfg = config_of(c);
	/* Names are told apart whatever their case: a1B2 and a1b2 are one name. */
	size_t len = c->host_len < sizeof(host) - 1 ? c->host_len : sizeof(host) - 1;
	for (size_t i = 0; i < len; i++)
		host[i] =
		    (char)(c->host[i] >= 'A' && c->host[i] <= 'Z' ? c->host[i] + 32 : c->host[i]);
	host[len] = '\0';
	struct alert_request r = {
		.host = host, .host_len = len, .refused = !allowed, .reason = (enum reason)c->reason
	};
	if (!allowed && cfg->detector[ALERT_REFUSED_NAMES].on) {
		/* The registrable domain (libpsl's built-in list, read-only): the name an
		 * attacker registers, under which every label is theirs to fill. */
		const char *suffix = psl_registrable_domain(psl_builtin(), host);
		if (suffix != NULL) {
			r.suffix = suffix;
			r.suffix_len = strlen(suffix);
		}
	}
	uint32_t minute = cfg->detector[ALERT_QUIET_HOURS].on ? utc_minute_of_day() : 0;
	uint32_t n = alert_observe(state_of(c), cfg, &r, c->w->now_ms, minute, events);
	for (uint32_t i = 0; i < n; i++)
		alert_raise(c->w, c->sandbox, &events[i]);
}

void watch_upload(struct conn *c, bool at_end)
{
	struct alert_event ev;

	/* The gateway's conns, not watched, restart their counts at each request. */
	if (!watched(c))
		return;
	uint64_t total = c->bytes_up + c->up.bytes;
	uint32_t kib = (uint32_t)(total >> 10);
	uint64_t bytes = (uint64_t)(uint32_t)(kib - c->up.watched_kib) << 10;
	c->up.watched_kib = kib;
	if (at_end)
		bytes += total & 1023u; /* the last part KiB, seen by no sweep */
	if (bytes == 0)
		return;
	if (alert_observe_upload(state_of(c), config_of(c), bytes, c->w->now_ms, &ev) == 1)
		alert_raise(c->w, c->sandbox, &ev);
}

void watch_uploads_sweep(struct worker *w)
{
	if (w->now_ms < w->uploads_swept_ms + WATCH_UPLOAD_SWEEP_MS)
		return;
	w->uploads_swept_ms = w->now_ms;
	for (struct conn *c = w->live; c != NULL; c = c->live_next)
		if (c->state != ST_CLOSING)
			watch_upload(c, false);
}

uint32_t watch_recent_copy(struct engine *e, uint32_t uid, struct watch_alert *out, uint32_t cap)
{
	struct watch_recent *recent = e->alerts_recent;
	uint32_t n = 0;

	if (recent == NULL)
		return 0;
	pthread_mutex_lock(&recent->lock);
	uint64_t first = recent->raised > WATCH_RECENT ? recent->raised - WATCH_RECENT : 0;
	for (uint64_t seq = first; seq < recent->raised && n < cap; seq++) {
		const struct watch_alert *a = &recent->ring[seq % WATCH_RECENT];
		if (uid == 0 || a->registrant == uid)
			out[n++] = *a;
	}
	pthread_mutex_unlock(&recent->lock);
	return n;
}

int watch_release(struct engine *e, const char *id)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&e->lock);
	for (uint32_t i = 0; i < e->sandbox_used; i++) {
		struct engine_sandbox *sb = e->sandboxes[i];
		if (sb->state != ENGINE_SANDBOX_ACTIVE || strcmp(sb->id, id) != 0)
			continue;
		ret = atomic_exchange(&sb->quarantined, false) ? 0 : -EALREADY;
		break;
	}
	pthread_mutex_unlock(&e->lock);
	if (ret == 0)
		log_info("sandbox %s: released from quarantine", id);
	return ret;
}

/* A bounded writer: what no longer fits is cut, and says so (failed). */
struct json_out {
	char *p;
	char *end; /* one before the buffer's end: room for the NUL */
	bool failed;
};

static void json_put(struct json_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void json_put(struct json_out *o, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(o->p, (size_t)(o->end - o->p) + 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n > o->end - o->p) {
		o->failed = true;
		o->p = o->end;
		return;
	}
	o->p += n;
}

/* <s> as a JSON string: ASCII as it is, quotes and backslashes escaped, the rest \u00XX;
 * null when empty, as the audit writes it. */
static void json_str(struct json_out *o, const char *s)
{
	if (*s == '\0') {
		json_put(o, "null");
		return;
	}
	json_put(o, "\"");
	for (; *s != '\0' && !o->failed; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			json_put(o, "\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			json_put(o, "\\u%04x", ch);
		else
			json_put(o, "%c", ch);
	}
	json_put(o, "\"");
}

int watch_alert_json(const struct watch_alert *a, char *out, size_t cap)
{
	struct json_out o = { .p = out, .end = out + cap - 1 };
	char detail[160];

	AN_ASSERT(cap > 0);
	event_detail(&a->ev, detail, sizeof(detail));
	json_put(&o, "{\"seq\":%llu,\"ts_ms\":%llu,\"sandbox\":", (unsigned long long)a->seq,
		 (unsigned long long)a->ts_ms);
	json_str(&o, a->sandbox);
	json_put(&o,
		 ",\"detector\":\"%s\",\"action\":\"%s\",\"count\":%llu,\"window_s\":%u,"
		 "\"baseline\":%llu,\"host\":",
		 alert_detector_name(a->ev.detector),
		 a->ev.action == ALERT_ACTION_QUARANTINE ? "quarantine" : "none",
		 (unsigned long long)a->ev.count, a->ev.window_s,
		 (unsigned long long)a->ev.baseline);
	json_str(&o, a->ev.host);
	json_put(&o, ",\"suffix\":");
	json_str(&o, a->ev.suffix);
	json_put(&o, ",\"names\":[");
	for (uint32_t i = 0; i < a->ev.name_count; i++) {
		if (i > 0)
			json_put(&o, ",");
		json_str(&o, a->ev.names[i]);
	}
	json_put(&o, "],\"detail\":");
	json_str(&o, detail);
	json_put(&o, "}");
	*o.p = '\0';
	return o.failed ? -ENOSPC : (int)(o.p - out);
}
