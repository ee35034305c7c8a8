"""``intel_dlb_device_plugin``: the flags every plugin has, and ``-kernel-health``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.deviceplugin.cli import GoFlagParser, new_parser, run_plugin_command
from intel_device_plugins.plugins.dlb.plugin import DlbPlugin, dlb_keys
from intel_device_plugins.plugins.scanning import add_kernel_health, kernel_health


def build_parser() -> GoFlagParser:
    parser = new_parser(
        "intel_dlb_device_plugin", "Kubernetes device plugin for Intel Dynamic Load Balancer (dlb.intel.com)."
    )
    add_kernel_health(parser)
    return parser


def build_plugins(args: argparse.Namespace) -> Sequence[DlbPlugin]:
    return [
        DlbPlugin(args.prefix, health=kernel_health(args.kernel_health, args.prefix, dlb_keys, label="DLB"))
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)


if __name__ == "__main__":
    raise SystemExit(main())
