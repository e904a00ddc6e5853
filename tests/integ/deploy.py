"""The Kubernetes recipe (deploy/kubernetes/) against the built binaries. No cluster is
needed: what the manifests say is read from the files and checked with the binaries a
node would run.

  - configmap_policy: the ConfigMap the DaemonSet mounts is the kustomization's
    configMapGenerator entry of that name, and its policy passes
    `agentsnetd --check-config`.
  - daemon_flags: agentsnetd accepts every flag the DaemonSet passes it (the same flags
    with --check-config added, which validates without serving).
  - paths: the --config path is the mounted ConfigMap's key (mounted whole, never by
    subPath, which the kubelet does not update); the --socket-dir and --audit paths are
    writable hostPath mounts and equal the policy's daemon.socket_dir and
    daemon.audit_log; the policy-reload container and the probes name the same socket
    directory and policy file; the agent pod mounts <host socket dir>/sandboxes/<id> for
    a sandbox of the policy.
  - agent_env: the agent pod runs agentsnet-bridge as its entrypoint, with the agent's
    command after "--"; the egress socket (AGENTSNET_EGRESS_SOCKET, else the bridge's
    default, from `agentsnet-bridge --help`) is in the mounted sandbox directory; every
    AGENT_* and AGENTSNET_* variable it sets is one the bridge reads, and the bridge
    accepts them (`--print-env`); it runs as the uid the policy gives the sandbox, in
    the host's user namespace, with no service account token; a NetworkPolicy of its
    namespace leaves it no traffic.
  - capabilities: the daemon container drops every capability and adds back those of
    deploy/systemd/agentsnetd.service's CapabilityBoundingSet, no more.
  - no_metrics: no Prometheus annotation and no container port anywhere (the daemon's
    metrics listener takes a loopback address only: the pod's own), and daemonset.yaml
    says how a collector in the pod scrapes it.
  - image: the Dockerfile installs every binary the manifests run, where they run it.
  - live (root only): agentsnetd started with the DaemonSet's flags, its mounts mapped to
    a temporary directory, answers the readiness probe, makes the agent pod's egress
    socket in the directory the pod mounts (the pod's uid's, mode 0600); the
    policy-reload container's script, run as written, reloads the policy once at start
    and again when the file changes, leaves a file that does not load refused while the
    daemon keeps its policy, and goes on; when the daemon stops and the file changes
    before it starts again, the script tries again until the new daemon answers and
    reloads it; the daemon stops with exit 0 each time.

Each fault is printed as `<file>: <fault>`.

    python3 tests/integ/deploy.py [--dir deploy/kubernetes] [--build build/rel] [-v]
    python3 tests/integ/deploy.py --daemon build/san/agentsnetd [--netns NAME] [-v]

--daemon is the agentsnetd under test (as tests/integ/run.sh gives every pass);
agentsnet and agentsnet-bridge are then taken from its directory, in place of --build.
--netns, given by run.sh, is accepted and unused (no namespace is needed here).

Exit 0 pass, 1 fail, 77 skip (the binaries are not built: run `make`).
The manifests are read with PyYAML (python3-yaml, tools/deps.sh), every scalar kept a
string as written; a key repeated in a mapping, or an explicit tag, is refused.
"""

import argparse
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77
CLI_UNREACHABLE = 3  # `agentsnet`: no daemon on the control socket
DEFAULT_SOCKET_DIR = "/run/agentsnet"
DEFAULT_AUDIT = "/var/log/agentsnet/audit.jsonl"
NO_VALUE_FLAGS = {"--no-ingress", "--debug", "--help", "--version"}
WAIT_S = 10


class YamlError(Exception):
    """A manifest that does not read: <file>:<line>: <message>."""


# ---- YAML: PyYAML (python3-yaml), every scalar a string ---------------------------------

