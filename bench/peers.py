#!/usr/bin/env python3
"""Peer proxies that bench/bench.py compares agentsnetd with: squid, tinyproxy, haproxy,
the TLS-intercepting mitmproxy and squid ssl-bump, and nginx as a reverse proxy.

start() writes a peer's config into its own directory under the bench work dir, starts the
peer in the foreground pinned with taskset, and returns a Peer once a real request through
it has succeeded; Peer.stop() ends it by PID. Every wait is bounded. A peer that cannot run
here (binary missing, bad config, no ready signal in time) raises Unavailable, whose text
goes into the table instead of a figure.

Each peer is set up for loopback benchmarking, not caching or filtering:
  squid      forward (absolute-form HTTP) and CONNECT to any port; no disk or memory cache,
             no access log, no DNS beyond 127.0.0.1, as many open files as allowed;
  tinyproxy  forward and CONNECT to any port (no ConnectPort line), a thread per client;
  haproxy    a mode-tcp relay of every connection to one fixed target with splice: the
             reference for a zero-copy TCP relay, not a proxy that reads requests;
  mitmproxy  mitmdump in regular (CONNECT) mode, quiet, no flow kept, terminating the
             client's TLS with leaves from a CA of its own and relaying to the TLS origin,
             whose certificate it verifies against the origin's CA;
  squid-bump a second squid instance doing ssl-bump (peek at the ClientHello, stare at the
             server, bump), with its own CA, its certificate helper and database in its
             directory, verifying the origin. It needs the OpenSSL build (Debian's
             squid-openssl, which replaces squid: the same binary then serves both);
  nginx-proxy nginx as a reverse proxy (the ingress reference): one worker in the
             foreground, access log off, every request to one Unix socket (the sandbox's
             ingress.sock) over HTTP/1.1 with upstream keep-alive of as many connections as
             the bench opens, so it never reconnects mid-run; it adds the forwarding headers
             agentsnetd's ingress gateway adds (X-Forwarded-*, Forwarded) and keeps the
             client's Host, so that both hand the agent the same work.

The TLS peers' CAs and the origin's certificate are P-256 (tls_ca, tls_leaf: the openssl
command line), as agentsnet's own, so that no subject pays for a bigger key than another.

Started as root, squid drops to `proxy` and tinyproxy to `tinyproxy` (else `nobody`), and
both open their logs after dropping, so the peer's directory is chowned to that user, and
the work dir, which `mktemp -d` makes 0700, gets the search bit for others (o+x: reach
known names, list nothing). Rejected: running them as root (not how they are deployed) and
leaving their logs in /var/log (two benches at once would share them).

Peer memory is summed over the whole process tree (walked through /proc/*/stat), since
squid in SMP mode runs a master, a coordinator and a kid per worker.
"""

import argparse
import glob
import grp
import http.server
import json
import os
import pwd
import resource
import shutil
import signal
import socket
import socketserver
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import time

READY_TIMEOUT_S = 20
STOP_TIMEOUT_S = 20
PROBE_TIMEOUT_S = 2.0
VERSION_TIMEOUT_S = 10
LOG_TAIL_LINES = 12
HEAD_BYTES_MAX = 16384
# Relayed connections cost two open files each (client and upstream side) and files are
# limited per process (20,000 here): 9,000 leaves room for bench.py's 8,000 idle tunnels
# plus listeners, logs and, for haproxy, its splice pipes.
CONNS_MAX = 9000
# haproxy holds a pipe (two files, 64 KiB) per connection only while data is in flight;
# 512 of them stay far below the 64 MiB per-user pipe soft cap (1,024 pipes of 64 KiB).
HAPROXY_PIPES_MAX = 512
# Idle tunnels are held 5 minutes by bench.py; every idle timeout must outlast that.
IDLE_TIMEOUT_S = 900
SQUID_FD_MAX = 65536  # Debian's squid is built --with-filedescriptors=65536
SBIN_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"
PEER_ROLES = {
    "squid": frozenset({"forward", "connect"}),
    "tinyproxy": frozenset({"forward", "connect"}),
    "haproxy": frozenset({"tcp_relay"}),
    "mitmproxy": frozenset({"tls_intercept"}),
    "squid-bump": frozenset({"tls_intercept"}),
    "nginx-proxy": frozenset({"reverse_proxy"}),
}
CERT_DAYS = 2  # bench certificates outlive any run, and nothing else
SQUID_CERTGEN = "/usr/lib/squid/security_file_certgen"
SQUID_CERT_CACHE_MB = 16
# nginx-proxy's upstream keep-alive cache, in connections: bench.py's most connections at
# once (512), so no request of a run waits for a new connection to the sandbox.
NGINX_KEEPALIVE = 512


class Unavailable(Exception):
    """The peer cannot run here; str(e) is the reason for the table."""


class ProbeFailed(Exception):
    """A request through the peer got a wrong answer (it may not be ready yet)."""


def free_port():
    """A loopback port free right now (the peer that takes it follows at once)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def which(binary):
    return shutil.which(binary) or shutil.which(binary, path=SBIN_PATH)


def tail(paths, lines=LOG_TAIL_LINES):
    """The last <lines> lines of the files in <paths> that exist, each under its name."""
    out = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read().splitlines()
        except OSError:
            continue
        if text:
            out.append("-- %s:" % os.path.basename(path))
            out.extend(text[-lines:])
    return "\n".join(out)


def version(binary, flag="-v"):
    """The first version-looking word of `<binary> <flag>` ("5.7", or the version in
    "nginx/1.22.1"), or "?"."""
    try:
        proc = subprocess.run([binary, flag], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    for word in proc.stdout.decode(errors="replace").split():
        if word[:1].isdigit():
            return word
        if "/" in word and word.rsplit("/", 1)[1][:1].isdigit():
            return word.rsplit("/", 1)[1]
    return "?"


# ---- process tree -----------------------------------------------------------------------

def proc_stat(pid):
    """(ppid, starttime) of <pid> from /proc/<pid>/stat, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    fields = raw[raw.rindex(b")") + 2:].split()
    return int(fields[1]), int(fields[19])


def process_tree(root):
    """[(pid, starttime)] of <root> and all its descendants alive now, <root> first."""
    top = proc_stat(root)
    if top is None:
        return []
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = proc_stat(int(entry))
        if st is not None:
            children.setdefault(st[0], []).append((int(entry), st[1]))
    tree = [(root, top[1])]
    i = 0
    while i < len(tree):
        tree.extend(children.get(tree[i][0], []))
        i += 1
    return tree


