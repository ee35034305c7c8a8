"""A simulated xpumd: the device-info API on a unix socket, for the GPUs of a simulated node.

It serves ``deviceinfo.DeviceInfo`` (``WatchDeviceHealth``, ``WatchDeviceEvents``) as xpumd does: the
current snapshot at once on connect and then every ``interval`` (and at once on each change), events
only to those connected when they happen. Tests and the demo script it: a GPU overheats, reports
memory errors or is lost; the daemon is slow, crashes, restarts or answers garbage.

The socket clients connect to is a front that forwards bytes to the gRPC server on an inner socket.
The front is what makes failures real: a crash aborts every connection at once and leaves the socket
file behind (the next connect is refused, as after a killed process), and garbage mode writes bytes
that are no HTTP/2 to whoever connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from grpclib.const import Cardinality, Handler
from grpclib.encoding.base import CodecBase
from grpclib.server import Server, Stream

from intel_device_plugins.deviceplugin.health import deviceinfo as pb

log = logging.getLogger(__name__)

GARBAGE_MESSAGE = b"\x0a\x05abc"
"""A gRPC message that is no ``DeviceHealthResponse``: a field that runs past the end."""
GARBAGE_STREAM = b"this is not HTTP/2\r\n\r\n" + bytes(range(256))


class Garbage(StrEnum):
    """What a garbage-answering daemon sends: broken messages in a good stream, or no gRPC at all."""

    MESSAGES = "messages"
    CONNECTION = "connection"


@dataclass
class SimulatedXpu:
    """One GPU as xpumd sees it: its identity, its health domains, whether it is still there."""

    info: pb.DeviceInformation
    domains: dict[str, pb.HealthStatus] = field(default_factory=dict)
    present: bool = True

    @property
    def bdf(self) -> str:
        return self.info.pci.bdf if self.info.pci else ""

    def health(self) -> pb.DeviceHealth:
        return pb.DeviceHealth(self.info, tuple(self.domains[name] for name in sorted(self.domains)))


def healthy_domains() -> dict[str, pb.HealthStatus]:
    """The domains xpumd's default configuration reports for a good GPU (its integration test's)."""
    return {
        name: pb.HealthStatus(name, pb.SeverityLevel.SEVERITY_LEVEL_OK, "ok")
        for name in ("frequency", "memory", "temperature")
    }


def xpus_of_tree(root: Path) -> list[SimulatedXpu]:
    """The GPUs of a simulated node below ``root``, from ``/sys/class/drm/card<N>``: PCI address from the
    ``device`` link, device and vendor IDs from its files, in xpumd's form (4 hex digits, no ``0x``)."""
    xpus = []
    drm = root / "sys/class/drm"
    cards = sorted((p for p in drm.glob("card*") if p.name[4:].isdigit()), key=lambda p: int(p.name[4:]))
    for card in cards:
        device = (card / "device").resolve()
        bdf = device.name

        def hex_id(name: str, device: Path = device) -> str:
            try:
                return f"{int((device / name).read_text().strip(), 16):04x}"
            except (OSError, ValueError):
                return ""

        device_id = hex_id("device")
        numbers = bdf.replace(":", "").replace(".", "")
        info = pb.DeviceInformation(
            uuid=f"{numbers[:8]:0>8}-0000-0000-0000-{device_id:0>12}",
            model=f"Intel GPU {device_id}",
            pci=pb.PciInfo(bdf, device_id, hex_id("vendor")),
            firmwares=(pb.FirmwareInfo("gfx", "1.0.0.0"),),
            memory=(pb.MemoryInfo("gddr6", "", 16 << 30),),
        )
        xpus.append(SimulatedXpu(info, healthy_domains()))
    return xpus


class _RawCodec(CodecBase):
    @property
    def __content_subtype__(self) -> str:
        return "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        if not isinstance(message, bytes):
            raise TypeError(f"a message must be bytes, not {type(message).__name__}")
        return message

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


class _Servable:
    def __init__(self, handlers: dict[str, Handler]) -> None:
        self._handlers = handlers

    def __mapping__(self) -> dict[str, Handler]:
        return self._handlers


