"""A loopback HTTPS server that answers ResourceClaim reads, for tests and benchmarks of a DRA driver's
``NodePrepareResources``: what the driver's REST client sees of a real API server, without one.

It serves ``GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>`` from a mapping (404
with a ``Status`` otherwise), keeps connections alive as the API server does, and counts connections:
how many are open now and the most that were open at once, which is what a client's connection bound
is measured by.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import ssl
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from intel_device_plugins.kube.rest import RestConfig
from intel_device_plugins.kube.x509 import new_ca, new_leaf

CLAIMS_PREFIX = "/apis/resource.k8s.io/v1/namespaces/"

ClaimSource = Callable[[str, str], Mapping[str, Any] | None]
"""``source(namespace, name)``: the claim's document, or ``None`` when there is none (404)."""


@dataclass
class ApiCounters:
    """What the server saw: requests, connections in total, open now and open at most."""

    requests: int = 0
    connections: int = 0
    open: int = 0
    peak_open: int = 0
    paths: list[str] = field(default_factory=list, repr=False)


def _answer(status: int, reason: str, body: Mapping[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def _claim_path(target: str) -> tuple[str, str] | None:
    path = urllib.parse.urlsplit(target).path
    if not path.startswith(CLAIMS_PREFIX):
        return None
    parts = path[len(CLAIMS_PREFIX) :].split("/")
    if len(parts) != 3 or parts[1] != "resourceclaims":
        return None
    return urllib.parse.unquote(parts[0]), urllib.parse.unquote(parts[2])


class FakeClaimsApi:
    """The server; ``config`` is what a :class:`RestClient` needs to reach and trust it."""

    def __init__(self, source: ClaimSource, *, delay_s: float = 0.0) -> None:
        self.source = source
        self.delay_s = delay_s
        """Added to every answer: a real API server is a network hop and a lookup away."""
        self.counters = ApiCounters()
        self.config: RestConfig | None = None
        self._server: asyncio.Server | None = None

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counters = self.counters
        counters.connections += 1
        counters.open += 1
        counters.peak_open = max(counters.peak_open, counters.open)
        try:
            while line := await reader.readline():
                method, target, _ = line.decode("latin-1").split(" ", 2)
                length = 0
                while (header := (await reader.readline()).decode("latin-1").rstrip("\r\n")) != "":
                    name, _, value = header.partition(":")
                    if name.lower() == "content-length":
                        length = int(value.strip())
                await reader.readexactly(length)
                counters.requests += 1
                counters.paths.append(target)
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(self._respond(method, target))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, ValueError):
            pass
        finally:
            counters.open -= 1
            writer.close()

    def _respond(self, method: str, target: str) -> bytes:
        where = _claim_path(target)
        found = self.source(*where) if method == "GET" and where is not None else None
        if found is None:
            status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": f"{target} not found"}
            return _answer(404, "Not Found", status)
        return _answer(200, "OK", found)

    async def start(self) -> RestConfig:
        """Listen on a free loopback port with a fresh CA and server certificate."""
        now = dt.datetime.now(dt.UTC)
        ca, ca_key = new_ca(now, "fake-apiserver-ca", dt.timedelta(days=1))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-apiserver")])
        cert, key = new_leaf(
            ca, ca_key, subject, ExtendedKeyUsageOID.SERVER_AUTH, now, dt.timedelta(days=1),
            ip_addresses=["127.0.0.1"],
        )  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as directory:  # ssl loads a chain from files only
            (Path(directory) / "c.pem").write_bytes(cert)
            (Path(directory) / "k.pem").write_bytes(key)
            context.load_cert_chain(Path(directory) / "c.pem", Path(directory) / "k.pem")
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", 0, ssl=context, backlog=1024)
        port = self._server.sockets[0].getsockname()[1]
        self.config = RestConfig(host="127.0.0.1", port=port, ca_pem=ca.decode(), token="fake-token")
        return self.config

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)


@contextlib.asynccontextmanager
async def fake_claims_api(source: ClaimSource, *, delay_s: float = 0.0) -> AsyncIterator[FakeClaimsApi]:
    """A started :class:`FakeClaimsApi`, stopped on exit."""
    api = FakeClaimsApi(source, delay_s=delay_s)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()
