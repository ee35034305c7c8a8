"""``intel_qat_device_plugin``: flags, their checks, and serving."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.cli import GoFlagParser, new_parser, run_plugin_command
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.plugins.flagnames import ALLOCATION_POLICY
from intel_device_plugins.plugins.qat.discovery import QatPaths
from intel_device_plugins.plugins.qat.flags import (
    Mode,
    add_vf_flags,
    dpdk_config,
    parse_policy,
    parse_vf_drivers,
)
from intel_device_plugins.plugins.qat.kernel import KernelPaths
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin, QatKernelPlugin
from intel_device_plugins.plugins.qat.policy import Policy

__all__ = [
    "Mode",
    "add_vf_flags",
    "build_parser",
    "build_plugins",
    "dpdk_config",
    "parse_policy",
    "parse_vf_drivers",
]


def build_parser() -> GoFlagParser:
    parser = new_parser(
        "intel_qat_device_plugin",
        "Kubernetes device plugin for Intel QuickAssist Technology (qat.intel.com).",
    )
    add_vf_flags(parser)
    parser.add_flag(
        ALLOCATION_POLICY,
        type=parse_policy,
        default=Policy.NONE,
        help="preferred allocation: packed (fill one PF first) or balanced (spread over PFs)",
    )
    return parser


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    root = Path(args.prefix or "/")
    if args.mode is Mode.KERNEL:
        return [QatKernelPlugin(KernelPaths(root))]
    return [QatDpdkPlugin(QatPaths(root), dpdk_config(args), args.allocation_policy)]


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)


if __name__ == "__main__":
    raise SystemExit(main())
