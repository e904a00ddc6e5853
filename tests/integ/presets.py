"""The preset pass: each preset's real client through the daemon, against loopback
stand-ins named as the real hosts.

The pass runs in a network namespace of its own (it execs itself under `unshare --net`,
with only `lo`, brought up), so that one HTTPS stand-in can listen on 127.0.0.1:443, the
port the presets name. It shows a leaf of the pass's origin CA for every name used and
answers by the Host header. The policy's one profile names the presets alone (no
`rules`): npm@1, pypi@1, github@1 and {name: anthropic@1, secret_file: ...}; its resolver
maps each name to 127.0.0.1. The clients use the daemon's TCP listener as their proxy.

  - npm: `npm install` (the system's npm) of a one-file package from a stand-in
    registry.npmjs.org (the packument, its dist.tarball on the same host with its
    sha512 integrity and sha1 shasum, the tarball): the package lands in node_modules,
    its file intact; the audit log has the allowed CONNECT by rule npm.registry.
  - pip: `python3 -m pip download --no-deps` of a wheel listed by a stand-in pypi.org
    simple index and served by a stand-in files.pythonhosted.org, its sha256 in the link:
    the wheel arrives with that hash; rules pypi.index and pypi.files allowed them.
  - git: `git clone https://github.com/agentsnet/demo.git` from a stand-in github.com
    (git's dumb HTTP protocol: a bare repository's files after `git update-server-info`):
    the clone has the committed file; rule github.web allowed it.
  - anthropic: a Messages API request (curl, trusting only the daemon's CA: the inject
    tier terminates the agent's TLS) to api.anthropic.com with x-api-key the preset's
    placeholder: the stand-in gets x-api-key the secret_file's key and answers 200 with
    a JSON message; the agent side (curl's whole trace, headers and body) never holds
    the key; rule anthropic.api (tier inject) allowed it.
  - refused: hosts no preset lists, though they resolve to the stand-in, which would
    answer them: https://evil.example/ and https://gist.githubusercontent.com/ (a
    githubusercontent.com host the github preset does not list) are refused 403 at the
    CONNECT, and the stand-in never sees a request for them.

Each check can be shown to fail: `--break NAME...` leaves the npm@1 (npm), pypi@1 (pip),
github@1 (git) or anthropic@1 (anthropic) preset out of the policy, or (refused) adds
passthrough rules for the two refused hosts; the broken checks then report FAIL.

Runs as its own pass (as root): python3 tests/integ/presets.py [--daemon PATH]
[--tests NAME...] [--break NAME...] -v (--netns, given by tests/integ/run.sh, is accepted
and unused: the pass makes its own namespace).
"""

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile

from integlib import (client_env, make_pki, own_pass_args, own_pass_end, print_counts,
                      read_audit, skip_pass, with_daemon, Fatal)

CHECKS = ("npm", "pip", "git", "anthropic", "refused")
CLIENT_TIMEOUT_S = 45
# Set, to the host's namespace ("net:[N]"), once the pass has exec'd itself in its own.
IN_NETNS = "AN_PRESETS_HOST_NETNS"

NPM_PKG = "agentsnet-preset-demo"
NPM_VERSION = "1.0.0"
NPM_INDEX_JS = b"module.exports = 'agentsnet preset npm';\n"
PIP_NAME = "agentsnet-preset-demo"  # the project's name; its wheel's is agentsnet_preset_demo
PIP_VERSION = "1.0"
PIP_MODULE = b"VALUE = 'agentsnet preset pip'\n"
GIT_PATH = "/agentsnet/demo.git"
GIT_README = b"agentsnet preset git: cloned through the daemon\n"
PLACEHOLDER = "agentsnet-placeholder-anthropic"  # the anthropic@1 preset's
REFUSED_HOSTS = ("evil.example", "gist.githubusercontent.com")

