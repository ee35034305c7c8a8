"""The command-line contract shared by every plugin binary.

Flags keep upstream's spelling and accept one or two dashes (``-shared-dev-num 2`` and
``--shared-dev-num=2``), so existing DaemonSet manifests keep working.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.manager import serve_plugins
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.deviceplugin.scanworker import exit_leaving_stuck_threads
from intel_device_plugins.deviceplugin.server import FrameworkConfig
from intel_device_plugins.flags import GoFlagParser, parse_bool, positive_float, positive_int
from intel_device_plugins.logconfig import add_verbosity_flag, configure_logging

__all__ = ["GoFlagParser", "parse_bool", "positive_float", "positive_int"]

DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_CDI_DIR = "/var/run/cdi"
DEFAULT_SCAN_INTERVAL = 1.0
"""Polling interval of plugins that are not event-driven."""
DEFAULT_EVENT_RESCAN_INTERVAL = 60.0
"""Safety rescan interval of event-driven plugins."""


def new_parser(program: str, description: str) -> GoFlagParser:
    """A parser carrying the flags every plugin has."""
    parser = GoFlagParser(prog=program, description=description)
    parser.add_flag("prefix", default="", help="path prefix for /sys and /dev; kept in reported paths")
    parser.add_flag("device-plugin-dir", default=DEFAULT_DEVICE_PLUGIN_DIR, help="where kubelet.sock lives")
    parser.add_flag("cdi-dir", default=DEFAULT_CDI_DIR, help="where CDI spec files are written")
    parser.add_flag(
        "scan-interval",
        type=positive_float,
        default=None,
        help=f"seconds between device scans (default: {DEFAULT_SCAN_INTERVAL:g}, or"
        f" {DEFAULT_EVENT_RESCAN_INTERVAL:g} for plugins that rescan on kernel and inotify events)",
    )
    parser.add_flag(
        "uevent-dir",
        default=None,
        help="simulated nodes: take uevents from datagram sockets in this directory, not the kernel",
    )
    add_verbosity_flag(parser)
    return parser


def framework_config(args: argparse.Namespace) -> FrameworkConfig:
    """The framework's settings; an explicit ``-scan-interval`` applies to every plugin."""
    explicit = args.scan_interval
    return FrameworkConfig(
        device_plugin_dir=Path(args.device_plugin_dir),
        cdi_dir=Path(args.cdi_dir),
        scan_interval=explicit or DEFAULT_SCAN_INTERVAL,
        event_rescan_interval=explicit or DEFAULT_EVENT_RESCAN_INTERVAL,
        uevent_dir=Path(args.uevent_dir) if args.uevent_dir else None,
    )


async def serve_until_signalled(plugins: Sequence[Scanner], config: FrameworkConfig) -> None:
    """Serve until SIGTERM or SIGINT, then stop the servers and remove our sockets."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await serve_plugins(plugins, config, stop)


def run_plugin_command(
    parser: GoFlagParser,
    build_plugins: Callable[[argparse.Namespace], Sequence[Scanner]],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse flags, build the plugin(s) and serve them; the body of every plugin's ``main``.

    ``build_plugins`` raises ``ValueError`` for flag combinations that cannot work; that is reported
    like any other bad flag (exit code 2, naming the flag) before anything is served.
    """
    args = parser.parse_args(argv)
    configure_logging(args.verbosity)
    try:
        plugins = build_plugins(args)
    except ValueError as error:
        parser.error(str(error))
    return serve_and_exit(plugins, framework_config(args))


def serve_and_exit(plugins: Sequence[Scanner], config: FrameworkConfig) -> int:
    """Serve until signalled; exit 0 even when a scan thread is stuck in a read (it is left behind)."""
    asyncio.run(serve_until_signalled(plugins, config))
    exit_leaving_stuck_threads(0)
    return 0
