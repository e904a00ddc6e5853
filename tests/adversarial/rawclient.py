"""The raw client of the adversarial suite: writes exact bytes, never normalises, and reads
HTTP/1.1 responses back as they come.

A connection goes to a sandbox's egress Unix socket or to the ingress gateway's TCP
listener (TCP_NODELAY). It can first open a tunnel (a CONNECT whose 200 it requires) and
speak TLS inside it, trusting the test CA, as an agent does on a terminated tier. Then the
case's bytes go out whole (one send per segment) or split (one send per byte: on TCP one
segment each, inside TLS one record each), so that a parser which only works when a field
arrives in one read is caught. A send the daemon refuses once it closed is not an error:
what the case got back is judged, not how far the bytes got.
"""

import socket
import ssl
import time

RECV_BYTES = 65536


class Closed(Exception):
    """The peer closed (or reset) the connection before what was being read was whole."""


class Silent(Closed):
    """Nothing more came before the deadline: the connection is still open."""


class Response:
    """One response: its status, its header fields in order, its body, its raw bytes."""

    def __init__(self, status, fields, body, raw):
        self.status, self.fields, self.body, self.raw = status, fields, body, raw

    def header(self, name):
        values = [v for k, v in self.fields if k.lower() == name.lower()]
        return ", ".join(values) if values else None

    def headers(self):
        """{lower-case name: value}, repeated fields joined with ", " (integ.check_refusal's
        form)."""
        return {k.lower(): self.header(k) for k, _ in self.fields}

    def __repr__(self):
        return "<%d %r>" % (self.status, self.raw[:300])


class Conn:
    """One client connection; <deadline> (time.monotonic()) bounds every read."""

    def __init__(self, sock, deadline):
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.received = bytearray()  # every byte read, for the cases' never-in-a-response checks
        self.send_error = None
        self.client = None  # TCP: "ip:port" of this end, as the gateway's audit names it
        self.end = None  # how it closed: "clean" (EOF, TLS after close_notify) or "aborted"

    @classmethod
    def unix(cls, path, deadline):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(max(0.1, deadline - time.monotonic()))
        s.connect(path)
        return cls(s, deadline)

    @classmethod
    def tcp(cls, port, deadline):
        s = socket.create_connection(("127.0.0.1", port), timeout=deadline - time.monotonic())
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = cls(s, deadline)
        conn.client = "%s:%d" % s.getsockname()[:2]
        return conn

    def start_tls(self, context, server_name):
        """TLS inside the tunnel just opened; bytes already read past the tunnel's 200
        would belong to no one, so there must be none."""
        if self.buf:
            raise Closed("bytes after the tunnel's 200: %r" % bytes(self.buf[:200]))
        self.sock.settimeout(max(0.1, self.deadline - time.monotonic()))
        # A ragged EOF raises (SSLEOFError): a stream cut without close_notify is told
        # from one that ended.
        self.sock = context.wrap_socket(self.sock, server_hostname=server_name,
                                        suppress_ragged_eofs=False)

    def send(self, data, split):
        """Sends <data> whole or a byte at a time; stops quietly at the first refused send
        (the reason kept in send_error)."""
        if self.send_error is not None:
            return
        pieces = [data[i:i + 1] for i in range(len(data))] if split else [data]
        try:
            for piece in pieces:
                self.sock.sendall(piece)
        except (OSError, ssl.SSLError) as e:
            self.send_error = "%s: %s" % (type(e).__name__, e)

    def fill(self):
        """Reads more; raises Closed at EOF, a reset or the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Silent("no more bytes before the deadline")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(RECV_BYTES)
        except (socket.timeout, TimeoutError):
            raise Silent("no more bytes before the deadline") from None
        except (OSError, ssl.SSLError) as e:
            if self.end is None and isinstance(e, (ConnectionResetError, ssl.SSLEOFError)):
                self.end = "aborted"  # the first end read is the one (a read after it: EOF)
            raise Closed("%s: %s" % (type(e).__name__, e)) from None
        if not data:
            self.end = self.end or "clean"
            raise Closed("EOF")
        self.buf += data
        self.received += data

    def take(self, n):
        while len(self.buf) < n:
            self.fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        return self.take(self.buf.index(b"\r\n") + 2)

    def response(self, bodiless=False):
        """The next response; <bodiless> for a CONNECT's 2xx or a HEAD's answer."""
        raw = bytearray(self.line())
        parts = raw[:-2].decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise Closed("not a status line: %r" % bytes(raw))
        status, fields = int(parts[1]), []
        while True:
            line = self.line()
            raw += line
            if line == b"\r\n":
                break
            name, _, value = line.decode("latin-1").partition(":")
            fields.append((name, value.strip()))
        resp = Response(status, fields, b"", b"")
        if bodiless or status < 200 or status in (204, 304):
            pass
        elif resp.header("Transfer-Encoding") is not None:
            resp.body = self.chunked_body(raw)
        elif resp.header("Content-Length") is not None:
            length = resp.header("Content-Length")
            if not length.isdigit():
                raise Closed("a response no client can frame: Content-Length %r" % length)
            resp.body = self.take(int(length))
            raw += resp.body
        else:
            resp.body = self.until_close()
            raw += resp.body
        resp.raw = bytes(raw)
        return resp

    def chunked_body(self, raw):
        body = bytearray()
        while True:
            size_line = self.line()
            raw += size_line
            size_text = size_line.split(b";")[0].strip()
            if not size_text or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
                raise Closed("a response no client can frame: chunk size line %r" % size_line)
            size = int(size_text, 16)
            if size == 0:
                break
            chunk = self.take(size + 2)
            raw += chunk
            body += chunk[:-2]
        while True:
            line = self.line()
            raw += line
            if line == b"\r\n":
                return bytes(body)

    def until_close(self):
        while True:
            try:
                self.fill()
            except Closed:
                out = bytes(self.buf)
                self.buf.clear()
                return out

    def after(self, within_s):
        """What follows the last response within <within_s>: ("closed", extra bytes) when
        the peer closed or reset the connection, ("open", extra bytes) when it did not."""
        self.deadline = min(self.deadline, time.monotonic() + within_s)
        try:
            while True:
                self.fill()
        except Silent:
            state = "open"
        except Closed:
            state = "closed"
        extra = bytes(self.buf)
        self.buf.clear()
        return state, extra

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
