"""``intel_gpu_dra_driver``: the GPU DRA driver's flags and its start.

The shared DRA flags (:mod:`intel_device_plugins.dra.cli`) plus the GPU plugin's card selection
(``-allow-ids``, ``-deny-ids``) and ``-bypath``, which mean here what they mean for the plugin, and
the taint effects of critical and warning health issues (``-critical-taint-effect``, default
``NoExecute``; ``-warning-taint-effect``, default ``NoSchedule``).
Sharing (``-shared-dev-num``) and monitoring are not flags of the driver: a claim shares a card by
asking for part of its capacity, and monitoring is an admin-access claim.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from intel_device_plugins.dra.cli import new_driver_parser, run_driver_command
from intel_device_plugins.dra.slices import TAINT_EFFECTS
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.flagnames import (
    GPU_ALLOW_IDS,
    GPU_BYPATH,
    GPU_CRITICAL_TAINT_EFFECT,
    GPU_DENY_IDS,
    GPU_WARNING_TAINT_EFFECT,
)
from intel_device_plugins.plugins.gpu.discovery import ByPath, GpuOptions, parse_id_list
from intel_device_plugins.plugins.gpu.dra import DEFAULT_HEALTH_TAINTS, GpuDriverProfile

PROGRAM = "intel_gpu_dra_driver"


def build_parser() -> GoFlagParser:
    parser = new_driver_parser(PROGRAM, "Kubernetes DRA driver for Intel GPUs (gpu.intel.com).")
    parser.add_flag(
        GPU_BYPATH, type=ByPath, choices=list(ByPath), default=ByPath.SINGLE, help="by-path mounts"
    )
    parser.add_flag(GPU_ALLOW_IDS, type=parse_id_list, default=frozenset(), help="only these PCI device IDs")
    parser.add_flag(GPU_DENY_IDS, type=parse_id_list, default=frozenset(), help="never these PCI device IDs")
    effects = sorted(TAINT_EFFECTS)
    parser.add_flag(
        GPU_CRITICAL_TAINT_EFFECT,
        choices=effects,
        default=DEFAULT_HEALTH_TAINTS.critical,
        help="taint effect of a card with a critical health issue",
    )
    parser.add_flag(
        GPU_WARNING_TAINT_EFFECT,
        choices=effects,
        default=DEFAULT_HEALTH_TAINTS.warning,
        help="taint effect of a card with a health warning",
    )
    return parser


def build_profile(args: argparse.Namespace) -> GpuDriverProfile:
    """The profile for the parsed flags; ``ValueError`` names the flags that cannot go together."""
    if args.allow_ids and args.deny_ids:
        raise ValueError(f"-{GPU_ALLOW_IDS} and -{GPU_DENY_IDS} cannot be used together")
    options = GpuOptions(by_path=args.bypath, allow_ids=args.allow_ids, deny_ids=args.deny_ids)
    taints = replace(
        DEFAULT_HEALTH_TAINTS, critical=args.critical_taint_effect, warning=args.warning_taint_effect
    )
    return GpuDriverProfile(prefix=args.prefix, options=options, health_taints=taints)


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
