"""``intel_iaa_device_plugin``: IAA work queues."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    new_parser,
    run_plugin_command,
)
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.plugins.idxd.discovery import IAA
from intel_device_plugins.plugins.idxd.plugin import WorkQueuePlugin, idxd_kind_findings, queue_keys
from intel_device_plugins.plugins.scanning import add_kernel_health, add_shared_dev_num, kernel_health


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    keys = functools.partial(queue_keys, IAA)
    health = kernel_health(args.kernel_health, args.prefix, keys, idxd_kind_findings, label="IAA")
    return [WorkQueuePlugin(IAA, prefix=args.prefix, shared_dev_num=args.shared_dev_num, health=health)]


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_iaa_device_plugin", "Intel IAA device plugin for Kubernetes")
    add_shared_dev_num(parser, "shared work queue")
    add_kernel_health(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
