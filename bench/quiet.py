#!/usr/bin/env python3
"""Quiet sandboxes for bench.py's fairness scenario (10): many sandboxes, few requests each.

One keep-alive connection to each of <count> sandboxes' egress sockets
(<sock-dir>/sandboxes/<prefix>NNN/egress.sock); each sends one plain-HTTP
request for http://<host>/ every 1/<rate> s (a random phase each, so the
sandboxes do not fire together), and the time from the request's send to the
last byte of its answer (Content-Length framed) is recorded. A request that is
still unanswered when its next one is due makes that one wait, and its latency
then counts from when it was due, so a stall is never hidden by a skipped
send; otherwise from its send, so this loop's own lateness (epoll's timeout is
in whole milliseconds) is not counted against the daemon. A connection that
ends or fails is counted and opened again.

With --flood-pid, the flood (a wrk process) is let run and stopped in turn
(SIGCONT, SIGSTOP), --phase-seconds each, starting with it running, and each
request counts in the figures of the phase it was sent in ("on" or "off"),
except in the first --settle-seconds of a phase (the flood's requests in
flight when it stopped are still being answered then). So the run measures
the quiet sandboxes with and without the flood side by side, a second apart:
a slow drift of the machine (another job's load) falls on both alike. The
flood is let run again at the end.

Prints one JSON line: requests answered, errors, non-200 answers and the
p50/p99/p99.9/max latency in microseconds, from histograms of 1 us buckets
up to 1 s (one bucket above), allocated before the run (arrays, not lists,
and the cyclic garbage collector off: a collection walking them would pause
the loop for milliseconds); with --flood-pid
also the same figures of each phase under "on" and "off", and each phase's
own p99 in "phase_p99_us" ("on" and "off" lists, in run order) with their
medians in "median_p99_us". A pause of the machine of a few milliseconds
(this host has them with the daemon idle: a VM's) lands in one phase and
moves the pooled p99 of its kind by several times; it moves that phase's p99
alone, and the median of the phases not at all, while a cost of the flood is
in every phase it runs in. Bounded: it runs --seconds and then stops,
whatever the daemon does.
"""

import argparse
import array
import gc
import json
import os
import random
import selectors
import signal
import socket
import sys
import time

HIST_US = 1_000_000


class Quiet:
    def __init__(self, path, host):
        self.path = path
        self.request = b"GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host)
        self.sock = None
        self.buf = b""
        self.due = 0.0  # when the request in flight (or the next one) was due
        self.busy = False
        self.start = 0.0  # what the latency of the request in flight counts from
        self.blocked = False  # the last answer came after the next request was due
        self.phase = None  # the request in flight counts in this phase's figures (None: none)
        self.phase_index = 0  # and in this phase's own list (0: the first, flood running)

    def open(self, sel):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)
        self.sock.setblocking(False)
        self.buf = b""
        self.busy = False
        sel.register(self.sock, selectors.EVENT_READ, self)

    def close(self, sel):
        if self.sock is not None:
            sel.unregister(self.sock)
            self.sock.close()
            self.sock = None

    def answer(self):
        """(status, complete): the answer in buf, once its head and body are in."""
        head, sep, body = self.buf.partition(b"\r\n\r\n")
        if not sep:
            return None, False
        length = 0
        lines = head.split(b"\r\n")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if len(body) < length:
            return None, False
        parts = lines[0].split()
        return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0), True


def percentile(hist, total, pct):
    want = max(1, int(total * pct / 100.0 + 0.999999))
    seen = 0
    for us, n in enumerate(hist):
        seen += n
        if seen >= want:
            return us
    return len(hist) - 1


class Figures:
    """A latency histogram and its summary."""

    def __init__(self):
        self.hist = array.array("L", bytes(8 * (HIST_US + 1)))
        self.count = 0
        self.worst = 0

    def add(self, us):
        self.hist[min(max(us, 0), HIST_US)] += 1
        self.count += 1
        self.worst = max(self.worst, us)

    def summary(self):
        n = self.count
        return {"requests": n,
                "p50_us": percentile(self.hist, n, 50) if n else None,
                "p99_us": percentile(self.hist, n, 99) if n else None,
                "p999_us": percentile(self.hist, n, 99.9) if n else None,
                "max_us": self.worst}


