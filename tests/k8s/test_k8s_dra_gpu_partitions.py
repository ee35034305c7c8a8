"""A GPU PF and its VFs as overlapping partitions, allocated by the real scheduler from the slices."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.plugins.gpu.dra import GPU_DEVICE_CLASSES
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.process import ManagedProcess
from tests.k8s.test_k8s_dra_gpu_driver import _pod, devices, driver, slices

pytestmark = pytest.mark.k8s
__all__ = ["driver"]  # the fixture, run against this module's node

NODE = """
[node]
numa_nodes = 1
[[gpu]]
driver = "i915"
device_id = "0x56c0"
vfs = 2
"""
NAMESPACE = "gpu-dra-partitions"
PF = "0000-10-00-0-0x56c0"
VFS = ("0000-10-00-1-0x56c0", "0000-10-00-2-0x56c0")
"""The PF and its VFs by device name: VF i at the PF's routing ID + 1 + i, as the kernel places them."""


@pytest.fixture
def sim_node(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(NODE), tmp_path / "node")


def _claim(name: str, role: str) -> dict[str, Any]:
    selector = f'device.attributes["gpu.intel.com"].sriovRole == "{role}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.intel.com",
                            "selectors": [{"cel": {"expression": selector}}],
                        },
                    }
                ]
            }
        },
    }


def _state(client: KubeClient, pod: str) -> str | None:
    found = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}")
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


def test_the_whole_card_and_its_vfs_are_never_allocated_together(
    driver: tuple[ManagedProcess, str, Path], k8s_admin: KubeClient
) -> None:
    process, node, _ = driver
    published = wait_for(
        "three partitions and the monitoring view",
        lambda: len(devices(k8s_admin, node)) == 4 or None,
        timeout=30,
    )
    assert published
    found = devices(k8s_admin, node)
    assert found[PF]["consumesCounters"] == [
        {"counterSet": f"{PF}-functions", "counters": {"functions": {"value": "2"}}}
    ]
    assert {found[vf]["consumesCounters"][0]["counters"]["functions"]["value"] for vf in VFS} == {"1"}
    assert found[PF]["attributes"]["type"] == {"string": "gpu"}
    assert {found[vf]["attributes"]["type"]["string"] for vf in VFS} == {"vf"}
    assert found[PF]["attributes"]["sriov"] == {"bool": True}
    counter_sets = [s for s in slices(k8s_admin, node) if s["spec"].get("sharedCounters")]
    assert counter_sets and counter_sets[0]["spec"]["sharedCounters"][0]["name"] == f"{PF}-functions"

    classes = [device_class(spec) for spec in GPU_DEVICE_CLASSES]
    for body in classes:
        k8s_admin.apply_ok("/apis/resource.k8s.io/v1/deviceclasses", body)
    k8s_admin.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    try:
        k8s_admin.create(claims, _claim("vf", "vf"))
        k8s_admin.create(pods, _pod("vf", node, claim="vf"))
        assert wait_for("the VF pod bound", partial(_state, k8s_admin, "vf"), timeout=60) == "bound"
        k8s_admin.create(claims, _claim("whole", "pf"))
        k8s_admin.create(pods, _pod("whole", node, claim="whole"))
        assert (
            wait_for("the whole card refused", partial(_state, k8s_admin, "whole"), timeout=60) == "refused"
        )

        # The VF's claim goes: its function is back in the counter set and the whole card fits.
        k8s_admin.delete(f"{pods}/vf?gracePeriodSeconds=0")
        k8s_admin.delete(f"{claims}/vf")
        assert wait_for(
            "the whole card bound", lambda: _state(k8s_admin, "whole") == "bound" or None, timeout=90
        )
        allocated = k8s_admin.get(f"{claims}/whole")["status"]["allocation"]["devices"]["results"][0]
        assert allocated["device"] == PF

        k8s_admin.create(claims, _claim("vf-late", "vf"))
        k8s_admin.create(pods, _pod("vf-late", node, claim="vf-late"))
        assert (
            wait_for("a VF refused beside the whole card", partial(_state, k8s_admin, "vf-late"), timeout=60)
            == "refused"
        )
    finally:
        k8s_admin.delete_if_present(f"/api/v1/namespaces/{NAMESPACE}")
        for body in classes:
            k8s_admin.delete_if_present(f"/apis/resource.k8s.io/v1/deviceclasses/{body['metadata']['name']}")
    process.check_alive()
