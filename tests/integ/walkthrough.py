"""The walkthrough pass: demo/README.md's commands, run as the document writes them.

The commands are read from the README at run time, never copied here: every fenced ```sh
block in document order (the quick way's `make demo`, steps 1 to 7), and the command
transcripts of its Troubleshooting section (an unattached ``` block whose lines begin with
"$ "). Each command (a line, with its backslash continuations) runs verbatim with
`sh -c`, as root, in a network namespace of the pass's own that has only `lo` (nothing
leaves the machine: a command that tried the internet would fail, not reach it):

  - A block starts in the repository root (the README: "Run them as root from the
    repository root"); a `cd` holds until the block's end. Exported variables hold for
    the rest of the walkthrough, as in a terminal (step 5 exports PATH in one block and
    runs `qwen` in the next).
  - Commands the README runs in the foreground of "the other terminal" are started in
    the background, each by a row of BACKGROUND: agentsnetd (not --check-config: the
    README says "the daemon runs in the foreground"), and a command whose own comment
    says "foreground" (step 4's model server). One waits for its ready line (the daemon's
    "agentsnetd: ready") or its first line; a later one of the same program replaces it
    (stopped first, as a restart would: "A policy change needs a restart"). Each is
    stopped by its PID (SIGTERM) when replaced and at the end, and must exit 0.
  - Every other command must exit 0.
  - A ```yaml block that the prose puts "in place of `RULE`" of a file named beside it
    (step 5b: the inject rule in place of hosted-model in demo/policy.yaml) is applied to
    a copy of that file, in a scratch tree whose other entries link to the repository's;
    the rest of that section's blocks run there.
  - A transcript the prose says is "from step N's sandbox" runs in one: step N's
    `agentsnet run` with its --sandbox and --ca, `-- sh -c '<the command>'`.

What the README shows is compared:
  - An unlabelled ``` block after a ```sh block of the same section (no other ```sh
    block between) is what that block's commands printed (stdout and stderr, and a
    background command's output up to its ready line). Its lines must appear in that
    order in the output (other lines may come between), each compared after both sides
    are masked (MASKS): ISO times, audit ids (8-16 hex digits), SHA-256 fingerprints,
    the CA name's 8 hex digits, /tmp/<name> paths, `demo-<pid>` and `run-<pid>` names,
    `<n> workers` (one per CPU) and Content-Length values (a refusal's body names the
    sandbox, demo-<pid>) are replaced, runs of blank space made one and \\r dropped.
    Blank lines are not compared, nor the host-dependent lines of IGNORED (the daemon's
    `info:` lines: the kernel's io_uring features and the CPU count; the harness's
    "Ripgrep not available" note, which names where it was installed). So the compared
    lines are the essential ones: the `ok` lines, `exit N` lines, HTTP status lines and
    X-Agent-* headers, the check-config and ready lines, the bridge's lines, the CA's
    files, the harness's answer, what make demo's sandbox printed.
  - A block of `ls -l` lines (step 2's second block) is the directory the command before
    it named with --dir: the same file names, each with the mode, owner and group shown
    (not sizes or dates).
  - A transcript's lines after "$ COMMAND" are that command's output, compared the same
    way; its `exit N` line (from `echo "exit $?"`) is compared like any other.
  - An unattached block of JSON audit records (step 7) is compared with the audit trail
    the section names (/var/log/agentsnet/audit.jsonl): each distinct record, without ts,
    id, conn, bytes_up, bytes_down and duration_ms, must be in the file.
  - After the harness runs against the hosted API (step 5b), what the README says of
    it: the stand-in got the chat completion with the real key and never another key;
    the harness printed the stand-in's answer; the audit has the CONNECT with tier inject
    and the POST of /compatible-mode/v1/chat/completions; the key is in neither the
    harness's output, the audit trail nor the daemon's log.
  - At the end, every system path the README names (/var/lib/agentsnet, /run/agentsnet,
    /var/log/agentsnet, /opt/qwen, /srv/qwen: found in its text) is as it was before.

Placeholders the README leaves to its reader are filled in (PLACEHOLDERS): /path/to/repo
with the repository, `<a model of that service>` with qwen-plus, an audit id in a
command (step 7's grep for "an X-Agent-Audit-Id") with the id of the last refusal in
the audit trail; $YOUR_KEY (step 5b) is a test key, in the environment of the commands
that name it.

Stand-ins, so that nothing needs the internet:
  - npm's registry: step 5's `npm install` runs with npm_config_registry set to a server
    on the namespace's loopback that serves the packages tests/integ/node/node_modules
    holds (tools/deps.sh installs them there from tests/integ/node's lock), as packuments
    and tarballs made from them (npm_config_cache a scratch directory).
  - the hosted model API of step 5b: the namespace's /etc/hosts (ip netns exec's
    /etc/netns) puts the API's host at HOSTED_ADDR, a global unicast address on the
    namespace's `lo` (the daemon refuses private ones), where an OpenAI-compatible server
    with a leaf for that host answers only `Bearer $YOUR_KEY`; the daemons the walkthrough
    starts get SSL_CERT_FILE, the host roots plus that server's CA.

System paths: what the README writes (/var/lib/agentsnet/ca, the daemon's /run/agentsnet
and /var/log/agentsnet, /opt/qwen, /srv/qwen) is written there. A path that exists
before the pass is moved aside and put back afterwards; one that did not is removed. The
pass refuses to start when a daemon answers on a socket under /run/agentsnet, or a
process has a file, or its working directory, under one of them.

Skips (the only ones allowed when CI=true; each is counted and named in the summary):
  - no Docker engine on the machine: a command of step 6 that runs `docker`, when
    `docker info` fails (the others of step 6 run).
  - a model download from the internet: step 4's `ollama pull` (4.7 GB from
    ollama.com); the README's stand-in, the next block, answers in its place.
The pass refuses to start, too, when tests/integ/node is not as tools/deps.sh leaves it
(one of the files deps.sh checks missing, or the lock newer than the install): step 1's
tools/deps.sh would run `npm ci` there, which needs the registry.

Prints "walkthrough: STEP: ok" or "walkthrough: STEP: FAIL" and the reasons for each
section, then "walkthrough: N run, M skipped (reasons)"; exit 0 only when all held.

--readme FILE runs another text instead of demo/README.md (a copy with a command or an
output line changed shows the check on it failing).

Runs as its own pass: python3 tests/integ/walkthrough.py [--readme FILE] -v
(--daemon and --netns, given by tests/integ/run.sh, are accepted and unused: the
README's commands name build/rel's binaries, and the pass makes its own namespace).
"""

