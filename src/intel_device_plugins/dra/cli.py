"""The command-line contract every DRA driver binary shares.

The flags keep the spelling of Kubernetes' Go DRA drivers (``-node-name``, ``-cdi-root``,
``-kubelet-registrar-directory-path``, ``-kubelet-plugins-directory-path``, ``-kubeconfig``) and of
Intel's DRA drivers (``-healthcheck-port``, ``-kube-api-qps``, ``-kube-api-burst``), and take one or
two dashes, as every binary of this project does; ``-prefix``, ``-scan-interval`` and ``-uevent-dir``
are the device plugins' (simulated nodes, polling). As in Intel's drivers, the environment gives
defaults: ``NODE_NAME``, ``CDI_ROOT``, ``KUBECONFIG``, ``HEALTHCHECK_PORT``, ``KUBE_API_QPS`` and
``KUBE_API_BURST`` (and ``POD_UID``, this project's), and ``SYSFS_ROOT``/``DEVFS_ROOT`` name a fake
root as ``-prefix`` does (:func:`fake_root`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.scanworker import exit_leaving_stuck_threads
from intel_device_plugins.dra.driver import (
    DEFAULT_EVENT_RESCAN_INTERVAL,
    DEFAULT_POLL_INTERVAL,
    DriverConfig,
    DriverFailed,
    serve_drivers,
)
from intel_device_plugins.dra.liveness import DEFAULT_HEALTHCHECK_PORT
from intel_device_plugins.dra.profile import DriverProfile
from intel_device_plugins.dra.registration import UNIX_PATH_MAX, SocketPaths
from intel_device_plugins.flags import GoFlagParser, positive_float, positive_int
from intel_device_plugins.kube.rest import (
    RateLimit,
    RestClient,
    RestConfig,
    in_cluster_config,
    kubeconfig_config,
    tls_context,
)
from intel_device_plugins.logconfig import DEBUG_FROM, add_verbosity_flag, configure_logging

DEFAULT_CDI_ROOT = "/var/run/cdi"
DEFAULT_KUBE_API_QPS = 5.0
DEFAULT_KUBE_API_BURST = 10
"""client-go's defaults, and Intel's drivers' (``--kube-api-qps``, ``--kube-api-burst``)."""
CDI_ROOT_ENV = "CDI_ROOT"
KUBECONFIG_ENV = "KUBECONFIG"
HEALTHCHECK_PORT_ENV = "HEALTHCHECK_PORT"
KUBE_API_QPS_ENV = "KUBE_API_QPS"
KUBE_API_BURST_ENV = "KUBE_API_BURST"
SYSFS_ROOT_ENV = "SYSFS_ROOT"
DEVFS_ROOT_ENV = "DEVFS_ROOT"
DEFAULT_REGISTRAR_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
NODE_NAME_ENV = "NODE_NAME"
POD_UID_ENV = "POD_UID"
COMBINED_FIELD_MANAGER = "intel-dra-drivers"
"""The API field manager of a process serving several drivers (one serving one uses the driver's name)."""

NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A Node's name is a DNS subdomain (at most 253 characters)."""
MAX_NODE_NAME = 253
MAX_PORT = 65535

