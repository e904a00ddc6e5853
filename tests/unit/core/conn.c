/*
 * Unit tests for the connection spine (core/conn.c): accept, the request
 * head's receive and parse, refusals and linger, the completion dispatcher,
 * the timer, the drain's answers, early data, and close and free.
 *
 * The .c is included, so the statics (head_keeps, refusal_keeps,
 * on_head_recv, ...) are reached directly. The seam is the ring itself: a
 * real worker ring (ring_init) that is never submitted. A spine entry point
 * prepares its SQEs in the submission queue, which is plain memory; sq_take
 * reads them back (opcode, fd, flags, user_data, the buffer a send names),
 * keeps those with a user_data as "in flight", and empties the queue. The
 * test then plays the kernel: it feeds the completions it chooses, only for
 * an SQE in flight, to conn_on_cqe / conn_on_accept, and a receive's bytes
 * come in the next buffer of the provided-buffer ring (read from the ring as
 * the kernel would). sq_take fails a test the moment a second SQE of one
 * operation kind of a conn is in flight (the spine's first invariant), and
 * ops_match checks that c->ops and c->cancels say what is in flight. The
 * worker around the ring is built by hand, with what the spine reads; the
 * engine has one sandbox, a stub policy (verdict_ops) whose next verdict the
 * test sets, and a real audit trail in a temporary directory. Time is the
 * worker's loop clock and its timer wheel, moved by hand (no sleep).
 *
 * Every test ends with no conn in use, no head buffer or provided buffer
 * out, no share counted, no timer armed and nothing in flight (teardown);
 * ASan's leak check covers the rest.
 */
#include "../../../core/conn.c"

#include <check.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "core/config.h"
#include "core/deny.h"
#include "tests/unit/unit.h"

#define CT_CONNS      4u
#define CT_BUFS       32u
#define CT_SQ_ENTRIES 256u
#define CT_T0_MS      1000000u /* a whole number of timer ticks */
#define CT_SLOT       5        /* the client's direct descriptor, as the accept gives it */
#define CT_UP_SLOT    9        /* the upstream's, as the socket op gives it */
#define CT_SQES_MAX   64u
#define CT_TEXT_BYTES (2u * LIMITS_HEAD_BYTES_MAX)

static struct engine eng;
static struct worker wk;
static struct config cfg;
static struct audit *audit;
static struct engine_sandbox sandbox;
static struct engine_sandbox *sandbox_table[1];
static struct snapshot *snap;
static _Atomic uint64_t seen[1];
static struct worker_listener lis;
static char dir[] = "/tmp/an-unit-conn-XXXXXX";
static const int policy_token = 1;
static struct verdict verdict_next; /* what the stub policy decides next */

/* ---- the stub policy ---------------------------------------------------------------- */

static void stub_decide(const void *policy, uint32_t profile, const char *host, size_t host_len,
			uint16_t port, struct verdict *out)
{
	(void)policy;
	(void)profile;
	(void)host;
	(void)host_len;
	(void)port;
	*out = verdict_next;
}

static int stub_static_lookup(const void *policy, const char *host, size_t host_len, uint16_t port,
			      struct sockaddr_storage *out, int cap)
{
	(void)policy;
	(void)host;
	(void)host_len;
	(void)port;
	(void)out;
	(void)cap;
	return 0;
}

static bool stub_permitted(const void *policy, const struct sockaddr *sa)
{
	(void)policy;
	(void)sa;
	return true;
}

static const char *stub_class(const struct sockaddr *sa)
{
	(void)sa;
	return "public";
}

static void stub_release(const void *policy)
{
	ck_assert_ptr_eq(policy, &policy_token);
}

static const struct verdict_ops stub_ops = { .decide = stub_decide,
					     .static_lookup = stub_static_lookup,
					     .address_permitted = stub_permitted,
					     .address_class = stub_class,
					     .release = stub_release };

static void verdict_deny(void)
{
	memset(&verdict_next, 0, sizeof(verdict_next));
	verdict_next.tier = TIER_DENY;
	verdict_next.reason = REASON_HOST_NOT_ALLOWED;
	verdict_next.rule = "r-deny";
	verdict_next.rule_index = VERDICT_RULE_NONE;
}

static void verdict_pass(void)
{
	memset(&verdict_next, 0, sizeof(verdict_next));
	verdict_next.tier = TIER_PASSTHROUGH;
	verdict_next.rule = "r-pass";
	verdict_next.rule_index = VERDICT_RULE_NONE;
}

/* ---- the fake kernel: the SQ read back, completions fed by hand ------------------------ */

struct ct_sqe {
	uint8_t opcode;
	uint8_t flags;
	uint16_t ioprio;
	int32_t fd;
	uint32_t len;
	uint32_t file_index;
	uint64_t addr;
	uint64_t user_data;
};

static struct ct_sqe prepared[CT_SQES_MAX]; /* what the last step put on the ring */
static uint32_t prepared_count;
static struct ct_sqe flight[CT_SQES_MAX]; /* tracked SQEs whose last completion is to come */
static uint32_t flight_count;
static uint16_t kernel_buf_head; /* the provided buffers the fake kernel has taken */

static uint32_t flight_find(uint64_t user_data)
{
	for (uint32_t i = 0; i < flight_count; i++) {
		if (flight[i].user_data == user_data)
			return i;
	}
	return flight_count;
}

static void flight_remove(uint32_t i)
{
	ck_assert_uint_lt(i, flight_count);
	flight[i] = flight[--flight_count];
}

/*
 * Moves what the spine prepared since the last call out of the submission
 * queue into prepared[] (and the tracked ones into flight[]), and empties the
 * queue: nothing is ever submitted. An operation kind of a conn already in
 * flight fails the test (one SQE per kind: c->ops).
 */
static void sq_take(void)
{
	struct io_uring_sq *sq = &wk.ring.uring.sq;

	prepared_count = 0;
	for (unsigned i = sq->sqe_head; i != sq->sqe_tail; i++) {
		const struct io_uring_sqe *s = &sq->sqes[i & sq->ring_mask];
		ck_assert_uint_lt(prepared_count, CT_SQES_MAX);
		struct ct_sqe *p = &prepared[prepared_count++];
		*p = (struct ct_sqe){ .opcode = s->opcode,
				      .flags = s->flags,
				      .ioprio = s->ioprio,
				      .fd = s->fd,
				      .len = s->len,
				      .file_index = s->file_index,
				      .addr = s->addr,
				      .user_data = s->user_data };
		if (s->user_data == 0)
			continue;
		ck_assert_msg(ud_op(s->user_data) == OP_CANCEL ||
				  flight_find(s->user_data) == flight_count,
			      "a second SQE of op %u in flight", ud_op(s->user_data));
		ck_assert_uint_lt(flight_count, CT_SQES_MAX);
		flight[flight_count++] = *p;
	}
	sq->sqe_tail = sq->sqe_head;
	wk.ring.sq_unsent = 0;
}

/* How many SQEs of <opcode> the last step prepared; the first in *<out> (may be NULL). */
static uint32_t prepared_op(uint8_t opcode, const struct ct_sqe **out)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < prepared_count; i++) {
		if (prepared[i].opcode != opcode)
			continue;
		if (n++ == 0 && out != NULL)
			*out = &prepared[i];
	}
	return n;
}

/* The closes of direct descriptor <slot> the last step prepared. */
static uint32_t prepared_closes(int slot)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < prepared_count; i++) {
		if (prepared[i].opcode == IORING_OP_CLOSE &&
		    prepared[i].file_index == (uint32_t)slot + 1u)
			n++;
	}
	return n;
}

/* c->ops and c->cancels say exactly what the fake kernel holds in flight for <c>. */
static void ops_match(struct conn *c)
{
	uint32_t ops = 0;
	uint16_t cancels = 0;

	for (uint32_t i = 0; i < flight_count; i++) {
		if (ud_object(flight[i].user_data) != c)
			continue;
		uint32_t op = ud_op(flight[i].user_data);
		if (op == OP_CANCEL)
			cancels++;
		else
			ops |= op_bit(op);
	}
	ck_assert_uint_eq(c->ops, ops);
	ck_assert_uint_eq(c->cancels, cancels);
}

/* Completion <op> of <c>: only for an SQE in flight, which a completion without F_MORE ends. */
static void complete(struct conn *c, uint32_t op, int res, uint32_t flags)
{
	uint32_t i = flight_find(ud_encode(c, op));

	ck_assert_msg(i < flight_count, "a completion of op %u, which is not in flight", op);
	if ((flags & IORING_CQE_F_MORE) == 0)
		flight_remove(i);
	conn_on_cqe(c, op, res, flags);
	sq_take();
}

/* The next provided buffer, as the kernel takes it from the buffer ring. */
static uint16_t buf_pick(void)
{
	struct io_uring_buf_ring *br = wk.ring.br;

	ck_assert_uint_ne(kernel_buf_head, br->tail); /* one is there */
	uint16_t bid = br->bufs[kernel_buf_head & (CT_BUFS - 1)].bid;
	kernel_buf_head++;
	return bid;
}

