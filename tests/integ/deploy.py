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
  - metrics: the policy's daemon.metrics.listen is a loopback address, and the
    kube-rbac-proxy container's --upstream is http://<that address>/; its --allow-paths is
    /metrics alone, with no --ignore-paths and no insecure listener; its one container
    port, named metrics, is its --secure-listen-address's port, with no hostPort, and the
    pod's prometheus.io/ annotations name that port, https and /metrics; the pod is not on
    the node's network; no other container declares a port, and no other object asks to
    be scraped.
  - metrics_proxy: the proxy runs as a uid other than root with runAsNonRoot, no
    privilege escalation, a read-only root and no capability; its image is pinned by tag
    or digest; it has requests and a memory limit; the pod mounts no token by default,
    and the proxy alone mounts its service account's token and CA where in-cluster
    clients look.
  - metrics_rbac: the pod's service account (not "default") is among the resources and
    bound once, to a ClusterRole granting exactly create on tokenreviews and
    subjectaccessreviews; one ClusterRole grants non-resource URLs, exactly get
    /metrics, for a scraper to be bound to.
  - metrics_network: a NetworkPolicy of the daemon's namespace selects its pods and lets
    in only the proxy's port, from peers named by a namespaceSelector.
  - servicemonitor: servicemonitor.yaml, when present and not among the resources, has
    a Service selecting the daemon's pods on the proxy's port, a ServiceMonitor scraping
    it over https at /metrics with a token, and a binding to the scraper's ClusterRole.
  - image: the Dockerfile installs every binary the manifests run, where they run it.
  - live (root only): agentsnetd started with the DaemonSet's flags, its mounts mapped to
    a temporary directory, answers the readiness probe, serves its metrics at the
    policy's daemon.metrics.listen (moved to a free port), makes the agent pod's egress
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
import ipaddress
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

from integlib import ci, print_counts, skip_pass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLI_UNREACHABLE = 3  # `agentsnet`: no daemon on the control socket
DEFAULT_SOCKET_DIR = "/run/agentsnet"
DEFAULT_AUDIT = "/var/log/agentsnet/audit.jsonl"
NO_VALUE_FLAGS = {"--no-ingress", "--debug", "--help", "--version"}
WAIT_S = 10
PROXY_IMAGE = "kube-rbac-proxy"  # the image name of the metrics proxy's container
METRICS_PATH = "/metrics"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster clients look
# What the proxy's ClusterRole grants, (API group, resource, verb), and the scraper's.
PROXY_GRANTS = {("authentication.k8s.io", "tokenreviews", "create"),
                ("authorization.k8s.io", "subjectaccessreviews", "create")}
READER_GRANTS = {("nonResourceURL", METRICS_PATH, "get")}


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


def image_name(container):
    """The name of <container>'s image, without its registry, tag or digest."""
    image = (container.get("image") or "").split("@", 1)[0]
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


def host_port(addr):
    """(host, port) of "host:port" or "[host]:port", port an int; (None, None) if it does not
    read."""
    m = re.fullmatch(r"\[([^\]]*)\]:(\d+)|([^:\[\]]*):(\d+)", addr or "")
    if not m:
        return None, None
    return (m.group(1), int(m.group(2))) if m.group(1) is not None else \
        (m.group(3), int(m.group(4)))


def ip_of(host):
    """<host> as an ipaddress object, or None when it is no IP address."""
    try:
        return ipaddress.ip_address(host or "")
    except ValueError:
        return None


def grants(role):
    """What a (Cluster)Role grants: a set of (API group, resource, verb), with
    ("nonResourceURL", url, verb) for a non-resource URL."""
    out = set()
    for rule in as_list(role.get("rules")):
        for verb in as_list(rule.get("verbs")):
            for url in as_list(rule.get("nonResourceURLs")):
                out.add(("nonResourceURL", url, verb))
            for group in as_list(rule.get("apiGroups")):
                for res in as_list(rule.get("resources")):
                    out.add((group, res, verb))
    return out


