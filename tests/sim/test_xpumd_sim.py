"""The xpumd client against the simulated xpumd: each scripted fault and what health it yields."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.health import deviceinfo as pb
from intel_device_plugins.deviceplugin.health.model import HealthSettings, HealthState, Severity, assess
from intel_device_plugins.deviceplugin.health.xpumd import (
    StreamState,
    XpumdClient,
    XpumdSettings,
    running,
)
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.xpumd import Garbage, SimulatedXpumd, serving

PROFILE = """
[[gpu]]
driver = "xe"
count = 2
device_id = "0xe211"
"""
FAST = XpumdSettings(first_retry_seconds=0.05, max_retry_seconds=0.2, stale_after_seconds=0.6)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def states(client: XpumdClient, settings: HealthSettings | None = None) -> dict[str, HealthState]:
    verdicts = assess(client.findings(), settings or HealthSettings())
    return {device: verdict.state for device, verdict in verdicts.items()}


@pytest.fixture
def node(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    build_node(parse_node_spec(PROFILE), root)
    return root


@pytest.fixture
async def daemon(tmp_path: Path, node: Path) -> AsyncIterator[SimulatedXpumd]:
    async with serving(SimulatedXpumd.for_node(tmp_path / "x.sock", node, interval=0.05)) as sim:
        yield sim


@pytest.fixture
async def client(daemon: SimulatedXpumd) -> AsyncIterator[XpumdClient]:
    settings = XpumdSettings(daemon.socket, 1 << 20, 0.05, 0.2, 0.6)
    async with running(XpumdClient(settings)) as watching:
        yield watching


def healthy(client: XpumdClient) -> bool:
    return set(states(client).values()) == {HealthState.HEALTHY}


def gpus(daemon: SimulatedXpumd) -> list[str]:
    return sorted(daemon.xpus)


async def test_the_simulated_node_s_gpus_are_served_healthy(
    daemon: SimulatedXpumd, client: XpumdClient
) -> None:
    first, second = gpus(daemon)
    assert daemon.xpus[first].info.pci == pb.PciInfo(first, "e211", "8086")
    await until(lambda: healthy(client))
    assert states(client) == {first: HealthState.HEALTHY, second: HealthState.HEALTHY}
    assert {f.category for f in client.findings()} == {"frequency", "memory", "temperature"}


async def test_overheating_is_a_warning_unhealthy_only_under_a_warning_threshold_until_cooled(
    daemon: SimulatedXpumd, client: XpumdClient
) -> None:
    first, second = gpus(daemon)
    await until(lambda: healthy(client) and client.events_state is StreamState.CONNECTED)
    daemon.overheat(first)
    await until(
        lambda: any(f.category == "temperature" and f.severity is Severity.WARNING for f in client.findings())
    )
    default = assess(client.findings(), HealthSettings())[first]
    assert (default.state, default.severity) == (HealthState.HEALTHY, Severity.WARNING)
    strict = HealthSettings.from_flag("warning")
    assert states(client, strict) == {first: HealthState.UNHEALTHY, second: HealthState.HEALTHY}
    daemon.cool_down(first)  # the temp_threshold1 event (WARN) holds nothing once the snapshot says OK
    await until(lambda: states(client, strict) == {first: HealthState.HEALTHY, second: HealthState.HEALTHY})


async def test_memory_errors_make_the_gpu_unhealthy(daemon: SimulatedXpumd, client: XpumdClient) -> None:
    first, second = gpus(daemon)
    await until(lambda: healthy(client) and client.events_state is StreamState.CONNECTED)
    daemon.memory_errors(second)
    await until(lambda: states(client)[second] is HealthState.UNHEALTHY)
    verdict = assess(client.findings(), HealthSettings())[second]
    assert verdict.severity is Severity.CRITICAL
    assert {(r.source, r.category) for r in verdict.reasons} == {
        ("xpumd", "memory"),
        ("xpumd-event", "ras_uncorrectable_errors"),
    }
    assert states(client)[first] is HealthState.HEALTHY


async def test_a_lost_gpu_is_unhealthy_until_attached_again(
    daemon: SimulatedXpumd, client: XpumdClient
) -> None:
    first, _ = gpus(daemon)
    await until(lambda: healthy(client) and client.events_state is StreamState.CONNECTED)
    daemon.lose(first)
    await until(lambda: states(client).get(first) is HealthState.UNHEALTHY)
    verdict = assess(client.findings(), HealthSettings())[first]
    assert [r.category for r in verdict.reasons] == ["device_detach"]
    # The snapshot no longer lists it: only the latched event speaks of it.
    assert {f.source for f in client.findings() if f.device == first} == {"xpumd-event"}
    daemon.attach(first)
    await until(lambda: states(client).get(first) is HealthState.HEALTHY)


async def test_a_slow_daemon_turns_unknown_and_back(
    daemon: SimulatedXpumd, client: XpumdClient, caplog: pytest.LogCaptureFixture
) -> None:
    await until(lambda: healthy(client))
    with caplog.at_level(logging.INFO):
        daemon.delay = 2.0
        await until(lambda: set(states(client).values()) == {HealthState.UNKNOWN})
        assert client.view.health is StreamState.DOWN and "no message for 0.6 s" in client.view.problem
        daemon.delay = 0.0
        await until(lambda: set(states(client).values()) == {HealthState.HEALTHY})
    changes = [r.getMessage() for r in caplog.records if "xpumd health stream" in r.getMessage()]
    # One line per change of state, however many retries in between.
    assert (
        len(changes) == 2 and "down (no message for 0.6 s)" in changes[0] and changes[1].endswith("connected")
    )


async def test_a_crash_turns_unknown_retries_with_back_off_and_recovers(
    daemon: SimulatedXpumd, client: XpumdClient
) -> None:
    await until(lambda: healthy(client))
    await daemon.crash()
    assert daemon.socket.exists()  # left behind, as by a killed process
    await until(lambda: set(states(client).values()) == {HealthState.UNKNOWN})
    assert "Connection" in client.view.problem or "refused" in client.view.problem.lower()
    await asyncio.sleep(0.5)  # several capped retries against the dead socket
    await daemon.start()
    await until(lambda: set(states(client).values()) == {HealthState.HEALTHY})


async def test_a_restart_ends_the_streams_and_the_client_resubscribes(
    daemon: SimulatedXpumd, client: XpumdClient, caplog: pytest.LogCaptureFixture
) -> None:
    first, _ = gpus(daemon)
    await until(lambda: healthy(client) and client.events_state is StreamState.CONNECTED)
    daemon.lose(first)
    await until(lambda: states(client).get(first) is HealthState.UNHEALTHY)
    daemon.xpus[first].present = True  # the new process finds the GPU again, with no attach event

    def ended() -> set[str]:
        """The streams that ended as a stopping xpumd ends them: with a status, not a broken connection."""
        lines = [r.getMessage() for r in caplog.records if "(xpumd ended the stream)" in r.getMessage()]
        return {line.split(" stream ")[0] for line in lines}

    with caplog.at_level(logging.WARNING):
        await daemon.restart()
        await until(lambda: ended() == {"xpumd health", "xpumd events"})
    await until(lambda: client.events_state is StreamState.CONNECTED)
    # The latched detach belonged to the old process; the new snapshot says the GPU is fine.
    await until(lambda: states(client).get(first) is HealthState.HEALTHY)


@pytest.mark.parametrize("garbage", list(Garbage))
async def test_garbage_turns_unknown_and_never_raises(
    daemon: SimulatedXpumd, client: XpumdClient, garbage: Garbage
) -> None:
    await until(lambda: healthy(client))
    daemon.garbage = garbage
    if garbage is Garbage.CONNECTION:
        await daemon.restart()  # existing connections are good ones; new ones get garbage
    await until(lambda: set(states(client).values()) == {HealthState.UNKNOWN})
    assert client.view.problem
    daemon.garbage = None
    await until(lambda: set(states(client).values()) == {HealthState.HEALTHY})


async def test_an_absent_daemon_is_unknown_and_the_client_keeps_trying(tmp_path: Path, node: Path) -> None:
    settings = XpumdSettings(tmp_path / "late.sock", 1 << 20, 0.05, 0.1, 0.6)
    async with running(XpumdClient(settings)) as client:
        await until(lambda: client.view.health is StreamState.DOWN)
        assert client.findings() == ()
        async with serving(SimulatedXpumd.for_node(settings.socket, node, interval=0.05)):
            await until(lambda: set(states(client).values()) == {HealthState.HEALTHY})


async def test_an_oversized_message_is_refused_unread(tmp_path: Path, node: Path) -> None:
    sim = SimulatedXpumd.for_node(tmp_path / "x.sock", node, interval=0.05)
    settings = XpumdSettings(sim.socket, 64, 0.05, 0.1, 0.6)
    async with serving(sim), running(XpumdClient(settings)) as client:
        await until(lambda: "over the limit of 64" in client.view.problem)
        assert client.findings() == ()


async def test_on_change_is_called_when_the_findings_change(daemon: SimulatedXpumd) -> None:
    calls: list[int] = []
    client = XpumdClient(
        XpumdSettings(daemon.socket, 1 << 20, 0.05, 0.2, 0.6), on_change=lambda: calls.append(1)
    )
    async with running(client):
        await until(lambda: len(calls) == 1)
        await asyncio.sleep(0.3)  # identical snapshots every 50 ms change nothing
        assert len(calls) == 1
        daemon.memory_errors(gpus(daemon)[0])
        await until(lambda: len(calls) >= 2)