/* The flags of a receive's completion that put <len> bytes of <p> in a provided buffer. */
static uint32_t recv_flags(const void *p, uint32_t len, bool more)
{
	uint16_t bid = buf_pick();

	ck_assert_uint_le(len, wk.ring.buf_bytes);
	memcpy(ring_buf(&wk.ring, bid), p, len);
	return IORING_CQE_F_BUFFER | ((uint32_t)bid << IORING_CQE_BUFFER_SHIFT) |
	       (more ? IORING_CQE_F_MORE : 0u);
}

/* The head receive of <c> brings <len> bytes of <p>; <more>: it goes on. */
static void recv_bytes(struct conn *c, const void *p, uint32_t len, bool more)
{
	complete(c, OP_HEAD_RECV, (int)len, recv_flags(p, len, more));
}

static void recv_text(struct conn *c, const char *s)
{
	recv_bytes(c, s, (uint32_t)strlen(s), true);
}

/* A listener's accept completes with direct descriptor <slot>: the new conn (the newest live). */
static struct conn *accept_one(int slot)
{
	struct conn *before = wk.live;

	conn_on_accept(&lis, slot, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_ptr_ne(wk.live, before);
	return wk.live;
}

/* The answer the last step's one send carries, NUL-terminated (static). */
static const char *sent_text(void)
{
	static char text[CT_TEXT_BYTES + 1];
	const struct ct_sqe *s = NULL;

	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_le(s->len, CT_TEXT_BYTES);
	memcpy(text, (const void *)(uintptr_t)s->addr, s->len);
	text[s->len] = '\0';
	return text;
}

static void expect_has(const char *text, const char *want)
{
	ck_assert_msg(strstr(text, want) != NULL, "no \"%s\" in:\n%s", want, text);
}

/* <answer>'s Content-Length says exactly how many bytes follow its head. */
static void expect_length_whole(const char *answer)
{
	const char *field = strstr(answer, "Content-Length: ");
	const char *body = strstr(answer, "\r\n\r\n");

	ck_assert_ptr_nonnull(field);
	ck_assert_ptr_nonnull(body);
	ck_assert_uint_eq(strtoul(field + strlen("Content-Length: "), NULL, 10), strlen(body + 4));
}

static void expect_lacks(const char *text, const char *unwanted)
{
	ck_assert_msg(strstr(text, unwanted) == NULL, "\"%s\" in:\n%s", unwanted, text);
}

/* The loop clock is at <now_ms>: the timers that expired run, as the worker's loop runs them. */
static void advance_to(uint64_t now_ms)
{
	struct timer_entry *expired[8];
	uint32_t n;

	wk.now_ms = now_ms;
	do {
		n = timer_wheel_expire(wk.timers, now_ms, expired, AN_ARRAY_LEN(expired));
		for (uint32_t i = 0; i < n; i++)
			conn_on_timer(
			    (struct conn *)((char *)expired[i] - offsetof(struct conn, timer)));
	} while (n == AN_ARRAY_LEN(expired));
	sq_take();
}

/* The tick a timer armed now for <delay_ms> is due at (core/timer.c). */
static uint64_t due_tick(uint32_t delay_ms)
{
	return (wk.now_ms + delay_ms + LIMITS_TIMER_TICK_MS - 1) / LIMITS_TIMER_TICK_MS;
}

/* Ends every live conn as a stopping worker does, then completes all in flight. */
static void finish(void)
{
	for (struct conn *c = wk.live, *next; c != NULL; c = next) {
		next = c->live_next;
		conn_abort(c);
	}
	sq_take();
	while (flight_count > 0) {
		struct ct_sqe s = flight[0];
		flight_remove(0);
		uint32_t op = ud_op(s.user_data);
		conn_on_cqe(ud_object(s.user_data), op, op == OP_CANCEL ? 0 : -ECANCELED, 0);
		sq_take();
	}
}

/* ---- the worker and engine -------------------------------------------------------------- */

static void setup(void)
{
	char path[64];

	memset(&eng, 0, sizeof(eng));
	memset(&wk, 0, sizeof(wk));
	memset(&sandbox, 0, sizeof(sandbox));
	memset(&lis, 0, sizeof(lis));
	prepared_count = 0;
	flight_count = 0;
	kernel_buf_head = 0;
	verdict_deny();
	ck_assert_int_eq(config_init_defaults(&cfg), 0);
	snprintf(path, sizeof(path), "%s/audit.log", dir);
	ck_assert(unlink(path) == 0 ||
		  errno == ENOENT); /* a failed test's, whose teardown did not run */
	ck_assert_int_eq(audit_open(path, 2, &audit), 0);
	int rc = ring_probe(&eng.features);
	ck_assert_msg(rc == 0, "io_uring: %s", strerror(-rc));
	eng.features.setsockopt_cmd = false; /* no TCP_NODELAY nor SO_PEERCRED op unless asked */
	eng.cfg = &cfg;
	eng.ops = &stub_ops;
	eng.audit = audit;
	snprintf(sandbox.id, sizeof(sandbox.id), "sb1");
	sandbox.agent_uid = ENGINE_AGENT_ANY;
	sandbox.generation = 1;
	sandbox.state = ENGINE_SANDBOX_ACTIVE;
	sandbox.listen_fd = -1;
	sandbox_table[0] = &sandbox;
	eng.sandboxes = sandbox_table;
	eng.worker_count = 1;
	eng.workers = &wk;

	wk.e = &eng;
	rc = ring_init(&wk.ring, &eng.features, CT_SQ_ENTRIES, 2 * CT_SQ_ENTRIES, 64, CT_BUFS,
		       LIMITS_BUFRING_BUFFER_BYTES);
	ck_assert_msg(rc == 0, "ring_init: %s", strerror(-rc));
	ck_assert_int_eq(pool_init(&wk.conns, "conns", sizeof(struct conn), CT_CONNS), 0);
	ck_assert_int_eq(pool_init(&wk.heads, "heads", WORKER_HEAD_BUFFER_BYTES, CT_CONNS), 0);
	ck_assert_int_eq(share_init(&wk.share, CT_CONNS, 100), 0);
	wk.timers = pool_malloc(sizeof(*wk.timers));
	ck_assert_ptr_nonnull(wk.timers);
	wk.now_ms = CT_T0_MS;
	timer_wheel_init(wk.timers, wk.now_ms);
	wk.buckets = pool_calloc(LIMITS_SANDBOXES_MAX, sizeof(*wk.buckets));
	wk.sandbox_counts = pool_calloc(LIMITS_SANDBOXES_MAX, sizeof(*wk.sandbox_counts));
	ck_assert_ptr_nonnull(wk.buckets);
	ck_assert_ptr_nonnull(wk.sandbox_counts);
	ck_assert_int_eq(ratelimit_table_init(&wk.rule_buckets, 16), 0);
	snap = snapshot_create(&policy_token, 1, 1);
	ck_assert_ptr_nonnull(snap);
	snap->sandboxes[0].known = true;
	wk.policy = snapshot_adopt(NULL, snap, 0, &seen[0]);
	wk.audit = audit_ring_get(audit, 0);

	lis.w = &wk;
	lis.fd = -1;
	lis.sandbox = 0;
	lis.armed = true;
}

static void teardown(void)
{
	char path[64];

	ck_assert_ptr_null(wk.live);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(pool_in_use(&wk.heads), 0);
	ck_assert_uint_eq(wk.ring.bufs_out, 0);
	ck_assert_uint_eq(wk.share.total, 0);
	ck_assert_uint_eq(atomic_load(&sandbox.conns), 0);
	ck_assert_uint_eq(wk.timers->armed, 0);
	ck_assert_uint_eq(flight_count, 0);
	snapshot_leave(wk.policy, 0);
	snapshot_destroy(snap, &stub_ops);
	ratelimit_table_free(&wk.rule_buckets);
	AN_FREE(&wk.buckets);
	AN_FREE(&wk.sandbox_counts);
	AN_FREE(&wk.timers);
	share_destroy(&wk.share);
	pool_destroy(&wk.conns);
	pool_destroy(&wk.heads);
	ring_destroy(&wk.ring);
	audit_close(audit);
	audit = NULL;
	config_free(&cfg);
	snprintf(path, sizeof(path), "%s/audit.log", dir);
	ck_assert_int_eq(unlink(path), 0);
}

#define REQ_DENY    "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n"
#define REQ_ALLOWED "GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n"
#define REQ_CONNECT "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n"
#define PAD_START   "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\nX-Pad: "

/* A head of <len> bytes, padded in one field; <ended>: its last four are the blank line. */
static char *padded_head(size_t len, bool ended)
{
	char *h = pool_malloc(len + 1);

	ck_assert_ptr_nonnull(h);
	memset(h, 'a', len);
	memcpy(h, PAD_START, strlen(PAD_START));
	if (ended)
		memcpy(h + len - 4, "\r\n\r\n", 4);
	h[len] = '\0';
	return h;
}

/* ---- the request head -------------------------------------------------------------------- */

/* The accept arms one multishot receive; a head sent a byte at a time is parsed once, whole. */
START_TEST(test_head_in_pieces)
{
	const char *req = REQ_DENY;
	size_t len = strlen(req);
	const struct ct_sqe *s = NULL;

	struct conn *c = accept_one(CT_SLOT);
	ck_assert_uint_eq(c->state, ST_HEAD);
	ck_assert_uint_eq(prepared_count, 1);
	ck_assert_uint_eq(prepared_op(IORING_OP_RECV, &s), 1);
	ck_assert_int_eq(s->fd, CT_SLOT);
	ck_assert_uint_eq(s->flags, IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT);
	ck_assert(s->ioprio & IORING_RECV_MULTISHOT);
	ck_assert_uint_eq(s->user_data, ud_encode(c, OP_HEAD_RECV));
	ops_match(c);
	for (size_t i = 0; i + 1 < len; i++) {
		recv_bytes(c, req + i, 1, true);
		ck_assert_uint_eq(c->requests, 0);
		ck_assert_uint_eq(prepared_count, 0);
		ck_assert_uint_eq(wk.ring.bufs_out, 0); /* each buffer went back at once */
		ck_assert_uint_eq(c->head_fill, i + 1);
	}
	recv_bytes(c, req + len - 1, 1, true);
	ck_assert_uint_eq(c->requests, 1);
	ck_assert_uint_eq(c->head_len, len);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	expect_has(sent_text(), "HTTP/1.1 403 ");
	ops_match(c);
	finish();
}
END_TEST

/* A head of exactly LIMITS_HEAD_BYTES_MAX bytes, in two receives, is decided. */
START_TEST(test_head_at_limit)
{
	char *head = padded_head(LIMITS_HEAD_BYTES_MAX, true);

	struct conn *c = accept_one(CT_SLOT);
	recv_bytes(c, head, 16000, true);
	ck_assert_uint_eq(prepared_count, 0);
	recv_bytes(c, head + 16000, LIMITS_HEAD_BYTES_MAX - 16000, true);
	ck_assert_uint_eq(c->requests, 1);
	ck_assert_uint_eq(c->head_len, LIMITS_HEAD_BYTES_MAX);
	const char *answer = sent_text();
	expect_has(answer, "HTTP/1.1 403 ");
	expect_has(answer, "X-Agent-Reason: host_not_allowed\r\n");
	pool_free(head);
	finish();
}
END_TEST

/* One byte over: a head not ended at LIMITS_HEAD_BYTES_MAX waits; its next byte is refused 431. */
START_TEST(test_head_over_limit)
{
	char *head = padded_head(LIMITS_HEAD_BYTES_MAX + 1, false);

	struct conn *c = accept_one(CT_SLOT);
	recv_bytes(c, head, 16000, true);
	recv_bytes(c, head + 16000, LIMITS_HEAD_BYTES_MAX - 16000, true);
	ck_assert_uint_eq(c->head_fill, LIMITS_HEAD_BYTES_MAX);
	ck_assert_uint_eq(c->state, ST_HEAD); /* it might still end on the next byte: no answer */
	ck_assert_uint_eq(prepared_count, 0);
	recv_bytes(c, head + LIMITS_HEAD_BYTES_MAX, 1, true);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	ck_assert_uint_eq(c->requests, 0); /* refused in-band, never decided */
	const char *answer = sent_text();
	expect_has(answer, "HTTP/1.1 431 ");
	expect_has(answer, "X-Agent-Reason: headers_too_large\r\n");
	expect_has(answer, "Connection: close\r\n");
	ck_assert_uint_eq(c->reason, REASON_HEADERS_TOO_LARGE);
	pool_free(head);
	finish();
}
END_TEST

/* EOF before any byte: closed and freed at once, with no answer; its slot closed once. */
START_TEST(test_eof_before_head)
{
	struct conn *c = accept_one(CT_SLOT);

	complete(c, OP_HEAD_RECV, 0, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, NULL), 0);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 1);
	ck_assert_uint_eq(wk.stats.denied, 0);
}
END_TEST

