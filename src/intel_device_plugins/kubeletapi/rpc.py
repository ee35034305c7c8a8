"""gRPC for every kubelet API: grpclib over unix sockets, messages by the generated codecs.

Why grpclib and not grpcio: a plugin or driver serves a handful of small calls from the kubelet, and
grpcio's core (``cygrpc``) is about 10 MiB of resident memory in every process that imports it, against
about 3 MiB for grpclib and its HTTP/2 stack, which are pure Python on asyncio (docs/performance.md).
Messages are the dataclasses of this package's generated modules; neither protobuf's runtime nor
grpcio is loaded.

Bounds: grpclib buffers a whole message before decoding it and offers no limit of its own, so a
request is read here in two steps: its 5-byte gRPC prefix first, and a message announced longer
than ``MAX_REQUEST_BYTES`` is refused (``RESOURCE_EXHAUSTED``) before any of it is read. What the peer
can push unread is bounded by HTTP/2 flow control (``WINDOW_BYTES`` per connection and per stream);
header lists (64 KiB) and concurrent streams per connection (100) by h2's defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from grpclib.client import Channel
from grpclib.client import Stream as ClientStream
from grpclib.config import Configuration
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from grpclib.server import Server, Stream

from intel_device_plugins.kubeletapi.wire import Method, Request, Response, WireError

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
"""gRPC's usual default; a pod's devices or claims fit in a small fraction of it."""
WINDOW_BYTES: Final = 1024 * 1024
"""HTTP/2 receive window per connection and per stream: what a peer may send before it is read."""
GRPCLIB_VERSION: Final = "0.4.9"
"""The one grpclib release :func:`_h2_stream` and :func:`_connection_guard` are known to work with
(pinned in pyproject.toml)."""
_PREFIX = struct.Struct(">?I")

CALL_ERRORS: Final = (OSError, TimeoutError, GRPCError, StreamTerminatedError, ProtocolError)
"""What a call to a peer may raise: no listener, no answer in time, the peer's status, a broken
connection."""

Handlers = Mapping[str, Handler]
"""``/<service>/<method>`` → grpclib handler, as :func:`unary` and :func:`server_stream` make them."""


class MessageCodec(CodecBase):
    """The generated dataclasses on the wire, announced as ``proto``, which is what they are."""

    @property
    def __content_subtype__(self) -> str:
        return "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        data: bytes = message.encode()
        return data

    def decode(self, data: bytes, message_type: Any) -> Any:
        try:
            return message_type.decode(data)
        except WireError as error:
            raise GRPCError(Status.INTERNAL, f"undecodable answer: {error}") from error


def _h2_stream(stream: Stream[Any, Any] | ClientStream[Any, Any]) -> Any:
    """The HTTP/2 side of a grpclib server or client stream, which reads a given number of bytes.

    grpclib's public ``recv_message`` reads any announced length into memory; there is no public way
    to read less. This and :func:`_connection_guard` are the only places that use grpclib's private
    attributes, and grpclib is pinned to ``GRPCLIB_VERSION`` (a test fails on any other version; others
    send oversized messages both ways and drop connections mid-stream).
    """
    return stream._stream


def _connection_guard(stream: ClientStream[Any, Any]) -> contextlib.AbstractContextManager[Any]:
    """grpclib's guard of a client stream that ends a read when the connection is lost (its own
    ``recv_message`` reads inside it); a read of :func:`_h2_stream` would otherwise wait forever."""
    guard: contextlib.AbstractContextManager[Any] = stream._wrapper
    return guard


async def read_request(
    stream: Stream[Any, Any], request: type[Request], limit: int = MAX_REQUEST_BYTES
) -> Request:
    """The call's one request message, decoded; refused unread when it is announced over ``limit``."""
    raw = _h2_stream(stream)
    prefix = await raw.recv_data(_PREFIX.size)
    if len(prefix) != _PREFIX.size:
        raise GRPCError(Status.INVALID_ARGUMENT, "no request message")
    compressed, size = _PREFIX.unpack(prefix)
    if compressed:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not accepted")
    if size > limit:
        raise GRPCError(Status.RESOURCE_EXHAUSTED, f"request of {size} bytes is over the limit of {limit}")
    data = await raw.recv_data(size) if size else b""
    try:
        return request.decode(data)
    except WireError as error:
        raise GRPCError(Status.INVALID_ARGUMENT, str(error)) from error


