"""Capture upstreams of the adversarial suite: servers that record, per connection, the
exact bytes they receive, so that a case can say what must never reach an upstream.

A capture is one listening socket: TCP on [::]:<port>, dual-stack, so that it sees a
connection to that port at any loopback address (127.0.0.1, 127.0.0.2, ::1, mapped) of the
namespace, in plain or TLS form; or a Unix socket (a sandbox's ingress socket, which the
gateway connects). Captures are leased: one case run holds one capture of each kind at a
time, alone, and reads what it received during its lease. A byte that arrives while no run
holds the capture is stray traffic, which fails the whole pass (it came from a run that
already ended, or went where no case sent it).

While leased a capture answers like a small HTTP/1.1 origin: every complete request (its
head, then a Content-Length or chunked body) gets CANNED_REPLY, or the first gets the case's
own bytes (`upstream_reply`), and the connection ends after a request or a reply that asks
for it (Connection: close). Bytes it
cannot read as HTTP (TLS inside a passthrough tunnel, garbage) are recorded, never answered.
At release every connection still open is closed, so that no upstream connection a daemon
keeps for reuse carries one run's bytes into the next one's lease.
"""

import collections
import fcntl
import os
import re
import socket
import ssl
import struct
import termios
import threading
import time

from catalogue import RESET

CANNED_BODY = b"captured\n"
CANNED_REPLY = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                % len(CANNED_BODY)) + CANNED_BODY
RECV_BYTES = 65536
HANDSHAKE_TIMEOUT_S = 10
HEAD_END = b"\r\n\r\n"


class NotHttp(Exception):
    """The bytes are not an HTTP/1.1 request this capture can frame."""


def request_end(buf):
    """Where the first complete request in <buf> ends, and whether it is HEAD and asks to
    close: (end, is_head, close), or None while it is incomplete. Raises NotHttp."""
    head_len = buf.find(HEAD_END)
    if head_len < 0:
        if len(buf) > 65536 or (buf and not buf[:1].isalpha()):
            raise NotHttp()
        return None
    lines = bytes(buf[:head_len]).split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise NotHttp()
    fields = collections.defaultdict(list)
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise NotHttp()
        fields[name.strip().lower()].append(value.strip().lower())
    close = b"close" in b",".join(fields[b"connection"]) or parts[2] == b"HTTP/1.0"
    body_at = head_len + len(HEAD_END)
    if fields[b"transfer-encoding"]:
        end = chunked_end(buf, body_at)
    else:
        lengths = fields[b"content-length"]
        if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
            raise NotHttp()
        end = body_at + (int(lengths[0]) if lengths else 0)
        end = end if len(buf) >= end else None
    return None if end is None else (end, parts[0] == b"HEAD", close)


def chunked_end(buf, at):
    """The end of the chunked body starting at <at> of <buf>, or None while incomplete."""
    while True:
        eol = buf.find(b"\r\n", at)
        if eol < 0:
            return None
        size_text = bytes(buf[at:eol]).split(b";", 1)[0].strip()
        if not re.fullmatch(rb"[0-9a-fA-F]{1,15}", size_text):
            raise NotHttp()
        size = int(size_text, 16)
        if size == 0:
            trailers_end = buf.find(HEAD_END, eol)
            if buf[eol:eol + 4] == HEAD_END:
                return eol + 4
            return None if trailers_end < 0 else trailers_end + 4
        at = eol + 2 + size + 2
        if len(buf) < at:
            return None


def reset(conn):
    """Ends <conn> in a TCP reset (SO_LINGER 0; the caller closes it), once its peer has
    acknowledged what was sent (SIOCOUTQ 0, 2 s at most): the bytes before the reset are
    all in the daemon's kernel, so what it does with them is its own doing."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        left = struct.unpack("i", fcntl.ioctl(conn.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        if left == 0:
            break
        time.sleep(0.001)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Lease:
    """What one capture received during one run's hold of it."""

    def __init__(self, reply):
        # For the first request: byte strings sent in order, with pauses (float seconds)
        # between them; None: CANNED_REPLY for each.
        self.reply = reply
        # A reply whose head says Connection: close ends the connection once sent (its body
        # may be delimited by that close).
        text = b"".join(p for p in reply or [] if isinstance(p, bytes))
        fields = text.split(HEAD_END, 1)[0].lower().split(b"\r\n")[1:]
        self.reply_closes = b"connection: close" in fields
        # Connection number -> what it sent during the lease; a connection accepted during
        # the lease is here from its accept on, so one that sent nothing counts too.
        self.received = collections.OrderedDict()
        self.requests = 0  # complete HTTP requests received (the smuggling oracle)
        self.events = []  # handshake failures and the like, as text

    def connections(self):
        """The bytes each connection sent during the lease, in the order they came."""
        return [bytes(data) for data in self.received.values()]


