/*
 * The credential-inject tier's compiler: a rule's `inject` (the header the
 * engine sets on the request it re-originates, the value's prefix, the
 * placeholder the agent sends in its place, and where the real secret is)
 * and its `upstream_ca`. The agent never holds the credential: it sends the
 * placeholder, and the engine swaps it in past the sandbox.
 *
 * An inject rule's secret is read at load (getenv, or its file) straight into
 * memory of its own, never through libyaml or a message: errors name the
 * variable or the file and a bad byte's position, never a secret, placeholder
 * or prefix value. It is wiped when the policy is freed (pool_free_secret),
 * and a failed load frees, so wipes, what it read. verdict.inject comes from
 * a table by rule index, as verdict.fake does. A header the engine frames or
 * routes by, or one for this proxy, cannot carry a credential, nor one with
 * '_' in its name (never relayed: http1_hop_by_hop); the
 * placeholder must neither contain the secret nor be part of it (the sandbox
 * holds it), and one shared by two rules of a profile must stand for the
 * same secret (policy.c, inject_share).
 */
#include "policy/loader.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/an.h"
#include "core/keyfile.h"
#include "core/pool.h"

/*
 * Headers an inject rule may not name: the engine frames and routes the
 * request it re-originates, so the framing and hop-by-hop fields (RFC 9110
 * section 7.6.1) and Host are its own, and Proxy-* are for this proxy, never
 * for the upstream. A credential there would split the request or go astray.
 */
static const char *const inject_refused_headers[] = {
	"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Host", "TE",
	"Trailer",
};

static bool inject_header_refused(const char *name, size_t len)
{
	static const char proxy[] = "Proxy-";

	AN_ASSERT(name != NULL);
	if (len >= sizeof(proxy) - 1 && strncasecmp(name, proxy, sizeof(proxy) - 1) == 0)
		return true;
	for (size_t i = 0; i < AN_ARRAY_LEN(inject_refused_headers); i++) {
		if (len == strlen(inject_refused_headers[i]) &&
		    strncasecmp(name, inject_refused_headers[i], len) == 0)
			return true;
	}
	AN_ASSERT(len > 0);
	return false;
}

/* The 1-based position of the first control byte (C0 or DEL) of <s>/<len>, or 0. */
static size_t first_control(const char *s, size_t len)
{
	AN_ASSERT(s != NULL || len == 0);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f)
			return i + 1;
	}
	return 0;
}

/* The inject entry of rule <r>, pushed at its first inject or upstream_ca key; NULL: no memory. */
static struct policy_inject *inject_of(struct loader *ld, const struct acl_rule *r)
{
	struct policy *p = ld->p;

	if (p->inject_count > 0 && p->injects[p->inject_count - 1].rule_index == r->index)
		return &p->injects[p->inject_count - 1];
	AN_ASSERT(p->inject_count == 0 || p->injects[p->inject_count - 1].rule_index < r->index);
	struct policy_inject *injects =
	    loader_grow_array(p->injects, &p->inject_cap, p->inject_count, sizeof(*injects));
	if (injects == NULL)
		return NULL;
	p->injects = injects;
	struct policy_inject *in = &p->injects[p->inject_count++];
	in->rule_index = r->index;
	in->vi.require = true;  /* the default: a request without the placeholder is refused */
	in->vi.upgrades = true; /* the default: WebSocket upgrades are relayed */
	AN_ASSERT(in->secret == NULL && in->header == NULL);
	return in;
}

static int parse_inject_header(struct loader *ld, struct policy_inject *in)
{
	char shown[SHOW_BYTES];

	AN_ASSERT(in->header == NULL);
	int rc = loader_scalar(ld, "header", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	loader_show(s, len, shown);
	if (!loader_is_token(s, len) || len > POLICY_INJECT_HEADER_BYTES_MAX)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "invalid header \"%s\": use 1-%u bytes of RFC 9110 token characters", shown,
		    POLICY_INJECT_HEADER_BYTES_MAX);
	if (inject_header_refused(s, len))
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "header \"%s\" is refused: the daemon frames and routes the request "
		    "(Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, "
		    "Proxy-*, Host, TE, Trailer)",
		    shown);
	if (memchr(s, '_', len) != NULL)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "header \"%s\" is refused: the daemon relays no request field "
		    "whose name holds '_' (a backend may read it as the name with '-')",
		    shown);
	in->header = pool_strndup(s, len);
	if (in->header == NULL)
		return loader_fail_oom(ld);
	in->vi.header = in->header;
	in->vi.header_len = (uint32_t)len;
	AN_ASSERT(in->vi.header_len <= POLICY_INJECT_HEADER_BYTES_MAX);
	return 0;
}