READ_TAGS = {"tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that keeps every scalar a string, as written (no implicit ints,
    booleans or nulls: `runAsUser: 1000` is "1000", `hostUsers: false` is "false"), an
    empty value None, and refuses a key repeated in a mapping and an explicit tag."""

    # Only the empty plain scalar resolves to null; every other plain scalar is a string.
    yaml_implicit_resolvers = {"": [("tag:yaml.org,2002:null", re.compile(r"^$"))]}

    def construct_object(self, node, deep=False):
        if node.tag not in READ_TAGS and not (node.tag == "tag:yaml.org,2002:null"
                                             and node.value == ""):
            raise yaml.constructor.ConstructorError(
                None, None, f"tag {node.tag} is not read here", node.start_mark)
        return super().construct_object(node, deep)

    def construct_mapping(self, node, deep=False):
        seen = set()
        if isinstance(node, yaml.MappingNode):
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, str):
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} repeated", key_node.start_mark)
                    seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path):
    """The documents of <path>, as dicts, lists and strings (every scalar a string)."""
    name = rel(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        msg = " ".join(str(s) for s in (e.context, e.problem) if s)
        raise YamlError(f"{name}:{mark.line + 1}: {msg}" if mark else f"{name}: {msg}") from None
    except yaml.YAMLError as e:
        raise YamlError(f"{name}: {e}") from None
    return [d for d in docs if d is not None]


# ---- helpers ----------------------------------------------------------------------------


class Fault(Exception):
    """A check's failure: <file>: <fault>."""

    def __init__(self, path, msg):
        super().__init__(f"{rel(path)}: {msg}")


def rel(path):
    return os.path.relpath(path, ROOT) if under(os.path.abspath(path), ROOT) else path


def get(obj, *keys, default=None):
    for k in keys:
        if not isinstance(obj, dict) or k not in obj:
            return default
        obj = obj[k]
    return obj


def as_list(v):
    return v if isinstance(v, list) else []


def under(path, top):
    """True when <path> is <top> or below it."""
    top = top.rstrip("/") or "/"
    return path == top or path.startswith(top if top.endswith("/") else top + "/")


def command_line(container):
    return [*as_list(container.get("command")), *as_list(container.get("args"))]


def runs(container):
    """The name of the program <container> runs (its command's first word), or None."""
    cmd = as_list(container.get("command"))
    return os.path.basename(cmd[0]) if cmd and isinstance(cmd[0], str) else None


def env_of(container):
    """The container's env entries with a plain value (valueFrom entries are left out)."""
    out = {}
    for e in as_list(container.get("env")):
        if isinstance(e, dict) and "value" in e:
            out[e["name"]] = e["value"]
    return out


def parse_flags(argv):
    """agentsnetd's flags as a dict, read leniently: the binary judges them (daemon_flags)."""
    flags, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if "=" in a:
            k, v = a.split("=", 1)
        elif a in NO_VALUE_FLAGS or i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            k, v = a, ""
        else:
            k, v = a, argv[i + 1]
            i += 1
        flags[k] = v
        i += 1
    return flags


def mount_at(container, volumes, mount_path):
    """(volumeMount, volume) of <container> mounted exactly at <mount_path>, or (None, None)."""
    for m in as_list(container.get("volumeMounts")):
        if m.get("mountPath", "").rstrip("/") == mount_path.rstrip("/"):
            return m, volumes.get(m.get("name"))
    return None, None


def mount_covering(container, volumes, path):
    """The deepest (volumeMount, volume) of <container> that <path> lies under."""
    best = (None, None)
    for m in as_list(container.get("volumeMounts")):
        mp = m.get("mountPath", "")
        if under(path, mp) and (best[0] is None or len(mp) > len(best[0]["mountPath"])):
            best = (m, volumes.get(m.get("name")))
    return best


def run(cmd, env=None, timeout=10):
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


# ---- the recipe -------------------------------------------------------------------------


