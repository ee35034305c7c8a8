"""The GPU driver's monitoring claim template against the real API server (the classes are checked
with every kind's in ``test_k8s_dra_classes.py``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.plugins.gpu.dra import (
    ADMIN_ACCESS_NAMESPACE_LABEL,
    GPU_DEVICE_CLASSES,
    monitoring_claim_template,
)
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.process import ManagedProcess
from tests.k8s.test_k8s_dra_gpu_driver import _pod, devices, driver

pytestmark = pytest.mark.k8s
__all__ = ["driver"]  # the fixture, run against this module's node


def test_monitoring_claim_template_is_accepted_in_an_admin_access_namespace(k8s_admin: KubeClient) -> None:
    namespace = "gpu-monitoring-dra"
    k8s_admin.apply_ok(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {ADMIN_ACCESS_NAMESPACE_LABEL: "true"}},
        },
    )
    template = monitoring_claim_template(namespace)

    created = k8s_admin.request(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates?dryRun=All&fieldValidation=Strict",
        template,
    )

    assert created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] is True


def test_the_same_template_is_refused_in_an_ordinary_namespace(k8s_admin: KubeClient) -> None:
    """The acceptance above is the label's doing: the check can fail."""
    namespace = "gpu-monitoring-plain"
    k8s_admin.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )

    with pytest.raises(ApiError) as refused:
        k8s_admin.request(
            "POST",
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates?dryRun=All",
            monitoring_claim_template(namespace),
        )

    assert refused.value.status in (403, 422)
    assert "admin" in str(refused.value).lower()


# ----- the monitoring claim allocated by the real scheduler on an SR-IOV node in use -----------------

SRIOV_NODE = """
[node]
numa_nodes = 1
[[gpu]]
driver = "i915"
device_id = "0x56c0"
memory_bytes = 17179869184
vfs = 2
[[gpu]]
driver = "xe"
device_id = "0xe20b"
memory_bytes = 12884901888
"""
PF = "0000-10-00-0-0x56c0"
PLAIN = "0000-11-00-0-0xe20b"
MONITORING_NAMESPACE = "gpu-monitoring-sched"


@pytest.fixture
def sim_node(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(SRIOV_NODE), tmp_path / "node")


def _request(exactly: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def _claim(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def _bound(client: KubeClient, pod: str) -> str | None:
    found = client.get(f"/api/v1/namespaces/{MONITORING_NAMESPACE}/pods/{pod}")
    if found["spec"].get("nodeName"):
        return "bound"
    for condition in found["status"].get("conditions", []):
        if (
            condition["type"] == "PodScheduled"
            and condition["status"] == "False"
            and condition.get("message")
        ):
            return "refused"
    return None


def test_monitoring_is_allocated_beside_a_vf_and_a_shared_card_in_use(
    driver: tuple[ManagedProcess, str, Path], k8s_admin: KubeClient
) -> None:
    """A VF and part of the plain card run workloads. The monitoring claim still gets every card: the
    plain card and the PF's monitoring view, no partition. Intel's selector-less monitoring claim, which
    takes the PF and its VFs, is refused on the same node: the check can fail."""
    process, node, _ = driver
    wait_for(
        "the slices",
        lambda: {PF, f"{PF}-monitor", PLAIN} <= set(devices(k8s_admin, node)) or None,
        timeout=30,
    )
    classes = [device_class(spec) for spec in GPU_DEVICE_CLASSES]
    for body in classes:
        k8s_admin.apply_ok("/apis/resource.k8s.io/v1/deviceclasses", body)
    k8s_admin.apply_ok(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": MONITORING_NAMESPACE, "labels": {ADMIN_ACCESS_NAMESPACE_LABEL: "true"}},
        },
    )
    pods = f"/api/v1/namespaces/{MONITORING_NAMESPACE}/pods"
    claims = f"/apis/resource.k8s.io/v1/namespaces/{MONITORING_NAMESPACE}/resourceclaims"
    vf_selector = 'device.attributes["gpu.intel.com"].type == "vf"'
    try:
        workloads = {
            "vf": _request(
                {"deviceClassName": "gpu.intel.com", "selectors": [{"cel": {"expression": vf_selector}}]}
            ),
            "share": _request(
                {"deviceClassName": "xe.gpu.intel.com", "capacity": {"requests": {"memory": "4Gi"}}}
            ),
        }
        for name, spec in workloads.items():
            k8s_admin.create(claims, _claim(name, spec))
            k8s_admin.create(pods, _pod(name, node, claim=name))
            assert wait_for(f"{name} bound", partial(_bound, k8s_admin, name), timeout=60) == "bound"

        template = monitoring_claim_template(MONITORING_NAMESPACE)
        k8s_admin.create(claims, _claim("monitor", template["spec"]["spec"]))
        k8s_admin.create(pods, _pod("monitor", node, claim="monitor"))
        assert wait_for("monitor bound", partial(_bound, k8s_admin, "monitor"), timeout=60) == "bound"
        results = k8s_admin.get(f"{claims}/monitor")["status"]["allocation"]["devices"]["results"]
        assert {r["device"] for r in results} == {PLAIN, f"{PF}-monitor"}
        assert all(r.get("adminAccess") is True for r in results), results

        everything = _request(
            {"deviceClassName": "gpu.intel.com", "allocationMode": "All", "adminAccess": True}
        )
        k8s_admin.create(claims, _claim("everything", everything))
        k8s_admin.create(pods, _pod("everything", node, claim="everything"))
        assert (
            wait_for("everything refused", partial(_bound, k8s_admin, "everything"), timeout=60) == "refused"
        )
    finally:
        k8s_admin.delete_if_present(f"/api/v1/namespaces/{MONITORING_NAMESPACE}")
        for body in classes:
            k8s_admin.delete_if_present(f"/apis/resource.k8s.io/v1/deviceclasses/{body['metadata']['name']}")
    process.check_alive()
