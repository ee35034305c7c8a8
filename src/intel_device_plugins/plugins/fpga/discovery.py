"""FPGA discovery: pure functions from a filesystem root to the ``fpga.intel.com`` device tree.

Two steps, both without side effects:

1. :func:`discover_fpgas` reads the kernel driver's sysfs tree (OPAE ``intel-fpga`` under
   ``/sys/class/fpga``, else in-tree DFL under ``/sys/class/fpga_region``) into typed ports, each
   with the FME (FPGA management engine) of its card, found through ``physfn`` for a VF's port.
2. :func:`fpga_tree` turns those ports into the device tree of one mode: ``af`` (one resource per
   interface + AFU pair, one device per port), ``region`` and ``regiondevel`` (one resource per
   interface ID, one device per FME with all its ports; ``regiondevel`` adds the FME node).

A port that cannot be used (no FME, no device node, a PCI function of another class, IDs that are
not hexadecimal) is left out with a problem line naming it; the rest of the node keeps its devices.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from intel_device_plugins import sysfs
from intel_device_plugins.deviceplugin.model import (
    CdiDevice,
    DeviceInfo,
    DeviceNode,
    DeviceTree,
    Discovery,
    Health,
)
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of

NAMESPACE = "fpga.intel.com"
CDI_KIND = "intel.cdi.k8s.io/fpga"
CRI_HOOK_PATH = "/opt/intel/fpga-sw/intel-fpga-crihook"
"""Where the FPGA init container installs the ``createRuntime`` hook on the host."""
MODE_ANNOTATION = "com.intel.fpga.mode"
"""Container annotation telling the hook that the region is to be programmed."""
REGION_MODE_VALUE = "fpga.intel.com/region"
UNUSABLE_ID = "f" * 32
"""A port's AFU ID (or an FME's interface ID) while a reprogramming is under way or failed."""
FPGA_PCI_CLASS = "0x120000"
"""PCI class "processing accelerator", which every supported card has."""


class Mode(StrEnum):
    AF = "af"
    REGION = "region"
    REGIONDEVEL = "regiondevel"


class Driver(StrEnum):
    OPAE = "intel-fpga"
    DFL = "dfl"


@dataclass(frozen=True)
class DriverLayout:
    """Where one kernel driver puts things; the patterns are anchored and dots escaped."""

    class_dir: str
    device_dir: re.Pattern[str]
    port: re.Pattern[str]
    fme_parent: str
    """Directory under a PCI function holding the driver's per-function directories."""
    fme: re.Pattern[str]


LAYOUTS: Mapping[Driver, DriverLayout] = {
    Driver.OPAE: DriverLayout(
        "/sys/class/fpga",
        re.compile(r"^intel-fpga-dev\.[0-9]+$"),
        re.compile(r"^intel-fpga-port\.[0-9]+$"),
        "fpga",
        re.compile(r"^intel-fpga-fme\.[0-9]+$"),
    ),
    Driver.DFL: DriverLayout(
        "/sys/class/fpga_region",
        re.compile(r"^region[0-9]+$"),
        re.compile(r"^dfl-port\.[0-9]+$"),
        "fpga_region",
        re.compile(r"^dfl-fme\.[0-9]+$"),
    ),
}

_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HEX_ID = re.compile(r"^[0-9a-fA-F]{32}$")
_DFL_BRIDGE = re.compile(r"^dfl-fme-region\.[0-9]+$")
_DFL_REGION = re.compile(r"^region[0-9]+$")


@dataclass(frozen=True)
class Fme:
    name: str
    """``intel-fpga-fme.N`` / ``dfl-fme.N``: the region's device ID."""
    sysfs_dir: str
    interface_id: str
    node: str
    """Host path of the FME's device node (under the root)."""


@dataclass(frozen=True)
class Port:
    name: str
    """``intel-fpga-port.N`` / ``dfl-port.N``: the AF device ID and the node's name in ``/dev``."""
    sysfs_dir: str
    """Resolved sysfs directory of the port (under the root)."""
    pci_dir: str
    """Resolved sysfs directory of the PCI function carrying the port."""
    afu_id: str
    fme: Fme


