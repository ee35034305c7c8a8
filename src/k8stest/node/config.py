"""The node's configuration documents, pure: kubelet, containerd, CNI, the API server's egress selector."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from k8stest.kubeclient import JSON

# Where containerd reads CDI specs inside the node: the standard directories of the CDI spec.
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")

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
    # The kubelet's syncFrequency ("" = its default, 1 m). A pod whose DRA prepare failed is tried
    # again only at the next periodic sync (1.37 records the event and ends the sync without an
    # error, so no 10 s back-off applies); tests of a driver's failures want that shorter.
    sync_frequency: str = ""


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
    def plugins_registry_dir(self) -> Path:
        """Seen as /var/lib/kubelet/plugins_registry inside the node: the kubelet's plugin watcher
        finds DRA drivers' registration sockets here."""
        return self.kubelet_dir / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """Seen as /var/lib/kubelet/plugins inside the node: DRA drivers' service sockets and
        checkpoints (``<driver>/``)."""
        return self.kubelet_dir / "plugins"

    @property
    def opt_dir(self) -> Path:
        """Seen as /opt inside the node: software a DaemonSet installs on the host (the FPGA CRI
        hook in /opt/intel/fpga-sw) lands here, not in the machine's /opt."""
        return self.workdir / "opt"

    @property
    def srv_dir(self) -> Path:
        """Seen as /srv inside the node: the FPGA bitstream store (/srv/intel.com/fpga) that the
        CRI hook reads, and never the machine's /srv."""
        return self.workdir / "srv"

    @property
    def cdi_run_dir(self) -> Path:
        """Seen as /var/run/cdi inside the node, where device plugins write their CDI specs."""
        return self.workdir / "cdi-run"

    @property
    def cdi_etc_dir(self) -> Path:
        """Seen as /etc/cdi inside the node (the machine's /etc gets no cdi directory)."""
        return self.workdir / "cdi-etc"

    @property
    def etc_overlay_dir(self) -> Path:
        """The upper and work directories of the overlay that the node sees as /etc: it adds
        /etc/cdi there without writing to the machine's /etc."""
        return self.workdir / "etc-overlay"

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
        # No cgroupDriver: containerd 2 tells the kubelet its own (cgroupfs, SystemdCgroup = false)
        # through the CRI RuntimeConfig call.
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
        **({"syncFrequency": config.sync_frequency} if config.sync_frequency else {}),
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
    """containerd 2's TOML (config version 3).

    CDI specs are read from the node's /etc/cdi and /var/run/cdi, as on a cluster node: device
    plugins write theirs to /var/run/cdi, and the kubelet passes the CDI names they answer.

    ``can_lower_oom_score``: without CAP_SYS_RESOURCE (some sandboxed machines drop it even for
    root) runc cannot give the sandbox the kubelet's oom_score_adj of -998 and every pod fails
    with "failed to update /proc/self/oom_score_adj"; containerd then clamps scores to its own.
    """
    images = "plugins.'io.containerd.cri.v1.images'"
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    cdi_dirs = ", ".join(f'"{d}"' for d in CDI_SPEC_DIRS)
    lines = [
        "version = 3",
        f'root = "{layout.workdir / "containerd-root"}"',
        # /run is the node's own tmpfs; shim sockets and runc state go there.
        'state = "/run/containerd"',
        "[grpc]",
        f'  address = "{layout.containerd_socket}"',
        f"[{images}]",
        f'  snapshotter = "{config.snapshotter}"',
        f"[{images}.pinned_images]",
        f'  sandbox = "{pause_image}"',
        f"[{runtime}]",
        "  enable_selinux = false",
        f"  restrict_oom_score_adj = {'false' if can_lower_oom_score else 'true'}",
        f"  cdi_spec_dirs = [{cdi_dirs}]",
        f"[{runtime}.containerd]",
        '  default_runtime_name = "runc"',
        f"[{runtime}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{runtime}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f'  BinaryName = "{layout.workdir / "runtime"}"',
        f"[{runtime}.cni]",
        f'  bin_dirs = ["{cni_bin_dir}"]',
        f'  conf_dir = "{layout.workdir / "cni"}"',
        "  max_conf_num = 1",
        "[plugins.'io.containerd.grpc.v1.cri']",
        '  stream_server_address = "127.0.0.1"',
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
