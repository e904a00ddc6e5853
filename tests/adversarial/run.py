#!/usr/bin/env python3
"""agentsnet adversarial pass: a catalogue of hostile inputs, each with the safe behaviour
it must meet, run against one sanitized daemon.

Layout of one run (everything on loopback, nothing can leave the machine):

    netns agentsnet-adv-<pid>   only lo; this process enters it before any thread
                                starts, so its captures listen in it
      agentsnetd               sandbox sb1 (profile adv) on its egress Unix socket;
                               sandboxes pub1..pubN (profile public) behind the
                               ingress gateway on 127.0.0.1:<ingress port>
      capture upstreams        pools of recording listeners (capture.py): plain
                               TCP, TLS (the inject rule's upstream, a leaf for
                               api.test) and the public sandboxes' ingress sockets

Each case of cases/<group>.json (format and how to add one: README.md) says what bytes a
hostile agent or public client sends and what must follow: the responses (status and
X-Agent-Reason), whether the proxy closes the connection or keeps it, what must not reach
an upstream, and the audit records. Every case runs twice, its bytes whole and then a byte
per send, on a pool of threads against the one daemon. A run leases its own capture of
each kind, so its upstream's ports and its ingress sandbox are its alone while it runs:
what its captures received is what its bytes made the daemon send, and the audit records
are told apart by the run's ports, its client address and the audit ids of its answers.
The audit is judged once the daemon has stopped (SIGTERM, exit 0, and a stderr free of
sanitizer reports, else the pass fails) and flushed every record.

A case marked "pending" is a defence not built yet, or a finding: it runs, and its
outcome is reported apart (PENDING) without failing the pass. Exit 0 pass, 1 fail, 77
skip (with the reason); the last line is the tally.
"""

import argparse
import calendar
import collections
import concurrent.futures
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(1, os.path.join(ROOT, "tests", "integ"))

import capture  # noqa: E402
import catalogue  # noqa: E402
from ingress import enter_netns  # noqa: E402
from integ import check_refusal  # noqa: E402
from integlib import (Fatal, Procs, Skip, audit_match, checked_preflight,  # noqa: E402
                      free_ports, log, make_pki, netns_add, netns_del, read_audit, render_file,
                      start_daemon, stop_daemon)
from rawclient import Closed, Conn  # noqa: E402

SANDBOX = "sb1"
PLACEHOLDER = "agentsnet-placeholder-adversarial"
HEAD_MS = 5000  # daemon.timeouts.head_ms: the head-timeout cases wait it out
BODY_MS = 3000  # daemon.timeouts.body_ms
INGRESS_BODY_BYTES = 1024  # profile public's ingress.body_bytes
JOBS = 16  # runs at once; each holds one capture of each kind
RUN_DEADLINE_S = 30  # one run, all its reads included (five times the slowest, 6 s)
CLOSE_WITHIN_S = 2.0  # "close": "closed": EOF or a reset within this of the last response
HOLD_OPEN_S = 1.0  # "close": "open": no EOF and no byte within this
SETTLE_S = 0.3  # what an upstream may still receive after the client side ended
MODES = ("whole", "split")


# ---- the fixture: namespace, captures, daemon -------------------------------------


