"""QAT DPDK-mode discovery: pure functions from a filesystem root to a device tree.

Reading only. Binding VFs to the DPDK driver is a write and lives in the shell (:mod:`.plugin`),
which runs :func:`find_vfs`, binds what needs binding, then :func:`build_tree` on the same root.
The optional caches it passes in (:class:`StaticMemo`, a NUMA lookup) only skip re-reading facts
that cannot change while a device exists. Every per-device problem comes back as a line of text
naming the device instead of an exception, so one broken VF or PF never hides the others.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType

from intel_device_plugins import sysfs
from intel_device_plugins.deviceplugin.model import (
    DeviceInfo,
    DeviceNode,
    Discovery,
    Health,
    Mount,
)
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of

NAMESPACE = "qat.intel.com"

VFIO_PCI = "vfio-pci"
IGB_UIO = "igb_uio"
DPDK_DRIVERS = (VFIO_PCI, IGB_UIO)

VF_DRIVER_OF_DEVICE: Mapping[str, str] = MappingProxyType(
    {
        "0442": "dh895xccvf",
        "0443": "dh895xccvf",
        "18a1": "c4xxxvf",
        "19e3": "c3xxxvf",
        "4941": "4xxxvf",
        "4943": "4xxxvf",
        "4945": "4xxxvf",
        "4947": "420xxvf",
        "4949": "6xxxvf",
        "37c9": "c6xxvf",
        "6f55": "d15xxvf",
    }
)
"""VF PCI device ID → the kernel's VF driver for it."""

KERNEL_VF_DRIVERS = ("dh895xccvf", "c4xxxvf", "c3xxxvf", "4xxxvf", "420xxvf", "6xxxvf", "c6xxvf", "d15xxvf")
DEFAULT_KERNEL_VF_DRIVERS = ("4xxxvf", "420xxvf")

CONFIGURABLE_VF_IDS = frozenset({"4941", "4943", "4945", "4947", "4949"})
"""Generations whose PF has a service configuration; older VFs are always ``generic``."""

GENERIC = "generic"
_RESOURCE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VIRTFN = re.compile(r"^virtfn(\d+)$")


@dataclass(frozen=True)
class QatPaths:
    """Where things are on a node whose filesystem starts at ``root`` (the ``-prefix``)."""

    root: Path = Path("/")

    # Cached: a scan asks for these paths once per VF, and building paths is a large share of it.
    @cached_property
    def drivers(self) -> Path:
        return self.root / "sys/bus/pci/drivers"

    @cached_property
    def devices(self) -> Path:
        return self.root / "sys/bus/pci/devices"

    @cached_property
    def debugfs(self) -> Path:
        return self.root / "sys/kernel/debug"

    @cached_property
    def _host_prefix(self) -> str:
        return str(self.root).rstrip("/")

    @cached_property
    def devices_str(self) -> str:
        return str(self.devices)

    def host(self, absolute: str) -> str:
        """Host path of an absolute node path: ``/dev/vfio/3`` under the root."""
        return self._host_prefix + absolute

    def device_attribute(self, address: str, name: str) -> str:
        """``<root>/sys/bus/pci/devices/<address>/<name>`` as a string (cheaper than a Path)."""
        return f"{self.devices_str}/{address}/{name}"


@dataclass(frozen=True)
class PhysicalFunction:
    address: str
    driver: str
    sysfs_dir: Path

    @property
    def debugfs_name(self) -> str:
        """Directory name the QAT driver gives this PF in debugfs."""
        return f"qat_{self.driver}_{self.address}"


@dataclass(frozen=True)
class VirtualFunction:
    """A QAT VF found on the node, before any binding. ``pf`` is ``None`` inside a VM."""

    address: str
    sysfs_dir: Path
    device_id: str
    pf: PhysicalFunction | None = None


@dataclass(frozen=True)
class DpdkConfig:
    dpdk_driver: str = VFIO_PCI
    kernel_vf_drivers: tuple[str, ...] = DEFAULT_KERNEL_VF_DRIVERS
    max_devices: int = 64


@dataclass(frozen=True)
class VfDiscovery:
    """Result of a read-only pass: what was found, plus what was wrong along the way."""

    vfs: tuple[VirtualFunction, ...]
    problems: tuple[str, ...] = ()


def pf_driver_of(vf_driver: str) -> str:
    return vf_driver.removesuffix("vf")


class StaticMemo:
    """Facts about a VF that cannot change while it exists: PCI device ID and IOMMU group.

    A scan every second would otherwise re-read them for every VF. The shell keeps one memo across
    scans and calls :meth:`retain` with the VFs just seen, so a VF that disappears (and may come
    back differently) is read afresh. Only successful reads are remembered.
    """

    def __init__(self) -> None:
        self.device_ids: dict[str, str] = {}
        self.groups: dict[str, str] = {}

    def retain(self, addresses: set[str]) -> None:
        for table in (self.device_ids, self.groups):
            for address in [a for a in table if a not in addresses]:
                del table[address]


