#!/usr/bin/env python3
"""agentsnet integration suite: real clients in a real network namespace.

Layout of one run (everything on loopback, nothing can leave the machine):

    sandbox netns  agentsnet-it-<id>      only lo; clients (curl, Python, Node)
                                          talk to forwarder.py on 127.0.0.1:8080
          | Unix pathname socket <tmp>/sock/sandboxes/sb1/egress.sock
    upstream netns agentsnet-it-<id>-up   only lo; agentsnetd and origin.py
                                          (HTTPS and plain-HTTP origins)

The daemon runs in a namespace of its own too, so that even a daemon that
wrongly connects to a private or external address sends nothing off the host
(it fails with "network unreachable" instead, and the case still fails).

Each case is one JSON file in cases/ (see cases/README.md for the format):
which client, what request, the expected response and the audit records it
must leave. After the cases the daemon gets SIGTERM and must exit 0 with a
stderr free of sanitizer reports; then the audit file is checked as a whole.

Every head a case's client saw (the answer's, and curl's CONNECT answer's) that carries
X-Agent-Reason or X-Agent-Audit-Id must carry both, and once the daemon stopped its
X-Agent-Audit-Id must name exactly one audit record: the deny decision of the answer's
reason and status (refusals are audited, on every tier). On a run of every case, the
refusals so checked must include a CONNECT's, a plain-HTTP request's, one inside a fake
session and one inside an inject session, and a rate limit's (LINK_KINDS).

A case file without an expectation ("expect" or "expect_each"), with an empty one, or
with a key the harness does not know (at the top, in an expectation, or an audit
operator other than min, present, contains) is refused: a failure naming the file and
the key. A "direct" case needs a "control" request through the proxy. When a tunnel
case (0[12]*) ran, the daemon's relay counters (`stats`) must show splice_relays > 0,
or, with AN_NO_SPLICE set (run.sh's rerun), copy_relays > 0 and splice_relays 0.

Prints one line per check and a closing "integ: N passed, N failed, N skipped".
Exit 0 pass, 1 fail, 77 skip (with the reason); under CI=true a missing tool or a
caller that is not root is a failure, not a skip.
"""

import argparse
import base64
import fnmatch
import functools
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import reload
from integlib import (Fatal, Procs, SANITIZER_MARKS, SKIP, Skip, add_run_args, audit_match,
                      control_exchange,
                      case_key_errors, client_hello,
                      checked_preflight, client_env, daemon_env, free_ports, load_cases, log,
                      make_pki, netns_add, netns_del, read_audit, read_text, render_file,
                      run_and_tally, start_daemon, start_origin, stop_daemon, substitute, wait_for)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIG_BYTES = 100 * 1024 * 1024
BIG_SEED = 20240601
CHUNKED_BYTES = 300000
PROXY_ADDR = "127.0.0.1:8080"
SANDBOX = "sb1"
OTHER_SANDBOX = "sb2"
CASE_TIMEOUT_S = 60
# The tunnel cases (relayed CONNECT tunnels), which run.sh runs again with AN_NO_SPLICE=1.
TUNNEL_CASES = "0[12]*"
# The names of the origin's leaf: the inject rules' upstreams are origin.py's HTTPS origin.
ORIGIN_NAMES = ("origin.test", "inject.test")
INJECT_SECRET = "sk-integ-secret-" + os.urandom(8).hex()
# How long the relay counters may take to show a worker's last figures (published at most
# 100 ms late, docs/control.md): generous.
STATS_WAIT_S = 5


# ---- fixtures ---------------------------------------------------------------


def make_data(tmp):
    """The origin's files; returns their sha256 and lengths as template variables."""
    rng = random.Random(BIG_SEED)
    h = hashlib.sha256()
    with open(os.path.join(tmp, "big.bin"), "wb") as f:
        left = BIG_BYTES
        while left > 0:
            block = rng.randbytes(min(left, 4 * 1024 * 1024))
            h.update(block)
            f.write(block)
            left -= len(block)
    small = json.dumps({"service": "origin.test", "ok": True,
                        "items": [{"n": i, "sq": i * i} for i in range(50)]},
                       sort_keys=True, indent=1).encode("utf-8") + b"\n"
    chunked = rng.randbytes(CHUNKED_BYTES)
    for name, data in (("small.json", small), ("chunked.bin", chunked)):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    return {
        "big_sha256": h.hexdigest(), "big_len": BIG_BYTES,
        "small_sha256": hashlib.sha256(small).hexdigest(), "small_len": len(small),
        "chunked_sha256": hashlib.sha256(chunked).hexdigest(), "chunked_len": len(chunked),
    }


# ---- templates --------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def client_hello_text(server_name):
    """integlib.client_hello as text of one byte a character (latin-1), like the pieces;
    the same bytes for a name within a run."""
    return client_hello(server_name).decode("latin-1")


