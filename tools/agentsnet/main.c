/*
 * agentsnet: the operator CLI. `ca init` makes the demo CA (tools/agentsnet/cainit.c);
 * `sandbox add|rm|ls` and `ping` speak the control protocol (tools/agentsnet/ctl.c);
 * `run` registers a sandbox, runs a command through the bridge in it
 * (tools/agentsnet/sandbox.c) with the environment of tools/agentsnet/runenv.c (an allow-list of
 * the caller's, never the whole of it) and unregisters it again; `selftest`
 * tries to escape a real sandbox (tools/agentsnet/selftest.c).
 *
 * Exit codes of the daemon-facing commands: 0 ok, 1 the daemon said error
 * (or a local step failed), 2 usage, 3 the daemon is not reachable. `run`
 * exits with the bridge's status, which is the agent's; if the bridge was
 * killed by a signal, `run` kills itself with the same one after cleaning
 * up, so a calling shell sees exactly what it would have seen without us.
 *
 * `run` blocks its signals before its first step and keeps them blocked
 * (sandbox_wait takes them synchronously), so every exit path, a signal
 * included, goes through the `sandbox rm` at the end. Only a SIGKILL skips
 * it; the sandbox itself still dies then (PR_SET_PDEATHSIG), and the daemon
 * removes the registration once it sees the run gone (it looks once a second).
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/an.h"
#include "core/layout.h"
#include "core/procstart.h"
#include "core/uid.h"
#include "tools/agentsnet/cainit.h"
#include "tools/agentsnet/check.h"
#include "tools/agentsnet/ctl.h"
#include "tools/agentsnet/runenv.h"
#include "tools/agentsnet/top.h"
#include "tools/agentsnet/sandbox.h"
#include "tools/agentsnet/selftest.h"

#define AGENTSNET_VERSION        "0.1.0"
#define AGENTSNET_SOCKET_DIR     LAYOUT_SOCKET_DIR_DEFAULT
#define AGENTSNET_SOCKET_DIR_ENV "AGENTSNET_SOCKET_DIR"
#define AGENTSNET_BRIDGE_NAME    "agentsnet-bridge"
#define AGENTSNET_PROFILE        "default"
/* --pids-max's ceiling: the kernel's PID_MAX_LIMIT on 64-bit (pids.max refuses more). */
#define AGENTSNET_PIDS_MAX_LIMIT (4u << 20)
/* --memory-max's floor (but 0): less holds no agent, and "512" surely meant 512M. */
#define AGENTSNET_MEMORY_MAX_MIN (1ull << 20)

/* The usage text spells out the defaults: keep them equal. */
static_assert(SANDBOX_PIDS_MAX_DEFAULT == 4096, "usage text: --pids-max default 4096");
static_assert(SANDBOX_MEMORY_MAX_DEFAULT == 4ull << 30, "usage text: --memory-max default 4G");

static const char usage_text[] =
    "usage: agentsnet ca init --dir DIR [--days N] [--force] [--roots FILE]\n"
    "       agentsnet sandbox add ID [--profile NAME] [--uid UID] [--socket-dir DIR]\n"
    "       agentsnet sandbox rm ID [--socket-dir DIR]\n"
    "       agentsnet sandbox ls [--ids] [--socket-dir DIR]\n"
    "       agentsnet sandbox release ID [--socket-dir DIR]\n"
    "       agentsnet alerts [--socket-dir DIR]\n"
    "       agentsnet top [--interval SECONDS] [--once] [--socket-dir DIR]\n"
    "       agentsnet policy reload|status [--socket-dir DIR]\n"
    "       agentsnet audit reopen [--socket-dir DIR]\n"
    "       agentsnet ping [--socket-dir DIR]\n"
    "       agentsnet stats [--socket-dir DIR]\n"
    "       agentsnet run [--sandbox ID] [--profile NAME] [--socket-dir DIR] [--bridge PATH]\n"
    "                     [--ca PATH] [--public-url URL] [--user USER[:GROUP]]\n"
    "                     [--env NAME[=VALUE]]... [--env-file FILE]... [--pids-max N]\n"
    "                     [--memory-max SIZE] [--bind PATH]... [--ro-bind PATH]...\n"
    "                     [--probe PATH] -- CMD [ARGS...]\n"
    "       agentsnet selftest [--socket-dir DIR] [--bridge PATH] [--probe PATH] [--user USER]\n"
    "                          [-v]\n"
    "       agentsnet check [--config FILE] [--sandbox ID | --profile NAME] URL [METHOD]\n"
    "       agentsnet --help | --version\n"
    "\n"
    "ca init     writes DIR/ca.key (0600), DIR/ca.pem and DIR/bundle.pem (host roots + CA,\n"
    "            the file to mount as AGENT_CA_CERT); --days 1..3650, default 397.\n"
    "sandbox     registers, removes or lists sandboxes on the running agentsnetd; ls\n"
    "            shows each one's profile, owner, uptime, connections, decisions,\n"
    "            refusals and bytes (--ids: \"<id> <profile> <directory>\" lines).\n"
    "top         the same, refreshed every --interval (1 s), busiest first.\n"
    "policy      reload: agentsnetd re-reads its policy file (a bad one is refused and\n"
    "            the running policy stays); status: the generation it serves.\n"
    "audit       reopen: agentsnetd reopens its audit file by its path, after a rotator\n"
    "            moved it (as SIGUSR1 does); root only.\n"
    "stats       prints agentsnetd's counters, one line of <key> <value> pairs (the\n"
    "            keys and their order: docs/control.md).\n"
    "check       prints the decision agentsnetd would make for URL, from the same code\n"
    "            (exit 0 allow, 1 deny, 2 no decision: see agentsnet check --help).\n"
    "run         runs CMD through agentsnet-bridge in a sandbox with no network but lo,\n"
    "            its egress socket at /run/agentsnet/sandbox/egress.sock; exits with\n"
    "            CMD's status. --sandbox defaults to run-<16 random hex digits>,\n"
    "            --profile to default, --bridge to the agentsnet-bridge next to this\n"
    "            binary (or on PATH).\n"
    "            As root the agent runs as --user, never as root, and by default as a\n"
    "            uid (and gid) of its own, which agentsnetd gives from its\n"
    "            daemon.sandbox_uids while the sandbox lives, so that no other\n"
    "            sandbox or host service can pass for it; unprivileged, as you (in a\n"
    "            user namespace), and --user is refused.\n"
    "            Of your environment only PATH, HOME, USER, LOGNAME, SHELL, LANG,\n"
    "            LANGUAGE, LC_ALL and the other LC_ categories, TERM, COLORTERM, TZ,\n"
    "            NO_COLOR, FORCE_COLOR, CLICOLOR, COLUMNS, LINES, EDITOR, VISUAL, PAGER\n"
    "            and AGENT_NO_PROXY reach CMD;\n"
    "            --env NAME passes yours, --env NAME=VALUE sets one, --env-file FILE\n"
    "            reads NAME=VALUE lines ('#' comments, blank lines, \"export \", one pair\n"
    "            of surrounding quotes removed, nothing expanded); in order, the last\n"
    "            wins. Dropped variables that look like credentials are named on\n"
    "            stderr (never their values).\n"
    "            --pids-max (processes and threads, default 4096) and --memory-max\n"
    "            (bytes, or with K, M, G or T: binary; default 4G, at least 1M) bound\n"
    "            the sandbox; 0 for no limit. --probe PATH binds the executable at\n"
    "            " SANDBOX_PROBE_PATH " inside (agentsnet selftest uses it).\n"
    "            The sandbox's file system is its own: the host's /usr, /bin, /sbin,\n"
    "            /lib*, /etc and /opt read-only, the working directory read-write,\n"
    "            an empty home of its own at $HOME, a private /tmp and /var/tmp, and\n"
    "            nothing else of the host (no /home, /root, /var, /srv, /mnt...).\n"
    "            --bind PATH shows PATH read-write at the same path, --ro-bind PATH\n"
    "            read-only (at most 32; not /, nor in /proc, /dev, /run, /tmp,\n"
    "            /var/tmp, /sys; the real path: none through a symlink).\n"
    "selftest    runs escape probes in a real sandbox on this host and prints one line\n"
    "            per probe (closed, or OPEN with what got through); exit 0 when all are\n"
    "            closed (docs/sandbox.md).\n"
    "\n"
    "--socket-dir defaults to $AGENTSNET_SOCKET_DIR, else /run/agentsnet.\n"
    "Exit codes: 0 ok, 1 error, 2 usage, 3 agentsnetd not reachable; run: CMD's status,\n"
    "or 125 when the sandbox could not be started (the message says why).\n";

