"""The project's plugin images on a real node: where the image archive is, and the DaemonSet the
operator builds for a sample CR.

Why build the DaemonSet with the operator's own function rather than run the operator: the
plugin side (image, command, host paths, security context) is then exactly what the operator
writes, while the test needs no operator pod, which cannot reach the API server from the node's
network yet (docs/node.md).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import yaml

from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from k8stest.binaries import repo_root
from k8stest.node import REAL_NODE_TOLERATION

IMAGES_CACHE_ENV = "IMAGES_CACHE"
PLUGIN_NAMESPACE = "inteldeviceplugins-system"
SAMPLES = Path("deploy/operator/samples")


def image_archive(target: str) -> Path | None:
    """The newest ``<target>-*.oci.tar`` (``node`` or ``operator``) that ``make images``
    (tools/images/build.py) left in its cache (same lookup: ``IMAGES_CACHE``, else
    ``$XDG_CACHE_HOME`` or ~/.cache), if any."""
    xdg_cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    cache = os.environ.get(IMAGES_CACHE_ENV) or os.path.join(xdg_cache, "intel-device-plugins", "images")
    archives = sorted(glob.glob(f"{cache}/{target}-*.oci.tar"), key=os.path.getmtime)
    return Path(archives[-1]) if archives else None


def node_image_archive() -> Path | None:
    return image_archive("node")


def sample_daemonset(
    kind: DeviceKind, image: str, namespace: str = PLUGIN_NAMESPACE
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the sample CR's spec with ``image``, the operator's DaemonSet for it).

    The spec also tolerates the real node's taint (``tolerations`` is a CR field, so the
    DaemonSet stays what the operator writes for such a CR).

    The owner reference is dropped: no CR object exists, and the garbage collector would delete a
    DaemonSet whose owner is missing.
    """
    root = repo_root()
    if root is None:
        raise FileNotFoundError("the repository's deploy/ directory (k8stest runs from a checkout)")
    sample = yaml.safe_load((root / SAMPLES / f"deviceplugin_v1_{kind.value}deviceplugin.yaml").read_text())
    spec = {**sample["spec"], "image": image, "tolerations": [dict(REAL_NODE_TOLERATION)]}
    ds = desired_daemonset(parse_spec(kind, spec), Owner(kind, sample["metadata"]["name"], "uid"), namespace)
    del ds["metadata"]["ownerReferences"]
    return spec, ds
