"""Loading a certificate chain and its key held in memory into an SSL context (standard library only)."""

from __future__ import annotations

import os
import ssl
import tempfile


def load_pem_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``ctx.load_cert_chain`` for PEM in memory: ssl loads a key pair only from files, so they are
    written to a private directory (mode 0600, created exclusively) that is removed at once."""
    with tempfile.TemporaryDirectory(prefix="tls-chain-") as tmp:
        cert_path, key_path = os.path.join(tmp, "c"), os.path.join(tmp, "k")
        for path, data in ((cert_path, cert_pem), (key_path, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert_path, key_path)
