"""The REST client against the simulated RMD: mutual TLS, RMD's errors, timeouts and refusals."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from intel_device_plugins.rmd import pki
from intel_device_plugins.rmd.client import (
    RmdApiError,
    RmdClient,
    RmdUnreachable,
    TlsConfigError,
    TlsMaterial,
    TlsReloader,
    Transport,
    client_ssl_context,
    expiry_warning,
)
from intel_device_plugins.sim.rmd import Acl, RmdState, serve_rmd, server_tls


def _write(directory: Path, ca: pki.Issued, server: pki.Issued) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.pem").write_bytes(ca.cert)
    (directory / "rmd-cert.pem").write_bytes(server.cert)
    (directory / "rmd-key.pem").write_bytes(server.key)
    return directory


@pytest.fixture(scope="module")
def ca() -> pki.Issued:
    return pki.new_ca()


@pytest.fixture
def server_ssl(ca: pki.Issued, tmp_path: Path) -> ssl.SSLContext:
    d = _write(tmp_path / "rmd", ca, pki.new_server(ca))
    return server_tls(d / "ca.pem", d / "rmd-cert.pem", d / "rmd-key.pem")


@pytest.fixture
def acl(tmp_path: Path) -> Acl:
    """RMD's default authorisation (``signature``) with its admin and user certificate directories."""
    admin, user = tmp_path / "acl" / "admin", tmp_path / "acl" / "user"
    admin.mkdir(parents=True)
    user.mkdir(parents=True)
    return Acl("signature", admin, user)


def _transport(
    ca: pki.Issued,
    listed_in: Path | None = None,
    role: str = "Admin",
    key_type: pki.KeyType = "ecdsa",
) -> Transport:
    """A client with a new certificate, placed in RMD's ``listed_in`` certificate directory if given."""
    client = pki.new_client(ca, role=role, key_type=key_type)
    if listed_in is not None:
        (listed_in / f"client-{len(list(listed_in.iterdir()))}.pem").write_bytes(client.cert)
    return Transport(client_ssl_context(TlsMaterial(ca.cert, client.cert, client.key)))


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
async def test_mutual_tls_round_trip(
    key_type: pki.KeyType,
    ca: pki.Issued,
    server_ssl: ssl.SSLContext,
    session: aiohttp.ClientSession,
    acl: Acl,
) -> None:
    state = RmdState()
    async with serve_rmd(state, tls=server_ssl, acl=acl) as url:
        assert url.startswith("https://")
        rmd = RmdClient(session, _transport(ca, acl.admincert, key_type=key_type), url)
        created = await rmd.post_workload(
            {"core_ids": ["0-3"], "rdt": {"cache": {"max": 2, "min": 2}}, "uuid": "x"}
        )
        assert created["id"] == "1" and created["status"] == "Successful"
        assert [w["uuid"] for w in await rmd.get_workloads()] == ["x"]
        patched = await rmd.patch_workload("1", {"rdt": {"cache": {"max": 3, "min": 3}}})
        assert patched["rdt"]["cache"]["max"] == 3
        caches = await rmd.get_cache_l3()
        assert caches["number"] == 2 and "guaranteed" in caches["Caches"]["0"]["available_ways_pool"]
        await rmd.delete_workload("1")
        assert await rmd.get_workloads() == []


async def test_rmd_errors_carry_status_and_text(
    ca: pki.Issued, server_ssl: ssl.SSLContext, session: aiohttp.ClientSession, acl: Acl
) -> None:
    async with serve_rmd(RmdState(), tls=server_ssl, acl=acl) as url:
        rmd = RmdClient(session, _transport(ca, acl.admincert), url)
        with pytest.raises(RmdApiError) as err:
            await rmd.post_workload({"core_ids": ["0"], "rdt": {"cache": {"max": 1, "min": 2}}})
        assert err.value.status == 400
        assert err.value.text == (
            "Failed to validate workload. Reason: Min cache value cannot be greater than max cache value"
        )
        with pytest.raises(RmdApiError, match="404: Could not found workload") as err:
            await rmd.delete_workload("7")
        assert err.value.status == 404


async def test_rmd_default_acl_refuses_every_certificate(
    ca: pki.Issued, server_ssl: ssl.SSLContext, session: aiohttp.ClientSession
) -> None:
    """An RMD nobody configured: signature mode with no certificate directories lets no client in."""
    async with serve_rmd(RmdState(), tls=server_ssl) as url:
        with pytest.raises(RmdApiError, match="intel-rmd-operator is not authorized") as err:
            await RmdClient(session, _transport(ca, role="Admin"), url).get_workloads()
        assert err.value.status == 401