def selects(selector, labels):
    """True when the label selector <selector> (matchLabels only) matches <labels>."""
    if not isinstance(selector, dict) or selector.get("matchExpressions"):
        return False
    return all((labels or {}).get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


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

    def proxy(self):
        """(the DaemonSet's kube-rbac-proxy container, its flags) or a Fault."""
        found = [c for c in as_list(self.ds_spec.get("containers"))
                 if image_name(c) == PROXY_IMAGE]
        if len(found) != 1:
            raise Fault(self.ds_path, f"{len(found)} containers run {PROXY_IMAGE}, not 1: "
                        "nothing (or more than one thing) serves the daemon's metrics")
        return found[0], parse_flags(command_line(found[0]))

    def proxy_port(self):
        """The port of the proxy's --secure-listen-address, or a Fault."""
        proxy, flags = self.proxy()
        addr = flags.get("--secure-listen-address")
        _, port = host_port(addr)
        if port is None:
            raise Fault(self.ds_path, f"the proxy's --secure-listen-address {addr} is no "
                        "host:port: it serves no HTTPS")
        return port

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


def check_metrics(r):
    ppath, pol = r.policy()
    listen = get(pol, "daemon", "metrics", "listen")
    if listen is None:
        raise Fault(ppath, "no daemon.metrics.listen: the daemon serves no metrics for the "
                    "proxy to pass on")
    host, port = host_port(listen)
    if host is None or ip_of(host) is None or not ip_of(host).is_loopback:
        raise Fault(ppath, f"daemon.metrics.listen {listen} is not a loopback address:port")
    proxy, flags = r.proxy()
    upstream = flags.get("--upstream", "")
    up = urllib.parse.urlsplit(upstream)
    try:
        up_port = up.port
    except ValueError:
        up_port = None
    if up.scheme != "http" or ip_of(up.hostname) != ip_of(host) or up_port != port \
            or up.path not in ("", "/") or up.query:
        raise Fault(r.ds_path, f"the proxy's --upstream {upstream or '(none)'} is not "
                    f"http://{listen}/, the policy's daemon.metrics.listen")
    allow = flags.get("--allow-paths")
    if allow != METRICS_PATH:
        raise Fault(r.ds_path, f"the proxy's --allow-paths is {allow or '(none)'}, not "
                    f"{METRICS_PATH}: it would pass other paths on to the daemon")
    for flag, why in (("--ignore-paths", "passes its paths on without authentication"),
                      ("--insecure-listen-address", "serves without TLS")):
        if flag in flags:
            raise Fault(r.ds_path, f"the proxy's {flag} {why}")
    sl_host, sl_port = flags.get("--secure-listen-address"), r.proxy_port()
    sl_ip = ip_of(host_port(sl_host)[0])
    if sl_ip is not None and sl_ip.is_loopback:
        raise Fault(r.ds_path, f"the proxy listens on {sl_host}, a loopback address: no "
                    "scraper reaches it")
    ports = as_list(proxy.get("ports"))
    named = [p for p in ports if p.get("name") == "metrics"]
    if len(ports) != 1 or len(named) != 1 or named[0].get("containerPort") != str(sl_port) \
            or named[0].get("protocol", "TCP") != "TCP":
        raise Fault(r.ds_path, "the proxy's ports are not one TCP port named metrics, "
                    f"{sl_port} (its --secure-listen-address's)")
    if named[0].get("hostPort"):
        raise Fault(r.ds_path, "the proxy's port has a hostPort: it would be open on the "
                    "node's addresses")
    if r.ds_spec.get("hostNetwork") == "true":
        raise Fault(r.ds_path, "hostNetwork: 127.0.0.1 would be the node's loopback, open to "
                    "its every process, and the proxy's port every interface of the node's")
    annotations = get(r.ds, "spec", "template", "metadata", "annotations", default={}) or {}
    want = {"prometheus.io/scrape": "true", "prometheus.io/port": str(sl_port),
            "prometheus.io/scheme": "https", "prometheus.io/path": METRICS_PATH}
    for key, value in want.items():
        if annotations.get(key) != value:
            raise Fault(r.ds_path, f"the pod's annotation {key} is "
                        f"{annotations.get(key) or '(none)'}, not {value} (the proxy's "
                        "port, over HTTPS)")
    # Nothing else is reachable: no other container declares a port, no other object asks
    # to be scraped.
    for path, obj in r.objects:
        spec = get(obj, "spec", "template", "spec") or get(obj, "spec") or {}
        for c in as_list(spec.get("containers")) if isinstance(spec, dict) else []:
            if c is not proxy and c.get("ports"):
                raise Fault(path, f"container {c.get('name')} declares ports: only the "
                            "proxy's is meant to be reachable")
        if obj is r.ds:
            continue
        for meta in (get(obj, "metadata"), get(obj, "spec", "template", "metadata")):
            for key in (get(meta, "annotations", default={}) or {}):
                if key.startswith("prometheus.io/"):
                    raise Fault(path, f"annotation {key} on {obj.get('kind')} "
                                f"{get(obj, 'metadata', 'name')}: only the DaemonSet's pod "
                                "serves metrics")
    return f"{listen} <- {upstream}; https :{sl_port}{allow} annotated; no other port"


def check_metrics_proxy(r):
    proxy, _ = r.proxy()
    name = proxy.get("name")
    sc = proxy.get("securityContext") or {}
    pod_sc = r.ds_spec.get("securityContext") or {}
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) != "true" or uid in (None, "0"):
        raise Fault(r.ds_path, f"the {name} container may run as root (runAsNonRoot "
                    f"{sc.get('runAsNonRoot')}, runAsUser {uid}): give it both, not 0")
    for key, value in (("allowPrivilegeEscalation", "false"), ("readOnlyRootFilesystem", "true")):
        if sc.get(key) != value:
            raise Fault(r.ds_path, f"the {name} container's {key} is "
                        f"{sc.get(key) or '(unset)'}, not {value}")
    caps = sc.get("capabilities") or {}
    if sc.get("privileged") == "true" or "ALL" not in as_list(caps.get("drop")) \
            or caps.get("add"):
        raise Fault(r.ds_path, f"the {name} container does not drop every capability "
                    f"(drop {as_list(caps.get('drop'))}, add {as_list(caps.get('add'))})")
    image = proxy.get("image") or ""
    tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    if "@sha256:" not in image and tag in ("", "latest"):
        raise Fault(r.ds_path, f"the {name} image {image} is pinned by no tag or digest")
    res = proxy.get("resources") or {}
    if not get(res, "requests", "cpu") or not get(res, "requests", "memory") \
            or not get(res, "limits", "memory"):
        raise Fault(r.ds_path, f"the {name} container has no cpu and memory requests and "
                    "memory limit")
    # Its token: its own, in its container alone.
    if r.ds_spec.get("automountServiceAccountToken") != "false":
        raise Fault(r.ds_path, "automountServiceAccountToken is not false: every container "
                    "of the pod gets the service account's token, the daemon's too")
    mount, vol = mount_at(proxy, r.ds_volumes, TOKEN_DIR)
    sources = as_list(get(vol, "projected", "sources"))
    token = [get(s, "serviceAccountToken", "path") for s in sources]
    ca = [i.get("path") for s in sources if get(s, "configMap", "name") == "kube-root-ca.crt"
          for i in as_list(get(s, "configMap", "items")) if i.get("key") == "ca.crt"]
    if mount is None or "token" not in token or "ca.crt" not in ca:
        raise Fault(r.ds_path, f"the {name} container has no service account token and CA "
                    f"at {TOKEN_DIR}: it cannot ask the API about a scraper")
    for c in as_list(r.ds_spec.get("containers")):
        if c is not proxy and any(m.get("name") == mount.get("name")
                                  for m in as_list(c.get("volumeMounts"))):
            raise Fault(r.ds_path, f"container {c.get('name')} mounts the service account's "
                        f"token (volume {mount.get('name')}) too")
    return f"{image}, uid {uid}, no capability, token in {name} alone"


