"""The hardened server: each fault reproduced against a real socket, with short limits.

Before the limits existed, every client below was kept open forever (aiohttp keeps a connection without a
complete request for its keep-alive timeout, an hour) and any number of them were accepted.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from intel_device_plugins.kube.https import (
    BadJSON,
    ConnectionSlots,
    DropLog,
    RunningServer,
    ServerLimits,
    Slot,
    choose_victim,
    health_app,
    load_json,
    peer_source,
    start,
    webhook_app,
)
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.webhooks.handlers import SGX_PATH, sgx_review
from tests.webhooks.podfixtures import pod, review, with_resources
from tests.webhooks.tls import serving_cert

LIMITS = ServerLimits(
    max_connections=8,
    handshake_timeout_s=1.0,
    header_timeout_s=1.0,
    request_timeout_s=1.5,
    idle_timeout_s=1.0,
    max_body_bytes=512 * 1024,
)


class Served:
    def __init__(self, server: RunningServer, client_ctx: ssl.SSLContext) -> None:
        self.server = server
        self.port = server.addresses[0][1]
        self.client_ctx = client_ctx

    async def connect(self, tls: bool = True) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1",
            self.port,
            ssl=self.client_ctx if tls else None,
            server_hostname="localhost" if tls else None,
        )

    async def post(self, path: str, body: bytes) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"https://localhost:{self.port}{path}", data=body, ssl=self.client_ctx) as r,
        ):
            return r.status, await r.text()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    serving, client_ctx = serving_cert(tmp_path)
    app = webhook_app(Metrics(), {SGX_PATH: sgx_review}, max_body_bytes=LIMITS.max_body_bytes)
    server = await start(app, "127.0.0.1", 0, serving.context, LIMITS)
    try:
        yield Served(server, client_ctx)
    finally:
        await server.cleanup()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closed the connection (EOF or reset); fails after ``seconds``."""
    began = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(4096):
                pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    return time.monotonic() - began


