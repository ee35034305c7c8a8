"""The serving lifecycle every control-plane process shares: webhook flags, certificates, signals.

The operator and the standalone pod webhooks serve the same HTTPS server with the same certificate modes
(files written by cert-manager, or self-managed: issued, rotated and injected by the process itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiohttp import web
from lightkube import AsyncClient

from intel_device_plugins.kube.https import (
    ReviewHandler,
    RunningServer,
    ServingCert,
    health_app,
    metrics_app,
    parse_bind,
    start,
    webhook_app,
)
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.metricsauth import Authorizer

if TYPE_CHECKING:
    from intel_device_plugins.kube.selfcerts import SelfManagedCerts

DEFAULT_CERT_DIR: Final = "/tmp/k8s-webhook-server/serving-certs"
log = logging.getLogger(__name__)


def add_webhook_flags(p: argparse.ArgumentParser) -> None:
    """The webhook server's port and certificate flags (upstream's names and defaults)."""
    p.add_argument("--webhook-port", type=int, default=9443, help="webhook HTTPS port")
    p.add_argument("--webhook-cert-dir", default=DEFAULT_CERT_DIR, help="directory of tls.crt and tls.key")
    p.add_argument(
        "--webhook-cert-mode",
        choices=("files", "self-managed"),
        default="files",
        help="files: read tls.crt/tls.key (cert-manager); self-managed: issue, rotate and inject",
    )
    p.add_argument("--webhook-service", default="webhook-service", help="Service name (self-managed mode)")
    p.add_argument("--webhook-secret", default="webhook-server-cert", help="Secret name (self-managed mode)")
    p.add_argument(
        "--webhook-configuration",
        action="append",
        default=[],
        help="webhook configuration to inject the CA into (self-managed mode, repeatable)",
    )


def self_managed_certs(client: AsyncClient, opts: argparse.Namespace, namespace: str) -> SelfManagedCerts:
    """The self-managed certificate keeper for the flags of ``add_webhook_flags``."""
    # imported here: the default cert-manager install never needs the certificate code
    from intel_device_plugins.kube.certdata import service_dns_names
    from intel_device_plugins.kube.selfcerts import SelfManagedCerts, SelfManagedConfig

    return SelfManagedCerts(
        client,
        SelfManagedConfig(
            namespace,
            opts.webhook_secret,
            service_dns_names(opts.webhook_service, namespace),
            tuple(opts.webhook_configuration),
            Path(opts.webhook_cert_dir),
        ),
    )


async def wait_loaded(serving: ServingCert) -> None:
    """Return once the serving certificate is there (cert-manager or the self-managed keeper writes it)."""
    while not serving.loaded:
        serving.reload_if_changed()
        if not serving.loaded:
            await asyncio.sleep(0.5)


def install_signal_handlers(task: asyncio.Task[int]) -> None:
    """SIGTERM/SIGINT cancel ``task``; cancelling the main task unwinds everything and releases the Lease."""
    loop = task.get_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, task.cancel)


@dataclasses.dataclass(frozen=True)
class Serving:
    """What ``serve_admission`` started: ``started`` is set once the webhook server listens, and
    ``webhooks`` ends with the error when it cannot listen."""

    started: asyncio.Event
    webhooks: asyncio.Task[None]


@contextlib.asynccontextmanager
async def serve_admission(
    opts: argparse.Namespace,
    client: AsyncClient | None,
    namespace: str,
    metrics: Metrics,
    routes: Mapping[str, ReviewHandler],
    *,
    metrics_authorizer: Authorizer | None = None,
    ready: Callable[[], bool] = lambda: True,
) -> AsyncIterator[Serving]:
    """Health, metrics and the admission webhooks on the ports of the flags, until the block ends.

    The webhook (and secure metrics) server starts once its certificate is there: written by cert-manager,
    or issued here in the self-managed mode (which needs ``client``). ``/readyz`` answers once the webhook
    server listens and ``ready()`` holds; a server that cannot listen is logged, never silent.
    """
    serving = ServingCert(Path(opts.webhook_cert_dir))
    background: list[asyncio.Task[None]] = []
    runners: list[RunningServer] = []
    started = asyncio.Event()

    async def serve(app: web.Application, host: str, port: int, tls: bool, what: str) -> None:
        try:
            if tls:
                await wait_loaded(serving)
            runners.append(await start(app, host, port, serving.context if tls else None))
            log.info("%s listening on %s:%d", what, host or "*", port)
        except OSError as exc:
            log.error("%s cannot listen on %s:%d: %s", what, host or "*", port, exc)
            raise

    async def serve_webhooks() -> None:
        await serve(webhook_app(metrics, routes), "", opts.webhook_port, True, "webhook server")
        started.set()

    try:
        if opts.webhook_cert_mode == "self-managed":
            if client is None:
                raise ValueError("--webhook-cert-mode self-managed needs an API client")
            background.append(asyncio.create_task(self_managed_certs(client, opts, namespace).run()))
        background.append(asyncio.create_task(serving.watch()))
        host, port = parse_bind(opts.health_probe_bind_address)
        if port:
            runners.append(await start(health_app(lambda: started.is_set() and ready()), host, port))
        host, port = parse_bind(opts.metrics_bind_address)
        if port:
            secure = metrics_authorizer is not None
            app = metrics_app(metrics, metrics_authorizer)
            background.append(asyncio.create_task(serve(app, host, port, secure, "metrics server")))
        webhooks = asyncio.create_task(serve_webhooks())
        background.append(webhooks)
        yield Serving(started, webhooks)
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        for runner in runners:
            await runner.cleanup()
