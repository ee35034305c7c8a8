"""The node agent's decisions (docs/rmd.md), pure: pod + its CPUs → the RmdWorkloads it should own.

A container asking for ``intel.com/l3_cache_ways`` (in its limits) and owning exclusive CPUs (Guaranteed
QoS and an integral CPU request, so the kubelet's static CPU manager pins it) gets an RmdWorkload named
``<pod>-rmd-workload-<container>`` in the pod's namespace, owned by the pod, for exactly those CPUs, with
max = min = the ways requested and the container's annotations applied. A container without exclusive CPUs
gets an event saying why, never an empty workload.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from intel_device_plugins.rmd.model import API_VERSION, RmdWorkloadSpec, SpecError, parse
from intel_device_plugins.rmd.payload import rmd_core_ids

RESOURCE: Final = "intel.com/l3_cache_ways"
WORKLOAD_INFIX: Final = "-rmd-workload-"
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX: Final[Mapping[str, Decimal]] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(1000),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity(text: Any) -> Decimal:
    """A Kubernetes quantity ("3", "500m", "64Mi") as a number; ValueError when malformed."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ValueError(f"invalid quantity {text!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _resources(c: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return (c.get("resources") or {}).get(kind) or {}


def is_guaranteed(pod: Mapping[str, Any]) -> bool:
    """QoS class Guaranteed: every container has CPU and memory limits equal to its requests."""
    qos = (pod.get("status") or {}).get("qosClass")
    if qos:
        return bool(qos == "Guaranteed")
    for c in _containers(pod):
        limits, requests = _resources(c, "limits"), _resources(c, "requests")
        for res in ("cpu", "memory"):
            if res not in limits:
                return False
            if res in requests and quantity(requests[res]) != quantity(limits[res]):
                return False
    return True


def exclusive_cpus(pod: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
    """Whether the static CPU manager gives this container CPUs of its own."""
    if not is_guaranteed(pod):
        return False
    cpu = _resources(container, "requests").get("cpu", _resources(container, "limits").get("cpu"))
    try:
        value = quantity(cpu) if cpu is not None else Decimal(0)
    except ValueError:
        return False
    return value > 0 and value == value.to_integral_value()


def workload_name(pod: str, container: str) -> str:
    return f"{pod}{WORKLOAD_INFIX}{container}"


def _annotation_fields(container: str, annotations: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Spec fragments from ``<container>_<setting>`` annotations, and complaints about bad values."""
    spec: dict[str, Any] = {}
    problems: list[str] = []

    def get(suffix: str) -> str:
        return str(annotations.get(f"{container}_{suffix}", "")).strip()

    if get("policy"):
        spec["policy"] = get("policy")
    for suffix, key in (("mba_percentage", "percentage"), ("mba_mbps", "mbps")):
        if get(suffix):
            try:
                spec.setdefault("rdt", {}).setdefault("mba", {})[key] = int(get(suffix))
            except ValueError:
                problems.append(f"annotation {container}_{suffix}={get(suffix)!r} is not an integer")
    pstate: dict[str, str] = {}
    if get("pstate_ratio"):
        pstate["ratio"] = get("pstate_ratio")
    if get("pstate_monitoring"):
        pstate["monitoring"] = get("pstate_monitoring")
    if pstate:
        spec["plugins"] = {"pstate": pstate}
    return spec, problems


@dataclasses.dataclass(frozen=True)
class Desired:
    """One container's outcome: the RmdWorkload to own, or the reason there is none (an event)."""

    container: str
    workload: dict[str, Any] | None
    problem: str = ""


def desired_workloads(pod: Mapping[str, Any], cpus: Mapping[str, Sequence[int]]) -> tuple[Desired, ...]:
    """The workloads a Running pod should own; ``cpus`` is container → exclusive CPU ids (PodResources)."""
    meta = pod.get("metadata") or {}
    pod_name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "default")
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    annotations = meta.get("annotations") or {}
    out: list[Desired] = []
    for c in _containers(pod):
        name = str(c.get("name", ""))
        limit = _resources(c, "limits").get(RESOURCE)
        if limit is None or WORKLOAD_INFIX in name:
            continue
        try:
            ways_q = quantity(limit)
        except ValueError:
            out.append(Desired(name, None, f"{RESOURCE} limit {limit!r} is not a number"))
            continue
        if ways_q != ways_q.to_integral_value() or ways_q < 1:
            out.append(Desired(name, None, f"{RESOURCE} limit {limit!r} is not a positive whole number"))
            continue
        if not exclusive_cpus(pod, c):
            out.append(
                Desired(
                    name,
                    None,
                    f"container {name} requests {RESOURCE} but has no exclusive CPUs: cache ways are given "
                    "to CPUs, so it needs Guaranteed QoS and a whole-number CPU request (static CPU manager)",
                )
            )
            continue
        own = sorted(cpus.get(name) or ())
        if not own:
            out.append(Desired(name, None, f"the kubelet reports no exclusive CPUs for container {name} yet"))
            continue
        ways = int(ways_q)
        extra, problems = _annotation_fields(name, annotations)
        spec: dict[str, Any] = {
            "coreIds": rmd_core_ids(frozenset(own)),
            "rdt": {"cache": {"max": ways, "min": ways}, **(extra.pop("rdt", {}))},
            "nodes": [node],
            **extra,
        }
        try:
            parse(RmdWorkloadSpec, spec)
        except SpecError as exc:
            problems.append(str(exc))
        if problems:
            out.append(Desired(name, None, f"container {name}: " + "; ".join(problems)))
            continue
        out.append(
            Desired(
                name,
                {
                    "apiVersion": API_VERSION,
                    "kind": "RmdWorkload",
                    "metadata": {
                        "name": workload_name(pod_name, name),
                        "namespace": namespace,
                        "labels": {"app.kubernetes.io/managed-by": "intel-rmd-node-agent"},
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": pod_name,
                                "uid": str(meta.get("uid", "")),
                                # No blockOwnerDeletion: it needs pods/finalizers, which the agent lacks,
                                # and the workload's own finalizer already cleans RMD up.
                                "controller": True,
                            }
                        ],
                    },
                    "spec": spec,
                },
            )
        )
    return tuple(out)


def needs_update(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    """Whether the stored workload's spec differs (annotation or CPU changes propagate)."""
    return existing is None or (existing.get("spec") or {}) != desired["spec"]


def cpus_by_container(
    pod_resources: Sequence[Mapping[str, Any]], namespace: str, name: str
) -> dict[str, list[int]]:
    """Exclusive CPUs per container of pod ``namespace/name`` from a PodResources List (as dicts)."""
    for pr in pod_resources:
        if pr.get("name") == name and pr.get("namespace") == namespace:
            return {
                str(c.get("name")): sorted(int(x) for x in c.get("cpu_ids") or ())
                for c in pr.get("containers") or ()
            }
    return {}