/* EOF mid-head: the same, and the head buffer the partial head took goes back. */
START_TEST(test_eof_mid_head)
{
	struct conn *c = accept_one(CT_SLOT);

	recv_text(c, "GET http://a.test/ HTTP/1.1\r\nHo");
	ck_assert_uint_eq(pool_in_use(&wk.heads), 1);
	complete(c, OP_HEAD_RECV, 0, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(pool_in_use(&wk.heads), 0);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, NULL), 0);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 1);
}
END_TEST

/* ---- refusals and linger ----------------------------------------------------------------- */

/*
 * respond(): the status line, the reason, the rule, the audit id of the
 * decision record, no Retry-After for a 403, Connection: close; a short send
 * goes on from where it stopped; then LINGER: the write side shut, the client
 * drained (its bytes dropped), and its EOF closes the conn once the shutdown
 * and its cancel are done.
 */
START_TEST(test_refusal_answer)
{
	char audit_id[AUDIT_ID_BYTES];
	const struct ct_sqe *s = NULL;

	struct conn *c = accept_one(CT_SLOT);
	recv_text(c, REQ_DENY);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	ck_assert_uint_eq(wk.stats.denied, 1);
	audit_format_id(audit, c->decision_id, audit_id);
	const char *answer = sent_text();
	char want[128];
	snprintf(want, sizeof(want), "X-Agent-Audit-Id: %s\r\n", audit_id);
	ck_assert_int_eq(strncmp(answer, "HTTP/1.1 403 Forbidden\r\n", 24), 0);
	expect_has(answer, "X-Agent-Reason: host_not_allowed\r\n");
	expect_has(answer, "X-Agent-Rule: r-deny\r\n");
	expect_has(answer, want);
	expect_has(answer, "Connection: close\r\n");
	expect_lacks(answer, "Retry-After");
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_int_eq(s->fd, CT_SLOT);
	ck_assert(s->flags & IOSQE_FIXED_FILE);
	uint64_t addr = s->addr;
	uint32_t len = s->len;
	ops_match(c);
	/* A short send: the rest goes next, from where it stopped. */
	complete(c, dir_op(DIR_DOWN, ROP_SEND), 10, 0);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_eq(s->addr, addr + 10);
	ck_assert_uint_eq(s->len, len - 10);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	complete(c, dir_op(DIR_DOWN, ROP_SEND), (int)(len - 10), 0);
	ck_assert_uint_eq(c->state, ST_LINGER);
	ck_assert_uint_eq(prepared_op(IORING_OP_SHUTDOWN, &s), 1);
	ck_assert_int_eq(s->fd, CT_SLOT);
	ck_assert_uint_eq(s->len, SHUT_WR);
	ops_match(c); /* the head receive still runs: it drains the client */
	recv_text(c, "more bytes the client sent");
	ck_assert_uint_eq(prepared_count, 0);
	ck_assert_uint_eq(wk.ring.bufs_out, 0);
	complete(c, dir_op(DIR_DOWN, ROP_SHUT), 0, 0);
	ck_assert_uint_eq(c->state, ST_LINGER);
	complete(c, OP_HEAD_RECV, 0, 0); /* the client's EOF */
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 1);
}
END_TEST

/* Retry-After: the conn's own when set, else 1 for a 503 and none for any other status. */
START_TEST(test_retry_after)
{
	struct conn c = { .w = &wk };

	ck_assert_uint_eq(refusal_retry_after_s(&c, REASON_HOST_NOT_ALLOWED), 0);
	ck_assert_uint_eq(refusal_retry_after_s(&c, REASON_RATE_LIMITED), 0);
	ck_assert_uint_eq(refusal_retry_after_s(&c, REASON_OVERLOADED), 1);
	ck_assert_uint_eq(refusal_retry_after_s(&c, REASON_DAEMON_STOPPING), 1);
	c.retry_after_s = 7;
	ck_assert_uint_eq(refusal_retry_after_s(&c, REASON_HOST_NOT_ALLOWED), 7);
	ck_assert_uint_eq(refusal_retry_after_s(&c, REASON_OVERLOADED), 7);
}
END_TEST

/* Parses <head> into <req> and sets <c>'s head as head_parse would; <extra> bytes follow it. */
static void parsed(struct conn *c, const char *head, struct http1_request *req, uint32_t extra)
{
	enum reason why = REASON_NONE;
	ssize_t n = http1_parse_request(head, strlen(head), req, &why);

	ck_assert_msg(n > 0, "%s: %zd", head, n);
	c->head_len = (uint32_t)n;
	c->head_fill = (uint32_t)n + extra;
}

/*
 * refusal_keeps: a limit's 429 keeps a keep-alive request with no body; not
 * another reason, a body (Content-Length, chunked), Connection: close or
 * HTTP/1.0; a CONNECT only with nothing after its head (0 bytes, not 1, and
 * no early buffer).
 */