class Recipe:
    """What deploy/kubernetes/ holds, read once."""

    def __init__(self, d, build, daemon=None):
        self.dir = d
        self.build = build
        self.daemon_bin = daemon or os.path.join(build, "agentsnetd")
        self.kust_path = os.path.join(d, "kustomization.yaml")
        kust = read_yaml(self.kust_path)
        if len(kust) != 1 or not isinstance(kust[0], dict):
            raise Fault(self.kust_path, "not one mapping")
        self.kust = kust[0]
        self.objects = []  # (path, object)
        for r in as_list(self.kust.get("resources")):
            p = os.path.join(d, r)
            if not os.path.isfile(p):
                raise Fault(self.kust_path, f"resource {r} does not exist")
            for doc in read_yaml(p):
                self.objects.append((p, doc))
        ds = self.kind("DaemonSet")
        if len(ds) != 1:
            raise Fault(self.kust_path, f"{len(ds)} DaemonSets among the resources, not 1")
        self.ds_path, self.ds = ds[0]
        self.ds_spec = get(self.ds, "spec", "template", "spec", default={})
        self.ds_volumes = {v.get("name"): v for v in as_list(self.ds_spec.get("volumes"))}
        daemons = [c for c in as_list(self.ds_spec.get("containers")) if runs(c) == "agentsnetd"]
        if len(daemons) != 1:
            raise Fault(self.ds_path, "no container (or more than one) whose command is agentsnetd")
        self.daemon = daemons[0]
        self.daemon_argv = command_line(self.daemon)[1:]
        self.flags = parse_flags(self.daemon_argv)
        reloaders = [c for c in as_list(self.ds_spec.get("containers"))
                     if "policy reload" in " ".join(command_line(c))]
        if len(reloaders) != 1:
            raise Fault(self.ds_path, "no container (or more than one) runs "
                        "`agentsnet policy reload`")
        self.reloader = reloaders[0]
        pods = [(p, o) for p, o in self.kind("Pod")
                if any(runs(c) == "agentsnet-bridge"
                       for c in as_list(get(o, "spec", "containers")))]
        if len(pods) != 1:
            raise Fault(self.kust_path, f"{len(pods)} agent pods running agentsnet-bridge, not 1")
        self.pod_path, self.pod = pods[0]
        self.pod_spec = self.pod.get("spec", {})
        self.pod_volumes = {v.get("name"): v for v in as_list(self.pod_spec.get("volumes"))}
        self.agent = next(c for c in as_list(self.pod_spec.get("containers"))
                          if runs(c) == "agentsnet-bridge")
        self._policy = None

    def kind(self, k):
        return [(p, o) for p, o in self.objects if isinstance(o, dict) and o.get("kind") == k]

    def binary(self, name):
        return self.daemon_bin if name == "agentsnetd" else os.path.join(self.build, name)

    # The policy: the generator entry named by the DaemonSet's configMap volume.
    def policy_source(self):
        """(the ConfigMap volume's name, its key, the policy file) or a Fault."""
        config = self.flags.get("--config")
        if not config:
            raise Fault(self.ds_path, "agentsnetd has no --config: it would serve its embedded "
                        "default policy")
        mount, vol = mount_covering(self.daemon, self.ds_volumes, config)
        if mount is None or vol is None or "configMap" not in vol:
            raise Fault(self.ds_path, f"--config {config} is not in a mounted ConfigMap")
        cm_name = get(vol, "configMap", "name")
        for g in as_list(self.kust.get("configMapGenerator")):
            if g.get("name") != cm_name:
                continue
            if g.get("namespace", "default") != get(self.ds, "metadata", "namespace",
                                                      default="default"):
                raise Fault(self.kust_path, f"ConfigMap {cm_name} is made in another namespace "
                            "than the DaemonSet's")
            want = os.path.relpath(config, mount["mountPath"])
            for f in as_list(g.get("files")):
                key, _, src = f.partition("=") if "=" in f else (os.path.basename(f), "", f)
                if key == want:
                    return cm_name, key, os.path.join(self.dir, src), mount
            raise Fault(self.kust_path, f"ConfigMap {cm_name} has no key {want} "
                        f"(the DaemonSet's --config {config})")
        raise Fault(self.kust_path, f"no configMapGenerator entry makes the ConfigMap {cm_name} "
                    "the DaemonSet mounts")

    def policy(self):
        if self._policy is None:
            _, _, path, _ = self.policy_source()
            docs = read_yaml(path)
            if len(docs) != 1 or not isinstance(docs[0], dict):
                raise Fault(path, "not one mapping")
            self._policy = (path, docs[0])
        return self._policy

    def socket_dir(self):
        return self.flags.get("--socket-dir") or get(self.policy()[1], "daemon", "socket_dir") \
            or DEFAULT_SOCKET_DIR

    def audit_path(self):
        return self.flags.get("--audit") or get(self.policy()[1], "daemon", "audit_log") \
            or DEFAULT_AUDIT

    def host_socket_dir(self):
        sd = self.socket_dir()
        mount, vol = mount_at(self.daemon, self.ds_volumes, sd)
        if mount is None or vol is None or "hostPath" not in vol:
            raise Fault(self.ds_path, f"the socket directory {sd} is not a hostPath mount of the "
                        "agentsnetd container")
        return get(vol, "hostPath", "path")

    def bridge_help(self):
        r = run([self.binary("agentsnet-bridge"), "--help"])
        if r.returncode != 0:
            raise Fault(self.binary("agentsnet-bridge"), f"--help exited {r.returncode}")
        return r.stdout

    def egress_path(self):
        env = env_of(self.agent)
        if "AGENTSNET_EGRESS_SOCKET" in env:
            return env["AGENTSNET_EGRESS_SOCKET"]
        m = re.search(r"\$AGENTSNET_EGRESS_SOCKET \(([^)]+)\)", self.bridge_help())
        if not m:
            raise Fault(self.binary("agentsnet-bridge"), "--help names no default egress socket")
        return m.group(1)

    def sandbox_mount(self):
        """(mount, volume, sandbox id) of the agent's sandbox directory."""
        egress = self.egress_path()
        mount, vol = mount_at(self.agent, self.pod_volumes, os.path.dirname(egress))
        if mount is None:
            raise Fault(self.pod_path, f"nothing is mounted at {os.path.dirname(egress)}, "
                        f"where the bridge looks for its egress socket {egress}")
        if vol is None or "hostPath" not in vol:
            raise Fault(self.pod_path, f"{mount['mountPath']} is not a hostPath volume")
        host = get(vol, "hostPath", "path", default="").rstrip("/")
        prefix = self.host_socket_dir().rstrip("/") + "/sandboxes/"
        if not host.startswith(prefix) or "/" in host[len(prefix):]:
            raise Fault(self.pod_path, f"the sandbox volume's hostPath {host} is not "
                        f"{prefix}<id>, a sandbox directory of the daemon's socket directory")
        return mount, vol, host[len(prefix):]

    def pod_uid(self):
        uid = get(self.agent, "securityContext", "runAsUser") or \
            get(self.pod_spec, "securityContext", "runAsUser")
        return None if uid is None else str(uid)


