"""Certificates and keys for a throw-away control plane.

Why generate them here rather than let kube-apiserver self-sign with ``--cert-dir``: the clients
(Python, KCM, scheduler, kwok, the device-manager harness) need a CA to verify the apiserver, and
the ServiceAccount token signer needs a key pair we can also hand to KCM. One small CA made per
session covers all of it, and nothing outlives the session's temporary directory.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from intel_device_plugins.kube.certs import new_ca, new_serving
from intel_device_plugins.kube.x509 import new_leaf


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files one control plane uses."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    # The API server's identity towards kubelets (logs, exec); kubelets trust the same CA.
    kubelet_client_cert: Path
    kubelet_client_key: Path

    @property
    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def make_pki(directory: Path, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Pki:
    """Create a CA, a serving certificate for ``hosts`` and a ServiceAccount signing key."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_cert, ca_key = new_ca(now, "k8stest-ca")
    ips = [host for host in hosts if _is_ip(host)]
    names = [host for host in hosts if not _is_ip(host)]
    names += ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    serving_cert, serving_key = new_serving(ca_cert, ca_key, names, now, ip_addresses=ips)

    # RSA: the apiserver's ServiceAccount token signer accepts RSA and ECDSA; RSA is what
    # kubeadm uses and what every verifier supports.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    kubelet_cert, kubelet_key = client_certificate(
        ca_cert, ca_key, "kube-apiserver-kubelet-client", "kubeadm:cluster-admins"
    )
    return Pki(
        ca_cert=_write(directory / "ca.crt", ca_cert),
        ca_key=_write(directory / "ca.key", ca_key),
        serving_cert=_write(directory / "apiserver.crt", serving_cert),
        serving_key=_write(directory / "apiserver.key", serving_key),
        sa_key=_write(
            directory / "sa.key",
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        ),
        sa_pub=_write(directory / "sa.pub", sa_pub),
        kubelet_client_cert=_write(directory / "apiserver-kubelet-client.crt", kubelet_cert),
        kubelet_client_key=_write(directory / "apiserver-kubelet-client.key", kubelet_key),
    )


def client_certificate(
    ca_cert_pem: bytes, ca_key_pem: bytes, common_name: str, organization: str
) -> tuple[bytes, bytes]:
    """(cert, key) PEM of a client certificate for user ``common_name`` in group ``organization``."""
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    return new_leaf(
        ca_cert_pem, ca_key_pem, subject, ExtendedKeyUsageOID.CLIENT_AUTH, now, datetime.timedelta(days=1)
    )
