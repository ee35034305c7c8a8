"""The QAT plugins' imperative shell: binding VFs, running ``adf_ctl``, logging problems.

Everything that decides something is in :mod:`.discovery`, :mod:`.policy` and :mod:`.kernel`; this
module only performs the side effects around them and adapts them to the framework's hooks.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from intel_device_plugins import sysfs
from intel_device_plugins.deviceplugin.health import kernel as kernel_signals
from intel_device_plugins.deviceplugin.health.kernelhealth import KernelHealth, pci_address_of
from intel_device_plugins.deviceplugin.health.model import Finding
from intel_device_plugins.deviceplugin.model import ContainerAllocation, DeviceMap, DeviceTree
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.qat import discovery, kernel, policy
from intel_device_plugins.plugins.qat.discovery import NAMESPACE, DpdkConfig, QatPaths
from intel_device_plugins.plugins.scanning import KernelHealthHooks

log = logging.getLogger(__name__)

BIND_RETRY_SCANS = 30
"""A VF whose binding failed is tried again only every this many scans, not every second."""
HEALTH_RESCAN_INTERVAL = 5.0
"""Seconds between rescans without events: a PF's heartbeat status (debugfs) and its service
configuration (``qat/state``, ``qat/cfg_services``) change without a uevent."""


class Binder(Protocol):
    """Moves a PCI function from its current driver (``""``: none) to ``target``; raises ``OSError``."""

    def rebind(self, address: str, current: str, target: str) -> None: ...


def _write_existing(path: Path, text: str) -> None:
    """Write to a sysfs attribute that must already exist (never create a plain file instead)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@dataclass(frozen=True)
class SysfsBinder:
    """Rebinds through the driver ``unbind``/``bind`` attributes, as the kernel documents."""

    drivers: Path

    def rebind(self, address: str, current: str, target: str) -> None:
        if current:
            try:
                _write_existing(self.drivers / current / "unbind", address)
            except OSError as error:
                raise OSError(f"unbinding from {current} failed: {error.strerror or error}") from error
        try:
            _write_existing(self.drivers / target / "bind", address)
        except OSError as error:
            raise OSError(f"binding to {target} failed: {error.strerror or error}") from error


def vf_keys(root: Path, device_id: str) -> tuple[str, ...]:
    """A VF's ID is its PCI address; its PF (``physfn``) speaks for it too: a PF that is down takes
    its VFs with it."""
    if not sysfs.PCI_ADDRESS.match(device_id):
        return ()
    pf = pci_address_of(root / "sys/bus/pci/devices" / device_id / "physfn")
    return (device_id, pf) if pf else (device_id,)


def pf_findings(root: Path, keys: Collection[str]) -> tuple[Finding, ...]:
    """``qat/state``, the debugfs heartbeat and RAS ``errors_fatal`` of the PFs among the keys."""
    findings: list[Finding] = []
    for key in sorted(keys):
        if sysfs.PCI_ADDRESS.match(key) and (root / "sys/bus/pci/devices" / key / "qat").is_dir():
            findings.extend(kernel_signals.qat_findings(root, key))
    return tuple(findings)