class Calls:
    """Running calls, for a graceful stop as grpcio's ``stop(grace)``: unary calls may finish, streams
    (the health watch, which never finishes) end at once with ``UNAVAILABLE``, new calls are refused."""

    def __init__(self) -> None:
        self.running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.stopping = asyncio.Event()

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        if self.stopping.is_set():
            raise GRPCError(Status.UNAVAILABLE, "the server is stopping")
        self.running += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.running -= 1
            if not self.running:
                self._idle.set()

    async def until_stopping(self, work: Awaitable[None]) -> None:
        """Run a stream's ``work`` until it ends or the server stops; then the call ends with a status
        (a cancelled grpclib handler would leave the stream open without one)."""
        if self.stopping.is_set():
            raise GRPCError(Status.UNAVAILABLE, "the server is stopping")
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((task, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            raise GRPCError(Status.UNAVAILABLE, "the server is stopping")
        task.result()

    async def drained(self, grace: float) -> None:
        self.stopping.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)


def unary(
    method: Method[Request, Response], call: Callable[[Request], Awaitable[Response]]
) -> tuple[str, Handler]:
    """A unary method: ``await call(request)`` gives the reply; ``GRPCError`` aborts with its status."""

    async def handle(stream: Stream[Any, Any]) -> None:
        request = await read_request(stream, method.request)
        await stream.send_message(await call(request))

    return method.path, Handler(handle, Cardinality.UNARY_UNARY, method.request, method.response)


def server_stream(
    method: Method[Request, Response], messages: Callable[[Request], AsyncIterator[Response]]
) -> tuple[str, Handler]:
    """A server-streaming method: every message ``messages(request)`` yields is sent."""

    async def handle(stream: Stream[Any, Any]) -> None:
        request = await read_request(stream, method.request)
        async for message in messages(request):
            await stream.send_message(message)

    return method.path, Handler(handle, Cardinality.UNARY_STREAM, method.request, method.response)


class _Servable:
    def __init__(self, handlers: Handlers) -> None:
        self._handlers = dict(handlers)

    def __mapping__(self) -> dict[str, Handler]:
        return self._handlers


def _counted(handlers: Handlers, calls: Calls) -> dict[str, Handler]:
    """Unary calls counted for the graceful stop; streams (health) ended by it."""
    counted = {}
    for path, handler in handlers.items():
        inner = handler.func
        if handler.cardinality is Cardinality.UNARY_UNARY:

            async def handle(stream: Stream[Any, Any], inner: Any = inner) -> None:
                with calls.call():
                    await inner(stream)

        else:

            async def handle(stream: Stream[Any, Any], inner: Any = inner) -> None:
                await calls.until_stopping(inner(stream))

        counted[path] = handler._replace(func=handle)
    return counted


def remove_socket(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        log.warning("cannot remove socket %s: %s", path, error)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _server(handlers: Handlers, calls: Calls) -> Server:
    """A grpclib server for ``handlers``; built on the running loop (grpclib takes the current loop
    when constructed)."""
    return Server(
        [_Servable(_counted(handlers, calls))],
        codec=MessageCodec(),
        config=Configuration(
            http2_connection_window_size=WINDOW_BYTES, http2_stream_window_size=WINDOW_BYTES
        ),
    )


class UnixServer:
    """One grpclib server on one unix socket; the socket file is this instance's and goes with it."""

    def __init__(self, path: Path, handlers: Handlers) -> None:
        self.path = path
        self._handlers = handlers
        self._calls = Calls()
        self._server: Server | None = None
        self._socket: tuple[int, int] | None = None

    async def start(self) -> None:
        """Listen; an ``OSError`` naming the socket's path when that cannot be done (``bind`` errors
        name nothing, so a read-only directory would otherwise be a bare ``Read-only file system``)."""
        server = _server(self._handlers, self._calls)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
            remove_socket(self.path)  # a stale file of this same instance (a restart keeps the pod UID)
            await server.start(path=os.fspath(self.path))
        except OSError as error:
            raise OSError(error.errno, f"cannot serve on {self.path}: {error.strerror or error}") from error
        self._server = server
        self._socket = _identity(self.path)

    async def stop(self, grace: float) -> None:
        """Remove the socket (no new connections find it), let running calls finish for up to
        ``grace`` seconds (new ones are refused), then cancel what is left and close.

        A file at the path that is not the socket this server made (another process's, after ours was
        deleted) stays."""
        if self._socket is not None and _identity(self.path) == self._socket:
            remove_socket(self.path)
        self._socket = None
        if self._server is None:
            return
        await self._calls.drained(grace)
        self._server.close()
        await self._server.wait_closed()
        self._server = None


class TcpServer:
    """One grpclib server on a TCP port of every address of the pod (the liveness probe's server)."""

    def __init__(self, port: int, handlers: Handlers, host: str | None = None) -> None:
        self.port = port
        self.host = host
        self._handlers = handlers
        self._calls = Calls()
        self._server: Server | None = None

    async def start(self) -> None:
        server = _server(self._handlers, self._calls)
        await server.start(host=self.host, port=self.port)
        self._server = server

    async def stop(self, grace: float) -> None:
        if self._server is None:
            return
        await self._calls.drained(grace)
        self._server.close()
        await self._server.wait_closed()
        self._server = None


# ----- client --------------------------------------------------------------------------------------


def channel(path: Path) -> Channel:
    """A channel to the unix socket ``path`` (connected on first use; ``close()`` it when done)."""
    return Channel(path=os.fspath(path), codec=MessageCodec())


async def call(
    connection: Channel, method: Method[Request, Response], request: Request, timeout: float
) -> Response:
    """One unary call on ``connection``.

    Raises ``GRPCError`` (the server's status), ``OSError`` (no listener) or ``TimeoutError``; all are
    in ``CALL_ERRORS``.
    """
    async with connection.request(
        method.path, Cardinality.UNARY_UNARY, method.request, method.response, timeout=timeout
    ) as stream:
        await stream.send_message(request, end=True)
        reply = await stream.recv_message()
    if reply is None:
        raise GRPCError(Status.INTERNAL, f"{method.path}: no answer")
    return reply


async def call_unary(
    path: Path, method: Method[Request, Response], request: Request, timeout: float
) -> Response:
    """One unary call on a fresh connection to the unix socket ``path``, closed afterwards."""
    connection = channel(path)
    try:
        return await call(connection, method, request, timeout)
    finally:
        connection.close()


class MessageTooLarge(ValueError):
    """A message announced longer than the reader's limit; refused before it is read."""


async def read_message(stream: ClientStream[Any, Any], limit: int) -> bytes | None:
    """The next message of a client stream, undecoded, or None at its end (trailers checked: a non-OK
    status raises ``GRPCError``).

    The 5-byte gRPC prefix is read first and a message announced over ``limit`` is refused unread
    (``MessageTooLarge``); framing that is no gRPC message raises ``WireError``.
    """
    if stream.initial_metadata is None:
        await stream.recv_initial_metadata()
    raw = _h2_stream(stream)
    with _connection_guard(stream):
        prefix = await raw.recv_data(_PREFIX.size)
        if not prefix:
            data = None
        else:
            if len(prefix) != _PREFIX.size:
                raise WireError("truncated gRPC message prefix")
            compressed, size = _PREFIX.unpack(prefix)
            if compressed:
                raise WireError("compressed message (none was asked for)")
            if size > limit:
                raise MessageTooLarge(f"message of {size} bytes is over the limit of {limit}")
            data = await raw.recv_data(size) if size else b""
            if len(data) != size:
                raise WireError(f"message cut short at {len(data)} of {size} bytes")
    if data is None:
        await stream.recv_trailing_metadata()
    return data


async def stream_messages(
    connection: Channel, method: Method[Request, Response], request: Request
) -> AsyncIterator[Response]:
    """The messages of a server-streaming call, until the server ends it."""
    async with connection.request(
        method.path, Cardinality.UNARY_STREAM, method.request, method.response
    ) as stream:
        await stream.send_message(request, end=True)
        async for message in stream:
            yield message
