"""FPGA ports and FMEs as the CRI hook and ``fpga_tool`` see them: from one device node to its
sysfs directory, PCI function and FME. Pure reads below a filesystem root.

A node is found in sysfs through its device number (``/sys/dev/char/<major>:<minor>``) when it is
known — from the container's ``config.json`` or a real character device — and otherwise by name
through ``/sys/bus/platform/devices/<name>`` (ports and FMEs are platform devices named like their
nodes; simulated nodes are plain files without a device number).

Both kernel drivers are handled: the in-tree DFL driver (``dfl-fme.N``, ``dfl-port.N``; interface
ID in ``dfl-fme-region.*/fpga_region/region*/compat_id``) and the out-of-tree OPAE ``intel-fpga``
driver (``intel-fpga-fme.N``, ``intel-fpga-port.N``; interface ID in ``pr/interface_id``).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.plugins.fpga.discovery import Driver, find_fme
from intel_device_plugins.sysfs import read_trimmed

DFL = "dfl"
OPAE = "intel-fpga"
FME_PREFIXES = {"dfl-fme.": DFL, "intel-fpga-fme.": OPAE}
PORT_PREFIXES = {"dfl-port.": DFL, "intel-fpga-port.": OPAE}
FPGA_PCI_CLASS = 0x120000
_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$")


class FpgaDeviceError(RuntimeError):
    """A device node that is not a usable FPGA port or FME; the message names it."""


@dataclass(frozen=True)
class PciDevice:
    address: str
    sysfs: Path
    vendor: str
    device: str
    pci_class: str
    cpus: str
    numa: str
    vfs: str
    total_vfs: str
    physfn: PciDevice | None


@dataclass(frozen=True)
class Fme:
    name: str
    driver: str
    node: Path
    """Root-prefixed device node (what is opened for ioctls)."""
    sysfs: Path
    pci: PciDevice
    interface_id: str
    ports_num: str
    socket_id: str
    bitstream_id: str
    bitstream_metadata: str


@dataclass(frozen=True)
class Port:
    name: str
    driver: str
    node: Path
    sysfs: Path
    pci: PciDevice
    afu_id: str
    port_id: int


def driver_of(name: str) -> tuple[str, str] | None:
    """(``"fme"``/``"port"``, driver) for a device name like ``dfl-port.0``; ``None`` otherwise."""
    for prefix, driver in FME_PREFIXES.items():
        if name.startswith(prefix):
            return "fme", driver
    for prefix, driver in PORT_PREFIXES.items():
        if name.startswith(prefix):
            return "port", driver
    return None


def under_root(root: Path, absolute: str | Path) -> Path:
    """``absolute`` (a host path) inside ``root``; the root itself is ``/`` on a real node."""
    return root / str(absolute).lstrip("/")


def _realpath_inside(root: Path, path: Path) -> Path | None:
    if not os.path.lexists(path):
        return None
    real = Path(os.path.realpath(path))
    root_real = Path(os.path.realpath(root))
    if real != root_real and root_real not in real.parents:
        return None
    return real


def sysfs_dir(root: Path, node: Path, device_number: tuple[int, int] | None = None) -> Path:
    """The sysfs directory of the FPGA device behind ``node`` (a root-prefixed path)."""
    if device_number is None:
        try:
            info = os.stat(node)
        except OSError as error:
            raise FpgaDeviceError(f"{node}: {error.strerror}") from None
        if stat.S_ISCHR(info.st_mode):
            device_number = (os.major(info.st_rdev), os.minor(info.st_rdev))
    if device_number is not None:
        major, minor = device_number
        if major == 0:
            raise FpgaDeviceError(f"{node} is a virtual device node")
        found = _realpath_inside(root, under_root(root, f"/sys/dev/char/{major}:{minor}"))
        if found is not None:
            return found
    name = os.path.basename(os.path.realpath(node))
    found = _realpath_inside(root, under_root(root, f"/sys/bus/platform/devices/{name}"))
    if found is None:
        raise FpgaDeviceError(f"{node}: no FPGA device {name!r} in sysfs")
    return found


def pci_device(root: Path, sysfs: Path, with_physfn: bool = True) -> PciDevice:
    """The PCI function a device directory belongs to: its nearest ancestor named like a PCI address."""
    devices = Path(os.path.realpath(under_root(root, "/sys/devices")))
    current = sysfs
    while not _PCI_ADDRESS.match(current.name):
        if devices not in current.parents:
            raise FpgaDeviceError(f"{sysfs}: not below a PCI device in {devices}")
        current = current.parent
    if devices not in current.parents:
        raise FpgaDeviceError(f"{sysfs}: not below a PCI device in {devices}")

    def attr(name: str) -> str:
        return read_trimmed(current / name) or ""

    vendor, device = attr("vendor"), attr("device")
    if not vendor or not device:
        raise FpgaDeviceError(f"{current}: PCI vendor or device ID missing")
    pci_class = attr("class")
    try:
        class_value = int(pci_class, 16)
    except ValueError:
        class_value = -1
    if class_value != FPGA_PCI_CLASS:
        raise FpgaDeviceError(f"unsupported PCI class device {current}: class {pci_class or 'missing'}")
    physfn = None
    if with_physfn and (current / "physfn").is_symlink():
        physfn_dir = _realpath_inside(root, current / "physfn")
        if physfn_dir is not None:
            physfn = pci_device(root, physfn_dir, with_physfn=False)
    return PciDevice(
        address=current.name,
        sysfs=current,
        vendor=vendor,
        device=device,
        pci_class=pci_class,
        cpus=attr("local_cpulist"),
        numa=attr("numa_node"),
        vfs=attr("sriov_numvfs"),
        total_vfs=attr("sriov_totalvfs"),
        physfn=physfn,
    )


def _prefix(root: Path) -> str:
    return "" if root == Path("/") else str(root)


def find_card_fme(root: Path, pci: PciDevice, driver: str, what: str) -> Fme:
    """The FME of the card ``pci`` belongs to (through ``physfn`` for a VF), as discovery finds it."""
    found, problem = find_fme(Driver(driver), _prefix(root), str(pci.sysfs))
    if found is None:
        raise FpgaDeviceError(f"{what}: {problem}")
    sysfs = Path(found.sysfs_dir)

    def attr(file: str) -> str:
        return read_trimmed(sysfs / file) or ""

    return Fme(
        name=found.name,
        driver=driver,
        node=Path(found.node),
        sysfs=sysfs,
        pci=pci.physfn or pci,
        interface_id=found.interface_id,
        ports_num=attr("ports_num"),
        socket_id=attr("socket_id"),
        bitstream_id=attr("bitstream_id"),
        bitstream_metadata=attr("bitstream_metadata"),
    )


def open_fme(root: Path, node: Path, device_number: tuple[int, int] | None = None) -> Fme:
    """The FME behind a device node (root-prefixed)."""
    sysfs = sysfs_dir(root, node, device_number)
    kind = driver_of(sysfs.name)
    if kind is None or kind[0] != "fme":
        raise FpgaDeviceError(f"{node}: {sysfs.name} is not an FPGA FME")
    fme = find_card_fme(root, pci_device(root, sysfs), kind[1], str(node))
    if fme.sysfs != sysfs:
        raise FpgaDeviceError(f"{node}: {sysfs.name} is not the FME of its card ({fme.name} is)")
    return fme


def open_port(root: Path, node: Path, device_number: tuple[int, int] | None = None) -> Port:
    """The port behind a device node (root-prefixed)."""
    sysfs = sysfs_dir(root, node, device_number)
    kind = driver_of(sysfs.name)
    if kind is None or kind[0] != "port":
        raise FpgaDeviceError(f"{node}: {sysfs.name} is not an FPGA port")
    port_id = read_trimmed(sysfs / "id") or ""
    if not port_id.isdigit():
        raise FpgaDeviceError(f"{sysfs}/id: {port_id!r} is not a port number")
    return Port(
        name=sysfs.name,
        driver=kind[1],
        node=node,
        sysfs=sysfs,
        pci=pci_device(root, sysfs),
        afu_id=read_trimmed(sysfs / "afu_id") or "",
        port_id=int(port_id),
    )


def read_afu_id(port: Port) -> str:
    """The AFU ID the port reports now (it changes when the port is programmed)."""
    return read_trimmed(port.sysfs / "afu_id") or ""


def fme_of_port(root: Path, port: Port) -> Fme:
    """The FME managing ``port``: on the port's PF (through ``physfn`` for a VF)."""
    return find_card_fme(root, port.pci, port.driver, port.name)


def list_devices(root: Path) -> tuple[list[str], list[str]]:
    """Names of the FMEs and ports registered as platform devices, sorted."""
    try:
        names = sorted(os.listdir(under_root(root, "/sys/bus/platform/devices")))
    except OSError:
        return [], []
    fmes = [name for name in names if (kind := driver_of(name)) is not None and kind[0] == "fme"]
    ports = [name for name in names if (kind := driver_of(name)) is not None and kind[0] == "port"]
    return fmes, ports
