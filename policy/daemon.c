/*
 * The policy file's `daemon:` section: the daemon's own settings (its
 * sockets and audit log, workers and their pools, timeouts, the CA it signs
 * leaves with, the uids of sandboxes, the ingress gateway's public
 * listener). They are not policy: they go to struct config (core/config.h),
 * which the engine sizes itself from at start.
 *
 * Every value is staged into the loader's own struct config (ld->next), and
 * ld->uints_set records which integers were given, so a load that fails
 * later leaves the caller's config exactly as it was: loader_apply_config
 * moves what was staged (with resolver.servers and the sandboxes, staged by
 * their sections) into it once the whole document has passed. A key that is
 * absent keeps the value the caller had. Integers come from one table
 * (uint_fields: key, bounds, offset in struct config), so a new one is a
 * row. Paths must be absolute and free of control bytes; addresses are
 * written back canonically (policy/host.c); daemon.tcp_sandbox names a
 * sandbox that policy.c resolves once every sandbox is read.
 *
 * daemon.ingress is the gateway's public listener (where it listens, the
 * URL and path prefix it is reached by, its certificate); what the gateway
 * lets through to a profile's sandboxes is the profile's own `ingress:`
 * section (policy/ingress.c).
 */
#include "policy/loader.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/an.h"
#include "core/config.h"
#include "core/keyfile.h"
#include "core/layout.h"
#include "core/pool.h"
#include "core/webhook.h"
#include "policy/addr.h"

struct uint_field {
	const char *key;
	uint32_t min;
	uint32_t max;
	size_t offset; /* of the uint32_t in struct config */
};

enum {
	UF_WORKERS,
	UF_CONNS,
	UF_PIPES,
	UF_SHARE,
	UF_QUANTUM,
	UF_HEAD,
	UF_CONNECT,
	UF_DNS,
	UF_IDLE,
	UF_BODY,
	UF_RESPONSE,
	UF_DRAIN,
	UF_HANDOVER,
	UF_LEAF_DAYS,
	UF_SANDBOX_UID_FIRST,
	UF_SANDBOX_UID_COUNT,
	UF_PER_USER,
	UF_METRICS_SANDBOXES,
	UF_WEBHOOK_TIMEOUT,
	UF__COUNT
};

static const struct uint_field uint_fields[] = {
	[UF_WORKERS] = { "workers", 0, POLICY_WORKERS_MAX, offsetof(struct config, workers) },
	[UF_CONNS] = { "conns_per_worker", POLICY_CONNS_PER_WORKER_MIN, POLICY_CONNS_PER_WORKER_MAX,
		       offsetof(struct config, conns_per_worker) },
	[UF_PIPES] = { "pipes_per_worker", 0, POLICY_PIPES_PER_WORKER_MAX,
		       offsetof(struct config, pipes_per_worker) },
	[UF_SHARE] = { "sandbox_share_percent", POLICY_SANDBOX_SHARE_PERCENT_MIN, 100,
		       offsetof(struct config, sandbox_share_percent) },
	[UF_QUANTUM] = { "sandbox_completions_per_turn", 1, POLICY_SANDBOX_COMPLETIONS_PER_TURN_MAX,
			 offsetof(struct config, sandbox_completions_per_turn) },
	[UF_HEAD] = { "head_ms", POLICY_TIMEOUT_MS_MIN, POLICY_TIMEOUT_MS_MAX,
		      offsetof(struct config, head_timeout_ms) },
	[UF_CONNECT] = { "connect_ms", POLICY_TIMEOUT_MS_MIN, POLICY_TIMEOUT_MS_MAX,
			 offsetof(struct config, connect_timeout_ms) },
	[UF_DNS] = { "dns_ms", POLICY_TIMEOUT_MS_MIN, POLICY_TIMEOUT_MS_MAX,
		     offsetof(struct config, dns_timeout_ms) },
	[UF_IDLE] = { "idle_ms", POLICY_TIMEOUT_MS_MIN, POLICY_TIMEOUT_MS_MAX,
		      offsetof(struct config, idle_timeout_ms) },
	[UF_BODY] = { "body_ms", POLICY_TIMEOUT_MS_MIN, POLICY_TIMEOUT_MS_MAX,
		      offsetof(struct config, body_timeout_ms) },
	[UF_RESPONSE] = { "response_ms", POLICY_TIMEOUT_MS_MIN, POLICY_TIMEOUT_MS_MAX,
			  offsetof(struct config, response_timeout_ms) },
	/* 0: no drain; the stop aborts what is open at once. */
	[UF_DRAIN] = { "drain_ms", 0, POLICY_TIMEOUT_MS_MAX,
		       offsetof(struct config, drain_timeout_ms) },
	[UF_HANDOVER] = { "handover_ms", POLICY_TIMEOUT_MS_MIN, POLICY_TIMEOUT_MS_MAX,
			  offsetof(struct config, handover_timeout_ms) },
	[UF_LEAF_DAYS] = { "leaf_days", POLICY_LEAF_DAYS_MIN, POLICY_LEAF_DAYS_MAX,
			   offsetof(struct config, leaf_days) },
	[UF_SANDBOX_UID_FIRST] = { "sandbox_uids.first", POLICY_SANDBOX_UID_FIRST_MIN,
				   POLICY_SANDBOX_UID_LAST_MAX,
				   offsetof(struct config, sandbox_uid_first) },
	[UF_SANDBOX_UID_COUNT] = { "sandbox_uids.count", 1, POLICY_SANDBOX_UID_COUNT_MAX,
				   offsetof(struct config, sandbox_uid_count) },
	[UF_PER_USER] = { "sandboxes_per_user", 1, LIMITS_SANDBOXES_MAX,
			  offsetof(struct config, sandboxes_per_user) },
	[UF_METRICS_SANDBOXES] = { "metrics.sandboxes", 0, POLICY_METRICS_SANDBOXES_MAX,
				   offsetof(struct config, metrics_sandboxes) },
	[UF_WEBHOOK_TIMEOUT] = { "alert_webhook.timeout_ms", POLICY_TIMEOUT_MS_MIN,
				 POLICY_WEBHOOK_TIMEOUT_MS_MAX,
				 offsetof(struct config, alert_webhook_timeout_ms) },
};
static_assert(AN_ARRAY_LEN(uint_fields) == UF__COUNT, "every staged integer needs a row");

