"""DLB as a DRA driver (``dlb.intel.com``): PFs and VFs, on the plugin's own discovery.

Each usable ``/dev/dlbN`` is one device named after its PCI function (``0000-6d-00-1``, which the
kernel's ``dlbN`` numbering is not stable enough to be; ``dlbN`` when the function cannot be found)
with its kernel name (``node``), its role (``pf`` or ``vf``, as the plugin's
resources) and placement as attributes; a PF with VFs enabled stays unpublished, as in the plugin,
since its VFs are the usable devices. The classes ``pf.dlb.intel.com`` and ``vf.dlb.intel.com`` map
the plugin's ``dlb.intel.com/pf`` and ``dlb.intel.com/vf``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.deviceplugin.model import CdiDevice
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import AllocatedDevice, AttributeValue, Device, Inventory
from intel_device_plugins.dra.placement import PLACEMENT_DEFAULTS, placement_attributes, stable_name
from intel_device_plugins.dra.profile import default_claim_edits
from intel_device_plugins.dra.uniform import with_defaults
from intel_device_plugins.plugins.dlb.discovery import NAMESPACE, PF, VF, scan_dlb


def scan_dlb_devices(root: Path) -> Inventory:
    """The device plugin's tree (container path → device, per role) restated as DRA devices."""
    discovery = scan_dlb(root)
    prefix = str(root).rstrip("/")
    devices: list[Device] = []
    for role, entries in discovery.tree.items():
        for container_path, info in entries.items():
            node = container_path.rsplit("/", 1)[1]
            attributes: dict[str, AttributeValue] = {
                "role": role,
                "node": node,
                **placement_attributes(prefix, f"/sys/class/dlb2/{node}/device", info.numa_nodes),
            }
            name = stable_name(attributes, node)
            devices.append(
                Device(
                    name=name,
                    attributes=attributes,
                    cdi=CdiDevice(kind=f"{NAMESPACE}/dlb", name=name, nodes=info.nodes),
                    health=info.health,
                )
            )
    devices.sort(key=lambda device: device.name)
    inventory = Inventory(devices=tuple(devices), problems=discovery.problems)
    return with_defaults(inventory, PLACEMENT_DEFAULTS)


DLB_DEVICE_CLASSES = tuple(
    DeviceClassSpec(
        f"{role}.{NAMESPACE}",
        NAMESPACE,
        selector=f'device.attributes["{NAMESPACE}"].role == "{role}"',
        extended_resource_name=f"{NAMESPACE}/{role}",
    )
    for role in (PF, VF)
)


@dataclass
class DlbDriverProfile:
    prefix: str = ""

    @property
    def driver_name(self) -> str:
        return NAMESPACE

    def scan(self) -> Inventory:
        return scan_dlb_devices(Path(self.prefix or "/"))

    def watch_paths(self) -> Sequence[Path]:
        return (Path(self.prefix or "/") / "dev",)

    def uevent_subsystems(self) -> Collection[str]:
        return ("dlb2", "pci")

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(self.driver_name, claim_uid, allocated)
