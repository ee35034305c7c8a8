"""This project's node image on the real node: the GPU plugin DaemonSet the operator builds for
the GpuDevicePlugin sample runs under containerd, registers on the real kubelet, and a pod asking
for one GPU gets the simulated card's device nodes.

The image comes from ``make images`` (OCI archives under ~/.cache/intel-device-plugins/images);
without it the test fails under CI=true and skips elsewhere.
"""

from __future__ import annotations

from typing import Any

import pytest

from intel_device_plugins.operator.kinds import DeviceKind
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.node import RealNode, pod_log, workload_pod
from k8stest.node_plugins import PLUGIN_NAMESPACE as NAMESPACE
from k8stest.node_plugins import node_image_archive, sample_daemonset
from k8stest.ociimage import qualified_reference
from k8stest.pytest_plugin import _unavailable

pytestmark = pytest.mark.k8s

I915 = "gpu.intel.com/i915"
I915_CARDS = 2  # k8stest.node_fixtures.NODE_PROFILE


@pytest.fixture(scope="module")
def node_image(real_node: RealNode) -> str:
    """The project's node image, imported into the real node; its qualified name."""
    archive = node_image_archive()
    if archive is None:
        _unavailable("no node image archive (node-*.oci.tar): run `make images`")
    assert archive is not None
    names = real_node.import_images(archive)
    assert len(names) == 1, names
    return names[0]


def test_gpu_plugin_image_serves_the_simulated_cards_to_a_pod(
    real_node: RealNode, node_image: str, client: KubeClient
) -> None:
    assert node_image == qualified_reference(node_image)
    spec, ds = sample_daemonset(DeviceKind("gpu"), node_image)
    node_path = f"/api/v1/nodes/{real_node.name}"
    selector = dict(spec["nodeSelector"])
    client.merge_patch(node_path, {"metadata": {"labels": selector}})
    client.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    ds_path = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"
    client.create(ds_path, ds)
    name = ds["metadata"]["name"]
    try:
        expected = str(I915_CARDS * int(spec["sharedDevNum"]))

        def advertised() -> bool:
            return bool(client.get(node_path)["status"]["allocatable"].get(I915) == expected)

        wait_for(
            f"{I915}={expected} on {real_node.name} (plugin pod from {node_image})", advertised, timeout=120
        )
        capacity = client.get(node_path)["status"]["capacity"]
        assert capacity[I915] == expected

        script = (
            "set -e; cards=$(ls /dev/dri | grep -c '^card'); echo cards=$cards; test $cards -eq 1;"
            " test -c /dev/dri/card*; test -c /dev/dri/renderD*; ls /dev/dri/by-path"
        )
        client.create(
            "/api/v1/namespaces/default/pods",
            workload_pod("one-gpu", real_node.name, script, limits={I915: "1"}),
        )

        def finished() -> dict[str, Any] | None:
            pod = client.get("/api/v1/namespaces/default/pods/one-gpu")
            return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        pod = wait_for("one-gpu to finish", finished, timeout=60)
        log = pod_log(real_node, "default", "one-gpu")
        assert pod["status"]["phase"] == "Succeeded", log
        assert "cards=1" in log
        assert "-card" in log and "-render" in log  # the by-path links of the allocated card
    finally:
        for path in (f"{ds_path}/{name}", "/api/v1/namespaces/default/pods/one-gpu"):
            try:
                client.delete(path)
            except ApiError as e:
                if e.status != 404:
                    raise
        client.merge_patch(node_path, {"metadata": {"labels": {k: None for k in selector}}})
