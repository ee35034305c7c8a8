"""Reading sysfs the way every plugin needs it: tolerant, explicit about what was missing.

Plain standard-library file reads. Functions that may fail return ``None`` rather than raising, so a
scan can mark one device Unhealthy or skip it and carry on with the rest.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
INTEL_VENDOR_ID = "0x8086"


StrPath = str | os.PathLike[str]


def read_trimmed(path: StrPath) -> str | None:
    """File content without surrounding white space; ``None`` if it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            return stream.read().strip()
    except (OSError, ValueError):
        return None


def read_first_line(path: StrPath) -> str | None:
    content = read_trimmed(path)
    if content is None:
        return None
    return content.splitlines()[0].strip() if content else ""


def read_int(path: StrPath) -> int | None:
    """An integer file (decimal or 0x-prefixed hex); ``None`` if missing or not a number."""
    content = read_trimmed(path)
    if content is None:
        return None
    try:
        return int(content, 0)
    except ValueError:
        return None


def link_basename(path: StrPath) -> str | None:
    """Basename of a symlink's target (``device/driver`` → ``i915``); ``None`` if not a readable link."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def driver_name(device_dir: StrPath) -> str | None:
    """Name of the kernel driver bound to a sysfs device directory, if any."""
    return link_basename(os.path.join(device_dir, "driver"))


def sriov_numvfs(device_dir: StrPath) -> int | None:
    """Number of enabled SR-IOV VFs; ``None`` when the device is not SR-IOV capable or unreadable."""
    return read_int(os.path.join(device_dir, "sriov_numvfs"))


def is_pf_with_vfs(device_dir: StrPath) -> bool:
    """A physical function that has VFs enabled: the VFs are the usable devices, not the PF."""
    count = sriov_numvfs(device_dir)
    return count is not None and count > 0


def identity(path: StrPath) -> tuple[int, int] | None:
    """Inode and change time of a path: a directory that is removed and created again (a device
    re-plugged) differs even when the file system hands out the same inode number again."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_ctime_ns)


def list_dir(path: StrPath) -> list[str] | None:
    """Sorted entry names, or ``None`` when the directory cannot be read."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def prefixed(prefix: str, absolute: str) -> Path:
    """``-prefix`` handling: ``prefixed("/tmp/node", "/sys")`` → ``/tmp/node/sys``."""
    return Path(prefix + absolute) if prefix else Path(absolute)
