"""The fairness pass (issue 15 item 4): one sandbox cannot starve the others.

A daemon whose workers hold 64 connections each serves two sandboxes on one worker and
one profile, whose one rule relays model.internal to a plain-HTTP origin on loopback:
  - share: "flood" opens 100 connections to its egress socket and never sends a
    byte. Its share of the worker (75% of 64: 48) stays open and silent; every
    connection past it is answered at once, in-band, 429
    connection_share_exceeded with Retry-After, X-Agent-Instruction and a JSON
    body, then closed. With the flood still open, "quiet" opens 8 connections and
    each is served (200 from the origin). Once the flood closes, flood itself is
    served again.
  - audit: a deny record of flood's with that code and status 429.
  - keep_refused: "limited" (1 request/s) asks twice on one keep-alive connection: the
    second gets 429 rate_limited with Connection: keep-alive and Retry-After, and the
    same connection's request after that wait gets 200; a CONNECT likewise (429 kept,
    then 200 and a working tunnel on the same connection). A POST (a body) over the
    limit gets 429 and its connection is closed.
  - keep_crowded: "crowded" (1 connection at once) opens a second connection: its request
    gets 429 concurrency_limited, kept open, and so does its next while the first is open
    (a kept connection is counted again until a request passes); once the first closes,
    the same connection gets 200.
With --share 100 (the share turned off) those two fail: the flood fills the worker
and quiet is refused.
  - session_limited: a third daemon, with a CA, on the terminated tiers (issue 23 item 3):
    several requests on one kept-alive TLS session through the proxy, to a fake rule and
    an inject rule with rule limits (burst 3, 1 a second) and to a fake rule of a profile
    with sandbox limits (the same). Every request in the session counts: the one over
    the bucket (the 3rd or the 4th, as the CONNECT may have taken a token) is answered
    in the session, 429 rate_limited with Retry-After, the rule's id, Connection:
    keep-alive and an X-Agent-Audit-Id that names its own deny record (one record, of
    the session's conn, its path); after Retry-After the same session is served. The
    sandbox's again with requests that carry Content-Length: 0: kept just the same.
  - sandbox_bound: a second daemon under 1,100 open files: `sandbox add` answers
    `error limit` once its listeners reach the bound docs/control.md gives, never
    `error internal` (EMFILE), and a removal makes room again.

Runs as its own pass: python3 tests/integ/fairness.py [--daemon PATH] [--share N] -v
(--netns, given by tests/integ/run.sh, is accepted and unused: loopback only).
"""

import http.server
import json
import os
import resource
import select
import socket
import ssl
import sys
import tempfile
import threading
import time

from integlib import (control_exchange, make_pki, own_pass_args, own_pass_end, print_counts,
                      read_audit, skip_pass,
                      read_head, recv_all, wait_for, with_daemon, Fatal)

CONNS_PER_WORKER = 64
TALLY = []  # each test's outcome in turn, True when it passed: the closing counts
FLOOD_CONNS = 100
QUIET_CONNS = 8
ANSWER_WAIT_S = 2.0
# The open-files limit of the sandbox-bound daemon: room for 56 listeners (docs/control.md).
BOUND_NOFILE = 1100

POLICY = """version: 1
daemon:
  socket_dir: {sock_dir}
  audit_log: {audit}
  # Two workers (one alone trips a misaligned snapshot_use under UBSan, an issue of its
  # own); sandboxes go to workers in turn, so flood and quiet share worker 0.
  workers: 2
  conns_per_worker: {conns}
  sandbox_share_percent: {share}
  pipes_per_worker: {pipes}
  timeouts: {{head_ms: 30000}}
profiles:
  fair:
    rules:
      - {{id: model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
  limited:
    limits: {{requests_per_second: 1, burst: 1}}
    rules:
      - {{id: model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
  crowded:
    limits: {{concurrent: 1}}
    rules:
      - {{id: model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
sandboxes:
  - {{id: flood, profile: fair}}
  - {{id: other-worker, profile: fair}}
  - {{id: quiet, profile: fair}}
{extra}"""
# The share daemon's sandboxes more (the bound daemon's count of listeners has no room).
LIMITED = "  - {id: limited, profile: limited}\n  - {id: crowded, profile: crowded}\n"

