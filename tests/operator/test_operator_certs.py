"""Self-managed certificates: issue, verify, rotate, CA rollover and CA-bundle patches."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from pathlib import Path
from typing import Any

from cryptography import x509

from intel_device_plugins.operator.certs import (
    CA_VALIDITY,
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
    junk = CertBundle(b"x", b"y", b"z", b"w")
    assert "does not parse" in renewal_reason(junk, DNS, NOW)


def test_serving_rotation_keeps_ca() -> None:
    bundle = issue(None, DNS, NOW)
    later = NOW + SERVING_VALIDITY * 0.7
    assert renewal_reason(bundle, DNS, later) == "serving certificate is due for renewal"
    renewed = issue(bundle, DNS, later)
    assert renewed.ca_cert == bundle.ca_cert and renewed.tls_cert != bundle.tls_cert
    assert renewal_reason(renewed, DNS, later) == ""
    assert renewed.ca_bundle() == bundle.ca_cert


def test_dns_change_forces_reissue() -> None:
    bundle = issue(None, DNS, NOW)
    other = service_dns_names("other", "ns")
    assert "does not cover" in renewal_reason(bundle, other, NOW)
    assert renewal_reason(issue(bundle, other, NOW), other, NOW) == ""


def test_ca_rollover_keeps_previous_ca_in_bundle() -> None:
    bundle = issue(None, DNS, NOW)
    later = NOW + CA_VALIDITY * 0.8
    assert renewal_reason(bundle, DNS, later) == "CA certificate is due for renewal"
    rolled = issue(bundle, DNS, later)
    assert rolled.ca_cert != bundle.ca_cert and rolled.previous_ca_cert == bundle.ca_cert
    assert rolled.ca_bundle() == rolled.ca_cert + bundle.ca_cert
    again = issue(rolled, DNS, later + dt.timedelta(days=1))
    assert again.previous_ca_cert == bundle.ca_cert


def test_foreign_serving_cert_is_detected() -> None:
    a, b = issue(None, DNS, NOW), issue(None, DNS, NOW)
    mixed = CertBundle(a.ca_cert, a.ca_key, b.tls_cert, b.tls_key)
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
