"""The operator, installed from deploy/ in self-signed mode, as a pod on the real node.

Everything is the real path: our images imported into containerd, kustomize with ``images:``,
the operator reaching the API server through the ``kubernetes`` Service, the API server calling
its webhooks through their Service, and the GpuDevicePlugin sample turned into a DaemonSet whose
plugin pod gives the kubelet the simulated GPUs. The tests run in file order: the sample CR is
applied, its image changed, then deleted.

Needs ``make images``; without the archives the tests fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from intel_device_plugins.operator.images import OPERATOR_IMAGE_NAME, image
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.node import RealNode, pod_log, workload_pod
from k8stest.node.operator import NodeOperator, install_operator, live_pods, roll_plugin_image
from k8stest.node.plugins import image_archive
from k8stest.ociimage import qualified_reference
from k8stest.operatorinstall import NS
from k8stest.pytest_plugin import _unavailable

pytestmark = pytest.mark.k8s

I915 = "gpu.intel.com/i915"
I915_CARDS = 2  # k8stest.node.fixtures.NODE_PROFILE
GPU_CRS = "/apis/deviceplugin.intel.com/v1/gpudeviceplugins"
SAMPLE = "gpudeviceplugin-sample"
PLUGIN_PODS = f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3Dintel-gpu-plugin"


@pytest.fixture(scope="module")
def operator(
    real_node: RealNode, node_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeOperator]:
    for target in ("operator", "node"):
        if image_archive(target) is None:
            _unavailable(f"no {target} image archive ({target}-*.oci.tar): run `make images`")
    installed = install_operator(node_control_plane, real_node, tmp_path_factory.mktemp("operator"))
    try:
        yield installed
    finally:
        installed.uninstall()


def _allocatable(client: KubeClient, node: str) -> str:
    return str(client.get(f"/api/v1/nodes/{node}")["status"]["allocatable"].get(I915, "0"))


def _plugin_pods(client: KubeClient) -> list[dict[str, Any]]:
    return live_pods(client, PLUGIN_PODS)


@pytest.fixture(scope="module")
def gpu_sample(operator: NodeOperator, real_node: RealNode) -> Iterator[dict[str, Any]]:
    """The GpuDevicePlugin sample, applied with the node labelled as NFD would label it."""
    sample = operator.samples["gpu"]
    labels = dict(sample["spec"]["nodeSelector"])
    client = operator.client()
    node_path = f"/api/v1/nodes/{real_node.name}"
    client.merge_patch(node_path, {"metadata": {"labels": labels}})
    operator.kubectl("apply", "-f", "-", stdin=json.dumps(sample))
    try:
        yield sample
    finally:
        client.delete_if_present(f"{GPU_CRS}/{SAMPLE}")
        client.merge_patch(node_path, {"metadata": {"labels": {k: None for k in labels}}})
        client.close()


def test_operator_runs_as_a_pod_from_this_projects_image(
    operator: NodeOperator, real_node: RealNode, client: KubeClient
) -> None:
    (pod,) = operator.operator_pods(client)
    assert pod["spec"]["nodeName"] == real_node.name
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is True
    assert status["image"] == qualified_reference(image(OPERATOR_IMAGE_NAME)), status["image"]
    assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    assert pod["status"]["podIP"].startswith("10.88.0.")
    assert operator.ready_in < 180


def test_invalid_cr_is_rejected_by_the_webhook_through_its_service(operator: NodeOperator) -> None:
    body = {
        "apiVersion": "deviceplugin.intel.com/v1",
        "kind": "GpuDevicePlugin",
        "metadata": {"name": "invalid-policy"},
        "spec": {"preferredAllocationPolicy": "packed"},
    }
    out = operator.kubectl("apply", "-f", "-", stdin=json.dumps(body), check=False)
    assert out.returncode != 0
    assert 'admission webhook "vgpudeviceplugin.kb.io" denied the request' in out.stderr, out.stderr
    assert "spec.preferredAllocationPolicy: 'packed'" in out.stderr, out.stderr


def test_gpu_sample_gives_the_node_its_gpus(
    operator: NodeOperator, gpu_sample: dict[str, Any], real_node: RealNode, client: KubeClient
) -> None:
    expected = str(I915_CARDS * int(gpu_sample["spec"]["sharedDevNum"]))
    try:
        wait_for(
            f"{I915}={expected} on {real_node.name} from the GpuDevicePlugin sample",
            lambda: _allocatable(client, real_node.name) == expected,
            timeout=120,
        )
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{operator.diagnosis()}") from None
    capacity = client.get(f"/api/v1/nodes/{real_node.name}")["status"]["capacity"]
    assert capacity[I915] == expected
    (plugin,) = _plugin_pods(client)
    assert plugin["spec"]["containers"][0]["image"] == gpu_sample["spec"]["image"]

    def reported() -> bool:
        status = client.get(f"{GPU_CRS}/{SAMPLE}").get("status", {})
        return bool(status.get("numberReady") == 1 and status.get("nodeNames") == [real_node.name])

    wait_for("the sample's status to report the node", reported, timeout=30)

    script = "set -e; test -c /dev/dri/card*; test -c /dev/dri/renderD*; ls /dev/dri/by-path"
    client.create(
        "/api/v1/namespaces/default/pods", workload_pod("cr-gpu", real_node.name, script, limits={I915: "1"})
    )
    try:

        def finished() -> str | None:
            phase = client.get("/api/v1/namespaces/default/pods/cr-gpu")["status"].get("phase")
            return str(phase) if phase in ("Succeeded", "Failed") else None

        phase = wait_for("pod cr-gpu to finish", finished, timeout=60)
        assert phase == "Succeeded", pod_log(real_node, "default", "cr-gpu")
    finally:
        client.delete("/api/v1/namespaces/default/pods/cr-gpu")


def test_image_tag_change_rolls_the_plugin_pods(
    operator: NodeOperator, gpu_sample: dict[str, Any], real_node: RealNode, client: KubeClient
) -> None:
    assert _allocatable(client, real_node.name) != "0"
    new_image = gpu_sample["spec"]["image"].rsplit(":", 1)[0] + ":0.1.1"
    roll = roll_plugin_image(client, real_node, f"{GPU_CRS}/{SAMPLE}", PLUGIN_PODS, I915, new_image)
    print(f"rolled in {roll.seconds:.2f} s; allocatable {I915} below its count for {roll.below_count:.2f} s")


def test_cr_deletion_removes_daemonset_pods_and_devices(
    operator: NodeOperator, gpu_sample: dict[str, Any], real_node: RealNode, client: KubeClient
) -> None:
    (ds,) = client.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets?labelSelector=app%3Dintel-gpu-plugin")[
        "items"
    ]
    client.delete(f"{GPU_CRS}/{SAMPLE}")

    def daemonset_gone() -> bool:
        try:
            client.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets/{ds['metadata']['name']}")
        except ApiError as e:
            return e.status == 404
        return False

    wait_for("the plugin DaemonSet to be garbage-collected", daemonset_gone, timeout=60)
    wait_for("the plugin pods to be gone", lambda: not client.get(PLUGIN_PODS)["items"], timeout=60)

    # The plugin withdraws its devices as it stops; otherwise the kubelet would keep them in the
    # capacity for its 5-minute endpoint grace period (allocatable drops either way).
    def withdrawn() -> bool:
        status = client.get(f"/api/v1/nodes/{real_node.name}")["status"]
        return bool(status["capacity"].get(I915, "0") == "0" and status["allocatable"].get(I915, "0") == "0")

    wait_for(f"capacity and allocatable {I915}=0", withdrawn, timeout=30)


def test_nothing_is_left_after_the_operator_is_uninstalled(
    operator: NodeOperator, client: KubeClient
) -> None:
    """Run last: uninstalling removes the namespace, the webhooks and the operator pod."""
    operator.uninstall()
    with pytest.raises(ApiError) as err:
        client.get(f"/api/v1/namespaces/{NS}")
    assert err.value.status == 404
    hooks = client.get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")["items"]
    assert not [h for h in hooks if h["metadata"]["name"].startswith("intel-deviceplugins-")]
