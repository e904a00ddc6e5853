/*
 * The policy file (schema version 1, docs/policy.md): loading, validation and
 * the compiled, immutable result the engine consults through core/verdict.h.
 */
#ifndef AN_POLICY_POLICY_H
#define AN_POLICY_POLICY_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/limits.h"
#include "core/verdict.h"

/*
 * Limits of the policy file. Each is checked at load with a file:line:col
 * error; the bounds of the daemon settings are here because the loader is
 * where docs/style.md section 8 says they are checked.
 */
/* Whole file: far beyond any hand-written policy, small enough to read at once. */
#define POLICY_FILE_BYTES_MAX (64u * 1024u * 1024u)
/*
 * Rules over all profiles: 2.6 times the 100k design point (which loads in
 * about 0.2 s, mostly libyaml). A rule costs about 200 bytes and a reload
 * holds two snapshots, so this also bounds the daemon's policy memory.
 */
#define POLICY_RULES_MAX (1u << 18)
/* The digest of a policy's text (policy_digest): XXH3-128, in hex. */
#define POLICY_DIGEST_HEX_BYTES 32u
/* Presets one profile names at most (policy/preset.h). */
#define POLICY_PRESETS_MAX 32u
/* Entries of a profile's `users`, and of its `groups`, at most. */
#define POLICY_REGISTRANTS_MAX 256u
/* Profiles: at most one per sandbox is ever useful. */
#define POLICY_PROFILES_MAX LIMITS_SANDBOXES_MAX
/* Ports listed on one rule: an allowlist, not a range syntax. */
#define POLICY_RULE_PORTS_MAX 64u
/* The one port an inject rule without `ports` sends its credential to (HTTPS). */
#define POLICY_INJECT_PORT_DEFAULT 443u
/* Rule ids: fit the audit record's rule field (95 bytes and a NUL). */
#define POLICY_RULE_ID_BYTES_MAX 95u
/* Profile names: like sandbox ids, so "<profile>/<index>" ids fit the above. */
#define POLICY_PROFILE_NAME_BYTES_MAX (CONFIG_SANDBOX_ID_BYTES_MAX - 1u)
/* owner, reason, instruction: one header line an agent reads, not an essay. */
#define POLICY_TEXT_BYTES_MAX 512u
/* The global deny list: hosts denied in every profile (as well as the DoH endpoints). */
#define POLICY_DENY_MAX 4096u
/* limits: requests a second, burst and connections at once, per sandbox (a
 * profile's) or per sandbox per rule (a rule's). */
#define POLICY_LIMIT_MAX 1000000u
/* A local upstream given as a Unix socket path: sun_path holds 108 bytes with its NUL. */
#define POLICY_UPSTREAM_UNIX_BYTES_MAX 107u
/* socket_dir and audit_log. */
#define POLICY_PATH_BYTES_MAX 4095u
/* resolver.servers: c-ares tries them in order; more than this is a mistake. */
#define POLICY_DNS_SERVERS_MAX 16u
/* resolver.hosts: names, and addresses per name. */
#define POLICY_STATIC_HOSTS_MAX 65536u
#define POLICY_STATIC_ADDRS_MAX 16u
/* resolver.allow_private networks: scanned linearly on every connect. */
#define POLICY_ALLOW_PRIVATE_MAX 256u

/*
 * The fake-response tier: a rule's `responses`. The engine sends a head and
 * a body as they were compiled at load, so each is bounded here.
 */
/* Responses on one rule: first match wins, scanned in order on every request. */
#define POLICY_FAKE_RESPONSES_MAX 64u
/* Headers on one response, and the bytes of a name and of a value. */
#define POLICY_FAKE_HEADERS_MAX            32u
#define POLICY_FAKE_HEADER_NAME_BYTES_MAX  64u
#define POLICY_FAKE_HEADER_VALUE_BYTES_MAX 1024u
/*
 * The compiled head (status line and header lines): clients refuse large
 * heads (Node.js takes 16 KiB in all), and the engine adds its framing and
 * connection headers after these.
 */