# ---- the checks -------------------------------------------------------------------------


def check_configmap_policy(r):
    _, _, path, mount = r.policy_source()
    if mount.get("subPath"):
        raise Fault(r.ds_path, "the policy ConfigMap is mounted by subPath: the kubelet never "
                    "updates it")
    res = run([r.binary("agentsnetd"), "--check-config", path])
    if res.returncode != 0:
        raise Fault(path, "agentsnetd --check-config refuses it: "
                    f"{res.stderr.strip() or res.stdout.strip()}")
    return f"{rel(path)}: {res.stdout.strip().split(': ', 1)[-1]}"


def check_daemon_flags(r):
    if "--check-config" in r.flags:
        raise Fault(r.ds_path, "the DaemonSet passes --check-config: the daemon would check "
                    "and exit")
    _, _, path, _ = r.policy_source()
    res = run([r.binary("agentsnetd"), *r.daemon_argv, "--check-config", path])
    if res.returncode != 0 or "ok" not in res.stdout:
        raise Fault(r.ds_path, "agentsnetd refuses the DaemonSet's flags "
                    f"{' '.join(r.daemon_argv)} "
                    f"(exit {res.returncode}): {res.stderr.strip()}")
    return " ".join(r.daemon_argv)


def check_paths(r):
    ppath, pol = r.policy()
    config = r.flags["--config"]
    sd, audit = r.socket_dir(), r.audit_path()
    for key, value in (("socket_dir", sd), ("audit_log", audit)):
        pv = get(pol, "daemon", key)
        if pv is not None and pv != value:
            raise Fault(ppath, f"daemon.{key} is {pv}, the DaemonSet runs agentsnetd with {value}")
    host_sd = r.host_socket_dir()
    mount, vol = mount_at(r.daemon, r.ds_volumes, sd)
    if mount.get("readOnly") == "true":
        raise Fault(r.ds_path, f"the socket directory {sd} is mounted read-only")
    if get(vol, "hostPath", "type") not in ("Directory", "DirectoryOrCreate"):
        raise Fault(r.ds_path, f"the socket directory's hostPath {host_sd} is not of type "
                    "Directory or DirectoryOrCreate")
    if audit == "-":
        raise Fault(r.ds_path, "the audit trail goes to standard output, not to a file on the node")
    mount, vol = mount_covering(r.daemon, r.ds_volumes, audit)
    if mount is None or vol is None or "hostPath" not in vol or mount.get("readOnly") == "true":
        raise Fault(r.ds_path, f"the audit file {audit} is not on a writable hostPath mount")
    # The reloader: the same socket directory and policy file, mounted the same way.
    renv = env_of(r.reloader)
    rsd = renv.get("AGENTSNET_SOCKET_DIR", DEFAULT_SOCKET_DIR)
    if rsd != sd:
        raise Fault(r.ds_path, f"the policy-reload container's AGENTSNET_SOCKET_DIR is {rsd}, "
                    f"the daemon's socket directory {sd}")
    if renv.get("AGENTSNET_POLICY") != config:
        raise Fault(r.ds_path, "the policy-reload container watches "
                    f"{renv.get('AGENTSNET_POLICY')}, "
                    f"the daemon reads {config}")
    for path in (sd, config):
        dm, _ = mount_covering(r.daemon, r.ds_volumes, path)
        rm, _ = mount_covering(r.reloader, r.ds_volumes, path)
        if rm is None or rm.get("name") != dm.get("name") or rm.get("subPath") \
                or rm.get("mountPath") != dm.get("mountPath"):
            raise Fault(r.ds_path, f"the policy-reload container does not see {path} as the "
                        "daemon does "
                        f"(volume {dm.get('name')} at {dm.get('mountPath')})")
    # The probes: the daemon's socket directory.
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        cmd = as_list(get(r.daemon, probe, "exec", "command"))
        if cmd and os.path.basename(cmd[0]) == "agentsnet":
            given = DEFAULT_SOCKET_DIR
            if "--socket-dir" in cmd:
                given = cmd[cmd.index("--socket-dir") + 1]
            if given != sd:
                raise Fault(r.ds_path, f"the {probe} asks the socket directory {given}, "
                            f"the daemon's is {sd}")
    # The agent pod: a sandbox directory of this socket directory, of a sandbox of the policy.
    _, vol, sid = r.sandbox_mount()
    ids = [s.get("id") for s in as_list(pol.get("sandboxes"))]
    if sid not in ids:
        raise Fault(r.pod_path, f"it mounts the directory of sandbox {sid!r}, which the policy "
                    f"{rel(ppath)} does not list (it lists {', '.join(map(str, ids)) or 'none'})")
    return f"config {config}, sockets {sd} (node {host_sd}), audit {audit}, sandbox {sid}"


