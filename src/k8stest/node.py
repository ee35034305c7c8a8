"""A real Kubernetes node for the integration tier: kubelet + containerd + runc + bridge CNI.

Why a real node: kwok nodes never run a container, so only a kubelet that starts pods shows that
what the operator writes (host paths, security contexts, the socket directory, device requests)
works. The node joins the control plane of :mod:`k8stest.controlplane` and is isolated from the
machine it runs on:

- Its processes run in a private mount namespace (``unshare --mount``). There, ``/sys`` and
  ``/dev`` are work-directory trees that merge a simulated node (``sim/``) with the host parts the
  kubelet needs (cgroups, CPU topology), ``/var/lib`` and ``/run`` are fresh tmpfs instances,
  ``/var/lib/kubelet``, ``/var/log`` and ``/opt`` are work-directory bind mounts, and the six ``/proc/sys``
  values the kubelet would otherwise set are files holding the values it wants.
- The kubelet, containerd and every pod share a network namespace of the node's own; the CNI bridge
  lives there. :mod:`k8stest.nodeproxy` joins it to the control plane on the machine's loopback:
  it serves the Services' ClusterIPs inside the node (the ``kubernetes`` Service leads to the API
  server) and carries the API server's own calls into the node (webhooks, logs) through the API
  server's egress selector (:func:`start_node_control_plane`).
- All node processes and containers live below one cgroup (``/k8stest-<id>`` in every v1
  hierarchy), which is how :meth:`RealNode.stop` finds and kills every one of them.

The kubelet authenticates with a client certificate for ``system:node:<name>`` signed by the
control plane's CA, so the Node authorizer applies to it as to any real kubelet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k8stest.binaries import Binaries, in_ci, repo_root
from k8stest.controlplane import (
    KUBERNETES_SERVICE_IP,
    SERVICE_CIDR,
    ControlPlane,
    ControlPlaneConfig,
    start_control_plane,
)
from k8stest.kubeclient import JSON, ApiError, Credentials, wait_for
from k8stest.ociimage import (
    PAUSE_IMAGE,
    WORKLOAD_IMAGE,
    busybox_images,
    localize_archive,
    localized_index,
    write_oci_archive,
)
from k8stest.pki import client_certificate
from k8stest.process import ManagedProcess, free_port

NODE_BIN_DIR_ENV = "NODE_TEST_BIN_DIR"
NODE_REQUIRED = ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "busybox")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CONTAINERD_NAMESPACE = "k8s.io"

# Major number for simulated device nodes: 60-63 are reserved for local/experimental use and never
# handed out dynamically, so no driver answers them and opening such a node fails with ENXIO.
SIM_DEVICE_MAJOR = 60

# /sys subtrees that always come from the host: cgroups and the CPU/NUMA topology the kubelet
# (cadvisor, the CPU manager) reads, and kernel internals. Everything else merges with the simulation.
HOST_OWNED_SYSFS = frozenset({"devices/system", "fs", "kernel", "module", "firmware", "power", "hypervisor"})
# Parts of those host-owned subtrees that describe devices rather than the kernel: a simulation that
# has them replaces the host's entirely, as on hardware, where a VF's iommu_group link leads to
# /sys/kernel/iommu_groups/N, a QAT PF's state lives in debugfs (/sys/kernel/debug) and the SGX
# driver adds each NUMA node's EPC size (x86/sgx_total_bytes, which sgx_epchook reads) to
# /sys/devices/system/node/nodeN. Components may be glob patterns (one component each). A path is
# taken from the simulation only below a directory the host has, so the NUMA nodes stay the host's.
SIMULATED_SYSFS = frozenset({"kernel/iommu_groups", "kernel/debug", "devices/system/node/node*/x86"})

# Values the kubelet insists on (component-helpers' sysctl constants). Its mount namespace sees
# files holding exactly these, so it finds nothing to change and never writes the host's settings.
KUBELET_SYSCTLS: Mapping[str, str] = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}

# Standard device nodes of the node's /dev: name -> (major, minor); the same numbers as the host's.
STANDARD_DEVICES: Mapping[str, tuple[int, int]] = {
    "null": (1, 3),
    "zero": (1, 5),
    "full": (1, 7),
    "random": (1, 8),
    "urandom": (1, 9),
    "kmsg": (1, 11),
    "tty": (5, 0),
}
DEV_SYMLINKS: Mapping[str, str] = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}
HOST_DEV_MOUNTS = ("pts", "shm", "mqueue")


# ----- binaries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeBinaries:
    """The directory ``test/node/build.sh`` prints: kubelet, containerd, runc, busybox, cni/."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def cni_dir(self) -> Path:
        return (self.directory / "cni").resolve()

    def missing(self) -> list[str]:
        gone = [n for n in NODE_REQUIRED if not os.access(self.path(n), os.X_OK)]
        gone += [f"cni/{p}" for p in CNI_PLUGINS if not os.access(self.path("cni") / p, os.X_OK)]
        return gone


