"""This project's node image on the real node: the GPU plugin DaemonSet the operator builds for
the GpuDevicePlugin sample runs under containerd, registers on the real kubelet, and a pod asking
for one GPU gets the simulated card's device nodes. The plugin comes back after a kubelet restart
and after its pod is deleted.

The image comes from ``make images`` (OCI archives under ~/.cache/intel-device-plugins/images);
without it the tests fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.node import RealNode, pod_log, workload_pod
from k8stest.node_plugins import PLUGIN_NAMESPACE as NAMESPACE
from k8stest.node_plugins import node_image_archive, sample_daemonset
from k8stest.ociimage import qualified_reference
from k8stest.pytest_plugin import _unavailable

pytestmark = pytest.mark.k8s

I915 = "gpu.intel.com/i915"
I915_CARDS = 2  # k8stest.node_fixtures.NODE_PROFILE
REGISTRATION = f'"Got registration request from device plugin with resource" resourceName="{I915}"'


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


@dataclass(frozen=True)
class GpuPlugin:
    node: RealNode
    image: str
    expected: str  # allocatable i915: cards x sharedDevNum
    daemonset: str

    def registrations(self) -> int:
        """How often the kubelet (any run of it) accepted the plugin's registration."""
        return (self.node.layout.logs / "kubelet.log").read_text(errors="replace").count(REGISTRATION)

    def advertised(self, client: KubeClient) -> bool:
        status = client.get(f"/api/v1/nodes/{self.node.name}")["status"]
        return bool(status["allocatable"].get(I915) == self.expected)

    def plugin_pods(self, client: KubeClient) -> list[dict[str, Any]]:
        pods = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app%3Dintel-gpu-plugin")[
            "items"
        ]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
def gpu_plugin(real_node: RealNode, node_image: str, node_control_plane: ControlPlane) -> Iterator[GpuPlugin]:
    """The operator's DaemonSet for the GpuDevicePlugin sample, running on the real node."""
    client = node_control_plane.client()
    spec, ds = sample_daemonset(DeviceKind("gpu"), node_image)
    node_path = f"/api/v1/nodes/{real_node.name}"
    selector = dict(spec["nodeSelector"])
    client.merge_patch(node_path, {"metadata": {"labels": selector}})
    client.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    ds_path = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"
    client.create(ds_path, ds)
    plugin = GpuPlugin(
        real_node, node_image, str(I915_CARDS * int(spec["sharedDevNum"])), ds["metadata"]["name"]
    )
    try:
        wait_for(
            f"{I915}={plugin.expected} on {real_node.name} (plugin pod from {node_image})",
            lambda: plugin.advertised(client),
            timeout=120,
        )
        yield plugin
    finally:
        try:
            client.delete(f"{ds_path}/{plugin.daemonset}")
        except ApiError as e:
            if e.status != 404:
                raise
        client.merge_patch(node_path, {"metadata": {"labels": {k: None for k in selector}}})
        client.close()


def test_gpu_plugin_image_serves_the_simulated_cards_to_a_pod(
    gpu_plugin: GpuPlugin, client: KubeClient
) -> None:
    node = gpu_plugin.node
    assert gpu_plugin.image == qualified_reference(gpu_plugin.image)
    capacity = client.get(f"/api/v1/nodes/{node.name}")["status"]["capacity"]
    assert capacity[I915] == gpu_plugin.expected
    script = (
        "set -e; cards=$(ls /dev/dri | grep -c '^card'); echo cards=$cards; test $cards -eq 1;"
        " test -c /dev/dri/card*; test -c /dev/dri/renderD*; ls /dev/dri/by-path"
    )
    client.create(
        "/api/v1/namespaces/default/pods", workload_pod("one-gpu", node.name, script, limits={I915: "1"})
    )
    try:

        def finished() -> dict[str, Any] | None:
            pod = client.get("/api/v1/namespaces/default/pods/one-gpu")
            return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        pod = wait_for("one-gpu to finish", finished, timeout=60)
        log = pod_log(node, "default", "one-gpu")
        assert pod["status"]["phase"] == "Succeeded", log
        assert "cards=1" in log
        assert "-card" in log and "-render" in log  # the by-path links of the allocated card
    finally:
        client.delete("/api/v1/namespaces/default/pods/one-gpu")


def test_plugin_registers_again_after_a_kubelet_restart(gpu_plugin: GpuPlugin, client: KubeClient) -> None:
    before = gpu_plugin.registrations()
    (plugin_pod,) = gpu_plugin.plugin_pods(client)
    gpu_plugin.node.restart_kubelet()
    # The new kubelet removes every plugin socket; only a plugin that notices and registers
    # again gets its devices back.
    wait_for(
        "the plugin's registration with the new kubelet",
        lambda: gpu_plugin.registrations() > before,
        timeout=60,
    )
    wait_for(f"{I915} allocatable again", lambda: gpu_plugin.advertised(client), timeout=60)
    (same_pod,) = gpu_plugin.plugin_pods(client)
    assert same_pod["metadata"]["uid"] == plugin_pod["metadata"]["uid"]  # the plugin kept running


def test_deleted_plugin_pod_is_recreated_and_capacity_returns(
    gpu_plugin: GpuPlugin, client: KubeClient
) -> None:
    (old,) = gpu_plugin.plugin_pods(client)
    before = gpu_plugin.registrations()
    client.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{old['metadata']['name']}")

    def replaced() -> bool:
        pods = gpu_plugin.plugin_pods(client)
        return len(pods) == 1 and pods[0]["metadata"]["uid"] != old["metadata"]["uid"]

    wait_for("a new plugin pod from the DaemonSet", replaced, timeout=60)
    wait_for("the new plugin's registration", lambda: gpu_plugin.registrations() > before, timeout=60)
    wait_for(f"{I915} allocatable again", lambda: gpu_plugin.advertised(client), timeout=60)


def test_hot_plugged_card_is_advertised_and_an_unplugged_one_withdrawn(
    gpu_plugin: GpuPlugin, client: KubeClient
) -> None:
    """A card appears in the node's /sys and /dev while the plugin runs, then disappears."""
    node = gpu_plugin.node
    shared = int(gpu_plugin.expected) // I915_CARDS
    tree = FakeTree(node.workdir)  # the node's /sys and /dev are <workdir>/sys and <workdir>/dev
    card = gpu.add_card(tree, driver="i915")
    plugged = True
    try:
        assert node.realize_device_nodes()  # the new card's DRM nodes
        more = str((I915_CARDS + 1) * shared)

        def allocatable(value: str) -> bool:
            return bool(client.get(f"/api/v1/nodes/{node.name}")["status"]["allocatable"].get(I915) == value)

        wait_for(f"{I915}={more} after the hot-plug", lambda: allocatable(more), timeout=60)
        gpu.remove_card(tree, card.index)
        plugged = False
        wait_for(
            f"{I915}={gpu_plugin.expected} after the unplug",
            lambda: allocatable(gpu_plugin.expected),
            timeout=60,
        )
        assert not (node.dev_dir / "dri" / f"card{card.index}").exists()  # the device node went too
    finally:
        if plugged:
            gpu.remove_card(tree, card.index)
