"""``intel_deviceplugin_operator``: command line, wiring and lifecycle of the operator process.

Flags keep upstream's names and defaults and accept one or two leading dashes. The process serves the
webhooks and health endpoints at once; the controllers run directly, or only while this replica holds the
Lease with ``--leader-elect``. A replica that loses the Lease exits non-zero so Kubernetes restarts it clean.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from lightkube import AsyncClient

from intel_device_plugins.flags import GoFlagParser, parse_bool
from intel_device_plugins.kube.https import ReviewHandler
from intel_device_plugins.kube.leader import ElectionConfig, LeaderElector
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.metricsauth import CachedAuthorizer, api_authorizer
from intel_device_plugins.kube.serving import add_webhook_flags, install_signal_handlers, serve_admission
from intel_device_plugins.logconfig import add_verbosity_flag, configure_logging
from intel_device_plugins.operator import images
from intel_device_plugins.operator.admission import review_handlers
from intel_device_plugins.operator.controller import FIELD_MANAGER, ControllerConfig, run_controllers
from intel_device_plugins.operator.kinds import DeviceKind

# ServiceAccount for FPGA plugin pods, set by the install (whose name prefix may change it); unset keeps
# the namespace's default ServiceAccount, which usually cannot read the node's mode annotation.
FPGA_SERVICE_ACCOUNT_ENV: Final = "FPGA_PLUGIN_SERVICE_ACCOUNT"
# ServiceAccount for every kind's DRA driver pods (spec.deployAs DRADriver), set by the install like the FPGA
# one; the drivers' RBAC and the ResourceSlice admission policy name it. The name it had when only GPUs had a
# driver is still read, so a manager Deployment written then keeps working.
DRA_SERVICE_ACCOUNT_ENV: Final = "DRA_DRIVER_SERVICE_ACCOUNT"
OLD_DRA_SERVICE_ACCOUNT_ENV: Final = "GPU_DRA_DRIVER_SERVICE_ACCOUNT"
log = logging.getLogger("intel_deviceplugin_operator")


class UsageError(Exception):
    pass


def parser() -> argparse.ArgumentParser:
    p = GoFlagParser(
        prog="intel_deviceplugin_operator", description="Installs and manages Intel device plugins from CRs."
    )
    p.add_argument("--metrics-bind-address", default=":8080", help="metrics address; 0 disables")
    p.add_argument("--health-probe-bind-address", default=":8081", help="/healthz and /readyz address")
    p.add_argument(
        "--deviceplugin-namespace",
        default="kube-system",
        help="namespace of the plugin DaemonSets (env DEVICEPLUGIN_NAMESPACE wins)",
    )
    for flag, text in (
        ("--leader-elect", "reconcile only while holding the Lease"),
        ("--metrics-secure", "serve metrics over HTTPS to authorised tokens only"),
        ("--enable-http2", "accepted for compatibility; HTTP/1.1 is used"),
        (
            "--combined-plugin-process",
            "run every enabled device kind in one intel_device_plugins process per node, from one DaemonSet"
            " (env DEVICEPLUGIN_COMBINED=true)",
        ),
    ):
        p.add_argument(flag, nargs="?", const=True, default=False, type=parse_bool, help=text)
    p.add_argument(
        "--devices",
        action="append",
        default=None,
        metavar="DEVICE",
        help="enable this device's controller (repeatable): " + " ".join(k.value for k in DeviceKind),
    )
    p.add_argument(
        "--deviceplugin-image",
        default="",
        help=f"plugin image for CRs asking for this project's or upstream's default "
        f"(env {images.PLUGIN_IMAGE_ENV}; default {images.node_image()})",
    )
    add_webhook_flags(p)
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="concurrent reconciles; 0 (default): one per enabled device kind, as upstream's controllers",
    )
    add_verbosity_flag(p)
    return p


def select_devices(values: Sequence[str] | None) -> tuple[DeviceKind, ...]:
    """Enabled kinds from ``--devices``; unknown or repeated names are usage errors (upstream's messages)."""
    if not values:
        return tuple(DeviceKind)
    chosen: list[DeviceKind] = []
    for raw in values:
        for v in raw.split(","):
            try:
                kind = DeviceKind(v)
            except ValueError:
                raise UsageError(f"Unsupported device: {v}") from None
            if kind in chosen:
                raise UsageError(f"Duplicate device: {v}")
            chosen.append(kind)
    return tuple(chosen)


def image_env(env: Mapping[str, str], plugin_image: str = "") -> dict[str, str]:
    """The ``*_SHA`` image overrides and the plugin image (flag, else environment) for upgrade.py."""
    out = {k: v for k, v in env.items() if k.endswith("_SHA") and v}
    chosen = plugin_image or env.get(images.PLUGIN_IMAGE_ENV, "")
    if chosen:
        out[images.PLUGIN_IMAGE_ENV] = chosen
    return out


def dra_service_account(env: Mapping[str, str]) -> str:
    """The DRA drivers' ServiceAccount from the manager's environment, under its current or its old name."""
    return env.get(DRA_SERVICE_ACCOUNT_ENV) or env.get(OLD_DRA_SERVICE_ACCOUNT_ENV, "")


def combined_mode(flag: bool, env: Mapping[str, str]) -> bool:
    """One plugin process per node: the flag, or env ``DEVICEPLUGIN_COMBINED`` (a Go boolean) when set."""
    raw = env.get("DEVICEPLUGIN_COMBINED", "")
    if not raw:
        return flag
    try:
        return parse_bool(raw)
    except argparse.ArgumentTypeError:
        raise UsageError(f"DEVICEPLUGIN_COMBINED: {raw!r} is not a boolean") from None


def identity(env: Mapping[str, str]) -> str:
    return env.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


#: Starts the pod webhooks for the enabled kinds ("fpga", "sgx"): their routes and background tasks.
PodWebhooks = Callable[
    [AsyncClient, frozenset[str]], tuple[Mapping[str, ReviewHandler], Sequence[asyncio.Task[None]]]
]


def no_pod_webhooks(
    client: AsyncClient, kinds: frozenset[str]
) -> tuple[dict[str, ReviewHandler], list[asyncio.Task[None]]]:
    return {}, []


async def amain(
    opts: argparse.Namespace, env: Mapping[str, str], pod_webhooks: PodWebhooks = no_pod_webhooks
) -> int:
    namespace = env.get("DEVICEPLUGIN_NAMESPACE") or opts.deviceplugin_namespace
    kinds = select_devices(opts.devices)
    metrics = Metrics()
    client = AsyncClient(field_manager=FIELD_MANAGER)
    pod_tasks: Sequence[asyncio.Task[None]] = ()
    try:
        # Every replica serves admission, so every replica follows the FPGA mappings (not only the leader).
        # Readiness does not wait for the mappings: the CR webhooks must not depend on them.
        pod_routes, pod_tasks = pod_webhooks(client, frozenset(k.value for k in kinds))
        authorizer = CachedAuthorizer(api_authorizer(client)) if opts.metrics_secure else None
        routes = {**review_handlers(), **pod_routes}
        async with serve_admission(opts, client, namespace, metrics, routes, metrics_authorizer=authorizer):
            config = ControllerConfig(
                namespace,
                kinds,
                image_env(env, opts.deviceplugin_image),
                env.get("DEVICEPLUGIN_SECRET", ""),
                workers=opts.workers,
                fpga_service_account=env.get(FPGA_SERVICE_ACCOUNT_ENV, ""),
                dra_service_account=dra_service_account(env),
                combined=combined_mode(opts.combined_plugin_process, env),
                identity=identity(env),
            )
            log.info("controllers for %s in namespace %s", ", ".join(k.value for k in kinds), namespace)
            if not opts.leader_elect:
                metrics.leader = 1
                await run_controllers(config, metrics)
                return 0
            elector = LeaderElector(client, ElectionConfig(namespace, config.identity))

            async def lead() -> None:
                metrics.leader = 1
                await run_controllers(config, metrics)

            await elector.run(lead)
            metrics.leader = 0
            return 1 if elector.lost else 0
    finally:
        for task in pod_tasks:
            task.cancel()
        await asyncio.gather(*pod_tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await client.close()


def main(argv: Sequence[str] | None = None, pod_webhooks: PodWebhooks = no_pod_webhooks) -> int:
    """The operator; the console script passes the pod webhooks in (``cmd/operator.py``)."""
    p = parser()
    opts = p.parse_args(argv)
    configure_logging(opts.verbosity)
    try:
        select_devices(opts.devices)
        combined_mode(opts.combined_plugin_process, os.environ)
    except UsageError as exc:
        log.error("%s", exc)
        return 1
    plugin_image = image_env(os.environ, opts.deviceplugin_image).get(images.PLUGIN_IMAGE_ENV, "")
    if problem := images.plugin_image_problem(plugin_image):
        log.error("--deviceplugin-image/%s: %s", images.PLUGIN_IMAGE_ENV, problem)
        return 1

    async def runner() -> int:
        task = asyncio.current_task()
        assert task is not None
        install_signal_handlers(task)
        try:
            return await amain(opts, dict(os.environ), pod_webhooks)
        except asyncio.CancelledError:
            return 0

    return asyncio.run(runner())


if __name__ == "__main__":
    sys.exit(main())
