"""The reconcile loop: list-watch streams feed a work queue; workers apply the pure plan with lightkube.

The streams (``kube/watch.py``: list, watch, relist now and then and after errors) store nothing on the
objects (no finalizers, no annotations). Each event only queues the CR it concerns, and a worker then
reconciles that CR from the current state of the cluster (level-based): the DaemonSet is server-side applied
under ``FIELD_MANAGER`` with force, so a repeat changes nothing and hand edits to managed fields are reverted;
the status is patched only when it differs. Events that merely echo this process's own writes are not queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.generic_resource import GenericGlobalResource, create_global_resource
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Pod
from lightkube.types import PatchType

from intel_device_plugins.kube.apierrors import is_status, status_code
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.watch import follow
from intel_device_plugins.kube.workqueue import WorkQueue, run_worker
from intel_device_plugins.operator.combined import (
    COMBINED_DRA_NAME,
    COMBINED_NAME,
    Member,
    combined_daemonset,
    combined_dra_daemonset,
    served_members,
)
from intel_device_plugins.operator.daemonset import MANAGED_BY_LABEL, MANAGED_BY_VALUE, Owner
from intel_device_plugins.operator.kinds import API_VERSION, GROUP, VERSION, DeviceKind
from intel_device_plugins.operator.model import Condition, PluginStatus, SpecError, parse_spec
from intel_device_plugins.operator.reconcile import (
    CONDITION_NODE_CONFLICT,
    CONDITION_SPEC_VALID,
    compute_status,
    conflict_condition,
    node_conflicts,
    nodes_by_daemonset,
    plan,
    status_patch,
)
from intel_device_plugins.operator.registry import profile_of
from intel_device_plugins.operator.upgrade import effective_spec

FIELD_MANAGER: Final = "intel-deviceplugin-operator"
CONDITION_COMBINED: Final = "CombinedProcess"
ALL_CRS: Final = "*"  # work-queue name that stands for every CR (combined mode reconciles them together)
EVENT_NAMESPACE: Final = "default"  # events about cluster-scoped objects go here
log = logging.getLogger(__name__)

Key = tuple[DeviceKind, str]


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    namespace: str
    kinds: tuple[DeviceKind, ...]
    image_env: Mapping[str, str]
    pull_secret: str = ""
    workers: int = 0
    """Concurrent reconciles; 0 is one per enabled kind, as many as upstream's per-kind controllers run."""
    fpga_service_account: str = ""
    """ServiceAccount of FPGA plugin pods (it may get nodes); empty runs them under the namespace default."""
    dra_service_account: str = ""
    """ServiceAccount of DRA driver pods (its ResourceSlices and claims; ``deploy/operator/rbac``)."""
    resync_s: float = 300.0
    """How often the streams list everything again (every CR is then reconciled): a safety net."""
    combined: bool = False
    """Run every enabled kind in one ``intel_device_plugins`` process per node (one DaemonSet for all CRs)."""
    identity: str = "intel-deviceplugin-operator"
    """Who this process is (the pod name): its identity in the leader election."""


def cr_resources() -> dict[DeviceKind, type[GenericGlobalResource]]:
    """lightkube resource classes for the eight CRs."""
    return {k: create_global_resource(GROUP, VERSION, k.kind, k.plural) for k in DeviceKind}


