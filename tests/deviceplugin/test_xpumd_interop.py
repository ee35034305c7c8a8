"""The xpumd client against a server built on grpcio and protoc's classes: what a real gRPC server sends
(headers only with the first message, trailers with a status) is read as the simulator's bytes are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from intel_device_plugins.deviceplugin.health.model import HealthSettings, HealthState, Severity, assess
from intel_device_plugins.deviceplugin.health.xpumd import StreamState, XpumdClient, XpumdSettings, running


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_grpcio_server_s_streams_become_findings(
    tmp_path: Path, deviceinfo_protos: tuple[ModuleType, ModuleType]
) -> None:
    pb, pb_grpc = deviceinfo_protos
    events: asyncio.Queue[Any] = asyncio.Queue()
    gpu = pb.DeviceInformation(
        uuid="u", model="Super 3000", pci=pb.PciInfo(bdf="0000:05:00.0", device_id="0bd5")
    )

    class Servicer(pb_grpc.DeviceInfoServicer):  # type: ignore[misc, name-defined]
        async def WatchDeviceHealth(self, request: Any, context: Any) -> AsyncIterator[Any]:
            health = [pb.HealthStatus(name="memory", severity=pb.SEVERITY_LEVEL_CRITICAL, reason="critical")]
            yield pb.DeviceHealthResponse(devices=[pb.DeviceHealth(info=gpu, health=health)])
            await asyncio.sleep(3600)

        async def WatchDeviceEvents(self, request: Any, context: Any) -> AsyncIterator[Any]:
            while True:
                yield await events.get()

    server = grpc.aio.server()
    pb_grpc.add_DeviceInfoServicer_to_server(Servicer(), server)
    socket = tmp_path / "xpumd.sock"
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    try:
        settings = XpumdSettings(socket, 1 << 20, 0.05, 0.2, 30)
        async with running(XpumdClient(settings)) as client:
            await until(lambda: client.view.health is StreamState.CONNECTED)
            verdict = assess(client.findings(), HealthSettings())["0000:05:00.0"]
            assert (verdict.state, verdict.severity) == (HealthState.UNHEALTHY, Severity.CRITICAL)
            await until(lambda: client.events_state is StreamState.CONNECTED)
            event = pb.DeviceEventResponse(
                device=pb.DeviceIdentification(uuid="u", pci=pb.PciInfo(bdf="0000:05:00.0")),
                reason="device_detach",
                message="DEVICE_DETACH",
                severity=pb.EVENT_SEVERITY_LEVEL_ERROR,
            )
            await events.put(event)
            await until(lambda: any(f.category == "device_detach" for f in client.findings()))
            await server.stop(grace=None)  # a status to every stream, then the connection closes
            await until(lambda: client.view.health is StreamState.DOWN)
            assert {f.severity for f in client.findings()} == {Severity.UNKNOWN}
    finally:
        await server.stop(grace=None)
