"""The fault pass (issue 19): what the daemon does when what it depends on fails.

  - audit_full_continue: the audit log is on a 1 MiB tmpfs of its own. Once the
    disk is filled (a filler file), requests are still served (daemon.audit_failure:
    continue, the default); `stats` says audit_failing 1 and counts audit_lost; the
    file holds whole lines only (what a failed write put there is cut off again).
    Once the filler is removed, the writer finds the file again within a few seconds:
    audit_failing 0, an "audit_gap" notice whose lost count is stats' audit_lost
    and whose from..to spans the outage, stderr says so, and the records of the
    requests after it are written. Meanwhile the metrics say agentsnet_audit_failing 1
    and count the lost records.
  - audit_full_refuse: the same with audit_failure: refuse: while the disk is full,
    requests are answered 503 audit_unavailable with Retry-After (after the one whose
    records found the disk full), a public request through the gateway too, and one
    inside a fake-tier TLS session opened before, and served again once it is not.

  - audit_file_size: the daemon runs under a file size limit (RLIMIT_FSIZE, 64 KiB):
    once the audit log reaches it, each write fails (EFBIG) and is counted lost, the
    requests are served, and the daemon lives on (the writer thread blocks SIGXFSZ,
    whose default is to end the process); the file holds whole lines only.

  - upload_abandoned: an agent leaves mid-upload while the upstream reads slowly (plain
    forwarding, then the inject tier): the upstream's connection is reset within a
    second (a poll watches the agent's connection while a body goes up), not ended with
    a FIN after the buffered part.

  - upstream_reset_splice, upstream_reset_copy: an upstream that sends 64 KiB into a
    CONNECT tunnel and then resets its connection (SO_LINGER 0, once its kernel has
    them acknowledged): the agent gets all 64 KiB, then a reset (on the TCP listener;
    the Unix socket carries none, and its agent sees the end), RESET_RUNS times over
    TCP and RESET_UNIX_RUNS over the sandbox's socket; every tunnel's close record says
    upstream_reset. Once through the splice relay, once through the copy relay
    (AN_NO_SPLICE=1).
  - early_flood: an agent that sends a 4 MiB body at once behind its head (its socket's
    buffer forced to hold it all) while the upstream's listener has no room to accept for a
    second: every byte the daemon's head receive took before it stopped waits in the conn
    (however many the receive posted before the stop landed), the upload reaches the
    upstream whole once it accepts, and the agent gets its answer; never a close.
  - upstream_reset_inject: the same origin behind TLS and an inject rule, its answer a body
    its close delimits: the agent gets the 64 KiB, then its TLS ends without close_notify
    (a truncation, never the body's end), RESET_INJECT_RUNS times; each close record says
    upstream_reset.

  - upstream_fails_in_handshake: an inject upstream that holds its answer to the
    daemon's ClientHello until the agent's request waits in the daemon, then shows a
    certificate the rule does not verify (a leaf for another name), or resets the
    connection: every request is answered at once, 502 upstream_tls_failed or 502
    upstream_unreachable (the session finishes its handshake inside the write of the
    agent's request; its failure is the upstream's, never the agent's end), audited,
    HANDSHAKE_RUNS times each; the origin never reads a request.

  - tunnel_bytes_splice, tunnel_bytes_copy: an upstream streams 8 MiB into a CONNECT
    tunnel; the agent (on the sandbox's Unix socket) reads 256 KiB, stops until the
    daemon can pass on no more, and leaves: the close record's bytes_down is what the
    agent's socket took of the tunnel, byte for byte (what it read and what its receive
    queue holds), never what the daemon took from the upstream (issue 19 item 2).
    Through the splice relay and the copy relay.

  - drain: the daemon is stopped (SIGTERM) with a kept-alive connection between
    requests, a request waiting on a slow origin and an idle CONNECT tunnel, no service
    manager keeping its sockets (daemon.timeouts.drain_ms DRAIN_MS): the waiting request
    is answered 200; the kept-alive connection's next request, and a request on a new
    connection, are answered at once 503 daemon_stopping with Retry-After and
    Connection: close, and audited so; the daemon exits once the drain's time is up (the
    tunnel aborted then), not before, and says how many it aborted.

  - tls_handshake_metrics: TLS_RUNS sessions on the fake tier and TLS_RUNS requests on the
    inject tier, each a new agent session and a new upstream one: the metrics listener's
    agentsnet_tls_handshake_duration_seconds grew by 2 * TLS_RUNS on side agent and
    TLS_RUNS on side upstream; the upstream's mean is at least its origin's hold before
    answering the ClientHello (HANDSHAKE_HOLD_S), the agent's below it.
  - alerts: the anomaly detectors (docs/alerts.md). A well-behaved agent (200 requests to
    its allowed host and 5 mistakes) raises no alert; an exfiltration attempt (200 encoded
    subdomains of a refused domain) raises exactly one, refused_names, within 5 s, listed
    by `agentsnet alerts`; its profile's action quarantines the sandbox: its next request
    to an allowed host is refused 403 quarantined and audited, until root's `agentsnet
    sandbox release` (nobody's is refused), after which it is served again; a tunnel it
    held open is cut within a second of the alert, its close record saying
    quarantined; before it, an upload over the profile's ceiling through a tunnel that
    stays open is alerted while it is open (the detector counts open connections each
    second, not only at their end). agentsnet_alerts_total grows by one for each of the two
    detectors, and agentsnet_sandboxes_quarantined is 1 until the release, 0 after.
  - webhook_https: the alert webhook posts to https://localhost (daemon.alert_webhook, its
    ca_file the pass's CA, an authorization_file): while the receiver shows another CA's
    leaf for localhost, each try is abandoned in the handshake (the receiver sees "unknown
    ca") and nothing is posted; once it shows a leaf of the pass's CA, a later try
    delivers the refused_names alert of an exfiltration attempt, once, with the
    Authorization of the file; stats and the retries counter agree.
  - misdirected_refusal: inside a fake-tier TLS session, the watched sandbox sends its
    inject rule's placeholder to another host; the misdirected alert quarantines the
    sandbox (misdirected: {action: quarantine}) while the session writes its refusal:
    the agent reads the whole 403 placeholder_misdirected (its JSON body to the end)
    before the session ends, and its next CONNECT is refused 403 quarantined.
  - inject_without_ca: the daemon has no CA (the policy's daemon.ca left out): a CONNECT
    to an inject rule's host is answered 403 tier_unavailable before any resolution or
    connection (the rule's origin accepts nothing), and so is one to a fake rule's host;
    the start-up log says so; `agentsnet check` on the same file answers tier_unavailable
    for both, with its note.

  - overloaded: the daemon's least pool (daemon.conns_per_worker POOL_CONNS, one worker,
    sandbox_share_percent 100 so that no share refuses first) held whole by idle
    connections: a new connection on the agent's socket, another sandbox's, the TCP
    listener and the gateway is answered at once, unasked, 503 overloaded (Retry-After: 1,
    Connection: close, its JSON body as long as its Content-Length) and closed;
    refused_overload and agentsnet_connections_overloaded_total count each; the held ones
    are still open and served; once they close, new connections are served again; each
    refusal has its decision record (reason overloaded, status 503, the listener's sandbox).
  - overloaded_tls: the same pool held whole, with daemon.ingress.tls on: a connection to
    the gateway's TLS listener is told, unasked, the one record of a fatal internal_error
    TLS alert (no plaintext HTTP into a handshake), and a TLS client's handshake fails on
    it; each is counted and audited as overloaded with no sandbox; once the held
    connections close, a handshake completes.
  - response_truncated: an inject origin answers bodies of LIMITS_TERM_RESPONSE_BYTES_MAX
    (read from core/limits.h) + 1 bytes, by Content-Length and delimited by its close, and
    of exactly the limit: a body over it reaches the agent byte for byte up to the limit
    (less BIG_SLACK at most), then the agent's TLS ends without a close_notify (which would
    pass a close-delimited one for whole); one of the limit passes whole;
    the close records say response_truncated, response_truncated, none. About 1 GiB each:
    4 s each under the sanitized build on a quiet machine, 12 under load.

  - upstream_closes: a local rule's upstream that reads the request head and then closes
    (a FIN), or resets: 502 upstream_unreachable, audited.
  - connect_timeout: a local rule's upstream whose accept queue is full (its SYNs go
    unanswered), timeouts.connect_ms CONNECT_MS: 504 upstream_timeout after about that
    long, audited.
  - forward_keep: three plain requests on one kept-alive agent connection reach their
    origin on one connection (docs/design.md 6).
  - metrics: the metrics listener against what made each figure and against stats: a
    refused series for every code of core/reason.c's table; agentsnet_connections with
    HELD open; _accepted_total one per connection made; the relays of a tunnel; an inject
    request on a kept upstream (upstreams_reused in stats too; the second of two agent
    connections); the leaf cache; a misdirected placeholder; the audit counters;
    agentsnet_policy_generation and _policy_reloads_total after one applied reload and one
    refused.
  - check: `agentsnet check --config` on the pass's policy: `response: 200 (7 bytes)` for
    the fake rule, the inject rule's `inject:` line, never its secret.
  - webhook_refused: an http:// webhook receiver that answers 400: one POST, no retry,
    webhook_failed 1, the status logged.
  - webhook_queue: NOISY sandboxes raise an alert each while the receiver holds the
    first's try: the queue takes WEBHOOK_QUEUE, the rest are dropped and counted (stats,
    metrics); at the stop the queued ones and the one in flight are dropped, logged.
  - webhook_moves: the daemon in a mount namespace whose /etc/hosts is the pass's file:
    the webhook's name first says 127.0.0.2 (a listener there ends each try), then
    127.0.0.1; a later try delivers there (the name resolved at each try, /etc/hosts
    first; resolver.hosts, which says 127.0.0.3, unused).

Runs as its own pass: python3 tests/integ/faults.py [--daemon PATH] [--tests NAME...] -v
(--netns, given by tests/integ/run.sh, is accepted and unused: loopback only).
"""

import fcntl
import http.server
import json
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import struct
import sys
import tempfile
import termios
import threading
import time

from fairness import Origin, answers_of, connect, control, egress, served
from integlib import (ROOT, make_leaf, make_pki, own_pass_args, own_pass_end, print_counts,
                      read_head,
                      read_text, recv_all, scrape, series,
                      tcp_exchange, upload_then_leave, with_daemon, Fatal)

DISK_BYTES = 1 << 20
RECOVER_S = 5  # the writer tries a failing file at least once a second
FSIZE_BYTES = 64 << 10
RESET_BYTES = 64 << 10
RESET_RUNS = 200
RESET_UNIX_RUNS = 20
RESET_INJECT_RUNS = 200
PLACEHOLDER = "agentsnet-placeholder-faults"
FLOOD_BYTES = 4 << 20
FLOOD_HOLD_S = 1.0
STREAM_BYTES = 8 << 20
STREAM_READ_BYTES = 256 << 10
HANDSHAKE_HOLD_S = 0.3
HANDSHAKE_RUNS = 20
TLS_RUNS = 5
DRAIN_MS = 3000  # the policy's daemon.timeouts.drain_ms
# The watched profile's upload ceiling (alerts.upload.bytes): t_alerts sends twice it.
UPLOAD_CEILING = 1 << 20
DELAY_S = 1.0  # DelayedOrigin's wait before it answers
WEBHOOK_AUTHORIZATION = "Bearer faults-webhook-token"  # webhook_https's authorization_file
POOL_CONNS = 16  # overloaded's daemon.conns_per_worker: the least the policy takes
CONNECT_MS = 500  # connect_timeout's daemon.timeouts.connect_ms
HELD = 5  # metrics: connections held open at once for the agentsnet_connections gauge
NOISY = 70  # webhook_queue's sandboxes, each raising an alert: past the webhook's queue
WEBHOOK_RETRY_S = 1.5  # three times the webhook's first wait before a try again (0.5 s)
# response_truncated's answers: (body bytes less LIMITS_TERM_RESPONSE_BYTES_MAX, framing).
BIG_RUNS = ((1, "length"), (1, "close"), (0, "length"))
BODY_CHUNK = bytes(range(256)) * 4096  # BigOrigin's body, 1 MiB at a time
BIG_SLACK = 64  # how far short of the limit a cut body may stop: a tail the masking holds
#                back, shorter than the secret

POLICY = """version: 1
daemon:
  socket_dir: {sock_dir}
  audit_log: {audit}
  audit_failure: {failure}
  workers: 1
{pool}  ingress: {{listen: "127.0.0.1:{ingress_port}"{ingress_tls}}}
  tcp_listen: "127.0.0.1:{tcp_port}"
  tcp_sandbox: agent
  timeouts: {{drain_ms: {drain_ms}{connect_ms}}}
  metrics: {{listen: "127.0.0.1:{metrics_port}"}}
  ca: {{cert: "{pki}/ca.pem", key: "{pki}/ca.key"}}
{webhook}resolver:
  servers: ["127.0.0.1:9"]
  hosts: {{api.internal: [127.0.0.1], mismatch.internal: [127.0.0.1], held.internal: [127.0.0.1],
          dropped.internal: [127.0.0.1], upload-tls.internal: [127.0.0.1],
          big.internal: [127.0.0.1], keep-tls.internal: [127.0.0.1],
          hook.internal: [127.0.0.3]}}
  allow_private: [127.0.0.1/32]
profiles:
  faults:
    rules:
      - {{id: model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
      - {{id: upload, host: upload.internal, tier: local, upstream: "127.0.0.1:{slow_port}",
         owner: tests, reason: a loopback origin that reads slowly}}
      - {{id: reset, host: reset.internal, tier: local, upstream: "127.0.0.1:{reset_port}",
         owner: tests, reason: a loopback origin that resets}}
      - {{id: late, host: late.internal, tier: local, upstream: "127.0.0.1:{late_port}",
         owner: tests, reason: a loopback origin that accepts late}}
      - {{id: stream, host: stream.internal, tier: local, upstream: "127.0.0.1:{stream_port}",
         owner: tests, reason: a loopback origin that streams}}
      - id: canned
        host: canned.internal
        tier: fake
        owner: tests
        reason: answered by the daemon
        responses: [{{status: 200, body: "canned\\n"}}]
      - {{id: keep, host: keep.internal, tier: local, upstream: "127.0.0.1:{keep_port}",
         owner: tests, reason: a loopback origin that keeps its connections}}
      - {{id: closes, host: closes.internal, tier: local,
         upstream: "127.0.0.1:{closes_port}", owner: tests,
         reason: a loopback origin that closes before answering}}
      - {{id: resets, host: resets.internal, tier: local,
         upstream: "127.0.0.1:{resets_port}", owner: tests,
         reason: a loopback origin that resets before answering}}
      - {{id: full, host: full.internal, tier: local, upstream: "127.0.0.1:{full_port}",
         owner: tests, reason: a loopback origin whose accept queue is full}}
      - id: keep-tls
        host: keep-tls.internal
        tier: inject
        ports: [{keep_tls_port}]
        owner: tests
        reason: a TLS origin that keeps its connections
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
      - {{id: delayed, host: delayed.internal, tier: local,
         upstream: "127.0.0.1:{delayed_port}", owner: tests,
         reason: a loopback origin that answers late}}
      - id: inject
        host: api.internal
        tier: inject
        ports: [{tls_reset_port}]
        owner: tests
        reason: a TLS origin that resets
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
      - id: upload-tls
        host: upload-tls.internal
        tier: inject
        ports: [{slow_tls_port}]
        owner: tests
        reason: a TLS origin that reads slowly
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
      - id: mismatch
        host: mismatch.internal
        tier: inject
        ports: [{mismatch_port}]
        owner: tests
        reason: a TLS origin whose certificate names another host
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
      - id: held
        host: held.internal
        tier: inject
        ports: [{held_port}]
        owner: tests
        reason: a TLS origin that holds its answer to the ClientHello
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
      - id: dropped
        host: dropped.internal
        tier: inject
        ports: [{dropped_port}]
        owner: tests
        reason: an origin that resets before its handshake
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
      - id: big
        host: big.internal
        tier: inject
        ports: [{big_port}]
        owner: tests
        reason: a TLS origin that answers a body as long as its request asks
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
  watched:
    alerts:
      refused_names: {{action: quarantine}}
      upload: {{bytes: {upload_ceiling}, window_s: 60}}
      misdirected: {{action: quarantine}}
    rules:
      - id: watched-api
        host: api.internal
        tier: inject
        ports: [{tls_reset_port}]
        owner: tests
        reason: the placeholder misdirected_refusal sends elsewhere
        inject: {{header: Authorization, prefix: "Bearer ", placeholder: {placeholder},
                 secret_file: "{pki}/secret.txt"}}
        upstream_ca: "{pki}/ca.pem"
      - id: watched-canned
        host: canned.internal
        tier: fake
        owner: tests
        reason: answered by the daemon
        responses: [{{status: 200, body: "canned\\n"}}]
      - {{id: watched-model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
      - {{id: watched-sink, host: sink.internal, tier: local,
         upstream: "127.0.0.1:{sink_port}", owner: tests,
         reason: an upload that stays open; a tunnel open at the alert}}
  noisy:
    alerts:
      refused_names: {{threshold: 1}}
    rules:
      - {{id: noisy-model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
sandboxes:
  - {{id: agent, profile: faults}}
  - {{id: watched, profile: watched}}
{sandboxes}"""


