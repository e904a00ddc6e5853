/*
 * The presets (policy/preset.h): the table, and each preset's rules as YAML.
 *
 * The host lists are what each ecosystem's own client contacts on its common
 * paths (install, fetch, clone; a model SDK's API calls), and nothing more: a
 * mirror, a telemetry endpoint or a web UI is the policy owner's to add. The
 * passthrough tier relays them byte for byte; the model APIs are
 * credential-inject rules with the header their SDKs send the key in.
 */
#include "policy/preset.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/an.h"

static const struct preset_host npm_hosts[] = {
	{ "registry", "registry.npmjs.org", { 443 }, "npm and yarn: metadata and tarballs" },
};

static const struct preset_host pypi_hosts[] = {
	{ "index", "pypi.org", { 443 }, "pip: the simple index and the JSON API" },
	{ "files", "files.pythonhosted.org", { 443 }, "pip: the distributions the index links" },
};

static const struct preset_host crates_hosts[] = {
	{ "index", "index.crates.io", { 443 }, "cargo: the sparse index" },
	{ "static", "static.crates.io", { 443 }, "cargo: crate downloads" },
	{ "api", "crates.io", { 443 }, "cargo: the API (search, and downloads' redirects)" },
};

static const struct preset_host gomod_hosts[] = {
	{ "proxy", "proxy.golang.org", { 443 }, "go: the module proxy" },
	{ "sum", "sum.golang.org", { 443 }, "go: the checksum database" },
};

static const struct preset_host debian_hosts[] = {
	{ "mirror", "deb.debian.org", { 80, 443 }, "apt: the Debian archive" },
	{ "security", "security.debian.org", { 80, 443 }, "apt: Debian security updates" },
};

static const struct preset_host ubuntu_hosts[] = {
	{ "archive", "archive.ubuntu.com", { 80, 443 }, "apt: the Ubuntu archive (amd64)" },
	{ "security", "security.ubuntu.com", { 80, 443 }, "apt: Ubuntu security updates" },
	{ "ports",
	  "ports.ubuntu.com",
	  { 80, 443 },
	  "apt: the Ubuntu archive (other architectures)" },
};

static const struct preset_host maven_hosts[] = {
	{ "central", "repo.maven.apache.org", { 443 }, "Maven and Gradle: Maven Central" },
	{ "central1", "repo1.maven.org", { 443 }, "Maven Central under its older name" },
};

static const struct preset_host github_hosts[] = {
	{ "web", "github.com", { 443 }, "git over HTTPS: clone, fetch, push" },
	{ "api", "api.github.com", { 443 }, "the REST and GraphQL API (gh, SDKs)" },
	{ "codeload", "codeload.github.com", { 443 }, "archives of a ref (tarball, zipball)" },
	{ "raw", "raw.githubusercontent.com", { 443 }, "raw files of a repository" },
	{ "objects", "objects.githubusercontent.com", { 443 }, "release assets and LFS objects" },
	{ "release-assets",
	  "release-assets.githubusercontent.com",
	  { 443 },
	  "release assets (the newer host)" },
};

static const struct preset_host gitlab_hosts[] = {
	{ "web", "gitlab.com", { 443 }, "git over HTTPS and the API" },
};

static const struct preset_host anthropic_hosts[] = {
	{ "api", "api.anthropic.com", { 443 }, "the Messages API" },
};
static const struct preset_inject anthropic_inject = { "x-api-key", "",
						       "agentsnet-placeholder-anthropic",
						       "ANTHROPIC_API_KEY" };

static const struct preset_host openai_hosts[] = {
	{ "api", "api.openai.com", { 443 }, "the Responses and Chat Completions APIs" },
};
static const struct preset_inject openai_inject = { "Authorization", "Bearer ",
						    "agentsnet-placeholder-openai",
						    "OPENAI_API_KEY" };

static const struct preset_host google_hosts[] = {
	{ "api", "generativelanguage.googleapis.com", { 443 }, "the Gemini API" },
};
static const struct preset_inject google_inject = { "x-goog-api-key", "",
						    "agentsnet-placeholder-google",
						    "GEMINI_API_KEY" };

#define HOSTS(a) a, AN_ARRAY_LEN(a)