# The session daemon (t_session_limited): the terminated tiers, each limit's burst SESSION_BURST
# at 1 a second. The test CA is the agentsnet CA and signs the inject upstream's leaf.
SESSION_BURST = 3
SESSION_PLACEHOLDER = "agentsnet-placeholder-fair"
SESSION_POLICY = """version: 1
daemon:
  socket_dir: {sock_dir}
  audit_log: {audit}
  workers: 2
  ca: {{cert: "{ca}", key: "{ca_key}"}}
resolver:
  hosts: {{inject.test: [127.0.0.1]}}
  allow_private: [127.0.0.1/32]
profiles:
  session-rule:
    rules:
      - {{id: fake-limited, host: fake.test, tier: fake, owner: tests, reason: rule limits,
         limits: {{requests_per_second: 1, burst: {burst}}},
         responses: [{{status: 200, headers: {{Content-Type: text/plain}}, body: "fake\\n"}}]}}
      - id: inject-limited
        host: inject.test
        tier: inject
        ports: [{tls_port}]
        owner: tests
        reason: rule limits
        limits: {{requests_per_second: 1, burst: {burst}}}
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{secret}"}}
        upstream_ca: "{ca}"
  session-sandbox:
    limits: {{requests_per_second: 1, burst: {burst}}}
    rules:
      - {{id: fake-free, host: fake.test, tier: fake, owner: tests, reason: sandbox limits,
         responses: [{{status: 200, headers: {{Content-Type: text/plain}}, body: "fake\\n"}}]}}
sandboxes:
  - {{id: session-rule, profile: session-rule}}
  - {{id: session-sandbox, profile: session-sandbox}}
"""


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b'{"ok":true}\n'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


def egress(sock_dir, sandbox):
    return os.path.join(sock_dir, "sandboxes", sandbox, "egress.sock")


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    return s


def answers_of(socks, wait_s):
    """What the daemon sent on each of <socks> within <wait_s> in all without being asked
    (b"" where nothing); None where it closed without a byte."""
    got = {s: b"" for s in socks}
    open_ = set(socks)
    end = time.monotonic() + wait_s
    while open_ and time.monotonic() < end:
        ready, _, _ = select.select(list(open_), [], [], max(0.0, end - time.monotonic()))
        for s in ready:
            chunk = s.recv(65536)
            if not chunk:
                open_.discard(s)
                if not got[s]:
                    got[s] = None
            else:
                got[s] += chunk
    return [got[s] for s in socks]


