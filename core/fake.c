/*
 * The fake-response tier: a rule that answers for a host which is never
 * connected. Inside a CONNECT the conn terminates the agent's TLS
 * (core/tlsterm.c) and this file's pump answers every request in the session
 * from the rule, kept alive: the answer's framed head goes in c->out, its
 * body is borrowed from the snapshot the conn holds, and a request body is
 * read and discarded. An absolute-form http:// request gets the same answer
 * in clear, sent through RESPOND as a refusal is; kept alive, the conn then
 * reads the next request (the spine's fake_plain_done), else it lingers.
 *
 * The answers come from the policy (verdict_ops.fake_response); nothing here
 * allocates but the head buffer the answer is framed in.
 */
#include "core/conn_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/an.h"
#include "core/pool.h"
#include "core/verdict.h"

/*
 * Frames answer <r> in c->out: its head, then Content-Length (never on 204 or
 * 304, which have no body) and Connection. Returns the head's length.
 */
static uint32_t fake_frame(struct conn *c, const struct verdict_response *r, bool keep_alive)
{
	const char *connection = keep_alive ? "keep-alive" : "close";
	int n;

	AN_ASSERT(r->head_len <= LIMITS_RESPONSE_HEAD_BYTES_MAX);
	if (r->status == 204 || r->status == 304)
		n = snprintf(c->out, WORKER_HEAD_BUFFER_BYTES, "%.*sConnection: %s\r\n\r\n",
			     (int)r->head_len, r->head, connection);
	else
		n = snprintf(c->out, WORKER_HEAD_BUFFER_BYTES,
			     "%.*sContent-Length: %u\r\nConnection: %s\r\n\r\n", (int)r->head_len,
			     r->head, r->body_len, connection);
	AN_ASSERT(n > 0 && (size_t)n < WORKER_HEAD_BUFFER_BYTES);
	return (uint32_t)n;
}

/* Frames the rule's answer to <req> (origin form) in c->out, and audits it. */
void term_answer(struct conn *c, const struct http1_request *req)
{
	const struct engine *e = c->w->e;
	const struct verdict_response *r = e->ops->fake_response(
	    c->snap->policy, c->fake, req->method, req->method_len, req->target, req->target_len);
	bool head_only = req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0;

	AN_ASSERT(r != NULL);
	audit_decision(c, true, r->status);
	c->out_len = fake_frame(c, r, req->keep_alive);
	c->out_off = 0;
	c->answer_body = head_only ? NULL : r->body;
	c->answer_body_len = head_only ? 0 : r->body_len;
	c->term_close_after = !req->keep_alive;
}

/* The fake tier's pump: requests out of the session, answers into it. */
static void term_pump_session(struct conn *c)
{
	for (uint32_t turn = 0; c->state == ST_TERM && !c->term_closing; turn++) {
		AN_ASSERT(turn < 1000000u);
		if (term_request(c))
			continue;
		enum term_status st = c->out_len > 0 ? term_write_answer(c) : term_read_request(c);
		if (st == TERM_CLOSED || st == TERM_ERROR)
			term_end(c, st);
		else if (st != TERM_OK)
			break;
	}
	term_flush(c);
}

/*
 * An absolute-form http:// request to a fake host: the rule's answer in clear,
 * sent through RESPOND as a refusal is; then, kept alive, the conn reads the
 * next request (what arrived meanwhile was kept), else it lingers and closes.
 */
void fake_plain(struct conn *c, const struct http1_request *req)
{
	struct worker *w = c->w;
	const struct verdict_response *r = w->e->ops->fake_response(
	    c->snap->policy, c->fake, req->method, req->method_len, req->path, req->path_len);
	bool head_only = req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0;

	AN_ASSERT(r != NULL);
	if (c->out == NULL)
		c->out = pool_take(&w->heads);
	if (c->out == NULL) {
		respond(c, REASON_OVERLOADED);
		return;
	}
	audit_decision(c, true, r->status);
	c->out_len = fake_frame(c, r, req->keep_alive);
	c->answer_keeps_conn = req->keep_alive;
	c->answer_body = head_only ? NULL : r->body;
	c->answer_body_len = head_only ? 0 : r->body_len;
	c->out_ptr = c->out;
	respond_send(c);
}

/* A fake conn has no upstream: its only completions are the agent side's. */
static void fake_io(struct conn *c, int dir, uint32_t rop, int res, uint32_t cqe_flags)
{
	(void)cqe_flags;
	(void)term_io(c, dir, rop, res);
}

const struct conn_mode fake_mode = {
	.state = ST_TERM,
	.io = fake_io,
	.buffers = term_recv_arm,
	.pump = term_pump_session,
	.client_data = term_client_data,
	.client_eof = term_eof,
	.awaiting_request = term_awaiting_request,
};