def check_agent_env(r):
    argv = command_line(r.agent)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise Fault(r.pod_path, "the bridge is not given the agent's command after '--'")
    mount, _, sid = r.sandbox_mount()
    if mount.get("readOnly") != "true":
        raise Fault(r.pod_path, f"the sandbox directory {mount['mountPath']} is not mounted "
                    "read-only")
    help_text = r.bridge_help()
    defaults = help_text.split("defaults:", 1)[-1].split("exit status:", 1)[0]
    known = set(re.findall(r"\$([A-Z_]+)", defaults))
    env = env_of(r.agent)
    for name in env:
        if name.startswith(("AGENT_", "AGENTSNET_")) and name not in known:
            raise Fault(r.pod_path, f"env {name} is no variable the bridge reads "
                        f"(it reads {', '.join(sorted(known))})")
    ca = env.get("AGENT_CA_CERT")
    if ca is not None and mount_covering(r.agent, r.pod_volumes, ca)[0] is None:
        raise Fault(r.pod_path, f"AGENT_CA_CERT names {ca}, which no volume mounts")
    res = run([r.binary("agentsnet-bridge"), "--print-env"], env={"PATH": "/usr/bin:/bin", **env})
    if res.returncode != 0 or "HTTP_PROXY=http://127.0.0.1:8080" not in res.stdout:
        raise Fault(r.pod_path, f"agentsnet-bridge refuses the pod's environment "
                    f"(exit {res.returncode}): {res.stderr.strip()}")
    ppath, pol = r.policy()
    sandbox = next(s for s in as_list(pol.get("sandboxes")) if s.get("id") == sid)
    if sandbox.get("uid") is None:
        raise Fault(ppath, f"sandbox {sid} has no uid: its socket would be open to every uid "
                    "on the node")
    uid = r.pod_uid()
    if uid != str(sandbox["uid"]):
        raise Fault(r.pod_path, f"the agent runs as uid {uid}, the policy gives sandbox {sid}'s "
                    f"socket to uid {sandbox['uid']} alone")
    if r.pod_spec.get("hostUsers") == "false":
        raise Fault(r.pod_path, "hostUsers: false maps the pod's uid to another uid on the node, "
                    "which the sandbox's socket refuses")
    if r.pod_spec.get("automountServiceAccountToken") != "false":
        raise Fault(r.pod_path, "the agent would get a Kubernetes API token "
                    "(automountServiceAccountToken is not false)")
    ns = get(r.pod, "metadata", "namespace", default="default")
    labels = get(r.pod, "metadata", "labels", default={}) or {}
    for path, np in r.kind("NetworkPolicy"):
        sel = get(np, "spec", "podSelector", default=None)
        if get(np, "metadata", "namespace", default="default") != ns or not isinstance(sel, dict):
            continue
        if sel.get("matchExpressions") or any(labels.get(k) != v for k, v in
                                               (sel.get("matchLabels") or {}).items()):
            continue
        types = as_list(get(np, "spec", "policyTypes"))
        if "Ingress" in types and "Egress" in types and not get(np, "spec", "ingress") \
                and not get(np, "spec", "egress"):
            return f"sandbox {sid}, uid {uid}, egress socket {r.egress_path()}, {rel(path)}"
    raise Fault(r.pod_path, f"no NetworkPolicy of namespace {ns} refuses all of the agent pod's "
                "traffic")


