"""The scan loop: turn successive device trees into per-resource servers.

The manager owns no device knowledge. It rescans every ``scan_interval`` seconds and immediately when
a directory the plugin watches changes, diffs the new tree against the last one, and adds, updates or
removes resource servers accordingly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.inotify import DirectoryEvent, DirectoryWatcher
from intel_device_plugins.deviceplugin.model import DeviceTree, diff_trees
from intel_device_plugins.deviceplugin.plugin import Scanner, WatchesPaths
from intel_device_plugins.deviceplugin.server import FrameworkConfig, ResourceServer

log = logging.getLogger(__name__)

HOTPLUG_SETTLE_SECONDS = 0.02


class PluginManager:
    """Runs one plugin: scanning, diffing and one :class:`ResourceServer` per resource type."""

    def __init__(self, plugin: Scanner, config: FrameworkConfig) -> None:
        self.plugin = plugin
        self.config = config
        self.servers: dict[str, ResourceServer] = {}
        self._tree: DeviceTree = {}
        self._supervisors: dict[str, asyncio.Task[None]] = {}
        self._rescan = asyncio.Event()
        self._watcher = DirectoryWatcher(self._on_directory_event)
        self._last_scan_error = ""
        self.scans = 0

    @property
    def tree(self) -> DeviceTree:
        return self._tree

    def _on_directory_event(self, event: DirectoryEvent) -> None:
        if event.directory == self.config.device_plugin_dir:
            for server in self.servers.values():
                server.wake()
        else:
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

    def scan_once(self) -> DeviceTree | None:
        """Run the plugin's scan; on failure log once and return ``None`` (the old tree stays served)."""
        self.scans += 1
        try:
            tree = self.plugin.scan()
        except Exception as error:
            message = f"{self.plugin.namespace}: scan failed: {error!r}"
            if message != self._last_scan_error:
                log.exception("%s; keeping the previous devices", message)
                self._last_scan_error = message
            return None
        self._last_scan_error = ""
        return tree

    async def apply(self, tree: DeviceTree) -> None:
        """Bring the set of servers and their devices in line with ``tree``."""
        diff = diff_trees(self._tree, tree)
        for resource in diff.removed:
            await self._remove(resource)
        for resource, devices in diff.added.items():
            server = ResourceServer(self.plugin, resource, self.config)
            await server.update(devices)
            self.servers[resource] = server
            self._supervisors[resource] = asyncio.create_task(server.supervise(), name=f"serve {resource}")
            log.info("%s/%s: now advertising %d devices", self.plugin.namespace, resource, len(devices))
        for resource, devices in diff.updated.items():
            await self.servers[resource].update(devices)
            log.info("%s/%s: devices changed, now %d", self.plugin.namespace, resource, len(devices))
        self._tree = tree

    async def _remove(self, resource: str) -> None:
        server = self.servers.pop(resource)
        await server.stop()
        task = self._supervisors.pop(resource)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        log.info("%s/%s: no longer present; server stopped", self.plugin.namespace, resource)

    async def run(self, stop: asyncio.Event) -> None:
        """Scan and serve until ``stop`` is set, then stop every server and remove its socket."""
        if not self._watcher.start():
            log.info("no inotify: polling every %.1f s", self.config.scan_interval)
        try:
            while not stop.is_set():
                self._ensure_watches()
                self._rescan.clear()
                tree = self.scan_once()
                if tree is not None:
                    await self.apply(tree)
                await _wait_any(stop, self._rescan, timeout=self.config.scan_interval)
                if self._rescan.is_set() and not stop.is_set():
                    # A hot-plug creates several files in a burst; let it finish so one update covers it.
                    await asyncio.sleep(HOTPLUG_SETTLE_SECONDS)
        finally:
            self._watcher.close()
            for resource in list(self.servers):
                await self._remove(resource)


async def _wait_any(*events: asyncio.Event, timeout: float) -> None:
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def serve_plugins(plugins: Sequence[Scanner], config: FrameworkConfig, stop: asyncio.Event) -> None:
    """Run several plugins in one process and one event loop (e.g. GPU and QAT on one node)."""
    managers = [PluginManager(plugin, config) for plugin in plugins]
    await asyncio.gather(*(manager.run(stop) for manager in managers))
