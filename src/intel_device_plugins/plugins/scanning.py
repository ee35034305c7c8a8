"""Small helpers the plugins share (the scan result itself is ``deviceplugin.model.Discovery``)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.health.kernelhealth import (
    KernelHealth,
    KeysOf,
    KindFindings,
    no_kind_findings,
)
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.deviceplugin.uevents import Uevent
from intel_device_plugins.flags import MAX_SHARED_DEV_NUM, GoFlagParser, shared_dev_num
from intel_device_plugins.plugins.flagnames import KERNEL_HEALTH, SHARED_DEV_NUM

PCI_ID = re.compile(r"^0x[0-9a-fA-F]{4}$")
"""A PCI vendor or device ID as sysfs writes it; anything else in those files is garbage."""


def numa_or_problem(device_dir: Path, prefix: str, label: str, problems: list[str]) -> tuple[int, ...]:
    """NUMA nodes of a sysfs device; unreadable topology is a problem line, not a lost device."""
    try:
        return numa_nodes_of(device_dir, Path(prefix or "/"))
    except TopologyError as error:
        problems.append(f"{label}: {error}; no NUMA topology reported")
        return ()


def add_shared_dev_num(parser: GoFlagParser, shared_thing: str) -> None:
    """Upstream's ``-shared-dev-num``: how many containers may share one ``shared_thing``."""
    parser.add_flag(
        SHARED_DEV_NUM,
        type=shared_dev_num,
        default=1,
        help=f"number of containers that may share one {shared_thing} (at most {MAX_SHARED_DEV_NUM})",
    )


def add_kernel_health(parser: GoFlagParser) -> None:
    """``-kernel-health``: devices turn Unhealthy on the kernel's signals (off by default: docs/health.md)."""
    parser.add_bool_flag(
        KERNEL_HEALTH,
        help="mark devices Unhealthy on kernel signals: a rising PCIe AER fatal count, a driver unbound or "
        "changed, the kind's own state; rescans every 5 s",
    )


def kernel_health(
    enabled: bool,
    prefix: str,
    keys_of: KeysOf,
    kind_findings: KindFindings = no_kind_findings,
    label: str = "",
) -> KernelHealth | None:
    """The plugin's kernel health when ``-kernel-health`` is on, else None."""
    if not enabled:
        return None
    return KernelHealth(Path(prefix or "/"), keys_of, kind_findings, label=label or "device")


class KernelHealthHooks:
    """The framework hooks of a plugin with optional kernel health (its ``health`` attribute): the
    uevents it is shown and the safety rescan its polled signals need."""

    health: KernelHealth | None

    def observe_uevent(self, event: Uevent | None) -> None:
        if self.health is not None:
            self.health.observe_uevent(event)

    def safety_rescan_interval(self) -> float:
        """Polled signals need a rescan every few seconds; without them events suffice."""
        return self.health.safety_rescan_interval() if self.health is not None else math.inf

    def with_health(self, tree: DeviceTree, problems: Sequence[str]) -> tuple[DeviceTree, tuple[str, ...]]:
        """The scanned tree and its problems, with the kernel's verdicts applied when health is on."""
        if self.health is None:
            return tree, tuple(problems)
        marked, unhealthy = self.health.apply(tree)
        return marked, (*problems, *unhealthy)
