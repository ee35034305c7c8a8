"""The DSA and IAA plugin binaries against the kubelet stand-in, over real unix sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process

pytestmark = pytest.mark.integration

WAIT = 20.0
"""Upper bound for the plugin to start and react, generous for a loaded machine."""


def command(binary: str, root: Path, plugin_dir: Path, *flags: str) -> list[str]:
    return [
        console_script(binary),
        "-prefix",
        str(root),
        "--device-plugin-dir",
        str(plugin_dir),
        "-cdi-dir",
        str(root / "cdi"),
        "-scan-interval",
        "0.2",
        *flags,
    ]


async def test_dsa_work_queues_served_allocated_and_rescanned(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root = tmp_path / "node"
    tree = build_node(parse_node_spec('[[dsa]]\ncount = 2\nwqs = 2\nwq_mode = "mixed"\n'), root)
    shared, dedicated = "dsa.intel.com/wq-user-shared", "dsa.intel.com/wq-user-dedicated"
    cmd = command("intel_dsa_device_plugin", root, plugin_dir, "-shared-dev-num", "3")
    async with plugin_process(cmd, tmp_path / "plugin.log") as plugin:
        await kubelet.wait_for(
            lambda: kubelet.allocatable(shared) == 6 and kubelet.allocatable(dedicated) == 2, WAIT
        )
        response = await kubelet.allocate(shared, ["wq-user-shared-wq1.1-0", "wq-user-shared-wq1.1-2"])
        assert [(d.host_path, d.container_path) for d in response.devices] == [
            (f"{root}/dev/dsa/wq1.1", f"{root}/dev/dsa/wq1.1"),
            (f"{root}/dev/char/238:65", f"{root}/dev/char/238:65"),
        ]
        # A broken udev link makes that queue Unhealthy; the others keep being served.
        tree.remove("/dev/char/238:0")
        await kubelet.wait_for(lambda: kubelet.allocatable(dedicated) == 1, WAIT)
        assert kubelet.resources()[dedicated]["wq-user-dedicated-wq0.0-0"].health == "Unhealthy"
        # Disabling a queue removes its IDs.
        tree.write("/sys/bus/dsa/devices/dsa1/wq1.1/state", "disabled\n")
        await kubelet.wait_for(lambda: len(kubelet.resources()[shared]) == 3, WAIT)
        assert plugin.process.returncode is None
    assert "dsa0/wq0.0" in plugin.log_text()


async def test_dsa_vfio_mode_numbers_env_per_container(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root = tmp_path / "node"
    build_node(parse_node_spec('[[dsa]]\ncount = 3\ndriver = "vfio-pci"\n'), root)
    cmd = command("intel_dsa_device_plugin", root, plugin_dir, "-driver", "vfio-pci")
    async with plugin_process(cmd, tmp_path / "plugin.log"):
        await kubelet.wait_for(lambda: kubelet.allocatable("dsa.intel.com/vfio") == 3, WAIT)
        first = await kubelet.allocate("dsa.intel.com/vfio", ["0000:11:00.0", "0000:12:00.0"])
        second = await kubelet.allocate("dsa.intel.com/vfio", ["0000:10:00.0"])
    assert dict(first.envs) == {"VFIO_BDF0": "0000:11:00.0", "VFIO_BDF1": "0000:12:00.0"}
    assert dict(second.envs) == {"VFIO_BDF0": "0000:10:00.0"}
    assert [d.container_path for d in second.devices] == [f"{root}/dev/vfio/0", f"{root}/dev/vfio/vfio"]


async def test_iaa_plugin_serves_iax_queues(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root = tmp_path / "node"
    build_node(parse_node_spec('[[dsa]]\nwqs = 1\n[[iaa]]\nwqs = 2\nwq_mode = "shared"\n'), root)
    cmd = command("intel_iaa_device_plugin", root, plugin_dir, "--shared-dev-num=2")
    async with plugin_process(cmd, tmp_path / "plugin.log"):
        await kubelet.wait_for(lambda: kubelet.allocatable("iaa.intel.com/wq-user-shared") == 4, WAIT)
        response = await kubelet.allocate("iaa.intel.com/wq-user-shared", ["wq-user-shared-wq1.0-1"])
    assert response.devices[0].container_path == f"{root}/dev/iax/wq1.0"
    assert not any(name.startswith("dsa.intel.com") for name in kubelet.resources())