def find_node_binaries() -> tuple[NodeBinaries | None, str]:
    """The node binaries, or None and a sentence saying what is missing and how to build them."""
    hint = f"run test/node/build.sh (as root) and export {NODE_BIN_DIR_ENV}=<the directory it prints>"
    env = os.environ.get(NODE_BIN_DIR_ENV)
    directory: Path | None = Path(env) if env else None
    root = repo_root()
    if directory is None and root is not None and (root / "test" / "node" / "bin").exists():
        directory = (root / "test" / "node" / "bin").resolve()
    if directory is None:
        return None, f"real-node binaries not found: {hint}"
    bins = NodeBinaries(directory)
    missing = bins.missing()
    if missing:
        return None, f"real-node binaries missing in {directory}: {', '.join(missing)}; {hint}"
    return bins, ""


def node_unavailable_reason() -> str:
    """Why a real node cannot run here ("" when it can): root and the tools it calls."""
    if os.geteuid() != 0:
        return "a real node needs root (mount/network namespaces, cgroups, mknod)"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"a real node needs `{tool}` on PATH"
    if not Path("/sys/fs/cgroup/pids").is_dir():
        return "a real node needs the cgroup v1 pids hierarchy at /sys/fs/cgroup/pids"
    return ""


# ----- configuration (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class NodeConfig:
    """Knobs for one node; the defaults suit a test session."""

    name: str = "k8stest-node"
    pod_subnet: str = "10.88.0.0/24"
    max_pods: int = 30
    snapshotter: str = "overlayfs"
    start_timeout: float = 120.0
    # How often the kubelet reports node status (capacity included). Tests of capacity changes
    # want it short; upstream's 10 s default would dominate their timings.
    node_status_update_frequency: str = "1s"
    labels: Mapping[str, str] = field(default_factory=dict)
    # The runc the node's runtime wrapper calls ("" = the node binaries' runc); a wrapper adding
    # --debug helps when a container fails to start.
    runtime_binary: str = ""
    # Registered with the node (a node sharing its control plane with kwok nodes may want one).
    taints: tuple[Mapping[str, str], ...] = ()
    # The node's address inside its network namespace: the kubelet registers it as InternalIP and
    # serves on it; the API server reaches it through the egress proxy.
    node_ip: str = "10.89.0.1"


@dataclass(frozen=True)
class NodeLayout:
    """Every path and port of one node; host-side paths unless named ``ns_*``."""

    workdir: Path
    cgroup: str  # "/k8stest-<id>", the kubelet's cgroupRoot

    @property
    def sys_dir(self) -> Path:
        """Seen as /sys inside the node: write here to hot-plug simulated devices."""
        return self.workdir / "sys"

    @property
    def dev_dir(self) -> Path:
        """Seen as /dev inside the node."""
        return self.workdir / "dev"

    @property
    def kubelet_dir(self) -> Path:
        """Seen as /var/lib/kubelet inside the node."""
        return self.workdir / "kubelet"

    @property
    def device_plugin_dir(self) -> Path:
        return self.kubelet_dir / "device-plugins"

    @property
    def opt_dir(self) -> Path:
        """Seen as /opt inside the node: software a DaemonSet installs on the host (the FPGA CRI
        hook in /opt/intel/fpga-sw) lands here, not in the machine's /opt."""
        return self.workdir / "opt"

    @property
    def log_dir(self) -> Path:
        """Seen as /var/log inside the node (pod logs land in pods/)."""
        return self.workdir / "var-log"

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd.sock"

    @property
    def sysctl_dir(self) -> Path:
        return self.workdir / "sysctl"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def proxy_ready(self) -> Path:
        return self.workdir / "proxy.ready"


