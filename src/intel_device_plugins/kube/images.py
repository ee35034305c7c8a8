"""This project's two images, as every operator that deploys them names them.

The images are named ``<prefix>/<name>:<version>``: the prefix (registry and path, default the unqualified
``intel-device-plugins``) is chosen at install time, the tag is the package version. One node image holds
every plugin, hook and node agent (a container picks one with ``command``); the operator image holds the
operators.
"""

from __future__ import annotations

import importlib.metadata
from typing import Final


def _package_version() -> str:
    try:
        return importlib.metadata.version("intel-device-plugins")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - the package is always installed
        return "0.0.0"


#: Version of this project; the tag of its images.
PROJECT_VERSION: Final = _package_version()

#: Default repository prefix of this project's images: unqualified, so the runtime's registry settings
#: decide where it comes from until an installation names its own registry.
DEFAULT_IMAGE_PREFIX: Final = "intel-device-plugins"

#: Image names (last path segment) of this project's images, one per Containerfile target.
OPERATOR_IMAGE_NAME: Final = "intel-deviceplugin-operator"
NODE_IMAGE_NAME: Final = "intel-device-plugins-node"


def image(name: str, prefix: str = DEFAULT_IMAGE_PREFIX, tag: str = PROJECT_VERSION) -> str:
    """``<prefix>/<name>:<tag>``; an empty prefix leaves the bare name."""
    prefix = prefix.rstrip("/")
    return f"{prefix}/{name}:{tag}" if prefix else f"{name}:{tag}"


def node_image(prefix: str = DEFAULT_IMAGE_PREFIX, tag: str = PROJECT_VERSION) -> str:
    """This project's node image (every plugin and hook)."""
    return image(NODE_IMAGE_NAME, prefix, tag)


def operator_image(prefix: str = DEFAULT_IMAGE_PREFIX, tag: str = PROJECT_VERSION) -> str:
    """This project's operator image, as the manifests and charts reference it."""
    return image(OPERATOR_IMAGE_NAME, prefix, tag)
