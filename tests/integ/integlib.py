"""Shared pieces of the integration passes (integ.py, sandbox.py, ingress.py).

Processes, network namespaces, the test PKI (openssl CLI), templates, the
upstream fixtures (origin.py and agentsnetd in the upstream namespace) and
the audit file. Everything stays on loopback: the namespaces made here have
only `lo`.
"""

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer",
                   "assertion failed")
SKIP = 77


class Skip(Exception):
    pass


class Fatal(Exception):
    pass


def log(msg):
    print(msg, flush=True)


def run(cmd, **kw):
    kw.setdefault("check", True)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(cmd, **kw)


def client_env(tmp, extra=None):
    """A clean environment: no proxy variables inherited from the host."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


def daemon_env():
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    return env


# ---- fixtures ---------------------------------------------------------------


EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_pki(tmp, names=("origin.test",)):
    """Test CA and a leaf for <names>, with the openssl CLI."""
    ca_key, ca_pem = os.path.join(tmp, "ca.key"), os.path.join(tmp, "ca.pem")
    run(["openssl", "req", "-x509", *EC_KEY, "-keyout", ca_key, "-out", ca_pem, "-days", "2",
         "-subj", "/CN=agentsnet integ test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    leaf_pem, leaf_key = make_leaf(tmp, "leaf", ca_pem, ca_key, names)
    return ca_pem, leaf_pem, leaf_key


def make_leaf(tmp, stem, ca_pem, ca_key, names):
    """A server leaf for <names> signed by <ca_pem>/<ca_key>: tmp/<stem>.pem and .key."""
    leaf_key, leaf_pem = os.path.join(tmp, stem + ".key"), os.path.join(tmp, stem + ".pem")
    csr, ext = os.path.join(tmp, stem + ".csr"), os.path.join(tmp, stem + ".ext")
    run(["openssl", "req", *EC_KEY, "-keyout", leaf_key, "-out", csr, "-subj", "/CN=" + names[0]])
    with open(ext, "w", encoding="ascii") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=%s\n"
                "authorityKeyIdentifier=keyid\n"
                "subjectKeyIdentifier=hash\n" % ",".join("DNS:" + n for n in names))
    run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key,
         "-CAcreateserial", "-out", leaf_pem, "-days", "2", "-extfile", ext])
    return leaf_pem, leaf_key


# ---- templates --------------------------------------------------------------

PLACEHOLDER = re.compile(r"\{\{([a-z0-9_]+)\}\}")


def substitute(obj, vars_):
    """Replaces {{name}} in every string of <obj>, keys included; "{{n}}" alone keeps
    n's type (in a value)."""
    if isinstance(obj, str):
        whole = PLACEHOLDER.fullmatch(obj)
        if whole:
            return vars_[whole.group(1)]
        return PLACEHOLDER.sub(lambda m: str(vars_[m.group(1)]), obj)
    if isinstance(obj, list):
        return [substitute(x, vars_) for x in obj]
    if isinstance(obj, dict):
        return {PLACEHOLDER.sub(lambda m: str(vars_[m.group(1)]), k): substitute(v, vars_)
                for k, v in obj.items()}
    return obj


def render_file(src, dst, vars_):
    """Copies <src> to <dst> with every {{name}} replaced from <vars_>."""
    with open(src, encoding="utf-8") as f:
        text = f.read()
    text = PLACEHOLDER.sub(lambda m: str(vars_[m.group(1)]), text)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)


# ---- processes and namespaces -----------------------------------------------


class Procs:
    """Every process the suite starts, stopped by PID at the end."""

    def __init__(self):
        self.procs = []

    def start(self, name, cmd, **kw):
        p = subprocess.Popen(cmd, **kw)
        self.procs.append((name, p))
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def stop_all(self):
        for _name, p in reversed(self.procs):
            self.stop(p)


