/*
 * Unit tests for what the engine makes on disk (issue 15; core/listen.c):
 * directories and sockets made with their final mode and group, never fixed
 * up by path, and directories refused when they are not the daemon's own.
 *
 * engine_dir_secure makes a missing directory with exactly its mode under a
 * process umask of 077, and refuses (-EPERM, naming it) one writable by group
 * or others, one owned by another uid, and a symlink to a good directory.
 * engine_listen_unix makes a socket of mode 0666 and 0600, one of an
 * agent's uid (0600, that uid's), and with a group,
 * as bind makes it, under umask 077, while the process's umask, as another
 * thread sees it, never changes. In a socket's place, a live socket is
 * refused (at once, its backlog full or not) and anything else replaced, a
 * symlink never connected through; without /proc, by the name. sandbox_dir_make: a fresh registration
 * removes what is in its place (a subdirectory, a link) and makes its own; a
 * kept one (the policy file's, the registry's) is refused when it is
 * another uid's or writable by others, and kept when it is ours. The
 * directories above the socket directory: refused when another uid's or
 * writable by others without the sticky bit.
 * The uid and group cases need root (skipped otherwise, unit_skip() recording why).
 */
#include "../../../core/listen.c"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include "core/limits.h"
#include "tests/unit/unit.h"

static char root[64];

static void path_of(char *out, size_t cap, const char *rel)
{
	snprintf(out, cap, "%s/%s", root, rel);
}

START_TEST(dir_made_with_its_mode)
{
	char path[128];
	struct stat st;

	path_of(path, sizeof(path), "a/b");
	mode_t old = umask(077);
	int fd = engine_dir_secure(path, 0755);
	umask(old);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0755);
	/* Again: existing and ours is accepted. */
	fd = engine_dir_secure(path, 0755);
	ck_assert_int_ge(fd, 0);
	close(fd);
}
END_TEST

START_TEST(dir_refused)
{
	char path[128], link[128];

	path_of(path, sizeof(path), "open");
	ck_assert_int_eq(mkdir(path, 0755), 0);
	ck_assert_int_eq(chmod(path, 0777), 0);
	ck_assert_int_eq(engine_dir_secure(path, 0755), -EPERM);
	ck_assert_int_eq(chmod(path, 0775), 0);
	ck_assert_int_eq(engine_dir_secure(path, 0755), -EPERM);
	ck_assert_int_eq(chmod(path, 0755), 0);
	int fd = engine_dir_secure(path, 0755);
	ck_assert_int_ge(fd, 0);
	close(fd);
	path_of(link, sizeof(link), "link");
	ck_assert_int_eq(symlink(path, link), 0);
	ck_assert_int_lt(engine_dir_secure(link, 0755), 0);
	if (geteuid() != 0) {
		unit_skip("its other-uid case needs root");
		return;
	}
	ck_assert_int_eq(chown(path, 65534, 65534), 0);
	ck_assert_int_eq(engine_dir_secure(path, 0755), -EPERM);
}
END_TEST

static mode_t seen_umask;

static void *umask_reader(void *arg)
{
	(void)arg;
	seen_umask = umask(0);
	umask(seen_umask);
	return NULL;
}

START_TEST(socket_made_with_its_mode)
{
	char dir[128], path[160];
	struct stat st;
	pthread_t t;

	path_of(dir, sizeof(dir), "socks");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	mode_t old = umask(077);
	/* In a thread of its own, as the control thread would: the process's umask stays. */
	snprintf(path, sizeof(path), "%s/egress.sock", dir);
	int fd = engine_listen_unix(path, 0666, (uid_t)-1, (gid_t)-1, true);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0666);
	close(fd);
	snprintf(path, sizeof(path), "%s/private.sock", dir);
	fd = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, false);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	close(fd);
	ck_assert_int_eq(pthread_create(&t, NULL, umask_reader, NULL), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	umask(old);
	ck_assert_uint_eq(seen_umask, 077);
	if (geteuid() != 0) {
		unit_skip("its group case needs root");
		return;
	}
	/* An agent's: its uid's, 0600 (bind makes it the daemon's, then lchown). */
	snprintf(path, sizeof(path), "%s/agent.sock", dir);
	fd = engine_listen_unix(path, 0600, 65534, (gid_t)-1, true);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert_uint_eq(st.st_uid, 65534);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	close(fd);
	snprintf(path, sizeof(path), "%s/control.sock", dir);
	fd = engine_listen_unix(path, 0660, (uid_t)-1, 4243, false);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert_uint_eq(st.st_gid, 4243);
	ck_assert_uint_eq(st.st_mode & 0777, 0660);
	ck_assert_uint_eq(getegid(), 0);
	close(fd);
}
END_TEST

