"""The GPU plugin's health flags, parsed: which health source upstream's plugin would use and its limits.

Upstream's plugin takes device health from xpumd (``-xpumd-endpoint``, with ``-xpumd-unhealthy-severity``
choosing the lowest severity that makes a device Unhealthy) or from a Level-Zero sidecar
(``-health-management``, with temperature limits in °C). This module only holds the parsed values; the
plugin reports health from device presence until a health source consumes them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

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
class XpumdHealthSettings:
    """xpumd as health source: its socket (empty: not used) and the severity that makes a GPU Unhealthy."""

    endpoint: str = ""
    unhealthy_severity: XpumdSeverity = DEFAULT_XPUMD_SEVERITY

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint)


@dataclass(frozen=True)
class TemperatureLimits:
    """Level-Zero health limits in °C: the whole card, the GPU and the memory sensor."""

    global_limit: int = DEFAULT_TEMP_LIMIT
    gpu_limit: int = DEFAULT_TEMP_LIMIT
    memory_limit: int = DEFAULT_TEMP_LIMIT

    @property
    def are_defaults(self) -> bool:
        return self == TemperatureLimits()


@dataclass(frozen=True)
class GpuHealthSettings:
    """Every health flag of the GPU plugin, as given (checked for conflicts by the command line)."""

    xpumd: XpumdHealthSettings = field(default_factory=XpumdHealthSettings)
    level_zero: bool = False
    """``-health-management``: upstream's Level-Zero sidecar."""
    temperature_limits: TemperatureLimits = field(default_factory=TemperatureLimits)
