"""What a DRA driver publishes and prepares, as plain immutable data.

The types mirror ``resource.k8s.io/v1`` closely enough that turning them into API objects is a pure,
mechanical step (:mod:`intel_device_plugins.dra.slices`), and far enough that a profile never builds
dictionaries by hand: attributes are typed, quantities are strings in Kubernetes' quantity syntax.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from intel_device_plugins.deviceplugin.health.model import HealthState as HealthState
from intel_device_plugins.deviceplugin.health.model import Severity as Severity
from intel_device_plugins.deviceplugin.model import CdiDevice, Health

MAX_DEVICES_PER_SLICE = 128
"""``ResourceSliceSpec.devices`` holds at most this many devices."""
MAX_ATTRIBUTES_AND_CAPACITIES = 32
"""A device carries at most this many attributes and capacities together."""

STANDARD_PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
STANDARD_PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


@dataclass(frozen=True)
class Version:
    """A semantic version attribute (``version`` in the API), e.g. a driver or firmware version."""

    value: str


AttributeValue = str | int | bool | Version
"""``bool`` is tested before ``int`` when rendering: ``True`` is an ``int`` in Python."""


@dataclass(frozen=True)
class RequestPolicy:
    """How much of a shared capacity one allocation may take (``CapacityRequestPolicy``).

    ``default`` is what a request that names no amount consumes; ``valid_range`` (min, max, step; any may
    be ``None``) or ``valid_values`` bound what it may ask for. Quantities use Kubernetes' syntax.
    """

    default: str | None = None
    valid_values: tuple[str, ...] = ()
    valid_range_min: str | None = None
    valid_range_max: str | None = None
    valid_range_step: str | None = None


@dataclass(frozen=True)
class Capacity:
    value: str
    request_policy: RequestPolicy | None = None


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str = "NoSchedule"
    value: str = ""


@dataclass(frozen=True)
class HealthIssue:
    """One thing wrong with a device: ``category`` is a short word naming the kind of issue
    (``DeviceNodesMissing``), ``message`` says what exactly, for people."""

    category: str
    severity: Severity = Severity.CRITICAL
    message: str = ""


class TaintKeys(StrEnum):
    """How an unhealthy device's taint keys are made.

    ``driver``: one key ``<driver>/unhealthy`` with the issues' messages as value. ``categories``: the key
    ``HealthIssues-<categories>`` (the issues' categories, sorted, joined by ``_``) with no value, the
    scheme of Intel's GPU DRA driver, which key-less tolerations and tolerations by its keys tolerate.
    """

    DRIVER = "driver"
    CATEGORIES = "categories"


@dataclass(frozen=True)
class HealthTaints:
    """How a driver taints its unhealthy devices: the key scheme and the effect of each severity.

    The issues of one device are grouped by effect, one taint per effect; an effect of ``None``
    still shows the issue to people without keeping claims off the device.
    """

    keys: TaintKeys = TaintKeys.DRIVER
    critical: str = "NoSchedule"
    warning: str = "NoSchedule"

    def effect(self, severity: Severity) -> str:
        """Critical and failed issues take the critical effect; anything milder the warning one."""
        return self.critical if severity >= Severity.CRITICAL else self.warning


@dataclass(frozen=True)
class CounterConsumption:
    """A partition's draw on a shared counter set (``DeviceCounterConsumption``)."""

    counter_set: str
    counters: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "counters", MappingProxyType(dict(self.counters)))

    def __hash__(self) -> int:
        return hash((self.counter_set, tuple(sorted(self.counters.items()))))


@dataclass(frozen=True)
class CounterSet:
    """Counters shared by overlapping partitions of one physical device (``CounterSet``)."""

    name: str
    counters: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "counters", MappingProxyType(dict(self.counters)))

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.counters.items()))))


V = TypeVar("V")


