"""The QAT flags the device plugin and the DRA driver share, apart from the device-plugin server, so
the driver's import of them does not load grpcio and protobuf."""

from __future__ import annotations

import argparse
from enum import StrEnum

from intel_device_plugins.flags import GoFlagParser, positive_int
from intel_device_plugins.plugins.flagnames import (
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
)
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
