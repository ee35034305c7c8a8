"""The protobuf wire format of xpumd's device-info API (``deviceinfo.proto`` beside this file, package
``deviceinfo``, version ``v1alpha1``), without protobuf's runtime.

Why by hand: the frameworks speak gRPC through grpclib with raw bytes (as ``dra/wire.py`` does for the
kubelet's messages), so neither protobuf's runtime nor grpcio is loaded for a handful of small
messages. The tests compare every message both ways with classes protoc generates from the .proto.

Decoding is strict about framing (truncated fields, bad varints, wire types that do not match the
field, text that is not UTF-8) and skips fields it does not know, as protobuf does. The message size is
bounded by the caller before any byte gets here (``xpumd.MAX_MESSAGE_BYTES``); the nesting depth is the
schema's (three levels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

SERVICE: Final = "deviceinfo.DeviceInfo"
WATCH_HEALTH: Final = f"/{SERVICE}/WatchDeviceHealth"
WATCH_EVENTS: Final = f"/{SERVICE}/WatchDeviceEvents"

VARINT: Final = 0
FIXED64: Final = 1
LENGTH: Final = 2
FIXED32: Final = 5

# SeverityLevel
SEVERITY_UNKNOWN: Final = 0
SEVERITY_OK: Final = 1
SEVERITY_WARNING: Final = 2
SEVERITY_CRITICAL: Final = 3
SEVERITY_FAILED: Final = 4
# EventSeverityLevel (OpenTelemetry's log severities)
EVENT_UNSPECIFIED: Final = 0
EVENT_TRACE: Final = 1
EVENT_DEBUG: Final = 2
EVENT_INFO: Final = 3
EVENT_WARN: Final = 4
EVENT_ERROR: Final = 5
EVENT_FATAL: Final = 6


class WireError(ValueError):
    """Bytes that are not the message they should be; says where."""


@dataclass(frozen=True)
class PciInfo:
    bdf: str = ""
    device_id: str = ""
    """Four lowercase hex digits without ``0x`` (``0bd5``)."""
    vendor_id: str = ""


@dataclass(frozen=True)
class FirmwareInfo:
    name: str = ""
    version: str = ""
    subdevice_id: str = ""


@dataclass(frozen=True)
class MemoryInfo:
    type: str = ""
    subdevice_id: str = ""
    size: int = 0
    """Bytes."""


@dataclass(frozen=True)
class DeviceInformation:
    uuid: str = ""
    model: str = ""
    pci: PciInfo | None = None
    firmwares: tuple[FirmwareInfo, ...] = ()
    memory: tuple[MemoryInfo, ...] = ()


@dataclass(frozen=True)
class HealthStatus:
    """One health domain of one device; ``severity`` is a ``SeverityLevel`` number (an enum value this
    code does not know stays a number, as proto3 keeps it)."""

    name: str = ""
    severity: int = SEVERITY_UNKNOWN
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class DeviceHealth:
    info: DeviceInformation | None = None
    health: tuple[HealthStatus, ...] = ()


@dataclass(frozen=True)
class DeviceIdentification:
    uuid: str = ""
    model: str = ""
    pci: PciInfo | None = None


@dataclass(frozen=True)
class DeviceEvent:
    """``DeviceEventResponse``; ``severity`` is an ``EventSeverityLevel`` number."""

    device: DeviceIdentification | None = None
    reason: str = ""
    message: str = ""
    severity: int = EVENT_UNSPECIFIED


# ----- encoding ----------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # a negative enum or int64 as protobuf writes it: ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _bytes(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | LENGTH) + _varint(len(data)) + data


def _string(number: int, text: str) -> bytes:
    return _bytes(number, text.encode()) if text else b""


def _integer(number: int, value: int) -> bytes:
    return _varint(number << 3 | VARINT) + _varint(value) if value else b""


def _message(number: int, data: bytes | None) -> bytes:
    """A message field: present (even empty) unless None."""
    return b"" if data is None else _bytes(number, data)


def _pci(pci: PciInfo | None) -> bytes | None:
    if pci is None:
        return None
    return _string(1, pci.bdf) + _string(2, pci.device_id) + _string(3, pci.vendor_id)


def _information(info: DeviceInformation) -> bytes:
    return (
        _string(1, info.uuid)
        + _string(2, info.model)
        + _message(3, _pci(info.pci))
        + b"".join(
            _bytes(4, _string(1, f.name) + _string(2, f.version) + _string(3, f.subdevice_id))
            for f in info.firmwares
        )
        + b"".join(
            _bytes(5, _string(1, m.type) + _string(2, m.subdevice_id) + _integer(3, m.size))
            for m in info.memory
        )
    )


def _status(status: HealthStatus) -> bytes:
    return (
        _string(1, status.name)
        + _integer(2, status.severity)
        + _string(3, status.reason)
        + _string(4, status.message)
    )


def health_response(devices: Iterable[DeviceHealth]) -> bytes:
    """``DeviceHealthResponse``: every device's health domains."""
    return b"".join(
        _bytes(
            1,
            _message(1, None if device.info is None else _information(device.info))
            + b"".join(_bytes(2, _status(status)) for status in device.health),
        )
        for device in devices
    )


def event_response(event: DeviceEvent) -> bytes:
    """``DeviceEventResponse``: one event."""
    identity = event.device
    return (
        _message(
            1,
            None
            if identity is None
            else _string(1, identity.uuid) + _string(2, identity.model) + _message(3, _pci(identity.pci)),
        )
        + _string(2, event.reason)
        + _string(3, event.message)
        + _integer(4, event.severity)
    )


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


