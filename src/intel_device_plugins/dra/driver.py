"""The DRA driver's runtime shell: scan, publish, serve the kubelet, and shut down cleanly.

One :class:`DraDriver` runs one profile. It scans on a worker thread (a sysfs read that blocks must
not stop the gRPC servers), as the device plugin framework does: at once when a directory the profile
watches changes or the kernel announces a device event of its subsystems, otherwise periodically as a
safety net (every ``event_rescan_interval`` while inotify covers every watched directory, every
``poll_interval`` when it cannot). A changed inventory goes to the kubelet side at once (health on
open ``NodeWatchResources`` streams; prepare reads the latest inventory) and to the slice publisher
from a task of its own, so an API server that does not answer never holds up scanning or the kubelet;
so do the Events on the node for devices turning unhealthy or recovering (:mod:`.healthevents`). A
profile's health monitor (``monitor``, e.g. xpumd's client) runs beside the scans for as long as the
driver runs; if it fails, the driver goes on without it.

Start: one scan (waited for up to the scan deadline), then the kubelet side (DRA service, then
registration), then publishing. A scan that fails or hangs keeps the previous inventory in place.
Stop (``stop`` set, e.g. by SIGTERM): the kubelet side first, so the kubelet stops calling and our
sockets are gone, then the slices are withdrawn (bounded by ``withdraw_timeout``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from intel_device_plugins.deviceplugin.cdi import remove_stale_cdi_temporaries
from intel_device_plugins.deviceplugin.inotify import DirectoryEvent, DirectoryWatcher
from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.deviceplugin.plugin import Monitors, ObservesUevents, RescansSooner
from intel_device_plugins.deviceplugin.scanworker import DeadlineScans, wait_any
from intel_device_plugins.deviceplugin.uevents import Uevent, UeventHub
from intel_device_plugins.dra import intelcheckpoint
from intel_device_plugins.dra.checkpoint import Checkpoint, CheckpointError, forget_vanished, is_volatile
from intel_device_plugins.dra.healthevents import NodeEvents, NoEvents
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.liveness import LivenessServer
from intel_device_plugins.dra.model import Inventory
from intel_device_plugins.dra.profile import DriverProfile
from intel_device_plugins.dra.publisher import SlicePublisher
from intel_device_plugins.dra.registration import DriverSockets, SocketPaths, live_sockets
from intel_device_plugins.kube.outage import OutageLog
from intel_device_plugins.kube.rest import RESOURCE_CLAIMS, RestClient

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 1.0
"""Seconds between scans while some watched directory cannot be watched."""
DEFAULT_EVENT_RESCAN_INTERVAL = 60.0
"""Seconds between safety scans while inotify and uevents announce every change."""
DEFAULT_SCAN_DEADLINE = 10.0
DEFAULT_WITHDRAW_TIMEOUT = 10.0
HOTPLUG_SETTLE_SECONDS = 0.02
"""A hot-plug creates several files in a burst; one scan after it covers the lot."""
MAX_PUBLISH_RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class DriverConfig:
    """Where the driver meets the kubelet and the container runtime, and how often it scans."""

    node_name: str
    cdi_root: Path
    registrar_dir: Path
    plugins_dir: Path
    instance_uid: str = ""
    """Makes socket names unique per instance, so an update can run the new driver beside the old."""
    poll_interval: float = DEFAULT_POLL_INTERVAL
    event_rescan_interval: float = DEFAULT_EVENT_RESCAN_INTERVAL
    scan_deadline: float = DEFAULT_SCAN_DEADLINE
    withdraw_timeout: float = DEFAULT_WITHDRAW_TIMEOUT
    uevent_dir: Path | None = None
    """Simulated nodes: uevents from datagram sockets in this directory instead of the kernel."""
    healthcheck_port: int = -1
    """TCP port of the ``grpc.health.v1`` liveness service (:mod:`.liveness`); negative: none."""


class SlicePublishing(Protocol):
    """What the driver needs of :class:`intel_device_plugins.dra.publisher.SlicePublisher`."""

    async def publish(self, inventory: Inventory) -> object: ...

    async def run(self) -> None: ...

    async def withdraw(self) -> None: ...


class KubeletSide(Protocol):
    """The kubelet-facing servers (DRA service, health stream, registration) of one driver."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def inventory_changed(self, inventory: Inventory) -> None: ...


class HealthEventing(Protocol):
    """What the driver needs of :class:`intel_device_plugins.dra.healthevents.NodeEvents`."""

    def inventory_changed(self, old: Inventory | None, new: Inventory) -> None: ...

    async def run(self) -> None: ...


