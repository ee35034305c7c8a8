"""The real ``intel_gpu_dra_driver`` process against the real API server and scheduler, on a simulated node.

No kubelet here: what is checked is the driver's own life (its slices appear for a kwok node, a card
losing a device node is tainted, the kubelet would find its registration socket, SIGTERM withdraws
the slices and removes the sockets), and that the real scheduler allocates its devices as intended:
claims naming memory share a card, an extended-resource request takes whole cards.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.plugins.gpu.dra import GPU_DEVICE_CLASSES
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.kubeletapi import pluginregistration_v1_pb2 as reg_pb
from k8stest.kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc
from k8stest.process import ManagedProcess

pytestmark = pytest.mark.k8s

DRIVER = "gpu.intel.com"
GIB = 1 << 30
NODE = """
[node]
numa_nodes = 2
[[gpu]]
driver = "i915"
count = 2
numa_node = 0
device_id = "0x56c0"
memory_bytes = 17179869184
[[gpu]]
driver = "xe"
count = 1
numa_node = 1
device_id = "0xe20b"
memory_bytes = 12884901888
"""
CARD0, CARD1, CARD2 = "0000-10-00-0-0x56c0", "0000-11-00-0-0x56c0", "0000-12-00-0-0xe20b"
"""The node's cards by device name (PCI address, device ID); the simulator numbers buses from 0x10."""


def slices(client: KubeClient, node: str) -> list[dict[str, Any]]:
    found = client.get(
        f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={node},spec.driver={DRIVER}"
    )
    return list(found.get("items", []))


def devices(client: KubeClient, node: str) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices(client, node) for d in s["spec"].get("devices", [])}


@pytest.fixture
def sim_node(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(NODE), tmp_path / "node")


@pytest.fixture
def driver(
    sim_node: FakeTree,
    k8s_control_plane: ControlPlane,
    kwok_nodes: Callable[..., list[str]],
    tmp_path: Path,
) -> Iterator[tuple[ManagedProcess, str, Path]]:
    (node,) = kwok_nodes(1)
    # Socket paths must stay within 107 bytes: pytest's own directory is too deep for them.
    kubelet = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    argv = [
        console_script("intel_gpu_dra_driver"),
        "-node-name", node,
        "-kubeconfig", str(k8s_control_plane.admin_kubeconfig),
        "-prefix", str(sim_node.root),
        "-cdi-root", str(tmp_path / "cdi"),
        "-kubelet-registrar-directory-path", str(kubelet / "plugins_registry"),
        "-kubelet-plugins-directory-path", str(kubelet / "plugins"),
        "-healthcheck-port", "-1",  # tests run side by side on one host
        "-scan-interval", "1",
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in ("NODE_NAME", "POD_UID")}
    process = ManagedProcess("intel_gpu_dra_driver", argv, tmp_path / "driver.log", env=env)
    try:
        yield process, node, kubelet
    finally:
        process.stop()
        shutil.rmtree(kubelet, ignore_errors=True)


def test_driver_publishes_taints_registers_and_withdraws(
    driver: tuple[ManagedProcess, str, Path], sim_node: FakeTree, k8s_admin: KubeClient
) -> None:
    process, node, kubelet = driver

    def three_cards() -> dict[str, dict[str, Any]] | None:
        process.check_alive()
        found = devices(k8s_admin, node)
        return found if set(found) == {CARD0, CARD1, CARD2} else None

    found = wait_for("the driver's slices", three_cards, timeout=30)
    card2 = found[CARD2]
    assert card2["attributes"]["driver"] == {"string": "xe"}
    assert card2["capacity"]["memory"]["value"] == str(12 * GIB)
    assert card2["allowMultipleAllocations"] is True
    assert found[CARD0]["attributes"]["pciId"] == {"string": "0x56c0"}
    assert found[CARD0]["attributes"]["family"] == {"string": "Data Center Flex"}
    assert found[CARD0]["attributes"]["sriov"] == {"bool": False}

    # The kubelet's plugin watcher would find this socket and ask it who it is.
    registrar = kubelet / "plugins_registry" / f"{DRIVER}-reg.sock"
    with grpc.insecure_channel(f"unix://{registrar}") as channel:
        info = reg_grpc.RegistrationStub(channel).GetInfo(reg_pb.InfoRequest(), timeout=5)
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert Path(info.endpoint).is_socket()

    sim_node.remove("/dev/dri/renderD129")

    def card1_tainted() -> list[dict[str, Any]] | None:
        process.check_alive()
        taints = devices(k8s_admin, node).get(CARD1, {}).get("taints") or []
        return taints or None

    (taint,) = wait_for("card1's taint", card1_tainted, timeout=30)
    # Intel's scheme: the category as key, no value; a missing render node is a warning.
    assert taint["key"] == "HealthIssues-DeviceNodesMissing" and taint["effect"] == "NoSchedule"
    assert "value" not in taint

    os.killpg(process.pid, signal.SIGTERM)
    assert process.popen.wait(20) == 0, process.log_tail()
    assert slices(k8s_admin, node) == []
    assert not registrar.exists() and not Path(info.endpoint).exists()


