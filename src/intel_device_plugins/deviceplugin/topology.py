"""NUMA placement of devices, read from sysfs.

Pure functions of a filesystem root, so a simulated node answers exactly like a real one. Plugins
usually know the sysfs directory of their device already and pass it here directly; device nodes can
be mapped to sysfs through ``/sys/dev/<char|block>/<major>:<minor>`` with :func:`sysfs_dir_of_node`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from intel_device_plugins.deviceplugin.model import MAX_NUMA_NODE
from intel_device_plugins.sysfs import UnreadableAttribute, read_attribute


class TopologyError(ValueError):
    """NUMA information exists but cannot be understood; the message names the file."""


def _read_trimmed(path: str) -> str:
    """An attribute's text; ``""`` when it is absent. Present but unreadable is a ``TopologyError``."""
    try:
        return read_attribute(path).strip()
    except UnreadableAttribute as error:
        if error.errno == errno.ENOENT:
            return ""
        raise TopologyError(str(error)) from None


def _parse_numa(value: str, source: str) -> tuple[int, ...]:
    if value in ("", "-1"):
        return ()
    nodes: list[int] = []
    for item in value.split(","):
        item = item.strip()
        try:
            node = int(item)
        except ValueError:
            raise TopologyError(f"{source}: NUMA node {item!r} is not an integer") from None
        if node < 0:
            raise TopologyError(f"{source}: NUMA node {node} is negative")
        if node > MAX_NUMA_NODE:
            raise TopologyError(f"{source}: NUMA node {node} is out of range (0 to {MAX_NUMA_NODE})")
        nodes.append(node)
    return tuple(nodes)


def devices_root(root: Path | str = "/") -> str:
    """The resolved ``<root>/sys/devices``; device directories are walked up to here and no further."""
    return os.path.realpath(os.path.join(root, "sys", "devices"))


def numa_nodes_of_resolved(device_dir: str, sys_devices: str) -> tuple[int, ...]:
    """:func:`numa_nodes_of` for an already resolved directory (saves the path resolution in scans)."""
    chain: list[str] = []
    current = device_dir
    while current == sys_devices or current.startswith(sys_devices + "/"):
        chain.append(current)
        current = os.path.dirname(current)
    for index, directory in enumerate(chain):
        numa_file = os.path.join(directory, "numa_node")
        numa = _parse_numa(_read_trimmed(numa_file), numa_file)
        cpus = _read_trimmed(os.path.join(directory, "local_cpulist"))
        if not numa and not cpus:
            continue
        if numa and not cpus:
            has_cpus_above = any(
                _read_trimmed(os.path.join(parent, "local_cpulist")) for parent in chain[index + 1 :]
            )
            return numa if has_cpus_above else ()
        return numa
    return ()


def numa_nodes_of(device_dir: Path | str, root: Path | str = "/") -> tuple[int, ...]:
    """NUMA nodes of one sysfs device directory under ``root``; empty when unknown.

    Walks from the device towards ``/sys/devices`` and takes the first directory that has NUMA or
    CPU information. A ``numa_node`` of -1 means "none". A NUMA value whose CPU list is empty along
    the whole chain (a firmware quirk) is a socket number, not a NUMA node, and is dropped.
    """
    return numa_nodes_of_resolved(os.path.realpath(device_dir), devices_root(root))


def numa_nodes_of_all(device_dirs: Iterable[Path | str], root: Path | str = "/") -> tuple[int, ...]:
    """Sorted union of the NUMA nodes of several sysfs device directories."""
    nodes: set[int] = set()
    for device_dir in device_dirs:
        nodes.update(numa_nodes_of(device_dir, root))
    return tuple(sorted(nodes))


def sysfs_dir_of_node(node: Path, root: Path = Path("/")) -> Path:
    """The sysfs directory behind a device node (or the block device holding a plain file).

    Raises ``FileNotFoundError`` naming the node when it does not exist, and ``TopologyError`` when
    it has no real device number (major 0).
    """
    info = node.stat()
    if stat.S_ISCHR(info.st_mode):
        kind, number = "char", info.st_rdev
    elif stat.S_ISBLK(info.st_mode):
        kind, number = "block", info.st_rdev
    else:
        kind, number = "block", info.st_dev
    major, minor = os.major(number), os.minor(number)
    if major == 0:
        raise TopologyError(f"{node}: no device number (major 0)")
    return Path(os.path.realpath(root / "sys" / "dev" / kind / f"{major}:{minor}"))
