"""Every container image name the operator knows, in one place.

This project's images are named ``<prefix>/<name>:<version>``: the prefix (registry and path, default the
unqualified ``intel-device-plugins``) is chosen at install time, the tag is the package version. One node
image holds every plugin (the DaemonSet picks one with ``command``), so every kind defaults to it.

Upstream's image names stay valid in CRs. How versions relate (see docs/install.md, "Image versions"):
- our images carry our own semantic version (the package version), not upstream's numbers;
- this release replaces upstream's :data:`UPSTREAM_VERSION`; a CR naming upstream's plugin image at that
  version or below gets the operator's plugin image (upstream's rule raised such tags to that version, and
  our image is its drop-in replacement); a newer upstream tag or a digest is deployed as written;
- a CR naming our node image at the operator's version or below gets the operator's configured plugin image
  (so upgrading the operator upgrades the plugins, as upstream's minimum-version rule did).
No module other than this one and ``kube/images.py`` (this project's own two images) spells an image.
"""

from __future__ import annotations

from typing import Final

from intel_device_plugins.kube.images import DEFAULT_IMAGE_PREFIX as DEFAULT_IMAGE_PREFIX
from intel_device_plugins.kube.images import NODE_IMAGE_NAME as NODE_IMAGE_NAME
from intel_device_plugins.kube.images import OPERATOR_IMAGE_NAME as OPERATOR_IMAGE_NAME
from intel_device_plugins.kube.images import PROJECT_VERSION as PROJECT_VERSION
from intel_device_plugins.kube.images import image as image
from intel_device_plugins.kube.images import node_image as node_image
from intel_device_plugins.kube.images import operator_image as operator_image
from intel_device_plugins.operator.imageref import parse_image
from intel_device_plugins.operator.kinds import DeviceKind

#: Upstream release that this project replaces; also the lowest tag kept for upstream's init images.
UPSTREAM_VERSION: Final = "0.37.2"

#: Upstream images that stopped at an earlier release, with that release: a lower tag of theirs is raised
#: only that far, since :data:`UPSTREAM_VERSION` of them was never published. Upstream removed DLB in 0.37.0
#: (this project keeps it), so DLB's images end at 0.36.0.
_LAST_UPSTREAM_RELEASES: Final[dict[str, str]] = {
    "intel-dlb-plugin": "0.36.0",
    "intel-dlb-initcontainer": "0.36.0",
}

#: Registry namespace (vendor path) of upstream's images, named in messages and migration notes only.
UPSTREAM_VENDOR: Final = "intel"

#: Environment variable (and, lower-cased, the operator flag ``--deviceplugin-image``) naming the plugin
#: image the operator deploys for CRs that ask for this project's or upstream's default image.
PLUGIN_IMAGE_ENV: Final = "DEVICEPLUGIN_IMAGE"

#: Init image names the validator expects. DLB and FPGA use the names the shipped images really have
#: (``…-initcontainer``); upstream's validator expected ``…-initimage`` and so rejected its own samples.
#: This project builds no separate init images; for FPGA its node image serves
#: (see :func:`default_init_image`).
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


def upstream_floor(name: str) -> str:
    """The tag an upstream image ``name`` with a lower semantic-version tag is raised to.

    Upstream's operator raised every image below its own release to that release; this project does the
    same with the release it replaces, except for images upstream no longer publishes at that release.
    """
    return _LAST_UPSTREAM_RELEASES.get(name, UPSTREAM_VERSION)


def upstream_plugin_image_name(kind: DeviceKind) -> str:
    """Upstream's image name for ``kind``'s plugin, e.g. ``intel-gpu-plugin``."""
    return f"intel-{kind.value}-plugin"


def plugin_image_names(kind: DeviceKind) -> tuple[str, ...]:
    """Image names the validator accepts for ``kind``'s plugin: ours first, then upstream's."""
    return (NODE_IMAGE_NAME, upstream_plugin_image_name(kind))


def default_plugin_image(kind: DeviceKind) -> str:
    """Reference the defaulting webhook writes into an empty ``spec.image`` (the same for every kind).

    The operator deploys its configured plugin image (``--deviceplugin-image``) for it; see upgrade.py.
    """
    del kind  # one node image serves every kind
    return node_image()


def init_image_name(kind: DeviceKind) -> str | None:
    """Bare init image name for ``kind``, or None for kinds without an init container (NPU)."""
    return _INIT_IMAGE_NAMES.get(kind)


def accepted_init_image_names(kind: DeviceKind) -> tuple[str, ...]:
    """Init image names the validator accepts for ``kind`` (current first, then legacy)."""
    names = [n for n in (_INIT_IMAGE_NAMES.get(kind), _LEGACY_INIT_IMAGE_NAMES.get(kind)) if n]
    if kind is DeviceKind.FPGA:
        names.insert(0, NODE_IMAGE_NAME)  # the node image installs the FPGA hook (intel_fpga_hook_install)
    return tuple(names)


#: Command of the FPGA init container when it runs this project's node image: installs the self-contained
#: CRI hook (bundled Python, loader and libraries plus a launcher) under ``/opt/intel/fpga-sw`` on the host.
FPGA_HOOK_INSTALL_COMMAND: Final = ("intel_fpga_hook_install",)


def default_init_image(kind: DeviceKind, plugin_image: str = "") -> str | None:
    """Init image a DaemonSet gets without ``initImage``: only FPGA has one, this project's node image.

    It is the plugin's own image when that is the node image (so a mirror or pinned tag applies to both),
    otherwise the default node image.
    """
    if kind is not DeviceKind.FPGA:
        return None
    return plugin_image if plugin_image and is_node_image(plugin_image) else node_image()


def is_node_image(reference: str) -> bool:
    """Whether ``reference`` names this project's node image (any registry, tag or digest)."""
    return parse_image(reference).name == NODE_IMAGE_NAME


def plugin_command(kind: DeviceKind) -> str:
    """Console script (upstream binary name) run by the plugin container."""
    return f"intel_{kind.value}_device_plugin"


def dra_driver_command(kind: DeviceKind) -> str:
    """Console script of the kind's DRA driver in this project's node image, e.g. ``intel_gpu_dra_driver``."""
    return f"intel_{kind.value}_dra_driver"


def plugin_image_problem(reference: str) -> str | None:
    """Why ``reference`` cannot be the operator's plugin image, or None (empty means the default)."""
    if not reference:
        return None
    ref = parse_image(reference)
    if not ref.tag and not ref.digest:
        return f'"{reference}" names no tag or digest'
    if ref.digest and not ref.has_valid_digest:
        return f'"{reference}" has an invalid digest (expected sha256:<64 hex digits>)'
    if ref.name != NODE_IMAGE_NAME:
        return f'"{reference}" is not this project\'s node image (…/{NODE_IMAGE_NAME}:<tag>)'
    return None
