/*
 * Unit tests for core/uppool.c, on a real io_uring (ring_init, as the worker
 * builds it) and real AF_UNIX stream pairs (the .c is included, so the
 * module is built with the test's flags).
 *
 * Each pooled connection is one end of a socketpair, registered into a
 * fixed slot and then closed, so the slot holds the only reference: when
 * the pool closes the slot, the other end (kept by the test as the "peer")
 * sees POLLHUP, and an io_uring send on the slot fails with -EBADF. The
 * test reaps completions itself as the worker's dispatch does: a CQE whose
 * op is UPPOOL_OP goes to uppool_on_cqe, user_data 0 (cancels, closes) is
 * ignored, and the test's own probes carry UPT_OP_PROBE. Sessions are
 * addresses in a static array; the stub term_ops records every
 * session_free. libcheck runs each test in its own child, which also makes
 * the child the ring's single issuer.
 */
#include "../../../core/uppool.c"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "core/limits.h"
#include "tests/unit/unit.h"

/* ---- Fixture. ---- */

#define UPT_SLOTS     (UPPOOL_ENTRIES + 4u) /* socketpairs a test may open */
#define UPT_OP_PROBE  0x01u                 /* the test's own sends on a slot */
#define UPT_SETTLE_MS 2000                  /* how long a completion may take */
#define UPT_FREES_MAX 256u

struct upt {
	struct ring ring;
	struct uppool pool;
	int peer[UPT_SLOTS]; /* the test's end of slot i's pair, -1 when none */
	uint32_t pool_cqes;  /* UPPOOL_OP completions handed to the pool */
	bool probe_done;
	int probe_res;
} __attribute__((aligned(16)));

static struct upt fx;
static char sessions[UPT_SLOTS]; /* session i is &sessions[i] */
static void *freed[UPT_FREES_MAX];
static uint32_t freed_count;

static void stub_session_free(void *session)
{
	ck_assert_ptr_nonnull(session);
	ck_assert_uint_lt(freed_count, UPT_FREES_MAX);
	freed[freed_count++] = session;
}

static const struct term_ops stub_term = { .session_free = stub_session_free };

/* How many times <session> was freed. */
static uint32_t freed_times(const void *session)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < freed_count; i++)
		n += freed[i] == session;
	return n;
}

