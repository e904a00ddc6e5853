#!/bin/sh
# `make integ`: the integration suite (tests/integ/integ.py) under a global
# timeout, then the sandbox pass (tests/integ/sandbox.py: clients inside real
# `agentsnet run` sandboxes), the ingress pass (tests/integ/ingress.py:
# public requests through the gateway to servers in such sandboxes), the
# fairness pass and the adversarial pass (tests/adversarial/run.py: hostile
# bytes, each against the safe behaviour it must meet).
# Exit 0 pass, 1 fail, 77 skip (the reason is printed). A pass that exits 77
# is counted as skipped, never as passed: the run ends with a summary of every
# pass's result, duration and counts, "integ: passes: integ PASS 80s (117 passed, 0 failed,
# 0 skipped), sandbox SKIP 1s (...),
# ...; skipped: sandbox (<reason>)", the reason being the pass's last "SKIP:"
# line. Any failure or timeout makes the run exit 1; else any skip makes it
# exit 77.
# With CI=true (.ci/run) a skip fails the run (docs/testing.md, "Skips").
#
#   tests/integ/run.sh [integ.py options, e.g. --cases '04*' -v --keep]
#
# AGENTSNETD overrides the daemon under test (default: build/san/agentsnetd);
# AN_INTEG_TIMEOUT_S the global timeout (default 900 s), AN_SANDBOX_TIMEOUT_S
# the sandbox pass's (300 s). The namespaces are named after this shell's PID
# and deleted here too, so that they go even when the timeout had to kill the
# suite. The sandbox and ingress passes run only without options; alone they
# are `python3 tests/integ/sandbox.py [--cases GLOB] [--tests GLOB] -v` and
# `python3 tests/integ/ingress.py [--tests GLOB] -v` (AN_INGRESS_TIMEOUT_S, 150 s); the
# fairness pass (one sandbox's flood against another's requests) is
# `python3 tests/integ/fairness.py -v` (AN_FAIRNESS_TIMEOUT_S, 60 s); the fault
# pass (the audit log on a full disk) is `python3 tests/integ/faults.py -v`
# (AN_FAULTS_TIMEOUT_S, 240 s); the service pass (what the daemon tells systemd,
# the unit) is `python3 tests/integ/service.py -v` (AN_SERVICE_TIMEOUT_S, 360 s); the
# Kubernetes recipe's pass (deploy/kubernetes/ against the binaries) is
# `python3 tests/integ/deploy.py -v` (AN_DEPLOY_TIMEOUT_S, 60 s); the preset
# pass (npm, pip, git and a model API's client through the presets, against
# stand-ins of the real hosts) is `python3 tests/integ/presets.py -v`
# (AN_PRESETS_TIMEOUT_S, 120 s); the walkthrough pass (demo/README.md's commands run
# as written, in a namespace of its own, against stand-ins of the npm registry and the
# hosted model API; the Docker steps only where `docker info` works) is
# `python3 tests/integ/walkthrough.py -v` (AN_WALKTHROUGH_TIMEOUT_S, 180 s); the
# adversarial pass (hostile bytes against the safe behaviour each must meet,
# tests/adversarial/README.md) is `python3 tests/adversarial/run.py [--cases
# 'GROUP/ID'] -v` (AN_ADVERSARIAL_TIMEOUT_S, 120 s).
set -u
cd "$(dirname "$0")/../.."

daemon=${AGENTSNETD:-build/san/agentsnetd}
limit=${AN_INTEG_TIMEOUT_S:-900}
ns="agentsnet-it-$$"
rc=0
results=""
skipped=""
total_passed=0
total_failed=0
total_skipped=0

# Appends <text> to the list in the variable named <var>, comma-separated.
append() {
	eval "cur=\${$1}"
	if [ -z "$cur" ]; then
		eval "$1=\$2"
	else
		eval "$1=\"\$cur, \$2\""
	fi
}