static int usage_error(const char *what)
{
	AN_ASSERT(what != NULL);
	AN_ASSERT(what[0] != '\0');
	fprintf(stderr, "agentsnet: %s (see agentsnet --help)\n", what);
	return CTL_EXIT_USAGE;
}

__attribute__((format(printf, 1, 2))) static int usage_errorf(const char *fmt, ...)
{
	char what[PATH_MAX + 512];
	va_list ap;

	AN_ASSERT(fmt != NULL);
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return usage_error(what);
}

static const char *default_socket_dir(void)
{
	const char *env = getenv(AGENTSNET_SOCKET_DIR_ENV);

	return env != NULL && env[0] != '\0' ? env : AGENTSNET_SOCKET_DIR;
}

/* Parses a decimal in 0..<max>; -EINVAL otherwise. */
static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
	uint64_t v = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(out != NULL);
	if (*s == '\0' || strlen(s) > 10)
		return -EINVAL;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* Parses a decimal in 0..<max>; -EINVAL otherwise. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(out != NULL);
	if (*s == '\0')
		return -EINVAL;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Parses a size: bytes, or a number with one of K, M, G, T (binary, either case). */
static int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	char digits[24];

	AN_ASSERT(s != NULL);
	AN_ASSERT(out != NULL);
	size_t len = strlen(s);
	if (len == 0 || len >= sizeof(digits))
		return -EINVAL;
	char last =
	    s[len - 1] >= 'a' && s[len - 1] <= 'z' ? (char)(s[len - 1] - 'a' + 'A') : s[len - 1];
	const char *unit = len > 1 ? memchr(units, last, sizeof(units) - 1) : NULL;
	unsigned shift = unit != NULL ? 10u * (unsigned)(unit - units + 1) : 0;
	memcpy(digits, s, len - (unit != NULL));
	digits[len - (unit != NULL)] = '\0';
	uint64_t v;
	if (parse_u64(digits, UINT64_MAX >> shift, &v) != 0)
		return -EINVAL;
	*out = v << shift;
	AN_ASSERT(*out >> shift == v);
	return 0;
}

/* ---- ca init ---- */

static int ca_main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "dir", required_argument, NULL, 'd' }, { "days", required_argument, NULL, 'n' },
		{ "force", no_argument, NULL, 'f' },     { "roots", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },      { NULL, 0, NULL, 0 },
	};
	struct ca_options o = { .days = CA_DAYS_DEFAULT };
	struct ca_result r;
	char err[PATH_MAX + 256];
	int opt;

	AN_ASSERT(argc >= 1);
	AN_ASSERT(strcmp(argv[0], "ca") == 0);
	if (argc < 2 || strcmp(argv[1], "init") != 0)
		return usage_error("ca: the only subcommand is init");
	optind = 0;
	while ((opt = getopt_long(argc - 1, argv + 1, "", longs, NULL)) != -1) {
		if (opt == 'd')
			o.dir = optarg;
		else if (opt == 'n' && parse_u32(optarg, CA_DAYS_MAX, &o.days) == 0 && o.days > 0)
			continue;
		else if (opt == 'n')
			return usage_error("ca init: --days must be 1..3650");
		else if (opt == 'f')
			o.force = true;
		else if (opt == 'r')
			o.host_roots = optarg;
		else if (opt == 'h')
			return fputs(usage_text, stdout) >= 0 ? 0 : 1;
		else
			return usage_error("ca init: unknown option");
	}
	if (o.dir == NULL || optind != argc - 1)
		return usage_error("ca init: --dir DIR is required, and nothing else");
	int ret = ca_init(&o, &r, err, sizeof(err));
	if (ret != 0) {
		fprintf(stderr, "agentsnet: ca init: %s\n", err);
		return ret == -EINVAL ? CTL_EXIT_USAGE : CTL_EXIT_ERROR;
	}
	printf("agentsnet: created \"%s\", valid %u days\n"
	       "  key     %s (mode 0600: keep it on this host)\n"
	       "  cert    %s\n"
	       "  bundle  %s (host roots + CA: mount it as AGENT_CA_CERT)\n"
	       "  SHA-256 %s\n",
	       r.subject_cn, o.days, r.key_path, r.cert_path, r.bundle_path, r.fingerprint);
	return 0;
}

