"""DLB: the spec, the DaemonSet template and the init container that enables the virtual functions."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Final

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.pod import (
    DRA_LIMITS,
    DRA_REQUESTS,
    PLUGIN_MEMORY_LIMIT,
    PLUGIN_MEMORY_REQUEST,
    SOCKETS,
    HostMount,
    KindTemplate,
    init_base,
    init_security,
)
from intel_device_plugins.operator.profile import DraTemplate, InitParts, KindProfile, no_fields
from intel_device_plugins.operator.spec import InitImageSpec, deploy_as_field


@dataclasses.dataclass(frozen=True)
class DlbSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.DLB

    deploy_as: str = deploy_as_field()


TEMPLATE: Final = KindTemplate(
    (
        HostMount("devfs", "/dev", "/dev", True),
        HostMount("sysfs", "/sys/class/dlb2", "/sys/class/dlb2", True),
        SOCKETS,
    ),
    (PLUGIN_MEMORY_REQUEST, "40m"),
    (PLUGIN_MEMORY_LIMIT, "100m"),
    False,
    selinux=False,
    termination_log=True,
)


def plugin_args(spec: DlbSpec) -> list[str]:
    return []


def init_parts(spec: DlbSpec) -> InitParts:
    if not spec.init_image:
        return [], []
    return (
        [
            {
                **init_base(spec.init_image),
                "name": "enable-vfs",
                "securityContext": init_security(writes_sysfs=True, selinux=False),
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


DRA: Final = DraTemplate[DlbSpec](requests=DRA_REQUESTS, limits=DRA_LIMITS, unused_fields=no_fields)

PROFILE: Final = KindProfile(DlbSpec, TEMPLATE, plugin_args, init_parts, dra=DRA)