# The final line: every pass's result and every skip with its reason.
summary() {
	echo "integ: passes: ${results:-none run}; skipped: ${skipped:-none}"
	echo "integ: in all: $total_passed passed, $total_failed failed, $total_skipped skipped"
}

# Counts pass <name> as skipped for <why>; with CI=true a skip fails the run.
skip() {
	append skipped "$1 ($2)"
	case ${CI:-} in
	'' | 0 | false) in_ci=false ;; # as tests/integ/integlib.py's ci()
	*) in_ci=true ;;
	esac
	if [ "$in_ci" = true ]; then
		echo "integ: FAIL: $1 skipped with CI=$CI ($2): no integration skip is allowed in CI"
		rc=1
	elif [ $rc -eq 0 ]; then
		rc=77
	fi
}

# Counts pass <name>'s exit status <st> (its output in <log>, its duration <s> in seconds):
# PASS, SKIP, TIMEOUT or FAIL, each with the duration and the pass's own counts, its last
# "<label>: P passed, F failed, S skipped" line (integlib.print_counts; the adversarial
# pass's has "N pending, " before the skips; the label is the pass's name, integ for
# no-splice), added to the totals. A pass that ends without that line fails, and so does
# one that exits 0 with a failure counted or nothing passed: every harness says what it
# ran, and its counts agree with its status. A pass that passed with skips of its own
# documented list (walkthrough's) is named in the skip list, without failing.
record() {
	label=$1
	[ "$label" = no-splice ] && label=integ
	counts=$(grep -a -E "^$label: [0-9]+ passed, [0-9]+ failed, ([0-9]+ pending, )?[0-9]+ skipped" \
		"$3" | tail -n 1)
	if [ -n "$counts" ]; then
		set -- "$1" "$2" "$3" "$4" "$(echo "$counts" | sed -E "s/^$label: //; s/ \\(.*//")"
		n_passed=$(echo "$5" | sed -E 's/^0*([0-9]+) passed.*/\1/')
		n_failed=$(echo "$5" | sed -E 's/.* 0*([0-9]+) failed.*/\1/')
		n_skipped=$(echo "$5" | sed -E 's/.* 0*([0-9]+) skipped.*/\1/')
		total_passed=$((total_passed + n_passed))
		total_failed=$((total_failed + n_failed))
		total_skipped=$((total_skipped + n_skipped))
		if [ "$2" = 0 ] && { [ "$n_failed" -ne 0 ] || [ "$n_passed" -eq 0 ]; }; then
			echo "integ: FAIL: $1 exited 0 but counted $5"
			set -- "$1" 1 "$3" "$4" "$5"
		elif [ "$2" = 0 ] && [ "$n_skipped" -ne 0 ]; then
			append skipped "$1 ($n_skipped of its documented skips)"
		fi
	elif [ "$2" = 0 ] || [ "$2" = 77 ]; then
		echo "integ: FAIL: $1 ended without its counts line (N passed, N failed, N skipped)"
		set -- "$1" 1 "$3" "$4" "no counts"
		total_failed=$((total_failed + 1))
	else # failed or timed out before its counts: one failure in the totals
		set -- "$1" "$2" "$3" "$4" "no counts"
		total_failed=$((total_failed + 1))
	fi
	case $2 in
	0) append results "$1 PASS ${4}s ($5)" ;;
	77)
		append results "$1 SKIP ${4}s ($5)"
		why=$(grep -a 'SKIP' "$3" | tail -n 1)
		if [ -z "$why" ]; then
			why="no reason printed: $(tail -n 1 "$3")"
		fi
		skip "$1" "${why#*SKIP: }"
		;;
	124 | 137)
		append results "$1 TIMEOUT ${4}s ($5)"
		echo "integ: FAIL: $1 pass timed out"
		rc=1
		;;
	*)
		append results "$1 FAIL (exit $2) ${4}s ($5)"
		rc=1
		;;
	esac
}

