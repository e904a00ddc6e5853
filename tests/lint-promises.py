#!/usr/bin/env python3
"""`make lint`, the promises table: docs/testing.md's section "Promises" maps every
promise README.md and docs/*.md make to the tests that check it, one table per document
(a `### <document>` heading over it). Each row's test cell is a list of references in
backquotes, separated by commas:

  integ/<pass>.py:<function>    a t_ or check_ function of tests/integ/<pass>.py that the
                                pass runs: its short name in TESTS (sandbox.py,
                                ingress.py; containment.py's and hostboundary.py's in
                                sandbox.py's), else referenced in its file besides its def
  integ/<pass>.py               a pass as a whole
  integ/cases/<name>.json, integ/sandbox-cases/<name>.json
                                a case file, valid JSON
  adversarial/<group>/<id>      a case of tests/adversarial/cases/<group>.json, neither
                                pending nor skipped
  unit/<dir>/<file>.c:<test>    a START_TEST(<test>) of tests/unit/<dir>/<file>.c that a
                                tcase_add_test call adds to its suite
  fuzz/<driver>                 tests/fuzz/<driver>.c
  bench:<scenario>              a scenario of bench/bench.py's SCENARIOS

A row fails when its test cell is NONE (no test: a gap), PENDING (a test being written)
or empty, holds anything but such references, or names a file, a function, a case or a
unit test that does not exist or does not run. So does a document (README.md, docs/*.md)
without a table, but for those that make no promise of their own (NO_TABLE).

Usage: tests/lint-promises.py [-v] [ROOT]   (ROOT: the tree to check, default: this one;
-v: one line of counts at the end)
Exit status: 0 clean, 1 a fault (each named with the document, the row and the fault).
"""
import ast
import glob
import json
import os
import re
import sys

GUIDE = "docs/testing.md"
SECTION = "## Promises"
# Documents that make no promise of their own (docs/testing.md's section says why).
NO_TABLE = {"docs/engine-notes.md", "docs/style.md", "docs/testing.md"}
# Passes whose t_ functions run only when their TESTS list names them: the file whose
# TESTS list it is, by the file that defines them. (presets.py runs those its CHECKS
# names: any pass with a TESTS or CHECKS list of names is held to it.)
TESTS_LIST = {"sandbox.py": "sandbox.py", "ingress.py": "ingress.py",
              "containment.py": "sandbox.py", "hostboundary.py": "sandbox.py"}
LISTS = ("TESTS", "CHECKS")
REF = re.compile(r"`([^`]*)`")


def split_row(line):
    """The cells of a table line, splitting at '|' outside backquotes and not escaped."""
    cells, cur, code, i = [], "", False, 0
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur += "|"
            i += 2
            continue
        if c == "`":
            code = not code
        if c == "|" and not code:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    cells.append(cur.strip())
    return cells


def tables(text):
    """[(document, [(line number, [cells])])] of the section's ### tables, and the faults
    of its layout."""
    lines = text.split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == SECTION)
    except StopIteration:
        return [], ["%s: no section %r" % (GUIDE, SECTION)]
    out, faults, doc, rows, in_table = [], [], None, None, False
    for n in range(start + 1, len(lines)):
        line = lines[n]
        if line.startswith("## "):
            break
        if line.startswith("### "):
            doc, rows, in_table = line[4:].strip(), [], False
            out.append((doc, rows))
            continue
        if not line.lstrip().startswith("|"):
            in_table = False
            continue
        if doc is None:
            continue  # the table of forms, before the first document
        if not in_table:  # a header, then its separator
            in_table = True
            header = n
            continue
        if n == header + 1 and re.fullmatch(r"\s*\|[\s:|-]+\|\s*", line):
            continue
        rows.append((n + 1, split_row(line)))
    return out, faults


