/*
 * Unit tests for core/layout.c: the paths, exact fit at N and refusal at N+1,
 * the room a socket directory leaves for ids (at 63, 62, 1 and 0, with and
 * without an ingress socket),
 * and a removal that takes the sandbox's directory away completely (its
 * subdirectories too) without following a symlink planted anywhere in it;
 * the owner a registry record names, as `agentsnet run` reads it when the
 * daemon is gone.
 */
#include "../../../core/layout.c"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "tests/unit/unit.h"

START_TEST(paths)
{
	char out[64];

	ck_assert_int_eq(layout_sandbox_dir("/run/an", "box", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/run/an/sandboxes/box");
	ck_assert_int_eq(layout_registry_dir("/run/an", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/run/an/registry");
	ck_assert_int_eq(layout_registry_record("/run/an", "box", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/run/an/registry/box");
	ck_assert_int_eq(layout_cgroups_dir("/run/an", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/run/an/cgroups");
}
END_TEST

/* "/s/sandboxes/b" is 14 bytes: a buffer of 15 fits it, 14 refuses it whole. */
START_TEST(paths_at_limit)
{
	char out[15];

	ck_assert_int_eq(layout_sandbox_dir("/s", "b", out, 15), 0);
	ck_assert_str_eq(out, "/s/sandboxes/b");
	ck_assert_int_eq(layout_sandbox_dir("/s", "b", out, 14), -ENAMETOOLONG);
	ck_assert_str_eq(out, "");
	/* "/s/registry/b" is 13 bytes: it fits in 14, and one byte more does not. */
	ck_assert_int_eq(layout_registry_record("/s", "b", out, 14), 0);
	ck_assert_int_eq(layout_registry_record("/s", "bb", out, 14), -ENAMETOOLONG);
}
END_TEST

/*
 * The id room: "<dir>/sandboxes/<id>/ingress.sock" is 24 bytes beside <dir>
 * and <id> (egress.sock's path 23), and sun_path holds 107: a 20-byte
 * directory leaves an owned sandbox 63 (every id), 21 leaves 62 (and 63
 * without the ingress socket), 82 one byte (two), 83 none (one), and the
 * default directory more than any id needs.
 */
START_TEST(id_room)
{
	char socket_dir[128];
	const struct {
		size_t dir_len, owned, unowned;
	} cases[] = { { 20, 63, 64 }, { 21, 62, 63 }, { 82, 1, 2 },
		      { 83, 0, 1 },   { 84, 0, 0 },   { 127, 0, 0 } };

	for (size_t i = 0; i < AN_ARRAY_LEN(cases); i++) {
		memset(socket_dir, 'd', sizeof(socket_dir));
		socket_dir[0] = '/';
		socket_dir[cases[i].dir_len] = '\0';
		ck_assert_uint_eq(layout_sandbox_id_room(socket_dir, true), cases[i].owned);
		ck_assert_uint_eq(layout_sandbox_id_room(socket_dir, false), cases[i].unowned);
	}
	ck_assert_uint_ge(layout_sandbox_id_room(LAYOUT_SOCKET_DIR_DEFAULT, true), 63);
}
END_TEST

static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
}

START_TEST(remove_never_follows_links)
{
	char root[] = "/tmp/an-layout-XXXXXX";
	char path[256];
	char victim[256];

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/sandboxes", root);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/sandboxes/box", root);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(victim, sizeof(victim), "%s/victim", root);
	touch(victim);
	snprintf(path, sizeof(path), "%s/sandboxes/box/egress.sock", root);
	touch(path);
	snprintf(path, sizeof(path), "%s/sandboxes/box/link", root);
	ck_assert_int_eq(symlink(victim, path), 0);
	ck_assert_int_eq(layout_sandbox_dir_remove(root, "box"), 0);
	snprintf(path, sizeof(path), "%s/sandboxes/box", root);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(access(victim, F_OK), 0); /* the link went, not its target */
	/* Already gone is not an error. */
	ck_assert_int_eq(layout_sandbox_dir_remove(root, "box"), 0);
	/* Subdirectories go too, with what they hold, and links in them are not followed:
	 * a directory left behind would be reused by a later sandbox of the same id. */
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/sandboxes/box/sub", root);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/sandboxes/box/sub/deeper", root);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/sandboxes/box/sub/deeper/f", root);
	touch(path);
	snprintf(path, sizeof(path), "%s/sandboxes/box/sub/dirlink", root);
	ck_assert_int_eq(symlink(root, path), 0);
	ck_assert_int_eq(layout_sandbox_dir_remove(root, "box"), 0);
	snprintf(path, sizeof(path), "%s/sandboxes/box", root);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(access(victim, F_OK), 0);
	/* Past LAYOUT_REMOVE_DEPTH levels: refused, and the directory stays. */
	size_t len = (size_t)snprintf(path, sizeof(path), "%s/sandboxes/box", root);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	for (unsigned i = 0; i < LAYOUT_REMOVE_DEPTH; i++) {
		len += (size_t)snprintf(path + len, sizeof(path) - len, "/d");
		ck_assert_int_eq(mkdir(path, 0755), 0);
	}
	ck_assert_int_eq(layout_sandbox_dir_remove(root, "box"), -ELOOP);
	snprintf(path, sizeof(path), "%s/sandboxes/box", root);
	ck_assert_int_eq(access(path, F_OK), 0);
	/* A symlink in the directory's place is not followed. */
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(victim, sizeof(victim), "%s/victim-dir", root);
	ck_assert_int_eq(mkdir(victim, 0755), 0);
	snprintf(cmd, sizeof(cmd), "%s/f", victim);
	touch(cmd);
	ck_assert_int_eq(symlink(victim, path), 0);
	ck_assert_int_ne(layout_sandbox_dir_remove(root, "box"), 0);
	ck_assert_int_eq(access(cmd, F_OK), 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A record's owner as core/registry.c writes it; none; not a record; no record; a link not followed. */
START_TEST(record_owner)
{
	char root[] = "/tmp/an-layout-XXXXXX";
	char path[256], link[256];
	int pid = -1;
	unsigned long long ticks = 1;

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/box", root);
	ck_assert_int_eq(layout_registry_record_owner(path, &pid, &ticks), -ENOENT);
	/* A FIFO in its place: refused at once, never waited on. */
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(layout_registry_record_owner(path, &pid, &ticks), -EINVAL);
	ck_assert_int_eq(unlink(path), 0);
	const struct {
		const char *text;
		int ret, pid;
		unsigned long long ticks;
	} cases[] = {
		{ "profile p\nowner 4242 987654\nregistrant 0\n", 0, 4242, 987654 },
		{ "profile p\nregistrant 1000\nagent 1000\n", 0, 0, 0 },
		{ "profile p\nowner x 1\n", -EINVAL, 0, 0 },
		{ "profile p\nowner -3 1\n", -EINVAL, 0, 0 },
		{ "profile p\nowner 4242\n", -EINVAL, 0, 0 },
		{ "", -EINVAL, 0, 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fputs(cases[i].text, f);
		ck_assert_int_eq(fclose(f), 0);
		ck_assert_int_eq(layout_registry_record_owner(path, &pid, &ticks), cases[i].ret);
		ck_assert_int_eq(pid, cases[i].pid);
		ck_assert_uint_eq(ticks, cases[i].ticks);
	}
	snprintf(link, sizeof(link), "%s/link", root);
	ck_assert_int_eq(symlink(path, link), 0);
	ck_assert_int_eq(layout_registry_record_owner(link, &pid, &ticks), -ELOOP);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("layout");
	TCase *tc = tcase_create("layout");
	tcase_add_test(tc, paths);
	tcase_add_test(tc, paths_at_limit);
	tcase_add_test(tc, id_room);
	tcase_add_test(tc, remove_never_follows_links);
	tcase_add_test(tc, record_owner);
	suite_add_tcase(s, tc);
	return unit_run(s);
}
