#!/bin/sh
# `make demo`: the daemon on its embedded default policy, one command in a
# zero-network sandbox through it, the audit trail, and a clean stop.
#
# The sandbox is a fresh network namespace with nothing but `lo`. Inside it a
# minimal forwarder (tests/integ/forwarder.py; the real agentsnet-bridge is
# the next issue) maps 127.0.0.1:8080 to the sandbox's egress socket, and
# the agent is plain curl with the agents.net proxy variables. A stand-in
# model server on the host's 127.0.0.1:11434 shows the local-provider rule
# of the default policy (ollama.internal).
set -eu
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "demo: needs root (network namespaces)"; exit 77; }

work=$(mktemp -d /tmp/agentsnet-demo.XXXXXX)
ns="agentsnet-demo-$$"
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# A stand-in local model server, on the host only.
mkdir -p "$work/model/api"
printf '{"models":[{"name":"demo-model"}]}\n' >"$work/model/api/tags"
python3 -m http.server --bind 127.0.0.1 11434 --directory "$work/model" \
	>"$work/model.log" 2>&1 &
pids="$pids $!"

echo "== starting agentsnetd on its embedded default policy"
build/rel/agentsnetd --socket-dir "$work/run" --audit "$work/audit.jsonl" \
	2>"$work/agentsnetd.log" &
daemon=$!
pids="$pids $daemon"
sock="$work/run/sandboxes/default/egress.sock"
for _ in $(seq 100); do
	grep -q 'agentsnetd: ready' "$work/agentsnetd.log" 2>/dev/null && break
	sleep 0.05
done
grep -q 'agentsnetd: ready' "$work/agentsnetd.log" || { cat "$work/agentsnetd.log"; exit 1; }
sed 's/^/   /' "$work/agentsnetd.log"

echo "== a zero-network sandbox: interfaces inside it"
ip netns add "$ns"
ip -n "$ns" link set lo up
ip netns exec "$ns" ip -brief link | sed 's/^/   /'
ip netns exec "$ns" python3 tests/integ/forwarder.py --listen 127.0.0.1:8080 --unix "$sock" \
	2>"$work/forwarder.log" &
pids="$pids $!"
for _ in $(seq 100); do
	grep -q 'forwarder: ready' "$work/forwarder.log" 2>/dev/null && break
	sleep 0.05
done

agent() {
	echo "\$ $*" | sed 's/^/   /'
	ip netns exec "$ns" env HTTP_PROXY=http://127.0.0.1:8080 HTTPS_PROXY=http://127.0.0.1:8080 \
		http_proxy=http://127.0.0.1:8080 https_proxy=http://127.0.0.1:8080 \
		NO_PROXY=localhost,127.0.0.1 "$@" 2>&1 | sed 's/^/     /' || true
	echo
}
echo "== the agent's requests"
agent curl -s -m 5 http://ollama.internal/api/tags
agent curl -s -m 5 -D - -o /dev/null https://github.com/
agent curl -s -m 5 https://example.com/
agent sh -c 'curl -s -m 3 --noproxy "*" https://1.1.1.1/ || echo "direct connection failed (exit $?)"'

kill -TERM "$daemon"
wait "$daemon" && rc=0 || rc=$?
pids=$(echo "$pids" | sed "s/ $daemon//")
echo "== agentsnetd stopped (exit $rc); the audit trail:"
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    keys = ("event", "decision", "tier", "reason", "method", "host", "port", "status", "detail")
    print("   " + " ".join(f"{k}={r[k]}" for k in keys if r.get(k) is not None))
' "$work/audit.jsonl"
exit "$rc"
