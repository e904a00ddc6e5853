/*
 * Unit tests for the sandbox table's bookkeeping (core/engine.c):
 * engine_sandbox_add and engine_sandbox_remove on a real engine
 * (tests/unit/core/enginetest.h: engine_start with one worker, a stub term),
 * with a small policy that has a profile anyone may use, one
 * only root may, and a sandbox of the policy file.
 *
 * The .c is included, so registered_by (the per-user count) is reached
 * directly. Checked: the id's rule (length 63 and 64, the first byte, each
 * byte outside the set), a missing profile, a duplicate, the per-user limit
 * at N and N+1 (and per user), who may register for which uid, removal by
 * the registrant or root only, a sandbox of the file that `rm` may not
 * remove, the uids of daemon.sandbox_uids (given by the pool only, at its
 * last uid and one past it), and a full table (its bound from
 * RLIMIT_NOFILE: engine_sandboxes_max_for) at N and N+1, with a freed slot
 * reused; records a restart could not adopt, kept with their uids, and left
 * as they were by a failed add of their id (its record unwritable, any
 * step starved of descriptors), kept through a start given their sockets
 * back, and their registrant's alone (or root's) to add again or remove;
 * a new id's failed add leaving nothing; an id longer than the socket
 * directory leaves room for, refused before anything is made.
 */
#include "../../../core/engine.c"

#include <check.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "core/audit.h"
#include "core/config.h"
#include "policy/policy.h"
#include "tests/unit/core/enginetest.h"
#include "tests/unit/unit.h"

#define ET_RULE "    - host: a.test\n      tier: passthrough\n      owner: o\n      reason: r\n"
#define ET_POLICY                                                                                 \
	"version: 1\nsandboxes:\n  - {id: f1, profile: p}\nprofiles:\n  p:\n    rules:\n" ET_RULE \
	"  shut:\n    users: [root]\n    rules:\n" ET_RULE
/* How many sandboxes the full-table test's RLIMIT_NOFILE leaves room for (f1 included). */
#define ET_MAX 3u
/* The descriptors the engine holds beside its sandboxes' (engine_sandboxes_max_for): 1 worker,
 * 4 pipes. */
#define ET_FDS_HELD (LIMITS_FDS_RESERVED + 1u * (2u * 4u + LIMITS_FDS_PER_WORKER))

static struct enginetest et; /* the engine under test, its config and its audit log */
static char dir[] = "/tmp/ane-XXXXXX";
/* The socket directory's name in <dir>: "sock" makes it 20 bytes, the most that leaves room for
 * a 63-byte id (layout_sandbox_id_room). */
static const char *sockets = "sock";

/*
 * Empties the suite's directory (made by main, removed after every test ran,
 * so that a failed test, whose teardown does not run, leaves nothing behind).
 */
static void dir_clear(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/sock* '%s/audit.log'", dir, dir);
	ck_assert_int_eq(system(cmd), 0);
}

static const struct verdict_caller root = { .uid = 0 };
static const struct verdict_caller u = { .uid = 4242, .gid = 4242 };
static const struct verdict_caller other = { .uid = 4343, .gid = 4343 };

