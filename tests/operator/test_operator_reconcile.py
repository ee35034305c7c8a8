"""Reconcile decisions: plan, status from DaemonSet and pods, node conflicts between CRs of one kind."""

from __future__ import annotations

from typing import Any

from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.reconcile import (
    CONDITION_NODE_CONFLICT,
    compute_status,
    conflict_condition,
    node_conflicts,
    nodes_by_daemonset,
    plan,
    pod_node,
    status_changed,
    status_patch,
)

NS = "ns"


def cr(name: str = "a", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": spec or {"image": "intel/intel-gpu-plugin:0.36.0"},
    }


def ds_pod(ds: str, node: str = "", pending_on: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node:
        spec["nodeName"] = node
    if pending_on:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pending_on]}]}
                    ]
                }
            }
        }
    return {
        "metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": ds, "controller": True}]},
        "spec": spec,
    }


def test_plan_builds_owned_daemonset_with_effective_image() -> None:
    p = plan(DeviceKind.GPU, cr(spec={"image": "intel/intel-gpu-plugin:0.31.0"}), {}, NS, "secret")
    assert p.daemonset is not None and not p.errors
    assert p.daemonset["metadata"]["ownerReferences"][0]["uid"] == "uid-a"
    assert p.daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == node_image()
    assert len(p.image_notes) == 1


def test_plan_with_sha_env() -> None:
    pinned = "intel/intel-gpu-plugin@sha256:" + "1" * 64
    p = plan(DeviceKind.GPU, cr(), {"INTEL_GPU_PLUGIN_SHA": pinned}, NS)
    assert p.daemonset is not None
    assert p.daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == pinned


def test_plan_on_bad_input_does_not_raise() -> None:
    bad = plan(DeviceKind.GPU, cr(spec={"sharedDevNum": "many"}), {}, NS)
    assert bad.daemonset is None and bad.errors[0].path == "spec.sharedDevNum"
    nameless = plan(DeviceKind.GPU, {"spec": {}}, {}, NS)
    assert nameless.daemonset is None and nameless.errors


def test_pod_node_and_grouping() -> None:
    assert pod_node(ds_pod("x", node="n1")) == "n1"
    assert pod_node(ds_pod("x", pending_on="n2")) == "n2"
    assert pod_node(ds_pod("x")) == ""
    stray = {
        "metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "r", "controller": True}]},
        "spec": {"nodeName": "n9"},
    }
    grouped = nodes_by_daemonset(
        [
            ds_pod("a", "n2"),
            ds_pod("a", "n1"),
            ds_pod("b", pending_on="n3"),
            stray,
            {"metadata": {}, "spec": {"nodeName": "n8"}},
        ]
    )
    assert grouped == {"a": ("n1", "n2"), "b": ("n3",)}


def test_node_conflicts() -> None:
    got = node_conflicts({"a": ["n1", "n2"], "b": ["n2", "n3"], "c": ["n4"], "d": ["n2"]})
    assert got == {
        "a": {"b": ("n2",), "d": ("n2",)},
        "b": {"a": ("n2",), "d": ("n2",)},
        "d": {"a": ("n2",), "b": ("n2",)},
    }
    assert node_conflicts({"a": ["n1"], "b": ["n2"]}) == {}


def test_conflict_condition_keeps_transition_time() -> None:
    cond = conflict_condition(DeviceKind.GPU, {"b": [f"n{i}" for i in range(7)]}, "T2")
    assert (cond.type, cond.status, cond.last_transition_time) == (CONDITION_NODE_CONFLICT, "True", "T2")
    assert "GpuDevicePlugin b" in cond.message and "and 2 more" in cond.message
    prev = [{"type": CONDITION_NODE_CONFLICT, "status": "True", "lastTransitionTime": "T1"}]
    assert conflict_condition(DeviceKind.GPU, {"b": ["n1"]}, "T3", prev).last_transition_time == "T1"
    cleared = conflict_condition(DeviceKind.GPU, {}, "T4", prev)
    assert (cleared.status, cleared.last_transition_time) == ("False", "T4")


def test_status_from_daemonset() -> None:
    ds = {
        "metadata": {"name": "intel-gpu-plugin-a", "namespace": NS, "uid": "d1", "resourceVersion": "7"},
        "status": {"desiredNumberScheduled": 3, "numberReady": 2},
    }
    st = compute_status(ds, ("n1", "n2"))
    out = st.to_dict()
    assert out["desiredNumberScheduled"] == 3 and out["numberReady"] == 2
    assert out["nodeNames"] == ["n1", "n2"]
    assert out["controlledDaemonSet"] == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "intel-gpu-plugin-a",
        "namespace": NS,
        "uid": "d1",
    }
    assert compute_status(None, ()).to_dict() == {
        "desiredNumberScheduled": 0,
        "numberReady": 0,
        "nodeNames": [],
    }


def test_status_changed_only_on_real_change() -> None:
    ds = {"metadata": {"name": "x", "namespace": NS, "uid": "d1"}, "status": {"desiredNumberScheduled": 1}}
    st = compute_status(ds, ("n1",))
    assert status_changed(None, st)
    assert not status_changed(st.to_dict(), st)
    assert status_changed({**st.to_dict(), "numberReady": 1}, st)
    assert not status_changed(
        {k: v for k, v in st.to_dict().items() if k != "nodeNames"}, compute_status(ds, ())
    )
    cond = conflict_condition(DeviceKind.GPU, {}, "T")
    assert status_changed(st.to_dict(), compute_status(ds, ("n1",), (cond,)))


def test_status_patch_removes_stale_keys_and_keeps_foreign_ones() -> None:
    ds = {"metadata": {"name": "x", "namespace": NS, "uid": "d1"}, "status": {"desiredNumberScheduled": 1}}
    want = compute_status(ds, ("n1",))
    current = {
        **want.to_dict(),
        "controlledDaemonSet": {**want.to_dict()["controlledDaemonSet"], "resourceVersion": "9"},
        "extra": 1,
    }
    assert status_patch(current, want) == {"controlledDaemonSet": {"resourceVersion": None}}
    cond = conflict_condition(DeviceKind.GPU, {}, "T")
    with_cond = {**want.to_dict(), "conditions": [cond.to_dict()]}
    assert status_patch(with_cond, want) == {"conditions": None}
    assert status_patch(want.to_dict(), want) is None
