"""IAA: the spec, the DaemonSet template, the plugin arguments and the idxd init container."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Final

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.kinds.idxd import SHARED_QUEUES, idxd_init_parts
from intel_device_plugins.operator.pod import (
    DEFAULT_NODE_SELECTOR,
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
from intel_device_plugins.plugins.flagnames import SHARED_DEV_NUM, flag


@dataclasses.dataclass(frozen=True)
class IaaSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.IAA

    provisioning_config: str = spec_field(
        "provisioningConfig", STR, "Name of a ConfigMap with the idxd provisioning configuration.", ""
    )
    shared_dev_num: int = spec_field(
        "sharedDevNum", SHARED_DEV_NUM_SCHEMA, "Number of containers that may share one shared work queue.", 0
    )
    deploy_as: str = deploy_as_field()


TEMPLATE: Final = KindTemplate(
    (
        HostMount("devfs", "/dev/iax", "/dev/iax", True),
        HostMount("chardevs", "/dev/char", "/dev/char", True),
        HostMount("sysfs", "/sys/bus/dsa/devices", "/sys/bus/dsa/devices", True),
        SOCKETS,
    ),
    (PLUGIN_MEMORY_REQUEST, "60m"),
    (PLUGIN_MEMORY_LIMIT, "120m"),
    False,
)


def plugin_args(spec: IaaSpec) -> list[str]:
    return [flag(SHARED_DEV_NUM), count_arg(spec.shared_dev_num, 1)]


def init_parts(spec: IaaSpec) -> InitParts:
    return idxd_init_parts("iaa", "intel-iaa-initcontainer", spec.init_image, spec.provisioning_config)


def validate(spec: IaaSpec) -> Findings:
    return provisioning_needs_init_image(spec.provisioning_config, spec.init_image), []


def dra_unused_fields(spec: IaaSpec) -> list[FieldError]:
    return shared_dev_num_unused(spec.shared_dev_num, SHARED_QUEUES)


DRA: Final = DraTemplate[IaaSpec](requests=DRA_REQUESTS, limits=DRA_LIMITS, unused_fields=dra_unused_fields)

PROFILE: Final = KindProfile(
    IaaSpec,
    TEMPLATE,
    plugin_args,
    init_parts,
    validate,
    forced_node_selector=DEFAULT_NODE_SELECTOR,  # upstream's IAA always selects amd64 nodes too
    dra=DRA,
)
