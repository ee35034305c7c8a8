"""The webhook certificate Secret's data and the CA-bundle patch: plain data, no cryptography.

Kept apart from ``certs`` so that the long-running operator never imports cryptography (about 8 MiB of
RSS): parsing, checking and issuing certificates run in a short-lived child process (``selfcerts``).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any, Final

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


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """Names the API server may use to reach the webhook Service."""
    return (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")


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
