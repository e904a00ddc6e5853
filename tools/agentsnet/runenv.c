/*
 * The agent's environment (tools/agentsnet/runenv.h): an allow-list, never a deny-list,
 * which always misses one (a key named after a company, a password in a
 * DATABASE_URL). What passes is a fixed set of variables that configure a
 * terminal session, and anything else only when the caller names it.
 *
 * Never on the allow-list: variables that make a program load or run code
 * (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, BASH_ENV, ENV, PYTHONSTARTUP,
 * PYTHONPATH, NODE_OPTIONS, PERL5OPT, RUBYOPT, JAVA_TOOL_OPTIONS,
 * GIT_CONFIG_*...): they would inject code chosen by the host's environment
 * into every tool the agent starts, from a path that inside may name another
 * file (the sandbox's /tmp is its own, writable one). Nor variables that name
 * a way out: SSH_AUTH_SOCK (an agent holding the operator's keys),
 * DBUS_SESSION_BUS_ADDRESS, DISPLAY, XDG_RUNTIME_DIR, DOCKER_HOST; nor
 * proxies (the bridge sets its own).
 *
 * The credential check only feeds the warning, so an operator who meant to
 * pass a key knows to say --env NAME: names (KEY, TOKEN, SECRET, PASS, ...,
 * minus a few session names that hold nothing secret) and values (the key
 * formats of the big providers, a JWT, a PEM block, a URL with a password).
 * Nothing here prints a value: a bad --env-file line is named by its number,
 * not its text, which may be a bare secret.
 *
 * --env-file is deliberately simple: NAME=VALUE, the value verbatim to the end
 * of the line ('#' and blanks included) but for one pair of matching
 * surrounding quotes ('...' or "..."), removed; no escapes, no expansion, no
 * multi-line values. Blank and '#' lines are skipped, leading blanks and
 * "export " allowed, CR LF read as LF. Strings that may hold a secret are
 * wiped when released.
 */
#include "tools/agentsnet/runenv.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

/* Slots of a new environment; it doubles as needed, up to RUNENV_VARS_MAX + 1. */
#define RUNENV_CAP_INITIAL 64u
/*
 * Bytes an --env-file may hold: no environment execve takes is bigger (the
 * kernel caps argv and envp together at a quarter of the stack limit, 2 MiB
 * by default), and a file of comment lines is not read forever.
 */
#define RUNENV_FILE_BYTES_MAX (16u << 20)
/* Shortest value checked against the key formats: AWS's key ids, the shortest, are 20. */
#define RUNENV_KEY_BYTES_MIN 20u
/* Longest name an error or the warning prints (then "..."). */
#define RUNENV_NAME_SHOWN_BYTES 64u

static_assert(RUNENV_VARS_MAX >= RUNENV_CAP_INITIAL, "the initial size fits the limit");
static_assert(RUNENV_FILE_BYTES_MAX >= RUNENV_LINE_BYTES, "a longest line fits a file");

/*
 * The allow-list, and why each is there. Adding one: it must configure the
 * session and never hold a secret, a path to code or a way out (see above);
 * also update the usage text of `agentsnet run` (tools/agentsnet/main.c) and
 * docs/sandbox.md.
 */
