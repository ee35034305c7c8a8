"""``fpga_tool``: inspect bitstreams, install them into the store, list, inspect and program FPGA
devices. Commands, flags and messages as upstream's tool.

Differences: ``-dry-run`` never copies, even with ``-q``; ``install`` writes through a temporary file
and a rename, so the CRI hook never reads a half-copied bitstream; ``pr`` checks that the port
reports the bitstream's AFU afterwards; ``-dry-run install`` of a file that ``install`` refuses (an
empty or unsafe ID) says why; ``-prefix`` and ``-simulate`` run it against the node simulator.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from intel_device_plugins.flags import GoFlagParser, parse_bool
from intel_device_plugins.plugins.fpga.bitstream import (
    BITSTREAM_DIR,
    Bitstream,
    BitstreamError,
    canonical_id,
    open_bitstream,
    read_raw_bitstream,
)
from intel_device_plugins.plugins.fpga.crihook import ioctl_for
from intel_device_plugins.plugins.fpga.devices import (
    Fme,
    FpgaDeviceError,
    PciDevice,
    Port,
    driver_of,
    fme_of_port,
    list_devices,
    open_fme,
    open_port,
    read_afu_id,
    under_root,
)
from intel_device_plugins.plugins.fpga.fme import (
    FpgaIoctl,
    FpgaIoctlError,
    api_version,
    port_assign,
    port_info,
    port_pr,
    port_release,
    region_info,
)

COMMANDS = (
    "info",
    "fpgainfo",
    "install",
    "list",
    "fmeinfo",
    "portinfo",
    "list-fme",
    "list-port",
    "pr",
    "release",
    "assign",
)
NEEDS_BITSTREAM = {"info", "install", "pr"}
NEEDS_DEVICE = {"fpgainfo", "fmeinfo", "portinfo", "release", "assign", "pr"}


class ToolError(RuntimeError):
    """The command failed; the message says why."""


@dataclass(frozen=True)
class Options:
    bitstream: str
    device: str
    dry_run: bool
    force: bool
    quiet: bool
    port: int
    root: Path


def _field(out: TextIO, label: str, value: object) -> None:
    out.write(f"{label:<33}: {value}\n")


def _go_quote(text: str) -> str:
    """Go's %q for the plain strings printed here."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ----- bitstreams --------------------------------------------------------------------------------


def print_bitstream_info(options: Options, out: TextIO) -> None:
    bitstream = open_bitstream(options.bitstream)
    out.write(f"Bitstream file        : {_go_quote(options.bitstream)}\n")
    out.write(f"Interface UUID        : {_go_quote(bitstream.interface_id)}\n")
    out.write(f"Accelerator Type UUID : {_go_quote(bitstream.afu_id)}\n")
    out.write(f"Unique UUID           : {_go_quote(bitstream.unique_id)}\n")
    out.write(f"Installation Path     : {_go_quote(_store_path(bitstream, BITSTREAM_DIR)[0])}\n")
    extra = bitstream.extra_metadata()
    if extra and not options.quiet:
        out.write("Extra:\n")
        for key in sorted(extra):
            out.write(f"\t{key} : {_go_quote(extra[key])}\n")


def _store_path(bitstream: Bitstream, root: str) -> tuple[str, str]:
    """Where ``install`` would put the file, or ``""`` and why it would refuse it (an empty or unsafe ID).

    Inspecting shows such a file in full, as upstream's tool does with its empty installation path."""
    try:
        return bitstream.install_path(root), ""
    except BitstreamError as error:
        return "", error.reason


def _exists_message(destination: Path) -> str:
    return f"destination file {_go_quote(str(destination))} already exist. Use --force to overwrite it"


