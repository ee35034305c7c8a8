"""Kernel uevents: the wire format, fan-out by subsystem, the simulator's source, event-driven rescans."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.manager import PluginManager
from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceNode, DeviceTree
from intel_device_plugins.deviceplugin.server import FrameworkConfig
from intel_device_plugins.deviceplugin.uevents import (
    Deliver,
    DirectoryUevents,
    NetlinkUevents,
    Uevent,
    UeventHub,
    encode_uevent,
    parse_uevent,
)
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.uevents import UeventBroadcaster

KERNEL_DATAGRAM = (
    b"add@/devices/pci0000:00/0000:00:02.0/drm/card1\0ACTION=add\0"
    b"DEVPATH=/devices/pci0000:00/0000:00:02.0/drm/card1\0SUBSYSTEM=drm\0"
    b"DEVNAME=dri/card1\0DEVTYPE=drm_minor\0SEQNUM=4242\0MAJOR=226\0MINOR=1\0"
)


def test_a_kernel_datagram_is_parsed() -> None:
    event = parse_uevent(KERNEL_DATAGRAM)
    assert event is not None
    assert (event.action, event.subsystem) == ("add", "drm")
    assert event.devpath == "/devices/pci0000:00/0000:00:02.0/drm/card1"
    assert event.properties["DEVNAME"] == "dri/card1" and event.properties["SEQNUM"] == "4242"


def test_encoding_gives_what_the_kernel_sends() -> None:
    datagram = encode_uevent(
        "add", "/devices/pci0000:00/0000:00:02.0/drm/card1", "drm", {"DEVNAME": "dri/card1"}, seqnum=7
    )
    assert datagram == (
        b"add@/devices/pci0000:00/0000:00:02.0/drm/card1\0ACTION=add\0"
        b"DEVPATH=/devices/pci0000:00/0000:00:02.0/drm/card1\0SUBSYSTEM=drm\0DEVNAME=dri/card1\0SEQNUM=7\0"
    )
    assert parse_uevent(datagram) == parse_uevent(datagram)


def test_udev_messages_and_garbage_are_ignored() -> None:
    assert parse_uevent(b"libudev\0\xfe\xed\xca\xfe" + b"\0" * 32) is None
    assert parse_uevent(b"") is None
    assert parse_uevent(b"\xff\xfe no header") is None


@dataclass
class FakeSource:
    """A source the test feeds by hand."""

    deliver: Deliver | None = None
    closed: bool = False

    def open(self, deliver: Deliver) -> bool:
        self.deliver = deliver
        return True

    def close(self) -> None:
        self.closed = True


def test_the_hub_hands_each_subscriber_only_its_subsystems() -> None:
    source = FakeSource()
    hub = UeventHub(source)
    assert hub.start()
    drm: list[Uevent | None] = []
    pci: list[Uevent | None] = []
    hub.subscribe({"drm"}, drm.append)
    unsubscribe = hub.subscribe({"pci"}, pci.append)
    assert source.deliver is not None
    source.deliver(encode_uevent("add", "/devices/x/drm/card0", "drm"))
    source.deliver(encode_uevent("bind", "/devices/x", "pci"))
    source.deliver(encode_uevent("add", "/devices/virtual/net/veth0", "net"))
    source.deliver(None)  # events were lost: everyone must rescan
    assert [e.subsystem if e else None for e in drm] == ["drm", None]
    assert [e.subsystem if e else None for e in pci] == ["pci", None]
    unsubscribe()
    source.deliver(encode_uevent("bind", "/devices/x", "pci"))
    assert len(pci) == 2
    hub.close()
    assert source.closed


async def test_the_simulator_reaches_every_listening_process(tmp_path: Path) -> None:
    received: list[list[Uevent]] = [[], []]
    sources = [DirectoryUevents(tmp_path), DirectoryUevents(tmp_path)]
    hubs = [UeventHub(source) for source in sources]
    for hub, inbox in zip(hubs, received, strict=True):
        assert hub.start()
        hub.subscribe({"drm"}, lambda event, inbox=inbox: inbox.append(event))  # type: ignore[misc]
    (tmp_path / "gone.sock").touch()  # a listener that died without cleaning up
    broadcaster = UeventBroadcaster(tmp_path)
    assert broadcaster.send("add", "/devices/x/drm/card3", "drm", {"DEVNAME": "dri/card3"}) == 2
    for _ in range(100):
        if all(received):
            break
        await asyncio.sleep(0.01)
    assert [[e.devpath for e in inbox] for inbox in received] == [["/devices/x/drm/card3"]] * 2
    assert not (tmp_path / "gone.sock").exists()
    for hub in hubs:
        hub.close()
    broadcaster.close()
    assert list(tmp_path.glob("*.sock")) == []


async def test_the_kernel_source_opens_or_says_it_cannot() -> None:
    source = NetlinkUevents()
    opened = source.open(lambda data: None)
    assert isinstance(opened, bool)
    source.close()


# ----- event-driven rescans ------------------------------------------------------------------


@dataclass
class EventPlugin:
    namespace: str = "example.com"
    watched: Sequence[Path] = ()
    tree: DeviceTree = field(
        default_factory=lambda: {"widget": {"w0": DeviceInfo(nodes=(DeviceNode("/dev/w0", "/dev/w0"),))}}
    )

    def scan(self) -> DeviceTree:
        return self.tree

    def watch_paths(self) -> Sequence[Path]:
        return self.watched

    def uevent_subsystems(self) -> Collection[str]:
        return ("drm",)


async def _scans_while(manager: PluginManager, seconds: float) -> int:
    before = manager.scans
    await asyncio.sleep(seconds)
    return manager.scans - before


async def test_an_event_driven_plugin_scans_on_events_not_by_polling(
    kubelet: KubeletStandIn, plugin_dir: Path, tmp_path: Path
) -> None:
    source = FakeSource()
    hub = UeventHub(source)
    hub.start()
    config = FrameworkConfig(plugin_dir, tmp_path / "cdi", scan_interval=0.05, event_rescan_interval=60)
    plugin = EventPlugin()
    manager = PluginManager(plugin, config, hub)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable("example.com/widget") == 1)
        assert manager.rescan_interval() == 60
        assert await _scans_while(manager, 0.5) == 0  # polled at 0.05 s it would be ~10
        assert source.deliver is not None
        source.deliver(encode_uevent("add", "/devices/x", "pci"))  # not a subsystem it asked for
        assert await _scans_while(manager, 0.2) == 0
        plugin.tree = {"widget": {}}
        source.deliver(encode_uevent("add", "/devices/x/drm/card1", "drm"))
        await kubelet.wait_for(lambda: kubelet.allocatable("example.com/widget") == 0, timeout=1)
        assert manager.uevents_seen == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        hub.close()


async def test_without_its_event_sources_an_event_driven_plugin_is_polled(
    kubelet: KubeletStandIn, plugin_dir: Path, tmp_path: Path
) -> None:
    config = FrameworkConfig(plugin_dir, tmp_path / "cdi", scan_interval=0.05, event_rescan_interval=60)
    manager = PluginManager(EventPlugin(watched=(tmp_path / "not-yet",)), config)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable("example.com/widget") == 1)
        assert manager.rescan_interval() == 0.05
        assert await _scans_while(manager, 0.5) >= 3
        (tmp_path / "not-yet").mkdir()  # the directory appears: watched from the next scan on
        await asyncio.sleep(0.2)
        assert manager.rescan_interval() == 60
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


@dataclass
class HealthPolledPlugin(EventPlugin):
    """Event-driven, but reads one thing no event announces."""

    def safety_rescan_interval(self) -> float:
        return 0.1


async def test_a_plugin_may_ask_for_a_sooner_safety_rescan(
    kubelet: KubeletStandIn, plugin_dir: Path, tmp_path: Path
) -> None:
    config = FrameworkConfig(plugin_dir, tmp_path / "cdi", scan_interval=60, event_rescan_interval=60)
    manager = PluginManager(HealthPolledPlugin(), config)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable("example.com/widget") == 1)
        assert manager.rescan_interval() == 0.1
        assert await _scans_while(manager, 1.0) >= 3  # rescanned without any event
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