def stats(v):
    """The control socket's stats line as a dict of integers."""
    words = control(v, "stats").split()
    if not words or words[0] != "ok":
        raise Fatal("stats: %r" % words)
    return {k: int(x) for k, x in zip(words[1::2], words[2::2])}


def within(pred, seconds):
    """Whether <pred> holds within <seconds>."""
    deadline = time.monotonic() + seconds
    while not pred():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def fill(path):
    """Writes zeros to <path> until the file system is full, to its last byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 4096, 1):
            while True:
                try:
                    if os.write(fd, b"\0" * size) < size:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)


def audit_lines(path):
    """Every line of the audit file, and the ones that are not a whole JSON object."""
    text = read_text(path)
    lines = text.split("\n")
    torn = [x for x in lines[:-1] if not is_json(x)]
    if lines[-1] != "":
        torn.append(lines[-1])  # a line without its newline
    return [json.loads(x) for x in lines[:-1] if is_json(x)], torn


def is_json(line):
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def status_of(answer):
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def public_request(port):
    """One request to the gateway's public listener: what came back."""
    return tcp_exchange(port, b"GET /callbacks/agent/x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Connection: close\r\n\r\n", timeout=5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sink:
    """An origin that reads all it is sent on each connection, as fast as it comes, and
    keeps the connection open until the peer ends it: how many bytes it took so far in
    .got."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.got = 0
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        with conn:
            try:
                while True:
                    data = conn.recv(1 << 20)
                    if not data:
                        return
                    self.got += len(data)
            except OSError:
                pass


class SlowReader:
    """An origin that reads a request body slowly (a small receive buffer, 4 KiB every
    20 ms) and notes how its connection ended and when: "reset" or "eof". With <tls> (an
    ssl.SSLContext) it speaks TLS, which reads a reset and a FIN alike: the socket's TCP
    state tells them apart (CLOSE after a reset, CLOSE_WAIT after a FIN)."""

    def __init__(self, tls=None):
        self.tls = tls
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.ended = None  # ("reset" | "eof" | "state N", time.monotonic())
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        conn, _ = self.sock.accept()
        with conn:
            try:
                if self.tls is not None:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                while conn.recv(4096):
                    time.sleep(0.02)
            except (OSError, ssl.SSLError):
                pass
            state = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
            self.ended = ("reset" if state == 7 else "eof" if state == 8 else
                          "state %d" % state, time.monotonic())


class Listener:
    """A loopback TCP origin: binds a port (self.port), accepts on a thread of its own and
    gives each connection to self.answer(conn) on a thread of its own."""

    def __init__(self, backlog=64):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        raise NotImplementedError


class HookReceiver(Listener):
    """The alert webhook's receiver over TLS, for the name "localhost": until .trust() is
    called it shows the certificate of <untrusted> (an ssl.SSLContext whose leaf another
    CA signed), then that of <trusted>. Each handshake its client abandons is noted in
    .refused (time, error), each POST in .posts (time, Authorization, JSON body), and
    answered 200."""

    def __init__(self, trusted, untrusted):
        self.trusted, self.untrusted = trusted, untrusted
        self.trusted_at = None
        self.refused, self.posts = [], []
        super().__init__()

    def trust(self):
        self.trusted_at = time.monotonic()

    def answer(self, conn):
        ctx = self.trusted if self.trusted_at is not None else self.untrusted
        try:
            conn.settimeout(10)
            conn = ctx.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError) as e:
            self.refused.append((time.monotonic(), str(e)))
            conn.close()
            return
        try:
            data = read_head(conn)
            head, _, body = data.partition(b"\r\n\r\n")
            fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:]
                          if b": " in line)
            want = int(fields.get(b"Content-Length", b"0"))
            while len(body) < want:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            self.posts.append((time.monotonic(), fields.get(b"Authorization", b"").decode(),
                               json.loads(body)))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            conn.close()


class ResetOrigin(Listener):
    """An origin that, on each connection, sends RESET_BYTES at once and then resets it
    (SO_LINGER 0), once its kernel holds none of them unacknowledged (SIOCOUTQ 0), so
    that every byte is in the daemon's kernel before the reset. With <tls> (an
    ssl.SSLContext), it speaks TLS, reads a request head first and answers it with
    RESET_BYTES of a body its close delimits."""

    def __init__(self, tls=None):
        self.tls = tls
        self.payload = bytes(range(256)) * (RESET_BYTES // 256)
        super().__init__()

    def answer(self, conn):
        try:
            conn.settimeout(10)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                if b"\r\n\r\n" not in read_head(conn):
                    return
                conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + self.payload)
            else:
                conn.sendall(self.payload)
            deadline = time.monotonic() + 5
            while unacked(conn) and time.monotonic() < deadline:
                time.sleep(0.001)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()


class HeldHandshakeOrigin(Listener):
    """An origin that holds each connection HANDSHAKE_HOLD_S before it answers the
    daemon's ClientHello; then, with <tls> (an ssl.SSLContext), takes its side of the
    handshake, noting any request it reads in self.requests and answering it <reply> when
    given; without, resets it (SO_LINGER 0). self.accepted counts its connections."""

    def __init__(self, tls=None, reply=None):
        self.tls = tls
        self.reply = reply
        self.requests = 0
        self.accepted = 0
        super().__init__()

    def answer(self, conn):
        self.accepted += 1
        try:
            conn.settimeout(10)
            time.sleep(HANDSHAKE_HOLD_S)
            if self.tls is None:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            conn = self.tls.wrap_socket(conn, server_side=True)
            if read_head(conn):
                self.requests += 1
                if self.reply is not None:
                    conn.sendall(self.reply)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()


class StreamOrigin(Listener):
    """An origin that sends STREAM_BYTES on each connection as fast as it is taken, then
    closes; errors (the daemon gone) end it quietly."""

    def answer(self, conn):
        chunk = b"s" * 65536
        with conn:
            try:
                for _ in range(STREAM_BYTES // len(chunk)):
                    conn.sendall(chunk)
            except OSError:
                pass


class DelayedOrigin(Listener):
    """An origin that reads a request head, waits DELAY_S, and answers 200 with a short
    body, closing after it."""

    def answer(self, conn):
        with conn:
            try:
                conn.settimeout(10)
                if b"\r\n\r\n" in read_head(conn):
                    time.sleep(DELAY_S)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                                 b"Connection: close\r\n\r\nlate\n")
            except OSError:
                pass


def queued(sock):
    """The bytes waiting in <sock>'s receive queue (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


def t_tunnel_bytes(v, log):
    """A tunnel's bytes_down is what the agent's socket took (issue 19 item 2)."""
    errs = []
    port = v["stream"].port
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(egress(v["sock_dir"], "agent"))
    s.sendall(b"CONNECT stream.internal:%d HTTP/1.1\r\nHost: stream.internal:%d\r\n\r\n"
              % (port, port))
    head = read_head(s)
    if not head.startswith(b"HTTP/1.1 200"):
        s.close()
        return ["the CONNECT got %r" % head[:200]]
    body_before = len(head) - len(head.split(b"\r\n\r\n", 1)[0]) - 4  # read past the head
    got = body_before
    while got < STREAM_READ_BYTES:
        chunk = s.recv(min(65536, STREAM_READ_BYTES - got))
        if not chunk:
            break
        got += len(chunk)
    # Until the daemon can pass on no more: the queue stops growing.
    last, still_since = -1, time.monotonic()
    while time.monotonic() - still_since < 0.5:
        now = queued(s)
        if now != last:
            last, still_since = now, time.monotonic()
        time.sleep(0.02)
    took = got + last  # the tunnel's bytes: the CONNECT's answer is the daemon's own
    s.close()
    time.sleep(0.5)  # the daemon's close, then the writer's pass
    records, _ = audit_lines(v["audit"])
    closes = [r for r in records if r.get("event") == "close" and r.get("host") ==
              "stream.internal"]
    down = closes[-1].get("bytes_down") if closes else None
    log("tunnel left after %d bytes read, %d queued: its socket took %d; the close record "
        "says bytes_down %r" % (got, last, took, down))
    if len(closes) != 1 or down != took:
        errs.append("the close record's bytes_down is %r, want %d: what the agent's socket "
                    "took of the tunnel (%d read, %d still queued)" % (down, took, got, last))
    return errs


def unacked(sock):
    """Bytes <sock> has sent that its peer has not acknowledged (SIOCOUTQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]


def read_to_end(sock):
    """Everything <sock> sends until it ends, and how it ended: "eof" (an EOF; in TLS,
    after close_notify), "reset", "truncated" (TLS ended without close_notify),
    "timeout", or the name of another error."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data, "reset"
        except ssl.SSLEOFError:
            return data, "truncated"
        except socket.timeout:
            return data, "timeout"
        except (OSError, ssl.SSLError) as e:
            return data, type(e).__name__
        if not chunk:
            return data, "eof"
        data += chunk


def tunnel_through(sock, port):
    """CONNECT to the resetting origin on <sock>; what came after the 200's head, and how
    the stream ended (read_to_end)."""
    sock.settimeout(5)
    sock.sendall(b"CONNECT reset.internal:%d HTTP/1.1\r\nHost: reset.internal:%d\r\n\r\n"
                 % (port, port))
    data, end = read_to_end(sock)
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1.1 200"):
        return None, end, data[:200]
    return body, end, None


def t_upstream_reset(v, log):
    """An upstream that resets after 64 KiB (issue 19 item 1): the agent gets the 64 KiB
    every time, then a reset where its connection can carry one, and each close record
    says upstream_reset."""
    errs = []
    port = v["reset"].port
    want = v["reset"].payload
    short = []
    ends = {}
    for i in range(RESET_RUNS + RESET_UNIX_RUNS):
        tcp = i < RESET_RUNS
        if tcp:
            s = socket.create_connection(("127.0.0.1", v["tcp_port"]), timeout=5)
        else:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(egress(v["sock_dir"], "agent"))
        with s:
            body, end, bad = tunnel_through(s, port)
        if bad is not None:
            errs.append("tunnel %d: no 200: %r" % (i, bad))
            break
        if body != want:
            short.append(len(body))
        kind = "tcp" if tcp else "unix"
        ends.setdefault(kind, {}).setdefault(end, 0)
        ends[kind][end] += 1
    log("upstream reset after %d bytes: %d of %d tunnels short %r; ends %r" % (
        RESET_BYTES, len(short), RESET_RUNS + RESET_UNIX_RUNS, short[:10], ends))
    if short:
        errs.append("%d of %d tunnels delivered less than the %d bytes sent before the reset "
                    "(%r)" % (len(short), RESET_RUNS + RESET_UNIX_RUNS, RESET_BYTES, short[:10]))
    if ends.get("tcp") != {"reset": RESET_RUNS}:
        errs.append("on the TCP listener, the tunnels ended %r, want a reset each" %
                    ends.get("tcp"))
    if ends.get("unix") != {"eof": RESET_UNIX_RUNS}:
        errs.append("on the Unix socket, the tunnels ended %r, want the end each" %
                    ends.get("unix"))
    time.sleep(0.5)  # the writer's pass
    records, _ = audit_lines(v["audit"])
    closes = [r for r in records if r.get("event") == "close" and r.get("host") ==
              "reset.internal"]
    reasons = {}
    for r in closes:
        reasons[r.get("reason")] = reasons.get(r.get("reason"), 0) + 1
    if reasons != {"upstream_reset": RESET_RUNS + RESET_UNIX_RUNS}:
        errs.append("close records' reasons %r, want upstream_reset for each of %d" % (
            reasons, RESET_RUNS + RESET_UNIX_RUNS))
    return errs


class LateOrigin:
    """An origin whose listener has no room for a connection (backlog 0, filled by one of
    its own) for FLOOD_HOLD_S after arm(): a connect to it waits for a SYN retransmit.
    Then it accepts, reads one request with a Content-Length body and answers 200 with
    the body's length; received holds that length."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.filler = None
        self.received = None

    def arm(self):
        self.filler = socket.create_connection(("127.0.0.1", self.port))
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        time.sleep(FLOOD_HOLD_S)
        first, _ = self.sock.accept()  # the filler's
        first.close()
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(20)
            data = read_head(conn)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int([x for x in head.split(b"\r\n") if x.lower().startswith(
                b"content-length:")][0].split(b":")[1])
            got = len(body)
            while got < length:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
            self.received = got
            answer = b"%d" % got
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n"
                         b"\r\n%s" % (len(answer), answer))


def t_early_flood(v, log):
    """A body sent at once behind its head while the upstream's connect waits: it reaches
    the upstream whole and the agent gets the answer (the daemon closed such a conn
    when its head receive posted over 40 buffers before the stop landed)."""
    errs = []
    late = v["late"]
    late.arm()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, 32, 2 * FLOOD_BYTES)  # SO_SNDBUFFORCE (root)
    s.settimeout(20)
    s.connect(egress(v["sock_dir"], "agent"))
    with s:
        try:
            s.sendall(b"POST http://late.internal/ HTTP/1.1\r\nHost: late.internal\r\n"
                      b"Content-Length: %d\r\n\r\n" % FLOOD_BYTES + b"x" * FLOOD_BYTES)
            data, _ = read_to_end(s)
        except OSError as e:
            data = ("%s: %s" % (type(e).__name__, e)).encode()
    log("early flood of %d bytes: the agent got %r; the upstream received %r" % (
        FLOOD_BYTES, data[:120], late.received))
    if not data.startswith(b"HTTP/1.1 200") or not data.endswith(b"%d" % FLOOD_BYTES):
        errs.append("a %d-byte body sent at once while the connect waited: the agent got %r, "
                    "want 200 with the upstream's count" % (FLOOD_BYTES, data[:200]))
    if late.received != FLOOD_BYTES:
        errs.append("the upstream received %r bytes of the body, want %d" % (late.received,
                                                                          FLOOD_BYTES))
    return errs


def inject_exchange(v, port, agent_tls, host="api.internal", closing=False, path=b"/v1",
                    read=None):
    """CONNECT to <host>:<port> (an inject rule's TLS origin), TLS with the daemon, one
    request for <path> with the placeholder (<closing>: with Connection: close): every byte
    of the answer and how the agent's TLS ended (read_to_end: "truncated", no close_notify,
    or "eof" after one), or what <read>(the agent's TLS socket) returns instead; or None
    and what came instead of the CONNECT's 200."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(egress(v["sock_dir"], "agent"))
    with s:
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                  % (host.encode(), port, host.encode(), port))
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)
            if not chunk:
                return None, "the CONNECT got %r" % head
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            return None, "the CONNECT got %r" % head
        t = agent_tls.wrap_socket(s, server_hostname=host, suppress_ragged_eofs=False)
        t.sendall(b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n%s"
                  b"\r\n" % (path, host.encode(), port, PLACEHOLDER.encode(),
                              b"Connection: close\r\n" if closing else b""))
        return (read or read_to_end)(t)


