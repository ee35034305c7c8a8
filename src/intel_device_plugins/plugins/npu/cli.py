"""``intel_npu_device_plugin``: Intel NPUs as resource ``npu.intel.com/accel``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.cli import (
    PluginArgumentParser,
    new_parser,
    run_plugin_command,
)
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.npu.discovery import DEV_DIR, NAMESPACE, scan_npus
from intel_device_plugins.plugins.scanning import add_shared_dev_num
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


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    return [NpuPlugin(prefix=args.prefix, shared_dev_num=args.shared_dev_num)]


def make_parser() -> PluginArgumentParser:
    parser = new_parser("intel_npu_device_plugin", "Intel NPU device plugin for Kubernetes")
    add_shared_dev_num(parser, "NPU")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(make_parser(), build_plugins, argv)
