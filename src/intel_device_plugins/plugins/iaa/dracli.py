"""``intel_iaa_dra_driver``: IAA work queues as DRA devices (``iaa.intel.com``); see :mod:`..idxd.dracli`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.dra.cli import run_driver_command
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.idxd.discovery import IAA
from intel_device_plugins.plugins.idxd.dra import WorkQueueDriverProfile
from intel_device_plugins.plugins.idxd.dracli import build_parser_for, build_profile_for

PROGRAM = "intel_iaa_dra_driver"


def build_parser() -> GoFlagParser:
    return build_parser_for(PROGRAM, IAA, "IAA")


def build_profile(args: argparse.Namespace) -> WorkQueueDriverProfile:
    return build_profile_for(IAA, args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
