/*
 * What a conn writes to the audit trail (docs/design.md section 5): its decision records,
 * one a request, and the close record that ends it, each filled from the conn as
 * it stands. A record is claimed, filled and committed at once on the worker's
 * ring (core/audit.h); a full ring counts the record as dropped, and the conn
 * goes on. A front with records of its own (the gateway: one a request, written
 * when it ends) takes both over through struct conn_front.
 */
#include "core/conn.h"
#include "core/conn_int.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/an.h"
#include "core/audit.h"
#include "core/engine.h"
#include "core/limits.h"

void addr_format(const union conn_addr *a, char *out, size_t cap)
{
	char ip[INET6_ADDRSTRLEN];

	if (a->sa.sa_family == AF_INET) {
		inet_ntop(AF_INET, &a->v4.sin_addr, ip, sizeof(ip));
		snprintf(out, cap, "%s:%u", ip, ntohs(a->v4.sin_port));
	} else if (a->sa.sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &a->v6.sin6_addr, ip, sizeof(ip));
		snprintf(out, cap, "[%s]:%u", ip, ntohs(a->v6.sin6_port));
	} else if (a->sa.sa_family == AF_UNIX) {
		/* The audit's field may cut a long path: its start is what tells. */
		int room = cap > 6 ? (int)cap - 6 : 0;
		snprintf(out, cap, "unix:%.*s", room,
			 ((const struct sockaddr_un *)(const void *)a)->sun_path);
	} else {
		out[0] = '\0';
	}
}

/*
 * The host a record names: as the decision read it (verdict_ops.normalise_host:
 * BLOCKED.TEST. is blocked.test, 2130706433 is 127.0.0.1), so an operator who
 * looks for a host finds every attempt at it, however spelled. What is sent
 * upstream and the refusal's body keep the client's spelling (c->host). A
 * gateway request's host is its public client's Host field, which no rule
 * decides: as sent. A host no rule can name is kept as spelled too.
 */
static void record_host(const struct conn *c, char *out, size_t cap)
{
	const struct verdict_ops *ops = c->w->e->ops;

	AN_ASSERT(cap > LIMITS_HOST_BYTES_MAX);
	if (!c->ingress && c->host_len > 0 && ops->normalise_host != NULL &&
	    ops->normalise_host(c->host, c->host_len, out, cap) >= 0)
		return;
	audit_copy(out, cap, c->host, c->host_len);
}

void record_common(const struct conn *c, struct audit_record *rec)
{
	rec->conn_id = c->id;
	rec->port = c->port;
	rec->tier = c->tier;
	rec->reason = c->reason;
	char id[CONFIG_SANDBOX_ID_BYTES_MAX];
	const char *sb = conn_sandbox_id(c, id);
	audit_copy(rec->sandbox, sizeof(rec->sandbox), sb, strlen(sb));
	audit_copy(rec->method, sizeof(rec->method), c->method, c->method_len);
	record_host(c, rec->host, sizeof(rec->host));
	if (c->rule != NULL)
		audit_copy(rec->rule, sizeof(rec->rule), c->rule, strlen(c->rule));
	if (c->path_len != 0 && c->head != NULL)
		audit_copy(rec->path, sizeof(rec->path), c->head + c->path_off, c->path_len);
}

/*
 * Counts for the conn's sandbox on its worker (worker_sandbox_counts, which
 * `sandbox stats` sums): <decisions> of which <refused>, and bytes delivered.
 * The slot's entry is zeroed first when it holds an older generation's counts.
 */
