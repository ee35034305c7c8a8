"""DSA accelerators handed whole to containers (``-driver vfio-pci``), e.g. for a VM in a pod.

A DSA PCI function bound to ``vfio-pci`` is one device of resource ``vfio``, its ID the PCI address;
the container gets its IOMMU group node and the VFIO container node, and learns the addresses from
``VFIO_BDF0``, ``VFIO_BDF1``… in the order the kubelet requested them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.model import (
    ContainerAllocation,
    DeviceInfo,
    DeviceNode,
    Discovery,
    Health,
)
from intel_device_plugins.plugins.idxd.discovery import read_attribute
from intel_device_plugins.plugins.scanning import PCI_ID, numa_or_problem
from intel_device_plugins.sysfs import (
    PCI_ADDRESS,
    link_basename,
    list_dir,
    prefixed,
)

VFIO_RESOURCE = "vfio"
VFIO_DRIVER = "vfio-pci"
DSA_PCI_DEVICE_IDS = frozenset({"0x0b25", "0x11fb", "0x1212"})
"""PCI device IDs of DSA generations that may be passed through."""
VFIO_ENV_PREFIX = "VFIO_BDF"


def scan_vfio(prefix: str) -> Discovery:
    """Every DSA PCI function bound to vfio-pci.

    A DSA function bound to no driver at all is a failed bind and is reported; one bound to another
    driver (idxd) is in use by the host and is left out silently. A function whose IOMMU group
    cannot be resolved is left out; one whose group node is missing is reported Unhealthy.
    """
    pci_devices = prefix + "/sys/bus/pci/devices"
    problems: list[str] = []
    devices: dict[str, DeviceInfo] = {}
    vfio_node = prefix + "/dev/vfio/vfio"
    for address in list_dir(Path(pci_devices)) or []:
        if not PCI_ADDRESS.match(address):
            continue
        function_dir = f"{pci_devices}/{address}"
        # The driver link first: one readlink rules out the many functions bound to other drivers
        # without reading their device ID.
        try:
            driver: str | None = os.path.basename(os.readlink(f"{function_dir}/driver"))
        except OSError:
            driver = None
        if driver is not None and driver != VFIO_DRIVER:
            continue
        device_id = read_attribute(f"{function_dir}/device")
        if device_id is None:
            problems.append(f"{address}: cannot read {function_dir}/device; skipped")
            continue
        if not PCI_ID.match(device_id):
            problems.append(f"{address}: garbage device ID {device_id!r} in {function_dir}/device; skipped")
            continue
        if device_id.lower() not in DSA_PCI_DEVICE_IDS:
            continue
        if driver is None:
            problems.append(f"{address}: DSA {device_id} is bound to no driver (expected {VFIO_DRIVER})")
            continue
        group = link_basename(Path(f"{function_dir}/iommu_group"))
        if group is None:
            problems.append(f"{address}: no IOMMU group at {function_dir}/iommu_group; skipped")
            continue
        group_node = prefixed(prefix, f"/dev/vfio/{group}")
        health = Health.HEALTHY
        if not group_node.exists():
            problems.append(f"{address}: VFIO group node {group_node} is missing; reported Unhealthy")
            health = Health.UNHEALTHY
        numa = numa_or_problem(Path(function_dir), prefix, address, problems)
        devices[address] = DeviceInfo(
            health=health,
            nodes=(
                DeviceNode(str(group_node), str(group_node), "rw"),
                DeviceNode(vfio_node, vfio_node, "rw"),
            ),
            numa_nodes=numa,
        )
    # The resource stays registered with zero devices rather than vanishing when the last one goes.
    return Discovery({VFIO_RESOURCE: devices}, tuple(problems))


def with_bdf_envs(allocation: ContainerAllocation, ids: Sequence[str]) -> ContainerAllocation:
    """``VFIO_BDF<i>`` = the i-th requested address, numbered from 0 for each container anew.

    Each call builds a fresh map, so two containers never see each other's addresses.
    """
    envs = {key: value for key, value in allocation.envs.items() if not key.startswith(VFIO_ENV_PREFIX)}
    envs.update({f"{VFIO_ENV_PREFIX}{index}": address for index, address in enumerate(ids)})
    return dataclasses.replace(allocation, envs=envs)
