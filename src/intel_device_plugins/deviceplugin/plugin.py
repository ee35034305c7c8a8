"""What a device plugin is: a scanner plus a few optional hooks.

The framework detects the hooks by their presence (structural typing), so a plugin implements only
what it needs. All hooks but ``monitor`` are plain synchronous functions over typed data; none sees
gRPC.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from intel_device_plugins.deviceplugin.model import ContainerAllocation, DeviceMap, DeviceTree
from intel_device_plugins.deviceplugin.uevents import Uevent


@runtime_checkable
class Scanner(Protocol):
    """The one mandatory part of a plugin.

    ``scan`` is called periodically and whenever a watched path changes; it returns the complete
    current tree. It runs on a worker thread of its own (one per plugin, never two scans at once),
    while the hooks below run on the event loop: state a hook reads must not be left half-updated by
    a scan. It should not raise for a single bad device: report that device Unhealthy or leave it
    out, and log why. If it raises anyway, the framework logs the error and keeps serving the
    previous tree; if it hangs, the framework reports where and keeps serving the previous tree.
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
class EventDriven(Protocol):
    """Optional: every change the plugin cares about shows up as an event.

    The plugin declares that its devices change only together with a kernel uevent of one of these
    subsystems (e.g. ``drm``, ``pci``) or an entry in one of its ``watch_paths``. The framework then
    rescans on those events and otherwise only as a slow safety net (``event_rescan_interval``,
    60 s unless ``-scan-interval`` is given), instead of polling.
    """

    def uevent_subsystems(self) -> Collection[str]: ...


@runtime_checkable
class RescansSooner(Protocol):
    """Optional, with :class:`EventDriven`: a safety rescan more often than every 60 s.

    For a plugin that reads some state no event announces (e.g. a health counter in debugfs): the
    interval says how stale that state may get. Events still trigger rescans at once.
    """

    def safety_rescan_interval(self) -> float: ...


@runtime_checkable
class ObservesUevents(Protocol):
    """Optional, with :class:`EventDriven`: sees each uevent of its subsystems before the rescan it
    triggers (``None`` when events were lost), for what an event says and no file keeps (a GPU's
    ``WEDGED``). Runs on the event loop; it must be quick and must not raise."""

    def observe_uevent(self, event: Uevent | None) -> None: ...


@runtime_checkable
class Monitors(Protocol):
    """Optional: a watch that runs beside the scans while the plugin is served (e.g. a health daemon's
    stream, whose findings the next scan reads).

    ``monitor`` runs on the event loop until cancelled and calls ``changed()`` when the next scan would
    differ, for a rescan at once. Should it return or raise, the plugin goes on being served without it.
    """

    async def monitor(self, changed: Callable[[], None]) -> None: ...


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
