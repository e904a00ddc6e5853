#!/usr/bin/env python3
"""`make lint`, file size (docs/style.md section 1).

No file under core/, policy/ or tools/ passes FILE_LINES_MAX lines, core/http1.c
(the HTTP/1.1 parser, kept whole) aside: a file that would is split behind a
private header first. Every file of those trees counts, tracked or not, whatever
its name; a line is what any line ending ends (LF, CRLF or CR), and a last line
without one counts too.

Usage: tests/lint-size.py [ROOT]   (ROOT: the tree to check, default: this one)
Exit status: 0 clean, 1 a file over the limit (named, with its count), or no
file found at all (a wrong ROOT checks nothing).
"""
import os
import sys

FILE_LINES_MAX = 1500
TREES = ("core", "policy", "tools")
EXEMPT = ("core/http1.c",)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    fail = False
    seen = 0
    for tree in TREES:
        for top, subdirs, files in os.walk(os.path.join(root, tree)):
            subdirs.sort()
            for name in sorted(files):
                path = os.path.join(top, name)
                rel = os.path.relpath(path, root)
                with open(path, "rb") as fh:
                    lines = len(fh.read().splitlines())
                seen += 1
                if rel not in EXEMPT and lines > FILE_LINES_MAX:
                    print(f"lint: {rel}: {lines} lines, over {FILE_LINES_MAX}: split it behind "
                          "a private header (docs/style.md section 1)")
                    fail = True
    if seen == 0:
        print(f"lint: tests/lint-size.py: no file under {', '.join(TREES)} in {root}")
        fail = True
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