class Fixture:
    """The namespace, the capture pools, the daemon, and the template values they give."""

    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.procs = Procs()
        self.daemon = None
        self.captures = []
        self.pools = {}
        self.secret = "sk-adversarial-" + secrets.token_hex(16)
        self.sock_dir = os.path.join(tmp, "sock")
        self.audit_path = os.path.join(tmp, "audit.jsonl")
        self.err_path = os.path.join(tmp, "daemon.stderr")

    def up(self):
        make_pki(self.tmp, names=("api.test",))
        secret_file = os.path.join(self.tmp, "secret.txt")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(self.secret)
        netns_del(self.args.netns)  # ours by name: one a killed run left behind
        netns_add(self.args.netns)
        enter_netns("/run/netns/" + self.args.netns)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(os.path.join(self.tmp, "leaf.pem"), os.path.join(self.tmp, "leaf.key"))
        self.pools["plain"] = self.tcp_pool("plain", 2 * JOBS, None)
        self.pools["tls"] = self.tcp_pool("tls", 2 * JOBS, tls)
        self.ingress_ids = ["pub%d" % i for i in range(1, 2 * JOBS + 1)]
        self.ingress_port, dns_port = free_ports(self.args.netns)
        os.mkdir(self.sock_dir)
        policy = os.path.join(self.tmp, "policy.yaml")
        render_file(os.path.join(HERE, "policy.yaml.in"), policy, {
            "sock_dir": self.sock_dir, "audit": self.audit_path, "tmp": self.tmp,
            "head_ms": HEAD_MS, "body_ms": BODY_MS, "ingress_port": self.ingress_port,
            "dns_port": dns_port, "placeholder": PLACEHOLDER,
            "tls_ports": ", ".join(str(c.key) for c in self.pools["tls"].captures),
            "ingress_body_bytes": INGRESS_BODY_BYTES,
            "public_sandboxes": "\n".join("  - {id: %s, profile: public}" % i
                                          for i in self.ingress_ids)})
        self.client_tls = ssl.create_default_context(cafile=os.path.join(self.tmp, "ca.pem"))
        self.daemon = start_daemon(self.procs, self.args.netns, self.args.daemon, policy,
                                   self.err_path)
        ingress = [capture.Capture(capture.unix_listener(os.path.join(
            self.sock_dir, "sandboxes", sid, "ingress.sock")), "ingress capture " + sid, sid)
            for sid in self.ingress_ids]
        self.captures += ingress
        self.pools["ingress"] = capture.Pool(ingress)

    def tcp_pool(self, kind, n, tls):
        """<n> TCP captures; each one's key is its port."""
        made = []
        for _ in range(n):
            listener, port = capture.tcp_listener()
            made.append(capture.Capture(listener, "%s capture :%d" % (kind, port), port, tls))
        self.captures += made
        return capture.Pool(made)

    def egress_socket(self):
        return os.path.join(self.sock_dir, "sandboxes", SANDBOX, "egress.sock")

    def stray(self):
        return [s for c in self.captures for s in c.stray]

    def down(self):
        """Stops the daemon; returns its problems (integlib.stop_daemon's)."""
        errs = []
        if self.daemon is not None:
            errs = stop_daemon(self.daemon, self.err_path)
            self.daemon = None
        self.procs.stop_all()
        return errs


# ---- one run of one case ----------------------------------------------------------


class Run:
    """One case sent one way (<mode>): what it got, and how to find its audit records.
    <values> are its template values (None for a run that broke before it had any)."""

    def __init__(self, case, mode, values):
        self.case, self.mode = case, mode
        self.expect = None if values is None else catalogue.substitute(case["expect"], values)
        self.ports = set() if values is None else {values["port"], values["tls_port"]}
        self.errors = []
        self.audit_ids = set()
        self.refusals = []  # integ.check_refusal's links: each checked against the audit
        self.client = None
        self.window_us = (0, 0)
        self.secs = 0.0


def run_case(fx, case, mode):
    """Leases a capture of each kind for the run, and always gives them back."""
    held = {kind: pool.take() for kind, pool in fx.pools.items()}
    try:
        return run_leased(fx, case, mode, held)
    finally:
        for kind, capture in held.items():
            capture.end_lease()
            fx.pools[kind].give_back(capture)


def reply_pieces(expanded):
    """A case's upstream reply as the capture sends it: byte strings, adjacent ones joined,
    and pauses (float seconds) between them; None for no reply of its own."""
    pieces = []
    for piece in expanded:
        if isinstance(piece, bytes) and pieces and isinstance(pieces[-1], bytes):
            pieces[-1] += piece
        else:
            pieces.append(piece)
    return pieces or None


