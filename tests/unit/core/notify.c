/*
 * core/notify.c: the service manager's variables read and removed (a path, an
 * abstract name, each malformed form refused; the watchdog for this process
 * only), and a state arriving as one datagram on a socket bound where the
 * variable says.
 */
#include "core/notify.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "core/an.h"
#include "tests/unit/unit.h"

static void env_clear(void)
{
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
}

/* A datagram socket bound at <name> (a path, or '@' and an abstract name). */
static int manager_bind(const char *name)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	size_t len = strlen(name);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(len, sizeof(a.sun_path));
	memcpy(a.sun_path, name, len);
	if (name[0] == '@')
		a.sun_path[0] = '\0';
	socklen_t alen =
	    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '@' ? 0u : 1u));
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, alen), 0);
	return fd;
}

/* The next datagram on <fd>, NUL-terminated in <buf>. */
static void manager_read(int fd, char *buf, size_t cap)
{
	ssize_t n = recv(fd, buf, cap - 1, MSG_DONTWAIT);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
}

START_TEST(test_unset_is_off)
{
	struct notify n;

	env_clear();
	ck_assert_int_eq(notify_open(&n), 0);
	ck_assert(!notify_on(&n));
	ck_assert_uint_eq(n.watchdog_usec, 0);
	ck_assert_int_eq(notify_send(&n, "READY=1\n"), 0);
	notify_close(&n);
}
END_TEST

START_TEST(test_path_socket)
{
	char path[] = "/tmp/an-notify-XXXXXX";
	char sock[64];
	char got[256];
	struct notify n;

	ck_assert_ptr_nonnull(mkdtemp(path));
	snprintf(sock, sizeof(sock), "%s/notify", path);
	int fd = manager_bind(sock);
	env_clear();
	setenv("NOTIFY_SOCKET", sock, 1);
	ck_assert_int_eq(notify_open(&n), 0);
	ck_assert(notify_on(&n));
	ck_assert_ptr_null(getenv("NOTIFY_SOCKET")); /* no child takes it for its own */
	ck_assert_int_eq(notify_send(&n, "READY=1\nSTATUS=serving\n"), 0);
	manager_read(fd, got, sizeof(got));
	ck_assert_str_eq(got, "READY=1\nSTATUS=serving\n");
	notify_close(&n);
	ck_assert(!notify_on(&n));
	close(fd);
	unlink(sock);
	rmdir(path);
}
END_TEST

START_TEST(test_abstract_socket)
{
	char name[64];
	char got[64];
	struct notify n;

	snprintf(name, sizeof(name), "@an-notify-unit-%d", (int)getpid());
	int fd = manager_bind(name);
	env_clear();
	setenv("NOTIFY_SOCKET", name, 1);
	ck_assert_int_eq(notify_open(&n), 0);
	ck_assert_int_eq(notify_send(&n, "STOPPING=1\n"), 0);
	manager_read(fd, got, sizeof(got));
	ck_assert_str_eq(got, "STOPPING=1\n");
	notify_close(&n);
	close(fd);
}
END_TEST

START_TEST(test_bad_addresses)
{
	struct sockaddr_un a;
	char longest[sizeof(a.sun_path) + 2];
	const char *bad[] = { "", "/", "@", "relative/notify", "notify" };
	struct notify n;

	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		env_clear();
		setenv("NOTIFY_SOCKET", bad[i], 1);
		ck_assert_msg(notify_open(&n) == -EINVAL, "%s", bad[i]);
		ck_assert(!notify_on(&n));
		ck_assert_ptr_null(getenv("NOTIFY_SOCKET"));
	}
	/* A path fills sun_path with its NUL at 107 bytes; an abstract name needs no NUL. */
	memset(longest, 'a', sizeof(longest));
	longest[0] = '/';
	longest[sizeof(a.sun_path) - 1] = '\0';
	env_clear();
	setenv("NOTIFY_SOCKET", longest, 1);
	ck_assert_int_eq(notify_open(&n), 0);
	notify_close(&n);
	longest[sizeof(a.sun_path) - 1] = 'a';
	longest[sizeof(a.sun_path)] = '\0';
	setenv("NOTIFY_SOCKET", longest, 1);
	ck_assert_int_eq(notify_open(&n), -EINVAL);
	longest[0] = '@';
	setenv("NOTIFY_SOCKET", longest, 1);
	ck_assert_int_eq(notify_open(&n), 0);
	notify_close(&n);
	longest[sizeof(a.sun_path)] = 'a';
	longest[sizeof(a.sun_path) + 1] = '\0';
	setenv("NOTIFY_SOCKET", longest, 1);
	ck_assert_int_eq(notify_open(&n), -EINVAL);
}
END_TEST

START_TEST(test_watchdog)
{
	char pid[32];
	struct notify n;

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	const struct {
		const char *usec;
		const char *pid;
		int ret;
		uint64_t want;
	} cases[] = {
		{ "30000000", NULL, 0, 30000000 }, { "30000000", pid, 0, 30000000 },
		{ "30000000", "1", 0, 0 }, /* another process's */
		{ "0", NULL, -EINVAL, 0 },         { "", NULL, -EINVAL, 0 },
		{ "-5", NULL, -EINVAL, 0 },        { "30s", NULL, -EINVAL, 0 },
		{ "30000000", "x", 0, 0 },         { "99999999999999999999999", NULL, -EINVAL, 0 },
	};
	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		env_clear();
		setenv("NOTIFY_SOCKET", "@an-notify-watchdog", 1);
		setenv("WATCHDOG_USEC", cases[i].usec, 1);
		if (cases[i].pid != NULL)
			setenv("WATCHDOG_PID", cases[i].pid, 1);
		ck_assert_msg(notify_open(&n) == cases[i].ret, "case %zu", i);
		ck_assert_msg(n.watchdog_usec == cases[i].want, "case %zu: %llu", i,
			      (unsigned long long)n.watchdog_usec);
		ck_assert_ptr_null(getenv("WATCHDOG_USEC"));
		ck_assert_ptr_null(getenv("WATCHDOG_PID"));
		notify_close(&n);
	}
	/* No socket: a watchdog asked for is nobody's to answer. */
	env_clear();
	setenv("WATCHDOG_USEC", "30000000", 1);
	ck_assert_int_eq(notify_open(&n), 0);
	ck_assert_uint_eq(n.watchdog_usec, 0);
}
END_TEST

