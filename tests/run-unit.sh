#!/bin/sh
# Runs each unit-test binary under a timeout, then prints one summary line:
#
#   unit: N passed, F failed, S skipped (<binary>: <test>: <why>; ...)
#
# A binary exits 0 (pass), 1 (fail) or 77 (its whole suite skipped). libcheck
# knows no skip, so a test that cannot run all or part of its checks here
# records it (tests/unit/unit.h, unit_skip()): one "SKIP: <test>: <why>" line
# in the file $AN_UNIT_SKIP_FILE, which this script sets to <binary>.skips.
# N counts the tests that passed with no skip, F the failed tests (a binary
# that crashed or timed out before libcheck's count counts as one), S the
# skips (a test or a whole suite). Any failure fails the run, and so does a
# skip printed the old, uncounted way (a log line starting "skip:"). With
# CI=true, a skip whose "<binary>: <test>: <why>" is not on the allowlist in
# docs/testing.md (the "Skips" section's table rows "| unit | `...` |") fails
# the run too.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
allowlist=$(awk '/^## /{ in_skips = ($0 == "## Skips") } in_skips' "$root/docs/testing.md" 2>/dev/null |
	sed -n 's/^| unit | `\([^`]*\)` |.*/\1/p')
# A CI run: CI set to anything but empty, 0 or false (as tests/integ/integlib.py's ci()).
case ${CI:-} in
'' | 0 | false) ci=false ;;
*) ci=true ;;
esac
fail=0
passed=0
failed=0
skipped=0
reasons=""

# Appends <reason> to the summary's list.
add_reason() {
	if [ -z "$reasons" ]; then
		reasons=$1
	else
		reasons="$reasons; $1"
	fi
}

# The skips <binary name> <skip file> recorded: counts and prints them, and
# under CI fails any not on the allowlist.
count_skips() {
	[ -s "$2" ] || return 0
	while IFS= read -r line; do
		key="$1: ${line#SKIP: }"
		skipped=$((skipped + 1))
		if printf '%s\n' "$allowlist" | grep -Fxq -- "$key"; then
			echo "  SKIP    $key (allowed)"
			add_reason "$key (allowed)"
		elif [ "$ci" = true ]; then
			echo "  FAIL    $key: a skip with CI=true, not on docs/testing.md's allowlist"
			add_reason "$key (NOT ALLOWED)"
			fail=1
		else
			echo "  SKIP    $key"
			add_reason "$key"
		fi
	done <"$2"
}

for t in "$@"; do
	name=${t#*tests/unit/}
	case $t in
	/*) skips="$t.skips" ;;
	*) skips="$PWD/$t.skips" ;;
	esac
	rm -f "$skips"
	AN_UNIT_SKIP_FILE=$skips timeout "${AN_TEST_TIMEOUT:-60}" "$t" >"$t.log" 2>&1
	rc=$?
	# libcheck's own count, "100%: Checks: 24, Failures: 0, Errors: 0", summed over suites.
	counts=$(sed -n 's/^[0-9]*%: Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\)$/\1 \2 \3/p' \
		"$t.log" | awk '{ c += $1; f += $2 + $3 } END { print c + 0, f + 0 }')
	checks=${counts% *}
	bad=${counts#* }
	# Tests that recorded a skip (one or more lines each); a whole suite's is "(suite)".
	nskip=0
	if [ -s "$skips" ]; then
		nskip=$(sed -n 's/^SKIP: \([^:]*\): .*/\1/p' "$skips" | grep -vx '(suite)' | sort -u | wc -l)
	fi
	case $rc in
	0)
		echo "  PASS    $t"
		passed=$((passed + checks - bad - nskip))
		;;
	77)
		echo "  SKIP    $t (the whole suite)"
		if ! grep -q '^SKIP: (suite): ' "$skips" 2>/dev/null; then
			echo "  FAIL    $t: exit 77 with no skip recorded: $(tail -n 1 "$t.log")"
			failed=$((failed + 1))
			fail=1
		fi
		;;
	*)
		echo "  FAIL    $t (exit $rc)"
		cat "$t.log"
		if [ "$bad" -eq 0 ]; then
			bad=1
		fi
		failed=$((failed + bad))
		# No summary line (a crash, a timeout): no pass is counted for this binary.
		this=$((checks - bad - nskip))
		[ "$this" -gt 0 ] || this=0
		passed=$((passed + this))
		fail=1
		;;
	esac
	if grep -n '^skip' "$t.log" >/dev/null; then
		echo "  FAIL    $t: a skip not recorded (print it with unit_skip(), tests/unit/unit.h):"
		grep '^skip' "$t.log" | sed 's/^/          /'
		failed=$((failed + 1))
		fail=1
	fi
	count_skips "$name" "$skips"
done
if [ "$passed" -lt 0 ]; then
	passed=0
fi
if [ -n "$reasons" ]; then
	echo "unit: $passed passed, $failed failed, $skipped skipped ($reasons)"
else
	echo "unit: $passed passed, $failed failed, $skipped skipped"
fi
exit $fail
