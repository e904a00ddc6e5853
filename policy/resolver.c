/*
 * The policy file's `resolver:` section: how the daemon resolves the hosts
 * agents name. `servers` (each "ip[:port]", tried in order) is staged into
 * the config as one comma-separated list for c-ares, like a daemon setting
 * (policy/daemon.c applies it). `hosts` pins names to addresses, answered
 * without a query (policy_verdict_ops.static_lookup); a name is normalised
 * as a rule's host is (host_normalise), so it matches what an agent asks for,
 * and an IP literal needs no entry. `allow_private` lists the private
 * networks an upstream may be in (address_permitted, addr_permitted); an
 * entry that could never match (multicast, unspecified) is refused rather
 * than silently ignored. The compiled tables live in struct policy; the
 * run-time lookups stay with the other verdict ops in policy.c.
 */
#include "policy/loader.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "core/an.h"
#include "core/pool.h"
#include "policy/acl.h"
#include "policy/addr.h"
#include "policy/strtab.h"

struct csv {
	char buf[POLICY_DNS_SERVERS_MAX * (HOSTPORT_BYTES + 1)];
	size_t len;
};

static int server_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct csv *csv = ctx;
	struct sockaddr_storage ss;
	char one[HOSTPORT_BYTES];
	uint16_t port = 0;

	AN_ASSERT(index < POLICY_DNS_SERVERS_MAX);
	int rc = loader_ip_port(ld, "DNS server", false, &ss, &port);
	if (rc != 0)
		return rc;
	loader_format_addr(&ss, port, one, sizeof(one));
	int n = snprintf(csv->buf + csv->len, sizeof(csv->buf) - csv->len, "%s%s",
			 index > 0 ? "," : "", one);
	AN_ASSERT(n > 0 && (size_t)n < sizeof(csv->buf) - csv->len);
	csv->len += (size_t)n;
	return 0;
}

static int parse_servers(struct loader *ld)
{
	struct csv csv = { .len = 0 };

	AN_ASSERT(ld->next.dns_servers == NULL);
	int rc = loader_seq(ld, "servers", POLICY_DNS_SERVERS_MAX, true, server_item, &csv);
	if (rc != 0)
		return rc;
	ld->next.dns_servers = pool_strndup(csv.buf, csv.len);
	if (ld->next.dns_servers == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(csv.len > 0);
	return 0;
}

static int host_addr_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct policy_host *h = ctx;
	char shown[SHOW_BYTES];

	AN_ASSERT(index < POLICY_STATIC_ADDRS_MAX);
	int rc = loader_scalar(ld, "an address", "a string");
	if (rc != 0)
		return rc;
	if (addr_parse_ip(ev_text(ld), ev_len(ld), &h->addrs[index]) != 0)
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "invalid address \"%s\" for %s: expected an IPv4 or IPv6 literal",
		    loader_show(ev_text(ld), ev_len(ld), shown), h->name);
	h->addr_count = index + 1;
	AN_ASSERT(h->addr_count <= POLICY_STATIC_ADDRS_MAX);
	return 0;
}

/* Pushes a zeroed static host named by the key in ld->ev; fails on a bad or repeated name. */
static int push_static_host(struct loader *ld, struct policy_host **out)
{
	struct policy *p = ld->p;
	char norm[HOST_NORM_BYTES];
	char shown[SHOW_BYTES];
	enum acl_kind kind;
	const char *why = NULL;
	uint32_t first = 0;

	AN_ASSERT(ld->ev.type == YAML_SCALAR_EVENT);
	AN_ASSERT(p->host_count == p->host_index.count);
	int n = host_normalise(ev_text(ld), ev_len(ld), norm, sizeof(norm), &kind, &why);
	if (n >= 0 && kind != ACL_KIND_NAME)
		why = "an IP literal needs no static entry";
	if (n < 0 || why != NULL)
		return loader_fail(ld, ld->key_mark, "invalid host \"%s\" in resolver.hosts: %s",
				   loader_show(ev_text(ld), ev_len(ld), shown), why);
	struct policy_host *hosts =
	    loader_grow_array(p->hosts, &p->host_cap, p->host_count, sizeof(*hosts));
	if (hosts == NULL)
		return loader_fail_oom(ld);
	p->hosts = hosts;
	struct policy_host *h = &p->hosts[p->host_count];
	h->name = pool_strndup(norm, (size_t)n);
	h->addrs = pool_calloc(POLICY_STATIC_ADDRS_MAX, sizeof(*h->addrs));
	p->host_count++;
	if (h->name == NULL || h->addrs == NULL)
		return loader_fail_oom(ld);
	h->name_len = (uint32_t)n;
	int rc = strtab_insert(&p->host_index, h->name, h->name_len, p->host_count - 1, &first);
	if (rc == -EEXIST)
		return loader_fail(ld, ld->key_mark, "duplicate host \"%s\" in resolver.hosts",
				   h->name);
	if (rc != 0)
		return loader_fail_oom(ld);
	*out = h;
	AN_ASSERT(p->host_count == p->host_index.count);
	return 0;
}

