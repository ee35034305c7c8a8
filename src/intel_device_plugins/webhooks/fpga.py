"""FPGA pod mutation: friendly accelerator-function names become the FPGA plugin's resource names.

A namespace's AcceleratorFunctions and FpgaRegions define its mappings, from ``fpga.intel.com/<CR name>`` to
the resource the plugin advertises. ``namespace_mappings`` builds them from the objects as they are (no
incremental reference counts to drift), and ``mutate_pod`` turns a pod into JSON patch operations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from intel_device_plugins.plugins.fpga.discovery import af_resource_name, region_resource_name
from intel_device_plugins.webhooks.jsonpatch import Op, escape
from intel_device_plugins.webhooks.pod import Denied, containers, requested

PREFIX: Final = "fpga.intel.com/"
MODE_AF: Final = "af"
MODE_REGION: Final = "region"
MODE_REGION_DEVEL: Final = "regiondevel"  # a plain FpgaRegion: the region itself, no function programmed
ENV_REGION: Final = "FPGA_REGION"
ENV_AFU: Final = "FPGA_AFU"
# Region mode writes two env vars per unit; no node has more FPGA regions than this, and it keeps a huge
# quantity from becoming millions of env vars.
MAX_REGION_UNITS: Final = 256


@dataclasses.dataclass(frozen=True)
class FunctionMapping:
    """What ``fpga.intel.com/<CR name>`` stands for in one namespace."""

    resource: str  # the plugin's resource name, e.g. fpga.intel.com/region-ce48969398f05f33946d560708be108a
    mode: str  # af, region, regiondevel, or whatever an old object carries (denied when used)
    interface_id: str = ""
    afu_id: str = ""


@dataclasses.dataclass(frozen=True)
class NamespaceMappings:
    by_name: Mapping[str, FunctionMapping] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    problems: tuple[str, ...] = ()

    @property
    def identities(self) -> frozenset[str]:
        """Plugin resource names some CR maps to: requested directly, they pass unchanged."""
        return frozenset(m.resource for m in self.by_name.values())


def af_device_type(interface_id: str, afu_id: str) -> str:
    """The af-mode device type, exactly as the FPGA plugin names the resource it advertises."""
    return af_resource_name(interface_id, afu_id)


def _spec(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise ValueError("metadata and spec must be objects")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("metadata.name is missing")
    return name, spec


def function_mapping(obj: Mapping[str, Any]) -> tuple[str, FunctionMapping]:
    """The mapping an AcceleratorFunction defines; ValueError names what is wrong with it."""
    name, spec = _spec(obj)
    iface, afu, mode = (str(spec.get(k) or "") for k in ("interfaceId", "afuId", "mode"))
    if mode == MODE_AF:
        try:
            resource = PREFIX + af_device_type(iface, afu)
        except ValueError as exc:
            raise ValueError(f"AcceleratorFunction {name}: {exc}") from None
    else:
        resource = PREFIX + region_resource_name(iface)
    return PREFIX + name, FunctionMapping(resource, mode, iface, afu)


def region_mapping(obj: Mapping[str, Any]) -> tuple[str, FunctionMapping]:
    name, spec = _spec(obj)
    iface = str(spec.get("interfaceId") or "")
    return PREFIX + name, FunctionMapping(PREFIX + region_resource_name(iface), MODE_REGION_DEVEL, iface)


def namespace_mappings(
    functions: Iterable[Mapping[str, Any]], regions: Iterable[Mapping[str, Any]]
) -> NamespaceMappings:
    """Mappings of one namespace. AFs and regions share one name space; on a clash the AF wins, since it
    says more (a function in a region). Objects that cannot be mapped are reported and left out."""
    out: dict[str, FunctionMapping] = {}
    problems: list[str] = []
    for build, objs in ((region_mapping, regions), (function_mapping, functions)):
        for obj in objs:
            try:
                key, mapping = build(obj)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            out[key] = mapping
    return NamespaceMappings(MappingProxyType(out), tuple(problems))


def container_ops(index: int, container: Mapping[str, Any], mappings: NamespaceMappings) -> list[Op]:
    """Patch operations for ``spec.containers[index]``; Denied with upstream's message on the first error."""
    amounts = requested(container, PREFIX)
    identities = mappings.identities
    totals: dict[str, int] = {}
    passthrough: dict[str, int] = {}
    replaced: list[str] = []
    modes: set[str] = set()
    env: dict[str, str] = {}
    units = 0
    for name, amount in amounts.items():
        mapping = mappings.by_name.get(name)
        if mapping is None:
            if name in identities:  # already the plugin's name: keep it, go on with the others
                passthrough[name] = amount
                continue
            raise Denied(f'no such resource: "{name}"')
        if mapping.mode not in (MODE_AF, MODE_REGION, MODE_REGION_DEVEL):
            raise Denied(
                f'"{name}" is registered with unknown mode "{mapping.mode}" instead of "af" or "region"'
            )
        modes.add(mapping.mode)
        if len(modes) > 1:
            raise Denied("container cannot be scheduled as it requires resources operated in different modes")
        if mapping.mode == MODE_REGION:
            if units + amount > MAX_REGION_UNITS:
                raise Denied(
                    f'"{name}": more than {MAX_REGION_UNITS} FPGA regions requested by one container'
                )
            for _ in range(amount):
                units += 1
                env[f"{ENV_REGION}_{units}"] = mapping.interface_id
                env[f"{ENV_AFU}_{units}"] = mapping.afu_id
        totals[mapping.resource] = totals.get(mapping.resource, 0) + amount
        replaced.append(name)
    base = f"/spec/containers/{index}/resources"
    ops: list[Op] = []
    for name in replaced:
        ops.append({"op": "remove", "path": f"{base}/limits/{escape(name)}"})
        ops.append({"op": "remove", "path": f"{base}/requests/{escape(name)}"})
    for resource, total in sorted(totals.items()):
        value = str(total + passthrough.get(resource, 0))
        ops.append({"op": "add", "path": f"{base}/limits/{escape(resource)}", "value": value})
        ops.append({"op": "add", "path": f"{base}/requests/{escape(resource)}", "value": value})
    if env:
        kept = [
            e
            for e in container.get("env") or []
            if not str(e.get("name", "")).startswith((ENV_REGION, ENV_AFU))
        ]
        kept_names = {e.get("name") for e in kept}
        merged = [{"name": k, "value": v} for k, v in env.items() if k not in kept_names] + kept
        merged.sort(key=lambda e: str(e.get("name", "")))
        ops.append({"op": "add", "path": f"/spec/containers/{index}/env", "value": merged})
    return ops


def mutate_pod(pod: Mapping[str, Any], mappings: NamespaceMappings) -> list[Op]:
    """Operations for every container (init containers are not mapped, as upstream)."""
    return [op for i, c in enumerate(containers(pod)) for op in container_ops(i, c, mappings)]