static int stage_uint(struct loader *ld, uint32_t field)
{
	const struct uint_field *f = &uint_fields[field];
	uint64_t v = 0;

	AN_ASSERT(field < UF__COUNT);
	int rc = loader_uint(ld, f->key, f->min, f->max, &v);
	if (rc != 0)
		return rc;
	uint32_t v32 = (uint32_t)v;
	memcpy((char *)&ld->next + f->offset, &v32, sizeof(v32));
	ld->uints_set |= 1u << field;
	AN_ASSERT(v32 == v);
	return 0;
}

/* An absolute path (or "-" when <dash_ok>) into the staged *<slot>. */
static int stage_path(struct loader *ld, const char *what, bool dash_ok, char **slot)
{
	AN_ASSERT(*slot == NULL);
	int rc = loader_scalar(ld, what, "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	bool dash = dash_ok && len == 1 && s[0] == '-';
	if (!dash && (len == 0 || s[0] != '/'))
		return loader_fail(ld, ld->ev.start_mark, "%s must be an absolute path%s", what,
				   dash_ok ? " or \"-\"" : "");
	if (len > POLICY_PATH_BYTES_MAX || !loader_text_is_clean(s, len))
		return loader_fail(ld, ld->ev.start_mark,
				   "%s must be at most %u bytes without control characters", what,
				   POLICY_PATH_BYTES_MAX);
	*slot = pool_strndup(s, len);
	if (*slot == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT((*slot)[0] == '/' || dash);
	return 0;
}

/* <what>: a loopback address:port (what only this host's processes reach) into *<slot>. */
static int stage_loopback_listen(struct loader *ld, const char *what, char **slot)
{
	char buf[HOSTPORT_BYTES];
	struct sockaddr_storage ss;
	uint16_t port = 0;

	AN_ASSERT(*slot == NULL);
	int rc = loader_ip_port(ld, what, true, &ss, &port);
	if (rc != 0)
		return rc;
	if (addr_classify((const struct sockaddr *)&ss) != ADDR_LOOPBACK)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "%s must be a loopback address:port (127.0.0.1:PORT or [::1]:PORT)", what);
	loader_format_addr(&ss, port, buf, sizeof(buf));
	*slot = pool_strndup(buf, strlen(buf));
	if (*slot == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(port != 0);
	return 0;
}

static int stage_tcp_listen(struct loader *ld)
{
	return stage_loopback_listen(ld, "tcp_listen", &ld->next.tcp_listen);
}

/*
 * daemon.metrics: the Prometheus listener (core/metrics.h), on a loopback
 * address only (its series name every sandbox), and how many sandboxes get
 * series of their own.
 */
enum { MK_LISTEN, MK_SANDBOXES, MK__COUNT };
static const char *const metrics_keys[] = { [MK_LISTEN] = "listen", [MK_SANDBOXES] = "sandboxes" };
static const struct keyset metrics_keyset = { "daemon.metrics", metrics_keys, MK__COUNT };

static int parse_metrics(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "metrics");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &metrics_keyset, &seen, &key)) > 0) {
		AN_ASSERT(key < MK__COUNT);
		rc = key == MK_LISTEN
			 ? stage_loopback_listen(ld, "metrics.listen", &ld->next.metrics_listen)
			 : stage_uint(ld, UF_METRICS_SANDBOXES);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	if ((seen & (1u << MK_LISTEN)) == 0)
		return loader_fail(ld, start, "metrics needs listen");
	return 0;
}

/*
 * daemon.alert_webhook (core/webhook.h): the URL alerts are POSTed to, an
 * optional file holding the Authorization header's value, the roots an
 * https receiver is verified against, a try's timeout. The URL is checked
 * here, at its line; the daemon reads what was staged.
 */
enum { WK_URL, WK_AUTHORIZATION_FILE, WK_CA_FILE, WK_TIMEOUT, WK__COUNT };
static const char *const webhook_keys[] = { [WK_URL] = "url",
					    [WK_AUTHORIZATION_FILE] = "authorization_file",
					    [WK_CA_FILE] = "ca_file",
					    [WK_TIMEOUT] = "timeout_ms" };
static const struct keyset webhook_keyset = { "daemon.alert_webhook", webhook_keys, WK__COUNT };

