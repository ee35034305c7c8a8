"""The DRA driver's runtime shell with a scripted profile and recording stand-ins for its parts.

What is checked is the shell's own contract: when it scans, what reaches the kubelet side and the
publisher, that the API never holds up scanning, and the order of a clean shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import CdiDevice, Health
from intel_device_plugins.deviceplugin.uevents import Deliver, Uevent, UeventHub, encode_uevent
from intel_device_plugins.dra.driver import DraDriver, DriverConfig, DriverParts
from intel_device_plugins.dra.model import AllocatedDevice, Device, Inventory
from intel_device_plugins.dra.profile import default_claim_edits


class ScriptedProfile:
    """Scans return ``devices`` as it is at the time; ``fail``/``block`` make the next scans misbehave."""

    def __init__(self, watched: Path, subsystems: Collection[str] = ()) -> None:
        self.devices: tuple[Device, ...] = (Device("dev0"),)
        self.watched = watched
        self.subsystems = subsystems
        self.fail = False
        self.block = threading.Event()
        self.block.set()
        self.scans = 0

    @property
    def driver_name(self) -> str:
        return "test.example.com"

    def scan(self) -> Inventory:
        self.block.wait()
        self.scans += 1
        if self.fail:
            raise OSError("sysfs went away")
        return Inventory(devices=self.devices)

    def watch_paths(self) -> Sequence[Path]:
        return (self.watched,)

    def uevent_subsystems(self) -> Collection[str]:
        return self.subsystems

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(self.driver_name, claim_uid, allocated)


class Recorder:
    """Both parts at once, writing every call into one ordered log."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.published: list[Inventory] = []
        self.health: list[Inventory] = []
        self.publish_errors: list[Exception] = []
        self.withdraw_hangs = False
        self.start_error: Exception | None = None
        self.inventory: Callable[[], Inventory] | None = None
        self.changed = asyncio.Event()

    async def publish(self, inventory: Inventory) -> object:
        self.log.append("publish")
        if self.publish_errors:
            raise self.publish_errors.pop(0)
        self.published.append(inventory)
        self.changed.set()
        return None

    async def run(self) -> None:
        self.log.append("follow")
        await asyncio.Event().wait()

    async def withdraw(self) -> None:
        self.log.append("withdraw")
        if self.withdraw_hangs:
            await asyncio.Event().wait()

    async def start(self) -> None:
        assert self.inventory is not None
        if self.start_error is not None:
            raise self.start_error
        self.log.append(f"start with {len(self.inventory().devices)} devices")

    async def stop(self) -> None:
        self.log.append("stop")

    def inventory_changed(self, inventory: Inventory) -> None:
        self.health.append(inventory)
        self.changed.set()


def config(tmp_path: Path, **overrides: float) -> DriverConfig:
    settings: dict[str, float] = {"poll_interval": 60.0, "event_rescan_interval": 60.0, "scan_deadline": 2.0}
    settings.update(overrides)
    return DriverConfig(
        node_name="node-a",
        cdi_root=tmp_path / "cdi",
        registrar_dir=tmp_path / "registry",
        plugins_dir=tmp_path / "plugins",
        **settings,  # type: ignore[arg-type]
    )


class Running:
    def __init__(self, driver: DraDriver, recorder: Recorder) -> None:
        self.driver = driver
        self.recorder = recorder
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(driver.run(self.stop))

    async def until(self, what: str, probe: Callable[[], bool], timeout: float = 5.0) -> None:
        async def wait() -> None:
            while not probe():
                self.recorder.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.recorder.changed.wait(), 0.05)

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            pytest.fail(f"timed out waiting for {what}; calls: {self.recorder.log}")

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 5)


def start(
    tmp_path: Path, profile: ScriptedProfile, hub: UeventHub | None = None, **overrides: float
) -> Running:
    recorder = Recorder()

    def parts(inventory: Callable[[], Inventory]) -> DriverParts:
        recorder.inventory = inventory
        return DriverParts(publisher=recorder, kubelet=recorder)

    return Running(DraDriver(profile, config(tmp_path, **overrides), parts, hub), recorder)


@pytest.fixture
def watched(tmp_path: Path) -> Path:
    directory = tmp_path / "dev"
    directory.mkdir()
    return directory


async def test_first_scan_comes_before_the_kubelet_and_slices_follow(tmp_path: Path, watched: Path) -> None:
    running = start(tmp_path, ScriptedProfile(watched))

    await running.until("the first publish", lambda: bool(running.recorder.published))
    await running.finish()

    log = running.recorder.log
    assert log[0] == "start with 1 devices"
    assert {"publish", "follow"} <= set(log)
    assert log[-2:] == ["stop", "withdraw"]  # unregistered before the slices go
    assert [d.name for d in running.recorder.published[0].devices] == ["dev0"]


