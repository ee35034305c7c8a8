"""The shipped RBAC grants only what the code calls: rules read straight from deploy/ (the charts render the
same objects, tests/deploy/test_charts.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from intel_device_plugins.kube.leader import LEASE_NAME as OPERATOR_LEASE
from intel_device_plugins.rmd.operator import LEASE_NAME as RMD_LEASE
from intel_device_plugins.rmd.reconcile import RMD_CLIENT_SECRET, RMD_SERVER_SECRET

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
Rule = dict[str, Any]


def rules_of(path: Path, kind: str, name: str) -> list[Rule]:
    (doc,) = (
        d
        for d in yaml.safe_load_all(path.read_text())
        if d and d["kind"] == kind and d["metadata"]["name"] == name
    )
    rules: list[Rule] = doc["rules"]
    return rules


def rules_for(rules: list[Rule], resource: str) -> list[Rule]:
    return [r for r in rules if resource in r["resources"]]


def test_operator_creates_events_and_patches_status_only() -> None:
    rules = rules_of(DEPLOY / "operator" / "rbac" / "role.yaml", "ClusterRole", "manager-role")
    assert rules_for(rules, "events") == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    status = [r for r in rules if any(res.endswith("/status") for res in r["resources"])]
    assert len(status) == 1 and status[0]["verbs"] == ["patch"]


def test_operator_lease_rights_are_limited_to_its_lease_but_create() -> None:
    rules = rules_of(DEPLOY / "operator" / "rbac" / "role.yaml", "Role", "manager-role")
    leases = rules_for(rules, "leases")
    assert all(r.get("resourceNames") == [OPERATOR_LEASE] or r["verbs"] == ["create"] for r in leases)


def test_rmd_node_agent_gets_creates_and_patches_workloads_by_name() -> None:
    rules = rules_of(DEPLOY / "rmd" / "rbac" / "node_agent.yaml", "ClusterRole", "intel-rmd-node-agent")
    (workloads,) = rules_for(rules, "rmdworkloads")
    assert sorted(workloads["verbs"]) == ["create", "get", "patch"]


def test_rmd_operator_lease_rights_are_limited_to_its_lease_but_create() -> None:
    rules = rules_of(DEPLOY / "rmd" / "rbac" / "operator.yaml", "Role", "intel-rmd-operator")
    leases = rules_for(rules, "leases")
    assert {v for r in leases for v in r["verbs"]} == {"create", "get", "update"}
    for rule in leases:
        assert rule.get("resourceNames") == [RMD_LEASE] or rule["verbs"] == ["create"], rule


def test_rmd_operator_reads_and_updates_only_the_two_tls_secrets() -> None:
    path = DEPLOY / "rmd" / "rbac" / "operator.yaml"
    (secrets,) = rules_for(rules_of(path, "Role", "intel-rmd-operator"), "secrets")
    assert sorted(secrets["verbs"]) == ["get", "update"]
    assert sorted(secrets["resourceNames"]) == sorted([RMD_CLIENT_SECRET, RMD_SERVER_SECRET])
    assert not rules_for(rules_of(path, "ClusterRole", "intel-rmd-operator"), "secrets")


def test_dra_drivers_get_the_same_narrow_rights_standalone_and_from_the_operator() -> None:
    standalone = rules_of(DEPLOY / "dra" / "base" / "rbac.yaml", "ClusterRole", "intel-dra-driver")
    operator = rules_of(DEPLOY / "operator" / "rbac" / "dra_driver.yaml", "ClusterRole", "dra-driver")
    assert standalone == operator
    assert rules_for(standalone, "nodes") == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    # Health changes become Events on the node: creating them is all (no reading others' Events).
    assert rules_for(standalone, "events") == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
    ]
    (claims,) = rules_for(standalone, "resourceclaims")
    assert claims["verbs"] == ["get"]
    assert not [r for r in standalone if "secrets" in r["resources"] or "pods" in r["resources"]]