START_TEST(test_refusal_keeps)
{
	struct conn c = { .w = &wk };
	struct http1_request req;

	parsed(&c, REQ_ALLOWED, &req, 0);
	ck_assert(refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	ck_assert(refusal_keeps(&c, &req, REASON_CONCURRENCY_LIMITED));
	ck_assert(!refusal_keeps(&c, &req, REASON_HOST_NOT_ALLOWED));
	ck_assert(!refusal_keeps(&c, &req, REASON_DAEMON_STOPPING));
	parsed(&c, REQ_ALLOWED, &req, 5); /* a pipelined request behind it is no body */
	ck_assert(refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	parsed(&c, "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\n\r\n",
	       &req, 1);
	ck_assert(!refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	/* Content-Length: 0 frames no body: nothing to read past the head. */
	parsed(&c, "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\n",
	       &req, 0);
	ck_assert(refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	parsed(&c,
	       "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
	       &req, 0);
	ck_assert(!refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	parsed(&c, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", &req,
	       0);
	ck_assert(!refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	parsed(&c, "GET http://a.test/ HTTP/1.0\r\n\r\n", &req, 0);
	ck_assert(!refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	parsed(&c, REQ_CONNECT, &req, 0);
	ck_assert(refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	parsed(&c, REQ_CONNECT, &req, 1); /* a byte sent before the 200 */
	ck_assert(!refusal_keeps(&c, &req, REASON_RATE_LIMITED));
	parsed(&c, REQ_CONNECT, &req, 0);
	c.early_count = 1;
	ck_assert(!refusal_keeps(&c, &req, REASON_RATE_LIMITED));
}
END_TEST

/* The sandbox's bucket holds no token: its profile allows 1 a second and it was taken. */
static void bucket_empty(void)
{
	const struct verdict_limits one = { .requests_per_second = 1, .burst = 1 };
	uint32_t retry = 0;

	snap->sandboxes[0].limits = one;
	ck_assert(ratelimit_take(&wk.buckets[0], &one, sandbox.generation, wk.now_ms, &retry));
	ck_assert(!ratelimit_take(&wk.buckets[0], &one, sandbox.generation, wk.now_ms, &retry));
}

/*
 * A rate limit's 429 keeps the conn: the answer says keep-alive and when to
 * come back; a second request pipelined behind the first is answered only
 * once the first answer is out (one send at a time), from the bytes carried
 * to the front; then the conn reads its next head, under the idle timeout.
 */
START_TEST(test_rate_limited_kept)
{
	char two[256];

	verdict_pass();
	bucket_empty();
	snprintf(two, sizeof(two), "%s%s", REQ_ALLOWED, REQ_ALLOWED);
	struct conn *c = accept_one(CT_SLOT);
	recv_text(c, two);
	ck_assert_uint_eq(c->requests, 1);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	ck_assert(c->answer_keeps_conn);
	const char *answer = sent_text();
	ck_assert_int_eq(strncmp(answer, "HTTP/1.1 429 ", 13), 0);
	expect_has(answer, "X-Agent-Reason: rate_limited\r\n");
	expect_has(answer, "Connection: keep-alive\r\n");
	expect_has(answer, "Retry-After: 1\r\n");
	ck_assert_uint_eq(c->head_fill, strlen(two));
	uint32_t len = prepared[0].len;
	complete(c, dir_op(DIR_DOWN, ROP_SEND), (int)len, 0);
	ck_assert_uint_eq(c->requests, 2); /* the second, carried to the front and decided */
	ck_assert_uint_eq(c->state, ST_RESPOND);
	expect_has(sent_text(), "X-Agent-Reason: rate_limited\r\n");
	ck_assert_uint_eq(c->head_fill, strlen(REQ_ALLOWED));
	ops_match(c);
	complete(c, dir_op(DIR_DOWN, ROP_SEND), (int)prepared[0].len, 0);
	ck_assert_uint_eq(c->state, ST_HEAD);
	ck_assert_uint_eq(c->head_fill, 0);
	ck_assert_uint_eq(prepared_count, 0); /* the multishot receive still runs */
	ck_assert(timer_armed(&c->timer));
	ck_assert_uint_eq(c->timer.expires_tick, due_tick(cfg.idle_timeout_ms));
	ops_match(c);
	finish();
}
END_TEST

/*
 * A kept conn's next head has head_ms from its first byte (not from the
 * answer, and not the idle timeout): one millisecond short of it nothing
 * happens; at it, the head is answered 408 request_timeout.
 */
START_TEST(test_kept_conn_head_deadline)
{
	verdict_pass();
	bucket_empty();
	struct conn *c = accept_one(CT_SLOT);
	recv_text(c, REQ_ALLOWED);
	complete(c, dir_op(DIR_DOWN, ROP_SEND), (int)prepared[0].len, 0);
	ck_assert_uint_eq(c->state, ST_HEAD);
	uint64_t first_byte_ms = CT_T0_MS + 5000;
	advance_to(first_byte_ms);
	recv_text(c, "GET http://a.test/ HT");
	ck_assert_uint_eq(c->timer.expires_tick, due_tick(cfg.head_timeout_ms));
	advance_to(first_byte_ms + cfg.head_timeout_ms - 1);
	ck_assert_uint_eq(prepared_count, 0);
	ck_assert_uint_eq(c->state, ST_HEAD);
	advance_to(first_byte_ms + cfg.head_timeout_ms);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	const char *answer = sent_text();
	expect_has(answer, "HTTP/1.1 408 ");
	expect_has(answer, "X-Agent-Reason: request_timeout\r\n");
	finish();
}
END_TEST

/* A new conn's head deadline runs from its accept; bytes trickling in do not extend it. */
START_TEST(test_head_deadline)
{
	struct conn *c = accept_one(CT_SLOT);

	advance_to(CT_T0_MS + 1000);
	recv_text(c, "GET http://a.test/ HTTP/1.1\r\n");
	advance_to(CT_T0_MS + cfg.head_timeout_ms - 500);
	recv_text(c, "Host: a.te");
	advance_to(CT_T0_MS + cfg.head_timeout_ms - 1);
	ck_assert_uint_eq(prepared_count, 0);
	ck_assert_uint_eq(c->state, ST_HEAD);
	advance_to(CT_T0_MS + cfg.head_timeout_ms);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	const char *answer = sent_text();
	expect_has(answer, "HTTP/1.1 408 ");
	expect_has(answer, "X-Agent-Reason: request_timeout\r\n");
	expect_has(answer, "Connection: close\r\n");
	ck_assert_uint_eq(c->reason, REASON_REQUEST_TIMEOUT);
	finish();
}
END_TEST

/*
 * A client that never sent a byte by head_ms is closed without an answer:
 * the head receive cancelled, and the conn freed only once the receive's
 * last completion and the cancel's are in.
 */
START_TEST(test_silent_client_closed)
{
	const struct ct_sqe *s = NULL;

	struct conn *c = accept_one(CT_SLOT);
	advance_to(CT_T0_MS + cfg.head_timeout_ms);
	ck_assert_uint_eq(c->state, ST_CLOSING);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, NULL), 0);
	ck_assert_uint_eq(prepared_op(IORING_OP_ASYNC_CANCEL, &s), 1);
	ck_assert_uint_eq(s->addr, ud_encode(c, OP_HEAD_RECV));
	ck_assert_uint_eq(s->user_data, ud_encode(c, OP_CANCEL));
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 0); /* the slot is the conn's until freed */
	ops_match(c);
	complete(c, OP_HEAD_RECV, -ECANCELED, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 1);
	complete(c, OP_CANCEL, 0, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 1);
}
END_TEST

/* ---- one SQE per operation kind; freeing ---------------------------------------------- */

/*
 * c->ops across a sequence of completions: a multishot receive keeps its bit
 * while F_MORE says it goes on; one out of buffers waits for them and is
 * re-armed once (a second wake-up arms nothing); a receive that ends while an
 * answer goes out is re-armed once; the answer's send and then the shutdown
 * hold their own bits. sq_take fails on any second SQE of a kind in flight.
 */
START_TEST(test_ops_one_per_kind)
{
	struct conn *c = accept_one(CT_SLOT);

	ck_assert_uint_eq(c->ops, op_bit(OP_HEAD_RECV));
	recv_text(c, "GET http://blocked.test/ HTTP/1.1\r\n");
	ck_assert_uint_eq(c->ops, op_bit(OP_HEAD_RECV));
	ops_match(c);
	complete(c, OP_HEAD_RECV, -ENOBUFS, 0);
	ck_assert_uint_eq(c->ops, 0);
	ck_assert_uint_eq(prepared_count, 0);
	ck_assert_ptr_eq(wk.nobufs, c);
	ck_assert(c->flags & F_NOBUFS);
	wk.nobufs = NULL; /* as run_nobufs takes the list */
	conn_on_buffers(c);
	sq_take();
	ck_assert_uint_eq(prepared_op(IORING_OP_RECV, NULL), 1);
	conn_on_buffers(c);
	sq_take();
	ck_assert_uint_eq(prepared_count, 0);
	ops_match(c);
	recv_text(c, "Host: blocked.test\r\n\r\n");
	ck_assert_uint_eq(c->ops, op_bit(OP_HEAD_RECV) | op_bit(dir_op(DIR_DOWN, ROP_SEND)));
	ops_match(c);
	uint32_t len = prepared[0].len;
	recv_bytes(c, "x", 1, true); /* dropped: the answer closes */
	ck_assert_uint_eq(prepared_count, 0);
	recv_bytes(c, "y", 1, false); /* the receive ends: re-armed, once */
	ck_assert_uint_eq(prepared_op(IORING_OP_RECV, NULL), 1);
	ops_match(c);
	complete(c, dir_op(DIR_DOWN, ROP_SEND), (int)len, 0);
	ck_assert_uint_eq(c->ops, op_bit(OP_HEAD_RECV) | op_bit(dir_op(DIR_DOWN, ROP_SHUT)));
	ops_match(c);
	finish();
}
END_TEST

/*
 * A conn aborted with a receive and a send in flight is not freed while any
 * of them or their cancels is: each completion in turn, the conn still
 * there; the last (a cancel) frees it, its head buffer back, its slot closed
 * once.
 */
START_TEST(test_freed_after_last_completion)
{
	struct conn *c = accept_one(CT_SLOT);

	recv_text(c, REQ_DENY);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	conn_abort(c);
	sq_take();
	ck_assert_uint_eq(c->state, ST_CLOSING);
	ck_assert_uint_eq(prepared_op(IORING_OP_ASYNC_CANCEL, NULL), 2);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 0);
	ops_match(c);
	complete(c, dir_op(DIR_DOWN, ROP_SEND), -ECANCELED, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 1);
	complete(c, OP_CANCEL, 0, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 1);
	recv_text(c, "late bytes"); /* posted before the cancel landed: dropped */
	ck_assert_uint_eq(pool_in_use(&wk.conns), 1);
	ck_assert_uint_eq(wk.ring.bufs_out, 0);
	complete(c, OP_HEAD_RECV, -ECANCELED, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 1);
	ck_assert_uint_eq(pool_in_use(&wk.heads), 2); /* the head, and the answer's buffer */
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 0);
	complete(c, OP_CANCEL, -ENOENT, 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(pool_in_use(&wk.heads), 0);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 1);
}
END_TEST

/*
 * An allowed CONNECT to an address: the socket op, then the connect linked
 * to its timeout, each its own kind. Aborted there, the slots stay the conn's
 * until its last completion; then both close, once each.
 */
START_TEST(test_connect_aborted)
{
	const struct ct_sqe *s = NULL;

	verdict_pass();
	struct conn *c = accept_one(CT_SLOT);
	recv_text(c, REQ_CONNECT);
	ck_assert_uint_eq(c->state, ST_CONNECT);
	ck_assert_uint_eq(prepared_op(IORING_OP_SOCKET, NULL), 1);
	ops_match(c);
	complete(c, OP_SOCKET, CT_UP_SLOT, 0);
	ck_assert_int_eq(c->ufd, CT_UP_SLOT);
	ck_assert_uint_eq(prepared_op(IORING_OP_CONNECT, &s), 1);
	ck_assert_int_eq(s->fd, CT_UP_SLOT);
	ck_assert_uint_eq(s->flags, IOSQE_FIXED_FILE | IOSQE_IO_LINK);
	ck_assert_uint_eq(prepared_op(IORING_OP_LINK_TIMEOUT, NULL), 1);
	ck_assert_uint_eq(c->ops,
			  op_bit(OP_HEAD_RECV) | op_bit(OP_CONNECT) | op_bit(OP_CONNECT_TIMEOUT));
	ops_match(c);
	conn_abort(c);
	sq_take();
	ck_assert_uint_eq(prepared_op(IORING_OP_ASYNC_CANCEL, NULL), 3);
	ck_assert_uint_eq(prepared_op(IORING_OP_CLOSE, NULL), 0);
	ck_assert_uint_eq(pool_in_use(&wk.conns), 1);
	uint32_t closes_up = 0;
	uint32_t closes_client = 0;
	while (flight_count > 0) {
		struct ct_sqe f = flight[0];
		uint32_t op = ud_op(f.user_data);
		ck_assert_uint_eq(pool_in_use(&wk.conns), 1);
		complete(c, op, op == OP_CANCEL ? 0 : -ECANCELED, 0);
		closes_up += prepared_closes(CT_UP_SLOT);
		closes_client += prepared_closes(CT_SLOT);
	}
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(closes_up, 1);
	ck_assert_uint_eq(closes_client, 1);
}
END_TEST

/*
 * Completes, as the kernel would, the resolver's polls in flight (ops of the
 * worker's dns, not of a conn) with <res>; drops their removes.
 */
static void dns_polls_complete(int res)
{
	for (uint32_t i = 0; i < flight_count;) {
		if (ud_op(flight[i].user_data) != DNS_OP_POLL) {
			i++;
			continue;
		}
		struct dns_poll *slot = ud_object(flight[i].user_data);
		flight_remove(i);
		dns_on_cqe(&wk.dns, slot, res);
		sq_take();
	}
}

/*
 * A name with no static entry and a resolver that never answers: the
 * lookup's deadline is daemon.timeouts.dns_ms from the decision, exactly:
 * nothing one tick before it, 502 dns_failed at it (was dns_ms plus one
 * second; case 046 checks the answer end to end, with a window a shared
 * machine cannot fail, so the deadline itself is held here). The conn, its
 * answer sent, is kept while c-ares holds it (F_DNS) and freed once the
 * lookup ends.
 */
START_TEST(test_dns_deadline)
{
	cfg.dns_timeout_ms = 2000;
	dns_init(&wk.dns, &wk.ring, "127.0.0.1:9", cfg.dns_timeout_ms); /* discard: no answer */
	verdict_pass();
	struct conn *c = accept_one(CT_SLOT);
	uint64_t decided_ms = wk.now_ms;
	recv_text(c, "CONNECT nx.test:443 HTTP/1.1\r\nHost: nx.test:443\r\n\r\n");
	ck_assert_uint_eq(c->state, ST_RESOLVE);
	ck_assert(c->flags & F_DNS);
	ck_assert(timer_armed(&c->timer));
	ck_assert_uint_eq(c->timer.expires_tick, due_tick(cfg.dns_timeout_ms));
	advance_to(decided_ms + cfg.dns_timeout_ms - LIMITS_TIMER_TICK_MS);
	ck_assert_uint_eq(c->state, ST_RESOLVE);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, NULL), 0);
	advance_to(decided_ms + cfg.dns_timeout_ms);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	const char *answer = sent_text();
	ck_assert_int_eq(strncmp(answer, "HTTP/1.1 502 ", 13), 0);
	expect_has(answer, "X-Agent-Reason: dns_failed\r\n");
	conn_abort(c);
	sq_take();
	ck_assert_uint_eq(pool_in_use(&wk.conns), 1); /* the lookup holds it */
	dns_shutdown(&wk.dns);                        /* the lookup ends: -ECANCELED */
	sq_take();
	dns_polls_complete(-ECANCELED);
	ck_assert_uint_eq(wk.dns.polls_pending, 0);
	finish();
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
}
END_TEST

/* ---- early data ------------------------------------------------------------------------- */

/* A provided buffer as a receive hands it over: <len> bytes of <fill>. */
static uint16_t taken_buf(char fill, uint32_t len)
{
	uint16_t bid = buf_pick();

	memset(ring_buf(&wk.ring, bid), fill, len);
	ring_buf_taken(&wk.ring, bid);
	return bid;
}

/*
 * early_push / early_front / early_advance: FIFO order; bytes that fit the
 * room left in the last buffer (exactly, N) join it and their buffer goes
 * back at once; one byte more (N+1) chains a buffer of its own; a buffer read
 * whole goes back.
 */
START_TEST(test_early_fifo)
{
	uint16_t bid;
	uint32_t off;
	const uint32_t size = LIMITS_BUFRING_BUFFER_BYTES;

	struct conn *c = accept_one(CT_SLOT);
	uint16_t a = taken_buf('a', 16000);
	early_push(c, a, 16000);
	early_push(c, taken_buf('b', size - 16000), size - 16000); /* exactly the room */
	ck_assert_uint_eq(c->early_count, 1);
	ck_assert_uint_eq(wk.ring.bufs_out, 1);
	uint16_t d = taken_buf('d', 1);
	early_push(c, d, 1); /* no room left */
	ck_assert_uint_eq(c->early_count, 2);
	ck_assert_uint_eq(wk.ring.bufs_out, 2);
	ck_assert_uint_eq(early_front(c, &bid, &off), size);
	ck_assert_uint_eq(bid, a);
	ck_assert_uint_eq(off, 0);
	const char *p = (const char *)ring_buf(&wk.ring, a);
	ck_assert_int_eq(p[15999], 'a');
	ck_assert_int_eq(p[16000], 'b');
	ck_assert_int_eq(p[size - 1], 'b');
	early_advance(c, 100);
	ck_assert_uint_eq(early_front(c, &bid, &off), size - 100);
	ck_assert_uint_eq(off, 100);
	early_advance(c, size - 100);
	ck_assert_uint_eq(wk.ring.bufs_out, 1);
	ck_assert_uint_eq(early_front(c, &bid, &off), 1);
	ck_assert_uint_eq(bid, d);
	early_advance(c, 1);
	ck_assert_uint_eq(c->early_count, 0);
	ck_assert_uint_eq(wk.ring.bufs_out, 0);
	/* One byte over the room: a buffer of its own. */
	a = taken_buf('a', 16000);
	early_push(c, a, 16000);
	uint16_t e = taken_buf('e', size - 16000 + 1);
	early_push(c, e, size - 16000 + 1);
	ck_assert_uint_eq(c->early_count, 2);
	ck_assert_uint_eq(wk.ring.bufs_out, 2);
	ck_assert_uint_eq(early_front(c, &bid, &off), 16000);
	early_advance(c, 16000);
	ck_assert_uint_eq(early_front(c, &bid, &off), size - 16000 + 1);
	ck_assert_uint_eq(bid, e);
	finish(); /* what is left goes back with the conn */
}
END_TEST

/*
 * While the conn connects, what the client sends is queued as early data;
 * at the CONN_EARLY_STOP_AT-th buffer (not one before) the head receive is
 * cancelled, once; what it had posted already is still kept, in order; its
 * end is not re-armed.
 */
START_TEST(test_early_stop_at)
{
	static char piece[LIMITS_BUFRING_BUFFER_BYTES];
	const struct ct_sqe *s = NULL;
	uint16_t bid;
	uint32_t off;

	verdict_pass();
	struct conn *c = accept_one(CT_SLOT);
	recv_text(c, REQ_CONNECT);
	ck_assert_uint_eq(c->state, ST_CONNECT);
	for (uint32_t i = 1; i < CONN_EARLY_STOP_AT; i++) {
		memset(piece, 'A' + (int)i, sizeof(piece));
		recv_bytes(c, piece, sizeof(piece), true);
		ck_assert_uint_eq(c->early_count, i);
		ck_assert_uint_eq(prepared_count, 0);
		ck_assert(!(c->flags & F_HEAD_STOP));
	}
	memset(piece, 'A' + (int)CONN_EARLY_STOP_AT, sizeof(piece));
	recv_bytes(c, piece, sizeof(piece), true);
	ck_assert_uint_eq(c->early_count, CONN_EARLY_STOP_AT);
	ck_assert(c->flags & F_HEAD_STOP);
	ck_assert_uint_eq(prepared_op(IORING_OP_ASYNC_CANCEL, &s), 1);
	ck_assert_uint_eq(s->addr, ud_encode(c, OP_HEAD_RECV));
	recv_bytes(c, piece, sizeof(piece), true); /* posted before the cancel landed */
	ck_assert_uint_eq(c->early_count, CONN_EARLY_STOP_AT + 1);
	ck_assert_uint_eq(prepared_count, 0);
	ck_assert_uint_eq(wk.ring.bufs_out, CONN_EARLY_STOP_AT + 1);
	complete(c, OP_HEAD_RECV, -ECANCELED, 0);
	ck_assert_uint_eq(prepared_count, 0); /* stopped for good: not re-armed */
	complete(c, OP_CANCEL, 0, 0);
	ck_assert_uint_eq(early_front(c, &bid, &off), sizeof(piece));
	ck_assert_int_eq(((const char *)ring_buf(&wk.ring, bid))[0], 'A' + 1);
	ops_match(c);
	finish();
}
END_TEST

/*
 * head_carry: what followed the answered head (its buffer's tail, then the
 * early queue, in order) moves to the front of the head buffer, up to
 * LIMITS_HEAD_BYTES_MAX + 1 bytes, the rest staying queued; exactly
 * LIMITS_HEAD_BYTES_MAX bytes all move.
 */
START_TEST(test_head_carry)
{
	const char *next = "NEXT12345\n";
	const uint32_t size = LIMITS_BUFRING_BUFFER_BYTES;
	uint16_t bid;
	uint32_t off;

	struct conn *c = accept_one(CT_SLOT);
	c->head = pool_take(&wk.heads);
	ck_assert_ptr_nonnull(c->head);
	uint32_t head_len = (uint32_t)strlen(REQ_ALLOWED);
	memcpy(c->head, REQ_ALLOWED, head_len);
	memcpy(c->head + head_len, next, 10);
	c->head_len = head_len;
	c->head_fill = head_len + 10;
	early_push(c, taken_buf('x', size), size);
	early_push(c, taken_buf('y', size), size);
	ck_assert_uint_eq(head_carry(c), LIMITS_HEAD_BYTES_MAX + 1);
	ck_assert_uint_eq(c->head_len, 0);
	ck_assert_int_eq(memcmp(c->head, next, 10), 0);
	ck_assert_int_eq(c->head[10], 'x');
	ck_assert_int_eq(c->head[LIMITS_HEAD_BYTES_MAX], 'x');
	ck_assert_uint_eq(c->early_count, 2);
	ck_assert_uint_eq(early_front(c, &bid, &off), size - (LIMITS_HEAD_BYTES_MAX + 1 - 10));
	ck_assert_uint_eq(off, LIMITS_HEAD_BYTES_MAX + 1 - 10);
	early_advance(c, size - off);
	early_advance(c, size);
	ck_assert_uint_eq(wk.ring.bufs_out, 0);
	/* Exactly the limit: all of it moves, nothing stays queued. */
	memcpy(c->head, REQ_ALLOWED, head_len);
	memcpy(c->head + head_len, next, 10);
	c->head_len = head_len;
	c->head_fill = head_len + 10;
	early_push(c, taken_buf('z', LIMITS_HEAD_BYTES_MAX - 10), LIMITS_HEAD_BYTES_MAX - 10);
	ck_assert_uint_eq(head_carry(c), LIMITS_HEAD_BYTES_MAX);
	ck_assert_uint_eq(c->early_count, 0);
	ck_assert_uint_eq(wk.ring.bufs_out, 0);
	ck_assert_int_eq(memcmp(c->head, next, 10), 0);
	ck_assert_int_eq(c->head[LIMITS_HEAD_BYTES_MAX - 1], 'z');
	finish();
}
END_TEST

/* ---- the sandbox turn: a completion deferred (core/sched.h) ---------------------------- */

/*
 * conn_cqe_defer: a head receive's bytes go into the head buffer at once and
 * its buffer back, the flags saying CONN_CQE_F_TAKEN (and F_MORE as they
 * were); nothing is parsed until the completion's turn, which parses the
 * whole head once. Another op's completion waits as it is; so does a head
 * receive's while the conn connects (its bytes are early data, handled then).
 */
START_TEST(test_cqe_defer)
{
	const char *req = REQ_DENY;
	uint32_t cut = 20;

	struct conn *c = accept_one(CT_SLOT);
	uint32_t f1 = recv_flags(req, cut, true);
	conn_cqe_defer(c, OP_HEAD_RECV, (int)cut, &f1);
	ck_assert_uint_eq(f1, IORING_CQE_F_MORE | CONN_CQE_F_TAKEN);
	ck_assert_uint_eq(wk.ring.bufs_out, 0);
	ck_assert_uint_eq(c->head_fill, cut);
	uint32_t rest = (uint32_t)strlen(req) - cut;
	uint32_t f2 = recv_flags(req + cut, rest, false);
	conn_cqe_defer(c, OP_HEAD_RECV, (int)rest, &f2);
	ck_assert_uint_eq(f2, CONN_CQE_F_TAKEN);
	ck_assert_uint_eq(c->head_fill, strlen(req));
	sq_take();
	ck_assert_uint_eq(prepared_count, 0);
	ck_assert_uint_eq(c->requests, 0); /* parsed in its turn only */
	complete(c, OP_HEAD_RECV, (int)cut, f1);
	ck_assert_uint_eq(c->requests, 1);
	ck_assert_uint_eq(c->state, ST_RESPOND);
	expect_has(sent_text(), "HTTP/1.1 403 ");
	complete(c, OP_HEAD_RECV, (int)rest, f2); /* its last: re-armed, not parsed again */
	ck_assert_uint_eq(c->requests, 1);
	ck_assert_uint_eq(prepared_op(IORING_OP_RECV, NULL), 1);
	uint32_t f3 = 0;
	conn_cqe_defer(c, dir_op(DIR_DOWN, ROP_SEND), 5, &f3);
	ck_assert_uint_eq(f3, 0);
	ops_match(c);
	finish();

	verdict_pass();
	c = accept_one(CT_SLOT);
	recv_text(c, REQ_CONNECT);
	ck_assert_uint_eq(c->state, ST_CONNECT);
	uint32_t fill = c->head_fill;
	uint32_t f4 = recv_flags("early", 5, true);
	uint32_t kept = f4;
	conn_cqe_defer(c, OP_HEAD_RECV, 5, &f4);
	ck_assert_uint_eq(f4, kept);
	ck_assert_uint_eq(wk.ring.bufs_out, 0); /* waits with its buffer, not yet taken */
	ck_assert_uint_eq(c->head_fill, fill);
	complete(c, OP_HEAD_RECV, 5, f4);
	ck_assert_uint_eq(c->early_count, 1);
	ck_assert_uint_eq(wk.ring.bufs_out, 1); /* now held as early data */
	finish();
}
END_TEST

/* ---- the drain ---------------------------------------------------------------------------- */

/*
 * drain_answer: none without a drain; a sandbox's conn is served and closed
 * when its socket is handed on, refused when not; a TCP client's follows
 * every listener's hand-over. A refused request is answered 503
 * daemon_stopping with Retry-After LIMITS_DRAIN_RETRY_AFTER_S; a served one
 * is decided as a copy that does not keep the connection.
 */
START_TEST(test_drain)
{
	struct conn c = { .w = &wk };
	struct http1_request req;
	struct http1_request closing;

	ck_assert_int_eq(drain_answer(&c), DRAIN_NONE);
	wk.draining = true;
	ck_assert_int_eq(drain_answer(&c), DRAIN_REFUSE);
	eng.drain.sandboxes_handed_on = true;
	ck_assert_int_eq(drain_answer(&c), DRAIN_CLOSE);
	c.flags = F_TCP_CLIENT;
	ck_assert_int_eq(drain_answer(&c), DRAIN_REFUSE);
	eng.drain.all_handed_on = true;
	ck_assert_int_eq(drain_answer(&c), DRAIN_CLOSE);
	c.flags = 0;
	parsed(&c, REQ_ALLOWED, &req, 0);
	ck_assert(req.keep_alive);
	const struct http1_request *r = drain_request(&c, &req, &closing);
	ck_assert_ptr_eq(r, &closing);
	ck_assert(!closing.keep_alive);
	ck_assert(req.keep_alive);

	eng.drain.sandboxes_handed_on = false;
	verdict_pass();
	struct conn *d = accept_one(CT_SLOT);
	recv_text(d, REQ_ALLOWED);
	ck_assert_uint_eq(d->reason, REASON_DAEMON_STOPPING);
	const char *answer = sent_text();
	expect_has(answer, "HTTP/1.1 503 ");
	expect_has(answer, "X-Agent-Reason: daemon_stopping\r\n");
	char want[32];
	snprintf(want, sizeof(want), "Retry-After: %u\r\n", LIMITS_DRAIN_RETRY_AFTER_S);
	expect_has(answer, want);
	expect_has(answer, "Connection: close\r\n");
	finish();
}
END_TEST

/* ---- accept --------------------------------------------------------------------------- */

/*
 * The conn pool's N conns are accepted; the N+1th is answered 503 overloaded
 * from static memory, its slot closed by a close hard-linked to the send
 * (so a failed send still closes it), neither tracked, no conn taken.
 */
START_TEST(test_accept_overloaded)
{
	const struct ct_sqe *s = NULL;

	for (int i = 0; i < (int)CT_CONNS; i++)
		accept_one(CT_SLOT + i);
	ck_assert_uint_eq(wk.stats.accepted, CT_CONNS);
	ck_assert_uint_eq(atomic_load(&sandbox.conns), CT_CONNS);
	conn_on_accept(&lis, CT_SLOT + (int)CT_CONNS, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_uint_eq(wk.stats.refused_overload, 1);
	ck_assert_uint_eq(pool_in_use(&wk.conns), CT_CONNS);
	ck_assert_uint_eq(prepared_count, 2);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_int_eq(s->fd, CT_SLOT + (int)CT_CONNS);
	ck_assert_uint_eq(s->flags, IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS);
	ck_assert_uint_eq(s->user_data, 0);
	const char *answer = sent_text();
	expect_has(answer, "HTTP/1.1 503 ");
	expect_has(answer, "X-Agent-Reason: overloaded\r\n");
	expect_has(answer, reason_instruction(REASON_OVERLOADED));
	expect_has(answer, "Retry-After: 1\r\n");
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_OVERLOADED]), 1);
	expect_length_whole(answer);
	ck_assert_uint_eq(prepared_closes(CT_SLOT + (int)CT_CONNS), 1);
	ck_assert_uint_eq(prepared[0].opcode, IORING_OP_SEND);
	ck_assert_uint_eq(prepared[1].opcode, IORING_OP_CLOSE); /* after the send it is linked to */
	ck_assert_uint_eq(prepared[1].user_data, 0);
	finish();
}
END_TEST

