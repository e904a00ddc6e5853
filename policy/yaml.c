/*
 * The policy loader's strict reader over libyaml's event API, the layer every
 * section parser stands on (policy/loader.h). It hands out one event at a
 * time and refuses what a reviewed policy never needs: anchors, aliases (an
 * alias bomb) and tags. On it sit the readers of one value each (a key of a
 * known set, tracked in a bitmask; a sequence, or a mapping of free-form
 * keys, item by item; an integer in a range; a boolean; a line of text), the
 * checks of a value's bytes, and the files a key names (body_file,
 * secret_file, upstream_ca), read once, at load.
 *
 * Every message is "name:line:col: message", formatted once where the
 * failure is found (loader_fail), at the mark of the event that is wrong;
 * libyaml's own errors are mapped to the same shape (a reader error by its
 * byte offset). A value is shown through loader_show, cut and with anything
 * unprintable replaced; a path a key refused is not shown at all, and a file
 * read is wiped when the read fails: either may hold a secret.
 */
#include "policy/loader.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/an.h"
#include "core/pool.h"

/* --- messages ---------------------------------------------------------- */

/* Copies <s>/<len> for a message: printable ASCII kept, anything else '?', cut at 60 bytes. */
const char *loader_show(const void *s, size_t len, char *buf)
{
	const unsigned char *u = s;
	size_t n = len > 60 ? 60 : len;

	AN_ASSERT(buf != NULL);
	for (size_t i = 0; i < n; i++)
		buf[i] = (u[i] >= 0x20 && u[i] < 0x7f) ? (char)u[i] : '?';
	if (n < len)
		memcpy(buf + n, "...", 4);
	else
		buf[n] = '\0';
	AN_ASSERT(strlen(buf) < SHOW_BYTES);
	return buf;
}