static int stage_webhook_url(struct loader *ld)
{
	struct webhook_target target;
	char why[160];

	AN_ASSERT(ld->next.alert_webhook_url == NULL);
	int rc = loader_scalar(ld, "alert_webhook.url", "a string");
	if (rc != 0)
		return rc;
	if (!loader_text_is_clean(ev_text(ld), ev_len(ld)) ||
	    webhook_target_parse(ev_text(ld), ev_len(ld), &target, why, sizeof(why)) != 0)
		return loader_fail(ld, ld->ev.start_mark, "alert_webhook.url %s",
				   loader_text_is_clean(ev_text(ld), ev_len(ld))
				       ? why
				       : "has a control character");
	ld->next.alert_webhook_url = pool_strndup(ev_text(ld), ev_len(ld));
	if (ld->next.alert_webhook_url == NULL)
		return loader_fail_oom(ld);
	return 0;
}

/*
 * authorization_file: its content (one trailing newline dropped) is the
 * Authorization header's value, "Bearer ..." say; a secret, so the file must
 * be the daemon's user's and readable by it alone (core/keyfile.h), and its
 * bytes printable ASCII (a header line cannot carry others).
 */
static int stage_webhook_authorization(struct loader *ld)
{
	static const char what[] = "alert_webhook.authorization_file";
	char path[PATH_MAX];
	const char *call = NULL;
	char *buf = NULL;
	size_t got = 0;
	char why[128];
	struct stat st;

	AN_ASSERT(ld->next.alert_webhook_authorization == NULL);
	int rc = loader_file_value(ld, what, path, sizeof(path));
	if (rc != 0)
		return rc;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd == -1)
		return loader_fail(ld, ld->ev.start_mark, "%s %s: open: %s", what, path,
				   strerror(errno));
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    keyfile_check(&st, why, sizeof(why)) != 0) {
		close(fd);
		return loader_fail(ld, ld->ev.start_mark, "%s %s: %s", what, path, why);
	}
	rc = loader_file_load(fd, WEBHOOK_AUTHORIZATION_BYTES_MAX + 1u, &buf, &got, &call);
	close(fd);
	if (rc != 0)
		return loader_fail_file_load(ld, what, path, rc, call,
					     WEBHOOK_AUTHORIZATION_BYTES_MAX + 1u);
	size_t len = got > 0 && buf[got - 1] == '\n' ? got - 1 : got;
	buf[len] = '\0';
	size_t bad = len;
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] > 0x7e) {
			bad = i;
			break;
		}
	}
	if (len == 0 || len > WEBHOOK_AUTHORIZATION_BYTES_MAX || bad < len) {
		pool_free_secret(buf, got + 1);
		if (len == 0)
			return loader_fail(ld, ld->ev.start_mark, "%s %s: the file is empty", what,
					   path);
		if (bad < len)
			return loader_fail(ld, ld->ev.start_mark,
					   "%s %s: a byte that is not printable ASCII at position "
					   "%zu: a header line cannot carry it",
					   what, path, bad + 1);
		return loader_fail(ld, ld->ev.start_mark, "%s %s: longer than %u bytes", what, path,
				   WEBHOOK_AUTHORIZATION_BYTES_MAX);
	}
	/* The secret's bytes and their length, as config_free wipes them (strlen + 1). */
	ld->next.alert_webhook_authorization = buf;
	return 0;
}

/* ca_file: PEM roots for an https receiver; checked here (a regular file), read by the daemon. */
static int stage_webhook_ca_file(struct loader *ld)
{
	static const char what[] = "alert_webhook.ca_file";
	char path[PATH_MAX];
	struct stat st;

	AN_ASSERT(ld->next.alert_webhook_ca_file == NULL);
	int rc = loader_file_value(ld, what, path, sizeof(path));
	if (rc != 0)
		return rc;
	if (stat(path, &st) == -1)
		return loader_fail(ld, ld->ev.start_mark, "%s %s: stat: %s", what, path,
				   strerror(errno));
	if (!S_ISREG(st.st_mode))
		return loader_fail(ld, ld->ev.start_mark, "%s %s: not a regular file", what, path);
	ld->next.alert_webhook_ca_file = pool_strndup(path, strlen(path));
	if (ld->next.alert_webhook_ca_file == NULL)
		return loader_fail_oom(ld);
	return 0;
}

static int parse_alert_webhook(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "alert_webhook");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &webhook_keyset, &seen, &key)) > 0) {
		AN_ASSERT(key < WK__COUNT);
		rc = key == WK_URL                  ? stage_webhook_url(ld)
		     : key == WK_AUTHORIZATION_FILE ? stage_webhook_authorization(ld)
		     : key == WK_CA_FILE            ? stage_webhook_ca_file(ld)
						    : stage_uint(ld, UF_WEBHOOK_TIMEOUT);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	if ((seen & (1u << WK_URL)) == 0)
		return loader_fail(ld, start, "alert_webhook needs url");
	if ((seen & (1u << WK_CA_FILE)) != 0 &&
	    strncasecmp(ld->next.alert_webhook_url, "https://", 8) != 0)
		return loader_fail(ld, start,
				   "alert_webhook.ca_file is for an https:// url; this one is "
				   "http://");
	return 0;
}

