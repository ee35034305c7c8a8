"""RmdWorkload spec ⇄ RMD's workload JSON, and what RMD reports back, as pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from intel_device_plugins.rmd import cpuset
from intel_device_plugins.rmd.model import RmdWorkloadSpec

# RMD's GET /v1/workloads fields shown in an RmdNodeState, under the keys upstream used.
NODE_STATE_KEYS: Final = (
    ("id", "ID"),
    ("core_ids", "Core IDs"),
    ("status", "Status"),
    ("cos_name", "Cos Name"),
    ("origin", "Origin"),
    ("policy", "Policy"),
)


def workload_uuid(namespace: str, name: str) -> str:
    """The RMD ``uuid`` of a CR: namespace and name, so default/x and team-a/x never collide.

    "/" cannot occur in either part, so the uuid names exactly one CR.
    """
    return f"{namespace}/{name}"


def parse_uuid(uuid: str) -> tuple[str, str] | None:
    """(namespace, name) of a uuid this operator wrote, else None (someone else's workload)."""
    namespace, sep, name = uuid.partition("/")
    return (namespace, name) if sep and namespace and name and "/" not in name else None


def host_cpus(cache_l3: Mapping[str, Any]) -> frozenset[int]:
    """Every CPU RMD manages: the union of the caches' ``share_cpu_list`` (``GET /v1/cache/l3``)."""
    caches = cache_l3.get("Caches") or {}
    if not isinstance(caches, Mapping):
        raise ValueError("RMD's /v1/cache/l3 answer has no Caches object")
    out: set[int] = set()
    for info in caches.values():
        out |= cpuset.parse(str((info or {}).get("share_cpu_list", "")))
    return frozenset(out)


def rmd_core_ids(cpus: frozenset[int]) -> list[str]:
    """CPUs as RMD reads them everywhere: one CPU (``"9"``) or one range (``"1-2"``) per element. Its P-state
    plugin refuses an element such as ``"1-2,9"`` (400 "Invalid params (core ids) received")."""
    text = cpuset.format_cpus(cpus)
    return text.split(",") if text else []


def build_payload(
    spec: RmdWorkloadSpec, uuid: str, cpus_of_host: frozenset[int] | None = None
) -> dict[str, Any]:
    """The JSON POSTed/PATCHed to RMD. Only what the spec sets is sent: no cache settings means no cache
    request (not the shared pool), and RMD fills status, cos_name and origin itself."""
    out: dict[str, Any] = {"uuid": uuid}
    if spec.all_cores:
        if cpus_of_host is None:
            raise ValueError("allCores needs the node's CPUs")
        out["core_ids"] = rmd_core_ids(cpus_of_host - cpuset.parse_all(spec.reserved_core_ids))
    else:
        out["core_ids"] = rmd_core_ids(spec.cpus())
    if spec.policy:
        out["policy"] = spec.policy
    rdt: dict[str, Any] = {}
    if spec.rdt is not None and spec.rdt.cache is not None:
        rdt["cache"] = {"max": spec.rdt.cache.max, "min": spec.rdt.cache.min}
    if spec.rdt is not None and spec.rdt.mba is not None:
        mba = spec.rdt.mba
        rdt["mba"] = {"percentage": mba.percentage} if mba.percentage is not None else {"mbps": mba.mbps}
    if rdt:
        out["rdt"] = rdt
    pstate = spec.plugins.pstate if spec.plugins is not None else None
    if pstate is not None and (pstate.ratio or pstate.monitoring):
        params: dict[str, Any] = {}
        if pstate.ratio:
            params["ratio"] = float(pstate.ratio)
        if pstate.monitoring:
            params["monitoring"] = pstate.monitoring
        out["plugins"] = {"pstate": params}
    return out


def _cpus(ids: Sequence[Any] | None) -> frozenset[int] | None:
    try:
        return cpuset.parse_all(str(c) for c in ids or ())
    except cpuset.CpusetError:
        return None


def _resources(w: Mapping[str, Any]) -> tuple[Any, ...]:
    rdt = w.get("rdt") or {}
    cache = rdt.get("cache") or {}
    mba = {k: v for k, v in (rdt.get("mba") or {}).items() if v}
    plugins = w.get("plugins") or {}
    cache_key = (cache.get("max", 0), cache.get("min", 0)) if cache else None
    return (w.get("policy") or "", cache_key, mba, plugins)


def same_cpus(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Whether two workloads name the same CPUs (however the lists are written)."""
    return _cpus(desired.get("core_ids")) == _cpus(actual.get("core_ids"))


def same_resources(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Whether policy, cache, MBA and plugin parameters agree. With a policy only the policy counts: RMD
    fills the cache (and the rest) from it and reports those values back."""
    if desired.get("policy"):
        return desired.get("policy") == actual.get("policy")
    return _resources(desired) == _resources(actual)


def patch_applies(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Whether RMD's PATCH turns ``actual`` into ``desired``. It changes only what the body names (a cache,
    an MBA percentage, plugin parameters) and keeps the rest, so anything to be taken away (MBA, a plugin,
    the cache), an MBA in MBps (which its update ignores) or a policy coming or going (it keeps the old
    settings beside the policy's) needs the workload replaced."""
    if desired.get("policy") or actual.get("policy"):
        return False
    _, want_cache, want_mba, want_plugins = _resources(desired)
    _, have_cache, have_mba, have_plugins = _resources(actual)
    if have_cache is not None and want_cache is None:
        return False
    if set(have_mba) - set(want_mba) or (want_mba.get("mbps") and want_mba != have_mba):
        return False
    return set(have_plugins) <= set(want_plugins)


def find(workloads: Sequence[Mapping[str, Any]], uuid: str) -> Mapping[str, Any] | None:
    return next((w for w in workloads if w.get("uuid") == uuid), None)


def workload_state(rmd_workload: Mapping[str, Any], response: str) -> dict[str, Any]:
    """``status.workloadStates[node]`` from what RMD holds (P-state ratio and monitoring both kept)."""
    out: dict[str, Any] = {"response": response}
    for src, dst in (("id", "id"), ("cos_name", "cosName"), ("status", "status"), ("policy", "policy")):
        if rmd_workload.get(src):
            out[dst] = str(rmd_workload[src])
    if rmd_workload.get("core_ids"):
        out["coreIds"] = [str(c) for c in rmd_workload["core_ids"]]
    rdt = rmd_workload.get("rdt") or {}
    rdt_out: dict[str, Any] = {}
    if rdt.get("cache"):
        rdt_out["cache"] = {k: int(rdt["cache"].get(k) or 0) for k in ("max", "min")}
    if rdt.get("mba"):
        rdt_out["mba"] = {k: int(v) for k, v in rdt["mba"].items() if k in ("percentage", "mbps") and v}
    if rdt_out:
        out["rdt"] = rdt_out
    pstate = (rmd_workload.get("plugins") or {}).get("pstate") or {}
    if pstate:
        ps: dict[str, str] = {}
        if pstate.get("ratio") is not None:
            ps["ratio"] = f"{float(pstate['ratio']):f}"
        if pstate.get("monitoring"):
            ps["monitoring"] = str(pstate["monitoring"])
        out["plugins"] = {"pstate": ps}
    return out


def node_state_entry(w: Mapping[str, Any]) -> dict[str, str]:
    """One workload as an RmdNodeState shows it (upstream's keys; empty values left out)."""
    out: dict[str, str] = {}
    for src, dst in NODE_STATE_KEYS:
        value = w.get(src)
        if value:
            out[dst] = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
    rdt = w.get("rdt") or {}
    cache, mba = rdt.get("cache") or {}, rdt.get("mba") or {}
    for key, label in (("max", "Cache Max"), ("min", "Cache Min")):
        if key in cache:
            out[label] = str(cache[key])
    for key, label in (("percentage", "MBA Percentage"), ("mbps", "MBA Mbps")):
        if mba.get(key):
            out[label] = str(mba[key])
    pstate = (w.get("plugins") or {}).get("pstate") or {}
    if pstate.get("ratio") is not None:
        out["P-State Ratio"] = f"{float(pstate['ratio']):f}"
    if pstate.get("monitoring"):
        out["P-State Monitoring"] = str(pstate["monitoring"])
    return out
