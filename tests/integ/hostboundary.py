"""The host-boundary tests of the sandbox pass (issue 15): what an unprivileged host account
with access to the control socket must not gain through the root daemon. Mixed into
sandbox.py's Tests, whose helpers (ctl, host_cmd, timed, vars, tmp) they use.

- t_dir_race: an unprivileged member of the control group registers, removes and
  re-registers one sandbox id (owned and not) for RACE_SECONDS, while a thread of the same
  account tries, all along, to plant what would redirect the daemon: the sandbox's
  directory made in advance, a subdirectory left in it (which used to keep the directory
  alive for the next registration), symlinks to a root-owned file in place of egress.sock
  and ingress.sock, the directory renamed away. The root-owned target's mode never
  changes, nothing is ever planted, every registration gets a directory of the daemon's
  (root's, 0755; egress.sock the account's own, ingress.sock root's, both 0600) that is
  gone once the sandbox is removed, and an
  owned registration gets its ingress socket as a descriptor with the answer.
- t_second_account: a second host account in the control group (uid 65534) cannot
  register on a profile with an inject rule that does not name it (no-upgrades:
  forbidden, logged, nothing registered), cannot remove a sandbox root registered
  (it-parked: forbidden, still listed), and can remove its own; it holds at most
  daemon.sandboxes_per_user (6 here) at once: the seventh is `error limit`, a removal
  makes room.
- t_egress_owner: the egress socket of a sandbox that root's `agentsnet run` started for
  nobody is nobody's, mode 0600: another host account (uid 4242) is refused by the kernel
  (EACCES), nobody connects; its ingress socket refuses both (root's, 0600); an unprivileged caller cannot register a sandbox for another
  uid (forbidden), and the sandbox it registers for itself is its own, mode 0600.
- t_own_uid: root's `agentsnet run` without --user: each sandbox's agent runs as a uid of
  its own from daemon.sandbox_uids (gid the same number, no other group; "agent" in the
  sandbox's passwd and group, so whoami, Python's getpass and Node's os.userInfo() work),
  two at once get two uids, and a third run after both ended a third (a freed uid is not
  given again at once); the egress socket is that uid's, 0600: a host process as nobody
  (the uid every root sandbox shared before) is refused, the agent's uid connects; it
  cannot write root's files, and its requests (curl, Python) go through. Registering for
  a uid of the range by number is refused, and so is an unprivileged caller's "new".
- t_peer_check: what the socket's mode lets past is refused by the daemon: a host process
  as uid 4242 given CAP_DAC_OVERRIDE (which the kernel lets connect to a 0600 socket) gets
  403 peer_not_agent in-band before anything it sent is read, and the audit has the
  refusal with its uid; root, and the agent's own uid, are served on the same socket.
- t_revoke: a sandbox the unprivileged account registered on profile default (which its
  group nogroup may use) is removed when a reload takes nogroup off the profile's groups,
  and the reload says so; the policy file is put back (and reloaded) after.
- t_dir_leftover: a directory left at a sandbox's path (as an older daemon, which handed
  the directory to its owner, could leave one: the owner's, with a subdirectory and a
  symlink to a root-owned file in it) is removed whole, never followed, and replaced by
  a fresh one of the daemon's at the next registration; a sandbox of the policy file
  whose directory is someone else's is refused at reload, naming it.
- t_no_uid_socket: root's `sandbox add` without a uid (a container's agent, whose uid the
  daemon cannot know): egress.sock is 0666, and any account connects.
- t_release_unquarantined: `sandbox release` of a sandbox in no quarantine is
  `error not_quarantined`, and the sandbox stays.
- The tests below run against a SecondDaemon of SECOND_POLICY, beside the pass's:
- t_uid_range: daemon.sandbox_uids of one uid: while a sandbox holds it, `owned new` is
  `error limit` and root's `agentsnet run` without --user fails (125) saying so; once it is
  removed, the same request is served (the control).
- t_no_cgroup: a daemon with no cgroup hierarchy in view (`ip netns exec`'s fresh sysfs)
  and no CAP_SYS_ADMIN to mount one (the systemd unit's bounding set): `sandbox limit` is
  `error unsupported` (the pass's daemon: ok); an unprivileged run against it runs and
  says on stderr that its memory is not limited (against the pass's daemon it does not);
  an unprivileged `agentsnet selftest` against it says memory `not-limited`, 0 OPEN, exit 0.
- t_token_url: on a profile with `ingress.token: required`, `sandbox url` tells the token
  to root and to the registrant, and is `error forbidden` to another account (a URL without
  a token is told to anyone: the control); after a restart the policy file's sandbox has a
  new token and a run-time one (re-adopted) its old one (the control).
- t_alerts_own: sandboxes of root and of the unprivileged account each past the refusals
  threshold: root's `alerts` lists both, the account's its own alone.
- t_internal: the socket directory's file system remounted read-only: `sandbox add` is
  `error internal` naming the sandbox and `Read-only file system` (mkdir failed); with no
  inode left on it, `error internal` naming `No space left on device`, never `error limit`
  (the daemon's table is far from full) nor `no_such_profile`; served again after each.
"""

import errno
import json
import os
import re
import shutil
import stat
import subprocess
import time

from integlib import Fatal, control_exchange, free_ports, start_daemon, stop_daemon, wait_for

RACE_SECONDS = 10
RACE_TIMEOUT_S = RACE_SECONDS + 60

# The racer, run as the unprivileged account: argv = control socket, socket directory,
# sandbox id, target file, seconds. Prints one JSON object of what it saw.
RACE_PY = r"""
import array, json, os, socket, stat, sys, threading, time
ctl, sock_dir, sid, target, secs = sys.argv[1:6]
d = os.path.join(sock_dir, "sandboxes", sid)
stop = time.monotonic() + float(secs)
seen = {"added": 0, "removed": 0, "owned_fds": 0, "owned_adds": 0, "attacks": 0,
        "planted": [], "bad": [], "errors": []}

def call(line):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(ctl)
    s.sendall(line.encode() + b"\n")
    data, fds = b"", []
    while True:
        msg, anc, _flags, _addr = s.recvmsg(65536, socket.CMSG_SPACE(4 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(payload[:len(payload) - len(payload) % 4])
                fds.extend(a)
        if not msg:
            break
        data += msg
    s.close()
    for fd in fds:
        os.close(fd)
    return data.decode(), len(fds)

def attempts():
    yield "mkdir dir", lambda: os.mkdir(d)
    yield "mkdir sub", lambda: os.mkdir(os.path.join(d, "sub"))
    yield "symlink egress", lambda: os.symlink(target, os.path.join(d, "egress.sock"))
    yield "symlink ingress", lambda: os.symlink(target, os.path.join(d, "ingress.sock"))
    yield "unlink egress", lambda: os.unlink(os.path.join(d, "egress.sock"))
    yield "rename dir", lambda: os.rename(d, d + ".old")

def attacker():
    while time.monotonic() < stop:
        for what, attempt in attempts():
            seen["attacks"] += 1
            try:
                attempt()
                seen["planted"].append(what)
            except OSError:
                pass

t = threading.Thread(target=attacker)
t.start()
i = 0
while time.monotonic() < stop:
    owned = i % 2 == 0
    i += 1
    answer, fds = call("sandbox add %s default%s" % (sid, " owned" if owned else ""))
    if not answer.startswith("ok "):
        seen["errors"].append(answer.strip())
        continue
    seen["added"] += 1
    if owned:
        seen["owned_adds"] += 1
        seen["owned_fds"] += fds
    try:
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o755:
            seen["bad"].append("directory uid %d mode %o" % (st.st_uid, st.st_mode))
        # egress.sock: its agent's (this account's), 0600; ingress.sock: the daemon's, 0600.
        for name, uid in [("egress.sock", os.getuid())] + ([("ingress.sock", 0)] if owned else []):
            s = os.lstat(os.path.join(d, name))
            if not stat.S_ISSOCK(s.st_mode) or s.st_uid != uid or stat.S_IMODE(s.st_mode) != 0o600:
                seen["bad"].append("%s uid %d mode %o" % (name, s.st_uid, s.st_mode))
    except OSError as e:
        seen["bad"].append("lstat: %s" % e)
    answer, _ = call("sandbox rm %s" % sid)
    if answer.startswith("ok"):
        seen["removed"] += 1
        if os.path.lexists(d):
            seen["bad"].append("the directory outlived its removal")
    else:
        seen["errors"].append(answer.strip())
t.join()
print(json.dumps(seen))
"""