static const char *const allowed_names[] = {
	"PATH",           /* where the agent's command and its tools are found */
	"HOME",           /* where tools keep their configuration and caches */
	"USER",           /* who the tools think they run as (git, ssh, prompts) */
	"LOGNAME",        /* the same, as POSIX names it */
	"SHELL",          /* what a tool starts for a sub-command or a terminal */
	"LANG",           /* the locale: character set and messages */
	"LANGUAGE",       /* gettext's list of message languages */
	"TERM",           /* what the terminal understands (the agent's TUI) */
	"COLORTERM",      /* whether it does true colour */
	"TZ",             /* the time zone of timestamps */
	"NO_COLOR",       /* colour preferences (no-color.org) */
	"FORCE_COLOR",    /* Node's and others' */
	"CLICOLOR",       /* BSD's and others' */
	"COLUMNS",        /* the terminal's size, for tools that do not ask it */
	"LINES",          /* the same */
	"EDITOR",         /* what a tool opens for the operator to write in */
	"VISUAL",         /* the same, full-screen */
	"PAGER",          /* what shows long output */
	"AGENT_NO_PROXY", /* the bridge honours the caller's (tools/bridge/main.c, bridge_vars) */
	/*
	 * The locale's categories (POSIX, and glibc's own), by name: never "LC_*" as a
	 * prefix, since sshd's default AcceptEnv LC_* makes LC_ a known way to smuggle any
	 * variable (LC_GITHUB_TOKEN) through.
	 */
	"LC_ALL",
	"LC_CTYPE",
	"LC_COLLATE",
	"LC_MESSAGES",
	"LC_MONETARY",
	"LC_NUMERIC",
	"LC_TIME",
	"LC_ADDRESS",
	"LC_IDENTIFICATION",
	"LC_MEASUREMENT",
	"LC_NAME",
	"LC_PAPER",
	"LC_TELEPHONE",
};

/*
 * Words in a name that say "credential" (case-insensitive), each unless
 * followed by <unless_next> (GIT_AUTHOR_NAME is not an AUTH...).
 * CERT is not one: it names certificate files (SSL_CERT_FILE,
 * NODE_EXTRA_CA_CERTS), which are public; a private key is caught by KEY,
 * PRIVATE, or its "-----BEGIN" value.
 */
static const struct {
	const char *word;
	const char *unless_next;
} secret_words[] = {
	{ "KEY", NULL },    /* OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, AWS_ACCESS_KEY_ID, APIKEY */
	{ "TOKEN", NULL },  /* GITHUB_TOKEN, HF_TOKEN, NPM_TOKEN, AWS_SESSION_TOKEN */
	{ "SECRET", NULL }, /* CLIENT_SECRET, JWT_SECRET */
	{ "PASS", "ENV" },  /* PASSWORD, PGPASSWORD, PASSWD, PASSPHRASE; not tox's *_PASSENV */
	{ "PWD", NULL },    /* MYSQL_PWD (PWD and OLDPWD themselves are excepted) */
	{ "CREDENTIAL", NULL }, /* GOOGLE_APPLICATION_CREDENTIALS, AWS_SHARED_CREDENTIALS_FILE */
	{ "AUTH", "OR" },       /* BASIC_AUTH, *_AUTH_HEADER, but not GIT_AUTHOR_* */
	{ "SESSION", NULL },    /* SESSION_SECRET-like names with neither word */
	{ "COOKIE", NULL },     /* SESSION_COOKIE, *_COOKIE */
	{ "PRIVATE", NULL },    /* PRIVATE_KEY_PATH, SSH_PRIVATE_KEY */
};

/*
 * Names that match a word above and hold nothing secret: the shell's own, and
 * the desktop session's bookkeeping and sockets (unreachable inside: a fresh
 * /run, a private /tmp, a network namespace of its own for abstract sockets,
 * so --env would not help). Warning about them every run would teach the
 * operator to ignore the warning. A prefix ends with '_' and '*'.
 */
static const char *const harmless_names[] = {
	"PWD",           "OLDPWD",        "DESKTOP_SESSION", "SESSION_MANAGER",
	"XDG_SESSION_*", "SSH_AUTH_SOCK", "GPG_AGENT_INFO",  "DBUS_SESSION_BUS_ADDRESS",
	"XAUTHORITY",
};

/*
 * How the values of well-known credentials start, case-sensitive. Checked only
 * on values of RUNENV_KEY_BYTES_MIN bytes or more, so a short word that happens
 * to start the same is not one.
 */
