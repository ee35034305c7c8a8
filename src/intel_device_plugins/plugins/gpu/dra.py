"""The GPU DRA driver (``gpu.intel.com``): the GPU plugin's own card scan as DRA devices.

It is a drop-in for Intel's own GPU DRA driver: the same device names, attributes and taints, so claims,
tolerations and tooling written for that driver work unchanged.

Each usable card (the cards the device plugin advertises) is one device, named after its PCI function
and device ID (``0000-03-00-0-0x56c0``), so the name survives reboots and DRM renumbering. Earlier
releases named it ``card<N>``; a claim allocated under that name is still prepared (the DRM name is
the device's former name), and what the checkpoint recorded under it is answered and unprepared as
recorded. Several
claims may share it: it has ``allowMultipleAllocations`` and two capacities the scheduler adds up over
the claims on it, ``memory`` (bytes of local memory; 0 when sysfs does not tell it) and ``millicores``
(1000 per card). A request that names no capacity, which is what every extended-resource request
(``gpu.intel.com/i915: 1``) becomes, takes the whole card: ``memory`` defaults to all of it and, on a
card without known memory, ``millicores`` does. A claim naming ``memory`` shares the card;
``millicores`` then defaults to 0, so memory alone decides how many claims fit, and a claim may still
reserve compute by naming ``millicores`` too.

Every device carries every attribute (``"Unknown"``, ``""``, ``0``, ``-1`` or ``false`` where there
is nothing to tell), because a selector naming an attribute one candidate lacks aborts the whole
allocation.

Health is the device plugin's: a card whose device nodes are gone is Unhealthy, with the reason. Some
nodes gone is a warning, tainted ``HealthIssues-DeviceNodesMissing`` ``NoSchedule``; all of them gone
is critical, ``HealthIssues-DeviceAbsent`` ``NoExecute``, which evicts the pods using the card
(both effects configurable). With health sources on (xpumd, the kernel's signals: the GPU plugin's
:class:`~intel_device_plugins.plugins.gpu.health.GpuHealth`), a card's verdict adds to that
(:func:`with_verdict`): an Unhealthy verdict is one issue per deciding finding, named by the
finding's category (``HealthIssues-memory``) at the verdict's severity, so the same taint policy
applies; a card no source can speak of (xpumd down) has ``health`` ``Unknown`` and stays schedulable.
An admin-access allocation (monitoring) also gets the card's MEI device nodes.

SR-IOV: a PF with VFs enabled is published beside its VFs as overlapping partitions of one card. Its
counter set ``<pf>-functions`` holds one ``functions`` counter per enabled VF; each VF draws one and
the PF draws all of them, so the scheduler hands out either the whole card or VFs, never both. The
partitions are not shared by capacity (the scheduler would count a shared partition's draw once per
claim); their capacities only describe them.

Monitoring: the scheduler checks a device's counters for admin-access requests too, so a monitoring
claim (``allocationMode: All``, admin access) can neither take a PF and its VFs together nor a PF
while one of its VFs is in use. Each PF with VFs enabled is therefore published once more, as
``<pf>-monitor`` of ``type`` ``monitor``: the same card, drawing no counters, tainted
``gpu.intel.com/monitoring-only`` (NoSchedule) so only claims tolerating that get it, and refused
to any allocation without admin access. The monitoring claim selects the cards that are no
partition and these monitor devices, so it is allocatable on every node whatever runs there.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from intel_device_plugins.deviceplugin.health.model import UNKNOWN, Verdict
from intel_device_plugins.deviceplugin.model import CdiDevice, Health
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.deviceplugin.topology import devices_root
from intel_device_plugins.deviceplugin.uevents import Uevent
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import (
    STANDARD_PCIE_ROOT,
    AllocatedDevice,
    AttributeValue,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    HealthIssue,
    HealthState,
    HealthTaints,
    Inventory,
    RequestPolicy,
    Severity,
    Taint,
    TaintKeys,
)
from intel_device_plugins.dra.parameters import ParameterKind
from intel_device_plugins.dra.placement import NUMA_NODE, PCI_ADDRESS, numa_attributes, pci_attributes_of_path
from intel_device_plugins.dra.profile import ClaimPreparationError, default_claim_edits
from intel_device_plugins.plugins.gpu.discovery import (
    KNOWN_DRIVERS,
    NAMESPACE,
    CardFactsCache,
    CardScan,
    GpuCard,
    GpuOptions,
    SriovRole,
    scan_cards,
)
from intel_device_plugins.plugins.gpu.draparams import GPU_PARAMETER_KINDS, claims_by_path
from intel_device_plugins.plugins.gpu.health import GpuHealth
from intel_device_plugins.plugins.gpu.models import model_of
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)

DRIVER_NAME = NAMESPACE
"""The driver's name is the GPU plugin's resource namespace, and the attribute domain."""
MILLICORES_PER_CARD = 1000
ADMIN_ACCESS_NAMESPACE_LABEL = "resource.kubernetes.io/admin-access"
"""The namespace label without which the API server refuses admin-access claims."""

GPU_TYPE = "gpu"
VF_TYPE = "vf"
MONITOR_TYPE = "monitor"
"""The ``type`` attribute: a card or PF, an SR-IOV virtual function, or a PF's monitoring view."""
MONITOR_SUFFIX = "-monitor"
MONITORING_ONLY_TAINT = f"{NAMESPACE}/monitoring-only"
"""Keeps a PF's monitoring view away from every claim that does not tolerate it."""
SRIOV_ROLE = "sriovRole"
"""``pf``/``vf``/``none``: the card's place in SR-IOV (``sriov`` is Intel's bool: VFs possible)."""
PARTITION_OF = "partitionOf"
"""The PF's device name on a PF with VFs enabled and on its VFs; ``""`` on every other card."""
NO_NUMA_NODE = -1
"""``numaNode`` of a card without one NUMA node (sysfs's own ``-1``)."""
DEVICE_NODES_MISSING = "DeviceNodesMissing"
"""A warning: some of the card's device nodes are gone (a container still gets the others)."""
DEVICE_ABSENT = "DeviceAbsent"
"""Critical: none of the card's device nodes is left, so no container can use it."""
DEFAULT_HEALTH_TAINTS = HealthTaints(keys=TaintKeys.CATEGORIES, critical="NoExecute", warning="NoSchedule")
"""Intel's scheme: ``HealthIssues-<categories>``, no value; critical issues evict."""