static void *session(uint32_t i)
{
	ck_assert_uint_lt(i, UPT_SLOTS);
	return &sessions[i];
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void upt_setup(void)
{
	struct ring_features f;

	memset(&fx, 0, sizeof(fx));
	memset(freed, 0, sizeof(freed));
	freed_count = 0;
	for (uint32_t i = 0; i < UPT_SLOTS; i++)
		fx.peer[i] = -1;
	ck_assert_int_eq(ring_probe(&f), 0);
	int ret = ring_init(&fx.ring, &f, 32, 512, 256, 2, 4096);
	ck_assert_msg(ret == 0, "ring_init: %d (%s)", ret, strerror(-ret));
	uppool_init(&fx.pool, &fx.ring, &stub_term);
	ck_assert_ptr_eq(fx.pool.ring, &fx.ring);
	ck_assert_ptr_eq(fx.pool.term, &stub_term);
	ck_assert(uppool_quiet(&fx.pool));
}

static void upt_teardown(void)
{
	for (uint32_t i = 0; i < UPT_SLOTS; i++) {
		if (fx.peer[i] >= 0)
			close(fx.peer[i]);
	}
	ring_destroy(&fx.ring);
}

/* A connected pair: one end into fixed slot <slot> (then closed), the other kept as its peer. */
static void pair_open(uint32_t slot)
{
	int sv[2];

	ck_assert_uint_lt(slot, UPT_SLOTS);
	ck_assert_int_eq(fx.peer[slot], -1);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(io_uring_register_files_update(&fx.ring.uring, slot, &sv[0], 1), 1);
	close(sv[0]);
	fx.peer[slot] = sv[1];
}

/*
 * Submits what is queued, waits up to <wait_ms> for a completion, and
 * dispatches every completion there is. Returns the UPPOOL_OP ones.
 */
static uint32_t reap_for(int wait_ms)
{
	struct __kernel_timespec ts = { .tv_sec = wait_ms / 1000,
					.tv_nsec = (long long)(wait_ms % 1000) * 1000000 };
	struct io_uring_cqe *cqe = NULL;
	uint32_t n = 0;

	int ret = io_uring_submit_and_wait_timeout(&fx.ring.uring, &cqe, 1, &ts, NULL);
	fx.ring.sq_unsent = 0;
	ck_assert_msg(ret >= 0 || ret == -ETIME || ret == -EINTR, "submit_and_wait: %d", ret);
	while (io_uring_peek_cqe(&fx.ring.uring, &cqe) == 0) {
		uint64_t ud = cqe->user_data;
		int res = cqe->res;
		io_uring_cqe_seen(&fx.ring.uring, cqe);
		if (ud == 0)
			continue; /* a cancel, or a close that failed */
		if (ud_op(ud) == UPT_OP_PROBE) {
			ck_assert_ptr_eq(ud_object(ud), &fx);
			fx.probe_done = true;
			fx.probe_res = res;
			continue;
		}
		ck_assert_uint_eq(ud_op(ud), UPPOOL_OP);
		struct uppool_entry *e = ud_object(ud);
		ck_assert_msg(e >= fx.pool.entries && e < fx.pool.entries + UPPOOL_ENTRIES,
			      "user_data %#llx: %p is not an entry of the pool at %p",
			      (unsigned long long)ud, (void *)e, (void *)fx.pool.entries);
		uppool_on_cqe(&fx.pool, e, res);
		fx.pool_cqes++;
		n++;
	}
	/* Closes the pool queued while handling them. */
	ck_assert_int_ge(io_uring_submit(&fx.ring.uring), 0);
	fx.ring.sq_unsent = 0;
	return n;
}

/* Reaps until no poll of the pool is leaving (or UPT_SETTLE_MS passed). */
static void settle(void)
{
	uint64_t deadline = mono_ms() + UPT_SETTLE_MS;

	do {
		reap_for(20);
	} while (fx.pool.leaving > 0 && mono_ms() < deadline);
	ck_assert_uint_eq(fx.pool.leaving, 0);
	reap_for(0);
}

/* Reaps until the pool's parked count is <parked> and nothing is leaving. */
static void settle_to(uint32_t parked)
{
	uint64_t deadline = mono_ms() + UPT_SETTLE_MS;

	while ((fx.pool.parked != parked || fx.pool.leaving > 0) && mono_ms() < deadline)
		reap_for(20);
	ck_assert_uint_eq(fx.pool.parked, parked);
	ck_assert_uint_eq(fx.pool.leaving, 0);
	reap_for(0);
}

/* Sends one byte on fixed slot <slot> through the ring; returns the completion's res. */
static int slot_send(uint32_t slot)
{
	static const char byte = 'p';
	uint64_t deadline = mono_ms() + UPT_SETTLE_MS;

	fx.probe_done = false;
	struct io_uring_sqe *sqe = ring_sqe(&fx.ring);
	io_uring_prep_send(sqe, (int)slot, &byte, 1, MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, ud_encode(&fx, UPT_OP_PROBE));
	while (!fx.probe_done && mono_ms() < deadline)
		reap_for(20);
	ck_assert(fx.probe_done);
	return fx.probe_res;
}

/* The slot holds no file any more: a send on it fails as on a bad descriptor. */
static void check_slot_closed(uint32_t slot)
{
	ck_assert_int_eq(slot_send(slot), -EBADF);
}

/* The slot still holds its socket: a byte sent on it reaches the peer, which saw no hang-up. */
static void check_slot_open(uint32_t slot)
{
	struct pollfd pfd = { .fd = fx.peer[slot], .events = POLLIN };
	char c = 0;

	ck_assert_int_ge(fx.peer[slot], 0);
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);
	ck_assert_int_eq(slot_send(slot), 1);
	ck_assert_int_eq(read(fx.peer[slot], &c, 1), 1);
	ck_assert_int_eq(c, 'p');
}

/* The peer of <slot> sees its other end gone. */
static void check_peer_hung_up(uint32_t slot)
{
	struct pollfd pfd = { .fd = fx.peer[slot], .events = POLLIN };

	ck_assert_int_ge(fx.peer[slot], 0);
	ck_assert_int_eq(poll(&pfd, 1, 1000), 1);
	ck_assert_int_eq(pfd.revents & POLLHUP, POLLHUP);
}

