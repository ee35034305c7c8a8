"""The NUMA cache plugins with many devices use to keep a scan cheap."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.topology import TopologyError
from intel_device_plugins.sim.fakefs import FakeTree


def test_answers_like_the_uncached_lookup_and_remembers(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path, numa_nodes=2)
    function = tree.pci_function("0000:10:00.0", vendor="0x8086", device="0x2710", numa_node=1, driver=None)
    cache = NumaCache(tmp_path)
    assert cache(function.sysfs_dir) == (1,)
    tree.write("/sys/devices/pci0000:10/0000:10:00.0/numa_node", "0\n")
    assert cache(function.sysfs_dir) == (1,)


def test_errors_are_raised_and_not_remembered(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    function = tree.pci_function("0000:10:00.0", vendor="0x8086", device="0x2710", numa_node=0, driver=None)
    tree.write("/sys/devices/pci0000:10/0000:10:00.0/numa_node", "zero\n")
    cache = NumaCache(tmp_path)
    with pytest.raises(TopologyError):
        cache(function.sysfs_dir)
    tree.write("/sys/devices/pci0000:10/0000:10:00.0/numa_node", "0\n")
    assert cache(function.sysfs_dir) == (0,)
