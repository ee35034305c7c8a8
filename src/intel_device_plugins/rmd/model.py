"""Typed model of the ``intel.com/v1alpha1`` RMD custom resources: the single source of truth.

Declared in the project's CRD model language (``kube/crdmodel.py``): nested models, and cross-field rules
that the API server checks as CEL and the operator checks in Python (on objects stored before the rule
existed). The CRD generator, the parser and the payload builder all read these classes, so a field or a
rule exists in exactly one place.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final

from intel_device_plugins.kube import crdmodel
from intel_device_plugins.kube.crdmodel import EMPTY, M, Model, Rule, field, model_fields, schema_of, to_json
from intel_device_plugins.rmd import cpuset
from intel_device_plugins.schemacheck import FieldError, JSONSchema, PatternCheck, SpecError

__all__ = ["FieldError", "JSONSchema", "Model", "SpecError", "model_fields", "schema_of", "to_json"]

GROUP: Final = "intel.com"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CONFIG_NAME: Final = "rmdconfig"  # RmdConfig is a singleton with this name
NODE_STATE_PREFIX: Final = "rmd-node-state-"


_MAX_LIST: Final = 1024  # bounds list sizes (and the cost of the CEL rules over them)
_MAX_STR: Final = 253


_STR: Final[JSONSchema] = {"type": "string", "maxLength": _MAX_STR}
_NONNEG: Final[JSONSchema] = {"type": "integer", "minimum": 0}
_BOOL: Final[JSONSchema] = {"type": "boolean"}
_STR_MAP: Final[JSONSchema] = {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}}
# CPU lists are bounded tighter than other lists: the API server prices the ascending-range rule by
# items times length squared, and 128 lists of 64 characters are what its budget allows.
_CPUSET_LIST: Final[JSONSchema] = {
    "type": "array",
    "maxItems": 128,
    "items": {
        "type": "string",
        "maxLength": 64,
        "pattern": cpuset.CPUSET_PATTERN,
        # The pattern cannot compare numbers; ``_cpuset_error`` is the same rule for the operator.
        "x-kubernetes-validations": [
            {"rule": cpuset.ASCENDING_RANGES_CEL, "message": cpuset.ASCENDING_MESSAGE}
        ],
    },
}
_NODE_LIST: Final[JSONSchema] = {"type": "array", "maxItems": _MAX_LIST, "items": _STR}
_LEGACY: Final[JSONSchema] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


@dataclasses.dataclass(frozen=True)
class CacheSpec(Model):
    """L3 cache ways: max == min > 0 is the guaranteed pool, max > min > 0 best effort, 0/0 shared."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("max", "min")
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule("self.max >= self.min", "max must be greater than or equal to min", lambda c: c.max >= c.min),
        Rule(
            "self.max == 0 || self.min > 0",
            "max > 0 needs min > 0: RMD has no pool for min = 0 (use max = min = 0 for the shared pool)",
            lambda c: c.max == 0 or c.min > 0,
        ),
    )

    max: int = field("max", "Most cache ways the workload may use.", _NONNEG, default=0)
    min: int = field("min", "Cache ways the workload is guaranteed.", _NONNEG, default=0)