class Capture:
    """One recording listener (see the module comment): <label> names it in messages, <key>
    is what a case's template calls it (a port, a sandbox id), <tls> a server context."""

    def __init__(self, listener, label, key, tls=None):
        self.listener, self.label, self.key, self.tls = listener, label, key, tls
        self.lock = threading.Lock()
        self.lease = None
        self.stray = []  # what arrived with no lease held, as text
        self.open = {}  # connection number -> socket
        self.numbers = iter(range(1, 1 << 62))
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def begin_lease(self, reply):
        """Starts a run's lease; <reply> as Lease takes it. Returns the Lease, which keeps
        what arrives until end_lease."""
        with self.lock:
            self.lease = Lease(reply)
            return self.lease

    def end_lease(self):
        """Ends the lease (if one is held): every connection still open is closed."""
        with self.lock:
            lease, self.lease = self.lease, None
            conns, self.open = list(self.open.values()), {}
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return lease

    def accept_loop(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                number = next(self.numbers)
                if self.lease is None:
                    self.stray.append("%s: a connection with no case running" % self.label)
                else:
                    self.lease.received[number] = bytearray()
                self.open[number] = conn
            threading.Thread(target=self.serve, args=(conn, number), daemon=True).start()

    def record(self, number, data):
        """Files <data> under the lease held now; returns that lease (None: stray)."""
        with self.lock:
            if self.lease is None:
                self.stray.append("%s: %d stray bytes %r" % (self.label, len(data), data[:80]))
                return None
            self.lease.received.setdefault(number, bytearray()).extend(data)
            return self.lease

    def serve(self, conn, number):
        try:
            if self.tls is not None:
                conn.settimeout(HANDSHAKE_TIMEOUT_S)
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError) as e:
                    with self.lock:
                        if self.lease is not None:
                            self.lease.events.append("TLS handshake failed: %s" % e)
                    return
                conn.settimeout(None)
                with self.lock:
                    self.open[number] = conn
            self.converse(conn, number)
        finally:
            with self.lock:
                self.open.pop(number, None)
            conn.close()

    def converse(self, conn, number):
        """Records every byte; answers each complete request while they read as HTTP."""
        pending, answering, replied = bytearray(), True, False
        while True:
            try:
                data = conn.recv(RECV_BYTES)
            except (OSError, ssl.SSLError):
                return
            if not data:
                return
            lease = self.record(number, data)
            if lease is None or not answering:
                continue
            pending += data
            while True:
                try:
                    done = request_end(pending)
                except NotHttp:
                    answering = False
                    break
                if done is None:
                    break
                end, is_head, close = done
                del pending[:end]
                with self.lock:
                    lease.requests += 1
                if lease.reply is not None:
                    answer, replied = ([] if replied else lease.reply), True
                    close = close or lease.reply_closes
                else:
                    answer = [CANNED_REPLY[:-len(CANNED_BODY)] if is_head else CANNED_REPLY]
                try:
                    for piece in answer:
                        if isinstance(piece, float):
                            time.sleep(piece)
                        elif piece == RESET:
                            reset(conn)
                            return
                        else:
                            conn.sendall(piece)
                    if close:
                        conn.shutdown(socket.SHUT_WR)
                except (OSError, ssl.SSLError):
                    return
                if close:
                    answering = False
                    break


class Pool:
    """Captures of one kind, lent one per run, least recently used first."""

    def __init__(self, captures):
        self.captures = collections.deque(captures)
        self.cond = threading.Condition()

    def take(self):
        with self.cond:
            self.cond.wait_for(lambda: self.captures)
            return self.captures.popleft()

    def give_back(self, capture):
        with self.cond:
            self.captures.append(capture)
            self.cond.notify()


def tcp_listener():
    """A dual-stack listener on [::]:<any free port>; returns (socket, port)."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 0))
    s.listen(128)
    return s, s.getsockname()[1]


def unix_listener(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    s.bind(path)
    s.listen(128)
    return s