@dataclass(frozen=True)
class DriverParts:
    publisher: SlicePublishing
    kubelet: KubeletSide
    events: HealthEventing = field(default_factory=NoEvents)


PartsFactory = Callable[[Callable[[], Inventory]], DriverParts]
"""Builds the publisher and the kubelet side, given how to read the driver's latest inventory."""


def same_devices(old: Inventory | None, new: Inventory) -> bool:
    """Whether publishing ``new`` would change nothing (problems are logged, never published)."""
    return (
        old is not None
        and old.devices == new.devices
        and old.counter_sets == new.counter_sets
        and old.health_taints == new.health_taints
    )


class DraDriver:
    """Runs one driver profile until ``stop`` is set."""

    def __init__(
        self,
        profile: DriverProfile,
        config: DriverConfig,
        build_parts: PartsFactory,
        uevents: UeventHub | None = None,
    ) -> None:
        self.profile = profile
        self.config = config
        self._build_parts = build_parts
        self._uevents = uevents
        self._inventory: Inventory | None = None
        self._rescan = asyncio.Event()
        self._dirty = asyncio.Event()
        self._watcher = DirectoryWatcher(self._on_directory_event)
        self._scans: DeadlineScans[Inventory] = DeadlineScans(
            profile.scan, profile.driver_name, config.scan_deadline, self._rescan.set
        )
        self.parts: DriverParts | None = None

    @property
    def inventory(self) -> Inventory:
        """The latest inventory a scan returned; empty before the first one."""
        return self._inventory if self._inventory is not None else Inventory()

    # ----- events --------------------------------------------------------------------------------

    def _on_directory_event(self, event: DirectoryEvent) -> None:
        self._rescan.set()

    def _on_uevent(self, event: Uevent | None) -> None:
        if isinstance(self.profile, ObservesUevents):
            try:
                self.profile.observe_uevent(event)
            except Exception:
                log.exception("%s: observing a uevent failed", self.profile.driver_name)
        self._rescan.set()

    def _ensure_watches(self) -> None:
        """(Re-)add watches: a directory that appears later (a driver loaded) is picked up."""
        if self._watcher.active:
            for directory in self.profile.watch_paths():
                if not self._watcher.watching(directory):
                    self._watcher.watch(directory)

    def rescan_interval(self) -> float:
        """Seconds until the next scan when no event arrives."""
        watched = self._watcher.active and all(
            self._watcher.watching(directory) for directory in self.profile.watch_paths()
        )
        interval = self.config.event_rescan_interval if watched else self.config.poll_interval
        if isinstance(self.profile, RescansSooner):
            interval = min(interval, self.profile.safety_rescan_interval())
        return interval

    # ----- scanning ------------------------------------------------------------------------------

    @property
    def scans(self) -> int:
        """Scans started (observability and tests)."""
        return self._scans.started

    async def scan_once(self, stop: asyncio.Event) -> Inventory | None:
        """One scan on the worker thread, waited for until the deadline (or ``stop``); ``None`` when it
        failed, missed the deadline or ``stop`` was set (see :class:`DeadlineScans`)."""
        return await self._scans.next(stop, self.rescan_interval())

    def apply(self, inventory: Inventory) -> bool:
        """Take a scan's inventory; ``True`` when its devices changed (then health and slices follow)."""
        if same_devices(self._inventory, inventory):
            return False
        old = self._inventory
        first = old is None
        self._inventory = inventory
        log.info(
            "%s: %s %d devices (%d unhealthy)",
            self.profile.driver_name,
            "found" if first else "devices changed, now",
            len(inventory.devices),
            sum(1 for device in inventory.devices if device.health is not Health.HEALTHY),
        )
        if self.parts is not None:
            self.parts.kubelet.inventory_changed(inventory)
            self.parts.events.inventory_changed(old, inventory)
        self._dirty.set()
        return True

    # ----- publishing ----------------------------------------------------------------------------

    async def _publish_loop(self, publisher: SlicePublishing) -> None:
        """Publish the latest inventory whenever it changed; on an API error, retry with back-off.

        A refused inventory (``SliceError``, a ``ValueError``) is not retried: the next scan that
        changes the devices is.
        """
        failures = 0
        outage = OutageLog(f"{self.profile.driver_name}: publishing ResourceSlices", log)
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            inventory = self._inventory
            if inventory is None:
                continue
            try:
                await publisher.publish(inventory)
                failures = 0
                outage.succeeded()
            except asyncio.CancelledError:
                raise
            except ValueError as error:
                log.error("%s: devices not published: %s", self.profile.driver_name, error)
            except Exception as error:
                failures += 1
                delay = min(MAX_PUBLISH_RETRY_SECONDS, 0.5 * 2 ** min(failures, 10))
                outage.failed(error, delay)  # logged when it starts, each minute, and when it ends
                # A newer inventory does not cut the back-off short: the API is what failed.
                await asyncio.sleep(delay)
                self._dirty.set()

    # ----- health monitor ------------------------------------------------------------------------

    async def _monitor(self) -> None:
        """The profile's health monitor (e.g. xpumd's stream); whatever becomes of it, the driver goes on
        scanning and serving (the devices it spoke for turn ``Unknown``)."""
        assert isinstance(self.profile, Monitors)
        try:
            await self.profile.monitor(self._rescan.set)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: the health monitor failed; serving without it", self.profile.driver_name)

    # ----- running -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Scan, serve and publish until ``stop`` is set; then unregister and withdraw the slices."""
        remove_stale_cdi_temporaries(self.config.cdi_root)
        if not self._watcher.start():
            log.info("no inotify: scanning every %.1f s", self.config.poll_interval)
        subsystems = frozenset(self.profile.uevent_subsystems())
        unsubscribe = None
        if self._uevents is not None and subsystems:
            unsubscribe = self._uevents.subscribe(subsystems, self._on_uevent)
        tasks: list[asyncio.Task[None]] = []
        monitor = (
            asyncio.create_task(self._monitor(), name="health monitor")
            if isinstance(self.profile, Monitors)
            else None
        )
        started = False
        try:
            self._ensure_watches()
            first = await self.scan_once(stop)
            if first is not None:
                self.apply(first)
            if stop.is_set():
                return
            self.parts = self._build_parts(lambda: self.inventory)
            await self.parts.kubelet.start()
            started = True
            tasks = [
                asyncio.create_task(self._publish_loop(self.parts.publisher), name="publish slices"),
                asyncio.create_task(_logged(self.parts.publisher.run(), "follow slices"), name="follow"),
                asyncio.create_task(_logged(self.parts.events.run(), "health Events"), name="events"),
            ]
            if self._inventory is not None:
                self.parts.events.inventory_changed(None, self._inventory)
                self._dirty.set()
            await self._scan_loop(stop)
        finally:
            if monitor is not None:
                monitor.cancel()
                await asyncio.gather(monitor, return_exceptions=True)
            if unsubscribe is not None:
                unsubscribe()
            self._watcher.close()
            self._scans.close()
            await self._shut_down(tasks, started)

    async def _scan_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not self._scans.busy:  # stuck: wait for that scan (in scan_once) rather than the timer
                await wait_any(stop, self._rescan, timeout=self.rescan_interval())
                if stop.is_set():
                    return
                if self._rescan.is_set():
                    await asyncio.sleep(HOTPLUG_SETTLE_SECONDS)
            self._rescan.clear()
            self._ensure_watches()
            inventory = await self.scan_once(stop)
            if inventory is not None:
                self.apply(inventory)

    async def _shut_down(self, tasks: list[asyncio.Task[None]], started: bool) -> None:
        """Unregister, stop publishing, withdraw. A driver that never started its servers published
        nothing, so it leaves the slices alone (they may be a running instance's)."""
        parts = self.parts
        if parts is None or not started:
            return
        try:
            await parts.kubelet.stop()
        except Exception:
            log.exception("%s: stopping the kubelet servers failed", self.profile.driver_name)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        successors = await asyncio.to_thread(live_sockets, self.config.plugins_dir, self.profile.driver_name)
        if successors:
            log.info(
                "%s: another instance serves node %s (%s); its ResourceSlices stay",
                self.profile.driver_name,
                self.config.node_name,
                successors[0],
            )
            return
        try:
            await asyncio.wait_for(parts.publisher.withdraw(), self.config.withdraw_timeout)
            log.info(
                "%s: ResourceSlices of node %s withdrawn", self.profile.driver_name, self.config.node_name
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # includes the timeout: the garbage collector removes them with the node
            log.warning(
                "%s: could not withdraw the ResourceSlices of node %s: %r",
                self.profile.driver_name,
                self.config.node_name,
                error,
            )


async def _logged(work: Awaitable[None], what: str) -> None:
    """Run a background coroutine; an error ends it with a log line rather than silently."""
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s failed", what)


# ----- the real parts ----------------------------------------------------------------------------


class KubeletEndpoint:
    """The kubelet service and its two sockets (DRA service, then registration) as one part."""

    def __init__(self, service: KubeletService, sockets: DriverSockets) -> None:
        self.service = service
        self.sockets = sockets

    async def start(self) -> None:
        await self.sockets.start()
        log.info(
            "%s: serving %s, registered through %s",
            self.service.driver,
            self.sockets.paths.plugin,
            self.sockets.paths.registrar,
        )

    async def stop(self) -> None:
        await self.sockets.stop()

    def inventory_changed(self, inventory: Inventory) -> None:
        self.service.inventory_changed(inventory)


def api_parts(profile: DriverProfile, config: DriverConfig, client: RestClient) -> PartsFactory:
    """The production parts: a :class:`SlicePublisher` and the kubelet service with its sockets.

    Socket paths are checked here, before anything starts (``RegistrationError`` names the value).
    """
    driver = profile.driver_name
    paths = SocketPaths.for_instance(config.registrar_dir, config.plugins_dir, driver, config.instance_uid)

    async def get_claim(namespace: str, name: str) -> Mapping[str, Any]:
        return await client.get(RESOURCE_CLAIMS, name, namespace=namespace)

    def build(inventory: Callable[[], Inventory]) -> DriverParts:
        checkpoint = Checkpoint.for_driver(
            config.plugins_dir, driver, sync_appends=not is_volatile(config.cdi_root)
        )
        # A node moving from Intel's DRA driver of the same name: its prepared claims become ours.
        intelcheckpoint.take_over(config.plugins_dir, driver, checkpoint)
        try:
            checkpoint.update(lambda claims: forget_vanished(claims, config.cdi_root))
        except CheckpointError as error:
            # Serving still beats exiting: unprepare works by spec file name, and each prepare
            # answers with this error, naming the path, until the file can be written.
            log.error("%s: %s; every prepare fails until it can be written", driver, error)
        service = KubeletService(profile, inventory, get_claim, config.node_name, checkpoint, config.cdi_root)
        return DriverParts(
            publisher=SlicePublisher(client, driver, config.node_name),
            kubelet=KubeletEndpoint(service, DriverSockets(paths, driver, service.handlers())),
            events=NodeEvents(client, driver, config.node_name),
        )

    return build


async def serve_driver(profile: DriverProfile, config: DriverConfig, client: RestClient) -> None:
    """Run one driver until SIGTERM or SIGINT, then unregister, withdraw the slices and return."""
    await serve_drivers((profile,), config, client)


class DriverFailed(Exception):
    """One driver of a process could not run; names it, as the others' names say nothing."""

    def __init__(self, driver: str, error: Exception) -> None:
        super().__init__(f"{driver} cannot run: {error}")
        self.driver = driver


async def _run_until_failure(driver: DraDriver, stop: asyncio.Event) -> None:
    """One driver of several: if it fails, the others stop too (cleanly), so the process exits."""
    try:
        await driver.run(stop)
    except BaseException:
        stop.set()
        raise


async def serve_drivers(profiles: Sequence[DriverProfile], config: DriverConfig, client: RestClient) -> None:
    """Run several drivers (distinct names) on one event loop until SIGTERM or SIGINT.

    They share the API client and one uevent source; each has its own scan worker, publisher,
    registration and kubelet service, exactly as when it runs alone. A driver whose servers cannot
    start stops all, and its error is raised after every other driver has shut down.
    """
    names = [profile.driver_name for profile in profiles]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"drivers must be given once each and at least one: {', '.join(names) or 'none'}")
    builds = [api_parts(profile, config, client) for profile in profiles]
    liveness = LivenessServer(
        config.healthcheck_port,
        [
            SocketPaths.for_instance(config.registrar_dir, config.plugins_dir, name, config.instance_uid)
            for name in names
        ],
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    wants_uevents = any(profile.uevent_subsystems() for profile in profiles)
    hub = UeventHub.for_directory(config.uevent_dir) if wants_uevents else None
    if hub is not None and not hub.start():
        log.info("%s: no kernel device events; scans follow inotify and the timer", ", ".join(names))
    try:
        await liveness.start()
        drivers = [
            DraDriver(profile, config, build, hub) for profile, build in zip(profiles, builds, strict=True)
        ]
        results = await asyncio.gather(
            *(_run_until_failure(driver, stop) for driver in drivers), return_exceptions=True
        )
        for driver, result in zip(drivers, results, strict=True):
            if isinstance(result, Exception):
                raise DriverFailed(driver.profile.driver_name, result) from result
            if isinstance(result, BaseException):
                raise result
    finally:
        await liveness.stop()
        if hub is not None:
            hub.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
