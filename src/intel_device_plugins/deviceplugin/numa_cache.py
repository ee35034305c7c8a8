"""Remembering each device's NUMA nodes across scans.

Working out a device's NUMA placement resolves its sysfs path and walks up the tree, which is the
most expensive part of a scan for plugins with many devices. A device's placement never changes
while it exists; after a hot-unplug and re-plug the kernel creates a new directory, so an answer
is kept per directory and per directory identity (inode and change time).
"""

from __future__ import annotations

import os
from pathlib import Path

from intel_device_plugins.deviceplugin.topology import numa_nodes_of
from intel_device_plugins.sysfs import identity


class NumaCache:
    """``numa_nodes_of`` with memory; errors (``TopologyError``) are raised and not remembered."""

    def __init__(self, root: Path | str) -> None:
        self.root = root or "/"
        self._known: dict[str, tuple[tuple[int, int] | None, tuple[int, ...]]] = {}

    def __call__(self, device_dir: Path | str) -> tuple[int, ...]:
        key = os.fspath(device_dir)
        current = identity(key)
        known = self._known.get(key)
        if known is not None and current is not None and known[0] == current:
            return known[1]
        nodes = numa_nodes_of(key, self.root)
        self._known[key] = (current, nodes)
        return nodes
