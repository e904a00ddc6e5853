"""Policy reload checks of the integration suite (integ.py runs them last).

With wrk driving plain-HTTP requests through the proxy the whole time (to wrk.test, whose
rule gets another id in every policy file written, so that each of wrk's audit records
names the file that decided it), a kept-alive plain connection and a CONNECT tunnel open
under a rule the reload is about to drop:
  - SIGHUP with a file that adds reload.test and drops keep.test: the new
    generation is published within a second, reload.test is allowed at once,
    keep.test is refused to new requests, and the open tunnel keeps working;
  - the kept-alive connection's next request is decided by the new policy: on the same
    connection (one conn in the audit), keep.test allowed before, reload.test allowed
    and keep.test refused after, and wrk.test under the new file's rule id;
  - the tunnel, closed while no rule names keep.test, has its close record under the
    rule it was opened with (keep);
  - a broken file over the control socket: refused with file:line, the old
    policy still serves, both outcomes audited;
  - a file that drops a profile a run-time sandbox uses: refused, naming both;
  - a file that adds a sandbox opens its socket; one that drops it removes it;
  - wrk saw no error and no non-2xx answer in all of it, and every reload made while it
    ran happened under its load: its records name the old file's rule before the
    reload's notice and the new one's after it (the same before and after a refused one).
Then, with wrk stopped, what a reload does to the rate-limit buckets:
  - a rule's: started full (docs/policy.md, "Rule limits": rules are numbered afresh);
  - a sandbox's: its tokens kept, so reloading is no way around a limit, at most the new
    burst, and refilled at the new rate (docs/control.md, "Reloading the policy").
"""

import datetime
import http.client
import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import time

from integlib import (Fatal, client_env, control_exchange, log, read_audit, read_text,
                      wait_for)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KEEP_RULE = ("      - {id: keep, host: keep.test, tier: passthrough, owner: tests, "
             "reason: outlives a reload}\n")
RELOAD_RULE = ("      - {id: reload, host: reload.test, tier: passthrough, owner: tests, "
               "reason: added by a reload}\n")
# wrk's rule in policy.yaml.in; write() gives it the id wrk-<n> in the n-th file written.
WRK_RULE = "{id: wrk, host: wrk.test,"
# What wrk asks for (check_kept asks wrk.test for another path).
WRK_PATH = "/small.json?wrk"
# The sandbox limits of sb-limited's profile (policy.yaml.in), and its rule's (limited.test).
SANDBOX_LIMITS = "  sandbox-limited:\n    limits: {requests_per_second: 1, burst: 3}\n"
SANDBOX_BURST = 3
RULE_BURST = 2
# check_rule_bucket reloads limited.test's limits with this burst: a bucket kept across the
# reload would have refilled 1 token a second since it was emptied, one started full has
# them all at once, and the two differ until the check has taken RULE_BURST_RELOADED - 1 s.
RULE_LIMITS = "limits: {requests_per_second: 1, burst: %d}" % RULE_BURST
RULE_BURST_RELOADED = 10
# wrk runs until the reload checks under load are done, and at least WRK_MIN_SECONDS (then
# SIGINT: it prints its summary).
WRK_MIN_SECONDS = 8
WRK_MAX_SECONDS = 300
ADD_REMOVE_ROUNDS = 50
# How long the daemon may take to write a record the checks wait for: generous.
AUDIT_WAIT_S = 10

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


