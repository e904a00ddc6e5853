/*
 * Unit tests for core/dns.c: c-ares on a real io_uring, against a DNS
 * server this suite runs on 127.0.0.1 (a UDP socket in a thread answering
 * canned packets), so nothing leaves the host.
 *
 * The .c is included, so status_to_errno and addrs_collect are reached
 * directly: each c-ares status's errno, and the addresses kept (the port
 * set, other families skipped, DNS_ADDRS_MAX at N and N+1). Through the
 * ring: A records with the port, the A and AAAA answers apart (the poll
 * armed again), DNS_ADDRS_MAX records and one more,
 * NXDOMAIN and an empty answer (-ENOENT), SERVFAIL (-EIO), a server that
 * never answers (-ETIMEDOUT, and dns_wait_ms's first wait: a third of the
 * timeout), a success without an address (-ENOENT), servers c-ares refuses
 * (-EINVAL, no callback), and dns_shutdown with a lookup in flight
 * (-ECANCELED, every poll reaped).
 */
#include "../../../core/dns.c"

#include <arpa/inet.h>
#include <check.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/unit.h"

/* What the canned server answers an A query with (an AAAA query: no record, NOERROR). */
enum fake_mode { FAKE_A, FAKE_NXDOMAIN, FAKE_SERVFAIL, FAKE_SILENT };

static struct {
	int fd;
	int stop;
	uint16_t port;
	enum fake_mode mode;
	uint32_t records; /* FAKE_A: how many A records, 10.0.0.1 up */
	bool slow_second; /* the second query's answer 200 ms after the first's */
	pthread_t thread;
	_Atomic uint32_t queries;
} fake;

static struct ring ring;
static struct dns d;
static char servers[64];

/* The answer to the query <q> of <n> bytes into <out>; its length, 0 for none. */
static size_t fake_answer(const unsigned char *q, size_t n, unsigned char *out, size_t cap)
{
	size_t end = 12;

	if (n < 17 || fake.mode == FAKE_SILENT)
		return 0;
	while (end < n && q[end] != 0)
		end += (size_t)q[end] + 1;
	end += 5; /* the root label, QTYPE, QCLASS */
	if (end > n || end > cap)
		return 0;
	uint16_t qtype = (uint16_t)(q[end - 4] << 8 | q[end - 3]);
	uint32_t records = fake.mode == FAKE_A && qtype == 1 ? fake.records : 0;
	unsigned rcode = fake.mode == FAKE_NXDOMAIN ? 3 : fake.mode == FAKE_SERVFAIL ? 2 : 0;
	memcpy(out, q, end);
	out[2] = 0x81; /* QR, RD */
	out[3] = (unsigned char)(0x80 | rcode);
	out[4] = 0;
	out[5] = 1;
	out[6] = 0;
	out[7] = (unsigned char)records;
	memset(out + 8, 0, 4);
	size_t len = end;
	for (uint32_t i = 0; i < records && len + 16 <= cap; i++) {
		const unsigned char rr[16] = { 0xc0, 12, 0, 1, 0,  1, 0, 0,
					       0,    60, 0, 4, 10, 0, 0, (unsigned char)(i + 1) };
		memcpy(out + len, rr, sizeof(rr));
		len += sizeof(rr);
	}
	return len;
}

static void *fake_main(void *arg)
{
	unsigned char q[512], a[1024];

	(void)arg;
	for (;;) {
		struct pollfd p[2] = { { .fd = fake.fd, .events = POLLIN },
				       { .fd = fake.stop, .events = POLLIN } };
		if (poll(p, 2, -1) < 0 || p[1].revents != 0)
			return NULL;
		struct sockaddr_storage from;
		socklen_t from_len = sizeof(from);
		ssize_t n = recvfrom(fake.fd, q, sizeof(q), 0, (struct sockaddr *)&from, &from_len);
		if (n <= 0)
			continue;
		if (++fake.queries == 2 && fake.slow_second)
			usleep(200 * 1000);
		size_t len = fake_answer(q, (size_t)n, a, sizeof(a));
		if (len > 0)
			(void)sendto(fake.fd, a, len, 0, (struct sockaddr *)&from, from_len);
	}
}