static struct sockaddr_in addr_v4(uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static struct uppool_key base_key(void)
{
	return (struct uppool_key){ .host = "api.example.com",
				    .host_len = 15,
				    .port = 443,
				    .ca_file = NULL,
				    .secret = "sk-secret-one",
				    .secret_len = 13 };
}

/* Parks slot <slot> with session(<slot>) under <k> at <now_ms>, connected to 127.0.0.1:<port>. */
static bool park_at(const struct uppool_key *k, uint32_t slot, uint64_t now_ms)
{
	struct sockaddr_in a = addr_v4((uint16_t)(10000 + slot));

	return uppool_park(&fx.pool, k, (const struct sockaddr *)&a, sizeof(a), (int32_t)slot,
			   session(slot), now_ms);
}

/* The SQEs prepared and not yet submitted. */
static unsigned sq_pending(void)
{
	return io_uring_sq_ready(&fx.ring.uring);
}

/* ---- Park and take. ---- */

START_TEST(test_park_take_same_key)
{
	struct uppool_key k = base_key();
	struct sockaddr_in want = addr_v4(10000);
	struct sockaddr_storage addr;
	int32_t fd = -1;
	void *s = NULL;

	upt_setup();
	pair_open(0);
	ck_assert(park_at(&k, 0, 1234));
	struct uppool_entry *e = &fx.pool.entries[0];
	ck_assert_uint_eq(e->state, UPPOOL_PARKED);
	ck_assert_uint_eq(fx.pool.parked, 1);
	ck_assert_uint_eq(fx.pool.leaving, 0);
	ck_assert(!uppool_quiet(&fx.pool));
	ck_assert_uint_eq(e->parked_ms, 1234);
	ck_assert_uint_eq(e->host_len, 15);
	ck_assert_str_eq(e->host, "api.example.com");
	ck_assert_uint_eq(sq_pending(), 1);
	/* Armed and idle: nothing completes. */
	ck_assert_uint_eq(reap_for(50), 0);
	ck_assert_uint_eq(e->state, UPPOOL_PARKED);

	memset(&addr, 0xa5, sizeof(addr));
	ck_assert(uppool_take(&fx.pool, &k, &fd, &s, &addr));
	ck_assert_int_eq(fd, 0);
	ck_assert_ptr_eq(s, session(0));
	ck_assert_int_eq(memcmp(&addr, &want, sizeof(want)), 0);
	static const unsigned char zero[sizeof(addr)];
	ck_assert_int_eq(
	    memcmp((unsigned char *)&addr + sizeof(want), zero, sizeof(addr) - sizeof(want)), 0);
	ck_assert_uint_eq(fx.pool.reused, 1);
	ck_assert_uint_eq(fx.pool.parked, 0);
	ck_assert_uint_eq(fx.pool.leaving, 1);
	ck_assert_uint_eq(e->state, UPPOOL_LEAVING);
	ck_assert(!e->close_on_leave);
	ck_assert(!uppool_quiet(&fx.pool));

	fd = -7;
	s = NULL;
	ck_assert(!uppool_take(&fx.pool, &k, &fd, &s, &addr));
	ck_assert_int_eq(fd, -7);
	ck_assert_ptr_null(s);
	ck_assert_uint_eq(fx.pool.reused, 1);

	settle();
	ck_assert_uint_eq(fx.pool_cqes, 1);
	ck_assert_uint_eq(e->state, UPPOOL_FREE);
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 0);
	/* The taker's slot was left alone. */
	check_slot_open(0);
	ck_assert(!uppool_take(&fx.pool, &k, &fd, &s, &addr));
	upt_teardown();
}
END_TEST

