"""DeviceClass objects, built from a few facts so every kind's classes look alike.

A class selects a driver's devices (optionally narrowed by a CEL expression) and may carry an
``extendedResourceName``: then a pod asking for that extended resource (``gpu.intel.com/i915: 1``)
is served by DRA on nodes where no device plugin advertises it, with no change to the pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class DeviceClassSpec:
    name: str
    driver: str
    selector: str | None = None
    """A CEL expression on ``device``, in addition to the driver test."""
    extended_resource_name: str | None = None


def device_class(spec: DeviceClassSpec) -> dict[str, Any]:
    """The ``resource.k8s.io/v1`` DeviceClass for ``spec``."""
    expression = f'device.driver == "{spec.driver}"'
    if spec.selector:
        expression = f"{expression} && ({spec.selector})"
    body: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if spec.extended_resource_name:
        body["extendedResourceName"] = spec.extended_resource_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": spec.name, "labels": {"app.kubernetes.io/part-of": "intel-device-plugins"}},
        "spec": body,
    }


INTEL_EXTENDED_RESOURCES: Mapping[str, str] = MappingProxyType(
    {"gpu.intel.com": "intel.com/gpu", "qat.intel.com": "intel.com/qat"}
)
"""Class name -> the extended resource Intel's DRA drivers put on it when their Helm value
``enableDRAExtendedResources`` is true (off by default): pods asking ``intel.com/gpu: 1`` are served by
any device of the driver. The chart's value of the same name and ``deploy/dra/intel-extended-resources``
apply it to this project's classes of the same names."""


def with_intel_extended_resources(specs: Sequence[DeviceClassSpec]) -> tuple[DeviceClassSpec, ...]:
    """``specs`` with Intel's extended resource names on the classes Intel puts them on.

    A DeviceClass's ``extendedResourceName`` must be unique across the cluster's classes, so this refuses
    (``ValueError`` naming the classes) a table where the name is already another class's, or where the
    class already maps a resource of its own.
    """
    out = []
    for spec in specs:
        name = INTEL_EXTENDED_RESOURCES.get(spec.name)
        if name is None:
            out.append(spec)
            continue
        if spec.extended_resource_name not in (None, name):
            raise ValueError(f"DeviceClass {spec.name} already maps {spec.extended_resource_name}")
        out.append(replace(spec, extended_resource_name=name))
    taken: dict[str, str] = {}
    for spec in out:
        if spec.extended_resource_name is None:
            continue
        other = taken.setdefault(spec.extended_resource_name, spec.name)
        if other != spec.name:
            raise ValueError(f"DeviceClasses {other} and {spec.name} both map {spec.extended_resource_name}")
    return tuple(out)