def kubelet_configuration(
    config: NodeConfig, layout: NodeLayout, *, ca_file: Path, port: int, healthz_port: int
) -> JSON:
    """The KubeletConfiguration document (JSON is YAML, which the kubelet reads)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This host mounts cgroup v1; from 1.35 the kubelet refuses that unless told otherwise.
        "failCgroupV1": False,
        # containerd 1.6 cannot tell the kubelet its cgroup driver (no RuntimeConfig call), so the
        # kubelet uses this one; runc's default driver is the same.
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": config.node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsMinVersion": "VersionTLS12",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        # Only holders of a certificate from the control plane's CA get past authentication.
        "authorization": {"mode": "AlwaysAllow"},
        # The host's iptables belong to the host.
        "makeIPTablesUtilChains": False,
        "failSwapOn": False,
        # Test images are imported, never pulled: keep them whatever the disk usage.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # The machine's disk fill level must not evict test pods.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "nodeStatusUpdateFrequency": config.node_status_update_frequency,
        "nodeStatusReportFrequency": "1m",
        "resolvConf": str(layout.workdir / "resolv.conf"),
        "maxPods": config.max_pods,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "registerNode": True,
        "registerWithTaints": [dict(t) for t in config.taints],
    }


CAP_SYS_RESOURCE = 24


def has_capability(proc_status: str, bit: int) -> bool:
    """Whether the ``CapEff`` line of a /proc/<pid>/status text has capability ``bit``."""
    for line in proc_status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def containerd_configuration(
    config: NodeConfig,
    layout: NodeLayout,
    *,
    cni_bin_dir: Path,
    pause_image: str,
    can_lower_oom_score: bool = True,
) -> str:
    """containerd 1.6's TOML (config version 2).

    ``can_lower_oom_score``: without CAP_SYS_RESOURCE (some sandboxed machines drop it even for
    root) runc cannot give the sandbox the kubelet's oom_score_adj of -998 and every pod fails
    with "failed to update /proc/self/oom_score_adj"; containerd then clamps scores to its own.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f'root = "{layout.workdir / "containerd-root"}"',
        # /run is the node's own tmpfs; shim sockets and runc state go there.
        'state = "/run/containerd"',
        "[grpc]",
        f'  address = "{layout.containerd_socket}"',
        f"[{cri}]",
        f'  sandbox_image = "{pause_image}"',
        '  stream_server_address = "127.0.0.1"',
        "  enable_selinux = false",
        f"  restrict_oom_score_adj = {'false' if can_lower_oom_score else 'true'}",
        f"[{cri}.containerd]",
        f'  snapshotter = "{config.snapshotter}"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f'  BinaryName = "{layout.workdir / "runtime"}"',
        f"[{cri}.cni]",
        f'  bin_dir = "{cni_bin_dir}"',
        f'  conf_dir = "{layout.workdir / "cni"}"',
        "  max_conf_num = 1",
    ]
    return "\n".join(lines) + "\n"


def cni_configuration(config: NodeConfig) -> JSON:
    """One bridge inside containerd's network namespace, addresses from host-local IPAM."""
    return {
        "cniVersion": "1.0.0",
        "name": "k8stest",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "k8stest0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": config.pod_subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": "/run/k8stest-cni",
                },
            }
        ],
    }


EGRESS_SOCKET_NAME = "cluster-egress.sock"


def egress_selector_configuration(socket_path: Path) -> JSON:
    """The API server's EgressSelectorConfiguration: "cluster" traffic (webhooks, kubelet, pods)
    as HTTP CONNECT over ``socket_path``, where the node's proxy dials into the node network."""
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(socket_path)}},
                },
            }
        ],
    }


def start_node_control_plane(
    bins: Binaries, workdir: Path, config: ControlPlaneConfig | None = None
) -> ControlPlane:
    """A control plane for one real node: no kwok, and "cluster" egress through the node's proxy.

    Why a control plane of its own: its API server sends every call into the cluster (webhooks
    included) through the node, which only works for a cluster made of that node.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    egress = workdir / "egress-selector.json"
    egress.write_text(json.dumps(egress_selector_configuration(workdir / EGRESS_SOCKET_NAME), indent=1))
    cfg = config or ControlPlaneConfig()
    return start_control_plane(
        bins,
        workdir,
        dataclasses.replace(
            cfg,
            with_kwok=False,
            extra_apiserver_flags=(
                *cfg.extra_apiserver_flags,
                f"--egress-selector-config-file={egress}",
                # The kubelet by its address, as kubeadm configures it: there is no DNS for node names.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ),
        ),
    )


def egress_socket(cp: ControlPlane) -> Path | None:
    """Where this node's proxy should take the API server's "cluster" traffic; None when the
    control plane has no egress selector or another node of it serves the socket already."""
    path = cp.workdir / EGRESS_SOCKET_NAME
    if not (cp.workdir / "egress-selector.json").exists():
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return path
    return None


def proxy_credentials(cp: ControlPlane) -> Credentials:
    """A token for the node's service proxy: ServiceAccount ``kube-system/kube-proxy`` bound to
    ``system:node-proxier``, the identity and role a kube-proxy gets on a kubeadm cluster."""
    creds = cp.service_account_credentials("kube-system", "kube-proxy", expiration_seconds=86400)
    c = cp.client()
    try:
        c.apply_ok(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "k8stest:node-proxier"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:node-proxier",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", "namespace": "kube-system"}],
            },
        )
    finally:
        c.close()
    return creds


# ----- the node's /sys and /dev (host-side preparation) ---------------------------------------


@dataclass(frozen=True)
class Bind:
    """One bind mount the node's namespace makes: ``source`` (host path) over ``target``."""

    source: str
    target: str


