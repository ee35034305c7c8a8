"""The real ``intel_gpu_dra_driver`` with ``-kernel-health`` against the real API server and scheduler:
a card whose PCIe link reports a fatal AER error is tainted NoExecute, the driver tells the node in an
Event, and the scheduler places a new claim on the other card.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.dra.healthevents import UNHEALTHY_REASON
from intel_device_plugins.plugins.gpu.dra import GPU_DEVICE_CLASSES
from intel_device_plugins.sim import faults
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.process import ManagedProcess

pytestmark = pytest.mark.k8s

DRIVER = "gpu.intel.com"
NAMESPACE = "gpu-dra-health"
NODE = """
[[gpu]]
driver = "i915"
count = 2
device_id = "0x56c0"
memory_bytes = 17179869184
"""
CARD0, CARD1 = "0000-10-00-0-0x56c0", "0000-11-00-0-0x56c0"
CARD0_ADDRESS = "0000:10:00.0"


def devices(client: KubeClient, node: str) -> dict[str, dict[str, Any]]:
    found = client.get(
        f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={node},spec.driver={DRIVER}"
    )
    return {d["name"]: d for s in found.get("items", []) for d in s["spec"].get("devices", [])}


@pytest.fixture
def sim_node(tmp_path: Path) -> FakeTree:
    tree = build_node(parse_node_spec(NODE), tmp_path / "node")
    faults.enable_aer(tree, CARD0_ADDRESS)
    return tree


@pytest.fixture
def driver(
    sim_node: FakeTree,
    k8s_control_plane: ControlPlane,
    kwok_nodes: Callable[..., list[str]],
    tmp_path: Path,
) -> Iterator[tuple[ManagedProcess, str]]:
    (node,) = kwok_nodes(1)
    kubelet = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # socket paths stay short
    argv = [
        console_script("intel_gpu_dra_driver"),
        "-node-name", node,
        "-kubeconfig", str(k8s_control_plane.admin_kubeconfig),
        "-prefix", str(sim_node.root),
        "-cdi-root", str(tmp_path / "cdi"),
        "-kubelet-registrar-directory-path", str(kubelet / "plugins_registry"),
        "-kubelet-plugins-directory-path", str(kubelet / "plugins"),
        "-healthcheck-port", "-1",
        "-kernel-health",
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in ("NODE_NAME", "POD_UID")}
    process = ManagedProcess("intel_gpu_dra_driver", argv, tmp_path / "driver.log", env=env)
    try:
        yield process, node
    finally:
        process.stop()
        shutil.rmtree(kubelet, ignore_errors=True)


def _scheduled(client: KubeClient, pod: str) -> str | None:
    found = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}")
    if found["spec"].get("nodeName"):
        return "yes"
    for condition in found["status"].get("conditions", []):
        if (
            condition["type"] == "PodScheduled"
            and condition["status"] == "False"
            and condition.get("message")
        ):
            return str(condition["message"])
    return None


def test_a_card_with_a_fatal_aer_error_is_tainted_and_a_new_claim_gets_the_other(
    driver: tuple[ManagedProcess, str], sim_node: FakeTree, k8s_admin: KubeClient
) -> None:
    process, node = driver
    wait_for("the driver's slices", lambda: len(devices(k8s_admin, node)) == 2 or None, timeout=30)
    faults.raise_aer(sim_node, CARD0_ADDRESS, "fatal", "Surprise Down Error")

    def card0_tainted() -> list[dict[str, Any]] | None:
        return devices(k8s_admin, node).get(CARD0, {}).get("taints") or None

    (taint,) = wait_for("card0's taint", card0_tainted, timeout=30)  # polled every 5 s
    assert (taint["key"], taint["effect"]) == ("HealthIssues-aer-fatal", "NoExecute")
    card0 = devices(k8s_admin, node)[CARD0]
    assert card0["attributes"]["health"] == {"string": "Unhealthy"}
    assert "taints" not in devices(k8s_admin, node)[CARD1]

    def unhealthy_events() -> list[dict[str, Any]] | None:
        found = k8s_admin.get(f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={node}")
        items = [e for e in found.get("items", []) if e.get("reason") == UNHEALTHY_REASON]
        return items or None

    (event,) = wait_for("the node's Event", unhealthy_events, timeout=30)
    assert event["involvedObject"]["kind"] == "Node" and event["type"] == "Warning"
    assert CARD0 in event["message"] and "Surprise Down Error" in event["message"]

    classes = [device_class(spec) for spec in GPU_DEVICE_CLASSES]
    for body in classes:
        k8s_admin.apply_ok("/apis/resource.k8s.io/v1/deviceclasses", body)
    k8s_admin.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    try:
        for index in range(2):  # either pick would be card0 half the time, were the taint ignored
            name = f"gpu-{index}"
            k8s_admin.create(
                claims,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name},
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "gpu",
                                    "exactly": {
                                        "deviceClassName": "i915.gpu.intel.com",
                                        "capacity": {"requests": {"memory": "1Gi"}},
                                    },
                                }
                            ]
                        }
                    },
                },
            )
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "containers": [
                        {"name": "app", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                    ],
                },
            }
            k8s_admin.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
            assert wait_for(f"{name} scheduled", partial(_scheduled, k8s_admin, name), timeout=60) == "yes"
            allocation = k8s_admin.get(f"{claims}/{name}")["status"]["allocation"]["devices"]["results"]
            assert [result["device"] for result in allocation] == [CARD1]
    finally:
        k8s_admin.delete_if_present(f"/api/v1/namespaces/{NAMESPACE}")
        for body in classes:
            k8s_admin.delete_if_present(f"/apis/resource.k8s.io/v1/deviceclasses/{body['metadata']['name']}")
    process.check_alive()
