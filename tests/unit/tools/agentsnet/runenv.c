/*
 * Unit tests for tools/agentsnet/runenv.c: the agent's environment.
 *
 * - The allow-list: what a terminal session needs passes (PATH, LC_ALL,
 *   TERM, ...); credentials, code injection (LD_PRELOAD, BASH_ENV,
 *   PYTHONPATH, NODE_OPTIONS, ...) and ways out (SSH_AUTH_SOCK, proxies) do
 *   not. The built envp is compared entry by entry with what may pass, so an
 *   allow-list of "everything" fails here (OPENAI_API_KEY must be absent).
 * - The credential check: names and values of real key formats, and names
 *   that only look like one (GIT_AUTHOR_NAME, XDG_SESSION_ID, short values).
 * - --env NAME (the caller's value; unset: an error naming it) and
 *   NAME=VALUE, bad names, the later-wins rule across --env and --env-file,
 *   and RUNENV_VARS_MAX at N and N+1.
 * - --env-file: comments, blank lines, "export ", quotes, CR LF, a last line
 *   without LF; every fault (bad name, no '=', a NUL byte, a line of
 *   RUNENV_LINE_BYTES + 1, a directory, a missing file) names the file and,
 *   for a line, its number, and never the line's text.
 * - The warning: one line naming the dropped credential-looking variables,
 *   never a value; nothing when there is none.
 */
#include "../../../../tools/agentsnet/runenv.c"

#include <check.h>
#include <ftw.h>
#include <sys/stat.h>
#include "tests/unit/unit.h"

static char test_dir[64];

/* ---- Helpers ---- */

static char *const caller_env[] = {
	"PATH=/usr/bin:/bin",
	"HOME=/home/op",
	"LC_ALL=C.UTF-8",
	"LC_CTYPE=C.UTF-8",
	"TERM=xterm-256color",
	"AGENT_NO_PROXY=internal.example",
	"OPENAI_API_KEY=sk-proj-000000000000000000000000",
	"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	"GITHUB_TOKEN=ghp_0123456789abcdef0123456789abcdef0123",
	"LD_PRELOAD=/tmp/evil.so",
	"BASH_ENV=/tmp/evil.sh",
	"PYTHONPATH=/tmp/evil",
	"PYTHONSTARTUP=/tmp/evil.py",
	"NODE_OPTIONS=--require /tmp/evil.js",
	"SSH_AUTH_SOCK=/tmp/ssh-x/agent.1",
	"HTTP_PROXY=http://proxy:3128",
	"PLAIN=hello",
	"NOEQUALS",
	"PATH=/second/path",
	NULL,
};

/* What may come out of caller_env: the allow-listed ones, PATH's first value. */
static const char *const caller_allowed[] = {
	"PATH=/usr/bin:/bin", "HOME=/home/op",       "LC_ALL=C.UTF-8",
	"LC_CTYPE=C.UTF-8",   "TERM=xterm-256color", "AGENT_NO_PROXY=internal.example",
};

static void env_init(struct runenv *e, char *const *env)
{
	ck_assert_int_eq(runenv_init(e, env), 0);
	ck_assert_ptr_nonnull(e->vars);
	ck_assert_ptr_null(e->vars[e->count]);
}

/* The value of <name> in <e>, or NULL; asserts it is there at most once. */
static const char *env_get(const struct runenv *e, const char *name)
{
	const char *found = NULL;
	size_t len = strlen(name);

	for (size_t i = 0; i < e->count; i++) {
		ck_assert_ptr_nonnull(e->vars[i]);
		if (strncmp(e->vars[i], name, len) == 0 && e->vars[i][len] == '=') {
			ck_assert_msg(found == NULL, "%s twice", name);
			found = e->vars[i] + len + 1;
		}
	}
	ck_assert_ptr_null(e->vars[e->count]);
	return found;
}

