"""The scan loop: turn successive device trees into per-resource servers.

The manager owns no device knowledge. It scans on a worker thread (a read that blocks must not stop
the event loop), diffs the new tree against the last one, checks what changed, and adds, updates or
removes resource servers accordingly.

When to scan: immediately when a directory the plugin watches changes (inotify) or when the kernel
announces a device event the plugin asked for (uevents); otherwise every ``scan_interval`` seconds.
A plugin that declares itself event-driven (:class:`~intel_device_plugins.deviceplugin.plugin.EventDriven`)
is rescanned only every ``event_rescan_interval`` seconds as a safety net while all its event
sources are in place (or sooner, when the plugin asks for it because some state it reads is never
announced); the moment one is missing (no inotify, a watched directory gone) it is polled
at ``scan_interval`` again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.cdi import remove_stale_cdi_temporaries
from intel_device_plugins.deviceplugin.inotify import DirectoryEvent, DirectoryWatcher
from intel_device_plugins.deviceplugin.model import (
    RESOURCE_TYPE,
    DeviceMap,
    DeviceTree,
    check_devices,
    diff_trees,
)
from intel_device_plugins.deviceplugin.plugin import (
    EventDriven,
    Monitors,
    ObservesUevents,
    RescansSooner,
    Scanner,
    WatchesPaths,
)
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.deviceplugin.scanworker import DeadlineScans, wait_any
from intel_device_plugins.deviceplugin.server import (
    RECHECK_INTERVAL,
    SAFETY_RECHECK_INTERVAL,
    FrameworkConfig,
    ResourceServer,
)
from intel_device_plugins.deviceplugin.uevents import Uevent, UeventHub

log = logging.getLogger(__name__)

HOTPLUG_SETTLE_SECONDS = 0.02


class PluginManager:
    """Runs one plugin: scanning, diffing and one :class:`ResourceServer` per resource type."""

    def __init__(self, plugin: Scanner, config: FrameworkConfig, uevents: UeventHub | None = None) -> None:
        self.plugin = plugin
        self.config = config
        self.servers: dict[str, ResourceServer] = {}
        self._tree: DeviceTree = {}
        self._supervisors: dict[str, asyncio.Task[None]] = {}
        self._rescan = asyncio.Event()
        self._watcher = DirectoryWatcher(self._on_directory_event)
        self._uevents = uevents
        self._subsystems = (
            frozenset(plugin.uevent_subsystems()) if isinstance(plugin, EventDriven) else frozenset()
        )
        self._event_driven = isinstance(plugin, EventDriven)
        self._scans: DeadlineScans[DeviceTree] = DeadlineScans(
            plugin.scan, plugin.namespace, config.scan_deadline, self._rescan.set
        )
        self._checks = ProblemLog(log)
        self._check_problems: dict[str, tuple[str, ...]] = {}
        self.uevents_seen = 0
        """Kernel events that matched the plugin's subsystems."""

    @property
    def tree(self) -> DeviceTree:
        """The last tree the plugin returned, as returned (before checking)."""
        return self._tree

    @property
    def scan_stuck(self) -> bool:
        """A scan has been running for longer than the deadline."""
        return self._scans.stuck

    @property
    def scans(self) -> int:
        """Scans started (observability and tests)."""
        return self._scans.started

    # ----- events ------------------------------------------------------------------------------

    def _on_directory_event(self, event: DirectoryEvent) -> None:
        if event.directory == self.config.device_plugin_dir:
            for server in self.servers.values():
                server.wake()
        else:
            self._rescan.set()

    def _on_uevent(self, event: Uevent | None) -> None:
        """A kernel event of one of the plugin's subsystems (``None``: events were lost)."""
        self.uevents_seen += 1
        if isinstance(self.plugin, ObservesUevents):
            try:
                self.plugin.observe_uevent(event)
            except Exception:
                log.exception("%s: observing a uevent failed", self.plugin.namespace)
        self._rescan.set()

    def _watch_paths(self) -> Sequence[Path]:
        return self.plugin.watch_paths() if isinstance(self.plugin, WatchesPaths) else ()

    def _ensure_watches(self) -> None:
        """(Re-)add watches; directories that appear later (e.g. after a driver load) get picked up."""
        if not self._watcher.active:
            return
        for directory in (self.config.device_plugin_dir, *self._watch_paths()):
            if not self._watcher.watching(directory):
                self._watcher.watch(directory)

    def _events_in_place(self) -> bool:
        """Every directory that matters is watched, so no change can go unnoticed until the next scan."""
        return self._watcher.active and all(
            self._watcher.watching(directory)
            for directory in (self.config.device_plugin_dir, *self._watch_paths())
        )

    def rescan_interval(self) -> float:
        """Seconds until the next scan when no event arrives."""
        if self._event_driven and self._events_in_place():
            if isinstance(self.plugin, RescansSooner):
                return min(self.config.event_rescan_interval, self.plugin.safety_rescan_interval())
            return self.config.event_rescan_interval
        return self.config.scan_interval

    def recheck_interval(self) -> float:
        """Seconds between the servers' registration checks when no inotify event arrives."""
        if self._watcher.watching(self.config.device_plugin_dir):
            return SAFETY_RECHECK_INTERVAL
        return RECHECK_INTERVAL

    # ----- scanning ----------------------------------------------------------------------------

    async def scan_in_worker(self, stop: asyncio.Event) -> DeviceTree | None:
        """One scan on the worker thread, waited for until the deadline (or ``stop``); ``None`` when it
        failed, missed the deadline or ``stop`` was set (see :class:`DeadlineScans`)."""
        return await self._scans.next(stop, self.rescan_interval())

    def _checked(self, resource: str, devices: DeviceMap) -> DeviceMap:
        checked = check_devices(f"{self.plugin.namespace}/{resource}", devices)
        if checked.problems:
            self._check_problems[resource] = checked.problems
        else:
            self._check_problems.pop(resource, None)
        return checked.devices

    async def apply(self, tree: DeviceTree) -> None:
        """Bring the set of servers and their devices in line with ``tree``.

        Only resources that changed are checked (``check_devices``); what the check drops or repairs
        is logged once, like any scan problem.
        """
        diff = diff_trees(self._tree, tree)
        if diff.empty:
            self._tree = tree
            return
        for resource in diff.removed:
            self._check_problems.pop(resource, None)
            if resource in self.servers:
                await self._remove(resource)
        for resource, devices in diff.added.items():
            if not RESOURCE_TYPE.match(resource):
                self._check_problems[resource] = (
                    f"{self.plugin.namespace}: {resource!r} is not a valid resource name; not advertised",
                )
                continue
            server = ResourceServer(self.plugin, resource, self.config, self.recheck_interval)
            await server.update(self._checked(resource, devices))
            self.servers[resource] = server
            self._supervisors[resource] = asyncio.create_task(server.supervise(), name=f"serve {resource}")
            log.info("%s/%s: now advertising %d devices", self.plugin.namespace, resource, len(devices))
        for resource, devices in diff.updated.items():
            if resource in self.servers:
                await self.servers[resource].update(self._checked(resource, devices))
                log.info("%s/%s: devices changed, now %d", self.plugin.namespace, resource, len(devices))
        self._checks.report(problem for problems in self._check_problems.values() for problem in problems)
        self._tree = tree

    async def _remove(self, resource: str) -> None:
        server = self.servers.pop(resource)
        await server.stop()
        task = self._supervisors.pop(resource)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        log.info("%s/%s: no longer present; server stopped", self.plugin.namespace, resource)

    async def _monitor(self) -> None:
        """The plugin's monitor; whatever becomes of it, scanning and serving go on."""
        assert isinstance(self.plugin, Monitors)
        try:
            await self.plugin.monitor(self._rescan.set)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: the monitor failed; serving without it", self.plugin.namespace)
        else:
            log.debug("%s: the monitor has nothing to watch", self.plugin.namespace)

    async def run(self, stop: asyncio.Event) -> None:
        """Scan and serve until ``stop`` is set, then stop every server and remove its socket."""
        remove_stale_cdi_temporaries(self.config.cdi_dir)
        if not self._watcher.start():
            log.info("no inotify: polling every %.1f s", self.config.scan_interval)
        unsubscribe = None
        if self._uevents is not None and self._subsystems:
            unsubscribe = self._uevents.subscribe(self._subsystems, self._on_uevent)
        monitor = asyncio.ensure_future(self._monitor()) if isinstance(self.plugin, Monitors) else None
        try:
            while not stop.is_set():
                self._ensure_watches()
                self._rescan.clear()
                tree = await self.scan_in_worker(stop)
                if tree is not None:
                    await self.apply(tree)
                if self._scans.busy:
                    continue  # stuck: wait for that scan (bounded by the deadline) rather than start one
                await wait_any(stop, self._rescan, timeout=self.rescan_interval())
                if self._rescan.is_set() and not stop.is_set():
                    # A hot-plug creates several files in a burst; let it finish so one update covers it.
                    await asyncio.sleep(HOTPLUG_SETTLE_SECONDS)
        finally:
            if monitor is not None:
                monitor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await monitor
            if unsubscribe is not None:
                unsubscribe()
            self._watcher.close()
            self._scans.close()
            for resource in list(self.servers):
                await self._remove(resource)


async def serve_plugins(plugins: Sequence[Scanner], config: FrameworkConfig, stop: asyncio.Event) -> None:
    """Run several plugins in one process and one event loop (e.g. GPU and QAT on one node).

    Each plugin scans on its own thread, so a kind whose scan hangs does not hold up the others.
    Kernel events come from one source shared by all plugins.
    """
    wanted = any(isinstance(plugin, EventDriven) for plugin in plugins)
    hub = UeventHub.for_directory(config.uevent_dir) if wanted else None
    if hub is not None:
        hub.start()
    managers = [PluginManager(plugin, config, hub) for plugin in plugins]
    try:
        await asyncio.gather(*(manager.run(stop) for manager in managers))
    finally:
        if hub is not None:
            hub.close()
