"""Kernel device events (uevents), so discovery can wait for changes instead of polling for them.

The kernel announces every device that appears, disappears, binds to or unbinds from a driver as a
uevent on the ``NETLINK_KOBJECT_UEVENT`` netlink family: a datagram
``<action>@<devpath>\\0ACTION=<action>\\0DEVPATH=<devpath>\\0SUBSYSTEM=<subsystem>\\0...``.
:class:`UeventHub` reads them from a :class:`UeventSource` and tells each subscriber about the events
of the subsystems it asked for.

Sources:

- :class:`NetlinkUevents`: the kernel's multicast group. Unprivileged processes may listen. In a
  network namespace other than the host's the kernel sends nothing, which is why discovery never
  relies on uevents alone (inotify on ``/dev`` still sees device nodes come and go).
- :class:`DirectoryUevents`: datagram sockets in a directory, in the kernel's format. A simulated
  node cannot send netlink uevents (that needs ``CAP_NET_ADMIN`` and would reach every listener on
  the machine), so the simulator sends the same datagrams to every socket in the directory given by
  ``-uevent-dir``, the way the kernel sends one to every listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

log = logging.getLogger(__name__)

NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP = 1
"""Multicast group of the kernel's own uevents (group 2 carries udev's re-broadcasts)."""
MAX_DATAGRAM = 8192
"""A uevent is at most 2 KiB of properties plus the header (``UEVENT_BUFFER_SIZE``)."""
RECEIVE_BUFFER = 256 * 1024

Deliver = Callable[[bytes | None], None]
"""Gets each datagram; ``None`` when datagrams were lost (receive buffer overrun)."""


@dataclass(frozen=True)
class Uevent:
    action: str
    devpath: str
    subsystem: str
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def parse_uevent(data: bytes) -> Uevent | None:
    """A kernel uevent datagram; ``None`` for anything else (e.g. udev's ``libudev`` messages)."""
    header, _, rest = data.partition(b"\0")
    if b"@" not in header or header.startswith(b"libudev"):
        return None
    action, _, devpath = header.decode("utf-8", errors="replace").partition("@")
    properties: dict[str, str] = {}
    for item in rest.split(b"\0"):
        key, separator, value = item.partition(b"=")
        if separator:
            properties[key.decode("utf-8", errors="replace")] = value.decode("utf-8", errors="replace")
    return Uevent(
        action=properties.get("ACTION", action),
        devpath=properties.get("DEVPATH", devpath),
        subsystem=properties.get("SUBSYSTEM", ""),
        properties=MappingProxyType(properties),
    )


def encode_uevent(
    action: str, devpath: str, subsystem: str, properties: Mapping[str, str] | None = None, seqnum: int = 0
) -> bytes:
    """The datagram the kernel would send for this event."""
    items = {"ACTION": action, "DEVPATH": devpath, "SUBSYSTEM": subsystem, **(properties or {})}
    items.setdefault("SEQNUM", str(seqnum))
    body = "".join(f"{key}={value}\0" for key, value in items.items())
    return f"{action}@{devpath}\0{body}".encode()


class UeventSource(Protocol):
    """Where datagrams come from; ``open`` runs on the event loop that will receive them."""

    def open(self, deliver: Deliver) -> bool:
        """Start delivering; ``False`` when this source is not available here."""
        ...

    def close(self) -> None: ...


class _DatagramSource:
    """A non-blocking datagram socket read on the running event loop."""

    def __init__(self) -> None:
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deliver: Deliver | None = None

    def _listen(self, sock: socket.socket, deliver: Deliver) -> None:
        self._socket, self._deliver = sock, deliver
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._read)

    def _accept(self, sender: object) -> bool:
        return True

    def _read(self) -> None:
        sock, deliver = self._socket, self._deliver
        if sock is None or deliver is None:
            return
        while True:
            try:
                data, sender = sock.recvfrom(MAX_DATAGRAM)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    deliver(None)  # the kernel dropped events for us: whatever changed, rescan
                    continue
                log.warning("reading uevents failed: %s", error)
                return
            if self._accept(sender):
                deliver(data)

    def close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(sock.fileno())
            sock.close()


class NetlinkUevents(_DatagramSource):
    """The kernel's uevents over netlink."""

    def open(self, deliver: Deliver) -> bool:
        try:
            sock = socket.socket(
                socket.AF_NETLINK,
                socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                NETLINK_KOBJECT_UEVENT,
            )
        except (OSError, AttributeError) as error:
            log.info("no kernel uevents (%s); relying on inotify and rescans", error)
            return False
        try:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.bind((0, KERNEL_GROUP))
        except OSError as error:
            sock.close()
            log.info("cannot listen to kernel uevents (%s); relying on inotify and rescans", error)
            return False
        self._listen(sock, deliver)
        return True

    def _accept(self, sender: object) -> bool:
        # Only the kernel (port ID 0) sends real uevents; anything else is someone's imitation.
        return isinstance(sender, tuple) and len(sender) >= 1 and sender[0] == 0


class DirectoryUevents(_DatagramSource):
    """Uevents sent by a simulator to a datagram socket of this process in ``directory``."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.path: Path | None = None

    def open(self, deliver: Deliver) -> bool:
        path = self.directory / f"{os.getpid()}-{os.urandom(3).hex()}.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            sock.bind(os.fspath(path))
        except OSError as error:
            sock.close()
            log.warning("cannot listen for simulated uevents at %s: %s", path, error)
            return False
        self.path = path
        self._listen(sock, deliver)
        return True

    def close(self) -> None:
        super().close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


Subscriber = Callable[[Uevent | None], None]


class UeventHub:
    """One uevent source per process, fanned out by subsystem to whoever subscribed."""

    def __init__(self, source: UeventSource) -> None:
        self._source = source
        self._subscribers: list[tuple[frozenset[str], Subscriber]] = []
        self.active = False

    @classmethod
    def for_directory(cls, directory: Path | None) -> UeventHub:
        """Simulated events from ``directory`` when given, else the kernel's."""
        return cls(DirectoryUevents(directory) if directory is not None else NetlinkUevents())

    def start(self) -> bool:
        self.active = self._source.open(self._deliver)
        return self.active

    def close(self) -> None:
        if self.active:
            self._source.close()
            self.active = False

    def subscribe(self, subsystems: Collection[str], callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` for every event of ``subsystems`` (and with ``None`` when events were lost)."""
        entry = (frozenset(subsystems), callback)
        self._subscribers.append(entry)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(entry)

        return unsubscribe

    def _deliver(self, data: bytes | None) -> None:
        event = None if data is None else parse_uevent(data)
        if data is not None and event is None:
            return
        for subsystems, callback in list(self._subscribers):
            if event is None or event.subsystem in subsystems:
                try:
                    callback(event)
                except Exception:
                    log.exception("uevent subscriber failed for %s", event)