def install_bitstream(options: Options, out: TextIO) -> None:
    bitstream = open_bitstream(options.bitstream)
    root = str(under_root(options.root, BITSTREAM_DIR))
    if options.dry_run:
        path, refusal = _store_path(bitstream, root)
        if not options.quiet:
            out.write(f"Installing bitstream {_go_quote(options.bitstream)} as {_go_quote(path)}\n")
            out.write(
                "Dry-run: no copying performed"
                + (f"; install refuses this file: {refusal}\n" if refusal else "\n")
            )
        return
    destination = Path(bitstream.install_path(root))
    if not options.quiet:
        out.write(f"Installing bitstream {_go_quote(options.bitstream)} as {_go_quote(str(destination))}\n")
    try:
        destination.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as error:
        raise ToolError(f"unable to create destination directory: {error}") from None
    if destination.exists() and not options.force:
        raise ToolError(_exists_message(destination))
    descriptor, temporary = tempfile.mkstemp(prefix=".install-", dir=destination.parent)
    try:
        with open(options.bitstream, "rb") as source, os.fdopen(descriptor, "wb") as target:
            while chunk := source.read(1024 * 1024):
                target.write(chunk)
        os.chmod(temporary, 0o644)
        if options.force:
            os.replace(temporary, destination)
        else:
            try:
                os.link(temporary, destination)  # fails if another install got there first
            except FileExistsError:
                raise ToolError(_exists_message(destination)) from None
    except OSError as error:
        raise ToolError(f"can't create destination file: {error}") from None
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


# ----- devices -----------------------------------------------------------------------------------


def _node(options: Options) -> Path:
    """The ``-d`` node below the root; a bare name (``dfl-port.0``) means ``/dev/<name>``."""
    device = options.device if "/" in options.device else f"/dev/{options.device}"
    return under_root(options.root, device)


def _check_api(io: FpgaIoctl, node: Path, driver: str) -> int:
    try:
        return api_version(io, node, driver)
    except FpgaIoctlError as error:
        raise ToolError(f"kernel API mismatch: {error}") from None


def print_pci(pci: PciDevice, quiet: bool, out: TextIO) -> None:
    _field(out, "PCIe s:b:d:f", pci.address)
    if pci.physfn is not None and not quiet:
        _field(out, "Physical Function PCIe s:b:d:f", pci.physfn.address)
    _field(out, "Device Id", f"{pci.vendor}:{pci.device}")
    if not quiet:
        _field(out, "Device Class", pci.pci_class)
        _field(out, "Local CPUs", pci.cpus)
        _field(out, "NUMA", pci.numa)
        if pci.vfs:
            _field(out, "SR-IOV Virtual Functions", pci.vfs)
        if pci.total_vfs:
            _field(out, "SR-IOV maximum Virtual Functions", pci.total_vfs)


def print_fme(fme: Fme, version: int, options: Options, out: TextIO) -> None:
    out.write("//****** FME ******//\n")
    _field(out, "Name", fme.name)
    _field(out, "Device Node", options.device or fme.node)
    _field(out, "SysFS Path", fme.sysfs)
    print_pci(fme.pci, options.quiet, out)
    _field(out, "Interface UUID", fme.interface_id)
    if not options.quiet:
        _field(out, "Kernel API Version", version)
        _field(out, "Ports Num", fme.ports_num if fme.ports_num.isdigit() else -1)
        if fme.socket_id.isdigit():
            _field(out, "Socket Id", fme.socket_id)
        _field(out, "Bitstream Id", fme.bitstream_id)
        _field(out, "Bitstream Metadata", fme.bitstream_metadata)


def print_port(io: FpgaIoctl, port: Port, fme: Fme, version: int, options: Options, out: TextIO) -> None:
    out.write("//****** PORT ******//\n")
    _field(out, "Name", port.name)
    _field(out, "Device Node", options.device)
    _field(out, "SysFS Path", port.sysfs)
    print_pci(port.pci, options.quiet, out)
    _field(out, "FME Name", fme.name)
    _field(out, "Port Id", port.port_id)
    _field(out, "Interface UUID", fme.interface_id)
    _field(out, "Accelerator UUID", read_afu_id(port))
    if options.quiet:
        return
    _field(out, "Kernel API Version", version)
    try:
        info = port_info(io, port.node, port.driver)
        _field(out, "Port Regions", info.regions)
        for index in range(info.regions):
            region = region_info(io, port.node, port.driver, index)
            _field(
                out, "Port Region (Index/Size/Offset)", f"{region.index} / {region.size} / {region.offset}"
            )
    except FpgaIoctlError as error:
        raise ToolError(str(error)) from None


