"""``intel_iaa_device_plugin``: IAA work queues."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    new_parser,
    run_plugin_command,
)
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.plugins.idxd.discovery import IAA
from intel_device_plugins.plugins.idxd.plugin import WorkQueuePlugin
from intel_device_plugins.plugins.scanning import add_shared_dev_num


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    return [WorkQueuePlugin(IAA, prefix=args.prefix, shared_dev_num=args.shared_dev_num)]


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_iaa_device_plugin", "Intel IAA device plugin for Kubernetes")
    add_shared_dev_num(parser, "shared work queue")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
