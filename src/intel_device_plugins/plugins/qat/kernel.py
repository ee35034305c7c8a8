"""QAT kernel mode (``-mode kernel``): devices driven by the QAT kernel driver and its user-space library.

Resources are the configuration sections of ``/etc/<type>_dev<N>.conf`` that user-space processes
attach to; ``adf_ctl status`` says which devices are up. Upstream dropped this mode in v0.34; it is
kept here behind the flag for nodes still on that stack.

Pure functions turn the ``adf_ctl`` output and the INI files into a device tree; running ``adf_ctl``
is the one side effect and is injected (:data:`CommandRunner`) so tests feed it any output.
"""

from __future__ import annotations

import configparser
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins import sysfs
from intel_device_plugins.deviceplugin.model import (
    ContainerAllocation,
    DeviceInfo,
    DeviceNode,
    DeviceTree,
    Discovery,
)

_STATUS_LINE = re.compile(
    r"type: (?P<type>[A-Za-z0-9]+), .* inst_id: (?P<inst>[0-9]+), .* "
    r"bsf: (?P<domain>[0-9a-f]{4}:)?(?P<bsf>[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]), .* "
    r"state: (?P<state>[A-Za-z]+)$"
)
IGNORED_SECTIONS = frozenset({"GENERAL", "KERNEL", "KERNEL_QAT", configparser.DEFAULTSECT})
UNSUPPORTED_TYPES = frozenset({"4xxx", "4xxxvf"})
"""Generation 4 devices are used through DPDK mode only."""
COMMON_NODES = ("/dev/qat_adf_ctl", "/dev/qat_dev_processes", "/dev/usdm_drv")
SECTION_ENV = "QAT_SECTION_NAME"

CommandRunner = Callable[[Sequence[str]], str]
"""Runs a command and returns its combined output; raises ``OSError`` or ``CommandError`` on failure."""


class CommandError(RuntimeError):
    """A command that ran but failed; the message carries its exit code and output."""


def run_command(argv: Sequence[str], timeout: float = 10.0) -> str:
    """The real runner: stdout and stderr together, as an operator would see them."""
    try:
        completed = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False, errors="replace"
        )
    except subprocess.TimeoutExpired as error:
        raise CommandError(f"{' '.join(argv)} did not finish within {timeout} s") from error
    output = completed.stdout + completed.stderr
    if completed.returncode != 0:
        raise CommandError(
            f"{' '.join(argv)} exited with {completed.returncode}: {output.strip()[:200] or 'no output'}"
        )
    return output


@dataclass(frozen=True)
class AdfDevice:
    """One line of ``adf_ctl status``."""

    type: str
    inst_id: int
    address: str
    state: str

    @property
    def id(self) -> str:
        return f"dev{self.inst_id}"


@dataclass(frozen=True)
class StatusReport:
    devices: tuple[AdfDevice, ...]
    problems: tuple[str, ...] = ()


def parse_adf_status(output: str) -> StatusReport:
    """Devices listed by ``adf_ctl status``; device lines that cannot be read are reported.

    Header lines are ignored. A line that mentions a ``qat_dev`` but does not have the expected
    fields is a problem, not a crash: a newer tool may print more.
    """
    devices: list[AdfDevice] = []
    problems: list[str] = []
    for raw in output.splitlines():
        line = raw.strip()
        match = _STATUS_LINE.search(line)
        if match is None:
            if "qat_dev" in line:
                problems.append(_problem("adf_ctl status", f"unrecognised device line {line!r}"))
            continue
        domain = match.group("domain") or "0000:"
        devices.append(
            AdfDevice(
                match.group("type"),
                int(match.group("inst")),
                domain + match.group("bsf"),
                match.group("state"),
            )
        )
    return StatusReport(tuple(devices), tuple(problems))


def usable_devices(devices: Sequence[AdfDevice], iommu_on: bool) -> list[AdfDevice]:
    """Devices that are up, not generation 4, and (with an IOMMU on) virtual functions."""
    return [
        device
        for device in devices
        if device.state == "up"
        and device.type not in UNSUPPORTED_TYPES
        and (not iommu_on or device.type.endswith("vf"))
    ]


