"""DSA: the spec, the DaemonSet template, the plugin arguments and the idxd init container."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Final

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.kinds.idxd import SHARED_QUEUES, idxd_init_parts
from intel_device_plugins.operator.pod import (
    DRA_LIMITS,
    DRA_REQUESTS,
    PLUGIN_MEMORY_LIMIT,
    PLUGIN_MEMORY_REQUEST,
    SOCKETS,
    HostMount,
    KindTemplate,
)
from intel_device_plugins.operator.profile import (
    DraTemplate,
    Findings,
    InitParts,
    KindProfile,
    count_arg,
    provisioning_needs_init_image,
    shared_dev_num_unused,
)
from intel_device_plugins.operator.spec import (
    SHARED_DEV_NUM_SCHEMA,
    STR,
    FieldError,
    InitImageSpec,
    deploy_as_field,
    spec_field,
)
from intel_device_plugins.plugins.flagnames import DSA_DRIVER, SHARED_DEV_NUM, flag


@dataclasses.dataclass(frozen=True)
class DsaSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.DSA

    provisioning_config: str = spec_field(
        "provisioningConfig", STR, "Name of a ConfigMap with the idxd provisioning configuration.", ""
    )
    driver: str = spec_field(
        "driver",
        {"type": "string", "enum": ["idxd", "vfio-pci"], "default": "idxd"},
        "Kernel driver the work queues are bound to.",
        "idxd",
    )
    shared_dev_num: int = spec_field(
        "sharedDevNum", SHARED_DEV_NUM_SCHEMA, "Number of containers that may share one shared work queue.", 0
    )
    deploy_as: str = deploy_as_field()


TEMPLATE: Final = KindTemplate(
    (
        HostMount("devfs", "/dev/dsa", "/dev/dsa", True),
        HostMount("chardevs", "/dev/char", "/dev/char", True),
        HostMount("sysfs", "/sys/bus/dsa", "/sys/bus/dsa", True),
        SOCKETS,
    ),
    (PLUGIN_MEMORY_REQUEST, "50m"),
    (PLUGIN_MEMORY_LIMIT, "100m"),
    False,
)


def _driver(spec: DsaSpec) -> str:
    return "vfio-pci" if spec.driver == "vfio-pci" else "idxd"


def plugin_args(spec: DsaSpec) -> list[str]:
    return [flag(DSA_DRIVER), _driver(spec), flag(SHARED_DEV_NUM), count_arg(spec.shared_dev_num, 1)]


def init_parts(spec: DsaSpec) -> InitParts:
    return idxd_init_parts(
        "dsa", "intel-idxd-config-initcontainer", spec.init_image, spec.provisioning_config, _driver(spec)
    )


def main_mounts(spec: DsaSpec) -> tuple[HostMount, ...]:
    """Work queues bound to vfio-pci appear under /dev/vfio, not /dev/dsa."""
    if spec.driver != "vfio-pci":
        return TEMPLATE.mounts
    return tuple(
        HostMount("devfs", "/dev/vfio", "/dev/vfio", True) if m.name == "devfs" else m
        for m in TEMPLATE.mounts
    )


def validate(spec: DsaSpec) -> Findings:
    return provisioning_needs_init_image(spec.provisioning_config, spec.init_image), []


def dra_unused_fields(spec: DsaSpec) -> list[FieldError]:
    errors = shared_dev_num_unused(spec.shared_dev_num, SHARED_QUEUES)
    if spec.driver == "vfio-pci":
        errors.append(
            FieldError(
                "spec.driver",
                "means nothing for deployAs DRADriver: the driver publishes the work queues of idxd devices",
            )
        )
    return errors


DRA: Final = DraTemplate[DsaSpec](requests=DRA_REQUESTS, limits=DRA_LIMITS, unused_fields=dra_unused_fields)

PROFILE: Final = KindProfile(DsaSpec, TEMPLATE, plugin_args, init_parts, validate, main_mounts, dra=DRA)
