#!/usr/bin/env python3
"""agentsnet ingress pass: public requests through agentsnetd's ingress gateway
to servers inside real `agentsnet run` sandboxes (issue 7).

Layout of one run (everything on loopback, nothing can leave the machine):

    upstream netns agentsnet-it-<id>-up   lo only; agentsnetd, its public
                                          listener on 127.0.0.1:<free port>,
                                          and every public client of this
                                          pass (the pass itself enters it)
    host netns     agentsnet-it-<id>      lo only; `agentsnet run` starts here
        sandbox    a new netns per run: the bridge forwards each connection
                   the daemon opens on <socket_dir>/sandboxes/<id>/ingress.sock
                   to 127.0.0.1:$AGENT_INGRESS_PORT, where ingress/agent.py
                   (or `python3 -m http.server`) listens

The last test ("tls") starts a second daemon in the upstream namespace, its
own socket directory (/run/<netns>-tls), audit file and port, with
daemon.ingress.tls: an operator certificate made here with the openssl CLI
(an EC P-256 CA and a leaf for 127.0.0.1 and hooks.ingress.test), two
sandboxes under it, and the checks again over HTTPS, each public client
bound to its own loopback address (127.0.0.2, ...) so that what the agent
and the audit are told is the real client, not the daemon's own socket.
Then daemons whose certificate or key does not load, which must not start.

The tests before it ("embedded", "embedded_taken") start agentsnetd with no
--config, on the embedded default policy, in the upstream namespace too, its
socket directory and audit file under this pass's temporary directory (nothing
in /run/agentsnet or /var/log): its gateway is 127.0.0.1:8090, so an
`agentsnet run` under it gets AGENT_PUBLIC_URL
http://127.0.0.1:8090/callbacks/<id>, and a request to that URL reaches the
agent. When 8090 is already taken there as the test begins, the daemon must
start anyway, warn that the gateway is off, give the sandbox no
AGENT_PUBLIC_URL and answer `sandbox url` with error no_ingress: "embedded"
checks that instead, and says which; "embedded_taken" always checks it, with
8090 held by a listener of the pass before the daemon starts. "egress" starts
one more daemon (ingress/limits.yaml.in, its own socket directory, audit file and
TCP listener) for what needs sandboxes of known limits and no agent: plain
http:// requests on their egress sockets (and its TCP listener) to fake rules,
answered by the daemon itself, against the profile and rule limits and the
refused_names alert.

Every agent server records each request it gets (ingress/agent.py --log), so
a check that something never reached a sandbox reads that sandbox's own log,
and a control request that must reach it shows the log works. Requests go
over raw sockets (curl, and http.client for keep-alive over TLS, only where
the issue names them), so no client normalises a path or a header on the
way. After each run nothing of its sandbox may be left (sandbox.py's
leftover check).

    ingress.py [--tests GLOB] [-v] [--keep]    (-v: the TLS daemon runs with --debug)
    ingress.py --self-test            (the fixtures alone, no daemon, no root)

Prints one line per check and a closing "ingress: N passed, N failed, N skipped" (the
skipped named with their reasons). Skips: a check that cannot run here is counted there;
under CI=true (Debian 12, root, tools/deps.sh run) it is a failure unless it is listed
here, and so is a missing tool or a caller that is not root (exit 77 elsewhere). Skips
allowed under CI=true: none (docs/testing.md, "Skips": no integration skip is allowed).
(The TLS 1.1 refusal check skips when this Python's OpenSSL cannot offer TLS 1.1; Debian
12's does, at security level 0, so there it runs.) A pass that skipped a check and failed
none exits 77, its "SKIP:" line naming each.
Exit 0 pass, 1 fail, 77 skip (with the reason).
"""

import argparse
import base64
import ctypes
import errno
import fnmatch
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import warnings

from integlib import (READY_TIMEOUT_S, Fatal, Procs, Skip, add_binary_args, add_run_args,
                      check_errs, checked_preflight, daemon_env, log, netns_add, netns_del,
                      agent_dir, pass_tmp, read_audit, read_text, render_file, resolve_binary_args, run,
                      run_and_tally, run_tests, sanitizer_marks, spawn_daemon, start_daemon,
                      stop_daemon, wait_for)
from sandbox import WAIT_SH, Pass, touch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "ingress")
sys.path.insert(0, FIXTURES)
import ws  # noqa: E402  (tests/integ/ingress/ws.py)

PREFIX = "/callbacks"
HEAD_MS = 1500  # daemon.timeouts.head_ms of this pass
# A 408 at head_ms comes after at least 0.8 of it (it is not early) and within five times
# it (it comes at all: the pass's idle_ms is the default, far past that).
HEAD_WAIT_S = HEAD_MS / 1000 * 5
BODY_BYTES = 1024  # profile default's ingress.body_bytes
LINE_MAX = 8192  # LIMITS_REQUEST_LINE_BYTES_MAX: a request line this long is fine, one more 414
HEAD_MAX = 16384  # LIMITS_HEAD_BYTES_MAX: a head this large is fine, one more 431
BURST, RATE = 3, 1  # profile limited's ingress.limits
CONCURRENT = 3  # profile capped's ingress.limits.concurrent
CONCURRENT_RETRY_S = 1  # the Retry-After of a concurrency_limited (docs/reasons.md)
HOLD_WAIT_S = 5  # the agent has every request sent to be held by then (it takes ms)
NOT_LISTENING_S = 3  # a 502 agent_not_listening comes within this, not a hang
STALLED_REQUESTS = 40  # public requests waiting at once on an ingress socket nobody accepts on
REAP_WAIT_S = 5
AUDIT_WAIT_S = 3
WS_MESSAGES = 1000
WS_LOCKSTEP = 100  # the first messages wait for their echo: nothing may sit in a buffer
SSE_GAP_MIN_S = 0.1  # the agent writes events 300 ms apart (agent.py); held back: ~0
STATIC_BYTES = 300 * 1024
CLONE_NEWNET = 0x40000000
AUDIT_PATH_MAX = 255  # the audit keeps this much of a path (core/audit.h)
# Refusals of a head that was not parsed: their records name no method, path or sandbox.
UNPARSED = ("bad_request", "uri_too_long", "headers_too_large", "request_timeout")
FORGED = "6.6.6.6"
# The static agent: its environment as JSON first, then python3 -m http.server on <$0>.
STATIC_SH = ('echo "{\\"public_url\\": \\"$AGENT_PUBLIC_URL\\", \\"ingress_port\\": '
             '\\"$AGENT_INGRESS_PORT\\"}"; cd "$0" && exec python3 -u -m http.server '
             '--bind 127.0.0.1 8081')
# The public listener over TLS (daemon.ingress.tls): the operator's certificate names
# 127.0.0.1 and TLS_NAME; each check connects from its own loopback address, so that the
# client the agent and the audit are told is the real one, not the daemon's own socket.
TLS_NAME = "hooks.ingress.test"
# The public host of the origins daemon (daemon.ingress.origins: subdomain): each sandbox is
# also <id>.ORIGIN_HOST. Never resolved: the clients connect to 127.0.0.1 and send it as Host.
ORIGIN_HOST = "hooks.origins.test"
TLS_CA_CN = "agentsnet ingress test CA"
TLS_WS_MESSAGES = 200  # 5 over 64 KiB (ws_plan)
TLS_WS_LOCKSTEP = 50
TLS_WS_WINDOW = 256 * 1024
PLAIN_ON_TLS_S = 5  # a plain request to the TLS port: closed within this
START_FAIL_S = 15  # a daemon whose certificate does not load exits within this
EC_P256 = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
# The embedded default policy (agentsnetd with no --config, policy/policy.c): its
# gateway's address, and its profile's ingress limits, which the check stays far under.
EMBEDDED_HOST, EMBEDDED_PORT = "127.0.0.1", 8090
EMBEDDED_RATE, EMBEDDED_BURST = 50, 100
EMBEDDED_REQUESTS = 3
# t_egress (ingress/limits.yaml.in): the profile's burst, the refused requests sent
# before it, the rule's refusals, the TCP listener's connections (spread over 2 workers:
# each gets more than a burst but with a chance of about 1e-7 that one does not).
EGRESS_BURST = 5
EGRESS_DENIED = 8
EGRESS_RULE_REFUSED = 4
EGRESS_TCP_CONNS = 40
# The requests a check sends past a burst before it wants the 429: the buckets refill 1
# token a second, so each count is bounded by the burst plus what the time the check took
# refilled (never a bound on that time), and a check only cannot tell past 10 s.
EGRESS_PAST_BURST = 10
# The alerts' refused_names: a threshold over the names it counts under a domain, which
# fires at that bound (docs/policy.md, alerts).
NAMES_THRESHOLD = 40
NAMES_KEPT = 32


# ---- a raw HTTP/1.1 client ---------------------------------------------------------


