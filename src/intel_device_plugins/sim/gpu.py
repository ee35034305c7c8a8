"""Simulated Intel GPUs (i915 and xe), the way the kernel lays them out.

For card N: ``/sys/class/drm/cardN`` → ``/sys/devices/pci…/<bdf>/drm/cardN``, the PCI function with
vendor, device, driver link, NUMA node and SR-IOV files, the DRM minors ``cardN`` and ``renderD<128+N>``
under ``/dev/dri``, ``/dev/dri/by-path`` links and, optionally, MEI nodes. Tiles follow the driver:
i915 has ``cardN/gt/gt<t>``, xe has ``<bdf>/tile<t>/gt<t>``. So does local memory: i915 tells the
card's total in ``cardN/lmem_total_bytes``, xe each tile's share in
``<bdf>/tile<t>/physical_vram_size_bytes``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.sim.fakefs import FakeTree, entry_options

DEFAULTS: Mapping[str, Any] = {
    "driver": "i915",
    "count": 1,
    "numa_node": 0,
    "device_id": "0x56c0",
    "vendor": "0x8086",
    "vfs": 0,
    "tiles": 1,
    "memory_bytes": 0,
    "mei": False,
    "totalvfs": 0,
}


@dataclass(frozen=True)
class SimulatedCard:
    index: int
    address: str


def _next_card_index(tree: FakeTree) -> int:
    drm = tree.path("/sys/class/drm")
    used = {int(p.name[4:]) for p in drm.glob("card*") if p.name[4:].isdigit()} if drm.is_dir() else set()
    index = 0
    while index in used:
        index += 1
    return index


def add_card(
    tree: FakeTree,
    *,
    driver: str = "i915",
    numa_node: int = 0,
    device_id: str = "0x56c0",
    vendor: str = "0x8086",
    tiles: int = 1,
    memory_bytes: int = 0,
    mei: bool = False,
    address: str | None = None,
    physfn: str | None = None,
    bind_driver: bool = True,
    parent: str | None = None,
) -> SimulatedCard:
    """Create one card (device nodes last, as udev does); returns its index and PCI address.

    ``parent`` is the sysfs directory of a bridge the card sits behind (default: its own root bus).
    """
    index = _next_card_index(tree)
    address = address or tree.next_pci_address()
    function = tree.pci_function(
        address,
        vendor=vendor,
        device=device_id,
        numa_node=numa_node,
        driver=driver if bind_driver else None,
        parent=parent,
    )
    sysfs = "/" + str(function.sysfs_dir.relative_to(tree.root))
    render = 128 + index
    tree.mkdir(f"{sysfs}/drm/card{index}")
    tree.mkdir(f"{sysfs}/drm/renderD{render}")
    tree.mkdir(f"{sysfs}/drm/controlD{64 + index}")
    tree.link(f"{sysfs}/drm/card{index}/device", sysfs)
    for tile in range(tiles):
        if driver == "xe":
            tree.mkdir(f"{sysfs}/tile{tile}/gt{tile}")
        else:
            tree.mkdir(f"{sysfs}/drm/card{index}/gt/gt{tile}")
    if memory_bytes and driver == "xe":
        # The kernel reports whole tiles; the last one takes what does not divide evenly.
        count = max(tiles, 1)
        share = memory_bytes // count
        for tile in range(count):
            size = share if tile < count - 1 else memory_bytes - share * (count - 1)
            tree.write(f"{sysfs}/tile{tile}/physical_vram_size_bytes", f"{size}\n")
    elif memory_bytes:
        tree.write(f"{sysfs}/drm/card{index}/lmem_total_bytes", f"{memory_bytes}\n")
    if physfn is not None:
        tree.link(f"{sysfs}/physfn", tree.sysfs_of(physfn))
    if mei:
        tree.mkdir(f"{sysfs}/{driver}.mei-gscfi.{index}/mei/mei{index}")
        tree.device_node(f"/dev/mei{index}")
    tree.link(f"/sys/class/drm/card{index}", f"{sysfs}/drm/card{index}")
    tree.link(f"/sys/class/drm/renderD{render}", f"{sysfs}/drm/renderD{render}")
    tree.device_node(f"/dev/dri/card{index}")
    tree.device_node(f"/dev/dri/renderD{render}")
    tree.link(f"/dev/dri/by-path/pci-{address}-card", f"/dev/dri/card{index}")
    tree.link(f"/dev/dri/by-path/pci-{address}-render", f"/dev/dri/renderD{render}")
    tree.uevent("add", sysfs, "pci", PCI_SLOT_NAME=address)
    if bind_driver:
        tree.uevent("bind", sysfs, "pci", DRIVER=driver, PCI_SLOT_NAME=address)
    tree.uevent("add", f"{sysfs}/drm/card{index}", "drm", DEVNAME=f"dri/card{index}")
    tree.uevent("add", f"{sysfs}/drm/renderD{render}", "drm", DEVNAME=f"dri/renderD{render}")
    return SimulatedCard(index, address)


def rebind(tree: FakeTree, index: int, driver: str, *, renumber_to: int | None = None) -> int:
    """Unbind card ``index`` and bind it to ``driver`` (the same one or another), with the uevents.

    Without ``renumber_to`` only the driver link changes and the DRM nodes stay. With it the card comes
    back as ``card<renumber_to>`` / ``renderD<128+renumber_to>``, as it does when other cards took its old
    minors while it was unbound: its DRM class entries, device nodes and by-path links are removed at
    unbind and made under the new numbers at bind. As on sysfs, the PCI function's directory keeps its
    identity (inode and change time): only what ends up different below it is touched, so a re-bind to the
    same driver leaves the directory itself alone. Returns the card's index after the bind.
    """
    card_link = tree.path(f"/sys/class/drm/card{index}")
    address = card_link.resolve().parent.parent.name
    sysfs = tree.sysfs_of(address)
    old = os.path.basename(os.readlink(tree.path(f"{sysfs}/driver")))
    new_index = index if renumber_to is None else renumber_to
    if new_index != index and tree.path(f"/sys/class/drm/card{new_index}").is_symlink():
        raise ValueError(f"gpu: cannot renumber card{index} to card{new_index}: that card exists")
    if old != driver:
        tree.remove(f"/sys/bus/pci/drivers/{old}/{address}")
    if new_index != index:
        _unbind_drm_minors(tree, sysfs, address, index)
    tree.uevent("unbind", sysfs, "pci", PCI_SLOT_NAME=address)
    if old != driver:
        tree.bind(address, sysfs, driver)
    if new_index != index:
        _bind_drm_minors(tree, sysfs, address, index, new_index)
    tree.uevent("bind", sysfs, "pci", DRIVER=driver, PCI_SLOT_NAME=address)
    return new_index


def _unbind_drm_minors(tree: FakeTree, sysfs: str, address: str, index: int) -> None:
    """What udev and the DRM core take away at unbind: class links, device nodes and by-path links."""
    render = 128 + index
    for absolute in (
        f"/dev/dri/by-path/pci-{address}-card",
        f"/dev/dri/by-path/pci-{address}-render",
        f"/dev/dri/card{index}",
        f"/dev/dri/renderD{render}",
        f"/sys/class/drm/card{index}",
        f"/sys/class/drm/renderD{render}",
    ):
        tree.remove(absolute)
    tree.uevent("remove", f"{sysfs}/drm/renderD{render}", "drm", DEVNAME=f"dri/renderD{render}")
    tree.uevent("remove", f"{sysfs}/drm/card{index}", "drm", DEVNAME=f"dri/card{index}")


def _bind_drm_minors(tree: FakeTree, sysfs: str, address: str, index: int, new_index: int) -> None:
    """The card's DRM minors under their new numbers; its card directory keeps tiles and memory."""
    render, new_render = 128 + index, 128 + new_index
    for old_name, new_name in (
        (f"card{index}", f"card{new_index}"),
        (f"renderD{render}", f"renderD{new_render}"),
        (f"controlD{64 + index}", f"controlD{64 + new_index}"),
    ):
        if tree.path(f"{sysfs}/drm/{old_name}").is_dir():
            tree.path(f"{sysfs}/drm/{old_name}").rename(tree.path(f"{sysfs}/drm/{new_name}"))
    tree.link(f"/sys/class/drm/card{new_index}", f"{sysfs}/drm/card{new_index}")
    tree.link(f"/sys/class/drm/renderD{new_render}", f"{sysfs}/drm/renderD{new_render}")
    tree.device_node(f"/dev/dri/card{new_index}")
    tree.device_node(f"/dev/dri/renderD{new_render}")
    tree.link(f"/dev/dri/by-path/pci-{address}-card", f"/dev/dri/card{new_index}")
    tree.link(f"/dev/dri/by-path/pci-{address}-render", f"/dev/dri/renderD{new_render}")
    tree.uevent("add", f"{sysfs}/drm/card{new_index}", "drm", DEVNAME=f"dri/card{new_index}")
    tree.uevent("add", f"{sysfs}/drm/renderD{new_render}", "drm", DEVNAME=f"dri/renderD{new_render}")