/* Takes with <k>, which must find nothing and change nothing. */
static void check_take_misses(const struct uppool_key *k)
{
	struct sockaddr_storage addr;
	int32_t fd = -7;
	void *s = NULL;
	uint32_t parked = fx.pool.parked;
	uint32_t leaving = fx.pool.leaving;
	uint64_t reused = fx.pool.reused;
	unsigned pending = sq_pending();

	ck_assert(!uppool_take(&fx.pool, k, &fd, &s, &addr));
	ck_assert_int_eq(fd, -7);
	ck_assert_ptr_null(s);
	ck_assert_uint_eq(fx.pool.parked, parked);
	ck_assert_uint_eq(fx.pool.leaving, leaving);
	ck_assert_uint_eq(fx.pool.reused, reused);
	ck_assert_uint_eq(sq_pending(), pending);
}

/* Takes with <k>, which must find session(<slot>) on that slot. */
static void check_take_hits(const struct uppool_key *k, uint32_t slot)
{
	struct sockaddr_storage addr;
	int32_t fd = -1;
	void *s = NULL;

	ck_assert(uppool_take(&fx.pool, k, &fd, &s, &addr));
	ck_assert_int_eq(fd, (int32_t)slot);
	ck_assert_ptr_eq(s, session(slot));
	ck_assert_uint_eq(ntohs(((struct sockaddr_in *)&addr)->sin_port), 10000 + slot);
}

START_TEST(test_take_key_mismatch)
{
	struct uppool_key k = base_key();
	struct uppool_key m;
	char same_ca[] = "/etc/agentsnet/ca-a.pem"; /* equal text, another pointer */

	upt_setup();
	pair_open(0);
	pair_open(1);
	ck_assert(park_at(&k, 0, 1));
	struct uppool_key kca = base_key();
	kca.ca_file = "/etc/agentsnet/ca-a.pem";
	ck_assert(park_at(&kca, 1, 1));
	ck_assert_uint_eq(fx.pool.parked, 2);
	reap_for(0);

	m = base_key();
	m.host = "api.example.org"; /* same length, one byte differs */
	check_take_misses(&m);
	m = base_key();
	m.host = "Api.example.com"; /* case matters: the host as connected */
	check_take_misses(&m);
	m = base_key();
	m.host_len = 14; /* a prefix */
	check_take_misses(&m);
	m = base_key();
	m.host = "api.example.com.";
	m.host_len = 16; /* an extension */
	check_take_misses(&m);
	m = base_key();
	m.port = 444;
	check_take_misses(&m);
	m.port = 0;
	check_take_misses(&m);
	m = base_key();
	m.ca_file = "/etc/agentsnet/ca-b.pem"; /* entry 0 has NULL, entry 1 ca-a */
	check_take_misses(&m);
	m = base_key();
	m.secret = "sk-secret-two"; /* same length */
	check_take_misses(&m);
	m = base_key();
	m.secret_len = 12; /* a prefix */
	check_take_misses(&m);
	m = base_key();
	m.secret = NULL;
	m.secret_len = 0;
	check_take_misses(&m);
	m = kca;
	m.ca_file = "/etc/agentsnet/ca-b.pem";
	check_take_misses(&m);
	m = kca;
	m.secret = "sk-secret-two";
	check_take_misses(&m);
	ck_assert_uint_eq(fx.pool.reused, 0);
	ck_assert_uint_eq(reap_for(30), 0);

	/* Each exact key still finds its own entry; the CA is matched by its text. */
	m = kca;
	m.ca_file = same_ca;
	check_take_hits(&m, 1);
	check_take_misses(&kca);
	check_take_hits(&k, 0);
	ck_assert_uint_eq(fx.pool.reused, 2);
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 0);
	upt_teardown();
}
END_TEST

/* A path for the CA (entry 0) and NULL for the system roots (entry 1): neither takes the other. */
START_TEST(test_take_ca_null_vs_path)
{
	struct uppool_key ka = base_key();
	struct uppool_key kn = base_key();

	upt_setup();
	pair_open(0);
	ka.ca_file = "/etc/agentsnet/ca-a.pem";
	ck_assert(park_at(&ka, 0, 1));
	check_take_misses(&kn);
	kn.ca_file = "/etc/agentsnet/ca-b.pem";
	check_take_misses(&kn);
	check_take_hits(&ka, 0);
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	upt_teardown();
}
END_TEST

/* ---- The upstream speaks or leaves while parked. ---- */

