#!/usr/bin/env python3
"""`make lint`, the include direction (docs/style.md section 1).

Reads every `#include "..."` of the C files under core/, policy/, tls/ and
tools/ and fails, naming file:line and the rule, when one breaks a rule below.
policy/ and tls/ use core/, never the reverse; policy/ and tls/ do not know
each other; nothing but tools/ includes tools/.

A connection never calls back its worker: the connection's parts (core/conn.h,
core/conn_int.h, and every core/ file that includes conn_int.h) include only
core/worker-t.h, never core/worker.h, and call no worker_ function. The spine
(those parts but core/modes.c and the mode files: each file that defines a
struct conn_mode or conn_front, or a function such a table names as a hook)
names no function or object that a mode's file defines: it reaches a mode
through its table. Both sets are read off the tree,
so a new part or mode is checked without a change here.

Usage: tests/lint-deps.py [ROOT]   (ROOT: the tree to check, default: this one)
Exit status: 0 clean, 1 a rule broken (or an exception no longer needed).
"""
import os
import re
import sys

DIRS = ("core", "policy", "tls", "tools")

# (includer, included, rule). A path ending in "/" is a directory prefix,
# anything else one file. The included path is resolved as the compiler would
# (relative to the includer's directory first, then to the tree's root, -I.).
RULES = (
    ("core/", "policy/", "core/ may not include policy/ (policy/ uses core/, never the reverse)"),
    ("core/", "tls/", "core/ may not include tls/ (tls/ uses core/, never the reverse)"),
    ("core/", "tools/", "core/ may not include tools/ (the programs use core/, never the reverse)"),
    ("policy/", "tls/", "policy/ may not include tls/ (the two meet only in core/'s interfaces)"),
    ("policy/", "tools/", "policy/ may not include tools/ (the programs use policy/, never the reverse)"),
    ("tls/", "policy/", "tls/ may not include policy/ (the two meet only in core/'s interfaces)"),
    ("tls/", "tools/", "tls/ may not include tools/ (the programs use tls/, never the reverse)"),
)

# (includer, included, reason): includes the tree has today that break a rule.
# Each is allowed as it stands and nowhere else; one no longer present fails
# too, so that the list only shrinks. Remove an entry with the include it names.
EXCEPTIONS = ()

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

WORKER_CALL = re.compile(r"\bworker_[a-z0-9_]+\s*\(")
WORKER_RULE = "a connection never calls back its worker (core/worker-t.h holds its types)"

# Names the spine may use although a mode's file defines them, each with its
# reason; one no longer used fails too.
SPINE_MAY_NAME = {
    "verdict_placeholder_misdirected": "the guard of every allowed request, before any mode "
                                       "starts: a placeholder leaves only towards its own rule",
}
MODE_TABLE_DEF = re.compile(r"^(?:const\s+)?struct\s+conn_(?:mode|front)\s+[A-Za-z_]\w*\s*=\s*\{(.*?)\};",
                            re.M | re.S)
HOOK = re.compile(r"\.\w+\s*=\s*([A-Za-z_]\w*)")
ATTRIBUTE = re.compile(r"__attribute__\s*\(\(.*?\)\)", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
COMMENT = re.compile(r"/\*.*?\*/", re.S)


def matches(pattern, path):
    return path.startswith(pattern) if pattern.endswith("/") else path == pattern


def resolve(root, includer, name):
    here = os.path.normpath(os.path.join(os.path.dirname(includer), name))
    if os.path.exists(os.path.join(root, here)):
        return here
    return os.path.normpath(name)


def sources(root):
    for d in DIRS:
        for top, subdirs, files in os.walk(os.path.join(root, d)):
            subdirs.sort()
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(top, f), root)


def code_of(path):
    """The file's text with its comments and literals blanked, line numbers kept."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    text = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    text = re.sub(r"//[^\n]*", "", text)
    return STRING.sub('""', text)


def conn_parts(root):
    """The connection's files: conn.h, conn_int.h, conn.c, every core/ file including conn_int.h."""
    parts = {"core/conn.h", "core/conn_int.h", "core/conn.c"}
    core = os.path.join(root, "core")
    for name in sorted(os.listdir(core)) if os.path.isdir(core) else ():
        src = "core/" + name
        if not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = INCLUDE.match(line)
                if m and resolve(root, src, m.group(1)) == "core/conn_int.h":
                    parts.add(src)
                    break
    return sorted(p for p in parts if os.path.exists(os.path.join(root, p)))


