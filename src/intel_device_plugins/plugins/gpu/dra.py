"""The GPU DRA driver (``gpu.intel.com``): the GPU plugin's own card scan as DRA devices.

Each usable card (``card<N>``, the same cards the device plugin advertises) is one device that
several claims may share: it has ``allowMultipleAllocations`` and two capacities the scheduler adds
up over the claims on it, ``memory`` (bytes of local memory, only when sysfs tells it) and
``millicores`` (1000 per card). A request that names no capacity, which is what every
extended-resource request (``gpu.intel.com/i915: 1``) becomes, takes the whole card: ``memory``
defaults to all of it, or, on a card without local memory, ``millicores`` does. A claim naming
``memory`` shares the card; ``millicores`` then defaults to 0, so memory alone decides how many
claims fit, and a claim may still reserve compute by naming ``millicores`` too.

Health is the device plugin's: a card whose device nodes are gone is Unhealthy, with the reason,
and the framework taints it.

SR-IOV: a PF with VFs enabled is published beside its VFs as overlapping partitions of one card. Its
counter set ``<pf>-functions`` holds one ``functions`` counter per enabled VF; each VF draws one and
the PF draws all of them, so the scheduler hands out either the whole card or VFs, never both. The
partitions are not shared by capacity (the scheduler would count a shared partition's draw once per
claim); their capacities only describe them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from intel_device_plugins.deviceplugin.model import CdiDevice
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.deviceplugin.topology import devices_root
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import (
    AllocatedDevice,
    AttributeValue,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    Inventory,
    RequestPolicy,
)
from intel_device_plugins.dra.placement import numa_attributes, pci_attributes_of_path
from intel_device_plugins.dra.profile import default_claim_edits
from intel_device_plugins.plugins.gpu.discovery import (
    KNOWN_DRIVERS,
    NAMESPACE,
    CardFactsCache,
    CardScan,
    GpuCard,
    GpuOptions,
    scan_cards,
)
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)

DRIVER_NAME = NAMESPACE
"""The driver's name is the GPU plugin's resource namespace, and the attribute domain."""
MILLICORES_PER_CARD = 1000
ADMIN_ACCESS_NAMESPACE_LABEL = "resource.kubernetes.io/admin-access"
"""The namespace label without which the API server refuses admin-access claims."""

MODELS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "0x56a0": ("Arc", "A770"),
        "0x56a1": ("Arc", "A750"),
        "0x56a5": ("Arc", "A380"),
        "0x56c0": ("Flex", "Flex 170"),
        "0x56c1": ("Flex", "Flex 140"),
        "0x0bd5": ("Max", "Max 1550"),
        "0x0bda": ("Max", "Max 1100"),
        "0xe20b": ("Arc", "B580"),
        "0xe20c": ("Arc", "B570"),
    }
)
"""PCI device ID → (family, model) for the discrete cards whose names are certain; others get
neither attribute rather than a guess (``pciId`` is always there to select on)."""


def card_attributes(card: GpuCard, sys_devices: str) -> dict[str, AttributeValue]:
    """What a claim's CEL selectors and ``matchAttribute`` constraints can see of one card.

    ``sys_devices`` is the resolved ``/sys/devices`` the card's PCI placement is read against.
    """
    attributes: dict[str, AttributeValue] = {"driver": card.driver, "sriov": card.sriov.value}
    if card.device_id:
        attributes["pciId"] = card.device_id
        known = MODELS.get(card.device_id)
        if known is not None:
            attributes["family"], attributes["model"] = known
    attributes.update(numa_attributes(card.info.numa_nodes))
    attributes.update(pci_attributes_of_path(card.sysfs_dir, sys_devices))
    return attributes


def card_capacity(card: GpuCard) -> dict[str, Capacity]:
    """``memory`` (when known) and ``millicores``; a request naming neither takes the whole card."""
    whole = str(MILLICORES_PER_CARD)
    if card.memory_bytes is None:
        return {"millicores": Capacity(whole, RequestPolicy(default=whole))}
    memory = str(card.memory_bytes)
    return {
        "memory": Capacity(memory, RequestPolicy(default=memory)),
        "millicores": Capacity(whole, RequestPolicy(default="0")),
    }


def card_device(card: GpuCard, sys_devices: str) -> Device:
    return Device(
        name=card.name,
        attributes=card_attributes(card, sys_devices),
        capacity=card_capacity(card),
        cdi=card.info.cdi,
        health=card.info.health,
        health_message=card.health_message,
        allow_multiple_allocations=True,
    )


FUNCTIONS_COUNTER = "functions"


def functions_counter_set(pf: GpuCard) -> str:
    return f"{pf.name}-functions"


def partition_device(card: GpuCard, sys_devices: str, counter_set: str, draw: int, pf_name: str) -> Device:
    """A PF with VFs (``draw`` = all of them) or one of its VFs (``draw`` = 1), exclusively allocated."""
    whole = card_device(card, sys_devices)
    return replace(
        whole,
        attributes={**whole.attributes, "partitionOf": pf_name},
        capacity={name: Capacity(capacity.value) for name, capacity in whole.capacity.items()},
        allow_multiple_allocations=False,
        consumes_counters=(CounterConsumption(counter_set, {FUNCTIONS_COUNTER: str(draw)}),),
    )


def inventory_of(scan: CardScan | str, sys_devices: str) -> Inventory:
    """A card scan as the driver's inventory; an unreadable DRM class directory means no devices."""
    if isinstance(scan, str):
        return Inventory(problems=(f"{scan}; no GPUs published",))
    partitioned = {card.sysfs_dir: card for card in scan.cards if card.enabled_vfs > 0}
    devices: list[Device] = []
    for card in scan.cards:
        pf = partitioned.get(card.sysfs_dir) or partitioned.get(card.pf_dir)
        if pf is None:
            devices.append(card_device(card, sys_devices))
        else:
            draw = pf.enabled_vfs if pf is card else 1
            devices.append(partition_device(card, sys_devices, functions_counter_set(pf), draw, pf.name))
    counter_sets = tuple(
        CounterSet(functions_counter_set(pf), {FUNCTIONS_COUNTER: str(pf.enabled_vfs)})
        for pf in partitioned.values()
    )
    return Inventory(devices=tuple(devices), counter_sets=counter_sets, problems=scan.problems)