/* Loads the policy and starts the engine; <nofile> (0: unchanged) is RLIMIT_NOFILE's soft limit. */
static void start(rlim_t nofile)
{
	dir_clear();
	if (nofile != 0) {
		struct rlimit rl;
		ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
		ck_assert_uint_le(nofile, rl.rlim_max);
		rl.rlim_cur = nofile;
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	enginetest_prepare(&et, dir, sockets, ET_POLICY, NULL);
	et.cfg.sandboxes_per_user = 2;
	enginetest_start(&et);
}

static void setup(void)
{
	start(0);
}

static void teardown(void)
{
	ck_assert_int_eq(engine_stop(&et.eng), 0);
	enginetest_release(&et);
	dir_clear();
}

/* engine_sandbox_add of <id> on <profile> by <who> for ENGINE_AGENT_ANY: its result. */
static int add(const char *id, const char *profile, const struct verdict_caller *who)
{
	char out[256];
	uint32_t agent = ENGINE_AGENT_ANY;

	return engine_sandbox_add(&et.eng, id, profile, NULL, who, &agent, out, sizeof(out), NULL);
}

static int rm(const char *id, const struct verdict_caller *who)
{
	uint32_t registrant = 0;

	return engine_sandbox_remove(&et.eng, id, who, NULL, &registrant);
}

/* engine_sandbox_add of <id> on "p" by <who>, tied to process <owner>: its result. */
static int add_tied(const char *id, const struct engine_owner *owner,
		    const struct verdict_caller *who)
{
	char out[256];
	uint32_t agent = ENGINE_AGENT_ANY;

	return engine_sandbox_add(&et.eng, id, "p", owner, who, &agent, out, sizeof(out), NULL);
}

/* `sandbox rm <id> owned` from process <owner>, as <who>: its result. */
static int rm_tied(const char *id, const struct engine_owner *owner,
		   const struct verdict_caller *who)
{
	return engine_sandbox_remove(&et.eng, id, who, owner, NULL);
}

/* The sandbox <id> is in the table, active, and its socket's directory is there. */
static void expect_active(const char *id)
{
	char path[256];
	struct stat st;

	pthread_mutex_lock(&et.eng.lock);
	int idx = sandbox_find(&et.eng, id);
	bool active = idx >= 0 && et.eng.sandboxes[idx]->state == ENGINE_SANDBOX_ACTIVE;
	pthread_mutex_unlock(&et.eng.lock);
	ck_assert_msg(active, "%s is not active", id);
	snprintf(path, sizeof(path), "%s/sandboxes/%s/egress.sock", et.cfg.socket_dir, id);
	ck_assert_msg(stat(path, &st) == 0 && S_ISSOCK(st.st_mode), "%s", path);
}

static bool is_there(const char *id)
{
	pthread_mutex_lock(&et.eng.lock);
	int idx = sandbox_find(&et.eng, id);
	pthread_mutex_unlock(&et.eng.lock);
	return idx >= 0;
}

/* The id: [A-Za-z0-9_.-]{1,63}, not starting with '.'. */
START_TEST(test_id)
{
	char id[65];
	char out[256];
	uint32_t agent = ENGINE_AGENT_ANY;

	memset(id, 'a', 64);
	id[63] = '\0';
	ck_assert_int_eq(add(id, "p", NULL), 0); /* 63 bytes */
	expect_active(id);
	id[63] = 'b';
	id[64] = '\0';
	ck_assert_int_eq(add(id, "p", NULL), -EINVAL); /* 64 */
	ck_assert_int_eq(add("", "p", NULL), -EINVAL);
	ck_assert_int_eq(add(".a", "p", NULL), -EINVAL);
	ck_assert_int_eq(add("a.", "p", NULL), 0);
	ck_assert_int_eq(add("Az09_.-", "p", NULL), 0);
	const char *bad[] = {
		"a/b", "a b", "a\\b", "a:b", "a@b", "a\x7f", "a\xc3\xa9", "..", "a~"
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(add(bad[i], "p", NULL) == -EINVAL, "%s", bad[i]);
	ck_assert(!engine_sandbox_id_valid(".."));
	/* A refused id sets no ingress socket. */
	int fd = 99;
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "a/b", "p", NULL, NULL, &agent, out, sizeof(out), &fd),
	    -EINVAL);
	ck_assert_int_eq(fd, -1);
}
END_TEST

/* A missing profile, a duplicate id (the policy file's too), then removal and re-adding. */
START_TEST(test_profile_and_duplicate)
{
	ck_assert_int_eq(add("s1", "nope", NULL), -ENOENT);
	ck_assert(!is_there("s1"));
	ck_assert_int_eq(add("s1", "p", NULL), 0);
	expect_active("s1");
	ck_assert_int_eq(add("s1", "p", NULL), -EEXIST);
	ck_assert_int_eq(add("s1", "shut", NULL), -EEXIST);
	ck_assert_int_eq(add("f1", "p", NULL), -EEXIST); /* the policy file's */
	ck_assert_int_eq(rm("s1", NULL), 0);
	ck_assert(!is_there("s1"));
	ck_assert_int_eq(rm("s1", NULL), -ENOENT);
	ck_assert_int_eq(add("s1", "p", NULL), 0);
	ck_assert_int_eq(rm("nope", NULL), -ENOENT);
	ck_assert_int_eq(rm("f1", &root), -EPERM); /* the file's: a reload removes it */
	ck_assert(is_there("f1"));
}
END_TEST

/*
 * Who may: a profile that does not admit the caller, another user's uid,
 * daemon.sandboxes_per_user (2) at N and N+1, counted per user, and only
 * for sandboxes still there; root is not counted.
 */
START_TEST(test_per_user)
{
	char out[256];
	uint32_t agent = other.uid;

	ck_assert_int_eq(add("x", "shut", &u), -EACCES);
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "x", "p", NULL, &u, &agent, out, sizeof(out), NULL),
	    -EACCES);
	agent = u.uid;
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "u1", "p", NULL, &u, &agent, out, sizeof(out), NULL), 0);
	ck_assert_int_eq(add("u2", "p", &u), 0);
	ck_assert_uint_eq(registered_by(&et.eng, u.uid), 2);
	ck_assert_int_eq(add("u3", "p", &u), -EDQUOT);
	ck_assert(!is_there("u3"));
	ck_assert_int_eq(add("o1", "p", &other), 0);
	ck_assert_int_eq(add("o2", "p", &other), 0);
	ck_assert_int_eq(add("r1", "shut", &root), 0);
	ck_assert_int_eq(add("r2", "p", &root), 0);
	ck_assert_int_eq(add("r3", "p", NULL), 0);
	ck_assert_int_eq(rm("u1", &u), 0);
	ck_assert_uint_eq(registered_by(&et.eng, u.uid), 1);
	ck_assert_int_eq(add("u3", "p", &u), 0);
	ck_assert_int_eq(add("u4", "p", &u), -EDQUOT);
}
END_TEST

