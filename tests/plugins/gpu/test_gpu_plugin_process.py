"""The real ``intel_gpu_device_plugin`` process against the kubelet stand-in over unix sockets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from intel_device_plugins.plugins import is_plugin_binary
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import PluginProcess, console_script, plugin_process
from intel_device_plugins.sim.uevents import UeventBroadcaster

pytestmark = pytest.mark.integration

NODE = """
[node]
numa_nodes = 2
[[gpu]]
driver = "i915"
count = 2
numa_node = 0
[[gpu]]
driver = "i915"
count = 1
numa_node = 1
vfs = 2
[[gpu]]
driver = "xe"
count = 1
numa_node = 1
"""
I915 = "gpu.intel.com/i915"
XE = "gpu.intel.com/xe"


@pytest.fixture
def node(tmp_path: Path) -> FakeTree:
    return build_node(parse_node_spec(NODE), tmp_path / "node")


def command(node: FakeTree, plugin_dir: Path, *extra: str) -> list[str]:
    return [
        console_script("intel_gpu_device_plugin"),
        "-prefix", str(node.root),
        "--device-plugin-dir", str(plugin_dir),
        "-cdi-dir", str(plugin_dir.parent / "cdi"),
        *extra,
    ]  # fmt: skip


@pytest.fixture
async def plugin(node: FakeTree, plugin_dir: Path, kubelet: KubeletStandIn) -> AsyncIterator[PluginProcess]:
    argv = command(node, plugin_dir, "-shared-dev-num", "2", "-allocation-policy", "packed")
    async with plugin_process(argv, plugin_dir.parent / "plugin.log") as process:
        await kubelet.wait_for(lambda: len(kubelet.resources().get(I915, {})) == 8, timeout=15)
        yield process


def ids(kubelet: KubeletStandIn, resource: str) -> set[str]:
    return set(kubelet.resources().get(resource, {}))


async def test_registers_the_simulated_cards(kubelet: KubeletStandIn, plugin: PluginProcess) -> None:
    # Two plain cards and the two VFs of card2 (the PF itself is not offered).
    assert ids(kubelet, I915) == {f"card{c}-{i}" for c in (0, 1, 3, 4) for i in (0, 1)}
    await kubelet.wait_for(lambda: len(ids(kubelet, XE)) == 2)
    assert ids(kubelet, XE) == {"card5-0", "card5-1"}
    devices = kubelet.resources()[I915]
    assert devices["card0-0"].numa_nodes == (0,) and devices["card3-1"].numa_nodes == (1,)
    assert kubelet.options(I915).get_preferred_allocation_available


async def test_allocation_and_preferred_allocation(
    kubelet: KubeletStandIn, plugin: PluginProcess, node: FakeTree
) -> None:
    available = sorted(ids(kubelet, I915), reverse=True)
    assert await kubelet.preferred(I915, available, [], 3) == ["card0-0", "card0-1", "card1-0"]
    response = await kubelet.allocate(I915, ["card1-0"])
    dri = node.path("/dev/dri")
    assert [d.host_path for d in response.devices] == [str(dri / "card1"), str(dri / "renderD129")]
    assert all(d.permissions == "rw" and d.container_path == d.host_path for d in response.devices)
    assert {Path(m.host_path).name for m in response.mounts} == {
        f"pci-{address}-{kind}" for address in ["0000:11:00.0"] for kind in ("card", "render")
    }
    assert all(m.read_only for m in response.mounts)
    assert [c.name for c in response.cdi_devices] == ["intel.cdi.k8s.io/gpu=card1"]


async def test_hot_plug_and_unplug(kubelet: KubeletStandIn, plugin: PluginProcess, node: FakeTree) -> None:
    await kubelet.wait_for(lambda: len(ids(kubelet, XE)) == 2)
    card = gpu.add_card(node, driver="xe", numa_node=0)
    await kubelet.wait_for(lambda: len(ids(kubelet, XE)) == 4, timeout=5)
    assert f"card{card.index}-0" in ids(kubelet, XE)
    gpu.remove_card(node, card.index)
    await kubelet.wait_for(lambda: len(ids(kubelet, XE)) == 2, timeout=5)


async def test_reregisters_after_kubelet_restart(kubelet: KubeletStandIn, plugin: PluginProcess) -> None:
    before = len(kubelet.registrations)
    await kubelet.restart()
    await kubelet.wait_for(lambda: len(kubelet.registrations) >= before + 2, timeout=5)
    await kubelet.wait_for(lambda: kubelet.allocatable(I915) == 8, timeout=5)


async def test_reregisters_after_socket_deletion(
    kubelet: KubeletStandIn, plugin: PluginProcess, plugin_dir: Path
) -> None:
    await kubelet.wait_for(lambda: XE in kubelet.resources(), timeout=5)  # both registered first
    before = len(kubelet.registrations)
    (plugin_dir / "gpu.intel.com-i915.sock").unlink()
    await kubelet.wait_for(lambda: len(kubelet.registrations) > before, timeout=5)
    assert kubelet.registrations[before:] == [(I915, "gpu.intel.com-i915.sock")]


async def test_the_plugin_process_does_not_load_openssl(plugin: PluginProcess) -> None:
    # A plugin never needs Python's TLS; not loading it saves about 4.5 MiB per process.
    maps = Path(f"/proc/{plugin.process.pid}/maps").read_text()
    assert "libssl" not in maps and "_ssl." not in maps


def test_only_plugin_binaries_go_without_ssl() -> None:
    assert is_plugin_binary("/usr/local/bin/intel_gpu_device_plugin")
    assert is_plugin_binary("intel_fpga_device_plugin")
    assert is_plugin_binary("/venv/bin/intel_device_plugins")
    for other in ("intel_deviceplugin_operator", "sgx_epchook", "gpu_nfdhook", "pytest", "python3"):
        assert not is_plugin_binary(other), other


async def test_sigterm_exits_cleanly_and_removes_sockets(
    kubelet: KubeletStandIn, plugin: PluginProcess, plugin_dir: Path
) -> None:
    started = time.monotonic()
    assert await plugin.terminate(timeout=5) == 0
    assert time.monotonic() - started < 1.0
    assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"]


async def test_unknown_device_in_allocate_is_rejected_and_serving_continues(
    kubelet: KubeletStandIn, plugin: PluginProcess
) -> None:
    import grpc

    with pytest.raises(grpc.aio.AioRpcError) as error:
        await kubelet.allocate(I915, ["card99-0"])
    assert "card99-0" in (error.value.details() or "")
    response = await kubelet.allocate(I915, ["card0-0"])
    assert response.devices
    assert plugin.process.returncode is None


async def test_kernel_events_drive_discovery_instead_of_polling(
    node: FakeTree, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    # A driver re-bind changes only sysfs: no device node comes or goes, so inotify sees nothing.
    node.uevents = UeventBroadcaster(plugin_dir.parent / "uevents")
    argv = command(node, plugin_dir, "-uevent-dir", str(plugin_dir.parent / "uevents"))
    async with plugin_process(argv, plugin_dir.parent / "plugin.log"):
        await kubelet.wait_for(
            lambda: len(ids(kubelet, I915)) == 4 and len(ids(kubelet, XE)) == 1, timeout=15
        )
        events = node.uevents
        node.uevents = None  # first without the event: the plugin does not poll every second
        gpu.rebind(node, 0, "xe")
        await asyncio.sleep(1.5)
        assert "card0-0" in ids(kubelet, I915)
        node.uevents = events
        node.uevent("bind", node.sysfs_of(gpu_address(node, 0)), "pci", DRIVER="xe")
        # Polling would take 60 s; the event makes it a scan away.
        await kubelet.wait_for(
            lambda: "card0-0" in ids(kubelet, XE) and "card0-0" not in ids(kubelet, I915), timeout=5
        )
        # Hot-plug is still seen at once, also on a real node where /sys gives no inotify events.
        gpu.add_card(node, driver="xe")
        await kubelet.wait_for(lambda: len(ids(kubelet, XE)) == 3, timeout=5)
    events.close()


async def test_a_card_rebound_under_other_drm_numbers_is_served_with_its_new_nodes(
    kubelet: KubeletStandIn, plugin: PluginProcess, node: FakeTree
) -> None:
    """Unbind and bind to the same driver, the minors coming back as card6/renderD134: the device list
    and Allocate follow, instead of keeping card0 and its vanished nodes."""
    address = gpu_address(node, 0)
    assert gpu.rebind(node, 0, "i915", renumber_to=6) == 6
    await kubelet.wait_for(
        lambda: "card6-0" in ids(kubelet, I915) and "card0-0" not in ids(kubelet, I915), 10
    )
    assert ids(kubelet, I915) == {f"card{c}-{i}" for c in (1, 3, 4, 6) for i in (0, 1)}
    assert all(d.health == "Healthy" for d in kubelet.resources()[I915].values())
    response = await kubelet.allocate(I915, ["card6-1"])
    dri = node.path("/dev/dri")
    assert [d.host_path for d in response.devices] == [str(dri / "card6"), str(dri / "renderD134")]
    assert {Path(m.host_path).name for m in response.mounts} == {
        f"pci-{address}-card",
        f"pci-{address}-render",
    }
    assert [c.name for c in response.cdi_devices] == ["intel.cdi.k8s.io/gpu=card6"]
    # Card 1 takes the freed minors 0/128: it is served with those, not with card6's.
    gpu.rebind(node, 1, "i915", renumber_to=0)
    await kubelet.wait_for(
        lambda: "card0-0" in ids(kubelet, I915) and "card1-0" not in ids(kubelet, I915), 10
    )
    response = await kubelet.allocate(I915, ["card0-0"])
    assert [d.host_path for d in response.devices] == [str(dri / "card0"), str(dri / "renderD128")]


def gpu_address(node: FakeTree, index: int) -> str:
    return node.path(f"/sys/class/drm/card{index}").resolve().parent.parent.name


async def test_missing_socket_directory_is_survived(node: FakeTree, tmp_path: Path) -> None:
    plugin_dir = tmp_path / "not-yet"
    async with plugin_process(command(node, plugin_dir), tmp_path / "late.log") as process:
        for _ in range(150):  # until it has looked for the directory (slow on a busy machine)
            if "does not exist" in process.log_text():
                break
            await asyncio.sleep(0.1)
        assert process.process.returncode is None
        async with KubeletStandIn(plugin_dir) as kubelet:
            await kubelet.wait_for(lambda: len(ids(kubelet, I915)) == 4, timeout=10)
    assert "does not exist" in process.log_text()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-shared-dev-num", "0"], "shared-dev-num"),
        (["-allocation-policy", "random"], "allocation-policy"),
        (["-allow-ids", "0x56C0"], "allow-ids"),
        (["-scan-interval", "-1"], "scan-interval"),
        (["-allow-ids", "0x56c0", "-deny-ids", "0x56c1"], "-allow-ids and -deny-ids"),
        (["-xpumd-unhealthy-severity", "error"], "-xpumd-unhealthy-severity"),
    ],
)
async def test_bad_flags_are_rejected_at_start(
    node: FakeTree, plugin_dir: Path, flags: list[str], message: str
) -> None:
    process = await asyncio.create_subprocess_exec(
        *command(node, plugin_dir, *flags), stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode == 2
    assert message in stderr.decode()