@dataclasses.dataclass(frozen=True)
class MbaSpec(Model):
    """Memory bandwidth allocation, as a percentage or in MBps (whichever the node's RMD supports)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!(has(self.percentage) && has(self.mbps))",
            "set percentage or mbps, not both",
            lambda m: m.percentage is None or m.mbps is None,
        ),
    )

    percentage: int | None = field(
        "percentage", "Share of memory bandwidth, 1-100.", {"type": "integer", "minimum": 1, "maximum": 100}
    )
    mbps: int | None = field(
        "mbps", "Memory bandwidth in MBps.", {"type": "integer", "minimum": 1, "maximum": 4294967290}
    )


@dataclasses.dataclass(frozen=True)
class RdtSpec(Model):
    """Resource Director Technology settings."""

    cache: CacheSpec | None = field(  # noqa: RUF009 (a frozen field descriptor)
        "cache", "L3 cache ways; absent means no cache request.", model=CacheSpec
    )
    mba: MbaSpec | None = field("mba", "Memory bandwidth allocation.", model=MbaSpec)  # noqa: RUF009 (a frozen field descriptor)


@dataclasses.dataclass(frozen=True)
class PstateSpec(Model):
    """Parameters of RMD's P-state plugin."""

    ratio: str | None = field(
        "ratio",
        'P-state ratio as a decimal number, e.g. "1.5".',
        {"type": "string", "maxLength": 32, "pattern": r"^[0-9]+(\.[0-9]+)?$"},
    )
    monitoring: str | None = field(
        "monitoring", "P-state monitoring.", {"type": "string", "enum": ["on", "off"]}
    )


@dataclasses.dataclass(frozen=True)
class PluginsSpec(Model):
    """RMD plugin parameters."""

    pstate: PstateSpec | None = field("pstate", "P-state plugin parameters.", model=PstateSpec)  # noqa: RUF009 (a frozen field descriptor)


def _has_nodes(s: RmdWorkloadSpec) -> bool:
    return bool(s.nodes)


def _has_selector(s: RmdWorkloadSpec) -> bool:
    return bool(s.node_selector)


@dataclasses.dataclass(frozen=True)
class RmdWorkloadSpec(Model):
    """Cache, memory bandwidth and P-state settings for a set of CPUs on a set of nodes."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.cache)",
            "spec.cache is the stale v0.1 layout: move max and min to spec.rdt.cache",
            lambda s: s.legacy_cache is None,
        ),
        Rule(
            "!has(self.pstate)",
            "spec.pstate is the stale v0.1 layout: move ratio and monitoring to spec.plugins.pstate",
            lambda s: s.legacy_pstate is None,
        ),
        Rule(
            "(has(self.nodes) && size(self.nodes) > 0) != "
            "(has(self.nodeSelector) && size(self.nodeSelector) > 0)",
            "set exactly one of nodes and nodeSelector",
            lambda s: _has_nodes(s) != _has_selector(s),
        ),
        Rule(
            "(has(self.allCores) && self.allCores) != (has(self.coreIds) && size(self.coreIds) > 0)",
            "set exactly one of coreIds and allCores: true",
            lambda s: s.all_cores != bool(s.core_ids),
        ),
        Rule(
            "!has(self.reservedCoreIds) || size(self.reservedCoreIds) == 0 || "
            "(has(self.allCores) && self.allCores)",
            "reservedCoreIds is only meaningful with allCores: true",
            lambda s: not s.reserved_core_ids or s.all_cores,
        ),
        Rule(
            "!has(self.rdt) || !has(self.rdt.mba) || has(self.rdt.cache) || "
            "(has(self.policy) && size(self.policy) > 0)",
            "rdt.mba needs rdt.cache (RMD refuses memory bandwidth without a cache request)",
            lambda s: s.rdt is None or s.rdt.mba is None or s.rdt.cache is not None or bool(s.policy),
        ),
        Rule(
            "has(self.policy) || (has(self.rdt) && (has(self.rdt.cache) || has(self.rdt.mba))) || "
            "(has(self.plugins) && has(self.plugins.pstate))",
            "nothing to enforce: set policy, rdt.cache, rdt.mba or plugins.pstate",
            lambda s: (
                bool(s.policy)
                or (s.rdt is not None and (s.rdt.cache is not None or s.rdt.mba is not None))
                or (s.plugins is not None and s.plugins.pstate is not None)
            ),
        ),
    )

    all_cores: bool = field(
        "allCores", "Use every CPU of the node except reservedCoreIds.", _BOOL, default=False
    )
    core_ids: tuple[str, ...] = field(
        "coreIds",
        'CPU lists such as "0-3" or "6"; the workload\'s CPUs are their union.',
        _CPUSET_LIST,
        default=(),
    )
    reserved_core_ids: tuple[str, ...] = field(
        "reservedCoreIds", "CPU lists left out when allCores is set.", _CPUSET_LIST, default=()
    )
    policy: str | None = field(
        "policy",
        "RMD policy (e.g. gold, silver, bronze).",
        {"type": "string", "minLength": 1, "maxLength": 63},
    )
    rdt: RdtSpec | None = field("rdt", "Cache and memory bandwidth settings.", model=RdtSpec)  # noqa: RUF009 (a frozen field descriptor)
    plugins: PluginsSpec | None = field("plugins", "RMD plugin parameters.", model=PluginsSpec)  # noqa: RUF009 (a frozen field descriptor)
    node_selector: Mapping[str, str] = field(
        "nodeSelector",
        "Labels of the nodes to apply the workload on (combined with the RmdConfig's rmdNodeSelector).",
        _STR_MAP,
        default=EMPTY,
    )
    nodes: tuple[str, ...] = field(
        "nodes", "Names of the nodes to apply the workload on.", _NODE_LIST, default=()
    )
    legacy_cache: Mapping[str, Any] | None = field(
        "cache", "Rejected: the v0.1 layout; use rdt.cache.", _LEGACY
    )
    legacy_pstate: Mapping[str, Any] | None = field(
        "pstate", "Rejected: the v0.1 layout; use plugins.pstate.", _LEGACY
    )

    def cpus(self) -> frozenset[int]:
        """The CPUs named by ``coreIds`` (parsed; the model guarantees they parse)."""
        return cpuset.parse_all(self.core_ids)


@dataclasses.dataclass(frozen=True)
class RmdNodeStateSpec(Model):
    """The node whose RMD workloads this object mirrors."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("node",)

    node: str = field(
        "node", "Node name.", {"type": "string", "minLength": 1, "maxLength": _MAX_STR}, default=""
    )
    node_uid: str = field("nodeUid", "UID of the Node object.", _STR, default="")


