"""GBS ("green bitstream") files: a 20-byte header, JSON metadata, then the raw bitstream.

Layout (little-endian): two magic words (``XeonFPGA``, ``\\xb7GBSv001``), a u32 metadata length L
with 0 < L < 4096, L bytes of JSON, and the raw bitstream that the FME's partial-reconfiguration
ioctl takes. Parsing needs only the first ``20 + L`` bytes, so a file of any size is parsed in
constant memory; the raw part is read only when a port is programmed.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.plugins.fpga.bitstream.errors import BitstreamError
from intel_device_plugins.plugins.fpga.bitstream.ids import canonical_id, is_safe_id

GBS_MAGIC1 = 0x414750466E6F6558
GBS_MAGIC2 = 0x31303076534247B7
HEADER = struct.Struct("<QQI")
HEADER_LENGTH = HEADER.size  # 20
MAX_METADATA_LENGTH = 4095
MAX_HEAD = HEADER_LENGTH + MAX_METADATA_LENGTH
"""Bytes from the start of a GBS that parsing ever looks at."""
GBS_EXTENSION = ".gbs"


@dataclass(frozen=True)
class ModulePort:
    port_class: str
    clock: str
    optional: bool


@dataclass(frozen=True)
class AcceleratorCluster:
    accelerator_type_uuid: str
    name: str
    total_contexts: int


@dataclass(frozen=True)
class GbsMetadata:
    """The metadata JSON, typed. Missing fields take their empty value, as upstream's decoder does."""

    version: int
    platform_name: str
    interface_uuid: str
    magic_no: int
    power: int
    clock_frequency_high: Any
    clock_frequency_low: Any
    afu_top_class: str
    module_ports: tuple[ModulePort, ...]
    cluster: AcceleratorCluster
    """The one accelerator cluster a GBS must describe."""


@dataclass(frozen=True)
class Gbs:
    """A parsed GBS: where it came from, its metadata and where its raw bitstream lies."""

    path: str
    metadata: GbsMetadata
    metadata_length: int
    raw_size: int
    """Length of the raw bitstream: everything after the metadata."""

    @property
    def raw_offset(self) -> int:
        return HEADER_LENGTH + self.metadata_length

    @property
    def interface_id(self) -> str:
        return canonical_id(self.metadata.interface_uuid)

    @property
    def afu_id(self) -> str:
        return canonical_id(self.metadata.cluster.accelerator_type_uuid)

    @property
    def unique_id(self) -> str:
        """What names the file in the store: the AFU ID."""
        return self.afu_id

    def extra_metadata(self) -> dict[str, str]:
        return {"Size": str(self.raw_size)}

    def install_path(self, root: str) -> str:
        return install_path(self.path, root, self.interface_id, self.unique_id, GBS_EXTENSION)


def install_path(path: str, root: str, interface_id: str, unique_id: str, extension: str) -> str:
    """``<root>/<interface>/<unique><extension>``; IDs that could leave ``root`` are refused."""
    for what, value in (("interface ID", interface_id), ("unique ID", unique_id)):
        if not is_safe_id(value):
            raise BitstreamError(path, f"{what} {value!r} cannot name a file in the bitstream store")
    return f"{root.rstrip('/')}/{interface_id}/{unique_id}{extension}"


def parse_gbs_head(path: str, head: bytes, total_size: int) -> Gbs:
    """Parse a GBS from its first bytes (at least ``20 + L``, at most :data:`MAX_HEAD` are used)
    and the size of the whole GBS."""
    if len(head) < HEADER_LENGTH:
        raise BitstreamError(
            path, f"unable to read header: {len(head)} bytes, a GBS header has {HEADER_LENGTH}"
        )
    magic1, magic2, length = HEADER.unpack_from(head)
    if magic1 != GBS_MAGIC1 or magic2 != GBS_MAGIC2:
        raise BitstreamError(
            path, f"wrong magic in GBS file: {magic1:#x} {magic2:#x} Expected {GBS_MAGIC1:#x} {GBS_MAGIC2:#x}"
        )
    if length == 0 or length > MAX_METADATA_LENGTH:
        raise BitstreamError(path, f"incorrect length of GBS metadata {length}")
    if total_size < HEADER_LENGTH + length or len(head) < HEADER_LENGTH + length:
        raise BitstreamError(
            path, f"truncated: GBS metadata of {length} bytes, but the file ends after {total_size} bytes"
        )
    metadata = parse_metadata(path, head[HEADER_LENGTH : HEADER_LENGTH + length])
    return Gbs(path, metadata, length, total_size - HEADER_LENGTH - length)


