/*
 * Unit tests for core/reason.c: the reason-code vocabulary is a public,
 * versioned contract (docs/reasons.md), so the tables are checked against
 * the rules agents rely on (distinct [a-z_] codes, refusal statuses, one
 * printable line of instruction per code, a phrase for every status) and
 * against the document itself: its markdown table is parsed here and must
 * list every code with its status, and nothing else. The test runs from the
 * repository root (as `make unit` runs it), where docs/reasons.md is.
 */
#include "../../../core/reason.c"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "tests/unit/unit.h"

#define REASONS_DOC "docs/reasons.md"

static int is_code(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++) {
		if (!((*s >= 'a' && *s <= 'z') || *s == '_'))
			return 0;
	}
	return 1;
}

/* ---- The tables. ---- */

START_TEST(test_codes)
{
	for (unsigned i = 0; i < REASON__COUNT; i++) {
		const char *code = reason_code((enum reason)i);
		ck_assert_ptr_nonnull(code);
		ck_assert_msg(is_code(code), "reason %u: code \"%s\" is not [a-z_]+", i, code);
		ck_assert_msg(code[0] != '_' && code[strlen(code) - 1] != '_',
			      "reason %u: code \"%s\" starts or ends with _", i, code);
		for (unsigned k = 0; k < i; k++)
			ck_assert_str_ne(code, reason_code((enum reason)k));
	}
	ck_assert_str_eq(reason_code(REASON_NONE), "none");
	/* Codes agents already match on (docs/design.md section 4) keep their spelling. */
	ck_assert_str_eq(reason_code(REASON_HOST_NOT_ALLOWED), "host_not_allowed");
	ck_assert_str_eq(reason_code(REASON_PORT_NOT_ALLOWED), "port_not_allowed");
	ck_assert_str_eq(reason_code(REASON_PRIVATE_ADDRESS), "private_address");
}
END_TEST

START_TEST(test_statuses)
{
	ck_assert_uint_eq(reason_status(REASON_NONE), 200);
	for (unsigned i = REASON_NONE + 1; i < REASON__COUNT; i++) {
		uint16_t st = reason_status((enum reason)i);
		ck_assert_msg(st >= 400 && st <= 599, "reason %s: status %u",
			      reason_code((enum reason)i), st);
		/* Every status a refusal uses has its own phrase, not the fallback. */
		ck_assert_str_ne(reason_phrase(st), "Error");
	}
	ck_assert_uint_eq(reason_status(REASON_HOST_NOT_ALLOWED), 403);
	ck_assert_uint_eq(reason_status(REASON_OVERLOADED), 503);
	ck_assert_uint_eq(reason_status(REASON_UPSTREAM_TIMEOUT), 504);
}
END_TEST

START_TEST(test_phrases)
{
	static const struct {
		uint16_t status;
		const char *phrase;
	} known[] = {
		{ 200, "OK" },
		{ 400, "Bad Request" },
		{ 403, "Forbidden" },
		{ 405, "Method Not Allowed" },
		{ 408, "Request Timeout" },
		{ 413, "Content Too Large" },
		{ 414, "URI Too Long" },
		{ 429, "Too Many Requests" },
		{ 431, "Request Header Fields Too Large" },
		{ 502, "Bad Gateway" },
		{ 503, "Service Unavailable" },
		{ 504, "Gateway Timeout" },
	};

	for (size_t i = 0; i < AN_ARRAY_LEN(known); i++)
		ck_assert_str_eq(reason_phrase(known[i].status), known[i].phrase);
	ck_assert_str_eq(reason_phrase(0), "Error");
	ck_assert_str_eq(reason_phrase(418), "Error");
	ck_assert_str_eq(reason_phrase(UINT16_MAX), "Error");
}
END_TEST

START_TEST(test_instructions)
{
	ck_assert_str_eq(reason_instruction(REASON_NONE), "");
	for (unsigned i = REASON_NONE + 1; i < REASON__COUNT; i++) {
		const char *ins = reason_instruction((enum reason)i);
		const char *code = reason_code((enum reason)i);
		ck_assert_ptr_nonnull(ins);
		size_t len = strlen(ins);
		ck_assert_msg(len > 0, "reason %s: empty instruction", code);
		/* It goes in a header line as is: printable ASCII, no CR/LF. */
		ck_assert_ptr_null(strpbrk(ins, "\r\n"));
		for (size_t k = 0; k < len; k++) {
			unsigned char c = (unsigned char)ins[k];
			ck_assert_msg(c >= 0x20 && c < 0x7f, "reason %s: byte 0x%02x", code, c);
		}
		ck_assert_msg(ins[0] != ' ' && ins[len - 1] != ' ', "reason %s: padded", code);
		/* No longer than a rule's own instruction may be. */
		ck_assert_uint_le(len, POLICY_TEXT_BYTES_MAX);
	}
}
END_TEST

START_TEST(test_tiers)
{
	for (unsigned i = 0; i < TIER__COUNT; i++) {
		const char *name = reason_tier_name((enum tier)i);
		ck_assert_ptr_nonnull(name);
		ck_assert_msg(is_code(name), "tier %u: name \"%s\"", i, name);
		for (unsigned k = 0; k < i; k++)
			ck_assert_str_ne(name, reason_tier_name((enum tier)k));
	}
	ck_assert_str_eq(reason_tier_name(TIER_DENY), "deny");
	ck_assert_str_eq(reason_tier_name(TIER_PASSTHROUGH), "passthrough");
}
END_TEST

