"""Pure builders of the plugin DaemonSet for each kind (docs/operator.md, "What the operator deploys").

``desired_daemonset`` returns the complete object the operator applies with server-side apply; because every
field the operator cares about is in it, reapplying changes nothing and hand edits are undone.
Deliberate differences from upstream (tests/operator/data/upstream_sample_daemonsets.yaml lists them for
upstream's samples): the container runs the plugin console script explicitly; memory requests and limits fit
a Python process; the DSA ``vfio-pci`` device mount uses ``/dev/vfio`` on both sides; an FPGA CR without
``initImage`` gets the default FPGA init image; the QAT PF ID list skips drivers without PF IDs instead of
leaving empty words; GPU and NPU pods get no ServiceAccount token; the sysfs-writing init containers (DLB,
DSA, IAA, QAT) are not privileged and mount only the sysfs subtrees they write; every init container drops
all capabilities and uses the runtime's default seccomp profile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from intel_device_plugins.operator import images
from intel_device_plugins.operator.kinds import API_VERSION, DeviceKind
from intel_device_plugins.operator.model import (
    AnySpec,
    DlbSpec,
    DsaSpec,
    FpgaSpec,
    GpuSpec,
    IaaSpec,
    NpuSpec,
    QatSpec,
    SgxSpec,
)

JSON = dict[str, Any]

DEFAULT_NODE_SELECTOR: Final[Mapping[str, str]] = {"kubernetes.io/arch": "amd64"}
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "intel-deviceplugin-operator"
KUBELET_SOCKETS: Final = "/var/lib/kubelet/device-plugins"
NFD_SOURCE_DIR: Final = "/etc/kubernetes/node-feature-discovery/source.d/"
PLUGIN_SELINUX: Final = "container_device_plugin_t"
INIT_SELINUX: Final = "container_device_plugin_init_t"
PCI_DRIVERS: Final = "/sys/bus/pci/drivers"

QAT_PF_IDS: Final[Mapping[str, tuple[str, ...]]] = {
    "dh895xccvf": ("0434", "0435"),
    "c3xxxvf": ("19e2",),
    "c6xxvf": ("37c8",),
    "d15xxvf": ("6f54",),
    "4xxxvf": ("4940", "4942", "4944"),
    "420xxvf": ("4946",),
    "c4xxxvf": ("18a0",),
}
QAT_DEFAULT_VF_DRIVERS: Final = ("c6xxvf", "4xxxvf")


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

_SOCKETS = HostMount("kubeletsockets", KUBELET_SOCKETS, KUBELET_SOCKETS)
_CDI = HostMount("cdipath", "/var/run/cdi", "/var/run/cdi", host_type="DirectoryOrCreate")

TEMPLATES: Final[Mapping[DeviceKind, KindTemplate]] = {
    DeviceKind.DLB: KindTemplate(
        (
            HostMount("devfs", "/dev", "/dev", True),
            HostMount("sysfs", "/sys/class/dlb2", "/sys/class/dlb2", True),
            _SOCKETS,
        ),
        (PLUGIN_MEMORY_REQUEST, "40m"),
        (PLUGIN_MEMORY_LIMIT, "100m"),
        False,
        selinux=False,
        termination_log=True,
    ),
    DeviceKind.DSA: KindTemplate(
        (
            HostMount("devfs", "/dev/dsa", "/dev/dsa", True),
            HostMount("chardevs", "/dev/char", "/dev/char", True),
            HostMount("sysfs", "/sys/bus/dsa", "/sys/bus/dsa", True),
            _SOCKETS,
        ),
        (PLUGIN_MEMORY_REQUEST, "50m"),
        (PLUGIN_MEMORY_LIMIT, "100m"),
        False,
    ),
    DeviceKind.FPGA: KindTemplate(
        (
            HostMount("devfs", "/dev", "/dev", True),
            HostMount("sysfs", "/sys/class", "/sys/class", True),
            _SOCKETS,
            HostMount("cdidir", "/var/run/cdi", "/var/run/cdi", host_type="DirectoryOrCreate"),
        ),
        (PLUGIN_MEMORY_REQUEST, "80m"),
        (PLUGIN_MEMORY_LIMIT, "160m"),
        None,  # the token reads the node's fpga.intel.com/device-plugin-mode annotation
        termination_log=True,
    ),
    DeviceKind.GPU: KindTemplate(
        (
            HostMount("devfs", "/dev/dri", "/dev/dri", True),
            HostMount("sysfsdrm", "/sys/class/drm", "/sys/class/drm", True),
            _SOCKETS,
            _CDI,
        ),
        (PLUGIN_MEMORY_REQUEST, "40m"),
        (PLUGIN_MEMORY_LIMIT, "100m"),
        False,  # the plugin never calls the API server (the resource manager that did is gone since v0.34)
        host_ip_env=True,
    ),
    DeviceKind.IAA: KindTemplate(
        (
            HostMount("devfs", "/dev/iax", "/dev/iax", True),
            HostMount("chardevs", "/dev/char", "/dev/char", True),
            HostMount("sysfs", "/sys/bus/dsa/devices", "/sys/bus/dsa/devices", True),
            _SOCKETS,
        ),
        (PLUGIN_MEMORY_REQUEST, "60m"),
        (PLUGIN_MEMORY_LIMIT, "120m"),
        False,
    ),
    DeviceKind.NPU: KindTemplate(
        (
            HostMount("devfs", "/dev/accel", "/dev/accel", True),
            HostMount("sysfsaccel", "/sys/class/accel", "/sys/class/accel", True),
            _SOCKETS,
        ),
        (PLUGIN_MEMORY_REQUEST, "40m"),
        (PLUGIN_MEMORY_LIMIT, "100m"),
        False,  # the plugin never calls the API server
    ),
    DeviceKind.QAT: KindTemplate(
        (
            HostMount("devdir", "/dev/vfio", "/dev/vfio", True),
            HostMount("debugfsdir", "/sys/kernel/debug", "/sys/kernel/debug", True),
            HostMount("pcidir", "/sys/bus/pci", "/sys/bus/pci"),
            _SOCKETS,
        ),
        (PLUGIN_MEMORY_REQUEST, "70m"),
        (PLUGIN_MEMORY_LIMIT, "140m"),
        False,
    ),
    DeviceKind.SGX: KindTemplate(
        (
            _SOCKETS,
            HostMount("sgx-enclave", "/dev/sgx_enclave", "/dev/sgx_enclave", True, "CharDevice"),
            HostMount("sgx-provision", "/dev/sgx_provision", "/dev/sgx_provision", True, "CharDevice"),
            _CDI,
        ),
        (PLUGIN_MEMORY_REQUEST, "40m"),
        (PLUGIN_MEMORY_LIMIT, "100m"),
        False,
        node_name_env=False,
    ),
}


def _num(value: int, default: int) -> str:
    return str(value if value else default)


def plugin_args(spec: AnySpec) -> list[str]:
    """Command-line arguments of the plugin container, one list element per flag and per value."""
    args = ["-v", str(spec.log_level)]
    if isinstance(spec, DsaSpec):
        driver = "vfio-pci" if spec.driver == "vfio-pci" else "idxd"
        args += ["-driver", driver, "-shared-dev-num", _num(spec.shared_dev_num, 1)]
    elif isinstance(spec, FpgaSpec):
        args += ["-mode", spec.mode or "af"]
    elif isinstance(spec, GpuSpec):
        if spec.enable_monitoring:
            args.append("-enable-monitoring")
            if spec.monitoring_mode:
                args.append(f"-monitoring-mode={spec.monitoring_mode}")
        args += [
            "-shared-dev-num",
            _num(spec.shared_dev_num, 1),
            "-allocation-policy",
            spec.preferred_allocation_policy or "none",
        ]
        if spec.allow_ids:
            args += ["-allow-ids", spec.allow_ids]
        if spec.deny_ids:
            args += ["-deny-ids", spec.deny_ids]
        if spec.bypath_mode:
            args += ["-bypath", spec.bypath_mode]
    elif isinstance(spec, (IaaSpec, NpuSpec)):
        args += ["-shared-dev-num", _num(spec.shared_dev_num, 1)]
    elif isinstance(spec, QatSpec):
        args += [
            "-dpdk-driver",
            spec.dpdk_driver or "vfio-pci",
            "-kernel-vf-drivers",
            ",".join(spec.kernel_vf_drivers or QAT_DEFAULT_VF_DRIVERS),
            "-max-num-devices",
            _num(spec.max_num_devices, 32),
        ]
        if spec.preferred_allocation_policy:
            args += ["-allocation-policy", spec.preferred_allocation_policy]
    elif isinstance(spec, SgxSpec):
        args += [
            "-enclave-limit",
            _num(spec.enclave_limit, 1),
            "-provision-limit",
            _num(spec.provision_limit, 1),
        ]
        if spec.dcap_infra_resources:
            args.append("-dcap-infra-resources")
    return args


def qat_pf_ids(vf_drivers: Sequence[str]) -> str:
    """Value of ``ENABLED_QAT_PF_PCIIDS``: the PF IDs of each VF driver, space-separated, in spec order."""
    return " ".join(pf for drv in vf_drivers for pf in QAT_PF_IDS.get(drv, ()))


def _node_name_env() -> JSON:
    return {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def _init_security(*, writes_sysfs: bool = False, selinux: bool = True) -> JSON:
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


def _config_volume(name: str, config_map: str, default_mode: int | None) -> JSON:
    cm: JSON = {"name": config_map}
    if default_mode is not None:
        cm["defaultMode"] = default_mode
    return {"name": name, "configMap": cm}


def init_parts(spec: AnySpec) -> tuple[list[JSON], list[JSON]]:
    """Init containers and the extra volumes they need; empty when the kind has none for this spec."""
    init_image = getattr(spec, "init_image", "")
    if isinstance(spec, FpgaSpec):
        init_image = init_image or images.default_init_image(spec.KIND, spec.image) or ""
    if not init_image:
        return [], []
    base: JSON = {"image": init_image, "imagePullPolicy": "IfNotPresent"}
    if isinstance(spec, DlbSpec):
        return (
            [
                {
                    **base,
                    "name": "enable-vfs",
                    "securityContext": _init_security(writes_sysfs=True, selinux=False),
                    "volumeMounts": [
                        {"name": "sysfs-devices", "mountPath": "/sys/devices"},
                        {"name": "sysfs-driver-dlb2", "mountPath": "/sys/bus/pci/drivers/dlb2"},
                    ],
                }
            ],
            [
                HostMount("sysfs-devices", "/sys/devices", "", host_type="DirectoryOrCreate").volume(),
                HostMount(
                    "sysfs-driver-dlb2", "/sys/bus/pci/drivers/dlb2", "", host_type="DirectoryOrCreate"
                ).volume(),
            ],
        )
    if isinstance(spec, (DsaSpec, IaaSpec)):
        dsa = isinstance(spec, DsaSpec)
        dev = "dsa" if dsa else "iaa"
        env = [_node_name_env(), {"name": "DEVICE_TYPE", "value": dev}]
        if isinstance(spec, DsaSpec):
            env.append({"name": "DSA_DRIVER", "value": "vfio-pci" if spec.driver == "vfio-pci" else "idxd"})
        host = [HostMount("sys-bus-dsa", "/sys/bus/dsa", "/sys/bus/dsa")]
        if dsa:
            # rebinding writes only bind/unbind below the PCI drivers; driver_override is under /sys/devices
            host.append(HostMount("sys-bus-pci", "/sys/bus/pci/drivers", "/sys/bus/pci/drivers"))
        host.append(HostMount("sys-devices", "/sys/devices", "/sys/devices"))
        mounts = [h.mount() for h in host] + [{"name": "scratch", "mountPath": "/idxd-init/scratch"}]
        volumes = [h.volume() for h in host] + [{"name": "scratch", "emptyDir": {}}]
        if spec.provisioning_config:
            vol = f"intel-{dev}-config-volume"
            mounts.append({"name": vol, "mountPath": "/idxd-init/conf"})
            volumes.append(_config_volume(vol, spec.provisioning_config, None))
        name = "intel-idxd-config-initcontainer" if dsa else "intel-iaa-initcontainer"
        return (
            [
                {
                    **base,
                    "name": name,
                    "env": env,
                    "securityContext": _init_security(writes_sysfs=True),
                    "volumeMounts": mounts,
                }
            ],
            volumes,
        )
    if isinstance(spec, QatSpec):
        drivers = spec.kernel_vf_drivers or QAT_DEFAULT_VF_DRIVERS
        # The PF's qat/state, qat/cfg_services and sriov_numvfs and the VFs' driver_override live under
        # /sys/devices; unbind and the vfio-pci bind under /sys/bus/pci/drivers. Nothing else is written.
        sysfs = (
            HostMount("sysfs", "/sys/devices", "/sys/devices", host_type="Directory"),
            HostMount("sysfs-pci-drivers", PCI_DRIVERS, PCI_DRIVERS, host_type="Directory"),
        )
        mounts = [m.mount() for m in sysfs]
        volumes = [m.volume() for m in sysfs]
        if spec.provisioning_config:
            mounts.append({"name": "intel-qat-config-volume", "mountPath": "/qat-init/conf"})
            volumes.append(_config_volume("intel-qat-config-volume", spec.provisioning_config, 0o440))
        return (
            [
                {
                    **base,
                    "name": "intel-qat-initcontainer",
                    "env": [
                        {"name": "ENABLED_QAT_PF_PCIIDS", "value": qat_pf_ids(drivers)},
                        _node_name_env(),
                    ],
                    "securityContext": _init_security(writes_sysfs=True),
                    "volumeMounts": mounts,
                }
            ],
            volumes,
        )
    if isinstance(spec, (GpuSpec, SgxSpec)):
        vol = "nfd-sources" if isinstance(spec, GpuSpec) else "nfd-features"
        name = "intel-gpu-initcontainer" if isinstance(spec, GpuSpec) else "intel-sgx-initcontainer"
        nfd = HostMount(vol, NFD_SOURCE_DIR, NFD_SOURCE_DIR, host_type="DirectoryOrCreate")
        return (
            [{**base, "name": name, "securityContext": _init_security(), "volumeMounts": [nfd.mount()]}],
            [nfd.volume()],
        )
    if isinstance(spec, FpgaSpec):
        sw = HostMount(
            "intel-fpga-sw", "/opt/intel/fpga-sw", "/opt/intel/fpga-sw", host_type="DirectoryOrCreate"
        )
        fpga_init: JSON = {
            **base,
            "name": "intel-fpga-initcontainer",
            "securityContext": _init_security(selinux=False),
            "volumeMounts": [sw.mount()],
        }
        if images.is_node_image(init_image):  # upstream's init image brings its own entrypoint
            fpga_init["command"] = list(images.FPGA_HOOK_INSTALL_COMMAND)
        return [fpga_init], [sw.volume()]
    return [], []


def _main_mounts(spec: AnySpec, tmpl: KindTemplate) -> tuple[HostMount, ...]:
    if isinstance(spec, DsaSpec) and spec.driver == "vfio-pci":
        return tuple(
            HostMount("devfs", "/dev/vfio", "/dev/vfio", True) if m.name == "devfs" else m
            for m in tmpl.mounts
        )
    return tmpl.mounts


def _pod_volumes(spec: AnySpec, tmpl: KindTemplate, init_volumes: list[JSON]) -> list[JSON]:
    """The plugin's volumes, then the init containers'; FPGA lists its CDI directory last, as upstream's
    operator does (its DaemonSet gained the CDI directory after the hook directory)."""
    main = [m.volume() for m in _main_mounts(spec, tmpl)]
    if isinstance(spec, FpgaSpec):
        last = [v for v in main if v["name"] == "cdidir"]
        return [v for v in main if v["name"] != "cdidir"] + init_volumes + last
    return main + init_volumes


def plugin_container(spec: AnySpec) -> JSON:
    """The single plugin container."""
    kind = spec.KIND
    tmpl = TEMPLATES[kind]
    sc: JSON = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if tmpl.selinux:
        sc["seLinuxOptions"] = {"type": PLUGIN_SELINUX}
    env: list[JSON] = []
    if tmpl.node_name_env:
        env.append(_node_name_env())
    if tmpl.host_ip_env:
        env.append({"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}})
    container: JSON = {
        "name": kind.daemonset_base,
        "image": spec.image or images.default_plugin_image(kind),
        "imagePullPolicy": "IfNotPresent",
        "command": [images.plugin_command(kind)],
        "args": plugin_args(spec),
        "securityContext": sc,
        "resources": {
            "requests": {"memory": tmpl.requests[0], "cpu": tmpl.requests[1]},
            "limits": {"memory": tmpl.limits[0], "cpu": tmpl.limits[1]},
        },
        "volumeMounts": [m.mount() for m in _main_mounts(spec, tmpl)],
    }
    if env:
        container["env"] = env
    if tmpl.termination_log:
        container["terminationMessagePath"] = "/tmp/termination-log"
    return container


@dataclasses.dataclass(frozen=True)
class Owner:
    """The CR that controls the DaemonSet."""

    kind: DeviceKind
    name: str
    uid: str

    def reference(self) -> JSON:
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def node_selector(spec: AnySpec) -> dict[str, str]:
    """The CR's node selector, or the default; IAA always selects amd64 nodes too, as upstream's IAA does."""
    selector = dict(spec.node_selector) if spec.node_selector else dict(DEFAULT_NODE_SELECTOR)
    if isinstance(spec, IaaSpec):
        selector.update(DEFAULT_NODE_SELECTOR)
    return selector


def desired_daemonset(
    spec: AnySpec, owner: Owner, namespace: str, pull_secret: str = "", fpga_service_account: str = ""
) -> JSON:
    """Complete DaemonSet for ``spec`` (already carrying its effective images) owned by ``owner``.

    ``fpga_service_account`` names the ServiceAccount of FPGA plugin pods: the plugin reads its node's
    mode annotation, which the namespace's default ServiceAccount may not. Empty keeps the default one.
    """
    kind = spec.KIND
    tmpl = TEMPLATES[kind]
    app = {"app": kind.daemonset_base}
    init_containers, init_volumes = init_parts(spec)
    pod: JSON = {
        "nodeSelector": node_selector(spec),
        "containers": [plugin_container(spec)],
        "volumes": _pod_volumes(spec, tmpl, init_volumes),
    }
    if tmpl.automount_token is not None:
        pod["automountServiceAccountToken"] = tmpl.automount_token
    if kind is DeviceKind.FPGA and fpga_service_account:
        pod["serviceAccountName"] = fpga_service_account
    if init_containers:
        pod["initContainers"] = init_containers
    if spec.tolerations is not None:
        pod["tolerations"] = [t.to_dict() for t in spec.tolerations]
    if pull_secret:
        pod["imagePullSecrets"] = [{"name": pull_secret}]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": kind.daemonset_name(owner.name),
            "namespace": namespace,
            "labels": {**app, MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "selector": {"matchLabels": dict(app)},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {"metadata": {"labels": dict(app)}, "spec": pod},
        },
    }
