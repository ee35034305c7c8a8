"""The node's /sys and /dev, prepared on the host before the node's namespace mounts them."""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Major number for simulated device nodes: 60-63 are reserved for local/experimental use and never
# handed out dynamically, so no driver answers them and opening such a node fails with ENXIO.
SIM_DEVICE_MAJOR = 60

# /sys subtrees that always come from the host: cgroups and the CPU/NUMA topology the kubelet
# (cadvisor, the CPU manager) reads, and kernel internals. Everything else merges with the simulation.
HOST_OWNED_SYSFS = frozenset({"devices/system", "fs", "kernel", "module", "firmware", "power", "hypervisor"})
# Parts of those host-owned subtrees that describe devices rather than the kernel: a simulation that
# has them replaces the host's entirely, as on hardware, where a VF's iommu_group link leads to
# /sys/kernel/iommu_groups/N, a QAT PF's state lives in debugfs (/sys/kernel/debug) and the SGX
# driver adds each NUMA node's EPC size (x86/sgx_total_bytes, which sgx_epchook reads) to
# /sys/devices/system/node/nodeN. Components may be glob patterns (one component each). A path is
# taken from the simulation only below a directory the host has, so the NUMA nodes stay the host's.
SIMULATED_SYSFS = frozenset({"kernel/iommu_groups", "kernel/debug", "devices/system/node/node*/x86"})


# Standard device nodes of the node's /dev: name -> (major, minor); the same numbers as the host's.
STANDARD_DEVICES: Mapping[str, tuple[int, int]] = {
    "null": (1, 3),
    "zero": (1, 5),
    "full": (1, 7),
    "random": (1, 8),
    "urandom": (1, 9),
    "kmsg": (1, 11),
    "tty": (5, 0),
}
DEV_SYMLINKS: Mapping[str, str] = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}
HOST_DEV_MOUNTS = ("pts", "shm", "mqueue")


@dataclass(frozen=True)
class Bind:
    """One bind mount the node's namespace makes: ``source`` (host path) over ``target``."""

    source: str
    target: str


def _prune_except(directory: Path, rel: str, keep: frozenset[str]) -> None:
    """Remove everything below ``directory`` (``rel`` in sysfs) but the paths ``keep`` and their parents."""
    for child in list(directory.iterdir()):
        path = f"{rel}/{child.name}"
        if path in keep:
            continue
        if child.is_dir() and not child.is_symlink() and any(k.startswith(path + "/") for k in keep):
            _prune_except(child, path, keep)
        elif child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _is_simulated(path: str, simulated: frozenset[str]) -> bool:
    """Whether the sysfs path ``path`` matches one of the ``simulated`` patterns, component by component."""
    parts = path.split("/")
    return any(
        len(pattern_parts) == len(parts) and all(map(fnmatch.fnmatchcase, parts, pattern_parts))
        for pattern_parts in (pattern.split("/") for pattern in simulated)
    )


def _simulated_below(target: Path, entry: Path, rel: str, simulated: frozenset[str]) -> frozenset[str]:
    """The simulated paths below ``rel`` that the simulation (``target``) has and whose parent
    directory the host (``entry``) has too."""
    found = set()
    for pattern in simulated:
        if not pattern.startswith(rel + "/"):
            continue
        for match in target.glob(pattern[len(rel) + 1 :]):
            below = match.relative_to(target)
            if (entry / below.parent).is_dir():
                found.add(f"{rel}/{below.as_posix()}")
    return frozenset(found)


def merge_sysfs(
    staging: Path,
    real: Path,
    host_owned: frozenset[str] = HOST_OWNED_SYSFS,
    rel: str = "",
    simulated: frozenset[str] = SIMULATED_SYSFS,
) -> list[Bind]:
    """Make ``staging`` (a copy of the simulated /sys) a merged view with the real sysfs at ``real``.

    Simulated entries win, except below ``host_owned`` paths, which always come from the host
    unless the simulation has one of the ``simulated`` paths below them: those replace the host's
    whole, and the rest of their host-owned parent is merged from the host entry by entry.
    Real entries missing from the simulation become symlinks (copied as they are) or empty mount
    points; the returned binds fill those mount points inside the node's namespace. Only levels
    where both trees have a directory are walked, so the bind count stays small.
    """
    binds: list[Bind] = []
    staging.mkdir(parents=True, exist_ok=True)
    try:
        entries = sorted(real.iterdir())
    except OSError:
        return binds
    for entry in entries:
        path = f"{rel}/{entry.name}" if rel else entry.name
        target = staging / entry.name
        if _is_simulated(path, simulated) and os.path.lexists(target):
            continue
        if path in host_owned and os.path.lexists(target):
            kept = _simulated_below(target, entry, path, simulated) if entry.is_dir() else frozenset()
            if kept and target.is_dir() and not target.is_symlink() and entry.is_dir():
                _prune_except(target, path, kept)
                binds.extend(merge_sysfs(target, entry, host_owned, path, simulated))
                continue
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        if not os.path.lexists(target):
            if entry.is_symlink():
                target.symlink_to(os.readlink(entry))
                continue
            if entry.is_dir():
                target.mkdir()
            else:
                target.touch()
            binds.append(Bind(str(entry), str(target)))
        elif target.is_dir() and not target.is_symlink() and entry.is_dir() and not entry.is_symlink():
            binds.extend(merge_sysfs(target, entry, host_owned, path, simulated))
    return binds