#define POLICY_FAKE_HEAD_BYTES_MAX 8192u
/* A method to match: as long as core/http1.c accepts (the longest registered is 17). */
#define POLICY_FAKE_METHOD_BYTES_MAX 32u
/* A path to match, with its '*': inside a request line, far beyond any API's routes. */
#define POLICY_FAKE_PATH_BYTES_MAX 2048u
/* One response's body, inline or read from body_file: a canned answer, not a download. */
#define POLICY_FAKE_BODY_BYTES_MAX (1u << 20)
/* Every body of the file together: body_file must not make the policy's memory unbounded. */
#define POLICY_FAKE_BYTES_MAX (64u << 20)

static_assert(POLICY_FAKE_HEAD_BYTES_MAX + 512u <= LIMITS_RESPONSE_HEAD_BYTES_MAX,
	      "a canned head and the engine's own headers fit a response head");
static_assert(POLICY_FAKE_BODY_BYTES_MAX <= POLICY_FAKE_BYTES_MAX, "one body fits the total");
static_assert(POLICY_FAKE_BYTES_MAX <= UINT32_MAX, "body lengths fit verdict_response");

/*
 * The credential-inject tier: a rule's `inject`. The engine swaps
 * <prefix><placeholder> for <prefix><secret> in one request header, so each
 * part is bounded here, and the swapped header line fits a request head.
 */
/* The header's name: an RFC 9110 token, as long as a canned response's header names. */
#define POLICY_INJECT_HEADER_BYTES_MAX 64u
/* The text before the credential ("Bearer "): an auth scheme, not a value. */
#define POLICY_INJECT_PREFIX_BYTES_MAX 64u
/*
 * What the sandbox holds: at least 8 bytes, so that it does not occur in a
 * request by chance; at most 256, which every client's key setting takes.
 */
#define POLICY_INJECT_PLACEHOLDER_BYTES_MIN 8u
#define POLICY_INJECT_PLACEHOLDER_BYTES_MAX 256u
/* The real credential: API keys and bearer tokens (JWTs included) stay well below this. */
#define POLICY_INJECT_SECRET_BYTES_MAX 4096u
/* secret_env: the name of one of the daemon's environment variables. */
#define POLICY_INJECT_ENV_NAME_BYTES_MAX 255u

static_assert(POLICY_INJECT_HEADER_BYTES_MAX + 2u + POLICY_INJECT_PREFIX_BYTES_MAX +
		      POLICY_INJECT_SECRET_BYTES_MAX + 2u <=
		  LIMITS_HEAD_BYTES_MAX / 2u,
	      "a swapped header line leaves most of a request head to the request");
static_assert(POLICY_INJECT_PLACEHOLDER_BYTES_MIN <= POLICY_INJECT_PLACEHOLDER_BYTES_MAX,
	      "the placeholder's bounds are a range");
static_assert(POLICY_INJECT_SECRET_BYTES_MAX <= UINT32_MAX, "secret lengths fit verdict_inject");

/* Bounds of the daemon settings (defaults in core/limits.h). */
#define POLICY_WORKERS_MAX          LIMITS_WORKERS_MAX
#define POLICY_CONNS_PER_WORKER_MIN 16u
#define POLICY_CONNS_PER_WORKER_MAX 1048576u
#define POLICY_PIPES_PER_WORKER_MAX 4096u
#define POLICY_TIMEOUT_MS_MIN       1u
#define POLICY_TIMEOUT_MS_MAX       3600000u
/* sandbox_share_percent: below a tenth, a small worker would admit nobody at all. */
#define POLICY_SANDBOX_SHARE_PERCENT_MIN 10u
/* daemon.metrics.sandboxes at most: each is a handful of series on every scrape. */
#define POLICY_METRICS_SANDBOXES_MAX 1000u
/* daemon.alert_webhook.timeout_ms: a try of one alert at most (core/webhook.h). */
#define POLICY_WEBHOOK_TIMEOUT_MS_MAX 60000u
/* sandbox_completions_per_turn: past a CQ batch, one turn could run a sandbox's whole batch. */
#define POLICY_SANDBOX_COMPLETIONS_PER_TURN_MAX 256u
/* daemon.leaf_days: at most the CA/Browser Forum's 397 days (tls/ca.h TLS_CA_LEAF_DAYS_MAX). */
#define POLICY_LEAF_DAYS_MIN 1u
#define POLICY_LEAF_DAYS_MAX 397u
/*
 * daemon.sandbox_uids: at least one uid, none of them 0 and the last below
 * 2^31 - 1 (what tools that keep a uid in a signed int still read right);
 * at most 16,777,216 (the daemon keeps one bit per uid).
 */
