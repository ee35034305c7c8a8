"""A client of xpumd's device-info API: both watch streams, turned into health findings.

xpumd (Intel's XPU manager daemon) serves ``deviceinfo.DeviceInfo`` on a unix socket
(``/run/xpumd/intelxpuinfo.sock`` by default): ``WatchDeviceHealth`` pushes every device's health
domains on each collection (every 5 s by default, the cached snapshot at once on connect);
``WatchDeviceEvents`` pushes hardware events as they happen, with no replay.

The mapping from messages to findings is pure (:func:`health_findings`, :func:`event_finding`,
:class:`EventLatch`); :class:`XpumdClient` is the asyncio shell. It never raises into its caller:
whatever goes wrong with xpumd (no socket, a refused or dropped connection, a stream that stays silent,
bytes that are no message, an oversized message), the client logs one line when its state changes,
reports ``Severity.UNKNOWN`` for the devices xpumd spoke of, and reconnects after a back-off that
doubles up to a cap.

Events are edges, not states, so the client latches the ones that count (ERROR and worse) per device and
reason until the device is attached again or the event stream is reconnected (a new xpumd process,
whose health snapshot then tells the current state).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from grpclib.const import Cardinality

from intel_device_plugins.deviceplugin.health import deviceinfo
from intel_device_plugins.deviceplugin.health.model import Finding, Severity
from intel_device_plugins.kubeletapi import rpc
from intel_device_plugins.kubeletapi.wire import Method

log = logging.getLogger(__name__)

DEFAULT_SOCKET: Final = Path("/run/xpumd/intelxpuinfo.sock")
SOURCE: Final = "xpumd"
EVENT_SOURCE: Final = "xpumd-event"
CONNECTION_CATEGORY: Final = "xpumd"
"""The category of the ``Unknown`` findings the client reports while xpumd cannot say anything."""

SEVERITIES: Final[Mapping[int, Severity]] = MappingProxyType({level.value: level for level in Severity})
"""``SeverityLevel`` number → severity (the same numbers); a number not listed here is UNKNOWN."""

EVENT_SEVERITIES: Final[Mapping[int, Severity]] = MappingProxyType(
    {
        deviceinfo.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR: Severity.CRITICAL,
        deviceinfo.EventSeverityLevel.EVENT_SEVERITY_LEVEL_FATAL: Severity.FAILED,
    }
)
"""``EventSeverityLevel`` → the severity of the finding it latches. WARN and below latch nothing: WARN
events (``temp_threshold1``, ``freq_throttled``, ``ras_correctable_errors`` …) announce conditions the
health snapshot carries and clears, while a latched event would hold until the GPU is attached again
(a GPU that once throttled would stay Unhealthy under a ``warning`` threshold)."""

ATTACH_REASON: Final = "device_attach"
"""The event after which a device's latched events no longer hold."""


@dataclass(frozen=True)
class XpumdSettings:
    """Where xpumd is and how patiently to wait for it."""

    socket: Path = DEFAULT_SOCKET
    max_message_bytes: int = 1024 * 1024
    """A message announced longer is refused unread; a snapshot of 64 GPUs is a few tens of KiB."""
    first_retry_seconds: float = 1.0
    max_retry_seconds: float = 30.0
    """The back-off doubles from the first retry up to this cap, and starts over after a good message."""
    stale_after_seconds: float = 30.0
    """No health snapshot for this long (xpumd sends one every 5 s) → Unknown, and reconnect."""

    def __post_init__(self) -> None:
        if self.max_message_bytes <= 0:
            raise ValueError(f"xpumd max_message_bytes must be positive, not {self.max_message_bytes}")
        if not 0 < self.first_retry_seconds <= self.max_retry_seconds:
            raise ValueError(
                f"xpumd retry: first {self.first_retry_seconds} s must be positive and at most "
                f"the cap {self.max_retry_seconds} s"
            )
        if self.stale_after_seconds <= 0:
            raise ValueError(f"xpumd stale_after_seconds must be positive, not {self.stale_after_seconds}")


# ----- the pure mapping ---------------------------------------------------------------------------------


