"""The set-up pass: what README.md promises of tools/deps.sh, checked with the package
tools stubbed, so that nothing is installed or fetched.

  - present: with every package installed (as make check leaves the host), `tools/deps.sh
    demo` prints nothing and calls neither apt-get nor sudo, and `tools/deps.sh` installs
    no package (apt-get not called, no "installing" line); under CI=true, where the test
    modules are installed too, it prints nothing at all;
  - missing: with two packages of the demo's set reported absent (a dpkg-query stand-in
    in front of the real one), `tools/deps.sh demo` names them and the reason for the
    demo's set (what builds the programs, what runs the walkthrough) before anything is
    installed, then runs apt-get update once and apt-get install with exactly those two;
  - the same two absent for the whole set: named on the "installing" line before the
    install, which installs those two and nothing else.

The stand-ins (apt-get, sudo, systemctl, npm; dpkg-query for the missing runs) go first on
PATH and print one line each to stderr, "stub: <name> <args>", so their calls fall in
order among the script's own lines.

Runs as its own pass: python3 tests/integ/deps.py [-v] (--daemon and --netns, given by
tests/integ/run.sh, are accepted and unused). Needs dpkg-query (Debian).
"""

import os
import shutil
import subprocess
import sys
import tempfile

from integlib import ROOT, own_pass_args, own_pass_end, print_counts, skip_pass

STUBS = ("apt-get", "sudo", "systemctl", "npm")
MISSING = ("curl", "libyaml-dev")  # both in the demo's set and the whole set
TIMEOUT_S = 60


def write_stub(bin_dir, name, body=""):
    path = os.path.join(bin_dir, name)
    with open(path, "w", encoding="ascii") as f:
        f.write("#!/bin/sh\necho \"stub: %s $*\" >&2\n%s" % (name, body))
    os.chmod(path, 0o755)


def make_stubs(bin_dir, missing=()):
    """The stand-ins in <bin_dir>; with <missing>, a dpkg-query that reports those packages
    not installed and asks the real one about the rest."""
    os.makedirs(bin_dir)
    for name in STUBS:
        write_stub(bin_dir, name)
    if missing:
        real = shutil.which("dpkg-query")
        case = "|".join(missing)
        path = os.path.join(bin_dir, "dpkg-query")
        with open(path, "w", encoding="ascii") as f:
            # deps.sh asks `dpkg-query -W -f=... <package>`: the package is the last word.
            f.write('#!/bin/sh\nfor last; do :; done\ncase "$last" in\n%s) exit 1 ;;\n'
                    'esac\nexec %s "$@"\n' % (case, real))
        os.chmod(path, 0o755)


def run_deps(bin_dir, *args):
    """tools/deps.sh <args> from the top of the tree with the stand-ins first on PATH:
    (status, its stdout and stderr as one, in order)."""
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("AN_DEPS_LIST", None)
    p = subprocess.run(["sh", "tools/deps.sh", *args], cwd=ROOT, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=TIMEOUT_S, check=False)
    return p.returncode, p.stdout.splitlines()


def stub_calls(lines, name):
    return [x for x in lines if x.startswith("stub: %s " % name) or x == "stub: " + name]


def t_present(tmp, log):
    errs = []
    bin_dir = os.path.join(tmp, "present")
    make_stubs(bin_dir)
    rc, lines = run_deps(bin_dir, "demo")
    log("deps: demo, all present: exit %d, %r" % (rc, lines))
    if rc != 0 or lines:
        errs.append("tools/deps.sh demo with every package present: exit %d, printed %r; "
                    "want 0 and nothing (a no-op)" % (rc, lines))
    rc, lines = run_deps(bin_dir)
    log("deps: all present: exit %d, %r" % (rc, lines))
    installs = stub_calls(lines, "apt-get") + stub_calls(lines, "sudo")
    if rc != 0 or installs or any("installing" in x for x in lines):
        errs.append("tools/deps.sh with every package present: exit %d, printed %r; want 0, "
                    "no package installed" % (rc, lines))
    if os.environ.get("CI") == "true" and lines:
        errs.append("tools/deps.sh under CI, where make check ran it already, printed %r; "
                    "want nothing" % lines)
    return errs


def missing_run(tmp, log, label, *args):
    """tools/deps.sh <args> with MISSING absent: (errors, lines). Checks that the install is
    apt-get update, then apt-get install of exactly MISSING, after the naming lines."""
    errs = []
    bin_dir = os.path.join(tmp, label)
    make_stubs(bin_dir, MISSING)
    rc, lines = run_deps(bin_dir, *args)
    log("deps: %s with %s absent: exit %d, %r" % (label, " ".join(MISSING), rc, lines))
    calls = stub_calls(lines, "apt-get")
    updates = [x for x in calls if x.split()[2:3] == ["update"]]
    installs = [x for x in calls if "install" in x.split()]
    if rc != 0:
        errs.append("%s: exit %d, want 0" % (label, rc))
    if len(updates) != 1 or len(installs) != 1:
        errs.append("%s: apt-get was called %r; want one update and one install" % (
            label, calls))
        return errs, lines
    packages = [w for w in installs[0].split()[2:] if not w.startswith("-") and
                w != "install"]
    if sorted(packages) != sorted(MISSING):
        errs.append("%s: apt-get installed %r, want exactly the missing %r" % (
            label, packages, list(MISSING)))
    named = [i for i, x in enumerate(lines) if x.startswith("deps: installing: ") and
             sorted(x.split()[2:]) == sorted(MISSING)]
    if not named or named[0] > lines.index(installs[0]):
        errs.append("%s: no line 'deps: installing: ' naming %s before the install: %r" % (
            label, " and ".join(MISSING), lines))
    return errs, lines


def t_missing_demo(tmp, log):
    errs, lines = missing_run(tmp, log, "demo-missing", "demo")
    install_at = next((i for i, x in enumerate(lines) if x.startswith("stub: apt-get")),
                      len(lines))
    before = lines[:install_at]
    lacks = "deps: the demo needs, and this host lacks: "
    if not any(x.startswith(lacks) and sorted(x[len(lacks):].split()) == sorted(MISSING)
               for x in before):
        errs.append("demo-missing: no line %r naming %s before apt-get ran: %r" % (
            lacks, " and ".join(MISSING), lines))
    for want in ("deps:   to build agentsnetd, agentsnet and agentsnet-bridge: ",
                 "deps:   to run the walkthrough: "):
        if not any(x.startswith(want) for x in before):
            errs.append("demo-missing: no line %r before apt-get ran: %r" % (want, lines))
    return errs


def t_missing_all(tmp, log):
    return missing_run(tmp, log, "all-missing")[0]


def main():
    args, log = own_pass_args("agentsnet set-up pass (tools/deps.sh)")
    del args
    if shutil.which("dpkg-query") is None:
        return skip_pass("deps", "dpkg-query is not installed (not a Debian host)")
    tmp = tempfile.mkdtemp(prefix="an-deps-")
    failed = ran = 0
    for name, test in (("present", t_present), ("missing_demo", t_missing_demo),
                       ("missing_all", t_missing_all)):
        try:
            errs = test(tmp, log)
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            errs = ["%s: %s" % (type(e).__name__, e)]
        print("%s - deps: %s" % ("ok" if not errs else "not ok", name))
        for e in errs:
            print("  " + e)
        failed += bool(errs)
        ran += 1
    print_counts("deps", ran - failed, failed)
    return own_pass_end("deps", tmp, failed)


if __name__ == "__main__":
    sys.exit(main())
