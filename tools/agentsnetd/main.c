/*
 * agentsnetd: the host daemon. Loads the policy (a file, or the embedded
 * default), applies command-line overrides, probes io_uring, opens the audit
 * trail, starts the engine and waits for a signal: SIGINT/SIGTERM stop it,
 * SIGHUP reloads the policy (as `policy reload` on the control socket does);
 * SIGUSR1 reopens the audit file (as `audit reopen` does), for log rotation.
 * The exit status is 0 only when the engine stopped with nothing leaked.
 *
 * Under a service manager ($NOTIFY_SOCKET: systemd's Type=notify, the unit in
 * deploy/systemd/) it says READY=1 once every sandbox socket listens,
 * RELOADING=1 and READY=1 around each reload, STOPPING=1, and a STATUS line;
 * with a watchdog ($WATCHDOG_USEC) it says WATCHDOG=1 only after every worker
 * answered a ping, so a worker whose loop hangs gets the daemon restarted.
 *
 * A reload re-reads the file whole and swaps the compiled policy in; a file
 * that does not load, or that drops a profile a running sandbox uses, is
 * refused and the running policy stays. Either way the outcome is logged and
 * audited. The `daemon:` settings and resolver.servers are read at start
 * only: a reload that changes them says so and leaves them.
 *
 * This file is the top of the dependency graph: it is the one place that
 * wires policy/ into core/ (through core/verdict.h), so core/ never includes
 * policy/.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/cgroup.h"
#include "core/config.h"
#include "core/control.h"
#include "core/dns.h"
#include "core/engine.h"
#include "core/handover.h"
#include "core/layout.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/notify.h"
#include "core/pool.h"
#include "core/reason.h"
#include "core/ring.h"
#include "policy/policy.h"
#include "tls/term.h"
#include "tls/tls.h"

#define AGENTSNETD_VERSION "0.1.0"

struct options {
	const char *config_path;
	const char *check_path;
	const char *socket_dir;
	const char *audit_path;
	const char *tcp_listen;
	const char *tcp_sandbox;
	const char *ca_dir;  /* ca.pem and ca.key, as `agentsnet ca init` writes them */
	const char *ingress; /* the gateway's listen address, over daemon.ingress.listen */
	bool no_ingress;     /* no gateway, whatever the policy says */
	long workers;        /* -1: from the file */
	bool debug;
	bool upgrade; /* take the running daemon's sockets over (core/handover.h) */
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: agentsnetd [--config FILE] [--socket-dir DIR] [--audit FILE|-]\n"
		"                  [--workers N] [--listen 127.0.0.1:PORT --listen-sandbox ID]\n"
		"                  [--ca-dir DIR] [--ingress ADDR:PORT | --no-ingress]\n"
		"                  [--debug] [--upgrade]\n"
		"       agentsnetd --check-config FILE\n"
		"With no --config, runs on the embedded default policy. --upgrade takes every\n"
		"socket of the daemon running on the same socket directory over, without a gap,\n"
		"and has it drain and stop once this one serves.\n");
}