static int stage_tcp_sandbox(struct loader *ld)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(ld->next.tcp_sandbox == NULL);
	int rc = loader_scalar(ld, "tcp_sandbox", "a string");
	if (rc != 0)
		return rc;
	if (!loader_is_id(ev_text(ld), ev_len(ld)))
		return loader_fail(ld, ld->ev.start_mark, "invalid tcp_sandbox \"%s\"",
				   loader_show(ev_text(ld), ev_len(ld), shown));
	ld->tcp_sandbox_mark = ld->ev.start_mark;
	ld->next.tcp_sandbox = pool_strndup(ev_text(ld), ev_len(ld));
	if (ld->next.tcp_sandbox == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(ld->next.tcp_sandbox[0] != '\0');
	return 0;
}

/* A POSIX portable group name; whether it exists is checked when the daemon starts. */
static bool is_group_name(const char *s, size_t len)
{
	if (len == 0 || len > 32 || s[0] == '-')
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
		if (!ok)
			return false;
	}
	return true;
}

static int stage_control_group(struct loader *ld)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(ld->next.control_group == NULL);
	int rc = loader_scalar(ld, "control_group", "a string");
	if (rc != 0)
		return rc;
	if (!is_group_name(ev_text(ld), ev_len(ld)))
		return loader_fail(ld, ld->ev.start_mark, "invalid control_group \"%s\"",
				   loader_show(ev_text(ld), ev_len(ld), shown));
	ld->next.control_group = pool_strndup(ev_text(ld), ev_len(ld));
	if (ld->next.control_group == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(ld->next.control_group[0] != '\0');
	return 0;
}

/* In UF_HEAD's order: a key's field is UF_HEAD + its index. */
static const char *const timeout_keys[] = { "head_ms", "connect_ms",  "dns_ms",   "idle_ms",
					    "body_ms", "response_ms", "drain_ms", "handover_ms" };
static_assert(UF_HEAD + 6 == UF_DRAIN && UF_DRAIN + 1 == UF_HANDOVER,
	      "timeout_keys follow the UF_ order");
static const struct keyset timeout_keyset = { "daemon.timeouts", timeout_keys,
					      AN_ARRAY_LEN(timeout_keys) };

static int parse_timeouts(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "timeouts");
	if (rc != 0)
		return rc;
	while ((rc = loader_key(ld, &timeout_keyset, &seen, &key)) > 0) {
		AN_ASSERT(key < AN_ARRAY_LEN(timeout_keys));
		rc = stage_uint(ld, UF_HEAD + key);
		if (rc != 0)
			return rc;
	}
	AN_ASSERT(rc <= 0);
	return rc;
}

/*
 * daemon.sandbox_uids: the uids `agentsnet run` as root gets for its sandboxes
 * from the daemon, one each (core/engine.h ENGINE_AGENT_NEW). Both keys are
 * mandatory, and the range must end by POLICY_SANDBOX_UID_LAST_MAX.
 */
enum { SU_FIRST, SU_COUNT, SU__COUNT };
static const char *const sandbox_uid_keys[] = { [SU_FIRST] = "first", [SU_COUNT] = "count" };
static const struct keyset sandbox_uid_keyset = { "daemon.sandbox_uids", sandbox_uid_keys,
						  SU__COUNT };

static int parse_sandbox_uids(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "sandbox_uids");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &sandbox_uid_keyset, &seen, &key)) > 0) {
		AN_ASSERT(key < SU__COUNT);
		rc = stage_uint(ld, key == SU_FIRST ? UF_SANDBOX_UID_FIRST : UF_SANDBOX_UID_COUNT);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	if (seen != (1u << SU__COUNT) - 1)
		return loader_fail(ld, start, "sandbox_uids needs both first and count");
	uint64_t last = (uint64_t)ld->next.sandbox_uid_first + ld->next.sandbox_uid_count - 1;
	if (last > POLICY_SANDBOX_UID_LAST_MAX)
		return loader_fail(ld, start, "sandbox_uids ends at %llu, past %u",
				   (unsigned long long)last, POLICY_SANDBOX_UID_LAST_MAX);
	return 0;
}

/* daemon.ca: the files of the CA the terminated tiers sign leaves with; read by the daemon. */
enum { CA_CERT, CA_KEY, CA__COUNT };
static const char *const ca_keys[] = { [CA_CERT] = "cert", [CA_KEY] = "key" };
static const struct keyset ca_keyset = { "daemon.ca", ca_keys, CA__COUNT };

static int parse_ca(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(ld->next.ca_cert == NULL);
	AN_ASSERT(ld->next.ca_key == NULL);
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "ca");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &ca_keyset, &seen, &key)) > 0) {
		AN_ASSERT(key < CA__COUNT);
		rc = key == CA_CERT ? stage_path(ld, "ca.cert", false, &ld->next.ca_cert)
				    : stage_path(ld, "ca.key", false, &ld->next.ca_key);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	rc = loader_check_mandatory(ld, &ca_keyset, (1u << CA_CERT) | (1u << CA_KEY), seen, start);
	if (rc == 0)
		AN_ASSERT(ld->next.ca_cert != NULL);
	if (rc == 0)
		AN_ASSERT(ld->next.ca_key != NULL);
	return rc;
}

/* --- daemon.ingress: the gateway's public listener ------------------------------ */

