"""The service pass (issue 20 item 1): what the daemon tells a service manager, against a
stand-in for systemd's notification socket (systemd is not PID 1 on the test machine), and
the unit in deploy/systemd/ checked as systemd would read it.

  - notify: $NOTIFY_SOCKET a path, $WATCHDOG_USEC 0.6 s. READY=1 comes once every
    sandbox socket of the policy accepts and serves, with MAINPID (the daemon's pid) and a
    STATUS line (sandboxes, connections, policy generation); WATCHDOG=1 then comes at
    least every half interval; a reload by SIGHUP, one by the control socket and one
    refused (a policy that does not load) each come as RELOADING=1 (MONOTONIC_USEC now)
    and then READY=1, the STATUS line's generation one more for the two that loaded and
    unchanged for the refused one; a worker whose loop is stopped (one thread held by
    ptrace) stops WATCHDOG=1 until it runs again, the STATUS line and the log naming it;
    SIGTERM brings STOPPING=1.
  - abstract: $NOTIFY_SOCKET "@name" (an abstract socket): READY=1; no WATCHDOG=1 without
    $WATCHDOG_USEC, nor with a $WATCHDOG_PID that is another process's.
  - bad_address: $NOTIFY_SOCKET neither a path nor "@name": the daemon does not start,
    and its error names the variable.
  - audit_rotation: under load (four clients looping requests), the audit file is moved
    away and reopened six times, by SIGUSR1 and by `audit reopen` on the control socket
    and `agentsnet audit reopen` in turn: every request's decision record is in exactly
    one of the seven files, each
    file after the first begins with an "audit_reopened" notice, and the control
    socket's answer names the file.
  - node_view: `sandbox stats` counts each sandbox's decisions, refusals and delivered
    bytes (30 served on one sandbox, 5 refused on the other), open connections and
    uptime; a run-time sandbox removed and added again under its id counts from zero;
    `agentsnet sandbox ls` prints them as a table (`--ids` the bare list), another
    account of the control group sees none of root's sandboxes there, and
    `agentsnet top --once` ranks the sandbox that was busy during its interval first.
  - kept_sockets: the daemon hands each sandbox's listening socket to the manager's
    file descriptor store (FDSTORE=1, FDNAME=sandbox.<id>); while clients loop requests,
    it is killed (SIGKILL) and, a second later, started again with the kept sockets
    ($LISTEN_FDS, $LISTEN_FDNAMES), as systemd restarts a service: no request begun after
    the kill fails (the connections wait in the kept socket's queue and are served by the
    next daemon), the longest wait is reported, and the new daemon says it serves the
    kept sockets. Without them (the same restart, no $LISTEN_FDS) requests fail. The
    gateway's public listener is kept too: a public request made while no daemon runs is
    answered by the next one (404 for a sandbox that does not exist), never refused.
  - graceful_restart: as kept_sockets, but the daemon is stopped (SIGTERM) and started
    again, while clients loop requests on new connections and on kept-alive ones: the
    stopping daemon drains (each sandbox's socket handed on to the manager, so it stops
    accepting): a request on a kept-alive connection is served with Connection: close,
    a new connection waits in the kept socket's queue for the next daemon, and the
    daemon exits as soon as its connections are done. No request fails; the longest
    wait is reported.
  - upgrade: UPGRADES upgrades in a row (agentsnetd --upgrade: the new daemon takes every
    socket of the running one over its control socket, the old one drains and stops),
    while clients loop requests on new and kept-alive connections to a sandbox's socket,
    on a kept-alive connection to the TCP listener, ping the control socket and scrape
    the metrics listener: no request fails, each old daemon exits 0; the longest request
    is reported.
  - metrics: the Prometheus listener (daemon.metrics, sandboxes: 1): a scrape taken while
    another sandbox's refused requests loop passes `promtool check metrics`; after
    METRICS_SERVED served and METRICS_REFUSED refused requests on one sandbox, the allowed
    (tier local), refused (host_not_allowed), request, decision-latency and connect-latency
    counts grew by exactly those; the per-sandbox series are one named and "_other";
    another path is 404, POST 405, HEAD 200.
  - upgrade_changes: upgrades to a policy that changes what the old daemon's sockets
    were made for. One that gives a sandbox of the file another uid is refused: the new
    daemon exits 1 naming the sandbox, with no sanitizer report, and the old one goes on
    serving that sandbox's socket. One that drops the control socket's group, drops a
    sandbox and moves the metrics listener: an account of the dropped group can no longer
    connect to the control socket, the dropped sandbox's socket file is gone, the new
    address is scraped, and the old daemon, held in its drain by a request its origin
    never answers, no longer answers scrapes on the old one.
  - control_trickle: a client trickling its control request a byte a second holds the
    one control thread for 5 s at most: a ping behind it is answered within that.
  - control_checks: the control socket's own checks: its mode (0660) and group, every
    kind of bad id in `sandbox add` refused with nothing made (an id longer than the socket
    directory leaves room for too), `sandbox rm` of a policy-file
    sandbox refused (it still serves), a 511-byte line read and a 512-byte one refused.
  - socket_dir_bounds: --socket-dir relative or of 95 bytes stops the daemon at once (exit 1,
    the bound named, nothing made); a daemon on a socket directory over 20 bytes warns at its
    start how long a sandbox id may be there.
  - signals: SIGUSR2, SIGQUIT, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGXCPU, SIGTSTP,
    SIGTTIN, SIGTTOU and three real-time signals sent to the daemon: it is neither ended
    nor stopped (its state S or R), serves a request, and logs each as ignored; every
    line of its log begins with the time (UTC, milliseconds) and "agentsnetd: ".
  - check: `agentsnet check --socket-dir DIR` (no --config) answers from the policy the
    daemon serves and says so ("<file>, as the daemon on DIR serves it (generation 1)");
    once the file is edited (a rule for inside.internal, listed at 10.0.0.5 in
    resolver.hosts) it says the daemon serves an earlier text; after `policy reload`,
    the daemon refuses inside.internal 403 private_address and `check --resolve` gives
    the same reason, the audit record's detail and the refusal's instruction; without
    --resolve it allows and says the connection checks the address; with no daemon on
    the directory it answers from the embedded default and says so.
  - journal: $JOURNAL_STREAM names the daemon's stderr (as systemd's does the journal's):
    no line carries the time (the journal stamps it), the ready line included.
  - unit: `systemd-analyze verify` on deploy/systemd/agentsnetd.service as `make install`
    puts it (DESTDIR; its paths pointed there, since verify wants ExecStart to exist),
    its key settings, and the daemon serving, reloading and stopping under the unit's
    capability bounding set and no_new_privs (setpriv), as systemd would start it.
  - options: --workers 3 runs 3 workers (the policy says 2); --listen/--listen-sandbox two
    serves a TCP listener whose request is decided for sandbox two; SIGPIPE does nothing;
    without $WATCHDOG_USEC, STATUS= comes every 5 s and no WATCHDOG=1; SIGINT stops the
    daemon as SIGTERM does (STOPPING=1, a drain, exit 0); the audit trail begins with the
    daemon_started notice and has daemon_stopped.
  - embedded: the unit's ExecStart without /etc/default/agentsnetd serves the embedded
    default policy, and reloads (control socket, SIGHUP) reload that same policy.
  - no_peer_check: with io_uring's socket commands turned off (AN_NO_URING_SETSOCKOPT, as
    before Linux 6.7) the daemon says at start that it skips the peer check; without, not.
  - control_group_missing, ingress_unbindable, no_io_uring: a start refused (exit 1, the
    reason said, nothing served): a control_group that does not exist, an ingress.listen
    in use, io_uring_setup refused by a seccomp filter (a filter on another call: starts).
  - reload_start_only: a reload changing daemon.workers, resolver.servers, the timeouts,
    ingress.tls and alert_webhook warns naming each and applies none of them (2 workers,
    the gateway's first certificate), while the sandbox it adds serves.
  - stop_order: during a stop's drain the control socket answers no one.
  - no_drain: drain_ms 0: SIGTERM ends the daemon at once, the request under way cut.
  - forbidden: `daemon handover` and `audit reopen` by nobody: error forbidden.
  - handover_no_ready: a successor that takes every socket and answers another line than
    ready, or leaves: the daemon serves on and says so.
  - reopen_failed: `audit reopen` of a path that is a directory: error reopen_failed, a
    line on stderr, the records going on to the file open before.
  - old_daemon: --upgrade against a daemon that does not know `daemon handover`: exit 1,
    that daemon's error printed.
  - top_interval: `agentsnet top --interval 0.1` prints four frames well within 2 s.
  - kept_refit: after a SIGKILL, kept sockets whose mode, owner, listening or path no
    longer fit are made anew, the one that fits taken back, one naming no sandbox dropped
    from the store (FDSTOREREMOVE=1); `sandbox rm` of a run-time sandbox drops its socket.
  - upgrade_revoked: an upgrade revoking a run-time sandbox's registrant that fails before
    `ready` leaves its record and directory (the old daemon serves it); one that goes
    through removes them.

Runs as its own pass: python3 tests/integ/service.py [--daemon PATH] [--tests NAME...] -v
(--netns, given by tests/integ/run.sh, is accepted and unused: loopback only).
"""

import ctypes
import grp
import http.server
import json
import os
import re
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import time

from fairness import Origin, control, egress, served
from integlib import (control_exchange, make_leaf, make_pki, own_pass_args, own_pass_end,
                      print_counts,
                      read_text, recv_all, sanitizer_marks, scrape, series, tcp_exchange,
                      terminate, wait_for, with_daemon, Fatal)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WATCHDOG_S = 0.6
UNIT = os.path.join(ROOT, "deploy", "systemd", "agentsnetd.service")

POLICY = """version: 1
daemon:
  socket_dir: {sock_dir}
  audit_log: {audit}
  workers: 2
  control_group: nogroup
resolver:
  servers: ["127.0.0.1:9"]
profiles:
  service:
    rules:
      - {{id: model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
sandboxes:
  - {{id: one, profile: service}}
  - {{id: two, profile: service}}
"""


class Manager:
    """A stand-in for the service manager's notification socket: a datagram socket bound
    at <address> (a path, or "@name" for an abstract one) that keeps every state it
    receives with its arrival time (time.monotonic)."""

    def __init__(self, address):
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.states = []  # (time, {key: value})
        self.store = {}  # FDNAME -> the descriptor it keeps (FDSTORE=1)
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 65536, 16)
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
            with self.lock:
                self.states.append((time.monotonic(), fields))
                # The file descriptor store, as systemd keeps it: by FDNAME.
                name = fields.get("FDNAME")
                if fields.get("FDSTORE") == "1" and name and fds:
                    if name in self.store:
                        os.close(self.store[name])
                    self.store[name] = fds.pop(0)
                elif fields.get("FDSTOREREMOVE") == "1" and name in self.store:
                    os.close(self.store.pop(name))
            for fd in fds:
                os.close(fd)

    def since(self, t0, key=None):
        """The states received after <t0>, those holding <key> when given."""
        with self.lock:
            return [(t, f) for t, f in self.states if t > t0 and (key is None or key in f)]

    def wait(self, t0, key, timeout=10.0):
        """The first state after <t0> holding <key>, within <timeout> s; None if none."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.since(t0, key)
            if got:
                return got[0]
            time.sleep(0.01)
        return None

    def close(self):
        self.sock.close()
        with self.lock:
            for fd in self.store.values():
                os.close(fd)
            self.store = {}


def generation(state):
    m = re.search(r"policy generation (\d+)", state.get("STATUS", ""))
    return int(m.group(1)) if m else None


def watchdog_gaps(manager, t0, t1):
    """The times between WATCHDOG=1 states received in (t0, t1], and how many came."""
    times = [t for t, _ in manager.since(t0, "WATCHDOG") if t <= t1]
    return [b - a for a, b in zip(times, times[1:])], len(times)


# ---- ptrace, to stop one thread of the daemon and no other ------------------

PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def thread_named(pid, name):
    """The tid of <pid>'s thread called <name> (/proc/<pid>/task/<tid>/comm), or None."""
    for tid in os.listdir("/proc/%d/task" % pid):
        if read_text("/proc/%d/task/%s/comm" % (pid, tid)).strip() == name:
            return int(tid)
    return None


