#!/usr/bin/env python3
"""agentsnet load benchmarks (driven by bench/run.sh, i.e. `make bench`).

Starts, all on 127.0.0.1 and each pinned with taskset: the raw origin
(bench/tunnel origin), the HTTP origin (nginx when installed, else tunnel
origin --http), and agentsnetd with a bench policy that serves its TCP
listener as sandbox "bench". The load (clients and origins) runs on one core,
the proxy on another. Then, each agentsnetd figure next to the direct
connection measured in the same run:

  a) CONNECT tunnel throughput, 1 stream, download, median of 3 (target >=
     0.70 of direct);
     also upload, 4 streams, and the sandbox's Unix socket, for information;
  b) plain-HTTP forward requests/s with wrk, absolute-form through the proxy
     vs. origin-form straight to the origin, with p50/p99/p99.9 latency;
  c) idle tunnel memory: the daemon's VmRSS and Pss before and after opening
     8,000 idle tunnels from several client processes (target <= 2 KiB each).

Prints one table and writes the figures as JSON (--results). Every process is
stopped by its PID; every wait is bounded. Exit 0 when every measurement ran
(a missed target is reported, and fails the run only with AN_BENCH_STRICT=1),
1 when something broke.
"""

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THROUGHPUT_SECONDS = 4
THROUGHPUT_REPEATS = 3  # the target figure: median of this many, direct and proxy interleaved
WRK_SECONDS = 5
WRK_CONNECTIONS = 64
IDLE_TUNNELS = 8000
IDLE_PROCS = 4  # open files are limited per process; spread the tunnels
READY_TIMEOUT_S = 30
IDLE_READY_TIMEOUT_S = 120
ORIGIN_NAME = "bench.origin"


class Broken(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    """A loopback port free right now (the listener that takes it follows at once)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_until(path, needle, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        if needle in text:
            return text
        if proc.poll() is not None:
            raise Broken("%s exited %d before %r:\n%s" % (proc.args[0], proc.returncode,
                                                         needle, text[-3000:]))
        time.sleep(0.05)
    raise Broken("timed out after %ds waiting for %r in %s" % (timeout, needle, path))


def mem_kib(pid):
    """(VmRSS, Pss) of <pid> in KiB."""
    rss = pss = None
    with open("/proc/%d/status" % pid, encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    with open("/proc/%d/smaps_rollup" % pid, encoding="ascii") as f:
        for line in f:
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
    return rss, pss


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = []
        self.rows = []
        self.raw = {}
        ncpu = os.cpu_count() or 1
        self.load_cpu = "0"
        self.proxy_cpu = "1" if ncpu >= 2 else "0"

    # ---- processes ----------------------------------------------------------

    def start(self, cmd, out_name, cpu, env=None):
        path = os.path.join(self.work, out_name)
        out = open(path, "wb")
        p = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()
        self.procs.append(p)
        return p, path

    def stop(self, p, timeout=20):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def stop_all(self):
        for p in reversed(self.procs):
            self.stop(p)

    def run_load(self, cmd, timeout, env=None):
        proc = subprocess.run(["taskset", "-c", self.load_cpu, *cmd], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout, env=env, check=False)
        if proc.returncode != 0:
            raise Broken("%s exited %d: %s" % (" ".join(cmd), proc.returncode,
                                              proc.stderr.decode()[-2000:]))
        return proc.stdout.decode()

    # ---- set-up -------------------------------------------------------------

    def start_origins(self):
        p, path = self.start([self.args.tunnel, "origin", "--listen", "127.0.0.1:0"],
                             "origin-raw.out", self.load_cpu)
        text = read_until(path, "origin: listening", p, READY_TIMEOUT_S)
        self.raw_port = int(text.split("origin: listening")[1].split()[0].rsplit(":", 1)[1])
        nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
        self.http_port = free_port()
        if nginx:
            self.http_origin = "nginx"
            conf = self.nginx_conf()
            p, path = self.start([nginx, "-e", os.path.join(self.work, "nginx-error.log"),
                                  "-p", self.work, "-c", conf], "origin-http.out", self.load_cpu)
            self.wait_port(self.http_port, p)
        else:
            self.http_origin = "tunnel origin --http"
            p, path = self.start([self.args.tunnel, "origin", "--http", "--listen",
                                  "127.0.0.1:%d" % self.http_port], "origin-http.out",
                                 self.load_cpu)
            read_until(path, "origin: listening", p, READY_TIMEOUT_S)

    def nginx_conf(self):
        w = self.work
        conf = os.path.join(w, "nginx.conf")
        with open(conf, "w", encoding="ascii") as f:
            f.write("""worker_processes 1;
daemon off;
master_process off;
pid %(w)s/nginx.pid;
error_log %(w)s/nginx-error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %(w)s/nginx-body;
	proxy_temp_path %(w)s/nginx-proxy;
	fastcgi_temp_path %(w)s/nginx-fastcgi;
	uwsgi_temp_path %(w)s/nginx-uwsgi;
	scgi_temp_path %(w)s/nginx-scgi;
	keepalive_requests 100000000;
	keepalive_timeout 120s;
	server {
		listen 127.0.0.1:%(port)d;
		location / { return 200 "hello, bench\\n"; }
	}
}
""" % {"w": w, "port": self.http_port})
        return conf

    def wait_port(self, port, proc):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise Broken("origin exited %d (see %s)" % (proc.returncode, self.work))
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise Broken("nothing listens on 127.0.0.1:%d" % port)

    def start_daemon(self):
        self.tcp_port = free_port()
        self.sock_dir = os.path.join(self.work, "sock")
        os.mkdir(self.sock_dir)
        policy = os.path.join(self.work, "bench.yaml")
        with open(policy, "w", encoding="ascii") as f:
            f.write("""version: 1