def file_scope_names(code):
    """Names that <code> (comments blanked) defines or declares at file scope, but static ones."""
    names = []
    depth = 0
    head = []
    for line in code.split("\n"):
        if depth == 0 and line.lstrip().startswith("#"):
            continue  # the preprocessor's, not a definition
        for ch in line + "\n":
            if ch == "{":
                if depth == 0:
                    names.append("".join(head))
                    head = []
                depth += 1
            elif ch == "}":
                depth -= 1
            elif depth == 0:
                if ch == ";":
                    names.append("".join(head))
                    head = []
                else:
                    head.append(ch)
    found = set()
    for text in names:
        text = ATTRIBUTE.sub(" ", text).strip()
        if not text or re.match(r"(static|typedef|extern|static_assert|_Static_assert)\b", text):
            continue
        if re.fullmatch(r"(struct|union|enum)\s+\w+", text):
            continue  # a type's definition
        cut = min([i for i in (text.find(c) for c in "([=") if i >= 0] or [len(text)])
        words = re.findall(r"[A-Za-z_]\w*", text[:cut])
        if words:
            found.add(words[-1])
    return found


def connection_rules(root):
    """True (after naming each break, file:line) when a connection's part breaks a rule above."""
    fail = False
    parts = conn_parts(root)
    # A mode's files: those that define a struct conn_mode or conn_front, and
    # those that define a function such a table names as a hook (tlsterm.c's
    # pump, which two modes share).
    codes = {p: code_of(os.path.join(root, p)) for p in parts if p.endswith(".c")}
    tables = {p: MODE_TABLE_DEF.findall(code) for p, code in codes.items()}
    hooks = {h for bodies in tables.values() for body in bodies for h in HOOK.findall(body)}
    names = {p: file_scope_names(code) for p, code in codes.items()}
    modes = sorted(p for p in codes if tables[p] or names[p] & hooks)
    defined = {}
    for src in modes:
        for name in names[src]:
            defined[name] = src
    spine = [p for p in parts if p.endswith(".c") and p not in modes and p != "core/modes.c"]
    used = set()
    for src in parts + ["core/worker-t.h"]:
        path = os.path.join(root, src)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if m and resolve(root, src, m.group(1)) == "core/worker.h":
                    print(f'lint: {src}:{lineno}: #include "{m.group(1)}": {WORKER_RULE}')
                    fail = True
        for lineno, line in enumerate(code_of(path).split("\n"), 1):
            m = WORKER_CALL.search(line)
            if m:
                why = "declares types only" if src == "core/worker-t.h" else WORKER_RULE
                print(f"lint: {src}:{lineno}: {m.group(0)}: {why}")
                fail = True
            if src not in spine:
                continue
            for word in re.findall(r"[A-Za-z_]\w*", line):
                if word not in defined:
                    continue
                if word in SPINE_MAY_NAME:
                    used.add(word)
                    continue
                print(f"lint: {src}:{lineno}: {word} ({defined[word]}): the spine names no mode; "
                      "reach it through c->mode or c->front (core/conn_int.h)")
                fail = True
    if not modes:
        print("lint: tests/lint-deps.py: no mode file found (no struct conn_mode defined in core/)")
        fail = True
    for word in SPINE_MAY_NAME:
        if word not in used:
            print(f"lint: tests/lint-deps.py: {word} no longer named by the spine: remove it")
            fail = True
    return fail


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    fail = False
    used = set()
    for src in sources(root):
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if m is None:
                    continue
                inc = resolve(root, src, m.group(1))
                for frm, to, rule in RULES:
                    if not (matches(frm, src) and matches(to, inc)):
                        continue
                    exc = [e for e in EXCEPTIONS if e[0] == src and e[1] == inc]
                    if exc:
                        used.add(exc[0][:2])
                        continue
                    print(f'lint: {src}:{lineno}: #include "{m.group(1)}": {rule}')
                    fail = True
    fail |= connection_rules(root)
    for frm, to, _ in EXCEPTIONS:
        if (frm, to) not in used:
            print(f"lint: tests/lint-deps.py: exception {frm} -> {to} no longer needed: remove it")
            fail = True
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