/*
 * An accept that completed as the worker began to stop (its accepts cancelled
 * after it landed): no conn, a static 503 daemon_stopping with the drain's
 * Retry-After, its body as long as it says, the send hard-linked to the
 * slot's close; not counted as an overload, so a restart raises no overload
 * alarm.
 */
START_TEST(test_accept_stopping)
{
	const struct ct_sqe *s = NULL;

	wk.stopping = true;
	conn_on_accept(&lis, CT_SLOT, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_uint_eq(pool_in_use(&wk.conns), 0);
	ck_assert_uint_eq(wk.stats.accepted, 0);
	ck_assert_uint_eq(wk.stats.refused_overload, 0);
	ck_assert_uint_eq(prepared_count, 2);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_int_eq(s->fd, CT_SLOT);
	ck_assert_uint_eq(s->flags, IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS);
	const char *answer = sent_text();
	ck_assert_int_eq(strncmp(answer, "HTTP/1.1 503 ", 13), 0);
	expect_has(answer, "X-Agent-Reason: daemon_stopping\r\n");
	expect_has(answer, reason_instruction(REASON_DAEMON_STOPPING));
	expect_has(answer, "Retry-After: 2\r\n");
	expect_has(answer, "Connection: close\r\n");
	expect_has(answer, "\"reason\":\"daemon_stopping\"");
	expect_length_whole(answer);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 1);
	ck_assert_uint_eq(prepared[1].opcode, IORING_OP_CLOSE);
	/* Its decision record's reason (audit_accept_refusal counts it as it writes it). */
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_DAEMON_STOPPING]), 1);
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_OVERLOADED]), 0);
	ck_assert_uint_eq(wk.stats.refused_share, 0);
	wk.stopping = false;
	finish();
}
END_TEST