#define POLICY_SANDBOX_UID_FIRST_MIN 1u
#define POLICY_SANDBOX_UID_LAST_MAX  2147483646u
#define POLICY_SANDBOX_UID_COUNT_MAX 16777216u

/*
 * The ingress gateway: `daemon.ingress` (where it listens, what agents are
 * told) and a profile's `ingress` (what it lets through to the sandbox).
 */
/* public_url: a base URL handed to third parties; browsers and SDKs take far longer ones. */
#define POLICY_INGRESS_PUBLIC_URL_BYTES_MAX 2048u
/* prefix: the path before each sandbox id, inside a request line beside the agent's path. */
#define POLICY_INGRESS_PREFIX_BYTES_MAX 256u
/* A method of ingress.methods: RFC 9110's are at most 7 bytes, WebDAV's (MKCALENDAR) 10. */
#define POLICY_INGRESS_METHOD_BYTES_MAX 15u
/* A name of ingress.strip_headers: as long as a canned response's header names. */
#define POLICY_INGRESS_HEADER_BYTES_MAX 64u
/* ingress.body_bytes: one webhook's body; past 1 GiB it is an upload, not a callback. */
#define POLICY_INGRESS_BODY_BYTES_MAX (1u << 30)

/*
 * The `alerts:` section (policy/alerts.c), the settings of the detectors of
 * core/alert.h: each bound is where a value stops making sense.
 */
/* cooldown_s and every window_s: a day; an incident a day apart is two incidents. */
#define POLICY_ALERTS_SECONDS_MAX 86400u
/* threshold: refusals, names or requests a minute; past a million, the detector is off. */
#define POLICY_ALERTS_THRESHOLD_MAX 1000000u
/* request_spike.factor: at least twice the baseline (less is noise), at most a thousand. */
#define POLICY_ALERTS_FACTOR_MIN 2u
#define POLICY_ALERTS_FACTOR_MAX 1000u
/* new_host.warmup_s: a week; 0 alerts from the first request on. */
#define POLICY_ALERTS_WARMUP_S_MAX 604800u
/* upload.bytes: 1 PiB, far past what a window can carry, and well inside uint64_t. */
#define POLICY_ALERTS_BYTES_MAX (1ull << 50)

static_assert(VERDICT_INGRESS_BODY_DEFAULT >= 1 &&
		  VERDICT_INGRESS_BODY_DEFAULT <= POLICY_INGRESS_BODY_BYTES_MAX,
	      "the default body cap must be valid");
static_assert(POLICY_INGRESS_HEADER_BYTES_MAX == POLICY_FAKE_HEADER_NAME_BYTES_MAX,
	      "header names are bounded alike everywhere in the file");

static_assert(POLICY_ALERTS_SECONDS_MAX <= UINT32_MAX && POLICY_ALERTS_WARMUP_S_MAX <= UINT32_MAX,
	      "the alerts' seconds fit struct alert_detector_config");
static_assert(POLICY_ALERTS_FACTOR_MIN >= 2u, "a factor of 1 alerts on the baseline itself");

static_assert(POLICY_RULE_ID_BYTES_MAX >= POLICY_PROFILE_NAME_BYTES_MAX + 1 + 7,
	      "default rule ids \"<profile>/<index>\" must fit");
static_assert(LIMITS_CONNS_PER_WORKER_DEFAULT >= POLICY_CONNS_PER_WORKER_MIN &&
		  LIMITS_CONNS_PER_WORKER_DEFAULT <= POLICY_CONNS_PER_WORKER_MAX,
	      "the default must be valid");
