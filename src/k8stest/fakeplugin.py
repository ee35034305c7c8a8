"""A tiny device plugin for exercising the real device manager.

Why its own plugin: the harness tests must not depend on the project's real plugins (those are
tested *with* the harness), and a plugin whose devices, health and Allocate answer a test sets
directly makes every device-manager behaviour reachable. It follows the kubelet's contract:
serve first, then register; re-register when the kubelet restarts (our socket disappears).

It runs a grpc.aio server on its own event loop in a background thread, so synchronous tests can
drive it with plain method calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio

from k8stest.kubeletapi import (
    deviceplugin_v1beta1_pb2 as pb,
)
from k8stest.kubeletapi import (
    deviceplugin_v1beta1_pb2_grpc as pb_grpc,
)

T = TypeVar("T")
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True)
class FakeDevice:
    id: str
    health: str = HEALTHY
    numa: tuple[int, ...] = ()


@dataclass(frozen=True)
class AllocationSpec:
    """How the fake answers Allocate for a set of device IDs (the defaults look like a GPU)."""

    dev_prefix: str = "/dev/fake"
    mounts: tuple[tuple[str, str, bool], ...] = ()  # (container_path, host_path, read_only)
    env_name: str = "FAKE_DEVICES"
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_kind: str | None = "example.com/fake"

    def response(self, ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        resp = pb.ContainerAllocateResponse()
        for dev_id in ids:
            path = f"{self.dev_prefix}{dev_id}"
            resp.devices.append(pb.DeviceSpec(container_path=path, host_path=path, permissions="rw"))
            if self.cdi_kind:
                resp.cdi_devices.append(pb.CDIDevice(name=f"{self.cdi_kind}={dev_id}"))
        for cpath, hpath, ro in self.mounts:
            resp.mounts.append(pb.Mount(container_path=cpath, host_path=hpath, read_only=ro))
        resp.envs[self.env_name] = ",".join(sorted(ids))
        for k, v in self.annotations.items():
            resp.annotations[k] = v
        return resp


class _Servicer(pb_grpc.DevicePluginServicer):
    def __init__(self, plugin: FakeDevicePlugin) -> None:
        self._p = plugin

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        seen = -1
        while True:
            async with self._p._cond:
                await self._p._cond.wait_for(lambda s=seen: self._p._version != s)  # type: ignore[misc]
                seen = self._p._version
                devices = list(self._p._devices)
            resp = pb.ListAndWatchResponse()
            for d in devices:
                dev = pb.Device(ID=d.id, health=d.health)
                for n in d.numa:
                    dev.topology.nodes.append(pb.NUMANode(ID=n))
                resp.devices.append(dev)
            yield resp

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreferredAllocationResponse:
        return pb.PreferredAllocationResponse()

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AllocateResponse:
        self._p.allocations.append([list(c.devices_ids) for c in request.container_requests])
        resp = pb.AllocateResponse()
        for creq in request.container_requests:
            resp.container_responses.append(self._p.allocation.response(list(creq.devices_ids)))
        return resp

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class FakeDevicePlugin:
    """A device plugin for ``resource`` serving ``<plugin_dir>/<socket_name>``."""

    def __init__(
        self,
        plugin_dir: Path,
        resource: str,
        devices: Sequence[FakeDevice],
        *,
        socket_name: str | None = None,
        allocation: AllocationSpec | None = None,
        kubelet_socket_name: str = "kubelet.sock",
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resource = resource
        self.socket_name = socket_name or resource.replace("/", "-").replace(".", "_") + ".sock"
        self.kubelet_socket = plugin_dir / kubelet_socket_name
        self.allocation = allocation or AllocationSpec()
        self.registrations = 0
        self.allocations: list[list[list[str]]] = []
        self._devices = list(devices)
        self._version = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"fakeplugin-{resource}", daemon=True
        )
        self._cond: asyncio.Condition
        self._server: grpc.aio.Server | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / self.socket_name

    def _run(self, coro: Any) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout=30)

    def start(self) -> None:
        """Serve, register, and keep watching for kubelet restarts."""
        self._thread.start()
        self._run(self._start())

    async def _start(self) -> None:
        self._cond = asyncio.Condition()
        await self._serve_and_register()
        self._watch = asyncio.get_running_loop().create_task(self._watch_socket())

    async def _serve_and_register(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server
        await self._register()

    async def _register(self) -> None:
        async with grpc.aio.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            await pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version="v1beta1",
                    endpoint=self.socket_name,
                    resource_name=self.resource,
                    options=pb.DevicePluginOptions(),
                ),
                timeout=10,
            )
        self.registrations += 1

    async def _watch_socket(self) -> None:
        """The kubelet deletes plugin sockets when it starts; that is our cue to re-register."""
        while True:
            await asyncio.sleep(0.1)
            if self.socket_path.exists():
                continue
            # Wait for the new kubelet.sock, then serve again and register; retry on failure
            # (the kubelet may not be listening yet).
            while True:
                try:
                    if self.kubelet_socket.exists():
                        await self._serve_and_register()
                        break
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.2)

    def set_devices(self, devices: Sequence[FakeDevice]) -> None:
        """Replace the device list; a new ListAndWatch message goes out at once."""

        async def update() -> None:
            async with self._cond:
                self._devices = list(devices)
                self._version += 1
                self._cond.notify_all()

        self._run(update())

    def stop(self) -> None:
        """Stop serving (the kubelet sees the stream end) and end the thread."""

        async def shutdown() -> None:
            if self._watch is not None:
                self._watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._watch
            if self._server is not None:
                await self._server.stop(0)
                self._server = None

        if self._thread.is_alive():
            self._run(shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def __enter__(self) -> FakeDevicePlugin:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def devices(
    n: int, *, prefix: str = "dev", numa: Callable[[int], tuple[int, ...]] | None = None
) -> list[FakeDevice]:
    """``n`` healthy devices ``dev0..dev{n-1}``."""
    return [FakeDevice(f"{prefix}{i}", HEALTHY, numa(i) if numa else ()) for i in range(n)]
