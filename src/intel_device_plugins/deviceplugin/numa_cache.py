"""Remembering each device's NUMA nodes across scans.

Working out a device's NUMA placement resolves its sysfs path and walks up the tree, which is the
most expensive part of a scan for plugins with many devices. A device's placement never changes
while it exists, and a sysfs device directory names its full PCI path, so the answer is kept per
directory. A directory that disappears and comes back is at the same PCI position, so the answer
still holds.
"""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.deviceplugin.topology import numa_nodes_of


class NumaCache:
    """``numa_nodes_of`` with memory; errors (``TopologyError``) are raised and not remembered."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._known: dict[Path, tuple[int, ...]] = {}

    def __call__(self, device_dir: Path) -> tuple[int, ...]:
        known = self._known.get(device_dir)
        if known is None:
            known = numa_nodes_of(device_dir, self.root)
            self._known[device_dir] = known
        return known