def run_leased(fx, case, mode, held):
    values = {"port": held["plain"].key, "tls_port": held["tls"].key,
              "sandbox": held["ingress"].key, "ingress_port": fx.ingress_port,
              "placeholder": PLACEHOLDER, "secret": fx.secret}
    reply = reply_pieces(catalogue.expand(case.get("upstream_reply", []), values))
    leases = {kind: capture.begin_lease(reply) for kind, capture in held.items()}
    run = Run(case, mode, values)
    t0 = time.monotonic()
    start_us = time.time_ns() // 1000
    conn, responses = None, []
    try:
        conn = open_conn(fx, case, values, t0 + RUN_DEADLINE_S)
        run.client = conn.client
        converse(conn, case, values, mode, responses, run)
    except (Closed, OSError, ssl.SSLError) as e:
        run.errors.append("%s: %s" % (type(e).__name__, e))
    finally:
        if conn is not None:
            conn.close()
    time.sleep(SETTLE_S)
    for capture in held.values():
        capture.end_lease()
    run.window_us = (start_us, time.time_ns() // 1000)
    run.secs = time.monotonic() - t0
    for i, resp in enumerate(responses):
        run.errors += check_response("response %d" % (i + 1), resp,
                                     run.expect["responses"][i], run)
    if conn is not None:
        for text in run.expect.get("never_in_responses", []):
            if text.encode("latin-1") in conn.received:
                run.errors.append("the client was sent %r" % text)
    run.errors += check_upstream(run.expect["upstream"], leases)
    return run


def open_conn(fx, case, values, deadline):
    """The run's connection: to the gateway, or to sb1's egress socket, there with the
    case's tunnel opened (its CONNECT sent whole: the case's bytes are what goes inside)."""
    if case["via"] == "ingress":
        return Conn.tcp(fx.ingress_port, deadline)
    conn = Conn.unix(fx.egress_socket(), deadline)
    tunnel = catalogue.substitute(case.get("tunnel"), values)
    if tunnel is not None:
        authority = tunnel["connect"]
        conn.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
                  .encode("latin-1"), False)
        resp = conn.response(bodiless=True)
        if resp.status != 200:
            raise Closed("the tunnel's CONNECT got %r" % resp)
        if tunnel["tls"]:
            conn.start_tls(fx.client_tls, authority.rsplit(":", 1)[0])
    return conn


def converse(conn, case, values, mode, responses, run):
    """Sends the case's bytes (<mode>), reads the responses it expects into <responses>,
    then watches what follows them: the close or the kept connection, and nothing else."""
    expect = run.expect
    wants = expect["responses"]

    def next_response():
        if len(responses) == len(wants):
            raise Closed("the case awaits response %d of %d expected" % (len(responses) + 1,
                                                                         len(wants)))
        try:
            responses.append(conn.response(bodiless=wants[len(responses)].get("bodiless",
                                                                             False)))
        except Closed as e:
            raise Closed("response %d: %s (got %r so far)" % (
                len(responses) + 1, e, bytes(conn.received[:400]))) from None

    for data in catalogue.expand(case["send"], values):
        if data is None:
            next_response()
        else:
            conn.send(data, mode == "split")
    while len(responses) < len(wants):
        next_response()
    state, extra = conn.after(CLOSE_WITHIN_S if expect["close"] == "closed" else HOLD_OPEN_S)
    if "tls_alert" in expect:
        if not is_tls_alert(extra, expect["tls_alert"]):
            run.errors.append("want one TLS alert %d after the responses, got %r" % (
                expect["tls_alert"], extra[:300]))
    elif extra:
        run.errors.append("bytes after the expected responses: %r" % extra[:300])
    if state != expect["close"]:
        run.errors.append("connection %s after the responses, want %s%s" % (
            state, expect["close"],
            " (within %.1fs)" % CLOSE_WITHIN_S if expect["close"] == "closed" else ""))
    elif "end" in expect and conn.end != expect["end"]:
        run.errors.append("the connection's end was %s, want %s" % (conn.end, expect["end"]))