/* Removal: by the user who registered it or root; another user learns whose it is. */
START_TEST(test_owner_only_removal)
{
	uint32_t registrant = 0;

	ck_assert_int_eq(add("u1", "p", &u), 0);
	ck_assert_int_eq(add("u2", "p", &u), 0);
	ck_assert_int_eq(add("r1", "p", &root), 0);
	ck_assert_int_eq(engine_sandbox_remove(&et.eng, "u1", &other, NULL, &registrant), -EACCES);
	ck_assert_uint_eq(registrant, u.uid);
	expect_active("u1");
	ck_assert_int_eq(rm("r1", &u), -EACCES);
	ck_assert(is_there("r1"));
	ck_assert_int_eq(rm("u1", &u), 0);
	ck_assert_int_eq(rm("u2", &root), 0);
	ck_assert_int_eq(rm("r1", NULL), 0); /* the daemon itself (the orphans' reaper) */
	ck_assert(!is_there("u1") && !is_there("u2") && !is_there("r1"));
}
END_TEST

/*
 * daemon.sandbox_uids (the default pool): root gets a new uid of it, which
 * no one may then ask for by number (-ERANGE), nor a second sandbox share;
 * a user may not ask for a new one (-EACCES).
 */
START_TEST(test_pool_uid)
{
	char out[256];
	uint32_t agent = ENGINE_AGENT_NEW, again = ENGINE_AGENT_NEW;

	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "n1", "p", NULL, &root, &agent, out, sizeof(out), NULL), 0);
	ck_assert_uint_ge(agent, et.cfg.sandbox_uid_first);
	ck_assert_uint_lt(agent, et.cfg.sandbox_uid_first + et.cfg.sandbox_uid_count);
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "n2", "p", NULL, &root, &again, out, sizeof(out), NULL), 0);
	ck_assert_uint_ne(again, agent); /* one uid, one sandbox */
	uint32_t asked = agent;
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "n3", "p", NULL, &root, &asked, out, sizeof(out), NULL),
	    -ERANGE);
	asked = et.cfg.sandbox_uid_first + et.cfg.sandbox_uid_count -
		1; /* the pool's last, free or not */
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "n3", "p", NULL, &root, &asked, out, sizeof(out), NULL),
	    -ERANGE);
	asked = et.cfg.sandbox_uid_first + et.cfg.sandbox_uid_count; /* one past it */
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "n3", "p", NULL, &root, &asked, out, sizeof(out), NULL), 0);
	asked = ENGINE_AGENT_NEW;
	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, "n4", "p", NULL, &u, &asked, out, sizeof(out), NULL),
	    -EACCES);
	ck_assert(!is_there("n4"));
}
END_TEST

/*
 * A full table: RLIMIT_NOFILE leaves room for ET_MAX sandboxes
 * (engine_sandboxes_max_for), f1 one of them; the ET_MAX-th passes, the
 * next is refused -ENOSPC; a removal frees a slot that the next add reuses.
 */
START_TEST(test_table_full)
{
	start(ET_FDS_HELD + ET_MAX);
	ck_assert_uint_eq(et.eng.sandboxes_max, ET_MAX);
	ck_assert_int_eq(add("s1", "p", NULL), 0);
	ck_assert_int_eq(add("s2", "p", NULL), 0);
	ck_assert_int_eq(add("s3", "p", NULL), -ENOSPC);
	ck_assert(!is_there("s3"));
	ck_assert_int_eq(rm("s1", NULL), 0);
	uint32_t used = et.eng.sandbox_used;
	ck_assert_int_eq(add("s3", "p", NULL), 0);
	ck_assert_uint_eq(et.eng.sandbox_used, used); /* s1's slot, not a new one */
	expect_active("s3");
	ck_assert_int_eq(add("s4", "p", NULL), -ENOSPC);
}
END_TEST

/* The text of <path>, a small file, into <text> (NUL-terminated); its length, or -1. */
static ssize_t file_text(const char *path, char *text, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	size_t n = fread(text, 1, cap - 1, f);
	fclose(f);
	text[n] = '\0';
	return (ssize_t)n;
}

