"""Writing GBS and AOCX files: for tests, benchmarks and the node simulator's bitstream store.

The files follow the formats the parsers read (see :mod:`.gbs` and :mod:`.aocx`); the metadata is
a plausible subset of what the FPGA build tools emit.
"""

from __future__ import annotations

import gzip
import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from intel_device_plugins.plugins.fpga.bitstream.aocx import FPGA_BIN_SECTION, GBS_GZ_SECTION
from intel_device_plugins.plugins.fpga.bitstream.gbs import GBS_MAGIC1, GBS_MAGIC2
from intel_device_plugins.plugins.fpga.bitstream.ids import BITSTREAM_DIR

OPENCL_AFU = "18b79ffa2ee54aa096ef4230dafacb5f"
"""The AFU ID every OpenCL board support package's bitstream carries."""


def gbs_metadata(interface_id: str, afu_id: str, name: str = "nlb_400", clusters: int = 1) -> dict[str, Any]:
    return {
        "version": 640,
        "platform-name": "DCP",
        "afu-image": {
            "magic-no": 488605312,
            "interface-uuid": interface_id,
            "power": 0,
            "clock-frequency-high": "auto",
            "clock-frequency-low": "auto",
            "afu-top-interface": {
                "class": "ccip_std_afu_avalon_mm_legacy_wires",
                "module-ports": [{"class": "cci-p", "params": {"clock": "pClk"}, "optional": False}],
            },
            "accelerator-clusters": [
                {"accelerator-type-uuid": afu_id, "name": name, "total-contexts": 1} for _ in range(clusters)
            ],
        },
    }


def gbs_bytes(metadata: Mapping[str, Any] | bytes, raw: bytes) -> bytes:
    """A GBS file: header, metadata (a mapping is JSON-encoded), raw bitstream."""
    text = metadata if isinstance(metadata, bytes) else json.dumps(metadata).encode()
    return struct.pack("<QQI", GBS_MAGIC1, GBS_MAGIC2, len(text)) + text + raw


def elf_bytes(sections: Sequence[tuple[str, bytes]]) -> bytes:
    """A little-endian ELF32 relocatable file holding ``sections`` (PROGBITS) and a name table."""
    names = bytearray(b"\0")
    offsets = []
    for name, _ in [*sections, (".shstrtab", b"")]:
        offsets.append(len(names))
        names += name.encode() + b"\0"
    body = bytearray()
    placed = []
    data_start = 52
    for _, data in sections:
        placed.append((data_start + len(body), len(data)))
        body += data
    strtab_offset = data_start + len(body)
    body += names
    while (data_start + len(body)) % 4:
        body += b"\0"
    shoff = data_start + len(body)
    shnum = len(sections) + 2
    header = struct.pack(
        "<4sBBBBB7sHHIIIIIHHHHHH",
        b"\x7fELF", 1, 1, 1, 0, 0, b"\0" * 7,
        1, 0, 1, 0, 0, shoff, 0, 52, 0, 0, 40, shnum, shnum - 1,
    )  # fmt: skip
    table = bytearray(b"\0" * 40)
    for (offset, size), name_offset in zip(placed, offsets, strict=False):
        table += struct.pack("<IIIIIIIIII", name_offset, 1, 0, 0, offset, size, 0, 0, 1, 0)
    table += struct.pack("<IIIIIIIIII", offsets[-1], 3, 0, 0, strtab_offset, len(names), 0, 0, 1, 0)
    return header + bytes(body) + bytes(table)


def aocx_bytes(
    gbs: bytes,
    hash_value: str,
    board: str = "pac_a10",
    target: str = "arria10",
    version: str = "20.3.0",
    extra_sections: Sequence[tuple[str, bytes]] = (),
    compresslevel: int = 1,
) -> bytes:
    """An AOCX: an ELF holding text sections and ``.acl.fpga.bin``, an ELF holding the gzipped GBS."""
    inner = elf_bytes([(GBS_GZ_SECTION, gzip.compress(gbs, compresslevel=compresslevel, mtime=0))])
    return elf_bytes(
        [
            (".acl.board", board.encode() + b"\n"),
            (".acl.target", target.encode()),
            (".acl.version", version.encode()),
            (".acl.rand_hash", hash_value.encode()),
            *extra_sections,
            (FPGA_BIN_SECTION, inner),
        ]
    )


def install_simulated_gbs(root: Path, interface_id: str, afu_id: str, payload: bytes) -> Path:
    """Write a GBS for ``afu_id`` into the bitstream store under ``root`` (a simulated node) and
    return its path; ``payload`` is the raw bitstream (see ``fme.simulated_payload``)."""
    directory = root / BITSTREAM_DIR.lstrip("/") / interface_id
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{afu_id}.gbs"
    path.write_bytes(gbs_bytes(gbs_metadata(interface_id, afu_id), payload))
    return path


def install_simulated_aocx(root: Path, interface_id: str, hash_value: str, payload: bytes) -> Path:
    """Write an AOCX (OpenCL AFU) named by ``hash_value`` into the store under ``root``."""
    directory = root / BITSTREAM_DIR.lstrip("/") / interface_id
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{hash_value}.aocx"
    path.write_bytes(aocx_bytes(gbs_bytes(gbs_metadata(interface_id, OPENCL_AFU), payload), hash_value))
    return path
