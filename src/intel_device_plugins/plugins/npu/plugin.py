"""The NPU plugin: discovery wired to the framework, with its problems logged once."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.health.kernelhealth import KernelHealth, pci_address_of
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.npu.discovery import DEV_DIR, NAMESPACE, scan_npus
from intel_device_plugins.plugins.scanning import KernelHealthHooks
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)


def npu_keys(root: Path, device_id: str) -> tuple[str, ...]:
    """``accel0-1`` → the PCI function of ``accel0`` (its kernel findings and uevents name it so)."""
    name = device_id.rsplit("-", 1)[0]
    if "/" in name or not name.startswith("accel"):
        return ()
    address = pci_address_of(root / "sys/class/accel" / name / "device")
    return (address,) if address else ()


@dataclass
class NpuPlugin(KernelHealthHooks):
    """Thin shell over :func:`scan_npus`: holds the flags and logs the scan's problems."""

    prefix: str = ""
    shared_dev_num: int = 1
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    health: KernelHealth | None = None
    """Kernel signals (``-kernel-health``): AER, driver binding, the NPU's recovery uevents."""

    @property
    def namespace(self) -> str:
        return NAMESPACE

    def scan(self) -> DeviceTree:
        discovery = scan_npus(self.prefix, self.shared_dev_num)
        tree, problems = self.with_health(discovery.tree, discovery.problems)
        self.problems.report(problems)
        return tree

    def watch_paths(self) -> Sequence[Path]:
        return (prefixed(self.prefix, DEV_DIR),)

    def uevent_subsystems(self) -> Collection[str]:
        """NPUs come and go with ``accel`` events (driver binds and PCI hot-plug with ``pci`` ones), and
        udev's node in ``/dev/accel`` is watched: nothing the scan reads changes unannounced.
        """
        return ("accel", "pci")
