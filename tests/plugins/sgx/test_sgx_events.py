"""The SGX plugin learns that its device nodes appear or vanish from kernel events, not by polling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.plugins.sgx.discovery import SgxLimits
from intel_device_plugins.plugins.sgx.plugin import SgxPlugin
from intel_device_plugins.sim import sgx
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn

pytestmark = pytest.mark.integration

ENCLAVE, PROVISION = "sgx.intel.com/enclave", "sgx.intel.com/provision"


async def test_driver_nodes_coming_and_going_are_seen_through_uevents(
    tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = FakeTree(tmp_path / "node")
    tree.mkdir("/dev")
    plugin = SgxPlugin(SgxLimits(enclave=3, provision=2), prefix=str(tree.root))
    async with only_uevents(plugin, tree) as manager:
        await kubelet.wait_for(lambda: ENCLAVE in kubelet.resources() and kubelet.allocatable(ENCLAVE) == 0)
        sgx.add_node(tree, "sgx_enclave")
        sgx.add_node(tree, "sgx_provision")
        await kubelet.wait_for(
            lambda: kubelet.allocatable(ENCLAVE) == 3 and kubelet.allocatable(PROVISION) == 2, timeout=5
        )
        assert manager.uevents_seen > 0
        sgx.remove_node(tree, "sgx_provision")
        await kubelet.wait_for(lambda: kubelet.allocatable(ENCLAVE) == 0, timeout=5)


def test_the_device_directory_is_watched(tmp_path: Path) -> None:
    plugin = SgxPlugin(SgxLimits(enclave=1, provision=1), prefix=str(tmp_path))
    assert plugin.watch_paths() == (tmp_path / "dev",)
