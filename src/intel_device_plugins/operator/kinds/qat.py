"""QAT: the spec, the DaemonSet template, the plugin arguments, the init container that configures the
physical functions, and the QAT admission rules."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import ClassVar, Final

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.pod import (
    DRA_LIMITS,
    DRA_REQUESTS,
    PCI_DRIVERS,
    PLUGIN_MEMORY_LIMIT,
    PLUGIN_MEMORY_REQUEST,
    SOCKETS,
    HostMount,
    KindTemplate,
    config_volume,
    init_base,
    init_security,
    node_name_env,
)
from intel_device_plugins.operator.profile import (
    DraTemplate,
    Findings,
    InitParts,
    KindProfile,
    count_arg,
    provisioning_needs_init_image,
)
from intel_device_plugins.operator.spec import (
    POS_INT,
    STR,
    FieldError,
    InitImageSpec,
    deploy_as_field,
    spec_field,
)
from intel_device_plugins.plugins.flagnames import (
    ALLOCATION_POLICY,
    QAT_DPDK_DRIVER,
    QAT_KERNEL_VF_DRIVERS,
    QAT_MAX_NUM_DEVICES,
    flag,
)

QAT_VF_DRIVERS: Final = (
    "dh895xccvf",
    "c6xxvf",
    "c3xxxvf",
    "d15xxvf",
    "4xxxvf",
    "420xxvf",
    "c4xxxvf",
    "6xxxvf",
)


@dataclasses.dataclass(frozen=True)
class QatSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.QAT

    provisioning_config: str = spec_field(
        "provisioningConfig", STR, "Name of a ConfigMap with the QAT device configuration.", ""
    )
    preferred_allocation_policy: str = spec_field(
        "preferredAllocationPolicy",
        {"type": "string", "enum": ["balanced", "packed"]},
        "Allocation policy for QAT virtual functions.",
        "",
    )
    dpdk_driver: str = spec_field(
        "dpdkDriver",
        {"type": "string", "enum": ["igb_uio", "vfio-pci"]},
        "Userspace driver the virtual functions are bound to.",
        "",
    )
    kernel_vf_drivers: tuple[str, ...] = spec_field(
        "kernelVfDrivers",
        {"type": "array", "items": {"type": "string", "enum": list(QAT_VF_DRIVERS)}},
        "Kernel VF drivers the plugin takes devices from.",
        (),
    )
    max_num_devices: int = spec_field(
        "maxNumDevices", POS_INT, "Maximum number of QAT devices exposed per node.", 0
    )
    deploy_as: str = deploy_as_field()


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

TEMPLATE: Final = KindTemplate(
    (
        HostMount("devdir", "/dev/vfio", "/dev/vfio", True),
        HostMount("debugfsdir", "/sys/kernel/debug", "/sys/kernel/debug", True),
        HostMount("pcidir", "/sys/bus/pci", "/sys/bus/pci"),
        SOCKETS,
    ),
    (PLUGIN_MEMORY_REQUEST, "70m"),
    (PLUGIN_MEMORY_LIMIT, "140m"),
    False,
)


def device_args(spec: QatSpec) -> list[str]:
    """Which VFs are served and how: the flags the plugin and the DRA driver share."""
    return [
        flag(QAT_DPDK_DRIVER),
        spec.dpdk_driver or "vfio-pci",
        flag(QAT_KERNEL_VF_DRIVERS),
        ",".join(spec.kernel_vf_drivers or QAT_DEFAULT_VF_DRIVERS),
        flag(QAT_MAX_NUM_DEVICES),
        count_arg(spec.max_num_devices, 32),
    ]


def plugin_args(spec: QatSpec) -> list[str]:
    args = device_args(spec)
    if spec.preferred_allocation_policy:
        args += [flag(ALLOCATION_POLICY), spec.preferred_allocation_policy]
    return args


def qat_pf_ids(vf_drivers: Sequence[str]) -> str:
    """Value of ``ENABLED_QAT_PF_PCIIDS``: the PF IDs of each VF driver, space-separated, in spec order."""
    return " ".join(pf for drv in vf_drivers for pf in QAT_PF_IDS.get(drv, ()))


def init_parts(spec: QatSpec) -> InitParts:
    if not spec.init_image:
        return [], []
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
        volumes.append(config_volume("intel-qat-config-volume", spec.provisioning_config, 0o440))
    container = {
        **init_base(spec.init_image),
        "name": "intel-qat-initcontainer",
        "env": [{"name": "ENABLED_QAT_PF_PCIIDS", "value": qat_pf_ids(drivers)}, node_name_env()],
        "securityContext": init_security(writes_sysfs=True),
        "volumeMounts": mounts,
    }
    return [container], volumes


def validate(spec: QatSpec) -> Findings:
    errors = provisioning_needs_init_image(spec.provisioning_config, spec.init_image)
    if spec.provisioning_config and not ({"4xxxvf", "420xxvf"} & set(spec.kernel_vf_drivers)):
        errors.append(
            FieldError(
                "spec.provisioningConfig", "ProvisioningConfig is available only for 4xxx and 420xx devices"
            )
        )
    return errors, []


def dra_unused_fields(spec: QatSpec) -> list[FieldError]:
    if spec.preferred_allocation_policy:
        return [
            FieldError(
                "spec.preferredAllocationPolicy",
                "means nothing for deployAs DRADriver: the scheduler allocates the VFs",
            )
        ]
    return []


DRA_PCI: Final = HostMount("pcidir", "/sys/bus/pci", "/sys/bus/pci")
"""The driver binds VFs to the DPDK driver through sysfs, as the plugin does (its template's ``pcidir``)."""

DRA: Final = DraTemplate[QatSpec](
    requests=DRA_REQUESTS,
    limits=DRA_LIMITS,
    unused_fields=dra_unused_fields,
    args=device_args,
    mounts=lambda spec: (DRA_PCI,),
)

PROFILE: Final = KindProfile(QatSpec, TEMPLATE, plugin_args, init_parts, validate, dra=DRA)
