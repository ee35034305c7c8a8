"""The health model: findings about devices, and the pure policy that turns them into health.

A *finding* is one thing one source said about one device: xpumd's health domain ``memory`` at
CRITICAL, the kernel's AER fatal counter rising, a QAT heartbeat failing. Sources only report; whether
a finding makes a device unhealthy is decided here, by :func:`assess`, from the findings and the
settings (the severity at which a device turns unhealthy, temperature limits). That keeps the decision
testable without any daemon or sysfs, and the same for the device plugins and the DRA drivers.

The verdict has three states (:class:`HealthState`, the states of the kubelet's DRA health API):
``Unknown`` when no source could say anything about a device, for instance while xpumd is absent. The
device-plugin API knows only two (:class:`~intel_device_plugins.deviceplugin.model.Health`);
:meth:`Verdict.plugin_health` folds ``Unknown`` into one of them, as the caller chooses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import Final

from intel_device_plugins.deviceplugin.model import Health


class HealthState(StrEnum):
    """A device's health with ``Unknown`` (the kubelet's DRA health API ``HealthStatus``)."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"


class Severity(IntEnum):
    """How bad a finding is, ordered; the numbers are xpumd's ``SeverityLevel``.

    ``UNKNOWN`` says the source cannot tell (no data, or the source is down); ``OK`` says it looked and
    found nothing wrong.
    """

    UNKNOWN = 0
    OK = 1
    WARNING = 2
    CRITICAL = 3
    FAILED = 4


UNHEALTHY_SEVERITY_CHOICES: Final = ("failed", "critical", "warning")
"""The values of the GPU plugin's ``-xpumd-unhealthy-severity``, strictest first."""


def parse_unhealthy_severity(value: str, flag: str = "-xpumd-unhealthy-severity") -> Severity:
    """The severity a flag names (``failed``, ``critical`` or ``warning``); anything else is an error
    naming the flag and the valid values."""
    if value not in UNHEALTHY_SEVERITY_CHOICES:
        raise ValueError(
            f"invalid value {value!r} for {flag}, valid values: {', '.join(UNHEALTHY_SEVERITY_CHOICES)}"
        )
    return Severity[value.upper()]


@dataclass(frozen=True)
class Finding:
    """What one source said about one device.

    ``device`` is the key the consumer matches its devices with: the PCI address (``0000:03:00.0``) for
    PCI devices, the kernel's name for the rest (``dsa0``, ``wq0.1``). ``source`` names the signal
    (``xpumd``, ``aer``, ``qat-heartbeat`` …), ``category`` what it is about (xpumd's health domain such
    as ``memory``, or the kernel signal's aspect such as ``aer-fatal``). ``celsius`` carries a
    temperature reading, which :func:`assess` compares with the limits in the settings and which then
    decides the severity.
    """

    device: str
    source: str
    category: str
    severity: Severity
    message: str = ""
    celsius: float | None = None

    def __post_init__(self) -> None:
        if not self.device:
            raise ValueError(f"a {self.source} finding of {self.category!r} names no device")
        if not isinstance(self.severity, Severity):
            raise TypeError(f"{self.device}: severity {self.severity!r} of {self.category!r} is no Severity")

    def describe(self) -> str:
        text = f"{self.source} {self.category} {self.severity.name.lower()}"
        return f"{text}: {self.message}" if self.message else text


@dataclass(frozen=True)
class TemperatureLimits:
    """Limits in °C (the Level-Zero health path's ``-gpu-temp-limit``, ``-memory-temp-limit`` and
    ``-temp-limit``, 100 each by default). A reading above its limit is CRITICAL."""

    gpu: float = 100.0
    memory: float = 100.0
    other: float = 100.0

    def limit(self, category: str) -> float:
        """The limit of a category: ``temperature.gpu…``, ``temperature.memory…``, or any other."""
        parts = category.split(".")
        if "gpu" in parts[1:] or "core" in parts[1:]:
            return self.gpu
        if "memory" in parts[1:]:
            return self.memory
        return self.other