log = logging.getLogger(__name__)


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
        "cdi-root",
        default=env.get(CDI_ROOT_ENV) or DEFAULT_CDI_ROOT,
        help=f"where the per-claim CDI spec files are written (default: ${CDI_ROOT_ENV}, else"
        f" {DEFAULT_CDI_ROOT})",
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
    parser.add_flag(
        "kubeconfig",
        default=env.get(KUBECONFIG_ENV, ""),
        help=f"kubeconfig file (default: ${KUBECONFIG_ENV}, else the pod's service account)",
    )
    parser.add_flag(
        "kube-api-qps",
        type=positive_float,
        default=env.get(KUBE_API_QPS_ENV) or DEFAULT_KUBE_API_QPS,
        help=f"API server requests per second after the burst (default: ${KUBE_API_QPS_ENV}, else"
        f" {DEFAULT_KUBE_API_QPS:g})",
    )
    parser.add_flag(
        "kube-api-burst",
        type=positive_int,
        default=env.get(KUBE_API_BURST_ENV) or DEFAULT_KUBE_API_BURST,
        help=f"API server requests allowed at once (default: ${KUBE_API_BURST_ENV}, else"
        f" {DEFAULT_KUBE_API_BURST})",
    )
    parser.add_flag(
        "healthcheck-port",
        type=healthcheck_port,
        default=env.get(HEALTHCHECK_PORT_ENV) or DEFAULT_HEALTHCHECK_PORT,
        help=f"TCP port of the grpc.health.v1 liveness service the probes ask; -1 turns it off (default:"
        f" ${HEALTHCHECK_PORT_ENV}, else {DEFAULT_HEALTHCHECK_PORT})",
    )
    parser.add_flag(
        "pod-uid",
        default=env.get(POD_UID_ENV, ""),
        help=f"this instance's pod UID (default: ${POD_UID_ENV}); socket names carry it, so an update"
        " can start the new driver beside the old one",
    )
    parser.add_flag(
        "prefix",
        default="",
        help=f"path prefix for /sys and /dev; kept in reported paths (default: from ${SYSFS_ROOT_ENV} and"
        f" ${DEVFS_ROOT_ENV}, <prefix>/sys and <prefix>/dev)",
    )
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


SHARED_FLAGS = (
    "node-name",
    "cdi-root",
    "kubelet-registrar-directory-path",
    "kubelet-plugins-directory-path",
    "kubeconfig",
    "kube-api-qps",
    "kube-api-burst",
    "healthcheck-port",
    "pod-uid",
    "prefix",
    "scan-interval",
    "uevent-dir",
)
"""The flags of :func:`new_driver_parser` besides ``-v``: one value for all drivers of a process."""


def shared_argv(args: argparse.Namespace) -> list[str]:
    """The shared flags' parsed values as a command line, for a driver's own parser to take again."""
    argv = [f"-v={args.verbosity}"]
    for flag in SHARED_FLAGS:
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            argv.append(f"-{flag}={value}")
    return argv


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
        healthcheck_port=args.healthcheck_port,
    )


