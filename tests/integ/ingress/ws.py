"""WebSocket framing (RFC 6455) for the ingress pass: the opening handshake's
accept key, frames built and read, payloads masked. Python stdlib only; the
agent fixture (agent.py, inside a sandbox) and the client in ingress.py (on
the host) both use it, and `python3 ws.py` checks it against the RFC's own
examples (sections 1.3 and 5.7), so neither side can agree with the other on
a mistake the RFC would not.
"""

import base64
import hashlib
import struct
import sys

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CONTROL_MAX = 125  # control frames carry at most this many payload bytes (5.5)


class ProtocolError(Exception):
    pass


def accept_key(key):
    """Sec-WebSocket-Accept for the client's Sec-WebSocket-Key <key> (str or bytes)."""
    if isinstance(key, str):
        key = key.encode("ascii")
    return base64.b64encode(hashlib.sha1(key.strip() + GUID).digest()).decode("ascii")


def mask(payload, key):
    """<payload> XOR the 4-byte <key> repeated (masking and unmasking are the same)."""
    n = len(payload)
    if n == 0:
        return b""
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def encode(opcode, payload, key=None, fin=True):
    """One frame: FIN (unless <fin> is false), <opcode>, the shortest length
    form, and the payload masked with <key> (4 bytes) when given (client
    frames must be, server frames must not be)."""
    n = len(payload)
    head = bytearray([(0x80 if fin else 0) | opcode])
    bit = 0x80 if key is not None else 0
    if n < 126:
        head.append(bit | n)
    elif n < 65536:
        head.append(bit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(bit | 127)
        head += struct.pack("!Q", n)
    if key is None:
        return bytes(head) + bytes(payload)
    return bytes(head) + key + mask(payload, key)


class Reader:
    """Frames from a byte source: <recv>(n) returns up to n bytes, b"" at the end."""

    def __init__(self, recv, initial=b""):
        self.recv = recv
        self.buf = bytearray(initial)

    def exact(self, n):
        while len(self.buf) < n:
            data = self.recv(max(65536, n - len(self.buf)))
            if not data:
                raise EOFError("the stream ended %d bytes into a %d-byte read"
                               % (len(self.buf), n))
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def frame(self):
        """(fin, opcode, masked, payload unmasked) of the next frame."""
        b0, b1 = self.exact(2)
        if b0 & 0x70:
            raise ProtocolError("reserved bits set: %#x" % b0)
        fin, opcode, masked, n = bool(b0 & 0x80), b0 & 0x0F, bool(b1 & 0x80), b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.exact(2))[0]
            if n < 126:
                raise ProtocolError("16-bit length %d, not the shortest form" % n)
        elif n == 127:
            n = struct.unpack("!Q", self.exact(8))[0]
            if n < 65536 or n >> 63:
                raise ProtocolError("64-bit length %d, not the shortest form" % n)
        if opcode >= 0x8 and (n > CONTROL_MAX or not fin):
            raise ProtocolError("control frame %#x: %d bytes, fin %s" % (opcode, n, fin))
        if opcode not in (OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG):
            raise ProtocolError("unknown opcode %#x" % opcode)
        key = self.exact(4) if masked else None
        payload = self.exact(n)
        return fin, opcode, masked, mask(payload, key) if masked else payload

    def message(self, on_control=None):
        """(opcode, payload, masked) of the next data message, fragments joined;
        control frames in between go to <on_control>(opcode, payload, masked),
        or come back as their own "message" without it."""
        first, parts, masked_all = None, [], True
        while True:
            fin, opcode, masked, payload = self.frame()
            if opcode >= 0x8:
                if on_control is None:
                    return opcode, payload, masked
                on_control(opcode, payload, masked)
                continue
            if first is None:
                if opcode == OP_CONT:
                    raise ProtocolError("a continuation frame with no message begun")
                first = opcode
            elif opcode != OP_CONT:
                raise ProtocolError("a new message (%#x) inside a fragmented one" % opcode)
            parts.append(payload)
            masked_all = masked_all and masked
            if fin:
                return first, b"".join(parts), masked_all


def self_test():
    """The RFC's examples, byte for byte; returns the failures."""
    errs = []

    def want(label, got, expect):
        if got != expect:
            errs.append("%s: %r, want %r" % (label, got, expect))

    want("accept key (1.3)", accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    key = bytes([0x37, 0xFA, 0x21, 0x3D])
    want("unmasked Hello", encode(OP_TEXT, b"Hello"), bytes.fromhex("810548656c6c6f"))
    want("masked Hello", encode(OP_TEXT, b"Hello", key), bytes.fromhex("818537fa213d7f9f4d5158"))
    want("first fragment", encode(OP_TEXT, b"Hel", fin=False), bytes.fromhex("010348656c"))
    want("last fragment", encode(OP_CONT, b"lo"), bytes.fromhex("80026c6f"))
    want("ping", encode(OP_PING, b"Hello"), bytes.fromhex("890548656c6c6f"))
    want("masked pong", encode(OP_PONG, b"Hello", key), bytes.fromhex("8a8537fa213d7f9f4d5158"))
    want("256 bytes head", encode(OP_BINARY, bytes(256))[:4], bytes.fromhex("827e0100"))
    want("64 KiB head", encode(OP_BINARY, bytes(65536))[:10], bytes.fromhex("827f0000000000010000"))
    want("65535 bytes head", encode(OP_BINARY, bytes(65535))[:4], bytes.fromhex("827effff"))
    want("125 bytes head", encode(OP_BINARY, bytes(125))[:2], bytes.fromhex("827d"))
    stream = (bytes.fromhex("010348656c") + bytes.fromhex("890548656c6c6f") +
              bytes.fromhex("80026c6f") + bytes.fromhex("818537fa213d7f9f4d5158") +
              encode(OP_BINARY, bytes(range(256)) * 300, b"\x01\x02\x03\x04"))
    chunks = [stream[i:i + 7] for i in range(0, len(stream), 7)]
    r = Reader(lambda n: chunks.pop(0) if chunks else b"")
    seen = []
    want("fragmented message", r.message(lambda *c: seen.append(c)), (OP_TEXT, b"Hello", False))
    want("ping between fragments", seen, [(OP_PING, b"Hello", False)])
    want("masked message", r.message(), (OP_TEXT, b"Hello", True))
    want("76800-byte message", r.message(), (OP_BINARY, bytes(range(256)) * 300, True))
    try:
        r.frame()
        errs.append("a read past the end did not raise EOFError")
    except EOFError:
        pass
    for label, raw in (("16-bit length below 126", bytes.fromhex("827e0005") + bytes(5)),
                       ("long ping", bytes.fromhex("897e0080") + bytes(128)),
                       ("reserved bit", bytes.fromhex("c100"))):
        try:
            Reader(lambda n, b=[raw]: b.pop() if b else b"").frame()
            errs.append("%s: accepted" % label)
        except ProtocolError:
            pass
    return errs


if __name__ == "__main__":
    failures = self_test()
    for f in failures:
        print("ws: FAIL: %s" % f)
    print("ws: %s" % ("ok" if not failures else "%d failures" % len(failures)))
    sys.exit(1 if failures else 0)
