/*
 * Which mode serves a conn: the one place that maps a listener's kind to a
 * struct conn_front and a verdict's tier to a struct conn_mode
 * (core/conn_int.h). The spine asks here at the accept and once a request is
 * allowed, and names no tier, front or mode itself; a new tier is a mode file
 * and a case here.
 *
 *   listener            tier          request form   front, mode
 *   gateway (public)    -             -              gateway_front: forward_mode (tunnel_mode
 *                                                    after a 101); with TLS gateway_tls_front,
 *                                                    gateway_tls_mode
 *   gateway (internal)  -             -              gateway_front: forward_mode, tunnel_mode
 *   sandbox, tcp        passthrough   CONNECT        tunnel_mode
 *                       local         absolute       forward_mode
 *                       fake          CONNECT        fake_mode (terminated)
 *                       fake          absolute       none: answered in clear
 *                       inject        CONNECT        inject_mode (terminated)
 *                       inject        absolute       none: tier_unavailable
 */
#include "core/conn_int.h"

#include <stdbool.h>
#include <stddef.h>

bool conn_mode_accepted(struct conn *c, const struct worker_listener *l)
{
	if (!l->ingress && !l->internal)
		return false;
	ingress_accepted(c, l);
	return true;
}

bool conn_mode_start(struct conn *c, const struct http1_request *req, const struct verdict *v)
{
	c->upstream_local = v->tier == TIER_LOCAL ? v->upstream : NULL;
	c->tunnel_checks_name =
	    req->is_connect && v->tier == TIER_PASSTHROUGH && !v->server_name_any;
	/* A credential never goes out in clear, and a terminated tier with no CA to sign its
	 * leaf is refused before any resolution or connection. */
	enum reason why =
	    verdict_mode_refusal(v, req->is_connect, c->w->e->term != NULL && c->w->e->term_has_ca);
	if (why != REASON_NONE) {
		respond(c, why);
		return true;
	}
	c->inject = v->tier == TIER_INJECT ? v->inject : NULL;
	if (v->tier == TIER_FAKE) {
		c->fake = v->fake;
		if (req->is_connect) {
			c->mode = &fake_mode;
			term_start(c);
		} else {
			fake_plain(c, req);
		}
		return true;
	}
	c->mode = c->inject != NULL ? &inject_mode : req->is_connect ? &tunnel_mode : &forward_mode;
	return false;
}
