/*
 * Control socket. One thread, one connection at a time: requests are rare
 * (a sandbox starting or ending) and each is short, so serial handling keeps
 * the engine's table changes trivially ordered. A client gets 5 seconds in
 * all to send its line (however it trickles in: it holds everyone's thread),
 * which is at most CONTROL_LINE_BYTES_MAX; anything else is
 * answered "error bad_request". Answers are built in a growable buffer
 * because `sandbox ls` lists up to LIMITS_SANDBOXES_MAX lines.
 *
 * Between requests the thread wakes every CONTROL_REAP_INTERVAL_MS to remove
 * owned sandboxes whose `agentsnet run` died without unregistering (SIGKILL,
 * OOM): their sockets would otherwise wait for the next daemon start. The
 * same tick frees policy snapshots a reload retired once no worker can
 * reach them (the last tunnel on one may close long after the reload).
 * Rejected: a pidfd per owner (10,000 sandboxes would spend half of the
 * 20,000 descriptors a process may hold).
 *
 * Grammar (docs/control.md):
 *   ping                       -> ok agentsnetd <version>
 *   sandbox add <id> <profile> -> ok <directory>
 *   sandbox add <id> <profile> uid <uid> -> ok <directory>: its egress socket <uid>'s (0600)
 *   sandbox add <id> <profile> owned [<uid>] -> the same, tied to the caller's process,
 *                              for an agent running as <uid> (default: the caller's)
 *   sandbox add <id> <profile> owned new -> ok uid <uid> <directory>: root only, a uid
 *                              of daemon.sandbox_uids that is this sandbox's alone
 *   sandbox limit <id> <pids_max> <memory_max_bytes> -> ok: from the process that owns
 *                              <id>, a cgroup with those limits the caller is moved into
 *                              (core/runlimit.h; 0: no limit of that kind)
 *   sandbox rm <id>            -> ok
 *   sandbox rm <id> owned      -> ok, when <id> is the calling process's registration
 *                                 (what `agentsnet run` sends at its end); else
 *                                 error not_owner, and nothing removed
 *   sandbox ls                 -> ok <n>, then n lines "<id> <profile> <directory>"
 *   sandbox stats              -> ok <n>, then n lines "<id> profile <p> owner <uid> pid
 *                                 <pid> uptime_s <s> conns <c> requests <r> refusals <d>
 *                                 bytes_up <u> bytes_down <v>" (engine_sandbox_stats; keys
 *                                 only ever appended); a caller other than root sees
 *                                 the sandboxes it registered only
 *   sandbox url <id>           -> ok <public URL> (or error no_ingress / no_such_sandbox)
 *   sandbox release <id>       -> ok released: root only; lifts an alert's quarantine
 *                                 (or error no_such_sandbox / not_quarantined)
 *   alerts                     -> ok <n>, then n lines, each an alert as JSON, oldest
 *                                 first (core/watch.h; the latest WATCH_RECENT); a caller
 *                                 other than root sees its own sandboxes' only
 *   policy reload              -> ok policy generation <n>: ... (or error reload_refused)
 *   policy status              -> ok generation <n> profiles <p> rules <r> reloads <k>
 *   audit reopen               -> ok audit reopened <path>: root only; the audit file
 *                                 opened afresh by its path, for a rotator (audit_reopen)
 *   daemon handover            -> ok handover <n>, then the n listening sockets in
 *                                 batches (core/handover.h); root only. The caller (a new
 *                                 daemon, agentsnetd --upgrade) serves them, then says
 *                                 "ready" -> ok draining: this daemon serves no more control
 *                                 requests, drains and stops (engine_hand_over). Without
 *                                 "ready" within daemon.timeouts.handover_ms it goes on
 *                                 serving.
 *   stats                      -> ok workers <n> conns <open> ... audit_dropped <x> (one
 *                                 line of sums, keys in a fixed order: handle_stats)
 *   errors                     -> error <code> <message>
 */
#include "core/control.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/handover.h"
#include "core/textbuf.h"
#include "core/timer.h"
#include "core/watch.h"
#include "core/webhook.h"
#include "core/audit.h"
#include "core/engine.h"
#include "core/layout.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/uid.h"
#include "core/worker.h"

#define CONTROL_LINE_BYTES_MAX 512u
/* A request line must arrive whole within this; each send of the answer too. */
#define CONTROL_LINE_MS 5000
/* Supplementary groups of a caller read at once (SO_PEERGROUPS; more: a second read). */
#define CONTROL_GROUPS_MAX       256
#define CONTROL_REAP_INTERVAL_MS 1000
#define CONTROL_VERSION          "0.1.0"
/* How long `audit reopen` waits for the audit writer to act. */
#define CONTROL_AUDIT_REOPEN_MS 5000u

/* An answer being built (core/textbuf.h), and a descriptor sent with it (SCM_RIGHTS) or -1. */
struct answer {
	struct textbuf text;
	int fd;
};

#define answer_add(a, ...) textbuf_add(&(a)->text, __VA_ARGS__)

/*
 * A listing's lines and how many, counted as written under one hold of the
 * engine's lock (`sandbox ls`, `sandbox stats`): counted apart, a sandbox added
 * between two holds would make the count disagree with the lines, which the
 * CLI checks. A caller other than root (<who>) is shown the sandboxes it
 * registered only, where the listing says so.
 */