def _pci_entries(directory: Path) -> list[str]:
    return [name for name in sysfs.list_dir(directory) or () if sysfs.PCI_ADDRESS.match(name)]


def _device_id(device_dir: Path) -> str | None:
    value = sysfs.read_trimmed(device_dir / "device")
    if value is None:
        return None
    return value.lower().removeprefix("0x")


def _link_target(link: Path) -> Path | None:
    """Where a sysfs link points, without resolving every component (sysfs links are direct)."""
    try:
        return Path(os.path.normpath(link.parent / os.readlink(link)))
    except OSError:
        return None


def _virtfn_links(pf_dir: Path) -> list[Path]:
    numbered = []
    for name in sysfs.list_dir(pf_dir) or ():
        match = _VIRTFN.match(name)
        if match:
            numbered.append((int(match.group(1)), pf_dir / name))
    return [path for _, path in sorted(numbered)]


def find_vfs(paths: QatPaths, config: DpdkConfig, memo: StaticMemo | None = None) -> VfDiscovery:
    """All QAT VFs of the enabled VF drivers, found through their PFs or, in a VM, by device ID.

    At most ``config.max_devices`` are returned. A broken ``virtfn`` link or an unreadable
    ``device`` file skips that one function with a problem naming it.
    """
    memo = memo or StaticMemo()
    problems: list[str] = []
    vfs: list[VirtualFunction] = []
    for vf_driver in config.kernel_vf_drivers:
        pf_driver = pf_driver_of(vf_driver)
        for address in _pci_entries(paths.drivers / pf_driver):
            pf = PhysicalFunction(
                address, pf_driver, Path(os.path.realpath(paths.drivers / pf_driver / address))
            )
            if not pf.sysfs_dir.is_dir():
                problems.append(
                    _problem(address, f"{pf_driver} driver link does not lead to a device; skipped")
                )
                continue
            for link in _virtfn_links(pf.sysfs_dir):
                target = _link_target(link)
                known = memo.device_ids.get(target.name) if target is not None else None
                if known is not None and target is not None:
                    vfs.append(VirtualFunction(target.name, target, known, pf))
                    continue
                if target is None or not target.is_dir():
                    problems.append(_problem(address, f"{link.name} does not lead to a device; VF skipped"))
                    continue
                device_id = _device_id(target)
                if device_id is None:
                    problems.append(
                        _problem(target.name, "cannot read the PCI device ID; treated as generic")
                    )
                else:
                    memo.device_ids[target.name] = device_id
                vfs.append(VirtualFunction(target.name, target, device_id or "", pf))
    if not vfs and not _any_pf(paths, config):
        vfs, vm_problems = _find_vfs_without_pf(paths, config, memo)
        problems.extend(vm_problems)
    return VfDiscovery(tuple(vfs[: config.max_devices]), tuple(problems))


def _any_pf(paths: QatPaths, config: DpdkConfig) -> bool:
    return any(_pci_entries(paths.drivers / pf_driver_of(driver)) for driver in config.kernel_vf_drivers)


def _find_vfs_without_pf(
    paths: QatPaths, config: DpdkConfig, memo: StaticMemo
) -> tuple[list[VirtualFunction], list[str]]:
    """Inside a VM the PFs are absent; QAT VFs are recognised by their PCI device ID."""
    enabled = set(config.kernel_vf_drivers)
    vfs: list[VirtualFunction] = []
    problems: list[str] = []
    for address in _pci_entries(paths.devices):
        device_dir = _link_target(paths.devices / address) or paths.devices / address
        device_id = memo.device_ids.get(address) or _device_id(device_dir)
        if device_id is None:
            problems.append(_problem(address, "cannot read the PCI device ID; skipped"))
            continue
        memo.device_ids[address] = device_id
        if VF_DRIVER_OF_DEVICE.get(device_id) in enabled:
            vfs.append(VirtualFunction(address, device_id=device_id, sysfs_dir=device_dir))
    return vfs, problems


def _problem(subject: str, message: str) -> str:
    """One log line naming the device (or file) it is about."""
    return f"{subject}: {message}"


# ----- resource names ------------------------------------------------------------------------


def resource_from_services(services: str) -> str | None:
    """Resource name for a PF's configured services; ``None`` when it would not be a valid name.

    Every ``;`` becomes ``-`` (not only the first two), empty items are dropped, and the two
    spellings of symmetric plus asymmetric crypto are ``cy``.
    """
    items = [item.strip() for item in services.strip().split(";") if item.strip()]
    name = "-".join(items)
    if name in ("sym-asym", "asym-sym"):
        return "cy"
    return name if _RESOURCE_NAME.match(name) else None