static void sandbox_count(struct conn *c, uint64_t decisions, uint64_t refused, uint64_t up,
			  uint64_t down)
{
	if (c->sandbox == WORKER_NO_SANDBOX)
		return;
	AN_ASSERT(c->sandbox < LIMITS_SANDBOXES_MAX);
	struct worker_sandbox_counts *s = &c->w->sandbox_counts[c->sandbox];
	uint32_t generation = c->w->e->sandboxes[c->sandbox]->generation;
	if (atomic_load_explicit(&s->generation, memory_order_relaxed) != generation) {
		atomic_store_explicit(&s->requests, 0, memory_order_relaxed);
		atomic_store_explicit(&s->refusals, 0, memory_order_relaxed);
		atomic_store_explicit(&s->bytes_up, 0, memory_order_relaxed);
		atomic_store_explicit(&s->bytes_down, 0, memory_order_relaxed);
		atomic_store_explicit(&s->generation, generation, memory_order_release);
	}
	counter_add(&s->requests, decisions);
	counter_add(&s->refusals, refused);
	counter_add(&s->bytes_up, up);
	counter_add(&s->bytes_down, down);
}

void decision_count(struct worker *w, bool allowed, enum tier tier, enum reason why)
{
	if (allowed && AN_NEVER(tier >= TIER__COUNT))
		return;
	if (!allowed && AN_NEVER(why >= REASON__COUNT))
		return;
	counter_add(allowed ? &w->decisions.allowed[tier] : &w->decisions.refused[why], 1);
}

void audit_decision(struct conn *c, bool allowed, uint16_t status)
{
	audit_decision_detail(c, allowed, status, NULL);
}

void audit_decision_detail(struct conn *c, bool allowed, uint16_t status, const char *detail)
{
	struct audit_ring *ar = c->w->audit;

	c->decision_id = audit_next_id(ar);
	c->status = status;
	sandbox_count(c, 1, allowed ? 0 : 1, 0, 0);
	decision_count(c->w, allowed, (enum tier)c->tier, (enum reason)c->reason);
	watch_decision(c, allowed);
	if (c->front != NULL && c->front->record_at_end) {
		c->reason = allowed ? (uint8_t)REASON_NONE : c->reason;
		return; /* the request's one record is written when it ends: close_record */
	}
	struct audit_record *rec = audit_claim(ar);
	if (rec == NULL)
		return; /* counted as dropped by the ring */
	rec->kind = AUDIT_DECISION;
	rec->id = c->decision_id;
	rec->allowed = allowed;
	rec->status = status;
	record_common(c, rec);
	if (c->peer_refused)
		snprintf(rec->detail, sizeof(rec->detail),
			 "peer uid %d gid %d pid %d is not the sandbox's agent (uid %u) nor root",
			 (int32_t)c->peer.uid, (int32_t)c->peer.gid, (int)c->peer.pid,
			 c->w->e->sandboxes[c->sandbox]->agent_uid);
	else if (detail != NULL)
		audit_copy(rec->detail, sizeof(rec->detail), detail, strlen(detail));
	if (allowed && c->addr_next < c->addr_count)
		addr_format(&c->addrs[c->addr_next], rec->addr, sizeof(rec->addr));
	audit_commit(ar, rec);
}

void conn_close_record(struct conn *c)
{
	struct audit_ring *ar = c->w->audit;

	sandbox_count(c, 0, 0, c->bytes_up + c->up.bytes, c->bytes_down + c->down.bytes);
	watch_upload(c, true);
	if (c->front != NULL && c->front->close_record != NULL) {
		c->front->close_record(c);
		return;
	}
	struct audit_record *rec = audit_claim(ar);
	if (rec == NULL)
		return;
	rec->kind = AUDIT_CLOSE;
	rec->id = audit_next_id(ar);
	rec->allowed = c->reason == REASON_NONE && c->requests > 0;
	rec->status = c->status;
	record_common(c, rec);
	rec->path[0] = '\0';
	rec->bytes_up = c->bytes_up + c->up.bytes;
	rec->bytes_down = c->bytes_down + c->down.bytes;
	rec->duration_ms = (uint32_t)(c->w->now_ms - c->start_ms);
	if (c->addr_next < c->addr_count && c->requests > 0 && c->reason == REASON_NONE)
		addr_format(&c->addrs[c->addr_next], rec->addr, sizeof(rec->addr));
	audit_commit(ar, rec);
}

bool audit_refuses(const struct conn *c)
{
	const struct engine *e = c->w->e;

	return e->cfg->audit_failure_refuse && audit_failing(e->audit);
}
