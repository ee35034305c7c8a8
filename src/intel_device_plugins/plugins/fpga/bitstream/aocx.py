"""AOCX files (OpenCL FPGA binaries): an ELF whose ``.acl.fpga.bin`` section is itself an ELF,
whose ``.acl.gbs.gz`` section is a gzip-compressed GBS.

The GBS is decompressed as a stream: only its first :data:`~.gbs.MAX_HEAD` bytes are kept and the
rest is counted, so parsing takes constant memory; decompression stops with an error once the output
passes ``max_gbs_size`` (a gzip bomb costs at most that much inflating, never that much memory).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import BinaryIO

from intel_device_plugins.plugins.fpga.bitstream.elf import Window, read_sections
from intel_device_plugins.plugins.fpga.bitstream.errors import BitstreamError
from intel_device_plugins.plugins.fpga.bitstream.gbs import MAX_HEAD, Gbs, install_path, parse_gbs_head
from intel_device_plugins.plugins.fpga.bitstream.ids import canonical_id

AOCX_EXTENSION = ".aocx"
FPGA_BIN_SECTION = ".acl.fpga.bin"
GBS_GZ_SECTION = ".acl.gbs.gz"
TEXT_SECTIONS = (".acl.board", ".acl.target", ".acl.version", ".acl.rand_hash")
"""The text sections that name and describe the file. The others (``.acl.quartus_report``,
``.acl.kernel_arg_info.xml``, ...) are not needed here and are not read."""
MAX_TEXT_SECTION = 64 * 1024
MAX_GBS_SIZE = 1024 * 1024 * 1024
"""Largest decompressed GBS accepted (real ones are tens of megabytes)."""
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Aocx:
    path: str
    gbs: Gbs
    """The embedded GBS (its ``path`` says it came from ``.acl.gbs.gz``)."""
    texts: Mapping[str, str]
    """The text sections that are present, trimmed, by section name."""
    gz_offset: int
    gz_size: int
    """Where ``.acl.gbs.gz`` lies in the file, to decompress it again when programming."""

    def text(self, section: str) -> str:
        return self.texts.get(section, "")

    @property
    def hash(self) -> str:
        return self.text(".acl.rand_hash")

    @property
    def interface_id(self) -> str:
        return self.gbs.interface_id

    @property
    def afu_id(self) -> str:
        return self.gbs.afu_id

    @property
    def unique_id(self) -> str:
        """What names the file in the store: the compiler's random hash."""
        return canonical_id(self.hash)

    def extra_metadata(self) -> dict[str, str]:
        return {
            "Board": self.text(".acl.board"),
            "Target": self.text(".acl.target"),
            "Hash": self.hash,
            "Version": self.text(".acl.version"),
            "Size": str(self.gbs.raw_size),
        }

    def install_path(self, root: str) -> str:
        return install_path(self.path, root, self.interface_id, self.unique_id, AOCX_EXTENSION)


def parse_aocx(stream: BinaryIO, path: str, size: int, max_gbs_size: int = MAX_GBS_SIZE) -> Aocx:
    outer = Window(stream, path, 0, size, "AOCX")
    sections = read_sections(outer)
    texts: dict[str, str] = {}
    for name in TEXT_SECTIONS:
        section = sections.get(name)
        if section is None:
            continue
        if section.size > MAX_TEXT_SECTION:
            raise BitstreamError(
                path, f"section {name} has {section.size} bytes, at most {MAX_TEXT_SECTION} are read"
            )
        texts[name] = outer.read(section.offset, section.size).decode("utf-8", errors="replace").strip()
    fpga_bin = sections.get(FPGA_BIN_SECTION)
    if fpga_bin is None:
        raise BitstreamError(path, f"no {FPGA_BIN_SECTION} section")
    inner = outer.sub(fpga_bin.offset, fpga_bin.size, FPGA_BIN_SECTION)
    gz = read_sections(inner).get(GBS_GZ_SECTION)
    if gz is None:
        raise BitstreamError(path, f"no {GBS_GZ_SECTION} section in {FPGA_BIN_SECTION}")
    gz_window = inner.sub(gz.offset, gz.size, GBS_GZ_SECTION)
    head, total = inflate(gz_window, max_gbs_size, keep_head=MAX_HEAD)
    gbs = parse_gbs_head(f"{path} ({GBS_GZ_SECTION})", bytes(head), total)
    return Aocx(path, gbs, texts, gz_window.base, gz_window.size)


def inflate(
    window: Window, limit: int, keep_head: int = 0, keep_from: int | None = None
) -> tuple[bytearray, int]:
    """Decompress the gzip stream (one or more members) in ``window`` in chunks.

    Returns the first ``keep_head`` bytes of output (or, with ``keep_from``, everything from that
    offset on) and the total output size. More than ``limit`` bytes of output is an error.
    """
    kept = bytearray()
    total = 0
    position = 0
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while True:
        if decompressor.eof:
            data = decompressor.unused_data
            if not data and position < window.size:
                data = window.read(position, min(CHUNK, window.size - position))
                position += len(data)
            if not data:
                break
            if not data.startswith(b"\x1f\x8b"):
                raise BitstreamError(window.path, f"{window.what}: data after the end of the gzip stream")
            decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif decompressor.unconsumed_tail:
            data = decompressor.unconsumed_tail
        else:
            if position >= window.size:
                raise BitstreamError(window.path, f"{window.what}: gzip stream is truncated")
            data = window.read(position, min(CHUNK, window.size - position))
            position += len(data)
        try:
            output = decompressor.decompress(data, CHUNK)
        except zlib.error as error:
            raise BitstreamError(window.path, f"unable to uncompress {window.what}: {error}") from None
        if total + len(output) > limit:
            raise BitstreamError(
                window.path,
                f"{window.what} decompresses to more than {limit} bytes; refusing it as a gzip bomb",
            )
        if keep_from is not None:
            if total + len(output) > keep_from:
                kept += output[max(0, keep_from - total) :]
        elif len(kept) < keep_head:
            kept += output[: keep_head - len(kept)]
        total += len(output)
    return kept, total
