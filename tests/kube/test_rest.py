"""The REST client against a scripted HTTPS server: HTTP framing, limits, errors, watch, TLS, config."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from intel_device_plugins.kube import rest
from intel_device_plugins.kube.rest import (
    NODES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiError,
    ConfigError,
    ProtocolError,
    RateLimit,
    RestClient,
    RestConfig,
    follow,
    in_cluster_config,
    kubeconfig_config,
    tls_context,
)
from intel_device_plugins.kube.x509 import new_ca, new_leaf

NOW = dt.datetime.now(dt.UTC)
DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class Pki:
    ca: bytes
    cert: bytes
    key: bytes


def make_pki(ip: str = "127.0.0.1") -> Pki:
    ca, ca_key = new_ca(NOW, "test-ca", DAY)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apiserver")])
    cert, key = new_leaf(ca, ca_key, subject, ExtendedKeyUsageOID.SERVER_AUTH, NOW, DAY, ip_addresses=[ip])
    return Pki(ca, cert, key)


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]
"""Writes the answer; returns whether to keep the connection open for another request."""


@dataclass
class Server:
    port: int
    requests: list[Request] = field(default_factory=list)
    connections: int = 0


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    method, target, _ = line.decode().split(" ", 2)
    headers: dict[str, str] = {}
    while (header := (await reader.readline()).decode().rstrip("\r\n")) != "":
        name, _, value = header.partition(":")
        headers[name.lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, target, headers, body)


@pytest.fixture
async def serve(pki: Pki, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler, *, tls: bool = True, cert: Pki | None = None) -> Server:
        context = None
        if tls:
            material = cert or pki
            (tmp_path / "c.pem").write_bytes(material.cert)
            (tmp_path / "k.pem").write_bytes(material.key)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
        state = Server(0)

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            state.connections += 1
            try:
                while (request := await read_request(reader)) is not None:
                    state.requests.append(request)
                    if not await handler(request, writer):
                        break
            except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, ValueError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(connected, "127.0.0.1", 0, ssl=context)
        servers.append(server)
        state.port = server.sockets[0].getsockname()[1]
        return state

    yield start
    for server in servers:
        server.close()


def client_for(server: Server, pki: Pki, **kwargs: Any) -> RestClient:
    config = RestConfig(host="127.0.0.1", port=server.port, ca_pem=pki.ca.decode(), token="secret")
    return RestClient(config, **kwargs)


def answer(status: int, body: Any, *, headers: str = "") -> Handler:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def handle(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"{headers}\r\n".encode()
            + data
        )
        await writer.drain()
        return True

    return handle


def raw(response: bytes) -> Handler:
    async def handle(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(response)
        await writer.drain()
        return False

    return handle


def chunked(*pieces: bytes) -> bytes:
    return b"".join(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for piece in pieces) + b"0\r\n\r\n"


# ----- calls -------------------------------------------------------------------------------------------


async def test_a_get_sends_the_token_and_reuses_the_connection(serve: Any, pki: Pki) -> None:
    server = await serve(answer(200, {"metadata": {"name": "n1", "uid": "u"}}))
    client = client_for(server, pki)
    try:
        assert (await client.get(NODES, "n1"))["metadata"]["uid"] == "u"
        assert (await client.get(NODES, "n1"))["metadata"]["name"] == "n1"
    finally:
        await client.close()
    first = server.requests[0]
    assert (first.method, first.target) == ("GET", "/api/v1/nodes/n1")
    assert first.headers["authorization"] == "Bearer secret"
    assert first.headers["host"] == f"127.0.0.1:{server.port}"
    assert server.connections == 1


async def test_concurrent_calls_share_a_bounded_number_of_connections(serve: Any, pki: Pki) -> None:
    """Two hundred calls at once open at most a few connections and reuse them: a connection each
    would hold two hundred TLS sessions and their buffers."""

    async def handle(request: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.001)
        return await answer(200, {"metadata": {"name": request.target.rsplit("/", 1)[1]}})(request, writer)

    server = await serve(handle)
    client = client_for(server, pki)
    try:
        names = [f"n{index}" for index in range(200)]
        got = await asyncio.gather(*(client.get(NODES, name) for name in names))
    finally:
        await client.close()
    assert [obj["metadata"]["name"] for obj in got] == names
    assert server.connections <= rest.MAX_CONNECTIONS
    assert len(server.requests) == 200


async def test_writes_carry_the_body_the_field_manager_and_namespaced_paths(serve: Any, pki: Pki) -> None:
    server = await serve(answer(201, {"metadata": {"name": "s"}}))
    client = client_for(server, pki, field_manager="gpu.intel.com")
    try:
        await client.create(RESOURCE_SLICES, {"metadata": {"name": "s"}})
        await client.replace(RESOURCE_SLICES, {"metadata": {"name": "s", "resourceVersion": "3"}})
        await client.get(RESOURCE_CLAIMS, "c", namespace="ns")
        await client.delete(RESOURCE_SLICES, "s")
    finally:
        await client.close()
    calls = [(r.method, r.target) for r in server.requests]
    assert calls == [
        ("POST", "/apis/resource.k8s.io/v1/resourceslices?fieldManager=gpu.intel.com"),
        ("PUT", "/apis/resource.k8s.io/v1/resourceslices/s?fieldManager=gpu.intel.com"),
        ("GET", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"),
        ("DELETE", "/apis/resource.k8s.io/v1/resourceslices/s"),
    ]
    assert json.loads(server.requests[1].body)["metadata"]["resourceVersion"] == "3"
    assert server.requests[0].headers["content-type"] == "application/json"


def test_names_cannot_leave_their_path_segment() -> None:
    assert RESOURCE_CLAIMS.path("ns", "a/b") == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a%2Fb"
    for bad in ("..", ".", ""):
        with pytest.raises(ValueError, match="not an object name"):
            NODES.path(None, bad)
    with pytest.raises(ValueError, match="namespace"):
        RESOURCE_CLAIMS.path(None, "c")


async def test_a_list_takes_selectors_and_answers_items_and_version(serve: Any, pki: Pki) -> None:
    listing = {"metadata": {"resourceVersion": "42"}, "items": [{"metadata": {"name": "a"}}]}
    server = await serve(answer(200, listing))
    client = client_for(server, pki)
    try:
        listed = await client.list(RESOURCE_SLICES, fields={"spec.driver": "d", "spec.nodeName": "n"})
    finally:
        await client.close()
    assert listed.resource_version == "42" and [o["metadata"]["name"] for o in listed.items] == ["a"]
    assert server.requests[0].target == (
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dd%2Cspec.nodeName%3Dn"
    )


async def test_a_chunked_body_is_put_together(serve: Any, pki: Pki) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = await serve(raw(head + chunked(b'{"metadata":', b' {"name": "x"}}')))
    client = client_for(server, pki)
    try:
        assert await client.get(NODES, "x") == {"metadata": {"name": "x"}}
    finally:
        await client.close()


async def test_the_apis_status_becomes_an_api_error_with_code_reason_and_message(
    serve: Any, pki: Pki
) -> None:
    status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"}
    server = await serve(answer(409, status))
    client = client_for(server, pki)
    try:
        with pytest.raises(ApiError) as caught:
            await client.replace(RESOURCE_SLICES, {"metadata": {"name": "s"}})
    finally:
        await client.close()
    assert (caught.value.code, caught.value.reason) == (409, "Conflict")
    assert "modified" in str(caught.value) and rest.is_status(caught.value, 404, 409)


async def test_an_error_without_a_status_body_keeps_the_http_code(serve: Any, pki: Pki) -> None:
    server = await serve(answer(503, b"upstream unavailable"))
    client = client_for(server, pki)
    try:
        with pytest.raises(ApiError) as caught:
            await client.get(NODES, "n")
    finally:
        await client.close()
    assert rest.status_code(caught.value) == 503 and "upstream unavailable" in str(caught.value)
    assert rest.status_code(OSError("network")) is None


@pytest.mark.parametrize(
    ("response", "words"),
    [
        (b"SPDY/3 200 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "content-length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "transfer-encoding"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX", "CRLF"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnope!", "not JSON"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", "not a JSON object"),
    ],
)
async def test_malformed_answers_are_refused(serve: Any, pki: Pki, response: bytes, words: str) -> None:
    server = await serve(raw(response))
    client = client_for(server, pki)
    try:
        with pytest.raises(ProtocolError, match=words):
            await client.get(NODES, "n")
    finally:
        await client.close()


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b" " * 5000,
        b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
    ],
    ids=["content-length", "chunk", "until-close", "many-headers", "long-header"],
)
async def test_oversized_answers_are_refused_before_they_are_read(
    serve: Any, pki: Pki, response: bytes
) -> None:
    server = await serve(raw(response))
    client = client_for(server, pki, max_body_bytes=4096)
    try:
        with pytest.raises(ProtocolError, match=r"more than|beyond|longer than"):
            await client.get(NODES, "n")
    finally:
        await client.close()


async def test_a_kept_alive_connection_the_server_dropped_is_replaced_once(serve: Any, pki: Pki) -> None:
    body = json.dumps({"metadata": {"name": "n"}}).encode()

    async def answer_then_hang_up(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        return False  # closes without saying so, as an idle timeout does

    server = await serve(answer_then_hang_up)
    client = client_for(server, pki)
    try:
        await client.get(NODES, "n")
        await asyncio.sleep(0.1)
        assert (await client.get(NODES, "n"))["metadata"]["name"] == "n"
    finally:
        await client.close()
    assert server.connections == 2


async def test_the_token_file_is_read_again_after_a_while(
    serve: Any, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await serve(answer(200, {"metadata": {}}))
    token = tmp_path / "token"
    token.write_text("one\n")
    config = RestConfig(host="127.0.0.1", port=server.port, ca_pem=pki.ca.decode(), token_file=token)
    monkeypatch.setattr(rest, "TOKEN_REREAD_S", 0.5)
    client = RestClient(config)
    try:
        await client.get(NODES, "n")
        token.write_text("two\n")
        await client.get(NODES, "n")
        await asyncio.sleep(0.6)
        await client.get(NODES, "n")
    finally:
        await client.close()
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer one", "Bearer one", "Bearer two"]


# ----- TLS ---------------------------------------------------------------------------------------------


async def test_a_plaintext_server_is_refused(serve: Any, pki: Pki) -> None:
    server = await serve(answer(200, {"metadata": {}}), tls=False)
    client = client_for(server, pki, timeout_s=5)
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await client.get(NODES, "n")
    finally:
        await client.close()
    assert server.requests == []  # nothing was sent in the clear


async def test_a_server_certificate_from_another_ca_is_refused(serve: Any, pki: Pki) -> None:
    server = await serve(answer(200, {"metadata": {}}), cert=make_pki())
    client = client_for(server, pki, timeout_s=5)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            await client.get(NODES, "n")
    finally:
        await client.close()
    assert server.requests == []


async def test_a_certificate_for_another_name_is_refused(serve: Any, pki: Pki) -> None:
    server = await serve(answer(200, {"metadata": {}}))
    config = RestConfig(
        host="127.0.0.1", port=server.port, ca_pem=pki.ca.decode(), server_name="kubernetes.default.svc"
    )
    client = RestClient(config, timeout_s=5)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            await client.get(NODES, "n")
    finally:
        await client.close()


def test_the_context_verifies_against_the_cluster_ca_alone_with_tls_1_2_or_newer(pki: Pki) -> None:
    context = tls_context(RestConfig(host="h", port=1, ca_pem=pki.ca.decode()))
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert len(context.get_ca_certs()) == 1  # no system bundle
    with pytest.raises(ConfigError, match="CA"):
        tls_context(RestConfig(host="h", port=1, ca_pem="not a certificate"))


# ----- watch -------------------------------------------------------------------------------------------


def watch_stream(*events: dict[str, Any], end: bool = True) -> bytes:
    lines = [json.dumps(event).encode() + b"\n" for event in events]
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    # An event split over two chunks must come out whole.
    pieces = [piece for line in lines for piece in (line[:7], line[7:])]
    body = chunked(*pieces)
    return head + (body if end else body[: -len(b"0\r\n\r\n")])


async def test_a_watch_yields_events_and_bookmarks_and_raises_on_an_error_event(serve: Any, pki: Pki) -> None:
    gone = {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
    }
    server = await serve(
        raw(
            watch_stream(
                {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "6"}}},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
                gone,
            )
        )
    )
    client = client_for(server, pki)
    seen: list[str] = []
    try:
        with pytest.raises(ApiError) as caught:
            async for kind, obj in client.watch(
                RESOURCE_SLICES, resource_version="5", fields={"spec.driver": "d"}
            ):
                seen.append(f"{kind} {obj['metadata']['resourceVersion']}")
    finally:
        await client.close()
    assert seen == ["ADDED 6", "BOOKMARK 9"] and caught.value.code == 410
    target = server.requests[0].target
    assert "watch=1" in target and "resourceVersion=5" in target and "allowWatchBookmarks=true" in target


@pytest.mark.parametrize(
    "line", [b"not json\n", b'{"type": "ADDED"}\n', b'{"type": "RENAMED", "object": {}}\n'], ids=str
)
async def test_a_malformed_watch_event_is_refused(serve: Any, pki: Pki, line: bytes) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = await serve(raw(head + chunked(line)))
    client = client_for(server, pki)
    try:
        with pytest.raises(ProtocolError):
            async for _ in client.watch(RESOURCE_SLICES, resource_version="1"):
                pass
    finally:
        await client.close()


async def test_an_oversized_watch_event_is_refused(serve: Any, pki: Pki) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = await serve(raw(head + chunked(*[b"x" * 1000] * 6)))  # no newline: one event growing
    client = client_for(server, pki, max_body_bytes=4096)
    try:
        with pytest.raises(ProtocolError, match="watch event of more than"):
            async for _ in client.watch(RESOURCE_SLICES, resource_version="1"):
                pass
    finally:
        await client.close()


async def test_follow_lists_again_after_410_and_resumes_a_watch_the_server_ended(
    serve: Any, pki: Pki
) -> None:
    """List (v5) → watch ends normally after an event (v6) → watch again from v6 → 410 → list again."""
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    lists = iter([("5", ["a"]), ("7", ["a", "b"])])
    watches = iter(
        [
            watch_stream({"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "6"}}}),
            watch_stream(gone),
        ]
    )
    third_watch = asyncio.Event()

    async def handle(request: Request, writer: asyncio.StreamWriter) -> bool:
        if "watch=1" in request.target:
            stream = next(watches, None)
            if stream is None:  # the third: stays open and quiet
                third_watch.set()
                writer.write(watch_stream(end=False))
                await writer.drain()
                await asyncio.Event().wait()
            writer.write(stream or b"")
            await writer.drain()
            return False
        version, names = next(lists)
        items = [{"metadata": {"name": name}} for name in names]
        body = json.dumps({"metadata": {"resourceVersion": version}, "items": items})
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        await writer.drain()
        return True

    server = await serve(handle)
    client = client_for(server, pki)
    listed: list[list[str]] = []
    events: list[str] = []

    def on_list(items: Sequence[dict[str, Any]]) -> None:
        listed.append([o["metadata"]["name"] for o in items])

    task = asyncio.create_task(
        follow(
            client,
            RESOURCE_SLICES,
            on_list,
            lambda kind, obj: events.append(f"{kind} {obj['metadata']['name']}"),
            retry_s=0.01,
        )
    )
    try:
        await asyncio.wait_for(third_watch.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
    assert listed == [["a"], ["a", "b"]] and events == ["MODIFIED a"]
    watch_versions = [
        r.target.split("resourceVersion=")[1].split("&")[0] for r in server.requests if "watch=1" in r.target
    ]
    assert watch_versions == ["5", "6", "7"]


class DownThenUp:
    """A client whose lists fail ``failures`` times (the API server away), then answer; its watches
    stay open and quiet."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.lists = 0
        self.listed = asyncio.Event()

    async def list(self, res: Any, **selectors: Any) -> rest.ObjectList:
        self.lists += 1
        if self.lists <= self.failures:
            raise ConnectionRefusedError(111, "Connection refused")
        self.listed.set()
        return rest.ObjectList((), "1")

    async def watch(self, res: Any, **kwargs: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await asyncio.Event().wait()
        yield "ADDED", {}  # pragma: no cover


async def test_an_outage_is_logged_when_it_starts_and_ends_not_at_every_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = DownThenUp(failures=300)
    with caplog.at_level(logging.INFO, logger=rest.__name__):
        task = asyncio.create_task(
            follow(client, RESOURCE_SLICES, lambda items: None, lambda kind, obj: None, retry_s=0.001)  # type: ignore[arg-type]
        )
        try:
            await asyncio.wait_for(client.listed.wait(), 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    lines = [record.getMessage() for record in caplog.records if record.name == rest.__name__]
    assert client.lists == 301
    assert len(lines) == 2, lines
    assert "following resourceslices failed: " in lines[0] and "Connection refused" in lines[0]
    assert "following resourceslices works again" in lines[1] and "300 failed attempts" in lines[1]


# ----- configuration -----------------------------------------------------------------------------------


def test_in_cluster_config_reads_the_service_account(tmp_path: Path, pki: Pki) -> None:
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "ca.crt").write_bytes(pki.ca)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    config = in_cluster_config(env, tmp_path)
    assert (config.host, config.port, config.authority) == ("fd00::1", 6443, "[fd00::1]:6443")
    assert config.token_file == tmp_path / "token" and config.ca_pem == pki.ca.decode()


@pytest.mark.parametrize(
    ("env", "files", "words"),
    [
        ({}, {"token": "t", "ca.crt": "c"}, "KUBERNETES_SERVICE_HOST"),
        (
            {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "x"},
            {"token": "t", "ca.crt": "c"},
            "port",
        ),
        ({"KUBERNETES_SERVICE_HOST": "h"}, {"token": "t"}, "ca.crt"),
        ({"KUBERNETES_SERVICE_HOST": "h"}, {"token": "\n", "ca.crt": "c"}, "empty"),
    ],
)
def test_a_missing_or_bad_service_account_is_named(
    tmp_path: Path, env: dict[str, str], files: dict[str, str], words: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=words):
        in_cluster_config(env, tmp_path)


def kubeconfig(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    doc = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def test_a_kubeconfig_gives_server_ca_token_and_client_certificate(tmp_path: Path, pki: Pki) -> None:
    ca = base64.b64encode(pki.ca).decode()
    (tmp_path / "cert.pem").write_bytes(pki.cert)
    path = kubeconfig(
        tmp_path,
        {
            "server": "https://api.example:6443",
            "certificate-authority-data": ca,
            "tls-server-name": "kubernetes",
        },
        {
            "token": "t",
            "client-certificate": "cert.pem",
            "client-key-data": base64.b64encode(pki.key).decode(),
        },
    )
    config = kubeconfig_config(path)
    assert (config.host, config.port, config.server_name, config.token) == (
        "api.example",
        6443,
        "kubernetes",
        "t",
    )
    assert config.client_cert_pem == pki.cert.decode() and config.client_key_pem == pki.key.decode()
    assert tls_context(config).verify_mode is ssl.CERT_REQUIRED  # the key pair loads


@pytest.mark.parametrize(
    ("cluster", "user", "words"),
    [
        ({"server": "http://api:80", "certificate-authority-data": "Zm9v"}, {}, "https"),
        ({"server": "https://api", "insecure-skip-tls-verify": True}, {}, "insecure-skip-tls-verify"),
        ({"server": "https://api"}, {}, "certificate-authority"),
        ({"server": "https://api", "certificate-authority-data": "!!"}, {}, "base64"),
        ({"server": "https://api", "certificate-authority-data": "Zm9v"}, {"exec": {"command": "x"}}, "exec"),
        (
            {"server": "https://api", "certificate-authority-data": "Zm9v"},
            {"client-key-data": "Zm9v"},
            "together",
        ),
        ({"server": "https://api/prefix", "certificate-authority-data": "Zm9v"}, {}, "path"),
    ],
)
def test_kubeconfigs_this_client_cannot_honour_are_refused_by_name(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        kubeconfig_config(kubeconfig(tmp_path, cluster, user))


def test_a_kubeconfig_that_is_not_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match="not a mapping"):
        kubeconfig_config(path)
    with pytest.raises(ConfigError, match="kubeconfig"):
        kubeconfig_config(tmp_path / "missing")
    path.write_bytes(b"x" * (rest.MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        kubeconfig_config(path)


# ----- client-side rate limit (-kube-api-qps, -kube-api-burst) --------------------------------------


def test_rate_limit_lets_a_burst_through_then_spaces_requests_by_qps() -> None:
    now = [100.0]
    limit = RateLimit(qps=2.0, burst=3, clock=lambda: now[0])
    assert [limit.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.delay() == pytest.approx(0.5), "the fourth waits for half a second's token"
    assert limit.delay() == pytest.approx(1.0), "and the fifth behind it"
    now[0] += 10  # idle: the bucket refills to the burst, no further
    assert [limit.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.delay() > 0


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (float("nan"), 1), (1.0, 0)])
def test_rate_limit_refuses_what_could_never_pass(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        RateLimit(qps, burst)


async def test_every_request_waits_for_its_token(serve: Any, pki: Pki) -> None:
    """With a burst of one at 20 a second, three GETs take at least the two waits between them."""
    server = await serve(answer(200, {"metadata": {"name": "n1", "uid": "u"}}))
    client = client_for(server, pki, rate_limit=RateLimit(qps=20.0, burst=1))
    started = asyncio.get_running_loop().time()
    try:
        for _ in range(3):
            await client.get(NODES, "n1")
    finally:
        await client.close()
    assert asyncio.get_running_loop().time() - started >= 0.09
    assert len(server.requests) == 3
