"""The GPU DRA driver's health from the hardware: a simulated xpumd and simulated kernel faults, seen
through a running driver: the ``health`` attribute, the taints its issues get, the kubelet's health
stream and the Events on the node, and a driver that keeps serving whatever xpumd does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.deviceplugin.health.model import HealthState, Severity
from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.driver import DraDriver, DriverConfig, DriverParts
from intel_device_plugins.dra.healthevents import (
    RECOVERED_REASON,
    UNHEALTHY_REASON,
    HealthChange,
    NodeEvents,
    health_changes,
    node_event,
)
from intel_device_plugins.dra.kubeletservice import health_report
from intel_device_plugins.dra.model import Device, Inventory, Taint
from intel_device_plugins.dra.slices import health_taints
from intel_device_plugins.kube.rest import EVENTS, Resource
from intel_device_plugins.plugins.gpu.dra import DRIVER_NAME, GpuDriverProfile
from intel_device_plugins.plugins.gpu.dracli import DEFAULT_XPUMD_SOCKET, build_parser, build_profile
from intel_device_plugins.plugins.gpu.health import GpuHealth
from intel_device_plugins.plugins.gpu.healthsettings import GpuHealthSettings
from intel_device_plugins.sim import faults
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.xpumd import Garbage, SimulatedXpumd, serving

PROFILE = """
[[gpu]]
driver = "xe"
count = 2
device_id = "0xe20b"
"""


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(PROFILE), tmp_path / "root")


def address(tree: FakeTree, card: int) -> str:
    return tree.path(f"/sys/class/drm/card{card}/device").resolve().name


@pytest.fixture
async def daemon(tmp_path: Path, tree: FakeTree) -> AsyncIterator[SimulatedXpumd]:
    async with serving(SimulatedXpumd.for_node(tmp_path / "x.sock", tree.root, interval=0.05)) as sim:
        yield sim


# ----- flags ---------------------------------------------------------------------------------------


def test_intels_health_flags_reach_the_settings() -> None:
    default = build_profile(build_parser().parse_args(["-node-name=n"]))
    assert default.health is None

    watched = build_profile(build_parser().parse_args(["-node-name=n", "-m"]))
    assert watched.health is not None
    assert watched.health.settings.xpumd_endpoint == DEFAULT_XPUMD_SOCKET
    assert watched.health.policy.unhealthy_at is Severity.CRITICAL  # warnings ignored by default

    strict = build_profile(
        build_parser().parse_args(
            ["-node-name=n", "--health-monitoring", "--ignore-health-warning=false", "-x", "/s.sock", "-o"]
        )
    )
    assert strict.health is not None
    assert (strict.health.settings.xpumd_endpoint, strict.health.policy.unhealthy_at) == (
        "/s.sock",
        Severity.WARNING,
    )

    plugin_style = build_profile(
        build_parser().parse_args(
            ["-node-name=n", "-xpumd-endpoint=/p.sock", "-xpumd-unhealthy-severity=failed", "-kernel-health"]
        )
    )
    assert plugin_style.health is not None
    assert plugin_style.health.settings.kernel_signals
    assert (plugin_style.health.settings.xpumd_endpoint, plugin_style.health.policy.unhealthy_at) == (
        "/p.sock",
        Severity.FAILED,
    )


def test_intels_environment_variables_give_the_health_flags_defaults() -> None:
    env = {"HEALTH_MONITORING": "true", "IGNORE_HEALTH_WARNING": "false", "XPUMD_SOCKET": "/e.sock"}
    profile = build_profile(build_parser(env).parse_args(["-node-name=n"]))
    assert profile.health is not None
    assert (profile.health.settings.xpumd_endpoint, profile.health.policy.unhealthy_at) == (
        "/e.sock",
        Severity.WARNING,
    )
    overridden = build_profile(build_parser(env).parse_args(["-node-name=n", "-m=false"]))
    assert overridden.health is None
    with pytest.raises(SystemExit):  # a bad value is refused like one on the command line
        build_parser({"HEALTH_MONITORING": "maybe"}).parse_args(["-node-name=n"])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["-xpumd-unhealthy-severity=warning", "-w=false"], "-xpumd-unhealthy-severity and --ignore"),
        (["-m", "-xpumd-endpoint=/a.sock", "-x=/b.sock"], "name different sockets"),
    ],
)
def test_contradicting_health_flags_name_both(argv: list[str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        build_profile(build_parser().parse_args(["-node-name=n", *argv]))


# ----- Events: pure part --------------------------------------------------------------------------


def test_one_event_per_change_of_state_and_none_for_unknown() -> None:
    healthy = Device("d0")
    bad = Device("d0", health=Health.UNHEALTHY, health_message="xpumd memory critical")
    unknown = Device("d0", health_state=HealthState.UNKNOWN)
    assert health_changes(None, Inventory((healthy,))) == ()
    assert health_changes(None, Inventory((bad,))) == (HealthChange("d0", True, "xpumd memory critical"),)
    assert health_changes(Inventory((healthy,)), Inventory((bad,))) == (
        HealthChange("d0", True, "xpumd memory critical"),
    )
    assert health_changes(Inventory((bad,)), Inventory((bad,))) == ()  # still bad: told once
    assert health_changes(Inventory((bad,)), Inventory((unknown,))) == (
        HealthChange("d0", False, "xpumd memory critical", HealthState.UNKNOWN),
    )
    assert health_changes(Inventory((bad,)), Inventory((healthy,))) == (
        HealthChange("d0", False, "xpumd memory critical", HealthState.HEALTHY),
    )
    assert health_changes(Inventory((healthy,)), Inventory((unknown,))) == ()
    assert health_changes(Inventory((bad,)), Inventory()) == ()  # gone: no change to tell


def test_the_event_names_the_node_the_device_and_the_finding() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    event = node_event(DRIVER_NAME, "node-a", HealthChange("dev", True, "xpumd memory critical"), now)
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-a"}
    assert (event["reason"], event["type"]) == (UNHEALTHY_REASON, "Warning")
    assert event["message"] == "gpu.intel.com device dev is unhealthy: xpumd memory critical"
    assert event["metadata"] == {"generateName": "node-a.", "namespace": "default"}
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-01-02T03:04:05Z"
    recovered = node_event(DRIVER_NAME, "node-a", HealthChange("dev", False, "x"), now)
    assert (recovered["reason"], recovered["type"]) == (RECOVERED_REASON, "Normal")
    assert recovered["message"] == "gpu.intel.com device dev is healthy again (was: x)"
    unknown = node_event(DRIVER_NAME, "node-a", HealthChange("dev", False, "x", HealthState.UNKNOWN), now)
    assert unknown["message"] == "gpu.intel.com device dev is no longer unhealthy, now Unknown (was: x)"


# ----- a running driver ---------------------------------------------------------------------------


class EventSink:
    """The API server's Events endpoint: records each Event, or fails when told to."""

    def __init__(self) -> None:
        self.events: list[Mapping[str, Any]] = []
        self.fail = False

    async def create(self, res: Resource, obj: Mapping[str, Any], namespace: str | None = None) -> Any:
        assert (res, namespace) == (EVENTS, "default")
        if self.fail:
            raise ConnectionError("API server down")
        self.events.append(obj)
        return obj

    def reasons(self) -> list[tuple[str, str]]:
        return [(str(e["reason"]), str(e["message"])) for e in self.events]


