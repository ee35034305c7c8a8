"""Reading sysfs the way every plugin needs it: tolerant, bounded, explicit about what was missing.

Plain standard-library file reads. Functions that may fail return ``None`` rather than raising, so a
scan can mark one device Unhealthy or skip it and carry on with the rest; :func:`read_attribute`
raises instead, with a message that says what is wrong with the file.

A sysfs attribute is a regular file of at most one page. Anything else where an attribute is expected
(a FIFO, which blocks a reader forever; a link to ``/dev/zero``, which never ends; a directory) is
refused before it is read, and no read takes more than a page, so a broken tree cannot wedge a scan
or fill memory.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
INTEL_VENDOR_ID = "0x8086"


StrPath = str | os.PathLike[str]


PAGE_SIZE = 4096
"""The most a sysfs attribute holds, and the most any read here takes."""

_FILE_TYPES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UnreadableAttribute(OSError):
    """An attribute that cannot be read; ``str()`` is ``<path>: <reason>``."""

    def __init__(self, path: StrPath, reason: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, reason, os.fspath(path))
        self.path = os.fspath(path)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _file_type(mode: int) -> str:
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def read_attribute(path: StrPath) -> str:
    """The text of one attribute file, untrimmed.

    Raises :class:`UnreadableAttribute` when ``path`` is missing or unreadable (``errno`` of the
    failure), is not a regular file (never opened then: opening a FIFO blocks, opening some devices
    has effects), or holds more than :data:`PAGE_SIZE` bytes.
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableAttribute(path, f"is {_file_type(info.st_mode)}, not a regular file")
        # O_NONBLOCK: should the file be swapped for a FIFO after the check, open still returns.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            data = os.read(fd, PAGE_SIZE + 1)
        finally:
            os.close(fd)
    except UnreadableAttribute:
        raise
    except OSError as error:
        code = error.errno or errno.EIO
        raise UnreadableAttribute(path, error.strerror or str(error), code) from error
    if len(data) > PAGE_SIZE:
        raise UnreadableAttribute(path, f"holds more than {PAGE_SIZE} bytes; not a sysfs attribute")
    return data.decode("utf-8", errors="replace")


def read_trimmed(path: StrPath) -> str | None:
    """File content without surrounding white space; ``None`` if it cannot be read."""
    try:
        return read_attribute(path).strip()
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


def missing(error: OSError) -> bool:
    """The file is not there (as opposed to there but unreadable)."""
    return error.errno == errno.ENOENT


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
