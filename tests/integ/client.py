#!/usr/bin/env python3
"""Python clients of the integration suite, run inside the sandbox namespace.

Reads one JSON spec from stdin, does what its "mode" says, and prints one JSON
result on stdout (exit 0 even when the request was refused: judging is the
suite's job). A response is reported as
    {"status", "reason", "headers": {lower-case name: value}, "body_len",
     "body_sha256", "body" (text when short and UTF-8, else null)}.

Modes:
    urllib      urllib.request through ProxyHandler (CONNECT for https://,
                absolute form for http://); {"url", "proxy", "cafile",
                "method", "headers", "body"} -> a response, or {"error"}.
    httpclient  several requests on ONE http.client connection to the proxy,
                absolute-form targets: {"proxy_addr", "requests": [{"method",
                "target", "headers", "body"}]} -> {"responses": [...]}, each
                with the client's local port, to prove keep-alive reuse.
    raw         bytes as given: {"proxy_addr" | "unix", "send_b64",
                "responses": N, "connect": the first answer is to a CONNECT}
                -> {"responses": [...], "eof", "error"}; a chunked response
                read raw has "trailer" too, its trailer section as sent.
    direct      plain TCP connects that must fail: {"targets": [{"host",
                "port"}]} -> {"results": ["refused" | "unreachable" | ...]}.
"""

import base64
import errno
import hashlib
import http.client
import json
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request

TEXT_BYTES_MAX = 65536
READ_BYTES = 65536


def describe(status, reason, headers, body):
    text = None
    if len(body) <= TEXT_BYTES_MAX:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    merged = {}
    for name, value in headers:
        key = name.lower()
        merged[key] = value if key not in merged else merged[key] + ", " + value
    return {
        "status": status,
        "reason": reason,
        "headers": merged,
        "body_len": len(body),
        "body_sha256": hashlib.sha256(body).hexdigest(),
        "body": text,
    }


def body_bytes(spec):
    body = spec.get("body")
    return body.encode("utf-8") if body is not None else None


def run_urllib(spec):
    ctx = ssl.create_default_context(cafile=spec.get("cafile"))
    proxy = spec["proxy"]
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
        urllib.request.HTTPSHandler(context=ctx),
    )
    req = urllib.request.Request(
        spec["url"],
        data=body_bytes(spec),
        headers=spec.get("headers", {}),
        method=spec.get("method", "GET"),
    )
    try:
        with opener.open(req, timeout=spec.get("timeout_s", 30)) as resp:
            return describe(resp.status, resp.reason, resp.getheaders(), resp.read())
    except urllib.error.HTTPError as e:
        return describe(e.code, e.reason, e.headers.items(), e.read())
    except (urllib.error.URLError, OSError) as e:
        return {"error": str(e)}


def run_httpclient(spec):
    host, port = spec["proxy_addr"].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=spec.get("timeout_s", 30))
    out = []
    try:
        for r in spec["requests"]:
            conn.request(r.get("method", "GET"), r["target"], body=body_bytes(r),
                         headers=r.get("headers", {}))
            local_port = conn.sock.getsockname()[1]
            resp = conn.getresponse()
            d = describe(resp.status, resp.reason, resp.getheaders(), resp.read())
            d["local_port"] = local_port
            out.append(d)
    except (OSError, http.client.HTTPException) as e:
        return {"responses": out, "error": "%s: %s" % (type(e).__name__, e)}
    finally:
        conn.close()
    return {"responses": out}


def parse_chunked(buf):
    """Returns (body, bytes consumed, trailer section) of a complete chunked body, or None."""
    body = []
    off = 0
    while True:
        eol = buf.find(b"\r\n", off)
        if eol < 0:
            return None
        size = int(buf[off:eol].split(b";")[0], 16)
        off = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", off - 2)
            return (b"".join(body), end + 4, buf[off : end + 2]) if end >= 0 else None
        if len(buf) < off + size + 2:
            return None
        body.append(buf[off : off + size])
        off += size + 2


