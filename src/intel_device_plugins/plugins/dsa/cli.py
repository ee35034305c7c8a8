"""``intel_dsa_device_plugin``: DSA work queues, or whole DSA functions with ``-driver vfio-pci``."""

from __future__ import annotations

import argparse
import functools
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
from intel_device_plugins.plugins.idxd.plugin import (
    DsaVfioPlugin,
    WorkQueuePlugin,
    idxd_kind_findings,
    queue_keys,
    vfio_keys,
)
from intel_device_plugins.plugins.scanning import add_kernel_health, add_shared_dev_num, kernel_health

log = logging.getLogger(__name__)

DRIVERS = ("idxd", "vfio-pci")


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    if args.driver == "vfio-pci":
        if args.shared_dev_num != 1:
            log.info("-shared-dev-num %d has no effect with -driver vfio-pci", args.shared_dev_num)
        health = kernel_health(args.kernel_health, args.prefix, vfio_keys, label="DSA")
        return [DsaVfioPlugin(prefix=args.prefix, health=health)]
    keys = functools.partial(queue_keys, DSA)
    health = kernel_health(args.kernel_health, args.prefix, keys, idxd_kind_findings, label="DSA")
    return [WorkQueuePlugin(DSA, prefix=args.prefix, shared_dev_num=args.shared_dev_num, health=health)]


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_dsa_device_plugin", "Intel DSA device plugin for Kubernetes")
    add_shared_dev_num(parser, "shared work queue")
    add_kernel_health(parser)
    parser.add_flag(
        DSA_DRIVER,
        choices=DRIVERS,
        default="idxd",
        help="idxd: advertise work queues; vfio-pci: advertise whole DSA functions bound to vfio-pci",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