def inject_through(v, port, agent_tls):
    """inject_exchange to the resetting origin: the answer's body and how the agent's TLS
    ended; or None and what came instead."""
    data, end = inject_exchange(v, port, agent_tls)
    if data is None:
        return None, end
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1.1 200"):
        return None, "the request got %r" % data[:200]
    return body, end


def t_upstream_reset_inject(v, log):
    """An inject upstream that resets after 64 KiB of a body its close delimits (issue 19
    item 1): the agent gets the 64 KiB every time, then a TLS truncation, and each close
    record says upstream_reset."""
    errs = []
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    want = v["tls_reset"].payload
    short, ends = [], {}
    for i in range(RESET_INJECT_RUNS):
        body, end = inject_through(v, v["tls_reset"].port, agent_tls)
        if body is None:
            errs.append("exchange %d: %s" % (i, end))
            break
        if body != want:
            short.append(len(body))
        ends[end] = ends.get(end, 0) + 1
    log("inject upstream reset after %d bytes: %d of %d answers short %r; ends %r" % (
        RESET_BYTES, len(short), RESET_INJECT_RUNS, short[:10], ends))
    if short:
        errs.append("%d of %d answers delivered less than the %d bytes sent before the reset "
                    "(%r)" % (len(short), RESET_INJECT_RUNS, RESET_BYTES, short[:10]))
    if ends != {"truncated": RESET_INJECT_RUNS} and not errs:
        errs.append("the agent's TLS ended %r, want a truncation (no close_notify) each" % ends)
    time.sleep(0.5)  # the writer's pass
    records, _ = audit_lines(v["audit"])
    reasons = {}
    for r in records:
        if r.get("event") == "close" and r.get("host") == "api.internal":
            reasons[r.get("reason")] = reasons.get(r.get("reason"), 0) + 1
    if reasons != {"upstream_reset": RESET_INJECT_RUNS} and not errs:
        errs.append("close records' reasons %r, want upstream_reset for each of %d" % (
            reasons, RESET_INJECT_RUNS))
    return errs


def t_upstream_fails_in_handshake(v, log):
    """An inject upstream whose handshake fails after the agent's request reached the
    daemon (a certificate for another name; a reset): each request is answered at once
    with the upstream's failure, and audited; nothing reaches the origin."""
    errs = []
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    for host, origin, want in (("mismatch.internal", v["mismatch"], "upstream_tls_failed"),
                               ("dropped.internal", v["dropped"], "upstream_unreachable")):
        got, slow = {}, []
        for _ in range(HANDSHAKE_RUNS):
            t0 = time.monotonic()
            data, end = inject_exchange(v, origin.port, agent_tls, host)
            took = time.monotonic() - t0
            head = (data or b"").split(b"\r\n\r\n", 1)[0].lower()
            reason = head.split(b"x-agent-reason: ", 1)[1].split(b"\r\n", 1)[0].decode() \
                if b"x-agent-reason: " in head else None
            key = "%s %s, %s" % (head.split(b"\r\n", 1)[0].decode(errors="replace")[:24],
                                 reason, end)
            got[key] = got.get(key, 0) + 1
            if took > HANDSHAKE_HOLD_S + 2:
                slow.append(round(took, 2))
        log("%s: %r; answers later than %.1f s: %r" % (host, got, HANDSHAKE_HOLD_S + 2, slow))
        want_key = "http/1.1 502 bad gateway %s, eof" % want
        if got != {want_key: HANDSHAKE_RUNS}:
            errs.append("%s (its handshake fails after the request came): answers %r; want "
                        "502 %s, then the end, for each of %d" % (host, got, want,
                                                                HANDSHAKE_RUNS))
        if slow:
            errs.append("%s: %d answers took %r s, want each within %.1f s of the request"
                        % (host, len(slow), slow, HANDSHAKE_HOLD_S + 2))
        if origin.requests:
            errs.append("%s: the origin read %d requests from sessions that failed"
                        % (host, origin.requests))
    time.sleep(0.5)  # the writer's pass
    records, _ = audit_lines(v["audit"])
    for host, want in (("mismatch.internal", "upstream_tls_failed"),
                       ("dropped.internal", "upstream_unreachable")):
        denied = sum(1 for r in records if r.get("event") == "decision" and
                     r.get("host") == host and r.get("decision") == "deny" and
                     r.get("reason") == want)
        if denied != HANDSHAKE_RUNS:
            errs.append("%s: %d decision records deny %s, want %d" % (host, denied, want,
                                                                     HANDSHAKE_RUNS))
    return errs


def abandon_upload(sock, slow, log, label):
    """Sends a body on <sock> (its head sent) until the daemon, held back by <slow>, stops
    taking it, then closes <sock>: errors unless <slow> saw its connection reset within a
    second (issue 19 item 3: 100 ms is the target; a second is the margin a loaded CI
    machine needs, and far below what the upstream's reading on would take)."""
    sent, left = upload_then_leave(sock)
    within(lambda: slow.ended is not None, 10)
    log("%s: upload abandoned after %d bytes: the upstream saw %r" % (
        label, sent, slow.ended and (slow.ended[0], round(slow.ended[1] - left, 3))))
    if slow.ended is None:
        return ["%s: the upstream's connection had not ended 10 s after the agent left"
                % label]
    if slow.ended[0] != "reset" or slow.ended[1] - left > 1.0:
        return ["%s: the agent left mid-upload; the upstream saw %s %.2f s later, want a "
                "reset at once" % (label, slow.ended[0], slow.ended[1] - left)]
    return []


def t_upload_abandoned(v, log):
    """An agent that leaves mid-upload, while the upstream reads slowly and the daemon holds
    what it could not yet pass on: the upstream's connection is reset at once (issue 19
    item 3), never ended with a FIN it would read as the body's end after reading on
    through what was buffered. Plain forwarding, then the inject tier (the agent's TLS
    ended too: a close of its socket, no close_notify)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(egress(v["sock_dir"], "agent"))
    s.sendall(b"POST http://upload.internal/ HTTP/1.1\r\nHost: upload.internal\r\n"
              b"Content-Length: 100000000\r\n\r\n")
    errs = abandon_upload(s, v["slow"], log, "forwarding")
    port = v["slow_tls"].port
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(10)
    raw.connect(egress(v["sock_dir"], "agent"))
    raw.sendall(b"CONNECT upload-tls.internal:%d HTTP/1.1\r\nHost: upload-tls.internal:%d"
                b"\r\n\r\n" % (port, port))
    head = read_head(raw)
    if not head.startswith(b"HTTP/1.1 200"):
        raw.close()
        return errs + ["inject: the CONNECT got %r" % head[:200]]
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    t = agent_tls.wrap_socket(raw, server_hostname="upload-tls.internal")
    t.sendall(b"POST /up HTTP/1.1\r\nHost: upload-tls.internal:%d\r\nAuthorization: Bearer "
              b"%s\r\nContent-Length: 50000000\r\n\r\n" % (port, PLACEHOLDER.encode()))
    return errs + abandon_upload(t, v["slow_tls"], log, "inject")


def t_audit_full_continue(v, log):
    errs = []
    path = egress(v["sock_dir"], "agent")
    for _ in range(3):
        if status_of(served(path)) != 200:
            errs.append("a request before the disk filled was not served")
    time.sleep(0.3)
    fill(v["filler"])
    answers = [status_of(served(path)) for _ in range(40)]
    log("disk full: %d of 40 served" % answers.count(200))
    if answers.count(200) != 40:
        errs.append("with the disk full and audit_failure: continue, %r, want 40 x 200"
                    % answers)
    time.sleep(0.5)
    during = stats(v)
    log("stats while full: audit_failing %d audit_lost %d" % (during.get("audit_failing", -1),
                                                              during.get("audit_lost", -1)))
    if during.get("audit_failing") != 1 or during.get("audit_lost", 0) < 40:
        errs.append("stats while the disk is full: audit_failing %r audit_lost %r, want 1 "
                    "and at least 40" % (during.get("audit_failing"), during.get("audit_lost")))
    m = series(scrape(v["metrics_port"])[2])
    failing = (m.get("agentsnet_audit_failing"), m.get("agentsnet_audit_records_lost_total"))
    log("metrics while full: agentsnet_audit_failing %r agentsnet_audit_records_lost_total %r"
        % failing)
    if failing[0] != 1 or not failing[1] or failing[1] < during.get("audit_lost", 0):
        errs.append("the metrics while the disk is full: agentsnet_audit_failing %r "
                    "agentsnet_audit_records_lost_total %r, want 1 and stats' audit_lost %r "
                    "at least" % (failing + (during.get("audit_lost"),)))
    _, torn = audit_lines(v["audit"])
    if torn:
        errs.append("the audit file holds torn lines while the disk is full: %r" % torn[:3])
    os.unlink(v["filler"])
    if not within(lambda: stats(v).get("audit_failing") == 0, RECOVER_S):
        errs.append("audit_failing still 1 %d s after the disk had room again" % RECOVER_S)
    if series(scrape(v["metrics_port"])[2]).get("agentsnet_audit_failing") != 0:
        errs.append("agentsnet_audit_failing is not 0 once the audit is written again")
    for _ in range(3):
        if status_of(served(path)) != 200:
            errs.append("a request after the disk had room was not served")
    time.sleep(0.5)
    after = stats(v)
    records, torn = audit_lines(v["audit"])
    if torn:
        errs.append("torn lines in the audit file: %r" % torn[:3])
    gaps = [r for r in records if r.get("event") == "notice" and r.get("detail") == "audit_gap"]
    if len(gaps) != 1:
        errs.append("%d audit_gap notices, want 1" % len(gaps))
    else:
        gap = gaps[0]
        log("gap notice: %r" % gap)
        if gap.get("lost") != after.get("audit_lost") or not gap.get("lost"):
            errs.append("the gap notice says %r lost, stats %r" % (gap.get("lost"),
                                                                  after.get("audit_lost")))
        if not gap.get("from") or not gap.get("to") or not gap["from"] < gap["to"] <= gap["ts"]:
            errs.append("the gap's span %r..%r (ts %r)" % (gap.get("from"), gap.get("to"),
                                                           gap.get("ts")))
        late = [r for r in records[records.index(gap):] if r.get("event") == "decision"]
        if len(late) < 3:
            errs.append("%d decision records after the gap notice, want the 3 requests'"
                        % len(late))
    if "audit: writing again" not in read_text(v["err"]):
        errs.append("stderr does not say the audit is written again")
    return errs


def t_audit_full_refuse(v, log):
    errs = []
    path = egress(v["sock_dir"], "agent")
    if status_of(served(path)) != 200:
        errs.append("a request before the disk filled was not served")
    # A fake session opened (and one request served in it) while the audit is written.
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    session = fake_session(v, agent_tls)
    session.sendall(b"GET / HTTP/1.1\r\nHost: canned.internal\r\n\r\n")
    if status_of(read_answer(session)) != 200:
        errs.append("a request in a fake session before the disk filled was not served")
    time.sleep(0.3)
    fill(v["filler"])
    answers = [served(path) for _ in range(10)]
    time.sleep(0.3)
    answers += [served(path) for _ in range(5)]
    codes = [status_of(a) for a in answers]
    log("disk full, refuse: %r" % codes)
    refused = [a for a in answers[-5:] if status_of(a) == 503]
    if len(refused) != 5:
        errs.append("with the disk full and audit_failure: refuse, the last 5 answers were %r,"
                    " want 503 each" % codes[-5:])
    for a in refused[:1]:
        head = a.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        if "x-agent-reason: audit_unavailable" not in head or "retry-after: 1" not in head:
            errs.append("the refusal's head: %r" % head)
    # A public request through the gateway is refused the same way, before its routing.
    public = public_request(v["ingress_port"])
    if status_of(public) != 503 or b"audit_unavailable" not in public:
        errs.append("a public request while the disk is full: %r, want 503 audit_unavailable"
                    % public[:200])
    # And a request inside the terminated tunnel opened before.
    session.sendall(b"GET / HTTP/1.1\r\nHost: canned.internal\r\n\r\n")
    inside = read_answer(session)
    session.close()
    log("disk full, refuse: inside a fake session %r" % inside[:60])
    if status_of(inside) != 503 or "x-agent-reason: audit_unavailable" not in \
            head_of(inside) or "retry-after: 1" not in head_of(inside):
        errs.append("a request inside a fake session while the disk is full: %r, want 503 "
                    "audit_unavailable with Retry-After: 1" % inside[:300])
    os.unlink(v["filler"])
    if not within(lambda: stats(v).get("audit_failing") == 0, RECOVER_S):
        errs.append("audit_failing still 1 %d s after the disk had room again" % RECOVER_S)
    got = status_of(served(path))
    if got != 200:
        errs.append("after the disk had room again: %r, want 200" % got)
    return errs


def t_audit_file_size(v, log):
    errs = []
    path = egress(v["sock_dir"], "agent")
    answers = [status_of(served(path)) for _ in range(300)]
    time.sleep(0.5)
    now = stats(v)
    log("file size limit: %d of 300 served, audit_lost %d" % (answers.count(200),
                                                             now.get("audit_lost", -1)))
    if answers.count(200) != 300:
        errs.append("under a file size limit, %d of 300 requests served" % answers.count(200))
    if now.get("audit_lost", 0) == 0 or now.get("audit_failing") != 1:
        errs.append("stats at the file size limit: audit_lost %r audit_failing %r"
                    % (now.get("audit_lost"), now.get("audit_failing")))
    _, torn = audit_lines(v["audit"])
    if torn:
        errs.append("torn lines at the file size limit: %r" % torn[:3])
    return errs


def answer_on(sock):
    """The answer <sock> reads up to its end (or 5 s): every byte, b"" when none came."""
    data = b""
    sock.settimeout(5)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data


def read_answer(sock):
    """One answer on <sock>: its head, then its body to the last byte its Content-Length
    says (what a kept-alive client reads before its next request)."""
    answer = read_head(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return answer[:len(head) + 4] + body


def still_open(sock):
    """Whether the peer has not ended <sock> (reset or EOF) yet; nothing is read."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(5)


