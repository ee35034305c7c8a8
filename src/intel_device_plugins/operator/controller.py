"""The reconcile loop: kopf watches feed a work queue; workers apply the pure plan with lightkube.

kopf is used for what it does well — resilient list/watch streams with reconnects — through low-level event
handlers, which store nothing on the objects (no finalizers, no annotations). Each event only queues the CR
it concerns, and a worker then reconciles that CR from the current state of the cluster (level-based): the
DaemonSet is server-side applied under ``FIELD_MANAGER`` with force, so a repeat changes nothing and hand
edits to managed fields are reverted; the status is patched only when it differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

import kopf
from lightkube import AsyncClient
from lightkube.generic_resource import GenericGlobalResource, create_global_resource
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Pod
from lightkube.types import PatchType

from intel_device_plugins.kube.apierrors import is_status, status_code
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.workqueue import WorkQueue, backoff, run_worker
from intel_device_plugins.operator.combined import COMBINED_NAME, Member, combined_daemonset, served_members
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
    workers: int = 2
    fpga_service_account: str = ""
    """ServiceAccount of FPGA plugin pods (it may get nodes); empty runs them under the namespace default."""
    resync_s: float = 300.0
    combined: bool = False
    """Run every enabled kind in one ``intel_device_plugins`` process per node (one DaemonSet for all CRs)."""
    identity: str = "intel-deviceplugin-operator"
    """Who this process is (the pod name). Given to kopf, which would otherwise ask the user database for
    the user's name and fail when the container runs as a uid without a passwd entry."""


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

    def enqueue(self, kind: DeviceKind, name: str) -> None:
        if kind in self.cfg.kinds and name:
            self.queue.add((self.cfg.kinds[0], ALL_CRS) if self.cfg.combined else (kind, name))

    def enqueue_all(self) -> None:
        """Combined mode: the one DaemonSet changed, so every CR's status may have."""
        if self.cfg.combined and self.cfg.kinds:
            self.queue.add((self.cfg.kinds[0], ALL_CRS))

    async def run(self) -> None:
        """Run the workers and the periodic resync until cancelled."""
        await self._remove_other_mode()
        tasks = [
            asyncio.create_task(run_worker(self.queue, self._reconcile_key, self._failed))
            for _ in range(self.cfg.workers)
        ]
        tasks.append(asyncio.create_task(self._resync()))
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

    async def _resync(self) -> None:
        """Queue every CR now and then: a safety net for missed events, cheap when nothing changed."""
        while True:
            await asyncio.sleep(self.cfg.resync_s)
            for kind in self.cfg.kinds:
                try:
                    async for cr in self.client.list(self.resources[kind]):
                        self.enqueue(kind, str((cr.get("metadata") or {}).get("name", "")))
                except Exception as exc:
                    log.warning("resync of %s failed: %s", kind.kind, exc)

    async def _remove_other_mode(self) -> None:
        """Delete the DaemonSets of the other arrangement, left over from before the setting changed."""
        try:
            async for ds in self.client.list(
                DaemonSet, namespace=self.cfg.namespace, labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE}
            ):
                name = ds.metadata.name if ds.metadata else ""
                if name and (name == COMBINED_NAME) != self.cfg.combined:
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
        try:
            cr: dict[str, Any] = dict(await self.client.get(res, name))
        except Exception as exc:
            if is_status(exc, 404):  # deleted: garbage collection removes the DaemonSet
                await self._requeue_siblings(kind, exclude=name)
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
        )
        for note in p.image_notes:
            log.info("%s/%s: %s", kind.kind, name, note)
        if p.daemonset is None:
            message = "; ".join(str(e) for e in p.errors)
            cond = Condition(CONDITION_SPEC_VALID, "False", "InvalidSpec", message, self._now(), generation)
            await self._write_status(kind, name, current, compute_status(None, (), (cond,)))
            await self._event(kind, cr, "InvalidSpec", message)
            return
        ds = await self.client.patch(
            DaemonSet,
            p.daemonset["metadata"]["name"],
            p.daemonset,
            namespace=self.cfg.namespace,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        self.metrics.daemonset_applies += 1
        base = kind.daemonset_base
        pods = [
            _pod_summary(pod)
            async for pod in self.client.list(
                Pod, namespace=self.cfg.namespace, labels={"app": base}, chunk_size=POD_PAGE
            )
        ]
        per_cr = {
            ds_name[len(base) + 1 :]: nodes
            for ds_name, nodes in nodes_by_daemonset(pods).items()
            if ds_name.startswith(base + "-")
        }
        conflicts = node_conflicts(per_cr).get(name, {})
        previous = [c for c in current.get("conditions") or () if isinstance(c, Mapping)]
        cond = conflict_condition(kind, conflicts, self._now(), previous, generation)
        status = compute_status(ds.to_dict(), per_cr.get(name, ()), (cond,))
        was_conflict = any(
            c.get("type") == CONDITION_NODE_CONFLICT and c.get("status") == "True" for c in previous
        )
        if await self._write_status(kind, name, current, status):
            if cond.status == "True" and not was_conflict:
                await self._event(kind, cr, "NodeConflict", cond.message)
            if (cond.status == "True") != was_conflict:
                for other in set(conflicts) | set(per_cr):
                    if other != name:
                        self.enqueue(kind, other)

    async def reconcile_combined(self) -> None:
        """Combined mode: one DaemonSet runs every enabled kind; each CR's status follows it."""
        self.metrics.reconciles += 1
        crs: list[tuple[DeviceKind, dict[str, Any]]] = []
        for kind in self.cfg.kinds:
            async for cr in self.client.list(self.resources[kind]):
                body = dict(cr)
                if not (body.get("metadata") or {}).get("deletionTimestamp"):
                    crs.append((kind, body))
        members: list[Member] = []
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
            members.append(Member(effective, Owner(kind, name, str(meta.get("uid", "")))))
        served, skipped = served_members(members)
        if not served:
            try:
                await self.client.delete(DaemonSet, COMBINED_NAME, namespace=self.cfg.namespace)
            except Exception as exc:
                if is_status(exc, 403):
                    log.warning(
                        "no right to delete DaemonSet %s (deploy/operator/combined grants it)", COMBINED_NAME
                    )
                elif not is_status(exc, 404):
                    raise
            return
        ds = await self.client.patch(
            DaemonSet,
            COMBINED_NAME,
            combined_daemonset(
                served, self.cfg.namespace, self.cfg.pull_secret, self.cfg.fpga_service_account
            ),
            namespace=self.cfg.namespace,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        self.metrics.daemonset_applies += 1
        pods = [
            _pod_summary(pod)
            async for pod in self.client.list(
                Pod, namespace=self.cfg.namespace, labels={"app": COMBINED_NAME}, chunk_size=POD_PAGE
            )
        ]
        nodes = nodes_by_daemonset(pods).get(COMBINED_NAME, ())
        ds_dict = ds.to_dict()
        for member in served:
            key = (member.owner.kind, member.owner.name)
            previous = [c for c in currents[key].get("conditions") or () if isinstance(c, Mapping)]
            cond = conflict_condition(key[0], {}, self._now(), previous, generations[key])
            await self._write_status(key[0], key[1], currents[key], compute_status(ds_dict, nodes, (cond,)))
        for member, instead in skipped:
            key = (member.owner.kind, member.owner.name)
            message = (
                f"the combined plugin process serves one {key[0].kind} per cluster: "
                f"{instead.owner.name} is served, this one is not"
            )
            cond = Condition(
                CONDITION_COMBINED, "False", "KindServedByAnotherCR", message, self._now(), generations[key]
            )
            for old in currents[key].get("conditions") or ():
                if (
                    isinstance(old, Mapping)
                    and old.get("type") == CONDITION_COMBINED
                    and old.get("status") == "False"
                ):
                    cond = dataclasses.replace(cond, last_transition_time=str(old.get("lastTransitionTime")))
            await self._write_status(key[0], key[1], currents[key], compute_status(None, (), (cond,)))

    async def _write_status(
        self, kind: DeviceKind, name: str, current: Mapping[str, Any], status: PluginStatus
    ) -> bool:
        patch = status_patch(current, status)
        if patch is None:
            return False
        await self.client.patch(
            self.resources[kind].Status, name, {"status": patch}, patch_type=PatchType.MERGE
        )
        self.metrics.status_updates += 1
        return True

    async def _requeue_siblings(self, kind: DeviceKind, exclude: str) -> None:
        """After a CR is gone, others of its kind may have lost a conflict: look at them again."""
        async for cr in self.client.list(self.resources[kind]):
            name = str((cr.get("metadata") or {}).get("name", ""))
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


def in_cluster_server(env: Mapping[str, str]) -> str | None:
    """The API server's URL from the ``kubernetes`` Service variables the kubelet sets in every pod.

    kopf's own service-account login names ``kubernetes.default.svc``, which needs cluster DNS; the
    lightkube client and client-go's in-cluster configuration use these variables, so the operator's
    watches work wherever its other API calls do (a node without cluster DNS, host networking).
    """
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def build_registry(reconciler: Reconciler) -> kopf.OperatorRegistry:
    """kopf registry with one event handler per enabled kind, one for owned DaemonSets, and login."""
    registry = kopf.OperatorRegistry()
    kinds = reconciler.cfg.kinds

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = kopf.login_with_service_account(**kwargs)
        if info is None:
            return kopf.login_with_kubeconfig(**kwargs)
        server = in_cluster_server(os.environ)
        return dataclasses.replace(info, server=server) if server else info

    for kind in kinds:

        def on_cr(body: kopf.Body, _kind: DeviceKind = kind, **_: Any) -> None:
            reconciler.enqueue(_kind, str(body.get("metadata", {}).get("name", "")))

        kopf.on.event(GROUP, VERSION, kind.plural, registry=registry, id=f"cr-{kind.value}")(on_cr)

    @kopf.on.event("apps", "v1", "daemonsets", labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE}, registry=registry)
    def on_daemonset(body: kopf.Body, **_: Any) -> None:
        if (body.get("metadata") or {}).get("name") == COMBINED_NAME:
            reconciler.enqueue_all()
            return
        key = owner_key(body, kinds)
        if key is not None:
            reconciler.enqueue(*key)

    return registry


def kopf_settings() -> kopf.OperatorSettings:
    """Settings for running kopf as a pure watcher: no peering CRDs, no cluster scanning, no event posting."""
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    settings.scanning.disabled = True
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.error_backoffs = (1, 2, 4)  # give up fast; run_controllers restarts the watches
    return settings


ClientFactory = Callable[[], AsyncClient]


def default_client() -> AsyncClient:
    return AsyncClient(field_manager=FIELD_MANAGER)


async def wait_for_crds(
    client: AsyncClient, kinds: tuple[DeviceKind, ...], stop: threading.Event, retry_s: float = 2.0
) -> bool:
    """Block until every enabled kind is served by the API; False if ``stop`` is set first.

    kopf resolves the resources it watches once at start-up (scanning is off to spare RBAC), so it must not
    start before the CRDs applied alongside the operator are established.
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
    """Body of the controller thread: kopf watches plus reconcile workers on this thread's own loop.

    If kopf gives up (e.g. the API server stays unreachable past its retries), it is started again after a
    back-off, so an API server restart never ends the process.
    """
    client = client_factory()
    reconciler = Reconciler(client, config, metrics)
    registry = build_registry(reconciler)
    workers = asyncio.create_task(reconciler.run())  # exists before kopf starts, so kopf leaves it alone
    failures = 0
    try:
        if not await wait_for_crds(client, config.kinds, stop):
            return
        while not stop.is_set():
            try:
                await kopf.operator(
                    registry=registry,
                    settings=kopf_settings(),
                    namespaces=[config.namespace],
                    standalone=True,
                    identity=config.identity,  # type: ignore[arg-type]  # kopf's Identity is a NewType of str
                    stop_flag=stop,
                )
                failures = 0
                continue
            except Exception as exc:
                failures += 1
                delay = backoff(failures, base=1.0, ceiling=30.0)
                log.error("watches stopped (%s); restarting in %.0f s", exc, delay)
            await asyncio.to_thread(stop.wait, delay)
    finally:
        workers.cancel()
        await asyncio.gather(workers, return_exceptions=True)
        with contextlib.suppress(Exception):
            await client.close()


async def run_controllers(
    config: ControllerConfig, metrics: Metrics, client_factory: ClientFactory = default_client
) -> None:
    """Run the controllers in their own thread and event loop until this coroutine is cancelled.

    kopf cancels every task created in its loop after it started when it stops, and it replaces the process's
    signal handlers; a private loop keeps the webhook server, health probes and leader election out of reach.
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