# A host account that is neither root nor the agents' nobody.
OTHER_UID = 4242

# daemon.sandboxes_per_user in the pass's policy (sandbox-cases/policy.yaml.in).
PER_USER = 6

# The daemon's default daemon.sandbox_uids (core/limits.h): the pass's policy names none.
SANDBOX_UID_FIRST, SANDBOX_UID_COUNT = 1879048192, 65536

# What t_own_uid's agent prints, then it waits for a line on stdin (it can read nothing of
# the pass's directories, so no go file): argv = guarded root file, URL.
OWN_UID_SH = r"""
id -u; id -g; id -G; whoami
python3 -c 'import getpass; print(getpass.getuser())'
node -e 'console.log(require("os").userInfo().username)'
(echo agent >>"$1") 2>/dev/null && echo wrote-file || echo file-refused
curl -sS --max-time 15 -o /dev/null -w 'curl %{http_code}\n' "$2"
python3 -c 'import sys, urllib.request; print("python", urllib.request.urlopen(sys.argv[1], timeout=15).status)' "$2"
echo ready
read line || true
"""

# Connects to argv[1]: prints "connected" or the errno's name.
CONNECT_PY = r"""
import errno, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
"""

# One request on the Unix socket argv[1]: argv[2] is the request line's URL; prints the
# status line and the X-Agent-Reason header's value ("-" when none), or the errno's name.
REQUEST_PY = r"""
import errno, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(15)
try:
    s.connect(sys.argv[1])
    host = sys.argv[2].split("/")[2]
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
               % (sys.argv[2], host)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(65536)
        if not got:
            break
        data += got
    head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    reason = [h.split(":", 1)[1].strip() for h in head[1:] if
              h.lower().startswith("x-agent-reason:")]
    print(head[0][:12], reason[0] if reason else "-")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
"""

# The scripts' control request: call(<control socket>, <line>) is the whole answer.
CTL_CALL_PY = r"""
import socket

def call(ctl, line):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(ctl)
    s.sendall(line.encode() + b"\n")
    data = b""
    while True:
        got = s.recv(65536)
        if not got:
            break
        data += got
    s.close()
    return data.decode()
"""

# One control request: argv = control socket, request line; prints the answer.
CTL_PY = CTL_CALL_PY + r"""
import sys
sys.stdout.write(call(sys.argv[1], sys.argv[2]))
"""

# t_run_cgroup's caller, run as the unprivileged account: argv = control socket, sandbox id,
# a root-registered sandbox's id. Registers <id> owned, tries what must be refused, then
# has the daemon limit it and tries to exceed the limits. Prints one JSON object.
RUN_CGROUP_PY = CTL_CALL_PY + r"""
import json, os, sys, time
ctl, sid, roots = sys.argv[1:4]
MIB = 1024 * 1024

def first(line):
    # The answer's first line.
    lines = call(ctl, line).splitlines()
    return lines[0] if lines else "(no answer)"

def in_child(fn):
    # fn() in a forked child; its exit status (or -signal).
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(fn())
        except BaseException:
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)

def cgroups():
    with open("/proc/self/cgroup") as f:
        return [l.strip() for l in f if ":pids:" in l or ":memory:" in l or l.startswith("0::")]

out = {"before": cgroups()}
out["add"] = first("sandbox add %s other owned" % sid)
# Another process of the same account is not the owner.
out["from_child"] = in_child(lambda: 0 if first("sandbox limit %s 16 %d" % (sid, 64 * MIB))
                             .startswith("error forbidden") else 1)
out["roots"] = first("sandbox limit %s 16 %d" % (roots, 64 * MIB))
out["missing"] = first("sandbox limit %s-none 16 %d" % (sid, 64 * MIB))
out["none"] = first("sandbox limit %s 0 0" % sid)
out["junk"] = first("sandbox limit %s 16 64M" % sid)
out["limit"] = first("sandbox limit %s 16 %d" % (sid, 64 * MIB))
out["again"] = first("sandbox limit %s 16 %d" % (sid, 64 * MIB))
out["after"] = cgroups()

def touch(n):
    b = bytearray(n)
    for i in range(0, n, 4096):
        b[i] = 1
    return 0
out["touch_16m"] = in_child(lambda: touch(16 * MIB))
out["touch_128m"] = in_child(lambda: touch(128 * MIB))

def fork_many():
    kids, refused = [], 0
    for _ in range(40):
        try:
            pid = os.fork()
        except OSError:
            refused += 1
            continue
        if pid == 0:
            time.sleep(3)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    return min(refused, 100)
out["forks_refused"] = in_child(fork_many)
out["rm"] = first("sandbox rm %s" % sid)
print(json.dumps(out))
"""


def cgroup_dirs(lines):
    """The host's directories of the /proc/<pid>/cgroup <lines> (v1 pids and memory, or
    v2), as the host's /sys/fs/cgroup shows them."""
    dirs = []
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            dirs.append("/sys/fs/cgroup" + path)
        for name in ("pids", "memory"):
            if name in ctrls.split(","):
                dirs.append("/sys/fs/cgroup/%s%s" % (name, path))
    return dirs