def _decode_json(path: str, text: bytes) -> Any:
    """The first JSON value in ``text``; what follows it (padding, a second value) is ignored, as upstream's
    streaming decoder does. The value itself must be UTF-8."""
    decoded = text.decode("utf-8", errors="surrogateescape")  # bytes past the value may be anything
    start = len(decoded) - len(decoded.lstrip(" \t\n\r"))
    try:
        value, end = json.JSONDecoder().raw_decode(decoded, start)
        decoded[start:end].encode("utf-8")
    except UnicodeEncodeError:
        raise BitstreamError(path, "unable to parse GBS metadata: not UTF-8") from None
    except json.JSONDecodeError as error:
        if _NOT_UTF8.search(decoded, error.pos, error.pos + 1):
            raise BitstreamError(path, "unable to parse GBS metadata: not UTF-8") from None
        raise BitstreamError(path, f"unable to parse GBS metadata: {error}") from None
    except RecursionError:
        raise BitstreamError(path, "unable to parse GBS metadata: nested too deeply") from None
    return value


_NOT_UTF8 = re.compile("[\udc80-\udcff]")
"""What ``surrogateescape`` turns bytes that are not UTF-8 into."""


class _Fields:
    """Typed access to one JSON object, naming the field on every mismatch."""

    def __init__(self, path: str, where: str, value: Any) -> None:
        self.path = path
        self.where = where
        if value is None:
            value = {}
        if not isinstance(value, dict):
            self.fail(where, "is not an object")
        self.value: Mapping[str, Any] = value

    def fail(self, field: str, problem: str) -> None:
        raise BitstreamError(self.path, f"unable to parse GBS metadata: {field} {problem}")

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def string(self, key: str) -> str:
        value = self.value.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            self.fail(self._name(key), "is not a string")
        return str(value)

    def integer(self, key: str) -> int:
        value = self.value.get(key)
        if value is None:
            return 0
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
            self.fail(self._name(key), "is not an integer")
        return int(value)

    def boolean(self, key: str) -> bool:
        value = self.value.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.fail(self._name(key), "is not a boolean")
        return bool(value)

    def obj(self, key: str) -> _Fields:
        return _Fields(self.path, self._name(key), self.value.get(key))

    def array(self, key: str) -> list[Any]:
        value = self.value.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(self._name(key), "is not an array")
        return list(value)


def parse_metadata(path: str, text: bytes) -> GbsMetadata:
    top = _Fields(path, "", _decode_json(path, text))
    image = top.obj("afu-image")
    interface = image.obj("afu-top-interface")
    ports = []
    for index, entry in enumerate(interface.array("module-ports")):
        port = _Fields(path, f"afu-image.afu-top-interface.module-ports[{index}]", entry)
        ports.append(
            ModulePort(port.string("class"), port.obj("params").string("clock"), port.boolean("optional"))
        )
    clusters = image.array("accelerator-clusters")
    if len(clusters) != 1:
        raise BitstreamError(
            path, f"incorrect length of AcceleratorClusters in GBS metadata: {len(clusters)}"
        )
    cluster = _Fields(path, "afu-image.accelerator-clusters[0]", clusters[0])
    return GbsMetadata(
        version=top.integer("version"),
        platform_name=top.string("platform-name"),
        interface_uuid=image.string("interface-uuid"),
        magic_no=image.integer("magic-no"),
        power=image.integer("power"),
        clock_frequency_high=image.value.get("clock-frequency-high"),
        clock_frequency_low=image.value.get("clock-frequency-low"),
        afu_top_class=interface.string("class"),
        module_ports=tuple(ports),
        cluster=AcceleratorCluster(
            cluster.string("accelerator-type-uuid"), cluster.string("name"), cluster.integer("total-contexts")
        ),
    )