static void setup(void)
{
	struct ring_features f;
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);

	memset(&fake, 0, sizeof(fake));
	fake.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fake.fd, 0);
	ck_assert_int_eq(bind(fake.fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(getsockname(fake.fd, (struct sockaddr *)&sin, &len), 0);
	fake.port = ntohs(sin.sin_port);
	fake.stop = eventfd(0, EFD_CLOEXEC);
	ck_assert_int_ge(fake.stop, 0);
	ck_assert_int_eq(pthread_create(&fake.thread, NULL, fake_main, NULL), 0);
	snprintf(servers, sizeof(servers), "127.0.0.1:%u", fake.port);
	ck_assert_int_eq(ring_probe(&f), 0);
	int ret = ring_init(&ring, &f, 64, 256, 16, 2, 4096);
	ck_assert_msg(ret == 0, "ring_init: %s", strerror(-ret));
}

/* Submits and reaps until <d> has no poll in flight. */
static void reap_polls(void);

static void teardown(void)
{
	uint64_t one = 1;

	dns_shutdown(&d);
	reap_polls();
	ring_destroy(&ring);
	ck_assert_int_eq(write(fake.stop, &one, sizeof(one)), (ssize_t)sizeof(one));
	ck_assert_int_eq(pthread_join(fake.thread, NULL), 0);
	close(fake.fd);
	close(fake.stop);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* What the lookup's callback was given. */
static struct {
	uint32_t calls;
	int status;
	uint32_t count;
	struct sockaddr_storage addrs[DNS_ADDRS_MAX];
} got;

static void on_done(void *arg, int status, const struct sockaddr_storage *addrs, uint32_t count)
{
	ck_assert_ptr_eq(arg, &got);
	got.calls++;
	got.status = status;
	got.count = count;
	ck_assert_uint_le(count, DNS_ADDRS_MAX);
	if (count > 0)
		memcpy(got.addrs, addrs, count * sizeof(*addrs));
}

/* One turn of the worker's loop for <d>: submit, wait (at most 50 ms), reap, tick. */
static void turn(void)
{
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts = { .tv_nsec = 50 * 1000000 };
	unsigned head, seen = 0;

	ck_assert_int_ge(io_uring_submit(&ring.uring), 0);
	ring.sq_unsent = 0;
	int ret = io_uring_wait_cqe_timeout(&ring.uring, &cqe, &ts);
	ck_assert_msg(ret == 0 || ret == -ETIME, "wait: %s", strerror(-ret));
	io_uring_for_each_cqe(&ring.uring, head, cqe)
	{
		uint64_t ud = cqe->user_data;
		seen++;
		if (ud != 0 && ud_op(ud) == DNS_OP_POLL)
			dns_on_cqe(&d, ud_object(ud), cqe->res);
	}
	io_uring_cq_advance(&ring.uring, seen);
	dns_tick(&d);
}

/* Turns until the callback ran (at most 10 s: 5 times the slowest lookup here). */
static void wait_done(void)
{
	uint64_t until = mono_ms() + 10000;

	while (got.calls == 0) {
		ck_assert_msg(mono_ms() < until, "the lookup never ended");
		turn();
	}
	ck_assert_uint_eq(got.calls, 1);
	ck_assert_uint_eq(d.queries, 0);
}

static void reap_polls(void)
{
	uint64_t until = mono_ms() + 10000;

	while (d.polls_pending > 0) {
		ck_assert_msg(mono_ms() < until, "%u polls never came back", d.polls_pending);
		turn();
	}
}

/* Resolves <name> for port 8443 through the fake server (timeout <timeout_ms>). */
static void resolve(const char *name, uint32_t timeout_ms)
{
	memset(&got, 0, sizeof(got));
	dns_init(&d, &ring, servers, timeout_ms);
	ck_assert_int_eq(dns_wait_ms(&d), -1); /* no channel yet */
	ck_assert_int_eq(dns_resolve(&d, name, 8443, on_done, &got), 0);
	ck_assert_uint_eq(got.calls, 0); /* never from dns_resolve itself */
	ck_assert_uint_eq(d.queries, 1);
}

START_TEST(test_status_to_errno)
{
	const int cases[][2] = {
		{ ARES_SUCCESS, 0 },
		{ ARES_ENOTFOUND, -ENOENT },
		{ ARES_ENODATA, -ENOENT },
		{ ARES_ENONAME, -ENOENT },
		{ ARES_EBADNAME, -ENOENT },
		{ ARES_ETIMEOUT, -ETIMEDOUT },
		{ ARES_ECANCELLED, -ECANCELED },
		{ ARES_EDESTRUCTION, -ECANCELED },
		{ ARES_ESERVFAIL, -EIO },
		{ ARES_EREFUSED, -EIO },
		{ ARES_ECONNREFUSED, -EIO },
		{ ARES_ENOMEM, -EIO },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(status_to_errno(cases[i][0]) == cases[i][1], "status %d: %d",
			      cases[i][0], status_to_errno(cases[i][0]));
}
END_TEST

/* <n> nodes: even ones IPv4 10.0.0.<i>, odd ones IPv6 ::<i>, linked in order. */
static void nodes_make(struct ares_addrinfo_node *nodes, struct sockaddr_in6 *sa, uint32_t n)
{
	memset(nodes, 0, n * sizeof(*nodes));
	memset(sa, 0, n * sizeof(*sa));
	for (uint32_t i = 0; i < n; i++) {
		if (i % 2 == 0) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&sa[i];
			sin->sin_family = AF_INET;
			sin->sin_addr.s_addr = htonl(0x0a000000u + i);
			sin->sin_port = htons(53);
			nodes[i].ai_family = AF_INET;
			nodes[i].ai_addrlen = sizeof(struct sockaddr_in);
		} else {
			sa[i].sin6_family = AF_INET6;
			sa[i].sin6_addr.s6_addr[15] = (uint8_t)i;
			nodes[i].ai_family = AF_INET6;
			nodes[i].ai_addrlen = sizeof(struct sockaddr_in6);
		}
		nodes[i].ai_addr = (struct sockaddr *)&sa[i];
		nodes[i].ai_next = i + 1 < n ? &nodes[i + 1] : NULL;
	}
}

START_TEST(test_addrs_collect)
{
	struct ares_addrinfo_node nodes[DNS_ADDRS_MAX + 1];
	struct sockaddr_in6 sa[DNS_ADDRS_MAX + 1];
	struct ares_addrinfo res = { .nodes = nodes };
	struct sockaddr_storage out[DNS_ADDRS_MAX];

	ck_assert_uint_eq(addrs_collect(NULL, 80, out), 0);
	nodes_make(nodes, sa, DNS_ADDRS_MAX);
	ck_assert_uint_eq(addrs_collect(&res, 8443, out), DNS_ADDRS_MAX);
	for (uint32_t i = 0; i < DNS_ADDRS_MAX; i++) {
		ck_assert_int_eq(out[i].ss_family, i % 2 == 0 ? AF_INET : AF_INET6);
		if (i % 2 == 0) {
			const struct sockaddr_in *sin = (const struct sockaddr_in *)&out[i];
			ck_assert_uint_eq(ntohs(sin->sin_port), 8443);
			ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0x0a000000u + i);
		} else {
			const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&out[i];
			ck_assert_uint_eq(ntohs(sin6->sin6_port), 8443);
			ck_assert_uint_eq(sin6->sin6_addr.s6_addr[15], i);
		}
	}
	/* One more than DNS_ADDRS_MAX: the first DNS_ADDRS_MAX (ASan: no write past out). */
	nodes_make(nodes, sa, DNS_ADDRS_MAX + 1);
	struct sockaddr_storage *tight = pool_malloc(DNS_ADDRS_MAX * sizeof(*tight));
	ck_assert_ptr_nonnull(tight);
	ck_assert_uint_eq(addrs_collect(&res, 1, tight), DNS_ADDRS_MAX);
	pool_free(tight);
	/* Another family, and an address shorter than its family's: skipped. */
	nodes_make(nodes, sa, 3);
	nodes[0].ai_family = AF_UNIX;
	nodes[1].ai_addrlen = sizeof(struct sockaddr_in6) - 1;
	ck_assert_uint_eq(addrs_collect(&res, 1, out), 1);
	ck_assert_int_eq(out[0].ss_family, AF_INET);
	ck_assert_uint_eq(ntohl(((struct sockaddr_in *)&out[0])->sin_addr.s_addr), 0x0a000002u);
}
END_TEST

START_TEST(test_resolve_a)
{
	fake.mode = FAKE_A;
	fake.records = 2;
	resolve("a.test", 5000);
	wait_done();
	ck_assert_int_eq(got.status, 0);
	ck_assert_uint_eq(got.count, 2);
	for (uint32_t i = 0; i < 2; i++) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)&got.addrs[i];
		ck_assert_int_eq(sin->sin_family, AF_INET);
		ck_assert_uint_eq(ntohs(sin->sin_port), 8443);
		ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr) & 0xffffff00u, 0x0a000000u);
	}
	ck_assert_int_eq(dns_wait_ms(&d), -1); /* nothing in flight */
}
END_TEST

