"""``intel_fpga_device_plugin``: upstream's flags, the node's mode annotation, and serving."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping, Sequence

from intel_device_plugins.deviceplugin.cli import GoFlagParser, new_parser, run_plugin_command
from intel_device_plugins.plugins.fpga.discovery import Mode
from intel_device_plugins.plugins.fpga.flags import add_mode_flag
from intel_device_plugins.plugins.fpga.nodemode import effective_mode, read_node_annotations
from intel_device_plugins.plugins.fpga.plugin import FpgaPlugin, fpga_keys
from intel_device_plugins.plugins.scanning import add_kernel_health, kernel_health

log = logging.getLogger(__name__)

__all__ = ["add_mode_flag", "build_parser", "build_plugins", "resolve_mode"]

AnnotationReader = Callable[[str, str, str], Mapping[str, str]]
"""(node name, kubeconfig, master) → the node's annotations; raises when they cannot be read."""


def build_parser() -> GoFlagParser:
    parser = new_parser(
        "intel_fpga_device_plugin", "Kubernetes device plugin for Intel FPGA cards (fpga.intel.com)."
    )
    add_mode_flag(parser)
    add_kernel_health(parser)
    parser.add_flag("kubeconfig", default="", help="kubeconfig file (default: the pod's ServiceAccount)")
    parser.add_flag("master", default="", help="API server address; overrides the kubeconfig's")
    parser.add_flag(
        "node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="node whose fpga.intel.com/device-plugin-mode annotation overrides -mode (default: $NODE_NAME)",
    )
    return parser


def resolve_mode(args: argparse.Namespace, reader: AnnotationReader = read_node_annotations) -> Mode:
    """``-mode``, overridden by the node's annotation when it can be read; errors are only logged."""
    flag_mode = Mode(args.mode)
    if not args.node_name:
        log.info("no -node-name or NODE_NAME: node annotation not read; mode %s", flag_mode)
        return flag_mode
    try:
        annotations = reader(args.node_name, args.kubeconfig, args.master)
    except Exception as error:  # any API or config failure leaves -mode in force
        log.error(
            "cannot read node %s for its mode annotation (%s); using -mode %s",
            args.node_name,
            error,
            flag_mode,
        )
        return flag_mode
    mode, message = effective_mode(flag_mode, annotations)
    if message:
        log.warning("%s", message)
    return mode


def build_plugins(args: argparse.Namespace) -> Sequence[FpgaPlugin]:
    mode = resolve_mode(args)
    log.info("FPGA device plugin started in %s mode", mode)
    health = kernel_health(args.kernel_health, args.prefix, fpga_keys, label="FPGA")
    return [FpgaPlugin(args.prefix, mode, health=health)]


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)


if __name__ == "__main__":
    raise SystemExit(main())