class Parts:
    """Publisher and kubelet side recording what they receive."""

    def __init__(self) -> None:
        self.published: list[Inventory] = []
        self.kubelet: list[Inventory] = []
        self.changed = asyncio.Event()

    async def publish(self, inventory: Inventory) -> object:
        self.published.append(inventory)
        self.changed.set()
        return None

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def withdraw(self) -> None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def inventory_changed(self, inventory: Inventory) -> None:
        self.kubelet.append(inventory)
        self.changed.set()


class Running:
    def __init__(self, tree: FakeTree, tmp_path: Path, settings: GpuHealthSettings) -> None:
        self.tree = tree
        self.parts = Parts()
        self.sink = EventSink()
        self.events = NodeEvents(self.sink, DRIVER_NAME, "node-a")
        self.profile = GpuDriverProfile(prefix=str(tree.root), health=GpuHealth(settings))
        config = DriverConfig(
            node_name="node-a",
            cdi_root=tmp_path / "cdi",
            registrar_dir=tmp_path / "registry",
            plugins_dir=tmp_path / "plugins",
            poll_interval=60.0,
            event_rescan_interval=60.0,
            scan_deadline=5.0,
        )

        def build(inventory: Callable[[], Inventory]) -> DriverParts:
            self.parts.kubelet.append(inventory())  # what the kubelet service reports first
            return DriverParts(publisher=self.parts, kubelet=self.parts, events=self.events)

        self.driver = DraDriver(self.profile, config, build)
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.driver.run(self.stop))

    def device(self, card: int) -> Device:
        wanted = address(self.tree, card)
        (device,) = (d for d in self.driver.inventory.devices if d.attributes.get("pciAddress") == wanted)
        return device

    def health(self, card: int) -> str:
        return str(self.device(card).attributes["health"])

    def taints(self, card: int) -> tuple[Taint, ...]:
        return health_taints(DRIVER_NAME, self.device(card), self.driver.inventory.health_taints)

    def streamed(self, card: int) -> HealthState:
        """What the kubelet's health stream reports for the card, from the kubelet side's last inventory."""
        name = self.device(card).name
        return {device: state for device, state, _ in health_report(self.parts.kubelet[-1])}[name]

    async def until(self, what: str, probe: Callable[[], bool], timeout: float = 10.0) -> None:
        async def wait() -> None:
            while True:
                with contextlib.suppress(LookupError, ValueError):
                    if probe():
                        return
                self.parts.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.parts.changed.wait(), 0.05)

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            pytest.fail(f"timed out waiting for {what}; inventory: {self.driver.inventory}")

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 10)
        assert self.task.exception() is None