__attribute__((format(printf, 3, 4))) int loader_fail(struct loader *ld, yaml_mark_t m,
						      const char *fmt, ...)
{
	va_list ap;

	AN_ASSERT(fmt != NULL);
	if (ld->err_cap == 0)
		return -EINVAL;
	AN_ASSERT(ld->err != NULL);
	int n = snprintf(ld->err, ld->err_cap, "%s:%zu:%zu: ", ld->name, m.line + 1, m.column + 1);
	if (n >= 0 && (size_t)n < ld->err_cap) {
		va_start(ap, fmt);
		vsnprintf(ld->err + n, ld->err_cap - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

int loader_fail_oom(struct loader *ld)
{
	AN_ASSERT(ld->name != NULL);
	if (ld->err_cap > 0)
		snprintf(ld->err, ld->err_cap, "%s: out of memory", ld->name);
	return -ENOMEM;
}

/* The mark of byte <offset> of the input: libyaml reports reader errors by offset. */
static yaml_mark_t mark_at(const struct loader *ld, size_t offset)
{
	yaml_mark_t m = { 0, 0, 0 };

	AN_ASSERT(ld->input != NULL || ld->input_len == 0);
	if (offset > ld->input_len)
		offset = ld->input_len;
	for (size_t i = 0; i < offset; i++) {
		if (ld->input[i] == '\n') {
			m.line++;
			m.column = 0;
		} else {
			m.column++;
		}
	}
	m.index = offset;
	AN_ASSERT(m.line <= offset && m.column <= offset);
	return m;
}

static int fail_yaml(struct loader *ld)
{
	const yaml_parser_t *y = &ld->parser;
	const char *problem = y->problem != NULL ? y->problem : "unknown error";

	AN_ASSERT(y->error != YAML_NO_ERROR);
	AN_ASSERT(!ld->ev_live);
	if (y->error == YAML_MEMORY_ERROR)
		return loader_fail_oom(ld);
	if (y->error == YAML_READER_ERROR)
		return loader_fail(ld, mark_at(ld, y->problem_offset), "YAML: %s", problem);
	/* libyaml reads an unquoted "*.example.com" as a malformed alias. */
	if (y->context != NULL && strcmp(y->context, "while scanning an alias") == 0)
		return loader_fail(
		    ld, y->context_mark,
		    "YAML reads an unquoted '*' as an alias: quote wildcard hosts (\"*.example.com\")");
	/* The problem mark is where libyaml gave up; the context mark is where the construct began. */
	if (y->context != NULL)
		return loader_fail(ld, y->problem_mark, "YAML: %s (%s at line %zu, column %zu)",
				   problem, y->context, y->context_mark.line + 1,
				   y->context_mark.column + 1);
	return loader_fail(ld, y->problem_mark, "YAML: %s", problem);
}

/* --- events -------------------------------------------------------------- */

static const yaml_char_t *ev_anchor_or_tag(const yaml_event_t *ev, bool tag)
{
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		return tag ? ev->data.scalar.tag : ev->data.scalar.anchor;
	case YAML_SEQUENCE_START_EVENT:
		return tag ? ev->data.sequence_start.tag : ev->data.sequence_start.anchor;
	case YAML_MAPPING_START_EVENT:
		return tag ? ev->data.mapping_start.tag : ev->data.mapping_start.anchor;
	default:
		return NULL;
	}
}

/* Makes the next event current in ld->ev. 0, or an error already formatted. */
int loader_next(struct loader *ld)
{
	if (ld->ev_again) {
		AN_ASSERT(ld->ev_live);
		ld->ev_again = false;
		return 0;
	}
	if (ld->ev_live) {
		yaml_event_delete(&ld->ev);
		ld->ev_live = false;
	}
	if (!yaml_parser_parse(&ld->parser, &ld->ev))
		return fail_yaml(ld);
	ld->ev_live = true;
	if (ld->ev.type == YAML_ALIAS_EVENT || ev_anchor_or_tag(&ld->ev, false) != NULL)
		return loader_fail(ld, ld->ev.start_mark,
				   "YAML anchors and aliases are not supported");
	if (ev_anchor_or_tag(&ld->ev, true) != NULL)
		return loader_fail(ld, ld->ev.start_mark, "YAML tags are not supported");
	AN_ASSERT(ld->ev_live && !ld->ev_again);
	return 0;
}

int loader_start(struct loader *ld, yaml_event_type_t type, const char *what)
{
	AN_ASSERT(type == YAML_MAPPING_START_EVENT || type == YAML_SEQUENCE_START_EVENT);
	int rc = loader_next(ld);
	if (rc != 0)
		return rc;
	if (ld->ev.type == type)
		return 0;
	return loader_fail(ld, ld->ev.start_mark, "%s must be %s", what,
			   type == YAML_MAPPING_START_EVENT ? "a mapping" : "a sequence");
}

static bool ev_is_null(const struct loader *ld)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

	if (ld->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (size_t i = 0; i < AN_ARRAY_LEN(nulls); i++) {
		if (ev_len(ld) == strlen(nulls[i]) &&
		    memcmp(ev_text(ld), nulls[i], ev_len(ld)) == 0)
			return true;
	}
	return false;
}

/* Reads a scalar that is not null into ld->ev; <type> names what was expected. */
int loader_scalar(struct loader *ld, const char *what, const char *type)
{
	int rc = loader_next(ld);

	if (rc != 0)
		return rc;
	if (ld->ev.type != YAML_SCALAR_EVENT || ev_is_null(ld))
		return loader_fail(ld, ld->ev.start_mark, "%s must be %s", what, type);
	AN_ASSERT(ld->ev.data.scalar.value != NULL);
	return 0;
}

int loader_choice(struct loader *ld, const char *what, const char *first, const char *second,
		  bool *is_second)
{
	char type[64];
	int n = snprintf(type, sizeof(type), "\"%s\" or \"%s\"", first, second);

	AN_ASSERT(n > 0 && (size_t)n < sizeof(type));
	int rc = loader_scalar(ld, what, type);
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	if (len == strlen(first) && memcmp(s, first, len) == 0)
		*is_second = false;
	else if (len == strlen(second) && memcmp(s, second, len) == 0)
		*is_second = true;
	else
		return loader_fail(ld, ld->ev.start_mark, "%s must be %s", what, type);
	return 0;
}

static void list_keys(const struct keyset *ks, char *buf, size_t cap)
{
	size_t used = 0;

	AN_ASSERT(cap > 0);
	buf[0] = '\0';
	for (uint32_t i = 0; i < ks->count && used < cap; i++) {
		int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", ks->keys[i]);
		if (n < 0)
			break;
		used += (size_t)n;
	}
	AN_ASSERT(buf[cap - 1] == '\0' || used < cap);
}

/*
 * Reads the next key of a mapping with the keys of <ks>: returns 1 with
 * *<key> its index (and ld->key_mark its position), 0 at the end of the
 * mapping, or an error for a non-string, unknown or repeated key.
 */
int loader_key(struct loader *ld, const struct keyset *ks, uint32_t *seen, uint32_t *key)
{
	char shown[SHOW_BYTES];
	char expected[512]; /* the daemon section's keys, the longest list */

	AN_ASSERT(ks->count <= 32);
	AN_ASSERT(*seen < (1ull << ks->count));
	int rc = loader_next(ld);
	if (rc != 0)
		return rc;
	if (ld->ev.type == YAML_MAPPING_END_EVENT)
		return 0;
	if (ld->ev.type != YAML_SCALAR_EVENT)
		return loader_fail(ld, ld->ev.start_mark, "keys in %s must be strings",
				   ks->section);
	ld->key_mark = ld->ev.start_mark;
	for (uint32_t i = 0; i < ks->count; i++) {
		if (ev_len(ld) != strlen(ks->keys[i]) ||
		    memcmp(ev_text(ld), ks->keys[i], ev_len(ld)))
			continue;
		if (*seen & (1u << i))
			return loader_fail(ld, ld->key_mark, "duplicate key \"%s\" in %s",
					   ks->keys[i], ks->section);
		*seen |= 1u << i;
		*key = i;
		return 1;
	}
	list_keys(ks, expected, sizeof(expected));
	return loader_fail(ld, ld->key_mark, "unknown key \"%s\" in %s (expected one of: %s)",
			   loader_show(ev_text(ld), ev_len(ld), shown), ks->section, expected);
}

/* Fails at <m> for the first of the <mandatory> keys missing from <seen>. */
int loader_check_mandatory(struct loader *ld, const struct keyset *ks, uint32_t mandatory,
			   uint32_t seen, yaml_mark_t m)
{
	AN_ASSERT(ks->count <= 32);
	AN_ASSERT(mandatory != 0);
	for (uint32_t i = 0; i < ks->count; i++) {
		if ((mandatory & (1u << i)) && !(seen & (1u << i)))
			return loader_fail(ld, m, "missing mandatory key \"%s\" in %s", ks->keys[i],
					   ks->section);
	}
	return 0;
}

/*
 * Reads a sequence (<keyed> false: <fn> runs once per item with the item's
 * first event pending) or a mapping with free-form keys (<keyed> true: <fn>
 * runs once per entry with the key as ld->ev and ld->key_mark). At most <max>
 * entries; <nonempty> refuses none.
 */
static int loader_items(struct loader *ld, const char *what, uint32_t max, bool nonempty,
			bool keyed, item_fn fn, void *ctx)
{
	yaml_event_type_t start_type = keyed ? YAML_MAPPING_START_EVENT : YAML_SEQUENCE_START_EVENT;
	yaml_event_type_t end_type = keyed ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
	int rc = loader_start(ld, start_type, what);
	uint32_t i = 0;

	if (rc != 0)
		return rc;
	yaml_mark_t start = ld->ev.start_mark;
	for (;; i++) {
		rc = loader_next(ld);
		if (rc != 0)
			return rc;
		if (ld->ev.type == end_type)
			break;
		if (keyed && (ld->ev.type != YAML_SCALAR_EVENT || ev_is_null(ld)))
			return loader_fail(ld, ld->ev.start_mark, "keys in %s must be strings",
					   what);
		if (i == max)
			return loader_fail(ld, ld->ev.start_mark, "%s has more than %u entries",
					   what, max);
		if (keyed)
			ld->key_mark = ld->ev.start_mark;
		else
			ld->ev_again = true;
		rc = fn(ld, ctx, i);
		if (rc != 0)
			return rc;
		AN_ASSERT(!ld->ev_again);
	}
	if (nonempty && i == 0)
		return loader_fail(ld, start, "%s must not be empty", what);
	AN_ASSERT(i <= max);
	return 0;
}

/* A sequence of at most <max> items, see loader_items. */
int loader_seq(struct loader *ld, const char *what, uint32_t max, bool nonempty, item_fn fn,
	       void *ctx)
{
	return loader_items(ld, what, max, nonempty, false, fn, ctx);
}

/* A mapping of 1..<max> named entries, see loader_items. */
int loader_map(struct loader *ld, const char *what, uint32_t max, item_fn fn, void *ctx)
{
	return loader_items(ld, what, max, true, true, fn, ctx);
}

/* --- scalar values -------------------------------------------------------- */

/* Parses decimal digits; saturates at UINT64_MAX. False for anything else. */
bool loader_parse_decimal(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	AN_ASSERT(s != NULL || len == 0);
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		uint64_t d = (uint64_t)(s[i] - '0');
		v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
	}
	*out = v;
	AN_ASSERT(len > 0);
	return true;
}

int loader_uint(struct loader *ld, const char *what, uint64_t min, uint64_t max, uint64_t *out)
{
	char shown[SHOW_BYTES];
	uint64_t v = 0;

	AN_ASSERT(min <= max);
	int rc = loader_scalar(ld, what, "an integer");
	if (rc != 0)
		return rc;
	const char *s = ev_text(ld);
	size_t len = ev_len(ld);
	size_t sign = len > 1 && s[0] == '-' ? 1 : 0;
	bool plain = ld->ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
	if (!plain || !loader_parse_decimal(s + sign, len - sign, &v))
		return loader_fail(ld, ld->ev.start_mark, "%s must be an integer", what);
	if (len - sign > 1 && s[sign] == '0')
		return loader_fail(ld, ld->ev.start_mark, "%s must not have leading zeros", what);
	if (sign != 0 || v < min || v > max)
		return loader_fail(ld, ld->ev.start_mark, "%s must be %llu..%llu, got %s", what,
				   (unsigned long long)min, (unsigned long long)max,
				   loader_show(s, len, shown));
	*out = v;
	AN_ASSERT(v >= min && v <= max);
	return 0;
}

/* No C0 control bytes and no DEL: the text may end up in an HTTP header line. */
bool loader_text_is_clean(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f)
			return false;
	}
	return true;
}