class HostBoundaryTests:

    def t_second_account(self):
        def second_account():
            sid = "it-second-%d" % os.getpid()
            errs = []
            mine = self.unpriv_ctl("sandbox add %s no-upgrades" % sid)
            if not mine.startswith("error forbidden uid %d may not register" % self.unpriv_uid):
                errs.append("register on no-upgrades (an inject profile): %r" % mine)
            if sid in self.listed():
                errs.append("%s was registered anyway" % sid)
                self.ctl("sandbox rm %s" % sid)
            theirs = self.unpriv_ctl("sandbox rm it-parked")
            if not theirs.startswith("error forbidden sandbox it-parked was registered by uid 0"):
                errs.append("remove root's it-parked: %r" % theirs)
            if "it-parked" not in self.listed():
                errs.append("it-parked is gone")
            own = self.unpriv_ctl("sandbox add %s other" % sid)
            if not own.startswith("ok "):
                errs.append("register on other (no inject rule): %r" % own)
            gone = self.unpriv_ctl("sandbox rm %s" % sid)
            if not gone.startswith("ok"):
                errs.append("remove its own: %r" % gone)
            # daemon.sandboxes_per_user (6 in the pass's policy): the seventh is refused,
            # and a removal makes room again; root's are never counted.
            held = ["%s-q%d" % (sid, i) for i in range(PER_USER)]
            for i, q in enumerate(held):
                got = self.unpriv_ctl("sandbox add %s other" % q)
                if not got.startswith("ok "):
                    errs.append("registration %d of %d: %r" % (i + 1, PER_USER, got))
            over = self.unpriv_ctl("sandbox add %s-over other" % sid)
            if not over.startswith("error limit uid %d holds %d sandboxes already" % (
                    self.unpriv_uid, PER_USER)):
                errs.append("registration %d: %r, want error limit" % (PER_USER + 1, over))
            self.unpriv_ctl("sandbox rm %s" % held[0])
            again = self.unpriv_ctl("sandbox add %s-over other" % sid)
            if not again.startswith("ok "):
                errs.append("after a removal: %r" % again)
            for q in held[1:] + ["%s-over" % sid]:
                self.unpriv_ctl("sandbox rm %s" % q)
            return errs

        self.timed("a second account in the control group cannot register on an inject "
                   "profile not granted to it, nor remove root's sandbox, nor hold more than "
                   "sandboxes_per_user; it removes its own",
                   second_account)

    def t_egress_owner(self):
        def egress_owner():
            go = self.go("egress-owner")
            a = self.start(["sh", "-c", 'echo ready; while [ ! -e "%s" ]; do sleep 0.05; done'
                            % go])
            errs = []
            try:
                a.wait_out("ready")
                path = os.path.join(self.vars["sock_dir"], "sandboxes", a.sandbox, "egress.sock")
                st = os.lstat(path)
                if st.st_uid != self.unpriv_uid or stat.S_IMODE(st.st_mode) != 0o600:
                    errs.append("egress.sock is uid %d mode %o, want %d 600" % (
                        st.st_uid, stat.S_IMODE(st.st_mode), self.unpriv_uid))
                for uid, want in ((OTHER_UID, "EACCES"), (self.unpriv_uid, "connected")):
                    got = self.connect_as(uid, path)
                    if got != want:
                        errs.append("uid %d connecting: %s, want %s" % (uid, got, want))
                # Its ingress socket is the daemon's (root's, 0600): no host account but root.
                ingress = os.path.join(os.path.dirname(path), "ingress.sock")
                for uid in (OTHER_UID, self.unpriv_uid):
                    got = self.connect_as(uid, ingress)
                    if got != "EACCES":
                        errs.append("uid %d connecting to ingress.sock: %s, want EACCES" % (
                            uid, got))
            finally:
                with open(go, "w", encoding="ascii"):
                    pass
                a.finish()
            if a.rc != 0:
                errs.append("exit %s: %s" % (a.rc, a.stderr()[-1500:]))
            sid = "it-foreign-%d" % os.getpid()
            got = self.unpriv_ctl("sandbox add %s other owned %d" % (sid, OTHER_UID))
            if not got.startswith("error forbidden uid %d may register sandboxes for its own "
                                  "uid only" % self.unpriv_uid):
                errs.append("register for another uid: %r" % got)
            got = self.unpriv_ctl("sandbox add %s other" % sid)
            if not got.startswith("ok "):
                errs.append("register for itself: %r" % got)
            else:
                st = os.lstat(os.path.join(got[3:], "egress.sock"))
                if st.st_uid != self.unpriv_uid or stat.S_IMODE(st.st_mode) != 0o600:
                    errs.append("its own sandbox's egress.sock is uid %d mode %o" % (
                        st.st_uid, stat.S_IMODE(st.st_mode)))
                self.unpriv_ctl("sandbox rm %s" % sid)
            return errs + self.leftovers(a)

        def added_with_uid():
            # Root's lasting registration for an agent's uid (a container's, say), by the CLI.
            errs = []
            sid = "it-uid-%d" % os.getpid()
            self.ids.add(sid)  # the connection below leaves a close record under it
            p = subprocess.run(self.host_cmd([self.vars["agentsnet"], "sandbox", "add", sid,
                                              "--profile", "other", "--uid", str(OTHER_UID),
                                              "--socket-dir", self.vars["sock_dir"]]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                               check=False)
            path = os.path.join(self.vars["sock_dir"], "sandboxes", sid, "egress.sock")
            try:
                if p.returncode != 0:
                    return ["agentsnet sandbox add --uid: exit %d, %r" % (
                        p.returncode, p.stderr.decode()[-300:])]
                st = os.lstat(path)
                if st.st_uid != OTHER_UID or stat.S_IMODE(st.st_mode) != 0o600:
                    errs.append("--uid %d: egress.sock is uid %d mode %o" % (
                        OTHER_UID, st.st_uid, stat.S_IMODE(st.st_mode)))
                for uid, want in ((OTHER_UID, "connected"), (self.unpriv_uid, "EACCES")):
                    got = self.connect_as(uid, path)
                    if got != want:
                        errs.append("--uid %d, uid %d connecting: %s, want %s" % (
                            OTHER_UID, uid, got, want))
            finally:
                self.ctl("sandbox rm %s" % sid)
            got = self.unpriv_ctl("sandbox add %s other uid %d" % (sid, OTHER_UID))
            if not got.startswith("error forbidden uid %d may register sandboxes for its own "
                                  "uid only" % self.unpriv_uid):
                errs.append("an unprivileged add for uid %d: %r" % (OTHER_UID, got))
                self.ctl("sandbox rm %s" % sid)
            return errs

        self.timed("root's agentsnet sandbox add --uid 4242: egress.sock 4242's, 0600 (4242 "
                   "connects, nobody is refused); an unprivileged caller cannot add for 4242",
                   added_with_uid)
        self.timed("an egress socket is its agent's uid's alone (0600): another host account "
                   "is refused, the agent's uid connects; no caller registers for another uid",
                   egress_owner)

    def t_own_uid(self):
        def own_uid():
            guarded = self.root_target("own-uid-guarded")
            os.chmod(guarded, 0o644)
            cmd = ["sh", "-c", OWN_UID_SH, "own-uid", guarded, self.url()]
            runs = [self.start(cmd, own_uid=True, stdin=subprocess.PIPE) for _ in range(2)]
            errs, uids = [], []
            try:
                for a in runs:
                    a.wait_out("ready")
                    got = a.stdout().strip().split("\n")
                    uid = int(got[0]) if got and got[0].isdigit() else -1
                    uids.append(uid)
                    want = [str(uid), str(uid), str(uid), "agent", "agent", "agent",
                            "file-refused", "curl 200", "python 200", "ready"]
                    if not SANDBOX_UID_FIRST <= uid < SANDBOX_UID_FIRST + SANDBOX_UID_COUNT:
                        errs.append("%s: uid %d, not one of daemon.sandbox_uids" % (a.sandbox, uid))
                    if got != want:
                        errs.append("%s: stdout %r, want %r; stderr %r" % (
                            a.sandbox, got, want, a.stderr()[-800:]))
                    path = os.path.join(self.vars["sock_dir"], "sandboxes", a.sandbox,
                                        "egress.sock")
                    st = os.lstat(path)
                    if st.st_uid != uid or stat.S_IMODE(st.st_mode) != 0o600:
                        errs.append("%s: egress.sock is uid %d mode %o, want %d 600" % (
                            a.sandbox, st.st_uid, stat.S_IMODE(st.st_mode), uid))
                    for who, want_c in ((65534, "EACCES"), (OTHER_UID, "EACCES"),
                                        (uid, "connected")):
                        c = self.connect_as(who, path)
                        if c != want_c:
                            errs.append("%s: uid %d connecting: %s, want %s" % (
                                a.sandbox, who, c, want_c))
                if len(set(uids)) != 2:
                    errs.append("two sandboxes at once share a uid: %r" % uids)
            finally:
                for a in runs:
                    a.proc.stdin.close()
                    a.finish()
            for a in runs:
                if a.rc != 0:
                    errs.append("%s: exit %s: %s" % (a.sandbox, a.rc, a.stderr()[-1500:]))
                errs += self.check_audit(a.sandbox, [{"host": "origin.test",
                                                      "decision": "allow"}], 2)
                errs += self.leftovers(a, need_ns=False)
            with open(guarded, encoding="ascii") as f:
                if f.read() != "root's\n":
                    errs.append("an agent wrote root's %s" % guarded)
            third = self.start(["id", "-u"], own_uid=True).finish()
            out = third.stdout().strip()
            if third.rc != 0 or not out.isdigit() or int(out) in uids:
                errs.append("the run after: exit %s, uid %r; want one other than %r" % (
                    third.rc, out, uids))
            errs += self.leftovers(third, need_ns=False)
            return errs

        def named_in_range():
            errs = []
            sid = "it-pooluid-%d" % os.getpid()
            got = self.ctl("sandbox add %s other owned %d" % (sid, SANDBOX_UID_FIRST + 7))
            if not got or not got[0].startswith("error forbidden uid %d is one of "
                                                "daemon.sandbox_uids" % (SANDBOX_UID_FIRST + 7)):
                errs.append("root naming a uid of the range: %r" % got)
            got = self.unpriv_ctl("sandbox add %s other owned new" % sid)
            if not got.startswith("error forbidden only root is given a new uid"):
                errs.append("unprivileged \"new\": %r" % got)
            if sid in self.listed():
                errs.append("%s was registered anyway" % sid)
                self.ctl("sandbox rm %s" % sid)
            return errs

        self.timed("root's agentsnet run without --user: each sandbox's agent is a uid of its "
                   "own (two at once differ, a freed one is not given at once), named agent "
                   "inside; its egress socket refuses nobody and 4242", own_uid)
        self.timed("a uid of daemon.sandbox_uids named by number, and an unprivileged "
                   "caller's \"new\": forbidden, nothing registered", named_in_range)

    def t_peer_check(self):
        def peer_check():
            a = self.start(["sh", "-c", "echo ready; read line || true"], stdin=subprocess.PIPE)
            errs = []
            url = "http://origin.test:%d/small.json" % self.vars["http_port"]
            try:
                a.wait_out("ready")
                path = os.path.join(self.vars["sock_dir"], "sandboxes", a.sandbox, "egress.sock")
                dac = ["--inh-caps=+dac_override", "--ambient-caps=+dac_override"]
                for who, pre, want in ((OTHER_UID, dac, "HTTP/1.1 403 peer_not_agent"),
                                       (0, None, "HTTP/1.1 200 -"),
                                       (65534, (), "HTTP/1.1 200 -")):
                    got = self.run_as(who, REQUEST_PY, path, url, caps=pre)
                    if got != want:
                        errs.append("uid %d%s: %r, want %r" % (
                            who, " with CAP_DAC_OVERRIDE" if pre else "", got, want))
            finally:
                a.proc.stdin.close()
                a.finish()
            if a.rc != 0:
                errs.append("exit %s: %s" % (a.rc, a.stderr()[-1500:]))
            errs += self.check_audit(a.sandbox, [
                {"reason": "peer_not_agent", "status": 403, "decision": "deny",
                 "detail": {"contains": "peer uid %d " % OTHER_UID}},
                {"host": "origin.test", "decision": "allow"}], 3)
            return errs + self.leftovers(a)

        self.timed("uid 4242 with CAP_DAC_OVERRIDE (past the 0600 mode) on nobody's egress "
                   "socket: 403 peer_not_agent, audited with its uid; root and nobody are "
                   "served", peer_check)

    def t_revoke(self):
        def revoke():
            errs = []
            sid = "it-revoke-%d" % os.getpid()
            got = self.unpriv_ctl("sandbox add %s default" % sid)
            if not got.startswith("ok "):
                return ["register on default: %r" % got]
            policy = self.vars["policy"]
            with open(policy, encoding="utf-8") as f:
                before = f.read()
            if "    groups: [nogroup]\n" not in before:
                return ["the pass's policy no longer names nogroup on default"]
            try:
                with open(policy, "w", encoding="utf-8") as f:
                    f.write(before.replace("    groups: [nogroup]\n", "    groups: [root]\n"))
                got = self.ctl("policy reload")
                if not got or not got[0].startswith("ok ") or \
                        "1 whose registrant the policy no longer admits" not in got[0]:
                    errs.append("reload: %r" % got)
                if sid in self.listed():
                    errs.append("%s is still registered" % sid)
                    self.ctl("sandbox rm %s" % sid)
                if os.path.exists(os.path.join(self.vars["sock_dir"], "sandboxes", sid)):
                    errs.append("%s's directory is still there" % sid)
            finally:
                with open(policy, "w", encoding="utf-8") as f:
                    f.write(before)
                got = self.ctl("policy reload")
                if not got or not got[0].startswith("ok "):
                    errs.append("reload of the pass's own policy: %r" % got)
            return errs

        self.timed("a reload that takes the registrant's group off a profile removes its "
                   "sandbox there, and says so", revoke)

    def run_as(self, uid, script, *args, caps=None):
        """The Python <script> with <args>, as <uid>: the first line it printed, or what
        it said on stderr."""
        if uid == 0:
            cmd = self.host_cmd(["python3", "-c", script] + list(args))
        else:
            cmd = self.host_cmd(list(caps or ()) + ["python3", "-c", script] + list(args),
                                (uid, uid))
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                           check=False)
        return (p.stdout.decode().splitlines() or ["(none) " + p.stderr.decode()[-300:]])[0]

    def connect_as(self, uid, path):
        """Connects to the Unix socket <path> as <uid>: "connected" or the errno's name."""
        return self.run_as(uid, CONNECT_PY, path)

    def t_run_cgroup(self):
        def run_cgroup():
            sid = "it-cg-%d" % os.getpid()
            p = subprocess.run(self.host_cmd(["python3", "-c", RUN_CGROUP_PY, self.vars["control"],
                                              sid, "it-parked"],
                                             (self.unpriv_uid, self.unpriv_uid)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=90,
                               check=False)
            try:
                out = json.loads(p.stdout.decode().splitlines()[-1])
            except (IndexError, ValueError):
                return ["the caller printed nothing: exit %d, %s" % (
                    p.returncode, p.stderr.decode()[-800:])]
            errs = []
            want = {"add": "ok ", "roots": "error forbidden", "missing": "error no_such_sandbox",
                    "none": "error bad_request", "junk": "error bad_request", "limit": "ok",
                    "again": "error exists", "rm": "ok"}
            for key, prefix in want.items():
                if not out[key].startswith(prefix):
                    errs.append("%s: %r, want %r..." % (key, out[key], prefix))
            if out["from_child"] != 0:
                errs.append("a second process of the same account was not refused")
            name = "/agentsnet/%s." % sid
            # v1 (pids and memory lines) or v2 (the 0:: line, when there is no v1 line).
            v1 = [l for l in out["after"] if not l.startswith("0::")]
            limited = v1 or out["after"]
            moved = [l for l in limited if name in l]
            if len(moved) != len(limited) or not moved:
                errs.append("the caller's cgroups after the limit: %r (before: %r)" % (
                    out["after"], out["before"]))
            if out["touch_16m"] != 0:
                errs.append("16 MiB under a 64 MiB limit: exit %r" % out["touch_16m"])
            if out["touch_128m"] != -9:
                errs.append("128 MiB under a 64 MiB limit: exit %r, want the OOM kill (-9)"
                            % out["touch_128m"])
            # 16 pids: the caller, the forking child and 14 more; 40 forks, 26 refused.
            if not 20 <= out["forks_refused"] <= 30:
                errs.append("40 forks under pids 16: %r refused, want about 26"
                            % out["forks_refused"])
            # The daemon removes the cgroup once the sandbox is gone and the caller exited.
            dirs = cgroup_dirs(moved)
            deadline = time.monotonic() + 5
            while any(os.path.exists(d) for d in dirs) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = [d for d in dirs if os.path.exists(d)]
            if left:
                errs.append("cgroups left 5 s after the caller ended: %r" % left)
            return errs

        self.timed("`sandbox limit`: the daemon makes an unprivileged run's cgroup and moves "
                   "the caller in (64 MiB: 128 MiB is OOM-killed; 16 pids: forks refused); "
                   "refused to another process of the account, for root's sandbox, twice, "
                   "without limits; removed after",
                   run_cgroup)

    def unpriv_ctl(self, line):
        """One control request as the unprivileged account; the answer's first line."""
        return self.run_as(self.unpriv_uid, CTL_PY, self.vars["control"], line)

    def root_target(self, name):
        """A root-owned file of mode 0600 in the pass's directory: what an attack would
        make the daemon change."""
        target = os.path.join(self.tmp, name)
        with open(target, "w", encoding="ascii") as f:
            f.write("root's\n")
        os.chmod(target, 0o600)
        return target

    def t_dir_leftover(self):
        def leftover():
            target = self.root_target("root-only-leftover-target")
            sid = "it-leftover-%d" % os.getpid()
            d = os.path.join(self.vars["sock_dir"], "sandboxes", sid)
            os.makedirs(os.path.join(d, "sub", "deeper"))
            os.symlink(target, os.path.join(d, "egress.sock"))
            os.symlink(os.path.dirname(target), os.path.join(d, "sub", "dirlink"))
            for path in (d, os.path.join(d, "sub"), os.path.join(d, "sub", "deeper")):
                os.chown(path, self.unpriv_uid, self.unpriv_uid)
            errs = []
            got = self.ctl("sandbox add %s default" % sid)
            if not got or not got[0].startswith("ok "):
                return ["sandbox add over a leftover directory: %r" % got]
            st = os.lstat(d)
            if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o755:
                errs.append("the directory is uid %d mode %o, not a fresh one of root's" % (
                    st.st_uid, stat.S_IMODE(st.st_mode)))
            if sorted(os.listdir(d)) != ["egress.sock"]:
                errs.append("the leftover's entries survived: %s" % sorted(os.listdir(d)))
            if not stat.S_ISSOCK(os.lstat(os.path.join(d, "egress.sock")).st_mode):
                errs.append("egress.sock is not the daemon's socket")
            st = os.lstat(target)
            if stat.S_IMODE(st.st_mode) != 0o600 or not os.path.exists(target):
                errs.append("the symlink's target changed: mode %o" % stat.S_IMODE(st.st_mode))
            got = self.ctl("sandbox rm %s" % sid)
            if not got or not got[0].startswith("ok"):
                errs.append("sandbox rm: %r" % got)
            if os.path.lexists(d):
                errs.append("%s is left after the removal" % d)
            return errs

        self.timed("a directory left at a sandbox's path (another account's, with a "
                   "subdirectory and symlinks in it) is removed whole without following a "
                   "link, and the registration gets a fresh one of the daemon's", leftover)

    def t_dir_race(self):
        def race():
            target = self.root_target("root-only-target")
            sid = "it-race-%d" % os.getpid()
            argv = ["python3", "-c", RACE_PY, self.vars["control"], self.vars["sock_dir"], sid,
                    target, str(RACE_SECONDS)]
            p = subprocess.run(self.host_cmd(argv, (self.unpriv_uid, self.unpriv_uid)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=RACE_TIMEOUT_S, check=False)
            errs = []
            st = os.lstat(target)
            if stat.S_IMODE(st.st_mode) != 0o600 or st.st_uid != 0:
                errs.append("the root-owned target is now uid %d mode %o" % (
                    st.st_uid, stat.S_IMODE(st.st_mode)))
            if p.returncode != 0:
                return errs + ["racer exit %d: %s" % (p.returncode, p.stderr.decode()[-2000:])]
            seen = json.loads(p.stdout.decode().strip().splitlines()[-1])
            if seen["planted"]:
                errs.append("the unprivileged account planted: %s" % sorted(set(seen["planted"])))
            if seen["bad"]:
                errs.append("registrations with a directory or socket not the daemon's: %s"
                            % seen["bad"][:5])
            if seen["added"] < 20 or seen["removed"] != seen["added"]:
                errs.append("added %d, removed %d (want >= 20, all removed); errors %s" % (
                    seen["added"], seen["removed"], seen["errors"][:3]))
            if seen["owned_fds"] != seen["owned_adds"]:
                errs.append("%d owned registrations, %d ingress sockets passed" % (
                    seen["owned_adds"], seen["owned_fds"]))
            left = os.path.join(self.vars["sock_dir"], "sandboxes", sid)
            if os.path.lexists(left) or os.path.lexists(left + ".old"):
                errs.append("%s is left after the last removal" % left)
            print("# race: %d registrations, %d attacks" % (seen["added"], seen["attacks"]))
            return errs

        self.timed("an unprivileged control-group member racing symlinks, subdirectories and "
                   "renames against %d s of registering and removing one id: the root-owned "
                   "target's mode never changes, nothing is planted, every registration gets "
                   "a fresh directory of the daemon's" % RACE_SECONDS, race)

    def t_no_uid_socket(self):
        def no_uid():
            errs = []
            sid = "it-nouid-%d" % os.getpid()
            self.ids.add(sid)  # the connections below leave close records under it
            got = self.ctl("sandbox add %s other" % sid)
            if not got or not got[0].startswith("ok "):
                return ["root's sandbox add without a uid: %r" % got]
            try:
                path = os.path.join(got[0][3:], "egress.sock")
                st = os.lstat(path)
                if not stat.S_ISSOCK(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o666:
                    errs.append("egress.sock of a sandbox without a uid: mode %o, want 666"
                                % stat.S_IMODE(st.st_mode))
                # Any account may connect: the agent's uid is not known to the daemon.
                for uid in (OTHER_UID, self.unpriv_uid):
                    c = self.connect_as(uid, path)
                    if c != "connected":
                        errs.append("uid %d connecting: %s, want connected" % (uid, c))
            finally:
                self.ctl("sandbox rm %s" % sid)
            return errs

        self.timed("root's `sandbox add` without a uid (a container's agent): egress.sock "
                   "mode 0666, any account connects", no_uid)

    def t_release_unquarantined(self):
        def release():
            errs = []
            got = self.ctl("sandbox release it-parked")
            if not got or not got[0].startswith("error not_quarantined sandbox it-parked is "
                                                 "not in quarantine"):
                errs.append("release of it-parked (in no quarantine): %r" % got)
            if "it-parked" not in self.listed():
                errs.append("it-parked is gone")
            return errs

        self.timed("`sandbox release` of a sandbox in no quarantine: error not_quarantined",
                   release)

    # ---- a second daemon of a policy of its own ---------------------------------------

    def t_uid_range(self):
        def exhausted(d):
            errs = []
            first = d.uid_first
            got = d.ctl("sandbox add it2-a default owned new")
            if not got.startswith("ok uid %d " % first):
                return ["the one uid of the range: %r, want ok uid %d" % (got, first)]
            try:
                got = d.ctl("sandbox add it2-b default owned new")
                if not got.startswith("error limit "):
                    errs.append("a second sandbox with the range's one uid taken: %r, want "
                                "error limit" % got)
                if "it2-b" in d.listed():
                    errs.append("it2-b was registered anyway")
                # What an operator sees: root's agentsnet run without --user fails (125).
                a = self.start(["sh", "-c", "echo ran"], own_uid=True,
                               socket_dir=d.sock_dir).finish()
                if a.rc != 125 or "ran" in a.stdout() or "error limit" not in a.stderr():
                    errs.append("agentsnet run with no uid left: exit %s, stdout %r, stderr %r "
                                "(want 125 saying error limit)" % (a.rc, a.stdout(),
                                                                    a.stderr()[-500:]))
                errs += self.leftovers(a, need_ns=False)
            finally:
                d.ctl("sandbox rm it2-a")
            # The control: the uid freed, the same request is served.
            got = d.ctl("sandbox add it2-b default owned new")
            if not got.startswith("ok uid %d " % first):
                errs.append("once it2-a is removed: %r, want ok uid %d" % (got, first))
            d.ctl("sandbox rm it2-b")
            return errs

        self.with_second("daemon.sandbox_uids of one uid: `owned new` while it is held is "
                         "error limit (agentsnet run says so, 125); served once it is freed",
                         exhausted)

    def t_no_cgroup(self):
        sid = "it-nocg-%d" % os.getpid()

        def limit(control):
            p = subprocess.run(self.host_cmd(["python3", "-c", LIMIT_PY, control, sid],
                                             (self.unpriv_uid, self.unpriv_uid)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                               check=False)
            return (p.stdout.decode().splitlines() or ["(none) " + p.stderr.decode()[-300:]])

        def unsupported(d):
            errs = []
            got = limit(d.control)
            if len(got) != 3 or not got[0].startswith("ok ") or \
                    not got[1].startswith("error unsupported ") or got[2] != "ok":
                errs.append("a daemon with no cgroup hierarchy: add, limit, rm: %r (want the "
                            "limit error unsupported)" % got)
            # The control: the pass's daemon, which has the hierarchies, makes the cgroup.
            got = limit(self.vars["control"])
            if len(got) != 3 or got[1] != "ok":
                errs.append("the control, the pass's daemon: add, limit, rm: %r (want ok)"
                            % got)
            return errs

        def run_says(d):
            errs = []
            user = (self.unpriv_uid, self.unpriv_uid)
            a = self.start(["sh", "-c", "echo ran"], user=user, socket_dir=d.sock_dir,
                           wrap=False).finish()
            if a.rc != 0 or a.stdout() != "ran\n" or MEMORY_UNLIMITED not in a.stderr():
                errs.append("unprivileged run, no cgroup: exit %s, stdout %r, stderr %r (want "
                            "it run, saying %r)" % (a.rc, a.stdout(), a.stderr()[-800:],
                                                    MEMORY_UNLIMITED))
            errs += self.leftovers(a, need_ns=False)
            # The control: against the pass's daemon, which makes the cgroup, no such line.
            c = self.start(["sh", "-c", "echo ran"], user=user, wrap=False).finish()
            if c.rc != 0 or MEMORY_UNLIMITED in c.stderr():
                errs.append("the control, the pass's daemon: exit %s, stderr %r" % (
                    c.rc, c.stderr()[-800:]))
            return errs + self.leftovers(c, need_ns=False)

        def selftest(d):
            home = os.path.join(self.tmp, "home-nocg-%d" % self.unpriv_uid)
            os.makedirs(home, mode=0o755, exist_ok=True)
            os.chown(home, self.unpriv_uid, self.unpriv_uid)
            p = subprocess.run(self.host_cmd([self.vars["agentsnet"], "selftest", "--socket-dir",
                                              d.sock_dir],
                                             (self.unpriv_uid, self.unpriv_uid)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, env=self.run_env({"HOME": home}),
                               timeout=120, check=False)
            out = p.stdout.decode("utf-8", "replace")
            errs = []
            memory = [line for line in out.splitlines() if line.startswith("memory ")]
            if p.returncode != 0:
                errs.append("exit %d, want 0 (memory not limited fails nothing); stdout:\n%s\n"
                            "stderr:\n%s" % (p.returncode, out[-3000:],
                                             p.stderr.decode()[-1500:]))
            if len(memory) != 1 or memory[0].split()[1] != "not-limited:":
                errs.append("the memory probe: %r, want not-limited" % memory)
            if not re.search(r"^selftest: \d+ closed, 0 OPEN, 1 not limited$", out, re.M):
                errs.append("the summary: %r" % out[-300:])
            return errs

        self.with_second("`sandbox limit` on a daemon with no cgroup hierarchy in view (and no "
                         "CAP_SYS_ADMIN to mount one): error unsupported (the pass's daemon: "
                         "ok)", unsupported, no_cgroup=True)
        self.with_second("unprivileged agentsnet run with no cgroup to be had: it runs and says "
                         "on stderr its memory is not limited (not against the pass's daemon)",
                         run_says, no_cgroup=True)
        if self.userns_allowed():
            self.with_second("unprivileged agentsnet selftest with no cgroup to be had: memory "
                             "not-limited, 0 OPEN, exit 0", selftest, no_cgroup=True)
        else:
            self.result("unprivileged agentsnet selftest with no cgroup: this host refuses "
                        "unprivileged user namespaces", ["no unprivileged user namespaces"])

    def t_token_url(self):
        def tokens(d):
            errs = []
            token = re.compile(r"\?agentsnet_token=([A-Za-z0-9_-]{43})$")
            mine = "it2-mine-%d" % os.getpid()
            for who, line in ((0, "sandbox add it2-rt tok"), (0, "sandbox add it2-open open"),
                              (self.unpriv_uid, "sandbox add %s tok" % mine)):
                got = d.ctl(line) if who == 0 else d.unpriv_ctl(line)
                if not got.startswith("ok "):
                    return ["%s (uid %d): %r" % (line, who, got)]
            want = {  # (caller, sandbox): told the URL with its token, or forbidden
                (0, "it2-file"): "token", (0, "it2-rt"): "token", (0, mine): "token",
                (self.unpriv_uid, mine): "token",
                (self.unpriv_uid, "it2-file"): "forbidden",
                (self.unpriv_uid, "it2-rt"): "forbidden",
                # The control: a URL without a token is told to anyone.
                (self.unpriv_uid, "it2-open"): "plain"}
            told = {}
            for (who, sid), what in want.items():
                line = "sandbox url %s" % sid
                got = d.ctl(line) if who == 0 else d.unpriv_ctl(line)
                m = token.search(got)
                kind = "token" if got.startswith("ok ") and m else \
                    "plain" if got.startswith("ok ") and "agentsnet_token" not in got else \
                    "forbidden" if got.startswith("error forbidden ") else got
                if kind != what:
                    errs.append("uid %d, sandbox url %s: %r, want %s" % (who, sid, got, what))
                if kind == "forbidden" and "agentsnet_token" in got:
                    errs.append("the refusal holds the token: %r" % got)
                if m and who == 0:
                    told[sid] = m.group(1)
            # A new start: the policy file's sandbox gets a new token, the run-time one
            # (re-adopted from its registry record) keeps its own: the control.
            errs += d.restart()
            for sid, same in (("it2-file", False), ("it2-rt", True)):
                m = token.search(d.ctl("sandbox url %s" % sid))
                if not m or sid not in told or (m.group(1) == told[sid]) != same:
                    errs.append("%s's token after a restart: %s, before %s (want %s)" % (
                        sid, m and m.group(1), told.get(sid), "the same" if same else "a new one"))
            for line in ("sandbox rm it2-rt", "sandbox rm it2-open", "sandbox rm %s" % mine):
                d.ctl(line)
            return errs

        self.with_second("ingress token: required: `sandbox url` tells the token to root and "
                         "the registrant only (forbidden to another; a URL without one to "
                         "anyone); the policy file's sandbox gets a new token at each start, a "
                         "run-time one keeps its own", tokens)

    def t_alerts_own(self):
        def alerts(d):
            errs = []
            mine, roots = "it2-u-%d" % os.getpid(), "it2-r-%d" % os.getpid()
            for who, sid in ((self.unpriv_uid, mine), (0, roots)):
                line = "sandbox add %s open" % sid
                got = d.ctl(line) if who == 0 else d.unpriv_ctl(line)
                if not got.startswith("ok "):
                    return ["%s (uid %d): %r" % (line, who, got)]
                # Refused requests through its own socket, past the threshold of 3.
                path = os.path.join(got[3:], "egress.sock")
                for i in range(4):
                    got = self.run_as(who, REQUEST_PY, path, "http://refused.test/%d" % i)
                    if not got.startswith("HTTP/1.1 403"):
                        errs.append("uid %d, request %d through %s: %r" % (who, i, sid, got))

            def sandboxes(who):
                got = self.run_as(who, ALERTS_PY, d.control)
                return got.split()[1:] if got.startswith("ok ") else [got]
            try:
                wait_for(lambda: sorted(sandboxes(0)) == sorted([mine, roots]), 10,
                         "root sees both sandboxes' alerts")
            except Fatal:
                errs.append("root's alerts: %r, want %s and %s" % (sandboxes(0), mine, roots))
            got = sandboxes(self.unpriv_uid)
            if got != [mine]:
                errs.append("uid %d's alerts: %r, want %s's alone" % (self.unpriv_uid, got, mine))
            d.ctl("sandbox rm %s" % mine)
            d.ctl("sandbox rm %s" % roots)
            return errs

        self.with_second("`alerts`: root sees every sandbox's, an account other than root only "
                         "those of the sandboxes it registered", alerts)

    def t_internal(self):
        def internal(d):
            errs = []
            got = d.ctl("sandbox add it2-before open")
            if not got.startswith("ok "):
                return ["the control, before: sandbox add: %r" % got]
            d.ctl("sandbox rm it2-before")
            # The file system of the socket directory turns read-only: making the sandbox's
            # directory fails (EROFS), a system call's failure the daemon names.
            refused_while(d, "remount,ro", "remount,rw", "it2-rofs", errno.EROFS, errs)
            # No inode left (the file system's inodes capped at those in use): the mkdir
            # fails with ENOSPC, whose value is the code of a full sandbox table's answer.
            fs = os.statvfs(d.sock_dir)
            refused_while(d, "remount,nr_inodes=%d" % (fs.f_files - fs.f_ffree),
                          "remount,nr_inodes=0", "it2-full", errno.ENOSPC, errs)
            return errs

        def refused_while(d, mount_opts, restore_opts, sid, errnum, errs):
            """With the socket directory remounted <mount_opts>, `sandbox add <sid>` is
            error internal naming <errnum> and registers nothing; remounted <restore_opts>,
            an add is served again."""
            subprocess.run(["mount", "-o", mount_opts, d.sock_dir], check=True)
            try:
                got = d.ctl("sandbox add %s open" % sid)
                want = "error internal sandbox %s: its socket or record: %s" % (
                    sid, os.strerror(errnum))
                if got != want:
                    errs.append("sandbox add, socket directory %s: %r, want %r" % (
                        mount_opts, got, want))
                if sid in d.listed():
                    errs.append("%s was registered anyway" % sid)
            finally:
                subprocess.run(["mount", "-o", restore_opts, d.sock_dir], check=True)
            got = d.ctl("sandbox add %s-after open" % sid)
            if not got.startswith("ok "):
                errs.append("the socket directory %s again: sandbox add: %r" % (restore_opts,
                                                                                got))
            d.ctl("sandbox rm %s-after" % sid)

        self.with_second("a system call that fails (mkdir on a socket directory made read-only, "
                         "or with no inode left): error internal naming the error, never a "
                         "refusal's code; served again after", internal,
                         own_fs=True)

    def with_second(self, name, fn, no_cgroup=False, own_fs=False):
        """Runs test <fn>(daemon) against a SecondDaemon of its own, reported as <name>."""
        def run():
            d = SecondDaemon(self, no_cgroup, own_fs)
            errs = []
            try:
                d.start()
                errs = fn(d)
            finally:
                errs += d.close()
            return errs
        self.timed(name, run)


# The second daemon's policy: one uid in daemon.sandbox_uids, a gateway, profile tok
# (ingress tokens required) with a sandbox of the policy file on it, profile open (which
# refuses every request), and an alert at the third refusal.
SECOND_POLICY = """version: 1
daemon:
  socket_dir: {sock_dir}
  audit_log: {audit}
  workers: 1
  control_group: nogroup
  sandbox_uids: {{first: {uid_first}, count: 1}}
  ingress: {{listen: "127.0.0.1:{port}"}}
alerts:
  refusals: {{threshold: 3, window_s: 60}}
resolver:
  hosts: {{origin.test: [127.0.0.1]}}
  allow_private: [127.0.0.1/32]
profiles:
  default:
    groups: [nogroup]
    rules:
      - {{id: origin, host: origin.test, tier: passthrough, owner: tests, reason: loopback}}
  tok:
    groups: [nogroup]
    ingress: {{token: required}}
    rules: []
  open:
    groups: [nogroup]
    rules: []
sandboxes:
  - {{id: it2-file, profile: tok}}
"""

# What an unprivileged `agentsnet run` says when no cgroup holds its memory
# (tools/agentsnet/sandbox.c; docs/sandbox.md: "said on stderr").
MEMORY_UNLIMITED = "its memory is not limited"

# t_no_cgroup's caller, as the unprivileged account: argv = control socket, sandbox id.
# Registers <id> owned, asks for a limit, removes it; prints each answer's first line.
LIMIT_PY = CTL_CALL_PY + r"""
import sys
ctl, sid = sys.argv[1:3]
for line in ("sandbox add %s default owned" % sid, "sandbox limit %s 64 %d" % (sid, 64 << 20),
             "sandbox rm %s" % sid):
    print((call(ctl, line).splitlines() or ["(no answer)"])[0], flush=True)
"""


# `alerts` on the control socket argv[1]: "ok <sandbox> ..." (the sandbox of each alert,
# oldest first), or the answer's first line.
ALERTS_PY = CTL_CALL_PY + r"""
import json, sys
lines = call(sys.argv[1], "alerts").splitlines()
if lines and lines[0].startswith("ok "):
    print("ok", " ".join(json.loads(l)["sandbox"] for l in lines[1:]))
else:
    print(lines[0] if lines else "(no answer)")
"""


class SecondDaemon:
    """An agentsnetd of SECOND_POLICY beside the pass's, in the upstream namespace, with a
    socket directory of its own. <no_cgroup>: started without CAP_SYS_ADMIN in its bounding
    set (as the systemd unit's), so in the namespace `ip netns exec` gives it (a fresh sysfs:
    no cgroup hierarchy in view) it cannot mount them either."""

    def __init__(self, t, no_cgroup, own_fs=False):
        self.t = t
        t.seq += 1
        tag = "%d-%d" % (os.getpid(), t.seq)
        self.dir = os.path.join(t.tmp, "second-" + tag)
        self.sock_dir = "/run/agentsnet-it2-" + tag
        self.control = os.path.join(self.sock_dir, "control.sock")
        self.err = os.path.join(self.dir, "agentsnetd.err")
        self.policy = os.path.join(self.dir, "policy.yaml")
        # Past the pass daemon's range (SANDBOX_UID_FIRST on, SANDBOX_UID_COUNT of them).
        self.uid_first = SANDBOX_UID_FIRST + SANDBOX_UID_COUNT + os.getpid() % 100000
        self.no_cgroup = no_cgroup
        self.own_fs = own_fs
        self.mounted = False
        self.proc = None

    def start(self):
        if self.proc is None and not os.path.isdir(self.dir):
            os.mkdir(self.dir, 0o755)
            port, _ = free_ports(self.t.args.upns)
            with open(self.policy, "w", encoding="ascii") as f:
                f.write(SECOND_POLICY.format(sock_dir=self.sock_dir, uid_first=self.uid_first,
                                             audit=os.path.join(self.dir, "audit.jsonl"),
                                             port=port))
            if self.own_fs:
                # The socket directory on a file system of its own (a test may remount it).
                os.mkdir(self.sock_dir, 0o755)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs",
                                self.sock_dir], check=True)
                self.mounted = True
        daemon = self.t.args.daemon
        if self.no_cgroup:
            daemon = os.path.join(self.dir, "agentsnetd-no-sys-admin")
            with open(daemon, "w", encoding="ascii") as f:
                f.write('#!/bin/sh\nexec setpriv --bounding-set -sys_admin -- "%s" "$@"\n'
                        % os.path.abspath(self.t.args.daemon))
            os.chmod(daemon, 0o755)
        self.proc = start_daemon(self.t.procs, self.t.args.upns, daemon, self.policy, self.err)

    def restart(self):
        errs = ["second daemon stop: " + e for e in stop_daemon(self.proc, self.err)]
        self.proc = None
        self.start()
        return errs

    def ctl(self, line):
        """Root's request <line>: the answer's first line."""
        return (self.lines(line) or ["(no answer)"])[0]

    def lines(self, line):
        return control_exchange(self.control, line.encode() + b"\n").decode().splitlines()

    def unpriv_ctl(self, line):
        return self.t.run_as(self.t.unpriv_uid, CTL_PY, self.control, line)

    def listed(self):
        return {line.split()[0] for line in self.lines("sandbox ls")[1:]}

    def close(self):
        errs = []
        if self.proc is not None:
            errs = ["second daemon stop: " + e for e in stop_daemon(self.proc, self.err)]
            self.proc = None
        if self.mounted:
            subprocess.run(["umount", "-l", self.sock_dir], check=False)
            self.mounted = False
        shutil.rmtree(self.sock_dir, ignore_errors=True)
        return errs
