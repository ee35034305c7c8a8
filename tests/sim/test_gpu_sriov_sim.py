"""The simulator's SR-IOV GPUs are laid out as the kernel lays them out, and discovery reads them so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from intel_device_plugins.plugins.gpu.discovery import GpuOptions, SriovRole, scan_cards
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec


def _build(tmp_path: Path, entry: str) -> FakeTree:
    return build_node(parse_node_spec(f"[node]\nnuma_nodes = 1\n[[gpu]]\n{entry}\n"), tmp_path / "node")


def _read(tree: FakeTree, path: str) -> str:
    return tree.path(path).read_text().strip()


def test_vfs_sit_at_the_pfs_routing_id_plus_offset_and_stride_with_links_both_ways(tmp_path: Path) -> None:
    tree = _build(tmp_path, 'vfs = 3\ntotalvfs = 16\nvf_offset = 2\nvf_stride = 3\nvf_device_id = "0x56c2"')
    pf = tree.sysfs_of("0000:10:00.0")

    assert [_read(tree, f"{pf}/{name}") for name in ("sriov_totalvfs", "sriov_numvfs")] == ["16", "3"]
    assert [_read(tree, f"{pf}/{name}") for name in ("sriov_offset", "sriov_stride")] == ["2", "3"]
    assert _read(tree, f"{pf}/sriov_vf_device") == "56c2"
    assert _read(tree, f"{pf}/sriov_drivers_autoprobe") == "1"
    expected = ["0000:10:00.2", "0000:10:00.5", "0000:10:01.0"]  # devfn 2, 5, 8
    for index, address in enumerate(expected):
        vf = tree.sysfs_of(address)
        assert os.path.realpath(tree.path(f"{pf}/virtfn{index}")) == str(tree.path(vf).resolve())
        assert os.path.realpath(tree.path(f"{vf}/physfn")) == str(tree.path(pf).resolve())
        assert os.path.dirname(vf) == os.path.dirname(pf), "a VF sits beside its PF"
        assert _read(tree, f"{vf}/device") == "0x56c2"
    assert not tree.path(f"{pf}/virtfn3").exists()


def test_discovery_reads_the_kernels_layout(tmp_path: Path) -> None:
    tree = _build(tmp_path, "vfs = 2")

    scan = scan_cards(str(tree.root), GpuOptions(), with_partitioned_pfs=True)

    assert not isinstance(scan, str)
    pf, *vfs = scan.cards
    assert (pf.sriov, pf.enabled_vfs, pf.vfs_possible) == (SriovRole.PF, 2, True)
    assert [os.path.basename(vf.sysfs_dir) for vf in vfs] == ["0000:10:00.1", "0000:10:00.2"]
    assert all(vf.sriov is SriovRole.VF and vf.pf_dir == pf.sysfs_dir and not vf.vfs_possible for vf in vfs)


def test_without_autoprobe_the_vfs_stay_unbound_and_the_pf_offers_none(tmp_path: Path) -> None:
    tree = _build(tmp_path, "vfs = 2\nautoprobe = false")
    pf = tree.sysfs_of("0000:10:00.0")

    assert _read(tree, f"{pf}/sriov_drivers_autoprobe") == "0"
    vf = tree.sysfs_of("0000:10:00.1")
    assert tree.path(f"{vf}/physfn").is_symlink() and not tree.path(f"{vf}/driver").exists()
    scan = scan_cards(str(tree.root), GpuOptions(), with_partitioned_pfs=True)
    assert not isinstance(scan, str)
    (card,) = scan.cards  # the VFs have no DRM card
    assert (card.sriov, card.vfs_possible) == (SriovRole.PF, False)


def test_a_capable_pf_without_vfs_offers_them(tmp_path: Path) -> None:
    tree = _build(tmp_path, "totalvfs = 8")

    scan = scan_cards(str(tree.root), GpuOptions(), with_partitioned_pfs=True)

    assert not isinstance(scan, str)
    (card,) = scan.cards
    assert (card.sriov, card.enabled_vfs, card.vfs_possible) == (SriovRole.PF, 0, True)
    assert not tree.path(f"{tree.sysfs_of('0000:10:00.0')}/virtfn0").exists()


@pytest.mark.parametrize(
    ("entry", "message"),
    [("vfs = 4\ntotalvfs = 2", "totalvfs 2 is less than vfs 4"), ("vfs = 1\nvf_stride = 0", "stride 0")],
)
def test_impossible_sriov_entries_are_refused(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _build(tmp_path, entry)


def test_vf_addresses_carry_into_the_next_slot_and_bus() -> None:
    assert gpu.vf_address("0000:3a:00.0", 1, 1, 7) == "0000:3a:01.0"
    assert gpu.vf_address("0000:3a:1f.7", 1, 1, 0) == "0000:3b:00.0"


def test_mei_devices_are_found_for_the_cards_that_have_them(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "node")
    tree.mkdir("/sys/class/drm")
    tree.mkdir("/dev/dri/by-path")
    tree.write_numa_nodes()
    gpu.add_card(tree, mei=True)
    gpu.add_card(tree)

    scan = scan_cards(str(tree.root), GpuOptions())

    assert not isinstance(scan, str)
    with_mei, without = scan.cards
    assert [node.host_path for node in with_mei.mei_nodes] == [str(tree.path("/dev/mei0"))]
    assert without.mei_nodes == ()
    tree.remove("/dev/mei0")  # the interface is there, its device node is not: nothing to hand out
    rescanned = scan_cards(str(tree.root), GpuOptions())
    assert not isinstance(rescanned, str) and rescanned.cards[0].mei_nodes == ()
