"""Intel NPUs as a DRA driver (``npu.intel.com``), on the plugin's own discovery.

Each NPU is one device named after its PCI function (``0000-00-0b-0``; its accel node's name, ``accel0``,
when the function cannot be found), with its accel node (``node``), PCI device ID and placement as
attributes. The class ``accel.npu.intel.com`` maps the plugin's ``npu.intel.com/accel``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceNode, Health
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import AllocatedDevice, AttributeValue, Device, Inventory
from intel_device_plugins.dra.placement import PLACEMENT_DEFAULTS, placement_attributes, stable_name
from intel_device_plugins.dra.profile import default_claim_edits
from intel_device_plugins.dra.uniform import with_defaults
from intel_device_plugins.plugins.npu.discovery import CLASS_DIR, DEV_DIR, NAMESPACE, RESOURCE, Npu, find_npus
from intel_device_plugins.sysfs import prefixed


def npu_device(prefix: str, npu: Npu) -> Device:
    node = str(npu.node)
    attributes: dict[str, AttributeValue] = {
        "pciId": npu.device_id,
        "node": npu.name,
        **placement_attributes(prefix, f"{CLASS_DIR}/{npu.name}/device", npu.numa_nodes),
    }
    name = stable_name(attributes, npu.name)
    return Device(
        name=name,
        attributes=attributes,
        cdi=CdiDevice(kind=f"{NAMESPACE}/accel", name=name, nodes=(DeviceNode(node, node, "rw"),)),
        health=npu.health,
        health_message="" if npu.health is Health.HEALTHY else f"device node {node} is missing",
    )


def scan_npu_devices(prefix: str) -> Inventory:
    npus, problems = find_npus(prefix)
    inventory = Inventory(devices=tuple(npu_device(prefix, npu) for npu in npus), problems=tuple(problems))
    return with_defaults(inventory, PLACEMENT_DEFAULTS)


NPU_DEVICE_CLASSES = (
    DeviceClassSpec(f"{RESOURCE}.{NAMESPACE}", NAMESPACE, extended_resource_name=f"{NAMESPACE}/{RESOURCE}"),
)


@dataclass
class NpuDriverProfile:
    prefix: str = ""

    @property
    def driver_name(self) -> str:
        return NAMESPACE

    def scan(self) -> Inventory:
        return scan_npu_devices(self.prefix)

    def watch_paths(self) -> Sequence[Path]:
        return (prefixed(self.prefix, DEV_DIR),)

    def uevent_subsystems(self) -> Collection[str]:
        return ("accel", "pci")

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(self.driver_name, claim_uid, allocated)