def _prune_except(directory: Path, rel: str, keep: frozenset[str]) -> None:
    """Remove everything below ``directory`` (``rel`` in sysfs) but the paths ``keep`` and their parents."""
    for child in list(directory.iterdir()):
        path = f"{rel}/{child.name}"
        if path in keep:
            continue
        if child.is_dir() and not child.is_symlink() and any(k.startswith(path + "/") for k in keep):
            _prune_except(child, path, keep)
        elif child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _is_simulated(path: str, simulated: frozenset[str]) -> bool:
    """Whether the sysfs path ``path`` matches one of the ``simulated`` patterns, component by component."""
    parts = path.split("/")
    return any(
        len(pattern_parts) == len(parts) and all(map(fnmatch.fnmatchcase, parts, pattern_parts))
        for pattern_parts in (pattern.split("/") for pattern in simulated)
    )


def _simulated_below(target: Path, entry: Path, rel: str, simulated: frozenset[str]) -> frozenset[str]:
    """The simulated paths below ``rel`` that the simulation (``target``) has and whose parent
    directory the host (``entry``) has too."""
    found = set()
    for pattern in simulated:
        if not pattern.startswith(rel + "/"):
            continue
        for match in target.glob(pattern[len(rel) + 1 :]):
            below = match.relative_to(target)
            if (entry / below.parent).is_dir():
                found.add(f"{rel}/{below.as_posix()}")
    return frozenset(found)


def merge_sysfs(
    staging: Path,
    real: Path,
    host_owned: frozenset[str] = HOST_OWNED_SYSFS,
    rel: str = "",
    simulated: frozenset[str] = SIMULATED_SYSFS,
) -> list[Bind]:
    """Make ``staging`` (a copy of the simulated /sys) a merged view with the real sysfs at ``real``.

    Simulated entries win, except below ``host_owned`` paths, which always come from the host
    unless the simulation has one of the ``simulated`` paths below them: those replace the host's
    whole, and the rest of their host-owned parent is merged from the host entry by entry.
    Real entries missing from the simulation become symlinks (copied as they are) or empty mount
    points; the returned binds fill those mount points inside the node's namespace. Only levels
    where both trees have a directory are walked, so the bind count stays small.
    """
    binds: list[Bind] = []
    staging.mkdir(parents=True, exist_ok=True)
    try:
        entries = sorted(real.iterdir())
    except OSError:
        return binds
    for entry in entries:
        path = f"{rel}/{entry.name}" if rel else entry.name
        target = staging / entry.name
        if _is_simulated(path, simulated) and os.path.lexists(target):
            continue
        if path in host_owned and os.path.lexists(target):
            kept = _simulated_below(target, entry, path, simulated) if entry.is_dir() else frozenset()
            if kept and target.is_dir() and not target.is_symlink() and entry.is_dir():
                _prune_except(target, path, kept)
                binds.extend(merge_sysfs(target, entry, host_owned, path, simulated))
                continue
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        if not os.path.lexists(target):
            if entry.is_symlink():
                target.symlink_to(os.readlink(entry))
                continue
            if entry.is_dir():
                target.mkdir()
            else:
                target.touch()
            binds.append(Bind(str(entry), str(target)))
        elif target.is_dir() and not target.is_symlink() and entry.is_dir() and not entry.is_symlink():
            binds.extend(merge_sysfs(target, entry, host_owned, path, simulated))
    return binds


