"""A watch that never ends: lightkube resumes interrupted streams, and a failed one is started again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.types import OnErrorAction, OnErrorResult

log = logging.getLogger(__name__)


async def watch_forever(
    client: AsyncClient,
    res: Any,
    handler: Callable[[str, dict[str, Any]], None],
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    fields: Mapping[str, str] | None = None,
) -> None:
    """Call ``handler(event, object as a dict)`` for every event of ``res`` until cancelled."""

    def retry(exc: Exception, count: int) -> OnErrorResult:
        log.info("watch of %s interrupted (%s); resuming", res.__name__, exc)
        return OnErrorResult(OnErrorAction.RETRY, sleep=1.0)

    while True:
        try:
            async for event, obj in client.watch(
                res,
                namespace=namespace,
                labels=dict(labels) if labels else None,
                fields=dict(fields) if fields else None,
                on_error=retry,
            ):
                handler(event, obj.to_dict())
        except Exception as exc:  # a broken stream must not end the process
            log.warning("watch of %s failed: %s", res.__name__, exc)
        await asyncio.sleep(1)