@pytest.fixture
async def running_of(tree: FakeTree, tmp_path: Path) -> AsyncIterator[Callable[[GpuHealthSettings], Running]]:
    started: list[Running] = []

    def start(settings: GpuHealthSettings) -> Running:
        started.append(Running(tree, tmp_path, settings))
        return started[-1]

    yield start
    for running in started:
        if not running.task.done():
            await running.finish()


async def test_memory_errors_taint_noexecute_then_recovery_clears_everything(
    tree: FakeTree, daemon: SimulatedXpumd, running_of: Callable[[GpuHealthSettings], Running]
) -> None:
    running = running_of(GpuHealthSettings(xpumd_endpoint=str(daemon.socket)))
    await running.until("both cards healthy", lambda: running.health(0) == running.health(1) == "Healthy")
    assert running.streamed(0) is HealthState.HEALTHY and running.taints(0) == ()

    daemon.memory_errors(address(tree, 0))
    # No polling (60 s): the monitor's change callback rescans at once.
    await running.until("card0 unhealthy", lambda: running.health(0) == "Unhealthy")
    assert running.health(1) == "Healthy"
    (taint,) = running.taints(0)
    # The health domain and the latched uncorrectable-error event, one taint at the critical effect.
    assert (taint.key, taint.effect) == ("HealthIssues-memory_ras_uncorrectable_errors", "NoExecute")
    assert running.streamed(0) is HealthState.UNHEALTHY
    await running.until("the slice", lambda: running.parts.published[-1] == running.driver.inventory)
    await running.until("one Event", lambda: len(running.sink.events) == 1)
    ((reason, message),) = running.sink.reasons()
    assert reason == UNHEALTHY_REASON
    assert running.device(0).name in message and "memory" in message

    daemon.attach(address(tree, 0))  # the card is back with healthy domains (clears latched errors)
    await running.until("card0 healthy again", lambda: running.health(0) == "Healthy")
    assert running.taints(0) == ()
    assert running.streamed(0) is HealthState.HEALTHY
    await running.until("the recovery Event", lambda: len(running.sink.events) == 2)
    assert running.sink.reasons()[1][0] == RECOVERED_REASON
    await running.finish()
    assert len(running.sink.events) == 2  # one per change, none for the scans in between