/* Parks slot 0, lets <act> happen on the peer, checks the entry is dropped and freed once. */
static void check_dropped_by_peer(bool write_byte)
{
	struct uppool_key k = base_key();
	struct sockaddr_storage addr;
	int32_t fd = -1;
	void *s = NULL;

	upt_setup();
	pair_open(0);
	pair_open(1);
	ck_assert(park_at(&k, 0, 1));
	ck_assert(park_at(&k, 1, 1)); /* same key, stays */
	ck_assert_uint_eq(reap_for(30), 0);
	if (write_byte) {
		ck_assert_int_eq(write(fx.peer[0], "x", 1), 1);
	} else {
		close(fx.peer[0]);
		fx.peer[0] = -1;
	}
	settle_to(1);
	struct uppool_entry *e = &fx.pool.entries[0];
	ck_assert_uint_eq(fx.pool_cqes, 1);
	ck_assert_uint_eq(e->state, UPPOOL_FREE);
	ck_assert_uint_eq(fx.pool.entries[1].state, UPPOOL_PARKED);
	ck_assert_uint_eq(freed_count, 1);
	ck_assert_ptr_eq(freed[0], session(0));
	ck_assert_uint_eq(fx.pool.reused, 0);
	check_slot_closed(0);
	if (write_byte)
		check_peer_hung_up(0);
	/* Only the other one is left to take, then nothing. */
	check_take_hits(&k, 1);
	ck_assert(!uppool_take(&fx.pool, &k, &fd, &s, &addr));
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 1);
	ck_assert_uint_eq(freed_times(session(1)), 0);
	check_slot_open(1);
	upt_teardown();
}

START_TEST(test_peer_writes_while_parked)
{
	check_dropped_by_peer(true);
}
END_TEST

START_TEST(test_peer_closes_while_parked)
{
	check_dropped_by_peer(false);
}
END_TEST

/*
 * The peer speaks and the entry is taken before that completion is reaped:
 * the taker owns slot and session, and the completion frees neither.
 */
START_TEST(test_take_races_completion)
{
	struct uppool_key k = base_key();

	upt_setup();
	pair_open(0);
	ck_assert(park_at(&k, 0, 1));
	ck_assert_uint_eq(reap_for(30), 0);
	ck_assert_int_eq(write(fx.peer[0], "x", 1), 1);
	check_take_hits(&k, 0);
	settle();
	ck_assert_uint_eq(fx.pool_cqes, 1);
	ck_assert_uint_eq(fx.pool.entries[0].state, UPPOOL_FREE);
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 0);
	ck_assert_int_eq(slot_send(0), 1);
	upt_teardown();
}
END_TEST

/* ---- Expiry. ---- */

START_TEST(test_expire_boundary)
{
	struct uppool_key k = base_key();
	const uint64_t t0 = 5000;

	upt_setup();
	pair_open(0);
	pair_open(1);
	ck_assert(park_at(&k, 0, t0));
	ck_assert(park_at(&k, 1, t0 + 10));
	ck_assert_uint_eq(reap_for(30), 0);

	uppool_expire(&fx.pool, t0 + UPPOOL_IDLE_MS - 1);
	ck_assert_uint_eq(fx.pool.parked, 2);
	ck_assert_uint_eq(fx.pool.leaving, 0);
	ck_assert_uint_eq(fx.pool.entries[0].state, UPPOOL_PARKED);
	ck_assert_uint_eq(sq_pending(), 0);
	ck_assert_uint_eq(reap_for(30), 0);
	ck_assert_uint_eq(freed_count, 0);

	uppool_expire(&fx.pool, t0 + UPPOOL_IDLE_MS);
	ck_assert_uint_eq(fx.pool.parked, 1);
	ck_assert_uint_eq(fx.pool.leaving, 1);
	ck_assert_uint_eq(fx.pool.entries[0].state, UPPOOL_LEAVING);
	ck_assert(fx.pool.entries[0].close_on_leave);
	ck_assert_uint_eq(fx.pool.entries[1].state, UPPOOL_PARKED);
	ck_assert_uint_eq(sq_pending(), 1);
	/* Nothing is freed before the cancelled poll's completion. */
	ck_assert_uint_eq(freed_count, 0);
	settle();
	ck_assert_uint_eq(fx.pool_cqes, 1);
	ck_assert_uint_eq(fx.pool.entries[0].state, UPPOOL_FREE);
	ck_assert_uint_eq(freed_count, 1);
	ck_assert_ptr_eq(freed[0], session(0));
	check_slot_closed(0);
	check_peer_hung_up(0);

	/* The second, parked 10 ms later, has its own boundary. */
	uppool_expire(&fx.pool, t0 + 10 + UPPOOL_IDLE_MS - 1);
	ck_assert_uint_eq(fx.pool.parked, 1);
	uppool_expire(&fx.pool, t0 + 10 + UPPOOL_IDLE_MS);
	ck_assert_uint_eq(fx.pool.parked, 0);
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 2);
	ck_assert_uint_eq(freed_times(session(1)), 1);
	check_slot_closed(1);
	upt_teardown();
}
END_TEST