/* The 1-based position of the first byte of <s>/<len> that is not visible ASCII, or 0. */
size_t loader_first_invisible(const char *s, size_t len)
{
	AN_ASSERT(s != NULL || len == 0);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x21 || c > 0x7e)
			return i + 1;
	}
	return 0;
}

/* Reads one line of text (owner, reason, instruction) into the owned *<out>. */
int loader_text(struct loader *ld, const char *what, char **out)
{
	AN_ASSERT(*out == NULL);
	int rc = loader_scalar(ld, what, "a string");
	if (rc != 0)
		return rc;
	if (ev_len(ld) == 0)
		return loader_fail(ld, ld->ev.start_mark, "%s must not be empty", what);
	if (ev_len(ld) > POLICY_TEXT_BYTES_MAX)
		return loader_fail(ld, ld->ev.start_mark, "%s is longer than %u bytes", what,
				   POLICY_TEXT_BYTES_MAX);
	if (!loader_text_is_clean(ev_text(ld), ev_len(ld)))
		return loader_fail(
		    ld, ld->ev.start_mark,
		    "%s must be one line without control characters (no CR, LF, tab)", what);
	*out = pool_strndup(ev_text(ld), ev_len(ld));
	if (*out == NULL)
		return loader_fail_oom(ld);
	AN_ASSERT(strlen(*out) == ev_len(ld));
	return 0;
}

