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
 * The policy: --config FILE when given; else the one the daemon on the
 * socket directory serves, as it says on its control socket (`policy
 * status`: the file's path, or the embedded default, and the digest of the
 * text it loaded, so a file edited since it loaded is said to be newer than
 * what is served); else, when no daemon answers, the embedded default. The
 * answer says which. The decision itself is made here, from the same text,
 * by the daemon's own code, so the check also works on a file being written.
 *
 * The profile: --profile NAME, or the profile of --sandbox ID (a sandbox of
 * the policy file, else one a running daemon registered: its record under
 * <socket_dir>/registry), else "default".
 *
 * What happens only at connect time is said as such: a terminated tier
 * needs the daemon's CA (the daemon says whether it has one; a file only
 * names its daemon.ca), and an upstream's name is resolved and each address
 * checked against resolver.allow_private. With --resolve that is done here,
 * as a worker does it (the policy's static hosts, then its resolver servers,
 * core/lookup.h), and a refused address is reported with the detail and
 * instruction the daemon's refusal carries (core/deny.h).
 */
#include "tools/agentsnet/check.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/an.h"
#include "core/config.h"
#include "core/deny.h"
#include "core/http1.h"
#include "core/layout.h"
#include "core/lookup.h"
#include "core/reason.h"
#include "core/verdict.h"
#include "policy/policy.h"
#include "tools/agentsnet/ctl.h"

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
	bool resolve;
};

/* Addresses --resolve considers at most, as a worker (CONN_ADDRS_MAX's order of size). */
#define CHECK_ADDRESSES_MAX 8
/* How long the daemon has to answer `policy status`. */
#define CHECK_STATUS_TIMEOUT_MS 3000u

/* Which policy answered, for the "policy:" line, and what it says about the CA. */
struct policy_origin {
	char line[4352];
	bool has_ca;   /* the terminated tiers can be served */
	bool ca_known; /* a daemon said so (else: the file's daemon.ca, or none) */
	bool stale;    /* the file changed since the daemon loaded it */
};

