"""Bitstream library: GBS and AOCX parsing, install paths, raw data, and hostile input."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intel_device_plugins.plugins.fpga.bitstream import (
    Aocx,
    BitstreamError,
    Gbs,
    build,
    open_bitstream,
    parse_bitstream_bytes,
    read_raw_bitstream,
)
from intel_device_plugins.plugins.fpga.bitstream.aocx import FPGA_BIN_SECTION, GBS_GZ_SECTION

INTERFACE = "ce48969398f05f33946d560708be108a"
AFU = "d8424dc4a4a3c413f89e433683f9040b"
DASHED_INTERFACE = "CE489693-98F0-5F33-946D-560708BE108A"
RAW = b"raw-bitstream-" * 10


def gbs(metadata: Any = None, raw: bytes = RAW) -> bytes:
    return build.gbs_bytes(metadata if metadata is not None else build.gbs_metadata(INTERFACE, AFU), raw)


def aocx(gbs_data: bytes | None = None, hash_value: str = "0123abcd") -> bytes:
    return build.aocx_bytes(gbs_data or gbs(build.gbs_metadata(INTERFACE, build.OPENCL_AFU)), hash_value)


def header(length: int) -> bytes:
    return gbs(b"")[:16] + struct.pack("<I", length)


# ----- GBS ---------------------------------------------------------------------------------------


def test_gbs_ids_size_and_install_path() -> None:
    parsed = parse_bitstream_bytes(gbs(build.gbs_metadata(DASHED_INTERFACE, AFU.upper())), "a.gbs")
    assert isinstance(parsed, Gbs)
    assert parsed.interface_id == INTERFACE
    assert parsed.afu_id == AFU
    assert parsed.unique_id == AFU
    assert parsed.extra_metadata() == {"Size": str(len(RAW))}
    assert parsed.install_path("/srv/intel.com/fpga") == f"/srv/intel.com/fpga/{INTERFACE}/{AFU}.gbs"
    assert parsed.metadata.cluster.name == "nlb_400"
    assert parsed.metadata.module_ports[0].clock == "pClk"


def test_gbs_metadata_fields_may_be_missing() -> None:
    minimal = {
        "afu-image": {"interface-uuid": INTERFACE, "accelerator-clusters": [{"accelerator-type-uuid": AFU}]}
    }
    parsed = parse_bitstream_bytes(gbs(minimal), "m.gbs")
    assert parsed.afu_id == AFU
    assert isinstance(parsed, Gbs)
    assert parsed.metadata.version == 0
    assert parsed.metadata.platform_name == ""


def metadata_with(**image: Any) -> dict[str, Any]:
    base = build.gbs_metadata(INTERFACE, AFU)
    base["afu-image"].update(image)
    return base


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "unable to read header: 0 bytes"),
        (b"XeonFPGA", "unable to read header: 8 bytes"),
        (b"NotAGBS!" * 2 + b"\0" * 10, "wrong magic in GBS file: 0x2153424741746f4e"),
        (header(0), "incorrect length of GBS metadata 0"),
        (header(4096), "incorrect length of GBS metadata 4096"),
        (header(0xFFFFFFFF), "incorrect length of GBS metadata 4294967295"),
        (header(100) + b"{}", "truncated: GBS metadata of 100 bytes, but the file ends after 22 bytes"),
        (gbs(b"{not json"), "unable to parse GBS metadata: Expecting property name"),
        (gbs(b"\xff\xfe"), "unable to parse GBS metadata: not UTF-8"),
        (gbs(b"[" * 4000), "unable to parse GBS metadata"),
        (gbs(b"[]"), "unable to parse GBS metadata:  is not an object"),
        (
            gbs(metadata_with(**{"accelerator-clusters": []})),
            "incorrect length of AcceleratorClusters in GBS metadata: 0",
        ),
        (
            gbs(metadata_with(**{"accelerator-clusters": [{}, {}]})),
            "incorrect length of AcceleratorClusters in GBS metadata: 2",
        ),
        (gbs(metadata_with(**{"interface-uuid": 7})), "afu-image.interface-uuid is not a string"),
        (gbs(metadata_with(power="high")), "afu-image.power is not an integer"),
        (
            gbs(
                metadata_with(
                    **{"accelerator-clusters": [{"accelerator-type-uuid": AFU, "total-contexts": True}]}
                )
            ),
            "afu-image.accelerator-clusters[0].total-contexts is not an integer",
        ),
        (
            gbs(metadata_with(**{"afu-top-interface": {"module-ports": [{"optional": "yes"}]}})),
            "afu-image.afu-top-interface.module-ports[0].optional is not a boolean",
        ),
        (gbs({"afu-image": []}), "afu-image is not an object"),
    ],
    ids=lambda value: value[:40] if isinstance(value, str) else None,
)
def test_gbs_errors_name_the_file_and_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(BitstreamError) as caught:
        parse_bitstream_bytes(data, "/tmp/bad.gbs")
    assert str(caught.value).startswith("/tmp/bad.gbs: ")
    assert message in str(caught.value)


@pytest.mark.parametrize("interface", ["../../etc", "ce48/../x", "", "a b", "x.y"])
def test_install_path_refuses_ids_that_could_leave_the_store(interface: str) -> None:
    parsed = parse_bitstream_bytes(gbs(build.gbs_metadata(interface, AFU)), "evil.gbs")
    with pytest.raises(BitstreamError, match="cannot name a file in the bitstream store"):
        parsed.install_path("/srv/intel.com/fpga")


def test_gbs_raw_data_is_what_follows_the_metadata(tmp_path: Path) -> None:
    path = tmp_path / "x.gbs"
    path.write_bytes(gbs())
    parsed = open_bitstream(str(path))
    assert read_raw_bitstream(parsed) == RAW
    path.write_bytes(gbs(raw=RAW + b"more"))
    with pytest.raises(BitstreamError, match="changed since it was parsed"):
        read_raw_bitstream(parsed)


def test_open_bitstream_errors(tmp_path: Path) -> None:
    with pytest.raises(BitstreamError, match=r"x\.bin: unsupported file format .*x\.bin"):
        open_bitstream(str(tmp_path / "x.bin"))
    with pytest.raises(BitstreamError, match=r"missing\.gbs: No such file or directory"):
        open_bitstream(str(tmp_path / "missing.gbs"))
    (tmp_path / "dir.gbs").mkdir()
    with pytest.raises(BitstreamError, match=r"dir\.gbs: Is a directory"):
        open_bitstream(str(tmp_path / "dir.gbs"))


# ----- AOCX --------------------------------------------------------------------------------------


def test_aocx_sections_ids_and_install_path(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 40
    data = build.aocx_bytes(gbs(build.gbs_metadata(INTERFACE, build.OPENCL_AFU), payload), "  F00D1234\n")
    path = tmp_path / "k.aocx"
    path.write_bytes(data)
    parsed = open_bitstream(str(path))
    assert isinstance(parsed, Aocx)
    assert parsed.hash == "F00D1234"
    assert parsed.unique_id == "f00d1234"
    assert parsed.afu_id == build.OPENCL_AFU
    assert parsed.interface_id == INTERFACE
    assert parsed.install_path("/srv/intel.com/fpga") == f"/srv/intel.com/fpga/{INTERFACE}/f00d1234.aocx"
    assert parsed.extra_metadata() == {
        "Board": "pac_a10",
        "Target": "arria10",
        "Hash": "F00D1234",
        "Version": "20.3.0",
        "Size": str(len(payload)),
    }
    assert read_raw_bitstream(parsed) == payload


def test_aocx_gbs_may_span_several_gzip_members() -> None:
    whole = gbs(build.gbs_metadata(INTERFACE, build.OPENCL_AFU))
    members = gzip.compress(whole[:30]) + gzip.compress(whole[30:])
    inner = build.elf_bytes([(GBS_GZ_SECTION, members)])
    parsed = parse_bitstream_bytes(build.elf_bytes([(FPGA_BIN_SECTION, inner)]), "m.aocx")
    assert parsed.afu_id == build.OPENCL_AFU


def elf_with_header(patch: dict[int, bytes], data: bytes | None = None) -> bytes:
    image = bytearray(data if data is not None else aocx())
    for offset, value in patch.items():
        image[offset : offset + len(value)] = value
    return bytes(image)


def section_table_offset(data: bytes) -> int:
    return int(struct.unpack_from("<I", data, 32)[0])


def test_aocx_elf_loops_are_impossible_and_reported() -> None:
    """``.acl.fpga.bin`` covering the whole outer file makes the inner ELF the outer one: the reader
    looks for ``.acl.gbs.gz`` there once, finds none and stops."""
    outer = build.elf_bytes([(FPGA_BIN_SECTION, b"")])
    shoff = section_table_offset(outer)
    entry = shoff + 40  # section 1: .acl.fpga.bin
    looped = elf_with_header({entry + 16: struct.pack("<II", 0, len(outer))}, outer)
    with pytest.raises(BitstreamError, match=r"no \.acl\.gbs\.gz section in \.acl\.fpga\.bin"):
        parse_bitstream_bytes(looped, "loop.aocx")


def test_aocx_gzip_bomb_is_refused_without_inflating_it_all() -> None:
    bomb_gbs = gbs(build.gbs_metadata(INTERFACE, build.OPENCL_AFU), raw=bytes(64 * 1024 * 1024))
    data = build.aocx_bytes(bomb_gbs, "b0b", compresslevel=9)
    assert len(data) < 200_000
    with pytest.raises(
        BitstreamError, match=r"decompresses to more than 8388608 bytes; refusing it as a gzip bomb"
    ):
        parse_bitstream_bytes(data, "bomb.aocx", max_gbs_size=8 * 1024 * 1024)


def corrupt_gz(data: bytes) -> bytes:
    inner = build.elf_bytes([(GBS_GZ_SECTION, data)])
    return build.elf_bytes([(FPGA_BIN_SECTION, inner)])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "AOCX: unable to read header: not an ELF file"),
        (b"\x7fELF" + b"\0" * 12, "unknown ELF class 0"),
        (aocx()[:60], "lie beyond its end"),
        (build.elf_bytes([(".acl.board", b"x")]), r"no \.acl\.fpga\.bin section"),
        (build.elf_bytes([(FPGA_BIN_SECTION, b"not an elf")]), r"\.acl\.fpga\.bin: unable to read header"),
        (corrupt_gz(b""), r"\.acl\.gbs\.gz: gzip stream is truncated"),
        (corrupt_gz(gzip.compress(gbs())[:-12]), r"\.acl\.gbs\.gz: gzip stream is truncated"),
        (corrupt_gz(b"\x1f\x8bgarbage-garbage"), r"unable to uncompress \.acl\.gbs\.gz"),
        (corrupt_gz(gzip.compress(gbs()) + b"trailing"), "data after the end of the gzip stream"),
        (corrupt_gz(gzip.compress(b"XeonFPGA")), r"m\.aocx \(\.acl\.gbs\.gz\): unable to read header"),
        (
            build.elf_bytes([(FPGA_BIN_SECTION, b"x"), (FPGA_BIN_SECTION, b"y")]),
            r"section \.acl\.fpga\.bin appears more than once",
        ),
    ],
)
def test_aocx_errors_name_the_file_and_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(BitstreamError, match=r"^m\.aocx") as caught:
        parse_bitstream_bytes(data, "m.aocx")
    assert caught.match(message)


def test_elf_header_fields_out_of_range_are_refused() -> None:
    good = aocx()
    cases = {
        "section header size": {46: struct.pack("<H", 65535)},
        "sections, at most": {48: struct.pack("<H", 60000)},
        "name table index": {50: struct.pack("<H", 0xFFFF)},
        "extended section numbering": {48: struct.pack("<H", 0)},
    }
    for message, patch in cases.items():
        with pytest.raises(BitstreamError, match=message):
            parse_bitstream_bytes(elf_with_header(patch, good), "h.aocx")
    shoff = section_table_offset(good)
    huge = elf_with_header({shoff + 40 + 20: struct.pack("<I", 0x7FFFFFFF)}, good)
    with pytest.raises(BitstreamError, match="extends beyond its end"):
        parse_bitstream_bytes(huge, "h.aocx")


# ----- property tests ----------------------------------------------------------------------------

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.binary(max_size=4200), st.sampled_from(["f.gbs", "f.aocx"]))
def test_arbitrary_bytes_give_a_bitstream_or_a_bitstream_error(data: bytes, name: str) -> None:
    try:
        parsed = parse_bitstream_bytes(data, name, max_gbs_size=1024 * 1024)
    except BitstreamError as error:
        assert str(error).startswith(name)
    else:
        assert isinstance(parsed, Gbs | Aocx)


@SETTINGS
@given(st.binary(min_size=1, max_size=4096))
def test_arbitrary_metadata_gives_a_bitstream_or_a_bitstream_error(metadata: bytes) -> None:
    try:
        parsed = parse_bitstream_bytes(gbs(metadata), "f.gbs")
    except BitstreamError as error:
        assert str(error).startswith("f.gbs: ")
    else:
        assert isinstance(parsed, Gbs)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON, JSON, JSON)
def test_arbitrary_json_in_known_fields_gives_a_bitstream_or_a_bitstream_error(
    interface: object, clusters: object, ports: object
) -> None:
    metadata = {
        "afu-image": {
            "interface-uuid": interface,
            "accelerator-clusters": clusters,
            "afu-top-interface": {"module-ports": ports},
        }
    }
    text = json.dumps(metadata).encode()
    if len(text) >= 4096:
        return
    try:
        parsed = parse_bitstream_bytes(gbs(text), "f.gbs")
    except BitstreamError as error:
        assert "unable to parse GBS metadata" in str(error) or "AcceleratorClusters" in str(error)
    else:
        assert isinstance(parsed.afu_id, str)


VALID_AOCX = aocx()


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, len(VALID_AOCX) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_aocx_gives_a_bitstream_or_a_bitstream_error(flips: list[tuple[int, int]]) -> None:
    data = bytearray(VALID_AOCX)
    for offset, value in flips:
        data[offset] = value
    try:
        parsed = parse_bitstream_bytes(bytes(data), "f.aocx", max_gbs_size=1024 * 1024)
    except BitstreamError as error:
        assert str(error).startswith("f.aocx")
    else:
        assert isinstance(parsed, Aocx)


@SETTINGS
@given(st.integers(0, len(VALID_AOCX)))
def test_truncated_aocx_is_a_bitstream_error(length: int) -> None:
    if length == len(VALID_AOCX):
        assert parse_bitstream_bytes(VALID_AOCX[:length], "f.aocx").unique_id == "0123abcd"
        return
    with pytest.raises(BitstreamError):
        parse_bitstream_bytes(VALID_AOCX[:length], "f.aocx")


def test_aocx_text_sections_are_bounded_and_unused_ones_not_read() -> None:
    opencl = gbs(build.gbs_metadata(INTERFACE, build.OPENCL_AFU))
    report = (".acl.quartus_report", b"r" * (1024 * 1024))
    parsed = parse_bitstream_bytes(build.aocx_bytes(opencl, "ab", extra_sections=[report]), "r.aocx")
    assert isinstance(parsed, Aocx)
    assert ".acl.quartus_report" not in parsed.texts
    with pytest.raises(BitstreamError, match=r"section \.acl\.board has 65537 bytes, at most 65536 are read"):
        parse_bitstream_bytes(build.aocx_bytes(opencl, "ab", board="b" * 65536), "r.aocx")


@pytest.mark.parametrize(
    "tail",
    [b"\0" * 64, b"   \n", b'{"second": "value"}', b"\xff\xfe garbage", b"]"],
    ids=["NUL padding", "whitespace", "a second value", "bytes that are not UTF-8", "a stray bracket"],
)
def test_gbs_metadata_is_the_first_json_value_within_the_declared_length(tail: bytes) -> None:
    """Tools pad the metadata block; upstream reads its first JSON value and ignores the rest."""
    text = b" \n" + json.dumps(build.gbs_metadata(INTERFACE, AFU)).encode() + tail
    parsed = parse_bitstream_bytes(gbs(text), "padded.gbs")
    assert isinstance(parsed, Gbs)
    assert (parsed.interface_id, parsed.afu_id, parsed.metadata_length) == (INTERFACE, AFU, len(text))
    assert parsed.extra_metadata() == {"Size": str(len(RAW))}


def test_gbs_metadata_of_padding_alone_is_an_error() -> None:
    with pytest.raises(BitstreamError, match="unable to parse GBS metadata"):
        parse_bitstream_bytes(gbs(b"\0" * 16), "/tmp/empty.gbs")
