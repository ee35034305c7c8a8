"""The QAT plugin learns of PFs, VFs and their drivers from kernel events, and of health by rescans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.plugins.qat.discovery import DpdkConfig, QatPaths
from intel_device_plugins.plugins.qat.plugin import HEALTH_RESCAN_INTERVAL, QatDpdkPlugin
from intel_device_plugins.sim import qat
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec

pytestmark = pytest.mark.integration

CY = "qat.intel.com/cy"


def plugin_for(root: Path, tree: Any, health_rescan_interval: float) -> QatDpdkPlugin:
    return QatDpdkPlugin(
        QatPaths(root),
        DpdkConfig(),
        binder=qat.FakeTreeBinder(tree),
        health_rescan_interval=health_rescan_interval,
    )


async def test_new_vfs_and_their_binding_are_seen_through_uevents(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = build_node(parse_node_spec('[[qat]]\nvfs = 2\nvf_driver = ""\n'), tmp_path / "node")
    qat.load_driver(tree, "vfio-pci")
    async with only_uevents(plugin_for(tree.root, tree, 60), tree) as manager:
        await kubelet.wait_for(lambda: kubelet.allocatable(CY) == 2)  # the plugin bound them itself
        added = qat.add_pf(tree, vfs=3, vf_driver="")  # sriov_numvfs written: the VFs appear unbound
        await kubelet.wait_for(lambda: kubelet.allocatable(CY) == 5, timeout=5)
        assert manager.uevents_seen > 0
        qat.remove_vfs(tree, added)
        await kubelet.wait_for(lambda: kubelet.allocatable(CY) == 2, timeout=5)
        assert not set(added.vfs) & set(kubelet.resources()[CY])


async def test_heartbeat_failures_are_seen_by_the_faster_safety_rescan(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    assert QatDpdkPlugin(QatPaths(tmp_path), DpdkConfig()).safety_rescan_interval() == HEALTH_RESCAN_INTERVAL
    tree = build_node(parse_node_spec("[[qat]]\nvfs = 2\n"), tmp_path / "node")
    plugin = plugin_for(tree.root, tree, 0.3)
    async with only_uevents(plugin, tree, rescan_interval=0.3):
        await kubelet.wait_for(lambda: kubelet.allocatable(CY) == 2)
        [status] = tree.path("/sys/kernel/debug").glob("qat_*/heartbeat/status")
        status.write_text("-1\n")  # no uevent for this
        await kubelet.wait_for(lambda: kubelet.allocatable(CY) == 0, timeout=5)