@dataclass(frozen=True)
class SectionConfig:
    processes: int
    cy: int
    dc: int
    pinned: bool


_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}


def _section_config(parser: configparser.ConfigParser, name: str) -> SectionConfig | str:
    section = parser[name]
    values: dict[str, int] = {}
    for key in ("NumProcesses", "NumberCyInstances", "NumberDcInstances"):
        raw = section.get(key)
        if raw is None:
            return f"[{name}] has no {key}"
        try:
            values[key] = int(raw.strip())
        except ValueError:
            return f"[{name}] {key} = {raw!r} is not an integer"
        if values[key] < 0:
            return f"[{name}] {key} = {raw!r} is negative"
    pinned = False
    if "LimitDevAccess" in section:
        raw_pinned = str(section.get("LimitDevAccess")).strip().lower()
        if raw_pinned not in _TRUE | _FALSE:
            return f"[{name}] LimitDevAccess = {raw_pinned!r} is not a boolean"
        pinned = raw_pinned in _TRUE
    return SectionConfig(
        values["NumProcesses"], values["NumberCyInstances"], values["NumberDcInstances"], pinned
    )


def parse_device_config(text: str, source: str) -> tuple[dict[str, SectionConfig], list[str]]:
    """User-process sections of one device's INI file; bad sections are reported and left out."""
    parser = configparser.ConfigParser(strict=False, interpolation=None, allow_no_value=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text, source=source)
    except configparser.Error as error:
        return {}, [_problem(source, f"cannot parse: {error.message}")]
    sections: dict[str, SectionConfig] = {}
    problems: list[str] = []
    for name in parser.sections():
        if name in IGNORED_SECTIONS:
            continue
        config = _section_config(parser, name)
        if isinstance(config, str):
            problems.append(_problem(source, f"{config}; section skipped"))
        else:
            sections[name] = config
    return sections, problems


@dataclass(frozen=True)
class Endpoint:
    device: str
    processes: int


@dataclass(frozen=True)
class Section:
    name: str
    cy: int
    dc: int
    pinned: bool
    endpoints: tuple[Endpoint, ...]

    @property
    def resource(self) -> str:
        return f"cy{self.cy}_dc{self.dc}"


def merge_sections(
    per_device: Sequence[tuple[str, Mapping[str, SectionConfig]]],
) -> tuple[list[Section], list[str]]:
    """Combine the sections of every device, dropping (and reporting) a section the devices disagree on.

    Rules: a section must agree on ``LimitDevAccess`` and on its crypto/compression instance counts
    on every device; an unpinned section must agree on ``NumProcesses``; a pinned section must exist
    on every device. Upstream stops the whole plugin on any of these; here only that section goes.
    """
    names = sorted({name for _, sections in per_device for name in sections})
    merged: list[Section] = []
    problems: list[str] = []
    for name in names:
        holders = [(device, sections[name]) for device, sections in per_device if name in sections]
        first = holders[0][1]
        reason = ""
        if any(config.pinned != first.pinned for _, config in holders):
            reason = "LimitDevAccess differs between devices"
        elif any((config.cy, config.dc) != (first.cy, first.dc) for _, config in holders):
            reason = "NumberCyInstances and NumberDcInstances differ between devices"
        elif not first.pinned and any(config.processes != first.processes for _, config in holders):
            reason = "NumProcesses differs between devices (the section is not pinned)"
        elif first.pinned and len(holders) != len(per_device):
            reason = "LimitDevAccess is set but the section is missing on some devices"
        if reason:
            problems.append(_problem(f"section [{name}]", f"{reason}; not advertised"))
            continue
        endpoints = tuple(Endpoint(device, config.processes) for device, config in holders)
        merged.append(Section(name, first.cy, first.dc, first.pinned, endpoints))
    return merged, problems


def build_kernel_tree(sections: Sequence[Section], nodes: Sequence[DeviceNode]) -> DeviceTree:
    """One ID per user process: ``<section>_<devN>_<i>``; unpinned sections use their first device only.

    Unpinned processes can run on any device, so advertising them once per device would count them
    several times.
    """
    tree: dict[str, dict[str, DeviceInfo]] = {}
    counter = 0
    for section in sections:
        endpoints = section.endpoints if section.pinned else section.endpoints[:1]
        for endpoint in endpoints:
            for process in range(endpoint.processes):
                envs = {
                    f"{SECTION_ENV}_{section.resource}_{counter}": section.name,
                    SECTION_ENV: section.name,
                }
                tree.setdefault(section.resource, {})[f"{section.name}_{endpoint.device}_{process}"] = (
                    DeviceInfo(nodes=tuple(nodes), envs=envs)
                )
                counter += 1
    return tree


