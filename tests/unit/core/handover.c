/*
 * core/handover.c: listening sockets handed to a successor arrive each under
 * its name, in order, across batches; a receiver over its room, a batch whose
 * descriptors and names disagree, a malformed head and a sender gone mid-way
 * are refused with every descriptor received closed; a peer that trickles a
 * byte at a time is given up at the step's deadline, not at each byte's.
 */
#include "core/handover.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/an.h"
#include "core/timer.h"
#include "tests/unit/unit.h"

/* A deadline no test here reaches. */
static uint64_t far(void)
{
	return timer_now_ms() + 30000;
}

/* Open descriptors of this process now. */
static int fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own */
}

struct receiver {
	int sock;
	struct notify_fd *out;
	uint32_t cap;
	uint32_t count;
	uint64_t deadline_ms;
	int ret;
	pthread_t thread;
};

static void *receive_main(void *arg)
{
	struct receiver *r = arg;

	r->ret = handover_receive(r->sock, r->out, r->cap, &r->count, r->deadline_ms);
	if (r->ret != 0)
		shutdown(r->sock,
			 SHUT_RDWR); /* as a process that gives up: the sender sees the end */
	return NULL;
}

static void receiver_start(struct receiver *r, int sock, uint32_t cap)
{
	*r = (struct receiver){ .sock = sock, .cap = cap, .deadline_ms = far() };
	r->out = calloc(cap > 0 ? cap : 1, sizeof(*r->out));
	ck_assert_ptr_nonnull(r->out);
	ck_assert_int_eq(pthread_create(&r->thread, NULL, receive_main, r), 0);
}

static void receiver_join(struct receiver *r)
{
	ck_assert_int_eq(pthread_join(r->thread, NULL), 0);
}

#define ROUND_TRIP_FDS 450u /* three batches: 200, 200, 50 */

START_TEST(test_round_trip)
{
	static int pipes[ROUND_TRIP_FDS][2];
	static struct notify_fd sent[ROUND_TRIP_FDS];
	int sv[2];
	struct receiver r;

	for (uint32_t i = 0; i < ROUND_TRIP_FDS; i++) {
		ck_assert_int_eq(pipe(pipes[i]), 0);
		snprintf(sent[i].name, sizeof(sent[i].name), "sandbox.s%u", i);
		sent[i].fd = pipes[i][0];
	}
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	receiver_start(&r, sv[1], ROUND_TRIP_FDS);
	ck_assert_int_eq(handover_send(sv[0], sent, ROUND_TRIP_FDS, far()), 0);
	receiver_join(&r);
	ck_assert_int_eq(r.ret, 0);
	ck_assert_uint_eq(r.count, ROUND_TRIP_FDS);
	for (uint32_t i = 0; i < ROUND_TRIP_FDS; i++) {
		/* The same pipe, under the same name: a byte written to it reads back there. */
		unsigned char b = (unsigned char)i;
		unsigned char got = 0;
		ck_assert_str_eq(r.out[i].name, sent[i].name);
		ck_assert_int_ne(r.out[i].fd, sent[i].fd);
		ck_assert_int_eq(write(pipes[i][1], &b, 1), 1);
		ck_assert_int_eq(read(r.out[i].fd, &got, 1), 1);
		ck_assert_uint_eq(got, b);
		close(r.out[i].fd);
		close(pipes[i][0]);
		close(pipes[i][1]);
	}
	free(r.out);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_nothing_to_hand)
{
	int sv[2];
	struct receiver r;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	receiver_start(&r, sv[1], 4);
	ck_assert_int_eq(handover_send(sv[0], NULL, 0, far()), 0);
	receiver_join(&r);
	ck_assert_int_eq(r.ret, 0);
	ck_assert_uint_eq(r.count, 0);
	free(r.out);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_over_room)
{
	struct notify_fd sent[250];
	int sv[2];
	struct receiver r;

	int before = fds_open();
	for (uint32_t i = 0; i < AN_ARRAY_LEN(sent); i++) {
		snprintf(sent[i].name, sizeof(sent[i].name), "sandbox.x%u", i);
		sent[i].fd = STDERR_FILENO;
	}
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	receiver_start(&r, sv[1], 210); /* the first batch fits, the second does not */
	int sent_ret = handover_send(sv[0], sent, AN_ARRAY_LEN(sent), far());
	receiver_join(&r);
	ck_assert_int_eq(r.ret, -E2BIG);
	ck_assert_uint_eq(r.count, 0);
	ck_assert_int_ne(sent_ret, 0); /* no answer to its second batch */
	close(sv[0]);
	close(sv[1]);
	ck_assert_int_eq(fds_open(), before); /* all 250 received were closed */
	free(r.out);
}
END_TEST