/* Stops the engine and starts it again on the same directory (<nofile>: 0, or RLIMIT_NOFILE). */
static void restart(rlim_t nofile)
{
	ck_assert_int_eq(engine_stop(&et.eng), 0);
	enginetest_release(&et);
	enginetest_prepare(&et, dir, sockets, ET_POLICY, NULL);
	if (nofile != 0) {
		struct rlimit rl;
		ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
		rl.rlim_cur = nofile;
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	enginetest_start(&et);
}

/* engine_sandbox_add of <id> on p by root, with a new uid of the pool: that uid. */
static uint32_t add_pooled(const char *id)
{
	char out[256];
	uint32_t uid = ENGINE_AGENT_NEW;

	ck_assert_int_eq(
	    engine_sandbox_add(&et.eng, id, "p", NULL, &root, &uid, out, sizeof(out), NULL), 0);
	return uid;
}

/*
 * A restart on a full disk (the file size limit at 8 bytes across it) re-adopts
 * a run-time sandbox: its record, which has its token, is not written again,
 * and stays byte for byte.
 */
START_TEST(test_readoption_full_disk)
{
	char record[256], before[512], after[512];
	struct rlimit saved, tiny;

	add_pooled("keep1");
	snprintf(record, sizeof(record), "%s/registry/keep1", et.cfg.socket_dir);
	ck_assert_int_gt(file_text(record, before, sizeof(before)), 8);
	ck_assert(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
	tiny = saved;
	tiny.rlim_cur = 8; /* no record fits */
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
	restart(0);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &saved), 0);
	expect_active("keep1");
	ck_assert_int_eq(file_text(record, after, sizeof(after)), (ssize_t)strlen(before));
	ck_assert_str_eq(after, before);
}
END_TEST

/*
 * A restart with room for fewer sandboxes than its records (RLIMIT_NOFILE:
 * f1 and one more) adopts what fits; a record it could not adopt stays whole,
 * with its directory, and its uid of daemon.sandbox_uids stays given (no new
 * sandbox gets it: its agent may run on as it). A `sandbox add` of that id
 * that fails (its record unwritable) leaves the record there too.
 */
START_TEST(test_readoption_not_adopted)
{
	char record[256], before[512], after[512];
	uint32_t uid[2];

	start(0);
	uid[0] = add_pooled("s1");
	uid[1] = add_pooled("s2");
	restart(ET_FDS_HELD + 2);
	ck_assert(is_there("s1") != is_there("s2"));
	int lost = is_there("s1") ? 1 : 0;
	const char *lost_id = lost == 0 ? "s1" : "s2";
	snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, lost_id);
	ck_assert_int_gt(file_text(record, before, sizeof(before)), 8);
	snprintf(after, sizeof(after), "agent %u\n", uid[lost]);
	ck_assert_ptr_nonnull(strstr(before, after));
	pthread_mutex_lock(&et.eng.lock);
	int taken = uidpool_take(&et.eng.uids, uid[lost]);
	pthread_mutex_unlock(&et.eng.lock);
	ck_assert_int_ne(taken, 0); /* given already: to the record */

	/* Room again (the one adopted removed), and the record can't be written: the add of
	 * the kept id fails and its record stays as it was. */
	ck_assert_int_eq(rm(lost == 0 ? "s2" : "s1", &root), 0);
	struct rlimit saved, tiny;
	ck_assert(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
	tiny = saved;
	tiny.rlim_cur = 8;
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
	int rc = add(lost_id, "p", &root);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &saved), 0);
	ck_assert_int_eq(engine_err_errno(rc), EFBIG);
	ck_assert_int_eq(file_text(record, after, sizeof(after)), (ssize_t)strlen(before));
	ck_assert_str_eq(after, before);
}
END_TEST

/* Descriptors taken by fds_starve, and the limit it lowered, for fds_release. */
struct starved {
	int spare[64];
	unsigned taken;
	struct rlimit saved;
};

/*
 * Takes every descriptor below a tight soft RLIMIT_NOFILE but <free_fds>, so
 * that the next steps of the test have that many and no more.
 */
static void fds_starve(struct starved *st, unsigned free_fds)
{
	ck_assert_uint_lt(free_fds, AN_ARRAY_LEN(st->spare));
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &st->saved), 0);
	int lowest = dup(0);
	ck_assert_int_ge(lowest, 0);
	close(lowest);
	struct rlimit tight = st->saved;
	tight.rlim_cur = (rlim_t)lowest + AN_ARRAY_LEN(st->spare);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &tight), 0);
	st->taken = 0;
	while (st->taken < AN_ARRAY_LEN(st->spare) && (st->spare[st->taken] = dup(0)) >= 0)
		st->taken++;
	ck_assert_uint_eq(st->taken, AN_ARRAY_LEN(st->spare)); /* no hole below the limit */
	for (unsigned i = 0; i < free_fds; i++)
		close(st->spare[--st->taken]);
}

/* Gives back what fds_starve took, and the limit. */
static void fds_release(struct starved *st)
{
	while (st->taken > 0)
		close(st->spare[--st->taken]);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &st->saved), 0);
}

/*
 * With run-time sandboxes <first> and <second> registered by <who>: a restart
 * with room for f1 and one of them adopts one, which <who> then removes. 0
 * when the start kept <first>'s record (did not adopt it), 1 for <second>'s.
 */
static int restart_keeping_one(const char *first, const char *second,
			       const struct verdict_caller *who)
{
	restart(ET_FDS_HELD + 2);
	ck_assert(is_there(first) != is_there(second));
	int kept = is_there(first) ? 1 : 0;
	ck_assert_int_eq(rm(kept == 0 ? second : first, who), 0);
	return kept;
}