/*
 * A sandbox at its share of the worker (sandbox_share_percent 50 of 4 conns:
 * 2) has its next connection answered at accept with the worker's formatted
 * 429 connection_share_exceeded (Retry-After: 1), from no pool, the send
 * hard-linked to the close, audited and counted as a share refusal, not an
 * overload; on the gateway's TLS listener the same refusal is the TLS alert.
 * A conn freed makes room again.
 */
START_TEST(test_accept_over_share)
{
	const struct deny_info share_deny = { .reason = REASON_CONNECTION_SHARE_EXCEEDED,
					      .retry_after_s = 1 };
	const struct ct_sqe *s = NULL;
	struct worker_listener public_tls = {
		.w = &wk, .fd = -1, .sandbox = WORKER_NO_SANDBOX, .ingress = true, .armed = true
	};

	share_destroy(&wk.share);
	ck_assert_int_eq(share_init(&wk.share, CT_CONNS, 50), 0);
	ssize_t n = deny_format(&share_deny, wk.share_reply, sizeof(wk.share_reply));
	ck_assert_int_gt(n, 0);
	wk.share_reply_len = (uint32_t)n;
	accept_one(CT_SLOT);
	accept_one(CT_SLOT + 1);
	conn_on_accept(&lis, CT_SLOT + 2, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_uint_eq(pool_in_use(&wk.conns), 2);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_eq(s->flags, IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS);
	const char *answer = sent_text();
	expect_has(answer, "HTTP/1.1 429 ");
	expect_has(answer, "X-Agent-Reason: connection_share_exceeded\r\n");
	expect_has(answer, "Retry-After: 1\r\n");
	expect_length_whole(answer);
	ck_assert_uint_eq(prepared_closes(CT_SLOT + 2), 1);
	ck_assert_uint_eq(wk.stats.refused_share, 1);
	ck_assert_uint_eq(wk.stats.refused_overload, 0);
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_CONNECTION_SHARE_EXCEEDED]), 1);

	/* The public key's share on the TLS listener: 2 held by the sandbox leave it room for 1. */
	eng.ingress_tls = true;
	wk.share.held[SHARE_KEY_PUBLIC] = 1; /* as if one gateway conn were held */
	wk.share.total++;
	conn_on_accept(&public_tls, CT_SLOT + 3, IORING_CQE_F_MORE);
	sq_take();
	wk.share.held[SHARE_KEY_PUBLIC] = 0;
	wk.share.total--;
	eng.ingress_tls = false;
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_eq(s->len, 7);
	ck_assert_uint_eq(((const unsigned char *)(uintptr_t)s->addr)[0], 0x15);
	ck_assert_uint_eq(wk.stats.refused_share, 2);

	/* Once its conns are freed, the share counts them no more: admitted again. */
	finish();
	ck_assert_uint_eq(wk.share.held[0], 0);
	accept_one(CT_SLOT + 4);
	accept_one(CT_SLOT + 5);
	ck_assert_uint_eq(wk.share.held[0], 2);
	finish();
}
END_TEST