@dataclass
class GpuDriverProfile:
    """:class:`~intel_device_plugins.dra.profile.DriverProfile` for Intel GPUs.

    ``options`` are the device plugin's (ID allow/deny lists, by-path mounts); sharing and
    monitoring are claims' business in DRA, so their options are not used here.
    """

    prefix: str = ""
    options: GpuOptions = field(default_factory=GpuOptions)
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    cards: CardFactsCache = field(default_factory=CardFactsCache)

    @property
    def driver_name(self) -> str:
        return DRIVER_NAME

    def scan(self) -> Inventory:
        scan = scan_cards(self.prefix, self.options, self.cards, with_memory=True, with_partitioned_pfs=True)
        inventory = inventory_of(scan, devices_root(self.prefix or "/"))
        self.problems.report(inventory.problems)
        return inventory

    def watch_paths(self) -> Sequence[Path]:
        """As the device plugin: device nodes come and go in ``/dev/dri``, cards in the DRM class."""
        return (prefixed(self.prefix, "/dev/dri"), prefixed(self.prefix, "/sys/class/drm"))

    def uevent_subsystems(self) -> Collection[str]:
        return ("drm", "pci")

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(DRIVER_NAME, claim_uid, allocated)


# ----- DeviceClasses and the monitoring claim ------------------------------------------------

GPU_DEVICE_CLASSES = (
    DeviceClassSpec(DRIVER_NAME, DRIVER_NAME),
    *(
        DeviceClassSpec(
            f"{kernel_driver}.{DRIVER_NAME}",
            DRIVER_NAME,
            selector=f'device.attributes["{DRIVER_NAME}"].driver == "{kernel_driver}"',
            extended_resource_name=f"{NAMESPACE}/{kernel_driver}",
        )
        for kernel_driver in KNOWN_DRIVERS
    ),
)
"""``gpu.intel.com`` (every card) and one class per kernel driver (``i915.gpu.intel.com``,
``xe.gpu.intel.com``) serving the device plugin's extended resource of the same name, so pods asking
``gpu.intel.com/i915: 1`` run unchanged where the DRA driver replaced the plugin. The plugin's
``monitoring`` resource has no class: monitoring is an admin-access claim
(:func:`monitoring_claim_template`)."""


def monitoring_claim_template(
    namespace: str, name: str = "gpu-monitoring", device_class_name: str = DRIVER_NAME
) -> dict[str, Any]:
    """A ResourceClaimTemplate giving a monitoring pod admin access to every card of its node.

    Admin access sees cards already allocated to others without consuming them; the API server
    accepts it only in a namespace labelled ``resource.kubernetes.io/admin-access: "true"``.
    """
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": device_class_name,
                                "allocationMode": "All",
                                "adminAccess": True,
                            },
                        }
                    ]
                }
            }
        },
    }