def check_metrics_rbac(r):
    ns = get(r.ds, "metadata", "namespace", default="default")
    sa = r.ds_spec.get("serviceAccountName")
    if sa in (None, "default"):
        raise Fault(r.ds_path, "the pod runs as its namespace's default service account: the "
                    "proxy's rights would go to every pod that does")
    if not any(get(o, "metadata", "name") == sa and get(o, "metadata", "namespace") == ns
               for _, o in r.kind("ServiceAccount")):
        raise Fault(r.kust_path, f"no ServiceAccount {ns}/{sa} (the DaemonSet's) among the "
                    "resources")
    bound = []
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for path, b in r.kind(kind):
            for s in as_list(b.get("subjects")):
                s_ns = s.get("namespace") or get(b, "metadata", "namespace")
                if s.get("kind") == "ServiceAccount" and s.get("name") == sa and s_ns == ns:
                    bound.append((path, b))
    if len(bound) != 1 or bound[0][1].get("kind") != "ClusterRoleBinding" \
            or get(bound[0][1], "roleRef", "kind") != "ClusterRole":
        raise Fault(r.kust_path, f"the service account {sa} is bound {len(bound)} times, not "
                    "once to a ClusterRole (the proxy's)")
    path, binding = bound[0]
    role_name = get(binding, "roleRef", "name")
    roles = [(p, o) for p, o in r.kind("ClusterRole") if get(o, "metadata", "name") == role_name]
    if len(roles) != 1:
        raise Fault(path, f"the ClusterRole {role_name} that {sa} is bound to is not among the "
                    "resources")
    have = grants(roles[0][1])
    if have != PROXY_GRANTS:
        extra, missing = sorted(have - PROXY_GRANTS), sorted(PROXY_GRANTS - have)
        raise Fault(roles[0][0], f"ClusterRole {role_name} differs from what the proxy needs "
                    f"(create tokenreviews and subjectaccessreviews): extra {extra or 'none'}, "
                    f"missing {missing or 'none'}")
    readers = [(p, o) for p, o in r.kind("ClusterRole")
               if any(g[0] == "nonResourceURL" for g in grants(o))]
    if len(readers) != 1:
        raise Fault(r.kust_path, f"{len(readers)} ClusterRoles grant non-resource URLs, not 1 "
                    f"(get {METRICS_PATH}, for a scraper to be bound to)")
    rpath, reader = readers[0]
    have = grants(reader)
    if have != READER_GRANTS:
        raise Fault(rpath, f"ClusterRole {get(reader, 'metadata', 'name')} grants "
                    f"{sorted(have)}, not get {METRICS_PATH} alone")
    return (f"{ns}/{sa} -> {role_name} (create tokenreviews, subjectaccessreviews); "
            f"{get(reader, 'metadata', 'name')}: get {METRICS_PATH}")


