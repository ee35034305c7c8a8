"""Typed model of the ``deviceplugin.intel.com/v1`` custom resources: the single source of truth.

Declared in the project's CRD model language (``kube/crdmodel.py``). The CRD generator, the parser used by
the webhooks and the controller, and the DaemonSet builders all read these classes, so a field exists in
exactly one place. The parser below keeps upstream's messages for tolerations and node selectors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeVar, cast

from intel_device_plugins.flags import MAX_SHARED_DEV_NUM
from intel_device_plugins.kube.crdmodel import EMPTY, Model, field, model_fields
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.schemacheck import FieldError as FieldError
from intel_device_plugins.schemacheck import JSONSchema as JSONSchema
from intel_device_plugins.schemacheck import SpecError as SpecError
from intel_device_plugins.schemacheck import check_value

_EMPTY: Final[Mapping[str, str]] = EMPTY


def _spec_field(json_name: str, schema: JSONSchema, description: str, default: Any = None) -> Any:
    """``crdmodel.field`` with the arguments in the order this module's declarations read best."""
    return field(json_name, description, schema, default=default)


_STR: Final[JSONSchema] = {"type": "string"}
_NONNEG_INT: Final[JSONSchema] = {"type": "integer", "minimum": 0}
_POS_INT: Final[JSONSchema] = {"type": "integer", "minimum": 1}
# The plugins' -shared-dev-num maximum: the device list must stay well within the kubelet's message limit.
_SHARED_DEV_NUM: Final[JSONSchema] = {"type": "integer", "minimum": 1, "maximum": MAX_SHARED_DEV_NUM}
_BOOL: Final[JSONSchema] = {"type": "boolean"}

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

    node_selector: Mapping[str, str] = _spec_field(
        "nodeSelector",
        {"type": "object", "additionalProperties": {"type": "string"}},
        "Labels a node must have for the plugin to run there; empty means kubernetes.io/arch=amd64.",
        _EMPTY,
    )
    image: str = _spec_field("image", _STR, "Container image of the device plugin.", "")
    tolerations: tuple[Toleration, ...] = _spec_field(
        "tolerations",
        {"type": "array", "items": TOLERATION_SCHEMA},
        "Tolerations copied to the plugin pods.",
        None,
    )
    log_level: int = _spec_field("logLevel", _NONNEG_INT, "Log verbosity of the plugin (-v).", 0)


@dataclasses.dataclass(frozen=True)
class InitImageSpec(CommonSpec):
    init_image: str = _spec_field("initImage", _STR, "Container image of the init container.", "")


@dataclasses.dataclass(frozen=True)
class DlbSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.DLB


@dataclasses.dataclass(frozen=True)
class DsaSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.DSA

    provisioning_config: str = _spec_field(
        "provisioningConfig", _STR, "Name of a ConfigMap with the idxd provisioning configuration.", ""
    )
    driver: str = _spec_field(
        "driver",
        {"type": "string", "enum": ["idxd", "vfio-pci"], "default": "idxd"},
        "Kernel driver the work queues are bound to.",
        "idxd",
    )
    shared_dev_num: int = _spec_field(
        "sharedDevNum", _SHARED_DEV_NUM, "Number of containers that may share one shared work queue.", 0
    )


@dataclasses.dataclass(frozen=True)
class FpgaSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.FPGA

    mode: str = _spec_field(
        "mode",
        {"type": "string", "enum": ["af", "region", "regiondevel"]},
        "Operation mode of the FPGA plugin.",
        "",
    )


@dataclasses.dataclass(frozen=True)
class GpuSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.GPU

    allow_ids: str = _spec_field(
        "allowIDs", _STR, "Comma-separated PCI device IDs (0xABCD) the plugin may expose.", ""
    )
    deny_ids: str = _spec_field(
        "denyIDs", _STR, "Comma-separated PCI device IDs (0xABCD) the plugin must not expose.", ""
    )
    preferred_allocation_policy: str = _spec_field(
        "preferredAllocationPolicy",
        {"type": "string", "enum": ["balanced", "packed", "none"]},
        "Allocation policy for shared devices; needs sharedDevNum > 1 unless 'none'.",
        "",
    )
    bypath_mode: str = _spec_field(
        "bypathMode",
        {"type": "string", "enum": ["none", "single", "all"]},
        "How /dev/dri/by-path links are mounted into containers.",
        "",
    )
    monitoring_mode: str = _spec_field(
        "monitoringMode",
        {"type": "string", "enum": ["split", "single"]},
        "Shape of the monitoring resource when enableMonitoring is set.",
        "",
    )
    shared_dev_num: int = _spec_field(
        "sharedDevNum", _SHARED_DEV_NUM, "Number of containers that may share one GPU.", 0
    )
    enable_monitoring: bool = _spec_field(
        "enableMonitoring", _BOOL, "Expose the monitoring resource that grants access to all GPUs.", False
    )
    resource_manager: bool = _spec_field(
        "resourceManager",
        _BOOL,
        "Deprecated (v0.31): GPU Aware Scheduling resource manager. Accepted and ignored.",
        False,
    )


