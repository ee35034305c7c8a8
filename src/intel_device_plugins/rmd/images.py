"""Container images of the RMD operator's components, in one place.

PLACEHOLDER: the project's own image naming lives in ``operator/images.py``; these names follow its vendor
path and tag and keep upstream's image names (intel-rmd-operator, intel-rmd-node-agent,
intel-rmd-deviceplugin). Align them here, and only here, when the project's image list is final.
"""

from __future__ import annotations

from typing import Final

from intel_device_plugins.operator.images import IMAGE_VENDOR, PLUGIN_IMAGE_VERSION

OPERATOR_IMAGE_NAME: Final = "intel-rmd-operator"
NODE_AGENT_IMAGE_NAME: Final = "intel-rmd-node-agent"
DEVICE_PLUGIN_IMAGE_NAME: Final = "intel-rmd-deviceplugin"
#: RMD itself is built from its own repository; an RmdConfig's spec.rmdImage overrides this.
RMD_IMAGE_NAME: Final = "rmd"
RMD_IMAGE_TAG: Final = "v0.3"


def image(name: str, tag: str = PLUGIN_IMAGE_VERSION) -> str:
    return f"{IMAGE_VENDOR}/{name}:{tag}"


def default_rmd_image() -> str:
    return image(RMD_IMAGE_NAME, RMD_IMAGE_TAG)
