"""Shell: keeps a MappingStore current from list/watch of both FPGA kinds across all namespaces."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from lightkube import AsyncClient
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_namespaced_resource

from intel_device_plugins.kube.watch import follow as follow_resource
from intel_device_plugins.webhooks.store import GROUP, VERSION, FpgaKind, MappingStore


def resource_class(kind: FpgaKind) -> type[NamespacedResource]:
    return create_namespaced_resource(GROUP, VERSION, kind.kind, kind.plural)


def _apply(store: MappingStore, kind: FpgaKind, event: str, obj: dict[str, Any]) -> None:
    if event == "DELETED":
        store.delete(kind, obj)
    else:
        store.upsert(kind, obj)


async def follow(
    client: AsyncClient, store: MappingStore, kind: FpgaKind, resync_s: float = 300.0, retry_s: float = 2.0
) -> None:
    """Run until cancelled: list, then watch, ``kind`` into ``store``; errors are logged and retried."""
    await follow_resource(
        client,
        resource_class(kind),
        functools.partial(store.replace, kind),
        functools.partial(_apply, store, kind),
        namespace="*",
        resync_s=resync_s,
        retry_s=retry_s,
    )


async def follow_all(client: AsyncClient, store: MappingStore) -> None:
    async with asyncio.TaskGroup() as group:
        for kind in FpgaKind:
            group.create_task(follow(client, store, kind))