async def test_slowloris_headers_are_dropped_at_the_header_deadline(served: Served) -> None:
    reader, writer = await served.connect()
    writer.write(b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\n")

    async def trickle() -> None:
        for i in range(100):
            await asyncio.sleep(0.2)
            writer.write(f"X-Slow-{i}: y\r\n".encode())

    feeder = asyncio.create_task(trickle())
    try:
        waited = await closed_within(reader, 4)
    finally:
        feeder.cancel()
        writer.close()
    assert 0.8 < waited < 2.0


async def test_slow_body_is_dropped_at_the_request_deadline(served: Served) -> None:
    reader, writer = await served.connect()
    writer.write(b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n{")

    async def trickle() -> None:
        while True:
            await asyncio.sleep(0.2)
            writer.write(b" ")

    feeder = asyncio.create_task(trickle())
    try:
        waited = await closed_within(reader, 5)
    finally:
        feeder.cancel()
        writer.close()
    assert 1.2 < waited < 2.6


async def test_silent_connections_are_closed(served: Served) -> None:
    tls_reader, tls_writer = await served.connect()  # handshake done, never a request
    raw_reader, raw_writer = await served.connect(tls=False)  # not even a handshake
    try:
        waited = await asyncio.gather(closed_within(tls_reader, 4), closed_within(raw_reader, 4))
    finally:
        tls_writer.close()
        raw_writer.close()
    assert all(w < 2.0 for w in waited)


async def test_idle_keepalive_connection_is_closed_after_the_idle_timeout(served: Served) -> None:
    reader, writer = await served.connect()
    body = json.dumps(review(pod(with_resources("a", {"cpu": "1"})))).encode()
    writer.write(
        b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
    assert head.startswith(b"HTTP/1.1 200")
    try:
        waited = await closed_within(reader, 4)
    finally:
        writer.close()
    assert 0.8 < waited < 2.0


async def test_connection_cap_makes_room_by_dropping_the_longest_idle_connection(served: Served) -> None:
    held = [await served.connect() for _ in range(LIMITS.max_connections)]
    assert served.server.slots.active == LIMITS.max_connections
    try:
        status, _ = await served.post(SGX_PATH, json.dumps(review(pod())).encode())
        assert status == 200
        assert served.server.slots.shed >= 1 and served.server.slots.refused == 0
        assert served.server.slots.active <= LIMITS.max_connections
        assert await closed_within(held[0][0], 2) < 2  # the first one held, idle the longest
    finally:
        for _, w in held:
            w.close()


async def test_connection_cap_refuses_a_peer_whose_own_slots_are_all_busy(served: Served) -> None:
    held = [await served.connect() for _ in range(LIMITS.max_connections)]
    for _, w in held:  # a request under way on each: nothing idle to give up
        w.write(b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\n")
    await asyncio.sleep(0.2)
    with pytest.raises((ConnectionResetError, ssl.SSLError, OSError, asyncio.IncompleteReadError)):
        extra_reader, extra_writer = await served.connect()
        extra_writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await extra_reader.readexactly(1)
    assert served.server.slots.refused >= 1
    assert served.server.slots.active == LIMITS.max_connections
    for _, w in held:
        w.close()
    await asyncio.sleep(0.2)
    assert served.server.slots.active == 0
    status, _ = await served.post(SGX_PATH, json.dumps(review(pod())).encode())
    assert status == 200


async def test_slow_clients_do_not_block_others(served: Served) -> None:
    slow = [await served.connect() for _ in range(4)]
    for _, w in slow:
        w.write(b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\n")
    began = time.monotonic()
    status, text = await served.post(
        SGX_PATH, json.dumps(review(pod(with_resources("a", {"cpu": "1"})))).encode()
    )
    assert status == 200 and json.loads(text)["response"]["allowed"] is True
    assert time.monotonic() - began < 0.5
    for _, w in slow:
        w.close()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"n": ' + b"9" * 100_000 + b"}", "request body is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "request body is nested too deeply"),
        (b"[" * 101 + b"]" * 101, "request body is nested deeper than 100 levels"),
        (b'{"a": NaN}', "NaN is not JSON"),
        (b"\xff\xfe", "request body is not"),
        (b"{", "request body is not JSON"),
    ],
)
async def test_hostile_json_is_a_bad_request(served: Served, body: bytes, message: str) -> None:
    status, text = await served.post(SGX_PATH, body)
    assert status == 400
    assert message in json.loads(text)["error"]


async def test_oversized_body_is_refused(served: Served) -> None:
    status, _ = await served.post(SGX_PATH, b" " * (LIMITS.max_body_bytes + 1))
    assert status == 413


def test_load_json_accepts_what_the_api_server_sends() -> None:
    doc = review(pod(with_resources("a", {"sgx.intel.com/epc": "1Mi"})))
    assert load_json(json.dumps(doc).encode()) == doc
    with pytest.raises(BadJSON):
        load_json(b"Infinity")


async def test_plain_http_servers_have_the_same_limits() -> None:
    server = await start(health_app(lambda: True), "127.0.0.1", 0, None, LIMITS)
    try:
        port = server.addresses[0][1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        waited = await closed_within(reader, 4)
        writer.close()
        assert waited < 2.0
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITS.max_connections)]
        for _, w in held:
            w.write(b"GET /healthz HTTP/1.1\r\n")
        await asyncio.sleep(0.1)
        extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_within(extra_reader, 1) < 0.5
        assert server.slots.refused >= 1
        extra_writer.close()
        for _, w in held:
            w.close()
    finally:
        await server.cleanup()


async def probe(port: int, source: str) -> int:
    """One kubelet-style probe: a new connection, ``GET /healthz``, no keep-alive."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as s,
        s.get(f"http://127.0.0.1:{port}/healthz") as r,
    ):
        return r.status


async def test_health_probes_get_through_while_one_peer_fills_the_port() -> None:
    server = await start(health_app(lambda: True), "127.0.0.1", 0, None, LIMITS)
    try:
        port = server.addresses[0][1]
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITS.max_connections)]
        for _, w in held[::2]:  # half silent, half in the middle of their headers
            w.write(b"GET /healthz HTTP/1.1\r\n")
        await asyncio.sleep(0.1)
        assert [await probe(port, "127.0.0.3") for _ in range(LIMITS.max_connections + 2)] == [200] * (
            LIMITS.max_connections + 2
        )
        assert server.slots.refused == 0 and server.slots.shed >= 1
        for _, w in held:
            w.close()
    finally:
        await server.cleanup()


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        ServerLimits(max_connections=0)


async def test_headers_sent_byte_by_byte_within_the_deadline_are_served(served: Served) -> None:
    reader, writer = await served.connect()
    body = json.dumps(review(pod())).encode()
    request = (
        b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    for i in range(len(request)):  # the blank line ending the headers arrives split over reads
        writer.write(request[i : i + 1])
        await writer.drain()
        await asyncio.sleep(0.002)
    # Past the header deadline counted from the connection, within the request deadline from the headers' end.
    await asyncio.sleep(LIMITS.header_timeout_s * 0.8)
    writer.write(body)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3)
    writer.close()
    assert head.startswith(b"HTTP/1.1 200")


async def hold(served: Served, count: int, source: str = "127.0.0.1") -> list[asyncio.StreamWriter]:
    """``count`` TLS connections from ``source`` with the handshake done and no request: idle."""
    held = []
    for _ in range(count):
        _, writer = await asyncio.open_connection(
            "127.0.0.1",
            served.port,
            ssl=served.client_ctx,
            server_hostname="localhost",
            local_addr=(source, 0),
        )
        held.append(writer)
    return held


async def post_from(served: Served, source: str, body: bytes) -> int:
    """One review on a new connection from ``source``, as the API server sends after its idle one expired."""
    connector = aiohttp.TCPConnector(ssl=served.client_ctx, local_addr=(source, 0), force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as s,
        s.post(f"https://localhost:{served.port}{SGX_PATH}", data=body) as r,
    ):
        await r.read()
        return r.status


async def test_one_peer_holding_every_slot_does_not_lock_out_another(served: Served) -> None:
    held = await hold(served, LIMITS.max_connections)
    assert served.server.slots.active == LIMITS.max_connections
    body = json.dumps(review(pod())).encode()
    try:
        statuses = [await post_from(served, "127.0.0.2", body) for _ in range(3)]
        assert statuses == [200, 200, 200]
        assert served.server.slots.active <= LIMITS.max_connections
        assert served.server.slots.shed >= 1
    finally:
        for w in held:
            w.close()


async def test_keepalive_connections_after_a_valid_review_do_not_lock_out_another(served: Served) -> None:
    body = json.dumps(review(pod())).encode()
    held = await hold(served, LIMITS.max_connections)
    try:
        for w in held:  # one valid review each, then the connection stays open, idle
            w.write(
                b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        await asyncio.sleep(0.3)
        assert await post_from(served, "127.0.0.2", body) == 200
    finally:
        for w in held:
            w.close()


def slots_of(source: str, idle_since: list[float | None]) -> list[Slot]:
    slots = []
    for since in idle_since:
        slot = Slot(source, lambda: None, 0.0)
        slot.idle_since = since
        slots.append(slot)
    return slots


def test_room_is_taken_from_the_largest_holder_and_its_longest_idle_connection() -> None:
    hog = slots_of("10.0.0.9", [None, 5.0, 2.0, None])
    api = slots_of("10.0.0.1", [1.0])
    assert choose_victim({"10.0.0.9": hog, "10.0.0.1": api}, "10.0.0.1") is hog[2]
    assert choose_victim({"10.0.0.9": hog, "10.0.0.1": api}, "10.0.0.7") is hog[2]


def test_a_largest_holder_with_nothing_idle_gives_up_its_oldest_connection() -> None:
    hog = slots_of("10.0.0.9", [None, None])
    assert choose_victim({"10.0.0.9": hog}, "10.0.0.1") is hog[0]


def test_equal_shares_are_kept_and_a_newcomer_replaces_only_its_own_idle_connections() -> None:
    a, b = slots_of("a", [None, 3.0]), slots_of("b", [1.0, None])
    assert choose_victim({"a": a, "b": b}, "a") is a[1]
    assert choose_victim({"a": slots_of("a", [None, None]), "b": b}, "a") is None


def test_slots_never_exceed_the_cap_and_count_what_they_shed() -> None:
    dropped: list[str] = []
    slots = ConnectionSlots(3, trim=lambda: None)
    held = [slots.admit("hog", functools.partial(dropped.append, f"hog{i}")) for i in range(3)]
    assert held[0] is not None and all(held) and slots.active == 3
    newcomer = slots.admit("api", lambda: None)
    assert newcomer is not None and dropped == ["hog0"] and slots.active == 3 and slots.shed == 1
    assert slots.held_by("hog") == 2 and slots.held_by("api") == 1
    slots.release(held[0])  # the dropped connection's own close comes later: counted once only
    assert slots.active == 3


def test_sources_are_addresses_with_ipv4_mapped_ipv6_as_ipv4() -> None:
    assert peer_source(("::ffff:10.1.2.3", 443, 0, 0)) == "10.1.2.3"
    assert peer_source(("fd00::1", 443, 0, 0)) == "fd00::1"
    assert peer_source(("127.0.0.2", 5)) == "127.0.0.2"
    assert peer_source(None) == "?"


async def test_dropped_connections_are_logged_at_debug_level_rate_limited_never_as_errors(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clients = [await served.connect() for _ in range(6)]
    for _, w in clients:  # a body that never arrives in full: dropped at the request deadline or by the peer
        w.write(b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n{")
    await asyncio.sleep(0.3)
    for _, w in clients[:3]:
        w.transport.abort()
    await asyncio.gather(*(closed_within(r, 4) for r, _ in clients[3:]))
    await asyncio.sleep(0.2)
    assert served.server.slots.drops.total >= 6
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert len([r for r in caplog.records if "connections dropped" in r.getMessage()]) <= 2


def test_drop_log_reports_counts_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    now = [100.0]
    drops = DropLog(interval_s=10.0, clock=lambda: now[0])
    for _ in range(500):
        drops.note("shed to make room")
    drops.note("past the idle deadline")
    now[0] += 10.0
    drops.note("shed to make room")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "connections dropped since the last report: 1 shed to make room",
        "connections dropped since the last report: 1 past the idle deadline, 500 shed to make room",
    ]
    assert drops.total == 502


def test_freed_memory_is_returned_after_a_burst_even_while_a_few_connections_stay() -> None:
    trims: list[int] = []
    slots = ConnectionSlots(64, trim=lambda: trims.append(slots.active))
    api = slots.admit("api", lambda: None)
    burst = [slots.admit("hog", lambda: None) for _ in range(20)]
    for slot in burst[:-3]:
        assert slot is not None
        slots.release(slot)
    assert api is not None and slots.active == 4
    assert trims == [4]  # once, when the count fell to a sixteenth of the cap; the API server's stays open
    for slot in [api, *burst[-3:]]:
        assert slot is not None
        slots.release(slot)
    assert trims == [4, 0]  # and again when the port's last connection closed


def loopback_sources(count: int, first: int = 2) -> list[str]:
    """``count`` distinct loopback addresses from 127.0.0.<first> on: 127.0.0.2 … 127.0.1.45 for 300."""
    return [f"127.0.{n // 256}.{n % 256}" for n in range(first, first + count)]


async def review_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> bytes:
    """One review on an open connection, kept alive; the status line of the answer."""
    writer.write(
        b"POST /mutate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length"))
    await asyncio.wait_for(reader.readexactly(length), 5)
    return head.split(b"\r\n", 1)[0]


async def test_a_warm_keepalive_connection_survives_300_other_addresses_filling_the_port(
    tmp_path: Path,
) -> None:
    """The API server's keep-alive connection, idle between reviews, while clients on 300 other addresses
    each open one and send a review: at the default cap of 256, every source holds at most one, so taking
    the API server's connection for a newcomer would only swap one equal share for another."""
    serving, client_ctx = serving_cert(tmp_path)
    app = webhook_app(Metrics(), {SGX_PATH: sgx_review})
    server = await start(app, "127.0.0.1", 0, serving.context, ServerLimits())
    port = server.addresses[0][1]
    body = json.dumps(review(pod())).encode()
    others: list[asyncio.StreamWriter] = []

    async def connect(source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost", local_addr=(source, 0)
        )

    try:
        api_reader, api_writer = await connect("127.0.0.1")
        assert await review_on(api_reader, api_writer, body) == b"HTTP/1.1 200 OK"
        for i, source in enumerate(loopback_sources(300)):
            try:
                reader, writer = await connect(source)
                others.append(writer)
                await review_on(reader, writer, body)
            except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
                pass  # a newcomer refused on a full port
            if i % 25 == 24:  # the API server's next review, on the same connection
                assert await review_on(api_reader, api_writer, body) == b"HTTP/1.1 200 OK", source
        assert await review_on(api_reader, api_writer, body) == b"HTTP/1.1 200 OK"
        assert server.slots.active == ServerLimits().max_connections
        assert server.slots.held_by("127.0.0.1") == 1
        api_writer.close()
    finally:
        for writer in others:
            writer.close()
        await server.cleanup()


def test_among_equal_shares_a_newcomer_takes_only_a_connection_that_never_began_a_request() -> None:
    api = slots_of("10.0.0.1", [9.0])
    api[0].used = True  # the API server's keep-alive connection, idle after its last review
    quiet, silent = slots_of("10.0.0.2", [1.0]), slots_of("10.0.0.3", [4.0])
    quiet[0].used = True
    holdings = {"10.0.0.1": api, "10.0.0.2": quiet, "10.0.0.3": silent}
    assert choose_victim(holdings, "10.0.0.7") is silent[0]
    silent[0].used = True
    assert choose_victim(holdings, "10.0.0.7") is None  # every share is one, each carried a request
    # One more than the newcomer is still an equal share: a newcomer holding one takes nothing from two.
    pair = slots_of("10.0.0.4", [1.0, 2.0])
    for slot in pair:
        slot.used = True
    assert choose_victim({"10.0.0.4": pair, "10.0.0.7": slots_of("10.0.0.7", [None])}, "10.0.0.7") is None


async def test_a_newcomer_gets_past_silent_connections_from_as_many_addresses_as_the_cap(
    served: Served,
) -> None:
    sources = loopback_sources(LIMITS.max_connections, first=10)
    held = [writer for source in sources for writer in await hold(served, 1, source)]
    assert served.server.slots.active == LIMITS.max_connections
    try:
        assert await post_from(served, "127.0.0.2", json.dumps(review(pod())).encode()) == 200
        assert served.server.slots.shed == 1
    finally:
        for w in held:
            w.close()