struct counted_lines {
	struct answer lines;
	uint32_t count;
	const struct verdict_caller *who; /* NULL or root: every sandbox */
};

/* Answers "ok <count>" and then <out>'s lines, and releases them. */
static void answer_counted(struct answer *a, struct counted_lines *out)
{
	a->text.failed |= out->lines.text.failed;
	answer_add(a, "ok %u\n", out->count);
	if (out->lines.text.len > 0)
		answer_add(a, "%.*s", (int)out->lines.text.len, out->lines.text.p);
	textbuf_free(&out->lines.text);
}

static void list_one(void *arg, const struct engine_sandbox *sb)
{
	struct counted_lines *out = arg;

	out->count++;
	answer_add(&out->lines, "%s %s %.*s\n", sb->id,
		   sb->profile_name[0] ? sb->profile_name : "-",
		   (int)(strlen(sb->path) - strlen("/egress.sock")), sb->path);
}

static void stats_one(void *arg, const struct engine_sandbox_view *v)
{
	struct counted_lines *out = arg; /* another tenant's traffic is not the caller's */
	struct answer *a = &out->lines;
	const struct engine_sandbox *sb = v->sb;

	if (out->who != NULL && out->who->uid != 0 && out->who->uid != sb->registrant)
		return;
	out->count++;
	answer_add(a,
		   "%s profile %s owner %u pid %d uptime_s %llu conns %u requests %llu refusals "
		   "%llu bytes_up %llu bytes_down %llu\n",
		   sb->id, sb->profile_name[0] ? sb->profile_name : "-", sb->registrant,
		   (int)sb->owner.pid, (unsigned long long)v->uptime_s, v->conns,
		   (unsigned long long)v->requests, (unsigned long long)v->refusals,
		   (unsigned long long)v->bytes_up, (unsigned long long)v->bytes_down);
}

static void handle_url(struct engine *e, const char *id, const struct verdict_caller *who,
		       struct answer *a)
{
	char url[4096];

	AN_ASSERT(id != NULL);
	int ret = engine_ingress_url(e, id, who, url, sizeof(url));
	AN_ASSERT(ret <= 0);
	if (ret == 0)
		answer_add(a, "ok %s\n", url);
	else if (ret == -EACCES)
		answer_add(a,
			   "error forbidden the public URL of %s holds its ingress token: only "
			   "root and the user who registered it are told it\n",
			   id);
	else if (ret == -ENOTCONN)
		answer_add(a, "error no_ingress the daemon serves no ingress gateway\n");
	else if (ret == -ENOENT)
		answer_add(a, "error no_such_sandbox no sandbox %s is registered\n", id);
	else
		answer_add(a, "error bad_request the public URL of %s is too long\n", id);
	explicit_bzero(url, sizeof(url)); /* it may hold the sandbox's ingress token */
}

static void handle_add(struct engine *e, const char *id, const char *profile,
		       const struct engine_owner *owner, const struct verdict_caller *who,
		       uint32_t agent_uid, struct answer *a)
{
	char dir[4096];
	uint32_t asked = agent_uid;

	/* An owned sandbox's `agentsnet run` gets its ingress socket with the answer. */
	int ret = engine_sandbox_add(e, id, profile, owner, who, &agent_uid, dir, sizeof(dir),
				     owner != NULL ? &a->fd : NULL);
	switch (ret) {
	case 0:
		log_info("sandbox %s: added (profile %s)", id, profile);
		if (asked == ENGINE_AGENT_NEW) {
			log_info("sandbox %s: its agent runs as uid %u", id, agent_uid);
			answer_add(a, "ok uid %u %s\n", agent_uid, dir);
		} else {
			answer_add(a, "ok %s\n", dir);
		}
		break;
	case -EINVAL:
		answer_add(
		    a,
		    "error bad_id sandbox ids are [A-Za-z0-9_.-]{1,63}, not starting with '.'\n");
		break;
	case -ENAMETOOLONG:
		answer_add(a,
			   "error bad_id sandbox id %s is %zu bytes; the daemon's socket_dir %s "
			   "leaves room for %zu (its socket's path would be over the 107 bytes a "
			   "Unix socket's holds)\n",
			   id, strlen(id), e->cfg->socket_dir,
			   layout_sandbox_id_room(e->cfg->socket_dir, owner != NULL));
		break;
	case -ENOENT:
		answer_add(a, "error no_such_profile the policy has no profile %s\n", profile);
		break;
	case -EEXIST:
		answer_add(a, "error exists sandbox %s is already registered\n", id);
		break;
	case -ERANGE:
		answer_add(a,
			   "error forbidden uid %u is one of daemon.sandbox_uids, which the daemon "
			   "gives one sandbox at a time itself (ask for a new one)\n",
			   agent_uid);
		break;
	case -EDQUOT:
		log_warn(
		    "sandbox %s: uid %u holds its daemon.sandboxes_per_user sandboxes: refused", id,
		    who != NULL ? who->uid : 0);
		answer_add(
		    a,
		    "error limit uid %u holds %u sandboxes already (daemon.sandboxes_per_user); "
		    "remove one first\n",
		    who != NULL ? who->uid : 0, e->cfg->sandboxes_per_user);
		break;
	case -EUSERS:
		log_warn("sandbox %s: no uid of daemon.sandbox_uids is free", id);
		answer_add(a,
			   "error limit every uid of daemon.sandbox_uids is a sandbox's or a host "
			   "account's\n");
		break;
	case -EACCES:
		if (who != NULL && who->uid != 0 && asked == ENGINE_AGENT_NEW) {
			answer_add(a,
				   "error forbidden only root is given a new uid; uid %u registers "
				   "for its own uid\n",
				   who->uid);
			break;
		}
		if (who != NULL && who->uid != 0 && asked != ENGINE_AGENT_ANY &&
		    asked != who->uid) {
			answer_add(a,
				   "error forbidden uid %u may register sandboxes for its own uid "
				   "only, not for uid %u\n",
				   who->uid, asked);
			break;
		}
		log_warn("sandbox %s: uid %u may not register on profile %s: refused", id,
			 who != NULL ? who->uid : 0, profile);
		answer_add(a,
			   "error forbidden uid %u may not register sandboxes on profile %s (the "
			   "policy's profiles.%s.users and groups; a profile with an inject rule "
			   "names who may)\n",
			   who != NULL ? who->uid : 0, profile, profile);
		break;
	case -ENOSPC:
		answer_add(a, "error limit the daemon serves its maximum number of sandboxes\n");
		break;
	default:
		if (engine_err_errno(ret) != 0)
			answer_add(a, "error internal sandbox %s: its socket or record: %s\n", id,
				   engine_err_text(ret));
		else
			answer_add(a, "error internal %s\n", engine_err_text(ret));
		break;
	}
}