daemon:
  socket_dir: %(sock)s
  audit_log: %(w)s/audit.jsonl
  workers: 1
  tcp_listen: 127.0.0.1:%(tcp)d
  tcp_sandbox: bench
resolver:
  # Loopback only: the system resolver's address must never see a query.
  servers: ["127.0.0.1:9"]
  hosts: {%(name)s: [127.0.0.1]}
  allow_private: [127.0.0.1/32]
profiles:
  bench:
    rules:
      - {host: %(name)s, tier: passthrough, owner: bench, reason: loopback bench origins}
sandboxes: [{id: bench, profile: bench}]
""" % {"sock": self.sock_dir, "w": self.work, "tcp": self.tcp_port, "name": ORIGIN_NAME})
        self.daemon, self.daemon_out = self.start(
            [self.args.daemon, "--config", policy, "--workers", "1"], "agentsnetd.err",
            self.proxy_cpu)
        read_until(self.daemon_out, "agentsnetd: ready", self.daemon, READY_TIMEOUT_S)

    # ---- measurements -------------------------------------------------------

    def row(self, name, unit, ours, direct, target=None, higher_better=True):
        ratio = ours / direct if direct else None
        ok = None
        if target is not None:
            ok = ratio >= target if higher_better and direct else ours <= target
        self.rows.append({"name": name, "unit": unit, "agentsnetd": ours, "direct": direct,
                          "ratio": ratio, "target": target, "met": ok})

    def throughput(self, via, streams=1, up=False):
        cmd = [self.args.tunnel, "throughput", "--streams", str(streams), "--seconds",
               str(THROUGHPUT_SECONDS), "--dir", "up" if up else "down"]
        authority = "%s:%d" % (ORIGIN_NAME, self.raw_port)
        if via == "direct":
            cmd += ["--direct", "--target", "127.0.0.1:%d" % self.raw_port]
        elif via == "tcp":
            cmd += ["--proxy", "127.0.0.1:%d" % self.tcp_port, "--authority", authority]
        else:
            cmd += ["--proxy-unix", os.path.join(self.sock_dir, "sandboxes", "bench",
                                                 "egress.sock"), "--authority", authority]
        out = self.run_load(cmd, THROUGHPUT_SECONDS + 60)
        fields = dict(x.split("=", 1) for x in out.split("throughput:")[1].split())
        return float(fields["gbit_s"])

    def bench_throughput(self):
        direct, ours = [], []
        for _ in range(THROUGHPUT_REPEATS):
            direct.append(self.throughput("direct"))
            ours.append(self.throughput("tcp"))
        self.raw["tunnel_1_stream_down"] = {"direct": direct, "agentsnetd": ours}
        self.row("tunnel 1 stream down (TCP listener, median of %d)" % THROUGHPUT_REPEATS,
                 "Gbit/s", sorted(ours)[len(ours) // 2], sorted(direct)[len(direct) // 2], 0.70)
        for label, kw in (("tunnel 1 stream up", {"up": True}),
                          ("tunnel 4 streams down", {"streams": 4})):
            direct1 = self.throughput("direct", **kw)
            ours1 = self.throughput("tcp", **kw)
            self.row("%s (TCP listener)" % label, "Gbit/s", ours1, direct1)
        direct = self.throughput("direct")
        ours = self.throughput("unix")
        self.row("tunnel 1 stream down (Unix socket)", "Gbit/s", ours, direct)

    def wrk(self, via):
        script = os.path.join(HERE, "forward.lua")
        env = dict(os.environ)
        if via == "direct":
            url = "http://127.0.0.1:%d/" % self.http_port
            env.pop("BENCH_TARGET", None)
        else:
            url = "http://127.0.0.1:%d/" % self.tcp_port
            env["BENCH_TARGET"] = "%s:%d" % (ORIGIN_NAME, self.http_port)
        out = self.run_load(["wrk", "-t1", "-c%d" % WRK_CONNECTIONS, "-d%ds" % WRK_SECONDS,
                             "-s", script, url], WRK_SECONDS + 60, env=env)
        doc = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
        if doc["errors"] or doc["requests"] == 0:
            raise Broken("wrk %s: %d errors (%d non-2xx) in %d requests" % (
                via, doc["errors"], doc["non_2xx"], doc["requests"]))
        return doc

    def bench_forward(self):
        direct = self.wrk("direct")
        ours = self.wrk("proxy")
        self.raw["wrk"] = {"direct": direct, "agentsnetd": ours, "origin": self.http_origin}
        self.row("plain-HTTP forward", "req/s", ours["rps"], direct["rps"])
        for key, label in (("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9")):
            self.row("plain-HTTP forward latency %s" % label, "us", ours[key], direct[key])

    def bench_idle(self):
        before = mem_kib(self.daemon.pid)
        per = IDLE_TUNNELS // IDLE_PROCS
        clients = []
        for i in range(IDLE_PROCS):
            p, path = self.start([self.args.tunnel, "idle", "--proxy",
                                  "127.0.0.1:%d" % self.tcp_port, "--authority",
                                  "%s:%d" % (ORIGIN_NAME, self.raw_port), "--count", str(per),
                                  "--hold-seconds", "300"], "idle-%d.out" % i, self.load_cpu)
            clients.append((p, path))
        for p, path in clients:
            read_until(path, "idle: ready", p, IDLE_READY_TIMEOUT_S)
        time.sleep(1.0)
        after = mem_kib(self.daemon.pid)
        for p, _path in clients:
            if self.stop(p) != 0:
                raise Broken("idle client exited %d" % p.returncode)
        time.sleep(1.0)
        closed = mem_kib(self.daemon.pid)
        n = per * IDLE_PROCS
        rss_per = (after[0] - before[0]) / n
        pss_per = (after[1] - before[1]) / n
        self.raw["idle"] = {"tunnels": n, "rss_kib_before": before[0], "rss_kib_after": after[0],
                            "rss_kib_closed": closed[0], "pss_kib_before": before[1],
                            "pss_kib_after": after[1], "pss_kib_closed": closed[1]}
        self.row("idle tunnel memory, VmRSS (%d tunnels)" % n, "KiB/tunnel", rss_per, None, 2.0,
                 higher_better=False)
        self.row("idle tunnel memory, Pss (%d tunnels)" % n, "KiB/tunnel", pss_per, None, 2.0,
                 higher_better=False)

    def stop_daemon(self):
        code = self.stop(self.daemon, timeout=30)
        with open(self.daemon_out, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if code != 0 or "assertion failed" in text:
            raise Broken("agentsnetd exited %d after SIGTERM:\n%s" % (code, text[-3000:]))


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "req/s":
        return "%.0f" % v
    if unit == "us":
        return "%d" % v
    return "%.2f" % v


def print_table(rows):
    head = ("measure", "unit", "agentsnetd", "direct", "ratio", "target", "")
    lines = [head]
    for r in rows:
        target = "-"
        if r["target"] is not None:
            target = (">= %.2f" % r["target"]) if r["direct"] else ("<= %.1f" % r["target"])
        verdict = {True: "met", False: "MISSED", None: ""}[r["met"]]
        lines.append((r["name"], r["unit"], fmt(r["agentsnetd"], r["unit"]),
                      fmt(r["direct"], r["unit"]),
                      "-" if r["ratio"] is None else "%.2f" % r["ratio"], target, verdict))
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    for n, line in enumerate(lines):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths))).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def git_rev(root):
    try:
        return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              check=True).stdout.decode().strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def main():
    ap = argparse.ArgumentParser(description="agentsnet load benchmarks")
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--tunnel", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    args = ap.parse_args()
    b = Bench(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    status = 0
    t0 = time.monotonic()
    try:
        b.start_origins()
        b.start_daemon()
        log("bench: agentsnetd on 127.0.0.1:%d (cpu %s), load on cpu %s, http origin: %s"
            % (b.tcp_port, b.proxy_cpu, b.load_cpu, b.http_origin))
        b.bench_idle()
        b.bench_throughput()
        b.bench_forward()
        b.stop_daemon()
    except (Broken, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        log("bench: FAIL: %s" % e)
        status = 1
    finally:
        b.stop_all()
    print_table(b.rows)
    missed = [r["name"] for r in b.rows if r["met"] is False]
    doc = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_rev(os.path.dirname(HERE)),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu_load": b.load_cpu,
        "cpu_proxy": b.proxy_cpu,
        "daemon": args.daemon,
        "seconds": round(time.monotonic() - t0, 1),
        "complete": status == 0,
        "targets_missed": missed,
        "rows": b.rows,
        "raw": b.raw,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    if missed:
        log("bench: targets missed: %s" % ", ".join(missed))
        if os.environ.get("AN_BENCH_STRICT") == "1":
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