/* A taken entry is not the pool's to expire. */
START_TEST(test_expire_skips_taken)
{
	struct uppool_key k = base_key();

	upt_setup();
	pair_open(0);
	ck_assert(park_at(&k, 0, 0));
	check_take_hits(&k, 0);
	uppool_expire(&fx.pool, UINT64_MAX);
	ck_assert_uint_eq(fx.pool.entries[0].state, UPPOOL_LEAVING);
	ck_assert(!fx.pool.entries[0].close_on_leave);
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 0);
	check_slot_open(0);
	upt_teardown();
}
END_TEST

/* ---- Capacity. ---- */

START_TEST(test_full_pool)
{
	struct uppool_key k = base_key();
	const uint32_t extra = UPPOOL_ENTRIES;

	upt_setup();
	for (uint32_t i = 0; i <= UPPOOL_ENTRIES; i++)
		pair_open(i);
	for (uint32_t i = 0; i < UPPOOL_ENTRIES; i++) {
		k.port = (uint16_t)(1000 + i);
		ck_assert_msg(park_at(&k, i, 1), "park %u of %u", i, UPPOOL_ENTRIES);
		ck_assert_uint_eq(fx.pool.parked, i + 1);
	}
	reap_for(0);
	ck_assert_uint_eq(sq_pending(), 0);
	k.port = (uint16_t)(1000 + extra);
	ck_assert(!park_at(&k, extra, 1));
	ck_assert_uint_eq(fx.pool.parked, UPPOOL_ENTRIES);
	ck_assert_uint_eq(sq_pending(), 0);
	ck_assert_uint_eq(reap_for(30), 0);
	ck_assert_uint_eq(freed_count, 0);
	check_slot_open(extra); /* refused: still the caller's */

	/* One taken: its entry is not free before its poll's completion. */
	struct uppool_key kt = base_key();
	kt.port = 1000 + 17;
	check_take_hits(&kt, 17);
	ck_assert_uint_eq(fx.pool.entries[17].state, UPPOOL_LEAVING);
	ck_assert(!park_at(&k, extra, 2));
	settle();
	ck_assert_uint_eq(fx.pool.entries[17].state, UPPOOL_FREE);
	ck_assert(park_at(&k, extra, 2));
	ck_assert_uint_eq(fx.pool.entries[17].state, UPPOOL_PARKED);
	ck_assert_int_eq(fx.pool.entries[17].fd, (int32_t)extra);
	ck_assert_uint_eq(fx.pool.parked, UPPOOL_ENTRIES);
	struct uppool_key k2 = base_key();
	k2.port = 2000;
	ck_assert(!park_at(&k2, 17, 2));
	check_take_hits(&k, extra);
	check_take_misses(&kt);
	settle();

	uppool_drain(&fx.pool);
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, UPPOOL_ENTRIES - 1);
	ck_assert_uint_eq(freed_times(session(17)), 0);
	ck_assert_uint_eq(freed_times(session(extra)), 0);
	upt_teardown();
}
END_TEST

/* ---- Drain. ---- */