def netns_add(name):
    run(["ip", "netns", "add", name])
    run(["ip", "-n", name, "link", "set", "lo", "up"])
    links = run(["ip", "-n", name, "-o", "link", "show"]).stdout.decode()
    if [line.split(":")[1].strip() for line in links.splitlines()] != ["lo"]:
        raise Fatal("namespace %s has interfaces other than lo:\n%s" % (name, links))


def netns_del(name):
    subprocess.run(["ip", "netns", "del", name], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise Fatal("timed out after %ds waiting for %s" % (timeout, what))


def read_head(sock):
    """What <sock> sends up to and with the end of a head (CRLF CRLF), or until it ends:
    the bytes read (a few past the head, if they came in the same read)."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        if not chunk:
            break
        head += chunk
    return head


def tcp_exchange(port, request, timeout=20):
    """<request> to 127.0.0.1:<port>: every byte of the answer, up to the connection's end."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def upload_then_leave(sock, pause_s=0.3):
    """Sends a body on <sock> (its head already sent) until the daemon, held back by a slow
    upstream, stops taking it (a send blocks 0.5 s), waits <pause_s>, and closes <sock>, as
    an agent that abandons its upload. Returns (bytes sent, time.monotonic() of the close)."""
    sock.settimeout(0.5)
    sent = 0
    try:
        while sent < 8 << 20:
            sent += sock.send(b"x" * 16384)
    except (socket.timeout, ssl.SSLWantWriteError, BlockingIOError):
        pass
    time.sleep(pause_s)
    left = time.monotonic()
    sock.close()
    return sent, left


def scrape(port, method="GET", path="/metrics"):
    """(status, head, body) of <method> <path> on the metrics listener."""
    data = tcp_exchange(port, b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                        % (method.encode(), path.encode()))
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head.decode("latin-1"), body.decode()


def series(body):
    """{'name{labels}': value} of an exposition."""
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def read_text(path):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def sanitizer_marks(text):
    return [m for m in SANITIZER_MARKS if m in text]


def own_pass_args(description, add=None, tests=False):
    """The options of a pass that starts daemons of its own (fairness.py, faults.py,
    service.py): --daemon, --netns (given by run.sh; unused: loopback only) and -v; with
    <tests>, --tests NAME... (run only these); and what <add>(parser) adds. Returns
    (args, log), log printing only under -v."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--daemon", default=os.path.join(ROOT, "build", "san", "agentsnetd"))
    ap.add_argument("--netns", default=None, help="accepted for run.sh; unused")
    ap.add_argument("-v", action="store_true")
    if tests:
        ap.add_argument("--tests", nargs="*", default=None, help="run only these (by name)")
    if add is not None:
        add(ap)
    args = ap.parse_args()
    return args, (print if args.v else (lambda *_: None))


def print_counts(label, passed, failed, skipped=()):
    """Prints a pass's closing counts, "<label>: P passed, F failed, S skipped", with each
    skip's reason after it: run.sh reads that line of every pass into make check's summary
    and fails a pass that ends without one. <skipped>: (what, why) pairs."""
    reasons = "; ".join("%s: %s" % s for s in skipped)
    print("%s: %d passed, %d failed, %d skipped%s" % (
        label, passed, failed, len(skipped), " (%s)" % reasons if reasons else ""), flush=True)


def skip_pass(label, why):
    """A whole pass that cannot run here, for <why>: its "SKIP:" line (the reason run.sh
    reports) and its counts, one skipped. Returns SKIP, the exit status run.sh counts as a
    skip (a failure under CI)."""
    print("%s: SKIP: %s" % (label, why))
    print_counts(label, 0, 0, [(label, why)])
    return SKIP


def own_pass_end(label, tmp, failed):
    """A pass's end: its directory <tmp> removed when nothing failed, else kept and named.
    Returns its exit code."""
    if failed == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("%s: kept %s" % (label, tmp))
    return 1 if failed else 0


def with_daemon(label, cmd, err_path, body, preexec_fn=None, started=None):
    """Runs <cmd> (an agentsnetd), its stdout and stderr to <err_path>, waits for its ready
    line, calls started(its Popen), when given, then body() (which returns how many of its
    checks failed), then stops it with SIGTERM (SIGKILL after 30 s), unless it ended. Returns body's count, plus 1 when the daemon exited
    non-zero or its stderr holds a sanitizer report ("<label>: daemon: FAIL", printed)."""
    with open(err_path, "wb") as err:
        daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                  preexec_fn=preexec_fn)
    failed = 0
    try:
        wait_for(lambda: "agentsnetd: ready" in read_text(err_path) or
                 daemon.poll() is not None, 30, "agentsnetd: ready")
        if daemon.poll() is not None:
            raise Fatal("agentsnetd exited: " + read_text(err_path)[-3000:])
        if started is not None:
            started(daemon)
        failed += body()
    finally:
        code, _ = terminate(daemon, 30)
    text = read_text(err_path)
    if code != 0 or sanitizer_marks(text):
        print("%s: daemon: FAIL: exit %d, stderr:\n%s" % (label, code, text[-4000:]))
        failed += 1
    return failed


# ---- the upstream side: origin.py and agentsnetd ----------------------------


def start_origin(procs, upns, fixture_dir, leaf_pem, leaf_key, model_secret_file=None):
    """origin.py in namespace <upns>; returns {"https_port", "http_port"}. With
    <model_secret_file>, its model API stand-in answers that key (origin.py)."""
    argv = ["ip", "netns", "exec", upns, "python3", os.path.join(HERE, "origin.py"),
            "--dir", fixture_dir, "--cert", leaf_pem, "--key", leaf_key]
    if model_secret_file is not None:
        argv += ["--model-secret-file", model_secret_file]
    p = procs.start("origin", argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = p.stdout.readline()
    if not line:
        raise Fatal("origin.py exited before listening")
    return json.loads(line)


def free_ports(upns):
    """A TCP and a UDP port nothing listens on in namespace <upns> (ours alone)."""
    code = ("import socket\n"
            "t = socket.socket(); t.bind(('127.0.0.1', 0))\n"
            "u = socket.socket(type=socket.SOCK_DGRAM); u.bind(('127.0.0.1', 0))\n"
            "print(t.getsockname()[1], u.getsockname()[1])\n")
    out = run(["ip", "netns", "exec", upns, "python3", "-c", code]).stdout.split()
    return int(out[0]), int(out[1])


def spawn_daemon(procs, upns, daemon, policy, err_path, extra_env=None, args=(), mode="ab"):
    """agentsnetd --config <policy> <args> in namespace <upns>, stdout and stderr to
    <err_path> (opened with <mode>: appended by default); returns at once."""
    env = daemon_env()
    env.update(extra_env or {})
    with open(err_path, mode) as err:
        return procs.start("agentsnetd", ["ip", "netns", "exec", upns, daemon, "--config", policy,
                                          *args],
                           stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env)


def start_daemon(procs, upns, daemon, policy, err_path, extra_env=None, args=()):
    """agentsnetd --config <policy> <args> in namespace <upns>, stderr (appended) to
    <err_path>; returns once it printed "agentsnetd: ready"."""
    start = os.path.getsize(err_path) if os.path.exists(err_path) else 0
    p = spawn_daemon(procs, upns, daemon, policy, err_path, extra_env, args)
    since = lambda: read_text(err_path)[start:]  # noqa: E731
    try:
        wait_for(lambda: "agentsnetd: ready" in since() or p.poll() is not None,
                 READY_TIMEOUT_S, "agentsnetd: ready")
    except Fatal:
        raise Fatal("agentsnetd not ready; stderr:\n" + since()[-4000:])
    if p.poll() is not None:
        raise Fatal("agentsnetd %sexited %d at start; stderr:\n%s" % (
            "".join(a + " " for a in args), p.returncode, since()[-4000:]))
    return p


def stop_daemon(daemon, err_path):
    """SIGTERM; returns the problems: a non-zero exit, a hang, a sanitizer report."""
    errs = []
    code, killed = terminate(daemon, STOP_TIMEOUT_S)
    if killed:
        errs.append("did not exit within %ds of SIGTERM" % STOP_TIMEOUT_S)
    if code != 0:
        errs.append("exit status %d, want 0" % code)
    text = read_text(err_path)
    for mark in sanitizer_marks(text):
        errs.append("stderr contains %r" % mark)
    if errs:
        errs.append("stderr (last 6000 bytes):\n" + text[-6000:])
    return errs


# ---- the audit file ---------------------------------------------------------


def control_exchange(path, data, timeout=10):
    """The daemon's whole answer (bytes) to <data>, a request line with its newline, on the
    control socket at <path>. The daemon reads at most a line's bytes and closes: a longer
    send may meet the reset of that close, after which the answer already queued is still
    read. A connect that fails raises OSError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        try:
            s.sendall(data)
        except OSError:
            pass
        return recv_all(s)


def recv_all(sock):
    """Every byte <sock> sends until its end: an EOF, or an error (a reset, a timeout),
    after which what came before it is still the answer."""
    got = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError:
            return got
        if not chunk:
            return got
        got += chunk


def terminate(proc, grace_s):
    """Stops <proc> unless it has ended: SIGTERM, then SIGKILL once <grace_s> have passed.
    Returns (its exit status, whether it had to be killed)."""
    if proc.poll() is not None:
        return proc.returncode, False
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(grace_s), False
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(), True


def read_audit(path):
    """Returns (records, errors): one record per JSON line."""
    records, errs = [], []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            errs.append("line %d is not JSON: %r" % (n, line[:200]))
    return records, errs


AUDIT_OPS = ("min", "present", "contains")


def audit_want_errors(want):
    """What is wrong with one audit expectation ({field: value, or {"min": n},
    {"present": true} or {"contains": s}}): a key that would match every record, or
    an empty one. [] when it is sound."""
    if not isinstance(want, dict) or not want:
        return ["audit expectation %r: want a non-empty object of record fields"
                % (want,)]
    errs = []
    for key, value in want.items():
        if not isinstance(value, dict):
            continue
        if not value:
            errs.append("audit field %r: an empty operator object matches every record"
                        % key)
        for op in value:
            if op not in AUDIT_OPS:
                errs.append("audit field %r: unknown operator %r (known: %s)"
                            % (key, op, ", ".join(AUDIT_OPS)))
        if "present" in value and value["present"] is not True:
            errs.append("audit field %r: \"present\" must be true, not %r"
                        % (key, value["present"]))
    return errs


def audit_match(rec, want):
    """Whether record <rec> meets <want>: each key equal, or {"min": n}, {"present":
    true}, {"contains": s}. An expectation audit_want_errors finds fault with raises
    ValueError: an unknown operator would otherwise match every record."""
    errs = audit_want_errors(want)
    if errs:
        raise ValueError("; ".join(errs))
    for key, value in want.items():
        got = rec.get(key)
        if isinstance(value, dict):
            if "min" in value and not (isinstance(got, int) and got >= value["min"]):
                return False
            if value.get("present") and got in (None, ""):
                return False
            if "contains" in value and not (isinstance(got, str) and
                                            value["contains"] in got.lower()):
                return False
        elif got != value:
            return False
    return True


# ---- the shape the suites' main() share -------------------------------------------

def add_binary_args(ap):
    """--daemon, --agentsnet and --bridge: the binaries a pass runs, the sanitized build's
    by default (resolve_binary_args makes them absolute)."""
    san = os.path.join(ROOT, "build", "san")
    for opt, name in (("--daemon", "agentsnetd"), ("--agentsnet", "agentsnet"),
                      ("--bridge", "agentsnet-bridge")):
        ap.add_argument(opt, default=os.path.join(san, name))


def resolve_binary_args(args, more=()):
    """Makes the paths of add_binary_args (and the options <more>) absolute, and names
    the upstream namespace: args.upns is --netns with "-up"."""
    for k in ("daemon", "agentsnet", "bridge", *more):
        setattr(args, k, os.path.abspath(getattr(args, k)))
    args.upns = args.netns + "-up"


# Who may write the agents' directories of a pass (agent_dir): the uid of nobody (the agent
# of a root caller, and the unprivileged caller) and the group of `--user 4242:4243`.
AGENT_DIR_OWNER = (65534, 4243)


def pass_tmp(prefix):
    """A new directory for a pass's files, readable by all (the unprivileged callers read
    what is put there). Under /var/lib, not /tmp or /var/tmp: sandboxes get private,
    empty instances of every world-writable directory, and the agents write files here
    (namespace ids, sync flags) that the suite reads on the host."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir="/var/lib")
    os.chmod(tmp, 0o755)
    return tmp


def agent_dir(path):
    """A directory the agents of a pass write in: theirs (AGENT_DIR_OWNER, 0770), never
    world-writable, since a world-writable directory shared with the host is exactly what
    a sandbox must not have (`agentsnet selftest` reports one as OPEN)."""
    os.mkdir(path)
    os.chown(path, *AGENT_DIR_OWNER)
    os.chmod(path, 0o770)


def add_run_args(ap, netns_help):
    """The options integ.py, sandbox.py and ingress.py all take."""
    ap.add_argument("--netns", default="agentsnet-it-%d" % os.getpid(), help=netns_help)
    ap.add_argument("--cases", default=None, help="glob of case names to run")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("-v", "--verbose", action="store_true")


def ci():
    """Whether this is a CI run (the CI variable set, as CI services and .ci/run set it):
    there a check that cannot run is a failure, unless the pass's documented list of
    skips names it."""
    return os.environ.get("CI", "") not in ("", "0", "false")


def checked_preflight(name, preflight, args):
    """preflight(args): None to go on, else the exit status (SKIP or 1), the reason logged.
    Under CI (ci()) a Skip is a failure: CI installs every tool (tools/deps.sh) and runs
    as root, so a pass that cannot run there is broken, not optional."""
    try:
        preflight(args)
    except Skip as e:
        if ci():
            log("%s: FAIL: skipped under CI=true, where a pass must run: %s" % (name, e))
            print_counts(name, 0, 1)
            return 1
        return skip_pass(name, str(e))
    except Fatal as e:
        log("%s: FAIL: %s" % (name, e))
        print_counts(name, 0, 1)
        return 1
    return None


def check_errs(fn):
    """fn()'s problems: what it returns; a Fatal it raises is one, and so is any other
    exception (with its traceback: a broken check is a failed one, not a lost pass)."""
    try:
        return fn()
    except Fatal as e:
        return [str(e)]
    except Exception:  # noqa: BLE001
        return ["the check itself raised:\n" + traceback.format_exc()]


def run_tests(t, names, needs_daemon=lambda name: True):
    """t.t_<name>() for each of <names> in turn; once agentsnetd (t.daemon, its stderr in
    t.daemon_err) is gone, a test for which needs_daemon(name) holds fails unrun."""
    for name in names:
        if needs_daemon(name) and (t.daemon is None or t.daemon.poll() is not None):
            t.result(name, ["not run: agentsnetd is gone; stderr:\n" +
                            read_text(t.daemon_err)[-3000:]])
            continue
        getattr(t, "t_" + name)()


def run_and_tally(name, suite, args, body, cleanup=None):
    """Runs body() for <suite> (with .passed, .failed and .tmp, and .skipped, a list of
    (check, reason), when it has one): a set-up failure counts as one failed test,
    cleanup() always runs, .tmp is kept with --keep (or on a failure with -v) and removed
    otherwise. Returns the exit status, the tally logged: 1 on a failure, else SKIP (77)
    when a check was skipped (a "SKIP:" line naming each, which run.sh reports), else 0."""
    try:
        body()
    except Fatal as e:
        log("not ok - set-up: %s" % e)
        suite.failed += 1
    except subprocess.CalledProcessError as e:
        log("not ok - set-up: %s: %s" % (" ".join(e.cmd), (e.stderr or b"").decode()[-2000:]))
        suite.failed += 1
    finally:
        if cleanup is not None:
            cleanup()
        if args.keep or (suite.failed and args.verbose):
            log("# kept %s" % suite.tmp)
        else:
            shutil.rmtree(suite.tmp, ignore_errors=True)
    skipped = getattr(suite, "skipped", [])
    if suite.failed == 0 and suite.passed == 0:
        log("%s: nothing ran%s" % (name, " (%d skipped)" % len(skipped) if skipped else ""))
        return 1
    print_counts(name, suite.passed, suite.failed, skipped)
    if skipped and not suite.failed:
        # Not a pass: run.sh counts the pass as skipped, with this line as its reason.
        log("%s: SKIP: %d check%s not run: %s" % (name, len(skipped), "s" * (len(skipped) > 1),
                                                  "; ".join("%s: %s" % s for s in skipped)))
        return SKIP
    return 1 if suite.failed else 0


def case_key_errors(path, case, case_keys, expect_keys, expect_field="expect",
                    each_field=None):
    """Why the case file <path> must be refused, naming the file and the key: a key the
    harness does not know (<case_keys>, besides "name"), no expectation at all (neither
    <expect_field> nor <each_field> with a non-empty object), an expectation key outside
    <expect_keys>, or an audit expectation that would match every record. A case with
    nothing to hold its result to passes on anything, and an unknown key is a check
    silently not made."""
    where = os.path.relpath(path, ROOT)
    errs = ["%s: unknown key %r" % (where, k) for k in case
            if k != "name" and k not in case_keys]
    wants = []
    if each_field is not None and each_field in case:
        if expect_field in case:
            errs.append("%s: both %r and %r: one of them would be ignored"
                        % (where, expect_field, each_field))
        wants = case[each_field]
        if not isinstance(wants, list) or not wants:
            errs.append("%s: %r must be a non-empty list" % (where, each_field))
            wants = []
    elif expect_field in case:
        wants = [case[expect_field]]
    else:
        errs.append("%s: no expectation (%r%s): it would pass on anything"
                    % (where, expect_field, " or %r" % each_field if each_field else ""))
    for i, want in enumerate(wants):
        label = "%s[%d]" % (each_field, i) if each_field in case else expect_field
        if not isinstance(want, dict) or not want:
            errs.append("%s: %s is %r: an empty expectation passes on anything"
                        % (where, label, want))
            continue
        errs += ["%s: %s: unknown expectation key %r" % (where, label, k) for k in want
                 if k not in expect_keys]
    audit = case.get("audit", [])
    if not isinstance(audit, list):
        errs.append("%s: \"audit\" must be a list of records" % where)
        audit = []
    for want in audit:
        errs += ["%s: audit: %s" % (where, e) for e in audit_want_errors(want)]
    return errs


def load_cases(case_dir, pattern):
    """The JSON cases in <case_dir>, in file-name order, each named after its file; only
    those matching the glob <pattern> when it is set."""
    cases = []
    for fname in sorted(os.listdir(case_dir)):
        if not fname.endswith(".json"):
            continue
        with open(os.path.join(case_dir, fname), encoding="utf-8") as f:
            case = json.load(f)
        case["name"] = fname[: -len(".json")]
        if pattern and not fnmatch.fnmatch(case["name"], pattern):
            continue
        cases.append(case)
    return cases


def client_hello(server_name):
    """The first flight Python's TLS client (OpenSSL) sends for <server_name> (None: no
    server name): a ClientHello record, as bytes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()