@dataclasses.dataclass(frozen=True)
class RmdConfigSpec(Model):
    """Where RMD and the node agent run. Only one RmdConfig, named rmdconfig, is read."""

    rmd_image: str = field(
        "rmdImage", "Container image of RMD; empty means the operator's default.", _STR, default=""
    )
    deploy_node_agent: bool = field(
        "deployNodeAgent",
        "Run the node agent, which turns pods requesting intel.com/l3_cache_ways into RmdWorkloads.",
        _BOOL,
        default=False,
    )
    rmd_node_selector: Mapping[str, str] = field(
        "rmdNodeSelector",
        "Labels of the nodes that run RMD; empty means nodes with L3 cache allocation "
        "(feature.node.kubernetes.io/cpu-rdt.RDTL3CA=true, labelled by NFD).",
        _STR_MAP,
        default=EMPTY,
    )


# ----------------------------------------------------------------------------------------------------
# Parsing


def _cpuset_error(value: str) -> str | None:
    """The CRD's rule for a CPU list (its pattern, then ranges in ascending order), as one check."""
    if re.fullmatch(cpuset.CPUSET_PATTERN.strip("^$"), value) is None:
        return f'"{value}" does not match {cpuset.CPUSET_PATTERN}'
    try:
        cpuset.parse(value)
    except cpuset.CpusetError:
        return f'"{value}": {cpuset.ASCENDING_MESSAGE}'
    return None


_PATTERN_CHECKS: Final[Mapping[str, PatternCheck]] = MappingProxyType({cpuset.CPUSET_PATTERN: _cpuset_error})


def parse(cls: type[M], raw: Any, path: str = "spec") -> M:
    """``crdmodel.parse`` with RMD's cpuset strings checked in full."""
    return crdmodel.parse(cls, raw, path, _PATTERN_CHECKS)
