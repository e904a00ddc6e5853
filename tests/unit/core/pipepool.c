/*
 * Unit tests for core/pipepool.c, on real pipes, through the public API and
 * the pool's counters (the .c is included, so the module is built with the
 * test's flags).
 *
 * Properties checked with fcntl: both ends non-blocking and close-on-exec,
 * and the pipe's size (F_GETPIPE_SZ) what was asked when the request is
 * under the kernel's limits (a whole power-of-two number of pages that a
 * probe pipe may be given: pipe-max-size, the per-user page cap).
 * Descriptor leaks are found by counting /proc/self/fd. Failures to create a
 * pipe are provoked with RLIMIT_NOFILE; libcheck runs each test in its own
 * child, so the limit does not outlive the test. Programmer errors (a leak at
 * destroy, a foreign put) must abort.
 */
#include "../../../core/pipepool.c"

#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>

#include "core/limits.h"
#include "tests/unit/unit.h"

/* ---- Helpers. ---- */

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

static int fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

static void check_fd_flags(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	int fdfl = fcntl(fd, F_GETFD);

	ck_assert_int_ne(fl, -1);
	ck_assert_int_ne(fdfl, -1);
	ck_assert_int_eq(fl & O_NONBLOCK, O_NONBLOCK);
	ck_assert_int_eq(fdfl & FD_CLOEXEC, FD_CLOEXEC);
}

