"""The DLB plugin: discovery wired to the framework, with its problems logged once."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.health.kernelhealth import KernelHealth, pci_address_of
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.dlb.discovery import NAMESPACE, scan_dlb
from intel_device_plugins.plugins.scanning import KernelHealthHooks

log = logging.getLogger(__name__)


def dlb_keys(root: Path, device_id: str) -> tuple[str, ...]:
    """``/dev/dlb0`` → the PCI function of ``dlb2`` class device ``dlb0``."""
    name = device_id.rsplit("/", 1)[-1]
    if not name.startswith("dlb"):
        return ()
    address = pci_address_of(root / "sys/class/dlb2" / name / "device")
    return (address,) if address else ()


@dataclass
class DlbPlugin(KernelHealthHooks):
    prefix: str = ""
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    health: KernelHealth | None = None
    """Kernel signals (``-kernel-health``): AER and driver binding of each PF and VF."""
    numa: NumaCache = field(init=False)
    root: Path = field(init=False)
    """The root the prefix stands for, which discovery reads from."""

    def __post_init__(self) -> None:
        self.root = Path(self.prefix or "/")
        self.numa = NumaCache(self.root)

    @property
    def namespace(self) -> str:
        return NAMESPACE

    def scan(self) -> DeviceTree:
        result = scan_dlb(self.root, self.numa)
        tree, problems = self.with_health(result.tree, result.problems)
        self.problems.report(problems)
        return tree

    def watch_paths(self) -> Sequence[Path]:
        """``/dev/dlbN`` nodes appear and vanish with the devices; sysfs sends no such events."""
        return (self.root / "dev",)

    def uevent_subsystems(self) -> Collection[str]:
        """A device comes and goes with a ``dlb2`` class event; PFs, VFs (``sriov_numvfs``) and driver
        binds are ``pci`` events. The scan reads nothing else that changes, so events replace polling.
        """
        return ("dlb2", "pci")