/* ---- The control commands ---- */

static void control_path(const char *socket_dir, char *out, size_t cap)
{
	AN_ASSERT(socket_dir != NULL);
	AN_ASSERT(cap > 0);
	size_t len = strlen(socket_dir);
	while (len > 1 && socket_dir[len - 1] == '/')
		len--;
	snprintf(out, cap, "%.*s/%s", (int)len, socket_dir, CTL_SOCKET_NAME);
}

/*
 * Sends the request <words> (<n> of them) to the daemon under <socket_dir>
 * and prints what went wrong, if anything. Returns an exit code; <r> holds
 * the answer, if there was one, for the caller to free; *<call_err> the
 * exchange's own error (ctl_call's: 0 when the daemon answered).
 */
static int control_call(const char *socket_dir, int n, const char *const *words,
			struct ctl_reply *r, int *call_err)
{
	char path[PATH_MAX], req[CTL_REQUEST_BYTES_MAX], err[PATH_MAX + 128];

	AN_ASSERT(n >= 1);
	AN_ASSERT(r != NULL);
	*r = (struct ctl_reply){ .code = "", .text = "" };
	*call_err = 0;
	if (ctl_request_format(req, sizeof(req), n, words) < 0)
		return usage_error("bad request: sandbox ids and profile names are "
				   "[A-Za-z0-9_.-]{1,63}, not starting with '.'");
	control_path(socket_dir, path, sizeof(path));
	int ret = ctl_call(path, req, CTL_TIMEOUT_MS_DEFAULT, r, err, sizeof(err));
	*call_err = ret;
	if (ret != 0) {
		fprintf(stderr, "agentsnet: %s\n", err);
		return ctl_unreachable(ret) ? CTL_EXIT_UNREACHABLE : CTL_EXIT_ERROR;
	}
	if (!r->ok) {
		fprintf(stderr, "agentsnet: error %s: %s\n", r->code, r->text);
		return CTL_EXIT_ERROR;
	}
	return CTL_EXIT_OK;
}

/* control_call, when the caller needs no more than the exit code. */
static int control(const char *socket_dir, int n, const char *const *words, struct ctl_reply *r)
{
	int call_err = 0;
	return control_call(socket_dir, n, words, r, &call_err);
}

static int print_answer(const char *verb, struct ctl_reply *r)
{
	AN_ASSERT(r->ok);
	AN_ASSERT(verb != NULL);
	if (strcmp(verb, "ls") == 0) {
		if (ctl_ls_check(r) != 0) {
			fprintf(stderr, "agentsnet: malformed answer to sandbox ls\n");
			return CTL_EXIT_ERROR;
		}
		for (const char *l = r->more; l != NULL; l = ctl_reply_next(r, l))
			printf("%s\n", l);
	} else if (strcmp(verb, "table") == 0 && r->more_count > 0) {
		if (top_table(r, stdout) != 0) {
			fprintf(stderr, "agentsnet: malformed answer to sandbox stats\n");
			return CTL_EXIT_ERROR;
		}
	} else if (strcmp(verb, "table") == 0) {
		printf("no sandboxes\n");
	} else if (strcmp(verb, "alerts") == 0) {
		/* One alert a line, as JSON (docs/alerts.md), oldest first. */
		for (const char *l = r->more; l != NULL; l = ctl_reply_next(r, l))
			printf("%s\n", l);
		if (r->more_count == 0)
			printf("no alerts\n");
	} else if (r->text[0] != '\0') {
		printf("%s\n", r->text);
	}
	return fflush(stdout) == 0 ? CTL_EXIT_OK : CTL_EXIT_ERROR;
}

/* `agentsnet top [--interval SECONDS] [--once] [--socket-dir DIR]` (tools/agentsnet/top.h). */
static int top_main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "socket-dir", required_argument, NULL, 's' },
		{ "interval", required_argument, NULL, 'n' },
		{ "once", no_argument, NULL, '1' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket_dir = default_socket_dir();
	char path[PATH_MAX];
	double interval_s = 1.0;
	bool once = false;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		char *end = NULL;
		if (opt == 's') {
			socket_dir = optarg;
		} else if (opt == 'n') {
			interval_s = strtod(optarg, &end);
			if (end == optarg || *end != '\0' ||
			    !(interval_s >= 0.1 && interval_s <= 3600))
				return usage_error("--interval: seconds, 0.1 to 3600");
		} else if (opt == '1') {
			once = true;
		} else if (opt == 'h') {
			return fputs(usage_text, stdout) >= 0 ? 0 : 1;
		} else {
			return usage_error("unknown option");
		}
	}
	if (optind != argc)
		return usage_error("wrong arguments");
	control_path(socket_dir, path, sizeof(path));
	return top_run(path, (uint32_t)(interval_s * 1000.0), once, stdout);
}

/* `sandbox add|rm|ls|release ...`, `policy reload|status`, `audit reopen`, `ping`, `stats`
 * and `alerts` (<argv>[0] names which). */