def owner_key(body: Mapping[str, Any], kinds: tuple[DeviceKind, ...]) -> Key | None:
    """The CR that controls a DaemonSet, if it is one of ours and its kind is enabled."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("apiVersion") == API_VERSION:
            try:
                kind = DeviceKind.from_kind(str(ref.get("kind")))
            except KeyError:
                return None
            return (kind, str(ref.get("name"))) if kind in kinds else None
    return None


POD_PAGE: Final = 100  # paging keeps the peak memory of listing a large cluster's plugin pods low


def _pod_summary(pod: Pod) -> dict[str, Any]:
    """The few fields of a pod that status and conflict detection read, without converting the whole pod."""
    refs = (pod.metadata.ownerReferences or []) if pod.metadata else []
    spec: dict[str, Any] = {}
    if pod.spec is not None:
        if pod.spec.nodeName:
            spec["nodeName"] = pod.spec.nodeName
        elif pod.spec.affinity is not None:
            spec["affinity"] = pod.spec.affinity.to_dict()
    owners = [{"kind": r.kind, "name": r.name, "controller": bool(r.controller)} for r in refs]
    return {"metadata": {"ownerReferences": owners}, "spec": spec}


def _pod_record(body: dict[str, Any]) -> dict[str, Any]:
    """What the pod cache keeps of a listed or watched pod: its name, ``app`` label, owners and placement."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": {"app": (meta.get("labels") or {}).get("app")},
            "ownerReferences": meta.get("ownerReferences") or [],
        },
        "spec": {key: spec[key] for key in ("nodeName", "affinity") if spec.get(key) is not None},
    }


def _pod_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """``_pod_summary`` of a pod as a watch event brings it (plain JSON)."""
    meta = body.get("metadata") or {}
    raw_spec = body.get("spec") or {}
    spec: dict[str, Any] = {}
    if raw_spec.get("nodeName"):
        spec["nodeName"] = raw_spec["nodeName"]
    elif raw_spec.get("affinity") is not None:
        spec["affinity"] = raw_spec["affinity"]
    owners = [
        {"kind": r.get("kind"), "name": r.get("name"), "controller": bool(r.get("controller"))}
        for r in meta.get("ownerReferences") or ()
        if isinstance(r, Mapping)
    ]
    return {"metadata": {"ownerReferences": owners}, "spec": spec}


def _echoes(event: str | None, meta: Mapping[str, Any], own_version: str | None) -> bool:
    """Whether a watch event shows an object as this process last wrote it (a deletion never does)."""
    version = meta.get("resourceVersion")
    return event in ("ADDED", "MODIFIED") and bool(version) and version == own_version


def _holds(have: Mapping[str, Any] | None, want: Mapping[str, Any] | None) -> bool:
    return all((have or {}).get(k) == v for k, v in (want or {}).items())


def _synced(ds: Mapping[str, Any]) -> bool:
    """Whether the DaemonSet controller has handled this DaemonSet: it has written an observedGeneration,
    which it does in the same pass that creates the first pods (so that write always follows them)."""
    status = ds.get("status")
    return isinstance(status, Mapping) and status.get("observedGeneration") is not None


UNSETTLED_RECHECK_SECONDS = 2.0
"""While a DaemonSet rolls, its CR is looked at again this often, whatever events arrive: a status that
follows pods and the DaemonSet's status from two watches converges even when one event is late or lost."""