/* Both ends flagged, the read end reads what the write end wrote, and it is empty. */
static void check_pipe(const struct pipe_pair *p)
{
	char buf[8];

	ck_assert_int_ge(p->read_fd, 0);
	ck_assert_int_ge(p->write_fd, 0);
	ck_assert_int_ne(p->read_fd, p->write_fd);
	check_fd_flags(p->read_fd);
	check_fd_flags(p->write_fd);
	ck_assert_int_eq(fcntl(p->read_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	ck_assert_int_eq(fcntl(p->write_fd, F_GETFL) & O_ACCMODE, O_WRONLY);
	errno = 0;
	ck_assert_int_eq(read(p->read_fd, buf, sizeof(buf)), -1);
	ck_assert_int_eq(errno, EAGAIN);
}

/* Whether the kernel lets this process give a pipe <bytes> now (pipe-max-size, user caps). */
static int kernel_allows(uint32_t bytes)
{
	int fds[2];

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	int ret = fcntl(fds[1], F_SETPIPE_SZ, (int)bytes);
	close(fds[0]);
	close(fds[1]);
	return ret == (int)bytes;
}

static int default_pipe_size(void)
{
	int fds[2];

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	int sz = fcntl(fds[0], F_GETPIPE_SZ);
	close(fds[0]);
	close(fds[1]);
	return sz;
}

/* Lowers the soft descriptor limit so that no descriptor at or above <limit> can open. */
static void limit_fds(rlim_t limit)
{
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = limit;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void unlimit_fds(void)
{
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = rl.rlim_max;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* The lowest descriptor number not in use. */
static int lowest_free_fd(void)
{
	int fd = dup(0);

	ck_assert_int_ge(fd, 0);
	close(fd);
	return fd;
}

/* ---- Take and put. ---- */

/* N pipes: N takes succeed, take N+1 is refused and counted. */
START_TEST(test_take_all)
{
	enum { N = 8 };
	struct pipepool pp;
	struct pipe_pair *p[N];
	int fds_before = fd_count();

	ck_assert_int_eq(pipepool_init(&pp, N, 65536), 0);
	ck_assert_uint_eq(pp.capacity, N);
	ck_assert_uint_eq(pp.free_count, N);
	ck_assert_uint_eq(pp.pipe_bytes, 65536);
	ck_assert_uint_eq(pipepool_in_use(&pp), 0);
	ck_assert_int_eq(fd_count(), fds_before + 2 * N);
	for (uint32_t i = 0; i < N; i++) {
		p[i] = pipepool_take(&pp);
		ck_assert_ptr_nonnull(p[i]);
		check_pipe(p[i]);
		for (uint32_t j = 0; j < i; j++) {
			ck_assert_ptr_ne(p[i], p[j]);
			ck_assert_int_ne(p[i]->read_fd, p[j]->read_fd);
		}
		ck_assert_uint_eq(pipepool_in_use(&pp), i + 1);
	}
	ck_assert_uint_eq(pp.failed_takes, 0);
	ck_assert_ptr_null(pipepool_take(&pp));
	ck_assert_uint_eq(pp.failed_takes, 1);
	ck_assert_ptr_null(pipepool_take(&pp));
	ck_assert_uint_eq(pp.failed_takes, 2);
	ck_assert_uint_eq(pipepool_in_use(&pp), N);

	/* A clean put keeps the pipe as it is; the next take hands it out again. */
	int rfd = p[3]->read_fd, wfd = p[3]->write_fd;
	pipepool_put(&pp, p[3], 0);
	ck_assert_uint_eq(pipepool_in_use(&pp), N - 1);
	ck_assert_ptr_eq(pipepool_take(&pp), p[3]);
	ck_assert_int_eq(p[3]->read_fd, rfd);
	ck_assert_int_eq(p[3]->write_fd, wfd);
	ck_assert_uint_eq(pp.replaced, 0);
	ck_assert_uint_eq(pp.failed_takes, 2);

	for (uint32_t i = 0; i < N; i++)
		pipepool_put(&pp, p[i], 0);
	ck_assert_uint_eq(pipepool_in_use(&pp), 0);
	ck_assert_uint_eq(pp.free_count, N);
	pipepool_destroy(&pp);
	ck_assert_int_eq(fd_open(rfd), 0);
	ck_assert_int_eq(fd_open(wfd), 0);
	ck_assert_int_eq(fd_count(), fds_before);
	ck_assert_ptr_null(pp.pipes);
	ck_assert_ptr_null(pp.free_stack);
}
END_TEST

START_TEST(test_capacity_zero)
{
	struct pipepool pp;
	int fds_before = fd_count();

	ck_assert_int_eq(pipepool_init(&pp, 0, 65536), 0);
	ck_assert_uint_eq(pp.capacity, 0);
	ck_assert_uint_eq(pipepool_in_use(&pp), 0);
	ck_assert_ptr_null(pipepool_take(&pp));
	ck_assert_uint_eq(pp.failed_takes, 1);
	ck_assert_ptr_null(pipepool_take(&pp));
	ck_assert_uint_eq(pp.failed_takes, 2);
	ck_assert_int_eq(fd_count(), fds_before);
	pipepool_destroy(&pp);
}
END_TEST

/* A dirty put replaces the pipe: stale bytes never reach the next taker. */
START_TEST(test_put_dirty)
{
	struct pipepool pp;
	char buf[64];

	ck_assert_int_eq(pipepool_init(&pp, 2, 131072), 0);
	int fds_before = fd_count();
	struct pipe_pair *p = pipepool_take(&pp);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(write(p->write_fd, "stale bytes", 11), 11);
	pipepool_put(&pp, p, 1);
	ck_assert_uint_eq(pp.replaced, 1);
	ck_assert_uint_eq(pp.retired, 0);
	ck_assert_uint_eq(pipepool_in_use(&pp), 0);
	ck_assert_int_eq(fd_count(), fds_before);

	struct pipe_pair *q = pipepool_take(&pp);
	ck_assert_ptr_eq(q, p);
	errno = 0;
	ck_assert_int_eq(read(q->read_fd, buf, sizeof(buf)), -1);
	ck_assert_int_eq(errno, EAGAIN);
	/* The replacement has the same properties as the original. */
	check_pipe(q);
	ck_assert_int_eq(fcntl(q->write_fd, F_GETPIPE_SZ), 131072);

	/* It works: bytes written come out, then the pipe is empty again. */
	ck_assert_int_eq(write(q->write_fd, "fresh", 5), 5);
	ck_assert_int_eq(read(q->read_fd, buf, sizeof(buf)), 5);
	ck_assert_mem_eq(buf, "fresh", 5);
	/* A dirty put of a pipe that happens to be empty is also fine. */
	pipepool_put(&pp, q, 1);
	ck_assert_uint_eq(pp.replaced, 2);
	ck_assert_uint_eq(pipepool_in_use(&pp), 0);
	ck_assert_int_eq(fd_count(), fds_before);
	pipepool_destroy(&pp);
}
END_TEST

/* ---- Descriptor properties. ---- */

START_TEST(test_pipe_size)
{
	static const uint32_t asks[] = { 4096, 65536, 131072, 262144, 1048576 };
	struct pipepool pp;
	uint32_t checked = 0;

	for (size_t i = 0; i < AN_ARRAY_LEN(asks); i++) {
		/* Past pipe-max-size (or the per-user page cap) the kernel says no. */
		if (!kernel_allows(asks[i]))
			continue;
		checked++;
		ck_assert_int_eq(pipepool_init(&pp, 3, asks[i]), 0);
		for (uint32_t k = 0; k < pp.capacity; k++) {
			check_pipe(&pp.pipes[k]);
			ck_assert_int_eq(fcntl(pp.pipes[k].write_fd, F_GETPIPE_SZ), (int)asks[i]);
			ck_assert_int_eq(fcntl(pp.pipes[k].read_fd, F_GETPIPE_SZ), (int)asks[i]);
		}
		pipepool_destroy(&pp);
	}
	ck_assert_uint_ge(checked, 1);

	/* Not a power-of-two number of pages: the kernel rounds up. */
	ck_assert_int_eq(pipepool_init(&pp, 1, 100000), 0);
	ck_assert_int_ge(fcntl(pp.pipes[0].write_fd, F_GETPIPE_SZ), 100000);
	pipepool_destroy(&pp);

	/* 0 leaves the kernel's default. */
	ck_assert_int_eq(pipepool_init(&pp, 2, 0), 0);
	ck_assert_int_eq(fcntl(pp.pipes[1].write_fd, F_GETPIPE_SZ), default_pipe_size());
	check_pipe(&pp.pipes[1]);
	pipepool_destroy(&pp);

	/* The project's default size. */
	ck_assert_int_eq(pipepool_init(&pp, 1, LIMITS_PIPE_BYTES), 0);
	if (kernel_allows(LIMITS_PIPE_BYTES))
		ck_assert_int_eq(fcntl(pp.pipes[0].write_fd, F_GETPIPE_SZ), (int)LIMITS_PIPE_BYTES);
	pipepool_destroy(&pp);
}
END_TEST

/* A size the kernel refuses is best effort: the pool still works, at the default size. */
START_TEST(test_pipe_size_refused)
{
	struct pipepool pp;

	/* Larger than any pipe may be (the kernel refuses sizes past 2^31 bytes). */
	ck_assert_int_eq(pipepool_init(&pp, 1, UINT32_MAX), 0);
	check_pipe(&pp.pipes[0]);
	ck_assert_int_eq(fcntl(pp.pipes[0].write_fd, F_GETPIPE_SZ), default_pipe_size());
	pipepool_destroy(&pp);
}
END_TEST

/* ---- Failures to create pipes. ---- */

START_TEST(test_init_emfile)
{
	struct pipepool pp;
	int fds_before = fd_count();

	/* Room for about three pipes: the fourth fails, and nothing leaks. */
	limit_fds((rlim_t)lowest_free_fd() + 7);
	int ret = pipepool_init(&pp, 100, 65536);
	unlimit_fds();
	ck_assert_int_eq(ret, -EMFILE);
	ck_assert_int_eq(fd_count(), fds_before);
	ck_assert_ptr_null(pp.pipes);
	ck_assert_ptr_null(pp.free_stack);
	ck_assert_uint_eq(pp.capacity, 0);

	/* With the limit gone, the same init works. */
	ck_assert_int_eq(pipepool_init(&pp, 100, 65536), 0);
	ck_assert_int_eq(fd_count(), fds_before + 200);
	pipepool_destroy(&pp);
	ck_assert_int_eq(fd_count(), fds_before);
}
END_TEST

/* A dirty put whose replacement cannot be created retires the pipe for good. */
START_TEST(test_put_dirty_retires)
{
	struct pipepool pp;

	ck_assert_int_eq(pipepool_init(&pp, 2, 65536), 0);
	int fds_before = fd_count();
	struct pipe_pair *p = pipepool_take(&pp);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(write(p->write_fd, "x", 1), 1);
	/* Every descriptor below the limit is in use once p's two are closed. */
	int limit = lowest_free_fd();
	if (p->read_fd < limit)
		limit = p->read_fd;
	if (p->write_fd < limit)
		limit = p->write_fd;
	limit_fds((rlim_t)limit);
	pipepool_put(&pp, p, 1);
	unlimit_fds();
	ck_assert_uint_eq(pp.replaced, 1);
	ck_assert_uint_eq(pp.retired, 1);
	ck_assert_int_eq(p->read_fd, -1);
	ck_assert_int_eq(p->write_fd, -1);
	ck_assert_uint_eq(pipepool_in_use(&pp), 0);
	ck_assert_int_eq(fd_count(), fds_before - 2);

	/* Only the other pipe is handed out from now on. */
	struct pipe_pair *q = pipepool_take(&pp);
	ck_assert_ptr_nonnull(q);
	ck_assert_ptr_ne(q, p);
	check_pipe(q);
	ck_assert_uint_eq(pipepool_in_use(&pp), 1);
	ck_assert_ptr_null(pipepool_take(&pp));
	ck_assert_uint_eq(pp.failed_takes, 1);
	pipepool_put(&pp, q, 0);
	ck_assert_uint_eq(pipepool_in_use(&pp), 0);
	/* Destroy accepts a retired pipe as returned and closes nothing twice. */
	pipepool_destroy(&pp);
	ck_assert_int_eq(fd_count(), fds_before - 4);
}
END_TEST

/* ---- Programmer errors: these run in a forked child and must abort. ---- */

START_TEST(test_destroy_leak_aborts)
{
	struct pipepool pp;

	ck_assert_int_eq(pipepool_init(&pp, 2, 65536), 0);
	ck_assert_ptr_nonnull(pipepool_take(&pp));
	pipepool_destroy(&pp);
}
END_TEST

START_TEST(test_put_foreign_aborts)
{
	struct pipepool pp;
	struct pipe_pair other = { .read_fd = 0, .write_fd = 1 };

	ck_assert_int_eq(pipepool_init(&pp, 2, 65536), 0);
	ck_assert_ptr_nonnull(pipepool_take(&pp));
	pipepool_put(&pp, &other, 0);
}
END_TEST

START_TEST(test_put_past_end_aborts)
{
	struct pipepool pp;

	ck_assert_int_eq(pipepool_init(&pp, 2, 65536), 0);
	ck_assert_ptr_nonnull(pipepool_take(&pp));
	pipepool_put(&pp, pp.pipes + pp.capacity, 0);
}
END_TEST

START_TEST(test_put_twice_aborts)
{
	struct pipepool pp;

	ck_assert_int_eq(pipepool_init(&pp, 2, 65536), 0);
	struct pipe_pair *p = pipepool_take(&pp);
	ck_assert_ptr_nonnull(p);
	pipepool_put(&pp, p, 0);
	pipepool_put(&pp, p, 0);
}
END_TEST

static Suite *pipepool_suite(void)
{
	Suite *s = suite_create("pipepool");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_take_all);
	tcase_add_test(tc, test_capacity_zero);
	tcase_add_test(tc, test_put_dirty);
	tcase_add_test(tc, test_pipe_size);
	tcase_add_test(tc, test_pipe_size_refused);
	tcase_add_test(tc, test_init_emfile);
	tcase_add_test(tc, test_put_dirty_retires);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_destroy_leak_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_foreign_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_past_end_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_put_twice_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	return unit_run(pipepool_suite());
}