/* Writes <len> bytes of <content> to <name> in the test directory; returns its path (static). */
static const char *file_n(const char *name, const char *content, size_t len)
{
	static char path[128];

	snprintf(path, sizeof(path), "%s/%s", test_dir, name);
	unit_spit(path, content, len);
	return path;
}

static const char *file(const char *name, const char *content)
{
	return file_n(name, content, strlen(content));
}

/* Loads <content> as an env file into a fresh environment of no caller variable. */
static int load(struct runenv *e, const char *content, char *err, size_t err_len)
{
	env_init(e, NULL);
	err[0] = '\0';
	return runenv_load_file(e, file("t.env", content), err, err_len);
}

/* Asserts that <content> fails to load with <ret>, an error starting "<path>:<lineno>: ". */
static void load_fails(const char *content, int ret, unsigned lineno, const char *secret)
{
	char err[512], want[192];
	struct runenv e;

	ck_assert_int_eq(load(&e, content, err, sizeof(err)), ret);
	snprintf(want, sizeof(want), "%s/t.env:%u: ", test_dir, lineno);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "\"%s\" does not start \"%s\"", err,
		      want);
	if (secret != NULL)
		ck_assert_msg(strstr(err, secret) == NULL, "\"%s\" shows the line", err);
	runenv_free(&e);
}