def check_metrics_network(r):
    ns = get(r.ds, "metadata", "namespace", default="default")
    labels = get(r.ds, "spec", "template", "metadata", "labels", default={}) or {}
    port = str(r.proxy_port())
    policies = [(p, o) for p, o in r.kind("NetworkPolicy")
                if get(o, "metadata", "namespace", default="default") == ns
                and selects(get(o, "spec", "podSelector"), labels)
                and "Ingress" in (as_list(get(o, "spec", "policyTypes")) or ["Ingress"])]
    if not policies:
        raise Fault(r.ds_path, f"no NetworkPolicy of namespace {ns} limits who reaches the "
                    f"daemon's pods: the proxy's port {port} is open to every pod")
    froms = []
    for path, np in policies:
        name = get(np, "metadata", "name")
        for rule in as_list(get(np, "spec", "ingress")):
            ports = as_list(rule.get("ports"))
            if not ports or any(str(p.get("port")) not in (port, "metrics")
                                or p.get("protocol", "TCP") != "TCP" or p.get("endPort")
                                for p in ports):
                raise Fault(path, f"NetworkPolicy {name} lets in other ports than the "
                            f"proxy's ({port}/TCP)")
            peers = as_list(rule.get("from"))
            if not peers:
                raise Fault(path, f"NetworkPolicy {name} lets every source in to {port}")
            for peer in peers:
                sel = peer.get("namespaceSelector") if isinstance(peer, dict) else None
                if not isinstance(sel, dict) or peer.get("ipBlock") \
                        or not (sel.get("matchLabels") or sel.get("matchExpressions")):
                    raise Fault(path, f"NetworkPolicy {name} lets in more than named "
                                "namespaces (a peer without a namespaceSelector of its own)")
                froms.append(",".join(f"{k}={v}" for k, v in
                                      (sel.get("matchLabels") or {}).items()))
    return f"ingress {port}/TCP from namespaces {' '.join(froms) or 'none'} only"