import base64
import grp
import hashlib
import http.server
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
import urllib.parse

from integlib import make_pki, own_pass_args, own_pass_end, print_counts, read_text, terminate

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
README = os.path.join(ROOT, "demo", "README.md")
NODE_MODULES = os.path.join(HERE, "node", "node_modules")

READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
DEFAULT_TIMEOUT_S = 60
# A command matching a pattern gets that many seconds (the first match wins).
TIMEOUTS = [(re.compile(r"^(make|npm|docker)\b"), 150),
            (re.compile(r"(?:^|\s--\s+)qwen(?![-/.\w])"), 120)]

# Commands the README runs in the foreground of another terminal: (pattern on the command,
# what is ready in its output (None: its first line), why it runs in the background).
BACKGROUND = [
    (re.compile(r"^\S*agentsnetd\b(?!.*--check-config)"), re.compile(r"agentsnetd: ready"),
     "the daemon runs in the foreground (README, Step by step)"),
    (re.compile(r"#.*\bforeground\b"), None, "its own comment says it runs in the foreground"),
]

SKIP_DOCKER = "no Docker engine on the machine"
SKIP_MODEL_DOWNLOAD = "a model download from the internet"
# Commands never run: (pattern, reason).
ALWAYS_SKIP = [(re.compile(r"^ollama\s+pull\b"), SKIP_MODEL_DOWNLOAD)]

HOSTED_ADDR = "100.128.0.1"  # just above 100.64.0.0/10: global unicast, on the netns' lo
HOSTED_MODEL = "qwen-plus"
HOSTED_REPLY = "Hello from the walkthrough's hosted-model stand-in, through the inject tier."
PLACEHOLDERS = [("/path/to/repo", ROOT), ("<a model of that service>", HOSTED_MODEL)]
UNKNOWN_PLACEHOLDER = re.compile(r"<[a-z][a-z' ]* [a-z' ]*>")
AUDIT_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{16}\b")

MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"), "<time>"),
    (AUDIT_ID, "<audit-id>"),
    (re.compile(r"\b(?:[0-9A-F]{2}:){31}[0-9A-F]{2}\b"), "<sha256>"),
    (re.compile(r"\bdemo CA [0-9a-f]{8}\b"), "demo CA <hex>"),
    (re.compile(r"/tmp/[^\s/'\"]+"), "/tmp/<temp>"),
    (re.compile(r"\b(demo|run)-\d+\b"), r"\1-<pid>"),
    (re.compile(r"\b\d+ workers\b"), "<n> workers"),
    # A refusal's body names the sandbox, demo-<pid> in make demo: its length varies.
    (re.compile(r"^(\s*Content-Length:) \d+\s*$"), r"\1 <n>"),
]
IGNORED = [re.compile(r"agentsnetd: info: "), re.compile(r"^\s*Ripgrep not available")]
LISTING = re.compile(r"^([-dl][rwxsStT-]{9})[.+@]?\s+\d+\s+(\S+)\s+(\S+)\s+\d+\s+\w{3}\s+\d+\s+"
                     r"(?:\d\d:\d\d|\d{4})\s+(\S.*)$")
DROPPED_AUDIT_KEYS = ("ts", "id", "conn", "bytes_up", "bytes_down", "duration_ms")
SYSTEM_PATH = re.compile(r"(?<![\w./-])/(?:var/lib|var/log|run|opt|srv)/[A-Za-z0-9._-]+")


def allowed_ci_skips():
    """The reasons of the docstring's skip list (the only skips allowed when CI=true)."""
    doc = __doc__.split("\nSkips ", 1)[1]
    return set(re.findall(r"^  - ([^:\n]+):", doc, re.M))


# ---- the README, read ---------------------------------------------------------------


class Cmd:
    def __init__(self, text, line):
        self.text, self.line = text, line
        self.expect = []  # a transcript's output lines


class Item:
    """One fenced block: kind "sh" (commands), "output" (attached to .owner), "listing",
    "transcript" (commands with their output), "audit" (JSON records), "edit" (yaml put
    in place of a rule) or "text" (not checked)."""

    def __init__(self, kind, lines, line, section, prose):
        self.kind, self.lines, self.line, self.section, self.prose = (kind, lines, line,
                                                                       section, prose)
        self.cmds, self.outputs, self.owner = [], [], None
        self.indented, self.sandbox_step, self.audit_path = False, None, None
        self.rule = self.file = None


def section_label(h2, h3):
    clean = lambda s: re.sub(r"[`*]", "", s or "").strip()  # noqa: E731
    m = re.match(r"(\d+[a-z]?)\. ", h3 or "")
    if m:
        return "step " + m.group(1)
    if h3:
        return "%s: %s" % (clean(h2), clean(h3))
    return clean(h2)


def split_commands(lines, first_line):
    """A ```sh block's commands: a line with its backslash continuations; blank lines and
    lines of a comment alone are none."""
    cmds, cur, start = [], [], 0
    for n, line in enumerate(lines):
        if not cur:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = n
        cur.append(line)
        if not line.endswith("\\"):
            cmds.append(Cmd("\n".join(cur), first_line + 1 + start))
            cur = []
    if cur:
        cmds.append(Cmd("\n".join(cur), first_line + 1 + start))
    return cmds


