"""Reconcile decisions as pure functions: desired DaemonSet, status from DaemonSet and pods, node conflicts.

The controller shell fetches the CR, its DaemonSet and the pods of the kind, calls these, and applies the
result. Nothing here depends on the order of events, which is what makes the reconcile level-based.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import (
    AnySpec,
    Condition,
    FieldError,
    ObjectReference,
    PluginStatus,
    SpecError,
    parse_spec,
)
from intel_device_plugins.operator.upgrade import effective_spec

JSON = dict[str, Any]

CONDITION_NODE_CONFLICT: Final = "NodeConflict"
CONDITION_SPEC_VALID: Final = "SpecValid"
REASON_OVERLAP: Final = "OverlappingNodeSelector"
REASON_NO_OVERLAP: Final = "NoOverlap"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one reconcile pass should apply for a CR: a DaemonSet, or the spec errors that prevent one."""

    daemonset: JSON | None
    image_notes: tuple[str, ...] = ()
    errors: tuple[FieldError, ...] = ()


def plan(
    kind: DeviceKind,
    cr: Mapping[str, Any],
    env: Mapping[str, str],
    namespace: str,
    pull_secret: str = "",
    fpga_service_account: str = "",
    dra_service_account: str = "",
) -> Plan:
    """Desired DaemonSet for the CR object ``cr``; a malformed spec yields errors instead of an exception."""
    meta = cr.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    if not name or not uid:
        return Plan(None, errors=(FieldError("metadata", "name and uid are required"),))
    try:
        spec: AnySpec = parse_spec(kind, cr.get("spec"))
    except SpecError as exc:
        return Plan(None, errors=exc.errors)
    eff, notes = effective_spec(spec, env)
    return Plan(
        desired_daemonset(
            eff, Owner(kind, name, uid), namespace, pull_secret, fpga_service_account, dra_service_account
        ),
        notes,
    )


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def pod_node(pod: Mapping[str, Any]) -> str:
    """Node a DaemonSet pod runs on, or is pinned to by its node affinity while still pending."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or ()
    for term in terms:
        for field in term.get("matchFields") or ():
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return str(field["values"][0])
    return ""


def nodes_by_daemonset(pods: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """DaemonSet name → sorted node names of its pods (pods without a DaemonSet controller are ignored)."""
    out: dict[str, set[str]] = {}
    for pod in pods:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != "DaemonSet":
            continue
        node = pod_node(pod)
        if node:
            out.setdefault(str(ref.get("name")), set()).add(node)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def node_conflicts(nodes_per_cr: Mapping[str, Sequence[str]]) -> dict[str, dict[str, tuple[str, ...]]]:
    """For each CR: the other CRs of the kind whose plugin also lands on one of its nodes, and those nodes."""
    sets = {cr: set(nodes) for cr, nodes in nodes_per_cr.items()}
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    names = sorted(sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = sets[a] & sets[b]
            if shared:
                both = tuple(sorted(shared))
                out.setdefault(a, {})[b] = both
                out.setdefault(b, {})[a] = both
    return out


def _summarise(nodes: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def conflict_condition(
    kind: DeviceKind,
    conflicts: Mapping[str, Sequence[str]],
    now: str,
    previous: Sequence[Mapping[str, Any]] = (),
    generation: int | None = None,
) -> Condition:
    """``NodeConflict`` condition; ``lastTransitionTime`` only moves when the status flips."""
    if conflicts:
        parts = [f"{kind.kind} {other} on {_summarise(nodes)}" for other, nodes in sorted(conflicts.items())]
        status, reason = "True", REASON_OVERLAP
        message = "plugin pods of this CR share nodes with " + "; ".join(parts)
    else:
        status, reason, message = (
            "False",
            REASON_NO_OVERLAP,
            "no other CR of this kind deploys to these nodes",
        )
    since = now
    for old in previous:
        if old.get("type") == CONDITION_NODE_CONFLICT and old.get("status") == status:
            since = str(old.get("lastTransitionTime") or now)
    return Condition(CONDITION_NODE_CONFLICT, status, reason, message, since, generation)


def compute_status(
    daemonset: Mapping[str, Any] | None, node_names: Sequence[str], conditions: Sequence[Condition] = ()
) -> PluginStatus:
    """Status of a CR from its DaemonSet (None while it does not exist yet) and its pods' nodes."""
    if daemonset is None:
        return PluginStatus(conditions=tuple(conditions))
    meta = daemonset.get("metadata") or {}
    st = daemonset.get("status") or {}
    ref = ObjectReference(
        "apps/v1",
        "DaemonSet",
        str(meta.get("name", "")),
        str(meta.get("namespace", "")),
        str(meta.get("uid", "")),
    )
    return PluginStatus(
        desired_number_scheduled=int(st.get("desiredNumberScheduled") or 0),
        number_ready=int(st.get("numberReady") or 0),
        node_names=tuple(node_names),
        controlled_daemon_set=ref,
        conditions=tuple(conditions),
    )


MANAGED_STATUS_KEYS: Final = (
    "desiredNumberScheduled",
    "numberReady",
    "nodeNames",
    "controlledDaemonSet",
    "conditions",
)


def _merge_diff(current: Any, desired: Any) -> Any:
    """JSON merge patch turning ``current`` into ``desired`` for nested objects; lists are replaced whole."""
    if isinstance(desired, Mapping) and isinstance(current, Mapping):
        out: dict[str, Any] = {k: None for k in current if k not in desired}
        for k, v in desired.items():
            if k not in current:
                out[k] = v
            elif current[k] != v:
                out[k] = _merge_diff(current[k], v)
        return out
    return desired


def status_patch(current: Mapping[str, Any] | None, desired: PluginStatus) -> dict[str, Any] | None:
    """Merge patch for ``status`` that makes the managed keys equal ``desired``; None when nothing changes.

    Keys written by an older operator (such as a stale ``controlledDaemonSet.resourceVersion``) are removed,
    so applying the patch always converges and an idle reconcile writes nothing.
    """
    cur = {k: v for k, v in (current or {}).items() if k in MANAGED_STATUS_KEYS}
    want = desired.to_dict()
    if cur.get("nodeNames") is None and want.get("nodeNames") == []:
        cur["nodeNames"] = []
    patch = _merge_diff(cur, want)
    return patch or None


def status_changed(current: Mapping[str, Any] | None, desired: PluginStatus) -> bool:
    """True when writing ``desired`` would change the stored status (so idle reconciles write nothing)."""
    return status_patch(current, desired) is not None