def p99_of(samples):
    """The p99 of a list of latencies, as percentile() reads a histogram."""
    ordered = sorted(samples)
    return ordered[max(1, int(len(ordered) * 0.99 + 0.999999)) - 1]


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sock-dir", required=True)
    ap.add_argument("--prefix", default="q")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--rate", type=float, default=5.0, help="requests/s per sandbox")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--host", default="fake.bench")
    ap.add_argument("--flood-pid", type=int, default=0,
                    help="the flood to let run and stop in turn (SIGCONT, SIGSTOP)")
    ap.add_argument("--phase-seconds", type=float, default=1.0)
    ap.add_argument("--settle-seconds", type=float, default=0.2)
    args = ap.parse_args()
    if args.flood_pid and not 0 <= args.settle_seconds < args.phase_seconds:
        ap.error("--settle-seconds must be shorter than --phase-seconds")

    # No cyclic collection during the run: a full one walks every tracked object, a pause
    # of milliseconds that would land on some requests' latency (it did: p99s of 8 ms
    # with the daemon idle). The loop makes no cycles worth collecting in a bounded run.
    gc.disable()
    sel = selectors.DefaultSelector()
    period = 1.0 / args.rate
    start = time.monotonic()
    quiet = []
    for i in range(args.count):
        q = Quiet(os.path.join(args.sock_dir, "sandboxes", "%s%03d" % (args.prefix, i),
                               "egress.sock"), args.host.encode())
        q.open(sel)
        q.due = start + random.random() * period
        quiet.append(q)
    every = Figures()
    phases = {"on": Figures(), "off": Figures()}
    phase_samples = []  # each phase's latencies, in run order (even: flood running)
    phase_index = 0
    answered = errors = non_200 = 0
    end = start + args.seconds
    flood_on = True
    switch_at = start + args.phase_seconds  # the next phase's start
    settled_at = start + args.settle_seconds
    if args.flood_pid:
        os.kill(args.flood_pid, signal.SIGCONT)
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if args.flood_pid and now >= switch_at:
            flood_on = not flood_on
            os.kill(args.flood_pid, signal.SIGCONT if flood_on else signal.SIGSTOP)
            settled_at = switch_at + args.settle_seconds
            switch_at += args.phase_seconds
            phase_index += 1
        for q in quiet:
            if not q.busy and q.due <= now:
                try:
                    q.sock.sendall(q.request)  # small: the socket buffer takes it whole
                    q.busy = True
                    q.start = q.due if q.blocked else time.monotonic()
                    q.phase_index = phase_index
                    q.phase = ("on" if flood_on else "off") if q.start >= settled_at else None
                except OSError:
                    errors += 1
                    q.close(sel)
                    q.open(sel)
        wait = min([q.due for q in quiet if not q.busy] + [end] +
                   ([switch_at] if args.flood_pid else [])) - time.monotonic()
        for key, _ in sel.select(max(0.0, min(wait, 0.05))):
            q = key.data
            try:
                chunk = q.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                errors += 1
                q.close(sel)
                q.open(sel)
                q.due = time.monotonic()
                continue
            q.buf += chunk
            status, done = q.answer()
            if not done:
                continue
            done_at = time.monotonic()
            us = int((done_at - q.start) * 1e6)
            every.add(us)
            if args.flood_pid and q.phase is not None:
                phases[q.phase].add(us)
                while len(phase_samples) <= q.phase_index:
                    phase_samples.append([])
                phase_samples[q.phase_index].append(us)
            answered += 1
            non_200 += status != 200
            q.buf = b""
            q.busy = False
            q.due += period
            q.blocked = done_at > q.due
    if args.flood_pid:
        os.kill(args.flood_pid, signal.SIGCONT)
    for q in quiet:
        q.close(sel)
    doc = {"errors": errors, "non_200": non_200, "seconds": round(time.monotonic() - start, 3)}
    doc.update(every.summary())
    if args.flood_pid:
        doc.update({name: f.summary() for name, f in phases.items()})
        per = {"on": [p99_of(v) for v in phase_samples[0::2] if v],
               "off": [p99_of(v) for v in phase_samples[1::2] if v]}
        doc["phase_p99_us"] = per
        doc["median_p99_us"] = {k: median(v) if v else None for k, v in per.items()}
    print(json.dumps(doc))
    return 0 if answered else 1


if __name__ == "__main__":
    sys.exit(main())
