"""The ``deviceplugin.intel.com/v1`` custom resources as the controller and the webhooks see them: any
kind's spec (each declared in its module under ``operator/kinds/``), the status every kind shares, and the
parser that picks the kind's spec class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, cast

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.registry import SPEC_CLASSES as SPEC_CLASSES
from intel_device_plugins.operator.registry import AnySpec as AnySpec
from intel_device_plugins.operator.spec import FieldError as FieldError
from intel_device_plugins.operator.spec import JSONSchema, parse_spec_as
from intel_device_plugins.operator.spec import SpecError as SpecError
from intel_device_plugins.operator.spec import spec_fields as spec_fields


def parse_spec(kind: DeviceKind, raw: Mapping[str, Any] | None) -> AnySpec:
    """Build the typed spec of ``kind`` from the JSON ``spec`` of a CR (see ``spec.parse_spec_as``)."""
    return cast(AnySpec, parse_spec_as(SPEC_CLASSES[kind], raw))


OBJECT_REFERENCE_SCHEMA: Final[JSONSchema] = {
    "type": "object",
    "description": "Reference to the DaemonSet this CR controls.",
    "properties": {
        name: {"type": "string"}
        for name in ("apiVersion", "fieldPath", "kind", "name", "namespace", "resourceVersion", "uid")
    },
    "x-kubernetes-map-type": "atomic",
}

CONDITION_SCHEMA: Final[JSONSchema] = {
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": {"type": "string", "maxLength": 32768},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "reason": {"type": "string", "maxLength": 1024, "minLength": 1},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "type": {"type": "string", "maxLength": 316},
    },
}

STATUS_SCHEMA: Final[JSONSchema] = {
    "type": "object",
    "description": "Observed state of the plugin DaemonSet.",
    "required": ["desiredNumberScheduled", "numberReady"],
    "properties": {
        "conditions": {
            "type": "array",
            "description": "Conditions; NodeConflict reports nodes shared with another CR of the kind.",
            "items": CONDITION_SCHEMA,
            "x-kubernetes-list-map-keys": ["type"],
            "x-kubernetes-list-type": "map",
        },
        "controlledDaemonSet": OBJECT_REFERENCE_SCHEMA,
        "desiredNumberScheduled": {
            "type": "integer",
            "format": "int32",
            "description": "Nodes that should run the plugin pod.",
        },
        "nodeNames": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Nodes the plugin pods are scheduled on.",
        },
        "numberReady": {
            "type": "integer",
            "format": "int32",
            "description": "Nodes whose plugin pod is ready.",
        },
    },
}


@dataclasses.dataclass(frozen=True)
class ObjectReference:
    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str
    resource_version: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }
        if self.resource_version:
            out["resourceVersion"] = self.resource_version
        return out


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
        }
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out


@dataclasses.dataclass(frozen=True)
class PluginStatus:
    desired_number_scheduled: int = 0
    number_ready: int = 0
    node_names: tuple[str, ...] = ()
    controlled_daemon_set: ObjectReference | None = None
    conditions: tuple[Condition, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "desiredNumberScheduled": self.desired_number_scheduled,
            "numberReady": self.number_ready,
            "nodeNames": list(self.node_names),
        }
        if self.controlled_daemon_set is not None:
            out["controlledDaemonSet"] = self.controlled_daemon_set.to_dict()
        if self.conditions:
            out["conditions"] = [c.to_dict() for c in self.conditions]
        return out
