/*
 * Unit tests for tools/agentsnet/hostsock.c: the kernel's list of bound pathname sockets.
 *
 * Sockets bound here (a plain name; a name holding a newline followed by a
 * forged /proc/net/unix line; an abstract one; a relative one) are listed
 * exactly as bound: the newline one whole, its forged "path" never, the
 * abstract and relative ones not at all; a path the filter refuses is not
 * stored. A socket bound in another network
 * namespace (a child's, made with unshare) is not in ours and is in the list
 * of that namespace, and the caller is back in its own namespace after; the
 * bounds of hostsock_add. The netns test needs CAP_SYS_ADMIN (skipped
 * otherwise, unit_skip() recording why).
 */
#include "../../../../tools/agentsnet/hostsock.c"

#include <check.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include "tests/unit/unit.h"

static char dir[64];

static int bound(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	size_t len = strlen(path);

	ck_assert_uint_lt(len, sizeof(a.sun_path));
	memcpy(a.sun_path, path, len);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	ck_assert_msg(bind(fd, (struct sockaddr *)&a, alen) == 0, "bind %s: %s", path,
		      strerror(errno));
	return fd;
}

static size_t count(const struct hostsock_list *l, const char *path)
{
	size_t n = 0;

	for (const char *p = hostsock_next(l, NULL); p != NULL; p = hostsock_next(l, p))
		n += strcmp(p, path) == 0;
	return n;
}

static size_t count_prefix(const struct hostsock_list *l, const char *prefix)
{
	size_t n = 0;

	for (const char *p = hostsock_next(l, NULL); p != NULL; p = hostsock_next(l, p))
		n += strncmp(p, prefix, strlen(prefix)) == 0;
	return n;
}

static bool not_plain(const char *path, void *arg)
{
	return strcmp(path, arg) != 0;
}

START_TEST(names_exact)
{
	char plain[128], forged[256], fake[128], err[256];
	struct hostsock_list l = { 0 };

	snprintf(plain, sizeof(plain), "%s/plain.sock", dir);
	snprintf(fake, sizeof(fake), "/fake.sock");
	/* What /proc/net/unix would print as a second socket at <fake>: a directory, then a
	 * socket in it whose path ends the forged line. */
	snprintf(forged, sizeof(forged), "%s/n\n0: 00000002 00000000 00010000 0001 01 4 ", dir);
	ck_assert_int_eq(mkdir(forged, 0700), 0);
	strcat(forged, fake);
	int a = bound(plain), b = bound(forged);
	struct sockaddr_un abs = { .sun_family = AF_UNIX };
	memcpy(abs.sun_path, "\0an-hostsock-abs", 16);
	int d = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(d, (struct sockaddr *)&abs,
			      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 16)),
			 0);
	ck_assert_int_eq(chdir(dir), 0);
	int e = bound("relative.sock");

	ck_assert_int_eq(hostsock_list_netns(&l, -1, err, sizeof(err)), 0);
	ck_assert_uint_eq(count(&l, plain), 1);
	ck_assert_uint_eq(count(&l, forged), 1);
	ck_assert_uint_eq(count(&l, fake), 0);
	ck_assert_uint_eq(count(&l, "relative.sock"), 0);
	ck_assert_uint_eq(count_prefix(&l, dir), 2);
	for (const char *p = hostsock_next(&l, NULL); p != NULL; p = hostsock_next(&l, p)) {
		ck_assert_msg(p[0] == '/', "not absolute: %s", p);
		ck_assert_ptr_null(strstr(p, "an-hostsock-abs"));
	}
	size_t before = l.n;
	ck_assert_uint_gt(before, 0);
	/* hostsock_list_host lists at least ours again (and appends). */
	ck_assert_int_eq(hostsock_list_host(&l, err, sizeof(err)), 0);
	ck_assert_uint_ge(l.n, 2 * before - 2);
	ck_assert_uint_ge(count(&l, plain), 2);
	hostsock_free(&l);
	ck_assert_ptr_null(hostsock_next(&l, NULL));
	/* A filter: what it refuses is not stored (nor counted). */
	l.wanted = not_plain;
	l.wanted_arg = plain;
	ck_assert_int_eq(hostsock_list_netns(&l, -1, err, sizeof(err)), 0);
	ck_assert_uint_eq(count(&l, plain), 0);
	ck_assert_uint_eq(count(&l, forged), 1);
	ck_assert_uint_eq(l.n, before - 1);
	hostsock_free(&l);
	ck_assert(l.wanted == not_plain);
	for (int fd = a; fd <= e; fd++)
		close(fd);
	(void)b;
	(void)d;
}
END_TEST