static int control_main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "socket-dir", required_argument, NULL, 's' },
		{ "profile", required_argument, NULL, 'p' },
		{ "uid", required_argument, NULL, 'u' },
		{ "ids", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket_dir = default_socket_dir(), *profile = NULL, *uid = NULL;
	bool ids_only = false;
	const char *words[6] = { argv[0] };
	struct ctl_reply r;
	int opt, n = 1;

	AN_ASSERT(argc >= 1);
	AN_ASSERT(argv[0] != NULL);
	optind = 0;
	while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		if (opt == 's')
			socket_dir = optarg;
		else if (opt == 'p')
			profile = optarg;
		else if (opt == 'u')
			uid = optarg;
		else if (opt == 'i')
			ids_only = true;
		else if (opt == 'h')
			return fputs(usage_text, stdout) >= 0 ? 0 : 1;
		else
			return usage_error("unknown option");
	}
	for (int i = optind; i < argc && n < 4; i++)
		words[n++] = argv[i];
	/* A command of one word: the daemon's answer is its text. */
	bool single = strcmp(argv[0], "ping") == 0 || strcmp(argv[0], "stats") == 0 ||
		      strcmp(argv[0], "alerts") == 0;
	bool add = strcmp(argv[0], "sandbox") == 0 && n >= 2 && strcmp(words[1], "add") == 0;
	bool ls = strcmp(argv[0], "sandbox") == 0 && n == 2 && strcmp(words[1], "ls") == 0;
	if (optind + n - 1 != argc || (single && n != 1) || (!single && n < 2) ||
	    ((profile != NULL || uid != NULL) && !add) || (ids_only && !ls))
		return usage_error("wrong arguments");
	if (add && n == 3)
		words[n++] = profile != NULL ? profile : AGENTSNET_PROFILE;
	/* `sandbox ls` shows each sandbox's traffic: the daemon's `sandbox stats` as a table;
	 * `--ids` the bare list, "<id> <profile> <directory>" a line. */
	bool table =
	    strcmp(argv[0], "sandbox") == 0 && n == 2 && strcmp(words[1], "ls") == 0 && !ids_only;
	if (table)
		words[1] = "stats";
	/* --uid: the agent's user, by number or name; its egress socket is then that uid's. */
	char uid_text[16];
	if (add && uid != NULL && n == 4) {
		uint32_t id = 0;
		const struct passwd *pw = uid_parse(uid, &id) ? NULL : getpwnam(uid);
		if (pw == NULL && !uid_parse(uid, &id))
			return usage_error("--uid: no such user");
		snprintf(uid_text, sizeof(uid_text), "%u", pw != NULL ? (unsigned)pw->pw_uid : id);
		words[n++] = "uid";
		words[n++] = uid_text;
	}
	int rc = control(socket_dir, n, words, &r);
	if (rc == CTL_EXIT_OK)
		rc = print_answer(table ? "table" : single ? argv[0] : words[1], &r);
	ctl_reply_free(&r);
	return rc;
}

/* ---- run ---- */

struct run_options {
	const char *id;
	const char *profile;
	const char *socket_dir;
	const char *bridge;
	const char *ca;
	const char *public_url;
	const char *user;
	const char *probe;
	struct sandbox_limits limits;
	struct runenv *env; /* borrowed: the agent's environment, --env and --env-file applied */
	char **cmd;
	char id_buf[32];
	struct sandbox_bind binds[SANDBOX_BINDS_MAX]; /* --bind, --ro-bind, canonical */
	size_t n_binds;
};

/* The canonical paths of run's --bind and --ro-bind (one run per process). */
static char run_bind_paths[SANDBOX_BINDS_MAX][PATH_MAX];

/* --bind or --ro-bind <arg>: -1 to go on, or an exit code. */
static int run_bind(struct run_options *o, int opt, const char *arg)
{
	const char *flag = opt == 'B' ? "--bind" : "--ro-bind";
	char err[PATH_MAX + 128];

	AN_ASSERT(opt == 'B' || opt == 'R');
	AN_ASSERT(o->n_binds <= SANDBOX_BINDS_MAX);
	if (o->n_binds == SANDBOX_BINDS_MAX)
		return usage_errorf("run: %s %s: more than %u binds", flag, arg, SANDBOX_BINDS_MAX);
	char *canon = run_bind_paths[o->n_binds];
	char cwd[PATH_MAX];
	/* As written, never resolved: the sandbox refuses a path through a symlink. */
	int ret = sandbox_path_normal(arg, getcwd(cwd, sizeof(cwd)), canon, PATH_MAX);
	if (ret != 0)
		return usage_errorf("run: %s %s: %s", flag, arg,
				    ret == -EINVAL ? "empty, or with a \"..\" component"
						   : strerror(-ret));
	if (sandbox_bind_check(canon, err, sizeof(err)) != 0)
		return usage_errorf("run: %s %s", flag, err);
	o->binds[o->n_binds].path = canon;
	o->binds[o->n_binds].read_only = opt == 'R';
	o->n_binds++;
	return -1;
}

/* --env or --env-file <arg>, applied in order: -1 to go on, or an exit code. */
static int run_env(struct run_options *o, int opt, const char *arg)
{
	char err[PATH_MAX + 256];

	AN_ASSERT(opt == 'e' || opt == 'F');
	AN_ASSERT(arg != NULL);
	int ret = opt == 'e' ? runenv_set(o->env, arg, environ, err, sizeof(err))
			     : runenv_load_file(o->env, arg, err, sizeof(err));
	if (ret == 0)
		return -1;
	if (opt == 'e' && (ret == -EINVAL || ret == -ENOENT))
		return usage_errorf("run: %s", err);
	fprintf(stderr, "agentsnet: %s\n", err);
	return CTL_EXIT_ERROR;
}

/* --pids-max or --memory-max <arg>: -1 to go on, or an exit code. */
static int run_limit(struct run_options *o, int opt, const char *arg)
{
	uint64_t v;

	AN_ASSERT(opt == 'P' || opt == 'M');
	AN_ASSERT(arg != NULL);
	if (opt == 'P') {
		if (parse_u64(arg, AGENTSNET_PIDS_MAX_LIMIT, &v) != 0)
			return usage_errorf("run: --pids-max '%s': a number of processes, 0 (no "
					    "limit) to %u",
					    arg, AGENTSNET_PIDS_MAX_LIMIT);
		o->limits.pids_max = v;
		return -1;
	}
	if (parse_size(arg, &v) != 0 || (v != 0 && v < AGENTSNET_MEMORY_MAX_MIN))
		return usage_errorf("run: --memory-max '%s': bytes, or a number with K, M, G or T "
				    "(binary), at least 1M; 0 for no limit",
				    arg);
	o->limits.memory_max_bytes = v;
	return -1;
}