# The run itself cannot start: counted as the skip of pass "run.sh".
cannot_run() {
	echo "integ: SKIP: $1"
	skip run.sh "$1"
	summary
	exit $rc
}

if [ "$(id -u)" -ne 0 ]; then
	cannot_run "network namespaces need root"
fi
for tool in ip python3 timeout; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		cannot_run "$tool is not installed"
	fi
done
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
	cannot_run "python3 >= 3.11 needed"
fi

logs=$(mktemp -d /tmp/agentsnet-integ-logs.XXXXXX)
cleanup() {
	ip netns del "$ns" 2>/dev/null
	ip netns del "$ns-up" 2>/dev/null
	rm -rf "/etc/netns/$ns" "/run/$ns" "/run/$ns-dbus" "$logs"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Runs pass <name>'s command (the rest of the arguments), its output shown as it comes and
# kept in $logs/<name>.log (a skip's reason is read there), then counts its exit status.
run_logged() {
	name=$1
	shift
	started=$(date +%s)
	{
		"$@"
		echo $? >"$logs/$name.rc"
	} 2>&1 | tee "$logs/$name.log"
	record "$name" "$(cat "$logs/$name.rc" 2>/dev/null || echo 1)" "$logs/$name.log" \
		$(($(date +%s) - started))
}

run_logged integ timeout --kill-after=15 "$limit" python3 -u tests/integ/integ.py \
	--daemon "$daemon" --netns "$ns" "$@"
# The copy relay with splice switched off (the kill switch of the fast path):
# the tunnel cases again, bytes checked by sha256 both ways.
if [ $rc -eq 0 ] && [ $# -eq 0 ]; then
	echo "integ: tunnel cases again with AN_NO_SPLICE=1 (copy relay)"
	run_logged no-splice env AN_NO_SPLICE=1 timeout --kill-after=15 "$limit" python3 -u \
		tests/integ/integ.py --daemon "$daemon" --netns "$ns" --cases '0[12]*'
elif [ $# -eq 0 ]; then
	append results "no-splice NOT RUN (integ did not pass)"
fi
# A pass of its own: <name> <script> <timeout in s>. A timeout or a failure makes the run
# fail; a skip (77) is counted as one (and fails the run with CI=true).
run_pass() {
	echo "integ: $1 pass (tests/integ/$2)"
	run_logged "$1" timeout --kill-after=15 "$3" python3 -u "tests/integ/$2" \
		--daemon "$daemon" --netns "$ns"
}
# The sandbox pass reuses the names: its host namespace is "$ns", its daemon's
# socket directory /run/$ns (both removed by cleanup above). The ingress pass
# (public requests through the gateway to servers in `agentsnet run`
# sandboxes) reuses them too.
if [ $# -eq 0 ]; then
	run_pass sandbox sandbox.py "${AN_SANDBOX_TIMEOUT_S:-420}"
	run_pass ingress ingress.py "${AN_INGRESS_TIMEOUT_S:-150}"
	run_pass fairness fairness.py "${AN_FAIRNESS_TIMEOUT_S:-60}"
	run_pass faults faults.py "${AN_FAULTS_TIMEOUT_S:-240}"
	run_pass service service.py "${AN_SERVICE_TIMEOUT_S:-360}"
	run_pass deploy deploy.py "${AN_DEPLOY_TIMEOUT_S:-60}"
	run_pass presets presets.py "${AN_PRESETS_TIMEOUT_S:-120}"
	run_pass walkthrough walkthrough.py "${AN_WALKTHROUGH_TIMEOUT_S:-180}"
	run_pass docsamples docsamples.py "${AN_DOCSAMPLES_TIMEOUT_S:-60}"
	run_pass deps deps.py "${AN_DEPS_TIMEOUT_S:-120}"
	run_pass adversarial ../adversarial/run.py "${AN_ADVERSARIAL_TIMEOUT_S:-120}"
fi
summary
exit $rc