/*
 * engine_sandbox_add of owned sandbox <id> (its ingress socket wanted) by root
 * for a new uid, with <free_fds> descriptors free (fds_starve): its result. A
 * failure hands back no ingress descriptor; a success's is closed here.
 */
static int add_owned_starved(const char *id, unsigned free_fds)
{
	struct starved st;
	char out[256];

	fds_starve(&st, free_fds);
	uint32_t agent = ENGINE_AGENT_NEW;
	int ingress = 0;
	int rc =
	    engine_sandbox_add(&et.eng, id, "p", NULL, &root, &agent, out, sizeof(out), &ingress);
	fds_release(&st);
	if (rc == 0) {
		ck_assert_int_ge(ingress, 0);
		close(ingress);
	} else {
		ck_assert_msg(engine_err_errno(rc) == EMFILE, "%u free: %d", free_fds, rc);
		ck_assert_int_eq(ingress, -1);
	}
	return rc;
}

/* Whether <path> is there (a link not followed). */
static bool path_there(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/*
 * An owned sandbox's add over a record a restart could not adopt, with every
 * step in turn starved of descriptors (0, 1, 2, ... left free): each add that
 * fails leaves the record as it was, hands back no ingress descriptor and
 * leaves no sandbox; the one that succeeds replaces the record. The record is
 * written last, so no failed step after it replaces it.
 */
START_TEST(test_kept_record_failed_add)
{
	char id[2][3] = { "s1", "s2" };
	char record[256], before[512], after[512];

	start(0);
	add_pooled(id[0]);
	add_pooled(id[1]);
	int lost = restart_keeping_one(id[0], id[1], &root);
	snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, id[lost]);
	ck_assert_int_gt(file_text(record, before, sizeof(before)), 8);

	unsigned failed = 0;
	while (add_owned_starved(id[lost], failed) != 0) {
		failed++;
		ck_assert(!is_there(id[lost]));
		ck_assert_int_eq(file_text(record, after, sizeof(after)), (ssize_t)strlen(before));
		ck_assert_str_eq(after, before);
	}
	ck_assert_uint_ge(failed, 2); /* the egress and the ingress socket's steps at least */
	ck_assert_int_gt(file_text(record, after, sizeof(after)), 8);
	ck_assert_str_ne(after, before);
}
END_TEST

/*
 * A new owned sandbox's add with every step in turn starved of descriptors:
 * each that fails leaves nothing, neither its directory nor a record.
 */
START_TEST(test_new_failed_add_leaves_nothing)
{
	char dir_path[256], record[256];

	snprintf(dir_path, sizeof(dir_path), "%s/sandboxes/n1", et.cfg.socket_dir);
	snprintf(record, sizeof(record), "%s/registry/n1", et.cfg.socket_dir);
	unsigned failed = 0;
	while (add_owned_starved("n1", failed) != 0) {
		failed++;
		ck_assert(!is_there("n1"));
		ck_assert_msg(!path_there(dir_path), "%u free: %s left", failed - 1, dir_path);
		ck_assert_msg(!path_there(record), "%u free: %s left", failed - 1, record);
	}
	ck_assert_uint_ge(failed, 2);
	expect_active("n1");
	ck_assert(path_there(record));
}
END_TEST

/* Makes a kept record: <who> adds both <id>s, then restart_keeping_one. */
static int keep_one(char id[2][3], const struct verdict_caller *who)
{
	start(0);
	ck_assert_int_eq(add(id[0], "p", who), 0);
	ck_assert_int_eq(add(id[1], "p", who), 0);
	return restart_keeping_one(id[0], id[1], who);
}

/*
 * `sandbox rm` of a kept record's id: another user's is refused (forbidden,
 * naming the registrant), the record there still; its registrant's removes
 * the record and the directory; then the id is no sandbox's.
 */
START_TEST(test_kept_record_rm)
{
	char id[2][3] = { "u1", "u2" };
	char record[256], sandbox_dir[256];
	uint32_t registrant = 0;

	int lost = keep_one(id, &u);
	snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, id[lost]);
	snprintf(sandbox_dir, sizeof(sandbox_dir), "%s/sandboxes/%s", et.cfg.socket_dir, id[lost]);
	ck_assert(path_there(record) && path_there(sandbox_dir));
	ck_assert_int_eq(engine_sandbox_remove(&et.eng, id[lost], &other, NULL, &registrant),
			 -EACCES);
	ck_assert_uint_eq(registrant, u.uid);
	ck_assert(path_there(record) && path_there(sandbox_dir));
	ck_assert_int_eq(rm(id[lost], &u), 0);
	ck_assert(!path_there(record) && !path_there(sandbox_dir));
	ck_assert_int_eq(rm(id[lost], &u), -ENOENT);
	ck_assert_int_eq(rm("../x", &root), -ENOENT);
}
END_TEST

