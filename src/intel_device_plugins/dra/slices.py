"""The node's ResourceSlices as a pure function of the inventory, and the API calls that get them there.

:func:`desired_slices` turns an :class:`~intel_device_plugins.dra.model.Inventory` into ``resource.k8s.io/v1``
ResourceSlice objects (plain dicts, as the API returns them): one pool named after the node, counter sets in
slices of their own, devices packed into slices within the API's limits, unhealthy devices tainted, every
slice owned by the Node so the garbage collector removes it with the node. Everything the API server would
refuse is refused here first, with the device and field named, so a bad scan never turns into a loop of
rejected writes.

:func:`plan` compares those with the slices the API server holds and answers the fewest calls that make
them equal. The pool generation follows the rule of the Go reference publisher
(``k8s.io/dynamic-resource-allocation/resourceslice``): a consumer must ignore slices older than the pool's
highest generation, so a change that takes several calls (a new slice, or edits to more than one) bumps the
generation in every slice, while a change confined to one slice is a single update at the same generation.
Nothing changed means an empty plan.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.model import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_DEVICES_PER_SLICE,
    AttributeValue,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    HealthIssue,
    HealthTaints,
    Inventory,
    Taint,
    TaintKeys,
    Version,
)
from intel_device_plugins.kube.quantity import parse_quantity

API_VERSION: Final = "resource.k8s.io/v1"
DRIVER_LABEL: Final = "deviceplugin.intel.com/dra-driver"
"""Names the driver on each of its slices, for people and tools (the publisher selects by fields)."""
UNHEALTHY_TAINT: Final = "unhealthy"
"""The taint key's name part under :attr:`TaintKeys.DRIVER`; the key is ``<driver>/unhealthy``."""
HEALTH_ISSUES_TAINT: Final = "HealthIssues"
"""The taint key's start under :attr:`TaintKeys.CATEGORIES`: ``HealthIssues-<categories>``."""
UNHEALTHY_CATEGORY: Final = "Unhealthy"
"""The category of an unhealthy device's one issue when its driver names none."""

MAX_DEVICES_WITH_ADVANCED_FEATURES: Final = 64
"""A slice holding a device with taints or counter consumptions holds at most this many devices."""
MAX_COUNTER_SETS_PER_SLICE: Final = 8
MAX_COUNTERS: Final = 32
MAX_CONSUMPTIONS_PER_DEVICE: Final = 2
MAX_TAINTS_PER_DEVICE: Final = 16
MAX_ATTRIBUTE_VALUE_LENGTH: Final = 64
MAX_NAME_LENGTH: Final = 253
MAX_DRIVER_LENGTH: Final = 63
TAINT_EFFECTS: Final = frozenset({"None", "NoSchedule", "NoExecute"})
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_LABEL_NAME: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE: Final = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_NOT_IN_LABEL_VALUE: Final = re.compile(r"[^-A-Za-z0-9_.]+")
_SEMVER: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


class SliceError(ValueError):
    """An inventory the API server would refuse; the message names the device and the field."""


# --- names ---------------------------------------------------------------------------------------------


def _is_subdomain(value: str, limit: int = MAX_NAME_LENGTH) -> bool:
    return 0 < len(value) <= limit and bool(_DNS_SUBDOMAIN.match(value))


def check_driver_and_node(driver: str, node_name: str) -> None:
    if not _is_subdomain(driver, MAX_DRIVER_LENGTH):
        raise SliceError(
            f"driver name {driver!r} is not a DNS subdomain of at most {MAX_DRIVER_LENGTH} characters"
        )
    if not _is_subdomain(node_name):
        raise SliceError(
            f"node name {node_name!r} is not a DNS subdomain of at most {MAX_NAME_LENGTH} characters"
        )


def slice_name_prefix(driver: str, node_name: str) -> str:
    """``<node>-<driver with dots as dashes>-``; a node name too long for that is cut and given a hash of
    itself, so names stay unique per node and within the API's 253 characters."""
    tail = f"-{driver.replace('.', '-')}-"
    room = MAX_NAME_LENGTH - len(tail) - 8  # up to 8 characters for the index
    if len(node_name) <= room:
        return f"{node_name}{tail}"
    import hashlib  # here: rare, and hashlib loads OpenSSL's digests (about 0.6 MiB resident)

    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    head = node_name[: room - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}{tail}"


