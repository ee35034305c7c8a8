"""Socket naming for rolling updates (as Kubernetes' Go helper names them) and two instances side by side."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc.aio
import pytest

from intel_device_plugins.dra.checkpoint import Checkpoint
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.registration import (
    DriverSockets,
    RegistrationError,
    RegistrationStatus,
    SocketPaths,
    registrar_socket_name,
)
from k8stest.kubeletapi import dra_v1_pb2 as pb
from k8stest.kubeletapi import dra_v1_pb2_grpc as pb_grpc
from k8stest.kubeletapi import pluginregistration_v1_pb2 as reg_pb
from k8stest.kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc
from tests.dra.draclaims import DRIVER, NODE, Profile, claim, result

POD_UID = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        # What k8s.io/dynamic-resource-allocation@v0.37.2 kubeletplugin.RollingUpdateRegistrarSocketFile
        # returns for these arguments (run once with Go; the three fallbacks by path length).
        ("/var/lib/kubelet/plugins_registry", f"gpu.intel.com-{POD_UID}-reg.sock"),
        (
            "/var/lib/kubelet/plugins_registry/some/much/longer/path/segment/here",
            "gpu.intel.com-v-WIWul4lVQ-reg.sock",
        ),
        (
            "/var/lib/kubelet/plugins_registry/some/much/longer/path/segment/here/and/more/x",
            "dra-__1i47NJIfijebNR2VRPbg-reg.sock",
        ),
    ],
)
def test_registration_socket_names_match_the_go_helper(registry: str, expected: str) -> None:
    assert registrar_socket_name(Path(registry), "gpu.intel.com", POD_UID) == expected


def test_paths_with_and_without_an_instance_uid() -> None:
    plain = SocketPaths.for_instance(Path("/r"), Path("/p"), DRIVER)
    assert plain == SocketPaths(Path(f"/r/{DRIVER}-reg.sock"), Path(f"/p/{DRIVER}/dra.sock"))
    rolling = SocketPaths.for_instance(Path("/r"), Path("/p"), DRIVER, POD_UID)
    assert rolling == SocketPaths(
        Path(f"/r/{DRIVER}-{POD_UID}-reg.sock"), Path(f"/p/{DRIVER}/dra-{POD_UID}.sock")
    )


@pytest.mark.parametrize(
    ("driver", "uid", "message"),
    [
        (DRIVER, "../evil", r"instance UID '../evil' is not a UID"),
        ("../x", POD_UID, r"driver name '../x' cannot name a directory"),
        (
            DRIVER,
            POD_UID + "-" + "a" * 60,
            r"longer than 108 bytes; use a shorter -kubelet-plugins-directory-path",
        ),
    ],
)
def test_unusable_paths_are_refused(driver: str, uid: str, message: str) -> None:
    with pytest.raises(RegistrationError, match=message):
        SocketPaths.for_instance(
            Path("/var/lib/kubelet/plugins_registry"), Path("/var/lib/kubelet/plugins"), driver, uid
        )


async def _info(registrar: Path) -> reg_pb.PluginInfo:
    async with grpc.aio.insecure_channel(f"unix://{registrar}") as channel:
        return await reg_grpc.RegistrationStub(channel).GetInfo(reg_pb.InfoRequest(), timeout=5)


async def test_two_instances_serve_side_by_side_and_remove_only_their_own_sockets(root: Path) -> None:
    async def claims(namespace: str, name: str) -> dict[str, object]:
        return claim("1f00", result("card0"))

    instances = []
    for uid in ("11111111-aaaa", "22222222-bbbb"):
        service = KubeletService(
            Profile(), Profile().scan, claims, NODE, Checkpoint.for_driver(root / "p", DRIVER), root / "cdi"
        )
        sockets = DriverSockets(
            SocketPaths.for_instance(root / "r", root / "p", DRIVER, uid), DRIVER, service.handlers()
        )
        await sockets.start()
        instances.append(sockets)
    old, new = instances
    try:
        assert {p.name for p in (root / "r").iterdir()} == {
            f"{DRIVER}-11111111-aaaa-reg.sock",
            f"{DRIVER}-22222222-bbbb-reg.sock",
        }
        endpoints = [(await _info(s.paths.registrar)).endpoint for s in instances]
        assert endpoints == [str(s.paths.plugin) for s in instances] and endpoints[0] != endpoints[1]
        await old.stop(grace=0)
        assert not old.paths.registrar.exists() and not old.paths.plugin.exists()
        assert new.paths.registrar.exists() and new.paths.plugin.exists()
        async with grpc.aio.insecure_channel(f"unix://{new.paths.plugin}") as channel:
            response = await pb_grpc.DRAPluginStub(channel).NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", name="claim", uid="1f00")]),
                timeout=5,
            )
        assert response.claims["1f00"].error == ""
    finally:
        for sockets in instances:
            await sockets.stop(grace=0)
    assert list((root / "r").iterdir()) == []


async def test_refused_registration_is_recorded(root: Path) -> None:
    heard: list[RegistrationStatus] = []
    paths = SocketPaths.for_instance(root / "r", root / "p", DRIVER)
    sockets = DriverSockets(paths, DRIVER, {}, on_status=heard.append)
    await sockets.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{sockets.paths.registrar}") as channel:
            await reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=False, error="version mismatch"), timeout=5
            )
    finally:
        await sockets.stop(grace=0)
    assert heard == sockets.registration.statuses == [RegistrationStatus(False, "version mismatch")]
