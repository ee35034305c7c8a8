"""Rotation of RMD's certificates without a failed call: the plan, as pure functions of the two Secrets.

RMD v0.3 reads its serving certificate and its client CA only at start, and admits exactly the client
certificates in its admin directory, which it re-reads when the directory changes. Clients (the operator,
the device plugin) reload their certificate and trust bundle some time after the Secret changes (the kubelet's
Secret sync, their own checks). So a renewal is three steps, each started only when the previous one has
reached every RMD pod (the DaemonSet's rolling update is complete) and every client (``grace`` has passed):

1. ``trust``: a new CA joins both CA bundles (``ca.crt`` of the server and the client Secret) and the next
   client certificate joins the admin directory (``next.crt``); the next server certificate waits in the
   server Secret (``next.crt``/``next.key``, not mounted). RMD restarts to read the new client CA.
2. ``switch``: RMD serves the new server certificate (restart) and clients get the new client certificate;
   the old one stays admitted (``previous.crt``) because clients switch one by one.
3. ``drop``: the old CA leaves both bundles and the old client certificate the admin directory (restart).

At every moment each client certificate in use chains to every running RMD's client CA and is in its admin
directory, and every RMD's serving certificate chains to every client's bundle (tests/rmd/test_rmd_rotation.py
checks this over the versions that can meet). The phase is read from the client Secret's keys, so a restarted
operator carries on where the last one stopped.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
from collections.abc import Mapping, Sequence
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding

from intel_device_plugins.rmd import pki
from intel_device_plugins.rmd.reconcile import RMD_CLIENT_SECRET, RMD_SERVER_SECRET

CA_KEY: Final = "ca.crt"
CERT_KEY: Final = "tls.crt"
PRIVATE_KEY: Final = "tls.key"
NEXT_CERT: Final = "next.crt"  # the certificate of the next step (client: admitted already; server: waiting)
NEXT_KEY: Final = "next.key"
PREVIOUS_CERT: Final = "previous.crt"  # client Secret only: the replaced certificate, admitted until ``drop``
ROTATE_ANNOTATION: Final = "intel.com/rmd-cert-rotate"  # on the client Secret: rotate now (then removed)
STEP_AT_ANNOTATION: Final = "intel.com/rmd-cert-rotation-step-at"  # on the client Secret: when a step ran
ROLLOUT_CHECK_S: Final = 5.0  # how often a rotation step looks at RMD's rolling update
RENEW_FRACTION: Final = 1 / 3  # renew when a third of a certificate's lifetime is left, as the webhook does

SecretData = Mapping[str, bytes]


class Phase(enum.Enum):
    STEADY = "steady"
    TRUSTING = "trusting"  # new CA trusted everywhere, next client certificate admitted
    SWITCHED = "switched"  # new certificates in use, the old client certificate still admitted


class Step(enum.Enum):
    TRUST = "trust"
    SWITCH = "switch"
    DROP = "drop"


class RotationError(ValueError):
    """The Secrets cannot be rotated as they are (missing or unreadable keys); the message names them."""


@dataclasses.dataclass(frozen=True)
class Tls:
    """The data of ``intel-rmd-server-tls`` and ``intel-rmd-client-tls``."""

    server: SecretData
    client: SecretData


@dataclasses.dataclass(frozen=True)
class Decision:
    step: Step | None
    reason: str
    look_again_s: float  # when the plan may change without a write


def phase(tls: Tls) -> Phase:
    if NEXT_CERT in tls.client:
        return Phase.TRUSTING
    if PREVIOUS_CERT in tls.client:
        return Phase.SWITCHED
    return Phase.STEADY


def server_material(server: SecretData) -> str:
    """A digest of what RMD reads only at start (client CA, serving certificate and key): the pod template
    carries it, so RMD pods restart exactly when it changes."""
    digest = hashlib.sha256()
    for key in (CA_KEY, CERT_KEY, PRIVATE_KEY):
        digest.update(key.encode() + b"\0" + server.get(key, b"") + b"\0")
    return digest.hexdigest()[:16]


def _cert(data: SecretData, key: str, secret: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(data[key])
    except KeyError:
        raise RotationError(f"Secret {secret}: no {key}") from None
    except ValueError as exc:
        raise RotationError(f"Secret {secret}: {key} is not a PEM certificate: {exc}") from None


def _bundle(data: SecretData, secret: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data[CA_KEY])
    except KeyError:
        raise RotationError(f"Secret {secret}: no {CA_KEY}") from None
    except ValueError as exc:
        raise RotationError(f"Secret {secret}: {CA_KEY} is not a PEM bundle: {exc}") from None
    return certs


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _renew_at(cert: x509.Certificate) -> dt.datetime:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return end - (end - start) * RENEW_FRACTION


def renewal_due_at(tls: Tls) -> dt.datetime:
    """When the certificates in use (both leaves and the CA that issued them) are due for renewal."""
    leaves = [_cert(tls.server, CERT_KEY, RMD_SERVER_SECRET), _cert(tls.client, CERT_KEY, RMD_CLIENT_SECRET)]
    cas = _bundle(tls.client, RMD_CLIENT_SECRET)
    issuers = [ca for ca in cas if any(issued_by(leaf, ca) for leaf in leaves)]
    return min(_renew_at(c) for c in [*leaves, *issuers])


def next_step(
    tls: Tls,
    now: dt.datetime,
    rollout_done: bool,
    step_age_s: float,
    grace_s: float,
    requested: bool = False,
) -> Decision:
    """The step to take now, if any. A step waits until RMD's rolling update after the previous one is
    complete and ``grace_s`` (every client has reloaded the Secret) has passed. ``requested`` (the client
    Secret's ``ROTATE_ANNOTATION``) starts a rotation before the certificates are due."""
    current = phase(tls)
    if current is Phase.STEADY:
        due = renewal_due_at(tls)
        if requested:
            return Decision(Step.TRUST, f"rotation requested ({ROTATE_ANNOTATION})", 0.0)
        if now >= due:
            return Decision(Step.TRUST, f"certificates due for renewal since {due:%Y-%m-%dT%H:%M:%SZ}", 0.0)
        return Decision(None, "", (due - now).total_seconds())
    step = Step.SWITCH if current is Phase.TRUSTING else Step.DROP
    if not rollout_done:
        return Decision(None, f"{step.value}: waiting for RMD's rolling update", ROLLOUT_CHECK_S)
    if step_age_s < grace_s:
        return Decision(None, f"{step.value}: waiting for clients to reload", grace_s - step_age_s)
    return Decision(step, f"{step.value}: RMD and clients have the previous step", 0.0)


@dataclasses.dataclass(frozen=True)
class NewMaterial:
    """What a ``trust`` step introduces: a CA (its key is never stored) and the leaves it issued."""

    ca: bytes
    server: pki.Issued
    client: pki.Issued


def issue(tls: Tls, validity: dt.timedelta) -> NewMaterial:
    """A new CA and leaves of the key type in use (not pure: fresh keys)."""
    key = _cert(tls.client, CERT_KEY, RMD_CLIENT_SECRET).public_key()
    key_type: pki.KeyType = "rsa" if isinstance(key, rsa.RSAPublicKey) else "ecdsa"
    ca = pki.new_ca(f"intel-rmd-ca-{dt.datetime.now(dt.UTC):%Y%m%d%H%M%S}", key_type, validity)
    return NewMaterial(
        ca.cert,
        pki.new_server(ca, key_type, validity=validity),
        pki.new_client(ca, key_type=key_type, validity=validity),
    )


def _pem(certs: Sequence[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(Encoding.PEM) for c in certs)


def _issuers_of(tls: Tls, leaves: Sequence[bytes]) -> bytes:
    """The CAs of both bundles that issued one of ``leaves``, once each, in bundle order."""
    seen: dict[bytes, x509.Certificate] = {}
    for ca in [*_bundle(tls.client, RMD_CLIENT_SECRET), *_bundle(tls.server, RMD_SERVER_SECRET)]:
        seen.setdefault(ca.fingerprint(hashes.SHA256()), ca)
    parsed = [x509.load_pem_x509_certificate(leaf) for leaf in leaves]
    return _pem([ca for ca in seen.values() if any(issued_by(leaf, ca) for leaf in parsed)])


def trust(tls: Tls, new: NewMaterial) -> Tls:
    """Step 1: both bundles = the CAs in use + the new CA; next client certificate admitted; next server
    certificate staged. Built from the certificates in use, so repeating it after a half-written step does
    not pile up CAs."""
    old = _issuers_of(tls, [tls.server[CERT_KEY], tls.client[CERT_KEY]])
    bundle = old + new.ca
    server = {**_without(tls.server), CA_KEY: bundle, NEXT_CERT: new.server.cert, NEXT_KEY: new.server.key}
    client = {**_without(tls.client), CA_KEY: bundle, NEXT_CERT: new.client.cert, NEXT_KEY: new.client.key}
    return Tls(server, client)


def switch(tls: Tls) -> Tls:
    """Step 2: RMD serves the next server certificate, clients use the next client certificate, the one
    they leave stays admitted. A server Secret already switched (the client Secret's write failed) stays."""
    for key in (NEXT_CERT, NEXT_KEY):
        if key not in tls.client:
            raise RotationError(f"Secret {RMD_CLIENT_SECRET}: no {key} to switch to")
    server = dict(tls.server)
    if NEXT_CERT in server and NEXT_KEY in server:
        server = {**_without(server), CERT_KEY: server[NEXT_CERT], PRIVATE_KEY: server[NEXT_KEY]}
    elif not _same_issuer(server[CERT_KEY], tls.client[NEXT_CERT], tls.client[CA_KEY]):
        raise RotationError(f"Secret {RMD_SERVER_SECRET}: no {NEXT_CERT} to switch to")
    client = {
        **_without(tls.client),
        CERT_KEY: tls.client[NEXT_CERT],
        PRIVATE_KEY: tls.client[NEXT_KEY],
        PREVIOUS_CERT: tls.client[CERT_KEY],
    }
    return Tls(server, client)


def _same_issuer(server_cert: bytes, client_cert: bytes, bundle: bytes) -> bool:
    """``server_cert`` and ``client_cert`` were issued by the same CA of ``bundle``."""
    server, client = x509.load_pem_x509_certificate(server_cert), x509.load_pem_x509_certificate(client_cert)
    return any(
        issued_by(server, ca) and issued_by(client, ca) for ca in x509.load_pem_x509_certificates(bundle)
    )


def drop(tls: Tls) -> Tls:
    """Step 3: only the CA of the certificates in use stays trusted; the previous client certificate leaves
    the admin directory."""
    bundle = _issuers_of(tls, [tls.server[CERT_KEY], tls.client[CERT_KEY]])
    return Tls({**_without(tls.server), CA_KEY: bundle}, {**_without(tls.client), CA_KEY: bundle})


def _without(data: SecretData) -> dict[str, bytes]:
    return {k: v for k, v in data.items() if k not in (NEXT_CERT, NEXT_KEY, PREVIOUS_CERT)}


def apply(step: Step, tls: Tls, new: NewMaterial | None) -> Tls:
    if step is Step.TRUST:
        assert new is not None
        return trust(tls, new)
    if step is Step.SWITCH:
        return switch(tls)
    return drop(tls)