def head_of(answer):
    return answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()


def fake_session(v, agent_tls):
    """A TLS session with the daemon through a CONNECT to canned.internal (the fake tier)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(egress(v["sock_dir"], "agent"))
    s.sendall(b"CONNECT canned.internal:443 HTTP/1.1\r\nHost: canned.internal:443\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            raise Fatal("the CONNECT to canned.internal got %r" % head)
        head += chunk
    return agent_tls.wrap_socket(s, server_hostname="canned.internal")


def t_drain(v, log):
    errs = []
    path = egress(v["sock_dir"], "agent")
    get = b"GET http://model.internal/x HTTP/1.1\r\nHost: model.internal\r\n\r\n"
    kept = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    kept.connect(path)
    kept.settimeout(5)
    kept.sendall(get)
    first = read_answer(kept)
    if status_of(first) != 200 or "connection: close" in head_of(first):
        errs.append("the kept-alive connection's first answer: %r" % first[:200])
    waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    waiting.connect(path)
    waiting.sendall(b"GET http://delayed.internal/ HTTP/1.1\r\nHost: delayed.internal\r\n\r\n")
    tunnel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tunnel.connect(path)
    tunnel.settimeout(5)
    tunnel.sendall(b"CONNECT model.internal:80 HTTP/1.1\r\nHost: model.internal:80\r\n\r\n")
    if status_of(read_head(tunnel)) != 200:
        errs.append("the tunnel was not opened")
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect(path)
    idle.settimeout(5)
    idle.sendall(get)
    if status_of(read_answer(idle)) != 200:
        errs.append("the idle connection's first request was not served")
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    sessions = [fake_session(v, agent_tls) for _ in range(2)]
    for session in sessions:
        session.sendall(b"GET / HTTP/1.1\r\nHost: canned.internal\r\n\r\n")
        answer = read_answer(session)
        if status_of(answer) != 200 or not answer.endswith(b"canned\n"):
            errs.append("a fake session's first request: %r" % answer[:200])
    time.sleep(0.3)  # the delayed request is with its origin
    stopped = time.monotonic()
    v["daemon"].send_signal(signal.SIGTERM)
    time.sleep(0.2)  # the drain has begun
    kept.sendall(get)
    again = answer_on(kept)
    fresh = served(path)
    public = public_request(v["ingress_port"])
    sessions[0].sendall(b"GET / HTTP/1.1\r\nHost: canned.internal\r\n\r\n")
    inside = answer_on(sessions[0])
    late = answer_on(waiting)
    quiet = []
    for what, sock in (("a kept-alive connection", idle), ("a fake session", sessions[1])):
        end = answer_on(sock)
        quiet.append(time.monotonic() - stopped)
        if end:
            errs.append("%s quiet through the drain got %r, want its end" % (what, end[:100]))
        # Not before LIMITS_DRAIN_IDLE_MS (1 s); and by that limit, not the drain's end:
        # the tunnel, which the drain aborts only at its end, must still be open (an
        # order of events, where a bound on the time would flake on a slow machine).
        if quiet[-1] < 0.7:
            errs.append("%s quiet through the drain ended %.2f s after SIGTERM, before "
                        "LIMITS_DRAIN_IDLE_MS (1 s)" % (what, quiet[-1]))
        if not still_open(tunnel):
            errs.append("%s quiet through the drain ended %.2f s after SIGTERM, once the "
                        "tunnel was cut: at the drain's end, not LIMITS_DRAIN_IDLE_MS"
                        % (what, quiet[-1]))
    log("during the drain: kept-alive %r; new %r; public %r; in a fake session %r; in flight "
        "%r; the quiet ones ended %.2f s and %.2f s after SIGTERM" % (
            again[:12], fresh[:12], public[:12], inside[:12], late[:12], quiet[0], quiet[1]))
    for what, answer in (("the kept-alive connection's next request", again),
                         ("a request on a new connection", fresh),
                         ("a public request through the gateway", public),
                         ("a request in a fake session", inside)):
        head = head_of(answer)
        if (status_of(answer) != 503 or "x-agent-reason: daemon_stopping" not in head or
                "retry-after: 2" not in head or "connection: close" not in head):
            errs.append("%s during the drain: %r, want 503 daemon_stopping with Retry-After: 2 "
                        "and Connection: close" % (what, answer[:300]))
    if status_of(late) != 200 or not late.endswith(b"late\n"):
        errs.append("the request in flight when the drain began: %r, want its 200" % late[:300])
    code = v["daemon"].wait(DRAIN_MS / 1000 * 5 + 10)
    took = time.monotonic() - stopped
    log("exit %d %.2f s after SIGTERM (drain_ms %d)" % (code, took, DRAIN_MS))
    # Not before drain_ms (the tunnel holds the drain); the upper bound, five times it,
    # only catches a drain that never ends.
    if not DRAIN_MS / 1000 - 0.3 <= took <= DRAIN_MS / 1000 * 5:
        errs.append("the daemon exited %.2f s after SIGTERM, want the drain's %.1f s (the "
                    "tunnel holds it)" % (took, DRAIN_MS / 1000))
    if "1 connections left to abort" not in read_text(v["err"]):
        errs.append("stderr does not say the drain left the tunnel to abort")
    records, _ = audit_lines(v["audit"])
    stopping = [r for r in records  # decisions, and the gateway's "ingress" record
                if r.get("event") != "close" and r.get("reason") == "daemon_stopping"]
    if len(stopping) != 4 or any(r.get("status") != 503 for r in stopping):
        errs.append("daemon_stopping records: %r, want the 4 refusals with status 503"
                    % stopping)
    for s in [kept, waiting, tunnel, idle] + sessions:
        s.close()
    return errs


def t_tls_handshake_metrics(v, log):
    """The TLS handshake histogram counts each completed handshake once, by side, and
    times it."""
    errs = []
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    key = "agentsnet_tls_handshake_duration_seconds_%s{side=\"%s\"}"
    before = series(scrape(v["metrics_port"])[2])
    for i in range(TLS_RUNS):
        with fake_session(v, agent_tls) as t:
            t.sendall(b"GET / HTTP/1.1\r\nHost: canned.internal\r\nConnection: close\r\n\r\n")
            answer, _ = read_to_end(t)
        if not answer.startswith(b"HTTP/1.1 200"):
            errs.append("fake session %d: %r" % (i, answer[:100]))
        data, end = inject_exchange(v, v["held"].port, agent_tls, host="held.internal",
                                    closing=True)
        if data is None or not data.startswith(b"HTTP/1.1 200"):
            errs.append("inject exchange %d: %r" % (i, end if data is None else data[:100]))
    time.sleep(0.3)  # the workers publish
    after = series(scrape(v["metrics_port"])[2])

    def grew(what, side):
        k = key % (what, side)
        return after.get(k, 0) - before.get(k, 0)
    counts = {side: grew("count", side) for side in ("agent", "upstream")}
    means = {side: grew("sum", side) / counts[side] if counts[side] else None
             for side in ("agent", "upstream")}
    log("after %d fake sessions and %d inject requests: handshakes counted %r, mean seconds "
        "%r (the origin holds its ServerHello %.1f s)" % (TLS_RUNS, TLS_RUNS, counts, means,
                                                          HANDSHAKE_HOLD_S))
    if counts != {"agent": 2 * TLS_RUNS, "upstream": TLS_RUNS}:
        errs.append("handshakes counted %r, want agent %d, upstream %d" % (
            counts, 2 * TLS_RUNS, TLS_RUNS))
    elif not (means["upstream"] >= HANDSHAKE_HOLD_S and means["agent"] < HANDSHAKE_HOLD_S):
        errs.append("mean handshake seconds %r: want the upstream's at least the origin's "
                    "hold of %.1f s, the agent's below it" % (means, HANDSHAKE_HOLD_S))
    return errs


def alert_records(v, sandbox):
    return [r for r in audit_lines(v["audit"])[0]
            if r.get("event") == "alert" and r.get("sandbox") == sandbox]


def alert_records_settled(v, sandbox, within_s=5, settle_s=0.5):
    """<sandbox>'s alert records once the audit writer has written them: the first within
    <within_s>, then whatever else comes within <settle_s> more (a second alert would)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and not alert_records(v, sandbox):
        time.sleep(0.05)
    time.sleep(settle_s)
    return alert_records(v, sandbox)


def sink_tunnel(v, egress_path, what, errs):
    """A CONNECT tunnel to the Sink through the sandbox socket <egress_path>; a refused
    CONNECT is added to <errs>, named by <what>."""
    port = v["sink"].port
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(egress_path)
    s.sendall(b"CONNECT sink.internal:%d HTTP/1.1\r\nHost: sink.internal:%d\r\n\r\n"
              % (port, port))
    head = read_head(s)
    if not head.startswith(b"HTTP/1.1 200"):
        errs.append("the watched sandbox's %s tunnel: %r" % (what, head[:200]))
    return s


def alert_metrics(v):
    """agentsnet_alerts_total{detector} and agentsnet_sandboxes_quarantined: {series: value}."""
    return {k: x for k, x in series(scrape(v["metrics_port"])[2]).items()
            if k.startswith("agentsnet_alerts_total{") or k == "agentsnet_sandboxes_quarantined"}


def t_alerts(v, log):
    """A well-behaved agent raises nothing; an exfiltration attempt one alert, which
    quarantines its sandbox until released."""
    errs = []
    agent, watched = egress(v["sock_dir"], "agent"), egress(v["sock_dir"], "watched")
    m0 = alert_metrics(v)
    for i in range(200):
        served(agent)
    for i in range(5):
        served(agent, b"typo%d.example" % i)
    # An upload over the ceiling through a tunnel that stays open: alerted as it goes.
    sink = sink_tunnel(v, watched, "upload", errs)
    sent_at = time.monotonic()
    sink.sendall(b"x" * (2 * UPLOAD_CEILING))
    uploads = []
    while time.monotonic() - sent_at < 5 and not uploads:
        time.sleep(0.1)
        uploads = [a for a in alert_records(v, "watched") if a["detector"] == "upload"]
    log("alerts: the upload through an open tunnel: %r after %.2f s, %d bytes taken" % (
        [(a["detector"], a["count"]) for a in uploads], time.monotonic() - sent_at,
        v["sink"].got))
    closed = [r for r in audit_lines(v["audit"])[0] if r.get("event") == "close" and
              r.get("sandbox") == "watched" and r.get("host") == "sink.internal"]
    if len(uploads) != 1 or closed:
        errs.append("an upload of %d bytes through an open tunnel: alerts %r, close records "
                    "%r; want one upload alert while it is open" % (
                        2 * UPLOAD_CEILING, uploads, closed))
    sink.close()
    # A tunnel the watched sandbox holds open when the alert comes (the sink never ends it).
    tunnel = sink_tunnel(v, watched, "held", errs)
    tunnel.sendall(b"held open")
    t0 = time.monotonic()
    for i in range(200):
        answer = served(watched, b"%08x.exfil.example" % (i * 2654435761 % 2**32))
        if not answer.startswith(b"HTTP/1.1 403"):
            errs.append("encoded name %d: %r" % (i, answer[:80]))
            break
    alerts = []
    while time.monotonic() - t0 < 5 and not alerts:
        time.sleep(0.1)
        alerts = [a for a in alert_records(v, "watched") if a["detector"] != "upload"]
    waited = time.monotonic() - t0
    time.sleep(0.5)
    alerts = [a for a in alert_records(v, "watched") if a["detector"] != "upload"]
    calm = alert_records(v, "agent")
    log("alerts: the attempt's %r after %.2f s; the well-behaved agent's %r" % (
        [(a["detector"], a["action"], a["count"], a["suffix"]) for a in alerts], waited, calm))
    if calm:
        errs.append("the well-behaved agent raised %r" % calm)
    if len(alerts) != 1 or alerts[0]["detector"] != "refused_names" or \
            alerts[0]["action"] != "quarantine" or alerts[0]["suffix"] != "exfil.example" or \
            waited > 5:
        errs.append("the exfiltration attempt raised %r after %.1f s, want one refused_names "
                    "alert within 5 s" % (alerts, waited))
    # The quarantine cut the held tunnel: it ends (a FIN or a reset) within a second of the
    # alert.
    cut_at = None
    tunnel.settimeout(0.2)
    while cut_at is None and time.monotonic() - t0 < waited + 1:
        try:
            if not tunnel.recv(1 << 20):
                cut_at = time.monotonic()
        except ConnectionResetError:
            cut_at = time.monotonic()
        except socket.timeout:
            pass
    tunnel.close()
    log("alerts: the open tunnel %s" % ("found cut %.2f s after the attempt began" % (cut_at - t0)
                                         if cut_at else "still open"))
    if cut_at is None:
        errs.append("the watched sandbox's open tunnel still relayed 1 s after its alert")
    time.sleep(0.5)
    cut = [r for r in audit_lines(v["audit"])[0] if r.get("event") == "close" and
           r.get("sandbox") == "watched" and r.get("host") == "sink.internal"]
    if sorted(r.get("reason") for r in cut) != ["none", "quarantined"]:
        errs.append("the two tunnels' close records (the upload's, ended by the agent; the "
                    "held one, cut): %r" % cut)
    cli = os.path.join(os.path.dirname(v["daemon_path"]), "agentsnet")
    listed = subprocess.run([cli, "alerts", "--socket-dir", v["sock_dir"]],
                            capture_output=True, text=True, timeout=30)
    if listed.returncode != 0 or '"detector":"refused_names"' not in listed.stdout:
        errs.append("agentsnet alerts: exit %d %r" % (listed.returncode, listed.stdout[-300:]))
    # The metrics: one alert of each detector that fired, the sandbox in quarantine.
    m1 = alert_metrics(v)
    grew = {k: m1[k] - m0.get(k, 0) for k in m1 if m1[k] != m0.get(k, 0)}
    log("alerts: the metrics grew %r" % grew)
    if set(m1) != set(m0) or not any(k.startswith("agentsnet_alerts_total{") for k in m1):
        errs.append("the alert series changed from %r to %r" % (sorted(m0), sorted(m1)))
    if grew != {'agentsnet_alerts_total{detector="upload"}': 1,
                'agentsnet_alerts_total{detector="refused_names"}': 1,
                "agentsnet_sandboxes_quarantined": 1}:
        errs.append("the alert metrics grew %r, want one upload and one refused_names alert, "
                    "one sandbox quarantined" % grew)
    answer = served(watched)
    if b"X-Agent-Reason: quarantined" not in answer or not answer.startswith(b"HTTP/1.1 403"):
        errs.append("a request of the quarantined sandbox got %r" % answer[:120])
    nobody = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                             "--clear-groups", cli, "sandbox", "release", "watched",
                             "--socket-dir", v["sock_dir"]], capture_output=True, text=True,
                            timeout=30)
    if nobody.returncode == 0:
        errs.append("nobody released the quarantine: %r" % nobody.stdout)
    if not served(watched).startswith(b"HTTP/1.1 403"):
        errs.append("the quarantine lifted without root's release")
    released = subprocess.run([cli, "sandbox", "release", "watched", "--socket-dir",
                               v["sock_dir"]], capture_output=True, text=True, timeout=30)
    answer = served(watched)
    if released.returncode != 0 or not answer.startswith(b"HTTP/1.1 200"):
        errs.append("after root's release (exit %d %r): %r" % (
            released.returncode, released.stdout, answer[:80]))
    if alert_metrics(v).get("agentsnet_sandboxes_quarantined") != 0:
        errs.append("agentsnet_sandboxes_quarantined %r once released, want 0" %
                    alert_metrics(v).get("agentsnet_sandboxes_quarantined"))
    time.sleep(0.5)
    refused = [r for r in audit_lines(v["audit"])[0] if r.get("event") == "decision" and
               r.get("sandbox") == "watched" and r.get("reason") == "quarantined" and
               r.get("host") == "model.internal"]
    if len(refused) != 2:
        errs.append("%d decision records of model.internal say quarantined, want 2"
                    % len(refused))
    return errs