/* Any unicast or unspecified address (0.0.0.0, [::]): the listener faces the outside. */
static int stage_ingress_listen(struct loader *ld)
{
	char buf[HOSTPORT_BYTES];
	struct sockaddr_storage ss;
	uint16_t port = 0;

	AN_ASSERT(ld->next.ingress_listen == NULL);
	int rc = loader_ip_port(ld, "ingress.listen", true, &ss, &port);
	if (rc != 0)
		return rc;
	if (addr_classify((const struct sockaddr *)&ss) == ADDR_MULTICAST)
		return loader_fail(ld, ld->ev.start_mark,
				   "ingress.listen cannot be a multicast address, which takes no "
				   "connections: name a local address, or 0.0.0.0 or [::] for all");
	loader_format_addr(&ss, port, buf, sizeof(buf));
	ld->next.ingress_listen = pool_strndup(buf, strlen(buf));
	if (ld->next.ingress_listen == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(port != 0);
	return 0;
}

/* The authority of a public URL: a host name, an IPv4 address or a bracketed IPv6 one. */
static const char *authority_invalid(const char *s, size_t len)
{
	struct sockaddr_storage ss;
	struct hostport hp;

	AN_ASSERT(s != NULL || len == 0);
	if (len == 0)
		return "the host is missing";
	if (memchr(s, '@', len) != NULL)
		return "no user information (\"user@\"): the URL is handed to third parties";
	const char *why = loader_split_hostport(s, len, &hp);
	if (why != NULL)
		return why;
	if (hp.bracketed)
		return addr_parse_ip(hp.host, hp.host_len, &ss) == 0 && ss.ss_family == AF_INET6
			   ? NULL
			   : "brackets hold an IPv6 address";
	for (size_t i = 0; i < hp.host_len; i++) {
		char c = hp.host[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
		if (c == ':')
			return "an IPv6 address goes in brackets (\"http://[2001:db8::1]:8090\")";
		if (!ok)
			return "a byte that is not part of a host name";
	}
	AN_ASSERT(hp.host_len > 0);
	return NULL;
}

/*
 * A base URL agents are told: "http://" or "https://" and an authority,
 * nothing after it. The gateway appends "<prefix>/<id>", so a path, a query
 * or a fragment here would end up in the middle of every public URL.
 */
static const char *public_url_invalid(const char *s, size_t len)
{
	static const char http[] = "http://";
	static const char https[] = "https://";
	size_t scheme = 0;

	AN_ASSERT(s != NULL);
	AN_ASSERT(len <= POLICY_INGRESS_PUBLIC_URL_BYTES_MAX);
	if (loader_first_invisible(s, len) != 0)
		return "a space, control character or non-ASCII byte (write a name in its "
		       "xn-- form)";
	if (len >= sizeof(http) - 1 && memcmp(s, http, sizeof(http) - 1) == 0)
		scheme = sizeof(http) - 1;
	else if (len >= sizeof(https) - 1 && memcmp(s, https, sizeof(https) - 1) == 0)
		scheme = sizeof(https) - 1;
	else
		return "it must start with http:// or https://";
	const char *auth = s + scheme;
	size_t rest = len - scheme;
	size_t n = 0;
	while (n < rest && auth[n] != '/' && auth[n] != '?' && auth[n] != '#')
		n++;
	if (n == rest)
		return authority_invalid(auth, n);
	if (auth[n] == '/' && n + 1 == rest)
		return "drop the trailing '/': agents get <public_url><prefix>/<sandbox id>";
	if (auth[n] == '/')
		return "no path: the path agents get is ingress.prefix";
	return auth[n] == '?' ? "no query (\"?...\")" : "no fragment (\"#...\")";
}

static int stage_ingress_public_url(struct loader *ld)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(ld->next.ingress_public_url == NULL);
	int rc = loader_scalar(ld, "ingress.public_url", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	if (len > POLICY_INGRESS_PUBLIC_URL_BYTES_MAX)
		return loader_fail(ld, ld->ev.start_mark,
				   "ingress.public_url is longer than %u bytes",
				   POLICY_INGRESS_PUBLIC_URL_BYTES_MAX);
	const char *why = public_url_invalid(s, len);
	if (why != NULL)
		return loader_fail(ld, ld->ev.start_mark, "invalid ingress.public_url \"%s\": %s",
				   loader_show(s, len, shown), why);
	ld->next.ingress_public_url = pool_strndup(s, len);
	if (ld->next.ingress_public_url == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(ld->next.ingress_public_url[0] == 'h');
	return 0;
}

/* "/seg/seg": each segment of [A-Za-z0-9._~-], none empty, "." or "..". NULL, or why not. */
static const char *prefix_invalid(const char *s, size_t len)
{
	size_t seg = 1;

	AN_ASSERT(s != NULL || len == 0);
	if (len == 0 || s[0] != '/')
		return "it must start with '/' (\"/callbacks\")";
	if (len == 1)
		return "name a path below the root (\"/callbacks\")";
	if (s[len - 1] == '/')
		return "drop the trailing '/': agents get <public_url><prefix>/<sandbox id>";
	for (size_t i = 1; i <= len; i++) {
		if (i < len && s[i] != '/') {
			char c = s[i];
			bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
				  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' ||
				  c == '-';
			if (!ok)
				return "a byte outside [A-Za-z0-9._~-] in a segment";
			continue;
		}
		size_t n = i - seg;
		if (n == 0)
			return "an empty segment (\"//\")";
		if ((n == 1 && s[seg] == '.') || (n == 2 && s[seg] == '.' && s[seg + 1] == '.'))
			return "a \".\" or \"..\" segment";
		seg = i + 1;
	}
	AN_ASSERT(seg == len + 1);
	return NULL;
}

static int stage_ingress_prefix(struct loader *ld)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(ld->next.ingress_prefix == NULL);
	int rc = loader_scalar(ld, "ingress.prefix", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	if (len > POLICY_INGRESS_PREFIX_BYTES_MAX)
		return loader_fail(ld, ld->ev.start_mark, "ingress.prefix is longer than %u bytes",
				   POLICY_INGRESS_PREFIX_BYTES_MAX);
	const char *why = prefix_invalid(s, len);
	if (why != NULL)
		return loader_fail(ld, ld->ev.start_mark, "invalid ingress.prefix \"%s\": %s",
				   loader_show(s, len, shown), why);
	ld->next.ingress_prefix = pool_strndup(s, len);
	if (ld->next.ingress_prefix == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(ld->next.ingress_prefix[0] == '/');
	return 0;
}

/*
 * daemon.ingress.tls: the operator's certificate chain and key the public
 * listener serves HTTPS with; like daemon.ca, named here and read by the
 * daemon at start.
 */
enum { IT_CERT, IT_KEY, IT__COUNT };
static const char *const ingress_tls_keys[] = { [IT_CERT] = "cert", [IT_KEY] = "key" };
static const struct keyset ingress_tls_keyset = { "daemon.ingress.tls", ingress_tls_keys,
						  IT__COUNT };

static int parse_ingress_tls(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(ld->next.ingress_tls_cert == NULL);
	AN_ASSERT(ld->next.ingress_tls_key == NULL);
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "ingress.tls");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &ingress_tls_keyset, &seen, &key)) > 0) {
		AN_ASSERT(key < IT__COUNT);
		rc = key == IT_CERT
			 ? stage_path(ld, "ingress.tls.cert", false, &ld->next.ingress_tls_cert)
			 : stage_path(ld, "ingress.tls.key", false, &ld->next.ingress_tls_key);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	uint32_t both = (1u << IT_CERT) | (1u << IT_KEY);
	rc = loader_check_mandatory(ld, &ingress_tls_keyset, both, seen, start);
	if (rc == 0)
		AN_ASSERT(ld->next.ingress_tls_cert != NULL);
	if (rc == 0)
		AN_ASSERT(ld->next.ingress_tls_key != NULL);
	return rc;
}

/* daemon.audit_failure: "continue", requests are served while the audit log cannot be
 * written (their records lost, counted), or "refuse", each refused 503 audit_unavailable. */
static int stage_audit_failure(struct loader *ld)
{
	return loader_choice(ld, "audit_failure", "continue", "refuse",
			     &ld->next.audit_failure_refuse);
}

/* daemon.ingress.origins: "path", every sandbox under the public URL's one origin, or
 * "subdomain", each sandbox also at an origin of its own, <id>.<the public URL's host>. */
static int stage_ingress_origins(struct loader *ld)
{
	return loader_choice(ld, "ingress.origins", "path", "subdomain", &ld->next.ingress_origins);
}

/*
 * Per-sandbox origins are names under the public URL's host: one must be
 * given, and be a name (no sub-domain of an address exists). NULL, or why not.
 */
static const char *origins_host_invalid(const char *public_url)
{
	struct sockaddr_storage ss;
	struct hostport hp;

	if (public_url == NULL)
		return "ingress.origins: subdomain needs ingress.public_url, whose host the "
		       "sandboxes' origins are under (<id>.<host>)";
	const char *auth = strstr(public_url, "://") + 3;
	const char *why = loader_split_hostport(auth, strlen(auth), &hp);
	AN_ASSERT(why == NULL); /* checked when public_url was staged */
	if (hp.bracketed || addr_parse_ip(hp.host, hp.host_len, &ss) == 0)
		return "ingress.origins: subdomain needs an ingress.public_url that names a host, "
		       "not an address: the sandboxes' origins are <id>.<host>";
	return NULL;
}

enum { DI_LISTEN, DI_PUBLIC_URL, DI_PREFIX, DI_TLS, DI_ORIGINS, DI__COUNT };
static const char *const daemon_ingress_keys[] = {
	[DI_LISTEN] = "listen", [DI_PUBLIC_URL] = "public_url", [DI_PREFIX] = "prefix",
	[DI_TLS] = "tls",       [DI_ORIGINS] = "origins",
};
static_assert(AN_ARRAY_LEN(daemon_ingress_keys) == DI__COUNT, "every key needs a name");
static const struct keyset daemon_ingress_keyset = { "daemon.ingress", daemon_ingress_keys,
						     DI__COUNT };

/*
 * daemon.ingress: listen is mandatory; public_url and prefix only say how
 * agents are told, tls how the listener speaks, origins whether each sandbox
 * has an origin of its own too.
 */
static int parse_daemon_ingress(struct loader *ld)
{
	yaml_mark_t marks[DI__COUNT];
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(ld->next.ingress_listen == NULL);
	AN_ASSERT(ld->next.ingress_public_url == NULL);
	AN_ASSERT(ld->next.ingress_prefix == NULL);
	AN_ASSERT(ld->next.ingress_tls_cert == NULL);
	memset(marks, 0, sizeof(marks));
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "ingress");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &daemon_ingress_keyset, &seen, &key)) > 0) {
		marks[key] = ld->key_mark;
		rc = key == DI_LISTEN       ? stage_ingress_listen(ld)
		     : key == DI_PUBLIC_URL ? stage_ingress_public_url(ld)
		     : key == DI_PREFIX     ? stage_ingress_prefix(ld)
		     : key == DI_ORIGINS    ? stage_ingress_origins(ld)
					    : parse_ingress_tls(ld);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	for (uint32_t k = DI_PUBLIC_URL; k < DI__COUNT && !(seen & (1u << DI_LISTEN)); k++) {
		if (seen & (1u << k))
			return loader_fail(
			    ld, marks[k],
			    "ingress.%s needs ingress.listen (the ip:port the gateway "
			    "listens on)",
			    daemon_ingress_keys[k]);
	}
	rc = loader_check_mandatory(ld, &daemon_ingress_keyset, 1u << DI_LISTEN, seen, start);
	if (rc != 0)
		return rc;
	const char *why =
	    ld->next.ingress_origins ? origins_host_invalid(ld->next.ingress_public_url) : NULL;
	if (why != NULL)
		return loader_fail(ld, marks[DI_ORIGINS], "%s", why);
	AN_ASSERT(ld->next.ingress_listen != NULL);
	return 0;
}

