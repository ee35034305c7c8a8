"""GPU discovery on simulated nodes: what ``scan_gpus`` advertises, skips, and reports as a problem."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.cdi import CDI_VERSION, cdi_spec_document
from intel_device_plugins.deviceplugin.model import (
    CdiDevice,
    DeviceInfo,
    DeviceNode,
    Discovery,
    Health,
    Mount,
)
from intel_device_plugins.plugins.gpu.discovery import (
    CDI_KIND,
    ByPath,
    GpuOptions,
    MonitoringMode,
    scan_gpus,
)
from intel_device_plugins.plugins.gpu.plugin import GpuPlugin
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    """An empty two-NUMA-node machine with ``/sys/class/drm`` and ``/dev/dri/by-path``."""
    fake = FakeTree(tmp_path / "node", numa_nodes=2)
    fake.mkdir("/sys/class/drm")
    fake.mkdir("/dev/dri/by-path")
    fake.write_numa_nodes()
    return fake


def scan(tree: FakeTree, options: GpuOptions | None = None) -> Discovery:
    return scan_gpus(str(tree.root), options or GpuOptions())


def dri(tree: FakeTree, name: str) -> str:
    return str(tree.path(f"/dev/dri/{name}"))


def node(tree: FakeTree, name: str) -> DeviceNode:
    path = dri(tree, name)
    return DeviceNode(path, path, "rw")


def by_path_mount(tree: FakeTree, entry: str) -> Mount:
    path = dri(tree, f"by-path/{entry}")
    return Mount(path, path, read_only=True)


def sysfs(tree: FakeTree, card: gpu.SimulatedCard) -> str:
    return tree.sysfs_of(card.address)


def detach_class_link(tree: FakeTree, card: gpu.SimulatedCard, where: str = "/sys/devices/virtual") -> None:
    """Point ``/sys/class/drm/cardN`` at a class device outside the PCI function's ``drm`` dir.

    Its ``device`` link still leads to the PCI function, so the function's own ``drm`` dir can be
    changed without breaking the card link.
    """
    name = f"card{card.index}"
    tree.mkdir(f"{where}/drm/{name}")
    tree.link(f"{where}/drm/{name}/device", sysfs(tree, card))
    tree.link(f"/sys/class/drm/{name}", f"{where}/drm/{name}")


# ----- what is advertised ---------------------------------------------------------------------


def test_i915_card_is_advertised_with_its_card_and_render_nodes(tree: FakeTree) -> None:
    card = gpu.add_card(tree, numa_node=1)

    result = scan(tree)

    assert result.problems == ()
    assert list(result.tree) == ["i915"]
    info = result.tree["i915"]["card0-0"]
    assert info.health is Health.HEALTHY
    assert info.nodes == (node(tree, "card0"), node(tree, "renderD128"))
    assert info.mounts == (
        by_path_mount(tree, f"pci-{card.address}-card"),
        by_path_mount(tree, f"pci-{card.address}-render"),
    )
    assert info.numa_nodes == (1,)
    assert dict(info.envs) == {}


@pytest.mark.parametrize("driver", ["i915", "xe"])
def test_resource_name_is_the_driver_name(tree: FakeTree, driver: str) -> None:
    gpu.add_card(tree, driver=driver)

    assert list(scan(tree).tree) == [driver]


def test_i915_and_xe_cards_on_one_node_give_two_resources(tree: FakeTree) -> None:
    gpu.add_card(tree, driver="i915")
    gpu.add_card(tree, driver="xe")
    gpu.add_card(tree, driver="i915")

    result = scan(tree)

    assert {kind: list(devices) for kind, devices in result.tree.items()} == {
        "i915": ["card0-0", "card2-0"],
        "xe": ["card1-0"],
    }


def test_card_without_driver_link_is_left_out_not_taken_for_i915(tree: FakeTree) -> None:
    # E.g. an xe card whose driver link is being re-created while it is re-bound.
    card = gpu.add_card(tree, driver="xe", bind_driver=False)
    gpu.add_card(tree, driver="xe")
    assert not tree.path(f"{sysfs(tree, card)}/driver").exists()

    result = scan(tree)

    assert {kind: list(devices) for kind, devices in result.tree.items()} == {"xe": ["card1-0"]}
    (problem,) = result.problems
    assert problem.startswith("GPU card0: has no driver link") and "left out of this scan" in problem


@pytest.mark.parametrize("target", ["driver", "driver.b", "..", "/sys/bus/pci/drivers/nouveau", "i915x"])
def test_resource_names_come_only_from_known_drivers(tree: FakeTree, target: str) -> None:
    card = gpu.add_card(tree)
    link = tree.path(f"{sysfs(tree, card)}/driver")
    link.unlink()
    link.symlink_to(target)  # looping, odd or foreign

    result = scan(tree)

    assert result.tree == {}
    (problem,) = result.problems
    assert "not one of i915, xe" in problem and "card0/device/driver" in problem


@pytest.mark.parametrize("shared", [1, 2, 5])
def test_shared_dev_num_gives_n_ids_per_card_sharing_one_device(tree: FakeTree, shared: int) -> None:
    gpu.add_card(tree)
    gpu.add_card(tree)

    devices = scan(tree, GpuOptions(shared_dev_num=shared)).tree["i915"]

    assert list(devices) == [f"card{c}-{i}" for c in (0, 1) for i in range(shared)]
    assert len({devices[f"card0-{i}"] for i in range(shared)}) == 1
    assert devices["card0-0"] != devices["card1-0"]
    assert devices[f"card1-{shared - 1}"].nodes == (node(tree, "card1"), node(tree, "renderD129"))


def test_ids_are_ordered_by_card_number_not_by_text(tree: FakeTree) -> None:
    for _ in range(12):
        gpu.add_card(tree)

    devices = scan(tree).tree["i915"]

    assert list(devices) == [f"card{n}-0" for n in range(12)]


def test_scanning_is_pure_and_repeatable(tree: FakeTree) -> None:
    gpu.build(tree, [{"count": 2, "mei": True}, {"driver": "xe", "vfs": 2}])
    options = GpuOptions(shared_dev_num=2, enable_monitoring=True)

    assert scan(tree, options) == scan(tree, options)


# ----- what is skipped ------------------------------------------------------------------------


def test_pf_with_vfs_is_skipped_and_its_vfs_are_served(tree: FakeTree) -> None:
    gpu.build(tree, [{"vfs": 2}])  # card0 is the PF, card1 and card2 its VFs

    result = scan(tree)

    assert list(result.tree["i915"]) == ["card1-0", "card2-0"]
    assert result.problems == ()


def test_sriov_capable_card_without_vfs_is_served(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    tree.write(f"{sysfs(tree, card)}/sriov_numvfs", "0\n")

    assert list(scan(tree).tree["i915"]) == ["card0-0"]


def _directory(path: Path) -> None:
    path.mkdir()


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _garbage(path: Path) -> None:
    path.write_text("garbage\n")


def _negative(path: Path) -> None:
    path.write_text("-1\n")


@pytest.mark.parametrize("spoil", [_directory, _fifo, _dev_zero, _garbage, _negative])
def test_unreadable_sriov_state_leaves_the_pf_out_never_next_to_its_vfs(
    tree: FakeTree, spoil: Callable[[Path], None]
) -> None:
    gpu.build(tree, [{"vfs": 2}])  # card0 is the PF, card1 and card2 its VFs
    numvfs = tree.path(f"{tree.sysfs_of(gpu_address(tree, 0))}/sriov_numvfs")
    numvfs.unlink()
    spoil(numvfs)

    result = scan(tree)

    assert list(result.tree["i915"]) == ["card1-0", "card2-0"]
    (problem,) = result.problems
    assert problem.startswith("GPU card0: cannot read its SR-IOV state: ")
    assert "card0/device/sriov_numvfs" in problem
    assert problem.endswith("left out of this scan")


def test_a_fifo_in_place_of_a_vendor_file_leaves_only_that_card_out(tree: FakeTree) -> None:
    first = gpu.add_card(tree)
    gpu.add_card(tree)
    vendor = tree.path(f"{sysfs(tree, first)}/vendor")
    vendor.unlink()
    os.mkfifo(vendor)

    result = scan(tree)  # returns (a blocking read would hang here)

    assert list(result.tree["i915"]) == ["card1-0"]
    reported = tree.path("/sys/class/drm/card0/device/vendor")
    assert result.problems == (
        f"GPU card0: cannot read {reported}: is a FIFO, not a regular file; card left out",
    )


def gpu_address(tree: FakeTree, index: int) -> str:
    return tree.path(f"/sys/class/drm/card{index}").resolve().parent.parent.name


@pytest.mark.parametrize("vendor", ["0x10de", "0x1002", "8086", "0x80860", "garbage", ""])
def test_card_of_another_vendor_or_garbage_vendor_is_skipped(tree: FakeTree, vendor: str) -> None:
    gpu.add_card(tree, vendor=vendor)
    gpu.add_card(tree)

    assert list(scan(tree).tree["i915"]) == ["card1-0"]


def test_vendor_with_surrounding_white_space_is_accepted(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    tree.write(f"{sysfs(tree, card)}/vendor", "  0x8086 \n\n")

    assert list(scan(tree).tree["i915"]) == ["card0-0"]


def test_card_without_vendor_file_is_skipped_with_a_problem_naming_it(tree: FakeTree) -> None:
    first = gpu.add_card(tree)
    gpu.add_card(tree)
    tree.remove(f"{sysfs(tree, first)}/vendor")

    result = scan(tree)

    assert list(result.tree["i915"]) == ["card1-0"]
    assert len(result.problems) == 1
    assert "card0" in result.problems[0]
    assert "vendor" in result.problems[0]


def test_card_without_device_drm_dir_is_skipped(tree: FakeTree) -> None:
    first = gpu.add_card(tree)
    gpu.add_card(tree)
    detach_class_link(tree, first)
    tree.remove(f"{sysfs(tree, first)}/drm")

    assert list(scan(tree).tree["i915"]) == ["card1-0"]


@pytest.mark.parametrize(
    "entry", ["card0-DP-1", "card0-HDMI-A-1", "renderD128", "controlD64", "version", "cardX", "card"]
)
def test_only_cardN_entries_of_the_drm_class_are_considered(tree: FakeTree, entry: str) -> None:
    card = gpu.add_card(tree)
    tree.remove("/sys/class/drm/card0")
    tree.link(f"/sys/class/drm/{entry}", f"{sysfs(tree, card)}/drm/card0")

    result = scan(tree)

    assert result.tree == {}
    assert result.problems == ()


def test_render_nodes_alone_advertise_nothing(tree: FakeTree) -> None:
    gpu.add_card(tree)
    tree.remove("/sys/class/drm/card0")
    assert tree.path("/sys/class/drm/renderD128").exists()

    assert scan(tree).tree == {}


def test_control_nodes_are_never_handed_out(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    assert tree.path(f"{sysfs(tree, card)}/drm/controlD64").is_dir()
    tree.device_node("/dev/dri/controlD64")

    info = scan(tree).tree["i915"]["card0-0"]

    assert info.nodes == (node(tree, "card0"), node(tree, "renderD128"))


def test_missing_control_node_does_not_make_the_card_unhealthy(tree: FakeTree) -> None:
    gpu.add_card(tree)
    assert not tree.path("/dev/dri/controlD64").exists()

    result = scan(tree)

    assert result.tree["i915"]["card0-0"].health is Health.HEALTHY
    assert result.problems == ()


def test_card_whose_device_drm_dir_is_empty_is_skipped(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    detach_class_link(tree, card)
    for entry in ("card0", "renderD128", "controlD64"):
        tree.remove(f"{sysfs(tree, card)}/drm/{entry}")
    assert tree.path(f"{sysfs(tree, card)}/drm").is_dir()

    result = scan(tree)

    assert result.tree == {}
    assert result.problems == ()


# ----- health from presence -------------------------------------------------------------------


def test_card_whose_device_nodes_are_all_missing_is_unhealthy_not_dropped(tree: FakeTree) -> None:
    gpu.add_card(tree)
    gpu.add_card(tree)
    tree.remove("/dev/dri/card1")
    tree.remove("/dev/dri/renderD129")

    result = scan(tree, GpuOptions(shared_dev_num=2))

    devices = result.tree["i915"]
    assert list(devices) == ["card0-0", "card0-1", "card1-0", "card1-1"]
    assert devices["card0-0"].health is Health.HEALTHY
    assert devices["card1-0"].health is Health.UNHEALTHY
    assert devices["card1-1"].health is Health.UNHEALTHY
    assert devices["card1-0"].nodes == ()
    assert devices["card1-0"].cdi is None
    assert len(result.problems) == 1
    assert "card1" in result.problems[0]
    assert "Unhealthy" in result.problems[0]


def test_card_with_render_node_but_no_card_node_is_unhealthy(tree: FakeTree) -> None:
    gpu.add_card(tree)
    tree.remove("/dev/dri/card0")

    result = scan(tree)

    info = result.tree["i915"]["card0-0"]
    assert info.health is Health.UNHEALTHY
    assert info.nodes == (node(tree, "renderD128"),)
    assert len(result.problems) == 1
    assert "card0" in result.problems[0]
    assert "renderD128" not in result.problems[0]


def test_card_becomes_healthy_again_when_its_nodes_reappear(tree: FakeTree) -> None:
    gpu.add_card(tree)
    tree.remove("/dev/dri/renderD128")
    assert scan(tree).tree["i915"]["card0-0"].health is Health.UNHEALTHY

    tree.device_node("/dev/dri/renderD128")

    result = scan(tree)
    assert result.tree["i915"]["card0-0"].health is Health.HEALTHY
    assert result.problems == ()


def test_hot_unplug_and_replug(tree: FakeTree) -> None:
    gpu.add_card(tree)
    gpu.add_card(tree)
    gpu.remove_card(tree, 0)

    assert list(scan(tree).tree["i915"]) == ["card1-0"]

    gpu.add_card(tree)
    assert list(scan(tree).tree["i915"]) == ["card0-0", "card1-0"]

    gpu.remove_card(tree, 0)
    gpu.remove_card(tree, 1)
    assert scan(tree).tree == {}


# ----- allow / deny lists ---------------------------------------------------------------------


def test_allow_list_keeps_only_listed_device_ids(tree: FakeTree) -> None:
    gpu.add_card(tree, device_id="0x56c0")
    gpu.add_card(tree, device_id="0x56c1")
    gpu.add_card(tree, device_id="0xe20b", driver="xe")

    result = scan(tree, GpuOptions(allow_ids=frozenset({"0x56c1", "0xe20b"})))

    assert {kind: list(devices) for kind, devices in result.tree.items()} == {
        "i915": ["card1-0"],
        "xe": ["card2-0"],
    }
    assert result.problems == ()


def test_deny_list_drops_listed_device_ids(tree: FakeTree) -> None:
    gpu.add_card(tree, device_id="0x56c0")
    gpu.add_card(tree, device_id="0x56c1")

    result = scan(tree, GpuOptions(deny_ids=frozenset({"0x56c0"})))

    assert list(result.tree["i915"]) == ["card1-0"]


@pytest.mark.parametrize(
    ("listed", "device_id"),
    [
        ("0x56c", "0x56c0"),  # a prefix of the card's ID
        ("0x56c0", "0x56c"),  # the card's ID is a prefix of the listed one
        ("0x6c0", "0x56c0"),  # a suffix
        ("0x56c1", "0x56c0"),
        ("0x56C0", "0x56c0"),  # case matters, as the kernel writes lowercase
    ],
)
def test_allow_and_deny_ids_match_exactly_not_as_substrings(
    tree: FakeTree, listed: str, device_id: str
) -> None:
    gpu.add_card(tree, device_id=device_id)

    assert scan(tree, GpuOptions(allow_ids=frozenset({listed}))).tree == {}
    assert list(scan(tree, GpuOptions(deny_ids=frozenset({listed}))).tree["i915"]) == ["card0-0"]


def test_substring_of_several_listed_ids_does_not_match(tree: FakeTree) -> None:
    # Upstream tested "0x56c0,0x56c1" contains ID; an ID spanning the comma must not match.
    card = gpu.add_card(tree)
    tree.write(f"{sysfs(tree, card)}/device", "0,0x5\n")

    assert scan(tree, GpuOptions(allow_ids=frozenset({"0x56c0", "0x56c1"}))).tree == {}


def test_device_id_is_read_from_the_first_line(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    tree.write(f"{sysfs(tree, card)}/device", "  0x56c0  \nsecond line\n")

    assert list(scan(tree, GpuOptions(allow_ids=frozenset({"0x56c0"}))).tree["i915"]) == ["card0-0"]


@pytest.mark.parametrize("content", [None, ""])
def test_unreadable_device_id_skips_the_card_with_a_problem_when_lists_are_set(
    tree: FakeTree, content: str | None
) -> None:
    card = gpu.add_card(tree)
    gpu.add_card(tree, device_id="0x56c1")
    if content is None:
        tree.remove(f"{sysfs(tree, card)}/device")
    else:
        tree.write(f"{sysfs(tree, card)}/device", content)

    for options in (
        GpuOptions(allow_ids=frozenset({"0x56c0", "0x56c1"})),
        GpuOptions(deny_ids=frozenset({"0xffff"})),
    ):
        result = scan(tree, options)
        assert list(result.tree["i915"]) == ["card1-0"]
        assert len(result.problems) == 1
        assert "card0" in result.problems[0]


def test_device_id_is_not_needed_without_lists(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    tree.remove(f"{sysfs(tree, card)}/device")

    result = scan(tree)

    assert list(result.tree["i915"]) == ["card0-0"]
    assert result.problems == ()


def test_lists_apply_to_vfs_by_their_own_id(tree: FakeTree) -> None:
    gpu.build(tree, [{"vfs": 2, "device_id": "0x56c0"}])
    vf = tree.path("/sys/class/drm/card2/device/device")
    vf.write_text("0x56c1\n", encoding="utf-8")

    assert list(scan(tree, GpuOptions(deny_ids=frozenset({"0x56c1"}))).tree["i915"]) == ["card1-0"]


# ----- by-path mounts -------------------------------------------------------------------------


def test_by_path_single_mounts_only_the_cards_own_links(tree: FakeTree) -> None:
    # Two functions on one bus: the addresses differ only in the last digit.
    gpu.add_card(tree, address="0000:3a:00.0")
    gpu.add_card(tree, address="0000:3a:00.1")
    tree.link("/dev/dri/by-path/platform-vgem-card", "/dev/dri/card0")

    devices = scan(tree, GpuOptions(by_path=ByPath.SINGLE)).tree["i915"]

    assert devices["card0-0"].mounts == (
        by_path_mount(tree, "pci-0000:3a:00.0-card"),
        by_path_mount(tree, "pci-0000:3a:00.0-render"),
    )
    assert devices["card1-0"].mounts == (
        by_path_mount(tree, "pci-0000:3a:00.1-card"),
        by_path_mount(tree, "pci-0000:3a:00.1-render"),
    )


def test_by_path_single_skips_dangling_links_and_says_so(tree: FakeTree) -> None:
    """A by-path link whose target is gone would be a bind mount of nothing: container creation fails."""
    card = gpu.add_card(tree, address="0000:3a:00.0")
    tree.remove("/dev/dri/renderD128")  # the card is reported Unhealthy for this; the link dangles
    tree.link("/dev/dri/by-path/pci-0000:3a:00.0-extra", "/dev/dri/card7")

    result = scan(tree, GpuOptions(by_path=ByPath.SINGLE))
    info = result.tree["i915"]["card0-0"]

    assert info.mounts == (by_path_mount(tree, "pci-0000:3a:00.0-card"),)
    assert info.cdi is not None and info.cdi.mounts == info.mounts
    # The render link's target is the card's missing node, already reported; the other one is named.
    assert [p for p in result.problems if "renderD128" in p] == [
        f"GPU card0: device nodes ['renderD128'] missing in {tree.path('/dev/dri')}; reported Unhealthy"
    ]
    (dangling,) = [p for p in result.problems if "by-path" in p]
    extra = dri(tree, "by-path/pci-0000:3a:00.0-extra")
    assert (
        dangling == f"GPU card0: by-path link {extra} points to '../card7', which does not exist; not mounted"
    )
    tree.device_node("/dev/dri/card7")  # the target appears: mounted from the next scan on
    assert (
        by_path_mount(tree, "pci-0000:3a:00.0-extra")
        in scan(tree, GpuOptions()).tree["i915"]["card0-0"].mounts
    )
    del card


def test_by_path_none_mounts_nothing(tree: FakeTree) -> None:
    gpu.add_card(tree)

    info = scan(tree, GpuOptions(by_path=ByPath.NONE)).tree["i915"]["card0-0"]

    assert info.mounts == ()
    assert info.cdi is not None
    assert info.cdi.mounts == ()


def test_by_path_all_mounts_the_whole_directory(tree: FakeTree) -> None:
    gpu.add_card(tree)
    gpu.add_card(tree)

    devices = scan(tree, GpuOptions(by_path=ByPath.ALL)).tree["i915"]

    whole = Mount(dri(tree, "by-path"), dri(tree, "by-path"), read_only=True)
    assert devices["card0-0"].mounts == (whole,)
    assert devices["card1-0"].mounts == (whole,)


@pytest.mark.parametrize("mode", list(ByPath))
def test_no_by_path_directory_means_no_mounts(tree: FakeTree, mode: ByPath) -> None:
    gpu.add_card(tree)
    tree.remove("/dev/dri/by-path")

    result = scan(tree, GpuOptions(by_path=mode))

    assert result.tree["i915"]["card0-0"].mounts == ()
    assert result.tree["i915"]["card0-0"].health is Health.HEALTHY


def test_by_path_directory_is_rechecked_on_every_scan(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    tree.remove("/dev/dri/by-path")
    assert scan(tree).tree["i915"]["card0-0"].mounts == ()

    tree.link(f"/dev/dri/by-path/pci-{card.address}-card", "/dev/dri/card0")

    assert scan(tree).tree["i915"]["card0-0"].mounts == (by_path_mount(tree, f"pci-{card.address}-card"),)


def test_by_path_single_needs_the_pci_address_in_the_card_link(tree: FakeTree) -> None:
    # A card whose class link does not end in <address>/drm/cardN gets no by-path mounts.
    card = gpu.add_card(tree)
    detach_class_link(tree, card)

    info = scan(tree).tree["i915"]["card0-0"]

    assert info.mounts == ()
    assert info.nodes == (node(tree, "card0"), node(tree, "renderD128"))


@pytest.mark.parametrize("address", ["0000:3A:00.0", "000:3a:00.0", "0000:3a:00"])
def test_by_path_single_ignores_a_malformed_pci_address(tree: FakeTree, address: str) -> None:
    card = gpu.add_card(tree)
    detach_class_link(tree, card, where=f"/sys/devices/platform/{address}")
    tree.link(f"/dev/dri/by-path/pci-{address}-card", "/dev/dri/card0")

    assert scan(tree).tree["i915"]["card0-0"].mounts == ()


# ----- NUMA -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("numa_node", "expected"), [(0, (0,)), (1, (1,)), (-1, ())])
def test_numa_node_comes_from_sysfs(tree: FakeTree, numa_node: int, expected: tuple[int, ...]) -> None:
    gpu.add_card(tree, numa_node=numa_node)

    result = scan(tree)

    assert result.tree["i915"]["card0-0"].numa_nodes == expected
    assert result.problems == ()


@pytest.mark.parametrize("content", ["garbage", "0-1", "1.5", "-2"])
def test_unusable_numa_node_gives_a_problem_and_no_topology(tree: FakeTree, content: str) -> None:
    card = gpu.add_card(tree, numa_node=1)
    gpu.add_card(tree, numa_node=1)
    tree.write(f"{sysfs(tree, card)}/numa_node", content + "\n")

    result = scan(tree)

    devices = result.tree["i915"]
    assert devices["card0-0"].numa_nodes == ()
    assert devices["card0-0"].health is Health.HEALTHY
    assert devices["card1-0"].numa_nodes == (1,)
    assert len(result.problems) == 1
    assert "card0" in result.problems[0]
    assert "numa_node" in result.problems[0]


def test_numa_node_of_a_card_behind_a_bridge(tree: FakeTree) -> None:
    port = tree.pci_function("0000:80:01.0", vendor="0x8086", device="0x1234", numa_node=1, driver="pcieport")
    card = gpu.add_card(tree, parent="/" + str(port.sysfs_dir.relative_to(tree.root)), numa_node=1)
    tree.remove(f"{sysfs(tree, card)}/numa_node")
    tree.remove(f"{sysfs(tree, card)}/local_cpulist")

    assert scan(tree).tree["i915"]["card0-0"].numa_nodes == (1,)


def test_no_numa_information_at_all_gives_no_topology_and_no_problem(tree: FakeTree) -> None:
    card = gpu.add_card(tree, numa_node=1)
    tree.remove(f"{sysfs(tree, card)}/numa_node")
    tree.remove(f"{sysfs(tree, card)}/local_cpulist")

    result = scan(tree)

    assert result.tree["i915"]["card0-0"].numa_nodes == ()
    assert result.problems == ()


def test_numa_node_without_cpus_is_a_socket_number_and_dropped(tree: FakeTree) -> None:
    # Some firmware reports the socket in numa_node and leaves local_cpulist empty.
    card = gpu.add_card(tree, numa_node=1)
    tree.write(f"{sysfs(tree, card)}/local_cpulist", "\n")

    assert scan(tree).tree["i915"]["card0-0"].numa_nodes == ()


# ----- monitoring -----------------------------------------------------------------------------


def test_monitoring_single_mode_collects_every_cards_nodes_and_mei_nodes(tree: FakeTree) -> None:
    gpu.add_card(tree, mei=True)
    gpu.add_card(tree, driver="xe", mei=True)
    gpu.add_card(tree)

    result = scan(tree, GpuOptions(enable_monitoring=True, shared_dev_num=2))

    assert set(result.tree) == {"i915", "xe", "monitoring"}
    mei = [str(tree.path(f"/dev/mei{n}")) for n in (0, 1)]
    assert result.tree["monitoring"] == {
        "all": DeviceInfo(
            health=Health.HEALTHY,
            nodes=(
                node(tree, "card0"),
                node(tree, "renderD128"),
                DeviceNode(mei[0], mei[0], "rw"),
                node(tree, "card1"),
                node(tree, "renderD129"),
                DeviceNode(mei[1], mei[1], "rw"),
                node(tree, "card2"),
                node(tree, "renderD130"),
            ),
        )
    }
    monitoring = result.tree["monitoring"]["all"]
    assert monitoring.numa_nodes == ()
    assert monitoring.mounts == ()
    assert monitoring.cdi is None


def test_monitoring_split_mode_gives_one_resource_per_driver(tree: FakeTree) -> None:
    gpu.add_card(tree, driver="i915", mei=True)
    gpu.add_card(tree, driver="xe")

    result = scan(tree, GpuOptions(enable_monitoring=True, monitoring_mode=MonitoringMode.SPLIT))

    assert set(result.tree) == {"i915", "xe", "i915_monitoring", "xe_monitoring"}
    mei0 = str(tree.path("/dev/mei0"))
    assert result.tree["i915_monitoring"]["all"].nodes == (
        node(tree, "card0"),
        node(tree, "renderD128"),
        DeviceNode(mei0, mei0, "rw"),
    )
    assert result.tree["xe_monitoring"] == {
        "all": DeviceInfo(nodes=(node(tree, "card1"), node(tree, "renderD129")))
    }


def test_monitoring_is_off_by_default(tree: FakeTree) -> None:
    gpu.add_card(tree, mei=True)

    assert list(scan(tree).tree) == ["i915"]


def test_monitoring_without_cards_advertises_nothing(tree: FakeTree) -> None:
    gpu.add_card(tree, vendor="0x10de")

    assert scan(tree, GpuOptions(enable_monitoring=True)).tree == {}


def test_monitoring_leaves_out_skipped_cards(tree: FakeTree) -> None:
    gpu.build(tree, [{"vfs": 1}])  # card0 PF (skipped), card1 VF

    result = scan(tree, GpuOptions(enable_monitoring=True))

    assert result.tree["monitoring"]["all"].nodes == (node(tree, "card1"), node(tree, "renderD129"))


# ----- CDI ------------------------------------------------------------------------------------


def test_cdi_device_names_the_card_and_carries_its_nodes_and_mounts(tree: FakeTree) -> None:
    gpu.add_card(tree)
    card = gpu.add_card(tree, driver="xe")

    devices = scan(tree, GpuOptions(shared_dev_num=2)).tree
    info = devices["xe"]["card1-1"]

    expected_mounts = (
        by_path_mount(tree, f"pci-{card.address}-card"),
        by_path_mount(tree, f"pci-{card.address}-render"),
    )
    assert info.cdi == CdiDevice(
        kind=CDI_KIND,
        name="card1",
        nodes=(node(tree, "card1"), node(tree, "renderD129")),
        mounts=expected_mounts,
    )
    assert info.cdi.qualified_name == "intel.cdi.k8s.io/gpu=card1"
    other = devices["i915"]["card0-0"].cdi
    assert other is not None
    assert other.name == "card0"


def test_cdi_spec_document_of_a_card(tree: FakeTree) -> None:
    card = gpu.add_card(tree)

    info = scan(tree).tree["i915"]["card0-0"]
    assert info.cdi is not None
    document = cdi_spec_document(info.cdi)

    assert document["cdiVersion"] == CDI_VERSION == "0.5.0"
    assert document["kind"] == "intel.cdi.k8s.io/gpu"
    assert [device["name"] for device in document["devices"]] == ["card0"]
    edits = document["devices"][0]["containerEdits"]
    assert edits["deviceNodes"] == [
        {"path": dri(tree, name), "hostPath": dri(tree, name), "permissions": "rw"}
        for name in ("card0", "renderD128")
    ]
    assert edits["mounts"] == [
        {
            "hostPath": dri(tree, f"by-path/pci-{card.address}-{suffix}"),
            "containerPath": dri(tree, f"by-path/pci-{card.address}-{suffix}"),
            "type": "none",
            "options": ["bind", "ro"],
        }
        for suffix in ("card", "render")
    ]


def test_cdi_spec_of_an_unhealthy_card_lists_only_present_nodes(tree: FakeTree) -> None:
    gpu.add_card(tree)
    tree.remove("/dev/dri/renderD128")

    info = scan(tree).tree["i915"]["card0-0"]

    assert info.cdi is not None
    assert info.cdi.nodes == (node(tree, "card0"),)


# ----- the node as a whole --------------------------------------------------------------------


@pytest.mark.parametrize("make_unreadable", ["missing", "file"])
def test_unreadable_drm_class_dir_gives_an_empty_tree_and_a_problem(
    tree: FakeTree, make_unreadable: str
) -> None:
    gpu.add_card(tree)
    tree.remove("/sys/class/drm")
    if make_unreadable == "file":
        tree.write("/sys/class/drm", "not a directory")

    result = scan(tree, GpuOptions(enable_monitoring=True))

    assert result.tree == {}
    assert len(result.problems) == 1
    assert str(tree.path("/sys/class/drm")) in result.problems[0]


@pytest.mark.parametrize("dri", ["missing", "file"])
def test_without_a_dri_directory_every_card_is_unhealthy(tree: FakeTree, dri: str) -> None:
    gpu.add_card(tree)
    gpu.add_card(tree, driver="xe")
    tree.remove("/dev/dri")
    if dri == "file":
        tree.write("/dev/dri", "")

    result = scan(tree)

    assert [info.health for devices in result.tree.values() for info in devices.values()] == [
        Health.UNHEALTHY,
        Health.UNHEALTHY,
    ]
    assert sorted(problem.split(":")[0] for problem in result.problems) == ["GPU card0", "GPU card1"]


def test_odd_entries_in_sysfs_do_not_break_the_scan(tree: FakeTree) -> None:
    gpu.add_card(tree)  # card0 stays good
    tree.write("/sys/class/drm/card1", "a file, not a card")  # unreadable vendor → problem
    tree.link("/sys/class/drm/card2", "/sys/devices/gone/drm/card2")  # dangling link → problem
    odd = gpu.add_card(tree)  # card3: device/drm is a file
    detach_class_link(tree, odd)
    tree.remove(f"{sysfs(tree, odd)}/drm")
    tree.write(f"{sysfs(tree, odd)}/drm", "")

    result = scan(tree)

    assert list(result.tree) == ["i915"]
    assert list(result.tree["i915"]) == ["card0-0"]
    assert sorted(problem.split(":")[0] for problem in result.problems) == ["GPU card1", "GPU card2"]


def test_empty_drm_class_dir_gives_an_empty_tree_without_problems(tree: FakeTree) -> None:
    result = scan(tree)

    assert result == Discovery({}, ())


def test_prefix_is_kept_in_every_reported_path(tree: FakeTree) -> None:
    gpu.build(tree, [{"count": 2, "mei": True}, {"driver": "xe"}])
    root = str(tree.root) + "/"

    result = scan(tree, GpuOptions(enable_monitoring=True, monitoring_mode=MonitoringMode.SPLIT))

    paths: list[str] = []
    for devices in result.tree.values():
        for info in devices.values():
            paths += [p for n in info.nodes for p in (n.host_path, n.container_path)]
            paths += [p for m in info.mounts for p in (m.host_path, m.container_path)]
            if info.cdi is not None:
                paths += [n.host_path for n in info.cdi.nodes] + [m.host_path for m in info.cdi.mounts]
    assert len(paths) > 20
    assert all(path.startswith(root + "dev/") for path in paths), paths


def test_a_bad_card_does_not_affect_the_others(tree: FakeTree) -> None:
    broken = gpu.add_card(tree)
    gpu.add_card(tree)
    tree.remove(f"{sysfs(tree, broken)}/vendor")
    tree.remove("/dev/dri/renderD129")
    gpu.add_card(tree, numa_node=1)

    result = scan(tree)

    devices = result.tree["i915"]
    assert list(devices) == ["card1-0", "card2-0"]
    assert devices["card1-0"].health is Health.UNHEALTHY
    assert devices["card2-0"].health is Health.HEALTHY
    assert devices["card2-0"].numa_nodes == (1,)
    assert sorted(problem.split(":")[0] for problem in result.problems) == ["GPU card0", "GPU card1"]


def test_bundled_style_node_spec(tmp_path: Path) -> None:
    spec = parse_node_spec(
        """
        [node]
        numa_nodes = 2
        [[gpu]]
        count = 2
        numa_node = 1
        mei = true
        [[gpu]]
        driver = "xe"
        vfs = 3
        """
    )
    tree = build_node(spec, tmp_path / "node")

    result = scan(tree, GpuOptions(shared_dev_num=2, enable_monitoring=True))

    assert list(result.tree["i915"]) == ["card0-0", "card0-1", "card1-0", "card1-1"]
    assert list(result.tree["xe"]) == [f"card{n}-{i}" for n in (3, 4, 5) for i in (0, 1)]
    assert result.tree["i915"]["card1-1"].numa_nodes == (1,)
    assert len(result.tree["monitoring"]["all"].nodes) == 2 * 3 + 3 * 2
    assert result.problems == ()


CARD_KINDS = st.fixed_dictionaries(
    {
        "driver": st.sampled_from(["i915", "xe"]),
        "vendor": st.sampled_from(["0x8086", "0x8086", "0x8086", "0x10de"]),
        "vfs": st.integers(0, 2),
        "numa_node": st.integers(-1, 1),
    }
)


@settings(max_examples=25, deadline=None)
@given(
    entries=st.lists(CARD_KINDS, max_size=5),
    shared=st.integers(1, 3),
    unplugged=st.sets(st.integers(0, 14)),
)
def test_every_usable_card_gets_shared_dev_num_ids(
    entries: list[dict[str, Any]], shared: int, unplugged: set[int]
) -> None:
    """Random nodes: IDs per usable card, and health that follows the presence of the card node."""
    with tempfile.TemporaryDirectory() as directory:
        tree = FakeTree(Path(directory), numa_nodes=2)
        tree.mkdir("/sys/class/drm")
        gpu.build(tree, entries)
        usable: dict[str, list[int]] = {}
        index = 0
        for entry in entries:
            cards = [index + n for n in range(1 + entry["vfs"])]
            index += len(cards)
            if entry["vendor"] != "0x8086":
                continue
            served = cards[1:] if entry["vfs"] else cards
            usable.setdefault(str(entry["driver"]), []).extend(served)
        for number in unplugged:
            tree.remove(f"/dev/dri/card{number}")
        served_numbers = {n for numbers in usable.values() for n in numbers}

        result = scan(tree, GpuOptions(shared_dev_num=shared))

        assert {kind: sorted(devices) for kind, devices in result.tree.items()} == {
            driver: sorted(f"card{n}-{i}" for n in numbers for i in range(shared))
            for driver, numbers in usable.items()
        }
        for devices in result.tree.values():
            for device_id, info in devices.items():
                number = int(device_id[4:].split("-")[0])
                expected = Health.UNHEALTHY if number in unplugged else Health.HEALTHY
                assert info.health is expected, device_id
        assert sorted(problem.split(":")[0] for problem in result.problems) == sorted(
            f"GPU card{n}" for n in served_numbers & unplugged
        )


# ----- the plugin shell -----------------------------------------------------------------------


def test_plugin_scan_returns_the_tree_and_logs_problems_once(
    tree: FakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    gpu.add_card(tree)
    tree.remove("/dev/dri/card0")
    plugin = GpuPlugin(prefix=str(tree.root), options=GpuOptions(shared_dev_num=2))

    with caplog.at_level(logging.WARNING):
        first = plugin.scan()
        second = plugin.scan()

    assert first == second == scan(tree, GpuOptions(shared_dev_num=2)).tree
    assert len(plugin.problems.current) == 1
    assert [record.getMessage() for record in caplog.records].count(next(iter(plugin.problems.current))) == 1
    assert plugin.namespace == "gpu.intel.com"


def test_plugin_watches_the_prefixed_dri_and_drm_dirs(tree: FakeTree) -> None:
    plugin = GpuPlugin(prefix=str(tree.root))

    assert set(plugin.watch_paths()) == {tree.path("/dev/dri"), tree.path("/sys/class/drm")}