async def test_overheating_counts_only_when_warnings_are_not_ignored(
    tree: FakeTree, daemon: SimulatedXpumd, running_of: Callable[[GpuHealthSettings], Running]
) -> None:
    lenient = running_of(GpuHealthSettings(xpumd_endpoint=str(daemon.socket)))
    strict = running_of(
        GpuHealthSettings(xpumd_endpoint=str(daemon.socket), xpumd_unhealthy_severity="warning")
    )
    for running in (lenient, strict):
        await running.until("card1 healthy", lambda r=running: r.health(1) == "Healthy")  # type: ignore[misc]

    daemon.overheat(address(tree, 1))
    await strict.until("card1 unhealthy", lambda: strict.health(1) == "Unhealthy")
    (taint,) = strict.taints(1)
    assert (taint.key, taint.effect) == ("HealthIssues-temperature", "NoSchedule")  # a warning's effect
    assert strict.streamed(1) is HealthState.UNHEALTHY
    assert lenient.health(1) == "Healthy" and lenient.taints(1) == ()

    daemon.cool_down(address(tree, 1))
    await strict.until("card1 cooled down", lambda: strict.health(1) == "Healthy")
    assert strict.taints(1) == ()
    await strict.until("two Events", lambda: len(strict.sink.events) == 2)
    assert [reason for reason, _ in strict.sink.reasons()] == [UNHEALTHY_REASON, RECOVERED_REASON]
    assert lenient.sink.events == []


async def test_a_rising_aer_fatal_count_taints_noexecute(
    tree: FakeTree, running_of: Callable[[GpuHealthSettings], Running]
) -> None:
    faults.enable_aer(tree, address(tree, 1))
    running = running_of(GpuHealthSettings(kernel_signals=True, poll_seconds=0.1))
    await running.until("both healthy", lambda: running.health(0) == running.health(1) == "Healthy")
    assert running.driver.rescan_interval() == pytest.approx(0.1)  # kernel signals are polled

    faults.raise_aer(tree, address(tree, 1), "fatal", "Surprise Down Error")
    await running.until("card1 unhealthy", lambda: running.health(1) == "Unhealthy")
    (taint,) = running.taints(1)
    assert (taint.key, taint.effect) == ("HealthIssues-aer-fatal", "NoExecute")
    assert "Surprise Down Error" in running.device(1).health_message
    assert running.streamed(1) is HealthState.UNHEALTHY
    await running.until("the Event", lambda: len(running.sink.events) == 1)


async def test_xpumd_killed_mid_stream_leaves_the_driver_serving_with_unknown(
    tree: FakeTree, daemon: SimulatedXpumd, running_of: Callable[[GpuHealthSettings], Running]
) -> None:
    running = running_of(GpuHealthSettings(xpumd_endpoint=str(daemon.socket)))
    daemon.memory_errors(address(tree, 0))
    await running.until("card0 unhealthy", lambda: running.health(0) == "Unhealthy")

    await daemon.crash()
    await running.until("both unknown", lambda: running.health(0) == running.health(1) == "Unknown")
    assert running.streamed(0) is HealthState.UNKNOWN
    assert running.taints(0) == running.taints(1) == ()  # Unknown keeps the cards schedulable
    assert running.device(0).health is Health.HEALTHY
    assert "xpumd" in running.device(0).health_message
    assert not running.task.done()
    await running.until("the recovery Event", lambda: len(running.sink.events) == 2)

    await daemon.restart()
    await running.until("xpumd back", lambda: running.health(1) == "Healthy", timeout=20)
    await running.finish()


async def test_xpumd_answering_garbage_leaves_the_driver_serving_with_unknown(
    tree: FakeTree, tmp_path: Path, running_of: Callable[[GpuHealthSettings], Running]
) -> None:
    daemon = SimulatedXpumd.for_node(tmp_path / "g.sock", tree.root, interval=0.05)
    daemon.garbage = Garbage.CONNECTION
    async with serving(daemon):
        running = running_of(GpuHealthSettings(xpumd_endpoint=str(daemon.socket)))
        await running.until("both unknown", lambda: running.health(0) == running.health(1) == "Unknown")
        await asyncio.sleep(0.3)  # reconnect attempts meanwhile change nothing
        assert running.health(0) == "Unknown" and not running.task.done()
        assert running.streamed(0) is HealthState.UNKNOWN
        assert running.parts.published[-1] == running.driver.inventory
        await running.finish()


async def test_a_failing_events_endpoint_does_not_stop_the_driver(
    tree: FakeTree, daemon: SimulatedXpumd, running_of: Callable[[GpuHealthSettings], Running]
) -> None:
    running = running_of(GpuHealthSettings(xpumd_endpoint=str(daemon.socket)))
    running.sink.fail = True
    daemon.memory_errors(address(tree, 0))
    await running.until("card0 unhealthy", lambda: running.health(0) == "Unhealthy")
    await running.until("the slice", lambda: running.parts.published[-1] == running.driver.inventory)
    assert not running.task.done() and running.sink.events == []