def remove_card(tree: FakeTree, index: int) -> None:
    """Hot-unplug card ``index``: its device nodes, by-path links and sysfs entries disappear."""
    card_link = tree.path(f"/sys/class/drm/card{index}")
    address = card_link.resolve().parent.parent.name
    sysfs = tree.sysfs_of(address)
    render = 128 + index
    for entry in list(tree.path("/dev/dri/by-path").glob(f"pci-{address}-*")):
        entry.unlink()
    # The card's MEI nodes by the names sysfs gives them: a renumbering re-bind keeps them as they were.
    for mei in tree.path(sysfs).glob("*.mei-*/mei/*"):
        tree.remove(f"/dev/{mei.name}")
    for absolute in (
        f"/dev/dri/card{index}",
        f"/dev/dri/renderD{render}",
        f"/sys/class/drm/card{index}",
        f"/sys/class/drm/renderD{render}",
        f"/sys/bus/pci/devices/{address}",
    ):
        tree.remove(absolute)
    for driver_dir in tree.path("/sys/bus/pci/drivers").glob("*"):
        tree.remove(f"/sys/bus/pci/drivers/{driver_dir.name}/{address}")
    tree.remove(sysfs)
    tree.uevent("remove", f"{sysfs}/drm/renderD{render}", "drm", DEVNAME=f"dri/renderD{render}")
    tree.uevent("remove", f"{sysfs}/drm/card{index}", "drm", DEVNAME=f"dri/card{index}")
    tree.uevent("unbind", sysfs, "pci", PCI_SLOT_NAME=address)
    tree.uevent("remove", sysfs, "pci", PCI_SLOT_NAME=address)


