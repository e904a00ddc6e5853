"""Policy reload checks of the integration suite (integ.py runs them last).

With wrk driving plain-HTTP requests through the proxy the whole time, and a
CONNECT tunnel open under a rule the reload is about to drop:
  - SIGHUP with a file that adds reload.test and drops keep.test: the new
    generation is published within a second, reload.test is allowed at once,
    keep.test is refused to new requests, and the open tunnel keeps working;
  - a broken file over the control socket: refused with file:line, the old
    policy still serves, both outcomes audited;
  - a file that drops a profile a run-time sandbox uses: refused, naming both;
  - a file that adds a sandbox opens its socket; one that drops it removes it;
  - wrk saw no error and no non-2xx answer in all of it.
"""

import json
import os
import signal
import socket
import stat
import subprocess
import time

from integlib import client_env, log, read_audit, read_text, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KEEP_RULE = ("      - {id: keep, host: keep.test, tier: passthrough, owner: tests, "
             "reason: outlives a reload}\n")
RELOAD_RULE = ("      - {id: reload, host: reload.test, tier: passthrough, owner: tests, "
               "reason: added by a reload}\n")
WRK_SECONDS = 8
ADD_REMOVE_ROUNDS = 50

TUNNEL_CLIENT = r"""
import socket, sys
port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", 8080), timeout=10)
f = s.makefile("rb")
s.sendall(b"CONNECT keep.test:%d HTTP/1.1\r\nHost: keep.test:%d\r\n\r\n" % (port, port))
status = f.readline().split()[1].decode()
while f.readline() not in (b"\r\n", b""):
    pass
print("connect " + status, flush=True)
for _ in sys.stdin:
    s.sendall(b"GET /small.json HTTP/1.1\r\nHost: keep.test\r\n\r\n")
    line = f.readline()
    length = 0
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        if h.lower().startswith(b"content-length:"):
            length = int(h.split(b":")[1])
    body = f.read(length)
    print("get %s %d" % (line.split()[1].decode(), len(body)), flush=True)
"""


