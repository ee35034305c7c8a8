"""DeviceClass objects, built from a few facts so every kind's classes look alike.

A class selects a driver's devices (optionally narrowed by a CEL expression) and may carry an
``extendedResourceName``: then a pod asking for that extended resource (``gpu.intel.com/i915: 1``)
is served by DRA on nodes where no device plugin advertises it, with no change to the pod.
"""

from __future__ import annotations

from dataclasses import dataclass
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
