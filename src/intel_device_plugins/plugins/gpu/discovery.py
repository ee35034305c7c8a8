"""GPU discovery: from a filesystem root to the ``gpu.intel.com`` device tree.

A pure function of the files under ``prefix`` and the options. It never raises for one bad card:
the card is skipped (not ours, or not a DRM card) or reported Unhealthy (ours, but its device nodes
are gone), and the reason is returned as a problem line naming the card.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from intel_device_plugins.deviceplugin.model import (
    CdiDevice,
    DeviceInfo,
    DeviceNode,
    DeviceTree,
    Health,
    Mount,
)
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.sysfs import (
    INTEL_VENDOR_ID,
    PCI_ADDRESS,
    driver_name,
    is_pf_with_vfs,
    list_dir,
    prefixed,
    read_first_line,
    read_trimmed,
)

NAMESPACE = "gpu.intel.com"
CDI_KIND = "intel.cdi.k8s.io/gpu"
DEFAULT_DRIVER = "i915"
MONITORING_ID = "all"

CARD_NAME = re.compile(r"^card[0-9]+$")
CONTROL_NODE = re.compile(r"^controlD[0-9]+$")


class ByPath(StrEnum):
    """How ``/dev/dri/by-path`` is made visible in the container."""

    SINGLE = "single"
    NONE = "none"
    ALL = "all"


class MonitoringMode(StrEnum):
    SINGLE = "single"
    SPLIT = "split"


@dataclass(frozen=True)
class GpuOptions:
    shared_dev_num: int = 1
    by_path: ByPath = ByPath.SINGLE
    allow_ids: frozenset[str] = frozenset()
    deny_ids: frozenset[str] = frozenset()
    enable_monitoring: bool = False
    monitoring_mode: MonitoringMode = MonitoringMode.SINGLE


@dataclass(frozen=True)
class GpuScan:
    tree: DeviceTree
    problems: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class _Card:
    name: str
    driver: str
    info: DeviceInfo
    monitoring_nodes: tuple[DeviceNode, ...]


def _pci_address_of(card_link: Path) -> str | None:
    """``/sys/class/drm/card0`` → ``…/0000:00:02.0/drm/card0`` → ``0000:00:02.0``."""
    try:
        target = Path(os.readlink(card_link))
    except OSError:
        return None
    if target.parent.name != "drm":
        return None
    address = target.parent.parent.name
    return address if PCI_ADDRESS.match(address) else None


def _by_path_mounts(by_path_dir: Path, mode: ByPath, card_link: Path) -> tuple[Mount, ...]:
    if mode is ByPath.NONE or not by_path_dir.is_dir():
        return ()
    if mode is ByPath.ALL:
        return (Mount(str(by_path_dir), str(by_path_dir), read_only=True),)
    address = _pci_address_of(card_link)
    entries = list_dir(by_path_dir) if address else None
    if not entries or address is None:
        return ()
    return tuple(
        Mount(str(by_path_dir / entry), str(by_path_dir / entry), read_only=True)
        for entry in entries
        if entry.startswith(f"pci-{address}")
    )


def _mei_nodes(device_dir: Path, dev_root: Path) -> tuple[DeviceNode, ...]:
    nodes: list[DeviceNode] = []
    for mei_dir in sorted(device_dir.glob("*.mei-*/mei")):
        for name in list_dir(mei_dir) or []:
            path = str(dev_root / name)
            nodes.append(DeviceNode(path, path, "rw"))
    return tuple(nodes)


def _inspect_card(name: str, prefix: str, options: GpuOptions, problems: list[str]) -> _Card | None:
    drm_dir = prefixed(prefix, "/sys/class/drm")
    dri_dir = prefixed(prefix, "/dev/dri")
    card_link = drm_dir / name
    device_dir = card_link / "device"

    vendor = read_trimmed(device_dir / "vendor")
    if vendor is None:
        problems.append(f"GPU {name}: cannot read {device_dir / 'vendor'}; card skipped")
        return None
    if vendor != INTEL_VENDOR_ID:
        return None
    drm_entries = list_dir(device_dir / "drm")
    if drm_entries is None:
        return None
    if options.allow_ids or options.deny_ids:
        device_id = read_first_line(device_dir / "device")
        if not device_id:
            problems.append(
                f"GPU {name}: cannot read its PCI device ID; skipped because allow/deny lists are set"
            )
            return None
        if options.allow_ids and device_id not in options.allow_ids:
            return None
        if device_id in options.deny_ids:
            return None
    if is_pf_with_vfs(device_dir):
        return None

    driver = driver_name(device_dir) or DEFAULT_DRIVER
    expected = [entry for entry in drm_entries if not CONTROL_NODE.match(entry)]
    present = [entry for entry in expected if (dri_dir / entry).exists()]
    nodes = tuple(DeviceNode(str(dri_dir / entry), str(dri_dir / entry), "rw") for entry in present)
    health = Health.HEALTHY
    if not present:
        if not expected:
            return None
        problems.append(
            f"GPU {name}: none of its device nodes {expected} exist in {dri_dir}; reported Unhealthy"
        )
        health = Health.UNHEALTHY
    elif len(present) < len(expected):
        missing = sorted(set(expected) - set(present))
        problems.append(f"GPU {name}: device nodes {missing} missing in {dri_dir}; reported Unhealthy")
        health = Health.UNHEALTHY

    mounts = _by_path_mounts(dri_dir / "by-path", options.by_path, card_link)
    try:
        numa = numa_nodes_of(device_dir, Path(prefix or "/"))
    except TopologyError as error:
        problems.append(f"GPU {name}: {error}; no NUMA topology reported")
        numa = ()
    info = DeviceInfo(
        health=health,
        nodes=nodes,
        mounts=mounts,
        numa_nodes=numa,
        cdi=CdiDevice(kind=CDI_KIND, name=name, nodes=nodes, mounts=mounts) if nodes else None,
    )
    monitoring = nodes + _mei_nodes(device_dir, prefixed(prefix, "/dev")) if options.enable_monitoring else ()
    return _Card(name, driver, info, monitoring)


def _card_number(name: str) -> int:
    return int(name[4:])


def scan_gpus(prefix: str, options: GpuOptions) -> GpuScan:
    """The complete GPU device tree of the node under ``prefix``, with the problems found."""
    problems: list[str] = []
    drm_dir = prefixed(prefix, "/sys/class/drm")
    entries = list_dir(drm_dir)
    if entries is None:
        return GpuScan({}, (f"cannot read {drm_dir}; no GPUs advertised",))
    tree: dict[str, dict[str, DeviceInfo]] = {}
    monitoring: dict[str, list[DeviceNode]] = {}
    for name in sorted((e for e in entries if CARD_NAME.match(e)), key=_card_number):
        card = _inspect_card(name, prefix, options, problems)
        if card is None:
            continue
        devices = tree.setdefault(card.driver, {})
        for index in range(options.shared_dev_num):
            devices[f"{name}-{index}"] = card.info
        if options.enable_monitoring:
            resource = (
                "monitoring"
                if options.monitoring_mode is MonitoringMode.SINGLE
                else f"{card.driver}_monitoring"
            )
            monitoring.setdefault(resource, []).extend(card.monitoring_nodes)
    for resource, nodes in monitoring.items():
        tree[resource] = {MONITORING_ID: DeviceInfo(health=Health.HEALTHY, nodes=tuple(nodes))}
    return GpuScan(tree, tuple(problems))
