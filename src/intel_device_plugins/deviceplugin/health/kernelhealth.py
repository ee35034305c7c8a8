"""Kernel health signals applied to a device plugin's tree: the piece every PCI kind shares.

A plugin says, per device ID, which *keys* the kernel's findings name it by (its PCI function, the PF
behind a VF, an idxd device and work queue: :data:`KeysOf`) and, optionally, which findings of its own
kind to read (QAT state and heartbeat, DSA/IAA state and errors: :data:`KindFindings`). This class adds
what every PCI device has (AER counters and the driver binding against a first-seen baseline, the
``pci`` and kind uevents it is shown) and marks Unhealthy every device ID one of whose keys has an
Unhealthy verdict (``model.assess``).

The plugin calls :meth:`KernelHealth.apply` at the end of its scan (the scan thread owns the
baselines) and forwards its ``observe_uevent`` and ``safety_rescan_interval`` hooks here (the uevent
latch is replaced whole on the event loop, so a scan never sees it half-updated).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from intel_device_plugins.deviceplugin.health import kernel
from intel_device_plugins.deviceplugin.health.model import (
    Finding,
    HealthSettings,
    HealthState,
    Severity,
    Verdict,
    assess,
)
from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceTree, Health
from intel_device_plugins.deviceplugin.uevents import Uevent
from intel_device_plugins.sysfs import PCI_ADDRESS

KeysOf = Callable[[Path, str], tuple[str, ...]]
"""(root, device ID) → the keys findings name the device by; empty when it cannot be placed."""
KindFindings = Callable[[Path, Collection[str]], tuple[Finding, ...]]
"""(root, every key of this scan) → the kind's own findings about those keys."""

DEFAULT_POLL_SECONDS: Final = 5.0
"""How stale a polled signal (an AER count, a QAT state) may get: upstream's GPU scan period."""


def no_kind_findings(root: Path, keys: Collection[str]) -> tuple[Finding, ...]:
    return ()


def pci_address_of(path: Path) -> str | None:
    """The PCI function a sysfs path (a class link, a bus link) resolves to or sits under."""
    try:
        resolved = os.path.realpath(path, strict=True)
    except OSError:
        return None
    return kernel.devpath_address(resolved)


def mark(
    tree: DeviceTree, keys: Mapping[str, tuple[str, ...]], verdicts: Mapping[str, Verdict], label: str
) -> tuple[DeviceTree, tuple[str, ...]]:
    """The tree with every device ID that has a key with an Unhealthy verdict marked Unhealthy, and one
    problem line per key of the tree that is Unhealthy or Healthy with a warning (an NPU reset after a
    hang, a non-fatal PCIe error): its deciding severity and findings."""
    problems: dict[str, str] = {}
    marked: dict[str, dict[str, DeviceInfo]] = {}
    for resource, devices in tree.items():
        marked[resource] = {}
        for device_id, info in devices.items():
            bad = False
            for key in keys.get(device_id, ()):
                verdict = verdicts.get(key)
                if verdict is None or verdict.severity < Severity.WARNING:
                    continue
                state = "reported Unhealthy" if verdict.state is HealthState.UNHEALTHY else "still Healthy"
                bad = bad or verdict.state is HealthState.UNHEALTHY
                problems[key] = f"{label} {key}: {state}, {verdict.severity.name.lower()}: {verdict.message}"
            if bad and info.health is Health.HEALTHY:
                info = replace(info, health=Health.UNHEALTHY)
            marked[resource][device_id] = info
    return marked, tuple(problems[key] for key in sorted(problems))


@dataclass(frozen=True)
class KernelHealthSettings:
    """``poll_seconds``: the safety rescan while kernel signals are on (no uevent announces an AER
    count); ``policy``: the severity that makes a device Unhealthy (CRITICAL)."""

    poll_seconds: float = DEFAULT_POLL_SECONDS
    policy: HealthSettings = field(default_factory=HealthSettings)

    def __post_init__(self) -> None:
        if self.poll_seconds <= 0:
            raise ValueError(f"kernel health poll interval must be positive, not {self.poll_seconds}")


