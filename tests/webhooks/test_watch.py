"""The watch shell against a scripted client: listing, events, relist after errors, a missing CRD."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import Status

from intel_device_plugins.webhooks.handlers import NOT_SYNCED, fpga_review
from intel_device_plugins.webhooks.store import FpgaKind, MappingStore
from intel_device_plugins.webhooks.watch import follow
from tests.webhooks.podfixtures import af, pod, review, with_resources


class ScriptedClient:
    """``list`` answers from ``listings`` (an exception is raised); ``watch`` yields ``events`` then waits."""

    def __init__(self, listings: list[Any], events: list[tuple[str, dict[str, Any]]]) -> None:
        self.listings = listings
        self.events = events
        self.lists = 0

    async def list(self, res: Any, namespace: str) -> AsyncIterator[dict[str, Any]]:
        self.lists += 1
        answer = self.listings[min(self.lists, len(self.listings)) - 1]
        if isinstance(answer, Exception):
            raise answer
        for obj in answer:
            yield obj

    async def watch(self, res: Any, namespace: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        for event in self.events:
            yield event
        await asyncio.Event().wait()


async def run_for(client: ScriptedClient, store: MappingStore, seconds: float) -> None:
    task = asyncio.create_task(
        follow(cast(AsyncClient, client), store, FpgaKind.ACCELERATOR_FUNCTION, resync_s=10, retry_s=0.01)
    )
    await asyncio.sleep(seconds)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_list_then_events_reach_the_store() -> None:
    store = MappingStore()
    client = ScriptedClient([[af("a")]], [("ADDED", af("b")), ("DELETED", af("a")), ("MODIFIED", af("c"))])
    await run_for(client, store, 0.1)
    assert set(store.mappings("default").by_name) == {"fpga.intel.com/b", "fpga.intel.com/c"}


async def test_errors_are_retried_and_a_missing_crd_means_nothing_to_map() -> None:
    store = MappingStore()
    store.replace(FpgaKind.FPGA_REGION, [])
    gone = ApiError(status=Status(code=404, message="the server could not find the requested resource"))
    client = ScriptedClient([RuntimeError("connection refused"), gone], [])
    assert not store.synced
    await run_for(client, store, 0.1)
    assert client.lists == 2 and store.synced and store.mappings("default").by_name == {}


def test_pods_asking_for_fpga_are_refused_until_the_mappings_are_loaded() -> None:
    store = MappingStore()
    handle = fpga_review(store)
    asking = review(pod(with_resources("c", {"fpga.intel.com/a": "1"})))
    answer = handle(asking)["response"]
    assert answer["allowed"] is False and answer["status"]["message"] == NOT_SYNCED
    assert handle(review(pod(with_resources("c", {"cpu": "1"}))))["response"]["allowed"] is True
    store.replace(FpgaKind.ACCELERATOR_FUNCTION, [af("a")])
    store.replace(FpgaKind.FPGA_REGION, [])
    assert handle(asking)["response"]["allowed"] is True