/*
 * The A and AAAA answers apart: the socket's poll, fired by the first, is
 * armed again for the second, which then ends the lookup without c-ares
 * ever sending a query again.
 */
START_TEST(test_resolve_answers_apart)
{
	fake.mode = FAKE_A;
	fake.records = 1;
	fake.slow_second = true;
	resolve("a.test", 5000);
	wait_done();
	ck_assert_int_eq(got.status, 0);
	ck_assert_uint_eq(got.count, 1);
	ck_assert_uint_eq(fake.queries, 2);
}
END_TEST

/* DNS_ADDRS_MAX records: all of them; one more: still DNS_ADDRS_MAX. */
START_TEST(test_resolve_many)
{
	fake.mode = FAKE_A;
	fake.records = DNS_ADDRS_MAX;
	resolve("a.test", 5000);
	wait_done();
	ck_assert_int_eq(got.status, 0);
	ck_assert_uint_eq(got.count, DNS_ADDRS_MAX);
	dns_shutdown(&d);
	reap_polls();
	fake.records = DNS_ADDRS_MAX + 1;
	resolve("b.test", 5000);
	wait_done();
	ck_assert_int_eq(got.status, 0);
	ck_assert_uint_eq(got.count, DNS_ADDRS_MAX);
}
END_TEST

