"""The real ``intel_gpu_device_plugin`` process against the kubelet's real device manager.

The simulated node gives the plugin sysfs and /dev below a prefix; the device manager is the
kubelet's own code (test/k8s/harness), so registration, health, allocation and run options are
judged by what production kubelets do, not by our stand-in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from k8stest.devicemanager import AdmissionError, DeviceManagerHarness, pod_manifest
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.process import ManagedProcess

pytestmark = pytest.mark.k8s

NODE = """
[node]
numa_nodes = 2
[[gpu]]
driver = "i915"
count = 2
numa_node = 0
[[gpu]]
driver = "xe"
count = 1
numa_node = 1
"""
I915 = "gpu.intel.com/i915"
XE = "gpu.intel.com/xe"


@pytest.fixture
def node(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(NODE), tmp_path / "node")


def start_plugin(node: FakeTree, harness: DeviceManagerHarness, *extra: str) -> ManagedProcess:
    argv = [
        console_script("intel_gpu_device_plugin"),
        "-prefix", str(node.root),
        "-device-plugin-dir", str(harness.device_plugin_dir),
        "-cdi-dir", str(harness.workdir / "cdi"),
        "-scan-interval", "1",
        *extra,
    ]  # fmt: skip
    return ManagedProcess("intel_gpu_device_plugin", argv, harness.workdir / "gpu-plugin.log")


@pytest.fixture
def gpu_plugin(node: FakeTree, device_manager: DeviceManagerHarness) -> Iterator[ManagedProcess]:
    proc = start_plugin(node, device_manager)
    try:
        device_manager.wait_resource(I915, capacity=2, allocatable=2)
        yield proc
    finally:
        proc.stop()


def card_index(device_id: str) -> int:
    """``card1-0`` -> 1 (the plugin's IDs are card<N>-<share>)."""
    return int(device_id.removeprefix("card").split("-")[0])


def test_gpu_plugin_registers_with_real_device_manager(
    device_manager: DeviceManagerHarness, gpu_plugin: ManagedProcess
) -> None:
    res = device_manager.resources()
    assert res[I915].capacity == 2 and res[I915].allocatable == 2
    assert {card_index(d.id) for d in res[I915].devices} == {0, 1}
    assert all(d.numa == (0,) for d in res[I915].devices)
    xe = device_manager.wait_resource(XE, capacity=1, allocatable=1)
    assert [d.numa for d in xe.devices] == [(1,)]


def test_admitted_gpu_container_gets_dri_nodes_mounts_and_cdi(
    device_manager: DeviceManagerHarness, gpu_plugin: ManagedProcess, node: FakeTree
) -> None:
    opts = device_manager.admit(pod_manifest({I915: 1}))["ctr"]
    (cdi,) = opts.cdi_devices
    assert cdi.startswith("intel.cdi.k8s.io/gpu=card")
    n = int(cdi.rsplit("card", 1)[1])
    dri = node.path("/dev/dri")
    assert sorted(d.host_path for d in opts.devices) == sorted(
        [str(dri / f"card{n}"), str(dri / f"renderD{128 + n}")]
    )
    assert all(d.permissions == "rw" for d in opts.devices)
    assert opts.mounts and all(m.read_only for m in opts.mounts)
    with pytest.raises(AdmissionError):
        device_manager.admit(pod_manifest({I915: 2}))


def test_gpu_plugin_reregisters_after_kubelet_restart(
    device_manager: DeviceManagerHarness, gpu_plugin: ManagedProcess
) -> None:
    device_manager.restart()
    device_manager.wait_resource(I915, capacity=2, allocatable=2, timeout=30)
    gpu_plugin.check_alive()


def test_unplugged_card_becomes_unavailable(
    device_manager: DeviceManagerHarness, gpu_plugin: ManagedProcess, node: FakeTree
) -> None:
    gpu.remove_card(node, 1)
    res = device_manager.wait_resource(I915, capacity=1, allocatable=1, timeout=15)
    assert {card_index(d.id) for d in res.devices} == {0}


def test_gpu_capacity_reaches_kwok_node_and_pod_is_scheduled(
    node_device_manager: DeviceManagerHarness, node: FakeTree, k8s_admin: KubeClient
) -> None:
    node_name = node_device_manager.node_name
    proc = start_plugin(node, node_device_manager)
    try:
        node_device_manager.wait_resource(I915, capacity=2, allocatable=2)

        def published() -> bool:
            st = k8s_admin.get(f"/api/v1/nodes/{node_name}")["status"]
            return bool(st.get("allocatable", {}).get(I915) == "2")

        wait_for(f"{I915} on {node_name}", published, timeout=30)
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu-workload"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node_name},
                "containers": [{"name": "app", "image": "busybox", "resources": {"limits": {I915: "1"}}}],
            },
        }
        k8s_admin.create("/api/v1/namespaces/default/pods", pod)
        try:

            def running() -> bool:
                got = k8s_admin.get("/api/v1/namespaces/default/pods/gpu-workload")
                return bool(got["status"].get("phase") == "Running")

            wait_for("gpu-workload Running", running, timeout=60)
            got = k8s_admin.get("/api/v1/namespaces/default/pods/gpu-workload")
            assert got["spec"]["nodeName"] == node_name
        finally:
            k8s_admin.delete("/api/v1/namespaces/default/pods/gpu-workload?gracePeriodSeconds=0")
    finally:
        proc.stop()


def test_numa_value_beyond_the_protocol_keeps_every_device_with_the_real_device_manager(
    node: FakeTree, device_manager: DeviceManagerHarness
) -> None:
    # 2^63 does not fit the protocol's int64: it used to end the ListAndWatch stream, and every
    # device of the resource disappeared from the node for good.
    address = node.path("/sys/class/drm/card1").resolve().parent.parent.name
    node.write(f"{node.sysfs_of(address)}/numa_node", f"{2**63}\n")
    proc = start_plugin(node, device_manager)
    try:
        res = device_manager.wait_resource(I915, capacity=2, allocatable=2)
        numa = {card_index(d.id): d.numa for d in res.devices}
        assert numa[0] == (0,) and not numa[1]
        device_manager.wait_resource(XE, capacity=1, allocatable=1)
        assert "out of range" in proc.log_path.read_text()
        proc.check_alive()
    finally:
        proc.stop()