def expand_pieces(pieces):
    """Raw request text from pieces: strings; {"repeat": s, "times": n};
    {"client_hello": NAME or null}: a TLS ClientHello naming NAME (or none);
    {"client_hello_part": NAME, "part": 0 or 1}: its first 7 bytes, or the rest;
    {"pad_header": NAME, "head_bytes": N}: a header line sized so that the
    head (everything before it, it, and the pieces after it) is N bytes."""
    out = []
    pad_at = None
    for p in pieces:
        if isinstance(p, str):
            out.append(p)
        elif "repeat" in p:
            out.append(p["repeat"] * p["times"])
        elif "client_hello" in p:
            out.append(client_hello_text(p["client_hello"]))
        elif "client_hello_part" in p:  # its first 7 bytes (part 0), or the rest (part 1)
            hello = client_hello_text(p["client_hello_part"])
            out.append(hello[:7] if p["part"] == 0 else hello[7:])
        else:
            pad_at = len(out)
            out.append(p)
    if pad_at is not None:
        p = out[pad_at]
        others = sum(len(x) for i, x in enumerate(out) if i != pad_at)
        fill = p["head_bytes"] - others - len(p["pad_header"]) - len(": \r\n")
        out[pad_at] = "%s: %s\r\n" % (p["pad_header"], "p" * fill)
    return "".join(out).encode("latin-1")


# ---- processes and namespaces -----------------------------------------------


# ---- checks -----------------------------------------------------------------


def json_path(doc, path):
    """Walks "a.b.0.c"; returns (True, value) or (False, None)."""
    cur = doc
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


def check_headers(errs, label, got, want, present, absent):
    got = got or {}
    for name, value in (want or {}).items():
        if got.get(name.lower()) != value:
            errs.append("%s %s: got %r, want %r" % (label, name, got.get(name.lower()), value))
    for name in present or []:
        if not got.get(name.lower()):
            errs.append("%s %s: missing" % (label, name))
    for name in absent or []:
        if name.lower() in got:
            errs.append("%s %s: present (%r), must be absent" % (label, name, got[name.lower()]))


def check_json(errs, resp, want, present, absent):
    if not (want or present or absent):
        return
    try:
        doc = json.loads(resp.get("body") or "")
    except ValueError:
        errs.append("body is not JSON: %r" % (resp.get("body") or "")[:200])
        return
    for path, value in (want or {}).items():
        found, got = json_path(doc, path)
        if not found or got != value:
            errs.append("body.%s: got %r, want %r" % (path, got if found else "<absent>", value))
    for path in present or []:
        found, got = json_path(doc, path)
        if not found or got in (None, ""):
            errs.append("body.%s: missing or empty" % path)
    for path in absent or []:
        found, got = json_path(doc, path)
        if found and got is not None:
            errs.append("body.%s: %r, must be absent or null" % (path, got))


SPECIAL_KEYS = {"headers", "headers_present", "headers_absent", "connect_headers", "json",
                "json_present", "json_absent", "body_contains", "error_contains",
                "stderr_contains"}
# Result fields an "expect" block may compare for equality: what the clients report
# (client.py, fetch.js, client_curl, client_check_config). Any other key is refused.
RESULT_KEYS = {"status", "reason", "body_len", "body_sha256", "body", "trailer",
               "connect_status", "http_version", "num_connects", "curl_exit", "results",
               "exit", "line", "col", "eof"}
# The keys a case file may have (cases/README.md); any other is refused.
CASE_KEYS = {"description", "client", "url", "urls", "method", "headers", "body", "curl_args",
             "proxy", "requests", "request", "responses", "connect", "sandbox", "shut_wr",
             "wait_close_s", "targets", "control", "config", "config_file", "timeout_s",
             "expect", "expect_each", "same_connection", "forwarder_connections", "audit",
             "audit_same_conn", "closed_after_s", "elapsed_s", "leftover_hex"}


def case_errors(case):
    """Why this case must be refused (case_key_errors, cases/README.md), plus what a
    client needs: a "direct" case (connects that must fail) needs its "control", a
    request through the proxy in the same case, or it passes with the daemon down."""
    errs = case_key_errors(os.path.join(HERE, "cases", case["name"] + ".json"), case,
                           CASE_KEYS, SPECIAL_KEYS | RESULT_KEYS, "expect", "expect_each")
    clients = sorted(n[len("client_"):] for n in dir(Suite) if n.startswith("client_"))
    if case.get("client") not in clients:
        errs.append("tests/integ/cases/%s.json: client %r, want one of %s"
                    % (case["name"], case.get("client"), ", ".join(clients)))
    if case.get("client") == "direct" and "control" not in case:
        errs.append("tests/integ/cases/%s.json: a \"direct\" case needs a \"control\" "
                    "request through the proxy (its connects fail with the daemon down too)"
                    % case["name"])
    return errs


