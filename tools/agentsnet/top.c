/*
 * `agentsnet sandbox ls` and `agentsnet top` (tools/agentsnet/top.h). Both
 * read the daemon's `sandbox stats`, one line a sandbox; top takes two of
 * them an interval apart and ranks the sandboxes by what they did in
 * between, matching the two by id (sorted, then merged: 10,000 sandboxes
 * cost a sort, not a quadratic search).
 */
#include "tools/agentsnet/top.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

/* One sandbox in a frame: its last counts and what they grew by over the interval. */
struct top_row {
	struct ctl_stats_entry now;
	uint64_t requests_delta;
	uint64_t bytes_delta;
};

/* A whole `sandbox stats` answer, parsed: <rows> (owned) of <count>. */
struct top_frame {
	struct top_row *rows;
	uint32_t count;
};

static void frame_free(struct top_frame *f)
{
	AN_FREE(&f->rows);
	f->count = 0;
}

/* Parses <r> into <f>. 0, -EPROTO (not a `sandbox stats` answer) or -ENOMEM. */
static int frame_parse(const struct ctl_reply *r, struct top_frame *f)
{
	char *end = NULL;

	memset(f, 0, sizeof(*f));
	errno = 0;
	unsigned long n = strtoul(r->text, &end, 10);
	if (!r->ok || errno != 0 || end == r->text || *end != '\0' || n != r->more_count)
		return -EPROTO;
	if (n == 0)
		return 0;
	f->rows = pool_calloc(n, sizeof(*f->rows));
	if (f->rows == NULL)
		return -ENOMEM;
	for (const char *l = r->more; l != NULL; l = ctl_reply_next(r, l)) {
		AN_ASSERT(f->count < n);
		if (ctl_stats_parse(l, &f->rows[f->count].now) != 0) {
			frame_free(f);
			return -EPROTO;
		}
		f->count++;
	}
	return 0;
}

/* <uid>'s name, or its number when it has none. */
static void owner_name(uint32_t uid, char *out, size_t cap)
{
	struct passwd pw, *found = NULL;
	char buf[1024];

	if (getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &found) == 0 && found != NULL)
		snprintf(out, cap, "%s", found->pw_name);
	else
		snprintf(out, cap, "%u", uid);
}

/* <bytes> in the largest binary unit that keeps it at 1 or more: "512B", "3.4MiB". */
static void bytes_text(uint64_t bytes, char *out, size_t cap)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	size_t u = 0;

	if (bytes < 1024u) {
		snprintf(out, cap, "%lluB", (unsigned long long)bytes);
		return;
	}
	v /= 1024.0;
	while (v >= 1024.0 && u + 1 < AN_ARRAY_LEN(units)) {
		v /= 1024.0;
		u++;
	}
	snprintf(out, cap, "%.1f%s", v, units[u]);
}

/* <s> seconds as its two largest units: "3d04h", "2h05m", "4m07s", "12s". */
static void uptime_text(uint64_t s, char *out, size_t cap)
{
	if (s >= 86400u)
		snprintf(out, cap, "%llud%02lluh", (unsigned long long)(s / 86400u),
			 (unsigned long long)(s % 86400u / 3600u));
	else if (s >= 3600u)
		snprintf(out, cap, "%lluh%02llum", (unsigned long long)(s / 3600u),
			 (unsigned long long)(s % 3600u / 60u));
	else if (s >= 60u)
		snprintf(out, cap, "%llum%02llus", (unsigned long long)(s / 60u),
			 (unsigned long long)(s % 60u));
	else
		snprintf(out, cap, "%llus", (unsigned long long)s);
}

/* One row; <rate> prints the decisions a second over <interval_s> (top), else nothing. */
static void row_print(FILE *out, const struct top_row *row, bool rate, double interval_s)
{
	const struct ctl_stats_entry *e = &row->now;
	char owner[64], uptime[48], up[32], down[32];

	owner_name(e->owner, owner, sizeof(owner));
	uptime_text(e->uptime_s, uptime, sizeof(uptime));
	bytes_text(e->bytes_up, up, sizeof(up));
	bytes_text(e->bytes_down, down, sizeof(down));
	fprintf(out, "%-24s %-12s %-10s %7s %6u ", e->id, e->profile, owner, uptime, e->conns);
	if (rate)
		fprintf(out, "%8.1f ", (double)row->requests_delta / interval_s);
	fprintf(out, "%9llu %9llu %9s %9s\n", (unsigned long long)e->requests,
		(unsigned long long)e->refusals, up, down);
}

static void header_print(FILE *out, bool rate)
{
	fprintf(out, "%-24s %-12s %-10s %7s %6s ", "ID", "PROFILE", "OWNER", "UPTIME", "CONNS");
	if (rate)
		fprintf(out, "%8s ", "DEC/S");
	fprintf(out, "%9s %9s %9s %9s\n", "DECISIONS", "REFUSALS", "UP", "DOWN");
}

int top_table(const struct ctl_reply *r, FILE *out)
{
	struct top_frame f;

	int ret = frame_parse(r, &f);
	if (ret != 0)
		return ret;
	header_print(out, false);
	for (uint32_t i = 0; i < f.count; i++)
		row_print(out, &f.rows[i], false, 1.0);
	frame_free(&f);
	return 0;
}