def served(path, host=b"model.internal"):
    """One request for http://<host>/x through a new connection to <path>: every byte of
    the answer (its status line first)."""
    with connect(path) as s:
        try:
            s.sendall(b"GET http://%s/x HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                      % (host, host))
        except OSError:
            pass  # refused before it was asked: the answer is read below
        return recv_all(s)


def check_share_answer(data):
    """The problems with a share refusal <data> (empty when it is one)."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in
              (line.partition(":") for line in lines[1:])}
    errs = []
    if not lines[0].startswith("HTTP/1.1 429 "):
        errs.append("status line %r, want 429" % lines[0])
    if fields.get("x-agent-reason") != "connection_share_exceeded":
        errs.append("X-Agent-Reason %r" % fields.get("x-agent-reason"))
    if not fields.get("x-agent-instruction"):
        errs.append("no X-Agent-Instruction")
    if fields.get("retry-after") != "1":
        errs.append("Retry-After %r, want 1" % fields.get("retry-after"))
    try:
        doc = json.loads(body)
        if doc.get("reason") != "connection_share_exceeded" or doc.get("status") != 429:
            errs.append("body %r" % doc)
    except ValueError:
        errs.append("body is not JSON: %r" % body[:200])
    return errs


def t_share(v, log):
    errs = []
    flood = []
    try:
        for _ in range(FLOOD_CONNS):
            flood.append(connect(egress(v["sock_dir"], "flood")))
        answers = answers_of(flood, ANSWER_WAIT_S)
        refused = [a for a in answers if a]
        held = answers.count(b"")
        if None in answers:
            errs.append("%d of flood's connections closed without an answer"
                        % answers.count(None))
        share = CONNS_PER_WORKER * v["share"] // 100
        log("flood: %d connections held open, %d answered" % (held, len(refused)))
        if held != share:
            errs.append("flood holds %d connections, want its share %d" % (held, share))
        if len(refused) != FLOOD_CONNS - share:
            errs.append("%d of flood's connections answered, want %d" % (
                len(refused), FLOOD_CONNS - share))
        for a in refused[:3]:
            errs += check_share_answer(a)
        for i in range(QUIET_CONNS):
            got = served(egress(v["sock_dir"], "quiet"))
            if not got.startswith(b"HTTP/1.1 200 ") or b'{"ok":true}' not in got:
                errs.append("quiet's request %d during the flood: %r" % (i, got[:300]))
                break
    finally:
        for s in flood:
            s.close()
    # Flood's own connections come back to it once it lets go.
    try:
        wait_for(lambda: served(egress(v["sock_dir"], "flood")).startswith(b"HTTP/1.1 200 "),
                 5, "flood served again after closing its connections")
    except Fatal as e:
        errs.append(str(e))
    return errs


def exchange(s, request):
    """Sends <request> on <s> and reads one answer (Content-Length framed): (status line,
    {field: value}, body), or None when the connection ended first."""
    try:
        s.sendall(request)
    except OSError:
        return None
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = s.recv(65536)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in
              (line.partition(":") for line in lines[1:])}
    while len(body) < int(fields.get("content-length", "0")):
        chunk = s.recv(65536)
        if not chunk:
            return None
        body += chunk
    return lines[0], fields, body


GET = b"GET http://model.internal/x HTTP/1.1\r\nHost: model.internal\r\n\r\n"
CONNECT = b"CONNECT model.internal:80 HTTP/1.1\r\nHost: model.internal:80\r\n\r\n"
POST = (b"POST http://model.internal/x HTTP/1.1\r\nHost: model.internal\r\n"
        b"Content-Length: 5\r\n\r\nhello")
POST_EMPTY = (b"POST http://model.internal/x HTTP/1.1\r\nHost: model.internal\r\n"
              b"Content-Length: 0\r\n\r\n")


def closed_within(s, wait_s):
    """Whether the daemon closes <s> (EOF or reset) within <wait_s>, sending nothing more."""
    s.settimeout(wait_s)
    try:
        return s.recv(65536) == b""
    except socket.timeout:
        return False
    except OSError:
        return True
    finally:
        s.settimeout(5)


def t_keep_refused(v, log):
    """A request over the sandbox's rate limit (a POST framed by Content-Length: 0, which has
    no body as much as a GET) gets 429 on a connection that stays open: the same connection
    gets 200 after Retry-After. One with a body is refused and closed."""
    errs = []
    path = egress(v["sock_dir"], "limited")
    time.sleep(1.1)  # a whole token: earlier passes may have spent it
    with connect(path) as s:
        first = exchange(s, GET)
        if first is None or not first[0].startswith("HTTP/1.1 200 "):
            return ["the first request: %r, want 200" % (first,)]
        second = exchange(s, POST_EMPTY)
        if second is None:
            return ["the request over the limit: the connection ended without an answer"]
        line, fields, _ = second
        log("keep_refused: over the limit: %s, Connection: %s, Retry-After: %s"
            % (line, fields.get("connection"), fields.get("retry-after")))
        if not line.startswith("HTTP/1.1 429 ") or \
                fields.get("x-agent-reason") != "rate_limited":
            return ["the request over the limit: %r %r, want 429 rate_limited" % (line, fields)]
        if fields.get("connection", "").lower() != "keep-alive":
            errs.append("the 429 says Connection: %r, want keep-alive" % fields.get("connection"))
        retry = int(fields.get("retry-after", "0"))
        if retry < 1:
            errs.append("Retry-After %r" % fields.get("retry-after"))
        time.sleep(max(retry, 1) + 0.1)
        third = exchange(s, GET)
        if third is None or not third[0].startswith("HTTP/1.1 200 "):
            errs.append("after Retry-After, the same connection: %r, want 200" % (third,))
    # A CONNECT over the limit: the same, and then the tunnel opens on that connection.
    time.sleep(1.1)
    with connect(path) as s:
        first = exchange(s, GET)
        over = exchange(s, CONNECT)
        if first is None or over is None or not over[0].startswith("HTTP/1.1 429 ") or \
                over[1].get("connection", "").lower() != "keep-alive":
            errs.append("a CONNECT over the limit: %r after %r, want 429 kept" % (over, first))
        else:
            time.sleep(int(over[1].get("retry-after", "1")) + 0.1)
            s.sendall(CONNECT)
            head = read_head(s)
            if not head.startswith(b"HTTP/1.1 200 "):
                errs.append("the kept connection's CONNECT after Retry-After: %r" % head[:200])
            else:
                # The tunnel reaches the origin: one request through it.
                got = exchange(s, b"GET /x HTTP/1.1\r\nHost: model.internal\r\n\r\n")
                if got is None or not got[0].startswith("HTTP/1.1 200 "):
                    errs.append("a request through the tunnel: %r" % (got,))
    # A refused request with a body: the framing is not ours to skip, so it closes.
    time.sleep(1.1)
    with connect(path) as s:
        first = exchange(s, GET)
        over = exchange(s, POST)
        if first is None or over is None or not over[0].startswith("HTTP/1.1 429 "):
            errs.append("a POST over the limit: %r after %r, want 429" % (over, first))
        elif over[1].get("connection", "").lower() != "close" or not closed_within(s, 5):
            errs.append("a refused POST's connection stayed open (Connection: %r)"
                        % over[1].get("connection"))
    return errs


def t_keep_crowded(v, log):
    """A connection over the sandbox's concurrent limit gets 429 concurrency_limited and stays
    open; its next request is counted again (still 429 while the first connection is open),
    and once that one closes, the same connection is served."""
    errs = []
    path = egress(v["sock_dir"], "crowded")
    with connect(path) as first:
        got = exchange(first, GET)
        if got is None or not got[0].startswith("HTTP/1.1 200 "):
            return ["crowded's first connection: %r, want 200" % (got,)]
        second = connect(path)
        try:
            for attempt in (1, 2):
                got = exchange(second, GET)
                if got is None or not got[0].startswith("HTTP/1.1 429 ") or \
                        got[1].get("x-agent-reason") != "concurrency_limited":
                    return ["the second connection's request %d: %r, want 429 "
                            "concurrency_limited" % (attempt, got)]
                if got[1].get("connection", "").lower() != "keep-alive":
                    errs.append("the 429 says Connection: %r" % got[1].get("connection"))
            log("keep_crowded: two 429s on one connection while the first is open")
        except BaseException:
            second.close()
            raise
    try:
        end = time.monotonic() + 5
        while True:
            time.sleep(0.2)
            got = exchange(second, GET)
            if got is None:
                errs.append("the refused connection closed")
                break
            if got[0].startswith("HTTP/1.1 200 ") or time.monotonic() > end:
                break
        if got is not None and not got[0].startswith("HTTP/1.1 200 "):
            errs.append("once the first closed, the same connection: %r, want 200" % (got,))
    finally:
        second.close()
    return errs


def tls_session(v, sandbox, host, port):
    """A TLS session with the daemon, for <host>:<port>, through a CONNECT on <sandbox>'s
    egress socket: the terminated tier's leaf, verified against the test CA."""
    s = connect(egress(v["sock_dir"], sandbox))
    try:
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                  % (host.encode(), port, host.encode(), port))
        head = read_head(s)
        if not head.startswith(b"HTTP/1.1 200 "):
            raise Fatal("CONNECT %s:%d on %s: %r" % (host, port, sandbox, head[:300]))
        return ssl.create_default_context(cafile=v["ca"]).wrap_socket(s, server_hostname=host)
    except BaseException:
        s.close()
        raise


