/*
 * policy/daemon.c, the `daemon:` section: each integer at its bounds N and
 * N+1 (workers, pools, timeouts, leaf_days), sandbox_uids, the paths,
 * control_group, tcp_listen and tcp_sandbox, the CA, and daemon.ingress, the
 * ingress gateway's public listener (listen, public_url, prefix, tls.cert
 * and tls.key: each at its limit N and N+1, listen required by the others);
 * every refusal with its exact "file:line:col: message", and the config
 * staged, so a load that fails anywhere changes nothing.
 */
#include "../../../policy/daemon.c"

#include "tests/unit/policy/policytest.h"

static void setup(void)
{
	policytest_setup(NULL);
}

/* --- daemon.sandbox_uids ------------------------------------------------------------------- */

START_TEST(test_sandbox_uids)
{
	expect_ok(MINIMAL "daemon: {sandbox_uids: {first: 200000, count: 10}}\n");
	ck_assert_uint_eq(cfg.sandbox_uid_first, 200000);
	ck_assert_uint_eq(cfg.sandbox_uid_count, 10);
	/* The last uid may be POLICY_SANDBOX_UID_LAST_MAX, not one more. */
	expect_ok(MINIMAL "daemon: {sandbox_uids: {count: 16, first: 2147483631}}\n");
	ck_assert_uint_eq(cfg.sandbox_uid_first, 2147483631);
	expect_error(MINIMAL "daemon: {sandbox_uids: {first: 2147483632, count: 16}}\n",
		     "t.yaml:9:24: sandbox_uids ends at 2147483647, past 2147483646");
	expect_error(MINIMAL "daemon: {sandbox_uids: {first: 0, count: 16}}\n",
		     "t.yaml:9:32: sandbox_uids.first must be 1..2147483646, got 0");
	expect_error(MINIMAL "daemon: {sandbox_uids: {first: 5, count: 0}}\n",
		     "t.yaml:9:42: sandbox_uids.count must be 1..16777216, got 0");
	expect_error(MINIMAL "daemon: {sandbox_uids: {first: 5, count: 16777217}}\n",
		     "t.yaml:9:42: sandbox_uids.count must be 1..16777216, got 16777217");
	expect_error(MINIMAL "daemon: {sandbox_uids: {first: 5}}\n",
		     "t.yaml:9:24: sandbox_uids needs both first and count");
	expect_error(MINIMAL "daemon: {sandbox_uids: {count: 5}}\n",
		     "t.yaml:9:24: sandbox_uids needs both first and count");
	expect_error(MINIMAL "daemon: {sandbox_uids: {first: 5, count: 5, last: 9}}\n",
		     "t.yaml:9:45: unknown key \"last\" in daemon.sandbox_uids (expected one of: "
		     "first, count)");
	expect_error(MINIMAL "daemon: {sandbox_uids: 1879048192}\n",
		     "t.yaml:9:24: sandbox_uids must be a mapping");
	/* A failed load keeps what the last good one set. */
	ck_assert_uint_eq(cfg.sandbox_uid_first, 2147483631);
	ck_assert_uint_eq(cfg.sandbox_uid_count, 16);
}
END_TEST

/* --- daemon ---------------------------------------------------------------------------------- */

struct limit_case {
	const char *key; /* "workers" or "timeouts: {head_ms" */
	const char *close;
	uint32_t lo;
	uint32_t hi;
	size_t offset;
};

static void check_limit(const struct limit_case *c)
{
	uint32_t got = 0;

	for (int side = 0; side < 2; side++) {
		uint64_t ok = side == 0 ? c->lo : c->hi;
		uint64_t bad = side == 0 ? (uint64_t)c->lo - 1 : (uint64_t)c->hi + 1;

		expect_ok(textf(MINIMAL "daemon:\n  %s: %llu%s\n", c->key, (unsigned long long)ok,
				c->close));
		memcpy(&got, (const char *)&cfg + c->offset, sizeof(got));
		ck_assert_uint_eq(got, ok);
		if (side == 0 && c->lo == 0)
			continue;
		const char *name = strrchr(c->key, '{') != NULL ? strrchr(c->key, '{') + 1 : c->key;
		expect_error(textf(MINIMAL "daemon:\n  %s: %llu%s\n", c->key,
				   (unsigned long long)bad, c->close),
			     textf("t.yaml:10:%zu: %s must be %u..%u, got %llu", strlen(c->key) + 5,
				   name, c->lo, c->hi, (unsigned long long)bad));
	}
}

START_TEST(test_daemon_limits)
{
	static const struct limit_case cases[] = {
		{ "workers", "", 0, 64, offsetof(struct config, workers) },
		{ "conns_per_worker", "", 16, 1048576, offsetof(struct config, conns_per_worker) },
		{ "pipes_per_worker", "", 0, 4096, offsetof(struct config, pipes_per_worker) },
		{ "sandbox_share_percent", "", 10, 100,
		  offsetof(struct config, sandbox_share_percent) },
		{ "sandbox_completions_per_turn", "", 1, 256,
		  offsetof(struct config, sandbox_completions_per_turn) },
		{ "timeouts: {head_ms", "}", 1, 3600000, offsetof(struct config, head_timeout_ms) },
		{ "timeouts: {connect_ms", "}", 1, 3600000,
		  offsetof(struct config, connect_timeout_ms) },
		{ "timeouts: {dns_ms", "}", 1, 3600000, offsetof(struct config, dns_timeout_ms) },
		{ "timeouts: {idle_ms", "}", 1, 3600000, offsetof(struct config, idle_timeout_ms) },
		{ "timeouts: {body_ms", "}", 1, 3600000, offsetof(struct config, body_timeout_ms) },
		{ "timeouts: {response_ms", "}", 1, 3600000,
		  offsetof(struct config, response_timeout_ms) },
		{ "timeouts: {drain_ms", "}", 0, 3600000,
		  offsetof(struct config, drain_timeout_ms) },
		{ "timeouts: {handover_ms", "}", 1, 3600000,
		  offsetof(struct config, handover_timeout_ms) },
		{ "leaf_days", "", 1, 397, offsetof(struct config, leaf_days) },
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++)
		check_limit(&cases[i]);
	expect_error(MINIMAL "daemon:\n  workers: 99999999999999999999999\n",
		     "t.yaml:10:12: workers must be 0..64, got 99999999999999999999999");
}
END_TEST

