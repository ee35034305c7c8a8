"""Typed device tree: what a scanner reports and what the framework serves.

Everything here is plain immutable data, so a scan result can be compared, diffed and tested without
any gRPC or filesystem involved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

MAX_NUMA_NODE = 1023
"""Linux has at most 1024 NUMA nodes (``CONFIG_NODES_SHIFT`` is at most 10); a higher ID is garbage."""

RESOURCE_TYPE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
"""What the kubelet accepts after ``<namespace>/`` in a resource name."""


class Health(StrEnum):
    """Device health as the kubelet understands it (the strings are part of the wire protocol)."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


@dataclass(frozen=True)
class DeviceNode:
    """A device node the container gets; ``permissions`` is any of ``r``, ``w``, ``m``."""

    host_path: str
    container_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class Mount:
    """A bind mount the container gets."""

    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True)
class CdiDevice:
    """One device of a Container Device Interface spec.

    ``kind`` is the fully qualified CDI kind (``intel.cdi.k8s.io/gpu``); the container receives the
    name ``<kind>=<name>``. ``env`` entries are ``KEY=VALUE`` (CDI's form), set in the container.
    """

    kind: str
    name: str
    nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    mount_type: str = "none"
    mount_options: tuple[str, ...] = ("bind", "ro")
    create_runtime_hooks: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    """``KEY=VALUE`` entries the container's environment gets."""

    def __post_init__(self) -> None:
        for entry in self.env:
            if "=" not in entry or entry.startswith("="):
                raise ValueError(f"CDI device {self.kind}={self.name}: env entry {entry!r} is not KEY=VALUE")

    @property
    def qualified_name(self) -> str:
        return f"{self.kind}={self.name}"


def _frozen_map(values: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True)
class DeviceInfo:
    """Everything the framework needs to advertise and allocate one device ID.

    ``numa_nodes`` empty means "no topology known". Several IDs may share one ``DeviceInfo`` (shared
    devices); equality is by value, so re-scans that find the same state produce no update.
    """

    health: Health = Health.HEALTHY
    nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    envs: Mapping[str, str] = field(default_factory=lambda: _frozen_map(None))
    annotations: Mapping[str, str] = field(default_factory=lambda: _frozen_map(None))
    numa_nodes: tuple[int, ...] = ()
    cdi: CdiDevice | None = None

    def __post_init__(self) -> None:
        # Callers pass plain dicts; keep the object truly immutable and comparable.
        object.__setattr__(self, "envs", _frozen_map(self.envs))
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))

    def __hash__(self) -> int:
        # The mappings are unhashable; equal objects still hash equal without them.
        return hash((self.health, self.nodes, self.mounts, self.numa_nodes, self.cdi))


DeviceMap = Mapping[str, DeviceInfo]
"""Device ID → info for one resource type."""

DeviceTree = Mapping[str, DeviceMap]


@dataclass(frozen=True)
class Discovery:
    """A scan's result: the tree to serve and the problems met on the way (one line each, naming the
    device). Discovery never logs; the plugin shell hands the problems to ``problems.ProblemLog``."""

    tree: DeviceTree
    problems: tuple[str, ...] = ()


"""Resource type (resource name without namespace) → device map."""


@dataclass(frozen=True)
class TreeDiff:
    """What changed between two successive scans, per resource type."""

    added: Mapping[str, DeviceMap]
    updated: Mapping[str, DeviceMap]
    removed: frozenset[str]

    @property
    def empty(self) -> bool:
        return not (self.added or self.updated or self.removed)


def diff_trees(old: DeviceTree, new: DeviceTree) -> TreeDiff:
    """Compare two device trees resource by resource.

    A resource type whose device map is not equal by value counts as updated; types that appear
    only in ``new`` are added, types only in ``old`` are removed. A type with an empty device map
    is still a type: it stays served and advertises zero devices.
    """
    added = {kind: devices for kind, devices in new.items() if kind not in old}
    updated = {
        kind: devices for kind, devices in new.items() if kind in old and dict(old[kind]) != dict(devices)
    }
    removed = frozenset(kind for kind in old if kind not in new)
    return TreeDiff(added=added, updated=updated, removed=removed)


@dataclass(frozen=True)
class ContainerAllocation:
    """What one container receives for one resource: the plugin-facing form of ContainerAllocateResponse."""

    nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    envs: Mapping[str, str] = field(default_factory=lambda: _frozen_map(None))
    annotations: Mapping[str, str] = field(default_factory=lambda: _frozen_map(None))
    cdi_devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "envs", _frozen_map(self.envs))
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))

    def __hash__(self) -> int:
        return hash((self.nodes, self.mounts, self.cdi_devices))


