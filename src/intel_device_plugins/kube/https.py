"""HTTPS server for admission webhooks, a health server and /metrics, on aiohttp.

Every replica serves admission, leader or not, so the webhooks stay available during fail-over; that is why
this server runs on its own, apart from the controllers.
The serving certificate is loaded into one SSLContext and reloaded in place as soon as the files change (an
inotify watch on their directory, a slow periodic check as a backstop), which is how both cert-manager
rotations and the self-managed mode reach new TLS handshakes without a restart.

``start`` is the one way this project serves HTTP(S) — the operator's three ports and the standalone pod
webhooks alike — and it enforces ``ServerLimits`` on every connection: a cap on open connections, a
deadline for the TLS handshake, for the request headers, and for the body plus the answer, an idle timeout
between requests, and bounded bodies. Memory that idle connections held is handed back to the system once
they are gone. Request bodies are decoded by ``load_json``, which answers hostile JSON (huge numbers, deep
nesting, NaN) with 400 instead of an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import dataclasses
import enum
import json
import logging
import socket
import ssl
import time
from asyncio import sslproto
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from intel_device_plugins.kube.dirwatch import DirectoryChanges
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.metricsauth import Authorizer, bearer_token
from intel_device_plugins.kube.tlschain import load_pem_chain

TLS_CIPHERS: Final = "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384"
CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"
SMALL_BODY_BYTES: Final = 64 * 1024  # health and metrics take GETs only
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
    """Keeps an SSLContext loaded with the newest certificate found in ``cert_dir``.

    A change is a change of the files' contents, not of their timestamps: a kubelet swap or a rename may
    bring files as old as the ones they replace. The pair is loaded from the bytes compared, so what is
    served is always what was read.
    """

    cert_dir: Path
    context: ssl.SSLContext = dataclasses.field(default_factory=make_ssl_context)
    _pair: tuple[bytes, bytes] | None = None
    _pending: bool = False  # files there but not loadable (half a rotation): look again soon

    @property
    def loaded(self) -> bool:
        return self._pair is not None

    def reload_if_changed(self) -> bool:
        """Load the pair if it changed since the last load; False when missing or unchanged."""
        try:
            pair = ((self.cert_dir / CERT_FILE).read_bytes(), (self.cert_dir / KEY_FILE).read_bytes())
        except OSError:
            self._pending = False
            return False
        if pair == self._pair:
            self._pending = False
            return False
        try:
            load_pem_chain(self.context, *pair)
        except (ssl.SSLError, OSError) as exc:  # half-written during a rotation: try again soon
            if not self._pending:
                log.warning("cannot load serving certificate from %s: %s", self.cert_dir, exc)
            self._pending = True
            return False
        self._pair, self._pending = pair, False
        log.info("loaded serving certificate from %s", self.cert_dir)
        return True

    async def watch(self, backstop_s: float = 60.0, poll_s: float = 1.0, settle_s: float = 0.05) -> None:
        """Reload on every change of the directory's entries (inotify), and every ``backstop_s`` anyway.

        Every ``poll_s`` instead while the directory is missing, a change could not be loaded yet, or
        inotify is unavailable. ``settle_s`` lets a burst of renames (a kubelet swap) end first.
        """
        changes = DirectoryChanges(self.cert_dir)
        try:
            while True:
                changes.changed.clear()
                watching = changes.watch()
                self.reload_if_changed()
                wait_s = backstop_s if watching and not self._pending else poll_s
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changes.changed.wait(), wait_s)
                await asyncio.sleep(settle_s)
        finally:
            changes.close()


class BadJSON(ValueError):
    """A request body that is not JSON this server will work on; the message says why."""


MAX_JSON_DEPTH: Final = 100  # a pod in an AdmissionReview, managedFields included, stays far below this


def _reject_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not JSON")


def load_json(body: bytes) -> Any:
    """Decode a request body; BadJSON for anything that is not plain JSON of sane shape.

    Python's decoder raises ValueError for integers longer than 4300 digits and RecursionError for deep
    nesting; both are the client's fault and become BadJSON, as do NaN/Infinity and nesting deeper than
    ``MAX_JSON_DEPTH`` (checked without recursion, so later code can recurse safely).
    """
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise BadJSON("request body is nested too deeply") from None
    except UnicodeDecodeError:
        raise BadJSON("request body is not UTF-8") from None
    except BadJSON:
        raise
    except ValueError as exc:
        raise BadJSON(f"request body is not JSON: {str(exc)[:200]}") from None
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BadJSON(f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
    return doc


async def read_json(request: web.Request) -> Any:
    """The request's JSON body; BadJSON as above (the body size is bounded by ``client_max_size``)."""
    return load_json(await request.read())


# An AdmissionReview handler: decoded JSON body → answer (a pure function of the review).
ReviewHandler = Callable[[Any], Mapping[str, Any]]


