"""``intel_qat_device_plugin``: flags, their checks, and serving."""

from __future__ import annotations

import argparse
import logging
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
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin, QatKernelPlugin, pf_findings, vf_keys
from intel_device_plugins.plugins.qat.policy import Policy
from intel_device_plugins.plugins.scanning import add_kernel_health, kernel_health

log = logging.getLogger(__name__)

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
    add_kernel_health(parser)
    return parser


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    root = Path(args.prefix or "/")
    if args.mode is Mode.KERNEL:
        if args.kernel_health:
            log.warning("-kernel-health: not available with -mode kernel (adf_ctl's sections); ignored")
        return [QatKernelPlugin(KernelPaths(root))]
    health = kernel_health(args.kernel_health, args.prefix, vf_keys, pf_findings, label="QAT")
    return [QatDpdkPlugin(QatPaths(root), dpdk_config(args), args.allocation_policy, health=health)]


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)


if __name__ == "__main__":
    raise SystemExit(main())