/* `sandbox rm <id>`, or with <only_owner> `sandbox rm <id> owned`: that process's registration only. */
static void handle_rm(struct engine *e, const char *id, const struct verdict_caller *who,
		      const struct engine_owner *only_owner, struct answer *a)
{
	uint32_t registrant = 0;
	int ret = engine_sandbox_remove(e, id, who, only_owner, &registrant);

	if (ret == 0) {
		log_info("sandbox %s: removed", id);
		answer_add(a, "ok\n");
	} else if (ret == -ENOENT) {
		answer_add(a, "error no_such_sandbox no run-time sandbox %s\n", id);
	} else if (ret == -EPERM) {
		answer_add(a, "error bad_request sandbox %s comes from the policy file\n", id);
	} else if (ret == -EACCES) {
		log_warn("sandbox %s: uid %u may not remove it (registered by uid %u): refused", id,
			 who != NULL ? who->uid : 0, registrant);
		answer_add(a,
			   "error forbidden sandbox %s was registered by uid %u: only that user or "
			   "root may remove it\n",
			   id, registrant);
	} else if (ret == -ESTALE) {
		log_info("sandbox %s: pid %d asked to remove its own registration, which this is "
			 "not: left",
			 id, only_owner != NULL ? (int)only_owner->pid : 0);
		answer_add(a,
			   "error not_owner sandbox %s is not the calling process's registration "
			   "(registered without \"owned\", or again since): left as it is\n",
			   id);
	} else {
		answer_add(a, "error internal %s\n", engine_err_text(ret));
	}
}

static void handle_reload(struct engine *e, struct answer *a)
{
	char msg[512];

	if (e->reload == NULL) {
		answer_add(a, "error bad_request this daemon cannot reload\n");
		return;
	}
	int ret = e->reload(e->reload_arg, msg, sizeof(msg));
	msg[strcspn(msg, "\n")] = '\0'; /* one line, whatever the loader wrote */
	if (ret == 0)
		answer_add(a, "ok %s\n", msg);
	else
		answer_add(a, "error reload_refused %s\n", msg);
}

/* `audit reopen`: root's (a rotator's) alone, since it touches the file the others read. */
static void handle_audit_reopen(struct engine *e, const struct verdict_caller *who,
				struct answer *a)
{
	if (who != NULL && who->uid != 0) {
		answer_add(a, "error forbidden only root reopens the audit file\n");
		return;
	}
	if (e->audit == NULL || !audit_reopenable(e->audit)) {
		answer_add(a, "error bad_request the audit goes to standard output\n");
		return;
	}
	/* From here every failure is the reopen's, whatever its errno (an EINVAL of the open too). */
	int ret = audit_reopen(e->audit, CONTROL_AUDIT_REOPEN_MS);
	if (ret == 0)
		answer_add(a, "ok audit reopened %s\n", e->cfg->audit_path);
	else if (ret == -ETIMEDOUT) /* the ask stands: the writer acts on it once it can */
		answer_add(a,
			   "error reopen_failed %s: the audit writer did not act within %u ms; it "
			   "reopens the file once it can (the new file begins with an "
			   "audit_reopened notice)\n",
			   e->cfg->audit_path, (unsigned)CONTROL_AUDIT_REOPEN_MS);
	else
		answer_add(a,
			   "error reopen_failed %s: %s (the audit goes on to the file open "
			   "before)\n",
			   e->cfg->audit_path, strerror(-ret));
}

/*
 * The policy served: its generation and size, the reloads, whether the
 * daemon has a CA (the terminated tiers need one), the digest of its text
 * and where it came from, last (a path may hold spaces): "source embedded"
 * or "source file <path>" ("?" for a path a line cannot carry). Keys are
 * only ever appended before source.
 */