static const char *const secret_prefixes[] = {
	"sk-",         /* OpenAI (sk-proj-...), Anthropic (sk-ant-...), DeepSeek */
	"sk_live_",    /* Stripe */
	"rk_live_",    /* Stripe, restricted */
	"ghp_",        /* GitHub personal token */
	"gho_",        /* GitHub OAuth */
	"ghu_",        /* GitHub user-to-server */
	"ghs_",        /* GitHub server-to-server */
	"ghr_",        /* GitHub refresh */
	"github_pat_", /* GitHub fine-grained token */
	"glpat-",      /* GitLab */
	"xoxa-",       /* Slack: app */
	"xoxb-",       /* Slack: bot */
	"xoxp-",       /* Slack: user */
	"xoxr-",       /* Slack: refresh */
	"xoxs-",       /* Slack: session */
	"xoxe-",       /* Slack: rotating */
	"AKIA",        /* AWS access key id */
	"ASIA",        /* AWS temporary access key id */
	"AIza",        /* Google API key */
	"npm_",        /* npm */
	"hf_",         /* Hugging Face */
	"eyJ",         /* a JWT: base64 of '{"' */
	"-----BEGIN",  /* a PEM block: a private key */
	"Bearer ",     /* an Authorization header's value */
};

/* ---- Names ---- */

static bool name_char(char c, bool first)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

/* Whether the <len> bytes at <name> are [A-Za-z_][A-Za-z0-9_]*. */
static bool name_valid(const char *name, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!name_char(name[i], i == 0))
			return false;
	}
	return true;
}

/* Copies the name at <name> (<len> bytes) for a message: printable ASCII, shortened. */
static const char *name_shown(const char *name, size_t len, char *buf, size_t cap)
{
	size_t n = 0;

	AN_ASSERT(cap > RUNENV_NAME_SHOWN_BYTES + 3);
	for (size_t i = 0; i < len && n < RUNENV_NAME_SHOWN_BYTES; i++)
		buf[n++] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
	if (len > RUNENV_NAME_SHOWN_BYTES) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	AN_ASSERT(n < cap);
	return buf;
}

static bool allowed_n(const char *name, size_t len)
{
	if (!name_valid(name, len))
		return false;
	for (size_t i = 0; i < AN_ARRAY_LEN(allowed_names); i++) {
		if (strlen(allowed_names[i]) == len && memcmp(allowed_names[i], name, len) == 0)
			return true;
	}
	return false;
}

bool runenv_allowed(const char *name)
{
	AN_ASSERT(name != NULL);
	return allowed_n(name, strlen(name));
}

/* ---- The credential check ---- */

static char upper(char c)
{
	return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

/* Whether <word> (upper case) starts at <s>, within <len> bytes, ignoring case. */
static bool word_at(const char *s, size_t len, const char *word)
{
	size_t n = strlen(word);

	if (n > len)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (upper(s[i]) != word[i])
			return false;
	}
	return true;
}

static bool harmless(const char *name, size_t len)
{
	for (size_t i = 0; i < AN_ARRAY_LEN(harmless_names); i++) {
		const char *h = harmless_names[i];
		size_t n = strlen(h);
		if (h[n - 1] == '*' ? len >= n - 1 && memcmp(name, h, n - 1) == 0
				    : len == n && memcmp(name, h, n) == 0)
			return true;
	}
	return false;
}

static bool name_looks_secret(const char *name, size_t len)
{
	if (harmless(name, len))
		return false;
	for (size_t at = 0; at < len; at++) {
		for (size_t i = 0; i < AN_ARRAY_LEN(secret_words); i++) {
			const char *w = secret_words[i].word, *next = secret_words[i].unless_next;
			if (!word_at(name + at, len - at, w))
				continue;
			size_t end = at + strlen(w);
			if (next == NULL || !word_at(name + end, len - end, next))
				return true;
		}
	}
	return false;
}

/* Whether <value> is a URL whose user part holds a password: scheme://user:pass@host. */
static bool url_with_password(const char *value)
{
	const char *p = strstr(value, "://");

	if (p == NULL || p == value)
		return false;
	for (const char *s = value; s < p; s++) {
		if (!name_char(*s, s == value) && *s != '+' && *s != '-' && *s != '.')
			return false;
	}
	p += 3;
	size_t auth_len = strcspn(p, "/?#@");
	return p[auth_len] == '@' && memchr(p, ':', auth_len) != NULL;
}