def _services_from_dev_cfg(path: Path) -> tuple[str | None, str]:
    """``[GENERAL] ServicesEnabled`` of a debugfs ``dev_cfg``; the string says why it is missing."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None, ""
    except OSError as error:
        return None, f"cannot read {path}: {error.strerror or error}"
    parser = configparser.ConfigParser(strict=False, interpolation=None, allow_no_value=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as error:
        return None, f"cannot parse {path}: {error.message}"
    value = parser.get("GENERAL", "ServicesEnabled", fallback=None)
    if not value:
        return None, f"{path} has no [GENERAL] ServicesEnabled"
    return value, ""


def pf_services(pf: PhysicalFunction, paths: QatPaths) -> tuple[str | None, str]:
    """Configured services of a PF: ``qat/cfg_services`` while the device is up, else debugfs."""
    state = sysfs.read_trimmed(pf.sysfs_dir / "qat" / "state")
    services = sysfs.read_trimmed(pf.sysfs_dir / "qat" / "cfg_services")
    if state == "up" and services:
        return services, ""
    return _services_from_dev_cfg(paths.debugfs / pf.debugfs_name / "dev_cfg")


def pf_resource(pf: PhysicalFunction | None, paths: QatPaths) -> tuple[str, str]:
    """(resource name, problem or ``""``) for the VFs of ``pf``."""
    if pf is None:
        return GENERIC, ""
    services, problem = pf_services(pf, paths)
    if services is None:
        return GENERIC, problem
    name = resource_from_services(services)
    if name is None:
        return GENERIC, f"services {services!r} do not form a valid resource name; using {GENERIC!r}"
    return name, ""


def pf_health(pf: PhysicalFunction | None, paths: QatPaths) -> tuple[Health, str]:
    """Heartbeat of a PF: ``-1`` means the device stopped responding.

    No heartbeat file (debugfs not mounted, or a driver without heartbeat) means Healthy, as
    upstream. A file that exists but cannot be read or holds no number is reported Unhealthy: a
    heartbeat we cannot interpret proves nothing.
    """
    if pf is None:
        return Health.HEALTHY, ""
    path = paths.debugfs / pf.debugfs_name / "heartbeat" / "status"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return Health.HEALTHY, ""
    except OSError as error:
        return Health.UNHEALTHY, f"cannot read heartbeat {path}: {error.strerror or error}"
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    try:
        status = int(first)
    except ValueError:
        return Health.UNHEALTHY, f"heartbeat {path} holds {first!r}, not a number"
    if status == -1:
        return Health.UNHEALTHY, "heartbeat reports the device failed"
    return Health.HEALTHY, ""


# ----- device nodes --------------------------------------------------------------------------


@dataclass(frozen=True)
class DpdkDevice:
    nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    problem: str = ""


def _link_name(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def vfio_group(vf: VirtualFunction, paths: QatPaths) -> str | None:
    """The VF's IOMMU group as named under ``/dev/vfio`` (``noiommu-<n>`` for a no-IOMMU group)."""
    group_link = paths.device_attribute(vf.address, "iommu_group")
    group = _link_name(group_link)
    if group is None or not os.path.isdir(group_link):
        return None
    if sysfs.read_trimmed(Path(group_link, "name")) == "vfio-noiommu":
        return f"noiommu-{group}"
    return group


def vfio_device(vf: VirtualFunction, paths: QatPaths, memo: StaticMemo | None = None) -> DpdkDevice:
    """``/dev/vfio/<group>`` plus the vfio container node."""
    group = memo.groups.get(vf.address) if memo is not None else None
    if group is None:
        group = vfio_group(vf, paths)
        if group is None:
            link = paths.device_attribute(vf.address, "iommu_group")
            return DpdkDevice(problem=f"no IOMMU group ({link} does not resolve)")
        if memo is not None:
            memo.groups[vf.address] = group
    return DpdkDevice(
        nodes=(
            DeviceNode(paths.host(f"/dev/vfio/{group}"), paths.host(f"/dev/vfio/{group}")),
            DeviceNode(paths.host("/dev/vfio/vfio"), paths.host("/dev/vfio/vfio")),
        )
    )


