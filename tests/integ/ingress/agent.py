"""The agent's server in the ingress pass: runs inside an `agentsnet run`
sandbox on 127.0.0.1:$AGENT_INGRESS_PORT (or --port), Python stdlib only.

Every request it gets is appended to --log as one JSON line before it is
answered (method, path, headers in order with duplicates, body length and
SHA-256), so the host can tell exactly what reached the sandbox, and nothing
else did. Answers:

    GET /ws with Upgrade: websocket   RFC 6455 handshake, then every data message
                                      echoed with its opcode (fragments joined),
                                      ping answered by pong, close by close; a
                                      client frame without a mask fails the
                                      connection (close 1002), as 5.1 requires
    GET /sse?mode=chunked|close       text/event-stream: 3 events 300 ms apart,
                                      chunked, or close-delimited (no length)
    GET /answer?h=<Name: value>&...   200 with exactly those fields (in order,
                                      percent-decoded) and a small HTML body: the
                                      answers the gateway isolates; h= on /ws adds
                                      fields to the 101 too
    GET /hold?go=<name>               held open: answered (as anything else, with
                                      "released": true) once the file <name> exists
                                      beside --log, or after HOLD_MAX_S ("released":
                                      false); the request is logged as it arrives
    anything else                     200, JSON: what the request looked like

    agent.py --log FILE [--port N] [--once N]

--once N: serve N requests (each connection closed after its answer), then
exit 0. Prints {"public_url", "ingress_port"} as seen inside, then
"listening" once the socket is bound.
"""

import argparse
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws  # noqa: E402

SSE_EVENTS = 3
SSE_GAP_S = 0.3
HOLD_MAX_S = 60  # a held request is answered by then, released or not
LOG_LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ingress-agent/1"
    log_path = None
    once = False

    def log_message(self, *_args):
        pass

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def record(self, body):
        rec = {"t": time.time(), "method": self.command, "path": self.path,
               "version": self.request_version,
               "headers": [[k, v] for k, v in self.headers.items()],
               "body_len": len(body), "body_sha256": hashlib.sha256(body).hexdigest()}
        line = json.dumps(rec) + "\n"
        with LOG_LOCK, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
        return rec

    def handle_any(self):
        body = self.read_body()
        rec = self.record(body)
        if self.once:
            self.close_connection = True
        path = self.path.split("?", 1)[0]
        if path == "/ws" and "websocket" in self.headers.get("Upgrade", "").lower():
            return self.websocket()
        if path == "/sse":
            return self.sse("mode=close" in self.path)
        if path == "/answer":
            return self.answer()
        if path == "/hold":
            return self.echo(dict(rec, released=self.hold()))
        return self.echo(rec)

    def echo(self, rec):
        """200, JSON: <rec>."""
        out = json.dumps(rec).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    def __getattr__(self, name):
        if name.startswith("do_"):
            return self.handle_any
        raise AttributeError(name)

    def hold(self):
        """Waits for the file the query's go=<name> (letters, digits, - and _) names beside
        --log; True once it exists, False after HOLD_MAX_S or for no such name."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        name = (query.get("go") or [""])[0]
        if not name.isascii() or not name.replace("-", "").replace("_", "").isalnum():
            return False
        go = os.path.join(os.path.dirname(self.log_path), name)
        deadline = time.monotonic() + HOLD_MAX_S
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def asked_fields(self):
        """The (name, value) pairs of the query's h=<Name: value> parameters, in order."""
        query = urllib.parse.urlsplit(self.path).query
        return [tuple(x.strip() for x in v.split(":", 1))
                for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
                if k == "h" and ":" in v]

    def answer(self):
        body = b"<!doctype html><title>agent</title><p>the agent's page</p>"
        self.send_response(200)
        for name, value in self.asked_fields():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def sse(self, close_delimited):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if close_delimited:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for i in range(SSE_EVENTS):
            if i:
                time.sleep(SSE_GAP_S)
            event = ("id: %d\nevent: tick\ndata: event-%d\n\n" % (i, i)).encode()
            if close_delimited:
                self.wfile.write(event)
            else:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        if not close_delimited:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        if self.headers.get("Sec-WebSocket-Version") != "13" or not key:
            self.send_error(400, "want Sec-WebSocket-Version 13 and a key")
            return
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", ws.accept_key(key))
        for name, value in self.asked_fields():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        sock = self.connection
        reader = ws.Reader(self.rfile.read1)
        send = self.wfile.write

        def control(opcode, payload, masked):
            if not masked:
                raise ws.ProtocolError("an unmasked client frame")
            if opcode == ws.OP_PING:
                send(ws.encode(ws.OP_PONG, payload))
                self.wfile.flush()
            elif opcode == ws.OP_CLOSE:
                send(ws.encode(ws.OP_CLOSE, payload[:2]))
                self.wfile.flush()
                raise EOFError("closed by the client")

        try:
            while True:
                opcode, payload, masked = reader.message(control)
                if not masked:
                    raise ws.ProtocolError("an unmasked client frame")
                send(ws.encode(opcode, payload))
                self.wfile.flush()
        except ws.ProtocolError as e:
            try:
                send(ws.encode(ws.OP_CLOSE, b"\x03\xea" + str(e).encode()[:100]))
                self.wfile.flush()
            except OSError:
                pass
        except (EOFError, OSError):
            pass
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, default=int(os.environ.get("AGENT_INGRESS_PORT", "8081")))
    ap.add_argument("--once", type=int, default=0)
    args = ap.parse_args()
    Handler.log_path = args.log
    Handler.once = args.once > 0
    print(json.dumps({"public_url": os.environ.get("AGENT_PUBLIC_URL"),
                      "ingress_port": os.environ.get("AGENT_INGRESS_PORT")}), flush=True)
    if args.once:
        srv = http.server.HTTPServer(("127.0.0.1", args.port), Handler)
        print("listening", flush=True)
        for _ in range(args.once):
            srv.handle_request()
        srv.server_close()
        return 0
    srv = Server(("127.0.0.1", args.port), Handler)
    print("listening", flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