@dataclass(frozen=True)
class HealthSettings:
    """The policy: a finding at or above ``unhealthy_at`` makes its device unhealthy.

    The GPU plugin's ``-xpumd-unhealthy-severity`` sets ``unhealthy_at`` (default CRITICAL, as upstream
    since 0.37); Intel's GPU DRA driver's ``--ignore-health-warning`` means CRITICAL when set (its
    default) and WARNING when not: :meth:`for_dra`.
    """

    unhealthy_at: Severity = Severity.CRITICAL
    temperatures: TemperatureLimits = TemperatureLimits()

    def __post_init__(self) -> None:
        if self.unhealthy_at < Severity.WARNING:
            name = self.unhealthy_at.name.lower()
            raise ValueError(f"unhealthy_at must be warning, critical or failed, not {name}")

    @classmethod
    def from_flag(
        cls, unhealthy_severity: str, temperatures: TemperatureLimits | None = None
    ) -> HealthSettings:
        """Settings from ``-xpumd-unhealthy-severity`` (checked: an error names the flag)."""
        return cls(parse_unhealthy_severity(unhealthy_severity), temperatures or TemperatureLimits())

    @classmethod
    def for_dra(cls, ignore_health_warning: bool = True) -> HealthSettings:
        """Settings as ``--ignore-health-warning`` sets them."""
        return cls(Severity.CRITICAL if ignore_health_warning else Severity.WARNING)


@dataclass(frozen=True)
class Verdict:
    """One device's health and why.

    ``severity`` is the worst severity among the findings that decided it: for ``Unhealthy`` the worst
    at or over the threshold (CRITICAL, FAILED or WARNING, as set); for ``Healthy`` the worst below it
    (OK, or WARNING under a CRITICAL threshold: healthy with a warning); for ``Unknown``, UNKNOWN.
    ``reasons`` are the deciding findings, worst first.
    """

    state: HealthState
    severity: Severity
    reasons: tuple[Finding, ...] = ()

    @property
    def message(self) -> str:
        """One line for a log, a taint or a pod's health message."""
        return "; ".join(reason.describe() for reason in self.reasons)

    def plugin_health(self, unknown: Health = Health.HEALTHY) -> Health:
        """The device-plugin API's two states; ``Unknown`` becomes ``unknown`` (upstream's GPU plugin
        reports a device Healthy while xpumd has no data for it)."""
        if self.state is HealthState.UNHEALTHY:
            return Health.UNHEALTHY
        if self.state is HealthState.HEALTHY:
            return Health.HEALTHY
        return unknown


UNKNOWN: Final = Verdict(HealthState.UNKNOWN, Severity.UNKNOWN)
"""The verdict of a device no source said anything about."""


def rated(finding: Finding, settings: HealthSettings) -> Finding:
    """A temperature reading gets its severity from the limits; other findings are as the source said."""
    if finding.celsius is None:
        return finding
    limit = settings.temperatures.limit(finding.category)
    if finding.celsius > limit:
        severity, message = Severity.CRITICAL, f"{finding.celsius:g} °C over the limit of {limit:g} °C"
    else:
        severity, message = Severity.OK, f"{finding.celsius:g} °C"
    return Finding(finding.device, finding.source, finding.category, severity, message, finding.celsius)


def verdict(findings: Iterable[Finding], settings: HealthSettings) -> Verdict:
    """One device's verdict from its findings: any finding at or over the threshold → ``Unhealthy``;
    else any finding that knows (OK, or a severity under the threshold) → ``Healthy``; else ``Unknown``."""
    known = [rated(finding, settings) for finding in findings]
    bad = [finding for finding in known if finding.severity >= settings.unhealthy_at]
    if bad:
        return _decided(HealthState.UNHEALTHY, bad)
    good = [finding for finding in known if finding.severity > Severity.UNKNOWN]
    if good:
        worst = max(finding.severity for finding in good)
        return _decided(HealthState.HEALTHY, [f for f in good if f.severity == worst and worst > Severity.OK])
    return UNKNOWN if not known else Verdict(HealthState.UNKNOWN, Severity.UNKNOWN, tuple(known))


def _decided(state: HealthState, findings: list[Finding]) -> Verdict:
    ordered = sorted(findings, key=lambda f: (-f.severity, f.source, f.category))
    worst = ordered[0].severity if ordered else Severity.OK
    return Verdict(state, worst, tuple(ordered))


def assess(
    findings: Iterable[Finding], settings: HealthSettings, devices: Iterable[str] = ()
) -> Mapping[str, Verdict]:
    """Every device's verdict: each device a finding names, and each of ``devices`` (``Unknown`` when
    nothing was said about it)."""
    by_device: dict[str, list[Finding]] = {device: [] for device in devices}
    for finding in findings:
        by_device.setdefault(finding.device, []).append(finding)
    return MappingProxyType({device: verdict(found, settings) for device, found in sorted(by_device.items())})
