"""The containment tests of the sandbox pass (issue 14): what an agent must not reach of its
caller, tried for real. Mixed into sandbox.py's Tests, whose helpers (start, host_cmd,
run_env, timed, leftovers, userns_allowed, vars) they use.

- t_env: the caller's environment does not reach the agent (a real API key in the
  operator's shell would defeat the inject tier); --env and --env-file do, and the dropped
  variables that look like credentials are named on stderr, never their values.
- t_pty: `agentsnet run` under a pty, as an operator's interactive shell runs it: an agent
  that types into its terminal with TIOCSTI puts no byte into the caller's input (the same
  program run outside the sandbox does: the control); the agent has a terminal of its own,
  whose window size follows the caller's (SIGWINCH) and where ^C is its own SIGINT; the
  caller's terminal settings come back unchanged.
- t_socket_flood: 68,001 pathname sockets bound in view (four processes, one directory per
  socket, past what a run lists one by one): `agentsnet run` still starts (the listing
  turns coarse and hides their directories whole), and the agent cannot connect to the
  world-connectable one among them.
- t_late_socket: host sockets the run cannot have listed at its start, world-connectable:
  one bound in a third network namespace before the run (not in the run's socket listing),
  and two bound after the agent started (a service restarting), in /var/lib and in a
  top-level directory of the host's own. As root and unprivileged, the agent names none of
  them (ENOENT: the sandbox's root holds no such directory), and the agent's / lists the sandbox's own entries only; the same agent outside the
  sandbox connects to all three (so the case can fail).
- t_root_races: what a host user who owns the working directory's or a bind's parent can do
  to the run that builds the root (as root: the run opens each once and binds that
  descriptor): 12 runs with --bind <dir>, and 12 started in <dir>, while that user swaps
  <dir> with a symlink to / (renameat2 RENAME_EXCHANGE, in a loop): every run either fails
  or shows that directory's own content there, never the host's root; and a $HOME spelled
  with "//" and "/./" inside a bound host directory is not made on the host; a --bind through
  another account's symlink is refused; with --bind /var the host's /var and /var/tmp keep
  their mode and ctime (the skeleton never makes or chmods inside a bound directory); a bind
  holding the host's procfs or a bind of / below it is refused.
- t_proc_host_wide: /proc/key-users (which host uids hold keys), /proc/timer_list and
  /sys/kernel/vmcoreinfo (where the kernel lies in physical memory) read empty inside, as root's nobody and unprivileged; outside, key-users is not (the control).
- t_selftest: `agentsnet selftest` as root and unprivileged: every probe says closed, with
  a host service's socket listening outside every directory the sandbox replaces (as
  /var/lib/mysql/mysql.sock), bound in the caller's network namespace: the sandbox masks
  it, and host-sockets finds none that accepts. (The init process's namespace, which root
  also lists, is out of reach on this test machine: its PID 1 refuses /proc/1/ns/net; the
  unit test of tools/agentsnet/hostsock.c lists another namespace through a descriptor.)
- t_user_groups: `agentsnet run --user U` (as root) where U is privileged only through a
  supplementary group: a member of group 0, of disk, of adm. Each is refused with a usage
  error (exit 2) that names U and the group, and the agent's command never ran (the marker
  it writes first is not there). The control: a user whose supplementary group is harmless
  runs, and inside `id -G` shows its primary gid alone (outside, the same user switched to
  with its groups, setpriv --init-groups, shows both: so the check can fail). The users
  exist only in a mount namespace of each run's own (copies of /etc/passwd and /etc/group
  bind-mounted over the host's, as the unit test group_privileged does): nothing of the
  host changes, and nothing is left when the test dies.
- t_readonly: directories the agent's uid owns in the host's /usr, /etc and /opt, and an
  --ro-bind source: a write there is EROFS inside (the mount, not the mode, refuses it),
  and the mount table shows the root, every mount of /usr, /etc, /opt and the --ro-bind
  read-only; the --bind source beside them is written, and outside the same uid writes
  all of them (the control). As root's nobody and unprivileged.
- t_default_limits: without --pids-max and --memory-max, the run's cgroup (read on the
  host while it runs) holds pids.max 4096 (4097 in the daemon's, which counts the run) and
  a memory limit of 4G; with the flags the same files follow them (the control).
- t_memlock: RLIMIT_MEMLOCK inside is 4 MiB: 3 MiB is locked, 5 MiB refused (ENOMEM);
  outside, the same uid locks 5 MiB (the control).
- t_fds_closed: descriptors 7 and 8 the caller of `agentsnet run` holds do not reach the
  agent (it holds 0, 1, 2); outside, the same command started the same way holds them.
- t_selftest_status: `agentsnet selftest` that cannot run (no daemon at --socket-dir, a
  probe that does not exist) exits 125 saying why; with --bridge naming a stand-in that
  runs the agent without the bridge's seccomp filters (a weaker sandbox, for real), the
  probes it lets through (io-uring among them) are OPEN, counted, and it exits 1.
"""

import errno
import fcntl
import grp
import os
import pwd
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
import tty

from hostboundary import CONNECT_PY
from integlib import AGENT_DIR_OWNER, log

# The probes `agentsnet selftest` must report (docs/sandbox.md), each closed.
SELFTEST_PROBES = ["dns", "tcp-host", "vsock", "sockets", "io-uring", "unix-abstract",
                   "unix-path", "host-sockets", "other-sandbox", "control-socket", "terminal",
                   "ptrace-bridge", "fd-theft", "host-pids", "shared-dirs", "keyring", "userns",
                   "mount", "pids", "memory", "unlisted-socket"]
SELFTEST_TIMEOUT_S = 120
PTY_TIMEOUT_S = 30

# The agent of the TIOCSTI test: one byte pushed into each of its std descriptors and its
# controlling terminal; prints each outcome, then whether its stdin is a terminal.
TIOCSTI_PY = r"""
import errno, fcntl, os, termios
out = []
fds = [0, 1, 2]
try:
    fds.append(os.open("/dev/tty", os.O_RDWR))
except OSError as e:
    out.append("tty-" + errno.errorcode.get(e.errno, str(e.errno)))
for fd in fds:
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"Z")
        out.append("injected")
    except OSError as e:
        out.append(errno.errorcode.get(e.errno, str(e.errno)))
print("tiocsti", " ".join(out), "isatty", os.isatty(0), flush=True)
"""

# The agent of the window and ^C test: prints its size, then each new size on SIGWINCH;
# exits 5 on SIGINT.
WINCH_PY = r"""
import os, signal, sys, time
def size():
    s = os.get_terminal_size(0)
    return "%d %d" % (s.lines, s.columns)
# os.write, never print: a signal that lands while print("ready") is still in the
# buffered stdout would make a print in its handler a reentrant call (RuntimeError).
def say(*words):
    os.write(1, (" ".join(words) + "\n").encode())
signal.signal(signal.SIGWINCH, lambda *_: say("winch", size()))
def on_int(*_):
    say("sigint")
    os._exit(5)
signal.signal(signal.SIGINT, on_int)
say("ready", size())
# Short sleeps, never one long one: CPython runs a handler between bytecodes, so a
# signal landing between the write above and the start of a sleep would wait out the
# whole sleep (and a ^C sent then would find the interpreter exiting, SIGINT default).
for _ in range(250):
    time.sleep(0.1)
sys.exit(9)
"""