START_TEST(test_daemon_settings)
{
	expect_ok(MINIMAL "sandboxes: [{id: b, profile: p}]\n"
			  "daemon:\n  socket_dir: /tmp/an\n  audit_log: \"-\"\n  workers: 3\n"
			  "  tcp_listen: \"[::1]:9000\"\n  tcp_sandbox: b\n"
			  "  timeouts: {idle_ms: 7}\n");
	ck_assert_str_eq(cfg.socket_dir, "/tmp/an");
	ck_assert_str_eq(cfg.audit_path, "-");
	ck_assert_uint_eq(cfg.workers, 3);
	ck_assert_str_eq(cfg.tcp_listen, "[::1]:9000");
	ck_assert_str_eq(cfg.tcp_sandbox, "b");
	ck_assert_uint_eq(cfg.idle_timeout_ms, 7);
	ck_assert_uint_eq(cfg.head_timeout_ms, LIMITS_HEAD_TIMEOUT_MS_DEFAULT);
	ck_assert_uint_eq(cfg.body_timeout_ms, LIMITS_BODY_TIMEOUT_MS_DEFAULT);
	ck_assert_uint_eq(cfg.response_timeout_ms, LIMITS_RESPONSE_TIMEOUT_MS_DEFAULT);
	ck_assert_uint_eq(cfg.drain_timeout_ms, LIMITS_DRAIN_TIMEOUT_MS_DEFAULT);
	ck_assert_uint_eq(cfg.handover_timeout_ms, LIMITS_HANDOVER_TIMEOUT_MS_DEFAULT);
	ck_assert_ptr_null(cfg.control_group);
	expect_ok(MINIMAL "daemon:\n  control_group: agentsnet-ops\n");
	ck_assert_str_eq(cfg.control_group, "agentsnet-ops");
	expect_error("version: 1\ndaemon:\n  control_group: \"-x\"\n",
		     "t.yaml:3:18: invalid control_group \"-x\"");
	expect_error("version: 1\ndaemon:\n  control_group: \"a b\"\n",
		     "t.yaml:3:18: invalid control_group \"a b\"");
	expect_error("version: 1\ndaemon:\n  socket_dir: run/agentsnet\n",
		     "t.yaml:3:15: socket_dir must be an absolute path");
	expect_error("version: 1\ndaemon:\n  socket_dir: \"-\"\n",
		     "t.yaml:3:15: socket_dir must be an absolute path");
	expect_error("version: 1\ndaemon:\n  audit_log: audit.jsonl\n",
		     "t.yaml:3:14: audit_log must be an absolute path or \"-\"");
	expect_error(
	    "version: 1\ndaemon:\n  audit_log: \"/a\\nb\"\n",
	    "t.yaml:3:14: audit_log must be at most 4095 bytes without control characters");
	/* Path length: 4095 accepted, 4096 refused. */
	char path[POLICY_PATH_BYTES_MAX + 2];
	memset(path, 'p', sizeof(path));
	path[0] = '/';
	path[POLICY_PATH_BYTES_MAX] = '\0';
	expect_ok(textf(MINIMAL "daemon:\n  audit_log: %s\n", path));
	ck_assert_uint_eq(strlen(cfg.audit_path), POLICY_PATH_BYTES_MAX);
	path[POLICY_PATH_BYTES_MAX] = 'p';
	path[POLICY_PATH_BYTES_MAX + 1] = '\0';
	expect_error(textf(MINIMAL "daemon:\n  audit_log: %s\n", path),
		     "t.yaml:10:14: audit_log must be at most 4095 bytes");
	/* socket_dir: 85 bytes accepted (its internal/ingress.sock's path is 107), 86 refused. */
	path[LAYOUT_SOCKET_DIR_BYTES_MAX] = '\0';
	expect_ok(textf(MINIMAL "daemon:\n  socket_dir: %s\n", path));
	ck_assert_uint_eq(strlen(cfg.socket_dir), 85);
	path[LAYOUT_SOCKET_DIR_BYTES_MAX] = 'p';
	path[LAYOUT_SOCKET_DIR_BYTES_MAX + 1] = '\0';
	expect_error(
	    textf(MINIMAL "daemon:\n  socket_dir: %s\n", path),
	    "t.yaml:10:15: socket_dir must be at most 85 bytes: the paths of its sockets of fixed "
	    "name (internal/ingress.sock the longest) must fit the 107 bytes of a Unix socket's");
}
END_TEST

START_TEST(test_tcp_listen)
{
	expect_error(
	    "version: 1\ndaemon:\n  tcp_listen: 0.0.0.0:8080\n  tcp_sandbox: s\n",
	    "t.yaml:3:15: tcp_listen must be a loopback address:port (127.0.0.1:PORT or [::1]:PORT)");
	expect_error("version: 1\ndaemon:\n  tcp_listen: 10.0.0.1:8080\n",
		     "t.yaml:3:15: tcp_listen must be a loopback address:port");
	expect_error("version: 1\ndaemon:\n  tcp_listen: \"[::ffff:127.0.0.1]:80\"\n",
		     "t.yaml:3:15: tcp_listen must be a loopback address:port");
	expect_error(
	    "version: 1\ndaemon:\n  tcp_listen: localhost:80\n",
	    "t.yaml:3:15: invalid tcp_listen \"localhost:80\": not an IPv4 or IPv6 address");
	expect_error("version: 1\ndaemon:\n  tcp_listen: 127.0.0.1\n",
		     "t.yaml:3:15: invalid tcp_listen \"127.0.0.1\": the port is missing");
	expect_error("version: 1\ndaemon:\n  tcp_listen: 127.0.0.1:0\n",
		     "t.yaml:3:15: invalid tcp_listen \"127.0.0.1:0\": the port must be 1..65535");
	expect_error(
	    "version: 1\ndaemon:\n  tcp_listen: 127.0.0.1:65536\n",
	    "t.yaml:3:15: invalid tcp_listen \"127.0.0.1:65536\": the port must be 1..65535");
	expect_error("version: 1\ndaemon:\n  tcp_listen: \"::1\"\n",
		     "t.yaml:3:15: invalid tcp_listen \"::1\": the port is missing");
	expect_error("version: 1\ndaemon:\n  tcp_listen: 127.0.0.1:80\n",
		     "t.yaml:3:3: tcp_sandbox is mandatory with tcp_listen");
	expect_error("version: 1\ndaemon:\n  tcp_sandbox: s\n",
		     "t.yaml:3:3: tcp_sandbox is only allowed with tcp_listen");
	expect_error(MINIMAL "daemon:\n  tcp_listen: 127.0.0.1:80\n  tcp_sandbox: s\n",
		     "t.yaml:11:16: tcp_sandbox \"s\" is not a sandbox listed under sandboxes");
	expect_ok(MINIMAL "sandboxes: [{id: s, profile: p}]\n"
			  "daemon: {tcp_listen: 127.9.8.7:1, tcp_sandbox: s}\n");
	ck_assert_str_eq(cfg.tcp_listen, "127.9.8.7:1");
	expect_ok(MINIMAL "sandboxes: [{id: s, profile: p}]\n"
			  "daemon: {tcp_listen: 127.0.0.1:65535, tcp_sandbox: s}\n");
	ck_assert_str_eq(cfg.tcp_listen, "127.0.0.1:65535");
}
END_TEST

