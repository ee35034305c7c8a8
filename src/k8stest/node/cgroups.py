"""The node's cgroup subtree: made before the node starts, emptied and removed when it stops."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path


def cgroup_mounts(mountinfo: str) -> list[Path]:
    """Mount points of every cgroup hierarchy below /sys/fs/cgroup, from /proc/self/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split(" ", 1)[0]
        mount_point = left.split(" ")[4]
        if fstype in ("cgroup", "cgroup2") and mount_point.startswith("/sys/fs/cgroup/"):
            found.append(Path(mount_point))
    return found


def create_cgroups(name: str, hierarchies: Sequence[Path]) -> None:
    """``<h>/<name>`` and ``<h>/<name>/node`` in each hierarchy; cpuset ones get their parent's
    CPUs and memory nodes (a new cpuset starts empty and takes no tasks)."""
    for h in hierarchies:
        for sub in (h / name.lstrip("/"), h / name.lstrip("/") / "node"):
            sub.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (sub / knob).exists():
                    (sub / knob).write_text((sub.parent / knob).read_text())


def _cgroup_dirs(root: Path) -> list[Path]:
    """``root`` and every cgroup below it, deepest first."""
    if not root.is_dir():
        return []
    dirs = [Path(d) for d, _, _ in os.walk(root)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def kill_and_remove_cgroups(name: str, hierarchies: Sequence[Path], timeout: float = 20.0) -> list[str]:
    """SIGKILL every process in ``name``'s subtree, then remove the cgroups; returns leftovers."""
    deadline = time.monotonic() + timeout
    roots = [h / name.lstrip("/") for h in hierarchies]
    while True:
        pids: set[int] = set()
        for root in roots:
            for d in _cgroup_dirs(root):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        left = []
        for root in roots:
            for d in _cgroup_dirs(root):
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(str(d))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
