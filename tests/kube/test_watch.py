"""The list-watch-relist helper with selectors, as RMD and the operator use it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from lightkube import AsyncClient

from intel_device_plugins.kube.watch import as_events, follow


class Client:
    """Answers one listing and one watch event, recording the selectors it was asked with."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    async def list(self, res: Any, **selectors: Any) -> AsyncIterator[dict[str, Any]]:
        self.asked.append(selectors)
        yield {"metadata": {"name": "listed"}}

    async def watch(self, res: Any, **selectors: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        yield "MODIFIED", {"metadata": {"name": "watched"}}
        await asyncio.Event().wait()


async def test_listing_arrives_as_added_events_then_the_watch_follows() -> None:
    client = Client()
    seen: list[tuple[str, str]] = []

    def handler(event: str, obj: dict[str, Any]) -> None:
        seen.append((event, obj["metadata"]["name"]))

    task = asyncio.create_task(
        follow(
            cast(AsyncClient, client), object, as_events(handler), handler, namespace="*", fields={"a": "b"}
        )
    )
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert seen == [("ADDED", "listed"), ("MODIFIED", "watched")]
    assert client.asked == [{"namespace": "*", "fields": {"a": "b"}}]  # no labels asked, none sent


async def test_pages_and_shape() -> None:
    """``chunk_size`` goes to the list only (a watch has no pages); ``shape`` reduces every object."""
    client = Client()
    listed: list[Any] = []
    watched: list[Any] = []

    def shape(obj: dict[str, Any]) -> dict[str, Any]:
        return {"name": obj["metadata"]["name"]}

    task = asyncio.create_task(
        follow(
            cast(AsyncClient, client),
            object,
            listed.extend,
            lambda event, obj: watched.append(obj),
            chunk_size=100,
            shape=shape,
        )
    )
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert listed == [{"name": "listed"}] and watched == [{"name": "watched"}]
    assert client.asked == [{"namespace": None, "chunk_size": 100}]