def t_webhook_https(v, log):
    """An alert goes to an https receiver whose certificate is verified: refused while the
    receiver shows another CA's leaf for its name, delivered by a later try once it shows
    one of the policy's ca_file."""
    errs = []
    hook = v["hook"]
    watched = egress(v["sock_dir"], "watched")
    t0 = time.monotonic()
    for i in range(200):
        if not served(watched, b"%08x.exfil.example" % (i * 2654435761 % 2**32)).startswith(
                b"HTTP/1.1 403"):
            errs.append("encoded name %d was not refused" % i)
            break
    if not within(lambda: hook.refused or hook.posts, 5):
        errs.append("no try reached the receiver within 5 s of the attempt")
        return errs
    hook.trust()
    within(lambda: hook.posts, 10)
    log("webhook_https: refused handshakes %r; posts %r (trusted %.2f s after the attempt)"
        % ([(round(t - t0, 2), e) for t, e in hook.refused],
           [(round(t - t0, 2), a, b.get("detector")) for t, a, b in hook.posts],
           hook.trusted_at - t0))
    early = [p for p in hook.posts if p[0] < hook.trusted_at]
    if early:
        errs.append("the webhook posted to a receiver whose certificate no CA of its own "
                    "signed: %r" % early)
    if not any("unknown ca" in e for _, e in hook.refused):
        errs.append("the untrusted receiver's handshakes ended otherwise: %r" % hook.refused)
    if len(hook.posts) != 1 or hook.posts[0][1] != WEBHOOK_AUTHORIZATION or \
            hook.posts[0][2].get("detector") != "refused_names" or \
            hook.posts[0][2].get("sandbox") != "watched":
        errs.append("posts once trusted: %r, want one refused_names alert of watched with "
                    "Authorization %r" % (hook.posts, WEBHOOK_AUTHORIZATION))
    figures = stats(v)
    if figures["webhook_delivered"] != 1 or figures["webhook_failed"] != 0:
        errs.append("stats: webhook_delivered %d webhook_failed %d, want 1 and 0" % (
            figures["webhook_delivered"], figures["webhook_failed"]))
    retried = series(scrape(v["metrics_port"])[2]).get("agentsnet_alert_webhook_retries_total")
    if not retried or retried < len(hook.refused):
        errs.append("agentsnet_alert_webhook_retries_total %r after %d refused tries" % (
            retried, len(hook.refused)))
    return errs


def t_misdirected_refusal(v, log):
    """A refusal inside a TLS session whose alert quarantines the sandbox is still written
    whole before the session ends; the sandbox's next CONNECT is refused quarantined."""
    errs = []
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    for run in range(2):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(egress(v["sock_dir"], "watched"))
        s.sendall(b"CONNECT canned.internal:443 HTTP/1.1\r\nHost: canned.internal:443\r\n\r\n")
        head = read_head(s)
        if run == 1:
            if not head.startswith(b"HTTP/1.1 403") or b"X-Agent-Reason: quarantined" not in head:
                errs.append("the quarantined sandbox's next CONNECT got %r" % head[:200])
            s.close()
            break
        if not head.startswith(b"HTTP/1.1 200"):
            errs.append("the CONNECT to canned.internal got %r" % head[:200])
            return errs
        t = agent_tls.wrap_socket(s, server_hostname="canned.internal")
        t.sendall(b"GET / HTTP/1.1\r\nHost: canned.internal\r\nAuthorization: Bearer %s\r\n\r\n"
                  % PLACEHOLDER.encode())
        answer = b""
        try:
            while True:
                chunk = t.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except (OSError, ssl.SSLError) as e:
            log("misdirected_refusal: the session ended with %r" % e)
        t.close()
        log("misdirected_refusal: the answer %r" % answer[:120])
        if not answer.startswith(b"HTTP/1.1 403") or \
                b"X-Agent-Reason: placeholder_misdirected" not in answer or \
                not answer.rstrip().endswith(b"}"):
            errs.append("the misdirected placeholder's answer: %r, want its whole 403 "
                        "placeholder_misdirected" % answer[:300])
    alerts = alert_records_settled(v, "watched")
    if [(a["detector"], a["action"]) for a in alerts] != [("misdirected", "quarantine")]:
        errs.append("alerts %r, want one misdirected quarantine" % alerts)
    return errs


def t_inject_without_ca(v, log):
    errs = []
    dropped = v["dropped"]
    before = dropped.accepted
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(egress(v["sock_dir"], "agent"))
        s.sendall(b"CONNECT dropped.internal:%d HTTP/1.1\r\nHost: dropped.internal:%d\r\n\r\n"
                  % (dropped.port, dropped.port))
        answer = read_head(s)
    time.sleep(0.5)
    log("an inject CONNECT with no CA: %r; the origin accepted %d" % (
        answer[:60], dropped.accepted - before))
    if status_of(answer) != 403 or b"tier_unavailable" not in answer:
        errs.append("an inject CONNECT with no CA: %r, want 403 tier_unavailable" % answer[:300])
    if dropped.accepted != before:
        errs.append("the inject rule's origin was connected to %d times; a refusal for want of "
                    "a CA connects nowhere" % (dropped.accepted - before))
    # A fake rule's host over TLS needs the CA as much (docs/policy.md, rule responses).
    with connect(egress(v["sock_dir"], "agent")) as s:
        s.sendall(b"CONNECT canned.internal:443 HTTP/1.1\r\nHost: canned.internal:443\r\n\r\n")
        answer = read_head(s)
    log("a fake CONNECT with no CA: %r" % answer[:60])
    if status_of(answer) != 403 or b"X-Agent-Reason: tier_unavailable" not in answer:
        errs.append("a fake CONNECT with no CA: %r, want 403 tier_unavailable" % answer[:300])
    if "no CA (daemon.ca or --ca-dir): CONNECTs to fake-response rules are refused " \
            "tier_unavailable; plain http:// ones are answered" not in read_text(v["err"]):
        errs.append("the start-up log does not say that without a CA CONNECTs to fake rules "
                    "are refused tier_unavailable")
    # agentsnet check on the same file answers as the daemon does, with its note.
    for url in ("https://canned.internal/", "https://api.internal:%d/v1" % v["tls_reset"].port):
        code, out = check_cli(v, "--sandbox", "agent", url)
        log("agentsnet check %s with no CA: exit %d\n%s" % (url, code, out))
        lines = out.split("\n")
        if code != 1 or "reason: tier_unavailable" not in lines or not any(
                x.startswith("note: ") and "--ca-dir" in x for x in lines):
            errs.append("agentsnet check %s on a policy with no CA: exit %d %r, want 1, "
                        "tier_unavailable and a note" % (url, code, out[-600:]))
    return errs


def check_overloaded(answer):
    """The problems with <answer> as the pool's refusal (docs/reasons.md, overloaded): 503,
    X-Agent-Reason overloaded, an instruction, Retry-After: 1, Connection: close and the JSON
    body its Content-Length says; empty when it is one."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): x.strip() for k, _, x in
              (line.partition(":") for line in lines[1:])}
    errs = []
    if not sep or status_of(answer) != 503:
        errs.append("status line %r, want 503" % lines[0])
    if fields.get("x-agent-reason") != "overloaded":
        errs.append("X-Agent-Reason %r" % fields.get("x-agent-reason"))
    if not fields.get("x-agent-instruction"):
        errs.append("no X-Agent-Instruction")
    if fields.get("retry-after") != "1":
        errs.append("Retry-After %r, want 1" % fields.get("retry-after"))
    if fields.get("connection", "").lower() != "close":
        errs.append("Connection %r, want close" % fields.get("connection"))
    if fields.get("content-length") != str(len(body)):
        errs.append("Content-Length %r for a body of %d bytes" % (fields.get("content-length"),
                                                                 len(body)))
    try:
        doc = json.loads(body)
        if doc.get("reason") != "overloaded" or doc.get("status") != 503:
            errs.append("body %r" % doc)
    except ValueError:
        errs.append("body is not JSON: %r" % body[:200])
    return errs


def overloaded_count(v):
    """stats' refused_overload and the metrics' agentsnet_connections_overloaded_total."""
    return (stats(v)["refused_overload"],
            series(scrape(v["metrics_port"])[2]).get("agentsnet_connections_overloaded_total"))


def hold_pool(v, path):
    """POOL_CONNS idle connections to egress socket <path>, the worker's whole pool (the
    overloaded tests' policy): (them, None once the daemon counts them all open, else the
    problem)."""
    held = [connect(path) for _ in range(POOL_CONNS)]
    if within(lambda: stats(v)["conns"] == POOL_CONNS, 5):
        return held, None
    return held, "%d idle connections held, the daemon counts %d open, want %d" % (
        POOL_CONNS, stats(v)["conns"], POOL_CONNS)


def release_pool(v, held):
    """Closes what hold_pool opened: the problems if the daemon still counts any open."""
    for sock in held:
        sock.close()
    if within(lambda: stats(v)["conns"] == 0, 5):
        return []
    return ["%d connections still open 5 s after the held ones closed" % stats(v)["conns"]]


def t_overloaded(v, log):
    """The worker's connection pool (conns_per_worker POOL_CONNS, no share) held whole by
    idle connections: a new one, on any listener, is answered 503 overloaded at once and
    closed, counted by stats and the metrics and audited (a decision record naming the
    listener's sandbox); the held ones are still served, and once they close, new ones are
    too."""
    errs = []
    agent, watched = egress(v["sock_dir"], "agent"), egress(v["sock_dir"], "watched")
    before = overloaded_count(v)
    held, unheld = hold_pool(v, agent)
    try:
        if unheld:
            return [unheld]
        over = {"the agent's socket": connect(agent),
                "another sandbox's socket": connect(watched),
                "the TCP listener": socket.create_connection(("127.0.0.1", v["tcp_port"]),
                                                             timeout=5),
                "the gateway's listener": socket.create_connection(
                    ("127.0.0.1", v["ingress_port"]), timeout=5)}
        for what, sock in over.items():
            with sock:
                answer = recv_all(sock)  # nothing sent: what the daemon says unasked
            log("overloaded: a connection to %s with %d held: %r" % (what, POOL_CONNS,
                                                                     answer[:60]))
            bad = check_overloaded(answer)
            if bad:
                errs.append("a connection to %s with the pool's %d held: %s; got %r" % (
                    what, POOL_CONNS, "; ".join(bad), answer[:300]))
        want = (before[0] + len(over), (before[1] or 0) + len(over))
        within(lambda: overloaded_count(v) == want, 5)  # the workers publish
        after = overloaded_count(v)
        log("overloaded: refused_overload, agentsnet_connections_overloaded_total %r -> %r"
            % (before, after))
        if after != want:
            errs.append("refused_overload and agentsnet_connections_overloaded_total went "
                        "%r -> %r, want %r: one for each refusal" % (before, after, want))
        # Each refusal is audited: a decision record with the code and the listener's
        # sandbox (the TCP listener's is the agent; the gateway's none).
        want_sandboxes = ["agent", "watched", "agent", None]

        def refusals():
            return sorted((r.get("sandbox") for r in audit_lines(v["audit"])[0]
                           if r.get("event") == "decision" and r.get("reason") == "overloaded"),
                          key=str)
        within(lambda: len(refusals()) >= len(want_sandboxes), 5)  # the writer flushes
        got = refusals()
        records = [r for r in audit_lines(v["audit"])[0] if r.get("reason") == "overloaded"]
        log("overloaded: the refusals' records: %s" % records)
        if got != sorted(want_sandboxes, key=str):
            errs.append("the overloaded refusals' decision records name the sandboxes %r, "
                        "want %r: one per refusal" % (got, sorted(want_sandboxes, key=str)))
        for r in records:
            if r.get("status") != 503 or r.get("decision") != "deny":
                errs.append("an overloaded refusal's record says status %r decision %r, "
                            "want 503 deny: %r" % (r.get("status"), r.get("decision"), r))
        # The refusals took nothing from the held connections: each is open, told nothing,
        # and one asked is served (one: a forwarded request takes buffers of the worker's
        # head pool, which has as many as its conns).
        told = [x for x in answers_of(held, 0.2) if x != b""]
        if told:
            errs.append("held connections were told %r once the pool had refused" % told[:3])
        held[0].sendall(b"GET http://model.internal/x HTTP/1.1\r\nHost: model.internal\r\n"
                        b"Connection: close\r\n\r\n")
        answer = recv_all(held[0])
        if status_of(answer) != 200:
            errs.append("a held connection, asked once the pool had refused: %r" % answer[:200])
    finally:
        errs += release_pool(v, held)
    for what, answer in (("the agent's socket", served(agent)),
                         ("another sandbox's socket", served(watched))):
        if status_of(answer) != 200:
            errs.append("a request on %s once the held connections closed: %r" % (
                what, answer[:200]))
    return errs


# A fatal internal_error alert in one plaintext TLS record (RFC 8446 section 6).
TLS_INTERNAL_ERROR_ALERT = bytes((0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50))


def t_overloaded_tls(v, log):
    """With daemon.ingress.tls and the pool held whole, a client of the gateway's TLS
    listener refused at accept is told so in TLS: the one record of a fatal internal_error
    alert, never plaintext HTTP into its handshake (which a TLS client reads as a broken
    record); a TLS client's handshake fails on that alert; each refusal is audited as
    overloaded with no sandbox and counted; once the held connections close, the listener
    completes handshakes again."""
    errs = []
    agent = egress(v["sock_dir"], "agent")
    before = overloaded_count(v)
    held, unheld = hold_pool(v, agent)
    try:
        if unheld:
            return [unheld]
        with socket.create_connection(("127.0.0.1", v["ingress_port"]), timeout=5) as sock:
            answer = recv_all(sock)  # nothing sent: what the daemon says unasked
        log("overloaded_tls: a raw connection to the TLS listener: %r" % answer[:60])
        if answer != TLS_INTERNAL_ERROR_ALERT:
            errs.append("a connection to the gateway's TLS listener with the pool held was "
                        "told %r, want the TLS alert %r" % (answer[:200],
                                                            TLS_INTERNAL_ERROR_ALERT))
        client = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
        try:
            with socket.create_connection(("127.0.0.1", v["ingress_port"]), timeout=5) as raw:
                with client.wrap_socket(raw, server_hostname="gateway.internal"):
                    errs.append("a TLS handshake with the pool held completed")
        except ssl.SSLError as e:
            log("overloaded_tls: a TLS client's handshake: %s" % e)
            if "internal error" not in str(e).lower():
                errs.append("a TLS client with the pool held failed with %r, want the "
                            "internal_error alert" % str(e))
        except OSError as e:
            errs.append("a TLS client with the pool held: %s, want the internal_error "
                        "alert" % e)
        want = (before[0] + 2, (before[1] or 0) + 2)
        within(lambda: overloaded_count(v) == want, 5)  # the workers publish
        if overloaded_count(v) != want:
            errs.append("refused_overload and its metric went %r -> %r, want %r" % (
                before, overloaded_count(v), want))

        def refusals():
            return [r for r in audit_lines(v["audit"])[0]
                    if r.get("event") == "decision" and r.get("reason") == "overloaded"]
        within(lambda: len(refusals()) >= 2, 5)  # the writer flushes
        got = refusals()
        if len(got) != 2 or any(r.get("sandbox") is not None or r.get("status") != 503
                                for r in got):
            errs.append("the refusals' records: %r, want 2 overloaded, status 503, no "
                        "sandbox" % got)
    finally:
        errs += release_pool(v, held)
    client = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    try:
        with socket.create_connection(("127.0.0.1", v["ingress_port"]), timeout=5) as raw:
            with client.wrap_socket(raw, server_hostname="gateway.internal") as tls:
                log("overloaded_tls: after: a handshake, %s" % tls.version())
    except (OSError, ssl.SSLError) as e:
        errs.append("a TLS client once the held connections closed: %s" % e)
    return errs


def limit_of(name, header="limits.h"):
    """The value of <name>, a #define of core/<header> whose value is an integer expression
    of literals (such as (1ull << 30))."""
    text = read_text(os.path.join(ROOT, "core", header))
    found = re.search(r"^#define %s\s+(.+?)\s*$" % re.escape(name), text, re.M)
    if not found:
        raise Fatal("core/%s defines no %s" % (header, name))
    expr = re.sub(r"\b(\d+)(?:ull|ul|ll|u|l)\b", r"\1", found.group(1), flags=re.I)
    if not re.fullmatch(r"[0-9\s()<>*+-]+", expr):
        raise Fatal("%s is %r: not an expression of literals" % (name, found.group(1)))
    return int(eval(expr, {"__builtins__": {}}))  # digits and operators only


class BigOrigin(Listener):
    """A TLS origin (<tls>, an ssl.SSLContext) that answers GET /<n>/<framing> with a body
    of <n> bytes, byte i being i % 256, framed by a Content-Length ("length") or by its
    close ("close"), sent as fast as it is taken; then it closes (no close_notify). How the
    last answer went is in .ended: "whole", or the error that cut it and how many bytes of
    the body the origin's kernel had taken."""

    def __init__(self, tls):
        self.tls = tls
        self.ended = None
        super().__init__()

    def answer(self, conn):
        sent = 0
        try:
            conn.settimeout(30)
            conn = self.tls.wrap_socket(conn, server_side=True)
            target = read_head(conn).split(b" ", 2)[1].split(b"/")
            size, framing = int(target[1]), target[2]
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n%s\r\n"
                         % (b"Content-Length: %d\r\n" % size if framing == b"length" else
                            b"Connection: close\r\n"))
            view = memoryview(BODY_CHUNK)
            while sent < size:
                n = min(len(view), size - sent)
                conn.sendall(view[:n])
                sent += n
            self.ended = "whole"
        except (OSError, ssl.SSLError, ValueError, IndexError) as e:
            self.ended = "%s after %d" % (type(e).__name__, sent)
        finally:
            conn.close()


