/*
 * Hosts and addresses as a policy writes them: a rule's host, and the
 * "host:port" and "ip[:port]" values of the daemon and resolver sections.
 *
 * A rule's host is normalised once, here, by the same host_normalise the
 * engine runs on the host an agent asks for (IDNA to A-labels, lower case,
 * the WHATWG IPv4 forms to dotted decimal), so a rule and a request compare
 * as bytes. A rule may not use the odd IPv4 spellings a client may
 * (2130706433 for 127.0.0.1): they mislead a reviewer. A wildcard
 * "*.<domain>" must sit below a registrable domain: the Public Suffix List
 * (the system's or the built-in one, whichever is newer, loaded at a load's
 * first wildcard) refuses "*.com" and "*.co.uk", where anyone may register
 * names. Only its explicit entries count: its implicit "*" rule would make
 * every unknown TLD's names ("corp.internal") public suffixes.
 *
 * Addresses are parsed by addr_parse_ip and written back canonically
 * (loader_format_addr), so the config holds one spelling of each.
 */
#include "policy/loader.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <libpsl.h>

#include "core/an.h"
#include "core/pool.h"
#include "policy/acl.h"
#include "policy/addr.h"
#include "policy/preset.h"

/* The port of a "host:port": 1..65535 in decimal, no sign, no leading zero. NULL, or why not. */
static const char *parse_hostport_port(const char *s, size_t len, uint16_t *port)
{
	uint64_t v = 0;

	AN_ASSERT(port != NULL);
	if (len > 5 || !loader_parse_decimal(s, len, &v) || s[0] == '0' || v > 65535)
		return "the port must be 1..65535";
	*port = (uint16_t)v;
	AN_ASSERT(*port >= 1);
	return NULL;
}

/* Splits "[v6]:port", "[v6]", "v6", "host:port" or "host". NULL, or why not. */
const char *loader_split_hostport(const char *s, size_t len, struct hostport *hp)
{
	const char *port = NULL;
	const char *colon = memchr(s, ':', len);

	AN_ASSERT(hp != NULL);
	memset(hp, 0, sizeof(*hp));
	hp->host = s;
	hp->host_len = len;
	if (len > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', len);
		if (close == NULL)
			return "'[' without ']'";
		hp->host = s + 1;
		hp->host_len = (size_t)(close - s) - 1;
		hp->bracketed = true;
		if (close + 1 < s + len && close[1] != ':')
			return "expected ':' after ']'";
		port = close + 1 < s + len ? close + 2 : NULL;
	} else if (colon != NULL && memchr(colon + 1, ':', len - (size_t)(colon + 1 - s)) == NULL) {
		hp->host_len = (size_t)(colon - s);
		port = colon + 1;
	}
	if (hp->host_len == 0)
		return "the host is empty";
	AN_ASSERT(hp->host + hp->host_len <= s + len);
	if (port != NULL)
		return parse_hostport_port(port, len - (size_t)(port - s), &hp->port);
	return NULL;
}