class Egress(http.client.HTTPConnection):
    """One kept-alive connection to a sandbox's egress socket, as its agent has it: requests
    in absolute form; never reopened behind the test's back (auto_open off)."""

    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self.egress = path
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(path)
        self.sock = s
        self.auto_open = 0

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def ask(self, url):
        """GET <url> on this connection: (status, {lower-case name: value}, body)."""
        self.request("GET", url, headers={"Host": url.split("/")[2]})
        resp = self.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def ts_of(rec):
    """A record's ts as seconds since the epoch."""
    return datetime.datetime.strptime(rec["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


class Reload:
    def __init__(self, suite):
        self.suite = suite
        self.vars = suite.vars
        self.path = self.vars["policy"]
        self.base = read_text(self.path)
        self.control = os.path.join(self.vars["sock_dir"], "control.sock")
        self.written = 0
        self.file_rule = "wrk"  # wrk's rule id in the file on disk
        self.triggers = []  # wrk's rule id in the file at each reload asked for, in order
        self.wrk = None  # wrk while it runs
        self.load_errs = []
        self.t_start = time.time()

    def control_line(self, line):
        if line == "policy reload":
            self.triggers.append(self.file_rule)
        answer = control_exchange(self.control, line.encode() + b"\n", timeout=30).decode()
        if line == "policy reload":
            self.reloaded()
        return answer

    def reloaded(self):
        """After a reload asked for (the last of self.triggers): waits for its notice and,
        while wrk runs, for a request of wrk's decided after it, so that wrk's load is
        there on both sides of every reload (check_under_load). A wait that times out is
        one of check_under_load's failures."""
        n = len(self.triggers)

        def notice():
            got = self.notices()
            return got[n - 1] if len(got) >= n else None
        try:
            at = ts_of(wait_for(notice, AUDIT_WAIT_S, "the notice of reload %d" % n))
            if self.wrk is not None:
                wait_for(lambda: any(ts_of(x) > at for x in self.wrk_records()),
                         AUDIT_WAIT_S, "a request of wrk's after reload %d" % n)
        except Fatal as e:
            self.load_errs.append(str(e))

    def generation(self):
        answer = self.control_line("policy status").split()
        return int(answer[answer.index("generation") + 1])

    def write(self, text):
        """Writes <text> as the policy file, wrk's rule named wrk-<n> in the n-th file."""
        if WRK_RULE not in text:
            raise ValueError("the policy text lacks wrk's rule %r" % WRK_RULE)
        self.written += 1
        self.file_rule = "wrk-%d" % self.written
        text = text.replace(WRK_RULE, "{id: %s, host: wrk.test," % self.file_rule)
        tmp = self.path + ".new"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.rename(tmp, self.path)

    def egress(self, sandbox):
        return os.path.join(self.vars["sock_dir"], "sandboxes", sandbox, "egress.sock")

    def status_of(self, host):
        url = "http://%s:%d/small.json" % (host, self.vars["http_port"])
        proc = subprocess.run(self.suite.in_sandbox(
            ["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
             "-x", self.vars["proxy"], url]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=client_env(self.vars["tmp"]), timeout=20, check=False)
        return proc.stdout.decode().strip()

    def start_wrk(self):
        """wrk on wrk.test until stop_wrk(); returns once the audit has its first record."""
        env = client_env(self.vars["tmp"], {
            "BENCH_TARGET": "wrk.test:%d" % self.vars["http_port"],
            "BENCH_PATH": WRK_PATH})
        out = open(os.path.join(self.vars["tmp"], "wrk.out"), "wb")
        self.wrk_from = time.time()
        p = self.suite.procs.start("wrk", self.suite.in_sandbox(
            ["wrk", "-t1", "-c4", "-d%ds" % WRK_MAX_SECONDS, "--timeout", "5s", "-s",
             os.path.join(ROOT, "bench", "forward.lua"), "http://127.0.0.1:8080/"]),
            stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()
        wait_for(lambda: self.wrk_records() or p.poll() is not None, AUDIT_WAIT_S,
                 "a record of wrk's requests in the audit")
        self.wrk = p
        return p

    def stop_wrk(self, wrk):
        """SIGINT to wrk, once it ran WRK_MIN_SECONDS at least: it stops and prints its
        summary. Returns the problems (wrk ended before: the reloads were not all under its
        load)."""
        errs = []
        self.wrk = None
        time.sleep(max(0.0, self.wrk_from + WRK_MIN_SECONDS - time.time()))
        if wrk.poll() is not None:
            errs.append("wrk ended (exit %d) before the reloads were done" % wrk.returncode)
        else:
            wrk.send_signal(signal.SIGINT)
        try:
            wrk.wait(30)
        except subprocess.TimeoutExpired:
            self.suite.procs.stop(wrk)
            errs.append("wrk did not stop on SIGINT")
        self.wrk_to = time.time()
        return errs

    def wrk_records(self):
        records, _ = read_audit(self.vars["audit"])
        return [r for r in records if r.get("event") == "decision" and
                r.get("host") == "wrk.test" and r.get("path") == WRK_PATH and
                ts_of(r) >= self.wrk_from]

    def start_tunnel(self):
        return self.suite.procs.start("tunnel", self.suite.in_sandbox(
            ["python3", "-c", TUNNEL_CLIENT, str(self.vars["http_port"])]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=client_env(self.vars["tmp"]))

    def tunnel_get(self, tunnel):
        tunnel.stdin.write(b"\n")
        tunnel.stdin.flush()
        return tunnel.stdout.readline().decode().strip()

    def notices(self):
        """The reload notices since the reload checks began, in the audit's order."""
        records, _ = read_audit(self.vars["audit"])
        return [r for r in records if r.get("event") == "notice" and ts_of(r) >= self.t_start
                and str(r.get("detail", "")).startswith(("policy_reloaded",
                                                         "policy_reload_refused"))]


def check_sighup(r, tunnel):
    """SIGHUP swaps in a file with reload.test and without keep.test."""
    errs = []
    before = r.generation()
    r.write(r.base.replace(KEEP_RULE, RELOAD_RULE))
    t0 = time.monotonic()
    r.suite.daemon.send_signal(signal.SIGHUP)
    # An event, not a speed: how fast a reload lands is no bound of make check's.
    wait_for(lambda: r.generation() > before, 30, "a new policy generation after SIGHUP")
    took = time.monotonic() - t0
    r.triggers.append(r.file_rule)
    r.reloaded()
    for host, want in (("reload.test", "200"), ("keep.test", "403")):
        got = r.status_of(host)
        if got != want:
            errs.append("%s after the reload: %s, want %s" % (host, got, want))
    got = r.tunnel_get(tunnel)
    if not got.startswith("get 200 "):
        errs.append("the tunnel opened before the reload answered %r, want get 200" % got)
    r.suite.result("reload: SIGHUP publishes the new policy in %.2fs; the open tunnel "
                   "keeps working" % took, errs)


def kept_url(r, host, mark):
    return "http://%s:%d/small.json?kept=%s" % (host, r.vars["http_port"], mark)


def check_kept(r, kept, before):
    """The kept-alive plain connection's next request after SIGHUP is decided by the new
    policy: reload.test (only in the new file) allowed, keep.test (only in the old) refused,
    wrk.test under the new file's rule id; every record on the connection's one conn,
    the first before the reload's notice and the others after it."""
    errs = []
    if before[0] != 200:
        errs.append("keep.test before the reload: %d, want 200" % before[0])
    answers = {}
    try:
        for host in ("reload.test", "wrk.test", "keep.test"):
            answers[host] = kept.ask(kept_url(r, host, "after-" + host.split(".")[0]))
    except (OSError, http.client.HTTPException) as e:
        errs.append("the kept-alive connection after the reload: %s: %s (answers so far %s)"
                    % (type(e).__name__, e, {h: a[0] for h, a in answers.items()}))
    wants = {"reload.test": 200, "wrk.test": 200, "keep.test": 403}
    for host, (status, headers, _) in answers.items():
        if status != wants[host]:
            errs.append("%s on the kept connection after the reload: %d, want %d"
                        % (host, status, wants[host]))
    marks = {"before": ("keep.test", "allow", "keep"),
             "after-reload": ("reload.test", "allow", "reload"),
             "after-wrk": ("wrk.test", "allow", r.triggers[0]),
             "after-keep": ("keep.test", "deny", None)}

    def found():
        records, _ = read_audit(r.vars["audit"])
        got = {m: [x for x in records if x.get("event") == "decision" and
                   str(x.get("path", "")).endswith("?kept=" + m)] for m in marks}
        return got if all(got.values()) else None
    try:
        got = wait_for(found, AUDIT_WAIT_S, "the kept connection's four records")
    except Fatal as e:
        r.suite.result("reload: a kept-alive plain connection gets the new policy at its "
                       "next request", errs + [str(e)])
        return
    notices = [n for n in r.notices() if n["detail"].startswith("policy_reloaded")]
    reloaded = ts_of(notices[0]) if notices else None
    if reloaded is None:
        errs.append("no policy_reloaded notice after SIGHUP")
    conns = set()
    for mark, (host, decision, rule) in marks.items():
        recs = got[mark]
        if len(recs) != 1:
            errs.append("%d records for ?kept=%s, want 1: %r" % (len(recs), mark, recs))
            continue
        rec = recs[0]
        conns.add(rec.get("conn"))
        if (rec.get("host"), rec.get("decision"), rec.get("rule")) != (host, decision, rule):
            errs.append("?kept=%s: %s %s rule %r, want %s %s rule %r" % (
                mark, rec.get("host"), rec.get("decision"), rec.get("rule"), host, decision,
                rule))
        if reloaded is not None and (ts_of(rec) < reloaded) != (mark == "before"):
            errs.append("?kept=%s at %s, the reload's notice at %s: want it %s" % (
                mark, rec["ts"], notices[0]["ts"], "before" if mark == "before" else "after"))
    if len(conns) != 1:
        errs.append("the kept connection's records are on %d conns %s, want one"
                    % (len(conns), sorted(conns, key=str)))
    refused = answers.get("keep.test")
    if refused is not None and got["after-keep"] and \
            refused[1].get("x-agent-audit-id") != got["after-keep"][0].get("id"):
        errs.append("the refusal's X-Agent-Audit-Id %r is not its record's id %r" % (
            refused[1].get("x-agent-audit-id"), got["after-keep"][0].get("id")))
    r.suite.result("reload: a kept-alive plain connection gets the new policy at its next "
                   "request (one conn: keep.test allowed before; reload.test allowed, wrk.test "
                   "under %s and keep.test refused after)" % r.triggers[0], errs)


def check_tunnel_close(r, tunnel):
    """The tunnel opened under keep, closed while the policy in force names no keep.test:
    its close record carries the rule it was decided with, as its CONNECT's record does."""
    errs = []
    tunnel.stdin.close()
    r.suite.procs.stop(tunnel)

    def close_record():
        records, _ = read_audit(r.vars["audit"])
        opened = [x for x in records if x.get("event") == "decision" and
                  x.get("method") == "CONNECT" and x.get("host") == "keep.test" and
                  ts_of(x) >= r.t_start]
        conns = {x.get("conn") for x in opened}
        closed = [x for x in records if x.get("event") == "close" and x.get("conn") in conns]
        return (opened, closed) if closed else None
    try:
        opened, closed = wait_for(close_record, AUDIT_WAIT_S, "the tunnel's close record")
    except Fatal as e:
        r.suite.result("reload: the tunnel's close record keeps its rule", [str(e)])
        return
    notices = r.notices()
    if len(opened) != 1 or len(closed) != 1:
        errs.append("%d CONNECT records and %d close records for the tunnel, want 1 each"
                    % (len(opened), len(closed)))
    rec = closed[0]
    if opened[0].get("rule") != "keep" or opened[0].get("decision") != "allow":
        errs.append("the tunnel's CONNECT record: %r, want allow under keep" % opened[0])
    if rec.get("rule") != "keep" or rec.get("reason") != "none" or not rec.get("bytes_down"):
        errs.append("the tunnel's close record: %r, want rule keep, reason none, bytes down"
                    % rec)
    if len(notices) != 1 or not notices[0]["detail"].startswith("policy_reloaded") or \
            not ts_of(opened[0]) < ts_of(notices[0]) < ts_of(rec):
        errs.append("want the tunnel opened before the SIGHUP's reload and closed after it "
                    "with no reload since: opened %s, closed %s, notices %s" % (
                        opened[0].get("ts"), rec.get("ts"),
                        [(n["ts"], n["detail"][:40]) for n in notices]))
    r.suite.result("reload: an open tunnel keeps its old rule: closed once no rule names its "
                   "host, its close record says rule %s" % rec.get("rule"), errs)


def check_broken(r):
    """A file that does not load is refused; the old policy stays."""
    errs = []
    before = r.generation()
    r.write(r.base.replace(RELOAD_RULE, "").replace(
        "profiles:\n", "profiles:\n  integ: {rules: [], colour: blue}\n", 1))
    # Through the CLI, as an operator would: exit 1 and the loader's file:line.
    cli = os.path.join(os.path.dirname(r.suite.args.daemon), "agentsnet")
    r.triggers.append(r.file_rule)
    proc = subprocess.run([cli, "policy", "reload", "--socket-dir", r.vars["sock_dir"]],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                          check=False)
    r.reloaded()
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
    sock = r.egress("sb3")
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


def check_wrk(r, stopped):
    errs = list(stopped)
    text = read_text(os.path.join(r.vars["tmp"], "wrk.out"))
    lines = [x for x in text.splitlines() if x.startswith("{")]
    doc = json.loads(lines[-1]) if lines else {}
    if not doc:
        errs.append("no wrk summary in %r" % text[-2000:])
    elif doc["requests"] < 100 or doc["errors"] != 0 or doc["non_2xx"] != 0:
        errs.append("wrk: %d requests, %d errors, %d non-2xx; want >= 100 and none lost"
                    % (doc["requests"], doc["errors"], doc["non_2xx"]))
    r.suite.result("reload: wrk through every reload lost no request (%s requests in %s s)"
                   % (doc.get("requests"), doc.get("seconds")), errs)


def check_under_load(r, triggers):
    """Every reload asked for while wrk ran (<triggers>: the file's wrk rule id at each)
    happened under its load: one notice each, in order, while wrk ran, and wrk's records
    straddle it: some under the rule of the policy before it (which no other policy has)
    earlier than the notice, some under the rule of the policy after it later. An applied
    reload moves wrk to the file's rule; a refused one leaves it where it was."""
    errs = list(r.load_errs)
    notices = [n for n in r.notices() if ts_of(n) <= r.wrk_to]
    records = r.wrk_records()
    if len(notices) != len(triggers):
        errs.append("%d reload notices while wrk ran, want one for each of the %d reloads "
                    "asked for: %s" % (len(notices), len(triggers),
                                       [(n["ts"], n["detail"][:40]) for n in notices]))
    current, applied, refused = "wrk", 0, 0
    for notice, rule in zip(notices, triggers):
        at = ts_of(notice)
        ok = notice["detail"].startswith("policy_reloaded")
        after = rule if ok else current
        early = [x for x in records if x.get("rule") == current and ts_of(x) < at]
        late = [x for x in records if x.get("rule") == after and ts_of(x) > at]
        label = "%s at %s (%s -> %s)" % (notice["detail"][:40], notice["ts"], current, after)
        if not r.wrk_from <= at <= r.wrk_to:
            errs.append("%s: not while wrk ran (%s .. %s)" % (label, r.wrk_from, r.wrk_to))
        if not early or not late:
            errs.append("%s: wrk's records under %s before it: %d, under %s after it: %d; "
                        "want some of each" % (label, current, len(early), after, len(late)))
        current = after
        applied += ok
        refused += not ok
    r.suite.result("reload: %d applied and %d refused reloads happened under wrk's load: "
                   "its records name the rule of the file in force before each and after it "
                   "(%d records)" % (applied, refused, len(records)), errs)


def reload_file(r, text):
    """Writes <text> and reloads it over the control socket; returns the answer."""
    r.write(text)
    return r.control_line("policy reload")


def until_refused(conn, url, most):
    """Asks <url> on <conn> until an answer is not 200, at most <most> times: (the
    statuses, the refusal's headers or None)."""
    statuses = []
    for i in range(most):
        status, headers, _ = conn.ask("%s%d" % (url, i))
        statuses.append(status)
        if status != 200:
            return statuses, headers
    return statuses, None


def refusal_errs(what, headers):
    """What is wrong with <headers> as a rate limit's kept-alive 429."""
    if headers is None:
        return ["%s: no request was refused" % what]
    if headers.get("x-agent-reason") != "rate_limited" or \
            not headers.get("retry-after", "").isdigit() or \
            headers.get("connection", "").lower() != "keep-alive":
        return ["%s: refused with %r, want 429 rate_limited, Retry-After, kept alive"
                % (what, headers)]
    return []


def check_rule_bucket(r):
    """docs/policy.md, "Rule limits": rules are numbered afresh by every policy load, so a
    reload starts every rule's bucket full. limited.test's (burst 2, 1 a second) emptied on
    a kept-alive connection, then a reload raising its burst to RULE_BURST_RELOADED: the
    same connection gets all of it at once, then 429. A bucket kept across the reload
    would hold only what 1 a second refilled since the 429 (counted from the time the
    check took, so a slow machine makes it unable to tell, never wrong)."""
    errs = []
    url = "http://limited.test:%d/small.json?rule-bucket=" % r.vars["http_port"]
    if RULE_LIMITS not in r.base:
        r.suite.result("reload: a rule's bucket starts full",
                       ["policy.yaml.in lacks %r" % RULE_LIMITS])
        return
    raised = r.base.replace(RULE_LIMITS, RULE_LIMITS.replace(
        "burst: %d" % RULE_BURST, "burst: %d" % RULE_BURST_RELOADED))
    with Egress(r.egress("sb1")) as conn:
        statuses, refusal = until_refused(conn, url + "before-", RULE_BURST + 2)
        emptied = time.monotonic()
        errs += refusal_errs("limited.test before the reload %s" % statuses, refusal)
        answer = reload_file(r, raised)
        if not answer.startswith("ok "):
            errs.append("the reload: %r" % answer)
        after, refusal = until_refused(conn, url + "after-", RULE_BURST_RELOADED + 2)
        took = time.monotonic() - emptied
    if after != [200] * RULE_BURST_RELOADED + [429]:
        errs.append("after the reload, on the same connection: %s, want %d x 200 then 429"
                    % (after, RULE_BURST_RELOADED))
    errs += refusal_errs("limited.test after the reload", refusal)
    if 1 + int(took) >= RULE_BURST_RELOADED:
        errs.append("from the 429 to the last answer after the reload took %.2f s, in which "
                    "a kept bucket refills as many tokens as a new one holds: the check "
                    "cannot tell" % took)
    r.suite.result("reload: a rule's bucket starts full (limited.test: %s before, %s after "
                   "the reload, %.2f s apart)" % (statuses, after, took), errs)


def check_sandbox_bucket(r):
    """docs/control.md: a sandbox's rate-limit bucket keeps its tokens across a reload (at
    most the new burst), so reloading is no way around a limit; the new rate holds.
    sb-limited (1 a second, burst 3): emptied, then a reload to burst 10 gives it no new
    tokens (no more served than the time since refilled); 9.5 s and one request later
    (8.5 tokens), a reload to burst 1 at 2 a second leaves it one; 0.75 s after that one
    is spent, a token is back (2 a second; at 1 a second it would not be). Each count is
    bounded by what the time the check took could have refilled, so a slow machine makes
    a check unable to tell (and fail saying so) only past several seconds."""
    errs = []
    url = "http://origin.test:%d/small.json?sandbox-bucket=" % r.vars["http_port"]

    def limits(rate, burst):
        return r.base.replace(SANDBOX_LIMITS, "  sandbox-limited:\n    limits: "
                              "{requests_per_second: %d, burst: %d}\n" % (rate, burst))
    if SANDBOX_LIMITS not in r.base:
        r.suite.result("reload: a sandbox's bucket keeps its tokens",
                       ["policy.yaml.in lacks %r" % SANDBOX_LIMITS])
        return
    with Egress(r.egress("sb-limited")) as conn:
        first, refusal = until_refused(conn, url + "a-", SANDBOX_BURST + 2)
        emptied = time.monotonic()
        errs += refusal_errs("sb-limited, its burst spent %s" % first, refusal)
        answer = reload_file(r, limits(1, 10))
        if not answer.startswith("ok "):
            errs.append("the reload to burst 10: %r" % answer)
        raised, refusal = until_refused(conn, url + "b-", 6)
        took = time.monotonic() - emptied
        bound = 1 + int(took)  # tokens refilled since the bucket was emptied, at 1 a second
        served = raised.count(200)
        if refusal is None or served > bound:
            errs.append("after a reload to burst 10: %s served within %.2f s of the 429, "
                        "want at most %d: the reload gave the sandbox tokens" % (
                            served, took, bound))
        errs += refusal_errs("after the reload to burst 10", refusal)
        if bound >= 6:
            errs.append("%.2f s from the 429 to the last answer: the check cannot tell" % took)
    # 9 tokens and more under burst 10; then a new connection, as the daemon closes an
    # idle one at idle_ms (6 s): the bucket is the sandbox's, not the connection's.
    time.sleep(9.5)
    with Egress(r.egress("sb-limited")) as conn:
        # One request takes a token: the bucket holds 8.5 as the reload comes, over its
        # new burst (a bucket that is only refilled at a take would hide a missing cut).
        status, headers, _ = conn.ask(url + "c")
        if status != 200:
            errs.append("9.5 s after the 429 under burst 10: %d %r, want 200" % (status,
                                                                                headers))
        answer = reload_file(r, limits(2, 1))
        if not answer.startswith("ok "):
            errs.append("the reload to burst 1: %r" % answer)
        reloaded = time.monotonic()
        lowered, refusal = until_refused(conn, url + "c-", 10)
        bound = 1 + int(2 * (time.monotonic() - reloaded))  # 2 a second since the reload
        if not 1 <= lowered.count(200) <= bound:
            errs.append("with 8.5 tokens, after a reload to burst 1: %s, want 1 (kept, cut "
                        "to the new burst; %d at most by the time it took)" % (lowered, bound))
        if bound >= 8:
            errs.append("the reload to burst 1 and its answers took over 3.5 s: the check "
                        "cannot tell a bucket cut to 1 from one left at 8.5")
        errs += refusal_errs("after the reload to burst 1", refusal)
        time.sleep(0.75)  # 1.5 tokens at 2 a second; 0.75 at the old 1
        status, headers, _ = conn.ask(url + "d")
        if status != 200:
            errs.append("0.75 s after the 429 at the new 2 a second: %d %r, want 200"
                        % (status, headers))
    r.suite.result("reload: a sandbox's bucket keeps its tokens (emptied %s; burst 10: %s; "
                   "burst 1 at 2/s: %s; then 200 at the new rate)" % (first, raised, lowered),
                   errs)


INTEG_RULES = "profiles:\n  integ:\n    rules:\n"
BODY_RULE = ("      - id: bodyfile\n        host: bodyfile.test\n        tier: fake\n"
             "        owner: tests\n        reason: a body_file each reload reads again\n"
             "        responses:\n          - {status: 200, body_file: \"%s\"}\n")
PLACEHOLDER = "agentsnet-placeholder-integ"  # policy.yaml.in's inject rule


def inject_echo(r):
    """The Authorization the origin's /echo saw from the inject rule (masked by the daemon
    on the way back: "Bearer " and one * a byte of the secret it sent), and the body."""
    port = r.vars["https_port"]
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(30)
    raw.connect(r.egress("sb1"))
    raw.sendall(b"CONNECT inject.test:%d HTTP/1.1\r\nHost: inject.test:%d\r\n\r\n"
                % (port, port))
    head = b""
    while b"\r\n\r\n" not in head:
        got = raw.recv(1)
        if not got:
            break
        head += got
    if not head.startswith(b"HTTP/1.1 200"):
        raw.close()
        return None, head
    tls = ssl.create_default_context(cafile=r.vars["ca"]).wrap_socket(
        raw, server_hostname="inject.test")
    with tls:
        tls.sendall(b"GET /echo?case=reload-secret HTTP/1.1\r\nHost: inject.test:%d\r\n"
                    b"Authorization: Bearer %s\r\nConnection: close\r\n\r\n"
                    % (port, PLACEHOLDER.encode()))
        resp = http.client.HTTPResponse(tls)
        resp.begin()
        body = resp.read()
    try:
        return json.loads(body)["headers"].get("authorization"), body
    except (ValueError, KeyError, AttributeError):
        return None, body


def check_files_reread(r):
    """docs/policy.md: a reload reads a fake rule's body_file again, and an inject rule's
    rotated secret_file: the answer after a reload of the same policy is the file's new
    body; the inject rule sends the new secret (a secret of another length, whose masked
    echo is as long as it is) and the old one no more."""
    errs = []
    body_path = os.path.join(r.vars["tmp"], "reload-body.txt")
    if INTEG_RULES not in r.base:
        r.suite.result("reload: a reload reads a body_file and a rotated secret_file again",
                       ["the policy has no integ profile's rules to add bodyfile.test to"])
        return
    text = r.base.replace(INTEG_RULES, INTEG_RULES + BODY_RULE % body_path)
    bodies = []
    for body in (b"the first body\n", b"the second body, after a reload\n"):
        with open(body_path, "wb") as f:
            f.write(body)
        answer = reload_file(r, text)
        with Egress(r.egress("sb1")) as conn:
            status, _, got = conn.ask("http://bodyfile.test/x")
        bodies.append(got)
        if not answer.startswith("ok") or status != 200 or got != body:
            errs.append("body_file holding %r, reloaded (%r): %d %r" % (
                body, answer.strip()[:120], status, got[:100]))
    secret_path = os.path.join(r.vars["tmp"], "inject-secret.txt")
    old = read_text(secret_path).strip()
    new = "sk-rotated-" + os.urandom(16).hex()
    before, _ = inject_echo(r)
    try:
        with open(secret_path, "w", encoding="ascii") as f:  # keeps its mode, 0600
            f.write(new + "\n")
        answer = reload_file(r, text)
        after, raw = inject_echo(r)
    finally:
        with open(secret_path, "w", encoding="ascii") as f:
            f.write(old + "\n")
    log("# reload: bodies %r; the secret's masked echo %r before the rotation, %r after" % (
        bodies, before, after))
    if before != "Bearer " + "*" * len(old):
        errs.append("before the rotation the origin's echo was %r, want the old secret "
                    "masked (%d *)" % (before, len(old)))
    if after != "Bearer " + "*" * len(new):
        errs.append("after the rotation and a reload (%r) the origin's echo was %r, want the "
                    "new secret masked (%d *, the old had %d)" % (
                        answer.strip()[:120], after, len(new), len(old)))
    if new.encode() in raw or old.encode() in raw:
        errs.append("a secret came back unmasked: %r" % raw[:300])
    r.suite.result("reload: a reload reads a body_file and a rotated secret_file again "
                   "(the fake answer's new body; the new secret sent, masked on the way back)",
                   errs)


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
    kept = Egress(r.egress("sb1"))
    try:
        before = kept.ask(kept_url(r, "keep.test", "before"))
    except (OSError, http.client.HTTPException) as e:
        suite.result("reload: a kept-alive connection opens before the reload", [str(e)])
        kept.close()
        suite.procs.stop(tunnel)
        return
    wrk = r.start_wrk()
    try:
        check_sighup(r, tunnel)
        check_kept(r, kept, before)
        check_tunnel_close(r, tunnel)
        check_broken(r)
        check_profile_in_use(r)
        check_sandbox_list(r)
        check_add_remove(r)
    finally:
        kept.close()
        r.write(r.base)
        log("# reload: policy file restored: %s" % r.control_line("policy reload").strip())
        triggers = list(r.triggers)
        stopped = r.stop_wrk(wrk)
        suite.procs.stop(tunnel)
    check_wrk(r, stopped)
    check_under_load(r, triggers)
    try:
        for title, check in (("a rule's bucket starts full", check_rule_bucket),
                             ("a sandbox's bucket keeps its tokens", check_sandbox_bucket),
                             ("files read again", check_files_reread)):
            try:
                check(r)
            except (OSError, http.client.HTTPException) as e:
                suite.result("reload: " + title, ["%s: %s" % (type(e).__name__, e)])
    finally:
        r.write(r.base)
        log("# reload: policy file restored: %s" % r.control_line("policy reload").strip())
    check_audited(r)