START_TEST(test_resolve_missing)
{
	fake.mode = FAKE_NXDOMAIN;
	resolve("nx.test", 5000);
	wait_done();
	ck_assert_int_eq(got.status, -ENOENT);
	ck_assert_uint_eq(got.count, 0);
	dns_shutdown(&d);
	reap_polls();
	fake.mode = FAKE_A; /* NOERROR, no record */
	fake.records = 0;
	resolve("empty.test", 5000);
	wait_done();
	ck_assert_int_eq(got.status, -ENOENT);
	ck_assert_uint_eq(got.count, 0);
}
END_TEST

START_TEST(test_resolve_servfail)
{
	fake.mode = FAKE_SERVFAIL;
	resolve("a.test", 5000);
	wait_done();
	ck_assert_int_eq(got.status, -EIO);
}
END_TEST

/*
 * A server that never answers: -ETIMEDOUT after two tries (of A and AAAA
 * each), not before the first try's timeout (a third of timeout_ms), which
 * dns_wait_ms bounds the loop's wait by (plus 1 ms).
 */
START_TEST(test_resolve_timeout)
{
	fake.mode = FAKE_SILENT;
	uint64_t t0 = mono_ms();
	resolve("a.test", 600);
	const int32_t w = dns_wait_ms(&d);
	ck_assert_int_gt(w, 100);
	ck_assert_int_le(w, 201);
	wait_done();
	ck_assert_int_eq(got.status, -ETIMEDOUT);
	ck_assert_uint_ge(mono_ms() - t0, 200);
	ck_assert_uint_ge(fake.queries, 4); /* two tries of A and AAAA */
}
END_TEST

