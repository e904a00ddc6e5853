#!/usr/bin/env python3
"""`make lint`, the include direction (docs/style.md section 1).

Reads every `#include "..."` of the C files under core/, policy/, tls/ and
tools/ and fails, naming file:line and the rule, when one breaks a rule below.
policy/ and tls/ use core/, never the reverse; policy/ and tls/ do not know
each other; nothing but tools/ includes tools/.

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
    ("core/conn.h", "core/worker.h", "a connection never calls back its worker"),
    ("core/conn.c", "core/worker.h", "a connection never calls back its worker"),
    # The spine's private header and the files of the connection modes are conn.c's parts:
    # they see the worker's types (core/worker-t.h), never its functions.
    ("core/conn_int.h", "core/worker.h", "a connection never calls back its worker"),
    ("core/tunnel.c", "core/worker.h", "a connection never calls back its worker"),
    ("core/forward.c", "core/worker.h", "a connection never calls back its worker"),
    ("core/tlsterm.c", "core/worker.h", "a connection never calls back its worker"),
    ("core/fake.c", "core/worker.h", "a connection never calls back its worker"),
    ("core/inject.c", "core/worker.h", "a connection never calls back its worker"),
    ("core/gateway.c", "core/worker.h", "a connection never calls back its worker"),
    ("core/modes.c", "core/worker.h", "a connection never calls back its worker"),
    ("core/record.c", "core/worker.h", "a connection never calls back its worker"),
)

# (includer, included, reason): includes the tree has today that break a rule.
# Each is allowed as it stands and nowhere else; one no longer present fails
# too, so that the list only shrinks. Remove an entry with the include it names.
EXCEPTIONS = ()

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# The parts of a connection, which see the worker through core/worker-t.h: they
# may use its types, never call a function of its; and worker-t.h itself, which
# declares none.
WORKER_TYPES_ONLY = ("core/worker-t.h", "core/conn_int.h", "core/conn.c", "core/tunnel.c", "core/forward.c", "core/tlsterm.c",
                     "core/fake.c", "core/inject.c", "core/gateway.c", "core/modes.c", "core/record.c")
WORKER_CALL = re.compile(r"\bworker_[a-z0-9_]+\s*\(")
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
    for src in WORKER_TYPES_ONLY:
        path = os.path.join(root, src)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            code = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), fh.read())
        for lineno, line in enumerate(code.split("\n"), 1):
            m = WORKER_CALL.search(line)
            if m:
                why = ("declares types only" if src == "core/worker-t.h"
                       else "a connection never calls back its worker")
                print(f"lint: {src}:{lineno}: {m.group(0)}: {why}")
                fail = True
    for frm, to, _ in EXCEPTIONS:
        if (frm, to) not in used:
            print(f"lint: tests/lint-deps.py: exception {frm} -> {to} no longer needed: remove it")
            fail = True
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
