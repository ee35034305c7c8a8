"""Health findings from the kernel's own signals, for every PCI kind, without any daemon.

Readers take the sysfs root (``/`` on a node, a directory in tests and the simulator) and return
findings; nothing here keeps state. Counters the kernel never resets (PCIe AER) and the driver a
device should be bound to are compared with a *baseline* the caller took when it first saw the device
(:func:`pci_baseline`), so what was there before the plugin started is not held against the device and
a rise stays visible until the device goes away. Uevents (a wedged GPU, a PCI error recovery, an NPU
reset) are edges: :func:`uevent_finding` turns one into a finding and :class:`UeventLatch` holds it
until the device is bound again or removed.

docs/health.md lists each source with its path, format and meaning.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from intel_device_plugins.deviceplugin.health.model import Finding, Severity
from intel_device_plugins.deviceplugin.uevents import Uevent
from intel_device_plugins.sysfs import PCI_ADDRESS, driver_name, read_attribute

AER_KINDS: Final = ("fatal", "nonfatal", "correctable")
AER_TOTALS: Final = MappingProxyType(
    {"fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL", "correctable": "TOTAL_ERR_COR"}
)
AER_SEVERITY: Final = MappingProxyType(
    {"fatal": Severity.CRITICAL, "nonfatal": Severity.WARNING, "correctable": Severity.OK}
)
"""What a rise of each AER counter means: a fatal error needed a link reset (the device may have lost
state); a non-fatal one lost a transaction; correctable ones were fixed by the link itself."""

I915_NO_ERROR: Final = "No error state collected"
QAT_STATES: Final = MappingProxyType({"up": Severity.OK, "down": Severity.CRITICAL})
IDXD_DEVICE_STATES: Final = MappingProxyType(
    {"enabled": Severity.OK, "disabled": Severity.WARNING, "halted": Severity.FAILED}
)
IDXD_WQ_STATES: Final = MappingProxyType({"enabled": Severity.OK, "disabled": Severity.WARNING})
_HEX_GROUP = re.compile(r"0x[0-9a-fA-F]+|[0-9a-fA-F]+")


def _pci_dir(root: Path, bdf: str) -> Path:
    if not PCI_ADDRESS.match(bdf):
        raise ValueError(f"{bdf!r} is not a PCI address")
    return root / "sys/bus/pci/devices" / bdf


def _read(path: Path) -> str | None:
    try:
        return read_attribute(path)
    except (OSError, ValueError):
        return None


# ----- PCIe AER ----------------------------------------------------------------------------------------


def parse_aer(text: str) -> Mapping[str, int]:
    """``aer_dev_{fatal,nonfatal,correctable}``: one ``<error name> <count>`` per line (names hold
    spaces, so the count is the last token); lines that do not end in a number are skipped."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name, _, count = line.strip().rpartition(" ")
        if name and count.isdigit():
            counts[name.strip()] = int(count)
    return MappingProxyType(counts)


@dataclass(frozen=True)
class AerCounts:
    """The three AER files of one device; a kind is absent when its file is (no AER capability)."""

    counts: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))

    def total(self, kind: str) -> int | None:
        errors = self.counts.get(kind)
        if errors is None:
            return None
        return errors.get(AER_TOTALS[kind], sum(errors.values()))


def read_aer(root: Path, bdf: str) -> AerCounts | None:
    """The device's AER counters, or None when it has none (no AER capability, or gone)."""
    directory = _pci_dir(root, bdf)
    counts = {}
    for kind in AER_KINDS:
        text = _read(directory / f"aer_dev_{kind}")
        if text is not None:
            counts[kind] = parse_aer(text)
    return AerCounts(MappingProxyType(counts)) if counts else None