static void handle_status(struct engine *e, struct answer *a)
{
	const char *digest = "-";
	const char *path = NULL;

	pthread_mutex_lock(&e->lock);
	const struct snapshot *s = atomic_load(&e->current);
	if (e->ops->source != NULL)
		path = e->ops->source(s->policy, &digest);
	bool printable = path != NULL;
	for (const char *c = path; printable && *c != '\0'; c++)
		printable = (unsigned char)*c >= 0x20 && (unsigned char)*c != 0x7f;
	answer_add(a,
		   "ok generation %llu profiles %u rules %u reloads %llu ca %d digest %s source "
		   "%s%s\n",
		   (unsigned long long)s->generation, s->profiles, s->rules,
		   (unsigned long long)e->reloads, e->term_has_ca ? 1 : 0, digest,
		   path == NULL ? "embedded" : "file ",
		   path == NULL ? ""
		   : printable  ? path
				: "?");
	pthread_mutex_unlock(&e->lock);
}

/*
 * One line: the sums over every worker of what each last published
 * (core/worker.h: relaxed loads of single-writer fields, at most
 * WORKER_STATS_PUBLISH_MS old), then the audit writer's counts. Never waits
 * on a worker. Checklist: keys are only ever appended (a script may parse
 * them by position); docs/control.md and STATS_KEYS in
 * tests/integ/sandbox.py list them in this order.
 */
static void handle_stats(struct engine *e, struct answer *a)
{
	struct worker_counters sum = { 0 };

	AN_ASSERT(e->workers != NULL);
	AN_ASSERT(e->worker_count > 0);
	for (uint32_t i = 0; i < e->worker_count; i++)
		worker_counters_add(&e->workers[i], &sum);
	uint64_t written = e->audit != NULL ? audit_written(e->audit) : 0;
	uint64_t dropped = e->audit != NULL ? audit_dropped(e->audit) : 0;
	uint64_t lost = e->audit != NULL ? audit_lost(e->audit) : 0;
	const struct webhook *wh = e->alerts_webhook;
	uint64_t hook_delivered = wh != NULL ? atomic_load(&wh->delivered) : 0;
	uint64_t hook_failed = wh != NULL ? atomic_load(&wh->failed) : 0;
	uint64_t hook_dropped = wh != NULL ? atomic_load(&wh->dropped) : 0;
	answer_add(a,
		   "ok workers %u conns %llu accepted %llu refused_overload %llu requests %llu "
		   "denied %llu splice_relays %llu copy_relays %llu upstreams_reused %llu "
		   "leaf_hits %llu leaf_misses %llu leaf_mints %llu audit_written %llu "
		   "audit_dropped %llu misdirected %llu audit_lost %llu audit_failing %d "
		   "webhook_delivered %llu webhook_failed %llu webhook_dropped %llu\n",
		   e->worker_count, (unsigned long long)sum.conns_open,
		   (unsigned long long)sum.accepted, (unsigned long long)sum.refused_overload,
		   (unsigned long long)sum.requests, (unsigned long long)sum.denied,
		   (unsigned long long)sum.splice_relays, (unsigned long long)sum.copy_relays,
		   (unsigned long long)sum.upstreams_reused, (unsigned long long)sum.leaf_hits,
		   (unsigned long long)sum.leaf_misses, (unsigned long long)sum.leaf_mints,
		   (unsigned long long)written, (unsigned long long)dropped,
		   (unsigned long long)sum.misdirected, (unsigned long long)lost,
		   audit_failing(e->audit) ? 1 : 0, (unsigned long long)hook_delivered,
		   (unsigned long long)hook_failed, (unsigned long long)hook_dropped);
}

/* `sandbox release <id>`: root's alone, the operator who lifts a quarantine. */
static void handle_release(struct engine *e, const char *id, const struct verdict_caller *who,
			   struct answer *a)
{
	if (who != NULL && who->uid != 0) {
		answer_add(a, "error forbidden only root lifts a quarantine\n");
		return;
	}
	int ret = watch_release(e, id);
	if (ret == 0)
		answer_add(a, "ok released %s\n", id);
	else if (ret == -EALREADY)
		answer_add(a, "error not_quarantined sandbox %s is not in quarantine\n", id);
	else
		answer_add(a, "error no_such_sandbox %s\n", id);
}

/* `alerts`: the latest alerts the caller may see, one JSON object a line. */
static void handle_alerts(struct engine *e, const struct verdict_caller *who, struct answer *a)
{
	char line[4096];
	struct watch_alert *list = pool_calloc(WATCH_RECENT, sizeof(*list));

	if (list == NULL) {
		answer_add(a, "error internal out of memory\n");
		return;
	}
	uint32_t n = watch_recent_copy(e, who != NULL ? who->uid : 0, list, WATCH_RECENT);
	answer_add(a, "ok %u\n", n);
	for (uint32_t i = 0; i < n; i++)
		if (watch_alert_json(&list[i], line, sizeof(line)) >= 0)
			answer_add(a, "%s\n", line);
	pool_free(list);
}

/* Splits <line> into at most 4 space-separated words; returns how many. */
static int split_words(char *line, char **words, int max)
{
	int n = 0;

	for (char *p = line; *p != '\0' && n <= max;) {
		while (*p == ' ')
			*p++ = '\0';
		if (*p == '\0')
			break;
		if (n == max)
			return max + 1;
		words[n++] = p;
		while (*p != '\0' && *p != ' ')
			p++;
	}
	return n;
}

