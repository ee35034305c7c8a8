"""The liveness service (``grpc.health.v1.Health``) as the kubelet's grpc probe reaches it over TCP."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import grpc.aio
import pytest

from intel_device_plugins.dra.checkpoint import Checkpoint
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.liveness import LivenessServer
from intel_device_plugins.dra.registration import DriverSockets, SocketPaths
from intel_device_plugins.kubeletapi.grpc_health_v1 import HealthCheckResponse_ServingStatus as ServingStatus
from tests.dra.draclaims import DRIVER, NODE, Profile

CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="live", dir="/tmp"))  # socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def request(service: str) -> bytes:
    """``HealthCheckRequest`` as protobuf encodes it."""
    data = service.encode()
    return b"\x0a" + bytes([len(data)]) + data if data else b""


def status(response: bytes) -> ServingStatus:
    return ServingStatus(response[1]) if response else ServingStatus.UNKNOWN


async def check(port: int, service: str = "") -> ServingStatus:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(CHECK, request_serializer=None, response_deserializer=None)
        return status(await call(request(service), timeout=10))


@asynccontextmanager
async def sockets(root: Path) -> AsyncIterator[tuple[SocketPaths, DriverSockets]]:
    profile = Profile()
    service = KubeletService(
        profile, profile.scan, _no_claims, NODE, Checkpoint.for_driver(root / "plugins", DRIVER), root / "cdi"
    )
    paths = SocketPaths.for_instance(root / "registry", root / "plugins", DRIVER)
    driver = DriverSockets(paths, DRIVER, service.handlers())
    yield paths, driver
    await driver.stop(grace=0)


async def _no_claims(namespace: str, name: str) -> dict[str, object]:
    raise LookupError(name)


async def test_serving_only_while_both_sockets_of_the_driver_answer(root: Path) -> None:
    port = free_port()
    async with sockets(root) as (paths, driver):
        liveness = LivenessServer(port, [paths], host="127.0.0.1")
        await liveness.start()
        try:
            assert await check(port) is ServingStatus.NOT_SERVING, "nothing listens on the sockets yet"
            await driver.start()
            assert await check(port) is ServingStatus.SERVING
            assert await check(port, "liveness") is ServingStatus.SERVING
            assert await check(port, "readiness") is ServingStatus.SERVICE_UNKNOWN
            paths.plugin.unlink()  # the kubelet could not reach the DRA service any more
            assert await check(port) is ServingStatus.NOT_SERVING
        finally:
            await liveness.stop()


async def test_watch_sends_the_status_at_once(root: Path) -> None:
    port = free_port()
    async with sockets(root) as (paths, driver):
        await driver.start()
        liveness = LivenessServer(port, [paths], host="127.0.0.1")
        await liveness.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_stream(WATCH, request_serializer=None, response_deserializer=None)
                stream = call(request(""), timeout=10)
                first = await asyncio.wait_for(stream.read(), 10)
                assert isinstance(first, bytes) and status(first) is ServingStatus.SERVING
                stream.cancel()
        finally:
            await liveness.stop()


async def test_a_port_in_use_is_an_error_naming_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        liveness = LivenessServer(port, [], host="127.0.0.1")
        with pytest.raises(OSError, match=f"-healthcheck-port {port}"):
            await liveness.start()
