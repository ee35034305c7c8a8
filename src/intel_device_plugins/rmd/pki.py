"""Certificates for RMD's mutual TLS: a CA, RMD's server certificate and role-carrying client certificates.

RMD authorises a client by its certificate: by default only certificates listed in its admin and user
directories get in (``signature``); configured otherwise, the organisational unit is the role (Admin, Root,
User) or the common name the user. The simulator, the tests, the demo and ``intel-rmd-certs`` (which writes
the Secrets a cluster needs) all issue certificates here, with ECDSA P-256 or RSA keys.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Final

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.kube import x509 as x509_issuer
from intel_device_plugins.kube.x509 import KeyType as KeyType

SERVER_NAME: Final = "rmd-nameserver"  # the name RMD's certificate carries and clients verify
# Certificates last 90 days (the operator and the plugin warn two weeks ahead); re-run intel-rmd-certs
# to renew them. Each run makes a new CA, whose key is never written anywhere.
VALIDITY: Final = dt.timedelta(days=90)


@dataclasses.dataclass(frozen=True)
class Issued:
    """A PEM certificate and its PEM (PKCS#8) private key."""

    cert: bytes
    key: bytes


def new_ca(
    common_name: str = "intel-rmd-ca",
    key_type: KeyType = "ecdsa",
    validity: dt.timedelta = VALIDITY,
    now: dt.datetime | None = None,
) -> Issued:
    return Issued(*x509_issuer.new_ca(now or dt.datetime.now(dt.UTC), common_name, validity, key_type))


def _issue(
    ca: Issued,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    key_type: KeyType,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    validity: dt.timedelta = VALIDITY,
    now: dt.datetime | None = None,
) -> Issued:
    return Issued(
        *x509_issuer.new_leaf(
            ca.cert,
            ca.key,
            subject,
            usage,
            now or dt.datetime.now(dt.UTC),
            validity,
            dns_names=dns,
            ip_addresses=ips,
            key_type=key_type,
        )
    )


def new_server(
    ca: Issued,
    key_type: KeyType = "ecdsa",
    ips: Sequence[str] = ("127.0.0.1",),
    validity: dt.timedelta = VALIDITY,
) -> Issued:
    """RMD's serving certificate for ``rmd-nameserver`` (and the given IPs)."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)])
    return _issue(ca, subject, ExtendedKeyUsageOID.SERVER_AUTH, key_type, (SERVER_NAME,), ips, validity)


def new_client(
    ca: Issued,
    user: str = "intel-rmd-operator",
    role: str = "Admin",
    key_type: KeyType = "ecdsa",
    validity: dt.timedelta = VALIDITY,
    now: dt.datetime | None = None,
) -> Issued:
    """A client certificate with ``role`` as OU and ``user`` as CN (what RMD's ``role`` and ``username``
    authorisation read; under its default, ``signature``, only the certificate itself counts)."""
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
            x509.NameAttribute(NameOID.COMMON_NAME, user),
        ]
    )
    return _issue(ca, subject, ExtendedKeyUsageOID.CLIENT_AUTH, key_type, validity=validity, now=now)


def secret(name: str, namespace: str, ca: Issued, leaf: Issued) -> dict[str, object]:
    """A ``kubernetes.io/tls`` Secret with the CA added under ``ca.crt``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {
            "ca.crt": ca.cert.decode(),
            "tls.crt": leaf.cert.decode(),
            "tls.key": leaf.key.decode(),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``intel-rmd-certs``: print the two Secrets a cluster needs (RMD's server side and a client)."""
    import sys

    import yaml

    parser = GoFlagParser(prog="intel-rmd-certs", description=main.__doc__)
    parser.add_argument("--namespace", default="intel-rmd")
    parser.add_argument("--key-type", choices=["ecdsa", "rsa"], default="ecdsa")
    parser.add_argument("--days", type=int, default=VALIDITY.days, help="validity of every certificate")
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error("--days must be at least 1")
    validity = dt.timedelta(days=args.days)
    ca = new_ca(key_type=args.key_type, validity=validity)
    docs = [
        secret("intel-rmd-server-tls", args.namespace, ca, new_server(ca, args.key_type, validity=validity)),
        secret(
            "intel-rmd-client-tls",
            args.namespace,
            ca,
            new_client(ca, key_type=args.key_type, validity=validity),
        ),
    ]
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=True))
    return 0
