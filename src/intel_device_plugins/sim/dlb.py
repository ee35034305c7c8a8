"""Simulated Intel Dynamic Load Balancer devices (``dlb2`` driver).

Each device N is a PCI function bound to ``dlb2`` with ``/sys/class/dlb2/dlbN`` →
``<pci function>/dlb2/dlbN`` (whose ``device`` link leads back to the function) and a node
``/dev/dlbN``, announced by ``pci`` and ``dlb2`` uevents. A PF carries ``sriov_numvfs``; with
``vfs > 0`` its VFs are created as further dlb2 devices, which (like real VFs) have no SR-IOV files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.sim.fakefs import FakeTree, entry_options

GENERATIONS: Mapping[str, tuple[str, str]] = {"dlb2": ("0x2710", "0x2711"), "dlb2.5": ("0x2714", "0x2715")}
"""Hardware generation → (PF device ID, VF device ID)."""

DEFAULTS: Mapping[str, Any] = {"generation": "dlb2", "count": 1, "vfs": 0, "numa_node": 0}


@dataclass(frozen=True)
class SimulatedDlb:
    name: str
    address: str
    vfs: tuple[str, ...] = ()


def _next_index(tree: FakeTree) -> int:
    directory = tree.path("/sys/class/dlb2")
    used = {int(p.name[3:]) for p in directory.glob("dlb*") if p.name[3:].isdigit()}
    index = 0
    while index in used:
        index += 1
    return index


def _add_function(tree: FakeTree, address: str, device_id: str, numa_node: int, parent: str | None) -> str:
    index = _next_index(tree)
    tree.pci_function(
        address,
        vendor="0x8086",
        device=device_id,
        numa_node=numa_node,
        driver="dlb2",
        pci_class="0x0b4000",
        parent=parent,
    )
    sysfs = tree.sysfs_of(address)
    name = f"dlb{index}"
    tree.mkdir(f"{sysfs}/dlb2/{name}")
    tree.link(f"{sysfs}/dlb2/{name}/device", sysfs)
    tree.link(f"/sys/class/dlb2/{name}", f"{sysfs}/dlb2/{name}")
    tree.device_node(f"/dev/{name}")
    tree.uevent("add", sysfs, "pci", PCI_SLOT_NAME=address)
    tree.uevent("bind", sysfs, "pci", DRIVER="dlb2", PCI_SLOT_NAME=address)
    tree.uevent("add", f"{sysfs}/dlb2/{name}", "dlb2", DEVNAME=name)
    return name


def add_dlb(tree: FakeTree, *, generation: str = "dlb2", vfs: int = 0, numa_node: int = 0) -> SimulatedDlb:
    """One DLB PF, optionally with ``vfs`` VFs enabled (each a dlb2 device of its own)."""
    if generation not in GENERATIONS:
        raise ValueError(f"unknown DLB generation {generation!r} (known: {', '.join(GENERATIONS)})")
    pf_id, vf_id = GENERATIONS[generation]
    address = tree.next_pci_address()
    name = _add_function(tree, address, pf_id, numa_node, None)
    sysfs = tree.sysfs_of(address)
    tree.write(f"{sysfs}/sriov_totalvfs", "16\n")
    tree.write(f"{sysfs}/sriov_numvfs", f"{vfs}\n")
    parent = sysfs.rsplit("/", 1)[0]
    vf_names = []
    for index in range(vfs):
        devfn = index + 1
        vf_address = f"{address[:8]}{devfn // 8:02x}.{devfn % 8:x}"
        vf_names.append(_add_function(tree, vf_address, vf_id, numa_node, parent))
        tree.link(f"{tree.sysfs_of(vf_address)}/physfn", sysfs)
        tree.link(f"{sysfs}/virtfn{index}", tree.sysfs_of(vf_address))
    return SimulatedDlb(name, address, tuple(vf_names))


def remove_dlb(tree: FakeTree, name: str) -> None:
    """Hot-unplug one dlb2 device: its node and class entry go away, with the kernel's event."""
    class_link = tree.path(f"/sys/class/dlb2/{name}")
    devpath = "/" + str(class_link.resolve().relative_to(tree.root.resolve()))
    tree.remove(f"/dev/{name}")
    tree.remove(f"/sys/class/dlb2/{name}")
    tree.uevent("remove", devpath, "dlb2", DEVNAME=name)


def build(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[dlb]]`` entry: ``count`` PFs, each with ``vfs`` VFs."""
    for entry in entries:
        options = entry_options(entry, "dlb", DEFAULTS)
        for _ in range(int(options["count"])):
            add_dlb(
                tree,
                generation=str(options["generation"]),
                vfs=int(options["vfs"]),
                numa_node=int(options["numa_node"]),
            )
