"""Fixtures shared by every test folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from intel_device_plugins.sim.kubelet import KubeletStandIn

# Control plane, kwok nodes and the kubelet's real device manager, for any test folder.
pytest_plugins = ["k8stest.pytest_plugin"]


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """A device-plugin directory short enough for unix socket paths (108 bytes)."""
    directory = tmp_path / "dp"
    directory.mkdir()
    return directory


@pytest.fixture
async def kubelet(plugin_dir: Path) -> AsyncIterator[KubeletStandIn]:
    """A running kubelet stand-in serving Registration on ``plugin_dir/kubelet.sock``."""
    async with KubeletStandIn(plugin_dir) as stand_in:
        yield stand_in
