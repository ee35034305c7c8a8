"""The demo as ``make demo`` runs it: the shipped scenario plus the test tier's kubelets and nodes.

``python -m k8stest.demo`` is ``intel-device-plugins-demo`` with two more backends, which need this source
tree: the kubelet's own device manager (``--kubelet device-manager``, chosen by ``auto`` when it is built
and usable) and the real kubelet node (``--node-runtime real``, ``k8stest/demo_real.py``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from intel_device_plugins.sim.demo import DemoBackends
from intel_device_plugins.sim.demo import main as demo_main
from intel_device_plugins.sim.kubelet import AdvertisedDevice
from intel_device_plugins.sim.kubelets import ContainerView
from k8stest.binaries import find_binaries
from k8stest.demo_real import run_real_demo
from k8stest.devicemanager import DeviceManagerHarness, pod_manifest


class DeviceManagerKubelet:
    """The kubelet's real device manager (``pkg/kubelet/cm/devicemanager``) in the Go harness."""

    description = "the kubelet's own device manager (Kubernetes code, built by test/k8s/build.sh)"

    def __init__(self, harness: DeviceManagerHarness) -> None:
        self._harness = harness

    @classmethod
    async def start(cls, device_plugin_dir: Path, workdir: Path) -> DeviceManagerKubelet:
        bins, reason = find_binaries()
        if bins is None:
            raise RuntimeError(reason)
        harness = DeviceManagerHarness(bins, workdir / "device-manager", device_plugin_dir)
        await asyncio.to_thread(harness.start)
        return cls(harness)

    def resources(self) -> dict[str, dict[str, AdvertisedDevice]]:
        return {
            name: {d.id: AdvertisedDevice(d.id, d.health, d.numa) for d in resource.devices}
            for name, resource in self._harness.resources().items()
        }

    def listed(self) -> set[str]:
        # The device manager shows a registered resource before its first answer, with no devices; an
        # answer with no devices cannot be told apart from that.
        return {name for name, resource in self._harness.resources().items() if resource.devices}

    def allocatable(self, resource: str) -> int:
        found = self._harness.resources().get(resource)
        return found.allocatable if found else 0

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError
            await asyncio.sleep(0.05)

    async def run_container(self, resource: str, count: int) -> ContainerView:
        pod = pod_manifest({resource: count})
        options = (await asyncio.to_thread(self._harness.admit, pod))["ctr"]
        return ContainerView(
            devices=tuple((d.host_path, d.container_path, d.permissions) for d in options.devices),
            mounts=tuple((m.host_path, m.container_path, m.read_only) for m in options.mounts),
            envs=dict(options.envs),
            cdi_devices=options.cdi_devices,
        )

    async def stop(self) -> None:
        await asyncio.to_thread(self._harness.stop)


def device_manager_available() -> tuple[bool, str]:
    """Whether the real device manager can run here, and if not, why."""
    bins, reason = find_binaries()
    if bins is None:
        return False, reason
    if os.geteuid() != 0:
        return False, "the device-manager harness needs root (it uses a private mount namespace)"
    return True, ""


BACKENDS = DemoBackends(DeviceManagerKubelet.start, device_manager_available, run_real_demo)


def main(argv: Sequence[str] | None = None) -> int:
    return demo_main(argv, BACKENDS)


if __name__ == "__main__":
    sys.exit(main())