class KernelHealth:
    """One plugin's kernel signals: baselines of its PCI functions, the uevents it saw, its verdicts."""

    def __init__(
        self,
        root: Path,
        keys_of: KeysOf,
        kind_findings: KindFindings = no_kind_findings,
        settings: KernelHealthSettings | None = None,
        label: str = "device",
    ) -> None:
        self.root = root
        self.keys_of = keys_of
        self.kind_findings = kind_findings
        self.settings = settings or KernelHealthSettings()
        self.label = label
        self._baselines: dict[str, tuple[int, kernel.PciBaseline]] = {}
        """PCI address → (its bind count when the baseline was taken, the baseline); the scan's own."""
        self.uevents = kernel.UeventLatch()
        """What uevents said; replaced whole on the event loop, read by scans."""
        self._binds: Mapping[str, int] = {}
        """PCI address → ``bind`` uevents seen; replaced whole on the event loop, read by scans."""

    def observe_uevent(self, event: Uevent | None) -> None:
        """Keep what the event says; a driver bound to a function (the recovery from a fatal error or a
        wedge) takes its baseline anew at the next scan."""
        if event is None:
            return
        self.uevents = self.uevents.after(event)
        address = kernel.devpath_address(event.devpath)
        if event.action == "bind" and event.subsystem == "pci" and address is not None:
            self._binds = {**self._binds, address: self._binds.get(address, 0) + 1}

    def safety_rescan_interval(self) -> float:
        return self.settings.poll_seconds

    def pci_findings(self, addresses: Collection[str]) -> tuple[Finding, ...]:
        """Presence, driver and AER of each PCI function against the baseline taken when it was first
        seen or last bound; a function no longer asked about loses its baseline (it starts anew when it
        is back)."""
        present = set(addresses)
        for address in list(self._baselines):
            if address not in present:
                del self._baselines[address]
        findings: list[Finding] = []
        binds = self._binds
        for address in sorted(present):
            taken = self._baselines.get(address)
            if taken is None or taken[0] != binds.get(address, 0):
                taken = self._baselines[address] = (
                    binds.get(address, 0),
                    kernel.pci_baseline(self.root, address),
                )
            elif taken[1].aer is None:
                # No AER counters when first seen (not readable yet): the first ones read are the baseline.
                aer = kernel.read_aer(self.root, address)
                if aer is not None:
                    taken = self._baselines[address] = (taken[0], replace(taken[1], aer=aer))
            findings.extend(kernel.pci_findings(self.root, address, taken[1]))
        return tuple(findings)

    def forget(self, address: str) -> None:
        """Take the function's baseline anew at the next scan (the plugin itself rebound its driver)."""
        self._baselines.pop(address, None)

    def findings(self, keys: Collection[str]) -> tuple[Finding, ...]:
        addresses = [key for key in keys if PCI_ADDRESS.match(key)]
        return self.pci_findings(addresses) + self.kind_findings(self.root, keys) + self.uevents.findings()

    def verdicts(self, tree: DeviceTree) -> tuple[Mapping[str, tuple[str, ...]], Mapping[str, Verdict]]:
        """Each device ID's keys, and each key's verdict."""
        keys = {
            device_id: self.keys_of(self.root, device_id)
            for devices in tree.values()
            for device_id in devices
        }
        every = {key for found in keys.values() for key in found}
        return keys, assess(self.findings(every), self.settings.policy)

    def apply(self, tree: DeviceTree) -> tuple[DeviceTree, tuple[str, ...]]:
        """The scanned tree with the kernel's verdicts applied, and the problems to report."""
        keys, verdicts = self.verdicts(tree)
        return mark(tree, keys, verdicts, self.label)