def is_tls_alert(data, description):
    """True when <data> is one plaintext TLS alert record (RFC 8446 section 6) with
    <description>: content type 21, a 3.x version, length 2, level, description."""
    return (len(data) == 7 and data[0] == 21 and data[1] == 3 and data[3:5] == b"\x00\x02"
            and data[6] == description)


def check_response(label, resp, want, run):
    errs = []
    if resp.status != want["status"]:
        errs.append("%s: status %d, want %d: %r" % (label, resp.status, want["status"],
                                                     resp.raw[:300]))
    reason = resp.header("X-Agent-Reason")
    if reason != want["reason"]:
        errs.append("%s: X-Agent-Reason %r, want %r" % (label, reason, want["reason"]))
    for name, value in want.get("headers", {}).items():
        if resp.header(name) != value:
            errs.append("%s: %s %r, want %r" % (label, name, resp.header(name), value))
    for name in want.get("headers_absent", []):
        if resp.header(name) is not None:
            errs.append("%s: %s present (%r)" % (label, name, resp.header(name)))
    if "body_contains" in want and want["body_contains"].encode("latin-1") not in resp.body:
        errs.append("%s: body %r lacks %r" % (label, resp.body[:200], want["body_contains"]))
    if reason is not None:
        as_integ = {"status": resp.status, "headers": resp.headers(),
                    "body": resp.body.decode("utf-8", "replace")}
        errs += ["%s: %s" % (label, e) for e in check_refusal(as_integ, label, run.refusals)]
        audit_id = resp.header("X-Agent-Audit-Id")
        if audit_id:
            run.audit_ids.add(audit_id)
    return errs


def check_upstream(want, leases):
    """<want> ("none" or an object, README.md) against what the run's captures received."""
    conns = [data for kind in ("plain", "tls", "ingress") for data in leases[kind].connections()]
    events = [e for lease in leases.values() for e in lease.events]
    seen = b"".join(conns)
    errs = []
    if want == "none":
        if conns:
            errs.append("an upstream got %d connection(s): %r" % (len(conns),
                                                                   [c[:200] for c in conns]))
        return errs + ["upstream: %s" % e for e in events]
    requests = sum(lease.requests for lease in leases.values())
    if "requests" in want and requests != want["requests"]:
        errs.append("%d complete request(s) reached an upstream, want %d: %r" % (
            requests, want["requests"], [c[:300] for c in conns]))
    if "connections" in want and len(conns) != want["connections"]:
        errs.append("%d upstream connection(s), want %d: %r" % (
            len(conns), want["connections"], [c[:200] for c in conns]))
    if "saw" in want:
        wanted = [s.encode("latin-1") for s in want["saw"]]
        if conns != wanted:
            errs.append("upstream saw %r, want %r" % (conns, wanted))
    for text in want.get("contains", []):
        if text.encode("latin-1") not in seen:
            errs.append("upstream never got %r; it got %r" % (text, [c[:300] for c in conns]))
    for text in want.get("never", []):
        if text.encode("latin-1") in seen:
            errs.append("upstream got %r: %r" % (text, [c[:300] for c in conns]))
    return errs


# ---- the audit, once the daemon has stopped ----------------------------------------


def ts_us(rec):
    """A record's "ts" ("YYYY-MM-DDTHH:MM:SS.uuuuuuZ", UTC) in microseconds since the epoch."""
    m = re.fullmatch(r"(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)\.(\d{6})Z", str(rec.get("ts")))
    if m is None:
        return None
    fields = [int(x) for x in m.groups()]
    return calendar.timegm((*fields[:6], 0, 0, 0)) * 1000000 + fields[6]


def records_of(run, records, by_id):
    """The decision and ingress records of <run>'s connections: those its answers named,
    and those of its own ports or client address made while it ran."""
    conns = {by_id[i].get("conn") for i in run.audit_ids if i in by_id}
    lo, hi = run.window_us
    for rec in records:
        at = ts_us(rec)
        if at is None or not lo <= at <= hi:
            continue
        if (rec.get("event") == "decision" and rec.get("port") in run.ports
                or rec.get("event") == "ingress" and run.client
                and rec.get("client") == run.client):
            conns.add(rec.get("conn"))
    return [r for r in records
            if r.get("event") in ("decision", "ingress") and r.get("conn") in conns]


