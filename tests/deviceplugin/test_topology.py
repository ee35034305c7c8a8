from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.topology import (
    TopologyError,
    numa_nodes_of,
    numa_nodes_of_all,
    sysfs_dir_of_node,
)
from intel_device_plugins.sim.fakefs import FakeTree


def device(tree: FakeTree, address: str, numa: str, cpus: str | None = "0-3") -> Path:
    sysfs = f"/sys/devices/pci0000:00/{address}"
    tree.write(f"{sysfs}/numa_node", numa + "\n")
    if cpus is not None:
        tree.write(f"{sysfs}/local_cpulist", cpus + "\n")
    return tree.path(sysfs)


def test_numa_node_of_a_device(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    assert numa_nodes_of(device(tree, "0000:00:01.0", "1"), tmp_path) == (1,)


def test_minus_one_means_no_topology(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    assert numa_nodes_of(device(tree, "0000:00:01.0", "-1", cpus=""), tmp_path) == ()


def test_walks_up_to_the_parent_bridge(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    device(tree, "0000:00:01.0", "1")
    child = tree.mkdir("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0")
    assert numa_nodes_of(child, tmp_path) == (1,)


def test_numa_without_cpus_anywhere_is_a_socket_and_dropped(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    assert numa_nodes_of(device(tree, "0000:00:01.0", "1", cpus=""), tmp_path) == ()


def test_numa_without_local_cpus_uses_cpus_further_up(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    tree.write("/sys/devices/pci0000:00/local_cpulist", "0-3\n")
    assert numa_nodes_of(device(tree, "0000:00:01.0", "2", cpus=""), tmp_path) == (2,)


def test_garbage_is_an_error_naming_the_file(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    with pytest.raises(TopologyError, match="numa_node"):
        numa_nodes_of(device(tree, "0000:00:01.0", "zero"), tmp_path)


def test_union_is_sorted_and_unique(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    dirs = [
        device(tree, "0000:00:01.0", "3"),
        device(tree, "0000:00:02.0", "1"),
        device(tree, "0000:00:03.0", "3"),
    ]
    assert numa_nodes_of_all(dirs, tmp_path) == (1, 3)


def test_nothing_outside_sys_devices_is_read(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    tree.write("/sys/numa_node", "1\n")
    assert numa_nodes_of(tree.mkdir("/sys/class/x"), tmp_path) == ()


def test_plain_file_on_a_pseudo_filesystem_has_no_device(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        sysfs_dir_of_node(tmp_path / "missing", tmp_path)


def test_char_device_maps_to_sys_dev_char(tmp_path: Path) -> None:
    # /dev/null is 1:3 on every Linux system.
    assert sysfs_dir_of_node(Path("/dev/null"), tmp_path).name == "1:3"
