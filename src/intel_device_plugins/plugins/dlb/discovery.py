"""DLB discovery: a pure function from a filesystem root to the ``dlb.intel.com`` device tree.

Every ``/dev/dlbN`` node is one device. Its sysfs PCI function decides the resource: a PF without
VFs is ``pf``, a VF (no SR-IOV attributes at all) is ``vf``, and a PF that has VFs enabled is left
out, since its VFs are the usable devices. Devices that cannot be classified are left out with a
problem line naming them; the others are still advertised.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from intel_device_plugins import sysfs
from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceNode, Discovery
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.sysfs import UnreadableAttribute, missing, read_attribute

NAMESPACE = "dlb.intel.com"
PF = "pf"
VF = "vf"
_NODE_NAME = re.compile(r"^dlb[0-9]+$")


def classify(device_dir: str) -> tuple[str | None, str]:
    """(``pf``/``vf``/``None``, problem) for one dlb2 PCI function directory.

    ``None`` with no problem means "a PF with VFs": skipped on purpose. One read in the common case:
    the scan runs every second.
    """
    numvfs_file = f"{device_dir}/sriov_numvfs"
    try:
        content = read_attribute(numvfs_file).strip()
    except UnreadableAttribute as error:
        if missing(error):
            if os.path.isdir(device_dir):
                return VF, ""
            return None, f"no sysfs device at {device_dir}; skipped"
        return None, f"cannot read {error}; skipped"
    try:
        count = int(content)
    except ValueError:
        return None, f"{numvfs_file} holds {content!r}, not a number; skipped"
    if count == 0:
        return PF, ""
    if count < 0:
        return None, f"{numvfs_file} holds {count}; skipped"
    return None, ""


NumaLookup = Callable[[Path], tuple[int, ...]]
"""A device directory's NUMA nodes; may raise ``TopologyError``. The shell passes a cached one."""


def _device_key(class_dir: str) -> Path:
    """The class entry's link target: names the device's full PCI path, so it keys a cache safely."""
    try:
        return Path(
            os.path.normpath(os.path.join(os.path.dirname(class_dir), os.readlink(class_dir))), "device"
        )
    except OSError:
        return Path(class_dir, "device")


def scan_dlb(root: Path, numa_of: NumaLookup | None = None) -> Discovery:
    """All DLB devices under ``root``; IDs are the container paths (``/dev/dlb0``), as upstream."""
    lookup = numa_of or (lambda directory: numa_nodes_of(directory, root))
    prefix = str(root).rstrip("/")
    class_root = f"{prefix}/sys/class/dlb2"
    problems: list[str] = []
    tree: dict[str, dict[str, DeviceInfo]] = {PF: {}, VF: {}}
    for name in sysfs.list_dir(f"{prefix}/dev") or ():
        if not _NODE_NAME.match(name):
            continue
        class_dir = f"{class_root}/{name}"
        # Paths go through the links (the kernel follows them); resolving them here costs a stat
        # per path component.
        resource, problem = classify(f"{class_dir}/device")
        if problem:
            problems.append(f"/dev/{name}: {problem}")
        if resource is None:
            continue
        try:
            numa = lookup(_device_key(class_dir))
        except TopologyError as error:
            problems.append(f"/dev/{name}: no NUMA information: {error}")
            numa = ()
        container_path = f"/dev/{name}"
        tree[resource][container_path] = DeviceInfo(
            nodes=(DeviceNode(f"{prefix}{container_path}", f"{prefix}{container_path}"),), numa_nodes=numa
        )
    return Discovery({resource: devices for resource, devices in tree.items() if devices}, tuple(problems))