/* daemon.metrics: a loopback listener only, its listen mandatory, sandboxes 0..1000. */
START_TEST(test_metrics)
{
	expect_error("version: 1\ndaemon:\n  metrics: {listen: \"0.0.0.0:9464\"}\n",
		     "t.yaml:3:21: metrics.listen must be a loopback address:port (127.0.0.1:PORT "
		     "or [::1]:PORT)");
	expect_error("version: 1\ndaemon:\n  metrics: {listen: \"10.1.2.3:9464\"}\n",
		     "t.yaml:3:21: metrics.listen must be a loopback address:port");
	expect_error("version: 1\ndaemon:\n  metrics: {sandboxes: 5}\n",
		     "t.yaml:3:12: metrics needs listen");
	expect_error("version: 1\ndaemon:\n  metrics: {listen: \"127.0.0.1:1\", port: 2}\n",
		     "t.yaml:3:36: unknown key \"port\" in daemon.metrics");
	expect_error("version: 1\ndaemon:\n  metrics: {listen: \"127.0.0.1:1\", sandboxes: 1001}\n",
		     "t.yaml:3:47: metrics.sandboxes must be 0..1000, got 1001");
	expect_ok(MINIMAL "daemon:\n  metrics: {listen: \"127.0.0.1:9464\"}\n");
	ck_assert_str_eq(cfg.metrics_listen, "127.0.0.1:9464");
	ck_assert_uint_eq(cfg.metrics_sandboxes, LIMITS_METRICS_SANDBOXES_DEFAULT);
	expect_ok(MINIMAL "daemon:\n  metrics: {listen: \"[::1]:9464\", sandboxes: 0}\n");
	ck_assert_str_eq(cfg.metrics_listen, "[::1]:9464");
	ck_assert_uint_eq(cfg.metrics_sandboxes, 0);
}
END_TEST

/* --- daemon.alert_webhook ------------------------------------------------------------------ */

/* daemon.alert_webhook in flow style, after a valid policy. */
#define WEBHOOK(fields) MINIMAL "daemon:\n  alert_webhook: {" fields "}\n"