async def test_rmd_acl_by_certificate_signature(
    ca: pki.Issued, server_ssl: ssl.SSLContext, session: aiohttp.ClientSession, acl: Acl
) -> None:
    assert acl.admincert is not None and acl.usercert is not None
    async with serve_rmd(RmdState(), tls=server_ssl, acl=acl) as url:
        admin = RmdClient(session, _transport(ca, acl.admincert, role="Guest"), url)
        assert (await admin.post_workload({"core_ids": ["0"], "policy": "gold"}))["id"] == "1"
        reader = RmdClient(session, _transport(ca, acl.usercert, role="Admin"), url)
        assert [w["id"] for w in await reader.get_workloads()] == ["1"]
        with pytest.raises(RmdApiError, match='User "Cert Client User" is not authorized') as err:
            await reader.delete_workload("1")
        assert err.value.status == 403
        # The organisational unit counts for nothing here: only the listed certificates do.
        stranger = RmdClient(session, _transport(ca, role="Admin"), url)
        with pytest.raises(RmdApiError, match="intel-rmd-operator is not authorized") as err:
            await stranger.get_workloads()
        assert err.value.status == 401


async def test_rmd_acl_by_certificate_role(
    ca: pki.Issued, server_ssl: ssl.SSLContext, session: aiohttp.ClientSession
) -> None:
    async with serve_rmd(RmdState(), tls=server_ssl, acl=Acl("role")) as url:
        reader = RmdClient(session, _transport(ca, role="User"), url)
        assert await reader.get_workloads() == []
        with pytest.raises(RmdApiError, match="OU: User is not authorized") as err:
            await reader.post_workload({"core_ids": ["0"], "policy": "gold"})
        assert err.value.status == 401
        writer = RmdClient(session, _transport(ca, role="Root"), url)
        assert (await writer.post_workload({"core_ids": ["0"], "policy": "gold"}))["id"] == "1"
        stranger = RmdClient(session, _transport(ca, role="Guest"), url)
        with pytest.raises(RmdApiError, match="OU: Guest is not authorized") as err:
            await stranger.get_workloads()
        assert err.value.status == 401


async def test_tls_refusals(
    ca: pki.Issued, server_ssl: ssl.SSLContext, session: aiohttp.ClientSession
) -> None:
    other_ca = pki.new_ca("someone-else")
    async with serve_rmd(RmdState(), tls=server_ssl) as url:
        # A client certificate from a CA RMD does not trust: the handshake fails.
        foreign = pki.new_client(other_ca)
        untrusted_client = Transport(client_ssl_context(TlsMaterial(ca.cert, foreign.cert, foreign.key)))
        with pytest.raises(RmdUnreachable):
            await RmdClient(session, untrusted_client, url).get_workloads()
        # RMD's certificate from a CA the client does not trust.
        mine = pki.new_client(other_ca)
        distrusting = Transport(client_ssl_context(TlsMaterial(other_ca.cert, mine.cert, mine.key)))
        with pytest.raises(RmdUnreachable, match="certificate"):
            await RmdClient(session, distrusting, url).get_workloads()
        # Plain HTTP to the TLS port gets nothing useful either.
        plain = Transport(None, allow_plain_http=True)
        with pytest.raises((RmdUnreachable, RmdApiError)):
            await RmdClient(session, plain, url.replace("https", "http")).get_workloads()


