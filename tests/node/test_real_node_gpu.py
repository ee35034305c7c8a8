"""This project's node image on the real node: the GPU plugin DaemonSet the operator builds for
the GpuDevicePlugin sample runs under containerd, registers on the real kubelet, and a pod asking
for one GPU gets the simulated card's device nodes. The plugin comes back after a kubelet restart
and after its pod is deleted.

The image comes from ``make images`` (OCI archives under ~/.cache/intel-device-plugins/images;
``k8stest.node.plugins.node_image``); without it the tests fail under CI=true and skip elsewhere.
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
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.node import RealNode, workload_pod
from k8stest.node.plugins import PLUGIN_NAMESPACE as NAMESPACE
from k8stest.node.plugins import (
    SamplePlugin,
    registrations,
    run_to_completion,
    sample_plugin,
    unschedulable_message,
)
from k8stest.ociimage import qualified_reference

pytestmark = pytest.mark.k8s

I915 = "gpu.intel.com/i915"
I915_CARDS = 2  # k8stest.node.fixtures.NODE_PROFILE


@dataclass(frozen=True)
class GpuPlugin:
    plugin: SamplePlugin
    expected: str  # allocatable i915: cards x sharedDevNum

    @property
    def node(self) -> RealNode:
        return self.plugin.node

    @property
    def image(self) -> str:
        return self.plugin.image

    def registrations(self) -> int:
        """How often the kubelet (any run of it) accepted the plugin's registration."""
        return registrations(self.node, I915)

    def advertised(self, client: KubeClient) -> bool:
        return self.plugin.advertised(client, {I915: self.expected})

    def plugin_pods(self, client: KubeClient) -> list[dict[str, Any]]:
        return self.plugin.pods(client)


@pytest.fixture(scope="module")
def gpu_plugin(real_node: RealNode, node_image: str, node_control_plane: ControlPlane) -> Iterator[GpuPlugin]:
    """The operator's DaemonSet for the GpuDevicePlugin sample, running on the real node."""
    client = node_control_plane.client()
    try:
        with sample_plugin(client, real_node, DeviceKind("gpu"), node_image) as plugin:
            expected = str(I915_CARDS * int(plugin.spec["sharedDevNum"]))
            plugin.wait_advertised(client, {I915: expected})
            yield GpuPlugin(plugin, expected)
    finally:
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
    pod, log = run_to_completion(client, node, workload_pod("one-gpu", node.name, script, limits={I915: "1"}))
    assert pod["status"]["phase"] == "Succeeded", log
    assert "cards=1" in log
    assert "-card" in log and "-render" in log  # the by-path links of the allocated card


def test_pod_asking_for_more_gpus_than_the_node_has_stays_pending(
    gpu_plugin: GpuPlugin, client: KubeClient
) -> None:
    node = gpu_plugin.node
    too_many = str(int(gpu_plugin.expected) + 1)
    client.create(
        "/api/v1/namespaces/default/pods",
        workload_pod("too-many-gpus", node.name, "true", limits={I915: too_many}),
    )
    try:
        message = unschedulable_message(client, "too-many-gpus")
        assert f"Insufficient {I915}" in message, message
        assert client.get("/api/v1/namespaces/default/pods/too-many-gpus")["status"]["phase"] == "Pending"
    finally:
        client.delete("/api/v1/namespaces/default/pods/too-many-gpus")


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