def check_response(resp, want):
    """Compares one client result with one "expect" block; returns error strings."""
    errs = []
    if resp is None:
        return ["no response"]
    for key, value in want.items():
        if key not in SPECIAL_KEYS and resp.get(key) != value:
            errs.append("%s: got %r, want %r" % (key, resp.get(key), value))
    check_headers(errs, "header", resp.get("headers"), want.get("headers"),
                  want.get("headers_present"), want.get("headers_absent"))
    if "connect_headers" in want:
        check_headers(errs, "CONNECT header", resp.get("connect_headers"),
                      want["connect_headers"], None, None)
    check_json(errs, resp, want.get("json"), want.get("json_present"), want.get("json_absent"))
    if "body_contains" in want and want["body_contains"] not in (resp.get("body") or ""):
        errs.append("body does not contain %r" % want["body_contains"])
    if "error_contains" in want and want["error_contains"] not in (resp.get("error") or ""):
        errs.append("error %r does not contain %r" % (resp.get("error"), want["error_contains"]))
    for line in want.get("stderr_contains", []):
        if line not in (resp.get("stderr") or ""):
            errs.append("stderr %r does not contain %r" % (resp.get("stderr"), line))
    return errs


# The one refusal that carries no X-Agent-Audit-Id: it is sent before the connection has any
# state (docs/reasons.md); its record is checked by fairness.py.
NO_AUDIT_ID = ("connection_share_exceeded",)


# What the audit link check must have covered on a run of every case (check_audit_links).
LINK_KINDS = ("a CONNECT refusal", "a plain-HTTP refusal", "a refusal in a fake session",
              "a refusal in an inject session", "a rate_limited refusal")


def link_kinds(rec):
    """The LINK_KINDS a refusal's record <rec> stands for."""
    sessions = {"fake": "a refusal in a fake session", "inject": "a refusal in an inject session"}
    if rec.get("tier") in sessions and rec.get("method") != "CONNECT":
        kinds = {sessions[rec["tier"]]}
    elif rec.get("method") == "CONNECT":
        kinds = {"a CONNECT refusal"}
    else:
        kinds = {"a plain-HTTP refusal"}
    if rec.get("reason") == "rate_limited":
        kinds.add("a rate_limited refusal")
    return kinds


def check_refusal(resp, case, links):
    """The deny contract, for any response carrying X-Agent-Reason, and the audit link of
    every head the client saw (the answer's, and curl's CONNECT answer's): a head with
    X-Agent-Reason or X-Agent-Audit-Id must carry both (but NO_AUDIT_ID), and goes to
    <links> ({case, where, audit_id, reason, status, body}), each checked against the
    audit file once the daemon stopped (Suite.check_audit_links)."""
    errs, link = [], None
    for where, head, status in (("CONNECT answer", resp.get("connect_headers"),
                                 resp.get("connect_status")),
                                ("answer", resp.get("headers"), resp.get("status"))):
        head = head or {}
        reason, audit_id = head.get("x-agent-reason"), head.get("x-agent-audit-id")
        if reason is None and audit_id is None:
            continue
        if audit_id is None and reason not in NO_AUDIT_ID:
            errs.append("the %s (%s, %s) has no X-Agent-Audit-Id" % (where, status, reason))
        elif audit_id is not None:
            link = {"case": case, "where": where, "audit_id": audit_id, "reason": reason,
                    "status": status, "body": None}
            links.append(link)
    headers = resp.get("headers") or {}
    reason = headers.get("x-agent-reason")
    if reason is None:
        return errs
    instruction = headers.get("x-agent-instruction", "")
    if not instruction or "\n" in instruction or "\r" in instruction:
        errs.append("X-Agent-Instruction missing or not one line: %r" % instruction)
    if not headers.get("content-type", "").startswith("application/json"):
        errs.append("refusal Content-Type %r" % headers.get("content-type"))
    try:
        doc = json.loads(resp.get("body") or "")
    except ValueError:
        return errs + ["refusal body is not JSON: %r" % (resp.get("body") or "")[:200]]
    for field in ("reason", "instruction", "host", "port", "sandbox", "audit_id", "status"):
        if field not in doc:
            errs.append("refusal body lacks %r" % field)
    if doc.get("reason") != reason:
        errs.append("body reason %r != header %r" % (doc.get("reason"), reason))
    if doc.get("instruction") != instruction:
        errs.append("body instruction != X-Agent-Instruction")
    if doc.get("status") != resp.get("status"):
        errs.append("body status %r != response status %r" % (doc.get("status"),
                                                              resp.get("status")))
    if "x-agent-audit-id" in headers and headers["x-agent-audit-id"] != doc.get("audit_id"):
        errs.append("X-Agent-Audit-Id %r != body audit_id %r" % (headers["x-agent-audit-id"],
                                                                 doc.get("audit_id")))
    rule = headers.get("x-agent-rule")
    if rule is not None and doc.get("rule") != rule:
        errs.append("body rule %r != X-Agent-Rule %r" % (doc.get("rule"), rule))
    if rule is None and doc.get("rule"):
        errs.append("body rule %r without an X-Agent-Rule header" % doc.get("rule"))
    if link is not None and link["where"] == "answer":
        link["body"] = doc  # its host, port and sandbox are the record's too
    return errs


# ---- clients ----------------------------------------------------------------


