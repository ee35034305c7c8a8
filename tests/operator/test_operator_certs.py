"""Self-managed certificates: issue, verify, rotate, CA rollover and CA-bundle patches."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from intel_device_plugins.kube.certs import (
    SERVING_VALIDITY,
    CertBundle,
    ca_bundle_patch,
    issue,
    new_ca,
    new_serving,
    next_check,
    renewal_reason,
    service_dns_names,
)
from intel_device_plugins.kube.selfcerts import SelfManagedCerts, SelfManagedConfig

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
DNS = service_dns_names("svc", "ns")


def test_fresh_issue_is_valid_and_loadable(tmp_path: Path) -> None:
    assert renewal_reason(None, DNS, NOW) == "no certificate yet"
    bundle = issue(None, DNS, NOW)
    assert renewal_reason(bundle, DNS, NOW) == ""
    cert = x509.load_pem_x509_certificate(bundle.tls_cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(DNS)
    (tmp_path / "tls.crt").write_bytes(bundle.tls_cert)
    (tmp_path / "tls.key").write_bytes(bundle.tls_key)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cadata=bundle.ca_bundle().decode())
    assert client.cert_store_stats()["x509_ca"] == 1


def test_secret_round_trip_and_garbage() -> None:
    bundle = issue(None, DNS, NOW)
    assert CertBundle.from_secret_data(bundle.to_secret_data()) == bundle
    assert CertBundle.from_secret_data(None) is None
    assert CertBundle.from_secret_data({"ca.crt": "!!"}) is None
    junk = CertBundle(b"x", b"z", b"w")
    assert "does not parse" in renewal_reason(junk, DNS, NOW)


def test_renewal_rolls_to_a_new_ca_and_keeps_the_previous_one_trusted() -> None:
    bundle = issue(None, DNS, NOW)
    later = NOW + SERVING_VALIDITY * 0.7
    assert renewal_reason(bundle, DNS, later) in (
        "CA certificate is due for renewal",
        "serving certificate is due for renewal",
    )
    renewed = issue(bundle, DNS, later)
    assert renewed.ca_cert != bundle.ca_cert and renewed.tls_cert != bundle.tls_cert
    assert renewal_reason(renewed, DNS, later) == ""
    assert renewed.ca_bundle() == renewed.ca_cert + bundle.ca_cert
    # the previous certificate still verifies against the published bundle
    old_tls = x509.load_pem_x509_certificate(bundle.tls_cert)
    bundle_cas = x509.load_pem_x509_certificates(renewed.ca_bundle())
    assert any(old_tls.issuer == ca.subject for ca in bundle_cas)
    # once the previous CA has expired it leaves the bundle
    much_later = NOW + SERVING_VALIDITY + dt.timedelta(days=1)
    assert issue(renewed, DNS, much_later).previous_ca_cert == renewed.ca_cert


def test_the_ca_private_key_is_never_stored() -> None:
    bundle = issue(None, DNS, NOW)
    data = bundle.to_secret_data()
    assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
    decoded = b"".join(base64.b64decode(v) for v in data.values())
    assert decoded.count(b"PRIVATE KEY-----") == 2  # BEGIN and END of the serving key only
    renewed = issue(bundle, DNS, NOW + SERVING_VALIDITY * 0.7)
    assert "ca.key" not in renewed.to_secret_data()


def test_a_secret_holding_a_ca_key_is_reissued_without_it() -> None:
    ca_cert, ca_key = new_ca(NOW)
    tls_cert, tls_key = new_serving(ca_cert, ca_key, DNS, NOW)
    legacy = {
        k: base64.b64encode(v).decode()
        for k, v in {"ca.crt": ca_cert, "ca.key": ca_key, "tls.crt": tls_cert, "tls.key": tls_key}.items()
    }
    bundle = CertBundle.from_secret_data(legacy)
    assert bundle is not None and bundle.stored_ca_key
    assert "CA private key" in renewal_reason(bundle, DNS, NOW)
    fresh = issue(bundle, DNS, NOW)
    assert "ca.key" not in fresh.to_secret_data() and fresh.previous_ca_cert == ca_cert
    assert renewal_reason(CertBundle.from_secret_data(fresh.to_secret_data()), DNS, NOW) == ""


def test_dns_change_forces_reissue() -> None:
    bundle = issue(None, DNS, NOW)
    other = service_dns_names("other", "ns")
    assert "does not cover" in renewal_reason(bundle, other, NOW)
    assert renewal_reason(issue(bundle, other, NOW), other, NOW) == ""


def test_foreign_serving_cert_is_detected() -> None:
    a, b = issue(None, DNS, NOW), issue(None, DNS, NOW)
    mixed = CertBundle(a.ca_cert, b.tls_cert, b.tls_key)
    assert "signature does not match the CA" in renewal_reason(mixed, DNS, NOW)


def test_next_check_bounds() -> None:
    bundle = issue(None, DNS, NOW)
    assert next_check(bundle, NOW) == 3600.0
    assert next_check(bundle, NOW + SERVING_VALIDITY) == 1.0


def test_ca_bundle_patch() -> None:
    bundle = issue(None, DNS, NOW)
    want = base64.b64encode(bundle.ca_bundle()).decode()
    first: dict[str, Any] = {"name": "a", "clientConfig": {}}
    config = {"webhooks": [first, {"name": "b", "clientConfig": {"caBundle": want}}]}
    ops = ca_bundle_patch(config, bundle.ca_bundle())
    assert {"op": "test", "path": "/webhooks/1/name", "value": "b"} in ops
    assert [o for o in ops if o["op"] == "add"] == [
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": want}
    ]
    first["clientConfig"]["caBundle"] = want
    assert ca_bundle_patch(config, bundle.ca_bundle()) == []


def test_long_service_names_fit_the_common_name() -> None:
    """The shipped self-signed overlay's names give a 65-character first DNS name (CN limit: 64)."""
    names = service_dns_names("intel-deviceplugins-webhook-service", "inteldeviceplugins-system")
    assert len(names[0]) == 65
    bundle = issue(None, names, NOW)
    cert = x509.load_pem_x509_certificate(bundle.tls_cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == list(names)
    assert renewal_reason(bundle, names, NOW) == ""


def test_serving_certificate_can_name_ip_addresses() -> None:
    ca_cert, ca_key = new_ca(NOW)
    cert_pem, _ = new_serving(ca_cert, ca_key, ["localhost"], NOW, ip_addresses=["127.0.0.1", "::1"])
    sans = x509.load_pem_x509_certificate(cert_pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert sans.value.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.value.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]


class _Status(Exception):
    """An API error as the client raises it for a plain HTTP status."""

    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code}")
        self.response = type("Response", (), {"status_code": code})()


class _NoSecretNoCreate:
    """An API server where the Secret is gone and RBAC forbids creating it."""

    def __init__(self) -> None:
        self.created: list[Any] = []

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        raise _Status(404)

    async def create(self, obj: Any) -> Any:
        self.created.append(obj)
        raise _Status(403)


def test_a_forbidden_create_says_what_to_grant_or_reapply(tmp_path: Path) -> None:
    client = _NoSecretNoCreate()
    config = SelfManagedConfig("ops", "idp-webhook-server-cert", DNS, ("idp-mutating",), tmp_path)
    with pytest.raises(RuntimeError) as failure:
        asyncio.run(SelfManagedCerts(client, config).ensure(NOW))  # type: ignore[arg-type]
    message = str(failure.value)
    assert "Secret ops/idp-webhook-server-cert is missing" in message
    assert "`create` on secrets in namespace ops" in message and "re-apply the install" in message
    assert len(client.created) == 1  # tried once: a denial is not a race to retry
    assert not (tmp_path / "tls.key").exists()
