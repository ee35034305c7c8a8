"""Faults that must not take a plugin down: hung scans, bad values, lost streams, unwritable CDI specs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from intel_device_plugins.deviceplugin.cdi import remove_stale_cdi_temporaries, write_cdi_spec
from intel_device_plugins.deviceplugin.manager import PluginManager, serve_plugins
from intel_device_plugins.deviceplugin.model import (
    CdiDevice,
    DeviceInfo,
    DeviceNode,
    DeviceTree,
    check_devices,
)
from intel_device_plugins.deviceplugin.server import FrameworkConfig
from intel_device_plugins.sim.kubelet import KubeletStandIn
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.builders import widget

RESOURCE = "example.com/widget"


def blocking_read(path: str, release: threading.Event, limit: float) -> None:
    """Stands in for a read from a wedged driver (named ``path`` like the sysfs helpers' argument)."""
    release.wait(limit)


@dataclass
class WedgingPlugin:
    """Scans fine until ``wedge`` is set; then the scan blocks in a "read" of ``stuck_path``."""

    name: str = "example.com"
    tree: DeviceTree = field(default_factory=lambda: {"widget": {f"w{i}": widget(i) for i in range(3)}})
    wedge: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    stuck_path: str = "/sys/devices/pci0000:00/0000:00:02.0/vendor"
    limit: float = 3.0

    @property
    def namespace(self) -> str:
        return self.name

    def scan(self) -> DeviceTree:
        if self.wedge.is_set():
            blocking_read(self.stuck_path, self.release, self.limit)
        return self.tree


def config_for(plugin_dir: Path, **kwargs: object) -> FrameworkConfig:
    defaults: dict[str, object] = {"cdi_dir": plugin_dir.parent / "cdi", "scan_interval": 0.05}
    defaults.update(kwargs)
    return FrameworkConfig(device_plugin_dir=plugin_dir, **defaults)  # type: ignore[arg-type]


@asynccontextmanager
async def running(plugin: object, config: FrameworkConfig) -> AsyncIterator[PluginManager]:
    manager = PluginManager(plugin, config)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        yield manager
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def advertised(kubelet: KubeletStandIn, resource: str = RESOURCE) -> dict[str, str]:
    return {d.id: d.health for d in kubelet.resources().get(resource, {}).values()}


# ----- item 2: a stuck scan ----------------------------------------------------------------------


async def test_a_stuck_scan_leaves_serving_alone_and_names_the_path(
    kubelet: KubeletStandIn, plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = WedgingPlugin(limit=10.0)
    async with running(plugin, config_for(plugin_dir, scan_deadline=0.3)) as manager:
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        plugin.wedge.set()
        await asyncio.sleep(0.5)  # the scan is blocked now
        started = time.monotonic()
        response = await kubelet.allocate(RESOURCE, ["w1"])
        async with grpc.aio.insecure_channel(f"unix:{plugin_dir / 'example.com-widget.sock'}") as channel:
            await pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty(), timeout=1)
        assert time.monotonic() - started < 2.0  # not held up by the 10 s read
        assert [d.host_path for d in response.devices] == ["/dev/widget1"]
        assert manager.scan_stuck
        stuck = [r.getMessage() for r in caplog.records if "stuck" in r.getMessage()]
        assert len(stuck) == 1 and plugin.stuck_path in stuck[0]
        assert len(advertised(kubelet)) == 3
        # Once the read returns, scanning resumes and changes are served again.
        plugin.tree = {"widget": {"w0": widget(0)}}
        plugin.wedge.clear()
        plugin.release.set()
        await kubelet.wait_for(lambda: set(advertised(kubelet)) == {"w0"}, timeout=5)
        assert not manager.scan_stuck


async def test_a_stuck_kind_does_not_hold_up_the_other_kinds(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    stuck = WedgingPlugin(name="stuck.example.com")
    stuck.wedge.set()
    healthy = WedgingPlugin(name="example.com")
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_plugins([stuck, healthy], config_for(plugin_dir, scan_deadline=0.2), stop)
    )
    try:
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3, timeout=2)
        healthy.tree = {"widget": {"w7": widget(7)}}
        await kubelet.wait_for(lambda: set(advertised(kubelet)) == {"w7"}, timeout=2)
        assert "stuck.example.com/widget" not in kubelet.resources()
    finally:
        stop.set()
        started = time.monotonic()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - started < 1.0
        stuck.release.set()


HANGING_PLUGIN = textwrap.dedent(
    """
    import sys, threading
    from intel_device_plugins.deviceplugin.cli import new_parser, run_plugin_command

    class Hanging:
        namespace = "example.com"
        def scan(self):
            path = "/sys/devices/wedged/vendor"
            open(sys.argv[1] + "/scanning", "w").close()  # signal handlers are in place by now
            open(sys.argv[1] + "/fifo").read()  # blocks: nobody ever writes

    sys.exit(run_plugin_command(new_parser("hang", ""), lambda args: [Hanging()], sys.argv[2:]))
    """
)


async def test_sigterm_ends_the_process_within_a_second_while_a_scan_hangs(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dp").mkdir()
    log_path = tmp_path / "log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HANGING_PLUGIN, str(tmp_path), "-device-plugin-dir", str(tmp_path / "dp"),
            stdout=log, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    try:
        for _ in range(300):  # started, and the first scan is about to block (slow on a busy machine)
            if (tmp_path / "scanning").exists():
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.2)
        assert process.returncode is None
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = await asyncio.wait_for(process.wait(), 5)
        assert time.monotonic() - started < 1.0
        assert code == 0
        assert "wedged/vendor" in log_path.read_text()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# ----- item 3: values that do not fit the protocol, lost streams ------------------------------