class Checker:
    def __init__(self, root):
        self.root = root
        self.asts = {}
        self.cases = {}
        self.units = {}
        self.scenarios = None

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def module(self, name):
        """The parsed tests/integ/<name>, or None when it does not exist; raises on a
        syntax error."""
        if name not in self.asts:
            p = self.path("tests", "integ", name)
            if not os.path.isfile(p):
                self.asts[name] = None
            else:
                with open(p, encoding="utf-8") as f:
                    self.asts[name] = ast.parse(f.read(), p)
        return self.asts[name]

    def tests_list(self, name):
        """The names tests/integ/<name>'s module-level TESTS or CHECKS list holds, or None
        when it has neither."""
        tree = self.module(name)
        for node in tree.body if tree else ():
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id in LISTS for t in node.targets):
                try:
                    return set(ast.literal_eval(node.value))
                except ValueError:
                    return set()
        return None

    def integ(self, ref):
        """integ/<pass>.py[:<function>]"""
        m = re.fullmatch(r"integ/([A-Za-z0-9_]+\.py)(?::([A-Za-z0-9_]+))?", ref)
        if not m:
            return "not a reference of the form integ/<pass>.py[:<function>]"
        name, fn = m.groups()
        try:
            tree = self.module(name)
        except SyntaxError as e:
            return "tests/integ/%s does not parse: %s" % (name, e)
        if tree is None:
            return "tests/integ/%s does not exist" % name
        if fn is None:
            return None
        if not fn.startswith(("t_", "check_")):
            return "%s is not a t_ or check_ function" % fn
        defs = [n for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn]
        if not defs:
            return "tests/integ/%s has no function %s" % (name, fn)
        listed = TESTS_LIST.get(name, name)
        names = self.tests_list(listed) if fn.startswith("t_") else None
        if names is not None:
            if fn[2:] not in names:
                return "%s is not in tests/integ/%s's list of tests: it never runs" % (
                    fn, listed)
            return None
        used = [n for n in ast.walk(tree)
                if (isinstance(n, ast.Name) and n.id == fn) or
                (isinstance(n, ast.Attribute) and n.attr == fn)]
        if not used:
            return "tests/integ/%s never calls %s: it never runs" % (name, fn)
        return None

    def case_file(self, ref):
        """integ/cases/<name>.json, integ/sandbox-cases/<name>.json"""
        if not re.fullmatch(r"integ/(cases|sandbox-cases)/[A-Za-z0-9_.-]+\.json", ref):
            return "not a case file of integ/cases/ or integ/sandbox-cases/"
        p = self.path("tests", ref)
        if not os.path.isfile(p):
            return "tests/%s does not exist" % ref
        try:
            with open(p, encoding="utf-8") as f:
                json.load(f)
        except ValueError as e:
            return "tests/%s is not JSON: %s" % (ref, e)
        return None

    def adversarial(self, ref):
        """adversarial/<group>/<id>"""
        m = re.fullmatch(r"adversarial/([a-z0-9-]+)/([a-z0-9.-]+)", ref)
        if not m:
            return "not a reference of the form adversarial/<group>/<id>"
        group, cid = m.groups()
        if group not in self.cases:
            p = self.path("tests", "adversarial", "cases", group + ".json")
            try:
                with open(p, encoding="utf-8") as f:
                    doc = json.load(f)
                self.cases[group] = {c.get("id"): c for c in doc.get("cases", [])}
            except OSError:
                self.cases[group] = None
            except ValueError as e:
                return "tests/adversarial/cases/%s.json is not JSON: %s" % (group, e)
        cases = self.cases[group]
        if cases is None:
            return "tests/adversarial/cases/%s.json does not exist" % group
        case = cases.get(cid)
        if case is None:
            return "group %s has no case %s" % (group, cid)
        if "pending" in case:
            return "%s is pending (%s): it does not pass today" % (ref, case["pending"])
        if "skip" in case:
            return "%s is skipped (%s)" % (ref, case["skip"])
        return None

    def unit(self, ref):
        """unit/<dir>/<file>.c:<test>"""
        m = re.fullmatch(r"unit/([A-Za-z0-9_/]+\.c):([A-Za-z0-9_]+)", ref)
        if not m:
            return "not a reference of the form unit/<dir>/<file>.c:<test>"
        rel, test = m.groups()
        if rel not in self.units:
            p = self.path("tests", "unit", rel)
            if os.path.isfile(p):
                with open(p, encoding="utf-8", errors="replace") as f:
                    self.units[rel] = f.read()
            else:
                self.units[rel] = None
        text = self.units[rel]
        if text is None:
            return "tests/unit/%s does not exist" % rel
        if not re.search(r"^\s*START_TEST\(\s*%s\s*\)" % re.escape(test), text, re.M):
            return "tests/unit/%s has no START_TEST(%s)" % (rel, test)
        added = r"tcase_add_\w*test\w*\(\s*\w+\s*,\s*%s\b" % re.escape(test)
        if not re.search(added, text):
            return "tests/unit/%s never adds %s to a TCase: it never runs" % (rel, test)
        return None

    def fuzz(self, ref):
        m = re.fullmatch(r"fuzz/([a-z0-9_]+)", ref)
        if not m:
            return "not a reference of the form fuzz/<driver>"
        if not os.path.isfile(self.path("tests", "fuzz", m.group(1) + ".c")):
            return "tests/fuzz/%s.c does not exist" % m.group(1)
        return None

    def bench(self, ref):
        if self.scenarios is None:
            self.scenarios = set()
            p = self.path("bench", "bench.py")
            if os.path.isfile(p):
                with open(p, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), p)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Assign) and any(
                            isinstance(t, ast.Name) and t.id == "SCENARIOS"
                            for t in node.targets):
                        self.scenarios = set(ast.literal_eval(node.value))
        name = ref[len("bench:"):]
        if name not in self.scenarios:
            return "bench/bench.py has no scenario %r" % name
        return None

    def ref(self, ref):
        """The fault of one reference, or None."""
        if ref.startswith("integ/cases/") or ref.startswith("integ/sandbox-cases/"):
            return self.case_file(ref)
        for prefix, check in (("integ/", self.integ), ("adversarial/", self.adversarial),
                              ("unit/", self.unit), ("fuzz/", self.fuzz),
                              ("bench:", self.bench)):
            if ref.startswith(prefix):
                return check(ref)
        return "not a test reference (integ/, adversarial/, unit/, fuzz/, bench:)"

    def cell(self, cell):
        """The faults of one test cell."""
        word = cell.strip()
        if word == "":
            return ["no test"]
        if word == "NONE":
            return ["no test checks it (NONE)"]
        if word == "PENDING":
            return ["its test is not written yet (PENDING)"]
        refs = REF.findall(word)
        rest = REF.sub("", word).replace(",", "").strip()
        faults = []
        if not refs or rest:
            faults.append("the test cell holds %r besides backquoted references"
                          % (rest or word))
        faults += ["`%s`: %s" % (r, f) for r in refs for f in [self.ref(r)] if f]
        return faults


