"""The protobuf wire format, as far as the generated codecs in this package need it.

The codec modules beside this one (``deviceplugin_v1beta1.py`` and the others) are written by
``tools/genproto.py`` from the .proto files here; they call these helpers to write and read fields, so
no protobuf runtime is loaded at run time (it costs a process several MiB of resident memory for a
dozen small messages).

Decoding is strict about framing: a truncated field, a length past the end of its message, a varint
over ten bytes, wire type 3/4 (groups) or a known field with the wrong wire type raise
:class:`WireError` naming the message and field. Unknown fields are skipped, as protobuf does. Lengths
are bounded by the message they sit in, and the message by the gRPC server's request limit
(``kubeletapi.grpc.MAX_REQUEST_BYTES``) before any byte reaches a decoder; nesting is bounded by the
schema, which the generator refuses to be recursive.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, Self, TypeVar

VARINT: Final = 0
FIXED64: Final = 1
LENGTH: Final = 2
FIXED32: Final = 5
_MASK32: Final = (1 << 32) - 1
_MASK64: Final = (1 << 64) - 1
_INT32: Final = struct.Struct("<i")
_INT64: Final = struct.Struct("<q")
_UINT32: Final = struct.Struct("<I")
_UINT64: Final = struct.Struct("<Q")
_FLOAT: Final = struct.Struct("<f")
_DOUBLE: Final = struct.Struct("<d")


class WireError(ValueError):
    """Bytes that are not the message they should be; says which message and field."""


class Message(Protocol):
    """What every generated message class offers."""

    def encode(self) -> bytes: ...

    @classmethod
    def decode(cls, data: bytes) -> Self: ...


Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response", bound=Message)


@dataclass(frozen=True, slots=True)
class Method(Generic[Request, Response]):
    """One RPC of a service: its HTTP/2 path, message classes and which side streams."""

    path: str
    request: type[Request]
    response: type[Response]
    client_streaming: bool = False
    server_streaming: bool = False


# ----- encoding ------------------------------------------------------------------------------------


def varint(value: int) -> bytes:
    """A varint; a negative value is written as its 64-bit two's complement (ten bytes), as
    protobuf writes ``int32``, ``int64`` and enums."""
    if value < 0:
        value &= _MASK64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value: int) -> int:
    """``sint32``/``sint64``: small magnitudes, either sign, in few bytes."""
    return (value << 1) ^ (value >> 63) if value < 0 else value << 1


def delimited(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field (string, bytes, message, packed scalars) with its ready-made tag."""
    return tag + varint(len(data)) + data


def string(tag: bytes, text: str) -> bytes:
    return delimited(tag, text.encode())


def packed_varints(tag: bytes, values: Iterable[int]) -> bytes:
    return delimited(tag, b"".join(varint(value) for value in values))


def packed_zigzag(tag: bytes, values: Iterable[int]) -> bytes:
    return delimited(tag, b"".join(varint(zigzag(value)) for value in values))


def fixed(kind: str, value: float) -> bytes:
    """``fixed32`` (``I``), ``sfixed32`` (``i``), ``fixed64`` (``Q``), ``sfixed64`` (``q``), ``float``
    (``f``) or ``double`` (``d``), little-endian."""
    return struct.pack("<" + kind, value)


def packed_fixed(tag: bytes, kind: str, values: Iterable[float]) -> bytes:
    return delimited(tag, b"".join(fixed(kind, value) for value in values))


# ----- decoding ------------------------------------------------------------------------------------


def _read_varint(data: bytes, at: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise WireError(f"{what}: truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & _MASK64, at
        shift += 7
        if shift >= 70:
            raise WireError(f"{what}: varint longer than ten bytes")


def fields(data: bytes, what: str) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of each field of one message: varints and fixed-width
    values as unsigned ints, length-delimited values as bytes."""
    at = 0
    end = len(data)
    while at < end:
        key = data[at]
        if key < 0x80:
            at += 1
        else:
            key, at = _read_varint(data, at, what)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise WireError(f"{what}: field number 0")
        if kind == LENGTH:
            size, at = _read_varint(data, at, what)
            if at + size > end:
                raise WireError(f"{what}: field {number} of {size} bytes runs past the end")
            yield number, kind, data[at : at + size]
            at += size
        elif kind == VARINT:
            value, at = _read_varint(data, at, what)
            yield number, kind, value
        elif kind in (FIXED64, FIXED32):
            width = 8 if kind == FIXED64 else 4
            if at + width > end:
                raise WireError(f"{what}: field {number} runs past the end")
            yield number, kind, int.from_bytes(data[at : at + width], "little")
            at += width
        else:
            raise WireError(f"{what}: wire type {kind} of field {number} is not supported")


def _mismatch(kind: int, expected: str, what: str) -> WireError:
    return WireError(f"{what}: wire type {kind} where {expected} belongs")


def text(kind: int, value: Any, what: str) -> str:
    if kind != LENGTH:
        raise _mismatch(kind, "a string", what)
    try:
        return str(value, "utf-8")
    except UnicodeDecodeError as error:
        raise WireError(f"{what}: not UTF-8") from error


def blob(kind: int, value: Any, what: str) -> bytes:
    if kind != LENGTH:
        raise _mismatch(kind, "bytes", what)
    return bytes(value)


def nested(kind: int, value: Any, what: str) -> bytes:
    """The bytes of an embedded message."""
    if kind != LENGTH:
        raise _mismatch(kind, "a message", what)
    return bytes(value)


def unsigned(kind: int, value: Any, what: str) -> int:
    """The raw 64-bit value of a varint field."""
    if kind != VARINT:
        raise _mismatch(kind, "a varint", what)
    return int(value)


def varints(kind: int, value: Any, what: str) -> list[int]:
    """A repeated varint field's values from one occurrence: packed (the proto3 default) or not."""
    if kind == VARINT:
        return [int(value)]
    if kind != LENGTH:
        raise _mismatch(kind, "varints", what)
    out = []
    at = 0
    while at < len(value):
        number, at = _read_varint(value, at, what)
        out.append(number)
    return out


def fixed_width(kind: int, value: Any, width: int, what: str) -> int:
    """The raw little-endian value of a ``fixed32``/``fixed64``-family field."""
    if kind != (FIXED32 if width == 4 else FIXED64):
        raise _mismatch(kind, f"a {width * 8}-bit fixed value", what)
    return int(value)


def fixed_widths(kind: int, value: Any, width: int, what: str) -> list[int]:
    if kind != LENGTH:
        return [fixed_width(kind, value, width, what)]
    if len(value) % width:
        raise WireError(f"{what}: packed {width * 8}-bit values of {len(value)} bytes")
    return [int.from_bytes(value[at : at + width], "little") for at in range(0, len(value), width)]


def int32(raw: int) -> int:
    raw &= _MASK32
    return raw - (1 << 32) if raw >> 31 else raw


def int64(raw: int) -> int:
    return raw - (1 << 64) if raw >> 63 else raw


def uint32(raw: int) -> int:
    return raw & _MASK32


def uint64(raw: int) -> int:
    return raw


def sint32(raw: int) -> int:
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1)


def sint64(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def boolean(raw: int) -> bool:
    return raw != 0


def sfixed32(raw: int) -> int:
    return int(_INT32.unpack(_UINT32.pack(raw))[0])


def sfixed64(raw: int) -> int:
    return int(_INT64.unpack(_UINT64.pack(raw))[0])


def float32(raw: int) -> float:
    return float(_FLOAT.unpack(_UINT32.pack(raw))[0])


def float64(raw: int) -> float:
    return float(_DOUBLE.unpack(_UINT64.pack(raw))[0])