static bool value_looks_secret(const char *value)
{
	if (url_with_password(value))
		return true;
	if (strlen(value) < RUNENV_KEY_BYTES_MIN)
		return false;
	for (size_t i = 0; i < AN_ARRAY_LEN(secret_prefixes); i++) {
		if (strncmp(value, secret_prefixes[i], strlen(secret_prefixes[i])) == 0)
			return true;
	}
	return false;
}

bool runenv_looks_secret(const char *name, const char *value)
{
	AN_ASSERT(name != NULL);
	AN_ASSERT(value != NULL);
	return name_looks_secret(name, strlen(name)) || value_looks_secret(value);
}

/* ---- The environment ---- */

/* Index of the variable <name> (<len> bytes) in <e>, or -1. */
static ssize_t find(const struct runenv *e, const char *name, size_t len)
{
	for (size_t i = 0; i < e->count; i++) {
		if (strncmp(e->vars[i], name, len) == 0 && e->vars[i][len] == '=')
			return (ssize_t)i;
	}
	return -1;
}

/* The value of <name> (<len> bytes) in <env> (the first, as getenv), or NULL. */
static const char *lookup(char *const *env, const char *name, size_t len)
{
	for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
		if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
			return env[i] + len + 1;
	}
	return NULL;
}

static void var_free(char *var)
{
	pool_free_secret(var, strlen(var) + 1);
}

/* Sets <name>=<value> in <e>, replacing a variable of that name. 0, -ENOMEM or -E2BIG. */
static int upsert(struct runenv *e, const char *name, size_t name_len, const char *value,
		  size_t value_len)
{
	AN_ASSERT(name_valid(name, name_len));
	AN_ASSERT(e->count < e->cap);
	char *var = pool_malloc(name_len + value_len + 2);
	if (var == NULL)
		return -ENOMEM;
	memcpy(var, name, name_len);
	var[name_len] = '=';
	memcpy(var + name_len + 1, value, value_len);
	var[name_len + 1 + value_len] = '\0';
	ssize_t i = find(e, name, name_len);
	if (i >= 0) {
		var_free(e->vars[i]);
		e->vars[i] = var;
		return 0;
	}
	if (e->count >= RUNENV_VARS_MAX) {
		var_free(var);
		return -E2BIG;
	}
	if (e->count + 1 == e->cap) {
		char **vars = pool_realloc(e->vars, 2 * e->cap * sizeof(*vars));
		if (vars == NULL) {
			var_free(var);
			return -ENOMEM;
		}
		e->vars = vars;
		e->cap *= 2;
	}
	e->vars[e->count++] = var;
	e->vars[e->count] = NULL;
	AN_ASSERT(e->count < e->cap);
	return 0;
}

int runenv_init(struct runenv *e, char *const *caller_env)
{
	AN_ASSERT(e != NULL);
	*e = (struct runenv){ .cap = RUNENV_CAP_INITIAL };
	e->vars = pool_calloc(e->cap, sizeof(*e->vars));
	if (e->vars == NULL)
		return -ENOMEM;
	for (size_t i = 0; caller_env != NULL && caller_env[i] != NULL; i++) {
		const char *var = caller_env[i], *eq = strchr(var, '=');
		if (eq == NULL)
			continue;
		size_t len = (size_t)(eq - var);
		/* A name twice in <caller_env>: the first, which is what getenv sees. */
		if (!allowed_n(var, len) || find(e, var, len) >= 0)
			continue;
		int ret = upsert(e, var, len, eq + 1, strlen(eq + 1));
		if (ret != 0) {
			runenv_free(e);
			return ret;
		}
	}
	AN_ASSERT(e->vars[e->count] == NULL);
	return 0;
}

