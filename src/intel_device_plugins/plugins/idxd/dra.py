"""DSA and IAA work queues as DRA devices (``dsa.intel.com``, ``iaa.intel.com``).

The same discovery as the device plugins (:mod:`.discovery`) decides which queues exist and whether
their device nodes can be trusted; this module only says it in the DRA API's terms. A shared queue
is one device that several claims may hold at once (``allowMultipleAllocations``: the hardware
arbitrates between its clients), a dedicated queue goes to one claim. Only user-type queues are
published: a kernel queue has no device node, so a container could do nothing with it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceNode, Health
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import AllocatedDevice, AttributeValue, Device, Inventory
from intel_device_plugins.dra.placement import PLACEMENT_DEFAULTS, placement_attributes, stable_name
from intel_device_plugins.dra.profile import default_claim_edits
from intel_device_plugins.dra.uniform import with_defaults
from intel_device_plugins.plugins.idxd.discovery import (
    DSA,
    IAA,
    IdxdKind,
    WorkQueue,
    find_work_queues,
    read_attribute,
    user_queue_nodes,
)
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)


def kernel_name(queue: WorkQueue) -> str:
    """``dsa0`` + ``wq0.1`` → ``dsa0-wq0-1`` (a DNS label: no dots): the name when the accelerator's PCI
    function cannot be found."""
    return f"{queue.device}-{queue.name.replace('.', '-')}"


def device_name(queue: WorkQueue, attributes: Mapping[str, AttributeValue]) -> str:
    """``0000-6a-01-0-wq1`` for queue 1 of the accelerator at ``0000:6a:01.0``: the PCI address stays
    where the kernel's ``dsa<N>`` numbering follows probe order (:func:`kernel_name` without one)."""
    return stable_name(attributes, kernel_name(queue), child=f"wq{queue.name.rsplit('.', 1)[-1]}")


QUEUE_DEFAULTS: Mapping[str, AttributeValue] = {"size": 0, "priority": 0, **PLACEMENT_DEFAULTS}
"""What a queue whose ``size`` or ``priority`` cannot be read publishes, so selectors on them never fail."""


def _int_attribute(queue: WorkQueue, name: str, problems: list[str]) -> int | None:
    text = read_attribute(f"{queue.sysfs_dir}/{name}")
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        problems.append(f"{queue.device}/{queue.name}: {name} {text!r} is not a number; attribute left out")
        return None


def cdi_nodes(nodes: Sequence[DeviceNode]) -> tuple[DeviceNode, ...]:
    """The queue's nodes for a CDI spec. Runtimes read a CDI device node's host path without
    following links and refuse a symlink ("not a device node"), so udev's ``/dev/char`` link is
    given with the node it resolves to (discovery checked it is that node) as its host path; the
    container still finds it at its ``/dev/char`` path."""
    return tuple(
        replace(node, host_path=os.path.realpath(node.host_path)) if os.path.islink(node.host_path) else node
        for node in nodes
    )


def queue_device(prefix: str, kind: IdxdKind, queue: WorkQueue, problems: list[str]) -> Device:
    """One user queue as a device: its settings and placement as attributes, its nodes as CDI edits."""
    attributes: dict[str, AttributeValue] = {
        "mode": queue.mode,
        "type": queue.type,
        "device": queue.device,
        "queue": queue.name,
    }
    for name in ("size", "priority"):
        value = _int_attribute(queue, name, problems)
        if value is not None:
            attributes[name] = value
    accelerator_dir = os.path.dirname(queue.sysfs_dir)
    try:
        numa = numa_nodes_of(accelerator_dir, prefix or "/")
    except TopologyError as error:
        problems.append(f"{queue.device}: {error}; no NUMA node published")
        numa = ()
    attributes.update(placement_attributes(prefix, accelerator_dir[len(prefix) :], numa))
    nodes, problem = user_queue_nodes(prefix, kind, queue)
    health = Health.HEALTHY
    if problem:
        problems.append(problem + "; published as unhealthy")
        health = Health.UNHEALTHY
    name = device_name(queue, attributes)
    return Device(
        name=name,
        attributes=attributes,
        cdi=CdiDevice(kind=f"{kind.namespace}/wq", name=name, nodes=cdi_nodes(nodes)),
        health=health,
        health_message=problem,
        allow_multiple_allocations=queue.mode == "shared",
    )


def scan_queue_devices(prefix: str, kind: IdxdKind) -> Inventory:
    """Every enabled user queue of ``kind`` under ``prefix``, as DRA devices."""
    queues, problems = find_work_queues(prefix, kind)
    devices = tuple(queue_device(prefix, kind, queue, problems) for queue in queues if queue.type == "user")
    return with_defaults(Inventory(devices=devices, problems=tuple(problems)), QUEUE_DEFAULTS)


QUEUE_MODES = ("dedicated", "shared")


def work_queue_device_classes(kind: IdxdKind) -> tuple[DeviceClassSpec, ...]:
    """Every queue of the kind, and one class per resource name the device plugin advertises for user
    queues (``wq-user-dedicated``, ``wq-user-shared``), mapped to that extended resource."""
    namespace = kind.namespace
    return (
        DeviceClassSpec(namespace, namespace),
        *(
            DeviceClassSpec(
                f"wq-user-{mode}.{namespace}",
                namespace,
                selector=f'device.attributes["{namespace}"].mode == "{mode}"',
                extended_resource_name=f"{namespace}/wq-user-{mode}",
            )
            for mode in QUEUE_MODES
        ),
    )


DSA_DEVICE_CLASSES = work_queue_device_classes(DSA)
IAA_DEVICE_CLASSES = work_queue_device_classes(IAA)


@dataclass
class WorkQueueDriverProfile:
    """The DRA driver profile for DSA or IAA."""

    kind: IdxdKind
    prefix: str = ""

    @property
    def driver_name(self) -> str:
        return self.kind.namespace

    def scan(self) -> Inventory:
        return scan_queue_devices(self.prefix, self.kind)

    def watch_paths(self) -> Sequence[Path]:
        return (prefixed(self.prefix, self.kind.dev_dir),)

    def uevent_subsystems(self) -> Collection[str]:
        return ("dsa", "idxd", "pci")

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(self.driver_name, claim_uid, allocated)
