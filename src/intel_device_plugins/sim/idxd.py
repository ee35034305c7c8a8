"""Simulated Intel DSA and IAA accelerators (``[[dsa]]`` and ``[[iaa]]``), laid out like the idxd driver's.

For accelerator ``dsaN`` on PCI function ``<bdf>``: ``/sys/devices/pci…/<bdf>/dsaN`` with work queues
``wqN.M`` (``state``, ``mode``, ``type``, ``name``, ``size``), links from ``/sys/bus/dsa/devices``,
and for every enabled user queue the char-device child ``dsa!wqN.M/dev``, the node ``/dev/dsa/wqN.M``
and udev's link ``/dev/char/<major>:<minor>``. IAA is the same with ``iax`` names. Changes are
announced by the kernel's uevents on the idxd bus (subsystem ``dsa``) and, for PCI functions, ``pci``.

Device nodes are plain files unless ``char_devices`` asks for real ones: ``"real"`` creates character
devices (needs CAP_MKNOD, i.e. root), ``"auto"`` does so when permitted and falls back to plain files.
With ``driver = "vfio-pci"`` the function is bound to vfio-pci instead, with an IOMMU group and
``/dev/vfio`` nodes, and has no work queues.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.sim.fakefs import FakeTree, entry_options

CHAR_MAJORS: Mapping[str, int] = {"dsa": 238, "iax": 239}
"""Dynamic on a real kernel; fixed here so simulated nodes are reproducible."""
DEFAULT_DEVICE_IDS: Mapping[str, str] = {"dsa": "0x0b25", "iax": "0x0cfe"}
WQ_MODES = ("dedicated", "shared", "mixed")
CHAR_DEVICE_CHOICES = ("plain", "real", "auto")


def _defaults(device_prefix: str) -> dict[str, Any]:
    return {
        "count": 1,
        "numa_node": 0,
        "device_id": DEFAULT_DEVICE_IDS[device_prefix],
        "driver": "idxd",
        "wqs": 8,
        "wq_type": "user",
        "wq_mode": "dedicated",
        "wq_state": "enabled",
        "char_devices": "plain",
    }


@dataclass(frozen=True)
class SimulatedAccelerator:
    name: str
    address: str
    sysfs: str
    """Absolute (root-relative) sysfs directory of the accelerator, e.g. ``/sys/devices/…/dsa0``."""


def _next_index(tree: FakeTree) -> int:
    """The kernel numbers DSA and IAA devices from one pool (``dsa0``, ``iax1``, ``dsa2``…)."""
    bus = tree.path("/sys/bus/dsa/devices")
    used = set()
    if bus.is_dir():
        for entry in bus.iterdir():
            for device_prefix in CHAR_MAJORS:
                suffix = entry.name[len(device_prefix) :]
                if entry.name.startswith(device_prefix) and suffix.isdigit():
                    used.add(int(suffix))
    index = 0
    while index in used:
        index += 1
    return index


def char_device(tree: FakeTree, absolute: str, major: int, minor: int, how: str) -> bool:
    """Create a device node; ``True`` when it is a real character device."""
    if how in ("real", "auto"):
        target = tree.path(absolute)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.mknod(target, stat.S_IFCHR | 0o660, os.makedev(major, minor))
            return True
        except PermissionError:
            if how == "real":
                raise
    tree.device_node(absolute)
    return False


def queue_mode(wq_mode: str, queue: int) -> str:
    """``mixed``: even queues dedicated, odd ones shared (a common split on real nodes)."""
    if wq_mode == "mixed":
        return "dedicated" if queue % 2 == 0 else "shared"
    return wq_mode


def add_work_queue(
    tree: FakeTree,
    accelerator: SimulatedAccelerator,
    device_prefix: str,
    queue: int,
    *,
    wq_type: str = "user",
    mode: str = "dedicated",
    state: str = "enabled",
    char_devices: str = "plain",
) -> str:
    """One work queue; returns its name (``wqN.M``)."""
    index = int(accelerator.name[len(device_prefix) :])
    name = f"wq{index}.{queue}"
    wq_sysfs = f"{accelerator.sysfs}/{name}"
    tree.write(f"{wq_sysfs}/state", state + "\n")
    tree.write(f"{wq_sysfs}/mode", mode + "\n")
    tree.write(f"{wq_sysfs}/type", wq_type + "\n")
    tree.write(f"{wq_sysfs}/name", f"app{queue}\n" if wq_type == "user" else "\n")
    tree.write(f"{wq_sysfs}/size", "16\n")
    tree.write(f"{wq_sysfs}/priority", "10\n")
    tree.link(f"/sys/bus/dsa/devices/{name}", wq_sysfs)
    tree.uevent("add", wq_sysfs, "dsa")
    if state == "enabled":
        _enabled(tree, accelerator, device_prefix, name, wq_type == "user", char_devices)
    return name


def _queue_char_device(
    accelerator: SimulatedAccelerator, device_prefix: str, name: str
) -> tuple[str, int, int]:
    """The queue's char-device child directory in sysfs, and its major and minor numbers."""
    index = int(accelerator.name[len(device_prefix) :])
    queue = int(name.rsplit(".", 1)[1])
    return (
        f"{accelerator.sysfs}/{name}/{device_prefix}!{name}",
        CHAR_MAJORS[device_prefix],
        index * 64 + queue,
    )