def device_name(card: GpuCard) -> str:
    """``0000-03-00-0-0x56c0``: the PCI address with ``:`` and ``.`` as ``-``, then the PCI device ID.

    Stable across reboots and DRM renumbering. A card whose directory is not a PCI function keeps its
    DRM name, and one whose device ID cannot be read goes by its address alone.
    """
    address = os.path.basename(card.sysfs_dir)
    if not PCI_ADDRESS.match(address):
        return card.name
    base = address.replace(":", "-").replace(".", "-")
    if not card.device_id:
        return base
    pci_id = card.device_id.lower()
    return f"{base}-{pci_id if pci_id.startswith('0x') else '0x' + pci_id}"


def card_attributes(card: GpuCard, sys_devices: str) -> dict[str, AttributeValue]:
    """What a claim's CEL selectors and ``matchAttribute`` constraints can see of one card.

    ``sys_devices`` is the resolved ``/sys/devices`` the card's PCI placement is read against.
    """
    model = model_of(card.device_id)
    placement = pci_attributes_of_path(card.sysfs_dir, sys_devices)
    pcie_root = str(placement.get(STANDARD_PCIE_ROOT, ""))
    attributes: dict[str, AttributeValue] = {
        "model": model.model,
        "family": model.family,
        "driver": card.driver,
        "sriov": card.vfs_possible,
        "type": VF_TYPE if card.sriov is SriovRole.VF else GPU_TYPE,
        SRIOV_ROLE: card.sriov.value,
        "pciId": card.device_id or "",
        "pciAddress": os.path.basename(card.sysfs_dir) if placement else "",
        "health": "Healthy" if card.info.health is Health.HEALTHY else "Unhealthy",
        "pciRoot": pcie_root.partition(":")[2],
        PARTITION_OF: "",
        NUMA_NODE: NO_NUMA_NODE,
    }
    attributes.update(numa_attributes(card.info.numa_nodes))
    attributes.update(placement)
    return attributes