/* One option of `run` other than --help: -1 to go on, or an exit code. */
static int run_option(struct run_options *o, int opt, const char *arg)
{
	if (opt == 'e' || opt == 'F')
		return run_env(o, opt, arg);
	if (opt == 'P' || opt == 'M')
		return run_limit(o, opt, arg);
	if (opt == 'B' || opt == 'R')
		return run_bind(o, opt, arg);
	const char **slot = opt == 'i'   ? &o->id
			    : opt == 'p' ? &o->profile
			    : opt == 's' ? &o->socket_dir
			    : opt == 'b' ? &o->bridge
			    : opt == 'c' ? &o->ca
			    : opt == 'u' ? &o->public_url
			    : opt == 'U' ? &o->user
			    : opt == 'x' ? &o->probe
					 : NULL;
	if (slot == NULL)
		return usage_error("run: unknown option");
	*slot = arg;
	return -1;
}

static int run_parse(int argc, char **argv, struct run_options *o)
{
	static const struct option longs[] = {
		{ "sandbox", required_argument, NULL, 'i' },
		{ "profile", required_argument, NULL, 'p' },
		{ "socket-dir", required_argument, NULL, 's' },
		{ "bridge", required_argument, NULL, 'b' },
		{ "ca", required_argument, NULL, 'c' },
		{ "public-url", required_argument, NULL, 'u' },
		{ "user", required_argument, NULL, 'U' },
		{ "env", required_argument, NULL, 'e' },
		{ "env-file", required_argument, NULL, 'F' },
		{ "pids-max", required_argument, NULL, 'P' },
		{ "memory-max", required_argument, NULL, 'M' },
		{ "probe", required_argument, NULL, 'x' },
		{ "bind", required_argument, NULL, 'B' },
		{ "ro-bind", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	AN_ASSERT(argc >= 1);
	AN_ASSERT(o->env != NULL);
	optind = 0;
	/* "+": the first word that is not an option starts the command. */
	while ((opt = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
		if (opt == 'h')
			return fputs(usage_text, stdout) >= 0 ? 0 : 1;
		int rc = run_option(o, opt, optarg);
		if (rc >= 0)
			return rc;
	}
	if (optind >= argc)
		return usage_error("run: no command (agentsnet run [OPTIONS] -- CMD [ARGS...])");
	o->cmd = argv + optind;
	if (o->id == NULL) {
		/* Unguessable: an id someone can predict is one they can register first. */
		uint64_t r;
		if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			fprintf(stderr, "agentsnet: getrandom: %s\n", strerror(errno));
			return CTL_EXIT_ERROR;
		}
		snprintf(o->id_buf, sizeof(o->id_buf), "run-%016" PRIx64, r);
		o->id = o->id_buf;
	}
	if (!ctl_id_valid(o->id) || !ctl_profile_valid(o->profile))
		return usage_error("run: sandbox ids and profile names are [A-Za-z0-9_.-]{1,63}, "
				   "not starting with '.'");
	return -1;
}

/* The bridge next to this binary, else the first on PATH; into <out> (PATH_MAX bytes). */
static int find_bridge(char *out)
{
	char exe[PATH_MAX], cand[PATH_MAX];

	AN_ASSERT(out != NULL);
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		int len =
		    snprintf(cand, sizeof(cand), "%s/%s", dirname(exe), AGENTSNET_BRIDGE_NAME);
		if (len > 0 && (size_t)len < sizeof(cand) && access(cand, X_OK) == 0)
			return realpath(cand, out) != NULL ? 0 : -errno;
	}
	const char *path = getenv("PATH");
	while (path != NULL && *path != '\0') {
		const char *end = strchr(path, ':');
		size_t len = end != NULL ? (size_t)(end - path) : strlen(path);
		int m =
		    snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, path, AGENTSNET_BRIDGE_NAME);
		if (len > 0 && m > 0 && (size_t)m < sizeof(cand) && access(cand, X_OK) == 0)
			return realpath(cand, out) != NULL ? 0 : -errno;
		path = end != NULL ? end + 1 : NULL;
	}
	AN_ASSERT(out[0] == '\0');
	return -ENOENT;
}

/* --probe's executable, canonical, into <probe> (PATH_MAX bytes): -1 to go on, or an exit code. */
static int run_resolve_probe(const struct run_options *o, char *probe)
{
	struct stat st;

	AN_ASSERT(o->probe != NULL);
	AN_ASSERT(probe != NULL);
	if (realpath(o->probe, probe) == NULL || stat(probe, &st) == -1 ||
	    access(probe, X_OK) == -1) {
		fprintf(stderr, "agentsnet: --probe %s: %s\n", o->probe, strerror(errno));
		return CTL_EXIT_ERROR;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "agentsnet: --probe %s: not a regular file\n", o->probe);
		return CTL_EXIT_ERROR;
	}
	return -1;
}

/* Canonical paths, checked here so a missing file is a clear error, not a failed exec. */
static int run_resolve(const struct run_options *o, char *bridge, char *ca, char *socket_dir)
{
	AN_ASSERT(bridge != NULL);
	AN_ASSERT(ca != NULL);
	AN_ASSERT(socket_dir != NULL);
	AN_ASSERT(o->cmd != NULL);
	bridge[0] = '\0';
	if (o->bridge != NULL ? realpath(o->bridge, bridge) == NULL : find_bridge(bridge) != 0) {
		fprintf(stderr,
			"agentsnet: %s: not found (build it with `make build/rel/%s`, or pass "
			"--bridge PATH)\n",
			o->bridge != NULL ? o->bridge : AGENTSNET_BRIDGE_NAME,
			AGENTSNET_BRIDGE_NAME);
		return CTL_EXIT_ERROR;
	}
	if (access(bridge, X_OK) == -1) {
		fprintf(stderr, "agentsnet: %s: %s\n", bridge, strerror(errno));
		return CTL_EXIT_ERROR;
	}
	if (o->ca != NULL && (realpath(o->ca, ca) == NULL || access(ca, R_OK) == -1)) {
		fprintf(stderr, "agentsnet: --ca %s: %s\n", o->ca, strerror(errno));
		return CTL_EXIT_ERROR;
	}
	if (realpath(o->socket_dir, socket_dir) == NULL) {
		char path[PATH_MAX];
		control_path(o->socket_dir, path, sizeof(path));
		fprintf(stderr, "agentsnet: agentsnetd is not running (no control socket at %s)\n",
			path);
		return CTL_EXIT_UNREACHABLE;
	}
	if (strcmp(socket_dir, "/") == 0)
		return usage_error("run: --socket-dir / cannot be hidden from the sandbox");
	return -1;
}

