"""The FPGA webhook keeps the FPGA driver's DeviceClasses in step with the objects it watches.

Opt-in (``--manage-deviceclasses``). The classes are those ``fpgaclasses.generate`` makes from every
namespace's AcceleratorFunctions and FpgaRegions, labelled ``app.kubernetes.io/managed-by:
intel-fpga-admissionwebhook``. Only classes with that label are changed or deleted; a class of the same
name without it (applied from ``intel_fpga_deviceclasses``, say) is left alone and reported. Nothing is
deleted before both kinds have been listed once, so a restart never withdraws a class pods still need.

``plan`` is the pure core; :class:`ClassSync` lists the classes and applies the plan whenever the
objects or the classes change, and every ``resync_s``, so it converges from any state. Several replicas
may run it: they compute the same plan, and a conflict only means another got there first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import DeviceClass

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.kube.apierrors import is_status
from intel_device_plugins.kube.watch import follow
from intel_device_plugins.webhooks.fpgaclasses import Generated, generate
from intel_device_plugins.webhooks.store import FpgaKind, MappingStore

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "intel-fpga-admissionwebhook"
log = logging.getLogger(__name__)


def managed_document(spec_doc: Mapping[str, Any]) -> dict[str, Any]:
    """A generated class with the label that marks it as this webhook's."""
    meta = dict(spec_doc["metadata"])
    meta["labels"] = {**meta.get("labels", {}), MANAGED_BY_LABEL: MANAGED_BY}
    return {**spec_doc, "metadata": meta}


def desired_classes(generated: Generated) -> list[dict[str, Any]]:
    return [managed_document(device_class(spec)) for spec in generated.classes]


def is_managed(obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


@dataclass(frozen=True)
class ClassPlan:
    create: tuple[dict[str, Any], ...] = ()
    update: tuple[dict[str, Any], ...] = ()
    """Desired documents carrying the existing object's resourceVersion."""
    delete: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    """Names wanted but held by a class this webhook does not manage."""

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _differs(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    labels = (existing.get("metadata") or {}).get("labels") or {}
    wanted = desired["metadata"]["labels"]
    return existing.get("spec") != desired["spec"] or any(labels.get(k) != v for k, v in wanted.items())


def plan(
    existing: Iterable[Mapping[str, Any]], desired: Sequence[Mapping[str, Any]], may_delete: bool
) -> ClassPlan:
    """What turns ``existing`` (every DeviceClass) into ``desired``, touching managed classes only."""
    by_name = {str(o["metadata"]["name"]): o for o in existing}
    wanted = {str(d["metadata"]["name"]) for d in desired}
    create, update, conflicts = [], [], []
    for doc in desired:
        name = str(doc["metadata"]["name"])
        current = by_name.get(name)
        if current is None:
            create.append(dict(doc))
        elif not is_managed(current):
            conflicts.append(name)
        elif _differs(current, doc):
            version = current["metadata"].get("resourceVersion")
            update.append({**doc, "metadata": {**doc["metadata"], "resourceVersion": version}})
    delete = sorted(n for n, o in by_name.items() if is_managed(o) and n not in wanted) if may_delete else []
    return ClassPlan(tuple(create), tuple(update), tuple(delete), tuple(conflicts))


def _as_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


class ClassSync:
    """The shell: reconcile on a change of the store or of the classes, and every ``resync_s``."""

    def __init__(
        self, client: AsyncClient, store: MappingStore, wake: asyncio.Event, resync_s: float = 60.0
    ) -> None:
        """``wake`` is set by whoever changes ``store`` (its ``on_change``)."""
        self._client = client
        self._store = store
        self._resync_s = resync_s
        self._wake = wake
        self._reported: set[str] = set()

    def changed(self) -> None:
        """Something the classes depend on changed (safe to call from any callback of the loop)."""
        self._wake.set()

    async def reconcile(self) -> ClassPlan:
        generated = generate((kind, obj) for kind in FpgaKind for obj in self._store.objects(kind))
        problems = set(generated.problems)
        for problem in sorted(problems - self._reported):
            log.warning("no DeviceClass for %s", problem)
        self._reported = problems
        existing = [_as_dict(o) async for o in self._client.list(DeviceClass)]
        todo = plan(existing, desired_classes(generated), may_delete=self._store.synced)
        for name in todo.conflicts:
            log.warning("DeviceClass %s exists without label %s: left alone", name, MANAGED_BY_LABEL)
        for doc in todo.create:
            name = doc["metadata"]["name"]
            await self._apply("create", name, self._client.create(DeviceClass.from_dict(doc)))
        for doc in todo.update:
            name = doc["metadata"]["name"]
            await self._apply("update", name, self._client.replace(DeviceClass.from_dict(doc)))
        for name in todo.delete:
            await self._apply("delete", name, self._client.delete(DeviceClass, name))
        return todo

    async def _apply(self, what: str, name: str, call: Any) -> None:
        try:
            await call
            log.info("DeviceClass %s: %sd", name, what.rstrip("e"))
        except Exception as exc:
            if not is_status(exc, 404, 409):  # gone or changed meanwhile: the next round sees it
                raise
            log.info("DeviceClass %s: %s raced with another change; looking again", name, what)
            self._wake.set()

    async def run(self, retry_s: float = 2.0) -> None:
        """Run until cancelled; errors are logged and retried."""
        async with asyncio.TaskGroup() as group:
            group.create_task(
                follow(
                    self._client,
                    DeviceClass,
                    lambda _objs: self.changed(),
                    lambda _event, _obj: self.changed(),
                    labels={MANAGED_BY_LABEL: MANAGED_BY},
                    resync_s=self._resync_s,
                )
            )
            group.create_task(self._loop(retry_s))

    async def _loop(self, retry_s: float) -> None:
        while True:
            try:
                async with asyncio.timeout(self._resync_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            if not self._store.synced:
                continue  # its first listing wakes us again
            try:
                await self.reconcile()
            except Exception as exc:
                log.warning("syncing the FPGA DeviceClasses failed: %s; again in %.0f s", exc, retry_s)
                await asyncio.sleep(retry_s)
                self._wake.set()