START_TEST(other_netns)
{
	char path[128], err[256], nspath[64];
	int ready[2];
	struct hostsock_list ours = { 0 }, theirs = { 0 };
	struct stat before, after;

	if (geteuid() != 0) {
		unit_skip("needs root");
		return;
	}
	snprintf(path, sizeof(path), "%s/other-netns.sock", dir);
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNET) != 0)
			_exit(2);
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		memcpy(a.sun_path, path, strlen(path) + 1); /* dir is short: fits */
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
			_exit(3);
		if (write(ready[1], "r", 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	char r;
	ck_assert_int_eq(read(ready[0], &r, 1), 1);
	ck_assert_int_eq(stat("/proc/thread-self/ns/net", &before), 0);
	ck_assert_int_eq(hostsock_list_netns(&ours, -1, err, sizeof(err)), 0);
	ck_assert_uint_eq(count(&ours, path), 0);
	snprintf(nspath, sizeof(nspath), "/proc/%d/ns/net", (int)pid);
	int ns = open(nspath, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(ns, 0);
	ck_assert_msg(hostsock_list_netns(&theirs, ns, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(count(&theirs, path), 1);
	ck_assert_int_eq(stat("/proc/thread-self/ns/net", &after), 0);
	ck_assert(before.st_ino == after.st_ino && before.st_dev == after.st_dev);
	close(ns);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(ready[0]);
	close(ready[1]);
	unlink(path);
	hostsock_free(&ours);
	hostsock_free(&theirs);
}
END_TEST

START_TEST(add_bounds)
{
	struct hostsock_list l = { 0 };

	for (unsigned i = 0; i < HOSTSOCK_MAX; i++)
		ck_assert_int_eq(hostsock_add(&l, "/a"), 0);
	ck_assert_uint_eq(l.n, HOSTSOCK_MAX);
	ck_assert_int_eq(hostsock_add(&l, "/a"), -E2BIG);
	ck_assert_uint_eq(l.n, HOSTSOCK_MAX);
	hostsock_free(&l);
	/* The byte bound: long names reach it before the count does. */
	char name[4096];
	memset(name, 'x', sizeof(name) - 1);
	name[0] = '/';
	name[sizeof(name) - 1] = '\0';
	size_t fits = HOSTSOCK_MAX_BYTES / sizeof(name);
	for (size_t i = 0; i < fits; i++)
		ck_assert_int_eq(hostsock_add(&l, name), 0);
	ck_assert_int_eq(hostsock_add(&l, name), -E2BIG);
	hostsock_free(&l);
}
END_TEST

/*
 * Past the bounds a listing turns coarse instead of failing: a hundred thousand sockets,
 * one per directory, are hidden as the one directory that holds them, and sockets
 * elsewhere keep their own entries; a hundred thousand in one directory likewise.
 */
START_TEST(listing_coarse)
{
	struct hostsock_list l = { 0 };
	char path[64];

	ck_assert_int_eq(add_listed(&l, "/y/one.sock", strlen("/y/one.sock")), 0);
	for (unsigned i = 0; i < 100000; i++) {
		snprintf(path, sizeof(path), "/x/d%u/s.sock", i);
		ck_assert_int_eq(add_listed(&l, path, strlen(path)), 0);
	}
	ck_assert_int_eq(add_listed(&l, "/z/w/two.sock", strlen("/z/w/two.sock")), 0);
	ck_assert(l.coarse);
	ck_assert_uint_lt(l.n, HOSTSOCK_MAX);
	ck_assert_uint_eq(count(&l, "/x/"), 1);
	ck_assert_uint_eq(count(&l, "/y/one.sock"), 1);
	ck_assert_uint_eq(count(&l, "/z/w/two.sock"), 1);
	for (const char *p = hostsock_next(&l, NULL); p != NULL; p = hostsock_next(&l, p)) {
		bool is_dir = p[strlen(p) - 1] == '/';
		ck_assert_msg(!is_dir || strcmp(p, "/x/") == 0, "%s hidden whole", p);
	}
	hostsock_free(&l);

	/* Many sockets in one directory: that directory. */
	for (unsigned i = 0; i < 100000; i++) {
		snprintf(path, sizeof(path), "/m/n/s%u.sock", i);
		ck_assert_int_eq(add_listed(&l, path, strlen(path)), 0);
	}
	ck_assert(l.coarse);
	ck_assert_uint_eq(count(&l, "/m/n/"), 1);
	ck_assert_uint_eq(count(&l, "/m/"), 0);
	hostsock_free(&l);
}
END_TEST

static Suite *hostsock_suite(void)
{
	Suite *s = suite_create("hostsock");
	TCase *t = tcase_create("list");

	tcase_add_test(t, names_exact);
	tcase_add_test(t, other_netns);
	tcase_add_test(t, add_bounds);
	tcase_add_test(t, listing_coarse);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	char cmd[96];

	snprintf(dir, sizeof(dir), "/tmp/an-hostsock-test-XXXXXX");
	if (mkdtemp(dir) == NULL) {
		perror("hostsock test: mkdtemp");
		return EXIT_FAILURE;
	}
	int rc = unit_run(hostsock_suite());
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		rc = EXIT_FAILURE;
	return rc;
}