def uio_device(vf: VirtualFunction, paths: QatPaths) -> DpdkDevice:
    """``/dev/uioN`` plus its sysfs device directory, which DPDK reads inside the container."""
    uio_dir = paths.device_attribute(vf.address, "uio")
    entries = sysfs.list_dir(Path(uio_dir))
    if not entries:
        return DpdkDevice(problem=f"no uio device under {uio_dir}")
    uio = entries[0]
    sys_path = f"/sys/class/uio/{uio}/device"
    return DpdkDevice(
        nodes=(DeviceNode(paths.host(f"/dev/{uio}"), paths.host(f"/dev/{uio}")),),
        mounts=(Mount(paths.host(sys_path), paths.host(sys_path), read_only=False),),
    )


def current_driver(vf: VirtualFunction, paths: QatPaths) -> str:
    """The driver a VF is bound to now; ``""`` when none."""
    return _link_name(paths.device_attribute(vf.address, "driver")) or ""


def dpdk_device(
    vf: VirtualFunction, paths: QatPaths, dpdk_driver: str, memo: StaticMemo | None = None
) -> DpdkDevice:
    return vfio_device(vf, paths, memo) if dpdk_driver == VFIO_PCI else uio_device(vf, paths)


# ----- the tree ------------------------------------------------------------------------------


@dataclass
class _PfCache:
    """Per-scan memo: all VFs of one PF share its services and heartbeat."""

    paths: QatPaths
    resources: dict[str, tuple[str, str]] = field(default_factory=dict)
    health: dict[str, tuple[Health, str]] = field(default_factory=dict)

    def resource(self, pf: PhysicalFunction | None) -> tuple[str, str]:
        if pf is None:
            return GENERIC, ""
        if pf.address not in self.resources:
            self.resources[pf.address] = pf_resource(pf, self.paths)
        return self.resources[pf.address]

    def heartbeat(self, pf: PhysicalFunction | None) -> tuple[Health, str]:
        if pf is None:
            return Health.HEALTHY, ""
        if pf.address not in self.health:
            self.health[pf.address] = pf_health(pf, self.paths)
        return self.health[pf.address]


NumaLookup = Callable[[Path], tuple[int, ...]]
"""A device directory's NUMA nodes; may raise ``TopologyError``. The shell passes a cached one."""


def _numa(vf: VirtualFunction, numa_of: NumaLookup) -> tuple[tuple[int, ...], str]:
    try:
        return numa_of(vf.sysfs_dir), ""
    except TopologyError as error:
        return (), str(error)


def build_tree(
    paths: QatPaths,
    vfs: Sequence[VirtualFunction],
    config: DpdkConfig,
    bind_failures: Mapping[str, str] | None = None,
    numa_of: NumaLookup | None = None,
    memo: StaticMemo | None = None,
    drivers: Mapping[str, str] | None = None,
) -> Discovery:
    """The device tree for ``vfs`` as the node looks now.

    A VF that is not bound to the DPDK driver (``bind_failures`` says why, when binding was tried)
    or whose device node cannot be found is advertised Unhealthy, so the kubelet still counts it in
    capacity but never allocates it. PF problems (services, heartbeat) are reported once per PF.
    ``drivers`` are current drivers the caller has just read (it saves reading them twice).
    """
    failures = bind_failures or {}
    lookup = numa_of or (lambda directory: numa_nodes_of(directory, paths.root))
    cache = _PfCache(paths)
    problems: list[str] = []
    tree: dict[str, dict[str, DeviceInfo]] = {}
    for index, vf in enumerate(vfs, start=1):
        resource = GENERIC
        if vf.device_id in CONFIGURABLE_VF_IDS:
            resource, resource_problem = cache.resource(vf.pf)
            if resource_problem and vf.pf is not None:
                problems.append(_problem(vf.pf.address, resource_problem))
        heartbeat, heartbeat_problem = cache.heartbeat(vf.pf)
        if heartbeat_problem and vf.pf is not None:
            problems.append(_problem(vf.pf.address, heartbeat_problem))
        health = heartbeat
        driver = drivers[vf.address] if drivers and vf.address in drivers else current_driver(vf, paths)
        if driver != config.dpdk_driver:
            reason = failures.get(vf.address) or f"bound to {driver or 'no driver'}, not {config.dpdk_driver}"
            problems.append(_problem(vf.address, f"Unhealthy: {reason}"))
            health = Health.UNHEALTHY
        device = dpdk_device(vf, paths, config.dpdk_driver, memo)
        if device.problem:
            problems.append(_problem(vf.address, device.problem))
            health = Health.UNHEALTHY
        numa, numa_problem = _numa(vf, lookup)
        if numa_problem:
            problems.append(_problem(vf.address, f"no NUMA information: {numa_problem}"))
        tree.setdefault(resource, {})[vf.address] = DeviceInfo(
            health=health,
            nodes=device.nodes,
            mounts=device.mounts,
            envs={f"QAT{index}": vf.address},
            numa_nodes=numa,
        )
    return Discovery(tree, tuple(dict.fromkeys(problems)))