def _enabled(
    tree: FakeTree,
    accelerator: SimulatedAccelerator,
    device_prefix: str,
    name: str,
    user: bool,
    char_devices: str,
) -> None:
    """The driver took queue ``name`` (``bind``); a user queue gets its char device and node (``add``)."""
    tree.uevent("bind", f"{accelerator.sysfs}/{name}", "dsa", DRIVER="user" if user else "dmaengine")
    if not user:
        return
    cdev_sysfs, major, minor = _queue_char_device(accelerator, device_prefix, name)
    tree.write(f"{cdev_sysfs}/dev", f"{major}:{minor}\n")
    char_device(tree, f"/dev/{device_prefix}/{name}", major, minor, char_devices)
    tree.link(f"/dev/char/{major}:{minor}", f"/dev/{device_prefix}/{name}")
    tree.uevent("add", cdev_sysfs, "dsa", DEVNAME=f"{device_prefix}/{name}")


def enable_work_queue(
    tree: FakeTree,
    accelerator: SimulatedAccelerator,
    device_prefix: str,
    name: str,
    char_devices: str = "plain",
) -> None:
    """Enable queue ``name`` (as ``accel-config enable-wq`` does), with the kernel's events."""
    wq_sysfs = f"{accelerator.sysfs}/{name}"
    tree.write(f"{wq_sysfs}/state", "enabled\n")
    user = tree.path(f"{wq_sysfs}/type").read_text(encoding="utf-8").strip() == "user"
    _enabled(tree, accelerator, device_prefix, name, user, char_devices)


def disable_work_queue(
    tree: FakeTree, accelerator: SimulatedAccelerator, device_prefix: str, name: str
) -> None:
    """Disable queue ``name``: its char device and node go, the driver lets go of it, with the events."""
    wq_sysfs = f"{accelerator.sysfs}/{name}"
    cdev_sysfs, major, minor = _queue_char_device(accelerator, device_prefix, name)
    if tree.path(cdev_sysfs).is_dir():
        tree.remove(f"/dev/char/{major}:{minor}")
        tree.remove(f"/dev/{device_prefix}/{name}")
        tree.remove(cdev_sysfs)
        tree.uevent("remove", cdev_sysfs, "dsa", DEVNAME=f"{device_prefix}/{name}")
    tree.write(f"{wq_sysfs}/state", "disabled\n")
    tree.uevent("unbind", wq_sysfs, "dsa")


def remove_accelerator(tree: FakeTree, accelerator: SimulatedAccelerator, device_prefix: str) -> None:
    """Hot-unplug an accelerator: its queues are disabled and go, then the device and its PCI
    function, with the kernel's events; udev's links to its queues go too, whatever their numbers."""
    directory = tree.path(accelerator.sysfs)
    queues = sorted(p.name for p in directory.glob("wq*.*")) if directory.is_dir() else []
    for name in queues:
        tree.remove_char_links(f"/dev/{device_prefix}/{name}")
        disable_work_queue(tree, accelerator, device_prefix, name)
        tree.remove(f"/sys/bus/dsa/devices/{name}")
        tree.uevent("remove", f"{accelerator.sysfs}/{name}", "dsa")
    tree.remove(f"/sys/bus/dsa/devices/{accelerator.name}")
    tree.uevent("unbind", accelerator.sysfs, "dsa")
    tree.uevent("remove", accelerator.sysfs, "dsa")
    pci_sysfs = tree.remove_pci_function(accelerator.address)
    tree.uevent("unbind", pci_sysfs, "pci", PCI_SLOT_NAME=accelerator.address)
    tree.uevent("remove", pci_sysfs, "pci", PCI_SLOT_NAME=accelerator.address)


