"""The DLB plugin learns of hot-plugs from kernel events, not by polling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.plugins.dlb.plugin import DlbPlugin
from intel_device_plugins.sim import dlb
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec

pytestmark = pytest.mark.integration

NODE = """
[[dlb]]
count = 1
"""
PF, VF = "dlb.intel.com/pf", "dlb.intel.com/vf"


async def test_hotplug_and_removal_are_seen_through_uevents(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = build_node(parse_node_spec(NODE), tmp_path / "node")
    async with only_uevents(DlbPlugin(str(tree.root)), tree) as manager:
        await kubelet.wait_for(lambda: kubelet.allocatable(PF) == 1)
        added = dlb.add_dlb(tree, vfs=2)
        await kubelet.wait_for(
            lambda: kubelet.allocatable(PF) == 1 and kubelet.allocatable(VF) == 2, timeout=5
        )
        assert manager.uevents_seen > 0
        dlb.remove_dlb(tree, added.vfs[0])
        await kubelet.wait_for(lambda: kubelet.allocatable(VF) == 1, timeout=5)
