"""NPU: the spec and the DaemonSet template (the NPU plugin has no init container)."""

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
)
from intel_device_plugins.operator.profile import DraTemplate, KindProfile, count_arg, shared_dev_num_unused
from intel_device_plugins.operator.spec import (
    SHARED_DEV_NUM_SCHEMA,
    CommonSpec,
    FieldError,
    deploy_as_field,
    spec_field,
)
from intel_device_plugins.plugins.flagnames import SHARED_DEV_NUM, flag


@dataclasses.dataclass(frozen=True)
class NpuSpec(CommonSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.NPU
    HAS_INIT_IMAGE: ClassVar[bool] = False

    shared_dev_num: int = spec_field(
        "sharedDevNum", SHARED_DEV_NUM_SCHEMA, "Number of containers that may share one NPU.", 0
    )
    deploy_as: str = deploy_as_field()


TEMPLATE: Final = KindTemplate(
    (
        HostMount("devfs", "/dev/accel", "/dev/accel", True),
        HostMount("sysfsaccel", "/sys/class/accel", "/sys/class/accel", True),
        SOCKETS,
    ),
    (PLUGIN_MEMORY_REQUEST, "40m"),
    (PLUGIN_MEMORY_LIMIT, "100m"),
    False,  # the plugin never calls the API server
)


def plugin_args(spec: NpuSpec) -> list[str]:
    return [flag(SHARED_DEV_NUM), count_arg(spec.shared_dev_num, 1)]


def dra_unused_fields(spec: NpuSpec) -> list[FieldError]:
    return shared_dev_num_unused(spec.shared_dev_num, "a claim gets a whole NPU")


DRA: Final = DraTemplate[NpuSpec](requests=DRA_REQUESTS, limits=DRA_LIMITS, unused_fields=dra_unused_fields)

PROFILE: Final = KindProfile(NpuSpec, TEMPLATE, plugin_args, dra=DRA)
