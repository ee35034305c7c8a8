"""``grpc.health.v1.Health`` on a TCP port: what the DaemonSet's liveness and startup probes ask.

Intel's DRA drivers answer this on ``--healthcheck-port`` (51516), so their probes (the kubelet's own
``grpc`` probe) carry over. A check is "serving" when every driver of the process answers on both of
its sockets, exactly as the kubelet reaches them: ``GetInfo`` on the registration socket and an empty
``NodePrepareResources`` on the DRA socket. A driver whose servers died, whose socket files were
removed, or whose event loop is stuck fails the check (the last by not answering in time), and the
kubelet restarts the pod. The service names are ``""`` and ``liveness``; any other is
``SERVICE_UNKNOWN``. ``Watch`` sends the status at once and again whenever it changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Final

from intel_device_plugins.dra.registration import SocketPaths
from intel_device_plugins.kubeletapi import dra_v1, pluginregistration_v1
from intel_device_plugins.kubeletapi.grpc_health_v1 import Health, HealthCheckRequest, HealthCheckResponse
from intel_device_plugins.kubeletapi.grpc_health_v1 import HealthCheckResponse_ServingStatus as ServingStatus
from intel_device_plugins.kubeletapi.rpc import Handlers, TcpServer, call_unary, server_stream, unary
from intel_device_plugins.kubeletapi.wire import Method

log = logging.getLogger(__name__)

DEFAULT_HEALTHCHECK_PORT: Final = 51516
"""Intel's DRA drivers' port (``--healthcheck-port``); -1 turns the server off."""
LIVENESS_SERVICES: Final = ("", "liveness")
PROBE_TIMEOUT: Final = 5.0
"""Seconds one socket may take to answer; under the kubelet's probe timeout so the answer is ours."""
WATCH_INTERVAL: Final = 10.0
"""Seconds between checks while a ``Watch`` is open."""


async def answers(socket: Path, method: Method[Any, Any], timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the gRPC server on unix ``socket`` completes ``method`` (an empty request) in time."""
    try:
        async with asyncio.timeout(timeout):
            await call_unary(socket, method, method.request(), timeout)
        return True
    except asyncio.CancelledError:
        raise
    except Exception as error:  # every failure means the same to a probe: not serving
        log.info("liveness: %s does not answer %s: %s", socket, method.path, error or type(error).__name__)
        return False


class Liveness:
    """The health service for the drivers whose sockets are ``sockets``."""

    def __init__(self, sockets: Sequence[SocketPaths], *, watch_interval: float = WATCH_INTERVAL) -> None:
        self.sockets = tuple(sockets)
        self._watch_interval = watch_interval

    async def status(self, service: str) -> ServingStatus:
        if service not in LIVENESS_SERVICES:
            return ServingStatus.SERVICE_UNKNOWN
        checks = [
            check
            for paths in self.sockets
            for check in (
                answers(paths.registrar, pluginregistration_v1.Registration.GetInfo),
                answers(paths.plugin, dra_v1.DRAPlugin.NodePrepareResources),
            )
        ]
        results = await asyncio.gather(*checks)
        return ServingStatus.SERVING if all(results) else ServingStatus.NOT_SERVING

    async def check(self, request: HealthCheckRequest) -> HealthCheckResponse:
        return HealthCheckResponse(status=await self.status(request.service))

    async def watch(self, request: HealthCheckRequest) -> AsyncIterator[HealthCheckResponse]:
        last: ServingStatus | None = None
        while True:
            current = await self.status(request.service)
            if current != last:
                last = current
                yield HealthCheckResponse(status=current)
            await asyncio.sleep(self._watch_interval)

    def handlers(self) -> Handlers:
        return dict([unary(Health.Check, self.check), server_stream(Health.Watch, self.watch)])


class LivenessServer:
    """:class:`Liveness` on ``port`` of every address; nothing at all for a negative port."""

    def __init__(self, port: int, sockets: Sequence[SocketPaths], host: str | None = None) -> None:
        self.port = port
        self.liveness = Liveness(sockets)
        self._server = TcpServer(port, self.liveness.handlers(), host) if port >= 0 else None

    async def start(self) -> None:
        if self._server is None:
            log.info("liveness server disabled (-healthcheck-port=%d)", self.port)
            return
        try:
            await self._server.start()
        except OSError as error:
            raise OSError(error.errno, f"-healthcheck-port {self.port}: {error.strerror}") from error
        log.info("liveness: grpc.health.v1 on port %d", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.stop(1.0)
