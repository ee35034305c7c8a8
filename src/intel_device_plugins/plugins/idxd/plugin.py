"""The idxd plugins' thin shells: hold the flags, run the pure discovery, log its problems."""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.health import kernel
from intel_device_plugins.deviceplugin.health.kernelhealth import KernelHealth, pci_address_of
from intel_device_plugins.deviceplugin.health.model import Finding
from intel_device_plugins.deviceplugin.model import ContainerAllocation, DeviceMap, DeviceTree
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.idxd.discovery import DSA, IdxdKind, scan_work_queues
from intel_device_plugins.plugins.idxd.vfio import scan_vfio, with_bdf_envs
from intel_device_plugins.plugins.scanning import KernelHealthHooks
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)

_QUEUE_ID = re.compile(r"-wq(\d+)\.(\d+)-\d+$")


def queue_keys(kind: IdxdKind, root: Path, device_id: str) -> tuple[str, ...]:
    """``wq-user-dedicated-wq0.1-0`` → the queue ``wq0.1``, its device (``dsa0`` or ``iax0``) and the
    device's PCI function: any of them unhealthy makes the queue so."""
    match = _QUEUE_ID.search(device_id)
    if match is None:
        return ()
    device = f"{kind.device_prefix}{match.group(1)}"
    address = pci_address_of(root / "sys/bus/dsa/devices" / device)
    return (f"wq{match.group(1)}.{match.group(2)}", device, *((address,) if address else ()))


def idxd_kind_findings(root: Path, keys: Collection[str]) -> tuple[Finding, ...]:
    """The state and errors of the devices and queues asked about (the bus lists every kind's)."""
    wanted = set(keys)
    return tuple(finding for finding in kernel.idxd_findings(root) if finding.device in wanted)


def vfio_keys(root: Path, device_id: str) -> tuple[str, ...]:
    """A whole DSA function's ID is its PCI address."""
    return (device_id,)


@dataclass
class WorkQueuePlugin(KernelHealthHooks):
    """DSA or IAA work queues as resources ``wq-<type>-<mode>``."""

    kind: IdxdKind
    prefix: str = ""
    shared_dev_num: int = 1
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    health: KernelHealth | None = None
    """Kernel signals (``-kernel-health``): device and queue state, the error register, AER, binding."""
    numa: NumaCache = field(init=False)

    def __post_init__(self) -> None:
        self.numa = NumaCache(self.prefix)

    @property
    def namespace(self) -> str:
        return self.kind.namespace

    def scan(self) -> DeviceTree:
        discovery = scan_work_queues(self.prefix, self.kind, self.shared_dev_num, self.numa)
        tree, problems = self.with_health(discovery.tree, discovery.problems)
        self.problems.report(problems)
        return tree

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
class DsaVfioPlugin(KernelHealthHooks):
    """Whole DSA functions bound to vfio-pci, as resource ``vfio``."""

    prefix: str = ""
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    health: KernelHealth | None = None
    """Kernel signals (``-kernel-health``): AER and driver binding of each function."""

    @property
    def namespace(self) -> str:
        return DSA.namespace

    def scan(self) -> DeviceTree:
        discovery = scan_vfio(self.prefix)
        tree, problems = self.with_health(discovery.tree, discovery.problems)
        self.problems.report(problems)
        return tree

    def watch_paths(self) -> Sequence[Path]:
        return (prefixed(self.prefix, "/dev/vfio"),)

    def uevent_subsystems(self) -> Collection[str]:
        """Binding a function to vfio-pci is a ``pci`` event and creates its group node (``vfio``)."""
        return ("pci", "vfio")

    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation:
        return with_bdf_envs(allocation, ids)
