"""Simulated Intel FPGA cards (``[[fpga]]``) for both kernel drivers.

Layout, per card (``<pf>`` = the PF's sysfs directory ``/sys/devices/pci<dom>:<bus>/<bdf>``; the
function has PCI class ``0x120000``, vendor ``0x8086`` and the board's device ID):

DFL (in-tree driver, ``driver = "dfl"``, PCI driver ``dfl-pci``)::

    <pf>/fpga_region/regionR/                      ← /sys/class/fpga_region/regionR
        dfl-fme.F/dev                              "235:F"   (FME)
        dfl-fme.F/dfl-fme-region.G/fpga_region/regionS/compat_id   interface ID (32 hex)
                                                   ← /sys/class/fpga_region/regionS (no ports)
        dfl-port.P/{dev,afu_id,id}                 "236:P", AFU ID (32 hex), port number
    /dev/dfl-fme.F, /dev/dfl-port.P

OPAE (out-of-tree ``intel-fpga`` driver, ``driver = "intel-fpga"``, PCI driver ``intel-fpga-pci``)::

    <pf>/fpga/intel-fpga-dev.D/                    ← /sys/class/fpga/intel-fpga-dev.D
        intel-fpga-fme.F/dev                       "240:F"
        intel-fpga-fme.F/pr/interface_id           interface ID
        intel-fpga-port.P/{dev,afu_id,id}          "241:P", AFU ID, port number
    /dev/intel-fpga-fme.F, /dev/intel-fpga-port.P

Both: every FME and port is also linked as ``/sys/bus/platform/devices/<name>``, its character
device as ``/sys/dev/char/<maj>:<min>`` (→ its sysfs directory) and ``/dev/char/<maj>:<min>``
(→ ``../<name>``). Every FME and port directory holds ``intel_device_plugins_simulation``, an
attribute no driver has: it tells the CRI hook to answer that device's ioctls with the simulated
FME (``plugins/fpga/fme.py``, ``SysfsSelectedIoctl``). Device nodes are plain files, so ``stat``
gives no device number: code that needs a node's sysfs directory finds it by name through
``/sys/bus/platform/devices/<name>``.

A PF carries ``ports`` ports with ``id`` 0..ports-1 and the card's only FME. With ``vfs > 0`` each VF
(class ``0x120000``, ``physfn`` → PF, PF has ``virtfnN``) carries one port of its own and no FME;
its ``id`` continues after the PF's ports. The FME for a VF's port is found through ``physfn``.

Programming a port (what a partial reconfiguration does) is :func:`set_afu_id`: it rewrites the
port's ``afu_id``. Ports and FMEs are named with node-wide indexes, as the kernel does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.plugins.fpga.fme import SIMULATION_MARKER
from intel_device_plugins.sim.fakefs import FakeTree, entry_options

DFL = "dfl"
OPAE = "intel-fpga"
DRIVERS = (DFL, OPAE)

BOARDS: Mapping[str, tuple[str, str]] = {
    "a10-pac": ("0x09c4", "0x09c5"),
    "d5005": ("0x0b2b", "0x0b2c"),
    "n3000": ("0x0b30", "0x0b31"),
}
"""Board → (PF device ID, VF device ID)."""

ARRIA10_INTERFACE = "ce48969398f05f33946d560708be108a"
"""Interface ID of an Arria 10 DCP 1.0 blue bitstream."""
NLB0_AFU = "d8424dc4a4a3c413f89e433683f9040b"
"""AFU ID of the OPAE sample "native loopback 0" accelerator."""
NLB3_AFU = "f7df405cbd7acf7222f144b0b93acd18"
"""AFU ID of the OPAE sample "native loopback 3" accelerator."""
UNPROGRAMMED = "f" * 32
"""What a port reports while a partial reconfiguration is in progress or failed."""

FME_MAJOR = {DFL: 235, OPAE: 240}
PORT_MAJOR = {DFL: 236, OPAE: 241}
_PCI_DRIVER = {DFL: "dfl-pci", OPAE: "intel-fpga-pci"}
_FME_PREFIX = {DFL: "dfl-fme.", OPAE: "intel-fpga-fme."}
_PORT_PREFIX = {DFL: "dfl-port.", OPAE: "intel-fpga-port."}
_ID = re.compile(r"^[0-9a-fA-F]{32}$")

DEFAULTS: Mapping[str, Any] = {
    "driver": DFL,
    "board": "a10-pac",
    "count": 1,
    "ports": 1,
    "vfs": 0,
    "interface_id": ARRIA10_INTERFACE,
    "afu_id": NLB0_AFU,
    "numa_node": 0,
}


@dataclass(frozen=True)
class SimulatedPort:
    name: str
    """``dfl-port.P`` / ``intel-fpga-port.P``; also the device node's name under ``/dev``."""
    sysfs: str
    """Root-relative absolute sysfs directory (holds ``afu_id``, ``id``, ``dev``)."""
    port_id: int
    address: str
    """PCI address of the function carrying the port (the PF, or a VF)."""


