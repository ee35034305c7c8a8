"""Every step of the three controllers' pure decisions, and each fix of upstream's quirks."""

from __future__ import annotations

from typing import Any

import pytest

from intel_device_plugins.rmd import images
from intel_device_plugins.rmd.model import RmdConfigSpec, RmdWorkloadSpec, parse
from intel_device_plugins.rmd.payload import (
    build_payload,
    find,
    host_cpus,
    node_state_entry,
    parse_uuid,
    workload_uuid,
)
from intel_device_plugins.rmd.reconcile import (
    DEFAULT_RMD_SELECTOR,
    Act,
    NodeAction,
    NodeInfo,
    NodeResult,
    NodeView,
    cleanup_done,
    needs_reconcile,
    node_state_status,
    nodes_holding,
    orphans,
    plan_config,
    plan_workload,
    rmd_host,
    targets,
    workload_status,
)
from intel_device_plugins.sim.rmd import RmdState

OWNER = {"name": "rmdconfig", "uid": "u-1"}


def _spec(**over: Any) -> RmdWorkloadSpec:
    raw: dict[str, Any] = {"coreIds": ["0-3"], "rdt": {"cache": {"max": 2, "min": 2}}, "nodes": ["n1", "n2"]}
    raw.update(over)
    return parse(RmdWorkloadSpec, {k: v for k, v in raw.items() if v is not None})


# ------------------------------------------------------------------ RmdConfig


def test_rmd_image_from_the_config_is_used() -> None:
    plan = plan_config(parse(RmdConfigSpec, {"rmdImage": "example/rmd:v9"}), OWNER, "ns", [], [])
    containers = plan.daemonsets[0]["spec"]["template"]["spec"]["containers"]
    assert containers[0]["image"] == "example/rmd:v9"
    default = plan_config(parse(RmdConfigSpec, {}), OWNER, "ns", [], [])
    assert (
        default.daemonsets[0]["spec"]["template"]["spec"]["containers"][0]["image"]
        == images.default_rmd_image()
    )


def test_agent_and_plugin_run_this_projects_node_image_with_their_command() -> None:
    spec = parse(RmdConfigSpec, {"deployNodeAgent": True})
    for plan, want in (
        (plan_config(spec, OWNER, "ns", [], []), images.default_node_image()),
        (plan_config(spec, OWNER, "ns", [], [], "registry.example/x/node:1"), "registry.example/x/node:1"),
    ):
        rmd_ds, agent_ds = plan.daemonsets
        _, plugin = rmd_ds["spec"]["template"]["spec"]["containers"]
        (agent,) = agent_ds["spec"]["template"]["spec"]["containers"]
        assert (plugin["image"], plugin["command"][0]) == (want, images.DEVICE_PLUGIN_COMMAND)
        assert (agent["image"], agent["command"]) == (want, [images.NODE_AGENT_COMMAND])


def test_empty_node_selector_keeps_the_nfd_default() -> None:
    nodes = [NodeInfo("rdt", {**DEFAULT_RMD_SELECTOR}), NodeInfo("plain", {})]
    plan = plan_config(parse(RmdConfigSpec, {"rmdNodeSelector": {}}), OWNER, "ns", nodes, [])
    for ds in plan.daemonsets:
        assert ds["spec"]["template"]["spec"]["nodeSelector"] == dict(DEFAULT_RMD_SELECTOR)
    assert plan.status == {"nodes": ["rdt"]}
    assert [c["spec"]["node"] for c in plan.create_node_states] == ["rdt"]