@dataclasses.dataclass(frozen=True)
class IaaSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.IAA

    provisioning_config: str = _spec_field(
        "provisioningConfig", _STR, "Name of a ConfigMap with the idxd provisioning configuration.", ""
    )
    shared_dev_num: int = _spec_field(
        "sharedDevNum", _SHARED_DEV_NUM, "Number of containers that may share one shared work queue.", 0
    )


@dataclasses.dataclass(frozen=True)
class NpuSpec(CommonSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.NPU
    HAS_INIT_IMAGE: ClassVar[bool] = False

    shared_dev_num: int = _spec_field(
        "sharedDevNum", _SHARED_DEV_NUM, "Number of containers that may share one NPU.", 0
    )


QAT_VF_DRIVERS: Final = (
    "dh895xccvf",
    "c6xxvf",
    "c3xxxvf",
    "d15xxvf",
    "4xxxvf",
    "420xxvf",
    "c4xxxvf",
    "6xxxvf",
)


@dataclasses.dataclass(frozen=True)
class QatSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.QAT

    provisioning_config: str = _spec_field(
        "provisioningConfig", _STR, "Name of a ConfigMap with the QAT device configuration.", ""
    )
    preferred_allocation_policy: str = _spec_field(
        "preferredAllocationPolicy",
        {"type": "string", "enum": ["balanced", "packed"]},
        "Allocation policy for QAT virtual functions.",
        "",
    )
    dpdk_driver: str = _spec_field(
        "dpdkDriver",
        {"type": "string", "enum": ["igb_uio", "vfio-pci"]},
        "Userspace driver the virtual functions are bound to.",
        "",
    )
    kernel_vf_drivers: tuple[str, ...] = _spec_field(
        "kernelVfDrivers",
        {"type": "array", "items": {"type": "string", "enum": list(QAT_VF_DRIVERS)}},
        "Kernel VF drivers the plugin takes devices from.",
        (),
    )
    max_num_devices: int = _spec_field(
        "maxNumDevices", _POS_INT, "Maximum number of QAT devices exposed per node.", 0
    )


@dataclasses.dataclass(frozen=True)
class SgxSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.SGX

    enclave_limit: int = _spec_field(
        "enclaveLimit", _POS_INT, "Containers per node that may use an enclave.", 0
    )
    provision_limit: int = _spec_field(
        "provisionLimit", _POS_INT, "Containers per node that may use the provisioning device.", 0
    )
    dcap_infra_resources: bool = _spec_field(
        "dcapInfraResources", _BOOL, "Deprecated: register DCAP infrastructure resources.", False
    )


SPEC_CLASSES: Final[Mapping[DeviceKind, type[CommonSpec]]] = MappingProxyType(
    {
        DeviceKind.DLB: DlbSpec,
        DeviceKind.DSA: DsaSpec,
        DeviceKind.FPGA: FpgaSpec,
        DeviceKind.GPU: GpuSpec,
        DeviceKind.IAA: IaaSpec,
        DeviceKind.NPU: NpuSpec,
        DeviceKind.QAT: QatSpec,
        DeviceKind.SGX: SgxSpec,
    }
)

AnySpec = DlbSpec | DsaSpec | FpgaSpec | GpuSpec | IaaSpec | NpuSpec | QatSpec | SgxSpec
S = TypeVar("S", bound=CommonSpec)


# ----------------------------------------------------------------------------------------------------
# Status


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


# ----------------------------------------------------------------------------------------------------
# Parsing


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


def parse_spec(kind: DeviceKind, raw: Mapping[str, Any] | None) -> AnySpec:
    """Build the typed spec from the JSON ``spec`` of a CR; unknown fields are ignored (the API prunes them).

    Raises SpecError naming every malformed field, so webhook messages point at the field.
    """
    cls = SPEC_CLASSES[kind]
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
    return cast(AnySpec, cls(**kwargs))


def spec_to_dict(spec: CommonSpec) -> dict[str, Any]:
    """JSON form of a spec with empty/zero fields omitted (DSA's defaulted driver is kept)."""
    out: dict[str, Any] = {}
    for f in spec_fields(type(spec)):
        value = getattr(spec, f.name)
        json_name = str(f.metadata["json"])
        default = f.default if f.default is not dataclasses.MISSING else _EMPTY
        if value is None or (value == default and json_name != "driver"):
            continue
        if json_name == "tolerations":
            out[json_name] = [t.to_dict() for t in value]
        elif json_name == "nodeSelector":
            out[json_name] = dict(value)
        elif isinstance(value, tuple):
            out[json_name] = list(value)
        else:
            out[json_name] = value
    return out