/* In name order, each name's versions in order. */
static const struct preset presets[] = {
	{ "anthropic", 1, "Anthropic's API, the key injected (x-api-key)", HOSTS(anthropic_hosts),
	  &anthropic_inject, NULL },
	{ "crates", 1, "crates.io for cargo", HOSTS(crates_hosts), NULL, NULL },
	{ "debian", 1, "the Debian archive for apt", HOSTS(debian_hosts), NULL, NULL },
	{ "github", 1, "GitHub: git over HTTPS, the API, archives, raw files, release assets",
	  HOSTS(github_hosts), NULL, "githubusercontent.com" },
	{ "gitlab", 1, "GitLab.com: git over HTTPS and the API", HOSTS(gitlab_hosts), NULL, NULL },
	{ "gomod", 1, "Go modules: the proxy and the checksum database", HOSTS(gomod_hosts), NULL,
	  NULL },
	{ "google-ai", 1, "Google's Gemini API, the key injected (x-goog-api-key)",
	  HOSTS(google_hosts), &google_inject, NULL },
	{ "maven", 1, "Maven Central", HOSTS(maven_hosts), NULL, NULL },
	{ "npm", 1, "the npm registry", HOSTS(npm_hosts), NULL, NULL },
	{ "openai", 1, "OpenAI's API, the key injected (Authorization: Bearer)",
	  HOSTS(openai_hosts), &openai_inject, NULL },
	{ "pypi", 1, "PyPI for pip", HOSTS(pypi_hosts), NULL, NULL },
	{ "ubuntu", 1, "the Ubuntu archive for apt", HOSTS(ubuntu_hosts), NULL, NULL },
};

const struct preset *preset_all(uint32_t *count)
{
	*count = AN_ARRAY_LEN(presets);
	return presets;
}

const struct preset *preset_find(const char *label, size_t len, char *why, size_t cap)
{
	const char *at = memchr(label, '@', len);
	size_t name_len = at != NULL ? (size_t)(at - label) : len;
	uint32_t version = 0;
	bool named = false;

	AN_ASSERT(label != NULL && cap > 0);
	if (at != NULL && at + 1 < label + len && at + 1 + 4 > label + len) {
		version = 0;
		for (const char *d = at + 1; d < label + len; d++) {
			if (*d < '0' || *d > '9') {
				version = 0;
				break;
			}
			version = version * 10 + (uint32_t)(*d - '0');
		}
	}
	int shown = len > 64 ? 64 : (int)len;
	for (size_t i = 0; i < AN_ARRAY_LEN(presets); i++) {
		const struct preset *p = &presets[i];
		if (strlen(p->name) != name_len || memcmp(p->name, label, name_len) != 0)
			continue;
		named = true;
		if (p->version == version)
			return p;
	}
	if (!named) {
		snprintf(
		    why, cap,
		    "no preset \"%.*s\" (there are: anthropic, crates, debian, github, gitlab, "
		    "gomod, google-ai, maven, npm, openai, pypi, ubuntu)",
		    shown, label);
		return NULL;
	}
	if (at == NULL) {
		snprintf(why, cap,
			 "preset \"%.*s\" needs a version, \"%.*s@1\": a version never changes, so "
			 "the policy says which list it means",
			 shown, label, (int)name_len, label);
		return NULL;
	}
	size_t n = (size_t)snprintf(why, cap,
				    "preset \"%.*s\" has no such version (there is:", shown, label);
	for (size_t i = 0; i < AN_ARRAY_LEN(presets) && n < cap; i++) {
		if (strlen(presets[i].name) == name_len &&
		    memcmp(presets[i].name, label, name_len) == 0)
			n += (size_t)snprintf(why + n, cap - n, " %.*s@%u", (int)name_len, label,
					      presets[i].version);
	}
	if (n < cap)
		snprintf(why + n, cap - n, ")");
	return NULL;
}

/* Appends <fmt...> to <out> at *<n>; false when it would not fit. */
__attribute__((format(printf, 4, 5))) static bool put(char *out, size_t cap, size_t *n,
						      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int m = vsnprintf(out + *n, cap - *n, fmt, ap);
	va_end(ap);
	if (m < 0 || (size_t)m >= cap - *n)
		return false;
	*n += (size_t)m;
	return true;
}

