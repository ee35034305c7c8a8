"""QAT VFs as a DRA driver (``qat.intel.com``), on the DPDK plugin's own discovery and binding.

Each VF is one device named as Intel's QAT DRA driver names it (``qatvf-0000-6b-00-1``) with the
services its PF is configured for: ``services`` spelled as Intel's driver spells it (the services
joined by ``;`` in the fixed order sym, asym, dc, dcc, so ``sym;asym`` or ``dc``, and ``""`` for an
unconfigured PF), plus one boolean per service so CEL selectors read naturally, the PF's address and
the VF's PCI device ID. Preparing gives what the plugin's allocation gives: the VF's
vfio group node, ``/dev/vfio/vfio`` and ``QAT<n>=<address>`` numbered from 1 across the claim's VFs.
The classes ``<services>.qat.intel.com`` map the plugin's resource names.

Kernel mode (``-mode kernel``) publishes each user-process slot of a configuration section as a
device (``section``, ``resource`` and ``device`` attributes) and prepares the section environment
the kernel plugin gives, ``QAT_SECTION_NAME`` and ``QAT_SECTION_NAME_<resource>_<n>``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceInfo, Health
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import (
    STANDARD_PCI_BUS_ID,
    AllocatedDevice,
    AttributeValue,
    Device,
    Inventory,
)
from intel_device_plugins.dra.placement import PLACEMENT_DEFAULTS, placement_attributes
from intel_device_plugins.dra.profile import default_claim_edits
from intel_device_plugins.dra.uniform import with_defaults
from intel_device_plugins.plugins.qat.discovery import GENERIC, NAMESPACE, VirtualFunction
from intel_device_plugins.plugins.qat.kernel import SECTION_ENV, Section
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin, QatKernelPlugin

SERVICES = ("sym", "asym", "dc", "dcc", "decomp")
"""The services a PF can be configured for, in the order ``services`` lists them (Intel's driver's order
for the first four; ``decomp``, which it does not know, last)."""
RESOURCES = ("generic", "sym", "asym", "dc", "cy", "sym-dc", "asym-dc", "dcc", "decomp")
"""Resource names the plugin advertises for the service configurations in use; each gets a class."""


def device_name(address: str) -> str:
    """``0000:3d:01.2`` → ``qatvf-0000-3d-01-2``: Intel's QAT DRA driver's name for the VF (a DNS label)."""
    return "qatvf-" + address.replace(":", "-").replace(".", "-")


def resource_services(resource: str) -> frozenset[str]:
    """The services a plugin resource name stands for: ``cy`` → sym and asym, ``generic`` → none."""
    items = set(resource.split("-")) - {GENERIC}
    if "cy" in items:
        items = (items - {"cy"}) | {"sym", "asym"}
    return frozenset(items)


def services_value(resource: str) -> str:
    """The ``services`` attribute for a plugin resource name, as Intel's driver spells it:
    ``cy`` → ``sym;asym``, ``asym-dc`` → ``asym;dc``, ``generic`` → ``""``."""
    items = resource_services(resource)
    known = [service for service in SERVICES if service in items]
    return ";".join(known + sorted(items - set(SERVICES)))


def service_attributes(resource: str) -> dict[str, AttributeValue]:
    items = resource_services(resource)
    return {"services": services_value(resource), **{service: service in items for service in SERVICES}}


def vf_device(
    vf: VirtualFunction, resource: str, info: DeviceInfo, prefix: str, problems: Collection[str]
) -> Device:
    """One VF as a device; ``problems`` are the plugin's current ones, the first naming the VF explains
    why it is unhealthy."""
    attributes: dict[str, AttributeValue] = {
        **service_attributes(resource),
        "pciId": f"0x{vf.device_id}",
        **placement_attributes(prefix, f"/sys/bus/pci/devices/{vf.address}", info.numa_nodes),
    }
    attributes.setdefault(STANDARD_PCI_BUS_ID, vf.address)
    if vf.pf is not None:
        attributes["pfAddress"] = vf.pf.address
    reason = ""
    if info.health is not Health.HEALTHY:
        reason = next((problem for problem in sorted(problems) if vf.address in problem), "unhealthy")
    name = device_name(vf.address)
    return Device(
        name=name,
        attributes=attributes,
        cdi=CdiDevice(kind=f"{NAMESPACE}/vf", name=name, nodes=info.nodes, mounts=info.mounts),
        health=info.health,
        health_message=reason,
    )


def scan_vf_devices(plugin: QatDpdkPlugin) -> Inventory:
    """Bind the VFs as the plugin does, then each VF of the plugin's tree as a device."""
    vfs, tree = plugin.scan_vfs()
    prefix = str(plugin.paths.root).rstrip("/")
    located = {
        address: (resource, info) for resource, devices in tree.items() for address, info in devices.items()
    }
    problems = plugin.problems.current
    devices = [vf_device(vf, *located[vf.address], prefix, problems) for vf in vfs if vf.address in located]
    inventory = Inventory(devices=tuple(devices), problems=tuple(plugin.problems.current))
    return with_defaults(inventory, VF_DEFAULTS)