# Every name a client or the daemon contacts: the resolver's hosts, the stand-in's leaf.
NAMES = ("registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "github.com",
         "api.github.com", "codeload.github.com", "raw.githubusercontent.com",
         "objects.githubusercontent.com", "release-assets.githubusercontent.com",
         "api.anthropic.com") + REFUSED_HOSTS

POLICY = """version: 1
daemon:
  socket_dir: {sock_dir}
  audit_log: {audit}
  tcp_listen: "127.0.0.1:{tcp_port}"
  tcp_sandbox: dev
  ca: {{cert: "{daemon_ca}/ca.pem", key: "{daemon_ca}/ca.key"}}
resolver:
  servers: ["127.0.0.1:9"]
  hosts: {{{hosts}}}
  allow_private: [127.0.0.1/32]
profiles:
  dev:
    presets:
{presets}{rules}sandboxes: [{{id: dev, profile: dev}}]
"""

PRESET_OF = {"npm": "      - npm@1\n", "pip": "      - pypi@1\n", "git": "      - github@1\n",
             "anthropic": "      - {{name: anthropic@1, secret_file: \"{secret}\"}}\n"}
# --break refused: the refused hosts allowed by rules of the profile's own.
BROKEN_RULES = "".join(
    "      - {id: broken-%d, host: %s, tier: passthrough, owner: tests,\n"
    "         reason: \"--break refused\"}\n" % (i, h) for i, h in enumerate(REFUSED_HOSTS))


def enter_netns():
    """Execs this pass again under `unshare --net` (a namespace of its own, with only lo),
    unless it already runs there; then brings lo up. Returns a reason to skip, or None."""
    host_ns = os.environ.get(IN_NETNS)
    if host_ns is None:
        if os.geteuid() != 0:
            return "a network namespace of the pass's own needs root"
        if shutil.which("unshare") is None or shutil.which("ip") is None:
            return "unshare (util-linux) and ip (iproute2) are needed"
        os.environ[IN_NETNS] = os.readlink("/proc/self/ns/net")
        sys.stdout.flush()
        os.execvp("unshare", ["unshare", "--net", "--", sys.executable, "-u",
                              os.path.abspath(__file__), *sys.argv[1:]])
    if os.readlink("/proc/self/ns/net") == host_ns:
        raise Fatal("the pass runs in the namespace it started in (%s)" % host_ns)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
    links = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True,
                           text=True, timeout=10).stdout
    if [line.split(":")[1].strip() for line in links.splitlines()] != ["lo"]:
        raise Fatal("the pass's namespace has interfaces other than lo:\n" + links)
    return None


# ---- fixtures -----------------------------------------------------------------------