/*
 * The gateway's public listener with TLS on: a client refused at accept (the
 * worker stopping, the pool full) is sent a fatal internal_error TLS alert,
 * the 7 bytes of one plaintext alert record, never plaintext HTTP into its
 * handshake; its decision is audited with the reason as on any listener.
 * The internal listener behind it, and the public one without TLS, still
 * answer in HTTP (the relay carries the internal one's answer through TLS).
 */
START_TEST(test_accept_tls_listener)
{
	static const unsigned char alert[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50 };
	const struct ct_sqe *s = NULL;
	struct worker_listener public_tls = {
		.w = &wk, .fd = -1, .sandbox = WORKER_NO_SANDBOX, .ingress = true, .armed = true
	};
	struct worker_listener internal = public_tls;

	internal.internal = true;
	eng.ingress_tls = true;
	wk.stopping = true;
	conn_on_accept(&public_tls, CT_SLOT, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_eq(s->len, sizeof(alert));
	ck_assert_int_eq(memcmp((const void *)(uintptr_t)s->addr, alert, sizeof(alert)), 0);
	ck_assert_uint_eq(s->flags, IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS);
	ck_assert_uint_eq(prepared_closes(CT_SLOT), 1);
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_DAEMON_STOPPING]), 1);

	conn_on_accept(&internal, CT_SLOT + 1, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_int_eq(strncmp(sent_text(), "HTTP/1.1 503 ", 13), 0);
	eng.ingress_tls = false;
	conn_on_accept(&public_tls, CT_SLOT + 2, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_int_eq(strncmp(sent_text(), "HTTP/1.1 503 ", 13), 0);
	wk.stopping = false;

	/* The pool full: the same alert, counted as the overload it is. */
	eng.ingress_tls = true;
	for (int i = 0; i < (int)CT_CONNS; i++)
		accept_one(CT_SLOT + 3 + i);
	conn_on_accept(&public_tls, CT_SLOT + 3 + (int)CT_CONNS, IORING_CQE_F_MORE);
	sq_take();
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_eq(s->len, sizeof(alert));
	ck_assert_int_eq(memcmp((const void *)(uintptr_t)s->addr, alert, sizeof(alert)), 0);
	ck_assert_uint_eq(wk.stats.refused_overload, 1);
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_OVERLOADED]), 1);
	eng.ingress_tls = false;
	finish();
}
END_TEST