def _frozen(values: Mapping[str, V] | None) -> Mapping[str, V]:
    return MappingProxyType(dict(values or {}))


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Device:
    """One device of the node's pool.

    ``name`` is a DNS label unique in the pool. ``attributes`` keys are qualified names
    (``model`` is in the driver's domain, ``resource.kubernetes.io/pcieRoot`` is not). ``cdi`` is what a
    container that gets this device receives (its ``name`` is replaced per claim when prepared);
    ``admin_cdi``, when set, is what an admin-access allocation (monitoring) receives instead.
    Unhealthy devices are still published, with a taint, so running claims keep resolving them;
    ``health_issues`` say what is wrong (without them an unhealthy device has one critical issue,
    its ``health_message``).
    """

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=_empty)
    capacity: Mapping[str, Capacity] = field(default_factory=_empty)
    cdi: CdiDevice | None = None
    health: Health = Health.HEALTHY
    health_message: str = ""
    allow_multiple_allocations: bool = False
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[Taint, ...] = ()
    health_issues: tuple[HealthIssue, ...] = ()
    admin_cdi: CdiDevice | None = None
    former_name: str = ""
    """The name an earlier release of the driver published this device under, so claims allocated
    then are still prepared after an upgrade; never published."""
    health_state: HealthState | None = None
    """What the kubelet's health stream reports when a health source says more than ``health`` can:
    ``Unknown`` while the source is down (the device stays schedulable). ``None``: ``health`` as it is."""

    @property
    def reported_health(self) -> HealthState:
        """The health the kubelet's health stream reports."""
        if self.health_state is not None:
            return self.health_state
        return HealthState.HEALTHY if self.health is Health.HEALTHY else HealthState.UNHEALTHY

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen(self.attributes))
        object.__setattr__(self, "capacity", _frozen(self.capacity))

    def __hash__(self) -> int:
        return hash(
            (
                self.name,
                tuple(sorted(self.attributes.items(), key=lambda item: item[0])),
                tuple(sorted(self.capacity.items(), key=lambda item: item[0])),
                self.cdi,
                self.health,
                self.allow_multiple_allocations,
                self.consumes_counters,
                self.taints,
                self.health_issues,
                self.admin_cdi,
                self.former_name,
                self.health_state,
            )
        )


@dataclass(frozen=True)
class Inventory:
    """A scan's result for one driver: the devices, the counter sets partitions draw on, and the problems
    met on the way (one line each, naming the device), as :class:`deviceplugin.model.Discovery` has."""

    devices: tuple[Device, ...] = ()
    counter_sets: tuple[CounterSet, ...] = ()
    problems: tuple[str, ...] = ()
    health_taints: HealthTaints = HealthTaints()
    """How the unhealthy devices among ``devices`` are tainted when published."""

    def by_name(self) -> Mapping[str, Device]:
        return {device.name: device for device in self.devices}

    def for_claims(self) -> Mapping[str, Device]:
        """The devices by the names a claim's allocation may give them: their names and, where no
        device has it as its name, their former names."""
        devices = {device.former_name: device for device in self.devices if device.former_name}
        devices.update(self.by_name())
        return devices


@dataclass(frozen=True)
class AllocatedDevice:
    """One entry of a claim's ``status.allocation.devices.results`` that belongs to this driver."""

    request: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    consumed_capacity: Mapping[str, str] = field(default_factory=_empty)
    config: tuple[object, ...] = ()
    """The decoded opaque parameters that apply to the request, one instance per declared kind
    (``dra/parameters.py``), fields merged from the class's entries, then the claim's (later ones win)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "consumed_capacity", MappingProxyType(dict(self.consumed_capacity)))

    def __hash__(self) -> int:
        return hash((self.request, self.pool, self.device, self.admin_access, self.share_id))


@dataclass(frozen=True)
class ClaimRef:
    """The claim the kubelet names in a prepare or unprepare call."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class PreparedDevice:
    """What prepare answered for one allocated device: its request(s), the CDI IDs it gets and, for a
    share of a device that allows several allocations, the allocation's share ID."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class PreparedClaim:
    """A prepared claim as the checkpoint keeps it: enough to answer a repeated prepare identically and
    to remove exactly what was written (the CDI spec files) when unprepared."""

    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]
    cdi_spec_files: tuple[str, ...] = ()
