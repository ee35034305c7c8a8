"""The FPGA drivers' ioctl interface: partial reconfiguration (PR), port release/assign, port and
region info, for both the in-tree DFL driver and the out-of-tree OPAE ``intel-fpga`` driver.

Everything goes through :class:`FpgaIoctl`, one method that takes a device node, a request number
and either an integer or a mutable argument buffer. :class:`DeviceIoctl` is the real thing
(``fcntl.ioctl`` on the opened node); :class:`SimulatedFme` answers the same requests over a
simulated sysfs tree, decoding the very structures the real driver would get, so tests exercise
the encoding too. A simulated PR "programs" the port by rewriting its ``afu_id``.
:class:`SysfsSelectedIoctl` picks one of the two per device, by what the node's sysfs says about
that device (:data:`SIMULATION_MARKER`).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from intel_device_plugins.plugins.fpga.devices import (
    DFL,
    OPAE,
    FpgaDeviceError,
    driver_of,
    fme_of_port,
    list_devices,
    open_port,
    under_root,
)

API_VERSION = 0
"""The only kernel API version either driver has published."""


@dataclass(frozen=True)
class Requests:
    """ioctl request numbers of one driver."""

    api_version: int
    check_extension: int
    port_reset: int
    port_info: int
    region_info: int
    port_pr: int
    port_release: int
    port_assign: int
    pr: struct.Struct
    port_info_layout: struct.Struct
    release: struct.Struct


REQUESTS = {
    # linux/fpga-dfl.h: magic 0xB6; release/assign are _IOW(..., int).
    DFL: Requests(
        0xB600, 0xB601, 0xB640, 0xB641, 0xB642, 0xB680, 0x4004B681, 0x4004B682,
        pr=struct.Struct("<IIIIQ"),  # argsz, flags, port_id, buffer_size, buffer_address
        port_info_layout=struct.Struct("<IIII"),  # argsz, flags, num_regions, num_umsgs
        release=struct.Struct("<I"),  # port id
    ),
    # OPAE intel-fpga.h: magic 0xB5.
    OPAE: Requests(
        0xB500, 0xB501, 0xB540, 0xB541, 0xB542, 0xB580, 0xB581, 0xB582,
        pr=struct.Struct("<IIIIQQ"),  # argsz, flags, port_id, buffer_size, buffer_address, status
        port_info_layout=struct.Struct("<IIIIII"),  # argsz, flags, capability, regions, umsgs, irqs
        release=struct.Struct("<III"),  # argsz, flags, port_id
    ),
}  # fmt: skip
REGION_INFO = struct.Struct("<IIIIQQ")  # argsz, flags, index, padding, size, offset (both drivers)


class FpgaIoctl(Protocol):
    """Issue one ioctl on a device node; a buffer argument is updated in place."""

    def ioctl(self, node: Path, request: int, argument: int | bytearray) -> int: ...


class FpgaIoctlError(RuntimeError):
    """An ioctl failed; the message names the operation and the device node."""


class DeviceIoctl:
    """ioctls on real device nodes."""

    def ioctl(self, node: Path, request: int, argument: int | bytearray) -> int:
        descriptor = os.open(node, os.O_RDWR | os.O_CLOEXEC)
        try:
            if isinstance(argument, bytearray):
                return int(fcntl.ioctl(descriptor, request, argument, True))
            return int(fcntl.ioctl(descriptor, request, argument))
        finally:
            os.close(descriptor)


def _call(io: FpgaIoctl, node: Path, request: int, argument: int | bytearray, what: str) -> int:
    try:
        return io.ioctl(node, request, argument)
    except OSError as error:
        raise FpgaIoctlError(f"{what} on {node} failed: {error.strerror or error}") from None


@dataclass(frozen=True)
class PortInfo:
    flags: int
    regions: int
    umsgs: int


@dataclass(frozen=True)
class RegionInfo:
    flags: int
    index: int
    size: int
    offset: int


def api_version(io: FpgaIoctl, node: Path, driver: str) -> int:
    return _call(io, node, REQUESTS[driver].api_version, 0, "API version")


def check_extension(io: FpgaIoctl, node: Path, driver: str) -> int:
    return _call(io, node, REQUESTS[driver].check_extension, 0, "extension check")


def port_reset(io: FpgaIoctl, node: Path, driver: str) -> None:
    _call(io, node, REQUESTS[driver].port_reset, 0, "port reset")


def port_info(io: FpgaIoctl, node: Path, driver: str) -> PortInfo:
    layout = REQUESTS[driver].port_info_layout
    buffer = bytearray(layout.size)
    struct.pack_into("<I", buffer, 0, layout.size)
    _call(io, node, REQUESTS[driver].port_info, buffer, "port info")
    fields = layout.unpack(buffer)
    if driver == DFL:
        return PortInfo(flags=fields[1], regions=fields[2], umsgs=fields[3])
    return PortInfo(flags=fields[1], regions=fields[3], umsgs=fields[4])


def region_info(io: FpgaIoctl, node: Path, driver: str, index: int) -> RegionInfo:
    buffer = bytearray(REGION_INFO.pack(REGION_INFO.size, 0, index, 0, 0, 0))
    _call(io, node, REQUESTS[driver].region_info, buffer, f"region {index} info")
    _, flags, got_index, _, size, offset = REGION_INFO.unpack(buffer)
    return RegionInfo(flags, got_index, size, offset)


def port_pr(io: FpgaIoctl, fme_node: Path, driver: str, port_id: int, raw: bytearray) -> None:
    """Program ``raw`` (the raw bitstream, without GBS header) into port ``port_id`` of the FME."""
    if not raw:
        raise FpgaIoctlError(f"partial reconfiguration on {fme_node}: the bitstream has no raw data")
    layout = REQUESTS[driver].pr
    data = (ctypes.c_char * len(raw)).from_buffer(raw)
    fields = [layout.size, 0, port_id, len(raw), ctypes.addressof(data)]
    if driver == OPAE:
        fields.append(0)
    buffer = bytearray(layout.pack(*fields))
    try:
        _call(io, fme_node, REQUESTS[driver].port_pr, buffer, f"partial reconfiguration of port {port_id}")
    except FpgaIoctlError as error:
        if driver == OPAE and (status := layout.unpack(buffer)[5]):
            raise FpgaIoctlError(f"{error} (PR status {status:#x})") from None
        raise
    finally:
        del data


def _release_argument(driver: str, port_id: int) -> bytearray:
    layout = REQUESTS[driver].release
    return bytearray(layout.pack(port_id) if driver == DFL else layout.pack(layout.size, 0, port_id))


def port_release(io: FpgaIoctl, fme_node: Path, driver: str, port_id: int) -> None:
    _call(
        io,
        fme_node,
        REQUESTS[driver].port_release,
        _release_argument(driver, port_id),
        f"release of port {port_id}",
    )


def port_assign(io: FpgaIoctl, fme_node: Path, driver: str, port_id: int) -> None:
    _call(
        io,
        fme_node,
        REQUESTS[driver].port_assign,
        _release_argument(driver, port_id),
        f"assign of port {port_id}",
    )


# ----- simulated FME -----------------------------------------------------------------------------

SIMULATED_PAYLOAD_MAGIC = b"SIMULATED-AFU:"
"""A raw bitstream the simulated FME understands starts with this and the 32-hex AFU ID it loads
(a real AFU's ID lives in registers the bitstream configures)."""
UNPROGRAMMED = "f" * 32


def simulated_payload(afu_id: str, size: int = 4096) -> bytes:
    """A raw bitstream that the simulated FME programs as ``afu_id``; padded to ``size`` bytes."""
    head = SIMULATED_PAYLOAD_MAGIC + afu_id.encode()
    return head + bytes(max(0, size - len(head)))


def _simulated_afu(payload: bytes) -> str | None:
    if not payload.startswith(SIMULATED_PAYLOAD_MAGIC):
        return None
    afu = payload[len(SIMULATED_PAYLOAD_MAGIC) : len(SIMULATED_PAYLOAD_MAGIC) + 32].decode("ascii", "replace")
    return afu.lower() if len(afu) == 32 and all(c in "0123456789abcdefABCDEF" for c in afu) else None


@dataclass
class SimulatedFme:
    """Answers FPGA ioctls for the devices of a simulated node below ``root``.

    A PR whose payload is :func:`simulated_payload` sets the port's ``afu_id``; any other payload
    leaves the port unprogrammed (all ``f``) and fails with EIO, as a corrupt bitstream would.
    ``calls`` records (device name, request) for tests.
    """

    root: Path
    released: set[tuple[str, int]] = field(default_factory=set)
    calls: list[tuple[str, int]] = field(default_factory=list)

    def ioctl(self, node: Path, request: int, argument: int | bytearray) -> int:
        name = os.path.basename(os.path.realpath(node))
        self.calls.append((name, request))
        kind = driver_of(name)
        if kind is None or not under_root(self.root, f"/sys/bus/platform/devices/{name}").exists():
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
        role, driver = kind
        requests = REQUESTS[driver]
        if request in (requests.api_version, requests.check_extension):
            return API_VERSION if request == requests.api_version else 0
        if role == "port" and request == requests.port_reset:
            return 0
        if role == "port" and request == requests.port_info:
            return self._port_info(requests, argument)
        if role == "port" and request == requests.region_info:
            return self._region_info(argument)
        if role == "fme" and request == requests.port_pr:
            return self._pr(name, driver, requests, argument)
        if role == "fme" and request in (requests.port_release, requests.port_assign):
            return self._release_or_assign(name, driver, requests, request == requests.port_release, argument)
        raise OSError(errno.ENOTTY, os.strerror(errno.ENOTTY))

    @staticmethod
    def _buffer(argument: int | bytearray, size: int) -> bytearray:
        if not isinstance(argument, bytearray) or len(argument) < size:
            raise OSError(errno.EFAULT, os.strerror(errno.EFAULT))
        return argument

    def _port_info(self, requests: Requests, argument: int | bytearray) -> int:
        layout = requests.port_info_layout
        buffer = self._buffer(argument, layout.size)
        if struct.unpack_from("<I", buffer)[0] < layout.size:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        values = (layout.size, 0, 1, 0) if layout.size == 16 else (layout.size, 0, 0, 1, 0, 0)
        layout.pack_into(buffer, 0, *values)
        return 0

    def _region_info(self, argument: int | bytearray) -> int:
        buffer = self._buffer(argument, REGION_INFO.size)
        argsz, _, index, _, _, _ = REGION_INFO.unpack_from(buffer)
        if argsz < REGION_INFO.size or index != 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        REGION_INFO.pack_into(buffer, 0, argsz, 0x7, index, 0, 0x40000, 0)
        return 0

    def _port_sysfs(self, fme_name: str, port_id: int) -> tuple[str, Path]:
        _, ports = list_devices(self.root)
        for port_name in ports:
            try:
                port = open_port(self.root, under_root(self.root, f"/dev/{port_name}"))
                if port.port_id == port_id and fme_of_port(self.root, port).name == fme_name:
                    return port.name, port.sysfs
            except FpgaDeviceError:
                continue
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    def _pr(self, fme_name: str, driver: str, requests: Requests, argument: int | bytearray) -> int:
        buffer = self._buffer(argument, requests.pr.size)
        fields = requests.pr.unpack_from(buffer)
        argsz, flags, port_id, size, address = fields[:5]
        if argsz < requests.pr.size or flags != 0 or size == 0 or address == 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        _, sysfs = self._port_sysfs(fme_name, port_id)
        if (fme_name, port_id) in self.released:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        afu = _simulated_afu(ctypes.string_at(address, min(size, 64)))
        (sysfs / "afu_id").write_text((afu or UNPROGRAMMED) + "\n", encoding="utf-8")
        if afu is None:
            if driver == OPAE:
                requests.pr.pack_into(buffer, 0, *fields[:5], 0x1)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return 0

    def _release_or_assign(
        self, fme_name: str, driver: str, requests: Requests, release: bool, argument: int | bytearray
    ) -> int:
        layout = requests.release
        buffer = self._buffer(argument, layout.size)
        port_id = layout.unpack_from(buffer)[0 if driver == DFL else 2]
        self._port_sysfs(fme_name, port_id)
        key = (fme_name, port_id)
        if release == (key in self.released):
            raise OSError(
                errno.EBUSY if release else errno.EINVAL,
                os.strerror(errno.EBUSY if release else errno.EINVAL),
            )
        if release:
            self.released.add(key)
        else:
            self.released.discard(key)
        return 0


# ----- backend chosen by the node's sysfs ---------------------------------------------------------

SIMULATION_MARKER = "intel_device_plugins_simulation"
"""A file the node simulator writes into the sysfs directory of every FPGA device it makes.

No kernel driver has an attribute of this name, and sysfs lets nobody create files (not even
root), so on hardware the file cannot exist. Whether it is there is up to whoever builds the
node's ``/sys``; no part of a container's request (environment, annotations, mounts, devices) is
looked at."""


def is_simulated_device(root: Path, name: str) -> bool:
    """Whether the node's sysfs marks FPGA device ``name`` (``dfl-fme.0``, ...) as simulated."""
    return under_root(root, f"/sys/bus/platform/devices/{name}/{SIMULATION_MARKER}").is_file()


@dataclass
class SysfsSelectedIoctl:
    """Each ioctl goes to the simulated FME when the node's sysfs marks its device as simulated
    (:data:`SIMULATION_MARKER`), otherwise to the driver, exactly as :class:`DeviceIoctl` does.

    This lets the runtime run the hook unchanged, as the plugin's CDI spec names it, on a simulated
    node whose device nodes have no driver behind them."""

    root: Path
    device: FpgaIoctl = field(default_factory=DeviceIoctl)
    simulated: SimulatedFme = field(init=False)

    def __post_init__(self) -> None:
        self.simulated = SimulatedFme(self.root)

    def ioctl(self, node: Path, request: int, argument: int | bytearray) -> int:
        if is_simulated_device(self.root, os.path.basename(os.path.realpath(node))):
            return self.simulated.ioctl(node, request, argument)
        return self.device.ioctl(node, request, argument)
