"""The FPGA plugin: discovery of one mode wired to the framework, with its problems logged once."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.health.kernelhealth import KernelHealth, pci_address_of
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.fpga.discovery import LAYOUTS, NAMESPACE, Mode, scan_fpga
from intel_device_plugins.plugins.scanning import KernelHealthHooks

log = logging.getLogger(__name__)

AFU_RESCAN_INTERVAL = 5.0
"""Seconds between rescans without events in AF mode (upstream polls every 5 s in all modes)."""
REGION_RESCAN_INTERVAL = 60.0


def fpga_keys(root: Path, device_id: str) -> tuple[str, ...]:
    """A port (AF mode) or FME (region modes) → the PCI function carrying it, through its platform
    bus link."""
    if "/" in device_id or device_id.startswith("."):
        return ()
    address = pci_address_of(root / "sys/bus/platform/devices" / device_id)
    return (address,) if address else ()


@dataclass
class FpgaPlugin(KernelHealthHooks):
    prefix: str = ""
    mode: Mode = Mode.AF
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    health: KernelHealth | None = None
    """Kernel signals (``-kernel-health``): AER and driver binding of the card's PCI function."""
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
        result = scan_fpga(self.root, self.mode, self.numa)
        tree, problems = self.with_health(result.tree, result.problems)
        self.problems.report(problems)
        return tree

    def watch_paths(self) -> Sequence[Path]:
        """Port and FME nodes appear in ``/dev`` with the cards; sysfs class directories are watched
        where they exist (a driver loading later announces its first device with a uevent)."""
        paths = [self.root / "dev"]
        for layout in LAYOUTS.values():
            class_dir = self.root / layout.class_dir.lstrip("/")
            if class_dir.is_dir():
                paths.append(class_dir)
        return tuple(paths)

    def uevent_subsystems(self) -> Collection[str]:
        """Cards and their VFs are ``pci`` events; a driver's per-function device is ``fpga_region``
        (DFL) or ``fpga`` (OPAE); FME and port devices, with their nodes, are ``platform`` events.
        A new blue bitstream (interface ID) takes a PCI re-enumeration, so it is announced too."""
        return ("pci", "fpga_region", "fpga", "platform")

    def safety_rescan_interval(self) -> float:
        """Programming a port (partial reconfiguration) changes its ``afu_id`` without a uevent, so
        AF mode, whose resources are named after the AFU, rescans every few seconds; so does kernel
        health."""
        interval = AFU_RESCAN_INTERVAL if self.mode == Mode.AF else REGION_RESCAN_INTERVAL
        return min(interval, super().safety_rescan_interval())