def fpga_info(io: FpgaIoctl, command: str, options: Options, out: TextIO) -> None:
    kind = driver_of(os.path.basename(options.device))
    if (
        kind is None
        or (command == "fmeinfo" and kind[0] != "fme")
        or (command == "portinfo" and kind[0] != "port")
    ):
        raise ToolError(f"unknown FPGA device file {options.device}")
    role, driver = kind
    node = _node(options)
    version = _check_api(io, node, driver)
    if role == "fme":
        print_fme(open_fme(options.root, node), version, options, out)
    else:
        port = open_port(options.root, node)
        print_port(io, port, fme_of_port(options.root, port), version, options, out)


def list_fpga(options: Options, show_fmes: bool, show_ports: bool, out: TextIO) -> None:
    fmes, ports = list_devices(options.root)
    for show, label, names in ((show_fmes, "FMEs", fmes), (show_ports, "Ports", ports)):
        if not show:
            continue
        if not options.quiet:
            out.write(f"Detected FPGA {label}: {len(names)}\n")
        for name in names:
            out.write(name + "\n")


def _checked_node(io: FpgaIoctl, options: Options, role: str, what: str) -> Path:
    """The ``-d`` node if its name is an FME or port (``role``) and the driver's API is known."""
    kind = driver_of(os.path.basename(options.device))
    if kind is None or kind[0] != role:
        raise ToolError(f"unknown FPGA {what} {options.device}")
    node = _node(options)
    _check_api(io, node, kind[1])
    return node


def program(io: FpgaIoctl, options: Options, out: TextIO) -> None:
    port = open_port(options.root, _checked_node(io, options, "port", "port"))
    fme = fme_of_port(options.root, port)
    bitstream = open_bitstream(options.bitstream)
    if not options.quiet:
        out.write(
            f"Before: Interface ID: {_go_quote(fme.interface_id)} AFU ID: {_go_quote(read_afu_id(port))}\n"
        )
        out.write(f"Programming {_go_quote(options.bitstream)} to port {_go_quote(options.device)}: ")
    failure: ToolError | None = None
    try:
        _program_checked(io, options, port, fme, bitstream)
    except ToolError as error:
        failure = error
    if not options.quiet:
        out.write("FAILED\n" if failure else "OK\n")
        out.write(
            f"After : Interface ID: {_go_quote(fme.interface_id)} AFU ID: {_go_quote(read_afu_id(port))}\n"
        )
    if failure is not None:
        raise failure


def _program_checked(io: FpgaIoctl, options: Options, port: Port, fme: Fme, bitstream: Bitstream) -> None:
    if canonical_id(fme.interface_id) != bitstream.interface_id:
        raise ToolError(
            f"FME interface UUID {_go_quote(fme.interface_id)} is not compatible with bitstream UUID "
            f"{_go_quote(bitstream.interface_id)}"
        )
    if options.dry_run:
        return
    try:
        port_pr(io, fme.node, fme.driver, port.port_id, read_raw_bitstream(bitstream))
    except (FpgaIoctlError, BitstreamError) as error:
        raise ToolError(str(error)) from None
    programmed = canonical_id(read_afu_id(port))
    if programmed != bitstream.afu_id:
        raise ToolError(f"programmed function {programmed} instead of {bitstream.afu_id}")


def release_or_assign(io: FpgaIoctl, options: Options, release: bool) -> None:
    node = _checked_node(io, options, "fme", "FME")
    fme = open_fme(options.root, node)
    try:
        (port_release if release else port_assign)(io, node, fme.driver, options.port)
    except FpgaIoctlError as error:
        raise ToolError(str(error)) from None


