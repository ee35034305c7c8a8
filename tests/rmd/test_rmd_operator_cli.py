"""The operator's command line: mTLS required, plain HTTP only behind the debug flag, endpoint overrides."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import pytest

from intel_device_plugins.rmd import images, pki
from intel_device_plugins.rmd.client import TlsConfigError, Transport
from intel_device_plugins.rmd.operator import (
    OperatorConfig,
    RmdOperator,
    _endpoint,
    build_transport,
    main,
    parser,
)


def test_transport_needs_tls_material(tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match=r"cannot read .*ca\.crt"):
        build_transport(tmp_path, plain=False, timeout_s=1)
    ca = pki.new_ca(key_type="rsa")
    client = pki.new_client(ca, key_type="rsa")
    for name, data in (("ca.crt", ca.cert), ("tls.crt", client.cert), ("tls.key", client.key)):
        (tmp_path / name).write_bytes(data)
    transport, reloader = build_transport(tmp_path, plain=False, timeout_s=3)
    assert transport.scheme == "https" and transport.timeout_s == 3
    assert reloader is not None and transport.tls is reloader.context


def test_plain_http_only_with_the_debug_flag(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        transport, reloader = build_transport(None, plain=True, timeout_s=1)
    assert transport.scheme == "http" and reloader is None and "PLAIN HTTP" in caplog.text
    assert parser().parse_args([]).insecure_plain_http is False


def test_node_image_defaults_to_the_projects_and_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(images.NODE_IMAGE_ENV, raising=False)
    assert parser().parse_args([]).node_image == images.default_node_image()
    monkeypatch.setenv(images.NODE_IMAGE_ENV, "registry.example/x/node:2")
    assert parser().parse_args([]).node_image == "registry.example/x/node:2"
    assert parser().parse_args(["--node-image", "y/node:3"]).node_image == "y/node:3"


def test_bad_tls_material_exits_2(tmp_path: Path) -> None:
    assert main(["--tls-dir", str(tmp_path), "--no-leader-elect"]) == 2


def test_endpoint_overrides() -> None:
    assert _endpoint("n1=https://10.0.0.1:8443") == ("n1", "https://10.0.0.1:8443")
    for bad in ("n1", "=https://x", "n1=ftp://x"):
        with pytest.raises(argparse.ArgumentTypeError, match="NODE=https://HOST:PORT"):
            _endpoint(bad)


async def test_one_periodic_reconcile_per_key() -> None:
    """A reconcile caused by an event reschedules the periodic one instead of starting a second chain."""
    transport = Transport(None, allow_plain_http=True)
    operator = RmdOperator(None, None, OperatorConfig(namespace="ns", transport=transport))  # type: ignore[arg-type]
    key = ("node", "n1")
    delivered = []

    async def drain() -> None:
        while True:
            got = await operator.queue.get()
            delivered.append(got)
            operator.queue.done(got)

    consumer = asyncio.create_task(drain())
    operator.look_again(key, 0.1)  # the periodic read
    await asyncio.sleep(0.05)
    operator.look_again(key, 0.1)  # an event-driven read happened meanwhile and scheduled the next one
    operator.look_again(("node", "n2"), None)
    await asyncio.sleep(0.3)
    consumer.cancel()
    assert delivered == [key]


async def test_changes_bring_the_next_read_forward_once() -> None:
    transport = Transport(None, allow_plain_http=True)
    operator = RmdOperator(None, None, OperatorConfig(namespace="ns", transport=transport))  # type: ignore[arg-type]
    key = ("node", "n1")
    operator.look_again(key, 300)
    operator.look_again_soon(key, 0.05)  # a change: the periodic read comes forward
    first = operator._timers[key]
    operator.look_again_soon(key, 0.05)  # more changes before it: the same read covers them
    assert operator._timers[key] is first
    assert await asyncio.wait_for(operator.queue.get(), 1) == key