def read_counted(sock):
    """Reads <sock> to its end, as read_to_end does, keeping only the answer's head: (the
    head, the body's bytes, whether each byte was its offset % 256, how it ended)."""
    buf = memoryview(bytearray(1 << 20))
    check = memoryview(BODY_CHUNK + BODY_CHUNK[:256])
    head, body, ordered = b"", None, True
    while True:
        try:
            n = sock.recv_into(buf)
        except ConnectionResetError:
            return head, body, ordered, "reset"
        except ssl.SSLEOFError:
            return head, body, ordered, "truncated"
        except socket.timeout:
            return head, body, ordered, "timeout"
        except (OSError, ssl.SSLError) as e:
            return head, body, ordered, type(e).__name__
        if n == 0:
            return head, body, ordered, "eof"
        data = buf[:n]
        if body is None:
            head += bytes(data)
            if b"\r\n\r\n" not in head:
                continue
            head, _, rest = head.partition(b"\r\n\r\n")
            data, body = memoryview(rest), 0
        ordered = ordered and data == check[body % 256:body % 256 + len(data)]
        body += len(data)


def t_response_truncated(v, log):
    """On the inject tier, a response body over LIMITS_TERM_RESPONSE_BYTES_MAX is cut: the
    agent gets the body up to the cut (at the limit, less a read at most), byte for byte,
    then its connection ends short of the body (a Content-Length's, or a close-delimited
    one's: no close_notify); each close record says response_truncated. A body of exactly
    the limit passes whole."""
    errs = []
    limit = limit_of("LIMITS_TERM_RESPONSE_BYTES_MAX")
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    big = v["big"]
    for over, framing in BIG_RUNS:
        size = limit + over
        t0 = time.monotonic()
        got = inject_exchange(v, big.port, agent_tls, host="big.internal",
                              path=b"/%d/%s" % (size, framing.encode()), read=read_counted)
        took = time.monotonic() - t0
        if got[0] is None:
            errs.append("a %d-byte body (%s): %s" % (size, framing, got[1]))
            continue
        head, body, ordered, end = got
        log("response_truncated: a body of limit%+d bytes (%s): the agent got %r bytes of it "
            "(limit%+d), %s, its TLS ended %s; the origin %s; %.1f s" % (
                size - limit, framing, body, (body or 0) - limit,
                "in order" if ordered else "NOT in order", end, big.ended, took))
        what = "a body of %d bytes, the limit%+d (%s)" % (size, size - limit, framing)
        if status_of(head + b"\r\n\r\n") != 200 or body is None:
            errs.append("%s: the agent got %r, want the origin's 200" % (what, head[:200]))
            continue
        if not ordered:
            errs.append("%s: the body the agent got is not the origin's, byte for byte" % what)
        if size <= limit and (body != size or end != "eof"):
            errs.append("%s: the agent got %d bytes of it and its TLS ended %s, want it whole "
                        "(the origin's close ends it)" % (what, body, end))
        if size > limit and (not limit - BIG_SLACK <= body <= limit or end == "eof"):
            errs.append("%s: the agent got %d bytes of it and its TLS ended %s; want what came "
                        "up to the limit (within %d bytes: a tail the masking holds back), "
                        "then an end that is not the body's (a close_notify would end a "
                        "close-delimited one)" % (what, body, end, BIG_SLACK))
    want = ["response_truncated" if over > 0 else "none" for over, _ in BIG_RUNS]

    def close_reasons():
        return [r.get("reason") for r in audit_lines(v["audit"])[0]
                if r.get("event") == "close" and r.get("host") == "big.internal"]
    within(lambda: len(close_reasons()) >= len(want), 5)  # the writer's pass
    reasons = close_reasons()
    log("response_truncated: the close records' reasons %r" % reasons)
    if reasons != want:
        errs.append("the close records' reasons %r, want %r" % (reasons, want))
    return errs


class KeepOrigin(Listener):
    """An origin that answers every request head on a connection 200 with a short body
    (Content-Length: 3), keeping the connection for the next one: .accepted counts its
    connections and .requests the requests it answered. With <tls> (an ssl.SSLContext), it
    speaks TLS. With <hold> (bytes), a request whose line holds them is never answered: the
    connection is read until its peer ends it, and .held_ends gets how ("eof" or the error)."""

    def __init__(self, tls=None, hold=None):
        self.tls = tls
        self.hold = hold
        self.accepted = 0
        self.requests = 0
        self.held_ends = []
        super().__init__()

    def held(self, conn):
        try:
            while conn.recv(65536):
                pass
            self.held_ends.append("eof")
        except (OSError, ssl.SSLError) as e:
            self.held_ends.append(type(e).__name__)

    def answer(self, conn):
        self.accepted += 1
        try:
            conn.settimeout(30)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                line, data = data.split(b"\r\n", 1)[0], data.split(b"\r\n\r\n", 1)[1]
                if self.hold is not None and self.hold in line:
                    self.held(conn)
                    return
                self.requests += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()


class CloseOrigin(Listener):
    """An origin that reads a request head and then ends its connection without a byte of
    answer: with a FIN, or with <reset> a reset (SO_LINGER 0). .requests counts the heads
    it read."""

    def __init__(self, reset=False):
        self.reset = reset
        self.requests = 0
        super().__init__()

    def answer(self, conn):
        try:
            conn.settimeout(10)
            if b"\r\n\r\n" in read_head(conn):
                self.requests += 1
            if self.reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            conn.close()


class FullOrigin:
    """An origin whose listener has no room for a connection (backlog 0, filled by one of
    its own, never accepted): a connect to it waits for SYN retransmits until its caller
    gives up. close() ends both sockets."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.filler = None

    def arm(self):
        self.filler = socket.create_connection(("127.0.0.1", self.port))

    def close(self):
        for s in (self.filler, self.sock):
            if s is not None:
                s.close()


def decisions_of(v, host):
    """The decision records of <host> (reason, status), once the writer wrote them."""
    return [(r.get("reason"), r.get("status")) for r in audit_lines(v["audit"])[0]
            if r.get("event") == "decision" and r.get("host") == host]


def t_upstream_closes(v, log):
    """An upstream that closes or resets its connection after reading the request head,
    before a byte of answer: the request is answered 502 upstream_unreachable, audited."""
    errs = []
    agent = egress(v["sock_dir"], "agent")
    for host, origin in (("closes.internal", v["closes"]), ("resets.internal", v["resets"])):
        before = origin.requests
        answer = served(agent, host.encode())
        log("upstream_closes: %s (it %s after the head): %r" % (
            host, "resets" if origin.reset else "closes", answer[:120]))
        head = head_of(answer)
        if status_of(answer) != 502 or "x-agent-reason: upstream_unreachable" not in head:
            errs.append("%s, whose upstream %s before answering: %r, want 502 "
                        "upstream_unreachable" % (host, "resets" if origin.reset else
                                                  "closes", answer[:300]))
        if origin.requests != before + 1:
            errs.append("%s: the origin read %d request heads, want 1 (else the answer is "
                        "not its end's)" % (host, origin.requests - before))
        within(lambda: decisions_of(v, host), 5)  # the writer's pass
        if decisions_of(v, host) != [("upstream_unreachable", 502)]:
            errs.append("%s: decision records %r, want one upstream_unreachable 502" % (
                host, decisions_of(v, host)))
    return errs


def t_connect_timeout(v, log):
    """An upstream whose listener answers no SYN (its accept queue full): the request is
    answered 504 upstream_timeout once timeouts.connect_ms (CONNECT_MS) has passed, and
    audited so."""
    errs = []
    full = v["full"]
    full.arm()
    try:
        with connect(egress(v["sock_dir"], "agent")) as s:
            s.settimeout(CONNECT_MS / 1000 * 5 + 5)
            t0 = time.monotonic()
            s.sendall(b"GET http://full.internal/x HTTP/1.1\r\nHost: full.internal\r\n"
                      b"Connection: close\r\n\r\n")
            answer = recv_all(s)
            took = time.monotonic() - t0
    finally:
        full.close()
    log("connect_timeout: a connect that is never answered, connect_ms %d: %r after %.2f s"
        % (CONNECT_MS, answer[:120], took))
    head = head_of(answer)
    if status_of(answer) != 504 or "x-agent-reason: upstream_timeout" not in head:
        errs.append("a connect never answered, connect_ms %d: %r after %.2f s, want 504 "
                    "upstream_timeout" % (CONNECT_MS, answer[:300], took))
    elif not CONNECT_MS / 1000 * 0.9 <= took <= CONNECT_MS / 1000 * 5:
        errs.append("the 504 came %.2f s after the request, want about connect_ms's %.1f s"
                    % (took, CONNECT_MS / 1000))
    within(lambda: decisions_of(v, "full.internal"), 5)  # the writer's pass
    if decisions_of(v, "full.internal") != [("upstream_timeout", 504)]:
        errs.append("decision records %r, want one upstream_timeout 504" %
                    decisions_of(v, "full.internal"))
    return errs


def t_forward_keep(v, log):
    """Forwarding keeps the upstream for the connection's next request to the same host and
    port (docs/design.md 6): three requests on one kept-alive agent connection reach the
    origin on one connection of its."""
    errs = []
    keep = v["keep"]
    before = (keep.accepted, keep.requests)
    get = b"GET http://keep.internal/x HTTP/1.1\r\nHost: keep.internal\r\n\r\n"
    with connect(egress(v["sock_dir"], "agent")) as s:
        answers = []
        for _ in range(3):
            s.sendall(get)
            answers.append(read_answer(s))
    got = (keep.accepted - before[0], keep.requests - before[1])
    log("forward_keep: 3 requests on one agent connection: answers %r; the origin took %d "
        "connections for %d requests" % ([a[:12] for a in answers], got[0], got[1]))
    if [status_of(a) for a in answers] != [200, 200, 200]:
        errs.append("three requests on one kept-alive connection: %r, want 200 each" %
                    [a[:100] for a in answers])
    if got != (1, 3):
        errs.append("the origin took %d connections for %d requests, want 1 for the 3: the "
                    "upstream kept for the next request to its host and port" % got)
    return errs


def reason_codes():
    """Every reason code of core/reason.c's table but "none" (which refuses nothing)."""
    text = read_text(os.path.join(ROOT, "core", "reason.c"))
    codes = re.findall(r'^\s*\[REASON_[A-Z0-9_]+\]\s*=\s*\{\s*"([a-z0-9_]+)"', text, re.M)
    if len(codes) < 10:
        raise Fatal("core/reason.c: %d reason codes read, its table has more" % len(codes))
    return [c for c in codes if c != "none"]


def grown(after, before, key):
    return after.get(key, 0) - before.get(key, 0)


HOLD_RESPONSE_MS = 1000  # inject_timeout_fresh's daemon.timeouts.response_ms


def t_inject_timeout_fresh(v, log):
    """docs/reasons.md, upstream_timeout: an inject upstream that sends no response head
    within response_ms (HOLD_RESPONSE_MS here) is answered 504 to the agent, and that
    upstream, holding a request cut short, is never used again: the daemon ends its
    connection, and the next request to the rule goes on a new one (where an upstream that
    answered is reused: t_metrics, t_forward_keep)."""
    errs = []
    hold = v["keep_tls"]  # the keep-tls rule's origin, holding what asks for /hold
    hold.hold = b"/hold"
    port = hold.port
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    t0 = time.monotonic()
    got = inject_exchange(v, port, agent_tls, host="keep-tls.internal", path=b"/hold",
                          read=read_answer)
    took = time.monotonic() - t0
    first = got[1].encode() if isinstance(got, tuple) else got
    ended = within(lambda: hold.held_ends, 5 * HOLD_RESPONSE_MS / 1000)
    second = inject_exchange(v, port, agent_tls, host="keep-tls.internal", path=b"/x",
                             read=read_answer)
    second = second[1].encode() if isinstance(second, tuple) else second
    log("inject timeout: %r after %.2f s; the held upstream ended %r; then %r; the origin "
        "accepted %d, answered %d" % (first[:40], took, hold.held_ends, second[:20],
                                      hold.accepted, hold.requests))
    if status_of(first) != 504 or b"upstream_timeout" not in first:
        errs.append("a request the inject upstream never answers: %r after %.2f s, want 504 "
                    "upstream_timeout" % (first[:200], took))
    if not ended:
        errs.append("the upstream that timed out was not ended within %.1f s of the 504 (it "
                    "holds a request cut short)" % (5 * HOLD_RESPONSE_MS / 1000))
    if status_of(second) != 200 or (hold.accepted, hold.requests) != (2, 1):
        errs.append("the next request: %r, the origin accepted %d connections and answered "
                    "%d; want 200 on a new connection (2 accepted, 1 answered)" % (
                        second[:100], hold.accepted, hold.requests))
    return errs


