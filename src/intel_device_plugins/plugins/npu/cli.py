"""``intel_npu_device_plugin``: Intel NPUs as resource ``npu.intel.com/accel``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    new_parser,
    run_plugin_command,
)
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.plugins.npu.plugin import NpuPlugin
from intel_device_plugins.plugins.scanning import add_shared_dev_num

log = logging.getLogger(__name__)


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    return [NpuPlugin(prefix=args.prefix, shared_dev_num=args.shared_dev_num)]


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_npu_device_plugin", "Intel NPU device plugin for Kubernetes")
    add_shared_dev_num(parser, "NPU")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