@dataclass(frozen=True)
class FpgaInventory:
    driver: Driver | None
    ports: tuple[Port, ...] = ()
    problems: tuple[str, ...] = field(default=())


def detect_driver(prefix: str) -> Driver | None:
    """OPAE when ``/sys/class/fpga`` exists (as upstream decides), else DFL, else ``None``."""
    for driver in (Driver.OPAE, Driver.DFL):
        if os.path.isdir(prefix + LAYOUTS[driver].class_dir):
            return driver
    return None


def _pci_function_of(resolved: str) -> str | None:
    """The nearest ancestor of a resolved sysfs path that is a PCI function under ``/sys/devices``."""
    marker = "/sys/devices/pci"
    start = resolved.find(marker)
    if start < 0:
        return None
    parts = resolved.split("/")
    # Walk from the leaf upwards, as the kernel nests the driver's devices below the function.
    for index in range(len(parts) - 1, 0, -1):
        if _PCI_ADDRESS.match(parts[index]):
            candidate = "/".join(parts[: index + 1])
            if len(candidate) > start + len(marker):
                return candidate
            return None
    return None


def _read_small(path: str) -> str | None:
    """A small sysfs attribute, trimmed; ``None`` when unreadable. Bounded, and without a text
    wrapper: the scan reads one per port every second."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _resolve_link(path: str) -> str:
    """A class entry's target as an absolute path: one ``readlink`` instead of a ``realpath`` walk.

    The kernel's class entries are one relative link each into ``/sys/devices``; anything else is
    resolved in full.
    """
    try:
        target = os.readlink(path)
    except OSError:
        return os.path.realpath(path)
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return resolved if not os.path.islink(resolved) else os.path.realpath(resolved)


def _single_match(directory: str, pattern: re.Pattern[str]) -> str | None:
    names = [name for name in sysfs.list_dir(directory) or () if pattern.match(name)]
    return f"{directory}/{names[0]}" if len(names) == 1 else None


def _interface_id(driver: Driver, fme_dir: str) -> str | None:
    if driver is Driver.OPAE:
        return _read_small(f"{fme_dir}/pr/interface_id")
    bridge = _single_match(fme_dir, _DFL_BRIDGE)
    if bridge is None:
        return None
    region = _single_match(f"{bridge}/fpga_region", _DFL_REGION)
    return None if region is None else _read_small(f"{region}/compat_id")


def _fme_node(prefix: str, fme_dir: str, name: str) -> str:
    """The FME's node: ``/dev/char/<dev>`` resolved (what udev made), else ``/dev/<name>``."""
    dev = _read_small(f"{fme_dir}/dev")
    if dev:
        link = f"{prefix}/dev/char/{dev}"
        if os.path.islink(link):
            resolved = _resolve_link(link)
            if resolved.startswith(f"{prefix}/dev/"):
                return resolved
    return f"{prefix}/dev/{name}"


def find_fme(driver: Driver, prefix: str, pci_dir: str) -> tuple[Fme | None, str]:
    """The FME of the card a PCI function belongs to (through ``physfn`` for a VF), or a problem."""
    layout = LAYOUTS[driver]
    physfn = f"{pci_dir}/physfn"
    pf_dir = _resolve_link(physfn) if os.path.islink(physfn) else pci_dir
    containers = [
        f"{pf_dir}/{layout.fme_parent}/{name}"
        for name in sysfs.list_dir(f"{pf_dir}/{layout.fme_parent}") or ()
        if layout.device_dir.match(name)
    ]
    fmes = [
        f"{container}/{name}"
        for container in containers
        for name in sysfs.list_dir(container) or ()
        if layout.fme.match(name)
    ]
    if len(fmes) != 1:
        found = "none" if not fmes else ", ".join(os.path.basename(fme) for fme in fmes)
        return None, f"no unique FME under {pf_dir} (found {found})"
    fme_dir = fmes[0]
    name = os.path.basename(fme_dir)
    interface = _interface_id(driver, fme_dir)
    if interface is None:
        return None, f"{name}: interface ID unreadable under {fme_dir}"
    return Fme(name, fme_dir, interface.lower(), _fme_node(prefix, fme_dir, name)), ""