/* Sandbox ids and profile names: [A-Za-z0-9_.-]{1,63}, not starting with '.'. */
bool loader_is_id(const char *s, size_t len)
{
	if (len == 0 || len > CONFIG_SANDBOX_ID_BYTES_MAX - 1 || s[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
		if (!ok)
			return false;
	}
	AN_ASSERT(len <= POLICY_PROFILE_NAME_BYTES_MAX);
	return true;
}

void *loader_grow_array(void *arr, uint32_t *cap, uint32_t count, size_t elem)
{
	AN_ASSERT(count <= *cap);
	if (count < *cap)
		return arr;
	uint32_t n = *cap == 0 ? 8 : *cap * 2;
	char *a = pool_realloc(arr, (size_t)n * elem);
	if (a == NULL)
		return NULL;
	memset(a + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
	*cap = n;
	AN_ASSERT(count < *cap);
	return a;
}

uint32_t loader_mark_u32(size_t v)
{
	return v >= UINT32_MAX ? UINT32_MAX : (uint32_t)v + 1;
}

/* RFC 9110 section 5.6.2: tchar, the bytes of a method or a field name. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

bool loader_is_token(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!is_tchar((unsigned char)s[i]))
			return false;
	}
	return len > 0;
}

/*
 * The file <what> (body_file, secret_file, upstream_ca) names, <s>/<len>, as
 * opened: as written when absolute, else from the policy file's directory.
 */
static int file_path(struct loader *ld, const char *what, const char *s, size_t len, char *out,
		     size_t cap)
{
	const char *slash = strrchr(ld->name, '/');
	int dir_len = slash == NULL ? 0 : slash == ld->name ? 1 : (int)(slash - ld->name);

	AN_ASSERT(cap > 0);
	AN_ASSERT(len > 0);
	int n = s[0] == '/' || slash == NULL ? snprintf(out, cap, "%.*s", (int)len, s)
					     : snprintf(out, cap, "%.*s%s%.*s", dir_len, ld->name,
							dir_len == 1 ? "" : "/", (int)len, s);
	if (n < 0 || (size_t)n >= cap)
		return loader_fail(ld, ld->ev.start_mark, "%s: the path is longer than %zu bytes",
				   what, cap - 1);
	return 0;
}

/*
 * Reads all of the regular file <fd> of <size> bytes into the owned *<out>;
 * -errno, or -EAGAIN when it grew. On failure what was read is wiped first:
 * the file may hold a secret.
 */
static int file_read(int fd, size_t size, char **out, size_t *len)
{
	size_t cap = size + 1;
	size_t used = 0;
	char *buf = pool_malloc(cap);

	AN_ASSERT(fd >= 0);
	AN_ASSERT(size <= POLICY_FAKE_BODY_BYTES_MAX);
	if (buf == NULL)
		return -ENOMEM;
	while (used < cap) {
		ssize_t n = read(fd, buf + used, cap - used);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			int e = errno;
			pool_free_secret(buf, used);
			return -e;
		}
		if (n == 0)
			break;
		used += (size_t)n;
	}
	if (used == cap) {
		pool_free_secret(buf, used);
		return -EAGAIN;
	}
	buf[used] = '\0'; /* as an inline body: callers may treat text as a string */
	*out = buf;
	*len = used;
	return 0;
}

/*
 * Reads the open file <fd> of at most <max> bytes into the owned *<buf> of
 * *<len> bytes (and a NUL). Returns 0; -EINVAL (not a regular file), -EFBIG
 * (larger than <max>) or -EAGAIN (it grew while read), each with *<call>
 * NULL; or the -errno of *<call> ("fstat", "read").
 */
int loader_file_load(int fd, size_t max, char **buf, size_t *len, const char **call)
{
	struct stat st;

	AN_ASSERT(fd >= 0);
	AN_ASSERT(max <= POLICY_FAKE_BODY_BYTES_MAX);
	*call = NULL;
	if (fstat(fd, &st) == -1) {
		*call = "fstat";
		return -errno;
	}
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uint64_t)st.st_size > max)
		return -EFBIG;
	int rc = file_read(fd, (size_t)st.st_size, buf, len);
	if (rc != 0 && rc != -EAGAIN)
		*call = "read";
	AN_ASSERT(rc != 0 || *len <= (size_t)st.st_size);
	return rc;
}

