/*
 * The Prometheus listener and its exposition (core/metrics.h). The names
 * follow Prometheus's conventions: an agentsnet_ prefix, base units (seconds,
 * bytes), _total on counters, one HELP and TYPE line a family, labels for
 * what one quantity is split by (tier, reason, sandbox, direction).
 */
#include "core/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/engine.h"
#include "core/http1.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/reason.h"
#include "core/snapshot.h"
#include "core/textbuf.h"
#include "core/timer.h"
#include "core/webhook.h"
#include "core/worker.h"

#define METRICS_VERSION "0.1.0"
/* A scrape's request head at most, and how long its client may take to send it. */
#define METRICS_HEAD_BYTES_MAX   4096u
#define METRICS_CLIENT_TIMEOUT_S 5

static void family(struct textbuf *t, const char *name, const char *type, const char *help)
{
	textbuf_add(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value, escaped as the format asks (backslash, double quote, newline). */
static void label_value(struct textbuf *t, const char *v)
{
	for (; *v != '\0'; v++) {
		if (*v == '\\' || *v == '"')
			textbuf_add(t, "\\%c", *v);
		else if (*v == '\n')
			textbuf_add(t, "\\n");
		else
			textbuf_add(t, "%c", *v);
	}
}

static void counter(struct textbuf *t, const char *name, const char *help, uint64_t v)
{
	family(t, name, "counter", help);
	textbuf_add(t, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(struct textbuf *t, const char *name, const char *help, uint64_t v)
{
	family(t, name, "gauge", help);
	textbuf_add(t, "%s %llu\n", name, (unsigned long long)v);
}

/* The sum of the workers' <pick>ed histograms, printed in seconds as <name>'s series of <labels>. */
static void histogram_series(struct textbuf *t, const struct engine *e, const char *name,
			     const char *labels,
			     const struct latency_histogram *(*pick)(const struct worker *w))
{
	static const uint32_t bounds[LATENCY_BOUNDS] = LATENCY_BOUNDS_US;
	uint64_t buckets[LATENCY_BOUNDS + 1] = { 0 };
	uint64_t sum_us = 0;
	const char *comma = labels[0] != '\0' ? "," : "";

	for (uint32_t i = 0; i < e->worker_count; i++) {
		const struct latency_histogram *h = pick(&e->workers[i]);
		for (uint32_t b = 0; b <= LATENCY_BOUNDS; b++)
			buckets[b] += atomic_load_explicit(&h->buckets[b], memory_order_relaxed);
		sum_us += atomic_load_explicit(&h->sum_us, memory_order_relaxed);
	}
	uint64_t cumulative = 0;
	for (uint32_t b = 0; b < LATENCY_BOUNDS; b++) {
		cumulative += buckets[b];
		textbuf_add(t, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, comma,
			    bounds[b] / 1e6, (unsigned long long)cumulative);
	}
	cumulative += buckets[LATENCY_BOUNDS];
	const char *open = labels[0] != '\0' ? "{" : "";
	const char *close = labels[0] != '\0' ? "}" : "";
	textbuf_add(t, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, comma,
		    (unsigned long long)cumulative);
	textbuf_add(t, "%s_sum%s%s%s %.6f\n%s_count%s%s%s %llu\n", name, open, labels, close,
		    (double)sum_us / 1e6, name, open, labels, close,
		    (unsigned long long)cumulative);
}

/* A family of one histogram, unlabelled (histogram_series). */
static void histogram(struct textbuf *t, const struct engine *e, const char *name, const char *help,
		      const struct latency_histogram *(*pick)(const struct worker *w))
{
	family(t, name, "histogram", help);
	histogram_series(t, e, name, "", pick);
}

static const struct latency_histogram *decide_of(const struct worker *w)
{
	return &w->decisions.decide;
}

static const struct latency_histogram *connect_of(const struct worker *w)
{
	return &w->decisions.connect;
}

static const struct latency_histogram *tls_agent_of(const struct worker *w)
{
	return &w->decisions.tls_agent;
}

static const struct latency_histogram *tls_upstream_of(const struct worker *w)
{
	return &w->decisions.tls_upstream;
}

/* The requests allowed by tier and refused by reason, summed over the workers. */
static void decisions(struct textbuf *t, const struct engine *e)
{
	uint64_t allowed[TIER__COUNT] = { 0 };
	uint64_t refused[REASON__COUNT] = { 0 };

	for (uint32_t i = 0; i < e->worker_count; i++) {
		const struct worker_decision_counts *d = &e->workers[i].decisions;
		for (uint32_t k = 0; k < TIER__COUNT; k++)
			allowed[k] += atomic_load_explicit(&d->allowed[k], memory_order_relaxed);
		for (uint32_t k = 0; k < REASON__COUNT; k++)
			refused[k] += atomic_load_explicit(&d->refused[k], memory_order_relaxed);
	}
	family(t, "agentsnet_requests_allowed_total", "counter",
	       "Requests (and connections) allowed, by the tier that served them.");
	for (uint32_t k = TIER_DENY + 1; k < TIER__COUNT; k++)
		textbuf_add(t, "agentsnet_requests_allowed_total{tier=\"%s\"} %llu\n",
			    reason_tier_name((enum tier)k), (unsigned long long)allowed[k]);
	family(t, "agentsnet_requests_refused_total", "counter",
	       "Requests (and connections) refused, by reason code (docs/reasons.md).");
	for (uint32_t k = REASON_NONE + 1; k < REASON__COUNT; k++)
		textbuf_add(t, "agentsnet_requests_refused_total{reason=\"%s\"} %llu\n",
			    reason_code((enum reason)k), (unsigned long long)refused[k]);
}

/* The alerts raised, by detector, and the sandboxes in quarantine now (core/watch.h). */
static void alerts(struct textbuf *t, struct engine *e)
{
	uint64_t raised[ALERT__COUNT] = { 0 };
	uint64_t quarantined = 0;

	for (uint32_t i = 0; i < e->worker_count; i++)
		for (uint32_t k = 0; k < ALERT__COUNT; k++)
			raised[k] += atomic_load_explicit(&e->workers[i].alerts.raised[k],
							  memory_order_relaxed);
	family(t, "agentsnet_alerts_total", "counter",
	       "Alerts raised by the anomaly detectors, by detector (docs/alerts.md).");
	for (uint32_t k = 0; k < ALERT__COUNT; k++)
		textbuf_add(t, "agentsnet_alerts_total{detector=\"%s\"} %llu\n",
			    alert_detector_name((enum alert_detector)k),
			    (unsigned long long)raised[k]);
	pthread_mutex_lock(&e->lock);
	for (uint32_t i = 0; i < e->sandbox_used; i++)
		quarantined +=
		    e->sandboxes[i]->state == ENGINE_SANDBOX_ACTIVE &&
		    atomic_load_explicit(&e->sandboxes[i]->quarantined, memory_order_relaxed);
	pthread_mutex_unlock(&e->lock);
	family(t, "agentsnet_sandboxes_quarantined", "gauge",
	       "Sandboxes an alert put in quarantine, not yet released.");
	textbuf_add(t, "agentsnet_sandboxes_quarantined %llu\n", (unsigned long long)quarantined);
	const struct webhook *wh = e->alerts_webhook;
	if (wh == NULL)
		return;
	family(t, "agentsnet_alert_webhook_total", "counter",
	       "Alerts the webhook delivered (2xx), failed (refused or out of tries) or dropped "
	       "(queue full, daemon stopping).");
	textbuf_add(t, "agentsnet_alert_webhook_total{result=\"delivered\"} %llu\n",
		    (unsigned long long)atomic_load(&wh->delivered));
	textbuf_add(t, "agentsnet_alert_webhook_total{result=\"failed\"} %llu\n",
		    (unsigned long long)atomic_load(&wh->failed));
	textbuf_add(t, "agentsnet_alert_webhook_total{result=\"dropped\"} %llu\n",
		    (unsigned long long)atomic_load(&wh->dropped));
	counter(
	    t, "agentsnet_alert_webhook_retries_total",
	    "Tries of an alert after its first (the receiver failed or answered 408, 429, 5xx).",
	    atomic_load(&wh->retried));
}

/* The per-sandbox series' gathering: every active sandbox's figures and id, then sorted. */
struct sandbox_row {
	struct engine_sandbox_view v; /* v.sb cleared: not to be touched outside the lock */
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
};

struct sandbox_rows {
	struct sandbox_row *row;
	uint32_t n;
	uint32_t cap;
	bool failed;
};

static void sandbox_gather(void *arg, const struct engine_sandbox_view *v)
{
	struct sandbox_rows *rows = arg;

	if (rows->n == rows->cap) {
		rows->failed = true; /* the table grew past the room counted: the next scrape */
		return;
	}
	struct sandbox_row *r = &rows->row[rows->n++];
	r->v = *v;
	r->v.sb = NULL;
	snprintf(r->id, sizeof(r->id), "%s", v->sb->id);
}

/* Busiest first; ties by id, so that the same figures always name the same sandboxes. */
static int by_requests(const void *a, const void *b)
{
	const struct sandbox_row *x = a, *y = b;

	if (x->v.requests != y->v.requests)
		return x->v.requests < y->v.requests ? 1 : -1;
	return strcmp(x->id, y->id);
}

static void sandbox_series(struct textbuf *t, const char *id, const char *name, const char *field,
			   uint64_t value)
{
	textbuf_add(t, "%s{sandbox=\"", name);
	label_value(t, id);
	textbuf_add(t, "\"%s} %llu\n", field, (unsigned long long)value);
}

/* The figures of the series below, each a field of a view. */
static const struct {
	const char *name, *type, *help, *field;
	size_t offset;
} sandbox_figures[] = {
	{ "agentsnet_sandbox_requests_total", "counter",
	  "Decisions for the sandbox, allowed or refused, since its slot opened.", "",
	  offsetof(struct engine_sandbox_view, requests) },
	{ "agentsnet_sandbox_refusals_total", "counter",
	  "Requests of the sandbox refused, since its slot opened.", "",
	  offsetof(struct engine_sandbox_view, refusals) },
	{ "agentsnet_sandbox_bytes_total", "counter",
	  "Bytes the sandbox's closed connections delivered, by direction (up: from the agent).",
	  ",direction=\"up\"", offsetof(struct engine_sandbox_view, bytes_up) },
	{ "agentsnet_sandbox_bytes_total", NULL, NULL, ",direction=\"down\"",
	  offsetof(struct engine_sandbox_view, bytes_down) },
};

static uint64_t figure_of(const struct engine_sandbox_view *v, size_t offset)
{
	uint64_t value;

	memcpy(&value, (const char *)v + offset, sizeof(value));
	return value;
}

/*
 * The busiest e->cfg->metrics_sandboxes sandboxes by requests, series of their
 * own each, and the rest summed under METRICS_OTHER_SANDBOXES.
 */
static void sandboxes(struct textbuf *t, struct engine *e)
{
	struct sandbox_rows rows = { 0 };

	pthread_mutex_lock(&e->lock);
	rows.cap = e->sandbox_active + 16; /* room for a few added before the walk */
	pthread_mutex_unlock(&e->lock);
	rows.row = pool_calloc(rows.cap, sizeof(*rows.row));
	if (rows.row == NULL) {
		t->failed = true;
		return;
	}
	engine_sandbox_stats(e, &rows, sandbox_gather);
	qsort(rows.row, rows.n, sizeof(*rows.row), by_requests);
	uint32_t named = rows.n < e->cfg->metrics_sandboxes ? rows.n : e->cfg->metrics_sandboxes;
	struct engine_sandbox_view other = { 0 };
	for (uint32_t i = named; i < rows.n; i++) {
		other.conns += rows.row[i].v.conns;
		other.requests += rows.row[i].v.requests;
		other.refusals += rows.row[i].v.refusals;
		other.bytes_up += rows.row[i].v.bytes_up;
		other.bytes_down += rows.row[i].v.bytes_down;
	}
	for (size_t s = 0; s < AN_ARRAY_LEN(sandbox_figures); s++) {
		if (sandbox_figures[s].type != NULL)
			family(t, sandbox_figures[s].name, sandbox_figures[s].type,
			       sandbox_figures[s].help);
		for (uint32_t i = 0; i < named; i++)
			sandbox_series(t, rows.row[i].id, sandbox_figures[s].name,
				       sandbox_figures[s].field,
				       figure_of(&rows.row[i].v, sandbox_figures[s].offset));
		if (named < rows.n)
			sandbox_series(t, METRICS_OTHER_SANDBOXES, sandbox_figures[s].name,
				       sandbox_figures[s].field,
				       figure_of(&other, sandbox_figures[s].offset));
	}
	family(t, "agentsnet_sandbox_connections", "gauge", "The sandbox's connections open now.");
	for (uint32_t i = 0; i < named; i++)
		sandbox_series(t, rows.row[i].id, "agentsnet_sandbox_connections", "",
			       rows.row[i].v.conns);
	if (named < rows.n)
		sandbox_series(t, METRICS_OTHER_SANDBOXES, "agentsnet_sandbox_connections", "",
			       other.conns);
	t->failed |= rows.failed;
	pool_free(rows.row);
}

char *metrics_render(struct engine *e, size_t *len)
{
	struct textbuf t = { 0 };
	struct worker_counters sum = { 0 };

	AN_ASSERT(e->workers != NULL);
	for (uint32_t i = 0; i < e->worker_count; i++)
		worker_counters_add(&e->workers[i], &sum);
	pthread_mutex_lock(&e->lock);
	uint64_t generation = atomic_load_explicit(&e->current, memory_order_acquire)->generation;
	uint64_t reloads = e->reloads;
	uint32_t active = e->sandbox_active;
	pthread_mutex_unlock(&e->lock);

	family(&t, "agentsnet_build_info", "gauge", "The daemon's version, always 1.");
	textbuf_add(&t, "agentsnet_build_info{version=\"%s\"} 1\n", METRICS_VERSION);
	gauge(&t, "agentsnet_workers", "Worker threads.", e->worker_count);
	gauge(&t, "agentsnet_sandboxes", "Sandboxes served.", active);
	gauge(&t, "agentsnet_connections", "Agent and client connections open now.",
	      sum.conns_open);
	counter(&t, "agentsnet_connections_accepted_total", "Connections accepted.", sum.accepted);
	counter(&t, "agentsnet_connections_overloaded_total",
		"Connections answered 503 at accept: the worker's connections were all in use.",
		sum.refused_overload);
	counter(&t, "agentsnet_requests_total", "Requests decided, allowed or refused.",
		sum.requests);
	decisions(&t, e);
	alerts(&t, e);
	family(&t, "agentsnet_relays_total", "counter",
	       "CONNECT tunnels relayed, by relay (splice: zero-copy; copy: through buffers).");
	textbuf_add(&t, "agentsnet_relays_total{relay=\"splice\"} %llu\n",
		    (unsigned long long)sum.splice_relays);
	textbuf_add(&t, "agentsnet_relays_total{relay=\"copy\"} %llu\n",
		    (unsigned long long)sum.copy_relays);
	counter(&t, "agentsnet_upstreams_reused_total",
		"Inject-tier requests sent on a kept upstream connection.", sum.upstreams_reused);
	counter(&t, "agentsnet_leaf_cache_hits_total",
		"TLS handshakes with an agent that found their leaf certificate cached.",
		sum.leaf_hits);
	counter(&t, "agentsnet_leaf_cache_misses_total",
		"TLS handshakes with an agent that found no leaf certificate cached.",
		sum.leaf_misses);
	counter(&t, "agentsnet_leaves_minted_total", "Leaf certificates signed.", sum.leaf_mints);
	counter(&t, "agentsnet_placeholder_misdirected_total",
		"Requests refused for carrying a placeholder to another host than its rule's.",
		sum.misdirected);
	histogram(&t, e, "agentsnet_decision_duration_seconds",
		  "How long the policy took to decide a request.", decide_of);
	histogram(&t, e, "agentsnet_upstream_connect_duration_seconds",
		  "How long an upstream's TCP connect took, to its completion.", connect_of);
	family(&t, "agentsnet_tls_handshake_duration_seconds", "histogram",
	       "How long the TLS handshakes the daemon completed took: side agent, with an agent "
	       "(fake and inject tiers, from the CONNECT's 200); side upstream, with an inject "
	       "tier's upstream (from the ClientHello).");
	histogram_series(&t, e, "agentsnet_tls_handshake_duration_seconds", "side=\"agent\"",
			 tls_agent_of);
	histogram_series(&t, e, "agentsnet_tls_handshake_duration_seconds", "side=\"upstream\"",
			 tls_upstream_of);
	counter(&t, "agentsnet_audit_records_written_total", "Audit records written.",
		e->audit != NULL ? audit_written(e->audit) : 0);
	counter(&t, "agentsnet_audit_records_dropped_total",
		"Audit records dropped: a worker's ring was full.",
		e->audit != NULL ? audit_dropped(e->audit) : 0);
	counter(&t, "agentsnet_audit_records_lost_total",
		"Audit records lost: the audit file could not be written.",
		e->audit != NULL ? audit_lost(e->audit) : 0);
	gauge(&t, "agentsnet_audit_failing", "1 while the audit file cannot be written.",
	      e->audit != NULL && audit_failing(e->audit) ? 1 : 0);
	gauge(&t, "agentsnet_policy_generation",
	      "The policy's generation: 1 at start, one more "
	      "a reload.",
	      generation);
	family(&t, "agentsnet_policy_reloads_total", "counter", "Policy reloads, by result.");
	textbuf_add(&t, "agentsnet_policy_reloads_total{result=\"applied\"} %llu\n",
		    (unsigned long long)reloads);
	textbuf_add(&t, "agentsnet_policy_reloads_total{result=\"refused\"} %llu\n",
		    (unsigned long long)atomic_load(&e->reloads_refused));
	sandboxes(&t, e);
	if (t.failed) {
		textbuf_free(&t);
		return NULL;
	}
	*len = t.len;
	return t.p;
}

/* ---- the listener ------------------------------------------------------ */

static void send_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

static void answer_status(int fd, const char *status, const char *extra)
{
	struct textbuf t = { 0 };

	textbuf_add(&t,
		    "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\n%sContent-Length: "
		    "%zu\r\nConnection: close\r\n\r\n%s\n",
		    status, extra, strlen(status) + 1, status);
	if (!t.failed)
		send_all(fd, t.p, t.len);
	textbuf_free(&t);
}

/* One scrape on <fd>: GET (or HEAD) /metrics; anything else is answered, then closed. */
static void serve_one(struct engine *e, int fd)
{
	char head[METRICS_HEAD_BYTES_MAX + 1];
	struct timeval tv = { .tv_sec = METRICS_CLIENT_TIMEOUT_S };
	struct http1_request req;
	enum reason why = REASON_BAD_REQUEST;
	size_t fill = 0;
	ssize_t parsed = -EAGAIN;

	/* The whole head within METRICS_CLIENT_TIMEOUT_S, however it trickles in: one scrape at
	 * a time, so a slow client must not hold the others (or the daemon's stop) longer. */
	uint64_t deadline_ms = timer_now_ms() + METRICS_CLIENT_TIMEOUT_S * 1000u;
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (parsed == -EAGAIN && fill < sizeof(head)) {
		uint64_t now_ms = timer_now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (now_ms >= deadline_ms || poll(&p, 1, (int)(deadline_ms - now_ms)) != 1)
			return; /* too slow */
		ssize_t n = recv(fd, head + fill, sizeof(head) - fill, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* gone, or too slow */
		fill += (size_t)n;
		parsed = http1_parse_request(head, fill, &req, &why);
	}
	if (parsed < 0) {
		answer_status(fd,
			      parsed == -EAGAIN ? "431 Request Header Fields Too Large"
						: "400 Bad Request",
			      "");
		return;
	}
	bool get = req.method_len == 3 && memcmp(req.method, "GET", 3) == 0;
	bool head_only = req.method_len == 4 && memcmp(req.method, "HEAD", 4) == 0;
	size_t path_len = req.target_len;
	const char *query = memchr(req.target, '?', req.target_len);
	if (query != NULL)
		path_len = (size_t)(query - req.target);
	if (!get && !head_only) {
		answer_status(fd, "405 Method Not Allowed", "Allow: GET, HEAD\r\n");
		return;
	}
	if (path_len != strlen("/metrics") || memcmp(req.target, "/metrics", path_len) != 0) {
		answer_status(fd, "404 Not Found", "");
		return;
	}
	size_t len = 0;
	char *body = metrics_render(e, &len);
	if (body == NULL) {
		answer_status(fd, "503 Service Unavailable", "Retry-After: 1\r\n");
		return;
	}
	struct textbuf t = { 0 };
	textbuf_add(&t,
		    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
		    "Content-Length: %zu\r\nConnection: close\r\n\r\n",
		    len);
	if (!t.failed) {
		send_all(fd, t.p, t.len);
		if (get)
			send_all(fd, body, len);
	}
	textbuf_free(&t);
	pool_free(body);
}

static void *metrics_main(void *arg)
{
	struct metrics *m = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = m->listen_fd, .events = POLLIN },
				       { .fd = m->stop_fd, .events = POLLIN } };
		int n = poll(p, 2, -1);
		if (n == -1 && errno != EINTR)
			break;
		if (n > 0 && p[1].revents != 0)
			break; /* metrics_stop */
		if (n <= 0 || (p[0].revents & POLLIN) == 0)
			continue;
		int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd == -1)
			continue;
		serve_one(m->e, fd);
		close(fd);
	}
	return NULL;
}

int metrics_start(struct metrics *m, struct engine *e, int kept)
{
	*m = (struct metrics){ .e = e, .listen_fd = -1, .stop_fd = -1 };
	if (e->cfg->metrics_listen == NULL) {
		if (kept >= 0)
			close(kept);
		return 0;
	}
	/* Non-blocking: after an upgrade the old daemon's thread may poll the same socket, and an
	 * accept that lost the connection to the other process must not block its stop. */
	int fd = kept >= 0 && engine_inet_listening_on(kept, e->cfg->metrics_listen) ? kept : -1;
	if (kept >= 0 && fd < 0) {
		log_info("metrics: the listener %s passed does not listen on %s: closed",
			 e->inherited_from != NULL ? e->inherited_from : "the service manager",
			 e->cfg->metrics_listen);
		close(kept);
	}
	if (fd < 0)
		fd = engine_listen_inet(e->cfg->metrics_listen, true);
	if (fd < 0) {
		log_error("metrics %s: %s", e->cfg->metrics_listen, strerror(-fd));
		return fd;
	}
	m->listen_fd = fd;
	m->stop_fd = eventfd(0, EFD_CLOEXEC);
	int ret = m->stop_fd == -1 ? -errno : -pthread_create(&m->thread, NULL, metrics_main, m);
	if (ret != 0) {
		log_error("metrics %s: %s", e->cfg->metrics_listen, strerror(-ret));
		if (m->stop_fd >= 0)
			close(m->stop_fd);
		close(fd);
		m->stop_fd = -1;
		m->listen_fd = -1;
		return ret;
	}
	(void)pthread_setname_np(m->thread, "an-metrics");
	e->metrics_fd = fd; /* for a successor (engine_handover_list) */
	log_info("metrics: Prometheus on http://%s/metrics", e->cfg->metrics_listen);
	return 0;
}

void metrics_stop(struct metrics *m)
{
	if (m->listen_fd < 0)
		return;
	uint64_t one = 1;
	ssize_t n = write(m->stop_fd, &one, sizeof(one));
	AN_ASSERT(n == (ssize_t)sizeof(one));
	pthread_join(m->thread, NULL);
	close(m->stop_fd);
	close(m->listen_fd);
	m->stop_fd = -1;
	m->listen_fd = -1;
	m->e->metrics_fd = -1;
}