def run_command(command: str, options: Options, io: FpgaIoctl, out: TextIO) -> None:
    """Run one command; raises :class:`ToolError`, :class:`BitstreamError` or
    :class:`FpgaDeviceError` with the reason."""
    if command in NEEDS_BITSTREAM and not options.bitstream:
        raise ToolError("Invalid arguments: bitstream filename is missing")
    if command in NEEDS_DEVICE and not options.device:
        raise ToolError("Invalid arguments: FPGA device name is missing")
    if command == "info":
        print_bitstream_info(options, out)
    elif command == "install":
        install_bitstream(options, out)
    elif command in ("fpgainfo", "fmeinfo", "portinfo"):
        fpga_info(io, command, options, out)
    elif command in ("list", "list-fme", "list-port"):
        list_fpga(options, command != "list-port", command != "list-fme", out)
    elif command == "pr":
        program(io, options, out)
    elif command in ("release", "assign"):
        release_or_assign(io, options, command == "release")
    else:
        raise ToolError(f"unknown command [{command}]")


def build_parser() -> GoFlagParser:
    parser = GoFlagParser(prog="fpga_tool", description="Inspect, install and program FPGA bitstreams")
    parser.add_argument(
        "-b", "--b", dest="bitstream", default="", help="Path to bitstream file (GBS or AOCX)"
    )
    parser.add_argument("-d", "--d", dest="device", default="", help="Path to device node (FME or Port)")
    parser.add_flag("dry-run", action="store_true", help="Don't write/program, just validate and log")
    parser.add_flag("force", action="store_true", help="Force overwrite operation for installing bitstreams")
    parser.add_flag("q", action="store_true", help="Quiet mode. Only errors will be reported")
    parser.add_argument(
        "-p",
        "--p",
        dest="port",
        type=int,
        default=0,
        help="Port number for release/assign operations. Default: 0",
    )
    parser.add_flag("prefix", default="", help="root for /sys, /dev and /srv (node simulator)")
    parser.add_flag(
        "simulate", action="store_true", help="answer FPGA ioctls from the simulated node under -prefix"
    )
    parser.add_argument("command", nargs="?", default="", help=", ".join(COMMANDS))
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    return parser


BOOL_FLAGS = ("dry-run", "force", "q", "simulate")


def go_bool_flags(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """Rewrite Go's ``-flag=true``/``-flag=false`` for boolean flags into ``-flag`` or nothing.

    A Go boolean flag never takes the next word as its value (``-q list`` is quiet ``list``), so the
    parser declares them as switches and only the ``=`` form needs translating.
    """
    result: list[str] = []
    for position, word in enumerate(argv):
        if word == "--":
            return result + list(argv[position:])
        name, separator, value = word.lstrip("-").partition("=")
        if word.startswith("-") and separator and name in names:
            try:
                if parse_bool(value):
                    result.append(f"-{name}")
                continue
            except argparse.ArgumentTypeError:
                pass  # the parser reports it
        result.append(word)
    return result


def main(argv: Sequence[str] | None = None, io: FpgaIoctl | None = None, out: TextIO | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(go_bool_flags(words, BOOL_FLAGS))
    stdout = out or sys.stdout
    if not args.command:
        print(f"Please provide command: {', '.join(COMMANDS)}", file=sys.stderr)
        return 1
    root = Path(args.prefix or "/")
    options = Options(args.bitstream, args.device, args.dry_run, args.force, args.q, args.port, root)
    try:
        if args.command not in COMMANDS:
            raise ToolError(f"unknown command [{' '.join([args.command, *args.arguments])}]")
        run_command(args.command, options, io or ioctl_for(root, args.simulate), stdout)
    except (ToolError, BitstreamError, FpgaDeviceError) as error:
        stdout.flush()
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