class Resp:
    """One response as the client got it; status None when there was none."""

    def __init__(self, status=None, headers=(), body=b"", client=None, secs=0.0, error=None):
        self.status, self.headers, self.body = status, list(headers), body
        self.client, self.secs, self.error = client, secs, error

    def get(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        try:
            doc = json.loads(self.body)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def __repr__(self):
        if self.status is None:
            return "<no answer: %s>" % self.error
        return "<%d %s %r>" % (self.status, self.get("X-Agent-Reason") or "", self.body[:200])


class Conn:
    """One TCP connection to the public listener, read as HTTP/1.1 responses; over TLS
    with the client context <tls> (the handshake done here, SNI <name>), from the
    loopback address <source> when given; with <unix>, to that Unix socket instead."""

    def __init__(self, port, timeout=5.0, tls=None, source=None, name="127.0.0.1", unix=None):
        if unix is not None:  # a sandbox's egress socket (t_egress)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(unix)
            except OSError:
                s.close()
                raise
            self.client = unix
        else:
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                         source_address=(source, 0) if source else None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.client = "%s:%d" % s.getsockname()[:2]
        if tls is not None:
            try:
                s = tls.wrap_socket(s, server_hostname=name)
            except OSError:
                s.close()
                raise
        self.s = s
        self.buf = bytearray()
        self.sent = 0

    def send(self, data):
        self.s.sendall(data)
        self.sent += len(data)

    def fill(self):
        data = self.s.recv(262144)
        if not data:
            return False
        self.buf += data
        return True

    def until(self, mark):
        while mark not in self.buf:
            if not self.fill():
                raise EOFError("closed after %r" % bytes(self.buf[:300]))
        i = self.buf.index(mark) + len(mark)
        out = bytes(self.buf[:i])
        del self.buf[:i]
        return out

    def exact(self, n):
        while len(self.buf) < n:
            if not self.fill():
                raise EOFError("closed %d bytes into a %d-byte body" % (len(self.buf), n))
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def head(self):
        raw = self.until(b"\r\n\r\n").decode("latin-1")
        lines = raw[:-4].split("\r\n")
        first = lines[0].split(" ", 2)
        if len(first) < 2 or not first[0].startswith("HTTP/1.") or not first[1].isdigit():
            raise EOFError("not a status line: %r" % lines[0])
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        return int(first[1]), headers

    def response(self, method="GET"):
        status, headers = self.head()
        r = Resp(status, headers, client=self.client)
        te = (r.get("Transfer-Encoding") or "").lower()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return r
        if "chunked" in te:
            body = bytearray()
            while True:
                size = int(self.until(b"\r\n").split(b";")[0].strip(), 16)
                if size == 0:
                    while self.until(b"\r\n") != b"\r\n":
                        pass
                    break
                body += self.exact(size)
                self.exact(2)
            r.body = bytes(body)
        elif r.get("Content-Length") is not None:
            r.body = self.exact(int(r.get("Content-Length")))
        else:
            while self.fill():
                pass
            r.body, self.buf = bytes(self.buf), bytearray()
        return r

    def closed_within(self, secs):
        """True when the peer closes within <secs> (bytes meanwhile are dropped)."""
        self.s.settimeout(secs)
        try:
            while self.s.recv(65536):
                pass
            return True
        except (socket.timeout, OSError):
            return False

    def close(self):
        self.s.close()


def build(method, target, host, headers=(), body=b"", length=True, version="HTTP/1.1"):
    """A request's bytes: <headers> are (name, value) pairs sent in order."""
    out = ["%s %s %s" % (method, target, version)]
    if host is not None:
        out.append("Host: " + host)
    out += ["%s: %s" % hv for hv in headers]
    if body and length:
        out.append("Content-Length: %d" % len(body))
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body


def refusal(resp, status, reason):
    """The problems of <resp> as the gateway's refusal <status>/<reason>."""
    if resp.status is None:
        return ["no answer (%s), want %d %s" % (resp.error, status, reason)]
    errs = []
    doc = resp.json()
    if resp.status != status or resp.get("X-Agent-Reason") != reason:
        errs.append("%d X-Agent-Reason %r, want %d %s" % (resp.status,
                                                          resp.get("X-Agent-Reason"), status,
                                                          reason))
    if doc is None or doc.get("reason") != reason or doc.get("status") != status:
        errs.append("the body is not JSON with reason %s and status %d: %r" % (reason, status,
                                                                             resp.body[:300]))
    return errs


def header_map(rec):
    """{lower-case name: [values in order]} of a request the agent recorded."""
    out = {}
    for k, v in rec.get("headers", []):
        out.setdefault(k.lower(), []).append(v)
    return out


def forwarding_errs(h, want, addr, proto, host, absent, note=""):
    """The problems of the headers <h> (header_map) an agent got: each of <want> ({name:
    values}) as given, one Forwarded for=<addr>;proto=<proto>;host="<host>" (<note> added
    to its complaint), none of <absent>."""
    errs = []
    for name, values in want.items():
        if h.get(name) != values:
            errs.append("%s: the agent got %r, want %r" % (name, h.get(name), values))
    fwd = h.get("forwarded", [])
    parts = dict(p.strip().split("=", 1) for p in (fwd[0] if fwd else "").split(";")
                 if "=" in p)
    if len(fwd) != 1 or parts.get("for", "").strip('"') != addr or \
            parts.get("proto") != proto or parts.get("host") != '"%s"' % host:
        errs.append("Forwarded: the agent got %r, want for=%s;proto=%s;host=\"%s\"%s" % (
            fwd, addr, proto, host, note))
    for name in absent:
        if name in h:
            errs.append("%s reached the agent: %r" % (name, h[name]))
    return errs


# ---- the client checks (through the gateway, or straight at the fixture) ---------


def sse_check(port, target, host, tls=None):
    """GET an event stream (over TLS with the client context <tls>); the problems, and
    {"client", "arrivals" (seconds after the request, one per event), "down" (bytes
    after the head)}."""
    try:
        c = Conn(port, 10, tls)
    except OSError as e:
        return ["%s: connect: %s: %s" % (target, type(e).__name__, e)], {
            "client": None, "arrivals": [], "down": 0}
    errs, arrivals = [], []
    stats = {"client": c.client, "arrivals": arrivals, "down": 0}
    try:
        t0 = time.monotonic()
        c.send(build("GET", target, host, [("Accept", "text/event-stream")]))
        status, headers = c.head()
        r = Resp(status, headers)
        if status != 200 or "text/event-stream" not in (r.get("Content-Type") or ""):
            return ["%s: head %d %r" % (target, status, headers)], stats
        if r.get("Content-Length") is not None:
            errs.append("%s: a Content-Length (%s): the stream was buffered whole" % (
                target, r.get("Content-Length")))
        chunked = "chunked" in (r.get("Transfer-Encoding") or "").lower()
        raw, times = bytearray(c.buf), [(time.monotonic(), len(c.buf))]
        c.buf = bytearray()
        c.s.settimeout(5)
        while not (chunked and dechunk(raw)[1]):
            try:
                data = c.s.recv(65536)
            except socket.timeout:
                errs.append("%s: no end of the stream 5s after the last read" % target)
                break
            if not data:
                break
            raw += data
            times.append((time.monotonic(), len(raw)))
        for i in range(3):
            mark = b"data: event-%d\n\n" % i
            when = next((t for t, n in times if mark in (dechunk(raw[:n])[0] if chunked
                                                          else raw[:n])), None)
            if when is None:
                errs.append("%s: event %d never arrived: %r" % (target, i, bytes(raw[:400])))
            else:
                arrivals.append(round(when - t0, 3))
        if len(arrivals) == 3:
            gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
            if min(gaps) < SSE_GAP_MIN_S:
                errs.append("%s: events arrived at %r s: not spaced as written (300 ms apart), "
                            "so they were held back" % (target, arrivals))
        stats["down"] = len(raw)
    except (OSError, EOFError) as e:
        errs.append("%s: %s: %s" % (target, type(e).__name__, e))
    finally:
        c.close()
    return errs, stats


def dechunk(raw):
    """(the data of the chunked bytes <raw> so far, whether the last chunk came)."""
    out, i = bytearray(), 0
    while True:
        j = raw.find(b"\r\n", i)
        if j < 0:
            return bytes(out), False
        size = int(bytes(raw[i:j]).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out), raw.find(b"\r\n", j + 2) >= 0
        out += raw[j + 2: j + 2 + size]
        if len(raw) < j + 2 + size + 2:
            return bytes(out), False
        i = j + 2 + size + 2


def ws_plan(seed=20240607, count=WS_MESSAGES):
    """The <count> messages (1,000: 25 over 64 KiB): (opcode, payload, fragments);
    every size class of the length field, one in 40 over 64 KiB, text and binary,
    some fragmented."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if i % 40 == 7:
            n = rng.randint(65537, 300000)
        elif i % 40 == 19:
            n = rng.choice([65535, 65536])
        elif i % 10 == 3:
            n = rng.choice([0, 1, 125, 126, 127, 65535 - 1])
        else:
            n = rng.randint(0, 4000)
        if i % 2:
            payload = base64.b64encode(rng.randbytes(n))[:n]
            opcode = ws.OP_TEXT
        else:
            payload, opcode = rng.randbytes(n), ws.OP_BINARY
        out.append((opcode, payload, 3 if i % 97 == 5 and n >= 3 else 1))
    return out


def ws_frames(opcode, payload, parts):
    """The client frames of one message, each masked with its own key."""
    if parts == 1:
        return ws.encode(opcode, payload, os.urandom(4))
    cut = [len(payload) * k // parts for k in range(parts + 1)]
    return b"".join(ws.encode(opcode if k == 0 else ws.OP_CONT, payload[cut[k]:cut[k + 1]],
                              os.urandom(4), fin=k == parts - 1) for k in range(parts))


def ws_check(port, target, host, tls=None, plan=None, lockstep=WS_LOCKSTEP, window=None):
    """The WebSocket echo: handshake, the messages of <plan> (ws_plan()) in order
    and intact (<lockstep> first, then pipelined both ways at once), pings, the
    close handshake. Over TLS (client context <tls>) the pipelined part runs
    in this thread, at most <window> payload bytes ahead of the echoes: an
    ssl socket is not to be read and written by two threads at once. Returns
    (problems, stats)."""
    key = base64.b64encode(os.urandom(16)).decode()
    try:
        c = Conn(port, 20, tls)
    except OSError as e:
        return ["connect: %s: %s" % (type(e).__name__, e)], {"client": None, "up": 0, "down": 0}
    stats = {"client": c.client, "up": 0, "down": 0}
    try:
        c.send(build("GET", target, host, [("Upgrade", "websocket"), ("Connection", "Upgrade"),
                                           ("Sec-WebSocket-Key", key),
                                           ("Sec-WebSocket-Version", "13")]))
        handshake = c.sent
        status, headers = c.head()
        r = Resp(status, headers)
        if status != 101 or (r.get("Upgrade") or "").lower() != "websocket" or \
                "upgrade" not in (r.get("Connection") or "").lower() or \
                r.get("Sec-WebSocket-Accept") != ws.accept_key(key):
            return ["the handshake: %d %r" % (status, headers)], stats
        initial, c.buf = bytes(c.buf), bytearray()
        down = [len(initial)]  # frame bytes received, the 101 head not counted

        def recv(n):
            data = c.s.recv(n)
            down[0] += len(data)
            return data

        reader = ws.Reader(recv, initial)
        plan = plan or ws_plan()
        errs = []
        t0 = time.monotonic()

        def expect(i, opcode, payload):
            try:
                got_op, got, masked = reader.message()
            except (EOFError, socket.timeout, ws.ProtocolError) as e:
                errs.append("message %d: %s: %s" % (i, type(e).__name__, e))
                return False
            if masked:
                errs.append("message %d: the echo came masked (server frames must not be)" % i)
            if got_op != opcode or got != payload:
                errs.append("message %d (%d bytes, opcode %d): got opcode %d, %d bytes, "
                            "sha256 %s" % (i, len(payload), opcode, got_op, len(got),
                                           hashlib.sha256(got).hexdigest()[:16]))
                return False
            return True

        for i in range(lockstep):
            opcode, payload, parts = plan[i]
            c.send(ws_frames(opcode, payload, parts))
            if not expect(i, opcode, payload):
                return errs, stats
        lockstep_s = time.monotonic() - t0
        sent_err = []

        def windowed():
            ahead, queued = 0, []  # payload bytes sent and not yet echoed; their echoes
            i = lockstep
            while i < len(plan) or queued:
                if i < len(plan) and (not queued or ahead + len(plan[i][1]) <= window):
                    opcode, payload, parts = plan[i]
                    c.send(ws_frames(opcode, payload, parts))
                    queued.append((i, opcode, payload))
                    if i % 100 == 50:
                        c.send(ws.encode(ws.OP_PING, b"ping-%d" % i, os.urandom(4)))
                        queued.append((i, ws.OP_PONG, b"ping-%d" % i))
                    ahead += len(payload)
                    i += 1
                    continue
                j, opcode, payload = queued.pop(0)
                ahead -= len(payload) if opcode != ws.OP_PONG else 0
                if not expect(j, opcode, payload):
                    return

        def writer():
            try:
                for i in range(lockstep, len(plan)):
                    opcode, payload, parts = plan[i]
                    c.send(ws_frames(opcode, payload, parts))
                    if i % 100 == 50:
                        c.send(ws.encode(ws.OP_PING, b"ping-%d" % i, os.urandom(4)))
            except OSError as e:
                sent_err.append("sending: %s" % e)

        if window is not None:
            windowed()
        else:
            th = threading.Thread(target=writer, daemon=True)
            th.start()
            for i in range(lockstep, len(plan)):
                opcode, payload, _parts = plan[i]
                if not expect(i, opcode, payload):
                    break
                if i % 100 == 50 and not expect(i, ws.OP_PONG, b"ping-%d" % i):
                    break
            th.join(30)
        errs += sent_err
        if errs:
            return errs, stats
        c.send(ws.encode(ws.OP_CLOSE, b"\x03\xe8done", os.urandom(4)))
        try:
            op, payload, _ = reader.message()
            if op != ws.OP_CLOSE or payload[:2] != b"\x03\xe8":
                errs.append("the close: opcode %d %r, want a close with 1000" % (op, payload))
        except (EOFError, socket.timeout, ws.ProtocolError) as e:
            errs.append("the close: %s" % e)
        if not errs and not c.closed_within(5):
            errs.append("the connection stayed open 5s after the close handshake")
        stats.update({"secs": round(time.monotonic() - t0, 2), "lockstep_s": round(lockstep_s, 2),
                      "up": c.sent - handshake, "down": down[0],
                      "payload": sum(len(p) for _, p, _ in plan)})
        return errs, stats
    except (OSError, EOFError) as e:
        return ["%s: %s" % (type(e).__name__, e)], stats
    finally:
        c.close()


# ---- the pass ---------------------------------------------------------------------


def enter_netns(path):
    """Moves this process (its calling thread, before any other starts) into the network
    namespace at <path>; threads and children started later follow."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise Fatal("setns %s: %s" % (path, os.strerror(ctypes.get_errno())))
    finally:
        os.close(fd)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(host, port):
    """Whether <host>:<port> is taken in this process's network namespace: a probe
    bound as the daemon binds (SO_REUSEADDR, so a TIME_WAIT leftover does not count),
    closed at once."""
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return False
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return True
        raise Fatal("the probe of %s:%d: %s" % (host, port, e))
    finally:
        s.close()


def tls_pki(d):
    """The operator's certificate, made in <d> with the openssl CLI: an EC P-256
    self-signed CA, a leaf for 127.0.0.1 and TLS_NAME signed by it, the chain file
    (the leaf, then the CA), and the key of no certificate here. Returns their paths."""
    p = {k: os.path.join(d, v) for k, v in (
        ("ca", "ca.pem"), ("ca_key", "ca.key"), ("leaf", "leaf.pem"), ("key", "leaf.key"),
        ("chain", "chain.pem"), ("other_key", "other.key"), ("csr", "leaf.csr"),
        ("ext", "leaf.ext"))}
    run(["openssl", "req", "-x509", *EC_P256, "-keyout", p["ca_key"], "-out", p["ca"],
         "-days", "2", "-subj", "/CN=" + TLS_CA_CN,
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    run(["openssl", "req", *EC_P256, "-keyout", p["key"], "-out", p["csr"],
         "-subj", "/CN=" + TLS_NAME])
    with open(p["ext"], "w", encoding="ascii") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:%s\n"
                "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n" % TLS_NAME)
    run(["openssl", "x509", "-req", "-in", p["csr"], "-CA", p["ca"], "-CAkey", p["ca_key"],
         "-CAcreateserial", "-out", p["leaf"], "-days", "2", "-extfile", p["ext"]])
    run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", p["other_key"]])
    with open(p["chain"], "w", encoding="ascii") as f:
        f.write(read_text(p["leaf"]) + read_text(p["ca"]))
    return p


def pem_ders(text):
    """The DER of every PEM certificate in <text>, in order."""
    return [ssl.PEM_cert_to_DER_cert(b) for b in re.findall(
        r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", text, re.S)]


def tls_client(ca, alpn=None, check_hostname=True):
    """A client context that trusts only <ca> (TLS 1.2 and up, names checked)."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = check_hostname
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


class Tests(Pass):
    def __init__(self, args):
        super().__init__(args)
        self.agents = {}  # role -> Agent
        self.sid = {}  # role -> sandbox id
        self.info = {}  # role -> what the agent printed first (its environment)
        self.wants = []  # (client, {field: value}) per public request: the audit's records
        self.port = None
        self.daemon_err = None
        self.tls = None  # the client context of the TLS listener when the checks go to it
        self.bare = set()  # clients that made no request (TLS only): 0 or 1 record each

    # ---- requests -----------------------------------------------------------

    def target(self, role, rest=""):
        return "%s/%s%s" % (PREFIX, self.sid.get(role, role), rest)

    def host(self, port=None):
        return "127.0.0.1:%d" % (port or self.port)

    def send(self, raw, method="GET", want=None, timeout=5, port=None, source=None):
        """<raw> on a new connection (over TLS when self.tls is set, from <source> when
        given); its answer. <want>: what its audit record must say (status always: what
        came back)."""
        t0 = time.monotonic()
        try:
            c = Conn(port or self.port, timeout, self.tls, source)
        except OSError as e:
            return Resp(error="connect: %s" % e)
        try:
            c.send(raw)
            r = c.response(method)
        except (OSError, EOFError, ValueError) as e:
            r = Resp(client=c.client, error="%s: %s" % (type(e).__name__, e))
        finally:
            c.close()
        r.secs = time.monotonic() - t0
        self.want(r, want)
        return r

    def want(self, r, want):
        """Notes what the audit record of the request answered by <r> must say: <want>,
        and the status and reason the client got. A head refused before it was parsed
        has no method, path or sandbox to record; a 404 no sandbox."""
        if r.client is None:
            return
        w = dict(want or {})
        reason = r.get("X-Agent-Reason")
        if reason in UNPARSED:
            w = {}
        if reason == "ingress_not_found":
            w.pop("sandbox", None)
        if reason is not None:
            w["reason"] = reason
        if r.status is not None:
            w["status"] = r.status
        self.wants.append((r.client, w))

    def req(self, role, rest, method="GET", headers=(), body=b"", **kw):
        target = self.target(role, rest)
        w = {"method": method, "path": target}
        if role in self.sid:
            w["sandbox"] = self.sid[role]
        return self.send(build(method, target, self.host(), headers, body), method, w, **kw)

    def seen(self, role):
        """Every request the agent of <role> recorded, in order."""
        out = []
        for line in read_text(os.path.join(self.vars["sync"], role + ".log")).splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"unparsed": line})
        return out

    def seen_paths(self, role):
        return [r.get("path") for r in self.seen(role)]

    def seen_upgrades(self, role, before):
        """The GET /ws requests the agent of <role> recorded after its first <before>, and
        the headers of the first (header_map; {} for none)."""
        got = [r for r in self.seen(role)[before:] if r.get("path") == "/ws"]
        return got, header_map(got[0]) if got else {}

    def want_stream(self, role, target, status, stats):
        """Notes what the audit record of the stream to <target> (in <role>'s sandbox) must
        say: <status>, and at least the bytes sse_check or ws_check counted (<stats>: "down",
        and "up" when it counts it)."""
        w = {"sandbox": self.sid[role], "method": "GET", "path": target, "status": status}
        if "up" in stats:
            w["bytes_up"] = {"min": stats["up"]}
        w["bytes_down"] = {"min": stats["down"]}
        self.wants.append((stats["client"], w))

    # ---- agents ---------------------------------------------------------------

    def start_agent(self, role, cmd, ready, profile=None):
        sid = self.sandbox_id(role)
        self.sid[role] = sid
        run_args = ["--profile", profile] if profile else []
        a = self.start(cmd, sandbox=sid, run_args=run_args)
        self.agents[role] = a
        return a, ready

    def agent_cmd(self, role, once=0, go=None):
        """agent.py logging to sync/<role>.log; with <once>, it serves that many requests,
        then (with <go>) the sandbox lives on without a server until <go> exists."""
        log_path = os.path.join(self.vars["sync"], role + ".log")
        if go is None:
            return ["python3", "-u", self.vars["agent_py"], "--log", log_path] + (
                ["--once", str(once)] if once else [])
        return ["sh", "-c", 'python3 -u "$0" --log "$1" --once %d; echo server-exited; %s'
                % (once, WAIT_SH % go), self.vars["agent_py"], log_path]

    def start_agents(self):
        """Every sandbox of the pass at once; returns when each one's server listens."""
        www = self.vars["www"]
        self.vars["once_go"] = os.path.join(self.vars["sync"], "go-once")
        pending = [
            self.start_agent("static", ["sh", "-c", STATIC_SH, www], "Serving HTTP"),
            self.start_agent("a", self.agent_cmd("a"), "listening"),
            self.start_agent("b", self.agent_cmd("b"), "listening"),
            self.start_agent("lim", self.agent_cmd("lim"), "listening", profile="limited"),
            self.start_agent("cap", self.agent_cmd("cap"), "listening", profile="capped"),
            self.start_agent("cap2", self.agent_cmd("cap2"), "listening", profile="capped"),
            self.start_agent("open", self.agent_cmd("open"), "listening", profile="open"),
            self.start_agent("tok", self.agent_cmd("tok"), "listening", profile="tokened"),
            self.start_agent("once", self.agent_cmd("once", 1, self.vars["once_go"]),
                             "listening"),
        ]
        self.wait_agents(pending)
        for role, profile in (("parked", "default"), ("closed", "closed")):
            sid = self.sandbox_id(role)
            self.sid[role] = sid
            got = self.ctl("sandbox add %s %s" % (sid, profile))
            if not got or not got[0].startswith("ok "):
                raise Fatal("sandbox add %s %s: %r" % (sid, profile, got))
            self.ids.add(sid)

    def wait_agents(self, pending):
        """Waits for each (agent, ready) of <pending> to print <ready>; what each printed
        first (its environment, as JSON) into self.info."""
        for a, ready in pending:
            a.wait_out(ready)
            first = a.stdout().splitlines()[0]
            try:
                self.info[a.sandbox] = json.loads(first)
            except ValueError:
                raise Fatal("%s printed %r first, not its environment" % (a.sandbox, first))

    def stop_agent(self, role):
        """Ends the run of <role>: the once-agent's by its go file (its server has exited),
        every other one (and the once-agent whose server still runs) by SIGTERM."""
        a = self.agents.pop(role)
        if role == "once":
            touch(self.vars["once_go"])
        if a.proc.poll() is None and (role != "once" or "server-exited" not in a.stdout()):
            a.proc.send_signal(signal.SIGTERM)
        return a.finish(20)

    # ---- the daemon -----------------------------------------------------------

    def start_daemon(self, policy, extra=(), err_path=None):
        """agentsnetd --config <policy> <extra> in the upstream namespace, stderr appended
        to daemon.stderr (the pass's daemon, self.daemon) or <err_path> (another one);
        returns once it printed "agentsnetd: ready"."""
        p = start_daemon(self.procs, self.args.upns, self.args.daemon, policy,
                         err_path or self.daemon_err, args=extra)
        if err_path is None:
            self.daemon = p
        return p

    def stop_daemon(self):
        errs = stop_daemon(self.daemon, self.daemon_err)
        self.daemon = None
        return errs

    def render_policy(self, name, port, more="", **over):
        path = os.path.join(self.tmp, name)
        render_file(os.path.join(FIXTURES, "policy.yaml.in"), path,
                    dict(self.vars, port=port, ingress_more=more, **over))
        return path

    # ---- the tests ------------------------------------------------------------

    def timed(self, name, fn):
        t0 = time.monotonic()
        errs = check_errs(fn)
        self.result("%s (%.1fs)" % (name, time.monotonic() - t0), errs)

    def t_static(self):
        """Done when 1: python3 -m http.server in a sandbox answers curl on the host at
        the public URL the sandbox was given; the body is the file."""
        def static():
            sid = self.sid["static"]
            info = self.info[sid]
            url = info.get("public_url") or ""
            errs = []
            want_url = "http://%s%s/%s" % (self.host(), PREFIX, sid)
            if url != want_url:
                errs.append("AGENT_PUBLIC_URL inside is %r, want %r (public_url defaults to "
                            "http://<listen>)" % (url, want_url))
            if info.get("ingress_port") != "8081":
                errs.append("AGENT_INGRESS_PORT inside is %r, want 8081" % info.get(
                    "ingress_port"))
            if not url.startswith("http://"):
                return errs
            out = os.path.join(self.tmp, "curl-static.out")
            for rest, want_code, check in (("/blob.bin", 200, "file"), ("", 200, "listing"),
                                           ("/", 200, "listing"), ("/missing.txt", 404, "agent")):
                hdr = os.path.join(self.tmp, "curl-static.hdr")
                p = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", out, "-D", hdr,
                                    "-w", "%{http_code} %{local_ip}:%{local_port}", url + rest],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                                   check=False, env={"PATH": os.environ["PATH"]})
                code, _, client = p.stdout.decode().partition(" ")
                if p.returncode != 0 or code != str(want_code):
                    errs.append("curl %s: exit %d, HTTP %s, want %d: %s" % (
                        url + rest, p.returncode, code, want_code, p.stderr.decode()[-500:]))
                    continue
                with open(out, "rb") as f:
                    body = f.read()
                self.wants.append((client, {"sandbox": sid, "method": "GET",
                                            "path": "%s/%s%s" % (PREFIX, sid, rest),
                                            "status": want_code}))
                if check == "file" and hashlib.sha256(body).hexdigest() != self.vars[
                        "static_sha256"]:
                    errs.append("curl %s: %d bytes, sha256 %s; the file has %d bytes, %s" % (
                        url + rest, len(body), hashlib.sha256(body).hexdigest(), STATIC_BYTES,
                        self.vars["static_sha256"]))
                if check == "listing" and b"blob.bin" not in body:
                    errs.append("curl %s: not the directory listing of / (the agent got "
                                "another path): %r" % (url + rest, body[:300]))
                if check == "agent" and "x-agent-reason" in read_text(hdr).lower():
                    errs.append("curl %s: the agent's own 404 came with an X-Agent-Reason: %r"
                                % (url + rest, read_text(hdr)))
            return errs

        self.timed("python3 -m http.server in a sandbox answers curl at its AGENT_PUBLIC_URL; "
                   "the body is the file (%d bytes); <prefix>/<id> alone is /" % STATIC_BYTES,
                   static)

    def t_headers(self):
        """Done when 2: the agent sees the gateway's forwarding headers, never a forged
        one, a stripped one or a hop-by-hop one; Host as sent; the path under its id."""
        def headers():
            host = "Hooks.Example.test:8443"
            sent = [("x-forwarded-for", FORGED), ("X-FORWARDED-HOST", "evil.test"),
                    ("X-Forwarded-Proto", "https"), ("X-Forwarded-Prefix", "/evil"),
                    ("X-Forwarded-Port", "1"), ("forwarded", "for=%s;host=evil.test" % FORGED),
                    ("X-Real-IP", FORGED), ("X-Internal-Token", "hunter2"),
                    ("X-SECOND-SECRET", "hunter3"), ("Connection", "keep-alive, X-Hop-Listed"),
                    ("X-Hop-Listed", "hop-value"), ("Keep-Alive", "timeout=5"),
                    ("TE", "trailers"), ("Trailer", "X-Trailing"),
                    ("Proxy-Authorization", "Basic aHVudGVyNDo="),
                    ("Proxy-Connection", "keep-alive"), ("Proxy-Foo", "proxy-value"),
                    ("Upgrade", "h2c"), ("X-Custom", "kept-1"), ("User-Agent", "ingress-pass"),
                    ("X-Custom", "kept-2")]
            target = self.target("a", "/echo/x?q=1&r=%2F..%2F")
            r = self.send(build("GET", target, host, sent), "GET",
                          {"sandbox": self.sid["a"], "method": "GET", "path": target})
            rec = r.json()
            if r.status != 200 or rec is None or "headers" not in rec:
                return ["the echo: %r" % r]
            h = header_map(rec)
            errs = []
            if rec.get("path") != "/echo/x?q=1&r=%2F..%2F":
                errs.append("the agent got path %r, want /echo/x?q=1&r=%%2F..%%2F (the query "
                            "as sent)" % rec.get("path"))
            want = {"host": [host], "x-forwarded-for": ["127.0.0.1"],
                    "x-forwarded-proto": ["http"], "x-forwarded-host": [host],
                    "x-forwarded-prefix": [self.target("a")], "x-custom": ["kept-1", "kept-2"],
                    "user-agent": ["ingress-pass"]}
            errs += forwarding_errs(h, want, "127.0.0.1", "http", host, (
                "x-real-ip", "x-internal-token", "x-second-secret", "x-hop-listed",
                "keep-alive", "te", "trailer", "proxy-authorization", "proxy-connection",
                "proxy-foo", "upgrade", "x-forwarded-port"), " (quoted: it has a port)")
            if "x-hop-listed" in " ".join(h.get("connection", [])).lower():
                errs.append("Connection still lists X-Hop-Listed: %r" % h["connection"])
            for bad in (FORGED, "evil", "hunter", "hop-value", "proxy-value", "aHVudGVyNDo"):
                leaked = [(k, v) for k, v in rec["headers"] if bad in v]
                if leaked:
                    errs.append("a value the client forged or the gateway strips reached the "
                                "agent: %r" % leaked)
            if r.get("X-Agent-Reason") is not None:
                errs.append("the agent's answer came with X-Agent-Reason %r" % r.get(
                    "X-Agent-Reason"))
            return errs

        self.timed("the agent sees X-Forwarded-For/-Proto/-Host/-Prefix and Forwarded from the "
                   "gateway; forged ones, strip_headers, Connection-listed and hop-by-hop "
                   "headers never; Host and the query as sent", headers)

    def t_body_limit(self):
        """Done when 3: a Content-Length over body_bytes is answered 413 before the agent
        sees a byte; exactly body_bytes goes through."""
        def body_limit():
            errs = []
            body = bytes(range(256)) * (BODY_BYTES // 256)
            r = self.req("a", "/body-at-limit", "POST", [("Content-Type", "application/x")],
                         body)
            rec = r.json() or {}
            if r.status != 200 or rec.get("body_len") != BODY_BYTES or \
                    rec.get("body_sha256") != hashlib.sha256(body).hexdigest():
                errs.append("a body of exactly body_bytes (%d): %r, want 200 and the agent "
                            "gets it whole" % (BODY_BYTES, r))
            before = len(self.seen("a"))
            for rest, n in (("/body-over-limit", BODY_BYTES + 1), ("/body-huge", 10 ** 12)):
                target = self.target("a", rest)
                # The head alone: the answer must not wait for a body.
                r = self.send(build("POST", target, self.host(),
                                    [("Content-Length", str(n))]), "POST",
                              {"sandbox": self.sid["a"], "method": "POST", "path": target},
                              timeout=5)
                errs += ["Content-Length %d: %s" % (n, e)
                         for e in refusal(r, 413, "body_too_large")]
            target = self.target("a", "/body-over-sent")
            r = self.send(build("POST", target, self.host(), body=body + b"x"), "POST",
                          {"sandbox": self.sid["a"], "method": "POST", "path": target})
            errs += ["%d bytes sent with the head: %s" % (BODY_BYTES + 1, e)
                     for e in refusal(r, 413, "body_too_large")]
            time.sleep(0.3)
            got = self.seen("a")[before:]
            if got:
                errs.append("the agent saw requests over the limit: %r" % [
                    (g.get("method"), g.get("path"), g.get("body_len")) for g in got])
            # Chunked, the cap counted as it streams: the head has gone to the agent, the
            # body is cut at the cap, the client answered 413 at once (not a silent close),
            # and the agent never gets the request whole.
            target = self.target("a", "/body-over-chunked")
            chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) + 1, body + b"x")
            r = self.send(build("POST", target, self.host(), [("Transfer-Encoding", "chunked")],
                                body=chunked, length=False), "POST",
                          {"sandbox": self.sid["a"], "method": "POST", "path": target})
            errs += ["a chunked body of %d bytes: %s" % (BODY_BYTES + 1, e)
                     for e in refusal(r, 413, "body_too_large")]
            time.sleep(0.3)
            whole = [g for g in self.seen("a")[before:] if g.get("body_len") == BODY_BYTES + 1]
            if whole:
                errs.append("the agent got the chunked body over the limit whole: %r" % whole)
            return errs

        self.timed("a Content-Length over body_bytes (%d+1, 10^12, sent or not): 413 "
                   "body_too_large and the agent saw no request; exactly %d reaches it; a "
                   "chunked body over it: 413 at once, never whole at the agent"
                   % (BODY_BYTES, BODY_BYTES), body_limit)

    def t_escape(self):
        """Done when 4: traversal shapes aimed at B sent under A's prefix never reach B
        (nor A); a plain request to B then does."""
        def escape():
            a, b = self.sid["a"], self.sid["b"]
            # Under A's own id: 400 path_not_allowed (core/ingress.h).
            under_a = ["/../%s/secret", "/%%2e%%2e/%s/secret", "/%%2E%%2E/%s/secret",
                       "/.%%2e/%s/secret", "/%%2e./%s/secret", "/./../%s/secret",
                       "/..%%2f%s/secret", "/..%%2F%s/secret", "/%%2e%%2e%%2f%s/secret",
                       "/..%%5c%s/secret", "/..%%5C%s/secret", "//../%s/secret",
                       "/%%252e%%252e/%s/secret", "/..%%252f%s/secret",
                       "/../../callbacks/%s/secret", "/x/../../%s/secret",
                       "/%%2e%%2e%%2f%%2e%%2e%%2fcallbacks%%2f%s%%2fsecret", "/%%00/../%s/secret",
                       "/..%%00/%s/secret", "/%%zz/../%s/secret"]
            # The same, where the HTTP parser may refuse first: 400 either way.
            raw_a = ["/..\\%s/secret", "/..#/%s/secret", "/.. /%s/secret"]
            # Not A's id at all: 404 ingress_not_found, or 400.
            other = ["%s/%s%%2f..%%2f%s/secret" % (PREFIX, a, b),
                     "%s/%s%%2F..%%2F%s/secret" % (PREFIX, a, b),
                     "%s/%s%%5c..%%5c%s/secret" % (PREFIX, a, b),
                     "%s/../callbacks/%s/secret" % (PREFIX, b),
                     "%s/%%2e%%2e/callbacks/%s/secret" % (PREFIX, b),
                     "%s/./%s/secret" % (PREFIX, b), "%s//%s/secret" % (PREFIX, b)]
            strict = [("%s/%s" % (PREFIX, a)) + t % b for t in under_a]
            loose = [("%s/%s" % (PREFIX, a)) + t % b for t in raw_a]
            errs = []
            before_a = len(self.seen("a"))
            for t in strict + loose + other:
                r = self.send(build("GET", t, self.host()), "GET", {"path": t})
                if t in strict:
                    bad = refusal(r, 400, "path_not_allowed")
                elif r.status == 404 and t in other:
                    bad = refusal(r, 404, "ingress_not_found")
                else:
                    reason = r.get("X-Agent-Reason")
                    bad = [] if reason in ("path_not_allowed", "bad_request") and not refusal(
                        r, 400, reason) else ["%r, want 400 path_not_allowed or bad_request%s"
                                              % (r, " or 404 ingress_not_found"
                                                 if t in other else "")]
                errs += ["%s: %s" % (t, e) for e in bad]
            abs_form = "http://%s%s/%s/../%s/secret" % (self.host(), PREFIX, a, b)
            r = self.send(build("GET", abs_form, self.host()), "GET", {})
            if r.status not in (400, 404):
                errs.append("absolute-form %s: %r, want 400 or 404" % (abs_form, r))
            time.sleep(0.3)
            if self.seen("b"):
                errs.append("B's server got requests: %r" % self.seen_paths("b"))
            if self.seen("a")[before_a:]:
                errs.append("A's server got them: %r" % self.seen_paths("a")[before_a:])
            r = self.req("b", "/secret")
            rec = r.json() or {}
            if r.status != 200 or rec.get("path") != "/secret" or \
                    self.seen_paths("b") != ["/secret"]:
                errs.append("the control, a plain GET %s: %r; B recorded %r, want exactly "
                            "/secret" % (self.target("b", "/secret"), r, self.seen_paths("b")))
            return errs

        self.timed("path escapes toward sandbox B under A's prefix (../, %2e%2e, %2f, %5c, "
                   "%25, //, NUL, id%2f..): 400 path_not_allowed or 404, B's and A's servers "
                   "saw none; a plain request to B arrives", escape)

    def t_escape_forms(self):
        """Issue 18 item 5: the readings of '.', '/' and '\\' a plain decoder does not
        see (path parameters, overlong and invalid UTF-8, NFKC folds) toward B under A's
        prefix: 400 path_not_allowed, no agent saw them; valid UTF-8 and parameters on
        other names reach A as sent."""
        def forms():
            a, b = self.sid["a"], self.sid["b"]
            shapes = ["/..;/%s/secret", "/..;x=1/%s/secret", "/.;/..;/%s/secret",
                      "/%%2e%%2e;/%s/secret", "/..%%3b/%s/secret", "/;/..;/%s/secret",
                      "/%%c0%%ae%%c0%%ae/%s/secret", "/%%C0%%AE%%C0%%AE/%s/secret",
                      "/..%%c0%%af%s/secret", "/..%%c1%%9c%s/secret",
                      "/%%e0%%80%%ae%%e0%%80%%ae/%s/secret", "/..%%e0%%80%%af%s/secret",
                      "/%%f0%%80%%80%%ae%%f0%%80%%80%%ae/%s/secret", "/..%%f0%%80%%80%%af%s/secret",
                      "/..%%c0/%s/secret", "/x%%80/%s/secret", "/x%%ed%%a0%%80/%s/secret",
                      "/%%ef%%bc%%8e%%ef%%bc%%8e/%s/secret", "/..%%ef%%bc%%8f%s/secret",
                      "/..%%ef%%bc%%bc%s/secret", "/%%e2%%80%%a5/%s/secret"]
            targets = ["%s/%s%s" % (PREFIX, a, t % b) for t in shapes]
            errs = []
            before_a, before_b = len(self.seen("a")), len(self.seen("b"))
            for t in targets:
                r = self.send(build("GET", t, self.host()), "GET", {"method": "GET", "path": t})
                errs += ["%s: %s" % (t, e) for e in refusal(r, 400, "path_not_allowed")]
            time.sleep(0.3)
            if self.seen("b")[before_b:] or self.seen("a")[before_a:]:
                errs.append("the agents got them: A %r, B %r" % (
                    self.seen_paths("a")[before_a:], self.seen_paths("b")[before_b:]))
            for rest in ("/caf%c3%a9/%f0%9f%98%80", "/x;y=1/z;..", "/;jsessionid=1"):
                r = self.req("a", rest)
                if r.status != 200 or (r.json() or {}).get("path") != rest:
                    errs.append("the control %s: %r, want 200 and the agent gets it as sent"
                                % (rest, r))
            return errs

        self.timed("path escapes toward B under A's prefix that only some servers read as "
                   "such (..;, .;, %3b, overlong %c0%ae %e0%80%af %f0%80%80%af %c1%9c, "
                   "invalid UTF-8, fullwidth dots and slashes): 400 path_not_allowed, no agent "
                   "saw them; valid UTF-8 and ;params elsewhere reach the agent", forms)

    def t_isolation(self):
        """Issue 18 item 5: on the path form, where every sandbox shares one origin, an
        agent's answer cannot act beyond its sandbox in a browser: a CSP sandbox field on
        every final answer, no Set-Cookie out of its path or with a Domain, no field that
        acts on the whole origin, in a 101 too; a profile with the keys off gets it all."""
        def csp():
            errs = []
            for fields, want_theirs in (([("Content-Type", "text/html")], []),
                                        ([("Content-Type", "image/svg+xml")], []),
                                        ([], []),
                                        ([("Content-Type", "text/html"),
                                          ("Content-Security-Policy", "default-src 'self'")],
                                         ["default-src 'self'"])):
                r = self.answer("a", fields)
                got = r.all("Content-Security-Policy")
                if r.status != 200 or got != want_theirs + ["sandbox"]:
                    errs.append("an answer with %r: %r, Content-Security-Policy %r, want %r"
                                % (fields, r, got, want_theirs + ["sandbox"]))
            r = self.answer("open", [("Content-Type", "text/html")])
            if r.status != 200 or r.all("Content-Security-Policy"):
                errs.append("csp_sandbox: false: %r with %r, want 200 and none" % (
                    r, r.all("Content-Security-Policy")))
            return errs

        def cookies():
            a, b = self.sid["a"], self.sid["b"]
            sent = [("k-own", "Path=%s/%s" % (PREFIX, a)),
                    ("k-below", "Path=%s/%s/x" % (PREFIX, a)),
                    ("k-default", "HttpOnly"), ("k-root", "Path=/"),
                    ("k-prefix", "Path=%s" % PREFIX), ("k-other", "Path=%s/%s" % (PREFIX, b)),
                    ("k-shorter", "Path=%s/%s" % (PREFIX, a[:-1])),
                    ("k-domain", "Path=%s/%s; Domain=127.0.0.1" % (PREFIX, a)),
                    ("k-both", "Path=%s/%s; Path=/" % (PREFIX, a)),
                    ("k-dots", "Path=%s/%s/../%s" % (PREFIX, a, b))]
            fields = [("Set-Cookie", "%s=1; %s" % kv) for kv in sent]
            errs = []
            for role, want in (("a", ["k-own", "k-below", "k-default"]),
                               ("open", [k for k, _ in sent])):
                r = self.answer(role, fields)
                got = [c.split("=", 1)[0] for c in r.all("Set-Cookie")]
                if r.status != 200 or got != want:
                    errs.append("%s: %r, cookies %r, want %r" % (role, r, got, want))
            return errs

        def origin_fields():
            fields = [("Clear-Site-Data", '"cookies", "storage"'),
                      ("Strict-Transport-Security", "max-age=63072000; includeSubDomains"),
                      ("Service-Worker-Allowed", "/"), ("Alt-Svc", 'h2="evil.test:443"'),
                      ("NEL", '{"report_to":"g","max_age":86400}'),
                      ("Report-To", '{"group":"g","max_age":86400,"endpoints":[]}'),
                      ("X-Kept", "1")]
            errs = []
            for role, want in (("a", ["x-kept"]), ("open", [k.lower() for k, _ in fields])):
                r = self.answer(role, fields)
                names = [k.lower() for k, _ in fields]
                got = [k.lower() for k, _ in r.headers if k.lower() in names]
                if r.status != 200 or got != want:
                    errs.append("%s: %r, fields %r, want %r" % (role, r, got, want))
            return errs

        def upgrade():
            """A 101 with a cookie for the whole origin: dropped; the tunnel still echoes."""
            errs = []
            target = self.target("a", "/ws?" + urllib.parse.urlencode(
                [("h", "Set-Cookie: ws=1; Path=/"), ("h", "X-Kept: 1")]))
            c = Conn(self.port)
            try:
                key = base64.b64encode(os.urandom(16)).decode()
                c.send(build("GET", target, self.host(), [
                    ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                    ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Version", "13")]))
                status, headers = c.head()
                r = Resp(status, headers, client=c.client)
                if status != 101 or r.get("Sec-WebSocket-Accept") != ws.accept_key(key):
                    return ["the handshake: %d %r" % (status, headers)]
                if r.all("Set-Cookie") or r.get("X-Kept") != "1":
                    errs.append("the 101 came with Set-Cookie %r, X-Kept %r; want none, 1" % (
                        r.all("Set-Cookie"), r.get("X-Kept")))
                c.send(ws.encode(ws.OP_TEXT, b"after the 101", os.urandom(4)))
                reader = ws.Reader(c.s.recv, bytes(c.buf))
                op, payload, _ = reader.message()
                if op != ws.OP_TEXT or payload != b"after the 101":
                    errs.append("the echo after the rewritten 101: %d %r" % (op, payload))
                c.send(ws.encode(ws.OP_CLOSE, b"\x03\xe8", os.urandom(4)))
                reader.message()
            except (OSError, EOFError, ws.ProtocolError) as e:
                errs.append("%s: %s" % (type(e).__name__, e))
            finally:
                c.close()
            self.wants.append((c.client, {"sandbox": self.sid["a"], "path": target,
                                          "status": 101}))
            return errs

        self.timed("path form: Content-Security-Policy: sandbox on every answer (HTML, SVG, no "
                   "Content-Type), beside the agent's own; none with csp_sandbox: false", csp)
        self.timed("path form: Set-Cookie whose Path (or default path) leaves /callbacks/<id>, "
                   "that has a Domain or a second Path outside, or ../ in it: dropped; inside: "
                   "kept; scope_cookies: false keeps all", cookies)
        self.timed("path form: Clear-Site-Data, Strict-Transport-Security, "
                   "Service-Worker-Allowed, Alt-Svc, NEL, Report-To dropped, other fields kept; "
                   "drop_origin_fields: false keeps them", origin_fields)
        self.timed("path form: a WebSocket 101 with Set-Cookie Path=/ reaches the client "
                   "without it, and the tunnel works", upgrade)

    def t_token(self):
        """Issue 18 item 5: a sandbox on a profile with ingress.token: required is reached
        only with its token, in the agentsnet_token parameter or the Agentsnet-Token
        field, which never reach the agent nor the audit; without it, the very answer an
        unknown id gets."""
        def url_token():
            url = self.info[self.sid["tok"]].get("public_url") or ""
            m = re.fullmatch(r"http://%s%s/%s\?agentsnet_token=([A-Za-z0-9_-]{43})" % (
                re.escape(self.host()), PREFIX, re.escape(self.sid["tok"])), url)
            if m is None:
                return None, ["AGENT_PUBLIC_URL is %r, want http://%s%s/%s?agentsnet_token="
                              "<43 of base64url>" % (url, self.host(), PREFIX, self.sid["tok"])]
            return m.group(1), []

        def refused():
            token, errs = url_token()
            if token is None:
                return errs
            tok = self.sid["tok"]
            wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
            unknown = self.send(build("GET", "%s/it-no-such-sandbox/x" % PREFIX, self.host()))
            errs += ["an unknown id: %s" % e for e in refusal(unknown, 404, "ingress_not_found")]
            before = len(self.seen("tok"))
            for label, rest, fields in (
                    ("no token", "/x", []),
                    ("an empty one", "/x?agentsnet_token=", []),
                    ("a wrong one", "/x?agentsnet_token=" + wrong, []),
                    ("its prefix", "/x?agentsnet_token=" + token[:-1], []),
                    ("another parameter name", "/x?agentsnet_tokens=" + wrong, []),
                    ("a wrong field", "/x", [("Agentsnet-Token", wrong)]),
                    ("the right one and a wrong field", "/x?agentsnet_token=" + token,
                     [("Agentsnet-Token", wrong)]),
                    ("a wrong one beside the right one",
                     "/x?agentsnet_token=%s&agentsnet_token=%s" % (wrong, token), []),
                    ("a POST with a body", "/x", [("Content-Length", "3")])):
                target = self.target("tok", rest)
                body = b"abc" if label.startswith("a POST") else b""
                r = self.send(build("POST" if body else "GET", target, self.host(), fields,
                                    body, length=False),
                              "POST" if body else "GET")
                self.wants[-1] = (r.client, {"sandbox": tok, "path": target,
                                             "reason": "ingress_token_refused",
                                             "status": 404})
                bad = refusal(r, 404, "ingress_not_found")
                mine, theirs = r.json() or {}, unknown.json() or {}
                for key in ("instruction", "sandbox", "rule", "port", "status", "reason"):
                    if mine.get(key) != theirs.get(key):
                        bad.append("%s %r, an unknown id's %r" % (key, mine.get(key),
                                                                  theirs.get(key)))
                if sorted(k.lower() for k, _ in r.headers) != sorted(
                        k.lower() for k, _ in unknown.headers):
                    bad.append("header names %r, an unknown id's %r" % (
                        [k for k, _ in r.headers], [k for k, _ in unknown.headers]))
                errs += ["%s: %s" % (label, e) for e in bad]
            time.sleep(0.2)
            if self.seen("tok")[before:]:
                errs.append("the agent got %r" % self.seen_paths("tok")[before:])
            return errs

        def carried():
            token, errs = url_token()
            if token is None:
                return errs
            before = len(self.seen("tok"))
            cases = [("/q?a=1&agentsnet_token=%s&b=2" % token, [], "/q?a=1&b=2"),
                     ("/q?agentsnet_token=%s" % token, [], "/q"),
                     ("/f?z=9", [("Agentsnet-Token", token)], "/f?z=9"),
                     ("/both?agentsnet_token=%s" % token, [("Agentsnet-Token", token)],
                      "/both")]
            for rest, fields, path in cases:
                target = self.target("tok", rest)
                r = self.send(build("GET", target, self.host(), fields), "GET",
                              {"sandbox": self.sid["tok"], "path": target, "status": 200})
                rec = r.json() or {}
                if r.status != 200 or rec.get("path") != path:
                    errs.append("%s with %r: %r, want 200 and the agent gets %s" % (
                        rest, fields, r, path))
                if "agentsnet-token" in header_map(rec):
                    errs.append("%s: the agent got Agentsnet-Token" % rest)
            # A sandbox that needs none: the parameter and the field are taken away too.
            target = self.target("a", "/t?agentsnet_token=x&k=v")
            r = self.send(build("GET", target, self.host(), [("Agentsnet-Token", "y")]), "GET",
                          {"sandbox": self.sid["a"], "path": target})
            rec = r.json() or {}
            if r.status != 200 or rec.get("path") != "/t?k=v" or \
                    "agentsnet-token" in header_map(rec):
                errs.append("sandbox A (no token needed) with one: %r, the agent got %r %r" % (
                    r, rec.get("path"), header_map(rec).get("agentsnet-token")))
            got = [g.get("path") for g in self.seen("tok")[before:]]
            if got != [c[2] for c in cases]:
                errs.append("the agent recorded %r" % got)
            wait_for(lambda: token in read_text(self.vars["audit"]) or
                     len(read_audit(self.vars["audit"])[0]) > 0, AUDIT_WAIT_S, "audit records")
            time.sleep(0.5)
            if token in read_text(self.vars["audit"]):
                errs.append("the token is in the audit file")
            return errs

        def kept():
            """A second daemon: a run-time sandbox on the profile keeps its token through a
            restart (the registry has it, 0600), and the gateway takes it."""
            sock_dir = "/run/%s-token" % self.args.netns
            port = free_port()
            saved = dict(self.vars)
            self.vars.update({"sock_dir": sock_dir,
                              "control": os.path.join(sock_dir, "control.sock"),
                              "audit": os.path.join(self.tmp, "audit-token.jsonl")})
            err_path = os.path.join(self.tmp, "daemon-token.stderr")
            policy = self.render_policy("policy-token.yaml", port)
            sid = self.sandbox_id("tok-kept")
            errs, urls, d = [], [], None
            try:
                for run in (1, 2):
                    d = self.start_daemon(policy, err_path=err_path)
                    if run == 1:
                        got = self.ctl("sandbox add %s tokened" % sid)
                        if not got or not got[0].startswith("ok "):
                            return ["sandbox add: %r" % got]
                    urls.append((self.ctl("sandbox url %s" % sid) or [""])[0])
                    record = os.path.join(sock_dir, "registry", sid)
                    mode = os.stat(record).st_mode & 0o777
                    if mode != 0o600:
                        errs.append("run %d: the registry record is %o, want 600" % (run, mode))
                    m = re.search(r"agentsnet_token=(\S+)$", urls[-1])
                    token = m.group(1) if m else "none"
                    host = "127.0.0.1:%d" % port
                    for want, rest in ((502, "/x?agentsnet_token=" + token), (404, "/x")):
                        r = self.send(build("GET", "%s/%s%s" % (PREFIX, sid, rest), host),
                                      port=port)
                        self.wants.pop()  # another daemon's audit
                        if r.status != want:
                            errs.append("run %d, %s: %r, want %d" % (run, rest[:20], r, want))
                    errs += ["run %d: stop: %s" % (run, e) for e in stop_daemon(d, err_path)]
                    d = None
                if len(set(urls)) != 1 or "agentsnet_token=" not in urls[0]:
                    errs.append("sandbox url before and after the restart: %r, want one URL "
                                "with a token" % urls)
            finally:
                if d is not None:
                    self.procs.stop(d)
                self.vars.clear()
                self.vars.update(saved)
                shutil.rmtree(sock_dir, ignore_errors=True)
            return errs

        self.timed("AGENT_PUBLIC_URL of a sandbox on token: required holds its token; without "
                   "it (none, empty, wrong, a prefix, a wrong copy beside the right one, in the "
                   "query or Agentsnet-Token): 404 ingress_not_found, the same answer as an "
                   "unknown id, the agent saw none, the audit says ingress_token_refused",
                   refused)
        self.timed("with the token (query or field) the request reaches the agent without it, "
                   "the other parameters as sent; a sandbox that needs none never sees one "
                   "either; the token is nowhere in the audit", carried)
        self.timed("a run-time sandbox's token survives a daemon restart (its 0600 registry "
                   "record), and the restarted gateway takes it", kept)

    def answer(self, role, fields, host=None):
        """GET <role>'s /answer asking for <fields> ((name, value) pairs) in its answer."""
        target = self.target(role, "/answer?" + urllib.parse.urlencode(
            [("h", "%s: %s" % f) for f in fields]))
        return self.send(build("GET", target, host or self.host()), "GET",
                         {"sandbox": self.sid[role], "method": "GET", "path": target})

    def t_websocket(self):
        """Done when 5: a WebSocket echo through the gateway, 1,000 messages."""
        def websocket():
            target = self.target("a", "/ws")
            before = len(self.seen("a"))
            errs, stats = ws_check(self.port, target, self.host())
            self.want_stream("a", target, 101, stats)
            got, h = self.seen_upgrades("a", before)
            if len(got) != 1 or h.get("upgrade") != ["websocket"] or \
                    "upgrade" not in ",".join(h.get("connection", [])).lower():
                errs.append("the agent's record of the upgrade: %r, want one GET /ws with "
                            "Upgrade: websocket and Connection: Upgrade" % got)
            log("# websocket: %s" % json.dumps(stats))
            return errs

        self.timed("WebSocket echo through the gateway: %d messages (0 B to 300 KiB, text and "
                   "binary, masked, some fragmented, pings), in order and intact; close "
                   "handshake" % WS_MESSAGES, websocket)

    def t_sse(self):
        """Server-sent events stream through as the agent writes them."""
        for mode in ("chunked", "close"):
            def sse(m=mode):
                target = self.target("a", "/sse?mode=" + m)
                errs, stats = sse_check(self.port, target, self.host())
                self.want_stream("a", target, 200, stats)
                log("# sse %s: events arrived at %r s" % (m, stats["arrivals"]))
                return errs

            self.timed("SSE (%s): 3 events written 300 ms apart arrive as they are written"
                       % ("chunked" if mode == "chunked" else "close-delimited"), sse)

    def t_keepalive(self):
        def keepalive():
            errs = []
            c = Conn(self.port)
            try:
                for n in (1, 2):
                    target = self.target("a", "/ka-%d" % n)
                    c.send(build("GET", target, self.host()))
                    r = c.response()
                    self.want(r, {"sandbox": self.sid["a"], "method": "GET", "path": target})
                    if r.status != 200 or (r.json() or {}).get("path") != "/ka-%d" % n:
                        errs.append("request %d on the connection: %r" % (n, r))
                    if (r.get("Connection") or "").lower() == "close":
                        errs.append("request %d answered with Connection: close" % n)
            except (OSError, EOFError) as e:
                errs.append("the second request on one connection: %s: %s"
                            % (type(e).__name__, e))
            finally:
                c.close()
            return errs

        def pipelined():
            errs = []
            c = Conn(self.port)
            try:
                targets = [self.target("a", "/pipe-%d" % n) for n in (1, 2)]
                c.send(b"".join(build("GET", t, self.host()) for t in targets))
                for n, t in enumerate(targets, 1):
                    r = c.response()
                    self.want(r, {"sandbox": self.sid["a"], "method": "GET", "path": t})
                    if r.status != 200 or (r.json() or {}).get("path") != "/pipe-%d" % n:
                        errs.append("pipelined request %d: %r" % (n, r))
            except (OSError, EOFError) as e:
                errs.append("two pipelined requests: %s: %s" % (type(e).__name__, e))
            finally:
                c.close()
            return errs

        def switch():
            """A then B on one connection: each request is routed by its own path."""
            errs = []
            before_a, before_b = len(self.seen("a")), len(self.seen("b"))
            c = Conn(self.port)
            try:
                for role in ("a", "b"):
                    target = self.target(role, "/switch-%s" % role)
                    c.send(build("GET", target, self.host()))
                    try:
                        r = c.response()
                    except (OSError, EOFError):
                        break  # closing before a request for another sandbox is fine
                    self.want(r, {"sandbox": self.sid[role], "method": "GET", "path": target})
                    if r.status != 200 or (r.json() or {}).get("path") != "/switch-" + role:
                        errs.append("GET %s: %r" % (target, r))
            finally:
                c.close()
            time.sleep(0.2)
            if "/switch-b" in self.seen_paths("a")[before_a:]:
                errs.append("the request for B on A's connection reached A")
            if self.seen_paths("a")[before_a:] != ["/switch-a"]:
                errs.append("A recorded %r, want [/switch-a]" % self.seen_paths("a")[before_a:])
            if self.seen_paths("b")[before_b:] not in ([], ["/switch-b"]):
                errs.append("B recorded %r" % self.seen_paths("b")[before_b:])
            return errs

        self.timed("keep-alive: two requests on one connection, both answered", keepalive)
        self.timed("keep-alive: two pipelined requests, both answered in order", pipelined)
        self.timed("keep-alive: a request for sandbox B after one for A on the same "
                   "connection never reaches A", switch)

    def t_methods(self):
        def methods():
            errs = []
            before = len(self.seen("a"))
            for m in ("DELETE", "PUT", "PATCH", "OPTIONS", "PROPFIND", "get"):
                r = self.req("a", "/method-" + m, m)
                errs += ["%s: %s" % (m, e) for e in refusal(r, 405, "method_not_allowed")]
            time.sleep(0.2)
            if self.seen("a")[before:]:
                errs.append("the agent saw refused methods: %r" % [
                    r.get("method") for r in self.seen("a")[before:]])
            for m in ("HEAD", "POST", "GET"):
                r = self.req("a", "/method-ok", m, body=b"x" if m == "POST" else b"")
                if r.status != 200:
                    errs.append("%s (in the list): %r, want 200" % (m, r))
            got = [r.get("method") for r in self.seen("a")[before:]]
            if got != ["HEAD", "POST", "GET"]:
                errs.append("the agent saw %r, want HEAD POST GET" % got)
            return errs

        self.timed("a method not in ingress.methods (DELETE, PUT, PATCH, OPTIONS, PROPFIND, "
                   "lower-case get): 405 method_not_allowed, the agent saw none; HEAD, POST, "
                   "GET go through", methods)

    def t_rate(self):
        def rate():
            errs = []
            # Each on its own connection: the workers (2) accept them in turn, and the
            # limit is the sandbox's, not a worker's.
            n = 2 * BURST + 2
            got = [self.req("lim", "/rate-%d" % i) for i in range(n)]
            statuses = [r.status for r in got]
            if statuses != [200] * BURST + [429] * (n - BURST):
                errs.append("%d requests at once, each on a new connection: %r, want %d x 200 "
                            "then 429 (%d answered 200)" % (n, statuses, BURST,
                                                            statuses.count(200)))
            refused = next((r for r in got if r.status == 429), got[-1])
            retry = refused.get("Retry-After") or ""
            errs += refusal(refused, 429, "rate_limited")
            if not retry.isdigit() or int(retry) < 1:
                errs.append("Retry-After %r, want whole seconds >= 1" % retry)
            r = self.req("a", "/rate-other")
            if r.status != 200:
                errs.append("another sandbox meanwhile: %r, want 200 (its own bucket)" % r)
            if retry.isdigit():
                time.sleep(int(retry))
                r = self.req("lim", "/rate-after")
                if r.status != 200:
                    errs.append("after waiting Retry-After %ss: %r, want 200" % (retry, r))
            paths = self.seen_paths("lim")
            want = ["/rate-%d" % i for i in range(BURST)] + ["/rate-after"]
            if paths != want:
                errs.append("the limited agent saw %r, want %r" % (paths, want))
            return errs

        self.timed("limits (burst %d, %d/s): 429 rate_limited with Retry-After past the burst, "
                   "never reaching the agent; a request after Retry-After seconds succeeds"
                   % (BURST, RATE), rate)

    def t_concurrent(self):
        """The profile's ingress.limits.concurrent, each sandbox's own: CONCURRENT public
        requests the agent holds open are served; one more is 429 concurrency_limited with
        Retry-After: 1 and audited under the X-Agent-Audit-Id it carries, never reaching
        the agent, and so again after Retry-After while all are held; once one ends (its
        connection left open, idle) a retry is served. Each request on its own connection:
        the workers (2) accept them in turn, and the count is the sandbox's."""
        def concurrent():
            sid, errs, held = self.sid["cap"], [], []
            before = len(self.seen("cap"))
            gos = [os.path.join(self.vars["sync"], "cap-go-%d" % i) for i in range(CONCURRENT)]
            refused = []  # the 429s: (what, path, answer)

            def limited(what, rest):
                """GET cap's <rest>: the problems of its answer as a 429
                concurrency_limited."""
                r = self.req("cap", rest)
                refused.append((what, self.target("cap", rest), r))
                doc, bad = r.json() or {}, refusal(r, 429, "concurrency_limited")
                if r.status is not None and r.get("Retry-After") != str(CONCURRENT_RETRY_S):
                    bad.append("Retry-After %r, want %d" % (r.get("Retry-After"),
                                                          CONCURRENT_RETRY_S))
                if r.status is not None and (not r.get("X-Agent-Audit-Id") or
                                             doc.get("audit_id") != r.get("X-Agent-Audit-Id")):
                    bad.append("X-Agent-Audit-Id %r, the body's audit_id %r" % (
                        r.get("X-Agent-Audit-Id"), doc.get("audit_id")))
                if r.status is not None and doc.get("sandbox") != sid:
                    bad.append("the body names sandbox %r, want %s" % (doc.get("sandbox"), sid))
                return ["%s: %s" % (what, e) for e in bad]

            def held_answer(i):
                c, target = held[i]
                touch(gos[i])
                try:
                    r = c.response()
                except (OSError, EOFError, ValueError) as e:
                    r = Resp(client=c.client, error="%s: %s" % (type(e).__name__, e))
                self.want(r, {"sandbox": sid, "method": "GET", "path": target})
                if r.status != 200 or (r.json() or {}).get("released") is not True:
                    return ["held request %d of %d: %r, want 200 once released" % (
                        i + 1, CONCURRENT, r)]
                return []

            try:
                for go in gos:
                    c = Conn(self.port, HOLD_WAIT_S + 10)
                    target = self.target("cap", "/hold?go=" + os.path.basename(go))
                    held.append((c, target))
                    c.send(build("GET", target, self.host()))
                try:
                    wait_for(lambda: len(self.seen("cap")) - before >= CONCURRENT, HOLD_WAIT_S,
                             "the agent to hold %d requests" % CONCURRENT)
                except Fatal:
                    errs.append("the agent got %d of the %d requests sent to be held: %r" % (
                        len(self.seen("cap")) - before, CONCURRENT,
                        self.seen_paths("cap")[before:]))
                    for i in range(CONCURRENT):
                        errs += held_answer(i)
                    return errs
                errs += limited("request %d with %d held" % (CONCURRENT + 1, CONCURRENT),
                                "/over-1")
                r = self.req("cap2", "/other")
                if r.status != 200 or (r.json() or {}).get("path") != "/other":
                    errs.append("another sandbox on the profile meanwhile: %r, want 200 (the "
                                "count is each sandbox's)" % r)
                time.sleep(CONCURRENT_RETRY_S)
                errs += limited("again after Retry-After, %d still held" % CONCURRENT,
                                "/over-2")
                errs += held_answer(0)
                time.sleep(CONCURRENT_RETRY_S)
                r = self.req("cap", "/after-release")
                if r.status != 200 or (r.json() or {}).get("path") != "/after-release":
                    errs.append("after Retry-After once one held request ended (its connection "
                                "still open, idle): %r, want 200" % r)
                for i in range(1, CONCURRENT):
                    errs += held_answer(i)
            finally:
                for go in gos:
                    touch(go)
                for c, _ in held:
                    c.close()
            paths = self.seen_paths("cap")[before:]
            want = sorted(t[len(self.target("cap")):] for _, t in held) + ["/after-release"]
            if sorted(paths[:CONCURRENT]) + paths[CONCURRENT:] != want:
                errs.append("the agent saw %r, want the %d held (any order), /after-release"
                            % (paths, CONCURRENT))
            return errs + self.refusals_audited(sid, refused)

        self.timed("limits (concurrent %d): %d requests held open by the agent are served; one "
                   "more is 429 concurrency_limited with Retry-After: %d, audited under its "
                   "X-Agent-Audit-Id, never reaching the agent, and again after Retry-After while "
                   "all are held; once one ends, a retry is served; another sandbox on the "
                   "profile is served meanwhile" % (CONCURRENT, CONCURRENT, CONCURRENT_RETRY_S),
                   concurrent)

    def refusals_audited(self, sid, refused):
        """The problems of the audit's records of <refused> ((what, path, answer) of GETs
        from <sid> refused concurrency_limited), each found by the X-Agent-Audit-Id its
        answer carries."""
        ids = {r.get("X-Agent-Audit-Id"): (what, path, r) for what, path, r in refused
               if r.get("X-Agent-Audit-Id")}

        def records():
            return {x.get("id"): x for x in read_audit(self.vars["audit"])[0]
                    if x.get("id") in ids}
        try:
            wait_for(lambda: len(records()) == len(ids), AUDIT_WAIT_S, "the refusals' records")
        except Fatal:
            pass
        got, errs = records(), []
        for audit_id, (what, path, r) in ids.items():
            rec = got.get(audit_id)
            want = {"event": "ingress", "sandbox": sid, "decision": "deny",
                    "reason": "concurrency_limited", "method": "GET", "path": path,
                    "status": 429, "client": r.client}
            bad = [k for k, v in want.items() if rec is not None and rec.get(k) != v]
            if rec is None or bad:
                errs.append("%s: the audit record %s: %s, want %s" % (
                    what, audit_id, json.dumps(rec)[:400], json.dumps(want)))
        return errs

    def t_smuggling(self):
        def smuggling():
            a, b, host = self.sid["a"], self.sid["b"], self.host()
            p = lambda rest: self.target("a", rest)  # noqa: E731
            shapes = [
                ("CL+TE", "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 4\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (p("/smuggle-clte"), host)),
                ("TE+CL, a request for B inside", "POST %s HTTP/1.1\r\nHost: %s\r\n"
                 "Transfer-Encoding: chunked\r\nContent-Length: 60\r\n\r\n0\r\n\r\n"
                 "GET %s/%s/smuggled HTTP/1.1\r\nHost: %s\r\n\r\n"
                 % (p("/smuggle-tecl"), host, PREFIX, b, host)),
                ("duplicate Content-Length (equal)", "POST %s HTTP/1.1\r\nHost: %s\r\n"
                 "Content-Length: 4\r\nContent-Length: 4\r\n\r\nabcd" % (p("/smuggle-cl2"),
                                                                       host)),
                ("duplicate Content-Length (differing)", "POST %s HTTP/1.1\r\nHost: %s\r\n"
                 "Content-Length: 4\r\nContent-Length: 5\r\n\r\nabcde" % (p("/smuggle-cl3"),
                                                                        host)),
                ("Content-Length list", "POST %s HTTP/1.1\r\nHost: %s\r\n"
                 "Content-Length: 4, 4\r\n\r\nabcd" % (p("/smuggle-cllist"), host)),
                ("Content-Length +4", "POST %s HTTP/1.1\r\nHost: %s\r\n"
                 "Content-Length: +4\r\n\r\nabcd" % (p("/smuggle-clplus"), host)),
                ("TE gzip, chunked", "POST %s HTTP/1.1\r\nHost: %s\r\n"
                 "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" % (p("/smuggle-tegz"), host)),
                ("TE on HTTP/1.0", "POST %s HTTP/1.0\r\nHost: %s\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (p("/smuggle-te10"), host)),
                ("bare LF line ends", "GET %s HTTP/1.1\nHost: %s\n\n" % (p("/smuggle-lf"), host)),
                ("a bare LF in one header", "GET %s HTTP/1.1\r\nHost: %s\nX-A: b\r\n\r\n"
                 % (p("/smuggle-lf1"), host)),
                ("obs-fold", "GET %s HTTP/1.1\r\nHost: %s\r\nX-A: b\r\n c\r\n\r\n"
                 % (p("/smuggle-fold"), host)),
                ("space before the colon", "GET %s HTTP/1.1\r\nHost: %s\r\n"
                 "Transfer-Encoding : chunked\r\n\r\n" % (p("/smuggle-space"), host)),
                # An upgrade with a body still coming: its bytes would meet the tunnel's
                # relay once the agent answered 101 (it aborted the daemon).
                ("an upgrade with a Content-Length body", "GET %s HTTP/1.1\r\nHost: %s\r\n"
                 "Connection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 1000\r\n\r\n"
                 % (p("/ws"), host)),
                ("an upgrade with a chunked body", "GET %s HTTP/1.1\r\nHost: %s\r\n"
                 "Connection: Upgrade\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked"
                 "\r\n\r\n" % (p("/ws"), host)),
            ]
            errs = []
            before_a, before_b = len(self.seen("a")), len(self.seen("b"))
            for label, raw in shapes:
                r = self.send(raw.encode("latin-1"), "POST", {})
                errs += ["%s: %s" % (label, e) for e in refusal(r, 400, "bad_request")]
            time.sleep(0.3)
            if self.seen("a")[before_a:] or self.seen("b")[before_b:]:
                errs.append("the agents saw smuggling shapes: A %r, B %r" % (
                    self.seen_paths("a")[before_a:], self.seen_paths("b")[before_b:]))
            target = p("/chunked-ok")
            r = self.send(("POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" % (target, host)).encode(),
                          "POST", {"sandbox": a, "method": "POST", "path": target})
            rec = r.json() or {}
            if r.status != 200 or rec.get("body_len") != 11 or \
                    rec.get("body_sha256") != hashlib.sha256(b"hello world").hexdigest():
                errs.append("the control, a plain chunked POST: %r, want 200 and the agent "
                            "gets 'hello world'" % r)
            return errs

        self.timed("smuggling shapes (CL+TE, TE+CL with a request for B inside, duplicate or "
                   "listed CL, TE gzip, TE on 1.0, bare LF, obs-fold, an upgrade with a body): "
                   "400 bad_request, no agent saw them; a plain chunked body goes through",
                   smuggling)

    def t_head_limits(self):
        def timeout():
            errs = []
            before = len(self.seen("a"))
            for label, dribble in (("an unfinished head", False), ("a head sent a byte every "
                                                                   "200 ms", True)):
                target = self.target("a", "/slow")
                c = Conn(self.port, HEAD_WAIT_S + 5)
                t0 = time.monotonic()
                try:
                    c.send(("GET %s HTTP/1.1\r\nHost: %s\r\n" % (target, self.host())).encode())
                    if dribble:
                        c.s.settimeout(0.2)
                        while time.monotonic() - t0 < HEAD_WAIT_S + 5:
                            try:
                                if c.fill():
                                    break
                                raise EOFError("closed without an answer")
                            except socket.timeout:
                                c.send(b"X")
                        c.s.settimeout(5)
                    r = c.response()
                except (OSError, EOFError) as e:
                    r = Resp(client=c.client, error="%s: %s" % (type(e).__name__, e))
                finally:
                    c.close()
                secs = time.monotonic() - t0
                self.want(r, {})
                errs += ["%s: %s" % (label, e) for e in refusal(r, 408, "request_timeout")]
                if not HEAD_MS / 1000 * 0.8 <= secs <= HEAD_WAIT_S:
                    errs.append("%s: answered after %.2fs, want about head_ms (%d ms)" % (
                        label, secs, HEAD_MS))
            if self.seen("a")[before:]:
                errs.append("the agent saw %r" % self.seen_paths("a")[before:])
            return errs

        def sizes():
            errs = []
            before = len(self.seen("a"))
            # The request line's length: method, target and version, without the CRLF.
            base = "GET %s/ HTTP/1.1" % self.target("a", "/long-")
            for n, want in ((LINE_MAX, 200), (LINE_MAX + 1, 414)):
                rest = "/long-" + "a" * (n - len(base)) + "/"
                r = self.req("a", rest)
                line = len("GET %s HTTP/1.1" % self.target("a", rest))
                if line != n:
                    raise Fatal("the check built a %d-byte request line, not %d" % (line, n))
                if want == 200 and (r.status != 200 or (r.json() or {}).get("path") != rest):
                    errs.append("a request line of exactly %d bytes: %r, want 200" % (n, r))
                if want == 414:
                    errs += ["a request line of %d bytes: %s" % (n, e)
                             for e in refusal(r, 414, "uri_too_long")]
            for n, want in ((HEAD_MAX, 200), (HEAD_MAX + 1, 431)):
                target = self.target("a", "/big-head-%d" % n)
                short = build("GET", target, self.host(), [("X-Pad-%d" % i, "") for i in range(4)])
                pad = n - len(short)
                values = ["p" * (pad // 4 + (1 if i < pad % 4 else 0)) for i in range(4)]
                raw = build("GET", target, self.host(),
                            [("X-Pad-%d" % i, v) for i, v in enumerate(values)])
                if len(raw) != n:
                    raise Fatal("the check built a %d-byte head, not %d" % (len(raw), n))
                r = self.send(raw, "GET", {"sandbox": self.sid["a"], "method": "GET",
                                           "path": target})
                if want == 200 and (r.status != 200 or (r.json() or {}).get(
                        "path") != "/big-head-%d" % n):
                    errs.append("a head of exactly %d bytes: %r, want 200 (the agent gets it "
                                "with the forwarding headers added)" % (n, r))
                if want == 431:
                    errs += ["a head of %d bytes: %s" % (n, e)
                             for e in refusal(r, 431, "headers_too_large")]
            got = [p[:40] for p in self.seen_paths("a")[before:]]
            if len(got) != 2:
                errs.append("the agent saw %d requests, want the 2 at the limits: %r"
                            % (len(got), got))
            return errs

        self.timed("408 request_timeout when the head is not complete within head_ms (%d ms), "
                   "also when it dribbles; the agent saw nothing" % HEAD_MS, timeout)
        self.timed("request line %d bytes: 200, %d: 414 uri_too_long; head %d bytes: 200, "
                   "%d: 431 headers_too_large" % (LINE_MAX, LINE_MAX + 1, HEAD_MAX, HEAD_MAX + 1),
                   sizes)

    def t_not_found(self):
        """Done when 6: an agent that stopped, or a sandbox no `agentsnet run` holds:
        502 agent_not_listening within seconds; unknown ids and paths: 404."""
        def stopped():
            errs = []
            r = self.req("once", "/first")
            if r.status != 200:
                errs.append("the once-agent's one request: %r, want 200" % r)
            self.agents["once"].wait_out("server-exited", 10)
            for n in (1, 2):
                r = self.req("once", "/after-exit-%d" % n, timeout=NOT_LISTENING_S + 10)
                errs += ["request %d after its server exited: %s" % (n, e)
                         for e in refusal(r, 502, "agent_not_listening")]
                if r.secs > NOT_LISTENING_S:
                    errs.append("request %d after its server exited: answered after %.1fs"
                                % (n, r.secs))
            return errs

        def parked():
            r = self.req("parked", "/hook", timeout=NOT_LISTENING_S + 10)
            errs = refusal(r, 502, "agent_not_listening")
            if r.secs > NOT_LISTENING_S:
                errs.append("answered after %.1fs" % r.secs)
            return errs

        def stalled():
            """An ingress socket nobody accepts on (a stalled agent): the requests the
            gateway sends on to it wait, and none of them may keep a regular descriptor
            of the daemon's (the name is opened O_PATH only for the connect): one each
            would let a public flood of requests to a stalled sandbox use up the
            daemon's table."""
            errs = []
            sid = self.sid["parked"]
            path = os.path.join(self.vars["sock_dir"], "sandboxes", sid, "ingress.sock")
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conns = []
            try:
                lst.bind(path)
                lst.listen(0)
                for i in range(STALLED_REQUESTS):
                    c = Conn(self.port, NOT_LISTENING_S + 10)
                    c.send(build("GET", self.target("parked", "/stalled-%d" % i), self.host()))
                    conns.append(c)
                fd_dir = "/proc/%d/fd" % self.daemon.pid
                time.sleep(1)
                held = []
                for fd in os.listdir(fd_dir):
                    try:
                        if os.readlink(os.path.join(fd_dir, fd)) == path:
                            held.append(fd)
                    except OSError:
                        pass
                if held:
                    errs.append("with %d public requests waiting on a stalled ingress socket, "
                                "the daemon holds %d descriptors of its name (want none)"
                                % (STALLED_REQUESTS, len(held)))
            finally:
                lst.close()
                if os.path.lexists(path):
                    os.unlink(path)
            # The listener gone, every one of them is answered.
            for i, c in enumerate(conns):
                target = self.target("parked", "/stalled-%d" % i)
                try:
                    r = c.response("GET")
                except (OSError, EOFError, ValueError) as e:
                    r = Resp(client=c.client, error="%s: %s" % (type(e).__name__, e))
                finally:
                    c.close()
                self.want(r, {"method": "GET", "path": target, "sandbox": sid})
                errs += ["stalled request %d: %s" % (i, e)
                         for e in refusal(r, 502, "agent_not_listening")]
            return errs

        def unknown():
            errs = []
            a = self.sid["a"]
            before = len(self.seen("a"))
            for target in ("%s/it-no-such-sandbox/x" % PREFIX, "%s/it-no-such-sandbox" % PREFIX,
                           self.target("closed", "/x"), "%s/" % PREFIX, PREFIX, "/",
                           "/other/%s/x" % a, "%sX/%s/x" % (PREFIX, a), "/CALLBACKS/%s/x" % a,
                           "%s/.%s/x" % (PREFIX, a), "%s/%s%%41/x" % (PREFIX, a),
                           "/x%s/%s/x" % (PREFIX, a)):
                r = self.send(build("GET", target, self.host()), "GET", {"path": target})
                errs += ["%s: %s" % (target, e) for e in refusal(r, 404, "ingress_not_found")]
            time.sleep(0.2)
            if self.seen("a")[before:]:
                errs.append("A's agent saw %r" % self.seen_paths("a")[before:])
            return errs

        self.timed("a sandbox whose server exited: 502 agent_not_listening within %ds, twice"
                   % NOT_LISTENING_S, stopped)
        self.timed("a sandbox no agentsnet run holds: 502 agent_not_listening within %ds"
                   % NOT_LISTENING_S, parked)
        self.timed("%d public requests waiting on an ingress socket nobody accepts on: none "
                   "keeps a descriptor of its name; each 502 agent_not_listening once it "
                   "closes" % STALLED_REQUESTS, stalled)
        self.timed("unknown sandbox ids, ingress.enabled: false, paths not under the prefix "
                   "(/callbacksX, /CALLBACKS, /other): 404 ingress_not_found", unknown)

    def t_finish(self):
        """Each sandbox stopped: nothing of it left, and its public URL is 404 after."""
        def finish():
            errs = []
            ended = {}
            for role in list(self.agents):
                ended[role] = self.stop_agent(role)
            for role, a in ended.items():
                errs += ["%s: %s" % (role, e) for e in self.leftovers(a)]
            if ended.get("once") is not None and ended["once"].rc != 0:
                errs.append("the once-agent's run: exit %s" % ended["once"].rc)
            deadline = time.monotonic() + REAP_WAIT_S
            while True:
                r = self.req("a", "/gone")
                if r.status == 404 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            errs += ["A's URL after its run ended: %s" % e
                     for e in refusal(r, 404, "ingress_not_found")]
            for role in ("parked", "closed"):
                self.ctl("sandbox rm %s" % self.sid[role])
            return errs

        self.timed("every agentsnet run stopped: nothing left; the ended sandbox's URL is 404 "
                   "ingress_not_found", finish)

    def t_audit(self):
        self.timed("audit: one \"ingress\" record per public request (%d), with sandbox, "
                   "method, path, status, reason, bytes up/down and client ip:port"
                   % len(self.wants), self.audit_errs)

    def audit_errs(self, client_re=r"127\.0\.0\.1:\d+"):
        """The problems of the audit file (self.vars["audit"]) against self.wants: exactly
        one "ingress" record per request, in order per client, its client matching
        <client_re>; a client in self.bare (it made no request) may have one."""
        records, errs = read_audit(self.vars["audit"])
        fields = ("sandbox", "method", "path", "status", "reason", "bytes_up",
                  "bytes_down", "client")

        def ours():
            """The records of requests (a failed handshake's has its own check)."""
            return [r for r in read_audit(self.vars["audit"])[0] if r.get("event") == "ingress"
                    and r.get("reason") != "tls_handshake_failed"]

        clients = {}
        for client, w in self.wants:
            clients.setdefault(client, []).append(w)
        try:
            wait_for(lambda: len(ours()) >= len(self.wants), AUDIT_WAIT_S, "audit records")
        except Fatal:
            pass
        got = {}
        for r in ours():
            got.setdefault(r.get("client"), []).append(r)
            missing = [f for f in fields if f not in r]
            if missing:
                errs.append("an ingress record without %s: %s" % (missing, json.dumps(r)[:400]))
            elif not re.fullmatch(client_re, str(r["client"])) or \
                    not all(isinstance(r[k], int) and r[k] >= 0
                            for k in ("status", "bytes_up", "bytes_down")):
                errs.append("a malformed ingress record: %s" % json.dumps(r)[:400])
        stray = [r for c, recs in got.items() if c not in clients and c not in self.bare
                 for r in recs]
        if stray:
            errs.append("%d ingress records of no request this pass made: %s" % (
                len(stray), json.dumps(stray)[:600]))
        bare = [r for c in self.bare - set(clients) for r in got.get(c, [])]
        if len(bare) > len(self.bare):
            errs.append("%d records for %d connections that made no request: %s" % (
                len(bare), len(self.bare), json.dumps(bare)[:600]))
        for client, wants in clients.items():
            recs = got.get(client, [])
            if len(recs) != len(wants):
                errs.append("%s made %d public requests, the audit has %d records: %s" % (
                    client, len(wants), len(recs), json.dumps(recs)[:600]))
                continue
            for w, r in zip(wants, recs):
                bad = [k for k, v in w.items() if not audit_field(r.get(k), v)]
                if bad:
                    errs.append("the record of %s %s: %s differ: %s" % (
                        client, json.dumps(w), bad, json.dumps(r)[:600]))
        errs += ["records were dropped or lost: %s" % json.dumps(r) for r in records
                 if r.get("dropped") or r.get("lost")]
        log("# audit: %d ingress records, %d public requests checked%s" % (
            len(ours()), len(self.wants), ", %d of %d connections without a request" % (
                len(bare), len(self.bare)) if self.bare else ""))
        return errs[:40]

    def t_flags(self):
        """--ingress ADDR overrides daemon.ingress.listen; public_url and prefix set;
        --no-ingress: no public listener."""
        def refused(port):
            try:
                socket.create_connection(("127.0.0.1", port), 2).close()
                return ["127.0.0.1:%d accepts a connection" % port]
            except ConnectionRefusedError:
                return []
            except OSError as e:
                return ["127.0.0.1:%d: %s, want refused" % (port, e)]

        def override():
            errs = ["the main daemon's stop: " + e for e in self.stop_daemon()]
            p2 = self.vars["port2"]
            more = '    public_url: "http://localhost:%d"\n    prefix: /hooks' % p2
            policy = self.render_policy("policy-hooks.yaml", self.port, more)
            self.start_daemon(policy, ["--ingress", "127.0.0.1:%d" % p2])
            errs += ["the listen address the file names: " + e for e in refused(self.port)]
            a = self.start(self.agent_cmd("late", 1), sandbox=self.sandbox_id("late"))
            sid = a.sandbox
            try:
                a.wait_out("listening")
                info = json.loads(a.stdout().splitlines()[0])
                want = "http://localhost:%d/hooks/%s" % (p2, sid)
                if info.get("public_url") != want:
                    errs.append("AGENT_PUBLIC_URL %r, want %r" % (info.get("public_url"), want))
                for target, code in (("%s/%s/x" % (PREFIX, sid), 404),
                                     ("/hooks/%s/x?y=1" % sid, 200)):
                    r = self.send(build("GET", target, "localhost:%d" % p2), "GET",
                                  {"sandbox": sid, "path": target}, port=p2)
                    rec = r.json() or {}
                    if r.status != code:
                        errs.append("GET %s on :%d: %r, want %d" % (target, p2, r, code))
                    if code == 200 and (rec.get("path") != "/x?y=1" or header_map(rec).get(
                            "x-forwarded-prefix") != ["/hooks/%s" % sid]):
                        errs.append("the agent got %r with X-Forwarded-Prefix %r" % (
                            rec.get("path"), header_map(rec).get("x-forwarded-prefix")))
            finally:
                if a.proc.poll() is None and '"/x?y=1"' not in read_text(
                        os.path.join(self.vars["sync"], "late.log")):
                    a.proc.send_signal(signal.SIGTERM)  # it never got its one request
                a.finish(20)
            errs += self.leftovers(a)
            errs += ["the --ingress daemon's stop: " + e for e in self.stop_daemon()]
            return errs

        def off():
            self.start_daemon(self.vars["policy"], ["--no-ingress"])
            errs = refused(self.port)
            listed = self.ctl("sandbox ls")
            if not listed or not listed[0].startswith("ok "):
                errs.append("the control socket of the --no-ingress daemon: %r" % listed)
            return errs + ["the --no-ingress daemon's stop: " + e for e in self.stop_daemon()]

        self.timed("--ingress ADDR overrides daemon.ingress.listen; public_url and prefix "
                   "(/hooks) reach AGENT_PUBLIC_URL and the routing", override)
        if self.daemon is not None:
            return
        self.timed("--no-ingress: no public listener; the daemon runs and stops cleanly", off)

    # ---- per-sandbox origins (daemon.ingress.origins: subdomain) ---------------------------

    def t_origins(self):
        """Issue 18 item 5: a second daemon (its own socket directory, audit file and port)
        whose public_url names ORIGIN_HOST, with origins: subdomain; two sandboxes under it,
        and two ids no origin can have (a dot, an upper-case letter)."""
        saved = (self.port, dict(self.vars), self.wants, self.bare)
        sock_dir = "/run/%s-origins" % self.args.netns
        self.port, self.wants, self.bare = free_port(), [], set()
        self.vars.update({"sock_dir": sock_dir, "control": os.path.join(sock_dir, "control.sock"),
                          "audit": os.path.join(self.tmp, "audit-origins.jsonl")})
        self.or_err = os.path.join(self.tmp, "daemon-origins.stderr")
        self.or_daemon, self.or_agents, self.or_added = None, {}, []
        try:
            self.timed("origins daemon: agentsnetd starts with public_url http://%s:<port> and "
                       "origins: subdomain; two sandboxes listen under it" % ORIGIN_HOST,
                       self.origins_up)
            checks = [
                ("AGENT_PUBLIC_URL and `sandbox url` are http://<id>.%s:<port>; an id with a "
                 "dot or an upper-case letter keeps <public_url>/callbacks/<id>" % ORIGIN_HOST,
                 self.origins_urls),
                ("Host <id>.%s:<port> reaches that sandbox with the whole path (one naming "
                 "another sandbox too), no X-Forwarded-Prefix; any case, a trailing dot; the "
                 "public host, an address or another port keep the path form" % ORIGIN_HOST,
                 self.origins_route),
                ("Host <unknown id>.%s, <b>.<a>.%s, a dotted or upper-case id's name: 404 "
                 "ingress_not_found, the same answer as an unknown id in the path form; dot "
                 "segments on an origin: 400 path_not_allowed; no agent saw any"
                 % (ORIGIN_HOST, ORIGIN_HOST), self.origins_refused),
                ("on its own origin an answer gets no CSP, keeps a cookie for / and "
                 "Strict-Transport-Security, loses a cookie for %s and Clear-Site-Data; the "
                 "same sandbox on the path form gets the CSP, not the cookie" % ORIGIN_HOST,
                 self.origins_answers),
            ]
            for name, fn in checks:
                if self.or_daemon is None or self.or_daemon.poll() is not None:
                    self.result(name, ["not run: the origins daemon is not up; stderr:\n" +
                                       read_text(self.or_err)[-3000:]])
                    continue
                self.timed(name, fn)
            self.timed("audit of the origins daemon: one \"ingress\" record per public request "
                       "(%d), the sandbox the Host named, the path as sent" % len(self.wants),
                       self.audit_errs)
        finally:
            self.timed("origins daemon: every agentsnet run stopped, nothing left; the daemon "
                       "stops on SIGTERM with exit 0 and a clean stderr", self.origins_down)
            self.port, self.wants, self.bare = saved[0], saved[2], saved[3]
            self.vars.clear()
            self.vars.update(saved[1])

    def origins_up(self):
        more = '    public_url: "http://%s:%d"\n    origins: subdomain' % (ORIGIN_HOST, self.port)
        policy = self.render_policy("policy-origins.yaml", self.port, more)
        self.or_daemon = self.start_daemon(policy, err_path=self.or_err)
        pending = []
        for role in ("or-a", "or-b"):
            sid = self.sid[role] = self.sandbox_id(role)
            self.or_agents[role] = self.start(self.agent_cmd(role), sandbox=sid)
            pending.append((self.or_agents[role], "listening"))
        self.wait_agents(pending)
        for role, sid in (("or-dot", self.sandbox_id("or.dot")),
                          ("or-upper", self.sandbox_id("Or-Upper"))):
            got = self.ctl("sandbox add %s default" % sid)
            if not got or not got[0].startswith("ok "):
                raise Fatal("sandbox add %s default: %r" % (sid, got))
            self.sid[role] = sid
            self.or_added.append(sid)
        log("# origins daemon: public listener 127.0.0.1:%d as %s, sandboxes %s" % (
            self.port, ORIGIN_HOST, " ".join(self.sid[r] for r in (
                "or-a", "or-b", "or-dot", "or-upper"))))
        return []

    def second_daemon_down(self, agents, daemon, err, label):
        """Stops the agents of a pass's own daemon (role -> agent), then the daemon:
        what went wrong, each named (label: the daemon's name in messages)."""
        errs = []
        for role, a in list(agents.items()):
            if a.proc.poll() is None:
                a.proc.send_signal(signal.SIGTERM)
            try:
                a.finish(20)
            except Fatal as e:
                errs.append(str(e))
                continue
            errs += ["%s: %s" % (role, e) for e in self.leftovers(
                a, daemon_up=daemon is not None and daemon.poll() is None)]
        if daemon is not None:
            errs += ["the %s's stop: %s" % (label, e) for e in stop_daemon(daemon, err)]
        return errs

    def origins_down(self):
        for sid in self.or_added:
            self.ctl("sandbox rm %s" % sid)
        self.or_added = []
        errs = self.second_daemon_down(self.or_agents, self.or_daemon, self.or_err,
                                       "origins daemon")
        self.or_agents = {}
        self.or_daemon = None
        return errs

    def origin(self, role, port=None, upper=False, dot=""):
        """The Host of <role>'s origin: "<id>.ORIGIN_HOST<dot>:<port>"."""
        host = "%s.%s%s:%d" % (self.sid[role], ORIGIN_HOST, dot, port or self.port)
        return host.upper() if upper else host

    def via(self, host, target, want_role=None, method="GET"):
        """GET <target> with Host <host> on a new connection; the audit is told the
        sandbox of <want_role> (None: no sandbox, or a refusal's)."""
        w = {"method": method, "path": target}
        if want_role is not None:
            w["sandbox"] = self.sid[want_role]
        return self.send(build(method, target, host), method, w)

    def origins_urls(self):
        errs = []
        a = self.sid["or-a"]
        want = "http://%s" % self.origin("or-a")
        got = self.info[a].get("public_url")
        if got != want:
            errs.append("AGENT_PUBLIC_URL of %s is %r, want %r" % (a, got, want))
        for role, url in (("or-b", "http://%s" % self.origin("or-b")),
                          ("or-dot", "http://%s:%d%s/%s" % (ORIGIN_HOST, self.port, PREFIX,
                                                            self.sid["or-dot"])),
                          ("or-upper", "http://%s:%d%s/%s" % (ORIGIN_HOST, self.port, PREFIX,
                                                              self.sid["or-upper"]))):
            reply = self.ctl("sandbox url %s" % self.sid[role])
            if reply != ["ok " + url]:
                errs.append("sandbox url %s: %r, want ok %s" % (self.sid[role], reply, url))
        return errs

    def origins_route(self):
        errs = []
        a, b = self.sid["or-a"], self.sid["or-b"]
        before_a, before_b = len(self.seen("or-a")), len(self.seen("or-b"))
        cases = [  # (Host, target, the role it reaches, the path that role's agent gets)
            (self.origin("or-a"), "/o-1?q=1", "or-a", "/o-1?q=1"),
            (self.origin("or-a"), "%s/%s/o-2" % (PREFIX, b), "or-a", "%s/%s/o-2" % (PREFIX, b)),
            (self.origin("or-a", upper=True, dot="."), "/o-3", "or-a", "/o-3"),
            (self.origin("or-b"), "/", "or-b", "/"),
            ("%s:%d" % (ORIGIN_HOST, self.port), "%s/%s/o-4" % (PREFIX, b), "or-b", "/o-4"),
            ("%s:%d" % (ORIGIN_HOST.upper(), self.port), "%s/%s/o-5" % (PREFIX, a), "or-a",
             "/o-5"),
            (self.host(), "%s/%s/o-6" % (PREFIX, b), "or-b", "/o-6"),
            (self.origin("or-a", port=1), "%s/%s/o-7" % (PREFIX, b), "or-b", "/o-7"),
        ]
        for host, target, role, path in cases:
            r = self.via(host, target, role)
            rec = r.json() or {}
            h = header_map(rec)
            if r.status != 200 or rec.get("path") != path:
                errs.append("Host %s, %s: %r, want 200 from %s's agent with path %s" % (
                    host, target, r, role, path))
                continue
            origin = host.lower().startswith(self.sid[role].lower() + ".")
            prefix = h.get("x-forwarded-prefix")
            if origin and prefix is not None:
                errs.append("Host %s: the agent got X-Forwarded-Prefix %r (an origin's paths are "
                            "its own from /)" % (host, prefix))
            if not origin and prefix != ["%s/%s" % (PREFIX, self.sid[role])]:
                errs.append("Host %s, path form: X-Forwarded-Prefix %r" % (host, prefix))
            # A host name is case-insensitive: the origin's label reaches the agent lowered.
            sent = self.sid[role].lower() + host[len(self.sid[role]):] if origin else host
            if h.get("host") != [sent]:
                errs.append("Host %s: the agent got Host %r, want %r" % (host, h.get("host"),
                                                                         sent))
        got_a = self.seen_paths("or-a")[before_a:]
        got_b = self.seen_paths("or-b")[before_b:]
        want_a = [c[3] for c in cases if c[2] == "or-a"]
        want_b = [c[3] for c in cases if c[2] == "or-b"]
        if got_a != want_a or got_b != want_b:
            errs.append("A recorded %r (want %r), B %r (want %r)" % (got_a, want_a, got_b,
                                                                   want_b))
        return errs

    def origins_refused(self):
        errs = []
        a, b = self.sid["or-a"], self.sid["or-b"]
        before_a, before_b = len(self.seen("or-a")), len(self.seen("or-b"))
        unknown_path = self.via("%s:%d" % (ORIGIN_HOST, self.port),
                                "%s/it-no-such-sandbox/x" % PREFIX)
        errs += ["the path form's unknown id: %s" % e
                 for e in refusal(unknown_path, 404, "ingress_not_found")]
        names = ["it-no-such-sandbox.%s:%d" % (ORIGIN_HOST, self.port),
                 "%s.%s" % (b, self.origin("or-a")),
                 "%s.%s:%d" % (self.sid["or-dot"], ORIGIN_HOST, self.port),
                 "%s.%s:%d" % (self.sid["or-upper"], ORIGIN_HOST, self.port),
                 "%s.%s:%d" % (self.sid["or-upper"].lower(), ORIGIN_HOST, self.port),
                 ".%s:%d" % (ORIGIN_HOST, self.port),
                 "%s_x.%s:%d" % (a, ORIGIN_HOST, self.port)]
        for host in names:
            for target in ("/x", "%s/%s/x" % (PREFIX, b)):
                r = self.via(host, target)
                bad = refusal(r, 404, "ingress_not_found")
                mine, theirs = r.json() or {}, unknown_path.json() or {}
                for key in ("instruction", "sandbox", "rule", "port"):
                    if mine.get(key) != theirs.get(key):
                        bad.append("%s %r differs from the path form's unknown id's %r" % (
                            key, mine.get(key), theirs.get(key)))
                if sorted(k.lower() for k, _ in r.headers) != sorted(
                        k.lower() for k, _ in unknown_path.headers):
                    bad.append("header names %r differ from the path form's %r" % (
                        [k for k, _ in r.headers], [k for k, _ in unknown_path.headers]))
                errs += ["Host %s, %s: %s" % (host, target, e) for e in bad]
        for target in ("/..;/x", "/%2e%2e/x", "/x/%c0%ae%c0%ae/y"):
            r = self.via(self.origin("or-a"), target)  # refused before a sandbox is looked up
            errs += ["Host %s, %s: %s" % (self.origin("or-a"), target, e)
                     for e in refusal(r, 400, "path_not_allowed")]
        time.sleep(0.3)
        if self.seen("or-a")[before_a:] or self.seen("or-b")[before_b:]:
            errs.append("the agents got them: A %r, B %r" % (
                self.seen_paths("or-a")[before_a:], self.seen_paths("or-b")[before_b:]))
        return errs

    def origins_answers(self):
        errs = []
        fields = [("Content-Type", "text/html"), ("Set-Cookie", "own=1; Path=/"),
                  ("Set-Cookie", "site=1; Domain=%s" % ORIGIN_HOST),
                  ("Set-Cookie", "self=1; Domain=%s.%s" % (self.sid["or-a"], ORIGIN_HOST)),
                  ("Strict-Transport-Security", "max-age=60"), ("Clear-Site-Data", '"*"')]
        query = "?" + urllib.parse.urlencode([("h", "%s: %s" % f) for f in fields])
        r = self.via(self.origin("or-a"), "/answer" + query, "or-a")
        cookies = [c.split("=", 1)[0] for c in r.all("Set-Cookie")]
        if r.status != 200 or r.all("Content-Security-Policy") or cookies != ["own", "self"] or \
                r.get("Strict-Transport-Security") is None or r.get("Clear-Site-Data"):
            errs.append("its own origin: %r: CSP %r, cookies %r, HSTS %r, Clear-Site-Data %r; "
                        "want no CSP, own and self, HSTS, no Clear-Site-Data" % (
                            r, r.all("Content-Security-Policy"), cookies,
                            r.get("Strict-Transport-Security"), r.get("Clear-Site-Data")))
        r = self.via("%s:%d" % (ORIGIN_HOST, self.port),
                     "%s/%s/answer%s" % (PREFIX, self.sid["or-a"], query), "or-a")
        if r.status != 200 or r.all("Content-Security-Policy") != ["sandbox"] or \
                r.all("Set-Cookie"):
            errs.append("the path form: %r: CSP %r, cookies %r; want sandbox, none" % (
                r, r.all("Content-Security-Policy"), r.all("Set-Cookie")))
        return errs

    # ---- the embedded default policy (agentsnetd with no --config) -------------------------

    def t_embedded(self):
        """agentsnetd with no --config, on the embedded default policy: its gateway on
        127.0.0.1:8090 when the port is free as the check begins; when it is taken, the
        daemon without a gateway (a warning, no AGENT_PUBLIC_URL). It stops cleanly."""
        t0 = time.monotonic()
        self.emb = {"daemon": None, "agent": None, "case": None}
        errs = check_errs(lambda: self.embedded("embedded"))
        listen = "%s:%d" % (EMBEDDED_HOST, EMBEDDED_PORT)
        if self.emb["case"] == "taken":
            what = ("%s was taken: the daemon starts anyway, warns that the gateway on %d is "
                    "off, the sandbox gets no AGENT_PUBLIC_URL" % (listen, EMBEDDED_PORT))
        elif self.emb["case"] == "free":
            what = ("%s was free: the sandbox gets AGENT_PUBLIC_URL http://%s%s/<id>, %d "
                    "requests from the host to it (its limits: %d/s, burst %d) reach the agent"
                    % (listen, listen, PREFIX, EMBEDDED_REQUESTS, EMBEDDED_RATE,
                       EMBEDDED_BURST))
        else:
            what = "%s could not be probed" % listen
        self.result("agentsnetd on the embedded default policy (no --config; --socket-dir and "
                    "--audit of this pass): %s; it stops on SIGTERM with exit 0 and a clean "
                    "stderr (%.1fs)" % (what, time.monotonic() - t0), errs)

    def t_embedded_taken(self):
        """README.md: when 8090 is taken the daemon starts without the gateway, with a
        warning; docs/control.md: `sandbox url` then answers error no_ingress. A listener
        of this pass holds 127.0.0.1:8090 (in the upstream namespace, where the daemon
        runs) before agentsnetd starts with no --config, so that case runs on every run,
        not only when the port happens to be taken (t_embedded's other branch)."""
        t0 = time.monotonic()
        self.emb = {"daemon": None, "agent": None, "case": None}
        hold = socket.socket()
        try:
            hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                hold.bind((EMBEDDED_HOST, EMBEDDED_PORT))
                hold.listen(1)
                held = "held by this pass"
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise Fatal("binding %s:%d: %s" % (EMBEDDED_HOST, EMBEDDED_PORT, e))
                held = "taken already"
            errs = check_errs(lambda: self.embedded("embedded-taken"))
            if self.emb["case"] != "taken":
                errs.append("%s:%d was %s, yet the probe found it free: the taken case did "
                            "not run" % (EMBEDDED_HOST, EMBEDDED_PORT, held))
        finally:
            hold.close()
        self.result("agentsnetd on the embedded default policy with %s:%d %s: it starts "
                    "without the gateway, warns that the gateway on %d is off, the sandbox "
                    "gets no AGENT_PUBLIC_URL, sandbox url answers error no_ingress, nothing "
                    "is audited; it stops on SIGTERM with exit 0 and a clean stderr (%.1fs)"
                    % (EMBEDDED_HOST, EMBEDDED_PORT, held, EMBEDDED_PORT,
                       time.monotonic() - t0), errs)

    def embedded(self, role):
        """The probe of 127.0.0.1:8090, then the daemon in the upstream namespace (where the
        pass's daemons run and its public clients are), its files in tmp/<role>, its
        sandbox's agent logging as <role>."""
        taken = port_taken(EMBEDDED_HOST, EMBEDDED_PORT)
        self.emb["case"] = "taken" if taken else "free"
        log("# %s: %s:%d was %s when the check began (a probe bind, closed): the %s "
            "case ran" % (role, EMBEDDED_HOST, EMBEDDED_PORT, self.emb["case"],
                          "gateway-off" if taken else "gateway"))
        d = os.path.join(self.tmp, role)
        os.mkdir(d)
        err_path = os.path.join(d, "daemon.stderr")
        sock_dir = os.path.join(d, "run")
        saved = dict(self.vars)
        self.vars.update({"sock_dir": sock_dir, "control": os.path.join(sock_dir, "control.sock"),
                          "audit": os.path.join(d, "audit.jsonl")})
        try:
            errs = self.embedded_run(role, taken, err_path)
            p, self.emb["daemon"] = self.emb["daemon"], None
            return errs + ["the daemon's stop: " + e for e in stop_daemon(p, err_path)]
        finally:
            a = self.emb["agent"]
            if a is not None and a.proc.poll() is None:
                a.proc.send_signal(signal.SIGTERM)
                try:
                    a.finish(20)
                except Fatal as e:
                    log("# %s: %s" % (role, e))
            if self.emb["daemon"] is not None:
                self.procs.stop(self.emb["daemon"])
            self.vars.clear()
            self.vars.update(saved)

    def embedded_run(self, role, taken, err_path):
        """agentsnetd --socket-dir --audit (nothing else), then one `agentsnet run` of
        agent.py under it; the problems, the sandbox stopped and nothing of it left."""
        argv = ["ip", "netns", "exec", self.args.upns, self.args.daemon, "--socket-dir",
                self.vars["sock_dir"], "--audit", self.vars["audit"]]
        with open(err_path, "wb") as err:
            p = self.emb["daemon"] = self.procs.start(
                "agentsnetd-embedded", argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                env=daemon_env())
        try:
            wait_for(lambda: "agentsnetd: ready" in read_text(err_path) or p.poll() is not None,
                     READY_TIMEOUT_S, "agentsnetd: ready")
        except Fatal:
            raise Fatal("agentsnetd (no --config) not ready; stderr:\n" +
                        read_text(err_path)[-4000:])
        if p.poll() is not None:
            raise Fatal("agentsnetd (no --config) exited %d at start%s; stderr:\n%s" % (
                p.returncode, " (%d was taken: it must start anyway)" % EMBEDDED_PORT
                if taken else "", read_text(err_path)[-4000:]))
        lines = read_text(err_path).splitlines()
        warned = [x for x in lines if "warn" in x.lower() and str(EMBEDDED_PORT) in x and
                  "gateway is off" in x]
        errs = []
        if taken and not warned:
            errs.append("%d was taken, and stderr has no warning that names %d and says the "
                        "gateway is off:\n%s" % (EMBEDDED_PORT, EMBEDDED_PORT,
                                                 "\n".join(lines)[-3000:]))
        if not taken and warned:
            errs.append("%d was free, yet stderr says: %r" % (EMBEDDED_PORT, warned))
        for opt, path in (("--socket-dir", self.vars["control"]), ("--audit", self.vars["audit"])):
            if not os.path.exists(path):
                errs.append("%s is not there: the daemon did not take %s" % (path, opt))
        sid = self.sid[role] = self.sandbox_id(role)
        a = self.emb["agent"] = self.start(self.agent_cmd(role), sandbox=sid)
        self.wait_agents([(a, "listening")])
        url = self.info[sid].get("public_url")
        reply = self.ctl("sandbox url %s" % sid)
        if taken:
            errs += self.embedded_off(url, reply)
        else:
            errs += self.embedded_gateway(role, sid, url, reply)
        log("# %s: %s; AGENT_PUBLIC_URL %s; sandbox url: %r" % (
            role, (warned or [x for x in lines if "agentsnetd: ready" in x] or ["?"])[0],
            "unset" if url is None else repr(url), reply))
        a.proc.send_signal(signal.SIGTERM)
        a.finish(20)
        self.emb["agent"] = None
        return errs + self.leftovers(a)

    def embedded_gateway(self, role, sid, url, reply):
        """The gateway on 127.0.0.1:8090: <url> (AGENT_PUBLIC_URL inside) and the control
        socket's <reply> name it, and requests to it from here reach the agent, audited."""
        want = "http://%s:%d%s/%s" % (EMBEDDED_HOST, EMBEDDED_PORT, PREFIX, sid)
        errs = []
        if url != want:
            errs.append("AGENT_PUBLIC_URL inside is %r, want %r" % (url, want))
        if reply != ["ok " + want]:
            errs.append("sandbox url %s: %r, want ok %s" % (sid, reply, want))
        out = os.path.join(self.tmp, role, "curl.out")
        sent, clients = [], []
        for n in range(EMBEDDED_REQUESTS):
            rest = "/embedded-%d?from=host" % n
            target = (url if url and url.startswith("http://") else want) + rest
            p = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", out, "-w",
                                "%{http_code} %{local_ip}:%{local_port}", target],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                               check=False, env={"PATH": os.environ["PATH"]})
            code, _, client = p.stdout.decode().partition(" ")
            sent.append(rest)
            rec = {}
            if p.returncode == 0:
                clients.append((client, "%s/%s%s" % (PREFIX, sid, rest)))
                try:
                    rec = json.loads(read_text(out))
                except ValueError:
                    pass
            h = header_map(rec) if isinstance(rec, dict) else {}
            if p.returncode != 0 or code != "200" or rec.get("path") != rest or \
                    h.get("x-forwarded-prefix") != ["%s/%s" % (PREFIX, sid)] or \
                    h.get("host") != ["%s:%d" % (EMBEDDED_HOST, EMBEDDED_PORT)]:
                errs.append("curl %s: exit %d, HTTP %s, the agent answered %r, want 200 and "
                            "its record of %s (Host %s:%d, X-Forwarded-Prefix %s/%s): %s" % (
                                target, p.returncode, code, read_text(out)[:300], rest,
                                EMBEDDED_HOST, EMBEDDED_PORT, PREFIX, sid,
                                p.stderr.decode()[-500:]))
        if self.seen_paths(role) != sent:
            errs.append("the agent recorded %r, want %r" % (self.seen_paths(role), sent))
        return errs + self.embedded_audit(sid, clients)

    def embedded_audit(self, sid, clients):
        """One "ingress" record in the daemon's --audit file per (client, path) of
        <clients>, and no other."""
        def ours():
            return [r for r in read_audit(self.vars["audit"])[0] if r.get("event") == "ingress"]
        try:
            wait_for(lambda: len(ours()) >= len(clients), AUDIT_WAIT_S, "audit records")
        except Fatal:
            pass
        recs, errs = ours(), []
        for client, path in clients:
            mine = [r for r in recs if r.get("client") == client]
            if len(mine) != 1 or mine[0].get("sandbox") != sid or \
                    mine[0].get("status") != 200 or not audit_field(mine[0].get("path"), path):
                errs.append("the audit's records with client %s: %s, want one of sandbox %s, "
                            "%s, status 200" % (client, json.dumps(mine)[:400], sid, path))
        if len(recs) != len(clients):
            errs.append("%d ingress records in %s, want %d: %s" % (
                len(recs), self.vars["audit"], len(clients), json.dumps(recs)[:600]))
        return errs

    def embedded_off(self, url, reply):
        """No gateway: no AGENT_PUBLIC_URL inside (<url> None: unset, not empty), the
        control socket's <reply> to `sandbox url` says so, and nothing was audited."""
        errs = []
        if url is not None:
            errs.append("AGENT_PUBLIC_URL inside is %r, want it unset (the daemon has no "
                        "gateway)" % url)
        if not reply or not reply[0].startswith("error no_ingress"):
            errs.append("sandbox url: %r, want error no_ingress" % reply)
        recs = [r for r in read_audit(self.vars["audit"])[0] if r.get("event") == "ingress"]
        if recs:
            errs.append("ingress records without a gateway: %s" % json.dumps(recs)[:400])
        return errs

    # ---- egress limits (a daemon of its own: ingress/limits.yaml.in) ----------------------

    def t_egress(self):
        """On the way out, with a daemon of its own (ingress/limits.yaml.in): docs/policy.md's
        profile and rule limits (a profile with a burst of EGRESS_BURST a sandbox, a fake
        rule under it and one with a rule limit of burst 1, its TCP listener's sandbox on
        2 workers; plain http:// requests the daemon answers itself), then docs/alerts.md's
        refused_names on a sandbox of its own (profile watched)."""
        d = os.path.join(self.tmp, "egress-limits")
        os.mkdir(d)
        err_path = os.path.join(d, "daemon.stderr")
        sock_dir = os.path.join(d, "run")
        tcp_port = free_port()
        policy = os.path.join(d, "policy.yaml")
        render_file(os.path.join(FIXTURES, "limits.yaml.in"), policy, {
            "sock_dir": sock_dir, "audit": os.path.join(d, "audit.jsonl"),
            "dns_port": self.vars["dns_port"], "tcp_port": tcp_port, "burst": EGRESS_BURST,
            "names_threshold": NAMES_THRESHOLD})
        t0 = time.monotonic()
        try:
            p = self.start_daemon(policy, err_path=err_path)
        except Fatal as e:
            self.result("egress limits: the daemon of limits.yaml.in starts", [str(e)])
            return
        egress = lambda sid: os.path.join(sock_dir, "sandboxes", sid, "egress.sock")  # noqa
        try:
            self.timed("egress limits: only requests the rules allow count: %d refused "
                       "host_not_allowed, then a burst of %d allowed requests all served, "
                       "the next 429 rate_limited" % (EGRESS_DENIED, EGRESS_BURST),
                       lambda: self.egress_denied_first(egress("denied-first")))
            self.timed("egress limits: the rule's limit is taken first: the requests its "
                       "burst of 1 refuses (429, X-Agent-Rule: strict) spend none of the "
                       "sandbox's tokens: %d more to another host are served, then 429"
                       % (EGRESS_BURST - 1), lambda: self.egress_rule_first(egress("rule-first")))
            self.timed("egress limits: the TCP listener's sandbox has a bucket per worker: "
                       "of %d connections' requests spread over 2 workers, 2 x %d are served"
                       % (EGRESS_TCP_CONNS, EGRESS_BURST), lambda: self.egress_tcp(tcp_port))
            self.timed("alerts: refused names are compared whatever their case and grouped "
                       "by their registrable domain (example.co.uk, from the public suffix "
                       "list); a refused_names threshold of %d fires at the %d names it "
                       "counts, not before" % (NAMES_THRESHOLD, NAMES_KEPT),
                       lambda: self.egress_names(egress("names"), os.path.join(d, "audit.jsonl")))
        finally:
            errs = stop_daemon(p, err_path)
            self.result("egress limits: the daemon stops on SIGTERM with exit 0 and a clean "
                        "stderr (%.1fs in all)" % (time.monotonic() - t0), errs)

    def egress_names(self, path, audit):
        """NAMES_KEPT - 1 distinct names under example.co.uk (three parents: grouped by the
        registrable domain, not the parent), each refused twice more in other cases: no
        alert; the next distinct name: one refused_names alert, count NAMES_KEPT."""
        def refuse(host):
            c = Conn(0, unix=path)
            try:
                r = self.egress_get(c, host)
            finally:
                c.close()
            if r.status != 403 or r.get("X-Agent-Reason") != "host_not_allowed":
                errs.append("GET http://%s/: %r, want 403 host_not_allowed" % (host, r))

        def alerts():
            return [r for r in read_audit(audit)[0] if r.get("event") == "alert"]

        errs = []
        for i in range(NAMES_KEPT - 1):
            name = "n%02d.p%d.example.co.uk" % (i, i % 3)
            for host in (name, name.upper(), name[:4].upper() + name[4:]):
                refuse(host)
        # The audit writer is behind the answers: a marker's own record comes after theirs.
        refuse("marker.names.test")
        wait_for(lambda: any(r.get("host") == "marker.names.test" for r in
                             read_audit(audit)[0]), AUDIT_WAIT_S, "the marker's record")
        early = alerts()
        if early:
            errs.append("alerts after %d distinct names (%d refusals in three cases each): "
                        "%s" % (NAMES_KEPT - 1, 3 * (NAMES_KEPT - 1), json.dumps(early)[:600]))
        refuse("n%02d.p0.example.co.uk" % (NAMES_KEPT - 1))
        try:
            wait_for(lambda: alerts(), AUDIT_WAIT_S, "a refused_names alert record")
        except Fatal:
            pass
        got = alerts()
        if len(got) != 1 or got[0].get("detector") != "refused_names" or \
                got[0].get("sandbox") != "names" or got[0].get("count") != NAMES_KEPT or \
                got[0].get("suffix") != "example.co.uk":
            errs.append("alert records after distinct name %d: %s, want one of "
                        "refused_names, sandbox names, count %d, suffix example.co.uk" % (
                            NAMES_KEPT, json.dumps(got)[:800], NAMES_KEPT))
        return errs

    def egress_get(self, c, host):
        """GET http://<host>/ on the Conn <c>, kept alive; its answer."""
        c.send(build("GET", "http://%s/" % host, host))
        return c.response()

    def egress_until_limited(self, c, host, most):
        """GET http://<host>/ on <c> until an answer is not 200, at most <most> times."""
        got = []
        while len(got) < most and (not got or got[-1].status == 200):
            got.append(self.egress_get(c, host))
        return got

    def egress_denied_first(self, path):
        errs = []
        t0 = time.monotonic()
        for n in range(EGRESS_DENIED):
            c = Conn(0, unix=path)
            try:
                r = self.egress_get(c, "denied-%d.test" % n)
            finally:
                c.close()
            if r.status != 403 or r.get("X-Agent-Reason") != "host_not_allowed":
                errs.append("GET http://denied-%d.test/: %r, want 403 host_not_allowed" % (n, r))
        c = Conn(0, unix=path)
        try:
            got = self.egress_until_limited(c, "open.test", EGRESS_BURST + EGRESS_PAST_BURST)
        finally:
            c.close()
        refilled = int(time.monotonic() - t0)  # at 1 a second since the bucket was full
        served = [r for r in got if r.status == 200 and r.body == b"open\n"]
        if len(served) < EGRESS_BURST:
            errs.append("after %d refused requests, %d of the burst of %d were served "
                        "(%r): the refused ones spent tokens" % (EGRESS_DENIED, len(served),
                                                                 EGRESS_BURST, got))
        elif len(served) > EGRESS_BURST + refilled:
            errs.append("%d served, over the burst of %d and the %d token(s) refilled since "
                        "(%r)" % (len(served), EGRESS_BURST, refilled, got))
        errs += self.egress_limited(got[-1], "the request after the burst", len(got))
        return errs

    def egress_rule_first(self, path):
        errs = []
        t0 = time.monotonic()
        c = Conn(0, unix=path)
        try:
            first = self.egress_get(c, "strict.test")
            refused = [self.egress_get(c, "strict.test") for _ in range(EGRESS_RULE_REFUSED)]
            rest = self.egress_until_limited(c, "open.test", EGRESS_BURST - 1 + EGRESS_PAST_BURST)
        finally:
            c.close()
        refilled = int(time.monotonic() - t0)  # at 1 a second, each bucket
        if first.status != 200 or first.body != b"strict\n":
            errs.append("the first GET http://strict.test/: %r, want 200 strict" % first)
        # A token the rule's bucket refilled meanwhile serves one (and takes the sandbox's).
        again = [r for r in refused if r.status == 200 and r.body == b"strict\n"]
        for r in refused:
            if r in again:
                continue
            if r.status != 429 or r.get("X-Agent-Reason") != "rate_limited" or \
                    r.get("X-Agent-Rule") != "strict":
                errs.append("GET http://strict.test/ past its rule's burst: %r (X-Agent-Rule "
                            "%r), want 429 rate_limited of rule strict" % (
                                r, r.get("X-Agent-Rule")))
        if len(again) > refilled:
            errs.append("%d of strict.test's requests past its burst of 1 served, over the "
                        "%d token(s) refilled since" % (len(again), refilled))
        left = EGRESS_BURST - 1 - len(again)  # the sandbox's tokens the rule's answers left
        served = [r for r in rest if r.status == 200 and r.body == b"open\n"]
        if len(served) < left:
            errs.append("after the rule refused %d requests, %d of the sandbox's %d tokens "
                        "left were served (%r): the rule's refusals spent the sandbox's"
                        % (EGRESS_RULE_REFUSED, len(served), left, rest))
        elif len(served) > left + refilled:
            errs.append("%d served, over the sandbox's %d tokens left and the %d refilled "
                        "since (%r)" % (len(served), left, refilled, rest))
        errs += self.egress_limited(rest[-1], "the request after the sandbox's burst",
                                    len(rest))
        return errs

    def egress_limited(self, r, what, asked):
        """<r>, <what>, the last of <asked> requests, must be the sandbox's 429
        rate_limited; a 200 there means the bucket refilled a token for each request
        (over EGRESS_PAST_BURST seconds): the check cannot tell."""
        if r.status == 200:
            return ["%s: still served after %d requests, as if the bucket refilled a token "
                    "a request: the check cannot tell (%r)" % (what, asked, r)]
        if r.status != 429 or r.get("X-Agent-Reason") != "rate_limited" or \
                not (r.get("Retry-After") or "").isdigit():
            return ["%s: %r, want 429 rate_limited with a Retry-After" % (what, r)]
        return []

    def egress_tcp(self, port):
        """EGRESS_TCP_CONNS connections to the TCP listener (SO_REUSEPORT: the kernel
        spreads them over the 2 workers), all open before one request on each."""
        conns, errs = [], []
        try:
            for _ in range(EGRESS_TCP_CONNS):
                conns.append(Conn(port))
            t0 = time.monotonic()
            for c in conns:
                c.send(build("GET", "http://open.test/", "open.test"))
            got = [c.response() for c in conns]
            secs = time.monotonic() - t0
        finally:
            for c in conns:
                c.close()
        served = sum(1 for r in got if r.status == 200)
        limited = sum(1 for r in got if r.status == 429 and
                      r.get("X-Agent-Reason") == "rate_limited")
        refilled = int(secs)  # at 1 a second, each worker's bucket
        if EGRESS_BURST + refilled >= 2 * EGRESS_BURST:
            errs.append("the requests took %.1fs, in which one bucket refills as many tokens "
                        "as a second one holds: the count cannot tell" % secs)
        if not 2 * EGRESS_BURST <= served <= 2 * (EGRESS_BURST + refilled) or \
                served + limited != EGRESS_TCP_CONNS:
            errs.append("%d served, %d refused rate_limited of %d, want %d served (a burst "
                        "of %d on each of 2 workers; one bucket for the sandbox serves %d): "
                        "%r" % (served, limited, EGRESS_TCP_CONNS, 2 * EGRESS_BURST,
                                EGRESS_BURST, EGRESS_BURST,
                                [r.status for r in got]))
        return errs

    # ---- the public listener over TLS (daemon.ingress.tls) ------------------------------

    def t_tls(self):
        """A second daemon (its own socket directory, audit file and port) whose public
        listener speaks only HTTPS with the operator's certificate, a static agent and
        agent.py under it; then daemons whose certificate or key does not load."""
        self.pki = None
        saved = (self.port, dict(self.vars), self.wants, self.bare)
        sock_dir = "/run/%s-tls" % self.args.netns
        self.port, self.wants, self.bare = free_port(), [], set()
        self.vars.update({"sock_dir": sock_dir, "control": os.path.join(sock_dir, "control.sock"),
                          "audit": os.path.join(self.tmp, "audit-tls.jsonl")})
        self.tls_err = os.path.join(self.tmp, "daemon-tls.stderr")
        self.tls_daemon, self.tls_agents, self.tls_ready = None, {}, False
        try:
            self.timed("TLS daemon: agentsnetd starts with daemon.ingress.tls (the chain: an EC "
                       "P-256 leaf for 127.0.0.1 and %s, then its CA); two sandboxes listen "
                       "under it" % TLS_NAME, self.tls_up)
            if self.tls_ready:
                self.tls_checks()
        finally:
            self.tls = None
            self.timed("TLS daemon: every agentsnet run stopped, nothing left; the daemon stops "
                       "on SIGTERM with exit 0 and a clean stderr", self.tls_down)
            self.port, self.wants, self.bare = saved[0], saved[2], saved[3]
            self.vars.clear()
            self.vars.update(saved[1])
        self.timed("a TLS policy whose certificate does not load (a missing chain file, a "
                   "missing key file, the key of another leaf): the daemon exits non-zero at "
                   "start and its stderr names the file", self.tls_bad)

    def tls_up(self):
        d = os.path.join(self.tmp, "tls")
        os.makedirs(d, exist_ok=True)
        self.pki = tls_pki(d)
        more = '    tls: {cert: "%s", key: "%s"}' % (self.pki["chain"], self.pki["key"])
        policy = self.render_policy("policy-tls.yaml", self.port, more)
        extra = ["--debug"] if self.args.verbose else []
        self.tls_daemon = self.start_daemon(policy, extra, err_path=self.tls_err)
        pending = []
        for role, cmd, ready in (("tls-static", ["sh", "-c", STATIC_SH, self.vars["www"]],
                                  "Serving HTTP"),
                                 ("tls-a", self.agent_cmd("tls-a"), "listening")):
            sid = self.sid[role] = self.sandbox_id(role)
            self.tls_agents[role] = self.start(cmd, sandbox=sid)
            pending.append((self.tls_agents[role], ready))
        self.wait_agents(pending)
        self.tls, self.tls_ready = tls_client(self.pki["ca"]), True
        log("# TLS daemon: public listener https://127.0.0.1:%d, sandboxes %s" % (
            self.port, " ".join(a.sandbox for a in self.tls_agents.values())))
        return []

    def tls_down(self):
        errs = self.second_daemon_down(self.tls_agents, self.tls_daemon, self.tls_err,
                                       "TLS daemon")
        self.tls_agents = {}
        self.tls_daemon = None
        return errs

    def tls_checks(self):
        checks = [
            ("curl --cacert <CA> at the https AGENT_PUBLIC_URL gets the http.server file byte for "
             "byte (by address and by name); curl without the CA fails verification (exit 60)",
             self.tls_curl),
            ("the certificate a client sees is the operator's: the leaf (subject %s, issuer %s), "
             "then the CA, for any SNI; TLS 1.2 and 1.3; ALPN http/1.1, none to an h2-only "
             "client; TLS 1.1 refused" % (TLS_NAME, TLS_CA_CN), self.tls_cert),
            ("over TLS the agent sees X-Forwarded-Proto https, X-Forwarded-For the client's "
             "address (127.0.0.2), Forwarded for=...;proto=https; forged forwarding headers "
             "stripped", self.tls_headers),
            ("keep-alive over TLS: 5 requests (a POST among them) on one HTTPSConnection, all "
             "answered", self.tls_keepalive),
            ("keep-alive over TLS: three pipelined requests in one TLS record, answered in "
             "order; then a head sent in 7-byte TLS records", self.tls_pipelined),
            ("WebSocket echo over TLS: %d messages (5 over 64 KiB, text and binary, some "
             "fragmented, pings), in order and intact; close handshake" % TLS_WS_MESSAGES,
             self.tls_websocket),
            ("refusals over TLS are HTTPS answers (404 ingress_not_found, 413 body_too_large, "
             "400 path_not_allowed), audited with the real client ip:port", self.tls_refusals),
            ("a plain-HTTP request to the TLS port: no HTTP answer of 2xx, closed within %ds, "
             "the agent saw nothing; the listener serves TLS after" % PLAIN_ON_TLS_S,
             self.tls_plain),
            ("a failed TLS handshake is audited (bytes that are not TLS, a client that does not "
             "trust the certificate): an \"ingress\" record with reason tls_handshake_failed, "
             "the client's ip:port, sandbox and status null, the TLS library's reason in "
             "detail", self.tls_failed),
            ("head_ms (%d ms) over TLS: an unfinished head gets an in-band 408 request_timeout; "
             "a TCP connection with no ClientHello and a TLS one with no request are closed in "
             "that time" % HEAD_MS, self.tls_idle),
        ]
        for name, fn in checks:
            if self.tls_daemon.poll() is not None:
                self.result(name, ["not run: the TLS daemon is gone; stderr:\n" +
                                   read_text(self.tls_err)[-3000:]])
                continue
            self.timed(name, fn)
        for mode in ("chunked", "close"):
            def sse(m=mode):
                target = self.target("tls-a", "/sse?mode=" + m)
                errs, stats = sse_check(self.port, target, self.host(), self.tls)
                if stats["client"] is None:
                    return errs
                self.want_stream("tls-a", target, 200, stats)
                log("# sse %s over TLS: events arrived at %r s" % (m, stats["arrivals"]))
                return errs

            self.timed("SSE over TLS (%s): 3 events written 300 ms apart arrive as they are "
                       "written" % ("chunked" if mode == "chunked" else "close-delimited"), sse)
        self.timed("audit of the TLS daemon: one \"ingress\" record per public request (%d), "
                   "its client the real ip:port (127.0.0.x, not the daemon's internal socket)"
                   % len(self.wants), lambda: self.audit_errs(r"127\.0\.0\.\d{1,3}:\d+"))

    def curl(self, args, url):
        """curl -v <args> <url> (an environment without proxies or CA variables):
        (exit status, HTTP code, client ip:port, HTTP version, body, stderr)."""
        out = os.path.join(self.tmp, "tls", "curl.out")
        if os.path.exists(out):
            os.unlink(out)
        p = subprocess.run(["curl", "-sS", "-v", "--max-time", "10", *args, "-o", out, "-w",
                            "%{http_code} %{local_ip}:%{local_port} %{http_version}", url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                           check=False, env={"PATH": os.environ["PATH"]})
        code, client, version = (p.stdout.decode().split() + ["", "", ""])[:3]
        body = open(out, "rb").read() if os.path.exists(out) else b""
        return p.returncode, code, client, version, body, p.stderr.decode("utf-8", "replace")

    def tls_curl(self):
        sid = self.sid["tls-static"]
        url = (self.info.get(sid) or {}).get("public_url") or ""
        want_url = "https://%s%s/%s" % (self.host(), PREFIX, sid)
        errs = []
        if url != want_url:
            errs.append("AGENT_PUBLIC_URL inside is %r, want %r (public_url defaults to "
                        "https://<listen> with tls)" % (url, want_url))
        ca, path = self.pki["ca"], "%s/%s/blob.bin" % (PREFIX, sid)
        by_name = "https://%s:%d%s" % (TLS_NAME, self.port, path)
        for label, args, target in (
                ("--cacert", ["--cacert", ca], want_url + "/blob.bin"),
                ("--cacert, by name", ["--cacert", ca, "--resolve", "%s:%d:127.0.0.1" % (
                    TLS_NAME, self.port)], by_name),
                ("without the CA", [], want_url + "/blob.bin")):
            rc, code, client, version, body, err = self.curl(args, target)
            if label == "without the CA":
                if rc != 60:
                    errs.append("curl %s %s: exit %d, HTTP %s, want exit 60 (the certificate "
                                "is not verified): %s" % (label, target, rc, code, err[-800:]))
                self.bare.add(client)
                continue
            if rc != 0 or code != "200":
                errs.append("curl %s %s: exit %d, HTTP %s, want 200: %s" % (
                    label, target, rc, code, err[-1500:]))
                continue
            self.wants.append((client, {"sandbox": sid, "method": "GET", "path": path,
                                        "status": 200}))
            if hashlib.sha256(body).hexdigest() != self.vars["static_sha256"]:
                errs.append("curl %s: %d bytes, sha256 %s; the file has %d bytes, %s" % (
                    label, len(body), hashlib.sha256(body).hexdigest(), STATIC_BYTES,
                    self.vars["static_sha256"]))
            alpn = re.search(r"ALPN[:,] server accepted (?:to use )?(\S+)", err)
            if version not in ("1", "1.1") or not alpn or alpn.group(1) != "http/1.1":
                errs.append("curl %s: HTTP version %r, ALPN %r, want HTTP/1.x and ALPN "
                            "http/1.1 (curl offers h2 too)" % (
                                label, version, alpn.group(1) if alpn else None))
            seen = {k: v.strip() for k, v in re.findall(r"^\*\s+(subject|issuer):(.*)$", err,
                                                         re.M)}
            if seen.get("subject") != "CN=" + TLS_NAME or seen.get("issuer") != \
                    "CN=" + TLS_CA_CN:
                errs.append("curl %s saw the certificate %r, want subject CN=%s issued by "
                            "CN=%s: %s" % (label, seen, TLS_NAME, TLS_CA_CN, err[-1500:]))
            proto = re.search(r"SSL connection using (\S+)", err)
            status = re.search(r"^< (HTTP/\S+ \d+)", err, re.M)
            log("# curl %s: %s, ALPN %s, %r, %s" % (
                label, proto.group(1) if proto else "?", alpn.group(1) if alpn else None,
                status.group(1) if status else None, seen))
        return errs

    def tls_handshake(self, ctx, name, source=None):
        """A TLS connection with <ctx> (SNI <name>), no request: (the peer's DER leaf,
        its certificate as a dict, the protocol version, the ALPN protocol)."""
        c = Conn(self.port, 5, ctx, source, name)
        self.bare.add(c.client)
        try:
            return (c.s.getpeercert(True), c.s.getpeercert(), c.s.version(),
                    c.s.selected_alpn_protocol())
        finally:
            c.close()

    def tls_cert(self):
        errs = []
        leaf = pem_ders(read_text(self.pki["leaf"]))[0]
        chain = pem_ders(read_text(self.pki["chain"]))
        for label, ctx, sni, want_alpn in (
                ("by address, ALPN h2 and http/1.1",
                 tls_client(self.pki["ca"], ["h2", "http/1.1"]), "127.0.0.1", "http/1.1"),
                ("by name, ALPN h2 alone", tls_client(self.pki["ca"], ["h2"]), TLS_NAME, None),
                ("SNI other.test (name not checked), no ALPN",
                 tls_client(self.pki["ca"], check_hostname=False), "other.test", None)):
            try:
                der, cert, version, alpn = self.tls_handshake(ctx, sni)
            except (OSError, ssl.SSLError) as e:
                errs.append("%s: the handshake: %s: %s" % (label, type(e).__name__, e))
                continue
            subject = dict(x[0] for x in cert.get("subject", ()))
            issuer = dict(x[0] for x in cert.get("issuer", ()))
            if der != leaf or subject.get("commonName") != TLS_NAME or \
                    issuer.get("commonName") != TLS_CA_CN:
                errs.append("%s: the leaf is not the operator's: subject %r, issuer %r" % (
                    label, subject, issuer))
            if alpn != want_alpn:
                errs.append("%s: ALPN %r, want %r" % (label, alpn, want_alpn))
            if version not in ("TLSv1.2", "TLSv1.3"):
                errs.append("%s: %s" % (label, version))
        ctx = tls_client(self.pki["ca"])
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        try:
            version = self.tls_handshake(ctx, "127.0.0.1")[2]
            if version != "TLSv1.2":
                errs.append("a TLS 1.2-only client got %s" % version)
        except (OSError, ssl.SSLError) as e:
            errs.append("a TLS 1.2-only client: %s: %s" % (type(e).__name__, e))
        errs += self.tls_old()
        p = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.port,
                            "-servername", TLS_NAME, "-CAfile", self.pki["ca"],
                            "-verify_return_error", "-showcerts", "-alpn", "http/1.1"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=15, check=False)
        out = p.stdout.decode("utf-8", "replace")
        sent = pem_ders(out)
        if p.returncode != 0 or "Verify return code: 0 (ok)" not in out or sent != chain or \
                "ALPN protocol: http/1.1" not in out:
            errs.append("openssl s_client -showcerts: exit %d, %d certificates (%s the chain "
                        "file's %d), want the chain verified and ALPN http/1.1:\n%s" % (
                            p.returncode, len(sent), "as" if sent == chain else "not",
                            len(chain), out[-2500:]))
        return errs

    def tls_old(self):
        """A TLS 1.1 client is refused. When this OpenSSL cannot offer TLS 1.1, a skip
        (Pass.skip: counted in the summary; under CI=true a failure, CI_ALLOWED_SKIPS
        not naming it)."""
        name = "tls: a TLS 1.1-only client is refused"

        def cannot(why):
            self.skip(name, "this client cannot offer TLS 1.1 (%s)" % why, CI_ALLOWED_SKIPS)
            return []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.pki["ca"])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                ctx.minimum_version = ssl.TLSVersion.TLSv1
                ctx.maximum_version = ssl.TLSVersion.TLSv1_1
            ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        except (ValueError, ssl.SSLError) as e:
            return cannot("set-up: %s" % e)
        try:
            version = self.tls_handshake(ctx, "127.0.0.1")[2]
            return ["a TLS 1.1-only client was served %s" % version]
        except ssl.SSLError as e:
            if "NO_PROTOCOLS_AVAILABLE" in str(e) or "NO_CIPHERS_AVAILABLE" in str(e):
                return cannot(e)
            # The gateway's refusal of the version, as OpenSSL reports it: any other
            # failure (a certificate the client does not trust, a reset) proves nothing.
            if "PROTOCOL_VERSION" not in str(e) and "UNSUPPORTED_PROTOCOL" not in str(e):
                return ["a TLS 1.1-only client failed, but not on its version: %s" % e]
            log("# TLS 1.1 refused: %s" % e)
            return []

    def tls_headers(self):
        host = "%s:%d" % (TLS_NAME, self.port)
        sent = [("X-Forwarded-For", FORGED), ("X-Forwarded-Proto", "http"),
                ("X-Forwarded-Host", "evil.test"), ("X-Forwarded-Prefix", "/evil"),
                ("X-Forwarded-Port", "80"),
                ("Forwarded", "for=%s;proto=http;host=evil.test" % FORGED),
                ("X-Real-IP", FORGED), ("X-Internal-Token", "hunter2"), ("X-Custom", "kept")]
        target = self.target("tls-a", "/echo-tls?q=1")
        r = self.send(build("GET", target, host, sent), "GET",
                      {"sandbox": self.sid["tls-a"], "method": "GET", "path": target},
                      source="127.0.0.2")
        rec = r.json()
        if r.status != 200 or rec is None or "headers" not in rec:
            return ["the echo over TLS from 127.0.0.2: %r" % r]
        if not r.client.startswith("127.0.0.2:"):
            return ["the client bound %s, not 127.0.0.2" % r.client]
        want = {"host": [host], "x-forwarded-for": ["127.0.0.2"], "x-forwarded-proto": ["https"],
                "x-forwarded-host": [host], "x-forwarded-prefix": [self.target("tls-a")],
                "x-custom": ["kept"]}
        errs = forwarding_errs(header_map(rec), want, "127.0.0.2", "https", host,
                               ("x-real-ip", "x-internal-token", "x-forwarded-port"))
        leaked = [(k, v) for k, v in rec["headers"] if FORGED in v or "evil" in v or
                  "hunter" in v or v == "http"]
        if leaked:
            errs.append("a forged value reached the agent: %r" % leaked)
        return errs

    def tls_keepalive(self):
        errs = []
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=5, context=self.tls,
                                           source_address=("127.0.0.4", 0))
        first = None
        try:
            for n in range(1, 6):
                method = "POST" if n == 3 else "GET"
                body = bytes(range(256)) * 2 if method == "POST" else None
                target = self.target("tls-a", "/ka-tls-%d" % n)
                conn.request(method, target, body=body,
                             headers={"Content-Type": "application/x"} if body else {})
                if first is None:
                    first = conn.sock
                elif conn.sock is not first:
                    errs.append("request %d went on a new connection: the one before closed"
                                % n)
                    first = conn.sock
                resp = conn.getresponse()
                data = resp.read()
                r = Resp(resp.status, resp.getheaders(), data,
                         "%s:%d" % first.getsockname()[:2])
                self.want(r, {"sandbox": self.sid["tls-a"], "method": method, "path": target})
                rec = r.json() or {}
                if r.status != 200 or rec.get("path") != "/ka-tls-%d" % n or \
                        rec.get("method") != method or rec.get("body_len") != len(body or b""):
                    errs.append("request %d (%s) on the connection: %r" % (n, method, r))
                if (r.get("Connection") or "").lower() == "close" or resp.will_close:
                    errs.append("request %d answered with Connection: close" % n)
        except (OSError, http.client.HTTPException) as e:
            errs.append("%s: %s" % (type(e).__name__, e))
        finally:
            conn.close()
        return errs

    def tls_pipelined(self):
        errs = []
        try:
            c = Conn(self.port, 5, self.tls, "127.0.0.4")
        except OSError as e:
            return ["connect: %s: %s" % (type(e).__name__, e)]
        try:
            body = b"pipelined body"
            reqs = [("GET", self.target("tls-a", "/pipe-tls-1"), b""),
                    ("POST", self.target("tls-a", "/pipe-tls-2"), body),
                    ("GET", self.target("tls-a", "/pipe-tls-3"), b"")]
            c.send(b"".join(build(m, t, self.host(), body=b) for m, t, b in reqs))
            for n, (method, target, b) in enumerate(reqs, 1):
                r = c.response(method)
                self.want(r, {"sandbox": self.sid["tls-a"], "method": method, "path": target})
                rec = r.json() or {}
                if r.status != 200 or rec.get("path") != "/pipe-tls-%d" % n or \
                        rec.get("body_len") != len(b):
                    errs.append("pipelined request %d (%s): %r" % (n, method, r))
            # Then one more whose head comes in 7-byte TLS records, 10 ms apart.
            target = self.target("tls-a", "/pipe-tls-records")
            raw = build("GET", target, self.host())
            for k in range(0, len(raw), 7):
                c.send(raw[k:k + 7])
                time.sleep(0.01)
            r = c.response()
            self.want(r, {"sandbox": self.sid["tls-a"], "method": "GET", "path": target})
            if r.status != 200 or (r.json() or {}).get("path") != "/pipe-tls-records":
                errs.append("a head in %d TLS records of 7 bytes: %r" % (
                    (len(raw) + 6) // 7, r))
        except (OSError, EOFError) as e:
            errs.append("three pipelined requests: %s: %s" % (type(e).__name__, e))
        finally:
            c.close()
        return errs

    def tls_idle(self):
        """Three connections at once: TCP that never says ClientHello, a handshake and
        then nothing, a handshake and an unfinished head."""
        errs, t0 = [], time.monotonic()
        limit = HEAD_WAIT_S
        silent = Conn(self.port, limit + 3)
        idle = Conn(self.port, limit + 3, self.tls)
        part = Conn(self.port, limit + 3, self.tls)
        self.bare |= {silent.client, idle.client}
        try:
            part.send(("GET %s HTTP/1.1\r\nHost: %s\r\n" % (
                self.target("tls-a", "/tls-slow"), self.host())).encode())
            try:
                r = part.response()
            except (OSError, EOFError) as e:
                r = Resp(client=part.client, error="%s: %s" % (type(e).__name__, e))
            secs = time.monotonic() - t0
            self.want(r, {})
            errs += ["an unfinished head over TLS: %s" % e
                     for e in refusal(r, 408, "request_timeout")]
            if not HEAD_MS / 1000 * 0.8 <= secs <= limit:
                errs.append("an unfinished head over TLS: answered after %.2fs, want about "
                            "head_ms (%d ms)" % (secs, HEAD_MS))
            for label, c in (("a TCP connection that never sends a ClientHello", silent),
                             ("a TLS connection that sends nothing", idle)):
                try:
                    closed = c.closed_within(max(0.1, limit - (time.monotonic() - t0)))
                except ConnectionResetError:
                    closed = True
                if not closed:
                    errs.append("%s: still open %.1fs after it opened" % (label, limit))
            log("# idle over TLS: all closed after %.2fs" % (time.monotonic() - t0))
        finally:
            for c in (silent, idle, part):
                c.close()
        if "/tls-slow" in self.seen_paths("tls-a"):
            errs.append("the agent saw the unfinished head")
        return errs

    def tls_websocket(self):
        target = self.target("tls-a", "/ws")
        before = len(self.seen("tls-a"))
        errs, stats = ws_check(self.port, target, self.host(), self.tls,
                               ws_plan(7, TLS_WS_MESSAGES), TLS_WS_LOCKSTEP, TLS_WS_WINDOW)
        if stats["client"] is None:
            return errs
        self.want_stream("tls-a", target, 101, stats)
        got, h = self.seen_upgrades("tls-a", before)
        if len(got) != 1 or h.get("upgrade") != ["websocket"] or \
                h.get("x-forwarded-proto") != ["https"]:
            errs.append("the agent's record of the upgrade: %r, want one GET /ws with "
                        "Upgrade: websocket and X-Forwarded-Proto: https" % got)
        log("# websocket over TLS: %s" % json.dumps(stats))
        return errs

    def tls_refusals(self):
        sid, errs, got = self.sid["tls-a"], [], []
        before = len(self.seen("tls-a"))
        escape = self.target("tls-a", "/%2e%2e/it-other/secret")
        big = self.target("tls-a", "/tls-big")
        for label, raw, method, want, status, reason in (
                ("an unknown sandbox", build("GET", PREFIX + "/it-no-such-sandbox/x",
                                             self.host()), "GET",
                 {"path": PREFIX + "/it-no-such-sandbox/x"}, 404, "ingress_not_found"),
                ("Content-Length %d" % (BODY_BYTES + 1), build(
                    "POST", big, self.host(), [("Content-Length", str(BODY_BYTES + 1))]), "POST",
                 {"sandbox": sid, "method": "POST", "path": big}, 413, "body_too_large"),
                ("a path escape", build("GET", escape, self.host()), "GET",
                 {"path": escape}, 400, "path_not_allowed")):
            r = self.send(raw, method, want, source="127.0.0.3")
            errs += ["%s: %s" % (label, e) for e in refusal(r, status, reason)]
            if r.client is not None:
                got.append((label, r.client, status, reason))
        time.sleep(0.2)
        if self.seen("tls-a")[before:]:
            errs.append("the agent saw %r" % self.seen_paths("tls-a")[before:])

        def records():
            recs = [x for x in read_audit(self.vars["audit"])[0] if x.get("event") == "ingress"]
            return {client: [x for x in recs if x.get("client") == client]
                    for _, client, _, _ in got}
        try:
            wait_for(lambda: all(records().values()), AUDIT_WAIT_S, "the refusals' records")
        except Fatal:
            pass
        recs = records()
        for label, client, status, reason in got:
            mine = recs.get(client, [])
            if len(mine) != 1 or mine[0].get("status") != status or \
                    mine[0].get("reason") != reason:
                errs.append("%s: the audit's records with client %s: %s, want one with %d %s"
                            % (label, client, json.dumps(mine)[:400], status, reason))
        return errs

    def tls_failed(self):
        """Two handshakes that fail, each from its own address, then their records."""
        import ssl
        clients = {}
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                     source_address=("127.0.0.7", 0))
        clients["%s:%d" % s.getsockname()[:2]] = ""  # whatever OpenSSL calls it
        try:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            while s.recv(65536):
                pass
        except OSError:
            pass  # a reset ends it too
        finally:
            s.close()
        errs = []
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                     source_address=("127.0.0.8", 0))
        clients["%s:%d" % s.getsockname()[:2]] = "unknown ca"
        try:
            ssl.create_default_context().wrap_socket(s, server_hostname=TLS_NAME).close()
            errs.append("a client without the operator's CA completed its handshake")
        except ssl.SSLError as e:
            if "CERTIFICATE_VERIFY_FAILED" not in str(e).upper():
                errs.append("a client without the CA: %r, want certificate verify failed" % e)
        finally:
            s.close()

        def records():
            return {r.get("client"): r for r in read_audit(self.vars["audit"])[0]
                    if r.get("event") == "ingress" and r.get("client") in clients}
        try:
            wait_for(lambda: len(records()) == len(clients), AUDIT_WAIT_S, "audit records")
        except Fatal:
            pass
        got = records()
        for client, why in clients.items():
            r = got.get(client)
            if r is None:
                errs.append("no ingress record for the failed handshake of %s" % client)
            elif r.get("reason") != "tls_handshake_failed" or r.get("decision") != "deny" or \
                    r.get("status") is not None or r.get("sandbox") is not None or \
                    not r.get("detail") or why not in str(r.get("detail")).lower():
                errs.append("the record of %s: %s, want reason tls_handshake_failed, deny, "
                            "status and sandbox null, detail with %r" % (
                                client, json.dumps(r)[:500], why))
        return errs

    def tls_plain(self):
        errs = []
        target = self.target("tls-a", "/plain-on-tls")
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                     source_address=("127.0.0.6", 0))
        self.bare.add("%s:%d" % s.getsockname()[:2])
        data, closed, t0 = b"", False, time.monotonic()
        try:
            s.sendall(build("GET", target, self.host()))
            s.settimeout(0.5)
            while time.monotonic() - t0 < PLAIN_ON_TLS_S:
                try:
                    got = s.recv(65536)
                except socket.timeout:
                    continue
                except OSError as e:  # a reset is a close too
                    log("# plain HTTP on the TLS port: %s" % e)
                    closed = True
                    break
                if not got:
                    closed = True
                    break
                data += got
        finally:
            s.close()
        secs = time.monotonic() - t0
        log("# plain HTTP on the TLS port: %d bytes back (%r), %s after %.2fs" % (
            len(data), data[:40], "closed" if closed else "still open", secs))
        if re.match(rb"HTTP/1\.[01] 2\d\d", data):
            errs.append("answered in plain HTTP: %r" % data[:300])
        if not closed:
            errs.append("the connection was still open %ds after the request" % PLAIN_ON_TLS_S)
        time.sleep(0.2)
        if "/plain-on-tls" in self.seen_paths("tls-a"):
            errs.append("the agent got the plain request")
        target = self.target("tls-a", "/after-plain")
        r = self.send(build("GET", target, self.host()), "GET",
                      {"sandbox": self.sid["tls-a"], "method": "GET", "path": target})
        if r.status != 200 or (r.json() or {}).get("path") != "/after-plain":
            errs.append("a TLS request after it: %r, want 200" % r)
        return errs

    def tls_bad(self):
        """Each policy in its own socket directory, on its own free port."""
        pki, errs = self.pki, []
        if pki is None:
            return ["not run: the operator's certificate was not made (above)"]
        missing_cert = os.path.join(self.tmp, "tls", "no-such-chain.pem")
        missing_key = os.path.join(self.tmp, "tls", "no-such-key.pem")
        sock_dir = "/run/%s-tlsbad" % self.args.netns
        for n, (label, cert, key, named) in enumerate((
                ("a missing chain file", missing_cert, pki["key"], [missing_cert]),
                ("a missing key file", pki["chain"], missing_key, [missing_key]),
                ("the key of another leaf", pki["chain"], pki["other_key"],
                 [pki["chain"], pki["other_key"]]))):
            port = free_port()
            more = '    tls: {cert: "%s", key: "%s"}' % (cert, key)
            policy = self.render_policy("policy-tls-bad-%d.yaml" % n, port, more,
                                        sock_dir=sock_dir,
                                        audit=os.path.join(self.tmp, "audit-tls-bad.jsonl"))
            err_path = os.path.join(self.tmp, "daemon-tls-bad-%d.stderr" % n)
            p = spawn_daemon(self.procs, self.args.upns, self.args.daemon, policy, err_path,
                             mode="wb")
            try:
                wait_for(lambda: p.poll() is not None or "agentsnetd: ready" in read_text(
                    err_path), START_FAIL_S, "the daemon's exit")
            except Fatal:
                pass
            text = read_text(err_path)
            if p.poll() is None:
                self.procs.stop(p)
                errs.append("%s: the daemon still runs %ds after its start%s; stderr:\n%s" % (
                    label, START_FAIL_S, " and said it was ready" if "agentsnetd: ready" in text
                    else "", text[-2000:]))
                continue
            lines = [x for x in text.splitlines() if any(f in x for f in named)]
            log("# %s: exit %d: %s" % (label, p.returncode, lines[0] if lines else text[-300:]))
            if p.returncode == 0:
                errs.append("%s: the daemon exited 0" % label)
            if "agentsnetd: ready" in text:
                errs.append("%s: the daemon said it was ready" % label)
            if not lines:
                errs.append("%s: stderr names no file of %s:\n%s" % (label, named, text[-2000:]))
            elif named == [missing_cert] and "ingress.tls.cert" not in lines[0] or \
                    named == [missing_key] and "ingress.tls.key" not in lines[0]:
                errs.append("%s: the line does not name the policy key: %r" % (label, lines[0]))
            errs += ["%s: stderr has %r:\n%s" % (label, m, text[-3000:])
                     for m in sanitizer_marks(text)]
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                errs.append("%s: 127.0.0.1:%d accepts a connection" % (label, port))
            except OSError:
                pass
        return errs


def audit_field(got, want):
    if isinstance(want, dict):
        return isinstance(got, int) and got >= want.get("min", 0)
    if isinstance(want, str) and want.startswith("/") and isinstance(got, str):
        if len(want) > AUDIT_PATH_MAX and len(got) == AUDIT_PATH_MAX:
            return want.startswith(got)
        return got in (want, want.split("?", 1)[0])
    return got == want


# ---- set-up and tear-down -------------------------------------------------------------

# The checks the docstring's list allows to skip under CI=true (by the name Pass.skip
# is given): none.
CI_ALLOWED_SKIPS = ()

TESTS = ["static", "headers", "body_limit", "escape", "escape_forms", "isolation", "token",
         "websocket", "sse", "keepalive", "methods", "rate", "concurrent", "smuggling",
         "head_limits", "not_found", "finish", "audit", "origins", "flags", "embedded",
         "embedded_taken", "egress", "tls"]


def preflight(args):
    if os.geteuid() != 0:
        raise Skip("network namespaces need root")
    for tool in ("ip", "curl", "openssl"):
        if shutil.which(tool) is None:
            raise Skip("%s is not installed (tools/deps.sh installs it)" % tool)
    for path in (args.daemon, args.agentsnet, args.bridge):
        if not os.access(path, os.X_OK):
            raise Fatal("%s is not built (make all)" % path)


class Setup:
    def __init__(self, t):
        self.t = t
        self.home_ns = None

    def up(self):
        t, a = self.t, self.t.args
        t0 = time.monotonic()
        for sub in ("home", "sync"):
            agent_dir(os.path.join(t.tmp, sub))
        for sub in ("www", "bin", "agent-files"):
            os.mkdir(os.path.join(t.tmp, sub))
            os.chmod(os.path.join(t.tmp, sub), 0o755)
        blob = random.Random(7).randbytes(STATIC_BYTES)
        with open(os.path.join(t.tmp, "www", "blob.bin"), "wb") as f:
            f.write(blob)
        bin_dir, files = os.path.join(t.tmp, "bin"), os.path.join(t.tmp, "agent-files")
        shutil.copy2(a.agentsnet, os.path.join(bin_dir, "agentsnet"))
        shutil.copy2(a.bridge, os.path.join(bin_dir, "agentsnet-bridge"))
        for name in ("agent.py", "ws.py"):
            shutil.copy2(os.path.join(FIXTURES, name), os.path.join(files, name))
        netns_add(a.netns)
        netns_add(a.upns)
        self.home_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
        enter_netns("/run/netns/" + a.upns)
        t.port = free_port()
        sock_dir = "/run/" + a.netns
        t.vars.update({
            "tmp": t.tmp, "home": os.path.join(t.tmp, "home"), "sync": os.path.join(t.tmp, "sync"),
            "www": os.path.join(t.tmp, "www"), "static_sha256": hashlib.sha256(blob).hexdigest(),
            "agentsnet": os.path.join(bin_dir, "agentsnet"),
            "agent_py": os.path.join(files, "agent.py"), "sock_dir": sock_dir,
            "control": os.path.join(sock_dir, "control.sock"),
            "audit": os.path.join(t.tmp, "audit.jsonl"), "dns_port": free_port(),
            "port2": free_port(), "head_ms": HEAD_MS,
        })
        t.vars["policy"] = t.render_policy("policy.yaml", t.port)
        t.daemon_err = os.path.join(t.tmp, "daemon.stderr")
        t.start_daemon(t.vars["policy"])
        out = run(t.host_cmd(["sh", "-c", "readlink /proc/self/ns/net /proc/self/ns/user "
                              "/proc/self/ns/pid"])).stdout.decode().split()
        t.base_ns = {x.split(":", 1)[0]: x for x in out}
        t.ca_args = []
        t.start_agents()
        log("# fixtures ready in %.1fs (%s): public listener 127.0.0.1:%d, sandboxes %s" % (
            time.monotonic() - t0, t.tmp, t.port, " ".join(sorted(t.agents))))

    def down(self):
        t = self.t
        for role in list(t.agents):
            try:
                t.stop_agent(role)
            except Fatal as e:
                log("# %s" % e)
        t.sweep()
        if t.daemon is not None and t.daemon.poll() is None:
            for role in ("parked", "closed"):
                if role in t.sid:
                    t.ctl("sandbox rm %s" % t.sid[role])
            t0 = time.monotonic()
            errs = t.stop_daemon()
            t.result("daemon stops on SIGTERM with exit 0 and a clean stderr (%.1fs)"
                     % (time.monotonic() - t0), errs)
        elif t.daemon is not None:
            # Gone before its SIGTERM (a crash, an assertion): a failure even when every
            # test selected had passed before it went.
            t.result("daemon stops on SIGTERM with exit 0 and a clean stderr",
                     ["it had exited already, status %d; stderr:\n%s" % (
                         t.daemon.returncode, read_text(t.daemon_err)[-3000:])])
        t.procs.stop_all()
        if self.home_ns is not None:
            if ctypes.CDLL(None, use_errno=True).setns(self.home_ns, CLONE_NEWNET) != 0:
                log("# setns back: %s" % os.strerror(ctypes.get_errno()))
            os.close(self.home_ns)
        netns_del(t.args.netns)
        netns_del(t.args.upns)
        for suffix in ("", "-tls", "-tlsbad", "-origins"):
            shutil.rmtree("/run/" + t.args.netns + suffix, ignore_errors=True)


def run_pass(t, tests):
    setup = Setup(t)
    try:
        setup.up()
        # origins, flags, embedded, embedded_taken, egress and tls start daemons of their
        # own.
        run_tests(t, tests, lambda name: name not in ("origins", "flags", "embedded",
                                                      "embedded_taken", "egress", "tls"))
    finally:
        setup.down()


# ---- --self-test: the fixtures without the daemon ----------------------------------------


def self_test():
    """agent.py on a free loopback port, spoken to directly by this file's clients."""
    errs = ["ws.py: " + e for e in ws.self_test()]
    tmp = tempfile.mkdtemp(prefix="agentsnet-ig-self-")
    log_path = os.path.join(tmp, "agent.log")
    port = free_port()
    procs = Procs()
    host = "127.0.0.1:%d" % port
    try:
        p = procs.start("agent", [sys.executable, os.path.join(FIXTURES, "agent.py"), "--log",
                                  log_path, "--port", str(port)], stdout=subprocess.PIPE)
        p.stdout.readline()
        if p.stdout.readline().strip() != b"listening":
            return ["agent.py did not start"]
        c = Conn(port)
        for n in (1, 2):
            c.send(build("GET", "/echo-%d?q=1" % n, host, [("X-A", "1"), ("X-A", "2")]))
            rec = c.response().json() or {}
            if rec.get("path") != "/echo-%d?q=1" % n or header_map(rec).get("x-a") != ["1", "2"]:
                errs.append("echo %d on one connection: %r" % (n, rec))
        c.send(build("POST", "/body", host, body=b"z" * 5000))
        if (c.response("POST").json() or {}).get("body_len") != 5000:
            errs.append("a POST body was not read whole")
        c.send(b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\nhello\r\n0\r\n\r\n")
        if (c.response("POST").json() or {}).get("body_len") != 5:
            errs.append("a chunked POST body was not read")
        c.send(build("HEAD", "/head", host))
        if c.response("HEAD").status != 200:
            errs.append("HEAD")
        c.close()
        for mode in ("chunked", "close"):
            e, stats = sse_check(port, "/sse?mode=" + mode, host)
            errs += ["sse %s: %s" % (mode, x) for x in e]
            log("# self-test: sse %s arrivals %r" % (mode, stats["arrivals"]))
        e, stats = ws_check(port, "/ws", host)
        errs += ["websocket: " + x for x in e]
        log("# self-test: websocket %s" % json.dumps(stats))
        # The fixture refuses an unmasked client frame (RFC 6455 5.1): the pass relies on it.
        c = Conn(port, 5)
        c.send(build("GET", "/ws", host, [("Upgrade", "websocket"), ("Connection", "Upgrade"),
                                          ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                                          ("Sec-WebSocket-Version", "13")]))
        status, _ = c.head()
        c.send(ws.encode(ws.OP_TEXT, b"unmasked"))
        reader = ws.Reader(c.s.recv, bytes(c.buf))
        op, payload, _ = reader.message()
        if status != 101 or op != ws.OP_CLOSE or payload[:2] != b"\x03\xea":
            errs.append("an unmasked frame: %d, opcode %d %r; want a close with 1002" % (
                status, op, payload))
        c.close()
        # /hold answers only once its go file exists beside the log, and says it came.
        c = Conn(port, 5)
        c.send(build("GET", "/hold?go=self-go", host))
        c.s.settimeout(0.5)
        try:
            early = c.s.recv(65536)
        except socket.timeout:
            early = None
        c.s.settimeout(5)
        touch(os.path.join(tmp, "self-go"))
        r = c.response()
        if early is not None or r.status != 200 or (r.json() or {}).get("released") is not True:
            errs.append("/hold: %r before its go file, then %r; want nothing, then 200 with "
                        "released true" % (early, r))
        c.close()
        paths = [json.loads(x)["path"] for x in read_text(log_path).splitlines()]
        want = ["/echo-1?q=1", "/echo-2?q=1", "/body", "/chunked", "/head", "/sse?mode=chunked",
                "/sse?mode=close", "/ws", "/ws", "/hold?go=self-go"]
        if paths != want:
            errs.append("the agent's log: %r, want %r" % (paths, want))
        once_log = os.path.join(tmp, "once.log")
        port2 = free_port()
        q = procs.start("once", [sys.executable, os.path.join(FIXTURES, "agent.py"), "--log",
                                 once_log, "--port", str(port2), "--once", "1"],
                        stdout=subprocess.PIPE)
        q.stdout.readline()
        q.stdout.readline()
        r = Conn(port2)
        r.send(build("GET", "/only", "x"))
        if r.response().status != 200 or q.wait(5) != 0:
            errs.append("--once 1 did not answer one request and exit 0")
        r.close()
    except (OSError, EOFError, ValueError, subprocess.TimeoutExpired) as e:
        errs.append("%s: %s" % (type(e).__name__, e))
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    return errs


def main():
    ap = argparse.ArgumentParser(description="agentsnet ingress pass")
    add_binary_args(ap)
    add_run_args(ap, "name of the host namespace (the upstream one adds -up)")
    ap.add_argument("--tests", default=None, help="glob of test names to run")
    ap.add_argument("--self-test", action="store_true",
                    help="check the fixtures alone (no daemon, no namespaces)")
    args = ap.parse_args()
    if args.self_test:
        errs = self_test()
        for e in errs:
            log("not ok - self-test: %s" % e)
        log("ingress self-test: %s" % ("ok" if not errs else "%d failed" % len(errs)))
        return 1 if errs else 0
    resolve_binary_args(args)
    status = checked_preflight("ingress", preflight, args)
    if status is not None:
        return status
    t = Tests(args)
    t.tmp = pass_tmp("agentsnet-ig-")  # the agents write their logs here
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tests = [n for n in TESTS if not args.tests or fnmatch.fnmatch(n, args.tests)]
    return run_and_tally("ingress", t, args, lambda: run_pass(t, tests))


if __name__ == "__main__":
    sys.exit(main())