def npm_fixture():
    """(packument JSON, tarball bytes) of NPM_PKG@NPM_VERSION."""
    manifest = {"name": NPM_PKG, "version": NPM_VERSION, "main": "index.js",
                "description": "the preset pass's package", "license": "MIT"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("package/package.json", json.dumps(manifest).encode()),
                           ("package/index.js", NPM_INDEX_JS)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1700000000
            tar.addfile(info, io.BytesIO(data))
    tgz = buf.getvalue()
    version = dict(manifest, dist={
        "tarball": "https://registry.npmjs.org/%s/-/%s-%s.tgz" % (NPM_PKG, NPM_PKG, NPM_VERSION),
        "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
        "shasum": hashlib.sha1(tgz).hexdigest()})
    packument = {"name": NPM_PKG, "dist-tags": {"latest": NPM_VERSION},
                 "versions": {NPM_VERSION: version}}
    return json.dumps(packument).encode(), tgz


def wheel_fixture():
    """(file name, bytes) of a minimal valid pure-Python wheel of PIP_NAME==PIP_VERSION."""
    dist = PIP_NAME.replace("-", "_")
    info = "%s-%s.dist-info" % (dist, PIP_VERSION)
    files = [("%s/__init__.py" % dist, PIP_MODULE),
             ("%s/METADATA" % info, ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
                                     "Summary: the preset pass's wheel\n\n"
                                     % (PIP_NAME, PIP_VERSION)).encode()),
             ("%s/WHEEL" % info, b"Wheel-Version: 1.0\nGenerator: agentsnet-presets-pass\n"
                                 b"Root-Is-Purelib: true\nTag: py3-none-any\n\n")]
    record = "".join("%s,sha256=%s,%d\n" % (
        name, base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(),
        len(data)) for name, data in files) + "%s/RECORD,,\n" % info
    files.append(("%s/RECORD" % info, record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            z.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data)
    return "%s-%s-py3-none-any.whl" % (dist, PIP_VERSION), buf.getvalue()


def git_env(home):
    return client_env(home, {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                             "GIT_AUTHOR_NAME": "agentsnet", "GIT_AUTHOR_EMAIL": "t@example.org",
                             "GIT_COMMITTER_NAME": "agentsnet",
                             "GIT_COMMITTER_EMAIL": "t@example.org"})


def git_fixture(top):
    """A bare repository at <top>/demo.git with one commit (README.md), made servable over
    git's dumb HTTP protocol; returns its path."""
    work, bare, env = os.path.join(top, "work"), os.path.join(top, "demo.git"), git_env(top)

    def git(*argv):
        subprocess.run(["git", *argv], check=True, capture_output=True, env=env, timeout=30)

    git("init", "-q", "-b", "main", work)
    with open(os.path.join(work, "README.md"), "wb") as f:
        f.write(GIT_README)
    git("-C", work, "add", "README.md")
    git("-C", work, "commit", "-q", "-m", "the preset pass's commit")
    git("clone", "-q", "--bare", "--no-local", work, bare)
    git("-C", bare, "update-server-info")
    return bare


# ---- the stand-in -------------------------------------------------------------------


class StandIn(http.server.ThreadingHTTPServer):
    """HTTPS on 127.0.0.1:443, one leaf for NAMES, each request answered by its Host: the
    stand-ins of every preset's hosts, and of the refused ones. Records each request."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, tls, fx):
        self.tls, self.fx = tls, fx
        self.lock = threading.Lock()
        self.seen = []  # (host, method, path, server name)
        self.keys = []  # each x-api-key api.anthropic.com got
        super().__init__(("127.0.0.1", 443), Site)

    def get_request(self):
        sock, addr = self.socket.accept()
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def record(self, *what):
        with self.lock:
            self.seen.append(what)

    def hosts_seen(self):
        with self.lock:
            return [s[0] for s in self.seen]


class Site(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 15

    def setup(self):
        super().setup()
        try:
            self.request.do_handshake()
        except (OSError, ssl.SSLError):
            self.close_connection = True
            self.rfile = io.BytesIO(b"")  # nothing to read: handle() returns at once

    def log_message(self, *_):
        pass

    def answer(self, status, body, ctype="application/octet-stream"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        self.route()

    do_HEAD = do_GET

    def do_POST(self):
        self.route()

    def route(self):
        srv = self.server
        host = (self.headers.get("Host") or "").split(":")[0].lower()
        path = self.path.split("?")[0]
        srv.record(host, self.command, self.path, getattr(self.request, "an_sni", None))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fx = srv.fx
        if host == "registry.npmjs.org" and self.command in ("GET", "HEAD"):
            if path == "/" + NPM_PKG:
                return self.answer(200, fx["packument"], "application/json")
            if path == "/%s/-/%s-%s.tgz" % (NPM_PKG, NPM_PKG, NPM_VERSION):
                return self.answer(200, fx["tgz"])
        elif host == "pypi.org" and path == "/simple/%s/" % PIP_NAME:
            return self.answer(200, fx["index"], "text/html")
        elif host == "files.pythonhosted.org" and path == fx["wheel_path"]:
            return self.answer(200, fx["wheel"])
        elif host == "github.com" and path.startswith(GIT_PATH + "/"):
            # Dumb HTTP: info/refs is answered as the plain file, whatever ?service= says.
            file = os.path.realpath(os.path.join(fx["bare"], path[len(GIT_PATH) + 1:]))
            if file.startswith(fx["bare"] + os.sep) and os.path.isfile(file):
                with open(file, "rb") as f:
                    return self.answer(200, f.read(), "text/plain" if path.endswith(
                        "/info/refs") else "application/octet-stream")
        elif host == "api.anthropic.com" and self.command == "POST" and path == "/v1/messages":
            key = self.headers.get("x-api-key")
            with srv.lock:
                srv.keys.append(key)
            if key != fx["secret"]:
                return self.answer(401, json.dumps({"type": "error", "error": {
                    "type": "authentication_error", "message": "invalid x-api-key"}}).encode(),
                    "application/json")
            try:
                model = json.loads(body).get("model")
            except ValueError:
                model = None
            return self.answer(200, json.dumps({
                "id": "msg_presets", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": "hello from the stand-in"}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 4}
            }).encode(), "application/json")
        elif host in REFUSED_HOSTS:
            return self.answer(200, b"reached %s\n" % host.encode(), "text/plain")
        return self.answer(404, b"not here\n", "text/plain")


def stand_in(origin, fx):
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(os.path.join(origin, "leaf.pem"), os.path.join(origin, "leaf.key"))

    def sni(sock, name, _ctx):
        sock.an_sni = name

    tls.sni_callback = sni
    srv = StandIn(tls, fx)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# ---- the checks ---------------------------------------------------------------------


def client(argv, env, log, name, cwd=None):
    """Runs <argv> (a client, CLIENT_TIMEOUT_S at most): (exit status or None on a
    timeout, stdout + stderr as text)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, errors="replace",
                           timeout=CLIENT_TIMEOUT_S)
        code, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        code = None
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                      for x in (e.stdout, e.stderr))
    log("%s: %s exited %s in %.1f s" % (name, argv[0] if argv[0] != sys.executable else "pip",
                                        code, time.monotonic() - t0))
    return code, out