def ptrace(request, tid):
    if libc.ptrace(request, tid, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace(%d, %d)" % (request, tid))


def hold_thread(tid):
    """Stops thread <tid> alone (PTRACE_SEIZE, PTRACE_INTERRUPT); release_thread lets it go."""
    ptrace(PTRACE_SEIZE, tid)
    ptrace(PTRACE_INTERRUPT, tid)
    os.waitpid(tid, os.__dict__.get("__WALL", 0x40000000))


def release_thread(tid):
    ptrace(PTRACE_DETACH, tid)


# ---- the tests ---------------------------------------------------------------


def t_notify(v, log):
    """READY=1 once every sandbox serves; WATCHDOG=1 at least every half interval; reloads
    (signal, control socket, refused) bracketed by RELOADING=1 and READY=1; a stopped
    worker stops the watchdog; STOPPING=1 at SIGTERM (checked by after_notify)."""
    errs = []
    m, pid = v["manager"], v["pid"]
    ready = m.wait(0, "READY")
    if ready is None:
        return ["no READY=1 within 10 s of the start"]
    t_ready, state = ready
    for sandbox in ("one", "two"):
        answer = served(egress(v["sock_dir"], sandbox))
        if not answer.startswith(b"HTTP/1.1 200"):
            errs.append("sandbox %s after READY=1: %r, want 200" % (sandbox, answer[:80]))
    if state.get("MAINPID") != str(pid):
        errs.append("READY=1 came with MAINPID %r, want %d" % (state.get("MAINPID"), pid))
    if not re.fullmatch(r"serving 2 sandboxes, \d+ connections, policy generation 1",
                        state.get("STATUS", "")):
        errs.append("READY=1's STATUS %r, want serving 2 sandboxes, N connections, policy "
                    "generation 1" % state.get("STATUS"))
    # The watchdog: a tick every quarter interval, so no gap near the interval.
    time.sleep(2.0)
    gaps, count = watchdog_gaps(m, t_ready, time.monotonic())
    log("watchdog: %d in 2 s after READY, the longest gap %.3f s" % (count, max(gaps or [0])))
    if count < 4 or max(gaps or [WATCHDOG_S]) > WATCHDOG_S / 2 + 0.1:
        errs.append("WATCHDOG=1 %d times in 2 s, gaps up to %.3f s; want at least every "
                    "%.2f s" % (count, max(gaps or [0]), WATCHDOG_S / 2 + 0.1))
    # Reloads: each bracketed, the generation one more when the policy loaded.
    for how, want_gen in (("SIGHUP", 2), ("policy reload", 3), ("refused", 3)):
        t0 = time.monotonic()
        before_us = time.monotonic_ns() // 1000
        if how == "SIGHUP":
            os.kill(pid, signal.SIGHUP)
        elif how == "policy reload":
            control(v, "policy reload")
        else:
            with open(v["policy"], encoding="utf-8") as f:
                good = f.read()
            with open(v["policy"], "w", encoding="utf-8") as f:
                f.write(good.replace("profiles:", "profiles:\n  broken: [", 1))
            os.kill(pid, signal.SIGHUP)
        done = m.wait(t0, "READY")
        if how == "refused":
            with open(v["policy"], "w", encoding="utf-8") as f:
                f.write(good)
        reloading = m.since(t0, "RELOADING")
        if not reloading or done is None or reloading[0][0] > done[0]:
            errs.append("reload by %s: RELOADING=1 %s, READY=1 %s; want one, then the other"
                        % (how, "came" if reloading else "never came",
                           "came" if done else "never came"))
            continue
        usec = int(reloading[0][1].get("MONOTONIC_USEC", "0"))
        if not before_us <= usec <= time.monotonic_ns() // 1000:
            errs.append("reload by %s: MONOTONIC_USEC %d, not the monotonic clock then (%d)"
                        % (how, usec, before_us))
        if generation(done[1]) != want_gen:
            errs.append("reload by %s: READY=1's STATUS %r, want policy generation %d"
                        % (how, done[1].get("STATUS"), want_gen))
    # One worker stopped (its thread alone, by ptrace): no WATCHDOG=1 while it is.
    tid = thread_named(pid, "an-worker1")
    if tid is None:
        return errs + ["no thread named an-worker1 in /proc/%d/task" % pid]
    hold_thread(tid)
    t_held = time.monotonic()
    try:
        time.sleep(WATCHDOG_S * 3)
    finally:
        release_thread(tid)
    t_released = time.monotonic()
    # A tick under way when the thread stopped may still say WATCHDOG=1.
    during = [t for t, _ in m.since(t_held + WATCHDOG_S / 2, "WATCHDOG") if t < t_released]
    named = [f for _, f in m.since(t_held) if "worker 1 does not answer" in f.get("STATUS", "")]
    log("worker 1 held %.1f s: %d WATCHDOG=1 meanwhile, %d STATUS naming it" % (
        t_released - t_held, len(during), len(named)))
    if during:
        errs.append("WATCHDOG=1 %d times while worker 1 was stopped, want none" % len(during))
    if not named:
        errs.append("no STATUS naming worker 1 while it was stopped")
    if "watchdog: worker 1 did not answer" not in read_text(v["err"]):
        errs.append("the log does not name the worker that did not answer")
    if m.wait(t_released, "WATCHDOG", WATCHDOG_S * 2) is None:
        errs.append("no WATCHDOG=1 within %.1f s of the worker running again" % (WATCHDOG_S * 2))
    return errs


def after_notify(v):
    stopping = v["manager"].wait(0, "STOPPING", 5)
    return [] if stopping else ["no STOPPING=1 at SIGTERM"]


def t_abstract(v, log):
    """READY=1 on an abstract socket; no watchdog asked (or asked of another process)."""
    m = v["manager"]
    ready = m.wait(0, "READY")
    if ready is None:
        return ["no READY=1 on the abstract socket %s" % m.address]
    time.sleep(1.0)
    beats = m.since(0, "WATCHDOG")
    log("abstract: READY=1, %d WATCHDOG=1 in 1 s" % len(beats))
    return ["WATCHDOG=1 %d times, none asked of this process" % len(beats)] if beats else []


# The daemon's log line: the time (UTC, milliseconds), then "agentsnetd: ".
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z agentsnetd: ")
# Signals agentsnetd does not use whose default would end or stop it: each is logged, ignored.
UNUSED_SIGNALS = ("SIGUSR2", "SIGQUIT", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR",
                  "SIGXCPU", "SIGTSTP", "SIGTTIN", "SIGTTOU")


def t_signals(v, log):
    """Signals the daemon does not use are logged and ignored; it serves on; every line of
    its log carries the time."""
    errs = []
    sent = [(name, getattr(signal, name)) for name in UNUSED_SIGNALS]
    sent += [("SIGRTMIN+%d" % i, signal.SIGRTMIN + i) for i in (0, 5)] + [
        ("SIGRTMAX", signal.SIGRTMAX)]
    for name, number in sent:
        os.kill(v["pid"], number)
        time.sleep(0.05)
    time.sleep(0.3)
    with open("/proc/%d/stat" % v["pid"], encoding="ascii") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    answer = served(egress(v["sock_dir"], "one"))
    text = read_text(v["err"])
    log("signals: state %s after %d signals; %r" % (state, len(sent), answer[:40]))
    if state not in ("S", "R") or not answer.startswith(b"HTTP/1.1 200"):
        errs.append("after %s: the daemon is in state %s and answered %r" % (
            ", ".join(n for n, _ in sent), state, answer[:120]))
    for name, number in sent:
        if "(%d): not one agentsnetd uses; ignored" % number not in text:
            errs.append("no log line says %s (%d) was ignored" % (name, number))
    unstamped = [x for x in text.splitlines() if x and not STAMPED.match(x)]
    if unstamped:
        errs.append("log lines without the time: %r" % unstamped[:5])
    return errs


def check_cli(v, *words):
    """`agentsnet check --socket-dir <the daemon's> <words>`: (exit, {field: value}, stderr)."""
    proc = subprocess.run([v["cli"], "check", "--socket-dir", v["sock_dir"], *words],
                          capture_output=True, text=True, timeout=60)
    fields = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    return proc.returncode, fields, proc.stderr


def t_check(v, log):
    """`agentsnet check` without --config answers from the policy the daemon serves, says a
    file edited since it loaded is newer, and --resolve refuses a private address with the
    detail and instruction of the daemon's own refusal."""
    errs = []
    served_line = "%s, as the daemon on %s serves it (generation %%d)" % (
        os.path.realpath(v["policy"]), v["sock_dir"])
    rc, got, err = check_cli(v, "--sandbox", "one", "http://model.internal/x")
    log("check: %r" % got)
    if rc != 0 or got.get("policy") != served_line % 1 or got.get("rule") != "model":
        errs.append("the served policy's answer: exit %d %r %s" % (rc, got, err))
    # A rule added to the file, not yet loaded: the check says the file is newer.
    with open(v["policy"], encoding="utf-8") as f:
        text = f.read()
    text = text.replace("servers: [\"127.0.0.1:9\"]",
                        "servers: [\"127.0.0.1:9\"]\n  hosts: {inside.internal: [10.0.0.5]}")
    text = text.replace("    rules:\n", "    rules:\n      - {id: inside, host: inside.internal, "
                        "tier: passthrough, owner: tests, reason: a private address}\n", 1)
    with open(v["policy"], "w", encoding="utf-8") as f:
        f.write(text)
    rc, got, err = check_cli(v, "--sandbox", "one", "http://inside.internal/x")
    if "earlier text of it (generation 1)" not in got.get("policy", "") or \
            "earlier text" not in err:
        errs.append("a file edited after the load: exit %d %r %s" % (rc, got, err))
    if not control(v, "policy reload").startswith("ok"):
        errs.append("policy reload refused the edited file")
    # The daemon's refusal of the private address, and the check's with --resolve.
    answer = served(egress(v["sock_dir"], "one"), b"inside.internal")
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    live = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
    time.sleep(0.5)
    records = [r for r in (json.loads(line) for line in read_text(v["audit"]).splitlines()
                           if '"private_address"' in line) if r.get("event") == "decision"]
    rc, got, err = check_cli(v, "--sandbox", "one", "--resolve", "http://inside.internal/x")
    log("check --resolve: %r; live %r; audit %r" % (got, head.split("\r\n")[0], records))
    if not answer.startswith(b"HTTP/1.1 403") or not records:
        errs.append("the daemon's answer to inside.internal: %r, records %r" % (
            answer[:200], records))
    elif rc != 1 or got.get("policy") != served_line % 2 or \
            got.get("reason") != "private_address" or \
            got.get("detail") != records[-1].get("detail") or \
            got.get("instruction") != live.get("X-Agent-Instruction"):
        errs.append("check --resolve: exit %d %r %s; the daemon's detail %r, instruction %r" % (
            rc, got, err, records[-1].get("detail"), live.get("X-Agent-Instruction")))
    # Without --resolve the decision is the rule's, and says what a connection would check.
    rc, got, err = check_cli(v, "--sandbox", "one", "http://inside.internal/x")
    if rc != 0 or "--resolve checks it now" not in got.get("at connect", ""):
        errs.append("without --resolve: exit %d %r %s" % (rc, got, err))
    # No daemon on the directory: the embedded default, said so.
    proc = subprocess.run([v["cli"], "check", "--socket-dir", os.path.join(v["top"], "none"),
                           "https://example.com/"], capture_output=True, text=True, timeout=60)
    if "policy: the embedded default (no daemon answers on" not in proc.stdout:
        errs.append("no daemon: %r %r" % (proc.stdout, proc.stderr))
    return errs


def t_journal(v, log):
    """Standard error is the journal's ($JOURNAL_STREAM names it): no line carries the time."""
    text = read_text(v["err"])
    stamped = [x for x in text.splitlines() if STAMPED.match(x)]
    bare = [x for x in text.splitlines() if x.startswith("agentsnetd: ")]
    log("journal: %d lines, %d with the time" % (len(bare) + len(stamped), len(stamped)))
    if stamped or not any(x.startswith("agentsnetd: ready") for x in bare):
        return ["with $JOURNAL_STREAM naming stderr: %d lines carry the time, ready line %r" % (
            len(stamped), [x for x in text.splitlines() if "ready" in x][:1])]
    return []


def t_bad_address(v, log):
    """Handled by run_test: the daemon must not start."""
    return []


ROTATIONS = 6
ROTATION_CLIENTS = 4


def t_audit_rotation(v, log):
    """The audit file moved and reopened under load: each record once, in one file."""
    errs, answered, stop = [], [], threading.Event()
    path = egress(v["sock_dir"], "one")

    def client():
        while not stop.is_set():
            if served(path).startswith(b"HTTP/1.1 200"):
                answered.append(1)

    threads = [threading.Thread(target=client) for _ in range(ROTATION_CLIENTS)]
    for th in threads:
        th.start()
    moved = []
    try:
        for i in range(ROTATIONS):
            time.sleep(0.3)
            moved.append("%s.%d" % (v["audit"], i + 1))
            os.rename(v["audit"], moved[-1])
            if i % 3 == 0:
                os.kill(v["pid"], signal.SIGUSR1)
                if not wait_exists(v["audit"], 5):
                    errs.append("SIGUSR1 %d: no new audit file within 5 s" % (i + 1))
                    break
            elif i % 3 == 1:
                rc, out, err = cli(v, "audit", "reopen")
                if rc != 0 or out.strip() != "audit reopened %s" % v["audit"]:
                    errs.append("agentsnet audit reopen %d: exit %d, %r %r" % (i + 1, rc, out,
                                                                             err))
                    break
            else:
                got = control(v, "audit reopen")
                if got.strip() != "ok audit reopened %s" % v["audit"]:
                    errs.append("audit reopen %d: %r" % (i + 1, got))
                    break
        time.sleep(0.3)
    finally:
        stop.set()
        for th in threads:
            th.join()
    v["rotated"] = moved
    v["answered"] = len(answered)
    log("audit rotation: %d requests answered across %d rotations" % (len(answered),
                                                                       ROTATIONS))
    return errs


def wait_exists(path, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def after_audit_rotation(v):
    """Once the daemon stopped (its writer drained): every record in exactly one file."""
    errs, ids, decisions = [], {}, 0
    files = v.get("rotated", []) + [v["audit"]]
    for i, name in enumerate(files):
        lines = read_text(name).splitlines()
        if i > 0 and (not lines or json.loads(lines[0]).get("detail") != "audit_reopened"):
            errs.append("%s does not begin with an audit_reopened notice: %r"
                        % (os.path.basename(name), lines[:1]))
        for line in lines:
            rec = json.loads(line)
            ids[rec["id"]] = ids.get(rec["id"], 0) + 1
            decisions += rec.get("event") == "decision" and rec.get("host") == "model.internal"
    twice = [k for k, n in ids.items() if n > 1]
    if twice:
        errs.append("%d records are in two files: %r" % (len(twice), twice[:5]))
    if decisions != v.get("answered"):
        errs.append("%d decision records across %d files, want one for each of the %r "
                    "requests answered" % (decisions, len(files), v.get("answered")))
    return errs


def stats_of(v):
    """`sandbox stats`: {id: {key: value}} (values as ints where they are)."""
    lines = control(v, "sandbox stats").splitlines()
    if not lines or not lines[0].startswith("ok ") or int(lines[0].split()[1]) != len(lines) - 1:
        raise Fatal("sandbox stats: %r" % lines[:3])
    out = {}
    for line in lines[1:]:
        words = line.split()
        fields = dict(zip(words[1::2], words[2::2]))
        out[words[0]] = {k: int(x) if x.lstrip("-").isdigit() else x for k, x in fields.items()}
        if list(fields) != ["profile", "owner", "pid", "uptime_s", "conns", "requests",
                            "refusals", "bytes_up", "bytes_down"]:
            raise Fatal("sandbox stats line %r: keys out of order" % line)
    return out


def refused(path):
    """A request the policy refuses (no rule names the host), through <path>."""
    return served(path, b"nowhere.internal")


def cli(v, *words):
    proc = subprocess.run([v["cli"]] + list(words) + ["--socket-dir", v["sock_dir"]],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stdout, proc.stderr


def t_node_view(v, log):
    """Per-sandbox counts, the sandbox ls table and top."""
    errs = []
    for _ in range(30):
        if not served(egress(v["sock_dir"], "one")).startswith(b"HTTP/1.1 200"):
            errs.append("a request on sandbox one was not served")
            break
    for _ in range(5):
        if not refused(egress(v["sock_dir"], "two")).startswith(b"HTTP/1.1 403"):
            errs.append("a request for a host no rule names was not refused 403")
            break
    time.sleep(0.2)
    st = stats_of(v)
    one, two = st.get("one", {}), st.get("two", {})
    log("sandbox stats: one %r, two %r" % (one, two))
    if one.get("requests") != 30 or one.get("refusals") != 0 or \
            not one.get("bytes_up", 0) >= 30 * 30 or not one.get("bytes_down", 0) >= 30 * 100 or \
            one.get("conns") != 0 or one.get("profile") != "service" or one.get("owner") != 0:
        errs.append("sandbox one: %r; want 30 requests, 0 refusals, the bytes of 30 "
                    "exchanges each way (at least 30 up and 100 down each), 0 connections "
                    "open, profile service, owner 0" % one)
    if two.get("requests") != 5 or two.get("refusals") != 5:
        errs.append("sandbox two: %r; want 5 requests, all 5 refused" % two)
    # A run-time sandbox's counts are its own registration's: gone with it.
    for step in ("sandbox add three service", "served", "sandbox rm three",
                 "sandbox add three service"):
        if step == "served":
            served(egress(v["sock_dir"], "three"))
            served(egress(v["sock_dir"], "three"))
            time.sleep(0.1)
            first = stats_of(v).get("three", {}).get("requests")
            if first != 2:
                errs.append("sandbox three after 2 requests: %r requests" % first)
        elif not control(v, step).startswith("ok"):
            errs.append("%s: refused" % step)
    again = stats_of(v).get("three", {})
    if again.get("requests") != 0 or again.get("bytes_down") != 0:
        errs.append("sandbox three added again: %r; want its counts from zero" % again)
    control(v, "sandbox rm three")
    # The CLI's views.
    rc, out, err = cli(v, "sandbox", "ls")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line.split()}
    if rc != 0 or not out.startswith("ID ") or rows.get("one", [None] * 9)[5] != "30" or \
            rows.get("two", [None] * 9)[6] != "5":
        errs.append("agentsnet sandbox ls: exit %d, %r %r; want a table with one's 30 "
                    "decisions and two's 5 refusals" % (rc, out[-600:], err[-300:]))
    # Another account of the control group sees none of root's sandboxes' traffic.
    proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                           v["cli"], "sandbox", "ls", "--socket-dir", v["sock_dir"]],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0 or proc.stdout.strip() != "no sandboxes":
        errs.append("agentsnet sandbox ls as nobody (group nogroup): exit %d, %r %r; want "
                    "no sandboxes (root's are not its to see)" % (proc.returncode,
                                                                   proc.stdout[-400:],
                                                                   proc.stderr[-300:]))
    rc, out, err = cli(v, "sandbox", "ls", "--ids")
    if rc != 0 or sorted(line.split()[0] for line in out.splitlines()) != ["one", "two"] or \
            any(len(line.split()) != 3 for line in out.splitlines()):
        errs.append("agentsnet sandbox ls --ids: exit %d, %r" % (rc, out[-300:]))
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            served(egress(v["sock_dir"], "two"))  # refused or not: a decision each

    th = threading.Thread(target=busy)
    th.start()
    try:
        rc, out, err = cli(v, "top", "--once", "--interval", "0.5")
    finally:
        stop.set()
        th.join()
    lines = out.splitlines()
    log("agentsnet top --once:\n" + out)
    if rc != 0 or len(lines) < 4 or not lines[0].startswith("agentsnet top: 2 sandboxes") or \
            lines[2].split()[0] != "two" or float(lines[2].split()[5]) <= 0:
        errs.append("agentsnet top --once while two was busy: exit %d, %r %r; want two first, "
                    "its decisions a second above 0" % (rc, out[-600:], err[-300:]))
    return errs


KEPT_GAP_S = 1.0
KEPT_CLIENTS = 3


# Run between the fork and the daemon: moves the descriptors named in argv[1] (their numbers
# in the caller, passed through) to 3, 4, ... in that order, closes the rest of them, and
# becomes the daemon (argv[2:]), whose pid $LISTEN_PID names. (A preexec_fn cannot do it:
# subprocess's own pipe to the child may sit on one of the target numbers.)
PLACE_FDS = """import os, sys
src = [int(x) for x in sys.argv[1].split(",") if x]
high = [os.dup2(fd, 1000 + i) for i, fd in enumerate(src)]
for fd in src:
    os.close(fd)
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.close(fd)
if src:
    os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[2], sys.argv[2:])
"""


def start_kept(args, v, env, pass_store):
    """Starts a daemon on v's policy with <env>; with <pass_store>, the manager's kept
    descriptors as systemd passes them ($LISTEN_FDS from 3, $LISTEN_FDNAMES)."""
    store = sorted(v["manager"].store.items()) if pass_store else []
    child_env = dict(os.environ, **env)
    if store:
        child_env["LISTEN_FDS"] = str(len(store))
        child_env["LISTEN_FDNAMES"] = ":".join(name for name, _ in store)
    fds = [fd for _, fd in store]
    err = open(v["err"], "ab")
    try:
        return subprocess.Popen([sys.executable, "-c", PLACE_FDS, ",".join(map(str, fds)),
                                 args.daemon, "--config", v["policy"]],
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=child_env,
                                pass_fds=fds)
    finally:
        err.close()


def kept_run(args, v, log, pass_store, during_gap=None):
    """One SIGKILL and restart under load; returns (errors, failed of those begun once the
    killed daemon was gone, failed of those in flight at the kill, the longest request in
    s)."""
    errs = []
    m = v["manager"]
    env = {"NOTIFY_SOCKET": m.address}
    first = start_kept(args, v, env, False)
    results, stop = [], threading.Event()
    try:
        if m.wait(0, "READY") is None:
            return ["the first daemon said no READY=1"], 0, 0, 0
        names = sorted(n for n in m.store if n.startswith("sandbox."))
        if names != ["sandbox.one", "sandbox.two"]:
            errs.append("the manager keeps %r, want sandbox.one and sandbox.two" % names)

        path = egress(v["sock_dir"], "one")
        threads = [threading.Thread(target=new_conn_client, args=(path, stop, results))
                   for _ in range(KEPT_CLIENTS)]
        for th in threads:
            th.start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        first.kill()
        first.wait()
        dead_at = time.monotonic()  # a request begun before may have been the dead one's
        gap = threading.Thread(target=during_gap) if during_gap is not None else None
        if gap is not None:
            gap.start()
        time.sleep(KEPT_GAP_S)
        second = start_kept(args, v, env, pass_store)
        try:
            ready = m.wait(killed_at, "READY", 30)
            if ready is None:
                errs.append("the daemon started again said no READY=1")
            time.sleep(1.0)
        finally:
            stop.set()
            for th in threads:
                th.join()
            if gap is not None:
                gap.join()
            second.send_signal(signal.SIGTERM)
            code = second.wait(30)
            if code != 0:
                errs.append("the daemon started again exited %d" % code)
    finally:
        stop.set()
        if first.poll() is None:
            first.kill()
            first.wait()
    after = [r for r in results if r[0] >= dead_at and not r[2]]
    during = [r for r in results if r[0] < dead_at and r[1] > killed_at and not r[2]]
    longest = max((r[1] - r[0] for r in results), default=0)
    log("%s: %d requests, %d begun once the killed daemon was gone failed, %d in flight at "
        "the kill failed; the longest took %.2f s" % ("kept sockets passed" if pass_store else "no sockets passed",
                                 len(results), len(after), len(during), longest))
    return errs, len(after), len(during), longest


def daemon_settings(v, lines):
    """Adds <lines> (each a daemon: setting, indented) to v's policy."""
    text = read_text(v["policy"]).replace("  control_group: nogroup\n",
                                          "  control_group: nogroup\n" + lines)
    with open(v["policy"], "w", encoding="utf-8") as f:
        f.write(text)


def t_kept_sockets(args, v, log):
    """SIGKILL and a restart given the kept sockets: no request begun after the kill fails,
    and a public client of the gateway that connects while no daemon runs is answered by the
    next one (its listener kept too), not refused."""
    port = free_tcp_port()
    daemon_settings(v, "  ingress: {listen: \"127.0.0.1:%d\"}\n" % port)
    public = {}

    def public_client():
        try:
            public["answer"] = tcp_exchange(port, b"GET /callbacks/nosuch/x HTTP/1.1\r\n"
                                            b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
        except OSError as e:
            public["answer"] = ("%s: %s" % (type(e).__name__, e)).encode()

    errs, after, _, longest = kept_run(args, v, log, True, during_gap=public_client)
    log("a public request made while no daemon ran: %r" % public.get("answer", b"")[:60])
    if not public.get("answer", b"").startswith(b"HTTP/1.1 404"):
        errs.append("a public request made while no daemon ran: %r, want the next daemon's "
                    "404 (the gateway's listener kept)" % public.get("answer", b"")[:200])
    if after:
        errs.append("%d requests begun after the kill failed; want none (they wait in the kept "
                    "socket's queue)" % after)
    text = read_text(v["err"])
    for sandbox in ("one", "two"):
        if "sandbox %s: serving the socket the service manager kept" % sandbox not in text:
            errs.append("the daemon started again does not say it serves %s's kept socket"
                        % sandbox)
    if longest > KEPT_GAP_S + 10:
        errs.append("a request waited %.1f s" % longest)
    return errs


def threads_stop(stop, threads):
    """Sets <stop> and joins those of <threads> that were started."""
    stop.set()
    for th in threads:
        if th.ident is not None:
            th.join()


def new_conn_client(path, stop, results):
    """Loops GET requests on <path> (a Unix socket's path), a new connection each, until
    <stop>; appends (start, end, ok, what) to <results>, ok when the answer was a 200."""
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            answer = served(path)
            ok = answer.startswith(b"HTTP/1.1 200")
        except OSError as e:
            answer, ok = str(e).encode(), False
        results.append((t0, time.monotonic(), ok, answer[:40].decode("latin-1")))


def unix_to(path):
    """A connect function for kept_alive_client: to the Unix socket at <path>."""
    def connect():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(20)
        sock.connect(path)
        return sock
    return connect


def kept_alive_client(path, stop, results):
    """Loops GET requests on one connection to <path> (a Unix socket's path, or a connect
    function), a new one after an answer that says Connection: close (or a failure), until
    <stop>; appends (start, end, ok, what) to <results>, ok when the answer was a whole 200."""
    connect = unix_to(path) if isinstance(path, str) else path
    sock = None
    while not stop.is_set():
        t0 = time.monotonic()
        what = ""
        try:
            if sock is None:
                sock = connect()
            sock.sendall(b"GET http://model.internal/x HTTP/1.1\r\nHost: model.internal\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("the connection ended before an answer's head")
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            head = head.decode("latin-1").lower()
            length = int(re.search(r"content-length: *(\d+)", head).group(1))
            while len(body) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("the connection ended inside an answer's body")
                body += chunk
            what = head.split("\r\n", 1)[0]
            ok = head.startswith("http/1.1 200")
            if "connection: close" in head:
                sock.close()
                sock = None
        except (OSError, AttributeError) as e:
            ok, what = False, "%s: %s" % (type(e).__name__, e)
            if sock is not None:
                sock.close()
            sock = None
        results.append((t0, time.monotonic(), ok, what))
    if sock is not None:
        sock.close()


def t_graceful_restart(args, v, log):
    """SIGTERM and a restart given the kept sockets, under requests on new and on kept-alive
    connections: none fails."""
    errs = []
    m = v["manager"]
    env = {"NOTIFY_SOCKET": m.address}
    first = start_kept(args, v, env, False)
    results, stop = [], threading.Event()
    path = egress(v["sock_dir"], "one")

    threads = [threading.Thread(target=new_conn_client, args=(path, stop, results))
               for _ in range(KEPT_CLIENTS)]
    threads += [threading.Thread(target=kept_alive_client, args=(path, stop, results))
                for _ in range(KEPT_CLIENTS)]
    second = None
    try:
        if m.wait(0, "READY") is None:
            return ["the first daemon said no READY=1"]
        for th in threads:
            th.start()
        time.sleep(1.0)
        stopped_at = time.monotonic()
        first.send_signal(signal.SIGTERM)
        code = first.wait(30)
        exited_at = time.monotonic()
        if code != 0:
            errs.append("the stopped daemon exited %d" % code)
        time.sleep(KEPT_GAP_S)
        second = start_kept(args, v, env, True)
        if m.wait(exited_at, "READY", 30) is None:
            errs.append("the daemon started again said no READY=1")
        time.sleep(1.0)
    finally:
        threads_stop(stop, threads)
        if first.poll() is None:
            first.kill()
            first.wait()
        if second is not None:
            second.send_signal(signal.SIGTERM)
            if second.wait(30) != 0:
                errs.append("the daemon started again exited %d" % second.returncode)
    failed = [r for r in results if not r[2]]
    longest = max((r[1] - r[0] for r in results), default=0)
    log("graceful restart: %d requests, %d failed; the stopping daemon exited %.2f s after "
        "SIGTERM; the longest request took %.2f s" % (len(results), len(failed),
                                                     exited_at - stopped_at, longest))
    if failed:
        errs.append("%d of %d requests failed across the restart, want none: %r"
                    % (len(failed), len(results), sorted(set(r[3] for r in failed))[:5]))
    if exited_at - stopped_at > 5:
        errs.append("the stopping daemon took %.1f s to exit; its conns end with their "
                    "requests" % (exited_at - stopped_at))
    if "draining for up to" not in read_text(v["err"]):
        errs.append("the stopping daemon does not say it drains")
    return errs


UPGRADES = 10


def control_line(sock_dir, line):
    """<line> asked on the control socket under <sock_dir>: the answer, or "" when none came."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(20)
            s.connect(os.path.join(sock_dir, "control.sock"))
            s.sendall(line.encode() + b"\n")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    return data.decode()
                data += chunk
    except OSError:
        return ""


def daemons_stop(daemons):
    """Stops each of <daemons> still running: SIGTERM, then SIGKILL after 30 s."""
    for d in daemons:
        terminate(d, 30)


def t_upgrade(args, v, log):
    """UPGRADES upgrades (agentsnetd --upgrade) in a row under requests on new and kept-alive
    connections to a sandbox's socket, on the TCP listener, and control requests: none
    fails; each old daemon exits 0 once drained."""
    errs = []
    tcp_port, metrics_port = free_tcp_port(), free_tcp_port()
    daemon_settings(v, "  tcp_listen: \"127.0.0.1:%d\"\n  tcp_sandbox: one\n"
                    "  metrics: {listen: \"127.0.0.1:%d\"}\n" % (tcp_port, metrics_port))
    cmd = [args.daemon, "--config", v["policy"]]

    def spawn(n, upgrade):
        err = open(os.path.join(v["top"], "daemon%d.stderr" % n), "wb")
        try:
            return subprocess.Popen(cmd + (["--upgrade"] if upgrade else []),
                                    stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        finally:
            err.close()

    def tcp_connect():
        sock = socket.create_connection(("127.0.0.1", tcp_port), timeout=20)
        sock.settimeout(20)
        return sock

    daemons = [spawn(0, False)]
    results, controls, stop = [], [], threading.Event()
    path = egress(v["sock_dir"], "one")

    def control_client():
        while not stop.is_set():
            t0 = time.monotonic()
            answer = control_line(v["sock_dir"], "ping")
            controls.append((t0, time.monotonic(), answer.startswith("ok agentsnetd"), answer))
            time.sleep(0.05)

    def scraper():
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                status = scrape(metrics_port)[0]
            except OSError as e:
                status = str(e)
            controls.append((t0, time.monotonic(), status == 200, "scrape: %s" % status))
            time.sleep(0.05)

    threads = [threading.Thread(target=new_conn_client, args=(path, stop, results))
               for _ in range(KEPT_CLIENTS)]
    threads += [threading.Thread(target=kept_alive_client, args=(path, stop, results))
                for _ in range(KEPT_CLIENTS)]
    threads += [threading.Thread(target=kept_alive_client, args=(tcp_connect, stop, results)),
                threading.Thread(target=control_client), threading.Thread(target=scraper)]
    upgraded = 0
    try:
        deadline = time.monotonic() + 30
        while not control_line(v["sock_dir"], "ping").startswith("ok") and \
                time.monotonic() < deadline and daemons[0].poll() is None:
            time.sleep(0.05)
        for th in threads:
            th.start()
        time.sleep(0.5)
        for n in range(1, UPGRADES + 1):
            old = daemons[-1]
            daemons.append(spawn(n, True))
            try:
                code = old.wait(30)
            except subprocess.TimeoutExpired:
                errs.append("upgrade %d: the old daemon did not stop within 30 s" % n)
                break
            if code != 0:
                errs.append("upgrade %d: the old daemon exited %d" % (n, code))
            if daemons[-1].poll() is not None:
                errs.append("upgrade %d: the new daemon exited %d" % (n, daemons[-1].returncode))
                break
            upgraded += 1
            time.sleep(0.3)
        time.sleep(0.5)
    finally:
        threads_stop(stop, threads)
        daemons_stop(daemons)
    last = daemons[-1].returncode
    failed = [r for r in results if not r[2]]
    control_failed = [r for r in controls if not r[2]]
    longest = max((r[1] - r[0] for r in results), default=0)
    longest_control = max((r[1] - r[0] for r in controls), default=0)
    log("upgrades: %d of %d; %d requests, %d failed, the longest took %.3f s; %d control "
        "requests and scrapes, %d failed, the longest took %.3f s" % (
            upgraded, UPGRADES, len(results), len(failed), longest, len(controls),
            len(control_failed), longest_control))
    if upgraded != UPGRADES:
        errs.append("%d of %d upgrades went through" % (upgraded, UPGRADES))
    if failed:
        errs.append("%d of %d requests failed across the upgrades, want none: %r"
                    % (len(failed), len(results), sorted(set(r[3] for r in failed))[:5]))
    if control_failed:
        errs.append("%d of %d control requests and scrapes failed: %r"
                    % (len(control_failed), len(controls), control_failed[:3]))
    if len(results) < 100:
        errs.append("only %d requests were made" % len(results))
    if last != 0:
        errs.append("the last daemon exited %r" % last)
    for n in range(UPGRADES + 1):
        text = read_text(os.path.join(v["top"], "daemon%d.stderr" % n))
        if sanitizer_marks(text):
            errs.append("daemon %d: a sanitizer report: %s" % (n, text[-2000:]))
        if n > 0 and "upgrade: every socket taken over" not in text:
            errs.append("daemon %d does not say it took every socket over" % n)
    return errs


def as_nobody_ping(sock_dir):
    """`ping` on the control socket as nobody (group nogroup alone): the answer, or the
    error's name."""
    script = ("import socket,sys\n"
              "s=socket.socket(socket.AF_UNIX)\n"
              "s.settimeout(10)\n"
              "try:\n"
              "    s.connect(sys.argv[1]); s.sendall(b'ping\\n'); print(s.recv(200).decode())\n"
              "except OSError as e:\n"
              "    print(type(e).__name__)\n")
    proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                           sys.executable, "-c", script, os.path.join(sock_dir, "control.sock")],
                          capture_output=True, text=True, timeout=30)
    return proc.stdout.strip()


def silent_origin():
    """A TCP listener that accepts and never answers: (port, close)."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    held = []

    def accept_loop():
        while True:
            try:
                held.append(lsock.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept_loop, daemon=True).start()

    def close():
        lsock.close()
        for c in held:
            c.close()
    return lsock.getsockname()[1], close


def t_upgrade_changes(args, v, log):
    """Upgrades to a policy whose sandbox uid, control group, sandboxes and metrics
    address differ from the running one's."""
    errs = []
    m_old, m_new = free_tcp_port(), free_tcp_port()
    slow_port, slow_close = silent_origin()
    base = read_text(v["policy"]).replace(
        "owner: tests, reason: loopback origin}\n",
        "owner: tests, reason: loopback origin}\n"
        "      - {id: slow, host: slow.internal, tier: local, upstream: \"127.0.0.1:%d\",\n"
        "         owner: tests, reason: an origin that never answers}\n" % slow_port)
    old_policy = base.replace(
        "  control_group: nogroup\n",
        "  control_group: nogroup\n  timeouts: {drain_ms: 4000}\n"
        "  metrics: {listen: \"127.0.0.1:%d\"}\n" % m_old) + \
        "  - {id: gone, profile: service}\n"
    policies = {
        "old": old_policy,
        "uid": old_policy.replace("  - {id: one, profile: service}",
                                  "  - {id: one, profile: service, uid: 65534}"),
        "new": base.replace("  control_group: nogroup\n",
                            "  metrics: {listen: \"127.0.0.1:%d\"}\n" % m_new),
    }
    for name, text in policies.items():
        with open(os.path.join(v["top"], name + ".yaml"), "w", encoding="utf-8") as f:
            f.write(text)

    def spawn(name, upgrade):
        err = open(os.path.join(v["top"], "daemon-%s.stderr" % name), "wb")
        try:
            return subprocess.Popen([args.daemon, "--config", os.path.join(v["top"], name + ".yaml")]
                                    + (["--upgrade"] if upgrade else []),
                                    stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        finally:
            err.close()

    daemons = [spawn("old", False)]
    held = None
    try:
        deadline = time.monotonic() + 30
        while not control_line(v["sock_dir"], "ping").startswith("ok") and \
                time.monotonic() < deadline and daemons[0].poll() is None:
            time.sleep(0.05)
        if as_nobody_ping(v["sock_dir"]) != "ok agentsnetd " + control_line(
                v["sock_dir"], "ping").split("ok agentsnetd ", 1)[-1].strip():
            errs.append("before: nobody (group nogroup) cannot ping: %r"
                        % as_nobody_ping(v["sock_dir"]))
        # 1. Another uid for sandbox one: refused whole; the old daemon serves on.
        refused_upgrade = spawn("uid", True)
        daemons.append(refused_upgrade)
        code = refused_upgrade.wait(60)
        text = read_text(os.path.join(v["top"], "daemon-uid.stderr"))
        log("an upgrade giving sandbox one uid 65534: exit %d: %s" % (
            code, [line for line in text.splitlines() if "sandbox one" in line][:2]))
        if code != 1 or "sandbox one" not in text or "restart" not in text:
            errs.append("an upgrade giving sandbox one another uid: exit %d, want 1 naming "
                        "the sandbox and a restart: %r" % (code, text[-800:]))
        if sanitizer_marks(text):
            errs.append("the refused upgrade: a sanitizer report: %s" % text[-2000:])
        answer = served(egress(v["sock_dir"], "one"))
        if not answer.startswith(b"HTTP/1.1 200") or daemons[0].poll() is not None:
            errs.append("after the refused upgrade, sandbox one's request got %r (the old "
                        "daemon %s)" % (answer[:80], "running" if daemons[0].poll() is None
                                        else "exited"))
        # 2. Hold the old daemon in its drain: a request its origin never answers.
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held.settimeout(20)
        held.connect(egress(v["sock_dir"], "two"))
        held.sendall(b"GET http://slow.internal/x HTTP/1.1\r\nHost: slow.internal\r\n\r\n")
        time.sleep(0.3)
        daemons.append(spawn("new", True))
        deadline = time.monotonic() + 30
        while "upgrade: every socket taken over" not in read_text(
                os.path.join(v["top"], "daemon-new.stderr")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        draining = daemons[0].poll() is None
        try:
            old_scrape = scrape(m_old)[0]
        except OSError as e:
            old_scrape = type(e).__name__
        try:
            new_scrape = scrape(m_new)[0]
        except OSError as e:
            new_scrape = type(e).__name__
        nobody = as_nobody_ping(v["sock_dir"])
        gone = egress(v["sock_dir"], "gone")
        log("after the upgrade (old daemon %s): scrape of the old address %r, of the new one "
            "%r; nobody's ping %r; sandbox gone's socket %s" % (
                "draining" if draining else "gone", old_scrape, new_scrape, nobody,
                "left" if os.path.exists(gone) else "removed"))
        if not draining:
            errs.append("the old daemon was not held in its drain: the scrape check is void")
        if old_scrape != "ConnectionRefusedError":
            errs.append("the old metrics address during the old daemon's drain: %r, want "
                        "refused (the old daemon stops its listener at the hand-over)"
                        % old_scrape)
        if new_scrape != 200:
            errs.append("the new metrics address: %r, want 200" % new_scrape)
        if nobody != "PermissionError":
            errs.append("nobody (group nogroup, which the new policy no longer names) on the "
                        "control socket: %r, want PermissionError" % nobody)
        if os.path.exists(gone):
            errs.append("sandbox gone, which the new policy drops: %s is left" % gone)
        answer = served(egress(v["sock_dir"], "one"))
        if not answer.startswith(b"HTTP/1.1 200"):
            errs.append("after the upgrade, sandbox one's request got %r" % answer[:80])
    finally:
        if held is not None:
            held.close()
        daemons_stop(daemons)
        slow_close()
    for name in ("old", "new"):
        text = read_text(os.path.join(v["top"], "daemon-%s.stderr" % name))
        if sanitizer_marks(text):
            errs.append("daemon %s: a sanitizer report: %s" % (name, text[-2000:]))
    return errs


def t_control_trickle(v, log):
    """A ping behind a client trickling its request line a byte a second."""
    errs = []
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    slow.settimeout(30)
    slow.connect(os.path.join(v["sock_dir"], "control.sock"))
    trickler = trickle(slow, b"sandbox ls --the-rest-of-a-long-line\n")
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        answer = control(v, "ping")
        waited = time.monotonic() - t0
    finally:
        slow.close()
        trickler.join()
    log("a ping behind a trickling control client: %r after %.1f s" % (answer[:40], waited))
    # Within five times the 5 s the trickler may hold the thread, and before its line
    # (37 bytes, a second each) could be whole.
    if not answer.startswith("ok") or waited > 25:
        errs.append("a ping behind a trickling control client: %r after %.1f s, want ok "
                    "well before the trickler's line is whole (the 5 s it may hold the "
                    "thread, five times over)" % (answer[:80], waited))
    return errs


# Sandbox ids the control socket must refuse, every kind: a path step up, the directory
# itself, a separator, a hidden name, bytes outside the id alphabet, over the length limit.
BAD_SANDBOX_IDS = ("../x", "..", ".", "a/b", "/abs", ".hidden", "x%2f..", "a\\b", "a*", "ü",
                   "x" * 300)


def tree_of(top):
    """Every path under <top> (relative), links not followed."""
    found = set()
    for root, dirs, files in os.walk(top, followlinks=False):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(root, name), top))
    return found


def control_raw(v, data):
    """The answer to <data> sent as one control request, even when over the line limit."""
    return control_exchange(os.path.join(v["sock_dir"], "control.sock"), data).decode(
        "utf-8", "replace")


def t_control_checks(v, log):
    """The control socket's own checks (docs/control.md): its mode and group; a bad id in
    `sandbox add` refused (bad_id) with nothing made anywhere, and so is an id longer than the
    socket directory leaves room for (one of the room's length added); `sandbox rm` of a policy-file sandbox
    refused, the sandbox still serving; a line of 511 bytes read, one of 512 (and of 64 KiB)
    refused as too long, the daemon answering after it."""
    errs = []
    path = os.path.join(v["sock_dir"], "control.sock")
    st = os.lstat(path)
    nogroup = grp.getgrnam("nogroup").gr_gid
    if not stat.S_ISSOCK(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o660 or \
            st.st_uid != 0 or st.st_gid != nogroup:
        errs.append("control.sock: mode %o uid %d gid %d, want a socket 0660 root:nogroup "
                    "(%d)" % (st.st_mode, st.st_uid, st.st_gid, nogroup))
    parent = os.path.dirname(v["sock_dir"])
    before = tree_of(parent)
    for bad in BAD_SANDBOX_IDS:
        answer = control(v, "sandbox add %s service" % bad)
        if not answer.startswith("error bad_id"):
            errs.append("sandbox add %r: %r, want error bad_id" % (bad, answer[:120]))
    # An id longer than the socket directory leaves room for: its egress socket's path,
    # <sock_dir>/sandboxes/<id>/egress.sock, must fit the 107 bytes of sun_path (an owned
    # sandbox's ingress.sock too: one byte less, as unit core/engine.c test_id_room checks).
    room = min(63, 107 - len(v["sock_dir"]) - len("/sandboxes//egress.sock"))
    if room < 63:
        long_id = "r" * (room + 1)
        answer = control(v, "sandbox add %s service" % long_id)
        want = "error bad_id sandbox id %s is %d bytes; the daemon's socket_dir %s leaves " \
            "room for %d" % (long_id, room + 1, v["sock_dir"], room)
        if not answer.startswith(want):
            errs.append("sandbox add of a %d-byte id: %r, want %r" % (
                room + 1, answer[:200], want))
    made = tree_of(parent) - before
    if made:
        errs.append("refused sandbox adds left %r" % sorted(made)[:10])
    fits = "r" * room
    answer = control(v, "sandbox add %s service" % fits)
    if not answer.startswith("ok"):
        errs.append("sandbox add of a %d-byte id, the room left: %r" % (room, answer[:200]))
    elif not control(v, "sandbox rm %s" % fits).startswith("ok"):
        errs.append("sandbox rm of the %d-byte id: no ok" % room)
    answer = control(v, "sandbox rm one")
    if not answer.startswith("error bad_request") or "policy file" not in answer:
        errs.append("sandbox rm of the policy file's sandbox: %r" % answer[:120])
    if not served(egress(v["sock_dir"], "one")).startswith(b"HTTP/1.1 200"):
        errs.append("the policy file's sandbox does not serve after the refused rm")
    for size, too_long in ((511, False), (512, True), (65536, True)):
        answer = control_raw(v, b"ping" + b" " * (size - 5) + b"\n")  # <size> bytes
        log("control checks: a %d-byte ping: %r" % (size, answer[:80]))
        # Read whole, the padded ping is a ping (its blanks are separators): "ok agentsnetd".
        want = "error bad_request request line too long" if too_long else "ok agentsnetd"
        if not answer.startswith(want):
            errs.append("a %d-byte line: %r, want %s" % (
                size, answer[:120], "refused as too long" if too_long else "read whole"))
    if not control(v, "ping").startswith("ok"):
        errs.append("ping after the long lines: no ok")
    log("control checks: mode %o gid %d, %d bad ids refused, %d paths made; a %d-byte socket "
        "directory, room for %d-byte ids" % (stat.S_IMODE(st.st_mode), st.st_gid,
                                              len(BAD_SANDBOX_IDS), len(made),
                                              len(v["sock_dir"]), room))
    return errs


def t_socket_dir_bounds(v, log):
    """The socket directory's bounds (docs/policy.md): --socket-dir relative, or of 86 bytes
    (its internal/ingress.sock's path one past the 107 of sun_path), stops the daemon at once, exit 1,
    naming the flag and the bound, with nothing made; the daemon serving this pass's longer
    socket directory warned at its start how long a sandbox id may be there; a sandbox of
    the policy file whose id the socket directory leaves no room for stops the start,
    exit 1, naming it, its length and the room."""
    errs = []
    room = 107 - len(v["sock_dir"]) - len("/sandboxes//ingress.sock")
    warning = "socket_dir %s leaves room for sandbox ids of %d bytes (one more without an " \
        "ingress socket), not 63" % (v["sock_dir"], room)
    if room < 63 and warning not in read_text(v["err"]):
        errs.append("no start-up warning %r in the daemon's log" % warning)
    too_long = os.path.join(v["top"], "s" * (85 - len(v["top"])))  # 86 bytes
    for bad in ("relative/run", too_long):
        proc = subprocess.run([v["daemon"], "--config", v["policy"], "--socket-dir", bad,
                               "--audit", "-"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30)
        want = "--socket-dir %s: must be an absolute path of at most 85 bytes" % bad
        log("socket_dir bounds: --socket-dir of %d bytes: exit %d, %r" % (
            len(bad), proc.returncode, proc.stderr.strip()[-160:]))
        if proc.returncode != 1 or want not in proc.stderr:
            errs.append("--socket-dir %r: exit %d, stderr %r; want exit 1 and %r" % (
                bad, proc.returncode, proc.stderr[-300:], want))
        if os.path.lexists(bad) or os.path.lexists(os.path.join(v["top"], "relative")):
            errs.append("--socket-dir %r refused, yet made" % bad)
    # A sandbox of the policy file whose id the socket directory leaves no room for stops
    # the start, naming it, its length and the room.
    long_dir = os.path.join(v["top"], "l" * (70 - len(v["top"])))  # 71 bytes: room 13
    long_id = "i" * 40
    policy = os.path.join(v["top"], "long-id.yaml")
    with open(policy, "w", encoding="utf-8") as f:
        f.write("version: 1\nprofiles:\n  default:\n    rules: []\nsandboxes:\n"
                "  - id: %s\n    profile: default\n" % long_id)
    proc = subprocess.run([v["daemon"], "--config", policy, "--socket-dir", long_dir,
                           "--audit", "-", "--no-ingress"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=30)
    want = "sandbox %s (the policy file's): its id is 40 bytes; socket_dir %s leaves room " \
        "for 13" % (long_id, long_dir)
    log("socket_dir bounds: a 40-byte sandbox id under %d bytes: exit %d" % (
        len(long_dir), proc.returncode))
    if proc.returncode != 1 or want not in proc.stderr:
        errs.append("a policy-file sandbox too long for its socket_dir: exit %d, stderr %r; "
                    "want exit 1 and %r" % (proc.returncode, proc.stderr[-600:], want))
    shutil.rmtree(long_dir, ignore_errors=True)
    return errs


def trickle(sock, data):
    """A started thread that sends <data> on <sock> a byte a second, until done or the
    socket is closed."""
    def run():
        try:
            for ch in data:
                sock.send(bytes([ch]))
                time.sleep(1)
        except OSError:
            pass
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


METRICS_SERVED = 40
METRICS_REFUSED = 7
PROMTOOL = shutil.which("promtool") or "/var/lib/agentsnet-tools/bin/promtool"


def t_metrics(args, v, log):
    """The Prometheus listener, under load and after it: promtool's check, the counters."""
    errs = []
    port = free_tcp_port()
    daemon_settings(v, "  metrics: {listen: \"127.0.0.1:%d\", sandboxes: 1}\n" % port)
    err = open(v["err"], "ab")
    daemon = subprocess.Popen([args.daemon, "--config", v["policy"]], stdin=subprocess.DEVNULL,
                              stdout=err, stderr=err)
    err.close()
    stop = threading.Event()
    try:
        deadline = time.monotonic() + 30
        while "agentsnetd: ready" not in read_text(v["err"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        one, two = egress(v["sock_dir"], "one"), egress(v["sock_dir"], "two")
        answers = []

        def load():
            while not stop.is_set():
                served(two, b"elsewhere.example")  # refused; not counted below
        # A scrape under load: another sandbox's requests keep the workers busy meanwhile.
        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(0.3)
        status, head, under_load = scrape(port)
        stop.set()
        loader.join()
        if status != 200 or "text/plain; version=0.0.4" not in head:
            errs.append("a scrape under load: %d %r" % (status, head[:200]))
        if not os.path.exists(PROMTOOL):
            errs.append("promtool is not installed (tools/deps.sh installs it)")
        else:
            check = subprocess.run([PROMTOOL, "check", "metrics"], input=under_load,
                                   capture_output=True, text=True, timeout=30)
            log("promtool check metrics: exit %d %s" % (check.returncode,
                                                      (check.stdout + check.stderr).strip()))
            if check.returncode != 0 or (check.stdout + check.stderr).strip():
                errs.append("promtool check metrics: exit %d: %s" % (
                    check.returncode, (check.stdout + check.stderr)[:500]))
        time.sleep(0.3)  # the workers publish what the load left
        before = series(scrape(port)[2])
        for _ in range(METRICS_SERVED):
            answers.append(served(one))
        for _ in range(METRICS_REFUSED):
            answers.append(served(one, b"elsewhere.example"))
        time.sleep(0.3)
        after = series(scrape(port)[2])

        def grew(key):
            return after.get(key, 0) - before.get(key, 0)

        want = {
            'agentsnet_requests_allowed_total{tier="local"}': METRICS_SERVED,
            'agentsnet_requests_refused_total{reason="host_not_allowed"}': METRICS_REFUSED,
            'agentsnet_decision_duration_seconds_count': METRICS_SERVED + METRICS_REFUSED,
            'agentsnet_upstream_connect_duration_seconds_count': METRICS_SERVED,
            'agentsnet_requests_total': METRICS_SERVED + METRICS_REFUSED,
        }
        for key, n in want.items():
            if grew(key) != n:
                errs.append("%s grew by %r, want %d" % (key, grew(key), n))
        log("after %d served and %d refused on one: %s" % (
            METRICS_SERVED, METRICS_REFUSED,
            ", ".join("%s +%g" % (k, grew(k)) for k in want)))
        # sandboxes: 1: the busiest by requests named, the other summed; every decision is
        # some sandbox's, so the per-sandbox series add up to the decisions.
        named = sorted(k for k in after if k.startswith("agentsnet_sandbox_requests_total{"))
        if len(named) != 2 or 'agentsnet_sandbox_requests_total{sandbox="_other"}' not in named:
            errs.append("per-sandbox series with sandboxes: 1: %r, want one named and _other"
                        % named)
        decided = sum(value for key, value in after.items()
                      if key.startswith(("agentsnet_requests_allowed_total{",
                                         "agentsnet_requests_refused_total{")))
        per_sandbox = sum(after[k] for k in named)
        log("per-sandbox series: %r, %g decisions in them, %g in all" % (named, per_sandbox,
                                                                        decided))
        if per_sandbox != decided:
            errs.append("the per-sandbox series hold %g decisions, the daemon made %g"
                        % (per_sandbox, decided))
        if any(not a.startswith(b"HTTP/1.1 200") for a in answers[:METRICS_SERVED]):
            errs.append("a request of the counted ones was not served")
        # A client that trickles its head a byte a second holds the one scrape thread for
        # METRICS_CLIENT_TIMEOUT_S (5 s) at most, not for as long as it trickles.
        slow = socket.create_connection(("127.0.0.1", port), timeout=30)
        trickler = trickle(slow, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.5)
        t0 = time.monotonic()
        status = scrape(port)[0]
        waited = time.monotonic() - t0
        log("a scrape behind a client trickling its head: %d after %.1f s" % (status, waited))
        # Five times the 5 s the trickler may hold the thread, and before its head
        # (32 bytes, a second each) could be whole.
        if status != 200 or waited > 25:
            errs.append("a scrape behind a trickling client: %d after %.1f s, want 200 well "
                        "before the trickler's head is whole (the 5 s it may hold the thread, "
                        "five times over)" % (status, waited))
        slow.close()
        trickler.join()
        for method, path, code in (("GET", "/other", 404), ("POST", "/metrics", 405),
                                   ("HEAD", "/metrics", 200)):
            got = scrape(port, method, path)[0]
            if got != code:
                errs.append("%s %s: %d, want %d" % (method, path, got, code))
    finally:
        stop.set()
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(30)
        if code != 0:
            errs.append("the daemon exited %d" % code)
    if sanitizer_marks(read_text(v["err"])):
        errs.append("a sanitizer report: %s" % read_text(v["err"])[-2000:])
    return errs


def make_install(v):
    """`make install` into a DESTDIR of its own; the tree's root."""
    dest = os.path.join(v["top"], "dest")
    proc = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "install",
                           "DESTDIR=" + dest], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise Fatal("make install: %s%s" % (proc.stdout[-2000:], proc.stderr[-2000:]))
    return dest


def unit_settings(path):
    """The unit file's settings, key -> [values] (repeated keys in order)."""
    out = {}
    for line in read_text(path).splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def t_unit(v, log):
    """What make install put where (the binaries, the unit, the documents under
    share/doc/agentsnet); systemd-analyze verify on the installed unit; the daemon under the
    unit's capability bounding set and no_new_privs serves, reloads and stops
    (run_unit_daemon)."""
    errs = []
    dest = v["dest"]
    unit = os.path.join(dest, "lib", "systemd", "system", "agentsnetd.service")
    if not os.path.exists(unit):
        return ["make install did not install %s" % unit]
    for binary in ("sbin/agentsnetd", "bin/agentsnet", "bin/agentsnet-bridge",
                   "bin/agentsnet-probe"):
        if not os.access(os.path.join(dest, "usr", "local", binary), os.X_OK):
            errs.append("make install did not install /usr/local/%s" % binary)
    # The documents (docs/operating.md, "Installing"): README.md and every docs/*.md, as
    # they are in the tree, under share/doc/agentsnet.
    docs = os.path.join(dest, "usr", "local", "share", "doc", "agentsnet")
    for name in ["README.md"] + ["docs/" + x for x in sorted(os.listdir(os.path.join(ROOT, "docs")))
                                 if x.endswith(".md")]:
        installed = os.path.join(docs, os.path.basename(name))
        if not os.path.isfile(installed) or read_text(installed) != read_text(
                os.path.join(ROOT, name)):
            errs.append("make install did not install %s as %s" % (name, installed))
    # Verified on this host's systemd, the binary paths pointed into DESTDIR (verify wants
    # ExecStart to exist): the unit as `make install` wrote it, but for that prefix.
    copy = os.path.join(v["top"], "agentsnetd.service")
    with open(copy, "w", encoding="utf-8") as f:
        f.write(read_text(unit).replace("/usr/local/", os.path.join(dest, "usr", "local", "")))
    proc = subprocess.run(["systemd-analyze", "verify", copy],
                          capture_output=True, text=True, timeout=60)
    log("systemd-analyze verify: exit %d %s" % (proc.returncode, (proc.stdout + proc.stderr)
                                                 .strip()[-500:]))
    if proc.returncode != 0 or proc.stdout.strip() or proc.stderr.strip():
        errs.append("systemd-analyze verify: exit %d: %s" % (proc.returncode,
                                                          (proc.stdout + proc.stderr)[-1500:]))
    settings = unit_settings(unit)
    for key, want in (("Type", "notify"), ("NotifyAccess", "main"),
                      ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                      ("ProtectHome", "yes")):
        if settings.get(key) != [want]:
            errs.append("the unit's %s is %r, want %s" % (key, settings.get(key), want))
    for key in ("WatchdogSec", "RestrictAddressFamilies", "SystemCallFilter",
                "CapabilityBoundingSet", "FileDescriptorStoreMax"):
        if key not in settings:
            errs.append("the unit has no %s" % key)
    return errs


def unit_caps(path):
    """The unit's CapabilityBoundingSet as setpriv's --bounding-set argument."""
    caps = " ".join(unit_settings(path).get("CapabilityBoundingSet", [])).split()
    return "-all," + ",".join("+" + c.lower().replace("cap_", "", 1) for c in caps)


# ---- the daemon's options, start, stop and reload (docs/operating.md, README.md) ----


def spawn(args, v, extra=(), env=None, err=None, config=None):
    """agentsnetd on v's policy (or <config>; False: none) with the options <extra> and the
    variables <env> added, its output appended to <err> (v's daemon.stderr): the Popen."""
    cmd = [args.daemon] + ([] if config is False else ["--config", config or v["policy"]])
    with open(err or v["err"], "ab") as f:
        return subprocess.Popen(cmd + list(extra), stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                env=dict(os.environ, **(env or {})))


def await_ready(proc, err, since=0):
    """Waits for the ready line past offset <since> of the log <err>; raises Fatal when the
    daemon exits first."""
    wait_for(lambda: "agentsnetd: ready" in read_text(err)[since:] or proc.poll() is not None,
             30, "agentsnetd: ready")
    if proc.poll() is not None:
        raise Fatal("agentsnetd exited %d: %s" % (proc.returncode, read_text(err)[-2000:]))


def stopped(proc, errs, what="the daemon"):
    """Stops <proc> (SIGTERM, SIGKILL after 30 s), noting in <errs> an exit other than 0."""
    code, killed = terminate(proc, 30)
    if code != 0 or killed:
        errs.append("%s exited %d%s" % (what, code, " (killed)" if killed else ""))


def worker_threads(pid):
    """How many threads of <pid> are workers (named an-worker<N>)."""
    return sum(read_text("/proc/%d/task/%s/comm" % (pid, tid)).startswith("an-worker")
               for tid in os.listdir("/proc/%d/task" % pid))


def proc_state(pid):
    with open("/proc/%d/stat" % pid, encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def audit_records(path):
    return [json.loads(line) for line in read_text(path).splitlines() if line.strip()]


STATUS_EVERY_S = 5.0


def t_options(args, v, log):
    """--workers N runs N workers (the policy says 2); --listen/--listen-sandbox serves a TCP
    listener as that sandbox; SIGPIPE does nothing; without a watchdog STATUS= comes every
    5 s; SIGINT stops it as SIGTERM does (STOPPING=1, a drain, exit 0); the audit trail
    begins with daemon_started and has daemon_stopped once stopped."""
    errs = []
    m = v["manager"]
    port = free_tcp_port()
    daemon = spawn(args, v, ["--workers", "3", "--listen", "127.0.0.1:%d" % port,
                             "--listen-sandbox", "two"], {"NOTIFY_SOCKET": m.address})
    try:
        await_ready(daemon, v["err"])
        ready = m.wait(0, "READY")
        workers = worker_threads(daemon.pid)
        log("options: %d worker threads with --workers 3 (the policy says 2)" % workers)
        if workers != 3 or "on 3 workers" not in read_text(v["err"]):
            errs.append("--workers 3: %d threads named an-worker*, log %r; want 3" % (
                workers, [x for x in read_text(v["err"]).splitlines() if "workers" in x][:2]))
        # The TCP listener, as sandbox two: the first request the daemon decides.
        answer = tcp_exchange(port, b"GET http://model.internal/x HTTP/1.1\r\n"
                              b"Host: model.internal\r\nConnection: close\r\n\r\n")
        wait_for(lambda: any(r.get("event") == "decision" for r in audit_records(v["audit"])),
                 10, "the TCP request's decision record")
        decided = [r for r in audit_records(v["audit"]) if r.get("event") == "decision"]
        log("options: --listen answered %r, decided for %r" % (
            answer[:30], [r.get("sandbox") for r in decided]))
        if not answer.startswith(b"HTTP/1.1 200") or \
                [r.get("sandbox") for r in decided] != ["two"]:
            errs.append("--listen 127.0.0.1:%d --listen-sandbox two: %r, decisions for %r; "
                        "want 200 decided for sandbox two" % (
                            port, answer[:120], [r.get("sandbox") for r in decided]))
        # SIGPIPE: nothing; the daemon serves on.
        os.kill(daemon.pid, signal.SIGPIPE)
        time.sleep(0.3)
        state = proc_state(daemon.pid) if daemon.poll() is None else "exited %d" % daemon.poll()
        answer = served(egress(v["sock_dir"], "one")) if daemon.poll() is None else b""
        log("options: after SIGPIPE the daemon is %s and answers %r" % (state, answer[:30]))
        if state not in ("S", "R") or not answer.startswith(b"HTTP/1.1 200"):
            return errs + ["after SIGPIPE: the daemon is %s, answered %r; want it serving"
                           % (state, answer[:80])]
        # Without $WATCHDOG_USEC: STATUS= alone every 5 s, no WATCHDOG=1.
        if ready is None:
            errs.append("no READY=1")
        else:
            t_ready = ready[0]
            for n in (1, 2):
                wait_until(lambda: len([s for s in m.since(t_ready, "STATUS")
                                        if "READY" not in s[1]]) >= n, STATUS_EVERY_S * 5)
            times = [t_ready] + [t for t, f in m.since(t_ready, "STATUS") if "READY" not in f]
            gaps = [b - a for a, b in zip(times, times[1:3])]
            log("options: STATUS= %s s apart; %d WATCHDOG=1" % (
                ", ".join("%.2f" % g for g in gaps), len(m.since(0, "WATCHDOG"))))
            if len(gaps) != 2 or min(gaps) < STATUS_EVERY_S - 0.5 or m.since(0, "WATCHDOG"):
                errs.append("without a watchdog: STATUS= %r s apart, %d WATCHDOG=1; want "
                            "every 5 s and none" % (gaps, len(m.since(0, "WATCHDOG"))))
        # SIGINT stops it as SIGTERM does.
        t0 = time.monotonic()
        daemon.send_signal(signal.SIGINT)
        try:
            code = daemon.wait(30)
        except subprocess.TimeoutExpired:
            code = "still running 30 s after SIGINT"
        text = read_text(v["err"])
        log("options: SIGINT: exit %r, STOPPING=1 %s" % (
            code, "sent" if m.since(t0, "STOPPING") else "not sent"))
        if code != 0 or not m.since(t0, "STOPPING") or "signal 2: stopping" not in text or \
                "draining for up to" not in text:
            errs.append("SIGINT: exit %r, STOPPING=1 %s, log %r; want exit 0, STOPPING=1, "
                        "the stop and its drain logged" % (
                            code, bool(m.since(t0, "STOPPING")), text.splitlines()[-3:]))
    finally:
        stopped(daemon, [])
    notices = [r.get("detail") for r in audit_records(v["audit"]) if r.get("event") == "notice"]
    log("options: the audit's notices %r" % notices)
    if not notices or notices[0] != "daemon_started" or "daemon_stopped" not in notices:
        errs.append("the audit's notices %r: want daemon_started first, daemon_stopped at the "
                    "stop" % notices)
    return errs


UNIT_ENV_FILE = "/etc/default/agentsnetd"


def unit_command(unit):
    """The unit's ExecStart as systemd runs it without <UNIT_ENV_FILE>: its words, the
    variables that file would set expanded to none; raises Fatal when the unit reads the
    file otherwise than as an optional EnvironmentFile or names another variable."""
    settings = unit_settings(unit)
    if settings.get("EnvironmentFile") != ["-" + UNIT_ENV_FILE]:
        raise Fatal("the unit's EnvironmentFile is %r, want the optional -%s" % (
            settings.get("EnvironmentFile"), UNIT_ENV_FILE))
    words = " ".join(settings.get("ExecStart", [])).split()
    words = [w for w in words if w not in ("$AGENTSNETD_OPTIONS", "${AGENTSNETD_OPTIONS}")]
    if not words or any("$" in w or w.startswith("-") and "config" in w for w in words):
        raise Fatal("the unit's ExecStart %r: want the binary, options only from %s" % (
            settings.get("ExecStart"), UNIT_ENV_FILE))
    return words


def t_embedded(args, v, log):
    """The unit's ExecStart without /etc/default/agentsnetd (its only options the file's
    $AGENTSNETD_OPTIONS) serves the embedded default policy, and a reload (control socket,
    SIGHUP) reloads that same embedded policy."""
    errs = []
    words = unit_command(UNIT)
    log("embedded: the unit runs %r" % words)
    # The unit's command but for the binary, and the socket directory and audit trail in
    # this test's directory (the defaults are the host's); no public gateway, whose built-in
    # port another pass may hold.
    daemon = spawn(args, v, words[1:] + ["--socket-dir", v["sock_dir"], "--audit", v["audit"],
                                         "--no-ingress"], config=False)
    try:
        await_ready(daemon, v["err"])
        before = control(v, "policy status")
        steps = [control(v, "policy reload")]
        t0 = time.monotonic()
        daemon.send_signal(signal.SIGHUP)
        wait_until(lambda: "generation 3 " in control(v, "policy status"), 10)
        after = control(v, "policy status")
        log("embedded: %s; reload %r; then %s" % (before.strip(), steps[0].strip(),
                                                  after.strip()))
        digest = re.search(r"digest (\S+)", before)
        if not before.startswith("ok generation 1 ") or \
                not before.rstrip("\n").endswith("source embedded"):
            errs.append("without %s: policy status %r, want generation 1 from the embedded "
                        "source" % (UNIT_ENV_FILE, before))
        if not steps[0].startswith("ok") or not after.startswith("ok generation 3 ") or \
                not after.rstrip("\n").endswith("source embedded") or digest is None or \
                "digest %s " % digest.group(1) not in after:
            errs.append("reloads of the embedded policy: %r, then %r; want generation 3, the "
                        "same digest, source embedded" % (steps[0], after))
        if time.monotonic() - t0 > 10:
            errs.append("SIGHUP's reload took over 10 s")
    finally:
        stopped(daemon, errs)
    return errs


def t_no_peer_check(args, v, log):
    """A daemon whose io_uring cannot set socket options (Linux before 6.7; forced by
    AN_NO_URING_SETSOCKOPT, core/ring.c) says at start that it skips the peer check; one
    that can (this kernel) does not."""
    errs = []
    said = {}
    for forced in (True, False):
        err = os.path.join(v["top"], "daemon-%s.stderr" % ("forced" if forced else "plain"))
        daemon = spawn(args, v, env={"AN_NO_URING_SETSOCKOPT": "1"} if forced else {},
                       err=err)
        try:
            await_ready(daemon, err)
        finally:
            stopped(daemon, errs)
        text = read_text(err)
        said[forced] = [x for x in text.splitlines() if "peer_not_agent" in x]
        if not forced and "setsockopt_cmd=yes" not in text:
            errs.append("this kernel's io_uring sets no socket option: the control run is void")
    log("no peer check: forced %r; plain %r" % (said[True], said[False]))
    if len(said[True]) != 1 or "no socket commands" not in said[True][0]:
        errs.append("without io_uring's socket commands: %r, want one line saying the peer "
                    "check is skipped" % said[True])
    if said[False]:
        errs.append("with them: %r, want no such line" % said[False])
    return errs


def refused_start(args, v, log, what, want, env=None, extra=()):
    """Starts a daemon that must not start: [] when it exits 1 within 30 s with <want> in
    its output, before any ready line, and leaves no control socket."""
    err = os.path.join(v["top"], "refused.stderr")
    proc = spawn(args, v, extra, env, err)
    wait_until(lambda: proc.poll() is not None or "agentsnetd: ready" in read_text(err), 30)
    started = proc.poll() is None
    code, _ = terminate(proc, 30)
    out = read_text(err)
    log("%s: exit %d: %s" % (what, code, [x for x in out.splitlines() if want in x][:1]))
    sock = os.path.join(v["sock_dir"], "control.sock")
    if started or code != 1 or want not in out or "agentsnetd: ready" in out or \
            os.path.exists(sock) or sanitizer_marks(out):
        return ["%s: %s, exit %d, %s; want exit 1 saying %r, nothing served: %r" % (
            what, "it started" if started else "it did not start", code,
            "a control socket left" if os.path.exists(sock) else "no control socket", want,
            out[-800:])]
    return []


def t_control_group_missing(args, v, log):
    """daemon.control_group must exist when the daemon starts."""
    text = read_text(v["policy"]).replace("control_group: nogroup", "control_group: an-nosuch")
    with open(v["policy"], "w", encoding="utf-8") as f:
        f.write(text)
    return refused_start(args, v, log, "control_group an-nosuch",
                         "daemon.control_group: no group named an-nosuch")


def t_ingress_unbindable(args, v, log):
    """A policy file's daemon.ingress.listen that cannot be bound stops the start."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        daemon_settings(v, "  ingress: {listen: \"127.0.0.1:%d\"}\n" % port)
        return refused_start(args, v, log, "ingress.listen on a port in use",
                             "127.0.0.1:%d" % port)


# io_uring_setup's number, the one system call the filter below refuses, and the BPF of
# a seccomp filter that answers it EPERM (as kernel.io_uring_disabled does) and lets the
# rest through: struct sock_filter {u16 code; u8 jt, jf; u32 k} (linux/filter.h).
IO_URING_SETUP = {"x86_64": 425, "aarch64": 425}
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7fff0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def refuse_syscall(number):
    """A preexec_fn that installs a seccomp filter refusing system call <number> EPERM."""
    prog = (SockFilter * 4)(
        SockFilter(BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        SockFilter(BPF_JEQ_K, 0, 1, number),
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | 1),  # EPERM
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    fprog = SockFprog(4, prog)

    def preexec():
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            os._exit(99)
    return preexec


def t_no_io_uring(args, v, log):
    """A daemon whose io_uring_setup is refused (a seccomp filter of its own, as a runtime's
    profile or kernel.io_uring_disabled would) stops with "io_uring is unavailable"; the
    same filter on another call (getpriority) lets it start: the control run."""
    number = IO_URING_SETUP.get(os.uname().machine)
    if number is None:
        return ["no io_uring_setup number known for %s" % os.uname().machine]
    errs = []
    for refused, nr in ((True, number), (False, 140)):  # 140: getpriority (x86_64)
        err = os.path.join(v["top"], "daemon-%d.stderr" % nr)
        with open(err, "wb") as f:
            proc = subprocess.Popen([args.daemon, "--config", v["policy"]],
                                    stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                    preexec_fn=refuse_syscall(nr))
        try:
            if refused:
                code = proc.wait(30)
                text = read_text(err)
                log("no io_uring: exit %d: %s" % (code, [x for x in text.splitlines()
                                                         if "io_uring" in x][:1]))
                if code != 1 or "io_uring is unavailable: Operation not permitted" not in \
                        text or "agentsnetd: ready" in text or sanitizer_marks(text):
                    errs.append("io_uring_setup refused: exit %d, %r; want exit 1 saying "
                                "io_uring is unavailable" % (code, text[-600:]))
            else:
                await_ready(proc, err)
        finally:
            # The refused one has exited 1 (checked above); the control run must exit 0.
            stopped(proc, [] if refused else errs,
                    "the daemon under a filter of system call %d" % nr)
    return errs


def t_reload_start_only(args, v, log):
    """A reload that changes start-only settings (daemon.workers, resolver.servers, the
    timeouts, ingress.tls, alert_webhook) warns naming each and applies none: the workers
    stay 2, the gateway serves the certificate it started with; the rest reloads."""
    errs = []
    ca_pem, leaf_pem, leaf_key = make_pki(v["top"], ("127.0.0.1",))
    ca_key = os.path.join(v["top"], "ca.key")
    other_pem, other_key = make_leaf(v["top"], "other", ca_pem, ca_key, ("other.test",))
    ingress_port, hook_port = free_tcp_port(), free_tcp_port()
    daemon_settings(v, "  ingress: {listen: \"127.0.0.1:%d\", tls: {cert: %s, key: %s}}\n"
                    "  alert_webhook: {url: \"http://127.0.0.1:%d/hook\"}\n" % (
                        ingress_port, leaf_pem, leaf_key, hook_port))
    daemon = spawn(args, v)
    try:
        await_ready(daemon, v["err"])
        first = gateway_certificate(ingress_port)
        text = read_text(v["policy"])
        for old, new in (("workers: 2", "workers: 3"),
                         ("127.0.0.1:9\"]", "127.0.0.1:10\"]"),
                         ("  control_group: nogroup\n",
                          "  control_group: nogroup\n  timeouts: {drain_ms: 2000}\n"),
                         ("cert: %s, key: %s" % (leaf_pem, leaf_key),
                          "cert: %s, key: %s" % (other_pem, other_key)),
                         ("127.0.0.1:%d/hook" % hook_port, "127.0.0.1:%d/hook" % (hook_port + 1)),
                         ("  - {id: two, profile: service}\n",
                          "  - {id: two, profile: service}\n  - {id: three, profile: service}\n")):
            if old not in text:
                raise Fatal("the policy holds no %r to change" % old)
            text = text.replace(old, new)
        with open(v["policy"], "w", encoding="utf-8") as f:
            f.write(text)
        since = len(read_text(v["err"]))
        answer = control(v, "policy reload")
        warned = [x.split("reload: ", 1)[1].split(" changed")[0]
                  for x in read_text(v["err"])[since:].splitlines() if "read at start only" in x]
        log("reload of start-only settings: %r; warned about %r" % (answer.strip(), warned))
        want = ["daemon.ingress", "resolver.servers", "daemon.workers", "daemon.alert_webhook",
                "daemon timeouts"]
        if not answer.startswith("ok") or sorted(warned) != sorted(want):
            errs.append("the reload: %r, warnings naming %r; want ok and one warning for "
                        "each of %r" % (answer, warned, want))
        if not served(egress(v["sock_dir"], "three")).startswith(b"HTTP/1.1 200"):
            errs.append("the sandbox the same reload added does not serve")
        workers = worker_threads(daemon.pid)
        now = gateway_certificate(ingress_port)
        log("after it: %d workers; the gateway's certificate %s" % (
            workers, "the same" if now == first else "another"))
        if workers != 2:
            errs.append("after the reload: %d workers, want the 2 it started with" % workers)
        if now != first:
            errs.append("after the reload: the gateway serves another certificate; want the "
                        "one it started with")
    finally:
        stopped(daemon, errs)
    return errs


def gateway_certificate(port):
    """The DER certificate the TLS listener on 127.0.0.1:<port> presents."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="gateway.test") as tls:
            return tls.getpeercert(binary_form=True)


def slow_rule(v, port):
    """Adds a rule for slow.internal, whose origin at <port> never answers, to v's policy."""
    text = read_text(v["policy"])
    if "reason: loopback origin}\n" not in text:
        raise Fatal("the policy has no rule to add slow.internal after")
    text = text.replace(
        "reason: loopback origin}\n",
        "reason: loopback origin}\n"
        "      - {id: slow, host: slow.internal, tier: local, upstream: \"127.0.0.1:%d\",\n"
        "         owner: tests, reason: an origin that never answers}\n" % port)
    with open(v["policy"], "w", encoding="utf-8") as f:
        f.write(text)


def held_request(v):
    """A connection to sandbox one whose request (to slow.internal) is never answered."""
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.settimeout(30)
    held.connect(egress(v["sock_dir"], "one"))
    held.sendall(b"GET http://slow.internal/x HTTP/1.1\r\nHost: slow.internal\r\n\r\n")
    return held


def t_stop_order(args, v, log):
    """At SIGTERM the control socket stops first: while a held request keeps the daemon in
    its drain, the control socket answers no one."""
    errs = []
    port, close_origin = silent_origin()
    slow_rule(v, port)
    daemon_settings(v, "  timeouts: {drain_ms: 3000}\n")
    daemon = spawn(args, v)
    held = None
    try:
        await_ready(daemon, v["err"])
        if not control_line(v["sock_dir"], "ping").startswith("ok"):
            errs.append("no ping answered before the stop: the check is void")
        held = held_request(v)
        time.sleep(0.3)
        daemon.send_signal(signal.SIGTERM)
        wait_for(lambda: "draining for up to" in read_text(v["err"]) or
                 daemon.poll() is not None, 10, "the drain")
        answer = control_line(v["sock_dir"], "ping")
        draining = daemon.poll() is None and "drained in" not in read_text(v["err"])
        log("stop order: during the drain (%s) a ping gets %r" % (
            "under way" if draining else "over", answer))
        if not draining:
            errs.append("the daemon was not in its drain: the check is void")
        if answer:
            errs.append("during the drain the control socket answered %r; want it stopped "
                        "first" % answer[:80])
    finally:
        if held is not None:
            held.close()
        stopped(daemon, errs)
        close_origin()
    return errs


def t_no_drain(args, v, log):
    """drain_ms: 0: SIGTERM aborts at once, a request under way cut, no drain logged."""
    errs = []
    port, close_origin = silent_origin()
    slow_rule(v, port)
    daemon_settings(v, "  timeouts: {drain_ms: 0}\n")
    daemon = spawn(args, v)
    held = None
    try:
        await_ready(daemon, v["err"])
        held = held_request(v)
        time.sleep(0.3)
        t0 = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - t0
        cut = recv_all(held)
        log("no drain: exit %r %.2f s after SIGTERM; the held request got %r" % (
            code, took, cut[:40]))
        if code != 0 or took > 3 or "draining for up to" in read_text(v["err"]):
            errs.append("drain_ms 0: exit %r %.1f s after SIGTERM, %s; want exit 0 at once "
                        "(within 3 s; the default drain is 10 s), no drain" % (
                            code, took, "a drain logged" if "draining for up to" in
                            read_text(v["err"]) else "no drain logged"))
        if cut.startswith(b"HTTP/1.1 200"):
            errs.append("the held request was answered: %r" % cut[:80])
    finally:
        if held is not None:
            held.close()
        stopped(daemon, errs)
        close_origin()
    return errs


# ---- the control socket's refusals and a handover without ready (docs/control.md) ----


def as_nobody_control(v, line):
    """<line> asked on the control socket as nobody (group nogroup, the control group)."""
    script = ("import socket,sys\n"
              "s=socket.socket(socket.AF_UNIX)\n"
              "s.settimeout(10)\n"
              "s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode()+b'\\n')\n"
              "print(s.recv(400).decode())\n")
    proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                           sys.executable, "-c", script, os.path.join(v["sock_dir"],
                                                                       "control.sock"), line],
                          capture_output=True, text=True, timeout=30)
    return (proc.stdout + proc.stderr).strip()


def t_forbidden(v, log):
    """`daemon handover` and `audit reopen` by another caller than root: error forbidden;
    the same asked by root are answered (the control run), and the daemon serves on."""
    errs = []
    for line in ("daemon handover", "audit reopen"):
        answer = as_nobody_control(v, line)
        log("forbidden: %s as nobody: %r" % (line, answer))
        if not answer.startswith("error forbidden"):
            errs.append("%s as nobody (of the control group): %r, want error forbidden" % (
                line, answer[:200]))
    if not control(v, "audit reopen").startswith("ok audit reopened"):
        errs.append("audit reopen as root is not answered ok: the control run fails")
    if not control(v, "ping").startswith("ok") or \
            not served(egress(v["sock_dir"], "one")).startswith(b"HTTP/1.1 200"):
        errs.append("after the refusals the daemon does not serve")
    return errs


def read_byte_line(sock, fds):
    """One line from <sock>, a byte at a time, the descriptors that come with it added to
    <fds>."""
    line = b""
    while not line.endswith(b"\n"):
        data, got, _, _ = socket.recv_fds(sock, 1, 256)
        if not data:
            raise Fatal("the daemon closed the handover after %r" % line)
        line += data
        fds.extend(got)
    return line.decode()


def handover_take(sock_dir):
    """Asks `daemon handover` as root and takes every socket as agentsnetd --upgrade does
    (core/handover.h), but never says ready: (the connection, the descriptors, the names)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(os.path.join(sock_dir, "control.sock"))
    s.sendall(b"daemon handover\n")
    fds, names = [], []
    head = read_byte_line(s, fds)
    if not head.startswith("ok handover "):
        raise Fatal("daemon handover: %r" % head)
    while True:
        batch = read_byte_line(s, fds).split()
        if len(batch) != 3 or batch[0] != "batch":
            raise Fatal("a batch head %r" % batch)
        text = b""
        while len(text) < int(batch[2]):
            data, got, _, _ = socket.recv_fds(s, int(batch[2]) - len(text), 256)
            if not data:
                raise Fatal("the daemon closed the handover in a batch")
            text += data
            fds.extend(got)
        names += text.decode().split()
        if int(batch[1]) == 0:
            return s, fds, names
        s.sendall(b"next\n")


HANDOVER_MS = 1000  # handover_no_ready's daemon.timeouts.handover_ms


def t_handover_no_ready(v, log):
    """A successor that takes every socket (`daemon handover`) and leaves without `ready`
    (another line, the connection closed, or silence past daemon.timeouts.handover_ms,
    HANDOVER_MS here): the daemon goes on serving (its control socket and sandboxes), and
    says so; the silent one is given up no sooner than HANDOVER_MS after the last socket
    went, and well before the default 60 s."""
    errs = []
    for n, how in enumerate(("another line than ready", "the connection closed",
                             "silence past handover_ms"), 1):
        try:
            s, fds, names = handover_take(v["sock_dir"])
        except OSError as e:
            errs.append("before the handover with %s: the daemon does not answer: %s" % (how, e))
            break
        taken = time.monotonic()
        try:
            if how.startswith("another"):
                s.sendall(b"readyish\n")
                answer = recv_all(s)
            elif how.startswith("silence"):
                s.settimeout(5 * HANDOVER_MS / 1000)
                try:
                    answer = recv_all(s)  # the daemon's end of the connection, given up
                except OSError as e:
                    answer = ("no end within %.1f s: %s" % (5 * HANDOVER_MS / 1000, e)).encode()
                waited = time.monotonic() - taken
                log("handover: a silent successor given up after %.2f s (handover_ms %d)" % (
                    waited, HANDOVER_MS))
                if not HANDOVER_MS / 1000 - 0.05 <= waited < 5 * HANDOVER_MS / 1000:
                    errs.append("a silent successor was given up %.2f s after the sockets "
                                "went, want handover_ms (%d ms) at the earliest and within "
                                "5 times it" % (waited, HANDOVER_MS))
            else:
                answer = b""
        finally:
            s.close()
            for fd in fds:
                os.close(fd)
        said = wait_until(lambda: read_text(v["err"]).count("did not say it serves") >= n, 10)
        ping = control_line(v["sock_dir"], "ping")
        answers = [answer_of(egress(v["sock_dir"], sb)) for sb in ("one", "two")]
        log("handover without ready (%s): %d sockets taken (%s); then %r, ping %r, %r" % (
            how, len(fds), ",".join(names), answer[:40], ping.strip(),
            [a[:15] for a in answers]))
        if sorted(names) != ["control", "sandbox.one", "sandbox.two"] or len(fds) != 3:
            errs.append("%s: the handover passed %r (%d descriptors)" % (how, names, len(fds)))
        if answer.startswith(b"ok draining") or not ping.startswith("ok agentsnetd") or \
                any(not a.startswith(b"HTTP/1.1 200") for a in answers) or not said:
            errs.append("after a handover with %s: %r, ping %r, requests %r, %s; want the "
                        "daemon serving on, saying so" % (
                            how, answer[:80], ping[:80], [a[:40] for a in answers],
                            "logged" if said else "no log line"))
    return errs


def t_reopen_failed(v, log):
    """`audit reopen` of a path that cannot be opened: error reopen_failed on the control
    socket, said on stderr, the daemon writing on to the file it had."""
    errs = []
    moved = v["audit"] + ".1"
    os.rename(v["audit"], moved)
    os.mkdir(v["audit"])  # the path a directory: no file opens there
    try:
        since = len(read_text(v["err"]))
        answer = control(v, "audit reopen")
        said = [x for x in read_text(v["err"])[since:].splitlines()
                if "audit: reopen %s: Is a directory" % v["audit"] in x]
        before = len(read_text(moved).splitlines())
        ok = served(egress(v["sock_dir"], "one"))
        wait_for(lambda: len(read_text(moved).splitlines()) > before, 10,
                 "the next record in the file the daemon had")
        log("reopen failed: %r; stderr %r" % (answer.strip(), said[-1:]))
        if not answer.startswith("error reopen_failed") or not said or \
                not ok.startswith(b"HTTP/1.1 200"):
            errs.append("audit reopen onto a directory: %r, stderr %r; want error "
                        "reopen_failed and a line on stderr" % (answer[:200], said[-2:]))
    finally:
        os.rmdir(v["audit"])
        os.rename(moved, v["audit"])
    return errs


def t_old_daemon(args, v, log):
    """agentsnetd --upgrade against a daemon without `daemon handover` (a stand-in that
    answers it as an unknown request): exit 1, the old daemon's error printed."""
    os.makedirs(v["sock_dir"], mode=0o755)
    path = os.path.join(v["sock_dir"], "control.sock")
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(path)
    old.listen(4)
    refusal = "error bad_request unknown request (see docs/control.md)"
    asked = []

    def serve():
        while True:
            try:
                c, _ = old.accept()
            except OSError:
                return
            with c:
                c.settimeout(10)
                try:
                    asked.append(c.recv(512).decode().strip())
                    c.sendall(refusal.encode() + b"\n")
                except OSError:
                    pass

    th = threading.Thread(target=serve)
    th.start()
    try:
        proc = subprocess.run([args.daemon, "--config", v["policy"], "--upgrade"],
                              capture_output=True, text=True, timeout=60)
    finally:
        old.shutdown(socket.SHUT_RDWR)
        old.close()
        th.join()
    out = proc.stdout + proc.stderr
    log("old daemon: asked %r; --upgrade exit %d: %s" % (
        asked, proc.returncode, [x for x in out.splitlines() if "upgrade" in x][:2]))
    if asked != ["daemon handover"] or proc.returncode != 1 or refusal not in out or \
            sanitizer_marks(out) or "agentsnetd: ready" in out:
        return ["--upgrade against a daemon without daemon handover: asked %r, exit %d, %r; "
                "want exit 1 printing %r" % (asked, proc.returncode, out[-800:], refusal)]
    return []


TOP_INTERVAL_S = 0.1
TOP_FRAMES = 4


def t_top_interval(v, log):
    """`agentsnet top --interval 0.1` refreshes ten times a second: four frames come well
    before the default interval (1 s) would give two, none sooner than the interval."""
    proc = subprocess.Popen([v["cli"], "top", "--interval", str(TOP_INTERVAL_S),
                             "--socket-dir", v["sock_dir"]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    times = []
    t0 = time.monotonic()
    try:
        while len(times) < TOP_FRAMES and time.monotonic() - t0 < 10:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("agentsnet top: "):
                times.append((time.monotonic(), line.strip()))
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    took = times[-1][0] - t0 if times else 0
    gaps = [b[0] - a[0] for a, b in zip(times, times[1:])]
    log("top --interval %.1f: %d frames in %.2f s (%s)" % (
        TOP_INTERVAL_S, len(times), took, times[:1]))
    if len(times) != TOP_FRAMES or took > 2.0 or min(gaps) < TOP_INTERVAL_S * 0.8 or \
            "every 0.1 s" not in times[0][1]:
        return ["agentsnet top --interval %.1f: %d frames in %.2f s, gaps %r; want %d within "
                "2 s (the default gives one a second), each an interval apart, saying every "
                "0.1 s" % (TOP_INTERVAL_S, len(times), took, gaps, TOP_FRAMES)]
    return []


def t_upgrade_revoked(args, v, log):
    """An upgrade to a policy that no longer lets a run-time sandbox's registrant (nobody)
    register on its profile: one that fails after the new process read the registry but
    before `ready` (a control group that does not exist) leaves the record and directory,
    and the old daemon serving that sandbox; one that goes through removes them."""
    errs = []
    base = read_text(v["policy"])
    if "  service:\n    rules:\n" not in base:
        raise Fatal("the policy has no profile service to give users")
    policies = {
        "old": base.replace("  service:\n    rules:\n", "  service:\n    users: [nobody]\n"
                            "    rules:\n"),
        "failing": base.replace("  service:\n    rules:\n", "  service:\n    users: []\n"
                                "    rules:\n").replace("control_group: nogroup",
                                                        "control_group: an-nosuch"),
        "new": base.replace("  service:\n    rules:\n", "  service:\n    users: []\n"
                            "    rules:\n"),
    }
    for name, text in policies.items():
        with open(os.path.join(v["top"], name + ".yaml"), "w", encoding="utf-8") as f:
            f.write(text)
    record = os.path.join(v["sock_dir"], "registry", "rev")
    directory = os.path.join(v["sock_dir"], "sandboxes", "rev")

    def run(name, upgrade):
        err = os.path.join(v["top"], "daemon-%s.stderr" % name)
        return spawn(args, v, ["--upgrade"] if upgrade else [], err=err,
                     config=os.path.join(v["top"], name + ".yaml")), err

    old, old_err = run("old", False)
    daemons = [old]
    try:
        await_ready(old, old_err)
        added = as_nobody_control(v, "sandbox add rev service")
        have = (os.path.exists(record), os.path.isdir(directory))
        log("upgrade revoked: nobody's sandbox add: %r; record, directory %r" % (added, have))
        if not added.startswith("ok") or have != (True, True):
            return ["nobody's sandbox add rev service: %r, record and directory %r" % (
                added, have)]
        failing, failing_err = run("failing", True)
        daemons.append(failing)
        code = failing.wait(60)
        text = read_text(failing_err)
        have = (os.path.exists(record), os.path.isdir(directory))
        answer = answer_of(egress(v["sock_dir"], "rev"))
        log("an upgrade that fails before ready: exit %d; record, directory %r; rev %r" % (
            code, have, answer[:15]))
        if code != 1 or "no longer lets uid 65534 register" not in text or \
                "no group named an-nosuch" not in text:
            errs.append("the failing upgrade: exit %d, %r; want exit 1 after it read the "
                        "registry (its warning about rev) and failed on the control group" % (
                            code, text[-800:]))
        if have != (True, True) or not answer.startswith(b"HTTP/1.1 200") or \
                old.poll() is not None:
            errs.append("after an upgrade that failed before ready: record, directory %r, "
                        "rev answered %r, the old daemon %s; want both left and served" % (
                            have, answer[:60], "running" if old.poll() is None else "exited"))
        new, new_err = run("new", True)
        daemons.append(new)
        code = old.wait(30)
        gone = wait_until(lambda: not os.path.exists(record) and
                          not os.path.exists(directory), 10)
        log("the upgrade: the old daemon exited %d; record and directory %s" % (
            code, "removed" if gone else "left"))
        if code != 0 or not gone or "upgrade: every socket taken over" not in \
                read_text(new_err):
            errs.append("the upgrade that went through: the old daemon exited %d, record "
                        "and directory %s; want them removed" % (code, "removed" if gone
                                                                 else "left"))
    finally:
        daemons_stop(daemons)
    for name in ("old", "failing", "new"):
        text = read_text(os.path.join(v["top"], "daemon-%s.stderr" % name))
        if sanitizer_marks(text):
            errs.append("daemon %s: a sanitizer report: %s" % (name, text[-2000:]))
    return errs


# ---- kept sockets that no longer fit (docs/operating.md, "Restarts strand no sandbox") ----

REFIT = {"one": "its mode changed (0644)", "two": "not listening (a socket bound at its path)",
         "three": "another owner (uid 65534)", "five": "bound at another path",
         "four": "as it was made"}


def t_kept_refit(args, v, log):
    """After a kill, the kept sockets tampered with (mode, listening, owner, path) are made
    anew, the one that fits is taken back, one naming no sandbox is dropped from the store
    (FDSTOREREMOVE=1); a run-time sandbox's removal drops its socket from the store too."""
    errs = []
    m = v["manager"]
    with open(v["policy"], "a", encoding="utf-8") as f:
        f.write("".join("  - {id: %s, profile: service}\n" % sb
                        for sb in ("three", "four", "five")))
    env = {"NOTIFY_SOCKET": m.address}
    first = start_kept(args, v, env, False)
    second, held, passed = None, [], {}
    try:
        if m.wait(0, "READY") is None:
            return ["the first daemon said no READY=1"]
        first.kill()
        first.wait()
        paths = {sb: egress(v["sock_dir"], sb) for sb in REFIT}
        os.chmod(paths["one"], 0o644)
        os.chown(paths["three"], 65534, -1)
        os.unlink(paths["two"])
        for name, where, listening in (("sandbox.two", paths["two"], False),
                                       ("sandbox.five", os.path.join(v["top"], "else.sock"), True),
                                       ("sandbox.gone", os.path.join(v["top"], "gone.sock"), True)):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(where)
            if listening:
                s.listen(4)
            held.append(s)
            with m.lock:
                if name in m.store:
                    os.close(m.store[name])
                m.store[name] = os.dup(s.fileno())
        os.chmod(paths["two"], 0o666)
        # Each socket passed, by its identity (a file's inode number is reused once freed;
        # a socket held open keeps its own): a dup of each, held until the end.
        with m.lock:
            passed.update({sb: os.dup(m.store["sandbox." + sb]) for sb in REFIT})
        since, t_restart = len(read_text(v["err"])), time.monotonic()
        second = start_kept(args, v, env, True)
        if m.wait(t_restart, "READY", 30) is None:
            return errs + ["the daemon started again said no READY=1"]
        text = read_text(v["err"])[since:]
        for sb, how in REFIT.items():
            kept = "sandbox %s: serving the socket the service manager kept" % sb in text
            st = os.lstat(paths[sb])
            answer = answer_of(paths[sb])
            with m.lock:
                now = m.store.get("sandbox." + sb)
                same = now is not None and os.fstat(now).st_ino == os.fstat(passed[sb]).st_ino
            log("kept socket %s: %s: %s, %s; %r" % (sb, how, "taken back" if kept else
                                                    "made anew", "the same socket stored" if
                                                    same else "another socket stored",
                                                    answer[:15]))
            want = sb == "four"
            if kept != want or same != want or stat.S_IMODE(st.st_mode) != 0o666 or \
                    st.st_uid != 0 or not answer.startswith(b"HTTP/1.1 200"):
                errs.append("sandbox %s's kept socket, %s: %s, %s, mode %o uid %d, %r; want "
                            "it %s" % (sb, how, "taken back" if kept else "made anew",
                                       "the same socket stored" if same else "another",
                                       stat.S_IMODE(st.st_mode), st.st_uid, answer[:60],
                                       "taken back" if want else "made anew, 0666 root's"))
        dropped = [f for _, f in m.since(t_restart, "FDSTOREREMOVE")
                   if f.get("FDNAME") == "sandbox.gone"]
        if not dropped or "sandbox.gone" in m.store:
            errs.append("the kept socket naming no sandbox (sandbox.gone): %s from the store" % (
                "dropped" if dropped else "not dropped"))
        # A run-time sandbox removed: its socket dropped from the store.
        t0 = time.monotonic()
        added = control(v, "sandbox add six service")
        stored = m.wait(t0, "FDSTORE")
        removed = control(v, "sandbox rm six")
        gone = wait_until(lambda: [f for _, f in m.since(t0, "FDSTOREREMOVE")
                                   if f.get("FDNAME") == "sandbox.six"], 10)
        log("sandbox six: %s; stored %r; %s; removed from the store: %r" % (
            added.strip()[:30], stored and stored[1].get("FDNAME"), removed.strip(), gone))
        if not added.startswith("ok") or not stored or \
                stored[1].get("FDNAME") != "sandbox.six" or not removed.startswith("ok"):
            errs.append("sandbox six: add %r, stored %r, rm %r" % (added, stored, removed))
        elif not gone or "sandbox.six" in m.store:
            errs.append("sandbox rm six: no FDSTOREREMOVE=1 for sandbox.six; the store keeps %r"
                        % sorted(m.store))
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if second is not None:
            stopped(second, errs, "the daemon started again")
        for s in held:
            s.close()
        for fd in passed.values():
            os.close(fd)
    return errs


def answer_of(path):
    """served(<path>), or the name of the error that stopped it, as bytes."""
    try:
        return served(path)
    except OSError as e:
        return type(e).__name__.encode()


def wait_until(pred, timeout):
    """pred()'s first true value within <timeout> s, else its last."""
    deadline = time.monotonic() + timeout
    got = pred()
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
        got = pred()
    return got


# ---- running them ------------------------------------------------------------


# The tests that start their daemons themselves (<test>(args, v, log)), under one stand-in
# manager each.
OWN_DAEMONS = ("kept_sockets", "graceful_restart", "upgrade", "upgrade_changes", "metrics",
               "options", "embedded", "no_peer_check", "control_group_missing",
               "ingress_unbindable", "no_io_uring", "reload_start_only", "stop_order",
               "no_drain", "old_daemon", "kept_refit", "upgrade_revoked")


def run_test(args, name, test, log, tmp, origin_port):
    top = os.path.join(tmp, name)
    os.makedirs(top)
    v = {"name": name, "top": top, "sock_dir": os.path.join(top, "run"),
         "cli": os.path.join(os.path.dirname(args.daemon), "agentsnet"), "daemon": args.daemon,
         "audit": os.path.join(top, "audit.jsonl"), "policy": os.path.join(top, "policy.yaml"),
         "err": os.path.join(top, "daemon.stderr")}
    with open(v["policy"], "w", encoding="utf-8") as f:
        f.write(POLICY.format(sock_dir=v["sock_dir"], audit=v["audit"], port=origin_port))
    if name == "handover_no_ready":
        daemon_settings(v, "  timeouts: {handover_ms: %d}\n" % HANDOVER_MS)
    env = {}
    after = None
    cmd = [args.daemon, "--config", v["policy"]]
    if name == "notify":
        v["manager"] = Manager(os.path.join(top, "notify.sock"))
        env = {"NOTIFY_SOCKET": v["manager"].address,
               "WATCHDOG_USEC": str(int(WATCHDOG_S * 1e6))}
        after = after_notify
    elif name == "abstract":
        v["manager"] = Manager("@agentsnet-service-test-%d" % os.getpid())
        env = {"NOTIFY_SOCKET": v["manager"].address, "WATCHDOG_USEC": "200000",
               "WATCHDOG_PID": "1"}
    elif name == "unit":
        v["dest"] = make_install(v)
        unit = os.path.join(v["dest"], "lib", "systemd", "system", "agentsnetd.service")
        v["manager"] = Manager(os.path.join(top, "notify.sock"))
        env = {"NOTIFY_SOCKET": v["manager"].address}
        if os.path.exists(unit):
            cmd = ["setpriv", "--no-new-privs", "--bounding-set", unit_caps(unit),
                   "--inh-caps=-all"] + cmd
        after = after_unit
    elif name == "audit_rotation":
        after = after_audit_rotation
    elif name == "journal":
        with open(v["err"], "wb"):
            pass
        st = os.stat(v["err"])
        env = {"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}
    elif name == "bad_address":
        return bad_address(args, v)
    elif name in OWN_DAEMONS:
        return kept_sockets(args, v, log, test)

    def preexec():
        for key, value in env.items():
            os.environ[key] = value  # the child's, before its exec

    def body():
        try:
            v["pid"] = daemon_pid(v)
            errs = test(v, log)
        except (OSError, Fatal) as e:
            errs = ["%s: %s" % (type(e).__name__, e)]
        print("service: %s: %s" % (name, "ok" if not errs else "FAIL"))
        for e in errs:
            print("  " + e)
        return int(bool(errs))

    try:
        failed = with_daemon("service", cmd, v["err"], body, preexec)
    finally:
        if "manager" in v:
            time.sleep(0.2)
    if after is not None:
        errs = after(v)
        for e in errs:
            print("service: %s: FAIL after the stop: %s" % (name, e))
        failed += int(bool(errs))
    if "manager" in v:
        v["manager"].close()
    return failed


def daemon_pid(v):
    """The pid of the daemon serving v's control socket (its peer's credentials)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.path.join(v["sock_dir"], "control.sock"))
        creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[:4], sys.byteorder)


def after_unit(v):
    """Under the unit's bounds: READY=1, a request served, a reload, STOPPING=1."""
    m = v["manager"]
    errs = []
    for key in ("READY", "STOPPING"):
        if m.wait(0, key, 5) is None:
            errs.append("under the unit's bounds: no %s=1" % key)
    if "served under the unit" not in v.get("notes", ""):
        errs.append("under the unit's bounds: the request was not served")
    return errs


def kept_sockets(args, v, log, test):
    """Runs <test> (t_kept_sockets, t_graceful_restart) with daemons of its own under one
    stand-in manager; prints its outcome."""
    v["manager"] = Manager(os.path.join(v["top"], "notify.sock"))
    try:
        errs = test(args, v, log)
    except (OSError, Fatal, subprocess.TimeoutExpired) as e:
        errs = ["%s: %s" % (type(e).__name__, e)]
    finally:
        v["manager"].close()
    marks = sanitizer_marks(read_text(v["err"]))
    if marks:
        errs.append("a sanitizer report in the daemons' stderr: %s" % read_text(v["err"])[-3000:])
    print("service: %s: %s" % (v["name"], "ok" if not errs else "FAIL"))
    for e in errs:
        print("  " + e)
    return int(bool(errs))


def bad_address(args, v):
    env = dict(os.environ, NOTIFY_SOCKET="relative/notify.sock")
    proc = subprocess.run([args.daemon, "--config", v["policy"]], env=env,
                          capture_output=True, text=True, timeout=30)
    errs = []
    if proc.returncode != 1 or "NOTIFY_SOCKET" not in proc.stderr or \
            "ready" in proc.stderr:
        errs.append("NOTIFY_SOCKET=relative/notify.sock: exit %d, stderr %r; want exit 1 "
                    "naming $NOTIFY_SOCKET, nothing served" % (proc.returncode,
                                                              proc.stderr[-400:]))
    print("service: bad_address: %s" % ("ok" if not errs else "FAIL"))
    for e in errs:
        print("  " + e)
    return int(bool(errs))


def main():
    args, log = own_pass_args("agentsnet service pass", tests=True)
    if os.geteuid() != 0:
        print("service: FAIL: the unit's test runs the daemon as root under setpriv")
        return 1
    tmp = tempfile.mkdtemp(prefix="an-service-")
    os.chmod(tmp, 0o755)  # node_view asks the control socket as another account
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    origin.handle_error = lambda *_: None  # a daemon killed under load resets its upstreams
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    failed = ran = 0
    try:
        for name, test in (("notify", t_notify), ("abstract", t_abstract),
                           ("bad_address", t_bad_address), ("audit_rotation", t_audit_rotation),
                           ("node_view", t_node_view), ("kept_sockets", t_kept_sockets),
                           ("graceful_restart", t_graceful_restart), ("upgrade", t_upgrade),
                           ("upgrade_changes", t_upgrade_changes), ("metrics", t_metrics),
                           ("control_trickle", t_control_trickle),
                           ("control_checks", t_control_checks), ("signals", t_signals),
                           ("socket_dir_bounds", t_socket_dir_bounds),
                           ("check", t_check),
                           ("journal", t_journal),
                           ("unit", t_unit_served), ("options", t_options),
                           ("embedded", t_embedded), ("no_peer_check", t_no_peer_check),
                           ("control_group_missing", t_control_group_missing),
                           ("ingress_unbindable", t_ingress_unbindable),
                           ("no_io_uring", t_no_io_uring),
                           ("reload_start_only", t_reload_start_only),
                           ("stop_order", t_stop_order), ("no_drain", t_no_drain),
                           ("forbidden", t_forbidden), ("handover_no_ready", t_handover_no_ready),
                           ("reopen_failed", t_reopen_failed), ("old_daemon", t_old_daemon),
                           ("top_interval", t_top_interval), ("kept_refit", t_kept_refit),
                           ("upgrade_revoked", t_upgrade_revoked)):
            if args.tests and name not in args.tests:
                continue
            ran += 1
            failed += run_test(args, name, test, log, tmp, origin.server_address[1])
    finally:
        origin.shutdown()
    print_counts("service", ran - failed, failed)
    if ran == 0:
        print("service: no test named %s" % " ".join(args.tests or []))
        failed = 1
    return own_pass_end("service", tmp, failed)


def t_unit_served(v, log):
    """t_unit, and a request and a reload through the daemon under the unit's bounds."""
    errs = t_unit(v, log)
    if v["manager"].wait(0, "READY", 10) is None:
        return errs + ["under the unit's bounds: no READY=1"]
    answer = served(egress(v["sock_dir"], "one"))
    if answer.startswith(b"HTTP/1.1 200"):
        v["notes"] = "served under the unit"
    else:
        errs.append("under the unit's bounds: a request got %r" % answer[:120])
    t0 = time.monotonic()
    got = control(v, "policy reload")
    if not got.startswith("ok") or v["manager"].wait(t0, "READY", 5) is None:
        errs.append("under the unit's bounds: policy reload said %r" % got[:200])
    return errs


if __name__ == "__main__":
    sys.exit(main())