/*
 * The daemon is gone, so it cannot remove our registration: do what its
 * `sandbox rm ... owned` would (the record, then the directory and what is in
 * it), so a restarted daemon does not re-adopt a sandbox that no longer
 * runs. Only this sandbox's own files, and only while the record is this
 * run's (a record another process registered under the id since is left);
 * unlinkat never follows a link.
 */
static void sandbox_remove_files(const struct run_options *o)
{
	char path[PATH_MAX];

	if (layout_registry_record(o->socket_dir, o->id, path, sizeof(path)) != 0)
		return;
	int owner = 0;
	unsigned long long owner_ticks = 0;
	uint64_t my_ticks = 0;
	int read = layout_registry_record_owner(path, &owner, &owner_ticks);
	if (read != 0 && read != -ENOENT) {
		fprintf(stderr,
			"agentsnet: %s: %s (agentsnetd drops it when it next starts, if its "
			"process is gone)\n",
			path, read == -EINVAL ? "not a record" : strerror(-read));
		return;
	}
	/* A record of no process (`sandbox add` without "owned") or of another is not
	 * ours: this process is its pid and start time (core/procstart.h: a run in
	 * another pid or time namespace than the daemon's matches no record, and
	 * leaves the files to the daemon's next start). */
	if (read == 0 && (owner != (int)getpid() || proc_start_ticks(0, &my_ticks) != 0 ||
			  my_ticks != owner_ticks)) {
		fprintf(stderr,
			"agentsnet: %s is not this run's (its process: %d): left as it is\n", path,
			(int)owner);
		return;
	}
	if (unlink(path) == -1 && errno != ENOENT) {
		fprintf(stderr, "agentsnet: %s: %s (agentsnetd drops it when it next starts)\n",
			path, strerror(errno));
		return;
	}
	int ret = layout_sandbox_dir_remove(o->socket_dir, o->id);
	if (ret != 0)
		fprintf(stderr, "agentsnet: sandbox %s's directory: %s\n", o->id, strerror(-ret));
}

/*
 * Unregisters this run's sandbox: its own registration only ("owned"), so
 * that a run whose registration a daemon restart dropped leaves alone the
 * one registered under its id since (error not_owner).
 */
static void sandbox_remove(const struct run_options *o)
{
	const char *words[] = { "sandbox", "rm", o->id, "owned" };
	struct ctl_reply r;

	AN_ASSERT(o->id != NULL);
	AN_ASSERT(o->socket_dir != NULL);
	int call_err = 0;
	int rc = control_call(o->socket_dir, (int)AN_ARRAY_LEN(words), words, &r, &call_err);
	if (rc == CTL_EXIT_UNREACHABLE && ctl_daemon_gone(call_err)) {
		fprintf(stderr, "agentsnet: agentsnetd is gone; removing sandbox %s's files\n",
			o->id);
		sandbox_remove_files(o);
	} else if (rc == CTL_EXIT_UNREACHABLE) {
		/* There may be a daemon, busy or out of reach: its files are its to remove. */
		fprintf(stderr,
			"agentsnet: could not unregister sandbox %s (see above); agentsnetd "
			"removes it within a second of this run's end\n",
			o->id);
	} else if (rc != CTL_EXIT_OK && strcmp(r.code, "not_owner") != 0) {
		fprintf(stderr, "agentsnet: could not unregister sandbox %s (see above)\n", o->id);
	}
	ctl_reply_free(&r);
}

/*
 * Registers the sandbox for its agent, <user>; with <given>, a uid of the
 * sandbox's own that the daemon gives (root only), with which <user> is then
 * filled, as uid and gid. Puts its
 * canonical directory in <dir>, and the listening ingress socket the daemon
 * made for it in *<ingress_fd> (-1 when none came); unregisters on failure.
 */
static int sandbox_add(const struct run_options *o, bool given, struct sandbox_user *user,
		       char *dir, int *ingress_fd)
{
	char uid[16];
	snprintf(uid, sizeof(uid), "%u", (unsigned)user->uid);
	/* The agent's uid: the daemon lets only it (and root) connect to the egress socket. */
	const char *words[] = { "sandbox", "add", o->id, o->profile, "owned", given ? "new" : uid };
	struct ctl_reply r;

	AN_ASSERT(dir != NULL);
	AN_ASSERT(o->id != NULL);
	AN_ASSERT(o->profile != NULL);
	int rc = control(o->socket_dir, (int)AN_ARRAY_LEN(words), words, &r);
	const char *text = rc == CTL_EXIT_OK ? r.text : "";
	if (rc == CTL_EXIT_OK && given) {
		/* "uid <n> <directory>": the uid is the agent's, and its group's number too. */
		uint32_t n = 0;
		char num[16];
		const char *space = strncmp(text, "uid ", 4) == 0 ? strchr(text + 4, ' ') : NULL;
		size_t len = space != NULL ? (size_t)(space - text - 4) : 0;
		if (len > 0 && len < sizeof(num)) {
			memcpy(num, text + 4, len);
			num[len] = '\0';
		}
		if (len == 0 || len >= sizeof(num) || !uid_parse(num, &n) || n == 0) {
			fprintf(stderr, "agentsnet: sandbox %s: no uid from agentsnetd: \"%s\"\n",
				o->id, text);
			sandbox_remove(o);
			rc = CTL_EXIT_ERROR;
		} else {
			*user = (struct sandbox_user){ .uid = (uid_t)n, .gid = (gid_t)n };
			text = space + 1;
		}
	}
	if (rc == CTL_EXIT_OK && (text[0] != '/' || realpath(text, dir) == NULL)) {
		fprintf(stderr, "agentsnet: sandbox %s: bad directory from agentsnetd: \"%s\"\n",
			o->id, text);
		sandbox_remove(o);
		rc = CTL_EXIT_ERROR;
	}
	*ingress_fd = -1;
	if (rc == CTL_EXIT_OK && r.has_fd) {
		*ingress_fd = r.fd;
		r.has_fd = false;
	}
	ctl_reply_free(&r);
	return rc;
}

/*
 * The sandbox's public URL from the daemon's gateway, into <url>/<cap>: what
 * the bridge sets as AGENT_PUBLIC_URL when --public-url does not. A daemon
 * without a gateway leaves it unset (not an error: egress works alone).
 */