def documents(root):
    docs = ["README.md"] + sorted("docs/" + os.path.basename(p)
                                  for p in glob.glob(os.path.join(root, "docs", "*.md")))
    return [d for d in docs if d not in NO_TABLE and os.path.isfile(os.path.join(root, d))]


def check(root):
    """(faults, rows checked, tables)"""
    try:
        with open(os.path.join(root, GUIDE), encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return ["%s: %s" % (GUIDE, e)], 0, 0
    found, faults = tables(text)
    checker = Checker(root)
    count = 0
    for doc, rows in found:
        if not rows:
            faults.append("%s: table %s has no row" % (GUIDE, doc))
        for n, (line, cells) in enumerate(rows, 1):
            count += 1
            label = re.sub(r"\s+", " ", cells[0])
            label = label if len(label) <= 70 else label[:67] + "..."
            where = "%s:%d: %s, row %d (%s)" % (GUIDE, line, doc, n, label)
            if len(cells) != 2:
                faults.append("%s: %d cells, want 2 (promise, test)" % (where, len(cells)))
                continue
            if not cells[0]:
                faults.append("%s: no promise" % where)
            faults += ["%s: %s" % (where, f) for f in checker.cell(cells[1])]
    named = {doc for doc, _ in found}
    for doc in documents(root):
        if doc not in named:
            faults.append("%s: %s has no table in %r (a '### %s' heading)" % (
                GUIDE, doc, SECTION, doc))
    return faults, count, len(found)


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    root = args[0] if args else "."
    faults, rows, count = check(root)
    for line in faults:
        print("lint: " + line)
    if verbose:
        print("promises: %d rows in %d tables, %d faults" % (rows, count, len(faults)))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
