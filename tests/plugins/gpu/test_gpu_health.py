"""The GPU plugin's cards marked Unhealthy from xpumd's findings and the kernel's signals."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.health.model import (
    Finding,
    HealthSettings,
    HealthState,
    Severity,
    assess,
)
from intel_device_plugins.deviceplugin.manager import PluginManager
from intel_device_plugins.deviceplugin.model import DeviceInfo, Health
from intel_device_plugins.deviceplugin.server import FrameworkConfig
from intel_device_plugins.deviceplugin.uevents import DirectoryUevents, UeventHub
from intel_device_plugins.plugins.gpu.discovery import GpuOptions
from intel_device_plugins.plugins.gpu.health import GpuHealth, GpuHealthSettings, card_of, mark_unhealthy
from intel_device_plugins.plugins.gpu.plugin import GpuPlugin
from intel_device_plugins.sim import faults
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.uevents import UeventBroadcaster
from intel_device_plugins.sim.xpumd import SimulatedXpumd, serving

PROFILE = """
[[gpu]]
driver = "xe"
count = 2
device_id = "0xe20b"
"""


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(PROFILE), tmp_path / "root")


def address(tree: FakeTree, card: int) -> str:
    return tree.path(f"/sys/class/drm/card{card}/device").resolve().name


def health_of(plugin: GpuPlugin) -> dict[str, str]:
    return {device_id: info.health.value for device_id, info in plugin.scan()["xe"].items()}


def test_card_ids() -> None:
    assert [card_of(i) for i in ("card0-0", "card12-3", "card1", "monitoring", "cardx-1")] == [
        "card0",
        "card12",
        "card1",
        None,
        None,
    ]


def test_only_unhealthy_verdicts_mark_cards_and_each_card_is_one_problem() -> None:
    tree = {"i915": {"card0-0": DeviceInfo(), "card0-1": DeviceInfo(), "card1-0": DeviceInfo()}}
    addresses = {"card0": "0000:03:00.0", "card1": "0000:04:00.0"}
    findings = [
        Finding("0000:03:00.0", "xpumd", "memory", Severity.CRITICAL, "critical"),
        Finding("0000:04:00.0", "xpumd", "temperature", Severity.WARNING, "warning"),
    ]
    marked, problems = mark_unhealthy(tree, addresses, assess(findings, HealthSettings()))
    assert {i: info.health for i, info in marked["i915"].items()} == {
        "card0-0": Health.UNHEALTHY,
        "card0-1": Health.UNHEALTHY,
        "card1-0": Health.HEALTHY,
    }
    assert problems == (
        "GPU card0 (0000:03:00.0): reported Unhealthy, critical: xpumd memory critical: critical",
    )


def test_settings_name_the_flag_when_the_severity_is_wrong() -> None:
    with pytest.raises(ValueError, match="-xpumd-unhealthy-severity"):
        GpuHealthSettings(xpumd_unhealthy_severity="error")
    assert not GpuHealthSettings().enabled and GpuHealthSettings(kernel_signals=True).enabled


def test_kernel_signals_mark_a_card_with_a_fatal_aer_error(
    tree: FakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    faults.enable_aer(tree, address(tree, 1))
    plugin = GpuPlugin(
        prefix=str(tree.root), options=GpuOptions(), health=GpuHealth(GpuHealthSettings(kernel_signals=True))
    )
    assert plugin.safety_rescan_interval() == 5.0
    assert health_of(plugin) == {"card0-0": "Healthy", "card1-0": "Healthy"}
    faults.raise_aer(tree, address(tree, 1), "fatal", "Surprise Down Error")
    with caplog.at_level(logging.WARNING):
        assert health_of(plugin) == {"card0-0": "Healthy", "card1-0": "Unhealthy"}
        assert health_of(plugin) == {"card0-0": "Healthy", "card1-0": "Unhealthy"}
    lines = [r.getMessage() for r in caplog.records if "reported Unhealthy" in r.getMessage()]
    assert lines == [
        f"GPU card1 ({address(tree, 1)}): reported Unhealthy, critical: "
        "aer aer-fatal critical: 1 new fatal PCIe error(s): Surprise Down Error +1"
    ]


def test_without_health_settings_the_plugin_is_as_before(tree: FakeTree) -> None:
    faults.enable_aer(tree, address(tree, 0))
    plugin = GpuPlugin(prefix=str(tree.root), options=GpuOptions())
    faults.raise_aer(tree, address(tree, 0), "fatal")
    assert health_of(plugin) == {"card0-0": "Healthy", "card1-0": "Healthy"}
    assert plugin.safety_rescan_interval() == float("inf")


@pytest.fixture
async def daemon(tmp_path: Path, tree: FakeTree) -> AsyncIterator[SimulatedXpumd]:
    async with serving(SimulatedXpumd.for_node(tmp_path / "x.sock", tree.root, interval=0.05)) as sim:
        yield sim


async def test_xpumd_findings_reach_the_kubelet_through_the_monitor(
    tree: FakeTree, daemon: SimulatedXpumd, kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    settings = GpuHealthSettings(xpumd_endpoint=str(daemon.socket))
    plugin = GpuPlugin(prefix=str(tree.root), options=GpuOptions(), health=GpuHealth(settings))
    config = FrameworkConfig(
        plugin_dir, plugin_dir.parent / "cdi", scan_interval=60, event_rescan_interval=60
    )
    manager = PluginManager(plugin, config)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))

    def advertised() -> dict[str, str]:
        return {d.id: d.health for d in kubelet.resources().get("gpu.intel.com/xe", {}).values()}

    try:
        await kubelet.wait_for(lambda: advertised() == {"card0-0": "Healthy", "card1-0": "Healthy"})
        daemon.memory_errors(address(tree, 0))
        # No polling (60 s): the monitor's change callback rescans at once.
        await kubelet.wait_for(lambda: advertised() == {"card0-0": "Unhealthy", "card1-0": "Healthy"})
        await daemon.crash()  # xpumd gone: Unknown, which the device-plugin API shows as before
        await kubelet.wait_for(lambda: advertised() == {"card0-0": "Healthy", "card1-0": "Healthy"})
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def test_the_plugin_loads_grpclib_only_when_it_talks_to_xpumd() -> None:
    code = (
        "import sys, intel_device_plugins.plugins.gpu.cli;print(sorted({'grpclib', 'h2'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_verdicts_per_card_for_either_framework(tree: FakeTree) -> None:
    health = GpuHealth(GpuHealthSettings(kernel_signals=True))
    first, second = address(tree, 0), address(tree, 1)
    addresses, verdicts = health.verdicts(str(tree.root), ["card0", "card1", "card9"])
    assert addresses == {"card0": first, "card1": second}
    assert {a: v.state for a, v in verdicts.items()} == {
        first: HealthState.HEALTHY,
        second: HealthState.HEALTHY,
    }
    faults.unbind(tree, second)
    _, verdicts = health.verdicts(str(tree.root), ["card0", "card1"])
    assert verdicts[first].state is HealthState.HEALTHY
    assert (verdicts[second].state, verdicts[second].severity) == (HealthState.UNHEALTHY, Severity.CRITICAL)
    assert verdicts[second].message == "pci pci-driver critical: driver xe unbound"


async def test_a_wedged_gpu_is_unhealthy_until_rebound(
    tree: FakeTree, kubelet: KubeletStandIn, plugin_dir: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "uevents"
    tree.uevents = UeventBroadcaster(directory)
    hub = UeventHub(DirectoryUevents(directory))
    assert hub.start()
    plugin = GpuPlugin(
        prefix=str(tree.root), options=GpuOptions(), health=GpuHealth(GpuHealthSettings(kernel_signals=True))
    )
    config = FrameworkConfig(
        plugin_dir, plugin_dir.parent / "cdi", scan_interval=60, event_rescan_interval=60
    )
    manager = PluginManager(plugin, config, hub)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))

    def advertised() -> dict[str, str]:
        return {d.id: d.health for d in kubelet.resources().get("gpu.intel.com/xe", {}).values()}

    try:
        await kubelet.wait_for(lambda: advertised() == {"card0-0": "Healthy", "card1-0": "Healthy"})
        faults.wedge(tree, 1, "rebind")
        await kubelet.wait_for(lambda: advertised() == {"card0-0": "Healthy", "card1-0": "Unhealthy"})
        faults.unbind(tree, address(tree, 1))
        faults.bind(tree, address(tree, 1), "xe")  # the recovery the event asked for
        await kubelet.wait_for(lambda: advertised() == {"card0-0": "Healthy", "card1-0": "Healthy"})
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        hub.close()
        tree.uevents.close()