def parse_readme(text):
    """The README's fenced blocks as Items, in document order."""
    items, h2, h3, prose = [], None, None, []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(\s*)```(\w*)\s*$", line)
        heading = re.match(r"^(#{2,3}) (.*)$", line)
        if heading and not fence:
            if heading.group(1) == "##":
                h2, h3 = heading.group(2), None
            else:
                h3 = heading.group(2)
            prose = []
            i += 1
            continue
        if not fence:
            prose.append(line)
            i += 1
            continue
        indent, lang = fence.group(1), fence.group(2)
        body, j = [], i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        item = Item(lang or "text", body, i + 1, section_label(h2, h3), "\n".join(prose))
        item.indented = bool(indent)
        items.append(item)
        prose = []
        i = j + 1
    classify(items)
    return items


def classify(items):
    last_sh = {}
    for it in items:
        if it.kind == "sh":
            it.cmds = split_commands(it.lines, it.line)
            last_sh[it.section] = it
        elif it.kind == "yaml":
            m = re.search(r"in place of `([\w.-]+)`", it.prose)
            f = re.search(r"`([\w./-]+\.ya?ml)`", it.prose)
            if m and f:
                it.kind, it.rule, it.file = "edit", m.group(1), f.group(1)
        elif it.kind == "text" and not it.indented:
            owner = last_sh.get(it.section)
            nonblank = [x for x in it.lines if x.strip()]
            if owner is not None:
                it.owner = owner
                owner.outputs.append(it)
                it.kind = "listing" if nonblank and all(LISTING.match(x) for x in nonblank) \
                    else "output"
            elif nonblank and nonblank[0].startswith("$ "):
                it.kind = "transcript"
                for n, x in enumerate(it.lines):
                    if x.startswith("$ "):
                        it.cmds.append(Cmd(x[2:], it.line + 1 + n))
                    elif it.cmds:
                        it.cmds[-1].expect.append(x)
                m = re.search(r"[Ff]rom step (\w+)'s sandbox", it.prose)
                it.sandbox_step = m.group(1) if m else None
            elif nonblank and all(is_audit_line(x) for x in nonblank):
                it.kind = "audit"
                m = re.search(r"(/[\w./-]+\.jsonl)", it.prose)
                it.audit_path = m.group(1) if m else None


def is_audit_line(line):
    try:
        rec = json.loads(line)
    except ValueError:
        return False
    return isinstance(rec, dict) and "event" in rec


# ---- comparing ---------------------------------------------------------------------


def norm(line):
    line = line.replace("\r", "")
    for pat, repl in MASKS:
        line = pat.sub(repl, line)
    return " ".join(line.split())


def ignored(line):
    return any(p.search(line) for p in IGNORED)


def compare_lines(expected, actual_text):
    """[] when every line of <expected> (but blank and IGNORED ones) is in <actual_text>,
    in order, both masked; else the first missing line. Returns (errs, compared)."""
    want = [(x, norm(x)) for x in expected if x.strip() and not ignored(x)]
    got = [norm(x) for x in actual_text.split("\n") if x.strip()]
    i = 0
    for raw, w in want:
        while i < len(got) and got[i] != w:
            i += 1
        if i == len(got):
            return ["the README's line %r is not in the output (in order, masked); the "
                    "output:\n%s" % (raw.strip(), indent_text(actual_text))], len(want)
        i += 1
    return [], len(want)


def indent_text(text, limit=3000):
    text = text[-limit:]
    return "\n".join("      | " + x for x in text.rstrip("\n").split("\n"))


def compare_listing(item, lines):
    m = re.search(r"--dir\s+(\S+)", item.owner.cmds[-1].text if item.owner.cmds else "")
    if not m:
        return ["a listing follows a command with no --dir: which directory it shows is "
                "unknown"]
    d = m.group(1)
    want = {}
    for x in lines:
        lm = LISTING.match(x)
        if lm:
            want[lm.group(4)] = (lm.group(1), lm.group(2), lm.group(3))
    try:
        names = sorted(os.listdir(d))
    except OSError as e:
        return ["the listing of %s: %s" % (d, e)]
    errs = []
    if sorted(want) != names:
        errs.append("%s holds %s; the README lists %s" % (d, names, sorted(want)))
    for name in sorted(set(want) & set(names)):
        st = os.lstat(os.path.join(d, name))
        got = (stat.filemode(st.st_mode), pwd.getpwuid(st.st_uid).pw_name,
               grp.getgrgid(st.st_gid).gr_name)
        if got != want[name]:
            errs.append("%s/%s is %s; the README shows %s" % (d, name, " ".join(got),
                                                             " ".join(want[name])))
    return errs


def audit_shape(rec):
    return json.dumps({k: v for k, v in rec.items() if k not in DROPPED_AUDIT_KEYS},
                      sort_keys=True)


def compare_audit(item):
    if not item.audit_path:
        return ["the section names no audit file (*.jsonl) to compare the records with"]
    have = set()
    for line in read_text(item.audit_path).splitlines():
        try:
            have.add(audit_shape(json.loads(line)))
        except ValueError:
            return ["%s: a line is not JSON: %r" % (item.audit_path, line[:200])]
    errs = []
    for line in item.lines:
        if line.strip() and audit_shape(json.loads(line)) not in have:
            errs.append("the README's record is not in %s (without %s): %s"
                        % (item.audit_path, ", ".join(DROPPED_AUDIT_KEYS), line.strip()))
    return errs


# ---- the stand-ins (each its own process in the namespace) ---------------------------


def registry_packages(modules):
    """{name: {version: directory}} of every package under <modules>, nested ones too."""
    found = {}

    def walk(nm):
        for entry in sorted(os.listdir(nm)):
            if entry.startswith("."):
                continue
            dirs = [os.path.join(nm, entry)]
            if entry.startswith("@"):
                dirs = [os.path.join(nm, entry, s) for s in sorted(os.listdir(dirs[0]))]
            for d in dirs:
                try:
                    with open(os.path.join(d, "package.json"), encoding="utf-8") as f:
                        pj = json.load(f)
                except (OSError, ValueError):
                    continue
                found.setdefault(pj["name"], {})[pj["version"]] = d
                if os.path.isdir(os.path.join(d, "node_modules")):
                    walk(os.path.join(d, "node_modules"))

    walk(modules)
    return found


def serve_registry(spec):
    """npm's registry for what <spec>["modules"] holds: GET /<name> a packument, GET
    /-/tarball/<name>/<version> a tarball (plain tar: npm reads it as it reads gzip)
    made from the installed directory, its own node_modules left out. Prints its port."""
    pkgs = registry_packages(spec["modules"])
    store, lock, made = spec["dir"], threading.Lock(), {}

    def tarball(name, version):
        with lock:
            if (name, version) in made:
                return made[(name, version)]
            src = pkgs[name][version]
            path = os.path.join(store, "%s-%s.tar" % (name.replace("/", "_"), version))

            def keep(ti):
                if ti.name == "package/node_modules" or \
                        ti.name.startswith("package/node_modules/"):
                    return None
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                return ti

            with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
                tf.add(src, arcname="package", filter=keep)
            sha512, sha1 = hashlib.sha512(), hashlib.sha1()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    sha512.update(chunk)
                    sha1.update(chunk)
            made[(name, version)] = (path, "sha512-" + base64.b64encode(
                sha512.digest()).decode(), sha1.hexdigest())
            return made[(name, version)]

    class Registry(http.server.BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            sys.stderr.write("registry: " + fmt % a + "\n")

        def send(self, status, body, ctype="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            port = self.server.server_address[1]
            if path.startswith("/-/tarball/"):
                name, _, version = path[len("/-/tarball/"):].rpartition("/")
                if version not in pkgs.get(name, {}):
                    return self.send(404, b'{"error":"not found"}')
                tar = tarball(name, version)[0]
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(os.path.getsize(tar)))
                self.end_headers()
                with open(tar, "rb") as f:
                    self.wfile.flush()
                    self.connection.sendfile(f)
                return None
            name = path.lstrip("/")
            if name not in pkgs:
                return self.send(404, b'{"error":"not found"}')
            versions = {}
            for version, d in pkgs[name].items():
                with open(os.path.join(d, "package.json"), encoding="utf-8") as f:
                    man = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
                _tar, integrity, shasum = tarball(name, version)
                man["dist"] = {"tarball": "http://127.0.0.1:%d/-/tarball/%s/%s" % (
                    port, urllib.parse.quote(name, safe="@"), version),
                    "integrity": integrity, "shasum": shasum}
                versions[version] = man
            latest = sorted(versions, key=lambda v: [int(x) if x.isdigit() else 0
                                                     for x in re.split(r"[.-]", v)])[-1]
            body = {"name": name, "dist-tags": {"latest": latest}, "versions": versions}
            return self.send(200, json.dumps(body).encode())

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


def serve_hosted(spec):
    """The hosted model API's stand-in: HTTPS on <spec>["addr"]:443 with a leaf for the
    API's host; answers an OpenAI chat completion (streamed or not) with HOSTED_REPLY to
    `Bearer <the key>` alone (401 to any other), and logs each request with key=match,
    other or none. Prints "ready"."""
    with open(spec["key_file"], encoding="ascii") as f:
        key = f.read().strip()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(spec["cert"], spec["cert_key"])
    logf = open(spec["log"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    class Hosted(http.server.BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            pass

        def send_json(self, obj, status):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def answer(self, method):
            auth = self.headers.get("Authorization")
            who = "none" if auth is None else ("match" if auth == "Bearer " + key else "other")
            body = b""
            if method == "POST":
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0].rstrip("/")
            status = 200
            if who != "match":
                status = 401
                self.send_json({"error": {"message": "Incorrect API key provided",
                                          "type": "invalid_request_error"}}, 401)
            elif method == "GET" and path == "/compatible-mode/v1/models":
                self.send_json({"object": "list", "data": [{"id": HOSTED_MODEL,
                                                            "object": "model"}]}, 200)
            elif method == "POST" and path == "/compatible-mode/v1/chat/completions":
                self.completion(body)
            else:
                status = 404
                self.send_json({"error": {"message": "not found"}}, 404)
            logf.write("%s %s key=%s status=%d\n" % (method, path, who, status))

        def completion(self, body):
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                req = {}
            head = {"id": "chatcmpl-walkthrough", "created": int(time.time()),
                    "model": req.get("model", HOSTED_MODEL)}
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            if not req.get("stream"):
                msg = {"role": "assistant", "content": HOSTED_REPLY}
                return self.send_json(dict(head, object="chat.completion", usage=usage,
                                           choices=[{"index": 0, "message": msg,
                                                     "finish_reason": "stop"}]), 200)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for delta, end in (({"role": "assistant", "content": HOSTED_REPLY}, None),
                               ({}, "stop")):
                chunk = dict(head, object="chat.completion.chunk",
                             choices=[{"index": 0, "delta": delta, "finish_reason": end}])
                if end:
                    chunk["usage"] = usage
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True
            return None

        def do_GET(self):
            self.answer("GET")

        def do_POST(self):
            self.answer("POST")

    class TLSServer(http.server.ThreadingHTTPServer):
        def finish_request(self, request, client_address):
            try:
                request = ctx.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError):
                return
            self.RequestHandlerClass(request, client_address, self)

        def handle_error(self, request, client_address):
            pass

    server = TLSServer((spec["addr"], 443), Hosted)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    server.serve_forever()


# ---- the run -----------------------------------------------------------------------


class Bg:
    def __init__(self, prog, popen, out, cmd, label):
        self.prog, self.popen, self.out, self.cmd, self.label = prog, popen, out, cmd, label


class Walk:
    def __init__(self, args, log, tmp, items):
        self.args, self.log, self.tmp, self.items = args, log, tmp, items
        self.ns = "an-walkthrough-%d" % os.getpid()
        self.state = os.path.join(tmp, "state")
        os.mkdir(self.state)
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/sh",
                    "LANG": "C.UTF-8", "WALKTHROUGH_STATE": self.state,
                    "npm_config_cache": os.path.join(tmp, "npm-cache"),
                    "npm_config_update_notifier": "false"}
        self.bg = {}      # program -> Bg
        self.helpers = []  # the stand-ins' Popens
        self.results = {}  # section -> [errs]
        self.order = []
        self.ran, self.skips = 0, []  # skips: (section, command, reason)
        self.saved, self.created = {}, []
        self.docker = None
        self.daemon_env = {}
        self.hosted = None  # the hosted API's stand-in: host, ca, cert, key, key_file, log
        self.key = "sk-walkthrough-" + os.urandom(12).hex()  # $YOUR_KEY

    # -- bookkeeping
    def errs(self, section):
        if section not in self.results:
            self.results[section] = []
            self.order.append(section)
        return self.results[section]

    def fail(self, section, msg):
        self.errs(section).append(msg)

    def skip(self, section, cmd, reason):
        self.errs(section)
        self.skips.append((section, cmd, reason))
        self.log("  skipped (%s): %s" % (reason, cmd.split("\n")[0]))

    # -- the namespace, the system paths, the stand-ins
    @staticmethod
    def system_paths(text):
        """The system directories the README names (the first level under /var/lib,
        /var/log, /run, /opt and /srv)."""
        return sorted(set(SYSTEM_PATH.findall(text)))

    def preflight(self, text):
        """Refuses a busy system path; moves an existing one aside. Returns errors."""
        errs = []
        for top in self.system_paths(text):
            for entry in os.listdir(os.path.dirname(top)):
                if entry.startswith(os.path.basename(top) + ".walkthrough-saved-"):
                    errs.append("%s/%s: what an earlier walkthrough moved aside; put it back "
                                "(or remove it) first" % (os.path.dirname(top), entry))
            if not os.path.lexists(top):
                continue
            for sock in sockets_under(top):
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(2)
                try:
                    s.connect(sock)
                    errs.append("a daemon answers on %s: the walkthrough would take over %s; "
                                "stop it first (or run the pass on another machine)"
                                % (sock, top))
                except OSError:
                    pass
                finally:
                    s.close()
            for pid, what in users_of(top):
                errs.append("process %s (%s) uses %s: the walkthrough would take it over"
                            % (pid, what, top))
        errs += node_modules_stale()
        if errs:
            return errs
        for top in self.system_paths(text):
            if os.path.lexists(top):
                aside = "%s.walkthrough-saved-%d" % (top, os.getpid())
                os.rename(top, aside)
                self.saved[top] = aside
                self.log("# %s moved aside to %s until the end" % (top, aside))
            else:
                self.created.append(top)
        return []

    def restore(self):
        errs = []
        keep = os.path.join(self.tmp, "system-paths")
        for top in list(self.created) + list(self.saved):
            if os.path.lexists(top):
                if top.startswith("/var/log/"):
                    shutil.copytree(top, os.path.join(keep, top.strip("/").replace("/", "_")),
                                    symlinks=True, dirs_exist_ok=True)
                if os.path.isdir(top) and not os.path.islink(top):
                    shutil.rmtree(top, ignore_errors=True)
                else:
                    os.unlink(top)
            if os.path.lexists(top):
                errs.append("%s: could not be removed" % top)
        for top, aside in self.saved.items():
            os.rename(aside, top)
        return errs

    def setup_ns(self):
        subprocess.run(["ip", "netns", "add", self.ns], check=True, timeout=30)
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True, timeout=30)
        subprocess.run(["ip", "-n", self.ns, "addr", "add", HOSTED_ADDR + "/32", "dev", "lo"],
                       check=True, timeout=30)
        etc = "/etc/netns/" + self.ns
        os.makedirs(etc)
        with open(os.path.join(etc, "resolv.conf"), "w", encoding="ascii") as f:
            f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
        if self.hosted:
            hosts += "%s %s\n" % (HOSTED_ADDR, self.hosted["host"])
        with open(os.path.join(etc, "hosts"), "w", encoding="ascii") as f:
            f.write(hosts)

    def teardown_ns(self):
        subprocess.run(["ip", "netns", "del", self.ns], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, timeout=30)
        shutil.rmtree("/etc/netns/" + self.ns, ignore_errors=True)

    def helper(self, mode, spec, ready):
        """This file run as a stand-in (<mode>) in the namespace; returns its first line,
        once ready(it) holds."""
        err_path = os.path.join(self.tmp, mode.strip("-") + ".log")
        with open(err_path, "ab") as err:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-u",
                                  os.path.abspath(__file__), mode, json.dumps(spec)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        self.helpers.append(p)
        line = p.stdout.readline().decode()
        if not ready(line):
            raise RuntimeError("%s did not start: %r; its log:\n%s" % (mode, line,
                                                                       read_text(err_path)))
        return line

    def start_standins(self):
        d = os.path.join(self.tmp, "registry")
        os.mkdir(d)
        line = self.helper("--serve-registry", {"modules": NODE_MODULES, "dir": d},
                           lambda x: x.startswith("{"))
        self.env["npm_config_registry"] = "http://127.0.0.1:%d/" % json.loads(line)["port"]
        # The daemons' system roots: the host's and the hosted stand-in's CA.
        roots = os.path.join(self.tmp, "roots.pem")
        with open(roots, "w", encoding="ascii") as out:
            out.write(read_text("/etc/ssl/certs/ca-certificates.crt"))
            if self.hosted:
                out.write(read_text(self.hosted["ca"]))
        os.chmod(roots, 0o644)
        self.daemon_env = {"SSL_CERT_FILE": roots}
        if self.hosted:
            self.helper("--serve-hosted", {
                "addr": HOSTED_ADDR, "cert": self.hosted["cert"], "cert_key": self.hosted["key"],
                "key_file": self.hosted["key_file"], "log": self.hosted["log"]},
                lambda x: x.strip() == "ready")

    def prepare_hosted(self):
        """The hosted API's host (the inject rule's, from the README's yaml), its leaf and
        the key the stand-in wants ($YOUR_KEY)."""
        for it in self.items:
            if it.kind == "edit" and re.search(r"tier:\s*inject", "\n".join(it.lines)):
                m = re.search(r"host:\s*(\S+)", "\n".join(it.lines))
                if m:
                    break
        else:
            return
        pki = os.path.join(self.tmp, "hosted-pki")
        os.mkdir(pki, 0o700)
        ca, leaf, key = make_pki(pki, names=(m.group(1),))
        key_file = os.path.join(pki, "key")
        with open(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w",
                  encoding="ascii") as f:
            f.write(self.key + "\n")
        self.hosted = {"host": m.group(1), "ca": ca, "cert": leaf, "key": key,
                       "key_file": key_file, "log": os.path.join(self.tmp, "hosted.log")}

    # -- running commands
    def argv(self, script):
        return ["ip", "netns", "exec", self.ns, "sh", "-c", script]

    def env_for(self, text):
        """The session's environment, and $YOUR_KEY for a command that names it (a
        variable of the reader's shell: the other commands never see it)."""
        env = dict(self.env)
        if re.search(r"\$\{?YOUR_KEY\b", text):
            env["YOUR_KEY"] = self.key
        return env

    def timeout_of(self, text):
        for pat, secs in TIMEOUTS:
            if pat.search(text):
                return secs
        return DEFAULT_TIMEOUT_S

    def foreground(self, text, cwd):
        """Runs <text> (its state carried: the environment, and the directory it ends
        in); returns (exit status, output, the directory after it)."""
        script = (text + "\n__walk_rc=$?\nenv -0 >\"$WALKTHROUGH_STATE/env\"\n"
                  "pwd >\"$WALKTHROUGH_STATE/cwd\"\nexit $__walk_rc\n")
        for name in ("env", "cwd"):
            if os.path.exists(os.path.join(self.state, name)):
                os.unlink(os.path.join(self.state, name))
        out_path = os.path.join(self.tmp, "out.%d" % time.monotonic_ns())
        with open(out_path, "wb") as out:
            p = subprocess.Popen(self.argv(script), cwd=cwd, env=self.env_for(text),
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                 start_new_session=True)
            limit = self.timeout_of(text)
            try:
                rc = p.wait(limit)
                stop_group(p)  # what it left behind in its group, if anything
            except subprocess.TimeoutExpired:
                stop_group(p)
                rc = "timed out after %ds" % limit
            except BaseException:
                stop_group(p)  # the pass is being stopped: so is the command
                raise
        text_out = read_text(out_path)
        os.unlink(out_path)
        env_path = os.path.join(self.state, "env")
        if os.path.exists(env_path):
            with open(env_path, "rb") as f:
                pairs = [x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x]
            self.env = {k.decode(): v.decode() for k, v in pairs if k != b"YOUR_KEY"}
            cwd = read_text(os.path.join(self.state, "cwd")).strip() or cwd
        return rc, text_out, cwd

    def background(self, text, cwd, ready, label):
        prog = text.split()[0]
        errs = []
        if prog in self.bg:
            errs += self.stop_bg(self.bg.pop(prog))
        out_path = os.path.join(self.tmp, "bg-%s-%d.log" % (os.path.basename(prog),
                                                           time.monotonic_ns()))
        env = self.env_for(text)
        if os.path.basename(prog) == "agentsnetd":
            env.update(self.daemon_env)
        with open(out_path, "wb") as out:
            p = subprocess.Popen(self.argv(text), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=out, start_new_session=True)
        b = Bg(prog, p, out_path, text, label)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            got = read_text(out_path)
            if p.poll() is not None:
                return errs + ["%s exited %s before it was ready; it printed:\n%s"
                               % (one_line(text), p.returncode, indent_text(got))], got
            if (ready.search(got) if ready else got.strip()):
                self.bg[prog] = b
                return errs, got
            time.sleep(0.05)
        self.bg[prog] = b
        return errs + ["%s: not ready within %ds; it printed:\n%s" % (
            one_line(text), READY_TIMEOUT_S, indent_text(read_text(out_path)))], \
            read_text(out_path)

    def stop_bg(self, b):
        """SIGTERM to the command sh started (by its PID), and sh's status is its."""
        p = b.popen
        if p.poll() is None:
            kids = children(p.pid)
            for kid in kids or [p.pid]:
                try:
                    os.kill(kid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                stop_group(p)
                return ["%s: did not stop within %ds of SIGTERM" % (one_line(b.cmd),
                                                                     STOP_TIMEOUT_S)]
        stop_group(p)  # what it left behind in its group, if anything
        if p.returncode != 0:
            return ["%s (%s): exit %s when stopped by SIGTERM, want 0; it printed:\n%s"
                    % (one_line(b.cmd), b.label, p.returncode, indent_text(read_text(b.out)))]
        return []

    def stop_all(self):
        for prog in list(self.bg):
            b = self.bg.pop(prog)
            for e in self.stop_bg(b):
                self.fail(b.label, e)
        for p in self.helpers:
            terminate(p, 10)

    # -- a command, its substitutions and skips
    def fill(self, text, section):
        for key, value in PLACEHOLDERS:
            text = text.replace(key, value)
        if AUDIT_ID.search(text):
            rid = self.last_refusal_id()
            if rid is None:
                self.fail(section, "%s names an audit id, and the audit trail has no refusal "
                          "whose id could stand in for it" % one_line(text))
            else:
                text = AUDIT_ID.sub(rid, text)
        left = UNKNOWN_PLACEHOLDER.search(text)
        if left:
            self.fail(section, "%s: a placeholder the test cannot fill: %s"
                      % (one_line(text), left.group(0)))
        return text

    def last_refusal_id(self):
        for path in self.audit_paths():
            for line in reversed(read_text(path).splitlines()):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("event") == "decision" and \
                        rec.get("decision") == "deny":
                    return rec.get("id")
        return None

    def audit_paths(self):
        return sorted({it.audit_path for it in self.items
                       if it.kind == "audit" and it.audit_path})

    def skip_reason(self, text):
        for pat, reason in ALWAYS_SKIP:
            if pat.search(text):
                return reason
        if re.match(r"^docker\b", text):
            if self.docker is None:
                try:
                    self.docker = subprocess.run(
                        ["docker", "info"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        timeout=20).returncode == 0
                except (OSError, subprocess.TimeoutExpired):
                    self.docker = False
            if not self.docker:
                return SKIP_DOCKER
        return None

    def run_cmd(self, section, text, cwd, line):
        """One command; returns (its output, the directory after it)."""
        reason = self.skip_reason(text)
        if reason:
            self.skip(section, text, reason)
            return None, cwd
        text = self.fill(text, section)
        self.ran += 1
        t0 = time.monotonic()
        for pat, ready, why in BACKGROUND:
            if pat.search(text):
                errs, out = self.background(text, cwd, ready, section)
                self.log("  $ %s    (background: %s; ready in %.1fs)" % (
                    one_line(text), why, time.monotonic() - t0))
                for e in errs:
                    self.fail(section, e)
                return out, cwd
        rc, out, cwd_after = self.foreground(text, cwd)
        self.log("  $ %s    (exit %s, %.1fs)" % (one_line(text), rc, time.monotonic() - t0))
        if rc != 0:
            self.fail(section, "README line %d: %s: %s, want exit 0; it printed:\n%s"
                      % (line, one_line(text), rc if isinstance(rc, str) else "exit %d" % rc,
                         indent_text(out)))
        elif self.args.v and out.strip():
            self.log(indent_text(out, 1200))
        if self.hosted and "OPENAI_BASE_URL=https://" + self.hosted["host"] in text:
            for e in self.check_hosted(out):
                self.fail(section, e)
        return out, cwd_after

    # -- the sections
    def run(self):
        edited_root = {}  # section -> the scratch tree its later blocks run in
        for it in self.items:
            if it.kind != "text" or it.owner is not None:
                self.errs(it.section)  # in the summary, in document order
            if it.kind == "edit":
                self.log("## %s: README line %d: the yaml in place of rule %s of %s"
                         % (it.section, it.line, it.rule, it.file))
                try:
                    edited_root[it.section] = self.edited_tree(it)
                except (OSError, ValueError) as e:
                    self.fail(it.section, "README line %d: applying the yaml to %s: %s"
                              % (it.line, it.file, e))
            elif it.kind == "sh":
                self.run_block(it, edited_root.get(it.section, ROOT))
            elif it.kind == "transcript":
                self.run_transcript(it)
            elif it.kind == "audit":
                self.log("## %s: README line %d: %d audit records, against %s"
                         % (it.section, it.line, len(it.lines), it.audit_path))
                for e in compare_audit(it):
                    self.fail(it.section, "README line %d: %s" % (it.line, e))
            elif it.kind in ("text", "output", "listing") and not it.owner:
                self.log("## %s: README line %d: a block that is no command's output: not "
                         "compared" % (it.section, it.line))

    def run_block(self, it, root):
        self.log("## %s: README line %d%s" % (it.section, it.line,
                                              "" if root == ROOT else " (in %s)" % root))
        cwd, outs, skipped = root, [], False
        for c in it.cmds:
            out, cwd = self.run_cmd(it.section, c.text, cwd, c.line)
            if out is None:
                skipped = True
            else:
                outs.append(out)
            if not os.path.isdir(cwd):
                cwd = root
        for o in it.outputs:
            if skipped:
                self.log("  (the output at README line %d: not compared, a command was "
                         "skipped)" % o.line)
                continue
            if o.kind == "listing":
                errs = compare_listing(o, o.lines)
                self.log("  the listing at README line %d: %s" % (
                    o.line, "as shown" if not errs else "differs"))
            else:
                errs, n = compare_lines(o.lines, "\n".join(outs))
                self.log("  the output at README line %d: %d lines compared: %s"
                         % (o.line, n, "all there" if not errs else "one is missing"))
            for e in errs:
                self.fail(it.section, "README line %d: %s" % (o.line, e))

    def run_transcript(self, it):
        self.log("## %s: README line %d (a transcript%s)" % (
            it.section, it.line, "" if not it.sandbox_step else
            ", in step %s's sandbox" % it.sandbox_step))
        for c in it.cmds:
            text = c.text
            if it.sandbox_step:
                text = self.in_sandbox(it.sandbox_step, text)
                if text is None:
                    self.fail(it.section, "README line %d: step %s has no `agentsnet run "
                              "--sandbox` command to run %r in" % (c.line, it.sandbox_step,
                                                                   c.text))
                    continue
            out, _ = self.run_cmd(it.section, text, ROOT, c.line)
            if out is None:
                continue
            errs, n = compare_lines(c.expect, out)
            self.log("  its output: %d lines compared: %s" % (n, "all there" if not errs
                                                              else "one is missing"))
            for e in errs:
                self.fail(it.section, "README line %d: %s" % (c.line, e))

    def in_sandbox(self, step, cmd):
        for it in self.items:
            if it.kind != "sh" or it.section != "step " + step:
                continue
            for c in it.cmds:
                m = re.search(r"(\S*/agentsnet|\bagentsnet)\s+run\b(.*?)\s--\s", c.text, re.S)
                if not m:
                    continue
                opts = m.group(2)
                sid = re.search(r"--sandbox\s+(\S+)", opts)
                ca = re.search(r"--ca\s+(\S+)", opts)
                if not sid:
                    continue
                return "%s run --sandbox %s%s -- sh -c %s" % (
                    m.group(1), sid.group(1), " --ca " + ca.group(1) if ca else "",
                    shlex.quote(cmd))
        return None

    def edited_tree(self, it):
        """A scratch tree whose entries link to the repository's, but <it.file>: a copy
        with the yaml of <it> in place of the rule whose id is it.rule."""
        tree = os.path.join(self.tmp, "tree-" + it.section.replace(" ", "-"))
        os.mkdir(tree)
        parts = it.file.split("/")
        src_dir, dst_dir = ROOT, tree
        for depth, part in enumerate(parts):
            for entry in os.listdir(src_dir):
                if entry != part:
                    os.symlink(os.path.join(src_dir, entry), os.path.join(dst_dir, entry))
            if depth < len(parts) - 1:
                src_dir, dst_dir = os.path.join(src_dir, part), os.path.join(dst_dir, part)
                os.mkdir(dst_dir)
        with open(os.path.join(ROOT, it.file), encoding="utf-8") as f:
            lines = f.read().split("\n")
        at = [n for n, x in enumerate(lines) if re.match(r"^\s*id:\s*%s\s*$" % re.escape(it.rule),
                                                        x)]
        if len(at) != 1:
            raise ValueError("%d rules with id %s" % (len(at), it.rule))
        start = at[0]
        while start >= 0 and not re.match(r"^\s*- ", lines[start]):
            start -= 1
        if start < 0:
            raise ValueError("no list item holds id %s" % it.rule)
        ind = len(lines[start]) - len(lines[start].lstrip())
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or
                                    len(lines[end]) - len(lines[end].lstrip()) > ind):
            end += 1
        new = lines[:start] + list(it.lines) + lines[end:]
        with open(os.path.join(tree, *parts), "w", encoding="utf-8") as f:
            f.write("\n".join(new))
        self.log("  %s: lines %d-%d (rule %s) replaced by the README's %d lines"
                 % (it.file, start + 1, end, it.rule, len(it.lines)))
        return tree

    # -- step 5b's claims
    def check_hosted(self, out):
        errs = []
        got = read_text(self.hosted["log"]).splitlines()
        if not any(x.startswith("POST /compatible-mode/v1/chat/completions key=match "
                                "status=200") for x in got):
            errs.append("the hosted stand-in answered no chat completion sent with the key "
                        "(the inject tier's swap); it got: %r" % got[-10:])
        if [x for x in got if " key=match " not in x]:
            errs.append("the hosted stand-in got requests without the key: %r" % got[-10:])
        if HOSTED_REPLY not in out:
            errs.append("the harness did not print the hosted stand-in's answer %r"
                        % HOSTED_REPLY)
        key = self.key
        if key in out:
            errs.append("the key is in the harness's output")
        for path in self.audit_paths():
            text = read_text(path)
            if key in text:
                errs.append("the key is in the audit trail %s" % path)
            recs = []
            for x in text.splitlines():
                try:
                    rec = json.loads(x)
                except ValueError:
                    errs.append("%s: a line is not JSON: %r" % (path, x[:200]))
                    continue
                if isinstance(rec, dict):
                    recs.append(rec)
            host = self.hosted["host"]
            for want in ({"method": "CONNECT", "tier": "inject", "decision": "allow"},
                         {"method": "POST", "tier": "inject", "decision": "allow",
                          "path": "/compatible-mode/v1/chat/completions"}):
                if not any(r.get("event") == "decision" and r.get("host") == host and
                           all(r.get(k) == v for k, v in want.items()) for r in recs):
                    errs.append("%s has no decision %s for %s" % (path, want, host))
        b = self.bg.get(next((p for p in self.bg if p.endswith("agentsnetd")), ""))
        if b is not None and key in read_text(b.out):
            errs.append("the key is in the daemon's log")
        return errs