def _settled(ds: Mapping[str, Any], node_names: int) -> bool:
    """The DaemonSet controller has caught up with the spec, every scheduled pod is ready and the pods the
    status names are as many as it schedules."""
    meta, status = ds.get("metadata") or {}, ds.get("status")
    if not isinstance(status, Mapping):
        return False
    desired = status.get("desiredNumberScheduled")
    return (
        status.get("observedGeneration") == meta.get("generation")
        and status.get("numberReady") == desired
        and node_names == desired
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """Workers that reconcile queued CRs against the API server."""

    def __init__(
        self, client: AsyncClient, config: ControllerConfig, metrics: Metrics, now: Callable[[], str] = _now
    ) -> None:
        self.client = client
        self.cfg = config
        self.metrics = metrics
        self.queue: WorkQueue[Key] = WorkQueue()
        self.resources = cr_resources()
        self._now = now
        # The newest body of every CR the watches brought (this process's own status writes included): a
        # reconcile reads the CR from here instead of asking the API server, and a deleted CR's siblings
        # are found here. Relists replace a kind's entries, so a deletion a broken watch missed goes too.
        self._crs: dict[Key, dict[str, Any]] = {}
        # resourceVersions this process wrote last (CR statuses by key, DaemonSets by name): the watch
        # events that echo them change nothing a reconcile reads, so they are not queued.
        self._own_status: dict[Key, str] = {}
        self._own_daemonset: dict[str, str] = {}
        # The newest body of every owned DaemonSet, and what this process last applied to it (the body,
        # and the generation the API server gave it): a DaemonSet whose spec is still what was applied
        # is not applied again when only its status moved.
        self._daemonsets: dict[str, dict[str, Any]] = {}
        self._applied: dict[str, tuple[dict[str, Any], int]] = {}
        # CRs whose deletion a watch event showed: their DaemonSets' deletions need no reconcile.
        self._gone: set[Key] = set()
        # The plugin pods as their watch shows them (name → its ``app`` label and the few fields status and
        # conflict detection read), as upstream reads them from its informer cache; None until listed.
        self._pods: dict[str, tuple[str, dict[str, Any]]] | None = None

    def enqueue(self, kind: DeviceKind, name: str) -> None:
        if kind in self.cfg.kinds and name:
            self.queue.add((self.cfg.kinds[0], ALL_CRS) if self.cfg.combined else (kind, name))

    def on_cr_event(self, kind: DeviceKind, event: str | None, body: Mapping[str, Any]) -> None:
        """A watch event of a CR: queue it, unless the event only echoes this process's status write."""
        meta = body.get("metadata") or {}
        key = (kind, str(meta.get("name", "")))
        if event == "DELETED":
            self._gone.add(key)
            self._crs.pop(key, None)
        else:
            self._gone.discard(key)
            self._crs[key] = dict(body)
        if _echoes(event, meta, self._own_status.get(key)):
            return
        self.enqueue(*key)

    def on_cr_list(self, kind: DeviceKind, bodies: Sequence[Mapping[str, Any]]) -> None:
        """A (re)list of a kind's CRs: those known but no longer listed were deleted unseen."""
        listed = {str((body.get("metadata") or {}).get("name", "")) for body in bodies}
        for key in [k for k in self._crs if k[0] is kind and k[1] not in listed]:
            self.on_cr_event(kind, "DELETED", self._crs[key])
        for body in bodies:
            self.on_cr_event(kind, None, body)

    def on_daemonset_list(self, bodies: Sequence[Mapping[str, Any]]) -> None:
        for body in bodies:
            self.on_daemonset_event(None, body)

    def on_daemonset_event(self, event: str | None, body: Mapping[str, Any]) -> None:
        """A watch event of an owned DaemonSet: queue its CR, unless it echoes this process's apply."""
        meta = body.get("metadata") or {}
        name = str(meta.get("name", ""))
        if event == "DELETED":
            self._daemonsets.pop(name, None)
            self._applied.pop(name, None)
        else:
            self._daemonsets[name] = dict(body)
        if _echoes(event, meta, self._own_daemonset.get(name)):
            return
        if name in (COMBINED_NAME, COMBINED_DRA_NAME):
            self.enqueue_all()
            return
        key = owner_key(body, self.cfg.kinds)
        if key is not None and not (event == "DELETED" and key in self._gone):
            self.enqueue(*key)

    def on_pod_list(self, bodies: Sequence[Mapping[str, Any]]) -> None:
        """A (re)list of the plugin pods: the cache starts over, and every CR's status is looked at again
        (pods may have come and gone while the stream was away)."""
        self._pods = {}
        for body in bodies:
            meta = body.get("metadata") or {}
            self._pods[str(meta.get("name", ""))] = (
                str((meta.get("labels") or {}).get("app", "")),
                _pod_fields(body),
            )
        for key in list(self._crs):
            self.enqueue(*key)

    def on_pod_event(self, event: str | None, body: Mapping[str, Any]) -> None:
        """A watch event of a plugin pod: cache it, and queue its CR when what the status reads of it changed
        (its node, or the pod itself coming or going), as the DaemonSet's status may follow before it."""
        if self._pods is None:
            return  # not listed yet: the list that comes first replaces everything
        meta = body.get("metadata") or {}
        name = str(meta.get("name", ""))
        app = str((meta.get("labels") or {}).get("app", ""))
        fields = _pod_fields(body)
        if event == "DELETED":
            if self._pods.pop(name, None) is None:
                return
        else:
            if self._pods.get(name) == (app, fields):
                return
            self._pods[name] = (app, fields)
        for ref in fields["metadata"]["ownerReferences"]:
            ds_name = str(ref.get("name") or "")
            if ref["controller"] and ref.get("kind") == "DaemonSet" and ds_name.startswith(app + "-"):
                for kind in self.cfg.kinds:
                    if kind.daemonset_base == app and (kind, ds_name[len(app) + 1 :]) in self._crs:
                        self.enqueue(kind, ds_name[len(app) + 1 :])

    async def _apply(self, desired: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply ``desired`` unless the DaemonSet still holds it; the DaemonSet as it is now."""
        name = desired["metadata"]["name"]
        seen = self._daemonsets.get(name)
        if seen is not None and self._still_applied(desired, seen):
            return seen
        ds = await self.client.patch(
            DaemonSet,
            name,
            desired,
            namespace=self.cfg.namespace,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        self.metrics.daemonset_applies += 1
        applied = ds.to_dict()
        meta = applied.get("metadata") or {}
        if meta.get("resourceVersion"):
            self._own_daemonset[name] = meta["resourceVersion"]
        if isinstance(meta.get("generation"), int):
            self._applied[name] = (desired, meta["generation"])
        return applied

    def _still_applied(self, desired: Mapping[str, Any], seen: Mapping[str, Any]) -> bool:
        """Whether ``seen`` holds what was last applied: the same body wanted, the spec unchanged since (its
        generation), and the managed labels, annotations and owner as applied (their edits keep it)."""
        meta = seen.get("metadata") or {}
        last = self._applied.get(str(meta.get("name", "")))
        if last is None or last[0] != desired or meta.get("generation") != last[1]:
            return False
        want = desired["metadata"]
        return (
            _holds(meta.get("labels"), want.get("labels"))
            and _holds(meta.get("annotations"), want.get("annotations"))
            and meta.get("ownerReferences") == want.get("ownerReferences")
        )

    def enqueue_all(self) -> None:
        """Combined mode: the one DaemonSet changed, so every CR's status may have."""
        if self.cfg.combined and self.cfg.kinds:
            self.queue.add((self.cfg.kinds[0], ALL_CRS))

    async def run(self) -> None:
        """Run the workers and the periodic resync until cancelled."""
        await self._remove_other_mode()
        tasks = [
            asyncio.create_task(run_worker(self.queue, self._reconcile_key, self._failed))
            for _ in range(self.cfg.workers or len(self.cfg.kinds))
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def _reconcile_key(self, key: tuple[DeviceKind, str]) -> None:
        await self.reconcile(*key)

    def _failed(self, key: tuple[DeviceKind, str], exc: Exception) -> None:
        # the API may be restarting; the worker retries with back-off
        self.metrics.reconcile_errors += 1
        log.warning("reconcile %s/%s failed: %s", key[0].kind, key[1], exc)

    async def _remove_other_mode(self) -> None:
        """Delete the DaemonSets of the other arrangement, left over from before the setting changed."""
        try:
            async for ds in self.client.list(
                DaemonSet, namespace=self.cfg.namespace, labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE}
            ):
                name = ds.metadata.name if ds.metadata else ""
                if name and (name in (COMBINED_NAME, COMBINED_DRA_NAME)) != self.cfg.combined:
                    log.info("deleting DaemonSet %s of the other plugin arrangement", name)
                    await self.client.delete(DaemonSet, name, namespace=self.cfg.namespace)
        except Exception as exc:  # retried at the next start; the DaemonSets do no harm meanwhile
            log.warning("could not remove DaemonSets of the other plugin arrangement: %s", exc)

    async def reconcile(self, kind: DeviceKind, name: str) -> None:
        """Bring the DaemonSet and status of CR ``name`` in line with its spec."""
        if self.cfg.combined:
            await self.reconcile_combined()
            return
        self.metrics.reconciles += 1
        res = self.resources[kind]
        if (kind, name) in self._gone:  # the watch saw it deleted: garbage collection removes the DaemonSet
            self._requeue_siblings(kind, exclude=name)
            return
        try:
            cr: dict[str, Any] = self._crs.get((kind, name)) or dict(await self.client.get(res, name))
        except Exception as exc:
            if is_status(exc, 404):  # deleted: garbage collection removes the DaemonSet
                self._own_status.pop((kind, name), None)
                self._own_daemonset.pop(kind.daemonset_name(name), None)
                self._requeue_siblings(kind, exclude=name)
                return
            raise
        meta = cr.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        raw_status = cr.get("status")
        current: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
        generation = meta.get("generation")
        p = plan(
            kind,
            cr,
            self.cfg.image_env,
            self.cfg.namespace,
            self.cfg.pull_secret,
            self.cfg.fpga_service_account,
            self.cfg.dra_service_account,
        )
        for note in p.image_notes:
            log.info("%s/%s: %s", kind.kind, name, note)
        if p.daemonset is None:
            message = "; ".join(str(e) for e in p.errors)
            cond = Condition(CONDITION_SPEC_VALID, "False", "InvalidSpec", message, self._now(), generation)
            await self._write_status(kind, name, current, compute_status(None, (), (cond,)), cr)
            await self._event(kind, cr, "InvalidSpec", message)
            return
        ds = await self._apply(p.daemonset)
        base = kind.daemonset_base
        previous = [c for c in current.get("conditions") or () if isinstance(c, Mapping)]
        was_conflict = any(
            c.get("type") == CONDITION_NODE_CONFLICT and c.get("status") == "True" for c in previous
        )
        # A DaemonSet the DaemonSet controller has not handled yet has no pods this status could name, and
        # a CR without pods conflicts with nobody: the pod list waits for the reconcile that the
        # controller's first status write brings (unless a conflict reported before must be looked at).
        pods = await self._plugin_pods(base) if _synced(ds) or was_conflict else []
        # A CR the watch saw deleted conflicts with nobody, although its pods linger until garbage
        # collection removes them (no later event would clear the conflict otherwise).
        per_cr = {
            cr_name: nodes
            for ds_name, nodes in nodes_by_daemonset(pods).items()
            if ds_name.startswith(base + "-")
            and (kind, cr_name := ds_name[len(base) + 1 :]) not in self._gone
        }
        conflicts = node_conflicts(per_cr).get(name, {})
        cond = conflict_condition(kind, conflicts, self._now(), previous, generation)
        status = compute_status(ds, per_cr.get(name, ()), (cond,))
        if not _settled(ds, len(per_cr.get(name, ()))):
            self.queue.add_after((kind, name), UNSETTLED_RECHECK_SECONDS)
        if not current and not _synced(ds):
            # A new CR whose DaemonSet the DaemonSet controller has not handled yet: its status would say only
            # zeros. The controller's first status write follows within moments and queues this CR again (the
            # recheck above does if that event is lost), so the API server, busy admitting CRs created in the
            # same burst, is spared one write per CR.
            return
        if await self._write_status(kind, name, current, status, cr):
            if cond.status == "True" and not was_conflict:
                await self._event(kind, cr, "NodeConflict", cond.message)
            if (cond.status == "True") != was_conflict:
                for other in set(conflicts) | set(per_cr):
                    if other != name:
                        self.enqueue(kind, other)

    async def reconcile_combined(self) -> None:
        """Combined mode: one DaemonSet runs every enabled kind's device plugin, another every DRA driver
        (CRs with ``deployAs: DRADriver``); each CR's status follows its DaemonSet."""
        self.metrics.reconciles += 1
        crs: list[tuple[DeviceKind, dict[str, Any]]] = []
        for kind in self.cfg.kinds:
            async for cr in self.client.list(self.resources[kind]):
                body = dict(cr)
                if not (body.get("metadata") or {}).get("deletionTimestamp"):
                    crs.append((kind, body))
        members: list[Member] = []
        dra_members: list[Member] = []
        currents: dict[Key, Mapping[str, Any]] = {}
        generations: dict[Key, int | None] = {}
        for kind, body in crs:
            meta = body.get("metadata") or {}
            name = str(meta.get("name", ""))
            raw_status = body.get("status")
            current: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
            currents[(kind, name)], generations[(kind, name)] = current, meta.get("generation")
            try:
                spec = parse_spec(kind, body.get("spec"))
            except SpecError as exc:
                message = "; ".join(str(e) for e in exc.errors)
                cond = Condition(
                    CONDITION_SPEC_VALID, "False", "InvalidSpec", message, self._now(), meta.get("generation")
                )
                await self._write_status(kind, name, current, compute_status(None, (), (cond,)))
                await self._event(kind, body, "InvalidSpec", message)
                continue
            effective, notes = effective_spec(spec, self.cfg.image_env)
            for note in notes:
                log.info("%s/%s: %s", kind.kind, name, note)
            member = Member(effective, Owner(kind, name, str(meta.get("uid", ""))))
            (dra_members if profile_of(spec).deploys_dra(spec) else members).append(member)
        await self._combined_group(members, COMBINED_NAME, "plugin", currents, generations)
        await self._combined_group(dra_members, COMBINED_DRA_NAME, "DRA driver", currents, generations)

    async def _combined_group(
        self,
        members: Sequence[Member],
        name: str,
        what: str,
        currents: Mapping[Key, Mapping[str, Any]],
        generations: Mapping[Key, int | None],
    ) -> None:
        """Apply (or, with no member left, delete) one combined DaemonSet and write its members' status."""
        served, skipped = served_members(members)
        if not served:
            if name == COMBINED_DRA_NAME and name not in self._daemonsets:
                return  # it exists only once a DRADriver CR asked for it, and the watch then shows it
            try:
                await self.client.delete(DaemonSet, name, namespace=self.cfg.namespace)
            except Exception as exc:
                if is_status(exc, 403):
                    log.warning("no right to delete DaemonSet %s (deploy/operator/combined grants it)", name)
                elif not is_status(exc, 404):
                    raise
            return
        desired = (
            combined_dra_daemonset(
                served, self.cfg.namespace, self.cfg.pull_secret, self.cfg.dra_service_account
            )
            if name == COMBINED_DRA_NAME
            else combined_daemonset(
                served, self.cfg.namespace, self.cfg.pull_secret, self.cfg.fpga_service_account
            )
        )
        ds = await self.client.patch(
            DaemonSet,
            name,
            desired,
            namespace=self.cfg.namespace,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        self.metrics.daemonset_applies += 1
        pods = [
            _pod_summary(pod)
            async for pod in self.client.list(
                Pod, namespace=self.cfg.namespace, labels={"app": name}, chunk_size=POD_PAGE
            )
        ]
        nodes = nodes_by_daemonset(pods).get(name, ())
        ds_dict = ds.to_dict()
        for member in served:
            key = (member.owner.kind, member.owner.name)
            previous = [c for c in currents[key].get("conditions") or () if isinstance(c, Mapping)]
            cond = conflict_condition(key[0], {}, self._now(), previous, generations[key])
            await self._write_status(key[0], key[1], currents[key], compute_status(ds_dict, nodes, (cond,)))
        for member, instead in skipped:
            key = (member.owner.kind, member.owner.name)
            message = (
                f"the combined {what} process serves one {key[0].kind} per cluster: "
                f"{instead.owner.name} is served, this one is not"
            )
            cond = self._combined_condition(currents[key], "KindServedByAnotherCR", message, generations[key])
            await self._write_status(key[0], key[1], currents[key], compute_status(None, (), (cond,)))

    def _combined_condition(
        self, current: Mapping[str, Any], reason: str, message: str, generation: Any
    ) -> Condition:
        """A CR the combined process does not serve: CombinedProcess False, keeping the time it became so."""
        cond = Condition(CONDITION_COMBINED, "False", reason, message, self._now(), generation)
        for old in current.get("conditions") or ():
            if (
                isinstance(old, Mapping)
                and old.get("type") == CONDITION_COMBINED
                and old.get("status") == "False"
            ):
                cond = dataclasses.replace(cond, last_transition_time=str(old.get("lastTransitionTime")))
        return cond

    async def _plugin_pods(self, app: str) -> list[dict[str, Any]]:
        """The status and conflict fields of every pod labelled ``app=<app>`` (the DaemonSets of one kind):
        from the pod watch once it has listed, from the API server until then."""
        if self._pods is not None:
            return [fields for pod_app, fields in self._pods.values() if pod_app == app]
        return [
            _pod_summary(pod)
            async for pod in self.client.list(
                Pod, namespace=self.cfg.namespace, labels={"app": app}, chunk_size=POD_PAGE
            )
        ]

    async def _write_status(
        self,
        kind: DeviceKind,
        name: str,
        current: Mapping[str, Any],
        status: PluginStatus,
        read: Mapping[str, Any] | None = None,
    ) -> bool:
        """Patch the status if it differs from ``current``; the answer replaces the cached CR when that is
        still ``read``, the body the reconcile started from (a newer watch event wins)."""
        patch = status_patch(current, status)
        if patch is None:
            return False
        written = await self.client.patch(
            self.resources[kind].Status, name, {"status": patch}, patch_type=PatchType.MERGE
        )
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version:
            self._own_status[(kind, name)] = str(version)
        if read is not None and self._crs.get((kind, name)) is read:
            self._crs[(kind, name)] = dict(written)
        self.metrics.status_updates += 1
        return True

    def _requeue_siblings(self, kind: DeviceKind, exclude: str) -> None:
        """After a CR is gone, others of its kind may have lost a conflict: look at them again."""
        for (other_kind, name), cr in list(self._crs.items()):
            if other_kind is not kind:
                continue
            status = cr.get("status")
            conds = (status.get("conditions") or ()) if isinstance(status, Mapping) else ()
            if name != exclude and any(
                isinstance(c, Mapping)
                and c.get("type") == CONDITION_NODE_CONFLICT
                and c.get("status") == "True"
                for c in conds
            ):
                self.enqueue(kind, name)

    async def _event(self, kind: DeviceKind, cr: Mapping[str, Any], reason: str, message: str) -> None:
        meta = cr.get("metadata") or {}
        stamp = dt.datetime.now(dt.UTC)
        event = Event(
            metadata=ObjectMeta(generateName=f"{meta.get('name', 'cr')}.", namespace=EVENT_NAMESPACE),
            involvedObject=ObjectReference(
                apiVersion=API_VERSION, kind=kind.kind, name=meta.get("name"), uid=meta.get("uid")
            ),
            reason=reason,
            message=message[:1024],
            type="Warning",
            count=1,
            firstTimestamp=stamp,
            lastTimestamp=stamp,
            source=EventSource(component=FIELD_MANAGER),
        )
        try:
            await self.client.create(event)
        except Exception as exc:  # events are best effort
            log.info("could not post event %s for %s/%s: %s", reason, kind.kind, meta.get("name"), exc)


def watch_streams(reconciler: Reconciler) -> list[Coroutine[Any, Any, None]]:
    """The streams that feed the queue: every enabled kind's CRs, and the DaemonSets this operator manages."""
    client, cfg = reconciler.client, reconciler.cfg
    streams = [
        follow(
            client,
            reconciler.resources[kind],
            functools.partial(reconciler.on_cr_list, kind),
            functools.partial(reconciler.on_cr_event, kind),
            resync_s=cfg.resync_s,
        )
        for kind in cfg.kinds
    ]
    streams.append(
        follow(
            client,
            DaemonSet,
            reconciler.on_daemonset_list,
            reconciler.on_daemonset_event,
            namespace=cfg.namespace,
            labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            resync_s=cfg.resync_s,
        )
    )
    if not cfg.combined:  # the combined DaemonSet's reconcile lists its pods itself
        streams.append(
            follow(
                client,
                Pod,
                reconciler.on_pod_list,
                reconciler.on_pod_event,
                namespace=cfg.namespace,
                labels={"app": tuple(sorted(kind.daemonset_base for kind in cfg.kinds))},
                resync_s=cfg.resync_s,
                chunk_size=POD_PAGE,
                shape=_pod_record,
            )
        )
    return streams


ClientFactory = Callable[[], AsyncClient]


def default_client() -> AsyncClient:
    return AsyncClient(field_manager=FIELD_MANAGER)


async def wait_for_crds(
    client: AsyncClient, kinds: tuple[DeviceKind, ...], stop: threading.Event, retry_s: float = 2.0
) -> bool:
    """Block until every enabled kind is served by the API; False if ``stop`` is set first.

    The streams would retry a missing resource only now and then, so they start once the CRDs applied
    alongside the operator are established.
    """
    resources = cr_resources()
    pending = list(kinds)
    while pending and not stop.is_set():
        kind = pending[0]
        try:
            async for _ in client.list(resources[kind], chunk_size=1):
                break
            pending.pop(0)
            continue
        except Exception as exc:
            log.info("waiting for the %s CRD: %s", kind.kind, status_code(exc) or exc)
        await asyncio.to_thread(stop.wait, retry_s)
    return not pending


async def _controllers(
    config: ControllerConfig, metrics: Metrics, stop: threading.Event, client_factory: ClientFactory
) -> None:
    """Body of the controller thread: the watch streams and the reconcile workers, until ``stop`` is set.

    The streams retry and relist by themselves, so an API server restart never ends them.
    """
    client = client_factory()
    reconciler = Reconciler(client, config, metrics)
    workers = asyncio.create_task(reconciler.run())
    streams: list[asyncio.Task[None]] = []
    try:
        if not await wait_for_crds(client, config.kinds, stop):
            return
        streams = [asyncio.create_task(s) for s in watch_streams(reconciler)]
        await asyncio.to_thread(stop.wait)
    finally:
        for task in (*streams, workers):
            task.cancel()
        await asyncio.gather(*streams, workers, return_exceptions=True)
        with contextlib.suppress(Exception):
            await client.close()


async def run_controllers(
    config: ControllerConfig, metrics: Metrics, client_factory: ClientFactory = default_client
) -> None:
    """Run the controllers in their own thread and event loop until this coroutine is cancelled.

    A private loop keeps bursts of reconcile work from delaying the webhook server, the health probes and
    the leader election, which answer on the caller's loop.
    """
    stop = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(_controllers(config, metrics, stop, client_factory))
        except BaseException as exc:  # handed to the caller's loop below
            failure.append(exc)

    thread = threading.Thread(target=target, name="controllers", daemon=True)
    thread.start()
    try:
        await asyncio.to_thread(thread.join)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 20)
    if failure:
        raise RuntimeError("controller thread failed") from failure[0]