/* FDSTORE=1 carries the descriptor: the manager receives one for the same socket. */
START_TEST(test_store_fd)
{
	char name[64], got[256];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct notify n;
	int pair[2];

	snprintf(name, sizeof(name), "@an-notify-store-%d", (int)getpid());
	int fd = manager_bind(name);
	env_clear();
	setenv("NOTIFY_SOCKET", name, 1);
	ck_assert_int_eq(notify_open(&n), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
	ck_assert_int_eq(notify_store_fd(&n, "sandbox.box", pair[0]), 0);
	struct iovec iov = { .iov_base = got, .iov_len = sizeof(got) - 1 };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };
	ssize_t len = recvmsg(fd, &msg, MSG_DONTWAIT);
	ck_assert_int_gt(len, 0);
	got[len] = '\0';
	ck_assert_str_eq(got, "FDSTORE=1\nFDNAME=sandbox.box\n");
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	ck_assert_ptr_nonnull(cm);
	ck_assert_int_eq(cm->cmsg_type, SCM_RIGHTS);
	int kept;
	memcpy(&kept, CMSG_DATA(cm), sizeof(kept));
	ck_assert_int_eq(write(kept, "x", 1), 1); /* the same socket: its peer reads it */
	char c = 0;
	ck_assert_int_eq(read(pair[1], &c, 1), 1);
	ck_assert_int_eq(c, 'x');
	ck_assert_int_eq(notify_forget_fd(&n, "sandbox.box"), 0);
	manager_read(fd, got, sizeof(got));
	ck_assert_str_eq(got, "FDSTOREREMOVE=1\nFDNAME=sandbox.box\n");
	close(kept);
	close(pair[0]);
	close(pair[1]);
	notify_close(&n);
	close(fd);
}
END_TEST

/*
 * $LISTEN_FDS: descriptors from 3 on, named by $LISTEN_FDNAMES, for this pid only.
 * Fds 3 and 4 are set aside while the test puts its own there.
 */
START_TEST(test_listen_fds)
{
	struct notify_fd got[4];
	char pid[32];
	int pair[2];

	int saved3 = fcntl(3, F_DUPFD_CLOEXEC, 50), saved4 = fcntl(4, F_DUPFD_CLOEXEC, 50);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
	ck_assert_int_eq(dup2(pair[0], 3), 3);
	ck_assert_int_eq(dup2(pair[1], 4), 4);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("LISTEN_FDS", "2", 1);
	setenv("LISTEN_PID", pid, 1);
	setenv("LISTEN_FDNAMES", "sandbox.a:sandbox.b", 1);
	ck_assert_int_eq(notify_listen_fds(got, 4), 2);
	ck_assert_str_eq(got[0].name, "sandbox.a");
	ck_assert_int_eq(got[0].fd, 3);
	ck_assert_str_eq(got[1].name, "sandbox.b");
	ck_assert_int_eq(got[1].fd, 4);
	ck_assert_int_eq(fcntl(3, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ck_assert_ptr_null(getenv("LISTEN_FDS"));
	ck_assert_ptr_null(getenv("LISTEN_FDNAMES"));
	/* Another process's: none, and the descriptors untouched. */
	setenv("LISTEN_FDS", "2", 1);
	setenv("LISTEN_PID", "1", 1);
	ck_assert_int_eq(notify_listen_fds(got, 4), 0);
	ck_assert_int_ne(fcntl(3, F_GETFD), -1);
	/* More than the caller has room for: refused, and closed. */
	setenv("LISTEN_FDS", "2", 1);
	setenv("LISTEN_PID", pid, 1);
	ck_assert_int_eq(notify_listen_fds(got, 1), -E2BIG);
	ck_assert_int_eq(fcntl(3, F_GETFD), -1);
	ck_assert_int_eq(fcntl(4, F_GETFD), -1);
	/* Not the protocol's numbers. */
	setenv("LISTEN_FDS", "two", 1);
	ck_assert_int_eq(notify_listen_fds(got, 4), -EINVAL);
	setenv("LISTEN_FDS", "0", 1);
	ck_assert_int_eq(notify_listen_fds(got, 4), 0);
	close(pair[0]);
	close(pair[1]);
	if (saved3 >= 0)
		dup2(saved3, 3);
	if (saved4 >= 0)
		dup2(saved4, 4);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core/notify");
	TCase *tc = tcase_create("notify");

	tcase_add_test(tc, test_unset_is_off);
	tcase_add_test(tc, test_path_socket);
	tcase_add_test(tc, test_abstract_socket);
	tcase_add_test(tc, test_bad_addresses);
	tcase_add_test(tc, test_watchdog);
	tcase_add_test(tc, test_store_fd);
	tcase_add_test(tc, test_listen_fds);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
