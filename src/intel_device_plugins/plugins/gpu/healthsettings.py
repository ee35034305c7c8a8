"""The GPU plugin's health flags, parsed: which health sources to use and their limits.

Upstream's plugin takes device health from xpumd (``-xpumd-endpoint``, with ``-xpumd-unhealthy-severity``
choosing the lowest severity that makes a device Unhealthy) or from a Level-Zero sidecar
(``-health-management``, with temperature limits in °C). This plugin has xpumd and the kernel's own
signals (``-kernel-health``); :mod:`.health` consumes the settings.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from intel_device_plugins.deviceplugin.health.kernelhealth import DEFAULT_POLL_SECONDS
from intel_device_plugins.deviceplugin.health.model import HealthSettings, TemperatureLimits

DEFAULT_TEMP_LIMIT: Final = 100
"""Upstream's default for ``-temp-limit``, ``-gpu-temp-limit`` and ``-memory-temp-limit`` (°C)."""


class XpumdSeverity(StrEnum):
    """xpumd severities a device can be declared Unhealthy from (``-xpumd-unhealthy-severity``).

    The lowest one named and everything above it count: ``warning`` also takes ``critical`` and ``failed``.
    """

    WARNING = "warning"
    CRITICAL = "critical"
    FAILED = "failed"


DEFAULT_XPUMD_SEVERITY: Final = XpumdSeverity.CRITICAL
"""Upstream 0.37's default: warnings (an ECC mode, a throttled clock) do not make a GPU unusable."""


def xpumd_severity(text: str) -> XpumdSeverity:
    """``-xpumd-unhealthy-severity`` value: exactly one of upstream's three words."""
    try:
        return XpumdSeverity(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}, valid values: failed, critical, warning"
        ) from None


@dataclass(frozen=True)
class GpuHealthSettings:
    """Every health flag of the GPU plugin, as the command line fills it and :class:`GpuHealth` uses it.

    ``xpumd_endpoint`` (``-xpumd-endpoint``; empty: no xpumd) with ``xpumd_unhealthy_severity``
    (``-xpumd-unhealthy-severity``: the lowest severity that makes a GPU Unhealthy, for every source);
    ``kernel_signals`` (``-kernel-health``) adds PCIe AER, driver binding, i915's error state and xe's
    hwmon temperatures, polled every ``poll_seconds``, and the uevents of a wedged GPU, a PCI error
    recovery and an i915 reset. ``level_zero`` (``-health-management``) asks for upstream's Level-Zero
    sidecar, which this plugin does not have: the command line falls back to kernel signals, whose
    temperature readings ``temperature_limits`` (``-temp-limit``, ``-gpu-temp-limit``,
    ``-memory-temp-limit``) rate.
    """

    xpumd_endpoint: str = ""
    xpumd_unhealthy_severity: str = DEFAULT_XPUMD_SEVERITY
    kernel_signals: bool = False
    poll_seconds: float = DEFAULT_POLL_SECONDS
    level_zero: bool = False
    temperature_limits: TemperatureLimits = field(default_factory=TemperatureLimits)

    def __post_init__(self) -> None:
        self.policy()  # an unknown severity is an error naming the flag, at start
        if self.poll_seconds <= 0:
            raise ValueError(f"GPU health poll interval must be positive, not {self.poll_seconds}")

    def policy(self) -> HealthSettings:
        return HealthSettings.from_flag(str(self.xpumd_unhealthy_severity), self.temperature_limits)

    @property
    def xpumd_enabled(self) -> bool:
        return bool(self.xpumd_endpoint)

    @property
    def enabled(self) -> bool:
        return self.xpumd_enabled or self.kernel_signals