static int by_id(const void *a, const void *b)
{
	return strcmp(((const struct top_row *)a)->now.id, ((const struct top_row *)b)->now.id);
}

/* Busiest first: decisions over the interval, then bytes, then decisions in all, then id. */
static int by_activity(const void *pa, const void *pb)
{
	const struct top_row *a = pa, *b = pb;

	if (a->requests_delta != b->requests_delta)
		return a->requests_delta > b->requests_delta ? -1 : 1;
	if (a->bytes_delta != b->bytes_delta)
		return a->bytes_delta > b->bytes_delta ? -1 : 1;
	if (a->now.requests != b->now.requests)
		return a->now.requests > b->now.requests ? -1 : 1;
	return strcmp(a->now.id, b->now.id);
}

/*
 * Fills each row of <cur> with what it grew by since <prev> (both sorted by
 * id); a sandbox new since <prev>, or whose counts went back (its slot opened
 * again), counts from zero.
 */
static void frame_deltas(struct top_frame *cur, const struct top_frame *prev)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < cur->count; i++) {
		struct top_row *r = &cur->rows[i];
		while (j < prev->count && strcmp(prev->rows[j].now.id, r->now.id) < 0)
			j++;
		const struct ctl_stats_entry *was =
		    j < prev->count && strcmp(prev->rows[j].now.id, r->now.id) == 0
			? &prev->rows[j].now
			: NULL;
		uint64_t bytes = r->now.bytes_up + r->now.bytes_down;
		uint64_t bytes_was = was != NULL ? was->bytes_up + was->bytes_down : 0;
		bool again = was == NULL || was->requests > r->now.requests || bytes_was > bytes;
		r->requests_delta = again ? r->now.requests : r->now.requests - was->requests;
		r->bytes_delta = again ? bytes : bytes - bytes_was;
	}
}

/* Asks for `sandbox stats` and parses it into <f>. A CTL_EXIT_* code, said on stderr. */
static int frame_fetch(const char *control_path, struct top_frame *f)
{
	struct ctl_reply r = { 0 };
	char err[512];

	int ret =
	    ctl_call(control_path, "sandbox stats\n", CTL_TIMEOUT_MS_DEFAULT, &r, err, sizeof(err));
	if (ret != 0) {
		fprintf(stderr, "agentsnet: %s\n", err);
		return ctl_unreachable(ret) ? CTL_EXIT_UNREACHABLE : CTL_EXIT_ERROR;
	}
	if (!r.ok) {
		fprintf(stderr, "agentsnet: error %s: %s\n", r.code, r.text);
		ctl_reply_free(&r);
		return CTL_EXIT_ERROR;
	}
	ret = frame_parse(&r, f);
	ctl_reply_free(&r);
	if (ret != 0) {
		fprintf(stderr, "agentsnet: malformed answer to sandbox stats\n");
		return CTL_EXIT_ERROR;
	}
	qsort(f->rows, f->count, sizeof(*f->rows), by_id);
	return CTL_EXIT_OK;
}

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000u),
			       .tv_nsec = (long)(ms % 1000u) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
	}
}

int top_run(const char *control_path, uint32_t interval_ms, bool once, FILE *out)
{
	struct top_frame prev = { 0 }, cur = { 0 };
	bool tty = isatty(fileno(out)) == 1;
	double interval_s = (double)interval_ms / 1000.0;

	AN_ASSERT(interval_ms > 0);
	int rc = frame_fetch(control_path, &prev);
	while (rc == CTL_EXIT_OK) {
		sleep_ms(interval_ms);
		rc = frame_fetch(control_path, &cur);
		if (rc != CTL_EXIT_OK)
			break;
		frame_deltas(&cur, &prev);
		qsort(cur.rows, cur.count, sizeof(*cur.rows), by_activity);
		uint64_t conns = 0, decided = 0;
		for (uint32_t i = 0; i < cur.count; i++) {
			conns += cur.rows[i].now.conns;
			decided += cur.rows[i].requests_delta;
		}
		struct winsize ws = { 0 };
		uint32_t shown = cur.count;
		if (tty && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_row > 3 &&
		    shown > ws.ws_row - 3u)
			shown = ws.ws_row - 3u;
		if (tty)
			fputs("\033[H\033[2J", out);
		fprintf(
		    out,
		    "agentsnet top: %u sandboxes, %llu connections, %.1f decisions/s (every %.1f "
		    "s%s)\n",
		    cur.count, (unsigned long long)conns, (double)decided / interval_s, interval_s,
		    once ? "" : "; Ctrl-C quits");
		header_print(out, true);
		for (uint32_t i = 0; i < shown; i++)
			row_print(out, &cur.rows[i], true, interval_s);
		fflush(out);
		qsort(cur.rows, cur.count, sizeof(*cur.rows), by_id);
		frame_free(&prev);
		prev = cur;
		cur = (struct top_frame){ 0 };
		if (once)
			break;
	}
	frame_free(&prev);
	frame_free(&cur);
	return rc;
}
