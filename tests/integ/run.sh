#!/bin/sh
# `make integ`: the integration suite (tests/integ/integ.py) under a global
# timeout, then the sandbox pass (tests/integ/sandbox.py: clients inside real
# `agentsnet run` sandboxes), the ingress pass (tests/integ/ingress.py:
# public requests through the gateway to servers in such sandboxes), the
# fairness pass and the adversarial pass (tests/adversarial/run.py: hostile
# bytes, each against the safe behaviour it must meet).
# Exit 0 pass, 1 fail, 77 skip (the reason is printed).
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
# (AN_FAULTS_TIMEOUT_S, 90 s); the service pass (what the daemon tells systemd,
# the unit) is `python3 tests/integ/service.py -v` (AN_SERVICE_TIMEOUT_S, 180 s); the
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

if [ "$(id -u)" -ne 0 ]; then
	echo "integ: SKIP: network namespaces need root"
	exit 77
fi
for tool in ip python3 timeout; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "integ: SKIP: $tool is not installed"
		exit 77
	fi
done
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
	echo "integ: SKIP: python3 >= 3.11 needed"
	exit 77
fi

cleanup() {
	ip netns del "$ns" 2>/dev/null
	ip netns del "$ns-up" 2>/dev/null
	rm -rf "/etc/netns/$ns" "/run/$ns" "/run/$ns-dbus"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

timeout --kill-after=15 "$limit" python3 -u tests/integ/integ.py --daemon "$daemon" \
	--netns "$ns" "$@"
rc=$?
# The copy relay with splice switched off (the kill switch of the fast path):
# the tunnel cases again, bytes checked by sha256 both ways.
if [ $rc -eq 0 ] && [ $# -eq 0 ]; then
	echo "integ: tunnel cases again with AN_NO_SPLICE=1 (copy relay)"
	AN_NO_SPLICE=1 timeout --kill-after=15 "$limit" python3 -u tests/integ/integ.py \
		--daemon "$daemon" --netns "$ns" --cases '0[12]*'
	rc=$?
fi
# A pass of its own: <name> <script> <timeout in s>. A timeout or a failure
# (anything but 0, or 77 for a skip) makes the run fail.
run_pass() {
	echo "integ: $1 pass (tests/integ/$2)"
	timeout --kill-after=15 "$3" python3 -u "tests/integ/$2" --daemon "$daemon" --netns "$ns"
	case $? in
	0 | 77) ;;
	124 | 137) echo "integ: FAIL: $1 pass timed out" && rc=1 ;;
	*) rc=1 ;;
	esac
}
# The sandbox pass reuses the names: its host namespace is "$ns", its daemon's
# socket directory /run/$ns (both removed by cleanup above). The ingress pass
# (public requests through the gateway to servers in `agentsnet run`
# sandboxes) reuses them too.
if [ $# -eq 0 ]; then
	run_pass sandbox sandbox.py "${AN_SANDBOX_TIMEOUT_S:-300}"
	run_pass ingress ingress.py "${AN_INGRESS_TIMEOUT_S:-150}"
	run_pass fairness fairness.py "${AN_FAIRNESS_TIMEOUT_S:-60}"
	run_pass faults faults.py "${AN_FAULTS_TIMEOUT_S:-90}"
	run_pass service service.py "${AN_SERVICE_TIMEOUT_S:-180}"
	run_pass deploy deploy.py "${AN_DEPLOY_TIMEOUT_S:-60}"
	run_pass presets presets.py "${AN_PRESETS_TIMEOUT_S:-120}"
	run_pass walkthrough walkthrough.py "${AN_WALKTHROUGH_TIMEOUT_S:-180}"
	run_pass adversarial ../adversarial/run.py "${AN_ADVERSARIAL_TIMEOUT_S:-120}"
fi
case $rc in
0 | 1 | 77) ;;
124 | 137)
	echo "integ: FAIL: global timeout of ${limit}s"
	rc=1
	;;
*)
	echo "integ: FAIL: integ.py exited $rc"
	rc=1
	;;
esac
exit $rc