def healthcheck_port(text: str) -> int:
    """A TCP port, or any negative number for none."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if port > MAX_PORT:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (at most {MAX_PORT}; -1 for none)")
    return max(port, -1)


def fake_root(prefix: str, environ: Mapping[str, str]) -> str:
    """The ``-prefix`` to use: the flag, else what ``SYSFS_ROOT`` and ``DEVFS_ROOT`` say.

    Intel's drivers read sysfs below ``$SYSFS_ROOT`` and device nodes below ``$DEVFS_ROOT``; here one
    prefix holds both, so the two must be ``<root>/sys`` and ``<root>/dev`` of one ``<root>`` (either
    may be left out, meaning the same), and ``/sys``/``/dev`` mean the real ones. Where Intel's drivers
    silently use the real ``/sys`` when ``$SYSFS_ROOT`` lacks what they look for, this is an error
    (``ValueError`` naming the variable): a simulated node must never see the real hardware.
    """
    given = {
        name: environ[name].rstrip("/") or "/"
        for name in (SYSFS_ROOT_ENV, DEVFS_ROOT_ENV)
        if environ.get(name)
    }
    if not given:
        return prefix
    roots: dict[str, str] = {}
    for name, path in given.items():
        leaf = "sys" if name == SYSFS_ROOT_ENV else "dev"
        if not os.path.isabs(path):
            raise ValueError(f"{name}={path}: not an absolute path")
        parent, base = os.path.split(path)
        if base != leaf:
            raise ValueError(
                f"{name}={path}: this driver reads sysfs and device nodes below one root, as <root>/sys and"
                f" <root>/dev; mount the tree so it ends in /{leaf}, or give -prefix"
            )
        roots[name] = "" if parent == "/" else parent
    if len(set(roots.values())) != 1:
        raise ValueError(
            f"{SYSFS_ROOT_ENV}={given[SYSFS_ROOT_ENV]} and {DEVFS_ROOT_ENV}={given[DEVFS_ROOT_ENV]}"
            " are not <root>/sys and <root>/dev of one root"
        )
    (root,) = set(roots.values())
    if prefix and prefix.rstrip("/") != root:
        raise ValueError(f"-prefix {prefix} and {', '.join(f'{k}={v}' for k, v in given.items())} disagree")
    for leaf in ("sys", "dev"):
        if root and not os.path.isdir(f"{root}/{leaf}"):
            raise ValueError(
                f"{root}/{leaf} (from {', '.join(f'{k}={v}' for k, v in given.items())}) is not a directory;"
                " the real /sys and /dev are not used in its place"
            )
    return root


def check_socket_paths(paths: SocketPaths) -> None:
    """Both sockets must fit a socket address (107 bytes and the terminating NUL), or binding fails."""
    for path, flag in (
        (paths.registrar, "-kubelet-registrar-directory-path"),
        (paths.plugin, "-kubelet-plugins-directory-path"),
    ):
        if len(os.fsencode(path)) >= UNIX_PATH_MAX:
            raise ValueError(f"{flag}: socket {path} is longer than {UNIX_PATH_MAX - 1} bytes")


def load_kube_config(kubeconfig: str) -> RestConfig:
    """``-kubeconfig``'s file, or the pod's service account; ``ValueError`` says which failed."""
    try:
        if kubeconfig:
            return kubeconfig_config(Path(kubeconfig))
        return in_cluster_config()
    except ValueError as error:
        where = f"-kubeconfig {kubeconfig}" if kubeconfig else "no -kubeconfig and no service account"
        raise ValueError(f"{where}: {error}") from error


async def _serve(
    profiles: Sequence[DriverProfile],
    config: DriverConfig,
    kube_config: RestConfig,
    tls: ssl.SSLContext,
    args: argparse.Namespace,
) -> None:
    manager = profiles[0].driver_name if len(profiles) == 1 else COMBINED_FIELD_MANAGER
    limit = RateLimit(args.kube_api_qps, args.kube_api_burst)
    client = RestClient(kube_config, field_manager=manager, context=tls, rate_limit=limit)
    try:
        await serve_drivers(profiles, config, client)
    finally:
        await client.close()


def run_driver_command(
    parser: GoFlagParser,
    build_profile: Callable[[argparse.Namespace], DriverProfile],
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Parse, check and build everything, then run the driver until signalled; the body of every
    DRA driver's ``main``. Anything wrong before the start is reported like a bad flag (exit code 2)."""
    return run_drivers_command(parser, lambda args: (build_profile(args),), argv, environ)


def run_drivers_command(
    parser: GoFlagParser,
    build_profiles: Callable[[argparse.Namespace], Sequence[DriverProfile]],
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """:func:`run_driver_command` for one or more drivers in one process (``intel_dra_drivers``)."""
    args = parser.parse_args(argv)
    configure_logging(args.verbosity)
    try:
        args.prefix = fake_root(args.prefix, os.environ if environ is None else environ)
        config = driver_config(args)
        profiles = build_profiles(args)
        for profile in profiles:
            check_socket_paths(
                SocketPaths.for_instance(
                    config.registrar_dir, config.plugins_dir, profile.driver_name, config.instance_uid
                )
            )
        kube_config = load_kube_config(args.kubeconfig)
        tls = tls_context(kube_config)
    except ValueError as error:
        parser.error(str(error))
    try:
        asyncio.run(_serve(profiles, config, kube_config, tls, args))
    except Exception as error:  # a server that cannot start (a socket in use): one line, not a trace
        names = ", ".join(profile.driver_name for profile in profiles)
        message = str(error) if isinstance(error, DriverFailed) else f"{names} cannot run: {error}"
        log.error("%s", message, exc_info=args.verbosity >= DEBUG_FROM)
        exit_leaving_stuck_threads(1)
        return 1
    exit_leaving_stuck_threads(0)
    return 0