/*
 * Reads the value of the path key <what> (body_file, secret_file,
 * upstream_ca) into <path>/<cap> as file_path finds it. The value is not
 * shown when it is refused: a key pasted there by mistake must not reach a
 * log.
 */
int loader_file_value(struct loader *ld, const char *what, char *path, size_t cap)
{
	AN_ASSERT(what != NULL);
	AN_ASSERT(cap >= POLICY_PATH_BYTES_MAX + 1);
	int rc = loader_scalar(ld, what, "a string");
	if (rc != 0)
		return rc;
	if (ev_len(ld) == 0 || ev_len(ld) > POLICY_PATH_BYTES_MAX ||
	    !loader_text_is_clean(ev_text(ld), ev_len(ld)))
		return loader_fail(ld, ld->ev.start_mark,
				   "%s must be a path of 1-%u bytes without control characters",
				   what, POLICY_PATH_BYTES_MAX);
	return file_path(ld, what, ev_text(ld), ev_len(ld), path, cap);
}

/*
 * The message for loader_file_load's <rc> (not 0) on the file <path> of key
 * <what>, at the value.
 */
int loader_fail_file_load(struct loader *ld, const char *what, const char *path, int rc,
			  const char *call, size_t max)
{
	AN_ASSERT(rc < 0);
	AN_ASSERT(what != NULL && path != NULL);
	if (rc == -ENOMEM)
		return loader_fail_oom(ld);
	if (call != NULL)
		return loader_fail(ld, ld->ev.start_mark, "%s %s: %s: %s", what, path, call,
				   strerror(-rc));
	if (rc == -EINVAL)
		return loader_fail(ld, ld->ev.start_mark, "%s %s: not a regular file", what, path);
	if (rc == -EFBIG)
		return loader_fail(ld, ld->ev.start_mark, "%s %s: larger than %zu bytes", what,
				   path, max);
	AN_ASSERT(rc == -EAGAIN);
	return loader_fail(ld, ld->ev.start_mark, "%s %s: changed while it was read", what, path);
}

/* "true" or "false", plain (YAML 1.2's core schema; no yes/no/on/off). */
int loader_bool(struct loader *ld, const char *what, bool *out)
{
	AN_ASSERT(out != NULL);
	int rc = loader_scalar(ld, what, "true or false");
	if (rc != 0)
		return rc;
	bool plain = ld->ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
	if (plain && ev_len(ld) == 4 && memcmp(ev_text(ld), "true", 4) == 0)
		*out = true;
	else if (plain && ev_len(ld) == 5 && memcmp(ev_text(ld), "false", 5) == 0)
		*out = false;
	else
		return loader_fail(ld, ld->ev.start_mark, "%s must be true or false", what);
	AN_ASSERT(*out == (ev_len(ld) == 4));
	return 0;
}