char *control_handle(struct engine *e, const char *line, const struct engine_owner *owner,
		     const struct verdict_caller *who, size_t *len, int *fd)
{
	char copy[CONTROL_LINE_BYTES_MAX];
	char *w[6];
	struct answer a = { .fd = -1 };
	uint32_t agent_uid = ENGINE_AGENT_ANY;

	size_t n = strlen(line);
	if (n >= sizeof(copy)) {
		answer_add(&a, "error bad_request request line too long\n");
	} else {
		memcpy(copy, line, n + 1);
		int count = split_words(copy, w, 6);
		bool sandbox = count >= 2 && strcmp(w[0], "sandbox") == 0;
		if (count == 1 && strcmp(w[0], "ping") == 0) {
			answer_add(&a, "ok agentsnetd %s\n", CONTROL_VERSION);
		} else if (sandbox && count == 4 && strcmp(w[1], "add") == 0) {
			handle_add(e, w[2], w[3], NULL, who, ENGINE_AGENT_ANY, &a);
		} else if (sandbox && count == 6 && strcmp(w[1], "add") == 0 &&
			   strcmp(w[4], "uid") == 0) {
			if (!uid_parse(w[5], &agent_uid) || agent_uid >= ENGINE_AGENT_NEW)
				answer_add(&a,
					   "error bad_request the agent's uid is a number below "
					   "4294967294\n");
			else
				handle_add(e, w[2], w[3], NULL, who, agent_uid, &a);
		} else if (sandbox && (count == 5 || count == 6) && strcmp(w[1], "add") == 0 &&
			   strcmp(w[4], "owned") == 0) {
			if (owner == NULL || owner->pid <= 0)
				answer_add(&a, "error bad_request \"owned\" needs a caller pid\n");
			else if (count == 6 && strcmp(w[5], "new") == 0)
				handle_add(e, w[2], w[3], owner, who, ENGINE_AGENT_NEW, &a);
			else if (count == 6 &&
				 (!uid_parse(w[5], &agent_uid) || agent_uid >= ENGINE_AGENT_NEW))
				answer_add(
				    &a, "error bad_request the agent's uid is \"new\" or a number "
					"below 4294967294\n");
			else
				handle_add(e, w[2], w[3], owner, who, agent_uid, &a);
		} else if (sandbox && count == 3 && strcmp(w[1], "rm") == 0) {
			handle_rm(e, w[2], who, NULL, &a);
		} else if (sandbox && count == 4 && strcmp(w[1], "rm") == 0 &&
			   strcmp(w[3], "owned") == 0) {
			if (owner == NULL || owner->pid <= 0)
				answer_add(&a, "error bad_request \"owned\" needs a caller pid\n");
			else
				handle_rm(e, w[2], who, owner, &a);
		} else if (sandbox && count == 3 && strcmp(w[1], "url") == 0) {
			handle_url(e, w[2], who, &a);
		} else if (sandbox && count == 3 && strcmp(w[1], "release") == 0) {
			handle_release(e, w[2], who, &a);
		} else if (count == 1 && strcmp(w[0], "alerts") == 0) {
			handle_alerts(e, who, &a);
		} else if (count == 2 && strcmp(w[0], "policy") == 0 &&
			   strcmp(w[1], "reload") == 0) {
			handle_reload(e, &a);
		} else if (count == 2 && strcmp(w[0], "policy") == 0 &&
			   strcmp(w[1], "status") == 0) {
			handle_status(e, &a);
		} else if (count == 2 && strcmp(w[0], "audit") == 0 &&
			   strcmp(w[1], "reopen") == 0) {
			handle_audit_reopen(e, who, &a);
		} else if (count == 1 && strcmp(w[0], "stats") == 0) {
			handle_stats(e, &a);
		} else if (sandbox && count == 2 && strcmp(w[1], "stats") == 0) {
			struct counted_lines out = { .lines = { .fd = -1 }, .who = who };
			engine_sandbox_stats(e, &out, stats_one);
			answer_counted(&a, &out);
		} else if (sandbox && count == 2 && strcmp(w[1], "ls") == 0) {
			struct counted_lines out = { .lines = { .fd = -1 } };
			engine_sandbox_foreach(e, &out, list_one);
			answer_counted(&a, &out);
		} else {
			answer_add(&a, "error bad_request unknown request (see docs/control.md)\n");
		}
	}
	if (a.text.failed || fd == NULL) {
		if (a.fd >= 0)
			close(a.fd);
		a.fd = -1;
	}
	if (fd != NULL)
		*fd = a.fd;
	if (a.text.failed) {
		textbuf_free(&a.text);
		return NULL;
	}
	*len = a.text.len;
	return a.text.p;
}