def _fields(data: bytes, what: str) -> Iterator[tuple[int, int, int | bytes]]:
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
    except UnicodeDecodeError as error:
        raise WireError(f"{what}: not UTF-8") from error


def _nested(kind: int, value: int | bytes, what: str) -> bytes:
    if kind != LENGTH or not isinstance(value, bytes):
        raise WireError(f"{what}: not a message")
    return value


def _number(kind: int, value: int | bytes, what: str) -> int:
    """A uint64 (or an enum's raw varint)."""
    if kind != VARINT or not isinstance(value, int):
        raise WireError(f"{what}: not a varint")
    return value & ((1 << 64) - 1)


def _enum(kind: int, value: int | bytes, what: str) -> int:
    """An enum is an int32: the low 32 bits, signed, as protobuf reads it."""
    number = _number(kind, value, what) & 0xFFFFFFFF
    return number - (1 << 32) if number >= 1 << 31 else number


T = TypeVar("T")


def _strings(data: bytes, what: str, names: dict[int, str]) -> dict[str, str]:
    """The string fields ``names`` lists (number → name) of a message of only strings."""
    found = dict.fromkeys(names.values(), "")
    for number, kind, value in _fields(data, what):
        if number in names:
            found[names[number]] = _text(kind, value, f"{what} {names[number]}")
    return found


def _pci_info(data: bytes, what: str) -> PciInfo:
    return PciInfo(**_strings(data, f"{what} pci", {1: "bdf", 2: "device_id", 3: "vendor_id"}))


def _firmware(data: bytes, what: str) -> FirmwareInfo:
    return FirmwareInfo(**_strings(data, f"{what} firmware", {1: "name", 2: "version", 3: "subdevice_id"}))


def _memory(data: bytes, what: str) -> MemoryInfo:
    kind_, subdevice, size = "", "", 0
    for number, kind, value in _fields(data, f"{what} memory"):
        if number == 1:
            kind_ = _text(kind, value, f"{what} memory type")
        elif number == 2:
            subdevice = _text(kind, value, f"{what} memory subdevice_id")
        elif number == 3:
            size = _number(kind, value, f"{what} memory size")
    return MemoryInfo(kind_, subdevice, size)


def _information_of(data: bytes, what: str) -> DeviceInformation:
    uuid = model = ""
    pci: PciInfo | None = None
    firmwares: list[FirmwareInfo] = []
    memory: list[MemoryInfo] = []
    for number, kind, value in _fields(data, what):
        if number == 1:
            uuid = _text(kind, value, f"{what} uuid")
        elif number == 2:
            model = _text(kind, value, f"{what} model")
        elif number == 3:
            pci = _pci_info(_nested(kind, value, f"{what} pci"), what)
        elif number == 4:
            firmwares.append(_firmware(_nested(kind, value, f"{what} firmware"), what))
        elif number == 5:
            memory.append(_memory(_nested(kind, value, f"{what} memory"), what))
    return DeviceInformation(uuid, model, pci, tuple(firmwares), tuple(memory))


def _status_of(data: bytes, what: str) -> HealthStatus:
    name = reason = message = ""
    severity = SEVERITY_UNKNOWN
    for number, kind, value in _fields(data, what):
        if number == 1:
            name = _text(kind, value, f"{what} name")
        elif number == 2:
            severity = _enum(kind, value, f"{what} severity")
        elif number == 3:
            reason = _text(kind, value, f"{what} reason")
        elif number == 4:
            message = _text(kind, value, f"{what} message")
    return HealthStatus(name, severity, reason, message)


def _device_health(data: bytes, what: str) -> DeviceHealth:
    info: DeviceInformation | None = None
    health: list[HealthStatus] = []
    for number, kind, value in _fields(data, what):
        if number == 1:
            info = _information_of(_nested(kind, value, f"{what} info"), f"{what} info")
        elif number == 2:
            health.append(_status_of(_nested(kind, value, f"{what} health"), f"{what} health"))
    return DeviceHealth(info, tuple(health))


def _repeated(data: bytes, what: str, number_wanted: int, decode: Callable[[bytes, str], T]) -> list[T]:
    items: list[T] = []
    for number, kind, value in _fields(data, what):
        if number == number_wanted:
            where = f"{what} entry {len(items)}"
            items.append(decode(_nested(kind, value, where), where))
    return items


def decode_health_response(data: bytes) -> tuple[DeviceHealth, ...]:
    """The devices of a ``DeviceHealthResponse``."""
    return tuple(_repeated(data, "DeviceHealthResponse device", 1, _device_health))


def decode_event_response(data: bytes) -> DeviceEvent:
    """A ``DeviceEventResponse``."""
    what = "DeviceEventResponse"
    device: DeviceIdentification | None = None
    reason = message = ""
    severity = EVENT_UNSPECIFIED
    for number, kind, value in _fields(data, what):
        if number == 1:
            info = _information_of(_nested(kind, value, f"{what} device"), f"{what} device")
            device = DeviceIdentification(info.uuid, info.model, info.pci)
        elif number == 2:
            reason = _text(kind, value, f"{what} reason")
        elif number == 3:
            message = _text(kind, value, f"{what} message")
        elif number == 4:
            severity = _enum(kind, value, f"{what} severity")
    return DeviceEvent(device, reason, message, severity)


def check_empty_request(data: bytes) -> None:
    """``WatchDeviceHealthRequest`` / ``WatchDeviceEventsRequest`` have no fields; only framing checked."""
    for _ in _fields(data, "watch request"):
        pass