def device_key(pci: deviceinfo.PciInfo | None) -> str | None:
    """The device a message is about: its PCI address, lowercased; None when xpumd gave none."""
    if pci is None or not pci.bdf:
        return None
    return pci.bdf.strip().lower()


def health_findings(devices: Iterable[deviceinfo.DeviceHealth]) -> tuple[Finding, ...]:
    """One finding per health domain of each device with a PCI address; a device with no domains yet
    gets one UNKNOWN finding, so it is still named."""
    findings: list[Finding] = []
    for device in devices:
        key = device_key(device.info.pci if device.info else None)
        if key is None:
            continue
        if not device.health:
            findings.append(
                Finding(key, SOURCE, CONNECTION_CATEGORY, Severity.UNKNOWN, "no health domains yet")
            )
        for status in device.health:
            severity = SEVERITIES.get(status.severity, Severity.UNKNOWN)
            detail = " ".join(part for part in (status.reason, status.message) if part)
            if status.severity not in SEVERITIES:
                detail = f"unknown severity {status.severity}" + (f": {detail}" if detail else "")
            findings.append(Finding(key, SOURCE, status.name or "unnamed", severity, detail))
    return tuple(findings)


def event_finding(event: deviceinfo.DeviceEventResponse) -> Finding | None:
    """The finding an event latches: ERROR → CRITICAL, FATAL → FAILED; None for the
    rest or for an event that names no PCI address."""
    key = device_key(event.device.pci if event.device else None)
    severity = EVENT_SEVERITIES.get(event.severity)
    if key is None or severity is None:
        return None
    return Finding(key, EVENT_SOURCE, event.reason or "event", severity, event.message)


@dataclass(frozen=True)
class EventLatch:
    """The events that still hold, by (device, reason)."""

    held: Mapping[tuple[str, str], Finding] = field(default_factory=lambda: MappingProxyType({}))

    def after(self, event: deviceinfo.DeviceEventResponse) -> EventLatch:
        """The latch once ``event`` arrived: an attach clears the device's events; an ERROR or worse holds."""
        key = device_key(event.device.pci if event.device else None)
        held = dict(self.held)
        if key is not None and event.reason == ATTACH_REASON:
            held = {k: v for k, v in held.items() if k[0] != key}
        finding = event_finding(event)
        if finding is not None:
            held[(finding.device, finding.category)] = finding
        return EventLatch(MappingProxyType(held))

    def findings(self) -> tuple[Finding, ...]:
        return tuple(self.held[key] for key in sorted(self.held))


class StreamState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    DOWN = "down"


@dataclass(frozen=True)
class XpumdView:
    """What the client knows: the last snapshot, the latched events, and whether the snapshot is current."""

    snapshot: tuple[Finding, ...] = ()
    events: EventLatch = EventLatch()
    health: StreamState = StreamState.CONNECTING
    problem: str = ""
    """Why the health stream is not connected (for the Unknown findings' message)."""

    def findings(self) -> tuple[Finding, ...]:
        """While the health stream is connected, what xpumd said; else the same devices at UNKNOWN."""
        if self.health is StreamState.CONNECTED:
            return self.snapshot + self.events.findings()
        devices = sorted({finding.device for finding in self.snapshot + self.events.findings()})
        message = f"xpumd {self.health.value}" + (f": {self.problem}" if self.problem else "")
        return tuple(
            Finding(device, SOURCE, CONNECTION_CATEGORY, Severity.UNKNOWN, message) for device in devices
        )


# ----- the asyncio shell --------------------------------------------------------------------------------


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if text != type(error).__name__ else text


