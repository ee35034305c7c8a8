"""Fixtures shared by every test folder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.deviceplugin.manager import PluginManager
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.server import FrameworkConfig
from intel_device_plugins.deviceplugin.uevents import DirectoryUevents, Uevent, UeventHub
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.uevents import UeventBroadcaster

# Control plane, kwok nodes and the kubelet's real device manager, for any test folder.
pytest_plugins = ["k8stest.pytest_plugin"]

TESTS = Path(__file__).resolve().parent
# Fixtures that stand for something built by test/k8s/build.sh, test/node/build.sh, tools/helm/build.sh
# or make images, and the folders whose every test needs one of them.
BUILT_FIXTURES = frozenset({"k8s_binaries", "node_binaries", "node_images", "built", "helm", "kubectl"})
BUILT_FOLDERS = (TESTS / "k8s", TESTS / "node", TESTS / "images")
# Modules that render the manifests with the built kubectl for most of their tests.
BUILT_MODULES = (
    TESTS / "operator" / "test_operator_deploy.py",
    TESTS / "webhooks" / "test_webhooks_deploy.py",
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_build: needs Kubernetes, the node, helm or the images built (make test, not make unit)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what ``make unit`` leaves out: a test using a built thing, directly or through a fixture."""
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        built_place = item.path in BUILT_MODULES or any(item.path.is_relative_to(f) for f in BUILT_FOLDERS)
        if uses & BUILT_FIXTURES or built_place:
            item.add_marker(pytest.mark.needs_build)


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


# ----- plugins that learn of changes only through kernel events ----------------------------------


@dataclass
class WithoutInotify:
    """The plugin's scan and uevent subsystems, but no watched directories.

    Stands for a node where inotify reports nothing (``/sys`` never does; ``/dev`` may be another
    mount): whatever the plugin then learns between its 60 s safety rescans came by uevent.
    """

    plugin: Any

    @property
    def namespace(self) -> str:
        return str(self.plugin.namespace)

    def scan(self) -> DeviceTree:
        tree: DeviceTree = self.plugin.scan()
        return tree

    def uevent_subsystems(self) -> Collection[str]:
        subsystems: Collection[str] = self.plugin.uevent_subsystems()
        return subsystems

    def safety_rescan_interval(self) -> float:
        interval = getattr(self.plugin, "safety_rescan_interval", None)
        return float(interval()) if interval is not None else 60.0

    def observe_uevent(self, event: Uevent | None) -> None:
        observe = getattr(self.plugin, "observe_uevent", None)
        if observe is not None:
            observe(event)


@pytest.fixture
def only_uevents(kubelet: KubeletStandIn, plugin_dir: Path, tmp_path: Path) -> Callable[[Any, FakeTree], Any]:
    """``async with only_uevents(plugin, tree) as manager``: the plugin served with polling off and
    inotify blind, and the simulated node announcing its changes to it as the kernel would.
    ``rescan_interval``: the safety rescan the plugin is expected to ask for (60 s unless sooner)."""

    @asynccontextmanager
    async def run(plugin: Any, tree: FakeTree, rescan_interval: float = 60) -> AsyncIterator[PluginManager]:
        directory = tmp_path / "uevents"
        tree.uevents = UeventBroadcaster(directory)
        hub = UeventHub(DirectoryUevents(directory))
        assert hub.start()
        config = FrameworkConfig(plugin_dir, tmp_path / "cdi", scan_interval=60, event_rescan_interval=60)
        manager = PluginManager(WithoutInotify(plugin), config, hub)
        stop = asyncio.Event()
        task = asyncio.create_task(manager.run(stop))
        try:
            for _ in range(500):  # the first scan, which needs no event
                if manager.scans >= 1 and not manager.scan_stuck:
                    break
                await asyncio.sleep(0.02)
            assert manager.rescan_interval() == rescan_interval
            yield manager
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            hub.close()
            tree.uevents.close()
            tree.uevents = None

    return run