def check_capabilities(r):
    unit = os.path.join(ROOT, "deploy", "systemd", "agentsnetd.service")
    with open(unit, encoding="utf-8") as f:
        m = re.search(r"^CapabilityBoundingSet=(.*)$", f.read(), re.M)
    if not m:
        raise Fault(unit, "no CapabilityBoundingSet")
    want = {c.removeprefix("CAP_") for c in m.group(1).split()}
    caps = get(r.daemon, "securityContext", "capabilities", default={})
    if "ALL" not in as_list(caps.get("drop")):
        raise Fault(r.ds_path, "the agentsnetd container does not drop ALL capabilities")
    have = {c.removeprefix("CAP_") for c in as_list(caps.get("add"))}
    if have != want:
        extra, missing = sorted(have - want), sorted(want - have)
        raise Fault(r.ds_path, f"the agentsnetd container's capabilities differ from {rel(unit)}: "
                    f"extra {extra or 'none'}, missing {missing or 'none'}")
    return " ".join(sorted(have))


def check_no_metrics(r):
    for path, obj in r.objects:
        for meta in (get(obj, "metadata"), get(obj, "spec", "template", "metadata")):
            for key in (get(meta, "annotations", default={}) or {}):
                if key.startswith("prometheus.io/"):
                    raise Fault(path, f"annotation {key}: the daemon's metrics listener is "
                                "loopback-only, in the pod's own namespace")
        spec = get(obj, "spec", "template", "spec") or get(obj, "spec") or {}
        for c in as_list(spec.get("containers")) if isinstance(spec, dict) else []:
            if c.get("ports"):
                raise Fault(path, f"container {c.get('name')} declares ports: the daemon has "
                            "no listener that needs one (its metrics are loopback-only)")
    with open(r.ds_path, encoding="utf-8") as f:
        if not any("#" in line and "daemon.metrics" in line for line in f):
            raise Fault(r.ds_path, "no comment says how daemon.metrics is scraped in "
                        "the pod")
    return "none declared; the comment names daemon.metrics"