class AllocationError(ValueError):
    """An Allocate request the plugin cannot honour; the message names the offending device."""


def default_allocation(devices: DeviceMap, requested_ids: tuple[str, ...] | list[str]) -> ContainerAllocation:
    """Merge the nodes, mounts, envs, annotations and CDI devices of the requested IDs, in request order.

    Shared devices (several IDs of one physical device) contribute their nodes, mounts and CDI names
    once. A later device overrides an earlier one's env or annotation with the same key.
    """
    nodes: list[DeviceNode] = []
    mounts: list[Mount] = []
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    cdi_names: list[str] = []
    for device_id in requested_ids:
        info = devices.get(device_id)
        if info is None:
            raise AllocationError(f"Invalid allocation request with non-existing device {device_id}")
        if info.health is not Health.HEALTHY:
            raise AllocationError(f"Invalid allocation request with unhealthy device {device_id}")
        nodes.extend(node for node in info.nodes if node not in nodes)
        mounts.extend(mount for mount in info.mounts if mount not in mounts)
        envs.update(info.envs)
        annotations.update(info.annotations)
        if info.cdi is not None and info.cdi.qualified_name not in cdi_names:
            cdi_names.append(info.cdi.qualified_name)
    return ContainerAllocation(
        nodes=tuple(nodes),
        mounts=tuple(mounts),
        envs=envs,
        annotations=annotations,
        cdi_devices=tuple(cdi_names),
    )


# ----- checking what a scan returned ---------------------------------------------------------


@dataclass(frozen=True)
class CheckedDevices:
    """A resource's devices as they can be served, and why anything was changed or left out."""

    devices: DeviceMap
    problems: tuple[str, ...] = ()


def _unencodable(texts: Iterable[str]) -> str | None:
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return text
    return None


def _texts(info: DeviceInfo) -> Iterable[str]:
    for node in info.nodes:
        yield from (node.host_path, node.container_path, node.permissions)
    for mount in info.mounts:
        yield from (mount.host_path, mount.container_path)
    yield from info.envs.keys()
    yield from info.envs.values()
    yield from info.annotations.keys()
    yield from info.annotations.values()
    if info.cdi is not None:
        yield info.cdi.qualified_name


def _bad_numa(nodes: tuple[int, ...]) -> list[object]:
    return [n for n in nodes if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_NUMA_NODE]


def _check_info(label: str, info: DeviceInfo) -> tuple[DeviceInfo | None, str]:
    if not isinstance(info, DeviceInfo) or not isinstance(info.health, Health):
        return None, f"{label}: not a valid device description; left out"
    bad_text = _unencodable(_texts(info))
    if bad_text is not None:
        return None, f"{label}: {bad_text!r} is not valid UTF-8; left out"
    bad_numa = _bad_numa(info.numa_nodes)
    if bad_numa:
        problem = (
            f"{label}: NUMA node(s) {', '.join(map(repr, bad_numa))} out of range (0 to {MAX_NUMA_NODE});"
            " no NUMA topology reported"
        )
        return replace(info, numa_nodes=()), problem
    return info, ""


def check_devices(resource_name: str, devices: DeviceMap) -> CheckedDevices:
    """Make a scanned device map safe to serve: every value must fit the kubelet's protocol.

    A device whose NUMA nodes are out of range keeps serving without a NUMA hint; a device with an ID
    or a text that cannot be sent (empty, or not encodable as UTF-8) is left out. Each case is one
    problem line naming the device. Devices sharing one ``DeviceInfo`` are checked once.
    """
    problems: list[str] = []
    checked: dict[str, DeviceInfo] = {}
    seen: dict[int, tuple[DeviceInfo | None, str]] = {}
    for device_id, info in devices.items():
        if not isinstance(device_id, str) or not device_id or _unencodable((device_id,)) is not None:
            problems.append(f"{resource_name}: device ID {device_id!r} cannot be advertised; left out")
            continue
        outcome = seen.get(id(info))
        if outcome is None:
            outcome = seen[id(info)] = _check_info(f"{resource_name} device {device_id}", info)
        good, problem = outcome
        if problem:
            problems.append(problem)
        if good is not None:
            checked[device_id] = good
    if not problems:
        return CheckedDevices(devices)
    return CheckedDevices(MappingProxyType(checked), tuple(dict.fromkeys(problems)))