@dataclass(frozen=True)
class SimulatedFpga:
    driver: str
    address: str
    fme: str
    """``dfl-fme.F`` / ``intel-fpga-fme.F``."""
    fme_sysfs: str
    interface_id_file: str
    """Root-relative path of the file holding the FME's interface ID."""
    ports: tuple[SimulatedPort, ...]
    class_entries: tuple[str, ...]
    """Root-relative ``/sys/class/...`` links this card created."""
    vfs: tuple[str, ...] = ()


def _next_index(tree: FakeTree, directory: str, prefix: str) -> int:
    """The lowest index ``N`` such that ``<directory>/<prefix>N`` does not exist."""
    base = tree.path(directory)
    used: set[int] = set()
    if base.is_dir():
        for entry in base.iterdir():
            suffix = entry.name[len(prefix) :]
            if entry.name.startswith(prefix) and suffix.isdigit():
                used.add(int(suffix))
    index = 0
    while index in used:
        index += 1
    return index


def _rel(tree: FakeTree, path: Any) -> str:
    return "/" + str(path.relative_to(tree.root))


def _char_device(tree: FakeTree, name: str, sysfs: str, major: int, minor: int) -> None:
    tree.write(f"{sysfs}/dev", f"{major}:{minor}\n")
    # Lets the CRI hook, run by a real runtime on this node, program the port without a driver.
    tree.write(f"{sysfs}/{SIMULATION_MARKER}", "1\n")
    tree.link(f"/sys/bus/platform/devices/{name}", sysfs)
    tree.link(f"/sys/dev/char/{major}:{minor}", sysfs)
    tree.device_node(f"/dev/{name}")
    tree.link(f"/dev/char/{major}:{minor}", f"/dev/{name}")
    tree.uevent("add", sysfs, "platform", DEVNAME=name)


def _add_port(
    tree: FakeTree, driver: str, parent: str, port_id: int, afu_id: str, address: str
) -> SimulatedPort:
    prefix = _PORT_PREFIX[driver]
    index = _next_index(tree, "/sys/bus/platform/devices", prefix)
    name = f"{prefix}{index}"
    sysfs = f"{parent}/{name}"
    tree.write(f"{sysfs}/afu_id", afu_id + "\n")
    tree.write(f"{sysfs}/id", f"{port_id}\n")
    _char_device(tree, name, sysfs, PORT_MAJOR[driver], index)
    return SimulatedPort(name, sysfs, port_id, address)