enum {
	DK_SOCKET_DIR,
	DK_AUDIT_LOG,
	DK_WORKERS,
	DK_CONNS,
	DK_PIPES,
	DK_SHARE,
	DK_QUANTUM,
	DK_TCP_LISTEN,
	DK_TCP_SANDBOX,
	DK_TIMEOUTS,
	DK_CONTROL_GROUP,
	DK_CA,
	DK_LEAF_DAYS,
	DK_INGRESS,
	DK_SANDBOX_UIDS,
	DK_PER_USER,
	DK_AUDIT_FAILURE,
	DK_METRICS,
	DK_ALERT_WEBHOOK,
	DK__COUNT
};
static const char *const daemon_keys[] = {
	[DK_SOCKET_DIR] = "socket_dir",
	[DK_AUDIT_LOG] = "audit_log",
	[DK_WORKERS] = "workers",
	[DK_CONNS] = "conns_per_worker",
	[DK_PIPES] = "pipes_per_worker",
	[DK_SHARE] = "sandbox_share_percent",
	[DK_QUANTUM] = "sandbox_completions_per_turn",
	[DK_TCP_LISTEN] = "tcp_listen",
	[DK_TCP_SANDBOX] = "tcp_sandbox",
	[DK_TIMEOUTS] = "timeouts",
	[DK_CONTROL_GROUP] = "control_group",
	[DK_CA] = "ca",
	[DK_LEAF_DAYS] = "leaf_days",
	[DK_INGRESS] = "ingress",
	[DK_SANDBOX_UIDS] = "sandbox_uids",
	[DK_PER_USER] = "sandboxes_per_user",
	[DK_AUDIT_FAILURE] = "audit_failure",
	[DK_METRICS] = "metrics",
	[DK_ALERT_WEBHOOK] = "alert_webhook",
};
static_assert(AN_ARRAY_LEN(daemon_keys) == DK__COUNT, "every daemon key needs a name");
static const struct keyset daemon_keyset = { "daemon", daemon_keys, DK__COUNT };