static_assert(LIMITS_PIPES_PER_WORKER_DEFAULT <= POLICY_PIPES_PER_WORKER_MAX,
	      "the default must be valid");
static_assert(LIMITS_SANDBOX_SHARE_PERCENT_DEFAULT >= POLICY_SANDBOX_SHARE_PERCENT_MIN &&
		  LIMITS_SANDBOX_SHARE_PERCENT_DEFAULT <= 100u,
	      "the default must be valid");
static_assert(LIMITS_SANDBOX_CQES_PER_TURN >= 1 &&
		  LIMITS_SANDBOX_CQES_PER_TURN <= POLICY_SANDBOX_COMPLETIONS_PER_TURN_MAX,
	      "the default must be valid");
static_assert(POLICY_SANDBOX_COMPLETIONS_PER_TURN_MAX <= LIMITS_CQES_PER_TURN,
	      "a sandbox's quantum is at most one reaped batch");
static_assert(LIMITS_IDLE_TIMEOUT_MS_DEFAULT <= POLICY_TIMEOUT_MS_MAX, "the default must be valid");

struct policy; /* opaque, immutable once loaded */

/*
 * Loads the policy file <path> (at most POLICY_FILE_BYTES_MAX bytes).
 *
 * On success returns 0 with *<out> owned by the caller (release it with
 * policy_free), and fills <cfg>, which the caller initialised with
 * config_init_defaults: every key of the `daemon:` section overrides the
 * value there, resolver.servers becomes cfg->dns_servers, and the sandboxes
 * replace cfg->sandboxes (profile indexes refer to *<out>).
 *
 * daemon.ingress sets cfg->ingress_listen, and cfg->ingress_public_url and
 * cfg->ingress_prefix when given (the prefix keeps its default otherwise);
 * cfg->ingress_origins is true for `origins: subdomain` only (refused
 * unless public_url names a host: core/ingress.h, ingress_site_init);
 * cfg->ingress_optional is set false: an operator's file makes a listener
 * that cannot bind fail the start. daemon.ingress.tls sets both
 * cfg->ingress_tls_cert and cfg->ingress_tls_key (absolute paths, checked
 * as such only: the daemon reads the files at start, as it reads the CA).
 *
 * On failure <cfg> is unchanged, *<out> is NULL, and "<path>:<line>:<col>:
 * <what is wrong>" (1-based, of the offending key or value) is written to
 * <err>/<err_cap> (truncated to fit; <err> may be NULL when <err_cap> is 0).
 * Returns -EINVAL for any content error (YAML syntax included, and a
 * body_file that cannot be read, with the position of its value), -EFBIG
 * for a file that is too large, -ENOMEM, or -errno from open/read of <path>
 * (then the message is "<path>: <call>: <strerror>").
 *
 * A fake rule's body_file is read here, once: an absolute path as written,
 * a relative one from the directory of <path>. daemon.ca only names the CA
 * files (cfg->ca_cert, cfg->ca_key); nothing reads them here.
 *
 * An inject rule's secret is read here too, at every load (so a reload reads
 * it again): secret_env from the process's environment (getenv), secret_file
 * as body_file is found. A missing variable, a file that cannot be read and a
 * secret that is not 1..POLICY_INJECT_SECRET_BYTES_MAX bytes of visible ASCII
 * are -EINVAL at the position of the secret_env or secret_file value. No
 * message ever holds a secret (a bad byte is named by its position), nor a
 * placeholder or a prefix (either could be a key written in the wrong
 * place). The secret lives in memory of its own, wiped by policy_free. An
 * upstream_ca is only checked to be a regular file; the engine reads it.
 *
 * Control path only (start-up, reload; not thread-safe against setenv); the
 * result may be shared read-only by every worker.
 */
int policy_load_file(const char *path, struct config *cfg, struct policy **out, char *err,
		     size_t err_cap);

/*
 * As policy_load_file, from the <len> bytes at <yaml> (borrowed; need not be
 * NUL-terminated); <name> stands for the path in messages, and a relative
 * body_file, secret_file or upstream_ca is found from the directory of
 * <name> (the working directory when <name> has no '/').
 */
