/*
 * `agentsnet check`: what agentsnetd would answer for one URL.
 *
 * Nothing here decides. The URL becomes the request head a client sends to
 * a proxy (absolute-form for http://, CONNECT for https://, as curl does),
 * which the daemon's own parser (core/http1.c) takes apart; the policy is
 * loaded by the daemon's loader (the file, or the embedded default); the
 * verdict comes from policy_verdict_ops.decide and verdict_refusal, the two
 * calls core/conn.c makes (and, on the fake tier, core/fake.c's fake_response for the
 * method and the URL's path). So a check and a live request cannot disagree
 * about normalisation, ports, tiers, the reason given or the canned answer.
 * On the inject tier it names the header and the placeholder, never the
 * secret the loader read.
 *
 * The profile: --profile NAME, or the profile of --sandbox ID (a sandbox of
 * the policy file, else one a running daemon registered: its record under
 * <socket_dir>/registry), else "default". Rejected: asking a running daemon
 * over the control socket (the check must also work before one starts, on
 * a file being written).
 */
#include "tools/agentsnet/check.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/an.h"
#include "core/config.h"
#include "core/http1.h"
#include "core/layout.h"
#include "core/reason.h"
#include "core/verdict.h"
#include "policy/policy.h"

#define CHECK_DEFAULT_PROFILE "default"
/* A URL's request head: the request line and one Host line, well inside the parser's limits. */
#define CHECK_HEAD_BYTES   8192u
#define CHECK_RECORD_BYTES 256u

struct check_options {
	const char *config;
	const char *sandbox;
	const char *profile;
	const char *socket_dir;
	const char *url;
	const char *method;
};

static const char check_usage[] =
    "usage: agentsnet check [--config FILE] [--sandbox ID | --profile NAME]\n"
    "                       [--socket-dir DIR] URL [METHOD]\n"
    "Prints the decision agentsnetd would make for URL (http:// or https://) and\n"
    "exits 0 when it would be served, 1 when refused, 2 when no decision could be\n"
    "made (usage, an invalid policy file, a bad URL). With no --config: the\n"
    "embedded default policy; with neither --sandbox nor --profile: the profile\n"
    "\"default\".\n";

static int check_usage_error(const char *what)
{
	AN_ASSERT(what != NULL);
	fprintf(stderr, "agentsnet check: %s\n%s", what, check_usage);
	return CHECK_EXIT_CANNOT;
}

