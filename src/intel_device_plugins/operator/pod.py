"""Kind-neutral pieces of a plugin pod that the kinds' templates and init containers are made of."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

JSON = dict[str, Any]

DEFAULT_NODE_SELECTOR: Final[Mapping[str, str]] = {"kubernetes.io/arch": "amd64"}
KUBELET_SOCKETS: Final = "/var/lib/kubelet/device-plugins"
NFD_SOURCE_DIR: Final = "/etc/kubernetes/node-feature-discovery/source.d/"
PLUGIN_SELINUX: Final = "container_device_plugin_t"
INIT_SELINUX: Final = "container_device_plugin_init_t"
PCI_DRIVERS: Final = "/sys/bus/pci/drivers"


@dataclasses.dataclass(frozen=True)
class HostMount:
    """A hostPath volume and its mount in the plugin container."""

    name: str
    host_path: str
    mount_path: str
    read_only: bool = False
    host_type: str = ""

    def volume(self) -> JSON:
        hp: JSON = {"path": self.host_path}
        if self.host_type:
            hp["type"] = self.host_type
        return {"name": self.name, "hostPath": hp}

    def mount(self) -> JSON:
        m: JSON = {"name": self.name, "mountPath": self.mount_path}
        if self.read_only:
            m["readOnly"] = True
        return m


@dataclasses.dataclass(frozen=True)
class KindTemplate:
    """Static per-kind parts of the DaemonSet: resources, env, mounts and security details."""

    mounts: tuple[HostMount, ...]
    requests: tuple[str, str]  # memory, cpu
    limits: tuple[str, str]
    automount_token: bool | None
    host_ip_env: bool = False
    node_name_env: bool = True
    selinux: bool = True
    termination_log: bool = False


PLUGIN_MEMORY_REQUEST = "48Mi"
PLUGIN_MEMORY_LIMIT = "96Mi"
"""Every plugin is one Python process whose peak RSS measured 43-45 MiB whatever the device kind
(docs/performance.md); the limit is twice that worst case, the request its typical size. Upstream's
smaller figures suit its Go binaries and would get these processes OOM-killed."""

SOCKETS = HostMount("kubeletsockets", KUBELET_SOCKETS, KUBELET_SOCKETS)
CDI = HostMount("cdipath", "/var/run/cdi", "/var/run/cdi", host_type="DirectoryOrCreate")


DRA_REQUESTS: Final = ("64Mi", "40m")
DRA_LIMITS: Final = ("128Mi", "100m")
"""Every DRA driver: a Python process like a plugin (43-45 MiB peak RSS measured) plus an API client and two
gRPC servers; the limit keeps the plugin's twice-the-request headroom."""

DRA_REGISTRAR_DIR: Final = "/var/lib/kubelet/plugins_registry"
DRA_PLUGINS_DIR: Final = "/var/lib/kubelet/plugins"
CDI_DIR: Final = "/var/run/cdi"
DRA_HEALTHCHECK_PORT: Final = 51516
"""The DRA drivers' liveness port (``-healthcheck-port``), Intel's DRA drivers' own."""

DRA_MOUNTS: Final = (
    # The kubelet's plugin watcher finds the driver's registration socket here.
    HostMount("plugins-registry", DRA_REGISTRAR_DIR, DRA_REGISTRAR_DIR, host_type="Directory"),
    # The DRA service socket and the checkpoint of prepared claims (survives a driver restart).
    HostMount("plugins", DRA_PLUGINS_DIR, DRA_PLUGINS_DIR, host_type="DirectoryOrCreate"),
    # The per-claim CDI specs the container runtime reads.
    HostMount("cdi", CDI_DIR, CDI_DIR, host_type="DirectoryOrCreate"),
    # Discovery and health only read sysfs and the device nodes.
    HostMount("sysfs", "/sys", "/sys", True),
    HostMount("devfs", "/dev", "/dev", True),
)
"""Host directories of every DRA driver; the driver runs as root without capabilities, so the owner's
permission bits on these root-owned directories are all it writes with."""


def node_name_env() -> JSON:
    return {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def pod_uid_env() -> JSON:
    """A DRA driver names its sockets after its pod, so two instances overlap in a rolling update."""
    return {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}


def init_security(*, writes_sysfs: bool = False, selinux: bool = True) -> JSON:
    """Security context of an init container: every one drops all capabilities, forbids privilege
    escalation, keeps the root file system read-only and uses the runtime's default seccomp profile.

    The init containers run as root and write only into root-owned host directories (sysfs attributes, the
    NFD hook directory, ``/opt/intel/fpga-sw``), so the owner's permission bits suffice without any
    capability. ``writes_sysfs``: the container configures devices through sysfs. It is not privileged (a
    privileged container gets the whole of ``/sys`` read-write and every device); it writes only through the
    hostPath mounts of the subtrees it changes, and runs without an AppArmor profile because the runtime's
    default profile denies every write below ``/sys``.
    """
    sc: JSON = {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if writes_sysfs:
        sc["appArmorProfile"] = {"type": "Unconfined"}
    if selinux:
        sc["seLinuxOptions"] = {"type": INIT_SELINUX}
    return sc


def config_volume(name: str, config_map: str, default_mode: int | None) -> JSON:
    cm: JSON = {"name": config_map}
    if default_mode is not None:
        cm["defaultMode"] = default_mode
    return {"name": name, "configMap": cm}


def init_base(image: str) -> JSON:
    """The fields every init container starts from."""
    return {"image": image, "imagePullPolicy": "IfNotPresent"}


def nfd_hook_init(image: str, container: str, volume: str) -> tuple[JSON, JSON]:
    """An init container that installs an NFD source hook into the host's NFD directory, and its volume."""
    nfd = HostMount(volume, NFD_SOURCE_DIR, NFD_SOURCE_DIR, host_type="DirectoryOrCreate")
    init = {
        **init_base(image),
        "name": container,
        "securityContext": init_security(),
        "volumeMounts": [nfd.mount()],
    }
    return init, nfd.volume()