def card_capacity(card: GpuCard) -> dict[str, Capacity]:
    """``memory`` (0 when unknown) and ``millicores``; a request naming neither takes the whole card."""
    whole = str(MILLICORES_PER_CARD)
    memory = str(card.memory_bytes or 0)
    return {
        "memory": Capacity(memory, RequestPolicy(default=memory)),
        "millicores": Capacity(whole, RequestPolicy(default="0" if card.memory_bytes else whole)),
    }


def card_health_issues(card: GpuCard) -> tuple[HealthIssue, ...]:
    if card.info.health is Health.HEALTHY:
        return ()
    if not card.info.nodes:
        return (HealthIssue(DEVICE_ABSENT, Severity.CRITICAL, card.health_message),)
    return (HealthIssue(DEVICE_NODES_MISSING, Severity.WARNING, card.health_message),)


def admin_edits(card: GpuCard) -> CdiDevice | None:
    """The card's CDI edits plus its MEI device nodes, for admin access; ``None`` without MEI nodes."""
    cdi = card.info.cdi
    if cdi is None or not card.mei_nodes:
        return None
    return replace(cdi, nodes=(*cdi.nodes, *card.mei_nodes))


def with_verdict(device: Device, verdict: Verdict) -> Device:
    """The device as its health sources' verdict leaves it.

    Unhealthy: one issue per category of the deciding findings, at the verdict's severity, so the
    driver's taint policy turns a critical verdict into its critical effect and a warning (counted only
    under ``--ignore-health-warning=false``) into its warning effect. Unknown: the ``health`` attribute
    and the health stream say ``Unknown`` while the device stays schedulable (unless its own scan
    found it unhealthy). Healthy: as scanned.
    """
    if verdict.state is HealthState.UNHEALTHY:
        categories: dict[str, list[str]] = {}
        for finding in verdict.reasons:
            categories.setdefault(finding.category, []).append(finding.describe())
        issues = tuple(
            HealthIssue(category, verdict.severity, "; ".join(messages))
            for category, messages in categories.items()
        )
        message = "; ".join(part for part in (device.health_message, verdict.message) if part)
        return replace(
            device,
            attributes={**device.attributes, "health": HealthState.UNHEALTHY.value},
            health=Health.UNHEALTHY,
            health_message=message,
            health_issues=(*device.health_issues, *issues),
            health_state=HealthState.UNHEALTHY,
        )
    if verdict.state is HealthState.UNKNOWN and device.health is Health.HEALTHY:
        return replace(
            device,
            attributes={**device.attributes, "health": HealthState.UNKNOWN.value},
            health_message=verdict.message or "no health source speaks for this device",
            health_state=HealthState.UNKNOWN,
        )
    return device


def card_device(card: GpuCard, sys_devices: str, verdict: Verdict | None = None) -> Device:
    device = _scanned_device(card, sys_devices)
    return device if verdict is None else with_verdict(device, verdict)


def _scanned_device(card: GpuCard, sys_devices: str) -> Device:
    return Device(
        name=device_name(card),
        attributes=card_attributes(card, sys_devices),
        capacity=card_capacity(card),
        cdi=card.info.cdi,
        health=card.info.health,
        health_message=card.health_message,
        allow_multiple_allocations=True,
        health_issues=card_health_issues(card),
        admin_cdi=admin_edits(card),
        former_name=card.name,
    )