/* The directories above the socket directory: root's or ours, unwritable or sticky. */
START_TEST(ancestors_checked)
{
	char a[128], b[160];

	ck_assert_int_eq(engine_dir_ancestors_secure("/run/agentsnet"), 0);
	path_of(a, sizeof(a), "up");
	ck_assert_int_eq(mkdir(a, 0755), 0);
	snprintf(b, sizeof(b), "%s/sock", a);
	ck_assert_int_eq(engine_dir_ancestors_secure(b), 0);
	ck_assert_int_eq(chmod(a, 0777), 0);
	ck_assert_int_eq(engine_dir_ancestors_secure(b), -EPERM);
	ck_assert_int_eq(chmod(a, 01777), 0); /* sticky, as /tmp: nobody renames another's */
	ck_assert_int_eq(engine_dir_ancestors_secure(b), 0);
	ck_assert_int_eq(chmod(a, 0755), 0);
	ck_assert_int_eq(engine_dir_ancestors_secure("relative/x"), -EINVAL);
	if (geteuid() != 0) {
		unit_skip("its other-owner case needs root");
		return;
	}
	ck_assert_int_eq(chown(a, 65534, 65534), 0);
	ck_assert_int_eq(engine_dir_ancestors_secure(b), -EPERM);
	ck_assert_int_eq(chown(a, 0, 0), 0);
}
END_TEST

START_TEST(sandbox_dir_fresh_or_kept)
{
	char sock_dir[128], d[192], sub[224];
	struct stat st;

	path_of(sock_dir, sizeof(sock_dir), "run");
	ck_assert_int_eq(mkdir(sock_dir, 0755), 0);
	snprintf(d, sizeof(d), "%s/sandboxes/box", sock_dir);
	/* Fresh, over a leftover with a subdirectory and a link: replaced. */
	int fd = engine_dir_secure(sock_dir, 0755);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(sub, sizeof(sub), "%s/sandboxes", sock_dir);
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	ck_assert_int_eq(mkdir(d, 0777), 0);
	ck_assert_int_eq(chmod(d, 0777), 0);
	snprintf(sub, sizeof(sub), "%s/sub", d);
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	snprintf(sub, sizeof(sub), "%s/egress.sock", d);
	ck_assert_int_eq(symlink(root, sub), 0);
	ck_assert_int_eq(sandbox_dir_make(sock_dir, "box", true, d), 0);
	ck_assert_int_eq(lstat(d, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0755);
	ck_assert_int_eq(lstat(sub, &st), -1);
	/* Kept: ours, accepted; writable by others, refused. */
	ck_assert_int_eq(sandbox_dir_make(sock_dir, "box", false, d), 0);
	ck_assert_int_eq(chmod(d, 0757), 0);
	ck_assert_int_eq(sandbox_dir_make(sock_dir, "box", false, d), -EPERM);
	ck_assert_int_eq(chmod(d, 0755), 0);
	if (geteuid() != 0) {
		unit_skip("its other-uid case needs root");
		return;
	}
	ck_assert_int_eq(chown(d, 65534, 65534), 0);
	ck_assert_int_eq(sandbox_dir_make(sock_dir, "box", false, d), -EPERM);
	ck_assert_int_eq(sandbox_dir_make(sock_dir, "box", true, d), 0);
	ck_assert_int_eq(lstat(d, &st), 0);
	ck_assert_uint_eq(st.st_uid, 0);
}
END_TEST

/*
 * A name in a socket's place: a live socket is refused (never unlinked), a
 * stale one replaced, and a symlink (to a live socket elsewhere) or a regular
 * file removed and replaced without the daemon connecting through it.
 */
START_TEST(socket_place_claimed)
{
	char dir[128], path[160], elsewhere[160];
	struct stat st;

	path_of(dir, sizeof(dir), "claim");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/egress.sock", dir);
	int live = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true);
	ck_assert_int_ge(live, 0);
	ck_assert_int_eq(engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true), -EADDRINUSE);
	int probe = accept4(live, NULL, NULL, SOCK_CLOEXEC); /* the claim's probe, already closed */
	ck_assert_int_ge(probe, 0);
	close(probe);
	close(live);
	int fd = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true); /* stale now */
	ck_assert_int_ge(fd, 0);
	close(fd);

	path_of(elsewhere, sizeof(elsewhere), "host.sock");
	int host = engine_listen_unix(elsewhere, 0600, (uid_t)-1, (gid_t)-1, true);
	ck_assert_int_ge(host, 0);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(symlink(elsewhere, path), 0);
	fd = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	/* The host's socket was never connected to, and is still there. */
	ck_assert_int_eq(accept4(host, NULL, NULL, SOCK_CLOEXEC), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(lstat(elsewhere, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	close(host);
	close(fd);

	/* A datagram socket bound there is someone's: refused, left. */
	ck_assert_int_eq(unlink(path), 0);
	struct sockaddr_un dgram_at = unit_unix_addr(path);
	int dgram = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(dgram, 0);
	ck_assert_int_eq(bind(dgram, (struct sockaddr *)&dgram_at, sizeof(dgram_at)), 0);
	ck_assert_int_eq(engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true), -EADDRINUSE);
	ck_assert_int_eq(lstat(path, &st), 0);
	close(dgram);

	ck_assert_int_eq(unlink(path), 0);
	int file = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(file, 0);
	close(file);
	fd = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true);
	ck_assert_int_ge(fd, 0);
	close(fd);
}
END_TEST

