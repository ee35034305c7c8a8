"""``intel_gpu_dra_driver``: the GPU DRA driver's flags and its start.

The shared DRA flags (:mod:`intel_device_plugins.dra.cli`) plus the GPU plugin's card selection
(``-allow-ids``, ``-deny-ids``) and ``-bypath``, which mean here what they mean for the plugin, and
the taint effects of critical and warning health issues (``-critical-taint-effect``, default
``NoExecute``; ``-warning-taint-effect``, default ``NoSchedule``).
Sharing (``-shared-dev-num``) and monitoring are not flags of the driver: a claim shares a card by
asking for part of its capacity, and monitoring is an admin-access claim.

Health from the hardware, as Intel's driver spells it: ``--health-monitoring``/``-m`` watches xpumd at
``--xpumd-socket``/``-x`` (``/run/xpumd/intelxpuinfo.sock``), whose warnings count as healthy unless
``--ignore-health-warning=false`` (``-w``); the GPU plugin's ``-xpumd-endpoint`` and
``-xpumd-unhealthy-severity`` are taken too, and ``-kernel-health`` adds the kernel's signals.
``--health-monitoring-optional``/``-o`` is accepted and changes nothing: an xpumd that cannot be
reached never stops this driver (Intel's exits after five minutes without it); its cards are
``Unknown`` meanwhile.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

from intel_device_plugins.dra.cli import new_driver_parser, run_driver_command
from intel_device_plugins.dra.slices import TAINT_EFFECTS
from intel_device_plugins.flags import GoFlagParser, parse_bool
from intel_device_plugins.plugins.flagnames import (
    GPU_ALLOW_IDS,
    GPU_BYPATH,
    GPU_CRITICAL_TAINT_EFFECT,
    GPU_DENY_IDS,
    GPU_WARNING_TAINT_EFFECT,
)
from intel_device_plugins.plugins.gpu.discovery import ByPath, GpuOptions, parse_id_list
from intel_device_plugins.plugins.gpu.dra import DEFAULT_HEALTH_TAINTS, GpuDriverProfile
from intel_device_plugins.plugins.gpu.health import GpuHealth
from intel_device_plugins.plugins.gpu.healthsettings import GpuHealthSettings, XpumdSeverity, xpumd_severity
from intel_device_plugins.plugins.scanning import add_kernel_health

PROGRAM = "intel_gpu_dra_driver"
DEFAULT_XPUMD_SOCKET = "/run/xpumd/intelxpuinfo.sock"
"""Intel's ``--xpumd-socket`` default: where xpumd's DaemonSet puts its socket on the host."""

log = logging.getLogger(__name__)


def _add_go_bool(parser: GoFlagParser, short: str, name: str, default: bool | str | None, help: str) -> None:
    """A boolean flag with Intel's one-letter alias: ``-m``, ``--health-monitoring=false`` … A string
    default (from the environment) is parsed like a value given on the command line."""
    parser.add_argument(
        short,
        f"--{name}",
        dest=name.replace("-", "_"),
        nargs="?",
        const=True,
        default=default,
        type=parse_bool,
        help=help,
    )


def build_parser(environ: Mapping[str, str] | None = None) -> GoFlagParser:
    """The driver's flags; Intel's health flags take their defaults from Intel's environment variables
    (``HEALTH_MONITORING``, ``HEALTH_MONITORING_OPTIONAL``, ``IGNORE_HEALTH_WARNING``, ``XPUMD_SOCKET``)."""
    env = os.environ if environ is None else environ
    parser = new_driver_parser(PROGRAM, "Kubernetes DRA driver for Intel GPUs (gpu.intel.com).", env)
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
    _add_go_bool(
        parser,
        "-m",
        "health-monitoring",
        env.get("HEALTH_MONITORING") or False,
        "watch device health from xpumd (--xpumd-socket)",
    )
    _add_go_bool(
        parser,
        "-o",
        "health-monitoring-optional",
        env.get("HEALTH_MONITORING_OPTIONAL") or False,
        "accepted for compatibility: an unreachable xpumd never stops this driver (cards are Unknown)",
    )
    _add_go_bool(
        parser,
        "-w",
        "ignore-health-warning",
        env.get("IGNORE_HEALTH_WARNING") or None,
        "xpumd warnings (temperature, power, degraded memory) count as healthy (default true)",
    )
    parser.add_argument(
        "-x",
        "--xpumd-socket",
        dest="xpumd_socket",
        default=env.get("XPUMD_SOCKET") or DEFAULT_XPUMD_SOCKET,
        help="xpumd's socket",
    )
    parser.add_flag("xpumd-endpoint", default="", help="xpumd's socket, as the GPU plugin names it")
    parser.add_flag(
        "xpumd-unhealthy-severity",
        type=xpumd_severity,
        default=None,
        metavar="failed|critical|warning",
        help="lowest health severity that makes a card Unhealthy (instead of --ignore-health-warning)",
    )
    add_kernel_health(parser)
    return parser


def health_settings(args: argparse.Namespace) -> GpuHealthSettings:
    """The health flags as the GPU plugin's settings; ``ValueError`` names flags that contradict."""
    endpoint = args.xpumd_endpoint
    if args.health_monitoring:
        if endpoint and endpoint != args.xpumd_socket:
            raise ValueError(
                f"-xpumd-endpoint {endpoint} and --xpumd-socket {args.xpumd_socket} name different sockets"
            )
        endpoint = args.xpumd_socket
    severity = args.xpumd_unhealthy_severity
    if severity is not None and args.ignore_health_warning is not None:
        raise ValueError("-xpumd-unhealthy-severity and --ignore-health-warning cannot be used together")
    if severity is None:
        ignore = True if args.ignore_health_warning is None else args.ignore_health_warning
        severity = XpumdSeverity.CRITICAL if ignore else XpumdSeverity.WARNING
    return GpuHealthSettings(
        xpumd_endpoint=endpoint, xpumd_unhealthy_severity=severity, kernel_signals=args.kernel_health
    )


def build_profile(args: argparse.Namespace) -> GpuDriverProfile:
    """The profile for the parsed flags; ``ValueError`` names the flags that cannot go together."""
    if args.allow_ids and args.deny_ids:
        raise ValueError(f"-{GPU_ALLOW_IDS} and -{GPU_DENY_IDS} cannot be used together")
    options = GpuOptions(by_path=args.bypath, allow_ids=args.allow_ids, deny_ids=args.deny_ids)
    taints = replace(
        DEFAULT_HEALTH_TAINTS, critical=args.critical_taint_effect, warning=args.warning_taint_effect
    )
    settings = health_settings(args)
    if settings.enabled:
        log.info(
            "health from: device nodes%s%s; unhealthy from severity %s",
            f", xpumd at {settings.xpumd_endpoint} (unreachable: cards Unknown, the driver keeps serving)"
            if settings.xpumd_enabled
            else "",
            ", kernel signals" if settings.kernel_signals else "",
            settings.xpumd_unhealthy_severity,
        )
    health = GpuHealth(settings) if settings.enabled else None
    return GpuDriverProfile(prefix=args.prefix, options=options, health_taints=taints, health=health)


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
