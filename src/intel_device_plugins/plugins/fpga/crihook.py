"""``intel_fpga_crihook``: the OCI ``createRuntime`` hook that programs FPGA ports before a
container starts (region mode).

The runtime passes the container's OCI state on stdin. The hook reads ``<bundle>/config.json``,
pairs ``FPGA_REGION_<n>`` with ``FPGA_AFU_<n>`` from the container's environment, gives each pair
its own FPGA port from the container's devices (a port whose FME has that interface ID), and
programs every port whose AFU differs through the FME's partial-reconfiguration ioctl, with the
bitstream ``/srv/intel.com/fpga/<region>/<afu>.gbs`` (or ``.aocx``). It then checks that the port
reports the bitstream's AFU. Any failure: the reason on stderr and exit code 1, so the runtime
refuses to start the container.

The ioctls go to the FME's driver, except for a device that the node's own sysfs marks as
simulated (``fme.SIMULATION_MARKER``, written only by the node simulator): those go to the
simulated FME, so the same hook, run by a real runtime from the plugin's CDI spec, programs a
simulated node's port. Nothing in the container's request takes part in that choice.

Unlike upstream: each pair gets a distinct port, every pair is handled (not just the first
already-programmed one), an environment entry without ``=`` is ignored, and IDs that are not plain
hexadecimal-like names are refused before any path is built from them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.fpga.bitstream import (
    AOCX_EXTENSION,
    BITSTREAM_DIR,
    GBS_EXTENSION,
    Bitstream,
    BitstreamError,
    canonical_id,
    is_safe_id,
    open_bitstream,
    read_raw_bitstream,
)
from intel_device_plugins.plugins.fpga.devices import (
    Fme,
    FpgaDeviceError,
    Port,
    driver_of,
    fme_of_port,
    open_port,
    read_afu_id,
    under_root,
)
from intel_device_plugins.plugins.fpga.fme import (
    FpgaIoctl,
    FpgaIoctlError,
    SimulatedFme,
    SysfsSelectedIoctl,
    port_pr,
)

MODE_ANNOTATION = "com.intel.fpga.mode"
REGION_PREFIX = "FPGA_REGION_"
AFU_PREFIX = "FPGA_AFU_"
MAX_STATE_BYTES = 1024 * 1024
MAX_CONFIG_BYTES = 16 * 1024 * 1024
REQUEST_PREFIX = "couldn't get FPGA region, AFU and device node: "


class HookError(RuntimeError):
    """Why the container must not start."""


@dataclass(frozen=True)
class DeviceEntry:
    """One ``linux.devices`` entry of the container's config."""

    path: str
    type: str
    major: int | None
    minor: int | None


@dataclass(frozen=True)
class FpgaRequest:
    """One ``FPGA_REGION_<n>``/``FPGA_AFU_<n>`` pair, IDs canonical."""

    index: str
    region: str
    afu: str


@dataclass(frozen=True)
class Candidate:
    """A port listed for the container, with the interface ID of its FME."""

    port: Port
    fme: Fme


@dataclass(frozen=True)
class Outcome:
    request: FpgaRequest
    port: str
    programmed: str | None
    """The bitstream written, or ``None`` when the port already ran the AFU."""


# ----- pure core ---------------------------------------------------------------------------------


def parse_state(data: bytes) -> tuple[Path, Mapping[str, Any]]:
    """(bundle directory, annotations) from the OCI state JSON."""
    if len(data) > MAX_STATE_BYTES:
        raise HookError(f"OCI state on stdin is larger than {MAX_STATE_BYTES} bytes")
    try:
        state = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise HookError(f"can't decode OCI state from stdin: {error}") from None
    if not isinstance(state, dict):
        raise HookError("can't decode OCI state from stdin: not a JSON object")
    bundle = state.get("bundle")
    if not isinstance(bundle, str) or not bundle:
        raise HookError("'bundle' field is not set in the stdin JSON")
    annotations = state.get("annotations")
    return Path(bundle), annotations if isinstance(annotations, dict) else {}


