"""One kubelet-facing gRPC server per resource: serving, registration and staying registered.

The server is supervised level-based: a single ``reconcile`` step checks "is my socket there and
mine, is the kubelet I registered with still the one listening, does it still watch my devices" and
repairs whatever is off. It runs on every inotify event in the plugin directory, so a kubelet restart
(which deletes our socket) leads to a new socket and a new registration within milliseconds, and as
a safety net every second without inotify, every 30 s with it.

ListAndWatch never ends because of something on this side: the device list is built when it
changes, not in the stream, and a list that cannot be built is logged while the last good one stays
served. Should the kubelet's stream end while this server keeps running (and no new stream follow
within a second), the resource registers again, which makes the kubelet open a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from intel_device_plugins.deviceplugin.allocation import check_preferred, fallback_choice
from intel_device_plugins.deviceplugin.cdi import CdiWriteError, write_cdi_spec
from intel_device_plugins.deviceplugin.model import (
    AllocationError,
    CdiDevice,
    ContainerAllocation,
    DeviceMap,
    default_allocation,
)
from intel_device_plugins.deviceplugin.plugin import (
    Allocator,
    PostAllocator,
    PreferredAllocator,
    PreStarter,
    Scanner,
)
from intel_device_plugins.kubeletapi import deviceplugin_v1beta1 as pb
from intel_device_plugins.kubeletapi.rpc import (
    CALL_ERRORS,
    Handlers,
    UnixServer,
    call_unary,
    server_stream,
    unary,
)

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET_NAME = "kubelet.sock"
RECHECK_INTERVAL = 1.0
"""Seconds between level checks when the plugin directory is not watched by inotify."""
SAFETY_RECHECK_INTERVAL = 30.0
"""Seconds between level checks while inotify reports every change in the plugin directory."""
STREAM_GRACE = 1.0
"""Seconds without any ListAndWatch stream, after one ended, before registering again."""
MAX_RETRY_INTERVAL = 1.0
"""Backoff cap while the kubelet is unreachable; keeps re-registration within a second."""
FIRST_RETRY_INTERVAL = 0.05
REGISTER_TIMEOUT = 5.0
# How long ``stop`` waits for open ListAndWatch streams to carry the empty device list.
WITHDRAW_TIMEOUT = 0.3
KUBELET_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""The kubelet's gRPC receive limit: a longer ListAndWatch message breaks the stream, every time."""


def message_size_problem(size: int, devices: int, limit: int) -> str:
    """What to say about a ListAndWatch message of ``size`` bytes; nothing below 3/4 of the limit."""
    if size > limit:
        return (
            f"the device list of {devices} devices is {size} bytes, over the kubelet's limit of {limit} "
            "bytes: the kubelet will refuse it and the resource stays unusable; lower -shared-dev-num"
        )
    if size * 4 >= limit * 3:
        return (
            f"the device list of {devices} devices is {size} bytes, near the kubelet's limit of {limit} bytes"
        )
    return ""


@dataclass(frozen=True)
class FrameworkConfig:
    """Where the framework talks to the kubelet and writes CDI specs."""

    device_plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    cdi_dir: Path = Path("/var/run/cdi")
    scan_interval: float = 1.0
    """Seconds between scans of plugins that are polled (and of event-driven ones without events)."""
    event_rescan_interval: float = 60.0
    """Seconds between safety rescans of event-driven plugins while their event sources work."""
    scan_deadline: float = 5.0
    """Seconds a scan may take before it is reported as stuck."""
    uevent_dir: Path | None = None
    """Simulated nodes: read uevents from datagram sockets in this directory instead of the kernel."""

    @property
    def kubelet_socket(self) -> Path:
        return self.device_plugin_dir / KUBELET_SOCKET_NAME


def to_proto_allocation(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(allocation.envs),
        annotations=dict(allocation.annotations),
        mounts=tuple(
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in allocation.mounts
        ),
        devices=tuple(
            pb.DeviceSpec(container_path=n.container_path, host_path=n.host_path, permissions=n.permissions)
            for n in allocation.nodes
        ),
        cdi_devices=tuple(pb.CDIDevice(name=name) for name in allocation.cdi_devices),
    )


def to_proto_devices(devices: DeviceMap) -> tuple[pb.Device, ...]:
    """Devices sorted by ID, so every ListAndWatch message is deterministic."""
    return tuple(
        pb.Device(
            ID=device_id,
            health=info.health.value,
            topology=pb.TopologyInfo(nodes=tuple(pb.NUMANode(ID=n) for n in info.numa_nodes))
            if info.numa_nodes
            else None,
        )
        for device_id, info in sorted(devices.items())
    )