def _container(tree: FakeTree, driver: str, function_sysfs: str) -> tuple[str, str]:
    """The driver's per-function directory and its ``/sys/class`` link: (sysfs dir, class link)."""
    if driver == DFL:
        index = _next_index(tree, "/sys/class/fpga_region", "region")
        directory = f"{function_sysfs}/fpga_region/region{index}"
        link = f"/sys/class/fpga_region/region{index}"
    else:
        index = _next_index(tree, "/sys/class/fpga", "intel-fpga-dev.")
        directory = f"{function_sysfs}/fpga/intel-fpga-dev.{index}"
        link = f"/sys/class/fpga/intel-fpga-dev.{index}"
    tree.mkdir(directory)
    tree.link(link, directory)
    tree.uevent("add", directory, "fpga_region" if driver == DFL else "fpga")
    return directory, link


def _announce_function(tree: FakeTree, sysfs: str, address: str, driver: str) -> None:
    tree.uevent("add", sysfs, "pci", PCI_SLOT_NAME=address)
    tree.uevent("bind", sysfs, "pci", DRIVER=driver, PCI_SLOT_NAME=address)


def _check_id(value: str, what: str) -> str:
    if not _ID.match(value):
        raise ValueError(f"{what} {value!r} is not 32 hexadecimal digits")
    return value.lower()


def add_fpga(
    tree: FakeTree,
    *,
    driver: str = DFL,
    board: str = "a10-pac",
    ports: int = 1,
    vfs: int = 0,
    interface_id: str = ARRIA10_INTERFACE,
    afu_id: str = NLB0_AFU,
    numa_node: int = 0,
) -> SimulatedFpga:
    """One FPGA card: a PF with an FME and ``ports`` ports, plus ``vfs`` VFs with one port each."""
    if driver not in DRIVERS:
        raise ValueError(f"unknown FPGA driver {driver!r} (known: {', '.join(DRIVERS)})")
    if board not in BOARDS:
        raise ValueError(f"unknown FPGA board {board!r} (known: {', '.join(BOARDS)})")
    if ports < 0 or vfs < 0 or ports + vfs == 0:
        raise ValueError(f"an FPGA card needs at least one port (ports={ports}, vfs={vfs})")
    interface_id = _check_id(interface_id, "interface_id")
    afu_id = _check_id(afu_id, "afu_id")
    pf_id, vf_id = BOARDS[board]
    driver_name = _PCI_DRIVER[driver]
    address = tree.next_pci_address()
    pf = tree.pci_function(
        address, vendor="0x8086", device=pf_id, numa_node=numa_node, driver=driver_name, pci_class="0x120000"
    )
    pf_sysfs = _rel(tree, pf.sysfs_dir)
    _announce_function(tree, pf_sysfs, address, driver_name)
    tree.write(f"{pf_sysfs}/sriov_totalvfs", f"{max(vfs, 1)}\n")
    tree.write(f"{pf_sysfs}/sriov_numvfs", f"{vfs}\n")
    container, class_link = _container(tree, driver, pf_sysfs)
    class_links = [class_link]

    fme_prefix = _FME_PREFIX[driver]
    fme_index = _next_index(tree, "/sys/bus/platform/devices", fme_prefix)
    fme = f"{fme_prefix}{fme_index}"
    fme_sysfs = f"{container}/{fme}"
    if driver == DFL:
        region_index = _next_index(tree, "/sys/class/fpga_region", "region")
        bridge_index = _next_index(tree, "/sys/bus/platform/devices", "dfl-fme-region.")
        bridge = f"{fme_sysfs}/dfl-fme-region.{bridge_index}"
        pr_region = f"{bridge}/fpga_region/region{region_index}"
        interface_file = f"{pr_region}/compat_id"
        tree.write(interface_file, interface_id + "\n")
        tree.link(f"/sys/bus/platform/devices/dfl-fme-region.{bridge_index}", bridge)
        tree.link(f"/sys/class/fpga_region/region{region_index}", pr_region)
        tree.uevent("add", pr_region, "fpga_region")
        class_links.append(f"/sys/class/fpga_region/region{region_index}")
    else:
        interface_file = f"{fme_sysfs}/pr/interface_id"
        tree.write(interface_file, interface_id + "\n")
    _char_device(tree, fme, fme_sysfs, FME_MAJOR[driver], fme_index)

    card_ports = [_add_port(tree, driver, container, port_id, afu_id, address) for port_id in range(ports)]
    parent = pf_sysfs.rsplit("/", 1)[0]
    vf_addresses = []
    for index in range(vfs):
        devfn = index + 1
        vf_address = f"{address[:8]}{devfn // 8:02x}.{devfn % 8:x}"
        vf = tree.pci_function(
            vf_address,
            vendor="0x8086",
            device=vf_id,
            numa_node=numa_node,
            driver=driver_name,
            pci_class="0x120000",
            parent=parent,
        )
        vf_sysfs = _rel(tree, vf.sysfs_dir)
        _announce_function(tree, vf_sysfs, vf_address, driver_name)
        tree.link(f"{vf_sysfs}/physfn", pf_sysfs)
        tree.link(f"{pf_sysfs}/virtfn{index}", vf_sysfs)
        vf_container, vf_link = _container(tree, driver, vf_sysfs)
        class_links.append(vf_link)
        card_ports.append(_add_port(tree, driver, vf_container, ports + index, afu_id, vf_address))
        vf_addresses.append(vf_address)
    return SimulatedFpga(
        driver,
        address,
        fme,
        fme_sysfs,
        interface_file,
        tuple(card_ports),
        tuple(class_links),
        tuple(vf_addresses),
    )