/* ---- docs/reasons.md. ---- */

/* Trims the spaces around the cell [*s, *e). */
static void trim(const char **s, const char **e)
{
	while (*s < *e && **s == ' ')
		(*s)++;
	while (*e > *s && (*e)[-1] == ' ')
		(*e)--;
}

/*
 * Parses one table row "| `code` | status | when |" into <code> and <status>.
 * Returns 0 for a line that is not a code row (prose, header, separator).
 */
static int parse_row(const char *line, char *code, size_t cap, unsigned *status)
{
	if (strncmp(line, "| `", 3) != 0)
		return 0;
	const char *s = line + 1;
	const char *bar = strchr(s, '|');
	ck_assert_msg(bar != NULL, "row without cells: %s", line);
	const char *e = bar;
	trim(&s, &e);
	ck_assert_msg(e - s >= 3 && s[0] == '`' && e[-1] == '`', "bad code cell: %s", line);
	size_t n = (size_t)(e - s) - 2;
	ck_assert_uint_lt(n, cap);
	memcpy(code, s + 1, n);
	code[n] = '\0';
	s = bar + 1;
	while (*s == ' ' || *s == '`')
		s++;
	e = strchr(s, '|');
	ck_assert_msg(e != NULL, "row without a status cell: %s", line);
	char *num_end;
	unsigned long st = strtoul(s, &num_end, 10);
	while (*num_end == ' ' || *num_end == '`')
		num_end++;
	ck_assert_msg(num_end == e && st > 0 && st < 1000, "bad status cell: %s", line);
	*status = (unsigned)st;
	return 1;
}

START_TEST(test_doc_table)
{
	unsigned seen[REASON__COUNT] = { 0 };
	unsigned rows = 0;
	int version = -1;
	char line[1024], code[128];

	FILE *f = fopen(REASONS_DOC, "r");
	ck_assert_msg(f != NULL, "%s: not found (run from the repository root)", REASONS_DOC);
	while (fgets(line, sizeof(line), f) != NULL) {
		ck_assert_msg(strchr(line, '\n') != NULL || feof(f), "line too long: %s", line);
		if (version < 0 && line[0] == '#') {
			const char *v = strstr(line, "contract version ");
			if (v != NULL)
				version = (int)strtol(v + strlen("contract version "), NULL, 10);
		}
		unsigned status;
		if (!parse_row(line, code, sizeof(code), &status))
			continue;
		rows++;
		unsigned r = REASON__COUNT;
		for (unsigned i = 0; i < REASON__COUNT; i++) {
			if (strcmp(code, reason_code((enum reason)i)) == 0)
				r = i;
		}
		ck_assert_msg(r < REASON__COUNT, "%s lists unknown code %s", REASONS_DOC, code);
		ck_assert_msg(r != REASON_NONE, "%s lists %s, which is no refusal", REASONS_DOC,
			      code);
		ck_assert_msg(seen[r] == 0, "%s lists %s twice", REASONS_DOC, code);
		seen[r] = 1;
		ck_assert_msg(status == reason_status((enum reason)r),
			      "%s: %s has status %u, the code answers %u", REASONS_DOC, code,
			      status, reason_status((enum reason)r));
	}
	fclose(f);
	for (unsigned i = REASON_NONE + 1; i < REASON__COUNT; i++)
		ck_assert_msg(seen[i], "%s does not list %s", REASONS_DOC,
			      reason_code((enum reason)i));
	ck_assert_uint_eq(rows, REASON__COUNT - 1);
	ck_assert_int_eq(version, REASON_CONTRACT_VERSION);
}
END_TEST

/* ---- Out-of-range arguments are programmer errors. ---- */

START_TEST(test_code_out_of_range_aborts)
{
	(void)reason_code(REASON__COUNT);
}
END_TEST

START_TEST(test_status_out_of_range_aborts)
{
	(void)reason_status((enum reason)(REASON__COUNT + 5));
}
END_TEST

START_TEST(test_instruction_out_of_range_aborts)
{
	(void)reason_instruction(REASON__COUNT);
}
END_TEST

START_TEST(test_tier_out_of_range_aborts)
{
	(void)reason_tier_name(TIER__COUNT);
}
END_TEST

static Suite *reason_suite(void)
{
	Suite *s = suite_create("reason");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_codes);
	tcase_add_test(tc, test_statuses);
	tcase_add_test(tc, test_phrases);
	tcase_add_test(tc, test_instructions);
	tcase_add_test(tc, test_tiers);
	tcase_add_test(tc, test_doc_table);
	suite_add_tcase(s, tc);
	TCase *tc_abort = tcase_create("abort");
	tcase_add_test_raise_signal(tc_abort, test_code_out_of_range_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_status_out_of_range_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_instruction_out_of_range_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc_abort, test_tier_out_of_range_aborts, SIGABRT);
	suite_add_tcase(s, tc_abort);
	return s;
}

int main(void)
{
	return unit_run(reason_suite());
}
