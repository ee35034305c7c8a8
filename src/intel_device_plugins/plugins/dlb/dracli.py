"""``intel_dlb_dra_driver``: DLB PFs and VFs as DRA devices (``dlb.intel.com``); only the shared DRA flags."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.dra.cli import new_driver_parser, run_driver_command
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.dlb.dra import DlbDriverProfile

PROGRAM = "intel_dlb_dra_driver"


def build_parser() -> GoFlagParser:
    return new_driver_parser(
        PROGRAM, "Kubernetes DRA driver for Intel Dynamic Load Balancer (dlb.intel.com)."
    )


def build_profile(args: argparse.Namespace) -> DlbDriverProfile:
    return DlbDriverProfile(prefix=args.prefix)


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
