"""Building blocks for a fake sysfs/devfs tree under a root directory.

The layout mirrors the kernel's: PCI functions live under ``/sys/devices/pci<domain>:<bus>/``, with
``/sys/bus/pci/devices`` links, driver links into ``/sys/bus/pci/drivers/<driver>`` (and the
driver's back link), ``numa_node`` and ``local_cpulist`` on every function. Device nodes are plain
empty files: discovery only needs them to exist, and no privileges are needed to create them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from intel_device_plugins.sim.uevents import UeventBroadcaster


@dataclass(frozen=True)
class PciFunction:
    """A created PCI function: its address and its real sysfs directory."""

    address: str
    sysfs_dir: Path


class FakeTree:
    """Writes files, links and PCI functions below ``root`` and hands out unique PCI addresses."""

    def __init__(self, root: Path, numa_nodes: int = 1, cpus_per_numa_node: int = 4) -> None:
        self.root = root
        self.numa_nodes = max(1, numa_nodes)
        self.cpus_per_numa_node = cpus_per_numa_node
        self._next_bus = 0x10
        self.uevents: UeventBroadcaster | None = None
        """Where the kernel's uevents for changes go, when plugins listen (``-uevent-dir``)."""

    # ----- primitives ------------------------------------------------------------------------

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def write(self, absolute: str, content: str = "") -> Path:
        target = self.path(absolute)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return target

    def mkdir(self, absolute: str) -> Path:
        target = self.path(absolute)
        target.mkdir(parents=True, exist_ok=True)
        return target

    def link(self, absolute: str, target_absolute: str) -> Path:
        """A relative symlink at ``absolute`` pointing to ``target_absolute`` (both inside the root)."""
        link = self.path(absolute)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(self.path(target_absolute), link.parent))
        return link

    def device_node(self, absolute: str) -> Path:
        return self.write(absolute)

    def remove(self, absolute: str) -> None:
        target = self.path(absolute)
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()  # files, links and device nodes (a real node's /dev has char devices)
        elif target.is_dir():
            shutil.rmtree(target)

    def remove_char_links(self, absolute: str) -> None:
        """Remove udev's ``/dev/char/<major>:<minor>`` links to device node ``absolute``, whatever
        numbers they carry (a real node renumbers them when it makes the nodes character devices)."""
        char_dir = self.path("/dev/char")
        if not char_dir.is_dir():
            return
        node = os.path.normpath(self.path(absolute))
        for link in sorted(char_dir.iterdir()):
            if link.is_symlink() and os.path.normpath(char_dir / os.readlink(link)) == node:
                link.unlink()

    def remove_pci_function(self, address: str) -> str:
        """Take PCI function ``address`` away: its bus and driver links and its sysfs directory.
        Returns the directory it had (absolute inside the root), for the events."""
        sysfs = self.sysfs_of(address)
        self.remove(f"/sys/bus/pci/devices/{address}")
        drivers = self.path("/sys/bus/pci/drivers")
        if drivers.is_dir():
            for driver in sorted(drivers.iterdir()):
                self.remove(f"/sys/bus/pci/drivers/{driver.name}/{address}")
        self.remove(sysfs)
        return sysfs

    def uevent(self, action: str, sysfs_dir: str, subsystem: str, **properties: str) -> None:
        """Announce a change as the kernel would (nothing happens when no one listens).

        ``sysfs_dir`` is absolute inside the root (``/sys/devices/...``); the event's DEVPATH drops ``/sys``.
        """
        if self.uevents is not None:
            self.uevents.send(action, sysfs_dir.removeprefix("/sys"), subsystem, properties)

    # ----- node-level structure --------------------------------------------------------------

    def cpulist(self, numa_node: int) -> str:
        if numa_node < 0:
            return f"0-{self.numa_nodes * self.cpus_per_numa_node - 1}"
        first = numa_node * self.cpus_per_numa_node
        return f"{first}-{first + self.cpus_per_numa_node - 1}"

    def write_numa_nodes(self) -> None:
        for node in range(self.numa_nodes):
            self.write(f"/sys/devices/system/node/node{node}/cpulist", self.cpulist(node) + "\n")

    def next_pci_address(self) -> str:
        """A free PCI address (one bus per function), also when the tree was built by someone else."""
        while True:
            address = f"0000:{self._next_bus:02x}:00.0"
            self._next_bus += 1
            if not self.path(f"/sys/bus/pci/devices/{address}").is_symlink():
                return address

    def pci_function(
        self,
        address: str,
        *,
        vendor: str,
        device: str,
        numa_node: int,
        driver: str | None,
        pci_class: str = "0x030000",
        parent: str | None = None,
    ) -> PciFunction:
        """Create one PCI function, bound to ``driver`` when given.

        ``parent`` is the sysfs directory (absolute, inside the root) under which the function sits;
        by default the root complex ``/sys/devices/pci<domain>:<bus>``.
        """
        domain, bus = address.split(":")[:2]
        parent_dir = parent or f"/sys/devices/pci{domain}:{bus}"
        sysfs = f"{parent_dir}/{address}"
        self.write(f"{sysfs}/vendor", vendor + "\n")
        self.write(f"{sysfs}/device", device + "\n")
        self.write(f"{sysfs}/class", pci_class + "\n")
        self.write(f"{sysfs}/numa_node", f"{numa_node}\n")
        self.write(f"{sysfs}/local_cpulist", self.cpulist(numa_node) + "\n")
        self.link(f"/sys/bus/pci/devices/{address}", sysfs)
        if driver:
            self.bind(address, sysfs, driver)
        return PciFunction(address, self.path(sysfs))

    def bind(self, address: str, sysfs: str, driver: str) -> None:
        self.mkdir(f"/sys/bus/pci/drivers/{driver}")
        self.link(f"{sysfs}/driver", f"/sys/bus/pci/drivers/{driver}")
        self.link(f"/sys/bus/pci/drivers/{driver}/{address}", sysfs)

    def sysfs_of(self, address: str) -> str:
        """Absolute (root-relative) sysfs directory of an existing PCI function."""
        resolved = Path(os.path.realpath(self.path(f"/sys/bus/pci/devices/{address}")))
        return "/" + str(resolved.relative_to(self.root.resolve()))


def entry_options(entry: Mapping[str, Any], kind: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """An entry merged over its defaults; any key the kind does not know is an error naming it."""
    unknown = set(entry) - set(defaults)
    if unknown:
        raise ValueError(f"unknown key(s) for {kind}: {', '.join(sorted(unknown))}")
    options = dict(defaults)
    options.update(entry)
    return options
