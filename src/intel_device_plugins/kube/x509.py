"""The one certificate issuer: CAs and the leaf certificates they sign, as pure functions of the clock.

The operator's self-managed webhook certificates, RMD's mutual TLS and the test tier's control plane all
issue here, with ECDSA P-256 keys unless RSA is asked for. Every certificate is backdated a little, which
absorbs clock skew between the issuer and whoever verifies.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from ipaddress import ip_address
from typing import Final, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

KeyType = Literal["ecdsa", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
BACKDATE: Final = dt.timedelta(minutes=5)


def new_key(key_type: KeyType = "ecdsa") -> PrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def pem_key(key: PrivateKey) -> bytes:
    """The key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _key_usage(*, digital_signature: bool, key_encipherment: bool, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: PrivateKey, now: dt.datetime, validity: dt.timedelta
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
    )


def new_ca(
    now: dt.datetime, common_name: str, validity: dt.timedelta, key_type: KeyType = "ecdsa"
) -> tuple[bytes, bytes]:
    """A fresh self-signed CA that signs leaf certificates only: (cert PEM, key PEM)."""
    key = new_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key, now, validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            _key_usage(digital_signature=True, key_encipherment=False, cert_sign=True), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)


def new_leaf(
    ca_cert: bytes,
    ca_key: bytes,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    now: dt.datetime,
    validity: dt.timedelta,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    key_type: KeyType = "ecdsa",
) -> tuple[bytes, bytes]:
    """A certificate for ``subject`` with extended key ``usage`` (server or client), signed by the CA.

    The names go into the subject alternative names, which is what clients match; ``(cert PEM, key PEM)``.
    """
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("CA key is neither an EC nor an RSA key")
    key = new_key(key_type)
    builder = (
        _builder(subject, ca.subject, key, now, validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _key_usage(digital_signature=True, key_encipherment=key_type == "rsa", cert_sign=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        # The authority key identifier picks the right CA where two share a name (an old and a new one
        # while certificates are rotated).
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
        )
    )
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ip_address(address)) for address in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(signer, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)
