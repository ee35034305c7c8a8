"""The command-line contract every DRA driver binary shares.

The flags keep the spelling of Kubernetes' Go DRA drivers (``-node-name``, ``-cdi-root``,
``-kubelet-registrar-directory-path``, ``-kubelet-plugins-directory-path``, ``-kubeconfig``) and
take one or two dashes, as every binary of this project does; ``-prefix``, ``-scan-interval`` and
``-uevent-dir`` are the device plugins' (simulated nodes, polling). ``-node-name`` and ``-pod-uid``
default to ``NODE_NAME`` and ``POD_UID`` from the environment, where the DaemonSet puts them with
the downward API.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from pathlib import Path

from intel_device_plugins.dra.driver import (
    DEFAULT_EVENT_RESCAN_INTERVAL,
    DEFAULT_POLL_INTERVAL,
    DriverConfig,
)
from intel_device_plugins.flags import GoFlagParser, positive_float
from intel_device_plugins.logconfig import add_verbosity_flag

DEFAULT_CDI_ROOT = "/var/run/cdi"
DEFAULT_REGISTRAR_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
NODE_NAME_ENV = "NODE_NAME"
POD_UID_ENV = "POD_UID"

NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A Node's name is a DNS subdomain (at most 253 characters)."""
MAX_NODE_NAME = 253


def new_driver_parser(
    program: str, description: str, environ: Mapping[str, str] | None = None
) -> GoFlagParser:
    """A parser carrying the flags every DRA driver has; ``environ`` gives the flags' defaults."""
    env = os.environ if environ is None else environ
    parser = GoFlagParser(prog=program, description=description)
    parser.add_flag(
        "node-name",
        default=env.get(NODE_NAME_ENV, ""),
        help=f"the node this driver runs on (default: ${NODE_NAME_ENV}); names the pool and owns the slices",
    )
    parser.add_flag(
        "cdi-root", default=DEFAULT_CDI_ROOT, help="where the per-claim CDI spec files are written"
    )
    parser.add_flag(
        "kubelet-registrar-directory-path",
        default=DEFAULT_REGISTRAR_DIR,
        help="the kubelet's plugin registration directory",
    )
    parser.add_flag(
        "kubelet-plugins-directory-path",
        default=DEFAULT_PLUGINS_DIR,
        help="where the driver's DRA socket and checkpoint live (in <dir>/<driver name>/)",
    )
    parser.add_flag("kubeconfig", default="", help="kubeconfig file (default: the pod's service account)")
    parser.add_flag(
        "pod-uid",
        default=env.get(POD_UID_ENV, ""),
        help=f"this instance's pod UID (default: ${POD_UID_ENV}); socket names carry it, so an update"
        " can start the new driver beside the old one",
    )
    parser.add_flag("prefix", default="", help="path prefix for /sys and /dev; kept in reported paths")
    parser.add_flag(
        "scan-interval",
        type=positive_float,
        default=None,
        help=f"seconds between device scans (default: {DEFAULT_POLL_INTERVAL:g} while a watched directory"
        f" cannot be watched, else {DEFAULT_EVENT_RESCAN_INTERVAL:g})",
    )
    parser.add_flag(
        "uevent-dir",
        default=None,
        help="simulated nodes: take uevents from datagram sockets in this directory, not the kernel",
    )
    add_verbosity_flag(parser)
    return parser


def driver_config(args: argparse.Namespace) -> DriverConfig:
    """The driver's settings from the shared flags; ``ValueError`` names the flag that is wrong."""
    node = args.node_name
    if not node:
        raise ValueError(f"-node-name is required (or set {NODE_NAME_ENV})")
    if len(node) > MAX_NODE_NAME or not NODE_NAME.match(node):
        raise ValueError(f"-node-name {node[:80]!r} is not a node name (a lower-case DNS subdomain)")
    for flag in ("cdi_root", "kubelet_registrar_directory_path", "kubelet_plugins_directory_path"):
        if not getattr(args, flag):
            raise ValueError(f"-{flag.replace('_', '-')} must not be empty")
    explicit = args.scan_interval
    return DriverConfig(
        node_name=node,
        cdi_root=Path(args.cdi_root),
        registrar_dir=Path(args.kubelet_registrar_directory_path),
        plugins_dir=Path(args.kubelet_plugins_directory_path),
        instance_uid=args.pod_uid,
        poll_interval=explicit or DEFAULT_POLL_INTERVAL,
        event_rescan_interval=explicit or DEFAULT_EVENT_RESCAN_INTERVAL,
        uevent_dir=Path(args.uevent_dir) if args.uevent_dir else None,
    )
