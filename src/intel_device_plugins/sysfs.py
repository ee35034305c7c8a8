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


def read_trimmed(path: Path) -> str | None:
    """File content without surrounding white space; ``None`` if it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except (OSError, ValueError):
        return None


def read_first_line(path: Path) -> str | None:
    content = read_trimmed(path)
    if content is None:
        return None
    return content.splitlines()[0].strip() if content else ""


def read_int(path: Path) -> int | None:
    """An integer file (decimal or 0x-prefixed hex); ``None`` if missing or not a number."""
    content = read_trimmed(path)
    if content is None:
        return None
    try:
        return int(content, 0)
    except ValueError:
        return None


def link_basename(path: Path) -> str | None:
    """Basename of a symlink's target (``device/driver`` → ``i915``); ``None`` if not a readable link."""
    try:
        return Path(os.readlink(path)).name
    except OSError:
        return None


def driver_name(device_dir: Path) -> str | None:
    """Name of the kernel driver bound to a sysfs device directory, if any."""
    return link_basename(device_dir / "driver")


def sriov_numvfs(device_dir: Path) -> int | None:
    """Number of enabled SR-IOV VFs; ``None`` when the device is not SR-IOV capable or unreadable."""
    return read_int(device_dir / "sriov_numvfs")


def is_pf_with_vfs(device_dir: Path) -> bool:
    """A physical function that has VFs enabled: the VFs are the usable devices, not the PF."""
    count = sriov_numvfs(device_dir)
    return count is not None and count > 0


def list_dir(path: Path) -> list[str] | None:
    """Sorted entry names, or ``None`` when the directory cannot be read."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def prefixed(prefix: str, absolute: str) -> Path:
    """``-prefix`` handling: ``prefixed("/tmp/node", "/sys")`` → ``/tmp/node/sys``."""
    return Path(prefix + absolute) if prefix else Path(absolute)
