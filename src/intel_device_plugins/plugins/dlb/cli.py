"""``intel_dlb_device_plugin``: only the flags every plugin has."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.deviceplugin.cli import GoFlagParser, new_parser, run_plugin_command
from intel_device_plugins.plugins.dlb.plugin import DlbPlugin


def build_parser() -> GoFlagParser:
    return new_parser(
        "intel_dlb_device_plugin", "Kubernetes device plugin for Intel Dynamic Load Balancer (dlb.intel.com)."
    )


def build_plugins(args: argparse.Namespace) -> Sequence[DlbPlugin]:
    return [DlbPlugin(args.prefix)]


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)


if __name__ == "__main__":
    raise SystemExit(main())