def check_servicemonitor(r):
    path = os.path.join(r.dir, "servicemonitor.yaml")
    if not os.path.isfile(path):
        return "none"
    if "servicemonitor.yaml" in as_list(r.kust.get("resources")):
        raise Fault(r.kust_path, "servicemonitor.yaml is among the resources: its kinds need "
                    "the Prometheus Operator's CRDs")
    docs = read_yaml(path)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
    ns = get(r.ds, "metadata", "namespace", default="default")
    labels = get(r.ds, "spec", "template", "metadata", "labels", default={}) or {}
    svcs = [s for s in by_kind.get("Service", []) if get(s, "metadata", "namespace") == ns
            and selects({"matchLabels": get(s, "spec", "selector")}, labels)]
    if len(svcs) != 1:
        raise Fault(path, f"{len(svcs)} Services select the DaemonSet's pods, not 1")
    port = str(r.proxy_port())
    names = [p.get("name") for p in as_list(get(svcs[0], "spec", "ports"))
             if p.get("targetPort") in ("metrics", port)]
    monitors = [m for m in by_kind.get("ServiceMonitor", [])
                if selects(get(m, "spec", "selector"), get(svcs[0], "metadata", "labels"))]
    if not names or len(monitors) != 1:
        raise Fault(path, f"no port of Service {get(svcs[0], 'metadata', 'name')} is the "
                    "proxy's, or no ServiceMonitor (or more than one) selects it")
    ends = [e for e in as_list(get(monitors[0], "spec", "endpoints")) if e.get("port") in names]
    if len(ends) != 1 or ends[0].get("scheme") != "https" \
            or ends[0].get("path") != METRICS_PATH \
            or not (ends[0].get("bearerTokenFile") or ends[0].get("authorization")):
        raise Fault(path, "the ServiceMonitor does not scrape the proxy's port over https at "
                    f"{METRICS_PATH} with a token")
    reader = [get(o, "metadata", "name") for _, o in r.kind("ClusterRole")
              if any(g[0] == "nonResourceURL" for g in grants(o))]
    if not any(get(b, "roleRef", "name") in reader for b in by_kind.get("ClusterRoleBinding", [])):
        raise Fault(path, f"no ClusterRoleBinding binds the scraper to {', '.join(reader)}")
    return f"Service port {names[0]} -> {port}, https {METRICS_PATH}, bound to {reader[0]}"


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

    def move_metrics(self, text):
        """The policy's text with daemon.metrics.listen moved to a free port of the same
        address (the port as written may be taken on this machine), and the address."""
        ppath, pol = self.r.policy()
        listen = get(pol, "daemon", "metrics", "listen")
        host, _ = host_port(listen)
        if host is None:
            return text, None  # the metrics check says why
        if text.count(listen) != 1:
            raise Fault(ppath, f"daemon.metrics.listen {listen} is not written once in the "
                        "file: it cannot be moved to a free port here")
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        moved = f"[{host}]:{port}" if fam == socket.AF_INET6 else f"{host}:{port}"
        return text.replace(listen, moved), moved

    def scrape(self, addr):
        """GET /metrics of the daemon at <addr>, as the proxy's --upstream sends it."""
        if addr is None:
            return "no metrics"
        url = f"http://{addr}{METRICS_PATH}"
        try:
            no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with no_proxy.open(url, timeout=5) as res:
                status, ctype = res.status, res.headers.get("Content-Type", "")
                body = res.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as e:
            raise Fault(self.r.ds_path, f"the daemon does not answer {url}, the proxy's "
                        f"upstream: {e}{self.daemon_log()}") from None
        if status != 200 or not ctype.startswith("text/plain") \
                or "agentsnet_build_info" not in body:
            raise Fault(self.r.ds_path, f"{url} answered {status} {ctype}, not the "
                        "daemon's metrics")
        return f"GET {url} 200 (the policy's port moved to a free one)"

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
        policy_text, metrics = self.move_metrics(policy_text)
        with open(os.path.join(self.map[pmount["mountPath"]], key), "w", encoding="utf-8") as f:
            f.write(policy_text)
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
        scraped = self.scrape(metrics)
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
        return (f"ready; {scraped}; {sid}'s socket uid {st.st_uid} mode 600; "
                f"generations {gen0} -> {gen1} "
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
    ("metrics", check_metrics),
    ("metrics_proxy", check_metrics_proxy),
    ("metrics_rbac", check_metrics_rbac),
    ("metrics_network", check_metrics_network),
    ("servicemonitor", check_servicemonitor),
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
            return skip_pass("deploy", f"{rel(b)} is not built (run make)")
    try:
        recipe = Recipe(os.path.abspath(args.dir), args.build, args.daemon)
    except (Fault, YamlError, OSError) as e:
        print(f"FAIL read: {e}")
        print_counts("deploy", 0, 1)
        return 1
    passed = failed = 0
    skipped = []
    for name, fn in CHECKS:
        t0 = time.monotonic()
        try:
            what = fn(recipe)
        except (Fault, YamlError, OSError, subprocess.TimeoutExpired) as e:
            print(f"FAIL {name}: {e}", flush=True)
            failed += 1
            continue
        if what is None:
            if ci():
                print(f"FAIL {name}: needs root, and under CI=true a skip is a failure",
                      flush=True)
                failed += 1
            else:
                print(f"skip {name}: needs root", flush=True)
                skipped.append((name, "needs root"))
            continue
        passed += 1
        detail = f": {what}" if args.verbose else ""
        print(f"ok   {name} ({time.monotonic() - t0:.1f} s){detail}", flush=True)
    if skipped and not failed:
        print("deploy: SKIP: %d checks not run: %s" % (
            len(skipped), "; ".join("%s: %s" % s for s in skipped)))
    print_counts("deploy", passed, failed, skipped)
    return 1 if failed else 77 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
