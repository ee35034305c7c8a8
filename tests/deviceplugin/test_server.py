"""The framework's servers against the kubelet stand-in, in one event loop over real unix sockets."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from intel_device_plugins.deviceplugin import server as server_module
from intel_device_plugins.deviceplugin.manager import PluginManager
from intel_device_plugins.deviceplugin.model import (
    CdiDevice,
    ContainerAllocation,
    DeviceMap,
    DeviceNode,
    DeviceTree,
    Health,
)
from intel_device_plugins.deviceplugin.server import FrameworkConfig, message_size_problem
from intel_device_plugins.kubeletapi import deviceplugin_v1beta1 as dp
from intel_device_plugins.sim.kubelet import KubeletStandIn
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.builders import widget

RESOURCE = "example.com/widget"


@dataclass
class FakePlugin:
    """A scanner whose tree the test edits."""

    tree: DeviceTree = field(default_factory=lambda: {"widget": {f"w{i}": widget(i) for i in range(3)}})
    fail: bool = False
    watched: Sequence[Path] = ()

    @property
    def namespace(self) -> str:
        return "example.com"

    def scan(self) -> DeviceTree:
        if self.fail:
            raise RuntimeError("sysfs exploded")
        return self.tree

    def watch_paths(self) -> Sequence[Path]:
        return self.watched


@dataclass
class PolicyPlugin(FakePlugin):
    answer: Sequence[str] | Exception = ()

    def preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@dataclass
class RenumberingPlugin(FakePlugin):
    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation:
        envs = {f"WIDGET{i}": device_id for i, device_id in enumerate(ids)}
        return ContainerAllocation(nodes=allocation.nodes, envs=envs)


@asynccontextmanager
async def running(
    plugin: FakePlugin, plugin_dir: Path, scan_interval: float = 0.2
) -> AsyncIterator[PluginManager]:
    config = FrameworkConfig(
        device_plugin_dir=plugin_dir, cdi_dir=plugin_dir.parent / "cdi", scan_interval=scan_interval
    )
    manager = PluginManager(plugin, config)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        yield manager
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def advertised(kubelet: KubeletStandIn) -> dict[str, str]:
    return {d.id: d.health for d in kubelet.resources().get(RESOURCE, {}).values()}


async def test_registers_and_advertises(kubelet: KubeletStandIn, plugin_dir: Path) -> None:
    plugin = FakePlugin(
        {"widget": {"w1": widget(1, numa_nodes=(1,)), "w0": widget(0, health=Health.UNHEALTHY)}}
    )
    async with running(plugin, plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 2)
        assert kubelet.registrations == [(RESOURCE, "example.com-widget.sock")]
        assert advertised(kubelet) == {"w0": "Unhealthy", "w1": "Healthy"}
        assert kubelet.resources()[RESOURCE]["w1"].numa_nodes == (1,)
        assert kubelet.allocatable(RESOURCE) == 1
        options = kubelet.options(RESOURCE)
        assert not options.pre_start_required and not options.get_preferred_allocation_available


async def test_list_and_watch_is_sorted_by_id(kubelet: KubeletStandIn, plugin_dir: Path) -> None:
    plugin = FakePlugin({"widget": {name: widget(0) for name in ("c", "a", "b")}})
    async with running(plugin, plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        async with grpc.aio.insecure_channel(f"unix:{plugin_dir / 'example.com-widget.sock'}") as channel:
            stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
            first = await stream.read()
            assert isinstance(first, pb.ListAndWatchResponse)
            assert [d.ID for d in first.devices] == ["a", "b", "c"]
            stream.cancel()


async def test_update_and_removal_of_a_resource(kubelet: KubeletStandIn, plugin_dir: Path) -> None:
    plugin = FakePlugin()
    async with running(plugin, plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        plugin.tree = {"widget": {"w0": widget(0)}}
        await kubelet.wait_for(lambda: set(advertised(kubelet)) == {"w0"})
        plugin.tree = {}
        # Withdrawn, not left for the kubelet to mark Unhealthy and keep in capacity; the server
        # stops and removes its socket right after.
        await kubelet.wait_for(lambda: advertised(kubelet) == {})
        socket_path = plugin_dir / "example.com-widget.sock"
        for _ in range(100):
            if not socket_path.exists():
                break
            await asyncio.sleep(0.02)
        assert not socket_path.exists()


async def test_kubelet_restart_leads_to_reregistration(kubelet: KubeletStandIn, plugin_dir: Path) -> None:
    async with running(FakePlugin(), plugin_dir, scan_interval=30):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        await kubelet.restart()
        await kubelet.wait_for(lambda: len(kubelet.registrations) == 2 and kubelet.allocatable(RESOURCE) == 3)
        assert (plugin_dir / "example.com-widget.sock").is_socket()


async def test_deleted_socket_is_served_again(kubelet: KubeletStandIn, plugin_dir: Path) -> None:
    async with running(FakePlugin(), plugin_dir, scan_interval=30):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        (plugin_dir / "example.com-widget.sock").unlink()
        await kubelet.wait_for(lambda: len(kubelet.registrations) == 2)
        assert (plugin_dir / "example.com-widget.sock").is_socket()


async def test_waits_for_a_late_kubelet_and_says_so_once(
    plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with running(FakePlugin(), plugin_dir):
        await asyncio.sleep(1.5)
        async with KubeletStandIn(plugin_dir) as kubelet:
            await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
            waiting = [r for r in caplog.records if "waiting for the kubelet" in r.getMessage()]
            assert len(waiting) == 1


async def test_missing_plugin_directory_is_reported_and_survived(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    plugin_dir = tmp_path / "later"
    async with running(FakePlugin(), plugin_dir):
        await asyncio.sleep(0.5)
        assert any(
            str(plugin_dir) in r.getMessage() and "does not exist" in r.getMessage() for r in caplog.records
        )
        async with KubeletStandIn(plugin_dir) as kubelet:
            await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)


async def test_allocate_errors_name_the_device_and_serving_continues(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    plugin = FakePlugin({"widget": {"ok": widget(0), "sick": widget(1, health=Health.UNHEALTHY)}})
    async with running(plugin, plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 2)
        with pytest.raises(GRPCError) as unknown:
            await kubelet.allocate(RESOURCE, ["ghost"])
        assert unknown.value.status == Status.INVALID_ARGUMENT
        assert "non-existing device ghost" in (unknown.value.message or "")
        with pytest.raises(GRPCError) as sick:
            await kubelet.allocate(RESOURCE, ["sick"])
        assert "unhealthy device sick" in (sick.value.message or "")
        response = await kubelet.allocate(RESOURCE, ["ok"])
        assert [d.host_path for d in response.devices] == ["/dev/widget0"]


async def test_cdi_spec_written_on_allocate(kubelet: KubeletStandIn, plugin_dir: Path) -> None:
    cdi = CdiDevice(kind="example.com/widget", name="w0", nodes=(DeviceNode("/dev/w0", "/dev/w0"),))
    plugin = FakePlugin({"widget": {"w0": widget(0, cdi=cdi)}})
    async with running(plugin, plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 1)
        response = await kubelet.allocate(RESOURCE, ["w0"])
        assert [c.name for c in response.cdi_devices] == ["example.com/widget=w0"]
        assert (plugin_dir.parent / "cdi" / "example.com-widget-w0.yaml").is_file()


async def test_post_allocate_gives_each_container_its_own_envs(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    async with running(RenumberingPlugin(), plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        async with grpc.aio.insecure_channel(f"unix:{plugin_dir / 'example.com-widget.sock'}") as channel:
            request = pb.AllocateRequest(
                container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=["w0", "w1"]),
                    pb.ContainerAllocateRequest(devices_ids=["w2"]),
                ]
            )
            response = await pb_grpc.DevicePluginStub(channel).Allocate(request)
        first, second = response.container_responses
        assert dict(first.envs) == {"WIDGET0": "w0", "WIDGET1": "w1"}
        assert dict(second.envs) == {"WIDGET0": "w2"}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (["w2", "w1"], ["w2", "w1"]),
        (["w9", "w1"], ["w0", "w1"]),
        (RuntimeError("policy bug"), ["w0", "w1"]),
        (["w1"], ["w0", "w1"]),
    ],
)
async def test_preferred_allocation_never_fails(
    kubelet: KubeletStandIn, plugin_dir: Path, answer: Sequence[str] | Exception, expected: list[str]
) -> None:
    async with running(PolicyPlugin(answer=answer), plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        assert kubelet.options(RESOURCE).get_preferred_allocation_available
        assert await kubelet.preferred(RESOURCE, ["w0", "w1", "w2"], [], 2) == expected


async def test_failing_scan_keeps_the_previous_devices(
    kubelet: KubeletStandIn, plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = FakePlugin()
    async with running(plugin, plugin_dir, scan_interval=0.05) as manager:
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        plugin.fail = True
        scans = manager.scans
        await asyncio.sleep(0.5)
        assert manager.scans >= scans + 3
        assert len(advertised(kubelet)) == 3
    failures = [r for r in caplog.records if "sysfs exploded" in r.getMessage()]
    assert len(failures) == 1


async def test_watched_directory_triggers_an_immediate_rescan(
    kubelet: KubeletStandIn, plugin_dir: Path, tmp_path: Path
) -> None:
    watched = tmp_path / "dev"
    watched.mkdir()
    plugin = FakePlugin(watched=(watched,))
    async with running(plugin, plugin_dir, scan_interval=60) as manager:
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        plugin.tree = {"widget": {"w0": widget(0)}}
        (watched / "widget9").touch()
        await kubelet.wait_for(lambda: set(advertised(kubelet)) == {"w0"}, timeout=5)
        assert manager.scans >= 2


async def test_stop_removes_own_socket_only(kubelet: KubeletStandIn, plugin_dir: Path) -> None:
    async with running(FakePlugin(), plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
    assert not (plugin_dir / "example.com-widget.sock").exists()
    assert (plugin_dir / "kubelet.sock").exists()


async def test_socket_in_use_by_another_process_is_not_taken(
    kubelet: KubeletStandIn, plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = plugin_dir / "example.com-widget.sock"
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(str(path))
    squatter.listen()
    try:
        async with running(FakePlugin(), plugin_dir):
            await asyncio.sleep(0.5)
            assert kubelet.registrations == []
            assert any("already in use" in r.getMessage() for r in caplog.records)
        assert path.is_socket()
    finally:
        squatter.close()


async def test_plugin_directory_that_is_a_file_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    async with running(FakePlugin(), not_a_dir) as manager:
        await asyncio.sleep(0.3)
        assert set(manager.servers) == {"widget"}
    assert any(f"{not_a_dir} is not a directory" in r.getMessage() for r in caplog.records)


async def test_stop_withdraws_the_devices_before_the_stream_ends(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    """The kubelet would keep a vanished plugin's devices in the node's capacity for 5 minutes."""
    async with running(FakePlugin(), plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
    assert advertised(kubelet) == {}


async def test_allocate_after_stop_began_says_the_plugin_is_stopping(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    """SIGTERM withdraws the devices first; an Allocate arriving then must not hear "non-existing device"."""
    async with running(FakePlugin(), plugin_dir) as manager:
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        server = manager.servers["widget"]
        await server.stop()
        request = dp.AllocateRequest(container_requests=(dp.ContainerAllocateRequest(devices_ids=("w0",)),))
        with pytest.raises(GRPCError) as error:
            await server.Allocate(request)
    assert error.value.status == Status.UNAVAILABLE
    assert error.value.message == "example.com/widget: the plugin is stopping; w0 not allocated"


@dataclass
class SpyPolicyPlugin(FakePlugin):
    seen: list[int] = field(default_factory=list)

    def preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str]:
        self.seen.append(len(available) + len(must_include))
        return list(available)[:size]


async def test_preferred_allocation_drops_unknown_ids_before_the_policy_sees_them(
    kubelet: KubeletStandIn, plugin_dir: Path
) -> None:
    plugin = SpyPolicyPlugin()
    unknown = [f"ghost{i}" for i in range(10_000)]
    async with running(plugin, plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
        chosen = await kubelet.preferred(RESOURCE, [*unknown, "w2", "w0"], ["ghost7", "w2"], 10_000)
    assert chosen == ["w2", "w0"]
    assert plugin.seen == [3]  # w2, w0 offered and w2 insisted on; no ghost reached the policy


def test_message_size_problem_names_the_size_and_the_limit() -> None:
    assert message_size_problem(2_000_000, 70_000, 4_194_304) == ""
    assert message_size_problem(3_500_000, 120_000, 4_194_304) == (
        "the device list of 120000 devices is 3500000 bytes, near the kubelet's limit of 4194304 bytes"
    )
    assert message_size_problem(7_133_340, 240_000, 4_194_304) == (
        "the device list of 240000 devices is 7133340 bytes, over the kubelet's limit of 4194304 bytes: "
        "the kubelet will refuse it and the resource stays unusable; lower -shared-dev-num"
    )


async def test_a_device_list_near_the_kubelets_limit_is_reported_with_its_size(
    kubelet: KubeletStandIn,
    plugin_dir: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_module, "KUBELET_MAX_MESSAGE_BYTES", 56)  # three widgets make 45 bytes
    caplog.set_level(logging.WARNING)
    async with running(FakePlugin(), plugin_dir):
        await kubelet.wait_for(lambda: len(advertised(kubelet)) == 3)
    near = [
        r.getMessage() for r in caplog.records if "near the kubelet's limit of 56 bytes" in r.getMessage()
    ]
    assert len(near) == 1 and near[0].startswith("example.com/widget: the device list of 3 devices is ")