/* Sends <len> bytes of <reply> on <sock>, the first of them with <fd> (SCM_RIGHTS) when >= 0. */
static void send_reply(int sock, const char *reply, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control = { 0 };

	for (size_t off = 0; off < len;) {
		struct iovec iov = { .iov_base = (char *)reply + off, .iov_len = len - off };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (fd >= 0 && off == 0) {
			msg.msg_control = control.buf;
			msg.msg_controllen = sizeof(control.buf);
			struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
		}
		ssize_t w = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
}

/* <text> as a decimal uint64_t (digits only, no overflow). */
static bool u64_parse(const char *text, uint64_t *out)
{
	uint64_t v = 0;

	if (*text == '\0' || strlen(text) > 20)
		return false;
	for (; *text != '\0'; text++) {
		if (*text < '0' || *text > '9' || v > (UINT64_MAX - (uint64_t)(*text - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(*text - '0');
	}
	*out = v;
	return true;
}

/* The answer's code for runlimit_apply's <ret>, not 0: a system call's failure is internal. */
static const char *limit_answer_code(int ret)
{
	return ret == -ENOENT       ? "no_such_sandbox"
	       : ret == -EACCES     ? "forbidden"
	       : ret == -EEXIST     ? "exists"
	       : ret == -EINVAL     ? "bad_request"
	       : ret == -EOPNOTSUPP ? "unsupported"
				    : "internal";
}

/*
 * `sandbox limit <id> <pids_max> <memory_max_bytes>` from <peer_pid> on <sock>:
 * answered here rather than in control_handle, since it acts on the caller's
 * process (core/runlimit.h).
 */
static void handle_limit(struct control *ctl, char *line, int sock, pid_t peer_pid,
			 struct answer *a)
{
	char *w[6], err[PATH_MAX + 128];
	uint64_t pids_max = 0, memory_max = 0;

	int count = split_words(line, w, 6);
	if (count != 5 || !u64_parse(w[3], &pids_max) || !u64_parse(w[4], &memory_max)) {
		answer_add(a, "error bad_request sandbox limit <id> <pids_max> "
			      "<memory_max_bytes>, both decimal\n");
		return;
	}
	if (!engine_sandbox_id_valid(w[2])) {
		answer_add(a, "error bad_id sandbox ids are [A-Za-z0-9_.-]{1,63}, not "
			      "starting with '.'\n");
		return;
	}
	int ret = runlimit_apply(&ctl->limits, ctl->e, w[2], sock, peer_pid, pids_max, memory_max,
				 err, sizeof(err));
	const char *code = limit_answer_code(ret);
	if (ret == 0) {
		log_info("sandbox %s: cgroup made for its run (pid %d): pids %" PRIu64
			 " memory %" PRIu64,
			 w[2], (int)peer_pid, pids_max, memory_max);
		answer_add(a, "ok\n");
	} else {
		log_warn("sandbox %s: cgroup for pid %d refused: %s", w[2], (int)peer_pid, err);
		answer_add(a, "error %s %s\n", code, err);
	}
}

/*
 * Reads one line (up to '\n' or EOF) that must arrive whole by <deadline_ms>
 * (timer_now_ms): a client trickling a byte at a time holds the one control
 * thread no longer than that. Its length, or -EMSGSIZE past <cap>.
 */
static ssize_t read_line(int fd, char *buf, size_t cap, uint64_t deadline_ms)
{
	size_t got = 0;

	while (got < cap - 1) {
		uint64_t now = timer_now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int ready = now < deadline_ms ? poll(&p, 1, (int)(deadline_ms - now)) : 0;
		if (ready == -1 && errno == EINTR)
			continue;
		if (ready != 1)
			break; /* the deadline: what came so far, which has no newline */
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		if (memchr(buf, '\n', got) != NULL)
			break;
	}
	buf[got] = '\0';
	char *nl = strchr(buf, '\n');
	if (nl == NULL && got == cap - 1)
		return -EMSGSIZE;
	if (nl != NULL)
		*nl = '\0';
	size_t len = strlen(buf);
	if (len > 0 && buf[len - 1] == '\r')
		buf[--len] = '\0';
	return (ssize_t)len;
}

/*
 * `daemon handover` from <who> on <sock>: every listening socket, then the
 * new daemon's "ready" (each step within daemon.timeouts.handover_ms), then this
 * daemon hands over (engine_hand_over) and its control thread ends. Anything
 * short of "ready" leaves this daemon serving as before, logged.
 */
static void handle_handover(struct control *ctl, int sock, const struct verdict_caller *who,
			    pid_t pid)
{
	uint32_t wait_ms = ctl->e->cfg->handover_timeout_ms;
	struct timeval tv = { .tv_sec = wait_ms / 1000, .tv_usec = (wait_ms % 1000) * 1000 };
	struct notify_fd *list = NULL;
	uint32_t count = 0;
	char line[CONTROL_LINE_BYTES_MAX];
	char head[64];

	if (who->uid != 0) {
		const char *no = "error forbidden only root takes the daemon's sockets over\n";
		send_reply(sock, no, strlen(no), -1);
		return;
	}
	int ret = engine_handover_list(ctl->e, 1, &list, &count);
	if (ret != 0) {
		const char *no = "error internal out of memory\n";
		send_reply(sock, no, strlen(no), -1);
		return;
	}
	snprintf(list[count].name, sizeof(list[count].name), "control");
	list[count++].fd = ctl->listen_fd;
	(void)setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int n = snprintf(head, sizeof(head), "ok handover %u\n", count);
	send_reply(sock, head, (size_t)n, -1);
	log_info("handover: passing %u listening sockets to pid %d", count, (int)pid);
	ret = handover_send(sock, list, count, timer_now_ms() + wait_ms);
	pool_free(list);
	if (ret != 0) {
		log_warn("handover: %s: this daemon goes on serving", strerror(-ret));
		return;
	}
	if (read_line(sock, line, sizeof(line), timer_now_ms() + wait_ms) < 0 ||
	    strcmp(line, "ready") != 0) {
		log_warn("handover: the new daemon did not say it serves: this daemon goes on "
			 "serving");
		return;
	}
	const char *ok = "ok draining\n";
	send_reply(sock, ok, strlen(ok), -1);
	log_info("handover: pid %d serves every socket: this daemon drains and stops", (int)pid);
	ctl->handed_over = true;
	engine_hand_over(ctl->e);
}

static void serve_one(struct control *ctl, int fd)
{
	char line[CONTROL_LINE_BYTES_MAX];
	struct timeval tv = { .tv_sec = CONTROL_LINE_MS / 1000 };
	size_t len = 0;

	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t cred_len = sizeof(cred);
	struct engine_owner owner = { 0 };
	bool known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0;
	if (known && cred.pid > 0 && engine_owner_of(cred.pid, &owner) == 0)
		owner.uid = cred.uid;
	/* Who asks: a caller whose credentials cannot be read is nobody in particular. */
	gid_t few[CONTROL_GROUPS_MAX];
	gid_t *groups = few;
	socklen_t groups_len = sizeof(few);
	int got = known ? getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &groups_len) : -1;
	if (got == -1 && errno == ERANGE && groups_len > sizeof(few)) {
		/* More groups than CONTROL_GROUPS_MAX: the kernel said how many. */
		groups = pool_malloc(groups_len);
		got = groups != NULL
			  ? getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &groups_len)
			  : -1;
	}
	if (got != 0)
		groups_len = 0;
	struct verdict_caller who = {
		.uid = cred.uid,
		.gid = cred.gid,
		.groups = groups,
		.group_count = (uint32_t)(groups_len / sizeof(gid_t)),
	};
	static_assert(sizeof(gid_t) == sizeof(uint32_t), "SO_PEERGROUPS fills gid_t");
	/* The line whole within the same 5 s, however it trickles in. */
	ssize_t n = read_line(fd, line, sizeof(line), timer_now_ms() + CONTROL_LINE_MS);
	int pass_fd = -1;
	/* A caller the kernel cannot name is nobody the daemon may act for. */
	char *out = NULL;
	if (n >= 0 && known && strcmp(line, "daemon handover") == 0) {
		handle_handover(ctl, fd, &who, cred.pid);
		if (groups != few)
			pool_free(groups);
		return;
	}
	if (n >= 0 && known && strncmp(line, "sandbox limit ", 14) == 0) {
		struct answer a = { .fd = -1 };
		handle_limit(ctl, line, fd, cred.pid, &a);
		out = a.text.failed ? NULL : a.text.p;
		len = a.text.len;
		if (a.text.failed)
			textbuf_free(&a.text);
	} else if (n >= 0 && known) {
		out = control_handle(ctl->e, line, &owner, &who, &len, &pass_fd);
	}
	const char *reply = out;
	if (!known) {
		reply = "error forbidden the caller's credentials cannot be read\n";
		len = strlen(reply);
	} else if (n < 0) {
		reply = "error bad_request request line too long\n";
		len = strlen(reply);
	} else if (out == NULL) {
		reply = "error internal out of memory\n";
		len = strlen(reply);
	}
	send_reply(fd, reply, len, pass_fd);
	if (pass_fd >= 0)
		close(pass_fd);
	pool_free(out);
	if (groups != few)
		pool_free(groups);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	int ret = clock_gettime(CLOCK_MONOTONIC, &ts);
	AN_ASSERT(ret == 0);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *control_main(void *arg)
{
	struct control *ctl = arg;

	while (ctl->held) {
		struct pollfd p[2] = { { .fd = ctl->stop_fd, .events = POLLIN },
				       { .fd = ctl->release_fd, .events = POLLIN } };
		int n = poll(p, 2, -1);
		if (n == -1 && errno != EINTR)
			return NULL;
		if (n > 0 && p[0].revents != 0)
			return NULL; /* control_stop */
		if (n > 0 && p[1].revents != 0)
			ctl->held = false;
	}
	int64_t next_reap = now_ms() + CONTROL_REAP_INTERVAL_MS;

	for (;;) {
		struct pollfd p[2] = { { .fd = ctl->listen_fd, .events = POLLIN },
				       { .fd = ctl->stop_fd, .events = POLLIN } };
		int64_t left = next_reap - now_ms();
		int n = left > 0 ? poll(p, 2, (int)left) : 0;
		if (n == -1 && errno != EINTR)
			break;
		if (n > 0 && p[1].revents != 0)
			break; /* control_stop */
		if (now_ms() >= next_reap) {
			/* On a clock, not on idleness: a busy socket must not starve it. */
			engine_sandbox_reap_orphans(ctl->e);
			engine_policy_collect(ctl->e);
			runlimit_collect(&ctl->limits, ctl->e);
			next_reap = now_ms() + CONTROL_REAP_INTERVAL_MS;
		}
		if (n <= 0 || (p[0].revents & POLLIN) == 0)
			continue;
		int fd = accept4(ctl->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd == -1)
			continue; /* EINTR, ECONNABORTED, EAGAIN: the next turn tells */
		serve_one(ctl, fd);
		close(fd);
		if (ctl->handed_over)
			break; /* the new daemon accepts here now */
	}
	return NULL;
}

/* Whether <fd> is a stream socket listening at <path> (a predecessor's control socket), blocking. */
static bool control_socket_fits(int fd, const char *path)
{
	struct sockaddr_un sun = { 0 };
	socklen_t len = sizeof(sun);

	return getsockname(fd, (struct sockaddr *)&sun, &len) == 0 && sun.sun_family == AF_UNIX &&
	       strncmp(sun.sun_path, path, sizeof(sun.sun_path)) == 0 &&
	       engine_socket_listening(fd, false);
}

/*
 * Gives the passed control socket's file, "control.sock" in <dir_fd> (the
 * socket directory: the daemon's, nobody else can put a name there), the
 * group and mode this daemon's policy asks for (<group>, or the daemon's own
 * gid when none): a group the policy no longer names loses its access now, not
 * at the next restart. 0 or -errno (logged; the socket is not served).
 */
static int control_socket_retarget(int dir_fd, const char *path, gid_t group)
{
	struct stat st;
	gid_t want = group != (gid_t)-1 ? group : getegid();

	if (fstatat(dir_fd, "control.sock", &st, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISSOCK(st.st_mode)) {
		log_error("control socket %s: the passed socket's file is gone or not a socket",
			  path);
		return -ENOENT;
	}
	if (st.st_gid != want) {
		if (fchownat(dir_fd, "control.sock", (uid_t)-1, want, AT_SYMLINK_NOFOLLOW) != 0) {
			int err = errno;
			log_error("control socket %s: chown to group %u: %s", path, (unsigned)want,
				  strerror(err));
			return -err;
		}
		log_info("control socket %s: group %u, was %u", path, (unsigned)want,
			 (unsigned)st.st_gid);
	}
	/* fchmodat follows a link, but this name is a socket no one else can replace. */
	if ((st.st_mode & 07777) != 0660 && fchmodat(dir_fd, "control.sock", 0660, 0) != 0) {
		int err = errno;
		log_error("control socket %s: chmod 0660: %s", path, strerror(err));
		return -err;
	}
	return 0;
}

int control_start(struct control *ctl, struct engine *e, gid_t group, int kept, bool held)
{
	memset(ctl, 0, sizeof(*ctl));
	ctl->e = e;
	ctl->listen_fd = -1;
	ctl->stop_fd = -1;
	ctl->release_fd = -1;
	ctl->held = held;
	int n = snprintf(ctl->path, sizeof(ctl->path), "%s/control.sock", e->cfg->socket_dir);
	if (n < 0 || (size_t)n >= sizeof(ctl->path))
		return -ENAMETOOLONG;
	int dir_fd = engine_dir_secure(e->cfg->socket_dir, 0755);
	int ret = dir_fd >= 0 ? 0 : dir_fd;
	int fd = ret == 0 && kept >= 0 && control_socket_fits(kept, ctl->path) ? kept : -1;
	if (kept >= 0 && fd < 0)
		close(kept);
	if (fd >= 0 && (ret = control_socket_retarget(dir_fd, ctl->path, group)) != 0) {
		close(fd);
		fd = ret;
	}
	if (dir_fd >= 0)
		close(dir_fd);
	if (fd >= 0)
		log_info("control socket %s: serving the socket %s passed", ctl->path,
			 e->inherited_from != NULL ? e->inherited_from : "the old daemon");
	else if (ret == 0)
		fd = engine_listen_unix(ctl->path, 0660, (uid_t)-1, group, false);
	else
		fd = ret;
	if (fd < 0) {
		log_error("control socket %s: %s", ctl->path, strerror(-fd));
		return fd;
	}
	ctl->listen_fd = fd;
	ctl->limits.socket_dir = e->cfg->socket_dir;
	runlimit_adopt(&ctl->limits, e);
	ctl->stop_fd = eventfd(0, EFD_CLOEXEC);
	ctl->release_fd = eventfd(0, EFD_CLOEXEC);
	ret = ctl->stop_fd == -1 || ctl->release_fd == -1
		  ? -errno
		  : -pthread_create(&ctl->thread, NULL, control_main, ctl);
	if (ret == 0)
		(void)pthread_setname_np(ctl->thread, "an-control");
	if (ret != 0) {
		if (ctl->stop_fd >= 0)
			close(ctl->stop_fd);
		if (ctl->release_fd >= 0)
			close(ctl->release_fd);
		close(fd);
		if (!e->predecessor_serves)
			unlink(ctl->path);
		ctl->stop_fd = -1;
		ctl->release_fd = -1;
		ctl->listen_fd = -1;
		runlimit_free(&ctl->limits);
	}
	return ret;
}

void control_release(struct control *ctl)
{
	uint64_t one = 1;

	AN_ASSERT(ctl->release_fd >= 0);
	ssize_t n = write(ctl->release_fd, &one, sizeof(one));
	AN_ASSERT(n == (ssize_t)sizeof(one));
}

void control_stop(struct control *ctl)
{
	if (ctl->listen_fd < 0)
		return;
	uint64_t one = 1;
	ssize_t n = write(ctl->stop_fd, &one, sizeof(one));
	AN_ASSERT(n == (ssize_t)sizeof(one));
	pthread_join(ctl->thread, NULL);
	runlimit_free(&ctl->limits);
	close(ctl->stop_fd);
	close(ctl->release_fd);
	close(ctl->listen_fd);
	if (!ctl->handed_over && !ctl->e->predecessor_serves)
		unlink(ctl->path); /* else the new daemon's, or still the old one's */
	ctl->stop_fd = -1;
	ctl->release_fd = -1;
	ctl->listen_fd = -1;
}