static int parse_options(int argc, char **argv, struct check_options *o)
{
	static const struct option longs[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "sandbox", required_argument, NULL, 's' },
		{ "profile", required_argument, NULL, 'p' },
		{ "socket-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	AN_ASSERT(argc >= 1);
	optind = 0;
	while ((opt = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
		if (opt == 'h') {
			fputs(check_usage, stdout);
			return CHECK_EXIT_ALLOW;
		}
		const char **slot = opt == 'c'   ? &o->config
				    : opt == 's' ? &o->sandbox
				    : opt == 'p' ? &o->profile
				    : opt == 'd' ? &o->socket_dir
						 : NULL;
		if (slot == NULL)
			return check_usage_error("unknown option");
		*slot = optarg;
	}
	if (o->sandbox != NULL && o->profile != NULL)
		return check_usage_error("--sandbox and --profile exclude each other");
	if (optind >= argc || argc - optind > 2)
		return check_usage_error("expected URL [METHOD]");
	o->url = argv[optind];
	o->method = optind + 1 < argc ? argv[optind + 1] : NULL;
	return -1;
}

/*
 * The head a client would send for <url>: "CONNECT host:port" for https://
 * (the method travels inside the tunnel), "<METHOD> <url>" for http://.
 * Returns its length, or -EINVAL with a message printed.
 */
static int url_head(const char *url, const char *method, char *out, size_t cap)
{
	static const char https[] = "https://";
	static const char http[] = "http://";

	AN_ASSERT(url != NULL);
	AN_ASSERT(cap > 0);
	int n = -1;
	if (strncmp(url, https, sizeof(https) - 1) == 0) {
		const char *auth = url + sizeof(https) - 1;
		size_t len = strcspn(auth, "/?#");
		/* The authority as curl sends it: a port of its own, or 443. */
		const char *close = memchr(auth, ']', len);
		const char *colon = memchr(close != NULL ? close : auth, ':',
					   len - (size_t)((close != NULL ? close : auth) - auth));
		n = snprintf(out, cap, "CONNECT %.*s%s HTTP/1.1\r\nHost: %.*s%s\r\n\r\n", (int)len,
			     auth, colon != NULL ? "" : ":443", (int)len, auth,
			     colon != NULL ? "" : ":443");
	} else if (strncmp(url, http, sizeof(http) - 1) == 0) {
		const char *auth = url + sizeof(http) - 1;
		size_t len = strcspn(auth, "/?#");
		n = snprintf(out, cap, "%s %s HTTP/1.1\r\nHost: %.*s\r\n\r\n",
			     method != NULL ? method : "GET", url, (int)len, auth);
	} else {
		fprintf(stderr, "agentsnet check: %s: only http:// and https:// URLs\n", url);
		return -EINVAL;
	}
	if (n < 0 || (size_t)n >= cap) {
		fprintf(stderr, "agentsnet check: %s: longer than a request line may be\n", url);
		return -EINVAL;
	}
	return n;
}

static int load_policy(const char *path, struct config *cfg, struct policy **pol)
{
	char err[512];

	AN_ASSERT(cfg != NULL);
	AN_ASSERT(pol != NULL);
	if (config_init_defaults(cfg) != 0) {
		fprintf(stderr, "agentsnet check: out of memory\n");
		return -ENOMEM;
	}
	int ret = policy_load_or_default(path, cfg, pol, err, sizeof(err));
	if (ret != 0)
		fprintf(stderr, "agentsnet check: %s\n", err);
	return ret;
}

/* The profile a daemon registered sandbox <id> on: its registry record's first line. */
static int registered_profile(const char *socket_dir, const char *id, char *out, size_t cap)
{
	char path[4096], line[CHECK_RECORD_BYTES];

	AN_ASSERT(out != NULL);
	AN_ASSERT(cap > 0);
	if (layout_registry_record(socket_dir, id, path, sizeof(path)) != 0)
		return -ENAMETOOLONG;
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -errno;
	char *got = fgets(line, sizeof(line), f);
	fclose(f);
	if (got == NULL || strncmp(line, "profile ", 8) != 0)
		return -EINVAL;
	line[strcspn(line, "\n")] = '\0';
	snprintf(out, cap, "%s", line + 8);
	return 0;
}

/* The profile index to check against: 0 or more, or -1 with a message printed. */
static int pick_profile(const struct check_options *o, const struct config *cfg,
			const struct policy *pol)
{
	char registered[CHECK_RECORD_BYTES];

	AN_ASSERT(cfg != NULL);
	AN_ASSERT(pol != NULL);
	if (o->sandbox != NULL) {
		for (uint32_t i = 0; i < cfg->sandbox_count; i++) {
			if (strcmp(cfg->sandboxes[i].id, o->sandbox) == 0)
				return (int)cfg->sandboxes[i].profile;
		}
		const char *dir = o->socket_dir != NULL ? o->socket_dir : cfg->socket_dir;
		int ret = registered_profile(dir, o->sandbox, registered, sizeof(registered));
		if (ret != 0) {
			fprintf(
			    stderr,
			    "agentsnet check: sandbox %s is neither in the policy nor registered "
			    "under %s/registry (%s)\n",
			    o->sandbox, dir, strerror(-ret));
			return -1;
		}
		int index = policy_profile_index(pol, registered);
		if (index < 0)
			fprintf(
			    stderr,
			    "agentsnet check: sandbox %s is registered on profile %s, which this "
			    "policy does not have\n",
			    o->sandbox, registered);
		return index < 0 ? -1 : index;
	}
	const char *name = o->profile != NULL ? o->profile : CHECK_DEFAULT_PROFILE;
	int index = policy_profile_index(pol, name);
	if (index < 0)
		fprintf(stderr, "agentsnet check: the policy has no profile %s\n", name);
	return index < 0 ? -1 : index;
}

static void print_decision(const struct http1_request *req, const char *profile,
			   const struct verdict *v, enum reason refusal)
{
	AN_ASSERT(req != NULL);
	AN_ASSERT(v != NULL);
	printf("decision: %s\n", refusal == REASON_NONE ? "allow" : "deny");
	printf("request: %.*s %.*s:%u\n", (int)req->method_len, req->method, (int)req->host_len,
	       req->host, (unsigned)req->port);
	printf("profile: %s\n", profile);
	printf("tier: %s\n", reason_tier_name(v->tier));
	printf("rule: %s\n", v->rule != NULL ? v->rule : "(none)");
	if (refusal != REASON_NONE) {
		printf("status: %u\n", (unsigned)reason_status(refusal));
		printf("reason: %s\n", reason_code(refusal));
	}
	const char *instruction = v->instruction;
	if (instruction == NULL && refusal != REASON_NONE)
		instruction = reason_instruction(refusal);
	if (instruction != NULL)
		printf("instruction: %s\n", instruction);
	if (v->upstream != NULL)
		printf("upstream: %s\n", v->upstream);
	/* The placeholder is what the sandbox holds; the secret is never printed. */
	if (v->inject != NULL)
		printf("inject: %.*s (placeholder %.*s, require %s)\n", (int)v->inject->header_len,
		       v->inject->header, (int)v->inject->placeholder_len, v->inject->placeholder,
		       v->inject->require ? "yes" : "no");
	const struct verdict_limits *l = &v->rule_limits;
	if (l->requests_per_second != 0 || l->concurrent != 0)
		printf("rule limits: %u requests/s, burst %u, %u at once (0: unlimited), per "
		       "sandbox\n",
		       l->requests_per_second, l->burst != 0 ? l->burst : l->requests_per_second,
		       l->concurrent);
}

/*
 * The request inside the tunnel or the request itself, as the fake tier
 * matches it: the method (for https://, <method> or GET, as it would be sent
 * inside the tunnel) and the path in origin form with its query.
 */
static void request_in_tunnel(const char *url, const char *method, const struct http1_request *req,
			      struct http1_request *inner)
{
	AN_ASSERT(url != NULL && req != NULL);
	AN_ASSERT(inner != NULL);
	memset(inner, 0, sizeof(*inner));
	if (!req->is_connect) {
		inner->method = req->method;
		inner->method_len = req->method_len;
		inner->path = req->path;
		inner->path_len = req->path_len;
		return;
	}
	inner->method = method != NULL ? method : "GET";
	inner->method_len = strlen(inner->method);
	const char *auth = strstr(url, "://") + 3;
	const char *rest = auth + strcspn(auth, "/?#");
	inner->path = rest[0] == '/' ? rest : "/";
	inner->path_len = rest[0] == '/' ? strcspn(rest, "#") : 1;
}

/* A fake-response verdict: which canned response the request would get. */
static void print_response(const struct policy *pol, const struct verdict *v,
			   const struct check_options *o, const struct http1_request *req)
{
	struct http1_request inner;

	AN_ASSERT(v->tier == TIER_FAKE);
	AN_ASSERT(v->fake != NULL);
	request_in_tunnel(o->url, o->method, req, &inner);
	const struct verdict_response *r = policy_verdict_ops.fake_response(
	    pol, v->fake, inner.method, inner.method_len, inner.path, inner.path_len);
	printf("response: %u (%u bytes)\n", (unsigned)r->status, (unsigned)r->body_len);
}

int check_main(int argc, char **argv)
{
	struct check_options o = { 0 };
	char head[CHECK_HEAD_BYTES];
	struct http1_request req;
	enum reason why = REASON_NONE;

	AN_ASSERT(argc >= 1);
	AN_ASSERT(strcmp(argv[0], "check") == 0);
	int rc = parse_options(argc, argv, &o);
	if (rc >= 0)
		return rc;
	int len = url_head(o.url, o.method, head, sizeof(head));
	if (len < 0)
		return CHECK_EXIT_CANNOT;
	if (http1_parse_request(head, (size_t)len, &req, &why) != len) {
		fprintf(stderr,
			"agentsnet check: %s: the daemon would refuse this request: %u %s\n", o.url,
			(unsigned)reason_status(why), reason_code(why));
		return CHECK_EXIT_CANNOT;
	}
	struct config cfg;
	struct policy *pol = NULL;
	if (load_policy(o.config, &cfg, &pol) != 0) {
		config_free(&cfg);
		return CHECK_EXIT_CANNOT;
	}
	int profile = pick_profile(&o, &cfg, pol);
	rc = CHECK_EXIT_CANNOT;
	if (profile >= 0) {
		struct verdict v;
		policy_verdict_ops.decide(pol, (uint32_t)profile, req.host, req.host_len, req.port,
					  &v);
		enum reason refusal = verdict_refusal(&v);
		print_decision(&req, policy_profile_name(pol, (uint32_t)profile), &v, refusal);
		if (v.tier == TIER_FAKE)
			print_response(pol, &v, &o, &req);
		rc = refusal == REASON_NONE ? CHECK_EXIT_ALLOW : CHECK_EXIT_DENY;
	}
	policy_free(pol);
	config_free(&cfg);
	return rc;
}