class SimulatedXpumd:
    """xpumd's device-info API for ``xpus`` on ``socket``; every fault is a method."""

    def __init__(self, socket: Path, xpus: list[SimulatedXpu], interval: float = 5.0) -> None:
        self.socket = socket
        self.inner_socket = socket.with_name(f".{socket.name}.inner")
        self.xpus = {xpu.bdf: xpu for xpu in xpus}
        self.interval = interval
        self.delay = 0.0
        """Seconds each health message waits before it is sent (a slow daemon)."""
        self.garbage: Garbage | None = None
        self.health_sent = 0
        self._changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._calls = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._subscribers: set[asyncio.Queue[bytes]] = set()
        self._server: Server | None = None
        self._front: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    @classmethod
    def for_node(cls, socket: Path, root: Path, interval: float = 5.0) -> SimulatedXpumd:
        """A daemon for the GPUs of the simulated node below ``root``."""
        return cls(socket, xpus_of_tree(root), interval)

    # ----- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.socket, self.inner_socket):
            path.unlink(missing_ok=True)
        self._stopping = asyncio.Event()
        handlers = {
            pb.DeviceInfo.WatchDeviceHealth.path: Handler(
                self._counted(self._watch_health), Cardinality.UNARY_STREAM, bytes, bytes
            ),
            pb.DeviceInfo.WatchDeviceEvents.path: Handler(
                self._counted(self._watch_events), Cardinality.UNARY_STREAM, bytes, bytes
            ),
        }
        self._server = Server([_Servable(handlers)], codec=_RawCodec())
        await self._server.start(path=os.fspath(self.inner_socket))
        self._front = await asyncio.start_unix_server(self._accept, path=os.fspath(self.socket))
        os.chmod(self.socket, 0o660)

    async def stop(self) -> None:
        """A graceful stop: every stream ends with status OK (clients see the end), the socket goes."""
        self._stopping.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 1)
        await asyncio.sleep(0.05)  # the calls' trailers pass the front before it closes
        await self._close(abort=False)
        self.socket.unlink(missing_ok=True)

    async def crash(self) -> None:
        """Die at once: every connection is aborted and the socket file stays (connects are refused)."""
        await self._close(abort=True)

    async def restart(self) -> None:
        """Stop gracefully and start again (xpumd exits to be restarted when its device set changes)."""
        await self.stop()
        await self.start()

    async def _close(self, abort: bool) -> None:
        if self._front is not None:
            self._front.close()
            self._front = None
        for writer in list(self._connections):
            if abort:
                writer.transport.abort()
            else:
                with contextlib.suppress(OSError):
                    await asyncio.wait_for(writer.drain(), 1)
                writer.close()
        self._connections.clear()
        for pump in list(self._pumps):
            pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._pumps, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.inner_socket.unlink(missing_ok=True)

    # ----- scripting ---------------------------------------------------------------------------------

    def set_domain(self, bdf: str, name: str, severity: int, reason: str = "", message: str = "") -> None:
        """One health domain of one GPU, as xpumd's mapping would report it."""
        self.xpus[bdf].domains[name] = pb.HealthStatus(name, severity, reason or name, message)
        self._changed_now()

    def overheat(self, bdf: str) -> None:
        """The GPU runs over its temperature warning threshold: xpumd's default mapping says WARNING
        (temperature never goes higher), and a ``temp_threshold1`` event (WARN) is sent."""
        self.set_domain(
            bdf,
            "temperature",
            pb.SeverityLevel.SEVERITY_LEVEL_WARNING,
            "warning",
            "GPU temperature over threshold",
        )
        self.emit(bdf, "temp_threshold1", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_WARN)

    def cool_down(self, bdf: str) -> None:
        self.set_domain(bdf, "temperature", pb.SeverityLevel.SEVERITY_LEVEL_OK, "ok")

    def memory_errors(self, bdf: str, severity: int = pb.SeverityLevel.SEVERITY_LEVEL_CRITICAL) -> None:
        """Uncorrectable memory errors: the ``memory`` domain at ``severity`` (CRITICAL is L0's
        ``critical``/``replace``) and a ``ras_uncorrectable_errors`` event (ERROR)."""
        self.set_domain(bdf, "memory", severity, "critical", "memory health critical")
        self.emit(bdf, "ras_uncorrectable_errors", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR)

    def lose(self, bdf: str) -> None:
        """The GPU falls off the bus: a ``device_detach`` event (ERROR), and it leaves the snapshot."""
        self.emit(bdf, "device_detach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR)
        self.xpus[bdf].present = False
        self._changed_now()

    def attach(self, bdf: str) -> None:
        """The GPU is back: a ``device_attach`` event (INFO) and healthy domains."""
        xpu = self.xpus[bdf]
        xpu.present = True
        xpu.domains = healthy_domains()
        self.emit(bdf, "device_attach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_INFO)
        self._changed_now()

    def emit(self, bdf: str, reason: str, severity: int, message: str = "") -> None:
        """An event to every client connected now (there is no replay)."""
        info = self.xpus[bdf].info
        event = pb.DeviceEventResponse(
            pb.DeviceIdentification(info.uuid, info.model, info.pci),
            reason,
            message or reason.upper(),
            severity,
        )
        data = GARBAGE_MESSAGE if self.garbage is Garbage.MESSAGES else event.encode()
        for queue in self._subscribers:
            queue.put_nowait(data)

    def snapshot(self) -> bytes:
        """The ``DeviceHealthResponse`` a client gets now."""
        if self.garbage is Garbage.MESSAGES:
            return GARBAGE_MESSAGE
        devices = tuple(xpu.health() for _, xpu in sorted(self.xpus.items()) if xpu.present)
        return pb.DeviceHealthResponse(devices).encode()

    def _changed_now(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ----- the API -----------------------------------------------------------------------------------

    def _counted(
        self, handler: Callable[[Stream[bytes, bytes]], Awaitable[None]]
    ) -> Callable[[Stream[bytes, bytes]], Awaitable[None]]:
        """Calls counted, so a graceful stop can wait for every stream to end with its status."""

        async def handle(stream: Stream[bytes, bytes]) -> None:
            self._calls += 1
            self._idle.clear()
            try:
                await handler(stream)
            finally:
                self._calls -= 1
                if not self._calls:
                    self._idle.set()

        return handle

    async def _watch_health(self, stream: Stream[bytes, bytes]) -> None:
        await stream.recv_message()
        while not self._stopping.is_set():
            changed = self._changed
            if self.delay:
                await self._until_stopping(asyncio.sleep(self.delay))
                if self._stopping.is_set():
                    break
            await stream.send_message(self.snapshot())
            self.health_sent += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._until_stopping(changed.wait()), self.interval)

    async def _watch_events(self, stream: Stream[bytes, bytes]) -> None:
        await stream.recv_message()
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            await stream.send_initial_metadata()
            while not self._stopping.is_set():
                getting = asyncio.ensure_future(queue.get())
                await self._until_stopping(getting)
                if not getting.done():
                    getting.cancel()
                    break
                await stream.send_message(getting.result())
        finally:
            self._subscribers.discard(queue)

    async def _until_stopping(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((task, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()

    # ----- the front ---------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.garbage is Garbage.CONNECTION:
            writer.write(GARBAGE_STREAM)
            with contextlib.suppress(OSError):
                await writer.drain()
            writer.close()
            return
        try:
            inner_reader, inner_writer = await asyncio.open_unix_connection(os.fspath(self.inner_socket))
        except OSError:
            writer.transport.abort()
            return
        self._connections.update((writer, inner_writer))
        for source, sink in ((reader, inner_writer), (inner_reader, writer)):
            pump = asyncio.ensure_future(_pump(source, sink))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            sink.close()


@contextlib.asynccontextmanager
async def serving(daemon: SimulatedXpumd) -> AsyncIterator[SimulatedXpumd]:
    """The daemon started for the block's duration."""
    await daemon.start()
    try:
        yield daemon
    finally:
        with contextlib.suppress(Exception):
            await daemon.stop()