VF_DEFAULTS: Mapping[str, AttributeValue] = {"pfAddress": "", **PLACEMENT_DEFAULTS}
"""A VF whose PF is not known has ``pfAddress: ""``; every other attribute is always there."""


QAT_DEVICE_CLASSES = (
    DeviceClassSpec(NAMESPACE, NAMESPACE),
    *(
        DeviceClassSpec(
            f"{resource}.{NAMESPACE}",
            NAMESPACE,
            selector=f'device.attributes["{NAMESPACE}"].services == "{services_value(resource)}"',
            extended_resource_name=f"{NAMESPACE}/{resource}",
        )
        for resource in RESOURCES
    ),
)


KERNEL_SHAPES = tuple((cy, dc) for cy in range(3) for dc in range(3) if cy or dc)
"""The section shapes (crypto and compression instances per process) kernel mode has classes for; a
node configured otherwise needs a class of its own, written like these."""


def kernel_class(cy: int, dc: int) -> DeviceClassSpec:
    """``cy1-dc0.qat.intel.com`` for the kernel plugin's resource ``cy1_dc0`` (class names are DNS
    subdomains, resource names may carry ``_``)."""
    resource = Section("", cy, dc, False, ()).resource
    return DeviceClassSpec(
        f"{resource.replace('_', '-')}.{NAMESPACE}",
        NAMESPACE,
        selector=f'device.attributes["{NAMESPACE}"].resource == "{resource}"',
        extended_resource_name=f"{NAMESPACE}/{resource}",
    )


QAT_KERNEL_DEVICE_CLASSES = (
    DeviceClassSpec(NAMESPACE, NAMESPACE),
    *(kernel_class(cy, dc) for cy, dc in KERNEL_SHAPES),
)
"""Kernel mode's classes (``deploy/dra/qat/kernel``): the driver's, and one per section shape that maps
the kernel plugin's resource name, so unchanged pods asking ``qat.intel.com/cy1_dc0`` are served."""


@dataclass
class QatDriverProfile:
    plugin: QatDpdkPlugin

    @property
    def driver_name(self) -> str:
        return NAMESPACE

    def scan(self) -> Inventory:
        return scan_vf_devices(self.plugin)

    def watch_paths(self) -> Sequence[Path]:
        return self.plugin.watch_paths()

    def uevent_subsystems(self) -> Collection[str]:
        return self.plugin.uevent_subsystems()

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        """Each VF's nodes, and ``QAT1``, ``QAT2``, … in allocation order, as the plugin numbers them."""
        edits = default_claim_edits(self.driver_name, claim_uid, allocated)
        addresses = [str(device.attributes[STANDARD_PCI_BUS_ID]) for _, device in allocated]
        return [
            replace(edit, env=(f"QAT{index}={address}",))
            for index, (edit, address) in enumerate(zip(edits, addresses, strict=True), start=1)
        ]


_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]+")


def slot_device_name(device_id: str) -> str:
    """``SSL_dev0_1`` → ``ssl-dev0-1``: section names are free text, device names DNS labels."""
    return _NOT_IN_LABEL.sub("-", device_id.lower()).strip("-")[:63].rstrip("-") or "slot"


def scan_slot_devices(plugin: QatKernelPlugin) -> Inventory:
    """The kernel plugin's process slots as devices. Raises as the plugin does when ``adf_ctl`` fails
    (the driver then keeps publishing what it published before)."""
    tree = plugin.scan()
    devices: list[Device] = []
    taken: set[str] = set()
    for resource, slots in tree.items():
        for slot_id, info in slots.items():
            name = slot_device_name(slot_id)
            while name in taken:
                name = f"{name[:58]}-{len(taken)}"
            taken.add(name)
            section, device, _process = slot_id.rsplit("_", 2)
            devices.append(
                Device(
                    name=name,
                    attributes={"resource": resource, "section": section, "device": device},
                    cdi=CdiDevice(kind=f"{NAMESPACE}/slot", name=name, nodes=info.nodes, mounts=info.mounts),
                    health=info.health,
                )
            )
    return Inventory(devices=tuple(devices), problems=tuple(plugin.problems.current))


@dataclass
class QatKernelDriverProfile:
    plugin: QatKernelPlugin

    @property
    def driver_name(self) -> str:
        return NAMESPACE

    def scan(self) -> Inventory:
        return scan_slot_devices(self.plugin)

    def watch_paths(self) -> Sequence[Path]:
        return ()

    def uevent_subsystems(self) -> Collection[str]:
        return ("pci",)

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        """Per resource, the sections numbered from 0 in allocation order; ``QAT_SECTION_NAME`` is the
        last one's, as the kernel plugin numbers a container's devices."""
        edits = default_claim_edits(self.driver_name, claim_uid, allocated)
        numbers: dict[str, int] = {}
        result = []
        for edit, (_, device) in zip(edits, allocated, strict=True):
            resource, section = str(device.attributes["resource"]), str(device.attributes["section"])
            number = numbers.get(resource, 0)
            numbers[resource] = number + 1
            result.append(
                replace(
                    edit, env=(f"{SECTION_ENV}_{resource}_{number}={section}", f"{SECTION_ENV}={section}")
                )
            )
        return result
