"""The publisher's shell on a fake API: stale copies, events that come late, repairs and withdrawal."""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest

from intel_device_plugins.dra.model import Device, Inventory
from intel_device_plugins.dra.publisher import PublishStats, SlicePublisher
from intel_device_plugins.dra.slices import SliceError
from intel_device_plugins.kube.rest import NODES, RESOURCE_SLICES, ApiError, ObjectList, Resource, RestClient

DRIVER = "gpu.intel.com"
NODE = "node-1"


def cards(count: int, driver: str = "i915") -> Inventory:
    return Inventory(devices=tuple(Device(f"card{i}", attributes={"driver": driver}) for i in range(count)))


def error(code: int) -> ApiError:
    return ApiError(code, f"status {code}")


class Api:
    """ResourceSlices in a dict, with resource versions, conflicts, and a watch fed from a queue."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.node_uid: str | None = "uid-node-1"
        self._versions = itertools.count(1)

    def _store(self, obj: dict[str, Any], uid: str) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"].update(uid=uid, resourceVersion=str(next(self._versions)))
        self.slices[obj["metadata"]["name"]] = obj
        return obj

    async def get(self, res: Resource, name: str) -> dict[str, Any]:
        assert res == NODES
        self.calls.append("get")
        if self.node_uid is None:
            raise error(404)
        return {"metadata": {"name": name, "uid": self.node_uid}}

    async def list(self, res: Resource, **selectors: Any) -> ObjectList:
        assert res == RESOURCE_SLICES
        self.calls.append("list")
        assert selectors["fields"] == {"spec.driver": DRIVER, "spec.nodeName": NODE}
        return ObjectList(tuple(copy.deepcopy(list(self.slices.values()))), str(next(self._versions)))

    async def watch(self, res: Resource, **selectors: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        assert res == RESOURCE_SLICES and selectors["resource_version"]
        while True:
            event, obj = await self.events.get()
            yield event, copy.deepcopy(obj)

    async def create(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        assert res == RESOURCE_SLICES
        self.calls.append("create")
        if body["metadata"]["name"] in self.slices:
            raise error(409)
        return copy.deepcopy(self._store(body, f"uid-{next(self._versions)}"))

    async def replace(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        assert res == RESOURCE_SLICES
        self.calls.append("replace")
        held = self.slices.get(body["metadata"]["name"])
        if held is None:
            raise error(404)
        if held["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise error(409)
        return copy.deepcopy(self._store(body, held["metadata"]["uid"]))

    async def delete(self, res: Resource, name: str) -> None:
        assert res == RESOURCE_SLICES
        self.calls.append("delete")
        if self.slices.pop(name, None) is None:
            raise error(404)

    def edit_behind_the_back(self, name: str) -> dict[str, Any]:
        """Another writer changes a slice: a newer version the publisher's copy does not know."""
        obj = copy.deepcopy(self.slices[name])
        obj["spec"]["devices"] = obj["spec"]["devices"][:1]
        return self._store(obj, obj["metadata"]["uid"])


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


def publisher(api: Api, **kwargs: Any) -> SlicePublisher:
    return SlicePublisher(cast(RestClient, api), DRIVER, NODE, repair_delay_s=0.01, retry_s=0.01, **kwargs)


async def test_an_unchanged_inventory_costs_no_call() -> None:
    api = Api()
    pub = publisher(api)
    await pub.publish(cards(3))
    assert api.calls == ["get", "list", "create"]
    api.calls.clear()
    assert await pub.publish(cards(3)) is None
    assert api.calls == [] and pub.stats == PublishStats(creates=1)


async def test_a_stale_copy_is_listed_again_and_the_write_made_on_the_new_version() -> None:
    api = Api()
    pub = publisher(api)
    await pub.publish(cards(3))
    (name,) = api.slices
    api.edit_behind_the_back(name)
    api.calls.clear()
    await pub.publish(cards(3, driver="xe"))
    assert api.calls == ["replace", "list", "replace"]
    assert [d["attributes"]["driver"] for d in api.slices[name]["spec"]["devices"]] == [{"string": "xe"}] * 3