def discover_fpgas(root: Path | str) -> FpgaInventory:
    """Every usable FPGA port under ``root``, in class-directory order, with its card's FME."""
    prefix = str(root).rstrip("/")
    driver = detect_driver(prefix)
    if driver is None:
        return FpgaInventory(
            None,
            problems=(
                "kernel driver is not loaded: neither /sys/class/fpga nor /sys/class/fpga_region exists",
            ),
        )
    layout = LAYOUTS[driver]
    class_dir = prefix + layout.class_dir
    problems: list[str] = []
    ports: list[Port] = []
    fmes: dict[str, tuple[Fme | None, str]] = {}
    for device in sorted(sysfs.list_dir(class_dir) or (), key=_natural):
        if not layout.device_dir.match(device):
            continue
        device_dir = _resolve_link(f"{class_dir}/{device}")
        for entry in sorted(sysfs.list_dir(device_dir) or (), key=_natural):
            if not layout.port.match(entry):
                continue
            # Ports are directories inside the device directory, so the path is already resolved.
            port, problem = _read_port(driver, prefix, f"{device_dir}/{entry}", entry, fmes)
            if problem:
                problems.append(f"{entry}: {problem}; skipped")
            if port is not None:
                ports.append(port)
    return FpgaInventory(driver, tuple(ports), tuple(problems))


def _natural(name: str) -> tuple[str, int]:
    stem = name.rstrip("0123456789")
    digits = name[len(stem) :]
    return stem, int(digits) if digits else -1


def _read_port(
    driver: Driver, prefix: str, port_dir: str, name: str, fmes: dict[str, tuple[Fme | None, str]]
) -> tuple[Port | None, str]:
    if not os.path.exists(f"{prefix}/dev/{name}"):
        return None, f"no device node {prefix}/dev/{name}"
    resolved = port_dir
    pci_dir = _pci_function_of(resolved)
    if pci_dir is None:
        return None, f"{resolved} is not below a PCI function in /sys/devices"
    if pci_dir not in fmes:
        fmes[pci_dir] = _function_fme(driver, prefix, pci_dir)
    fme, problem = fmes[pci_dir]
    if fme is None:
        return None, problem
    afu_id = _read_small(f"{resolved}/afu_id")
    if afu_id is None:
        return None, f"cannot read {resolved}/afu_id"
    return Port(name, resolved, pci_dir, afu_id.lower(), fme), ""


def _function_fme(driver: Driver, prefix: str, pci_dir: str) -> tuple[Fme | None, str]:
    """Checks made once per PCI function and scan: its class, then its card's FME."""
    pci_class = _read_small(f"{pci_dir}/class")
    if pci_class != FPGA_PCI_CLASS:
        return (
            None,
            f"unsupported PCI class {pci_class!r} of {os.path.basename(pci_dir)} (want {FPGA_PCI_CLASS})",
        )
    return find_fme(driver, prefix, pci_dir)


# ----- device tree per mode ------------------------------------------------------------------


def af_resource_name(interface_id: str, afu_id: str) -> str:
    """``af-<if[:3]>.<afu[:3]>.<base64url of both IDs' bytes, no padding>``: 54 characters.

    Raises ``ValueError`` when either ID is not hexadecimal.
    """
    try:
        raw = binascii.unhexlify(interface_id) + binascii.unhexlify(afu_id)
    except (binascii.Error, ValueError) as error:
        raise ValueError(
            f"interface ID {interface_id!r} / AFU ID {afu_id!r} not hexadecimal: {error}"
        ) from None
    encoded = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    return f"af-{interface_id[:3]}.{afu_id[:3]}.{encoded}"