def parse_response(buf, closed, to_connect=False):
    """Returns (response, bytes consumed) when buf starts with a whole response.
    A 2xx answer to CONNECT has no body: the tunnel starts after its head."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    _version, status, *reason = lines[0].split(" ", 2)
    headers = [tuple(x.strip() for x in h.split(":", 1)) for h in lines[1:] if ":" in h]
    lower = {k.lower(): v for k, v in headers}
    body_at = end + 4
    code = int(status)
    if code in (204, 304) or 100 <= code < 200 or (to_connect and 200 <= code < 300):
        return describe(int(status), " ".join(reason), headers, b""), body_at
    if "content-length" in lower:
        total = body_at + int(lower["content-length"])
        if len(buf) < total:
            return None
        return describe(int(status), " ".join(reason), headers, buf[body_at:total]), total
    if lower.get("transfer-encoding", "").lower() == "chunked":
        got = parse_chunked(buf[body_at:])
        if got is None:
            return None
        d = describe(int(status), " ".join(reason), headers, got[0])
        d["trailer"] = got[2].decode("latin-1")
        return d, body_at + got[1]
    if not closed:
        return None  # delimited by the end of the connection (RFC 9112 section 6.3)
    return describe(int(status), " ".join(reason), headers, buf[body_at:]), len(buf)


def run_raw(spec):
    if "unix" in spec:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr = spec["unix"]
    else:
        host, port = spec["proxy_addr"].rsplit(":", 1)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        addr = (host, int(port))
    sock.settimeout(spec.get("timeout_s", 20))
    want = spec.get("responses", 1)
    result = {"responses": [], "eof": False, "error": None}
    buf = b""
    try:
        sock.connect(addr)
        sock.sendall(base64.b64decode(spec["send_b64"]))
        later = list(spec.get("later", []))  # bytes sent once so many responses came
        if spec.get("shut_wr"):
            sock.shutdown(socket.SHUT_WR)
        while len(result["responses"]) < want:
            while later and len(result["responses"]) >= later[0]["after_responses"]:
                stage = later.pop(0)
                time.sleep(stage.get("sleep_s", 0))
                sock.sendall(base64.b64decode(stage["send_b64"]))
            first = not result["responses"]
            got = parse_response(buf, result["eof"], to_connect=first and spec.get("connect"))
            if got is not None:
                result["responses"].append(got[0])
                buf = buf[got[1] :]
                continue
            if result["eof"]:
                break
            data = sock.recv(READ_BYTES)
            if not data:
                result["eof"] = True
            buf += data
        while later and len(result["responses"]) >= later[0]["after_responses"]:
            stage = later.pop(0)
            time.sleep(stage.get("sleep_s", 0))
            sock.sendall(base64.b64decode(stage["send_b64"]))
        while len(buf) < spec.get("read_bytes", 0) and not result["eof"]:
            data = sock.recv(READ_BYTES)  # what follows the responses
            result["eof"] = not data
            buf += data
        if spec.get("wait_close_s") and not result["eof"]:
            result["closed_after_s"] = wait_close(sock, spec["wait_close_s"])
    except OSError as e:
        result["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        sock.close()
    result["leftover_len"] = len(buf)
    result["leftover_hex"] = buf[:64].hex()
    return result


def wait_close(sock, limit_s):
    """Seconds until the peer closes an idle connection, None if it does not
    within limit_s (bytes arriving meanwhile are an error: it was not idle)."""
    t0 = time.monotonic()
    sock.settimeout(limit_s)
    try:
        data = sock.recv(READ_BYTES)
    except socket.timeout:
        return None
    except ConnectionResetError:
        data = b""
    if data:
        raise OSError("%d unexpected bytes on an idle connection" % len(data))
    return round(time.monotonic() - t0, 2)


def run_direct(spec):
    results = []
    for t in spec["targets"]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect((t["host"], t["port"]))
            results.append("connected")
        except ConnectionRefusedError:
            results.append("refused")
        except socket.timeout:
            results.append("timeout")
        except OSError as e:
            if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                results.append("unreachable")
            else:
                results.append(errno.errorcode.get(e.errno, str(e)))
        finally:
            sock.close()
    return {"results": results}


def main():
    spec = json.load(sys.stdin)
    modes = {"urllib": run_urllib, "httpclient": run_httpclient, "raw": run_raw,
             "direct": run_direct}
    json.dump(modes[spec["mode"]](spec), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
