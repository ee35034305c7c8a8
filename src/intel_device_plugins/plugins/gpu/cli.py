"""``intel_gpu_device_plugin``: flags, their checks, and serving."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    new_parser,
    run_plugin_command,
)
from intel_device_plugins.flags import MAX_SHARED_DEV_NUM, shared_dev_num
from intel_device_plugins.plugins.flagnames import (
    ALLOCATION_POLICY,
    GPU_ALLOW_IDS,
    GPU_BYPATH,
    GPU_DENY_IDS,
    GPU_ENABLE_MONITORING,
    GPU_MONITORING_MODE,
    SHARED_DEV_NUM,
)
from intel_device_plugins.plugins.gpu.discovery import ByPath, GpuOptions, MonitoringMode, parse_id_list
from intel_device_plugins.plugins.gpu.healthsettings import (
    DEFAULT_TEMP_LIMIT,
    DEFAULT_XPUMD_SEVERITY,
    GpuHealthSettings,
    TemperatureLimits,
    XpumdHealthSettings,
    xpumd_severity,
)
from intel_device_plugins.plugins.gpu.plugin import GpuPlugin
from intel_device_plugins.plugins.gpu.policy import AllocationPolicy

log = logging.getLogger(__name__)


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_gpu_device_plugin", "Kubernetes device plugin for Intel GPUs (gpu.intel.com).")
    parser.add_flag(
        SHARED_DEV_NUM,
        type=shared_dev_num,
        default=1,
        help=f"containers that may share one GPU (at most {MAX_SHARED_DEV_NUM})",
    )
    parser.add_flag(
        ALLOCATION_POLICY,
        type=AllocationPolicy,
        choices=list(AllocationPolicy),
        default=AllocationPolicy.NONE,
        help="preferred allocation policy for shared GPUs",
    )
    parser.add_flag(
        GPU_BYPATH, type=ByPath, choices=list(ByPath), default=ByPath.SINGLE, help="by-path mounts"
    )
    parser.add_flag(GPU_ALLOW_IDS, type=parse_id_list, default=frozenset(), help="only these PCI device IDs")
    parser.add_flag(GPU_DENY_IDS, type=parse_id_list, default=frozenset(), help="never these PCI device IDs")
    parser.add_bool_flag(GPU_ENABLE_MONITORING, help="advertise the monitoring resource")
    parser.add_flag(
        GPU_MONITORING_MODE, type=MonitoringMode, choices=list(MonitoringMode), default=MonitoringMode.SINGLE
    )
    parser.add_bool_flag("health-management", help="Level-Zero health (not supported here; presence health)")
    parser.add_flag("xpumd-endpoint", default="", help="xpumd health socket (/run/xpumd/intelxpuinfo.sock)")
    parser.add_flag(
        "xpumd-unhealthy-severity",
        type=xpumd_severity,
        default=DEFAULT_XPUMD_SEVERITY,
        metavar="failed|critical|warning",
        help="lowest xpumd severity that makes a GPU Unhealthy: failed, critical or warning",
    )
    parser.add_bool_flag("wsl", help="WSL mode (not supported)")
    parser.add_bool_flag("resource-manager", help="GPU resource manager (removed upstream in v0.34)")
    for name in ("temp-limit", "gpu-temp-limit", "memory-temp-limit"):
        parser.add_flag(name, type=int, default=DEFAULT_TEMP_LIMIT, help="°C limit for Level-Zero health")
    return parser


def build_plugins(args: argparse.Namespace) -> Sequence[GpuPlugin]:
    """Check flag combinations, then build the plugin. ``ValueError`` messages name the flags."""
    if args.allow_ids and args.deny_ids:
        raise ValueError("-allow-ids and -deny-ids cannot be used together")
    if args.wsl:
        raise ValueError("-wsl: WSL mode is not supported by this plugin")
    if args.resource_manager:
        raise ValueError(
            "-resource-manager: the GPU resource manager is not supported (removed upstream in v0.34)"
        )
    if args.health_management and args.xpumd_endpoint:
        raise ValueError("-health-management and -xpumd-endpoint cannot be used together")
    health = GpuHealthSettings(
        xpumd=XpumdHealthSettings(args.xpumd_endpoint, args.xpumd_unhealthy_severity),
        level_zero=args.health_management,
        temperature_limits=TemperatureLimits(args.temp_limit, args.gpu_temp_limit, args.memory_temp_limit),
    )
    if health.xpumd.enabled and not health.temperature_limits.are_defaults:
        raise ValueError("-xpumd-endpoint cannot be combined with temperature limits")
    if health.xpumd.enabled:
        log.warning(
            "-xpumd-endpoint %s (unhealthy from severity %s): health comes from device presence here",
            health.xpumd.endpoint,
            health.xpumd.unhealthy_severity,
        )
    elif health.level_zero:
        log.warning("-health-management: health comes from device presence in this plugin")
    options = GpuOptions(
        shared_dev_num=args.shared_dev_num,
        by_path=args.bypath,
        allow_ids=args.allow_ids,
        deny_ids=args.deny_ids,
        enable_monitoring=args.enable_monitoring,
        monitoring_mode=args.monitoring_mode,
    )
    return [
        GpuPlugin(prefix=args.prefix, options=options, policy=args.allocation_policy, health_flags=health)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)


if __name__ == "__main__":
    raise SystemExit(main())
