"""``intel_fpga_dra_driver``: FPGA ports (``-mode af``) or regions (``region``, ``regiondevel``) as DRA
devices (``fpga.intel.com``).

``-mode`` is the device plugin's flag. The plugin's node annotation that overrides it is not read:
the driver's mode is what its DaemonSet says.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.dra.cli import new_driver_parser, run_driver_command
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.fpga.discovery import Mode
from intel_device_plugins.plugins.fpga.dra import FpgaDriverProfile
from intel_device_plugins.plugins.fpga.flags import add_mode_flag

PROGRAM = "intel_fpga_dra_driver"


def build_parser() -> GoFlagParser:
    parser = new_driver_parser(PROGRAM, "Kubernetes DRA driver for Intel FPGA cards (fpga.intel.com).")
    add_mode_flag(parser)
    return parser


def build_profile(args: argparse.Namespace) -> FpgaDriverProfile:
    return FpgaDriverProfile(prefix=args.prefix, mode=Mode(args.mode))


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
