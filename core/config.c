/*
 * Defaults and ownership for struct config. Parsing lives with the policy
 * loader (policy/), which fills this struct; the engine only reads it.
 */
#include "core/config.h"

#include <errno.h>
#include <string.h>

#include "core/layout.h"
#include "core/limits.h"
#include "core/pool.h"

int config_set_string(char **slot, const char *value)
{
	char *copy = NULL;

	if (value != NULL) {
		copy = pool_strndup(value, strlen(value));
		if (copy == NULL)
			return -ENOMEM;
	}
	pool_free(*slot);
	*slot = copy;
	return 0;
}

int config_init_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->conns_per_worker = LIMITS_CONNS_PER_WORKER_DEFAULT;
	cfg->pipes_per_worker = LIMITS_PIPES_PER_WORKER_DEFAULT;
	cfg->sandbox_share_percent = LIMITS_SANDBOX_SHARE_PERCENT_DEFAULT;
	cfg->sandbox_completions_per_turn = LIMITS_SANDBOX_CQES_PER_TURN;
	cfg->head_timeout_ms = LIMITS_HEAD_TIMEOUT_MS_DEFAULT;
	cfg->connect_timeout_ms = LIMITS_CONNECT_TIMEOUT_MS_DEFAULT;
	cfg->dns_timeout_ms = LIMITS_DNS_TIMEOUT_MS_DEFAULT;
	cfg->idle_timeout_ms = LIMITS_IDLE_TIMEOUT_MS_DEFAULT;
	cfg->body_timeout_ms = LIMITS_BODY_TIMEOUT_MS_DEFAULT;
	cfg->response_timeout_ms = LIMITS_RESPONSE_TIMEOUT_MS_DEFAULT;
	cfg->drain_timeout_ms = LIMITS_DRAIN_TIMEOUT_MS_DEFAULT;
	cfg->handover_timeout_ms = LIMITS_HANDOVER_TIMEOUT_MS_DEFAULT;
	cfg->metrics_sandboxes = LIMITS_METRICS_SANDBOXES_DEFAULT;
	cfg->sandbox_uid_first = LIMITS_SANDBOX_UID_FIRST_DEFAULT;
	cfg->sandbox_uid_count = LIMITS_SANDBOX_UID_COUNT_DEFAULT;
	cfg->sandboxes_per_user = LIMITS_SANDBOXES_PER_USER_DEFAULT;
	/* The prefix is never NULL: a gateway named in the file without one uses it. */
	if (config_set_string(&cfg->socket_dir, LAYOUT_SOCKET_DIR_DEFAULT) != 0 ||
	    config_set_string(&cfg->audit_path, "/var/log/agentsnet/audit.jsonl") != 0 ||
	    config_set_string(&cfg->ingress_prefix, "/callbacks") != 0) {
		config_free(cfg);
		return -ENOMEM;
	}
	return 0;
}

void config_free(struct config *cfg)
{
	for (uint32_t i = 0; i < cfg->sandbox_count; i++)
		AN_FREE(&cfg->sandboxes[i].id);
	AN_FREE(&cfg->sandboxes);
	AN_FREE(&cfg->socket_dir);
	AN_FREE(&cfg->audit_path);
	AN_FREE(&cfg->dns_servers);
	AN_FREE(&cfg->tcp_listen);
	AN_FREE(&cfg->metrics_listen);
	AN_FREE(&cfg->alert_webhook_url);
	AN_FREE(&cfg->alert_webhook_ca_file);
	if (cfg->alert_webhook_authorization != NULL)
		pool_free_secret(cfg->alert_webhook_authorization,
				 strlen(cfg->alert_webhook_authorization) + 1);
	cfg->alert_webhook_authorization = NULL;
	AN_FREE(&cfg->tcp_sandbox);
	AN_FREE(&cfg->control_group);
	AN_FREE(&cfg->ca_cert);
	AN_FREE(&cfg->ca_key);
	AN_FREE(&cfg->ingress_listen);
	AN_FREE(&cfg->ingress_public_url);
	AN_FREE(&cfg->ingress_prefix);
	AN_FREE(&cfg->ingress_tls_cert);
	AN_FREE(&cfg->ingress_tls_key);
	memset(cfg, 0, sizeof(*cfg));
}