/* c-ares's success with no IPv4 or IPv6 address in it: -ENOENT, no address, one lookup less. */
START_TEST(test_success_without_address)
{
	struct dns_query *q = pool_malloc(sizeof(*q));

	ck_assert_ptr_nonnull(q);
	memset(&got, 0, sizeof(got));
	dns_init(&d, &ring, servers, 1000);
	d.queries = 1;
	*q = (struct dns_query){ .done = on_done, .arg = &got, .port = 1, .d = &d };
	addrinfo_cb(q, ARES_SUCCESS, 0, NULL);
	ck_assert_uint_eq(got.calls, 1);
	ck_assert_int_eq(got.status, -ENOENT);
	ck_assert_uint_eq(got.count, 0);
	ck_assert_uint_eq(d.queries, 0);
}
END_TEST

/* Servers c-ares cannot read: -EINVAL, no callback, no channel kept. */
START_TEST(test_bad_servers)
{
	memset(&got, 0, sizeof(got));
	dns_init(&d, &ring, "not an address", 1000);
	ck_assert_int_eq(dns_resolve(&d, "a.test", 1, on_done, &got), -EINVAL);
	ck_assert_ptr_null(d.channel);
	ck_assert_uint_eq(d.queries, 0);
	turn();
	ck_assert_uint_eq(got.calls, 0);
}
END_TEST

/* dns_shutdown with a lookup in flight: its callback says -ECANCELED; every poll comes back. */
START_TEST(test_shutdown_cancels)
{
	fake.mode = FAKE_SILENT;
	resolve("a.test", 5000);
	uint64_t until = mono_ms() + 10000;
	while (d.polls_pending == 0) {
		ck_assert(mono_ms() < until);
		turn();
	}
	dns_shutdown(&d);
	ck_assert_uint_eq(got.calls, 1);
	ck_assert_int_eq(got.status, -ECANCELED);
	ck_assert_uint_eq(d.queries, 0);
	ck_assert_ptr_null(d.channel);
	reap_polls();
	for (uint32_t i = 0; i < DNS_SOCKETS_MAX; i++)
		ck_assert_int_eq(d.polls[i].fd, -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core/dns");
	TCase *tc = tcase_create("pure");

	tcase_add_test(tc, test_status_to_errno);
	tcase_add_test(tc, test_addrs_collect);
	suite_add_tcase(s, tc);
	tc = tcase_create("ring");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_resolve_a);
	tcase_add_test(tc, test_resolve_answers_apart);
	tcase_add_test(tc, test_resolve_many);
	tcase_add_test(tc, test_resolve_missing);
	tcase_add_test(tc, test_resolve_servfail);
	tcase_add_test(tc, test_resolve_timeout);
	tcase_add_test(tc, test_success_without_address);
	tcase_add_test(tc, test_bad_servers);
	tcase_add_test(tc, test_shutdown_cancels);
	suite_add_tcase(s, tc);
	if (dns_library_init() != 0)
		return EXIT_FAILURE;
	int ret = unit_run(s);
	dns_library_cleanup();
	return ret;
}
