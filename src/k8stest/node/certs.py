"""The kubelet's client identity."""

from __future__ import annotations

import json
from pathlib import Path

from k8stest.pki import client_certificate


def node_client_certificate(ca_cert_pem: bytes, ca_key_pem: bytes, node_name: str) -> tuple[bytes, bytes]:
    """(cert, key) PEM for ``system:node:<name>`` in ``system:nodes``: the identity the Node
    authorizer grants a kubelet's rights to."""
    return client_certificate(ca_cert_pem, ca_key_pem, f"system:node:{node_name}", "system:nodes")


def client_cert_kubeconfig(server: str, ca_file: Path, cert_file: Path, key_file: Path, user: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "k8stest", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert_file), "client-key": str(key_file)}}
        ],
        "contexts": [{"name": "k8stest", "context": {"cluster": "k8stest", "user": user}}],
        "current-context": "k8stest",
    }
    return json.dumps(doc, indent=1)
