#!/bin/sh
# Runs each unit-test binary under a timeout. Exit codes: 0 pass, 1 fail,
# 77 skip (the test prints why). Any failure fails the run.
set -u
fail=0
for t in "$@"; do
	timeout "${AN_TEST_TIMEOUT:-60}" "$t" >"$t.log" 2>&1
	rc=$?
	case $rc in
	0) echo "  PASS    $t" ;;
	77) echo "  SKIP    $t: $(tail -n 1 "$t.log")" ;;
	*) echo "  FAIL    $t (exit $rc)"; cat "$t.log"; fail=1 ;;
	esac
done
exit $fail