def webhook_app(
    metrics: Metrics,
    routes: Mapping[str, ReviewHandler],
    max_body_bytes: int = 4 * 1024 * 1024,
) -> web.Application:
    """Application answering an AdmissionReview on each path of ``routes`` with its handler.

    Bodies that are not JSON get 400, too large ones 413 — never an exception.
    """
    app = web.Application(client_max_size=max_body_bytes)

    async def answer(request: web.Request, handle: ReviewHandler) -> web.Response:
        try:
            body = await read_json(request)
        except BadJSON as exc:
            return web.json_response({"error": str(exc)}, status=400)
        metrics.admission_reviews += 1
        return web.json_response(handle(body))

    for path, handler in routes.items():

        async def review(request: web.Request, handler: ReviewHandler = handler) -> web.Response:
            return await answer(request, handler)

        app.router.add_post(path, review)
    return app


def health_app(ready: Callable[[], bool]) -> web.Application:
    """``/healthz`` answers while the process runs; ``/readyz`` once the webhook server serves."""
    app = web.Application(client_max_size=SMALL_BODY_BYTES)

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
    app = web.Application(client_max_size=SMALL_BODY_BYTES)

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


# ----- the hardened server --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """What one client may hold of a server. The defaults suit the API server as the webhook client: it
    sends a whole request at once, waits at most 30 s for an answer, and reuses idle connections."""

    max_connections: int = 256  # open connections, TLS handshakes in progress included; shared fairly (below)
    handshake_timeout_s: float = 10.0  # TCP accept → TLS handshake done
    header_timeout_s: float = 10.0  # connection or first byte of a request → end of its headers
    request_timeout_s: float = 30.0  # end of headers → answer written (body upload included)
    idle_timeout_s: float = 30.0  # answer written → first byte of the next request
    max_body_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"ServerLimits.{field.name} must be positive")


def peer_source(peername: Any) -> str:
    """The address a connection comes from, the unit of fair sharing; IPv4-mapped IPv6 counts as IPv4."""
    if isinstance(peername, tuple) and peername:
        host = str(peername[0])
        return host.removeprefix("::ffff:") if host.startswith("::ffff:") and "." in host else host
    return "?"  # Unix sockets and the like: one source


class Slot:
    """One admitted connection: where it comes from, since when it waits for a request (None while one is
    under way), whether it has begun one yet, and how to drop it."""

    __slots__ = ("abort", "idle_since", "released", "source", "used")

    def __init__(self, source: str, abort: Callable[[], None], now: float) -> None:
        self.source = source
        self.abort = abort
        self.idle_since: float | None = now
        self.released = False
        self.used = False

    def busy(self) -> None:
        self.idle_since = None
        self.used = True

    def idle(self) -> None:
        if self.idle_since is None:
            self.idle_since = time.monotonic()


def choose_victim(holdings: Mapping[str, Sequence[Slot]], newcomer: str) -> Slot | None:
    """Which connection makes room for a new one from ``newcomer`` on a full server, or None to refuse it.

    Max-min fairness, and no churn among equals. In this order:

    1. A source holding at least two more connections than the newcomer gives one up (the one holding the
       most): its connection idle the longest (waiting for a request: idle keep-alive, never sent one, TLS
       handshake under way), or when it has none, its oldest busy one. So a peer holding every slot loses one
       to each newcomer, and no peer can hold more than an equal share against others who want one.
    2. Otherwise the shares are as even as they can be, and taking another source's connection would only
       swap one share for another: the newcomer gives up its own longest-idle connection,
    3. or, holding none idle, takes the oldest connection of a source holding more than it that has not begun
       a request yet (connected and silent, or still in its TLS handshake), which serves nobody so far.
    4. Failing that it is refused. A connection that has carried a request — the API server's warm
       keep-alive connection between two reviews — is never taken by a newcomer holding one fewer, however
       many addresses connect; the newcomer never sheds its own busy connections either.
    """
    mine = len(holdings.get(newcomer, ()))
    largest = max(holdings, key=lambda source: len(holdings[source]), default=None)
    if largest is not None and len(holdings[largest]) > mine + 1:
        slots = holdings[largest]
        return _longest_idle(slots) or slots[0]
    own = _longest_idle(holdings.get(newcomer, ()))
    if own is not None:
        return own
    silent = [
        slot
        for source, slots in holdings.items()
        if source != newcomer and len(slots) > mine
        for slot in slots
        if not slot.used
    ]
    return min(silent, key=lambda slot: slot.idle_since or 0.0, default=None)


def _longest_idle(slots: Sequence[Slot]) -> Slot | None:
    idle = [slot for slot in slots if slot.idle_since is not None]
    return min(idle, key=lambda slot: slot.idle_since or 0.0, default=None)


class DropLog:
    """Counts connections the server dropped or lost, by reason, and logs the counts at debug level at most
    once per ``interval_s``: under a flood, one line per connection would be the attack's amplifier. Counts
    not yet logged go out with the next drop after the interval."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._since: float | None = None
        self._counts: dict[str, int] = {}
        self.total = 0

    def note(self, reason: str) -> None:
        self.total += 1
        self._counts[reason] = self._counts.get(reason, 0) + 1
        now = self._clock()
        if self._since is not None and now - self._since < self._interval_s:
            return
        summary = ", ".join(f"{count} {why}" for why, count in sorted(self._counts.items()))
        log.debug("connections dropped since the last report: %s", summary)
        self._counts = {}
        self._since = now


