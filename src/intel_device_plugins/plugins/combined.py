"""``intel_device_plugins``: several device kinds served from one process.

Upstream runs one process per device kind; every process pays for its own interpreter and gRPC
runtime. Here one event loop serves any set of kinds::

    intel_device_plugins -prefix /host --plugin gpu --plugin 'qat -dpdk-driver vfio-pci' --plugin sgx

Each ``--plugin`` value is a kind followed by that kind's own flags, exactly as its standalone
binary takes them. The common flags (``-prefix``, ``-device-plugin-dir``, ``-cdi-dir``,
``-scan-interval``, ``-v``) are given once, for all kinds.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    framework_config,
    new_parser,
    serve_and_exit,
)
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.logconfig import configure_logging
from intel_device_plugins.plugins.kindspec import split_kind_spec

KINDS: Mapping[str, str] = MappingProxyType(
    {
        "gpu": "intel_device_plugins.plugins.gpu.cli",
        "qat": "intel_device_plugins.plugins.qat.cli",
        "sgx": "intel_device_plugins.plugins.sgx.cli",
        "dsa": "intel_device_plugins.plugins.dsa.cli",
        "iaa": "intel_device_plugins.plugins.iaa.cli",
        "dlb": "intel_device_plugins.plugins.dlb.cli",
        "npu": "intel_device_plugins.plugins.npu.cli",
        "fpga": "intel_device_plugins.plugins.fpga.cli",
    }
)
"""Kind → module with ``build_parser()`` and ``build_plugins(args)``; imported only when used."""

COMMON_FLAGS = ("prefix", "device-plugin-dir", "cdi-dir", "scan-interval", "uevent-dir", "v")


def _common_argv(args: argparse.Namespace) -> list[str]:
    argv = [
        "-prefix", args.prefix,
        "-device-plugin-dir", args.device_plugin_dir,
        "-cdi-dir", args.cdi_dir,
        "-v", str(args.verbosity),
    ]  # fmt: skip
    if args.scan_interval is not None:
        argv += ["-scan-interval", str(args.scan_interval)]
    if args.uevent_dir is not None:
        argv += ["-uevent-dir", args.uevent_dir]
    return argv


def build_kind(spec: str, common: Sequence[str], parser: GoFlagParser) -> Sequence[Scanner]:
    """Plugins for one ``--plugin`` value; errors are reported through ``parser`` (exit code 2)."""
    kind, flags = split_kind_spec(spec, "--plugin", KINDS, COMMON_FLAGS, parser)
    module = importlib.import_module(KINDS[kind])
    kind_parser: GoFlagParser = module.build_parser()
    kind_args = kind_parser.parse_args([*flags, *common])
    try:
        plugins: Sequence[Scanner] = module.build_plugins(kind_args)
    except ValueError as error:
        parser.error(f"--plugin {spec!r}: {error}")
    return plugins


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_device_plugins", "Serve several Intel device plugin kinds from one process.")
    parser.add_flag(
        "plugin",
        action="append",
        default=[],
        metavar="'KIND [FLAGS]'",
        help=f"a device kind and its own flags; repeatable. Kinds: {', '.join(KINDS)}",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.plugin:
        parser.error("at least one --plugin is needed")
    configure_logging(args.verbosity)
    kinds = [shlex.split(spec)[0] if spec.strip() else "" for spec in args.plugin]
    duplicates = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if duplicates:
        parser.error(f"--plugin: kind(s) given more than once: {', '.join(duplicates)}")
    common = _common_argv(args)
    plugins = [plugin for spec in args.plugin for plugin in build_kind(spec, common, parser)]
    return serve_and_exit(plugins, framework_config(args))


if __name__ == "__main__":
    raise SystemExit(main())
