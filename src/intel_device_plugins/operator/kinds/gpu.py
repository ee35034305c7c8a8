"""GPU: the spec, the DaemonSet template, the plugin arguments, the NFD hook init container and the
GPU admission rules."""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar, Final

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.pod import (
    CDI,
    DRA_LIMITS,
    DRA_REQUESTS,
    PLUGIN_MEMORY_LIMIT,
    PLUGIN_MEMORY_REQUEST,
    SOCKETS,
    HostMount,
    KindTemplate,
    nfd_hook_init,
)
from intel_device_plugins.operator.profile import DraTemplate, Findings, InitParts, KindProfile, count_arg
from intel_device_plugins.operator.spec import (
    BOOL,
    SHARED_DEV_NUM_SCHEMA,
    STR,
    FieldError,
    InitImageSpec,
    deploy_as_field,
    spec_field,
)
from intel_device_plugins.plugins.flagnames import (
    ALLOCATION_POLICY,
    GPU_ALLOW_IDS,
    GPU_BYPATH,
    GPU_DENY_IDS,
    GPU_ENABLE_MONITORING,
    GPU_MONITORING_MODE,
    SHARED_DEV_NUM,
    flag,
)


@dataclasses.dataclass(frozen=True)
class GpuSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.GPU

    allow_ids: str = spec_field(
        "allowIDs", STR, "Comma-separated PCI device IDs (0xABCD) the plugin may expose.", ""
    )
    deny_ids: str = spec_field(
        "denyIDs", STR, "Comma-separated PCI device IDs (0xABCD) the plugin must not expose.", ""
    )
    preferred_allocation_policy: str = spec_field(
        "preferredAllocationPolicy",
        {"type": "string", "enum": ["balanced", "packed", "none"]},
        "Allocation policy for shared devices; needs sharedDevNum > 1 unless 'none'.",
        "",
    )
    bypath_mode: str = spec_field(
        "bypathMode",
        {"type": "string", "enum": ["none", "single", "all"]},
        "How /dev/dri/by-path links are mounted into containers.",
        "",
    )
    monitoring_mode: str = spec_field(
        "monitoringMode",
        {"type": "string", "enum": ["split", "single"]},
        "Shape of the monitoring resource when enableMonitoring is set.",
        "",
    )
    shared_dev_num: int = spec_field(
        "sharedDevNum", SHARED_DEV_NUM_SCHEMA, "Number of containers that may share one GPU.", 0
    )
    enable_monitoring: bool = spec_field(
        "enableMonitoring", BOOL, "Expose the monitoring resource that grants access to all GPUs.", False
    )
    resource_manager: bool = spec_field(
        "resourceManager",
        BOOL,
        "Deprecated (v0.31): GPU Aware Scheduling resource manager. Accepted and ignored.",
        False,
    )
    deploy_as: str = deploy_as_field()


TEMPLATE: Final = KindTemplate(
    (
        HostMount("devfs", "/dev/dri", "/dev/dri", True),
        HostMount("sysfsdrm", "/sys/class/drm", "/sys/class/drm", True),
        SOCKETS,
        CDI,
    ),
    (PLUGIN_MEMORY_REQUEST, "40m"),
    (PLUGIN_MEMORY_LIMIT, "100m"),
    False,  # the plugin never calls the API server (the resource manager that did is gone since v0.34)
    host_ip_env=True,
)


def plugin_args(spec: GpuSpec) -> list[str]:
    args: list[str] = []
    if spec.enable_monitoring:
        args.append(flag(GPU_ENABLE_MONITORING))
        if spec.monitoring_mode:
            args.append(f"{flag(GPU_MONITORING_MODE)}={spec.monitoring_mode}")
    args += [
        flag(SHARED_DEV_NUM),
        count_arg(spec.shared_dev_num, 1),
        flag(ALLOCATION_POLICY),
        spec.preferred_allocation_policy or "none",
    ]
    if spec.allow_ids:
        args += [flag(GPU_ALLOW_IDS), spec.allow_ids]
    if spec.deny_ids:
        args += [flag(GPU_DENY_IDS), spec.deny_ids]
    if spec.bypath_mode:
        args += [flag(GPU_BYPATH), spec.bypath_mode]
    return args


def init_parts(spec: GpuSpec) -> InitParts:
    if not spec.init_image:
        return [], []
    container, volume = nfd_hook_init(spec.init_image, "intel-gpu-initcontainer", "nfd-sources")
    return [container], [volume]


_PCI_ID_RE: Final = re.compile(r"^0x[0-9a-f]{4}$")


def _pci_ids(path: str, value: str, label: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for item in value.split(","):
        if not item:
            errors.append(FieldError(path, f"Empty PCI Device ID in {label}"))
        elif not _PCI_ID_RE.match(item):
            errors.append(FieldError(path, f"Invalid PCI Device ID: {item}"))
    return errors


def validate(spec: GpuSpec) -> Findings:
    errors: list[FieldError] = []
    warnings: list[str] = []
    policy = spec.preferred_allocation_policy
    if policy in ("packed", "balanced") and spec.shared_dev_num <= 1:
        errors.append(
            FieldError(
                "spec.preferredAllocationPolicy",
                f"'{policy}' PreferredAllocationPolicy is valid only when setting sharedDevNum > 1",
            )
        )
    if spec.allow_ids:
        errors += _pci_ids("spec.allowIDs", spec.allow_ids, "AllowIDs")
    if spec.deny_ids:
        errors += _pci_ids("spec.denyIDs", spec.deny_ids, "DenyIDs")
    if spec.allow_ids and spec.deny_ids:
        errors.append(FieldError("spec.denyIDs", "AllowIDs and DenyIDs cannot be used together"))
    if spec.resource_manager:
        warnings.append("spec.resourceManager is deprecated and ignored")
    return errors, warnings


def dra_unused_fields(spec: GpuSpec) -> list[FieldError]:
    """Fields of the device plugin that the DRA driver has no counterpart for. The values upstream's
    samples carry (sharedDevNum 1, policy none) mean "no sharing" and stay accepted."""
    why = "means nothing for deployAs DRADriver"
    errors: list[FieldError] = []
    if spec.shared_dev_num > 1:
        errors.append(FieldError("spec.sharedDevNum", f"{why}: claims share a GPU by capacity (docs/dra.md)"))
    if spec.preferred_allocation_policy not in ("", "none"):
        errors.append(
            FieldError("spec.preferredAllocationPolicy", f"{why}: the scheduler allocates the devices")
        )
    if spec.enable_monitoring or spec.monitoring_mode:
        path = "spec.enableMonitoring" if spec.enable_monitoring else "spec.monitoringMode"
        errors.append(FieldError(path, f"{why}: monitoring is an admin-access ResourceClaim (docs/dra.md)"))
    if spec.bypath_mode:
        errors.append(FieldError("spec.bypathMode", f"{why}: the driver's CDI specs decide the device nodes"))
    for path, value in (("spec.allowIDs", spec.allow_ids), ("spec.denyIDs", spec.deny_ids)):
        if value:
            errors.append(
                FieldError(path, f"{why}: select devices in the claim or DeviceClass by attribute pciId")
            )
    return errors


DRA: Final = DraTemplate[GpuSpec](
    requests=DRA_REQUESTS,
    limits=DRA_LIMITS,
    unused_fields=dra_unused_fields,
)

PROFILE: Final = KindProfile(
    GpuSpec, TEMPLATE, plugin_args, init_parts, validate, checks_init_image=False, dra=DRA
)