def test_plain_http_is_refused_unless_explicit(ca: pki.Issued, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(TlsConfigError, match="mutual TLS only"):
        Transport(None)
    session = aiohttp.ClientSession.__new__(aiohttp.ClientSession)  # never used for a request
    with pytest.raises(TlsConfigError, match=r"refusing plain HTTP to http://10\.0\.0\.1:8081"):
        RmdClient(session, _transport(ca), "http://10.0.0.1:8081")
    with caplog.at_level(logging.WARNING):
        debug = Transport(None, allow_plain_http=True)
    assert "PLAIN HTTP" in caplog.text
    assert debug.base_url("10.0.0.1") == "http://10.0.0.1:8081"
    assert _transport(ca).base_url("fd00::1") == "https://[fd00::1]:8443"


async def test_plain_http_debug_mode_works_when_allowed(session: aiohttp.ClientSession) -> None:
    async with serve_rmd(RmdState()) as url:
        rmd = RmdClient(session, Transport(None, allow_plain_http=True), url)
        assert (await rmd.post_workload({"core_ids": ["0"], "policy": "gold"}))["id"] == "1"


async def test_timeout(ca: pki.Issued, session: aiohttp.ClientSession) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        rmd = RmdClient(
            session, Transport(None, allow_plain_http=True, timeout_s=0.3), f"http://127.0.0.1:{port}"
        )
        with pytest.raises(RmdUnreachable, match=r"no answer within 0\.3 s"):
            await rmd.get_workloads()
    finally:
        server.close()


def _rsa_material(ca: pki.Issued, bits: int) -> TlsMaterial:
    good = pki.new_client(ca, key_type="rsa")
    weak = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    pem = weak.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return TlsMaterial(ca.cert, good.cert, pem, "secret/rmd-client")


def test_bad_material_is_an_error_not_a_fallback(ca: pki.Issued, tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match="RSA key of 1024 bits, at least 2048 needed"):
        client_ssl_context(_rsa_material(ca, 1024))
    with pytest.raises(TlsConfigError, match="do not belong together"):
        client_ssl_context(_rsa_material(ca, 2048))
    with pytest.raises(TlsConfigError, match=r"cannot read .*ca.crt: No such file"):
        TlsMaterial.from_dir(tmp_path)
    client = pki.new_client(ca, key_type="rsa")
    for name, data in (("ca.crt", ca.cert), ("tls.crt", client.cert), ("tls.key", client.key)):
        (tmp_path / name).write_bytes(data)
    assert client_ssl_context(TlsMaterial.from_dir(tmp_path)).minimum_version == ssl.TLSVersion.TLSv1_2


def _write_material(directory: Path, ca: pki.Issued, client: pki.Issued) -> None:
    for name, data in (("ca.crt", ca.cert), ("tls.crt", client.cert), ("tls.key", client.key)):
        (directory / name).write_bytes(data)


def test_expired_material_is_refused_at_start_naming_the_file(ca: pki.Issued, tmp_path: Path) -> None:
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=100)
    expired = pki.new_client(ca, validity=dt.timedelta(days=30), now=long_ago)
    _write_material(tmp_path, ca, expired)
    with pytest.raises(TlsConfigError, match=rf"{tmp_path}/tls\.crt: expired on "):
        client_ssl_context(TlsMaterial.from_dir(tmp_path))
    old_ca = pki.new_ca(validity=dt.timedelta(days=30), now=long_ago)
    _write_material(tmp_path, old_ca, pki.new_client(ca))
    with pytest.raises(TlsConfigError, match=r"ca\.crt: every CA certificate has expired"):
        client_ssl_context(TlsMaterial.from_dir(tmp_path))


def test_certificates_are_short_lived_and_expiry_is_warned_ahead(ca: pki.Issued) -> None:
    client = pki.new_client(ca)
    material = TlsMaterial(ca.cert, client.cert, client.key, "secret/rmd-client")
    now = dt.datetime.now(dt.UTC)
    assert expiry_warning(material, now) == ""
    warning = expiry_warning(material, now + pki.VALIDITY - dt.timedelta(days=3))
    assert warning.startswith("secret/rmd-client/tls.crt expires on ") and "(2 days)" in warning
    issued = x509.load_pem_x509_certificate(client.cert)
    assert issued.not_valid_after_utc - issued.not_valid_before_utc <= dt.timedelta(days=90, minutes=5)


def test_reloader_follows_the_secret_and_keeps_good_material(
    ca: pki.Issued, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write_material(tmp_path, ca, pki.new_client(ca))
    reloader = TlsReloader.start(tmp_path)
    context = reloader.context
    assert reloader.check() is False  # nothing changed
    renewed = pki.new_client(ca)
    _write_material(tmp_path, ca, renewed)
    assert reloader.check() is True and reloader.loaded.cert == renewed.cert
    assert reloader.context is context  # loaded in place: every client using it presents the new one
    (tmp_path / "tls.key").write_bytes(pki.new_client(ca).key)  # half-written update: not a pair
    with caplog.at_level(logging.ERROR):
        assert reloader.check() is False
    assert "keeping the current client certificate" in caplog.text and "do not belong together" in caplog.text
    assert reloader.loaded.cert == renewed.cert
