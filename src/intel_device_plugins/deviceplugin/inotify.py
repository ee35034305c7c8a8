"""Minimal asyncio-friendly inotify, through libc.

Used for two things that polling makes slow: noticing that the kubelet deleted our socket (it does so
when it restarts) and noticing hot-plugged device nodes. Where inotify is unavailable the callers fall
back to polling, so nothing depends on it for correctness.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_IGNORED = 0x00008000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

DIRECTORY_CHANGES = (
    IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB
)

_EVENT_HEADER = struct.Struct("iIII")


@dataclass(frozen=True)
class DirectoryEvent:
    directory: Path
    name: str
    mask: int

    @property
    def path(self) -> Path:
        return self.directory / self.name if self.name else self.directory

    @property
    def gone(self) -> bool:
        """The named entry was deleted or renamed away."""
        return bool(self.mask & (IN_DELETE | IN_MOVED_FROM))

    @property
    def appeared(self) -> bool:
        return bool(self.mask & (IN_CREATE | IN_MOVED_TO))

    @property
    def directory_gone(self) -> bool:
        return bool(self.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED))


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


class DirectoryWatcher:
    """Watches directories and calls ``callback`` for every event, on the running event loop."""

    def __init__(self, callback: Callable[[DirectoryEvent], None]) -> None:
        self._callback = callback
        self._libc = _load_libc()
        self._fd = -1
        self._directories: dict[int, Path] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> bool:
        """Open the inotify instance; ``False`` when the platform has none (callers then poll)."""
        if self._libc is None:
            return False
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.warning("inotify unavailable (%s); falling back to polling", os.strerror(ctypes.get_errno()))
            return False
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._read_events)
        return True

    @property
    def active(self) -> bool:
        return self._fd >= 0

    def watch(self, directory: Path, mask: int = DIRECTORY_CHANGES) -> bool:
        """Start watching ``directory``; ``False`` if it cannot be watched (e.g. it does not exist)."""
        if self._fd < 0 or self._libc is None:
            return False
        if directory in self._directories.values():
            return True
        descriptor = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), mask)
        if descriptor < 0:
            return False
        self._directories[descriptor] = directory
        return True

    def watching(self, directory: Path) -> bool:
        return directory in self._directories.values()

    def close(self) -> None:
        if self._fd >= 0:
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._directories.clear()

    def _read_events(self) -> None:
        try:
            data = os.read(self._fd, 64 * 1024)
        except OSError as error:
            if error.errno != errno.EAGAIN:
                log.warning("reading inotify events failed: %s", error)
            return
        offset = 0
        while offset + _EVENT_HEADER.size <= len(data):
            descriptor, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            raw_name = data[offset + _EVENT_HEADER.size : offset + _EVENT_HEADER.size + length]
            offset += _EVENT_HEADER.size + length
            directory = self._directories.get(descriptor)
            if directory is None:
                continue
            if mask & IN_IGNORED:
                del self._directories[descriptor]
            name = os.fsdecode(raw_name.rstrip(b"\0"))
            try:
                self._callback(DirectoryEvent(directory, name, mask))
            except Exception:
                log.exception("inotify callback failed for %s/%s", directory, name)
