"""The one way to follow the API: list, then watch, and list again now and then and after any error.

A list hands the whole current set to ``on_list``; each watch event then goes to ``on_event``. The loop
relists every ``resync_s`` and after any error, so an event missed between a list and its watch, or while
the API server was away, is corrected within that period. A resource whose CRD is not installed lists as
empty and is looked for again later. Only cancellation ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lightkube import AsyncClient

from intel_device_plugins.kube.apierrors import is_status

log = logging.getLogger(__name__)


def _as_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


async def follow(
    client: AsyncClient,
    res: Any,
    on_list: Callable[[Sequence[dict[str, Any]]], None],
    on_event: Callable[[str, dict[str, Any]], None],
    *,
    namespace: str | None = None,
    labels: Mapping[str, str | tuple[str, ...]] | None = None,
    fields: Mapping[str, str] | None = None,
    resync_s: float = 300.0,
    retry_s: float = 2.0,
    chunk_size: int | None = None,
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> None:
    """Run until cancelled: list ``res`` into ``on_list``, then watch it into ``on_event``.

    A tuple as a label's value selects any of its values (``app in (a,b)``). With ``chunk_size`` the list
    comes in pages of that many; ``shape`` reduces every object, listed or watched, to what the handlers keep,
    so a large listing is held whole only in that reduced form.
    """
    reduce = shape or (lambda obj: obj)
    what = getattr(res, "__name__", str(res))
    selectors: dict[str, Any] = {"namespace": namespace}
    if labels:
        selectors["labels"] = dict(labels)
    if fields:
        selectors["fields"] = dict(fields)
    listing: dict[str, Any] = {**selectors, "chunk_size": chunk_size} if chunk_size else selectors
    while True:
        try:
            on_list([reduce(_as_dict(o)) async for o in client.list(res, **listing)])
            async with asyncio.timeout(resync_s):
                async for event, obj in client.watch(res, **selectors):
                    on_event(event, reduce(_as_dict(obj)))
        except TimeoutError:
            continue  # periodic relist
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the API server may be away: keep what we have and retry
            if is_status(exc, 404):  # the CRD is not installed: nothing there until it is
                on_list([])
                log.warning("%s is not installed; looking again in %.0f s", what, resync_s / 10)
                await asyncio.sleep(resync_s / 10)
            else:
                log.warning("following %s failed: %s; retrying in %.0f s", what, exc, retry_s)
                await asyncio.sleep(retry_s)


def as_events(handler: Callable[[str, dict[str, Any]], None]) -> Callable[[Sequence[dict[str, Any]]], None]:
    """An ``on_list`` for handlers that take events only: each listed object arrives as ``ADDED``."""

    def on_list(objects: Sequence[dict[str, Any]]) -> None:
        for obj in objects:
            handler("ADDED", obj)

    return on_list
