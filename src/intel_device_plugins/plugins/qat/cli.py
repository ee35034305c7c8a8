"""``intel_qat_device_plugin``: flags, their checks, and serving."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    new_parser,
    positive_int,
    run_plugin_command,
)
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.plugins.flagnames import (
    ALLOCATION_POLICY,
    QAT_DPDK_DRIVER,
    QAT_KERNEL_VF_DRIVERS,
    QAT_MAX_NUM_DEVICES,
    QAT_MODE,
)
from intel_device_plugins.plugins.qat.discovery import (
    DEFAULT_KERNEL_VF_DRIVERS,
    DPDK_DRIVERS,
    KERNEL_VF_DRIVERS,
    DpdkConfig,
    QatPaths,
)
from intel_device_plugins.plugins.qat.kernel import KernelPaths
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin, QatKernelPlugin
from intel_device_plugins.plugins.qat.policy import Policy


class Mode(StrEnum):
    DPDK = "dpdk"
    KERNEL = "kernel"


def parse_vf_drivers(text: str) -> tuple[str, ...]:
    """``"4xxxvf,420xxvf"`` → drivers; each must be a QAT VF driver the plugin knows."""
    drivers = tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    if not drivers:
        raise argparse.ArgumentTypeError("no VF driver given")
    for driver in drivers:
        if driver not in KERNEL_VF_DRIVERS:
            raise argparse.ArgumentTypeError(
                f"unknown VF driver {driver!r} (known: {', '.join(KERNEL_VF_DRIVERS)})"
            )
    return drivers


def parse_policy(text: str) -> Policy:
    """``packed`` or ``balanced`` (``none`` is the default when the flag is absent)."""
    try:
        return Policy(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an allocation policy (use packed, balanced or none)"
        ) from None


def add_vf_flags(parser: GoFlagParser) -> None:
    """The flags choosing the mode and the VFs, shared by the device plugin and the DRA driver."""
    parser.add_flag(
        QAT_DPDK_DRIVER, choices=DPDK_DRIVERS, default=DPDK_DRIVERS[0], help="driver the VFs are bound to"
    )
    parser.add_flag(
        QAT_KERNEL_VF_DRIVERS,
        type=parse_vf_drivers,
        default=DEFAULT_KERNEL_VF_DRIVERS,
        help="comma-separated QAT VF drivers whose devices are taken over",
    )
    parser.add_flag(QAT_MAX_NUM_DEVICES, type=positive_int, default=64, help="at most this many VFs")
    parser.add_flag(
        QAT_MODE,
        type=Mode,
        choices=list(Mode),
        default=Mode.DPDK,
        help="dpdk (VFs for user-space drivers) or kernel (QAT kernel driver sections; legacy)",
    )


def dpdk_config(args: argparse.Namespace) -> DpdkConfig:
    return DpdkConfig(
        dpdk_driver=args.dpdk_driver,
        kernel_vf_drivers=args.kernel_vf_drivers,
        max_devices=args.max_num_devices,
    )


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