int runenv_set(struct runenv *e, const char *arg, char *const *caller_env, char *err,
	       size_t err_len)
{
	char shown[RUNENV_NAME_SHOWN_BYTES + 4];
	const char *eq = strchr(arg, '='), *value;

	AN_ASSERT(e->vars != NULL);
	AN_ASSERT(err_len > 0);
	size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
	name_shown(arg, len, shown, sizeof(shown));
	if (!name_valid(arg, len)) {
		snprintf(err, err_len, "--env '%s': not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
			 shown);
		return -EINVAL;
	}
	value = eq != NULL ? eq + 1 : lookup(caller_env, arg, len);
	if (value == NULL) {
		snprintf(err, err_len,
			 "--env %s: not set in your environment (--env %s=VALUE sets it)", shown,
			 shown);
		return -ENOENT;
	}
	int ret = upsert(e, arg, len, value, strlen(value));
	if (ret == -E2BIG)
		snprintf(err, err_len, "--env %s: more than %u variables", shown, RUNENV_VARS_MAX);
	else if (ret != 0)
		snprintf(err, err_len, "--env %s: %s", shown, strerror(-ret));
	return ret;
}

/* ---- --env-file ---- */

struct env_file {
	const char *path;
	FILE *f;
	char *line;        /* owned: RUNENV_LINE_BYTES + 1 bytes, wiped when released */
	size_t len;        /* bytes in <line>, its LF excluded */
	uint32_t lineno;   /* of <line>, from 1 */
	size_t bytes_read; /* of the file so far */
};

/*
 * Reads the next line of <ef> (without its LF). Returns 1, 0 at the end,
 * -EMSGSIZE for a line longer than RUNENV_LINE_BYTES or a file longer than
 * RUNENV_FILE_BYTES_MAX, or the -errno of the read.
 */
static int read_line(struct env_file *ef)
{
	int c;

	ef->len = 0;
	ef->lineno++;
	while ((c = getc_unlocked(ef->f)) != EOF) {
		if (++ef->bytes_read > RUNENV_FILE_BYTES_MAX)
			return -EMSGSIZE;
		if (c == '\n')
			return 1;
		if (ef->len == RUNENV_LINE_BYTES)
			return -EMSGSIZE;
		ef->line[ef->len++] = (char)c;
	}
	if (ferror(ef->f))
		return errno != 0 ? -errno : -EIO;
	return ef->len > 0 ? 1 : 0;
}

/* Writes "<path>:<lineno>: <fault>" to <err>; returns <ret>. */
__attribute__((format(printf, 5, 6))) static int
line_fault(const struct env_file *ef, int ret, char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	AN_ASSERT(ret < 0);
	AN_ASSERT(err_len > 0);
	int n = snprintf(err, err_len, "%s:%u: ", ef->path, ef->lineno);
	if (n < 0 || (size_t)n >= err_len)
		return ret;
	va_start(ap, fmt);
	vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
	va_end(ap);
	return ret;
}

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Applies the line of <ef>: a comment, a blank line or NAME=VALUE. 0 or -errno with <err>. */
static int apply_line(struct runenv *e, struct env_file *ef, char *err, size_t err_len)
{
	const char *s = ef->line, *end = ef->line + ef->len;

	if (end > s && end[-1] == '\r')
		end--;
	if (memchr(s, '\0', (size_t)(end - s)) != NULL)
		return line_fault(ef, -EINVAL, err, err_len, "a NUL byte");
	while (s < end && blank(*s))
		s++;
	if (s == end || *s == '#')
		return 0;
	if (end - s > 7 && memcmp(s, "export", 6) == 0 && blank(s[6])) {
		s += 6;
		while (s < end && blank(*s))
			s++;
	}
	const char *eq = memchr(s, '=', (size_t)(end - s));
	if (eq == NULL)
		return line_fault(ef, -EINVAL, err, err_len,
				  "no '=' (a line is NAME=VALUE, a '#' comment or blank)");
	if (!name_valid(s, (size_t)(eq - s)))
		return line_fault(ef, -EINVAL, err, err_len,
				  "not a variable name before '=' ([A-Za-z_][A-Za-z0-9_]*)");
	const char *v = eq + 1;
	size_t v_len = (size_t)(end - v);
	if (v_len >= 2 && (v[0] == '"' || v[0] == '\'') && v[v_len - 1] == v[0]) {
		v++;
		v_len -= 2;
	}
	int ret = upsert(e, s, (size_t)(eq - s), v, v_len);
	if (ret == -E2BIG)
		return line_fault(ef, ret, err, err_len, "more than %u variables", RUNENV_VARS_MAX);
	if (ret != 0)
		return line_fault(ef, ret, err, err_len, "%s", strerror(-ret));
	return 0;
}

