"""The docs' samples pass: every sample output the documents show is checked against what
the daemon and the CLI print today.

The samples are found, not listed: every JSON object in a ```json block or on a line of
its own that starts with {"ts" (README.md, demo/README.md, docs/*.md), and every
transcript, a ``` block whose first line is "$ agentsnet ...". A sample this pass cannot
check fails the pass, so a new one is checked or the pass is taught how.

  - audit records (an "event" key): the keys, in order, are those of a record of the
    same event the daemon wrote in this pass (decision, close, notice, alert), and the
    values of "event", "tier", "decision" and "reason" are ones the daemon writes;
  - refusal bodies (a "reason" and an "audit_id", no "event"): the keys, in order, are
    those of the body the daemon answered a refused request with;
  - `agentsnet check ...` transcripts: run again with a policy file built from what the
    sample names (the embedded default for a bare `check`), every line but the first
    ("policy: ...", where the policy came from) equal, and the first naming the same kind
    of source;
  - `agentsnet sandbox ls`: the header line equal, and each sample row as many columns.

The daemon runs on loopback with a policy of its own: sandbox agent-1, a local rule to a
loopback origin, refused names enough to raise a refused_names alert.

Runs as its own pass: python3 tests/integ/docsamples.py [--daemon PATH] -v (--netns,
given by tests/integ/run.sh, is accepted and unused).
"""

import glob
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading

from fairness import egress, served
from integlib import (own_pass_args, own_pass_end, print_counts, read_audit, wait_for,
                      with_daemon, Fatal)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "demo", "README.md")] + \
    sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
# Values a sample may show for these keys: the daemon's own (docs/audit.md, docs/reasons.md).
AUDIT_ENUMS = {"event": None, "tier": None, "decision": ("allow", "deny"), "reason": None}
REFUSED_NAMES = 12  # over the refused_names detector's default of 10 (docs/alerts.md)

POLICY = """version: 1
daemon:
  socket_dir: {sock_dir}
  audit_log: {audit}
  workers: 1
resolver:
  servers: ["127.0.0.1:9"]
profiles:
  agents:
    rules:
      - {{id: local-model, host: model.internal, tier: local, upstream: "127.0.0.1:{port}",
         owner: tests, reason: loopback origin}}
sandboxes:
  - {{id: agent-1, profile: agents}}
"""


class Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


def samples():
    """[(file, line, kind, value)]: kind "json" (a parsed object) or "transcript" (the
    block's lines), from every document."""
    found = []
    for path in DOCS:
        text = open(path, encoding="utf-8").read()
        rel = os.path.relpath(path, ROOT)
        # A fence may be indented (a sample inside a list item): its body is dedented.
        for m in re.finditer(r"^([ \t]*)```(\w*)\n(.*?)^[ \t]*```", text, re.S | re.M):
            line = text.count("\n", 0, m.start()) + 2
            lang = m.group(2)
            body = textwrap.dedent(m.group(3)) if m.group(1) else m.group(3)
            if lang == "json":
                found.append((rel, line, "json", body))
            elif body.startswith("$ agentsnet"):
                found.append((rel, line, "transcript", body.splitlines()))
            else:
                for n, row in enumerate(body.splitlines()):
                    if row.lstrip().startswith('{"ts"'):
                        found.append((rel, line + n, "json", row.strip()))
        for n, row in enumerate(text.splitlines(), 1):
            if row.lstrip().startswith('{"ts"'):
                found.append((rel, n, "json", row.strip()))
    seen, out = set(), []
    for rel, line, kind, value in found:
        if (rel, line) in seen:
            continue
        seen.add((rel, line))
        if kind == "json":
            try:
                value = json.loads(value)
            except ValueError as e:
                value = e
        out.append((rel, line, kind, value))
    return out


def keys_of(doc):
    return list(doc.keys())