def make_char_device(path: Path, minor: int, major: int = SIM_DEVICE_MAJOR) -> Path:
    """A real character device node (runc reads major/minor from it) with harmless numbers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        path.unlink()
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, 0o666)
    return path


def build_dev(staging: Path, sim_dev: Path | None) -> list[Bind]:
    """The node's /dev: standard nodes, the host's pts/shm/mqueue, and the simulated devices.

    Every regular file of the simulation's /dev becomes a character device with major
    :data:`SIM_DEVICE_MAJOR` and a minor unique within the node; symlinks (by-path) are kept,
    except that udev's ``/dev/char/<major>:<minor>`` links are renamed to the new numbers.
    """
    staging.mkdir(parents=True, exist_ok=True)
    for name, (major, minor) in STANDARD_DEVICES.items():
        make_char_device(staging / name, minor, major)
    for name, link in DEV_SYMLINKS.items():
        (staging / name).symlink_to(link)
    binds = []
    for name in HOST_DEV_MOUNTS:
        if Path("/dev", name).is_dir():
            (staging / name).mkdir()
            binds.append(Bind(f"/dev/{name}", str(staging / name)))
    if sim_dev is not None and sim_dev.is_dir():
        minor = 0
        for source in sorted(sim_dev.rglob("*")):
            dest = staging / source.relative_to(sim_dev)
            if source.is_symlink():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.symlink_to(os.readlink(source))
            elif source.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            elif source.is_file():
                make_char_device(dest, minor)
                minor += 1
        renumber_char_links(staging / "char")
    return binds


def renumber_char_links(char_dir: Path) -> None:
    """Name each ``<major>:<minor>`` link in ``char_dir`` after the device it leads to, as udev does.

    The simulation names them after its own numbers; once its files are character devices with
    other numbers, a plugin that checks ``/dev/char/<major>:<minor>`` against the node (DSA, IAA)
    would find no link.
    """
    if not char_dir.is_dir():
        return
    for link in sorted(char_dir.iterdir()):
        if not link.is_symlink():
            continue
        try:
            device = os.stat(link)
        except OSError:
            continue  # dangling: left as the simulation made it
        if not stat.S_ISCHR(device.st_mode):
            continue
        name = f"{os.major(device.st_rdev)}:{os.minor(device.st_rdev)}"
        if name != link.name:
            target = os.readlink(link)
            link.unlink()
            (char_dir / name).unlink(missing_ok=True)
            (char_dir / name).symlink_to(target)


# ----- certificates --------------------------------------------------------------------------


def node_client_certificate(ca_cert_pem: bytes, ca_key_pem: bytes, node_name: str) -> tuple[bytes, bytes]:
    """(cert, key) PEM for ``system:node:<name>`` in ``system:nodes``: the identity the Node
    authorizer grants a kubelet's rights to."""
    return client_certificate(ca_cert_pem, ca_key_pem, f"system:node:{node_name}", "system:nodes")


def client_cert_kubeconfig(server: str, ca_file: Path, cert_file: Path, key_file: Path, user: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "k8stest", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert_file), "client-key": str(key_file)}}
        ],
        "contexts": [{"name": "k8stest", "context": {"cluster": "k8stest", "user": user}}],
        "current-context": "k8stest",
    }
    return json.dumps(doc, indent=1)


# ----- cgroups -------------------------------------------------------------------------------


def cgroup_mounts(mountinfo: str) -> list[Path]:
    """Mount points of every cgroup hierarchy below /sys/fs/cgroup, from /proc/self/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split(" ", 1)[0]
        mount_point = left.split(" ")[4]
        if fstype in ("cgroup", "cgroup2") and mount_point.startswith("/sys/fs/cgroup/"):
            found.append(Path(mount_point))
    return found


def create_cgroups(name: str, hierarchies: Sequence[Path]) -> None:
    """``<h>/<name>`` and ``<h>/<name>/node`` in each hierarchy; cpuset ones get their parent's
    CPUs and memory nodes (a new cpuset starts empty and takes no tasks)."""
    for h in hierarchies:
        for sub in (h / name.lstrip("/"), h / name.lstrip("/") / "node"):
            sub.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (sub / knob).exists():
                    (sub / knob).write_text((sub.parent / knob).read_text())


def _cgroup_dirs(root: Path) -> list[Path]:
    """``root`` and every cgroup below it, deepest first."""
    if not root.is_dir():
        return []
    dirs = [Path(d) for d, _, _ in os.walk(root)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def kill_and_remove_cgroups(name: str, hierarchies: Sequence[Path], timeout: float = 20.0) -> list[str]:
    """SIGKILL every process in ``name``'s subtree, then remove the cgroups; returns leftovers."""
    deadline = time.monotonic() + timeout
    roots = [h / name.lstrip("/") for h in hierarchies]
    while True:
        pids: set[int] = set()
        for root in roots:
            for d in _cgroup_dirs(root):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        left = []
        for root in roots:
            for d in _cgroup_dirs(root):
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(str(d))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# ----- the running node ----------------------------------------------------------------------