/* Appends <s> as a YAML double-quoted scalar; false when it would not fit or is not clean ASCII. */
static bool put_quoted(char *out, size_t cap, size_t *n, const char *s)
{
	if (!put(out, cap, n, "\""))
		return false;
	for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
		if (*c < 0x20 || *c > 0x7e)
			return false;
		if ((*c == '"' || *c == '\\') && !put(out, cap, n, "\\"))
			return false;
		if (!put(out, cap, n, "%c", *c))
			return false;
	}
	return put(out, cap, n, "\"");
}

static bool clean_ascii(const char *s)
{
	for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
		if (*c < 0x20 || *c > 0x7e)
			return false;
	}
	return true;
}

int preset_rules_yaml(const struct preset *p, const struct preset_args *a, char *out, size_t cap,
		      char *why, size_t why_cap)
{
	size_t n = 0;

	AN_ASSERT(p != NULL && a != NULL && out != NULL && cap > 0);
	bool secret_given = a->secret_file != NULL || a->secret_env != NULL;
	if (p->inject == NULL && (secret_given || a->placeholder != NULL)) {
		snprintf(why, why_cap,
			 "%s@%u is a passthrough preset: it takes no secret_file, secret_env or "
			 "placeholder",
			 p->name, p->version);
		return -EINVAL;
	}
	if (p->inject != NULL && (a->secret_file != NULL) == (a->secret_env != NULL)) {
		snprintf(why, why_cap,
			 "%s@%u injects a credential: name exactly one of secret_file and "
			 "secret_env ({name: %s@%u, secret_file: PATH})",
			 p->name, p->version, p->name, p->version);
		return -EINVAL;
	}
	const char *values[] = { a->secret_file, a->secret_env, a->placeholder };
	for (size_t i = 0; i < AN_ARRAY_LEN(values); i++) {
		if (values[i] != NULL && !clean_ascii(values[i])) {
			snprintf(why, why_cap, "%s@%u: %s must be printable ASCII", p->name,
				 p->version,
				 i == 0   ? "secret_file"
				 : i == 1 ? "secret_env"
					  : "placeholder");
			return -EINVAL;
		}
	}
	for (uint32_t i = 0; i < p->host_count; i++) {
		const struct preset_host *h = &p->hosts[i];
		bool ok = put(out, cap, &n, "- id: \"%s.%s\"\n  host: \"%s\"\n  ports: [%u",
			      p->name, h->id, h->host, h->ports[0]);
		if (ok && h->ports[1] != 0)
			ok = put(out, cap, &n, ", %u", h->ports[1]);
		ok = ok &&
		     put(out, cap, &n,
			 "]\n  tier: %s\n  owner: \"agentsnet preset %s@%u\"\n  reason: \"%s\"\n",
			 p->inject != NULL ? "inject" : "passthrough", p->name, p->version,
			 h->reason);
		if (ok && p->inject != NULL) {
			const struct preset_inject *in = p->inject;
			ok =
			    put(out, cap, &n, "  inject:\n    header: \"%s\"\n    prefix: \"%s\"\n",
				in->header, in->prefix) &&
			    put(out, cap, &n, "    placeholder: ") &&
			    put_quoted(out, cap, &n,
				       a->placeholder != NULL ? a->placeholder : in->placeholder) &&
			    put(out, cap, &n, "\n    %s: ",
				a->secret_file != NULL ? "secret_file" : "secret_env") &&
			    put_quoted(out, cap, &n,
				       a->secret_file != NULL ? a->secret_file : a->secret_env) &&
			    put(out, cap, &n, "\n");
		}
		if (!ok) {
			snprintf(why, why_cap, "%s@%u: its rules do not fit %zu bytes", p->name,
				 p->version, cap);
			return -ENOSPC;
		}
	}
	return (int)n;
}

const struct preset *preset_covering(const char *suffix)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(presets); i++) {
		if (presets[i].covers_suffix != NULL &&
		    strcmp(presets[i].covers_suffix, suffix) == 0)
			return &presets[i];
	}
	return NULL;
}
