"""Work queues of Intel DSA and IAA devices (the kernel's idxd driver), read from sysfs.

Layout (the kernel's): ``/sys/bus/dsa/devices/<dev>N`` is an accelerator (``dsa0``, ``iax1``) and
its children ``wqN.M`` are work queues with the attributes ``state``, ``mode`` and ``type``. An
enabled user-type queue has a character device ``/dev/<dev>/wqN.M``, and udev links it from
``/dev/char/<major>:<minor>``.

Everything here is a pure function of the filesystem below ``prefix`` (prepended to every absolute
path, as ``-prefix`` does everywhere); nothing is logged. A queue whose attributes cannot be read
is left out, a user queue whose device node fails the checks is reported Unhealthy, and each case
adds one problem line that names the queue.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceNode, Discovery, Health
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.sysfs import list_dir, read_trimmed

BUS_DIR = "/sys/bus/dsa/devices"
WQ_NAME = re.compile(r"^wq[0-9]+\.[0-9]+$")
WQ_TYPE = re.compile(r"^[a-z0-9]+$")
"""Queue types become part of the resource name, so only plain lower-case words are accepted."""
WQ_MODES = frozenset({"dedicated", "shared"})
DEVICE_NUMBER = re.compile(r"^([0-9]+):([0-9]+)$")


@dataclass(frozen=True)
class IdxdKind:
    """Which accelerators a plugin serves: DSA (``dsa*``, ``/dev/dsa``) or IAA (``iax*``, ``/dev/iax``)."""

    namespace: str
    device_prefix: str
    dev_dir: str


DSA = IdxdKind(namespace="dsa.intel.com", device_prefix="dsa", dev_dir="/dev/dsa")
IAA = IdxdKind(namespace="iaa.intel.com", device_prefix="iax", dev_dir="/dev/iax")


@dataclass(frozen=True)
class WorkQueue:
    """An enabled work queue with readable, valid ``mode`` and ``type``."""

    name: str
    device: str
    sysfs_dir: str
    mode: str
    type: str

    @property
    def resource(self) -> str:
        return f"wq-{self.type}-{self.mode}"


def read_attribute(path: str) -> str | None:
    """A sysfs attribute, trimmed; ``None`` if unreadable (or not a regular file of at most a page)."""
    return read_trimmed(path)


def _accelerators(bus: str, kind: IdxdKind) -> list[str]:
    pattern = re.compile(rf"^{re.escape(kind.device_prefix)}([0-9]+)$")
    names = [name for name in list_dir(Path(bus)) or [] if pattern.match(name)]
    return sorted(names, key=lambda name: int(name[len(kind.device_prefix) :]))


def _queue_sort_key(name: str) -> tuple[int, int]:
    device, queue = name[2:].split(".")
    return int(device), int(queue)


def find_work_queues(prefix: str, kind: IdxdKind) -> tuple[list[WorkQueue], list[str]]:
    """Enabled work queues of every accelerator of ``kind``, and the problems met.

    A queue that is not enabled is skipped silently (that is a configuration choice). One whose
    ``state``, ``mode`` or ``type`` is missing or not understood is skipped with a problem line.
    """
    bus = prefix + BUS_DIR
    queues: list[WorkQueue] = []
    problems: list[str] = []
    for device in _accelerators(bus, kind):
        device_dir = f"{bus}/{device}"
        entries = list_dir(Path(device_dir))
        if entries is None:
            problems.append(f"{device}: cannot read {device_dir}; its work queues are not advertised")
            continue
        names = [name for name in entries if WQ_NAME.match(name)]
        for name in sorted(names, key=_queue_sort_key):
            wq_dir = f"{device_dir}/{name}"
            state = read_attribute(f"{wq_dir}/state")
            if state is None:
                problems.append(f"{device}/{name}: cannot read {wq_dir}/state; work queue skipped")
                continue
            if state != "enabled":
                continue
            mode = read_attribute(f"{wq_dir}/mode")
            wq_type = read_attribute(f"{wq_dir}/type")
            if mode is None or wq_type is None:
                missing = "mode" if mode is None else "type"
                problems.append(f"{device}/{name}: cannot read {wq_dir}/{missing}; work queue skipped")
                continue
            if mode not in WQ_MODES:
                problems.append(f"{device}/{name}: unknown mode {mode!r}; work queue skipped")
                continue
            if not WQ_TYPE.match(wq_type):
                problems.append(f"{device}/{name}: unusable type {wq_type!r}; work queue skipped")
                continue
            queues.append(WorkQueue(name, device, wq_dir, mode, wq_type))
    return queues, problems


def _sysfs_device_number(queue: WorkQueue, kind: IdxdKind) -> tuple[int, int] | None:
    """``major:minor`` of the queue's character device as sysfs states it.

    The kernel names the queue's char device ``<dev>/wqN.M``, which sysfs shows as the child
    directory ``<dev>!wqN.M`` of the queue; a plain ``dev`` attribute on the queue is accepted too.
    """
    for candidate in (f"{queue.sysfs_dir}/{kind.device_prefix}!{queue.name}/dev", f"{queue.sysfs_dir}/dev"):
        text = read_attribute(candidate)
        if text is None:
            continue
        match = DEVICE_NUMBER.match(text)
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


def user_queue_nodes(prefix: str, kind: IdxdKind, queue: WorkQueue) -> tuple[tuple[DeviceNode, ...], str]:
    """Device nodes of a user-type queue and, when they cannot be trusted, the reason.

    The rule: ``/dev/<dev>/wqN.M`` is a character device and ``/dev/char/<major>:<minor>`` is a
    symlink resolving to it, i.e. udev created the node for the device the kernel registered. The
    device number comes from the node itself when it is a character device. When it is a regular
    file (the node simulator, which runs without the privilege to create device nodes) it comes from
    the queue's sysfs ``dev`` attribute instead, so the link check still runs; anything else
    (directory, socket, missing) fails. "Resolves to it" is checked as "is the same file" (device
    and inode after following the link), which costs two ``stat`` calls instead of a path walk.
    """
    container_node = f"{kind.dev_dir}/{queue.name}"
    node = prefix + container_node
    label = f"{queue.device}/{queue.name}"
    try:
        info = os.stat(node)
    except OSError as error:
        return (), f"{label}: device node {node} is missing ({error.strerror})"
    number: tuple[int, int] | None
    if stat.S_ISCHR(info.st_mode):
        number = (os.major(info.st_rdev), os.minor(info.st_rdev))
    elif stat.S_ISREG(info.st_mode):
        number = _sysfs_device_number(queue, kind)
        if number is None:
            return (), f"{label}: {node} is not a character device and sysfs gives no device number"
    else:
        return (), f"{label}: {node} is not a character device"
    char_name = f"/dev/char/{number[0]}:{number[1]}"
    char_link = prefix + char_name
    nodes = (DeviceNode(node, node, "rw"), DeviceNode(char_link, char_link, "rw"))
    try:
        is_link = stat.S_ISLNK(os.lstat(char_link).st_mode)
    except OSError:
        return nodes, f"{label}: {char_link} is missing; expected a symlink to {node}"
    if not is_link:
        return nodes, f"{label}: {char_link} is not a symlink to {node}"
    try:
        target = os.stat(char_link)
    except OSError:
        return nodes, f"{label}: {char_link} is a dangling symlink; expected one to {node}"
    if (target.st_dev, target.st_ino) != (info.st_dev, info.st_ino):
        return nodes, f"{label}: {char_link} points to {os.path.realpath(char_link)}, not {node}"
    return nodes, ""


NumaLookup = Callable[[str], tuple[int, ...]]
"""Accelerator sysfs directory → NUMA nodes; may raise :class:`TopologyError`."""


def numa_lookup(prefix: str) -> NumaLookup:
    root = Path(prefix or "/")
    return lambda device_dir: numa_nodes_of(Path(device_dir), root)


def scan_work_queues(
    prefix: str, kind: IdxdKind, shared_dev_num: int, numa_of: NumaLookup | None = None
) -> Discovery:
    """The device tree of all enabled work queues.

    Resource ``wq-<type>-<mode>``; a shared queue is advertised ``shared_dev_num`` times, a dedicated
    one once, with IDs ``wq-<type>-<mode>-<wq>-<i>``. Only user queues carry device nodes. NUMA
    placement is that of the accelerator's PCI function, looked up once per accelerator through
    ``numa_of`` (the plugin passes a memoised lookup).
    """
    lookup = numa_of or numa_lookup(prefix)
    queues, problems = find_work_queues(prefix, kind)
    numa_by_device: dict[str, tuple[int, ...]] = {}
    tree: dict[str, dict[str, DeviceInfo]] = {}
    for queue in queues:
        if queue.device not in numa_by_device:
            try:
                numa_by_device[queue.device] = lookup(queue.sysfs_dir.rsplit("/", 1)[0])
            except TopologyError as error:
                problems.append(f"{queue.device}: {error}; no NUMA topology reported")
                numa_by_device[queue.device] = ()
        nodes: tuple[DeviceNode, ...] = ()
        health = Health.HEALTHY
        if queue.type == "user":
            nodes, problem = user_queue_nodes(prefix, kind, queue)
            if problem:
                problems.append(problem + "; reported Unhealthy")
                health = Health.UNHEALTHY
        info = DeviceInfo(health=health, nodes=nodes, numa_nodes=numa_by_device[queue.device])
        count = shared_dev_num if queue.mode == "shared" else 1
        devices = tree.setdefault(queue.resource, {})
        for index in range(count):
            devices[f"{queue.resource}-{queue.name}-{index}"] = info
    frozen: Mapping[str, Mapping[str, DeviceInfo]] = tree
    return Discovery(frozen, tuple(problems))
