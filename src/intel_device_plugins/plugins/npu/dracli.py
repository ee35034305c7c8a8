"""``intel_npu_dra_driver``: NPUs as DRA devices (``npu.intel.com``); only the shared DRA flags.

The plugin's ``-shared-dev-num`` is not a flag here: a claim gets a whole NPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.dra.cli import new_driver_parser, run_driver_command
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.npu.dra import NpuDriverProfile

PROGRAM = "intel_npu_dra_driver"


def build_parser() -> GoFlagParser:
    return new_driver_parser(PROGRAM, "Kubernetes DRA driver for Intel NPUs (npu.intel.com).")


def build_profile(args: argparse.Namespace) -> NpuDriverProfile:
    return NpuDriverProfile(prefix=args.prefix)


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