static bool sandbox_public_url(const struct run_options *o, char *url, size_t cap)
{
	const char *words[] = { "sandbox", "url", o->id };
	char path[PATH_MAX], req[CTL_REQUEST_BYTES_MAX], err[PATH_MAX + 128];
	struct ctl_reply r = { 0 };

	AN_ASSERT(o->id != NULL);
	AN_ASSERT(cap > 0);
	if (ctl_request_format(req, sizeof(req), (int)AN_ARRAY_LEN(words), words) < 0)
		return false;
	control_path(o->socket_dir, path, sizeof(path));
	bool got = ctl_call(path, req, CTL_TIMEOUT_MS_DEFAULT, &r, err, sizeof(err)) == 0 && r.ok &&
		   strlen(r.text) < cap && strncmp(r.text, "http", 4) == 0;
	if (got)
		memcpy(url, r.text, strlen(r.text) + 1);
	ctl_reply_free(&r);
	return got;
}

/*
 * sandbox_spec.limits_by_daemon: `sandbox limit <id> <pids> <bytes>`, with
 * which the daemon moves this process into a cgroup it makes for the
 * sandbox (core/runlimit.h). <arg> is the run's options.
 */
static int limits_by_daemon(void *arg, uint64_t pids_max, uint64_t memory_max_bytes, char *err,
			    size_t err_len)
{
	const struct run_options *o = arg;
	char pids[24], bytes[24], path[PATH_MAX], req[CTL_REQUEST_BYTES_MAX];
	struct ctl_reply r = { 0 };

	AN_ASSERT(o->id != NULL);
	snprintf(pids, sizeof(pids), "%" PRIu64, pids_max);
	snprintf(bytes, sizeof(bytes), "%" PRIu64, memory_max_bytes);
	const char *words[] = { "sandbox", "limit", o->id, pids, bytes };
	if (ctl_request_format(req, sizeof(req), (int)AN_ARRAY_LEN(words), words) < 0) {
		snprintf(err, err_len, "bad request");
		return -EINVAL;
	}
	control_path(o->socket_dir, path, sizeof(path));
	int ret = ctl_call(path, req, CTL_TIMEOUT_MS_DEFAULT, &r, err, err_len);
	if (ret == 0 && !r.ok) {
		snprintf(err, err_len, "error %s: %s", r.code, r.text);
		ret = -EACCES;
	}
	ctl_reply_free(&r);
	return ret;
}

/* The bridge's status as ours; a death by signal is repeated on ourselves. */
static int exit_status(int wstatus)
{
	sigset_t set;

	AN_ASSERT(WIFEXITED(wstatus) || WIFSIGNALED(wstatus));
	if (WIFEXITED(wstatus))
		return WEXITSTATUS(wstatus);
	int sig = WTERMSIG(wstatus);
	AN_ASSERT(sig > 0);
	AN_ASSERT(sig < NSIG);
	fflush(NULL);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	return 128 + sig; /* a signal that does not kill (or a core limit that stops it) */
}

/* Runs the sandbox: -1 with the bridge's wait status in <wstatus>, or an exit code. */
static int run_sandbox(const struct run_options *o, struct sandbox_spec *spec, int *wstatus)
{
	struct sandbox sb;
	char err[SANDBOX_ERROR_BYTES + 256];

	AN_ASSERT(spec->dir != NULL);
	AN_ASSERT(o->id != NULL);
	/* A signal that came while we registered: act as if it had killed the agent. */
	int sig = sandbox_signal_pending();
	if (sig != 0) {
		*wstatus = sig;
		AN_ASSERT(WIFSIGNALED(*wstatus));
		return -1;
	}
	int ret = sandbox_start(spec, &sb, err, sizeof(err));
	if (ret != 0) {
		fprintf(stderr, "agentsnet: sandbox %s: %s\n", o->id, err);
		return CTL_EXIT_ERROR;
	}
	ret = sandbox_wait(&sb, wstatus);
	if (ret != 0) {
		fprintf(stderr, "agentsnet: waitpid: %s\n", strerror(-ret));
		return CTL_EXIT_ERROR;
	}
	return -1;
}

/*
 * `agentsnet run`'s own failures exit with AGENTSNET_RUN_FAILED, never with a
 * code an agent could also return (as `docker run` does): a caller can tell
 * "the sandbox could not start" from "the agent exited 1". Usage errors of
 * `run` itself keep CTL_EXIT_USAGE (2), before anything was attempted.
 */
#define AGENTSNET_RUN_FAILED 125

static int run_main_inner(int argc, char **argv, struct runenv *env, bool *started);

/* Who the agent is: the caller (user namespace), or --user: -1 to go on, or an exit code. */
static int run_user(const struct run_options *o, struct sandbox_spec *spec)
{
	char err[512];

	AN_ASSERT(o != NULL);
	AN_ASSERT(spec != NULL);
	if (spec->userns) {
		if (o->user != NULL)
			return usage_error("run: --user needs root (unprivileged, the agent runs "
					   "as you)");
		spec->user = (struct sandbox_user){ .uid = getuid(), .gid = getgid() };
		return -1;
	}
	/* No --user: a uid of its own, which sandbox_add asks the daemon for. */
	spec->user = (struct sandbox_user){ 0 };
	if (o->user != NULL && sandbox_user_parse(o->user, &spec->user, err, sizeof(err)) != 0) {
		fprintf(stderr, "agentsnet: %s\n", err);
		return CTL_EXIT_USAGE;
	}
	return -1;
}

static int run_main(int argc, char **argv)
{
	struct runenv env;
	bool started = false;

	/* The caller's allow-listed variables first: --env and --env-file apply on top, in order. */
	int ret = runenv_init(&env, environ);
	if (ret != 0) {
		fprintf(stderr, "agentsnet: your environment: %s\n", strerror(-ret));
		return AGENTSNET_RUN_FAILED;
	}
	int rc = run_main_inner(argc, argv, &env, &started);
	runenv_free(&env);
	if (!started && rc != CTL_EXIT_OK && rc != CTL_EXIT_USAGE)
		return AGENTSNET_RUN_FAILED;
	return rc;
}