class Reload:
    def __init__(self, suite):
        self.suite = suite
        self.vars = suite.vars
        self.path = self.vars["policy"]
        self.base = read_text(self.path)
        self.control = os.path.join(self.vars["sock_dir"], "control.sock")

    def control_line(self, line):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(self.control)
            s.sendall(line.encode() + b"\n")
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode()

    def generation(self):
        answer = self.control_line("policy status").split()
        return int(answer[answer.index("generation") + 1])

    def write(self, text):
        tmp = self.path + ".new"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.rename(tmp, self.path)

    def status_of(self, host):
        url = "http://%s:%d/small.json" % (host, self.vars["http_port"])
        proc = subprocess.run(self.suite.in_sandbox(
            ["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
             "-x", self.vars["proxy"], url]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=client_env(self.vars["tmp"]), timeout=20, check=False)
        return proc.stdout.decode().strip()

    def start_wrk(self):
        env = client_env(self.vars["tmp"], {
            "BENCH_TARGET": "origin.test:%d" % self.vars["http_port"],
            "BENCH_PATH": "/small.json"})
        out = open(os.path.join(self.vars["tmp"], "wrk.out"), "wb")
        p = self.suite.procs.start("wrk", self.suite.in_sandbox(
            ["wrk", "-t1", "-c4", "-d%ds" % WRK_SECONDS, "--timeout", "5s", "-s",
             os.path.join(ROOT, "bench", "forward.lua"), "http://127.0.0.1:8080/"]),
            stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()
        return p

    def start_tunnel(self):
        return self.suite.procs.start("tunnel", self.suite.in_sandbox(
            ["python3", "-c", TUNNEL_CLIENT, str(self.vars["http_port"])]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=client_env(self.vars["tmp"]))

    def tunnel_get(self, tunnel):
        tunnel.stdin.write(b"\n")
        tunnel.stdin.flush()
        return tunnel.stdout.readline().decode().strip()


def check_sighup(r, tunnel):
    """SIGHUP swaps in a file with reload.test and without keep.test."""
    errs = []
    before = r.generation()
    r.write(r.base.replace(KEEP_RULE, RELOAD_RULE))
    t0 = time.monotonic()
    r.suite.daemon.send_signal(signal.SIGHUP)
    wait_for(lambda: r.generation() > before, 5, "a new policy generation after SIGHUP")
    took = time.monotonic() - t0
    if took > 1.0:
        errs.append("the new generation took %.2fs, want <= 1s" % took)
    for host, want in (("reload.test", "200"), ("keep.test", "403")):
        got = r.status_of(host)
        if got != want:
            errs.append("%s after the reload: %s, want %s" % (host, got, want))
    got = r.tunnel_get(tunnel)
    if not got.startswith("get 200 "):
        errs.append("the tunnel opened before the reload answered %r, want get 200" % got)
    r.suite.result("reload: SIGHUP publishes the new policy in %.2fs; the open tunnel "
                   "keeps working" % took, errs)


def check_broken(r):
    """A file that does not load is refused; the old policy stays."""
    errs = []
    before = r.generation()
    r.write(r.base.replace(RELOAD_RULE, "").replace(
        "profiles:\n", "profiles:\n  integ: {rules: [], colour: blue}\n", 1))
    # Through the CLI, as an operator would: exit 1 and the loader's file:line.
    cli = os.path.join(os.path.dirname(r.suite.args.daemon), "agentsnet")
    proc = subprocess.run([cli, "policy", "reload", "--socket-dir", r.vars["sock_dir"]],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                          check=False)
    answer = proc.stderr.decode()
    if proc.returncode != 1 or "error reload_refused" not in answer or \
            "policy.yaml:" not in answer:
        errs.append("agentsnet policy reload: exit %d, %r; want 1 and reload_refused with "
                    "file:line" % (proc.returncode, answer))
    if r.generation() != before:
        errs.append("the generation moved on a refused reload")
    if r.status_of("reload.test") != "200":
        errs.append("reload.test is no longer served after a refused reload")
    r.suite.result("reload: a broken file is refused (%s); the old policy serves"
                   % answer.strip()[:90], errs)


def check_profile_in_use(r):
    """A file without a profile a run-time sandbox uses is refused; then it goes."""
    errs = []
    added = r.control_line("sandbox add rl1 other")
    without_other = r.base.replace("  other:\n    rules:\n", "  gone:\n    rules:\n").replace(
        "profile: other}", "profile: gone}")
    r.write(without_other)
    answer = r.control_line("policy reload")
    if not added.startswith("ok "):
        errs.append("sandbox add rl1 other: %r" % added)
    if "rl1" not in answer or "other" not in answer or not answer.startswith("error"):
        errs.append("reload without profile other answered %r, want a refusal naming "
                    "rl1 and other" % answer)
    r.control_line("sandbox rm rl1")
    answer = r.control_line("policy reload")
    if not answer.startswith("ok "):
        errs.append("after sandbox rm rl1 the reload answered %r, want ok" % answer)
    listing = r.control_line("sandbox ls")
    if "sb2 gone " not in listing:
        errs.append("sb2 is not on its renamed profile: %r" % listing)
    r.suite.result("reload: a profile in use by a run-time sandbox cannot be dropped", errs)


def check_sandbox_list(r):
    """A file sandbox added by a reload gets its socket (with `uid`, that uid's alone, 0600);
    its uid changed, the reload is refused; dropped, it loses its socket."""
    errs = []
    sock = os.path.join(r.vars["sock_dir"], "sandboxes", "sb3", "egress.sock")
    r.write(r.base.replace("sandboxes:\n",
                           "sandboxes:\n  - {id: sb3, profile: other, uid: nobody}\n"))
    answer = r.control_line("policy reload")
    if not answer.startswith("ok ") or "+1" not in answer or not os.path.exists(sock):
        errs.append("adding sb3: %r, socket %s" % (answer, os.path.exists(sock)))
    else:
        st = os.lstat(sock)
        if st.st_uid != 65534 or stat.S_IMODE(st.st_mode) != 0o600:
            errs.append("sb3 (uid: nobody): egress.sock is uid %d mode %o, want 65534 600" % (
                st.st_uid, stat.S_IMODE(st.st_mode)))
    r.write(r.base.replace("sandboxes:\n",
                           "sandboxes:\n  - {id: sb3, profile: other, uid: 4242}\n"))
    answer = r.control_line("policy reload")
    if not answer.startswith("error reload_refused") or "sb3's uid changed" not in answer:
        errs.append("sb3's uid changed: %r, want reload_refused naming it" % answer)
    r.write(r.base)
    answer = r.control_line("policy reload")
    if not answer.startswith("ok ") or "-1" not in answer or os.path.exists(sock):
        errs.append("dropping sb3: %r, socket still there: %s" % (answer, os.path.exists(sock)))
    r.suite.result("reload: sandboxes the file adds are opened (a uid's alone with uid), a "
                   "changed uid refused, ones it drops removed", errs)


def check_add_remove(r):
    """A sandbox removed right after it was added, again and again under load: every
    removal completes (the worker runs the add before the removal)."""
    errs = []
    for i in range(ADD_REMOVE_ROUNDS):
        sid = "rl-churn-%d" % i
        added = r.control_line("sandbox add %s other" % sid)
        removed = r.control_line("sandbox rm %s" % sid) if added.startswith("ok ") else ""
        if not added.startswith("ok ") or removed.strip() != "ok":
            errs.append("round %d: add %r, rm %r" % (i, added.strip(), removed.strip()))
            break
    r.suite.result("reload: %d sandboxes added and at once removed under load, each removal "
                   "completes" % ADD_REMOVE_ROUNDS, errs)


def check_wrk(r, wrk):
    errs = []
    try:
        wrk.wait(WRK_SECONDS + 20)
    except subprocess.TimeoutExpired:
        r.suite.procs.stop(wrk)
        errs.append("wrk did not finish")
    text = read_text(os.path.join(r.vars["tmp"], "wrk.out"))
    lines = [x for x in text.splitlines() if x.startswith("{")]
    doc = json.loads(lines[-1]) if lines else {}
    if not doc:
        errs.append("no wrk summary in %r" % text[-2000:])
    elif doc["requests"] < 100 or doc["errors"] != 0 or doc["non_2xx"] != 0:
        errs.append("wrk: %d requests, %d errors, %d non-2xx; want >= 100 and none lost"
                    % (doc["requests"], doc["errors"], doc["non_2xx"]))
    r.suite.result("reload: wrk through every reload lost no request (%s requests)"
                   % doc.get("requests"), errs)


def check_audited(r):
    path = r.vars["audit"]
    want = ("policy_reloaded", "policy_reload_refused")

    def notices():
        records, _ = read_audit(path)
        return {w for w in want for rec in records
                if rec.get("event") == "notice" and str(rec.get("detail", "")).startswith(w)}
    try:
        wait_for(lambda: len(notices()) == len(want), 5, "the reload notices in the audit")
        errs = []
    except Exception as e:  # noqa: BLE001 - reported as the check's failure
        errs = ["%s: found %s" % (e, sorted(notices()))]
    r.suite.result("reload: reloads and refusals are audited", errs)


def run(suite):
    """Runs every reload check against the suite's running daemon and forwarder."""
    r = Reload(suite)
    tunnel = r.start_tunnel()
    first = tunnel.stdout.readline().decode().strip()
    if first != "connect 200":
        suite.result("reload: a tunnel opens before the reload", ["got %r" % first])
        suite.procs.stop(tunnel)
        return
    wrk = r.start_wrk()
    time.sleep(1)
    try:
        check_sighup(r, tunnel)
        check_broken(r)
        check_profile_in_use(r)
        check_sandbox_list(r)
        check_add_remove(r)
    finally:
        r.write(r.base)
        log("# reload: policy file restored: %s" % r.control_line("policy reload").strip())
    check_wrk(r, wrk)
    tunnel.stdin.close()
    suite.procs.stop(tunnel)
    check_audited(r)
