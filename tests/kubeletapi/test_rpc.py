"""The grpclib server shell, called by a grpcio client as the kubelet's grpc-go calls it: bounds,
error statuses and the graceful stop; and the grpclib release the size bound relies on."""

from __future__ import annotations

import asyncio
import errno
import importlib.metadata
import os
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from intel_device_plugins.dra.kubeletservice import DRA_SERVICE, MAX_CLAIMS_PER_CALL
from intel_device_plugins.kubeletapi import dra_v1
from intel_device_plugins.kubeletapi import pluginregistration_v1 as reg
from intel_device_plugins.kubeletapi.rpc import (
    GRPCLIB_VERSION,
    MAX_REQUEST_BYTES,
    UnixServer,
    server_stream,
    unary,
)
from intel_device_plugins.kubeletapi.wire import Method
from k8stest.kubeletapi import dra_v1_pb2 as pb
from k8stest.kubeletapi import dra_v1_pb2_grpc as pb_grpc
from k8stest.kubeletapi import pluginregistration_v1_pb2 as reg_pb

ECHO = Method("/test.Echo/Call", reg.PluginInfo, reg.PluginInfo)
SLOW = Method("/t.S/Slow", reg.InfoRequest, reg.PluginInfo)
REPO = Path(__file__).resolve().parents[2]
WATCH = Method("/t.S/Watch", reg.InfoRequest, reg.PluginInfo, server_streaming=True)


async def _echo(request: reg.PluginInfo) -> reg.PluginInfo:
    return request


def test_grpclib_is_the_release_the_request_bound_was_written_for() -> None:
    """``rpc._h2_stream`` and ``rpc._connection_guard`` read grpclib's private stream attributes; a new
    release must be checked (the oversized-request test below, the xpumd client's oversized-message and
    dropped-connection tests in tests/sim/test_xpumd_sim.py) and ``GRPCLIB_VERSION`` and the pin moved
    together."""
    assert importlib.metadata.version("grpclib") == GRPCLIB_VERSION
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'"grpclib=={GRPCLIB_VERSION}"' in pyproject


PRIVATE_READ = re.compile(r"\._(stream|wrapper)\b")


def test_only_the_wrapper_reads_grpclib_s_private_attributes() -> None:
    """Every other shipped module goes through ``rpc``'s two accessors, which the pin above covers."""
    rpc_file = REPO / "src" / "intel_device_plugins" / "kubeletapi" / "rpc.py"
    readers = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "src" / "intel_device_plugins").rglob("*.py")
        if PRIVATE_READ.search(path.read_text()) and path != rpc_file
    )
    assert readers == []
    reads = PRIVATE_READ.findall(rpc_file.read_text())
    assert sorted(reads) == ["stream", "wrapper"], "one read of each, in _h2_stream and _connection_guard"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[UnixServer, grpc.aio.Channel]]:
    path = tmp_path / "d" / "s.sock"
    server = UnixServer(path, dict([unary(ECHO, _echo)]))
    await server.start()
    async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
        yield server, channel
    await server.stop(grace=0)


async def test_a_request_over_the_limit_is_refused(
    served: tuple[UnixServer, grpc.aio.Channel],
) -> None:
    _, channel = served
    call = channel.unary_unary(ECHO.path, request_serializer=None, response_deserializer=None)
    small = reg_pb.PluginInfo(name="x" * 1000).SerializeToString()
    assert await call(small, timeout=5) == small
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(reg_pb.PluginInfo(name="x" * MAX_REQUEST_BYTES).SerializeToString(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over the limit" in (caught.value.details() or "")
    ok = reg_pb.PluginInfo(name="ok").SerializeToString()
    assert await call(ok, timeout=5) == ok  # the connection still serves


async def test_undecodable_and_oversized_claim_lists_are_invalid_arguments(tmp_path: Path) -> None:
    async def prepare(request: dra_v1.NodePrepareResourcesRequest) -> dra_v1.NodePrepareResourcesResponse:
        from intel_device_plugins.dra.kubeletservice import KubeletService

        KubeletService._refs(request.claims)
        return dra_v1.NodePrepareResourcesResponse()

    path = tmp_path / "dra.sock"
    server = UnixServer(path, dict([unary(dra_v1.DRAPlugin.NodePrepareResources, prepare)]))
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            raw = channel.unary_unary(
                f"/{DRA_SERVICE}/NodePrepareResources", request_serializer=None, response_deserializer=None
            )
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await raw(b"\x0a\x05abc", timeout=5)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "runs past the end" in (caught.value.details() or "")
            claims = [
                pb.Claim(namespace="n", name=f"c{i}", uid=f"u{i}") for i in range(MAX_CLAIMS_PER_CALL + 1)
            ]
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await pb_grpc.DRAPluginStub(channel).NodePrepareResources(
                    pb.NodePrepareResourcesRequest(claims=claims), timeout=5
                )
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"over {MAX_CLAIMS_PER_CALL}" in (caught.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await channel.unary_unary(
                    f"/{DRA_SERVICE}/Nothing", request_serializer=None, response_deserializer=None
                )(b"", timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(grace=0)


async def test_stop_lets_a_running_call_finish_ends_streams_and_removes_the_socket(tmp_path: Path) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: reg.InfoRequest) -> reg.PluginInfo:
        entered.set()
        await release.wait()
        return reg.PluginInfo(type="t")

    async def forever(request: reg.InfoRequest) -> AsyncIterator[reg.PluginInfo]:
        yield reg.PluginInfo()
        await asyncio.Event().wait()

    path = tmp_path / "s.sock"
    server = UnixServer(path, dict([unary(SLOW, slow), server_stream(WATCH, forever)]))
    await server.start()
    async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
        stream = channel.unary_stream("/t.S/Watch", request_serializer=None, response_deserializer=None)(b"")
        assert await asyncio.wait_for(stream.read(), 5) == b""
        call = asyncio.ensure_future(
            channel.unary_unary("/t.S/Slow", request_serializer=None, response_deserializer=None)(
                b"", timeout=10
            )
        )
        await asyncio.wait_for(entered.wait(), 5)
        stopping = asyncio.ensure_future(server.stop(grace=5))
        await asyncio.sleep(0.1)
        assert not path.exists() and not stopping.done()  # socket gone at once; the call still runs
        release.set()
        assert await call == b"\x0a\x01t"
        await asyncio.wait_for(stopping, 5)
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # the stop ended the stream, with a status
            await asyncio.wait_for(stream.read(), 5)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    "blocked", ["read-only directory", "directory at the socket", "file as its directory"]
)
async def test_a_socket_that_cannot_be_created_is_an_error_naming_its_path(
    tmp_path: Path, blocked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d" / "s.sock"
    if blocked == "read-only directory":  # as the kernel answers bind() there; chmod does not stop root

        def refuse(sock: socket.socket, address: object) -> None:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        monkeypatch.setattr(socket.socket, "bind", refuse)
    elif blocked == "directory at the socket":
        path.mkdir(parents=True)
    else:
        path.parent.write_text("not a directory")
    server = UnixServer(path, dict([unary(ECHO, _echo)]))
    with pytest.raises(OSError, match=f"cannot serve on {path}: "):
        await server.start()