/* Neither the prefix nor the placeholder is ever shown: a key written there must not be. */
static int parse_inject_prefix(struct loader *ld, struct policy_inject *in)
{
	AN_ASSERT(in->prefix == NULL);
	int rc = loader_scalar(ld, "prefix", "a string");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	if (len > POLICY_INJECT_PREFIX_BYTES_MAX)
		return loader_fail(ld, ld->ev.start_mark, "prefix is longer than %u bytes",
				   POLICY_INJECT_PREFIX_BYTES_MAX);
	size_t at = first_control(s, len);
	if (at != 0)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "prefix has a control character (CR, LF, tab, ...) at position %zu", at);
	/* Servers and this proxy read a field value without its leading whitespace. */
	if (len > 0 && s[0] == ' ')
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "prefix must not begin with a space: a header's value is read without "
		    "its leading whitespace, so it would never match");
	in->prefix = pool_strndup(s, len);
	if (in->prefix == NULL)
		return loader_fail_oom(ld);
	in->vi.prefix = in->prefix;
	in->vi.prefix_len = (uint32_t)len;
	AN_ASSERT(in->vi.prefix_len <= POLICY_INJECT_PREFIX_BYTES_MAX);
	return 0;
}

static int parse_inject_placeholder(struct loader *ld, struct policy_inject *in, yaml_mark_t *mark)
{
	AN_ASSERT(in->placeholder == NULL);
	int rc = loader_scalar(ld, "placeholder", "a string");
	if (rc != 0)
		return rc;
	*mark = ld->ev.start_mark;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	if (len < POLICY_INJECT_PLACEHOLDER_BYTES_MIN || len > POLICY_INJECT_PLACEHOLDER_BYTES_MAX)
		return loader_fail(
		    ld, ld->ev.start_mark, "placeholder must be %u-%u bytes, got %zu",
		    POLICY_INJECT_PLACEHOLDER_BYTES_MIN, POLICY_INJECT_PLACEHOLDER_BYTES_MAX, len);
	size_t at = loader_first_invisible(s, len);
	if (at != 0)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "placeholder has a byte that is not visible ASCII (0x21..0x7e) at "
		    "position %zu",
		    at);
	in->placeholder = pool_strndup(s, len);
	if (in->placeholder == NULL)
		return loader_fail_oom(ld);
	in->vi.placeholder = in->placeholder;
	in->vi.placeholder_len = (uint32_t)len;
	AN_ASSERT(in->vi.placeholder_len >= POLICY_INJECT_PLACEHOLDER_BYTES_MIN);
	return 0;
}

/*
 * Checks the secret <s>/<len> read from <key> <name> ("secret_env NAME",
 * "secret_file PATH"), with messages at the value. It goes in a header line
 * as is, so it is visible ASCII; a bad byte is named by its position only.
 */
static int secret_check(struct loader *ld, const char *key, const char *name, const char *s,
			size_t len)
{
	AN_ASSERT(key != NULL && name != NULL);
	AN_ASSERT(s != NULL);
	if (len == 0)
		return loader_fail(ld, ld->ev.start_mark, "%s %s: the secret is empty", key, name);
	if (len > POLICY_INJECT_SECRET_BYTES_MAX)
		return loader_fail(ld, ld->ev.start_mark,
				   "%s %s: the secret is longer than %u bytes", key, name,
				   POLICY_INJECT_SECRET_BYTES_MAX);
	size_t at = loader_first_invisible(s, len);
	if (at != 0)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "%s %s: the secret has a byte that is not visible ASCII (0x21..0x7e) at "
		    "position %zu: a header cannot carry a space, tab, control character "
		    "or non-ASCII byte there",
		    key, name, at);
	return 0;
}