static int daemon_value(struct loader *ld, uint32_t key)
{
	AN_ASSERT(key < DK__COUNT);
	AN_ASSERT(ld->ev_live);
	switch (key) {
	case DK_SOCKET_DIR: {
		int rc = stage_path(ld, "socket_dir", false, &ld->next.socket_dir);
		if (rc == 0 && strlen(ld->next.socket_dir) > LAYOUT_SOCKET_DIR_BYTES_MAX)
			return loader_fail(
			    ld, ld->ev.start_mark,
			    "socket_dir must be at most %u bytes: the paths of its sockets of fixed "
			    "name (" LAYOUT_INTERNAL_INGRESS_SOCKET " the longest) must fit the "
			    "107 bytes of a Unix socket's",
			    (unsigned)LAYOUT_SOCKET_DIR_BYTES_MAX);
		return rc;
	}
	case DK_AUDIT_LOG:
		return stage_path(ld, "audit_log", true, &ld->next.audit_path);
	case DK_WORKERS:
		return stage_uint(ld, UF_WORKERS);
	case DK_CONNS:
		return stage_uint(ld, UF_CONNS);
	case DK_PIPES:
		return stage_uint(ld, UF_PIPES);
	case DK_SHARE:
		return stage_uint(ld, UF_SHARE);
	case DK_QUANTUM:
		return stage_uint(ld, UF_QUANTUM);
	case DK_TCP_LISTEN:
		return stage_tcp_listen(ld);
	case DK_TCP_SANDBOX:
		return stage_tcp_sandbox(ld);
	case DK_TIMEOUTS:
		return parse_timeouts(ld);
	case DK_CONTROL_GROUP:
		return stage_control_group(ld);
	case DK_CA:
		return parse_ca(ld);
	case DK_LEAF_DAYS:
		return stage_uint(ld, UF_LEAF_DAYS);
	case DK_INGRESS:
		return parse_daemon_ingress(ld);
	case DK_SANDBOX_UIDS:
		return parse_sandbox_uids(ld);
	case DK_PER_USER:
		return stage_uint(ld, UF_PER_USER);
	case DK_AUDIT_FAILURE:
		return stage_audit_failure(ld);
	case DK_METRICS:
		return parse_metrics(ld);
	case DK_ALERT_WEBHOOK:
		return parse_alert_webhook(ld);
	default:
		(void)AN_NEVER(true);
		return -EINVAL;
	}
}

