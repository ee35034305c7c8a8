"""The NPU plugin: discovery wired to the framework, with its problems logged once."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.npu.discovery import DEV_DIR, NAMESPACE, scan_npus
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)


@dataclass
class NpuPlugin:
    """Thin shell over :func:`scan_npus`: holds the flags and logs the scan's problems."""

    prefix: str = ""
    shared_dev_num: int = 1
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))

    @property
    def namespace(self) -> str:
        return NAMESPACE

    def scan(self) -> DeviceTree:
        discovery = scan_npus(self.prefix, self.shared_dev_num)
        self.problems.report(discovery.problems)
        return discovery.tree

    def watch_paths(self) -> Sequence[Path]:
        return (prefixed(self.prefix, DEV_DIR),)

    def uevent_subsystems(self) -> Collection[str]:
        """NPUs come and go with ``accel`` events (driver binds and PCI hot-plug with ``pci`` ones), and
        udev's node in ``/dev/accel`` is watched: nothing the scan reads changes unannounced.
        """
        return ("accel", "pci")