def check_image(r):
    path = os.path.join(r.dir, "Dockerfile")
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    last = text.rsplit("\nFROM ", 1)[-1]
    installed = set()
    for line in last.splitlines():
        words = line.split()
        if words and words[0] == "COPY":
            args = [w for w in words[1:] if not w.startswith("--")]
            dest, srcs = args[-1], args[:-1]
            for s in srcs:
                installed.add(dest + os.path.basename(s) if dest.endswith("/") else dest)
    wanted = {r.daemon["command"][0], r.agent["command"][0]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        cmd = as_list(get(r.daemon, probe, "exec", "command"))
        if cmd and cmd[0].startswith("/usr/local/"):
            wanted.add(cmd[0])
    if re.search(r"(^|[\s;(|&])agentsnet\s", " ".join(command_line(r.reloader))):
        wanted.add("/usr/local/bin/agentsnet")  # run by name: on the image's PATH
    missing = sorted(wanted - installed)
    if missing:
        raise Fault(path, f"the image does not install {', '.join(missing)}, which the "
                    "manifests run")
    return ", ".join(sorted(wanted))


# ---- live: the daemon and the reloader as the DaemonSet runs them -------------------------


class Live:
    def __init__(self, r, tmp):
        self.r = r
        self.tmp = tmp
        self.procs = []
        self.map = {}  # container path -> local path

    def local(self, path):
        for top in sorted(self.map, key=len, reverse=True):
            if under(path, top):
                return self.map[top] + path[len(top.rstrip("/")):]
        return path

    def cli_env(self, extra=None):
        env = {"PATH": f"{os.path.abspath(self.r.build)}:/usr/bin:/bin", "LANG": "C.UTF-8",
               "AGENTSNET_SOCKET_DIR": self.local(self.r.socket_dir())}
        env.update(extra or {})
        return env

    def status(self):
        res = run([self.r.binary("agentsnet"), "policy", "status"], env=self.cli_env())
        m = re.search(r"generation (\d+)", res.stdout)
        return int(m.group(1)) if res.returncode == 0 and m else None

    def wait(self, what, cond, path):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if cond():
                return
            self.alive()
            time.sleep(0.05)
        raise Fault(path, f"{what} (waited {WAIT_S} s){self.daemon_log()}")

    def daemon_log(self):
        """The last lines of what the daemon and the reloader said, for a fault's message."""
        out = ""
        for name in ("agentsnetd", "policy-reload"):
            try:
                with open(os.path.join(self.tmp, f"{name}.log"), encoding="utf-8") as f:
                    tail = f.read().strip().splitlines()[-3:]
            except OSError:
                continue
            if tail:
                out += f"; {name} said: " + " | ".join(tail)
        return out

    def alive(self):
        for name, p, path in self.procs:
            if p.poll() is not None:
                raise Fault(path, f"{name} exited {p.returncode}{self.daemon_log()}")

    def start(self, name, argv, env, path):
        log = open(os.path.join(self.tmp, f"{name}.log"), "a")
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        log.close()
        self.procs.append((name, p, path))
        return p

    def stop(self, only=None):
        """Stops the processes started here (those named <only>), the last first.

        Returns their exit codes by name."""
        rc = {}
        for entry in reversed(list(self.procs)):
            name, p, _ = entry
            if only is not None and name != only:
                continue
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            rc[name] = p.returncode
            self.procs.remove(entry)
        return rc

    def stop_daemon(self):
        rc = self.stop("agentsnetd").get("agentsnetd")
        if rc != 0:
            raise Fault(self.r.ds_path, f"agentsnetd exited {rc} on SIGTERM{self.daemon_log()}")

    def replace_policy(self, text):
        """As the kubelet updates a ConfigMap volume: the new file whole, in one step."""
        target = self.local(self.r.flags["--config"])
        tmp = target + ".new"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)

    def run(self):
        r = self.r
        _, key, policy_src, pmount = r.policy_source()
        for m in as_list(r.daemon.get("volumeMounts")):
            local = os.path.join(self.tmp, m["name"])
            os.makedirs(local, mode=0o755, exist_ok=True)
            self.map[m["mountPath"]] = local
        with open(policy_src, encoding="utf-8") as f:
            policy_text = f.read()
        shutil.copyfile(policy_src, os.path.join(self.map[pmount["mountPath"]], key))
        sd_local = self.local(r.socket_dir())
        audit_local = self.local(r.audit_path())
        if not under(sd_local, self.tmp) or not under(audit_local, self.tmp):
            raise Fault(r.ds_path, "the socket directory or the audit file is not on a mount")
        argv = [r.binary("agentsnetd")]
        for a in r.daemon_argv:
            k, eq, v = a.partition("=")
            argv.append(f"{k}={self.local(v)}" if eq else self.local(a))
        # Whatever the flags say, never the machine's own socket directory or audit file.
        argv += [f"--socket-dir={sd_local}", f"--audit={audit_local}"]
        env = {k: v for k, v in os.environ.items()
               if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                            "LISTEN_PID", "LISTEN_FDNAMES")}
        daemon = (argv, env)
        self.start("agentsnetd", *daemon, r.ds_path)
        probe = as_list(get(r.daemon, "readinessProbe", "exec", "command"))
        if not probe:
            raise Fault(r.ds_path, "the agentsnetd container has no exec readinessProbe")
        probe = [r.binary(os.path.basename(probe[0])) if probe[0].startswith("/usr/local/")
                 else probe[0], *[self.local(a) for a in probe[1:]]]
        self.wait("the readiness probe never passed",
                  lambda: run(probe, env=self.cli_env()).returncode == 0, r.ds_path)
        # The agent pod's sandbox directory, on this "node".
        _, vol, sid = r.sandbox_mount()
        host_sd = r.host_socket_dir()
        node_dir = sd_local + get(vol, "hostPath", "path")[len(host_sd.rstrip("/")):]
        sock = os.path.join(node_dir, os.path.basename(r.egress_path()))
        try:
            st = os.lstat(sock)
        except OSError as e:
            raise Fault(r.pod_path, f"the daemon made no {os.path.basename(sock)} in the "
                        "directory the "
                        f"pod mounts ({get(vol, 'hostPath', 'path')}): {e.strerror}") from None
        if not stat.S_ISSOCK(st.st_mode) or str(st.st_uid) != r.pod_uid() or \
                stat.S_IMODE(st.st_mode) != 0o600:
            raise Fault(r.pod_path, f"the sandbox socket is uid {st.st_uid} mode "
                        f"{stat.S_IMODE(st.st_mode):o}; the pod runs as uid {r.pod_uid()}")
        # The reloader, its script as written, its paths mapped like the daemon's.
        argv = command_line(r.reloader)
        renv = {k: self.local(v) for k, v in env_of(r.reloader).items()}
        renv["RELOAD_INTERVAL_S"] = "0.1"
        gen0 = self.status()
        self.start("policy-reload", argv, self.cli_env(renv), r.ds_path)
        self.wait("the policy-reload container did not reload the policy at start",
                  lambda: (self.status() or 0) > gen0, r.ds_path)
        gen1 = self.status()
        self.replace_policy(policy_text + "\n# changed by tests/integ/deploy.py\n")
        self.wait("the policy-reload container did not reload a changed policy",
                  lambda: (self.status() or 0) > gen1, r.ds_path)
        gen2 = self.status()
        self.replace_policy(policy_text + "\nno_such_key: 1\n")
        time.sleep(1.0)  # ten of its passes
        self.alive()
        if self.status() != gen2:
            raise Fault(r.ds_path, "a policy that does not load was taken")
        with open(os.path.join(self.tmp, "agentsnetd.log"), encoding="utf-8") as f:
            if "no_such_key" not in f.read():
                raise Fault(r.ds_path, "the refused policy's fault is not in the daemon's log")
        self.replace_policy(policy_text)
        self.wait("the policy-reload container did not reload after a refused policy",
                  lambda: (self.status() or 0) > gen2, r.ds_path)
        gen3 = self.status()
        # The daemon's container restarts alone, and the policy changes meanwhile: the
        # reloader finds no daemon (exit 3), tries again, and reloads the next one.
        self.stop_daemon()
        self.replace_policy(policy_text + "\n# changed while the daemon was down\n")
        time.sleep(0.5)
        self.start("agentsnetd", *daemon, r.ds_path)
        self.wait("the policy-reload container did not reload the daemon started again",
                  lambda: (self.status() or 0) > 1, r.ds_path)
        gen4 = self.status()
        self.stop_daemon()
        self.stop()
        return (f"ready; {sid}'s socket uid {st.st_uid} mode 600; generations {gen0} -> {gen1} "
                f"(start) -> {gen2} (change) -> {gen2} (refused) -> {gen3} (fixed); "
                f"restarted: 1 -> {gen4}")


