"""A small Kubernetes REST client on asyncio streams and the standard library, for node-side processes.

Why not lightkube: a DRA driver makes a handful of calls (get, list, watch, create, replace, delete of
a few resources), and lightkube with its HTTP stack, models and YAML loader costs a driver process
about 9 MiB of resident memory (docs/performance.md, "The idle GPU DRA driver"). This client speaks
HTTP/1.1 over TLS with ``asyncio`` and ``json`` and keeps no models: objects are the API's JSON.

Its rules: TLS 1.2 or newer with the server's certificate always verified against the cluster's CA
(only that CA: no system bundle is loaded) and its name checked; no plain HTTP; every response, header
and watch event bounded in size; at most ``MAX_CONNECTIONS`` connections for unary calls, however many
are made at once (the others wait for one); a bearer token read again from its file once a minute (service
account tokens rotate). Configuration comes from the pod's service account, or from a kubeconfig file
(YAML is imported only when one is read). Errors the API answers with raise :class:`ApiError` with
the HTTP status and the API's own message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from intel_device_plugins.kube.outage import OutageLog
from intel_device_plugins.kube.tlschain import load_pem_chain

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_BODY_BYTES: Final = 16 << 20
"""A response body (or one watch event) larger than this is refused: a node agent never needs one."""
MAX_HEADER_BYTES: Final = 64 << 10
MAX_HEADERS: Final = 100
MAX_CONFIG_BYTES: Final = 1 << 20
"""A kubeconfig, token or CA file larger than this is not one."""
TOKEN_REREAD_S: Final = 60.0
REQUEST_TIMEOUT_S: Final = 30.0
MAX_CONNECTIONS: Final = 4
"""Unary calls in flight at once, each on a connection of its own; more wait for one. Each TLS
connection costs about 300 KiB (asyncio's read buffer, the TLS session), so a burst of calls (a pod
with hundreds of claims) must not open one each. Watches have connections of their own, outside this."""
MAX_IDLE_CONNECTIONS: Final = 2
CLOSE_WAIT_S: Final = 1.0
IDLE_CLOSE_S: Final = 10.0
"""Kept-alive connections unused this long are closed: each holds asyncio's 256 KiB TLS read buffer,
and a node agent that is idle makes no call for minutes (its watch has a connection of its own)."""
USER_AGENT: Final = "intel-device-plugins"

log = logging.getLogger(__name__)
_STATUS = re.compile(r"^[1-5][0-9][0-9]$")
_CHUNK_SIZE = re.compile(r"^[0-9a-fA-F]{1,8}$")


class ApiError(Exception):
    """The API server answered with an error status; ``code`` is the HTTP status."""

    def __init__(self, code: int, message: str, reason: str = "") -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    @property
    def status_code(self) -> int:
        return self.code


class ProtocolError(Exception):
    """The server's answer is not HTTP or JSON this client accepts (malformed, or beyond the limits)."""


