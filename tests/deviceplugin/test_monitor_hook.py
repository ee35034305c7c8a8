"""The optional ``monitor`` hook: run beside the scans, a change rescans at once, a failure is contained."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.manager import PluginManager
from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceTree, Health
from intel_device_plugins.deviceplugin.server import FrameworkConfig
from intel_device_plugins.sim.kubelet import KubeletStandIn


@dataclass
class Watched:
    """A plugin whose one device's health only its monitor learns of."""

    fail: bool = False
    health: Health = Health.HEALTHY
    changed: list[Callable[[], None]] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return "example.com"

    def scan(self) -> DeviceTree:
        return {"widget": {"w0": DeviceInfo(health=self.health)}}

    async def monitor(self, changed: Callable[[], None]) -> None:
        if self.fail:
            raise RuntimeError("no daemon")
        self.changed.append(changed)
        await asyncio.Event().wait()


async def serve(plugin: Watched, plugin_dir: Path) -> tuple[asyncio.Event, asyncio.Task[None]]:
    config = FrameworkConfig(plugin_dir, plugin_dir.parent / "cdi", scan_interval=60)
    manager = PluginManager(plugin, config)
    stop = asyncio.Event()
    return stop, asyncio.create_task(manager.run(stop))


def advertised(kubelet: KubeletStandIn) -> dict[str, str]:
    return {d.id: d.health for d in kubelet.resources().get("example.com/widget", {}).values()}


async def test_a_change_the_monitor_reports_is_scanned_at_once(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    plugin = Watched()
    stop, task = await serve(plugin, plugin_dir)
    try:
        await kubelet.wait_for(lambda: advertised(kubelet) == {"w0": "Healthy"} and bool(plugin.changed))
        plugin.health = Health.UNHEALTHY
        plugin.changed[0]()
        await kubelet.wait_for(lambda: advertised(kubelet) == {"w0": "Unhealthy"})
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_a_failing_monitor_leaves_the_plugin_served(
    kubelet: KubeletStandIn, plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        stop, task = await serve(Watched(fail=True), plugin_dir)
        try:
            await kubelet.wait_for(lambda: advertised(kubelet) == {"w0": "Healthy"})
            await kubelet.wait_for(
                lambda: any("the monitor failed" in r.getMessage() for r in caplog.records)
            )
            assert not task.done()
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)
