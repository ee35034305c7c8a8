"""A kubelet stand-in that speaks the real device plugin API v1beta1.

It serves the Registration service on ``<dir>/kubelet.sock``, dials each registering plugin,
consumes its ListAndWatch stream and can call Allocate and GetPreferredAllocation the way the
kubelet does. A restart behaves like the kubelet's: every socket in the directory is removed, then
``kubelet.sock`` is created again. Used by the tests, the benchmarks and the demo.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from intel_device_plugins.deviceplugin.server import API_VERSION, KUBELET_SOCKET_NAME
from intel_device_plugins.kubeletapi import deviceplugin_v1beta1 as pb
from intel_device_plugins.kubeletapi.rpc import CALL_ERRORS, UnixServer, call, channel, stream_messages, unary

log = logging.getLogger(__name__)

_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class AdvertisedDevice:
    id: str
    health: str
    numa_nodes: tuple[int, ...]


@dataclass
class _Endpoint:
    resource_name: str
    endpoint: str
    options: pb.DevicePluginOptions
    channel: Channel
    devices: dict[str, AdvertisedDevice] = field(default_factory=dict)
    connected: bool = True
    answered: bool = False
    """Whether the first ListAndWatch answer has arrived (an empty device list is an answer too)."""
    watcher: asyncio.Task[None] | None = None


class KubeletStandIn:
    """Registration server plus ListAndWatch consumer, Allocate and GetPreferredAllocation client."""

    def __init__(self, device_plugin_dir: Path) -> None:
        self.device_plugin_dir = device_plugin_dir
        self.socket_path = device_plugin_dir / KUBELET_SOCKET_NAME
        self._server: UnixServer | None = None
        self._endpoints: dict[str, _Endpoint] = {}
        self._changed = asyncio.Condition()
        self.registrations: list[tuple[str, str]] = []
        """(resource name, endpoint) for every accepted Register call, in order."""
        self.updates = 0
        """Number of ListAndWatch messages received, over all resources."""

    # ----- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self.device_plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = UnixServer(self.socket_path, dict([unary(pb.Registration.Register, self.Register)]))
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=0.1)
        for endpoint in list(self._endpoints.values()):
            await self._disconnect(endpoint)
        self.socket_path.unlink(missing_ok=True)

    async def restart(self) -> None:
        """Like a kubelet restart: drop connections, delete every socket in the directory, listen again."""
        await self.stop()
        for entry in self.device_plugin_dir.iterdir():
            if entry.is_socket():
                entry.unlink(missing_ok=True)
        await self.start()

    async def __aenter__(self) -> KubeletStandIn:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # ----- Registration service --------------------------------------------------------------

    async def Register(self, request: pb.RegisterRequest) -> pb.Empty:
        if request.version != API_VERSION:
            raise GRPCError(Status.INVALID_ARGUMENT, f"unsupported API version {request.version!r}")
        if not _RESOURCE_NAME.match(request.resource_name):
            raise GRPCError(Status.INVALID_ARGUMENT, f"invalid resource name {request.resource_name!r}")
        connection = channel(self.device_plugin_dir / request.endpoint)
        try:
            options = await call(connection, pb.DevicePlugin.GetDevicePluginOptions, pb.Empty(), timeout=10)
        except CALL_ERRORS as error:
            connection.close()
            raise GRPCError(Status.UNAVAILABLE, f"cannot reach plugin {request.endpoint}: {error}") from error
        previous = self._endpoints.get(request.resource_name)
        if previous is not None:
            await self._disconnect(previous)
        endpoint = _Endpoint(request.resource_name, request.endpoint, options, connection)
        self._endpoints[request.resource_name] = endpoint
        endpoint.watcher = asyncio.create_task(
            self._watch(endpoint), name=f"ListAndWatch {request.resource_name}"
        )
        self.registrations.append((request.resource_name, request.endpoint))
        async with self._changed:
            self._changed.notify_all()
        return pb.Empty()

    async def _watch(self, endpoint: _Endpoint) -> None:
        try:
            async for message in stream_messages(endpoint.channel, pb.DevicePlugin.ListAndWatch, pb.Empty()):
                async with self._changed:
                    endpoint.devices = {
                        d.ID: AdvertisedDevice(
                            d.ID, d.health, tuple(n.ID for n in d.topology.nodes) if d.topology else ()
                        )
                        for d in message.devices
                    }
                    endpoint.answered = True
                    self.updates += 1
                    self._changed.notify_all()
        except CALL_ERRORS as error:
            log.debug("ListAndWatch of %s ended: %s", endpoint.resource_name, error)
        # Like the kubelet: a lost stream makes every device of the resource unhealthy.
        async with self._changed:
            endpoint.connected = False
            endpoint.devices = {
                k: AdvertisedDevice(v.id, "Unhealthy", v.numa_nodes) for k, v in endpoint.devices.items()
            }
            self._changed.notify_all()

    async def drop_stream(self, resource_name: str) -> None:
        """End one resource's ListAndWatch stream without a restart, as the kubelet does when the stream
        fails: its devices turn Unhealthy until the plugin registers again."""
        endpoint = self._endpoints[resource_name]
        await self._disconnect(endpoint)
        async with self._changed:
            endpoint.connected = False
            endpoint.devices = {
                k: AdvertisedDevice(v.id, "Unhealthy", v.numa_nodes) for k, v in endpoint.devices.items()
            }
            self._changed.notify_all()

    async def _disconnect(self, endpoint: _Endpoint) -> None:
        if endpoint.watcher is not None:
            endpoint.watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await endpoint.watcher
        endpoint.channel.close()

    # ----- what the tests and the demo look at -----------------------------------------------

    def resources(self) -> dict[str, dict[str, AdvertisedDevice]]:
        """Resource name → device ID → advertised device, for every registered resource."""
        return {name: dict(endpoint.devices) for name, endpoint in self._endpoints.items()}

    def listed(self) -> set[str]:
        """Registered resources whose plugin has sent its first ListAndWatch answer."""
        return {name for name, endpoint in self._endpoints.items() if endpoint.answered}

    def allocatable(self, resource_name: str) -> int:
        endpoint = self._endpoints.get(resource_name)
        if endpoint is None or not endpoint.connected:
            return 0
        return sum(1 for device in endpoint.devices.values() if device.health == "Healthy")

    def options(self, resource_name: str) -> pb.DevicePluginOptions:
        return self._endpoints[resource_name].options

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait until ``condition()`` holds after some registration or ListAndWatch update."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(condition), timeout)

    async def allocate(self, resource_name: str, ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        """One Allocate call for one container, as the kubelet makes it."""
        response = await call(
            self._endpoints[resource_name].channel,
            pb.DevicePlugin.Allocate,
            pb.AllocateRequest(container_requests=(pb.ContainerAllocateRequest(devices_ids=tuple(ids)),)),
            timeout=10,
        )
        return response.container_responses[0]

    async def preferred(
        self, resource_name: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        response = await call(
            self._endpoints[resource_name].channel,
            pb.DevicePlugin.GetPreferredAllocation,
            pb.PreferredAllocationRequest(
                container_requests=(
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=tuple(available),
                        must_include_deviceIDs=tuple(must_include),
                        allocation_size=size,
                    ),
                )
            ),
            timeout=10,
        )
        return list(response.container_responses[0].deviceIDs)