static int parse_number(const char *s, long max, long *out)
{
	long v = 0;

	if (*s == '\0')
		return -EINVAL;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || v > max)
			return -EINVAL;
		v = v * 10 + (*s - '0');
	}
	if (v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longs[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", required_argument, NULL, 'C' },
		{ "socket-dir", required_argument, NULL, 's' },
		{ "audit", required_argument, NULL, 'a' },
		{ "workers", required_argument, NULL, 'w' },
		{ "listen", required_argument, NULL, 'l' },
		{ "listen-sandbox", required_argument, NULL, 'L' },
		{ "ca-dir", required_argument, NULL, 'A' },
		{ "ingress", required_argument, NULL, 'I' },
		{ "no-ingress", no_argument, NULL, 'N' },
		{ "debug", no_argument, NULL, 'd' },
		{ "upgrade", no_argument, NULL, 'U' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	*o = (struct options){ .workers = -1 };
	while ((opt = getopt_long(argc, argv, "c:", longs, NULL)) != -1) {
		switch (opt) {
		case 'c':
			o->config_path = optarg;
			break;
		case 'C':
			o->check_path = optarg;
			break;
		case 's':
			o->socket_dir = optarg;
			break;
		case 'a':
			o->audit_path = optarg;
			break;
		case 'w':
			if (parse_number(optarg, LIMITS_WORKERS_MAX, &o->workers) != 0) {
				fprintf(stderr, "agentsnetd: --workers %s: not 0..%u\n", optarg,
					LIMITS_WORKERS_MAX);
				return 2;
			}
			break;
		case 'l':
			o->tcp_listen = optarg;
			break;
		case 'L':
			o->tcp_sandbox = optarg;
			break;
		case 'A':
			o->ca_dir = optarg;
			break;
		case 'I':
			o->ingress = optarg;
			break;
		case 'N':
			o->no_ingress = true;
			break;
		case 'd':
			o->debug = true;
			break;
		case 'U':
			o->upgrade = true;
			break;
		case 'V':
			printf("agentsnetd %s\n", AGENTSNETD_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	return -1;
}

static int load(const struct options *o, struct config *cfg, struct policy **pol)
{
	char err[512];
	const char *path = o->check_path ? o->check_path : o->config_path;
	int ret;

	if (config_init_defaults(cfg) != 0)
		return -ENOMEM;
	ret = policy_load_or_default(path, cfg, pol, err, sizeof(err));
	if (ret != 0) {
		fprintf(stderr, "%s\n", err);
		return ret;
	}
	return 0;
}

static int apply_overrides(const struct options *o, struct config *cfg)
{
	int ret = 0;

	if (o->socket_dir != NULL) {
		/* As the policy's daemon.socket_dir must be (policy/daemon.c). */
		if (o->socket_dir[0] != '/' ||
		    strlen(o->socket_dir) > LAYOUT_SOCKET_DIR_BYTES_MAX) {
			fprintf(
			    stderr,
			    "agentsnetd: --socket-dir %s: must be an absolute path of at most %u "
			    "bytes (the paths of its sockets of fixed name, " LAYOUT_INTERNAL_INGRESS_SOCKET
			    " the longest, must fit the 107 bytes "
			    "of a Unix socket's)\n",
			    o->socket_dir, (unsigned)LAYOUT_SOCKET_DIR_BYTES_MAX);
			return -1;
		}
		ret |= config_set_string(&cfg->socket_dir, o->socket_dir);
	}
	if (o->audit_path != NULL)
		ret |= config_set_string(&cfg->audit_path, o->audit_path);
	if (o->tcp_listen != NULL)
		ret |= config_set_string(&cfg->tcp_listen, o->tcp_listen);
	if (o->tcp_sandbox != NULL)
		ret |= config_set_string(&cfg->tcp_sandbox, o->tcp_sandbox);
	if (o->ca_dir != NULL) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/ca.pem", o->ca_dir);
		ret |= config_set_string(&cfg->ca_cert, path);
		snprintf(path, sizeof(path), "%s/ca.key", o->ca_dir);
		ret |= config_set_string(&cfg->ca_key, path);
	}
	if (o->ingress != NULL) {
		ret |= config_set_string(&cfg->ingress_listen, o->ingress);
		cfg->ingress_optional = false; /* asked for by name: a taken port is an error */
	}
	if (o->no_ingress)
		ret |= config_set_string(&cfg->ingress_listen, NULL);
	if (o->workers >= 0)
		cfg->workers = (uint32_t)o->workers;
	if (cfg->workers == 0) {
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->workers = cores > 0 ? (uint32_t)cores : 1u;
	}
	if (cfg->workers > LIMITS_WORKERS_MAX)
		cfg->workers = LIMITS_WORKERS_MAX;
	if (cfg->tcp_listen != NULL && cfg->tcp_sandbox == NULL && cfg->sandbox_count > 0)
		ret |= config_set_string(&cfg->tcp_sandbox, cfg->sandboxes[0].id);
	return ret == 0 ? 0 : -ENOMEM;
}

/* One reload at a time; also serialises the main thread's audit ring. */
static pthread_mutex_t daemon_lock = PTHREAD_MUTEX_INITIALIZER;

static void notice(struct audit *a, uint32_t ring, const char *detail)
{
	struct audit_ring *r = audit_ring_get(a, ring);
	struct audit_record *rec = audit_claim(r);

	if (rec == NULL)
		return;
	rec->kind = AUDIT_NOTICE;
	rec->id = audit_next_id(r);
	rec->allowed = true;
	audit_copy(rec->detail, sizeof(rec->detail), detail, strlen(detail));
	audit_commit(r, rec);
}

/* The running daemon, for reloads. */
struct daemon {
	const struct options *o;
	const struct config *cfg; /* the running settings */
	struct engine *e;
	struct audit *audit;
	const struct notify *manager; /* the service manager's socket (core/notify.h) */
};

/* Tells the service manager <fields> ("READY=1\n", ...) and the engine's STATUS line. */
static void manager_tell(const struct daemon *d, const char *fields)
{
	char status[200];
	char state[300];

	if (!notify_on(d->manager))
		return;
	engine_status_line(d->e, status, sizeof(status));
	snprintf(state, sizeof(state), "%sSTATUS=%s", fields, status);
	int ret = notify_send(d->manager, state);
	if (ret != 0)
		log_warn("service manager: %s", strerror(-ret));
}

/* CLOCK_MONOTONIC in microseconds, as RELOADING=1's MONOTONIC_USEC wants it. */
static unsigned long long monotonic_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u;
}

static bool text_differs(const char *a, const char *b)
{
	return (a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0);
}

/* Warns about each start-only setting <fresh> changes; they stay as <run> has them. */
static void settings_compare(const struct config *run, const struct config *fresh)
{
	const struct {
		const char *name;
		bool differs;
	} settings[] = {
		{ "daemon.socket_dir", text_differs(run->socket_dir, fresh->socket_dir) },
		{ "daemon.audit_log", text_differs(run->audit_path, fresh->audit_path) },
		{ "daemon.listen", text_differs(run->tcp_listen, fresh->tcp_listen) },
		{ "daemon.control_group", text_differs(run->control_group, fresh->control_group) },
		{ "daemon.ingress",
		  text_differs(run->ingress_listen, fresh->ingress_listen) ||
		      text_differs(run->ingress_public_url, fresh->ingress_public_url) ||
		      text_differs(run->ingress_prefix, fresh->ingress_prefix) ||
		      run->ingress_origins != fresh->ingress_origins ||
		      text_differs(run->ingress_tls_cert, fresh->ingress_tls_cert) ||
		      text_differs(run->ingress_tls_key, fresh->ingress_tls_key) },
		{ "resolver.servers", text_differs(run->dns_servers, fresh->dns_servers) },
		{ "daemon.workers", run->workers != fresh->workers },
		{ "daemon.conns_per_worker", run->conns_per_worker != fresh->conns_per_worker },
		{ "daemon.pipes_per_worker", run->pipes_per_worker != fresh->pipes_per_worker },
		{ "daemon.metrics", text_differs(run->metrics_listen, fresh->metrics_listen) ||
					run->metrics_sandboxes != fresh->metrics_sandboxes },
		{ "daemon.alert_webhook",
		  text_differs(run->alert_webhook_url, fresh->alert_webhook_url) ||
		      text_differs(run->alert_webhook_authorization,
				   fresh->alert_webhook_authorization) ||
		      text_differs(run->alert_webhook_ca_file, fresh->alert_webhook_ca_file) ||
		      run->alert_webhook_timeout_ms != fresh->alert_webhook_timeout_ms },
		{ "daemon timeouts", run->head_timeout_ms != fresh->head_timeout_ms ||
					 run->connect_timeout_ms != fresh->connect_timeout_ms ||
					 run->dns_timeout_ms != fresh->dns_timeout_ms ||
					 run->idle_timeout_ms != fresh->idle_timeout_ms ||
					 run->body_timeout_ms != fresh->body_timeout_ms ||
					 run->response_timeout_ms != fresh->response_timeout_ms ||
					 run->drain_timeout_ms != fresh->drain_timeout_ms ||
					 run->handover_timeout_ms != fresh->handover_timeout_ms },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(settings); i++) {
		if (settings[i].differs)
			log_warn("reload: %s changed; it is read at start only (restart to apply)",
				 settings[i].name);
	}
}

static int apply_overrides(const struct options *o, struct config *cfg);

/* engine.reload: re-reads the file and swaps it in. Control thread or main thread. */
static int reload(void *arg, char *msg, size_t cap)
{
	struct daemon *d = arg;
	struct config fresh;
	struct policy *pol = NULL;
	char err[512] = "";
	char detail[128];

	pthread_mutex_lock(&daemon_lock);
	char reloading[64];
	snprintf(reloading, sizeof(reloading), "RELOADING=1\nMONOTONIC_USEC=%llu\n",
		 monotonic_usec());
	manager_tell(d, reloading);
	int ret = config_init_defaults(&fresh);
	if (ret == 0)
		ret = policy_load_or_default(d->o->config_path, &fresh, &pol, err, sizeof(err));
	if (ret == 0 && apply_overrides(d->o, &fresh) != 0)
		ret = -ENOMEM;
	if (ret == 0) {
		ret = engine_policy_swap(d->e, pol, &fresh, err, sizeof(err));
		if (ret != 0)
			policy_free(pol);
	}
	if (ret == 0) {
		settings_compare(d->cfg, &fresh);
		log_info("reload: %s", err);
	} else {
		if (err[0] == '\0')
			snprintf(err, sizeof(err), "%s", strerror(-ret));
		log_error("reload refused, the running policy stays: %s", err);
		atomic_fetch_add(&d->e->reloads_refused, 1);
	}
	/* The audit's detail field holds 127 bytes: the log line has the rest. */
	snprintf(detail, sizeof(detail), "%s: %.100s",
		 ret == 0 ? "policy_reloaded" : "policy_reload_refused", err);
	notice(d->audit, d->cfg->workers, detail);
	snprintf(msg, cap, "%s", err);
	config_free(&fresh);
	manager_tell(d, "READY=1\n"); /* the new policy, or the one that stayed */
	pthread_mutex_unlock(&daemon_lock);
	return ret;
}

/* How long SIGUSR1 waits for the audit writer to reopen its file. */
#define AUDIT_REOPEN_WAIT_MS 5000u
/* How often the STATUS line is refreshed without a watchdog. */
#define MANAGER_STATUS_MS 5000u

/*
 * The service manager's watchdog, once a tick: WATCHDOG=1 only when every
 * worker answered a ping within <wait_ms> (engine_workers_answer), so a
 * worker whose loop hangs gets the daemon restarted; else the log and the
 * STATUS line name it.
 */
static void watchdog_tick(struct daemon *d, uint32_t wait_ms)
{
	uint32_t late = 0;

	if (engine_workers_answer(d->e, wait_ms, &late) == 0) {
		manager_tell(d, "WATCHDOG=1\n");
		return;
	}
	log_error("watchdog: worker %u did not answer within %u ms: the service manager is not "
		  "told that the daemon lives",
		  late, wait_ms);
	char fields[96];
	snprintf(fields, sizeof(fields), "STATUS=worker %u does not answer\n", late);
	(void)notify_send(d->manager, fields);
}

/*
 * The signals the daemon takes (stop, reload, reopen the audit log) and those
 * it does not use whose default would end or stop it (SIGUSR2, SIGQUIT,
 * SIGALRM, the job-control stops, the real-time ones, ...): every thread
 * blocks both, and wait_for_stop takes them, so a stray `kill -USR2` or a
 * terminal's Ctrl-\ is logged and ignored rather than the end of every
 * sandbox's network. SIGPIPE is blocked too (a send to a closed socket is an
 * error return); SIGSEGV and the other synchronous faults keep their default.
 */
static void signals_used(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR1);
}

static void signals_ignored(sigset_t *set)
{
	static const int fatal_unused[] = {
		SIGUSR2, SIGQUIT,   SIGALRM, SIGVTALRM, SIGPROF, SIGIO,
		SIGPWR,  SIGSTKFLT, SIGXCPU, SIGTSTP,   SIGTTIN, SIGTTOU
	};

	sigemptyset(set);
	for (size_t i = 0; i < AN_ARRAY_LEN(fatal_unused); i++)
		sigaddset(set, fatal_unused[i]);
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		sigaddset(set, sig);
}

/* Every signal wait_for_stop takes: the used and the ignored. */
static void signals_taken(sigset_t *set)
{
	sigset_t ignored;

	signals_used(set);
	signals_ignored(&ignored);
	for (int sig = 1; sig <= SIGRTMAX; sig++) {
		if (sigismember(&ignored, sig) == 1)
			sigaddset(set, sig);
	}
}

/*
 * Blocks until SIGINT or SIGTERM; each SIGHUP reloads the policy, each SIGUSR1
 * reopens the audit file. Under a
 * service manager, wakes every quarter of the watchdog's interval for its
 * tick (each worker then given at most another quarter, over them all, to
 * answer: a ping at least every half interval), or every MANAGER_STATUS_MS
 * to refresh the STATUS line.
 */
static void wait_for_stop(struct daemon *d)
{
	sigset_t set;
	int sig = 0;
	bool watchdog = d->manager->watchdog_usec > 0;
	uint64_t tick_ms = watchdog                ? d->manager->watchdog_usec / 4000u + 1u
			   : notify_on(d->manager) ? MANAGER_STATUS_MS
						   : 0;
	uint32_t wait_ms = (uint32_t)(tick_ms / (d->cfg->workers > 0 ? d->cfg->workers : 1u) + 1u);
	uint64_t next_ms = monotonic_usec() / 1000u + tick_ms;

	sigset_t ignored;
	signals_taken(&set);
	signals_ignored(&ignored);
	for (;;) {
		if (tick_ms == 0) {
			if (sigwait(&set, &sig) != 0)
				continue;
		} else {
			/* The tick keeps its pace whatever signals come between. */
			uint64_t now_ms = monotonic_usec() / 1000u;
			uint64_t left_ms = next_ms > now_ms ? next_ms - now_ms : 0;
			struct timespec ts = { .tv_sec = (time_t)(left_ms / 1000u),
					       .tv_nsec = (long)(left_ms % 1000u) * 1000000L };
			sig = left_ms > 0 ? sigtimedwait(&set, NULL, &ts) : -1;
			if (sig < 0 && (left_ms == 0 || errno == EAGAIN)) {
				next_ms = now_ms + left_ms + tick_ms;
				if (watchdog)
					watchdog_tick(d, wait_ms);
				else
					manager_tell(d, "");
			}
			if (sig < 0)
				continue;
		}
		if (sig == SIGHUP) {
			char msg[512];
			(void)reload(d, msg, sizeof(msg));
			continue;
		}
		if (sig == SIGUSR1) {
			int ret = audit_reopen(d->audit, AUDIT_REOPEN_WAIT_MS);
			if (ret == 0)
				log_info("audit: reopened %s", d->cfg->audit_path);
			else
				log_error("audit: reopen %s: %s", d->cfg->audit_path,
					  strerror(-ret));
			continue;
		}
		if (sigismember(&ignored, sig) == 1) {
			const char *name = sigabbrev_np(sig);
			char rt[16];
			if (name == NULL && sig >= SIGRTMIN && sig <= SIGRTMAX) {
				snprintf(rt, sizeof(rt), "RTMIN+%d", sig - SIGRTMIN);
				name = rt;
			}
			log_warn("signal %s%s (%d): not one agentsnetd uses; ignored (SIGTERM or "
				 "SIGINT stops it, SIGHUP reloads the policy, SIGUSR1 reopens the "
				 "audit log)",
				 name != NULL ? "SIG" : "", name != NULL ? name : "", sig);
			continue;
		}
		log_info("signal %d: stopping", sig);
		return;
	}
}

/* The gid of <name>, or -1 when <name> is NULL. 0 or -ENOENT (logged). */
static int control_group_resolve(const char *name, gid_t *gid)
{
	struct group grp;
	struct group *found = NULL;
	char buf[4096];

	if (name == NULL)
		return 0;
	if (getgrnam_r(name, &grp, buf, sizeof(buf), &found) != 0 || found == NULL) {
		log_error("daemon.control_group: no group named %s", name);
		return -ENOENT;
	}
	*gid = found->gr_gid;
	return 0;
}

/* Logs which TLS path the terminated tiers use (userspace: the kernel probe says why). */
static void tls_log_path(const struct config *cfg)
{
	int ktls = tls_term_ktls_probe();
	if (ktls == 0)
		log_info("TLS: terminating with the CA %s; the kernel has TLS (TCP_ULP tls), "
			 "records are still sealed in userspace",
			 cfg->ca_cert);
	else
		log_info("TLS: terminating with the CA %s; kernel TLS unavailable (TCP_ULP tls: "
			 "%s): userspace TLS",
			 cfg->ca_cert, strerror(-ktls));
}

/*
 * TLS, when the daemon needs it: the CA of the terminated tiers (daemon.ca
 * or --ca-dir) and the operator's certificate of the gateway's public
 * listener (daemon.ingress.tls). Either one that does not load stops the
 * start. Without a CA the log says what that means; with neither, *<out>
 * stays NULL. 0 or -1.
 */
static int tls_open(const struct config *cfg, struct tls_term **out)
{
	char err[512];
	bool public_tls = cfg->ingress_listen != NULL && cfg->ingress_tls_cert != NULL;
	/* The alert webhook's client sessions come from here too (core/webhook.h). */
	bool webhook_tls = cfg->alert_webhook_url != NULL &&
			   strncasecmp(cfg->alert_webhook_url, "https://", 8) == 0;

	*out = NULL;
	if (cfg->ca_cert == NULL)
		log_info(
		    "no CA (daemon.ca or --ca-dir): CONNECTs to fake-response rules are refused "
		    "tier_unavailable; plain http:// ones are answered");
	if (cfg->ca_cert == NULL && !public_tls && !webhook_tls)
		return 0;
	int ret = tls_library_init(err, sizeof(err));
	if (ret == 0)
		ret =
		    tls_term_open(cfg->ca_cert, cfg->ca_key, cfg->leaf_days, out, err, sizeof(err));
	if (ret == 0 && public_tls)
		ret = tls_term_public_load(*out, cfg->ingress_tls_cert, cfg->ingress_tls_key, err,
					   sizeof(err));
	if (ret != 0) {
		log_error("TLS: %s", err);
		tls_term_close(out);
		return -1;
	}
	if (cfg->ca_cert != NULL)
		tls_log_path(cfg);
	if (public_tls)
		log_info("ingress: HTTPS on %s with %s", cfg->ingress_listen,
			 cfg->ingress_tls_cert);
	return 0;
}

/*
 * The stop's first half (engine_drain): what is under way may finish for up
 * to <drain_ms>, and what arrives meanwhile is answered (or waits for the
 * next daemon in a socket the manager keeps, or is the <successor>'s, which
 * serves every socket already). 0: none, the stop aborts.
 */
static void drain(struct engine *e, bool successor, uint32_t drain_ms)
{
	if (drain_ms == 0)
		return;
	uint64_t began_us = monotonic_usec();
	log_info("draining for up to %u ms%s", drain_ms,
		 successor            ? " (the new daemon serves every socket)"
		 : e->manager != NULL ? " (every listener kept for the next daemon)"
				      : "");
	uint64_t left = engine_drain(e, successor, drain_ms);
	log_info("drained in %llu ms, %llu connections left to abort",
		 (unsigned long long)((monotonic_usec() - began_us) / 1000u),
		 (unsigned long long)left);
}

/* engine.stop_request: a successor serves; this daemon stops as on SIGTERM. */
static void stop_self(void *arg)
{
	(void)arg;
	(void)kill(getpid(), SIGTERM); /* the main thread's sigwait takes it */
}

/* The socket named <name> among <kept> (an upgrade's), taken out of it; -1: none. */
static int kept_take(struct notify_fd *kept, uint32_t count, const char *name)
{
	for (uint32_t i = 0; i < count; i++) {
		if (kept[i].fd >= 0 && strcmp(kept[i].name, name) == 0) {
			int fd = kept[i].fd;
			kept[i].fd = -1;
			return fd;
		}
	}
	return -1;
}

/*
 * <handover> (or -1): the connection to the old daemon that passed <kept>
 * (agentsnetd --upgrade); once this one serves, it is told "ready" there.
 */
static int serve(const struct options *o, struct config *cfg, struct policy *pol,
		 const struct notify *manager, struct notify_fd *kept, uint32_t kept_count,
		 int handover)
{
	struct engine e;
	struct audit *audit = NULL;
	char features[256];

	memset(&e, 0, sizeof(e));
	int ret = ring_probe(&e.features);
	if (ret != 0) {
		log_error("io_uring is unavailable: %s", strerror(-ret));
		policy_free(pol);
		return 1;
	}
	ring_features_describe(&e.features, features, sizeof(features));
	log_info("%s", features);
	if (!e.features.socket_direct || !e.features.multishot_recv) {
		log_error("this kernel lacks direct sockets or multishot receive (Linux >= 6.0)");
		policy_free(pol);
		return 1;
	}
	/* While we have one thread: the cgroups of unprivileged runs need the hierarchies in view. */
	if (geteuid() == 0 && (ret = cgroup_hierarchies_ensure()) != 0)
		log_warn("no cgroup hierarchy in view (%s): unprivileged runs without a delegated "
			 "cgroup get no memory limit",
			 strerror(-ret));
	ret = audit_open(cfg->audit_path, cfg->workers + 1, &audit);
	if (ret != 0) {
		log_error("audit %s: %s", cfg->audit_path, strerror(-ret));
		policy_free(pol);
		return 1;
	}
	if (dns_library_init() != 0) {
		audit_close(audit);
		policy_free(pol);
		return 1;
	}
	struct tls_term *tls = NULL;
	if (tls_open(cfg, &tls) != 0) {
		dns_library_cleanup();
		audit_close(audit);
		policy_free(pol);
		return 1;
	}
	struct daemon d = { .o = o, .cfg = cfg, .e = &e, .audit = audit, .manager = manager };
	e.cfg = cfg;
	e.policy = pol; /* the engine's from here on */
	e.ops = &policy_verdict_ops;
	e.audit = audit;
	e.reload = reload;
	e.reload_arg = &d;
	e.term = tls != NULL ? &tls_term_ops : NULL;
	e.term_arg = tls;
	e.term_has_ca = tls != NULL && cfg->ca_cert != NULL;
	e.manager = notify_on(manager) ? manager : NULL;
	int kept_control = kept_take(kept, kept_count, "control");
	int kept_metrics = kept_take(kept, kept_count, ENGINE_FDNAME_METRICS);
	e.inherited = kept;
	e.inherited_count = kept_count;
	e.inherited_from = handover >= 0 ? "the old daemon" : NULL;
	e.predecessor_serves = handover >= 0;
	e.stop_request = stop_self;
	ret = engine_start(&e);
	if (ret == 0) {
		struct control ctl;
		struct metrics metrics;
		gid_t group = (gid_t)-1;
		/* The metrics listener before the control thread, which may hand it over. */
		ret = metrics_start(&metrics, &e, kept_metrics);
		kept_metrics = -1;
		if (ret == 0)
			ret = control_group_resolve(cfg->control_group, &group);
		if (ret == 0)
			/* Held in an upgrade: the old daemon serves until it takes the hand-over. */
			ret = control_start(&ctl, &e, group, kept_control, handover >= 0);
		else if (kept_control >= 0)
			close(kept_control);
		kept_control = -1;
		if (ret != 0)
			metrics_stop(&metrics);
		if (ret == 0 && handover >= 0) {
			/* Both serve the sockets now; the old daemon drains once told. */
			ret = handover_ready(handover);
			handover = -1;
			if (ret != 0) {
				log_error("upgrade: the old daemon did not take the hand-over: %s; "
					  "this one stops",
					  strerror(-ret));
				control_stop(&ctl);
				metrics_stop(&metrics);
			} else {
				e.predecessor_serves = false;
				control_release(&ctl);
				log_info("upgrade: every socket taken over; the old daemon drains");
			}
		}
		if (ret != 0) {
			engine_stop(&e);
			goto out;
		}
		engine_commit(&e); /* this daemon alone serves: what it left goes */
		pthread_mutex_lock(&daemon_lock);
		notice(audit, cfg->workers, "daemon_started");
		pthread_mutex_unlock(&daemon_lock);
		pthread_mutex_lock(&e.lock); /* the control thread may be adding sandboxes */
		uint32_t active = e.sandbox_active;
		pthread_mutex_unlock(&e.lock);
		log_status("ready (%u sandboxes, %u workers, audit %s, control %s)", active,
			   cfg->workers, cfg->audit_path, ctl.path);
		char ready[64];
		snprintf(ready, sizeof(ready), "READY=1\nMAINPID=%ld\n", (long)getpid());
		manager_tell(&d, ready);
		wait_for_stop(&d);
		manager_tell(&d, "STOPPING=1\n");
		control_stop(&ctl);
		/* Handed over: the successor answers scrapes, never both in turn. */
		if (atomic_load(&e.handed_over))
			metrics_stop(&metrics);
		drain(&e, atomic_load(&e.handed_over), cfg->drain_timeout_ms);
		metrics_stop(&metrics);
		ret = engine_stop(&e);
		notice(audit, cfg->workers,
		       ret == 0 ? "daemon_stopped" : "daemon_stopped_with_leak");
	}
out:
	if (kept_control >= 0)
		close(kept_control);
	if (kept_metrics >= 0)
		close(kept_metrics);
	if (handover >= 0)
		close(handover); /* the old daemon goes on serving */
	tls_term_close(&tls);
	dns_library_cleanup();
	audit_close(audit);
	return ret == 0 ? 0 : 1;
}

/* Descriptors a manager may pass at most: one a sandbox, and a few besides. */
#define KEPT_SOCKETS_MAX (LIMITS_SANDBOXES_MAX + 16u)

/*
 * The descriptors the service manager passed ($LISTEN_FDS: its file descriptor
 * store), into *<out> (owned, NULL when none). Their count, or -errno.
 */
static int kept_sockets(struct notify_fd **out)
{
	const char *count = getenv("LISTEN_FDS");
	unsigned long n = count != NULL ? strtoul(count, NULL, 10) : 0;

	*out = NULL;
	if (n > KEPT_SOCKETS_MAX)
		n = KEPT_SOCKETS_MAX; /* more: notify_listen_fds refuses them all, -E2BIG */
	if (n > 0 && (*out = pool_calloc(n, sizeof(**out))) == NULL)
		return -ENOMEM;
	int ret = notify_listen_fds(*out, (uint32_t)n);
	if (ret <= 0)
		AN_FREE(out);
	return ret;
}

/*
 * agentsnetd --upgrade: every socket of the daemon running on <cfg>'s socket
 * directory, passed over its control socket, into *<kept> (*<kept_count>), and
 * the connection to tell it "ready" on into *<handover>. 0, or -1 (logged).
 */
static int take_over(const struct config *cfg, int listen_fds, int *handover,
		     struct notify_fd **kept, int *kept_count)
{
	char path[PATH_MAX];
	char why[512];
	uint32_t count = 0;

	if (listen_fds > 0) {
		log_error("--upgrade takes the running daemon's sockets, and the service manager "
			  "passed some too ($LISTEN_FDS): one or the other");
		return -1;
	}
	int n = snprintf(path, sizeof(path), "%s/control.sock", cfg->socket_dir);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		log_error("--upgrade: %s/control.sock: path too long", cfg->socket_dir);
		return -1;
	}
	AN_FREE(kept);
	int ret = handover_take(path, handover, kept, &count, why, sizeof(why));
	if (ret != 0) {
		log_error("--upgrade: %s", why);
		return -1;
	}
	log_info("upgrade: the old daemon passed %u listening sockets", count);
	*kept_count = (int)count;
	return 0;
}

/* --check-config on a policy with no daemon.ca: each rule a CA would serve, warned of. */
struct no_ca_rules {
	const char *path;
};

static void warn_no_ca(void *arg, const char *profile, const char *rule, enum tier tier,
		       uint32_t line)
{
	const struct no_ca_rules *w = arg;

	fprintf(stderr,
		"%s:%u: warning: profile %s, rule %s (tier %s): the policy names no CA "
		"(daemon.ca), so unless the daemon is given one (--ca-dir) its CONNECTs are "
		"refused tier_unavailable%s\n",
		w->path, line, profile, rule, reason_tier_name(tier),
		tier == TIER_INJECT ? ", and its plain http:// requests always are" : "");
}

int main(int argc, char **argv)
{
	struct options o;
	struct config cfg;
	struct policy *pol = NULL;
	sigset_t set;

	struct notify manager;
	struct notify_fd *kept = NULL;
	int rc = parse_options(argc, argv, &o);
	if (rc >= 0)
		return rc;
	log_set_level(o.debug ? LOG_DEBUG : LOG_INFO);
	/* Before any thread (getenv, unsetenv); a manager that waits for READY=1 and cannot
	 * be told would wait out its timeout, so a bad address stops the start. */
	if ((rc = notify_open(&manager)) != 0) {
		log_error(
		    "$NOTIFY_SOCKET or $WATCHDOG_USEC: %s (a path, or @ and an abstract name; "
		    "a number of microseconds)",
		    strerror(-rc));
		return 1;
	}
	/* The sandboxes' sockets the manager kept across a crash or restart (engine.h). */
	int kept_count = kept_sockets(&kept);
	if (kept_count < 0) {
		log_error("$LISTEN_FDS, $LISTEN_PID or $LISTEN_FDNAMES: %s", strerror(-kept_count));
		notify_close(&manager);
		return 1;
	}
	/* Every thread inherits this mask; only wait_for_stop takes the signals. */
	signals_taken(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (load(&o, &cfg, &pol) != 0) {
		config_free(&cfg);
		notify_close(&manager);
		return 1;
	}
	if (o.check_path != NULL) {
		printf("%s: ok (%u profiles, %u rules, %u sandboxes)\n", o.check_path,
		       policy_profile_count(pol), policy_rule_count(pol), cfg.sandbox_count);
		if (cfg.ca_cert == NULL) {
			struct no_ca_rules warn = { .path = o.check_path };
			policy_terminated_rules(pol, &warn, warn_no_ca);
		}
		policy_free(pol);
		config_free(&cfg);
		notify_close(&manager);
		return 0;
	}
	if (apply_overrides(&o, &cfg) != 0) {
		policy_free(pol);
		config_free(&cfg);
		notify_close(&manager);
		return 1;
	}
	int handover = -1;
	if (o.upgrade && take_over(&cfg, kept_count, &handover, &kept, &kept_count) != 0) {
		policy_free(pol);
		config_free(&cfg);
		notify_close(&manager);
		return 1;
	}
	rc = serve(&o, &cfg, pol, &manager, kept, (uint32_t)kept_count, handover); /* takes pol */
	config_free(&cfg);
	notify_close(&manager);
	AN_FREE(&kept);
	return rc;
}