/* Runs runenv_warn_dropped into a string (static). */
static const char *warning(const struct runenv *e, char *const *env)
{
	static char buf[2048];

	memset(buf, 0, sizeof(buf));
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
	ck_assert_ptr_nonnull(f);
	runenv_warn_dropped(e, env, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* ---- The allow-list ---- */

START_TEST(allow_list)
{
	static const char *const yes[] = {
		"PATH",     "HOME",     "USER",        "LOGNAME",        "SHELL",   "LANG",
		"LANGUAGE", "LC_ALL",   "LC_CTYPE",    "LC_MESSAGES",    "TERM",    "COLORTERM",
		"TZ",       "NO_COLOR", "FORCE_COLOR", "CLICOLOR",       "COLUMNS", "LINES",
		"EDITOR",   "VISUAL",   "PAGER",       "AGENT_NO_PROXY",
	};
	/* Credentials, code injection into the agent's tools, ways out, near misses. */
	static const char *const no[] = {
		"OPENAI_API_KEY",
		"ANTHROPIC_API_KEY",
		"AWS_SECRET_ACCESS_KEY",
		"AWS_ACCESS_KEY_ID",
		"GITHUB_TOKEN",
		"DATABASE_URL",
		"LD_PRELOAD",
		"LD_LIBRARY_PATH",
		"LD_AUDIT",
		"BASH_ENV",
		"ENV",
		"PYTHONPATH",
		"PYTHONSTARTUP",
		"NODE_OPTIONS",
		"PERL5OPT",
		"RUBYOPT",
		"JAVA_TOOL_OPTIONS",
		"GIT_CONFIG_GLOBAL",
		"SSH_AUTH_SOCK",
		"DISPLAY",
		"DBUS_SESSION_BUS_ADDRESS",
		"XDG_RUNTIME_DIR",
		"DOCKER_HOST",
		"HTTP_PROXY",
		"http_proxy",
		"AGENT_HTTP_PROXY",
		"AGENTSNET_SOCKET_DIR",
		"PROMPT_COMMAND",
		"LC_",
		"LC_A-B",
		"LC_GITHUB_TOKEN", /* LC_* is no prefix: sshd's AcceptEnv LC_* smuggles these */
		"LC_X",
		"lc_all",
		"path",
		"PATH ",
		"PATHX",
		"XPATH",
		"",
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(yes); i++)
		ck_assert_msg(runenv_allowed(yes[i]), "%s refused", yes[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(no); i++)
		ck_assert_msg(!runenv_allowed(no[i]), "%s allowed", no[i]);
}
END_TEST

/* The built envp holds exactly the allowed variables: "pass everything" fails here. */
START_TEST(init_filters)
{
	struct runenv e;

	env_init(&e, caller_env);
	ck_assert_uint_eq(e.count, AN_ARRAY_LEN(caller_allowed));
	for (size_t i = 0; i < AN_ARRAY_LEN(caller_allowed); i++)
		ck_assert_str_eq(e.vars[i], caller_allowed[i]);
	ck_assert_ptr_null(env_get(&e, "OPENAI_API_KEY"));
	ck_assert_ptr_null(env_get(&e, "AWS_SECRET_ACCESS_KEY"));
	ck_assert_ptr_null(env_get(&e, "LD_PRELOAD"));
	ck_assert_ptr_null(env_get(&e, "BASH_ENV"));
	ck_assert_ptr_null(env_get(&e, "PYTHONPATH"));
	ck_assert_ptr_null(env_get(&e, "NODE_OPTIONS"));
	ck_assert_str_eq(env_get(&e, "PATH"), "/usr/bin:/bin");
	ck_assert_str_eq(env_get(&e, "LC_ALL"), "C.UTF-8");
	ck_assert_str_eq(env_get(&e, "TERM"), "xterm-256color");
	runenv_free(&e);
	ck_assert_ptr_null(e.vars);
	ck_assert_uint_eq(e.count, 0);

	env_init(&e, NULL);
	ck_assert_uint_eq(e.count, 0);
	runenv_free(&e);
}
END_TEST

/* ---- The credential check ---- */

START_TEST(looks_secret)
{
	static const char *const names[] = {
		"OPENAI_API_KEY",
		"ANTHROPIC_API_KEY",
		"AWS_ACCESS_KEY_ID",
		"AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN",
		"GITHUB_TOKEN",
		"GOOGLE_APPLICATION_CREDENTIALS",
		"PGPASSWORD",
		"DB_PASSWD",
		"MYSQL_PWD",
		"BASIC_AUTH",
		"SESSION_ID",
		"JSESSION_COOKIE",
		"SSH_PRIVATE_KEY_PATH",
		"hf_token",
		"sendgrid_apikey",
		"Client_Secret",
	};
	static const char *const plain_names[] = {
		"PATH",
		"HOME",
		"GIT_AUTHOR_NAME",
		"GIT_AUTHOR_EMAIL",
		"TOX_TESTENV_PASSENV",
		"XDG_SESSION_ID",
		"XDG_SESSION_TYPE",
		"DESKTOP_SESSION",
		"SESSION_MANAGER",
		"PWD",
		"OLDPWD",
		"SSH_AUTH_SOCK",
		"DBUS_SESSION_BUS_ADDRESS",
		"SSL_CERT_FILE",
		"NODE_EXTRA_CA_CERTS",
		"DATABASE_URL",
		"EDITOR",
	};
	static const char *const values[] = {
		"sk-proj-abcdefghijklmnopqrstuvwxyz",
		"sk-ant-api03-abcdefghijklmnopqrstu",
		"ghp_0123456789abcdef0123456789abcdef0123",
		"gho_0123456789abcdef0123456789",
		"github_pat_11ABCDEFG0123456789_abcdef",
		"xoxb-1234567890-1234567890-abcdef",
		"xoxp-1234567890-1234567890-abcdef",
		"xoxa-2-1234567890-1234567890-abc",
		"AKIAIOSFODNN7EXAMPLE",
		"AIzaSyA-0123456789abcdefghijklmnopqrs",
		"glpat-0123456789abcdefghij",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
		"-----BEGIN OPENSSH PRIVATE KEY-----",
		"postgres://app:hunter2@db.internal/app",
		"redis://:hunter2@cache:6379/0",
		"https://user:pw@proxy.example:8080",
	};
	static const char *const plain_values[] = {
		"",
		"hello",
		"sk-short",
		"AKIA",
		"eyJ",
		"/usr/bin:/bin",
		"postgres://db.internal/app",
		"http://proxy:3128",
		"https://example.com/a@b",
		"ssh://git@github.com/x.git",
		"mailto:someone@example.com",
		"://x:y@z",
		"xoxz-1234567890-1234567890-abc",
		"not a url user:pass@host",
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(names); i++)
		ck_assert_msg(runenv_looks_secret(names[i], "x"), "%s: not a credential", names[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(plain_names); i++)
		ck_assert_msg(!runenv_looks_secret(plain_names[i], "x"), "%s: a credential",
			      plain_names[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(values); i++)
		ck_assert_msg(runenv_looks_secret("SOME_VAR", values[i]), "%s: not a credential",
			      values[i]);
	for (size_t i = 0; i < AN_ARRAY_LEN(plain_values); i++)
		ck_assert_msg(!runenv_looks_secret("SOME_VAR", plain_values[i]), "%s: a credential",
			      plain_values[i]);
	/* A name that is excepted is still caught by its value. */
	ck_assert(runenv_looks_secret("XDG_SESSION_ID", "AKIAIOSFODNN7EXAMPLE"));
	ck_assert(runenv_looks_secret("GIT_AUTHOR_TOKEN", "x"));
}
END_TEST

/* ---- --env ---- */

START_TEST(env_set)
{
	char err[256];
	struct runenv e;

	env_init(&e, caller_env);
	ck_assert_int_eq(runenv_set(&e, "OPENAI_API_KEY", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "OPENAI_API_KEY"), "sk-proj-000000000000000000000000");
	ck_assert_int_eq(runenv_set(&e, "PLAIN", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "PLAIN"), "hello");
	ck_assert_int_eq(runenv_set(&e, "SET_HERE=x=y", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "SET_HERE"), "x=y");
	ck_assert_int_eq(runenv_set(&e, "EMPTY=", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "EMPTY"), "");
	ck_assert_int_eq(runenv_set(&e, "_u9=1", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "_u9"), "1");
	/* The first of two PATHs in the caller's environment, as getenv. */
	ck_assert_int_eq(runenv_set(&e, "PATH", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "PATH"), "/usr/bin:/bin");
	ck_assert_uint_eq(e.count, AN_ARRAY_LEN(caller_allowed) + 5);

	ck_assert_int_eq(runenv_set(&e, "NOT_SET_ANYWHERE", caller_env, err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err, "--env NOT_SET_ANYWHERE: not set in your environment (--env "
			      "NOT_SET_ANYWHERE=VALUE sets it)");
	ck_assert_int_eq(runenv_set(&e, "NOEQUALS", caller_env, err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(runenv_set(&e, "PLAIN", NULL, err, sizeof(err)), -ENOENT);
	ck_assert_uint_eq(e.count, AN_ARRAY_LEN(caller_allowed) + 5);
	runenv_free(&e);
}
END_TEST

START_TEST(env_bad_names)
{
	static const char *const bad[] = {
		"", "=value", "1ABC=x", "A-B=hunter2", "A B=hunter2", "A.B", "Ä=x", "A\nB=hunter2",
	};
	char err[256];
	struct runenv e;

	env_init(&e, NULL);
	for (size_t i = 0; i < AN_ARRAY_LEN(bad); i++) {
		err[0] = '\0';
		ck_assert_int_eq(runenv_set(&e, bad[i], caller_env, err, sizeof(err)), -EINVAL);
		ck_assert_msg(strstr(err, "not a variable name") != NULL, "%s", err);
		ck_assert_msg(strncmp(err, "--env '", 7) == 0, "%s", err);
		ck_assert_msg(strstr(err, "hunter2") == NULL, "%s: the value shown", err);
		ck_assert_msg(strchr(err, '\n') == NULL, "%s: a raw control byte", err);
	}
	ck_assert_int_eq(runenv_set(&e, "A-B=hunter2", NULL, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "--env 'A-B': not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
	ck_assert_uint_eq(e.count, 0);
	runenv_free(&e);
}
END_TEST

/* Later wins, whichever of --env and --env-file set the earlier value. */
START_TEST(later_wins)
{
	char err[256];
	struct runenv e;

	env_init(&e, caller_env);
	ck_assert_int_eq(runenv_set(&e, "A=1", caller_env, err, sizeof(err)), 0);
	ck_assert_int_eq(runenv_set(&e, "A=2", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "A"), "2");
	ck_assert_int_eq(runenv_set(&e, "PATH=/opt/bin", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "PATH"), "/opt/bin");
	const char *path = file("w.env", "A=3\nB=file\nA=4\n");
	ck_assert_int_eq(runenv_load_file(&e, path, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "A"), "4");
	ck_assert_int_eq(runenv_set(&e, "B=flag", caller_env, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "B"), "flag");
	ck_assert_int_eq(runenv_load_file(&e, path, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "B"), "file");
	ck_assert_uint_eq(e.count, AN_ARRAY_LEN(caller_allowed) + 2);
	runenv_free(&e);
}
END_TEST

/* RUNENV_VARS_MAX variables fit; one more is refused, by --env and by a file's line. */
START_TEST(vars_max)
{
	char err[512], arg[32];
	struct runenv e;

	env_init(&e, NULL);
	for (unsigned i = 0; i < RUNENV_VARS_MAX; i++) {
		snprintf(arg, sizeof(arg), "V%u=%u", i, i);
		ck_assert_int_eq(runenv_set(&e, arg, NULL, err, sizeof(err)), 0);
	}
	ck_assert_uint_eq(e.count, RUNENV_VARS_MAX);
	ck_assert_int_eq(runenv_set(&e, "ONE_MORE=1", NULL, err, sizeof(err)), -E2BIG);
	ck_assert_str_eq(err, "--env ONE_MORE: more than 4096 variables");
	ck_assert_int_eq(runenv_set(&e, "V7=again", NULL, err, sizeof(err)), 0);
	ck_assert_str_eq(env_get(&e, "V7"), "again");
	ck_assert_int_eq(runenv_load_file(&e, file("m.env", "V1=x\nMORE=1\n"), err, sizeof(err)),
			 -E2BIG);
	ck_assert_str_eq(err + strlen(test_dir), "/m.env:2: more than 4096 variables");
	ck_assert_uint_eq(e.count, RUNENV_VARS_MAX);
	runenv_free(&e);
}
END_TEST

/* ---- --env-file ---- */

START_TEST(file_good)
{
	char err[256];
	struct runenv e;

	ck_assert_int_eq(load(&e,
			      "# the agent's settings\n"
			      "\n"
			      "   \t\n"
			      "  # indented comment\n"
			      "PLAIN=value\n"
			      "export EXPORTED=\"two words\"\n"
			      "export\tTABBED=1\n"
			      "SINGLE='it''s'\n"
			      "MISMATCHED=\"half'\n"
			      "ONE_QUOTE=\"\n"
			      "EMPTY_QUOTES=\"\"\n"
			      "HASH=a # not a comment\n"
			      "EQUALS=a=b\n"
			      "EMPTY=\n"
			      "  LEADING=1\n"
			      "TRAILING=x  \n"
			      "CRLF=dos\r\n"
			      "export=the name export\n"
			      "NOLF=last",
			      err, sizeof(err)),
			 0);
	ck_assert_str_eq(env_get(&e, "PLAIN"), "value");
	ck_assert_str_eq(env_get(&e, "EXPORTED"), "two words");
	ck_assert_str_eq(env_get(&e, "TABBED"), "1");
	ck_assert_str_eq(env_get(&e, "SINGLE"), "it''s");
	ck_assert_str_eq(env_get(&e, "MISMATCHED"), "\"half'");
	ck_assert_str_eq(env_get(&e, "ONE_QUOTE"), "\"");
	ck_assert_str_eq(env_get(&e, "EMPTY_QUOTES"), "");
	ck_assert_str_eq(env_get(&e, "HASH"), "a # not a comment");
	ck_assert_str_eq(env_get(&e, "EQUALS"), "a=b");
	ck_assert_str_eq(env_get(&e, "EMPTY"), "");
	ck_assert_str_eq(env_get(&e, "LEADING"), "1");
	ck_assert_str_eq(env_get(&e, "TRAILING"), "x  ");
	ck_assert_str_eq(env_get(&e, "CRLF"), "dos");
	ck_assert_str_eq(env_get(&e, "export"), "the name export");
	ck_assert_str_eq(env_get(&e, "NOLF"), "last");
	ck_assert_uint_eq(e.count, 15);
	runenv_free(&e);

	ck_assert_int_eq(load(&e, "", err, sizeof(err)), 0);
	ck_assert_uint_eq(e.count, 0);
	runenv_free(&e);
}
END_TEST

/* Each fault names the file and the line, never the line's text. */
START_TEST(file_faults)
{
	load_fails("A=1\nB=2\n1BAD=hunter2\n", -EINVAL, 3, "hunter2");
	load_fails("A=1\nBAD-NAME=hunter2\n", -EINVAL, 2, "BAD-NAME");
	load_fails("A=1\nsk-hunter2\n", -EINVAL, 2, "hunter2");
	load_fails("# comment\n\nexport hunter2\n", -EINVAL, 3, "hunter2");
	load_fails("=hunter2\n", -EINVAL, 1, "hunter2");
	load_fails("export =hunter2\n", -EINVAL, 1, "hunter2");
	load_fails("A B=hunter2\n", -EINVAL, 1, "hunter2");
	load_fails("A=1\r\nB=2\r\nC\r\n", -EINVAL, 3, NULL);

	char err[512];
	struct runenv e;
	env_init(&e, NULL);
	ck_assert_int_eq(
	    runenv_load_file(&e, file_n("nul.env", "A=1\nB=x\0y\n", 10), err, sizeof(err)),
	    -EINVAL);
	ck_assert_str_eq(err + strlen(test_dir), "/nul.env:2: a NUL byte");
	ck_assert_int_eq(runenv_load_file(&e, "/nonexistent/agent.env", err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err, "/nonexistent/agent.env: No such file or directory");
	ck_assert_int_eq(runenv_load_file(&e, test_dir, err, sizeof(err)), -EISDIR);
	ck_assert(strncmp(err, test_dir, strlen(test_dir)) == 0);
	ck_assert_str_eq(err + strlen(test_dir),
			 ": is a directory (--env-file reads NAME=VALUE lines)");
	ck_assert_uint_eq(e.count, 1); /* nul.env's first line: lines apply in order */
	runenv_free(&e);
}
END_TEST

/* A line of RUNENV_LINE_BYTES bytes (its LF excluded) is read; one byte more is refused. */
START_TEST(file_line_max)
{
	size_t n = RUNENV_LINE_BYTES + 16;
	char *buf = pool_malloc(n), err[512];
	struct runenv e;

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, "A=1\nLONG=", 9);
	memset(buf + 9, 'v', RUNENV_LINE_BYTES - 5);
	buf[4 + RUNENV_LINE_BYTES] = '\n';
	env_init(&e, NULL);
	const char *path = file_n("long.env", buf, 4 + RUNENV_LINE_BYTES + 1);
	ck_assert_int_eq(runenv_load_file(&e, path, err, sizeof(err)), 0);
	ck_assert_uint_eq(strlen(env_get(&e, "LONG")), RUNENV_LINE_BYTES - 5);
	/* Without its LF, the last line is as long. */
	path = file_n("long.env", buf, 4 + RUNENV_LINE_BYTES);
	ck_assert_int_eq(runenv_load_file(&e, path, err, sizeof(err)), 0);
	ck_assert_uint_eq(strlen(env_get(&e, "LONG")), RUNENV_LINE_BYTES - 5);
	runenv_free(&e);

	buf[4 + RUNENV_LINE_BYTES] = 'v';
	buf[4 + RUNENV_LINE_BYTES + 1] = '\n';
	env_init(&e, NULL);
	path = file_n("long.env", buf, 4 + RUNENV_LINE_BYTES + 2);
	ck_assert_int_eq(runenv_load_file(&e, path, err, sizeof(err)), -EMSGSIZE);
	ck_assert_str_eq(err + strlen(test_dir), "/long.env:2: line longer than 65536 bytes");
	ck_assert_ptr_null(env_get(&e, "LONG"));
	runenv_free(&e);
	pool_free(buf);
}
END_TEST

/* ---- The warning ---- */

START_TEST(warn_dropped)
{
	char *const env[] = {
		"PATH=/usr/bin",
		"OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz",
		"PLAIN=hello",
		"GITHUB_TOKEN=ghp_0123456789abcdef0123456789abcdef0123",
		"DATABASE_URL=postgres://app:hunter2@db/app",
		"SOME_ID=AKIAIOSFODNN7EXAMPLE",
		"GIT_AUTHOR_NAME=Op",
		"XDG_SESSION_ID=3",
		"LD_PRELOAD=/tmp/x.so",
		"GITHUB_TOKEN=ghp_second000000000000000000000000000",
		"TERM=xterm",
		NULL,
	};
	char err[256];
	struct runenv e;

	env_init(&e, env);
	const char *w = warning(&e, env);
	ck_assert_str_eq(w, "agentsnet: not passed to the agent (they look like credentials; pass "
			    "one with --env NAME): OPENAI_API_KEY, GITHUB_TOKEN, DATABASE_URL, "
			    "SOME_ID\n");
	for (size_t i = 0; env[i] != NULL; i++)
		ck_assert_msg(strstr(w, strchr(env[i], '=') + 1) == NULL, "%s: value shown",
			      env[i]);
	ck_assert(strstr(w, "hunter2") == NULL);
	ck_assert(strstr(w, "sk-proj") == NULL);

	/* Passed on with --env: not dropped, not named. */
	ck_assert_int_eq(runenv_set(&e, "OPENAI_API_KEY", env, err, sizeof(err)), 0);
	ck_assert_int_eq(runenv_set(&e, "DATABASE_URL=postgres://db/app", env, err, sizeof(err)),
			 0);
	ck_assert_str_eq(warning(&e, env), "agentsnet: not passed to the agent (they look like "
					   "credentials; pass one with --env NAME): GITHUB_TOKEN, "
					   "SOME_ID\n");
	runenv_free(&e);

	/* Nothing that looks like a credential: nothing at all. */
	char *const quiet[] = { "PATH=/usr/bin", "PLAIN=hello", "GIT_AUTHOR_NAME=Op", NULL };
	env_init(&e, quiet);
	ck_assert_str_eq(warning(&e, quiet), "");
	ck_assert_str_eq(warning(&e, NULL), "");
	runenv_free(&e);

	/* A name no shell would make is shown without its control bytes. */
	char *const odd[] = { "MY\033]0;TOKEN=x", NULL };
	env_init(&e, odd);
	ck_assert_str_eq(warning(&e, odd), "agentsnet: not passed to the agent (they look like "
					   "credentials; pass one with --env NAME): MY?]0;TOKEN\n");
	runenv_free(&e);
}
END_TEST

static Suite *runenv_suite(void)
{
	Suite *s = suite_create("runenv");
	TCase *tc = tcase_create("runenv");

	tcase_add_test(tc, allow_list);
	tcase_add_test(tc, init_filters);
	tcase_add_test(tc, looks_secret);
	tcase_add_test(tc, env_set);
	tcase_add_test(tc, env_bad_names);
	tcase_add_test(tc, later_wins);
	tcase_add_test(tc, vars_max);
	tcase_add_test(tc, file_good);
	tcase_add_test(tc, file_faults);
	tcase_add_test(tc, file_line_max);
	tcase_add_test(tc, warn_dropped);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	snprintf(test_dir, sizeof(test_dir), "/tmp/an-runenv-XXXXXX");
	if (mkdtemp(test_dir) == NULL) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	int rc = unit_run(runenv_suite());
	nftw(test_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return rc;
}