def inject_keep_exchange(v, agent_tls):
    """One request with the placeholder on a new agent connection through the keep-tls
    inject rule: the answer, or what came instead of the CONNECT's 200."""
    port = v["keep_tls"].port
    got = inject_exchange(v, port, agent_tls, host="keep-tls.internal", read=read_answer)
    return got[1].encode() if isinstance(got, tuple) else got  # (None, why) without a 200


def t_metrics(v, log):
    """The metrics listener's counters against the events that make them and stats:
    a refused series for every reason code of core/reason.c, the connections gauge and
    accepted counter, the relays, a reused inject upstream (stats' upstreams_reused too),
    the leaf cache, a misdirected placeholder, the audit counters, the policy's generation
    and reloads, applied and refused."""
    errs = []
    agent = egress(v["sock_dir"], "agent")
    agent_tls = ssl.create_default_context(cafile=os.path.join(v["pki"], "ca.pem"))
    time.sleep(0.3)  # the start-up's publications
    m0, s0 = series(scrape(v["metrics_port"])[2]), stats(v)
    refused = {k[len('agentsnet_requests_refused_total{reason="'):-2] for k in m0
               if k.startswith('agentsnet_requests_refused_total{')}
    codes = reason_codes()
    log("metrics: %d refused series, %d codes in core/reason.c" % (len(refused), len(codes)))
    if refused != set(codes):
        errs.append("agentsnet_requests_refused_total's reasons: missing %r, not codes %r" % (
            sorted(set(codes) - refused), sorted(refused - set(codes))))
    # Connections: HELD open at once, then the gauge; accepted grows by each one made.
    held = [connect(agent) for _ in range(HELD)]
    within(lambda: stats(v)["conns"] == HELD, 5)  # the workers publish
    open_now = series(scrape(v["metrics_port"])[2]).get("agentsnet_connections")
    for s in held:
        s.close()
    if open_now != HELD:
        errs.append("agentsnet_connections %r with %d idle connections open, want %d" % (
            open_now, HELD, HELD))
    # One refused request, a tunnel with bytes each way, two inject requests on two agent
    # connections (the second on the kept upstream), a misdirected placeholder in a fake
    # session: connections HELD + 5, plus what the fake sessions took.
    denied = served(agent, b"nowhere.example")
    if status_of(denied) != 403:
        errs.append("a request to a host no rule names: %r" % denied[:100])
    with connect(agent) as s:
        s.sendall(b"CONNECT keep.internal:%d HTTP/1.1\r\nHost: keep.internal:%d\r\n\r\n"
                  % (v["keep"].port, v["keep"].port))
        if status_of(read_head(s)) != 200:
            errs.append("the tunnel to keep.internal was not opened")
        s.sendall(b"GET /x HTTP/1.1\r\nHost: keep.internal\r\n\r\n")
        if status_of(read_answer(s)) != 200:
            errs.append("the request through the tunnel was not answered")
    keep_tls = v["keep_tls"]
    answers = [inject_keep_exchange(v, agent_tls)]
    # The first agent connection's end parks its upstream: once the daemon counts no
    # connection open, the second finds it.
    within(lambda: stats(v)["conns"] == 0, 5)
    answers.append(inject_keep_exchange(v, agent_tls))
    if [status_of(a) for a in answers] != [200, 200]:
        errs.append("two inject requests: %r, want 200 each" % [a[:100] for a in answers])
    with fake_session(v, agent_tls) as t:
        t.sendall(b"GET / HTTP/1.1\r\nHost: canned.internal\r\nAuthorization: Bearer %s\r\n"
                  b"Connection: close\r\n\r\n" % PLACEHOLDER.encode())
        misdirected, _ = read_to_end(t)
    if b"placeholder_misdirected" not in misdirected:
        errs.append("the placeholder sent to canned.internal: %r" % misdirected[:200])
    made = HELD + 5
    # The policy reloaded once as it is, and once broken (a file that does not load).
    applied = control(v, "policy reload")
    with open(v["policy"], encoding="utf-8") as f:
        text = f.read()
    try:
        with open(v["policy"], "w", encoding="utf-8") as f:
            f.write(text + "\nbroken: [\n")
        broken = control(v, "policy reload")
    finally:
        with open(v["policy"], "w", encoding="utf-8") as f:
            f.write(text)
    log("metrics: reloads answered %r, then %r" % (applied.strip(), broken.strip()[:100]))
    want = {"agentsnet_connections_accepted_total": made,
            'agentsnet_requests_refused_total{reason="host_not_allowed"}': 1,
            'agentsnet_requests_refused_total{reason="placeholder_misdirected"}': 1,
            "agentsnet_placeholder_misdirected_total": 1,
            "agentsnet_upstreams_reused_total": 1,
            "agentsnet_policy_generation": 1,
            'agentsnet_policy_reloads_total{result="applied"}': 1,
            'agentsnet_policy_reloads_total{result="refused"}': 1}

    def settled():
        m = series(scrape(v["metrics_port"])[2])
        return all(grown(m, m0, k) == n for k, n in want.items()) and m
    m1 = within(settled, 5) and settled() or series(scrape(v["metrics_port"])[2])
    s1 = stats(v)
    for key, n in want.items():
        if grown(m1, m0, key) != n:
            errs.append("%s grew %r, want %d" % (key, grown(m1, m0, key), n))
    if (keep_tls.accepted, keep_tls.requests) != (1, 2):
        errs.append("the inject origin took %d connections for %d requests, want 1 for 2" % (
            keep_tls.accepted, keep_tls.requests))
    # stats and the metrics say the same of what both count.
    pairs = (("upstreams_reused", "agentsnet_upstreams_reused_total"),
             ("splice_relays", 'agentsnet_relays_total{relay="splice"}'),
             ("copy_relays", 'agentsnet_relays_total{relay="copy"}'),
             ("leaf_hits", "agentsnet_leaf_cache_hits_total"),
             ("leaf_misses", "agentsnet_leaf_cache_misses_total"),
             ("leaf_mints", "agentsnet_leaves_minted_total"),
             ("misdirected", "agentsnet_placeholder_misdirected_total"),
             ("accepted", "agentsnet_connections_accepted_total"))
    log("metrics: grown %r" % {m: (grown(s1, s0, s), grown(m1, m0, m)) for s, m in pairs})
    if grown(s1, s0, "upstreams_reused") != 1:
        errs.append("stats' upstreams_reused grew %d for an inject request on a kept upstream, "
                    "want 1" % grown(s1, s0, "upstreams_reused"))
    # The relays: the tunnel's bytes went through one relay or the other.
    relays = grown(m1, m0, 'agentsnet_relays_total{relay="splice"}') + \
        grown(m1, m0, 'agentsnet_relays_total{relay="copy"}')
    if relays < 2:
        errs.append("agentsnet_relays_total grew %r for a tunnel with bytes each way, want at "
                    "least 2" % relays)
    # The leaf cache: three agent handshakes (two inject, one fake) each looked a leaf up.
    looked = grown(m1, m0, "agentsnet_leaf_cache_hits_total") + \
        grown(m1, m0, "agentsnet_leaf_cache_misses_total")
    if looked < 3 or m1.get("agentsnet_leaves_minted_total", 0) < 1:
        errs.append("the leaf cache counted %r look-ups for 3 handshakes, %r leaves minted" % (
            looked, m1.get("agentsnet_leaves_minted_total")))
    # The audit counters: the writer's, read by both when asked (audit_failing and _lost:
    # audit_full_continue, while the disk is full).
    for _ in range(50):
        m2, s2 = series(scrape(v["metrics_port"])[2]), stats(v)
        if m2.get("agentsnet_audit_records_written_total") == s2["audit_written"]:
            break
        time.sleep(0.1)
    records = len(audit_lines(v["audit"])[0])
    if not 0 < m2.get("agentsnet_audit_records_written_total", 0) == s2["audit_written"] or \
            m2.get("agentsnet_audit_records_written_total") > records:
        errs.append("agentsnet_audit_records_written_total %r, stats' audit_written %r, the "
                    "file's records %d" % (m2.get("agentsnet_audit_records_written_total"),
                                           s2["audit_written"], records))
    for s, m in pairs:
        if s1.get(s) != m1.get(m):
            errs.append("stats' %s %r, the metrics' %s %r" % (s, s1.get(s), m, m1.get(m)))
    if (m2.get("agentsnet_audit_failing"), m2.get("agentsnet_audit_records_lost_total"),
            m2.get("agentsnet_audit_records_dropped_total")) != (0, 0, 0):
        errs.append("agentsnet_audit_failing, _lost_total, _dropped_total %r with the audit "
                    "written, want 0 each" % ((m2.get("agentsnet_audit_failing"),
                                                m2.get("agentsnet_audit_records_lost_total"),
                                                m2.get("agentsnet_audit_records_dropped_total")),))
    return errs