/* A file of <text> with <mode>, made afresh; its path (static). */
static const char *webhook_file(const char *text, mode_t mode)
{
	static char path[64];

	snprintf(path, sizeof(path), "/tmp/agentsnet-webhook-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
	return path;
}

START_TEST(test_alert_webhook)
{
	char yaml[512];

	expect_ok(WEBHOOK("url: \"http://127.0.0.1:9000/hooks/a?x=1\""));
	ck_assert_str_eq(cfg.alert_webhook_url, "http://127.0.0.1:9000/hooks/a?x=1");
	ck_assert_ptr_null(cfg.alert_webhook_authorization);
	expect_ok(WEBHOOK("url: \"http://[::1]\", timeout_ms: 60000"));
	ck_assert_uint_eq(cfg.alert_webhook_timeout_ms, 60000);
	/* https: any host, verified against the system roots or ca_file. */
	expect_ok(WEBHOOK("url: \"HTTPS://Hooks.Example:8443/page\""));
	ck_assert_ptr_null(cfg.alert_webhook_ca_file);
	expect_ok(WEBHOOK("url: \"https://[2001:db8::1]/x\", ca_file: /etc/hostname"));
	ck_assert_str_eq(cfg.alert_webhook_ca_file, "/etc/hostname");
	static const struct refusal bad[] = {
		{ WEBHOOK("url: \"http://[::1]\", timeout_ms: 60001"), "60001",
		  "alert_webhook.timeout_ms must be 1..60000, got 60001" },
		{ WEBHOOK("url: \"http://10.0.0.1/x\""), "\"http",
		  "alert_webhook.url is http:// to an address that is not loopback (127.0.0.1, "
		  "[::1] or localhost): alerts leave this host only over https://" },
		{ WEBHOOK("url: \"http://hooks.example/x\""), "\"http",
		  "alert_webhook.url is http:// to an address that is not loopback (127.0.0.1, "
		  "[::1] or localhost): alerts leave this host only over https://" },
		{ WEBHOOK("url: \"https://user:pw@hooks.example/x\""), "\"https",
		  "alert_webhook.url has a user part: put a credential in authorization_file" },
		{ WEBHOOK("url: \"https://hooks_x.example/\""), "\"https",
		  "alert_webhook.url must name a host: a DNS name, an IPv4 address or a "
		  "bracketed IPv6 one" },
		{ WEBHOOK("url: \"https://a..example/\""), "\"https",
		  "alert_webhook.url must name a host: a DNS name, an IPv4 address or a "
		  "bracketed IPv6 one" },
		{ WEBHOOK("url: \"https://[fe80::1%25eth0]/\""), "\"https",
		  "alert_webhook.url must name a host: a DNS name, an IPv4 address or a "
		  "bracketed IPv6 one" },
		{ WEBHOOK("url: \"https:///x\""), "\"https",
		  "alert_webhook.url must name a host: a DNS name, an IPv4 address or a "
		  "bracketed IPv6 one" },
		{ WEBHOOK("url: \"http://127.0.0.1/\", ca_file: /etc/hostname"), "{",
		  "alert_webhook.ca_file is for an https:// url; this one is http://" },
		{ WEBHOOK("url: \"https://h.example/\", ca_file: /nonexistent/ca.pem"),
		  "/nonexistent",
		  "alert_webhook.ca_file /nonexistent/ca.pem: stat: No such file or "
		  "directory" },
		{ WEBHOOK("url: \"https://h.example/\", ca_file: /etc"), "/etc",
		  "alert_webhook.ca_file /etc: not a regular file" },
		{ WEBHOOK("url: \"http://127.0.0.1:0/\""), "\"http",
		  "alert_webhook.url has a port that is not 1..65535" },
		{ WEBHOOK("url: \"http://127.0.0.1:65536/\""), "\"http",
		  "alert_webhook.url has a port that is not 1..65535" },
		{ WEBHOOK("url: \"http://127.0.0.1/a b\""), "\"http",
		  "alert_webhook.url has a path byte that is not visible ASCII, or a '#'" },
		{ WEBHOOK("url: \"ftp://127.0.0.1/\""), "\"ftp",
		  "alert_webhook.url must begin with https:// or http://" },
		{ WEBHOOK("url: \"http://127.0.0.1/\", retries: 3"), "retries",
		  "unknown key \"retries\" in daemon.alert_webhook (expected one of: url, "
		  "authorization_file, ca_file, timeout_ms)" },
	};
	expect_refusals(bad, AN_ARRAY_LEN(bad));
	expect_error_at_needle(WEBHOOK("timeout_ms: 5"), "{", "alert_webhook needs url");
	/* The authorization file: read, its newline dropped; refused when others may read it. */
	const char *good = webhook_file("Bearer t0ken\n", 0600);
	snprintf(yaml, sizeof(yaml),
		 WEBHOOK("url: \"http://localhost:1/\", authorization_file: %s"), good);
	expect_ok(yaml);
	ck_assert_str_eq(cfg.alert_webhook_authorization, "Bearer t0ken");
	unlink(good);
	const char *open_to_all = webhook_file("Bearer t0ken\n", 0644);
	snprintf(yaml, sizeof(yaml),
		 WEBHOOK("url: \"http://localhost:1/\", authorization_file: %s"), open_to_all);
	ck_assert_int_ne(load(yaml), 0);
	ck_assert_msg(strstr(err, "mode 0644") != NULL && strstr(err, open_to_all) != NULL, "%s",
		      err);
	unlink(open_to_all);
	const char *control = webhook_file("Bearer a\tb\n", 0600);
	snprintf(yaml, sizeof(yaml),
		 WEBHOOK("url: \"http://localhost:1/\", authorization_file: %s"), control);
	ck_assert_int_ne(load(yaml), 0);
	ck_assert_msg(strstr(err, "not printable ASCII at position 9") != NULL, "%s", err);
	unlink(control);
}
END_TEST

/* --- daemon.ca and leaf_days ----------------------------------------------------------------- */

/*
 * From here on MINIMAL is a profile without rules, where policytest.h's has
 * one: the messages below count their lines from it.
 */
#undef MINIMAL
#define MINIMAL "version: 1\nprofiles:\n  p:\n    rules: []\n"

START_TEST(test_daemon_ca)
{
	expect_ok(MINIMAL "daemon:\n  ca:\n    cert: /etc/an/ca.pem\n    key: /etc/an/ca.key\n"
			  "  leaf_days: 30\n");
	ck_assert_str_eq(cfg.ca_cert, "/etc/an/ca.pem");
	ck_assert_str_eq(cfg.ca_key, "/etc/an/ca.key");
	ck_assert_uint_eq(cfg.leaf_days, 30);
	/* Nothing is read: the files need not exist. Flow style, either order. */
	expect_ok(MINIMAL "daemon: {ca: {key: /nonexistent/k, cert: /nonexistent/c}}\n");
	ck_assert_str_eq(cfg.ca_cert, "/nonexistent/c");
	ck_assert_str_eq(cfg.ca_key, "/nonexistent/k");
	ck_assert_uint_eq(cfg.leaf_days, 30); /* a key not given keeps its value */
	/* A failed load leaves both as they were. */
	expect_error(MINIMAL "daemon: {ca: {cert: /a, key: /b}, leaf_days: 0}\n",
		     "t.yaml:5:46: leaf_days must be 1..397, got 0");
	ck_assert_str_eq(cfg.ca_cert, "/nonexistent/c");
	ck_assert_uint_eq(cfg.leaf_days, 30);
	expect_error(MINIMAL "daemon: {leaf_days: 398}\n",
		     "t.yaml:5:21: leaf_days must be 1..397, got 398");
	expect_ok(MINIMAL "daemon: {leaf_days: 397}\n");
	ck_assert_uint_eq(cfg.leaf_days, 397);
	expect_ok(MINIMAL "daemon: {leaf_days: 1}\n");
	ck_assert_uint_eq(cfg.leaf_days, 1);
	expect_error(MINIMAL "daemon:\n  ca:\n    cert: /a\n",
		     "t.yaml:7:5: missing mandatory key \"key\" in daemon.ca");
	expect_error(MINIMAL "daemon:\n  ca:\n    key: /a\n",
		     "t.yaml:7:5: missing mandatory key \"cert\" in daemon.ca");
	expect_error(MINIMAL "daemon: {ca: {}}\n",
		     "t.yaml:5:14: missing mandatory key \"cert\" in daemon.ca");
	expect_error(
	    MINIMAL "daemon: {ca: {cert: /a, key: /b, chain: /c}}\n",
	    "t.yaml:5:34: unknown key \"chain\" in daemon.ca (expected one of: cert, key)");
	expect_error(MINIMAL "daemon: {ca: {cert: /a, cert: /b}}\n",
		     "t.yaml:5:25: duplicate key \"cert\" in daemon.ca");
	expect_error(MINIMAL "daemon: {ca: /etc/ca.pem}\n", "t.yaml:5:14: ca must be a mapping");
	expect_error(MINIMAL "daemon: {ca: {cert: ca.pem, key: /b}}\n",
		     "t.yaml:5:21: ca.cert must be an absolute path");
	expect_error(MINIMAL "daemon: {ca: {cert: /a, key: \"-\"}}\n",
		     "t.yaml:5:30: ca.key must be an absolute path");
	expect_error(MINIMAL "daemon: {ca: {cert: \"/a\\nb\", key: /b}}\n",
		     "t.yaml:5:21: ca.cert must be at most 4095 bytes without control characters");
	expect_error(MINIMAL "daemon: {ca: {cert: /a, key: /b}, ca: {cert: /a, key: /b}}\n",
		     "t.yaml:5:35: duplicate key \"ca\" in daemon");
	/* A path of 4095 bytes accepted, 4096 refused. */
	char *p = repeat('p', POLICY_PATH_BYTES_MAX + 1);
	p[0] = '/';
	p[POLICY_PATH_BYTES_MAX] = '\0';
	expect_ok(textf(MINIMAL "daemon: {ca: {cert: %s, key: %s}}\n", p, p));
	ck_assert_uint_eq(strlen(cfg.ca_key), POLICY_PATH_BYTES_MAX);
	p[POLICY_PATH_BYTES_MAX] = 'p';
	expect_error(textf(MINIMAL "daemon: {ca: {cert: /a, key: %s}}\n", p),
		     "t.yaml:5:30: ca.key must be at most 4095 bytes");
	free(p);
}
END_TEST

/* daemon.ingress in flow style: DAEMON(x) is "daemon: {ingress: {x}}" on line 5. */
#define DAEMON(fields) MINIMAL "daemon: {ingress: {" fields "}}\n"
/* daemon.ingress.tls after a listen, flow style, on line 5: its '{' is at column 49. */
#define TLS(fields) DAEMON("listen: \"0.0.0.0:8443\", tls: {" fields "}")

/* cfg's daemon.ingress.tls cert and key (NULL: unset). */
static void expect_tls(const char *cert, const char *key)
{
	ck_assert_pstr_eq(cfg.ingress_tls_cert, cert);
	ck_assert_pstr_eq(cfg.ingress_tls_key, key);
}

/* Each of the <n> values of <ok> as daemon.ingress.<key> (quoted, after a listen) loads as is. */
static void expect_daemon_values(const char *key, const char *const *ok, size_t n,
				 char *const *stored)
{
	for (size_t i = 0; i < n; i++) {
		expect_ok(textf(DAEMON("listen: \"0.0.0.0:8090\", %s: \"%s\""), key, ok[i]));
		ck_assert_str_eq(*stored, ok[i]);
	}
}

/* A value of a daemon.ingress key that is refused, and why. */
struct bad_value {
	const char *value;
	const char *why;
};

/*
 * Each of the <n> values of <bad> as daemon.ingress.<key> (quoted, after a
 * listen) is refused at the value with "invalid ingress.<key> "<shown>":
 * <why>", <shown> being shown(value): the value as the message shows it.
 */
static void expect_daemon_refused(const char *key, const struct bad_value *bad, size_t n,
				  const char *(*shown)(const char *value))
{
	for (size_t i = 0; i < n; i++) {
		const char *yaml =
		    textf(DAEMON("listen: \"0.0.0.0:8090\", %s: \"%s\""), key, bad[i].value);

		expect_error_at_needle(
		    yaml, textf("\"%s\"", bad[i].value),
		    textf("invalid ingress.%s \"%s\": %s", key, shown(bad[i].value), bad[i].why));
	}
}

/* --- daemon.ingress ---------------------------------------------------------------------- */

START_TEST(test_daemon_absent)
{
	expect_ok(MINIMAL);
	expect_daemon(NULL, NULL, "/callbacks");
	ck_assert(!cfg.ingress_optional);
	/* listen alone: the prefix keeps its default, the URL stays for the engine to make. */
	expect_ok(DAEMON("listen: \"0.0.0.0:8090\""));
	expect_daemon("0.0.0.0:8090", NULL, "/callbacks");
	ck_assert(!cfg.ingress_optional);
	/* Block style, every key. */
	expect_ok(MINIMAL "daemon:\n  ingress:\n    listen: \"[::]:443\"\n"
			  "    public_url: https://hooks.example.com\n    prefix: /hooks/v1\n");
	expect_daemon("[::]:443", "https://hooks.example.com", "/hooks/v1");
}
END_TEST

START_TEST(test_daemon_listen)
{
	static const struct {
		const char *value;
		const char *stored;
	} ok[] = {
		{ "\"0.0.0.0:1\"", "0.0.0.0:1" },
		{ "\"0.0.0.0:65535\"", "0.0.0.0:65535" },
		{ "\"127.0.0.1:8090\"", "127.0.0.1:8090" },
		{ "\"192.0.2.7:80\"", "192.0.2.7:80" },
		{ "\"10.1.2.3:8443\"", "10.1.2.3:8443" },
		{ "\"[::]:8090\"", "[::]:8090" },
		{ "\"[2001:DB8:0::1]:443\"", "[2001:db8::1]:443" },
		{ "\"[::1]:9\"", "[::1]:9" },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(ok); i++) {
		expect_ok(textf(DAEMON("listen: %s"), ok[i].value));
		ck_assert_str_eq(cfg.ingress_listen, ok[i].stored);
	}
	static const struct {
		const char *value;
		const char *msg;
	} bad[] = {
		{ "\"0.0.0.0:0\"",
		  "invalid ingress.listen \"0.0.0.0:0\": the port must be 1..65535" },
		{ "\"0.0.0.0:65536\"",
		  "invalid ingress.listen \"0.0.0.0:65536\": the port must be 1..65535" },
		{ "\"0.0.0.0\"", "invalid ingress.listen \"0.0.0.0\": the port is missing" },
		{ "\"[::]\"", "invalid ingress.listen \"[::]\": the port is missing" },
		{ "\"gw.example.com:80\"",
		  "invalid ingress.listen \"gw.example.com:80\": not an IPv4 or IPv6 address" },
		{ "\"[192.0.2.1]:80\"",
		  "invalid ingress.listen \"[192.0.2.1]:80\": brackets are for IPv6 addresses" },
		{ "\"224.0.0.1:80\"", "ingress.listen cannot be a multicast address, which takes "
				      "no connections: name a local address, or 0.0.0.0 or [::] "
				      "for all" },
		{ "\"[ff02::1]:80\"", "ingress.listen cannot be a multicast address" },
		{ "8090", "invalid ingress.listen \"8090\": not an IPv4 or IPv6 address" },
		{ "[a]", "ingress.listen must be a string" },
		{ "~", "ingress.listen must be a string" },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		const char *yaml = textf(DAEMON("listen: %s"), bad[i].value);
		expect_error_at_needle(yaml, bad[i].value, bad[i].msg);
	}
}
END_TEST

/* The message shows a public_url as loaded: escapes resolved, bytes outside ASCII '?'. */
static const char *url_shown(const char *value)
{
	return strstr(value, "\\t")       ? "https://gw.example.com?"
	       : strstr(value, "\\u00fc") ? "https://b??cher.example"
					  : value;
}

START_TEST(test_daemon_public_url)
{
	static const char *const ok[] = {
		"http://gw.example.com",
		"https://gw.example.com:8443",
		"https://192.0.2.1",
		"http://[2001:db8::1]:8090",
		"https://xn--bcher-kva.example",
		"https://a_b~c-d.example:1",
		"https://gw:65535",
	};
	expect_daemon_values("public_url", ok, AN_ARRAY_LEN(ok), &cfg.ingress_public_url);
	static const struct bad_value bad[] = {
		{ "https://gw.example.com/",
		  "drop the trailing '/': agents get <public_url><prefix>/<sandbox id>" },
		{ "https://gw.example.com/hooks",
		  "no path: the path agents get is ingress.prefix" },
		{ "https://gw.example.com/a/", "no path: the path agents get is ingress.prefix" },
		{ "https://gw.example.com?a=1", "no query (\"?...\")" },
		{ "https://gw.example.com#top", "no fragment (\"#...\")" },
		{ "https://user@gw.example.com",
		  "no user information (\"user@\"): the URL is handed to third parties" },
		{ "https://gw example.com", "a space, control character or non-ASCII byte (write "
					    "a name in its xn-- form)" },
		{ "https://gw.example.com\\t", "a space, control character or non-ASCII byte" },
		{ "https://b\\u00fccher.example", "a space, control character or non-ASCII byte" },
		{ "ftp://gw.example.com", "it must start with http:// or https://" },
		{ "HTTPS://gw.example.com", "it must start with http:// or https://" },
		{ "gw.example.com", "it must start with http:// or https://" },
		{ "", "it must start with http:// or https://" },
		{ "https://", "the host is missing" },
		{ "https://:443", "the host is empty" },
		{ "https://gw:0", "the port must be 1..65535" },
		{ "https://gw:65536", "the port must be 1..65535" },
		{ "https://gw:", "the port must be 1..65535" },
		{ "https://2001:db8::1",
		  "an IPv6 address goes in brackets (\"http://[2001:db8::1]:8090\")" },
		{ "https://[192.0.2.1]", "brackets hold an IPv6 address" },
		{ "https://[::1", "'[' without ']'" },
		{ "https://[::1]x", "expected ':' after ']'" },
		{ "https://g%41", "a byte that is not part of a host name" },
	};
	expect_daemon_refused("public_url", bad, AN_ARRAY_LEN(bad), url_shown);
	expect_error_at_needle(DAEMON("listen: \"0.0.0.0:8090\", public_url: 443"), "443",
			       "invalid ingress.public_url \"443\": it must start with http:// or "
			       "https://");
	expect_error_at_needle(DAEMON("listen: \"0.0.0.0:8090\", public_url: {}"), "{}",
			       "ingress.public_url must be a string");
}
END_TEST

/* A public_url of exactly <len> bytes: "https://" and a host of letters. */
static char *url_of(size_t len)
{
	char *url = repeat('a', len);

	memcpy(url, "https://", 8);
	return url;
}

START_TEST(test_daemon_public_url_limit)
{
	char *url = url_of(POLICY_INGRESS_PUBLIC_URL_BYTES_MAX);

	ck_assert_uint_eq(POLICY_INGRESS_PUBLIC_URL_BYTES_MAX, 2048);
	expect_ok(textf(DAEMON("listen: \"0.0.0.0:1\", public_url: %s"), url));
	ck_assert_uint_eq(strlen(cfg.ingress_public_url), 2048);
	free(url);
	url = url_of(POLICY_INGRESS_PUBLIC_URL_BYTES_MAX + 1);
	const char *yaml = textf(DAEMON("listen: \"0.0.0.0:1\", public_url: %s"), url);
	expect_error_at_needle(yaml, "https", "ingress.public_url is longer than 2048 bytes");
	free(url);
}
END_TEST

/* The message shows a prefix as loaded: the one escape resolved. */
static const char *prefix_shown(const char *value)
{
	return strcmp(value, "/a\\\\b") == 0 ? "/a\\b" : value;
}

START_TEST(test_daemon_prefix)
{
	static const char *const ok[] = {
		"/callbacks",      "/a",   "/hooks/v1", "/.well-known/hooks",
		"/a.b/c~d_e-f/G9", "/...", "/..a",      "/a..",
	};
	expect_daemon_values("prefix", ok, AN_ARRAY_LEN(ok), &cfg.ingress_prefix);
	static const struct bad_value bad[] = {
		{ "callbacks", "it must start with '/' (\"/callbacks\")" },
		{ "", "it must start with '/' (\"/callbacks\")" },
		{ "/", "name a path below the root (\"/callbacks\")" },
		{ "/callbacks/",
		  "drop the trailing '/': agents get <public_url><prefix>/<sandbox id>" },
		{ "//a", "an empty segment (\"//\")" },
		{ "/a//b", "an empty segment (\"//\")" },
		{ "/.", "a \".\" or \"..\" segment" },
		{ "/..", "a \".\" or \"..\" segment" },
		{ "/a/./b", "a \".\" or \"..\" segment" },
		{ "/a/../b", "a \".\" or \"..\" segment" },
		{ "/a/..", "a \".\" or \"..\" segment" },
		{ "/a%2Fb", "a byte outside [A-Za-z0-9._~-] in a segment" },
		{ "/a b", "a byte outside [A-Za-z0-9._~-] in a segment" },
		{ "/a?b", "a byte outside [A-Za-z0-9._~-] in a segment" },
		{ "/a\\\\b", "a byte outside [A-Za-z0-9._~-] in a segment" },
	};
	expect_daemon_refused("prefix", bad, AN_ARRAY_LEN(bad), prefix_shown);
	expect_error_at_needle(DAEMON("listen: \"0.0.0.0:8090\", prefix: [a]"), "[a]",
			       "ingress.prefix must be a string");
	/* 256 bytes accepted, 257 refused. */
	char *p = repeat('p', POLICY_INGRESS_PREFIX_BYTES_MAX + 1);
	p[0] = '/';
	p[POLICY_INGRESS_PREFIX_BYTES_MAX] = '\0';
	ck_assert_uint_eq(POLICY_INGRESS_PREFIX_BYTES_MAX, 256);
	expect_ok(textf(DAEMON("listen: \"0.0.0.0:8090\", prefix: %s"), p));
	ck_assert_uint_eq(strlen(cfg.ingress_prefix), 256);
	p[POLICY_INGRESS_PREFIX_BYTES_MAX] = 'p';
	const char *yaml = textf(DAEMON("listen: \"0.0.0.0:8090\", prefix: %s"), p);
	expect_error_at_needle(yaml, "/ppp", "ingress.prefix is longer than 256 bytes");
	free(p);
}
END_TEST

START_TEST(test_daemon_keys)
{
	static const struct refusal cases[] = {
		{ DAEMON("public_url: https://gw.example.com"), "public_url",
		  "ingress.public_url needs ingress.listen (the ip:port the gateway listens on)" },
		{ DAEMON("prefix: /hooks"), "prefix",
		  "ingress.prefix needs ingress.listen (the ip:port the gateway listens on)" },
		{ DAEMON("prefix: /hooks, public_url: https://gw.example.com"), "public_url",
		  "ingress.public_url needs ingress.listen" },
		{ DAEMON(""), "{}", "missing mandatory key \"listen\" in daemon.ingress" },
		{ DAEMON("listen: \"0.0.0.0:1\", port: 2"), "port",
		  "unknown key \"port\" in daemon.ingress (expected one of: listen, public_url, "
		  "prefix, tls, origins)" },
		{ DAEMON("listen: \"0.0.0.0:1\", listen: \"0.0.0.0:2\""), "listen: \"0.0.0.0:2",
		  "duplicate key \"listen\" in daemon.ingress" },
		{ DAEMON("listen: \"0.0.0.0:1\", prefix: /a, prefix: /b"), "prefix: /b",
		  "duplicate key \"prefix\" in daemon.ingress" },
		{ MINIMAL "daemon: {ingress: \"0.0.0.0:8090\"}\n", "\"0.0.0.0",
		  "ingress must be a mapping" },
		{ MINIMAL "daemon: {ingress: {listen: \"0.0.0.0:1\"}, ingress: {listen: "
			  "\"0.0.0.0:2\"}}\n",
		  "ingress: {listen: \"0.0.0.0:2", "duplicate key \"ingress\" in daemon" },
		{ MINIMAL "daemon: {gateway: {}}\n", "gateway",
		  "unknown key \"gateway\" in daemon (expected one of: socket_dir, audit_log, "
		  "workers, conns_per_worker, pipes_per_worker, sandbox_share_percent, "
		  "sandbox_completions_per_turn, tcp_listen, tcp_sandbox, timeouts, control_group, "
		  "ca, leaf_days, ingress, sandbox_uids, sandboxes_per_user, audit_failure, metrics, "
		  "alert_webhook)" },
	};

	expect_refusals(cases, AN_ARRAY_LEN(cases));
}
END_TEST

START_TEST(test_daemon_origins)
{
	static const struct refusal bad[] = {
		{ DAEMON("listen: \"0.0.0.0:1\", origins: subdomain"), "origins",
		  "ingress.origins: subdomain needs ingress.public_url, whose host the sandboxes' "
		  "origins are under (<id>.<host>)" },
		{ DAEMON("listen: \"0.0.0.0:1\", public_url: \"http://192.0.2.1:8090\", "
			 "origins: subdomain"),
		  "origins",
		  "ingress.origins: subdomain needs an ingress.public_url that names a host, not "
		  "an address: the sandboxes' origins are <id>.<host>" },
		{ DAEMON("origins: subdomain, listen: \"0.0.0.0:1\", public_url: "
			 "\"https://[2001:db8::1]\""),
		  "origins",
		  "ingress.origins: subdomain needs an ingress.public_url that names a host, not "
		  "an address: the sandboxes' origins are <id>.<host>" },
		{ DAEMON("listen: \"0.0.0.0:1\", origins: Subdomain"), "Subdomain",
		  "ingress.origins must be \"path\" or \"subdomain\"" },
		{ DAEMON("listen: \"0.0.0.0:1\", origins: true"), "true",
		  "ingress.origins must be \"path\" or \"subdomain\"" },
		{ DAEMON("listen: \"0.0.0.0:1\", origins: [subdomain]"), "[subdomain]",
		  "ingress.origins must be \"path\" or \"subdomain\"" },
		{ DAEMON("origins: path"), "origins",
		  "ingress.origins needs ingress.listen (the ip:port the gateway listens on)" },
	};

	expect_ok(DAEMON("listen: \"0.0.0.0:1\""));
	ck_assert(!cfg.ingress_origins);
	expect_ok(DAEMON("listen: \"0.0.0.0:1\", public_url: https://hooks.example.com, "
			 "origins: subdomain"));
	ck_assert(cfg.ingress_origins);
	/* Either order; a trailing dot and a port are the host's own. */
	expect_ok(DAEMON("origins: subdomain, listen: \"0.0.0.0:1\", "
			 "public_url: \"http://hooks.example.com.:8090\""));
	ck_assert(cfg.ingress_origins);
	expect_ok(DAEMON("listen: \"0.0.0.0:1\", origins: path"));
	ck_assert(!cfg.ingress_origins);
	/* A later load without the key turns them off again. */
	expect_ok(
	    DAEMON("listen: \"0.0.0.0:1\", public_url: https://h.example, origins: subdomain"));
	expect_ok(DAEMON("listen: \"0.0.0.0:1\""));
	ck_assert(!cfg.ingress_origins);
	expect_refusals(bad, AN_ARRAY_LEN(bad));
}
END_TEST

START_TEST(test_daemon_audit_failure)
{
	static const struct refusal bad[] = {
		{ MINIMAL "daemon: {audit_failure: Refuse}\n", "Refuse",
		  "audit_failure must be \"continue\" or \"refuse\"" },
		{ MINIMAL "daemon: {audit_failure: true}\n", "true",
		  "audit_failure must be \"continue\" or \"refuse\"" },
		{ MINIMAL "daemon: {audit_failure: [refuse]}\n", "[refuse]",
		  "audit_failure must be \"continue\" or \"refuse\"" },
		{ MINIMAL "daemon: {audit_failure: refuse, audit_failure: continue}\n",
		  "audit_failure: continue", "duplicate key \"audit_failure\" in daemon" },
	};

	expect_ok(MINIMAL);
	ck_assert(!cfg.audit_failure_refuse); /* continue, the default */
	expect_ok(MINIMAL "daemon: {audit_failure: refuse}\n");
	ck_assert(cfg.audit_failure_refuse);
	expect_ok(MINIMAL "daemon: {audit_failure: continue}\n");
	ck_assert(!cfg.audit_failure_refuse);
	/* A later load without the key is the default again. */
	expect_ok(MINIMAL "daemon: {audit_failure: refuse}\n");
	expect_ok(MINIMAL);
	ck_assert(!cfg.audit_failure_refuse);
	expect_refusals(bad, AN_ARRAY_LEN(bad));
}
END_TEST

START_TEST(test_daemon_tls)
{
	/* No tls: plain HTTP, nothing stored. */
	expect_ok(DAEMON("listen: \"0.0.0.0:8090\""));
	expect_tls(NULL, NULL);
	expect_ok(TLS("cert: /etc/an/hooks.pem, key: /etc/an/hooks.key"));
	ck_assert_str_eq(cfg.ingress_listen, "0.0.0.0:8443");
	expect_tls("/etc/an/hooks.pem", "/etc/an/hooks.key");
	/* The URL stays unset: https://<listen> is the engine's to make. */
	ck_assert_ptr_null(cfg.ingress_public_url);
	/* Nothing is read: the files need not exist. Block style, either order, every key. */
	expect_ok(MINIMAL "daemon:\n  ingress:\n    listen: \"[::]:443\"\n"
			  "    public_url: https://hooks.example.com\n    prefix: /h\n"
			  "    tls:\n      key: /nonexistent/k\n      cert: /nonexistent/c\n");
	expect_tls("/nonexistent/c", "/nonexistent/k");
	ck_assert_str_eq(cfg.ingress_public_url, "https://hooks.example.com");
	/* The same file for both (a PEM holding the chain and the key) is fine. */
	expect_ok(TLS("cert: /etc/an/all.pem, key: /etc/an/all.pem"));
	expect_tls("/etc/an/all.pem", "/etc/an/all.pem");
}
END_TEST

START_TEST(test_daemon_tls_refused)
{
	static const struct refusal bad[] = {
		{ TLS("cert: hooks.pem, key: /k"), "hooks.pem",
		  "ingress.tls.cert must be an absolute path" },
		{ TLS("cert: ./hooks.pem, key: /k"), "./hooks",
		  "ingress.tls.cert must be an absolute path" },
		{ TLS("cert: /c, key: \"-\""), "\"-\"",
		  "ingress.tls.key must be an absolute path" },
		{ TLS("cert: /c, key: \"\""), "\"\"", "ingress.tls.key must be an absolute path" },
		{ TLS("cert: \"/a\\nb\", key: /k"), "\"/a",
		  "ingress.tls.cert must be at most 4095 bytes without control characters" },
		{ TLS("cert: /c, key: \"/k\\tx\""), "\"/k",
		  "ingress.tls.key must be at most 4095 bytes without control characters" },
		{ TLS("cert: [/c], key: /k"), "[/c]", "ingress.tls.cert must be a string" },
		{ TLS("cert: /c, key: ~"), "~", "ingress.tls.key must be a string" },
		{ TLS("cert: /c, key: {a: 1}"), "{a: 1}", "ingress.tls.key must be a string" },
		{ TLS("cert: /c, key: /k, chain: /i"), "chain",
		  "unknown key \"chain\" in daemon.ingress.tls (expected one of: cert, key)" },
		{ TLS("cert: /c, cert: /d, key: /k"), "cert: /d",
		  "duplicate key \"cert\" in daemon.ingress.tls" },
		{ TLS("cert: /c, key: /k, key: /l"), "key: /l",
		  "duplicate key \"key\" in daemon.ingress.tls" },
	};

	expect_refusals(bad, AN_ARRAY_LEN(bad));
	/* Both are mandatory inside tls, reported at the mapping. */
	expect_error(TLS("cert: /c"), "t.yaml:5:49: missing mandatory key \"key\" in "
				      "daemon.ingress.tls");
	expect_error(TLS("key: /k"), "t.yaml:5:49: missing mandatory key \"cert\" in "
				     "daemon.ingress.tls");
	expect_error(TLS(""), "t.yaml:5:49: missing mandatory key \"cert\" in daemon.ingress.tls");
	expect_error(MINIMAL "daemon:\n  ingress:\n    listen: \"0.0.0.0:1\"\n    tls:\n"
			     "      cert: /c\n",
		     "t.yaml:9:7: missing mandatory key \"key\" in daemon.ingress.tls");
	/* tls is a mapping, once, and needs the listener. */
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: true"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: /etc/an/hooks.pem"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: ~"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: [/c, /k]"),
		     "t.yaml:5:49: ingress.tls must be a mapping");
	expect_error(DAEMON("listen: \"0.0.0.0:8443\", tls: {cert: /c, key: /k}, tls: {}"),
		     "t.yaml:5:70: duplicate key \"tls\" in daemon.ingress");
	expect_error(DAEMON("tls: {cert: /c, key: /k}"),
		     "t.yaml:5:20: ingress.tls needs ingress.listen (the ip:port the gateway "
		     "listens on)");
	expect_error(MINIMAL "daemon: {tls: {cert: /c, key: /k}}\n",
		     "t.yaml:5:10: unknown key \"tls\" in daemon (expected one of:");
	/* Nothing of a refused load is kept. */
	expect_tls(NULL, NULL);
	ck_assert_ptr_null(cfg.ingress_listen);
}
END_TEST