static int static_host_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct policy_host *h = NULL;

	AN_ASSERT(ctx == NULL);
	AN_ASSERT(index < POLICY_STATIC_HOSTS_MAX);
	int rc = push_static_host(ld, &h);
	if (rc != 0)
		return rc;
	rc = loader_seq(ld, h->name, POLICY_STATIC_ADDRS_MAX, true, host_addr_item, h);
	if (rc != 0)
		return rc;
	/* Shrinking cannot fail in practice; keep the larger block if it does. */
	struct sockaddr_storage *fit = pool_realloc(h->addrs, h->addr_count * sizeof(*fit));
	if (fit != NULL)
		h->addrs = fit;
	return 0;
}

static int allow_item(struct loader *ld, void *ctx, uint32_t index)
{
	struct policy *p = ld->p;
	struct addr_cidr c;
	char shown[SHOW_BYTES];
	const char *why = NULL;

	AN_ASSERT(ctx == NULL && index == p->allow_count);
	int rc = loader_scalar(ld, "a CIDR", "a string");
	if (rc != 0)
		return rc;
	loader_show(ev_text(ld), ev_len(ld), shown);
	if (addr_cidr_parse(ev_text(ld), ev_len(ld), &c, &why) != 0)
		return loader_fail(ld, ld->ev.start_mark, "invalid CIDR \"%s\": %s", shown, why);
	if (addr_cidr_never_permitted(&c))
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "allow_private entry \"%s\" can never match: multicast and unspecified addresses are never permitted",
		    shown);
	struct addr_cidr *allow =
	    loader_grow_array(p->allow, &p->allow_cap, p->allow_count, sizeof(c));
	if (allow == NULL)
		return loader_fail_oom(ld);
	p->allow = allow;
	p->allow[p->allow_count++] = c;
	AN_ASSERT(p->allow_count <= POLICY_ALLOW_PRIVATE_MAX);
	return 0;
}

enum { RK_SERVERS, RK_HOSTS, RK_ALLOW_PRIVATE, RK__COUNT };
static const char *const resolver_keys[] = {
	[RK_SERVERS] = "servers",
	[RK_HOSTS] = "hosts",
	[RK_ALLOW_PRIVATE] = "allow_private",
};
static const struct keyset resolver_keyset = { "resolver", resolver_keys, RK__COUNT };

int loader_resolver(struct loader *ld)
{
	uint32_t seen = 0;
	uint32_t key = 0;

	int rc = loader_start(ld, YAML_MAPPING_START_EVENT, "resolver");
	if (rc != 0)
		return rc;
	while ((rc = loader_key(ld, &resolver_keyset, &seen, &key)) > 0) {
		if (key == RK_SERVERS)
			rc = parse_servers(ld);
		else if (key == RK_HOSTS)
			rc = loader_map(ld, "hosts", POLICY_STATIC_HOSTS_MAX, static_host_item,
					NULL);
		else
			rc = loader_seq(ld, "allow_private", POLICY_ALLOW_PRIVATE_MAX, false,
					allow_item, NULL);
		if (rc != 0)
			return rc;
	}
	AN_ASSERT(rc <= 0);
	AN_ASSERT(ld->p->allow_count <= POLICY_ALLOW_PRIVATE_MAX);
	return rc;
}