def region_resource_name(interface_id: str) -> str:
    return f"region-{interface_id}"


NumaLookup = Callable[[str], tuple[int, ...]]
"""A port's NUMA nodes from its PCI function directory; may raise ``TopologyError``."""


def _numa(ports: Sequence[Port], lookup: NumaLookup, problems: list[str]) -> tuple[int, ...]:
    nodes: set[int] = set()
    for port in ports:
        try:
            nodes.update(lookup(port.pci_dir))
        except TopologyError as error:
            problems.append(f"{port.name}: no NUMA information: {error}")
    return tuple(sorted(nodes))


def _port_node(prefix: str, port: Port) -> DeviceNode:
    path = f"{prefix}/dev/{port.name}"
    return DeviceNode(path, path, "rw")


def _af_tree(inventory: FpgaInventory, prefix: str, lookup: NumaLookup, problems: list[str]) -> DeviceTree:
    tree: dict[str, dict[str, DeviceInfo]] = {}
    for port in inventory.ports:
        try:
            resource = af_resource_name(port.fme.interface_id, port.afu_id)
        except ValueError as error:
            problems.append(f"{port.name}: {error}; skipped")
            continue
        health = Health.UNHEALTHY if port.afu_id == UNUSABLE_ID else Health.HEALTHY
        tree.setdefault(resource, {})[port.name] = DeviceInfo(
            health=health, nodes=(_port_node(prefix, port),), numa_nodes=_numa((port,), lookup, problems)
        )
    return tree


def _region_tree(
    inventory: FpgaInventory, prefix: str, lookup: NumaLookup, problems: list[str], devel: bool
) -> DeviceTree:
    regions: dict[str, list[Port]] = {}
    for port in inventory.ports:
        regions.setdefault(port.fme.name, []).append(port)
    tree: dict[str, dict[str, DeviceInfo]] = {}
    for fme_name, ports in regions.items():
        fme = ports[0].fme
        if not _HEX_ID.match(fme.interface_id):
            problems.append(f"{fme_name}: interface ID {fme.interface_id!r} is not 32 hex digits; skipped")
            continue
        nodes = tuple(_port_node(prefix, port) for port in ports)
        health = Health.UNHEALTHY if fme.interface_id == UNUSABLE_ID else Health.HEALTHY
        numa = _numa(ports, lookup, problems)
        if devel:
            info = DeviceInfo(
                health=health, nodes=(*nodes, DeviceNode(fme.node, fme.node, "rw")), numa_nodes=numa
            )
        else:
            info = DeviceInfo(
                health=health,
                nodes=nodes,
                numa_nodes=numa,
                annotations={MODE_ANNOTATION: REGION_MODE_VALUE},
                cdi=CdiDevice(kind=CDI_KIND, name=fme_name, create_runtime_hooks=(CRI_HOOK_PATH,)),
            )
        tree.setdefault(region_resource_name(fme.interface_id), {})[fme_name] = info
    return tree


def fpga_tree(inventory: FpgaInventory, mode: Mode, prefix: str, numa_of: NumaLookup) -> Discovery:
    """The device tree of ``mode`` for discovered ports; problems include the inventory's."""
    problems = list(inventory.problems)
    if mode is Mode.AF:
        tree = _af_tree(inventory, prefix, numa_of, problems)
    else:
        tree = _region_tree(inventory, prefix, numa_of, problems, devel=mode is Mode.REGIONDEVEL)
    return Discovery(tree, tuple(problems))


def scan_fpga(root: Path | str, mode: Mode, numa_of: NumaLookup | None = None) -> Discovery:
    """Discovery plus the mode's device tree; device paths keep the root as their prefix."""
    prefix = str(root).rstrip("/")
    lookup = numa_of or (lambda directory: numa_nodes_of(directory, root))
    return fpga_tree(discover_fpgas(root), mode, prefix, lookup)