/*
 * A live socket whose backlog is full is live still: refused at once
 * (-EADDRINUSE), the claim never waiting for room in its queue.
 */
START_TEST(socket_claim_full_backlog)
{
	char dir[128], path[160];
	int queued[64];
	unsigned n = 0;

	path_of(dir, sizeof(dir), "full");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/control.sock", dir);
	struct sockaddr_un sun = unit_unix_addr(path);
	int live = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(live, 0);
	ck_assert_int_eq(bind(live, (struct sockaddr *)&sun, sizeof(sun)), 0);
	ck_assert_int_eq(listen(live, 0), 0);
	for (; n < 64; n++) {
		queued[n] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		ck_assert_int_ge(queued[n], 0);
		if (connect(queued[n], (struct sockaddr *)&sun, sizeof(sun)) != 0) {
			ck_assert_int_eq(errno, EAGAIN);
			close(queued[n]);
			break;
		}
	}
	ck_assert_uint_lt(n, 64); /* the backlog is full */
	ck_assert_int_eq(engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true), -EADDRINUSE);
	for (unsigned i = 0; i < n; i++)
		close(queued[i]);
	close(live);
}
END_TEST

/*
 * Without /proc (a mount namespace of the test's own, /proc detached) a
 * stale socket is still told from a live one: replaced, and a live one
 * refused.
 */
START_TEST(socket_claim_without_proc)
{
	char dir[128], path[160];

	if (geteuid() != 0) {
		unit_skip("detaching /proc needs root");
		return;
	}
	path_of(dir, sizeof(dir), "noproc");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/egress.sock", dir);
	int fd = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true);
	ck_assert_int_ge(fd, 0);
	close(fd); /* stale now */
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		if (unshare(CLONE_NEWNS) != 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    umount2("/proc", MNT_DETACH) != 0 || access("/proc/self/fd", F_OK) == 0)
			_exit(2);
		int again = engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true);
		if (again < 0)
			_exit(3);
		_exit(engine_listen_unix(path, 0600, (uid_t)-1, (gid_t)-1, true) == -EADDRINUSE
			  ? 0
			  : 4);
	}
	int status = 0;
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

/* Each listener is a descriptor: the bound is what the open-files limit leaves, at N and N+1. */
START_TEST(sandboxes_bounded_by_descriptors)
{
	uint64_t held = LIMITS_FDS_RESERVED + 2u * (2u * 64u + LIMITS_FDS_PER_WORKER);

	ck_assert_uint_eq(engine_sandboxes_max_for(20000, 2, 64), 20000 - held);
	ck_assert_uint_eq(engine_sandboxes_max_for(held + 1, 2, 64), 1);
	ck_assert_uint_eq(engine_sandboxes_max_for(held, 2, 64), 0);
	ck_assert_uint_eq(engine_sandboxes_max_for(0, 2, 64), 0);
	ck_assert_uint_eq(engine_sandboxes_max_for(held + LIMITS_SANDBOXES_MAX, 2, 64),
			  LIMITS_SANDBOXES_MAX);
	ck_assert_uint_eq(engine_sandboxes_max_for(RLIM_INFINITY, 64, 4096), LIMITS_SANDBOXES_MAX);
	/* More pipes leave fewer listeners. */
	ck_assert_uint_eq(engine_sandboxes_max_for(20000, 2, 65), 20000 - held - 4);
}
END_TEST

int main(void)
{
	char cmd[96];

	snprintf(root, sizeof(root), "/tmp/an-engine-files-XXXXXX");
	if (mkdtemp(root) == NULL) {
		perror("listen test: mkdtemp");
		return EXIT_FAILURE;
	}
	Suite *s = suite_create("listen");
	TCase *t = tcase_create("files");
	tcase_add_test(t, dir_made_with_its_mode);
	tcase_add_test(t, dir_refused);
	tcase_add_test(t, socket_made_with_its_mode);
	tcase_add_test(t, socket_place_claimed);
	tcase_add_test(t, socket_claim_full_backlog);
	tcase_add_test(t, socket_claim_without_proc);
	tcase_add_test(t, ancestors_checked);
	tcase_add_test(t, sandbox_dir_fresh_or_kept);
	tcase_add_test(t, sandboxes_bounded_by_descriptors);
	suite_add_tcase(s, t);
	int rc = unit_run(s);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		rc = EXIT_FAILURE;
	return rc;
}