def aer_findings(bdf: str, baseline: AerCounts | None, now: AerCounts | None) -> tuple[Finding, ...]:
    """A finding per AER kind: its severity when the total rose over the baseline, else OK."""
    if now is None:
        return ()
    findings = []
    for kind in AER_KINDS:
        total = now.total(kind)
        if total is None:
            continue
        before = baseline.total(kind) if baseline is not None else None
        before = total if before is None or before > total else before
        if total > before:
            rose = {
                name: count - (baseline.counts.get(kind, {}).get(name, 0) if baseline else 0)
                for name, count in now.counts[kind].items()
                if name != AER_TOTALS[kind]
            }
            which = ", ".join(f"{name} +{delta}" for name, delta in sorted(rose.items()) if delta > 0)
            message = f"{total - before} new {kind} PCIe error(s)" + (f": {which}" if which else "")
            findings.append(Finding(bdf, "aer", f"aer-{kind}", AER_SEVERITY[kind], message))
        else:
            findings.append(Finding(bdf, "aer", f"aer-{kind}", Severity.OK))
    return tuple(findings)


# ----- presence and driver binding ---------------------------------------------------------------------


@dataclass(frozen=True)
class PciBaseline:
    """What a device looked like when first seen: its driver and its AER counters."""

    driver: str | None
    aer: AerCounts | None


def pci_baseline(root: Path, bdf: str) -> PciBaseline:
    return PciBaseline(driver_name(_pci_dir(root, bdf)), read_aer(root, bdf))


def binding_finding(root: Path, bdf: str, expected_driver: str | None) -> Finding:
    """Removed (FAILED), unbound or bound to another driver than expected (CRITICAL), or OK."""
    directory = _pci_dir(root, bdf)
    if not directory.exists():
        return Finding(bdf, "pci", "pci-presence", Severity.FAILED, "device removed from the PCI bus")
    driver = driver_name(directory)
    if expected_driver is None or driver == expected_driver:
        return Finding(bdf, "pci", "pci-driver", Severity.OK, driver or "")
    if driver is None:
        return Finding(bdf, "pci", "pci-driver", Severity.CRITICAL, f"driver {expected_driver} unbound")
    return Finding(
        bdf, "pci", "pci-driver", Severity.CRITICAL, f"driver changed from {expected_driver} to {driver}"
    )


def pci_findings(root: Path, bdf: str, baseline: PciBaseline) -> tuple[Finding, ...]:
    """Presence, driver and AER findings of one PCI device against its baseline."""
    presence = binding_finding(root, bdf, baseline.driver)
    if presence.category == "pci-presence":
        return (presence,)
    return (presence, *aer_findings(bdf, baseline.aer, read_aer(root, bdf)))


# ----- GPUs --------------------------------------------------------------------------------------------