def session_limited(v, log, label, sandbox, host, port, rule, tier, more=b""):
    """Requests on one TLS session to <host> (<more>: header lines they carry) until one is
    refused: the problems with what the docs promise (t_session_limited)."""
    errs = []
    statuses, refusal = [], None
    with tls_session(v, sandbox, host, port) as tls:
        for i in range(SESSION_BURST + 2):
            got = exchange(tls, b"GET /r%d HTTP/1.1\r\nHost: %s\r\n%s\r\n"
                           % (i, host.encode(), more))
            if got is None:
                return ["%s: the session ended after %s" % (label, statuses)]
            statuses.append(int(got[0].split()[1]))
            if statuses[-1] != 200:
                refusal = got
                break
        log("session_limited: %s: %s" % (label, statuses))
        if refusal is None:
            return ["%s: %d requests on one session, none refused (%s): the requests inside "
                    "a terminated session are not counted against the limit"
                    % (label, len(statuses), statuses)]
        served = len(statuses) - 1
        line, fields, body = refusal
        if served not in (SESSION_BURST - 1, SESSION_BURST):
            errs.append("%s: %d served before the refusal, want %d (or %d, the CONNECT "
                        "taking a token)" % (label, served, SESSION_BURST, SESSION_BURST - 1))
        retry = fields.get("retry-after", "")
        if not line.startswith("HTTP/1.1 429 ") or \
                fields.get("x-agent-reason") != "rate_limited" or not retry.isdigit() or \
                int(retry) < 1 or fields.get("x-agent-rule") != rule:
            errs.append("%s: the refusal %r %r, want 429 rate_limited, Retry-After >= 1, "
                        "X-Agent-Rule %s" % (label, line, fields, rule))
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {}
        if doc.get("reason") != "rate_limited" or doc.get("audit_id") is None or \
                doc.get("audit_id") != fields.get("x-agent-audit-id"):
            errs.append("%s: the refusal's body %r, want reason rate_limited and the "
                        "X-Agent-Audit-Id as audit_id" % (label, body[:300]))
        if fields.get("connection", "").lower() != "keep-alive":
            errs.append("%s: the 429 says Connection: %r, want keep-alive (docs/policy.md: "
                        "a limit's 429 keeps the connection)" % (label,
                                                                   fields.get("connection")))
        else:
            time.sleep(int(retry) + 0.1 if retry.isdigit() else 1.1)
            again = exchange(tls, b"GET /again HTTP/1.1\r\nHost: %s\r\n%s\r\n"
                             % (host.encode(), more))
            if again is None or not again[0].startswith("HTTP/1.1 200 "):
                errs.append("%s: after Retry-After, the same session: %r, want 200"
                            % (label, again))
    errs += session_audit_errs(v, label, fields.get("x-agent-audit-id"), "/r%d" % served,
                               rule, tier)
    return errs