def check_audit(run, records, by_id):
    if run.expect is None:
        return []
    want = run.expect["audit"]
    got = records_of(run, records, by_id)
    errs = []
    if "close_reason" in run.expect:
        conns = {r.get("conn") for r in got}
        closes = [r for r in records if r.get("event") == "close" and r.get("conn") in conns]
        reasons = [r.get("reason") for r in closes]
        if not closes or any(x != run.expect["close_reason"] for x in reasons):
            errs.append("close records' reasons %r, want %r" % (reasons,
                                                               run.expect["close_reason"]))
    if len(got) != len(want) or not all(audit_match(g, w) for g, w in zip(got, want)):
        errs.append("audit records %s, want %s" % (
            json.dumps([{k: g.get(k) for k in ("event", "decision", "reason", "method",
                                                "host", "port", "status", "rule")}
                        for g in got]), json.dumps(want)))
    for doc in run.refusals:
        rec = by_id.get(str(doc.get("audit_id")))
        if rec is None or rec.get("decision") != "deny" or rec.get("reason") != doc.get("reason"):
            errs.append("the refusal's audit_id %r names no deny record of reason %r: %r" % (
                doc.get("audit_id"), doc.get("reason"), rec))
    return errs


# ---- the pass -----------------------------------------------------------------------


