/*
 * libFuzzer driver for the policy file loader (policy/policy.c): arbitrary
 * bytes go to policy_load_buffer. The invariants checked:
 *   - the result is 0 or a negative errno, never anything else;
 *   - on failure the error message starts with "<name>:" and the config the
 *     caller passed in is left exactly as it was (the load is atomic);
 *   - on success every decision the compiled policy makes for a few fixed
 *     hosts is well formed (a known tier, a reason exactly on deny), and a
 *     fake verdict always has an answer;
 *   - nothing leaks (LeakSanitizer, with the policy and config freed).
 *
 * fuzz-sources: policy/policy.c policy/yaml.c policy/host.c policy/daemon.c
 * fuzz-sources: policy/resolver.c policy/profile.c policy/fake.c policy/inject.c
 * fuzz-sources: policy/ingress.c policy/acl.c policy/hostname.c policy/addr.c policy/strtab.c
 * fuzz-sources: policy/alerts.c policy/preset.c
 * fuzz-sources: core/config.c core/an.c core/reason.c core/pool.c core/keyfile.c core/alert.c
 * fuzz-sources: core/webhook_target.c
 * fuzz-libs: yaml-0.1 libxxhash libidn2 libpsl
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "core/an.h"
#include "core/config.h"
#include "core/verdict.h"
#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The docs' example (a seed) names this variable for an inject rule's secret. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return setenv("EXAMPLE_API_KEY", "fuzz-example-api-key-0123", 1);
}

static void check_decisions(const struct policy *pol)
{
	static const char *const hosts[] = { "example.com", "a.b.example.com", "127.0.0.1",
					     "ollama.internal", "xn--bcher-kva.example" };
	struct verdict v;

	for (uint32_t p = 0; p < policy_profile_count(pol); p++) {
		for (size_t i = 0; i < AN_ARRAY_LEN(hosts); i++) {
			policy_verdict_ops.decide(pol, p, hosts[i], strlen(hosts[i]), 443, &v);
			AN_ASSERT((unsigned)v.tier < TIER__COUNT);
			AN_ASSERT((v.tier == TIER_DENY) == (v.reason != REASON_NONE));
			AN_ASSERT((v.tier == TIER_FAKE) == (v.fake != NULL));
			if (v.fake != NULL)
				AN_ASSERT(policy_verdict_ops.fake_response(pol, v.fake, "GET", 3,
									   "/", 1) != NULL);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config cfg;
	struct policy *pol = NULL;
	char err[512];

	if (config_init_defaults(&cfg) != 0)
		return 0;
	char *socket_dir_before = cfg.socket_dir;
	int rc =
	    policy_load_buffer("f.yaml", (const char *)data, size, &cfg, &pol, err, sizeof(err));
	AN_ASSERT(rc <= 0);
	if (rc == 0) {
		AN_ASSERT(pol != NULL);
		check_decisions(pol);
		policy_free(pol);
	} else {
		AN_ASSERT(strncmp(err, "f.yaml:", 7) == 0);
		AN_ASSERT(cfg.socket_dir == socket_dir_before);
		AN_ASSERT(cfg.sandbox_count == 0);
	}
	config_free(&cfg);
	return 0;
}
