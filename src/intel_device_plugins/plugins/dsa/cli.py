"""``intel_dsa_device_plugin``: DSA work queues, or whole DSA functions with ``-driver vfio-pci``."""

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
from intel_device_plugins.plugins.flagnames import DSA_DRIVER
from intel_device_plugins.plugins.idxd.discovery import DSA
from intel_device_plugins.plugins.idxd.plugin import DsaVfioPlugin, WorkQueuePlugin
from intel_device_plugins.plugins.scanning import add_shared_dev_num

log = logging.getLogger(__name__)

DRIVERS = ("idxd", "vfio-pci")


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    if args.driver == "vfio-pci":
        if args.shared_dev_num != 1:
            log.info("-shared-dev-num %d has no effect with -driver vfio-pci", args.shared_dev_num)
        return [DsaVfioPlugin(prefix=args.prefix)]
    return [WorkQueuePlugin(DSA, prefix=args.prefix, shared_dev_num=args.shared_dev_num)]


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_dsa_device_plugin", "Intel DSA device plugin for Kubernetes")
    add_shared_dev_num(parser, "shared work queue")
    parser.add_flag(
        DSA_DRIVER,
        choices=DRIVERS,
        default="idxd",
        help="idxd: advertise work queues; vfio-pci: advertise whole DSA functions bound to vfio-pci",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