def skip_list():
    """README.md's skip list: {GROUP/ID: reason}, the only skips the runner accepts."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Skip list", 1)[-1].split("\n## ", 1)[0] if "## Skip list" in text \
        else ""
    return dict(re.findall(r"^\| `([a-z0-9-]+/[a-z0-9.-]+)` \| (.+?) \|$", section, re.M))


def run_all(fx, cases, jobs):
    """Every case whole and split on <jobs> threads; returns {case name: [Run, Run]}."""
    todo = [(c, m) for m in MODES for c in cases if "skip" not in c]
    runs = {c["name"]: [] for c in cases}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_case, fx, c, m): (c, m) for c, m in todo}
        for fut in concurrent.futures.as_completed(futures):
            case, mode = futures[fut]
            try:
                runs[case["name"]].append(fut.result())
            except Exception:  # noqa: BLE001: a broken run is a failed one, not a lost one
                broken = Run(case, mode, None)
                broken.errors.append("the run itself raised:\n" + traceback.format_exc())
                runs[case["name"]].append(broken)
    return runs


class Tally:
    def __init__(self, verbose):
        self.verbose = verbose
        self.passed = self.failed = self.pending = self.skipped = 0
        self.pending_by_mark = collections.Counter()

    def check(self, name, errs):
        """A check of the pass as a whole (not a case): the daemon, the audit, the captures."""
        self.report("ok" if not errs else "not ok", name, errs)
        if errs:
            self.failed += 1

    def case(self, case, runs):
        label = case["name"]
        if "skip" in case:
            self.skipped += 1
            self.report("skip", label, ["on README.md's skip list: %s" % case["skip"]])
            return
        errs = ["%s: %s" % (r.mode, e) for r in sorted(runs, key=lambda r: r.mode)
                for e in r.errors]
        secs = " ".join("%s %.1fs" % (r.mode, r.secs) for r in sorted(runs, key=lambda r: r.mode))
        if not errs:
            self.passed += 1
            stale = " (pending mark %r is stale: remove it)" % case["pending"] \
                if "pending" in case else ""
            self.report("ok", "%s (%s)%s" % (label, secs, stale), [])
        elif "pending" in case:
            self.pending += 1
            self.pending_by_mark[case["pending"].split(":")[0]] += 1
            self.report("PENDING", "%s (%s)" % (label, case["pending"]), errs)
        else:
            self.failed += 1
            self.report("not ok", "%s (%s): %s" % (label, secs, case["title"]), errs)

    def report(self, word, name, errs):
        log("%s - %s" % (word, name))
        for e in errs if self.verbose else errs[:4]:
            log("    %s" % (e if self.verbose else e[:600]))
        if len(errs) > 4 and not self.verbose:
            log("    ... %d more (-v shows all)" % (len(errs) - 4))


def judge(fx, cases, runs, tally, stop_errs):
    records, parse_errs = read_audit(fx.audit_path)
    by_id = {str(r.get("id")): r for r in records}
    for case in cases:
        for run in runs[case["name"]]:
            run.errors += check_audit(run, records, by_id)
        tally.case(case, runs[case["name"]])
    tally.check("daemon stops on SIGTERM with exit 0 and a clean stderr", stop_errs)
    tally.check("audit: every one of %d lines is JSON, none dropped" % len(records), parse_errs + [
        "%s" % r for r in records if r.get("dropped") or r.get("lost")])
    tally.check("captures: no byte reached an upstream outside a run", fx.stray())


def preflight(args):
    if os.geteuid() != 0:
        raise Skip("network namespaces need root")
    for tool in ("ip", "openssl"):
        if shutil.which(tool) is None:
            raise Skip("%s is not installed (tools/deps.sh installs it)" % tool)
    if not os.access(args.daemon, os.X_OK):
        raise Fatal("daemon %s is not built (make build/san/agentsnetd)" % args.daemon)


def main():
    ap = argparse.ArgumentParser(description="agentsnet adversarial pass")
    ap.add_argument("--daemon", default=os.path.join(ROOT, "build", "san", "agentsnetd"))
    ap.add_argument("--netns", default="agentsnet-adv-%d" % os.getpid(),
                    help="name of the namespace made for the run (deleted after it)")
    ap.add_argument("--cases", default=None, help="glob of GROUP/ID, e.g. 'framing/*'")
    ap.add_argument("--jobs", type=int, default=JOBS, help="runs at once (at most %d)" % JOBS)
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    args.daemon = os.path.abspath(args.daemon)
    try:
        cases = catalogue.load(os.path.join(HERE, "cases"), skip_list(), args.cases)
    except catalogue.CatalogueError as e:
        log("adversarial: FAIL: the catalogue: %s" % e)
        return 1
    if args.list:
        for c in cases:
            log("%s%s: %s" % (c["name"], " [pending: %s]" % c["pending"]
                                 if "pending" in c else "", c["title"]))
        return 0
    if not cases:
        log("adversarial: FAIL: no case matches %r" % args.cases)
        return 1
    status = checked_preflight("adversarial", preflight, args)
    if status is not None:
        return status
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tmp = tempfile.mkdtemp(prefix="agentsnet-adv-")
    fx = Fixture(args, tmp)
    tally = Tally(args.verbose)
    t0 = time.monotonic()
    try:
        fx.up()
        log("# daemon ready (%s); %d cases, each whole and split, %d at once" % (
            tmp, len(cases), min(args.jobs, JOBS)))
        runs = run_all(fx, cases, min(args.jobs, JOBS))
        judge(fx, cases, runs, tally, fx.down())
    except (Fatal, subprocess.CalledProcessError) as e:
        detail = e.stderr.decode()[-2000:] if isinstance(e, subprocess.CalledProcessError) else e
        tally.check("set-up", ["%s" % detail])
    finally:
        fx.down()
        netns_del(args.netns)
        if args.keep or (tally.failed and args.verbose):
            log("# kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if tally.pending:
        log("# pending: %s" % ", ".join("%d %s" % (n, mark)
                                        for mark, n in sorted(tally.pending_by_mark.items())))
    log("adversarial: %d passed, %d failed, %d pending, %d skipped (%d cases, each run whole "
        "and split, in %.1fs)" % (tally.passed, tally.failed, tally.pending, tally.skipped,
                                  len(cases), time.monotonic() - t0))
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