/*
 * `sandbox rm <id> owned` (an `agentsnet run` at its end, the reaper) removes
 * that process's registration only: not one of the same pid started at
 * another time (a reused pid), not one tied to no process, not the one
 * another process registered under the id after its own was removed; each
 * refusal (-ESTALE) leaves the sandbox served. A kept record (a restart could
 * not adopt it) goes by the same rule: its own process removes it, another
 * cannot.
 */
START_TEST(test_owned_removal)
{
	struct engine_owner self = { 0 }, reused, later;

	start(0);
	ck_assert_int_eq(engine_owner_of(getpid(), &self), 0);
	reused = self;
	reused.start_ticks++;
	later = self;
	later.start_ticks += 2;
	ck_assert_int_eq(add_tied("o1", &self, &root), 0);
	ck_assert_int_eq(rm_tied("o1", &reused, &root), -ESTALE);
	expect_active("o1");
	ck_assert_int_eq(rm_tied("o1", &self, &root), 0);
	ck_assert(!is_there("o1"));
	ck_assert_int_eq(add("o2", "p", &root), 0);
	ck_assert_int_eq(rm_tied("o2", &self, &root), -ESTALE);
	expect_active("o2");
	/* The run's registration dropped, the id registered again by another: left to it. */
	ck_assert_int_eq(add_tied("o3", &self, &root), 0);
	ck_assert_int_eq(rm("o3", &root), 0);
	ck_assert_int_eq(add_tied("o3", &later, &root), 0);
	ck_assert_int_eq(rm_tied("o3", &self, &root), -ESTALE);
	expect_active("o3");
	ck_assert_int_eq(rm_tied("o3", &later, NULL), 0);
	ck_assert_int_eq(rm_tied("o3", &self, &root), -ENOENT);

	/* A kept record tied to this process. */
	char id[2][3] = { "k1", "k2" };
	char record[256];
	ck_assert_int_eq(rm("o2", &root), 0);
	ck_assert_int_eq(add_tied(id[0], &self, &u), 0);
	ck_assert_int_eq(add_tied(id[1], &self, &u), 0);
	int lost = restart_keeping_one(id[0], id[1], &u);
	snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, id[lost]);
	ck_assert(path_there(record));
	ck_assert_int_eq(rm_tied(id[lost], &reused, &u), -ESTALE);
	ck_assert(path_there(record));
	ck_assert_int_eq(rm_tied(id[lost], &self, &u), 0);
	ck_assert(!path_there(record));
}
END_TEST

/* Whether <uid> of the pool is given (to a sandbox or a kept record). */
static bool uid_given(uint32_t uid)
{
	pthread_mutex_lock(&et.eng.lock);
	int taken = uidpool_take(&et.eng.uids, uid);
	if (taken == 0)
		uidpool_release(&et.eng.uids, uid);
	pthread_mutex_unlock(&et.eng.lock);
	return taken != 0;
}

/*
 * Two sandboxes tied to process <owner>, with <pooled> a uid of the pool each
 * (else any agent uid), and a restart with room for one: the id whose record
 * was kept, its agent's uid in *<uid>.
 */
static const char *keep_one_tied(const struct engine_owner *owner, bool pooled, uint32_t *uid)
{
	static const char *const ids[2] = { "t1", "t2" };
	char out[256];
	uint32_t given[2];

	start(0);
	for (int i = 0; i < 2; i++) {
		given[i] = pooled ? ENGINE_AGENT_NEW : ENGINE_AGENT_ANY;
		ck_assert_int_eq(engine_sandbox_add(&et.eng, ids[i], "p", owner, &root, &given[i],
						    out, sizeof(out), NULL),
				 0);
	}
	restart(ET_FDS_HELD + 2);
	ck_assert(is_there(ids[0]) != is_there(ids[1]));
	int lost = is_there(ids[0]) ? 1 : 0;
	*uid = given[lost];
	return ids[lost];
}

/*
 * A kept record tied to a process, and its uid of the pool, are kept while
 * that process runs; once it is gone the reaper (once a second) removes the
 * record and the directory and gives the uid back; a record registered again
 * since stays, the old uid given back all the same. A record without a uid of
 * the pool goes the same way.
 */