@dataclass
class RealNode:
    """A started node. Use :func:`start_real_node`; call :meth:`stop` when done."""

    name: str
    layout: NodeLayout
    binaries: NodeBinaries
    process: ManagedProcess
    hierarchies: list[Path]
    kubelet_port: int
    started_in: float = 0.0
    imported: list[str] = field(default_factory=list)

    @property
    def workdir(self) -> Path:
        return self.layout.workdir

    @property
    def device_plugin_dir(self) -> Path:
        """Host path of the node's /var/lib/kubelet/device-plugins (kubelet.sock lives here)."""
        return self.layout.device_plugin_dir

    @property
    def dev_dir(self) -> Path:
        return self.layout.dev_dir

    @property
    def sys_dir(self) -> Path:
        return self.layout.sys_dir

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``ctr`` against the node's containerd (namespace k8s.io); return its stdout."""
        argv = [
            str(self.binaries.path("ctr")),
            f"--address={self.layout.containerd_socket}",
            f"--namespace={CONTAINERD_NAMESPACE}",
            *args,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def import_images(self, archive: Path) -> list[str]:
        """``ctr images import`` an OCI archive (unpacked for the CRI's snapshotter); returns the
        new image names. Unqualified names are imported as ``localhost/<name>``
        (:func:`k8stest.ociimage.qualified_reference` says why)."""
        with tarfile.open(archive) as tar:
            index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        if localized_index(index) != index:
            archive = localize_archive(archive, self.workdir / "images" / archive.name)
        before = set(self.image_names())
        self.ctr("images", "import", f"--snapshotter={self._snapshotter()}", str(archive))
        names = sorted(n for n in set(self.image_names()) - before if not n.startswith("sha256:"))
        self.imported.extend(names)
        return names

    def _snapshotter(self) -> str:
        text = (self.workdir / "containerd.toml").read_text()
        return text.split('snapshotter = "', 1)[1].split('"', 1)[0]

    def image_names(self) -> list[str]:
        return [line.split()[0] for line in self.ctr("images", "list").splitlines()[1:] if line.strip()]

    def add_device(self, relative: str, minor: int) -> Path:
        """A simulated device node at ``/dev/<relative>`` inside the node (hot-plug)."""
        return make_char_device(self.dev_dir / relative, minor)

    def realize_device_nodes(self) -> list[Path]:
        """Turn plain files under the node's /dev into character devices (major 60, unused minors).

        The simulator's builders (``sim.gpu.add_card`` on a ``FakeTree`` rooted at the work
        directory) write device nodes as plain files; runc needs real ones. Call after a hot-plug.
        """
        minors = {
            os.minor(p.stat().st_rdev)
            for p in self.dev_dir.rglob("*")
            if not p.is_symlink()
            and stat.S_ISCHR(p.lstat().st_mode)
            and os.major(p.lstat().st_rdev) == SIM_DEVICE_MAJOR
        }
        made = []
        for path in sorted(self.dev_dir.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            minor = max(minors, default=-1) + 1
            minors.add(minor)
            made.append(make_char_device(path, minor))
        renumber_char_links(self.dev_dir / "char")
        return made

    def check_alive(self) -> None:
        self.process.check_alive()

    def kubelet_pid(self) -> int:
        try:
            return int((self.workdir / "kubelet.pid").read_text())
        except (OSError, ValueError):
            return 0

    def restart_kubelet(self, timeout: float = 60.0) -> int:
        """Stop the kubelet (SIGTERM) and start it again with the same flags; containerd and the
        containers keep running. Returns the new kubelet's pid once it runs."""
        old = self.kubelet_pid()
        os.kill(self.process.pid, signal.SIGHUP)

        def restarted() -> int | None:
            self.process.check_alive()
            pid = self.kubelet_pid()
            return pid if pid not in (0, old) else None

        return wait_for("the kubelet to restart", restarted, timeout=timeout)

    def log_tail(self, component: str, lines: int = 40) -> str:
        try:
            text = (self.layout.logs / f"{component}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the kubelet and containerd, kill every container, remove the cgroups."""
        self.process.stop(timeout=15)
        left = kill_and_remove_cgroups(self.layout.cgroup, self.hierarchies)
        if left:
            raise RuntimeError(f"node {self.name}: cgroups still busy after stop: {', '.join(left[:5])}")


def _write_runtime_wrapper(path: Path, runc: str) -> None:
    """containerd's OCI runtime: :mod:`k8stest.node_runtime` for ``create``, runc for the rest."""
    package_root = Path(__file__).resolve().parent.parent
    path.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" create "*) exec env PYTHONPATH="{package_root}"'
        f' "{sys.executable}" -m k8stest.node_runtime "{runc}" "$@";; esac\n'
        f'exec "{runc}" "$@"\n'
    )
    path.chmod(0o755)


def _node_ready(node: JSON, own_taints: Sequence[Mapping[str, str]]) -> bool:
    """Ready, and free of the taints the node controller sets until then (``own_taints`` aside)."""
    conditions = node.get("status", {}).get("conditions", [])
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    own = {t["key"] for t in own_taints}
    blocking = [
        t
        for t in node.get("spec", {}).get("taints", [])
        if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") not in own
    ]
    return ready and not blocking


def start_real_node(
    bins: NodeBinaries,
    cp: ControlPlane,
    workdir: Path,
    config: NodeConfig | None = None,
    *,
    sim_root: Path | None = None,
    images: Sequence[Path] = (),
    pause_image: str = PAUSE_IMAGE,
) -> RealNode:
    """Prepare the node's trees, start it in its namespaces and wait until the Node is Ready.

    ``sim_root`` is a simulated node (``sim.node.build_node``'s root with ``sys/`` and ``dev/``);
    its devices appear at /sys and /dev inside the node. ``images`` are OCI archives imported before
    the kubelet starts; one of them must hold ``pause_image``, which containerd needs for the
    first pod (nothing is ever pulled).
    """
    cfg = config or NodeConfig()
    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    layout = NodeLayout(workdir, f"/k8stest-{secrets.token_hex(4)}")
    for d in (layout.kubelet_dir, layout.device_plugin_dir, layout.log_dir, layout.opt_dir, layout.logs,
              layout.sysctl_dir, workdir / "cni", workdir / "containerd-root"):  # fmt: skip
        d.mkdir(parents=True, exist_ok=True)

    # /sys and /dev
    if sim_root is not None and (sim_root / "sys").is_dir():
        shutil.copytree(sim_root / "sys", layout.sys_dir, symlinks=True)
    sys_binds = merge_sysfs(layout.sys_dir, Path("/sys"))
    dev_binds = build_dev(layout.dev_dir, sim_root / "dev" if sim_root is not None else None)

    # Identity, configuration files
    pki = cp.pki
    cert, key = node_client_certificate(pki.ca_pem, pki.ca_key.read_bytes(), cfg.name)
    cert_file, key_file = workdir / "kubelet-client.crt", workdir / "kubelet-client.key"
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    key_file.chmod(0o600)
    kubeconfig = workdir / "kubelet.kubeconfig"
    # Inside the node the API server is the ``kubernetes`` Service (served by the node's proxy).
    in_node_server = f"https://{KUBERNETES_SERVICE_IP}:443"
    kubeconfig.write_text(
        client_cert_kubeconfig(in_node_server, pki.ca_cert, cert_file, key_file, f"system:node:{cfg.name}")
    )
    creds = proxy_credentials(cp)
    proxy_config = workdir / "proxy.json"
    proxy_config.write_text(
        json.dumps(
            {
                "credentials": {
                    "server": creds.server,
                    "ca_pem": creds.ca_pem.decode(),
                    "token": creds.token,
                    "user": creds.user,
                },
                "apiserver": {"ip": "127.0.0.1", "port": cp.ports.apiserver},
                "kubernetes_service": {"ip": KUBERNETES_SERVICE_IP, "port": 443},
                "egress_socket": str(egress_socket(cp) or ""),
                "ready_file": str(layout.proxy_ready),
            },
            indent=1,
        )
    )
    proxy_config.chmod(0o600)
    kubelet_port, healthz_port = free_port(), free_port()
    (workdir / "kubelet.yaml").write_text(
        json.dumps(
            kubelet_configuration(
                cfg, layout, ca_file=pki.ca_cert, port=kubelet_port, healthz_port=healthz_port
            ),
            indent=1,
        )
    )
    (workdir / "containerd.toml").write_text(
        containerd_configuration(
            cfg,
            layout,
            cni_bin_dir=bins.cni_dir,
            pause_image=pause_image,
            can_lower_oom_score=has_capability(Path("/proc/self/status").read_text(), CAP_SYS_RESOURCE),
        )
    )
    (workdir / "cni" / "10-k8stest.conflist").write_text(json.dumps(cni_configuration(cfg), indent=1))
    (workdir / "resolv.conf").write_text("options ndots:1\n")
    _write_runtime_wrapper(workdir / "runtime", cfg.runtime_binary or str(bins.path("runc").resolve()))
    for name, value in KUBELET_SYSCTLS.items():
        (layout.sysctl_dir / name.replace("/", ".")).write_text(value + "\n")

    hierarchies = cgroup_mounts(Path("/proc/self/mountinfo").read_text())
    create_cgroups(layout.cgroup, hierarchies)

    labels = ",".join(f"{k}={v}" for k, v in sorted(cfg.labels.items()))
    plan = {
        "cgroup": layout.cgroup,
        "hierarchies": [str(h) for h in hierarchies],
        "mounts": [
            {"kind": "tmpfs", "target": "/run"},
            {"kind": "tmpfs", "target": "/var/lib"},
            {"kind": "bind", "source": str(layout.opt_dir), "target": "/opt"},
            {"kind": "mkdir", "target": "/var/lib/kubelet"},
            {"kind": "bind", "source": str(layout.kubelet_dir), "target": "/var/lib/kubelet"},
            {"kind": "bind", "source": str(layout.log_dir), "target": "/var/log"},
            *({"kind": "bind", "source": b.source, "target": b.target} for b in sys_binds),
            {"kind": "bind", "source": str(layout.sys_dir), "target": "/sys"},
            *({"kind": "bind", "source": b.source, "target": b.target} for b in dev_binds),
            {"kind": "bind", "source": str(layout.dev_dir), "target": "/dev"},
            *(
                {
                    "kind": "bind",
                    "source": str(layout.sysctl_dir / n.replace("/", ".")),
                    "target": f"/proc/sys/{n}",
                }
                for n in KUBELET_SYSCTLS
            ),
        ],
        "network": {"node_ip": cfg.node_ip, "service_cidr": SERVICE_CIDR},
        "proxy": {
            "argv": [sys.executable, "-m", "k8stest.nodeproxy", str(proxy_config)],
            "log": str(layout.logs / "proxy.log"),
            "ready_file": str(layout.proxy_ready),
        },
        "containerd": {
            "argv": [str(bins.path("containerd")), f"--config={workdir / 'containerd.toml'}"],
            "socket": str(layout.containerd_socket),
            "log": str(layout.logs / "containerd.log"),
            "path_prepend": str(bins.directory),
        },
        "kubelet": {
            "argv": [
                str(bins.path("kubelet")),
                f"--config={workdir / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={cfg.name}",
                f"--node-ip={cfg.node_ip}",
                *([f"--node-labels={labels}"] if labels else []),
                "--v=2",
            ],
            "log": str(layout.logs / "kubelet.log"),
        },
        "ready_file": str(workdir / "containerd.ready"),
    }
    plan_file = workdir / "node-plan.json"
    plan_file.write_text(json.dumps(plan, indent=1))

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH")])
    )
    try:
        process = ManagedProcess(
            "node",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-m",
                "k8stest.nodeinit",
                str(plan_file),
            ],
            layout.logs / "node.log",
            env=env,
        )
    except BaseException:
        kill_and_remove_cgroups(layout.cgroup, hierarchies)
        raise
    node = RealNode(cfg.name, layout, bins, process, hierarchies, kubelet_port)
    try:
        ready_file = Path(str(plan["ready_file"]))

        def containerd_serving() -> bool:
            process.check_alive()
            return ready_file.exists()

        wait_for("containerd to serve", containerd_serving, timeout=30)
        for archive in images:
            node.import_images(archive)
        if pause_image not in node.image_names():
            raise RuntimeError(
                f"node {cfg.name}: the sandbox image {pause_image} is in none of {list(images)}"
            )
        (workdir / "kubelet.go").touch()  # nodeinit starts the kubelet once this file exists

        client = cp.client()
        try:

            def ready() -> bool:
                process.check_alive()
                try:
                    return _node_ready(client.get(f"/api/v1/nodes/{cfg.name}"), cfg.taints)
                except ApiError as e:
                    if e.status == 404:
                        return False
                    raise

            wait_for(
                f"node {cfg.name} Ready (kubelet log: {layout.logs / 'kubelet.log'})",
                ready,
                timeout=cfg.start_timeout,
            )
        finally:
            client.close()
    except BaseException:
        with contextlib.suppress(Exception):
            node.stop()
        raise
    node.started_in = time.monotonic() - t0
    return node