/* Sends <text> with <n_fds> copies of stderr attached, as a broken sender would. */
static void raw_send(int sock, const char *text, uint32_t n_fds)
{
	char control[CMSG_SPACE(sizeof(int) * 4)] __attribute__((aligned(8))) = { 0 };
	struct iovec iov = { .iov_base = (void *)text, .iov_len = strlen(text) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	ck_assert_uint_le(n_fds, 4);
	if (n_fds > 0) {
		msg.msg_control = control;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		for (uint32_t i = 0; i < n_fds; i++) {
			int fd = STDERR_FILENO;
			memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
		}
	}
	ck_assert_int_eq(sendmsg(sock, &msg, MSG_NOSIGNAL), (ssize_t)strlen(text));
}

START_TEST(test_malformed_refused)
{
	static const struct {
		const char *text;
		uint32_t fds;
	} cases[] = {
		{ "batch 2 4\na\nb\n", 1 },           /* fewer descriptors than names said */
		{ "batch 1 2\na\n", 2 },              /* more */
		{ "batch 2 4\na\n\n\n", 2 },          /* an empty name */
		{ "batch 2 5\na\nbc", 2 },            /* a name without its newline */
		{ "batch 1 4\na\nb\n", 1 },           /* two names for one */
		{ "batch x 4\na\nb\n", 2 },           /* not a count */
		{ "BATCH 1 2\na\n", 1 },              /* not a batch */
		{ "batch 201 2\na\n", 1 },            /* over a batch's room */
		{ "batch 0 2\na\n", 0 },              /* names and no descriptor */
		{ "batch 1 2 \na\n", 1 },             /* a space before the newline */
		{ "batch 1 2", 1 },                   /* the head never ends: the sender leaves */
		{ "batch 1 99999999999999999\n", 1 }, /* text over its room */
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		int sv[2];
		struct receiver r;
		int before = fds_open();
		ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		receiver_start(&r, sv[1], 8);
		raw_send(sv[0], cases[i].text, cases[i].fds);
		shutdown(sv[0], SHUT_WR); /* a receiver waiting for more sees the end */
		receiver_join(&r);
		ck_assert_msg(r.ret == -EPROTO, "case %zu (%s): %d, want -EPROTO", i, cases[i].text,
			      r.ret);
		ck_assert_uint_eq(r.count, 0);
		close(sv[0]);
		close(sv[1]);
		ck_assert_msg(fds_open() == before, "case %zu leaks a descriptor", i);
		free(r.out);
	}
}
END_TEST

START_TEST(test_sender_gone_mid_way)
{
	int sv[2];
	struct receiver r;
	int before = fds_open();

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	receiver_start(&r, sv[1], 8);
	raw_send(sv[0], "batch 1 2\na\n", 1); /* one whole batch, then nothing */
	char ack[5];
	ck_assert_int_eq(recv(sv[0], ack, sizeof(ack), MSG_WAITALL), 5);
	ck_assert_int_eq(memcmp(ack, "next\n", 5), 0);
	close(sv[0]);
	receiver_join(&r);
	ck_assert_int_eq(r.ret, -EPROTO);
	ck_assert_uint_eq(r.count, 0);
	close(sv[1]);
	ck_assert_int_eq(fds_open(), before); /* the first batch's descriptor too */
	free(r.out);
}
END_TEST

START_TEST(test_receiver_answers_wrong)
{
	struct notify_fd sent[250];
	int sv[2];

	for (uint32_t i = 0; i < AN_ARRAY_LEN(sent); i++) {
		snprintf(sent[i].name, sizeof(sent[i].name), "n%u", i);
		sent[i].fd = STDERR_FILENO;
	}
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(send(sv[1], "nope\n", 5, 0), 5); /* waiting before the first batch */
	ck_assert_int_eq(handover_send(sv[0], sent, AN_ARRAY_LEN(sent), far()), -EPROTO);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/*
 * Writes <text> a byte each <gap_ms> on <sock>, until done or the peer is gone;
 * <whole> is set as the last byte goes out, so a side that gave up at its
 * deadline is told from one that waited the trickle out, with no clock.
 */
struct trickler {
	int sock;
	const char *text;
	unsigned gap_ms;
	atomic_bool whole;
	pthread_t thread;
};

static void *trickle_main(void *arg)
{
	struct trickler *t = arg;

	for (const char *p = t->text; *p != '\0'; p++) {
		if (p[1] == '\0')
			atomic_store(&t->whole, true); /* before the peer can have the last byte */
		if (send(t->sock, p, 1, MSG_NOSIGNAL) != 1)
			break;
		usleep(t->gap_ms * 1000);
	}
	return NULL;
}

/* A sender that trickles a batch's head: the receiver gives up at its deadline, whole. */
START_TEST(test_trickling_sender_timed_out)
{
	int sv[2];
	struct receiver r;
	/*
	 * 31 bytes, a byte each 100 ms: the last after 3 s, ten times the deadline, each byte
	 * well within any per-read timeout. The receiver must give up while the
	 * trickle goes on (an event, not a bound on its duration).
	 */
	struct trickler t = { .text = "batch 1 2222222222222222222222\n", .gap_ms = 100 };

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	t.sock = sv[0];
	r = (struct receiver){ .sock = sv[1], .cap = 8, .deadline_ms = timer_now_ms() + 300 };
	r.out = calloc(8, sizeof(*r.out));
	ck_assert_ptr_nonnull(r.out);
	ck_assert_int_eq(pthread_create(&t.thread, NULL, trickle_main, &t), 0);
	ck_assert_int_eq(pthread_create(&r.thread, NULL, receive_main, &r), 0);
	receiver_join(&r);
	ck_assert_int_eq(r.ret, -ETIMEDOUT);
	ck_assert_msg(!atomic_load(&t.whole),
		      "the receiver waited out the whole trickled head, past its deadline");
	close(sv[1]); /* the trickler's next send fails */
	pthread_join(t.thread, NULL);
	close(sv[0]);
	free(r.out);
}
END_TEST

/* A receiver that trickles its acknowledgement: the sender gives up at its deadline. */
START_TEST(test_trickling_receiver_timed_out)
{
	struct notify_fd sent[250];
	int sv[2];
	/*
	 * Both batches' acknowledgements, a byte each 250 ms: the last after 2.25 s,
	 * over seven times the deadline. The sender must give up while the trickle
	 * goes on.
	 */
	struct trickler t = { .text = "next\nnext\n", .gap_ms = 250 };

	for (uint32_t i = 0; i < AN_ARRAY_LEN(sent); i++) {
		snprintf(sent[i].name, sizeof(sent[i].name), "n%u", i);
		sent[i].fd = STDERR_FILENO;
	}
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	t.sock = sv[1];
	ck_assert_int_eq(pthread_create(&t.thread, NULL, trickle_main, &t), 0);
	int ret = handover_send(sv[0], sent, AN_ARRAY_LEN(sent), timer_now_ms() + 300);
	ck_assert_int_eq(ret, -ETIMEDOUT);
	ck_assert_msg(!atomic_load(&t.whole),
		      "the sender waited out the trickled acknowledgement, past its deadline");
	close(sv[0]);
	pthread_join(t.thread, NULL);
	close(sv[1]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core/handover");
	TCase *tc = tcase_create("handover");

	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_nothing_to_hand);
	tcase_add_test(tc, test_over_room);
	tcase_add_test(tc, test_malformed_refused);
	tcase_add_test(tc, test_sender_gone_mid_way);
	tcase_add_test(tc, test_receiver_answers_wrong);
	tcase_add_test(tc, test_trickling_sender_timed_out);
	tcase_add_test(tc, test_trickling_receiver_timed_out);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
