"""The kubelets the demo can run against, behind one small interface.

- the built-in stand-in (``sim/kubelet.py``), here: always available, no privileges;
- the kubelet's own device manager from Kubernetes, built by ``test/k8s/build.sh`` and run in a
  private mount namespace (needs root): in the test tier (``k8stest/demo.py``), which does not ship.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from intel_device_plugins.kubeletapi import deviceplugin_v1beta1 as pb
from intel_device_plugins.sim.kubelet import AdvertisedDevice, KubeletStandIn


@dataclass(frozen=True)
class ContainerView:
    """What a container is given: (host, container, permissions) nodes, (host, container, ro) mounts."""

    devices: tuple[tuple[str, str, str], ...]
    mounts: tuple[tuple[str, str, bool], ...]
    envs: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()
    chosen_ids: tuple[str, ...] = ()
    """The device IDs, when the kubelet tells them (the stand-in does)."""


class DemoKubelet(Protocol):
    description: str

    def resources(self) -> dict[str, dict[str, AdvertisedDevice]]: ...

    def listed(self) -> set[str]:
        """Registered resources whose first ListAndWatch answer has arrived."""
        ...

    def allocatable(self, resource: str) -> int: ...

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 5.0) -> None: ...

    async def run_container(self, resource: str, count: int) -> ContainerView: ...

    async def stop(self) -> None: ...


def _view(response: pb.ContainerAllocateResponse, ids: tuple[str, ...]) -> ContainerView:
    return ContainerView(
        devices=tuple((d.host_path, d.container_path, d.permissions) for d in response.devices),
        mounts=tuple((m.host_path, m.container_path, m.read_only) for m in response.mounts),
        envs=dict(response.envs),
        cdi_devices=tuple(c.name for c in response.cdi_devices),
        chosen_ids=ids,
    )


class StandInKubelet:
    """The built-in stand-in, choosing devices the way the kubelet does (asking the plugin first)."""

    description = "the built-in stand-in (device plugin API v1beta1 over unix sockets)"

    def __init__(self, stand_in: KubeletStandIn) -> None:
        self._stand_in = stand_in

    @classmethod
    async def start(cls, device_plugin_dir: Path) -> StandInKubelet:
        stand_in = KubeletStandIn(device_plugin_dir)
        await stand_in.start()
        return cls(stand_in)

    def resources(self) -> dict[str, dict[str, AdvertisedDevice]]:
        return self._stand_in.resources()

    def listed(self) -> set[str]:
        return self._stand_in.listed()

    def allocatable(self, resource: str) -> int:
        return self._stand_in.allocatable(resource)

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:
        await self._stand_in.wait_for(condition, timeout)

    async def run_container(self, resource: str, count: int) -> ContainerView:
        healthy = sorted(d.id for d in self.resources()[resource].values() if d.health == "Healthy")
        chosen = healthy[:count]
        if len(healthy) > count and self._stand_in.options(resource).get_preferred_allocation_available:
            chosen = await self._stand_in.preferred(resource, healthy, [], count)
        response = await self._stand_in.allocate(resource, chosen)
        return _view(response, tuple(chosen))

    async def stop(self) -> None:
        await self._stand_in.stop()
