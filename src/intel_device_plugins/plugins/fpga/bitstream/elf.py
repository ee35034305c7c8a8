"""Just enough ELF to find named sections, over a bounded window of a file.

Only the section header table and the section-name string table are read; no segment, symbol or
link is followed, so a crafted file cannot make the reader loop or recurse. Every offset is checked
against the window before it is read, and the header table may hold at most
:data:`MAX_SECTIONS` entries.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

from intel_device_plugins.plugins.fpga.bitstream.errors import BitstreamError

ELF_MAGIC = b"\x7fELF"
MAX_SECTIONS = 4096
MAX_SECTION_NAME = 256
MAX_SECTION_HEADER = 256
SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF


@dataclass(frozen=True)
class Window:
    """Bytes ``[base, base + size)`` of an open file; reads outside it are errors."""

    stream: BinaryIO
    path: str
    base: int
    size: int
    what: str = "file"

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise BitstreamError(
                self.path,
                f"{self.what}: {length} bytes at offset {offset} lie beyond its end ({self.size} bytes)",
            )
        try:
            self.stream.seek(self.base + offset)
            data = self.stream.read(length)
        except OSError as error:
            raise BitstreamError(self.path, f"read error: {error.strerror or error}") from None
        if len(data) != length:
            raise BitstreamError(self.path, f"{self.what}: file ends early (truncated)")
        return data

    def sub(self, offset: int, size: int, what: str) -> Window:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise BitstreamError(
                self.path, f"{what}: {size} bytes at offset {offset} lie beyond the end of the {self.what}"
            )
        return Window(self.stream, self.path, self.base + offset, size, what)


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int


def read_sections(window: Window) -> dict[str, Section]:
    """The named sections of the ELF image in ``window``; a name used twice is an error."""
    ident = window.read(0, 16) if window.size >= 16 else b""
    if len(ident) < 16 or not ident.startswith(ELF_MAGIC):
        raise BitstreamError(window.path, f"{window.what}: unable to read header: not an ELF file")
    elf_class, data_encoding = ident[4], ident[5]
    if elf_class not in (1, 2) or data_encoding not in (1, 2):
        raise BitstreamError(
            window.path, f"{window.what}: unknown ELF class {elf_class} or data encoding {data_encoding}"
        )
    order = "<" if data_encoding == 1 else ">"
    is64 = elf_class == 2
    header = window.read(0, 64 if is64 else 52)
    if is64:
        shoff, shentsize, shnum, shstrndx = (
            struct.unpack_from(order + "Q", header, 40)[0],
            *struct.unpack_from(order + "HHH", header, 58),
        )
        entry = struct.Struct(order + "IIQQQQIIQQ")
    else:
        shoff, shentsize, shnum, shstrndx = (
            struct.unpack_from(order + "I", header, 32)[0],
            *struct.unpack_from(order + "HHH", header, 46),
        )
        entry = struct.Struct(order + "IIIIIIIIII")
    if shoff == 0 or shnum == 0:
        if shoff != 0:
            raise BitstreamError(window.path, f"{window.what}: extended section numbering is not supported")
        return {}
    if shnum > MAX_SECTIONS:
        raise BitstreamError(
            window.path, f"{window.what}: {shnum} sections, at most {MAX_SECTIONS} are accepted"
        )
    if not entry.size <= shentsize <= MAX_SECTION_HEADER:
        raise BitstreamError(window.path, f"{window.what}: section header size {shentsize} is not plausible")
    if shstrndx == SHN_XINDEX or shstrndx >= shnum:
        raise BitstreamError(
            window.path, f"{window.what}: section name table index {shstrndx} is out of range"
        )
    table = window.read(shoff, shnum * shentsize)
    raw = []
    for index in range(shnum):
        fields = entry.unpack_from(table, index * shentsize)
        # name, type, flags, addr, offset, size (ELF32 and ELF64 share the order)
        raw.append((fields[0], fields[1], fields[4], fields[5]))
    _, strtab_type, strtab_offset, strtab_size = raw[shstrndx]
    if strtab_type == SHT_NOBITS:
        raise BitstreamError(window.path, f"{window.what}: section name table has no data")
    names = window.sub(strtab_offset, strtab_size, f"{window.what} section name table")
    sections: dict[str, Section] = {}
    for name_offset, section_type, offset, size in raw[1:]:
        name = _section_name(names, name_offset)
        if section_type == SHT_NOBITS:
            offset, size = 0, 0
        elif offset + size > window.size:
            raise BitstreamError(
                window.path,
                f"{window.what}: section {name} ({size} bytes at {offset}) extends beyond its end "
                f"({window.size} bytes)",
            )
        if name in sections and name:
            raise BitstreamError(window.path, f"{window.what}: section {name} appears more than once")
        sections[name] = Section(name, section_type, offset, size)
    return sections


def _section_name(names: Window, offset: int) -> str:
    if offset >= names.size:
        raise BitstreamError(names.path, f"{names.what}: name offset {offset} is out of range")
    chunk = names.read(offset, min(MAX_SECTION_NAME + 1, names.size - offset))
    end = chunk.find(b"\0")
    if end < 0:
        raise BitstreamError(names.path, f"{names.what}: section name at {offset} is not terminated")
    return chunk[:end].decode("utf-8", errors="replace")
