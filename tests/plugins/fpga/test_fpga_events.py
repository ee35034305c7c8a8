"""The FPGA plugin learns of cards coming and going from kernel events, of reprogrammed ports by rescans."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.plugins.fpga.discovery import Mode, af_resource_name
from intel_device_plugins.plugins.fpga.plugin import FpgaPlugin
from intel_device_plugins.sim import fpga
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn

pytestmark = pytest.mark.integration

NLB0 = "fpga.intel.com/" + af_resource_name(fpga.ARRIA10_INTERFACE, fpga.NLB0_AFU)
REGION = f"fpga.intel.com/region-{fpga.ARRIA10_INTERFACE}"


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    """A short directory: FPGA resource names are long, and a socket path has at most 107 bytes."""
    directory = Path(tempfile.mkdtemp(prefix="fpga-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("driver", [fpga.DFL, fpga.OPAE])
async def test_cards_coming_and_going_are_seen_through_uevents(
    driver: str, tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = FakeTree(tmp_path / "node")
    fpga.add_fpga(tree, driver=driver)
    async with only_uevents(FpgaPlugin(str(tree.root), Mode.REGION), tree) as manager:
        await kubelet.wait_for(lambda: kubelet.allocatable(REGION) == 1)
        card = fpga.add_fpga(tree, driver=driver, ports=2)
        await kubelet.wait_for(lambda: kubelet.allocatable(REGION) == 2, timeout=5)
        assert manager.uevents_seen > 0
        fpga.remove_fpga(tree, card)
        await kubelet.wait_for(lambda: kubelet.allocatable(REGION) == 1, timeout=5)


async def test_af_mode_sees_a_reprogrammed_port_by_its_faster_rescan(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = FakeTree(tmp_path / "node")
    card = fpga.add_fpga(tree, ports=2)
    plugin = FpgaPlugin(str(tree.root), Mode.AF)
    async with only_uevents(plugin, tree, rescan_interval=plugin.safety_rescan_interval()):
        await kubelet.wait_for(lambda: kubelet.allocatable(NLB0) == 2)
        fpga.set_afu_id(tree, card.ports[0].name, fpga.NLB3_AFU)  # no uevent for this
        await kubelet.wait_for(lambda: kubelet.allocatable(NLB0) == 1, timeout=10)