def session_audit_errs(v, label, audit_id, path, rule, tier):
    """The refusal's X-Agent-Audit-Id <audit_id> names exactly one record: the deny
    decision rate_limited 429 of the refused request (<path>, <rule>, <tier>), on the
    session's conn (that of the session's first request, /r0)."""
    if audit_id is None:
        return ["%s: the refusal has no X-Agent-Audit-Id" % label]

    def records():
        got, _ = read_audit(v["audit"])
        return got if any(r.get("id") == audit_id for r in got) else None
    try:
        got = wait_for(records, 5, "the record %s" % audit_id)
    except Fatal as e:
        return ["%s: %s" % (label, e)]
    named = [r for r in got if r.get("id") == audit_id]
    want = {"event": "decision", "decision": "deny", "reason": "rate_limited", "status": 429,
            "tier": tier, "rule": rule, "method": "GET", "path": path}
    if len(named) != 1 or any(named[0].get(k) != x for k, x in want.items()):
        return ["%s: X-Agent-Audit-Id %s names %r, want one record %r" % (label, audit_id,
                                                                          named, want)]
    first = [r for r in got if r.get("event") == "decision" and r.get("path") == "/r0" and
             r.get("conn") == named[0].get("conn") and r.get("decision") == "allow"]
    if len(first) != 1:
        return ["%s: the refusal's record is on conn %s, where no allowed /r0 is: not the "
                "session's" % (label, named[0].get("conn"))]
    return []