NAMESPACE = "gpu-dra-sharing"


def _claim(name: str, device_class: str, memory: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def _pod(
    name: str, node: str, claim: str | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "busybox"}
    spec: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    if limits is not None:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _scheduled(client: KubeClient, pod: str, namespace: str = NAMESPACE) -> str | None:
    """``"yes"`` once bound, the scheduler's message once it gave up, ``None`` while undecided."""
    found = client.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
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


def test_the_scheduler_shares_a_card_by_memory_and_gives_extended_resources_whole_cards(
    driver: tuple[ManagedProcess, str, Path], k8s_admin: KubeClient
) -> None:
    process, node, _ = driver
    wait_for("the driver's slices", lambda: len(devices(k8s_admin, node)) == 3 or None, timeout=30)
    classes = [device_class(spec) for spec in GPU_DEVICE_CLASSES]
    for body in classes:
        k8s_admin.apply_ok("/apis/resource.k8s.io/v1/deviceclasses", body)
    k8s_admin.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    base = f"/api/v1/namespaces/{NAMESPACE}/pods"
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    try:
        # The xe card has 12 GiB: three 4 GiB claims share it, a fourth does not fit.
        for index in range(4):
            k8s_admin.create(claims, _claim(f"xe-{index}", "xe.gpu.intel.com", "4Gi"))
            k8s_admin.create(base, _pod(f"xe-{index}", node, claim=f"xe-{index}"))
        for pod in ("xe-0", "xe-1", "xe-2"):
            assert wait_for(f"{pod} scheduled", partial(_scheduled, k8s_admin, pod), timeout=60) == "yes"
        assert wait_for("xe-3 refused", lambda: _scheduled(k8s_admin, "xe-3"), timeout=60) != "yes"
        results = [
            k8s_admin.get(f"{claims}/xe-{index}")["status"]["allocation"]["devices"]["results"][0]
            for index in range(3)
        ]
        assert {r["device"] for r in results} == {CARD2}
        assert {r["consumedCapacity"]["memory"] for r in results} == {"4Gi"}
        assert len({r["shareID"] for r in results}) == 3

        # An extended-resource request takes whole cards: both i915 cards, then no i915 memory is left.
        k8s_admin.create(base, _pod("whole", node, limits={"gpu.intel.com/i915": "2"}))
        assert wait_for("whole scheduled", lambda: _scheduled(k8s_admin, "whole"), timeout=60) == "yes"
        k8s_admin.create(claims, _claim("i915-small", "i915.gpu.intel.com", "1Gi"))
        k8s_admin.create(base, _pod("i915-small", node, claim="i915-small"))
        assert (
            wait_for("i915-small refused", lambda: _scheduled(k8s_admin, "i915-small"), timeout=60) != "yes"
        )
    finally:
        k8s_admin.delete_if_present(f"/api/v1/namespaces/{NAMESPACE}")
        for body in classes:
            k8s_admin.delete_if_present(f"/apis/resource.k8s.io/v1/deviceclasses/{body['metadata']['name']}")
    process.check_alive()


TOLERATIONS_NAMESPACE = "gpu-dra-tolerations"
INTEL_TOLERATIONS = [{"effect": "NoExecute"}, {"effect": "NoSchedule"}]
"""The key-less tolerations of Intel's monitoring example, as its users copied them."""


def _claim_for(name: str, pci_address: str, tolerations: list[dict[str, str]] | None) -> dict[str, Any]:
    body = _claim(name, "gpu.intel.com", None)
    exactly = body["spec"]["devices"]["requests"][0]["exactly"]
    exactly["selectors"] = [
        {"cel": {"expression": f'device.attributes["{DRIVER}"].pciAddress == "{pci_address}"'}}
    ]
    if tolerations is not None:
        exactly["tolerations"] = tolerations
    return body


def test_intels_keyless_tolerations_tolerate_both_health_taints(
    driver: tuple[ManagedProcess, str, Path], sim_node: FakeTree, k8s_admin: KubeClient
) -> None:
    """card0 loses its render node (a warning: NoSchedule), card1 every node (critical: NoExecute).
    A claim without tolerations gets neither; one with Intel's key-less tolerations gets each."""
    process, node, _ = driver
    wait_for("the driver's slices", lambda: len(devices(k8s_admin, node)) == 3 or None, timeout=30)
    sim_node.remove("/dev/dri/renderD128")
    sim_node.remove("/dev/dri/card1")
    sim_node.remove("/dev/dri/renderD129")

    def both_tainted() -> dict[str, list[dict[str, Any]]] | None:
        found = {name: devices(k8s_admin, node).get(name, {}).get("taints") or [] for name in (CARD0, CARD1)}
        return found if all(found.values()) else None

    taints = wait_for("both cards tainted", both_tainted, timeout=30)
    assert taints == {
        CARD0: [{"key": "HealthIssues-DeviceNodesMissing", "effect": "NoSchedule", "timeAdded": ANY_TIME}],
        CARD1: [{"key": "HealthIssues-DeviceAbsent", "effect": "NoExecute", "timeAdded": ANY_TIME}],
    }
    classes = [device_class(spec) for spec in GPU_DEVICE_CLASSES]
    for body in classes:
        k8s_admin.apply_ok("/apis/resource.k8s.io/v1/deviceclasses", body)
    k8s_admin.apply_ok(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TOLERATIONS_NAMESPACE}},
    )
    base = f"/api/v1/namespaces/{TOLERATIONS_NAMESPACE}/pods"
    claims = f"/apis/resource.k8s.io/v1/namespaces/{TOLERATIONS_NAMESPACE}/resourceclaims"
    try:
        for card, address in ((CARD0, "0000:10:00.0"), (CARD1, "0000:11:00.0")):
            plain, tolerant = f"plain-{card[5:7]}", f"tolerant-{card[5:7]}"
            k8s_admin.create(claims, _claim_for(plain, address, None))
            k8s_admin.create(base, _pod(plain, node, claim=plain))
            k8s_admin.create(claims, _claim_for(tolerant, address, INTEL_TOLERATIONS))
            k8s_admin.create(base, _pod(tolerant, node, claim=tolerant))
            assert (
                wait_for(
                    f"{tolerant} scheduled",
                    partial(_scheduled, k8s_admin, tolerant, TOLERATIONS_NAMESPACE),
                    timeout=60,
                )
                == "yes"
            )
            assert (
                wait_for(
                    f"{plain} refused",
                    partial(_scheduled, k8s_admin, plain, TOLERATIONS_NAMESPACE),
                    timeout=60,
                )
                != "yes"
            )
    finally:
        k8s_admin.delete_if_present(f"/api/v1/namespaces/{TOLERATIONS_NAMESPACE}")
        for body in classes:
            k8s_admin.delete_if_present(f"/apis/resource.k8s.io/v1/deviceclasses/{body['metadata']['name']}")
    process.check_alive()


class _AnyTime:
    """Equal to any timestamp string the API server stamps on a taint."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    def __hash__(self) -> int:
        return 0


ANY_TIME = _AnyTime()
