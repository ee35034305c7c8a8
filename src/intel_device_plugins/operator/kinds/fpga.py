"""FPGA: the spec, the DaemonSet template, the plugin arguments and the init container that installs
the CRI hook."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Final

from intel_device_plugins.operator import images
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
from intel_device_plugins.operator.profile import DraTemplate, Findings, InitParts, KindProfile, no_fields
from intel_device_plugins.operator.spec import InitImageSpec, deploy_as_field, spec_field
from intel_device_plugins.plugins.flagnames import FPGA_MODE, flag


@dataclasses.dataclass(frozen=True)
class FpgaSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.FPGA

    mode: str = spec_field(
        "mode",
        {"type": "string", "enum": ["af", "region", "regiondevel"]},
        "Operation mode of the FPGA plugin.",
        "",
    )
    deploy_as: str = deploy_as_field()


TEMPLATE: Final = KindTemplate(
    (
        HostMount("devfs", "/dev", "/dev", True),
        HostMount("sysfs", "/sys/class", "/sys/class", True),
        SOCKETS,
        HostMount("cdidir", "/var/run/cdi", "/var/run/cdi", host_type="DirectoryOrCreate"),
    ),
    (PLUGIN_MEMORY_REQUEST, "80m"),
    (PLUGIN_MEMORY_LIMIT, "160m"),
    None,  # the token reads the node's fpga.intel.com/device-plugin-mode annotation
    termination_log=True,
)


def plugin_args(spec: FpgaSpec) -> list[str]:
    return [flag(FPGA_MODE), spec.mode or "af"]


def init_parts(spec: FpgaSpec) -> InitParts:
    """An FPGA CR without ``initImage`` still gets the hook installed, from the default FPGA init image."""
    init_image = spec.init_image or images.default_init_image(spec.KIND, spec.image) or ""
    if not init_image:
        return [], []
    sw = HostMount("intel-fpga-sw", "/opt/intel/fpga-sw", "/opt/intel/fpga-sw", host_type="DirectoryOrCreate")
    container = {
        **init_base(init_image),
        "name": "intel-fpga-initcontainer",
        "securityContext": init_security(selinux=False),
        "volumeMounts": [sw.mount()],
    }
    if images.is_node_image(init_image):  # upstream's init image brings its own entrypoint
        container["command"] = list(images.FPGA_HOOK_INSTALL_COMMAND)
    return [container], [sw.volume()]


def validate(spec: FpgaSpec) -> Findings:
    if not spec.init_image:
        return [], ["spec.initImage is empty; the default FPGA init image is used"]
    return [], []


DRA: Final = DraTemplate[FpgaSpec](
    # Every field means the same to the driver: the mode decides what a device is, and the init container
    # installs the CRI hook that region mode's CDI specs run.
    requests=DRA_REQUESTS,
    limits=DRA_LIMITS,
    unused_fields=no_fields,
    args=plugin_args,
)

PROFILE: Final = KindProfile(
    FpgaSpec,
    TEMPLATE,
    plugin_args,
    init_parts,
    validate,
    late_volumes=("cdidir",),  # upstream's DaemonSet gained the CDI directory after the hook directory
    plugin_service_account=True,
    dra=DRA,
)
