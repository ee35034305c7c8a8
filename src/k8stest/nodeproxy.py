"""The real node's service proxy, and the control plane's way into the node's network.

The node (kubelet, containerd, every pod) lives in a network namespace the test created; nothing
routes to it from the machine, and the control plane stays on the machine's loopback. Two kinds of
traffic cross, both through this process, which holds sockets in both namespaces:

- **Into Services** (what kube-proxy does on a real node). The node namespace has a ``local`` route
  for the Service CIDR, so every ClusterIP is an address of the node itself. For each Service port
  the proxy listens on ``<clusterIP>:<port>`` there and forwards each connection to a ready endpoint
  from the Service's EndpointSlices. The ``kubernetes`` Service is fixed: it leads to the API
  server on the machine's loopback, which is how the kubelet and in-cluster clients (the operator)
  reach it.
- **From the API server** (webhooks, logs, exec). The API server's egress selector sends its
  "cluster" traffic as HTTP CONNECT over a unix socket, as it would to a konnectivity server. The
  proxy dials the target inside the node namespace: a pod, the kubelet, or a ClusterIP (which the
  first path then serves).

The mapping from Services to endpoints is a pure function (:func:`service_table`); the rest is a
thin asyncio shell. The Service list is polled, not watched: a few hundred milliseconds of delay
matter to no test, and a poll cannot miss an event.

Usage: ``python -m k8stest.nodeproxy <config.json> --host-netns-fd=N``, started by
:mod:`k8stest.nodeinit` inside the node namespace with a descriptor of the machine's namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k8stest import netns
from k8stest.kubeclient import Credentials, KubeClient

JSON = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MAX_CONNECT_HEADER = 16 * 1024
CONNECT_HEADER_TIMEOUT = 10.0
DIAL_TIMEOUT = 10.0
COPY_CHUNK = 64 * 1024


@dataclass(frozen=True, order=True)
class ServicePort:
    ip: str
    port: int


@dataclass(frozen=True, order=True)
class Endpoint:
    ip: str
    port: int
    # The API server's endpoint is on the machine's loopback, not in the node namespace.
    on_host: bool = False


# ----- pure ----------------------------------------------------------------------------------


def service_table(
    services: Sequence[JSON], slices: Sequence[JSON], fixed: Mapping[ServicePort, Endpoint]
) -> dict[ServicePort, tuple[Endpoint, ...]]:
    """Every TCP port of every ClusterIP Service and its ready endpoints (possibly none).

    A Service port matches an EndpointSlice port by name (both empty for a single unnamed port);
    endpoints whose ``ready`` condition is false are left out, an absent condition counts as ready
    (the EndpointSlice API's own rule). ``fixed`` entries replace whatever the API says.
    """
    by_service: dict[tuple[str, str], list[JSON]] = {}
    for s in slices:
        meta = s.get("metadata", {})
        owner = meta.get("labels", {}).get(SERVICE_NAME_LABEL)
        if owner and s.get("addressType") == "IPv4":
            by_service.setdefault((meta.get("namespace", ""), owner), []).append(s)
    table: dict[ServicePort, tuple[Endpoint, ...]] = {}
    for svc in services:
        meta, spec = svc.get("metadata", {}), svc.get("spec", {})
        ip = spec.get("clusterIP") or ""
        if spec.get("type") == "ExternalName" or not _is_ipv4(ip):
            continue
        for port in spec.get("ports") or ():
            if port.get("protocol", "TCP") != "TCP":
                continue
            name = port.get("name") or ""
            endpoints: set[Endpoint] = set()
            for s in by_service.get((meta.get("namespace", ""), meta.get("name", "")), ()):
                numbers = [p.get("port") for p in s.get("ports") or () if (p.get("name") or "") == name]
                for ep in s.get("endpoints") or ():
                    if ep.get("conditions", {}).get("ready") is False:
                        continue
                    for address in ep.get("addresses") or ():
                        endpoints.update(Endpoint(address, n) for n in numbers if isinstance(n, int))
            table[ServicePort(ip, int(port["port"]))] = tuple(sorted(endpoints))
    for key, endpoint in fixed.items():
        table[key] = (endpoint,)
    return table


def _is_ipv4(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv4Address)
    except ValueError:
        return False


def parse_connect(header: bytes) -> tuple[str, int]:
    """(host, port) from an HTTP CONNECT request head; ValueError naming what is wrong."""
    try:
        line = header.split(b"\r\n", 1)[0].decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("request line is not ASCII") from None
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"not a CONNECT request: {line[:80]!r}")
    host, sep, port = parts[1].rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"CONNECT target must be host:port, got {parts[1][:80]!r}")
    host = host.strip("[]")
    if not _is_ipv4(host):
        raise ValueError(f"CONNECT target must be an IPv4 address, got {host[:80]!r}")
    return host, int(port)


# ----- the shell -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyConfig:
    credentials: Credentials  # the kube-proxy ServiceAccount's
    apiserver: Endpoint  # where the ``kubernetes`` Service leads (on the machine)
    kubernetes_service: ServicePort
    egress_socket: Path | None  # None: another node's proxy takes the API server's traffic
    ready_file: Path
    poll_interval: float = 0.5

    @classmethod
    def load(cls, path: Path) -> ProxyConfig:
        doc = json.loads(path.read_text())
        creds = doc["credentials"]
        return cls(
            credentials=Credentials(creds["server"], creds["ca_pem"].encode(), creds["token"], creds["user"]),
            apiserver=Endpoint(doc["apiserver"]["ip"], int(doc["apiserver"]["port"]), on_host=True),
            kubernetes_service=ServicePort(
                doc["kubernetes_service"]["ip"], int(doc["kubernetes_service"]["port"])
            ),
            egress_socket=Path(doc["egress_socket"]) if doc.get("egress_socket") else None,
            ready_file=Path(doc["ready_file"]),
            poll_interval=float(doc.get("poll_interval", 0.5)),
        )


def _log(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(COPY_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        for _, w in (a, b):
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()


class NodeProxy:
    def __init__(self, config: ProxyConfig, host_ns: int) -> None:
        self.config = config
        self.host_ns = host_ns
        self.node_ns = netns.current()
        self.fixed = {config.kubernetes_service: config.apiserver}
        self.table: dict[ServicePort, tuple[Endpoint, ...]] = {k: (v,) for k, v in self.fixed.items()}
        self.listeners: dict[ServicePort, asyncio.Server] = {}
        self.turn = 0

    async def dial(self, endpoint: Endpoint) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        if endpoint.on_host:
            sock = netns.tcp_socket_in(self.host_ns, self.node_ns)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (endpoint.ip, endpoint.port)), DIAL_TIMEOUT)
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)

    async def serve_service(
        self, key: ServicePort, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        endpoints = self.table.get(key, ())
        if not endpoints:
            writer.close()  # no ready endpoint: refuse, as kube-proxy's REJECT does
            return
        self.turn += 1
        endpoint = endpoints[self.turn % len(endpoints)]
        try:
            upstream = await self.dial(endpoint)
        except (OSError, TimeoutError) as e:
            _log(f"{key.ip}:{key.port} -> {endpoint.ip}:{endpoint.port}: {e}")
            writer.close()
            return
        await _splice((reader, writer), upstream)

    async def serve_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CONNECT_HEADER_TIMEOUT)
            host, port = parse_connect(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError) as e:
            _log(f"egress: bad request: {e}")
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        try:
            upstream = await self.dial(Endpoint(host, port))
        except (OSError, TimeoutError) as e:
            _log(f"egress: {host}:{port}: {e}")
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _splice((reader, writer), upstream)

    async def apply(self, table: dict[ServicePort, tuple[Endpoint, ...]]) -> None:
        """Listen on every Service port of ``table`` and on no other."""
        self.table = table
        for key in sorted(set(self.listeners) - set(table)):
            self.listeners.pop(key).close()
            _log(f"closed {key.ip}:{key.port}")
        for key in sorted(set(table) - set(self.listeners)):
            try:
                self.listeners[key] = await asyncio.start_server(
                    functools.partial(self.serve_service, key), key.ip, key.port, reuse_address=True
                )
            except OSError as e:
                _log(f"cannot listen on {key.ip}:{key.port}: {e}")
                continue
            _log(f"serving {key.ip}:{key.port} -> {[f'{e.ip}:{e.port}' for e in table[key]]}")

    def poll(self, loop: asyncio.AbstractEventLoop, stop: threading.Event) -> None:
        """The API side, on a thread of its own that stays in the machine's namespace."""
        netns.enter(self.host_ns)
        client = KubeClient(self.config.credentials, timeout=10)
        last: dict[ServicePort, tuple[Endpoint, ...]] | None = None
        while not stop.is_set():
            try:
                services = client.get("/api/v1/services")["items"]
                slices = client.get("/apis/discovery.k8s.io/v1/endpointslices")["items"]
                table = service_table(services, slices, self.fixed)
                if table != last:
                    asyncio.run_coroutine_threadsafe(self.apply(table), loop).result(timeout=30)
                    last = table
            except Exception as e:  # keep serving what is known; say why the update failed
                _log(f"service poll: {type(e).__name__}: {e}")
            stop.wait(self.config.poll_interval)
        client.close()

    async def run(self) -> None:
        await self.apply(self.table)
        if self.config.kubernetes_service not in self.listeners:
            raise OSError(f"cannot listen on the kubernetes Service {self.config.kubernetes_service}")
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        poller = threading.Thread(target=self.poll, args=(loop, stop), name="service-poll", daemon=True)
        poller.start()
        try:
            path = self.config.egress_socket
            if path is None:
                self.config.ready_file.touch()
                _log("ready; no egress socket")
                await asyncio.Event().wait()
                return
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            egress = await asyncio.start_unix_server(self.serve_connect, str(path), limit=MAX_CONNECT_HEADER)
            os.chmod(path, 0o600)
            self.config.ready_file.touch()
            _log(f"ready; egress on {path}")
            async with egress:
                await egress.serve_forever()
        finally:
            stop.set()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3 or not argv[2].startswith("--host-netns-fd="):
        print(__doc__, file=sys.stderr)
        return 2
    config = ProxyConfig.load(Path(argv[1]))
    proxy = NodeProxy(config, int(argv[2].split("=", 1)[1]))
    asyncio.run(proxy.run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