def make_char_device(path: Path, minor: int, major: int = SIM_DEVICE_MAJOR) -> Path:
    """A real character device node (runc reads major/minor from it) with harmless numbers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        path.unlink()
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, 0o666)
    return path


def replace_with_char_device(path: Path, minor: int, char_dir: Path, staging: Path) -> Path:
    """Turn the plain file ``path`` into a character device (major :data:`SIM_DEVICE_MAJOR`) the way
    udev presents a new device: whole. The node is made in ``staging`` (a directory on the same file
    system), udev's ``char_dir`` links to ``path`` are renamed to the new numbers, and only then the
    node is moved over the file, so a driver woken by the move sees the node and its link agree."""
    staging.mkdir(parents=True, exist_ok=True)
    made = make_char_device(staging / f"{minor}", minor)
    if char_dir.is_dir():
        target = os.path.normpath(path)
        for link in sorted(char_dir.iterdir()):
            if link.is_symlink() and os.path.normpath(char_dir / os.readlink(link)) == target:
                destination = os.readlink(link)
                link.unlink()
                (char_dir / f"{SIM_DEVICE_MAJOR}:{minor}").unlink(missing_ok=True)
                (char_dir / f"{SIM_DEVICE_MAJOR}:{minor}").symlink_to(destination)
    os.replace(made, path)
    return path


def build_dev(staging: Path, sim_dev: Path | None) -> list[Bind]:
    """The node's /dev: standard nodes, the host's pts/shm/mqueue, and the simulated devices.

    Every regular file of the simulation's /dev becomes a character device with major
    :data:`SIM_DEVICE_MAJOR` and a minor unique within the node; symlinks (by-path) are kept,
    except that udev's ``/dev/char/<major>:<minor>`` links are renamed to the new numbers.
    """
    staging.mkdir(parents=True, exist_ok=True)
    for name, (major, minor) in STANDARD_DEVICES.items():
        make_char_device(staging / name, minor, major)
    for name, link in DEV_SYMLINKS.items():
        (staging / name).symlink_to(link)
    binds = []
    for name in HOST_DEV_MOUNTS:
        if Path("/dev", name).is_dir():
            (staging / name).mkdir()
            binds.append(Bind(f"/dev/{name}", str(staging / name)))
    if sim_dev is not None and sim_dev.is_dir():
        minor = 0
        for source in sorted(sim_dev.rglob("*")):
            dest = staging / source.relative_to(sim_dev)
            if source.is_symlink():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.symlink_to(os.readlink(source))
            elif source.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            elif source.is_file():
                make_char_device(dest, minor)
                minor += 1
        renumber_char_links(staging / "char")
    return binds


def renumber_char_links(char_dir: Path) -> None:
    """Name each ``<major>:<minor>`` link in ``char_dir`` after the device it leads to, as udev does.

    The simulation names them after its own numbers; once its files are character devices with
    other numbers, a plugin that checks ``/dev/char/<major>:<minor>`` against the node (DSA, IAA)
    would find no link.
    """
    if not char_dir.is_dir():
        return
    for link in sorted(char_dir.iterdir()):
        if not link.is_symlink():
            continue
        try:
            device = os.stat(link)
        except OSError:
            continue  # dangling: left as the simulation made it
        if not stat.S_ISCHR(device.st_mode):
            continue
        name = f"{os.major(device.st_rdev)}:{os.minor(device.st_rdev)}"
        if name != link.name:
            target = os.readlink(link)
            link.unlink()
            (char_dir / name).unlink(missing_ok=True)
            (char_dir / name).symlink_to(target)