def check_json(where, doc, real, body_keys):
    """Errors of one JSON sample against the daemon's records <real> ({event: [keys
    lists]}, {key: values seen}) and its refusal body's keys <body_keys>."""
    if isinstance(doc, Exception):
        return ["%s: not JSON: %s" % (where, doc)]
    if "event" in doc:
        shapes, values = real
        lists = shapes.get(doc["event"])
        if not lists:
            return ["%s: an audit record of event %r, which this pass's daemon never wrote "
                    "(teach the pass to make one)" % (where, doc["event"])]
        errs = []
        if keys_of(doc) not in lists:
            errs.append("%s: %s record keys %r; the daemon writes %r" % (
                where, doc["event"], keys_of(doc), lists[0]))
        for key, allowed in AUDIT_ENUMS.items():
            if key in doc and doc[key] is not None:
                known = allowed or values.get(key, set()) | KNOWN_VALUES.get(key, set())
                if doc[key] not in known:
                    errs.append("%s: %s %r is none the daemon writes" % (where, key, doc[key]))
        return errs
    if "reason" in doc and "audit_id" in doc:
        if keys_of(doc) != body_keys:
            return ["%s: refusal body keys %r; the daemon answers %r" % (
                where, keys_of(doc), body_keys)]
        return []
    return ["%s: a JSON sample this pass cannot place (neither an audit record nor a "
            "refusal body): %r" % (where, keys_of(doc))]


def code_values(source, pattern):
    text = open(os.path.join(ROOT, source), encoding="utf-8").read()
    return set(re.findall(pattern, text))


# The audit's enumerations, as the code spells them: reasons (core/reason.c), events
# (core/audit.c); the tiers, as docs/audit.md lists them.
KNOWN_VALUES = {
    "reason": code_values("core/reason.c", r'\] = \{ "([a-z_]+)"'),
    "event": code_values("core/audit.c", r'\] = "([a-z_]+)"'),
    "tier": {"deny", "fake", "local", "inject", "passthrough"},
}


def check_transcript(where, lines, tmp, args, sock_dir):
    """Errors of one `$ agentsnet ...` transcript, run again."""
    cmd = lines[0][2:].split()
    want = lines[1:]
    cli = os.path.join(os.path.dirname(args.daemon), "agentsnet")
    if cmd[:2] == ["agentsnet", "check"]:
        return check_check(where, cmd, want, tmp, cli)
    if cmd[:3] == ["agentsnet", "sandbox", "ls"]:
        got = subprocess.run([cli, "sandbox", "ls", "--socket-dir", sock_dir],
                             capture_output=True, text=True, timeout=30)
        out = got.stdout.splitlines()
        errs = []
        if got.returncode != 0 or not out or out[0] != want[0]:
            errs.append("%s: sandbox ls header %r; the CLI prints %r (exit %d)" % (
                where, want[0], out[:1], got.returncode))
        columns = len(want[0].split())
        for row in want[1:] + out[1:]:
            if len(row.split()) != columns:
                errs.append("%s: sandbox ls row %r: not %d columns" % (where, row, columns))
        return errs
    return ["%s: a transcript this pass cannot run: %r (teach the pass)" % (where, lines[0])]


def check_check(where, cmd, want, tmp, cli):
    """`agentsnet check` again: a policy file made from what the transcript names (the
    sample's profile, rule, tier and resolver.hosts address), or, with no profile other
    than default named, the embedded default with no daemon."""
    fields = dict(line.split(": ", 1) for line in want if ": " in line)
    url = cmd[-1]
    host = re.match(r"https?://([^/:]+)", url).group(1)
    if fields.get("profile", "default") != "default" or "address" in fields:
        address = re.match(r"([0-9a-f.:]+) \(resolver\.hosts", fields.get("address", ""))
        sandbox = cmd[cmd.index("--sandbox") + 1] if "--sandbox" in cmd else None
        policy = os.path.join(tmp, "check-%d.yaml" % len(os.listdir(tmp)))
        with open(policy, "w", encoding="utf-8") as f:
            f.write("version: 1\n")
            if address:
                f.write("resolver:\n  hosts:\n    %s: [\"%s\"]\n" % (host, address.group(1)))
            f.write("profiles:\n  %s:\n    rules:\n      - {id: %s, host: %s, tier: %s, "
                    "owner: docs, reason: the sample}\n" % (
                        fields["profile"], fields["rule"], host, fields["tier"]))
            if sandbox:
                f.write("sandboxes:\n  - {id: %s, profile: %s}\n" % (sandbox, fields["profile"]))
        argv = [cli, "check", "--config", policy] + cmd[2:]
    else:
        argv = [cli, "check", "--socket-dir", os.path.join(tmp, "no-daemon")] + cmd[2:]
    got = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    out = got.stdout.splitlines()
    errs = []
    if out[1:] != want[1:]:
        errs.append("%s: %s printed\n    %s\n  the sample says\n    %s" % (
            where, " ".join(cmd), "\n    ".join(out[1:]), "\n    ".join(want[1:])))
    if not out or not want[0].startswith("policy: ") or \
            ("embedded default" in want[0]) != ("embedded default" in out[0]):
        errs.append("%s: the policy line %r; the CLI prints %r" % (where, want[0], out[:1]))
    return errs