def tail(text, n=1500):
    return text[-n:].rstrip()


def allowed_by(v, rule, host, tier="passthrough"):
    """Problems, if the audit log has no allowed decision of <rule> for <host> (the
    writer is given 3 s)."""
    deadline = time.monotonic() + 3
    while True:
        records, _ = read_audit(v["audit"])
        found = [r for r in records if r.get("event") == "decision" and r.get("host") == host]
        if any(r.get("decision") == "allow" and r.get("rule") == rule and r.get("tier") == tier
               for r in found):
            return []
        if time.monotonic() >= deadline:
            return ["no allowed %s decision by rule %s for %s in the audit log; its decisions "
                    "for the host: %r" % (tier, rule, host, [
                        (r.get("decision"), r.get("reason"), r.get("rule"), r.get("tier"))
                        for r in found][:5])]
        time.sleep(0.1)


def t_npm(v, log):
    errs = []
    top = os.path.join(v["tmp"], "npm")
    proj, cache = os.path.join(top, "project"), os.path.join(top, "cache")
    os.makedirs(proj)
    os.makedirs(cache)
    with open(os.path.join(proj, "package.json"), "w", encoding="utf-8") as f:
        json.dump({"name": "presets-project", "version": "0.0.0", "private": True}, f)
    npmrc, global_npmrc = os.path.join(top, "npmrc"), os.path.join(top, "global-npmrc")
    for path in (npmrc, global_npmrc):  # empty: nothing of the host's npm configuration
        open(path, "w", encoding="utf-8").close()
    code, out = client(
        ["npm", "install", NPM_PKG, "--registry", "https://registry.npmjs.org/",
         "--cafile", v["origin_ca"], "--proxy", v["proxy"], "--https-proxy", v["proxy"],
         "--cache", cache, "--userconfig", npmrc, "--globalconfig", global_npmrc, "--no-audit",
         "--no-fund", "--no-update-notifier", "--fetch-retries", "0", "--loglevel", "http"],
        client_env(top), log, "npm", cwd=proj)
    installed = os.path.join(proj, "node_modules", NPM_PKG)
    try:
        with open(os.path.join(installed, "package.json"), encoding="utf-8") as f:
            version = json.load(f).get("version")
        with open(os.path.join(installed, "index.js"), "rb") as f:
            index_js = f.read()
    except (OSError, ValueError) as e:
        version, index_js = None, repr(e)
    if code != 0 or version != NPM_VERSION or index_js != NPM_INDEX_JS:
        errs.append("npm install exited %s; node_modules/%s: version %r, index.js %r; npm "
                    "said:\n%s" % (code, NPM_PKG, version, index_js[:80], tail(out)))
        return errs
    tarball = "/%s/-/%s-%s.tgz" % (NPM_PKG, NPM_PKG, NPM_VERSION)
    if not any(s[0] == "registry.npmjs.org" and s[2] == tarball for s in v["srv"].seen):
        errs.append("the stand-in registry never served the tarball")
    return errs + allowed_by(v, "npm.registry", "registry.npmjs.org")


