"""Every container image name the operator knows, in one place.

Upstream's image names are kept so that custom resources written for the upstream operator validate unchanged;
this project publishes its own plugin builds under the same names. No other module spells an image.
"""

from __future__ import annotations

from typing import Final

from intel_device_plugins.operator.kinds import DeviceKind

#: Tag that this operator deploys by default and the lowest tag it accepts for a plugin image.
PLUGIN_IMAGE_VERSION: Final = "0.36.0"

#: Registry namespace (vendor path) of the default images.
IMAGE_VENDOR: Final = "intel"

#: Image of the operator itself, referenced by the kustomize manifests.
OPERATOR_IMAGE_NAME: Final = "intel-deviceplugin-operator"

_PLUGIN_IMAGE_NAMES: Final[dict[DeviceKind, str]] = {k: f"intel-{k.value}-plugin" for k in DeviceKind}

#: Init image names the validator expects. DLB and FPGA use the names the shipped images really have
#: (``…-initcontainer``); upstream's validator expected ``…-initimage`` and so rejected its own samples.
_INIT_IMAGE_NAMES: Final[dict[DeviceKind, str]] = {
    DeviceKind.DLB: "intel-dlb-initcontainer",
    DeviceKind.DSA: "intel-idxd-config-initcontainer",
    DeviceKind.FPGA: "intel-fpga-initcontainer",
    DeviceKind.GPU: "intel-gpu-initcontainer",
    DeviceKind.IAA: "intel-idxd-config-initcontainer",
    DeviceKind.QAT: "intel-qat-initcontainer",
    DeviceKind.SGX: "intel-sgx-initcontainer",
}

#: Legacy init image names that upstream's validator demanded; still accepted so old CRs keep applying.
_LEGACY_INIT_IMAGE_NAMES: Final[dict[DeviceKind, str]] = {
    DeviceKind.DLB: "intel-dlb-initimage",
    DeviceKind.FPGA: "intel-fpga-initimage",
}

#: Console scripts (upstream binary names) that the plugin containers run.
_PLUGIN_COMMANDS: Final[dict[DeviceKind, str]] = {k: f"intel_{k.value}_device_plugin" for k in DeviceKind}


def plugin_image_name(kind: DeviceKind) -> str:
    """Bare image name (last path segment, no tag) of the plugin for ``kind``."""
    return _PLUGIN_IMAGE_NAMES[kind]


def default_plugin_image(kind: DeviceKind) -> str:
    """Full default reference, used when a CR leaves ``spec.image`` empty."""
    return f"{IMAGE_VENDOR}/{_PLUGIN_IMAGE_NAMES[kind]}:{PLUGIN_IMAGE_VERSION}"


def init_image_name(kind: DeviceKind) -> str | None:
    """Bare init image name for ``kind``, or None for kinds without an init container (NPU)."""
    return _INIT_IMAGE_NAMES.get(kind)


def accepted_init_image_names(kind: DeviceKind) -> tuple[str, ...]:
    """Init image names the validator accepts for ``kind`` (current first, then legacy)."""
    names = [n for n in (_INIT_IMAGE_NAMES.get(kind), _LEGACY_INIT_IMAGE_NAMES.get(kind)) if n]
    return tuple(names)


def default_init_image(kind: DeviceKind) -> str | None:
    """Full default init image reference, or None when the kind has none."""
    name = _INIT_IMAGE_NAMES.get(kind)
    return None if name is None else f"{IMAGE_VENDOR}/{name}:{PLUGIN_IMAGE_VERSION}"


def plugin_command(kind: DeviceKind) -> str:
    """Console script (upstream binary name) run by the plugin container."""
    return _PLUGIN_COMMANDS[kind]


def operator_image(tag: str = "devel") -> str:
    """Reference of the operator image for the manifests."""
    return f"{IMAGE_VENDOR}/{OPERATOR_IMAGE_NAME}:{tag}"