async def test_a_change_in_a_watched_directory_rescans_and_reaches_both_parts(
    tmp_path: Path, watched: Path
) -> None:
    profile = ScriptedProfile(watched)
    running = start(tmp_path, profile)
    await running.until("the first publish", lambda: len(running.recorder.published) == 1)

    profile.devices = (Device("dev0"), Device("dev1", health=Health.UNHEALTHY, health_message="gone"))
    (watched / "dev1").touch()

    await running.until("the second publish", lambda: len(running.recorder.published) == 2)
    await running.finish()
    assert [d.name for d in running.recorder.published[1].devices] == ["dev0", "dev1"]
    assert running.recorder.health[-1] == running.recorder.published[1]


async def test_a_uevent_of_the_profiles_subsystem_rescans(tmp_path: Path, watched: Path) -> None:
    class Source:
        deliver: Deliver | None = None

        def open(self, deliver: Deliver) -> bool:
            self.deliver = deliver
            return True

        def close(self) -> None:
            self.deliver = None

    source = Source()
    hub = UeventHub(source)
    hub.start()
    profile = ScriptedProfile(tmp_path / "missing", subsystems=("drm",))
    running = start(tmp_path, profile, hub)
    await running.until("the first publish", lambda: len(running.recorder.published) == 1)
    scans = profile.scans

    assert source.deliver is not None
    source.deliver(encode_uevent("add", "/devices/pci0000:00/0000:00:02.0", "pci"))  # not asked for
    await asyncio.sleep(0.2)
    assert profile.scans == scans
    profile.devices = ()
    source.deliver(encode_uevent("remove", "/devices/pci0000:00/0000:00:02.0/drm/card0", "drm"))

    await running.until("the empty inventory", lambda: running.recorder.published[-1].devices == ())
    await running.finish()


class MonitoringProfile(ScriptedProfile):
    """With the optional health hooks: a monitor the test drives, uevents recorded, a sooner rescan."""

    def __init__(self, watched: Path) -> None:
        super().__init__(watched, subsystems=("drm",))
        self.changed: Callable[[], None] | None = None
        self.fail_monitor = asyncio.Event()
        self.observed: list[str] = []

    async def monitor(self, changed: Callable[[], None]) -> None:
        self.changed = changed
        await self.fail_monitor.wait()
        raise RuntimeError("health daemon client broke")

    def observe_uevent(self, event: Uevent | None) -> None:
        self.observed.append(event.action if event is not None else "lost")
        if event is not None and event.action == "change":
            raise ValueError("a uevent it cannot read")

    def safety_rescan_interval(self) -> float:
        return 30.0


async def test_the_profiles_health_hooks_rescan_at_once_and_never_stop_the_driver(
    tmp_path: Path, watched: Path
) -> None:
    class Source:
        deliver: Deliver | None = None

        def open(self, deliver: Deliver) -> bool:
            self.deliver = deliver
            return True

        def close(self) -> None:
            self.deliver = None

    source = Source()
    hub = UeventHub(source)
    hub.start()
    profile = MonitoringProfile(watched)
    running = start(tmp_path, profile, hub)  # 60 s timers: only the hooks can cause the rescans below
    await running.until("the first publish", lambda: len(running.recorder.published) == 1)
    assert running.driver.rescan_interval() == 30.0

    assert profile.changed is not None
    profile.devices = (Device("dev0", health=Health.UNHEALTHY, health_message="the daemon says so"),)
    profile.changed()
    await running.until("the monitor's change", lambda: len(running.recorder.published) == 2)

    assert source.deliver is not None
    profile.devices = (Device("dev0"),)
    source.deliver(encode_uevent("change", "/devices/pci0000:00/0000:00:02.0/drm/card0", "drm"))
    await running.until("the uevent's rescan", lambda: len(running.recorder.published) == 3)
    assert profile.observed == ["change"]  # seen first; its error is logged, the rescan happens

    profile.fail_monitor.set()
    await asyncio.sleep(0.1)
    profile.devices = ()
    (watched / "gone").touch()
    await running.until("scans after the monitor failed", lambda: len(running.recorder.published) == 4)
    assert not running.task.done()
    await running.finish()


async def test_an_unchanged_inventory_is_not_published_again(tmp_path: Path, watched: Path) -> None:
    profile = ScriptedProfile(watched)
    running = start(tmp_path, profile, poll_interval=0.05, event_rescan_interval=0.05)
    await running.until("five scans", lambda: profile.scans >= 5)
    await running.finish()

    assert running.recorder.log.count("publish") == 1
    assert running.recorder.health == []  # the kubelet side read the first inventory when it started


async def test_a_failed_scan_keeps_the_previous_devices(tmp_path: Path, watched: Path) -> None:
    profile = ScriptedProfile(watched)
    running = start(tmp_path, profile, poll_interval=0.05, event_rescan_interval=0.05)
    await running.until("the first publish", lambda: len(running.recorder.published) == 1)

    profile.fail = True
    scans = profile.scans
    await running.until("two failed scans", lambda: profile.scans >= scans + 2)
    await running.finish()

    assert [d.name for d in running.driver.inventory.devices] == ["dev0"]
    assert running.recorder.log.count("publish") == 1