int loader_daemon(struct loader *ld)
{
	yaml_mark_t listen_mark = { 0, 0, 0 };
	yaml_mark_t sandbox_mark = { 0, 0, 0 };
	uint32_t seen = 0;
	uint32_t key = 0;

	AN_ASSERT(ld->next.tcp_listen == NULL && ld->next.tcp_sandbox == NULL);
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "daemon");
	if (rc != 0)
		return rc;
	while ((rc = loader_key(ld, &daemon_keyset, &seen, &key)) > 0) {
		if (key == DK_TCP_LISTEN)
			listen_mark = ld->key_mark;
		if (key == DK_TCP_SANDBOX)
			sandbox_mark = ld->key_mark;
		rc = daemon_value(ld, key);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	if ((seen & (1u << DK_TCP_LISTEN)) && !(seen & (1u << DK_TCP_SANDBOX)))
		return loader_fail(ld, listen_mark, "tcp_sandbox is mandatory with tcp_listen");
	if ((seen & (1u << DK_TCP_SANDBOX)) && !(seen & (1u << DK_TCP_LISTEN)))
		return loader_fail(ld, sandbox_mark, "tcp_sandbox is only allowed with tcp_listen");
	AN_ASSERT((ld->next.tcp_listen == NULL) == (ld->next.tcp_sandbox == NULL));
	return 0;
}

/* --- applying what was staged ---------------------------------------------------- */

static void move_string(char **to, char **from)
{
	if (*from == NULL)
		return;
	pool_free(*to);
	*to = *from;
	*from = NULL;
	AN_ASSERT(*to != NULL);
}

/* Moves what the load staged into <cfg>; cannot fail. */
void loader_apply_config(struct loader *ld, struct config *cfg)
{
	struct config *next = &ld->next;

	AN_ASSERT(cfg != next);
	move_string(&cfg->socket_dir, &next->socket_dir);
	move_string(&cfg->audit_path, &next->audit_path);
	move_string(&cfg->dns_servers, &next->dns_servers);
	move_string(&cfg->tcp_listen, &next->tcp_listen);
	move_string(&cfg->tcp_sandbox, &next->tcp_sandbox);
	move_string(&cfg->metrics_listen, &next->metrics_listen);
	move_string(&cfg->alert_webhook_url, &next->alert_webhook_url);
	move_string(&cfg->alert_webhook_ca_file, &next->alert_webhook_ca_file);
	if (next->alert_webhook_authorization != NULL) {
		if (cfg->alert_webhook_authorization != NULL)
			pool_free_secret(cfg->alert_webhook_authorization,
					 strlen(cfg->alert_webhook_authorization) + 1);
		cfg->alert_webhook_authorization = next->alert_webhook_authorization;
		next->alert_webhook_authorization = NULL;
	}
	move_string(&cfg->control_group, &next->control_group);
	move_string(&cfg->ca_cert, &next->ca_cert);
	move_string(&cfg->ca_key, &next->ca_key);
	move_string(&cfg->ingress_listen, &next->ingress_listen);
	move_string(&cfg->ingress_public_url, &next->ingress_public_url);
	move_string(&cfg->ingress_prefix, &next->ingress_prefix);
	/* Both or neither were staged (both are mandatory in `tls`), so they stay a pair. */
	AN_ASSERT((next->ingress_tls_cert == NULL) == (next->ingress_tls_key == NULL));
	move_string(&cfg->ingress_tls_cert, &next->ingress_tls_cert);
	move_string(&cfg->ingress_tls_key, &next->ingress_tls_key);
	cfg->ingress_origins = next->ingress_origins;
	cfg->audit_failure_refuse = next->audit_failure_refuse;
	cfg->ingress_optional = ld->embedded; /* no key sets it: only the built-in policy does */
	for (uint32_t i = 0; i < UF__COUNT; i++) {
		if (ld->uints_set & (1u << i))
			memcpy((char *)cfg + uint_fields[i].offset,
			       (const char *)next + uint_fields[i].offset, sizeof(uint32_t));
	}
	for (uint32_t i = 0; i < cfg->sandbox_count; i++)
		AN_FREE(&cfg->sandboxes[i].id);
	AN_FREE(&cfg->sandboxes);
	cfg->sandboxes = next->sandboxes;
	cfg->sandbox_count = next->sandbox_count;
	next->sandboxes = NULL;
	next->sandbox_count = 0;
	AN_ASSERT(cfg->sandbox_count == 0 || cfg->sandboxes != NULL);
}
