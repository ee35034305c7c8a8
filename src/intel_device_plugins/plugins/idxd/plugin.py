"""The idxd plugins' thin shells: hold the flags, run the pure discovery, log its problems."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.model import ContainerAllocation, DeviceMap, DeviceTree
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.deviceplugin.topology import numa_nodes_of
from intel_device_plugins.plugins.idxd.discovery import DSA, IdxdKind, scan_work_queues
from intel_device_plugins.plugins.idxd.vfio import scan_vfio, with_bdf_envs
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)


@dataclass
class MemoisedNuma:
    """NUMA lookups remembered per accelerator directory while its sysfs inode stays the same.

    A device's NUMA node never changes while it exists; after a hot-unplug and re-plug the kernel
    creates a new directory with a new inode, which invalidates the entry.
    """

    prefix: str
    _cache: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict, init=False, repr=False)

    def __call__(self, device_dir: str) -> tuple[int, ...]:
        try:
            inode = os.stat(device_dir).st_ino
        except OSError:
            inode = -1
        cached = self._cache.get(device_dir)
        if cached is not None and cached[0] == inode:
            return cached[1]
        nodes = numa_nodes_of(Path(device_dir), Path(self.prefix or "/"))
        self._cache[device_dir] = (inode, nodes)
        return nodes


@dataclass
class WorkQueuePlugin:
    """DSA or IAA work queues as resources ``wq-<type>-<mode>``."""

    kind: IdxdKind
    prefix: str = ""
    shared_dev_num: int = 1
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    numa: MemoisedNuma = field(init=False)

    def __post_init__(self) -> None:
        self.numa = MemoisedNuma(self.prefix)

    @property
    def namespace(self) -> str:
        return self.kind.namespace

    def scan(self) -> DeviceTree:
        discovery = scan_work_queues(self.prefix, self.kind, self.shared_dev_num, self.numa)
        self.problems.report(discovery.problems)
        return discovery.tree

    def watch_paths(self) -> Sequence[Path]:
        # udev creates the queue's node when it is enabled: rescan at once instead of at the next tick.
        return (prefixed(self.prefix, self.kind.dev_dir),)


@dataclass
class DsaVfioPlugin:
    """Whole DSA functions bound to vfio-pci, as resource ``vfio``."""

    prefix: str = ""
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))

    @property
    def namespace(self) -> str:
        return DSA.namespace

    def scan(self) -> DeviceTree:
        discovery = scan_vfio(self.prefix)
        self.problems.report(discovery.problems)
        return discovery.tree

    def watch_paths(self) -> Sequence[Path]:
        return (prefixed(self.prefix, "/dev/vfio"),)

    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation:
        return with_bdf_envs(allocation, ids)
