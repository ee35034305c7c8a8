"""``intel_dra_drivers`` as a real process serving every kind of a simulated node at once.

Against the real API server with a kwok node: each driver publishes its own ResourceSlices, answers
the kubelet's GetInfo on its own registration socket, and on SIGTERM every driver unregisters and
withdraws its slices, and the process exits cleanly.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from intel_device_plugins.plugins import dracombined
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from intel_device_plugins.sim.profiles import profile_text
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.kubeletapi import pluginregistration_v1_pb2 as reg_pb
from k8stest.kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc
from k8stest.process import ManagedProcess

pytestmark = pytest.mark.k8s

DRIVERS = ["gpu", "qat", "dsa", "iaa", "dlb", "npu", "sgx", "fpga -mode region"]


def published(client: KubeClient, node: str) -> dict[str, set[str]]:
    """Driver name → the device names of its slices on ``node``."""
    found = client.get(f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={node}")
    result: dict[str, set[str]] = {}
    for item in found.get("items", []):
        names = {device["name"] for device in item["spec"].get("devices") or []}
        result.setdefault(item["spec"]["driver"], set()).update(names)
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_one_process_publishes_registers_and_withdraws_every_kind(
    k8s_control_plane: ControlPlane,
    kwok_nodes: Callable[..., list[str]],
    k8s_admin: KubeClient,
    tmp_path: Path,
) -> None:
    (node,) = kwok_nodes(1)
    sim = build_node(parse_node_spec(profile_text("default")), tmp_path / "node")
    kubelet = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # sockets must fit in 107 bytes
    shared = ["-node-name", node, "-prefix", str(sim.root)]
    port = free_port()
    parser = dracombined.build_parser()
    expected = {
        profile.driver_name: {device.name for device in profile.scan().devices}
        for profile in dracombined.build_profiles(
            parser.parse_args([*shared, *(word for kind in DRIVERS for word in ("--driver", kind))]), parser
        )
    }
    assert all(expected.values()) and len(expected) == len(DRIVERS), expected
    argv = [
        console_script("intel_dra_drivers"),
        *shared,
        "-kubeconfig", str(k8s_control_plane.admin_kubeconfig),
        "-cdi-root", str(tmp_path / "cdi"),
        "-kubelet-registrar-directory-path", str(kubelet / "plugins_registry"),
        "-kubelet-plugins-directory-path", str(kubelet / "plugins"),
        "-healthcheck-port", str(port),
        "-scan-interval", "1",
        *(word for kind in DRIVERS for word in ("--driver", kind)),
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in ("NODE_NAME", "POD_UID")}
    process = ManagedProcess("intel_dra_drivers", argv, tmp_path / "drivers.log", env=env)
    try:

        def all_published() -> dict[str, set[str]] | None:
            process.check_alive()
            found = published(k8s_admin, node)
            return found if found == expected else None

        wait_for("every driver's slices", all_published, timeout=60)

        endpoints = []
        for driver in expected:
            registrar = kubelet / "plugins_registry" / f"{driver}-reg.sock"
            with grpc.insecure_channel(f"unix://{registrar}") as channel:
                info = reg_grpc.RegistrationStub(channel).GetInfo(reg_pb.InfoRequest(), timeout=5)
            assert (info.type, info.name) == ("DRAPlugin", driver)
            assert info.endpoint == str(kubelet / "plugins" / driver / "dra.sock")
            assert Path(info.endpoint).is_socket()
            endpoints.append((registrar, Path(info.endpoint)))

        # One liveness service for all: serving while every driver answers on its sockets.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check", None, None)
            assert check(b"\x0a\x08liveness", timeout=20) == b"\x08\x01"
        os.killpg(process.pid, signal.SIGTERM)
        assert process.popen.wait(30) == 0, process.log_tail()
        assert published(k8s_admin, node) == {}
        left: list[Any] = [path for pair in endpoints for path in pair if path.exists()]
        assert left == [], left
    finally:
        process.stop()
        shutil.rmtree(kubelet, ignore_errors=True)


def test_a_driver_that_cannot_start_stops_the_others_cleanly(
    k8s_control_plane: ControlPlane,
    kwok_nodes: Callable[..., list[str]],
    k8s_admin: KubeClient,
    tmp_path: Path,
) -> None:
    (node,) = kwok_nodes(1)
    sim = build_node(parse_node_spec(profile_text("default")), tmp_path / "node")
    kubelet = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    # Something that is not a socket where SGX's registration socket goes: its server cannot bind.
    (kubelet / "plugins_registry" / "sgx.intel.com-reg.sock" / "occupied").mkdir(parents=True)
    argv = [
        console_script("intel_dra_drivers"),
        "-node-name", node,
        "-prefix", str(sim.root),
        "-kubeconfig", str(k8s_control_plane.admin_kubeconfig),
        "-cdi-root", str(tmp_path / "cdi"),
        "-kubelet-registrar-directory-path", str(kubelet / "plugins_registry"),
        "-kubelet-plugins-directory-path", str(kubelet / "plugins"),
        "-healthcheck-port", "-1",  # tests run side by side on one host
        "--driver", "dsa", "--driver", "sgx",
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in ("NODE_NAME", "POD_UID")}
    process = ManagedProcess("intel_dra_drivers", argv, tmp_path / "drivers.log", env=env)
    try:
        assert process.popen.wait(30) == 1, process.log_tail()
        assert "sgx.intel.com cannot run" in process.log_tail()
        assert "dsa.intel.com cannot run" not in process.log_tail()
        assert published(k8s_admin, node) == {}
        assert not (kubelet / "plugins_registry" / "dsa.intel.com-reg.sock").exists()
        assert not (kubelet / "plugins" / "dsa.intel.com" / "dra.sock").exists()
    finally:
        process.stop()
        shutil.rmtree(kubelet, ignore_errors=True)
