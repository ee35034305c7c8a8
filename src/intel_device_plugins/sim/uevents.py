"""Uevents from a simulated node, in the kernel's format, to plugins started with ``-uevent-dir``.

The kernel sends each uevent to every listener of its netlink group; the simulator sends the same
datagram to every socket in one directory (each plugin process binds one there). A socket nobody
listens on any more (a plugin that was killed) is removed, as the kernel forgets a closed socket.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from intel_device_plugins.deviceplugin.uevents import encode_uevent


class UeventBroadcaster:
    """Sends uevents to every plugin listening in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._sequence = itertools.count(1)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._socket.setblocking(False)
        self.sent = 0
        """Datagrams delivered, over all listeners."""

    def send(
        self, action: str, devpath: str, subsystem: str, properties: Mapping[str, str] | None = None
    ) -> int:
        """One event to every listener; how many received it. ``devpath`` starts at ``/devices``."""
        datagram = encode_uevent(action, devpath, subsystem, properties, next(self._sequence))
        delivered = 0
        for listener in sorted(self.directory.glob("*.sock")):
            try:
                self._socket.sendto(datagram, os.fspath(listener))
            except OSError as error:
                if error.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    with contextlib.suppress(OSError):
                        listener.unlink()
                # A full queue (EAGAIN) loses the event, as an overrun netlink socket does.
                continue
            delivered += 1
        self.sent += delivered
        return delivered

    def close(self) -> None:
        self._socket.close()
