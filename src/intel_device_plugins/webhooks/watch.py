"""Shell: keeps a MappingStore current from list/watch of both FPGA kinds across all namespaces.

Each kind is listed (a full replacement of what the store holds) and then watched; the watch reconnects by
itself with its last resourceVersion. The loop relists every ``resync_s`` and after any error, so an event
missed between a list and its watch is corrected within that period.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_namespaced_resource

from intel_device_plugins.webhooks.store import GROUP, VERSION, FpgaKind, MappingStore

log = logging.getLogger(__name__)


def resource_class(kind: FpgaKind) -> type[NamespacedResource]:
    return create_namespaced_resource(GROUP, VERSION, kind.kind, kind.plural)


def _as_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


async def follow(
    client: AsyncClient, store: MappingStore, kind: FpgaKind, resync_s: float = 300.0, retry_s: float = 2.0
) -> None:
    """Run until cancelled: list, then watch, ``kind`` into ``store``; errors are logged and retried."""
    res = resource_class(kind)
    while True:
        try:
            store.replace(kind, [_as_dict(o) async for o in client.list(res, namespace="*")])
            async with asyncio.timeout(resync_s):
                async for event, obj in client.watch(res, namespace="*"):
                    if event == "DELETED":
                        store.delete(kind, _as_dict(obj))
                    else:
                        store.upsert(kind, _as_dict(obj))
        except TimeoutError:
            continue  # periodic relist
        except ApiError as exc:
            if exc.status.code == 404:  # the CRD is not installed: nothing to map until it is
                store.replace(kind, [])
                log.warning(
                    "%s.%s is not installed; looking again in %.0f s", kind.plural, GROUP, resync_s / 10
                )
                await asyncio.sleep(resync_s / 10)
            else:
                log.warning("watching %s failed: %s; retrying in %.0f s", kind.plural, exc, retry_s)
                await asyncio.sleep(retry_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the API server may be away: keep serving what we have and retry
            log.warning("watching %s failed: %s; retrying in %.0f s", kind.plural, exc, retry_s)
            await asyncio.sleep(retry_s)


async def follow_all(client: AsyncClient, store: MappingStore) -> None:
    async with asyncio.TaskGroup() as group:
        for kind in FpgaKind:
            group.create_task(follow(client, store, kind))