def parse_config(path: Path, data: bytes) -> tuple[list[str], list[DeviceEntry]]:
    """(``process.env``, ``linux.devices``) of a bundle's ``config.json``."""
    try:
        config = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise HookError(f"can't decode {path}: {error}") from None
    if not isinstance(config, dict):
        raise HookError(f"can't decode {path}: not a JSON object")
    process = config.get("process")
    env = process.get("env") if isinstance(process, dict) else None
    if not isinstance(env, list) or not env:
        raise HookError(f"{path}: process.env is empty")
    linux = config.get("linux")
    raw_devices = linux.get("devices") if isinstance(linux, dict) else None
    if not isinstance(raw_devices, list) or not raw_devices:
        raise HookError(f"{path}: linux.devices is empty")
    devices = []
    for index, entry in enumerate(raw_devices):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise HookError(f"{path}: linux.devices[{index}] has no path")
        major, minor = entry.get("major"), entry.get("minor")
        devices.append(
            DeviceEntry(
                path=entry["path"],
                type=str(entry.get("type", "")),
                major=major if isinstance(major, int) and not isinstance(major, bool) else None,
                minor=minor if isinstance(minor, int) and not isinstance(minor, bool) else None,
            )
        )
    return [item for item in env if isinstance(item, str)], devices


def _index_order(index: str) -> tuple[int, int, str]:
    return (0, int(index), index) if index.isdigit() else (1, 0, index)


def fpga_requests(env: Sequence[str]) -> list[FpgaRequest]:
    """The region/AFU pairs the environment asks for, in index order."""
    regions: dict[str, str] = {}
    afus: dict[str, str] = {}
    for entry in env:
        name, separator, value = entry.partition("=")
        if not separator:
            continue  # not a variable; runtimes pass such entries through unchanged
        for prefix, target in ((REGION_PREFIX, regions), (AFU_PREFIX, afus)):
            if name.startswith(prefix):
                target[name[len(prefix) :]] = value
    if not regions:
        raise HookError(REQUEST_PREFIX + "No FPGA_REGION_* environment variables are set")
    if not afus:
        raise HookError(REQUEST_PREFIX + "No FPGA_AFU_* environment variables are set")
    requests = []
    for index in sorted(regions, key=_index_order):
        if index not in afus:
            raise HookError(REQUEST_PREFIX + f"Environment variable {AFU_PREFIX}{index} is not set")
        region, afu = canonical_id(regions[index]), canonical_id(afus[index])
        for name, value in ((REGION_PREFIX + index, region), (AFU_PREFIX + index, afu)):
            if not is_safe_id(value):
                raise HookError(
                    REQUEST_PREFIX
                    + f"{name}={value!r} is not a valid ID (it must be letters and digits only)"
                )
        requests.append(FpgaRequest(index, region, afu))
    return requests


def port_entries(devices: Sequence[DeviceEntry]) -> list[DeviceEntry]:
    """The devices that are FPGA ports, by node name."""
    return [
        device
        for device in devices
        if (kind := driver_of(os.path.basename(device.path))) is not None and kind[0] == "port"
    ]


def assign_ports(
    requests: Sequence[FpgaRequest], candidates: Sequence[Candidate]
) -> list[tuple[FpgaRequest, Candidate]]:
    """Give each request its own port whose FME has the requested interface ID.

    Requests are served in index order, each taking the first free matching port, so two requests
    for the same region get two ports (upstream could hand both the same one).
    """
    used: set[str] = set()
    pairs = []
    for request in requests:
        for candidate in candidates:
            if candidate.port.name not in used and canonical_id(candidate.fme.interface_id) == request.region:
                used.add(candidate.port.name)
                pairs.append((request, candidate))
                break
        else:
            raise HookError(
                f"can't find appropriate device for region {request.region} "
                f"({REGION_PREFIX}{request.index}): {_ports_said(candidates, used)}"
            )
    return pairs


def _ports_said(candidates: Sequence[Candidate], used: set[str]) -> str:
    """What the container's ports are, for a request none of them can serve."""
    if not candidates:
        return "the container has no FPGA port"
    ports = ", ".join(
        f"{c.port.name} in region {canonical_id(c.fme.interface_id)}"
        + (" (taken by an earlier pair)" if c.port.name in used else "")
        for c in candidates
    )
    return f"the container's FPGA ports: {ports}"


def bitstream_path(store: Path, region: str, afu: str, exists: Callable[[Path], bool]) -> Path:
    """``<store>/<region>/<afu>.gbs``, else ``.aocx``; the IDs were checked to be plain names."""
    if not (is_safe_id(region) and is_safe_id(afu)):
        raise HookError(f"{region}/{afu}: not a valid bitstream name")
    for extension in (GBS_EXTENSION, AOCX_EXTENSION):
        candidate = store / region / f"{afu}{extension}"
        if exists(candidate):
            return candidate
    raise HookError(f"{region}/{afu}: bitstream not found")


def check_bitstream(bitstream: Bitstream, request: FpgaRequest, fme: Fme) -> None:
    """The file's IDs must be what its name promises and what the FME can take."""
    if bitstream.unique_id != request.afu:
        raise HookError(f"{bitstream.path}: the file is for {bitstream.unique_id}, not {request.afu}")
    if bitstream.interface_id != canonical_id(fme.interface_id):
        raise HookError(
            f"FME interface UUID {fme.interface_id!r} is not compatible with bitstream UUID "
            f"{bitstream.interface_id!r} ({bitstream.path})"
        )


