"""The GPU plugin: discovery plus the preferred-allocation policy, wired to the framework."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.deviceplugin.uevents import Uevent
from intel_device_plugins.plugins.gpu.discovery import NAMESPACE, CardFactsCache, GpuOptions, scan_gpus
from intel_device_plugins.plugins.gpu.health import GpuHealth
from intel_device_plugins.plugins.gpu.healthsettings import GpuHealthSettings
from intel_device_plugins.plugins.gpu.policy import POLICIES, AllocationPolicy
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)


@dataclass
class GpuPlugin:
    prefix: str = ""
    options: GpuOptions = field(default_factory=GpuOptions)
    policy: AllocationPolicy = AllocationPolicy.NONE
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    cards: CardFactsCache = field(default_factory=CardFactsCache)
    health_flags: GpuHealthSettings = field(default_factory=GpuHealthSettings)
    """The health flags as parsed from the command line."""
    health: GpuHealth | None = None
    """Health from the hardware (xpumd, kernel signals); None: device nodes only."""

    @property
    def namespace(self) -> str:
        return NAMESPACE

    def scan(self) -> DeviceTree:
        result = scan_gpus(self.prefix, self.options, self.cards)
        tree, problems = result.tree, result.problems
        if self.health is not None:
            tree, unhealthy = self.health.apply(self.prefix, tree)
            problems += unhealthy
        self.problems.report(problems)
        return tree

    async def monitor(self, changed: Callable[[], None]) -> None:
        """xpumd's streams, when health comes from it; each change rescans at once."""
        if self.health is not None:
            await self.health.monitor(changed)

    def observe_uevent(self, event: Uevent | None) -> None:
        """A wedged GPU says so only in a uevent: the health keeps it for the next scans."""
        if self.health is not None:
            self.health.observe_uevent(event)

    def safety_rescan_interval(self) -> float:
        """Polled kernel health signals need a rescan every few seconds; otherwise events suffice."""
        return self.health.safety_rescan_interval() if self.health is not None else math.inf

    def watch_paths(self) -> Sequence[Path]:
        """Device nodes appear in ``/dev/dri`` when a card is plugged in; watch it for instant updates."""
        return (prefixed(self.prefix, "/dev/dri"), prefixed(self.prefix, "/sys/class/drm"))

    def uevent_subsystems(self) -> Collection[str]:
        """Cards come and go with ``drm`` events; driver binds and SR-IOV VFs are ``pci`` events.

        Every state a scan reads changes with one of these or with a device node in ``/dev/dri``,
        so the plugin is rescanned on events and otherwise only as a safety net.
        """
        return ("drm", "pci")

    def preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str]:
        return POLICIES[self.policy](available, must_include, size)
