/*
 * Host lookup, first cut: three immutable hash tables per profile.
 *
 * Exact names, wildcard suffixes and IP literals each get a strtab (open
 * addressing over XXH3-64, power-of-two, sized once in acl_build). A name is
 * looked up exactly, then every proper parent suffix of two or more labels is
 * tried among wildcards from longest to shortest, so "a.b.example.com" tries
 * "*.b.example.com" before "*.example.com" and the most specific rule wins.
 * A wildcard never matches its apex: "*.example.com" is stored under
 * "example.com" in the wildcard table, which exact lookups never read.
 * IP literals are looked up only among IP rules, never against wildcards.
 *
 * Normalisation is the security boundary: the host arrives as the client
 * spelled it, and every spelling of one host must reach the same rule. Hence
 * canonical inet_ntop text for IP literals, ASCII lower case, one trailing
 * dot dropped, and refusal of anything a resolver might read differently from
 * us (numeric last labels, zones, empty labels, bytes outside the LDH set plus
 * underscore). Non-ASCII names are refused: rules and clients use the
 * punycode (xn--) form.
 *
 * Rejected for now: the reversed-label hash-trie of DESIGN.md section 6; a
 * later issue brings it behind this same interface.
 */
#include "policy/acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "core/an.h"
#include "core/pool.h"

static bool is_name_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* WHATWG URL "ends in a number": a last label of digits or 0x-hex reads as IPv4. */
static bool label_is_numeric(const char *s, size_t len)
{
	size_t i = 0;

	AN_ASSERT(len > 0);
	if (len >= 2 && s[0] == '0' && s[1] == 'x') {
		for (i = 2; i < len; i++) {
			if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
				return false;
		}
		return true;
	}
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
	}
	AN_ASSERT(i == len);
	return true;
}

/* Checks the lower-cased name <s>/<len> label by label. 0, or -EINVAL and *<why>. */
static int check_name(const char *s, size_t len, const char **why)
{
	size_t label_start = 0;

	AN_ASSERT(why != NULL);
	if (len == 0) {
		*why = "empty host";
		return -EINVAL;
	}
	if (len > ACL_NAME_BYTES_MAX) {
		*why = "host longer than 253 bytes";
		return -EINVAL;
	}
	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != '.') {
			if (!is_name_byte((unsigned char)s[i])) {
				*why =
				    "character outside [A-Za-z0-9-_.] (use the xn-- form of IDNs)";
				return -EINVAL;
			}
			continue;
		}
		if (i == label_start) {
			*why = "empty label";
			return -EINVAL;
		}
		if (i - label_start > ACL_LABEL_BYTES_MAX) {
			*why = "label longer than 63 bytes";
			return -EINVAL;
		}
		label_start = i + 1;
	}
	AN_ASSERT(label_start == len + 1);
	return 0;
}

/* Rewrites the IP literal in <buf> (NUL-terminated) as canonical text. Length or -EINVAL. */
static int canonical_ip(char *buf, size_t cap, int family)
{
	unsigned char bin[sizeof(struct in6_addr)];

	AN_ASSERT(cap >= INET6_ADDRSTRLEN);
	AN_ASSERT(family == AF_INET || family == AF_INET6);
	if (inet_pton(family, buf, bin) != 1)
		return -EINVAL;
	if (inet_ntop(family, bin, buf, (socklen_t)cap) == NULL)
		return -EINVAL;
	return (int)strlen(buf);
}

static int normalise_ip6(const char *host, size_t len, char *out, size_t cap, const char **why)
{
	AN_ASSERT(cap >= ACL_HOST_NORM_BYTES);
	AN_ASSERT(why != NULL);
	if (memchr(host, '%', len) != NULL) {
		*why = "IPv6 zone identifiers are refused";
		return -EINVAL;
	}
	if (len >= INET6_ADDRSTRLEN || memchr(host, '\0', len) != NULL) {
		*why = "invalid IPv6 address";
		return -EINVAL;
	}
	memcpy(out, host, len);
	out[len] = '\0';
	int n = canonical_ip(out, cap, AF_INET6);
	if (n < 0)
		*why = "invalid IPv6 address";
	return n;
}

int acl_normalise(const char *host, size_t len, char *out, size_t cap, enum acl_kind *kind,
		  const char **why)
{
	const char *unused;

	AN_ASSERT(cap >= ACL_HOST_NORM_BYTES);
	AN_ASSERT(kind != NULL);
	if (why == NULL)
		why = &unused;
	*kind = ACL_KIND_IP;
	if (len == 0) {
		*why = "empty host";
		return -EINVAL;
	}
	if (len >= 2 && host[0] == '[' && host[len - 1] == ']')
		return normalise_ip6(host + 1, len - 2, out, cap, why);
	if (memchr(host, ':', len) != NULL)
		return normalise_ip6(host, len, out, cap, why);
	if (len > ACL_NAME_BYTES_MAX + 1) {
		*why = "host longer than 253 bytes";
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++) {
		char c = host[i];

		out[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
	}
	if (len > 0 && out[len - 1] == '.')
		len--;
	out[len] = '\0';
	if (memchr(out, '\0', len) == NULL && canonical_ip(out, cap, AF_INET) >= 0)
		return (int)strlen(out);
	*kind = ACL_KIND_NAME;
	if (check_name(out, len, why) != 0)
		return -EINVAL;
	const char *last = memrchr(out, '.', len);
	size_t last_start = last != NULL ? (size_t)(last - out) + 1 : 0;
	if (label_is_numeric(out + last_start, len - last_start)) {
		*why = "the last label is numeric but the host is not a valid IPv4 address";
		return -EINVAL;
	}
	return (int)len;
}

static uint32_t count_kind(const struct acl_rule *rules, uint32_t count, enum acl_kind kind)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < count; i++)
		n += rules[i].kind == kind;
	AN_ASSERT(n <= count);
	return n;
}