async def test_a_bad_inventory_is_refused_before_any_call_and_the_last_good_one_kept() -> None:
    api = Api()
    pub = publisher(api)
    with pytest.raises(SliceError, match="device 'Card0'"):
        await pub.publish(Inventory(devices=(Device("Card0"),)))
    assert api.calls == []


async def test_run_repairs_a_deletion_and_ignores_its_own_late_events() -> None:
    api = Api()
    pub = publisher(api)
    await pub.publish(cards(2))
    (name,) = api.slices
    created = copy.deepcopy(api.slices[name])
    task = asyncio.create_task(pub.run())
    try:
        api.calls.clear()
        await until(lambda: api.calls == ["list", "get"])  # listed, and the sync after it found nothing to do
        api.calls.clear()
        api.events.put_nowait(("ADDED", created))  # our own create coming back: nothing to do
        await asyncio.sleep(0.1)
        assert api.calls == []
        del api.slices[name]  # someone deletes it
        api.events.put_nowait(("DELETED", created))
        await until(lambda: name in api.slices)
        assert api.calls == ["get", "create"]
        # The old slice's DELETED event, arriving again, must not drop the new one from the copy.
        api.calls.clear()
        api.events.put_nowait(("DELETED", created))
        await asyncio.sleep(0.1)
        assert api.calls == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_nothing_is_created_for_a_node_that_is_gone_and_withdraw_deletes() -> None:
    api = Api()
    pub = publisher(api)
    await pub.publish(cards(130))
    assert len(api.slices) == 2
    api.node_uid = None
    api.slices.clear()
    with pytest.raises(ApiError):
        await pub.publish(cards(131))
    assert api.slices == {}
    api.node_uid = "uid-node-1-again"
    await pub.publish(cards(131))
    assert {o["metadata"]["ownerReferences"][0]["uid"] for o in api.slices.values()} == {"uid-node-1-again"}
    await pub.withdraw()
    assert api.slices == {}


async def test_a_publish_that_failed_is_retried_by_run() -> None:
    api = Api()
    pub = publisher(api)
    await pub.publish(cards(1))
    (name,) = api.slices
    task = asyncio.create_task(pub.run())
    try:
        await until(lambda: "get" in api.calls[3:])  # listed and checked: nothing to do
        api.node_uid = None  # the node is briefly unreadable (deleted and registered again)
        del api.slices[name]
        with pytest.raises(ApiError):
            await pub.publish(cards(2))
        api.node_uid = "uid-node-1-again"  # no watch event comes: the failed publish itself is retried
        await until(lambda: name in api.slices)
        assert [d["name"] for d in api.slices[name]["spec"]["devices"]] == ["card0", "card1"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_outage_while_repairing_is_logged_when_it_starts_and_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = Api()
    pub = publisher(api)
    await pub.publish(cards(1))
    refusals = 6
    real_get = api.get

    async def get(res: Resource, name: str) -> dict[str, Any]:
        nonlocal refusals
        if refusals:
            refusals -= 1
            raise error(503)
        return await real_get(res, name)

    api.get = get  # type: ignore[method-assign]

    def owners() -> list[str]:
        return [o["uid"] for s in api.slices.values() for o in s["metadata"].get("ownerReferences", [])]

    api.node_uid = "uid-node-1-again"  # the node was registered again: the next sync reads it anew
    task = asyncio.create_task(pub.run())
    try:
        with caplog.at_level(logging.INFO, logger="intel_device_plugins.dra.publisher"):
            await until(lambda: refusals == 0 and owners() == ["uid-node-1-again"])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "intel_device_plugins.dra.publisher"]
    lines = [line for line in lines if "failed" in line or "works again" in line or "still failing" in line]
    assert len(lines) == 2, lines
    assert "publishing gpu.intel.com slices of node node-1 failed: 503" in lines[0]
    assert "works again" in lines[1] and "6 failed attempts" in lines[1]
