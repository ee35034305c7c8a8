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

import base64
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from ipaddress import ip_address
from typing import Any, Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY: Final = dt.timedelta(days=3650)
"""Validity of a CA made by ``new_ca`` for other uses (the test control plane's PKI)."""
SERVING_VALIDITY: Final = dt.timedelta(days=365)
#: The per-certificate CA of the webhook lives as long as the certificate it signed.
WEBHOOK_CA_VALIDITY: Final = SERVING_VALIDITY
#: Renew when less than this fraction of the lifetime is left.
RENEW_FRACTION: Final = 1 / 3
#: Backdating absorbs clock skew between the operator and the API server.
BACKDATE: Final = dt.timedelta(minutes=5)
#: The Secret key under which earlier versions stored the CA's private key; its presence forces a re-issue.
LEGACY_CA_KEY: Final = "ca.key"


@dataclasses.dataclass(frozen=True)
class CertBundle:
    """PEM CA certificate and serving key pair, plus the previous CA kept in the bundle after a renewal.

    ``stored_ca_key`` records that the Secret it was read from still holds a CA private key.
    """

    ca_cert: bytes
    tls_cert: bytes
    tls_key: bytes
    previous_ca_cert: bytes = b""
    stored_ca_key: bool = False

    def to_secret_data(self) -> dict[str, str]:
        """Base64 ``data`` of the Secret; never a CA private key."""
        out = {"ca.crt": self.ca_cert, "tls.crt": self.tls_cert, "tls.key": self.tls_key}
        if self.previous_ca_cert:
            out["ca-previous.crt"] = self.previous_ca_cert
        return {k: base64.b64encode(v).decode() for k, v in out.items()}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> CertBundle | None:
        """Bundle from a Secret's base64 ``data``; None when keys are missing or not base64."""
        if not data:
            return None
        try:
            raw = {k: base64.b64decode(v, validate=True) for k, v in data.items()}
            return cls(
                raw["ca.crt"],
                raw["tls.crt"],
                raw["tls.key"],
                raw.get("ca-previous.crt", b""),
                stored_ca_key=LEGACY_CA_KEY in raw,
            )
        except (KeyError, ValueError):
            return None

    def ca_bundle(self) -> bytes:
        """PEM CA bundle for the webhook configurations: current CA plus, after a renewal, the previous."""
        return self.ca_cert + self.previous_ca_cert


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(
    now: dt.datetime,
    common_name: str = "intel-deviceplugin-operator-ca",
    validity: dt.timedelta = CA_VALIDITY,
) -> tuple[bytes, bytes]:
    """Fresh self-signed CA (cert PEM, key PEM)."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


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
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise ValueError("CA key is not an EC key")
    key = _key()
    dns_sans = [x509.DNSName(name) for name in dns_names]
    ip_sans = [x509.IPAddress(ip_address(address)) for address in ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name(dns_names))]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + SERVING_VALIDITY)
        .add_extension(x509.SubjectAlternativeName([*dns_sans, *ip_sans]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """Names the API server may use to reach the webhook Service."""
    return (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")


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


def ca_bundle_patch(config: Mapping[str, Any], ca_bundle: bytes) -> list[dict[str, Any]]:
    """JSON patch that sets ``caBundle`` on every webhook of a configuration; empty when already set."""
    wanted = base64.b64encode(ca_bundle).decode()
    ops: list[dict[str, Any]] = []
    for i, hook in enumerate(config.get("webhooks") or ()):
        cc = hook.get("clientConfig") or {}
        if cc.get("caBundle") != wanted:
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted})
    if ops:
        # Guard against a concurrent reorder of the list between our read and the patch.
        names = [
            {"op": "test", "path": f"/webhooks/{i}/name", "value": h.get("name")}
            for i, h in enumerate(config.get("webhooks") or ())
        ]
        ops = names + ops
    return ops