def _head(path: Path, size: int = 64) -> str | None:
    """The first bytes of a regular file (i915's error state can be megabytes; only its start matters)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            return os.read(fd, size).decode("utf-8", errors="replace")
        finally:
            os.close(fd)
    except OSError:
        return None


def card_address(root: Path, card: str) -> str | None:
    """The PCI address of DRM card ``cardN`` (the name of its ``device`` link's target)."""
    link = root / "sys/class/drm" / card / "device"
    if not link.exists():
        return None
    name = os.path.basename(os.path.realpath(link))  # a link to ``../..`` in some layouts
    return name if PCI_ADDRESS.match(name) else None


def i915_error_finding(root: Path, card: str) -> Finding | None:
    """i915's ``/sys/class/drm/cardN/error``: a captured GPU error state (a hang, reset or not) is a
    WARNING until someone clears it by writing to the file; None when the file is absent (xe, or not
    readable: it is root's)."""
    address = card_address(root, card)
    text = _head(root / "sys/class/drm" / card / "error")
    if address is None or text is None:
        return None
    if text.startswith(I915_NO_ERROR):
        return Finding(address, "i915-error", "gpu-error-state", Severity.OK)
    return Finding(
        address, "i915-error", "gpu-error-state", Severity.WARNING, f"{card}: GPU error state captured"
    )


def hwmon_findings(root: Path, bdf: str) -> tuple[Finding, ...]:
    """xe's hwmon temperatures (``temp2_input`` package, ``temp3_input`` VRAM, millidegrees): readings
    the temperature limits of the settings rate."""
    findings = []
    for hwmon in sorted((_pci_dir(root, bdf) / "hwmon").glob("hwmon*")):
        for file, category in (("temp2_input", "temperature.gpu"), ("temp3_input", "temperature.memory")):
            text = _read(hwmon / file)
            if text is not None and text.strip().lstrip("-").isdigit():
                celsius = int(text) / 1000
                findings.append(Finding(bdf, "hwmon", category, Severity.UNKNOWN, celsius=celsius))
    return tuple(findings)


# ----- QAT ---------------------------------------------------------------------------------------------


def qat_findings(root: Path, bdf: str, driver: str | None = None) -> tuple[Finding, ...]:
    """A QAT physical function's ``qat/state`` (``down`` is CRITICAL), its debugfs heartbeat
    (``-1``: unresponsive, CRITICAL) and its RAS ``errors_fatal`` (non-zero: CRITICAL)."""
    directory = _pci_dir(root, bdf)
    findings = []
    state = _read(directory / "qat/state")
    if state is not None:
        value = state.strip()
        severity = QAT_STATES.get(value, Severity.UNKNOWN)
        findings.append(Finding(bdf, "qat", "qat-state", severity, "" if value == "up" else f"state {value}"))
    name = driver or driver_name(directory)
    if name:
        status = _read(root / "sys/kernel/debug" / f"qat_{name}_{bdf}" / "heartbeat/status")
        if status is not None:
            first = status.strip().splitlines()[0].strip() if status.strip() else ""
            if first == "0":
                findings.append(Finding(bdf, "qat", "qat-heartbeat", Severity.OK))
            elif first == "-1":
                findings.append(
                    Finding(bdf, "qat", "qat-heartbeat", Severity.CRITICAL, "firmware unresponsive")
                )
            else:
                findings.append(
                    Finding(bdf, "qat", "qat-heartbeat", Severity.UNKNOWN, f"heartbeat {first!r}")
                )
    fatal = _read(directory / "qat_ras/errors_fatal")
    if fatal is not None and fatal.strip().isdigit():
        count = int(fatal)
        severity = Severity.CRITICAL if count else Severity.OK
        findings.append(
            Finding(bdf, "qat", "qat-ras-fatal", severity, f"{count} fatal error(s)" if count else "")
        )
    return tuple(findings)


# ----- DSA / IAA ---------------------------------------------------------------------------------------


def parse_idxd_errors(text: str) -> bool | None:
    """Whether the software error register holds any bit: four ``0x%016llx`` words (older kernels) or
    a ``%*pb`` bitmap of comma-separated hex groups (newer ones); None when it is neither."""
    groups = [group for group in re.split(r"[\s,]+", text.strip()) if group]
    if not groups or not all(_HEX_GROUP.fullmatch(group) for group in groups):
        return None
    return any(int(group, 16) for group in groups)


def idxd_findings(root: Path) -> tuple[Finding, ...]:
    """Every DSA/IAA device (``dsa<m>``, ``iax<m>``: ``state``, ``errors``) and work queue
    (``wq<m>.<n>``: ``state``) under ``/sys/bus/dsa/devices``, keyed by those names."""
    findings = []
    devices = root / "sys/bus/dsa/devices"
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return ()
    for name in names:
        is_device = re.fullmatch(r"(dsa|iax)\d+", name) is not None
        is_wq = re.fullmatch(r"wq\d+\.\d+", name) is not None
        if not (is_device or is_wq):
            continue
        state = _read(devices / name / "state")
        if state is not None:
            value = state.strip()
            table = IDXD_DEVICE_STATES if is_device else IDXD_WQ_STATES
            severity = table.get(value, Severity.UNKNOWN)
            category = "idxd-state" if is_device else "idxd-wq-state"
            findings.append(
                Finding(name, "idxd", category, severity, "" if value == "enabled" else f"state {value}")
            )
        if is_device:
            errors = _read(devices / name / "errors")
            if errors is not None:
                flagged = parse_idxd_errors(errors)
                if flagged is not None:
                    severity = Severity.CRITICAL if flagged else Severity.OK
                    detail = f"software error register {' '.join(errors.split())}" if flagged else ""
                    findings.append(Finding(name, "idxd", "idxd-errors", severity, detail))
    return tuple(findings)


# ----- uevents -----------------------------------------------------------------------------------------


def devpath_address(devpath: str) -> str | None:
    """The PCI address a uevent's DEVPATH is at or under (the last one: a VF under its bridge)."""
    addresses = [part for part in devpath.split("/") if PCI_ADDRESS.match(part)]
    return addresses[-1] if addresses else None


def uevent_finding(event: Uevent) -> Finding | None:
    """What a uevent says about device health, or None.

    * DRM ``WEDGED=<methods>`` (xe, i915, 6.15+): ``none`` — recovered in the driver (OK); anything else
      — wedged until the recovery named is done (FAILED).
    * PCI error recovery ``ERROR_EVENT``: ``BEGIN_RECOVERY`` WARNING, ``SUCCESSFUL_RECOVERY`` OK,
      ``FAILED_RECOVERY`` FAILED.
    * i915 ``ERROR=1`` (a GPU hang being handled) WARNING; ``ERROR=0`` (reset done) OK.
    * NPU ``IVPU_PM_EVENT=IVPU_RECOVER``: the NPU was reset after a hang, WARNING.
    """
    address = devpath_address(event.devpath)
    if address is None or event.action != "change":
        return None
    properties = event.properties
    if "WEDGED" in properties:
        methods = properties["WEDGED"]
        if methods == "none":
            return Finding(address, "wedged", "drm-wedged", Severity.OK, "recovered by the driver")
        task = f" (task {properties['TASK']})" if "TASK" in properties else ""
        return Finding(address, "wedged", "drm-wedged", Severity.FAILED, f"wedged, recovery: {methods}{task}")
    recovery = properties.get("ERROR_EVENT")
    if recovery is not None:
        severity = {
            "BEGIN_RECOVERY": Severity.WARNING,
            "SUCCESSFUL_RECOVERY": Severity.OK,
            "FAILED_RECOVERY": Severity.FAILED,
        }.get(recovery, Severity.UNKNOWN)
        return Finding(
            address, "pci-recovery", "pci-error-recovery", severity, recovery.lower().replace("_", " ")
        )
    if properties.get("ERROR") in ("0", "1") and event.subsystem == "drm":
        hung = properties["ERROR"] == "1"
        message = "GPU hang, reset in progress" if hung else "GPU reset done"
        return Finding(
            address, "i915-uevent", "gpu-reset", Severity.WARNING if hung else Severity.OK, message
        )
    if properties.get("IVPU_PM_EVENT") == "IVPU_RECOVER":
        return Finding(address, "npu-uevent", "npu-recovery", Severity.WARNING, "NPU reset after a hang")
    return None


@dataclass(frozen=True)
class UeventLatch:
    """The latest finding of each (device, category) that uevents gave, until the device is bound
    again or removed (a rebind is the recovery a wedged GPU asks for)."""

    held: Mapping[tuple[str, str], Finding] = field(default_factory=lambda: MappingProxyType({}))

    def after(self, event: Uevent) -> UeventLatch:
        held = dict(self.held)
        address = devpath_address(event.devpath)
        if address is not None and event.action in ("bind", "remove") and event.subsystem == "pci":
            held = {key: value for key, value in held.items() if key[0] != address}
        finding = uevent_finding(event)
        if finding is not None:
            held[(finding.device, finding.category)] = finding
        return UeventLatch(MappingProxyType(held))

    def findings(self) -> tuple[Finding, ...]:
        return tuple(self.held[key] for key in sorted(self.held))