/* Fills the rest of <spec> from <o> and the canonical paths resolved for it. */
static void run_spec(const struct run_options *o, struct sandbox_spec *spec, const char *ca,
		     const char *probe)
{
	AN_ASSERT(o->env->vars != NULL);
	AN_ASSERT(o->id != NULL);
	spec->ca_path = o->ca != NULL ? ca : NULL;
	spec->probe = o->probe != NULL ? probe : NULL;
	spec->id = o->id;
	spec->cmd = o->cmd;
	spec->envp = o->env->vars;
	spec->limits = o->limits;
	spec->limits_by_daemon = limits_by_daemon;
	spec->limits_by_daemon_arg = (void *)o;
	spec->public_url = o->public_url;
	spec->binds = o->binds;
	spec->n_binds = o->n_binds;
}

/*
 * The working directory is bound at its real path, read from "." itself. When
 * the shell reached it through a symlink ($PWD names the same directory by
 * another path: one the agent may have planted in an earlier run's
 * workspace), say which directory the agent will get, read-write.
 */
static void warn_cwd_through_link(const char *cwd)
{
	const char *pwd = getenv("PWD");
	char real[PATH_MAX];
	struct stat a, b;

	if (cwd == NULL || pwd == NULL || pwd[0] != '/' || strcmp(pwd, cwd) == 0)
		return;
	if (stat(pwd, &a) == 0 && stat(".", &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino)
		fprintf(stderr,
			"agentsnet: warning: %s is reached through a symlink; the agent gets %s, "
			"read-write\n",
			pwd, cwd);
	/* A launcher that changed directory without $PWD (env -C, make -C): away from it. */
	else if (realpath(pwd, real) != NULL && !sandbox_path_under(cwd, real))
		fprintf(stderr,
			"agentsnet: warning: the working directory %s is not below $PWD (%s): "
			"reached through a symlink? The agent gets %s, read-write\n",
			cwd, pwd, cwd);
}

static int run_main_inner(int argc, char **argv, struct runenv *env, bool *started)
{
	struct run_options o = {
		.profile = AGENTSNET_PROFILE,
		.socket_dir = default_socket_dir(),
		.limits = { .pids_max = SANDBOX_PIDS_MAX_DEFAULT,
			    .memory_max_bytes = SANDBOX_MEMORY_MAX_DEFAULT },
		.env = env,
	};
	static char bridge[PATH_MAX], ca[PATH_MAX], socket_dir[PATH_MAX], dir[PATH_MAX],
	    cwd[PATH_MAX], probe[PATH_MAX], public_url[4096];
	struct sandbox_spec spec = { 0 };
	char err[512];

	AN_ASSERT(argc >= 1);
	AN_ASSERT(strcmp(argv[0], "run") == 0);
	int rc = run_parse(argc, argv, &o);
	if (rc >= 0)
		return rc;
	sandbox_signals_block(&spec.child_mask);
	rc = run_resolve(&o, bridge, ca, socket_dir);
	if (rc < 0 && o.probe != NULL)
		rc = run_resolve_probe(&o, probe);
	if (rc >= 0)
		return rc;
	spec.userns = sandbox_needs_userns();
	if (spec.userns && sandbox_userns_allowed(err, sizeof(err)) != 0) {
		fprintf(stderr, "agentsnet: %s\n", err);
		return CTL_EXIT_ERROR;
	}
	rc = run_user(&o, &spec);
	if (rc >= 0)
		return rc;
	/* Once, before anything of the sandbox's can write to the terminal. */
	runenv_warn_dropped(env, environ, stderr);
	int ingress_fd = -1;
	/* Who the agent is on the host: the caller in a user namespace, else --user or its own. */
	rc = sandbox_add(&o, !spec.userns && o.user == NULL, &spec.user, dir, &ingress_fd);
	if (rc != CTL_EXIT_OK)
		return rc;
	AN_ASSERT(spec.userns || (spec.user.uid != 0 && spec.user.gid != 0));
	spec.dir = dir;
	spec.socket_dir = socket_dir;
	spec.bridge = bridge;
	run_spec(&o, &spec, ca, probe);
	if (spec.public_url == NULL && sandbox_public_url(&o, public_url, sizeof(public_url)))
		spec.public_url = public_url;
	spec.cwd = getcwd(cwd, sizeof(cwd));
	warn_cwd_through_link(spec.cwd);
	/* The daemon's, made in its own directory; a daemon that sends none: ours, made there. */
	spec.ingress_fd = ingress_fd >= 0 ? ingress_fd : sandbox_ingress_listen(dir);
	if (spec.ingress_fd < 0)
		fprintf(stderr, "agentsnet: %s/ingress.sock: %s: ingress disabled\n", dir,
			strerror(-spec.ingress_fd));
	fflush(NULL);
	int wstatus = 0;
	rc = run_sandbox(&o, &spec, &wstatus);
	if (spec.ingress_fd >= 0)
		close(spec.ingress_fd);
	sandbox_remove(&o);
	*started = rc < 0;
	return rc >= 0 ? rc : exit_status(wstatus);
}

int main(int argc, char **argv)
{
	AN_ASSERT(argc >= 0);
	AN_ASSERT(argc == 0 || argv[0] != NULL);
	if (argc < 2)
		return usage_error("no command");
	const char *cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0)
		return fputs(usage_text, stdout) >= 0 ? 0 : 1;
	if (strcmp(cmd, "--version") == 0) {
		printf("agentsnet %s\n", AGENTSNET_VERSION);
		return 0;
	}
	if (strcmp(cmd, "ca") == 0)
		return ca_main(argc - 1, argv + 1);
	if (strcmp(cmd, "sandbox") == 0 || strcmp(cmd, "ping") == 0 || strcmp(cmd, "policy") == 0 ||
	    strcmp(cmd, "audit") == 0 || strcmp(cmd, "stats") == 0 || strcmp(cmd, "alerts") == 0)
		return control_main(argc - 1, argv + 1);
	if (strcmp(cmd, "top") == 0)
		return top_main(argc - 1, argv + 1);
	if (strcmp(cmd, "run") == 0)
		return run_main(argc - 1, argv + 1);
	if (strcmp(cmd, "check") == 0)
		return check_main(argc - 1, argv + 1, default_socket_dir());
	if (strcmp(cmd, "selftest") == 0)
		return selftest_main(argc - 1, argv + 1);
	return usage_error("unknown command");
}
