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
from intel_device_plugins.plugins.npu.plugin import NpuPlugin, npu_keys
from intel_device_plugins.plugins.scanning import add_kernel_health, add_shared_dev_num, kernel_health

log = logging.getLogger(__name__)


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    health = kernel_health(args.kernel_health, args.prefix, npu_keys, label="NPU")
    return [NpuPlugin(prefix=args.prefix, shared_dev_num=args.shared_dev_num, health=health)]


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_npu_device_plugin", "Intel NPU device plugin for Kubernetes")
    add_shared_dev_num(parser, "NPU")
    add_kernel_health(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