def t_session_limited(v, log):
    """Rate limits inside TLS-terminated sessions: a rule's on the fake tier and the inject
    tier, a sandbox's on the fake tier (session_limited); then the sandbox's again with
    requests framed by Content-Length: 0, no body as much as none framed, so its 429 keeps
    the session too."""
    auth = b"Authorization: Bearer %s\r\n" % SESSION_PLACEHOLDER.encode()
    errs = []
    for args in (("fake tier, rule limits", "session-rule", "fake.test", 443, "fake-limited",
                  "fake"),
                 ("inject tier, rule limits", "session-rule", "inject.test", v["tls_port"],
                  "inject-limited", "inject", auth),
                 ("fake tier, sandbox limits", "session-sandbox", "fake.test", 443, "fake-free",
                  "fake"),
                 ("fake tier, sandbox limits, Content-Length: 0", "session-sandbox",
                  "fake.test", 443, "fake-free", "fake", b"Content-Length: 0\r\n")):
        if args[0].endswith("Content-Length: 0"):
            time.sleep(SESSION_BURST + 0.5)  # the sandbox's bucket full again (1 a second)
        errs += session_limited(v, log, *args)
    return errs


def control(v, line):
    """The daemon's answer to control request <line> (no newline), as text."""
    return control_exchange(os.path.join(v["sock_dir"], "control.sock"),
                            line.encode() + b"\n").decode()


def t_sandbox_bound(v, log):
    """Under BOUND_NOFILE open files, sandbox add answers "error limit" at the bound the
    docs give (less the policy file's 3), and a removal makes room for one more."""
    want = BOUND_NOFILE - 1024 - 2 * (2 * 1 + 8) - 3
    errs = []
    added = 0
    while added <= want:
        answer = control(v, "sandbox add bound-%d fair" % added)
        if not answer.startswith("ok "):
            break
        added += 1
    log("sandbox bound: %d added, then %r" % (added, answer.strip()))
    if added != want:
        errs.append("%d sandboxes added under %d open files, want %d" % (
            added, BOUND_NOFILE, want))
    if not answer.startswith("error limit "):
        errs.append("past the bound: %r, want error limit" % answer)
    if control(v, "sandbox rm bound-0").strip() != "ok":
        errs.append("sandbox rm bound-0 failed")
    again = control(v, "sandbox add bound-again fair")
    if not again.startswith("ok "):
        errs.append("after a removal: %r, want ok" % again)
    # The listeners added last still serve.
    got = served(egress(v["sock_dir"], "bound-%d" % (added - 1)))
    if not got.startswith(b"HTTP/1.1 200 "):
        errs.append("the last sandbox added: %r" % got[:200])
    return errs


def t_audit(v, log):
    records, errs = read_audit(v["audit"])
    want = [r for r in records if r.get("reason") == "connection_share_exceeded"]
    log("audit: %d connection_share_exceeded records" % len(want))
    if not want:
        errs.append("no audit record with reason connection_share_exceeded")
    for r in want:
        if r.get("sandbox") != "flood" or r.get("decision") != "deny" or \
                r.get("status") != 429:
            errs.append("audit record %r" % r)
            break
    return errs


