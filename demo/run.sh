#!/bin/sh
# `make demo`: the whole sandbox path end to end, on this machine, in a
# temporary directory that is removed afterwards (demo/README.md explains each
# step and every line it prints):
#
#   1. `agentsnet ca init`: a demo root CA and the bundle (host roots + CA);
#   2. a stand-in local model server on 127.0.0.1:11434, unless one runs there;
#   3. agentsnetd on its embedded default policy, signing with that CA;
#   4. `agentsnet run`: a zero-network sandbox (only `lo`) registered with the
#      daemon, agentsnet-bridge as its PID 1, and in it plain curl with no proxy
#      flags of its own: what the bridge set is all it knows;
#   5. the audit trail, every decision attributed to the sandbox.
#
# Each expectation is checked; the exit status is 0 only when all held and the
# daemon stopped cleanly (77: not root). Every process started here is stopped
# by its PID.
#
#   demo/run.sh                 the demo
#   demo/run.sh --model-server  only the stand-in model server, in the
#                               foreground until ^C (README step 4)
set -eu
cd "$(dirname "$0")/.."

# The stand-in: what an Ollama answers at GET /api/tags, and an OpenAI-style
# chat completion (streamed or not) with a fixed reply, which is all an agent
# harness needs to run end to end without a real model.
model_server() {
	cat >"$1" <<'EOF'
import json, os, signal, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = "Hello from the agentsnet demo's stand-in model, reached through agentsnetd."

class Model(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("model: " + fmt % args + "\n")

    def send_json(self, obj, status=200):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/api/tags":
            self.send_json({"models": [{"name": "demo-model"}]})
        elif self.path.rstrip("/") == "/v1/models":
            self.send_json({"object": "list", "data": [{"id": "demo-model", "object": "model"}]})
        else:
            self.send_json({"error": "not found"}, 404)

    def do_POST(self):
        size = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(size) or b"{}")
        except ValueError:
            return self.send_json({"error": "bad json"}, 400)
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self.send_json({"error": "not found"}, 404)
        head = {"id": "chatcmpl-demo", "created": int(time.time()),
                "model": req.get("model", "demo-model")}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not req.get("stream"):
            msg = {"role": "assistant", "content": REPLY}
            return self.send_json(dict(head, object="chat.completion", usage=usage,
                                       choices=[{"index": 0, "message": msg,
                                                 "finish_reason": "stop"}]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for delta, end in (({"role": "assistant", "content": REPLY}, None), ({}, "stop")):
            chunk = dict(head, object="chat.completion.chunk",
                         choices=[{"index": 0, "delta": delta, "finish_reason": end}])
            if end:
                chunk["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

server = ThreadingHTTPServer(("127.0.0.1", 11434), Model)
if sys.argv[1:] == ["--unlink"]:
    os.unlink(sys.argv[0])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sys.stderr.write("model: stand-in model server on 127.0.0.1:11434\n")
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
EOF
}

port_busy() {
	python3 -c 'import socket; socket.create_connection(("127.0.0.1", 11434), 1)' 2>/dev/null
}

if [ "${1:-}" = "--model-server" ]; then
	port_busy && { echo "demo: 127.0.0.1:11434 is already in use"; exit 1; }
	py=$(mktemp /tmp/agentsnet-model.XXXXXX)
	model_server "$py"
	exec python3 -u "$py" --unlink
elif [ $# -gt 0 ]; then
	echo "usage: demo/run.sh [--model-server]"
	exit 2
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: run as root (sudo make demo); demo/README.md shows agentsnet run unprivileged"
	exit 77
fi
# The daemon is built by the Makefile's demo target; the CLI and the bridge here.
make -s --no-print-directory build/rel/agentsnetd build/rel/agentsnet build/rel/agentsnet-bridge

work=$(mktemp -d /tmp/agentsnet-demo.XXXXXX)
sandbox="demo-$$"
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Waits up to 5 s for <pattern> in <file>; shows the file and fails otherwise.
wait_for() {
	for _ in $(seq 100); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "demo: FAIL: '$2' did not appear in $1:"
	sed 's/^/   /' "$1"
	exit 1
}

echo "== 1. a demo CA: agentsnet ca init --dir $work/ca"
build/rel/agentsnet ca init --dir "$work/ca" 2>&1 | sed 's/^/   /'
bundle="$work/ca/bundle.pem"
[ -s "$bundle" ] || { echo "demo: FAIL: no $bundle"; exit 1; }

echo "== 2. a local model server on 127.0.0.1:11434"
if port_busy; then
	echo "   something already listens there (a real Ollama?): the demo uses it"
	model_check="models"
else
	model_server "$work/model.py"
	python3 -u "$work/model.py" 2>"$work/model.log" &
	pids="$pids $!"
	wait_for "$work/model.log" 'stand-in model server'
	echo "   the demo's stand-in (demo/run.sh --model-server runs it alone)"
	model_check="demo-model"
fi

echo "== 3. agentsnetd on its embedded default policy, with the demo CA"
build/rel/agentsnetd --socket-dir "$work/run" --audit "$work/audit.jsonl" --ca-dir "$work/ca" \
	2>"$work/agentsnetd.log" &
daemon=$!
pids="$pids $daemon"
wait_for "$work/agentsnetd.log" 'agentsnetd: ready'
sed 's/^/   /' "$work/agentsnetd.log"

# What runs inside the sandbox: plain commands, no proxy flags, each checked.
inner='
fail=0
say() { printf "\n\$ %s\n" "$1"; }
show() { sed "s/^/  /"; }
check() {
	if [ "$1" = 0 ]; then echo "  ok: $2"; else echo "  FAILED: $2"; fail=1; fi
}
say "cut -d: -f1 /proc/net/dev | sed 1,2d    (the network interfaces)"
ifs=$(cut -d: -f1 /proc/net/dev | sed 1,2d | tr -d " ")
printf "%s\n" "$ifs" | show
[ "$ifs" = lo ]
check $? "zero network: lo is the only interface"

say "env | grep ...    (some of what agentsnet-bridge set; demo/README.md lists all)"
vars="AGENT_[A-Z_]*|HTTPS?_PROXY|NO_PROXY|NODE_USE_ENV_PROXY|NODE_EXTRA_CA_CERTS|SSL_CERT_FILE"
env | grep -E "^($vars)=" | sort | show

say "curl -s -m 5 http://ollama.internal/api/tags"
out=$(curl -s -m 5 http://ollama.internal/api/tags); rc=$?
printf "%s\n" "$out" | show
[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "$MODEL_CHECK"
check $? "local tier: ollama.internal relayed to 127.0.0.1:11434"

say "curl -s -m 5 -D - -o /dev/null https://github.com/"
out=$(curl -s -m 5 -D - -o /dev/null https://github.com/ | tr -d "\r")
printf "%s\n" "$out" | show
printf "%s" "$out" | grep -q "^X-Agent-Reason: host_not_allowed"
check $? "not on the list: 403 host_not_allowed, in-band"

say "curl -s -m 5 -D - -w \"(final status %{http_code})\" https://example.com/"
out=$(curl -s -m 5 -D - -w "(final status %{http_code})" https://example.com/); rc=$?
out=$(printf "%s" "$out" | tr -d "\r")
printf "%s\n" "$out" | show
# A 200 counts only if curl verified the answer (the leaf signed by the demo CA).
[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "(final status 200)" &&
	printf "%s" "$out" | grep -q "fake-response tier"
check $? "fake tier: answered here (200) with a leaf the demo CA signed; nothing left the host"

say "getent hosts github.com"
out=$(getent hosts github.com); rc=$?
printf "%s\n" "${out:-(no answer)}" | show
[ $rc -ne 0 ]
check $? "no DNS inside: names are resolved by the proxy only"

say "curl -s -m 3 --noproxy \"*\" https://1.1.1.1/"
curl -s -m 3 --noproxy "*" -o /dev/null https://1.1.1.1/; rc=$?
echo "  curl exit $rc"
[ $rc -ne 0 ]
check $? "no route: a direct connection fails"
exit $fail
'

echo "== 4. agentsnet run --sandbox $sandbox --ca $bundle -- sh -c '<these commands>'"
{
	r=0
	# Bounded: agentsnet run passes timeout's SIGTERM on to the sandbox.
	MODEL_CHECK="$model_check" timeout --foreground --kill-after=10 120 build/rel/agentsnet run \
		--socket-dir "$work/run" --sandbox "$sandbox" --ca "$bundle" --env MODEL_CHECK \
		-- sh -c "$inner" 2>&1 || r=$?
	echo "$r" >"$work/run.rc"
} | sed 's/^/   /'
rc=$(cat "$work/run.rc")
[ "$rc" -eq 0 ] || echo "demo: FAIL: the sandbox's checks (agentsnet run exited $rc)"

kill -TERM "$daemon" 2>/dev/null || true
drc=0
wait "$daemon" || drc=$?
pids=$(echo "$pids" | sed "s/ $daemon//")
echo "== agentsnetd stopped (exit $drc)"
[ $drc -eq 0 ] || { echo "demo: FAIL: agentsnetd exited $drc"; rc=1; }

echo "== 5. the audit trail ($work/audit.jsonl), one record a line:"
python3 - "$work/audit.jsonl" "$sandbox" <<'EOF' || rc=1
import json, sys
path, sandbox = sys.argv[1], sys.argv[2]
keys = ("event", "sandbox", "decision", "tier", "reason", "rule", "method", "host", "port",
        "status", "bytes_up", "bytes_down", "addr", "detail")
decisions, wrong = 0, []
for line in open(path):
    r = json.loads(line)
    print("   " + " ".join(f"{k}={r[k]}" for k in keys if r.get(k) is not None))
    if r["event"] == "decision":
        decisions += 1
        if r.get("sandbox") != sandbox:
            wrong.append(r["id"])
# local, denied, and the fake tier's CONNECT plus the request inside its TLS
if decisions != 4 or wrong:
    print(f"demo: FAIL: {decisions} decisions (4 expected); not from {sandbox}: {wrong}")
    sys.exit(1)
print(f"   ({decisions} decisions, each attributed to sandbox {sandbox})")
EOF
if [ "$rc" -eq 0 ]; then echo "demo: ok"; else echo "demo: FAILED"; fi
exit "$rc"
