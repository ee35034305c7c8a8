"""Wake-ups when a directory's entries change, from Linux inotify (through ctypes: no dependency).

The serving certificate's directory changes in two ways: this process renames new files into it (the
self-managed mode), or the kubelet swaps the ``..data`` symlink of a mounted Secret (cert-manager). Both
are renames or creations of entries of the directory itself, so one watch on it sees every rotation. Where
inotify is not available, ``watch`` says so and the caller polls instead.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final

IN_MODIFY: Final = 0x002
IN_ATTRIB: Final = 0x004
IN_CLOSE_WRITE: Final = 0x008
IN_MOVED_FROM: Final = 0x040
IN_MOVED_TO: Final = 0x080
IN_CREATE: Final = 0x100
IN_DELETE: Final = 0x200
IN_DELETE_SELF: Final = 0x400
IN_MOVE_SELF: Final = 0x800
IN_IGNORED: Final = 0x8000
IN_NONBLOCK: Final = os.O_NONBLOCK
IN_CLOEXEC: Final = os.O_CLOEXEC
ENTRY_CHANGES: Final = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
)
WATCH_GONE: Final = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
EVENT_HEADER: Final = struct.Struct("iIII")  # wd, mask, cookie, name length


def watch_lost(buffer: bytes) -> bool:
    """Whether a read of inotify events says the watched directory itself went away (deleted or moved)."""
    offset = 0
    while offset + EVENT_HEADER.size <= len(buffer):
        _, mask, _, length = EVENT_HEADER.unpack_from(buffer, offset)
        if mask & WATCH_GONE:
            return True
        offset += EVENT_HEADER.size + length
    return False


class _Inotify:
    """The two libc calls, or None where the C library has no inotify."""

    def __init__(self, init1: Callable[[int], int], add_watch: Callable[[int, bytes, int], int]) -> None:
        self.init1 = init1
        self.add_watch = add_watch

    @classmethod
    def load(cls) -> _Inotify | None:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name, use_errno=True) if name else None
            init1, add_watch = (libc.inotify_init1, libc.inotify_add_watch) if libc else (None, None)
        except (OSError, AttributeError):
            return None
        if init1 is None or add_watch is None:
            return None
        init1.argtypes, init1.restype = [ctypes.c_int], ctypes.c_int
        add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        add_watch.restype = ctypes.c_int
        return cls(init1, add_watch)


class DirectoryChanges:
    """Sets ``changed`` whenever an entry of ``directory`` is created, written, renamed or removed.

    ``watch()`` (re)establishes the watch and says whether one is in place: False while the directory does
    not exist yet, or where inotify is unavailable. ``close()`` releases the descriptor.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.changed = asyncio.Event()
        self._inotify = _Inotify.load()
        self._fd: int | None = None

    def watch(self) -> bool:
        if self._fd is not None:
            return True
        if self._inotify is None:
            return False
        fd = self._inotify.init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            self._inotify = None  # out of instances or not supported: polling from now on
            return False
        if self._inotify.add_watch(fd, os.fsencode(self.directory), ENTRY_CHANGES | WATCH_GONE) < 0:
            os.close(fd)  # the directory is not there yet: tried again at the next call
            return False
        asyncio.get_running_loop().add_reader(fd, self._drain)
        self._fd = fd
        return True

    def _drain(self) -> None:
        assert self._fd is not None
        lost = False
        while True:
            try:
                buffer = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                break
            if not buffer:
                break
            lost = lost or watch_lost(buffer)
        self.changed.set()
        if lost:  # the directory was replaced: watch the new one at the next ``watch()``
            self.close()

    def close(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        asyncio.get_running_loop().remove_reader(fd)
        os.close(fd)