static const char check_usage[] =
    "usage: agentsnet check [--config FILE] [--sandbox ID | --profile NAME]\n"
    "                       [--socket-dir DIR] [--resolve] URL [METHOD]\n"
    "Prints the decision agentsnetd would make for URL (http:// or https://) and\n"
    "exits 0 when it would be served, 1 when refused, 2 when no decision could be\n"
    "made (usage, an invalid policy file, a bad URL). The policy: --config FILE;\n"
    "else the one the daemon on the socket directory serves; else, when none\n"
    "answers, the embedded default. With neither --sandbox nor --profile: the\n"
    "profile \"default\". --resolve resolves the upstream and checks its\n"
    "addresses as the daemon would at connect time.\n";

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
		{ "resolve", no_argument, NULL, 'r' },
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
		if (opt == 'r') {
			o->resolve = true;
			continue;
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

/*
 * The daemon's answer to `policy status` (core/control.c): 0 with <generation>,
 * <has_ca>, <digest> and the served file's path in <path> ("" for the
 * embedded default), or -EPROTO for an answer without them (an older daemon).
 */
static int status_parse(const char *text, unsigned long long *generation, bool *has_ca,
			char *digest, char *path, size_t path_cap)
{
	int ca = 0;
	int at = 0;

	if (sscanf(text,
		   "generation %llu profiles %*u rules %*u reloads %*u ca %d digest %32s source %n",
		   generation, &ca, digest, &at) != 3 ||
	    at == 0 || strlen(digest) != POLICY_DIGEST_HEX_BYTES)
		return -EPROTO;
	*has_ca = ca != 0;
	const char *source = text + at;
	if (strcmp(source, "embedded") == 0) {
		path[0] = '\0';
		return 0;
	}
	if (strncmp(source, "file ", 5) != 0 || strcmp(source + 5, "?") == 0)
		return -EPROTO;
	int n = snprintf(path, path_cap, "%s", source + 5);
	return n > 0 && (size_t)n < path_cap ? 0 : -EPROTO;
}

/*
 * Loads the policy to answer from (see the top of the file) into <cfg> and
 * *<pol>, and says which in <origin>. 0, or -1 with a message printed.
 */
static int choose_policy(const struct check_options *o, const char *default_dir, struct config *cfg,
			 struct policy **pol, struct policy_origin *origin)
{
	char sock[4096], err[512], digest[POLICY_DIGEST_HEX_BYTES + 1], path[4096];
	struct ctl_reply r = { 0 };
	unsigned long long generation = 0;

	memset(origin, 0, sizeof(*origin));
	if (o->config != NULL) {
		if (load_policy(o->config, cfg, pol) != 0)
			return -1;
		origin->has_ca = cfg->ca_cert != NULL;
		snprintf(origin->line, sizeof(origin->line), "%s (--config)", o->config);
		return 0;
	}
	const char *dir = o->socket_dir != NULL ? o->socket_dir : default_dir;
	snprintf(sock, sizeof(sock), "%s/%s", dir, CTL_SOCKET_NAME);
	int ret = ctl_call(sock, "policy status\n", CHECK_STATUS_TIMEOUT_MS, &r, err, sizeof(err));
	/* A socket that accepted and then did not answer is a daemon, slow or stuck: not "none". */
	if (ret != 0 && ctl_unreachable(ret) && ret != -ETIMEDOUT && ret != -ECONNRESET &&
	    ret != -EPIPE) {
		if (load_policy(NULL, cfg, pol) != 0)
			return -1;
		snprintf(origin->line, sizeof(origin->line),
			 "the embedded default (no daemon answers on %s: %s; --config FILE checks "
			 "a file)",
			 sock, strerror(-ret));
		return 0;
	}
	if (ret == 0 && r.ok)
		ret =
		    status_parse(r.text, &generation, &origin->has_ca, digest, path, sizeof(path));
	else if (ret == 0)
		snprintf(err, sizeof(err), "%s %s", r.code, r.text);
	else if (ret == -EPROTO)
		snprintf(err, sizeof(err), "it does not say what it serves");
	bool answered = ret == 0 && r.ok;
	ctl_reply_free(&r);
	if (!answered || ret != 0) {
		fprintf(stderr,
			"agentsnet check: the daemon on %s: %s; --config FILE checks a file\n",
			sock,
			ret == -EPROTO ? "it does not say what it serves (an older daemon?)" : err);
		return -1;
	}
	origin->ca_known = true;
	if (load_policy(path[0] != '\0' ? path : NULL, cfg, pol) != 0) {
		fprintf(
		    stderr,
		    "agentsnet check: that is the policy the daemon on %s serves: run as a user "
		    "who may read it, or give --config FILE\n",
		    dir);
		return -1;
	}
	origin->stale = strcmp(policy_digest(*pol), digest) != 0;
	const char *what = path[0] != '\0' ? path : "the embedded default";
	if (origin->stale)
		snprintf(origin->line, sizeof(origin->line),
			 "%s as it is now; the daemon on %s serves an earlier text of it "
			 "(generation %llu) until `agentsnet policy reload`",
			 what, dir, generation);
	else
		snprintf(origin->line, sizeof(origin->line),
			 "%s, as the daemon on %s serves it (generation %llu)", what, dir,
			 generation);
	return 0;
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

/* A refusal's own words, where the request's refusal has them (private_address). */
struct refusal_text {
	const char *detail;
	const char *instruction;
};

static void print_decision(const struct http1_request *req, const char *profile,
			   const struct verdict *v, enum reason refusal,
			   const struct refusal_text *own)
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
	if (own->detail != NULL)
		printf("detail: %s\n", own->detail);
	const char *instruction = own->instruction != NULL ? own->instruction : v->instruction;
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

/*
 * --resolve: the upstream's addresses as a worker finds them (core/upstream.c:
 * an IP literal; else the policy's static hosts; else its resolver servers),
 * each printed with its class, and the refusal a worker would make of them:
 * private_address when the policy permits none (its detail and instruction
 * into <own>, from <host>, <address> and <instruction> buffers of the
 * caller), dns_failed when the name does not resolve. A local rule's
 * upstream is resolved but not checked, as the engine does not check it.
 */
static enum reason resolve_check(const struct policy *pol, const struct config *cfg,
				 const struct verdict *v, const struct http1_request *req,
				 struct refusal_text *own, char *detail, size_t detail_cap,
				 char *instruction, size_t instruction_cap)
{
	const struct verdict_ops *ops = &policy_verdict_ops;
	struct sockaddr_storage addrs[CHECK_ADDRESSES_MAX];
	char name[LIMITS_HOST_BYTES_MAX + 1];
	char why[256];
	uint16_t port = req->port;
	bool checked = v->tier != TIER_LOCAL;

	if (v->tier == TIER_LOCAL && v->upstream[0] == '/') {
		printf("resolve: the upstream is the Unix socket %s: nothing to resolve\n",
		       v->upstream);
		return REASON_NONE;
	}
	struct http1_authority au = { .host = req->host, .host_len = req->host_len };
	if (v->tier == TIER_LOCAL &&
	    http1_authority_split(v->upstream, strlen(v->upstream), &au) != 0)
		return REASON_TIER_UNAVAILABLE;
	if (v->tier == TIER_LOCAL)
		port = au.port;
	if (au.host_len >= sizeof(name))
		return REASON_DNS_FAILED;
	memcpy(name, au.host, au.host_len);
	name[au.host_len] = '\0';
	int count = 0;
	const char *how = "an address";
	memset(&addrs[0], 0, sizeof(addrs[0]));
	struct sockaddr_in *v4 = (struct sockaddr_in *)&addrs[0];
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&addrs[0];
	if (inet_pton(AF_INET, name, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(port);
		count = 1;
	} else if (inet_pton(AF_INET6, name, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
		count = 1;
	} else if ((count = ops->static_lookup(pol, name, au.host_len, port, addrs,
					       CHECK_ADDRESSES_MAX)) > 0) {
		how = "resolver.hosts";
	} else {
		how = cfg->dns_servers != NULL ? cfg->dns_servers : "the system's resolver";
		count = lookup_addresses(cfg->dns_servers, name, port, cfg->dns_timeout_ms, -1,
					 addrs, CHECK_ADDRESSES_MAX, why, sizeof(why));
		if (count < 0) {
			printf("resolve: %s (%s): %s\n", name, how,
			       count == -EHOSTUNREACH ? why : strerror(-count));
			return REASON_DNS_FAILED;
		}
	}
	const struct sockaddr *refused = NULL;
	uint32_t permitted = 0;
	for (int i = 0; i < count; i++) {
		const struct sockaddr *sa = (const struct sockaddr *)&addrs[i];
		char text[INET6_ADDRSTRLEN] = "?";
		const void *bytes =
		    sa->sa_family == AF_INET6
			? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
			: (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
		(void)inet_ntop(sa->sa_family, bytes, text, sizeof(text));
		bool ok = !checked || ops->address_permitted(pol, sa);
		printf("address: %s (%s, class %s): %s\n", text, how, ops->address_class(sa),
		       !checked ? "not checked (a local rule's upstream)"
		       : ok     ? "permitted"
				: "refused (not in resolver.allow_private)");
		permitted += ok;
		if (!ok && refused == NULL) {
			refused = sa;
			deny_private_address_text(req->host, req->host_len, text,
						  ops->address_class(sa), detail, detail_cap,
						  instruction, instruction_cap);
		}
	}
	if (permitted > 0)
		return REASON_NONE;
	if (refused != NULL) {
		own->detail = detail;
		own->instruction = instruction;
	}
	return REASON_PRIVATE_ADDRESS;
}

/* What only a connection would show, said as such (the resolution without --resolve). */
static void print_connect_notes(const struct verdict *v, const struct policy_origin *origin,
				bool resolved)
{
	if (!resolved && (v->tier == TIER_PASSTHROUGH || v->tier == TIER_INJECT))
		printf("at connect: the name is resolved (resolver.hosts, then DNS) and an address "
		       "that is not public must be in resolver.allow_private, else 403 "
		       "private_address; --resolve checks it now\n");
	if (v->tier == TIER_INJECT)
		printf("upstream CA: %s\n", v->inject->upstream_ca != NULL ? v->inject->upstream_ca
									   : "the system's roots");
	if ((v->tier == TIER_INJECT || v->tier == TIER_FAKE) && !origin->ca_known)
		printf("at connect: a terminated tier needs the daemon's CA; this policy names one "
		       "(daemon.ca)\n");
}

int check_main(int argc, char **argv, const char *socket_dir)
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
	struct policy_origin origin;
	if (choose_policy(&o, socket_dir, &cfg, &pol, &origin) != 0) {
		policy_free(pol);
		config_free(&cfg);
		return CHECK_EXIT_CANNOT;
	}
	if (origin.stale)
		fprintf(stderr, "agentsnet check: note: %s\n", origin.line);
	int profile = pick_profile(&o, &cfg, pol);
	rc = CHECK_EXIT_CANNOT;
	if (profile >= 0) {
		struct verdict v;
		struct refusal_text own = { 0 };
		char detail[128], instruction[320];
		policy_verdict_ops.decide(pol, (uint32_t)profile, req.host, req.host_len, req.port,
					  &v);
		enum reason refusal = verdict_refusal(&v);
		bool no_ca = false;
		if (refusal == REASON_NONE) {
			refusal = verdict_mode_refusal(&v, req.is_connect, origin.has_ca);
			no_ca = refusal != REASON_NONE &&
				verdict_mode_refusal(&v, req.is_connect, true) == REASON_NONE;
		}
		printf("policy: %s\n", origin.line);
		bool connects = refusal == REASON_NONE && v.tier != TIER_FAKE;
		if (connects && o.resolve)
			refusal = resolve_check(pol, &cfg, &v, &req, &own, detail, sizeof(detail),
						instruction, sizeof(instruction));
		print_decision(&req, policy_profile_name(pol, (uint32_t)profile), &v, refusal,
			       &own);
		if (v.tier == TIER_FAKE && refusal == REASON_NONE)
			print_response(pol, &v, &o, &req);
		if (refusal == REASON_NONE)
			print_connect_notes(&v, &origin, o.resolve);
		if (no_ca)
			printf(
			    "note: %s\n",
			    origin.ca_known
				? "the daemon has no CA (daemon.ca or --ca-dir) to terminate this "
				  "tier's TLS"
				: "the policy names no CA (daemon.ca); a daemon started with "
				  "--ca-dir would serve this");
		rc = refusal == REASON_NONE ? CHECK_EXIT_ALLOW : CHECK_EXIT_DENY;
	}
	policy_free(pol);
	config_free(&cfg);
	return rc;
}
