"""The protobuf wire format of the few kubelet messages a DRA driver serves, without protobuf's runtime.

Why: the driver's gRPC services take and give eight small messages (claims in, devices and errors out,
device health, the registration's two), and loading protobuf's runtime and descriptor pool for them
costs a driver about 2 MiB of resident memory (docs/performance.md, "The idle GPU DRA driver beside the
idle plugin"). The gRPC servers (``dra/grpcserver.py``, grpclib) pass raw bytes; this module turns
them into this framework's types and back. The generated classes in ``dra/api`` stay the reference: the tests
speak to these services through them, so a field encoded wrongly fails there.

Decoding is strict about the framing (truncated or overlong fields, bad varints, wire types that do not
match the field) and skips fields it does not know, as protobuf does; nesting and sizes are bounded by
the servers' request limit (``grpcserver.MAX_REQUEST_BYTES``, 4 MiB) before any byte gets here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from intel_device_plugins.dra.model import ClaimRef, HealthState

VARINT: Final = 0
FIXED64: Final = 1
LENGTH: Final = 2
FIXED32: Final = 5
HEALTH_CODES: Final = {HealthState.UNKNOWN: 0, HealthState.HEALTHY: 1, HealthState.UNHEALTHY: 2}
"""``HealthStatus`` of the v1 and v1alpha1 health APIs (the same numbers)."""


class WireError(ValueError):
    """Bytes that are not the message they should be; says where."""


# ----- encoding ----------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 as protobuf writes it: ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _bytes(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | LENGTH) + _varint(len(data)) + data


def _string(number: int, text: str, *, always: bool = False) -> bytes:
    """A string field; proto3 leaves an empty one out unless it has presence (``optional``)."""
    return _bytes(number, text.encode()) if text or always else b""


def _integer(number: int, value: int) -> bytes:
    return _varint(number << 3 | VARINT) + _varint(value) if value else b""


def _strings(number: int, texts: Iterable[str]) -> bytes:
    return b"".join(_bytes(number, text.encode()) for text in texts)


@dataclass(frozen=True)
class DeviceAnswer:
    """``v1.Device`` of a prepare answer."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


def _device(device: DeviceAnswer) -> bytes:
    return (
        _strings(1, device.request_names)
        + _string(2, device.pool_name)
        + _string(3, device.device_name)
        + _strings(4, device.cdi_device_ids)
        + (_string(5, device.share_id, always=True) if device.share_id is not None else b"")
    )


def prepare_response(claims: Mapping[str, Sequence[DeviceAnswer] | str]) -> bytes:
    """``NodePrepareResourcesResponse``: per claim UID its devices, or its error text."""
    entries = []
    for uid, outcome in claims.items():
        if isinstance(outcome, str):
            value = _string(2, outcome)
        else:
            value = b"".join(_bytes(1, _device(device)) for device in outcome)
        entries.append(_bytes(1, _string(1, uid) + _bytes(2, value)))
    return b"".join(entries)


def unprepare_response(claims: Mapping[str, str]) -> bytes:
    """``NodeUnprepareResourcesResponse``: per claim UID its error text (empty: done)."""
    return b"".join(
        _bytes(1, _string(1, uid) + _bytes(2, _string(1, error))) for uid, error in claims.items()
    )


def health_response(
    pool: str, devices: Iterable[tuple[str, HealthState, str]], now: int, timeout_seconds: int = 0
) -> bytes:
    """``NodeWatchResourcesResponse`` (v1 and v1alpha1 alike): every device's health at ``now``, each
    valid for ``timeout_seconds`` (``health_check_timeout_seconds``; 0 leaves the kubelet's 30 s)."""
    return b"".join(
        _bytes(
            1,
            _bytes(1, _string(1, pool) + _string(2, name))
            + _integer(2, HEALTH_CODES[state])
            + _integer(3, now)
            + _integer(4, timeout_seconds)
            + _string(5, message),
        )
        for name, state, message in devices
    )


def plugin_info(plugin_type: str, name: str, endpoint: str, versions: Iterable[str]) -> bytes:
    """``pluginregistration.PluginInfo``."""
    return _string(1, plugin_type) + _string(2, name) + _string(3, endpoint) + _strings(4, versions)


# ----- decoding ----------------------------------------------------------------------------------------


def _read_varint(data: bytes, at: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise WireError(f"{what}: truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 70:
            raise WireError(f"{what}: varint longer than ten bytes")


def fields(data: bytes, what: str) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of each field; length-delimited values as bytes."""
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at, what)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise WireError(f"{what}: field number 0")
        if kind == VARINT:
            value, at = _read_varint(data, at, what)
            yield number, kind, value
        elif kind == LENGTH:
            size, at = _read_varint(data, at, what)
            if at + size > len(data):
                raise WireError(f"{what}: field {number} runs past the end")
            yield number, kind, data[at : at + size]
            at += size
        elif kind in (FIXED64, FIXED32):
            width = 8 if kind == FIXED64 else 4
            if at + width > len(data):
                raise WireError(f"{what}: field {number} runs past the end")
            yield number, kind, int.from_bytes(data[at : at + width], "little")
            at += width
        else:
            raise WireError(f"{what}: wire type {kind} of field {number} is not supported")


def _text(kind: int, value: int | bytes, what: str) -> str:
    if kind != LENGTH or not isinstance(value, bytes):
        raise WireError(f"{what}: not a string")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise WireError(f"{what}: not UTF-8") from exc


def claims_request(data: bytes) -> list[ClaimRef]:
    """The claims of ``NodePrepareResourcesRequest`` or ``NodeUnprepareResourcesRequest``."""
    refs = []
    for number, kind, value in fields(data, "claims request"):
        if number != 1:
            continue
        if kind != LENGTH or not isinstance(value, bytes):
            raise WireError("claims request: a claim is not a message")
        found = {1: "", 2: "", 3: ""}
        for inner, inner_kind, inner_value in fields(value, "claim"):
            if inner in found:
                found[inner] = _text(inner_kind, inner_value, f"claim field {inner}")
        refs.append(ClaimRef(namespace=found[1], uid=found[2], name=found[3]))
    return refs


def registration_status(data: bytes) -> tuple[bool, str]:
    """``pluginregistration.RegistrationStatus``: (registered, error)."""
    registered, error = False, ""
    for number, kind, value in fields(data, "registration status"):
        if number == 1 and kind == VARINT:
            registered = bool(value)
        elif number == 2:
            error = _text(kind, value, "registration status error")
    return registered, error


def empty(data: bytes) -> None:
    """A request without fields (``InfoRequest``, ``NodeWatchResourcesRequest``): only framing checked."""
    for _ in fields(data, "request"):
        pass


def health_check_service(data: bytes) -> str:
    """The ``service`` of ``grpc.health.v1.HealthCheckRequest`` ("" for the server as a whole)."""
    service = ""
    for number, kind, value in fields(data, "health check request"):
        if number == 1:
            service = _text(kind, value, "health check request service")
    return service


def health_check_response(status: int) -> bytes:
    """``grpc.health.v1.HealthCheckResponse`` with its ``ServingStatus`` code."""
    return _integer(1, status)