class ConfigError(ValueError):
    """The service account or kubeconfig cannot be used; the message names the file and field."""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed call, or None for errors without one (network, timeouts)."""
    return exc.code if isinstance(exc, ApiError) else None


def is_status(exc: BaseException, *codes: int) -> bool:
    return status_code(exc) in codes


# ----- configuration -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestConfig:
    """Where the API server is and how to trust it and authenticate to it."""

    host: str
    port: int
    ca_pem: str
    server_name: str = ""
    """The name the server's certificate must carry (default: ``host``)."""
    token: str = ""
    token_file: Path | None = None
    """Read again every minute; wins over ``token``."""
    client_cert_pem: str = ""
    client_key_pem: str = ""

    @property
    def authority(self) -> str:
        """``host:port`` for the Host header, with an IPv6 address in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _read_bounded(path: Path, what: str) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not text") from exc


def _port(text: str, where: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ConfigError(f"{where}: {text[:20]!r} is not a port")
    return port


def in_cluster_config(
    environ: Mapping[str, str] | None = None, account_dir: Path = SERVICE_ACCOUNT_DIR
) -> RestConfig:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT``, its token and the cluster CA."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    if not host:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST is not set")
    port = _port(env.get("KUBERNETES_SERVICE_PORT", "443"), "KUBERNETES_SERVICE_PORT")
    token_file = account_dir / "token"
    config = RestConfig(
        host=host.strip("[]"),
        port=port,
        ca_pem=_read_bounded(account_dir / "ca.crt", "service account CA"),
        token_file=token_file,
    )
    if not _read_bounded(token_file, "service account token").strip():
        raise ConfigError(f"service account token {token_file}: empty")
    return config


def _named(entries: Any, name: str, what: str, path: Path) -> Mapping[str, Any]:
    for entry in entries or ():
        if isinstance(entry, Mapping) and entry.get("name") == name and isinstance(entry.get(what), Mapping):
            return entry[what]  # type: ignore[no-any-return]
    raise ConfigError(f"kubeconfig {path}: no {what} named {name!r}")


def _data_or_file(section: Mapping[str, Any], key: str, base: Path, path: Path) -> str:
    """``<key>-data`` (base64 PEM) or ``<key>`` (a file, relative to the kubeconfig's directory)."""
    import base64
    import binascii

    data = section.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ConfigError(f"kubeconfig {path}: {key}-data is not base64 of a PEM text") from exc
    file = section.get(key)
    if file:
        return _read_bounded(base / str(file), f"kubeconfig {path}: {key}")
    return ""


def kubeconfig_config(path: Path) -> RestConfig:
    """The current context of a kubeconfig file: its cluster (``https`` only, CA required) and user
    (a token, a token file, or a client certificate and key). Exec plugins are not supported."""
    import yaml  # only when a kubeconfig is read: an in-cluster driver never loads it

    try:
        doc = yaml.safe_load(_read_bounded(path, "kubeconfig"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubeconfig {path}: not YAML: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ConfigError(f"kubeconfig {path}: not a mapping")
    current = doc.get("current-context")
    if not current:
        raise ConfigError(f"kubeconfig {path}: no current-context")
    context = _named(doc.get("contexts"), str(current), "context", path)
    cluster = _named(doc.get("clusters"), str(context.get("cluster", "")), "cluster", path)
    user = _named(doc.get("users"), str(context.get("user", "")), "user", path) if context.get("user") else {}
    if cluster.get("insecure-skip-tls-verify"):
        raise ConfigError(f"kubeconfig {path}: insecure-skip-tls-verify is refused; give the cluster's CA")
    url = urllib.parse.urlsplit(str(cluster.get("server", "")))
    if url.scheme != "https" or not url.hostname:
        raise ConfigError(f"kubeconfig {path}: server {url.geturl()[:100]!r} is not an https:// URL")
    if url.path.strip("/"):
        raise ConfigError(f"kubeconfig {path}: server URLs with a path are not supported")
    base = path.parent
    ca = _data_or_file(cluster, "certificate-authority", base, path)
    if not ca:
        raise ConfigError(f"kubeconfig {path}: cluster has no certificate-authority(-data)")
    if user.get("exec") or user.get("auth-provider"):
        raise ConfigError(f"kubeconfig {path}: exec and auth-provider credentials are not supported")
    token_file = user.get("tokenFile")
    cert = _data_or_file(user, "client-certificate", base, path)
    key = _data_or_file(user, "client-key", base, path)
    if bool(cert) != bool(key):
        raise ConfigError(f"kubeconfig {path}: client-certificate and client-key go together")
    try:
        port = url.port or 443
    except ValueError as exc:
        raise ConfigError(f"kubeconfig {path}: server has a bad port") from exc
    return RestConfig(
        host=url.hostname,
        port=port,
        ca_pem=ca,
        server_name=str(cluster.get("tls-server-name") or ""),
        token=str(user.get("token") or ""),
        token_file=base / str(token_file) if token_file else None,
        client_cert_pem=cert,
        client_key_pem=key,
    )


def tls_context(config: RestConfig) -> ssl.SSLContext:
    """TLS 1.2+, the server verified against the cluster CA alone, its name checked; client certificate
    and key when the config has them (``ConfigError`` when they are not a pair)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify_mode CERT_REQUIRED, check_hostname on
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(cadata=config.ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"the cluster CA is not a PEM certificate: {exc}") from exc
    if config.client_cert_pem:
        try:
            load_pem_chain(ctx, config.client_cert_pem.encode(), config.client_key_pem.encode())
        except ssl.SSLError as exc:
            raise ConfigError(f"client certificate and key: {exc}") from exc
    return ctx


# ----- resources ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """An API resource by its path: ``/apis/<group>/<version>`` (``/api/v1`` for the core group)."""

    prefix: str
    plural: str
    namespaced: bool = False

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        if self.namespaced and not namespace and name is not None:
            raise ValueError(f"{self.plural} {name}: a namespace is needed")
        parts = [self.prefix]
        if self.namespaced and namespace:
            parts += ["namespaces", _segment(namespace)]
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name))
        return "/".join(parts)


def _segment(text: str) -> str:
    """A name as one path segment: nothing in it can reach another path."""
    if not text or text in (".", "..") or len(text) > 253:
        raise ValueError(f"{text[:60]!r} is not an object name")
    return urllib.parse.quote(text, safe="")


NODES: Final = Resource("/api/v1", "nodes")
RESOURCE_SLICES: Final = Resource("/apis/resource.k8s.io/v1", "resourceslices")
RESOURCE_CLAIMS: Final = Resource("/apis/resource.k8s.io/v1", "resourceclaims", namespaced=True)
EVENTS: Final = Resource("/api/v1", "events", namespaced=True)


def selector(terms: Mapping[str, str] | None) -> str:
    """``key=value,...`` for a label or field selector."""
    return ",".join(f"{key}={value}" for key, value in (terms or {}).items())


@dataclass(frozen=True)
class ObjectList:
    items: tuple[dict[str, Any], ...]
    resource_version: str


# ----- HTTP/1.1 ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Head:
    status: int
    reason: str
    headers: Mapping[str, str]


class _Connection:
    """One TLS connection; requests on it take turns (HTTP/1.1 without pipelining)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = True
        self.answered = False
        """Whether any byte of an answer arrived (a request that got none may be sent again)."""

    async def close(self) -> None:
        """Close, waiting a moment for TLS's goodbye; a peer that does not answer it is cut off."""
        self.reusable = False
        self.writer.close()
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self.writer.wait_closed()
        except Exception:
            self.writer.transport.abort()

    async def send(self, request: bytes) -> None:
        self.answered = False
        self.writer.write(request)
        await self.writer.drain()

    async def head(self) -> _Head:
        line = await self._line()
        parts = line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not _STATUS.match(parts[1]):
            raise ProtocolError(f"not an HTTP/1.1 status line: {line[:80]!r}")
        headers: dict[str, str] = {}
        size, count = len(line), 0
        while True:
            line = await self._line()
            if not line:
                break
            size, count = size + len(line), count + 1
            if size > MAX_HEADER_BYTES or count > MAX_HEADERS:
                raise ProtocolError(f"headers beyond {MAX_HEADER_BYTES} bytes or {MAX_HEADERS} fields")
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise ProtocolError(f"malformed header line {line[:80]!r}")
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        if headers.get("connection", "").lower() == "close":
            self.reusable = False
        return _Head(int(parts[1]), parts[2] if len(parts) > 2 else "", headers)

    async def _line(self) -> str:
        try:
            raw = await self.reader.readuntil(b"\r\n")
        except asyncio.IncompleteReadError as exc:
            self.answered = self.answered or bool(exc.partial)
            raise
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError(f"a response line longer than {MAX_HEADER_BYTES} bytes") from exc
        self.answered = True
        return raw[:-2].decode("latin-1")

    async def body(self, head: _Head, limit: int = MAX_BODY_BYTES) -> bytes:
        """The whole body (Content-Length, chunked, or until the connection closes), at most ``limit``."""
        if head.status in (204, 304) or 100 <= head.status < 200:
            return b""
        chunks = bytearray()
        async for data in self.stream(head, limit):
            chunks += data
        return bytes(chunks)

    async def stream(self, head: _Head, limit: int = MAX_BODY_BYTES) -> AsyncIterator[bytes]:
        """The body piece by piece as it arrives; ``limit`` bounds the whole for a fixed-length body and
        each chunk (a watch's stream has no end, its events are bounded by the reader)."""
        encoding = head.headers.get("transfer-encoding", "").lower()
        if encoding:
            if encoding != "chunked":
                raise ProtocolError(f"transfer-encoding {encoding[:40]!r} is not supported")
            while True:
                size_line = (await self._line()).split(";", 1)[0].strip()
                if not _CHUNK_SIZE.match(size_line):
                    raise ProtocolError(f"malformed chunk size {size_line[:20]!r}")
                size = int(size_line, 16)
                if size > limit:
                    raise ProtocolError(f"a chunk of {size} bytes, more than {limit}")
                if size == 0:
                    while await self._line():  # trailers
                        pass
                    return
                data = await self.reader.readexactly(size)
                if await self.reader.readexactly(2) != b"\r\n":
                    raise ProtocolError("a chunk not followed by CRLF")
                yield data
        length = head.headers.get("content-length")
        if length is not None:
            if not length.isdigit() or len(length) > 12:
                raise ProtocolError(f"malformed content-length {length[:20]!r}")
            if int(length) > limit:
                raise ProtocolError(f"a body of {length} bytes, more than {limit}")
            if int(length):
                yield await self.reader.readexactly(int(length))
            return
        self.reusable = False  # the body ends with the connection
        total = 0
        while data := await self.reader.read(1 << 16):
            total += len(data)
            if total > limit:
                raise ProtocolError(f"a body of more than {limit} bytes")
            yield data


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{what}: not JSON: {exc}") from exc


def _api_error(head: _Head, body: bytes) -> ApiError:
    """The API's Status object when the body is one, else the HTTP status line."""
    try:
        status = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        status = None
    if isinstance(status, Mapping) and status.get("kind") == "Status":
        return ApiError(head.status, str(status.get("message", ""))[:1000], str(status.get("reason", "")))
    return ApiError(head.status, body[:200].decode("utf-8", "replace") or head.reason, head.reason)


class RateLimit:
    """Client-side request rate limit, a token bucket as client-go's (``QPS``, ``Burst``): up to ``burst``
    requests at once, then ``qps`` a second. A request waits for its token; none is refused."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not qps > 0 or not math.isfinite(qps):
            raise ValueError(f"QPS {qps} is not a positive number")
        if burst < 1:
            raise ValueError(f"burst {burst} is not a positive number")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = asyncio.Lock()

    def delay(self) -> float:
        """Take one token; the seconds to wait before using it (0 when one was there)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
        self._updated = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def wait(self) -> None:
        async with self._lock:  # callers go in order, each after the one before it
            wait = self.delay()
            if wait > 0:
                await asyncio.sleep(wait)


class RestClient:
    """JSON objects over HTTPS: unary calls share a few kept-alive connections, each watch has its own."""

    def __init__(
        self,
        config: RestConfig,
        *,
        field_manager: str = "",
        timeout_s: float = REQUEST_TIMEOUT_S,
        context: ssl.SSLContext | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self._config = config
        self._rate_limit = rate_limit
        self._max_body = max_body_bytes
        self._ssl = context or tls_context(config)
        self._field_manager = field_manager
        self._timeout_s = timeout_s
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        """Held for a unary call's whole exchange: a call opens a connection only while it holds one,
        and only when no idle one is left, so no more than ``MAX_CONNECTIONS`` are ever open."""
        self._idle_timer: asyncio.TimerHandle | None = None
        self._token = config.token
        self._token_read = -TOKEN_REREAD_S

    # --- plumbing ---

    def _authorization(self) -> str:
        if self._config.token_file is not None and time.monotonic() - self._token_read >= TOKEN_REREAD_S:
            self._token = _read_bounded(self._config.token_file, "token file").strip()
            self._token_read = time.monotonic()
        return f"Authorization: Bearer {self._token}\r\n" if self._token else ""

    async def _connect(self) -> _Connection:
        name = self._config.server_name or self._config.host
        try:
            # As bytes, ssl takes the name as it is; a str would load the IDNA codec (and
            # unicodedata) for nothing, as Kubernetes names are ASCII.
            server_hostname = name.encode("ascii")
        except UnicodeEncodeError:
            raise ConfigError(f"server name {name[:80]!r} is not ASCII") from None
        reader, writer = await asyncio.open_connection(
            self._config.host,
            self._config.port,
            ssl=self._ssl,
            server_hostname=server_hostname,
            limit=MAX_HEADER_BYTES,
        )
        return _Connection(reader, writer)

    def _request(self, method: str, target: str, body: bytes | None) -> bytes:
        lines = (
            f"{method} {target} HTTP/1.1\r\nHost: {self._config.authority}\r\nUser-Agent: {USER_AGENT}\r\n"
            f"Accept: application/json\r\n{self._authorization()}"
        )
        if body is not None:
            lines += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        return (lines + "\r\n").encode() + (body or b"")

    async def _call(self, method: str, target: str, body: bytes | None = None) -> Any:
        if self._rate_limit is not None:
            await self._rate_limit.wait()
        request = self._request(method, target, body)
        async with asyncio.timeout(self._timeout_s), self._slots:
            for attempt in (0, 1):
                while self._idle and self._idle[-1].reader.at_eof():  # closed by the server meanwhile
                    self._idle.pop().writer.close()
                reused = bool(self._idle)
                connection = self._idle.pop() if reused else await self._connect()
                try:
                    await connection.send(request)
                    head = await connection.head()
                    data = await connection.body(head, self._max_body)
                except (ConnectionError, asyncio.IncompleteReadError):
                    await connection.close()
                    # A kept-alive connection the server closed meanwhile: try once on a new one.
                    if reused and attempt == 0 and not connection.answered:
                        continue
                    raise
                except BaseException:
                    await connection.close()
                    raise
                # While every slot is taken, calls are waiting: keep the connection for them.
                wanted = len(self._idle) < MAX_IDLE_CONNECTIONS or self._slots.locked()
                if connection.reusable and wanted:
                    self._idle.append(connection)
                    self._close_idle_later()
                else:
                    await connection.close()
                if head.status >= 300:
                    raise _api_error(head, data)
                return _json(data, f"{method} {target}") if data else None
        raise AssertionError("unreachable")  # pragma: no cover

    def _close_idle_later(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = asyncio.get_running_loop().call_later(IDLE_CLOSE_S, self._close_idle)

    def _close_idle(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.reusable = False
            connection.writer.close()

    def _query(self, **params: str | None) -> str:
        query = {key: value for key, value in params.items() if value}
        return "?" + urllib.parse.urlencode(query) if query else ""

    # --- calls ---

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = await self._call("GET", res.path(namespace, name))
        return _object(obj, f"{res.plural} {name}")

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> ObjectList:
        query = self._query(labelSelector=selector(labels), fieldSelector=selector(fields))
        target = res.path(namespace) + query
        answer = _object(await self._call("GET", target), f"list of {res.plural}")
        items = answer.get("items") or []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ProtocolError(f"list of {res.plural}: items is not a list of objects")
        version = (answer.get("metadata") or {}).get("resourceVersion", "")
        return ObjectList(tuple(items), str(version))

    async def create(
        self, res: Resource, obj: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        target = res.path(namespace) + self._query(fieldManager=self._field_manager)
        return _object(await self._call("POST", target, json.dumps(obj).encode()), f"created {res.plural}")

    async def replace(
        self, res: Resource, obj: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        name = str((obj.get("metadata") or {}).get("name", ""))
        target = res.path(namespace, name) + self._query(fieldManager=self._field_manager)
        return _object(await self._call("PUT", target, json.dumps(obj).encode()), f"replaced {res.plural}")

    async def delete(self, res: Resource, name: str, namespace: str | None = None) -> None:
        await self._call("DELETE", res.path(namespace, name))

    async def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        timeout_s: int = 300,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Events after ``resource_version`` until the server ends the watch (after ``timeout_s``):
        ``(type, object)`` with type ADDED, MODIFIED, DELETED or BOOKMARK (an object with only the
        resource version). An ERROR event raises :class:`ApiError` (410 Gone: list again)."""
        target = res.path(namespace) + self._query(
            watch="1",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(timeout_s),
            labelSelector=selector(labels),
            fieldSelector=selector(fields),
        )
        if self._rate_limit is not None:
            await self._rate_limit.wait()
        connection = await asyncio.wait_for(self._connect(), self._timeout_s)
        try:
            async with asyncio.timeout(self._timeout_s):
                await connection.send(self._request("GET", target, None))
                head = await connection.head()
                if head.status >= 300:
                    raise _api_error(head, await connection.body(head, self._max_body))
            pending = bytearray()
            # No byte for the watch's own timeout and a margin: the server or the path to it is gone.
            chunks = connection.stream(head, self._max_body).__aiter__()
            while True:
                try:
                    data = await asyncio.wait_for(chunks.__anext__(), timeout_s + self._timeout_s)
                except StopAsyncIteration:
                    return
                pending += data
                while (end := pending.find(b"\n")) >= 0:
                    line = bytes(pending[:end])
                    del pending[: end + 1]
                    if line.strip():
                        yield _event(line)
                if len(pending) > self._max_body:
                    raise ProtocolError(f"a watch event of more than {self._max_body} bytes")
        finally:
            await connection.close()

    async def close(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.close()


def _object(obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what}: the answer is not a JSON object")
    return obj


def _event(line: bytes) -> tuple[str, dict[str, Any]]:
    event = _json(line, "watch event")
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ProtocolError(f"malformed watch event {line[:80]!r}")
    kind, obj = event.get("type"), event["object"]
    if kind == "ERROR":
        code = obj.get("code")
        message, reason = str(obj.get("message", ""))[:1000], str(obj.get("reason", ""))
        raise ApiError(code if isinstance(code, int) and 400 <= code < 600 else 500, message, reason)
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise ProtocolError(f"watch event of unknown type {str(kind)[:40]!r}")
    return kind, obj


def _version(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("resourceVersion", "")) if isinstance(metadata, Mapping) else ""


async def follow(
    client: RestClient,
    res: Resource,
    on_list: Callable[[Sequence[dict[str, Any]]], None],
    on_event: Callable[[str, dict[str, Any]], None],
    *,
    fields: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    namespace: str | None = None,
    resync_s: float = 300.0,
    retry_s: float = 2.0,
    watch_timeout_s: int = 300,
    outage: OutageLog | None = None,
) -> None:
    """List into ``on_list``, then watch from the list's resource version into ``on_event``, until
    cancelled. A watch the server ends is resumed from the last version seen (bookmarks keep it
    current); 410 Gone, any other error, or ``resync_s`` since the last list bring a new list.

    While the API server is away the list is retried every ``retry_s``; ``outage`` (by default one
    on this module's logger) logs when that starts, a reminder each minute, and when it ends."""
    selectors: dict[str, Any] = {"namespace": namespace, "labels": labels, "fields": fields}
    outage = outage or OutageLog(f"following {res.plural}", log)
    while True:
        try:
            listed = await client.list(res, **selectors)
            outage.succeeded()
            on_list(listed.items)
            version = listed.resource_version
            async with asyncio.timeout(resync_s):
                while True:
                    async for kind, obj in client.watch(
                        res, resource_version=version, timeout_s=watch_timeout_s, **selectors
                    ):
                        version = _version(obj) or version
                        if kind != "BOOKMARK":
                            on_event(kind, obj)
        except TimeoutError:
            continue  # periodic relist
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the API server may be away, or the version too old: list again
            if not is_status(exc, 410):
                outage.failed(exc, retry_s)
                await asyncio.sleep(retry_s)