@contextlib.contextmanager
def running_real_node(
    bins: NodeBinaries, cp: ControlPlane, workdir: Path, config: NodeConfig | None = None, **kwargs: Any
) -> Iterator[RealNode]:
    node = start_real_node(bins, cp, workdir, config, **kwargs)
    try:
        yield node
    finally:
        node.stop()


def ci_policy_reason(reason: str) -> str:
    """The message a fixture reports; under CI it fails the run instead of skipping."""
    return f"CI=true and {reason}" if in_ci() else reason


def write_test_images(bins: NodeBinaries, out: Path) -> Path:
    """The workload and sandbox images (busybox from the node binaries) as one OCI archive."""
    return write_oci_archive(busybox_images(bins.path("busybox").resolve()), out)


# ----- pods on the node ----------------------------------------------------------------------


def workload_pod(
    name: str,
    node_name: str,
    script: str,
    *,
    limits: Mapping[str, str] | None = None,
    host_paths: Mapping[str, str] | None = None,
    image: str = WORKLOAD_IMAGE,
) -> JSON:
    """A run-once busybox pod that the scheduler must place on ``node_name`` (by label, not by
    ``nodeName``, so the real scheduler decides). ``host_paths``: container path -> node path."""
    volumes = [
        {"name": f"host{i}", "hostPath": {"path": host}} for i, host in enumerate((host_paths or {}).values())
    ]
    mounts = [
        {"name": f"host{i}", "mountPath": path, "readOnly": True} for i, path in enumerate(host_paths or {})
    ]
    container: JSON = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "volumeMounts": mounts,
    }
    if limits:
        container["resources"] = {"limits": dict(limits)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            "volumes": volumes,
        },
    }


def pod_log(node: RealNode, namespace: str, name: str, container: str = "main") -> str:
    """The container's output as the kubelet stored it (CRI log format, prefixes removed)."""
    lines = []
    for log in sorted(node.layout.log_dir.glob(f"pods/{namespace}_{name}_*/{container}/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            parts = line.split(" ", 3)
            lines.append(parts[3] if len(parts) == 4 else line)
    return "\n".join(lines)
