"""Simulated Intel NPUs (``[[npu]]``), laid out like the intel_vpu accel driver's.

For accelerator N: the PCI function (vendor, device, driver link, NUMA node),
``/sys/devices/pci…/<bdf>/accel/accelN`` with its ``device`` link back to the function,
``/sys/class/accel/accelN`` linking there, and the node ``/dev/accel/accelN`` (a plain file), announced
by ``pci`` and ``accel`` uevents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.sim.fakefs import FakeTree, entry_options

DEFAULTS: Mapping[str, Any] = {
    "count": 1,
    "numa_node": 0,
    "device_id": "0x7d1d",
    "vendor": "0x8086",
    "driver": "intel_vpu",
    "node": True,
}


@dataclass(frozen=True)
class SimulatedNpu:
    name: str
    address: str


def _next_index(tree: FakeTree) -> int:
    accel = tree.path("/sys/class/accel")
    used = (
        {int(p.name[5:]) for p in accel.glob("accel*") if p.name[5:].isdigit()} if accel.is_dir() else set()
    )
    index = 0
    while index in used:
        index += 1
    return index


def add_npu(
    tree: FakeTree,
    *,
    numa_node: int = 0,
    device_id: str = "0x7d1d",
    vendor: str = "0x8086",
    driver: str = "intel_vpu",
    node: bool = True,
) -> SimulatedNpu:
    """One accel device; ``node=False`` leaves out ``/dev/accel/accelN`` (udev not done yet)."""
    index = _next_index(tree)
    address = tree.next_pci_address()
    function = tree.pci_function(
        address, vendor=vendor, device=device_id, numa_node=numa_node, driver=driver, pci_class="0x120000"
    )
    pci_sysfs = "/" + str(function.sysfs_dir.relative_to(tree.root))
    name = f"accel{index}"
    tree.write(f"{pci_sysfs}/accel/{name}/dev", f"261:{index}\n")
    tree.link(f"{pci_sysfs}/accel/{name}/device", pci_sysfs)
    tree.link(f"/sys/class/accel/{name}", f"{pci_sysfs}/accel/{name}")
    if node:
        tree.device_node(f"/dev/accel/{name}")
    tree.uevent("add", pci_sysfs, "pci", PCI_SLOT_NAME=address)
    tree.uevent("bind", pci_sysfs, "pci", DRIVER=driver, PCI_SLOT_NAME=address)
    tree.uevent("add", f"{pci_sysfs}/accel/{name}", "accel", DEVNAME=f"accel/{name}")
    return SimulatedNpu(name, address)


def remove_npu(tree: FakeTree, name: str) -> None:
    """Hot-unplug accel device ``name``: its node, class entry and PCI function go, with the events."""
    device = tree.path(f"/sys/class/accel/{name}").resolve()
    pci_sysfs = "/" + str(device.parent.parent.relative_to(tree.root.resolve()))
    address = device.parent.parent.name
    tree.remove(f"/dev/accel/{name}")
    tree.remove(f"/sys/class/accel/{name}")
    tree.remove(f"/sys/bus/pci/devices/{address}")
    for driver_dir in tree.path("/sys/bus/pci/drivers").glob("*"):
        tree.remove(f"/sys/bus/pci/drivers/{driver_dir.name}/{address}")
    tree.remove(pci_sysfs)
    tree.uevent("remove", f"{pci_sysfs}/accel/{name}", "accel", DEVNAME=f"accel/{name}")
    tree.uevent("unbind", pci_sysfs, "pci", PCI_SLOT_NAME=address)
    tree.uevent("remove", pci_sysfs, "pci", PCI_SLOT_NAME=address)


def build(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[npu]]`` entry."""
    for entry in entries:
        options = entry_options(entry, "npu", DEFAULTS)
        for _ in range(int(options["count"])):
            add_npu(
                tree,
                numa_node=int(options["numa_node"]),
                device_id=str(options["device_id"]),
                vendor=str(options["vendor"]),
                driver=str(options["driver"]),
                node=bool(options["node"]),
            )