int policy_load_buffer(const char *name, const char *yaml, size_t len, struct config *cfg,
		       struct policy **out, char *err, size_t err_cap);

/*
 * policy_load_file of <path>, or with <path> NULL policy_load_buffer of the
 * built-in policy (named "<embedded default policy>" in messages): what the
 * daemon and `agentsnet check` load. Same contract otherwise, except that the
 * built-in policy sets cfg->ingress_optional true: its gateway listener is a
 * convenience, and a port already in use must not stop a daemon that was
 * given no file.
 */
int policy_load_or_default(const char *path, struct config *cfg, struct policy **out, char *err,
			   size_t err_cap);

/*
 * The built-in policy (NUL-terminated, static): one sandbox "default" on
 * profile "default", which answers example.com from the fake-response tier
 * (200, a short text/html page, for every request) and relays
 * ollama.internal to a local model server on 127.0.0.1:11434; the ingress
 * gateway listens on 127.0.0.1:8090, and the profile's public requests are
 * limited to 50 a second (burst 100) for each sandbox.
 */
const char *policy_default_yaml(void);

/* Takes and releases <p>, wiping every inject rule's secret first; NULL is accepted. */
void policy_free(struct policy *p);

/* The index of the profile called <name>, or -ENOENT. Borrows both. */
int policy_profile_index(const struct policy *p, const char *name);

/*
 * Whether <who> may register sandboxes on profile <index> through the control
 * socket: root always; else a uid of the profile's `users`, or a gid (primary
 * or supplementary) of its `groups`; a profile that names neither admits every
 * caller unless it has a credential-inject rule (then root only).
 */
bool policy_profile_admits(const struct policy *p, uint32_t index,
			   const struct verdict_caller *who);

/* Profiles in <p> (at least 1). */
uint32_t policy_profile_count(const struct policy *p);

/* The name of profile <index> (< policy_profile_count), borrowed from <p>. */
const char *policy_profile_name(const struct policy *p, uint32_t index);

/*
 * What <p> was loaded from: the file's absolute path (policy_load_file; the
 * name as given by policy_load_buffer; NULL: the embedded default), and the
 * digest of its text (POLICY_DIGEST_HEX_BYTES hex digits): two loads of the
 * same bytes have the same digest, so `agentsnet check` can tell whether the
 * file it reads is the one a daemon serves.
 */
const char *policy_source(const struct policy *p);
const char *policy_digest(const struct policy *p);

/* Rules in all profiles of <p>. */
uint32_t policy_rule_count(const struct policy *p);

/*
 * Calls <fn> for every rule of a terminated tier (fake, inject: the CA signs
 * their leaves), with its profile, id, tier and line in the policy file.
 */
void policy_terminated_rules(const struct policy *p, void *arg,
			     void (*fn)(void *arg, const char *profile, const char *rule,
					enum tier tier, uint32_t line));

/*
 * The table the daemon installs into the engine, with a struct policy as the
 * opaque snapshot. Every operation but release is thread-safe and never
 * allocates. decide sets verdict.fake on a TIER_FAKE verdict (NULL on every
 * other); fake_response then takes it with the request's method and path and
 * returns the first of the rule's responses that matches: method compared
 * exactly, path exactly or by prefix (a rule path ending in '*'), the query
 * ("?..." of <path>) ignored. Never NULL: the last response is the default.
 * decide sets verdict.inject on a TIER_INJECT verdict to the rule's struct
 * verdict_inject (NULL on every other), borrowed from the snapshot: its
 * secret stays valid, and unwiped, until release. profile_ingress returns
 * the profile's struct verdict_ingress, built at load (the defaults for a
 * profile without `ingress:`), borrowed from the snapshot until release.
 * profile_alerts returns the profile's struct alert_config, compiled at load
 * (the defaults, then the global `alerts:`, then the profile's, key by key;
 * the defaults alone for a policy without either), never NULL, borrowed
 * from the snapshot until release.
 */
extern const struct verdict_ops policy_verdict_ops;

#endif /* AN_POLICY_POLICY_H */