/* Reads every line of <ef> into <e>. 0 or -errno with <err>. */
static int apply_file(struct runenv *e, struct env_file *ef, char *err, size_t err_len)
{
	int ret;

	errno = 0;
	while ((ret = read_line(ef)) == 1) {
		ret = apply_line(e, ef, err, err_len);
		if (ret != 0)
			return ret;
	}
	if (ret == -EMSGSIZE && ef->bytes_read > RUNENV_FILE_BYTES_MAX)
		return line_fault(ef, ret, err, err_len, "the file is longer than %u bytes",
				  RUNENV_FILE_BYTES_MAX);
	if (ret == -EMSGSIZE)
		return line_fault(ef, ret, err, err_len, "line longer than %u bytes",
				  RUNENV_LINE_BYTES);
	if (ret != 0)
		return line_fault(ef, ret, err, err_len, "%s", strerror(-ret));
	return 0;
}

int runenv_load_file(struct runenv *e, const char *path, char *err, size_t err_len)
{
	struct env_file ef = { .path = path };
	struct stat st;
	int ret;

	AN_ASSERT(e->vars != NULL);
	AN_ASSERT(path != NULL);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1 || fstat(fd, &st) == -1) {
		ret = -errno;
		snprintf(err, err_len, "%s: %s", path, strerror(-ret));
		goto out_close_fd;
	}
	if (S_ISDIR(st.st_mode)) {
		ret = -EISDIR;
		snprintf(err, err_len, "%s: is a directory (--env-file reads NAME=VALUE lines)",
			 path);
		goto out_close_fd;
	}
	ef.line = pool_malloc(RUNENV_LINE_BYTES + 1);
	ef.f = ef.line != NULL ? fdopen(fd, "r") : NULL;
	if (ef.f == NULL) {
		ret = ef.line != NULL ? -errno : -ENOMEM;
		snprintf(err, err_len, "%s: %s", path, strerror(-ret));
		goto out_free_line;
	}
	fd = -1; /* the FILE owns it now */
	ret = apply_file(e, &ef, err, err_len);
	fclose(ef.f);
out_free_line:
	pool_free_secret(ef.line, ef.line != NULL ? RUNENV_LINE_BYTES + 1 : 0);
out_close_fd:
	if (fd != -1)
		close(fd);
	return ret;
}

/* ---- The warning and the end ---- */

/* Whether the variable at <env>[<i>] (name <len> bytes) also came earlier in <env>. */
static bool seen_before(char *const *env, size_t i, size_t len)
{
	for (size_t j = 0; j < i; j++) {
		if (strncmp(env[j], env[i], len + 1) == 0)
			return true;
	}
	return false;
}

void runenv_warn_dropped(const struct runenv *e, char *const *caller_env, FILE *out)
{
	char shown[RUNENV_NAME_SHOWN_BYTES + 4];
	size_t n = 0;

	AN_ASSERT(e->vars != NULL);
	AN_ASSERT(out != NULL);
	for (size_t i = 0; caller_env != NULL && caller_env[i] != NULL; i++) {
		const char *var = caller_env[i], *eq = strchr(var, '=');
		if (eq == NULL)
			continue;
		size_t len = (size_t)(eq - var);
		if (find(e, var, len) >= 0 || allowed_n(var, len))
			continue;
		if (!name_looks_secret(var, len) && !value_looks_secret(eq + 1))
			continue;
		if (seen_before(caller_env, i, len))
			continue;
		fputs(n++ == 0 ? "agentsnet: not passed to the agent (they look like credentials; "
				 "pass one with --env NAME): "
			       : ", ",
		      out);
		fputs(name_shown(var, len, shown, sizeof(shown)), out);
	}
	if (n > 0)
		fputc('\n', out);
}

void runenv_free(struct runenv *e)
{
	AN_ASSERT(e != NULL);
	for (size_t i = 0; i < e->count; i++)
		var_free(e->vars[i]);
	pool_free(e->vars);
	*e = (struct runenv){ 0 };
}