def one_line(text):
    text = " ".join(text.replace("\\\n", " ").split())
    return text if len(text) <= 140 else text[:137] + "..."


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid), encoding="ascii") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def stop_group(p):
    """SIGTERM, then SIGKILL, to the process group <p> leads (its PID), until no process
    of it is left (npm, for one, outlives its sh on SIGTERM)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if p.poll() is not None:
                try:
                    os.killpg(p.pid, 0)
                except ProcessLookupError:
                    return
            time.sleep(0.05)
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        pass


def node_modules_stale():
    """Why tools/deps.sh would run `npm ci` in tests/integ/node (the files it checks, read
    from it, and its lock against the install), or []."""
    with open(os.path.join(ROOT, "tools", "deps.sh"), encoding="utf-8") as f:
        wanted = re.findall(r"\$n/node_modules/([^\s\]]+)", f.read())
    errs = ["%s is missing" % os.path.join(NODE_MODULES, w) for w in wanted
            if w != ".package-lock.json" and not os.path.exists(os.path.join(NODE_MODULES, w))]
    lock = os.path.join(HERE, "node", "package-lock.json")
    installed = os.path.join(NODE_MODULES, ".package-lock.json")
    if not os.path.exists(installed) or os.path.getmtime(lock) > os.path.getmtime(installed):
        errs.append("%s is newer than what npm ci installed from it" % lock)
    # Step 1's tools/deps.sh would run `npm ci` there, which needs the registry (and
    # removes node_modules first): the pass's namespace has no way out.
    return ["%s: run tools/deps.sh (it needs the network) before the walkthrough" % e
            for e in errs]


def sockets_under(top):
    for dirpath, _dirs, files in os.walk(top):
        for f in files:
            path = os.path.join(dirpath, f)
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    yield path
            except OSError:
                pass


def users_of(top):
    """(pid, what) of each process with its working directory or an open file under <top>."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        links = ["cwd"]
        try:
            links += ["fd/" + fd for fd in os.listdir("/proc/%s/fd" % pid)]
        except OSError:
            continue
        for link in links:
            try:
                target = os.readlink("/proc/%s/%s" % (pid, link))
            except OSError:
                continue
            if target == top or target.startswith(top + "/"):
                try:
                    name = read_text("/proc/%s/comm" % pid).strip()
                except OSError:
                    name = "?"
                found.append((pid, "%s, %s %s" % (name, link, target)))
                break
    return found