class QatDpdkPlugin(KernelHealthHooks):
    """QAT VFs for DPDK: one resource per configured service set, one device per VF."""

    namespace = NAMESPACE

    def __init__(
        self,
        paths: QatPaths,
        config: DpdkConfig,
        allocation_policy: policy.Policy = policy.Policy.NONE,
        binder: Binder | None = None,
        health_rescan_interval: float = HEALTH_RESCAN_INTERVAL,
        health: KernelHealth | None = None,
    ) -> None:
        self.paths = paths
        self.health_rescan_interval = health_rescan_interval
        self.health = health
        """Kernel signals (``-kernel-health``): PF state, heartbeat and RAS; AER and binding of PFs, VFs."""
        self.config = config
        self.allocation_policy = allocation_policy
        self.binder: Binder = binder or SysfsBinder(paths.drivers)
        self.problems = ProblemLog(log)
        self._bind_failures: dict[str, tuple[str, int]] = {}
        """VF address → (reason, scan number of the failed attempt)."""
        self._scans = 0
        self._numa = NumaCache(paths.root)
        self._memo = discovery.StaticMemo()

    def scan(self) -> DeviceTree:
        return self.scan_vfs()[1]

    def scan_vfs(self) -> tuple[tuple[discovery.VirtualFunction, ...], DeviceTree]:
        """Bind what needs binding, then the VFs found and the tree built from them (the DRA driver
        publishes facts of the VFs that the tree does not carry)."""
        self._scans += 1
        found = discovery.find_vfs(self.paths, self.config, self._memo)
        failures: dict[str, str] = {}
        settled: dict[str, str] = {}
        for vf in found.vfs:
            current = discovery.current_driver(vf, self.paths)
            if current == self.config.dpdk_driver:
                self._bind_failures.pop(vf.address, None)
                settled[vf.address] = current
                continue
            failures[vf.address] = self._bind(vf.address, current)
        # Only the facts of the VFs just seen are kept (in a VM, other PCI functions are read anew).
        present = {vf.address for vf in found.vfs}
        self._memo.retain(present)
        for gone in [address for address in self._bind_failures if address not in present]:
            del self._bind_failures[gone]
        result = discovery.build_tree(
            self.paths, found.vfs, self.config, failures, self._numa, self._memo, settled
        )
        tree, problems = self.with_health(result.tree, (*found.problems, *result.problems))
        self.problems.report(problems)
        return found.vfs, tree

    def watch_paths(self) -> Sequence[Path]:
        """Where the VFs' device nodes appear: ``/dev/vfio`` for vfio-pci, ``/dev`` for ``uioN``."""
        directory = "dev/vfio" if self.config.dpdk_driver == discovery.VFIO_PCI else "dev"
        return (self.paths.root / directory,)

    def uevent_subsystems(self) -> Collection[str]:
        """PFs and VFs come and go (also on ``sriov_numvfs`` writes) and change drivers with ``pci``
        events; their nodes are ``vfio`` groups or ``uio`` devices."""
        return ("pci", "vfio", "uio")

    def safety_rescan_interval(self) -> float:
        return min(self.health_rescan_interval, super().safety_rescan_interval())

    def _bind(self, address: str, current: str) -> str:
        """Try to bind (unless a recent attempt failed); the failure reason, or ``""``."""
        previous = self._bind_failures.get(address)
        if previous is not None and self._scans - previous[1] < BIND_RETRY_SCANS:
            return previous[0]
        target = self.config.dpdk_driver
        try:
            self.binder.rebind(address, current, target)
        except OSError as error:
            self._bind_failures[address] = (str(error), self._scans)
            return str(error)
        now = sysfs.driver_name(self.paths.devices / address) or ""
        if now != target:
            reason = f"binding to {target} had no effect (bound to {now or 'no driver'})"
            self._bind_failures[address] = (reason, self._scans)
            return reason
        self._bind_failures.pop(address, None)
        if self.health is not None:
            self.health.forget(address)  # the driver it should have is the one just bound
        log.info("%s: bound to %s (was %s)", address, target, current or "unbound")
        return ""

    def preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str]:
        return policy.preferred_allocation(self.allocation_policy, available, must_include, size)

    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation:
        return policy.renumber(allocation, ids)


ADF_CTL_STATUS = ("adf_ctl", "status")
ADF_CTL_REFRESH = 5.0
"""Seconds between ``adf_ctl status`` runs; device states change rarely and a run costs a process."""
FIRST_ANSWER_TIMEOUT = 15.0


class BackgroundCommand:
    """Runs a command on a thread of its own, at most every ``refresh`` seconds, keeping the latest outcome.

    The scan runs on the event loop: a slow or hung ``adf_ctl`` there would stall every gRPC call.
    Only the very first scan waits for an answer (so the plugin starts with devices).
    """

    def __init__(
        self,
        runner: kernel.CommandRunner,
        argv: Sequence[str],
        refresh: float = ADF_CTL_REFRESH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runner = runner
        self._argv = list(argv)
        self._refresh = refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._answered = threading.Event()
        self._outcome: str | Exception | None = None
        self._running = False
        self._started_at: float | None = None

    def latest(self, first_wait: float = FIRST_ANSWER_TIMEOUT) -> str:
        """The latest output; raises the latest failure (``OSError`` or ``CommandError``)."""
        now = self._clock()
        with self._lock:
            due = self._started_at is None or now - self._started_at >= self._refresh
            if due and not self._running:
                self._running, self._started_at = True, now
                threading.Thread(target=self._run, name="adf_ctl", daemon=True).start()
        self._answered.wait(first_wait)
        with self._lock:
            outcome = self._outcome
        if outcome is None:
            raise kernel.CommandError(f"{' '.join(self._argv)} gave no answer within {first_wait} s")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _run(self) -> None:
        outcome: str | Exception
        try:
            outcome = self._runner(self._argv)
        except (OSError, kernel.CommandError) as error:
            outcome = error
        with self._lock:
            self._outcome, self._running = outcome, False
        self._answered.set()


class QatKernelPlugin:
    """QAT through the kernel driver: one resource per ``cy<C>_dc<D>`` section shape."""

    namespace = NAMESPACE

    def __init__(
        self,
        paths: kernel.KernelPaths,
        runner: kernel.CommandRunner = kernel.run_command,
        refresh: float = ADF_CTL_REFRESH,
    ) -> None:
        self.paths = paths
        self.status = BackgroundCommand(runner, ADF_CTL_STATUS, refresh)
        self.problems = ProblemLog(log)

    def scan(self) -> DeviceTree:
        """Raises when ``adf_ctl`` fails: the framework then keeps serving the previous devices."""
        try:
            output = self.status.latest()
        except (OSError, kernel.CommandError) as error:
            self.problems.report([f"adf_ctl status: {error}"])
            raise RuntimeError(f"adf_ctl status failed: {error}") from error
        result = kernel.scan_kernel(self.paths, output)
        self.problems.report(result.problems)
        return result.tree

    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation:
        return kernel.renumber_sections(resource, devices, ids, allocation)
