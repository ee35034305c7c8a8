"""Hot-unplugging simulated devices takes away everything plugging them made (the real-node tests
plug and unplug into a running node's trees and check that the drivers keep nothing)."""

from __future__ import annotations

import os
from pathlib import Path

from intel_device_plugins.sim import fpga, idxd, qat
from intel_device_plugins.sim.fakefs import FakeTree


def _entries(root: Path) -> set[str]:
    """Every path below ``root`` (links not followed), relative to it, but the PCI root complexes
    (``sys/devices/pci<domain>:<bus>``): the host bridge stays when a card leaves its slot."""
    found = set()
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(directory, name), root))
    return {p for p in found if not (p.startswith("sys/devices/pci") and p.count("/") == 2)}


def _renumber(tree: FakeTree, old: str, new: str) -> None:
    """What a real node does to udev's link once the node is a character device of its own numbers."""
    link = tree.path(f"/dev/char/{old}")
    target = os.readlink(link)
    link.unlink()
    tree.path(f"/dev/char/{new}").symlink_to(target)


def test_an_unplugged_accelerator_leaves_nothing_it_brought(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    kept = idxd.add_accelerator(tree, "dsa")
    idxd.add_work_queue(tree, kept, "dsa", 0)
    before = _entries(tmp_path)
    plugged = idxd.add_accelerator(tree, "dsa")
    for queue in range(2):
        idxd.add_work_queue(tree, plugged, "dsa", queue, mode="shared")
    assert tree.path(f"/dev/dsa/wq{plugged.name[3:]}.1").exists()
    _renumber(tree, "238:64", "60:7")

    idxd.remove_accelerator(tree, plugged, "dsa")

    left = _entries(tmp_path) - before
    assert left == set(), sorted(left)
    assert tree.path("/dev/char/238:0").is_symlink(), "the other accelerator's link went too"


def test_an_unplugged_qat_pf_leaves_nothing_of_it_or_its_vfs(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    qat.add_pf(tree, vfs=1)
    before = _entries(tmp_path)
    pf = qat.add_pf(tree, vfs=2)
    assert any(tree.path(f"/sys/kernel/debug/qat_4xxx_{pf.address}").iterdir())

    qat.remove_pf(tree, pf)

    left = _entries(tmp_path) - before
    assert left == set(), sorted(left)
    assert not tree.path(f"/sys/bus/pci/devices/{pf.address}").is_symlink()
    assert all(not tree.path(f"/sys/bus/pci/devices/{vf}").is_symlink() for vf in pf.vfs)


def test_an_unplugged_fpga_card_takes_its_char_links(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree)
    port = card.ports[0]
    number = tree.path(f"{port.sysfs}/dev").read_text().strip()
    _renumber(tree, number, "60:3")

    fpga.remove_fpga(tree, card)

    assert not os.listdir(tree.path("/dev/char")), "links to the card's nodes are left"
    assert not tree.path(f"/sys/dev/char/{number}").is_symlink()


def test_a_pf_plugged_beside_another_keeps_the_vfio_container_node(tmp_path: Path) -> None:
    """``/dev/vfio/vfio`` is made once: on a real node it is a character device, which opening for
    writing would fail on (no driver behind it) and which must stay what it is."""
    tree = FakeTree(tmp_path)
    qat.add_pf(tree, vfs=1)
    tree.path("/dev/vfio/vfio").write_text("the node's own")
    qat.add_pf(tree, vfs=1)
    assert tree.path("/dev/vfio/vfio").read_text() == "the node's own"
