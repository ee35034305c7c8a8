"""The idxd plugins' thin shells: hold the flags, run the pure discovery, log its problems."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.model import ContainerAllocation, DeviceMap, DeviceTree
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.idxd.discovery import DSA, IdxdKind, scan_work_queues
from intel_device_plugins.plugins.idxd.vfio import scan_vfio, with_bdf_envs
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)


@dataclass
class WorkQueuePlugin:
    """DSA or IAA work queues as resources ``wq-<type>-<mode>``."""

    kind: IdxdKind
    prefix: str = ""
    shared_dev_num: int = 1
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    numa: NumaCache = field(init=False)

    def __post_init__(self) -> None:
        self.numa = NumaCache(self.prefix)

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

    def uevent_subsystems(self) -> Collection[str]:
        """DSA and IAA devices, their queues and the queues' char devices all sit on the idxd bus,
        which the kernel calls ``dsa``: enabling or disabling a device or queue is a ``bind`` or
        ``unbind`` there, and a queue's settings can only be written while it is disabled. Older
        kernels put the char devices in the ``idxd`` class; PCI hot-plug and driver binds are ``pci``.
        """
        return ("dsa", "idxd", "pci")


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

    def uevent_subsystems(self) -> Collection[str]:
        """Binding a function to vfio-pci is a ``pci`` event and creates its group node (``vfio``)."""
        return ("pci", "vfio")

    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation:
        return with_bdf_envs(allocation, ids)