def monitor_device(pf: Device) -> Device:
    """A PF's monitoring view: the PF as published, drawing no counters, for admin access only."""
    return replace(
        pf,
        name=f"{pf.name}{MONITOR_SUFFIX}",
        attributes={**pf.attributes, "type": MONITOR_TYPE},
        consumes_counters=(),
        taints=(*pf.taints, Taint(MONITORING_ONLY_TAINT, "NoSchedule")),
        former_name="",
    )


FUNCTIONS_COUNTER = "functions"


def functions_counter_set(pf: GpuCard) -> str:
    return f"{device_name(pf)}-functions"


def partition_device(
    card: GpuCard,
    sys_devices: str,
    counter_set: str,
    draw: int,
    pf_name: str,
    verdict: Verdict | None = None,
) -> Device:
    """A PF with VFs (``draw`` = all of them) or one of its VFs (``draw`` = 1), exclusively allocated."""
    whole = card_device(card, sys_devices, verdict)
    return replace(
        whole,
        attributes={**whole.attributes, PARTITION_OF: pf_name},
        capacity={name: Capacity(capacity.value) for name, capacity in whole.capacity.items()},
        allow_multiple_allocations=False,
        consumes_counters=(CounterConsumption(counter_set, {FUNCTIONS_COUNTER: str(draw)}),),
    )


Verdicts = Callable[[GpuCard], Verdict | None]
"""A card's verdict from its health sources; ``None`` when no source is on."""


def no_verdicts(card: GpuCard) -> Verdict | None:
    return None


def verdicts_by_address(by_address: Mapping[str, Verdict]) -> Verdicts:
    """Look cards up by PCI address; a card the sources said nothing of is ``Unknown``."""

    def verdict(card: GpuCard) -> Verdict:
        return by_address.get(os.path.basename(card.sysfs_dir), UNKNOWN)

    return verdict


def inventory_of(
    scan: CardScan | str,
    sys_devices: str,
    health_taints: HealthTaints = DEFAULT_HEALTH_TAINTS,
    verdicts: Verdicts = no_verdicts,
) -> Inventory:
    """A card scan as the driver's inventory; an unreadable DRM class directory means no devices."""
    if isinstance(scan, str):
        return Inventory(problems=(f"{scan}; no GPUs published",), health_taints=health_taints)
    partitioned = {card.sysfs_dir: card for card in scan.cards if card.enabled_vfs > 0}
    devices: list[Device] = []
    for card in scan.cards:
        pf = partitioned.get(card.sysfs_dir) or partitioned.get(card.pf_dir)
        if pf is None:
            devices.append(card_device(card, sys_devices, verdicts(card)))
        else:
            draw = pf.enabled_vfs if pf is card else 1
            partition = partition_device(
                card, sys_devices, functions_counter_set(pf), draw, device_name(pf), verdicts(card)
            )
            devices.append(partition)
            if pf is card:
                devices.append(monitor_device(partition))
    counter_sets = tuple(
        CounterSet(functions_counter_set(pf), {FUNCTIONS_COUNTER: str(pf.enabled_vfs)})
        for pf in partitioned.values()
    )
    return Inventory(
        devices=tuple(devices), counter_sets=counter_sets, problems=scan.problems, health_taints=health_taints
    )