class ConnectionSlots:
    """Open connections of one port, by source, under the cap; sheds by ``choose_victim`` when full.

    When the last connection closes, or the count falls to a sixteenth of the cap after a burst of at least
    a quarter of it, freed heap goes back to the OS: CPython and OpenSSL free a connection's buffers into the
    C allocator, which keeps the pages; without ``malloc_trim`` a burst of 800 idle connections would leave
    the process at its peak size for good. The second rule matters under a siege that ends while the API
    server still holds a connection or two.
    """

    def __init__(self, limit: int, trim: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.active = 0
        self.refused = 0
        self.shed = 0
        self.drops = DropLog()
        self._holdings: dict[str, list[Slot]] = {}
        self._trim = trim if trim is not None else _malloc_trim()
        self._after_burst = False

    def admit(self, source: str, abort: Callable[[], None]) -> Slot | None:
        """A slot for a new connection from ``source``, dropping another one if the port is full."""
        if self.active >= self.limit:
            victim = choose_victim(self._holdings, source)
            if victim is None:
                self.refused += 1
                self.drops.note("refused (port full)")
                return None
            self.shed += 1
            self.drops.note("shed to make room")
            self._forget(victim)
            victim.abort()
        slot = Slot(source, abort, time.monotonic())
        self._holdings.setdefault(source, []).append(slot)
        self.active += 1
        self._after_burst = self._after_burst or self.active * 4 >= self.limit
        return slot

    def release(self, slot: Slot) -> None:
        if not self._forget(slot):
            return
        if self.active == 0 or (self._after_burst and self.active * 16 <= self.limit):
            self._after_burst = False
            self._trim()

    def held_by(self, source: str) -> int:
        return len(self._holdings.get(source, ()))

    def _forget(self, slot: Slot) -> bool:
        if slot.released:
            return False
        slot.released = True
        held = self._holdings[slot.source]
        held.remove(slot)
        if not held:
            del self._holdings[slot.source]
        self.active -= 1
        return True


def _malloc_trim() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``, or a no-op where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]

    def run() -> None:
        trim(0)

    return run


class _Phase(enum.Enum):
    HEADERS = "headers"
    REQUEST = "request"
    IDLE = "idle"


class _WriteTap:
    """The transport as the HTTP handler sees it: writes also tell the guard that an answer went out."""

    def __init__(self, transport: asyncio.Transport, on_write: Callable[[], None]) -> None:
        self._transport = transport
        self._on_write = on_write

    def write(self, data: Any) -> None:
        self._on_write()
        self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        self._on_write()
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedProtocol(asyncio.Protocol):
    """Wraps aiohttp's per-connection handler with the deadlines of ``ServerLimits``.

    Phases: HEADERS (from the connection or the first byte of a request until the blank line ending the
    headers), REQUEST (until the first byte of the answer is written: body upload and handling), IDLE (until
    the next request starts). Each phase has one timer; when it fires the connection is aborted. A client
    trickling one header line every few seconds therefore never gets past ``header_timeout_s``.
    It also tells the connection's ``Slot`` whether a request is under way. With ``slots``, this layer takes
    the slot itself (plain HTTP); under TLS the TLS layer takes it and hands it over with ``attach``.
    """

    def __init__(
        self,
        inner: Callable[[], asyncio.BaseProtocol],
        limits: ServerLimits,
        drops: DropLog,
        slots: ConnectionSlots | None = None,
    ) -> None:
        self._make_inner = inner
        self._limits = limits
        self._drops = drops
        self._slots = slots
        self._inner: Any = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._phase = _Phase.HEADERS
        self._tail = b""
        self._slot: Slot | None = None

    def attach(self, slot: Slot) -> None:
        self._slot = slot

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self._slots is not None:
            slot = self._slots.admit(peer_source(transport.get_extra_info("peername")), transport.abort)
            if slot is None:
                transport.abort()
                return
            self._slot = slot
        self._transport = transport
        self._inner = self._make_inner()
        self._inner.connection_made(_WriteTap(transport, self._answered))
        self._enter(_Phase.HEADERS, self._limits.header_timeout_s)

    def _enter(self, phase: _Phase, timeout_s: float) -> None:
        self._phase = phase
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(timeout_s, self._expire, phase)

    def _expire(self, phase: _Phase) -> None:
        self._drops.note(f"past the {phase.value} deadline")
        if self._transport is not None:
            self._transport.abort()

    def _answered(self) -> None:
        if self._phase is not _Phase.IDLE:
            self._enter(_Phase.IDLE, self._limits.idle_timeout_s)
            if self._slot is not None:
                self._slot.idle()

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._slot is not None:
            self._slot.busy()
        if self._phase is _Phase.IDLE:
            self._tail = b""
            self._enter(_Phase.HEADERS, self._limits.header_timeout_s)
        if self._phase is _Phase.HEADERS:
            # The blank line may straddle two reads: keep the last three bytes seen.
            if b"\r\n\r\n" in self._tail + data[:3] or b"\r\n\r\n" in data:
                self._enter(_Phase.REQUEST, self._limits.request_timeout_s)
            else:
                self._tail = (self._tail + data)[-3:]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inner is not None:
            self._inner.connection_lost(exc)
            self._inner = None
        self._transport = None
        if self._slots is not None and self._slot is not None:
            self._slots.release(self._slot)


