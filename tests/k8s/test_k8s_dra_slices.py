"""The slice publisher on the real API server: validation, diffs, repairs, restarts, garbage collection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.model import (
    STANDARD_PCI_BUS_ID,
    STANDARD_PCIE_ROOT,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    Inventory,
    RequestPolicy,
    Version,
)
from intel_device_plugins.dra.profile import DriverProfile
from intel_device_plugins.dra.publisher import PublishStats, SlicePublisher
from intel_device_plugins.kube.rest import RestClient, kubeconfig_config
from intel_device_plugins.plugins.dlb.dra import DlbDriverProfile
from intel_device_plugins.plugins.fpga.discovery import Mode
from intel_device_plugins.plugins.fpga.dra import FpgaDriverProfile
from intel_device_plugins.plugins.gpu.dra import GpuDriverProfile
from intel_device_plugins.plugins.idxd.discovery import DSA, IAA
from intel_device_plugins.plugins.idxd.dra import WorkQueueDriverProfile
from intel_device_plugins.plugins.npu.dra import NpuDriverProfile
from intel_device_plugins.plugins.qat.discovery import DpdkConfig, QatPaths
from intel_device_plugins.plugins.qat.dra import QatDriverProfile
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin
from intel_device_plugins.plugins.sgx.dra import SgxDriverProfile
from intel_device_plugins.sim.qat import FakeTreeBinder, load_driver
from k8stest.controlplane import ControlPlane
from tests.builders import two_socket_node

pytestmark = pytest.mark.k8s

DRIVER = "gpu.intel.com"
T = TypeVar("T")


def gpu(index: int, **kwargs: Any) -> Device:
    fields: dict[str, Any] = {
        "name": f"card{index}",
        "attributes": {
            "driver": "i915",
            "pciId": "0x56a0",
            "family": "Arc",
            "numaNode": index % 2,
            "sriov": "none",
            "firmware": Version("1.2.3-rc.1+build.5"),
            "integrated": False,
            STANDARD_PCI_BUS_ID: f"0000:{index // 32 + 1:02x}:{index % 32:02x}.0",
            STANDARD_PCIE_ROOT: f"pci0000:{index // 32:02x}",
        },
        "capacity": {
            "memory": Capacity(
                "16Gi", RequestPolicy(default="16Gi", valid_range_min="256Mi", valid_range_step="256Mi")
            ),
            "millicores": Capacity(
                "1000", RequestPolicy(default="1000", valid_values=("100", "500", "1000"))
            ),
        },
        "allow_multiple_allocations": True,
    }
    fields.update(kwargs)
    return Device(**fields)


def gpus(count: int) -> Inventory:
    return Inventory(devices=tuple(gpu(i) for i in range(count)))


async def until(what: str, probe: Callable[[], Awaitable[T | None]], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = await probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def client(k8s_control_plane: ControlPlane) -> AsyncIterator[AsyncClient]:
    c = AsyncClient(config=KubeConfig.from_file(k8s_control_plane.admin_kubeconfig), field_manager="dra-test")
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def rest(k8s_control_plane: ControlPlane) -> AsyncIterator[RestClient]:
    """The publisher's own client; the tests look and meddle through lightkube, an independent one."""
    c = RestClient(kubeconfig_config(k8s_control_plane.admin_kubeconfig), field_manager="dra-test")
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def node(kwok_nodes: Callable[..., list[str]]) -> str:
    (name,) = kwok_nodes(1)
    return name


async def slices(client: AsyncClient, node: str) -> list[dict[str, Any]]:
    fields: dict[str, Any] = {"spec.driver": DRIVER, "spec.nodeName": node}
    listed = [s.to_dict() async for s in client.list(ResourceSlice, fields=fields)]
    return sorted(listed, key=lambda s: s["metadata"]["name"])


def device_names(listed: list[dict[str, Any]]) -> list[str]:
    return sorted(d["name"] for s in listed for d in s["spec"].get("devices") or [])