def set_winsize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def input_queued(fd):
    """Bytes waiting in the input queue of the terminal <fd> (what a shell would read next)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


# A host service: binds a Unix socket at argv[1], makes it connectable by anyone, listens,
# says "ready", and stays until its stdin closes.
LISTENER_PY = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
s.listen(8)
print("ready", flush=True)
sys.stdin.read()
"""


class HostService:
    """A listening Unix socket at <path>, run with <prefix> (such as `ip netns exec NS`)."""

    def __init__(self, path, prefix=()):
        self.path = path
        self.proc = subprocess.Popen(list(prefix) + ["python3", "-c", LISTENER_PY, path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.close()
            raise RuntimeError("host service at %s did not start" % path)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)
        if os.path.exists(self.path):
            os.unlink(self.path)


class Terminal:
    """A pty standing for the operator's terminal: the test holds the master (the terminal
    emulator's side) and runs a command with the slave as its controlling terminal and
    stdin, stdout and stderr, in a session of its own (as a login shell's job would be)."""

    def __init__(self, rows=30, cols=100, raw=False):
        self.master, self.slave = os.openpty()
        set_winsize(self.slave, rows, cols)
        if raw:
            tty.setraw(self.slave)
        self.saved = termios.tcgetattr(self.slave)
        self.out = b""
        self.proc = None

    def spawn(self, argv, env):
        def ctty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen(argv, stdin=self.slave, stdout=self.slave,
                                     stderr=self.slave, env=env, start_new_session=True,
                                     preexec_fn=ctty)
        return self.proc

    def read_until(self, text, timeout=PTY_TIMEOUT_S):
        """Reads the master until <text> appeared (True) or <timeout> (False)."""
        want = text.encode()
        deadline = time.monotonic() + timeout
        while want not in self.out and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.out += os.read(self.master, 65536)
                except OSError as e:
                    if e.errno != errno.EIO:
                        raise
        return want in self.out

    def finish(self, timeout=PTY_TIMEOUT_S):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.read_until("\0never\0", 0.3)  # what is left
        return rc

    def text(self):
        return self.out.decode("utf-8", "replace")

    def close(self):
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass

# t_socket_flood's flooder, run in the host namespace: argv = directory, processes, sockets
# each. Each process binds its sockets in directories of its own (one per socket: the
# shape a collapse by directory cannot absorb), then one more process listens on
# <directory>/target.sock (world-connectable); prints "ready" once all are bound, and
# holds them until its stdin closes.
FLOOD_PY = r"""
import os, socket, sys
root, procs, each = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.chmod(root, 0o755)
kids = []
for p in range(procs):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        held = []
        for i in range(each):
            d = os.path.join(root, "p%d" % p, "d%d" % i)
            os.makedirs(d, exist_ok=True)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(os.path.join(d, "s.sock"))
            held.append(s)
        os.write(w, b"x")
        os.read(0, 1)
        os._exit(0)
    os.close(w)
    kids.append((pid, r))
for pid, r in kids:
    if os.read(r, 1) != b"x":
        sys.exit("a flooder failed")
t = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
path = os.path.join(root, "target.sock")
t.bind(path)
os.chmod(path, 0o666)
t.listen(8)
print("ready", flush=True)
sys.stdin.read()
for pid, _ in kids:
    os.waitpid(pid, 0)
"""

# t_late_socket's agent: waits for argv[1] (made by the host once its late sockets listen),
# connects to each further argument, then lists /; prints the outcomes on one line, then
# the entries of / on another.
LATE_PY = r"""
import errno, os, socket, sys, time
deadline = time.time() + 30
while not os.path.exists(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.05)
out = []
for path in sys.argv[2:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        out.append("connected")
    except OSError as e:
        out.append(errno.errorcode.get(e.errno, str(e.errno)))
    s.close()
print(" ".join(out), flush=True)
print(" ".join(sorted(os.listdir("/"))), flush=True)
"""

# t_root_races' racer, as the owner of argv[1]: swaps argv[1]/w (a directory) with argv[1]/s
# (a symlink to /) as fast as it can until its stdin closes; prints "ready" first.
SWAPPER_PY = r"""
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
root = sys.argv[1].encode()
a, b = root + b"/w", root + b"/s"
stop = []
threading.Thread(target=lambda: (sys.stdin.read(), stop.append(1)), daemon=True).start()
print("ready", flush=True)
while not stop:
    libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
"""

# What the sandbox's / may hold: the system directories, what it makes, and the working
# directory's first component (the pass runs from its checkout).
ROOT_ENTRIES = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "proc",
                "dev", "run", "tmp", "var", "sys"}

# Sockets the flood binds in all: past tools/agentsnet/hostsock.h's HOSTSOCK_MAX (65,536), in four
# processes (each holds its sockets open: 20,000 descriptors a process at most).
FLOOD_PROCS, FLOOD_EACH = 4, 17000


# t_user_groups' users (name, supplementary group): privileged through that group alone...
GROUPS_REFUSED = [("an-it-wheel", "root"), ("an-it-disk", "disk"), ("an-it-adm", "adm")]
# ... and the control, whose supplementary group (made by the fixture) is harmless.
GROUPS_PLAIN = ("an-it-plain", "an-it-harmless")

# The fixture's wrapper (a host_cmd <pre>): in a mount namespace of its own, the copies $1 and
# $2 bind-mounted over /etc/passwd and /etc/group, then the command.
GROUPS_PRE = 'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && ' \
    'exec "$@"'


def free_ids(count, start=4250):
    """<count> numbers from <start> up that are neither a uid nor a gid of the host."""
    def known(n):
        try:
            pwd.getpwuid(n)
            return True
        except KeyError:
            pass
        try:
            grp.getgrgid(n)
            return True
        except KeyError:
            return False
    out, n = [], start
    while len(out) < count:
        if not known(n):
            out.append(n)
        n += 1
    return out