def _socket_in_use(path: Path) -> bool:
    """Whether a live process accepts connections on ``path`` (a stale file does not)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    if not stat.S_ISSOCK(info.st_mode):
        return None
    return (info.st_dev, info.st_ino)


class ResourceServer:
    """Serves one resource (``<namespace>/<resource>``) to the kubelet."""

    def __init__(
        self,
        plugin: Scanner,
        resource: str,
        config: FrameworkConfig,
        recheck_interval: Callable[[], float] | None = None,
    ) -> None:
        self.plugin = plugin
        self.resource = resource
        self.config = config
        self.resource_name = f"{plugin.namespace}/{resource}"
        self.socket_name = f"{plugin.namespace}-{resource}.sock"
        self.socket_path = config.device_plugin_dir / self.socket_name
        self._devices: DeviceMap = {}
        self._message = pb.ListAndWatchResponse()
        self._message_problem = ""
        self._version = 0
        self._recheck_interval = recheck_interval or (lambda: RECHECK_INTERVAL)
        self._open_streams = 0
        self._streams_behind: dict[int, int] = {}  # stream id -> version it last sent
        self._stream_lost_at: float | None = None
        self._changed = asyncio.Condition()
        self._server: UnixServer | None = None
        self._socket_identity: tuple[int, int] | None = None
        self._registered_with: tuple[int, int] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._closing = False  # set first by ``stop``: no update after the withdrawal
        self._last_problem = ""
        self._cdi_written: dict[str, tuple[CdiDevice, Path]] = {}
        # Hooks resolved once: an isinstance check against a runtime-checkable Protocol walks its
        # members every time, which cost about as much as the rest of an Allocate call.
        self._allocator = plugin if isinstance(plugin, Allocator) else None
        self._post_allocator = plugin if isinstance(plugin, PostAllocator) else None
        self._preferred_allocator = plugin if isinstance(plugin, PreferredAllocator) else None
        self._pre_starter = plugin if isinstance(plugin, PreStarter) else None
        self.registrations = 0
        """How many times this resource registered with a kubelet (observability and tests)."""

    # ----- state pushed by the manager -------------------------------------------------------

    @property
    def devices(self) -> DeviceMap:
        return self._devices

    async def update(self, devices: DeviceMap) -> None:
        """Replace the advertised devices; every open ListAndWatch stream sends the new list.

        A list that cannot be turned into a message is logged and not served; the last good one
        stays (and Allocate keeps using the devices that went with it). Once ``stop`` has begun,
        nothing is advertised any more.
        """
        if self._closing:
            return
        await self._publish(devices)

    async def _publish(self, devices: DeviceMap) -> None:
        try:
            message = pb.ListAndWatchResponse(devices=to_proto_devices(devices))
        except Exception:
            log.exception("%s: cannot build the device list; keeping the previous one", self.resource_name)
            return
        problem = message_size_problem(len(message.encode()), len(devices), KUBELET_MAX_MESSAGE_BYTES)
        if problem and problem != self._message_problem:
            log.warning("%s: %s", self.resource_name, problem)
        self._message_problem = problem
        async with self._changed:
            self._devices = devices
            self._message = message
            self._version += 1
            self._changed.notify_all()

    def wake(self) -> None:
        """Ask the supervisor to re-check socket and registration now (inotify event)."""
        self._wake.set()

    # ----- lifecycle -------------------------------------------------------------------------

    async def supervise(self) -> None:
        """Keep the socket served and registered until ``stop`` is called."""
        retry = FIRST_RETRY_INTERVAL
        while not self._stopping:
            self._wake.clear()
            if await self.reconcile():
                delay, retry = self._recheck_interval(), FIRST_RETRY_INTERVAL
            else:
                delay, retry = retry, min(retry * 2, MAX_RETRY_INTERVAL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)

    async def reconcile(self) -> bool:
        """One level-based repair step; ``True`` when served and registered."""
        if self._stopping:
            return False
        try:
            if self._server is None or _inode(self.socket_path) != self._socket_identity:
                await self._restart_serving()
            kubelet = _inode(self.config.kubelet_socket)
            if kubelet is None:
                self._problem(
                    f"kubelet socket {self.config.kubelet_socket} not found; waiting for the kubelet"
                )
                return False
            if kubelet != self._registered_with or self._stream_lost():
                if kubelet == self._registered_with:
                    log.warning(
                        "%s: the kubelet stopped watching the devices; registering again%s",
                        self.resource_name,
                        f" ({self._message_problem})" if self._message_problem else "",
                    )
                await self._register()
                self._stream_lost_at = None
                self._registered_with = kubelet
                self.registrations += 1
                self._last_problem = ""
                log.info("registered %s with the kubelet (endpoint %s)", self.resource_name, self.socket_name)
            return True
        except (*CALL_ERRORS, RuntimeError) as error:
            self._problem(f"{self.resource_name}: {error}")
            return False

    def _stream_lost(self) -> bool:
        """A ListAndWatch stream ended and none has been open for ``STREAM_GRACE`` seconds since."""
        return (
            self._open_streams == 0
            and self._stream_lost_at is not None
            and time.monotonic() - self._stream_lost_at >= STREAM_GRACE
        )

    def _problem(self, message: str) -> None:
        """Log a persistent problem once, not on every retry."""
        if message != self._last_problem:
            log.warning("%s", message)
            self._last_problem = message

    async def _restart_serving(self) -> None:
        if self._server is not None:
            log.info("socket %s was removed; serving it again", self.socket_path)
            await self._stop_server(grace=0)
        directory = self.config.device_plugin_dir
        if not directory.is_dir():
            state = "is not a directory" if directory.exists() else "does not exist"
            raise OSError(f"device plugin directory {directory} {state}")
        if self.socket_path.exists() or self.socket_path.is_symlink():
            if _socket_in_use(self.socket_path):
                raise OSError(f"socket {self.socket_path} is already in use by another process")
            self.socket_path.unlink()
        server = UnixServer(self.socket_path, self.handlers())
        await server.start()
        self._server = server
        self._socket_identity = _inode(self.socket_path)
        self._registered_with = None

    async def _register(self) -> None:
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_name,
            resource_name=self.resource_name,
            options=self._options(),
        )
        await call_unary(self.config.kubelet_socket, pb.Registration.Register, request, REGISTER_TIMEOUT)

    async def _stop_server(self, grace: float) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=grace)  # removes the socket file if it is still the one it made
        self._socket_identity = None

    async def stop(self) -> None:
        """Withdraw the devices, stop serving and remove our own socket (never someone else's).

        Why withdraw first: the kubelet keeps a vanished plugin's devices in the node's capacity for
        its endpoint grace period (5 minutes; allocatable drops at once). An empty list sent on the
        open streams before they end takes capacity to 0 too, so a removed plugin (its CR deleted,
        its node unlabelled) leaves a node that says what it has.
        """
        self._closing = True
        if self._open_streams and not self._stopping:
            await self._publish({})
            withdrawn = self._version
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WITHDRAW_TIMEOUT), self._changed:
                    await self._changed.wait_for(
                        lambda: all(v >= withdrawn for v in self._streams_behind.values())
                    )
        self._stopping = True
        self._wake.set()
        async with self._changed:
            self._changed.notify_all()
        await self._stop_server(grace=0.2)

    # ----- DevicePlugin service --------------------------------------------------------------

    def handlers(self) -> Handlers:
        """``v1beta1.DevicePlugin``, for the server on this resource's socket."""
        return dict(
            [
                unary(pb.DevicePlugin.GetDevicePluginOptions, self.GetDevicePluginOptions),
                server_stream(pb.DevicePlugin.ListAndWatch, self.ListAndWatch),
                unary(pb.DevicePlugin.GetPreferredAllocation, self.GetPreferredAllocation),
                unary(pb.DevicePlugin.Allocate, self.Allocate),
                unary(pb.DevicePlugin.PreStartContainer, self.PreStartContainer),
            ]
        )

    def _options(self) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=self._pre_starter is not None,
            get_preferred_allocation_available=self._preferred_allocator is not None,
        )

    async def GetDevicePluginOptions(self, request: pb.Empty) -> pb.DevicePluginOptions:
        return self._options()

    async def ListAndWatch(self, request: pb.Empty) -> AsyncIterator[pb.ListAndWatchResponse]:
        sent_version = -1
        marker = object()  # this call's key in ``_streams_behind`` is its id, unique while the call runs
        stream = id(marker)
        self._open_streams += 1
        self._streams_behind[stream] = sent_version
        self._stream_lost_at = None
        try:
            while True:
                try:
                    async with self._changed:
                        await self._changed.wait_for(self._news_since(sent_version))
                        if self._stopping:
                            return
                        sent_version = self._version
                        message = self._message
                except Exception:
                    # Never end the kubelet's stream over a fault here: the devices would vanish.
                    log.exception("%s: ListAndWatch failed; the stream stays open", self.resource_name)
                    await asyncio.sleep(RECHECK_INTERVAL)
                    continue
                yield message
                # The next message is asked for once this one is written: it has left.
                async with self._changed:
                    self._streams_behind[stream] = sent_version
                    self._changed.notify_all()
        finally:
            self._streams_behind.pop(stream, None)
            self._open_streams -= 1
            if not self._stopping and self._open_streams == 0:
                self._stream_lost_at = time.monotonic()
                with contextlib.suppress(RuntimeError):
                    asyncio.get_running_loop().call_later(STREAM_GRACE + 0.05, self._wake.set)

    def _news_since(self, version: int) -> Callable[[], bool]:
        return lambda: self._stopping or self._version != version

    async def Allocate(self, request: pb.AllocateRequest) -> pb.AllocateResponse:
        devices = self._devices
        responses = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            if self._closing:
                # The devices are withdrawn by now; "non-existing device" would send the user hunting.
                raise GRPCError(
                    Status.UNAVAILABLE,
                    f"{self.resource_name}: the plugin is stopping; {', '.join(ids)} not allocated",
                )
            try:
                allocation = self.allocate_container(devices, ids)
            except AllocationError as error:
                log.warning("%s: Allocate rejected: %s", self.resource_name, error)
                raise GRPCError(Status.INVALID_ARGUMENT, str(error)) from error
            except Exception as error:
                log.exception("%s: Allocate of %s failed", self.resource_name, ids)
                raise GRPCError(
                    Status.INTERNAL, f"{self.resource_name}: allocation failed: {error}"
                ) from error
            try:
                self._write_cdi_specs(devices, ids)
            except CdiWriteError as error:
                # Handing out a CDI name without its spec would fail the pod later, obscurely.
                log.error("%s: Allocate of %s failed: %s", self.resource_name, ids, error)
                raise GRPCError(Status.INTERNAL, f"{self.resource_name}: {error}") from error
            responses.append(to_proto_allocation(allocation))
        return pb.AllocateResponse(container_responses=tuple(responses))

    def allocate_container(self, devices: DeviceMap, ids: Sequence[str]) -> ContainerAllocation:
        """The plugin's own allocation if it has one, else the default plus its post-allocation hook."""
        if self._allocator is not None:
            custom = self._allocator.allocate(self.resource, devices, ids)
            if custom is not None:
                return custom
        allocation = default_allocation(devices, list(ids))
        if self._post_allocator is not None:
            allocation = self._post_allocator.post_allocate(self.resource, devices, ids, allocation)
        return allocation

    def _write_cdi_specs(self, devices: DeviceMap, ids: Sequence[str]) -> None:
        """Make sure the runtime can resolve every CDI name handed out; raises ``CdiWriteError``.

        A spec written before is only checked for existence (``/var/run`` is emptied on reboot);
        a changed device gets its spec rewritten.
        """
        for device_id in ids:
            info = devices.get(device_id)
            if info is None or info.cdi is None:
                continue
            known = self._cdi_written.get(info.cdi.qualified_name)
            if known is not None and known[0] == info.cdi and os.path.exists(known[1]):
                continue
            path = write_cdi_spec(self.config.cdi_dir, info.cdi)
            self._cdi_written[info.cdi.qualified_name] = (info.cdi, path)

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest
    ) -> pb.PreferredAllocationResponse:
        responses = []
        devices = self._devices
        for container in request.container_requests:
            # IDs this plugin does not advertise go first, in linear time: the policies are written for a
            # node's worth of IDs, and a stale or hostile caller must not make them work through 10,000.
            available = [i for i in container.available_deviceIDs if i in devices]
            must_include = [i for i in container.must_include_deviceIDs if i in devices]
            unknown = len(container.available_deviceIDs) - len(available)
            if unknown:
                log.warning(
                    "%s: GetPreferredAllocation offered %d IDs this plugin does not advertise; ignored",
                    self.resource_name,
                    unknown,
                )
            size = min(container.allocation_size, len(available))
            responses.append(
                pb.ContainerPreferredAllocationResponse(
                    deviceIDs=tuple(self.preferred(available, must_include, size))
                )
            )
        return pb.PreferredAllocationResponse(container_responses=tuple(responses))

    def preferred(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        """The plugin's preference, checked; any failure yields a valid fallback, never an error.

        An error here would make the kubelet reject the pod, so this never raises.
        """
        if self._preferred_allocator is None:
            return list(fallback_choice(available, must_include, size))
        try:
            answer = list(
                self._preferred_allocator.preferred_allocation(self.resource, available, must_include, size)
            )
        except Exception as error:
            log.warning(
                "%s: preferred allocation policy failed (%s); using fallback", self.resource_name, error
            )
            return list(fallback_choice(available, must_include, size))
        checked = check_preferred(answer, available, must_include, size)
        if checked.problem:
            log.warning("%s: preferred allocation %s; using fallback", self.resource_name, checked.problem)
        return list(checked.ids)

    async def PreStartContainer(self, request: pb.PreStartContainerRequest) -> pb.PreStartContainerResponse:
        if self._pre_starter is not None:
            try:
                self._pre_starter.pre_start(self.resource, list(request.devices_ids))
            except Exception as error:
                log.warning("%s: PreStartContainer failed: %s", self.resource_name, error)
                raise GRPCError(Status.FAILED_PRECONDITION, str(error)) from error
        return pb.PreStartContainerResponse()