def mem_kib_of(pid):
    """(VmRSS, Pss) of <pid> in KiB; (0, 0) if it exited meanwhile."""
    rss = pss = 0
    try:
        with open("/proc/%d/status" % pid, encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        with open("/proc/%d/smaps_rollup" % pid, encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return 0, 0
    return rss, pss


# ---- readiness probe ----------------------------------------------------------------------

def read_head(sock):
    """(head, rest): bytes up to and including the first blank line, and what followed."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise ProbeFailed("connection closed after %d bytes: %r" % (len(buf), buf[:80]))
        buf += chunk
        if len(buf) > HEAD_BYTES_MAX:
            raise ProbeFailed("no end of header in %d bytes" % len(buf))
    end = buf.index(b"\r\n\r\n") + 4
    return buf[:end], buf[end:]


def expect_2xx(head, what):
    line = head.split(b"\r\n", 1)[0]
    parts = line.split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].startswith(b"2"):
        raise ProbeFailed("%s answered %r" % (what, line.decode(errors="replace")))


def probe_connect(port, origin, target):
    """A CONNECT to <target> (our <origin> listener) through <port> gets a 2xx and relays."""
    with socket.create_connection(("127.0.0.1", port), PROBE_TIMEOUT_S) as c:
        c.settimeout(PROBE_TIMEOUT_S)
        c.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
        head, rest = read_head(c)
        expect_2xx(head, "CONNECT")
        a, _ = origin.accept()
        with a:
            a.sendall(b"ping")
            while len(rest) < 4:
                chunk = c.recv(4 - len(rest))
                if not chunk:
                    raise ProbeFailed("tunnel closed before the origin's bytes")
                rest += chunk
    if rest != b"ping":
        raise ProbeFailed("tunnel relayed %r, not b'ping'" % rest)


def probe_forward(port, origin, target):
    """An absolute-form GET for <target> (our <origin> listener) through <port> gets a 2xx."""
    with socket.create_connection(("127.0.0.1", port), PROBE_TIMEOUT_S) as c:
        c.settimeout(PROBE_TIMEOUT_S)
        c.sendall(b"GET http://%s/probe HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                  % (target, target))
        a, _ = origin.accept()
        with a:
            a.settimeout(PROBE_TIMEOUT_S)
            req, _ = read_head(a)
            if not req.startswith(b"GET /probe "):
                raise ProbeFailed("origin got %r" % req.split(b"\r\n", 1)[0])
            a.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        head, _ = read_head(c)
        expect_2xx(head, "forward GET")


def probe_tls(port, tls):
    """A GET inside a CONNECT tunnel through <port>, over TLS verified against the peer's CA
    for the origin's name, gets a 2xx: the peer terminates, relays and answers."""
    target = b"%s:%d" % (tls["host"].encode(), tls["port"])
    name = tls["name"]
    with socket.create_connection(("127.0.0.1", port), PROBE_TIMEOUT_S) as c:
        c.settimeout(PROBE_TIMEOUT_S)
        c.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
        head, rest = read_head(c)
        expect_2xx(head, "CONNECT")
        if rest:
            raise ProbeFailed("%d bytes after the CONNECT answer" % len(rest))
        ctx = ssl.create_default_context(cafile=tls["ca_file"])
        with ctx.wrap_socket(c, server_hostname=name) as t:
            t.sendall(b"GET /probe HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
                      % (name.encode(), tls["port"]))
            head, _ = read_head(t)
            expect_2xx(head, "GET through the interception")


def probe_reverse(port):
    """An origin-form GET / to <port> gets a 2xx: the reverse proxy reached its upstream."""
    with socket.create_connection(("127.0.0.1", port), PROBE_TIMEOUT_S) as c:
        c.settimeout(PROBE_TIMEOUT_S)
        c.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port)
        head, _ = read_head(c)
        expect_2xx(head, "GET through the reverse proxy")


def probe(port, roles, tls=None):
    """Raise OSError or ProbeFailed unless the peer on <port> serves each of its <roles>.

    forward and connect go to a listener opened here; the peer answers before we accept, so
    one thread is enough. tcp_relay only needs the port to accept: its target belongs to
    the caller. tls_intercept goes to the caller's TLS origin, <tls> (see Peer), and
    reverse_proxy to the caller's upstream."""
    if "tls_intercept" in roles:
        probe_tls(port, tls)
    if "reverse_proxy" in roles:
        probe_reverse(port)
    if "tcp_relay" in roles:
        socket.create_connection(("127.0.0.1", port), PROBE_TIMEOUT_S).close()
    if not roles & {"forward", "connect"}:
        return
    with socket.socket() as origin:
        origin.bind(("127.0.0.1", 0))
        origin.listen(8)
        origin.settimeout(PROBE_TIMEOUT_S)
        target = b"127.0.0.1:%d" % origin.getsockname()[1]
        if "connect" in roles:
            probe_connect(port, origin, target)
        if "forward" in roles:
            probe_forward(port, origin, target)


# ---- the peer -----------------------------------------------------------------------------

class Peer:
    """One running peer: its main process <proc> (a Popen) and the files in <dir>.

    name is one of PEER_ROLES; port where it listens on 127.0.0.1; roles a subset of
    {"forward", "connect", "tcp_relay", "tls_intercept", "reverse_proxy"}; version its
    version string. A
    tls_intercept peer has tls: {"host", "port"} of the TLS origin it is tried against, the
    "name" its certificate is for, and "ca_file", the peer's own CA that clients trust."""

    def __init__(self, name, port, proc, dir, logs, version_str, cleanup=None, tls=None):
        self.name = name
        self.port = port
        self.roles = PEER_ROLES[name]
        self.proc = proc
        self.dir = dir
        self.logs = logs
        self.version = version_str
        self.cleanup = cleanup
        self.tls = tls
        self.exit_code = None

    def __repr__(self):
        return "<Peer %s %s on 127.0.0.1:%d pid %d>" % (self.name, self.version, self.port,
                                                        self.proc.pid)

    def pids(self) -> list[int]:
        """Every process of the peer alive now, main first; [] once it has exited."""
        if self.proc.poll() is not None:
            return []
        return [pid for pid, _start in process_tree(self.proc.pid)]

    def mem_kib(self) -> tuple[int, int]:
        """(sum of VmRSS, sum of Pss) in KiB over pids()."""
        rss = pss = 0
        for pid in self.pids():
            r, p = mem_kib_of(pid)
            rss += r
            pss += p
        return rss, pss

    def log_tail(self):
        return tail(self.logs)

    def stop(self) -> int:
        """SIGTERM, bounded wait, SIGKILL; returns the exit code: 0 for a clean stop, the
        peer's own code, or minus the signal that ended it otherwise (-9 after SIGKILL).
        haproxy leaves SIGTERM at its default action (a hard stop): dying of the SIGTERM we
        sent counts as a clean stop, 0.

        Descendants still alive after the main process (kids of a killed squid master)
        are killed by PID, checked against their start time. Calling it again returns the
        first exit code."""
        if self.exit_code is not None:
            return self.exit_code
        tree = process_tree(self.proc.pid) if self.proc.poll() is None else []
        code = self.proc.returncode
        if code is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(STOP_TIMEOUT_S)
                if code == -signal.SIGTERM:
                    code = 0
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait(STOP_TIMEOUT_S)
        for pid, start in tree[1:]:
            st = proc_stat(pid)
            if st is not None and st[1] == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.cleanup:
            self.cleanup()
        self.exit_code = code
        return code


# ---- set-up shared by the peers -----------------------------------------------------------

def searchable_by(st, uid, gids):
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def grant_traversal(work, user):
    """Let <user> reach files under <work>: add o+x to <work> if it needs it; Unavailable if
    an ancestor we were not given blocks the way."""
    pw = pwd.getpwnam(user)
    gids = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    work = os.path.abspath(work)
    st = os.stat(work)
    if not searchable_by(st, pw.pw_uid, gids):
        os.chmod(work, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
    parent = os.path.dirname(work)
    while True:
        if not searchable_by(os.stat(parent), pw.pw_uid, gids):
            raise Unavailable("user %s cannot reach %s: %s is not searchable by it"
                              % (user, work, parent))
        if parent == "/":
            return
        parent = os.path.dirname(parent)


def make_dir(work, name, port, user):
    """<work>/<name>-<port>, owned by <user> (None: by us) so the peer can write its logs."""
    path = os.path.join(os.path.abspath(work), "%s-%d" % (name, port))
    os.mkdir(path, 0o755)
    if user is not None:
        pw = pwd.getpwnam(user)
        grant_traversal(work, user)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def drop_user(candidates):
    """The first of <candidates> that exists, if we run as root (who must drop); else None."""
    if os.geteuid() != 0:
        return None
    for user in candidates:
        try:
            pwd.getpwnam(user)
            return user
        except KeyError:
            continue
    raise Unavailable("running as root, and none of the users %s exists" % ", ".join(candidates))


def write(path, text):
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
    os.chmod(path, 0o644)


def fd_limit():
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def launch(name, binary, args, port, dir, cpu, logs, cleanup=None, pid_file=None, tls=None,
           version_flag="-v"):
    """Start <binary> <args> pinned to <cpu> in <dir>, and wait until probe() passes on
    <port> (with <tls> for a tls_intercept peer). taskset execs the peer, so the Popen's PID
    is the peer's; it goes to <pid_file> for a peer that writes none in the foreground.

    Returns the Peer; on any failure stops what it started and raises Unavailable with the
    reason and the tails of <logs> (the peer's output file is added to them)."""
    out_path = os.path.join(dir, "%s.out" % name)
    logs = [out_path, *logs]
    taskset = which("taskset")
    if taskset is None:
        raise Unavailable("taskset is not installed")
    version_str = version(binary, version_flag)
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([taskset, "-c", cpu, binary, *args], cwd=dir,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    peer = Peer(name, port, proc, dir, logs, version_str, cleanup, tls)
    try:
        if pid_file is not None:
            write(pid_file, "%d\n" % proc.pid)
        wait_ready(peer)
    except BaseException:
        peer.stop()
        raise
    return peer


def wait_ready(peer):
    """Return once probe() passes on <peer>; Unavailable if it exits or READY_TIMEOUT_S ends
    first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "nothing listened"
    while time.monotonic() < deadline:
        if peer.proc.poll() is not None:
            raise Unavailable("%s exited %d at start-up\n%s" % (peer.name, peer.proc.returncode,
                                                               peer.log_tail()))
        try:
            probe(peer.port, peer.roles, peer.tls)
            return
        except (OSError, ProbeFailed) as e:
            last = str(e) or type(e).__name__
        time.sleep(0.05)
    raise Unavailable("%s not ready on 127.0.0.1:%d after %ds (%s)\n%s"
                      % (peer.name, peer.port, READY_TIMEOUT_S, last, peer.log_tail()))


# ---- squid --------------------------------------------------------------------------------

def squid_bump_conf(dir, port, ca, origin_ca):
    """The http_port line and the ssl-bump section of squid-bump (see squid_conf)."""
    return ("""http_port 127.0.0.1:%(port)d ssl-bump tls-cert=%(ca)s/ca.pem tls-key=%(ca)s/ca.key \
generate-host-certificates=on dynamic_cert_mem_cache_size=%(mb)dMB
""" % {"port": port, "ca": ca, "mb": SQUID_CERT_CACHE_MB}, """
# ssl-bump as its documentation advises: peek at the ClientHello (SNI), stare at the
# server (its certificate is mimicked, signed by our CA), then bump. Leaves are minted by
# the certificate helper, cached in memory and in the helper's database; the server's
# certificate is verified against the origin's CA (a mismatch is an error, never bumped).
sslcrtd_program %(certgen)s -s %(dir)s/ssl_db -M 4MB
sslcrtd_children 8 startup=1 idle=1
acl step1 at_step SslBump1
acl step2 at_step SslBump2
ssl_bump peek step1
ssl_bump stare step2
ssl_bump bump all
tls_outgoing_options cafile=%(origin_ca)s
""" % {"certgen": SQUID_CERTGEN, "dir": dir, "origin_ca": origin_ca})


def squid_conf(dir, port, workers, user, bump=None):
    """squid.conf for a loopback forward/CONNECT proxy keeping every file in <dir>; with
    <bump> (the http_port line, the ssl-bump section) the squid-bump peer instead."""
    fds = min(fd_limit(), SQUID_FD_MAX)
    owner = "cache_effective_user %s\n" % user if user else ""
    listen, bump_section = bump or ("http_port 127.0.0.1:%d\n" % port, "")
    return """# agentsnet bench peer: squid as a plain forward and CONNECT proxy on loopback.
%(listen)sworkers %(workers)d
%(owner)svisible_hostname agentsnet-bench
max_filedescriptors %(fds)d

# Anyone on loopback may go anywhere, on any port: no Safe_ports/SSL_ports rules and no
# to_localhost deny, since every origin of the bench is 127.0.0.1.
http_access allow localhost
http_access deny all

# No cache at all: not on disk (no cache_dir), not in memory.
cache deny all
cache_mem 0 MB
maximum_object_size_in_memory 0 KB
digest_generation off

# Every file it writes lives here, none in /var/spool/squid, /var/log/squid or
# /run/squid.pid (SMP's IPC sockets alone go to the built-in /run/squid).
pid_filename %(dir)s/squid.pid
cache_log %(dir)s/cache.log
coredump_dir %(dir)s
access_log none
cache_store_log none
netdb_filename none
logfile_rotate 0

# Origins are IP literals, which squid never resolves; any lookup stays on loopback.
dns_nameservers 127.0.0.1
udp_incoming_address 127.0.0.1
udp_outgoing_address 127.0.0.1
pinger_enable off

# Pass requests through as they are; no Via or X-Forwarded-For to add.
via off
forwarded_for transparent

# Idle tunnels are held minutes: outlast them. Stop at once on SIGTERM.
read_timeout %(idle)d seconds
shutdown_lifetime 0 seconds
%(bump)s""" % {"listen": listen, "workers": workers, "owner": owner, "fds": fds, "dir": dir,
       "idle": IDLE_TIMEOUT_S, "bump": bump_section}


def squid_can_bump(binary):
    """None if <binary> can ssl-bump, else why not (for the table)."""
    try:
        proc = subprocess.run([binary, "-v"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "squid -v failed: %s" % e
    if b"--with-openssl" not in proc.stdout:
        return ("this squid is not built with OpenSSL (Debian's squid is the GnuTLS build): "
                "ssl-bump needs squid-openssl (tools/deps.sh bench)")
    if not os.access(SQUID_CERTGEN, os.X_OK):
        return "%s is missing (Debian's squid-openssl ships it)" % SQUID_CERTGEN
    return None


def squid_bump_prepare(dir, user, tls):
    """The squid-bump peer's CA and certificate database in <dir> (owned by <user>); the
    bump settings for squid_conf."""
    ca = os.path.join(dir, "ca")
    os.mkdir(ca, 0o755)
    tls_ca(ca, "agentsnet bench squid-bump CA")
    db = os.path.join(dir, "ssl_db")
    init = subprocess.run([SQUID_CERTGEN, "-c", "-s", db, "-M", "4MB"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=VERSION_TIMEOUT_S, check=False)
    if init.returncode != 0:
        raise Unavailable("%s -c failed: %s" % (SQUID_CERTGEN, init.stdout.decode()[-500:]))
    if user is not None:
        pw = pwd.getpwnam(user)
        for root, dirs, files in os.walk(db):
            for name in [root] + [os.path.join(root, x) for x in dirs + files]:
                os.chown(name, pw.pw_uid, pw.pw_gid)
    tls["ca_file"] = os.path.join(ca, "ca.pem")
    return ca


def start_squid(work, cpu, workers, tls=None):
    binary = which("squid")
    if binary is None:
        raise Unavailable("squid is not installed")
    why = squid_can_bump(binary) if tls is not None else None
    if why is not None:
        raise Unavailable(why)
    user = drop_user(["proxy"])
    port = free_port()
    name = "squid-bump" if tls is not None else "squid"
    dir = make_dir(work, name, port, user)
    bump = None
    if tls is not None:
        bump = squid_bump_conf(dir, port, squid_bump_prepare(dir, user, tls), tls["origin_ca"])
    conf = os.path.join(dir, "squid.conf")
    write(conf, squid_conf(dir, port, workers, user, bump))
    # The service name prefixes SMP's shared memory (/dev/shm) and IPC sockets, which
    # squid 5.7 puts in its built-in /run/squid: unique per instance so two never collide.
    service = "anbench%d" % port
    # -N runs one process that is master and worker; SMP needs the master to fork kids.
    mode = ["-N"] if workers == 1 else ["--foreground"]

    def cleanup():
        for path in (glob.glob("/run/squid/%s-*.ipc" % service)
                     + glob.glob("/dev/shm/%s-*.shm" % service)):
            try:
                os.unlink(path)
            except OSError:
                pass

    try:
        return launch(name, binary, [*mode, "-n", service, "-f", conf], port, dir, cpu,
                      [os.path.join(dir, "cache.log")], cleanup, tls=tls)
    except Unavailable as e:
        if workers > 1:
            raise Unavailable("squid SMP with %d workers failed: %s" % (workers, e)) from None
        raise


# ---- tinyproxy ----------------------------------------------------------------------------

def tinyproxy_conf(dir, port, user):
    group = grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name if user else None
    owner = "User %s\nGroup %s\n" % (user, group) if user else ""
    return """# agentsnet bench peer: tinyproxy as a plain forward and CONNECT proxy on loopback.
%(owner)sListen 127.0.0.1
Port %(port)d
Allow 127.0.0.1
# No ConnectPort line: CONNECT may reach any port.
# 1.11 runs a thread per client (no StartServers/MinSpareServers any more): MaxClients is
# the one limit, sized by open files (two per client).
MaxClients %(clients)d
Timeout %(idle)d
DisableViaHeader Yes
PidFile "%(dir)s/tinyproxy.pid"
LogFile "%(dir)s/tinyproxy.log"
# Notice logs start-up, shutdown and errors, not every connection.
LogLevel Notice
""" % {"owner": owner, "port": port, "clients": CONNS_MAX, "idle": IDLE_TIMEOUT_S,
       "dir": dir}


def start_tinyproxy(work, cpu, workers):
    binary = which("tinyproxy")
    if binary is None:
        raise Unavailable("tinyproxy is not installed")
    if workers != 1:
        raise Unavailable("tinyproxy has no workers setting (one process, a thread per client)")
    user = drop_user(["tinyproxy", "nobody"])
    port = free_port()
    dir = make_dir(work, "tinyproxy", port, user)
    conf = os.path.join(dir, "tinyproxy.conf")
    write(conf, tinyproxy_conf(dir, port, user))
    return launch("tinyproxy", binary, ["-d", "-c", conf], port, dir, cpu,
                  [os.path.join(dir, "tinyproxy.log")])


# ---- haproxy ------------------------------------------------------------------------------

def haproxy_conf(port, target, workers):
    # Each relayed connection holds two files and each pipe two more: they must all fit.
    pipes = HAPROXY_PIPES_MAX
    conns = min(CONNS_MAX, (fd_limit() - 2 * pipes - 64) // 2)
    return """# agentsnet bench peer: haproxy as the splice TCP-relay reference. Every connection
# to the frontend is relayed as bytes to one fixed target (no request is read), through
# kernel pipes (socket -> pipe -> socket splice) instead of copies through user space.
global
	nbthread %(threads)d
	maxconn %(conns)d
	maxpipes %(pipes)d

defaults
	mode tcp
	option splice-request
	option splice-response
	timeout connect 10s
	# Idle tunnels are held minutes: outlast them.
	timeout client %(idle)ds
	timeout server %(idle)ds

frontend relay
	bind 127.0.0.1:%(port)d
	maxconn %(conns)d
	default_backend origin

backend origin
	server origin %(host)s:%(tport)d maxconn %(conns)d
""" % {"threads": workers, "conns": conns, "pipes": pipes, "idle": IDLE_TIMEOUT_S,
       "port": port, "host": target[0], "tport": target[1]}


def start_haproxy(work, cpu, workers, relay_target):
    if relay_target is None:
        raise ValueError("haproxy is a tcp_relay peer: it needs relay_target")
    binary = which("haproxy")
    if binary is None:
        raise Unavailable("haproxy is not installed")
    port = free_port()
    dir = make_dir(work, "haproxy", port, None)
    conf = os.path.join(dir, "haproxy.cfg")
    write(conf, haproxy_conf(port, relay_target, workers))
    check = subprocess.run([binary, "-c", "-f", conf], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=VERSION_TIMEOUT_S, check=False)
    if check.returncode != 0:
        raise Unavailable("haproxy rejects its config:\n%s" % check.stdout.decode()[-2000:])
    # haproxy writes no pid file in the foreground (-db): launch() writes it.
    return launch("haproxy", binary, ["-db", "-f", conf], port, dir, cpu, [],
                  pid_file=os.path.join(dir, "haproxy.pid"))


# ---- mitmproxy ----------------------------------------------------------------------------

def start_mitmproxy(work, cpu, workers, tls):
    binary = which("mitmdump")
    if binary is None:
        raise Unavailable("mitmproxy is not installed (Debian's mitmproxy: tools/deps.sh bench)")
    if workers != 1:
        raise Unavailable("mitmproxy has no workers setting (one asyncio process)")
    port = free_port()
    dir = make_dir(work, "mitmproxy", port, None)
    ca = os.path.join(dir, "ca")
    os.mkdir(ca, 0o755)
    tls_ca(ca, "agentsnet bench mitmproxy CA")
    # mitmproxy's CA file is the key and the certificate in one PEM, in its confdir.
    with open(os.path.join(ca, "ca.key"), "rb") as k, open(os.path.join(ca, "ca.pem"), "rb") as c:
        pem = k.read() + c.read()
    path = os.path.join(dir, "mitmproxy-ca.pem")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(pem)
    tls["ca_file"] = os.path.join(ca, "ca.pem")
    # Quiet: no flow printed or kept (mitmdump keeps none without a view), errors only.
    args = ["--listen-host", "127.0.0.1", "--listen-port", str(port), "-q",
            "--set", "confdir=%s" % dir, "--set", "termlog_verbosity=error",
            "--set", "flow_detail=0", "--set", "ssl_verify_upstream_trusted_ca=%s"
            % tls["origin_ca"]]
    return launch("mitmproxy", binary, args, port, dir, cpu, [], tls=tls,
                  version_flag="--version")


# ---- nginx as a reverse proxy --------------------------------------------------------------

def nginx_head(dir, nofile, conns, idle_s):
    """The start of every nginx.conf here, up to the open http block: one worker in the
    foreground, <nofile> files and <conns> connections, every file in <dir>, no access log,
    keep-alive for <idle_s> seconds."""
    return """worker_processes 1;
daemon off;
master_process off;
worker_rlimit_nofile %(nofile)d;
pid %(dir)s/nginx.pid;
error_log %(dir)s/nginx-error.log warn;
events { worker_connections %(conns)d; }
http {
	access_log off;
	client_body_temp_path %(dir)s/nginx-body;
	proxy_temp_path %(dir)s/nginx-proxy;
	fastcgi_temp_path %(dir)s/nginx-fastcgi;
	uwsgi_temp_path %(dir)s/nginx-uwsgi;
	scgi_temp_path %(dir)s/nginx-scgi;
	keepalive_requests 100000000;
	keepalive_timeout %(idle)ds;
""" % {"dir": dir, "nofile": nofile, "conns": conns, "idle": idle_s}


def nginx_proxy_conf(dir, port, upstream):
    """nginx.conf of nginx-proxy: 127.0.0.1:<port> relays every request to the Unix socket
    <upstream>, every file in <dir> (see the module's docstring)."""
    conns = min(CONNS_MAX, (fd_limit() - 64) // 2)
    return ("# agentsnet bench peer: nginx as a reverse proxy to one Unix socket (the ingress "
            "one).\n" + nginx_head(dir, fd_limit(), conns, IDLE_TIMEOUT_S) + """	# One connection to the socket per request in flight, kept open between requests.
	upstream sandbox {
		server unix:%(upstream)s;
		keepalive %(keepalive)d;
		keepalive_requests 100000000;
		keepalive_timeout %(idle)ds;
	}
	server {
		listen 127.0.0.1:%(port)d backlog=4096;
		location / {
			proxy_pass http://sandbox;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			# What agentsnetd's ingress gateway sends the agent, too.
			proxy_set_header Host $http_host;
			proxy_set_header X-Forwarded-For $remote_addr;
			proxy_set_header X-Forwarded-Proto $scheme;
			proxy_set_header X-Forwarded-Host $http_host;
			proxy_set_header Forwarded "for=$remote_addr;proto=$scheme;host=\\"$http_host\\"";
		}
	}
}
""" % {"idle": IDLE_TIMEOUT_S, "upstream": upstream, "keepalive": NGINX_KEEPALIVE,
       "port": port})


def start_nginx_proxy(work, cpu, workers, upstream):
    if upstream is None:
        raise ValueError("nginx-proxy is a reverse_proxy peer: it needs reverse_upstream")
    if workers != 1:
        raise Unavailable("nginx-proxy runs one worker here (master_process off)")
    binary = which("nginx")
    if binary is None:
        raise Unavailable("nginx is not installed (tools/deps.sh bench installs it)")
    port = free_port()
    dir = make_dir(work, "nginx-proxy", port, None)
    conf = os.path.join(dir, "nginx.conf")
    write(conf, nginx_proxy_conf(dir, port, upstream))
    check = subprocess.run([binary, "-t", "-q", "-e", os.path.join(dir, "nginx-error.log"),
                            "-p", dir, "-c", conf], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=VERSION_TIMEOUT_S, check=False)
    if check.returncode != 0:
        raise Unavailable("nginx rejects its config:\n%s" % check.stdout.decode()[-2000:])
    return launch("nginx-proxy", binary, ["-e", os.path.join(dir, "nginx-error.log"), "-p", dir,
                                          "-c", conf], port, dir, cpu,
                  [os.path.join(dir, "nginx-error.log")])


# ---- TLS material ---------------------------------------------------------------------------

def openssl(*args):
    """Runs the openssl command line (tools/deps.sh installs it); Unavailable on a failure."""
    binary = which("openssl")
    if binary is None:
        raise Unavailable("openssl is not installed")
    proc = subprocess.run([binary, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=VERSION_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise Unavailable("openssl %s failed: %s" % (args[0], proc.stdout.decode()[-500:]))


def tls_ca(dir, cn):
    """A P-256 root CA in <dir>: ca.pem and ca.key (0600), valid CERT_DAYS days."""
    openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-sha256", "-days", str(CERT_DAYS), "-subj", "/CN=%s" % cn,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", os.path.join(dir, "ca.key"), "-out", os.path.join(dir, "ca.pem"))


def tls_leaf(dir, ca_dir, name):
    """A P-256 server certificate for <name> and 127.0.0.1 in <dir> (leaf.pem, leaf.key),
    signed by the CA tls_ca made in <ca_dir>."""
    key, csr, cert = (os.path.join(dir, x) for x in ("leaf.key", "leaf.csr", "leaf.pem"))
    ext = os.path.join(dir, "leaf.ext")
    write(ext, "subjectAltName=DNS:%s,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
          "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n" % name)
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", "/CN=%s" % name, "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", os.path.join(ca_dir, "ca.pem"), "-CAkey",
            os.path.join(ca_dir, "ca.key"), "-set_serial", "0x" + os.urandom(16).hex(),
            "-days", str(CERT_DAYS), "-sha256", "-extfile", ext, "-out", cert)
    return cert, key


# ---- the interface bench.py uses ----------------------------------------------------------

def start(name: str, work: str, cpu: str, relay_target: tuple[str, int] | None = None,
          workers: int = 1, tls_origin: dict | None = None,
          reverse_upstream: str | None = None) -> Peer:
    """Start peer <name> (one of PEER_ROLES) on a free loopback port, pinned to <cpu> (a
    taskset list), its files in a new directory under <work>.

    <workers> is squid's SMP workers and haproxy's nbthread; tinyproxy, mitmproxy and
    squid-bump have none (only 1). <relay_target> (host, port) is where haproxy relays every
    connection; the others ignore it. <tls_origin>, mandatory for mitmproxy and squid-bump,
    is the TLS origin they are tried against: {"host", "port", "name" (its certificate's),
    "origin_ca" (the CA file that verifies it)}; the Peer's tls adds "ca_file", the peer's
    own CA. <reverse_upstream>, mandatory for nginx-proxy, is the Unix socket it relays
    every request to. Returns the Peer once a request through it succeeded (a CONNECT and a
    forward GET; for haproxy an accepted connection, which haproxy relays to <relay_target>
    and closes at once; a GET over TLS through a tunnel for the TLS peers; a GET / answered
    2xx by the upstream for nginx-proxy). Raises Unavailable
    when it cannot run here and ValueError for a name or argument no peer accepts."""
    if name not in PEER_ROLES:
        raise ValueError("unknown peer %r (want one of %s)" % (name, ", ".join(PEER_ROLES)))
    if workers < 1:
        raise ValueError("workers must be >= 1, not %d" % workers)
    if "tls_intercept" in PEER_ROLES[name]:
        if tls_origin is None:
            raise ValueError("%s is a tls_intercept peer: it needs tls_origin" % name)
        tls = dict(tls_origin)
        if name == "mitmproxy":
            return start_mitmproxy(work, cpu, workers, tls)
        if workers != 1:
            raise Unavailable("squid-bump runs one process here (-N)")
        return start_squid(work, cpu, workers, tls)
    if name == "nginx-proxy":
        return start_nginx_proxy(work, cpu, workers, reverse_upstream)
    if name == "squid":
        return start_squid(work, cpu, workers)
    if name == "tinyproxy":
        return start_tinyproxy(work, cpu, workers)
    return start_haproxy(work, cpu, workers, relay_target)


# ---- self-test: python3 bench/peers.py [--wrk] [--keep] -----------------------------------

LOAD_CPU = "0"
PEER_CPU = "1" if (os.cpu_count() or 1) >= 2 else "0"
RUN_TIMEOUT_S = 60
WRK_SECONDS = 3
WRK_CONNECTIONS = 64
RELAY_BYTES = 8 << 20
# Where Debian's squid and tinyproxy write by default; the peers must leave them alone.
SYSTEM_PATHS = ("/var/spool/squid", "/var/log/squid", "/run/squid.pid", "/var/log/tinyproxy",
                "/run/tinyproxy", "/run/tinyproxy.pid")


def snapshot(paths):
    """{path: (mtime, entries)} of <paths>, None for a missing one."""
    snap = {}
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            snap[path] = None
            continue
        entries = sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else []
        snap[path] = (st.st_mtime_ns, entries)
    return snap


class Helpers:
    """Processes the self-test starts besides the peers: pinned, stopped by PID."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, cmd, out_name, cpu=LOAD_CPU):
        with open(os.path.join(self.work, out_name), "wb") as out:
            p = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def wait_port(self, port, proc):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("%s exited %d" % (proc.args[3], proc.returncode))
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nothing listens on 127.0.0.1:%d" % port)

    def stop_all(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(STOP_TIMEOUT_S)


def run_load(cmd, env=None):
    proc = subprocess.run(["taskset", "-c", LOAD_CPU, *cmd], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          timeout=RUN_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), proc.returncode,
                                                 proc.stderr.decode()[-1000:]))
    return proc.stdout.decode()


def curl(proxy_port, url, tunnel):
    """The body of <url> fetched through the proxy on <proxy_port> (CONNECT if <tunnel>)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "all_proxy")}
    cmd = ["curl", "-sS", "--max-time", "10", "-x", "http://127.0.0.1:%d" % proxy_port]
    return run_load(cmd + (["-p"] if tunnel else []) + [url], env=env)


def show(peer):
    rss, pss = peer.mem_kib()
    print("  %r: pids %s, VmRSS %d KiB, Pss %d KiB" % (peer, peer.pids(), rss, pss))


def test_proxy(name, work, origin_port, workers=1):
    peer = start(name, work, PEER_CPU, workers=workers)
    try:
        show(peer)
        url = "http://127.0.0.1:%d/hello.txt" % origin_port
        for tunnel in (False, True):
            body = curl(peer.port, url, tunnel)
            how = "CONNECT (curl -p -x)" if tunnel else "forward (curl -x)"
            if body != "hello, peers\n":
                raise RuntimeError("%s via %s got %r" % (how, name, body[:200]))
            print("  %s: %s -> %r" % (how, url, body))
        show(peer)
    finally:
        code = peer.stop()
    print("  stopped, exit code %d, pids now %s" % (code, peer.pids()))
    return code


def accept_talker(origin):
    """(socket, first bytes) of the first connection to <origin> that sends something:
    start()'s readiness probe went through haproxy too, and closed without a word."""
    while True:
        a, _ = origin.accept()
        a.settimeout(10)
        up = a.recv(64)
        if up:
            return a, up
        a.close()


def send_all_close(sock, n):
    try:
        sock.sendall(b"x" * n)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the reader reports the short count


def test_relay(work):
    with socket.socket() as origin:
        origin.bind(("127.0.0.1", 0))
        origin.listen(8)
        origin.settimeout(PROBE_TIMEOUT_S * 5)
        peer = start("haproxy", work, PEER_CPU, relay_target=origin.getsockname())
        try:
            show(peer)
            with socket.create_connection(("127.0.0.1", peer.port), 5) as c:
                c.settimeout(10)
                c.sendall(b"hello, origin")
                a, up = accept_talker(origin)
                with a:
                    t0 = time.monotonic()
                    # More than the socket buffers hold: the origin sends from a thread.
                    sender = threading.Thread(target=send_all_close, args=(a, RELAY_BYTES))
                    sender.start()
                    n = 0
                    while True:
                        chunk = c.recv(1 << 20)
                        if not chunk:
                            break
                        n += len(chunk)
                    dt = time.monotonic() - t0
                    sender.join(10)
            if up != b"hello, origin" or n != RELAY_BYTES:
                raise RuntimeError("relay carried %r up and %d of %d bytes down"
                                   % (up, n, RELAY_BYTES))
            print("  relayed %r up and %d bytes down (%.0f MB/s, Python both ends)"
                  % (up, n, n / dt / 1e6))
            show(peer)
        finally:
            code = peer.stop()
    print("  stopped, exit code %d" % code)
    return code


def nginx_conf(work, port, nofile=20000, tls=None):
    """Writes <work>/nginx.conf: the benchmarks' HTTP origin, one worker in the foreground,
    every file in <work>, answering 200 "hello, bench" with keep-alive on 127.0.0.1:<port>
    (and /echo-authorization with the Authorization header it got: bench.py checks the
    inject tier's swap so); with <tls> (port, certificate, key) also over TLS on that
    port, with nginx's defaults
    otherwise (TLS 1.2 and 1.3, session tickets). Returns the file's path (bench.py's
    origin and this module's self-test use it)."""
    conf = os.path.join(work, "nginx.conf")
    listen_tls = ""
    if tls is not None:
        listen_tls = ("listen 127.0.0.1:%d ssl backlog=4096;\n\t\tssl_certificate %s;\n"
                      "\t\tssl_certificate_key %s;\n\t\t" % tls)
    write(conf, nginx_head(work, nofile, 8192, 120) + """	server {
		listen 127.0.0.1:%(port)d backlog=4096;
		%(tls)slocation / { return 200 "hello, bench\\n"; }
		location = /echo-authorization { return 200 "$http_authorization\\n"; }
	}
}
""" % {"port": port, "tls": listen_tls})
    return conf


def nginx_agent_conf(body):
    """The config of bench.py's agent, an nginx inside a sandbox answering 200 <body> with
    keep-alive to every request, as (head, tail): the sandbox's port goes between them
    (the sandbox's shell writes it from $AGENT_INGRESS_PORT). One worker in the foreground
    as the sandbox's unprivileged user, errors to stderr, every file in the sandbox's
    private /tmp (the host's, where the bench's work dir is, is hidden there)."""
    quoted = body.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    head = """worker_processes 1;
daemon off;
master_process off;
pid /tmp/nginx.pid;
error_log stderr warn;
events { worker_connections %d; }
http {
	access_log off;
	client_body_temp_path /tmp/nginx-body;
	proxy_temp_path /tmp/nginx-proxy;
	fastcgi_temp_path /tmp/nginx-fastcgi;
	uwsgi_temp_path /tmp/nginx-uwsgi;
	scgi_temp_path /tmp/nginx-scgi;
	keepalive_requests 100000000;
	keepalive_timeout %ds;
	server {
		listen 127.0.0.1:""" % (CONNS_MAX, IDLE_TIMEOUT_S)
    tail = """ backlog=4096;
		location / { return 200 "%s"; }
	}
}
""" % quoted
    return head, tail


def nginx_origin(helpers, work):
    """An nginx answering 200 with a small body, as bench.py's HTTP origin; its port."""
    nginx = which("nginx")
    port = free_port()
    conf = nginx_conf(work, port)
    p = helpers.start([nginx, "-e", os.path.join(work, "nginx-error.log"), "-p", work, "-c",
                       conf], "nginx.out")
    helpers.wait_port(port, p)
    return port


def wrk(url, target):
    env = dict(os.environ)
    env.pop("BENCH_TARGET", None)
    if target:
        env["BENCH_TARGET"] = target
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forward.lua")
    out = run_load(["wrk", "-t1", "-c%d" % WRK_CONNECTIONS, "-d%ds" % WRK_SECONDS, "-s", script,
                    url], env=env)
    return json.loads([x for x in out.splitlines() if x.startswith("{")][-1])


def test_wrk(helpers, work, fallback_port):
    if which("nginx"):
        origin, kind = nginx_origin(helpers, work), "nginx"
    else:
        origin, kind = fallback_port, "python3 -m http.server"
    target = "127.0.0.1:%d" % origin
    print("  wrk -t1 -c%d -d%ds, load on cpu %s, proxy on cpu %s, origin %s on cpu %s"
          % (WRK_CONNECTIONS, WRK_SECONDS, LOAD_CPU, PEER_CPU, kind, LOAD_CPU))
    runs = [("direct", None)] + [(n, n) for n in ("squid", "tinyproxy")]
    for label, name in runs:
        peer = start(name, work, PEER_CPU) if name else None
        try:
            if peer:
                doc = wrk("http://127.0.0.1:%d/" % peer.port, target)
            else:
                doc = wrk("http://%s/" % target, None)
        finally:
            if peer:
                peer.stop()
        print("  %-10s %8.0f req/s  p50 %5d us  p99 %6d us  errors %d (non-2xx %d)"
              % (label, doc["rps"], doc["p50_us"], doc["p99_us"], doc["errors"],
                 doc["non_2xx"]))


def tls_origin(helpers, work):
    """nginx over TLS with a certificate for bench.origin from a CA made here: the origin
    of the tls_intercept peers, as start() takes it."""
    tls = os.path.join(work, "origin-tls")
    os.mkdir(tls, 0o755)
    tls_ca(tls, "agentsnet peers self-test origin CA")
    cert, key = tls_leaf(tls, tls, "bench.origin")
    port, tls_port = free_port(), free_port()
    # Its own prefix: test_wrk's nginx writes <work>/nginx.conf and nginx.pid.
    conf = nginx_conf(tls, port, tls=(tls_port, cert, key))
    p = helpers.start([which("nginx"), "-e", os.path.join(tls, "nginx-error.log"), "-p", tls,
                       "-c", conf], "nginx-tls.out")
    helpers.wait_port(tls_port, p)
    return {"host": "127.0.0.1", "port": tls_port, "name": "bench.origin",
            "origin_ca": os.path.join(tls, "ca.pem")}


def test_intercept(name, work, origin):
    """<name> intercepts: curl, trusting the peer's CA only, gets nginx's body over TLS."""
    peer = start(name, work, PEER_CPU, tls_origin=origin)
    try:
        show(peer)
        url = "https://%s:%d/" % (origin["name"], origin["port"])
        env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "all_proxy")}
        body = run_load(["curl", "-sS", "--max-time", "10", "--cacert", peer.tls["ca_file"],
                         "-x", "http://127.0.0.1:%d" % peer.port, "--connect-to",
                         "%s:%d:127.0.0.1:%d" % (origin["name"], origin["port"], origin["port"]),
                         url], env=env)
        if body != "hello, bench\n":
            raise RuntimeError("%s via %s got %r" % (url, name, body[:200]))
        print("  CONNECT, TLS verified against %s's CA: %s -> %r" % (name, url, body))
    finally:
        code = peer.stop()
    print("  stopped, exit code %d, pids now %s" % (code, peer.pids()))
    return code


class UnixHandler(http.server.BaseHTTPRequestHandler):
    """The self-test's upstream of nginx-proxy: 200 "hello, unix" with keep-alive."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"hello, unix\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self):
        return "unix"  # a Unix socket's peer has no address

    def log_message(self, *args):
        pass


def test_reverse(work):
    """nginx-proxy relays a GET to a Unix socket served here, twice on one connection."""
    path = os.path.join(work, "upstream.sock")
    server = socketserver.ThreadingUnixStreamServer(path, UnixHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        peer = start("nginx-proxy", work, PEER_CPU, reverse_upstream=path)
        try:
            show(peer)
            url = "http://127.0.0.1:%d/" % peer.port
            body = run_load(["curl", "-sS", "--max-time", "10", url, url])
            if body != "hello, unix\n" * 2:
                raise RuntimeError("%s via nginx-proxy got %r" % (url, body[:200]))
            print("  reverse proxy to %s: %s twice -> %r" % (path, url, body))
        finally:
            code = peer.stop()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        os.unlink(path)
    print("  stopped, exit code %d, pids now %s" % (code, peer.pids()))
    return code


def selftest(args):
    work = tempfile.mkdtemp(prefix="agentsnet-peers.")  # 0700, as bench/run.sh's mktemp -d
    before = snapshot(SYSTEM_PATHS)
    helpers = Helpers(work)
    failed = []
    try:
        www = os.path.join(work, "www")
        os.mkdir(www)
        write(os.path.join(www, "hello.txt"), "hello, peers\n")
        origin_port = free_port()
        p = helpers.start([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                           "--directory", www, str(origin_port)], "http-server.out")
        helpers.wait_port(origin_port, p)
        print("self-test in %s; origin: python3 -m http.server on 127.0.0.1:%d (pid %d)"
              % (work, origin_port, p.pid))
        tests = [("squid", lambda: test_proxy("squid", work, origin_port)),
                 ("squid, workers=2", lambda: test_proxy("squid", work, origin_port, 2)),
                 ("tinyproxy", lambda: test_proxy("tinyproxy", work, origin_port)),
                 ("tinyproxy, workers=2 (must be Unavailable)",
                  lambda: test_proxy("tinyproxy", work, origin_port, 2)),
                 ("haproxy", lambda: test_relay(work))]
        if which("nginx"):
            tests.append(("nginx-proxy", lambda: test_reverse(work)))
        if which("nginx"):
            origin = tls_origin(helpers, work)
            tests += [(n, lambda n=n: test_intercept(n, work, origin)) for n in
                      ("mitmproxy", "squid-bump")]
        if args.wrk:
            tests.append(("forward throughput", lambda: test_wrk(helpers, work, origin_port)))
        for label, fn in tests:
            print("%s:" % label)
            try:
                code = fn()
                if code not in (None, 0):
                    failed.append("%s exited %d" % (label, code))
            except Unavailable as e:
                print("  Unavailable: %s" % e)
                if "must be Unavailable" not in label:
                    failed.append(label)
            except (RuntimeError, OSError, ProbeFailed, subprocess.TimeoutExpired) as e:
                print("  FAIL: %s" % e)
                failed.append(label)
    finally:
        helpers.stop_all()
    after = snapshot(SYSTEM_PATHS)
    touched = [p for p in SYSTEM_PATHS if before[p] != after[p]]
    print("system paths %s: %s" % (", ".join(SYSTEM_PATHS),
                                   "touched: %s" % touched if touched else "untouched"))
    failed += ["wrote %s" % p for p in touched]
    if args.keep:
        print("kept %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("self-test: %s" % ("FAIL: %s" % "; ".join(failed) if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="start and stop each bench peer once")
    ap.add_argument("--wrk", action="store_true", help="also measure forward req/s with wrk")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    sys.exit(selftest(ap.parse_args()))