/* Each path at POLICY_PATH_BYTES_MAX (4095) bytes is taken, at 4096 refused. */
START_TEST(test_daemon_tls_limit)
{
	char *p = repeat('p', POLICY_PATH_BYTES_MAX + 1);

	ck_assert_uint_eq(POLICY_PATH_BYTES_MAX, 4095);
	p[0] = '/';
	p[POLICY_PATH_BYTES_MAX] = '\0';
	expect_ok(textf(TLS("cert: %s, key: %s"), p, p));
	ck_assert_uint_eq(strlen(cfg.ingress_tls_cert), 4095);
	ck_assert_uint_eq(strlen(cfg.ingress_tls_key), 4095);
	ck_assert_str_eq(cfg.ingress_tls_cert, p);
	p[POLICY_PATH_BYTES_MAX] = 'p';
	expect_error(textf(TLS("cert: %s, key: /k"), p),
		     "t.yaml:5:56: ingress.tls.cert must be at most 4095 bytes without control "
		     "characters");
	/* "cert: /c, key: " is 15 bytes after the '{' at column 49. */
	expect_error(textf(TLS("cert: /c, key: %s"), p),
		     "t.yaml:5:65: ingress.tls.key must be at most 4095 bytes without control "
		     "characters");
	free(p);
	/* The refused loads kept the 4095-byte paths. */
	ck_assert_uint_eq(strlen(cfg.ingress_tls_cert), 4095);
	ck_assert_uint_eq(strlen(cfg.ingress_tls_key), 4095);
	/* The shortest absolute path. */
	expect_ok(TLS("cert: /, key: /"));
	ck_assert_str_eq(cfg.ingress_tls_cert, "/");
}
END_TEST

