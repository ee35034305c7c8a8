"""Intel NPUs (the intel_vpu accel driver), read from ``/sys/class/accel``.

A pure function of the filesystem below ``prefix``. Foreign accel devices (other vendors, other
Intel device IDs) are left out silently; an Intel NPU whose attributes cannot be read is left out
with a problem line, and one whose ``/dev/accel`` node is missing is reported Unhealthy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceNode, Discovery, Health
from intel_device_plugins.plugins.scanning import PCI_ID, numa_or_problem
from intel_device_plugins.sysfs import INTEL_VENDOR_ID, list_dir, prefixed, read_first_line, read_trimmed

NAMESPACE = "npu.intel.com"
RESOURCE = "accel"
CLASS_DIR = "/sys/class/accel"
DEV_DIR = "/dev/accel"
ACCEL_NAME = re.compile(r"^accel[0-9]+$")
NPU_DEVICE_IDS = frozenset({"0x7e4c", "0x643e", "0xad1d", "0x7d1d", "0xb03e", "0xfd3e", "0xd71d"})
"""Meteor Lake, Arrow Lake, Lunar Lake, Panther Lake and later client NPUs."""


@dataclass(frozen=True)
class Npu:
    """One Intel NPU: its accel name, PCI device ID, sysfs device directory and device node."""

    name: str
    device_id: str
    device_dir: Path
    node: Path
    health: Health
    numa_nodes: tuple[int, ...]


def find_npus(prefix: str) -> tuple[list[Npu], list[str]]:
    """Every Intel NPU under ``prefix``, in accel order, and the problems met (each naming the device)."""
    class_dir = prefixed(prefix, CLASS_DIR)
    names = list_dir(class_dir)
    problems: list[str] = []
    npus: list[Npu] = []
    if names is None:
        problems.append(f"cannot read {class_dir} (accel driver not loaded?); no NPUs advertised")
        names = []
    for name in sorted((n for n in names if ACCEL_NAME.match(n)), key=lambda n: int(n[5:])):
        device_dir = class_dir / name / "device"
        vendor = read_trimmed(device_dir / "vendor")
        device_id = read_first_line(device_dir / "device")
        if vendor is None or device_id is None:
            missing = "vendor" if vendor is None else "device"
            problems.append(f"{name}: cannot read {device_dir / missing}; skipped")
            continue
        if not PCI_ID.match(vendor) or not PCI_ID.match(device_id):
            problems.append(f"{name}: garbage PCI IDs {vendor!r}/{device_id!r} in {device_dir}; skipped")
            continue
        if vendor.lower() != INTEL_VENDOR_ID or device_id.lower() not in NPU_DEVICE_IDS:
            continue
        node = prefixed(prefix, f"{DEV_DIR}/{name}")
        health = Health.HEALTHY
        if not node.exists():
            problems.append(f"{name}: device node {node} is missing; reported Unhealthy")
            health = Health.UNHEALTHY
        numa = numa_or_problem(device_dir, prefix, name, problems)
        npus.append(Npu(name, device_id.lower(), device_dir, node, health, numa))
    return npus, problems


def scan_npus(prefix: str, shared_dev_num: int) -> Discovery:
    """Resource ``accel``: every NPU advertised ``shared_dev_num`` times, IDs ``accelN-<i>``.

    The resource is always present, with zero devices when there is no NPU or no accel class at all
    (driver not loaded): the plugin keeps serving and picks up devices that appear later.
    """
    npus, problems = find_npus(prefix)
    devices: dict[str, DeviceInfo] = {}
    for npu in npus:
        node = str(npu.node)
        info = DeviceInfo(health=npu.health, nodes=(DeviceNode(node, node, "rw"),), numa_nodes=npu.numa_nodes)
        for index in range(shared_dev_num):
            devices[f"{npu.name}-{index}"] = info
    return Discovery({RESOURCE: devices}, tuple(problems))