def run_daemon(args, v, tests, log, nofile=None):
    """Runs <tests> against a daemon started with v["policy"] (under an open-files limit of
    <nofile> when given), then stops it; returns how many failed (the daemon's exit too)."""
    limit = None
    if nofile is not None:
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))  # noqa
    extra = os.environ.get("AN_FAIR_DAEMON_ARGS", "").split()

    def body():
        failed = 0
        for name, test in tests:
            errs = test(v, log)
            TALLY.append(not errs)
            print("fairness: %s: %s" % (name, "ok" if not errs else "FAIL"))
            for e in errs:
                print("  " + e)
            failed += bool(errs)
        return failed

    return with_daemon("fairness", [args.daemon, "--config", v["policy"]] + extra,
                       v["policy"] + ".err", body, limit)


def run_session_daemon(args, tmp, log):
    """The session daemon (SESSION_POLICY) and its HTTPS origin for the inject rule: runs
    t_session_limited; returns how many failed."""
    top = os.path.join(tmp, "session")
    os.mkdir(top, 0o755)
    ca, leaf, key = make_pki(top, ("inject.test",))
    tls_origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(leaf, key)
    tls_origin.socket = ctx.wrap_socket(tls_origin.socket, server_side=True)
    threading.Thread(target=tls_origin.serve_forever, daemon=True).start()
    secret = os.path.join(top, "secret.txt")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w",
              encoding="ascii") as f:
        f.write("sk-fair-%s\n" % os.urandom(8).hex())
    v = {"sock_dir": os.path.join(top, "run"), "audit": os.path.join(top, "audit.jsonl"),
         "policy": os.path.join(top, "policy.yaml"), "ca": ca,
         "tls_port": tls_origin.server_address[1]}
    with open(v["policy"], "w", encoding="utf-8") as f:
        f.write(SESSION_POLICY.format(sock_dir=v["sock_dir"], audit=v["audit"], ca=ca,
                                      ca_key=os.path.join(top, "ca.key"), burst=SESSION_BURST,
                                      tls_port=v["tls_port"], placeholder=SESSION_PLACEHOLDER,
                                      secret=secret))
    try:
        return run_daemon(args, v, (("session_limited", t_session_limited),), log)
    finally:
        tls_origin.shutdown()


def main():
    args, log = own_pass_args(
        "agentsnet fairness pass",
        lambda ap: ap.add_argument("--share", type=int, default=75,
                                   help="sandbox_share_percent (100: off)"))
    if os.geteuid() != 0:
        return skip_pass("fairness", "the daemon's socket directory checks want root")

    tmp = tempfile.mkdtemp(prefix="an-fair-")
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    failed = 0
    try:
        for name, pipes, nofile, extra, tests in (
                ("share", 128, None, LIMITED, (("share", t_share), ("audit", t_audit),
                                               ("keep_refused", t_keep_refused),
                                               ("keep_crowded", t_keep_crowded))),
                ("bound", 1, BOUND_NOFILE, "", (("sandbox_bound", t_sandbox_bound),))):
            top = os.path.join(tmp, name)
            os.mkdir(top, 0o755)
            v = {"sock_dir": os.path.join(top, "run"), "audit": os.path.join(top, "audit.jsonl"),
                 "share": args.share, "policy": os.path.join(top, "policy.yaml")}
            with open(v["policy"], "w", encoding="utf-8") as f:
                f.write(POLICY.format(sock_dir=v["sock_dir"], audit=v["audit"],
                                      conns=CONNS_PER_WORKER, share=args.share, pipes=pipes,
                                      port=origin.server_address[1], extra=extra))
            failed += run_daemon(args, v, tests, log, nofile)
        failed += run_session_daemon(args, tmp, log)
    finally:
        origin.shutdown()
    print_counts("fairness", TALLY.count(True), failed)  # failed: the daemons' faults too
    return own_pass_end("fairness", tmp, failed)


if __name__ == "__main__":
    sys.exit(main())