def check_cli(v, *args):
    """agentsnet check --config <the pass's policy> ARGS: (exit status, stdout + stderr)."""
    cli = os.path.join(os.path.dirname(v["daemon_path"]), "agentsnet")
    done = subprocess.run([cli, "check", "--config", v["policy"], "--socket-dir",
                           v["sock_dir"], *args], capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout + done.stderr


def t_check(v, log):
    """agentsnet check on the pass's policy (with a CA): a fake rule prints the response the
    request would get, `response: <status> (<n> bytes)`; an inject rule its header, its
    placeholder and require, never the secret."""
    errs = []
    secret = read_text(os.path.join(v["pki"], "secret.txt")).strip()
    code, out = check_cli(v, "--sandbox", "agent", "https://canned.internal/")
    log("check: a fake rule: exit %d\n%s" % (code, out))
    if code != 0 or "\nresponse: 200 (7 bytes)\n" not in "\n" + out or "tier: fake" not in out:
        errs.append("agentsnet check of a fake rule: exit %d %r, want 0 and `response: 200 (7 "
                    "bytes)`" % (code, out[-600:]))
    port = v["tls_reset"].port
    code, out = check_cli(v, "--sandbox", "agent", "https://api.internal:%d/v1" % port)
    log("check: an inject rule: exit %d\n%s" % (code, out))
    line = "inject: Authorization (placeholder %s, require yes)" % PLACEHOLDER
    if code != 0 or line not in out.split("\n"):
        errs.append("agentsnet check of an inject rule: exit %d %r, want 0 and %r" % (
            code, out[-600:], line))
    if secret in out:
        errs.append("agentsnet check printed the inject rule's secret")
    return errs


class PlainHook(Listener):
    """The alert webhook's receiver over plain HTTP (loopback): each POST's body in .posts
    (time, JSON), answered <status> (an int); or, with <status> None, left unanswered until
    its connection ends (the daemon's try holds it)."""

    def __init__(self, status):
        self.status = status
        self.posts = []
        super().__init__()

    def answer(self, conn):
        with conn:
            try:
                conn.settimeout(120)
                data = read_head(conn)
                head, _, body = data.partition(b"\r\n\r\n")
                want = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
                while len(body) < want:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                self.posts.append((time.monotonic(), json.loads(body)))
                if self.status is None:
                    conn.recv(1)  # until the daemon ends the try
                    return
                conn.sendall(b"HTTP/1.1 %d Refused\r\nContent-Length: 0\r\nConnection: close"
                             b"\r\n\r\n" % self.status)
            except (OSError, ValueError, AttributeError):
                pass


def webhook_counts(v):
    """stats' webhook figures and the metrics' agentsnet_alert_webhook_total{result} and
    retries: {name: value}."""
    now, m = stats(v), series(scrape(v["metrics_port"])[2])
    out = {k: now[k] for k in ("webhook_delivered", "webhook_failed", "webhook_dropped")}
    for result in ("delivered", "failed", "dropped"):
        out[result] = m.get('agentsnet_alert_webhook_total{result="%s"}' % result)
    out["retries"] = m.get("agentsnet_alert_webhook_retries_total")
    return out


def exfiltrate(v, sandbox, errs, names=200):
    """<names> refused names under exfil.example from <sandbox>: a refused_names alert."""
    path = egress(v["sock_dir"], sandbox)
    for i in range(names):
        if not served(path, b"%08x.exfil.example" % (i * 2654435761 % 2**32)).startswith(
                b"HTTP/1.1 403"):
            errs.append("%s: encoded name %d was not refused" % (sandbox, i))
            return


def t_webhook_refused(v, log):
    """A webhook receiver that answers 400 (neither 2xx nor one tried again) fails the alert
    at its first try: one POST, no retry, webhook_failed 1, the failure logged with the
    status."""
    errs = []
    hook = v["plain_hook"]
    exfiltrate(v, "watched", errs)
    within(lambda: hook.posts, 5)
    time.sleep(WEBHOOK_RETRY_S)  # a second try would have come by now
    counts = webhook_counts(v)
    log("webhook_refused: posts %d; counts %r" % (len(hook.posts), counts))
    if len(hook.posts) != 1 or hook.posts[0][1].get("detector") != "refused_names":
        errs.append("a receiver answering 400 got %d posts %r, want the alert once, never "
                    "tried again" % (len(hook.posts), [p[1] for p in hook.posts][:3]))
    if counts != {"webhook_delivered": 0, "webhook_failed": 1, "webhook_dropped": 0,
                  "delivered": 0, "failed": 1, "dropped": 0, "retries": 0}:
        errs.append("stats and metrics %r, want the one alert failed, no retry" % counts)
    logged = [x for x in read_text(v["err"]).split("\n") if "webhook" in x and "answered 400"
              in x]
    if not logged:
        errs.append("stderr does not log the receiver's 400 for the failed alert")
    return errs


def t_webhook_queue(v, log):
    """The webhook's queue holds WEBHOOK_QUEUE alerts (core/webhook.h): with the receiver
    holding the first alert's try, NOISY alerts in all find the queue full past
    WEBHOOK_QUEUE, and the newest are dropped, counted (stats webhook_dropped, the
    metrics' dropped); at the stop, the queued ones and the one in flight are dropped too,
    logged; every alert is in the audit log."""
    errs = []
    hook = v["plain_hook"]
    queue = limit_of("WEBHOOK_QUEUE", "webhook.h")
    first = egress(v["sock_dir"], "noisy-0")
    served(first, b"first.refused.example")  # a refused_names alert
    if not within(lambda: hook.posts, 5):
        return ["the first alert was not posted within 5 s"]
    for i in range(1, NOISY):
        served(egress(v["sock_dir"], "noisy-%d" % i), b"x.refused.example")
    raised = NOISY
    want_dropped = raised - 1 - queue
    within(lambda: alert_count(v) == raised and
           webhook_counts(v)["webhook_dropped"] == want_dropped, 5)
    counts = webhook_counts(v)
    log("webhook_queue: %d alerts raised (%d audited); one in flight; counts %r" % (
        raised, alert_count(v), counts))
    if alert_count(v) != raised:
        errs.append("%d alert records, want %d (one by each of %d sandboxes)" % (
            alert_count(v), raised, NOISY))
    if counts["webhook_dropped"] != want_dropped or counts["dropped"] != want_dropped:
        errs.append("webhook_dropped %r, the metrics' dropped %r, want %d: %d alerts, one in "
                    "flight, a queue of %d" % (counts["webhook_dropped"], counts["dropped"],
                                               want_dropped, raised, queue))
    if len(hook.posts) != 1:
        errs.append("the receiver got %d posts while it held the first" % len(hook.posts))
    v["daemon"].send_signal(signal.SIGTERM)
    code = v["daemon"].wait(30)
    text = read_text(v["err"])
    if code != 0 or "webhook: %d alerts not delivered: the daemon stops" % queue \
            not in text or "not delivered: the daemon stops" not in text.replace(
                "%d alerts not delivered" % queue, ""):
        errs.append("at the stop (exit %d), stderr does not say the %d queued alerts and the "
                    "one in flight were not delivered: %r" % (
                        code, queue, [x for x in text.split("\n") if "webhook" in x]))
    return errs


def alert_count(v):
    return sum(1 for r in audit_lines(v["audit"])[0] if r.get("event") == "alert")


def t_webhook_moves(v, log):
    """The webhook's name is resolved at each try, /etc/hosts first (the daemon runs in a
    mount namespace of its own, its /etc/hosts a file of the pass's): while the name says
    127.0.0.2, where another listener ends each connection at once, each try fails there;
    once the file says 127.0.0.1, the next try delivers to the receiver. The policy's
    resolver.hosts, which names 127.0.0.3 for it, is the sandboxes' and not used."""
    errs = []
    hook, wrong = v["hook"], v["wrong_hook"]
    hook.trust()
    exfiltrate(v, "watched", errs)
    if not within(lambda: wrong.accepted >= 1, 5):
        return errs + ["no try reached the address /etc/hosts first named within 5 s"]
    with open(v["hosts"], "w", encoding="ascii") as f:  # the same file, the mount's
        f.write("127.0.0.1 localhost\n127.0.0.1 hook.internal\n")
    moved = time.monotonic()
    within(lambda: hook.posts, 10)
    counts = webhook_counts(v)
    log("webhook_moves: %d tries at 127.0.0.2 before the move; posts %r %.2f s after it; "
        "counts %r" % (wrong.accepted, [(round(t - moved, 2), b.get("detector"))
                                       for t, _, b in hook.posts], time.monotonic() - moved,
                       counts))
    if len(hook.posts) != 1 or hook.posts[0][2].get("detector") != "refused_names":
        errs.append("posts to where the name moved: %r, want the alert once" % hook.posts)
    if counts["webhook_delivered"] != 1 or not counts["retries"]:
        errs.append("stats and metrics %r, want the alert delivered by a try after the first"
                    % counts)
    return errs


class Dropper(Listener):
    """A listener on 127.0.0.2:<port> that ends each connection at once; .accepted counts
    them."""

    def __init__(self, port):  # Listener's loop, on its own address
        self.accepted = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", port))
        self.sock.listen(16)
        self.port = port
        threading.Thread(target=self.serve, daemon=True).start()

    def answer(self, conn):
        self.accepted += 1
        conn.close()


def pool_section(name):
    """The policy's daemon lines for test <name> that bound its connections (the overloaded
    tests alone have them: the least pool, and no share, so that the pool runs out first)."""
    if name not in ("overloaded", "overloaded_tls"):
        return ""
    return "  conns_per_worker: %d\n  sandbox_share_percent: 100\n" % POOL_CONNS


def ingress_tls_section(name, pki):
    """The gateway's TLS for test <name> (overloaded_tls alone): a leaf for gateway.internal
    from the pass's CA (its clients connect to 127.0.0.1 and name it)."""
    if name != "overloaded_tls":
        return ""
    return ', tls: {cert: "%s/gateway.pem", key: "%s/gateway.key"}' % (pki, pki)


def webhook_section(name, v, pki):
    """The policy's daemon.alert_webhook line for test <name> (the webhook_ tests alone have
    one): https to v["hook"] by the name localhost, or hook.internal (webhook_moves); http
    to v["plain_hook"] (webhook_refused, webhook_queue; the queue's a try as long as the
    policy allows)."""
    if name in ("webhook_https", "webhook_moves"):
        return ('  alert_webhook: {url: "https://%s:%d/alert-hook", ca_file: "%s/ca.pem", '
                'authorization_file: "%s/hook.auth"}\n' % (
                    "localhost" if name == "webhook_https" else "hook.internal",
                    v["hook"].port, pki, pki))
    if name in ("webhook_refused", "webhook_queue"):
        return ('  alert_webhook: {url: "http://127.0.0.1:%d/alert-hook", timeout_ms: %d}\n'
                % (v["plain_hook"].port, 60000 if name == "webhook_queue" else 5000))
    return ""


def sandboxes_section(name):
    """The policy's sandboxes past agent and watched: webhook_queue's NOISY noisy ones."""
    if name != "webhook_queue":
        return ""
    return "".join("  - {id: noisy-%d, profile: noisy}\n" % i for i in range(NOISY))


def run_daemon(args, v, test, log):
    """Runs <test> against a daemon started with v["policy"] (under v["fsize"], a file size
    limit, when set; with v["env"] added to its environment), then stops it; returns how
    many failed (the daemon's exit too)."""
    fsize = v.get("fsize")
    env = v.get("env") or {}

    def limit():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        for key, value in env.items():
            os.environ[key] = value  # the child's, before its exec

    def body():
        try:
            errs = test(v, log)
        except (OSError, Fatal) as e:  # the daemon gone mid-test, say
            errs = ["%s: %s" % (type(e).__name__, e)]
        finally:
            if os.path.exists(v["filler"]):
                os.unlink(v["filler"])
        print("faults: %s: %s" % (v["name"], "ok" if not errs else "FAIL"))
        for e in errs:
            print("  " + e)
        return int(bool(errs))

    cmd = [args.daemon, "--config", v["policy"]]
    if v.get("hosts"):  # the daemon's /etc/hosts the pass's file, in a mount namespace
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               'mount --bind "$0" /etc/hosts && exec "$@"', v["hosts"]] + cmd
    return with_daemon("faults", cmd, v["err"], body, limit,
                       started=lambda daemon: v.__setitem__("daemon", daemon))


def main():
    args, log = own_pass_args("agentsnet fault pass", tests=True)
    if os.geteuid() != 0:
        print("faults: FAIL: a tmpfs of the pass's own is mounted: run as root")
        return 1

    tmp = tempfile.mkdtemp(prefix="an-faults-")
    pki = os.path.join(tmp, "pki")
    os.mkdir(pki, 0o700)
    make_pki(pki, names=("api.internal", "held.internal"))
    with open(os.open(os.path.join(pki, "secret.txt"), os.O_WRONLY | os.O_CREAT, 0o600), "w",
              encoding="ascii") as f:
        f.write("sk-faults-" + os.urandom(8).hex())
    origin_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    origin_tls.load_cert_chain(os.path.join(pki, "leaf.pem"), os.path.join(pki, "leaf.key"))
    tls_reset = ResetOrigin(origin_tls)
    mismatch, dropped = HeldHandshakeOrigin(origin_tls), HeldHandshakeOrigin()
    held = HeldHandshakeOrigin(origin_tls, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
                               b"Connection: close\r\n\r\nok\n")
    stream = StreamOrigin()
    delayed = DelayedOrigin()
    upload_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # the slow reader's: a leaf for it
    upload_tls.load_cert_chain(*make_leaf(pki, "upload", os.path.join(pki, "ca.pem"),
                                          os.path.join(pki, "ca.key"), ("upload-tls.internal",)))
    # The webhook's receiver: a leaf for localhost from the pass's CA, and one from another.
    hook_tls, other_tls = (ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER) for _ in range(2))
    hook_tls.load_cert_chain(*make_leaf(pki, "hook", os.path.join(pki, "ca.pem"),
                                        os.path.join(pki, "ca.key"),
                                        ("localhost", "hook.internal")))
    keep_tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # metrics' reused inject upstream
    keep_tls_ctx.load_cert_chain(*make_leaf(pki, "keep", os.path.join(pki, "ca.pem"),
                                            os.path.join(pki, "ca.key"),
                                            ("keep-tls.internal",)))
    big_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # response_truncated's origin
    big_tls.load_cert_chain(*make_leaf(pki, "big", os.path.join(pki, "ca.pem"),
                                       os.path.join(pki, "ca.key"), ("big.internal",)))
    big = BigOrigin(big_tls)
    make_leaf(pki, "gateway", os.path.join(pki, "ca.pem"), os.path.join(pki, "ca.key"),
              ("gateway.internal",))  # overloaded_tls's public listener
    other = os.path.join(pki, "other")
    os.mkdir(other, 0o700)
    other_tls.load_cert_chain(*make_pki(other, names=("localhost",))[1:])
    with open(os.open(os.path.join(pki, "hook.auth"), os.O_WRONLY | os.O_CREAT, 0o600), "w",
              encoding="ascii") as f:
        f.write(WEBHOOK_AUTHORIZATION + "\n")
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    failed = ran = 0
    try:
        for name, failure, fsize, env, test in (
                ("audit_full_continue", "continue", None, None, t_audit_full_continue),
                ("audit_full_refuse", "refuse", None, None, t_audit_full_refuse),
                ("audit_file_size", "continue", FSIZE_BYTES, None, t_audit_file_size),
                ("upload_abandoned", "continue", None, None, t_upload_abandoned),
                ("early_flood", "continue", None, None, t_early_flood),
                ("upstream_reset_splice", "continue", None, None, t_upstream_reset),
                ("upstream_reset_copy", "continue", None, {"AN_NO_SPLICE": "1"},
                 t_upstream_reset),
                ("upstream_reset_inject", "continue", None, None, t_upstream_reset_inject),
                ("upstream_fails_in_handshake", "continue", None, None,
                 t_upstream_fails_in_handshake),
                ("tunnel_bytes_splice", "continue", None, None, t_tunnel_bytes),
                ("tunnel_bytes_copy", "continue", None, {"AN_NO_SPLICE": "1"}, t_tunnel_bytes),
                ("drain", "continue", None, None, t_drain),
                ("tls_handshake_metrics", "continue", None, None, t_tls_handshake_metrics),
                ("alerts", "continue", None, None, t_alerts),
                ("webhook_https", "continue", None, None, t_webhook_https),
                ("misdirected_refusal", "continue", None, None, t_misdirected_refusal),
                ("inject_without_ca", "continue", None, None, t_inject_without_ca),
                ("inject_timeout_fresh", "continue", None, None, t_inject_timeout_fresh),
                ("overloaded", "continue", None, None, t_overloaded),
                ("overloaded_tls", "continue", None, None, t_overloaded_tls),
                ("response_truncated", "continue", None, None, t_response_truncated),
                ("upstream_closes", "continue", None, None, t_upstream_closes),
                ("connect_timeout", "continue", None, None, t_connect_timeout),
                ("forward_keep", "continue", None, None, t_forward_keep),
                ("metrics", "continue", None, None, t_metrics),
                ("check", "continue", None, None, t_check),
                ("webhook_refused", "continue", None, None, t_webhook_refused),
                ("webhook_queue", "continue", None, None, t_webhook_queue),
                ("webhook_moves", "continue", None, None, t_webhook_moves)):
            if args.tests and name not in args.tests:
                continue
            top = os.path.join(tmp, name)
            disk = os.path.join(top, "disk")
            os.makedirs(disk, 0o755)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0755" % DISK_BYTES,
                            "tmpfs", disk], check=True)
            try:
                v = {"name": name, "fsize": fsize, "env": env, "pki": pki,
                     "tls_reset": tls_reset, "late": LateOrigin(), "big": big,
                     "mismatch": mismatch, "dropped": dropped, "stream": stream,
                     "sock_dir": os.path.join(top, "run"), "ingress_port": free_port(),
                     "tcp_port": free_port(), "slow": SlowReader(), "reset": ResetOrigin(), "sink": Sink(),
                     "metrics_port": free_port(), "held": held, "daemon_path": args.daemon,
                     "slow_tls": SlowReader(upload_tls),
                     "hook": HookReceiver(hook_tls, other_tls),
                     "keep": KeepOrigin(), "keep_tls": KeepOrigin(keep_tls_ctx),
                     "closes": CloseOrigin(), "resets": CloseOrigin(reset=True),
                     "full": FullOrigin(),
                     "plain_hook": PlainHook(None if name == "webhook_queue" else 400),
                     "audit": os.path.join(disk, "audit.jsonl"),
                     "filler": os.path.join(disk, "filler"),
                     "policy": os.path.join(top, "policy.yaml"),
                     "err": os.path.join(top, "daemon.stderr")}
                if name == "webhook_moves":
                    v["wrong_hook"] = Dropper(v["hook"].port)
                    v["hosts"] = os.path.join(top, "hosts")
                    with open(v["hosts"], "w", encoding="ascii") as f:
                        f.write("127.0.0.1 localhost\n127.0.0.2 hook.internal\n")
                with open(v["policy"], "w", encoding="utf-8") as f:
                    f.write((POLICY if name != "inject_without_ca" else
                             "\n".join(line for line in POLICY.split("\n")
                                       if not line.startswith("  ca: "))).format(sock_dir=v["sock_dir"], audit=v["audit"],
                                          failure=failure, port=origin.server_address[1],
                                          ingress_port=v["ingress_port"],
                                          tcp_port=v["tcp_port"], slow_port=v["slow"].port,
                                          reset_port=v["reset"].port, pki=pki,
                                          slow_tls_port=v["slow_tls"].port,
                                          tls_reset_port=tls_reset.port,
                                          mismatch_port=mismatch.port,
                                          stream_port=stream.port,
                                          dropped_port=dropped.port,
                                          late_port=v["late"].port,
                                          delayed_port=delayed.port, drain_ms=DRAIN_MS,
                                          metrics_port=v["metrics_port"],
                                          held_port=held.port,
                                          sink_port=v["sink"].port,
                                          upload_ceiling=UPLOAD_CEILING,
                                          webhook=webhook_section(name, v, pki),
                                          sandboxes=sandboxes_section(name),
                                          keep_port=v["keep"].port,
                                          keep_tls_port=v["keep_tls"].port,
                                          closes_port=v["closes"].port,
                                          resets_port=v["resets"].port,
                                          full_port=v["full"].port,
                                          connect_ms=(", connect_ms: %d" % CONNECT_MS
                                                      if name == "connect_timeout" else
                                                      ", response_ms: %d" % HOLD_RESPONSE_MS
                                                      if name == "inject_timeout_fresh"
                                                      else ""),
                                          pool=pool_section(name), big_port=big.port,
                                          ingress_tls=ingress_tls_section(name, pki),
                                          placeholder=PLACEHOLDER))
                ran += 1
                failed += run_daemon(args, v, test, log)
            finally:
                subprocess.run(["umount", disk], check=False)
    finally:
        origin.shutdown()
    print_counts("faults", ran - failed, failed)
    if ran == 0:
        print("faults: no test named %s" % " ".join(args.tests or []))
        failed = 1
    return own_pass_end("faults", tmp, failed)


if __name__ == "__main__":
    sys.exit(main())