def test_out_of_range_numa_drops_the_hint_and_keeps_the_device() -> None:
    devices = {"w0": widget(0, numa_nodes=(2**63,)), "w1": widget(1, numa_nodes=(1,))}
    checked = check_devices(RESOURCE, devices)
    assert set(checked.devices) == {"w0", "w1"}
    assert checked.devices["w0"].numa_nodes == () and checked.devices["w1"].numa_nodes == (1,)
    assert checked.problems == (
        f"{RESOURCE} device w0: NUMA node(s) {2**63} out of range (0 to 1023); no NUMA topology reported",
    )


def test_texts_that_cannot_be_sent_leave_only_that_device_out() -> None:
    bad = "/dev/widget\udcff"
    devices = {"w0": DeviceInfo(nodes=(DeviceNode(bad, bad),)), "w1": widget(1), "": widget(2)}
    checked = check_devices(RESOURCE, devices)
    assert set(checked.devices) == {"w1"}
    assert len(checked.problems) == 2 and "not valid UTF-8" in checked.problems[0]


def test_a_clean_map_is_passed_through_unchanged() -> None:
    devices = {"w0": widget(0, numa_nodes=(0,))}
    assert check_devices(RESOURCE, devices).devices is devices


async def test_a_numa_value_beyond_the_protocol_keeps_the_stream_and_the_devices(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    plugin = WedgingPlugin(tree={"widget": {"w0": widget(0, numa_nodes=(2**63,)), "w1": widget(1)}})
    async with running(plugin, config_for(plugin_dir)):
        await kubelet.wait_for(lambda: advertised(kubelet) == {"w0": "Healthy", "w1": "Healthy"})
        assert kubelet.resources()[RESOURCE]["w0"].numa_nodes == ()
        plugin.tree = {"widget": {"w0": widget(0, numa_nodes=(1,)), "w1": widget(1)}}
        await kubelet.wait_for(lambda: kubelet.resources()[RESOURCE]["w0"].numa_nodes == (1,))
        assert len(kubelet.registrations) == 1


async def test_a_stream_the_kubelet_lost_leads_to_a_new_registration(
    kubelet: KubeletStandIn, plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(WedgingPlugin(), config_for(plugin_dir, scan_interval=30)):
        await kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 3)
        await kubelet.drop_stream(RESOURCE)
        assert kubelet.allocatable(RESOURCE) == 0
        await kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 3, timeout=4)
        assert len(kubelet.registrations) == 2
        # No registration loop: the new stream stays.
        await asyncio.sleep(1.5)
        assert len(kubelet.registrations) == 2
    assert any("stopped watching" in r.getMessage() for r in caplog.records)


# ----- item 4: CDI specs ----------------------------------------------------------------------

CDI = CdiDevice(kind="example.com/widget", name="w0", nodes=(DeviceNode("/dev/w0", "/dev/w0"),))


async def test_allocate_fails_naming_the_spec_and_errno_when_it_cannot_be_written(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    not_a_dir = plugin_dir.parent / "cdi-file"
    not_a_dir.write_text("")
    plugin = WedgingPlugin(tree={"widget": {"w0": widget(0, cdi=CDI), "w1": widget(1)}})
    async with running(plugin, config_for(plugin_dir, cdi_dir=not_a_dir)):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 2)
        with pytest.raises(GRPCError) as failed:
            await kubelet.allocate(RESOURCE, ["w0"])
        assert failed.value.status == Status.INTERNAL
        details = failed.value.message or ""
        assert f"{not_a_dir}/example.com-widget-w0.yaml" in details and "errno 17" in details
        # Devices without CDI are still allocated.
        assert [d.host_path for d in (await kubelet.allocate(RESOURCE, ["w1"])).devices] == ["/dev/widget1"]


def test_spec_temporary_files_are_not_named_like_specs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed: list[str] = []
    real_replace = os.replace

    def spy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        renamed.append(os.path.basename(source))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", spy)
    write_cdi_spec(tmp_path, CDI)
    (name,) = renamed
    assert not name.endswith((".yaml", ".json")) and name.startswith(".")
    assert sorted(os.listdir(tmp_path)) == ["example.com-widget-w0.yaml"]


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="errno 28"):
        write_cdi_spec(tmp_path, CDI)
    assert os.listdir(tmp_path) == []


def test_stale_temporary_files_are_removed_and_nothing_else(tmp_path: Path) -> None:
    old = time.time() - 3600
    stale = [".tmp-abc123.yaml", ".intel.cdi.k8s.io-gpu-card0.yaml.0a1b2c3d.tmp"]
    kept = ["intel.cdi.k8s.io-gpu-card0.yaml", ".tmp-notes.txt", "other-vendor.tmp", ".x.yaml.0a1b.tmp.json"]
    for name in (*stale, *kept):
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (old, old))
    fresh = tmp_path / ".intel.cdi.k8s.io-gpu-card1.yaml.99.tmp"
    fresh.write_text("")  # a write in progress in another process
    removed = remove_stale_cdi_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted(stale)
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, fresh.name])


async def test_stale_temporary_files_are_removed_at_start(
    kubelet: KubeletStandIn, plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cdi_dir = plugin_dir.parent / "cdi"
    cdi_dir.mkdir()
    leftover = cdi_dir / ".tmp-k1ll3d.yaml"
    leftover.write_text("")
    os.utime(leftover, (time.time() - 600, time.time() - 600))
    async with running(WedgingPlugin(), config_for(plugin_dir)):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        assert not leftover.exists()
