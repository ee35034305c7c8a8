"""The real ``intel_gpu_dra_driver`` process against the real API server, on a simulated node.

No kubelet here: what is checked is the driver's own life: its slices appear for a kwok node, a card
losing a device node is tainted, the kubelet would find its registration socket, and SIGTERM
withdraws the slices and removes the sockets.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from intel_device_plugins.deviceplugin.api import pluginregistration_v1_pb2 as reg_pb
from intel_device_plugins.deviceplugin.api import pluginregistration_v1_pb2_grpc as reg_grpc
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
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
        return found if set(found) == {"card0", "card1", "card2"} else None

    found = wait_for("the driver's slices", three_cards, timeout=30)
    card2 = found["card2"]
    assert card2["attributes"]["driver"] == {"string": "xe"}
    assert card2["capacity"]["memory"]["value"] == str(12 * GIB)
    assert card2["allowMultipleAllocations"] is True
    assert found["card0"]["attributes"]["pciId"] == {"string": "0x56c0"}

    # The kubelet's plugin watcher would find this socket and ask it who it is.
    registrar = kubelet / "plugins_registry" / f"{DRIVER}-reg.sock"
    with grpc.insecure_channel(f"unix://{registrar}") as channel:
        info = reg_grpc.RegistrationStub(channel).GetInfo(reg_pb.InfoRequest(), timeout=5)
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert Path(info.endpoint).is_socket()

    sim_node.remove("/dev/dri/renderD129")

    def card1_tainted() -> list[dict[str, Any]] | None:
        process.check_alive()
        taints = devices(k8s_admin, node).get("card1", {}).get("taints") or []
        return taints or None

    (taint,) = wait_for("card1's taint", card1_tainted, timeout=30)
    assert taint["key"] == f"{DRIVER}/unhealthy" and taint["effect"] == "NoSchedule"
    assert "renderD129" in taint.get("value", "")

    os.killpg(process.pid, signal.SIGTERM)
    assert process.popen.wait(20) == 0, process.log_tail()
    assert slices(k8s_admin, node) == []
    assert not registrar.exists() and not Path(info.endpoint).exists()
