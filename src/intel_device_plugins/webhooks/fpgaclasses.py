"""DeviceClasses that let the FPGA DRA driver serve the FPGA plugin's resource names (pure).

The plugin's names encode bitstream IDs that only the cluster's AcceleratorFunctions and FpgaRegions
know, so the FPGA driver cannot ship these classes the way the other kinds do: they are made from the
objects, by ``intel_fpga_deviceclasses`` (files or stdin, for GitOps) or by the webhook itself
(``--manage-deviceclasses``, ``webhooks/classsync.py``).

* af mode: one class per (interfaceId, afuId), selecting a port (a device with the ``region``
  attribute) running that function, ``extendedResourceName`` the plugin's ``af-…`` name. The name
  holds base64url, so the class is named ``af-<interfaceId>.<afuId>.fpga.intel.com``.
* region mode (region AFs and FpgaRegions): one class per interfaceId, selecting a region (a device with
  the ``ports`` attribute), ``region-<interfaceId>.fpga.intel.com`` → ``fpga.intel.com/region-<interfaceId>``.

IDs are lower-case hexadecimal, so each name is a valid DNS subdomain whose labels stay within 63
characters. Objects in several namespaces that name the same IDs give one class.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.plugins.fpga.discovery import NAMESPACE, region_resource_name
from intel_device_plugins.plugins.fpga.dra import (
    AFU_ATTRIBUTE,
    INTERFACE_ATTRIBUTE,
    PORT_REGION_ATTRIBUTE,
    REGION_PORTS_ATTRIBUTE,
)
from intel_device_plugins.webhooks.fpga import MODE_AF, MODE_REGION, PREFIX, af_device_type
from intel_device_plugins.webhooks.model import AFU_ID_PATTERN, INTERFACE_ID_PATTERN
from intel_device_plugins.webhooks.store import FpgaKind

_INTERFACE_ID: Final = re.compile(INTERFACE_ID_PATTERN)
_AFU_ID: Final = re.compile(AFU_ID_PATTERN)
_ATTRIBUTES: Final = f'device.attributes["{NAMESPACE}"]'


class BadObject(ValueError):
    """An object no class can be made from; the message names the object and the field."""


def af_class_name(interface_id: str, afu_id: str) -> str:
    return f"af-{interface_id}.{afu_id}.{NAMESPACE}"


def region_class_name(interface_id: str) -> str:
    return f"{region_resource_name(interface_id)}.{NAMESPACE}"


def af_class(interface_id: str, afu_id: str) -> DeviceClassSpec:
    """Ports running ``afu_id`` in a region of ``interface_id``, for the plugin's af-mode name."""
    selector = (
        f'"{PORT_REGION_ATTRIBUTE}" in {_ATTRIBUTES}'
        f' && {_ATTRIBUTES}.{INTERFACE_ATTRIBUTE} == "{interface_id}"'
        f' && {_ATTRIBUTES}.{AFU_ATTRIBUTE} == "{afu_id}"'
    )
    return DeviceClassSpec(
        af_class_name(interface_id, afu_id),
        NAMESPACE,
        selector=selector,
        extended_resource_name=PREFIX + af_device_type(interface_id, afu_id),
    )


def region_class(interface_id: str) -> DeviceClassSpec:
    """Regions of ``interface_id``, for the plugin's region-mode name."""
    selector = (
        f'"{REGION_PORTS_ATTRIBUTE}" in {_ATTRIBUTES}'
        f' && {_ATTRIBUTES}.{INTERFACE_ATTRIBUTE} == "{interface_id}"'
    )
    return DeviceClassSpec(
        region_class_name(interface_id),
        NAMESPACE,
        selector=selector,
        extended_resource_name=PREFIX + region_resource_name(interface_id),
    )


def describe(kind: FpgaKind, obj: Mapping[str, Any]) -> str:
    """``AcceleratorFunction <namespace>/<name>``, as far as the object says."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return f"{kind.kind} without metadata.name"
    where = f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name
    return f"{kind.kind} {where}"


def _id(spec: Mapping[str, Any], field: str, pattern: re.Pattern[str], what: str) -> str:
    value = spec.get(field)
    if not isinstance(value, str) or not pattern.match(value):
        raise BadObject(f"spec.{field} {value!r} is not {what}")
    return value


def object_class(kind: FpgaKind, obj: Mapping[str, Any]) -> DeviceClassSpec:
    """The class one object asks for; :class:`BadObject` names the object and the field."""
    try:
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise BadObject("metadata.name is missing")
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            raise BadObject("spec is missing or not an object")
        interface_id = _id(spec, "interfaceId", _INTERFACE_ID, "8 to 32 lower-case hexadecimal digits")
        if kind is FpgaKind.FPGA_REGION:
            return region_class(interface_id)
        afu_id = _id(spec, "afuId", _AFU_ID, "8 to 40 lower-case hexadecimal digits")
        mode = spec.get("mode")
        if mode == MODE_REGION:
            return region_class(interface_id)
        if mode != MODE_AF:
            raise BadObject(f"spec.mode {mode!r} is neither {MODE_AF!r} nor {MODE_REGION!r}")
        for field, value in (("interfaceId", interface_id), ("afuId", afu_id)):
            if len(value) % 2:
                raise BadObject(f"spec.{field} {value!r} has an odd number of digits: it is no whole bytes")
        return af_class(interface_id, afu_id)
    except BadObject as error:
        raise BadObject(f"{describe(kind, obj)}: {error}") from None


@dataclass(frozen=True)
class Generated:
    classes: tuple[DeviceClassSpec, ...]
    """One per distinct name, sorted by name."""
    problems: tuple[str, ...]
    """One line per object left out, naming it and the field."""


def generate(objects: Iterable[tuple[FpgaKind, Mapping[str, Any]]]) -> Generated:
    """The classes the objects ask for; bad objects are left out and reported, the others still count."""
    classes: dict[str, DeviceClassSpec] = {}
    problems: list[str] = []
    for kind, obj in objects:
        try:
            spec = object_class(kind, obj)
        except BadObject as error:
            problems.append(str(error))
            continue
        classes[spec.name] = spec
    return Generated(tuple(classes[name] for name in sorted(classes)), tuple(problems))