START_TEST(test_kept_record_reaped)
{
	char record[256], sandbox_dir[256];
	struct engine_owner owner = { 0 };
	struct rlimit files;
	uint32_t uid = 0;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &files), 0);
	for (int round = 0; round < 3; round++) {
		bool again = round == 1, pooled = round != 2;
		pid_t child = fork();
		ck_assert_int_ge(child, 0);
		if (child == 0) {
			alarm(60); /* gone even if the test is not there to kill it */
			pause();
			_exit(0);
		}
		ck_assert_int_eq(engine_owner_of(child, &owner), 0);
		const char *id = keep_one_tied(&owner, pooled, &uid);
		snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, id);
		snprintf(sandbox_dir, sizeof(sandbox_dir), "%s/sandboxes/%s", et.cfg.socket_dir,
			 id);
		ck_assert(!pooled || uid_given(uid));
		ck_assert_uint_eq(engine_sandbox_reap_orphans(&et.eng), 0); /* it runs */
		ck_assert(path_there(record) && path_there(sandbox_dir));
		ck_assert(!pooled || uid_given(uid));
		if (again) {
			/* The adopted one removed, room for one again: the kept id registered anew. */
			ck_assert_int_eq(rm(strcmp(id, "t1") == 0 ? "t2" : "t1", &root), 0);
			ck_assert_int_eq(add(id, "p", &root), 0);
		}
		ck_assert_int_eq(kill(child, SIGKILL), 0);
		ck_assert_int_eq(waitpid(child, NULL, 0), child);
		(void)engine_sandbox_reap_orphans(&et.eng);
		ck_assert_msg(!pooled || !uid_given(uid), "uid %u still held", uid);
		if (again) {
			expect_active(id);
			ck_assert(path_there(record));
		} else {
			ck_assert(!path_there(record) && !path_there(sandbox_dir));
		}
		ck_assert_int_eq(engine_stop(&et.eng), 0);
		enginetest_release(&et);
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &files), 0);
	}
	start(0); /* for the fixture's teardown */
}
END_TEST

/*
 * A kept record (a restart could not adopt it) is its registrant's still:
 * another user's add of its id is refused (exists), leaving the record and
 * the directory as they were (so is its registrant's, told the errno, when
 * the record cannot be read); its registrant's succeeds, in a directory made
 * anew (an agent of the old record's, which may still have the old one
 * mounted, never reaches the sandbox registered again).
 */
START_TEST(test_kept_record_registrant)
{
	char id[2][3] = { "u1", "u2" };
	char record[256], before[512], after[512], marker[256];

	int lost = keep_one(id, &u);
	snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, id[lost]);
	ck_assert_int_gt(file_text(record, before, sizeof(before)), 8);
	snprintf(marker, sizeof(marker), "%s/sandboxes/%s/marker", et.cfg.socket_dir, id[lost]);
	ck_assert_int_eq(mkdir(marker, 0700), 0);

	ck_assert_int_eq(add(id[lost], "p", &other), -EEXIST);
	ck_assert_int_eq(file_text(record, after, sizeof(after)), (ssize_t)strlen(before));
	ck_assert_str_eq(after, before);
	ck_assert(path_there(marker));
	/* Its record unreadable for want of a descriptor: told as that, not as exists. */
	struct starved st;
	fds_starve(&st, 0);
	int rc = add(id[lost], "p", &u);
	fds_release(&st);
	ck_assert_int_eq(engine_err_errno(rc), EMFILE);
	ck_assert(path_there(marker));
	ck_assert_int_eq(add(id[lost], "p", &u), 0);
	expect_active(id[lost]);
	ck_assert(!path_there(marker));
}
END_TEST

/*
 * A start given the sandboxes' sockets back (as a service manager or an old
 * daemon passes them) that cannot adopt one of them (a full table) closes the
 * socket it could not place, and its commit leaves that sandbox's record and
 * directory for the next start.
 */
START_TEST(test_kept_record_passed_socket)
{
	static struct notify_fd passed[2];
	const char *id[2] = { "s1", "s2" };
	char record[256], before[512], after[512], sandbox_dir[256];

	start(0);
	for (int i = 0; i < 2; i++) {
		add_pooled(id[i]);
		pthread_mutex_lock(&et.eng.lock);
		int idx = sandbox_find(&et.eng, id[i]);
		passed[i].fd = dup(et.eng.sandboxes[idx]->listen_fd);
		pthread_mutex_unlock(&et.eng.lock);
		ck_assert_int_ge(passed[i].fd, 0);
		snprintf(passed[i].name, sizeof(passed[i].name), ENGINE_FDNAME_PREFIX "%s", id[i]);
	}
	ck_assert_int_eq(engine_stop(&et.eng), 0);
	enginetest_release(&et);
	enginetest_prepare(&et, dir, sockets, ET_POLICY, NULL);
	struct rlimit rl;
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = ET_FDS_HELD + 2;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	et.eng.inherited = passed;
	et.eng.inherited_count = 2;
	enginetest_start(&et);
	ck_assert(is_there(id[0]) != is_there(id[1]));
	int lost = is_there(id[0]) ? 1 : 0;
	snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, id[lost]);
	ck_assert_int_gt(file_text(record, before, sizeof(before)), 8);
	engine_commit(&et.eng);
	ck_assert_int_eq(file_text(record, after, sizeof(after)), (ssize_t)strlen(before));
	ck_assert_str_eq(after, before);
	snprintf(sandbox_dir, sizeof(sandbox_dir), "%s/sandboxes/%s", et.cfg.socket_dir, id[lost]);
	ck_assert(path_there(sandbox_dir));
}
END_TEST

