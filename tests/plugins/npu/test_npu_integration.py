"""The NPU plugin binary against the kubelet stand-in, over real unix sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.sim import npu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.process import console_script, plugin_process

pytestmark = pytest.mark.integration

WAIT = 20.0


async def test_npu_plugin_survives_a_missing_accel_class_and_picks_up_hotplug(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root = tmp_path / "node"
    root.mkdir()
    cmd = [
        console_script("intel_npu_device_plugin"),
        "-prefix",
        str(root),
        "-device-plugin-dir",
        str(plugin_dir),
        "-scan-interval",
        "0.2",
        "-shared-dev-num",
        "2",
    ]
    resource = "npu.intel.com/accel"
    async with plugin_process(cmd, tmp_path / "plugin.log") as plugin:
        # No /sys/class/accel yet (driver not loaded): served with zero devices, not dead.
        await kubelet.wait_for(lambda: resource in kubelet.resources(), WAIT)
        assert kubelet.allocatable(resource) == 0
        tree = FakeTree(root)
        npu.add_npu(tree, device_id="0xb03e")
        await kubelet.wait_for(lambda: kubelet.allocatable(resource) == 2, WAIT)
        response = await kubelet.allocate(resource, ["accel0-1"])
        assert [(d.host_path, d.container_path, d.permissions) for d in response.devices] == [
            (f"{root}/dev/accel/accel0", f"{root}/dev/accel/accel0", "rw")
        ]
        assert plugin.process.returncode is None
    assert "sys/class/accel" in plugin.log_text()