def section_envs(resource: str, devices: Mapping[str, DeviceInfo], ids: Sequence[str]) -> dict[str, str]:
    """A fresh env map for one container: ``QAT_SECTION_NAME_<resource>_0``… in request order.

    ``QAT_SECTION_NAME`` keeps the last requested device's section, for the common one-process case.
    """
    envs: dict[str, str] = {}
    for number, device_id in enumerate(dict.fromkeys(ids)):
        section = devices[device_id].envs.get(SECTION_ENV, "")
        envs[f"{SECTION_ENV}_{resource}_{number}"] = section
        envs[SECTION_ENV] = section
    return envs


def renumber_sections(
    resource: str, devices: Mapping[str, DeviceInfo], ids: Sequence[str], allocation: ContainerAllocation
) -> ContainerAllocation:
    kept = {key: value for key, value in allocation.envs.items() if not key.startswith(SECTION_ENV)}
    return ContainerAllocation(
        nodes=allocation.nodes,
        mounts=allocation.mounts,
        envs={**kept, **section_envs(resource, devices, ids)},
        annotations=allocation.annotations,
        cdi_devices=allocation.cdi_devices,
    )


def _problem(subject: str, message: str) -> str:
    """One log line naming the device (or file) it is about."""
    return f"{subject}: {message}"


# ----- reading the node ----------------------------------------------------------------------


@dataclass(frozen=True)
class KernelPaths:
    root: Path = Path("/")
    config_dir: Path | None = None
    """Where the ``<type>_dev<N>.conf`` files are; ``<root>/etc`` by default. A DRA driver pod reads
    the host's ``/etc`` mounted elsewhere, so that its own ``/etc`` stays the image's."""

    @property
    def iommu_class(self) -> Path:
        return self.root / "sys/class/iommu"

    def uio_dir(self, device: AdfDevice) -> Path:
        return self.root / "sys/bus/pci/drivers" / device.type / device.address / "uio"

    def config_file(self, device: AdfDevice) -> Path:
        return (self.config_dir or self.root / "etc") / f"{device.type}_{device.id}.conf"

    def host(self, absolute: str) -> str:
        return str(self.root / absolute.lstrip("/"))


def iommu_enabled(paths: KernelPaths) -> bool:
    return bool(sysfs.list_dir(paths.iommu_class))


def scan_kernel(paths: KernelPaths, status_output: str) -> Discovery:
    """Device tree from ``adf_ctl status`` output plus the node's files under ``paths.root``.

    A device whose uio directory or configuration cannot be read is left out with a problem; the
    other devices are still advertised.
    """
    report = parse_adf_status(status_output)
    problems = list(report.problems)
    nodes = [DeviceNode(paths.host(node), paths.host(node)) for node in COMMON_NODES]
    per_device: list[tuple[str, Mapping[str, SectionConfig]]] = []
    for device in usable_devices(report.devices, iommu_enabled(paths)):
        uio = sysfs.list_dir(paths.uio_dir(device))
        if uio is None:
            problems.append(
                _problem(f"{device.id} ({device.address})", f"cannot read {paths.uio_dir(device)}; skipped")
            )
            continue
        config_path = paths.config_file(device)
        try:
            text = config_path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            problems.append(
                _problem(
                    f"{device.id} ({device.address})", f"cannot read {config_path}: {error.strerror}; skipped"
                )
            )
            continue
        sections, config_problems = parse_device_config(text, str(config_path))
        problems.extend(config_problems)
        per_device.append((device.id, sections))
        nodes.extend(DeviceNode(paths.host(f"/dev/{name}"), paths.host(f"/dev/{name}")) for name in uio)
    merged, merge_problems = merge_sections(per_device)
    problems.extend(merge_problems)
    return Discovery(build_kernel_tree(merged, nodes), tuple(problems))
