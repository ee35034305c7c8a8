"""The DSA and IAA plugins learn of queue and device changes from kernel events, not by polling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.plugins.idxd.discovery import DSA, IAA
from intel_device_plugins.plugins.idxd.plugin import DsaVfioPlugin, WorkQueuePlugin
from intel_device_plugins.sim import idxd
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec

pytestmark = pytest.mark.integration

DEDICATED = "dsa.intel.com/wq-user-dedicated"
IAA_SHARED = "iaa.intel.com/wq-user-shared"


async def test_queues_enabled_disabled_and_added_are_seen_through_uevents(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = build_node(parse_node_spec("[[dsa]]\nwqs = 2\n"), tmp_path / "node")
    async with only_uevents(WorkQueuePlugin(DSA, str(tree.root)), tree) as manager:
        await kubelet.wait_for(lambda: kubelet.allocatable(DEDICATED) == 2)
        dsa0 = idxd.SimulatedAccelerator("dsa0", "", tree.sysfs_of("0000:10:00.0") + "/dsa0")
        idxd.disable_work_queue(tree, dsa0, "dsa", "wq0.1")
        await kubelet.wait_for(lambda: len(kubelet.resources()[DEDICATED]) == 1, timeout=5)
        assert manager.uevents_seen > 0
        idxd.enable_work_queue(tree, dsa0, "dsa", "wq0.1")
        await kubelet.wait_for(lambda: kubelet.allocatable(DEDICATED) == 2, timeout=5)
        added = idxd.add_accelerator(tree, "dsa")
        idxd.add_work_queue(tree, added, "dsa", 0)
        await kubelet.wait_for(lambda: kubelet.allocatable(DEDICATED) == 3, timeout=5)


async def test_iaa_queues_are_seen_through_uevents(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = build_node(parse_node_spec('[[iaa]]\nwqs = 1\nwq_mode = "shared"\n'), tmp_path / "node")
    async with only_uevents(WorkQueuePlugin(IAA, str(tree.root)), tree):
        await kubelet.wait_for(lambda: kubelet.allocatable(IAA_SHARED) == 1)
        added = idxd.add_accelerator(tree, "iax")
        idxd.add_work_queue(tree, added, "iax", 0, mode="shared")
        await kubelet.wait_for(lambda: kubelet.allocatable(IAA_SHARED) == 2, timeout=5)


async def test_functions_bound_to_vfio_are_seen_through_uevents(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = build_node(parse_node_spec('[[dsa]]\ndriver = "vfio-pci"\n'), tmp_path / "node")
    async with only_uevents(DsaVfioPlugin(str(tree.root)), tree):
        await kubelet.wait_for(lambda: kubelet.allocatable("dsa.intel.com/vfio") == 1)
        idxd.add_accelerator(tree, "dsa", driver="vfio-pci")
        await kubelet.wait_for(lambda: kubelet.allocatable("dsa.intel.com/vfio") == 2, timeout=5)