def main():
    args, log = own_pass_args("agentsnet docs' samples pass")
    tmp = tempfile.mkdtemp(prefix="an-docsamples-")
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    sock_dir, audit = os.path.join(tmp, "run"), os.path.join(tmp, "audit.jsonl")
    policy = os.path.join(tmp, "policy.yaml")
    with open(policy, "w", encoding="utf-8") as f:
        f.write(POLICY.format(sock_dir=sock_dir, audit=audit, port=origin.server_address[1]))
    found = samples()
    if not found:
        print("docsamples: FAIL: no sample found in %d documents" % len(DOCS))
        return 1
    state = {}
    wrong = set()  # the samples found wrong, by file:line

    def body():
        sock = egress(sock_dir, "agent-1")
        state["allowed"] = served(sock)
        refused = served(sock, b"example.net")
        state["refused"] = refused
        for i in range(REFUSED_NAMES):
            served(sock, b"x%02d.exfil.example" % i)
        wait_for(lambda: any(r.get("event") == "alert" for r in read_audit(audit)[0]), 10,
                 "the refused_names alert")
        errs = []
        for rel, line, kind, value in found:
            if kind == "transcript":
                these = check_transcript("%s:%d" % (rel, line), value, tmp, args, sock_dir)
                errs += these
                if these:
                    wrong.add("%s:%d" % (rel, line))
        state["cli_errs"] = errs
        return 0

    try:
        failed = with_daemon("docsamples", [args.daemon, "--config", policy],
                             os.path.join(tmp, "daemon.stderr"), body)
        if failed:
            raise Fatal("the daemon failed")
        records, errs = read_audit(audit)
        shapes, values = {}, {}
        for r in records:
            lists = shapes.setdefault(r.get("event"), [])
            if keys_of(r) not in lists:
                lists.append(keys_of(r))
            for key in AUDIT_ENUMS:
                if key in r:
                    values.setdefault(key, set()).add(r[key])
        head, _, rest = state["refused"].partition(b"\r\n\r\n")
        if b" 403 " not in head.split(b"\r\n")[0]:
            raise Fatal("the refused request was answered %r" % head[:80])
        body_keys = keys_of(json.loads(rest))
        errs += state["cli_errs"]
        checked = 0
        for rel, line, kind, value in found:
            if kind == "json":
                these = check_json("%s:%d" % (rel, line), value, (shapes, values), body_keys)
                errs += these
                if these:
                    wrong.add("%s:%d" % (rel, line))
            checked += 1
        log("docsamples: %d samples checked (%d JSON, %d transcripts) in %d documents" % (
            checked, sum(1 for s in found if s[2] == "json"),
            sum(1 for s in found if s[2] == "transcript"), len(DOCS)))
    except Fatal as e:
        errs = [str(e)]
        wrong = None  # the pass itself failed: no sample's count means anything
    finally:
        origin.shutdown()
    for e in errs:
        print("docsamples: FAIL: " + e)
    if not errs:
        print("docsamples: ok: %d samples, every one as the daemon and the CLI print it"
              % len(found))
    if wrong is None:  # a fault of the pass itself (the daemon, the requests)
        print_counts("docsamples", 0, 1)
    else:
        # An error outside the samples (the audit unreadable) is a failure of its own.
        print_counts("docsamples", len(found) - len(wrong),
                     max(len(wrong), 1 if errs else 0))
    return own_pass_end("docsamples", tmp, len(errs))


if __name__ == "__main__":
    sys.exit(main())
