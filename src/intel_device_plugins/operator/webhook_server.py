"""HTTPS server for the CR webhooks, a health server and /metrics, on aiohttp.

Every replica serves admission, leader or not, so the webhooks stay available during fail-over; that is why
this server is separate from kopf (whose webhook server lives and dies with the operator it runs).
The serving certificate is loaded into one SSLContext and reloaded in place when the files change, which is
how both cert-manager rotations and the self-managed mode reach new TLS handshakes without a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Final

from aiohttp import web

from intel_device_plugins.operator.admission import handle_review, routes
from intel_device_plugins.operator.metrics import Metrics
from intel_device_plugins.operator.metricsauth import Authorizer, bearer_token

TLS_CIPHERS: Final = "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384"
CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"
log = logging.getLogger(__name__)


def parse_bind(address: str, default_host: str = "") -> tuple[str, int]:
    """``":8081"`` / ``"127.0.0.1:8080"`` / ``"0"`` → (host, port); port 0 disables the server.

    An empty host means every address, IPv4 and IPv6 alike.
    """
    host, _, port = address.rpartition(":")
    return (host.strip("[]") or default_host, int(port or 0))


def make_ssl_context() -> ssl.SSLContext:
    """Server context: TLS 1.2 or newer, upstream's 1.2 cipher choice, HTTP/1.1 only."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS_CIPHERS)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


@dataclasses.dataclass
class ServingCert:
    """Keeps an SSLContext loaded with the newest certificate found in ``cert_dir``."""

    cert_dir: Path
    context: ssl.SSLContext = dataclasses.field(default_factory=make_ssl_context)
    _stamp: tuple[float, float] | None = None

    @property
    def loaded(self) -> bool:
        return self._stamp is not None

    def reload_if_changed(self) -> bool:
        """Load the pair if it changed since the last load; False when missing or unchanged."""
        cert, key = self.cert_dir / CERT_FILE, self.cert_dir / KEY_FILE
        try:
            stamp = (cert.stat().st_mtime, key.stat().st_mtime)
        except FileNotFoundError:
            return False
        if stamp == self._stamp:
            return False
        try:
            self.context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:  # half-written during a rotation: try again next time
            log.warning("cannot load serving certificate from %s: %s", self.cert_dir, exc)
            return False
        self._stamp = stamp
        log.info("loaded serving certificate from %s", self.cert_dir)
        return True

    async def watch(self, interval_s: float = 10.0) -> None:
        while True:
            self.reload_if_changed()
            await asyncio.sleep(interval_s)


def webhook_app(metrics: Metrics) -> web.Application:
    """Application with the 16 admission paths; non-JSON bodies get 400, never an exception."""
    app = web.Application(client_max_size=4 * 1024 * 1024)
    table = routes()

    async def review(request: web.Request) -> web.Response:
        kind, operation = table[request.path]
        try:
            body = await request.json(loads=json.loads)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"error": "request body is not JSON"}, status=400)
        metrics.admission_reviews += 1
        return web.json_response(handle_review(kind, operation, body))

    for path in table:
        app.router.add_post(path, review)
    return app


def health_app(ready: Callable[[], bool]) -> web.Application:
    """``/healthz`` answers while the process runs; ``/readyz`` once the webhook server serves."""
    app = web.Application()

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        return (
            web.Response(text="ok") if ready() else web.Response(text="webhook server not ready", status=503)
        )

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def metrics_app(metrics: Metrics, authorizer: Authorizer | None = None) -> web.Application:
    """``/metrics``; with an authorizer, only for bearer tokens allowed to ``get /metrics``."""
    app = web.Application()

    async def serve(request: web.Request) -> web.Response:
        if authorizer is not None:
            token = bearer_token(request.headers.get("Authorization"))
            if not token:
                return web.Response(text="Unauthorized", status=401)
            try:
                allowed = await authorizer(token)
            except Exception as exc:  # the API server may be away; refuse rather than fail open
                log.warning("metrics authorisation failed: %s", exc)
                allowed = False
            if not allowed:
                return web.Response(text="Forbidden", status=403)
        return web.Response(text=metrics.render(), content_type="text/plain")

    app.router.add_get("/metrics", serve)
    return app


async def start(
    app: web.Application, host: str, port: int, context: ssl.SSLContext | None = None
) -> web.AppRunner:
    """Start ``app`` on host:port (with TLS when ``context`` is given); caller cleans the runner up."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host or None, port, ssl_context=context).start()
    return runner