def check_live(r):
    if os.geteuid() != 0:
        return None  # skipped: the sandbox socket is chowned to the pod's uid
    tmp = tempfile.mkdtemp(prefix="an-deploy-")
    live = Live(r, tmp)
    try:
        return live.run()
    finally:
        live.stop()
        shutil.rmtree(tmp, ignore_errors=True)


CHECKS = [
    ("configmap_policy", check_configmap_policy),
    ("daemon_flags", check_daemon_flags),
    ("paths", check_paths),
    ("agent_env", check_agent_env),
    ("capabilities", check_capabilities),
    ("no_metrics", check_no_metrics),
    ("image", check_image),
    ("live", check_live),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.path.join(ROOT, "deploy", "kubernetes"))
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--build", default=os.path.join(ROOT, "build", "rel"),
                       help="the directory of agentsnetd, agentsnet and agentsnet-bridge")
    which.add_argument("--daemon", default=None, metavar="PATH",
                       help="the agentsnetd under test; the other binaries from its directory")
    ap.add_argument("--netns", default=None, help="accepted for tests/integ/run.sh; unused")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.daemon is not None:
        args.build = os.path.dirname(args.daemon) or "."
    daemon = args.daemon or os.path.join(args.build, "agentsnetd")
    for b in (daemon, os.path.join(args.build, "agentsnet"),
              os.path.join(args.build, "agentsnet-bridge")):
        if not os.access(b, os.X_OK):
            print(f"deploy: SKIP: {rel(b)} is not built (run make)")
            return SKIP
    try:
        recipe = Recipe(os.path.abspath(args.dir), args.build, args.daemon)
    except (Fault, YamlError, OSError) as e:
        print(f"FAIL read: {e}")
        print("deploy: 0 passed, 1 failed")
        return 1
    passed = failed = 0
    for name, fn in CHECKS:
        t0 = time.monotonic()
        try:
            what = fn(recipe)
        except (Fault, YamlError, OSError, subprocess.TimeoutExpired) as e:
            print(f"FAIL {name}: {e}", flush=True)
            failed += 1
            continue
        if what is None:
            print(f"skip {name}: needs root", flush=True)
            continue
        passed += 1
        detail = f": {what}" if args.verbose else ""
        print(f"ok   {name} ({time.monotonic() - t0:.1f} s){detail}", flush=True)
    print(f"deploy: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