async def running(publisher: SlicePublisher) -> asyncio.Task[None]:
    task = asyncio.create_task(publisher.run())
    await asyncio.sleep(0.5)  # listed and watching
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_200_devices_are_two_slices_the_api_server_accepts_and_one_change_is_one_update(
    client: AsyncClient, rest: RestClient, node: str
) -> None:
    publisher = SlicePublisher(rest, DRIVER, node)
    first = await publisher.publish(gpus(200))
    assert first is not None and len(first.creates) == 2
    listed = await slices(client, node)
    assert [len(s["spec"]["devices"]) for s in listed] == [128, 72]
    assert device_names(listed) == sorted(f"card{i}" for i in range(200))
    node_uid = (await client.get(Node, node)).metadata.uid  # type: ignore[union-attr]
    for s in listed:
        assert s["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 2}
        assert s["metadata"]["ownerReferences"][0]["uid"] == node_uid

    # The API server wrote quantities its own way (1000 as 1k): publishing again still makes no call.
    assert await publisher.publish(gpus(200)) is None
    assert publisher.stats == PublishStats(creates=2)

    changed = list(gpus(200).devices)
    changed[150] = gpu(150, attributes={"driver": "xe"})
    await publisher.publish(Inventory(devices=tuple(changed)))
    assert publisher.stats == PublishStats(creates=2, updates=1)
    after = await slices(client, node)
    assert [s["spec"]["pool"]["generation"] for s in after] == [1, 1]
    card150 = next(d for s in after for d in s["spec"]["devices"] if d["name"] == "card150")
    assert card150["attributes"] == {"driver": {"string": "xe"}}


async def test_taints_counter_sets_and_partitions_pass_validation_and_republish_as_no_op(
    client: AsyncClient, rest: RestClient, node: str
) -> None:
    publisher = SlicePublisher(rest, DRIVER, node)
    sets = (CounterSet("card0-pf", {"memory": "16Gi", "millicores": "1000"}),)
    vfs = tuple(
        Device(
            name=f"card0-vf{i}",
            attributes={"sriov": "vf"},
            consumes_counters=(CounterConsumption("card0-pf", {"memory": "4Gi", "millicores": "250"}),),
        )
        for i in range(4)
    )
    sick = gpu(1, health=Health.UNHEALTHY, health_message="GPU hang detected: engine rcs0 (reset 3 times)")
    inv = Inventory(devices=(*vfs, sick, gpu(2)), counter_sets=sets)
    await publisher.publish(inv)
    listed = await slices(client, node)
    assert [sorted(k for k in s["spec"] if k in ("devices", "sharedCounters")) for s in listed] == [
        ["sharedCounters"],
        ["devices"],
    ]
    tainted = next(d for d in listed[1]["spec"]["devices"] if d["name"] == "card1")
    (taint,) = tainted["taints"]
    assert (taint["key"], taint["effect"]) == ("gpu.intel.com/unhealthy", "NoSchedule")
    assert taint["value"] == "GPU-hang-detected-engine-rcs0-reset-3-times"
    assert taint.get("timeAdded")  # stamped by the API server, and no reason for another write:
    assert await publisher.publish(inv) is None
    assert publisher.stats == PublishStats(creates=2)


async def test_slices_deleted_or_edited_by_someone_else_are_put_back(
    client: AsyncClient, rest: RestClient, node: str
) -> None:
    publisher = SlicePublisher(rest, DRIVER, node)
    await publisher.publish(gpus(200))
    task = await running(publisher)
    try:
        victim, edited = (s["metadata"]["name"] for s in await slices(client, node))
        await client.delete(ResourceSlice, victim)

        async def restored() -> bool:
            return device_names(await slices(client, node)) == sorted(f"card{i}" for i in range(200))

        await until("the deleted slice to be created again", restored)
        await client.patch(
            ResourceSlice, edited, {"spec": {"devices": [{"name": "card199"}]}}, patch_type=PatchType.MERGE
        )
        await until("the edited slice to be restored", restored)
        assert publisher.stats.creates == 3 and publisher.stats.updates >= 1
    finally:
        await stop(task)


async def test_an_inventory_published_while_the_api_server_is_down_arrives_after_its_restart(
    k8s_control_plane: ControlPlane, client: AsyncClient, rest: RestClient, node: str
) -> None:
    publisher = SlicePublisher(rest, DRIVER, node, retry_s=0.2)
    await publisher.publish(gpus(4))
    task = await running(publisher)
    try:
        restart = asyncio.create_task(asyncio.to_thread(k8s_control_plane.restart_apiserver, down_for=2.0))

        async def down() -> bool:
            try:
                await client.get(Node, node)
                return False
            except Exception:
                return True

        await until("the API server to go down", down)
        with pytest.raises(Exception):  # noqa: B017 - the client's connection error, whichever it is
            await publisher.publish(gpus(6))
        await restart

        async def six() -> bool:
            return device_names(await slices(client, node)) == sorted(f"card{i}" for i in range(6))

        await until("the inventory published during the outage", six, timeout=60)
    finally:
        await stop(task)


async def test_withdraw_deletes_the_slices_and_run_leaves_them_gone(
    client: AsyncClient, rest: RestClient, node: str
) -> None:
    publisher = SlicePublisher(rest, DRIVER, node)
    await publisher.publish(gpus(130))
    task = await running(publisher)
    try:
        assert len(await slices(client, node)) == 2
        await publisher.withdraw()
        assert await slices(client, node) == []
        await asyncio.sleep(1.0)  # the watch reports the deletes: nothing is put back
        assert await slices(client, node) == []
    finally:
        await stop(task)


async def test_slices_go_with_their_node(client: AsyncClient, rest: RestClient, node: str) -> None:
    publisher = SlicePublisher(rest, DRIVER, node)
    await publisher.publish(gpus(130))
    task = await running(publisher)
    try:
        await client.delete(Node, node)

        async def gone() -> bool:
            return await slices(client, node) == []

        await until("the garbage collector to delete the node's slices", gone, timeout=60)
        await asyncio.sleep(1.0)  # the publisher cannot own slices by a node that is gone: none come back
        assert await slices(client, node) == []
    finally:
        await stop(task)


def _qat(root: Path) -> DriverProfile:
    tree = two_socket_node(
        root, "[[qat]]\nvfs = 4\nservices = 'sym;asym'\n[[qat]]\nvfs = 2\nservices = 'dc'\n"
    )
    load_driver(tree, "vfio-pci")
    return QatDriverProfile(QatDpdkPlugin(QatPaths(tree.root), DpdkConfig(), binder=FakeTreeBinder(tree)))


def _on(spec: str, make: Callable[[str], DriverProfile]) -> Callable[[Path], DriverProfile]:
    def build(root: Path) -> DriverProfile:
        two_socket_node(root, spec)
        return make(str(root))

    return build


# Each kind's profile on a simulated node with some of everything it publishes.
KINDS: dict[str, Callable[[Path], DriverProfile]] = {
    "dsa": _on("[[dsa]]\ncount = 2\nwqs = 4\nwq_mode = 'mixed'\n", lambda r: WorkQueueDriverProfile(DSA, r)),
    "iaa": _on("[[iaa]]\nwqs = 2\n", lambda r: WorkQueueDriverProfile(IAA, r)),
    "dlb": _on("[[dlb]]\ncount = 2\nvfs = 2\n", DlbDriverProfile),
    "npu": _on("[[npu]]\ncount = 2\nnuma_node = 1\n", NpuDriverProfile),
    "sgx": _on("[[sgx]]\nepc_bytes_per_node = 1073741824\n", SgxDriverProfile),
    "fpga-af": _on("[[fpga]]\ncount = 2\nports = 2\n", lambda r: FpgaDriverProfile(r, Mode.AF)),
    "fpga-region": _on("[[fpga]]\ncount = 2\nports = 1\n", lambda r: FpgaDriverProfile(r, Mode.REGION)),
    "qat": _qat,
    "gpu": _on(
        "[[gpu]]\ncount = 2\nmemory_bytes = 17179869184\ntotalvfs = 8\n"
        "[[gpu]]\ndriver = 'xe'\ndevice_id = '0xe20b'\ntiles = 2\nmemory_bytes = 25769803776\nnuma_node = 1\n"
        "[[gpu]]\nvfs = 2\n"
        "[[gpu]]\ndevice_id = '0x4680'\n",
        lambda r: GpuDriverProfile(prefix=r),
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_every_kinds_devices_pass_the_api_servers_validation(
    client: AsyncClient, rest: RestClient, node: str, kind: str, tmp_path: Path
) -> None:
    profile = KINDS[kind](tmp_path / "node")
    inventory = profile.scan()
    assert inventory.devices, f"{kind}: the simulated node has no devices: {inventory.problems}"
    publisher = SlicePublisher(rest, profile.driver_name, node)
    await publisher.publish(inventory)
    fields: dict[str, Any] = {"spec.driver": profile.driver_name, "spec.nodeName": node}
    listed = [s.to_dict() async for s in client.list(ResourceSlice, fields=fields)]
    published = sorted(d["name"] for s in listed for d in s["spec"].get("devices") or [])
    assert published == sorted(d.name for d in inventory.devices)
    assert await publisher.publish(inventory) is None, (
        f"{kind}: the API server's answer differs from the plan"
    )
    await publisher.withdraw()