def port_sysfs(tree: FakeTree, port: str) -> str:
    """Root-relative sysfs directory of a port (or FME) by name, through the platform bus link."""
    link = tree.path(f"/sys/bus/platform/devices/{port}")
    if not link.is_symlink():
        raise ValueError(f"no FPGA device {port!r} on this node")
    return _rel(tree, link.resolve())


def set_afu_id(tree: FakeTree, port: str, afu_id: str) -> None:
    """ "Program" a port: it now reports ``afu_id`` (use :data:`UNPROGRAMMED` for a failed PR).

    As on a real node, no uevent announces it.
    """
    tree.write(f"{port_sysfs(tree, port)}/afu_id", _check_id(afu_id, "afu_id") + "\n")


def set_interface_id(tree: FakeTree, card: SimulatedFpga, interface_id: str) -> None:
    """Replace the FME's interface ID (a new blue bitstream, or all ``f`` for a broken one)."""
    tree.write(card.interface_id_file, _check_id(interface_id, "interface_id") + "\n")


def remove_fpga(tree: FakeTree, card: SimulatedFpga) -> None:
    """Hot-unplug a card: its class entries, platform links and device nodes go away, with the events."""
    for link in card.class_entries:
        devpath = _rel(tree, tree.path(link).resolve())
        tree.remove(link)
        subsystem = "fpga_region" if "/fpga_region/" in link else "fpga"
        tree.uevent("remove", devpath, subsystem)
    for name in (card.fme, *(port.name for port in card.ports)):
        devpath = port_sysfs(tree, name)
        number = tree.path(f"{devpath}/dev").read_text(encoding="utf-8").strip()
        tree.remove(f"/sys/dev/char/{number}")
        tree.remove_char_links(f"/dev/{name}")
        tree.remove(f"/sys/bus/platform/devices/{name}")
        tree.remove(f"/dev/{name}")
        tree.uevent("remove", devpath, "platform", DEVNAME=name)


def build(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[fpga]]`` entry: ``count`` cards, each as :func:`add_fpga` describes."""
    for entry in entries:
        options = entry_options(entry, "fpga", DEFAULTS)
        for _ in range(int(options["count"])):
            add_fpga(
                tree,
                driver=str(options["driver"]),
                board=str(options["board"]),
                ports=int(options["ports"]),
                vfs=int(options["vfs"]),
                interface_id=str(options["interface_id"]),
                afu_id=str(options["afu_id"]),
                numa_node=int(options["numa_node"]),
            )
