"""``intel_dsa_dra_driver``: DSA work queues as DRA devices (``dsa.intel.com``); see :mod:`..idxd.dracli`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.dra.cli import run_driver_command
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.idxd.discovery import DSA
from intel_device_plugins.plugins.idxd.dra import WorkQueueDriverProfile
from intel_device_plugins.plugins.idxd.dracli import build_parser_for, build_profile_for

PROGRAM = "intel_dsa_dra_driver"


def build_parser() -> GoFlagParser:
    return build_parser_for(PROGRAM, DSA, "DSA")


def build_profile(args: argparse.Namespace) -> WorkQueueDriverProfile:
    return build_profile_for(DSA, args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