/* A refused load, even one whose tls section was fine, keeps the pair the config holds. */
START_TEST(test_daemon_tls_staged)
{
	expect_ok(TLS("cert: /a.pem, key: /a.key"));
	expect_error_at_needle(TLS("cert: /b.pem, key: /b.key") "sandboxes: [{id: s, profile: "
								"nope}]\n",
			       "nope", "unknown profile \"nope\"");
	expect_tls("/a.pem", "/a.key");
	/* The cert staged, then the key refused: neither changes. */
	expect_error_at_needle(TLS("cert: /b.pem, key: b.key"), "b.key}",
			       "ingress.tls.key must be an absolute path");
	expect_tls("/a.pem", "/a.key");
	expect_ok(TLS("key: /c.key, cert: /c.pem"));
	expect_tls("/c.pem", "/c.key");
	/* The daemon loads each file into a fresh config: a key not given keeps its value. */
	expect_ok(DAEMON("listen: \"0.0.0.0:8443\""));
	ck_assert_str_eq(cfg.ingress_tls_cert, "/c.pem");
	config_free(&cfg);
	ck_assert_int_eq(config_init_defaults(&cfg), 0);
	expect_tls(NULL, NULL);
	expect_ok(DAEMON("listen: \"0.0.0.0:8443\""));
	expect_tls(NULL, NULL);
}
END_TEST

