"""DLB discovery on simulated nodes: one behaviour per test."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceNode, Health
from intel_device_plugins.plugins.dlb.discovery import scan_dlb
from intel_device_plugins.plugins.dlb.plugin import DlbPlugin
from intel_device_plugins.sim.dlb import add_dlb, remove_dlb
from intel_device_plugins.sim.fakefs import FakeTree


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "node", numa_nodes=2)
    fake.write_numa_nodes()
    fake.mkdir("/dev")
    return fake


def test_a_pf_without_vfs_is_a_pf_device_named_by_its_node(tree: FakeTree) -> None:
    add_dlb(tree)
    result = scan_dlb(tree.root)
    assert result.tree == {
        "pf": {
            "/dev/dlb0": DeviceInfo(
                health=Health.HEALTHY,
                nodes=(DeviceNode(str(tree.root / "dev/dlb0"), str(tree.root / "dev/dlb0")),),
                numa_nodes=(0,),
            )
        }
    }
    assert result.problems == ()


def test_a_pf_with_vfs_is_skipped_and_its_vfs_are_vf_devices(tree: FakeTree) -> None:
    dlb = add_dlb(tree, vfs=2, numa_node=1)
    result = scan_dlb(tree.root)
    assert list(result.tree) == ["vf"]
    assert sorted(result.tree["vf"]) == [f"/dev/{name}" for name in dlb.vfs]
    assert {info.numa_nodes for info in result.tree["vf"].values()} == {(1,)}
    assert result.problems == ()


def test_pfs_and_vfs_side_by_side(tree: FakeTree) -> None:
    add_dlb(tree)
    add_dlb(tree, generation="dlb2.5", vfs=3)
    result = scan_dlb(tree.root)
    assert {resource: len(devices) for resource, devices in result.tree.items()} == {"pf": 1, "vf": 3}


def test_other_dev_entries_are_ignored(tree: FakeTree) -> None:
    add_dlb(tree)
    tree.device_node("/dev/dlbfoo")
    tree.device_node("/dev/null")
    assert sorted(scan_dlb(tree.root).tree["pf"]) == ["/dev/dlb0"]


def test_a_node_without_sysfs_entry_is_skipped_with_a_problem(tree: FakeTree) -> None:
    add_dlb(tree)
    tree.device_node("/dev/dlb7")
    result = scan_dlb(tree.root)
    assert sorted(result.tree["pf"]) == ["/dev/dlb0"]
    assert len(result.problems) == 1 and result.problems[0].startswith("/dev/dlb7: no sysfs device")


def test_a_broken_class_link_is_skipped_with_a_problem(tree: FakeTree) -> None:
    add_dlb(tree)
    second = add_dlb(tree)
    link = tree.path(f"/sys/class/dlb2/{second.name}")
    link.unlink()
    link.symlink_to("../../devices/gone")
    result = scan_dlb(tree.root)
    assert sorted(result.tree["pf"]) == ["/dev/dlb0"]
    assert result.problems[0].startswith(f"/dev/{second.name}:")


@pytest.mark.parametrize("content", ["banana", "", "-3"])
def test_garbage_sriov_numvfs_is_skipped_with_a_problem(tree: FakeTree, content: str) -> None:
    add_dlb(tree)
    bad = add_dlb(tree)
    tree.write(f"{tree.sysfs_of(bad.address)}/sriov_numvfs", content)
    result = scan_dlb(tree.root)
    assert sorted(result.tree["pf"]) == ["/dev/dlb0"]
    assert result.problems and result.problems[0].startswith(f"/dev/{bad.name}:")


def test_unreadable_sriov_numvfs_is_skipped_with_a_problem(tree: FakeTree) -> None:
    bad = add_dlb(tree)
    sriov = tree.path(f"{tree.sysfs_of(bad.address)}/sriov_numvfs")
    sriov.unlink()
    sriov.mkdir()  # exists, but reading it fails
    result = scan_dlb(tree.root)
    assert result.tree == {}
    assert "cannot read" in result.problems[0]


def test_a_fifo_in_place_of_sriov_numvfs_is_a_problem_not_a_hang(tree: FakeTree) -> None:
    bad = add_dlb(tree)
    add_dlb(tree)
    sriov = tree.path(f"{tree.sysfs_of(bad.address)}/sriov_numvfs")
    sriov.unlink()
    os.mkfifo(sriov)
    result = scan_dlb(tree.root)  # a blocking read would hang here
    assert sorted(result.tree["pf"]) == ["/dev/dlb1"]
    assert "is a FIFO, not a regular file" in result.problems[0]


def test_bad_numa_information_keeps_the_device_without_topology(tree: FakeTree) -> None:
    dlb = add_dlb(tree)
    tree.write(f"{tree.sysfs_of(dlb.address)}/numa_node", "0-1\n")
    result = scan_dlb(tree.root)
    assert result.tree["pf"]["/dev/dlb0"].numa_nodes == ()
    assert "NUMA" in result.problems[0]


def test_hot_unplug_removes_the_device(tree: FakeTree) -> None:
    add_dlb(tree)
    second = add_dlb(tree)
    remove_dlb(tree, second.name)
    assert sorted(scan_dlb(tree.root).tree["pf"]) == ["/dev/dlb0"]


def test_no_dlb_is_an_empty_tree(tree: FakeTree) -> None:
    assert scan_dlb(tree.root).tree == {}


def test_the_plugin_logs_a_problem_once_and_watches_dev(
    tree: FakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    tree.device_node("/dev/dlb3")
    plugin = DlbPlugin(str(tree.root))
    with caplog.at_level(logging.WARNING):
        plugin.scan()
        plugin.scan()
    assert caplog.text.count("/dev/dlb3: no sysfs device") == 1
    assert plugin.namespace == "dlb.intel.com"
    assert plugin.watch_paths() == (tree.root / "dev",)
