"""The real ``intel_gpu_device_plugin`` process with its health flags, against the kubelet stand-in: a
card turns Unhealthy from the simulated xpumd (its own process, ``intel-sim-xpumd``) and from the
kernel's AER counters, and Healthy again on recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.sim import faults
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from intel_device_plugins.sim.uevents import UeventBroadcaster
from intel_device_plugins.sim.xpumdcli import xpumd_process

pytestmark = pytest.mark.integration

NODE = """
[[gpu]]
driver = "xe"
count = 2
device_id = "0xe20b"
"""
XE = "gpu.intel.com/xe"


@pytest.fixture
def node(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(NODE), tmp_path / "node")


def address(node: FakeTree, card: int) -> str:
    return node.path(f"/sys/class/drm/card{card}/device").resolve().name


def command(node: FakeTree, plugin_dir: Path, *extra: str) -> list[str]:
    return [
        console_script("intel_gpu_device_plugin"),
        "-prefix", str(node.root),
        "--device-plugin-dir", str(plugin_dir),
        "-cdi-dir", str(plugin_dir.parent / "cdi"),
        *extra,
    ]  # fmt: skip


def health(kubelet: KubeletStandIn) -> dict[str, str]:
    return {device_id: device.health for device_id, device in kubelet.resources().get(XE, {}).items()}


HEALTHY = {"card0-0": "Healthy", "card1-0": "Healthy"}


async def test_xpumd_overheating_under_a_warning_threshold_and_cooling_down(
    node: FakeTree, plugin_dir: Path, kubelet: KubeletStandIn, tmp_path: Path
) -> None:
    socket = tmp_path / "xpumd.sock"
    sim = console_script("intel-sim-xpumd")
    async with xpumd_process(sim, socket, node.root, interval=0.2, log_path=tmp_path / "xpumd.log") as xpumd:
        argv = command(
            node, plugin_dir, "-xpumd-endpoint", str(socket), "-xpumd-unhealthy-severity", "warning"
        )
        async with plugin_process(argv, tmp_path / "plugin.log") as plugin:
            await kubelet.wait_for(lambda: health(kubelet) == HEALTHY, timeout=15)
            assert await xpumd.send(f"overheat {address(node, 1)}") == f"ok overheat {address(node, 1)}"
            await kubelet.wait_for(lambda: health(kubelet) == {**HEALTHY, "card1-0": "Unhealthy"}, timeout=5)
            assert await xpumd.send(f"cool_down {address(node, 1)}") == f"ok cool_down {address(node, 1)}"
            await kubelet.wait_for(lambda: health(kubelet) == HEALTHY, timeout=5)
            assert "reported Unhealthy, warning: xpumd temperature warning" in plugin.log_text()
            assert (await xpumd.send("overheat 0000:99:00.0")).startswith(
                "error overheat 0000:99:00.0: no GPU"
            )


async def test_xpumd_overheating_under_the_default_threshold_stays_healthy(
    node: FakeTree, plugin_dir: Path, kubelet: KubeletStandIn, tmp_path: Path
) -> None:
    socket = tmp_path / "xpumd.sock"
    async with xpumd_process(console_script("intel-sim-xpumd"), socket, node.root, interval=0.2) as xpumd:
        argv = command(node, plugin_dir, "-xpumd-endpoint", str(socket))
        async with plugin_process(argv, tmp_path / "plugin.log"):
            await kubelet.wait_for(lambda: health(kubelet) == HEALTHY, timeout=15)
            await xpumd.send(f"overheat {address(node, 0)}")
            await xpumd.send(f"memory_errors {address(node, 1)}")  # CRITICAL: over the default
            await kubelet.wait_for(lambda: health(kubelet) == {**HEALTHY, "card1-0": "Unhealthy"}, timeout=5)


@pytest.mark.parametrize("flag", ["-kernel-health", "-health-management"])
async def test_aer_fatal_errors_with_kernel_health_and_a_rebind_as_recovery(
    flag: str, node: FakeTree, plugin_dir: Path, kubelet: KubeletStandIn, tmp_path: Path
) -> None:
    """``-health-management`` (Level-Zero, not available here) falls back to the kernel's signals."""
    uevents = tmp_path / "uevents"
    node.uevents = UeventBroadcaster(uevents)
    faults.enable_aer(node, address(node, 0))
    argv = command(node, plugin_dir, flag, "-uevent-dir", str(uevents))
    try:
        async with plugin_process(argv, tmp_path / "plugin.log") as plugin:
            await kubelet.wait_for(lambda: health(kubelet) == HEALTHY, timeout=15)
            faults.raise_aer(node, address(node, 0), "fatal", "Surprise Down Error")
            # No uevent announces a count: the 5 s safety rescan finds it.
            await kubelet.wait_for(lambda: health(kubelet) == {**HEALTHY, "card0-0": "Unhealthy"}, timeout=8)
            assert (
                "aer aer-fatal critical: 1 new fatal PCIe error(s): Surprise Down Error +1"
                in plugin.log_text()
            )
            driver = faults.unbind(node, address(node, 0))
            faults.bind(node, address(node, 0), driver)
            await kubelet.wait_for(lambda: health(kubelet) == HEALTHY, timeout=5)
            if flag == "-health-management":
                assert "-health-management: Level-Zero health is not available" in plugin.log_text()
    finally:
        node.uevents.close()
