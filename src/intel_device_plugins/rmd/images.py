"""Container images of the RMD operator's components.

The operator, node agent and l3_cache_ways device plugin are console scripts of this project, so they run
from its two images (names, prefix and tag come from ``kube/images.py``): the operator from the non-root
operator image, the agent and plugin from the node image, each picked with ``command``. Only RMD itself is a
separate daemon with its own image; an RmdConfig's ``spec.rmdImage`` overrides the default below.
"""

from __future__ import annotations

from typing import Final

from intel_device_plugins.kube import images

#: Console scripts (pyproject.toml) the manifests and DaemonSets run.
OPERATOR_COMMAND: Final = "intel-rmd-operator"
NODE_AGENT_COMMAND: Final = "intel-rmd-node-agent"
DEVICE_PLUGIN_COMMAND: Final = "intel-rmd-deviceplugin"

#: Environment variable (and the operator flag ``--node-image``) naming the image of the DaemonSets' agent
#: and plugin containers; the manifest sets it so that kustomize ``images:`` rewrites it with the operator's.
NODE_IMAGE_ENV: Final = "RMD_NODE_IMAGE"

#: RMD is a third-party daemon built from its own repository; this name is only the default.
RMD_IMAGE: Final = "rmd:v0.3"


def default_node_image() -> str:
    """Image of the node agent and the device plugin unless the operator is told otherwise."""
    return images.node_image()


def default_rmd_image() -> str:
    return RMD_IMAGE
