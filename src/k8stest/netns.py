"""Network namespaces for the real node: create one, switch a thread between two.

Why ctypes: ``os.setns``/``os.unshare`` arrive with Python 3.12; this tier runs on 3.11. A
network namespace belongs to a thread, and a socket keeps the namespace it was created in, so a
process can listen in one namespace and connect in another by switching only around ``socket()``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare_network() -> None:
    """Move the calling thread (and all it starts later) into a new, empty network namespace."""
    _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")


def enter(fd: int) -> None:
    """Move the calling thread into the network namespace ``fd`` refers to."""
    _check(_libc.setns(fd, CLONE_NEWNET), f"setns(fd {fd}, CLONE_NEWNET)")


def current() -> int:
    """A descriptor of the calling thread's network namespace (the caller closes it)."""
    return os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY | os.O_CLOEXEC)


@contextlib.contextmanager
def inside(target: int, home: int) -> Iterator[None]:
    """Run the block in namespace ``target``, then return to ``home``."""
    enter(target)
    try:
        yield
    finally:
        enter(home)


def tcp_socket_in(target: int, home: int) -> socket.socket:
    """A non-blocking TCP socket that belongs to namespace ``target``."""
    with inside(target, home):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock
