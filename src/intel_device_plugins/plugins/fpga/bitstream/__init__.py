"""FPGA bitstream files (GBS and AOCX) as a pure library.

:func:`open_bitstream` chooses the parser by extension and returns a frozen description (IDs,
metadata, where the raw bitstream lies); :func:`read_raw_bitstream` reads the raw bitstream that a
partial reconfiguration writes. Every failure is a :class:`BitstreamError` naming the file.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

from intel_device_plugins.plugins.fpga.bitstream.aocx import (
    AOCX_EXTENSION,
    MAX_GBS_SIZE,
    Aocx,
    inflate,
    parse_aocx,
)
from intel_device_plugins.plugins.fpga.bitstream.elf import Window
from intel_device_plugins.plugins.fpga.bitstream.errors import BitstreamError
from intel_device_plugins.plugins.fpga.bitstream.gbs import GBS_EXTENSION, MAX_HEAD, Gbs, parse_gbs_head
from intel_device_plugins.plugins.fpga.bitstream.ids import BITSTREAM_DIR, canonical_id, is_safe_id

__all__ = [
    "AOCX_EXTENSION",
    "BITSTREAM_DIR",
    "GBS_EXTENSION",
    "Aocx",
    "Bitstream",
    "BitstreamError",
    "Gbs",
    "canonical_id",
    "is_safe_id",
    "open_bitstream",
    "parse_bitstream",
    "parse_bitstream_bytes",
    "read_raw_bitstream",
]

Bitstream = Gbs | Aocx


def parse_bitstream(
    stream: BinaryIO, path: str, size: int, kind: str, max_gbs_size: int = MAX_GBS_SIZE
) -> Bitstream:
    """Parse an open stream of ``size`` bytes as ``kind`` (``.gbs`` or ``.aocx``)."""
    if kind == GBS_EXTENSION:
        try:
            stream.seek(0)
            head = stream.read(MAX_HEAD)
        except OSError as error:
            raise BitstreamError(path, f"read error: {error.strerror or error}") from None
        return parse_gbs_head(path, head, size)
    if kind == AOCX_EXTENSION:
        return parse_aocx(stream, path, size, max_gbs_size)
    raise BitstreamError(path, f"unsupported file format {path}")


def parse_bitstream_bytes(data: bytes, path: str, max_gbs_size: int = MAX_GBS_SIZE) -> Bitstream:
    """Parse bytes, choosing the parser by ``path``'s extension as :func:`open_bitstream` does."""
    return parse_bitstream(io.BytesIO(data), path, len(data), os.path.splitext(path)[1], max_gbs_size)


def open_bitstream(path: str, max_gbs_size: int = MAX_GBS_SIZE) -> Bitstream:
    """Parse the bitstream file at ``path``; the extension (``.gbs``/``.aocx``) picks the format."""
    kind = os.path.splitext(path)[1]
    if kind not in (GBS_EXTENSION, AOCX_EXTENSION):
        raise BitstreamError(path, f"unsupported file format {path}")
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            return parse_bitstream(stream, path, size, kind, max_gbs_size)
    except OSError as error:
        raise BitstreamError(path, error.strerror or str(error)) from None


def read_raw_bitstream(bitstream: Bitstream, max_gbs_size: int = MAX_GBS_SIZE) -> bytearray:
    """The raw bitstream the FME programs (what follows the GBS metadata), read from the file again.

    A file that changed since it was parsed (another size) is an error rather than a partial read.
    """
    try:
        with open(bitstream.path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            if isinstance(bitstream, Gbs):
                if size != bitstream.raw_offset + bitstream.raw_size:
                    raise BitstreamError(bitstream.path, "file changed since it was parsed")
                raw = bytearray(bitstream.raw_size)
                stream.seek(bitstream.raw_offset)
                if stream.readinto(raw) != bitstream.raw_size:
                    raise BitstreamError(bitstream.path, "file ends early (truncated)")
                return raw
            gz = Window(stream, bitstream.path, 0, size, "AOCX").sub(
                bitstream.gz_offset, bitstream.gz_size, ".acl.gbs.gz"
            )
            raw, total = inflate(gz, max_gbs_size, keep_from=bitstream.gbs.raw_offset)
            if total != bitstream.gbs.raw_offset + bitstream.gbs.raw_size:
                raise BitstreamError(bitstream.path, "file changed since it was parsed")
            return raw
    except OSError as error:
        raise BitstreamError(bitstream.path, error.strerror or str(error)) from None