def add_accelerator(
    tree: FakeTree,
    device_prefix: str,
    *,
    numa_node: int = 0,
    device_id: str | None = None,
    driver: str = "idxd",
) -> SimulatedAccelerator:
    """One DSA/IAA PCI function; with driver idxd also its ``dsaN``/``iaxN`` directory (no queues yet)."""
    address = tree.next_pci_address()
    function = tree.pci_function(
        address,
        vendor="0x8086",
        device=device_id or DEFAULT_DEVICE_IDS[device_prefix],
        numa_node=numa_node,
        driver=driver,
        pci_class="0x088000",
    )
    pci_sysfs = "/" + str(function.sysfs_dir.relative_to(tree.root))
    tree.uevent("add", pci_sysfs, "pci", PCI_SLOT_NAME=address)
    tree.uevent("bind", pci_sysfs, "pci", DRIVER=driver, PCI_SLOT_NAME=address)
    if driver == "vfio-pci":
        group = add_iommu_group(tree, address, pci_sysfs)
        tree.uevent("add", f"/sys/devices/virtual/vfio/{group}", "vfio", DEVNAME=f"vfio/{group}")
        return SimulatedAccelerator(f"vfio{group}", address, pci_sysfs)
    index = _next_index(tree)
    name = f"{device_prefix}{index}"
    sysfs = f"{pci_sysfs}/{name}"
    tree.write(f"{sysfs}/state", "enabled\n")
    tree.write(f"{sysfs}/max_work_queues", "8\n")
    tree.link(f"/sys/bus/dsa/devices/{name}", sysfs)
    tree.uevent("add", sysfs, "dsa")
    tree.uevent("bind", sysfs, "dsa", DRIVER="idxd")
    return SimulatedAccelerator(name, address, sysfs)


def add_iommu_group(tree: FakeTree, address: str, pci_sysfs: str) -> int:
    """Put a function in a new IOMMU group with its ``/dev/vfio`` node; returns the group number."""
    groups = tree.path("/sys/kernel/iommu_groups")
    used = {int(p.name) for p in groups.iterdir() if p.name.isdigit()} if groups.is_dir() else set()
    group = max(used, default=-1) + 1
    tree.link(f"/sys/kernel/iommu_groups/{group}/devices/{address}", pci_sysfs)
    tree.link(f"{pci_sysfs}/iommu_group", f"/sys/kernel/iommu_groups/{group}")
    tree.device_node(f"/dev/vfio/{group}")
    if not tree.path("/dev/vfio/vfio").exists():
        tree.device_node("/dev/vfio/vfio")
    return group


def _build(tree: FakeTree, entries: Sequence[Mapping[str, Any]], kind: str, device_prefix: str) -> None:
    for entry in entries:
        options = entry_options(entry, kind, _defaults(device_prefix))
        mode, how = str(options["wq_mode"]), str(options["char_devices"])
        if mode not in WQ_MODES:
            raise ValueError(f"wq_mode must be one of {', '.join(WQ_MODES)}, not {mode!r}")
        if how not in CHAR_DEVICE_CHOICES:
            raise ValueError(f"char_devices must be one of {', '.join(CHAR_DEVICE_CHOICES)}, not {how!r}")
        for _ in range(int(options["count"])):
            accelerator = add_accelerator(
                tree,
                device_prefix,
                numa_node=int(options["numa_node"]),
                device_id=str(options["device_id"]),
                driver=str(options["driver"]),
            )
            if str(options["driver"]) != "idxd":
                continue
            for queue in range(int(options["wqs"])):
                add_work_queue(
                    tree,
                    accelerator,
                    device_prefix,
                    queue,
                    wq_type=str(options["wq_type"]),
                    mode=queue_mode(mode, queue),
                    state=str(options["wq_state"]),
                    char_devices=how,
                )


def build_dsa(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[dsa]]`` entry."""
    _build(tree, entries, "dsa", "dsa")


def build_iaa(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[iaa]]`` entry."""
    _build(tree, entries, "iaa", "iax")