/* A TLS session stub for the gateway's TLS front: made, freed, never driven. */
static int stub_session;
static void *stub_public_new(void *worker_term)
{
	(void)worker_term;
	return &stub_session;
}
static void stub_session_free(void *session)
{
	(void)session;
}
static const struct term_ops stub_term = { .public_new = stub_public_new,
					   .session_free = stub_session_free };

/*
 * A conn of the gateway's TLS front refused before its session runs (no
 * socket for the internal connection, ENFILE; the internal socket refusing
 * the connect) is audited and sent the TLS alert, never plaintext HTTP nor a
 * silent close: its client speaks TLS first. Any refusal of such a conn goes
 * through respond_with, so this holds for each.
 */
START_TEST(test_tls_front_refusal)
{
	static const unsigned char alert[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50 };
	struct worker_listener public_tls = {
		.w = &wk, .fd = -1, .sandbox = WORKER_NO_SANDBOX, .ingress = true, .armed = true
	};
	const struct ct_sqe *s = NULL;

	eng.term = &stub_term;
	wk.term = (void *)&stub_session;
	eng.ingress_tls = true;
	conn_on_accept(&public_tls, CT_SLOT, IORING_CQE_F_MORE);
	sq_take();
	struct conn *c = wk.live;
	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_eq(c->front, &gateway_tls_front);
	ck_assert_uint_eq(prepared_op(IORING_OP_SOCKET, NULL), 1);
	complete(c, OP_SOCKET, -ENFILE, 0);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_eq(s->len, sizeof(alert));
	ck_assert_int_eq(memcmp((const void *)(uintptr_t)s->addr, alert, sizeof(alert)), 0);
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_OVERLOADED]), 1);
	ck_assert_uint_ne(c->decision_id, 0); /* its decision record written */
	finish();

	/* The internal socket refuses the connect: the same alert, audited. */
	conn_on_accept(&public_tls, CT_SLOT + 1, IORING_CQE_F_MORE);
	sq_take();
	c = wk.live;
	complete(c, OP_SOCKET, CT_SLOT + 2, 0);
	ck_assert_uint_eq(prepared_op(IORING_OP_CONNECT, NULL), 1);
	complete(c, OP_CONNECT, -ECONNREFUSED, 0);
	if (c->ops & op_bit(OP_CONNECT_TIMEOUT)) /* its linked timeout, cancelled with it */
		complete(c, OP_CONNECT_TIMEOUT, -ECANCELED, 0);
	ck_assert_uint_eq(prepared_op(IORING_OP_SEND, &s), 1);
	ck_assert_uint_eq(s->len, sizeof(alert));
	ck_assert_int_eq(memcmp((const void *)(uintptr_t)s->addr, alert, sizeof(alert)), 0);
	ck_assert_uint_eq(atomic_load(&wk.decisions.refused[REASON_OVERLOADED]), 2);
	ck_assert_uint_ne(c->decision_id, 0);
	finish();
	eng.ingress_tls = false;
	wk.term = NULL;
	eng.term = NULL;
}
END_TEST

/*
 * A sandbox that knows its agent's uid: the peer's credentials are asked
 * before any byte is read; the agent and root go on to the head receive, a
 * stranger or an answer that is not a whole ucred is refused 403
 * peer_not_agent.
 */
START_TEST(test_peer_credentials)
{
	const struct ct_sqe *s = NULL;
	const uint32_t agent = 4242;
	const struct {
		uint32_t uid;
		int res;
		bool admitted;
	} cases[] = {
		{ agent, (int)sizeof(struct ucred), true },
		{ 0, (int)sizeof(struct ucred), true },
		{ agent + 1, (int)sizeof(struct ucred), false },
		{ agent, (int)sizeof(struct ucred) - 1, false },
		{ agent, -EBADF, false },
	};

	eng.features.setsockopt_cmd = true;
	sandbox.agent_uid = agent;
	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		struct conn *c = accept_one(CT_SLOT);
		ck_assert_uint_eq(prepared_count, 1);
		ck_assert_uint_eq(prepared_op(IORING_OP_URING_CMD, &s), 1);
		ck_assert_uint_eq(s->user_data, ud_encode(c, OP_PEERCRED));
		c->peer.uid = cases[i].uid; /* what the kernel writes */
		c->peer.pid = 77;
		complete(c, OP_PEERCRED, cases[i].res, 0);
		if (cases[i].admitted) {
			ck_assert_msg(prepared_op(IORING_OP_RECV, NULL) == 1, "case %zu", i);
			ck_assert_uint_eq(c->state, ST_HEAD);
		} else {
			ck_assert_msg(c->state == ST_RESPOND, "case %zu", i);
			const char *answer = sent_text();
			expect_has(answer, "HTTP/1.1 403 ");
			expect_has(answer, "X-Agent-Reason: peer_not_agent\r\n");
		}
		finish();
	}
}
END_TEST

static Suite *conn_suite(void)
{
	Suite *s = suite_create("core/conn");
	TCase *tc = tcase_create("head");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_head_in_pieces);
	tcase_add_test(tc, test_head_at_limit);
	tcase_add_test(tc, test_head_over_limit);
	tcase_add_test(tc, test_eof_before_head);
	tcase_add_test(tc, test_eof_mid_head);
	tcase_add_test(tc, test_head_deadline);
	tcase_add_test(tc, test_silent_client_closed);
	suite_add_tcase(s, tc);
	tc = tcase_create("refusal");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_refusal_answer);
	tcase_add_test(tc, test_retry_after);
	tcase_add_test(tc, test_refusal_keeps);
	tcase_add_test(tc, test_rate_limited_kept);
	tcase_add_test(tc, test_kept_conn_head_deadline);
	tcase_add_test(tc, test_drain);
	suite_add_tcase(s, tc);
	tc = tcase_create("lifetime");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_ops_one_per_kind);
	tcase_add_test(tc, test_freed_after_last_completion);
	tcase_add_test(tc, test_connect_aborted);
	tcase_add_test(tc, test_dns_deadline);
	tcase_add_test(tc, test_accept_overloaded);
	tcase_add_test(tc, test_accept_stopping);
	tcase_add_test(tc, test_accept_over_share);
	tcase_add_test(tc, test_accept_tls_listener);
	tcase_add_test(tc, test_tls_front_refusal);
	tcase_add_test(tc, test_peer_credentials);
	suite_add_tcase(s, tc);
	tc = tcase_create("early");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_early_fifo);
	tcase_add_test(tc, test_early_stop_at);
	tcase_add_test(tc, test_head_carry);
	tcase_add_test(tc, test_cqe_defer);
	suite_add_tcase(s, tc);
	return s;
}

/* The suite's directory is made here and removed after every test ran, failed ones too. */
int main(void)
{
	return unit_run_in_dir(conn_suite(), dir);
}
