"""The parts of a Pod the webhooks read, checked before use, and the extended-resource rules they share.

Pods arrive as JSON from the API server, which has validated them already; the checks here exist so that a
malformed review (or a future API change) ends in a denial naming the field, never in an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from intel_device_plugins.webhooks.quantity import parse_quantity

JSON = dict[str, Any]
MAX_CONTAINERS: Final = (
    10_000  # far above anything the API server accepts in one pod (it caps the object size)
)


class Denied(Exception):
    """The pod is refused; the message goes to the user verbatim."""


class DecodeError(Denied):
    """The pod is not a pod: the message names the field."""


def _expect(value: Any, typ: type | tuple[type, ...], path: str, what: str) -> None:
    if not isinstance(value, typ):
        raise DecodeError(f"{path}: must be {what}")


def _get(obj: Mapping[str, Any], key: str, default: Any) -> Any:
    """A member, with ``null`` read as absent (as the API server does) but ``{}`` kept as a wrong type."""
    value = obj.get(key)
    return default if value is None else value


def check_pod(pod: Any) -> None:
    """Raise DecodeError naming the first field whose JSON type does not fit a Pod."""
    _expect(pod, dict, "object", "an object")
    meta = _get(pod, "metadata", {})
    _expect(meta, dict, "metadata", "an object")
    ann = _get(meta, "annotations", {})
    _expect(ann, dict, "metadata.annotations", "an object")
    for key, value in ann.items():
        _expect(value, str, f"metadata.annotations[{key}]", "a string")
    for field in ("name", "namespace"):
        _expect(_get(meta, field, ""), str, f"metadata.{field}", "a string")
    spec = pod.get("spec")
    _expect(spec, dict, "spec", "an object")
    containers = _get(spec, "containers", [])
    _expect(containers, list, "spec.containers", "a list")
    if len(containers) > MAX_CONTAINERS:
        raise DecodeError(f"spec.containers: more than {MAX_CONTAINERS} containers")
    volumes = _get(spec, "volumes", [])
    _expect(volumes, list, "spec.volumes", "a list")
    for i, vol in enumerate(volumes):
        _expect(vol, dict, f"spec.volumes[{i}]", "an object")
    for i, c in enumerate(containers):
        at = f"spec.containers[{i}]"
        _expect(c, dict, at, "an object")
        _expect(_get(c, "name", ""), str, f"{at}.name", "a string")
        res = _get(c, "resources", {})
        _expect(res, dict, f"{at}.resources", "an object")
        for part in ("limits", "requests"):
            amounts = _get(res, part, {})
            _expect(amounts, dict, f"{at}.resources.{part}", "an object")
            for name, amount in amounts.items():
                _expect(amount, (str, int), f"{at}.resources.{part}[{name}]", "a quantity")
        for field in ("env", "volumeMounts"):
            items = _get(c, field, [])
            _expect(items, list, f"{at}.{field}", "a list")
            for j, item in enumerate(items):
                _expect(item, dict, f"{at}.{field}[{j}]", "an object")
                key = "name" if field == "env" else "mountPath"
                _expect(_get(item, key, ""), str, f"{at}.{field}[{j}].{key}", "a string")


def containers(pod: Mapping[str, Any]) -> list[JSON]:
    return list(pod.get("spec", {}).get("containers") or [])


def requested(container: Mapping[str, Any], prefix: str) -> dict[str, int]:
    """Extended resources under ``prefix`` with their whole-unit amounts (upstream's checks and messages).

    Extended resources cannot be overcommitted, so limits and requests must agree, and devices come whole.
    """
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    out: dict[str, int] = {}
    for name in sorted({n for n in (*limits, *requests) if n.startswith(prefix)}):
        try:
            limit = parse_quantity(limits[name]) if name in limits else None
            request = parse_quantity(requests[name]) if name in requests else None
        except ValueError as exc:
            raise Denied(f'invalid quantity for "{name}": {exc}') from None
        if limit != request:
            raise Denied(
                f"'limits' and 'requests' for \"{name}\" must be equal as extended resources cannot be "
                "overcommitted"
            )
        assert limit is not None
        if limit.denominator != 1:
            raise Denied(f'resource quantity isn\'t of integral type for "{name}"')
        if limit < 0:
            raise Denied(f'resource quantity for "{name}" must not be negative')
        out[name] = int(limit)
    return out
