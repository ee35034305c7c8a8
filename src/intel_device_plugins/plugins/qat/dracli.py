"""``intel_qat_dra_driver``: QAT VFs (``-mode dpdk``) or kernel-driver process slots (``-mode kernel``)
as DRA devices (``qat.intel.com``).

``-mode``, ``-dpdk-driver``, ``-kernel-vf-drivers`` and ``-max-num-devices`` are the device plugin's
flags and mean the same; ``-config-dir`` is the driver's own (kernel mode reads the host's configuration
files where its pod mounts them). ``-allocation-policy`` is not: the scheduler chooses the VFs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from intel_device_plugins.dra.cli import new_driver_parser, run_driver_command
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.qat.discovery import QatPaths
from intel_device_plugins.plugins.qat.dra import QatDriverProfile, QatKernelDriverProfile
from intel_device_plugins.plugins.qat.flags import Mode, add_vf_flags, dpdk_config
from intel_device_plugins.plugins.qat.kernel import KernelPaths
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin, QatKernelPlugin

PROGRAM = "intel_qat_dra_driver"


CONFIG_DIR = "config-dir"


def build_parser() -> GoFlagParser:
    parser = new_driver_parser(
        PROGRAM, "Kubernetes DRA driver for Intel QuickAssist Technology (qat.intel.com)."
    )
    add_vf_flags(parser)
    parser.add_flag(
        CONFIG_DIR,
        default="",
        help="kernel mode: the directory holding the QAT driver's <type>_dev<N>.conf files"
        " (default: /etc below -prefix); the kernel-mode install mounts the host's /etc there",
    )
    return parser


def build_profile(args: argparse.Namespace) -> QatDriverProfile | QatKernelDriverProfile:
    root = Path(args.prefix or "/")
    if args.mode is Mode.KERNEL:
        config_dir = Path(args.config_dir) if args.config_dir else None
        return QatKernelDriverProfile(QatKernelPlugin(KernelPaths(root, config_dir)))
    return QatDriverProfile(QatDpdkPlugin(QatPaths(root), dpdk_config(args)))


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
