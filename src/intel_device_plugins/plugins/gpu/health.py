"""The GPU plugin's health from the hardware: xpumd's findings and, when asked, the kernel's signals.

Discovery marks a card Unhealthy when its device nodes are missing; this adds what the hardware says.
A card whose verdict (``deviceplugin.health.model.assess``) is Unhealthy is advertised Unhealthy; a
card no source can speak of stays as discovery found it (upstream's plugin shows it Healthy while xpumd
has no data). The command line fills :class:`GpuHealthSettings`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from intel_device_plugins.deviceplugin.health import kernel
from intel_device_plugins.deviceplugin.health.model import (
    Finding,
    HealthSettings,
    HealthState,
    Verdict,
    assess,
)
from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceTree, Health
from intel_device_plugins.deviceplugin.uevents import Uevent

if TYPE_CHECKING:
    from intel_device_plugins.deviceplugin.health.xpumd import XpumdClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuHealthSettings:
    """What the command line sets: ``-xpumd-endpoint`` (empty: no xpumd) and
    ``-xpumd-unhealthy-severity`` (``failed``, ``critical`` or ``warning``); ``kernel_signals`` adds PCIe
    AER, driver binding, i915's error state and xe's hwmon temperatures, polled every ``poll_seconds``,
    and the uevents of a wedged GPU, a PCI error recovery and an i915 reset."""

    xpumd_endpoint: str = ""
    xpumd_unhealthy_severity: str = "critical"
    kernel_signals: bool = False
    poll_seconds: float = 5.0

    def __post_init__(self) -> None:
        self.policy()  # an unknown severity is an error naming the flag, at start
        if self.poll_seconds <= 0:
            raise ValueError(f"GPU health poll interval must be positive, not {self.poll_seconds}")

    def policy(self) -> HealthSettings:
        return HealthSettings.from_flag(self.xpumd_unhealthy_severity)

    @property
    def enabled(self) -> bool:
        return bool(self.xpumd_endpoint) or self.kernel_signals


def card_of(device_id: str) -> str | None:
    """``card0-3`` (a shared card's fourth ID) → ``card0``; None for IDs that name no card."""
    card = device_id.rsplit("-", 1)[0]
    return card if card.startswith("card") and card[4:].isdigit() else None


def mark_unhealthy(
    tree: DeviceTree, addresses: Mapping[str, str], verdicts: Mapping[str, Verdict]
) -> tuple[DeviceTree, tuple[str, ...]]:
    """The tree with every card whose PCI address has an Unhealthy verdict marked Unhealthy, and one
    problem line per such card (naming the severity that decided it and why)."""
    problems: dict[str, str] = {}
    marked: dict[str, dict[str, DeviceInfo]] = {}
    for resource, devices in tree.items():
        marked[resource] = {}
        for device_id, info in devices.items():
            card = card_of(device_id)
            verdict = verdicts.get(addresses.get(card, "")) if card else None
            if verdict is not None and verdict.state is HealthState.UNHEALTHY and card is not None:
                problems[card] = (
                    f"GPU {card} ({addresses[card]}): reported Unhealthy, "
                    f"{verdict.severity.name.lower()}: {verdict.message}"
                )
                if info.health is Health.HEALTHY:
                    info = replace(info, health=Health.UNHEALTHY)
            marked[resource][device_id] = info
    return marked, tuple(problems[card] for card in sorted(problems))


class GpuHealth:
    """The imperative half: the xpumd client (run by :meth:`monitor`) and the kernel's baselines."""

    def __init__(self, settings: GpuHealthSettings) -> None:
        self.settings = settings
        self.policy = settings.policy()
        self.xpumd: XpumdClient | None = None
        self._baselines: dict[str, kernel.PciBaseline] = {}
        self.uevents = kernel.UeventLatch()
        """What uevents said (wedged, PCI error recovery, i915 resets); replaced whole on the event loop,
        read by scans."""

    async def monitor(self, changed: Callable[[], None]) -> None:
        """Watch xpumd until cancelled (nothing to do without an endpoint)."""
        if not self.settings.xpumd_endpoint:
            return
        log.info(
            "xpumd health source requested: %s with severity: %s",
            self.settings.xpumd_endpoint,
            self.settings.xpumd_unhealthy_severity,
        )
        # Imported here: grpclib and its HTTP/2 stack load only in a plugin that talks to xpumd.
        from intel_device_plugins.deviceplugin.health.xpumd import XpumdClient, XpumdSettings

        self.xpumd = XpumdClient(XpumdSettings(Path(self.settings.xpumd_endpoint)), on_change=changed)
        await self.xpumd.run()

    def observe_uevent(self, event: Uevent | None) -> None:
        if event is not None and self.settings.kernel_signals:
            self.uevents = self.uevents.after(event)

    def safety_rescan_interval(self) -> float:
        """Kernel signals are polled (no uevent announces an AER count); xpumd pushes its own."""
        return self.settings.poll_seconds if self.settings.kernel_signals else math.inf

    def kernel_findings(self, root: Path, cards: Mapping[str, str]) -> tuple[Finding, ...]:
        """PCIe AER and binding against each card's first-seen baseline, i915's error state, xe's
        temperatures. Runs on the scan thread (the baselines are the scan's own)."""
        findings: list[Finding] = []
        present = set(cards.values())
        for address in list(self._baselines):
            if address not in present:
                del self._baselines[address]  # gone: a card that comes back starts a new baseline
        for card, address in sorted(cards.items()):
            baseline = self._baselines.setdefault(address, kernel.pci_baseline(root, address))
            findings.extend(kernel.pci_findings(root, address, baseline))
            findings.extend(kernel.hwmon_findings(root, address))
            error_state = kernel.i915_error_finding(root, card)
            if error_state is not None:
                findings.append(error_state)
        return tuple(findings)

    def findings(self, root: Path, cards: Mapping[str, str]) -> tuple[Finding, ...]:
        xpumd = self.xpumd.findings() if self.xpumd is not None else ()
        if not self.settings.kernel_signals:
            return xpumd
        return xpumd + self.kernel_findings(root, cards) + self.uevents.findings()

    def verdicts(self, prefix: str, cards: Iterable[str]) -> tuple[Mapping[str, str], Mapping[str, Verdict]]:
        """Each card's PCI address, and each address's verdict (the DRA profile can use these as they
        are: ``Verdict.state`` and ``Verdict.message`` are a device's health and its message)."""
        root = Path(prefix or "/")
        addresses = _card_addresses(root, cards)
        return addresses, assess(self.findings(root, addresses), self.policy)

    def apply(self, prefix: str, tree: DeviceTree) -> tuple[DeviceTree, tuple[str, ...]]:
        """The scanned tree with the hardware's verdicts applied, and the problems to report."""
        cards = (card_of(device_id) for devices in tree.values() for device_id in devices)
        addresses, verdicts = self.verdicts(prefix, (card for card in cards if card is not None))
        return mark_unhealthy(tree, addresses, verdicts)


def _card_addresses(root: Path, cards: Iterable[str]) -> dict[str, str]:
    addresses = {}
    for card in set(cards):
        address = kernel.card_address(root, card)
        if address is not None:
            addresses[card] = address
    return addresses