class _LeanTLSProtocol(sslproto.SSLProtocol):
    """asyncio's TLS layer with a 32 KiB instead of a 256 KiB receive buffer per connection (a TLS record
    holds at most 16 KiB), counting the connection against the cap before the handshake starts."""

    max_size = 32 * 1024

    def __init__(
        self,
        app_protocol: GuardedProtocol,
        context: ssl.SSLContext,
        limits: ServerLimits,
        slots: ConnectionSlots,
    ) -> None:
        super().__init__(
            asyncio.get_running_loop(),
            app_protocol,
            context,
            None,  # type: ignore[arg-type]  # no waiter: the server needs no handshake future
            server_side=True,
            ssl_handshake_timeout=limits.handshake_timeout_s,  # type: ignore[arg-type]  # stub says int
        )
        self._guarded = app_protocol
        self._slots = slots
        self._slot: Slot | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        slot = self._slots.admit(peer_source(transport.get_extra_info("peername")), transport.abort)
        if slot is None:
            transport.abort()
            return
        self._slot = slot
        self._guarded.attach(slot)
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        slot, self._slot = self._slot, None
        if slot is None:
            return
        try:
            super().connection_lost(exc)
        finally:
            self._slots.release(slot)


class RunningServer:
    """A listening server: its addresses, its connection counter, and ``cleanup``."""

    def __init__(self, runner: web.AppRunner, server: asyncio.Server, slots: ConnectionSlots) -> None:
        self._runner = runner
        self._server = server
        self.slots = slots

    @property
    def addresses(self) -> list[Any]:
        return [s.getsockname() for s in self._server.sockets]

    async def cleanup(self) -> None:
        self._server.close()
        await self._runner.cleanup()  # closes the open connections too


async def start(
    app: web.Application,
    host: str,
    port: int,
    context: ssl.SSLContext | None = None,
    limits: ServerLimits | None = None,
) -> RunningServer:
    """Serve ``app`` on host:port (TLS when ``context`` is given) under ``limits``; caller cleans up."""
    limits = limits or ServerLimits()
    slots = ConnectionSlots(limits.max_connections)

    @web.middleware
    async def quiet_disconnect(request: web.Request, handler: Any) -> web.StreamResponse:
        """A connection lost while its body is read (the peer went, or a deadline dropped it) is the peer's
        doing: counted in the drop log, not logged as a server error with a traceback per connection."""
        try:
            response: web.StreamResponse = await handler(request)
        except ConnectionResetError:
            slots.drops.note("lost during a request")
            return web.Response(status=400, text="connection lost")  # nobody reads it; aiohttp drops it
        return response

    app.middlewares.append(quiet_disconnect)
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=limits.idle_timeout_s,
        max_line_size=8190,
        max_field_size=8190,
        lingering_time=2.0,
    )
    await runner.setup()
    handler_factory = runner.server
    assert handler_factory is not None
    factory: Callable[[], asyncio.BaseProtocol]
    if context is None:
        factory = lambda: GuardedProtocol(handler_factory, limits, slots.drops, slots)  # noqa: E731
    else:
        factory = lambda: _LeanTLSProtocol(  # noqa: E731
            GuardedProtocol(handler_factory, limits, slots.drops), context, limits, slots
        )
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(
            factory,
            host or None,
            port,
            family=socket.AF_UNSPEC,
            reuse_address=True,
            backlog=128,
        )
    except BaseException:
        await runner.cleanup()
        raise
    return RunningServer(runner, server, slots)