START_TEST(test_drain)
{
	enum { N = 6 };
	struct uppool_key k = base_key();

	upt_setup();
	uppool_drain(&fx.pool); /* empty: nothing to do */
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(sq_pending(), 0);
	for (uint32_t i = 0; i < N; i++) {
		pair_open(i);
		k.secret_len = 1 + i; /* distinct keys */
		ck_assert(park_at(&k, i, 1));
	}
	ck_assert_uint_eq(reap_for(30), 0);
	check_take_hits(&k, N - 1); /* one taken before the drain */
	uppool_drain(&fx.pool);
	ck_assert_uint_eq(fx.pool.parked, 0);
	ck_assert_uint_eq(fx.pool.leaving, N);
	ck_assert(!uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 0);
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(fx.pool_cqes, N);
	ck_assert_uint_eq(freed_count, N - 1);
	for (uint32_t i = 0; i < N - 1; i++) {
		ck_assert_uint_eq(freed_times(session(i)), 1);
		ck_assert_uint_eq(fx.pool.entries[i].state, UPPOOL_FREE);
		check_slot_closed(i);
		check_peer_hung_up(i);
	}
	ck_assert_uint_eq(freed_times(session(N - 1)), 0);
	check_slot_open(N - 1);
	for (uint32_t i = 0; i < N; i++) {
		k.secret_len = 1 + i;
		check_take_misses(&k);
	}
	upt_teardown();
}
END_TEST

/* ---- The host's length. ---- */

START_TEST(test_host_length_limit)
{
	char host[LIMITS_HOST_BYTES_MAX + 2];
	struct uppool_key k = base_key();

	upt_setup();
	for (size_t i = 0; i < sizeof(host); i++)
		host[i] = (char)('a' + i % 26);
	k.host = host;
	pair_open(0);

	k.host_len = LIMITS_HOST_BYTES_MAX + 1;
	ck_assert(!park_at(&k, 0, 1));
	k.host_len = 0;
	ck_assert(!park_at(&k, 0, 1));
	ck_assert_uint_eq(fx.pool.parked, 0);
	ck_assert_uint_eq(sq_pending(), 0);
	ck_assert(uppool_quiet(&fx.pool));

	k.host_len = LIMITS_HOST_BYTES_MAX;
	ck_assert(park_at(&k, 0, 1));
	struct uppool_entry *e = &fx.pool.entries[0];
	ck_assert_uint_eq(e->host_len, LIMITS_HOST_BYTES_MAX);
	ck_assert_int_eq(memcmp(e->host, host, LIMITS_HOST_BYTES_MAX), 0);
	ck_assert_int_eq(e->host[LIMITS_HOST_BYTES_MAX], '\0');
	k.host_len = LIMITS_HOST_BYTES_MAX + 1;
	check_take_misses(&k);
	k.host_len = LIMITS_HOST_BYTES_MAX - 1;
	check_take_misses(&k);
	k.host_len = LIMITS_HOST_BYTES_MAX;
	check_take_hits(&k, 0);
	settle();
	ck_assert(uppool_quiet(&fx.pool));
	ck_assert_uint_eq(freed_count, 0);
	upt_teardown();
}
END_TEST

/* ---- Programmer errors. ---- */

START_TEST(test_park_null_session_aborts)
{
	struct uppool_key k = base_key();
	struct sockaddr_in a = addr_v4(1);

	upt_setup();
	uppool_park(&fx.pool, &k, (const struct sockaddr *)&a, sizeof(a), 0, NULL, 1);
}
END_TEST

START_TEST(test_cqe_for_free_entry_aborts)
{
	upt_setup();
	uppool_on_cqe(&fx.pool, &fx.pool.entries[0], 0);
}
END_TEST

static Suite *uppool_suite(void)
{
	Suite *s = suite_create("uppool");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_park_take_same_key);
	tcase_add_test(tc, test_take_key_mismatch);
	tcase_add_test(tc, test_take_ca_null_vs_path);
	tcase_add_test(tc, test_peer_writes_while_parked);
	tcase_add_test(tc, test_peer_closes_while_parked);
	tcase_add_test(tc, test_take_races_completion);
	tcase_add_test(tc, test_expire_boundary);
	tcase_add_test(tc, test_expire_skips_taken);
	tcase_add_test(tc, test_full_pool);
	tcase_add_test(tc, test_drain);
	tcase_add_test(tc, test_host_length_limit);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_park_null_session_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_cqe_for_free_entry_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	return unit_run(uppool_suite());
}