def test_node_agent_toggle_and_node_states_follow_the_selection() -> None:
    cfg = parse(RmdConfigSpec, {"rmdNodeSelector": {"pool": "a"}, "deployNodeAgent": True})
    nodes = [NodeInfo("n1", {"pool": "a"}, "uid-1"), NodeInfo("n2", {"pool": "b"})]
    plan = plan_config(cfg, OWNER, "ns", nodes, ["rmd-node-state-n1", "rmd-node-state-n2"])
    assert [d["metadata"]["name"] for d in plan.daemonsets] == ["rmd", "rmd-node-agent"]
    assert not plan.delete_agent and plan.create_node_states == ()
    assert plan.delete_node_states == ("rmd-node-state-n2",)
    off = plan_config(parse(RmdConfigSpec, {"rmdNodeSelector": {"pool": "b"}}), OWNER, "ns", nodes, [])
    assert off.delete_agent and [d["metadata"]["name"] for d in off.daemonsets] == ["rmd"]
    created = off.create_node_states[0]
    assert created["metadata"]["name"] == "rmd-node-state-n2"
    assert created["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_rmd_daemonset_is_tls_and_least_privilege() -> None:
    ds = plan_config(parse(RmdConfigSpec, {}), OWNER, "ns", [], []).daemonsets[0]
    rmd, plugin = ds["spec"]["template"]["spec"]["containers"]
    assert rmd["ports"][0]["containerPort"] == 8443
    assert "https://127.0.0.1:8443" in plugin["command"]
    assert plugin["securityContext"]["readOnlyRootFilesystem"] is True
    assert ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_rmd_host_by_node_name_then_host_ip() -> None:
    pods: list[dict[str, Any]] = [
        {"spec": {"nodeName": "n1"}, "status": {"podIP": "10.0.0.1"}},
        {"spec": {}, "status": {"hostIP": "192.168.0.2", "podIPs": [{"ip": "10.0.0.2"}]}},
        {"spec": {"nodeName": "n3"}, "status": {}},
    ]
    assert rmd_host(NodeInfo("n1", {}), [], pods) == "10.0.0.1"
    assert rmd_host(NodeInfo("n2", {}), ["192.168.0.2"], pods) == "10.0.0.2"
    with pytest.raises(LookupError, match="no RMD pod runs on node n4"):
        rmd_host(NodeInfo("n4", {}), [], pods)
    with pytest.raises(LookupError, match="has no address yet"):
        rmd_host(NodeInfo("n3", {}), [], pods)


# ------------------------------------------------------------------ payload


def test_payload_without_cache_does_not_ask_for_the_shared_pool() -> None:
    spec = _spec(rdt=None, policy="gold")
    payload = build_payload(spec, "ns/x")
    assert payload == {"uuid": "ns/x", "core_ids": ["0-3"], "policy": "gold"}
    assert "rdt" not in payload and "status" not in payload


def test_payload_all_cores_minus_reserved_and_pstate_as_number() -> None:
    caches = RmdState().cache_level("l3")
    spec = _spec(
        coreIds=None,
        allCores=True,
        reservedCoreIds=["0-3"],
        plugins={"pstate": {"ratio": "1.5", "monitoring": "on"}},
    )
    payload = build_payload(spec, "ns/x", host_cpus(caches))
    assert payload["core_ids"] == ["4-31"]
    assert payload["plugins"] == {"pstate": {"ratio": 1.5, "monitoring": "on"}}
    with pytest.raises(ValueError, match="allCores needs"):
        build_payload(spec, "ns/x")


def test_workload_identity_includes_the_namespace() -> None:
    assert workload_uuid("default", "x") != workload_uuid("team-a", "x")
    assert parse_uuid("team-a/x") == ("team-a", "x")
    assert parse_uuid("x") is None  # upstream's or someone else's workload: never ours to remove
    rmd = RmdState()
    rmd.create(build_payload(_spec(coreIds=["0"]), "default/x"))
    view = NodeView("n1", tuple(rmd.list_workloads()))
    (action,) = plan_workload(_spec(coreIds=["8"], nodes=["n1"]), "team-a/x", ["n1"], [view])
    assert action.act is Act.CREATE  # default/x is not team-a/x


# ------------------------------------------------------------------ RmdWorkload


def test_targets_by_name_and_selector() -> None:
    nodes = [NodeInfo("n1", {"a": "1"}), NodeInfo("n2", {"a": "1"}), NodeInfo("n3", {"a": "2"})]
    rmd_nodes = frozenset({"n1", "n3"})
    assert targets(_spec(nodes=["n1", "n2"]), nodes, rmd_nodes) == (("n1",), ("n2",))
    assert targets(_spec(nodes=None, nodeSelector={"a": "1"}), nodes, rmd_nodes) == (("n1",), ())


def _view(rmd: RmdState, node: str = "n1") -> NodeView:
    return NodeView(node, tuple(rmd.list_workloads()), frozenset(range(32)))


def test_plan_create_keep_update_replace_delete() -> None:
    rmd = RmdState()
    spec = _spec(nodes=["n1"])
    (a,) = plan_workload(spec, "ns/x", ["n1"], [_view(rmd)])
    assert a.act is Act.CREATE and a.payload is not None
    rmd.create(dict(a.payload))
    assert plan_workload(spec, "ns/x", ["n1"], [_view(rmd)])[0].act is Act.KEEP
    assert (
        plan_workload(_spec(coreIds=["0", "1-3"], nodes=["n1"]), "ns/x", ["n1"], [_view(rmd)])[0].act
        is Act.KEEP
    )
    bigger = _spec(nodes=["n1"], rdt={"cache": {"max": 3, "min": 3}})
    update = plan_workload(bigger, "ns/x", ["n1"], [_view(rmd)])[0]
    assert (update.act, update.workload_id) == (Act.UPDATE, "1")
    moved = plan_workload(_spec(coreIds=["8-9"], nodes=["n1"]), "ns/x", ["n1"], [_view(rmd)])[0]
    assert moved.act is Act.REPLACE
    elsewhere = plan_workload(_spec(nodes=["n2"]), "ns/x", ["n2"], [_view(rmd), _view(RmdState(), "n2")])
    assert [(x.node, x.act) for x in elsewhere] == [("n1", Act.DELETE), ("n2", Act.CREATE)]
    deleting = plan_workload(None, "ns/x", [], [_view(rmd), NodeView("n2", None, error="refused")])
    assert [(x.node, x.act) for x in deleting] == [("n1", Act.DELETE), ("n2", Act.UNREACHABLE)]


def test_status_reports_pstate_and_every_node() -> None:
    rmd = RmdState()
    spec = _spec(nodes=["n1"], plugins={"pstate": {"ratio": "3.0", "monitoring": "on"}})
    created = rmd.create(build_payload(spec, "ns/x"))
    status = workload_status(
        None,
        ["n1", "n2"],
        ["n9"],
        [NodeResult("n1", "Success: 201", created), NodeResult("n2", "Fail: x", None)],
        3,
    )
    n1 = status["workloadStates"]["n1"]
    assert n1["plugins"] == {"pstate": {"ratio": "3.000000", "monitoring": "on"}}
    assert (n1["id"], n1["status"], n1["response"]) == ("1", "Successful", "Success: 201")
    assert n1["rdt"] == {"cache": {"max": 2, "min": 2}}
    assert status["workloadStates"]["n2"] == {"response": "Fail: x"}
    assert "does not run RMD" in status["workloadStates"]["n9"]["response"]
    assert status["enforced"] == "1/3" and status["observedGeneration"] == 3


def test_unreachable_node_keeps_its_last_known_workload_state() -> None:
    previous = {"workloadStates": {"n1": {"id": "4", "status": "Successful", "response": "Success: 201"}}}
    status = workload_status(
        previous, ["n1"], [], [NodeResult("n1", "Fail: RMD unreachable: refused", None)], None
    )
    assert status["workloadStates"]["n1"] == {
        "id": "4",
        "status": "Successful",
        "response": "Fail: RMD unreachable: refused",
    }


def test_removed_nodes_leave_the_status() -> None:
    previous = {"workloadStates": {"n1": {"id": "4"}}}
    status = workload_status(previous, [], [], [NodeResult("n1", "Success: 200", None, removed=True)], None)
    assert status["workloadStates"] == {} and status["enforced"] == "0/0"


def test_cleanup_waits_for_unreachable_nodes_up_to_the_grace_period() -> None:
    unreachable = [NodeAction("n2", Act.UNREACHABLE)]
    assert not cleanup_done(unreachable, [], 10, 120)
    assert cleanup_done(unreachable, [], 121, 120)
    assert not cleanup_done([NodeAction("n1", Act.DELETE, "1")], ["n1"], 500, 120)
    assert cleanup_done([NodeAction("n1", Act.DELETE, "1")], [], 0, 120)


# ------------------------------------------------------------------ RmdNodeState


def test_node_state_keeps_last_known_workloads_marked_stale() -> None:
    rmd = RmdState()
    rmd.create(build_payload(_spec(plugins={"pstate": {"ratio": "3.0", "monitoring": "on"}}), "ns/x"))
    fresh = node_state_status(None, rmd.list_workloads(), "", "2026-01-01T00:00:00Z")
    entry = fresh["workloads"]["ns/x"]
    assert entry["Core IDs"] == "0-3" and entry["Cache Max"] == "2" and entry["P-State Ratio"] == "3.000000"
    assert entry["P-State Monitoring"] == "on" and entry["Origin"] == "REST"
    assert fresh["stale"] is False and fresh["workloadCount"] == 1
    stale = node_state_status(fresh, None, "GET https://x/v1/workloads: refused", "2026-01-01T00:01:00Z")
    assert stale["workloads"] == fresh["workloads"] and stale["stale"] is True
    assert stale["lastSync"] == "2026-01-01T00:00:00Z" and "refused" in stale["message"]


def test_orphans_are_only_our_workloads_without_a_cr() -> None:
    workloads = [
        {"id": "1", "uuid": "ns/live", "origin": "REST"},
        {"id": "2", "uuid": "ns/gone", "origin": "REST"},
        {"id": "3", "uuid": "gone", "origin": "REST"},
        {"id": "4", "uuid": "ns/gone2", "origin": "CLI"},
    ]
    assert orphans(workloads, frozenset({("ns", "live")})) == ("2",)


def test_restarted_rmd_is_noticed_from_the_node_state() -> None:
    crs = {
        ("ns", "x"): {"workloadStates": {"n1": {"id": "1"}}},
        ("ns", "y"): {"workloadStates": {"n2": {"id": "1"}}},
    }
    assert needs_reconcile([], "n1", crs) == (("ns", "x"),)
    assert needs_reconcile([{"uuid": "ns/x", "id": "1"}], "n1", crs) == ()


def test_node_state_entry_of_mba() -> None:
    entry = node_state_entry({"id": "1", "rdt": {"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}}})
    assert entry == {"ID": "1", "Cache Max": "2", "Cache Min": "2", "MBA Percentage": "50"}


def test_idle_node_state_is_not_rewritten_until_the_refresh() -> None:
    rmd = RmdState()
    rmd.create(build_payload(_spec(), "ns/x"))
    first = node_state_status(None, rmd.list_workloads(), "", "T1")
    assert node_state_status(first, rmd.list_workloads(), "", "T2", sync_age_s=5) == first
    assert node_state_status(first, rmd.list_workloads(), "", "T2", sync_age_s=61)["lastSync"] == "T2"
    rmd.create(build_payload(_spec(coreIds=["9"]), "ns/y"))
    assert node_state_status(first, rmd.list_workloads(), "", "T2", sync_age_s=5)["lastSync"] == "T2"


def _carry_out(rmd: RmdState, action: NodeAction) -> None:
    """What the operator does with one node's action, against the simulated RMD."""
    payload = dict(action.payload or {})
    if action.act in (Act.DELETE, Act.REPLACE):
        rmd.delete(action.workload_id)
    if action.act in (Act.CREATE, Act.REPLACE):
        rmd.create(payload)
    if action.act is Act.UPDATE:
        rmd.patch(action.workload_id, payload)


def _converge(rmd: RmdState, spec: RmdWorkloadSpec) -> tuple[Act, dict[str, Any]]:
    """Two reconciles of ``spec``, then what a third would do and what RMD holds."""
    for _ in range(2):
        (action,) = plan_workload(spec, "ns/x", ["n1"], [_view(rmd)])
        _carry_out(rmd, action)
    (action,) = plan_workload(spec, "ns/x", ["n1"], [_view(rmd)])
    held = find(rmd.list_workloads(), "ns/x")
    assert held is not None
    return action.act, dict(held)


def test_non_contiguous_cpus_reach_rmd_as_elements_it_accepts() -> None:
    rmd = RmdState()
    spec = _spec(coreIds=["1-2,9"], nodes=["n1"], plugins={"pstate": {"ratio": "1.5"}})
    act, held = _converge(rmd, spec)
    assert (act, held["core_ids"]) == (Act.KEEP, ["1-2", "9"])
    all_cores = _spec(coreIds=None, allCores=True, reservedCoreIds=["3-5"], nodes=["n1"])
    assert build_payload(all_cores, "ns/y", frozenset(range(8)))["core_ids"] == ["0-2", "6-7"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"rdt": {"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}}}, {}),
        ({"plugins": {"pstate": {"ratio": "1.5", "monitoring": "on"}}}, {}),
        (
            {"rdt": {"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}}},
            {"policy": "gold", "rdt": None},
        ),
    ],
)
def test_removing_a_setting_reaches_rmd(before: dict[str, Any], after: dict[str, Any]) -> None:
    rmd = RmdState()
    act, _ = _converge(rmd, _spec(nodes=["n1"], **before))
    assert act is Act.KEEP
    final = _spec(nodes=["n1"], **after)
    act, held = _converge(rmd, final)
    assert act is Act.KEEP
    assert held["rdt"]["mba"] == {} and "plugins" not in held
    assert held.get("policy") == final.policy


def test_a_changed_mba_is_patched_in_place() -> None:
    rmd = RmdState()
    _converge(rmd, _spec(nodes=["n1"], rdt={"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}}))
    (action,) = plan_workload(
        _spec(nodes=["n1"], rdt={"cache": {"max": 2, "min": 2}, "mba": {"percentage": 30}}),
        "ns/x",
        ["n1"],
        [_view(rmd)],
    )
    assert action.act is Act.UPDATE
    _carry_out(rmd, action)
    assert rmd.list_workloads()[0]["rdt"]["mba"] == {"percentage": 30}


def test_policy_workload_is_left_alone_once_enforced() -> None:
    act, held = _converge(RmdState(), _spec(nodes=["n1"], policy="gold", rdt=None))
    assert act is Act.KEEP and held["rdt"]["cache"] == {"max": 4, "min": 4}


def test_nodes_holding_a_workload_come_from_the_node_states() -> None:
    rmd = RmdState()
    rmd.create(build_payload(_spec(), "ns/x"))
    held = {"spec": {"node": "n1"}, "status": node_state_status(None, rmd.list_workloads(), "", "T")}
    empty = {"spec": {"node": "n2"}, "status": node_state_status(None, [], "", "T")}
    assert nodes_holding("ns/x", [held, empty, {"spec": {"node": "n3"}}]) == {"n1"}
    assert nodes_holding("ns/y", [held, empty]) == frozenset()