/* Canonical "ip", "ip:port" or "[ip6]:port" of <ss> (port 0: none). */
void loader_format_addr(const struct sockaddr_storage *ss, uint16_t port, char *buf, size_t cap)
{
	char ip[INET6_ADDRSTRLEN];
	const void *bin = ss->ss_family == AF_INET
			      ? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
			      : (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;

	AN_ASSERT(cap >= HOSTPORT_BYTES);
	AN_ASSERT(ss->ss_family == AF_INET || ss->ss_family == AF_INET6);
	const char *text = inet_ntop(ss->ss_family, bin, ip, sizeof(ip));
	AN_ASSERT(text != NULL);
	if (port == 0)
		snprintf(buf, cap, "%s", ip);
	else if (ss->ss_family == AF_INET6)
		snprintf(buf, cap, "[%s]:%u", ip, port);
	else
		snprintf(buf, cap, "%s:%u", ip, port);
}

/*
 * Reads "<ip>[:port]" into <ss>/<port>: the port is mandatory when
 * <port_required>. Brackets are for IPv6 only.
 */
int loader_ip_port(struct loader *ld, const char *what, bool port_required,
		   struct sockaddr_storage *ss, uint16_t *port)
{
	char shown[SHOW_BYTES];
	struct hostport hp;

	AN_ASSERT(ss != NULL && port != NULL);
	int rc = loader_scalar(ld, what, "a string");
	if (rc != 0)
		return rc;
	const char *why = loader_split_hostport(ev_text(ld), ev_len(ld), &hp);
	if (why == NULL && addr_parse_ip(hp.host, hp.host_len, ss) != 0)
		why = "not an IPv4 or IPv6 address";
	if (why == NULL && hp.bracketed && ss->ss_family != AF_INET6)
		why = "brackets are for IPv6 addresses";
	if (why == NULL && port_required && hp.port == 0)
		why = "the port is missing";
	if (why != NULL)
		return loader_fail(ld, ld->ev.start_mark, "invalid %s \"%s\": %s", what,
				   loader_show(ev_text(ld), ev_len(ld), shown), why);
	*port = hp.port;
	AN_ASSERT(!port_required || *port != 0);
	return 0;
}

/* Validates a "*.<suffix>" rule host into <norm>; returns the length or an error. */
static int wildcard_host(struct loader *ld, char *norm, const char *shown)
{
	enum acl_kind kind;
	const char *why = NULL;

	AN_ASSERT(ev_len(ld) >= 1 && ev_text(ld)[0] == '*');
	if (ev_len(ld) == 1)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "host \"*\" is refused: name a host (\"example.com\") or the sub-domains of one (\"*.example.com\")");
	if (ev_text(ld)[1] != '.')
		return loader_fail(ld, ld->ev.start_mark,
				   "invalid host \"%s\": a wildcard is \"*.\" followed by a domain",
				   shown);
	int n = host_normalise(ev_text(ld) + 2, ev_len(ld) - 2, norm, HOST_NORM_BYTES, &kind, &why);
	if (n < 0)
		return loader_fail(ld, ld->ev.start_mark, "invalid host \"%s\": %s", shown, why);
	if (kind == ACL_KIND_IP)
		return loader_fail(ld, ld->ev.start_mark,
				   "invalid host \"%s\": a wildcard cannot cover IP addresses",
				   shown);
	if (memchr(norm, '.', (size_t)n) == NULL)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "host \"%s\" is refused: a wildcard must be below a registrable domain (\"*.example.com\", not \"*.com\")",
		    shown);
	if (!ld->psl_tried) {
		ld->psl_tried = true;
		ld->psl = psl_latest(NULL); /* the newer of the system's file and the built-in */
		if (ld->psl == NULL)
			ld->psl = (psl_ctx_t *)(uintptr_t)psl_builtin();
	}
	/* Explicit entries only: the list's implicit "*" would make every unknown
	 * TLD's names ("corp.internal") public suffixes. */
	const struct preset *cover = preset_covering(norm);
	if (ld->psl != NULL && cover != NULL &&
	    psl_is_public_suffix2(ld->psl, norm, PSL_TYPE_ANY | PSL_TYPE_NO_STAR_RULE))
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "host \"%s\" is refused: %s is a public suffix, where anyone may register names; the %s@%u preset lists the exact hosts under it that its clients use (presets: [%s@%u])",
		    shown, norm, cover->name, cover->version, cover->name, cover->version);
	if (ld->psl != NULL &&
	    psl_is_public_suffix2(ld->psl, norm, PSL_TYPE_ANY | PSL_TYPE_NO_STAR_RULE))
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "host \"%s\" is refused: %s is a public suffix, where anyone may register names; a wildcard must be below a domain of its own (\"*.example.%s\")",
		    shown, norm, norm);
	AN_ASSERT(n > 0);
	return n;
}

int loader_rule_host(struct loader *ld, struct acl_rule *r)
{
	char norm[HOST_NORM_BYTES];
	char shown[SHOW_BYTES];
	enum acl_kind kind = ACL_KIND_NAME;
	const char *why = NULL;
	int n;

	AN_ASSERT(r->host == NULL);
	int rc = loader_scalar(ld, "host", "a string");
	if (rc != 0)
		return rc;
	loader_show(ev_text(ld), ev_len(ld), shown);
	r->line = loader_mark_u32(ld->ev.start_mark.line);
	r->col = loader_mark_u32(ld->ev.start_mark.column);
	if (ev_len(ld) > 0 && ev_text(ld)[0] == '*') {
		n = wildcard_host(ld, norm, shown);
		kind = ACL_KIND_WILDCARD;
	} else {
		n = host_normalise(ev_text(ld), ev_len(ld), norm, sizeof(norm), &kind, &why);
		if (n < 0)
			return loader_fail(ld, ld->ev.start_mark, "invalid host \"%s\": %s", shown,
					   why);
		/* Clients may spell 127.0.0.1 as 2130706433; a rule may not, or it misleads. */
		size_t len = ev_len(ld) - (ev_text(ld)[ev_len(ld) - 1] == '.');
		if (kind == ACL_KIND_IP && memchr(ev_text(ld), ':', ev_len(ld)) == NULL &&
		    (len != (size_t)n || memcmp(ev_text(ld), norm, len) != 0))
			return loader_fail(ld, ld->ev.start_mark,
					   "invalid host \"%s\": write the IPv4 address in dotted "
					   "decimal, as %s",
					   shown, norm);
	}
	if (n < 0)
		return n;
	r->host = pool_strndup(norm, (size_t)n);
	if (r->host == NULL)
		return loader_fail_oom(ld);
	r->host_len = (uint32_t)n;
	r->kind = (uint8_t)kind;
	AN_ASSERT(r->host_len > 0);
	return 0;
}