class ContainmentTests:
    def both_modes(self, what, case):
        """<case>(user) as root's nobody (None), then unprivileged where the host allows
        user namespaces."""
        self.timed(what + " (as root's nobody)", lambda: case(None))
        if self.userns_allowed():
            self.timed(what + " (unprivileged, uid %d)" % self.unpriv_uid,
                       lambda: case((self.unpriv_uid, self.unpriv_uid)))

    # ---- the caller's environment ---------------------------------------------------

    def t_env(self):
        secret = "sk-canary-" + os.urandom(12).hex()
        token = "ghp_" + os.urandom(12).hex()
        caller = {"OPENAI_API_KEY": secret, "GITHUB_TOKEN": token,
                  "NODE_OPTIONS": "--require /nonexistent.js", "AN_IT_PLAIN": "plain-value"}

        def env_of(a):
            return dict(line.split("=", 1) for line in a.stdout().splitlines() if "=" in line)

        def dropped():
            a = self.start(["env"], caller_env=caller, wrap=False).finish()
            got = env_of(a)
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            for name in caller:
                if name in got:
                    errs.append("%s reached the agent without --env" % name)
            for name in ("PATH", "HOME", "LANG"):
                if name not in got:
                    errs.append("%s (on the allow-list) did not reach the agent" % name)
            err = a.stderr()
            for name in ("OPENAI_API_KEY", "GITHUB_TOKEN"):
                if name not in err:
                    errs.append("stderr does not name the dropped credential %s: %r"
                                % (name, err[-800:]))
            if "AN_IT_PLAIN" in err.split("agentsnet-bridge")[0]:
                errs.append("stderr names AN_IT_PLAIN, which does not look like a credential")
            for value in (secret, token):
                if value in err or value in a.stdout():
                    errs.append("a dropped credential's value was printed")
            return errs + self.leftovers(a, need_ns=False)

        def passed():
            env_file = os.path.join(self.vars["sync"], "agent.env")
            with open(env_file, "w", encoding="ascii") as f:
                f.write("# the agent's settings\n\nFILE_A=1\nexport FILE_B=\"two words\"\n"
                        "FILE_A=later\n")
            a = self.start(["env"], caller_env=caller, wrap=False,
                           run_args=["--env", "OPENAI_API_KEY", "--env", "SET_HERE=x=y",
                                     "--env-file", env_file]).finish()
            got = env_of(a)
            want = {"OPENAI_API_KEY": secret, "SET_HERE": "x=y", "FILE_A": "later",
                    "FILE_B": "two words"}
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            for name, value in want.items():
                if got.get(name) != value:
                    errs.append("%s: %r inside, want %r" % (name, got.get(name), value))
            if "GITHUB_TOKEN" in got:
                errs.append("GITHUB_TOKEN reached the agent without --env")
            return errs + self.leftovers(a, need_ns=False)

        def bad_file():
            env_file = os.path.join(self.vars["sync"], "bad.env")
            with open(env_file, "w", encoding="ascii") as f:
                f.write("GOOD=1\nthis line has no equals sign\n")
            a = self.start(["true"], wrap=False, run_args=["--env-file", env_file]).finish()
            errs = [] if a.rc not in (0, None) else ["exit %s, want a failure" % a.rc]
            if "%s:2" % env_file not in a.stderr():
                errs.append("stderr does not name %s:2: %r" % (env_file, a.stderr()[-800:]))
            return errs + self.leftovers(a, need_ns=False)

        self.timed("the caller's OPENAI_API_KEY, GITHUB_TOKEN, NODE_OPTIONS do not reach the "
                   "agent; PATH, HOME, LANG do; the credentials are named on stderr, never "
                   "their values", dropped)
        self.timed("--env NAME, --env NAME=VALUE and --env-file (comments, export, quotes, "
                   "later wins) reach the agent", passed)
        self.timed("an --env-file line without '=': the run fails naming file:line", bad_file)

    # ---- the terminal -----------------------------------------------------------------

    def pty_argv(self, cmd, sandbox):
        argv = [self.vars["agentsnet"], "run", "--socket-dir", self.vars["sock_dir"],
                "--sandbox", sandbox, "--env", self.mark_var]
        return self.host_cmd(argv + ["--"] + cmd)

    def t_pty(self):
        def tiocsti():
            sid = self.sandbox_id("pty-tiocsti")
            inside, outside = Terminal(raw=True), Terminal(raw=True)
            try:
                env = self.run_env({self.mark_var: sid})
                inside.spawn(self.pty_argv(["python3", "-c", TIOCSTI_PY], sid), env)
                rc = inside.finish()
                queued = input_queued(inside.slave)
                # The control: the same agent on the operator's terminal, without a sandbox.
                outside.spawn(self.host_cmd(["python3", "-c", TIOCSTI_PY]), env)
                outside.finish()
                control = input_queued(outside.slave)
            finally:
                inside.close()
                outside.close()
            errs = [] if rc == 0 else ["exit %s: %r" % (rc, inside.text()[-1500:])]
            if queued != 0:
                errs.append("%d byte(s) typed into the caller's terminal by the agent" % queued)
            if control == 0:
                errs.append("the control (the same agent outside a sandbox) typed nothing: "
                            "the check cannot fail here: %r" % outside.text()[-500:])
            line = [x for x in inside.text().splitlines() if x.startswith("tiocsti ")]
            if not line or "injected" in line[0] or "isatty True" not in line[0]:
                errs.append("inside: %r; want every TIOCSTI refused and a terminal on stdin"
                            % (line or inside.text()[-800:]))
            return errs + self.leftovers_of(sid)

        def window_and_interrupt():
            sid = self.sandbox_id("pty-winch")
            term = Terminal(rows=30, cols=100)
            errs = []
            try:
                term.spawn(self.pty_argv(["python3", "-c", WINCH_PY], sid),
                           self.run_env({self.mark_var: sid}))
                if not term.read_until("ready 30 100"):
                    errs.append("the agent's terminal is not 30x100 like the caller's: %r"
                                % term.text()[-800:])
                during = termios.tcgetattr(term.slave)
                set_winsize(term.slave, 40, 120)
                if not term.read_until("winch 40 120"):
                    errs.append("no SIGWINCH with the new size 40x120 inside: %r"
                                % term.text()[-800:])
                os.write(term.master, b"\x03")
                if not term.read_until("sigint"):
                    errs.append("^C did not reach the agent as SIGINT: %r" % term.text()[-800:])
                rc = term.finish()
                after = termios.tcgetattr(term.slave)
            finally:
                term.close()
            if rc != 5:
                errs.append("exit %s, want 5 (the agent's SIGINT handler)" % rc)
            if during[3] & termios.ICANON:
                errs.append("the caller's terminal was not in raw mode during the run")
            if after != term.saved:
                errs.append("the caller's terminal settings changed: %r, were %r"
                            % (after, term.saved))
            return errs + self.leftovers_of(sid)

        self.timed("under a pty, an agent's TIOCSTI on its terminal and /dev/tty puts no byte "
                   "into the caller's input (outside the sandbox it does)", tiocsti)
        self.timed("the agent's own pty: the caller's window size, SIGWINCH on a resize, ^C "
                   "as its SIGINT; the caller's terminal restored after", window_and_interrupt)

    # ---- more host sockets than can be listed one by one ------------------------------

    def t_socket_flood(self):
        def flood():
            root = os.path.join(self.tmp, "flood")
            os.mkdir(root)
            f = subprocess.Popen(self.host_cmd(["python3", "-c", FLOOD_PY, root,
                                                str(FLOOD_PROCS), str(FLOOD_EACH)]),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            try:
                line = f.stdout.readline().decode().strip()
                if line != "ready":
                    return ["the flooder did not start: %r %s" % (
                        line, f.stderr.read(2000).decode()[-1000:])]
                target = os.path.join(root, "target.sock")
                a = self.agent(["python3", "-c", CONNECT_PY, target])
                errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
                got = a.stdout().split()[-1:]
                if not got or got[0] == "connected":
                    errs.append("the agent's connect to a world-connectable host socket "
                                "among %d: %r" % (FLOOD_PROCS * FLOOD_EACH + 1, got))
                return errs + self.leftovers(a)
            finally:
                f.stdin.close()
                try:
                    f.wait(60)
                except subprocess.TimeoutExpired:
                    f.kill()
                    f.wait()

        self.timed("%d host sockets bound in view, one per directory (past what a run lists "
                   "one by one): agentsnet run still starts, and the agent cannot connect to "
                   "a world-connectable one among them" % (FLOOD_PROCS * FLOOD_EACH + 1),
                   flood)

    # ---- sockets the run could not list ------------------------------------------------

    def t_late_socket(self):
        tag = "agentsnet-it-late-%d" % os.getpid()
        dirs = [os.path.join("/var/lib", tag), os.path.join("/", tag)]

        def late(user):
            for d in dirs:
                os.makedirs(d, mode=0o755, exist_ok=True)
                os.chmod(d, 0o755)
            paths = [os.path.join(dirs[0], "other-netns.sock"),
                     os.path.join(dirs[0], "late.sock"), os.path.join(dirs[1], "late.sock")]
            sid = self.sandbox_id("late")
            go = os.path.join(self.vars["sync"], "go-" + sid)
            services = []
            try:
                # In a network namespace of its own: no listing of the run's holds it.
                services.append(HostService(paths[0], ["unshare", "--net"]))
                a = self.start(["python3", "-c", LATE_PY, go] + paths, sandbox=sid, user=user)
                time.sleep(1.0)  # the sandbox is up (its masks are made) before they bind
                services.append(HostService(paths[1], ["ip", "netns", "exec", self.args.netns]))
                services.append(HostService(paths[2]))
                with open(go, "w", encoding="ascii") as f:
                    f.write("go\n")
                a.finish()
                lines = a.stdout().splitlines()
                errs = [] if a.rc == 0 and len(lines) == 2 else [
                    "exit %s, stdout %r, stderr %s" % (a.rc, a.stdout(), a.stderr()[-1500:])]
                got = lines[0].split() if lines else []
                for path, word in zip(paths, got):
                    if word != "ENOENT":
                        errs.append("the agent's connect to %s: %s (want ENOENT)" % (path, word))
                if len(got) != len(paths):
                    errs.append("outcomes %r for %d sockets" % (got, len(paths)))
                top = os.getcwd().split("/")[1]  # the working directory, bound
                extra = set(lines[1].split()) - ROOT_ENTRIES - {top} if len(lines) > 1 else set()
                if extra:
                    errs.append("the sandbox's / shows %s" % " ".join(sorted(extra)))
                # The control: the same agent on the host connects to each.
                control = self.outside(["python3", "-c", LATE_PY, go] + paths)
                words = control.stdout.decode().splitlines()[:1]
                if not words or words[0].split() != ["connected"] * len(paths):
                    errs.append("the control, outside the sandbox: %r (want connected x%d)"
                                % (words, len(paths)))
                return errs + self.leftovers(a)
            finally:
                for svc in services:
                    svc.close()
                for d in dirs:
                    subprocess.run(["rm", "-rf", d], check=False)

        what = ("host sockets, world-connectable, the run could not list (one in a third "
                "network namespace, two bound after the agent started, in /var/lib and in a "
                "top-level directory): the agent names none (ENOENT), its / holds the "
                "sandbox's own entries only")
        self.both_modes(what, late)

    # ---- names swapped under the run -------------------------------------------------

    def t_root_races(self):
        owner = self.unpriv_uid
        runs = 12

        def race(how):
            top = os.path.join("/var/lib", "agentsnet-it-swap-%d-%s" % (os.getpid(), how))
            os.makedirs(os.path.join(top, "w"), mode=0o755)
            with open(os.path.join(top, "w", "inside"), "w", encoding="ascii") as f:
                f.write("x\n")
            os.symlink("/", os.path.join(top, "s"))
            for path in (top, os.path.join(top, "w"), os.path.join(top, "w", "inside")):
                os.lchown(path, owner, owner)
            os.lchown(os.path.join(top, "s"), owner, owner)
            swapper = subprocess.Popen(
                self.host_cmd(["python3", "-c", SWAPPER_PY, top], (owner, owner)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            errs, shown = [], 0
            try:
                if swapper.stdout.readline().strip() != b"ready":
                    return ["the swapper did not start: %s" % swapper.stderr.read(500)]
                target = os.path.join(top, "w")
                for _ in range(runs):
                    cmd = ["sh", "-c", 'pwd; ls "$0"', target]
                    if how == "bind":
                        a = self.start(cmd, run_args=["--bind", target])
                    else:
                        a = self.start(cmd, pre=["sh", "-c", 'cd "$0" 2>/dev/null; exec "$@"',
                                                 target])
                    a.finish()
                    lines = a.stdout().splitlines()
                    if a.rc != 0:
                        continue  # refused or failed closed: nothing was shown
                    where, listed = (lines[0], lines[1:]) if lines else ("", [])
                    if how == "cwd" and where != target:
                        continue  # started elsewhere (the name was the symlink then)
                    if listed != ["inside"]:
                        errs.append("run %s showed %r at %s (want its own content)"
                                    % (a.sandbox, listed[:8], target))
                    else:
                        shown += 1
                    errs += self.leftovers(a)
            finally:
                swapper.stdin.close()
                swapper.wait(10)
                subprocess.run(["rm", "-rf", top], check=False)
            log("# root race (%s): %d of %d runs showed the directory" % (how, shown, runs))
            return errs

        def home():
            made = os.path.join(self.tmp, "home-made-%d" % os.getpid())
            spelled = "/" + self.tmp.replace("/", "//") + "/./" + os.path.basename(made)
            a = self.agent(["sh", "-c", 'echo "$HOME"'], env={"HOME": spelled})
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-800:])]
            if os.path.lexists(made):
                errs.append("%s was made on the host" % made)
                subprocess.run(["rm", "-rf", made], check=False)
            errs += self.leftovers(a)
            # A home where the host's root is parked while the root is built: none made.
            b = self.agent(["sh", "-c", 'echo "$HOME"'], env={"HOME": "/.agentsnet-host/h"})
            if b.rc != 0:
                errs.append("HOME=/.agentsnet-host/h: exit %s: %s" % (b.rc, b.stderr()[-400:]))
            return errs + self.leftovers(b)

        self.timed("%d runs with --bind <dir> while its owner swaps it with a symlink to /: "
                   "each fails or shows <dir>'s own content" % runs, lambda: race("bind"))
        self.timed("%d runs started in <dir> while its owner swaps it with a symlink to /: "
                   "each shows <dir>'s own content or starts elsewhere" % runs,
                   lambda: race("cwd"))
        def bind_symlink():
            # Another account's symlink, at the end of the path and on the way.
            top = os.path.join("/var/lib", "agentsnet-it-link-%d" % os.getpid())
            os.makedirs(top, mode=0o755)
            errs = []
            try:
                os.symlink("/var", os.path.join(top, "link"))
                os.lchown(os.path.join(top, "link"), owner, owner)
                os.lchown(top, owner, owner)
                for path in (os.path.join(top, "link"), os.path.join(top, "link", "lib")):
                    a = self.agent(["sh", "-c", "echo ran"], run_args=["--bind", path])
                    if a.rc != 125 or "symlink on the way" not in a.stderr() \
                            or "ran" in a.stdout():
                        errs.append("--bind %s: exit %s, stdout %r, stderr %r (want 125, a "
                                    "symlink on the way, nothing run)"
                                    % (path, a.rc, a.stdout(), a.stderr()[-400:]))
                    errs += self.leftovers(a, need_ns=False)
            finally:
                subprocess.run(["rm", "-rf", top], check=False)
            return errs

        def bind_var():
            # The skeleton's /var, /var/tmp and /var/run are the host's once /var is bound:
            # never made in nor chmod'ed (a chmod to the same mode still moves the ctime).
            before = {p: os.lstat(p) for p in ("/var", "/var/tmp")}
            a = self.agent(["sh", "-c", "ls -d /var/tmp /var/lib >/dev/null && echo ok"],
                           run_args=["--bind", "/var"])
            errs = [] if a.rc == 0 and a.stdout().strip() == "ok" else [
                "exit %s, stdout %r, stderr %r" % (a.rc, a.stdout(), a.stderr()[-600:])]
            for path, was in before.items():
                now = os.lstat(path)
                if (now.st_mode, now.st_ctime_ns) != (was.st_mode, was.st_ctime_ns):
                    errs.append("%s changed on the host: mode %o -> %o, ctime moved %s"
                                % (path, was.st_mode, now.st_mode,
                                   now.st_ctime_ns != was.st_ctime_ns))
            return errs + self.leftovers(a)

        def cwd_link():
            # The operator's shell reached the working directory through a symlink (one an
            # agent could have left in its workspace): the run says which directory it binds.
            real = os.path.join(self.tmp, "cwd-real-%d" % os.getpid())
            link = real + "-link"
            os.makedirs(real, exist_ok=True)
            os.symlink(real, link)
            try:
                a = self.agent(["pwd"], pre=["sh", "-c", 'cd "$0" && exec "$@"', link],
                               caller_env={"PWD": link})
            finally:
                os.unlink(link)
            want = "%s is reached through a symlink; the agent gets %s, read-write" % (link, real)
            errs = [] if a.rc == 0 and a.stdout().strip() == real else [
                "exit %s, stdout %r" % (a.rc, a.stdout())]
            if want not in a.stderr():
                errs.append("stderr does not say %r: %r" % (want, a.stderr()[-600:]))
            errs += self.leftovers(a)
            # A launcher that leaves $PWD behind (env -C, make -C), through a symlink that
            # leads away from it.
            shell = os.path.join(self.tmp, "shell-%d" % os.getpid())
            os.makedirs(shell, exist_ok=True)
            inside = os.path.join(shell, "proj")
            os.symlink(real, inside)
            try:
                b = self.agent(["pwd"], pre=["env", "-C", inside], caller_env={"PWD": shell})
            finally:
                os.unlink(inside)
            if b.rc != 0 or "is not below $PWD" not in b.stderr():
                errs.append("env -C through a symlink: exit %s, stderr %r (want a warning)"
                            % (b.rc, b.stderr()[-600:]))
            return errs + self.leftovers(b)

        def submounts():
            # A chroot-like tree: the host's procfs, then a bind of the host's /, below a
            # directory the run would bind: refused, naming them; nothing runs.
            top = os.path.join(self.tmp, "chroot-%d" % os.getpid())
            errs = []
            for kind, cmd, word in (("proc", ["mount", "-t", "proc", "proc"], "holds proc at"),
                                    ("root", ["mount", "--bind", "/"],
                                     "holds a bind of the host's / at")):
                at = os.path.join(top, kind)
                os.makedirs(at, exist_ok=True)
                # In this mount namespace: each `ip netns exec` copies it.
                subprocess.run(cmd + [at], check=True)
                try:
                    a = self.agent(["sh", "-c", "echo ran"], run_args=["--bind", top])
                finally:
                    subprocess.run(["umount", "-l", at], check=False)
                if a.rc != 125 or word not in a.stderr() or "ran" in a.stdout():
                    errs.append("--bind %s holding %s: exit %s, stdout %r, stderr %r (want 125 "
                                "naming it)" % (top, kind, a.rc, a.stdout(), a.stderr()[-400:]))
                errs += self.leftovers(a, need_ns=False)
            return errs

        def home_above_cwd():
            # The usual layout: ~/project. The project is bound, the rest of the home is
            # the agent's own, empty and writable; the host's (its keys) stays out of view.
            top = os.path.join("/var/lib", "agentsnet-it-home-%d" % os.getpid())
            proj = os.path.join(top, "proj")
            os.makedirs(proj, mode=0o755)
            for path, text in ((os.path.join(top, ".keys"), "secret\n"),
                               (os.path.join(proj, "f"), "host\n")):
                with open(path, "w", encoding="ascii") as f:
                    f.write(text)
            try:
                a = self.agent(["sh", "-c", 'cat f; ls -A "$HOME"; echo x > "$HOME/.cfg" && '
                                'echo wrote'], env={"HOME": top},
                               pre=["sh", "-c", 'cd "$0" && exec "$@"', proj])
                lines = a.stdout().split()
                errs = [] if a.rc == 0 and lines == ["host", "proj", "wrote"] else [
                    "exit %s, stdout %r (want host, proj, wrote), stderr %r"
                    % (a.rc, a.stdout(), a.stderr()[-500:])]
                if os.path.exists(os.path.join(top, ".cfg")):
                    errs.append("the agent's $HOME/.cfg was written on the host")
                return errs + self.leftovers(a)
            finally:
                subprocess.run(["rm", "-rf", top], check=False)

        self.timed("a $HOME spelled with // and /./ inside a bound host directory is not made "
                   "on the host", home)
        self.timed("the working directory inside $HOME (~/project): bound there; the rest of "
                   "the home the agent's own, empty and writable; the host's out of view",
                   home_above_cwd)
        self.timed("a bind holding the host's procfs, or a bind of the host's /, below it: "
                   "refused, naming it, nothing runs", submounts)
        self.timed("a working directory reached through a symlink: the run names the directory "
                   "the agent gets", cwd_link)
        self.timed("--bind through another account's symlink (at the end, and on the way): "
                   "refused, nothing runs", bind_symlink)
        self.timed("--bind /var: the host's /var and /var/tmp are neither made in nor chmod'ed "
                   "(mode and ctime unchanged)", bind_var)

    # ---- /proc's host-wide files ------------------------------------------------------

    def t_proc_host_wide(self):
        files = ["/proc/key-users", "/proc/timer_list", "/sys/kernel/vmcoreinfo"]
        read = ("import sys\nfor f in sys.argv[1:]:\n    try:\n        n = len(open(f).read())\n"
                "    except OSError as e:\n        n = 'error-%d' % e.errno\n    print(f, n)\n")

        def masked(user):
            a = self.agent(["python3", "-c", read] + files, user=user)
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            for line in a.stdout().splitlines():
                name, size = line.split()
                if size != "0":
                    errs.append("%s inside: %s bytes (want 0)" % (name, size))
            if len(a.stdout().splitlines()) != len(files):
                errs.append("stdout %r" % a.stdout())
            for f in (files[0], files[2]):
                control = self.outside(["python3", "-c", read, f]).stdout.decode().split()
                if len(control) != 2 or control[1] in ("0",) or control[1].startswith("error"):
                    errs.append("the control, outside: %r (want a size above 0)" % control)
            return errs + self.leftovers(a)

        what = ("/proc/key-users, /proc/timer_list and /sys/kernel/vmcoreinfo read empty "
                "inside; outside they do not")
        self.both_modes(what, masked)

    # ---- --user: no privilege through a supplementary group ------------------------

    def groups_fixture(self, where):
        """Copies of the host's /etc/passwd and /etc/group in the new directory <where>, adding
        GROUPS_REFUSED's and GROUPS_PLAIN's users (uids the host does not know), each of
        primary group AGENT_DIR_OWNER's (which may write the sync directory, where the agent
        would leave its marker) and a member of its group, and GROUPS_PLAIN's group. Returns
        ({name: uid}, the harmless group's gid, the <pre> of host_cmd that runs a command
        with the copies bound over the host's in a mount namespace of its own)."""
        users = GROUPS_REFUSED + [GROUPS_PLAIN]
        ids = free_ids(len(users) + 1)
        uids = {name: uid for (name, _), uid in zip(users, ids)}
        harmless_gid = ids[-1]
        members = {}
        for name, group in users:
            members.setdefault(group, []).append(name)
        os.mkdir(where, 0o755)
        passwd, group_file = os.path.join(where, "passwd"), os.path.join(where, "group")
        with open("/etc/passwd", encoding="utf-8") as f:
            text = f.read()
        with open(passwd, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
            for name, _ in users:
                f.write("%s:x:%d:%d::/nonexistent:/usr/sbin/nologin\n"
                        % (name, uids[name], AGENT_DIR_OWNER[1]))
        with open("/etc/group", encoding="utf-8") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            fields = line.split(":")
            if len(fields) == 4 and fields[0] in members:
                added = members.pop(fields[0])
                fields[3] = ",".join([m for m in fields[3].split(",") if m] + added)
                lines[i] = ":".join(fields)
        lines.append("%s:x:%d:%s" % (GROUPS_PLAIN[1], harmless_gid,
                                      ",".join(members.pop(GROUPS_PLAIN[1]))))
        if members:
            raise RuntimeError("the host's /etc/group has no group %s" % ", ".join(members))
        with open(group_file, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        for path in (passwd, group_file):
            os.chmod(path, 0o644)
        pre = ["unshare", "--mount", "--propagation", "private", "sh", "-c", GROUPS_PRE,
               "groups-fixture", passwd, group_file]
        return uids, harmless_gid, pre

    def t_user_groups(self):
        where = os.path.join(self.tmp, "user-groups-%d" % os.getpid())
        uids, harmless_gid, pre = {}, None, None
        primary = AGENT_DIR_OWNER[1]

        def marker_of(name):
            return os.path.join(self.vars["sync"], "ran-%s-%d" % (name, os.getpid()))

        def agent_cmd(name):
            # The marker first: a refused user's command must not have run at all. Then who
            # the agent is, and one request through the sandbox (the run works).
            return ["sh", "-c", ': >"$0" && id -u && id -g && id -G && curl -sS --max-time 15 '
                    '-o /dev/null -w "req %{http_code}\\n" "$1"', marker_of(name), self.url()]

        def refused(name, group):
            marker = marker_of(name)
            a = self.start(agent_cmd(name), run_args=["--user", name], pre=pre).finish()
            err = a.stderr()
            errs = []
            if a.rc != 2:
                errs.append("exit %s, want 2 (a usage error); stdout %r" % (a.rc, a.stdout()))
            for want in ("--user %s:" % name, "is a member of group %s (" % group):
                if want not in err:
                    errs.append("stderr does not name %r: %r" % (want, err[-800:]))
            if os.path.exists(marker):
                errs.append("the agent's command ran: %s was written" % marker)
            if os.path.exists(a.nsfile):
                errs.append("the agent ran (the wrapper wrote %s)" % a.nsfile)
            return errs + self.leftovers(a, need_ns=False)

        def plain():
            name = GROUPS_PLAIN[0]
            uid = uids[name]
            # The control: switched to with its groups, outside, the user has both.
            outside = subprocess.run(
                self.host_cmd(["setpriv", "--reuid=%d" % uid, "--regid=%d" % primary,
                               "--init-groups", "id", "-G"], pre=pre),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                timeout=60, check=False)
            errs = []
            got = sorted(outside.stdout.decode().split())
            if got != sorted([str(primary), str(harmless_gid)]):
                errs.append("the control, outside with its groups: id -G says %r (stderr %r), "
                            "want %d and %d" % (got, outside.stderr.decode()[-400:], primary,
                                                harmless_gid))
            a = self.start(agent_cmd(name), run_args=["--user", name], pre=pre).finish()
            want = [str(uid), str(primary), str(primary), "req 200"]
            lines = a.stdout().split("\n")[:-1]
            if a.rc != 0 or lines != want:
                errs.append("exit %s, stdout %r, want 0 and %r (uid, gid, id -G the primary "
                            "gid alone, the request); stderr %r" % (a.rc, lines, want,
                                                                     a.stderr()[-800:]))
            marker = marker_of(name)
            st = os.stat(marker) if os.path.exists(marker) else None
            if st is None or (st.st_uid, st.st_gid) != (uid, primary):
                errs.append("%s on the host: %s, want owner %d:%d" % (
                    marker, st and (st.st_uid, st.st_gid), uid, primary))
            errs += self.check_audit(a.sandbox, [{"host": "origin.test", "decision": "allow"}],
                                     1)
            return errs + self.leftovers(a)

        try:
            try:
                uids, harmless_gid, pre = self.groups_fixture(where)
            except (OSError, RuntimeError) as e:
                self.result("--user with a supplementary group: the users' fixture", [str(e)])
                return
            for name, group in GROUPS_REFUSED:
                self.timed("root caller, --user %s (a member of group %s besides its own): "
                           "exit 2 naming the user and the group; the command never ran"
                           % (name, group), lambda name=name, group=group: refused(name, group))
            self.timed("root caller, --user %s (a member of the harmless %s): runs, and id -G "
                       "inside is its primary gid alone (outside, with its groups, both)"
                       % GROUPS_PLAIN, plain)
        finally:
            shutil.rmtree(where, ignore_errors=True)
            for name in uids:
                if os.path.exists(marker_of(name)):
                    os.unlink(marker_of(name))

    # ---- agentsnet selftest -----------------------------------------------------------

    def t_selftest(self):
        services = os.path.join(self.tmp, "host-services")
        os.makedirs(services, mode=0o755, exist_ok=True)
        os.chmod(services, 0o755)

        def selftest(user):
            # Bound in the caller's network namespace, as a host service beside it.
            svc = [HostService(os.path.join(services, "caller-netns.sock"),
                               ["ip", "netns", "exec", self.args.netns])]
            try:
                return run_selftest(user)
            finally:
                for one in svc:
                    one.close()

        def run_selftest(user):
            argv = [self.vars["agentsnet"], "selftest", "--socket-dir", self.vars["sock_dir"],
                    "-v"]
            # Unprivileged, the unlisted-socket probe's socket goes in the caller's home:
            # one of the user's own, as a real user's is.
            home = {}
            if user is not None:
                home["HOME"] = os.path.join(self.tmp, "home-%d" % user[0])
                os.makedirs(home["HOME"], mode=0o755, exist_ok=True)
                os.chown(home["HOME"], user[0], user[1])
            p = subprocess.run(self.host_cmd(argv, user), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               env=self.run_env(home), timeout=SELFTEST_TIMEOUT_S, check=False)
            out = p.stdout.decode("utf-8", "replace")
            err = p.stderr.decode("utf-8", "replace")
            verdicts = {}
            for line in out.splitlines():
                words = line.split()
                if len(words) >= 2 and words[1] in ("closed:", "OPEN:", "not-limited:"):
                    verdicts[words[0]] = words[1][:-1]
            errs = [] if p.returncode == 0 else ["exit %d; stdout:\n%s\nstderr:\n%s" % (
                p.returncode, out[-3000:], err[-2000:])]
            for name in SELFTEST_PROBES:
                # Unprivileged on a host that delegates no cgroup (this one: cgroup v1), the
                # daemon makes the run's cgroup (`sandbox limit`): memory is closed too.
                if verdicts.get(name) != "closed":
                    errs.append("probe %s: %s\n%s" % (name, verdicts.get(name, "missing"), err[-1500:]))
            if not re.search(r"^selftest: \d+ closed, 0 OPEN", out, re.M):
                errs.append("the summary does not say 0 OPEN:\n%s" % out)
            left = [s for s in self.listed() if s.startswith("selftest-")]
            if left:
                errs.append("selftest left sandboxes registered: %r" % left)
            return errs

        self.timed("agentsnet selftest as root: every probe (%s) says closed"
                   % ", ".join(SELFTEST_PROBES), lambda: selftest(None))
        if self.userns_allowed():
            self.timed("agentsnet selftest unprivileged (uid %d, user namespace): every probe "
                       "says closed" % self.unpriv_uid,
                       lambda: selftest((self.unpriv_uid, self.unpriv_uid)))
        else:
            self.result("agentsnet selftest unprivileged: this host refuses unprivileged user "
                        "namespaces, so `agentsnet run` cannot run unprivileged here",
                        ["unprivileged user namespaces are refused on this host"])

    # ---- the host's system directories: read-only ------------------------------------

    def t_readonly(self):
        tag = "agentsnet-it-ro-%d" % os.getpid()
        # Host directories the agent's uid owns (so only the mount can refuse a write there),
        # in the system directories the sandbox shows read-only, and an --ro-bind source; the
        # --bind source beside it is the control inside (it must stay writable).
        system = [os.path.join("/usr/local", tag), os.path.join("/etc", tag),
                  os.path.join("/opt", tag)]
        top = os.path.join("/var/lib", tag)
        ro_src, rw_src = os.path.join(top, "ro"), os.path.join(top, "rw")

        def readonly(user):
            a = self.agent(["python3", "-c", WRITE_PY] + system + [ro_src, rw_src], user=user,
                           run_args=["--ro-bind", ro_src, "--bind", rw_src])
            inside = dict(line.split(" ", 1) for line in a.stdout().splitlines() if " " in line)
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            for path in system + [ro_src]:
                if inside.get(path) != "EROFS":
                    errs.append("%s inside: %r, want EROFS (a read-only mount)" % (
                        path, inside.get(path)))
            if inside.get(rw_src) != "written":
                errs.append("--bind %s inside: %r, want written" % (rw_src, inside.get(rw_src)))
            # The mount table inside: the root, each system directory and the --ro-bind
            # source are mounts, read-only, and so is every mount below a system directory.
            mounts = inside.get("mounts", "").split()
            points = {m.rsplit(":", 1)[0] for m in mounts}
            for where in ("/", "/usr", "/etc", "/opt", ro_src):
                if where not in points:
                    errs.append("%s is no mount inside: %r" % (where, mounts))
            for m in mounts:
                where, how = m.rsplit(":", 1)
                top = "/" + where.split("/")[1] if where != "/" else "/"
                if how != "ro" and (top in ("/usr", "/etc", "/opt") or where in ("/", ro_src)):
                    errs.append("%s is mounted read-write inside" % where)
            # The control: the same writes outside, as the same uid, all succeed.
            who = user or (AGENT_DIR_OWNER[0], AGENT_DIR_OWNER[0])
            p = subprocess.run(self.host_cmd(["python3", "-c", WRITE_PY] + system + [ro_src],
                                             who), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60, check=False)
            outside = dict(line.split(" ", 1) for line in p.stdout.decode().splitlines()
                           if " " in line)
            for path in system + [ro_src]:
                if outside.get(path) != "written":
                    errs.append("the control, outside as uid %d: %s: %r (want written)" % (
                        who[0], path, outside.get(path)))
            return errs + self.leftovers(a)

        try:
            for d in system + [ro_src, rw_src]:
                os.makedirs(d, mode=0o755)
                os.chown(d, AGENT_DIR_OWNER[0], AGENT_DIR_OWNER[0])
            self.both_modes("the host's /usr, /etc, /opt and an --ro-bind source: a write by "
                            "their owner's uid is EROFS inside (a --bind source is written; "
                            "outside all are)", readonly)
        finally:
            for d in system + [top]:
                shutil.rmtree(d, ignore_errors=True)

    # ---- the defaults of --pids-max and --memory-max -----------------------------------

    def t_default_limits(self):
        run_cgroups = sys.modules[type(self).__module__].run_cgroups

        def limits_of(a):
            """{"pids": ..., "memory": ...} of <a>'s cgroup, read on the host while it runs."""
            got = {}
            for d in run_cgroups(a.sandbox):
                for key, name in (("pids", "pids.max"), ("memory", "memory.max"),
                                  ("memory", "memory.limit_in_bytes")):
                    path = os.path.join(d, name)
                    if os.path.exists(path):
                        got[key] = read_first(path)
            return got

        def defaults(user, run_args=(), want=None):
            go = self.go("limits")
            a = self.start(["sh", "-c", "echo ready; " + WAIT_FILE_SH % go], user=user,
                           run_args=list(run_args))
            try:
                a.wait_out("ready")
                got = limits_of(a)
                dirs = run_cgroups(a.sandbox)
            finally:
                with open(go, "w", encoding="ascii"):
                    pass
                a.finish()
            # The daemon's cgroup (agentsnet/<id>.<pid>, `sandbox limit`) counts the run
            # itself as one more pid; the run's own (agentsnet/<id>) does not.
            by_daemon = any(os.path.basename(d) != a.sandbox for d in dirs)
            want = dict(want or {"pids": 4096, "memory": 4 << 30})
            want["pids"] += 1 if by_daemon else 0
            want = {k: str(v) for k, v in want.items()}
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            if got != want:
                errs.append("the run's cgroup (%s): %r, want %r" % (
                    ", ".join(dirs) or "none found", got, want))
            return errs + self.leftovers(a)

        self.both_modes("without --pids-max and --memory-max, the run's cgroup holds 4096 pids "
                        "(one more, the run, in the daemon's) and 4G", defaults)
        # The control: the same files follow the flags, so they are the run's own.
        self.timed("the control: --pids-max 100 --memory-max 256M show in the same files",
                   lambda: defaults(None, ["--pids-max", "100", "--memory-max", "256M"],
                                    {"pids": 100, "memory": 256 << 20}))

    # ---- RLIMIT_MEMLOCK ----------------------------------------------------------------

    def t_memlock(self):
        def memlock(user):
            a = self.agent(["python3", "-c", MLOCK_PY], user=user)
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            want = ["limit %d %d" % (4 << 20, 4 << 20), "mlock 3 ok", "mlock 5 ENOMEM"]
            if a.stdout().split("\n")[:3] != want:
                errs.append("inside: %r, want %r" % (a.stdout(), want))
            # The control: outside, as the same uid, the host's limit lets 5 MiB be locked.
            who = user or (AGENT_DIR_OWNER[0], AGENT_DIR_OWNER[0])
            p = subprocess.run(self.host_cmd(["python3", "-c", MLOCK_PY], who),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                               check=False)
            out = p.stdout.decode().split("\n")
            if len(out) < 3 or out[2] != "mlock 5 ok":
                errs.append("the control, outside as uid %d: %r (want mlock 5 ok)" % (
                    who[0], p.stdout.decode() + p.stderr.decode()[-300:]))
            return errs + self.leftovers(a)

        self.both_modes("RLIMIT_MEMLOCK is 4 MiB inside: 3 MiB locks, 5 MiB is refused "
                        "(outside, the same uid locks 5 MiB)", memlock)

    # ---- descriptors of the caller ---------------------------------------------------

    def t_fds_closed(self):
        # The caller holds descriptors 7 (a file) and 8 (a directory) when it starts the run.
        pre = ["sh", "-c", 'exec 7<"$0" 8<"$1"; shift; exec "$@"', "/etc/hostname", "/"]

        def closed(user):
            a = self.agent(["python3", "-c", FDS_PY], user=user, pre=pre)
            errs = [] if a.rc == 0 else ["exit %s: %s" % (a.rc, a.stderr()[-1500:])]
            if a.stdout().strip() != "fds 0 1 2":
                errs.append("the agent holds %r, want fds 0 1 2" % a.stdout().strip())
            # The control: the same command after the same pre, outside, holds 7 and 8.
            p = subprocess.run(self.host_cmd(["python3", "-c", FDS_PY], user, pre),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                               stdin=subprocess.DEVNULL, check=False)
            if p.stdout.decode().strip() != "fds 0 1 2 7 8":
                errs.append("the control, outside: %r, want fds 0 1 2 7 8" % (
                    p.stdout.decode() + p.stderr.decode()[-300:]))
            return errs + self.leftovers(a)

        self.both_modes("descriptors 7 and 8 of agentsnet run's caller do not reach the agent "
                        "(outside, the same command holds them)", closed)

    # ---- agentsnet selftest's exit status -----------------------------------------------

    def t_selftest_status(self):
        def cmd(extra, user=None, home=None):
            argv = [self.vars["agentsnet"], "selftest"] + extra
            p = subprocess.run(self.host_cmd(argv, user), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               env=self.run_env(home), timeout=SELFTEST_TIMEOUT_S, check=False)
            return p.returncode, p.stdout.decode("utf-8", "replace"), \
                p.stderr.decode("utf-8", "replace")

        def could_not_run():
            errs = []
            empty = os.path.join(self.tmp, "no-daemon-%d" % os.getpid())
            os.makedirs(empty, exist_ok=True)
            try:
                for extra, says in (
                        (["--socket-dir", empty], "agentsnetd is not running"),
                        (["--socket-dir", self.vars["sock_dir"], "--probe",
                          "/nonexistent/agentsnet-probe"], "/nonexistent/agentsnet-probe")):
                    rc, out, err = cmd(extra)
                    if rc != 125 or says not in err:
                        errs.append("selftest %s: exit %d, stderr %r (want 125 naming %r)"
                                    % (" ".join(extra), rc, err[-500:], says))
                    if "closed:" in out:
                        errs.append("selftest %s reported probes: %r" % (extra, out[-500:]))
            finally:
                os.rmdir(empty)
            return errs

        def open_probe():
            # A weaker sandbox, honestly: --bridge names a stand-in that runs the agent
            # directly, without the bridge's seccomp filters. The probes run for real.
            weak = os.path.join(self.tmp, "bridge-without-filters")
            with open(weak, "w", encoding="ascii") as f:
                f.write(WEAK_BRIDGE_SH)
            os.chmod(weak, 0o755)
            rc, out, err = cmd(["--socket-dir", self.vars["sock_dir"], "--bridge", weak])
            opened = [line.split()[0] for line in out.splitlines()
                      if len(line.split()) > 1 and line.split()[1] == "OPEN:"]
            summary = re.search(r"^selftest: \d+ closed, (\d+) OPEN", out, re.M)
            errs = []
            if rc != 1:
                errs.append("exit %d, want 1 (a probe OPEN); stdout:\n%s\nstderr:\n%s" % (
                    rc, out[-3000:], err[-1500:]))
            if not opened or "io-uring" not in opened:
                errs.append("no probe OPEN without the filters (io-uring must be): %r" % opened)
            if not summary or int(summary.group(1)) != len(opened):
                errs.append("the summary does not count the %d OPEN: %r" % (
                    len(opened), out[-300:]))
            left = [s for s in self.listed() if s.startswith("selftest-")]
            if left:
                errs.append("selftest left sandboxes registered: %r" % left)
            log("# selftest with a bridge without filters: OPEN %s" % ", ".join(opened))
            return errs

        self.timed("agentsnet selftest that cannot run (no daemon at --socket-dir, no probe "
                   "binary): exit 125, saying why", could_not_run)
        self.timed("agentsnet selftest --bridge of a stand-in without the seccomp filters: "
                   "the probes it lets through are OPEN, exit 1", open_probe)


def read_first(path):
    with open(path, encoding="ascii") as f:
        return f.read().split("\n")[0].strip()


# t_readonly's writer: for each argument, "<path> written" or "<path> <errno name>" after
# trying to make a file in it; then "mounts <point>:<ro|rw> ..." of the mount table.
WRITE_PY = r"""
import errno, os, sys
for d in sys.argv[1:]:
    try:
        with open(os.path.join(d, "written-%d" % os.getpid()), "w") as f:
            f.write("x")
        print(d, "written")
    except OSError as e:
        print(d, errno.errorcode.get(e.errno, str(e.errno)))
seen = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    seen.append("%s:%s" % (f[4], "ro" if "ro" in f[5].split(",") else "rw"))
print("mounts", " ".join(seen))
"""

# t_default_limits' agent waits for the file $0... as sh -c's script: WAIT_FILE_SH % path.
WAIT_FILE_SH = 'while [ ! -e "%s" ]; do sleep 0.05; done'

# t_memlock's agent: its RLIMIT_MEMLOCK, then mlock of 3 MiB and of 5 MiB.
MLOCK_PY = r"""
import ctypes, errno, mmap, resource
print("limit %d %d" % resource.getrlimit(resource.RLIMIT_MEMLOCK))
libc = ctypes.CDLL(None, use_errno=True)
libc.mlock.argtypes = libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
for mib in (3, 5):
    size = mib << 20
    m = mmap.mmap(-1, size)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    if libc.mlock(addr, size) == 0:
        print("mlock", mib, "ok")
        libc.munlock(addr, size)
    else:
        print("mlock", mib, errno.errorcode.get(ctypes.get_errno(), "?"))
"""

# t_fds_closed's agent: the descriptors it holds, below 1024.
FDS_PY = r"""
import os
held = []
for fd in range(1024):
    try:
        os.fstat(fd)
        held.append(str(fd))
    except OSError:
        pass
print("fds", " ".join(held))
"""

# t_selftest_status' stand-in bridge: skips the bridge's options and runs the agent directly.
WEAK_BRIDGE_SH = """#!/bin/sh
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""
