"""What a device plugin is: a scanner plus a few optional hooks.

The framework detects the hooks by their presence (structural typing), so a plugin implements only
what it needs. All hooks are plain synchronous functions over typed data; they never see gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from intel_device_plugins.deviceplugin.model import ContainerAllocation, DeviceMap, DeviceTree


@runtime_checkable
class Scanner(Protocol):
    """The one mandatory part of a plugin.

    ``scan`` is called periodically and whenever a watched path changes; it returns the complete
    current tree. It must be quick (it runs on the event loop) and should not raise for a single
    bad device: report that device Unhealthy or leave it out, and log why. If it raises anyway, the
    framework logs the error and keeps serving the previous tree.
    """

    @property
    def namespace(self) -> str:
        """Resource namespace, e.g. ``gpu.intel.com``."""
        ...

    def scan(self) -> DeviceTree: ...


@runtime_checkable
class WatchesPaths(Protocol):
    """Optional: directories whose changes should trigger an immediate rescan (hot-plug)."""

    def watch_paths(self) -> Sequence[Path]: ...


@runtime_checkable
class PreferredAllocator(Protocol):
    """Optional: answers GetPreferredAllocation. Advertised to the kubelet when present."""

    def preferred_allocation(
        self,
        resource: str,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
    ) -> Sequence[str]: ...


@runtime_checkable
class Allocator(Protocol):
    """Optional: replaces the default allocation. Return ``None`` to use the default."""

    def allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str]
    ) -> ContainerAllocation | None: ...


@runtime_checkable
class PostAllocator(Protocol):
    """Optional: adjusts one container's default allocation (e.g. renumbering env variables)."""

    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation: ...


@runtime_checkable
class PreStarter(Protocol):
    """Optional: runs before each container start; advertised as ``pre_start_required``."""

    def pre_start(self, resource: str, ids: Sequence[str]) -> None: ...
