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

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from intel_device_plugins.operator.certs import new_ca, new_serving


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files one control plane uses."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path

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
    )
