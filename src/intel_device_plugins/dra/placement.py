"""Where a device sits: the standard PCI attributes and its NUMA node, as DRA attributes.

``resource.kubernetes.io/pciBusID`` is the PCI function's address and
``resource.kubernetes.io/pcieRoot`` the root complex it hangs off (``pci0000:00``); the scheduler
matches them across drivers (a GPU and a NIC on one root). Both come from one path resolution: a
device's sysfs directory resolves to ``/sys/devices/pci<root>/<bridges…>/<bdf>[/<child>]``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from intel_device_plugins.dra.model import STANDARD_PCI_BUS_ID, STANDARD_PCIE_ROOT, AttributeValue

PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


def pci_attributes_of_path(resolved: str, sys_devices: str) -> dict[str, AttributeValue]:
    """The standard attributes for an already resolved sysfs path; empty when it is not under a PCI root.

    The bus ID is the deepest PCI address on the path (the function itself, or the function owning a
    child such as ``dsa0`` or ``drm/card0``).
    """
    if not resolved.startswith(sys_devices + "/"):
        return {}
    parts = resolved[len(sys_devices) + 1 :].split("/")
    if not parts or not PCIE_ROOT.match(parts[0]):
        return {}
    addresses = [part for part in parts[1:] if PCI_ADDRESS.match(part)]
    if not addresses:
        return {}
    return {STANDARD_PCI_BUS_ID: addresses[-1], STANDARD_PCIE_ROOT: parts[0]}


def pci_attributes(prefix: str, device_dir: str) -> dict[str, AttributeValue]:
    """:func:`pci_attributes_of_path` for a sysfs directory below ``prefix`` (``-prefix`` as everywhere)."""
    sys_devices = os.path.realpath(prefix + "/sys/devices")
    return pci_attributes_of_path(os.path.realpath(prefix + device_dir), sys_devices)


NUMA_NODE = "numaNode"
"""In the driver's domain, as the drivers first published it (selectors written for it keep working)."""
STANDARD_NUMA_NODE = "resource.kubernetes.io/numaNode"
"""Kubernetes 1.37's standard attribute, for ``matchAttribute`` across drivers (a GPU and a NIC on one
node); a device without NUMA affinity publishes neither here, and its driver then gives it
``numaNode: -1`` (:data:`PLACEMENT_DEFAULTS`) so selectors on it never fail."""


def numa_attributes(numa_nodes: tuple[int, ...]) -> dict[str, AttributeValue]:
    """Both NUMA attributes when the device sits on exactly one node; several would be a guess."""
    if len(numa_nodes) != 1:
        return {}
    return {NUMA_NODE: numa_nodes[0], STANDARD_NUMA_NODE: numa_nodes[0]}


def placement_attributes(
    prefix: str, device_dir: str, numa_nodes: tuple[int, ...]
) -> dict[str, AttributeValue]:
    """PCI bus ID and root of ``device_dir`` (below ``prefix``) and, when it is exactly one, its NUMA node.

    ``numa_nodes`` comes from the discovery that found the device, which already looked it up.
    """
    return {**pci_attributes(prefix, device_dir), **numa_attributes(numa_nodes)}


def pci_device_name(bus_id: str, child: str = "") -> str:
    """A device's name from the PCI function it is (``0000:6d:00.1`` → ``0000-6d-00-1``) or hangs off,
    with ``child`` naming the part of that function (``wq1`` → ``0000-6a-01-0-wq1``).

    PCI addresses survive reboots and driver reloads where kernel names (``dlb0``, ``dsa0``,
    ``intel-fpga-port.2``) are numbered in probe order, so a DeviceTaintRule or a script naming a device
    keeps meaning the same device. The form is Intel's QAT and GPU drivers' (``:`` and ``.`` turned into
    ``-``, a DNS label).
    """
    name = bus_id.replace(":", "-").replace(".", "-")
    return f"{name}-{child}" if child else name


def stable_name(attributes: Mapping[str, AttributeValue], fallback: str, child: str = "") -> str:
    """:func:`pci_device_name` of the device's ``pciBusID`` attribute, or ``fallback`` (its kernel name)
    when its sysfs path does not lead to a PCI function (the name is then only as stable as the kernel's)."""
    bus_id = attributes.get(STANDARD_PCI_BUS_ID)
    if not isinstance(bus_id, str):
        return fallback
    return pci_device_name(bus_id, child)


NO_NUMA_NODE = -1
"""``numaNode`` of a device without one NUMA node (Linux's own ``numa_node`` value for "none")."""
PLACEMENT_DEFAULTS: Mapping[str, AttributeValue] = {NUMA_NODE: NO_NUMA_NODE}
"""The driver-domain placement attributes every device carries (:mod:`intel_device_plugins.dra.uniform`);
the standard ones stay absent where they do not apply."""
