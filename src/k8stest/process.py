"""Child processes that are always reaped.

Why process groups: the device-manager harness re-executes itself in a mount namespace and some
binaries spawn helpers; signalling the whole group is what guarantees that no process outlives a
test session.

Ownership: whoever starts a process stops it, whatever happens in between. A ``ManagedProcess`` is a
context manager for that (``with ManagedProcess(...) as p:``); owners that hold several (a control
plane, a node, an operator install) stop them in their own ``stop()``, called from a ``finally`` or
a yield fixture's teardown, and stop what they already started when their start fails half-way.
Ports for these processes come from :mod:`k8stest.ports`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType


def port_is_listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class ManagedProcess:
    """One started binary, its log file and its process group."""

    def __init__(
        self, name: str, argv: Sequence[str | Path], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        """Raise with the log tail when the process has exited: better than a timeout later."""
        if not self.alive():
            raise RuntimeError(
                f"{self.name} exited with {self.popen.returncode}; last log lines:\n{self.log_tail()}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the group, then SIGKILL what is left after ``timeout``."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        # The leader may be gone while group members linger; kill the group regardless.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)

    def kill(self) -> None:
        """SIGKILL the group at once (a crash, not a shutdown)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(5)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (zombies of reaped children do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) succeeds for zombies too; look for a non-zombie member.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll ``predicate`` until true; return whether it became so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())