def build(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[gpu]]`` entry. ``vfs > 0`` makes each card an SR-IOV PF with that many VF cards;
    ``totalvfs`` makes it SR-IOV capable (``sriov_totalvfs``) with no VFs enabled yet."""
    for entry in entries:
        options = entry_options(entry, "gpu", DEFAULTS)
        driver, numa_node = str(options["driver"]), int(options["numa_node"])
        device_id, vendor = str(options["device_id"]), str(options["vendor"])
        vfs, totalvfs = int(options["vfs"]), int(options["totalvfs"])
        if totalvfs and totalvfs < vfs:
            raise ValueError(f"gpu: totalvfs {totalvfs} is less than vfs {vfs}")
        for _ in range(int(options["count"])):
            card = add_card(
                tree,
                driver=driver,
                numa_node=numa_node,
                device_id=device_id,
                vendor=vendor,
                tiles=int(options["tiles"]),
                memory_bytes=int(options["memory_bytes"]),
                mei=bool(options["mei"]),
            )
            sysfs = tree.sysfs_of(card.address)
            tree.write(f"{sysfs}/sriov_numvfs", f"{vfs}\n")
            if vfs or totalvfs:
                tree.write(f"{sysfs}/sriov_totalvfs", f"{totalvfs or max(vfs, 7)}\n")
            for _vf in range(vfs):
                add_card(
                    tree,
                    driver=driver,
                    numa_node=numa_node,
                    device_id=device_id,
                    vendor=vendor,
                    physfn=card.address,
                )