/* sandbox_add_locked of <id> by root for ENGINE_AGENT_ANY, past engine_sandbox_add's checks. */
static int add_unchecked(const char *id, int *ingress_fd)
{
	char out[256];

	pthread_mutex_lock(&et.eng.lock);
	int rc = sandbox_add_locked(&et.eng, id, "p", SANDBOX_FROM_CONTROL, NULL, 0,
				    ENGINE_AGENT_ANY, NULL, out, sizeof(out), ingress_fd);
	pthread_mutex_unlock(&et.eng.lock);
	return rc;
}

/*
 * The order of an add's steps, below engine_sandbox_add's refusal of an id
 * too long for the socket directory: over a record a restart could not
 * adopt, an owned sandbox's add whose ingress socket cannot be made (a 63-byte
 * id in a 21-byte socket directory: its egress socket's path is 107 bytes,
 * its ingress socket's 108) fails, and the record, written after the socket,
 * stays as it was.
 */
START_TEST(test_kept_record_ingress_fails)
{
	char id[2][64], record[256], before[512], after[512];

	sockets = "sock5";
	start(0);
	for (int i = 0; i < 2; i++) {
		memset(id[i], 'k', 62);
		id[i][62] = (char)('a' + i);
		id[i][63] = '\0';
		ck_assert_int_eq(add_unchecked(id[i], NULL), 0);
	}
	int lost = restart_keeping_one(id[0], id[1], &root);
	snprintf(record, sizeof(record), "%s/registry/%s", et.cfg.socket_dir, id[lost]);
	ck_assert_int_gt(file_text(record, before, sizeof(before)), 8);

	int ingress = 0;
	ck_assert_int_eq(add_unchecked(id[lost], &ingress), ENGINE_ERR_SYSTEM(ENAMETOOLONG));
	ck_assert_int_eq(ingress, -1);
	ck_assert(!is_there(id[lost]));
	ck_assert_int_eq(file_text(record, after, sizeof(after)), (ssize_t)strlen(before));
	ck_assert_str_eq(after, before);
	sockets = "sock";
}
END_TEST

/*
 * An id longer than the socket directory leaves room for (a 21-byte one: 62
 * bytes) is refused before anything is made; at the room's length, an owned
 * sandbox's ingress socket, the longer path, is made.
 */
START_TEST(test_id_room)
{
	char id[64], path[256], out[256];
	struct stat st;

	ck_assert_int_eq(engine_stop(&et.eng), 0);
	enginetest_release(&et);
	sockets = "sock5";
	start(0);
	ck_assert_uint_eq(strlen(et.cfg.socket_dir), 21);
	memset(id, 'i', 63);
	id[63] = '\0';
	uint32_t agent = ENGINE_AGENT_NEW;
	int ingress = 0;
	int rc =
	    engine_sandbox_add(&et.eng, id, "p", NULL, &root, &agent, out, sizeof(out), &ingress);
	ck_assert_int_eq(rc, -ENAMETOOLONG);
	ck_assert_int_eq(ingress, -1);
	snprintf(path, sizeof(path), "%s/sandboxes/%s", et.cfg.socket_dir, id);
	ck_assert_int_eq(lstat(path, &st), -1);
	snprintf(path, sizeof(path), "%s/registry/%s", et.cfg.socket_dir, id);
	ck_assert_int_eq(lstat(path, &st), -1);

	id[62] = '\0';
	agent = ENGINE_AGENT_NEW;
	rc = engine_sandbox_add(&et.eng, id, "p", NULL, &root, &agent, out, sizeof(out), &ingress);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_ge(ingress, 0);
	close(ingress);
	snprintf(path, sizeof(path), "%s/sandboxes/%s/ingress.sock", et.cfg.socket_dir, id);
	ck_assert_uint_eq(strlen(path), 107);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	sockets = "sock";
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core/engine");
	TCase *tc = tcase_create("sandboxes");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_id);
	tcase_add_test(tc, test_profile_and_duplicate);
	tcase_add_test(tc, test_per_user);
	tcase_add_test(tc, test_owner_only_removal);
	tcase_add_test(tc, test_pool_uid);
	tcase_add_test(tc, test_readoption_full_disk);
	tcase_add_test(tc, test_id_room);
	tcase_add_test(tc, test_new_failed_add_leaves_nothing);
	suite_add_tcase(s, tc);
	tc = tcase_create("full");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_table_full);
	tcase_add_test(tc, test_readoption_not_adopted);
	tcase_add_test(tc, test_kept_record_failed_add);
	tcase_add_test(tc, test_kept_record_registrant);
	tcase_add_test(tc, test_kept_record_rm);
	tcase_add_test(tc, test_owned_removal);
	tcase_add_test(tc, test_kept_record_reaped);
	tcase_add_test(tc, test_kept_record_passed_socket);
	tcase_add_test(tc, test_kept_record_ingress_fails);
	suite_add_tcase(s, tc);
	return unit_run_in_dir(s, dir);
}