/* Takes <buf> (owned, <cap> bytes to wipe) as the secret of <in>, <len> bytes and a NUL. */
static void secret_set(struct policy_inject *in, char *buf, size_t cap, size_t len)
{
	AN_ASSERT(in->secret == NULL);
	AN_ASSERT(len < cap && cap <= POLICY_INJECT_SECRET_BYTES_MAX + 2u);
	AN_ASSERT(buf[len] == '\0');
	in->secret = buf;
	in->secret_cap = (uint32_t)cap;
	in->vi.secret = buf;
	in->vi.secret_len = (uint32_t)len;
}

/* POSIX's portable variable names, and lower case: [A-Za-z_][A-Za-z0-9_]*. */
static bool is_env_name(const char *s, size_t len)
{
	if (len == 0 || len > POLICY_INJECT_ENV_NAME_BYTES_MAX || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_';
		if (!ok)
			return false;
	}
	AN_ASSERT(len <= POLICY_INJECT_ENV_NAME_BYTES_MAX);
	return true;
}

/* secret_env: the daemon's environment is read at every load (it is the one it started with). */
static int parse_secret_env(struct loader *ld, struct policy_inject *in)
{
	char name[POLICY_INJECT_ENV_NAME_BYTES_MAX + 1];

	AN_ASSERT(in->secret == NULL);
	int rc = loader_scalar(ld, "secret_env", "a string");
	if (rc != 0)
		return rc;
	/* Not shown: a key pasted here instead of a name must not reach a log. */
	if (!is_env_name(ev_text(ld), ev_len(ld)))
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "secret_env must name an environment variable: 1-%u of [A-Za-z0-9_], "
		    "not starting with a digit",
		    POLICY_INJECT_ENV_NAME_BYTES_MAX);
	memcpy(name, ev_text(ld), ev_len(ld));
	name[ev_len(ld)] = '\0';
	const char *value = getenv(name);
	if (value == NULL)
		return loader_fail(ld, ld->ev.start_mark,
				   "secret_env %s: the daemon's environment has no such variable",
				   name);
	size_t len = strlen(value);
	rc = secret_check(ld, "secret_env", name, value, len);
	if (rc != 0)
		return rc;
	char *buf = pool_malloc(len + 1);
	if (buf == NULL)
		return loader_fail_oom(ld);
	memcpy(buf, value, len + 1);
	secret_set(in, buf, len + 1, len);
	AN_ASSERT(in->vi.secret_len == len);
	return 0;
}

/*
 * secret_file: read at every load, following symbolic links (secret mounts,
 * Kubernetes' among them, are links). O_NONBLOCK keeps a FIFO from hanging
 * the load; loader_file_load then refuses it. The file must be the daemon's user's
 * and readable by it alone (core/keyfile.h): sandboxes see the host's files.
 */
static int parse_secret_file(struct loader *ld, struct policy_inject *in)
{
	char path[PATH_MAX];
	const char *call = NULL;
	char *buf = NULL;
	size_t got = 0;

	AN_ASSERT(in->secret == NULL);
	int rc = loader_file_value(ld, "secret_file", path, sizeof(path));
	if (rc != 0)
		return rc;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd == -1)
		return loader_fail(ld, ld->ev.start_mark, "secret_file %s: open: %s", path,
				   strerror(errno));
	struct stat st;
	char why[128];
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    keyfile_check(&st, why, sizeof(why)) != 0) {
		close(fd);
		return loader_fail(ld, ld->ev.start_mark, "secret_file %s: %s", path, why);
	}
	rc = loader_file_load(fd, POLICY_INJECT_SECRET_BYTES_MAX + 1u, &buf, &got, &call);
	close(fd);
	if (rc != 0)
		return loader_fail_file_load(ld, "secret_file", path, rc, call,
					     POLICY_INJECT_SECRET_BYTES_MAX + 1u);
	/* One trailing newline is how editors and `echo` end a file; it is not the key's. */
	size_t len = got > 0 && buf[got - 1] == '\n' ? got - 1 : got;
	buf[len] = '\0';
	rc = secret_check(ld, "secret_file", path, buf, len);
	if (rc != 0) {
		pool_free_secret(buf, got + 1);
		return rc;
	}
	secret_set(in, buf, got + 1, len);
	AN_ASSERT(in->vi.secret_len == len);
	return 0;
}

