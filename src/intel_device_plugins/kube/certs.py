"""Self-managed webhook certificates: a private CA, a serving certificate, rotation and CA-bundle patches.

Used when the operator runs without cert-manager. The certificates live in one Secret (keys ``ca.crt``,
``tls.crt``, ``tls.key`` and, after a renewal, ``ca-previous.crt``); every replica serves from it and any
replica renews it. All decisions here are pure functions of the Secret data and the clock.

The CA's private key is never stored: each serving certificate gets a CA of its own, whose key signs that one
certificate and is then dropped. Whoever can read the Secret can therefore impersonate the webhook server
(its key is there, unavoidably), but cannot mint a certificate for any other name that the webhook
configurations would trust. A renewal is a CA rollover: the previous CA stays in the published bundle until
it expires, so replicas still serving the previous certificate stay trusted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from intel_device_plugins.kube import x509 as x509_issuer
from intel_device_plugins.kube.certdata import (
    LEGACY_CA_KEY,
    CertBundle,
    ca_bundle_patch,
    service_dns_names,
)

__all__ = [
    "LEGACY_CA_KEY",
    "CertBundle",
    "ca_bundle_patch",
    "issue",
    "new_ca",
    "new_serving",
    "next_check",
    "renewal_reason",
    "service_dns_names",
]

CA_VALIDITY: Final = dt.timedelta(days=3650)
"""Validity of a CA made by ``new_ca`` for other uses (the test control plane's PKI)."""
SERVING_VALIDITY: Final = dt.timedelta(days=365)
#: The per-certificate CA of the webhook lives as long as the certificate it signed.
WEBHOOK_CA_VALIDITY: Final = SERVING_VALIDITY
#: Renew when less than this fraction of the lifetime is left.
RENEW_FRACTION: Final = 1 / 3


def new_ca(
    now: dt.datetime,
    common_name: str = "intel-deviceplugin-operator-ca",
    validity: dt.timedelta = CA_VALIDITY,
) -> tuple[bytes, bytes]:
    """Fresh self-signed CA (cert PEM, key PEM)."""
    return x509_issuer.new_ca(now, common_name, validity)


def common_name(dns_names: Sequence[str]) -> str:
    """The subject CN: the first DNS name, or its first label when the name exceeds X.509's 64 characters.

    Clients match the SANs, never the CN; the shipped overlay's Service name with its namespace
    (``intel-deviceplugins-webhook-service.inteldeviceplugins-system.svc``) is 65 characters long.
    """
    first = dns_names[0]
    return first if len(first) <= 64 else first.split(".", 1)[0][:64]


def new_serving(
    ca_cert: bytes,
    ca_key: bytes,
    dns_names: Sequence[str],
    now: dt.datetime,
    ip_addresses: Sequence[str] = (),
) -> tuple[bytes, bytes]:
    """Serving certificate for ``dns_names`` (and ``ip_addresses``) signed by the CA (cert PEM, key PEM)."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name(dns_names))])
    return x509_issuer.new_leaf(
        ca_cert,
        ca_key,
        subject,
        ExtendedKeyUsageOID.SERVER_AUTH,
        now,
        SERVING_VALIDITY,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
    )


def _due(cert: x509.Certificate, now: dt.datetime) -> bool:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= end - (end - start) * RENEW_FRACTION


def renewal_reason(bundle: CertBundle | None, dns_names: Sequence[str], now: dt.datetime) -> str:
    """Why the bundle must be (re)issued, or "" when it is good. Never raises on garbage input."""
    if bundle is None:
        return "no certificate yet"
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        tls = x509.load_pem_x509_certificate(bundle.tls_cert)
        serialization.load_pem_private_key(bundle.tls_key, password=None)
    except ValueError:
        return "stored certificate or key does not parse"
    if bundle.stored_ca_key:
        return "the Secret holds a CA private key; re-issuing with a CA whose key is not kept"
    if _due(ca, now):
        return "CA certificate is due for renewal"
    if tls.issuer != ca.subject:
        return "serving certificate was not issued by the stored CA"
    try:
        tls.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):
        return "serving certificate signature does not match the CA"
    if _due(tls, now):
        return "serving certificate is due for renewal"
    try:
        sans = set(
            tls.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
                x509.DNSName
            )
        )
    except x509.ExtensionNotFound:
        sans = set()
    if not set(dns_names) <= sans:
        return "serving certificate does not cover the Service DNS names"
    return ""


def issue(bundle: CertBundle | None, dns_names: Sequence[str], now: dt.datetime) -> CertBundle:
    """New bundle: a new CA signs a new serving certificate and its key is dropped; the old CA stays trusted.

    The previous CA certificate is kept in the bundle until it expires, so a replica that still serves the
    previous certificate keeps being trusted while it picks up the new one.
    """
    ca_cert, ca_key = new_ca(now, validity=WEBHOOK_CA_VALIDITY)
    tls_cert, tls_key = new_serving(ca_cert, ca_key, dns_names, now)
    del ca_key  # signs exactly one certificate; never stored
    previous = bundle.ca_cert if bundle is not None and not _expired(bundle.ca_cert, now) else b""
    return CertBundle(ca_cert, tls_cert, tls_key, previous)


def _expired(pem: bytes, now: dt.datetime) -> bool:
    try:
        return x509.load_pem_x509_certificate(pem).not_valid_after_utc <= now
    except ValueError:
        return True


def next_check(bundle: CertBundle, now: dt.datetime, ceiling: dt.timedelta = dt.timedelta(hours=1)) -> float:
    """Seconds until the bundle should be looked at again (at renewal time, at most ``ceiling``)."""
    tls = x509.load_pem_x509_certificate(bundle.tls_cert)
    start, end = tls.not_valid_before_utc, tls.not_valid_after_utc
    due = end - (end - start) * RENEW_FRACTION
    return max(1.0, min((due - now).total_seconds(), ceiling.total_seconds()))


def handle_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """One request of the child process: ``check`` a Secret's data or ``issue`` a new bundle.

    Input: ``op``, ``data`` (the Secret's base64 data or null), ``dns`` (names), ``now`` (ISO 8601).
    Output: ``reason`` ("" when good) or ``data`` (the new Secret data), and ``next_check_s``.
    """
    now = dt.datetime.fromisoformat(str(request["now"]))
    dns = [str(n) for n in request["dns"]]
    bundle = CertBundle.from_secret_data(request.get("data"))
    if request["op"] == "check":
        reason = renewal_reason(bundle, dns, now)
        due = next_check(bundle, now, ceiling=dt.timedelta(days=3650)) if bundle and not reason else 0.0
        return {"reason": reason, "next_check_s": due}
    if request["op"] == "issue":
        fresh = issue(bundle, dns, now)
        return {
            "data": fresh.to_secret_data(),
            "next_check_s": next_check(fresh, now, ceiling=dt.timedelta(days=3650)),
        }
    raise ValueError(f"unknown op {request['op']!r}")


def main() -> int:
    """Child-process entry: one JSON request on stdin, one JSON answer on stdout."""
    import json
    import sys

    try:
        answer = handle_request(json.loads(sys.stdin.read()))
    except (KeyError, TypeError, ValueError) as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
