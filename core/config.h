/*
 * The daemon's settings, as loaded from the policy file's `daemon:` section
 * and the command line. Owned by the daemon; the engine borrows it for its
 * whole life. The policy proper (profiles, rules, resolver) is separate and
 * opaque to core/, see core/verdict.h.
 */
#ifndef AN_CORE_CONFIG_H
#define AN_CORE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define CONFIG_SANDBOX_ID_BYTES_MAX 64u
/* A sandbox's ingress token (core/ingress.h) and its NUL: 32 random bytes in base64url. */
#define CONFIG_INGRESS_TOKEN_BYTES 44u

/* config_sandbox.agent_uid of a sandbox any uid may connect to (no `uid` in the file). */
#define CONFIG_AGENT_ANY UINT32_MAX

struct config_sandbox {
	char *id;           /* owned; [A-Za-z0-9_.-]{1,63}, not starting with '.' */
	uint32_t profile;   /* index into the policy's profiles */
	uint32_t agent_uid; /* who may connect besides root (`uid`), or CONFIG_AGENT_ANY */
};

struct config {
	char *socket_dir;  /* owned; sandbox sockets: <socket_dir>/sandboxes/<id>/egress.sock */
	char *audit_path;  /* owned; JSON lines, "-" for stdout */
	char *dns_servers; /* owned; c-ares CSV "ip[:port],...", NULL: /etc/resolv.conf */
	char *tcp_listen;  /* owned; "127.0.0.1:PORT" or NULL: no TCP listener */
	/* owned; the Prometheus listener's loopback "address:port" (core/metrics.h), NULL: none */
	char *metrics_listen;
	/* Sandboxes with series of their own in the metrics (the busiest); the rest summed. */
	uint32_t metrics_sandboxes;
	/* `daemon.alert_webhook` (core/webhook.h): owned; the URL alerts are POSTed to, NULL:
	 * none; its Authorization value (owned, a secret: wiped when freed), NULL: none; the
	 * PEM roots an https receiver is verified against (owned), NULL: the system's; a
	 * try's timeout. */
	char *alert_webhook_url;
	char *alert_webhook_authorization;
	char *alert_webhook_ca_file;
	uint32_t alert_webhook_timeout_ms;
	char *tcp_sandbox;   /* owned; sandbox id TCP connections are served as */
	char *control_group; /* owned; group allowed on the control socket, NULL: the daemon's */
	char *ca_cert; /* owned; the agentsnet CA (PEM) the terminated tiers sign with, or NULL */
	char *ca_key;  /* owned; its private key (PEM); set exactly when ca_cert is */
	uint32_t leaf_days; /* validity of minted leaves; 0: the tls/ default */
	/* The ingress gateway (`daemon.ingress`); no listen address: no gateway. */
	char *ingress_listen;     /* owned; "ip:port" or "[ip6]:port" of the public listener */
	char *ingress_public_url; /* owned; the base agents are told, NULL: "http://<listen>" */
	char *ingress_prefix;     /* owned; the path before each sandbox id ("/callbacks") */
	/* `daemon.ingress.origins: subdomain`: each sandbox is also served at an
	 * origin of its own, <id>.<ingress_public_url's host> (core/ingress.h);
	 * ingress_public_url is then set and names a host, not an address. */
	bool ingress_origins;
	/* owned; the operator's certificate chain and key (PEM) the public listener
	 * serves TLS with (`daemon.ingress.tls`), both or neither: NULL, plain HTTP */
	char *ingress_tls_cert;
	char *ingress_tls_key;
	/* True when the embedded default named the listener: a port already in
	 * use then leaves the gateway off with a warning instead of failing the
	 * start (an operator's own file fails it). */
	bool ingress_optional;
	/* `daemon.audit_failure: refuse`: while the audit log cannot be written
	 * (audit_failing), requests are refused 503 audit_unavailable; false
	 * (`continue`, the default): served, their records counted as lost. */
	bool audit_failure_refuse;
	uint32_t workers; /* 0: one per online core */
	uint32_t conns_per_worker;
	uint32_t pipes_per_worker;      /* 0 disables splice: every relay copies */
	uint32_t sandbox_share_percent; /* a sandbox's share of a worker's conns (core/share.h) */
	uint32_t
	    sandbox_completions_per_turn; /* a sandbox's quantum of a loop turn (core/sched.h) */
	uint32_t head_timeout_ms;
	uint32_t connect_timeout_ms;
	uint32_t dns_timeout_ms;
	uint32_t idle_timeout_ms;
	/* A request body that sends nothing for this long: 408 while no answer began. */
	uint32_t body_timeout_ms;
	/* An upstream that sends no response head for this long once the request is
	 * out: 504 upstream_timeout. */
	uint32_t response_timeout_ms;
	/* How long a stopping daemon lets what is in flight finish (engine_drain); 0: none. */
	uint32_t drain_timeout_ms;
	/* How long `daemon handover` waits for each step of the successor, its "ready"
	 * last; past it this daemon goes on serving. */
	uint32_t handover_timeout_ms;
	/* The uids (and gids) given to root's sandboxes, one each: first..first + count - 1. */
	uint32_t sandbox_uid_first;
	uint32_t sandbox_uid_count;
	/* Sandboxes one caller other than root may hold registered at once. */
	uint32_t sandboxes_per_user;
	uint32_t sandbox_count;
	struct config_sandbox *sandboxes; /* owned array of sandbox_count */
};

/* Fills <cfg> with the built-in defaults (paths under /run and /var/log). 0 or -ENOMEM. */
int config_init_defaults(struct config *cfg);
/* Replaces the owned string *<slot> with a copy of <value> (NULL clears). 0 or -ENOMEM. */
int config_set_string(char **slot, const char *value);
/* Releases everything <cfg> owns and zeroes it. */
void config_free(struct config *cfg);

#endif /* AN_CORE_CONFIG_H */
