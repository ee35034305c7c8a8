"""Keeps the node's ResourceSlices equal to the latest inventory: the asyncio shell around :mod:`.slices`.

The publisher holds a copy of its own slices (those of its driver on its node, by field selector), kept
current by its own writes and by a list-watch (:func:`intel_device_plugins.kube.rest.follow`). Every sync
plans against that copy and makes only the calls the plan lists, so a repeated ``publish`` of an unchanged
inventory costs no API call. A write that meets a newer object (409) or a missing one (404) means the copy
is stale: it is listed again and the plan made again.

``run`` repairs what others do: a slice deleted or edited by someone else is put back, and after an API
server outage the relist that ``follow`` makes brings a sync that publishes whatever changed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from intel_device_plugins.dra.model import Inventory
from intel_device_plugins.dra.slices import SlicePlan, desired_slices, plan
from intel_device_plugins.kube.outage import OutageLog
from intel_device_plugins.kube.rest import NODES, RESOURCE_SLICES, RestClient, follow, is_status
from intel_device_plugins.kube.workqueue import backoff

log = logging.getLogger(__name__)

MAX_ATTEMPTS: Final = 5
"""Plans tried per sync when writes keep meeting a stale copy; beyond that the error is raised."""


@dataclass(frozen=True)
class PublishStats:
    """API writes made so far, as the Go publisher counts them."""

    creates: int = 0
    updates: int = 0
    deletes: int = 0


def _resource_version(obj: Mapping[str, Any]) -> int | None:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return None


def _newer(candidate: Mapping[str, Any], held: Mapping[str, Any] | None) -> bool:
    """Whether ``candidate`` supersedes ``held``: a watch event may arrive after the answer to our own
    later write, and must not roll the copy back (resource versions are integers on etcd)."""
    if held is None:
        return True
    new, old = _resource_version(candidate), _resource_version(held)
    return new is None or old is None or new >= old


class SlicePublisher:
    """Publishes one driver's devices on one node as ResourceSlices, owned by the Node."""

    def __init__(
        self,
        client: RestClient,
        driver: str,
        node_name: str,
        *,
        repair_delay_s: float = 0.2,
        resync_s: float = 300.0,
        retry_s: float = 1.0,
    ) -> None:
        self._client = client
        self._driver = driver
        self._node_name = node_name
        self._repair_delay_s = repair_delay_s
        self._resync_s = resync_s
        self._retry_s = retry_s
        self._inventory: Inventory | None = None
        self._node_uid: str | None = None
        self._held: dict[str, dict[str, Any]] | None = None  # None: not listed yet
        self._built: tuple[Inventory, str, tuple[dict[str, Any], ...]] | None = None
        self._lock = asyncio.Lock()
        self._wanted = asyncio.Event()
        self._creates = self._updates = self._deletes = 0
        self._outage = OutageLog(f"publishing {driver} slices of node {node_name}", log)

    @property
    def stats(self) -> PublishStats:
        return PublishStats(self._creates, self._updates, self._deletes)

    @property
    def fields(self) -> dict[str, str]:
        """The field selector naming this publisher's slices."""
        return {"spec.driver": self._driver, "spec.nodeName": self._node_name}

    async def publish(self, inventory: Inventory) -> SlicePlan | None:
        """Make the slices show ``inventory``; answers the plan carried out last (None: nothing to do).

        A bad inventory raises :class:`~intel_device_plugins.dra.slices.SliceError` and changes nothing.
        An API error is raised too, but the inventory is kept: ``run`` publishes it once the API answers.
        """
        uid = self._node_uid
        built = desired_slices(self._driver, self._node_name, uid or "-", inventory)  # refuse bad input now
        if uid is not None:
            self._built = (inventory, uid, built)
        self._inventory = inventory
        try:
            return await self._sync()
        except Exception:
            self._wanted.set()  # run's repair loop retries, with back-off
            raise

    async def withdraw(self) -> None:
        """Delete this driver's slices on this node (clean shutdown); ``run`` no longer puts them back."""
        self._inventory = None
        async with self._lock:
            await self._relist()
            assert self._held is not None
            for name in sorted(self._held):
                await self._delete(name)

    async def run(self) -> None:
        """Follow the slices and repair them until cancelled."""
        repairer = asyncio.create_task(self._repair_loop())
        try:
            await follow(
                self._client,
                RESOURCE_SLICES,
                self._on_list,
                self._on_event,
                fields=self.fields,
                resync_s=self._resync_s,
                retry_s=self._retry_s,
            )
        finally:
            repairer.cancel()
            await asyncio.gather(repairer, return_exceptions=True)

    # --- the copy of the API's state --------------------------------------------------------------------

    def _on_list(self, objects: Sequence[dict[str, Any]]) -> None:
        self._held = {o["metadata"]["name"]: o for o in objects}
        self._node_uid = None  # a relist follows errors: the node may have been replaced meanwhile
        self._wanted.set()

    def _on_event(self, event: str, obj: dict[str, Any]) -> None:
        if self._held is None:
            return
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        held = self._held.get(name)
        if event == "DELETED":
            if held is None or held["metadata"].get("uid") == obj["metadata"].get("uid"):
                self._held.pop(name, None)
        elif event in ("ADDED", "MODIFIED") and _newer(obj, held):
            self._held[name] = obj
        self._wanted.set()  # usually our own write coming back: the plan is then empty

    async def _relist(self) -> None:
        listed = await self._client.list(RESOURCE_SLICES, fields=self.fields)
        self._held = {o["metadata"]["name"]: o for o in listed.items}

    # --- syncing ----------------------------------------------------------------------------------------

    async def _repair_loop(self) -> None:
        failures = 0
        while True:
            await self._wanted.wait()
            await asyncio.sleep(self._repair_delay_s)  # let a burst of events settle into one sync
            self._wanted.clear()
            try:
                await self._sync()
                failures = 0
                self._outage.succeeded()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay = backoff(failures, base=self._retry_s)
                self._outage.failed(exc, delay)  # logged when it starts, each minute, and when it ends
                await asyncio.sleep(delay)
                self._wanted.set()

    async def _uid(self) -> str:
        if self._node_uid is None:
            node = await self._client.get(NODES, self._node_name)
            uid = (node.get("metadata") or {}).get("uid")
            if not uid:
                raise RuntimeError(f"node {self._node_name} has no UID")
            self._node_uid = str(uid)
        return self._node_uid

    async def _sync(self) -> SlicePlan | None:
        async with self._lock:
            last: BaseException | None = None
            node_checked = False
            for _ in range(MAX_ATTEMPTS):
                inventory = self._inventory
                if inventory is None:
                    return None
                node_checked = node_checked or self._node_uid is None  # looked at in this sync
                desired = self._desired(inventory, await self._uid())
                if self._held is None:
                    await self._relist()
                assert self._held is not None
                todo = plan(self._held.values(), desired)
                if todo.empty:
                    return None
                if todo.creates and not node_checked:
                    # A slice to create may be one the garbage collector took with a deleted node: own
                    # nothing by a node that is gone (get raises 404), nor by its predecessor's UID.
                    node_checked, self._node_uid = True, None
                    continue
                try:
                    await self._apply(todo)
                    return todo
                except Exception as exc:
                    if not is_status(exc, 404, 409):
                        raise
                    last = exc  # our copy was stale: look again and plan again
                    await self._relist()
            assert last is not None
            raise last

    def _desired(self, inventory: Inventory, uid: str) -> tuple[dict[str, Any], ...]:
        """Built once per inventory and owner: every watch event asks again, mostly about the same."""
        if self._built is None or self._built[0] is not inventory or self._built[1] != uid:
            self._built = (inventory, uid, desired_slices(self._driver, self._node_name, uid, inventory))
        return self._built[2]

    async def _apply(self, todo: SlicePlan) -> None:
        log.info(
            "node %s driver %s: pool generation %d, %d deletes, %d updates, %d creates",
            self._node_name, self._driver, todo.generation,
            len(todo.deletes), len(todo.updates), len(todo.creates),
        )  # fmt: skip
        for name in todo.deletes:
            await self._delete(name)
        for obj in todo.updates:
            self._store(await self._client.replace(RESOURCE_SLICES, obj))
            self._updates += 1
        for obj in todo.creates:
            self._store(await self._client.create(RESOURCE_SLICES, obj))
            self._creates += 1

    async def _delete(self, name: str) -> None:
        try:
            await self._client.delete(RESOURCE_SLICES, name)
            self._deletes += 1
        except Exception as exc:
            if not is_status(exc, 404):  # already gone is what we wanted
                raise
        if self._held is not None:
            self._held.pop(name, None)

    def _store(self, obj: dict[str, Any]) -> None:
        if self._held is not None:
            self._held[obj["metadata"]["name"]] = obj