class XpumdClient:
    """Watches xpumd's two streams; :meth:`findings` is what xpumd says now (or Unknown).

    ``on_change`` is called (in the event loop) whenever the findings may have changed, so a consumer
    can rescan at once rather than at its next period.
    """

    def __init__(
        self,
        settings: XpumdSettings | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings or XpumdSettings()
        self.view = XpumdView()
        self.events_state = StreamState.CONNECTING
        self._on_change = on_change

    def findings(self) -> tuple[Finding, ...]:
        return self.view.findings()

    async def run(self) -> None:
        """Watch both streams until cancelled; nothing else ends it."""
        await asyncio.gather(
            self._watch(
                deviceinfo.DeviceInfo.WatchDeviceHealth,
                "health",
                self._on_health,
                self.settings.stale_after_seconds,
            ),
            self._watch(deviceinfo.DeviceInfo.WatchDeviceEvents, "events", self._on_event, None),
        )

    # -- state changes, one log line each

    def _set_view(self, view: XpumdView) -> None:
        if view != self.view:
            before = self.view.findings()
            self.view = view
            if view.findings() != before and self._on_change is not None:
                self._on_change()

    def _health_state(self, state: StreamState, problem: str = "") -> None:
        if state is not self.view.health:
            self._log_state("health", state, problem)
        self._set_view(replace(self.view, health=state, problem=problem))

    def _events_state(self, state: StreamState, problem: str = "") -> None:
        if state is not self.events_state:
            self._log_state("events", state, problem)
            self.events_state = state

    def _log_state(self, stream: str, state: StreamState, problem: str) -> None:
        where = self.settings.socket
        if state is StreamState.CONNECTED:
            log.info("xpumd %s stream on %s: connected", stream, where)
        else:
            effect = "device health from xpumd is Unknown" if stream == "health" else "latched events dropped"
            log.warning(
                "xpumd %s stream on %s: %s (%s); %s", stream, where, state.value, problem or "?", effect
            )

    def _on_health(self, data: bytes) -> None:
        snapshot = health_findings(deviceinfo.DeviceHealthResponse.decode(data).devices)
        if self.view.health is not StreamState.CONNECTED:
            self._log_state("health", StreamState.CONNECTED, "")
        self._set_view(replace(self.view, snapshot=snapshot, health=StreamState.CONNECTED, problem=""))

    def _on_event(self, data: bytes) -> None:
        event = deviceinfo.DeviceEventResponse.decode(data)
        log.info(
            "xpumd event on %s: %s %s (severity %d)",
            device_key(event.device.pci if event.device else None) or "an unnamed device",
            event.reason,
            event.message,
            event.severity,
        )
        self._set_view(replace(self.view, events=self.view.events.after(event)))

    # -- the loops

    async def _watch(
        self,
        method: Method[Any, Any],
        name: str,
        handle: Callable[[bytes], None],
        stale_after: float | None,
    ) -> None:
        delay = self.settings.first_retry_seconds
        while True:
            try:
                received = await self._session(method, name, handle, stale_after)
                problem = "xpumd ended the stream"
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                received = False
                problem = f"no message for {stale_after:g} s"
            except Exception as error:  # whatever xpumd does degrades its findings, never the caller
                received = False
                problem = _describe(error)
            if name == "health":
                self._health_state(StreamState.DOWN, problem)
            else:
                self._events_state(StreamState.DOWN, problem)
                self._set_view(replace(self.view, events=EventLatch()))
            if received:
                delay = self.settings.first_retry_seconds
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.max_retry_seconds)

    async def _session(
        self,
        method: Method[Any, Any],
        name: str,
        handle: Callable[[bytes], None],
        stale_after: float | None,
    ) -> bool:
        """One connection: subscribe, hand each message (undecoded: ``handle`` decodes it) to ``handle``;
        whether any message came. A message over ``max_message_bytes`` is refused unread."""
        received = False
        channel = rpc.channel(self.settings.socket)
        try:
            async with channel.request(
                method.path, Cardinality.UNARY_STREAM, method.request, method.response
            ) as stream:
                await stream.send_message(method.request(), end=True)
                if name == "events":
                    # Events may not come for hours; the subscription itself is the connection.
                    self._events_state(StreamState.CONNECTED)
                while True:
                    reading = rpc.read_message(stream, self.settings.max_message_bytes)
                    data = await (asyncio.wait_for(reading, stale_after) if stale_after else reading)
                    if data is None:
                        return received
                    handle(data)
                    received = True
        finally:
            channel.close()


@contextlib.asynccontextmanager
async def running(client: XpumdClient) -> AsyncIterator[XpumdClient]:
    """The client's watch running in a task for the block's duration."""
    task = asyncio.ensure_future(client.run())
    try:
        yield client
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
