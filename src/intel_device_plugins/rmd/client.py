"""The RMD REST client: mutual TLS by default, bounded, with errors that carry RMD's own words.

RMD authorises callers by their client certificate, so every call is HTTPS with a client certificate
(ECDSA or RSA ≥ 2048 bits), verifying RMD's certificate for ``rmd-nameserver`` against the configured CA,
TLS 1.2 or newer. Bad key material is an error at start-up, never a reason to fall back to plain HTTP. Plain
HTTP (RMD's ``-d`` debug mode) exists only when ``allow_plain_http`` is set explicitly, and every client
created that way logs a warning.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import ssl
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from intel_device_plugins.kube.tlschain import load_pem_chain
from intel_device_plugins.rmd.pki import SERVER_NAME

log = logging.getLogger(__name__)

HTTPS_PORT: Final = 8443
DEBUG_HTTP_PORT: Final = 8081
MAX_RESPONSE: Final = 16 << 20
MIN_RSA_BITS: Final = 2048
# File names of a kubernetes.io/tls Secret with the CA added, as mounted into the operator's pods.
CA_FILE: Final = "ca.crt"
CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"
EXPIRY_WARNING: Final = dt.timedelta(days=14)


class TlsConfigError(ValueError):
    """Unusable client TLS material; the message names the file or the problem."""


class RmdCallError(Exception):
    """A call to RMD that did not succeed."""


class RmdUnreachable(RmdCallError):
    """No answer: connection refused, TLS handshake failure, timeout."""


class RmdApiError(RmdCallError):
    """RMD answered with an error status; ``text`` is its body (RMD's errors are plain text)."""

    def __init__(self, method: str, url: str, status: int, text: str) -> None:
        super().__init__(f"{method} {url}: {status} {text.strip()}")
        self.status = status
        self.text = text


@dataclasses.dataclass(frozen=True)
class TlsMaterial:
    """PEM CA bundle, client certificate and private key."""

    ca: bytes
    cert: bytes
    key: bytes
    source: str = "memory"

    @classmethod
    def from_dir(cls, directory: Path) -> TlsMaterial:
        """Read ``ca.crt``, ``tls.crt`` and ``tls.key`` (a mounted Secret)."""
        parts: list[bytes] = []
        for name in (CA_FILE, CERT_FILE, KEY_FILE):
            path = directory / name
            try:
                parts.append(path.read_bytes())
            except OSError as exc:
                raise TlsConfigError(f"cannot read {path}: {exc.strerror}") from exc
        return cls(parts[0], parts[1], parts[2], str(directory))


def check_material(material: TlsMaterial, now: dt.datetime | None = None) -> None:
    """Reject material RMD would refuse, that is weak or out of its validity period, naming the file and the
    problem (no fallback follows). An expired certificate would otherwise fail every call later as a
    dropped connection."""
    where = material.source
    now = now or dt.datetime.now(dt.UTC)
    try:
        cert = x509.load_pem_x509_certificate(material.cert)
    except ValueError as exc:
        raise TlsConfigError(f"{where}/{CERT_FILE}: not a PEM certificate") from exc
    try:
        cas = x509.load_pem_x509_certificates(material.ca)
    except ValueError as exc:
        raise TlsConfigError(f"{where}/{CA_FILE}: not a PEM certificate bundle") from exc
    if cert.not_valid_after_utc <= now:
        raise TlsConfigError(f"{where}/{CERT_FILE}: expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    if cert.not_valid_before_utc > now:
        raise TlsConfigError(
            f"{where}/{CERT_FILE}: not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )
    if all(ca.not_valid_after_utc <= now for ca in cas):
        raise TlsConfigError(f"{where}/{CA_FILE}: every CA certificate has expired")
    try:
        key = serialization.load_pem_private_key(material.key, password=None)
    except (ValueError, TypeError) as exc:
        raise TlsConfigError(f"{where}/{KEY_FILE}: not an unencrypted PEM private key") from exc
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise TlsConfigError(f"{where}/{KEY_FILE}: RSA key of {key.key_size} bits, at least 2048 needed")
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.key_size < 256:
            raise TlsConfigError(f"{where}/{KEY_FILE}: ECDSA curve {key.curve.name} is weaker than P-256")
    else:
        raise TlsConfigError(f"{where}/{KEY_FILE}: unsupported key type {type(key).__name__}")
    if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
        raise TlsConfigError(f"{where}: {CERT_FILE} and {KEY_FILE} do not belong together")


def _load_chain(ctx: ssl.SSLContext, material: TlsMaterial) -> None:
    load_pem_chain(ctx, material.cert, material.key)


def client_ssl_context(material: TlsMaterial) -> ssl.SSLContext:
    """TLS ≥ 1.2 client context presenting the client certificate and trusting only ``material.ca``."""
    check_material(material)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=material.ca.decode())
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, material)
    return ctx


def expiry_warning(material: TlsMaterial, now: dt.datetime, ahead: dt.timedelta = EXPIRY_WARNING) -> str:
    """A warning naming the certificate when it expires within ``ahead``, else ""."""
    cert = x509.load_pem_x509_certificate(material.cert)
    left = cert.not_valid_after_utc - now
    if left > ahead:
        return ""
    return (
        f"{material.source}/{CERT_FILE} expires on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC "
        f"({left.days} days): issue new certificates (intel-rmd-certs) and apply them"
    )


@dataclasses.dataclass
class TlsReloader:
    """Keeps a client context current with its mounted Secret: the kubelet updates the files when the Secret
    changes, and ``check`` loads new material into the same context (new connections use it)."""

    directory: Path
    context: ssl.SSLContext
    loaded: TlsMaterial
    warned: str = ""

    @classmethod
    def start(cls, directory: Path) -> TlsReloader:
        material = TlsMaterial.from_dir(directory)
        reloader = cls(directory, client_ssl_context(material), material)
        reloader.check()
        return reloader

    def check(self, now: dt.datetime | None = None) -> bool:
        """Reload if the files changed and the new material is good; True when it was reloaded. Bad new
        material is logged and the current one kept: the process keeps running."""
        now = now or dt.datetime.now(dt.UTC)
        reloaded = False
        try:
            material = TlsMaterial.from_dir(self.directory)
            if (material.ca, material.cert, material.key) != (
                self.loaded.ca,
                self.loaded.cert,
                self.loaded.key,
            ):
                check_material(material, now)
                self.context.load_verify_locations(cadata=material.ca.decode())
                _load_chain(self.context, material)
                self.loaded, reloaded = material, True
                log.info("reloaded the client certificate from %s", self.directory)
        except (TlsConfigError, ssl.SSLError) as exc:
            log.error("keeping the current client certificate: %s", exc)
        warning = expiry_warning(self.loaded, now)
        if warning and warning != self.warned:
            log.warning("%s", warning)
        self.warned = warning
        return reloaded


@dataclasses.dataclass(frozen=True)
class Transport:
    """How every RMD is reached: mutual TLS (``tls`` set), or plain HTTP only if explicitly allowed."""

    tls: ssl.SSLContext | None
    allow_plain_http: bool = False
    timeout_s: float = 10.0
    server_name: str = SERVER_NAME

    def __post_init__(self) -> None:
        if self.tls is None and not self.allow_plain_http:
            raise TlsConfigError("no client TLS material: RMD is reached over mutual TLS only")
        if self.tls is None:
            log.warning(
                "DEBUG: RMD is reached over PLAIN HTTP without authentication; never use this outside tests"
            )

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def port(self) -> int:
        return HTTPS_PORT if self.tls is not None else DEBUG_HTTP_PORT

    def base_url(self, host: str, port: int | None = None) -> str:
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"{self.scheme}://{host}:{port or self.port}"


class RmdClient:
    """Calls to one RMD at ``base_url`` over a shared aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, transport: Transport, base_url: str) -> None:
        scheme = urlsplit(base_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"RMD address {base_url!r} is not an http(s) URL")
        if scheme == "http" and not transport.allow_plain_http:
            raise TlsConfigError(f"refusing plain HTTP to {base_url}: RMD is reached over mutual TLS only")
        if scheme == "https" and transport.tls is None:
            raise TlsConfigError(f"{base_url} needs TLS but no client TLS material is configured")
        self._session = session
        self._transport = transport
        self.base_url = base_url.rstrip("/")

    async def _call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        url = self.base_url + path
        kwargs: dict[str, Any] = {"timeout": aiohttp.ClientTimeout(total=self._transport.timeout_s)}
        if self._transport.tls is not None:
            kwargs["ssl"] = self._transport.tls
            kwargs["server_hostname"] = self._transport.server_name
        if body is not None:
            kwargs["data"] = json.dumps(body)
        kwargs["headers"] = {"Content-Type": "application/json"}
        try:
            async with self._session.request(method, url, **kwargs) as resp:
                raw = await resp.content.read(MAX_RESPONSE + 1)
                status = resp.status
        except TimeoutError as exc:
            raise RmdUnreachable(f"{method} {url}: no answer within {self._transport.timeout_s:g} s") from exc
        except aiohttp.ClientError as exc:
            raise RmdUnreachable(f"{method} {url}: {exc}") from exc
        if len(raw) > MAX_RESPONSE:
            raise RmdCallError(f"{method} {url}: response larger than {MAX_RESPONSE} bytes")
        text = raw.decode("utf-8", "replace")
        if status not in ok:
            raise RmdApiError(method, url, status, text)
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            # RMD answers some refusals with 200 and a text body (non-REST workloads).
            raise RmdApiError(method, url, status, text) from None

    async def get_workloads(self) -> list[dict[str, Any]]:
        data = await self._call("GET", "/v1/workloads")
        if not isinstance(data, list) or not all(isinstance(w, dict) for w in data):
            raise RmdCallError(f"GET {self.base_url}/v1/workloads: expected a JSON array of workloads")
        return data

    async def post_workload(self, payload: dict[str, Any]) -> dict[str, Any]:
        data = await self._call("POST", "/v1/workloads", payload, ok=(200, 201))
        return data if isinstance(data, dict) else {}

    async def patch_workload(self, workload_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        if not workload_id.isdigit():
            raise ValueError(f"workload id {workload_id!r} is not a number")
        data = await self._call("PATCH", f"/v1/workloads/{workload_id}", payload)
        return data if isinstance(data, dict) else {}

    async def delete_workload(self, workload_id: str) -> None:
        if not workload_id.isdigit():
            raise ValueError(f"workload id {workload_id!r} is not a number")
        await self._call("DELETE", f"/v1/workloads/{workload_id}")

    async def get_cache_l3(self) -> dict[str, Any]:
        data = await self._call("GET", "/v1/cache/l3")
        if not isinstance(data, dict):
            raise RmdCallError(f"GET {self.base_url}/v1/cache/l3: expected a JSON object")
        return data