async def test_a_hanging_scan_does_not_hold_up_the_kubelet_side(tmp_path: Path, watched: Path) -> None:
    profile = ScriptedProfile(watched)
    profile.block.clear()
    running = start(tmp_path, profile, scan_deadline=0.1)

    await running.until("the kubelet side", lambda: bool(running.recorder.log))
    assert running.recorder.log[0] == "start with 0 devices"
    assert running.recorder.published == []

    profile.block.set()  # long before the 60 s timer: the driver waits for the stuck scan itself

    await running.until("the devices once the scan returns", lambda: bool(running.recorder.published))
    await running.finish()
    assert [d.name for d in running.driver.inventory.devices] == ["dev0"]


async def test_an_api_error_is_retried_and_a_refused_inventory_is_not(tmp_path: Path, watched: Path) -> None:
    profile = ScriptedProfile(watched)
    recorder_errors: list[Exception] = [ConnectionError("API server down")]
    running = start(tmp_path, profile)
    running.recorder.publish_errors = recorder_errors

    await running.until("the retried publish", lambda: len(running.recorder.published) == 1, timeout=5)
    assert running.recorder.log.count("publish") == 2

    running.recorder.publish_errors = [ValueError("device dev1: 40 attributes, at most 32")]
    profile.devices = (Device("dev1"),)
    (watched / "again").touch()
    await running.until("the refused publish", lambda: running.recorder.log.count("publish") == 3)
    await asyncio.sleep(1.0)  # longer than the first back-off: no retry comes
    await running.finish()
    assert running.recorder.log.count("publish") == 3


async def test_an_outage_while_publishing_is_logged_when_it_starts_and_ends(
    tmp_path: Path, watched: Path, caplog: pytest.LogCaptureFixture
) -> None:
    running = start(tmp_path, ScriptedProfile(watched))
    running.recorder.publish_errors = [ConnectionError("API server down"), ConnectionError("API server down")]
    with caplog.at_level(logging.INFO, logger="intel_device_plugins.dra.driver"):
        await running.until(
            "the publish after the outage", lambda: bool(running.recorder.published), timeout=10
        )
        await running.finish()
    lines = [r.getMessage() for r in caplog.records if "publishing ResourceSlices" in r.getMessage()]
    assert running.recorder.log.count("publish") == 3
    assert len(lines) == 2, lines
    assert "publishing ResourceSlices failed: API server down" in lines[0]
    assert "works again" in lines[1] and "2 failed attempts" in lines[1]


async def test_withdrawing_is_bounded_when_the_api_does_not_answer(tmp_path: Path, watched: Path) -> None:
    running = start(tmp_path, ScriptedProfile(watched), withdraw_timeout=0.2)
    running.recorder.withdraw_hangs = True
    await running.until("the first publish", lambda: bool(running.recorder.published))

    await running.finish()

    assert running.recorder.log[-1] == "withdraw"


async def test_stop_before_the_first_scan_returns_starts_nothing(tmp_path: Path, watched: Path) -> None:
    profile = ScriptedProfile(watched)
    profile.block.clear()
    running = start(tmp_path, profile)
    await asyncio.sleep(0.1)

    await running.finish()
    profile.block.set()

    assert running.recorder.log == []


async def test_a_driver_whose_servers_cannot_start_leaves_the_slices_alone(
    tmp_path: Path, watched: Path
) -> None:
    running = start(tmp_path, ScriptedProfile(watched))
    running.recorder.start_error = RuntimeError("Failed to bind to address unix:///x/dra.sock")

    with pytest.raises(RuntimeError, match="Failed to bind"):
        await asyncio.wait_for(running.task, 5)

    assert running.recorder.log == []  # neither published nor withdrawn: the slices may be another's


async def test_a_successor_serving_the_node_keeps_the_slices_and_a_dead_socket_does_not(
    tmp_path: Path, watched: Path
) -> None:
    """A rolling update: the old instance stops while the new one answers on its own socket."""
    profile = ScriptedProfile(watched)
    directory = tmp_path / "plugins" / profile.driver_name
    directory.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.fspath(directory / "dra-killed.sock"))
    stale.close()  # the file stays, nobody listens: an instance that was killed
    running = start(tmp_path, profile)
    await running.until("the first publish", lambda: bool(running.recorder.published))
    await running.finish()
    assert running.recorder.log[-1] == "withdraw", running.recorder.log

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as successor:
        successor.bind(os.fspath(directory / "dra-new.sock"))
        successor.listen()
        running = start(tmp_path, profile)
        await running.until("the first publish", lambda: bool(running.recorder.published))
        await running.finish()
    assert "withdraw" not in running.recorder.log
    assert running.recorder.log[-1] == "stop"