@dataclass
class GpuDriverProfile:
    """:class:`~intel_device_plugins.dra.profile.DriverProfile` for Intel GPUs.

    ``options`` are the device plugin's (ID allow/deny lists, by-path mounts); sharing and
    monitoring are claims' business in DRA, so their options are not used here. ``health_taints``
    says how unhealthy cards are tainted; ``health``, when set, adds the hardware's verdicts (xpumd,
    kernel signals) to what the scan finds, and brings the framework's optional hooks: ``monitor``
    runs the xpumd client beside the scans, ``observe_uevent`` feeds the kernel's uevents to it.
    """

    prefix: str = ""
    options: GpuOptions = field(default_factory=GpuOptions)
    health_taints: HealthTaints = DEFAULT_HEALTH_TAINTS
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    cards: CardFactsCache = field(default_factory=CardFactsCache)
    health: GpuHealth | None = None
    parameter_kinds: tuple[ParameterKind, ...] = field(init=False, default=GPU_PARAMETER_KINDS)

    @property
    def driver_name(self) -> str:
        return DRIVER_NAME

    def scan(self) -> Inventory:
        scan = scan_cards(self.prefix, self.options, self.cards, with_memory=True, with_partitioned_pfs=True)
        verdicts: Verdicts = no_verdicts
        if self.health is not None and self.health.settings.enabled and not isinstance(scan, str):
            _, by_address = self.health.verdicts(self.prefix, (card.name for card in scan.cards))
            verdicts = verdicts_by_address(by_address)
        inventory = inventory_of(scan, devices_root(self.prefix or "/"), self.health_taints, verdicts)
        self.problems.report(inventory.problems)
        return inventory

    async def monitor(self, changed: Callable[[], None]) -> None:
        """xpumd's streams until cancelled (returns at once without xpumd); a change rescans at once."""
        if self.health is not None:
            await self.health.monitor(changed)

    def observe_uevent(self, event: Uevent | None) -> None:
        if self.health is not None:
            self.health.observe_uevent(event)

    def safety_rescan_interval(self) -> float:
        """Kernel signals are polled (no uevent announces an AER count)."""
        return self.health.safety_rescan_interval() if self.health is not None else math.inf

    def watch_paths(self) -> Sequence[Path]:
        """As the device plugin: device nodes come and go in ``/dev/dri``, cards in the DRM class."""
        return (prefixed(self.prefix, "/dev/dri"), prefixed(self.prefix, "/sys/class/drm"))

    def uevent_subsystems(self) -> Collection[str]:
        return ("drm", "pci")

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        for result, device in allocated:
            if device.attributes.get("type") == MONITOR_TYPE and not result.admin_access:
                raise ClaimPreparationError(
                    f"device {result.device} of driver {DRIVER_NAME} is a PF's monitoring view, "
                    "only for admin access (tolerating the taint is not enough)"
                )
        edits = default_claim_edits(DRIVER_NAME, claim_uid, allocated)
        return claims_by_path(edits, allocated, str(prefixed(self.prefix, "/dev/dri/by-path")))


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


MONITORING_SELECTOR = (
    f'device.attributes["{DRIVER_NAME}"].{PARTITION_OF} == "" || '
    f'device.attributes["{DRIVER_NAME}"].type == "{MONITOR_TYPE}"'
)
"""What the monitoring claim takes: every card that is no SR-IOV partition, and each PF's monitoring
view (see :func:`monitoring_claim_template`)."""


def monitoring_claim_template(
    namespace: str, name: str = "gpu-monitoring", device_class_name: str = DRIVER_NAME
) -> dict[str, Any]:
    """A ResourceClaimTemplate giving a monitoring pod admin access to every card of its node.

    Admin access sees cards already allocated to others without consuming them; the API server
    accepts it only in a namespace labelled ``resource.kubernetes.io/admin-access: "true"``. It selects
    :data:`MONITORING_SELECTOR`: no device it takes draws SR-IOV counters, which the scheduler checks
    for admin access too, so it is allocatable whatever runs on the node (a monitor reaches the VFs
    through their PF). It tolerates every taint: a monitor watches sick cards and the PFs'
    monitoring views alike. It asks for no memory and no millicores: the scheduler checks a shared
    card's capacity for admin access too, and a request naming none would default to the whole card,
    which does not fit beside a claim already sharing it.
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
                                "selectors": [{"cel": {"expression": MONITORING_SELECTOR}}],
                                "allocationMode": "All",
                                "adminAccess": True,
                                "tolerations": [{"operator": "Exists"}],
                                "capacity": {"requests": {"memory": "0", "millicores": "0"}},
                            },
                        }
                    ]
                }
            }
        },
    }
