"""Read a ResourceClaim's allocation for one driver: pure, on the claim as the API server returns it.

The kubelet names a claim by namespace, name and UID; the driver fetches the object and must check it
is the same claim (a claim deleted and re-created under the same name has a new UID) and that it is
allocated. Only results of this driver in this node's pool are ours; a result of this driver in any
other pool cannot be prepared here. Every error names the claim and the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from intel_device_plugins.dra.model import AllocatedDevice, ClaimRef
from intel_device_plugins.dra.parameters import ParameterError, ParameterKind, decode, merged

MAX_RESULTS = 1024
"""More results than any claim can hold (32 requests of at most 32 devices each); a bound on input."""
CLAIM_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,127}$")
"""What a claim UID may look like here: it becomes part of file and CDI device names."""
DEVICE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A device name is a DNS label (``resource.k8s.io`` validation); it becomes part of CDI names."""


class ClaimError(ValueError):
    """A claim that cannot be prepared as given; the message names the claim and the field."""


def check_claim_uid(uid: str) -> str:
    """``uid`` if it is safe to use in a file name, else :class:`ClaimError` naming it."""
    if not CLAIM_UID.match(uid):
        raise ClaimError(f"claim UID {uid!r} is not a valid UID")
    return uid


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ClaimError(f"{where} is not an object")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ClaimError(f"{where} is missing or not a string")
    return value


def base_request(name: str) -> str:
    """``gpu/large`` (a subrequest of a ``firstAvailable`` request) → ``gpu``: the kubelet knows requests
    by their base name only."""
    return name.split("/", 1)[0]


def _quantities(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    found = _mapping(value, where)
    out: dict[str, str] = {}
    for key, quantity in found.items():
        if not isinstance(quantity, (str, int)) or isinstance(quantity, bool):
            raise ClaimError(f"{where}.{key} is not a quantity")
        out[str(key)] = str(quantity)
    return out


def _result(entry: object, where: str) -> AllocatedDevice:
    item = _mapping(entry, where)
    device = _string(item.get("device"), f"{where}.device")
    if not DEVICE_NAME.match(device):
        raise ClaimError(f"{where}.device {device!r} is not a DNS label")
    share_id = item.get("shareID")
    if share_id is not None and not isinstance(share_id, str):
        raise ClaimError(f"{where}.shareID is not a string")
    admin = item.get("adminAccess")
    if admin is not None and not isinstance(admin, bool):
        raise ClaimError(f"{where}.adminAccess is not a boolean")
    return AllocatedDevice(
        request=base_request(_string(item.get("request"), f"{where}.request")),
        pool=_string(item.get("pool"), f"{where}.pool"),
        device=device,
        admin_access=bool(admin),
        share_id=share_id,
        consumed_capacity=_quantities(item.get("consumedCapacity"), f"{where}.consumedCapacity"),
    )


@dataclass(frozen=True)
class _ConfigEntry:
    """One entry of ``status.allocation.devices.config`` that concerns this driver."""

    rank: int
    """0 for the class's entries, 1 for the claim's: class defaults come first."""
    requests: frozenset[str]
    """The requests it applies to; empty for all."""
    where: str
    """Its JSON path in the claim."""
    parameters: object
    opaque: bool

    def applies_to(self, full_request: str, request: str) -> bool:
        return not self.requests or full_request in self.requests or request in self.requests


def _config_entries(devices: Mapping[str, Any], driver: str, label: str) -> list[_ConfigEntry]:
    """This driver's entries of ``status.allocation.devices.config`` (opaque ones addressed to it, and
    every non-opaque one, which no driver here understands), the class's entries before the claim's."""
    where = f"{label}: status.allocation.devices"
    entries = devices.get("config") or []
    if not isinstance(entries, list):
        raise ClaimError(f"{where}.config is not a list")
    found: list[_ConfigEntry] = []
    for index, entry in enumerate(entries):
        at = f"{where}.config[{index}]"
        item = _mapping(entry, at)
        opaque = item.get("opaque")
        if opaque is not None and _mapping(opaque, f"{at}.opaque").get("driver") != driver:
            continue
        requests = item.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ClaimError(f"{at}.requests is not a list of names")
        rank = 0 if item.get("source") == "FromClass" else 1
        parameters = opaque.get("parameters") if opaque is not None else None
        path = f"status.allocation.devices.config[{index}]"
        found.append(_ConfigEntry(rank, frozenset(requests), path, parameters, opaque is not None))
    found.sort(key=lambda entry: entry.rank)  # stable: the API's order within each source is kept
    return found


def _request_config(
    entries: Sequence[_ConfigEntry],
    kinds: Sequence[ParameterKind],
    driver: str,
    full_request: str,
    request: str,
    label: str,
) -> tuple[object, ...]:
    """The merged, decoded parameters of the entries that apply to one request; an error names the
    claim, the request and the field."""
    decoded = []
    for entry in entries:
        if not entry.applies_to(full_request, request):
            continue
        if not entry.opaque:
            raise ClaimError(
                f"{label}: request {full_request}: {entry.where}: only opaque parameters are supported"
            )
        try:
            decoded.append(decode(kinds, driver, entry.parameters, f"{entry.where}.opaque.parameters"))
        except ParameterError as error:
            raise ClaimError(f"{label}: request {full_request}: {error}") from None
    return merged(kinds, decoded)


def allocated_devices(
    claim: Mapping[str, Any],
    ref: ClaimRef,
    driver: str,
    pool: str,
    kinds: Sequence[ParameterKind] = (),
) -> tuple[AllocatedDevice, ...]:
    """The results of ``claim``'s allocation that ``driver`` prepares in ``pool``, in allocation order.

    ``ref`` is what the kubelet asked for; the claim must be that one (same UID) and be allocated. Each
    result carries the parameters of the configuration entries for its request, decoded as ``kinds``
    (the driver's declared parameter kinds) say; entries these do not accept fail the claim.
    """
    label = f"ResourceClaim {ref.namespace}/{ref.name}"
    check_claim_uid(ref.uid)
    metadata = _mapping(claim.get("metadata"), f"{label}: metadata")
    uid = metadata.get("uid")
    if uid != ref.uid:
        raise ClaimError(
            f"{label}: metadata.uid is {uid!r}, the kubelet asked for {ref.uid!r} (the claim was replaced)"
        )
    status = claim.get("status") or {}
    allocation = _mapping(status, f"{label}: status").get("allocation")
    if allocation is None:
        raise ClaimError(f"{label}: status.allocation is missing (the claim is not allocated)")
    devices = _mapping(allocation, f"{label}: status.allocation").get("devices") or {}
    results = _mapping(devices, f"{label}: status.allocation.devices").get("results") or []
    if not isinstance(results, list):
        raise ClaimError(f"{label}: status.allocation.devices.results is not a list")
    if len(results) > MAX_RESULTS:
        raise ClaimError(
            f"{label}: status.allocation.devices.results has {len(results)} entries, over {MAX_RESULTS}"
        )
    configs = _config_entries(devices, driver, label)
    ours: list[AllocatedDevice] = []
    for index, entry in enumerate(results):
        where = f"{label}: status.allocation.devices.results[{index}]"
        if _mapping(entry, where).get("driver") != driver:
            continue
        result = _result(entry, where)
        full_request = str(_mapping(entry, where).get("request"))
        config = _request_config(configs, kinds, driver, full_request, result.request, label)
        if config:
            result = replace(result, config=config)
        if result.pool != pool:
            raise ClaimError(
                f"{where}.pool is {result.pool!r}: driver {driver} on this node serves pool {pool!r} only"
            )
        ours.append(result)
    return tuple(ours)
