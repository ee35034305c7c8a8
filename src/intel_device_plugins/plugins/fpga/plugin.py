"""The FPGA plugin: discovery of one mode wired to the framework, with its problems logged once."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.fpga.discovery import LAYOUTS, NAMESPACE, Mode, scan_fpga

log = logging.getLogger(__name__)


@dataclass
class FpgaPlugin:
    root: Path = Path("/")
    mode: Mode = Mode.AF
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    numa: NumaCache = field(init=False)

    def __post_init__(self) -> None:
        self.numa = NumaCache(self.root)

    @property
    def namespace(self) -> str:
        return NAMESPACE

    def scan(self) -> DeviceTree:
        result = scan_fpga(self.root, self.mode, self.numa)
        self.problems.report(result.problems)
        return result.tree

    def watch_paths(self) -> Sequence[Path]:
        """Port and FME nodes appear in ``/dev`` with the cards; a driver's class directory when it loads."""
        paths = [self.root / "dev"]
        paths.extend(self.root / layout.class_dir.lstrip("/") for layout in LAYOUTS.values())
        return tuple(paths)