def slice_name(driver: str, node_name: str, index: int) -> str:
    return f"{slice_name_prefix(driver, node_name)}{index}"


def _label_text(text: str) -> str:
    """``text`` trimmed to what a label name or value may hold: 63 characters of ``[-A-Za-z0-9_.]``,
    alphanumeric ends."""
    value = _NOT_IN_LABEL_VALUE.sub("-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def unhealthy_taint(driver: str, message: str, effect: str = "NoSchedule") -> Taint:
    """``<driver>/unhealthy`` with the health message as value (trimmed to a label value)."""
    return Taint(key=f"{driver}/{UNHEALTHY_TAINT}", effect=effect, value=_label_text(message))


def health_issues_taint(categories: Iterable[str], effect: str) -> Taint:
    """``HealthIssues-<categories sorted, joined by _>`` with no value; the key is cut to a label name."""
    joined = "_".join(sorted(set(categories)))
    return Taint(key=_label_text(f"{HEALTH_ISSUES_TAINT}-{joined}"), effect=effect)


def device_issues(device: Device) -> tuple[HealthIssue, ...]:
    """What is wrong with a device: its own issues, or for an unhealthy device without any, one critical
    issue carrying its health message."""
    if device.health_issues:
        return device.health_issues
    if device.health == Health.HEALTHY:
        return ()
    return (HealthIssue(UNHEALTHY_CATEGORY, message=device.health_message or "unhealthy"),)


def health_taints(driver: str, device: Device, policy: HealthTaints) -> tuple[Taint, ...]:
    """The taints ``policy`` gives a device's issues: one per effect, in the order the effects first
    appear."""
    by_effect: dict[str, list[HealthIssue]] = {}
    for issue in device_issues(device):
        by_effect.setdefault(policy.effect(issue.severity), []).append(issue)
    taints: list[Taint] = []
    for effect, issues in by_effect.items():
        if policy.keys is TaintKeys.CATEGORIES:
            taints.append(health_issues_taint((issue.category for issue in issues), effect))
        else:
            message = "; ".join(issue.message or issue.category for issue in issues)
            taints.append(unhealthy_taint(driver, message, effect))
    return tuple(taints)


# --- checks --------------------------------------------------------------------------------------------


def _check_qualified_name(name: str, where: str) -> None:
    domain, slash, ident = name.rpartition("/")
    if slash and not _is_subdomain(domain, 63):
        raise SliceError(
            f"{where}: {name!r} has a domain that is not a DNS subdomain of at most 63 characters"
        )
    if not _C_IDENTIFIER.match(ident):
        raise SliceError(f"{where}: {name!r} does not end in a C identifier of at most 32 characters")


def _quantity(value: str, where: str) -> int:
    try:
        return parse_quantity(value)
    except ValueError:
        raise SliceError(f"{where}: {value!r} is not a Kubernetes quantity") from None


def _check_counters(counters: Mapping[str, str], where: str) -> None:
    if not counters:
        raise SliceError(f"{where}: no counters")
    if len(counters) > MAX_COUNTERS:
        raise SliceError(f"{where}: {len(counters)} counters, at most {MAX_COUNTERS} allowed")
    for name, value in counters.items():
        if not _DNS_LABEL.match(name):
            raise SliceError(f"{where}: counter name {name!r} is not a DNS label")
        _quantity(value, f"{where}: counter {name}")


def _check_attribute(name: str, value: AttributeValue, where: str) -> None:
    _check_qualified_name(name, where)
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise SliceError(f"{where}: attribute {name} = {value} does not fit in 64 bits")
    elif isinstance(value, Version):
        if len(value.value) > MAX_ATTRIBUTE_VALUE_LENGTH or not _SEMVER.match(value.value):
            raise SliceError(
                f"{where}: attribute {name} = {value.value!r} is not a semantic version"
                " of at most 64 characters"
            )
    elif len(value) > MAX_ATTRIBUTE_VALUE_LENGTH:
        raise SliceError(f"{where}: attribute {name} is {len(value)} characters long, at most 64 allowed")


def _check_capacity(name: str, capacity: Capacity, device: Device, where: str) -> None:
    _check_qualified_name(name, where)
    _quantity(capacity.value, f"{where}: capacity {name}")
    policy = capacity.request_policy
    if policy is None:
        return
    if not device.allow_multiple_allocations:
        raise SliceError(
            f"{where}: capacity {name} has a request policy,"
            " but the device does not allow multiple allocations"
        )
    field = f"{where}: capacity {name} requestPolicy"
    for q in (
        policy.default,
        policy.valid_range_min,
        policy.valid_range_max,
        policy.valid_range_step,
        *policy.valid_values,
    ):
        if q is not None:
            _quantity(q, field)
    has_range = any(
        v is not None for v in (policy.valid_range_min, policy.valid_range_max, policy.valid_range_step)
    )
    if policy.valid_values and has_range:
        raise SliceError(f"{field}: both validValues and validRange are set")
    if has_range and policy.valid_range_min is None:
        raise SliceError(f"{field}: validRange needs a minimum")
    if len(policy.valid_values) > 10:
        raise SliceError(f"{field}: {len(policy.valid_values)} validValues, at most 10 allowed")


def _check_taint(taint: Taint, where: str) -> None:
    prefix, slash, name = taint.key.rpartition("/")
    if (slash and not _is_subdomain(prefix)) or not _LABEL_NAME.match(name):
        raise SliceError(f"{where}: taint key {taint.key!r} is not a label name")
    if not _LABEL_VALUE.match(taint.value):
        raise SliceError(f"{where}: taint {taint.key} value {taint.value!r} is not a label value")
    if taint.effect not in TAINT_EFFECTS:
        raise SliceError(
            f"{where}: taint {taint.key} effect {taint.effect!r} is not one of {sorted(TAINT_EFFECTS)}"
        )


def _check_device(device: Device, counter_sets: Mapping[str, CounterSet], taints: Sequence[Taint]) -> None:
    where = f"device {device.name!r}"
    if not _DNS_LABEL.match(device.name):
        raise SliceError(f"{where}: the name is not a DNS label")
    total = len(device.attributes) + len(device.capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise SliceError(
            f"{where}: {total} attributes and capacities, at most {MAX_ATTRIBUTES_AND_CAPACITIES} allowed"
        )
    clash = set(device.attributes) & set(device.capacity)
    if clash:
        raise SliceError(f"{where}: {sorted(clash)} are both attributes and capacities")
    for name, value in device.attributes.items():
        _check_attribute(name, value, where)
    for name, capacity in device.capacity.items():
        _check_capacity(name, capacity, device, where)
    if len(device.consumes_counters) > MAX_CONSUMPTIONS_PER_DEVICE:
        raise SliceError(
            f"{where}: consumes from {len(device.consumes_counters)} counter sets, at most 2 allowed"
        )
    seen: set[str] = set()
    for consumption in device.consumes_counters:
        known = counter_sets.get(consumption.counter_set)
        if known is None:
            raise SliceError(
                f"{where}: consumes from counter set {consumption.counter_set!r},"
                " which the inventory does not have"
            )
        if consumption.counter_set in seen:
            raise SliceError(f"{where}: consumes from counter set {consumption.counter_set!r} twice")
        seen.add(consumption.counter_set)
        _check_counters(consumption.counters, f"{where} counter set {consumption.counter_set}")
        unknown = set(consumption.counters) - set(known.counters)
        if unknown:
            raise SliceError(
                f"{where}: counters {sorted(unknown)} are not in counter set {consumption.counter_set!r}"
            )
    if len(taints) > MAX_TAINTS_PER_DEVICE:
        raise SliceError(f"{where}: {len(taints)} taints, at most {MAX_TAINTS_PER_DEVICE} allowed")
    for taint in taints:
        _check_taint(taint, where)


# --- rendering -----------------------------------------------------------------------------------------


def _attribute(value: AttributeValue) -> dict[str, Any]:
    if isinstance(value, bool):  # before int: True is an int
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.value}
    return {"string": value}


def _capacity(capacity: Capacity) -> dict[str, Any]:
    out: dict[str, Any] = {"value": capacity.value}
    policy = capacity.request_policy
    if policy is not None:
        rendered: dict[str, Any] = {}
        if policy.default is not None:
            rendered["default"] = policy.default
        if policy.valid_values:
            rendered["validValues"] = list(policy.valid_values)
        bounds = {
            key: value
            for key, value in (
                ("min", policy.valid_range_min),
                ("max", policy.valid_range_max),
                ("step", policy.valid_range_step),
            )
            if value is not None
        }
        if bounds:
            rendered["validRange"] = bounds
        out["requestPolicy"] = rendered
    return out


def _counters(counters: Mapping[str, str]) -> dict[str, Any]:
    return {name: {"value": value} for name, value in sorted(counters.items())}


def _taint(taint: Taint) -> dict[str, Any]:
    out = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    return out


def _device(device: Device, taints: Sequence[Taint]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": device.name}
    if device.attributes:
        out["attributes"] = {name: _attribute(value) for name, value in sorted(device.attributes.items())}
    if device.capacity:
        out["capacity"] = {name: _capacity(value) for name, value in sorted(device.capacity.items())}
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    if device.consumes_counters:
        out["consumesCounters"] = [_consumption(c) for c in device.consumes_counters]
    if taints:
        out["taints"] = [_taint(t) for t in taints]
    return out


def _consumption(consumption: CounterConsumption) -> dict[str, Any]:
    return {"counterSet": consumption.counter_set, "counters": _counters(consumption.counters)}


def _device_taints(driver: str, device: Device, policy: HealthTaints) -> tuple[Taint, ...]:
    return (*device.taints, *health_taints(driver, device, policy))


def _natural(name: str) -> tuple[tuple[int, str], ...]:
    """``card2`` before ``card10``: slices list devices as people count them."""
    return tuple((int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", name))


def _pack(
    devices: Sequence[tuple[Device, tuple[Taint, ...]]],
) -> list[list[tuple[Device, tuple[Taint, ...]]]]:
    """Devices in order, into as few slices as the limits allow: 128 a slice, 64 once a device in it has
    taints or consumes counters. Greedy and order-preserving, so a change late in the list leaves the
    earlier slices as they were."""
    chunks: list[list[tuple[Device, tuple[Taint, ...]]]] = []
    current: list[tuple[Device, tuple[Taint, ...]]] = []
    advanced = False
    for entry in devices:
        device, taints = entry
        entry_advanced = bool(taints or device.consumes_counters)
        limit = MAX_DEVICES_WITH_ADVANCED_FEATURES if (advanced or entry_advanced) else MAX_DEVICES_PER_SLICE
        if len(current) + 1 > limit:
            chunks.append(current)
            current, advanced = [], False
        current.append(entry)
        advanced = advanced or entry_advanced
    if current:
        chunks.append(current)
    return chunks


def desired_slices(
    driver: str, node_name: str, node_uid: str, inventory: Inventory, generation: int = 0
) -> tuple[dict[str, Any], ...]:
    """The ResourceSlices that publish ``inventory`` for ``node_name``, counter sets first, then devices by
    name. ``generation`` is the lowest pool generation wanted; :func:`plan` raises it past what the API
    holds. A node without devices still gets one empty slice: the pool exists, it is just empty."""
    check_driver_and_node(driver, node_name)
    if not node_uid:
        raise SliceError(f"node {node_name}: no UID for the slices' owner reference")
    counter_sets: dict[str, CounterSet] = {}
    for cs in inventory.counter_sets:
        where = f"counter set {cs.name!r}"
        if not _DNS_LABEL.match(cs.name):
            raise SliceError(f"{where}: the name is not a DNS label")
        if cs.name in counter_sets:
            raise SliceError(f"{where}: listed twice")
        _check_counters(cs.counters, where)
        counter_sets[cs.name] = cs
    devices = sorted(inventory.devices, key=lambda d: (_natural(d.name), d.name))
    entries: list[tuple[Device, tuple[Taint, ...]]] = []
    for i, device in enumerate(devices):
        if i and devices[i - 1].name == device.name:
            raise SliceError(f"device {device.name!r}: listed twice in the pool")
        taints = _device_taints(driver, device, inventory.health_taints)
        _check_device(device, counter_sets, taints)
        entries.append((device, taints))

    specs: list[dict[str, Any]] = []
    sets = [counter_sets[name] for name in sorted(counter_sets)]
    for start in range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE):
        chunk = sets[start : start + MAX_COUNTER_SETS_PER_SLICE]
        specs.append(
            {"sharedCounters": [{"name": cs.name, "counters": _counters(cs.counters)} for cs in chunk]}
        )
    for packed in _pack(entries):
        specs.append({"devices": [_device(device, taints) for device, taints in packed]})
    if not specs:
        specs.append({"devices": []})

    owner = {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
    pool = {"name": node_name, "generation": generation, "resourceSliceCount": len(specs)}
    return tuple(
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "name": slice_name(driver, node_name, index),
                "labels": {DRIVER_LABEL: driver},
                "ownerReferences": [owner],
            },
            "spec": {"driver": driver, "nodeName": node_name, "pool": dict(pool), **content},
        }
        for index, content in enumerate(specs)
    )


# --- comparison and planning ---------------------------------------------------------------------------


def _drop_empty(value: Any) -> Any:
    """Absent, null, ``{}`` and ``[]`` mean the same to the API; compare them as the same."""
    if type(value) is dict:  # API objects are plain JSON; exact type tests keep plans cheap
        out = {}
        for k, v in value.items():
            v = _drop_empty(v)
            if v is not None and v != {} and v != []:
                out[k] = v
        return out
    if type(value) is list:
        return [_drop_empty(v) for v in value]
    return value


@functools.lru_cache(maxsize=1024)
def _parsed(value: str) -> int | str:
    """Parsing is most of a plan's cost, and a pool repeats the same few quantities."""
    try:
        return parse_quantity(value)
    except ValueError:
        return value


def _q(value: Any) -> Any:
    """A quantity by value: the API server writes ``1000`` back as ``1k``."""
    return None if value is None else _parsed(str(value))


def _canonical_counters(counters: Any) -> Any:
    if not isinstance(counters, Mapping):
        return counters
    return {
        name: {**c, "value": _q(c.get("value"))} if isinstance(c, Mapping) else c
        for name, c in counters.items()
    }


def _canonical_device(device: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(device)
    capacity = out.get("capacity")
    if isinstance(capacity, Mapping):
        canon: dict[str, Any] = {}
        for name, cap in capacity.items():
            cap = dict(cap) if isinstance(cap, Mapping) else cap
            if isinstance(cap, dict):
                cap["value"] = _q(cap.get("value"))
                policy = cap.get("requestPolicy")
                if isinstance(policy, Mapping):
                    policy = dict(policy)
                    policy["default"] = _q(policy.get("default"))
                    if isinstance(policy.get("validValues"), list):
                        policy["validValues"] = [_q(v) for v in policy["validValues"]]
                    if isinstance(policy.get("validRange"), Mapping):
                        policy["validRange"] = {k: _q(v) for k, v in policy["validRange"].items()}
                    cap["requestPolicy"] = policy
            canon[name] = cap
        out["capacity"] = canon
    consumes = out.get("consumesCounters")
    if isinstance(consumes, list):
        out["consumesCounters"] = [
            {**c, "counters": _canonical_counters(c.get("counters"))} if isinstance(c, Mapping) else c
            for c in consumes
        ]
    taints = out.get("taints")
    if isinstance(taints, list):  # the API server stamps timeAdded; it is not ours to compare
        out["taints"] = [
            {k: v for k, v in t.items() if k != "timeAdded"} if isinstance(t, Mapping) else t for t in taints
        ]
    return out


def canonical_spec(spec: Mapping[str, Any]) -> Any:
    """A slice's spec in a form where equal content compares equal, however the API server spelled it."""
    out = dict(spec)
    if isinstance(out.get("devices"), list):
        out["devices"] = [_canonical_device(d) if isinstance(d, Mapping) else d for d in out["devices"]]
    if isinstance(out.get("sharedCounters"), list):
        out["sharedCounters"] = [
            {**cs, "counters": _canonical_counters(cs.get("counters"))} if isinstance(cs, Mapping) else cs
            for cs in out["sharedCounters"]
        ]
    return _drop_empty(out)


def _same_metadata(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    meta, want = existing.get("metadata") or {}, desired["metadata"]
    labels = meta.get("labels") or {}
    if any(labels.get(k) != v for k, v in want["labels"].items()):
        return False
    return bool(_drop_empty(list(meta.get("ownerReferences") or [])) == _drop_empty(want["ownerReferences"]))


def _generation(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj["spec"]["pool"]["generation"])
    except (KeyError, TypeError, ValueError):
        return 0


def _with_generation(obj: Mapping[str, Any], generation: int) -> dict[str, Any]:
    spec = dict(obj["spec"])
    spec["pool"] = {**spec["pool"], "generation": generation}
    return {**obj, "spec": spec}


def _keep_taint_times(existing: Mapping[str, Any], desired_spec: dict[str, Any]) -> dict[str, Any]:
    """Carry over the time the API server stamped on a taint that stays, as the Go publisher does: sent
    without it, the API server would stamp the time of this update instead."""
    old = {
        d.get("name"): d for d in (existing.get("spec") or {}).get("devices") or [] if isinstance(d, Mapping)
    }
    devices = []
    for device in desired_spec.get("devices") or []:
        before = old.get(device["name"])
        if before is None or "taints" not in device:
            devices.append(device)
            continue
        taints = []
        for taint in device["taints"]:
            stamped = next(
                (
                    t.get("timeAdded")
                    for t in before.get("taints") or []
                    if isinstance(t, Mapping)
                    and (t.get("key"), t.get("value", ""), t.get("effect"))
                    == (taint["key"], taint.get("value", ""), taint["effect"])
                    and t.get("timeAdded")
                ),
                None,
            )
            taints.append({**taint, "timeAdded": stamped} if stamped else taint)
        devices.append({**device, "taints": taints})
    return {**desired_spec, "devices": devices} if "devices" in desired_spec else desired_spec


@dataclass(frozen=True)
class SlicePlan:
    """The calls that turn what the API holds into what is desired, in the order to make them: deletes
    first (devices that are gone must go even if the rest fails), then updates, then creates."""

    generation: int
    deletes: tuple[str, ...] = ()
    """Names of slices to delete."""
    updates: tuple[dict[str, Any], ...] = ()
    creates: tuple[dict[str, Any], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.updates or self.creates)

    @property
    def calls(self) -> int:
        return len(self.deletes) + len(self.updates) + len(self.creates)


def plan(existing: Iterable[Mapping[str, Any]], desired: Sequence[Mapping[str, Any]]) -> SlicePlan:
    """The fewest calls from ``existing`` (the driver's slices for this node, as listed) to ``desired``.

    An existing slice matches the desired slice of the same name and pool; any other is deleted. Updates
    carry the existing ``resourceVersion``, so a concurrent edit makes them fail rather than be lost.
    """
    by_name = {d["metadata"]["name"]: d for d in desired}
    pool_name = desired[0]["spec"]["pool"]["name"] if desired else None
    current = [e for e in existing if isinstance(e.get("metadata"), Mapping)]
    top = max((_generation(e) for e in current), default=0)
    matched: dict[str, Mapping[str, Any]] = {}
    deletes: list[str] = []
    for obj in sorted(current, key=lambda e: str(e["metadata"].get("name"))):
        name = str(obj["metadata"].get("name"))
        pool = (obj.get("spec") or {}).get("pool") or {}
        if name in by_name and name not in matched and pool.get("name") == pool_name:
            matched[name] = obj
        else:
            deletes.append(name)

    def content(spec: Mapping[str, Any]) -> Any:
        return canonical_spec({k: v for k, v in spec.items() if k != "pool"})

    # Canonical forms once per slice: comparing is most of a plan's cost.
    same_content = {
        name: content(obj.get("spec") or {}) == content(by_name[name]["spec"])
        and _same_metadata(obj, by_name[name])
        for name, obj in matched.items()
    }

    def differs(name: str, generation: int) -> bool:
        pool = _drop_empty(dict((matched[name].get("spec") or {}).get("pool") or {}))
        want = {**by_name[name]["spec"]["pool"], "generation": generation}
        return not same_content[name] or pool != want

    wanted = max((_generation(d) for d in desired), default=0)
    new = [name for name in by_name if name not in matched]
    if wanted > top:
        generation = wanted
    elif not new and sum(differs(name, top) for name in matched) <= 1:
        generation = top  # one update at most: the pool is never seen half old, half new
    else:
        generation = top + 1
    updates = []
    for name, obj in matched.items():
        if differs(name, generation):
            want = _with_generation(by_name[name], generation)
            meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
            labels = {**(meta.get("labels") or {}), **want["metadata"]["labels"]}
            updates.append(
                {
                    **want,
                    "metadata": {
                        **meta,
                        "labels": labels,
                        "ownerReferences": want["metadata"]["ownerReferences"],
                    },
                    "spec": _keep_taint_times(obj, want["spec"]),
                }
            )
    creates = [_with_generation(by_name[name], generation) for name in new]
    return SlicePlan(generation, tuple(deletes), tuple(updates), tuple(creates))
