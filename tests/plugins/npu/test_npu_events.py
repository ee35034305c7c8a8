"""The NPU plugin learns of hot-plugs from kernel events, not by polling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.plugins.npu.plugin import NpuPlugin
from intel_device_plugins.sim import npu
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec

pytestmark = pytest.mark.integration

RESOURCE = "npu.intel.com/accel"


async def test_hotplug_and_removal_are_seen_through_uevents(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = build_node(parse_node_spec("[[npu]]\ncount = 1\n"), tmp_path / "node")
    async with only_uevents(NpuPlugin(str(tree.root)), tree) as manager:
        await kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 1)
        added = npu.add_npu(tree)
        await kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 2, timeout=5)
        assert manager.uevents_seen > 0
        npu.remove_npu(tree, added.name)
        await kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 1, timeout=5)
        assert set(kubelet.resources()[RESOURCE]) == {"accel0-0"}