# ----- the hook ----------------------------------------------------------------------------------


def _read_limited(path: Path, limit: int) -> bytes:
    with path.open("rb") as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise HookError(f"{path}: larger than {limit} bytes")
    return data


def candidates_for(root: Path, devices: Sequence[DeviceEntry]) -> list[Candidate]:
    candidates = []
    for device in port_entries(devices):
        name = os.path.basename(device.path)
        number = (
            (device.major, device.minor) if device.major is not None and device.minor is not None else None
        )
        try:
            port = open_port(root, under_root(root, f"/dev/{name}"), number)
            candidates.append(Candidate(port, fme_of_port(root, port)))
        except FpgaDeviceError as error:
            raise HookError(f"FPGA port {device.path}: {error}") from None
    return candidates


def program_port(io: FpgaIoctl, store: Path, request: FpgaRequest, candidate: Candidate) -> Outcome:
    port, fme = candidate.port, candidate.fme
    if canonical_id(read_afu_id(port)) == request.afu:
        return Outcome(request, port.name, None)
    path = bitstream_path(store, request.region, request.afu, Path.is_file)
    try:
        bitstream = open_bitstream(str(path))
        check_bitstream(bitstream, request, fme)
        raw = read_raw_bitstream(bitstream)
    except BitstreamError as error:
        raise HookError(str(error)) from None
    try:
        port_pr(io, fme.node, fme.driver, port.port_id, raw)
    except FpgaIoctlError as error:
        raise HookError(f"{port.name}: {error}") from None
    programmed = canonical_id(read_afu_id(port))
    if programmed != bitstream.afu_id:
        raise HookError(f"{port.name}: programmed function {programmed} instead of {bitstream.afu_id}")
    return Outcome(request, port.name, str(path))


def run_hook(state: bytes, root: Path, io: FpgaIoctl) -> list[Outcome]:
    """Everything the hook does for one container; raises :class:`HookError` with the reason."""
    bundle, _annotations = parse_state(state)
    if not bundle.is_dir():
        raise HookError(f"bundle directory: {bundle}: not a directory")
    config_path = bundle / "config.json"
    try:
        env, devices = parse_config(config_path, _read_limited(config_path, MAX_CONFIG_BYTES))
    except OSError as error:
        raise HookError(f"{config_path}: {error.strerror}") from None
    requests = fpga_requests(env)
    pairs = assign_ports(requests, candidates_for(root, devices))
    store = under_root(root, BITSTREAM_DIR)
    return [program_port(io, store, request, candidate) for request, candidate in pairs]


def ioctl_for(root: Path, simulate: bool) -> FpgaIoctl:
    """With ``-simulate``, the simulated FME of the node simulator's tree at ``root``. Otherwise
    each device's driver, unless the node's own sysfs marks that device as simulated: the flags and
    the node's sysfs decide, never the container being started (see ``SysfsSelectedIoctl``)."""
    if not simulate:
        return SysfsSelectedIoctl(root)
    if root == Path("/"):
        raise SystemExit("-simulate needs -prefix: the simulated node's root")
    return SimulatedFme(root)


def build_parser() -> GoFlagParser:
    parser = GoFlagParser(
        prog="intel_fpga_crihook",
        description="OCI createRuntime hook programming FPGA ports (state on stdin)",
    )
    parser.add_argument(
        "-prefix",
        "--prefix",
        dest="prefix",
        default="",
        help="root for /sys, /dev, /srv and the bundle (simulation)",
    )
    parser.add_bool_flag("simulate", help="answer FPGA ioctls from the simulated node under -prefix")
    parser.add_argument(
        "-v", "--v", dest="verbosity", type=int, default=0, help="log each port's outcome at 1+"
    )
    return parser


def main(argv: Sequence[str] | None = None, io: FpgaIoctl | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = Path(args.prefix or "/")
    if io is None:
        io = ioctl_for(root, args.simulate)
    try:
        outcomes = run_hook(sys.stdin.buffer.read(MAX_STATE_BYTES + 1), root, io)
    except HookError as error:
        print(f"intel_fpga_crihook: {error}", file=sys.stderr)
        return 1
    if args.verbosity > 0:
        for outcome in outcomes:
            action = f"programmed {outcome.programmed}" if outcome.programmed else "already programmed"
            print(
                f"intel_fpga_crihook: {outcome.port}: region {outcome.request.region} "
                f"AFU {outcome.request.afu}: {action}",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