/* upstream_ca: only checked here, following links (/etc/ssl/certs is links); the engine reads it. */
int loader_upstream_ca(struct loader *ld, const struct acl_rule *r)
{
	char path[PATH_MAX];
	struct stat st;

	struct policy_inject *in = inject_of(ld, r);
	if (in == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(in->upstream_ca == NULL);
	int rc = loader_file_value(ld, "upstream_ca", path, sizeof(path));
	if (rc != 0)
		return rc;
	if (stat(path, &st) == -1)
		return loader_fail(ld, ld->ev.start_mark, "upstream_ca %s: stat: %s", path,
				   strerror(errno));
	if (!S_ISREG(st.st_mode))
		return loader_fail(ld, ld->ev.start_mark, "upstream_ca %s: not a regular file",
				   path);
	in->upstream_ca = pool_strndup(path, strlen(path));
	if (in->upstream_ca == NULL)
		return loader_fail_oom(ld);
	in->vi.upstream_ca = in->upstream_ca;
	AN_ASSERT(in->rule_index == r->index);
	return 0;
}

/* The sandbox holds the placeholder: it must tell nothing of the secret, nor be in it. */
static int inject_overlap(struct loader *ld, const struct verdict_inject *vi, yaml_mark_t m)
{
	AN_ASSERT(vi->placeholder != NULL);
	AN_ASSERT(vi->secret != NULL);
	bool overlap =
	    vi->placeholder_len <= vi->secret_len
		? memmem(vi->secret, vi->secret_len, vi->placeholder, vi->placeholder_len) != NULL
		: memmem(vi->placeholder, vi->placeholder_len, vi->secret, vi->secret_len) != NULL;
	if (overlap)
		return loader_fail(
		    ld, m,
		    "the placeholder and the secret must not equal or contain each other: "
		    "the sandbox holds the placeholder");
	return 0;
}

enum {
	IK_HEADER,
	IK_PREFIX,
	IK_PLACEHOLDER,
	IK_SECRET_ENV,
	IK_SECRET_FILE,
	IK_REQUIRE,
	IK_UPGRADES,
	IK__COUNT
};
static const char *const inject_keys[] = {
	[IK_HEADER] = "header",           [IK_PREFIX] = "prefix",
	[IK_PLACEHOLDER] = "placeholder", [IK_SECRET_ENV] = "secret_env",
	[IK_SECRET_FILE] = "secret_file", [IK_REQUIRE] = "require",
	[IK_UPGRADES] = "upgrades",
};
static_assert(AN_ARRAY_LEN(inject_keys) == IK__COUNT, "every inject key needs a name");
static const struct keyset inject_keyset = { "inject", inject_keys, IK__COUNT };
#define IK_SECRETS ((1u << IK_SECRET_ENV) | (1u << IK_SECRET_FILE))

static int inject_value(struct loader *ld, struct policy_inject *in, uint32_t key, uint32_t seen,
			struct rule_marks *m)
{
	AN_ASSERT(key < IK__COUNT);
	AN_ASSERT(seen & (1u << key));
	switch (key) {
	case IK_HEADER:
		return parse_inject_header(ld, in);
	case IK_PREFIX:
		return parse_inject_prefix(ld, in);
	case IK_PLACEHOLDER:
		return parse_inject_placeholder(ld, in, &m->placeholder);
	case IK_SECRET_ENV:
	case IK_SECRET_FILE:
		if ((seen & IK_SECRETS) == IK_SECRETS)
			return loader_fail(ld, ld->key_mark,
					   "secret_env and secret_file exclude each other");
		return key == IK_SECRET_ENV ? parse_secret_env(ld, in) : parse_secret_file(ld, in);
	case IK_REQUIRE:
		return loader_bool(ld, "require", &in->vi.require);
	case IK_UPGRADES:
		return loader_bool(ld, "upgrades", &in->vi.upgrades);
	default:
		(void)AN_NEVER(true);
		return -EINVAL;
	}
}

/* An inject rule's `inject`: the header, its prefix and placeholder, and the secret's source. */
int loader_inject(struct loader *ld, const struct acl_rule *r, struct rule_marks *m)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	struct policy_inject *in = inject_of(ld, r);
	if (in == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(in->rule_index == r->index && in->header == NULL);
	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "inject");
	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	while ((rc = loader_key(ld, &inject_keyset, &seen, &key)) > 0) {
		rc = inject_value(ld, in, key, seen, m);
		if (rc != 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	rc = loader_check_mandatory(ld, &inject_keyset, (1u << IK_HEADER) | (1u << IK_PLACEHOLDER),
				    seen, start);
	if (rc != 0)
		return rc;
	if (!(seen & IK_SECRETS))
		return loader_fail(
		    ld, start,
		    "inject needs secret_env or secret_file: where the daemon reads the "
		    "real credential");
	if (in->vi.prefix == NULL)
		in->vi.prefix = "";
	AN_ASSERT(in->vi.header != NULL && in->vi.secret != NULL);
	return inject_overlap(ld, &in->vi, m->placeholder);
}

/* verdict.inject by rule index, once p->injects no longer moves. */
int loader_index_injects(struct loader *ld)
{
	struct policy *p = ld->p;

	AN_ASSERT(p->inject_by_rule == NULL);
	AN_ASSERT(p->inject_count <= p->rule_count);
	if (p->inject_count == 0)
		return 0;
	p->inject_by_rule = pool_calloc(p->rule_count, sizeof(*p->inject_by_rule));
	if (p->inject_by_rule == NULL)
		return loader_fail_oom(ld);
	for (uint32_t i = 0; i < p->inject_count; i++) {
		const struct policy_inject *in = &p->injects[i];

		AN_ASSERT(in->rule_index < p->rule_count);
		AN_ASSERT(in->vi.header != NULL && in->vi.prefix != NULL);
		AN_ASSERT(in->vi.placeholder != NULL && in->vi.secret != NULL);
		AN_ASSERT(p->inject_by_rule[in->rule_index] == NULL);
		p->inject_by_rule[in->rule_index] = &in->vi;
	}
	for (uint32_t i = 0; i < p->profile_count; i++) {
		struct policy_profile *pr = &p->profiles[i];
		for (uint32_t j = 0; j < pr->rule_count; j++) {
			const struct acl_rule *r = &pr->rules[j];
			if (r->tier != TIER_INJECT)
				continue;
			if (pr->injects == NULL) {
				pr->injects = pool_calloc(pr->rule_count, sizeof(*pr->injects));
				if (pr->injects == NULL)
					return loader_fail_oom(ld);
			}
			const struct verdict_inject *vi = p->inject_by_rule[r->index];
			AN_ASSERT(vi != NULL);
			bool seen = false;
			for (uint32_t k = 0; k < pr->inject_count && !seen; k++)
				seen = inject_same_placeholder(pr->injects[k], vi);
			if (!seen)
				pr->injects[pr->inject_count++] = vi;
		}
	}
	return 0;
}

bool inject_same_placeholder(const struct verdict_inject *a, const struct verdict_inject *b)
{
	return a->placeholder_len == b->placeholder_len &&
	       memcmp(a->placeholder, b->placeholder, a->placeholder_len) == 0;
}

bool inject_placeholder_elsewhere(const struct policy_profile *pr, const char *buf, size_t len,
				  const struct verdict_inject *own)
{
	for (uint32_t i = 0; i < pr->inject_count; i++) {
		const struct verdict_inject *vi = pr->injects[i];
		if (own != NULL && inject_same_placeholder(vi, own))
			continue;
		if (memmem(buf, len, vi->placeholder, vi->placeholder_len) != NULL)
			return true;
	}
	return false;
}

/* Wipes the secret, then releases the rest. */
void loader_inject_free(struct policy_inject *in)
{
	AN_ASSERT(in->secret != NULL || in->secret_cap == 0);
	AN_ASSERT(in->secret_cap <= POLICY_INJECT_SECRET_BYTES_MAX + 2u);
	pool_free_secret(in->secret, in->secret_cap);
	in->secret = NULL;
	AN_FREE(&in->header);
	AN_FREE(&in->prefix);
	AN_FREE(&in->placeholder);
	AN_FREE(&in->upstream_ca);
	memset(in, 0, sizeof(*in));
}