def t_pip(v, log):
    errs = []
    top = os.path.join(v["tmp"], "pip")
    dest = os.path.join(top, "dest")
    os.makedirs(dest)
    code, out = client(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
         "--index-url", "https://pypi.org/simple/", "--cert", v["origin_ca"],
         "--proxy", v["proxy"], "--retries", "0", "--timeout", "15",
         "--progress-bar", "off", "-d", dest, "%s==%s" % (PIP_NAME, PIP_VERSION)],
        client_env(top, {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                         "PIP_NO_INPUT": "1", "PYTHONNOUSERSITE": "1"}),
        log, "pip")
    got = os.path.join(dest, v["wheel_name"])
    digest = None
    if os.path.isfile(got):
        with open(got, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    if code != 0 or digest != v["wheel_sha256"]:
        errs.append("pip download exited %s; %s: sha256 %s, want %s; pip said:\n%s" % (
            code, v["wheel_name"], digest, v["wheel_sha256"], tail(out)))
        return errs
    return (errs + allowed_by(v, "pypi.index", "pypi.org") +
            allowed_by(v, "pypi.files", "files.pythonhosted.org"))


def t_git(v, log):
    errs = []
    top = os.path.join(v["tmp"], "git")
    os.makedirs(top)
    dest = os.path.join(top, "demo")
    code, out = client(
        ["git", "-c", "http.proxy=" + v["proxy"], "-c", "http.sslCAInfo=" + v["origin_ca"],
         "-c", "http.lowSpeedLimit=1", "-c", "http.lowSpeedTime=15",
         "clone", "https://github.com%s" % GIT_PATH, dest],
        git_env(top), log, "git")
    readme = None
    try:
        with open(os.path.join(dest, "README.md"), "rb") as f:
            readme = f.read()
    except OSError as e:
        readme = repr(e)
    if code != 0 or readme != GIT_README:
        errs.append("git clone exited %s; README.md %r; git said:\n%s" % (
            code, readme[:80], tail(out)))
        return errs
    return errs + allowed_by(v, "github.web", "github.com")


def t_anthropic(v, log):
    errs = []
    top = os.path.join(v["tmp"], "anthropic")
    os.makedirs(top)
    heads, body_file = os.path.join(top, "heads"), os.path.join(top, "body")
    before = len(v["srv"].keys)
    code, out = client(
        ["curl", "-sS", "-v", "--max-time", "20", "--proxy", v["proxy"],
         "--cacert", v["daemon_ca"], "-D", heads, "-o", body_file,
         "-w", "%{http_connect} %{http_code}",
         "-H", "x-api-key: " + PLACEHOLDER, "-H", "anthropic-version: 2023-06-01",
         "-H", "content-type: application/json",
         "--data", json.dumps({"model": "claude-presets", "max_tokens": 16,
                               "messages": [{"role": "user", "content": "hello"}]}),
         "https://api.anthropic.com/v1/messages"],
        client_env(top), log, "anthropic")
    keys = v["srv"].keys[before:]
    agent_side = out
    for path in (heads, body_file):
        try:
            with open(path, "rb") as f:
                agent_side += f.read().decode("latin-1")
        except OSError:
            pass
    try:
        with open(body_file, "rb") as f:
            answer = json.loads(f.read())
    except (OSError, ValueError):
        answer = None
    log("anthropic: the stand-in got x-api-key %s" % [
        "the secret" if k == v["secret"] else "the placeholder" if k == PLACEHOLDER else
        repr(k) for k in keys])
    if code != 0 or not out.startswith("200 200") or not isinstance(answer, dict) or \
            answer.get("type") != "message":
        errs.append("curl exited %s, CONNECT and request status %r, body %r; curl said:\n%s" % (
            code, out[:7], answer, tail(out)))
    if keys != [v["secret"]]:
        errs.append("the stand-in got %d requests, x-api-key %s; want one, with the secret" % (
            len(keys), ["the secret" if k == v["secret"] else "the placeholder"
                        if k == PLACEHOLDER else "another key" for k in keys]))
    if v["secret"] in agent_side:
        errs.append("the secret reached the agent's side (curl's trace, headers or body)")
    return errs + (allowed_by(v, "anthropic.api", "api.anthropic.com", "inject")
                   if not errs else [])


def t_refused(v, log):
    errs = []
    top = os.path.join(v["tmp"], "refused")
    os.makedirs(top)
    for host in REFUSED_HOSTS:
        seen_before = v["srv"].hosts_seen().count(host)
        code, out = client(
            ["curl", "-sS", "-v", "--max-time", "15", "--proxy", v["proxy"],
             "--cacert", v["origin_ca"], "-o", os.devnull, "-w", "%{http_connect} %{http_code}",
             "https://%s/" % host], client_env(top), log, "refused " + host)
        reason = [line.split(":", 1)[1].strip() for line in out.splitlines()
                  if line.lower().startswith("< x-agent-reason:")]
        log("refused: %s: curl exit %s, CONNECT %s, reason %s" % (host, code, out[:3], reason))
        if not out.startswith("403 ") or code == 0:
            errs.append("https://%s/: curl exited %s, CONNECT status %r (want 403); curl "
                        "said:\n%s" % (host, code, out[:3], tail(out, 600)))
        if v["srv"].hosts_seen().count(host) != seen_before:
            errs.append("the stand-in served %s through the daemon" % host)
    return errs


# ---- the pass -----------------------------------------------------------------------


def main():
    args, log = own_pass_args(
        "agentsnet preset pass", tests=True,
        add=lambda ap: ap.add_argument("--break", dest="broken", nargs="*", default=[],
                                       choices=CHECKS, help="break the daemon path of these "
                                       "checks (each must then report FAIL)"))
    try:
        skip = enter_netns()
    except (Fatal, OSError, subprocess.SubprocessError) as e:
        print("presets: FAIL: the pass's network namespace: %s" % e)
        return 1
    if skip is not None:
        return skip_pass("presets", skip)
    for tool in ("npm", "git", "curl", "openssl"):
        if shutil.which(tool) is None:
            print("presets: FAIL: %s is not installed (tools/deps.sh installs it)" % tool)
            return 1
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                      timeout=30).returncode != 0:
        print("presets: FAIL: %s has no pip (tools/deps.sh installs python3-pip)"
              % sys.executable)
        return 1

    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="an-presets-")
    origin, daemon_ca = os.path.join(tmp, "origin-pki"), os.path.join(tmp, "daemon-ca")
    for d in (origin, daemon_ca):
        os.mkdir(d, 0o700)
    make_pki(origin, names=NAMES)  # the stand-ins' CA and their leaf
    make_pki(daemon_ca, names=("unused.invalid",))  # the CA the inject tier mints with
    secret = "sk-ant-presets-" + os.urandom(12).hex()
    secret_file = os.path.join(tmp, "anthropic.key")
    with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w",
              encoding="ascii") as f:
        f.write(secret + "\n")
    packument, tgz = npm_fixture()
    wheel_name, wheel = wheel_fixture()
    wheel_sha256 = hashlib.sha256(wheel).hexdigest()
    wheel_path = "/packages/%s/%s/%s/%s" % (wheel_sha256[:2], wheel_sha256[2:4],
                                             wheel_sha256[4:60], wheel_name)
    index = ('<!DOCTYPE html>\n<html><head><title>Links for %s</title></head><body>\n'
             '<h1>Links for %s</h1>\n<a href="https://files.pythonhosted.org%s#sha256=%s">'
             '%s</a><br/>\n</body></html>\n' % (PIP_NAME, PIP_NAME, wheel_path, wheel_sha256,
                                                wheel_name)).encode()
    bare = os.path.realpath(git_fixture(os.path.join(tmp, "repo")))
    srv = stand_in(origin, {"packument": packument, "tgz": tgz, "index": index,
                            "wheel": wheel, "wheel_path": wheel_path, "bare": bare,
                            "secret": secret})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        tcp_port = s.getsockname()[1]
    presets = "".join(PRESET_OF[c] for c in ("npm", "pip", "git", "anthropic")
                      if c not in args.broken).format(secret=secret_file)
    if "refused" in args.broken:
        rules = "    rules:\n" + BROKEN_RULES
    else:
        rules = ""  # presets alone: rules is optional next to them
    for name in args.broken:
        print("presets: --break %s: %s" % (name, "the refused hosts allowed by rules of the "
                                           "profile" if name == "refused" else
                                           "its preset left out of the policy"))
    v = {"tmp": tmp, "srv": srv, "secret": secret, "origin_ca": os.path.join(origin, "ca.pem"),
         "daemon_ca": os.path.join(daemon_ca, "ca.pem"), "proxy": "http://127.0.0.1:%d" % tcp_port,
         "wheel_name": wheel_name, "wheel_sha256": wheel_sha256,
         "audit": os.path.join(tmp, "audit.jsonl"), "policy": os.path.join(tmp, "policy.yaml"),
         "err": os.path.join(tmp, "daemon.stderr")}
    with open(v["policy"], "w", encoding="utf-8") as f:
        f.write(POLICY.format(sock_dir=os.path.join(tmp, "run"), audit=v["audit"],
                              tcp_port=tcp_port, daemon_ca=daemon_ca,
                              hosts=", ".join("%s: [127.0.0.1]" % n for n in NAMES),
                              presets=presets or "      []\n", rules=rules))

    def env():
        # OpenSSL's default verify paths (the inject tier's upstream roots) take the
        # stand-ins' CA; the child's, before its exec.
        os.environ["SSL_CERT_FILE"] = v["origin_ca"]

    passed = []  # each check's outcome in turn, True when it passed

    def body():
        failed = 0
        for name in CHECKS:
            if args.tests and name not in args.tests:
                continue
            t0, seen = time.monotonic(), len(srv.seen)
            try:
                errs = globals()["t_" + name](v, log)
            except (OSError, Fatal, subprocess.SubprocessError) as e:
                errs = ["%s: %s" % (type(e).__name__, e)]
            log("%s: %.1f s; the stand-in saw (host, method, path, server name): %r" % (
                name, time.monotonic() - t0, srv.seen[seen:]))
            print("presets: %s: %s" % (name, "ok" if not errs else "FAIL"))
            for e in errs:
                print("  " + e.replace("\n", "\n  "))
            failed += bool(errs)
            passed.append(not errs)
        return failed

    try:
        failed = with_daemon("presets", [args.daemon, "--config", v["policy"]], v["err"], body,
                             env)
    except Fatal as e:
        print("presets: FAIL: %s" % e)
        failed = 1
    finally:
        srv.shutdown()
        srv.server_close()
    print_counts("presets", passed.count(True), failed)  # failed: the daemon's faults too
    log("presets: %.1f s in all" % (time.monotonic() - t_start))
    return own_pass_end("presets", tmp, failed)


if __name__ == "__main__":
    sys.exit(main())