static struct strtab *table_for(struct acl *a, enum acl_kind kind)
{
	switch (kind) {
	case ACL_KIND_NAME:
		return &a->names;
	case ACL_KIND_WILDCARD:
		return &a->wildcards;
	case ACL_KIND_IP:
		return &a->ips;
	}
	(void)AN_NEVER(true);
	return &a->names;
}

int acl_build(struct acl *a, const struct acl_rule *rules, uint32_t count, uint32_t *dup_first,
	      uint32_t *dup_second)
{
	static const enum acl_kind kinds[] = { ACL_KIND_NAME, ACL_KIND_WILDCARD, ACL_KIND_IP };
	int rc = 0;

	AN_ASSERT(rules != NULL || count == 0);
	AN_ASSERT(dup_first != NULL && dup_second != NULL);
	memset(a, 0, sizeof(*a));
	for (size_t k = 0; k < AN_ARRAY_LEN(kinds) && rc == 0; k++)
		rc = strtab_init(table_for(a, kinds[k]), count_kind(rules, count, kinds[k]));
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		const struct acl_rule *r = &rules[i];

		AN_ASSERT(r->host != NULL && r->host_len > 0);
		rc = strtab_insert(table_for(a, (enum acl_kind)r->kind), r->host, r->host_len, i,
				   dup_first);
		if (rc == -EEXIST)
			*dup_second = i;
	}
	if (rc != 0) {
		acl_free(a);
		return rc;
	}
	a->rules = rules;
	a->rule_count = count;
	AN_ASSERT(a->names.count + a->wildcards.count + a->ips.count == count);
	return 0;
}

const struct acl_rule *acl_lookup(const struct acl *a, const char *host, size_t len,
				  enum acl_kind kind)
{
	uint32_t index;

	AN_ASSERT(kind == ACL_KIND_NAME || kind == ACL_KIND_IP);
	AN_ASSERT(len < ACL_HOST_NORM_BYTES);
	if (kind == ACL_KIND_IP)
		return strtab_find(&a->ips, host, len, &index) == 0 ? &a->rules[index] : NULL;
	if (strtab_find(&a->names, host, len, &index) == 0)
		return &a->rules[index];
	if (a->wildcards.count == 0)
		return NULL;
	/* Proper suffixes of at least two labels, longest first. */
	for (const char *dot = memchr(host, '.', len); dot != NULL;) {
		const char *suffix = dot + 1;
		size_t suffix_len = len - (size_t)(suffix - host);

		dot = memchr(suffix, '.', suffix_len);
		if (dot == NULL)
			break;
		if (strtab_find(&a->wildcards, suffix, suffix_len, &index) == 0)
			return &a->rules[index];
	}
	AN_ASSERT(a->rules != NULL || a->rule_count == 0);
	return NULL;
}

bool acl_port_allowed(const struct acl_rule *r, uint16_t port)
{
	AN_ASSERT(r->ports != NULL || r->port_count == 0);
	if (r->port_count == 0)
		return true;
	for (uint16_t i = 0; i < r->port_count; i++) {
		if (r->ports[i] == port)
			return true;
	}
	return false;
}

void acl_decide(const struct acl *a, const char *host, size_t len, uint16_t port,
		struct verdict *out)
{
	char norm[ACL_HOST_NORM_BYTES];
	enum acl_kind kind;

	AN_ASSERT(out != NULL);
	AN_ASSERT(host != NULL || len == 0);
	memset(out, 0, sizeof(*out));
	out->tier = TIER_DENY;
	out->reason = REASON_HOST_NOT_ALLOWED;
	int n = acl_normalise(host, len, norm, sizeof(norm), &kind, NULL);
	if (n < 0)
		return;
	const struct acl_rule *r = acl_lookup(a, norm, (size_t)n, kind);
	if (r == NULL)
		return;
	out->rule = r->id;
	out->instruction = r->instruction;
	/* A deny rule refuses on every port: "try another port" would mislead. */
	if (r->tier == TIER_DENY)
		return;
	if (!acl_port_allowed(r, port)) {
		out->reason = REASON_PORT_NOT_ALLOWED;
		return;
	}
	out->tier = (enum tier)r->tier;
	out->reason = REASON_NONE;
	out->upstream = r->upstream;
	AN_ASSERT(out->tier != TIER_LOCAL || out->upstream != NULL);
}

void acl_rule_free(struct acl_rule *r)
{
	AN_FREE(&r->id);
	AN_FREE(&r->host);
	AN_FREE(&r->owner);
	AN_FREE(&r->reason);
	AN_FREE(&r->instruction);
	AN_FREE(&r->upstream);
	AN_FREE(&r->ports);
	memset(r, 0, sizeof(*r));
}

void acl_free(struct acl *a)
{
	strtab_free(&a->names);
	strtab_free(&a->wildcards);
	strtab_free(&a->ips);
	memset(a, 0, sizeof(*a));
}
