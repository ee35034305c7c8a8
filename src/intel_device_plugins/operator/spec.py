"""The kind-neutral part of the ``deviceplugin.intel.com/v1`` spec model: the fields every kind shares,
the schema pieces the kinds' own fields are built from, and the parser.

Declared in the project's CRD model language (``kube/crdmodel.py``). Each kind's own fields live in its
module under ``operator/kinds/``; the CRD generator, the webhooks, the controller and the DaemonSet builders
all read those classes, so a field exists in exactly one place. The parser keeps upstream's messages for
tolerations and node selectors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeVar

from intel_device_plugins.flags import MAX_SHARED_DEV_NUM
from intel_device_plugins.kube.crdmodel import EMPTY, Model, field, model_fields
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.schemacheck import FieldError as FieldError
from intel_device_plugins.schemacheck import JSONSchema as JSONSchema
from intel_device_plugins.schemacheck import SpecError as SpecError
from intel_device_plugins.schemacheck import check_value


def spec_field(json_name: str, schema: JSONSchema, description: str, default: Any = None) -> Any:
    """``crdmodel.field`` with the arguments in the order this module's declarations read best."""
    return field(json_name, description, schema, default=default)


STR: Final[JSONSchema] = {"type": "string"}
NONNEG_INT: Final[JSONSchema] = {"type": "integer", "minimum": 0}
POS_INT: Final[JSONSchema] = {"type": "integer", "minimum": 1}
# The plugins' -shared-dev-num maximum: the device list must stay well within the kubelet's message limit.
SHARED_DEV_NUM_SCHEMA: Final[JSONSchema] = {"type": "integer", "minimum": 1, "maximum": MAX_SHARED_DEV_NUM}
BOOL: Final[JSONSchema] = {"type": "boolean"}

DEPLOY_AS_PLUGIN: Final = "DevicePlugin"
DEPLOY_AS_DRA: Final = "DRADriver"
DEPLOY_AS_SCHEMA: Final[JSONSchema] = {
    "type": "string",
    "enum": [DEPLOY_AS_PLUGIN, DEPLOY_AS_DRA],
    "default": DEPLOY_AS_PLUGIN,
}


def deploy_as_field() -> Any:
    """``spec.deployAs`` of a kind that has a DRA driver: what the CR's DaemonSet runs. The schema default
    keeps every CR written before the field existed a device plugin."""
    return spec_field(
        "deployAs",
        DEPLOY_AS_SCHEMA,
        "What runs on the selected nodes: the device plugin (DevicePlugin) or the DRA driver (DRADriver), "
        "which publishes the devices as ResourceSlices for ResourceClaims.",
        DEPLOY_AS_PLUGIN,
    )


TOLERATION_SCHEMA: Final[JSONSchema] = {
    "type": "object",
    "description": "The pod this Toleration is attached to tolerates any taint that matches the triple "
    "<key,value,effect> using the matching operator <operator>.",
    "properties": {
        "effect": {"type": "string", "description": "Taint effect to match; empty matches all effects."},
        "key": {"type": "string", "description": "Taint key; empty with operator Exists matches all taints."},
        "operator": {"type": "string", "description": "Exists or Equal (the default)."},
        "tolerationSeconds": {
            "type": "integer",
            "format": "int64",
            "description": "How long a NoExecute taint is tolerated; unset means forever.",
        },
        "value": {"type": "string", "description": "Taint value to match when operator is Equal."},
    },
}


@dataclasses.dataclass(frozen=True)
class Toleration:
    """A pod toleration copied verbatim into the DaemonSet."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, val in (
            ("key", self.key),
            ("operator", self.operator),
            ("value", self.value),
            ("effect", self.effect),
        ):
            if val:
                out[name] = val
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclasses.dataclass(frozen=True)
class CommonSpec(Model):
    """Fields shared by every kind. ``init_image`` is excluded for NPU by the NPU spec itself."""

    KIND: ClassVar[DeviceKind]
    HAS_INIT_IMAGE: ClassVar[bool] = True

    node_selector: Mapping[str, str] = spec_field(
        "nodeSelector",
        {"type": "object", "additionalProperties": {"type": "string"}},
        "Labels a node must have for the plugin to run there; empty means kubernetes.io/arch=amd64.",
        EMPTY,
    )
    image: str = spec_field("image", STR, "Container image of the device plugin.", "")
    tolerations: tuple[Toleration, ...] = spec_field(
        "tolerations",
        {"type": "array", "items": TOLERATION_SCHEMA},
        "Tolerations copied to the plugin pods.",
        None,
    )
    log_level: int = spec_field("logLevel", NONNEG_INT, "Log verbosity of the plugin (-v).", 0)


@dataclasses.dataclass(frozen=True)
class InitImageSpec(CommonSpec):
    init_image: str = spec_field("initImage", STR, "Container image of the init container.", "")


S = TypeVar("S", bound=CommonSpec)


def spec_fields(cls: type[CommonSpec]) -> tuple[dataclasses.Field[Any], ...]:
    """Fields of a spec class that belong in the CRD, sorted by JSON name (NPU drops initImage)."""
    return model_fields(cls)


def _parse_toleration(path: str, raw: Mapping[str, Any], errors: list[FieldError]) -> Toleration:
    vals: dict[str, Any] = {}
    for key, sub in TOLERATION_SCHEMA["properties"].items():
        if raw.get(key) is not None:
            vals[key] = check_value(f"{path}.{key}", raw[key], sub, errors)
    return Toleration(
        key=vals.get("key") or "",
        operator=vals.get("operator") or "",
        value=vals.get("value") or "",
        effect=vals.get("effect") or "",
        toleration_seconds=vals.get("tolerationSeconds"),
    )


def parse_spec_as(cls: type[S], raw: Mapping[str, Any] | None) -> S:
    """Build a spec of class ``cls`` from the JSON ``spec`` of a CR; unknown fields are ignored (the API
    prunes them).

    Raises SpecError naming every malformed field, so webhook messages point at the field.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SpecError([FieldError("spec", "must be an object")])
    errors: list[FieldError] = []
    kwargs: dict[str, Any] = {}
    for f in spec_fields(cls):
        json_name = str(f.metadata["json"])
        if raw.get(json_name) is None:
            continue
        path = f"spec.{json_name}"
        value = raw[json_name]
        if json_name == "tolerations":
            if not isinstance(value, list):
                errors.append(FieldError(path, "must be a list"))
            else:
                tols = []
                for i, t in enumerate(value):
                    if isinstance(t, Mapping):
                        tols.append(_parse_toleration(f"{path}[{i}]", t, errors))
                    elif t is not None:
                        errors.append(FieldError(f"{path}[{i}]", "must be an object"))
                kwargs["tolerations"] = tuple(tols)
        elif json_name == "nodeSelector":
            parsed = check_value(path, value, {"type": "object"}, errors)
            if parsed is not None:
                bad = [k for k, v in parsed.items() if not isinstance(v, str)]
                for k in bad:
                    errors.append(FieldError(f"{path}.{k}", "must be a string"))
                kwargs["node_selector"] = MappingProxyType({str(k): str(v) for k, v in parsed.items()})
        else:
            parsed = check_value(path, value, f.metadata["schema"], errors)
            if parsed is not None:
                kwargs[f.name] = parsed
    if errors:
        raise SpecError(errors)
    return cls(**kwargs)