class Stopped(Exception):
    pass


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-registry":
        return serve_registry(json.loads(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-hosted":
        return serve_hosted(json.loads(sys.argv[2]))

    def more(ap):
        ap.add_argument("--readme", default=README, help="the walkthrough to run (default "
                        "demo/README.md)")

    args, log = own_pass_args("agentsnet walkthrough pass (demo/README.md)", add=more)
    if os.geteuid() != 0:
        print("walkthrough: FAIL: the README's commands run as root (namespaces, /var/lib, "
              "agentsnet run)")
        return 1
    ci = os.environ.get("CI", "").lower() in ("true", "1", "yes")
    with open(args.readme, encoding="utf-8") as f:
        text = f.read()
    items = parse_readme(text)
    tmp = tempfile.mkdtemp(prefix="an-walkthrough-")
    os.chmod(tmp, 0o755)
    w = Walk(args, log, tmp, items)
    t0 = time.monotonic()

    def on_term(*_):
        raise Stopped()

    signal.signal(signal.SIGTERM, on_term)
    failed = 0
    try:
        errs = w.preflight(text)
        if errs:
            for e in errs:
                print("walkthrough: FAIL: " + e)
            shutil.rmtree(tmp, ignore_errors=True)  # nothing ran: nothing to keep
            return 1
        try:
            w.prepare_hosted()
            w.setup_ns()
            w.start_standins()
            w.run()
        except Stopped:
            w.fail("the pass", "stopped by SIGTERM (a timeout?) before its end")
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            w.fail("set-up", str(e))
        except Exception:  # noqa: BLE001  (a broken check is a failed one)
            w.fail("the pass", "the pass itself raised:\n" + traceback.format_exc())
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not cut short
        w.stop_all()
        w.teardown_ns()
        for e in w.restore():
            w.fail("system paths", e)
    allowed = allowed_ci_skips()
    for section, cmd, reason in w.skips:
        if ci and reason not in allowed:
            w.fail(section, "skipped under CI=true, which only the docstring's list allows: "
                   "%s (%s)" % (one_line(cmd), reason))
    for section in w.order:
        errs = w.results[section]
        n_skip = sum(1 for s in w.skips if s[0] == section)
        note = " (%d skipped)" % n_skip if n_skip else ""
        print("walkthrough: %s: %s%s" % (section, "ok" if not errs else "FAIL", note))
        for e in errs:
            print("  " + e)
        failed += bool(errs)
    reasons = {}
    for s in w.skips:
        reasons[s[2]] = reasons.get(s[2], 0) + 1
    print("walkthrough: %d run, %d skipped%s" % (
        w.ran, len(w.skips), " (%s)" % "; ".join("%d: %s" % (n, r) for r, n in
                                                  reasons.items()) if reasons else ""))
    log("walkthrough: %.0f s" % (time.monotonic() - t0))
    if w.ran == 0:
        print("walkthrough: FAIL: no command ran")
        failed += 1
    # Counted by section (a section passes when all it ran passed); each skipped command
    # is a skip of its own.
    print_counts("walkthrough", len(w.order) - sum(bool(w.results[x]) for x in w.order),
                 failed, [(section, reason) for section, _, reason in w.skips])
    return own_pass_end("walkthrough", tmp, failed)


if __name__ == "__main__":
    sys.exit(main())