class Suite:
    def __init__(self, args):
        self.args = args
        self.procs = Procs()
        self.passed = 0
        self.failed = 0
        self.links = []  # the audit ids of the answers seen (check_refusal)
        self.audit_wants = []  # (case name, expected records, same connection)
        self.tmp = None
        self.vars = {}

    def result(self, name, errs, detail=None):
        if errs:
            self.failed += 1
            log("not ok - %s" % name)
            for e in errs:
                log("    %s" % e)
            if detail is not None and self.args.verbose:
                log("    result: %s" % json.dumps(detail)[:4000])
        else:
            self.passed += 1
            log("ok - %s" % name)

    def in_sandbox(self, cmd):
        return ["ip", "netns", "exec", self.args.netns, *cmd]

    def forwarder_count(self):
        text = read_text(os.path.join(self.tmp, "forwarder.stats")).strip()
        return int(text) if text else -1

    def run_python(self, spec, timeout, in_sandbox=True):
        cmd = ["python3", os.path.join(HERE, "client.py")]
        proc = subprocess.run(self.in_sandbox(cmd) if in_sandbox else cmd,
                              input=json.dumps(spec).encode(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout,
                              env=client_env(self.tmp), check=False)
        if proc.returncode != 0:
            return {"error": "client.py exit %d: %s" % (proc.returncode,
                                                        proc.stderr.decode()[-2000:])}
        return json.loads(proc.stdout)

    def client_curl(self, case, timeout):
        urls = case["urls"] if "urls" in case else [case["url"]]
        hdr = os.path.join(self.tmp, "curl.headers")
        cmd = ["curl", "-sS", "--max-time", str(timeout - 5), "-x",
               case.get("proxy", "http://" + PROXY_ADDR), "--cacert", self.vars["ca"],
               "-D", hdr, "-w", "%{json}\\n%{header_json}\\n", *case.get("curl_args", [])]
        bodies = []
        for i, url in enumerate(urls):
            bodies.append(os.path.join(self.tmp, "curl.body.%d" % i))
            cmd += ["-o", bodies[-1], url]
        for path in [hdr] + bodies:
            if os.path.exists(path):
                os.unlink(path)
        proc = subprocess.run(self.in_sandbox(cmd), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout,
                              env=client_env(self.tmp), check=False)
        # Two JSON documents a transfer: its figures (%{json}), then the head of its last
        # response ({name: [values]}, %{header_json}).
        docs = json_documents(proc.stdout.decode())
        transfers, heads = docs[0::2], docs[1::2]
        blocks = parse_header_blocks(read_text(hdr))
        out = []
        for i, path in enumerate(bodies):
            t = transfers[i] if i < len(transfers) else {}
            data = b""
            if os.path.exists(path):
                with open(path, "rb") as f:
                    data = f.read()
            r = {"status": t.get("http_code"), "connect_status": t.get("http_connect"),
                 "http_version": t.get("http_version"),
                 "num_connects": t.get("num_connects"), "curl_exit": proc.returncode,
                 "body_len": len(data), "body_sha256": hashlib.sha256(data).hexdigest(),
                 "body": data.decode("utf-8", "replace") if len(data) <= 65536 else None,
                 "error": proc.stderr.decode()[-500:]}
            if len(urls) == 1 and urls[0].startswith("https:"):
                # The first head answers the CONNECT; a second one, if any, the request.
                r["connect_headers"] = blocks[0] if blocks else {}
                if len(blocks) > 1:
                    r["headers"] = blocks[-1]
            elif len(urls) == 1 and blocks:
                r["headers"] = blocks[-1]
            elif i < len(heads) and t.get("http_code"):
                # One head a transfer: several URLs, some on one connection (no CONNECT
                # of theirs), so -D's file does not say which head is whose.
                r["headers"] = {k.lower(): ", ".join(v) for k, v in heads[i].items()}
            out.append(r)
        return out

    def client_node(self, case, timeout):
        node_dir = os.path.join(HERE, "node")
        if not os.path.isdir(os.path.join(node_dir, "node_modules", "undici")):
            return [{"error": "tests/integ/node/node_modules/undici missing: run tools/deps.sh"}]
        spec = {"url": case["url"], "proxy": "http://" + PROXY_ADDR,
                "method": case.get("method", "GET"), "headers": case.get("headers", {}),
                "body": case.get("body"), "timeout_s": timeout - 5}
        proc = subprocess.run(self.in_sandbox(["node", os.path.join(node_dir, "fetch.js"),
                                               json.dumps(spec)]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              env=client_env(self.tmp, {"NODE_EXTRA_CA_CERTS": self.vars["ca"]}),
                              check=False)
        if proc.returncode != 0:
            return [{"error": "node exit %d: %s" % (proc.returncode, proc.stderr.decode()[-2000:])}]
        return [json.loads(proc.stdout)]

    def client_python(self, case, timeout):
        spec = {"mode": "urllib", "url": case["url"], "proxy": "http://" + PROXY_ADDR,
                "cafile": self.vars["ca"], "method": case.get("method", "GET"),
                "headers": case.get("headers", {}), "body": case.get("body"),
                "timeout_s": timeout - 5}
        return [self.run_python(spec, timeout)]

    def client_httpclient(self, case, timeout):
        spec = {"mode": "httpclient", "proxy_addr": PROXY_ADDR, "requests": case["requests"],
                "timeout_s": timeout - 5}
        return self.responses(self.run_python(spec, timeout))

    def client_raw(self, case, timeout):
        # {"after_responses": k[, "sleep_s": s]} in the pieces: what follows is sent once k
        # responses came (and s seconds more passed).
        stages = [[]]
        for piece in case["request"]:
            if isinstance(piece, dict) and "after_responses" in piece:
                stages.append([piece])
            else:
                stages[-1].append(piece)
        later = [{"after_responses": st[0]["after_responses"],
                  "sleep_s": st[0].get("sleep_s", 0),
                  "send_b64": base64.b64encode(expand_pieces(st[1:])).decode()}
                 for st in stages[1:]]
        spec = {"mode": "raw", "send_b64": base64.b64encode(expand_pieces(stages[0]))
                .decode(), "later": later,
                "responses": case.get("responses", 1), "timeout_s": timeout - 5,
                "shut_wr": case.get("shut_wr", False), "connect": case.get("connect", False),
                "wait_close_s": case.get("wait_close_s", 0),
                "read_bytes": len(case.get("leftover_hex", "")) // 2}
        sandbox = case.get("sandbox")
        if sandbox:
            spec["unix"] = os.path.join(self.vars["sock_dir"], "sandboxes", sandbox,
                                        "egress.sock")
        else:
            spec["proxy_addr"] = PROXY_ADDR
        return self.responses(self.run_python(spec, timeout, in_sandbox=not sandbox))

    def responses(self, got):
        """A multi-response result as a list; a failure shows as one more entry."""
        self.last_extra = got
        out = list(got.get("responses", []))
        if got.get("error") or not out:
            out.append({"error": got.get("error")})
        return out

    def client_direct(self, case, timeout):
        """The direct connects, then the case's "control": the same sandbox's request
        through the proxy (urllib), which must be served, so that the refusals are the
        namespace's and the daemon was up and serving meanwhile. Two results: the
        connects' and the control's."""
        got = self.run_python({"mode": "direct", "targets": case["targets"]}, timeout)
        ctl = case["control"]
        control = self.run_python({"mode": "urllib", "url": ctl["url"],
                                   "proxy": "http://" + PROXY_ADDR, "cafile": self.vars["ca"],
                                   "method": ctl.get("method", "GET"), "headers": {},
                                   "body": None, "timeout_s": timeout - 5}, timeout)
        return [got, control]

    def client_check_config(self, case, timeout):
        # A secret file a case's inject rule may name ({{tmp}}/check-secret.txt, 0600).
        secret = os.path.join(self.tmp, "check-secret.txt")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
                  encoding="ascii") as f:
            f.write("sk-check-config\n")
        if case.get("config_file") == "policy":
            path = self.vars["policy"]
        else:
            path = os.path.join(self.tmp, "check-%s.yaml" % case["name"])
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(case["config"]) + "\n")
        proc = subprocess.run([self.args.daemon, "--check-config", path],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, env=daemon_env(), check=False)
        err = proc.stderr.decode("utf-8", "replace")
        r = {"exit": proc.returncode, "stderr": err,
             "stdout": proc.stdout.decode("utf-8", "replace")}
        r["sanitizer"] = [m for m in SANITIZER_MARKS if m in err]
        m = re.match(re.escape(path) + r":(\d+):(\d+): \S", err)
        if m:
            r["line"], r["col"] = int(m.group(1)), int(m.group(2))
        return [r]

    # ---- one case -----------------------------------------------------------

    def run_case(self, case):
        name = case["name"]
        refused = case_errors(case)
        if refused:
            self.result(name, ["refused, not run: " + e for e in refused])
            return
        timeout = case.get("timeout_s", CASE_TIMEOUT_S)
        handler = getattr(self, "client_" + case["client"])
        self.last_extra = None
        t0 = time.monotonic()
        fwd_before = self.forwarder_count()
        try:
            results = handler(case, timeout)
        except subprocess.TimeoutExpired:
            self.result(name, ["client timed out after %ds" % timeout])
            return
        except (ValueError, KeyError, IndexError, OSError) as e:
            self.result(name, ["harness error: %s: %s" % (type(e).__name__, e)])
            return
        errs = []
        wants = case["expect_each"] if "expect_each" in case else [case["expect"]]
        if len(results) != len(wants):
            errs.append("%d responses, want %d" % (len(results), len(wants)))
        for i, (resp, want) in enumerate(zip(results, wants)):
            prefix = "response %d: " % (i + 1) if len(wants) > 1 else ""
            errs += [prefix + e for e in check_response(resp, want)]
            errs += [prefix + e for e in check_refusal(resp, name, self.links)]
            if resp.get("sanitizer"):
                errs.append("stderr contains %s:\n%s" % (resp["sanitizer"], resp["stderr"][-3000:]))
            if case["client"] == "check_config" and want.get("exit") == 1 and "line" not in resp:
                errs.append("stderr does not start with %s:LINE:COL: message: %r"
                            % ("FILE", resp.get("stderr", "")[:300]))
        if case.get("same_connection"):
            ports = {r.get("local_port") for r in results}
            if len(ports) != 1:
                errs.append("requests used %d client connections (%s), want 1" % (len(ports),
                                                                                 sorted(ports)))
        if "closed_after_s" in case:
            lo, hi = case["closed_after_s"]
            got = (self.last_extra or {}).get("closed_after_s")
            if got is None or not lo <= got <= hi:
                errs.append("the proxy closed the idle connection after %s s, want %s..%s s"
                            % (got, lo, hi))
        if "elapsed_s" in case:
            lo, hi = case["elapsed_s"]
            took = time.monotonic() - t0
            if not lo <= took <= hi:
                errs.append("the case took %.1f s, want %s..%s s" % (took, lo, hi))
        if "leftover_hex" in case:
            got = (self.last_extra or {}).get("leftover_hex")
            if got is None or not got.startswith(case["leftover_hex"]):
                errs.append("bytes after the last response: %r, want them to begin %r"
                            % (got, case["leftover_hex"]))
        if "forwarder_connections" in case:
            made = self.forwarder_count() - fwd_before
            if made != case["forwarder_connections"]:
                errs.append("client made %d connections to the proxy, want %d"
                            % (made, case["forwarder_connections"]))
        if case.get("audit"):
            self.audit_wants.append((name, case["audit"], case.get("audit_same_conn", False)))
        self.result("%s (%.1fs)" % (name, time.monotonic() - t0), errs,
                    {"results": results, "extra": self.last_extra})

    # ---- set-up and tear-down -----------------------------------------------

    def start_origin(self, leaf_pem, leaf_key):
        return start_origin(self.procs, self.args.upns, self.tmp, leaf_pem, leaf_key)

    def free_ports(self):
        """Ports nothing listens on in the upstream namespace (it is ours alone)."""
        return free_ports(self.args.upns)

    def start_silent_resolver(self, port):
        """A UDP socket on the resolver's port that reads nothing and answers nothing: a
        DNS server that has gone silent, so that a lookup meets its deadline (a closed
        port would be refused at once)."""
        code = ("import socket, time\n"
                "u = socket.socket(type=socket.SOCK_DGRAM); u.bind(('127.0.0.1', %d))\n"
                "print('ready', flush=True)\n"
                "time.sleep(86400)\n" % port)
        p = self.procs.start("resolver", ["ip", "netns", "exec", self.args.upns, "python3",
                                          "-c", code], stdout=subprocess.PIPE)
        if p.stdout.readline().strip() != b"ready":
            raise Fatal("the silent resolver did not start on udp:%d" % port)

    def start_daemon(self):
        self.daemon_err_path = os.path.join(self.tmp, "daemon.stderr")
        self.daemon = start_daemon(self.procs, self.args.upns, self.args.daemon,
                                   self.vars["policy"], self.daemon_err_path)

    def start_forwarder(self):
        sock = os.path.join(self.vars["sock_dir"], "sandboxes", SANDBOX, "egress.sock")
        if not os.path.exists(sock):
            raise Fatal("agentsnetd is ready but %s does not exist" % sock)
        err_path = os.path.join(self.tmp, "forwarder.stderr")
        err = open(err_path, "wb")
        self.forwarder = self.procs.start(
            "forwarder", self.in_sandbox(["python3", os.path.join(HERE, "forwarder.py"),
                                          "--listen", PROXY_ADDR, "--unix", sock, "--stats",
                                          os.path.join(self.tmp, "forwarder.stats")]),
            stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=client_env(self.tmp))
        err.close()
        wait_for(lambda: "forwarder: ready" in read_text(err_path)
                 or self.forwarder.poll() is not None, 10, "forwarder: ready")
        if self.forwarder.poll() is not None:
            raise Fatal("forwarder exited: " + read_text(err_path))

    def stop_daemon(self):
        """SIGTERM; the run fails on a non-zero exit or any sanitizer report."""
        t0 = time.monotonic()
        errs = stop_daemon(self.daemon, self.daemon_err_path)
        self.result("daemon stops on SIGTERM with exit 0 and a clean stderr (%.1fs)"
                    % (time.monotonic() - t0), errs)

    # ---- the relay counters -------------------------------------------------

    def stats(self):
        """The control socket's `stats` line as {key: int} (docs/control.md)."""
        data = control_exchange(os.path.join(self.vars["sock_dir"], "control.sock"),
                                b"stats\n")
        words = data.decode().split()
        if not words or words[0] != "ok" or len(words) % 2 != 1:
            raise Fatal("stats: %r, want \"ok\" and key value pairs" % data[:500])
        return {k: int(v) for k, v in zip(words[1::2], words[2::2])}

    def check_relays(self, names):
        """Which relay moved the tunnels' bytes, by the daemon's counters: with AN_NO_SPLICE
        set (run.sh's rerun of the tunnel cases; the daemon reads the same environment)
        the copy relay alone (copy_relays > 0, splice_relays 0); without it, splice took
        part (splice_relays > 0). Only when a tunnel case (TUNNEL_CASES) ran; with
        AN_NO_SPLICE set and none run, a failure: the rerun would prove nothing."""
        no_splice = "AN_NO_SPLICE" in os.environ
        tunnels = [n for n in names if fnmatch.fnmatch(n, TUNNEL_CASES)]
        label = ("relay counters: AN_NO_SPLICE set, the copy relay alone moved the tunnels' "
                 "bytes (copy_relays > 0, splice_relays 0)" if no_splice else
                 "relay counters: the tunnels' bytes were spliced (splice_relays > 0)")
        if not tunnels:
            if no_splice:
                self.result(label, ["no tunnel case (%s) ran, so nothing shows the copy relay"
                                    % TUNNEL_CASES])
            return
        key = "copy_relays" if no_splice else "splice_relays"
        deadline = time.monotonic() + STATS_WAIT_S
        try:
            while True:
                got = self.stats()
                if got.get(key, 0) > 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        except (OSError, Fatal) as e:
            self.result(label, ["reading stats: %s" % e])
            return
        errs = []
        if "splice_relays" not in got or "copy_relays" not in got:
            errs.append("stats lacks splice_relays or copy_relays: %r" % got)
        elif no_splice and (got["copy_relays"] == 0 or got["splice_relays"] != 0):
            errs.append("after %d tunnel cases: copy_relays %d, splice_relays %d; want copy "
                        "> 0 and splice 0" % (len(tunnels), got["copy_relays"],
                                              got["splice_relays"]))
        elif not no_splice and got["splice_relays"] == 0:
            errs.append("after %d tunnel cases: splice_relays 0 (copy_relays %d); want > 0"
                        % (len(tunnels), got["copy_relays"]))
        self.result("%s: splice %s, copy %s" % (label, got.get("splice_relays"),
                                                got.get("copy_relays")), errs)

    # ---- the audit file -----------------------------------------------------

    def check_audit(self):
        path = self.vars["audit"]
        records, errs = read_audit(path)
        for r in records:
            for field in ("ts", "id", "event"):
                if field not in r:
                    errs.append("record without %r: %r" % (field, r))
            if r.get("event") == "decision" and r.get("decision") not in ("allow", "deny"):
                errs.append("decision record with decision %r" % r.get("decision"))
        if not records:
            errs.append("audit file %s is empty" % path)
        self.result("audit: every line of %d parses as JSON" % len(records), errs)

        missing = []
        for case, wants, same_conn in self.audit_wants:
            conns = set()
            for want in wants:
                found = [r for r in records if audit_match(r, want)]
                if not found:
                    missing.append("%s: no record matches %s" % (case, json.dumps(want)))
                conns.update(r.get("conn") for r in found)
            if same_conn and len(conns) > 1:
                missing.append("%s: records on %d connections %s, want one" % (
                    case, len(conns), sorted(conns)))
        self.result("audit: the %d expected records exist" % sum(
            len(w[1]) for w in self.audit_wants), missing)

        lost = ["%s: %s" % (r.get("detail"), {k: r[k] for k in ("dropped", "lost") if k in r})
                for r in records if r.get("dropped") or r.get("lost")]
        self.result("audit: no record was dropped", lost)

        self.check_audit_links(records)

    def check_audit_links(self, records):
        """Refusals are audited (issue 23 item 3), whatever the tier: the X-Agent-Audit-Id
        of every head a case saw names exactly one record, a decision of its answer's
        reason (deny) and status, and, when the answer had a body, of the body's host,
        port and sandbox."""
        by_id = {}
        for r in records:
            by_id.setdefault(str(r.get("id")), []).append(r)
        bad, tiers, kinds = [], {}, set()
        for link in self.links:
            label = "%s: the %s's X-Agent-Audit-Id %s (%s %s)" % (
                link["case"], link["where"], link["audit_id"], link["status"], link["reason"])
            found = by_id.get(link["audit_id"], [])
            if len(found) != 1:
                bad.append("%s names %d records, want exactly 1: %r" % (label, len(found),
                                                                          found[:3]))
                continue
            rec = found[0]
            want = {"event": "decision", "decision": "deny" if link["reason"] else "allow",
                    "reason": link["reason"] or "none", "status": link["status"]}
            for field in ("host", "port", "sandbox"):
                doc = link["body"] or {}
                if field in doc and (rec.get(field) or doc[field]):
                    want[field] = doc[field]
            diff = {k: (rec.get(k), v) for k, v in want.items() if rec.get(k) != v}
            if diff:
                bad.append("%s: the record differs (record, answer): %s; record %r"
                           % (label, diff, rec))
                continue
            tiers[rec.get("tier")] = tiers.get(rec.get("tier"), 0) + 1
            kinds.update(link_kinds(rec))
        if self.args.cases is None:
            bad += ["no case's answer linked a refusal of this kind (%s): the check does not "
                    "cover it" % k for k in LINK_KINDS if k not in kinds]
        self.result("audit: each of %d refusals' X-Agent-Audit-Id names exactly one record, "
                    "the deny decision of its reason and status (by tier: %s)" % (
                        len(self.links), ", ".join("%s %d" % kv for kv in sorted(tiers.items()))
                        or "none"), bad)


def json_documents(text):
    """The JSON documents of <text>, one after another (whitespace between them)."""
    dec = json.JSONDecoder()
    docs, at = [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return docs
        doc, at = dec.raw_decode(text, at)
        docs.append(doc)


def parse_header_blocks(text):
    """curl -D output: one {name: value} per response head, in order."""
    blocks = []
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if line.startswith("HTTP/"):
            blocks.append({})
        elif ":" in line and blocks:
            name, value = line.split(":", 1)
            key = name.strip().lower()
            cur = blocks[-1]
            cur[key] = value.strip() if key not in cur else cur[key] + ", " + value.strip()
    return blocks


def preflight(args):
    if os.geteuid() != 0:
        raise Skip("network namespaces need root")
    for tool in ("ip", "curl", "openssl", "node", "wrk"):
        if shutil.which(tool) is None:
            raise Skip("%s is not installed (tools/deps.sh installs it)" % tool)
    if not os.access(args.daemon, os.X_OK):
        raise Fatal("daemon %s is not built (make build/san/agentsnetd)" % args.daemon)
    probe = "agentsnet-it-probe-%d" % os.getpid()
    if subprocess.run(["ip", "netns", "add", probe], stderr=subprocess.PIPE,
                      check=False).returncode != 0:
        raise Skip("cannot create a network namespace here")
    netns_del(probe)


def render_policy(suite):
    render_file(os.path.join(HERE, "policy.yaml.in"), suite.vars["policy"], suite.vars)


def run_suite(suite, cases):
    args = suite.args
    t0 = time.monotonic()
    ca_pem, leaf_pem, leaf_key = make_pki(suite.tmp, ORIGIN_NAMES)
    # The inject rules' secret (policy.yaml.in), made anew each run: the daemon's own, 0600.
    with open(os.open(os.path.join(suite.tmp, "inject-secret.txt"),
                      os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="ascii") as f:
        f.write(INJECT_SECRET + "\n")
    suite.vars.update(make_data(suite.tmp))
    log("# fixtures ready in %.1fs (%s)" % (time.monotonic() - t0, suite.tmp))
    netns_add(args.upns)
    netns_add(args.netns)
    ports = suite.start_origin(leaf_pem, leaf_key)
    closed_port, dns_port = suite.free_ports()
    sock_dir = os.path.join(suite.tmp, "sock")
    os.mkdir(sock_dir)
    suite.vars.update(ports)
    suite.vars.update({
        "ca": ca_pem, "tmp": suite.tmp, "sock_dir": sock_dir, "closed_port": closed_port,
        "dns_port": dns_port, "audit": os.path.join(suite.tmp, "audit.jsonl"),
        "policy": os.path.join(suite.tmp, "policy.yaml"), "proxy": "http://" + PROXY_ADDR,
        "sandbox": SANDBOX, "other_sandbox": OTHER_SANDBOX,
        "inject_masked": "Bearer " + "*" * len(INJECT_SECRET),
    })
    render_policy(suite)
    suite.start_silent_resolver(dns_port)
    log("# origin https:%d http:%d, closed tcp:%d, silent resolver udp:%d" % (
        ports["https_port"], ports["http_port"], closed_port, dns_port))

    static = [c for c in cases if c.get("client") == "check_config"]
    live = [c for c in cases if c.get("client") != "check_config"]
    for case in static:
        suite.run_case(substitute(case, suite.vars))
    if not live:
        return
    suite.start_daemon()
    suite.start_forwarder()
    log("# agentsnetd and forwarder ready")
    for case in live:
        if suite.daemon.poll() is not None:
            suite.result(case["name"], ["not run: agentsnetd is gone"])
            continue
        suite.run_case(substitute(case, suite.vars))
        if suite.daemon.poll() is not None:
            log("# agentsnetd exited %d during %s; stderr:\n%s" % (
                suite.daemon.returncode, case["name"],
                read_text(suite.daemon_err_path)[-4000:]))
    if suite.daemon.poll() is None:
        suite.check_relays([c["name"] for c in live])
    if (args.cases is None or args.reload) and suite.daemon.poll() is None:
        reload.run(suite)  # last: it rewrites the policy file under the running daemon
    suite.procs.stop(suite.forwarder)
    suite.stop_daemon()
    suite.check_audit()


def main():
    ap = argparse.ArgumentParser(description="agentsnet integration suite")
    ap.add_argument("--daemon", default=os.path.join(ROOT, "build", "san", "agentsnetd"))
    add_run_args(ap, "name of the sandbox namespace (the upstream one adds -up)")
    ap.add_argument("--reload", action="store_true",
                    help="run reload.py's checks after the --cases selected too")
    args = ap.parse_args()
    args.daemon = os.path.abspath(args.daemon)
    args.upns = args.netns + "-up"
    status = checked_preflight("integ", preflight, args)
    if status is not None:
        return status
    suite = Suite(args)
    suite.tmp = tempfile.mkdtemp(prefix="agentsnet-it-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    def cleanup():
        suite.procs.stop_all()
        netns_del(args.netns)
        netns_del(args.upns)

    cases = load_cases(os.path.join(HERE, "cases"), args.cases)
    return run_and_tally("integ", suite, args, lambda: run_suite(suite, cases), cleanup)


if __name__ == "__main__":
    sys.exit(main())
