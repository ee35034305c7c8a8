"""The serving lifecycle every control-plane process shares: webhook flags, certificates, signals.

The operator and the standalone pod webhooks serve the same HTTPS server with the same certificate modes
(files written by cert-manager, or self-managed: issued, rotated and injected by the process itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Final

from lightkube import AsyncClient

from intel_device_plugins.kube.https import ServingCert

if TYPE_CHECKING:
    from intel_device_plugins.kube.selfcerts import SelfManagedCerts

DEFAULT_CERT_DIR: Final = "/tmp/k8s-webhook-server/serving-certs"


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
