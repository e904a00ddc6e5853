#!/usr/bin/env python3
"""`make lint`, the paths the tree cites: every path into this repository that a
document (README.md, the READMEs of demo/, bench/ and tests/, docs/*.md) or a
source file (C under core/, policy/, tls/, tools/, bench/; the Python tests; the
shell scripts; the Makefile and .ci/run) names exists, so that a renamed or
removed file leaves no reference behind. A module named without its extension
(core/conn, a unit suite's binary) counts when its .c or .h exists. Only files
git tracks are read, when the tree is a checkout.

A path is a word that starts with one of the tree's top directories (core/,
policy/, tls/, tools/, tests/, docs/, bench/, demo/, deploy/). Not checked: what
the build or a run makes (build products ending in .o, bench/results/ reports,
tests/integ/node/'s installed modules), a pattern (a `*`, `<`, `[`, `NNN` or `...`
in it), and a line that cites another project ("*(as ...", the style guide's
sources).

Usage: tests/lint-paths.py [ROOT]   (ROOT: the tree to check, default: this one)
Exit status: 0 clean, 1 a cited path is missing (each named with file:line).
"""
import glob
import os
import re
import subprocess
import sys

TOPS = ("core", "policy", "tls", "tools", "tests", "docs", "bench", "demo", "deploy")
PATH = re.compile(r"(?<![\w./~$-])((?:%s)/[A-Za-z0-9_./-]*[A-Za-z0-9_])" % "|".join(TOPS))
GENERATED = (re.compile(r"\.o$"), re.compile(r"^bench/results/"),
             re.compile(r"^tests/integ/node/node_modules"))
PATTERN = re.compile(r"[*<\[]|NNN|\.\.\.")


def tracked(root):
    """The files git tracks under <root>, or None outside a checkout (what a run or
    tools/deps.sh installs, such as tests/integ/node's modules, is never scanned)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return set(out.decode("utf-8", "replace").split("\0")) - {""}


def sources(root):
    names = ["README.md", "demo/README.md", "bench/README.md", "Makefile"]
    names += glob.glob("tests/**/README.md", root_dir=root, recursive=True)
    names += glob.glob("docs/*.md", root_dir=root)
    for top in ("core", "policy", "tls", "tools", "bench"):
        for ext in ("c", "h", "cc"):
            names += glob.glob("%s/**/*.%s" % (top, ext), root_dir=root, recursive=True)
    names += glob.glob("tests/**/*.py", root_dir=root, recursive=True)
    for top in ("tests", "tools", "bench", "demo", "deploy"):
        names += glob.glob("%s/**/*.sh" % top, root_dir=root, recursive=True)
    names += [".ci/run"]
    names = {n for n in names if "node_modules" not in n.split("/")}
    known = tracked(root)
    if known is not None:
        names &= known
    return sorted(n for n in names if os.path.isfile(os.path.join(root, n)))


def missing(root):
    found = []
    for name in sources(root):
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if "*(as " in line:
                    continue
                for m in PATH.finditer(line):
                    path = m.group(1).rstrip(".")
                    if PATTERN.search(line[m.start():m.end() + 2]) or \
                            any(g.search(path) for g in GENERATED):
                        continue
                    if not any(os.path.exists(os.path.join(root, path + ext))
                               for ext in ("", ".c", ".h")):
                        found.append("%s:%d: %s does not exist" % (name, n, path))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    found = missing(root)
    for line in found:
        print("lint: " + line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