/* A load that fails anywhere, even after daemon.ingress was read, leaves the config as it was. */
START_TEST(test_daemon_staged)
{
	expect_ok(DAEMON("listen: \"192.0.2.1:80\", public_url: http://a.example, prefix: /a"));
	expect_error_at_needle(
	    DAEMON(
		"listen: \"192.0.2.2:81\", public_url: http://b.example, prefix: /b") "sandboxes: [{id: s, profile: nope}]\n",
	    "nope", "unknown profile \"nope\"");
	expect_daemon("192.0.2.1:80", "http://a.example", "/a");
	expect_error_at_needle(DAEMON("listen: \"192.0.2.2:81\", prefix: /b//"), "/b//",
			       "invalid ingress.prefix \"/b//\": drop the trailing '/'");
	ck_assert_str_eq(cfg.ingress_listen, "192.0.2.1:80");
	ck_assert_str_eq(cfg.ingress_prefix, "/a");
	/* A later file without the section keeps what the config holds, like every daemon key. */
	expect_ok(MINIMAL);
	ck_assert_str_eq(cfg.ingress_listen, "192.0.2.1:80");
	ck_assert_str_eq(cfg.ingress_public_url, "http://a.example");
}
END_TEST

int main(void)
{
	TCase *tc;
	Suite *s = policytest_suite("policy/daemon", "daemon", setup, &tc);

	tcase_add_test(tc, test_sandbox_uids);
	tcase_add_test(tc, test_daemon_limits);
	tcase_add_test(tc, test_daemon_settings);
	tcase_add_test(tc, test_tcp_listen);
	tcase_add_test(tc, test_metrics);
	tcase_add_test(tc, test_alert_webhook);
	tcase_add_test(tc, test_daemon_ca);
	tcase_add_test(tc, test_daemon_absent);
	tcase_add_test(tc, test_daemon_listen);
	tcase_add_test(tc, test_daemon_public_url);
	tcase_add_test(tc, test_daemon_origins);
	tcase_add_test(tc, test_daemon_audit_failure);
	tcase_add_test(tc, test_daemon_public_url_limit);
	tcase_add_test(tc, test_daemon_prefix);
	tcase_add_test(tc, test_daemon_keys);
	tcase_add_test(tc, test_daemon_tls);
	tcase_add_test(tc, test_daemon_tls_refused);
	tcase_add_test(tc, test_daemon_tls_limit);
	tcase_add_test(tc, test_daemon_tls_staged);
	tcase_add_test(tc, test_daemon_staged);
	return unit_run(s);
}
